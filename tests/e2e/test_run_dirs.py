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
    print("mkdir, keep_last (links not followed, other names untouched) and manifest as documented; bad paths, "
          "prefixes and counts stop every rank")


if __name__ == "__main__":
    main()
