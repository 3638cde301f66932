#!/usr/bin/env python3
"""bench/gpt_v2.py: the GPT-2 training step written with structs
(dsl-examples/gpt2.shd, language v2) against the same program written with
separate arrays (tests/gpt2/gpt2_v1.shd, version 1): the same model, the
same collectives, bitwise the same losses (tests/gpt2/test_v1_v2.py), so
any difference in time is what the structs cost.

Both builds run in turn, several rounds (the machine's load changes between
rounds, not within one), each writing its per-step times (--metrics); the
table gives each one's median ms/step over the rounds and the ratio of the
two medians, and the peak of live arrays that `shdc explain` predicts.

  bench/gpt_v2.py [--ranks 1 2] [--steps 12] [--rounds 3] [--configs demo large] [--bind-to core]
                  [--first SHDC FILE]

--first SHDC FILE puts another compiler and its own version of the program
in the first column instead of version 1 (e.g. the shdc before issue 15 and
its gpt2.shd, which bench/baseline-shdc.sh builds): the same interleaved
rounds then compare two compilers on the same model.

On a machine that can run but not build (as bench/gpt.py): --build-only DIR
here, then --run-from DIR there with the same --configs and --ranks.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402  (the runner helpers and the configurations)

SHDC = os.path.join(gpt.B, "shdc")
PROGRAMS = [("v1", SHDC, os.path.join(gpt.ROOT, "tests", "gpt2", "gpt2_v1.shd")),
            ("v2", SHDC, os.path.join(gpt.ROOT, "dsl-examples", "gpt2.shd"))]


def build(d, configs, ranks, programs):
    """Builds both programs for each configuration and rank count into d;
    returns {(config, ranks): ([exe, exe], [peak MiB, peak MiB])}."""
    out = {}
    for name in configs:
        defs = gpt.defines(gpt.CONFIGS[name])
        for n in ranks:
            mesh = "data=%d,model=1" % n
            exes, peaks = [], []
            for k, (_, shdc, src) in enumerate(programs):
                exe = os.path.join(d, "v%d_%s_%d" % (k + 1, name, n))
                gpt.sh([shdc, "build", src, "--mesh", mesh, "-o", exe] + defs)
                ex = gpt.sh([shdc, "explain", src, "--mesh", mesh] + defs)
                m = re.search(r"^fn main\n(?:.*\n)*?\s+peak live arrays per rank: (\d+) bytes", ex, re.M)
                exes.append(os.path.basename(exe))
                peaks.append(int(m.group(1)) / 2**20)
            out["%s/%d" % (name, n)] = (exes, peaks)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=["demo"])
    ap.add_argument("--bind-to", default="none", help="mpirun's --bind-to (none, core)")
    ap.add_argument("--build-only", metavar="DIR", help="build the binaries into DIR (with gpt_v2.json); run nothing")
    ap.add_argument("--run-from", metavar="DIR", help="run the binaries --build-only made in DIR (no shdc needed)")
    ap.add_argument("--first", nargs=2, metavar=("SHDC", "FILE"),
                    help="the first column: this shdc building this program (default: version 1's program)")
    a = ap.parse_args()
    programs = list(PROGRAMS)
    if a.first:
        for f in a.first:
            if not os.path.isfile(f):
                sys.exit("--first: no such file: %s" % f)
        programs[0] = ("first", os.path.abspath(a.first[0]), os.path.abspath(a.first[1]))
    gpt.OPT["bind"] = a.bind_to
    if a.build_only:
        d = os.path.abspath(a.build_only)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "gpt_v2.json"), "w") as f:
            json.dump(build(d, a.configs, a.ranks, programs), f, indent=1)
        print("built into %s; run: bench/gpt_v2.py --run-from %s (with the same --configs and --ranks)" % (d, d))
        return
    first = programs[0][0]
    if a.first:
        print("first: %s building %s; v2: %s building %s" % (programs[0][1], programs[0][2], SHDC, PROGRAMS[1][2]))
    print("| model | ranks | %s ms/step | v2 ms/step | v2 / %s | explain peak MiB %s, v2 |" % (first, first, first))
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.abspath(a.run_from) if a.run_from else tmp
        if a.run_from:
            with open(os.path.join(d, "gpt_v2.json")) as f:
                built = json.load(f)
        else:
            built = build(d, a.configs, a.ranks, programs)
        for name in a.configs:
            cfg = gpt.CONFIGS[name]
            for n in a.ranks:
                if "%s/%d" % (name, n) not in built:
                    sys.exit("%s: no binaries for %s at %d ranks (build them with --build-only)" % (d, name, n))
                exes, peaks = built["%s/%d" % (name, n)]
                times = [[] for _ in PROGRAMS]
                for _ in range(a.rounds):
                    for k, exe in enumerate(exes):
                        times[k].append(gpt.step_ms(os.path.join(d, exe), n, a.steps, tmp)[0])
                ms = [statistics.median(t) for t in times]
                print("| %s (%s) | %d | %.1f | %.1f | %.3f | %.2f, %.2f |" % (
                    name, " ".join("%s=%d" % (k, cfg[k]) for k in ("C", "T", "L", "B")), n,
                    ms[0], ms[1], ms[1] / ms[0], peaks[0], peaks[1]), flush=True)


if __name__ == "__main__":
    main()
