#!/usr/bin/env python3
"""Every count a program controls, at its limit and one past it, through the
ASan/UBSan build of shdc (build/san/shdc, made by `make san`, which `make
test` builds first).

Counts without a limit (parameters, call arguments, results, tuple sizes,
wrt positions, print items, loop carries, nested loops, string and
identifier lengths, chains of elementwise operations, struct fields, the
leaves a struct operation and its sum cover, distinct instances of a
generic function) are exercised well past any size a fixed array could have
held, and the programs are built and run: their printed values are
checked. Counts with a limit (dims of an array, mesh axes, axes of a dim or
an annotation, annotations of a type, einsum labels and operands,
expression and block nesting, struct nesting and leaves, generic
instantiations nested in each other, import chains) are accepted at the
limit and rejected one past it with their error code on their line.

A sanitizer report, a crash or a hang fails the test (the sanitizers exit
86 and 87, see the Makefile's fuzz target).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:exitcode=86", UBSAN_OPTIONS="halt_on_error=1:exitcode=87",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", SHD_QUIET="1")
failures = []


def fail(name, why):
    failures.append("%s: %s" % (name, why))


def shdc_run(shdc, args, timeout=120):
    try:
        p = subprocess.run([shdc] + args, capture_output=True, text=True, errors="replace", timeout=timeout,
                           env=ENV)
    except subprocess.TimeoutExpired:
        return None
    return p


def expect_ok(shdc, tmp, name, src, stdout_re=None, build_flags=()):
    """src checks; with stdout_re it is also built (with build_flags) and run on one rank."""
    path = os.path.join(tmp, name + ".shd")
    with open(path, "w") as f:
        f.write(src)
    p = shdc_run(shdc, ["check", path])
    if p is None or p.returncode != 0:
        fail(name, "check did not pass: %s" % ("timeout" if p is None else p.stderr[-1500:]))
        return
    if stdout_re is None:
        return
    exe = os.path.join(tmp, name)
    p = shdc_run(shdc, ["build", path, "-o", exe] + list(build_flags), timeout=600)
    if p is None or p.returncode != 0:
        fail(name, "build failed: %s" % ("timeout" if p is None else p.stderr[-1500:]))
        return
    try:
        r = subprocess.run(["mpirun", "--oversubscribe", "-np", "1", exe], capture_output=True, text=True,
                           timeout=120, env=ENV, cwd=tmp)
    except subprocess.TimeoutExpired:
        fail(name, "the program timed out")
        return
    if r.returncode != 0 or not re.search(stdout_re, r.stdout):
        fail(name, "exit %d, stdout does not match %r:\n%s%s" % (r.returncode, stdout_re, r.stdout[-1500:],
                                                                   r.stderr[-1500:]))


def expect_error(shdc, tmp, name, src, code, line):
    path = os.path.join(tmp, name + ".shd")
    with open(path, "w") as f:
        f.write(src)
    p = shdc_run(shdc, ["check", path])
    if p is None:
        fail(name, "check timed out")
        return
    want = re.compile(r"^%s:%d:\d+: error: .*\[%s\]$" % (re.escape(path), line, code), re.M)
    if p.returncode != 1 or not want.search(p.stderr):
        fail(name, "want [%s] on line %d, exit 1; got exit %d:\n%s" % (code, line, p.returncode, p.stderr[-1500:]))


def mesh_of(n):
    return "mesh {%s}\n" % ", ".join("A%d: 1" % i for i in range(n))


def limited(shdc, tmp):
    """Counts with a limit: accepted at it, rejected past it."""
    for n, ok in ((8, True), (9, False)):
        src = "mesh {X: 1}\nfn main() {\n    let a: f32[%s] = ones()\n    print(sum(a))\n}\n" % ",".join(["1"] * n)
        (expect_ok(shdc, tmp, "rank%d" % n, src) if ok else
         expect_error(shdc, tmp, "rank%d" % n, src, "E_SPEC", 3))
        src = mesh_of(n) + "fn main() {\n    print(1)\n}\n"
        (expect_ok(shdc, tmp, "mesh%d" % n, src) if ok else
         expect_error(shdc, tmp, "mesh%d" % n, src, "E_SPEC", 1))
        axes = ",".join("A%d" % (i % 8) for i in range(n))
        src = mesh_of(8) + "fn main() {\n    let a: f32[8@(%s)] = ones()\n    print(sum(a))\n}\n" % axes
        (expect_ok(shdc, tmp, "dimaxes%d" % n, src) if ok else
         expect_error(shdc, tmp, "dimaxes%d" % n, src, "E_SPEC", 3))
        src = mesh_of(8) + "fn main() {\n    let a: f32[8]<R:%s> = ones()\n    print(a)\n}\n" % axes
        (expect_ok(shdc, tmp, "annotaxes%d" % n, src) if ok else
         expect_error(shdc, tmp, "annotaxes%d" % n, src, "E_SPEC", 3))
    for n, ok in ((6, True), (7, False)):
        annots = "".join("<R:A%d>" % i for i in range(n))
        src = mesh_of(8) + "fn main() {\n    let a: f32[8]%s = ones()\n    print(a)\n}\n" % annots
        (expect_ok(shdc, tmp, "annots%d" % n, src) if ok else
         expect_error(shdc, tmp, "annots%d" % n, src, "E_SPEC", 3))
    dims = ",".join(["2"] * 8)
    ein = "mesh {X: 1}\nfn main() {\n    let a: f32[%s] = ones()\n    let b = einsum(%s, a, a)\n    print(sum(b))\n}\n"
    expect_ok(shdc, tmp, "einsum8", ein % (dims, '"abcdefgh,abcdefgh->abcdefgh"'))
    expect_error(shdc, tmp, "einsum9", ein % (dims, '"abcdefghi,abcdefgh"'), "E_SHAPE", 4)
    expect_error(shdc, tmp, "einsum16", ein % (dims, '"abcdefgh,ijklmnop"'), "E_SHAPE", 4)
    src = "mesh {X: 1}\nfn main() {\n    let a: f32[2, 2] = ones()\n    let b = einsum(\"ab,bc,cd->ad\", a, a, a)\n}\n"
    expect_error(shdc, tmp, "einsum3ops", src, "E_ARG", 4)
    for n, ok in ((1000, True), (1001, False)):
        src = "mesh {X: 1}\nfn main() {\n    let s = 0%s\n    print(s)\n}\n" % ("+1" * n)
        (expect_ok(shdc, tmp, "exprdepth%d" % n, src) if ok else
         expect_error(shdc, tmp, "exprdepth%d" % n, src, "E_SYNTAX", 3))
    nest = lambda n: ("mesh {X: 1}\nfn main() {\n    var v = 0\n" + "    if true {\n" * n + "    v = v + 1\n" +
                      "    }\n" * n + "    print(\"nest\", v)\n}\n")
    expect_ok(shdc, tmp, "blocks100", nest(100), r"^nest 1$")
    src = nest(2000)
    expect_error(shdc, tmp, "blocks2000", src, "E_SYNTAX", find_deep_line(shdc, tmp, src))


def expect_error_in(shdc, tmp, name, files, main, code, where, line):
    """A program of several files (an import chain): the error in `where`."""
    for f, text in files.items():
        with open(os.path.join(tmp, f), "w") as out:
            out.write(text)
    p = shdc_run(shdc, ["check", os.path.join(tmp, main)])
    if p is None:
        fail(name, "check timed out")
        return
    want = re.compile(r"^%s:%d:\d+: error: .*\[%s\]$" % (re.escape(os.path.join(tmp, where)), line, code), re.M)
    if p.returncode != 1 or not want.search(p.stderr):
        fail(name, "want [%s] at %s:%d, exit 1; got exit %d:\n%s" % (code, where, line, p.returncode, p.stderr[-1500:]))


def limited_v2(shdc, tmp):
    """Language v2's counts with a limit: struct nesting (2000, declared
    outermost first so that resolving it nests), struct leaves (2^16),
    generic functions instantiating each other (500 deep), imports (200
    files deep)."""
    for n, ok in ((2000, True), (2001, False)):
        decls = "".join("struct S%d { s: S%d }\n" % (i, i + 1) for i in range(n - 1)) + "struct S%d { x: f32 }\n" % (n - 1)
        src = "mesh {X: 1}\n" + decls + "fn main() {\n    let a = zeros(S0)\n    print(sum(a))\n}\n"
        name = "nesting%d" % n
        (expect_ok(shdc, tmp, name, src) if ok else expect_error(shdc, tmp, name, src, "E_NAME", n))
    # declared innermost first, so that nothing nests while resolving (issue 28 F01: the limit never
    # fired in this order, and 1600 levels took 22 s and 4.6 GB): the depth of each struct is counted;
    # the error is at the field of the first struct too deep, once (10,000 levels: one error)
    for n, ok in ((2000, True), (2001, False), (10000, False)):
        decls = "struct S0 { x: f32 }\n" + "".join("struct S%d { x: f32, s: S%d }\n" % (i, i - 1) for i in range(1, n))
        src = "mesh {X: 1}\n" + decls + "fn main() {\n    let a = zeros(S%d)\n    print(sum(a.x))\n}\n" % (n - 1)
        name = "innerfirst%d" % n
        (expect_ok(shdc, tmp, name, src) if ok else expect_error(shdc, tmp, name, src, "E_NAME", 2002))
    for k, ok in ((16, True), (17, False)):
        decls = "struct L0 { x: f32 }\n" + "".join("struct L%d { a: L%d, b: L%d }\n" % (i, i - 1, i - 1)
                                                     for i in range(1, k + 1))
        src = "mesh {X: 1}\n" + decls + "fn main() {\n    let a = ones(L%d)\n    print(\"leaves\", sum(a))\n}\n" % k
        name = "leaves%d" % k
        (expect_ok(shdc, tmp, name, src) if ok else expect_error(shdc, tmp, name, src, "E_ARG", k + 2))
    # the limit the docs state is the compiler's, and the message says it and the fix (issue 28 P4:
    # language.md said 2^20)
    p = shdc_run(shdc, ["check", os.path.join(tmp, "leaves17.shd")])
    if p is None or not re.search(r"struct L17 has more than 65536 \(2\^16\) leaves .*split it", p.stderr):
        fail("leaves17", "the message does not give the limit and the fix:\n%s" % (p and p.stderr[-1500:]))
    with open(os.path.join(ROOT, "docs", "language.md")) as f:
        row = [l for l in f if l.startswith("| leaves of one struct")]
    if len(row) != 1 or "| 2^16 (65,536) |" not in row[0]:
        fail("leaves", "docs/language.md's limits table does not say 2^16 leaves: %s" % row)
    for n, ok in ((500, True), (501, False)):
        fns = "".join("fn g%d<P>(x: P) -> P {\n    return g%d(x)\n}\n" % (i, i + 1) for i in range(n - 1))
        fns += "fn g%d<P>(x: P) -> P {\n    return x * 2.0\n}\n" % (n - 1)
        src = "mesh {X: 1}\n" + fns + "fn main() {\n    print(g0(1.0))\n}\n"
        name = "instances%d" % n
        # the call that nests one too many: g499's, in its body (line 3 * 499 + 3)
        (expect_ok(shdc, tmp, name, src) if ok else expect_error(shdc, tmp, name, src, "E_NAME", 3 * 499 + 3))
    for n, ok in ((200, True), (201, False)):
        # main imports imp0, imp0 imp1, ..., up to imp(n-1): n files deep
        files = {"imp%d.shd" % i: 'import "imp%d.shd"\nconst K%d = %d\n' % (i + 1, i, i) for i in range(n - 1)}
        files["imp%d.shd" % (n - 1)] = "const K%d = %d\n" % (n - 1, n - 1)
        files["impmain%d.shd" % n] = 'mesh {X: 1}\nimport "imp0.shd"\nfn main() {\n    print(K%d)\n}\n' % (n - 1)
        name = "imports%d" % n
        if ok:
            for f, text in files.items():
                with open(os.path.join(tmp, f), "w") as out:
                    out.write(text)
            p = shdc_run(shdc, ["check", os.path.join(tmp, "impmain%d.shd" % n)])
            if p is None or p.returncode != 0:
                fail(name, "check did not pass: %s" % ("timeout" if p is None else p.stderr[-1500:]))
        else:
            expect_error_in(shdc, tmp, name, files, "impmain%d.shd" % n, "E_IMPORT", "imp199.shd", 1)


def unlimited_v2(shdc, tmp):
    """Structs of many fields, struct arithmetic and sum over all of them,
    and many distinct instances of a generic function, built and run."""
    # Built and run at 1000 leaves; checked and emitted at 3000. The C
    # compiler's time over one function grows faster than its length (with
    # the sanitizers at -O0: 10 s at 500 leaves, 27 s at 1000, minutes at
    # 3000); what is tested here is shdc's handling of the fields.
    for f, build in ((1000, True), (3000, False)):
        fields = "".join("    w%d: f32[2]\n" % i for i in range(f))   # (f32, f64 are dtypes)
        src = ("mesh {X: 1}\nstruct Big {\n%s}\nfn twice<P>(p: P) -> P {\n    return p * 2.0\n}\n" % fields +
               "fn main() {\n    let a = ones(Big)\n    let b = twice(a) + a\n    print(\"big\", sum(b), b.w%d)\n}\n"
               % (f - 1))
        name = "fields%d" % f
        if build:
            expect_ok(shdc, tmp, name, src, r"^big %s \[3\. 3\.\]$" % re.escape(repr(float(3 * 2 * f))),
                      build_flags=("-O0",))
            continue
        expect_ok(shdc, tmp, name, src)
        p = shdc_run(shdc, ["emit-c", os.path.join(tmp, name + ".shd")], timeout=300)
        if p is None or p.returncode != 0 or p.stdout.count("shd_alloc(2 * sizeof(float))") < f:
            fail(name, "emit-c: %s" % ("timeout" if p is None else "exit %d, %d leaves allocated\n%s" % (
                p.returncode, p.stdout.count("shd_alloc(2 * sizeof(float))"), p.stderr[-1500:])))
    n = 150
    calls = "".join("    s = s + sum(id(ones(f32[%d])))\n" % (i + 1) for i in range(n))
    src = ("mesh {X: 1}\nfn id<P>(x: P) -> P {\n    return x\n}\nfn main() {\n    var s = 0.0\n%s" % calls +
           "    print(\"instances\", s)\n}\n")
    expect_ok(shdc, tmp, "instances150", src, r"^instances %s$" % re.escape(repr(float(n * (n + 1) // 2))))


def find_deep_line(shdc, tmp, src):
    """The line where the parser reports the nesting: whatever it is, it must
    be one line, reported once with [E_SYNTAX]; read it from the report."""
    path = os.path.join(tmp, "probe.shd")
    with open(path, "w") as f:
        f.write(src)
    p = shdc_run(shdc, ["check", path])
    m = re.search(r":(\d+):\d+: error: the program nests too deeply", p.stderr if p else "")
    return int(m.group(1)) if m else -1


def unlimited(shdc, tmp):
    """Counts without a limit, far past any fixed array, built and run."""
    n = 100
    params = ", ".join("p%d: f64" % i for i in range(n))
    body = " + ".join("p%d * %d.0 * p%d" % (i, i + 1, i) for i in range(n))
    call = ", ".join("%d.0" % (i % 7 + 1) for i in range(n))
    wrt = ", ".join(str(i) for i in range(0, 60, 2))           # 30 positions
    # d/dp_i of sum (i+1) p_i^2 is 2 (i+1) p_i
    want = " ".join(repr(float(2 * (i + 1) * (i % 7 + 1))) for i in range(0, 60, 2))
    names = ", ".join("g%d" % k for k in range(30))
    src = ("mesh {X: 1}\nfn f(%s) -> f64 {\n    return %s\n}\n" % (params, body) +
           "fn main() {\n    let (%s) = grad(f, wrt=(%s))(%s)\n" % (names, wrt, call) +
           "    print(\"grads\", %s)\n}\n" % names)
    expect_ok(shdc, tmp, "params100_wrt30", src, r"^grads %s$" % re.escape(want))
    m = 40
    res = ", ".join(["f32"] * m)
    vals = ", ".join("x * %d.0" % (i + 1) for i in range(m))
    names = ", ".join("r%d" % i for i in range(m))
    src = ("mesh {X: 1}\nfn f(x: f32) -> (%s) {\n    return (%s)\n}\n" % (res, vals) +
           "fn main() {\n    let (%s) = f(0.5)\n    print(\"res\", %s)\n}\n" % (names, names))
    expect_ok(shdc, tmp, "results40", src, r"^res %s$" % " ".join(repr((i + 1) * 0.5) for i in range(m)))
    k = 200
    items = ", ".join('"t%d", %d' % (i, i) for i in range(k))
    src = "mesh {X: 1}\nfn main() {\n    print(%s)\n}\n" % items
    expect_ok(shdc, tmp, "print400", src, r"^t0 0 t1 1 .* t199 199$")
    c = 70
    decls = "".join("    var v%d = %d.0\n" % (i, i) for i in range(c))
    upd = "".join("        v%d = v%d + 1.0\n" % (i, i) for i in range(c))
    total = sum(range(c)) + 3 * c
    src = ("mesh {X: 1}\nfn main() {\n%s    for i in 0..3 {\n%s    }\n    print(\"carries\", %s)\n}\n" %
           (decls, upd, " + ".join("v%d" % i for i in range(c))))
    expect_ok(shdc, tmp, "carries70", src, r"^carries %s$" % re.escape(repr(float(total))))
    d = 20
    src = ("mesh {X: 1}\nfn main() {\n    var n = 0\n" +
           "".join("    " * (j + 1) + "for i%d in 0..2 {\n" % j for j in range(d)) +
           "    " * (d + 1) + "n = n + 1\n" + "".join("    " * (d - j) + "}\n" for j in range(d)) +
           "    print(\"loops\", n)\n}\n")
    expect_ok(shdc, tmp, "loops20", src, r"^loops %d$" % (2 ** d))
    text = "".join(chr(32 + (i * 7) % 90) for i in range(100000)).replace("\\", "/").replace('"', "'")
    ident = "x" * 10000
    src = "mesh {X: 1}\nfn main() {\n    let %s = 7\n    print(\"%s\", %s)\n}\n" % (ident, text, ident)
    expect_ok(shdc, tmp, "strings", src, r"%s 7$" % re.escape(text[-50:]))
    chain = 3000
    src = ("mesh {X: 1}\nfn main() {\n    var x: f32[64] = ones()\n" + "    x = x * 1.0 + 0.001\n" * chain +
           "    print(\"chain\", sum(x))\n}\n")
    expect_ok(shdc, tmp, "chain3000", src, r"^chain 25[0-9.]+$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", required=True)
    args = ap.parse_args()
    san = os.path.join(os.path.dirname(os.path.abspath(args.shdc)), "san", "shdc")
    if b"__asan_init" in open(os.path.abspath(args.shdc), "rb").read():   # make test-san, tools/san-coverage
        san = os.path.abspath(args.shdc)
    if not os.path.exists(san):
        print("no sanitizer build at %s: run `make san` (make test does)" % san)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        limited(san, tmp)
        limited_v2(san, tmp)
        unlimited(san, tmp)
        unlimited_v2(san, tmp)
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
