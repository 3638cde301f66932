#!/usr/bin/env python3
"""A vjp_load that reads an entry no vjp_save wrote (language.md "Saved
VJPs") stops the program with the load's line and the entry, rather than
reading an empty tape: here the save runs at ticks 0 and 1 only, and the
load at every tick, so tick 2's load (entry 2 of 4) is an error."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
from run import mpirun_cmd, run, Failure  # noqa: E402

PROGRAM = """mesh {X: 1}

fn f(x: f32[4], w: f32[4]) -> f32[4] {
    return tanh(x @ w) * x
}
fn main() {
    let w: f32[4] = ones()
    var x: f32[4] = ones()
    var g = zeros(f32[4])
    for t in 0..4 {
        if t < 2 {
            x = vjp_save(f, t, slots=4)(x, w)
        }
        let (gx, gw) = vjp_load(f, t)(x)
        g = g + gx + gw
    }
    print(g)
}
"""


def main():
    shdc = testlib.shdc_option(__doc__)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "unwritten.shd")
        exe = testlib.build(shdc, src, os.path.join(d, "u"), text=PROGRAM)
        r = run(mpirun_cmd(1) + [exe], cwd=d, timeout=120)
    want = "unwritten.shd:14: vjp_load reads entry 2, which no vjp_save wrote"
    if r.rc == 0 or want not in r.out + r.err:
        raise Failure("the load of an unwritten entry: exit %d, and no %r in:\n%s" % (r.rc, want, (r.out + r.err)[-2000:]),
                      [r.shell])
    print("exit %d: %s" % (r.rc, want))


if __name__ == "__main__":
    try:
        main()
    except (Failure, subprocess.TimeoutExpired) as f:
        sys.exit(str(f))
