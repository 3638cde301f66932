#!/usr/bin/env python3
"""mkdir, keep_last and manifest at run time (issue 17, item 3), with
tests/e2e/run_dirs.shd at 2 ranks:

- mkdir creates the directory and its parents; keep_last(dir, "step_", 2)
  leaves the two newest step directories and nothing else of them, and
  leaves alone what does not start with the prefix; an entry named like a
  checkpoint that is a symbolic link to a directory elsewhere is not one
  the run wrote: it stays, and so does what it points to (issue 28);
- each manifest.json is complete JSON: the program's name, the shdc that
  built it (as `shdc --version` names it), the ranks and mesh, its consts
  (with a -D override), every argument's value in this run, then the
  call's keys in order; no temporary is left;
- the config holds every const, of every kind, exactly (issue: dtype
  consts were left out, float consts past the 32nd rounded): a program of
  a dtype const and 40 number consts, built with and without -D DT=bf16
  (and a -D of an int const past the 32nd), has "DT": "f32" resp. "bf16",
  each int const an int (2^53 + 1 too), each float const (0.125, 1e-3,
  0.1, -2.5e-7 at indices past 32) the same double, in source order;
- a directory that cannot be made (a file in the way) stops every rank
  before the first step with the path and the cause; a prefix with '/' and
  a count of 0 given at run time stop every rank with the line.
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

SRC = os.path.join(ROOT, "tests", "e2e", "run_dirs.shd")


# Index -> the literal of a float const of check_config's program (the
# others are ints; C35 is given by -D, C37 is 2^53 + 1, past a double's ints).
FLOATS = {5: "0.75", 33: "0.125", 34: "1e-3", 36: "0.1", 38: "-2.5e-7", 39: "3.0"}


def config_program():
    """A program of a dtype const and 40 number consts, and the config its
    manifest should hold at -D C35=7 (without the DT entry)."""
    lines = ["// consts of every kind in a manifest's config", "mesh {X: 2}", "", "const DT = f32"]
    want = {}
    for i in range(40):
        if i in FLOATS:
            lines.append("const C%d = %s" % (i, FLOATS[i]))
            want["C%d" % i] = float(FLOATS[i])
        elif i == 37:
            lines.append("const C37 = 4398046511104 * 2048 + 1")
            want["C37"] = 2 ** 53 + 1
        else:
            lines.append("const C%d = %d" % (i, -i))
            want["C%d" % i] = 7 if i == 35 else -i
    lines += ["", "fn main() {", "    let x: f32[8@X] = ones()", "    let y = cast(x, DT) * 2.0",
              "    manifest(\"m.json\", total=sum(cast(y, f32)))", "}"]
    return "\n".join(lines) + "\n", want


def check_config(shdc, d, env, failures):
    text, want = config_program()
    src = os.path.join(d, "consts.shd")
    with open(src, "w") as f:
        f.write(text)
    for dt in ("f32", "bf16"):
        flags = ["--mesh", "X=1", "-D", "C35=7"] + (["-D", "DT=" + dt] if dt != "f32" else [])
        exe = testlib.build(shdc, src, os.path.join(d, "consts_" + dt), *flags)
        run = os.path.join(d, "consts_run_" + dt)
        os.makedirs(run)
        p = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1", exe], cwd=run, env=env,
                           capture_output=True, text=True, timeout=120)
        if p.returncode:
            failures.append("consts (DT=%s) failed: %s%s" % (dt, p.stdout, p.stderr))
            continue
        with open(os.path.join(run, "m.json")) as f:
            config = json.load(f)["config"]
        full = dict({"DT": dt}, **want)
        wrong = [k for k in full if k not in config or config[k] != full[k]
                 or isinstance(full[k], int) and type(config[k]) is not int
                 or isinstance(full[k], str) and not isinstance(config[k], str)]
        if wrong or list(config) != list(full):
            failures.append("consts (DT=%s): config %s, expected %s (wrong: %s)" % (dt, config, full, wrong))


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    version = subprocess.run([shdc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, SRC, os.path.join(d, "dirs"), "--mesh", "X=2", "-D", "N=4")
        launch = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", exe]
        run = os.path.join(d, "a", "b", "run")
        os.makedirs(run)
        outside = os.path.join(d, "outside")
        os.makedirs(outside)
        open(os.path.join(outside, "keep.txt"), "w").close()
        os.symlink(outside, os.path.join(run, "step_000000_link"))
        open(os.path.join(run, "notes.txt"), "w").close()
        p = subprocess.run(launch + ["--dir", run, "--steps=5"], cwd=d, env=env, capture_output=True, text=True,
                           timeout=120)
        if p.returncode:
            sys.exit("run_dirs failed: %s%s" % (p.stdout, p.stderr))
        left = sorted(os.listdir(run))
        if left != ["notes.txt", "step_000000_link", "step_000003", "step_000004"]:
            failures.append("keep_last(dir, \"step_\", 2) after 5 steps and a link left %s" % left)
        if not os.path.exists(os.path.join(outside, "keep.txt")):
            failures.append("keep_last followed the link step_000000_link and removed what it points to")
        with open(os.path.join(run, "step_000004", "manifest.json")) as f:
            m = json.load(f)
        want = {"program": "dirs", "shdc": version, "ranks": 2, "mesh": {"X": 2}, "config": {"N": 4, "SCALE": 0.5},
                "args": {"dir": run, "steps": 5, "keep": 2, "prefix": "step_"},
                "step": 4, "total": 0.125, "tag": "run", "done": True}
        if m != want or list(m) != list(want):
            failures.append("manifest.json:\n%s\nexpected\n%s" % (json.dumps(m, indent=1), json.dumps(want, indent=1)))
        check_config(shdc, d, env, failures)
        tmp = [f for _, _, fs in os.walk(run) for f in fs if "tmp" in f or "probe" in f]
        if tmp:
            failures.append("temporaries left: %s" % tmp)
        blocker = os.path.join(d, "file")
        open(blocker, "w").close()
        for args, pattern in (
                (["--dir=" + os.path.join(blocker, "x")], r"line 13: mkdir\(\"%s\"\): cannot create the directory"
                 % re.escape(os.path.join(blocker, "x"))),
                (["--dir=" + os.path.join(d, "p"), "--prefix=a/b"], r"line 21: keep_last\(.*\"a/b\", 2\): the prefix "
                 r"\"a/b\" must be a non-empty name without '/'"),
                (["--dir=" + os.path.join(d, "k"), "--keep=0"], r"line 21: keep_last\(.*0\): keeps 0 entries")):
            p = subprocess.run(launch + args, cwd=d, env=env, capture_output=True, text=True, timeout=120)
            if p.returncode == 0 or not re.search(r"^dirs: rank 0: " + pattern, p.stderr, re.M) or "done" in p.stdout:
                failures.append("%s: exit %d, expected a stop matching %r:\n%s" % (args, p.returncode, pattern,
                                                                                   p.stderr))
        if os.path.exists(os.path.join(d, "p", "step_000001")):
            failures.append("a bad prefix did not stop the run at its first keep_last")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("mkdir, keep_last (links not followed, other names untouched) and manifest as documented (its config "
          "every const exactly: dtype, int, float past the 32nd); bad paths, prefixes and counts stop every rank")


if __name__ == "__main__":
    main()
