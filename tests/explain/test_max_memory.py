#!/usr/bin/env python3
"""`shdc build/check --max-memory=BYTES` (issue 18, item 5): a program whose
peak bytes of live arrays per rank exceed the limit is a compile-time error
[E_MEMORY] at the line of the peak, naming the function, the peak (explain's
figure, which SHD_TRACE measures) and the largest arrays live then; at the
peak itself it passes.

- a call: the peak is in the callee, named with the call's line; the
  caller's arrays and the callee's own are both listed, largest first;
- a loop under grad: the residual tapes are named;
- a larger mesh lowers the peak of sharded arrays, so the same limit
  passes there;
- build writes nothing when it fails, and the program it builds at the
  limit measures exactly that peak (SHD_TRACE=1);
- --diagnostics=json carries the error with its notes;
- bad limits and the option on other commands are usage errors (exit 2).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

CALL = """mesh {X: 2}

const N = 2048
const D = 512

fn wide(x: f32[N@X, D], w: f32[D, D]) -> f32[N@X] {
    let h = x @ w
    let g = exp(h) @ w
    return sum(g, axis=1)
}

fn main() {
    let x: f32[N@X, D] = normal(seed=1)
    let w = normal(f32[D, D], seed=2) * 0.01
    let s = wide(x, w)
    save("s.npy", s)
}
"""

LOOP = """mesh {X: 2}

const L = 4
const N = 4096
const D = 32

fn deep(w: f32[L, D, D], x: f32[N@X, D]) -> f32 {
    var h = x
    for l in 0..L {
        h = tanh(h @ (w[l] as f32[D, D]))
    }
    return sum(h * h)
}

fn main() {
    var w = normal(f32[L, D, D], seed=1) * 0.05
    let x: f32[N@X, D] = normal(seed=2)
    for step in 0..2 {
        let (l, g) = value_and_grad(deep, wrt=(0,))(w, x)
        w = w - 0.1 * g
        print("loss", l)
    }
}
"""

DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*) \[(?P<code>E_[A-Z]+)\]$", re.M)
failures = []
check = testlib.checker(failures)
shdc = testlib.run_shdc




def peak(exe, src, mesh):
    p = shdc(exe, "explain", src, "--mesh", mesh)
    m = re.search(r"^fn main\n(?:  .*\n)*?  peak live arrays per rank: (\d+) bytes", p.stdout, re.M)
    if p.returncode or not m:
        sys.exit("explain %s: exit %d\n%s%s" % (src, p.returncode, p.stdout, p.stderr))
    return int(m.group(1))


def errors(stderr):
    return [m.groupdict() for m in DIAG.finditer(stderr)]


def main():
    exe = testlib.shdc_option()
    with tempfile.TemporaryDirectory() as d:
        call, loop = os.path.join(d, "call.shd"), os.path.join(d, "loop.shd")
        open(call, "w").write(CALL)
        open(loop, "w").write(LOOP)

        # A call: at the limit it passes, one byte below it the error names the peak and its place.
        p2 = peak(exe, call, "X=2")
        ok = shdc(exe, "check", call, "--mesh", "X=2", "--max-memory=%d" % p2)
        check(ok.returncode == 0 and not ok.stderr, "check at the peak: exit %d\n%s" % (ok.returncode, ok.stderr))
        bad = shdc(exe, "check", call, "--mesh", "X=2", "--max-memory=%d" % (p2 - 1))
        errs = errors(bad.stderr)
        if check(bad.returncode == 1 and len(errs) == 1 and errs[0]["code"] == "E_MEMORY",
                 "check one byte below the peak: exit %d\n%s" % (bad.returncode, bad.stderr)):
            e = errs[0]
            msg = e["msg"]
            check(e["line"] in ("7", "8"), "the peak is reported at line %s, not in wide's body:\n%s" % (e["line"], msg))
            check(("fn main needs %d bytes" % p2) in msg and ("--max-memory=%d" % (p2 - 1)) in msg
                  and "--mesh X=2" in msg, "the message does not name main, the peak and the limit:\n" + msg)
            check("in wide (called from main at line 15)" in msg, "the message does not name the callee:\n" + msg)
            listed = msg.split("the largest arrays live then: ")[1].split("; shard them")[0].split("; ")
            check(any(a.startswith("x f32[2048@X,512] (line 13, main): 2.0 MiB") for a in listed) and
                  any(a.startswith("h f32[2048@X,512] (line 7, wide): 2.0 MiB") for a in listed) and
                  any(a.startswith("w f32[512,512] (line 14, main): 1.0 MiB") for a in listed),
                  "the caller's x and w and wide's h are not listed:\n" + msg)
            sizes = [float(re.search(r": (?:\d+ arrays, )?([\d.]+) (KiB|MiB)", a).group(1)) *
                     (1024 if "MiB" in a else 1) for a in listed]
            check(sizes == sorted(sizes, reverse=True), "not largest first: %s" % listed)
            check("note: x, 2.0 MiB per rank at the peak, is defined here" in bad.stderr,
                  "no note at the largest array's definition:\n" + bad.stderr)

        # A larger mesh shards x and the products: the peak per rank falls.
        p4 = peak(exe, call, "X=4")
        check(p4 < p2, "the peak at X=4 (%d) is not below X=2's (%d)" % (p4, p2))
        r4 = shdc(exe, "check", call, "--mesh", "X=4", "--max-memory=%d" % p4)
        check(r4.returncode == 0, "X=4 at its peak: exit %d\n%s" % (r4.returncode, r4.stderr))

        # build: nothing written above the limit; at the limit the program measures that peak.
        prog = os.path.join(d, "prog")
        b = shdc(exe, "build", call, "--mesh", "X=2", "--max-memory=%dB" % (p2 - 1), "-o", prog)
        check(b.returncode == 1 and "[E_MEMORY]" in b.stderr and not os.path.exists(prog),
              "build above the limit: exit %d, output %s\n%s" % (b.returncode, os.path.exists(prog), b.stderr))
        b = shdc(exe, "build", call, "--mesh", "X=2", "--max-memory=%d" % p2, "-o", prog)
        if check(b.returncode == 0 and os.path.exists(prog), "build at the limit: exit %d\n%s" % (b.returncode,
                                                                                                 b.stderr)):
            env = dict(os.environ, SHD_TRACE="1", SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
            r = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", prog], cwd=d,
                               capture_output=True, text=True, timeout=120, env=env)
            m = re.search(r"max over ranks: peak_bytes=(\d+)", r.stderr)
            check(r.returncode == 0 and m and int(m.group(1)) == p2,
                  "the program measures a peak of %s bytes, the limit was %d:\n%s" % (m and m.group(1), p2, r.stderr))

        # A loop under grad: the tapes of residuals are named.
        pl = peak(exe, loop, "X=2")
        r = shdc(exe, "check", loop, "--max-memory=%d" % (pl - 1))
        errs = errors(r.stderr)
        if check(r.returncode == 1 and len(errs) == 1, "loop: exit %d\n%s" % (r.returncode, r.stderr)):
            msg = errs[0]["msg"]
            check("the largest arrays live then: the tape of the loop at line 9" in msg and
                  "value_and_grad(deep" in msg, "the residual tape is not named first:\n" + msg)

        # JSON.
        j = shdc(exe, "check", "--diagnostics=json", call, "--max-memory=1MiB")
        doc = json.loads(j.stdout)
        check(j.returncode == 1 and len(doc) == 1 and doc[0]["code"] == "E_MEMORY" and doc[0]["notes"],
              "json: exit %d %s" % (j.returncode, j.stdout))

        # GPT-2 (the tiny test configuration): data=2 halves the activations; a limit between passes there only.
        gpt = os.path.join(ROOT, "dsl-examples", "gpt2.shd")
        tiny = ["-D", "V=256", "-D", "T=8", "-D", "L=2", "-D", "NH=8", "-D", "C=32", "-D", "B=8"]
        p = [shdc(exe, "explain", gpt, "--mesh", m, *tiny) for m in ("data=1,model=1", "data=2,model=2")]
        pk = [int(re.search(r"^fn main\n(?:  .*\n)*?  peak live arrays per rank: (\d+)", q.stdout, re.M).group(1))
              for q in p]
        check(pk[1] < pk[0], "gpt2 peaks %s" % pk)
        mid = (pk[0] + pk[1]) // 2
        a = shdc(exe, "check", gpt, "--mesh", "data=1,model=1", "--max-memory=%d" % mid, *tiny)
        b = shdc(exe, "check", gpt, "--mesh", "data=2,model=2", "--max-memory=%d" % mid, *tiny)
        check(a.returncode == 1 and "fn main needs %d bytes" % pk[0] in a.stderr and b.returncode == 0,
              "gpt2 with --max-memory=%d: one device exit %d, 2x2 exit %d\n%s%s" % (mid, a.returncode, b.returncode,
                                                                                 a.stderr, b.stderr))

        # Usage errors.
        for args in (["check", call, "--max-memory=0"], ["check", call, "--max-memory=1.5"],
                     ["check", call, "--max-memory=lots"], ["explain", call, "--max-memory=1G"],
                     ["plan", call, "--devices=2", "--max-memory=1G"]):
            u = shdc(exe, *args)
            check(u.returncode == 2 and "shdc: error:" in u.stderr, "%s: exit %d\n%s" % (args, u.returncode, u.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("--max-memory: the peak, its place and its arrays, at the limit and one byte below")


if __name__ == "__main__":
    main()
