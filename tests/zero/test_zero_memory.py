#!/usr/bin/env python3
"""A sharded optimizer's memory and bytes (issue 30, item 4), from explain
on tests/zero/zero.shd, which trains one model both ways: train_zero keeps
the parameters and AdamW's moments as their shards over data, train_dp
keeps everything on every rank.

- at data=G, train_zero's peak per rank is below train_dp's by at least
  what the moments' shards save, 2 x 4P (1 - 1/G) bytes for P parameters
  (the update's temporaries shrink too);
- with one layer (explain counts a loop body once), the ZeRO gradient
  function sends exactly what data parallelism's does: an all-gather and a
  reduce-scatter of the parameters, (G-1)/G of their bytes each, against
  one all-reduce, 2(G-1)/G;
- at data=1 the two peaks are equal: nothing is sharded.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = os.path.join(ROOT, "tests", "zero", "zero.shd")


def explain(shdc, mesh, *defs):
    p = subprocess.run([shdc, "explain", "--mesh", mesh, *defs, PROGRAM], capture_output=True, text=True,
                       timeout=120)
    if p.returncode:
        sys.exit("explain failed:\n" + p.stderr)
    funcs = {}
    for block in re.split(r"\n(?=fn )", p.stdout):
        m = re.match(r"fn (\S+)", block)
        if not m:
            continue
        peak = re.search(r"peak live arrays per rank: (\d+) bytes", block)
        sent = re.search(r"(\d+) collectives?, (\d+) bytes sent per rank", block)
        funcs[m.group(1)] = (int(peak.group(1)) if peak else None, int(sent.group(2)) if sent else 0)
    return funcs


def main():
    shdc = testlib.shdc_option()
    failures = []
    D, F, L = 128, 512, 2
    params = L * 2 * D * F + D * D
    for g in (2, 4):
        f = explain(shdc, "data=%d" % g, "-D", "D=%d" % D, "-D", "F=%d" % F, "-D", "L=%d" % L, "-D", "B=64")
        zero, dp = f["train_zero"][0], f["train_dp"][0]
        saving = 2 * 4 * params * (g - 1) // g
        if zero > dp - saving:
            failures.append("data=%d: train_zero's peak %d bytes is not below train_dp's %d by the moments' %d"
                            % (g, zero, dp, saving))
        print("data=%d: peak per rank %d bytes (ZeRO) against %d (data parallel): %.2fx"
              % (g, zero, dp, dp / zero))
        one = explain(shdc, "data=%d" % g, "-D", "D=%d" % D, "-D", "F=%d" % F, "-D", "L=1", "-D", "B=64")
        zb = [v[1] for k, v in one.items() if k.startswith("value_and_grad(zero_loss")]
        db = [v[1] for k, v in one.items() if k.startswith("value_and_grad(loss")]
        p1 = 2 * D * F + D * D
        want = 2 * 4 * p1 * (g - 1) // g
        if zb != [want] or db != [want]:
            failures.append("data=%d, L=1: bytes sent per rank by the gradient functions: ZeRO %s, data parallel "
                            "%s, both should be %d" % (g, zb, db, want))
    f = explain(shdc, "data=1", "-D", "D=%d" % D, "-D", "F=%d" % F, "-D", "L=%d" % L, "-D", "B=64")
    if f["train_zero"][0] != f["train_dp"][0]:
        failures.append("data=1: the peaks differ: %s" % (f,))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("ZeRO: the moments' shards saved at data=2 and 4, the bytes of data parallelism")


if __name__ == "__main__":
    main()
