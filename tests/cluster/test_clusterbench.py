#!/usr/bin/env python3
"""bench/cluster.py's helpers (issue 30, item 1), without hosts or runs:
the link rates it accepts and refuses, the network file it writes for an
emulated link (read back by its own parser and accepted by `shdc explain
--network`, whose per-step bytes it then reads), the exposed communication
it reads from a `shdc trace-summary` table (with and without an `exposed`
column), the noise and the plan-order check, the -D overrides and the
Markdown table. A second or two; the benchmark itself is `make bench`'s.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import testlib  # noqa: E402
import cluster  # noqa: E402

failures = []
check = testlib.checker(failures)



def raises(f, *args):
    try:
        f(*args)
    except ValueError as e:
        return str(e)
    return None


SUMMARY = """t.json: 2 ranks, mesh data=2,model=1, 1622 spans

time per rank in ms (share of main):
rank        main                gemm         elementwise       communication             waiting       other compute                rest
0         16.970        2.266  13.4%        2.830  16.7%        1.223   7.2%        0.424   2.5%        0.827   4.9%        9.399  55.4%
1         16.856        2.296  13.6%        2.938  17.4%        1.256   7.5%        0.671   4.0%        0.876   5.2%        8.820  52.3%

steps (iterations of main's loops): 4 on rank 0, 2.974 ms each on average

collectives per rank (count, bytes sent):
rank                all_reduce
0        116           1896464
"""


def main():
    shdc = testlib.shdc_option()
    # rates
    check(cluster.parse_rate("unshaped") is None, "unshaped is no shaping")
    for text, bits in (("1gbit", 10**9), ("300mbit", 3 * 10**8), ("2.5Gbit", 25 * 10**8), ("500kbit", 5 * 10**5)):
        check(cluster.parse_rate(text) == bits, "%s: %r, not %d" % (text, cluster.parse_rate(text), bits))
    for bad in ("1gb", "fast", "10kbit", "-1gbit", ""):
        check(raises(cluster.parse_rate, bad), "rate %r was accepted" % bad)
    check(cluster.rate_label("300mbit") == "300 Mbit/s" and cluster.rate_label("1gbit") == "1 Gbit/s",
          "labels: %s, %s" % (cluster.rate_label("300mbit"), cluster.rate_label("1gbit")))
    # the network file: read back, and shdc takes it
    text = cluster.network_file(37.5e6, 41.3e-6, 5.1e9, "emulated-300mbit")
    bw, lat, red = cluster.parse_netcal(text)
    check(abs(bw - 37.5e6) < 1 and abs(lat - 41.3e-6) < 1e-9 and abs(red - 5.1e9) < 1e3,
          "network file read back as %r, %r, %r:\n%s" % (bw, lat, red, text))
    check(raises(cluster.parse_netcal, "hello\n"), "a file without links was read")
    with tempfile.TemporaryDirectory() as d:
        net = os.path.join(d, "link.net")
        with open(net, "w") as f:
            f.write(text)
        p = subprocess.run([shdc, "explain", os.path.join(ROOT, "dsl-examples", "mlp_dp.shd"), "--mesh", "data=2",
                            "--network=" + net], capture_output=True, text=True)
        check(p.returncode == 0 and "37.5 MB/s" in p.stdout, "explain --network=%s: exit %d\n%s%s" % (
            text, p.returncode, p.stdout[:2000], p.stderr))
        if p.returncode == 0:
            c, b = cluster.explain_step(p.stdout)
            check(b > 0 and ("%d collectives, %d bytes sent per rank" % (c, b)) in p.stdout,
                  "explain's per-step figures read as %d, %d" % (c, b))
    check(raises(cluster.explain_step, "fn main\n  3 collectives\n"), "a report without a step was read")
    c, b = cluster.timeline_step(SUMMARY)
    check((c, b) == (29, 474116), "the timeline's collectives and bytes per step read as %r, %r" % (c, b))
    two = SUMMARY.replace("rank                all_reduce\n0        116           1896464",
                          "rank  all_reduce  all_gather\n0        116           1896464    4    100")
    c, b = cluster.timeline_step(two)
    check((c, b) == (30, 474141), "two kinds of collectives read as %r, %r" % (c, b))
    # exposed communication: (communication + waiting) / steps of the worst rank, or an exposed column
    got = cluster.exposed_comm_ms(SUMMARY)
    check(abs(got - (1.256 + 0.671) / 4) < 1e-9, "exposed communication %r" % got)
    ex = SUMMARY.replace("communication             waiting", "communication     exposed comm")
    got = cluster.exposed_comm_ms(ex)
    check(abs(got - 0.671 / 4) < 1e-9, "the exposed column read as %r" % got)
    check(raises(cluster.exposed_comm_ms, "nothing\n"), "a summary without a table was read")
    win = SUMMARY.replace("time per rank in ms (share of main)", "time per rank in ms over the traced steps "
                          "(SHD_TRACE_STEPS=2:; share of them)").replace("rank        main", "rank       steps")
    got = cluster.exposed_comm_ms(win)
    check(abs(got - (1.256 + 0.671) / 4) < 1e-9, "a window's summary read as %r" % got)
    # noise and plan's order
    med, noise = cluster.median_and_noise([10, 11, 12, 13, 30])
    check(med == 12 and noise > 0, "median and noise %r, %r" % (med, noise))
    check(cluster.timed([50, 40, 10, 11]) == [10, 11] and cluster.timed([5, 6]) == [5, 6], "timed steps")
    rows = [("a", 100.0, 2.0, 90.0), ("b", 103.0, 2.0, 80.0), ("c", 150.0, 5.0, 70.0)]
    got = [(x[0], y[0], ok) for x, y, ok in cluster.order_checks(rows)]
    check(got == [("a", "c", False), ("b", "c", False)], "order checks %r (a and b are within noise)" % got)
    # -D overrides
    s = cluster.sizes_with(["C=64", "KV=1"], False)
    check(s["gpt2"]["C"] == 64 and s["llama"]["C"] == 64 and s["llama"]["KV"] == 1 and "KV" not in s["gpt2"],
          "overrides %r" % s)
    check(cluster.sizes_with([], True)["gpt2"]["C"] == 64, "--quick's sizes")
    for bad in ("ZZ=3", "C=x", "C"):
        check(raises(cluster.sizes_with, [bad], False), "-D %s was accepted" % bad)
    md = cluster.markdown(["a", "b"], [[1, "x"]])
    check(md == "| a | b |\n|---|---|\n| 1 | x |", "markdown %r" % md)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("bench/cluster.py's helpers: rates, network file, explain, trace summary, noise, order, sizes, table")


if __name__ == "__main__":
    main()
