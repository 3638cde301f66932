#!/usr/bin/env python3
"""bench/bf16.py: a matmul + elementwise training step in bf16 beside the
same step in f32 (language.md §10.1), data parallel over X, as shdc
compiles it. Prints a table, per rank count and precision:

- ms per step (median over the steps after the first, one OpenBLAS thread
  a rank), and the share of it the casts take in the mixed step;
- bytes one rank sends per step (`shdc explain`: the gradient's all-reduce
  moves 2 bytes an element in bf16), and the peak of live arrays per rank
  (explain's prediction: a bf16 gemm holds f32 copies of B and of a panel
  of A and C, runtime/gemm.h);
- the conversion cost alone: ms to cast the weights and the batch to bf16
  and the gradient back (the casts the mixed step adds), timed in a loop.

The f32 step: loss(w, x) = sum(tanh(x @ w) * (x @ w) + 0.5 * (x @ w)) with
f32 everything. The mixed step (`bf16`): f32 master weights w cast to bf16
in the forward pass, a bf16 batch, the same computation in bf16, an f32
gradient (the cast's transpose). This CPU has no bf16 arithmetic units and
Debian's OpenBLAS 0.3.21 has no sbgemm, so a bf16 product widens its
blocks and calls sgemm: bf16 saves memory and bytes sent, and costs the
conversions.

  bench/bf16.py [--shdc SHDC] [--ranks 1 2] [--steps 8] [--B 1024] [--C 512]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1")

PROGRAM = """mesh {X: RANKS}
const B = BATCH
const C = WIDTH

fn loss(w: f32[C, C], x: XT[B@X, C]) -> f32 {
    let h = x @ WCAST
    return sum(OUT)
}

fn main() {
    let steps = arg("steps", 8)
    var w: f32[C, C] = normal(seed=1)
    w = w * 0.02
    let x: XT[B@X, C] = normal(seed=2)
    for i in 0..steps {
        let t0 = clock()
        let g = grad(loss)(w, x)
        w = w - g * 0.001
        print("step", i, (clock() - t0) * 1000.0)
    }
    let xf: f32[B@X, C] = normal(seed=3)
    for i in 0..steps {
        let t0 = clock()
        let wb = cast(w, bf16)
        let xb = cast(xf, bf16)
        let gb = cast(wb, f32)
        print("casts", i, (clock() - t0) * 1000.0, sum(gb) + sum(cast(xb, f32)))
    }
}
"""


def program(dt, ranks, b, c):
    bf = dt == "bf16"
    y = "tanh(h) * h + h * 0.5"
    subs = {"RANKS": str(ranks), "BATCH": str(b), "WIDTH": str(c), "XT": dt,
            "WCAST": "cast(w, bf16)" if bf else "w", "OUT": "cast(%s, f32)" % y if bf else y}
    return re.sub("|".join(subs), lambda m: subs[m.group(0)], PROGRAM)


def sh(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def median_after_first(out, tag):
    ts = [float(m.group(1)) for m in re.finditer(r"^%s \d+ ([\d.e+-]+)" % tag, out, re.M)]
    return statistics.median(ts[1:] if len(ts) > 1 else ts)


def measure(shdc, d, dt, ranks, args):
    src = os.path.join(d, "%s_%d.shd" % (dt, ranks))
    with open(src, "w") as f:
        f.write(program(dt, ranks, args.B, args.C))
    exe = src[:-4]
    sh([shdc, "build", src, "-o", exe])
    ex = sh([shdc, "explain", src])
    grad_bytes = sum(int(b) for b in re.findall(r"(\d+) bytes sent per rank", ex.split("fn grad(loss)")[1]))
    peak = max(int(p) for p in re.findall(r"peak live arrays per rank: (\d+) bytes", ex))
    out = sh(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), exe, "--steps=%d" % args.steps])
    return median_after_first(out, "step"), grad_bytes, peak, median_after_first(out, "casts")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--B", type=int, default=1024)
    ap.add_argument("--C", type=int, default=512)
    args = ap.parse_args()
    print("step: B=%d C=%d, loss = sum(tanh(x @ w) * (x @ w) + 0.5 * (x @ w)), grad wrt w (f32 master weights)"
          % (args.B, args.C))
    print("%-6s %-5s %10s %14s %12s %14s" % ("ranks", "dtype", "ms/step", "bytes sent/rk", "peak MiB/rk",
                                             "casts ms/step"))
    with tempfile.TemporaryDirectory() as d:
        for n in args.ranks:
            rows = {dt: measure(os.path.abspath(args.shdc), d, dt, n, args) for dt in ("f32", "bf16")}
            for dt in ("f32", "bf16"):
                ms, sent, peak, casts = rows[dt]
                print("%-6d %-5s %10.2f %14d %12.2f %14s" % (n, dt, ms, sent, peak / 2**20,
                                                            "%.2f" % casts if dt == "bf16" else "-"))
            f, b = rows["f32"], rows["bf16"]
            print("%-6d %-5s %10s %14s %12s" % (n, "ratio", "x%.2f" % (b[0] / f[0]), "x%.2f" % (b[1] / f[1]) if f[1] else "-",
                                              "x%.2f" % (b[2] / f[2])))


if __name__ == "__main__":
    main()
