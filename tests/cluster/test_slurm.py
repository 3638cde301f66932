#!/usr/bin/env python3
"""shdc programs under Slurm (issue 18, item 2; docs/cluster.md).

A one-node cluster (munged, slurmctld, slurmd) in a temporary directory
(tests/cluster/clusterlib.py), stopped by pid at the end. On it:

- sbatch dsl-examples/cluster/matmul.sbatch (mpirun in a batch job): the
  sharded matmul's arrays equal the same mesh's mpirun run bitwise and the
  one-device build's;
- srun --mpi=pmix -n 2 --cpu-bind=cores: the DP MLP's losses and weights
  equal the one-device build's, each task bound to a core of its own (the
  masks Slurm reports);
- srun -n 3 for a program built for 2 ranks: rank 0 says so, every task
  exits 1;
- the time limit (--time=1): with train_srun.sbatch, Slurm's SIGTERM
  reaches every task, dsl-examples/mlp_ckpt.shd saves the checkpoint of the
  step all ranks stopped after and the job ends TIMEOUT; with
  train_mpirun.sbatch (`--signal=B:USR1@50` and a trap that passes USR1 to
  mpirun), the same checkpoint before the limit, and the job COMPLETED;
  both checkpoints resume. The test renices these jobs' processes to 19
  (scontrol listpids) so that their minute of training yields the CPU, and
  back to 0 once a job prints that it was asked to stop;
- train_gpt2.sbatch, the 2-node GPT-2 job of the doc (srun, checkpoints,
  resume), submitted with --nodes=1 --ntasks-per-node=2 on the command line
  (the cluster has one node) for a data=2 build: a first job trains 4
  steps and checkpoints, a second submission of the same script resumes and
  trains to 6, and the 6 losses of metrics.jsonl equal those of one
  uninterrupted mpirun run bitwise;
- the job scripts are docs/cluster.md's, verbatim.

Without root or the Slurm and munge packages the test is skipped.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clusterlib  # noqa: E402
from clusterlib import ROOT, Unavailable  # noqa: E402
import testlib  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "gpt2"))
import gptlib  # noqa: E402

EX = os.path.join(ROOT, "dsl-examples")
CLUSTER_EX = os.path.join(EX, "cluster")
failures = []
check = testlib.checker(failures)



def saved(d):
    return {f: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def local_run(exe, n, args, cwd):
    os.makedirs(cwd, exist_ok=True)
    rc, out, err = clusterlib.run_bounded(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), exe] + args,
                                          300, cwd=cwd)
    if rc != 0:
        sys.exit("%s at %d ranks: exit %s\n%s%s" % (exe, n, rc, out, err))
    return out


def sbatch(slurm, script, cwd):
    p = clusterlib.sh(["sbatch", "--parsable", script], env=slurm.env, cwd=cwd)
    return p.stdout.strip().split(";")[0]


def job_dir(d, name, exe, prog):
    """A submission directory holding the program as ./prog (and ckpt/)."""
    w = os.path.join(d, name)
    os.makedirs(os.path.join(w, "ckpt"))
    shutil.copy(exe, os.path.join(w, prog))
    return w


class Renice(threading.Thread):
    """Keeps the processes of the time-limit jobs at nice 19 while they
    train, so that the other checks get the CPU, and at nice 0 from the
    moment a job's output says it was asked to stop: a job starved by
    other work at its limit would miss its own deadline (the checkpoint
    and the exit must fit in the time before the limit or KillWait)."""

    def __init__(self, slurm, jobs):
        super().__init__(daemon=True)
        self.slurm, self.jobs, self.done = slurm, jobs, threading.Event()

    def run(self):
        while not self.done.wait(0.5):
            for j, w in self.jobs:
                try:
                    with open(os.path.join(w, "slurm-%s.out" % j)) as f:
                        stopping = "stop requested" in f.read()
                except OSError:
                    stopping = False
                p = clusterlib.sh(["scontrol", "listpids", j], check=False, env=self.slurm.env)
                for pid in re.findall(r"^(\d+)\s", p.stdout, re.M):
                    try:
                        os.setpriority(os.PRIO_PROCESS, int(pid), 0 if stopping else 19)
                    except OSError:
                        pass


def metrics_losses(path):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def check_gpt2_job(slurm, shdc, d):
    """train_gpt2.sbatch on one node: a job, a second one that resumes, and
    the losses of one uninterrupted run."""
    cfg = dict(gptlib.TINY, T=16, C=32, NH=4)       # tests/gpt2/test_data_gen.py's build: one cache entry
    try:
        exe = gptlib.build(shdc, gptlib.GPT2, {"data": 2, "model": 1}, os.path.join(d, "gpt2_2"), cfg, "-O1")
    except gptlib.Failure as e:
        return check(False, "gpt2 for train_gpt2.sbatch: %s" % e)
    data = ["--data=" + gptlib.corpus(os.path.join(d, "train.npy"), 20000),
            "--val=" + gptlib.corpus(os.path.join(d, "val.npy"), 4000)]
    w = job_dir(d, "gpt2_sbatch", exe, "train")
    os.rmdir(os.path.join(w, "ckpt"))
    for steps in (4, 6):
        p = clusterlib.sh(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2",
                           "--export=ALL,STEPS=%d,SAVE_EVERY=2" % steps, os.path.join(CLUSTER_EX, "train_gpt2.sbatch")]
                          + data, env=slurm.env, cwd=w)
        jid = p.stdout.strip().split(";")[0]
        state = slurm.wait_job(jid, 240)
        out_path = os.path.join(w, "slurm-%s.out" % jid)
        out = open(out_path).read() if os.path.exists(out_path) else ""
        if not check(state == "COMPLETED", "train_gpt2.sbatch (STEPS=%d): job %s\n%s%s" % (steps, state, out[-3000:],
                                                                                         slurm.logs())):
            return
        step = np.load(os.path.join(w, "ckpt", "step.npy"))
        if not check(int(step) == steps, "train_gpt2.sbatch (STEPS=%d): ckpt/step.npy says %s" % (steps, step)):
            return
    got = metrics_losses(os.path.join(w, "metrics.jsonl"))
    local_run(exe, 2, data + ["--steps=6", "--metrics=m.jsonl"], os.path.join(d, "gpt2_local"))
    want = metrics_losses(os.path.join(d, "gpt2_local", "m.jsonl"))
    check(sorted(got) == list(range(1, 7)) and got == want,
          "train_gpt2.sbatch, a job and its resumption: losses %s, one run %s" % (got, want))
    print("train_gpt2.sbatch: a job of 4 steps, a second that resumed from its checkpoint to 6; their losses equal "
          "one uninterrupted run's bitwise")


def limit_jobs(slurm, exe, d):
    """The two time-limit jobs; they run while the other checks do."""
    jobs = {}
    for kind in ("srun", "mpirun"):
        w = job_dir(d, "limit_" + kind, exe, "mlp_ckpt")
        jobs[kind] = (sbatch(slurm, os.path.join(CLUSTER_EX, "train_%s.sbatch" % kind), w), w)
    return jobs


def check_limit(slurm, exe, kind, job, d):
    jobid, w = job
    ck, out_path = os.path.join(w, "ckpt"), os.path.join(w, "slurm-%s.out" % jobid)
    state = slurm.wait_job(jobid, 240)
    want = "TIMEOUT" if kind == "srun" else "COMPLETED"
    out = open(out_path).read() if os.path.exists(out_path) else ""
    if not check(state == want, "time limit with %s: job state %s, expected %s\n%s%s" % (kind, state, want, out[-3000:],
                                                                                        slurm.logs())):
        return
    m = re.findall(r"^stop requested after step (\d+)$", out, re.M)
    if not check(len(m) == 1, "time limit with %s: %d stops in the output:\n%s" % (kind, len(m), out[-3000:])):
        return
    k = int(m[0])
    steps = [int(s) for s in re.findall(r"^step (\d+) loss", out, re.M)]
    check(steps and max(steps) == k, "time limit with %s: a step after the stop ran (%s)" % (kind, steps[-3:]))
    check(re.search(r"^saved ckpt step %d$" % (k + 1), out, re.M) is not None,
          "time limit with %s: no checkpoint of step %d:\n%s" % (kind, k + 1, out[-2000:]))
    step = np.load(os.path.join(ck, "step.npy"))
    check(int(step) == k + 1 and sorted(os.listdir(ck)) == ["step.npy", "w1.npy", "w2.npy"],
          "time limit with %s: the checkpoint holds %s, step %r" % (kind, sorted(os.listdir(ck)), step))
    signal_name = "SIGTERM" if kind == "srun" else "SIGUSR1"
    check("stop requested (%s)" % signal_name in out, "time limit with %s: no %s on rank 0:\n%s"
          % (kind, signal_name, out[-2000:]))
    resumed = local_run(exe, 2, ["--steps=%d" % (k + 3), "--resume=" + ck], os.path.join(d, "resume_" + kind))
    check(sorted(int(s) for s in re.findall(r"^step (\d+) loss", resumed, re.M)) == [k + 1, k + 2],
          "resuming the %s checkpoint:\n%s" % (kind, resumed))
    print("time limit, %s: every rank stopped after step %d on %s, checkpoint complete, job %s, resumed; the "
          "job's output ends:\n  %s" % (kind, k, signal_name, state, "\n  ".join(out.strip().split("\n")[-4:])))


def main():
    shdc = testlib.shdc_option()
    clusterlib.on_signals()
    with tempfile.TemporaryDirectory(prefix="shd-slurm-") as d:
        ckpt = testlib.build(shdc, os.path.join(EX, "mlp_ckpt.shd"), os.path.join(d, "mlp_ckpt"), "--mesh",
                             "data=2,model=1")
        mm = testlib.build(shdc, os.path.join(EX, "matmul.shd"), os.path.join(d, "mm_2"), "--mesh", "X=2,Y=1")
        mm1 = testlib.build(shdc, os.path.join(EX, "matmul.shd"), os.path.join(d, "mm_1"), "--mesh", "X=1,Y=1")
        dp = testlib.build(shdc, os.path.join(EX, "mlp_dp.shd"), os.path.join(d, "dp_2"), "--mesh", "data=2",
                           "-D", "B=512", "-D", "F=256")
        dp1 = testlib.build(shdc, os.path.join(EX, "mlp_dp.shd"), os.path.join(d, "dp_1"), "--mesh", "data=1",
                            "-D", "B=512", "-D", "F=256")
        try:
            slurm = clusterlib.Slurm(os.cpu_count() or 1)
            slurm.__enter__()
        except Unavailable as e:
            testlib.skip("cannot start a Slurm cluster: %s" % e)
        try:
            jobs = limit_jobs(slurm, ckpt, d)
            renice = Renice(slurm, list(jobs.values()))
            renice.start()
            t0 = time.time()

            # The job scripts are the documentation's.
            doc = open(os.path.join(ROOT, "docs", "cluster.md")).read()
            for f in sorted(os.listdir(CLUSTER_EX)):
                check(open(os.path.join(CLUSTER_EX, f)).read() in doc, "docs/cluster.md does not show %s verbatim" % f)

            # sbatch + mpirun: the matmul.
            run = job_dir(d, "mm_sbatch", mm, "matmul")
            jid = sbatch(slurm, os.path.join(CLUSTER_EX, "matmul.sbatch"), run)
            state = slurm.wait_job(jid, 180)
            out_path = os.path.join(run, "slurm-%s.out" % jid)
            if check(state == "COMPLETED", "sbatch + mpirun: job %s\n%s%s" % (
                    state, open(out_path).read() if os.path.exists(out_path) else "", slurm.logs())):
                got, shm = saved(run), None
                local_run(mm, 2, [], os.path.join(d, "mm_shm"))
                local_run(mm1, 1, [], os.path.join(d, "mm_one"))
                shm, one = saved(os.path.join(d, "mm_shm")), saved(os.path.join(d, "mm_one"))
                check(sorted(got) == sorted(one) and len(got) == 5, "sbatch + mpirun saved %s" % sorted(got))
                for f in one:
                    check(f in got and got[f].tobytes() == shm[f].tobytes(), "sbatch: %s differs from mpirun's" % f)
                    check(f in got and np.allclose(got[f], one[f], rtol=1e-4, atol=1e-4),
                          "sbatch: %s differs from the one-device build's" % f)
                print("sbatch + mpirun: the matmul's arrays equal mpirun's bitwise and the one-device build's")

            check_gpt2_job(slurm, shdc, d)

            # srun --mpi=pmix, bound to cores: the DP MLP.
            run = os.path.join(d, "dp_srun")
            os.makedirs(run)
            rc, out, err = clusterlib.run_bounded(["srun", "--mpi=pmix", "-n", "2", "--cpu-bind=cores,verbose", dp,
                                                   "--steps=2"], 180, cwd=run, env=slurm.env)
            one_out = local_run(dp1, 1, ["--steps=2"], os.path.join(d, "dp_one"))
            if check(rc == 0, "srun --mpi=pmix: exit %s\n%s%s" % (rc, out, err)):
                a = [float(x) for x in re.findall(r"loss (\S+)", out)]
                b = [float(x) for x in re.findall(r"loss (\S+)", one_out)]
                check(len(a) == 2 and len(b) == 2 and all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(a, b)),
                      "srun: losses %s, one device %s" % (a, b))
                one = saved(os.path.join(d, "dp_one"))
                got = saved(run)
                check(sorted(got) == sorted(one) and all(np.allclose(got[f], one[f], rtol=1e-4, atol=1e-5)
                                                         for f in one), "srun: the weights differ")
                masks = re.findall(r"task\s+(\d+)\s+\d+ \[\d+\]: mask (0x[0-9a-f]+) set", err)
                cpus = [bin(int(m, 16)).count("1") for _, m in masks]
                check(len(masks) == 2 and cpus == [1, 1] and masks[0][1] != masks[1][1],
                      "srun --cpu-bind=cores: each task on a core of its own, Slurm says %s\n%s" % (masks, err))
                print("srun --mpi=pmix --cpu-bind=cores: losses and weights equal the one-device build's; tasks "
                      "bound to %s" % [m for _, m in masks])

            # The wrong number of tasks.
            rc, out, err = clusterlib.run_bounded(["srun", "--mpi=pmix", "--overcommit", "-n", "3", dp, "--steps=1"], 120,
                                                  cwd=d, env=slurm.env)
            check(rc not in (None, 0) and err.count("was built for mesh {data: 2} (2 ranks) but was started with 3 "
                                                    "ranks") == 1,
                  "srun -n 3 of a 2-rank program: exit %s\n%s%s" % (rc, out, err))

            for kind in ("srun", "mpirun"):
                check_limit(slurm, ckpt, kind, jobs[kind], d)
            renice.done.set()
            print("the time-limit jobs ended %.0fs after the checks began" % (time.time() - t0))
        finally:
            pids = [slurm.pid(n) for n in slurm.started]
            slurm.close()
            alive = [p for p in pids if p and clusterlib.pid_alive(p)]
            check(not alive, "daemons still running after the stop: %s" % alive)
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
