"""What the test scripts (tests/**/test_*.py) share: the tree's root, the
--shdc option tests/run.py passes them, running shdc and building a
program, collecting failures, and the error test programs.

A script imports it after putting tests/ on its path:

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import testlib
"""
import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shdc_option(description=None):
    """The compiler to test: --shdc PATH (default build/shdc), absolute."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    return os.path.abspath(ap.parse_args().shdc)


def run_shdc(shdc, *args, cwd=None, timeout=600):
    """shdc ARGS, its output captured as text."""
    return subprocess.run([shdc] + list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def checker(failures):
    """check(cond, what): appends what to failures unless cond; returns cond.
    A script collects its failures so and reports them all at the end."""
    def check(cond, what):
        if not cond:
            failures.append(what)
        return cond
    return check


def build(shdc, src, exe, *flags, text=None, env=None):
    """`shdc build SRC FLAGS -o EXE`, after writing text to SRC when given;
    a failure ends the test with the compiler's message."""
    if text is not None:
        with open(src, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
    try:
        p = subprocess.run([shdc, "build", src] + list(flags) + ["-o", exe], capture_output=True, timeout=600,
                           env=env)
    except subprocess.TimeoutExpired:
        sys.exit("shdc build %s: timed out" % src)
    if p.returncode:
        sys.exit("shdc build %s %s: exit %d\n%s" % (src, " ".join(flags), p.returncode,
                                                   p.stderr.decode("utf-8", "replace")))
    return exe


def error_programs():
    """The test programs with // ERROR: lines, relative to ROOT, sorted."""
    out = []
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"), recursive=True)):
        with open(p) as f:
            if "// ERROR:" in f.read():
                out.append(os.path.relpath(p, ROOT))
    return out


SKIP = 77   # the exit status of a test script the machine cannot run (tests/README.md)


def skip(reason):
    """Ends the test as skipped, never passed: one line says why."""
    print("skipped: " + reason.strip().replace("\n", " "), flush=True)
    sys.exit(SKIP)
