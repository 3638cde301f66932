#!/usr/bin/env python3
"""explain counts bf16 collectives at 2 bytes an element (language.md §10.1).

One program written twice, with DT = f32 and DT = bf16: an all-reduce (a
sum over the sharded dim), a reduce-scatter, an all-gather (a reshard to
replicated) and the gradient's all-reduce. Every collective line of the
bf16 explain must show exactly half the bytes of the f32 one's, the totals
too, and the peak of live arrays must be half as well (every array of
the program has the dtype).
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = """mesh {X: 4}

fn loss(w: DT[64, 32], x: DT[128@X, 64]) -> DT {
    let h = x @ w
    return sum(h * h)
}

fn gram(x: DT[128@X, 64]) -> DT[64@X, 64] {
    return einsum("ij,ik->jk", x, x)
}

fn moves(x: DT[128@X, 64]) -> (DT[64], DT[128, 64]) {
    let cs = sum(x, axis=0)
    let full = reshard(x * 2.0, DT[128, 64])
    return (cs, full)
}

fn main() {
    let x: DT[128@X, 64] = normal(seed=1)
    let w: DT[64, 32] = normal(seed=2)
    let (cs, full) = moves(x)
    let q = gram(x)
    let g = grad(loss)(w, x)
    save("cs.npy", cs)
    save("q.npy", q)
    save("full.npy", full)
    save("g.npy", g)
}
"""

LINE = re.compile(r"^\s+line (\d+)\s+(\S+)\s+over \((\w+)\)\s+(\d+) bytes/rank")


def explain(shdc, d, dt):
    src = os.path.join(d, dt + ".shd")
    with open(src, "w") as f:
        f.write(PROGRAM.replace("DT", dt))
    p = subprocess.run([shdc, "explain", src], capture_output=True, text=True, timeout=120)
    if p.returncode:
        sys.exit("shdc explain %s: exit %d\n%s" % (src, p.returncode, p.stderr))
    lines = [m.groups() for m in map(LINE.match, p.stdout.splitlines()) if m]
    totals = [int(t) for t in re.findall(r"(\d+) bytes sent per rank", p.stdout)]
    peaks = dict(re.findall(r"(?ms)^fn (\S+).*?peak live arrays per rank: (\d+) bytes", p.stdout))
    peaks = {k: int(v) for k, v in peaks.items()}
    return lines, totals, peaks, p.stdout


def main():
    shdc = testlib.shdc_option(__doc__)
    with tempfile.TemporaryDirectory() as d:
        f32, f32_tot, f32_peak, f32_out = explain(shdc, d, "f32")
        bf, bf_tot, bf_peak, bf_out = explain(shdc, d, "bf16")
    kinds = {k for _, k, _, _ in f32}
    for want in ("all_reduce.sum", "reduce_scatter.sum", "all_gather"):
        if want not in kinds:
            sys.exit("the f32 program has no %s:\n%s" % (want, f32_out))
    if [(l, k, a) for l, k, a, _ in f32] != [(l, k, a) for l, k, a, _ in bf]:
        sys.exit("the collectives differ:\n%s\n%s" % (f32_out, bf_out))
    for (line, kind, _, a), (_, _, _, b) in zip(f32, bf):
        if int(a) != 2 * int(b):
            sys.exit("line %s %s: f32 sends %s bytes, bf16 %s (expected half)" % (line, kind, a, b))
    if len(f32_tot) != len(bf_tot) or any(a != 2 * b for a, b in zip(f32_tot, bf_tot)):
        sys.exit("totals: f32 %s, bf16 %s (expected half)" % (f32_tot, bf_tot))
    if sorted(f32_peak) != sorted(bf_peak) or "moves" not in f32_peak:
        sys.exit("functions: f32 %s, bf16 %s" % (f32_peak, bf_peak))
    if f32_peak["moves"] != 2 * bf_peak["moves"]:
        sys.exit("moves's peak: f32 %d, bf16 %d (expected half)" % (f32_peak["moves"], bf_peak["moves"]))
    for fn in ("loss", "gram"):
        if bf_peak[fn] <= f32_peak[fn] // 2:
            sys.exit("%s's peak: f32 %d, bf16 %d (the gemm's f32 copies uncounted)" % (fn, f32_peak[fn], bf_peak[fn]))
    print("%d collectives: bf16 sends %d of f32's %d bytes; peaks %s of %s" %
          (len(bf), sum(bf_tot), sum(f32_tot), bf_peak, f32_peak))


if __name__ == "__main__":
    main()
