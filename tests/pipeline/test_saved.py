#!/usr/bin/env python3
"""Remat per stage is optional (language.md 10.4): std/pipeline.shd's
pipeline_gpipe_saved computes each stage's forward once and keeps its
activations, where pipeline_gpipe computes the forward again in the
backward pass. tests/pipeline/library.shd (fn gpipe, fn gpipe_saved; its
.shd test checks that both give the global view's loss and gradients),
built with L=8 layers over pipe=4 (2 a stage) and MB=8 microbatches:

- the products a stage runs, counted in each rank's SHD_TRACE timeline
  (the gemm spans of the layer's `y @ p.w[l]` inside the schedule's own
  span): gpipe_saved runs exactly 3 per layer and microbatch (forward,
  and the two of its gradient), 3 * MB * L/P; gpipe 4 * MB * L/P (the
  forward again in the backward pass); neither at the bubble's ticks;
- what that costs in memory, by shdc explain's peak per rank with wide
  activations (B=256 rows of D=64): from 8 to 16 microbatches
  gpipe_saved's peak grows by at least the 8 more microbatches' layer
  inputs and products (2 * L/P activations each), more than gpipe's.
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
B, D = 256, 64


def layer_line():
    with open(SRC) as f:
        for n, line in enumerate(f, 1):
            if "y = tanh(y @ p.w[l]" in line:
                return n
    raise Failure("no layer product `y = tanh(y @ p.w[l] ...` in %s" % SRC)


def traced_counts(shdc, d):
    """{(rank, fn): gemms at the layer's line inside fn's span} for gpipe
    and gpipe_saved, from one traced run at pipe=P."""
    exe = testlib.build(shdc, SRC, os.path.join(d, "lib"), "--mesh", "pipe=%d" % P, "-D", "L=%d" % L,
                        "-D", "MB=%d" % MB)
    trace = os.path.join(d, "t.json")
    r = run(mpirun_cmd(P) + [exe], cwd=d, timeout=300, env={"SHD_TRACE": trace})
    if r.rc:
        raise Failure("the traced run failed (exit %d)\n%s" % (r.rc, r.stderr[-2000:]), [r.shell])
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    line = layer_line()
    out = {}
    for fn in ("gpipe", "gpipe_saved"):
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
        saved, remat = counts[(rank, "gpipe_saved")], counts[(rank, "gpipe")]
        print("rank %d: the layer's products: gpipe_saved %d, gpipe %d" % (rank, saved, remat))
        check(saved == 3 * MB * per, "rank %d: gpipe_saved ran the layer's product %d times, not 3 * MB * L/P = %d "
              "(forward once, gradient twice)" % (rank, saved, 3 * MB * per))
        check(remat == 4 * MB * per, "rank %d: gpipe ran the layer's product %d times, not 4 * MB * L/P = %d "
              "(forward, forward again, gradient)" % (rank, remat, 4 * MB * per))
    defs = ["L=%d" % L, "B=%d" % B, "D=%d" % D]
    p8, p16 = (peaks(shdc, os.path.relpath(SRC, ROOT), "pipe=%d" % P, defs, mb, ("gpipe", "gpipe_saved"))
               for mb in (8, 16))
    act = B * D * 4
    gs, gr = p16["gpipe_saved"] - p8["gpipe_saved"], p16["gpipe"] - p8["gpipe"]
    print("peak per rank from 8 to 16 microbatches: gpipe_saved %d -> %d (+%d), gpipe %d -> %d (+%d)"
          % (p8["gpipe_saved"], p16["gpipe_saved"], gs, p8["gpipe"], p16["gpipe"], gr))
    check(gs >= 8 * 2 * per * act, "gpipe_saved's peak grew by %d bytes from 8 to 16 microbatches, less than their "
          "layers' inputs and products (%d)" % (gs, 8 * 2 * per * act))
    check(gs > gr, "gpipe_saved's peak grew by %d bytes, not more than gpipe's %d (remat keeps only inputs)" % (gs, gr))
    if bad:
        raise Failure("\n".join(bad))


if __name__ == "__main__":
    try:
        main()
    except (Failure, subprocess.TimeoutExpired) as f:
        sys.exit(str(f))
