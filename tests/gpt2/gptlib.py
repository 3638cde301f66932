"""Helpers of the GPT-2 tests (tests/gpt2/test_*.py): build a GPT program
for a mesh and configuration, run it under mpirun, read its losses (from
the JSON lines of its --metrics file, each loss exactly as the program
computed it); make an --init directory and a --batches file with
tests/gpt2/ref_torch.py's helpers; a small text corpus whose loss falls
quickly."""
import itertools
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ref_torch  # noqa: E402  (the reference's init and batch helpers)

GPT2 = os.path.join(ROOT, "dsl-examples", "gpt2.shd")
FSDP = os.path.join(ROOT, "dsl-examples", "gpt2_fsdp.shd")
TP = os.path.join(HERE, "gpt2_tp.shd")
ZERO = os.path.join(HERE, "gpt2_zero.shd")

# The tiny configuration every layout test uses: NH and 4C divide by 8
# (heads and the hidden dim over up to 8 `model` devices, ZeRO-3's head
# split over model * data), C by 8 (ZeRO-3 over up to 8 `data` devices).
TINY = dict(V=256, T=8, L=2, NH=8, C=32, B=8)



def openblas_core():
    """The OpenBLAS kernels a shdc program runs with here: the ones the
    runtime picks when OpenBLAS chose generic ones (runtime/mesh.c,
    better_core), else OpenBLAS's own choice (None). The PyTorch reference
    (Debian's torch calls the same OpenBLAS) runs with them too: with
    different kernels (Debian's OpenBLAS 0.3.21 picks its generic Prescott
    ones on a Sapphire Rapids Xeon) the sums round differently, and eight
    AdamW steps, which divide by the root of tiny second moments, magnify
    that past f32 tolerance in a parameter with near-zero gradients."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((l for l in f if l.startswith("flags")), "").split())
    except OSError:
        return None
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OPENBLAS_NUM_THREADS="1")
if openblas_core():
    ENV["OPENBLAS_CORETYPE"] = openblas_core()


class Failure(Exception):
    pass


def require_torch(who):
    """Ends the test with a message when PyTorch (the reference) is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("%s: PyTorch is missing (Debian's python3-torch; tools/install-deps installs it)" % who)


def sh(cmd, cwd=None, timeout=300, check=True):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and p.returncode:
        raise Failure("failed (exit %d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def build(shdc, src, mesh, exe, cfg=TINY, opt="-O0", flags=()):
    """shdc build SRC --mesh MESH -D ... -o EXE (mesh: {'data': 2, 'model': 1});
    flags: more options (-D DT=bf16)."""
    defs = list(flags)
    for k, v in cfg.items():
        defs += ["-D", "%s=%d" % (k, v)]
    m = ",".join("%s=%d" % kv for kv in mesh.items())
    sh([shdc, "build", src, "--mesh", m, opt, "-o", exe] + defs, timeout=300)
    return exe


def ranks(mesh):
    n = 1
    for v in mesh.values():
        n *= v
    return n


_runs = itertools.count()


def run(exe, n, args, cwd=None, check=True, timeout=300):
    """mpirun -np N EXE ARGS --metrics=FILE: the result has .metrics, the
    objects of FILE's lines (parsed strictly: NaN is the string "NaN")."""
    m = os.path.join(cwd or ".", ".metrics-%d-%d.jsonl" % (os.getpid(), next(_runs)))
    if os.path.exists(m):
        os.remove(m)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n), exe] + args + \
        ["--metrics=" + m]
    p = sh(cmd, cwd=cwd, timeout=timeout, check=check)
    p.metrics = []
    if os.path.exists(m):
        with open(m, encoding="utf-8") as f:
            p.metrics = [json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(Failure("not JSON: " + c)))
                         for line in f]
        os.remove(m)
    return p


def losses(out, what="step"):
    """{S: L}, S counted from 0: of a run of shdc's GPT (run's result) the
    "loss" (what="step") or "val_loss" (what="val") of the metrics line of
    step S + 1; of text (the PyTorch reference's output) its `step S loss L`
    lines."""
    if isinstance(out, str):
        return {int(s): float(x) for s, x in re.findall(r"^%s (\d+) loss (\S+)" % what, out, re.M)}
    key = "loss" if what == "step" else "val_loss"
    return {m["step"] - 1: m[key] for m in out.metrics if key in m}


def loss_text(out, what="step"):
    """{S: the loss}, exactly as computed (the metrics' shortest text reads
    back as the same f32), for bitwise comparisons."""
    return losses(out, what)


def compare(name, got, want, rtol=2e-5, atol=2e-5):
    """Every step of want is in got, within f32 tolerance."""
    if sorted(got) != sorted(want):
        raise Failure("%s: steps %s, expected %s" % (name, sorted(got), sorted(want)))
    worst = max(abs(got[s] - want[s]) / (atol + rtol * abs(want[s])) for s in want)
    if worst > 1:
        rows = "\n".join("  step %d: %.7f vs %.7f" % (s, got[s], want[s]) for s in sorted(want))
        raise Failure("%s: losses differ beyond f32 tolerance:\n%s" % (name, rows))


TEXT = ("The jury said it did find that the city had been run well. It said the election was conducted "
        "fairly and that the people of the city were pleased with the way it was handled. The jury also "
        "said that the county should look into the matter of the new school, and that the state would pay "
        "for the roads. ")


def corpus(path, n=20000):
    """A small English corpus as i32 byte tokens (make data's format)."""
    text = (TEXT * (n // len(TEXT) + 1))[:n]
    np.save(path, np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int32))
    return path


def text_batches(path, steps, B, T, seed=0):
    """i32[steps, B, T+1]: windows of the corpus at random starts."""
    rng = np.random.default_rng(seed)
    toks = np.frombuffer((TEXT * 40).encode("ascii"), dtype=np.uint8).astype(np.int32)
    starts = rng.integers(0, len(toks) - T - 1, size=(steps, B))
    b = np.stack([np.stack([toks[s:s + T + 1] for s in row]) for row in starts]).astype(np.int32)
    np.save(path, b)
    return path


# Where each parameter (llm.c's name) lives in the programs' GPT struct: the
# Decay group (d) or the NoDecay group (n), layers stacked under h.
LEAF = {"wte": "d.wte", "wpe": "d.wpe", "qkvw": "d.h.qkvw", "attprojw": "d.h.attprojw", "fcw": "d.h.fcw",
        "fcprojw": "d.h.fcprojw", "ln1w": "n.h.ln1w", "ln1b": "n.h.ln1b", "qkvb": "n.h.qkvb",
        "attprojb": "n.h.attprojb", "ln2w": "n.h.ln2w", "ln2b": "n.h.ln2b", "fcb": "n.h.fcb",
        "fcprojb": "n.h.fcprojb", "lnfw": "n.lnfw", "lnfb": "n.lnfb"}


def state_dir(ck, step):
    """The checkpoint of step `step` in a --save directory."""
    return os.path.join(ck, "step_%06d" % step)


def checkpoint(ck, step, part="p"):
    """{llm.c name: array in llm.c's layout} of a checkpoint's parameters
    (part "p") or AdamW moments ("m", "v"): the struct's leaves, qkvw and
    qkvb reshaped from their head-split form."""
    out = {}
    for name, leaf in LEAF.items():
        a = np.load(os.path.join(state_dir(ck, step), "%s.%s.npy" % (part, leaf)))
        if name in ("qkvw", "qkvb"):
            a = a.reshape(a.shape[0], -1, *a.shape[4:])
        out[name] = a
    return out


def make_init(d, cfg=TINY, seed=0):
    ref_torch.make_init(d, cfg["V"], cfg["T"], cfg["L"], cfg["C"], seed)
    return d


def check_mixed(name, runs, f32, ref_f32, ref_mixed, factor=3.0, floor=5e-4, mesh_tol=1e-3):
    """Mixed precision (bf16 compute, f32 weights) against f32, as
    PyTorch's autocast bf16 run against its own f32 run: runs is {mesh
    tag: {S: loss}} of the mixed build (its first entry the 1-device one),
    f32 the 1-device f32 build's losses, ref_f32 and ref_mixed PyTorch's
    f32 and autocast runs on the same model, init and batches. Each mesh's
    mixed losses agree with the 1-device mixed build's (bf16's sums round
    per hop, so within mesh_tol relative); each step's |mixed - f32| is
    within factor times PyTorch's |autocast - f32| plus floor; and the
    mixed build differs from f32 at all (so it is not the f32 program).
    Returns lines for the test's report."""
    tags = list(runs)
    one = runs[tags[0]]
    steps = sorted(ref_f32)
    out, moved = [], 0.0
    for tag in tags[1:]:
        compare("%s: mixed precision at %s against 1 device" % (name, tag), runs[tag], one, rtol=mesh_tol, atol=0)
        out.append("%s: %.2e from 1 device's at most" % (tag, max(abs(runs[tag][s] - one[s]) for s in one)))
    for s in steps:
        ours, theirs = abs(one[s] - f32[s]), abs(ref_mixed[s] - ref_f32[s])
        moved = max(moved, ours)
        out.append("step %d: |bf16 - f32| shdc %.2e, PyTorch autocast %.2e" % (s, ours, theirs))
        if not ours <= factor * theirs + floor:
            raise Failure("%s: step %d's mixed-precision loss %.6f is %.2e from the f32 run's %.6f; PyTorch's "
                          "autocast run is %.2e from its f32 run (allowed: %g x that + %g)\n%s"
                          % (name, s, one[s], ours, f32[s], theirs, factor, floor, "\n".join(out)))
    if moved == 0.0:
        raise Failure("%s: the mixed-precision losses equal the f32 run's exactly: not computed in bf16" % name)
    return out


MIXED_MESHES = ({"data": 1, "model": 1}, {"data": 2, "model": 1}, {"data": 2, "model": 2})


def mixed_against_autocast(shdc, src, name, ref, args, d, cfg=TINY):
    """The mixed-precision test of a model (tests/*/test_mixed.py): ref is
    the PyTorch reference's command (ref_torch.py with the init and
    batches), args the program's; PyTorch runs it in f32 and under
    autocast, the program is built at -D DT=f32 on one device and at -D
    DT=bf16 on MIXED_MESHES, and check_mixed compares them. Prints its
    report; returns the mixed builds' losses, {mesh tag: {S: loss}}, and
    the 1-device f32 build's, {S: loss}."""
    ref_f32 = losses(sh(ref).stdout)
    ref_mixed = losses(sh(ref + ["--autocast"]).stdout)
    if len(ref_f32) != len(ref_mixed) or not ref_f32:
        raise Failure("the references printed %d and %d steps" % (len(ref_f32), len(ref_mixed)))

    def train(dt, mesh):
        tag = ",".join("%s=%d" % kv for kv in mesh.items())
        exe = build(shdc, src, mesh, os.path.join(d, "%s_%s_%d_%d" % (name.split(".")[0], dt, mesh["data"],
                                                                        mesh["model"])),
                    cfg=cfg, flags=("-D", "DT=" + dt))
        return tag, losses(run(exe, ranks(mesh), args, cwd=d))
    _, f32 = train("f32", MIXED_MESHES[0])
    runs = dict(train("bf16", m) for m in MIXED_MESHES)
    lines = check_mixed(name + " -D DT=bf16", runs, f32, ref_f32, ref_mixed)
    print("%s -D DT=bf16 at %s agrees with 1 device and tracks f32 as PyTorch's autocast does:\n  %s"
          % (name, ", ".join(runs), "\n  ".join(lines)))
    return runs, f32
