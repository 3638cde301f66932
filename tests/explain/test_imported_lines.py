#!/usr/bin/env python3
"""shdc explain names the file of a collective, and of the loop around it,
that comes from an imported function: a bare line number would point into
the program's own file. The program imports std/nn.shd (cross_entropy
all-reduces its mean over `data`, called in a loop of the program and after
it) and a library of its own whose function reduces inside a loop of that
library; the program's own all-reduce and loop name no file."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

LIB = """// a library: a loop whose body reduces a sharded argument
fn sum_times<X>(x: X, n: i32) -> f32 {
    var s = 0.0
    for i in 0..n {
        s = s + sum(x)
    }
    return s
}
"""

PROG = """mesh {data: 2}
import "std/nn.shd"
import "lib/loop.shd"
fn f(z: f32[4@data, 3], y: i32[4@data]) -> f32 {
    var s = 0.0
    for i in 0..2 {
        s = s + cross_entropy(z * cast(i + 1, f32), y)
    }
    return s + cross_entropy(z, y) + sum(z) + sum_times(z, 2)
}
fn main() {
    let z: f32[4@data, 3] = normal(seed=1)
    let y: i32[4@data] = reshard(iota(i32[4], axis=0) % 3, i32[4@data])
    print(f(z, y))
}
"""


def main():
    shdc = testlib.shdc_option(__doc__)
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "lib"))
        with open(os.path.join(d, "lib", "loop.shd"), "w") as fh:
            fh.write(LIB)
        with open(os.path.join(d, "prog.shd"), "w") as fh:
            fh.write(PROG)
        p = subprocess.run([shdc, "explain", "prog.shd"], cwd=d, capture_output=True, text=True, timeout=120)
        if p.returncode:
            sys.exit("shdc explain failed (exit %d):\n%s" % (p.returncode, p.stderr))
        body = re.search(r"^fn f\n(.*?)\n\n", p.stdout, re.S | re.M)
        if not body:
            sys.exit("no `fn f` section in:\n" + p.stdout)
        lines = [l for l in body.group(1).split("\n") if "all_reduce" in l]
        nn = re.escape(os.path.join(os.path.realpath(testlib.ROOT), "lib", "std", "nn.shd"))
        lib = re.escape(os.path.join(os.path.realpath(d), "lib", "loop.shd"))
        want = [r" -> f32   \(in the loop at line 6\)   \(line \d+ of %s\)$" % nn,
                r" -> f32   \(line \d+ of %s\)$" % nn,
                r"^  line 9 +all_reduce\.sum .* -> f32$",
                r"^  line 5 +all_reduce\.sum .* -> f32   \(in the loop at line 4 of %s\)   \(line 5 of %s\)$" % (lib, lib)]
        if len(lines) != len(want) or any(not re.search(w, l) for w, l in zip(want, lines)):
            sys.exit("explain's collectives of f:\n%s\nexpected, in order:\n%s" % ("\n".join(lines), "\n".join(want)))
        print("explain names the imported file of %d of %d collectives" % (3, len(lines)))


if __name__ == "__main__":
    main()
