#!/usr/bin/env python3
"""Issue 14 item 3: dsl-examples/llama.shd against an independent PyTorch
LLaMA (tests/llama/ref_torch.py), from the same --init directory on the
same --batches, for 8 AdamW steps: 3 of linear warmup, then the cosine
decay, weight decay on the matrices, the gradient clipped to a global norm
of 2.5 (above it in the first steps, below it later: both branches run).
Every step's loss, gradient norm and learning rate agree within f32
tolerance on one rank and at data=2,model=2 (data x Megatron tensor
parallel, grouped-query heads split over model); so do the parameters
after training (the last checkpoint against the reference's --save). The
other two layouts split the run: data=2,model=1 (data parallel) trains the
first 4 steps of the schedule (--steps=4 --decay-steps=8) and saves a
checkpoint, which data=1,model=2 (tensor parallel) resumes; both halves
agree with the reference."""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpt2"))
import gptlib  # noqa: E402  (build, run under mpirun, read the metrics, compare)
from gptlib import Failure  # noqa: E402

LLAMA = os.path.join(gptlib.ROOT, "dsl-examples", "llama.shd")
REF = os.path.join(HERE, "ref_torch.py")
# The smallest model with every rule: 2 layers, 4 query heads on 2
# key/value heads (both split by model=2), F and V split by model too.
CFG = dict(V=256, T=8, L=2, C=32, NH=4, KV=2, F=64, B=4)
STEPS = 8
SCHED = ["--lr=0.01", "--lr-min=0.001", "--warmup=3", "--clip=2.5", "--wd=0.1"]
LEAVES = ["d.emb", "d.head", "d.h.wq", "d.h.wk", "d.h.wv", "d.h.wo", "d.h.w1", "d.h.w3", "d.h.w2",
          "n.h.attn", "n.h.mlp", "n.norm"]


def ref_steps(text):
    """{S: (loss, norm, lr)} of the reference's `step S loss L norm G lr R` lines."""
    return {int(s): tuple(map(float, r)) for s, *r in
            re.findall(r"^step (\d+) loss (\S+) norm (\S+) lr (\S+)$", text, re.M)}


def check_run(name, p, want, steps):
    got = {m["step"] - 1: m for m in p.metrics if "loss" in m}
    for i, what in enumerate(("loss", "grad_norm", "lr")):
        gptlib.compare("%s: %s" % (name, what), {s: got[s][what] for s in got},
                       {s: want[s][i] for s in steps})


def check_params(name, ck_step_dir, ref_dir):
    for leaf in LEAVES:
        got = np.load(os.path.join(ck_step_dir, "p.%s.npy" % leaf))
        ref = np.load(os.path.join(ref_dir, leaf + ".npy"))
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-4, atol=2e-6):
            raise Failure("%s: %s %s, max difference %g from PyTorch's" %
                          (name, leaf, got.shape, float(np.abs(got - ref).max()) if got.shape == ref.shape else -1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("test_ref_torch: PyTorch is missing (Debian's python3-torch; tools/install-deps installs it)")
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init")
        sizes = ["--%s=%d" % (k, CFG[k]) for k in ("V", "L", "C", "NH", "KV", "F")]
        gptlib.sh([sys.executable, REF, "--make-init=" + init, "--seed=3"] + sizes)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, CFG["B"], CFG["T"], seed=4)
        ref_dir = os.path.join(d, "ref")
        p = gptlib.sh([sys.executable, REF, "--init=" + init, "--batches=" + batches, "--steps=%d" % STEPS,
                       "--save=" + ref_dir] + sizes + SCHED)
        want = ref_steps(p.stdout)
        norms = [want[s][1] for s in range(STEPS)] if len(want) == STEPS else []
        if not norms or not want[STEPS - 1][0] < want[0][0] - 1.0 or not min(norms) < 2.5 < max(norms):
            raise Failure("the reference's loss does not fall, or clipping is always or never active:\n" + p.stdout)
        base = ["--init=" + init, "--batches=" + batches] + SCHED
        exes = {}
        for dm, mm in ((1, 1), (2, 2)):
            tag = "data=%d,model=%d" % (dm, mm)
            exes[dm, mm] = gptlib.build(a.shdc, LLAMA, {"data": dm, "model": mm},
                                        os.path.join(d, "llama_%d_%d" % (dm, mm)), cfg=CFG)
            ck = os.path.join(d, "ck_%d_%d" % (dm, mm))
            out = gptlib.run(exes[dm, mm], dm * mm, base + ["--steps=%d" % STEPS, "--save=" + ck,
                                                             "--save-every=%d" % STEPS], cwd=d)
            check_run("llama.shd at %s against PyTorch" % tag, out, want, range(STEPS))
            check_params("llama.shd at %s after %d steps" % (tag, STEPS), gptlib.state_dir(ck, STEPS), ref_dir)
            print("llama.shd at %s: %d steps (losses, gradient norms, learning rates, parameters) agree with "
                  "PyTorch (loss %.4f -> %.4f)" % (tag, STEPS, want[0][0], want[STEPS - 1][0]))
        # The first half of the schedule data parallel, the second tensor parallel.
        for dm, mm in ((2, 1), (1, 2)):
            exes[dm, mm] = gptlib.build(a.shdc, LLAMA, {"data": dm, "model": mm},
                                        os.path.join(d, "llama_%d_%d" % (dm, mm)), cfg=CFG)
        half = os.path.join(d, "half")
        out = gptlib.run(exes[2, 1], 2, base + ["--steps=4", "--decay-steps=%d" % STEPS, "--save=" + half,
                                                "--save-every=4"], cwd=d)
        check_run("data=2,model=1, the first 4 steps of 8", out, want, range(4))
        out = gptlib.run(exes[1, 2], 2, base + ["--steps=%d" % STEPS, "--resume=" + half, "--save=" + half,
                                                "--save-every=%d" % STEPS], cwd=d)
        check_run("written at data=2,model=1 at step 4, resumed at data=1,model=2", out, want, range(4, STEPS))
        check_params("resumed at data=1,model=2, after %d steps" % STEPS, gptlib.state_dir(half, STEPS), ref_dir)
        print("data=2,model=1 trains the first 4 steps of the schedule and its checkpoint resumes at "
              "data=1,model=2, as PyTorch trains and continues")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
