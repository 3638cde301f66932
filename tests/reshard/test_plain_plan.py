#!/usr/bin/env python3
"""The plan reshard falls back to when its search would be too large (many
mesh axes) is correct too: with SHDC_RESHARD_NODES=0 every reshard of the
{2,2} pair test takes it, and every pair must still check."""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    src = os.path.join(ROOT, "tests", "reshard", "pairs_x2y2.shd")
    env = dict(os.environ, SHDC_RESHARD_NODES="0", SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "prog")
        ir = subprocess.run([shdc, "emit-ir", src], capture_output=True, text=True, env=env)
        if ir.returncode or " all_to_all " in ir.stdout or " permute " in ir.stdout:
            print("the plain plan should use only gathers, all-reduces, slices and zero_unless_first:\n" +
                  ir.stderr)
            sys.exit(1)
        b = subprocess.run([shdc, "build", src, "-o", exe, "-O0"], capture_output=True, text=True, env=env)
        if b.returncode:
            print(b.stderr)
            sys.exit(1)
        r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
                            exe], capture_output=True, text=True, env=env, cwd=d, timeout=300)
        if r.returncode or "MISMATCH" in r.stdout or "checked 729 pairs" not in r.stdout:
            print("exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
            sys.exit(1)
    print("729 pairs correct with the plain plan")


if __name__ == "__main__":
    main()
