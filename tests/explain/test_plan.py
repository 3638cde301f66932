#!/usr/bin/env python3
"""`shdc plan FILE --devices=N` (issue 18, item 4).

- Every assignment of sizes to the file's mesh axes whose product is N is
  listed once: 1, 2, 4, 8 and 12 devices over two axes, and with --mesh
  fixing one axis; one whose sizes do not divide a dim is listed with its
  E_DIVIS error, not ranked.
- The figures are explain's: for each layout, the communication of a step,
  its collectives and bytes equal `shdc explain --network`'s per-step line
  of the same mesh (a loop without branches), and the peak equals
  explain's peak of main.
- The compute is the contraction FLOPs at --flops: for a matmul in a loop,
  2 M K N / devices per step exactly; the elementwise rate of
  --flops=F,E applies to elementwise work only.
- The table is sorted by estimated step time; --memory marks layouts above
  it as not fitting and ranks them after the ones that fit; exit 1 when
  none fits; the text table and --json agree.
- Usage errors (no --devices, bad --memory/--flops, --mesh sizes that do
  not divide N, --network naming an axis the file lacks) are exit 2.
- GPT-2 (tests/gpt2's tiny configuration): the layouts of 8 devices, the
  one that cannot split the heads rejected.
"""
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

MATMUL = """mesh {X: 1, Y: 1}

const M = 96
const K = 64
const N = 128

fn step(a: f32[M@X, K], b: f32[K, N@Y]) -> f32[M@X, N@Y] {
    return a @ b
}

fn main() {
    let a: f32[M@X, K] = normal(seed=1)
    let b: f32[K, N@Y] = normal(seed=2)
    var s = 0.0
    for i in 0..3 {
        s = s + sum(step(a, b))
    }
    print(s)
}
"""

MLP = """mesh {data: 2, tp: 2}

const B = 64
const D = 32
const H = 128

fn loss(w1: f32[D, H@tp], w2: f32[H@tp, D], x: f32[B@data, D]) -> f32 {
    let h = relu(x @ w1)
    let y: f32[B@data, D] = h @ w2
    return mean(y * y)
}

fn main() {
    var w1: f32[D, H@tp] = normal(seed=1)
    var w2: f32[H@tp, D] = normal(seed=2)
    let x: f32[B@data, D] = normal(seed=3)
    for step in 0..3 {
        let (l, g1, g2) = value_and_grad(loss, wrt=(0, 1))(w1, w2, x)
        w1 = w1 - 0.01 * g1
        w2 = w2 - 0.01 * g2
        print("loss", l)
    }
}
"""

failures = []
check = testlib.checker(failures)
shdc = testlib.run_shdc




def plan_json(exe, src, *args):
    p = shdc(exe, "plan", src, "--json", *args)
    if p.returncode not in (0, 1):
        sys.exit("shdc plan %s %s: exit %d\n%s" % (src, " ".join(args), p.returncode, p.stderr))
    return p.returncode, json.loads(p.stdout)


def mesh_arg(m):
    return ",".join("%s=%d" % kv for kv in m.items())


def explain_step(exe, src, mesh, network):
    """(collectives, bytes, seconds) of explain --network's per-step line,
    and the peak of main."""
    p = shdc(exe, "explain", src, "--mesh", mesh, "--network=" + network)
    if p.returncode:
        sys.exit("explain failed:\n" + p.stderr)
    m = re.search(r"per iteration of the loop at line \d+ of main: (\d+) collectives, (\d+) bytes sent per rank, "
                  r"communication estimated ([\d.]+) (s|ms|us)", p.stdout)
    peak = re.search(r"per step.*\n(?:.*\n)*?  peak live arrays per rank: (\d+) bytes", p.stdout)
    if not m or not peak:
        sys.exit("no per-step line in explain's output:\n" + p.stdout)
    unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6}[m.group(4)]
    return int(m.group(1)), int(m.group(2)), float(m.group(3)) * unit, int(peak.group(1))


def layouts(doc):
    return sorted(tuple(sorted(l["mesh"].items())) for l in doc["layouts"])


def factorisations(n, k):
    if k == 1:
        return [(n,)]
    return [(d,) + r for d in range(1, n + 1) if n % d == 0 for r in factorisations(n // d, k - 1)]


def main():
    exe = testlib.shdc_option()
    with tempfile.TemporaryDirectory() as d:
        mm = os.path.join(d, "matmul.shd")
        mlp = os.path.join(d, "mlp.shd")
        open(mm, "w").write(MATMUL)
        open(mlp, "w").write(MLP)

        # Every layout once; the ones that do not divide M=96 or N=128 with their error.
        for n in (1, 2, 4, 8, 12):
            rc, doc = plan_json(exe, mm, "--devices=%d" % n)
            want = sorted(tuple(sorted({"X": x, "Y": y}.items())) for x, y in factorisations(n, 2))
            check(layouts(doc) == want, "%d devices: layouts %s, expected %s" % (n, layouts(doc), want))
            for l in doc["layouts"]:
                x, y = l["mesh"]["X"], l["mesh"]["Y"]
                divides = 96 % x == 0 and 128 % y == 0
                if check(l["type_checks"] == divides, "%d devices, X=%d,Y=%d: type_checks %s" % (n, x, y, l["type_checks"])):
                    if not divides:
                        check("[E_DIVIS]" in l["error"] and "matmul.shd:" in l["error"],
                              "X=%d,Y=%d: error %r" % (x, y, l["error"]))
                    else:
                        flops = 2 * 96 * 64 * 128 / (x * y)
                        check(l["contraction_flops"] == flops,
                              "X=%d,Y=%d: contraction FLOPs %s, expected 2MKN/devices = %s"
                              % (x, y, l["contraction_flops"], flops))
            check(rc == (0 if any(l["type_checks"] for l in doc["layouts"]) else 1), "%d devices: exit %d" % (n, rc))
        rc, doc = plan_json(exe, mm, "--devices=12", "--mesh", "Y=4")
        check(layouts(doc) == [(("X", 3), ("Y", 4))], "--mesh Y=4 on 12 devices: %s" % layouts(doc))

        # Compute at --flops=F,E: contractions at F, elementwise work at E.
        rc, doc = plan_json(exe, mm, "--devices=2", "--flops=2G,100M", "--mesh", "Y=1")
        l = doc["layouts"][0]
        want = l["contraction_flops"] / 2e9 + l["elementwise_flops"] / 1e8
        check(abs(l["compute_seconds"] - want) <= 1e-12 * want, "compute %s, expected %s" % (l["compute_seconds"], want))
        check(l["elementwise_flops"] > 0 and l["step_loop_line"] == 15, "elementwise FLOPs %s, step loop line %s"
              % (l["elementwise_flops"], l["step_loop_line"]))
        check(abs(l["functions"]["step"] - 2 * 96 * 64 * 128 / 2 / 2e9) < 1e-15,
              "fn step: %s s per call" % l["functions"]["step"])

        # Communication and peak: explain's, for every layout of 8 devices.
        for net in ("25GB/s,5us", os.path.join(ROOT, "tools", "networks", "cluster.net")):
            rc, doc = plan_json(exe, mlp, "--devices=8", "--network=" + net)
            check(len(doc["layouts"]) == 4 and all(l["type_checks"] for l in doc["layouts"]),
                  "mlp on 8 devices: %s" % doc["layouts"])
            flops = set()
            for l in doc["layouts"]:
                if not l["type_checks"]:
                    continue
                m = mesh_arg(l["mesh"])
                colls, sent, secs, peak = explain_step(exe, mlp, m, net)
                check(l["collectives"] == colls and l["bytes_sent"] == sent,
                      "%s: plan %s collectives, %s bytes; explain %d, %d" % (m, l["collectives"], l["bytes_sent"],
                                                                              colls, sent))
                check(abs(l["communication_seconds"] - secs) <= 0.0005 * secs + 1e-7,
                      "%s: plan's communication %s s, explain's %s s" % (m, l["communication_seconds"], secs))
                check(l["peak_bytes"] == peak, "%s: plan's peak %d, explain's %d" % (m, l["peak_bytes"], peak))
                flops.add(l["contraction_flops"] * 8)
            check(len(flops) == 1, "the contraction FLOPs of all devices differ between layouts: %s" % flops)
            times = [l["step_seconds"] for l in doc["layouts"]]
            check(times == sorted(times), "layouts not sorted by step time: %s" % times)

        # --memory: a limit between the layouts' peaks.
        rc, doc = plan_json(exe, mlp, "--devices=4")
        peaks = sorted(l["peak_bytes"] for l in doc["layouts"])
        check(peaks[0] < peaks[-1], "the layouts of the MLP have the same peak: %s" % peaks)
        limit = peaks[0]
        rc, doc = plan_json(exe, mlp, "--devices=4", "--memory=%d" % limit)
        fits = [l["fits"] for l in doc["layouts"]]
        check(fits == sorted(fits, reverse=True) and fits[0] and not fits[-1],
              "--memory=%d: fits %s (fitting layouts first)" % (limit, fits))
        for l in doc["layouts"]:
            check(l["fits"] == (l["peak_bytes"] <= limit), "%s: fits %s with peak %d" % (l["mesh"], l["fits"],
                                                                                         l["peak_bytes"]))
        check(rc == 0, "a layout fits, exit %d" % rc)
        rc, doc = plan_json(exe, mlp, "--devices=4", "--memory=%d" % (peaks[0] - 1))
        check(rc == 1 and not any(l["fits"] for l in doc["layouts"]), "nothing fits: exit %d" % rc)

        # The text table: the same order and figures, the reasons spelled out.
        p = shdc(exe, "plan", mlp, "--devices=4", "--memory=%d" % limit)
        rows = re.findall(r"^\s+(\d+)\s+(\S+=\S+)\s.*?(yes|no: .* over)$", p.stdout, re.M)
        check([r[1] for r in rows] == [mesh_arg(l["mesh"]) for l in doc["layouts"]],
              "the text table's order %s differs from --json's" % [r[1] for r in rows])
        p = shdc(exe, "plan", mm, "--devices=12")
        check(re.search(r"do not type-check on 12 devices:\n  X=1,Y=12: .*matmul.shd:\d+:\d+: .*\[E_DIVIS\]", p.stdout)
              is not None, "the text lists the layouts that do not type-check:\n" + p.stdout)
        check(re.search(r"^per function: .*\nfn\s+X=", p.stdout, re.M) is not None,
              "no per-function table:\n" + p.stdout)

        # Usage errors.
        for args in (["plan", mm], ["plan", mm, "--devices=0"], ["plan", mm, "--devices=4", "--memory=12x"],
                     ["plan", mm, "--devices=4", "--flops=fast"], ["plan", mm, "--devices=6", "--mesh", "X=4"],
                     ["plan", mm, "--devices=4", "--network=tools/networks/cluster.net"],
                     ["explain", mm, "--devices=4"], ["build", mm, "-o", os.path.join(d, "x"), "--memory=1G"]):
            p = shdc(exe, *args)
            check(p.returncode == 2 and "shdc: error:" in p.stderr, "%s: exit %d\n%s" % (args, p.returncode, p.stderr))
        # --flops is bounded as --network's links are (issue 28 F07: --flops=1e-300 made --json write
        # bare inf, which is not JSON), and --json's numbers are JSON at the bounds
        for flops in ("1e-300", "0.5", "1e22", "1,1e-300", "inf", "nan"):
            p = shdc(exe, "plan", mm, "--devices=4", "--json", "--flops=" + flops)
            check(p.returncode == 2 and "--flops expects FLOP/s per device from 1 to 1e21" in p.stderr
                  and not p.stdout, "--flops=%s: exit %d\n%s%s" % (flops, p.returncode, p.stdout, p.stderr))
        for flops in ("1", "1e21,1"):
            p = shdc(exe, "plan", mm, "--devices=4", "--json", "--flops=" + flops)
            try:
                json.loads(p.stdout, parse_constant=lambda c: 1 / 0)   # inf, nan: not JSON
                ok = p.returncode == 0
            except (ValueError, ZeroDivisionError):
                ok = False
            check(ok, "--flops=%s: exit %d, not a JSON document:\n%s" % (flops, p.returncode, p.stdout[:2000]))

        # GPT-2, tiny: 8 devices over (data, model); NH=8 heads split up to 8 ways, so every layout
        # type-checks; with NH=4 the model=8 layout cannot split the heads.
        gpt = os.path.join(ROOT, "dsl-examples", "gpt2.shd")
        tiny = ["-D", "V=256", "-D", "T=8", "-D", "L=2", "-D", "C=32", "-D", "B=8"]
        rc, doc = plan_json(exe, gpt, "--devices=8", *tiny, "-D", "NH=8")
        check(rc == 0 and len(doc["layouts"]) == 4 and all(l["type_checks"] for l in doc["layouts"]),
              "gpt2 NH=8 on 8 devices: %s" % [(l["mesh"], l.get("error")) for l in doc["layouts"]])
        rc, doc = plan_json(exe, gpt, "--devices=8", *tiny, "-D", "NH=4")
        bad = [l for l in doc["layouts"] if not l["type_checks"]]
        check(len(bad) == 1 and bad[0]["mesh"] == {"data": 1, "model": 8} and "E_DIVIS" in bad[0]["error"],
              "gpt2 NH=4 on 8 devices: %s" % [(l["mesh"], l.get("error")) for l in doc["layouts"]])
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("shdc plan: layouts, explain's figures, compute, --memory, errors and GPT-2 checked")


if __name__ == "__main__":
    main()
