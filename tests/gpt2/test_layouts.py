#!/usr/bin/env python3
"""Issue 9 item 6: every parallel layout of the GPT-2 model gives the
one-device build's losses, step by step within f32 tolerance, from the same
--init directory on the same --batches (AdamW with weight decay, 5 steps),
at 1/2/4/8 ranks:

  data parallel             gpt2.shd --mesh data=D,model=1
  Megatron TP + SP          gpt2.shd --mesh data=1,model=M
  2-D data x model          gpt2.shd --mesh data=D,model=M
  Megatron TP without SP    tests/gpt2/gpt2_tp.shd
  ZeRO-3 (FSDP), also 2-D   gpt2_fsdp.shd
  ZeRO-1/2, also 2-D        tests/gpt2/gpt2_zero.shd (the optimizer state
                            and parameters kept as shards, gathered once a
                            step, the gradients reduce-scattered)

The collective counts of each layout are asserted by the EXPLAIN-COUNT
lines of the files themselves."""
import argparse
import os
import sys
import tempfile

import gptlib
from gptlib import TINY, Failure

STEPS = 5
LAYOUTS = [
    ("data parallel", gptlib.GPT2, [(2, 1), (4, 1), (8, 1)]),
    ("Megatron TP+SP", gptlib.GPT2, [(1, 2), (1, 4), (1, 8)]),
    ("2-D data x model", gptlib.GPT2, [(2, 2), (4, 2), (2, 4)]),
    ("Megatron TP", gptlib.TP, [(1, 2), (1, 4), (1, 8), (2, 2)]),
    ("ZeRO-3", gptlib.FSDP, [(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (2, 4)]),
    ("ZeRO-1/2", gptlib.ZERO, [(2, 1), (4, 1), (8, 1), (2, 2)]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    ap.add_argument("--only", help="run the layouts whose name contains this")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        init = gptlib.make_init(os.path.join(d, "init"), TINY, seed=5)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, TINY["B"], TINY["T"], seed=6)
        args = ["--init=" + init, "--batches=" + batches, "--steps=%d" % STEPS, "--lr=0.01", "--wd=0.1"]
        one = gptlib.build(a.shdc, gptlib.GPT2, {"data": 1, "model": 1}, os.path.join(d, "one"))
        want = gptlib.losses(gptlib.run(one, 1, args, cwd=d))
        if len(want) != STEPS:
            raise Failure("the one-device build printed %s" % want)
        for name, src, meshes in LAYOUTS:
            if a.only and a.only not in name:
                continue
            for dm, mm in meshes:
                mesh = {"data": dm, "model": mm}
                exe = gptlib.build(a.shdc, src, mesh, os.path.join(d, "p_%d_%d" % (dm, mm)))
                got = gptlib.losses(gptlib.run(exe, dm * mm, args, cwd=d))
                gptlib.compare("%s (%s) at data=%d,model=%d" % (name, os.path.basename(src), dm, mm), got, want)
                print("%s, %s at data=%d,model=%d: %d steps agree with the one-device build" %
                      (name, os.path.basename(src), dm, mm, STEPS), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
