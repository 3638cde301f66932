#!/usr/bin/env python3
"""bench/gpt.py: the GPT-2 training step of dsl-examples/gpt2.shd as shdc
compiles it, against this machine's matrix-multiply rate and against the
same model in PyTorch (tests/gpt2/ref_torch.py's forward pass, AdamW over
the same two parameter groups; DistributedDataParallel over gloo across
ranks), data parallel at each rank count, one thread per rank on both
sides.

Per configuration and rank count: ms per step (median of the steps after
the first two); the model's FLOPs per step (6 x parameters x tokens, plus
attention's 12 x L x T x C per token, the usual MFU count); the GFLOP/s
achieved; the rate of OpenBLAS sgemm at the model's GEMM shapes on this
machine (bench/sgemm_rate.c: each forward product and its two backward
products, one thread a rank, all ranks at once, measured just before and
just after the step, averaged), times the ranks; and their ratio, the
model FLOPs utilisation against this machine (MFU). Then PyTorch's
ms/step, the share of shdc's step in GEMM (its timeline, `shdc
trace-summary`), the MiB a step allocates from the buffer cache (the rises
of the timeline's memory track, steps 5 and 6), peak resident memory per
rank (both), and shdc's peak of
live arrays per rank as measured (SHD_TRACE=1) and as `shdc explain`
predicts it. Both sides train on the same uniform random tokens.

  bench/gpt.py [--ranks 1 2] [--steps 12] [--configs demo large ...] [--torch-threads] [--bind-to core]
               [--baseline SHDC] [--no-torch]

--baseline SHDC also times the step as another shdc (e.g. a build of main)
compiles it, in the same run, and prints its ms/step and the speedup.
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
Timings taken while other work loads the machine are noisy: the MFU
column divides by a rate measured under the same load.
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

# The demo model (gpt2.shd's defaults) and larger ones.
CONFIGS = {
    "demo": dict(V=256, T=64, L=4, NH=4, C=128, B=16),
    "large": dict(V=256, T=256, L=4, NH=6, C=384, B=8),
    # the large model on a batch that divides by 16 ranks (not run by default)
    "large-b16": dict(V=256, T=256, L=4, NH=6, C=384, B=16),
    "c384t128": dict(V=256, T=128, L=6, NH=6, C=384, B=16),
    "c768t256": dict(V=256, T=256, L=4, NH=12, C=768, B=8),
}


def params(cfg):
    """The parameters of gpt2.shd's model."""
    V, T, L, C = cfg["V"], cfg["T"], cfg["L"], cfg["C"]
    per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    return V * C + T * C + L * per_layer + 2 * C


def model_flops(cfg):
    """FLOPs of one training step: 6 per parameter and token, and attention's
    12 * L * T * C per token (PaLM's MFU count; causal masking not subtracted)."""
    tokens = cfg["B"] * cfg["T"]
    return 6 * params(cfg) * tokens + 12 * cfg["L"] * cfg["T"] * cfg["C"] * tokens


def gemm_shapes(cfg, n):
    """The step's GEMMs on one of n data-parallel ranks: each forward product
    (M tokens, N outputs, K inputs, the weight transposed as gpt2.shd stores
    it) and its two backward products (input and weight gradients)."""
    M = cfg["B"] // n * cfg["T"]
    C, V = cfg["C"], cfg["V"]
    fwd = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C), (V, C)]
    out = []
    for N, K in fwd:
        out += ["%d,%d,%d,0,1" % (M, N, K), "%d,%d,%d,0,0" % (M, K, N), "%d,%d,%d,1,0" % (N, K, M)]
    return out


def sgemm_rate_build(d):
    exe = os.path.join(d, "sgemm_rate")
    sh(["mpicc", "-std=c11", "-O2", "-o", exe, os.path.join(ROOT, "bench", "sgemm_rate.c")] +
       subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], capture_output=True,
                      text=True).stdout.split())
    return exe


def sgemm_rate(n, cfg, d):
    """GFLOP/s of sgemm per rank at the model's shapes, n ranks at once."""
    exe = os.path.join(OPT["run_from"] or d, "sgemm_rate")
    if not os.path.exists(exe):
        exe = sgemm_rate_build(d)
    out = mpirun(n, [exe, "2"] + gemm_shapes(cfg, n))
    rates = [float(x) for x in re.findall(r"sgemm GFLOP/s (\S+)", out)]
    return statistics.mean(rates)


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

def shdc_build(name, cfg, n, d, shdc=None, tag=""):
    exe = os.path.join(d, "gpt_%s_%d%s" % (name, n, tag))
    defs = sum((["-D", "%s=%d" % kv] for kv in cfg.items()), [])
    sh([shdc or SHDC, "build", GPT2, "--mesh", "data=%d,model=1" % n, "-o", exe] + defs)
    return exe


def step_ms(exe, n, steps, d, extra_env=None, wrap=()):
    """The median step of a run (its metrics file), and the run's output."""
    metrics = os.path.join(d, "metrics_%s.jsonl" % os.path.basename(exe))
    if os.path.exists(metrics):
        os.remove(metrics)
    out = mpirun(n, list(wrap) + [exe, "--steps=%d" % steps, "--data=", "--val=", "--metrics=" + metrics], extra_env)
    with open(metrics) as f:
        return median_ms([m["ms"] for m in map(json.loads, f) if "ms" in m]), out


def shdc_run(name, cfg, n, steps, d, shdc=None, tag=""):
    if tag:   # a baseline (another shdc): the step only
        return dict(ms=step_ms(shdc_build(name, cfg, n, d, shdc, tag), n, steps, d)[0])
    if OPT["run_from"]:
        exe = OPT["exes"].get("%s:%d" % (name, n))
        if exe is None:
            sys.exit("%s: no binary for %s at %d ranks (build it with --build-only)" % (OPT["run_from"], name, n))
        exe = os.path.join(OPT["run_from"], exe)
    else:
        exe = shdc_build(name, cfg, n, d)
    defs = sum((["-D", "%s=%d" % kv] for kv in cfg.items()), [])
    mesh = "data=%d,model=1" % n
    # GNU time reports each rank's peak resident set (KiB).
    ms, out = step_ms(exe, n, steps, d, {"SHD_TRACE": "1"},
                      [shutil.which("time") or "/usr/bin/time", "-f", "maxrss_kib %M"])
    rss = max(int(x) for x in re.findall(r"maxrss_kib (\d+)", out)) / 1024
    peak = max(int(x) for x in re.findall(r"rank \d+: peak_bytes=(\d+)", out)) / 2**20
    ex = sh([SHDC, "explain", GPT2, "--mesh", mesh] + defs)
    main_peak = re.search(r"^fn main\n(?:.*\n)*?\s+peak live arrays per rank: (\d+) bytes", ex, re.M)
    explain_peak = int(main_peak.group(1)) / 2**20 if main_peak else float("nan")
    # The share of the step in GEMM, from the timeline of a shorter run; the
    # bytes a step allocates, from the timelines of 4 and 6 steps (their
    # difference over 2: the steady state, start-up left out).
    alloc = []
    for k in (4, 6):
        trace = os.path.join(d, "run_%s_%d_%d.json" % (name, n, k))
        mpirun(n, [exe, "--steps=%d" % k, "--data=", "--val="], {"SHD_TRACE": trace})
        alloc.append(allocated_bytes(trace))
        if k == 4:
            summ = sh([SHDC, "trace-summary", trace])
            gemm = gemm_share(summ)
    return dict(ms=ms, rss=rss, peak=peak, explain_peak=explain_peak, gemm=gemm, summary=summ,
                alloc=(alloc[1] - alloc[0]) / 2 / 2**20)


def allocated_bytes(trace):
    """Bytes taken from the buffer cache on rank 0: the rises of the timeline's
    live-array-bytes counter, added up."""
    with open(trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    total, last = 0, 0
    for e in sorted((e for e in events if e.get("ph") == "C" and e.get("pid") == 0), key=lambda e: e["ts"]):
        b = e["args"]["bytes"]
        total += max(b - last, 0)
        last = b
    return total


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
    sgemm_rate_build(d)
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
    ap.add_argument("--baseline", metavar="SHDC", help="also time the step as this shdc compiles it")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
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
    cols = ["model", "ranks", "shdc ms/step", "GFLOP/step", "achieved GFLOP/s", "sgemm GFLOP/s (per core x ranks)",
            "MFU vs machine"]
    if a.baseline:
        cols += ["baseline ms/step", "speedup"]
    if not a.no_torch:
        cols += ["PyTorch ms/step", "PyTorch / shdc"]
    cols += ["shdc share in GEMM", "MiB allocated/step", "peak RSS MiB/rank shdc%s" % ("" if a.no_torch else ", PyTorch"),
             "shdc arrays MiB/rank measured, explain"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    port = 29500 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as d:
        for name in a.configs:
            cfg = CONFIGS[name]
            desc = "%s (C=%d T=%d L=%d NH=%d B=%d)" % (name, cfg["C"], cfg["T"], cfg["L"], cfg["NH"], cfg["B"])
            for n in a.ranks:
                if cfg["B"] % n:
                    print("| %s | %d | skipped: B=%d does not divide by %d ranks |" % (desc, n, cfg["B"], n))
                    continue
                r0 = sgemm_rate(n, cfg, d)
                s = shdc_run(name, cfg, n, a.steps, d)
                r1 = sgemm_rate(n, cfg, d)
                rate = (r0 + r1) / 2 * n
                flops = model_flops(cfg)
                achieved = flops / s["ms"] / 1e6
                row = [desc, "%d" % n, "%.1f" % s["ms"], "%.2f" % (flops / 1e9), "%.1f" % achieved,
                       "%.1f" % rate, "%.0f%%" % (100 * achieved / rate)]
                if a.baseline:
                    b = shdc_run(name, cfg, n, a.steps, d, a.baseline, "_base")
                    row += ["%.1f" % b["ms"], "%.2f" % (b["ms"] / s["ms"])]
                rss = "%.0f" % s["rss"]
                if not a.no_torch:
                    t = torch_run(cfg, n, a.steps, d, port + n, a.torch_threads)
                    row += ["%.1f" % t["ms"], "%.2f" % (t["ms"] / s["ms"])]
                    rss += ", %.0f" % t["rss"]
                row += ["%.0f%%" % (100 * s["gemm"]), "%.1f" % s["alloc"], rss,
                        "%.1f, %.1f" % (s["peak"], s["explain_peak"])]
                print("| " + " | ".join(row) + " |", flush=True)
                if a.summary:
                    print(s["summary"])


if __name__ == "__main__":
    main()
