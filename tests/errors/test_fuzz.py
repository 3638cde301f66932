#!/usr/bin/env python3
"""No input crashes or hangs shdc: truncated prefixes and deterministic
random mutations of valid programs, a few kinds of garbage, and generated
well-typed programs (fuzz_gen.py).

Every run of `shdc check` (and of `shdc emit-ir` when the check passes) on a
mutated input must exit 0 or 1 within the time limit, and exit 1 only with
at least one diagnostic in the fixed format FILE:LINE:COL: error: MESSAGE
[E_CODE]. A generated program must pass every command (check, types,
emit-ir, emit-ir --global, emit-c, explain) with exit 0, or be refused only
for a constant that has no value ([E_CONST]: the generator writes huge
constants on purpose); some of them are also built for --mesh X=1 and X=2
and run at 1 and 2 ranks, where both runs must exit 0 and print the same
text and numbers (to a tolerance: reductions add in another order).

Run by tests/run.py (test_*.py scripts get --shdc PATH) in its quick form;
`make fuzz` runs it through the ASan/UBSan build for a fixed time
(FUZZ_SECONDS), where the sanitizers' exit codes 86 and 87 mark their
reports. It prints the counts, and every failing input is kept under
--keep (build/fuzz-failures by default) with the reason beside it.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import fuzz_gen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIAG = re.compile(r"^[^:\n]+:\d+:\d+: error: .* \[E_[A-Z]+\]$", re.M)
SOURCES = ["tests/e2e/unreduced.shd", "tests/e2e/einsum.shd", "tests/types/seed_001.shd",
           "dsl-examples/mlp_forward.shd", "tests/e2e/reductions_v1.shd", "tests/index/slice_2d.shd",
           "tests/index/gather.shd",
           # version 2: structs (nested, stacked), generic functions, an import of the standard library
           "tests/struct/basics.shd", "tests/generic/generic.shd", "tests/std/optim.shd"]
# What the mutated sources must hold between them (issue 28: the quick form, which CI runs in both
# passes, once mutated version 1 programs only).
V2_FEATURES = [("a struct", r"^struct \w+ \{"), ("a generic function", r"^fn \w+<"), ("an import", r"^import \"")]
PIECES = list("()[]{},@<>:=+-*/\"\\\n x0Y9.;#") + ["\x00", "\xff", "<U:", "<R:", "f32[", "@(", "let ", "fn ",
                                                    "mesh ", "->", "..", "as ", "1e99", "99999999999",
                                                    "softmax(", "log_softmax(", "logsumexp(", "argmax(",
                                                    "argmin(", "cumsum(", "keepdims=true", "keepdims=",
                                                    "axis=-1", "axis=(", "[:", ":-1]", "[-1]", "[0, 1:2]", "x[",
                                                    "take(", "split(", "one_hot(", "pad(", "concatenate((",
                                                    "**", "%", "&", "|", "!", "gelu(", "erf(", "rsqrt(", "chr(",
                                                    "load(\"t.npy\", ("]


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


SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:exitcode=86", "UBSAN_OPTIONS": "halt_on_error=1:exitcode=87",
           "SHD_QUIET": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
GEN_COMMANDS = [["check"], ["types"], ["emit-ir"], ["emit-ir", "--global"], ["emit-c"], ["explain"]]
NUMBER = re.compile(r"^-?(\d+\.?\d*(e[-+]?\d+)?|inf|nan)\.?$", re.I)


def same_output(a, b):
    """Equal text, numbers equal to a tolerance (NaN equals NaN)."""
    ta, tb = a.replace("[", " ").replace("]", " ").split(), b.replace("[", " ").replace("]", " ").split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if x == y:
            continue
        if not (NUMBER.match(x) and NUMBER.match(y)):
            return False
        fx, fy = float(x.rstrip(".")), float(y.rstrip("."))
        if fx != fx and fy != fy:
            continue
        if not abs(fx - fy) <= 1e-4 + 1e-3 * max(abs(fx), abs(fy)):
            return False
    return True


def run_generated(shdc, d, text, build):
    """None if the generated program passes; else why not. 'const' when
    the program is refused only for a constant without a value."""
    path = os.path.join(d, "gen.shd")
    with open(path, "w", encoding="latin-1") as f:
        f.write(text)
    env = dict(os.environ, **SAN_ENV)
    for cmd in GEN_COMMANDS:
        try:
            p = subprocess.run([shdc] + cmd + [path], capture_output=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            return "shdc %s timed out" % " ".join(cmd)
        err = p.stderr.decode("latin-1")
        codes = re.findall(r"\[(E_[A-Z]+)\]$", err, re.M)
        if p.returncode == 1 and codes and set(codes) == {"E_CONST"}:
            return "const"
        if p.returncode != 0:
            return "shdc %s: exit %d:\n%s" % (" ".join(cmd), p.returncode, err[-2000:])
    if not build:
        return None
    outs = []
    for ranks in (1, 2):
        exe = os.path.join(d, "gen%d" % ranks)
        p = subprocess.run([shdc, "build", path, "--mesh", "X=%d" % ranks, "-O0", "-o", exe], capture_output=True,
                           timeout=600, env=env)
        if p.returncode != 0:
            return "build --mesh X=%d: exit %d:\n%s" % (ranks, p.returncode, p.stderr.decode("latin-1")[-2000:])
        work = os.path.join(d, "run%d" % ranks)
        os.makedirs(work, exist_ok=True)
        try:
            p = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), exe],
                               capture_output=True, timeout=120, env=env, cwd=work)
        except subprocess.TimeoutExpired:
            return "run at %d ranks timed out" % ranks
        if p.returncode != 0:
            return "run at %d ranks: exit %d:\n%s" % (ranks, p.returncode, p.stderr.decode("latin-1")[-2000:])
        outs.append(p.stdout.decode("latin-1"))
    if not same_output(outs[0], outs[1]):
        return "1 and 2 ranks printed different values:\n--- 1 rank ---\n%s\n--- 2 ranks ---\n%s" % (
            outs[0][-1500:], outs[1][-1500:])
    return None


def keep(dirname, name, text, why):
    os.makedirs(dirname, exist_ok=True)
    base = os.path.join(dirname, re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
    with open(base + ".shd", "w", encoding="latin-1", errors="replace") as f:
        f.write(text)
    with open(base + ".txt", "w") as f:
        f.write(why + "\n")


def generated(a, d, failures):
    """Generated programs until the count or the time is reached."""
    counts = {"generated": 0, "passed every command": 0, "refused a constant": 0, "built and run": 0}
    t0 = time.time()
    k = 0
    while (a.seconds and time.time() - t0 < a.seconds) or (not a.seconds and k < a.generate):
        seed = a.seed * 100000 + k
        text = fuzz_gen.program(seed)
        build = a.run_every > 0 and k % a.run_every == 0
        k += 1
        why = run_generated(a.shdc, d, text, build)
        counts["generated"] += 1
        if why == "const":
            counts["refused a constant"] += 1
            continue
        if why:
            failures.append("generated program (seed %d): %s\n--- input ---\n%s" % (seed, why, text[:1500]))
            keep(a.keep, "gen-%d" % seed, text, why)
            continue
        counts["passed every command"] += 1
        counts["built and run"] += build
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--mutations", type=int, default=60, help="mutated copies of each source")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--all", action="store_true", help="every .shd in tests/ and dsl-examples/ as a source")
    ap.add_argument("--generate", type=int, default=40, help="generated programs (when --seconds is 0)")
    ap.add_argument("--seconds", type=float, default=0, help="generate programs for this long instead")
    ap.add_argument("--run-every", type=int, default=20, help="build and run every Nth generated program (0: none)")
    ap.add_argument("--keep", default=os.path.join(ROOT, "build", "fuzz-failures"), help="where failing inputs go")
    a = ap.parse_args()
    sources = SOURCES
    if a.all:
        import glob
        sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"),
                                                                         recursive=True))
        sources += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "dsl-examples", "*.shd")))
    failures = []
    texts = "".join(open(os.path.join(ROOT, s), encoding="utf-8").read() for s in sources)
    for what, pattern in V2_FEATURES:
        if not re.search(pattern, texts, re.M):
            failures.append("no mutated source has %s (%s): add one to SOURCES" % (what, pattern))
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
                keep(a.keep, "mutated-%d" % n, text, why)
        mutated_failures = len(failures)
        counts = generated(a, d, failures)
    print("%d mutated inputs, %d failed" % (n, mutated_failures))
    print(", ".join("%s: %d" % kv for kv in counts.items()) + ", failed: %d" % (len(failures) - mutated_failures))
    if failures:
        print("%d failures, kept in %s; first:\n%s" % (len(failures), a.keep, failures[0]))
        sys.exit(1)


if __name__ == "__main__":
    main()
