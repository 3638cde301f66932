#!/usr/bin/env python3
"""Programs across hosts over TCP (issue 18, item 1; docs/cluster.md).

Hosts are network namespaces (tests/cluster/clusterlib.py): two joined by a
bridge, and four when the machine allows. mpirun starts in the first with a
hostfile naming the hosts' addresses, `--mca plm_rsh_agent` set to a script
that runs its command with `ip netns exec` in the host's namespace, TCP only
(`--mca pml ob1 --mca btl tcp,self`) on the hosts' subnet
(`btl_tcp_if_include`, `oob_tcp_if_include`). Each result must equal the
same mesh's run on one machine over shared memory bit for bit (the
collectives take the same steps whatever carries their bytes) and the
one-device build's within f32 tolerance:

- two hosts, a rank on each: the sharded matmul (every saved array), the
  DP and FSDP MLPs (losses and saved weights), and the bytes the hosts' eth0
  sent are at least the bytes `shdc explain` says the matmul's collectives
  send (so the data did cross the network);
- two hosts that do not share a file system (the second sees its own
  empty tmpfs at the run directory): a save stops every rank with the
  rank that cannot see the file and why, and leaves neither the file nor
  its temporary; a load (a checkpoint only the first host has) likewise;
  no run waits for ever in MPI-IO's collective open;
- four hosts (else two hosts with two ranks each): the matmul on a 2x2
  mesh, and GPT-2 in the 2-D layout (data=2, model=2): six steps, then
  three with a checkpoint written by ranks on different hosts, resumed on
  the hosts for three more: the resumed losses equal the uninterrupted
  run's bitwise and the one-device run's within f32 tolerance, and every
  file of the checkpoint equals the one written on one machine.

Every run is bounded in time; the namespaces are removed on every exit
path. Without the privilege to make namespaces the test is skipped.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clusterlib  # noqa: E402
from clusterlib import ROOT, Unavailable  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "gpt2"))
import gptlib  # noqa: E402
import testlib  # noqa: E402

EX = os.path.join(ROOT, "dsl-examples")
SMALL_MLP = ["-D", "B=512", "-D", "F=256"]
failures = []
check = testlib.checker(failures)



def local_run(exe, n, args, cwd, timeout=300):
    os.makedirs(cwd, exist_ok=True)
    rc, out, err = clusterlib.run_bounded(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), exe] + args,
                                          timeout, cwd=cwd)
    if rc != 0:
        sys.exit("one-device run of %s: exit %s\n%s%s" % (exe, rc, out, err))
    return out


class Metrics:
    """A run's --metrics file (JSON Lines, rank 0's), as gptlib reads losses
    from it."""
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.metrics = [json.loads(line) for line in f]


def tree(d):
    """The files under d, as sorted paths relative to it."""
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)


def saved(d):
    return {f: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def same_arrays(what, got, shm, one, tol=(1e-4, 1e-5)):
    """got (across hosts) equals shm (one machine, the same mesh) bitwise
    and one (one device) within tol."""
    if not check(sorted(got) == sorted(one) == sorted(shm), "%s: saved %s, one machine %s, one device %s"
                 % (what, sorted(got), sorted(shm), sorted(one))):
        return
    for f in one:
        check(got[f].tobytes() == shm[f].tobytes(), "%s: %s differs from the same mesh's run on one machine"
              % (what, f))
        check(got[f].shape == one[f].shape and np.allclose(got[f], one[f], rtol=tol[0], atol=tol[1]),
              "%s: %s differs from the one-device build's (max %g)" % (what, f, float(np.abs(got[f] - one[f]).max())))


def numbers(out):
    return [float(x) for x in re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", out)]


def explain_bytes(shdc, src, mesh):
    p = subprocess.run([shdc, "explain", src, "--mesh", mesh], capture_output=True, text=True, timeout=120)
    return sum(int(b) for b in re.findall(r"(\d+) bytes/rank", p.stdout))


class Cluster:
    def __init__(self, hosts, slots, d):
        self.h, self.slots, self.d = hosts, slots, d
        self.agent = hosts.write_agent(os.path.join(d, "rsh-netns"))
        self.hostfile = hosts.write_hostfile(os.path.join(d, "hosts%d" % len(hosts.names)), slots)

    def run(self, exe, n, args, cwd, what):
        os.makedirs(cwd, exist_ok=True)
        rc, out, err = self.h.mpirun(self.agent, self.hostfile, n, [exe] + args, cwd)
        check(rc == 0, "%s across %d hosts: exit %s\n%s%s" % (what, len(self.h.names), rc, out[-3000:],
                                                               err[-3000:]))
        return rc == 0, out


def matmul(shdc, cl, d, mesh, n, one):
    exe = testlib.build(shdc, os.path.join(EX, "matmul.shd"), os.path.join(d, "mm_" + mesh.replace(",", "_")),
                        "--mesh", mesh)
    shm = os.path.join(d, "mm_shm_%s_%d" % (mesh, cl.slots))
    local_run(exe, n, [], shm)
    tx0 = cl.h.tx_bytes()
    ok, out = cl.run(exe, n, [], os.path.join(d, "mm_run_%s_%d" % (mesh, cl.slots)), "matmul " + mesh)
    sent = cl.h.tx_bytes() - tx0
    if ok:
        same_arrays("matmul at %s" % mesh, saved(os.path.join(d, "mm_run_%s_%d" % (mesh, cl.slots))), saved(shm),
                    one, (1e-4, 1e-4))   # matmul.shd's TOL
        if cl.slots == 1:
            want = explain_bytes(shdc, os.path.join(EX, "matmul.shd"), mesh) * n
            check(sent >= want, "matmul at %s: the hosts sent %d bytes, explain says the collectives send %d"
                  % (mesh, sent, want))
        print("matmul at %s on %d hosts: every array equals the one-device build's; eth0 sent %d bytes"
              % (mesh, len(cl.h.names), sent))


def mlp(shdc, cl, d, name, n, one_dir, one_out):
    exe = testlib.build(shdc, os.path.join(EX, name + ".shd"), os.path.join(d, name + "_%d" % n), "--mesh",
                        "data=%d" % n, *SMALL_MLP)
    run_dir, shm = os.path.join(d, "%s_run_%d" % (name, n)), os.path.join(d, "%s_shm_%d" % (name, n))
    shm_out = local_run(exe, n, ["--steps=2"], shm)
    ok, out = cl.run(exe, n, ["--steps=2"], run_dir, name)
    if ok:
        a, b = numbers(out), numbers(one_out)
        check(out == shm_out, "%s at data=%d: printed %s, on one machine %s" % (name, n, out, shm_out))
        check(len(a) == len(b) and len(a) >= 4 and all(abs(x - y) <= 1e-4 * max(1, abs(y)) for x, y in zip(a, b)),
              "%s at data=%d: printed %s, the one-device build %s" % (name, n, out, one_out))
        same_arrays("%s at data=%d" % (name, n), saved(run_dir), saved(shm), saved(one_dir))
        print("%s at data=%d on %d hosts: losses and weights equal the one-device build's" % (name, n,
                                                                                             len(cl.h.names)))


def gpt2(shdc, cl, d):
    """The 2-D layout at data=2,model=2 with a checkpoint across the hosts."""
    g = os.path.join(d, "gpt")
    os.makedirs(g)
    init = gptlib.make_init(os.path.join(g, "init"), gptlib.TINY, seed=7)
    batches = gptlib.text_batches(os.path.join(g, "b.npy"), 6, gptlib.TINY["B"], gptlib.TINY["T"], seed=8)
    base = ["--init=" + init, "--batches=" + batches, "--lr=0.01", "--wd=0.1"]
    exe = gptlib.build(shdc, gptlib.GPT2, {"data": 2, "model": 2}, os.path.join(g, "gpt_2_2"))
    one = gptlib.build(shdc, gptlib.GPT2, {"data": 1, "model": 1}, os.path.join(g, "gpt_1_1"))
    dirs = {k: os.path.join(g, k) for k in ("ck", "ck_shm", "ck_resumed")}
    for p in dirs.values():
        os.makedirs(p)
    m = {k: os.path.join(g, k + ".jsonl") for k in ("ref", "whole", "again")}
    local_run(one, 1, base + ["--steps=6", "--metrics=" + m["ref"]], g)
    local_run(exe, 4, base + ["--steps=3", "--save=" + dirs["ck_shm"], "--save-every=3"], g)
    ok1, _ = cl.run(exe, 4, base + ["--steps=6", "--metrics=" + m["whole"]], g, "gpt2 data=2,model=2, 6 steps")
    ok2, first = cl.run(exe, 4, base + ["--steps=3", "--save=" + dirs["ck"], "--save-every=3"], g,
                        "gpt2 data=2,model=2, 3 steps and a checkpoint")
    if not (ok1 and ok2):
        return
    ok3, _ = cl.run(exe, 4, base + ["--steps=6", "--resume=" + dirs["ck"], "--save=" + dirs["ck_resumed"],
                                    "--save-every=6", "--metrics=" + m["again"]], g, "gpt2 data=2,model=2, resumed")
    if not ok3:
        return
    ref, whole, again = (Metrics(m[k]) for k in ("ref", "whole", "again"))
    w, r = gptlib.loss_text(whole), gptlib.loss_text(again)
    check(sorted(r) == [3, 4, 5] and all(r[s] == w[s] for s in r),
          "resumed across hosts: losses %s, uninterrupted %s" % (r, w))
    try:
        gptlib.compare("gpt2 across hosts against one device", gptlib.losses(whole), gptlib.losses(ref))
    except gptlib.Failure as e:
        failures.append(str(e))
    step = np.load(os.path.join(dirs["ck"], "step.npy"))
    check(int(step) == 3, "the checkpoint's step.npy holds %r" % step)
    # DIR/step.npy, and DIR/step_000003/ with every parameter and moment
    # and the manifest (which names the run's own --save and --metrics).
    files, files_shm = tree(dirs["ck"]), tree(dirs["ck_shm"])
    arrays = [f for f in files if f.endswith(".npy")]
    check(files == files_shm and len(arrays) == 3 * 16 + 1 and "step_000003/manifest.json" in files,
          "the checkpoint across hosts holds %s, on one machine %s" % (files, files_shm))
    for f in arrays:
        a, b = (open(os.path.join(x, f), "rb").read() for x in (dirs["ck"], dirs["ck_shm"]))
        check(a == b, "checkpoint file %s written across hosts differs from the one written on one machine" % f)
    if "step_000003/manifest.json" in files and "step_000003/manifest.json" in files_shm:
        a, b = (json.load(open(os.path.join(x, "step_000003", "manifest.json"))) for x in (dirs["ck"], dirs["ck_shm"]))
        same = {k: (a.get(k), b.get(k)) for k in ("step", "loss", "mesh", "config", "ranks")}
        check(all(x == y for x, y in same.values()) and a.get("step") == 3,
              "the manifests across hosts and on one machine differ: %s" % same)
    print("gpt2 data=2,model=2 on %d hosts: checkpoint written across hosts and resumed; losses bitwise equal to "
          "the uninterrupted run and equal to one device's within f32 tolerance" % len(cl.h.names))


def unshared(shdc, h, d):
    """Hosts without a shared file system: save and load fail clearly."""
    run = os.path.join(d, "unshared")
    os.makedirs(os.path.join(run, "ck"))
    agent = h.write_agent(os.path.join(d, "rsh-unshared"), private=(run, ["ck"]))
    hostfile = h.write_hostfile(os.path.join(d, "hosts-unshared"), 1)
    mm = testlib.build(shdc, os.path.join(EX, "matmul.shd"), os.path.join(d, "mm_unshared"), "--mesh", "X=2,Y=1")
    rc, out, err = h.mpirun(agent, hostfile, 2, [mm], run, timeout=120)
    left = [f for f in os.listdir(run) if f != "ck"]
    check(rc not in (None, 0) and re.search(r"^mm_unshared: rank 1: save\(\"a\.npy\"\): this rank cannot open "
                                            r"\.shd-save-[0-9a-f]+\.tmp, .*\(No such file or directory\): .*must be the same "
                                            r"on every host", err, re.M) and not left,
          "save without a shared file system: exit %s, left %s\n%s" % (rc, left, err[-3000:]))
    ck = testlib.build(shdc, os.path.join(EX, "mlp_ckpt.shd"), os.path.join(d, "ckpt_unshared"), "--mesh",
                       "data=2,model=1")
    local_run(ck, 2, ["--steps=2", "--save=" + os.path.join(run, "ck")], run)
    rc, out, err = h.mpirun(agent, hostfile, 2, [ck, "--steps=4", "--resume=" + os.path.join(run, "ck")], run,
                            timeout=120)
    check(rc not in (None, 0) and re.search(r"^ckpt_unshared: rank 1: load\(\"%s/step\.npy\"\): this rank cannot read it "
                                            r"\(No such file or directory\), rank 0 can" % re.escape(run + "/ck"), err, re.M),
          "load without a shared file system: exit %s\n%s" % (rc, err[-3000:]))
    print("no shared file system: save and load stop every rank, naming the rank and the file; nothing left behind")


def main():
    shdc = testlib.shdc_option()
    clusterlib.on_signals()
    if os.geteuid() != 0:
        testlib.skip("network namespaces need root")
    clusterlib.remove_stale_namespaces()
    with tempfile.TemporaryDirectory(prefix="shd-nodes-") as d:
        # One-device references.
        mm1 = testlib.build(shdc, os.path.join(EX, "matmul.shd"), os.path.join(d, "mm_1"), "--mesh", "X=1,Y=1")
        local_run(mm1, 1, [], os.path.join(d, "mm_one"))
        mm_one = saved(os.path.join(d, "mm_one"))
        mlps = {}
        for name in ("mlp_dp", "mlp_fsdp"):
            exe = testlib.build(shdc, os.path.join(EX, name + ".shd"), os.path.join(d, name + "_1"), "--mesh",
                                "data=1", *SMALL_MLP)
            od = os.path.join(d, name + "_one")
            mlps[name] = (od, local_run(exe, 1, ["--steps=2"], od))
        try:
            with clusterlib.NetHosts(2) as h2:
                cl = Cluster(h2, 1, d)
                matmul(shdc, cl, d, "X=2,Y=1", 2, mm_one)
                for name in ("mlp_dp", "mlp_fsdp"):
                    mlp(shdc, cl, d, name, 2, *mlps[name])
                unshared(shdc, h2, d)
        except Unavailable as e:
            testlib.skip("cannot make two hosts of network namespaces: %s" % e)
        try:
            with clusterlib.NetHosts(4) as h4:
                cl = Cluster(h4, 1, d)
                matmul(shdc, cl, d, "X=2,Y=2", 4, mm_one)
                gpt2(shdc, cl, d)
        except Unavailable as e:
            print("four hosts: unavailable (%s); the 2x2 runs on two hosts of two ranks" % e)
            with clusterlib.NetHosts(2) as h2:
                cl = Cluster(h2, 2, d)
                matmul(shdc, cl, d, "X=2,Y=2", 4, mm_one)
                gpt2(shdc, cl, d)
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
