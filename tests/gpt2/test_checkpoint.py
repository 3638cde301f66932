#!/usr/bin/env python3
"""Issue 9 item 3, issue 17 item 3, issue 14: checkpoints of the GPT-2
programs.

- --save=DIR --save-every=K writes, after every K-th step and the last
  (--save=DIR alone: the last, issue 27), the parameters
  and both AdamW moments as one struct, State(p, m, v), to the directory
  DIR/step_STEP (one .npy per leaf, named by its path: p.d.wte.npy,
  m.n.h.ln1w.npy, ...; the global arrays, the same whatever the mesh),
  replaced as a whole (language.md §9.5), with manifest.json (the program,
  the shdc that built it, the mesh, the consts, every argument, the step
  and its loss), then DIR/step.npy (i32: the steps done) last, no
  temporary left behind;
- DIR is created (with its parents) before the first step, and a DIR that
  cannot be a writable directory stops every rank before any step runs;
- --keep=N leaves the N newest step directories and nothing else of them;
- --resume=DIR with --steps at or below the checkpoint's step says so and
  trains nothing;
- --resume=DIR on the same mesh continues with bitwise the same losses,
  parameters and moments as an uninterrupted run (data parallel, and the
  2-D layout);
- a checkpoint written on one mesh resumes on another (and between
  gpt2.shd and gpt2_fsdp.shd) with the same losses within f32 tolerance;
- a resumed run says where from: "resumed from DIR/step_000003 at step 3";
- a missing or empty --resume directory stops every rank, naming the
  directory as missing or empty."""
import argparse
import json
import os
import re
import sys
import tempfile

import numpy as np

import gptlib
from gptlib import TINY, Failure

NAMES = gptlib.ref_torch.NAMES


def check_files(ck, step, mesh, args, dtype="f32"):
    """dtype: the program's dtype const DT as its manifest records it (None:
    the program has none, as gpt2_fsdp.shd)."""
    C, L = TINY["C"], TINY["L"]
    shapes = gptlib.ref_torch.shapes(TINY["V"], TINY["T"], L, C)
    sd = gptlib.state_dir(ck, step)
    for part in ("p", "m", "v"):
        params = gptlib.checkpoint(ck, step, part)
        for name in NAMES:
            a = params[name]
            if a.dtype != np.float32 or a.shape != shapes[name]:
                raise Failure("%s %s of step %d: %s %s, expected f32 %s" % (part, name, step, a.dtype, a.shape,
                                                                         shapes[name]))
    leaves = sorted(f for f in os.listdir(sd) if f != "manifest.json" and f != ".shd-checkpoint")
    if len(leaves) != 3 * len(NAMES):
        raise Failure("%s holds %s" % (sd, leaves))
    s = np.load(os.path.join(ck, "step.npy"))
    if s.dtype != np.int32 or s.shape != () or int(s) != step:
        raise Failure("step.npy holds %r (%s %s), expected the i32 %d" % (s, s.dtype, s.shape, step))
    with open(os.path.join(sd, "manifest.json")) as f:
        m = json.load(f)
    shdc = m.get("shdc", "")
    want = {"ranks": mesh["data"] * mesh["model"], "mesh": mesh, "step": step,
            "config": dict(TINY, HS=TINY["C"] // TINY["NH"], C3=3 * C, C4=4 * C, T1=TINY["T"] + 1)}
    if dtype:
        want["config"]["DT"] = dtype
    if any(m.get(k) != v for k, v in want.items()) or not re.match(r"shdc \d+\.\d+\.\d+ \(git \S+\)$", shdc) or \
            not isinstance(m.get("loss"), float) or any(m["args"].get(k) != v for k, v in args.items()):
        raise Failure("%s/manifest.json: %s, expected %s, the args %s, a loss and the shdc version" %
                      (sd, m, want, args))
    left = [f for _, ds, fs in os.walk(ck) for f in ds + fs if "tmp" in f or ".shd-save" in f]
    if left:
        raise Failure("temporary files left in the checkpoint: %s" % left)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        init = gptlib.make_init(os.path.join(d, "init"), TINY, seed=7)
        batches = gptlib.text_batches(os.path.join(d, "b.npy"), 6, TINY["B"], TINY["T"], seed=8)
        base = ["--init=" + init, "--batches=" + batches, "--lr=0.01", "--wd=0.1"]
        exes = {}

        def exe(src, dm, mm):
            key = (src, dm, mm)
            if key not in exes:
                exes[key] = gptlib.build(a.shdc, src, {"data": dm, "model": mm},
                                         os.path.join(d, "%s_%d_%d" % (os.path.basename(src)[:-4], dm, mm)))
            return exes[key]

        def ckdir(name):   # --save creates it, with its parents
            return os.path.join(d, "runs", name)

        wholes = {}
        for dm, mm in ((2, 1), (2, 2)):
            ckw, ck, ckr = ckdir("w_%d_%d" % (dm, mm)), ckdir("ck_%d_%d" % (dm, mm)), ckdir("r_%d_%d" % (dm, mm))
            prog = exe(gptlib.GPT2, dm, mm)
            whole = gptlib.run(prog, dm * mm, base + ["--steps=6", "--save=" + ckw, "--save-every=6"], cwd=d)
            wholes[dm, mm] = whole
            gptlib.run(prog, dm * mm, base + ["--steps=3", "--save=" + ck], cwd=d)   # the final state alone
            check_files(ck, 3, {"data": dm, "model": mm}, {"steps": 3, "save": ck, "save-every": 0, "lr": 0.01,
                                                          "resume": ""})
            again = gptlib.run(prog, dm * mm, base + ["--steps=6", "--resume=" + ck, "--save=" + ckr, "--save-every=6"],
                               cwd=d)
            w, g = gptlib.loss_text(whole), gptlib.loss_text(again)
            if sorted(g) != [3, 4, 5] or any(g[s] != w[s] for s in g):
                raise Failure("resumed at data=%d,model=%d: %s, uninterrupted %s" % (dm, mm, g, w))
            for part in ("p", "m", "v"):
                xs, ys = gptlib.checkpoint(ckw, 6, part), gptlib.checkpoint(ckr, 6, part)
                for f in NAMES:
                    x, y = xs[f], ys[f]
                    if x.tobytes() != y.tobytes():
                        raise Failure("resumed at data=%d,model=%d: %s %s after step 6 differs from the "
                                      "uninterrupted run's (max %g)" % (dm, mm, part, f, float(np.abs(x - y).max())))
            print("resume on the same mesh (data=%d,model=%d): losses of steps 3-5 and every parameter and moment "
                  "after step 6 bitwise equal" % (dm, mm))
        whole = wholes[2, 1]
        want = gptlib.losses(whole)
        ck = ckdir("ck_2_1")
        for src, dm, mm in ((gptlib.GPT2, 1, 1), (gptlib.GPT2, 1, 4), (gptlib.FSDP, 2, 2), (gptlib.FSDP, 4, 1)):
            out = gptlib.run(exe(src, dm, mm), dm * mm, base + ["--steps=6", "--resume=" + ck], cwd=d)
            said = r"^resumed from %s/step_000003 at step 3$" % re.escape(ck)
            if not re.search(said, out.stdout, re.M):
                raise Failure("resumed by %s: no line /%s/:\n%s" % (os.path.basename(src), said, out.stdout))
            gptlib.compare("written at data=2,model=1, resumed by %s at data=%d,model=%d" %
                           (os.path.basename(src), dm, mm), gptlib.losses(out), {s: want[s] for s in (3, 4, 5)})
            print("checkpoint of gpt2.shd at data=2 resumed by %s at data=%d,model=%d" %
                  (os.path.basename(src), dm, mm))
        fck = ckdir("ck_fsdp")
        gptlib.run(exe(gptlib.FSDP, 4, 1), 4, base + ["--steps=3", "--save=" + fck, "--save-every=3"], cwd=d)
        check_files(fck, 3, {"data": 4, "model": 1}, {"steps": 3}, dtype=None)
        out = gptlib.run(exe(gptlib.GPT2, 1, 1), 1, base + ["--steps=6", "--resume=" + fck], cwd=d)
        gptlib.compare("written by gpt2_fsdp.shd at data=4, resumed by gpt2.shd on one device", gptlib.losses(out),
                       {s: want[s] for s in (3, 4, 5)})
        print("checkpoint of gpt2_fsdp.shd at data=4 resumed by gpt2.shd on one device")
        prog = exe(gptlib.GPT2, 2, 1)
        os.mkdir(os.path.join(d, "empty"))
        for name, said in (("none", "does not exist"), ("empty", "is empty")):
            where = os.path.join(d, name)
            p = gptlib.run(prog, 2, base + ["--steps=6", "--resume=" + where], cwd=d, check=False)
            if p.returncode == 0 or not re.search(r"rank \d+: .*step\.npy.*the directory %s %s" % (re.escape(where), said),
                                                  p.stderr):
                raise Failure("--resume=%s: exit %d, expected 'the directory %s %s'\n%s%s" % (
                    name, p.returncode, where, said, p.stdout, p.stderr))
        # keep the newest 2 of the checkpoints of steps 1..5
        kk = ckdir("keep")
        gptlib.run(prog, 2, base + ["--steps=5", "--save=" + kk, "--save-every=1", "--keep=2"], cwd=d)
        if sorted(os.listdir(kk)) != [".shd-checkpoint", "step.npy", "step_000004", "step_000005"]:
            raise Failure("--keep=2 after 5 checkpoints left %s" % sorted(os.listdir(kk)))
        print("--keep=2: the two newest step directories are left")
        # at or past --steps: said, and nothing trained
        for steps in (3, 2):
            p = gptlib.run(prog, 2, base + ["--steps=%d" % steps, "--resume=" + ck], cwd=d)
            if not re.search(r"^resumed from %s at step 3, at or past --steps=%d: nothing to train" % (re.escape(ck),
                             steps), p.stdout, re.M) or gptlib.losses(p):
                raise Failure("--resume at step 3 with --steps=%d: %s%s" % (steps, p.stdout, p.stderr))
        print("resuming at or past --steps says so and trains nothing")
        # a --save that cannot be a writable directory stops before the first step
        blocker = os.path.join(d, "a_file")
        open(blocker, "w").close()
        for bad, cause in ((blocker, "exists and is not a directory"),
                           (os.path.join(blocker, "sub"), "cannot create the directory")):
            p = gptlib.run(prog, 2, base + ["--steps=2", "--save=" + bad, "--save-every=1"], cwd=d, check=False)
            if p.returncode == 0 or not re.search(r"rank \d+: line \d+: mkdir\(\"%s\"\): .*%s" % (re.escape(bad), cause),
                                                  p.stderr) or "step 1/" in p.stdout or gptlib.losses(p):
                raise Failure("--save=%s: exit %d, expected a stop before the first step naming %r:\n%s%s" %
                              (bad, p.returncode, cause, p.stdout, p.stderr))
        print("a --save that cannot be a writable directory stops every rank before the first step")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
