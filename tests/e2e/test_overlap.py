"""The overlap pass (--bucket=BYTES, default 25 MiB: compiler/overlap.c,
runtime/async.c) changes no result: gpt2.shd trained data-parallel with its gradient
all-reduces in buckets, started during the backward pass and finished by
the communication thread, gives bitwise the losses of the same program
without the pass at 2 ranks (a sum of two is the same in either order),
with the buckets moved in the main thread when started (SHD_OVERLAP=0) and
by progress calls between kernels (SHD_OVERLAP=progress) instead of the
default communication thread too, and the 1-device build's within
float tolerance at 2 and 4 ranks. Explain lists one bucket per layer (the
step issues at most L+5 all-reduces over data) and its counts and bytes are
the runtime trace's. A rank killed while buckets are in flight stops the
job: mpirun ends, naming the killed rank, with no rank left waiting in a
pending collective. plan counts fewer collectives and less communication with buckets. A
mistyped --bucket is a usage error; a mistyped SHD_OVERLAP or
SHD_ASYNC_POLL_NS stops the program with its name. A sharded optimizer's
reduce-scatters (tests/gpt2/gpt2_zero.shd) are bucketed alike, with the
same guarantees. FSDP's per-layer all-gathers (dsl-examples/gpt2_fsdp.shd)
are prefetched an iteration ahead (--prefetch, on by default): bitwise the
losses of --prefetch=off at 2 ranks (in the three modes) and 4 ranks, the
1-device build's within float tolerance, the trace's all-gathers fewer
with the same bytes and on the communication track while the rank
computes, explain's gathers in the loops one overlapped bucket each; a
rank killed while they are in flight stops the job; a mistyped --prefetch
is a usage error.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

SRC = os.path.join(ROOT, "dsl-examples", "gpt2.shd")
L = 3
DEFS = ["-D", "V=256", "-D", "T=8", "-D", "L=%d" % L, "-D", "NH=4", "-D", "C=32", "-D", "B=8"]
STEPS = 3


ZERO = os.path.join(ROOT, "tests", "gpt2", "gpt2_zero.shd")
FSDP = os.path.join(ROOT, "dsl-examples", "gpt2_fsdp.shd")


def run(exe, np, tmp, name, env_extra=None):
    """The losses of STEPS steps and the trace's (count, bytes) of each kind
    of collective (max over ranks), by kind."""
    metrics = os.path.join(tmp, name + ".jsonl")
    env = dict(os.environ, SHD_QUIET="1", SHD_TRACE="1", **(env_extra or {}))
    p = subprocess.run(["mpirun", "--oversubscribe", "-np", str(np), exe, "--data=", "--steps=%d" % STEPS,
                        "--metrics=" + metrics], capture_output=True, text=True, timeout=300, env=env)
    if p.returncode:
        sys.exit("%s at %d ranks: exit %d\n%s%s" % (name, np, p.returncode, p.stdout, p.stderr))
    with open(metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    trace = {}
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        m = re.search(r"max over ranks:.*\b%s count=(\d+) bytes=(\d+)" % kind, p.stdout + p.stderr)
        trace[kind] = (int(m.group(1)), int(m.group(2))) if m else None
    return losses, trace


def switched(shdc, src, tmp, tag, off, kind, four):
    """src built at 1 device, and at 2 and 4 ranks with the pass under test
    turned off (flag `off`) and on (flags `four` at 4 ranks); the 2-rank
    build with it on run in SHD_OVERLAP's three modes. The losses with it on
    equal those without bitwise, and the 1-device build's within 1e-5; the
    trace's `kind` collectives are fewer with the same bytes. Returns
    (failures, the 2-rank build with it on, its losses and trace, the trace
    without)."""
    def build(name, mesh, *flags):
        return testlib.build(shdc, src, os.path.join(tmp, tag + name), "--mesh", mesh, *DEFS, *flags)
    failures = []
    one = run(build("1", "data=1,model=1"), 1, tmp, tag + "1")[0]
    plain, plain_trace = run(build("off", "data=2,model=1", off), 2, tmp, tag + "off")
    on_exe = build("on", "data=2,model=1")
    on, on_trace = run(on_exe, 2, tmp, tag + "on")
    sync = run(on_exe, 2, tmp, tag + "sync", {"SHD_OVERLAP": "0"})[0]
    prog = run(on_exe, 2, tmp, tag + "prog", {"SHD_OVERLAP": "progress"})[0]
    off4 = run(build("off4", "data=4,model=1", off), 4, tmp, tag + "off4")[0]
    on4 = run(build("on4", "data=4,model=1", *four), 4, tmp, tag + "on4")[0]
    if on != plain or sync != plain or prog != plain or on4 != off4:
        failures.append("%s: losses at 2 ranks %s (moved when started %s, by progress calls %s), with %s %s; at 4 "
                        "ranks %s, with %s %s" % (tag, on, sync, prog, off, plain, on4, off, off4))
    for name, got in (("2 ranks", on), ("4 ranks", on4)):
        if len(got) != STEPS or any(abs(a - b) > 1e-5 * max(1, abs(b)) for a, b in zip(got, one)):
            failures.append("%s, %s: losses %s, the 1-device build's %s" % (tag, name, got, one))
    a, b = on_trace[kind], plain_trace[kind]
    if not a or not b or a[1] != b[1] or a[0] >= b[0]:
        failures.append("%s trace: %s (count, bytes) %s, with %s %s (same bytes, fewer calls)" % (tag, kind, a, off, b))
    return failures, on_exe, on, on_trace, plain_trace


def zero_buckets(shdc, tmp):
    """A sharded optimizer's reduce-scatters (tests/gpt2/gpt2_zero.shd) go in
    buckets too (1 KiB buckets at 4 ranks). Returns failures."""
    failures, _, on, on_trace, plain_trace = switched(shdc, ZERO, tmp, "ZeRO", "--bucket=0", "reduce_scatter",
                                                      ["--bucket=1KiB"])
    print("ZeRO: losses %s; trace reduce-scatters (count, bytes) with buckets %s, without %s" % (
        on, on_trace["reduce_scatter"], plain_trace["reduce_scatter"]))
    return failures


def gathers_beside_compute(path):
    """Per rank (pid): how many all-gather spans of the communication track
    (tid 2) overlap a GEMM or elementwise span of the main track."""
    with open(path) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    spans = [e for e in ev if e.get("ph") == "X"]
    out = {}
    for pid in sorted({e["pid"] for e in spans}):
        work = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans
                      if e["pid"] == pid and e.get("tid") == 1 and e.get("cat") in ("gemm", "elementwise"))
        gathers = [(e["ts"], e["ts"] + e["dur"]) for e in spans
                   if e["pid"] == pid and e.get("tid") == 2 and e.get("name") == "all_gather"]
        out[pid] = (len(gathers), sum(1 for a, b in gathers if any(x < b and y > a for x, y in work)))
    return out


def fsdp_prefetch(shdc, tmp):
    """FSDP's layer loops gather each layer's parameters an iteration ahead:
    the same losses as --prefetch=off (bitwise) and the 1-device build's
    (within 1e-5), fewer all-gathers with the same bytes, moved beside the
    computation, one overlapped bucket a loop in explain. Returns
    failures."""
    failures, on_exe, on, on_trace, off_trace = switched(shdc, FSDP, tmp, "FSDP", "--prefetch=off", "all_gather", [])
    on_ag, off_ag = on_trace["all_gather"], off_trace["all_gather"]
    # the timeline: the prefetched gathers on the communication track, beside the computation
    # Whether a gather overlaps a kernel depends on how the two cores are
    # shared at that moment (on a loaded machine a rank's thread may only
    # run while its main thread waits): up to 3 traced runs, some gather
    # beside the computation in one of them.
    tl = os.path.join(tmp, "fsdp.json")
    for attempt in range(3):
        p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", "-x", "SHD_TRACE", on_exe, "--data=",
                            "--steps=%d" % STEPS], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, SHD_QUIET="1", SHD_TRACE=tl))
        beside = gathers_beside_compute(tl) if p.returncode == 0 and os.path.exists(tl) else {}
        # forward and backward loops, each L iterations, every step
        counted = len(beside) == 2 and all(n == 2 * L * STEPS for n, _ in beside.values())
        if not counted or sum(k for _, k in beside.values()) > 0:
            break
    if not counted or sum(k for _, k in beside.values()) == 0:
        failures.append("FSDP timeline: (all-gathers on the communication track, those beside a GEMM or an "
                        "elementwise pass) per rank %s, want %d each and some beside (3 runs); exit %d %s" %
                        (beside, 2 * L * STEPS, p.returncode, p.stderr[-500:]))
    ts = subprocess.run([shdc, "trace-summary", tl], capture_output=True, text=True, timeout=60)
    if ts.returncode or not re.search(r"^rank 1: buckets in flight .*\ball_gather [\d.]+ ms", ts.stdout, re.M):
        failures.append("trace-summary: no all-gathers in flight:\n%s%s" % (ts.stdout, ts.stderr))
    # explain: each loop's gathers over data one overlapped bucket (in the loop, and the first before it)
    def gathers(*flags):
        p = subprocess.run([shdc, "explain", FSDP, "--mesh", "data=2,model=1"] + DEFS + list(flags),
                           capture_output=True, text=True, timeout=120)
        if p.returncode:
            return None
        grad = p.stdout[p.stdout.index("fn value_and_grad(loss"):]
        grad = grad[:grad.index("\n\n")] if "\n\n" in grad else grad
        lines = [x for x in grad.splitlines() if re.search(r"\ball_gather +over \(data\).*\(in the loop", x)]
        return (sum("a bucket of" in x and "overlapped with" in x for x in lines),
                sum("a bucket of" not in x for x in lines))
    with_p, without = gathers(), gathers("--prefetch=off")
    if with_p != (2, 0) or not without or without[0] != 0 or without[1] < 8:
        failures.append("FSDP explain: all-gathers over data in the loops (buckets, plain) with prefetch %s, "
                        "without %s" % (with_p, without))
    failures += [f for f in [kill_mid_step(on_exe, tmp)] if f]   # gathers in flight: no rank left waiting
    p = subprocess.run([shdc, "build", FSDP, "--prefetch=maybe", "-o", os.path.join(tmp, "x")],
                       capture_output=True, text=True)
    if p.returncode != 2 or "--prefetch expects on or off, not 'maybe'" not in p.stderr:
        failures.append("--prefetch=maybe: exit %d, %s" % (p.returncode, p.stderr.strip()))
    print("FSDP: losses %s; trace all-gathers (count, bytes) with prefetch %s, without %s; timeline %s" %
          (on, on_ag, off_ag, beside))
    return failures


def explain(shdc, mesh, *flags):
    p = subprocess.run([shdc, "explain", SRC, "--mesh", mesh] + DEFS + list(flags), capture_output=True, text=True,
                       timeout=120)
    if p.returncode:
        sys.exit("explain: exit %d\n%s" % (p.returncode, p.stderr))
    return p.stdout


def children(pid):
    """The pids of pid's descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def kill_mid_step(exe, tmp):
    """SIGKILL to one rank while the job trains: mpirun must end within the
    time limit with a message, and leave no rank behind. Returns a failure
    or None."""
    env = dict(os.environ, SHD_QUIET="1")
    p = subprocess.Popen(["mpirun", "--oversubscribe", "-np", "2", exe, "--data=", "--steps=100000"], cwd=tmp,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        line = p.stdout.readline()   # the first step's line: buckets are being sent from now on
        ranks = [c for c in children(p.pid) if os.path.realpath("/proc/%d/exe" % c) == os.path.realpath(exe)]
        if not line or len(ranks) != 2:
            return "kill: the job did not start two ranks (%r, %s)" % (line, ranks)
        time.sleep(0.3)
        os.kill(ranks[1], signal.SIGKILL)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            return "kill: mpirun still waiting 60 s after a rank was killed (a rank hangs in a pending collective)"
        left = [r for r in ranks if os.path.exists("/proc/%d" % r) and
                open("/proc/%d/stat" % r).read().split()[2] != "Z"]
        if p.returncode == 0 or left or not re.search(r"signal 9|Killed", out):
            return "kill: mpirun exit %s, ranks left %s, output:\n%s" % (p.returncode, left, out[-1500:])
        return None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        bucket_failures, on_exe, on, on_trace, plain_trace = switched(shdc, SRC, tmp, "buckets", "--bucket=0",
                                                                      "all_reduce", ["--bucket=1KiB"])
        failures += bucket_failures
        on_trace, plain_trace = on_trace["all_reduce"], plain_trace["all_reduce"]

        # explain: one bucket a layer in the gradient, the trace's counts and bytes
        text = explain(shdc, "data=2,model=1", "--bucket=25MiB")
        grad = text[text.index("fn value_and_grad(loss"):]
        grad = grad[:grad.index("\n\n")] if "\n\n" in grad else grad
        over_data = [l for l in grad.splitlines() if re.search(r"\bover \(data\)", l)]
        buckets = [l for l in over_data if "a bucket of" in l and "in the loop" in l]
        if len(buckets) != 1 or len(over_data) > L + 5:
            failures.append("explain --bucket: %d bucket lines in the loop (want 1, run L=%d times), %d collectives "
                            "over data in the gradient (at most L+5 = %d):\n%s" % (len(buckets), L, len(over_data),
                                                                                  L + 5, "\n".join(over_data)))
        plain_lines = [l for l in explain(shdc, "data=2,model=1", "--bucket=0").splitlines()
                       if re.search(r"\bover \(data\)", l)]
        if len(plain_lines) <= len(over_data):
            failures.append("explain: %d all-reduces over data without buckets, %d with" %
                            (len(plain_lines), len(over_data)))
        print("losses %s; trace (count, bytes) with buckets %s, without %s; explain lines over data %d -> %d"
              % (on, on_trace, plain_trace, len(plain_lines), len(over_data)))

        failures += [f for f in [kill_mid_step(on_exe, tmp)] if f]
        failures += zero_buckets(shdc, tmp)
        failures += fsdp_prefetch(shdc, tmp)

        # plan counts a bucket's time less the work before its wait: fewer
        # collectives and less communication than without buckets
        def plan(*flags):
            p = subprocess.run([shdc, "plan", SRC, "--devices=2", "--mesh", "data=2,model=1", "--json",
                                "--network=125MB/s,50us", "--flops=60G,1G"] + DEFS + list(flags),
                               capture_output=True, text=True, timeout=120)
            lay = [x for x in json.loads(p.stdout)["layouts"] if x.get("type_checks")] if p.returncode == 0 else []
            return (lay[0]["collectives"], lay[0]["communication_seconds"]) if lay else None
        with_b, without = plan(), plan("--bucket=0")
        if not with_b or not without or with_b[0] >= without[0] or with_b[1] >= without[1]:
            failures.append("plan: (collectives, communication s) with buckets %s, without %s" % (with_b, without))

        # a mistyped run-time setting stops the program, naming it
        for var, val in (("SHD_OVERLAP", "threads"), ("SHD_ASYNC_POLL_NS", "10us")):
            p = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", "-x", var, on_exe, "--data=", "--steps=1"],
                               capture_output=True, text=True, timeout=120, env=dict(os.environ, **{var: val}))
            if p.returncode == 0 or "%s=%s" % (var, val) not in p.stdout + p.stderr:
                failures.append("%s=%s: exit %d\n%s%s" % (var, val, p.returncode, p.stdout[-800:], p.stderr[-800:]))

        p = subprocess.run([shdc, "build", SRC, "--bucket=lots", "-o", os.path.join(tmp, "x")], capture_output=True,
                           text=True)
        if p.returncode != 2 or "--bucket expects a number of bytes" not in p.stderr:
            failures.append("--bucket=lots: exit %d, %s" % (p.returncode, p.stderr.strip()))
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
