#!/usr/bin/env python3
"""The bf16 row conversions are vector code in every clone that uses them.

runtime/k_rows.h's bf16_widen_rows and bf16_narrow_rows are inlined into
the per-instruction-set clones (CLONES) of the bf16 gemm's shd_widen_bf16
and shd_narrow_bf16 (kernels.c; the async buckets' conversions too) and of attention's bf16 kernels (k_attention.c:
attention_bf16, attention_grad_bf16, which widen their blocks and round
the results back). Each AVX2 and AVX-512 clone must widen with vpmovzxwd
and vpslld (16 bits up, 8 or 16 at once) and round with vpsrld (the
rounding's shift down): scalar, the conversions took about a third of a
small bf16 product's time (docs/performance.md). The runtime is the one
beside --shdc (build/libshdrt.a); skipped where it has no clones (not
x86-64, or the sanitizer build, whose CLONES are plain functions) or
objdump is missing.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

WIDEN, NARROW = ("vpmovzxwd", "vpslld"), ("vpsrld",)
FUNCS = {"shd_widen_bf16": WIDEN, "shd_narrow_bf16": NARROW, "attention_bf16": WIDEN + NARROW,
         "attention_grad_bf16": WIDEN + NARROW}


def functions(lib):
    """{symbol: [mnemonic, ...]} of the disassembly of lib."""
    p = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit("objdump -d %s: exit %d\n%s" % (lib, p.returncode, p.stderr))
    out, cur = {}, None
    for line in p.stdout.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"^\s+[0-9a-f]+:\s+(\S+)", line)
        if m and cur is not None:
            cur.append(m.group(1))
    return out


def main():
    shdc = testlib.shdc_option()
    lib = os.path.join(os.path.dirname(shdc), "libshdrt.a")
    if not shutil.which("objdump"):
        testlib.skip("objdump is not installed")
    if not os.path.exists(lib):
        sys.exit("no runtime beside %s (%s): build it with make" % (shdc, lib))
    fns = functions(lib)
    if not any(f.endswith(".avx512f") for f in fns):
        testlib.skip("%s has no per-instruction-set clones (not x86-64, or the sanitizer build)" % lib)
    failures = []
    for fn, want in FUNCS.items():
        for isa in ("avx2", "avx512f"):
            name = "%s.%s" % (fn, isa)
            if name not in fns:
                failures.append("%s: no clone %s" % (lib, name))
                continue
            missing = [m for m in want if m not in fns[name]]
            if missing:
                failures.append("%s: no %s (the bf16 conversions are not vectorised)" % (name, ", ".join(missing)))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("the bf16 row conversions are vector code (%s) in the AVX2 and AVX-512 clones of %s" % (
        ", ".join(WIDEN + NARROW), ", ".join(FUNCS)))


if __name__ == "__main__":
    main()
