#!/usr/bin/env python3
"""shdc out of memory (issue 29): every allocation of the compiler goes
through one choke point (compiler/arena.c), and SHDC_FAIL_ALLOC=N makes its
Nth allocation and every later one fail. Failing at each allocation in
turn, from the first to the last, of a program that passes every stage
(check, emit-c, explain) and of one with errors (check, which prints
diagnostics), shdc must stop cleanly: exit 2, the one message `shdc: out
of memory (allocating N bytes)` last on stderr, no signal, no sanitizer
report, no internal compiler error. With N past the last allocation the
command prints what it prints without the variable.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

OOM = re.compile(r"^shdc: out of memory \(allocating \d+ bytes\)$")
BAD = re.compile(r"Sanitizer|runtime error:|internal compiler error|Segmentation|Aborted")
MAX_RUNS = 3000   # a compile of these programs makes a few hundred allocations


def sweep(shdc, args, want_rc, failures):
    """Runs `shdc ARGS` with SHDC_FAIL_ALLOC=1, 2, ... until a run passes
    the last allocation; returns how many runs failed cleanly."""
    env = dict(os.environ)
    env.pop("SHDC_FAIL_ALLOC", None)
    plain = subprocess.run([shdc] + args, capture_output=True, text=True, timeout=120, env=env)
    if plain.returncode != want_rc:
        failures.append("shdc %s: exit %d without SHDC_FAIL_ALLOC, expected %d\n%s" % (
            " ".join(args), plain.returncode, want_rc, plain.stderr[-2000:]))
        return 0
    clean = 0
    for n in range(1, MAX_RUNS + 2):
        if n > MAX_RUNS:
            failures.append("shdc %s: still out of memory at SHDC_FAIL_ALLOC=%d" % (" ".join(args), n))
            break
        env["SHDC_FAIL_ALLOC"] = str(n)
        p = subprocess.run([shdc] + args, capture_output=True, text=True, timeout=120, env=env)
        lines = p.stderr.strip().split("\n")
        if p.returncode == want_rc:   # past the last allocation
            if p.stdout != plain.stdout or p.stderr != plain.stderr:
                failures.append("shdc %s with SHDC_FAIL_ALLOC=%d past the last allocation: another output" % (
                    " ".join(args), n))
            break
        if p.returncode != 2 or not OOM.match(lines[-1]) or BAD.search(p.stderr):
            failures.append("shdc %s with SHDC_FAIL_ALLOC=%d: exit %d, expected 2 and 'shdc: out of memory' last:\n%s"
                            % (" ".join(args), n, p.returncode, p.stderr[-2000:]))
            continue
        clean += 1
    return clean


def main():
    shdc = testlib.shdc_option()
    failures = []
    good = os.path.join(ROOT, "dsl-examples", "mlp_dp.shd")
    bad = os.path.join(ROOT, "tests", "errors", "sharding.shd")
    runs = 0
    for args, rc in ((["check", good], 0), (["emit-c", good], 0), (["explain", good], 0), (["check", bad], 1)):
        got = sweep(shdc, args, rc, failures)
        if got < 10:
            failures.append("shdc %s: only %d runs ran out of memory" % (" ".join(args), got))
        runs += got
    for f in failures:
        print("FAIL", f)
    print("%d runs out of memory, each a clean exit 2: %d problems" % (runs, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
