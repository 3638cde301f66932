#!/usr/bin/env python3
"""SHD_TRACE=FILE.json: one Chrome trace-event timeline for all ranks.

- tests/explain/trace_matches.shd and tests/e2e/reshape_move.shd on 4 ranks
  (mesh X=2,Y=2): the file is
  JSON in the trace-event format; every rank has its process, a main span
  and well-nested spans (complete events that overlap only by containment);
  each rank's collectives are explain's, line by line (kind, line, bytes:
  explain's per-rank figure, and for a permute either that or 0 on a rank
  that keeps its block), each with a wait inside it; the live-bytes counter
  peaks at explain's peak;
- dsl-examples/mlp_dp.shd (2 steps, 2 ranks): function spans for main and the
  gradient function, GEMMs with their sizes, elementwise passes on lines of
  the program, and `shdc trace-summary` prints each rank's time per category
  (adding up to main's time) and the collective counts of the file;
- processes are numbered from 1 (pid = rank + 1), the rank's spans on
  tid 1, its buckets' transfers (--bucket, runtime/async.c) on tid 2;
- each iteration of main's loop is a "step" span (args: the step) holding
  that step's work; with SHD_TRACE_STEPS=1:3 only steps 1 and 2 are
  recorded (their spans, their collectives and what encloses them: main),
  and trace-summary reports over those steps; a malformed
  SHD_TRACE_STEPS stops the program before it runs;
- a trace file that cannot be created stops the program before it runs;
  trace-summary of a malformed file is exit 1 with the place, of a missing
  one exit 2.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from run import mpirun_cmd, run, Failure  # noqa: E402


def ns(x):
    return int(round(x * 1000))


def check_nesting(events, failures):
    """Per pid and track: sorted by start (longest first), each span ends
    inside the innermost one still open at its start."""
    by_pid, by_track = {}, {}
    for e in events:
        if e.get("ph") == "X":
            by_pid.setdefault(e["pid"], []).append(e)
            by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, _), evs in by_track.items():
        evs.sort(key=lambda e: (ns(e["ts"]), -ns(e["dur"])))
        stack = []
        for e in evs:
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            if e["dur"] < 0 or e["ts"] < 0:
                failures.append("rank %d: negative time in %s" % (pid, e))
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                failures.append("rank %d: %s [%d, %d] overlaps %s without nesting" % (
                    pid, e["name"], start, end, stack[-1][2]["name"]))
            stack.append((start, end, e))
    return by_pid


def explain_list(shdc, prog, mesh):
    out = subprocess.run([shdc, "explain", prog, "--mesh", mesh], capture_output=True, text=True, check=True).stdout
    colls = Counter()
    peak = None
    fn = None
    for l in out.split("\n"):
        m = re.match(r"fn (\S+)", l)
        if m:
            fn = m.group(1)
        m = re.match(r"\s+line\s+(\d+)\s+(\w+)(?:\.\w+)?\s+over .*?(\d+) bytes/rank", l)
        if m:
            colls[(int(m.group(1)), m.group(2), int(m.group(3)))] += 1
        m = re.match(r"\s+peak live arrays per rank: (\d+) bytes", l)
        if m and fn == "main":
            peak = int(m.group(1))
    return colls, peak


def build_and_trace(shdc, prog, mesh, ranks, tmp, args=(), env=None):
    exe = os.path.join(tmp, "prog")
    if not os.path.exists(exe):
        rc, out, err = run([shdc, "build", prog, "--mesh", mesh, "-o", exe])
        if rc:
            raise Failure("build %s: %s" % (prog, err))
    trace = os.path.join(tmp, "run.json")
    rc, out, err = run(mpirun_cmd(ranks) + [exe] + list(args), cwd=tmp, env=dict(env or {}, SHD_TRACE=trace))
    if rc:
        raise Failure("run %s: exit %d\n%s%s" % (prog, rc, out, err))
    if "shdc trace:" in err:
        raise Failure("SHD_TRACE=FILE also printed the SHD_TRACE=1 table:\n%s" % err)
    with open(trace) as f:
        return json.load(f), trace


def check_format(events, failures):
    """The Trace Event Format as Perfetto's JSON importer reads it: complete
    (X), counter (C) and metadata (M) events with the fields each needs."""
    meta = {"process_name", "process_sort_index", "thread_name"}
    for e in events:
        ok = isinstance(e.get("pid"), int) and e.get("tid") in (1, 2) and e["pid"] >= 1 and isinstance(e.get("name"), str)
        if e.get("ph") == "X":
            ok &= isinstance(e.get("cat"), str) and all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur"))
        elif e.get("ph") == "C":
            ok &= isinstance(e.get("ts"), (int, float)) and all(isinstance(v, (int, float))
                                                                for v in e.get("args", {}).values())
        elif e.get("ph") == "M":
            ok &= e["name"] in meta and isinstance(e.get("args"), dict)
        else:
            ok = False
        if not ok:
            failures.append("not a trace event Perfetto reads: %s" % e)
            return


def check_collectives(shdc, tmp, failures, prog, gemm):
    data, _ = build_and_trace(shdc, prog, "X=2,Y=2", 4, tmp)
    events = data["traceEvents"]
    check_format(events, failures)
    if data["otherData"]["ranks"] != 4 or data["otherData"]["dropped_events"] != 0:
        failures.append("otherData: %s" % data["otherData"])
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    if names != {r + 1: "rank %d" % r for r in range(4)} or data["otherData"].get("first_pid") != 1:
        failures.append("process names: %s (pid = rank + 1), otherData %s" % (names, data["otherData"]))
    by_pid = check_nesting(events, failures)
    want, peak = explain_list(shdc, prog, "X=2,Y=2")
    if sum(want.values()) < 5:
        failures.append("explain lists only %s" % want)
    for pid in range(1, 5):
        evs = by_pid.get(pid, [])
        if [e["name"] for e in evs if e["cat"] == "function"] != ["main"]:
            failures.append("rank %d: function spans %s" % (pid, [e["name"] for e in evs if e["cat"] == "function"]))
        colls = [e for e in evs if e["cat"] == "communication"]
        got = Counter()
        for e in colls:
            a = e["args"]
            if a["kind"] != e["name"] or not a["axes"]:
                failures.append("rank %d: collective %s" % (pid, e))
            key = (a["line"], a["kind"], a["bytes"])
            if a["kind"] == "permute" and a["bytes"] == 0:   # this rank keeps its block
                key = next((k for k in want if k[:2] == (a["line"], "permute")), key)
            got[key] += 1
        if got != want:
            failures.append("rank %d: collectives %s, explain %s" % (pid, sorted(got.items()), sorted(want.items())))
        waits = [e for e in evs if e["cat"] == "wait"]
        inside = sum(1 for w in waits for c in colls
                     if ns(c["ts"]) <= ns(w["ts"]) and ns(w["ts"]) + ns(w["dur"]) <= ns(c["ts"]) + ns(c["dur"]))
        if len(waits) != len(colls) or inside != len(waits):
            failures.append("rank %d: %d waits (%d inside a collective) for %d collectives" % (
                pid, len(waits), inside, len(colls)))
        if gemm and not any(e["cat"] == "gemm" and e["args"]["M"] > 0 for e in evs):
            failures.append("rank %d: no GEMM span" % pid)
    counters = [e["args"]["bytes"] for e in events if e.get("ph") == "C"]
    if not counters or max(counters) != peak:
        failures.append("live bytes counter peaks at %s, explain's peak is %s" % (max(counters or [0]), peak))


def check_training(shdc, tmp, failures):
    prog = os.path.join(ROOT, "dsl-examples", "mlp_dp.shd")
    data, trace = build_and_trace(shdc, prog, "data=2", 2, tmp, ["--steps=2"])
    check_format(data["traceEvents"], failures)
    with open(prog) as f:
        nlines = len(f.read().split("\n"))
    by_pid = check_nesting(data["traceEvents"], failures)
    for pid in range(1, 3):
        evs = by_pid.get(pid, [])
        funcs = Counter(e["name"] for e in evs if e["cat"] == "function")
        if funcs["main"] != 1 or not any(n.startswith("value_and_grad(loss") and c == 2 for n, c in funcs.items()):
            failures.append("rank %d: function spans %s" % (pid, dict(funcs)))
        steps = [e for e in evs if e["cat"] == "step"]
        grads = [e for e in evs if e["name"].startswith("value_and_grad(loss")]
        if [e["args"]["step"] for e in steps] != [0, 1] or not all(
                sum(1 for g in grads if ns(s["ts"]) <= ns(g["ts"]) and ns(g["ts"]) + ns(g["dur"]) <= ns(s["ts"]) +
                    ns(s["dur"])) == 1 for s in steps):
            failures.append("rank %d: step spans %s, each should hold one gradient call" %
                            (pid, [e["args"] for e in steps]))
        ew = [e for e in evs if e["cat"] == "elementwise"]
        if not ew or not all(1 <= e["args"]["line"] <= nlines for e in ew):
            failures.append("rank %d: elementwise spans %s" % (pid, [e["args"] for e in ew[:5]]))
        gemms = [e for e in evs if e["cat"] == "gemm"]
        if not gemms or not all(min(e["args"][k] for k in "MNK") > 0 and e["args"]["line"] > 0 for e in gemms):
            failures.append("rank %d: GEMM spans %s" % (pid, [e["args"] for e in gemms[:5]]))
    p = subprocess.run([shdc, "trace-summary", trace], capture_output=True, text=True)
    if p.returncode:
        failures.append("trace-summary: exit %d\n%s" % (p.returncode, p.stderr))
        return
    rows = {}
    for l in p.stdout.split("\n"):
        m = re.match(r"^(\d+)\s+([\d.]+)((?:\s+[\d.]+\s+[\d.]+%){6})$", l)
        if m:
            vals = [float(x) for x in re.findall(r"([\d.]+)\s+[\d.]+%", m.group(3))]
            rows[int(m.group(1))] = (float(m.group(2)), vals)
    if sorted(rows) != [0, 1]:
        failures.append("trace-summary rows %s:\n%s" % (sorted(rows), p.stdout))
        return
    for r, (total, (gemm, ew, comm, wait, other, rest)) in rows.items():
        main = [e for e in by_pid[r + 1] if e["cat"] == "function" and e["name"] == "main"][0]["dur"] / 1000
        want_gemm = sum(e["dur"] for e in by_pid[r + 1] if e["cat"] == "gemm") / 1000
        if abs(total - main) > 0.002 or abs(gemm - want_gemm) > 0.002 or gemm <= 0 or ew <= 0 or comm <= 0:
            failures.append("rank %d: summary %s, main %.3f ms, gemm %.3f ms" % (r, rows[r], main, want_gemm))
        if abs(gemm + ew + comm + wait + other + rest - total) > 0.01:
            failures.append("rank %d: the categories do not add up to main: %s" % (r, rows[r]))
    counts = Counter(e["args"]["kind"] for e in by_pid[1] if e["cat"] == "communication")
    for kind, n in counts.items():
        if not re.search(r"\b%s\b" % kind, p.stdout) or not re.search(r"^0\s.*\b%d\s+\d+" % n, p.stdout, re.M):
            failures.append("trace-summary does not show %d %s on rank 0:\n%s" % (n, kind, p.stdout))
    if not re.search(r"^steps \(iterations of main's loops\): 2 on rank 0", p.stdout, re.M):
        failures.append("trace-summary does not count the 2 steps:\n%s" % p.stdout)
    return sum(counts.values()) // 2   # collectives per step


def check_window(shdc, tmp, failures, per_step):
    """SHD_TRACE_STEPS=1:3 on 4 steps: only steps 1 and 2."""
    prog = os.path.join(ROOT, "dsl-examples", "mlp_dp.shd")
    data, trace = build_and_trace(shdc, prog, "data=2", 2, tmp, ["--steps=4"], {"SHD_TRACE_STEPS": "1:3"})
    check_format(data["traceEvents"], failures)
    if data["otherData"].get("steps") != "1:3":
        failures.append("otherData of a window: %s" % data["otherData"])
    by_pid = check_nesting(data["traceEvents"], failures)
    for pid in (1, 2):
        evs = by_pid.get(pid, [])
        steps = [e for e in evs if e["cat"] == "step"]
        if [e["args"]["step"] for e in steps] != [1, 2]:
            failures.append("rank %d, window 1:3: step spans %s" % (pid - 1, [e["args"] for e in steps]))
            continue
        lo, hi = ns(steps[0]["ts"]), ns(steps[-1]["ts"]) + ns(steps[-1]["dur"])
        outside = [e for e in evs if e["cat"] != "step" and e["name"] != "main" and
                   (ns(e["ts"]) < lo or ns(e["ts"]) + ns(e["dur"]) > hi)]
        colls = [e for e in evs if e["cat"] == "communication"]
        if outside or len(colls) != 2 * per_step:
            failures.append("rank %d, window 1:3: %d spans outside the steps (%s), %d collectives (expected %d)"
                            % (pid - 1, len(outside), outside[:2], len(colls), 2 * per_step))
    p = subprocess.run([shdc, "trace-summary", trace], capture_output=True, text=True)
    if p.returncode or "over the traced steps (SHD_TRACE_STEPS=1:3" not in p.stdout:
        failures.append("trace-summary of a window: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    for bad in ("3:1", "x", "1:2:3"):
        rc, out, err = run(mpirun_cmd(2) + [os.path.join(tmp, "prog"), "--steps=1"], cwd=tmp,
                           env={"SHD_TRACE": trace, "SHD_TRACE_STEPS": bad})
        if rc == 0 or "SHD_TRACE_STEPS=%s: expected" % bad not in err or "step" in out:
            failures.append("SHD_TRACE_STEPS=%s: exit %d\n%s" % (bad, rc, err))


def check_errors(shdc, tmp, failures):
    prog = os.path.join(ROOT, "tests", "explain", "trace_matches.shd")
    exe = os.path.join(tmp, "prog")
    rc, out, err = run([shdc, "build", prog, "--mesh", "X=2,Y=1", "-o", exe])
    rc, out, err = run(mpirun_cmd(2) + [exe], cwd=tmp, env={"SHD_TRACE": os.path.join(tmp, "no", "dir", "t.json")})
    if rc == 0 or "cannot create the trace file" not in err or os.path.exists(os.path.join(tmp, "c.npy")):
        failures.append("SHD_TRACE into a missing directory: exit %d, ran: %s\n%s" % (
            rc, os.path.exists(os.path.join(tmp, "c.npy")), err))
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"traceEvents": [\n {"ph": "X", "pid": 1, "ts": 1, "dur": }\n]}\n')
    p = subprocess.run([shdc, "trace-summary", bad], capture_output=True, text=True)
    if p.returncode != 1 or not re.search(r"bad\.json:2:\d+: error", p.stderr):
        failures.append("trace-summary of malformed JSON: exit %d, %r" % (p.returncode, p.stderr))
    p = subprocess.run([shdc, "trace-summary", os.path.join(tmp, "missing.json")], capture_output=True, text=True)
    if p.returncode != 2 or "cannot read" not in p.stderr:
        failures.append("trace-summary of a missing file: exit %d, %r" % (p.returncode, p.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = os.path.abspath(ap.parse_args().shdc)
    failures = []
    try:
        for prog, gemm in ((os.path.join("tests", "explain", "trace_matches.shd"), True),
                           (os.path.join("tests", "e2e", "reshape_move.shd"), False)):
            with tempfile.TemporaryDirectory() as tmp:
                check_collectives(shdc, tmp, failures, os.path.join(ROOT, prog), gemm)
        with tempfile.TemporaryDirectory() as tmp:
            per_step = check_training(shdc, tmp, failures)
            check_window(shdc, tmp, failures, per_step or 1)
        with tempfile.TemporaryDirectory() as tmp:
            check_errors(shdc, tmp, failures)
    except Failure as f:
        failures.append(str(f))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("timelines: nested spans, collectives per rank as explain, waits, counters; trace-summary adds up")


if __name__ == "__main__":
    main()
