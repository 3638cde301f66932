#!/usr/bin/env python3
"""metrics(key=value, ...) and the program flag --metrics=FILE (issue 17,
item 2).

tests/e2e/metrics.shd calls metrics(), so it takes --metrics=FILE (listed by --help;
without metrics() the flag is unknown). At 2 ranks and on one rank:

- FILE gets one line per call, from rank 0 only, each a JSON object that a
  strict parser reads (NaN and the infinities are the strings "NaN",
  "Infinity", "-Infinity"), with the keys in the call's order: i32 and bool
  as JSON numbers and booleans, an f32 as the shortest decimal that reads
  back as the same f32 (equal to what str() prints), an f64 likewise, a
  pending sum reduced, a str escaped (bytes that are not UTF-8 as U+FFFD);
- a metrics() inside a differentiated function writes once per call;
- a second run appends to the lines of the first;
- each line is in the file as soon as the call returns: a run that stops
  with a run-time error in a later statement keeps every line before it;
- a FILE that cannot be opened (no such directory, a directory) stops
  every rank before the first step, naming FILE and the cause;
- without --metrics nothing is written and the run is the same.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = os.path.join(ROOT, "tests", "e2e", "metrics.shd")

NAME = "run \"q\" \\ \x01 \u00e9 \ufffd"


def strict(text):
    def no_constant(c):
        raise ValueError("not JSON: %s" % c)
    return json.loads(text, parse_constant=no_constant)


def lines(path, since=None, until=None):
    """The file's objects, each without its "time", which must be its last
    key: Unix seconds, not decreasing, and within [since, until] when given
    (the run's own start and end)."""
    with open(path, encoding="utf-8") as f:
        got = [strict(line) for line in f.read().splitlines()]
    last = 0.0
    for x in got:
        keys = list(x)
        t = x.pop("time", None)
        if keys[-1:] != ["time"] or not isinstance(t, float) or t < last:
            raise ValueError("%s: no wall-clock \"time\" as its last key after %s" % (keys, last))
        if since is not None and not since - 1 <= t <= until + 1:
            raise ValueError("time %s outside the run's [%s, %s]" % (t, since, until))
        last = t
    return got


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as d:
        for mesh, np in (("X=2", 2), ("X=1", 1)):
            exe = testlib.build(shdc, PROGRAM, os.path.join(d, "m%d" % np), "--mesh", mesh)
            launch = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np), exe]
            m = os.path.join(d, "m%d.jsonl" % np)
            since = time.time()
            p = subprocess.run(launch + ["--metrics", m], cwd=d, env=env, capture_output=True, text=True,
                               timeout=120)
            until = time.time()
            if p.returncode:
                failures.append("%d ranks: exit %d\n%s" % (np, p.returncode, p.stderr))
                continue
            try:
                got = lines(m, since, until)
            except ValueError as e:
                failures.append("%d ranks: %s is not JSON Lines: %s" % (np, m, e))
                continue
            printed = re.findall(r"^loss (\S+) half (\S+)$", p.stdout, re.M)
            outer = [x for x in got if "step" in x]
            inner = [x for x in got if "inner" in x]
            if len(outer) != 3 or len(inner) != 1 or len(got) != 4 or inner[0] != {"inner": 8.0}:
                failures.append("%d ranks: %d lines %s, expected 3 steps and one line of the differentiated "
                                "function" % (np, len(got), got))
                continue
            for s, (x, (loss, half)) in enumerate(zip(outer, printed)):
                want = {"step": s, "loss": float(loss), "pending": 8.0, "name": NAME, "ok": s % 2 == 0,
                        "half": float(half), "inf": "Infinity", "ninf": "-Infinity", "nan": "NaN"}
                if x != want or list(x) != list(want):
                    failures.append("%d ranks, step %d: %s, expected %s" % (np, s, x, want))
            with open(m) as f:
                text = f.read()
            if re.search(r'"loss": %s,' % re.escape(printed[0][0]), text) is None:
                failures.append("%d ranks: the f32 loss is not written as str() prints it (%s):\n%s"
                                % (np, printed[0][0], text))
            p = subprocess.run(launch + ["--metrics=" + m, "--steps=2"], cwd=d, env=env, capture_output=True,
                               text=True, timeout=120)
            if p.returncode or [x.get("step") for x in lines(m)] != [0, 1, 2, None, 0, 1, None]:
                failures.append("%d ranks: a second run does not append: %s" % (np, lines(m)))
            f2 = os.path.join(d, "fail%d.jsonl" % np)
            p = subprocess.run(launch + ["--metrics=" + f2, "--fail=1"], cwd=d, env=env, capture_output=True,
                               text=True, timeout=120)
            if p.returncode == 0 or "out of range" not in p.stderr or \
                    [x["step"] for x in lines(f2)] != [0, 1]:
                failures.append("%d ranks: a run stopped in step 1 after its metrics: exit %d, lines %s\n%s"
                                % (np, p.returncode, os.path.exists(f2) and lines(f2), p.stderr))
            for bad, cause in ((os.path.join(d, "none", "m.jsonl"), "No such file or directory"),
                               (d, "Is a directory")):
                p = subprocess.run(launch + ["--metrics=" + bad], cwd=d, env=env, capture_output=True, text=True,
                                   timeout=120)
                want = r"^m%d: rank 0: --metrics=%s: .*%s" % (np, re.escape(bad), cause)
                if p.returncode != 1 or not re.search(want, p.stderr, re.M) or "loss" in p.stdout:
                    failures.append("%d ranks, --metrics=%s: exit %d, expected 1 and %r before any step:\n%s%s"
                                    % (np, bad, p.returncode, want, p.stdout, p.stderr))
            before = set(os.listdir(d))
            p = subprocess.run(launch, cwd=d, env=env, capture_output=True, text=True, timeout=120)
            if p.returncode or set(os.listdir(d)) != before or len(re.findall("^loss", p.stdout, re.M)) != 3:
                failures.append("%d ranks without --metrics: exit %d, new files %s"
                                % (np, p.returncode, set(os.listdir(d)) - before))
        p = subprocess.run([os.path.join(d, "m1"), "--help"], cwd=d, env=env, capture_output=True, text=True,
                           timeout=60)
        if not re.search(r"^  --metrics=FILE +append one JSON object per line", p.stdout, re.M):
            failures.append("--help does not list --metrics=FILE:\n%s" % p.stdout)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("metrics: strict JSON Lines from rank 0, keys in order, NaN/inf as strings, appended, on disk at once, "
          "bad paths stop the run before its first step")


if __name__ == "__main__":
    main()
