#!/usr/bin/env python3
"""remat(f)(args) lowers the memory a gradient needs (language.md §9.8).

The same training step of L = 6 layers (a data-parallel batch of wide
activations) is built twice: with `y = layer(y, h[l])` and with
`y = remat(layer)(y, h[l])`. The remat build gives the same loss and
weights (printed), its `shdc explain` peak of live arrays is lower, and so
is the peak measured at run time (SHD_TRACE=1, the largest over the ranks):
the plain gradient keeps every layer's wide intermediates for the backward
pass, the remat one only the layers' outputs, and computes each layer again
when its backward needs it.

The same again with the loss a manual body over data (language.md §10.3:
remat per call in manual bodies), the layer a generic function of the
per-device activations: the same outputs, and lower peaks with remat.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
from run import mpirun_cmd, run  # noqa: E402

PROGRAM = """mesh {data: 2}
const L = 6
const B = 64
const D = 32
const F = 512
struct Layer { w1: f32[D, F], w2: f32[F, D] }
fn layer(x: f32[B@data, D], p: Layer) -> f32[B@data, D] {
    let h = gelu(x @ p.w1)
    return x + tanh(gelu(h * 1.5) @ p.w2)
}
fn loss(h: Layer[L], x: f32[B@data, D]) -> f32 {
    var y = x
    for l in 0..L {
        y = CALL(y, h[l])
    }
    return sum(y * y)
}
fn main() {
    var h = normal(Layer[L], seed=1) * 0.05
    let x: f32[B@data, D] = normal(seed=2)
    for step in 0..2 {
        let (l, g) = value_and_grad(loss)(h, x)
        h = h - 0.01 * g
        print("step", step, "loss", l)
    }
    print("w", sum(h))
}
"""


def manual(program):
    """The program with its loss a manual body over data."""
    out = program.replace("fn layer(x: f32[B@data, D], p: Layer) -> f32[B@data, D] {",
                          "fn layer<X>(x: X, p: Layer) -> X {")
    out = out.replace("fn loss(h: Layer[L], x: f32[B@data, D]) -> f32 {",
                      "manual(data) fn loss(h: Layer[L], x: f32[B@data, D]) -> f32 {")
    out = out.replace("    return sum(y * y)\n", "    return psum(sum(y * y), data)\n")
    assert out.count("manual(data)") == 1 and "psum" in out and "layer<X>" in out
    return out


def peak_of_main(text):
    m = re.search(r"^fn main\n(?:  .*\n)*?  peak live arrays per rank: (\d+) bytes", text, re.M)
    return int(m.group(1)) if m else None


def main():
    shdc = testlib.shdc_option()
    failures, report = [], []
    with tempfile.TemporaryDirectory() as d:
        for kind, program in (("global", PROGRAM), ("manual", manual(PROGRAM))):
            outs, explained, measured = {}, {}, {}
            for name, call in (("plain", "layer"), ("remat", "remat(layer)")):
                src = os.path.join(d, "%s_%s.shd" % (kind, name))
                exe = testlib.build(shdc, src, os.path.join(d, kind + name), text=program.replace("CALL", call))
                p = subprocess.run([shdc, "explain", src], capture_output=True, text=True)
                explained[name] = peak_of_main(p.stdout)
                rc, out, err = run(mpirun_cmd(2) + [exe], cwd=d, env={"SHD_TRACE": "1"})
                m = re.search(r"max over ranks: peak_bytes=(\d+)", err)
                if rc or not m:
                    failures.append("%s %s: exit %d\n%s%s" % (kind, name, rc, out, err))
                    continue
                measured[name] = int(m.group(1))
                outs[name] = out
            if len(outs) < 2:
                continue
            if outs["plain"] != outs["remat"]:
                failures.append("%s: the remat build prints\n%s\nthe plain one\n%s" % (kind, outs["remat"],
                                                                                      outs["plain"]))
            if not explained["remat"] or not explained["remat"] < explained["plain"]:
                failures.append("%s: explain's peak: remat %s, plain %s bytes" % (kind, explained["remat"],
                                                                                   explained["plain"]))
            if not measured["remat"] < measured["plain"]:
                failures.append("%s: measured peak: remat %d, plain %d bytes" % (kind, measured["remat"],
                                                                                  measured["plain"]))
            report.append("%s: peak per rank %d -> %d bytes (explain %s -> %s)" % (
                kind, measured["plain"], measured["remat"], explained["plain"], explained["remat"]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("remat: the same losses and weights; " + "; ".join(report))


if __name__ == "__main__":
    main()
