#!/usr/bin/env python3
"""bench/mlp.py: the training step of each dsl-examples MLP as shdc compiles
it, against its peer (bench/peer_mlp.c, hand-written MPI + OpenBLAS), at
each rank count. Prints a table: milliseconds per step (median of the steps
after the first), the share of it in sgemm (peer), the ratio, and the peak
array memory per rank (shdc: SHD_TRACE=1; peer: its own buffers).

  bench/mlp.py [--ranks 1 2] [--steps 6]

Both run with one OpenBLAS thread per rank and the SkylakeX kernels chosen
the same way (the shdc runtime does it itself; for the peer it is set here).
With fewer cores than ranks the processes share cores: compare columns at the
same rank count only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.path.join(ROOT, "build")
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1")


def sh(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV)
    if p.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout + p.stderr


def mpirun(n, args, extra_env=None):
    env = dict(ENV, **(extra_env or {}))
    return sh(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n)] + args, env)


def step_times(out):
    ts = [float(m.group(1)) for m in re.finditer(r"step \d+ (?:loss \S+ )?seconds (\S+)", out)]
    return statistics.median(ts[1:] if len(ts) > 1 else ts) * 1000


def gemm_share(out):
    rows = [(float(a), float(b)) for a, b in re.findall(r"seconds (\S+) gemm (\S+)", out)][1:]
    return statistics.median(g / t for t, g in rows) if rows else float("nan")


def peak(out):
    m = re.search(r"peak_bytes=(\d+)", out)
    return int(m.group(1)) / 2**20 if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    os.makedirs(os.path.join(B, "bench"), exist_ok=True)
    peer = os.path.join(B, "bench", "peer_mlp")
    cflags = sh(["pkg-config", "--cflags", "openblas"]).split()
    sh(["mpicc", "-std=c11", "-O3", "-march=native", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"] + cflags +
       ["-o", peer, os.path.join(ROOT, "bench", "peer_mlp.c"), "-lopenblas", "-lm"])
    print("| model | ranks | shdc ms/step | peer ms/step | shdc / peer | peer sgemm share | shdc peak MiB/rank |")
    print("|---|---|---|---|---|---|---|")
    for name, mode in [("mlp_dp", "dp"), ("mlp_fsdp", "fsdp")]:
        for n in a.ranks:
            exe = os.path.join(B, "bench", "%s_%d" % (name, n))
            sh([os.path.join(B, "shdc"), "build", os.path.join(ROOT, "dsl-examples", name + ".shd"), "-o", exe,
                "--mesh", "data=%d" % n])
            out = mpirun(n, [exe, "--steps=%d" % a.steps, "--timing=true"], {"SHD_TRACE": "1"})
            pout = mpirun(n, [peer, mode, str(a.steps)], {"OPENBLAS_CORETYPE": "SkylakeX"})
            s, p = step_times(out), step_times(pout)
            print("| %s | %d | %.0f | %.0f | %.2f | %.0f%% | %.0f |" %
                  (name, n, s, p, s / p, 100 * gemm_share(pout), peak(out)), flush=True)


if __name__ == "__main__":
    main()
