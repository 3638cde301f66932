#!/usr/bin/env python3
"""Remat per stage is optional (language.md 10.4): std/pipeline.shd's
pipeline_gpipe_saved and pipeline_1f1b_saved compute each stage's forward
once and keep its activations, where pipeline_gpipe and pipeline_1f1b
compute the forward again in the backward pass. tests/pipeline/library.shd
(fn gpipe, gpipe_saved, one_f_one_b, one_f_one_b_saved; its .shd test
checks that all give the global view's loss and gradients), built with
L=8 layers over pipe=4 (2 a stage) and MB=8 microbatches:

- the products a stage runs, counted in each rank's SHD_TRACE timeline
  (the gemm spans of the layer's `y @ p.w[l]` inside the schedule's own
  span): gpipe_saved and one_f_one_b_saved run exactly 3 per layer and
  microbatch (forward, and the two of its gradient), 3 * MB * L/P; gpipe
  and one_f_one_b 4 * MB * L/P (the forward again in the backward pass);
  none at the bubble's ticks;
- what that costs in memory, by shdc explain's peak per rank with wide
  activations (B=256 rows of D=64): from 8 to 16 microbatches
  gpipe_saved's peak grows by at least the 8 more microbatches' layer
  inputs and products (2 * L/P activations each), more than gpipe's;
  one_f_one_b_saved keeps S = min(2P - 1, MB) microbatches' activations:
  at 8 microbatches its peak is below gpipe_saved's and above
  one_f_one_b's (which keeps only the stage inputs), and from 8 to 16
  microbatches it grows only by their inputs and targets (2 * B * I
  floats each), as one_f_one_b's does.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib  # noqa: E402
from run import mpirun_cmd, run, Failure  # noqa: E402
from test_peak import peaks  # noqa: E402  (explain's peak per rank of named manual functions)

SRC = os.path.join(ROOT, "tests", "pipeline", "library.shd")
P, L, MB = 4, 8, 8
B, D, I = 256, 64, 3
SCHEDULES = ("gpipe", "gpipe_saved", "one_f_one_b", "one_f_one_b_saved")


def layer_line():
    with open(SRC) as f:
        for n, line in enumerate(f, 1):
            if "y = tanh(y @ p.w[l]" in line:
                return n
    raise Failure("no layer product `y = tanh(y @ p.w[l] ...` in %s" % SRC)


def traced_counts(shdc, d):
    """{(rank, fn): gemms at the layer's line inside fn's span} for each
    of SCHEDULES, from one traced run at pipe=P."""
    exe = testlib.build(shdc, SRC, os.path.join(d, "lib"), "--mesh", "pipe=%d" % P, "-D", "L=%d" % L,
                        "-D", "MB=%d" % MB)
    trace = os.path.join(d, "t.json")
    r = run(mpirun_cmd(P) + [exe], cwd=d, timeout=300, env={"SHD_TRACE": trace})
    if r.rc:
        raise Failure("the traced run failed (exit %d)\n%s" % (r.rc, (r.out + r.err)[-2000:]), [r.shell])
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    line = layer_line()
    out = {}
    for fn in SCHEDULES:
        for rank in range(P):
            spans = [e for e in ev if e.get("cat") == "function" and e["pid"] == rank + 1 and e["name"] == fn]
            if len(spans) != 1:
                raise Failure("rank %d: %d spans of fn %s in the trace, not 1" % (rank, len(spans), fn))
            s = spans[0]
            out[(rank, fn)] = sum(1 for e in ev if e.get("cat") == "gemm" and e["pid"] == rank + 1
                                  and e["args"].get("line") == line and e["args"].get("file", "").endswith(
                                      "library.shd") and s["ts"] <= e["ts"] <= s["ts"] + s["dur"])
    return out


def main():
    shdc = testlib.shdc_option(__doc__)
    bad = []
    check = testlib.checker(bad)
    per = L // P
    with tempfile.TemporaryDirectory() as d:
        counts = traced_counts(shdc, d)
    for rank in range(P):
        print("rank %d: the layer's products: %s" % (rank, ", ".join("%s %d" % (fn, counts[(rank, fn)])
                                                                      for fn in SCHEDULES)))
        for fn in SCHEDULES:
            n, want = counts[(rank, fn)], (3 if fn.endswith("_saved") else 4) * MB * per
            check(n == want, "rank %d: %s ran the layer's product %d times, not %d * MB * L/P = %d (%s)"
                  % (rank, fn, n, want // (MB * per), want, "forward once, gradient twice" if want // (MB * per) == 3
                     else "forward, forward again, gradient"))
    defs = ["L=%d" % L, "B=%d" % B, "D=%d" % D]
    p8, p16 = (peaks(shdc, os.path.relpath(SRC, ROOT), "pipe=%d" % P, defs, mb, SCHEDULES) for mb in (8, 16))
    act = B * D * 4
    gs, gr = p16["gpipe_saved"] - p8["gpipe_saved"], p16["gpipe"] - p8["gpipe"]
    print("peak per rank from 8 to 16 microbatches: gpipe_saved %d -> %d (+%d), gpipe %d -> %d (+%d)"
          % (p8["gpipe_saved"], p16["gpipe_saved"], gs, p8["gpipe"], p16["gpipe"], gr))
    check(gs >= 8 * 2 * per * act, "gpipe_saved's peak grew by %d bytes from 8 to 16 microbatches, less than their "
          "layers' inputs and products (%d)" % (gs, 8 * 2 * per * act))
    check(gs > gr, "gpipe_saved's peak grew by %d bytes, not more than gpipe's %d (remat keeps only inputs)" % (gs, gr))
    fs, fr = p8["one_f_one_b_saved"], p8["one_f_one_b"]
    grown = p16["one_f_one_b_saved"] - fs
    print("one_f_one_b_saved's peak per rank: %d at 8 microbatches (gpipe_saved %d, one_f_one_b %d), %d at 16"
          % (fs, p8["gpipe_saved"], fr, p16["one_f_one_b_saved"]))
    check(fs < p8["gpipe_saved"], "at 8 microbatches one_f_one_b_saved's peak %d is not below gpipe_saved's %d"
          % (fs, p8["gpipe_saved"]))
    check(fs > fr, "at 8 microbatches one_f_one_b_saved's peak %d is not above one_f_one_b's %d (it keeps the "
          "layers' activations, not only the stage inputs)" % (fs, fr))
    check(grown == 8 * 2 * B * I * 4, "one_f_one_b_saved's peak grew by %d bytes from 8 to 16 microbatches, not by "
          "the %d bytes of their inputs and targets (its slots stay min(2P - 1, MB))" % (grown, 8 * 2 * B * I * 4))
    if bad:
        raise Failure("\n".join(bad))


if __name__ == "__main__":
    try:
        main()
    except (Failure, subprocess.TimeoutExpired) as f:
        sys.exit(str(f))
