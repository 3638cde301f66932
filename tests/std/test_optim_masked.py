#!/usr/bin/env python3
"""adamw_masked with a mask of another shape (language.md 10.4): the error
is in std/optim.shd, naming the leaf the mask lacks (or has too many) and
the types, with a note naming the instantiation and the user's call; exit
status 1, no crash."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = """mesh {X: 2}
import "std/optim.shd"
struct Block { w: f32[4, 6@X], b: f32[4] }
struct Model { emb: f32[8@X, 6], h: Block[2] }
struct Short { emb: bool }
struct BlockDecay { w: bool, b: bool }
struct Extra { emb: bool, h: BlockDecay, head: bool }
fn main() {
    let p = uniform(Model, seed=1)
    let z = zeros(Model)
    let (a, b, c) = adamw_masked(p, z, z, z, 0.1, 0.1, MASK, 1)
    print(sum(a))
}
"""

CASES = [
    ("Short(emb=true)", r"has no leaf h\.w, a leaf of Model \(f32\[2,4,6@X\]\); give Short that field \[E_SHAPE\]"),
    ("Extra(emb=true, h=BlockDecay(w=true, b=false), head=false)", r"its leaf head is no leaf of Model"),
]


def main():
    shdc = testlib.shdc_option()
    bad = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "m.shd")
        for mask, want in CASES:
            with open(src, "w") as f:
                f.write(PROGRAM.replace("MASK", mask))
            p = subprocess.run([shdc, "check", src], capture_output=True, text=True, timeout=60)
            err = p.stderr
            note = r"m\.shd:11:21: note: in adamw_masked<P = Model, M = %s> called from .*m\.shd:11:21" % mask.split("(")[0]
            if p.returncode != 1:
                bad.append("%s: exit %d, expected 1\n%s" % (mask, p.returncode, err))
            for rx in (r"std/optim\.shd:\d+:\d+: error: .*" + want, note):
                if not re.search(rx, err):
                    bad.append("%s: no line matches %r in:\n%s" % (mask, rx, err))
    if bad:
        sys.exit("\n".join(bad))
    print("ok: %d masks of another shape" % len(CASES))


if __name__ == "__main__":
    main()
