#!/usr/bin/env python3
"""Process binding (issue 18, item 2; docs/cluster.md, "Process binding").

The sharded matmul at 2 ranks under `mpirun --bind-to core
--report-bindings`: each rank is bound to a core of its own (mpirun's
report), and every saved array equals the unbound run's bit for bit; with
OPENBLAS_NUM_THREADS=2 as well (OpenBLAS runs no more threads than the
CPUs a rank may use). Needs 2 CPUs; with fewer it is skipped.
(srun --cpu-bind=cores is tests/cluster/test_slurm.py's.)
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")


def run(exe, d, bind, threads):
    os.makedirs(d)
    env = dict(ENV, OPENBLAS_NUM_THREADS=str(threads))
    p = subprocess.run(["mpirun", "--bind-to", bind, "--report-bindings", "-np", "2", exe], cwd=d,
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode:
        sys.exit("--bind-to %s: exit %d\n%s%s" % (bind, p.returncode, p.stdout, p.stderr))
    files = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".npy")}
    return p.stderr, files


def main():
    shdc = testlib.shdc_option()
    if len(os.sched_getaffinity(0)) < 2:
        testlib.skip("binding 2 ranks to cores of their own needs 2 CPUs")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(ROOT, "dsl-examples", "matmul.shd"), os.path.join(d, "mm"), "--mesh",
                            "X=2,Y=1")
        _, free = run(exe, os.path.join(d, "none"), "none", 1)
        for threads in (1, 2):
            err, files = run(exe, os.path.join(d, "core%d" % threads), "core", threads)
            cores = re.findall(r"MCW rank (\d) bound to socket \d+\[core (\d+)\[hwt [\d-]+\]\]", err)
            if len(cores) != 2 or len({c for _, c in cores}) != 2:
                failures.append("--bind-to core: mpirun reports %s\n%s" % (cores, err))
            if files != free or len(files) != 5:
                failures.append("--bind-to core, OPENBLAS_NUM_THREADS=%d: the arrays differ from the unbound run's "
                                "(%s)" % (threads, sorted(files)))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("--bind-to core: each rank on a core of its own, the arrays bitwise those of --bind-to none")


if __name__ == "__main__":
    main()
