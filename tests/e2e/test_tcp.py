#!/usr/bin/env python3
"""Training over the network, not only shared memory (issue 11, item 7).

tests/autodiff/train_2d.shd (two SGD steps of an MLP, data x tensor parallel)
is built for a 2 x 2 mesh and run at 4 ranks twice: with Open MPI's default
transports (shared memory on one machine) and restricted to TCP with
`--mca btl self,tcp`, the way ranks on different hosts talk without
InfiniBand (docs/cluster.md, "TCP"). Both runs must succeed and save
the same parameters and losses, bit for bit (the collectives take the same
steps whatever carries their bytes); they must also agree, to a tolerance,
with the one-rank build of the same program.
"""
import array
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
SRC = os.path.join(ROOT, "tests", "autodiff", "train_2d.shd")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def npy_floats(path):
    with open(path, "rb") as f:
        data = f.read()
    hlen = int.from_bytes(data[8:10], "little")
    head = data[10:10 + hlen].decode("latin-1")
    code = "f" if "'<f4'" in head else "d" if "'<f8'" in head else None
    if code is None:
        return None
    return array.array(code, data[10 + hlen:])


def run(exe, ranks, d, extra):
    os.makedirs(d)
    p = subprocess.run(MPIRUN + extra + ["-np", str(ranks), exe], cwd=d, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, SHD_QUIET="1"))
    return p, {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        exes = {}
        for mesh in ("data=2,tp=2", "data=1,tp=1"):
            exes[mesh] = testlib.build(shdc, SRC, os.path.join(d, "train_" + mesh.replace(",", "_").replace("=", "")),
                                       "--mesh", mesh)
        shm, shm_files = run(exes["data=2,tp=2"], 4, os.path.join(d, "shm"), [])
        tcp, tcp_files = run(exes["data=2,tp=2"], 4, os.path.join(d, "tcp"),
                             ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
                              "--mca", "btl_base_verbose", "30"])
        one, one_files = run(exes["data=1,tp=1"], 1, os.path.join(d, "one"), [])
        for name, p in (("shared memory", shm), ("TCP", tcp), ("one rank", one)):
            if p.returncode:
                failures.append("%s run: exit %d\n%s" % (name, p.returncode, p.stderr[-2000:]))
        if "initializing btl component tcp" not in tcp.stderr or "initializing btl component vader" in tcp.stderr:
            failures.append("the TCP run did not use (only) the tcp transport:\n%s" % tcp.stderr[-2000:])
        if not failures:
            if not tcp_files or sorted(tcp_files) != sorted(shm_files):
                failures.append("TCP run saved %s, shared-memory run %s" % (sorted(tcp_files), sorted(shm_files)))
            for f in sorted(shm_files):
                if tcp_files.get(f) != shm_files[f]:
                    failures.append("%s differs between the TCP and the shared-memory run" % f)
                a, b = npy_floats(os.path.join(d, "tcp", f)), npy_floats(os.path.join(d, "one", f))
                if a is None or b is None or len(a) != len(b) or any(
                        abs(x - y) > 1e-5 + 1e-4 * abs(y) for x, y in zip(a, b)):
                    failures.append("%s of the TCP run differs from the one-rank run" % f)
            if tcp.stdout != shm.stdout:
                failures.append("printed output differs:\n%s\nvs\n%s" % (tcp.stdout, shm.stdout))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("train_2d at 4 ranks over TCP saved the same %d arrays as over shared memory" % len(shm_files))


if __name__ == "__main__":
    main()
