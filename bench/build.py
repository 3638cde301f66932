#!/usr/bin/env python3
"""bench/build.py: how long `shdc build` takes, at the default level (-O3).

For each program: the wall-clock seconds and the CPU seconds (shdc and the
C compilers it runs, user + system) of `shdc build`, the median of
--repeat runs, for this shdc with one compiler job (SHDC_JOBS=1: its
translation units compiled one at a time) and with its default (one job
per core: the units compiled that many at once), and optionally for
another shdc (--baseline, e.g. a build of main). The build cache is off
(SHDC_CACHE=off): every build compiles everything.

  bench/build.py [--repeat 3] [--baseline SHDC [--baseline-src FILE ...]] [PROGRAM.shd ...]

An older shdc cannot parse today's programs (language v2): --baseline-src
FILE gives the baseline its own version of the program of the same file
name (bench/baseline-shdc.sh builds an older shdc in a worktree, whose
dsl-examples/ has it); with --baseline-src the baseline builds only the
programs it names. The shdc before issue 15:

  bench/baseline-shdc.sh '52a8e12^1' /tmp/pre15
  bench/build.py --baseline /tmp/pre15/build/shdc --baseline-src /tmp/pre15/dsl-examples/gpt2.shd

The default programs are dsl-examples/gpt2.shd and dsl-examples/llama.shd
(at their default sizes). On a machine shared with
other work the wall-clock column is noisy; the CPU column is not, and on an
idle machine with N cores the wall-clock time of the split build tends to
its CPU time over N.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_build(shdc, src, jobs, d):
    env = dict(os.environ, SHDC_CACHE="off")
    if jobs:
        env["SHDC_JOBS"] = str(jobs)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([shdc, "build", src, "-o", os.path.join(d, "prog")], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit("shdc build %s failed:\n%s" % (src, p.stderr[-3000:]))
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", default=[os.path.join(ROOT, "dsl-examples", p)
                                                    for p in ("gpt2.shd", "llama.shd")])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", metavar="SHDC")
    ap.add_argument("--baseline-src", metavar="FILE", action="append", default=[],
                    help="the baseline builds FILE instead of the program of the same file name")
    a = ap.parse_args()
    if a.baseline_src and not a.baseline:
        sys.exit("--baseline-src needs --baseline SHDC")
    base_src = {os.path.basename(f): f for f in a.baseline_src}
    shdc = os.path.join(ROOT, "build", "shdc")
    print("| program | shdc | wall s | CPU s |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for src in a.programs:
            variants = []
            if a.baseline and (not base_src or os.path.basename(src) in base_src):
                variants.append(("baseline", a.baseline, None, base_src.get(os.path.basename(src), src)))
            variants += [("SHDC_JOBS=1", shdc, 1, src),
                         ("default jobs (%d cores)" % len(os.sched_getaffinity(0)), shdc, None, src)]
            for name, exe, jobs, prog in variants:
                runs = [one_build(exe, prog, jobs, d) for _ in range(a.repeat)]
                lines = sum(1 for _ in subprocess.run([exe, "emit-c", prog], capture_output=True,
                                                      text=True).stdout.splitlines())
                print("| %s (%d lines of C) | %s | %.1f | %.1f |" %
                      (os.path.relpath(src, ROOT), lines, name, statistics.median(r[0] for r in runs),
                       statistics.median(r[1] for r in runs)), flush=True)


if __name__ == "__main__":
    main()
