#!/usr/bin/env python3
"""1F1B's activation memory is bounded by the number of stages, not of
microbatches, and shdc explain's peak shows it (language.md 10.4).

Two programs run std/pipeline.shd's GPipe and 1F1B on one model:
tests/pipeline/library.shd (fn gpipe, fn one_f_one_b; pipe=4, rows of
D=64 activations from inputs and targets of width I=3) and
dsl-examples/pipeline.shd (fn step_gpipe, fn step_1f1b: the GPT over
pipe=2 beside data=2, token inputs and targets). With wide activations
(B=256, resp. 64 rows a microbatch):

- at 8 microbatches 1F1B's peak per rank is below GPipe's;
- from 8 to 16 microbatches 1F1B's peak grows by exactly the 8 more
  microbatches' inputs and targets (its stash stays min(2P - 1, MB)
  activations), while GPipe's grows by at least their activations and
  output cotangents (2 * 8 activations).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

# (program, mesh, -D flags, GPipe's fn, 1F1B's fn, bytes of one microbatch's
# inputs and targets on a rank, bytes of one activation on a rank)
B, D, I = 256, 64, 3
GB, T, C, DATA = 64, 16, 32, 2
CASES = [
    ("tests/pipeline/library.shd", "pipe=4", ["B=%d" % B, "D=%d" % D], "gpipe", "one_f_one_b",
     2 * B * I * 4, B * D * 4),
    ("dsl-examples/pipeline.shd", "pipe=2,data=2", ["B=%d" % GB], "step_gpipe", "step_1f1b",
     2 * (GB // DATA) * T * 4, (GB // DATA) * T * C * 4),
]


def peaks(shdc, src, mesh, defs, mb, names):
    cmd = [shdc, "explain", os.path.join(ROOT, src), "--mesh", mesh, "-D", "MB=%d" % mb]
    for d in defs:
        cmd += ["-D", d]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    out = {}
    for name in names:
        m = re.search(r"^fn %s \(manual over pipe\)\n(?:  .*\n)*?  peak live arrays per rank: (\d+) bytes" % name,
                      p.stdout, re.M)
        if not m:
            sys.exit("no peak for fn %s in:\n%s" % (name, p.stdout))
        out[name] = int(m.group(1))
    return out


def main():
    shdc = testlib.shdc_option()
    bad = []
    for src, mesh, defs, gp, fb, inputs, act in CASES:
        p8 = peaks(shdc, src, mesh, defs, 8, (gp, fb))
        p16 = peaks(shdc, src, mesh, defs, 16, (gp, fb))
        print("%s --mesh %s: peak per rank at MB=8: GPipe %d, 1F1B %d; at MB=16: GPipe %d, 1F1B %d"
              % (src, mesh, p8[gp], p8[fb], p16[gp], p16[fb]))
        if not p8[fb] < p8[gp]:
            bad.append("%s: at 8 microbatches 1F1B's peak %d is not below GPipe's %d" % (src, p8[fb], p8[gp]))
        if p16[fb] - p8[fb] != 8 * inputs:
            bad.append("%s: 1F1B's peak grew by %d bytes from 8 to 16 microbatches, not by the %d bytes of their "
                       "inputs and targets" % (src, p16[fb] - p8[fb], 8 * inputs))
        if p16[gp] - p8[gp] < 8 * 2 * act:
            bad.append("%s: GPipe's peak grew by only %d bytes from 8 to 16 microbatches (their activations and "
                       "cotangents: %d)" % (src, p16[gp] - p8[gp], 8 * 2 * act))
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main()
