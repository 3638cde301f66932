#!/usr/bin/env python3
"""Issue 26 item 3: dsl-examples/llama.shd in mixed precision (-D DT=bf16:
f32 master weights and AdamW state, the matrix products in bf16) tracks
its f32 run as PyTorch's autocast bf16 run tracks PyTorch's f32 run.

The same model, init and batches as test_ref_torch.py, for 5 AdamW steps:
tests/llama/ref_torch.py trains it in f32 and under
torch.autocast("cpu", dtype=torch.bfloat16); llama.shd trains it at -D
DT=f32 on one device and at -D DT=bf16 on 1 device, at data=2 and at
data=2,model=2. Every mesh's mixed losses agree with the 1-device mixed
build's (bf16's sums over devices round per hop: 1e-3 relative), and
each step's |loss_bf16 - loss_f32| is within 3x PyTorch's |autocast -
f32| plus 5e-4 (gptlib.check_mixed)."""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpt2"))
import gptlib  # noqa: E402
from gptlib import Failure  # noqa: E402

LLAMA = os.path.join(gptlib.ROOT, "dsl-examples", "llama.shd")
REF = os.path.join(HERE, "ref_torch.py")
CFG = dict(V=256, T=8, L=2, C=32, NH=4, KV=2, F=64, B=4)
STEPS = 5
SCHED = ["--lr=0.01", "--lr-min=0.001", "--warmup=3", "--clip=2.5", "--wd=0.1"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    gptlib.require_torch("test_mixed")
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init")
        sizes = ["--%s=%d" % (k, CFG[k]) for k in ("V", "L", "C", "NH", "KV", "F")]
        gptlib.sh([sys.executable, REF, "--make-init=" + init, "--seed=3"] + sizes)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, CFG["B"], CFG["T"], seed=4)
        ref = [sys.executable, REF, "--init=" + init, "--batches=" + batches, "--steps=%d" % STEPS] + sizes + SCHED
        gptlib.mixed_against_autocast(a.shdc, LLAMA, "llama.shd", ref,
                                      ["--init=" + init, "--batches=" + batches, "--steps=%d" % STEPS] + SCHED, d,
                                      cfg=CFG)


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
