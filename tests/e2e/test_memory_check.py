#!/usr/bin/env python3
"""Arrays larger than the host can hold are refused at start-up (issue 11,
item 3): the program compares `shdc explain`'s peak per rank, times the ranks
on the host, with the host's available memory and stops every rank with a
message that names both and the override, before allocating anything (no
OOM killer). With SHD_MEMORY_CHECK=0 it starts anyway, and an allocation the
system refuses is still a message, not a crash. A program that fits runs.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]

# 2^45 f32 elements: 64 TiB per rank on 2 ranks, more than any host has.
PROGRAM = """mesh {X: 2}
fn main() {
    print("started")
    let big: f32[35184372088832@X] = ones()
    print("sum", sum(big))
}
"""
SMALL = """mesh {X: 2}
fn main() {
    let x: f32[1024@X] = ones()
    print("sum", sum(x))
}
"""


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        exes = {}
        for name, text in (("big", PROGRAM), ("small", SMALL)):
            exes[name] = testlib.build(shdc, os.path.join(d, name + ".shd"), os.path.join(d, name), text=text)
        explain = subprocess.run([shdc, "explain", os.path.join(d, "big.shd")], capture_output=True, text=True).stdout
        peak = re.findall(r"peak live arrays per rank: (\d+) bytes", explain)
        env = dict(os.environ, SHD_QUIET="1")
        p = subprocess.run(MPIRUN + [exes["big"]], capture_output=True, text=True, timeout=120, env=env)
        want = r"^big: rank 0: this program needs %s bytes of arrays per rank at its peak \(shdc explain\), 2 ranks " \
               r"on this host: \d+ bytes, but the host has \d+ bytes available; .*SHD_MEMORY_CHECK=0" % (
                   peak[-1] if peak else r"\d+")
        if p.returncode == 0 or not re.search(want, p.stderr, re.M) or "started" in p.stdout:
            failures.append("too big: exit %d, expected a refusal before main ran:\n%s%s" % (
                p.returncode, p.stdout, p.stderr))
        env0 = dict(env, SHD_MEMORY_CHECK="0")
        p = subprocess.run(MPIRUN + [exes["big"]], capture_output=True, text=True, timeout=120, env=env0)
        if p.returncode == 0 or not re.search(r"^big: rank \d+: out of memory: cannot allocate \d+ bytes", p.stderr,
                                              re.M) or "started" not in p.stdout:
            failures.append("SHD_MEMORY_CHECK=0: exit %d, expected it to start, then an out-of-memory message:\n%s%s" % (
                p.returncode, p.stdout, p.stderr))
        p = subprocess.run(MPIRUN + [exes["small"]], capture_output=True, text=True, timeout=120, env=env)
        if p.returncode != 0 or "sum 1024.0" not in p.stdout:
            failures.append("small: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("a program too large for the host is refused at start-up, with the override honoured")


if __name__ == "__main__":
    main()
