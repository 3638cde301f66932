#!/usr/bin/env python3
"""How close `shdc explain --network=...` comes to the communication time of
real runs on this machine.

For each training program and rank count: tools/calibrate-network describes
this machine's link (latency and bandwidth of MPI_Sendrecv between two ranks,
local reduction speed); `shdc explain --network=THAT` estimates one training
step's communication; the program then runs twice with SHD_TRACE=FILE.json,
for 1 and for 1+K steps, and the measured time per step is the difference of
the two runs' communication time (each collective's span less its wait, so
load imbalance is not counted as communication) divided by K, averaged over
the ranks; the best of --repeat such measurements counts (the model
describes the machine, not the other jobs on it). Prints one Markdown table
row per run with estimate/measured.

    bench/netmodel.py [--ranks 2 4 8] [--steps 5] [--repeat 3] [--network FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHDC = os.path.join(ROOT, "build", "shdc")
PROGRAMS = [  # (file, mesh for n ranks)
    ("dsl-examples/mlp_dp.shd", lambda n: "data=%d" % n),
    ("dsl-examples/mlp_fsdp.shd", lambda n: "data=%d" % n),
    ("dsl-examples/mlp_2d.shd", lambda n: "data=%d,tp=2" % (n // 2)),
]


def mpirun(n):
    flags = ["--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return ["mpirun"] + flags + ["-np", str(n)]


def comm_seconds(trace):
    """Per rank: the time in collectives less their waits, seconds."""
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    per = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        if e["cat"] == "communication":
            per[e["pid"]] = per.get(e["pid"], 0) + e["dur"]
        elif e["cat"] == "wait":
            per[e["pid"]] = per.get(e["pid"], 0) - e["dur"]
    return [per[p] / 1e6 for p in sorted(per)]


def run_steps(exe, n, steps, tmp):
    trace = os.path.join(tmp, "t%d.json" % steps)
    env = dict(os.environ, SHD_TRACE=trace, SHD_QUIET="1")
    subprocess.run(mpirun(n) + [exe, "--steps=%d" % steps], cwd=tmp, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return comm_seconds(trace)


def estimate(prog, mesh, network):
    out = subprocess.run([SHDC, "explain", prog, "--mesh", mesh, "--network=" + network], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"per iteration of the loop at line \d+ of main: (\d+) collectives, (\d+) bytes sent per rank, "
                  r"communication estimated ([\d.]+) (s|ms|us)", out)
    scale = {"s": 1, "ms": 1e-3, "us": 1e-6}[m.group(4)]
    return int(m.group(1)), int(m.group(2)), float(m.group(3)) * scale


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--network", help="a network file (default: tools/calibrate-network now)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        network = a.network
        if not network:
            network = os.path.join(tmp, "here.net")
            with open(network, "w") as f:
                f.write(subprocess.run([os.path.join(ROOT, "tools", "calibrate-network")], capture_output=True,
                                       text=True, check=True).stdout)
        with open(network) as f:
            print("network file:\n" + "".join("    " + l for l in f))
        print("| program | ranks | mesh | collectives/step | bytes/rank/step | estimated | measured | estimate/measured |")
        print("|---|---|---|---|---|---|---|---|")
        for prog, mesh_of in PROGRAMS:
            for n in a.ranks:
                mesh = mesh_of(n)
                path = os.path.join(ROOT, prog)
                ncoll, nbytes, est = estimate(path, mesh, network)
                exe = os.path.join(tmp, "prog")
                subprocess.run([SHDC, "build", path, "--mesh", mesh, "-o", exe], check=True)
                per_step = float("inf")
                for _ in range(a.repeat):
                    one = run_steps(exe, n, 1, tmp)
                    many = run_steps(exe, n, 1 + a.steps, tmp)
                    per_step = min(per_step, sum(m - o for m, o in zip(many, one)) / len(one) / a.steps)
                print("| %s | %d | %s | %d | %d | %.3f ms | %.3f ms | %.2f |" % (
                    os.path.basename(prog), n, mesh, ncoll, nbytes, est * 1e3, per_step * 1e3,
                    est / per_step if per_step > 0 else float("nan")), flush=True)


if __name__ == "__main__":
    sys.exit(main())
