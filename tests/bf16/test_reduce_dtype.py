#!/usr/bin/env python3
"""--reduce-dtype=bf16: the buckets' f32 sums move as bf16 (compiler/overlap.c,
runtime/async.c; PyTorch DDP's bf16_compress_hook, FSDP's reduce_dtype).

For an f32 program's gradients, summed over `data` in the overlap pass's
buckets (a layer loop's all-reduce accumulators, a straight-line bucket's
plain member; ZeRO's reduce-scatter accumulators), each member is rounded to bf16 as it is staged, the ring adds in f32
and rounds each sum to bf16, and the wait widens the sums into the f32
results. So, at 2 and 4 ranks:
  - the IR's bucket starts say `wire=bf16`, explain says "sent as bf16",
    and without the option (or with --reduce-dtype=f32) neither;
  - the bucketed gradients are bf16 values (their low 16 bits zero), and
    within bf16's rounding of the 1-device build (which sums nothing);
  - at 2 ranks they are bitwise NumPy's bf16(bf16(a) + bf16(b)) (rounding
    to nearest even) of the two ranks' partial gradients, a and b, which a
    1-device program computes from each half of the batch;
  - a sum the pass leaves alone (under 64 KiB) stays f32: bitwise the plain
    f32 build's;
  - the trace's bytes of the bucketed kind are half the f32 build's, and
    equal explain's;
  - --reduce-dtype=f32 builds the same C as no option;
and the option's misuses are usage errors.
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

# A layer loop's gradients (a bucket a layer: window members), the head's
# (64 KiB, summed while the layers' backward runs: a straight-line bucket,
# a plain member) and a small one (256 bytes: all-reduced on its own, f32).
DP = """mesh {data: 4}

const D = 64; const F = 256; const B = 16; const L = 3
struct Blk { w1: f32[D, F], w2: f32[F, D] }
struct P { blk: Blk[L], out: f32[D, F], b: f32[D] }

fn loss(p: P, x: f32[B@data, D]) -> f32 {
    var h = x + p.b
    for i in 0..L {
        h = h + relu(h @ p.blk[i].w1) @ p.blk[i].w2
    }
    let y = h @ p.out
    return sum(y * y)
}

fn main() {
    let x: f32[B@data, D] = normal(seed=7)
    let p = normal(P, seed=1) * 0.1
    let g = grad(loss)(p, x)
    save("g_w1.npy", g.blk.w1)
    save("g_w2.npy", g.blk.w2)
    save("g_out.npy", g.out)
    save("g_b.npy", g.b)
}
"""

# ZeRO: the parameters' shards gathered whole in the step; their gradients
# reduce-scattered, a layer's in a bucket.
ZERO = """mesh {data: 4}

const D = 64; const F = 256; const B = 16; const L = 3
struct Blk { w1: f32[D, F], w2: f32[F, D] }
struct P { blk: Blk[L], out: f32[D, F], b: f32[D] }
struct BlkS { w1: f32[D@data, F], w2: f32[F@data, D] }
struct S { blk: BlkS[L], out: f32[D, F@data], b: f32[D@data] }

fn loss(p: P, x: f32[B@data, D]) -> f32<U:data> {
    var h = x + p.b
    for i in 0..L {
        h = h + relu(h @ p.blk[i].w1) @ p.blk[i].w2
    }
    let y = h @ p.out
    return sum(y * y)
}

fn zero_loss(ps: S, x: f32[B@data, D]) -> f32<U:data> {
    return loss(reshard(ps, P), x)
}

fn main() {
    let x: f32[B@data, D] = normal(seed=7)
    let ps = reshard(normal(P, seed=1) * 0.1, S)
    let g = grad(zero_loss)(ps, x)
    save("g_w1.npy", reshard(g.blk.w1, f32[L, D, F]))
    save("g_w2.npy", reshard(g.blk.w2, f32[L, F, D]))
    save("g_out.npy", reshard(g.out, f32[D, F]))
    save("g_b.npy", reshard(g.b, f32[D]))
}
"""

# The two ranks' partial gradients of DP at data=2: each half of the batch's,
# of the bucketed leaves.
EMULATED = (("w1", "blk.w1"), ("w2", "blk.w2"), ("out", "out"))
PARTIALS = (DP.replace("mesh {data: 4}", "mesh {data: 1}").replace("x: f32[B@data, D]) -> f32", "x: f32[8, D]) -> f32")
            .replace("let x: f32[B@data, D]", "let x: f32[B, D]")
            .replace("let g = grad(loss)(p, x)", "let a = grad(loss)(p, x[0:8])\n    let b = grad(loss)(p, x[8:16])"))
PARTIALS = PARTIALS[:PARTIALS.index('    save("g_w1.npy"')] + "".join(
    '    save("%s_%s.npy", %s.%s)\n' % (h, w, h, f) for h in "ab" for w, f in EMULATED) + "}\n"

NAMES = ("g_w1.npy", "g_w2.npy", "g_out.npy", "g_b.npy")


def bf16_round(x):
    """x (f32) rounded to bf16, to nearest even, as f32 (NaN-free values)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def two_rank_reference(shdc, d):
    """NumPy's bf16 sum of the two ranks' partials, of EMULATED's leaves."""
    src = os.path.join(d, "partials.shd")
    with open(src, "w") as f:
        f.write(PARTIALS)
    exe = testlib.build(shdc, src, os.path.join(d, "partials"))
    subprocess.run([exe], check=True, cwd=d, env=dict(os.environ, SHD_QUIET="1"), timeout=300)
    return [bf16_round(bf16_round(np.load(os.path.join(d, "a_%s.npy" % w))) +
                       bf16_round(np.load(os.path.join(d, "b_%s.npy" % w)))) for w, _ in EMULATED]


def run(exe, np_, d):
    """The saved gradients and the trace's {kind: (count, bytes)}, max over ranks."""
    for f in NAMES:
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    env = dict(os.environ, SHD_QUIET="1", SHD_TRACE="1")
    p = subprocess.run(["mpirun", "--oversubscribe", "-np", str(np_), exe], capture_output=True, text=True,
                       timeout=300, env=env, cwd=d)
    if p.returncode:
        sys.exit("%s at %d ranks: exit %d\n%s%s" % (exe, np_, p.returncode, p.stdout, p.stderr))
    trace = {k: (int(c), int(b)) for k, c, b in
             re.findall(r"max over ranks:.*?\b(\w+) count=(\d+) bytes=(\d+)", p.stdout + p.stderr)}
    return [np.load(os.path.join(d, f)) for f in NAMES], trace


def explain_bytes(shdc, src, mesh, kind, *flags):
    """explain's bytes a rank sends per run in the gradient's collectives of kind (a loop body's times L=3):
    (in buckets, alone), and explain's text."""
    ex = testlib.run_shdc(shdc, "explain", src, "--mesh", mesh, *flags).stdout
    at = ex.find("fn grad(")
    grad = ex[at:] if at >= 0 else ""
    got = [0, 0]
    for l in grad.splitlines():
        if re.search(r"\b%s\.sum\b" % kind, l) and "over (data)" in l:
            n = int(re.search(r"(\d+) bytes/rank", l).group(1)) * (3 if "in the loop" in l else 1)
            got["a bucket of" not in l] += n
    return tuple(got), grad


def program(shdc, name, text, kind, bucketed, d, failures):
    """The checks for one program; bucketed: the saved gradients its buckets sum."""
    check = testlib.checker(failures)
    src = os.path.join(d, name + ".shd")
    with open(src, "w") as f:
        f.write(text)

    ir = testlib.run_shdc(shdc, "emit-ir", src, "--mesh", "data=2", "--reduce-dtype=bf16").stdout
    starts = [l for l in ir.splitlines() if kind + "_start" in l]
    check(starts and all("wire=bf16" in l for l in starts), "%s: the IR's bucket starts %s (want wire=bf16)" %
          (name, starts))
    plain_ir = testlib.run_shdc(shdc, "emit-ir", src, "--mesh", "data=2").stdout
    check("wire=" not in plain_ir, "%s: wire= in the IR without --reduce-dtype" % name)
    c_default = testlib.run_shdc(shdc, "emit-c", src, "--mesh", "data=2").stdout
    c_f32 = testlib.run_shdc(shdc, "emit-c", src, "--mesh", "data=2", "--reduce-dtype=f32").stdout
    check(c_default == c_f32, "%s: --reduce-dtype=f32 changes the generated C" % name)
    check("shd_async_begin" in c_default and "SHD_BF16" not in c_default,
          "%s: the f32 build's buckets are not f32" % name)

    def build(tag, mesh, *flags):
        return testlib.build(shdc, src, os.path.join(d, name + "_" + tag), "--mesh", mesh, *flags)

    one, _ = run(build("one", "data=1"), 1, d)
    emulated = two_rank_reference(shdc, d) if name == "dp" else None
    for n in (2, 4):
        f32, f32_trace = run(build("f32_%d" % n, "data=%d" % n), n, d)
        bf, bf_trace = run(build("bf16_%d" % n, "data=%d" % n, "--reduce-dtype=bf16"), n, d)
        tag = "%s, %d ranks" % (name, n)
        if emulated and n == 2:
            for (w, _), g, e in zip(EMULATED, bf, emulated):
                check(np.array_equal(g.view(np.uint32), e.view(np.uint32)),
                      "%s: g_%s differs from NumPy's bf16 sum of the partials in %d of %d values (by up to %g)" %
                      (tag, w, int((g != e).sum()), g.size, np.abs(g - e).max()))
        for fname, g, g32, ref in zip(NAMES, bf, f32, one):
            in_bucket = fname in bucketed
            # a sum of n bf16 partials rounds n times (the staging's and the ring's n-1): a few ulps (2^-8)
            tol = (2 * n * 2.0 ** -8 if in_bucket else 1e-5) * np.abs(ref).max()
            err = np.abs(g - ref).max()
            check(err <= tol, "%s: %s off the 1-device build's by %g (tolerance %g)" % (tag, fname, err, tol))
            low = (g.view(np.uint32) & 0xFFFF) != 0
            if in_bucket:
                check(not low.any(), "%s: %s has %d values that are not bf16 (a bucket moved as f32?)" %
                      (tag, fname, int(low.sum())))
                check(np.abs(g32 - ref).max() <= 1e-5 * np.abs(ref).max(), "%s: the f32 build's %s is off" %
                      (tag, fname))
            else:
                check(np.array_equal(g.view(np.uint32), g32.view(np.uint32)),
                      "%s: %s (a sum the pass leaves alone) differs from the f32 build's" % (tag, fname))
        (bucket_f32, alone_f32), _ = explain_bytes(shdc, src, "data=%d" % n, kind)
        (bucket_bf, alone_bf), ex = explain_bytes(shdc, src, "data=%d" % n, kind, "--reduce-dtype=bf16")
        check("sent as bf16" in ex, "%s: explain does not say the bucket is sent as bf16" % tag)
        check(bucket_f32 > 0 and bucket_bf * 2 == bucket_f32 and alone_bf == alone_f32,
              "%s: explain's %s bytes in buckets %d (f32 %d), alone %d (f32 %d): want the buckets' half" %
              (tag, kind, bucket_bf, bucket_f32, alone_bf, alone_f32))
        got_f32, got_bf = f32_trace.get(kind, (0, 0))[1], bf_trace.get(kind, (0, 0))[1]
        check(got_f32 == bucket_f32 + alone_f32 and got_bf == bucket_bf + alone_bf,
              "%s: the trace's %s bytes %d (f32 %d), explain's %d (f32 %d)" %
              (tag, kind, got_bf, got_f32, bucket_bf + alone_bf, bucket_f32 + alone_f32))
        print("%s: %s bytes %d (f32 %d), the largest difference from the 1-device build %.3g of the largest value" %
              (tag, kind, got_bf, got_f32, max(np.abs(g - r).max() / np.abs(r).max() for g, r in zip(bf, one))))


def usage_errors(shdc, d, failures):
    check = testlib.checker(failures)
    src = os.path.join(d, "dp.shd")
    for flags, want in ((["--reduce-dtype=f16"], "--reduce-dtype expects f32 or bf16"),
                        (["--reduce-dtype=bf16", "--bucket=0"], "--bucket=0 turns the buckets off"),
                        (["--reduce-dtype"], "--reduce-dtype needs f32 or bf16")):
        p = subprocess.run([shdc, "explain", src, "--mesh", "data=2"] + flags, capture_output=True, text=True)
        check(p.returncode != 0 and want in p.stderr and "Traceback" not in p.stderr,
              "%s: exit %d, stderr %r (want an error saying %r)" % (" ".join(flags), p.returncode, p.stderr, want))


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        program(shdc, "dp", DP, "all_reduce", ("g_w1.npy", "g_w2.npy", "g_out.npy"), d, failures)
        program(shdc, "zero", ZERO, "reduce_scatter", ("g_w1.npy", "g_w2.npy"), d, failures)
        usage_errors(shdc, d, failures)
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
