#!/usr/bin/env python3
"""Issue 14 item 3: the struct versions of the GPT-2 programs
(dsl-examples/gpt2.shd, gpt2_fsdp.shd: language.md §9) against their
version-1 programs (tests/gpt2/gpt2_v1.shd, gpt2_fsdp_v1.shd), from the same
--init directory (llm.c's layout) on the same --batches, 4 AdamW steps with
weight decay: every loss (its --metrics line, exactly as computed) and
every progress line printed are the same, and every parameter and AdamW
moment after the last step is the same bytes (the version-1 checkpoint's
step_STEP/NAME.npy against the struct checkpoint's leaf), on one
device and in the 2-D layout. And `shdc explain` of both: the same
collectives (kind, axes, bytes and shapes; line numbers and order aside:
in gpt2_fsdp.shd the layer functions gather their own weights) in main,
the loss and its gradient, and a peak of live arrays in main and in the
gradient no higher than version 1's: the same at GPT-2 124M's sizes
(explain only); at the tiny sizes the runs use, the gradient's is a
little lower on some meshes."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import gptlib
from gptlib import TINY, Failure

STEPS = 4
V1 = {gptlib.GPT2: os.path.join(gptlib.HERE, "gpt2_v1.shd"), gptlib.FSDP: os.path.join(gptlib.HERE, "gpt2_fsdp_v1.shd")}


GPT2_124M = dict(TINY, C=768, NH=12, L=12, T=1024, B=16)


def explain(shdc, src, mesh, sizes=TINY):
    """{function: ([(kind, axes, bytes, shapes)...], peak bytes)} from `shdc explain`."""
    cmd = [shdc, "explain", src, "--mesh", ",".join("%s=%d" % kv for kv in mesh.items())]
    for kv in sizes.items():
        cmd += ["-D", "%s=%d" % kv]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=gptlib.ENV).stdout
    fns, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"^fn (\S+)", line)
        if m:
            cur = fns.setdefault(m.group(1), ([], []))
            continue
        m = re.match(r"^\s+line \d+\s+(\S+)\s+over \((\S+)\)\s+(\d+) bytes/rank\s+(.*?)(?:\s+\(in the .*)?$", line)
        if m and cur is not None:
            cur[0].append(m.groups())
        m = re.match(r"^\s+peak live arrays per rank: (\d+)", line)
        if m and cur is not None:
            cur[1].append(int(m.group(1)))
    return fns


def same_explain(shdc, src, mesh, sizes=TINY):
    what = "%s at %s%s" % (os.path.basename(src), mesh, " (GPT-2 124M)" if sizes is GPT2_124M else "")
    e1, e2 = explain(shdc, V1[src], mesh, sizes), explain(shdc, src, mesh, sizes)
    grad = [f for f in e1 if f.startswith("loss_value_and_grad")]
    if len(grad) != 1 or grad[0] not in e2:
        raise Failure("%s: no common gradient function in explain (%s, %s)" % (what, sorted(e1), sorted(e2)))
    for f in ("main", "loss", grad[0]):
        if sorted(e1[f][0]) != sorted(e2[f][0]):
            raise Failure("%s: explain's collectives of %s differ:\nversion 1: %s\nversion 2: %s" % (
                what, f, e1[f][0], e2[f][0]))
    for f in ("main", grad[0]):
        p1, p2 = e1[f][1][0], e2[f][1][0]
        if p2 > p1 or (sizes is GPT2_124M and p2 != p1):
            raise Failure("%s: explain's peak of %s is %d bytes, version 1's %d" % (what, f, p2, p1))
    print("%s: explain's collectives the same, peaks of main and the gradient %s" % (
        what, ", ".join("%d (version 1: %d)" % (e2[f][1][0], e1[f][1][0]) for f in ("main", grad[0]))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        init = gptlib.make_init(os.path.join(d, "init"), TINY, seed=11)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), STEPS, TINY["B"], TINY["T"], seed=12)
        for src in (gptlib.GPT2, gptlib.FSDP):
            for mesh in ({"data": 1, "model": 1}, {"data": 2, "model": 2}, {"data": 4, "model": 1}):
                same_explain(a.shdc, src, mesh)
                same_explain(a.shdc, src, mesh, GPT2_124M)
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
                                                          "--save-every=%d" % STEPS], cwd=d))
                    cks.append(ck)
                what = "%s at data=%d,model=%d" % (os.path.basename(src), dm, mm)
                l1, l2 = gptlib.loss_text(outs[0]), gptlib.loss_text(outs[1])
                if len(l1) != STEPS or l1 != l2:
                    raise Failure("%s: the struct version's losses %s, version 1's %s" % (what, l2, l1))
                p1, p2 = ([ln for ln in o.stdout.splitlines() if ln.startswith("step ")] for o in outs)
                if len(p1) != STEPS or p1 != p2:
                    raise Failure("%s: the struct version's progress lines %s, version 1's %s" % (what, p2, p1))
                for part, prefix in (("p", ""), ("m", "m_"), ("v", "v_")):
                    new = gptlib.checkpoint(cks[1], STEPS, part)
                    for n in gptlib.ref_torch.NAMES:
                        old = np.load(os.path.join(cks[0], "step_%06d" % STEPS, prefix + n + ".npy"))
                        if old.tobytes() != new[n].tobytes():
                            raise Failure("%s: %s%s after %d steps differs from version 1's (max %g)" % (
                                what, prefix, n, STEPS, float(np.abs(old - new[n]).max())))
                print("%s: %d losses and every parameter and moment bitwise those of version 1" % (what, STEPS))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
