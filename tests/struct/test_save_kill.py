#!/usr/bin/env python3
"""A struct save replaces its directory as a whole (language.md §9.5).

A program saves a struct of four 4 MiB leaves again and again, every leaf
of save i filled with i, over a directory first saved with -1. A rank is
killed (SIGKILL: rank 1, then rank 0) while a save's fresh directory
exists; afterwards the directory must hold one complete save: every leaf
file complete, all four holding the same i. The next save of the
directory removes what the killed one left beside it. A struct saved on 2
ranks loads on 1 (the files are global arrays), and a missing leaf, a leaf
of another shape and a path that is a file each stop every rank with the
leaf's path and the cause.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import testlib  # noqa: E402
from test_save_failures import rank_pids, stopped  # noqa: E402

MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"]
N = 1 << 20   # elements of each leaf

PROGRAM = """mesh {X: 2}
const N = %d
const N4 = N / 4
struct Inner { a: f32[N@X], b: f32[N] }
struct Ckpt { w: f32[N@X], inner: Inner, v: f32[4, N4] }
fn main() {
    let case = arg("case", 0)
    let n = arg("n", 1)
    if case == 0 {
        save("ck", full(Ckpt, -1.0))
        for i in 0..n {
            save("ck", full(Ckpt, cast(i, f32)))
        }
    }
    if case == 1 {
        let c: Ckpt = load("ck")
        print("sum", sum(c) / cast(4 * N, f32), exists("ck"), exists("ck/w.npy"), exists("nothing"))
    }
}
""" % N


def temp_dirs(d):
    return [f for f in os.listdir(d) if f.startswith(".ck.shd-save-")]


def check_whole(work, failures, how):
    """Every leaf file of ck complete and holding one and the same value."""
    import numpy as np
    values = set()
    names = sorted(os.listdir(os.path.join(work, "ck")))
    if names != [".shd-checkpoint", "inner.a.npy", "inner.b.npy", "v.npy", "w.npy"]:
        failures.append("%s: ck holds %r" % (how, names))
        return
    for name in names[1:]:   # the leaves, after the marker
        try:
            x = np.load(os.path.join(work, "ck", name))
        except Exception as e:  # noqa: BLE001 - a torn file is what this test looks for
            failures.append("%s: ck/%s does not load: %s" % (how, name, e))
            return
        if x.size != N or x.min() != x.max():
            failures.append("%s: ck/%s is not one whole save" % (how, name))
            return
        values.add(float(x.flat[0]))
    if len(values) != 1:
        failures.append("%s: ck mixes saves %r" % (how, sorted(values)))


def freeze_in_save(exe, work):
    """Stop both ranks at a moment a save's fresh directory exists."""
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.01)
        pids = rank_pids(exe)
        if len(pids) != 2 or not temp_dirs(work) or not os.path.isdir(os.path.join(work, "ck")):
            continue
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        while not all(stopped(pid) for pid in pids.values()):
            time.sleep(0.001)
        if temp_dirs(work):
            return pids
        for pid in pids.values():
            os.kill(pid, signal.SIGCONT)
    return {}


def kill_during_save(exe, d, env, victim, failures):
    how = "kill rank%d" % victim
    work = os.path.join(d, "rank%d" % victim)
    os.mkdir(work)
    p = subprocess.Popen(MPI + ["2", exe, "--n=1000"], cwd=work, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    pids = freeze_in_save(exe, work)
    if len(pids) != 2:
        failures.append("%s: no save under way to interrupt" % how)
        p.kill()
        p.communicate()
        return
    os.kill(pids[victim], signal.SIGKILL)
    for r, pid in pids.items():
        if r != victim:
            os.kill(pid, signal.SIGCONT)
    try:
        p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        failures.append("%s: the other rank did not stop" % how)
    if p.returncode == 0:
        failures.append("%s: mpirun exited 0" % how)
    check_whole(work, failures, how)
    # The next save sweeps what the killed one left beside ck.
    p = subprocess.run(MPI + ["2", exe, "--n=1"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        failures.append("%s: the next save failed:\n%s" % (how, p.stderr))
    if temp_dirs(work):
        failures.append("%s: the next save left %r" % (how, temp_dirs(work)))
    check_whole(work, failures, how + ", then saved again")


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1")
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "ck.shd"), os.path.join(d, "ck"), text=PROGRAM)
        one = testlib.build(shdc, os.path.join(d, "ck.shd"), os.path.join(d, "ck1"), "--mesh", "X=1")
        for victim in (1, 0):
            kill_during_save(exe, d, env, victim, failures)
        work = os.path.join(d, "rank1")
        p = subprocess.run(MPI + ["1", one, "--case=1"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0 or not re.search(r"^sum 0\.0 True True False$", p.stdout, re.M):
            failures.append("load on 1 rank: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        bad = [("missing leaf", lambda: os.remove(os.path.join(work, "ck", "v.npy")),
                r"load\(\"ck/v\.npy\"\): cannot open: No such file"),
               ("other shape", lambda: shutil.copy(os.path.join(work, "ck", "w.npy"), os.path.join(work, "ck", "v.npy")),
                r"load\(\"ck/v\.npy\"\): file has f32\[%d\], program expects f32\[4,%d\]" % (N, N // 4)),
               ("a file", lambda: (subprocess.run(["rm", "-r", os.path.join(work, "ck")]),
                                   open(os.path.join(work, "ck"), "w").close()),
                r"load\(\"ck/w\.npy\"\): cannot open: Not a directory")]
        for name, spoil, pattern in bad:
            spoil()
            p = subprocess.run(MPI + ["2", exe, "--case=1"], cwd=work, env=env, capture_output=True, text=True,
                               timeout=300)
            if p.returncode == 0 or not re.search(r"^ck: rank \d+: " + pattern, p.stderr, re.M):
                failures.append("%s: exit %d, expected /%s/:\n%s" % (name, p.returncode, pattern, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("a killed struct save left its directory whole; the next save swept what it left")


if __name__ == "__main__":
    main()
