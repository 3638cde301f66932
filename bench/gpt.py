#!/usr/bin/env python3
"""bench/gpt.py: the training steps of dsl-examples/gpt2.shd and
dsl-examples/llama.shd as shdc compiles them, against this machine's
matrix-multiply rate and against the same models in PyTorch, data parallel
at each rank count, one thread per rank on both sides.

The PyTorch peers are the tests' independent references: GPT-2 is
tests/gpt2/ref_torch.py's forward pass with AdamW over the same two
parameter groups; LLaMA is tests/llama/ref_torch.py's llama_loss (RMSNorm,
rotary embeddings, grouped-query attention, SwiGLU, untied head) with
AdamW over llama.shd's two groups (weight decay on Decay's matrices only)
and the gradient clipped to a global norm of 1 (llama.shd's --clip
default). Across ranks: DistributedDataParallel over gloo, one thread a
rank. Both sides train on the same uniform random tokens.

Per configuration and rank count: ms per step (median of the steps after
the first two); the model's FLOPs per step (6 x parameters x tokens, plus
attention's 12 x L x T x C per token, the usual MFU count; every parameter
counts, embeddings included); the GFLOP/s achieved; the rate of OpenBLAS
sgemm at the model's GEMM shapes on this machine (bench/sgemm_rate.c: each
forward product and its two backward products, one thread a rank, all
ranks at once, measured just before and just after the step, averaged),
times the ranks; and their ratio, the model FLOPs utilisation against this
machine (MFU). Then PyTorch's ms/step, the share of shdc's step in GEMM
(its timeline, `shdc trace-summary`), the MiB a step allocates (rank 0's
timeline, SHD_TRACE: the rises of its live-array-bytes counter inside
steps 2 and 3 of a 4-step run, averaged; every array a step creates counts,
whether the buffer cache hands out a reused block or a fresh one), peak
resident memory per rank (both), and shdc's peak of live arrays per rank
as measured (SHD_TRACE=1) and as `shdc explain` predicts it.

Each row is at one precision (--dtypes, default both): f32, or bf16 mixed
precision (the programs built with -D DT=bf16: f32 master weights and
AdamW, the matrix products in bf16; PyTorch's forward pass under
torch.autocast("cpu", dtype=torch.bfloat16)). The last columns: the bytes
one rank sends per step (`shdc plan`'s count at data=N,model=1: the
gradients' all-reduces move 2 bytes an element in bf16), and the mixed
step's ms less the f32 step's: what bf16 costs on a CPU without bf16
arithmetic (each bf16 product widens its blocks to f32 and calls sgemm,
each elementwise operation rounds its result: bench/bf16.py times the
conversions alone).

  bench/gpt.py [--shdc SHDC] [--ranks 1 2] [--steps 12] [--configs demo large llama ...] [--dtypes f32 bf16] [--torch-threads] [--bind-to core]
               [--baseline SHDC [--baseline-src [MODEL=]FILE]] [--no-torch]

Configurations (CONFIGS below): GPT-2's `demo` (gpt2.shd's defaults),
`large` (C=384 T=256 L=4 NH=6 B=8; `large-b16` on a batch of 16),
`c384t128` (C=384 T=128 L=6 B=16), `c768t256` (C=768 T=256 L=4 NH=12
B=8), `demo-v8k` (the demo with V=8192: the loss and the tied embedding
weigh as in GPT-2 proper); LLaMA's `llama` (llama.shd's defaults: C=128 T=64 L=4 NH=8 KV=2
F=352 B=16), `llama-c384` (C=384 T=256 L=4 NH=6 KV=2 F=1024 B=8) and
`llama-v8k` (llama with V=8192);
`tiny` and `llama-tiny` are smoke-check sizes (seconds, not measurements).
The default: demo, large and llama at 1 and 2 ranks, 12 steps.

--baseline SHDC also times the step as another shdc compiles it, in the
same run, and prints its ms/step and the speedup (baseline / this). By
default the baseline builds the same program; --baseline-src FILE (or
MODEL=FILE, MODEL gpt2 or llama; plain FILE is for gpt2) gives it another,
which must take the same -D sizes and --steps, --data=, --val= and
--metrics= flags: an older shdc cannot parse today's language, so the
baseline of an older shdc is that shdc's own version of the example.
bench/baseline-shdc.sh REV DIR builds the shdc of commit REV into DIR (a
git worktree) and prints the options; for the shdc before issue 15 (the
first parent of merge 52a8e12):

  bench/baseline-shdc.sh '52a8e12^1' /tmp/pre15
  bench/gpt.py --baseline /tmp/pre15/build/shdc --baseline-src /tmp/pre15/dsl-examples/gpt2.shd ...

With fewer cores than ranks the processes share cores: compare columns at
the same rank count only. --torch-threads runs PyTorch as one process with
as many threads as shdc has ranks (torch.set_num_threads), instead of as
many one-thread DDP ranks. A configuration whose batch does not divide by
the rank count is skipped with a note.

To measure on a machine that has MPI and OpenBLAS at run time but cannot
build, `--build-only DIR` builds shdc's binaries (and the baseline's, with
--baseline) into DIR with a manifest (gpt.json, merged with one already
there), copies shdc, the programs and the standard library (explain and
trace-summary need them) and the sgemm-rate probe, and runs nothing;
`--run-from DIR` runs from there, the baseline columns for the rows whose
baseline binaries the manifest has. Timings taken while other work loads
the machine are noisy: the MFU column divides by a rate measured under the
same load.
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
SHDC = os.path.join(B, "shdc")
# Each model: its program, and the directory of its PyTorch reference (ref_torch.py).
MODELS = {
    "gpt2": dict(src=os.path.join(ROOT, "dsl-examples", "gpt2.shd"), tests=os.path.join(ROOT, "tests", "gpt2")),
    "llama": dict(src=os.path.join(ROOT, "dsl-examples", "llama.shd"), tests=os.path.join(ROOT, "tests", "llama")),
}
OPT = dict(bind="none", run_from=None, exes={}, base_exes={})   # set by main
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")

# The demo models (the programs' defaults) and larger ones; the rest of each
# entry are the program's consts (-D NAME=VALUE).
CONFIGS = {
    "demo": dict(model="gpt2", V=256, T=64, L=4, NH=4, C=128, B=16),
    "large": dict(model="gpt2", V=256, T=256, L=4, NH=6, C=384, B=8),
    # the large model on a batch that divides by 16 ranks (not run by default)
    "large-b16": dict(model="gpt2", V=256, T=256, L=4, NH=6, C=384, B=16),
    "c384t128": dict(model="gpt2", V=256, T=128, L=6, NH=6, C=384, B=16),
    "c768t256": dict(model="gpt2", V=256, T=256, L=4, NH=12, C=768, B=8),
    # the demo with an 8192-token vocabulary (the byte tokens are a subset):
    # the loss and the tied embedding weigh as they do in GPT-2 proper
    "demo-v8k": dict(model="gpt2", V=8192, T=64, L=4, NH=4, C=128, B=16),
    # LLaMA: F a multiple of 32; NH, KV, F, V divide by model, B by data
    "llama": dict(model="llama", V=256, T=64, L=4, C=128, NH=8, KV=2, F=352, B=16),
    "llama-c384": dict(model="llama", V=256, T=256, L=4, C=384, NH=6, KV=2, F=1024, B=8),
    # llama with an 8192-token vocabulary: the loss and the head weigh more
    "llama-v8k": dict(model="llama", V=8192, T=64, L=4, C=128, NH=8, KV=2, F=352, B=16),
    # smoke checks of the script itself
    "tiny": dict(model="gpt2", V=64, T=16, L=2, NH=2, C=32, B=4),
    "llama-tiny": dict(model="llama", V=64, T=16, L=2, C=32, NH=4, KV=2, F=64, B=4),
}


def consts(cfg):
    return {k: v for k, v in cfg.items() if k not in ("model", "DT")}


def describe(name, cfg):
    keys = ("C", "T", "L", "NH", "KV", "F", "B") if cfg["model"] == "llama" else ("C", "T", "L", "NH", "B")
    return "%s (%s)" % (name, " ".join("%s=%d" % (k, cfg[k]) for k in keys))


def params(cfg):
    """The parameters of the model: gpt2.shd's (tied embedding, biases,
    LayerNorm) or llama.shd's (GQA, SwiGLU, untied head, RMSNorm gains)."""
    V, T, L, C = cfg["V"], cfg["T"], cfg["L"], cfg["C"]
    if cfg["model"] == "llama":
        kv, F = cfg["KV"] * (C // cfg["NH"]), cfg["F"]
        per_layer = C * C + 2 * kv * C + C * C + 3 * F * C + 2 * C   # wq wk wv wo, w1 w3 w2, the gains
        return 2 * V * C + L * per_layer + C
    per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    return V * C + T * C + L * per_layer + 2 * C


def model_flops(cfg):
    """FLOPs of one training step: 6 per parameter and token, and attention's
    12 * L * T * C per token (PaLM's MFU count; causal masking not subtracted)."""
    tokens = cfg["B"] * cfg["T"]
    return 6 * params(cfg) * tokens + 12 * cfg["L"] * cfg["T"] * cfg["C"] * tokens


def gemm_shapes(cfg, n):
    """The step's GEMMs on one of n data-parallel ranks: each forward product
    (M tokens, N outputs, K inputs, the weight transposed as the programs
    store it, [out, in]) and its two backward products (input and weight
    gradients). Attention's products run in the attention kernel, not here."""
    M = cfg["B"] // n * cfg["T"]
    C, V = cfg["C"], cfg["V"]
    if cfg["model"] == "llama":
        kv, F = cfg["KV"] * (C // cfg["NH"]), cfg["F"]
        fwd = [(C, C), (kv, C), (kv, C), (C, C), (F, C), (F, C), (C, F), (V, C)]
    else:
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

def defines(cfg):
    """The sizes, and -D DT=bf16 for a mixed-precision row (f32 is the
    programs' default: an older shdc's program has no DT)."""
    dt = ["-D", "DT=" + cfg["DT"]] if cfg.get("DT", "f32") != "f32" else []
    return sum((["-D", "%s=%d" % kv] for kv in consts(cfg).items()), []) + dt


def shdc_build(name, cfg, n, d, shdc=None, src=None, tag="", hint=""):
    """The data-parallel binary of a configuration at n ranks (built by
    shdc, default --shdc's); `hint` is added to the message when the build
    fails."""
    shdc = shdc or SHDC
    exe = os.path.join(d, "%s_%s_%s_%d%s" % (cfg["model"], name, cfg.get("DT", "f32"), n, tag))
    src = src or MODELS[cfg["model"]]["src"]
    cmd = [shdc, "build", src, "--mesh", "data=%d,model=1" % n, "-o", exe] + defines(cfg)
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode:
        sys.exit("failed: %s%s\n%s" % (" ".join(cmd), hint, p.stderr[-3000:]))
    return exe


def step_ms(exe, n, steps, d, extra_env=None, wrap=()):
    """The median step of a run (its metrics file), and the run's output."""
    metrics = os.path.join(d, "metrics_%s.jsonl" % os.path.basename(exe))
    if os.path.exists(metrics):
        os.remove(metrics)
    out = mpirun(n, list(wrap) + [exe, "--steps=%d" % steps, "--data=", "--val=", "--metrics=" + metrics], extra_env)
    with open(metrics) as f:
        return median_ms([m["ms"] for m in map(json.loads, f) if "ms" in m]), out


def exe_key(name, cfg, n):
    """A binary's key in --build-only's manifest: NAME:N, NAME:N:bf16."""
    dt = cfg.get("DT", "f32")
    return "%s:%d" % (name, n) + ("" if dt == "f32" else ":" + dt)


def prebuilt(table, name, cfg, n):
    exe = table.get(exe_key(name, cfg, n))
    return exe and os.path.join(OPT["run_from"], exe)


def baseline_run(name, cfg, n, steps, d, base):
    """The step as the baseline shdc builds its program: ms, or None when
    --run-from's manifest has no baseline binary for this row."""
    if OPT["run_from"]:
        exe = prebuilt(OPT["base_exes"], name, cfg, n)
        if not exe:
            return None
    else:
        exe = baseline_build(name, cfg, n, d, base)
    return step_ms(exe, n, steps, d)[0]


def baseline_build(name, cfg, n, d, base):
    return shdc_build(name, cfg, n, d, base["shdc"], base["src"].get(cfg["model"]), "_base",
                      " (the baseline: an older shdc needs its own version of the program, --baseline-src %s=FILE)"
                      % cfg["model"])


def shdc_run(name, cfg, n, steps, d):
    src = MODELS[cfg["model"]]["src"]
    if OPT["run_from"]:
        exe = prebuilt(OPT["exes"], name, cfg, n)
        if exe is None:
            sys.exit("%s: no binary for %s at %d ranks (build it with --build-only)" % (OPT["run_from"], name, n))
    else:
        exe = shdc_build(name, cfg, n, d)
    mesh = "data=%d,model=1" % n
    # SHD_TRACE=1's table (rank 0, before the program exits) has the
    # largest peak resident set of any rank (getrusage, KiB) and of live
    # arrays (bytes).
    ms, out = step_ms(exe, n, steps, d, {"SHD_TRACE": "1"})
    rss = trace_figure(out, "maxrss_kib", exe) / 1024
    peak = trace_figure(out, "peak_bytes", exe) / 2**20
    ex = sh([SHDC, "explain", src, "--mesh", mesh] + defines(cfg))
    main_peak = re.search(r"^fn main\n(?:.*\n)*?\s+peak live arrays per rank: (\d+) bytes", ex, re.M)
    explain_peak = int(main_peak.group(1)) / 2**20 if main_peak else float("nan")
    # The share of the step in GEMM and the bytes a step allocates, from
    # the timeline of a 4-step run (steps 2 and 3: start-up left out).
    trace = os.path.join(d, "run_%s_%d.json" % (name, n))
    mpirun(n, [exe, "--steps=4", "--data=", "--val="], {"SHD_TRACE": trace})
    summ = sh([SHDC, "trace-summary", trace])
    return dict(ms=ms, rss=rss, peak=peak, explain_peak=explain_peak, gemm=gemm_share(summ), summary=summ,
                alloc=allocated_per_step(trace, 2) / 2**20, sent=sent_per_step(src, cfg, n))


def sent_per_step(src, cfg, n):
    """Bytes one rank sends per training step at data=n,model=1, as `shdc
    plan` counts them (the loop's iteration, calls and the layer loop
    included; explain counts loop bodies once)."""
    if n == 1:
        return 0
    out = sh([SHDC, "plan", src, "--devices=%d" % n] + defines(cfg))
    m = re.search(r"^\s+\d+\s+data=%d,model=1\s.*?(\d+)\s+[\d.]+ [KMG]iB" % n, out, re.M)
    return int(m.group(1)) if m else float("nan")


def trace_figure(out, name, exe):
    """A figure of the SHD_TRACE=1 table's `max over ranks` lines."""
    m = re.search(r"^shdc trace: max over ranks: %s=(\d+)$" % name, out, re.M)
    if not m:
        sys.exit("%s: no '%s' in its SHD_TRACE=1 table:\n%s" % (exe, name, out[-3000:]))
    return int(m.group(1))


def allocated_per_step(trace, first):
    """Bytes rank 0 allocates per step, steps `first` on: the rises of the
    timeline's live-array-bytes counter inside each step span, averaged
    over those steps. The counter moves on every shd_alloc and
    shd_release (runtime/alloc.c), so a rise is an array created, whether
    the buffer cache reuses a block for it or not."""
    with open(trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    pid = doc.get("otherData", {}).get("first_pid", 1) if isinstance(doc, dict) else 1   # rank 0's process
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("pid") == pid and e.get("ph") == "X" and e.get("cat") == "step" and e["args"]["step"] >= first]
    if not steps:
        sys.exit("%s: no step spans of step %d or later on rank 0" % (trace, first))
    rises, last = [], 0
    for e in sorted((e for e in events if e.get("ph") == "C" and e.get("pid") == pid), key=lambda e: e["ts"]):
        b = e["args"]["bytes"]
        if b > last:
            rises.append((e["ts"], b - last))
        last = b
    total = sum(r for ts, r in rises if any(lo <= ts <= hi for lo, hi in steps))
    return total / len(steps)


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
    dist.init_process_group("gloo", init_method=%(init)r, rank=rank, world_size=world)
def tx_bytes():   # what this rank's host sent so far (bench/cluster.py: a host is a network namespace)
    if not %(ifname)r:
        return 0
    with open("/sys/class/net/%%s/statistics/tx_bytes" %% %(ifname)r) as f:
        return int(f.read())
V, T, L, B = (cfg[k] for k in ("V", "T", "L", "B"))
g = torch.Generator().manual_seed(0)
%(model)s
model = Net()
%(prelude)s
net, groups = %(wrap)s if world > 1 else (model, param_groups(model))
opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
rng = np.random.default_rng(rank)
ts, tx = [], []
for s in range(steps):
    b = torch.from_numpy(rng.integers(0, V, size=(B // world, T + 1)))
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=%(autocast)r):
        loss = net(b[:, :-1], b[:, 1:])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if CLIP:
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    ts.append((time.perf_counter() - t0) * 1000)
    tx.append(tx_bytes())
# each rank its own file: mpirun may join two ranks' lines on one
with open(os.path.join(%(out)r, "torch_rank%%d.json" %% rank), "w") as f:
    json.dump({"rank": rank, "ms": ts, "tx": tx, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, f)
if world > 1:   # gloo's threads stopped before exit (a communication hook's would abort it)
    dist.barrier()
    dist.destroy_process_group()
"""

# gpt2.shd's model and initialisation; AdamW's groups; no clipping (gpt2.shd has none).
GPT2_MODEL = r"""
NH, C = cfg["NH"], cfg["C"]
shapes = ref_torch.shapes(V, T, L, C)
class Net(torch.nn.Module):
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
def param_groups(m):
    return [{"params": [m.p[n] for n in ref_torch.NAMES if n in ref_torch.DECAY], "weight_decay": 0.1},
            {"params": [m.p[n] for n in ref_torch.NAMES if n not in ref_torch.DECAY], "weight_decay": 0.0}]
CLIP = 0.0
"""

# llama.shd's model and initialisation (normal 0.02, wo and w2 0.02/sqrt(2L),
# gains 1); AdamW with weight decay on Decay only; clipping at llama.shd's
# default global norm 1.
LLAMA_MODEL = r"""
C, NH, KV, FH = cfg["C"], cfg["NH"], cfg["KV"], cfg["F"]
shapes = ref_torch.shapes(V, L, C, NH, KV, FH)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.ParameterDict()   # its keys may not hold '.': d.h.wq is d_h_wq
        for n, s in shapes.items():
            if n in ref_torch.NODECAY:
                t = torch.ones(s)
            else:
                std = 0.02 / math.sqrt(2 * L) if n in ("d.h.wo", "d.h.w2") else 0.02
                t = torch.randn(s, generator=g) * std
            self.p[n.replace(".", "_")] = torch.nn.Parameter(t)
    def leaves(self):
        return {n: self.p[n.replace(".", "_")] for n in shapes}
    def forward(self, x, y):
        return ref_torch.llama_loss(torch, F, self.leaves(), x, y, NH, KV)
def param_groups(m):
    p = m.leaves()
    return [{"params": [p[n] for n in ref_torch.DECAY], "weight_decay": 0.1},
            {"params": [p[n] for n in ref_torch.NODECAY], "weight_decay": 0.0}]
CLIP = 1.0
"""


DDP = "(torch.nn.parallel.DistributedDataParallel(model), param_groups(model))"


def worker_source(cfg, steps, init, threads, out_dir, wrap=DDP, prelude="", ifname=""):
    """The PyTorch worker of a configuration: `wrap` makes the distributed
    module of `model` and the optimizer's parameter groups, a pair (after
    `prelude`), init is the process group's
    init_method; with ifname each step also records the bytes that
    interface has sent (its tx_bytes counter)."""
    return WORKER % dict(tests=MODELS[cfg["model"]]["tests"], cfg=json.dumps(consts(cfg)), steps=steps, init=init,
                         threads=threads, model=LLAMA_MODEL if cfg["model"] == "llama" else GPT2_MODEL,
                         out=out_dir, wrap=wrap, prelude=prelude, ifname=ifname,
                         autocast=cfg.get("DT", "f32") == "bf16")


def torch_run(cfg, n, steps, d, port, threads=False):
    """n one-thread DDP ranks, or with threads one process of n threads."""
    path = os.path.join(d, "worker.py")
    out_dir = os.path.join(d, "torch_rows")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    src = worker_source(cfg, steps, "tcp://127.0.0.1:%d" % port, n if threads else 1, out_dir)
    with open(path, "w") as f:
        f.write(src)
    if threads:
        sh([sys.executable, path], dict(ENV, OMP_NUM_THREADS=str(n), OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="1"))
    else:
        mpirun(n, [sys.executable, path])
    rows = []
    for r in range(1 if threads else n):
        with open(os.path.join(out_dir, "torch_rank%d.json" % r)) as f:
            rows.append(json.load(f))
    ms = median_ms([max(r["ms"][i] for r in rows) for i in range(steps)])
    return dict(ms=ms, rss=max(r["rss"] for r in rows) / 1024)


# ---- --build-only -----------------------------------------------------------------------------------------------

def build_only(a, base):
    d = os.path.abspath(a.build_only)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "gpt.json")
    man = dict(shdc="shdc", exes={})
    if os.path.exists(path):
        with open(path) as f:
            man = json.load(f)
    man.setdefault("programs", {})
    if "gpt2" in man:              # an older manifest's name for programs["gpt2"]
        man["programs"].setdefault("gpt2", man.pop("gpt2"))
    shutil.copy2(SHDC, os.path.join(d, "shdc"))
    strip(os.path.join(d, "shdc"))
    # shdc finds the standard library (lib/std) at ../lib or share/shdc/lib beside it
    shutil.copytree(os.path.join(ROOT, "lib"), os.path.join(d, "share", "shdc", "lib"), dirs_exist_ok=True)
    for model in sorted({CONFIGS[c]["model"] for c in a.configs}):
        man["programs"][model] = os.path.basename(MODELS[model]["src"])
        shutil.copy2(MODELS[model]["src"], os.path.join(d, man["programs"][model]))
    sgemm_rate_build(d)
    if base:
        mb = man.setdefault("baseline", {"exes": {}})
        mb["shdc"] = base["shdc"]
        mb["src"] = {m: os.path.abspath(s) for m, s in base["src"].items()}
    for name in a.configs:
        for n in a.ranks:
            for dt in a.dtypes:
                cfg = dict(CONFIGS[name], DT=dt)
                if cfg["B"] % n:
                    print("skipped %s at %d ranks: B=%d does not divide by %d" % (name, n, cfg["B"], n))
                    continue
                man["exes"][exe_key(name, cfg, n)] = os.path.relpath(strip(shdc_build(name, cfg, n, d)), d)
                if base and dt == "f32":
                    mb["exes"][exe_key(name, cfg, n)] = os.path.relpath(strip(baseline_build(name, cfg, n, d, base)), d)
                print("built %s %s at %d ranks%s" % (name, dt, n, " (and the baseline)" if base and dt == "f32" else ""),
                      flush=True)
    with open(path, "w") as f:
        json.dump(man, f, indent=1)
    print("manifest: %s" % path)


def strip(exe):
    """Debug information off (the binaries travel): strip, where there is one."""
    if shutil.which("strip"):
        sh(["strip", "--strip-debug", exe])
    return exe


def baseline_opts(a):
    """{"shdc": path, "src": {model: program}} of --baseline and --baseline-src."""
    if not a.baseline:
        if a.baseline_src:
            sys.exit("--baseline-src needs --baseline SHDC")
        return None
    src = {}
    for s in a.baseline_src or []:
        model, _, f = s.partition("=") if s.split("=", 1)[0] in MODELS else ("", "", s)
        model = model or "gpt2"
        if not os.path.isfile(f):
            sys.exit("--baseline-src %s: no such file" % s)
        src[model] = os.path.abspath(f)
    shdc = shutil.which(a.baseline) or a.baseline
    if not os.path.isfile(shdc):
        sys.exit("--baseline %s: no such shdc" % a.baseline)
    return dict(shdc=os.path.abspath(shdc), src=src)


def main():
    global SHDC
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=SHDC, help="the shdc that builds the programs (default build/shdc)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--configs", nargs="+", default=["demo", "large", "llama"], choices=list(CONFIGS))
    ap.add_argument("--dtypes", nargs="+", default=["f32", "bf16"], choices=["f32", "bf16"],
                    help="the programs' DT: f32, and bf16 for mixed precision (-D DT=bf16; PyTorch under autocast)")
    ap.add_argument("--baseline", metavar="SHDC", help="also time the step as this shdc compiles it (f32 rows)")
    ap.add_argument("--baseline-src", metavar="[MODEL=]FILE", action="append",
                    help="the program the baseline shdc builds for MODEL's configurations (gpt2 if not named)")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    ap.add_argument("--summary", action="store_true", help="also print shdc's trace-summary")
    ap.add_argument("--torch-threads", action="store_true",
                    help="PyTorch as one process of as many threads as shdc's ranks (not DDP ranks)")
    ap.add_argument("--bind-to", default="none", help="mpirun's --bind-to (core: a core per rank)")
    ap.add_argument("--build-only", metavar="DIR", help="build shdc's binaries into DIR with a manifest; run nothing")
    ap.add_argument("--run-from", metavar="DIR", help="run shdc's binaries from a --build-only DIR")
    a = ap.parse_args()
    SHDC = os.path.abspath(a.shdc)
    OPT["bind"] = a.bind_to
    base = baseline_opts(a)
    if a.build_only:
        return build_only(a, base)
    if a.run_from:
        if base:
            sys.exit("--run-from takes the baseline's binaries from the manifest: build them with "
                     "--build-only DIR --baseline SHDC")
        OPT["run_from"] = os.path.abspath(a.run_from)
        with open(os.path.join(OPT["run_from"], "gpt.json")) as f:
            man = json.load(f)
        SHDC = os.path.join(OPT["run_from"], man["shdc"])
        progs = man.get("programs", {"gpt2": man.get("gpt2", "gpt2.shd")})
        for model, p in progs.items():
            MODELS[model]["src"] = os.path.join(OPT["run_from"], p)
        OPT["exes"] = man["exes"]
        OPT["base_exes"] = man.get("baseline", {}).get("exes", {})
    with_base = base is not None or any("%s:%d" % (c, n) in OPT["base_exes"] for c in a.configs for n in a.ranks)
    if not a.no_torch:
        print("PyTorch: %s" % ("one process, as many threads as ranks" if a.torch_threads else
                               "DistributedDataParallel, one thread per rank"))
    if base:
        print("baseline: %s building %s" % (base["shdc"], ", ".join(
            "%s=%s" % kv for kv in sorted(dict({m: v["src"] for m, v in MODELS.items()}, **base["src"]).items()))))
    elif with_base:
        print("baseline: the binaries of %s's manifest, built by %s" % (a.run_from, man["baseline"]["shdc"]))
    cols = ["model", "DT", "ranks", "shdc ms/step", "GFLOP/step", "achieved GFLOP/s", "sgemm GFLOP/s (per core x ranks)",
            "MFU vs machine"]
    if with_base:
        cols += ["baseline ms/step", "speedup"]
    if not a.no_torch:
        cols += ["PyTorch ms/step", "PyTorch / shdc"]
    cols += ["shdc share in GEMM", "MiB allocated/step", "peak RSS MiB/rank shdc%s" % ("" if a.no_torch else ", PyTorch"),
             "shdc arrays MiB/rank measured, explain", "bytes sent/rank/step (plan)", "bf16 - f32 ms/step"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    port = 29500 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as d:
        for name in a.configs:
            desc = describe(name, CONFIGS[name])
            for n in a.ranks:
                f32_ms = None
                for dt in a.dtypes:
                    cfg = dict(CONFIGS[name], DT=dt)
                    if cfg["B"] % n:
                        print("| %s | %s | %d | skipped: B=%d does not divide by %d ranks |" % (desc, dt, n, cfg["B"], n))
                        continue
                    s = bench_row(a, name, cfg, n, d, base, with_base, port, f32_ms)
                    f32_ms = s["ms"] if dt == "f32" else f32_ms
                    if a.summary:
                        print(s["summary"])


def bench_row(a, name, cfg, n, d, base, with_base, port, f32_ms):
    """Times one configuration at one precision and rank count, prints its
    row and returns shdc's figures."""
    desc = describe(name, cfg)
    r0 = sgemm_rate(n, cfg, d)
    s = shdc_run(name, cfg, n, a.steps, d)
    r1 = sgemm_rate(n, cfg, d)
    rate = (r0 + r1) / 2 * n
    flops = model_flops(cfg)
    achieved = flops / s["ms"] / 1e6
    row = [desc, cfg["DT"], "%d" % n, "%.1f" % s["ms"], "%.2f" % (flops / 1e9), "%.1f" % achieved,
           "%.1f" % rate, "%.0f%%" % (100 * achieved / rate)]
    if with_base:
        b = baseline_run(name, cfg, n, a.steps, d, base) if cfg["DT"] == "f32" else None
        row += ["%.1f" % b, "%.2f" % (b / s["ms"])] if b is not None else ["-", "-"]
    rss = "%.0f" % s["rss"]
    if not a.no_torch:
        t = torch_run(cfg, n, a.steps, d, port + n, a.torch_threads)
        row += ["%.1f" % t["ms"], "%.2f" % (t["ms"] / s["ms"])]
        rss += ", %.0f" % t["rss"]
    row += ["%.0f%%" % (100 * s["gemm"]), "%.1f" % s["alloc"], rss, "%.1f, %.1f" % (s["peak"], s["explain_peak"]),
            "%d" % s["sent"] if s["sent"] == s["sent"] else "-", "%+.1f" % (s["ms"] - f32_ms) if cfg["DT"] != "f32" and f32_ms else "-"]
    print("| " + " | ".join(row) + " |", flush=True)
    return s


if __name__ == "__main__":
    main()
