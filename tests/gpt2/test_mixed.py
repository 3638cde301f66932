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
        ref_f32 = gptlib.losses(gptlib.sh(ref).stdout)
        ref_mixed = gptlib.losses(gptlib.sh(ref + ["--autocast"]).stdout)
        if len(ref_f32) != STEPS or len(ref_mixed) != STEPS:
            raise Failure("the references printed %d and %d steps of %d" % (len(ref_f32), len(ref_mixed), STEPS))

        def train(dt, mesh):
            tag = ",".join("%s=%d" % kv for kv in mesh.items())
            exe = gptlib.build(a.shdc, gptlib.GPT2, mesh, os.path.join(d, "gpt_%s_%d_%d" % (dt, mesh["data"], mesh["model"])),
                               flags=("-D", "DT=" + dt))
            out = gptlib.run(exe, gptlib.ranks(mesh), ["--init=" + init, "--batches=" + batches] + ARGS, cwd=d)
            return tag, gptlib.losses(out)
        _, f32 = train("f32", {"data": 1, "model": 1})
        runs = dict(train("bf16", m) for m in ({"data": 1, "model": 1}, {"data": 2, "model": 1},
                                                 {"data": 2, "model": 2}))
        lines = gptlib.check_mixed("gpt2.shd -D DT=bf16", runs, f32, ref_f32, ref_mixed)
    print("gpt2.shd -D DT=bf16 at %s agrees with 1 device and tracks f32 as PyTorch's autocast does:\n  %s"
          % (", ".join(runs), "\n  ".join(lines)))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
