#!/usr/bin/env python3
"""No input crashes or hangs shdc: truncated prefixes and deterministic
random mutations of valid programs, and a few kinds of garbage.

Every run of `shdc check` (and of `shdc emit-ir` when the check passes) must
exit 0 or 1 within the time limit, and exit 1 only with at least one
diagnostic in the fixed format FILE:LINE:COL: error: MESSAGE [E_CODE].
Run by tests/run.py (test_*.py scripts get --shdc PATH).
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIAG = re.compile(r"^[^:\n]+:\d+:\d+: error: .* \[E_[A-Z]+\]$", re.M)
SOURCES = ["tests/e2e/unreduced.shd", "tests/e2e/einsum.shd", "tests/types/seed_001.shd",
           "dsl-examples/mlp_forward.shd"]
PIECES = list("()[]{},@<>:=+-*/\"\\\n x0Y9.;#") + ["\x00", "\xff", "<U:", "<R:", "f32[", "@(", "let ", "fn ",
                                                    "mesh ", "->", "..", "as ", "1e99", "99999999999"]


def run(shdc, path, cmd):
    try:
        p = subprocess.run([shdc, cmd, path], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "timed out"
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode not in (0, 1):
        return "exit %d:\n%s" % (p.returncode, err[-2000:])
    if p.returncode == 1 and not DIAG.search(err):
        return "exit 1 without a diagnostic:\n%s" % err[-2000:]
    if cmd == "check" and p.returncode == 0:
        return run(shdc, path, "emit-ir")
    return None


def cases(sources, mutations, seed):
    rnd = random.Random(seed)
    for rel in sources:
        src = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        step = max(1, len(src) // 150)
        for n in range(0, len(src), step):
            yield "%s[:%d]" % (rel, n), src[:n]
        for k in range(mutations):
            t = list(src)
            for _ in range(rnd.randint(1, 4)):
                i = rnd.randrange(len(t))
                r = rnd.random()
                if r < 0.3:
                    del t[i]
                elif r < 0.7:
                    t.insert(i, rnd.choice(PIECES))
                else:
                    t[i] = rnd.choice(PIECES)
            yield "%s mutation %d" % (rel, k), "".join(t)
    yield "binary", "".join(chr(rnd.randrange(256)) for _ in range(2000))
    yield "deep parens", "mesh {X: 2}\nfn main() {\n let a = " + "(" * 5000 + "1" + ")" * 5000 + "\n}\n"
    yield "long chain", "mesh {X: 2}\nfn main() {\n let a = 1" + "+1" * 50000 + "\n}\n"
    yield "deep blocks", "mesh {X: 2}\nfn main() {\n" + "if true {" * 3000 + "}" * 3000 + "\n}\n"
    yield "long list", "mesh {X: 2}\nfn main() {\n let a = reshape(zeros(f32[2]), [" + "1," * 5000 + "2])\n}\n"
    yield "empty", ""
    yield "only mesh", "mesh {X: 2}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--mutations", type=int, default=60, help="mutated copies of each source")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--all", action="store_true", help="every .shd in tests/ and dsl-examples/ as a source")
    a = ap.parse_args()
    sources = SOURCES
    if a.all:
        import glob
        sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"),
                                                                         recursive=True))
        sources += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "dsl-examples", "*.shd")))
    failures = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fuzz.shd")
        n = 0
        for name, text in cases(sources, a.mutations, a.seed):
            with open(path, "w", encoding="latin-1", errors="replace") as f:
                f.write(text)
            n += 1
            why = run(a.shdc, path, "check")
            if why:
                failures.append("%s: %s\n--- input ---\n%s" % (name, why, text[:500]))
    if failures:
        print("%d of %d inputs failed; first:\n%s" % (len(failures), n, failures[0]))
        sys.exit(1)
    print("%d inputs, no crash or hang" % n)


if __name__ == "__main__":
    main()
