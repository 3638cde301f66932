#!/usr/bin/env python3
"""Issue 26 item 3: dsl-examples/gpt2.shd in mixed precision (-D DT=bf16:
f32 master weights and AdamW state, the matrix products in bf16) tracks
its f32 run as PyTorch's autocast bf16 run tracks PyTorch's f32 run.

The same model, init and batches as test_ref_torch.py, for 5 AdamW steps:
tests/gpt2/ref_torch.py trains it in f32 and under
torch.autocast("cpu", dtype=torch.bfloat16); gpt2.shd trains it at -D
DT=f32 on one device and at -D DT=bf16 on 1 device, at data=2 and at
data=2,model=2 (tensor and sequence parallel: bf16 all-gathers and
reduce-scatters). Every mesh's mixed losses agree with the 1-device mixed
build's (bf16's sums over devices round per hop: 1e-3 relative), and each
step's |loss_bf16 - loss_f32| is within 3x PyTorch's |autocast - f32| plus
5e-4 (gptlib.check_mixed)."""
import argparse
import os
import sys
import tempfile

import gptlib
from gptlib import TINY, Failure

STEPS = 5
ARGS = ["--steps=%d" % STEPS, "--lr=0.01", "--wd=0.1"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    gptlib.require_torch("test_mixed")
    with tempfile.TemporaryDirectory() as d:
        init = gptlib.make_init(os.path.join(d, "init"), TINY, seed=3)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, TINY["B"], TINY["T"], seed=4)
        ref = [sys.executable, os.path.join(gptlib.HERE, "ref_torch.py"), "--init=" + init,
               "--batches=" + batches, "--nh=%d" % TINY["NH"]] + ARGS
        gptlib.mixed_against_autocast(a.shdc, gptlib.GPT2, "gpt2.shd", ref,
                                      ["--init=" + init, "--batches=" + batches] + ARGS, d)


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
