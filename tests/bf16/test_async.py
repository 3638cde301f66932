#!/usr/bin/env python3
"""bf16 gradients go in the async buckets (compiler/overlap.c,
runtime/async.c) and change no result.

Mixed precision's backward pass makes bf16 gradients of the weights' bf16
copy, summed over `data` (language.md §10.1: 2 bytes an element). The
overlap pass sends a layer loop's bf16 gradients a bucket a layer, as it
does f32's, and the runtime's async ring adds each pair in f32 and rounds
once, as the blocking ring does. So at 2 ranks (one addition an element)
the gradients equal the build without buckets (--bucket=0) bitwise, with
the buckets moved by the communication thread, by progress calls and in
the main thread when started (SHD_OVERLAP=thread|progress|0); at 4 ranks
(the buckets' chunks are not the single arrays', so the additions' order
differs) within bf16's rounding of the 1-device build. The trace's
all-reduces are fewer with buckets, with the same bytes, and those are
explain's (2 bytes an element). Both ways of writing mixed precision:
bf16 weights, whose gradients are bf16 loop carries, and f32 master
weights cast to bf16 in each layer, whose bf16 sums are widened into the
f32 gradient at the bucket's wait (`add.f32` in the IR).
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = """mesh {data: 4}

const D = 64; const F = 256; const B = 16; const L = 3
struct BlkB { w1: bf16[D, F], w2: bf16[F, D] }

fn lossb(p: BlkB[L], x: bf16[B@data, D]) -> f32 {
    var h = x
    for i in 0..L {
        h = h + relu(h @ p[i].w1) @ p[i].w2
    }
    return sum(cast(h * h, f32))
}

fn main() {
    let x: f32[B@data, D] = normal(seed=7)
    let pb = cast(normal(BlkB[L], seed=1) * 0.1, bf16)
    let g = grad(lossb)(pb, cast(x, bf16))
    save("g_w1.npy", cast(g.w1, f32))
    save("g_w2.npy", cast(g.w2, f32))
}
"""

# f32 master weights, each layer's cast to bf16 where it is used
MASTER = (PROGRAM.replace("struct BlkB { w1: bf16[D, F], w2: bf16[F, D] }", "struct Blk { w1: f32[D, F], w2: f32[F, D] }")
          .replace("p: BlkB[L]", "p: Blk[L]")
          .replace("@ p[i].w1", "@ cast(p[i].w1, bf16)").replace("@ p[i].w2", "@ cast(p[i].w2, bf16)")
          .replace("cast(normal(BlkB[L], seed=1) * 0.1, bf16)", "normal(Blk[L], seed=1) * 0.1")
          .replace("cast(g.w1, f32)", "g.w1").replace("cast(g.w2, f32)", "g.w2"))


def run(exe, np_, d, env_extra=None):
    """The saved gradients (bytes, arrays) and the trace's all-reduce (count, bytes), max over ranks."""
    env = dict(os.environ, SHD_QUIET="1", SHD_TRACE="1", **(env_extra or {}))
    for f in ("g_w1.npy", "g_w2.npy"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    p = subprocess.run(["mpirun", "--oversubscribe", "-np", str(np_), exe], capture_output=True, text=True,
                       timeout=300, env=env, cwd=d)
    if p.returncode:
        sys.exit("%s at %d ranks: exit %d\n%s%s" % (exe, np_, p.returncode, p.stdout, p.stderr))
    m = re.search(r"max over ranks:.*\ball_reduce count=(\d+) bytes=(\d+)", p.stdout + p.stderr)
    arrays = [np.load(os.path.join(d, f)) for f in ("g_w1.npy", "g_w2.npy")]
    return [a.tobytes() for a in arrays], arrays, (int(m.group(1)), int(m.group(2))) if m else None


def main():
    shdc = testlib.shdc_option()
    failures = []
    for tag, text, member in (("bf16 weights", PROGRAM, "->add["), ("f32 master weights", MASTER, "->add.f32[")):
        failures += [tag + ": " + f for f in program(shdc, text, member)]
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print("ok")


def program(shdc, text, member):
    """The checks above for one program; its bucket's members print as `member` in the IR. Returns failures."""
    failures = []
    check = testlib.checker(failures)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "b.shd")
        with open(src, "w") as f:
            f.write(text)
        ir = testlib.run_shdc(shdc, "emit-ir", src, "--mesh", "data=2").stdout
        starts = [l for l in ir.splitlines() if "all_reduce_start" in l]
        check(len(starts) == 1 and member in starts[0], "the IR's bucket starts %s (want one, members %s)" %
              (starts, member))

        def build(name, mesh, *flags):
            return testlib.build(shdc, src, os.path.join(d, name), "--mesh", mesh, *flags)

        _, one, _ = run(build("one", "data=1"), 1, d)
        off_bytes, off, off_trace = run(build("off", "data=2", "--bucket=0"), 2, d)
        on_exe = build("on", "data=2")
        for mode in ("thread", "progress", "0"):
            on_bytes, _, on_trace = run(on_exe, 2, d, {"SHD_OVERLAP": mode})
            check(on_bytes == off_bytes, "2 ranks, SHD_OVERLAP=%s: the gradients differ from --bucket=0's" % mode)
            check(on_trace and off_trace and on_trace[1] == off_trace[1] and on_trace[0] < off_trace[0],
                  "2 ranks, SHD_OVERLAP=%s: trace all-reduces (count, bytes) %s, without buckets %s "
                  "(want fewer, the same bytes)" % (mode, on_trace, off_trace))
        print("2 ranks: trace all-reduces (count, bytes) with buckets %s, without %s" % (on_trace, off_trace))

        # explain's bytes sent per rank for the gradient are the trace's (bf16: 2 bytes an element)
        ex = testlib.run_shdc(shdc, "explain", src, "--mesh", "data=2")
        grad = ex.stdout[ex.stdout.index("fn grad(lossb"):] if "fn grad(lossb" in ex.stdout else ""
        lines = [l for l in grad.splitlines() if "all_reduce" in l and "over (data)" in l]
        per_step = sum(int(re.search(r"(\d+) bytes/rank", l).group(1)) * (3 if "in the loop" in l else 1)
                       for l in lines)   # explain counts a loop body once: its L=3 iterations
        want = 3 * 2 * 64 * 256 * 2 * 2 * (2 - 1) // 2   # w1 and w2 of L layers, 2 bytes, 2(G-1)/G of them
        check(per_step == want and on_trace and on_trace[1] == want,
              "explain's gradient bytes %d, the trace's %s, the weights' %d" %
              (per_step, on_trace and on_trace[1], want))
        check("a bucket of" in grad, "explain lists no bucket in the gradient:\n" + grad)

        for name, got in (("2 ranks", off), ("4 ranks", run(build("on4", "data=4"), 4, d)[1]),
                          ("4 ranks, 1 KiB buckets", run(build("on4k", "data=4", "--bucket=1KiB"), 4, d)[1])):
            for g, ref in zip(got, one):
                # a bf16 sum of 4 partials rounds up to 3 times: a few ulps (2^-8) of the largest partial
                tol = 4 * 2.0 ** -8 * np.abs(ref).max()
                check(np.abs(g - ref).max() <= tol, "%s: gradient off the 1-device build's by %g (tolerance %g)" %
                      (name, np.abs(g - ref).max(), tol))
    return failures


if __name__ == "__main__":
    main()
