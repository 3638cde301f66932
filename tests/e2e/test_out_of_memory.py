#!/usr/bin/env python3
"""A program out of memory (issue 29): every allocation of the runtime goes
through one choke point (runtime/alloc.c), and SHD_FAIL_ALLOC=N makes a
process's Nth allocation and every later one fail. On 2 ranks, with only
rank 1 failing (mpirun's two app contexts) from each of its allocations in
turn (start-up, the arrays, the collectives' scratch, printing), the
program must stop every rank, promptly (rank 0 is never left waiting in a
collective), with a non-zero status and the one report naming rank 1:
`PROG: rank 1: out of memory: cannot allocate N bytes (WHAT)`, and no
signal or sanitizer report. Rank 0 failing at its first arrays does the
same. With N past the last allocation the program runs as without it.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
MAX_RUNS = 40

# Arrays, all-reduces in a loop, an all-gather (reshard), printing an array.
PROGRAM = """mesh {X: 2}
fn main() {
    let x: f32[4096@X] = ones()
    var s: f32 = 0.0
    for i in 0..3 {
        s = s + sum(x * x)
    }
    let y = reshard(x * 2.0, f32[4096])
    print("sum", s, "y", sum(y), "head", y[0:3])
}
"""
OUTPUT = "sum 12288.0 y 8192.0 head [2. 2. 2.]"
BAD = re.compile(r"Sanitizer|runtime error:|Segmentation|Aborted \(core|signal \d+")


def run(exe, fail_rank, n):
    env = dict(os.environ, SHD_QUIET="1")
    env.pop("SHD_FAIL_ALLOC", None)
    ctx = []
    for r in (0, 1):
        ctx += (["-np", "1"] + (["env", "SHD_FAIL_ALLOC=%d" % n] if r == fail_rank else []) + [exe]
                + ([":"] if r == 0 else []))
    try:
        return subprocess.run(MPIRUN + ctx, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        return None


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "oom.shd"), os.path.join(d, "oom"), text=PROGRAM)
        stopped = 0
        for fail_rank, points in ((1, range(1, MAX_RUNS + 1)), (0, (2, 5))):
            report = re.compile(r"^oom: rank %d: out of memory: cannot allocate \d+ bytes \(.+\)$" % fail_rank, re.M)
            for n in points:
                p = run(exe, fail_rank, n)
                what = "rank %d with SHD_FAIL_ALLOC=%d" % (fail_rank, n)
                if p is None:
                    failures.append("%s: still running after 60 s (a rank left waiting?)" % what)
                    break
                if p.returncode == 0 and OUTPUT in p.stdout:
                    if fail_rank == 0:
                        failures.append("%s: ran to the end" % what)
                    break   # past the last allocation
                if p.returncode == 0 or not report.search(p.stderr) or BAD.search(p.stderr) or \
                        re.search(r"rank %d: out of memory" % (1 - fail_rank), p.stderr):
                    failures.append("%s: exit %d, expected a stop with the report of rank %d:\n%s%s" % (
                        what, p.returncode, fail_rank, p.stdout[-1000:], p.stderr[-2000:]))
                    continue
                stopped += 1
            else:
                if fail_rank == 1:
                    failures.append("rank 1 still out of memory at SHD_FAIL_ALLOC=%d" % MAX_RUNS)
        if stopped < 5:
            failures.append("only %d runs stopped out of memory" % stopped)
    for f in failures:
        print("FAIL", f)
    print("%d runs stopped every rank with the failing rank's report: %d problems" % (stopped, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
