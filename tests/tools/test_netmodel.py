#!/usr/bin/env python3
"""`shdc explain --network=...`: every collective's estimate is the
alpha-beta cost of the algorithm the runtime uses (recomputed here from the
local type, the group and the link, independently of the compiler), per-axis
links from a file apply to the collectives over their axis (a group over
several axes at its slowest link's pace), the per-step line adds up one
iteration of main's loop with the functions it calls, it works for a mesh far
larger than the machine, and bad specifications are exit 2 with a message.
The estimate against measured runs is in docs/performance.md
(bench/netmodel.py)."""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = re.compile(r"^  line\s+(?P<line>\d+)\s+(?P<kind>\w+)(?:\.(?P<variant>\w+))?\s+over \((?P<axes>\S+)\)\s+"
                  r"(?P<sent>\d+) bytes/rank\s+est\s+(?P<est>[\d.]+) (?P<unit>s|ms|us) (?P<algo>.+?)\s{2,}"
                  r"(?P<dtype>f32|f64|i32|bool)(?:\[(?P<dims>[\d,]*)\])?")
SIZE = {"f32": 4, "f64": 8, "i32": 4, "bool": 1}
UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def cost(kind, n, G, lat, bw, red, moves, sent=0):
    """The model of compiler/netmodel.c, written from its documentation."""
    a, b, g = lat, 1.0 / bw, (1.0 / red if red else 0.0)
    f = (G - 1) / G
    lg = math.ceil(math.log2(G)) if G > 1 else 0
    if kind in ("permute", "ppermute"):
        return (a + n * b if moves else 0.0), "exchange"
    if G == 1:
        return 0.0, "-"
    if kind == "reduce_scatter":
        return (G - 1) * a + f * n * (b + g), "ring"
    if kind == "all_reduce":
        if n >= 32 << 20:
            return 2 * (G - 1) * a + 2 * f * n * b + f * n * g, "ring"
        if n <= 8192:
            return lg * (a + n * (b + g)), "recursive doubling"
        return 2 * lg * a + 2 * f * n * b + f * n * g, "Rabenseifner"
    if kind == "all_gather":
        if G * n <= 65536:
            return lg * a + (G - 1) * n * b, "recursive doubling"
        return (G - 1) * a + (G - 1) * n * b, "ring"
    if kind == "all_to_all":
        return (G - 1) * a + f * n * b, "pairwise"
    if kind == "reshape_move":
        return ((G - 1) * a + sent * b if sent else 0.0), "all-to-all-v"
    if kind == "shift":
        return (a + sent * b if sent else 0.0), "exchange"
    raise ValueError(kind)


def explain(shdc, prog, mesh, network):
    p = subprocess.run([shdc, "explain", prog, "--mesh", mesh, "--network=" + network], capture_output=True,
                       text=True)
    if p.returncode:
        raise SystemExit("explain %s --mesh %s --network=%s: exit %d\n%s" % (prog, mesh, network, p.returncode,
                                                                          p.stderr))
    return p.stdout


def check_lines(out, sizes, links, red, failures, what):
    """links: axis -> (latency, bandwidth). Returns [(fn, line fields, seconds)]."""
    rows, fn = [], None
    for l in out.split("\n"):
        m = re.match(r"^fn (\S+)", l)
        if m:
            fn = m.group(1)
        m = LINE.match(l)
        if not m:
            if l.startswith("  line "):
                failures.append("%s: unparsed line %r" % (what, l))
            continue
        kind, axes, sent = m.group("kind"), m.group("axes"), int(m.group("sent"))
        shown = float(m.group("est")) * UNIT[m.group("unit")]
        n = SIZE[m.group("dtype")] * math.prod(int(x) for x in (m.group("dims") or "").split(",") if x)
        group = list(sizes) if axes == "mesh" else axes.split(",")
        G = math.prod(sizes[a] for a in group)
        if m.group("variant") in ("argmax", "argmin"):   # an all-reduce of (value, index) pairs
            n = sent * G / (2 * (G - 1))
        used = [a for a in group if sizes[a] > 1] or group
        lat = max(links[a][0] for a in used)
        bw = min(links[a][1] for a in used)
        want, algo = cost(kind, n, G, lat, bw, red, sent > 0, sent)
        digits = len(m.group("est").split(".")[1]) if "." in m.group("est") else 0
        tol = 0.51 * 10 ** -digits * UNIT[m.group("unit")]
        if abs(shown - want) > tol or m.group("algo") != algo:
            failures.append("%s: %s\n  estimated %.9g s (%s), the model gives %.9g s (%s)" % (
                what, l, shown, m.group("algo"), want, algo))
        rows.append((fn, l, want))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    failures = []
    trace_prog = os.path.join(ROOT, "tests", "explain", "trace_matches.shd")
    out = explain(shdc, trace_prog, "X=2,Y=2", "1GB/s,1us")
    rows = check_lines(out, {"X": 2, "Y": 2}, {"X": (1e-6, 1e9), "Y": (1e-6, 1e9)}, 0, failures, "trace_matches")
    move_prog = os.path.join(ROOT, "tests", "e2e", "reshape_move.shd")
    rows += check_lines(explain(shdc, move_prog, "X=2,Y=2", "1GB/s,1us"), {"X": 2, "Y": 2},
                        {"X": (1e-6, 1e9), "Y": (1e-6, 1e9)}, 0, failures, "reshape_move")
    rows += check_lines(explain(shdc, os.path.join(ROOT, "tests", "index", "moves.shd"), "X=2", "1GB/s,1us"),
                        {"X": 2}, {"X": (1e-6, 1e9)}, 0, failures, "moves")
    rows += check_lines(explain(shdc, os.path.join(ROOT, "tests", "e2e", "reductions_v1.shd"), "X=2,Y=2",
                                "1GB/s,1us"), {"X": 2, "Y": 2}, {"X": (1e-6, 1e9), "Y": (1e-6, 1e9)}, 0, failures,
                        "reductions_v1")
    kinds = {re.match(r"\s+line\s+\d+\s+(\S+)", r[1]).group(1) for r in rows}
    want_kinds = {"all_gather", "permute", "all_to_all", "all_reduce.sum", "reduce_scatter.sum", "reshape_move",
                  "shift", "all_reduce.argmax"}
    if not want_kinds <= kinds:
        failures.append("the programs' collectives: %s, expected at least %s" % (sorted(kinds), sorted(want_kinds)))

    with tempfile.TemporaryDirectory() as tmp:
        net = os.path.join(tmp, "two-level.net")
        with open(net, "w") as f:
            f.write("# a cluster: tp inside a node, data across nodes\n"
                    "data   12.5GB/s  8us   inter-node\n"
                    "tp     150GB/s   1.5us intra-node   # NVLink-class\n"
                    "reduce 20GB/s\n")
        prog = os.path.join(ROOT, "dsl-examples", "mlp_2d.shd")
        out = explain(shdc, prog, "data=512,tp=8", net)
        rows = check_lines(out, {"data": 512, "tp": 8}, {"data": (8e-6, 12.5e9), "tp": (1.5e-6, 150e9)}, 20e9,
                           failures, "mlp_2d data=512,tp=8")
        if len(rows) < 8 or "inter-node" not in out or "intra-node" not in out:
            failures.append("mlp_2d at data=512,tp=8: %d collectives\n%s" % (len(rows), out))
        # per step: main's loop body plus the gradient function it calls once per iteration
        step = re.search(r"per iteration of the loop at line \d+ of main: (\d+) collectives, (\d+) bytes sent per "
                         r"rank, communication estimated ([\d.]+) (s|ms|us)", out)
        fns = {}
        for fn, l, sec in rows:
            fns.setdefault(fn, []).append((int(re.search(r"(\d+) bytes/rank", l).group(1)), sec))
        grad = [k for k in fns if k.startswith("value_and_grad(loss")]
        parts = fns.get("main", []) + (fns[grad[0]] if grad else [])
        if not step or int(step.group(1)) != len(parts) or int(step.group(2)) != sum(b for b, _ in parts) \
                or abs(float(step.group(3)) * UNIT[step.group(4)] - sum(s for _, s in parts)) > 1e-6:
            failures.append("per step: %s; main + %s give %d collectives, %d bytes, %.6f s" % (
                step.group(0) if step else None, grad, len(parts), sum(b for b, _ in parts),
                sum(s for _, s in parts)))

        plain = subprocess.run([shdc, "explain", prog], capture_output=True, text=True).stdout
        if " est " in plain or "network" in plain:
            failures.append("explain without --network changed:\n%s" % plain)

        bad_axis = os.path.join(tmp, "bad.net")
        with open(bad_axis, "w") as f:
            f.write("model 10GB/s 1us\n")
        partial = os.path.join(tmp, "partial.net")
        with open(partial, "w") as f:
            f.write("data 10GB/s 1us\n")
        garbage = os.path.join(tmp, "garbage.net")
        with open(garbage, "w") as f:
            f.write("data fast slow\n")
        fifo = os.path.join(tmp, "fifo.net")
        os.mkfifo(fifo)
        absurd = os.path.join(tmp, "absurd.net")
        with open(absurd, "w") as f:
            f.write("* 1e-300B/s 1us\n")
        longline = os.path.join(tmp, "long.net")
        with open(longline, "w") as f:
            f.write("* 25GB/s 5us " + "x" * 2000 + "\n")
        nul = os.path.join(tmp, "nul.net")
        with open(nul, "wb") as f:
            f.write(b"* 25GB/s 5us\x00 junk\n")
        for args, msg in [(["--network=1e-300B/s,1us"], "bandwidth"), (["--network=1e20GB/s,1us"], "bandwidth"),
                          (["--network=1GB/s,1e30s"], "latency"), (["--network=" + absurd], "absurd.net:1"),
                          (["--network=" + fifo], "not a regular file (a FIFO)"),
                          (["--network=" + longline], "long.net:1: a line of 2014 bytes"),
                          (["--network=" + nul], "nul.net:1: a NUL byte"),
                          (["--network=/dev/zero"], "not a regular file (a device)"),(["--network=10,xyz"], "latency"), (["--network=abc,1us"], "bandwidth"),
                          (["--network=" + bad_axis], "model"), (["--network=" + partial], "tp"),
                          (["--network=" + garbage], "garbage.net:1"),
                          (["--network=" + os.path.join(tmp, "missing.net")], "cannot read")]:
            try:
                p = subprocess.run([shdc, "explain", prog] + args, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                failures.append("explain %s: blocked" % args)
                continue
            if p.returncode != 2 or msg not in p.stderr:
                failures.append("explain %s: exit %d, %r (expected 2 and %r)" % (args, p.returncode, p.stderr, msg))
        # The slowest links allowed still give estimates a person can read.
        p = subprocess.run([shdc, "explain", prog, "--network=1B/s,10s"], capture_output=True, text=True)
        ests = re.findall(r" est +(\S+) (s|ms|us) ", p.stdout)
        if p.returncode or not ests or any(not re.match(r"^\d+\.\d+$|^\d\.\d{3}e\+\d+$", v) for v, _ in ests):
            failures.append("explain --network=1B/s,10s: exit %d, estimates %r" % (p.returncode, ests))
        p = subprocess.run([shdc, "check", prog, "--network=1GB/s,1us"], capture_output=True, text=True)
        if p.returncode != 2:
            failures.append("--network with check: exit %d" % p.returncode)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("explain --network: every estimate is the model's, per-axis links, per-step totals, bad input exit 2")


if __name__ == "__main__":
    main()
