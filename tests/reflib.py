"""What the independent PyTorch references (tests/gpt2, tests/llama and
tests/moe ref_torch.py) share: reading the parameters and the batches they
train on, writing the trained parameters, and their common flags. Each
reference stays a script of its own (run as `ref_torch.py --init=DIR
--batches=FILE ...`, here or on another machine); this file only holds the
I/O around the model, never the model.

A reference imports it after putting tests/ on its path:

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import reflib
"""
import os
import sys

import numpy as np


def load_params(torch, d, names):
    """{name: torch.nn.Parameter} from DIR/NAME.npy, as f32."""
    return {n: torch.nn.Parameter(torch.from_numpy(np.load(os.path.join(d, n + ".npy")).astype(np.float32)))
            for n in names}


def load_batches(path, layout):
    """The i32 [steps, B, ...] token file; `layout` names its dims for the message."""
    batches = np.load(path)
    if batches.dtype != np.int32 or batches.ndim != 3:
        sys.exit("ref_torch: --batches must be i32 %s, not %s %s" % (layout, batches.dtype, batches.shape))
    return batches


def save_params(d, p, names):
    """DIR/NAME.npy for each parameter (the trained values), DIR created."""
    os.makedirs(d, exist_ok=True)
    for n in names:
        np.save(os.path.join(d, n + ".npy"), p[n].detach().numpy())


def add_common_args(ap, steps, lr, wd):
    """The flags every reference takes, with its own defaults."""
    ap.add_argument("--init", help="the parameters to start from (DIR/NAME.npy)")
    ap.add_argument("--batches", help="i32 [steps, B, ...]: the batches, in order")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--wd", type=float, default=wd)
    ap.add_argument("--save", help="write the trained parameters here")
    ap.add_argument("--make-init", help="write the model's initialisation into this directory and stop")


def train_or_usage(ap, a, train):
    """Runs train(a) once --init and --batches are given."""
    if not a.init or not a.batches:
        ap.error("--init and --batches are needed to train")
    train(a)
