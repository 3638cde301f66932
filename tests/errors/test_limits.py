#!/usr/bin/env python3
"""The compiler's resources stay bounded whatever the program (issue 11,
item 4): time near-linear in the program's size, no recursion whose depth the
program controls (a long call chain is walked with explicit stacks), a limit
on printed errors, errors rather than blow-ups where a limit is reached.

Each generated program must get its answer (exit 0, or 1 with the expected
diagnostic) within a time far above what it takes (well under a second
each here, before this work: minutes, gigabytes or a stack overflow).
"""
# SERIAL: it bounds the compiler's time on huge programs, so it runs alone
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT_S = 60


def chain(n, op="+ 1.0", grad=False):
    out = ["mesh {X: 2}", "fn g0(x: f32[8@X]) -> f32[8@X] { return x * 2.0 }"]
    out += ["fn g%d(x: f32[8@X]) -> f32[8@X] { return g%d(x) %s }" % (i, i - 1, op) for i in range(1, n)]
    out.append("fn loss(x: f32[8@X]) -> f32 { return sum(g%d(x)) }" % (n - 1))
    call = "grad(loss)(x)" if grad else "loss(x)"
    out.append('fn main() {\n  let x: f32[8@X] = ones()\n  print("r", %s)\n}' % call)
    return "\n".join(out) + "\n"


def doubling(n):
    """Each function calls the next one twice: inlining doubles per level."""
    out = ["mesh {X: 2}", "fn h0(x: f32[8@X]) -> f32[8@X] { return x * 2.0 }"]
    out += ["fn h%d(x: f32[8@X]) -> f32[8@X] { return h%d(x) + h%d(x * 0.5) }" % (i, i - 1, i - 1) for i in range(1, n)]
    out.append("fn loss(x: f32[8@X]) -> f32 { return sum(h%d(x)) }" % (n - 1))
    out.append('fn main() {\n  let x: f32[8@X] = ones()\n  print("g", grad(loss)(x))\n  print("v", loss(x))\n}')
    return "\n".join(out) + "\n"


def nested_loops(n):
    body = ["mesh {X: 2}", "fn main() {", "  var x: f32[8@X] = ones()"]
    body += [" " * i + "for j%d in 0..2 {" % i for i in range(n)]
    body += ["x = x + 1.0"] + ["}"] * n + ['print("x", x)', "}"]
    return "\n".join(body) + "\n"


def long_body(n):
    out = ["mesh {X: 2}", "fn main() {", "  let a0: f32[8@X] = ones()"]
    out += ["  let a%d = a%d * 1.5 + a%d" % (i, i - 1, max(0, i - 7)) for i in range(1, n)]
    out += ['  print("s", sum(a%d))' % (n - 1), "}"]
    return "\n".join(out) + "\n"


def bad_lines(n):
    return "mesh {X: 2}\nfn main() {\n" + "".join("  let a%d = zzz%d\n" % (i, i) for i in range(n)) + "}\n"


def deep_parens(n):
    return "mesh {X: 2}\nfn main() {\n  let x: f32[8@X] = ones()\n  let y = %sx%s\n  print(\"y\", y)\n}\n" % (
        "(" * n, " + 1.0)" * n)


CASES = [
    # name, program, commands, exit status, stderr pattern
    ("10000-function chain", chain(10000), ["check", "explain", "emit-c"], 0, None),
    ("2000-deep chain under grad", chain(2000, "* x", grad=True), ["check", "explain", "emit-c"], 0, None),
    ("120 nested loops", nested_loops(120), ["check", "explain", "emit-c"], 0, None),
    ("50000-statement function", long_body(50000), ["check", "explain", "emit-c"], 0, None),
    ("grad inlining that doubles 40 times", doubling(40), ["check"], 1,
     r"error: differentiating loss copies more than \d+ instructions.*\[E_GRAD\]"),
    ("100000 bad lines", bad_lines(100000), ["check"], 1, r"shdc: .*: 99900 more errors not shown \(--max-errors=100"),
    ("500 nested parentheses", deep_parens(500), ["check", "emit-c"], 0, None),
    ("2000 nested parentheses", deep_parens(2000), ["check"], 1, r"nests too deeply.*\[E_SYNTAX\]"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    failures, report = [], []
    with tempfile.TemporaryDirectory() as d:
        for name, text, cmds, want, pattern in CASES:
            path = os.path.join(d, re.sub(r"\W+", "_", name) + ".shd")
            with open(path, "w") as f:
                f.write(text)
            for cmd in cmds:
                t0 = time.time()
                try:
                    p = subprocess.run([shdc, cmd, path], capture_output=True, text=True, timeout=LIMIT_S)
                except subprocess.TimeoutExpired:
                    failures.append("%s: shdc %s took more than %d s" % (name, cmd, LIMIT_S))
                    continue
                dt = time.time() - t0
                report.append("%-36s %-8s %6.2f s" % (name, cmd, dt))
                if p.returncode != want or (pattern and not re.search(pattern, p.stderr, re.M)):
                    failures.append("%s: shdc %s exit %d, expected %d%s:\n%s" % (
                        name, cmd, p.returncode, want, " and /%s/" % pattern if pattern else "", p.stderr[-2000:]))
                shown = len(re.findall(r"^\S+:\d+:\d+: error: ", p.stderr, re.M))
                if shown > 100:
                    failures.append("%s: %d errors printed, more than --max-errors=100" % (name, shown))
        path = os.path.join(d, "few.shd")
        with open(path, "w") as f:
            f.write(bad_lines(50))
        p = subprocess.run([shdc, "check", "--max-errors=5", path], capture_output=True, text=True, timeout=LIMIT_S)
        if len(re.findall(r"^\S+:\d+:\d+: error: ", p.stderr, re.M)) != 5 or "45 more errors not shown" not in p.stderr:
            failures.append("--max-errors=5: expected 5 errors and '45 more errors not shown':\n" + p.stderr)
        p = subprocess.run([shdc, "check", "--max-errors=0", path], capture_output=True, text=True, timeout=LIMIT_S)
        if len(re.findall(r"^\S+:\d+:\d+: error: ", p.stderr, re.M)) != 50 or "not shown" in p.stderr:
            failures.append("--max-errors=0: expected all 50 errors:\n" + p.stderr[-500:])
        # A 30 kB line with errors on it: the snippet is a window around the
        # caret, and the caret still points at the error's column.
        path = os.path.join(d, "long_line.shd")
        with open(path, "w") as f:
            f.write("mesh {X: 2}\nfn main() {\n" + "".join("if b%d {" % i for i in range(3000)) + "}" * 3000 + "\n}\n")
        line = open(path).read().split("\n")[2]
        t0 = time.time()
        p = subprocess.run([shdc, "check", path], capture_output=True, text=True, timeout=LIMIT_S)
        report.append("%-36s %-8s %6.2f s" % ("30 kB line of errors", "check", time.time() - t0))
        err = p.stderr.split("\n")
        m = re.match(r"^\S+:3:(\d+): error: ", err[0])
        if p.returncode != 1 or not m or len(p.stderr) > 101 * 1000:
            failures.append("long line: exit %d, %d bytes of stderr (a window per error expected):\n%s" % (
                p.returncode, len(p.stderr), p.stderr[:800]))
        else:
            col, snippet, caret = int(m.group(1)), err[1][2:], err[2][2:]
            if len(snippet) > 260 or not caret.endswith("^"):
                failures.append("long line: snippet of %d bytes, caret line %r" % (len(snippet), caret[-20:]))
            else:
                shown_from = line.find(snippet.strip(".")[:60])
                at = shown_from + len(caret) - 1 - (3 if snippet.startswith("...") else 0)
                if shown_from < 0 or at != col - 1:
                    failures.append("long line: the caret points at byte %d, the error is at column %d" % (at + 1, col))
    print("\n".join(report))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
