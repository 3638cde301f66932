#!/usr/bin/env python3
"""The runtime's inputs fuzzed (issue 19): mutated .npy files loaded by
programs at 1 and 2 ranks, and mutated --network files for explain.

.npy: a valid file (NumPy's own np.save of random data, for one of several
programs: full loads of f32, i32, bool and f64 arrays sharded on either
dim, and a window load at a run-time start) gets one to three mutations:
flipped and random bytes, a header dict rewritten with odd descrs
(big-endian, unsigned, long, with a NUL), shapes that lie (past 2^31, 2^62,
2^63), Fortran order, extra, repeated and missing keys, another version or
header length, the file cut short or grown, bool bytes other than 0 and 1.
Each program loads it and saves what it read. The verdict:
- exit 0: the saved array must equal what NumPy's np.load reads from the
  file (bools as NumPy's truth values), so a file NumPy cannot read must
  not load;
- otherwise a clean error: `PROG: rank R: ... load("PATH"): ...` on stderr,
  never a signal, a sanitizer report (exit 86, 87), MPI's own abort
  without a message, or a hang; and no temporary left in the directory.

--network: valid network files mutated (random bytes, NUL, huge and tiny
numbers, units, axis names, lines past 1 KiB, comments); `shdc explain
--network=FILE` must exit 0 with finite, readable estimates, or 2 with a
message, never crash or hang.

Quick by default (tests/run.py); `make fuzz` runs it through the sanitizer
build for FUZZ_SECONDS and prints the counts. Failing inputs are kept under
--keep with the reason.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"]
CLEAN = re.compile(r"^\S+: rank \d+: (line \d+: )?load\(\"[^\"]*\"\): ", re.M)

# name -> (the load's type, the dtype and shape of the valid file, window start or None)
PROGRAMS = {
    "f32_rows": ("f32[8@X, 4]", "<f4", (8, 4), None),
    "i32_vec": ("i32[16@X]", "<i4", (16,), None),
    "bool_vec": ("bool[8@X]", "|b1", (8,), None),
    "f64_cols": ("f64[4, 2@X]", "<f8", (4, 2), None),
    "i32_window": ("i32[2, 4@X]", "<i4", (6, 4), 3),
}


def program(typ, window):
    """Loads the file and saves what it read (a bool array as the i32 of each
    value, so that a byte other than 0 and 1 cannot pass for true)."""
    load = 'load(arg("path", "in.npy"), (arg("r", 0), 0))' if window else 'load(arg("path", "in.npy"))'
    out = "cast(a, i32)" if typ.startswith("bool") else "a"
    return "mesh {X: 2}\nfn main() {\n    let a: %s = %s\n    save(arg(\"out\", \"out.npy\"), %s)\n}\n" % (
        typ, load, out)


# ---- .npy files ----------------------------------------------------------------------

DESCRS = ["<f4", "<i4", "|b1", "<f8", ">f4", ">i4", "<u4", "<i8", "=f4", "|f4", "<f2", "<c8", "f4", "<f4" + "x" * 40,
          "<f4\\x00", "<f", "", "b1", "|u1", "<i4 ", "O", "<U8", "V4"]
SHAPES = ["(8, 4)", "(8,4)", "(16,)", "(8,)", "(4, 2)", "(6, 4)", "(2147483648, 4)", "(4611686018427387904,)",
          "(9223372036854775807, 1)", "(100000000000000000000,)", "()", "(8, 4, 1)", "(-8, 4)", "(8L, 4L)",
          "(0, 4)", "(8, 0)", "[8, 4]", "(8 4)", "((8, 4),)", "(4294967304, 4)", "(6, 4,)", "(1, 16)"]


def header_bytes(d, version=1):
    text = d.encode("latin-1")
    pad = (64 - (10 + (2 if version > 1 else 0) + len(text) + 1) % 64) % 64
    body = text + b" " * pad + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
    return b"\x93NUMPY" + bytes([version, 0]) + len(body).to_bytes(4, "little") + body


def random_dict(rnd, descr, shape):
    keys = [("descr", "'%s'" % descr), ("fortran_order", "False"), ("shape", shape)]
    r = rnd.random()
    if r < 0.15:
        keys[1] = ("fortran_order", rnd.choice(["True", "false", "0", "None"]))
    elif r < 0.3:
        keys.insert(rnd.randrange(4), ("extra", rnd.choice(["(1, (2, [3]))", "{'a': 'shape'}", "'x'", "1e9"])))
    elif r < 0.4:
        keys.append((rnd.choice(["descr", "shape"]), rnd.choice(["'<i4'", "(2,)"])))
    elif r < 0.5:
        del keys[rnd.randrange(3)]
    rnd.shuffle(keys)
    q = rnd.choice(["'", '"'])
    return "{" + ", ".join("%s%s%s: %s" % (q, k, q, v) for k, v in keys) + (", }" if rnd.random() < 0.7 else "}")


def mutate(rnd, valid):
    """valid: the bytes of np.save's file. One to three mutations."""
    data = bytearray(valid)
    hlen = int.from_bytes(valid[8:10], "little")
    head_end = 10 + hlen
    descr = re.search(rb"'descr': '([^']*)'", valid).group(1).decode()
    shape = re.search(rb"'shape': (\([^)]*\))", valid).group(1).decode()
    benign = rnd.random() < 0.35   # mutations a reader must take: the data, the size, the header's form
    for _ in range(rnd.randint(1, 3)):
        r = rnd.random()
        if benign:
            r = rnd.choice([0.7, 0.9, 0.95]) if rnd.random() < 0.7 else 0.0
        if r < 0.25:   # a new header (dict, version)
            d = random_dict(rnd, rnd.choice(DESCRS) if rnd.random() < 0.6 and not benign else descr,
                            rnd.choice(SHAPES) if rnd.random() < 0.6 and not benign else shape)
            data = bytearray(header_bytes(d, rnd.choice([1, 1, 2, 3])) + bytes(data[head_end:]))
            head_end = len(header_bytes(d))
        elif r < 0.4 and data:   # flip bytes in the header
            for _ in range(rnd.randint(1, 3)):
                i = rnd.randrange(min(len(data), head_end + 1))
                data[i] = rnd.randrange(256)
        elif r < 0.5 and len(data) >= 10:   # the header length or version (of a file not cut before them)
            if rnd.random() < 0.5:
                data[8:10] = rnd.randrange(65536).to_bytes(2, "little")
            else:
                data[6] = rnd.choice([0, 1, 2, 3, 4, 255])
        elif r < 0.65 and data:   # cut short
            del data[rnd.randrange(len(data)):]
        elif r < 0.75:   # grow
            data += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 64)))
        else:   # data bytes (bools: any byte)
            for _ in range(rnd.randint(1, 8)):
                if len(data) > head_end:
                    data[rnd.randrange(head_end, len(data))] = rnd.randrange(256)
    return bytes(data)


def valid_file(rnd, descr, shape):
    dt = np.dtype(descr)
    n = int(np.prod(shape))
    if dt == np.bool_:
        a = np.array([rnd.random() < 0.5 for _ in range(n)], dtype=np.bool_).reshape(shape)
    elif dt.kind == "i":
        a = np.array([rnd.randrange(-1000, 1000) for _ in range(n)], dtype=dt).reshape(shape)
    else:
        a = np.array([rnd.uniform(-10, 10) for _ in range(n)], dtype=dt).reshape(shape)
    import io
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def numpy_reads(path):
    """The array NumPy's .npy reader (numpy.lib.format) reads from the file,
    or None where it refuses it, except that keys beyond descr,
    fortran_order and shape are allowed (shdc's documented leniency:
    runtime/npy_header.c skips them)."""
    import ast
    from numpy.lib import format as fmt
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):
                return None
            hlen = int.from_bytes(f.read(2 if version == (1, 0) else 4), "little")
            header = f.read(hlen)
            if len(header) != hlen:
                return None
            text = header.decode("latin1" if version < (3, 0) else "utf8")
            try:
                d = ast.literal_eval(text)
            except SyntaxError:
                d = ast.literal_eval(fmt._filter_header(text))   # Python 2's 8L
            if not isinstance(d, dict) or not {"descr", "fortran_order", "shape"} <= set(d):
                return None
            shape, order = d["shape"], d["fortran_order"]
            if not isinstance(shape, tuple) or not all(isinstance(x, int) and x >= 0 for x in shape) \
                    or not isinstance(order, bool):
                return None
            dt = fmt.descr_to_dtype(d["descr"])
            if dt.hasobject:
                return None
            count = int(np.prod(shape, dtype=object))
            need = count * dt.itemsize
            if need > os.path.getsize(path):
                return None
            body = f.read(need)
            if len(body) != need:
                return None
            return np.frombuffer(body, dt, count).reshape(shape, order="F" if order else "C")
    except Exception:   # noqa: BLE001 -- anything the reader refuses
        return None


def npy_case(exe, d, np_ranks, name, data, window, timeout):
    """None when the run is fine, else why not."""
    path = os.path.join(d, "in.npy")
    with open(path, "wb") as f:
        f.write(data)
    out = os.path.join(d, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    cmd = MPIRUN + [str(np_ranks), exe, "--path=in.npy", "--out=out.npy"]
    if window is not None:
        cmd.append("--r=%d" % window)
    try:
        p = subprocess.run(cmd, cwd=d, capture_output=True, timeout=timeout,
                           env=dict(os.environ, SHD_QUIET="1", SHD_MEMORY_CHECK="0"))
    except subprocess.TimeoutExpired:
        return "hung (more than %d s)" % timeout
    err = p.stderr.decode("utf-8", "replace")
    left = [f for f in os.listdir(d) if f.startswith(".shd-")]
    if left:
        return "left %s" % left
    want = numpy_reads(path)
    if p.returncode == 0:
        if want is None:
            return "loaded a file NumPy cannot read"
        got = np.load(out)
        if window is not None:
            want = want[window:window + got.shape[0]] if want.ndim == 2 else None
        if want is not None and want.dtype == np.bool_:
            want = (want.view(np.uint8) != 0).astype(np.int32)   # NumPy's truth of each byte
        if want is None or want.shape != got.shape or not np.array_equal(
                want.astype(got.dtype), got, equal_nan=got.dtype.kind == "f"):
            return "read data that differ from NumPy's:\n%r\nNumPy:\n%r" % (got, want)
        return None
    if p.returncode in (86, 87) or p.returncode < 0 or not CLEAN.search(err):
        return "exit %d without a clean load error:\n%s" % (p.returncode, err[-2000:])
    return None


# ---- --network files ------------------------------------------------------------------

NET_LINES = ["* 25GB/s 5us", "X 10GB/s 1us intra-node", "reduce 10GB/s", "# a comment", "", "X 100Gbit/s 2e-6",
             "default 1e9 1ms", "Y 1GB/s 1us"]
NET_PIECES = ["1e308", "1e-308", "1e999", "-1", "0", "nan", "inf", "GB/s", "Gbit", "PB/s", "us", "ms", "ns", "s",
              "\x00", "\xff", "#", " ", "\t", "X", "*", "reduce", "9" * 400, "x" * 2000, "\n"]


def net_case(shdc, d, rnd, prog, timeout):
    lines = [rnd.choice(NET_LINES) for _ in range(rnd.randint(1, 5))]
    text = "\n".join(lines) + "\n"
    t = list(text)
    for _ in range(rnd.randint(0, 4)):
        i = rnd.randrange(len(t) + 1)
        if rnd.random() < 0.7:
            t.insert(i, rnd.choice(NET_PIECES))
        elif t:
            del t[min(i, len(t) - 1)]
    data = "".join(t).encode("latin-1", "replace")
    path = os.path.join(d, "links.net")
    with open(path, "wb") as f:
        f.write(data)
    try:
        p = subprocess.run([shdc, "explain", prog, "--network=" + path], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return data, "hung", False
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    if p.returncode == 0:
        ests = re.findall(r" est +(\S+) (s|ms|us) ", out)
        if not ests or any(not re.match(r"^\d+\.\d+$|^\d\.\d{3}e\+\d+$", v) for v, _ in ests):
            return data, "estimates that are not finite, readable numbers: %r" % ests[:5], True
        return data, None, True
    if p.returncode != 2 or "--network" not in err:
        return data, "exit %d:\n%s" % (p.returncode, err[-1500:]), False
    return data, None, False


def keep(where, name, data, why):
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, name), "wb") as f:
        f.write(data)
    with open(os.path.join(where, name + ".why"), "w") as f:
        f.write(why + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--files", type=int, default=3, help="mutated .npy files (when --seconds is 0)")
    ap.add_argument("--networks", type=int, default=40, help="mutated network files (when --seconds is 0)")
    ap.add_argument("--seconds", type=float, default=0, help="fuzz for this long instead (both kinds)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--keep", default=os.path.join(ROOT, "build", "fuzz-failures", "runtime"))
    a = ap.parse_args()
    shdc = os.path.abspath(a.shdc)
    if np is None:
        print("note: NumPy is missing (apt-get install python3-numpy); the .npy fuzzing is skipped")
    rnd = random.Random(a.seed)
    failures, counts = [], {"npy runs": 0, "npy loaded": 0, "npy refused": 0, "network files": 0,
                            "network accepted": 0}
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        exes = {}
        if np is not None:
            for name, (typ, _, _, window) in PROGRAMS.items():
                src = os.path.join(tmp, name + ".shd")
                for ranks in (1, 2):
                    exes[name, ranks] = testlib.build(shdc, src, os.path.join(tmp, "%s_%d" % (name, ranks)),
                                                      "--mesh", "X=%d" % ranks, text=program(typ, window))
        prog = os.path.join(ROOT, "tests", "explain", "trace_matches.shd")
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        n_npy = n_net = 0

        def more(k, limit):
            return time.time() - start < a.seconds if a.seconds else k < limit

        while (np is not None and more(n_npy, a.files)) or more(n_net, a.networks):
            if np is not None and more(n_npy, a.files):
                name = rnd.choice(sorted(PROGRAMS))
                typ, descr, shape, window = PROGRAMS[name]
                data = mutate(rnd, valid_file(rnd, descr, shape))
                for ranks in (1, 2):
                    why = npy_case(exes[name, ranks], work, ranks, name, data, window, a.timeout)
                    counts["npy runs"] += 1
                    if why:
                        failures.append("%s at %d ranks (npy-%d): %s" % (name, ranks, n_npy, why))
                        keep(a.keep, "npy-%d-%s.npy" % (n_npy, name), data, "%d ranks: %s" % (ranks, why))
                    elif os.path.exists(os.path.join(work, "out.npy")):
                        counts["npy loaded"] += 1
                    else:
                        counts["npy refused"] += 1
                n_npy += 1
            if more(n_net, a.networks):
                data, why, accepted = net_case(shdc, work, rnd, prog, a.timeout)
                counts["network files"] += 1
                counts["network accepted"] += accepted and not why
                if why:
                    failures.append("network file %d: %s" % (n_net, why))
                    keep(a.keep, "net-%d.net" % n_net, data, why)
                n_net += 1
    print("runtime fuzzing, %.0f s: %s" % (time.time() - start, ", ".join("%s %d" % kv for kv in counts.items())))
    if failures:
        print("\n".join(failures[:40]))
        sys.exit(1)


if __name__ == "__main__":
    main()
