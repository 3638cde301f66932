#!/usr/bin/env python3
"""An independent PyTorch LLaMA-style decoder, the reference
dsl-examples/llama.shd is checked against step by step (issue 14 item 3).

The same model from the same weights fed the same batches, with the same
optimizer:

  ref_torch.py --init=DIR --batches=FILE.npy --NH=N --KV=K --steps=N --lr=F
               --lr-min=F --warmup=W --clip=F --wd=F [--save=DIR]

DIR holds the parameters as llama.shd's save(DIR, p) writes its Llama
struct: one NAME.npy per leaf, layers stacked first (LEAVES below: the
heads of wq/wk/wv/wo split out of nn.Linear's [out, in] rows and columns);
FILE is i32 [steps, B, T+1] (inputs [:, :, :T], targets [:, :, 1:]). The
model, written as PyTorch users write it (Hugging Face's LLaMA): token
embedding; per layer h += o_proj(attn(rope(q), rope(k), v)) of
RMSNorm(h), grouped-query attention with each key/value head repeated for
NH/KV query heads (repeat_kv), rotate-half RoPE with base 10000, then
h += down(silu(gate(x)) * up(x)) of RMSNorm(h) (eps 1e-5); a final RMSNorm
and an untied head; mean cross-entropy. Each step prints `step S loss L
norm G lr R` (L: the loss before the update, G: the gradient's global
norm before clipping, R: the step's learning rate), clips the gradient with torch.nn.utils.clip_grad_norm_,
sets the learning rate of the step (linear warmup over W steps from lr/W
to lr, then a cosine decay to lr-min at step N) and takes one
torch.optim.AdamW step (betas 0.9, 0.999, eps 1e-8) with weight decay on
the matrices (emb, head, wq wk wv wo w1 w2 w3) and none on the RMSNorm
gains.

--autocast runs each step's forward pass (and so its backward) under
torch.autocast("cpu", dtype=torch.bfloat16): the parameters and AdamW stay
f32, the linear layers and matmuls compute in bf16 (test_mixed.py compares
llama.shd -D DT=bf16 with it).

Helpers for tests:
  --make-init=DIR --V --L --C --NH --KV --F --seed   random weights into DIR
                                                    (normal std 0.1; the
                                                    gains 1 + normal 0.1)
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reflib  # noqa: E402

# The leaves of llama.shd's Llama struct: Decay (d) and NoDecay (n).
DECAY = ["d.emb", "d.head", "d.h.wq", "d.h.wk", "d.h.wv", "d.h.wo", "d.h.w1", "d.h.w3", "d.h.w2"]
NODECAY = ["n.h.attn", "n.h.mlp", "n.norm"]
LEAVES = DECAY + NODECAY


def shapes(V, L, C, NH, KV, F):
    HS = C // NH
    return {"d.emb": (V, C), "d.head": (V, C), "d.h.wq": (L, NH, HS, C), "d.h.wk": (L, KV, HS, C),
            "d.h.wv": (L, KV, HS, C), "d.h.wo": (L, C, NH, HS), "d.h.w1": (L, F, C), "d.h.w3": (L, F, C),
            "d.h.w2": (L, C, F), "n.h.attn": (L, C), "n.h.mlp": (L, C), "n.norm": (C,)}


def make_init(d, V, L, C, NH, KV, F, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    for name, shp in shapes(V, L, C, NH, KV, F).items():
        a = rng.normal(0.0, 0.1, shp) + (1.0 if name in NODECAY else 0.0)
        np.save(os.path.join(d, name + ".npy"), a.astype(np.float32))


def rms_norm(torch, x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(torch, x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(torch, x, base=10000.0):
    """x [B, heads, T, H]: Hugging Face's apply_rotary_pos_emb."""
    T, H = x.shape[2], x.shape[3]
    inv_freq = 1.0 / (base ** (torch.arange(0, H, 2, dtype=torch.float64) / H))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + rotate_half(torch, x) * sin


def llama_loss(torch, F, p, x, y, nh, kv):
    """Mean next-token cross-entropy on inputs x [B,T], targets y."""
    Bn, Tn = x.shape
    V, C = p["d.emb"].shape
    L = p["d.h.wq"].shape[0]
    hs = C // nh
    h = F.embedding(x, p["d.emb"])
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(L):
        wq = p["d.h.wq"][l].reshape(nh * hs, C)     # nn.Linear weights [out, in]
        wk = p["d.h.wk"][l].reshape(kv * hs, C)
        wv = p["d.h.wv"][l].reshape(kv * hs, C)
        wo = p["d.h.wo"][l].reshape(C, nh * hs)
        a = rms_norm(torch, h, p["n.h.attn"][l])
        q = F.linear(a, wq).view(Bn, Tn, nh, hs).transpose(1, 2)
        k = F.linear(a, wk).view(Bn, Tn, kv, hs).transpose(1, 2)
        v = F.linear(a, wv).view(Bn, Tn, kv, hs).transpose(1, 2)
        q, k = rope(torch, q), rope(torch, k)
        k = k.repeat_interleave(nh // kv, dim=1)     # repeat_kv: query head n uses kv head n // (nh/kv)
        v = v.repeat_interleave(nh // kv, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(Bn, Tn, nh * hs)
        h = h + F.linear(o, wo)
        a = rms_norm(torch, h, p["n.h.mlp"][l])
        h = h + F.linear(F.silu(F.linear(a, p["d.h.w1"][l])) * F.linear(a, p["d.h.w3"][l]), p["d.h.w2"][l])
    logits = F.linear(rms_norm(torch, h, p["n.norm"]), p["d.head"])
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def schedule(step, warmup, total, lr, lr_min):
    if step < warmup:
        return lr * (step + 1) / warmup
    if step < total:
        t = (step - warmup) / max(total - warmup, 1)
        return lr_min + 0.5 * (lr - lr_min) * (1.0 + math.cos(math.pi * t))
    return lr_min


def train(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    p = reflib.load_params(torch, a.init, LEAVES)
    batches = reflib.load_batches(a.batches, "[steps, B, T+1]")
    groups = [{"params": [p[n] for n in DECAY], "weight_decay": a.wd},
              {"params": [p[n] for n in NODECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    for s in range(a.steps):
        b = torch.from_numpy(batches[s].astype(np.int64))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = llama_loss(torch, F, p, b[:, :-1], b[:, 1:], a.NH, a.KV)
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), a.clip)
        lr = schedule(s, a.warmup, a.steps, a.lr, a.lr_min)
        print("step %d loss %.7f norm %.7f lr %.9f" % (s, loss.item(), norm.item(), lr), flush=True)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
    if a.save:
        reflib.save_params(a.save, p, LEAVES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    reflib.add_common_args(ap, steps=10, lr=3e-3, wd=0.1)
    ap.add_argument("--lr-min", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--autocast", action="store_true", help="the forward pass under torch.autocast(\"cpu\", "
                    "dtype=torch.bfloat16): mixed precision, llama.shd's -D DT=bf16")
    ap.add_argument("--V", type=int, default=256)
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--C", type=int, default=32)
    ap.add_argument("--NH", type=int, default=4)
    ap.add_argument("--KV", type=int, default=2)
    ap.add_argument("--F", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.make_init:
        make_init(a.make_init, a.V, a.L, a.C, a.NH, a.KV, a.F, a.seed)
        return
    reflib.train_or_usage(ap, a, train)


if __name__ == "__main__":
    main()
