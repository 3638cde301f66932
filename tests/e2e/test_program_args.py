#!/usr/bin/env python3
"""A built program's command line (issue 11, item 5; issue 17, item 2).

`--help` lists the program's args with their types, help texts and
defaults (at any rank count) and exits 0; an arg read by two calls (with
one default: tests/errors/arg_twice.shd) is listed once, and both read the
value given. A value follows '=' or is the next
word (`--steps 3`), a bool's only after '='. An unknown or malformed flag, a
bare word, a missing value, a value that does not parse and one out of range
for its type (2^31 for an i32, 1e99 for an f32, 1e999 for an f64, inf and nan for either float) are each
reported once, by rank 0, naming the flag, with the program's name (not
shdc's) at the start of the message, and the run exits with status 1 on
every rank, without hanging; so is a flag given twice (issue 28, P5: which
one was meant is not the program's to guess), and an f32 out of range
says f32 and its range (P6). A mistyped flag gets the nearest one
(did you mean --steps?), and --version says which shdc built the program,
for which mesh, with which runtime ABI (issue 27, items 4 and 6). Good values run. A wrong rank count is still caught when a value happens to be
"-h".
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
fn steps_again() -> i32 { return arg("steps", 10, help="training steps") }
fn main() {
    let steps = arg("steps", 10, help="training steps")
    let lr: f32 = arg("lr", 0.001)
    let scale: f64 = arg("scale", 2.5)
    let flag = arg("flag", false)
    let name = arg("name", "run")
    print("values", steps, lr, scale, flag, name, steps_again())
}
"""

FAILS = [
    (["--zzz=1"], r"unknown argument '--zzz=1'; this program takes --steps, --lr, --scale, --flag, --name"),
    (["-n=3"], r"unexpected argument '-n=3': arguments are written --NAME=VALUE or --NAME VALUE"),
    (["foo"], r"unexpected argument 'foo'"),
    (["--steps=3", "bar"], r"unexpected argument 'bar'"),
    (["--steps", "3", "bar"], r"unexpected argument 'bar'"),
    (["--steps"], r"argument --steps needs a value: --steps=i32 or --steps i32"),
    (["--steps", "--lr=1"], r"argument --steps needs a value"),
    (["--steps", "x"], r"argument --steps x: expected an i32 integer"),
    (["--flag", "false"], r"unexpected argument 'false': a bool flag takes its value after '=': --flag=false"),
    (["--metrics=m.jsonl"], r"unknown argument '--metrics=m.jsonl'"),
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
    (["--Steps=3"], r"unknown argument '--Steps=3'; did you mean --steps\?"),
    (["--step=3"], r"unknown argument '--step=3'; did you mean --steps\? \(this program takes --steps, --lr, "),
    (["--nmae=x"], r"unknown argument '--nmae=x'; did you mean --name\?"),
    (["--lr=1e400"], r"argument --lr=1e400: out of range for f32 \(magnitude at most 3\.4028235e\+38\)$"),
    (["--steps=5", "--steps=6"], r"argument --steps is given twice \(--steps=5, then --steps=6\): give it once$"),
    (["--flag", "--lr", "1", "--flag=false"], r"argument --flag is given twice \(--flag=, then --flag=false\)"),
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
            want = [r"^usage: mpirun -np N args \[--NAME=VALUE \| --NAME VALUE \.\.\.\]$",
                    r"^  --steps=i32  training steps \(default 10\)$", r"^  --lr=f32     \(default 0\.001\)$",
                    r"^  --scale=f64  \(default 2\.5\)$", r"^  --flag=bool  \(default false\)$",
                    r'^  --name=str   \(default "run"\)$']
            if not p or p.returncode != 0 or not all(re.search(w, p.stdout, re.M) for w in want) \
                    or p.stdout.count("--steps=") != 1:
                failures.append("%s --help: %s" % (" ".join(launch[-1:]), p and (p.returncode, p.stdout, p.stderr)))
        for good in (["--steps=12", "--lr=0.5", "--scale=-1e300", "--flag", "--name=a b"],
                     ["--steps", "12", "--lr", "0.5", "--scale", "-1e300", "--flag", "--name", "a b"],
                     ["--flag=true", "--steps=12", "--lr", "5e-1", "--scale=-1e300", "--name", "a b"]):
            p = run(MPIRUN + [exe] + good, cwd=d, env=env)
            if not p or p.returncode != 0 or "values 12 0.5 -1e+300 True a b 12" not in p.stdout:
                failures.append("good arguments %s: %s" % (good, p and (p.returncode, p.stdout, p.stderr)))
        # --version: the shdc that built it, its mesh and the runtime ABI, on rank 0 only
        version = subprocess.run([shdc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        p = run([exe, "--version"], cwd=d, env=env)   # at any rank count, as --help
        if not p or p.returncode != 0 or p.stdout != "args: built by %s for --mesh X=2 (2 ranks); runtime ABI %s\n" % (
                version, re.search(r"runtime ABI (\d+)", subprocess.run([shdc, "--version"], capture_output=True,
                                                                       text=True).stdout).group(1)):
            failures.append("--version: %r" % ((p.returncode, p.stdout, p.stderr) if p else None,))
        # "-h" as a value is not --help: the wrong rank count is still reported
        p = run(MPIRUN[:-1] + ["3", exe, "--name", "-h"], cwd=d, env=env)
        if not p or p.returncode != 1 or not re.search(r"^args: error: this program was built for mesh \{X: 2\} "
                                                       r"\(2 ranks\) but was started with 3 ranks", p.stderr, re.M):
            failures.append("--name -h at 3 ranks: %s" % (p and (p.returncode, p.stdout, p.stderr)))
        for args, pattern in FAILS:
            p = run(MPIRUN + [exe] + args, cwd=d, env=env)
            if p is None:
                failures.append("%s: hung" % " ".join(args))
                continue
            msgs = re.findall(r"^\S+: rank \d+: .*$", p.stderr, re.M)
            if p.returncode != 1 or len(msgs) != 1 or not re.search(r"^args: rank 0: .*" + pattern, msgs[0]) \
                    or "values" in p.stdout:
                failures.append("%s: exit %d, expected 1 and one message matching %r:\n%s" % (
                    " ".join(args), p.returncode, pattern, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("--help, good values and %d bad command lines behave as documented" % len(FAILS))


if __name__ == "__main__":
    main()
