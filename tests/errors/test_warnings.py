#!/usr/bin/env python3
"""Warnings and help lines, as clang and rustc give them (issue 27, item 3).

- tests/errors/warnings.shd: check exits 0 with each warning as
  `FILE:LINE:COL: warning: MESSAGE [W_CODE]`, its source line and marks;
  a fix that is a text edit follows as `= help: WHAT` and the source line
  with the edit applied, the new text marked (rustc's suggestions), before
  the explain-error hint; with --color=always "warning:" is bold magenta.
- -Werror makes every warning an error (exit 1), -Werror=NAME one kind,
  -Wno-NAME leaves one out, -w all; a mistyped name is a usage error (exit 2)
  with the nearest name; commands that give no warnings refuse -W; build
  -Werror stops before compiling (exit 1, no program).
- --diagnostics=json: severity "warning"; sarif: level "warning", and the W_
  rules' default level is warning.
- tests/errors/combine.shd: the all_gather where psum was meant has the
  psum as a help line; E_ANNOT at a call has a note at the parameter's
  declaration, after the error and before its hint.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import testlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WARN = os.path.join(HERE, "warnings.shd")
COMBINE = os.path.join(HERE, "combine.shd")
LINE = re.compile(r"^\S+:(\d+):\d+: (error|warning): .* \[([EW]_[A-Z_]+)\]$", re.M)


def check(shdc, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    return subprocess.run([shdc] + list(args), capture_output=True, text=True, timeout=60, env=env)


def kinds(stderr):
    return sorted((int(l), k, c) for l, k, c in LINE.findall(stderr))


def main():
    shdc = testlib.shdc_option()
    failures = []
    p = check(shdc, "check", WARN)
    got = kinds(p.stderr)
    want = [(8, "warning", "W_PSUM_INVARIANT"), (16, "warning", "W_UNUSED"), (22, "warning", "W_UNUSED"),
            (24, "warning", "W_RESHARD_ROUNDTRIP"), (25, "warning", "W_RESHARD_ROUNDTRIP"),
            (27, "warning", "W_RESHARD_ROUNDTRIP"), (36, "warning", "W_UNUSED"), (38, "warning", "W_UNUSED")]
    if p.returncode != 0 or got != want:
        failures.append("check warnings.shd: exit %d, %s, expected exit 0 and %s\n%s" % (p.returncode, got, want,
                                                                                        p.stderr))
    # rustc's suggestion: the help, the edited line, the new text marked; then the hint
    block = ("      let doubled = a * 2.0                               // WARNING: W_UNUSED | `doubled` is never "
             "read.*`_doubled`\n"
             "          ^~~~~~~\n"
             "  = help: if `doubled` is meant to be unused, name it `_doubled`\n"
             "          let _doubled = a * 2.0")
    if block not in p.stderr:
        failures.append("no help line with the edited source after the unused `doubled`:\n%s" % p.stderr)
    for piece in ("  = help: drop both reshards\n          let b = a   // WARNING",
                  "  = help: drop the psum: s is already the same on every device\n"
                  "          return s / cast(n, f32)",
                  "          let _doubled = a * 2.0                               // WARNING: W_UNUSED | `doubled` is "
                  "never read.*`_doubled`\n              +\n  = help: shdc explain-error W_UNUSED"):
        if piece not in p.stderr:
            failures.append("check warnings.shd: no %r in\n%s" % (piece, p.stderr))
    colour = check(shdc, "check", "--color=always", WARN).stderr
    if "\x1b[1;35mwarning: \x1b[0m" not in colour or re.sub(r"\x1b\[[0-9;]*m", "", colour) != p.stderr:
        failures.append("--color=always: no bold magenta warning:, or not the plain text coloured:\n%r" % colour[:400])

    # -W options: (arguments, exit status, the (kind, code) pairs)
    every = [(k, c) for _, k, c in want]
    cases = [
        (["-Werror"], 1, [("error", c) for _, c in every]),
        (["-Werror", "-Wno-unused"], 1, [("error", c) for _, c in every if c != "W_UNUSED"]),
        (["-Werror=unused"], 1, [("error" if c == "W_UNUSED" else "warning", c) for _, c in every]),
        (["-Werror", "-Wno-error=psum-invariant"], 1,
         [("warning" if c == "W_PSUM_INVARIANT" else "error", c) for _, c in every]),
        (["-Wno-unused", "-Wno-psum-invariant", "-Wno-reshard-roundtrip"], 0, []),
        (["-Wno-W_UNUSED", "-Wunused"], 0, every),
        (["-w"], 0, []),
        (["-Werror", "-w"], 0, []),
    ]
    for args, rc, pairs in cases:
        q = check(shdc, "check", *args, WARN)
        got = sorted((k, c) for _, k, c in kinds(q.stderr))
        if q.returncode != rc or got != sorted(pairs) or (not pairs and q.stderr):
            failures.append("check %s: exit %d, %s; expected exit %d, %s\n%s" % (" ".join(args), q.returncode, got,
                                                                                rc, sorted(pairs), q.stderr))
    for args, text in ((["check", "-Wno-unusd", WARN], "unknown warning option '-Wno-unusd'; did you mean "
                                                         "'-Wno-unused'?"),
                       (["types", "-Werror", WARN], "-W is an option of build, check and lsp"),
                       (["check", "-Wbogus", WARN], "the warnings: psum-invariant, unused, reshard-roundtrip")):
        q = check(shdc, *args)
        if q.returncode != 2 or text not in q.stderr:
            failures.append("%s: exit %d, expected 2 and %r:\n%s" % (" ".join(args), q.returncode, text, q.stderr))
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "prog")
        q = check(shdc, "build", "-Werror", WARN, "-o", prog)
        if q.returncode != 1 or os.path.exists(prog) or "error: " not in q.stderr:
            failures.append("build -Werror: exit %d, program made: %s\n%s" % (q.returncode, os.path.exists(prog),
                                                                            q.stderr))

    # JSON and SARIF
    j = json.loads(check(shdc, "check", "--diagnostics=json", WARN).stdout)
    if sorted((d["line"], d["severity"], d["code"]) for d in j) != want or not all(d["fixes"] for d in j):
        failures.append("json: %s" % [(d["line"], d["severity"], d["code"], len(d["fixes"])) for d in j])
    # a warning left out takes its fix with it (it once went to the diagnostic before)
    j = json.loads(check(shdc, "check", "--diagnostics=json", "-Wno-unused", WARN).stdout)
    if any(d["code"] == "W_UNUSED" or len(d["fixes"]) != 1 or d["fixes"][0]["replacement"].startswith("_")
           for d in j):
        failures.append("json -Wno-unused: %s" % [(d["line"], d["code"], d["fixes"]) for d in j])
    s = json.loads(check(shdc, "check", "--diagnostics=sarif", WARN).stdout)["runs"][0]
    levels = sorted((r["ruleId"], r["level"]) for r in s["results"])
    rules = {r["id"]: r["defaultConfiguration"]["level"] for r in s["tool"]["driver"]["rules"]}
    if levels != sorted((c, "warning") for _, _, c in want) or \
            any(level != ("warning" if rule.startswith("W_") else "error") for rule, level in rules.items()) or \
            not {"W_UNUSED", "W_PSUM_INVARIANT", "W_RESHARD_ROUNDTRIP"} <= set(rules):
        failures.append("sarif: results %s, rules %s" % (levels, rules))

    # the all_gather meant as psum, and the note at a parameter's declaration
    c = check(shdc, "check", COMBINE)
    if c.returncode != 1:
        failures.append("check combine.shd: exit %d" % c.returncode)
    if "  = help: sum the pieces: psum(p, X)\n          return psum(p, X)  " not in c.stderr:
        failures.append("combine.shd: no psum help line for the all_gather:\n%s" % c.stderr)
    note = re.search(r"^\S+combine\.shd:38:15: error: argument 'x' of k: .*\n(?:  .*\n)*?"
                     r"(\S+combine\.shd:31:6: note: parameter 'x' of k is declared f32\[8,4\] here\n"
                     r"  fn k\(x: f32\[8, 4\]\) -> f32 \{\n       \^\n)"
                     r"  = help: reshard the value to f32\[8,4\]\n"
                     r"          print\(k\(reshard\(b \* 2\.0, f32\[8,4\]\)\)\)", c.stderr, re.M)
    if not note:
        failures.append("combine.shd: E_ANNOT at the call lacks the note at the parameter, or the help:\n%s"
                        % c.stderr)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("warnings with codes, ranges, colour and help lines; -Werror, -Werror=NAME, -Wno-NAME, -w; json and sarif "
          "severities; psum for a gather meant as a sum; a note at the parameter")


if __name__ == "__main__":
    main()
