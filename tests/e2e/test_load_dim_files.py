#!/usr/bin/env python3
"""load_dim on files a program cannot size: each stops every rank with the
source line and the cause, and exits non-zero; a good file answers.

- a dim larger than an i32 holds (a header declaring 3000000000 elements;
  load_dim reads only the header),
- a file that is not .npy,
- a directory.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = """mesh {X: 2}
fn main() {
    let n = load_dim(arg("path", ""), 0)
    print("n", n)
}
"""
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]


def npy_header(shape):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d," % n for n in shape)
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    return b"\x93NUMPY\x01\x00" + (len(header) + pad + 1).to_bytes(2, "little") + header.encode() + b" " * pad + b"\n"


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "dim.shd"), os.path.join(d, "dim"), text=PROGRAM)
        files = {"huge.npy": npy_header([3000000000]), "good.npy": npy_header([7, 5]) + b"\0" * 140,
                 "text.npy": b"not an array\n"}
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        os.mkdir(os.path.join(d, "dir.npy"))
        cases = [("huge.npy", r'load_dim\("huge.npy"\): dim 0 of the file\'s array is 3000000000, more than an i32'),
                 ("text.npy", r'load_dim\("text.npy"\): not a .npy file'),
                 ("dir.npy", r'load_dim\("dir.npy"\): cannot open: not a regular file'),
                 # a relative path whose directory is missing: from which directory (a program's
                 # default --data=build/data/... run away from the repository)
                 ("build/data/x.npy", r'load_dim\("build/data/x.npy"\): cannot open: No such file or directory \(the '
                  r'directory build/data does not exist in the current directory, ' + re.escape(os.path.realpath(d))
                  + r'; a relative path is taken from there\)'),
                 ("good.npy", None)]
        for path, err in cases:
            p = subprocess.run(MPIRUN + [exe, "--path=" + path], cwd=d, capture_output=True,
                               text=True, timeout=120, env=dict(os.environ, SHD_QUIET="1"))
            if err is None:
                if p.returncode or not re.search(r"^n 7$", p.stdout, re.M):
                    failures.append("%s: exit %d, expected 'n 7':\n%s%s" % (path, p.returncode, p.stdout, p.stderr))
            elif p.returncode == 0 or not re.search(r"^dim: rank 0: line 3: " + err, p.stderr, re.M):
                failures.append("%s: exit %d, expected /%s/:\n%s" % (path, p.returncode, err, p.stderr))
    if failures:
        sys.exit("\n".join(failures))
    print("load_dim stops every rank on a dim past i32, a non-.npy file, a directory and a relative path whose directory "
          "is missing (naming the current directory); a good file answers")


if __name__ == "__main__":
    main()
