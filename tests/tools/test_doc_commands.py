#!/usr/bin/env python3
"""The command examples of the documentation run, and print what they show.

Every ```console block of README.md and docs/*.md is run: each `$ COMMAND`
line by bash in a scratch directory holding links to the repository's
dsl-examples/, tests/ and tools/, with the shdc under test first on PATH;
its output (stdout and stderr) must match the lines shown under it, where
`[...]` stands for any text within a line and a line `...` for any number of
lines; its exit status must be 0, or N when the command ends with
`# exit N`. The blocks of one file share their scratch directory, in order.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks(path):
    with open(path) as f:
        text = f.read()
    return re.findall(r"^```console\n(.*?)^```", text, re.S | re.M)


def commands(block):
    """[(command, exit status, expected lines)]"""
    out = []
    for line in block.split("\n"):
        if line.startswith("$ "):
            cmd = line[2:]
            m = re.search(r"\s+# exit (\d+)$", cmd)
            rc = int(m.group(1)) if m else 0
            out.append((cmd[:m.start()] if m else cmd, rc, []))
        elif out:
            out[-1][2].append(line)
    return out


def line_matches(want, got):
    rx = "^" + "(.*)".join(re.escape(p) for p in want.rstrip().split("[...]")) + "$"
    return re.match(rx, got.rstrip()) is not None


def lines_match(want, got):
    if not want:
        return not got
    if want[0] == "...":
        return any(lines_match(want[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and line_matches(want[0], got[0]) and lines_match(want[1:], got[1:])


def trim(lines):
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    build = os.path.dirname(os.path.abspath(ap.parse_args().shdc))
    env = dict(os.environ)
    env.pop("SHDC_HOME", None)
    env.update({"PATH": build + os.pathsep + env.get("PATH", ""), "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
                # the OpenBLAS note (docs/runtime.md) depends on the CPU, not the docs
                "SHD_QUIET": "1"})
    failures, count = [], 0
    docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for doc in docs:
        bs = blocks(doc)
        if not bs:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for d in ("dsl-examples", "tests", "tools"):
                os.symlink(os.path.join(ROOT, d), os.path.join(tmp, d))
            for b in bs:
                for cmd, rc, want in commands(b):
                    count += 1
                    p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env, capture_output=True, text=True,
                                       timeout=600)
                    got = trim((p.stdout + p.stderr).split("\n"))
                    if p.returncode != rc or not lines_match(trim(want), got):
                        failures.append("%s: $ %s\n  exit %d (expected %d); printed:\n    %s\n  documented:\n    %s" % (
                            os.path.relpath(doc, ROOT), cmd, p.returncode, rc, "\n    ".join(got),
                            "\n    ".join(trim(want))))
    if count < 8:
        failures.append("only %d documented commands found" % count)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d documented commands run and print what the documentation shows" % count)


if __name__ == "__main__":
    main()
