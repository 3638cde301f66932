#!/usr/bin/env python3
"""A save that cannot complete is never reported as success (issue 11, item 2).

Each failure must stop every rank with `save: rank R: save("PATH"): CAUSE` (the program is named save)
and a non-zero exit, leave the previous file (if any) exactly as it was,
and leave no temporary file behind:

- a full file system (a 512 KiB tmpfs; needs root to mount one),
- a target that is a directory (never replaced),
- a directory that does not exist,
- a rank killed with SIGKILL in the middle of a save (rank 1, then rank 0),
  and mpirun interrupted (SIGINT, SIGTERM): afterwards the file is either
  the previous one or the complete new one. When a rank is killed, the
  files MPI-IO keeps beside the temporary, named after it, are gone too
  (one is planted while the ranks are stopped inside the save, as Open
  MPI's lock probe TMP.locktest.RANK is left by a rank killed inside
  MPI_File_open).

Loads: a FIFO is refused at once, and a header with a decoy key inside a
string is read for its real shape (and so refused for the wrong one).
"""
import array
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
BIG = 1 << 24   # elements of the array saved while a rank is killed (64 MiB)

PROGRAM = """mesh {X: 2}
fn main() {
    let case = arg("case", 0)
    let n = arg("n", 1)
    let x: f32[262144@X] = iota(axis=0)
    if case == 1 {
        save("full/x.npy", x)
    }
    if case == 2 {
        save("isdir.npy", x)
    }
    if case == 3 {
        save("missing/x.npy", x)
    }
    if case == 5 {
        let f: f32[4@X] = load("fifo.npy")
        print("fifo", f)
    }
    if case == 6 {
        let z: f32[8@X, 4] = load("decoy.npy")
        print("decoy", z)
    }
    if case == 4 {
        let big: f32[%d@X] = iota(axis=0)
        for i in 0..n {
            save("big.npy", big)
        }
    }
    print("done")
}
""" % BIG

def npy_iota(n):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    head = b"\x93NUMPY\x01\x00" + (len(header) + pad + 1).to_bytes(2, "little") + header.encode() + b" " * pad + b"\n"
    return head + array.array("f", range(n)).tobytes()


OLD = npy_iota(3)   # an earlier save's array (a file that is not one is never replaced: test_save_safety)


def leftovers(d):
    return [f for f in os.listdir(d) if ".shd-save" in f or ".tmp" in f]


def rank_pids(exe):
    """World rank -> pid of the running ranks of exe."""
    pids = {}
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if not f.read().startswith(exe.encode() + b"\0"):
                    continue
            with open("/proc/%s/environ" % p, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            pids[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(p)
        except (OSError, KeyError, ValueError):
            pass
    return pids


def expect_failure(name, p, path, cause, failures):
    msg = r"^save: rank \d+: save\(\"%s\"\): .*%s" % (re.escape(path), cause)
    if p.returncode == 0 or not re.search(msg, p.stderr, re.M) or "done" in p.stdout:
        failures.append("%s: exit %d, expected non-zero and /%s/:\n%s" % (name, p.returncode, msg, p.stderr))


def full_disk(exe, d, env, failures):
    full = os.path.join(d, "full")
    os.mkdir(full)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", full],
                                           capture_output=True).returncode != 0:
        print("note: the full-disk case needs root to mount a tmpfs; skipped")
        return
    try:
        with open(os.path.join(full, "x.npy"), "wb") as f:
            f.write(OLD)
        with open(os.path.join(full, "filler"), "wb") as f:   # leave less room than the 1 MiB file needs
            f.write(b"\0" * (300 << 10))
        p = subprocess.run(MPIRUN + [exe, "--case=1"], cwd=d, env=env, capture_output=True, text=True, timeout=120)
        expect_failure("full disk", p, "full/x.npy", "No space left on device", failures)
        with open(os.path.join(full, "x.npy"), "rb") as f:
            if f.read() != OLD:
                failures.append("full disk: the previous x.npy was changed")
        if leftovers(full):
            failures.append("full disk: left %r" % leftovers(full))
    finally:
        subprocess.run(["umount", full])


def stopped(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "tT"
    except OSError:
        return True


def freeze_in_save(exe, work):
    """Stop both ranks (SIGSTOP) at a moment a save's temporary exists, so
    that the temporary seen is the one the ranks have registered. Returns
    (rank -> pid, the temporaries)."""
    deadline = time.time() + 60
    pids, temps = {}, []
    while time.time() < deadline:
        time.sleep(0.01)
        pids = rank_pids(exe)
        if len(pids) != 2 or not leftovers(work):   # not started, or between saves
            continue
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        while not all(stopped(pid) for pid in pids.values()):
            time.sleep(0.001)
        temps = [f for f in leftovers(work) if f.endswith(".tmp")]
        if temps:
            return pids, temps
        for pid in pids.values():
            os.kill(pid, signal.SIGCONT)
    return pids, temps


def kill_during_save(exe, d, env, how, failures):
    work = os.path.join(d, "kill-" + how)
    os.mkdir(work)
    target = os.path.join(work, "big.npy")
    with open(target, "wb") as f:
        f.write(OLD)
    p = subprocess.Popen(MPIRUN + [exe, "--case=4", "--n=1000"], cwd=work, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids, temps = freeze_in_save(exe, work)
    if not temps or len(pids) != 2:
        failures.append("kill %s: no save under way to interrupt (ranks %r)" % (how, pids))
    if how in ("rank0", "rank1"):
        for t in temps:   # what Open MPI's lock probe leaves when the rank inside it is killed
            open(os.path.join(work, t + ".locktest.%s" % how[-1]), "w").close()
        victim = int(how[-1])
        os.kill(pids.get(victim, p.pid), signal.SIGKILL)
        for r, pid in pids.items():   # the survivor waits for the dead rank inside the save
            if r != victim:
                os.kill(pid, signal.SIGCONT)
    else:   # mpirun wakes the ranks (SIGCONT) and lets them run a second before it sends SIGTERM
        p.send_signal(signal.SIGINT if how == "sigint" else signal.SIGTERM)
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        failures.append("kill %s: the other rank did not stop" % how)
        p.communicate()
    time.sleep(0.5)
    if p.returncode == 0:
        failures.append("kill %s: mpirun exited 0" % how)
    if leftovers(work):
        failures.append("kill %s: left %r" % (how, leftovers(work)))
    with open(target, "rb") as f:
        data = f.read()
    if data != OLD and data != npy_iota(BIG):
        failures.append("kill %s: big.npy is neither the previous file nor the complete new one (%d bytes)" % (
            how, len(data)))


def loads(exe, d, env, failures):
    """A FIFO is refused, not waited on; a header whose decoy key sits in a
    string is read for its real shape."""
    os.mkfifo(os.path.join(d, "fifo.npy"))
    header = "{'x': \"'shape': (8, 4)\", 'descr': '<f4', 'fortran_order': False, 'shape': (9, 4), }"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(os.path.join(d, "decoy.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 144)
    for case, pattern in ((5, r'load\("fifo.npy"\): cannot open: not a regular file'),
                          (6, r'load\("decoy.npy"\): file has f32\[9,4\], program expects f32\[8,4\]')):
        try:
            p = subprocess.run(MPIRUN + [exe, "--case=%d" % case], cwd=d, env=env, capture_output=True, text=True,
                               timeout=120)
        except subprocess.TimeoutExpired:
            failures.append("load case %d: hung" % case)
            continue
        if p.returncode == 0 or not re.search(r"^save: rank \d+: " + pattern, p.stderr, re.M):
            failures.append("load case %d: exit %d, expected /%s/:\n%s" % (case, p.returncode, pattern, p.stderr))


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1")
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "save.shd"), os.path.join(d, "save"), text=PROGRAM)
        full_disk(exe, d, env, failures)
        os.mkdir(os.path.join(d, "isdir.npy"))
        with open(os.path.join(d, "isdir.npy", "keep"), "w") as f:
            f.write("x")
        p = subprocess.run(MPIRUN + [exe, "--case=2"], cwd=d, env=env, capture_output=True, text=True, timeout=120)
        expect_failure("directory target", p, "isdir.npy", "isdir.npy is a directory, not a regular file; save to another "
                       "name", failures)
        p = subprocess.run(MPIRUN + [exe, "--case=3"], cwd=d, env=env, capture_output=True, text=True, timeout=120)
        expect_failure("missing directory", p, "missing/x.npy", "cannot create .*No such file or directory", failures)
        loads(exe, d, env, failures)
        if leftovers(d):
            failures.append("left %r" % leftovers(d))
        for how in ("rank1", "rank0", "sigint", "sigterm"):
            kill_during_save(exe, d, env, how, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("every failed save stopped the run, kept the previous file and left no temporary")


if __name__ == "__main__":
    main()
