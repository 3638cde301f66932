#!/usr/bin/env python3
"""Machine-readable diagnostics of broken programs: the truncated and mutated
programs of tests/errors/test_fuzz.py, checked with --diagnostics=json and
--diagnostics=sarif, always give exit 0 or 1 (1 when an error is among the
diagnostics, 0 with warnings alone) and a well-formed document whose
diagnostics are the plain format's; every fix's range lies inside the
file, its start before its end, and the edited program is checked again
without a crash. `make fuzz` runs it through the sanitizer build too;
`make test-san` checks every fourth input (SHD_TEST_SAMPLE)."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "errors"))
from test_fuzz import SOURCES, cases  # noqa: E402


def run(shdc, args):
    try:
        p = subprocess.run([shdc] + args, capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return p, None


def offset(text, line, col):
    lines = text.split("\n")
    if line < 1 or line > len(lines) or col < 1 or col > len(lines[line - 1]) + 1:
        return None
    return sum(len(l) + 1 for l in lines[:line - 1]) + col - 1


def check_one(shdc, path, text):
    p, why = run(shdc, ["check", "--diagnostics=json", path])
    if why:
        return why
    if p.returncode not in (0, 1) or p.stderr:
        return "json: exit %d\n%s" % (p.returncode, p.stderr.decode("utf-8", "replace")[-2000:])
    try:
        diags = json.loads(p.stdout.decode("utf-8"))
    except ValueError as e:
        return "json: not JSON (%s)" % e
    errors = [d for d in diags if d.get("severity") != "warning"]   # warnings leave the exit status 0
    if (p.returncode == 1) != bool(errors) or any(d.get("severity") not in ("error", "warning") for d in diags):
        return "json: exit %d with %d errors (%d diagnostics)" % (p.returncode, len(errors), len(diags))
    for d in diags:
        for fix in d["fixes"]:
            a, b = offset(text, fix["line"], fix["column"]), offset(text, fix["endLine"], fix["endColumn"])
            if a is None or b is None or a > b:
                return "fix outside the file: %s" % fix
            with open(path, "w", encoding="latin-1", errors="replace") as f:
                f.write(text[:a] + fix["replacement"] + text[b:])
            q, why = run(shdc, ["check", "--diagnostics=json", path])
            if why or q.returncode not in (0, 1):
                return "after the fix %s: %s" % (fix, why or "exit %d" % q.returncode)
            with open(path, "w", encoding="latin-1", errors="replace") as f:
                f.write(text)
    p, why = run(shdc, ["check", "--diagnostics=sarif", path])
    if why:
        return why
    try:
        log = json.loads(p.stdout.decode("utf-8"))
    except ValueError as e:
        return "sarif: not JSON (%s)" % e
    if p.returncode not in (0, 1) or len(log["runs"][0]["results"]) != len(diags):
        return "sarif: exit %d, %d results for %d diagnostics" % (p.returncode, len(log["runs"][0]["results"]),
                                                                   len(diags))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--mutations", type=int, default=15)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--all", action="store_true", help="every .shd in tests/ and dsl-examples/ as a source")
    # make test-san sets SHD_TEST_SAMPLE=4: through the sanitizer build each
    # input takes ten times as long, and every input is past 10 minutes
    # there; the normal pass and `make fuzz` check every one.
    ap.add_argument("--every", type=int, default=int(os.environ.get("SHD_TEST_SAMPLE") or 1), metavar="K",
                    help="check every K-th input only (default: $SHD_TEST_SAMPLE or 1)")
    a = ap.parse_args()
    if a.every < 1:
        ap.error("--every needs K >= 1")
    sources = SOURCES + ["tests/errors/sharding.shd", "tests/errors/unreduced.shd"]
    if a.all:
        sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"),
                                                                         recursive=True))
    failures, n = [], 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fuzz.shd")
        for i, (name, text) in enumerate(cases(sources, a.mutations, a.seed)):
            if i % a.every:
                continue
            with open(path, "w", encoding="latin-1", errors="replace") as f:
                f.write(text)
            with open(path, encoding="latin-1") as f:
                text = f.read()
            n += 1
            why = check_one(a.shdc, path, text)
            if why:
                failures.append("%s: %s\n--- input ---\n%s" % (name, why, text[:500]))
    if failures:
        print("%d of %d inputs failed; first:\n%s" % (len(failures), n, failures[0]))
        sys.exit(1)
    print("%d broken inputs: well-formed JSON and SARIF, fixes inside the file, no crash" % n)


if __name__ == "__main__":
    main()
