#!/usr/bin/env python3
"""A job asked to stop (issue 18, item 2): dsl-examples/mlp_ckpt.shd calls
stop_requested() after every step and writes a checkpoint when it is true.
At 2 ranks under mpirun, while it trains:

- SIGTERM to mpirun (what it gets from a scheduler, Ctrl-C, or Slurm's
  time limit on the batch step): mpirun sends SIGTERM to the ranks (and
  SIGKILL odls_base_sigkill_timeout seconds later: 1 by default, 5 here),
  every rank leaves the loop after the same step, the checkpoint of that
  step is complete (step.npy written last, no temporaries), every process
  exits;
- SIGUSR1 to mpirun (which forwards it; Slurm's --signal=USR1@T): the
  same, and mpirun exits 0;
- SIGTERM to each rank itself (what srun's tasks get): the same, exit 0;
- the checkpoint resumes: the resumed run's losses and final weights equal
  an uninterrupted run's bitwise on the same mesh, and the one-device
  run's within f32 tolerance;
- a program that does not call stop_requested (mlp_dp.shd) still ends at
  once on SIGTERM.
Every run is bounded in time; a run that overstays is killed with its
process group and fails the test.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

SRC = os.path.join(ROOT, "dsl-examples", "mlp_ckpt.shd")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OPENBLAS_NUM_THREADS="1")
failures = []
check = testlib.checker(failures)



class Job:
    """mpirun in its own process group. Each rank writes its stdout and
    stderr straight to files (RANKFILES.out.R, .err.R): mpirun forwards the
    ranks' output through its daemon, and once it is told to stop it may
    close that path before the ranks print their last lines, so what a rank
    printed after the signal is read from its own files."""

    def __init__(self, exe, n, args, cwd, mpirun=(), name="job"):
        self.base = os.path.join(cwd, name)
        wrap = ["sh", "-c", 'exec "$0" "$@" >"%s.out.$OMPI_COMM_WORLD_RANK" 2>"%s.err.$OMPI_COMM_WORLD_RANK"'
                % (self.base, self.base)]
        self.n = n
        self.p = subprocess.Popen(MPIRUN + list(mpirun) + ["-np", str(n)] + wrap + [exe] + args, cwd=cwd,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                                  start_new_session=True)
        self.launcher = []
        threading.Thread(target=lambda: self.launcher.extend(self.p.stdout), daemon=True).start()

    def _read(self, kind, rank=0):
        try:
            with open("%s.%s.%d" % (self.base, kind, rank)) as f:
                return f.read()
        except OSError:
            return ""

    def wait_line(self, pattern, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self._read("out"), re.M):
                return True
            if self.p.poll() is not None:
                return bool(re.search(pattern, self._read("out"), re.M))
            time.sleep(0.02)
        return False

    def ranks(self):
        """The rank processes: mpirun's children (sh exec'd the program)."""
        try:
            with open("/proc/%d/task/%d/children" % (self.p.pid, self.p.pid)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def finish(self, timeout=120):
        """mpirun's exit status (None: killed after timeout), rank 0's
        stdout, and every rank's stderr with mpirun's own output."""
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            rc = None
        time.sleep(0.2)
        err = "".join(self._read("err", r) for r in range(self.n)) + "".join(self.launcher)
        return rc, self._read("out"), err


def losses(out):
    return {int(s): x for s, x in re.findall(r"^step (\d+) loss (\S+)$", out, re.M)}


def stop_run(exe, d, name, send, mpirun=()):
    """Trains at 2 ranks until step 2 is printed, sends the signal(s), and
    checks the stop; returns the step of the checkpoint (None on failure)."""
    ck = os.path.join(d, name)
    os.makedirs(ck)
    job = Job(exe, 2, ["--steps=1000000", "--save=" + ck], d, mpirun, name)
    if not check(job.wait_line(r"^step 2 loss"), "%s: no step 2 in the output" % name):
        job.finish(5)
        return None, ck
    send(job)
    rc, out, err = job.finish()
    m = re.findall(r"^stop requested after step (\d+)$", out, re.M)
    if not check(rc is not None, "%s: still running two minutes after the signal" % name):
        return None, ck
    if not check(len(m) == 1 and re.search(r"^saved %s step %d$" % (re.escape(ck), int(m[0]) + 1), out, re.M),
                 "%s: exit %s, no single stop and checkpoint:\n%s%s" % (name, rc, out[-2000:], err[-2000:])):
        return None, ck
    k = int(m[0])
    check(max(losses(out)) == k, "%s: a step after the stop ran:\n%s" % (name, out[-1000:]))
    check(": rank 0: stop requested (" in err, "%s: no message on rank 0:\n%s" % (name, err))
    step = np.load(os.path.join(ck, "step.npy"))
    check(step.dtype == np.int32 and int(step) == k + 1, "%s: step.npy holds %r" % (name, step))
    check(sorted(os.listdir(ck)) == ["step.npy", "w1.npy", "w2.npy"], "%s: the checkpoint holds %s"
          % (name, os.listdir(ck)))
    return (k, rc), ck


def main():
    exe = testlib.shdc_option()
    with tempfile.TemporaryDirectory() as d:
        p2 = testlib.build(exe, SRC, os.path.join(d, "ckpt_2"), "--mesh", "data=2,model=1")
        p1 = testlib.build(exe, SRC, os.path.join(d, "ckpt_1"), "--mesh", "data=1,model=1")

        r, ck = stop_run(p2, d, "term_mpirun", lambda j: j.p.send_signal(signal.SIGTERM),
                         ["--mca", "odls_base_sigkill_timeout", "5"])
        if r:
            print("SIGTERM to mpirun: every rank stopped after step %d with a checkpoint (mpirun exit %s)" % r)
        r2, _ = stop_run(p2, d, "usr1_mpirun", lambda j: j.p.send_signal(signal.SIGUSR1))
        if r2 and check(r2[1] == 0, "SIGUSR1: mpirun exit %s" % r2[1]):
            print("SIGUSR1 to mpirun (forwarded): stopped after step %d, exit 0" % r2[0])

        def term_ranks(j):
            pids = j.ranks()
            check(len(pids) == 2, "mpirun's children: %s" % pids)
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
        r3, _ = stop_run(p2, d, "term_ranks", term_ranks)
        if r3 and check(r3[1] == 0, "SIGTERM to the ranks: mpirun exit %s" % r3[1]):
            print("SIGTERM to each rank (as srun's tasks get it): stopped after step %d, exit 0" % r3[0])

        # Resume the first checkpoint for 3 more steps; uninterrupted runs to the same step.
        if r:
            k = r[0]
            total = str(k + 4)
            ckr = os.path.join(d, "resumed")
            os.makedirs(ckr)
            res = subprocess.run(MPIRUN + ["-np", "2", p2, "--steps=" + total, "--resume=" + ck, "--save=" + ckr],
                                 cwd=d, capture_output=True, text=True, timeout=300, env=ENV)
            whole = {}
            for n, prog in ((2, p2), (1, p1)):
                ckw = os.path.join(d, "whole_%d" % n)
                os.makedirs(ckw)
                q = subprocess.run(MPIRUN + ["-np", str(n), prog, "--steps=" + total, "--save=" + ckw], cwd=d,
                                   capture_output=True, text=True, timeout=300, env=ENV)
                check(q.returncode == 0, "uninterrupted run at %d ranks: exit %d\n%s" % (n, q.returncode, q.stderr))
                whole[n] = (losses(q.stdout), ckw)
            got = losses(res.stdout)
            if check(res.returncode == 0 and sorted(got) == list(range(k + 1, k + 4)),
                     "resume: exit %d, steps %s\n%s%s" % (res.returncode, sorted(got), res.stdout, res.stderr)):
                check(all(got[s] == whole[2][0][s] for s in got), "resumed losses %s differ from the uninterrupted "
                      "run's %s" % (got, {s: whole[2][0][s] for s in got}))
                for f in ("w1.npy", "w2.npy"):
                    a, b, c = (np.load(os.path.join(x, f)) for x in (ckr, whole[2][1], whole[1][1]))
                    check(a.tobytes() == b.tobytes(), "resumed %s differs from the uninterrupted run's" % f)
                    check(np.allclose(a, c, rtol=1e-4, atol=1e-5), "resumed %s differs from the one-device run's "
                          "(max %g)" % (f, float(np.abs(a - c).max())))
                one = whole[1][0]
                check(all(abs(float(got[s]) - float(one[s])) <= 1e-4 * abs(float(one[s])) + 1e-5 for s in got),
                      "resumed losses differ from the one-device run's")
                print("resumed from step %d: losses and weights bitwise equal to the uninterrupted run's, and the "
                      "one-device run's within f32 tolerance" % (k + 1))

        # Without stop_requested: SIGTERM ends the job at once.
        dp = testlib.build(exe, os.path.join(ROOT, "dsl-examples", "mlp_dp.shd"), os.path.join(d, "dp"), "--mesh",
                           "data=2", "-D", "B=256", "-D", "F=256")
        job = Job(dp, 2, ["--steps=1000000"], d, name="mlp_dp")
        if check(job.wait_line(r"^step 2 loss"), "mlp_dp: no step 2"):
            t0 = time.time()
            job.p.send_signal(signal.SIGTERM)
            rc, out, err = job.finish(60)
            check(rc not in (None, 0) and time.time() - t0 < 30, "mlp_dp after SIGTERM: exit %s after %.0fs"
                  % (rc, time.time() - t0))
            print("without stop_requested, SIGTERM ends the job (exit %s)" % rc)
        else:
            job.finish(5)
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
