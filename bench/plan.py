#!/usr/bin/env python3
"""bench/plan.py: `shdc plan`'s ranking of layouts against measured steps.

For each configuration of dsl-examples/gpt2.shd (-D sizes):

1. the one-device build trains --steps steps; the median step (the steps
   after the first) and plan's FLOP counts of that configuration on one
   device give one equation T = dot/F + ew/E; the machine's two rates, F
   for contractions and E for elementwise work, are the least-squares fit
   over the configurations (so the one-device estimates are fitted, and
   every multi-rank estimate is a prediction);
2. tools/calibrate-network measures the link (or --network FILE);
3. for each rank count N of --ranks, `shdc plan --devices=N --flops=F,E
   --network=...` ranks the layouts that type-check; each is built and
   trains --steps steps; the layouts of one N run interleaved, --repeat
   times, and a layout's measured step is the median over the repeats of
   its runs' median steps.

Prints the fitted rates, then a Markdown table: per configuration and N,
each layout's estimated and measured ms per step, its place in both
orders, whether the fastest agrees, and Kendall's tau of the two orders.
The load average before and after is printed too: other jobs on the
machine change the measured times, not the estimates.

    bench/plan.py [--ranks 1 2 4 8] [--steps 6] [--repeat 3] [--configs a b c] [--network FILE]

With fewer cores than ranks the ranks share cores and the measured times
are scheduling as much as computing: the model assumes a core per rank.
"""
import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2 = os.path.join(ROOT, "dsl-examples", "gpt2.shd")
CONFIGS = {
    # a small model on a large batch: data parallelism should win
    "small-model": dict(V=256, T=64, L=2, NH=4, C=64, B=64),
    # wide layers on a small batch: tensor parallelism should win
    "wide-model": dict(V=256, T=32, L=2, NH=8, C=384, B=8),
    # the demo model (make demo): in between
    "demo": dict(V=256, T=64, L=4, NH=4, C=128, B=16),
}
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OPENBLAS_NUM_THREADS="1")


def defs(cfg):
    out = []
    for k, v in cfg.items():
        out += ["-D", "%s=%d" % (k, v)]
    return out


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)
    if p.returncode not in (0, 1) or (p.returncode and "plan" not in cmd):
        sys.exit("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def plan(shdc, cfg, n, flops, network):
    out = sh([shdc, "plan", GPT2, "--devices=%d" % n, "--json", "--flops=" + flops, "--network=" + network] +
             defs(cfg))
    return [l for l in json.loads(out)["layouts"] if l["type_checks"]]


def mesh_arg(m):
    return ",".join("%s=%d" % kv for kv in m.items())


def build(shdc, cfg, mesh, d):
    exe = os.path.join(d, "gpt_" + mesh_arg(mesh).replace(",", "_").replace("=", ""))
    if not os.path.exists(exe):
        sh([shdc, "build", GPT2, "--mesh", mesh_arg(mesh), "-o", exe] + defs(cfg))
    return exe


def step_ms(exe, n, steps, d):
    """Median ms of the steps after the first."""
    out = sh(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), exe, "--steps=%d" % steps,
              "--timing=true", "--data=", "--val="], cwd=d, timeout=1800)
    ms = [float(x) for x in re.findall(r"^step \d+ loss \S+ ms (\S+)", out, re.M)]
    if len(ms) != steps:
        sys.exit("%s: %d steps timed in\n%s" % (exe, len(ms), out))
    return statistics.median(ms[1:])


def kendall(a, b):
    """Kendall's tau between two orders of the same items."""
    pa, pb = {x: i for i, x in enumerate(a)}, {x: i for i, x in enumerate(b)}
    pairs = list(itertools.combinations(a, 2))
    if not pairs:
        return 1.0
    s = sum(1 if (pa[x] - pa[y]) * (pb[x] - pb[y]) > 0 else -1 for x, y in pairs)
    return s / len(pairs)


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--network", help="a network file (default: tools/calibrate-network's measurement)")
    a = ap.parse_args()
    shdc = os.path.abspath(a.shdc)
    print("load average before: %s (%d CPUs)" % (loadavg(), os.cpu_count()), flush=True)
    with tempfile.TemporaryDirectory() as d:
        network = a.network
        if not network:
            network = os.path.join(d, "here.net")
            with open(network, "w") as f:
                f.write(sh([os.path.join(ROOT, "tools", "calibrate-network")]))
        print("network: %s" % " ".join(l.strip() for l in open(network) if not l.startswith("#")), flush=True)
        # 1. One device per configuration: the rates.
        rows, one = [], {}
        for name in a.configs:
            cfg = CONFIGS[name]
            cd = os.path.join(d, name)
            os.makedirs(cd)
            l1 = plan(shdc, cfg, 1, "1G", network)[0]
            exe = build(shdc, cfg, l1["mesh"], cd)
            t = statistics.median(step_ms(exe, 1, a.steps, cd) for _ in range(a.repeat))
            one[name] = t
            rows.append((l1["contraction_flops"], l1["elementwise_flops"], t / 1e3))
        A = np.array([[r[0], r[1]] for r in rows])
        y = np.array([r[2] for r in rows])
        inv = np.linalg.lstsq(A, y, rcond=None)[0]
        if inv[1] <= 0:   # elementwise work too small to fit: contractions alone
            inv = [float(np.dot(A[:, 0], y) / np.dot(A[:, 0], A[:, 0])), 1e-15]
        F, E = 1 / inv[0], 1 / inv[1]
        flops = "%.6g,%.6g" % (F, E)
        print("fitted on one device: contractions %.2f GFLOP/s, elementwise work %.3f G/s (--flops=%s)" %
              (F / 1e9, E / 1e9, flops), flush=True)
        print("\n| model | ranks | layout | estimated ms/step | measured ms/step | place (est, meas) |"
              " fastest agrees | Kendall tau |")
        print("|---|---|---|---|---|---|---|---|")
        for name in a.configs:
            cfg = CONFIGS[name]
            cd = os.path.join(d, name)
            for n in a.ranks:
                layouts = plan(shdc, cfg, n, flops, network)
                exes = [build(shdc, cfg, l["mesh"], cd) for l in layouts]
                runs = {i: [] for i in range(len(layouts))}
                for _ in range(a.repeat):   # interleaved
                    for i, exe in enumerate(exes):
                        runs[i].append(step_ms(exe, n, a.steps, cd))
                meas = {i: statistics.median(v) for i, v in runs.items()}
                est_order = list(range(len(layouts)))   # plan's order
                meas_order = sorted(est_order, key=lambda i: meas[i])
                tau = kendall(est_order, meas_order)
                agree = est_order[0] == meas_order[0]
                for i, l in enumerate(layouts):
                    print("| %s | %d | %s | %.1f | %.1f | %d, %d | %s | %s |" % (
                        name, n, mesh_arg(l["mesh"]), l["step_seconds"] * 1e3, meas[i], i + 1,
                        meas_order.index(i) + 1, ("yes" if agree else "no") if i == 0 else "",
                        "%.2f" % tau if i == 0 else ""), flush=True)
    print("\nload average after: %s" % loadavg())


if __name__ == "__main__":
    main()
