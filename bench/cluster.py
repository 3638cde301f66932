#!/usr/bin/env python3
"""bench/cluster.py: training steps across emulated hosts over shaped links
(issue 30, item 1), shdc's layouts beside PyTorch DDP and FSDP.

N hosts are network namespaces joined by a bridge (tests/cluster/clusterlib.py's
NetHosts: host i at 10.233.1.(i+1) on its eth0, nothing added to the
machine's own namespace), one rank a host, started by one `mpirun
--hostfile ... --mca btl tcp,self --bind-to none` from the first host (TCP
only; the daemons started in each namespace by an rsh agent, each host with
its own session directory). Each link is unshaped (the veth pair) or shaped
on every host's eth0 with a token bucket (`tc qdisc replace dev eth0 root
tbf rate R burst B latency 50ms`; netem is not available here).

For each host count, link and layout (--layouts):

  gpt2       dsl-examples/gpt2.shd, data parallel (data=N,model=1)
  llama      dsl-examples/llama.shd, data parallel
  gpt2_fsdp  dsl-examples/gpt2_fsdp.shd (parameters and moments sharded over data)
  gpt2_fsdp_noprefetch  gpt2_fsdp built with --prefetch=off: each layer's parameters
             gathered where they are used, not an iteration ahead
  gpt2_2d    dsl-examples/gpt2.shd over data x model (data=N/2,model=2)
  gpt2_nobucket  gpt2 built with --bucket=0: each gradient all-reduced when it is made
  gpt2_reduce_bf16  gpt2 built with --reduce-dtype=bf16: f32 training, its gradient
             buckets sent as bf16 (half the bytes)
  gpt2_zero  tests/gpt2/gpt2_zero.shd, a sharded optimizer (ZeRO-1/2): the parameters
             and moments kept as shards over data, gathered once a step
  ddp        PyTorch DistributedDataParallel (gloo) of bench/gpt.py's GPT-2 (and LLaMA, when llama runs)
  ddp_fp16   the same GPT-2 with DDP's fp16_compress_hook (gradients sent as fp16: gloo has
             no bf16 sum, and bf16_compress_hook needs NCCL), gpt2_reduce_bf16's peer
  fsdp       PyTorch FullyShardedDataParallel (gloo) of the same GPT-2

the GPT-2 sizes C=384 T=256 L=4 NH=6 B=8 (bench/gpt.py's `large`) and the
LLaMA ones C=384 T=256 L=4 NH=6 KV=2 F=1024 B=8 (`llama-c384`); -D NAME=VALUE
overrides a size of every model that has it (quick runs: -D C=64 -D T=32).
Both sides train on uniform random tokens from the same initialisation
recipe (bench/gpt.py). Per row:

- ms/step: the median step after the first two (shdc: rank 0's --metrics
  file; PyTorch: each step's slowest rank), over --repeat runs pooled;
- / unshaped: that over the same layout's step on the unshaped link;
- bytes/step/rank measured: the bytes the hosts' eth0 sent (their
  tx_bytes counters: frames with their Ethernet/IP/TCP headers and the TCP
  acknowledgements) per step and rank. shdc: (run of S steps - run of 1
  step) / (S - 1), so start-up (wire-up, the launch) is left out; PyTorch:
  each rank reads its host's counter after each step, steps 3 to S;
- timeline: the bytes the runtime's collectives sent per step and rank
  (rank 0's, from the traced run below: `shdc trace-summary`'s
  collectives table over the traced steps);
- explain: `shdc explain --network`'s bytes sent per rank for one
  iteration of the training loop (its per-step line; both branches of an
  `if` count there);
- collectives/step: the runtime's count per step (the timeline) and
  explain's;
- exposed comm ms/step: from the timeline of a further run of 5 steps,
  the last 3 traced (SHD_TRACE=FILE.json SHD_TRACE_STEPS=2:, `shdc
  trace-summary`; a traced step waits at a barrier before each collective
  to tell waiting from communicating, and the ranks send their timelines
  to rank 0 at the end, so it is not the timed run):
  communication plus waiting per step, of the rank with the most (the
  timeline's `exposed` column where the summary has one: a bucket's
  communication overlapping compute is not in it);
- plan ms/step (comm): `shdc plan --devices=N --mesh LAYOUT --flops=F,E
  --network=FILE`'s estimate and its communication part, the network file
  describing the emulated link (`* BANDWIDTH LATENCY`: the unshaped link's
  bandwidth and the latency as bench/netcal.c measures them across the
  hosts, a shaped link's bandwidth its tbf rate; `reduce`: the measured
  local reduction speed), and the rates F,E (`--flops`, default `fit`:
  the non-negative least-squares fit of bench/plan.py to the one-device
  steps of gpt2 in f32 and in bf16, run here first, against plan's
  contraction FLOPs and elementwise operations of those builds);
- DDP / this: PyTorch DDP's step of the same model on the same link over
  this row's (gpt2_reduce_bf16's: DDP's with fp16_compress_hook).

Then, for each host count and link, every pair of shdc GPT-2 layouts
whose measured steps differ by more than the run-to-run noise (the sum of
the two rows' half interquartile ranges of their steps) and whether plan's
estimates order them the same way.

  bench/cluster.py [--hosts 2 4] [--rates unshaped 1gbit 300mbit] [--layouts gpt2 llama gpt2_fsdp gpt2_2d ddp fsdp]
                   [--steps 10] [--repeat 1] [-D NAME=VALUE ...] [--flops fit|F,E] [--quick] [--shdc SHDC]

--quick: 2 hosts, unshaped and 300mbit, small models (C=64 T=16 L=2 NH=4
B=8), 4 steps: a check of the benchmark, not a
measurement. The hosts share this machine's cores: at 4 hosts on 2 cores
the ranks take turns (bytes and plan's figures, not speed). Everything it
makes (namespaces, the processes in them, files) is removed on every exit
path: `finally`, and SIGINT/SIGTERM/SIGHUP turned into SystemExit; the
processes by their pids (`ip netns pids`), the runs by their process group.
Without root or `ip netns` it prints why and exits 0.
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import gpt  # noqa: E402  (the models' sizes, -D options and the PyTorch worker)

LAYOUTS = {
    # name: (the program, from the repository's root; the model; the mesh at N hosts)
    "gpt2": ("dsl-examples/gpt2.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "llama": ("dsl-examples/llama.shd", "llama", lambda n: {"data": n, "model": 1}),
    "gpt2_fsdp": ("dsl-examples/gpt2_fsdp.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "gpt2_2d": ("dsl-examples/gpt2.shd", "gpt2", lambda n: {"data": n // 2, "model": 2}),
    "gpt2_nobucket": ("dsl-examples/gpt2.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "gpt2_zero": ("tests/gpt2/gpt2_zero.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "gpt2_fsdp_noprefetch": ("dsl-examples/gpt2_fsdp.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "gpt2_bf16": ("dsl-examples/gpt2.shd", "gpt2", lambda n: {"data": n, "model": 1}),
    "gpt2_reduce_bf16": ("dsl-examples/gpt2.shd", "gpt2", lambda n: {"data": n, "model": 1}),
}
# the build flags of a layout beyond its mesh: gpt2_nobucket is gpt2 with
# each gradient all-reduced on its own when it is made (--bucket=0),
# gpt2_fsdp_noprefetch gpt2_fsdp with each layer gathered where it is used,
# gpt2_bf16 gpt2 in mixed precision (bf16 products and gradients' sums),
# gpt2_reduce_bf16 gpt2 in f32 with its gradient buckets sent as bf16
FLAGS = {"gpt2_nobucket": ["--bucket=0"], "gpt2_fsdp_noprefetch": ["--prefetch=off"], "gpt2_bf16": ["-D", "DT=bf16"],
         "gpt2_reduce_bf16": ["--reduce-dtype=bf16"]}
PEERS = {"ddp": "PyTorch DDP", "ddp_fp16": "PyTorch DDP fp16_compress_hook", "fsdp": "PyTorch FSDP"}
# the peer a layout's "DDP / this" compares with (default ddp): the same bytes on the wire
DDP_PEER = {"gpt2_reduce_bf16": "ddp_fp16"}


def program_path(prog):
    return os.path.join(ROOT, prog)
SIZES = {"gpt2": gpt.CONFIGS["large"], "llama": gpt.CONFIGS["llama-c384"]}
# --quick: small enough for seconds a step, large enough that every layout
# type-checks at 4 hosts (gpt2_fsdp shards the heads over data x model)
QUICK_SIZES = {"gpt2": dict(model="gpt2", V=64, T=16, L=2, NH=4, C=64, B=8),
               "llama": dict(model="llama", V=64, T=16, L=2, C=64, NH=4, KV=2, F=64, B=8)}
# Torch 1.13 on Python 3.11: torch.distributed.fsdp imports a dataclass whose
# default is an unhashable dataclass instance, which 3.11 refuses; the
# classes made while it is imported get object's hash. FSDP then runs
# where this torch supports it on a CPU (1.13's needs CUDA: the row says so).
FSDP_PRELUDE = r"""
import dataclasses
_dc = dataclasses.dataclass
def _hashable(cls=None, **kw):
    def wrap(c):
        r = _dc(c, **kw)
        if r.__hash__ is None:
            r.__hash__ = object.__hash__
        return r
    return wrap if cls is None else wrap(cls)
dataclasses.dataclass = _hashable
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
dataclasses.dataclass = _dc
def _fsdp(model):   # the optimizer's two groups need FSDP's original parameters (torch >= 2.0)
    try:
        return FSDP(model, use_orig_params=True), param_groups(model)
    except TypeError:   # 1.13: flat parameters only; one group, with weight decay
        net = FSDP(model)
        return net, [{"params": list(net.parameters()), "weight_decay": 0.1}]
"""
FSDP_WRAP = "_fsdp(model)"

# DDP whose gradient buckets are sent as fp16 (DDP's own compression hook)
DDP_FP16_PRELUDE = r"""
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as _hooks
def _ddp_fp16(model):
    m = torch.nn.parallel.DistributedDataParallel(model)
    m.register_comm_hook(None, _hooks.fp16_compress_hook)
    return m
"""
DDP_FP16_WRAP = "(_ddp_fp16(model), param_groups(model))"
WRAPS = {"ddp": (gpt.DDP, ""), "ddp_fp16": (DDP_FP16_WRAP, DDP_FP16_PRELUDE), "fsdp": (FSDP_WRAP, FSDP_PRELUDE)}


# ---- helpers (tests/cluster/test_clusterbench.py checks them) ----------------------------------------------------

def parse_rate(text):
    """'unshaped' -> None; '1gbit', '300mbit', '2.5Gbit', '500kbit' -> bit/s."""
    if text == "unshaped":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", text.lower())
    if not m:
        raise ValueError("a link rate is 'unshaped' or NUMBER[k|m|g]bit (300mbit, 1gbit), not %r" % text)
    bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    if bits < 1e5:
        raise ValueError("%s: below 100kbit, a step would take minutes" % text)
    return int(bits)


def rate_label(text):
    r = parse_rate(text)
    if r is None:
        return "unshaped"
    return "%g Gbit/s" % (r / 1e9) if r >= 1e9 else "%g Mbit/s" % (r / 1e6)


def network_file(bandwidth_bytes, latency_s, reduce_bytes, label):
    """A `--network` file: every axis on the one link, and the local reduction speed."""
    return "# bench/cluster.py: the emulated link\n*       %.6gB/s  %.6gus  %s\nreduce  %.6gB/s\n" % (
        bandwidth_bytes, latency_s * 1e6, label, reduce_bytes)


def parse_netcal(text):
    """bench/netcal.c's network file -> (bandwidth B/s, latency s, reduce B/s)."""
    unit = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    m = re.search(r"^\*\s+([\d.e+-]+)([kMGT]?)B/s\s+([\d.e+-]+)us", text, re.M)
    r = re.search(r"^reduce\s+([\d.e+-]+)([kMGT]?)B/s", text, re.M)
    if not m or not r:
        raise ValueError("not a netcal network file:\n" + text)
    return float(m.group(1)) * unit[m.group(2)], float(m.group(3)) * 1e-6, float(r.group(1)) * unit[r.group(2)]


def explain_step(text):
    """explain --network's (collectives, bytes sent per rank) of one
    training step: the per-iteration line of main's loop that sends the
    most."""
    found = [(int(c), int(b)) for c, b in re.findall(r"^\s+per iteration of the loop at line \d+ of main: (\d+) "
                                                     r"collectives?, (\d+) bytes sent per rank", text, re.M)]
    if not found:
        raise ValueError("explain printed no per-step line")
    return max(found, key=lambda x: x[1])


def timeline_step(summary):
    """From `shdc trace-summary`: rank 0's (collectives, bytes sent) per
    traced step, as the runtime counted them."""
    steps = re.search(r"^steps \(iterations of main's loops\): (\d+) on rank 0", summary, re.M)
    m = re.search(r"^collectives per rank \(count, bytes sent\):\n.*\n0 +([\d ]+)$", summary, re.M)
    if not steps or not m or int(steps.group(1)) == 0:
        raise ValueError("no steps or no collectives table in the summary")
    v = [int(x) for x in m.group(1).split()]
    n = int(steps.group(1))
    return sum(v[0::2]) / n, sum(v[1::2]) / n


def exposed_comm_ms(summary):
    """From `shdc trace-summary`: the exposed communication per step, ms,
    of the rank with the most: its `exposed` column where the summary has
    one, else communication plus waiting (nothing overlaps)."""
    lines = summary.split("\n")
    try:
        h = next(i for i, l in enumerate(lines) if re.match(r"rank\s+(main|steps)\s", l))
    except StopIteration:
        raise ValueError("no per-rank time table in the summary")
    head = re.split(r"\s{2,}", lines[h].strip())
    steps = re.search(r"^steps \(iterations of main's loops\): (\d+) on rank 0", summary, re.M)
    if not steps or int(steps.group(1)) == 0:
        raise ValueError("the summary counts no steps")
    worst = 0.0
    for l in lines[h + 1:]:
        if not re.match(r"^\d+\s", l):
            break
        vals = [float(v) for v in re.findall(r"(\d+(?:\.\d+)?)(?:\s+[\d.]+%)?", l)]
        col = dict(zip(head, vals))
        ex = [v for k, v in col.items() if k.startswith("exposed")]
        worst = max(worst, ex[0] if ex else col.get("communication", 0.0) + col.get("waiting", 0.0))
    return worst / int(steps.group(1))


def timed(ms):
    """A run's steps after the first two (start-up and warm-up), when it has more than three."""
    return ms[2:] if len(ms) > 3 else ms


def median_and_noise(ts):
    """The median of timed steps (timed()), and the noise: half their
    interquartile range (half their range when fewer than four)."""
    if len(ts) < 4:
        return statistics.median(ts), (max(ts) - min(ts)) / 2
    q = statistics.quantiles(ts, n=4)
    return statistics.median(ts), (q[2] - q[0]) / 2


def order_checks(rows):
    """rows: [(name, measured ms, noise ms, plan ms)] of one host count and
    link. Every pair whose measured steps differ by more than their noise:
    (faster, slower, does plan order them so)."""
    out = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = sorted((rows[i], rows[j]), key=lambda r: r[1])
            if b[1] - a[1] > a[2] + b[2]:
                out.append((a, b, a[3] < b[3]))
    return out


def markdown(cols, rows):
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] +
                     ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def fmt(x, f="%.1f"):
    return "-" if x is None else f % x


def sizes_with(defs, quick):
    """Each model's sizes with the -D overrides (a NAME no model has is an error)."""
    base = QUICK_SIZES if quick else SIZES
    out = {m: dict(c) for m, c in base.items()}
    for d in defs:
        name, _, v = d.partition("=")
        if not re.fullmatch(r"-?\d+", v):
            raise ValueError("-D %s: expected NAME=INTEGER" % d)
        hit = [m for m in out if name in out[m] and name != "model"]
        if not hit:
            raise ValueError("-D %s: no model has a size %s (gpt2: %s; llama: %s)" % (
                d, name, " ".join(k for k in out["gpt2"] if k != "model"),
                " ".join(k for k in out["llama"] if k != "model")))
        for m in hit:
            out[m][name] = int(v)
    return out


# ---- the runs ---------------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, a, d, shdc, sizes):
        self.a, self.d, self.shdc, self.sizes = a, d, shdc, sizes
        self.exes, self.startup, self.explained, self.one = {}, {}, {}, {}
        self.fsdp_error = None
        self.port = 29500 + os.getpid() % 2000

    def mesh_arg(self, mesh):
        return ",".join("%s=%d" % kv for kv in mesh.items())

    def build(self, layout, n, mesh=None):
        prog, model, meshf = LAYOUTS[layout]
        mesh, flags = mesh or meshf(n), FLAGS.get(layout, [])
        key = (prog, self.mesh_arg(mesh), tuple(flags))
        if key not in self.exes:
            exe = os.path.join(self.d, "%s_%s%s" % (os.path.basename(prog)[:-4],
                                                    self.mesh_arg(mesh).replace(",", "_").replace("=", ""),
                                                    "_" + layout if flags else ""))
            cmd = [self.shdc, "build", program_path(prog), "--mesh", self.mesh_arg(mesh), "-o",
                   exe] + gpt.defines(self.sizes[model]) + flags
            p = subprocess.run(cmd, capture_output=True, text=True, env=gpt.ENV)
            if p.returncode:
                raise RunFailed("%s failed:\n%s" % (" ".join(cmd), p.stderr[-3000:]))
            self.exes[key] = exe
        return self.exes[key], mesh

    def shdc_figures(self, layout, n, netfile):
        """explain's bytes per step and plan's estimate (step, comm), seconds."""
        prog, model, meshf = LAYOUTS[layout]
        src, mesh = program_path(prog), self.mesh_arg(meshf(n))
        defs = gpt.defines(self.sizes[model]) + FLAGS.get(layout, [])
        key = (prog, mesh, tuple(FLAGS.get(layout, [])))
        if key not in self.explained:
            p = subprocess.run([self.shdc, "explain", src, "--mesh", mesh, "--network=" + netfile] + defs,
                               capture_output=True, text=True, env=gpt.ENV)
            self.explained[key] = explain_step(p.stdout) if p.returncode == 0 else (None, None)
        p = subprocess.run([self.shdc, "plan", src, "--devices=%d" % n, "--mesh", mesh, "--json",
                            "--flops=" + self.a.flops, "--network=" + netfile] + defs,
                           capture_output=True, text=True, env=gpt.ENV)
        try:
            lay = [x for x in json.loads(p.stdout)["layouts"] if x["type_checks"]][0]
            est = (lay["step_seconds"], lay["communication_seconds"])
        except (ValueError, KeyError, IndexError):
            print("note: shdc plan of %s at %s: exit %d %s" % (prog, mesh, p.returncode, p.stderr.strip()[-500:]))
            est = (None, None)
        return self.explained[key], est

    def one_device(self, layout):
        """The losses of the layout's program built for one device (every
        axis of size 1) over --steps steps, run here: the oracle of the
        hosts' runs."""
        exe, mesh = self.build(layout, 1, {ax: 1 for ax in LAYOUTS[layout][2](2)})
        if exe not in self.one:
            metrics = exe + ".one.jsonl"
            if os.path.exists(metrics):
                os.remove(metrics)
            gpt.mpirun(1, [exe, "--data=", "--val=", "--steps=%d" % self.a.steps, "--metrics=" + metrics])
            self.one[exe] = losses_of(metrics)
        return self.one[exe]

    def run(self, cl, argv, env, timeout, what):
        rc, out, err = cl.h.mpirun(cl.agent, cl.hostfile, len(cl.h.names), argv, self.d, timeout=timeout, env=env,
                                   extra=["--oversubscribe"])
        if rc != 0:
            raise RunFailed("%s: exit %s\n%s%s" % (what, rc, out[-2000:], err[-2000:]))
        return out

    def timeout(self):
        return 120 + 30 * self.a.steps

    def shdc_row(self, cl, layout, link):
        n = len(cl.h.names)
        exe, mesh = self.build(layout, n)
        steps = self.a.steps
        base = [exe, "--data=", "--val="]
        key = (layout, n)
        if key not in self.startup:   # the traffic of a 1-step run: start-up and one step
            t0 = cl.h.tx_bytes()
            self.run(cl, base + ["--steps=1"], {}, self.timeout(), "%s at %d hosts, 1 step" % (layout, n))
            self.startup[key] = cl.h.tx_bytes() - t0
        ts, sent, exposed, runtime = [], [], [], []
        for r in range(self.a.repeat):
            metrics, trace = (os.path.join(self.d, "%s_%d.%s" % (layout, r, x)) for x in ("jsonl", "json"))
            for f in (metrics, trace):
                if os.path.exists(f):
                    os.remove(f)
            t0 = cl.h.tx_bytes()
            self.run(cl, base + ["--steps=%d" % steps, "--metrics=" + metrics], {}, self.timeout(),
                     "%s at %d hosts, %s" % (layout, n, link))
            sent.append((cl.h.tx_bytes() - t0 - self.startup[key]) / max(1, steps - 1) / n)
            with open(metrics) as f:
                ms = [m["ms"] for m in map(json.loads, f) if "ms" in m]
            ts += timed(ms)
            if r == 0:
                got, one = losses_of(metrics), self.one_device(layout)
                drift = max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(got, one)) \
                    if len(got) == len(one) == steps else float("inf")
            # The timeline from a run of its own: a traced run marks each
            # collective's wait (a barrier before it) and sends the ranks'
            # timelines to rank 0 at the end, so it is neither timed nor
            # counted above.
            self.run(cl, base + ["--steps=5"], {"SHD_TRACE": trace, "SHD_TRACE_STEPS": "2:"}, self.timeout(),
                     "%s at %d hosts, %s, traced" % (layout, n, link))
            p = subprocess.run([self.shdc, "trace-summary", trace], capture_output=True, text=True, env=gpt.ENV)
            exposed.append(exposed_comm_ms(p.stdout))
            runtime.append(timeline_step(p.stdout))
        med, noise = median_and_noise(ts)
        return dict(ms=med, noise=noise, sent=statistics.median(sent), exposed=statistics.median(exposed),
                    timeline=runtime[0], drift=drift)

    def torch_row(self, cl, peer, model, link):
        n = len(cl.h.names)
        if peer == "fsdp" and self.fsdp_error:
            return dict(error=self.fsdp_error)
        cfg = self.sizes[model]
        out_dir = os.path.join(self.d, "torch_rows")
        ts, sent = [], []
        for r in range(self.a.repeat):
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            self.port += 1
            src = gpt.worker_source(cfg, self.a.steps, "tcp://%s:%d" % (cl.h.addrs[0], self.port), 1, out_dir,
                                    wrap=WRAPS[peer][0], prelude=WRAPS[peer][1], ifname="eth0")
            path = os.path.join(self.d, "worker_%s.py" % peer)
            with open(path, "w") as f:
                f.write(src)
            try:
                self.run(cl, [sys.executable, path], {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}, self.timeout() + 60,
                         "%s %s at %d hosts, %s" % (PEERS[peer], model, n, link))
            except RunFailed as e:
                if peer == "fsdp":
                    errs = re.findall(r"^(\w+(?:Error|Exception)\b.*)$", str(e), re.M)
                    self.fsdp_error = "unavailable: %s" % (errs[-1] if errs else str(e).split("\n")[0])
                    print("note: PyTorch %s's FSDP: %s" % (torch_version(), self.fsdp_error), flush=True)
                    return dict(error=self.fsdp_error)
                raise
            rows = []
            for rk in range(n):
                with open(os.path.join(out_dir, "torch_rank%d.json" % rk)) as f:
                    rows.append(json.load(f))
            steps = self.a.steps
            per = [max(x["ms"][i] for x in rows) for i in range(steps)]
            ts += timed(per)
            first = 1 if steps > 2 else 0
            sent.append(statistics.mean((x["tx"][-1] - x["tx"][first]) / max(1, steps - 1 - first) for x in rows))
        med, noise = median_and_noise(ts)
        return dict(ms=med, noise=noise, sent=statistics.median(sent), exposed=None)


class RunFailed(Exception):
    pass


def losses_of(metrics):
    with open(metrics) as f:
        return [m["loss"] for m in map(json.loads, f) if "loss" in m]


class Cluster:
    """NetHosts with its rsh agent and hostfile (one slot a host)."""
    def __init__(self, h, d):
        self.h = h
        self.agent = h.write_agent(os.path.join(d, "rsh-netns-%d" % len(h.names)))
        self.hostfile = h.write_hostfile(os.path.join(d, "hosts%d" % len(h.names)), 1)


def torch_version():
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return p.stdout.strip() or "?"


# the one-device builds plan's rates are fitted to: two mixes of
# contractions and elementwise work (f32, and bf16's conversions)
FIT_LAYOUTS = ("gpt2", "gpt2_bf16")


def fit_rates(b):
    """--flops=fit: plan's two rates, the non-negative least-squares fit
    (bench/plan.py's) of the one-device steps of FIT_LAYOUTS (the least
    median ms of --steps over max(2, --repeat) runs here, one rank) to
    plan's contraction FLOPs and elementwise operations of the same builds.
    Returns "F,E" for --flops."""
    import numpy as np
    import plan as planbench
    rows, ys = [], []
    for layout in FIT_LAYOUTS:
        prog, model, meshf = LAYOUTS[layout]
        mesh = {ax: 1 for ax in meshf(2)}
        exe, _ = b.build(layout, 1, mesh)
        # the least of the runs' medians: a run slowed by another process
        # on the machine would misplace the fit
        ms = min(gpt.step_ms(exe, 1, b.a.steps, b.d)[0] for _ in range(max(2, b.a.repeat)))
        p = subprocess.run([b.shdc, "plan", program_path(prog), "--devices=1", "--mesh", b.mesh_arg(mesh), "--json",
                            "--flops=1G"] + gpt.defines(b.sizes[model]) + FLAGS.get(layout, []),
                           capture_output=True, text=True, env=gpt.ENV)
        lay = [x for x in json.loads(p.stdout)["layouts"] if x["type_checks"]][0]
        rows.append([lay["contraction_flops"], lay["elementwise_flops"]])
        ys.append(ms / 1e3)
        print("  one device, %s: %.1f ms/step; plan: %.3g contraction FLOPs, %.3g elementwise operations"
              % (layout, ms, lay["contraction_flops"], lay["elementwise_flops"]), flush=True)
    inv = planbench.fit_inverse_rates(np.array(rows, dtype=float), np.array(ys))
    return "%.4g,%.4g" % (1 / inv[0], 1 / inv[1])


def calibrate(b, cl):
    """The unshaped link across the hosts: bench/netcal.c on the first two."""
    exe = os.path.join(b.d, "netcal")
    if not os.path.exists(exe):
        gpt.sh([os.environ.get("MPICC", "mpicc"), "-std=c11", "-O2", "-o", exe, os.path.join(ROOT, "bench", "netcal.c")])
    hostfile = os.path.join(b.d, "hosts-netcal")
    with open(hostfile, "w") as f:
        f.write("".join("%s slots=1\n" % a for a in cl.h.addrs[:2]))
    rc, out, err = cl.h.mpirun(cl.agent, hostfile, 2, [exe], b.d, timeout=120)
    if rc != 0:
        raise RunFailed("netcal across the hosts: exit %s\n%s%s" % (rc, out[-2000:], err[-2000:]))
    return parse_netcal(out)


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def cpu_name():
    p = subprocess.run(["lscpu"], capture_output=True, text=True)
    m = re.search(r"^Model name:\s+(.*)$", p.stdout, re.M)
    return m.group(1).strip() if m else "?"


def hosts_set(b, n, rates, rows, checks):
    import clusterlib
    peers = [p for p in b.a.layouts if p in PEERS]
    mine = [l for l in b.a.layouts if l in LAYOUTS and not (l == "gpt2_2d" and n % 2)]
    models = sorted({LAYOUTS[l][1] for l in mine} | ({"gpt2"} if peers else set()))
    for l in list(mine):
        try:
            b.build(l, n)
        except RunFailed as e:
            print("%d hosts: %s left out: %s" % (n, l, e), flush=True)
            mine.remove(l)
    try:
        with clusterlib.NetHosts(n) as h:
            cl = Cluster(h, b.d)
            bw, lat, red = calibrate(b, cl)
            print("%d hosts: the unshaped link measures %.3g GB/s, %.1f us (bench/netcal.c); local reductions %.3g GB/s"
                  % (n, bw / 1e9, lat * 1e6, red / 1e9), flush=True)
            unshaped = {}
            for rate in rates:
                bits = parse_rate(rate)
                h.shape(bits)
                label = rate_label(rate)
                net = os.path.join(b.d, "link_%d_%s.net" % (n, rate))
                with open(net, "w") as f:
                    f.write(network_file(bw if bits is None else bits / 8, lat, red, "emulated-" + rate))
                here, plan_rows = {}, []
                for l in mine:
                    r = b.shdc_row(cl, l, label)
                    r["explain"], (r["plan"], r["plan_comm"]) = b.shdc_figures(l, n, net)
                    here[l] = r
                    plan_rows.append((l, r["ms"], r["noise"], None if r["plan"] is None else r["plan"] * 1e3))
                    print("  %d hosts, %s, %s: %.1f ms/step" % (n, label, l, r["ms"]), flush=True)
                for p in peers:
                    for m in (models if p == "ddp" else ["gpt2"]):
                        r = b.torch_row(cl, p, m, label)
                        here["%s:%s" % (p, m)] = r
                        if "ms" in r:
                            print("  %d hosts, %s, %s %s: %.1f ms/step" % (n, label, PEERS[p], m, r["ms"]), flush=True)
                if bits is None:
                    unshaped = here
                for k, r in here.items():
                    rows.append(table_row(n, label, k, r, unshaped.get(k), here))
                ok = [x for x in plan_rows if LAYOUTS[x[0]][1] == "gpt2" and x[3] is not None]
                for a_, b_, agree in order_checks(ok):
                    checks.append([n, label, "%s < %s" % (a_[0], b_[0]), "%.1f < %.1f" % (a_[1], b_[1]),
                                   "%.1f + %.1f" % (a_[2], b_[2]), "%.1f, %.1f" % (a_[3], b_[3]),
                                   "yes" if agree else "no"])
            h.shape(None)
    except clusterlib.Unavailable as e:
        print("%d hosts: unavailable (%s)" % (n, e), flush=True)


def table_row(n, label, key, r, base, here):
    if "error" in r:
        return [n, label, PEERS[key.split(":")[0]] + " " + key.split(":")[1], r["error"]] + ["-"] * (len(COLS) - 4)
    drift = "-" if r.get("drift") is None else "%.1e" % r["drift"]
    if key in LAYOUTS:
        prog, model, _ = LAYOUTS[key]
        name = "shdc %s" % key
    else:
        p, model = key.split(":")
        name = "%s %s" % (PEERS[p], model)
    ratio = fmt(r["ms"] / base["ms"], "%.2f") if base and "ms" in base else "-"
    ddp = here.get("%s:%s" % (DDP_PEER.get(key, "ddp"), model))
    vs = fmt(ddp["ms"] / r["ms"], "%.2f") if key in LAYOUTS and ddp and "ms" in ddp else "-"
    f = "%.1f (%.1f)" if r.get("plan") is not None and r["plan"] < 0.1 else "%.0f (%.0f)"
    plan = "-" if r.get("plan") is None else f % (r["plan"] * 1e3, r["plan_comm"] * 1e3)
    tl, ex = r.get("timeline") or (None, None), r.get("explain") or (None, None)
    return [n, label, name, "%.1f ± %.1f" % (r["ms"], r["noise"]), ratio,
            "%s, %s, %s" % (fmt(r["sent"], "%.0f"), fmt(tl[1], "%.0f"), fmt(ex[1], "%d")),
            "%s, %s" % (fmt(tl[0], "%.0f"), fmt(ex[0], "%d")), fmt(r.get("exposed")), plan, vs, drift]


COLS = ["hosts", "link", "layout", "ms/step (± noise)", "/ unshaped", "bytes/step/rank: eth0, timeline, explain",
        "collectives/step: timeline, explain", "exposed comm ms/step", "plan ms/step (comm)", "DDP / this",
        "losses: max rel. diff to 1 device"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--hosts", type=int, nargs="+")
    ap.add_argument("--rates", nargs="+", help="unshaped, or NUMBER[k|m|g]bit (default: unshaped 1gbit 300mbit)")
    ap.add_argument("--layouts", nargs="+", choices=list(LAYOUTS) + list(PEERS),
                    default=list(LAYOUTS) + list(PEERS))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-D", dest="defs", action="append", default=[], metavar="NAME=VALUE",
                    help="a size of every model that has it (C, T, L, NH, B, V; KV and F: LLaMA)")
    ap.add_argument("--flops", default="fit",
                    help="plan's rates of contractions and elementwise work per rank, F,E (default fit: fitted to "
                         "the one-device steps of gpt2 in f32 and bf16, run here first)")
    ap.add_argument("--quick", action="store_true", help="2 hosts, unshaped and 300mbit, tiny models, 4 steps")
    a = ap.parse_args()
    a.hosts = a.hosts or ([2] if a.quick else [2, 4])
    a.rates = a.rates or (["unshaped", "300mbit"] if a.quick else ["unshaped", "1gbit", "300mbit"])
    a.steps = a.steps or (4 if a.quick else 10)
    try:
        sizes = sizes_with(a.defs, a.quick)
        for r in a.rates:
            parse_rate(r)
    except ValueError as e:
        sys.exit("bench/cluster.py: %s" % e)
    if a.steps < 2 or a.repeat < 1 or any(n < 2 for n in a.hosts):
        sys.exit("bench/cluster.py: --steps must be at least 2, --repeat at least 1, --hosts at least 2")
    if a.rates[0] != "unshaped" and "unshaped" in a.rates:
        a.rates.remove("unshaped")
        a.rates.insert(0, "unshaped")   # the ratio column needs it first
    if os.geteuid() != 0:
        print("bench/cluster.py: skipped: emulated hosts are network namespaces, which need root")
        return
    if subprocess.run(["sh", "-c", "ip netns list"], capture_output=True).returncode:
        print("bench/cluster.py: skipped: no `ip netns` (iproute2 with network namespaces)")
        return
    import clusterlib
    clusterlib.on_signals()
    clusterlib.remove_stale_namespaces()
    for m, c in sizes.items():
        for n in a.hosts:
            if c["B"] % n:
                sys.exit("bench/cluster.py: %s's batch B=%d does not divide by %d hosts (-D B=...)" % (m, c["B"], n))
    print("bench/cluster.py on %s, %s; load average %s (%d CPUs)" % (
        cpu_name(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), loadavg(), os.cpu_count()))
    print("sizes: " + "; ".join(gpt.describe(m, c) for m, c in sizes.items()) +
          "; %d steps, %d run(s) a row" % (a.steps, a.repeat), flush=True)
    rows, checks = [], []
    with tempfile.TemporaryDirectory(prefix="shd-cluster-") as d:
        b = Bench(a, d, os.path.abspath(a.shdc), sizes)
        if a.flops == "fit":
            try:
                a.flops = fit_rates(b)
            except (RunFailed, SystemExit, ValueError, KeyError, IndexError) as e:
                a.flops = "60G,1G"
                print("note: plan's rates could not be fitted (%s); --flops=%s" % (str(e)[:300], a.flops))
        print("plan's rates: --flops=%s" % a.flops, flush=True)
        for n in a.hosts:
            try:
                hosts_set(b, n, a.rates, rows, checks)
            except RunFailed as e:
                print("%d hosts: a run failed; its rows are left out:\n%s" % (n, e), flush=True)
    print()
    print(markdown(COLS, rows))
    print()
    if checks:
        print("Layouts whose measured steps differ by more than the noise, and plan's order:\n")
        print(markdown(["hosts", "link", "measured order", "ms/step", "noise", "plan ms/step", "plan agrees"], checks))
    else:
        print("No two shdc GPT-2 layouts differ by more than the run-to-run noise on any link.")
    print("\nload average after: %s" % loadavg())


if __name__ == "__main__":
    main()
