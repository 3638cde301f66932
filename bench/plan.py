#!/usr/bin/env python3
"""bench/plan.py: `shdc plan`'s ranking of layouts against measured steps.

For each configuration (a program, dsl-examples/gpt2.shd or llama.shd, and
its -D sizes; the configurations of one program are fitted together):

1. the one-device build trains --steps steps; the median step (the steps
   after the first two) and plan's FLOP counts of that configuration on one
   device give one equation T = dot/F + ew/E; the machine's two rates, F
   for contractions and E for elementwise work, are the non-negative least-squares fit
   over the configurations (so the one-device estimates are fitted, and
   every multi-rank estimate is a prediction); each program gets its own
   fit, since their mix of work differs;
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
                  [--flops F,E] [--bind-to core]

With fewer cores than ranks the ranks share cores and the measured times
are scheduling as much as computing: the model assumes a core per rank.

To measure on a machine that has MPI and OpenBLAS at run time but cannot
build (no compiler, headers or shdc build there), split the work:

    bench/plan.py --build-only DIR [--ranks ...] [--configs ...]   # here
    bench/plan.py --run-from DIR --bind-to core [--ranks ...]      # there

--build-only builds every layout that type-checks at 1 and each of
--ranks ranks, tools/calibrate-network's program, and copies shdc, the
programs and the standard library into DIR with a manifest (plan.json); it
runs nothing. --run-from
takes everything from DIR (shdc plan runs there: it needs no compiler) and
does steps 1-3 above. --flops F,E skips step 1's fit and uses the given
rates.
"""
import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (the programs, their -D options and the timed run through --metrics)

PROGRAMS = {m: gpt.MODELS[m]["src"] for m in ("gpt2", "llama")}
CONFIGS = {
    # GPT-2: a small model on a large batch: data parallelism should win
    "small-model": dict(model="gpt2", V=256, T=64, L=2, NH=4, C=64, B=64),
    # wide layers on a small batch: tensor parallelism should win
    "wide-model": dict(model="gpt2", V=256, T=32, L=2, NH=8, C=384, B=8),
    # the demo model (make demo): in between
    "demo": dict(model="gpt2", V=256, T=64, L=4, NH=4, C=128, B=16),
    # LLaMA (grouped-query attention, SwiGLU; KV heads over `model` bound its size), the same three
    "llama-small": dict(model="llama", V=256, T=64, L=2, NH=4, KV=4, C=64, F=192, B=64),
    "llama-wide": dict(model="llama", V=256, T=32, L=2, NH=16, KV=8, C=384, F=1024, B=8),
    "llama-demo": dict(model="llama", V=256, T=64, L=4, NH=8, KV=4, C=128, F=352, B=16),
}
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]   # --bind-to changes the last item
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OPENBLAS_NUM_THREADS="1")


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)
    if p.returncode not in (0, 1) or (p.returncode and "plan" not in cmd):
        sys.exit("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def plan(shdc, cfg, n, flops, network, srcs=PROGRAMS):
    out = sh([shdc, "plan", srcs[cfg["model"]], "--devices=%d" % n, "--json", "--flops=" + flops, "--network=" + network] +
             gpt.defines(cfg))
    return [l for l in json.loads(out)["layouts"] if l["type_checks"]]


def mesh_arg(m):
    return ",".join("%s=%d" % kv for kv in m.items())


def exe_name(cfg, mesh):
    return cfg["model"] + "_" + mesh_arg(mesh).replace(",", "_").replace("=", "")


def build(shdc, cfg, mesh, d):
    exe = os.path.join(d, exe_name(cfg, mesh))
    if not os.path.exists(exe):
        sh([shdc, "build", PROGRAMS[cfg["model"]], "--mesh", mesh_arg(mesh), "-o", exe] + gpt.defines(cfg))
    return exe


def step_ms(exe, n, steps, d):
    """Median ms of the steps after the first two (bench/gpt.py's timed run:
    the program's --metrics file)."""
    return gpt.step_ms(exe, n, steps, d)[0]


def fit_inverse_rates(A, y):
    """Seconds per contraction FLOP and per elementwise operation, both >= 0, least squares.

    Two unknowns: the least-squares fit of both if both come out positive
    (then nothing fits better), else the better of contractions alone and
    elementwise work alone (non-negative least squares by enumeration). A
    rate the data do not determine (coefficient 0) is 1e15/s: that kind of
    work costs nothing."""
    best = None
    for cols in ([0, 1], [0], [1]):
        x = np.linalg.lstsq(A[:, cols], y, rcond=None)[0]
        if (x <= 0).any():
            continue
        if len(cols) == 2:
            return x
        inv = np.zeros(2)
        inv[cols] = x
        r = float(np.linalg.norm(A @ inv - y))
        if best is None or r < best[0]:
            best = (r, inv)
    inv = best[1]
    for i, what in enumerate(("contractions", "elementwise work")):
        if inv[i] == 0:
            print("note: the one-device steps do not determine the rate of %s (a positive fit needs it free)" % what)
            inv[i] = 1e-15
    return inv


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


def build_only(a, shdc):
    """Builds every binary --run-from needs into a.build_only; runs nothing."""
    d = os.path.abspath(a.build_only)
    os.makedirs(d, exist_ok=True)
    shutil.copy2(shdc, os.path.join(d, "shdc"))
    for src in PROGRAMS.values():
        shutil.copy2(src, d)
    # shdc finds the standard library at share/shdc/lib beside itself (the programs import std/)
    lib = os.path.join(d, "share", "shdc", "lib")
    if os.path.exists(lib):
        shutil.rmtree(lib)
    shutil.copytree(os.path.join(ROOT, "lib"), lib)
    sh([os.environ.get("MPICC", "mpicc"), "-std=c11", "-O2", "-o", os.path.join(d, "netcal"),
        os.path.join(ROOT, "bench", "netcal.c")])
    man = dict(shdc="shdc", programs={p: os.path.basename(s) for p, s in PROGRAMS.items()}, netcal="netcal",
               configs={})
    for name in a.configs:
        cfg = CONFIGS[name]
        cd = os.path.join(d, name)
        os.makedirs(cd, exist_ok=True)
        exes = {}
        for n in sorted(set([1] + a.ranks)):   # the layouts that type-check do not depend on the rates
            for l in plan(shdc, cfg, n, "1G", "10GB/s,1us"):
                exes[mesh_arg(l["mesh"])] = os.path.relpath(build(shdc, cfg, l["mesh"], cd), d)
                print("built %s %s" % (name, mesh_arg(l["mesh"])), flush=True)
        man["configs"][name] = dict(defs=cfg, exes=exes)
    with open(os.path.join(d, "plan.json"), "w") as f:
        json.dump(man, f, indent=1)
    print("manifest: %s" % os.path.join(d, "plan.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--network", help="a network file (default: tools/calibrate-network's measurement)")
    ap.add_argument("--flops", help="F,E: the rates of contractions and elementwise work (default: fitted)")
    ap.add_argument("--bind-to", default="none", help="mpirun's --bind-to (core: a core per rank)")
    ap.add_argument("--build-only", metavar="DIR", help="build every binary into DIR with a manifest; run nothing")
    ap.add_argument("--run-from", metavar="DIR", help="run the binaries of a --build-only DIR")
    a = ap.parse_args()
    MPIRUN[-1] = a.bind_to
    gpt.OPT["bind"] = a.bind_to
    shdc, srcs = os.path.abspath(a.shdc), PROGRAMS
    if a.build_only:
        return build_only(a, shdc)
    man = None
    if a.run_from:
        rd = os.path.abspath(a.run_from)
        with open(os.path.join(rd, "plan.json")) as f:
            man = json.load(f)
        shdc = os.path.join(rd, man["shdc"])
        srcs = {p: os.path.join(rd, f) for p, f in man["programs"].items()}
        missing = [c for c in a.configs if c not in man["configs"]]
        if missing:
            sys.exit("%s: no binaries for %s (build them with --build-only)" % (rd, " ".join(missing)))

    def exe_for(name, cfg, mesh, cd):
        if man is None:
            return build(shdc, cfg, mesh, cd)
        rel = man["configs"][name]["exes"].get(mesh_arg(mesh))
        if rel is None:
            sys.exit("%s: no binary for %s %s (build it with --build-only)" % (a.run_from, name, mesh_arg(mesh)))
        return os.path.join(rd, rel)

    print("load average before: %s (%d CPUs)" % (loadavg(), os.cpu_count()), flush=True)
    with tempfile.TemporaryDirectory() as d:
        network = a.network
        if not network:
            network = os.path.join(d, "here.net")
            if man is None:
                text = sh([os.path.join(ROOT, "tools", "calibrate-network")])
            else:
                text = sh(MPIRUN + ["-np", "2", os.path.join(rd, man["netcal"])])
            with open(network, "w") as f:
                f.write(text)
        print("network: %s" % " ".join(l.strip() for l in open(network) if not l.startswith("#")), flush=True)
        for name in a.configs:
            os.makedirs(os.path.join(d, name))
        programs = sorted(set(CONFIGS[name]["model"] for name in a.configs))
        if a.flops:
            flops = {p: a.flops for p in programs}
            print("given rates: --flops=%s" % a.flops, flush=True)
        else:
            # 1. One device per configuration: the rates, fitted per program.
            flops = {}
            for prog in programs:
                rows = []
                for name in a.configs:
                    cfg = CONFIGS[name]
                    if cfg["model"] != prog:
                        continue
                    cd = os.path.join(d, name)
                    l1 = plan(shdc, cfg, 1, "1G", network, srcs)[0]
                    exe = exe_for(name, cfg, l1["mesh"], cd)
                    t = statistics.median(step_ms(exe, 1, a.steps, cd) for _ in range(a.repeat))
                    rows.append((l1["contraction_flops"], l1["elementwise_flops"], t / 1e3))
                    print("one device, %s: %.4g contraction FLOPs, %.4g elementwise operations, %.1f ms/step" %
                          (name, rows[-1][0], rows[-1][1], t), flush=True)
                A = np.array([[r[0], r[1]] for r in rows])
                y = np.array([r[2] for r in rows])
                inv = fit_inverse_rates(A, y)
                F, E = 1 / inv[0], 1 / inv[1]
                flops[prog] = "%.6g,%.6g" % (F, E)
                print("fitted on one device (%s): contractions %.2f GFLOP/s, elementwise work %.3f G/s (--flops=%s)" %
                      (prog, F / 1e9, E / 1e9, flops[prog]), flush=True)
        print("\n| model | ranks | layout | estimated ms/step | measured ms/step | place (est, meas) |"
              " fastest agrees | Kendall tau |")
        print("|---|---|---|---|---|---|---|---|")
        for name in a.configs:
            cfg = CONFIGS[name]
            cd = os.path.join(d, name)
            for n in a.ranks:
                layouts = plan(shdc, cfg, n, flops[cfg["model"]], network, srcs)
                exes = [exe_for(name, cfg, l["mesh"], cd) for l in layouts]
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
