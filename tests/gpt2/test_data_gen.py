#!/usr/bin/env python3
"""Issue 9 items 4 and 5: training on a token file and generating text.

On a small English corpus in make data's format (i32 byte tokens; the
program reads the files' lengths with load_dim, so it is built for no
length):
- each step reads B random windows of T+1 tokens (counter-based: the same
  on every mesh, so data=2, one device and model=2 print the same losses),
  the validation loss on fixed windows every --val-every steps, and both
  fall over 300 steps;
- after training, --gen=N continues a prompt: at --temperature=0 by argmax
  (a model trained on the corpus writes its words), at temperature 1 by
  sampling with the counter-based RNG (the same text for the same --seed,
  another for another seed);
- a token file shorter than one window stops every rank."""
import argparse
import os
import re
import sys
import tempfile

import gptlib
from gptlib import Failure

CFG = dict(gptlib.TINY, T=16, C=32, NH=4)
NTRAIN, NVAL = 20000, 4000


def text_of(out):
    lines = re.findall(r"^text: ?(.*)$", out, re.M)
    if not re.search(r"^prompt: ", out, re.M) or not lines:
        raise Failure("no prompt and text lines in:\n%s" % out)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        train = gptlib.corpus(os.path.join(d, "train.npy"), NTRAIN)
        val = gptlib.corpus(os.path.join(d, "val.npy"), NVAL)
        data = ["--data=" + train, "--val=" + val, "--val-batches=2"]
        exes = {}
        for dm, mm in ((2, 1), (1, 1), (1, 2)):
            exes[dm, mm] = gptlib.build(a.shdc, gptlib.GPT2, {"data": dm, "model": mm},
                                        os.path.join(d, "g%d%d" % (dm, mm)), CFG, "-O1" if dm == 2 else "-O0")
        first = None
        for (dm, mm), exe in exes.items():
            p = gptlib.run(exe, dm * mm, data + ["--steps=20", "--lr=0.003", "--val-every=10"], cwd=d)
            tr, va = gptlib.losses(p), gptlib.losses(p, "val")
            lines = re.findall(r"^step \d+/20 \| loss \d+\.\d{3}$", p.stdout, re.M)
            if len(tr) != 20 or sorted(va) != [9, 19] or len(lines) != 20:
                raise Failure("expected 20 steps and validation after steps 10 and 20:\n%s" % p.stdout)
            if first is None:
                first = (tr, va)
            gptlib.compare("random windows at data=%d,model=%d" % (dm, mm), tr, first[0])
            gptlib.compare("validation at data=%d,model=%d" % (dm, mm), va, first[1])
        print("the random windows and the validation windows give the same losses at data=2, on one device and at "
              "model=2")
        p = gptlib.run(exes[2, 1], 2, data + ["--steps=300", "--lr=0.003", "--val-every=100", "--gen=48",
                                              "--temperature=0"], cwd=d)
        out = p.stdout
        tr, va = gptlib.losses(p), gptlib.losses(p, "val")
        if not (sum(tr[s] for s in range(290, 300)) / 10 < tr[0] - 3.0 and va[299] < va[199] < va[99]):
            raise Failure("the losses do not fall: train %s, validation %s" % (tr, va))
        text = text_of(out)
        words = set(re.findall(r"[a-z]+", gptlib.TEXT))
        if not any(w in words for w in re.findall(r"[a-z]{3,}", text)):
            raise Failure("the trained model writes no word of its corpus: %r" % text)
        print("300 steps: train loss %.3f -> %.3f, validation %.3f -> %.3f; argmax continuation: %r" %
              (tr[0], tr[299], va[99], va[299], text))
        exe = exes[2, 1]
        sample = ["--data=" + train, "--val=" + val, "--steps=20", "--lr=0.01", "--gen=64", "--temperature=1.0"]
        s1 = text_of(gptlib.run(exe, 2, sample + ["--seed=1"], cwd=d).stdout)
        s1b = text_of(gptlib.run(exe, 2, sample + ["--seed=1"], cwd=d).stdout)
        s2 = text_of(gptlib.run(exe, 2, sample + ["--seed=2"], cwd=d).stdout)
        if s1 != s1b or s1 == s2 or len(s1) < 20:
            raise Failure("sampling: seed 1 gave %r and %r, seed 2 %r" % (s1, s1b, s2))
        print("sampling at temperature 1: the same text for the same seed, another for another seed")
        short = gptlib.corpus(os.path.join(d, "short.npy"), CFG["T"])   # one token less than a window
        p = gptlib.run(exe, 2, ["--data=" + short, "--val=" + val, "--steps=2"], cwd=d, check=False)
        if p.returncode == 0 or not re.search(r"rank \d+: line \d+: load\(\".*short\.npy\"\): the window", p.stderr):
            raise Failure("a token file too short for the windows: exit %d\n%s" % (p.returncode, p.stderr))
        print("a token file shorter than a window stops every rank: %s" % p.stderr.strip().splitlines()[0])


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        sys.exit(str(e))
