#!/usr/bin/env python3
"""GPT-2 with a sharded optimizer in mixed precision (issue 30 item 4 with
issue 26): tests/gpt2/gpt2_zero.shd at -D DT=bf16 keeps f32 master weights
as their shards and casts them to bf16 for the forward pass. Its bf16
gradients are reduce-scattered in bf16 (compiler/scatter.c sees through
the widening cast to f32, exact and elementwise) and widened on this
rank's block, so explain's gradient function at data=2:

- sums no array with an all-reduce (f32 or bf16): every parameter's
  gradient is a reduce-scatter, as at DT=f32;
- reduce-scatters some bf16 arrays (the layers' in the loop's buckets,
  the tied embedding's);
- sends fewer bytes per step than the same function at DT=f32.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = os.path.join(ROOT, "tests", "gpt2", "gpt2_zero.shd")
FUNC = "value_and_grad(zero_loss)"


def grad_block(shdc, *defs):
    p = subprocess.run([shdc, "explain", "--mesh", "data=2,model=1", *defs, PROGRAM], capture_output=True,
                       text=True, timeout=300)
    if p.returncode:
        sys.exit("explain failed:\n" + p.stderr)
    for block in re.split(r"\n(?=fn )", p.stdout):
        if block.startswith("fn " + FUNC):
            sent = re.search(r"(\d+) collectives?, (\d+) bytes sent per rank", block)
            return block, int(sent.group(2))
    sys.exit("no %s in explain's output:\n%s" % (FUNC, p.stdout))


def main():
    shdc = testlib.shdc_option(__doc__.splitlines()[0])
    f32, b32 = grad_block(shdc)
    bf16, b16 = grad_block(shdc, "-D", "DT=bf16")
    failures = []
    for tag, block in (("DT=f32", f32), ("DT=bf16", bf16)):
        arrays = [ln for ln in block.splitlines() if re.search(r"all_reduce\.sum .* (f32|bf16)\[", ln)]
        if arrays:
            failures.append("%s: arrays all-reduced where a reduce-scatter does:\n  %s" % (tag, "\n  ".join(arrays)))
    scattered = [ln for ln in bf16.splitlines() if re.search(r"reduce_scatter\.sum .* bf16\[", ln)]
    if len(scattered) < 2:
        failures.append("DT=bf16: %d bf16 reduce-scatters, expected the loop's bucket and the embedding's" %
                        len(scattered))
    if not b16 < b32:
        failures.append("DT=bf16 sends %d bytes a step, DT=f32 %d: expected fewer" % (b16, b32))
    print("%s at data=2: %d bytes a step at DT=f32, %d at DT=bf16 (%d bf16 reduce-scatters)" % (
        FUNC, b32, b16, len(scattered)))
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
