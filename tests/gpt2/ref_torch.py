#!/usr/bin/env python3
"""An independent PyTorch GPT-2, the reference dsl-examples/gpt2.shd is
checked against step by step (issue 9 item 7).

The same model from the same weights fed the same batches:

  ref_torch.py --init=DIR --batches=FILE.npy --steps=N --lr=F --wd=F --nh=NH

DIR holds llm.c's parameter files (layers stacked first, weights [out, in]
as nn.Linear): wte [V,C] wpe [T,C] ln1w ln1b [L,C] qkvw [L,3C,C] qkvb [L,3C]
attprojw [L,C,C] attprojb [L,C] ln2w ln2b [L,C] fcw [L,4C,C] fcb [L,4C]
fcprojw [L,C,4C] fcprojb [L,C] lnfw lnfb [C], each NAME.npy; FILE is i32
[steps, B, T+1] (inputs are [:, :, :T], targets [:, :, 1:]). Each step
prints `step S loss L` (L: the batch's mean next-token cross-entropy before
the update) and then takes one AdamW step (betas 0.9, 0.999, eps 1e-8,
PyTorch's bias correction) with weight decay on the matrices and
embeddings (wte wpe qkvw attprojw fcw fcprojw) and none on biases and
LayerNorm parameters, as docs/gpt2.md states.

--autocast runs each step's forward pass (and so its backward) under
torch.autocast("cpu", dtype=torch.bfloat16): the parameters and AdamW stay
f32, the linear layers and matmuls compute in bf16 (test_mixed.py compares
gpt2.shd -D DT=bf16 with it).

Helpers for tests:
  --make-init=DIR --V --T --L --C --seed   GPT-2's initialisation into DIR
                                           (normal std 0.02, residual
                                           projections 0.02/sqrt(2L), LN
                                           weights 1, biases 0)
  --make-batches=FILE --V --B --T --steps --seed   uniform random tokens
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reflib  # noqa: E402

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
         "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(V, T, L, C):
    return {"wte": (V, C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def make_init(d, V, T, L, C, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    for name, shp in shapes(V, T, L, C).items():
        if name in ("ln1w", "ln2w", "lnfw"):
            a = np.ones(shp)
        elif name in DECAY:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            a = rng.normal(0.0, std, shp)
        else:
            a = np.zeros(shp)
        np.save(os.path.join(d, name + ".npy"), a.astype(np.float32))


def make_batches(path, V, B, T, steps, seed):
    rng = np.random.default_rng(seed)
    np.save(path, rng.integers(0, V, size=(steps, B, T + 1)).astype(np.int32))


def gpt2_loss(torch, F, p, x, y, nh):
    """Mean next-token cross-entropy of GPT-2 on inputs x [B,T], targets y."""
    Bn, Tn = x.shape
    C = p["wte"].shape[1]
    L = p["ln1w"].shape[0]
    hs = C // nh
    h = p["wte"][x] + p["wpe"][:Tn]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(L):
        a = F.layer_norm(h, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = F.linear(a, p["qkvw"][l], p["qkvb"][l])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(Bn, Tn, nh, hs).transpose(1, 2)
        k = k.view(Bn, Tn, nh, hs).transpose(1, 2)
        v = v.view(Bn, Tn, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        h = h + F.linear(o, p["attprojw"][l], p["attprojb"][l])
        a = F.layer_norm(h, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(F.linear(a, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        h = h + F.linear(f, p["fcprojw"][l], p["fcprojb"][l])
    h = F.layer_norm(h, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = h @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    p = reflib.load_params(torch, a.init, NAMES)
    batches = reflib.load_batches(a.batches, "[steps, B, T+1]")
    groups = [{"params": [p[n] for n in NAMES if n in DECAY], "weight_decay": a.wd},
              {"params": [p[n] for n in NAMES if n not in DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    for s in range(a.steps):
        b = torch.from_numpy(batches[s].astype(np.int64))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = gpt2_loss(torch, F, p, b[:, :-1], b[:, 1:], a.nh)
        print("step %d loss %.7f" % (s, loss.item()), flush=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if a.save:
        reflib.save_params(a.save, p, NAMES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    reflib.add_common_args(ap, steps=20, lr=1e-3, wd=0.0)
    ap.add_argument("--nh", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--autocast", action="store_true", help="the forward pass under torch.autocast(\"cpu\", "
                    "dtype=torch.bfloat16): mixed precision, gpt2.shd's -D DT=bf16")
    ap.add_argument("--make-batches")
    ap.add_argument("--V", type=int, default=256)
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--C", type=int, default=32)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.make_init:
        make_init(a.make_init, a.V, a.T, a.L, a.C, a.seed)
    if a.make_batches:
        make_batches(a.make_batches, a.V, a.B, a.T, a.steps, a.seed)
    if a.make_init or a.make_batches:
        return
    reflib.train_or_usage(ap, a, train)


if __name__ == "__main__":
    main()
