#!/usr/bin/env python3
"""How check prints an error on a terminal, as clang does (issue 27, item 3).

- The caret line: `^` under the error's column and `~` under the rest of
  the operator, call or indexing the error is about, on that line
  (`a @ b` -> `~~^~~`); a part on an earlier line starts the marks at the
  line's first non-blank byte, one on a later line runs them to its end; tabs in the line stay tabs under it; notes are marked the same way.
  --diagnostics=json gives that extent as the error's "range".
- Colour: with --color=always the place is bold, "error:" bold red, the
  message bold, the marks bold green, "note:" bold cyan; on a terminal
  (a pty) by default; never into a pipe, with NO_COLOR set (not empty), with
  TERM=dumb or with --color=never; --color=always wins over NO_COLOR (a
  command line over the environment, as no-color.org asks); a bad --color
  is exit 2.
"""
import json
import os
import pty
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import testlib  # noqa: E402

PROGRAM = """mesh {X: 2}

fn main() {
    let a: f32[8@X] = zeros()
    let b = a @ a
    let c = sum(a
\t\t@ a)
\tlet d =\t(a @ a)
    let e = a @ (a
        )
    print(b + c + d + e)
}
"""
ESC = "\x1b["


def marks(stderr, line_text):
    """The marks line printed under the source line line_text."""
    lines = stderr.split("\n")
    for i, l in enumerate(lines[:-1]):
        if l == "  " + line_text:
            return lines[i + 1][2:]
    return None


def run_pty(argv, env):
    """argv with its stderr on a terminal; what it wrote there."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=60)
    os.close(master)
    return p.returncode, out.decode(errors="replace").replace("\r\n", "\n")


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "r.shd")
        with open(src, "w") as f:
            f.write(PROGRAM)
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
        p = subprocess.run([shdc, "check", src], capture_output=True, text=True, env=env, timeout=60)
        want = {
            "    let b = a @ a": "            ~~^~~",
            "\t\t@ a)": "\t\t^~~",
            "\tlet d =\t(a @ a)": "\t       \t ~~^~~",
            "    let e = a @ (a": "            ~~^~~~",
        }
        for line, m in want.items():
            got = marks(p.stderr, line)
            if got != m:
                failures.append("under %r: %r, expected %r\n%s" % (line, got, m, p.stderr))
        if ESC in p.stderr:
            failures.append("colour into a pipe:\n%r" % p.stderr)
        j = subprocess.run([shdc, "check", "--diagnostics=json", src], capture_output=True, text=True, timeout=60)
        first = json.loads(j.stdout)[0]
        if (first["line"], first["column"], first.get("range")) != (5, 15, {"line": 5, "column": 13, "endLine": 5,
                                                                         "endColumn": 18}):
            failures.append("json: the first error's place and range: %s" % first)

        always = subprocess.run([shdc, "check", "--color=always", src], capture_output=True, text=True,
                                env=dict(env, NO_COLOR="1"), timeout=60).stderr
        for piece in (ESC + "1m" + src + ":5:15: " + ESC + "0m", ESC + "1;31merror: " + ESC + "0m" + ESC + "1m",
                      ESC + "1;32m~~^~~" + ESC + "0m"):
            if piece not in always:
                failures.append("--color=always (NO_COLOR=1 set): no %r in\n%r" % (piece, always[:600]))
        if re.sub(r"\x1b\[[0-9;]*m", "", always) != p.stderr:
            failures.append("--color=always is not the plain text with colour added")
        cases = [([], {}, True), ([], {"NO_COLOR": "1"}, False), ([], {"NO_COLOR": ""}, True),
                 ([], {"TERM": "dumb"}, False), (["--color=never"], {}, False), (["--color=auto"], {}, True)]
        for flags, extra, coloured in cases:
            rc, out = run_pty([shdc, "check", src] + flags, dict(dict(env, TERM="xterm"), **extra))
            if rc != 1 or (ESC + "1;31merror: " in out) != coloured:
                failures.append("on a terminal, %s %s: exit %d, colour %s (expected %s):\n%r" % (
                    " ".join(flags), extra, rc, ESC in out, coloured, out[:300]))
        bad = subprocess.run([shdc, "check", "--color=sometimes", src], capture_output=True, text=True, timeout=60)
        if bad.returncode != 2 or "--color is auto" not in bad.stderr:
            failures.append("--color=sometimes: exit %d\n%s" % (bad.returncode, bad.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("carets mark the whole expression; colour on terminals only, as NO_COLOR, TERM and --color say")


if __name__ == "__main__":
    main()
