#!/usr/bin/env python3
"""dsl-examples/moe.shd against an independent PyTorch MoE
(tests/moe/ref_torch.py: top-2 routing with indices and torch.topk, the
capacity drop as a per-expert priority list, index_add combine), from the
same --init directory on the same --batches, for 12 AdamW steps with weight
decay and the balancing loss: every step's loss agrees within f32
tolerance, and so does every step's count of (token, choice) pairs dropped
for capacity (the program prints its count; some are dropped at a
capacity factor of 1), on 1 rank, with the
experts over 2 devices (expert=2) and over data x expert (2x2); the loss
falls, so training is compared, not just the first step. The parameters
after training agree too (the program's --save against the reference's)."""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpt2"))
import testlib  # noqa: E402
import gptlib  # noqa: E402  (mpirun with --metrics, the loss comparison)
from gptlib import Failure  # noqa: E402

MOE = os.path.join(ROOT, "dsl-examples", "moe.shd")
CFG = dict(V=16, C=8, F=8, E=4, L=2, T=8, B=4, CF=100)   # K = 4 slots per expert and group of 8 tokens
STEPS = 12
ARGS = ["--steps=%d" % STEPS, "--lr=0.01", "--wd=0.1", "--aux=0.05"]
PAIRS = 2 * CFG["B"] * CFG["T"] * CFG["L"]


def dropped(text):
    """{S: dropped pairs} of the program's stdout (`step S+1/N | ... | dropped D of P`)."""
    got = re.findall(r"^step (\d+)/\d+ \|.*\| dropped (\d+) of (\d+)$", text, re.M)
    if any(int(p) != PAIRS for _, _, p in got):
        raise Failure("moe.shd counts %s pairs a step, not 2*B*T*L = %d" % (got, PAIRS))
    return {int(s) - 1: int(d) for s, d, _ in got}


def main():
    shdc = testlib.shdc_option(__doc__)
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("test_ref_torch: PyTorch is missing (Debian's python3-torch; tools/install-deps installs it)")
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init")
        ref = [sys.executable, os.path.join(HERE, "ref_torch.py")]
        gptlib.sh(ref + ["--make-init=" + init, "--seed=7"] + ["--%s=%d" % kv for kv in CFG.items()
                                                               if kv[0] in ("V", "C", "F", "E", "L")])
        batches = os.path.join(d, "b.npy")
        rng = np.random.default_rng(8)
        np.save(batches, rng.integers(0, CFG["V"], size=(STEPS, CFG["B"], CFG["T"])).astype(np.int32))
        ref_dir = os.path.join(d, "ref")
        p = gptlib.sh(ref + ["--init=" + init, "--batches=" + batches, "--cf=%d" % CFG["CF"], "--save=" + ref_dir]
                      + ARGS, timeout=300)
        want = gptlib.losses(p.stdout)
        want_drop = {int(s): int(n) for s, n in re.findall(r"^step (\d+) .* dropped (\d+)$", p.stdout, re.M)}
        if len(want) != STEPS or not want[STEPS - 1] < want[0] - 0.5:
            raise Failure("the reference's loss does not fall: %s" % want)
        if not any(want_drop.values()):
            raise Failure("no token was dropped: the capacity rule is not exercised (%s)" % want_drop)
        for mesh in ({"data": 1, "expert": 1}, {"data": 1, "expert": 2}, {"data": 2, "expert": 2}):
            tag = "data=%d,expert=%d" % (mesh["data"], mesh["expert"])
            exe = gptlib.build(shdc, MOE, mesh, os.path.join(d, "moe_%d_%d" % tuple(mesh.values())), cfg=CFG)
            out_dir = os.path.join(d, "out_%d_%d" % tuple(mesh.values()))
            out = gptlib.run(exe, gptlib.ranks(mesh), ["--init=" + init, "--batches=" + batches, "--save=" + out_dir]
                             + ARGS, cwd=d)
            gptlib.compare("moe.shd at %s against PyTorch" % tag, gptlib.losses(out), want)
            if dropped(out.stdout) != want_drop:
                raise Failure("moe.shd at %s: dropped pairs per step %s, PyTorch's %s" %
                              (tag, dropped(out.stdout), want_drop))
            for name in ("wte", "h.norm", "h.router", "h.ex.w1", "h.ex.w2", "normf", "head"):
                got = np.load(os.path.join(out_dir, name + ".npy"))
                r = np.load(os.path.join(ref_dir, name + ".npy"))
                if got.shape != r.shape or not np.allclose(got, r, rtol=1e-3, atol=1e-5):
                    raise Failure("%s at %s after %d steps: %s, max difference %g" %
                                  (name, tag, STEPS, got.shape, float(np.abs(got - r).max())))
            print("moe.shd at %s: %d steps agree with PyTorch (loss %.4f -> %.4f, %d of %d pairs dropped)" %
                  (tag, STEPS, want[0], want[STEPS - 1], sum(want_drop.values()), PAIRS * STEPS))


if __name__ == "__main__":
    try:
        main()
    except (Failure, subprocess.TimeoutExpired) as e:
        sys.exit(str(e))
