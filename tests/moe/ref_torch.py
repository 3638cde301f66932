#!/usr/bin/env python3
"""An independent PyTorch mixture-of-experts model, the reference
dsl-examples/moe.shd is checked against step by step (docs/moe.md).

  ref_torch.py --init=DIR --batches=FILE.npy --steps=N --lr=F --wd=F --aux=F --cf=PERCENT

DIR holds the program's Model struct as `save(DIR, p)` writes it: wte [V,C],
h.norm [L,C], h.router [L,E,C], h.ex.w1 [L,E,F,C], h.ex.w2 [L,E,C,F], normf
[C], head [V,C]; FILE is i32 [steps, B, T], each token's target (3x+1) % V.
Each step prints `step S loss L dropped N` (the loss before the update:
mean cross-entropy plus aux times the Switch balancing loss summed over the
layers; N the (token, choice) pairs dropped for capacity) and takes
one torch.optim.AdamW step (weight decay on every parameter).

The routing is written the way a PyTorch MoE (Mixtral's, with GShard's
capacity) is, with Python lists, not the program's argsort and
segment_sum over every (token, choice) pair at once: softmax
router probabilities, torch.topk(2), the two gates renormalised to sum to 1;
per group (a sequence) and expert, the tokens that chose it in priority
order (first choices in token order, then second choices in token order),
the first K = ceil(cf/100 * 2T/E) kept and the rest dropped; each expert's
MLP (tanh-GELU, no biases) on its kept tokens, index_add'ed back weighted by
the gate.

--make-init=DIR --V --C --F --E --L --seed writes a random initialisation.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reflib  # noqa: E402

NAMES = ["wte", "h.norm", "h.router", "h.ex.w1", "h.ex.w2", "normf", "head"]


def make_init(d, V, C, F, E, L, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    shapes = {"wte": (V, C), "h.norm": (L, C), "h.router": (L, E, C), "h.ex.w1": (L, E, F, C),
              "h.ex.w2": (L, E, C, F), "normf": (C,), "head": (V, C)}
    for name, shp in shapes.items():
        a = 1.0 + rng.normal(0.0, 0.1, shp) if name in ("h.norm", "normf") else rng.normal(0.0, 0.3, shp)
        np.save(os.path.join(d, name + ".npy"), a.astype(np.float32))


def rmsnorm(torch, x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def moe_layer(torch, F, x, norm, router, w1, w2, cap):
    """x [B,T,C] -> (x + moe(rmsnorm(x)), balancing loss, dropped pairs)."""
    Bn, Tn, _ = x.shape
    E = router.shape[0]
    h = rmsnorm(torch, x, norm)
    probs = F.softmax(h @ router.t(), dim=-1)                      # [B,T,E]
    top, idx = torch.topk(probs, 2, dim=-1)                        # sorted: first choice, second choice
    gates = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    dropped = 0
    for b in range(Bn):
        for e in range(E):
            order = [(t, k) for k in range(2) for t in range(Tn) if idx[b, t, k].item() == e]
            kept, dropped = order[:cap], dropped + max(0, len(order) - cap)
            if not kept:
                continue
            toks = torch.tensor([t for t, _ in kept])
            g = torch.stack([gates[b, t, k] for t, k in kept]).unsqueeze(1)
            y = F.gelu(h[b, toks] @ w1[e].t(), approximate="tanh") @ w2[e].t()
            out[b] = out[b].index_add(0, toks, g * y)
    first = F.one_hot(idx[:, :, 0], E).float()
    aux = E * (first.mean((0, 1)) * probs.mean((0, 1))).sum()
    return x + out, aux, dropped


def forward(torch, F, p, xs, ys, cap):
    x = p["wte"][xs]
    aux, dropped = 0.0, 0
    for l in range(p["h.norm"].shape[0]):
        x, a, n = moe_layer(torch, F, x, p["h.norm"][l], p["h.router"][l], p["h.ex.w1"][l], p["h.ex.w2"][l], cap)
        aux, dropped = aux + a, dropped + n
    z = rmsnorm(torch, x, p["normf"]) @ p["head"].t()
    return F.cross_entropy(z.reshape(-1, z.shape[-1]), ys.reshape(-1)), aux, dropped


def train(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    p = reflib.load_params(torch, a.init, NAMES)
    batches = reflib.load_batches(a.batches, "[steps, B, T]")
    V = p["wte"].shape[0]
    E = p["h.router"].shape[1]
    T = batches.shape[2]
    cap = -(-a.cf * 2 * T // (100 * E))
    opt = torch.optim.AdamW([p[n] for n in NAMES], lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.wd, foreach=False)
    for s in range(a.steps):
        xs = torch.from_numpy(batches[s].astype(np.int64))
        ce, aux, dropped = forward(torch, F, p, xs, (3 * xs + 1) % V, cap)
        loss = ce + a.aux * aux
        print("step %d loss %.7f dropped %d" % (s, loss.item(), dropped), flush=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if a.save:
        reflib.save_params(a.save, p, NAMES)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    reflib.add_common_args(ap, steps=10, lr=0.003, wd=0.0)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--cf", type=int, default=125)
    for k, v in dict(V=64, C=32, F=64, E=4, L=2, seed=0).items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    if a.make_init:
        make_init(a.make_init, a.V, a.C, a.F, a.E, a.L, a.seed)
        return
    reflib.train_or_usage(ap, a, train)


if __name__ == "__main__":
    main()
