#!/usr/bin/env python3
"""bench/gpt.py: the GPT-2 training step of dsl-examples/gpt2.shd as shdc
compiles it, against the same model in PyTorch (tests/gpt2/ref_torch.py's
forward pass, AdamW over the same two parameter groups; DistributedData-
Parallel over gloo across ranks), data parallel at each rank count, one
thread per rank on both sides.

Per configuration and rank count: ms per step (median of the steps after
the first two), tokens per second, peak resident memory per rank (both;
the largest over the ranks), shdc's peak of live arrays per rank as
measured (SHD_TRACE=1) and as `shdc explain` predicts it, and the share of
shdc's step in GEMM (its timeline, `shdc trace-summary`). Both sides train
on the same uniform random tokens.

  bench/gpt.py [--ranks 1 2] [--steps 12] [--configs demo large] [--torch-threads] [--bind-to core]

With fewer cores than ranks the processes share cores: compare columns at
the same rank count only. --torch-threads runs PyTorch as one process with
as many threads as shdc has ranks (torch.set_num_threads), instead of as
many one-thread DDP ranks. A configuration whose batch does not divide by
the rank count is skipped with a note.

To measure on a machine that has MPI and OpenBLAS at run time but cannot
build, `--build-only DIR` builds shdc's binaries (and copies shdc, which
explain and trace-summary need, and gpt2.shd) into DIR with a manifest
(gpt.json, merged with one already there) and runs nothing; `--run-from
DIR` runs from there.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.path.join(ROOT, "build")
sys.path.insert(0, os.path.join(ROOT, "tests", "gpt2"))
SHDC, GPT2 = os.path.join(B, "shdc"), os.path.join(ROOT, "dsl-examples", "gpt2.shd")
OPT = dict(bind="none", run_from=None, exes={})   # set by main
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")

# The demo model (gpt2.shd's defaults) and a larger one.
CONFIGS = {
    "demo": dict(V=256, T=64, L=4, NH=4, C=128, B=16),
    "large": dict(V=256, T=256, L=4, NH=6, C=384, B=8),
    # the large model on a batch that divides by 16 ranks (not run by default)
    "large-b16": dict(V=256, T=256, L=4, NH=6, C=384, B=16),
}


def sh(cmd, env=None, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, timeout=timeout)
    if p.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout + p.stderr


def mpirun(n, args, extra_env=None):
    env = dict(ENV, **(extra_env or {}))
    return sh(["mpirun", "--oversubscribe", "--bind-to", OPT["bind"], "--allow-run-as-root", "-np", str(n)] + args,
              env)


def median_ms(ts):
    ts = ts[2:] if len(ts) > 3 else ts
    return statistics.median(ts)


# ---- shdc -------------------------------------------------------------------------------------------------------

def shdc_build(name, cfg, n, d):
    exe = os.path.join(d, "gpt_%s_%d" % (name, n))
    defs = sum((["-D", "%s=%d" % kv] for kv in cfg.items()), [])
    sh([SHDC, "build", GPT2, "--mesh", "data=%d,model=1" % n, "-o", exe] + defs)
    return exe


def shdc_run(name, cfg, n, steps, d):
    if OPT["run_from"]:
        exe = OPT["exes"].get("%s:%d" % (name, n))
        if exe is None:
            sys.exit("%s: no binary for %s at %d ranks (build it with --build-only)" % (OPT["run_from"], name, n))
        exe = os.path.join(OPT["run_from"], exe)
    else:
        exe = shdc_build(name, cfg, n, d)
    defs = sum((["-D", "%s=%d" % kv] for kv in cfg.items()), [])
    mesh = "data=%d,model=1" % n
    src = GPT2
    metrics = os.path.join(d, "metrics_%s_%d.jsonl" % (name, n))
    if os.path.exists(metrics):
        os.remove(metrics)
    args = [exe, "--steps=%d" % steps, "--data=", "--val=", "--metrics=" + metrics]
    # GNU time reports each rank's peak resident set (KiB).
    out = mpirun(n, [shutil.which("time") or "/usr/bin/time", "-f", "maxrss_kib %M"] + args, {"SHD_TRACE": "1"})
    with open(metrics) as f:
        ms = median_ms([m["ms"] for m in map(json.loads, f) if "ms" in m])
    rss = max(int(x) for x in re.findall(r"maxrss_kib (\d+)", out)) / 1024
    peak = max(int(x) for x in re.findall(r"rank \d+: peak_bytes=(\d+)", out)) / 2**20
    ex = sh([SHDC, "explain", src, "--mesh", mesh] + defs)
    main_peak = re.search(r"^fn main\n(?:.*\n)*?\s+peak live arrays per rank: (\d+) bytes", ex, re.M)
    explain_peak = int(main_peak.group(1)) / 2**20 if main_peak else float("nan")
    # The share of the step in GEMM, from the timeline of a shorter run.
    trace = os.path.join(d, "run_%d.json" % n)
    mpirun(n, [exe, "--steps=4", "--data=", "--val="], {"SHD_TRACE": trace})
    summ = sh([SHDC, "trace-summary", trace])
    gemm = gemm_share(summ)
    return dict(ms=ms, rss=rss, peak=peak, explain_peak=explain_peak, gemm=gemm, summary=summ)


def gemm_share(summary):
    """GEMM time over main's, rank 0, from trace-summary's table."""
    lines = summary.split("time per rank in ms")[1].strip().split("\n")
    head = lines[1].split()
    for l in lines[2:]:
        cells = l.split()
        if cells and cells[0] == "0":
            vals = re.findall(r"([\d.]+)(?:\s*\([\d.]+%\))?", " ".join(cells[1:]))
            col = {h: i for i, h in enumerate(head[1:])}
            return float(vals[col["gemm"]]) / float(vals[col["main"]])
    return float("nan")


# ---- PyTorch ----------------------------------------------------------------------------------------------------

WORKER = r"""
import math, os, resource, sys, time, json
import numpy as np
import torch, torch.nn.functional as F, torch.distributed as dist
sys.path.insert(0, %(tests)r)
import ref_torch
cfg = json.loads(%(cfg)r)
steps = %(steps)d
torch.set_num_threads(%(threads)d)
rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
if world > 1:
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%(port)d", rank=rank, world_size=world)
V, T, L, NH, C, B = (cfg[k] for k in ("V", "T", "L", "NH", "C", "B"))
shapes = ref_torch.shapes(V, T, L, C)
g = torch.Generator().manual_seed(0)
class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.ParameterDict()
        for n, s in shapes.items():
            if n in ("ln1w", "ln2w", "lnfw"):
                t = torch.ones(s)
            elif n in ref_torch.DECAY:
                std = 0.02 / math.sqrt(2 * L) if n in ("attprojw", "fcprojw") else 0.02
                t = torch.randn(s, generator=g) * std
            else:
                t = torch.zeros(s)
            self.p[n] = torch.nn.Parameter(t)
    def forward(self, x, y):
        return ref_torch.gpt2_loss(torch, F, self.p, x, y, NH)
model = GPT()
net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
groups = [{"params": [model.p[n] for n in ref_torch.NAMES if n in ref_torch.DECAY], "weight_decay": 0.1},
          {"params": [model.p[n] for n in ref_torch.NAMES if n not in ref_torch.DECAY], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
rng = np.random.default_rng(rank)
ts = []
for s in range(steps):
    b = torch.from_numpy(rng.integers(0, V, size=(B // world, T + 1)))
    t0 = time.perf_counter()
    loss = net(b[:, :-1], b[:, 1:])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ts.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"rank": rank, "ms": ts, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)
"""


def torch_run(cfg, n, steps, d, port, threads=False):
    """n one-thread DDP ranks, or with threads one process of n threads."""
    path = os.path.join(d, "worker.py")
    with open(path, "w") as f:
        f.write(WORKER % dict(tests=os.path.join(ROOT, "tests", "gpt2"), cfg=json.dumps(cfg), steps=steps,
                              port=port, threads=n if threads else 1))
    if threads:
        out = sh([sys.executable, path], dict(ENV, OMP_NUM_THREADS=str(n), OMPI_COMM_WORLD_RANK="0",
                                              OMPI_COMM_WORLD_SIZE="1"))
    else:
        out = mpirun(n, [sys.executable, path])
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    ms = median_ms([max(r["ms"][i] for r in rows) for i in range(steps)])
    return dict(ms=ms, rss=max(r["rss"] for r in rows) / 1024)


def build_only(a):
    d = os.path.abspath(a.build_only)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "gpt.json")
    man = dict(shdc="shdc", gpt2="gpt2.shd", exes={})
    if os.path.exists(path):
        with open(path) as f:
            man = json.load(f)
    shutil.copy2(SHDC, os.path.join(d, "shdc"))
    shutil.copy2(GPT2, os.path.join(d, "gpt2.shd"))
    for name in a.configs:
        cfg = CONFIGS[name]
        for n in a.ranks:
            if cfg["B"] % n == 0:
                man["exes"]["%s:%d" % (name, n)] = os.path.relpath(shdc_build(name, cfg, n, d), d)
                print("built %s at %d ranks" % (name, n), flush=True)
    with open(path, "w") as f:
        json.dump(man, f, indent=1)
    print("manifest: %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--configs", nargs="+", default=["demo", "large"], choices=list(CONFIGS))
    ap.add_argument("--summary", action="store_true", help="also print shdc's trace-summary")
    ap.add_argument("--torch-threads", action="store_true",
                    help="PyTorch as one process of as many threads as shdc's ranks (not DDP ranks)")
    ap.add_argument("--bind-to", default="none", help="mpirun's --bind-to (core: a core per rank)")
    ap.add_argument("--build-only", metavar="DIR", help="build shdc's binaries into DIR with a manifest; run nothing")
    ap.add_argument("--run-from", metavar="DIR", help="run shdc's binaries from a --build-only DIR")
    a = ap.parse_args()
    global SHDC, GPT2
    OPT["bind"] = a.bind_to
    if a.build_only:
        return build_only(a)
    if a.run_from:
        OPT["run_from"] = os.path.abspath(a.run_from)
        with open(os.path.join(OPT["run_from"], "gpt.json")) as f:
            man = json.load(f)
        SHDC, GPT2 = os.path.join(OPT["run_from"], man["shdc"]), os.path.join(OPT["run_from"], man["gpt2"])
        OPT["exes"] = man["exes"]
    print("PyTorch: %s" % ("one process, as many threads as ranks" if a.torch_threads else
                           "DistributedDataParallel, one thread per rank"))
    print("| model | ranks | shdc ms/step | PyTorch ms/step | shdc tokens/s | PyTorch tokens/s | PyTorch / shdc | "
          "shdc share in GEMM | peak RSS MiB/rank shdc, PyTorch | shdc arrays MiB/rank measured, explain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    port = 29500 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as d:
        for name in a.configs:
            cfg = CONFIGS[name]
            desc = "%s (C=%d T=%d L=%d NH=%d B=%d)" % (name, cfg["C"], cfg["T"], cfg["L"], cfg["NH"], cfg["B"])
            for n in a.ranks:
                if cfg["B"] % n:
                    print("| %s | %d | skipped: B=%d does not divide by %d ranks |" % (desc, n, cfg["B"], n))
                    continue
                s = shdc_run(name, cfg, n, a.steps, d)
                t = torch_run(cfg, n, a.steps, d, port + n, a.torch_threads)
                tok = cfg["B"] * cfg["T"]
                print("| %s | %d | %.1f | %.1f | %.0f | %.0f | %.2f | %.0f%% | %.0f, %.0f | %.1f, %.1f |" %
                      (desc, n, s["ms"], t["ms"], tok / s["ms"] * 1000, tok / t["ms"] * 1000, t["ms"] / s["ms"],
                       100 * s["gemm"], s["rss"], t["rss"], s["peak"], s["explain_peak"]), flush=True)
                if a.summary:
                    print(s["summary"])


if __name__ == "__main__":
    main()
