#!/usr/bin/env python3
"""Every compiler phase and the language server's requests stay near-linear
in the program's size (issue 28): each program below is generated at a size
n and at 4n along one axis of version 2 (nesting depth of structs, leaves
of one struct, instances of a generic function, bindings of one function,
imported files, many functions), and `shdc check`, `shdc emit-c` and the
language server (open the document, then documentSymbol and hover) must
not take more than FACTOR times as long at 4n (linear is 4, n log n about
5, quadratic 16). Each time is the CPU time (user + system) of shdc and of
the children it waits for (the language server answers each request in a
child), the least of REPEAT runs: a busy machine moves CPU time less than
wall time, and only ever adds to it. A time under FLOOR counts as FLOOR,
so noise on tiny times cannot fail the test.

Sizes are chosen so each run takes about 0.05 to 0.3 s at n in the normal
build; the limits of struct nesting (2000) and of import chains (200) are
the 4n of theirs.
Under the sanitizer pass (ASAN_OPTIONS set: shdc is the ASan/UBSan build,
several times slower and with a different cost profile: its allocator's
quarantine and shadow memory add time that is not the compiler's), each
program runs once at n / 4 and 4n / 4, for memory errors on these shapes
of input in a few seconds, and a ratio fails only above SAN_FACTOR: there
the ratios measure the sanitizers as much as the compiler, so only an
unmistakably super-linear one (quadratic is 16) is trusted; the normal
pass holds the line at FACTOR.

`-v` prints the table of times.
"""
# SERIAL: it measures the compiler's time, so it runs alone
import json
import os
import subprocess
import sys
import resource
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

FACTOR = 6.0
SAN_FACTOR = 12.0
FLOOR = 0.03
REPEAT = 3
CONFIRM = 5       # more runs of a pair whose ratio is over the limit, before it fails
LIMIT_S = 120
SANITIZED = "ASAN_OPTIONS" in os.environ


# ---- generated programs: each returns {file name: text}, the first the main file --


def depth(n):
    """A chain of n structs, innermost first, one leaf a level."""
    out = ["mesh {X: 2}", "struct S0 { a: f32[2] }"]
    out += ["struct S%d { a: f32[2], s: S%d }" % (i, i - 1) for i in range(1, n)]
    out += ["fn main() {", "    let p = zeros(S%d)" % (n - 1), "    let q = p * 2.0",
            "    print(sum(q.a), sum(q.s.a))", "}"]
    return {"main.shd": "\n".join(out) + "\n"}


def depth_outer_first(n):
    """The same chain, outermost first."""
    out = ["mesh {X: 2}"] + ["struct S%d { a: f32[2], s: S%d }" % (i, i - 1) for i in range(n - 1, 0, -1)]
    out += ["struct S0 { a: f32[2] }", "fn main() {", "    let p = zeros(S%d)" % (n - 1),
            "    print(sum(p.a), sum(p.s.a))", "}"]
    return {"main.shd": "\n".join(out) + "\n"}


def leaves(n):
    """A struct of n fields, each used by name."""
    out = ["mesh {X: 2}", "struct W {"] + ["    w%d: f32[8@X]," % i for i in range(n)] + ["}"]
    out += ["fn main() {", "    let p = uniform(W, seed=1)", "    let q = 0.5 * p + p", "    var s = 0.0"]
    out += ["    s = s + sum(q.w%d)" % i for i in range(n)]
    return {"main.shd": "\n".join(out + ["    print(s)", "}"]) + "\n"}


def instances(n):
    """n distinct instances of a one-line generic function."""
    out = ["mesh {X: 2}", "fn twice<T>(x: T) -> T { return x + x }", "fn main() {", "    var s = 0.0"]
    out += ["    s = s + sum(twice(zeros(f32[%d])))" % (i + 1) for i in range(n)]
    return {"main.shd": "\n".join(out + ["    print(s)", "}"]) + "\n"}


def bindings(n):
    """One function of n bindings."""
    out = ["mesh {X: 2}", "fn main() {", "    let a0: f32[8@X] = ones()"]
    out += ["    let a%d = a%d * 1.5 + 1.0" % (i, i - 1) for i in range(1, n)]
    return {"main.shd": "\n".join(out + ["    print(sum(a%d))" % (n - 1), "}"]) + "\n"}


def functions(n):
    """n functions, each called once."""
    out = ["mesh {X: 2}"] + ["fn g%d(x: f32) -> f32 { return x + %d.0 }" % (i, i) for i in range(n)]
    out += ["fn main() {", "    var s = 0.0"] + ["    s = g%d(s)" % i for i in range(n)] + ["    print(s)", "}"]
    return {"main.shd": "\n".join(out) + "\n"}


def imports(n):
    """n imported files, each a struct and a function, all used."""
    files = {}
    main = ["mesh {X: 2}"] + ['import "m%d.shd"' % i for i in range(n)]
    main += ["fn main() {", "    var s = 0.0"]
    for i in range(n):
        files["m%d.shd" % i] = ("struct P%d { w: f32[4] }\nfn h%d(p: P%d) -> f32 { return sum(p.w) + %d.0 }\n"
                                % (i, i, i, i))
        main.append("    s = s + h%d(ones(P%d))" % (i, i))
    files = dict([("main.shd", "\n".join(main + ["    print(s)", "}"]) + "\n")] + list(files.items()))
    return files


def import_chain(n):
    """n files, each importing the next (the documented limit is 200 deep)."""
    files = {"main.shd": 'mesh {X: 2}\nimport "c0.shd"\nfn main() {\n    print(k0(1.0))\n}\n'}
    for i in range(n):
        imp = 'import "c%d.shd"\n' % (i + 1) if i + 1 < n else ""
        call = "k%d(x)" % (i + 1) if i + 1 < n else "x"
        files["c%d.shd" % i] = imp + "fn k%d(x: f32) -> f32 { return %s + 1.0 }\n" % (i, call)
    return files


# name, generator, n, commands ("lsp" is the language server session)
CASES = [
    ("struct depth", depth, 500, ["check", "emit-c", "lsp"]),           # 4n = 2000, the limit
    ("depth, outer first", depth_outer_first, 500, ["check"]),
    ("struct leaves", leaves, 800, ["check", "emit-c", "lsp"]),
    ("generic instances", instances, 800, ["check", "emit-c", "lsp"]),
    ("bindings", bindings, 4000, ["check", "emit-c", "lsp"]),
    ("functions", functions, 3000, ["check", "emit-c", "lsp"]),       # at 1500, emit-c's 0.04 s is noise
    ("imports", imports, 500, ["check", "emit-c", "lsp"]),
    ("import chain", import_chain, 50, ["check", "emit-c"]),            # 4n = 200, the limit
]


# ---- the language server ---------------------------------------------------------


def frame(obj):
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def lsp_session(path, text):
    """Open the document, ask for its outline and for hovers at a few places."""
    uri = "file://" + path
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None,
                                                                          "capabilities": {}}},
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen",
             "params": {"textDocument": {"uri": uri, "languageId": "shd", "version": 1, "text": text}}},
            {"jsonrpc": "2.0", "id": 2, "method": "textDocument/documentSymbol",
             "params": {"textDocument": {"uri": uri}}}]
    lines = text.split("\n")
    for k, line in enumerate([len(lines) // 2, len(lines) - 3]):
        col = max(0, min(8, len(lines[line]) - 1)) if line < len(lines) else 0
        msgs.append({"jsonrpc": "2.0", "id": 3 + k, "method": "textDocument/hover",
                     "params": {"textDocument": {"uri": uri}, "position": {"line": line, "character": col}}})
    msgs += [{"jsonrpc": "2.0", "id": 9, "method": "shutdown"}, {"jsonrpc": "2.0", "method": "exit"}]
    return b"".join(frame(m) for m in msgs)


def lsp_answered(out):
    """The ids the server answered, and whether the outline was not empty."""
    ids, outline = set(), False
    while out:
        head, _, rest = out.partition(b"\r\n\r\n")
        n = int(head.split(b":")[1])
        m = json.loads(rest[:n])
        out = rest[n:]
        if "id" in m and "result" in m:
            ids.add(m["id"])
            if m["id"] == 2:
                outline = bool(m["result"])
    return ids, outline


# ---- measuring -------------------------------------------------------------------


def run_once(shdc, cmd, d, files):
    main = os.path.join(d, "main.shd")
    if cmd == "lsp":
        argv, stdin = [shdc, "lsp"], lsp_session(main, files["main.shd"])
    else:
        argv, stdin = [shdc, cmd, main], None
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, timeout=LIMIT_S, cwd=d)
    except subprocess.TimeoutExpired:
        return float(LIMIT_S), "timed out after %d s" % LIMIT_S
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)   # the server's query children included
    t = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        return t, "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-600:])
    if cmd == "lsp":
        ids, outline = lsp_answered(p.stdout)
        if not {2, 3, 4, 9} <= ids or not outline:
            return t, "the server answered %s, outline %s" % (sorted(ids), outline)
    return t, None


def measure(shdc, cmd, files, repeat):
    best, err = None, None
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        for _ in range(repeat):
            t, err = run_once(shdc, cmd, d, files)
            best = t if best is None else min(best, t)
            if err:
                break
    return best, err


def main():
    verbose = "-v" in sys.argv
    if verbose:
        sys.argv.remove("-v")
    shdc = testlib.shdc_option()
    scale, repeat = (4, 1) if SANITIZED else (1, REPEAT)
    failures, report = [], []
    for name, gen, n, cmds in CASES:
        n = max(n // scale, 4)
        small, large = gen(n), gen(4 * n)
        for cmd in cmds:
            t0, e0 = measure(shdc, cmd, small, repeat)
            t1, e1 = measure(shdc, cmd, large, repeat)
            ratio = max(t1, FLOOR) / max(t0, FLOOR)
            limit = SAN_FACTOR if SANITIZED else FACTOR
            if ratio > limit and not (e0 or e1):
                # confirm before failing: a busy machine (CI runs two tests at a
                # time) can slow one measurement; a super-linear phase is slow
                # again, so the least of more runs still shows it
                t0 = min(t0, measure(shdc, cmd, small, CONFIRM)[0])
                t1 = min(t1, measure(shdc, cmd, large, CONFIRM)[0])
                ratio = max(t1, FLOOR) / max(t0, FLOOR)
            report.append("%-20s %-7s n=%-5d %7.3f s -> %7.3f s  x%.1f" % (name, cmd, n, t0, t1, ratio))
            for size, e in ((n, e0), (4 * n, e1)):
                if e:
                    failures.append("%s at %d, shdc %s: %s" % (name, size, cmd, e))
            if ratio > limit:
                failures.append("%s, shdc %s: %.3f s at n=%d, %.3f s at 4n: %.1f times, more than %g (super-linear)"
                                % (name, cmd, t0, n, t1, ratio, limit))
    if verbose or failures:
        print("\n".join(report))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
