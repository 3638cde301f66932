#!/usr/bin/env python3
"""Issue 14 item 3: the struct versions of the GPT-2 programs
(dsl-examples/gpt2.shd, gpt2_fsdp.shd: language.md §9) against their
version-1 programs (tests/gpt2/gpt2_v1.shd, gpt2_fsdp_v1.shd), from the same
--init directory (llm.c's layout) on the same --batches, 4 AdamW steps with
weight decay: every loss printed is the same text, and every parameter and
AdamW moment after the last step is the same bytes (the version-1
checkpoint's NAME_STEP.npy against the struct checkpoint's leaf), on one
device and in the 2-D layout."""
import argparse
import os
import sys
import tempfile

import numpy as np

import gptlib
from gptlib import TINY, Failure

STEPS = 4
V1 = {gptlib.GPT2: os.path.join(gptlib.HERE, "gpt2_v1.shd"), gptlib.FSDP: os.path.join(gptlib.HERE, "gpt2_fsdp_v1.shd")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        init = gptlib.make_init(os.path.join(d, "init"), TINY, seed=11)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, TINY["B"], TINY["T"], seed=12)
        for src, meshes in ((gptlib.GPT2, [(1, 1), (2, 2)]), (gptlib.FSDP, [(2, 2)])):
            for dm, mm in meshes:
                mesh = {"data": dm, "model": mm}
                outs, cks = [], []
                for tag, prog in (("v1", V1[src]), ("v2", src)):
                    name = "%s_%s_%d_%d" % (os.path.basename(src)[:-4], tag, dm, mm)
                    exe = gptlib.build(a.shdc, prog, mesh, os.path.join(d, name))
                    ck = os.path.join(d, "ck_" + name)
                    os.makedirs(ck)
                    outs.append(gptlib.run(exe, dm * mm, ["--init=" + init, "--batches=" + batches, "--lr=0.01",
                                                          "--wd=0.1", "--steps=%d" % STEPS, "--save=" + ck,
                                                          "--save-every=%d" % STEPS], cwd=d).stdout)
                    cks.append(ck)
                what = "%s at data=%d,model=%d" % (os.path.basename(src), dm, mm)
                l1, l2 = gptlib.loss_text(outs[0]), gptlib.loss_text(outs[1])
                if len(l1) != STEPS or l1 != l2:
                    raise Failure("%s: the struct version's losses %s, version 1's %s" % (what, l2, l1))
                for part, prefix in (("p", ""), ("m", "m_"), ("v", "v_")):
                    new = gptlib.checkpoint(cks[1], STEPS, part)
                    for n in gptlib.ref_torch.NAMES:
                        old = np.load(os.path.join(cks[0], "%s%s_%06d.npy" % (prefix, n, STEPS)))
                        if old.tobytes() != new[n].tobytes():
                            raise Failure("%s: %s%s after %d steps differs from version 1's (max %g)" % (
                                what, prefix, n, STEPS, float(np.abs(old - new[n]).max())))
                print("%s: %d losses and every parameter and moment bitwise those of version 1" % (what, STEPS))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
