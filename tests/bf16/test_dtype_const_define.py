#!/usr/bin/env python3
"""-D and dtype consts (language.md "Dtype consts"): -D DT=bf16 changes a
`const DT = f32`, while a number for a dtype const, or a dtype for an
integer const, is [E_ARG] at the const (exit 1, the fix in the message),
and a value that is neither a number nor f32/f64/bf16 is a usage error.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = """mesh {X: 2}
const DT = f32
const N = 8
fn main() {
    let x: f32[N@X] = ones()
    let y = cast(x, DT)
    print(sum(cast(y, f32)))
}
"""


def main():
    shdc = testlib.shdc_option(__doc__)
    fails = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "p.shd")
        with open(src, "w") as f:
            f.write(PROGRAM)

        def types(*flags):
            return subprocess.run([shdc, "types", src, *flags], capture_output=True, text=True, timeout=60)
        for dt in ("f32", "f64", "bf16"):
            p = types("-D", "DT=" + dt)
            if p.returncode or "main.y: %s[8@X]" % dt not in p.stdout:
                fails.append("-D DT=%s: exit %d, types:\n%s%s" % (dt, p.returncode, p.stdout, p.stderr))
        cases = [("DT=3", 1, r"p.shd:2:7: error: -D DT=3: const DT names a dtype (f32 here); -D gives it f32, f64 or bf16"),
                 ("N=bf16", 1, r"p.shd:3:7: error: -D N=bf16: const N is a compile-time number, so -D gives it an "
                  "integer (e.g. -D N=8); a const that chooses a dtype is declared with one"),
                 ("DT=bf17", 2, r"-D DT: the value 'bf17' is not an integer")]
        for flag, rc, want in cases:
            p = types("-D", flag)
            if p.returncode != rc or want not in p.stderr or "Assertion" in p.stderr:
                fails.append("-D %s: expected exit %d and %r, got exit %d:\n%s" % (flag, rc, want, p.returncode, p.stderr))
    if fails:
        sys.exit("\n".join(fails))
    print("dtype consts follow -D; mismatched -D values are reported at the const")


if __name__ == "__main__":
    main()
