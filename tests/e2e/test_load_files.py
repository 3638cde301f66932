#!/usr/bin/env python3
"""load reads the file it checked, as NumPy would read it, or stops every
rank with the cause (issue 19). At 1 and 2 ranks:

- a window of a valid file whose second dim passes 2^32 (a sparse file of
  48 GiB): the rows asked for, not rows of an int-truncated view;
- a header whose shape claims more than 2^63 bytes: a clean error, not a
  wrapped size check and an MPI abort;
- a bool file holding bytes other than 0 and 1 (NumPy reads them as True):
  !x, counts and casts as NumPy gives them (and, through the sanitizer
  build, no load of an invalid bool);
- a descr longer than the parser keeps: the message shows it, never two
  types that print alike;
- a file renamed over the path between rank 0's header check and the
  ranks' open (an MPI_File_open wrapper, linked into the program, renames
  an i32 file over the f32 one at that moment): every rank stops with the
  cause instead of reading i32 bits as f32.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"]
BIG = (1 << 32) + 8

PROGRAM = """mesh {X: 2}
fn main() {
    let case = arg("case", 0)
    if case == 1 {
        let w: i32[2, 8@X] = load("big.npy", (1, 0))
        save("w.npy", w)
        let v: i32[1, 8@X] = load("big.npy", (2, 0))
        save("v.npy", v)
    }
    if case == 2 {
        let w: f32[8@X] = load("liar.npy", (0,))
        print("liar", w)
    }
    if case == 3 {
        let b: bool[8@X] = load("bool.npy")
        save("not.npy", !b)
        save("count.npy", sum(cast(b, i32)))
        save("asf.npy", cast(b, f32))
        save("both.npy", b & !b)
    }
    if case == 4 {
        let x: f32[8@X] = load("long.npy")
        print("long", x)
    }
    if case == 5 {
        let x: f32[8@X] = load("race.npy")
        print("race", x)
    }
}
"""

SHIM = r"""
/* Renames RACE_WITH over RACE_PATH just before rank 0 opens RACE_PATH:
 * after rank 0 checked its header, before the ranks read it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int MPI_File_open(MPI_Comm comm, const char *name, int amode, MPI_Info info, MPI_File *fh);
int MPI_File_open(MPI_Comm comm, const char *name, int amode, MPI_Info info, MPI_File *fh)
{
    const char *path = getenv("RACE_PATH"), *with = getenv("RACE_WITH");
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (path && with && rank == 0 && strcmp(name, path) == 0)
        rename(with, path);
    return PMPI_File_open(comm, name, amode, info, fh);
}
"""


def header(descr, shape):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join("%d," % n for n in shape))
    pad = (64 - (10 + len(h) + 1) % 64) % 64
    return b"\x93NUMPY\x01\x00" + (len(h) + pad + 1).to_bytes(2, "little") + h.encode() + b" " * pad + b"\n"


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    hlen = int.from_bytes(data[8:10], "little")
    text = data[10:10 + hlen].decode()
    descr = re.search(r"'descr': '([^']*)'", text).group(1)
    code = {"<i4": "i", "<f4": "f", "|b1": "B"}[descr]
    body = data[10 + hlen:]
    return list(struct.unpack("<%d%s" % (len(body) // struct.calcsize(code), code), body))


def write_files(d):
    # big.npy: i32[3, 2^32 + 8], sparse; row r holds 1000 * r + j at column j < 8.
    with open(os.path.join(d, "big.npy"), "wb") as f:
        head = header("<i4", [3, BIG])
        f.write(head)
        for r in range(3):
            f.seek(len(head) + 4 * r * BIG)
            f.write(struct.pack("<8i", *[1000 * r + j for j in range(8)]))
        f.truncate(len(head) + 4 * 3 * BIG)
    with open(os.path.join(d, "liar.npy"), "wb") as f:
        f.write(header("<f4", [1 << 62]) + b"\0" * 64)
    with open(os.path.join(d, "bool.npy"), "wb") as f:
        f.write(header("|b1", [8]) + bytes([0, 1, 2, 255, 0, 7, 1, 128]))
    with open(os.path.join(d, "long.npy"), "wb") as f:
        f.write(header("<f4" + "x" * 40, [8]) + b"\0" * 32)
    for name, descr, fmt in (("race.npy", "<f4", "<8f"), ("other.npy", "<i4", "<8i")):
        with open(os.path.join(d, name), "wb") as f:
            f.write(header(descr, [8]) + struct.pack(fmt, *range(1, 9)))


def run(exe, d, np, case, env=None):
    return subprocess.run(MPIRUN + [str(np), exe, "--case=%d" % case], cwd=d, capture_output=True, text=True,
                          errors="replace", timeout=300, env=dict(os.environ, SHD_QUIET="1", **(env or {})))


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "load.shd")
        with open(src, "w") as f:
            f.write(PROGRAM)
        shim = os.path.join(d, "race_shim.c")
        with open(shim, "w") as f:
            f.write(SHIM)
        exes = {np: testlib.build(shdc, src, os.path.join(d, "load%d" % np), "--mesh", "X=%d" % np) for np in (1, 2)}
        racers = {np: testlib.build(shdc, src, os.path.join(d, "racer%d" % np), "--mesh", "X=%d" % np,
                                    env=dict(os.environ, SHDC_CFLAGS=shim)) for np in (1, 2)}
        write_files(d)
        for np in (1, 2):
            exe, racer = exes[np], racers[np]
            p = run(exe, d, np, 1)
            if p.returncode:
                failures.append("%d ranks: window of a dim past 2^32: exit %d\n%s" % (np, p.returncode, p.stderr))
            else:
                if read_npy(os.path.join(d, "w.npy")) != [1000 + j for j in range(8)] + [2000 + j for j in range(8)]:
                    failures.append("%d ranks: window (1, 0) of i32[3, 2^32+8] read the wrong rows: %r" % (
                        np, read_npy(os.path.join(d, "w.npy"))))
                if read_npy(os.path.join(d, "v.npy")) != [2000 + j for j in range(8)]:
                    failures.append("%d ranks: window (2, 0) read the wrong row" % np)
            p = run(exe, d, np, 2)
            want = r"^shdc: rank 0: line \d+: load\(\"liar.npy\"\): file is truncated \(\d+ bytes; its header's " \
                   r"f32\[4611686018427387904\] would need more than 2\^63 bytes\)"
            if p.returncode != 1 or not re.search(want, p.stderr, re.M):
                failures.append("%d ranks: a header past 2^63 bytes: exit %d, expected /%s/\n%s" % (
                    np, p.returncode, want, p.stderr[-1500:]))
            p = run(exe, d, np, 3)
            got = {n: read_npy(os.path.join(d, n + ".npy")) for n in ("not", "count", "asf", "both")} \
                if p.returncode == 0 else None
            truth = [b != 0 for b in (0, 1, 2, 255, 0, 7, 1, 128)]
            want = {"not": [int(not t) for t in truth], "count": [sum(truth)], "asf": [float(t) for t in truth],
                    "both": [0] * 8}
            if got != want:
                failures.append("%d ranks: a bool file of bytes 0,1,2,255,0,7,1,128: exit %d, got %r, NumPy "
                                "gives %r\n%s" % (np, p.returncode, got, want, p.stderr[-1500:]))
            p = run(exe, d, np, 4)
            want = r"^shdc: rank 0: load\(\"long.npy\"\): file has '<f4x{21}\.\.\.'\[8\], program expects f32\[8\]"
            if p.returncode != 1 or not re.search(want, p.stderr, re.M):
                failures.append("%d ranks: a long descr: exit %d, expected /%s/\n%s" % (np, p.returncode, want,
                                                                                       p.stderr[-1500:]))
            write_files(d)   # the race below renames other.npy away
            p = run(racer, d, np, 5, {"RACE_PATH": "race.npy", "RACE_WITH": "other.npy"})
            want = r"^shdc: rank \d+: load\(\"race.npy\"\): the file was replaced while it was being opened"
            if p.returncode == 0 or not re.search(want, p.stderr, re.M) or "race" in p.stdout:
                failures.append("%d ranks: a file renamed over the path after the header check: exit %d, "
                                "expected /%s/\n%s%s" % (np, p.returncode, want, p.stdout, p.stderr[-1500:]))
            write_files(d)
            p = run(racer, d, np, 5)
            if p.returncode or not re.search(r"^race \[1\. 2\. 3\. 4\. 5\. 6\. 7\. 8\.\]$", p.stdout, re.M):
                failures.append("%d ranks: the same load with nothing renamed: exit %d\n%s%s" % (
                    np, p.returncode, p.stdout, p.stderr[-1500:]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("load reads past 2^32, the file it checked, bools as NumPy does, and refuses lying headers")


if __name__ == "__main__":
    main()
