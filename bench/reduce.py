#!/usr/bin/env python3
"""NumPy's time for the operations of bench/reduce.c, on the same shapes
(f32, one thread as each rank has): the reference the row kernels are
compared with. Best of 10, in ms."""
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np


def best(f, reps=10):
    t = 1e30
    for _ in range(reps):
        s = time.perf_counter()
        f()
        t = min(t, time.perf_counter() - s)
    return t * 1e3


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def main():
    rng = np.random.default_rng(1)
    print("| operation (f32)        | rows x cols     |  NumPy ms |")
    print("|------------------------|-----------------|-----------|")
    for rows, cols in [(4096, 768), (1024, 1024), (16384, 64), (64, 50304)]:
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        g = rng.standard_normal((rows, cols), dtype=np.float32)
        y = softmax(x)
        lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)) + x.max(-1, keepdims=True)
        ops = [("mean(x, axis=-1)", lambda: x.mean(-1, keepdims=True)),
               ("max(x, axis=-1)", lambda: x.max(-1)),
               ("sum(x, axis=0)", lambda: x.sum(0)),
               ("softmax(x, axis=-1)", lambda: softmax(x)),
               ("log_softmax(x, axis=-1)", lambda: log_softmax(x)),
               ("softmax gradient", lambda: y * (g - (g * y).sum(-1, keepdims=True))),
               ("logsumexp gradient", lambda: g[:, :1] * np.exp(x - lse))]
        for name, f in ops:
            print("| %-22s | %6d x %-6d | %9.3f |" % (name, rows, cols, best(f)))


if __name__ == "__main__":
    main()
