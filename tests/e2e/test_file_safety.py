#!/usr/bin/env python3
"""What a program finds at the names it writes never makes it write
elsewhere, replace the wrong thing or mix two jobs' files (issue 19).

Everything runs in a scratch directory; the pid cases in pid namespaces of
their own (unshare, as root), so that rank 0's pid is small and the same
in two jobs, as in two containers:

- symbolic links planted at every name the old temporary could have had
  (.shd-save-PID-N.tmp for the namespace's pids) to a victim file: the
  save must not write through them, the victim keeps its bytes and the
  target is a regular file with the saved array;
- a target that is a symbolic link, a FIFO or a device node is refused
  and left as it was (the link's own target too);
- two jobs whose rank 0 has the same pid save into one directory at the
  same time, many times: each file holds its own job's array;
- SHD_TRACE naming a device node, a FIFO, a directory or a symbolic link
  stops the run before it starts (the program's own save never happens)
  and leaves the node as it was; a user's PATH.tmp beside a good trace
  path is neither truncated nor removed.
"""
import array
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
N = 4096

PROGRAM = """mesh {X: 2}
fn main() {
    let v = arg("v", 1.0)
    let n = arg("n", 1)
    let x: f32[%d@X] = iota(axis=0)
    for i in 0..n {
        save(arg("out", "x.npy"), x + v)
    }
    print("done")
}
""" % N
VICTIM = b"the victim's own bytes\n"


def npy_values(path):
    """The f32 values of a 1-d .npy file NumPy would read."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        return None
    off = 10 + int.from_bytes(data[8:10], "little")
    return array.array("f", data[off:]).tolist()


def expected(v):
    return [float(i) + v for i in range(N)]


def in_namespace(d):
    """The command prefix that runs a job as in a container of its own: a
    pid namespace, and private /dev/shm and session directory (Open MPI's
    shared-memory files are named after pids too); None where that is not
    allowed."""
    session = os.path.join(d, "sessions")
    os.makedirs(session, exist_ok=True)
    script = ('mount -t tmpfs tmpfs /dev/shm && s=$(mktemp -d "%s/s.XXXXXX") && TMPDIR=$s && export TMPDIR '
              '&& exec "$@"' % session)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh"]
    try:
        ok = subprocess.run(cmd + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return cmd if ok else None


def run(cmd, cwd, env=None, timeout=180):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=timeout,
                          env=dict(os.environ, SHD_QUIET="1", **(env or {})))


def planted_links(exe, d, ns, failures):
    work = os.path.join(d, "links")
    os.mkdir(work)
    victim = os.path.join(d, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    for pid in range(1, 400):
        for seq in range(3):
            os.symlink(victim, os.path.join(work, ".shd-save-%d-%d.tmp" % (pid, seq)))
    p = run(ns + MPIRUN + [exe, "--v=5"], work)
    with open(victim, "rb") as f:
        if f.read() != VICTIM:
            failures.append("planted links: the save wrote through a link into the victim file")
    target = os.path.join(work, "x.npy")
    if p.returncode or not os.path.isfile(target) or os.path.islink(target):
        failures.append("planted links: exit %d, x.npy %s\n%s" % (
            p.returncode, "is a link" if os.path.islink(target) else "missing", p.stderr))
    elif npy_values(target) != expected(5):
        failures.append("planted links: x.npy does not hold the saved array")


def odd_targets(exe, d, failures):
    """A target that is a link, a FIFO or a device is refused, unchanged."""
    work = os.path.join(d, "targets")
    os.mkdir(work)
    victim = os.path.join(work, "victim")
    with open(victim, "wb") as f:
        f.write(VICTIM)
    os.symlink(victim, os.path.join(work, "link.npy"))
    os.mkfifo(os.path.join(work, "fifo.npy"))
    dev = os.path.join(work, "null.npy")
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for name, what in (("link.npy", "a symbolic link"), ("fifo.npy", "a FIFO"), ("null.npy", "a device")):
        p = run(MPIRUN + [exe, "--out=" + name], work)
        want = r'^shdc: rank 0: save\("%s"\): %s is %s, not a regular file' % (re.escape(name), re.escape(name), what)
        if p.returncode == 0 or not re.search(want, p.stderr, re.M):
            failures.append("save to %s: exit %d, expected /%s/:\n%s" % (what, p.returncode, want, p.stderr))
    with open(victim, "rb") as f:
        if f.read() != VICTIM:
            failures.append("save to a link: its target was changed")
    if not os.path.islink(os.path.join(work, "link.npy")) or not stat.S_ISFIFO(
            os.lstat(os.path.join(work, "fifo.npy")).st_mode) or not stat.S_ISCHR(os.lstat(dev).st_mode):
        failures.append("a refused target was replaced")
    left = [f for f in os.listdir(work) if f.startswith(".shd-")]
    if left:
        failures.append("refused saves left %r" % left)


def same_pid_jobs(exe, d, ns, failures):
    """Two jobs, each in a fresh pid namespace (so rank 0 has the same pid
    in both), save 40 times each into one directory at the same time."""
    work = os.path.join(d, "shared")
    os.mkdir(work)
    jobs = [subprocess.Popen(ns + MPIRUN + [exe, "--v=%d" % v, "--n=40", "--out=job%d.npy" % v], cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                             env=dict(os.environ, SHD_QUIET="1")) for v in (1, 2)]
    for v, p in zip((1, 2), jobs):
        out, err = p.communicate(timeout=300)
        path = os.path.join(work, "job%d.npy" % v)
        if p.returncode or "done" not in out:
            failures.append("same-pid job %d: exit %d\n%s" % (v, p.returncode, err[-2000:]))
        elif npy_values(path) != expected(v):
            failures.append("same-pid job %d: reported success, but job%d.npy holds another array" % (v, v))
    left = [f for f in os.listdir(work) if f.startswith(".shd-")]
    if left:
        failures.append("same-pid jobs left %r" % left)


def traces(exe, d, failures):
    work = os.path.join(d, "trace")
    os.mkdir(work)
    dev = os.path.join(work, "null")
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(os.path.join(work, "fifo"))
    os.mkdir(os.path.join(work, "dir"))
    with open(os.path.join(work, "victim"), "wb") as f:
        f.write(VICTIM)
    os.symlink("victim", os.path.join(work, "link"))
    for name, what in (("null", "a device"), ("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a symbolic link")):
        path = os.path.join(work, name)
        p = run(MPIRUN + [exe, "--out=ran.npy"], work, {"SHD_TRACE": path}, timeout=60)
        want = r"^shdc: rank 0: SHD_TRACE=%s: %s is %s, not a regular file" % (re.escape(path), re.escape(path), what)
        if p.returncode == 0 or not re.search(want, p.stderr, re.M) or os.path.exists(os.path.join(work, "ran.npy")):
            failures.append("SHD_TRACE=%s: exit %d, expected /%s/ before the run:\n%s" % (
                what, p.returncode, want, p.stderr[-1500:]))
    if not stat.S_ISCHR(os.lstat(dev).st_mode) or not stat.S_ISFIFO(os.lstat(os.path.join(work, "fifo")).st_mode) \
            or not os.path.islink(os.path.join(work, "link")):
        failures.append("SHD_TRACE replaced a node it refused")
    with open(os.path.join(work, "victim"), "rb") as f:
        if f.read() != VICTIM:
            failures.append("SHD_TRACE wrote through a symbolic link")
    good = os.path.join(work, "good.json")
    with open(good + ".tmp", "wb") as f:
        f.write(VICTIM)
    p = run(MPIRUN + [exe, "--out=ok.npy"], work, {"SHD_TRACE": good}, timeout=60)
    if p.returncode or not os.path.isfile(good):
        failures.append("SHD_TRACE=good.json: exit %d\n%s" % (p.returncode, p.stderr[-1500:]))
    try:
        with open(good + ".tmp", "rb") as f:
            if f.read() != VICTIM:
                failures.append("SHD_TRACE truncated the user's good.json.tmp")
    except OSError:
        failures.append("SHD_TRACE removed the user's good.json.tmp")
    left = [f for f in os.listdir(work) if f.startswith(".shd-")]
    if left:
        failures.append("traces left %r" % left)


def main():
    shdc = testlib.shdc_option()
    failures = []
    if os.geteuid() != 0:
        print("note: device nodes and pid namespaces need root; skipped")
        return
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "save.shd"), os.path.join(d, "save"), text=PROGRAM)
        odd_targets(exe, d, failures)
        traces(exe, d, failures)
        ns = in_namespace(d)
        if ns:
            planted_links(exe, d, ns, failures)
            same_pid_jobs(exe, d, ns, failures)
        else:
            print("note: no pid namespaces here (unshare failed); the same-pid cases are skipped")
        shutil.rmtree(os.path.join(d, "links"), ignore_errors=True)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("saves and traces never write through, replace or share what they find at a name")


if __name__ == "__main__":
    main()
