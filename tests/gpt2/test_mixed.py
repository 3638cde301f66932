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
5e-4 (gptlib.check_mixed).

tests/gpt2/gpt2_zero.shd (ZeRO-1/2: the master weights and AdamW's moments
as their shards over data, the bf16 gradients reduce-scattered in bf16)
trains at -D DT=bf16 on 1 device and at data=2 with the losses of
gpt2.shd's mixed run at data=2 and of its own 1-device build (1e-3
relative), nearer the first than gpt2.shd's f32 run (so computed in bf16).

gpt2.shd in f32 with --reduce-dtype=bf16 (its gradient buckets sent as
bf16, DDP's bf16_compress_hook) at data=2 tracks its 1-device f32 run
within 1e-3 relative, and is not its f32 data=2 run (the buckets were
rounded)."""
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
        args = ["--init=" + init, "--batches=" + batches] + ARGS
        runs, f32 = gptlib.mixed_against_autocast(a.shdc, gptlib.GPT2, "gpt2.shd", ref, args, d)
        check_zero(a.shdc, runs, f32, args, d)
        check_reduce_dtype(a.shdc, f32, args, d)


def check_zero(shdc, runs, f32, args, d):
    """gpt2_zero.shd at -D DT=bf16, 1 device and data=2, against gpt2.shd's
    mixed runs and f32 run (runs, f32: mixed_against_autocast's) and its own
    1-device build."""
    zero = {}
    for mesh in ({"data": 1, "model": 1}, {"data": 2, "model": 1}):
        exe = gptlib.build(shdc, gptlib.ZERO, mesh, os.path.join(d, "zero_bf16_%d" % mesh["data"]),
                           flags=("-D", "DT=bf16"))
        zero[mesh["data"]] = gptlib.losses(gptlib.run(exe, gptlib.ranks(mesh), args, cwd=d))
    gpt2 = runs["data=2,model=1"]
    gptlib.compare("gpt2_zero.shd -D DT=bf16 at data=2 against gpt2.shd's at data=2", zero[2], gpt2,
                   rtol=1e-3, atol=0)
    gptlib.compare("gpt2_zero.shd -D DT=bf16 at data=2 against its 1-device build", zero[2], zero[1],
                   rtol=1e-3, atol=0)
    to_mixed = max(abs(zero[2][s] - gpt2[s]) for s in gpt2)
    to_f32 = max(abs(zero[2][s] - f32[s]) for s in f32)
    if not to_mixed < 0.5 * to_f32:   # f32 is within 1e-3 too: the bf16 run must be nearer the mixed one
        raise Failure("gpt2_zero.shd -D DT=bf16 at data=2 is %.2e from gpt2.shd's mixed run, %.2e from its f32 "
                      "run: not computed in bf16" % (to_mixed, to_f32))
    print("gpt2_zero.shd -D DT=bf16 at data=2: %.2e from gpt2.shd's mixed run at data=2 (%.2e from its f32 run), "
          "%.2e from its own 1-device build at most" % (to_mixed, to_f32,
                                                        max(abs(zero[2][s] - zero[1][s]) for s in zero[1])))


def check_reduce_dtype(shdc, f32, args, d):
    """gpt2.shd at -D DT=f32, data=2, with --reduce-dtype=bf16 and without,
    against its 1-device f32 run (f32)."""
    mesh = {"data": 2, "model": 1}
    got = {}
    for tag, flags in (("bf16", ("-D", "DT=f32", "--reduce-dtype=bf16")), ("f32", ("-D", "DT=f32"))):
        exe = gptlib.build(shdc, gptlib.GPT2, mesh, os.path.join(d, "gpt2_reduce_%s" % tag), flags=flags)
        got[tag] = gptlib.losses(gptlib.run(exe, 2, args, cwd=d))
    gptlib.compare("gpt2.shd --reduce-dtype=bf16 at data=2 against its 1-device f32 build", got["bf16"], f32,
                   rtol=1e-3, atol=0)
    if got["bf16"] == got["f32"]:
        raise Failure("gpt2.shd --reduce-dtype=bf16 at data=2 gives the f32 buckets' losses exactly: not rounded")
    print("gpt2.shd --reduce-dtype=bf16 at data=2: %.2e from its 1-device f32 build at most (f32 buckets: %.2e)" %
          (max(abs(got["bf16"][s] - f32[s]) for s in f32), max(abs(got["f32"][s] - f32[s]) for s in f32)))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
