#!/usr/bin/env python3
"""A built program's command line (issue 11, item 5).

`--help` lists the program's args with their types and defaults (at any rank
count) and exits 0. An unknown or malformed flag, a bare word, a missing
value, a value that does not parse and one out of range for its type (2^31
for an i32, 1e99 for an f32, 1e999 for an f64, inf and nan for either
float) are each reported once, by
rank 0, naming the flag, and the run exits with status 1 on every rank,
without hanging. Good values run, and the last of a repeated flag wins.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]

PROGRAM = """mesh {X: 2}
fn main() {
    let steps = arg("steps", 10)
    let lr: f32 = arg("lr", 0.001)
    let scale: f64 = arg("scale", 2.5)
    let flag = arg("flag", false)
    print("values", steps, lr, scale, flag)
}
"""

FAILS = [
    (["--zzz=1"], r"unknown argument '--zzz=1'; this program takes --steps, --lr, --scale, --flag"),
    (["-n=3"], r"unexpected argument '-n=3': arguments are written --NAME=VALUE"),
    (["foo"], r"unexpected argument 'foo'"),
    (["--steps=3", "bar"], r"unexpected argument 'bar'"),
    (["--steps"], r"argument --steps needs a value: --steps=i32"),
    (["--steps=3000000000"], r"argument --steps=3000000000: out of range for i32"),
    (["--steps=-2147483649"], r"out of range for i32"),
    (["--steps=1.5"], r"argument --steps=1.5: expected an i32 integer"),
    (["--lr=1e99"], r"argument --lr=1e99: out of range for f32"),
    (["--scale=1e999"], r"argument --scale=1e999: out of range for f64"),
    (["--lr=inf"], r"argument --lr=inf: not a finite number \(an f32 argument is a number of magnitude at most"),
    (["--lr=nan"], r"argument --lr=nan: not a finite number"),
    (["--scale=-Infinity"], r"argument --scale=-Infinity: not a finite number \(an f64 argument"),
    (["--scale=NaN"], r"argument --scale=NaN: not a finite number"),
    (["--lr=abc"], r"argument --lr=abc: expected a number"),
    (["--lr="], r"argument --lr=: expected a number"),
    (["--flag=maybe"], r"argument --flag=maybe: expected true or false"),
    (["--Steps=3"], r"unknown argument '--Steps=3'"),
]


def run(cmd, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    except subprocess.TimeoutExpired:
        return None


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1")
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(d, "args.shd"), os.path.join(d, "args"), text=PROGRAM)
        for launch in (MPIRUN + [exe], [exe]):   # the help answers at any rank count
            p = run(launch + ["--help"], cwd=d, env=env)
            want = [r"^usage: ", r"^  --steps=i32  \(default 10\)$", r"^  --lr=f32  \(default 0\.001\)$",
                    r"^  --scale=f64  \(default 2\.5\)$", r"^  --flag=bool  \(default false\)$"]
            if not p or p.returncode != 0 or not all(re.search(w, p.stdout, re.M) for w in want):
                failures.append("%s --help: %s" % (" ".join(launch[-1:]), p and (p.returncode, p.stdout, p.stderr)))
        p = run(MPIRUN + [exe, "--steps=1", "--steps=12", "--lr=0.5", "--scale=-1e300", "--flag"], cwd=d, env=env)
        if not p or p.returncode != 0 or "values 12 0.5 -1e+300 True" not in p.stdout:
            failures.append("good arguments: %s" % (p and (p.returncode, p.stdout, p.stderr)))
        for args, pattern in FAILS:
            p = run(MPIRUN + [exe] + args, cwd=d, env=env)
            if p is None:
                failures.append("%s: hung" % " ".join(args))
                continue
            msgs = re.findall(r"^shdc: rank \d+: .*$", p.stderr, re.M)
            if p.returncode != 1 or len(msgs) != 1 or not re.search(r"^shdc: rank 0: .*" + pattern, msgs[0]) \
                    or "values" in p.stdout:
                failures.append("%s: exit %d, expected 1 and one message matching %r:\n%s" % (
                    " ".join(args), p.returncode, pattern, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("--help, good values and %d bad command lines behave as documented" % len(FAILS))


if __name__ == "__main__":
    main()
