#!/usr/bin/env python3
"""Exit status of shdc (fixed): 0 clean, 1 errors in the program, 2 usage or
I/O trouble; and one diagnostic per error in the fixed format on stderr."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIAG = re.compile(r"^\S+:\d+:\d+: error: .* \[E_[A-Z]+\]$", re.M)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    good = os.path.join(ROOT, "tests", "docs", "broadcast.shd")
    bad = os.path.join(ROOT, "tests", "errors", "shapes.shd")
    with tempfile.TemporaryDirectory() as d:
        cases = [
            (["check", good], 0),
            (["check", bad], 1),
            (["check", good, bad], 1),            # several files: the worst status
            (["types", bad], 1),
            (["emit-ir", bad], 1),
            (["build", bad, "-o", os.path.join(d, "p")], 1),
            (["check", os.path.join(d, "missing.shd")], 2),
            (["frobnicate", good], 2),
            (["check"], 2),
            (["check", good, "--bogus"], 2),
            (["check", good, "--mesh", "Q=2"], 2),
            (["check", good, "--mesh", "X=0"], 2),
            (["check", good, "--mesh", "X"], 2),
            (["types", good, bad], 2),             # types takes one file
            (["build", good], 2),                  # no -o
            (["check", good, "--mesh", "X=4,Y=1"], 0),
            (["--help"], 0),
        ]
        failures = []
        for args, want in cases:
            p = subprocess.run([shdc] + args, capture_output=True, text=True, timeout=60)
            if p.returncode != want:
                failures.append("shdc %s: exit %d, expected %d\n%s" % (" ".join(args), p.returncode, want, p.stderr))
            elif want == 1 and not DIAG.search(p.stderr):
                failures.append("shdc %s: exit 1 without a diagnostic\n%s" % (" ".join(args), p.stderr))
            elif want == 2 and "error" not in p.stderr and "usage" not in p.stderr:
                failures.append("shdc %s: exit 2 without a message\n%s" % (" ".join(args), p.stderr))
        n = subprocess.run([shdc, "check", bad], capture_output=True, text=True).stderr
        count = len(DIAG.findall(n))
        if count < 10:
            failures.append("shdc check %s reported %d errors, expected one per bad line" % (bad, count))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d command lines, exit status as documented" % len(cases))


if __name__ == "__main__":
    main()
