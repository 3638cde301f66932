#!/usr/bin/env python3
"""bench/gpt_v2.py: the GPT-2 training step written with structs
(dsl-examples/gpt2.shd, language v2) against the same program written with
separate arrays (tests/gpt2/gpt2_v1.shd, version 1): the same model, the
same collectives, bitwise the same losses (tests/gpt2/test_v1_v2.py), so
any difference in time is what the structs cost.

Both builds run in turn, several rounds (the machine's load changes between
rounds, not within one), each printing its per-step times (--timing); the
table gives each one's median ms/step over the rounds and the ratio of the
two medians, and the peak of live arrays that `shdc explain` predicts.

  bench/gpt_v2.py [--ranks 1 2] [--steps 12] [--rounds 3] [--configs demo large]
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (the runner helpers and the configurations)

PROGRAMS = [("v1 (arrays)", os.path.join(gpt.ROOT, "tests", "gpt2", "gpt2_v1.shd")),
            ("v2 (structs)", os.path.join(gpt.ROOT, "dsl-examples", "gpt2.shd"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=["demo"])
    a = ap.parse_args()
    shdc = os.path.join(gpt.B, "shdc")
    print("| model | ranks | v1 ms/step | v2 ms/step | v2 / v1 | explain peak MiB v1, v2 |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in a.configs:
            cfg = gpt.CONFIGS[name]
            defs = sum((["-D", "%s=%d" % kv] for kv in cfg.items()), [])
            for n in a.ranks:
                mesh = "data=%d,model=1" % n
                exes, peaks, times = [], [], [[] for _ in PROGRAMS]
                for k, (_, src) in enumerate(PROGRAMS):
                    exe = os.path.join(d, "p%d_%d" % (k, n))
                    gpt.sh([shdc, "build", src, "--mesh", mesh, "-o", exe] + defs)
                    exes.append(exe)
                    ex = gpt.sh([shdc, "explain", src, "--mesh", mesh] + defs)
                    m = re.search(r"^fn main\n(?:.*\n)*?\s+peak live arrays per rank: (\d+) bytes", ex, re.M)
                    peaks.append(int(m.group(1)) / 2**20)
                for _ in range(a.rounds):
                    for k, exe in enumerate(exes):
                        out = gpt.mpirun(n, [exe, "--steps=%d" % a.steps, "--timing=true", "--data=", "--val="])
                        ts = [float(x) for x in re.findall(r"^step \d+ loss \S+ ms (\S+)", out, re.M)]
                        times[k].append(gpt.median_ms(ts))
                ms = [statistics.median(t) for t in times]
                print("| %s (%s) | %d | %.1f | %.1f | %.3f | %.2f, %.2f |" % (
                    name, " ".join("%s=%d" % kv for kv in cfg.items() if kv[0] in ("C", "T", "L", "B")), n,
                    ms[0], ms[1], ms[1] / ms[0], peaks[0], peaks[1]), flush=True)


if __name__ == "__main__":
    main()
