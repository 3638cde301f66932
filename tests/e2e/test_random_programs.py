#!/usr/bin/env python3
"""Differential test of the partitioner: random global-view programs
(elementwise ops, @ with annotated results, sums, transposes, reshapes,
reshards to random types, unreduced values) built for the meshes {2,2} and
{2,1} must save exactly what their one-rank build saves. Programs come from
fixed seeds; statements the checker rejects (random types often clash) are
dropped before running, so each program is well typed and still varied.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import run as runner  # noqa: E402  (tests/run.py: the .shd test machinery)

SEEDS = range(8)
SPECS = ["", "@X", "@Y", "@(X,Y)", "@(Y,X)"]


def rtype(rnd, shape):
    used, dims = set(), []
    for n in shape:
        s = rnd.choice(SPECS)
        axes = set(re.findall(r"[XY]", s))
        if axes & used:
            s, axes = "", set()
        used |= axes
        dims.append("%d%s" % (n, s))
    t = "f32[%s]" % ", ".join(dims)
    u = [a for a in "XY" if a not in used and rnd.random() < 0.2]
    return t + ("<U:%s>" % ",".join(u) if u else "")


def program(seed):
    rnd = random.Random(seed)
    lines, vals = ["mesh {X: 2, Y: 2}", "", "fn main() {"], []

    def new(expr, shape, annot=None):
        name = "v%d" % (len(vals) + 1)
        lines.append("    let %s%s = %s" % (name, ": " + annot if annot else "", expr))
        vals.append((name, shape))

    for i in range(3):
        shape = rnd.choice([(8, 8), (8, 4), (4, 8), (8,)])
        new("normal(seed=%d)" % (i + 1), shape, rtype(rnd, shape).split("<")[0])
    for _ in range(16):
        op = rnd.choice(["add", "mul", "mm", "sum", "tr", "rs", "rs", "resh", "fn", "where"])
        a = rnd.choice(vals)
        if op in ("add", "mul"):
            b = rnd.choice([v for v in vals if v[1] == a[1]])
            new("%s %s %s" % (a[0], "+" if op == "add" else "*", b[0]), a[1])
        elif op == "mm" and len(a[1]) == 2:
            bs = [v for v in vals if len(v[1]) == 2 and v[1][0] == a[1][1]]
            if bs:
                b = rnd.choice(bs)
                shape = (a[1][0], b[1][1])
                new("%s @ %s" % (a[0], b[0]), shape, rtype(rnd, shape))
        elif op == "sum":
            ax = rnd.randrange(len(a[1]))
            shape = tuple(n for i, n in enumerate(a[1]) if i != ax)
            if shape:
                new("sum(%s, axis=%d)" % (a[0], ax), shape, rtype(rnd, shape) if rnd.random() < 0.5 else None)
        elif op == "tr" and len(a[1]) == 2:
            new("transpose(%s)" % a[0], (a[1][1], a[1][0]))
        elif op == "rs":
            new("reshard(%s, %s)" % (a[0], rtype(rnd, a[1])), a[1])
        elif op == "resh" and len(a[1]) == 2:
            shape = (a[1][0] * a[1][1] // 4, 4)
            new("reshape(%s, [%d, %d])" % (a[0], shape[0], shape[1]), shape, rtype(rnd, shape).split("<")[0])
        elif op == "fn":
            new(rnd.choice(["sin(%s)", "-%s * 2.0", "%s / 4.0", "exp(%s)"]) % a[0], a[1])
        elif op == "where":
            new("where(%s > 0.0, %s, 0.0)" % (a[0], a[0]), a[1])
    for name, _ in vals:
        lines.append('    save("%s.npy", %s)' % (name, name))
    lines += ["}", "// RUN: X=1,Y=1 | X=2,Y=2 | X=2,Y=1", "// TOL: 1e-3 1e-3", ""]
    return lines


def well_typed(shdc, lines, path):
    """Drops the statements the checker rejects, and the ones using them."""
    for _ in range(40):
        open(path, "w").write("\n".join(lines))
        r = subprocess.run([shdc, "check", path], capture_output=True, text=True)
        if r.returncode == 0:
            return lines
        bad = {int(m) for m in re.findall(r":(\d+):\d+: error", r.stderr)}
        names = {m.group(1) for b in bad for m in [re.match(r"\s*let (\w+)", lines[b - 1])] if m}
        for b in bad:
            lines[b - 1] = ""
        lines = ["" if any(re.search(r"\b%s\b" % n, l) for n in names) else l for l in lines]
    raise SystemExit("seed program did not converge to a well-typed one")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "shdc"))
    shdc = os.path.abspath(ap.parse_args().shdc)
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        for seed in SEEDS:
            path = os.path.join(d, "random_%d.shd" % seed)
            well_typed(shdc, program(seed), path)
            try:
                runner.ShdTest(path, shdc).run_all()
            except runner.Failure as f:
                failures += 1
                print("seed %d:\n%s\n%s" % (seed, open(path).read(), f))
    if failures:
        sys.exit(1)
    print("%d random programs agree with their one-rank builds" % len(SEEDS))


if __name__ == "__main__":
    main()
