#!/usr/bin/env python3
"""The compiler's cost grows at most linearly with what it reads (issue 19):
each input is generated at a size n and at 4n, and every command that reads
it must not take more than 8 times as long on the larger one (linear is 4,
n log n about 5, quadratic 16). Times are the CPU seconds of the child
(user + system, the least of two runs), not wall time, so a loaded machine
moves both sizes alike; a time under FLOOR seconds counts as FLOOR, so noise
on tiny times cannot fail the test, while a quadratic pass (seconds at 4n)
still does.

Inputs: comment lines and blank lines (the lexer once peeked past the rest
of a run of blank lines at each newline), a long string literal, a long
function body, many functions, a chain of consts, many errors in the JSON
and SARIF documents (a fix's position was once found by scanning the file
from its start), many collectives for explain, loop carries, a long
gradient chain; and the mesh: explain and emit-c of a program that slices,
pads, concatenates and dynamically slices a sharded dim at X = 2^12 and
2^14 (and the largest mesh, 2^20, must still be quick), whose cost once grew
with the square of the devices.
"""
# SERIAL: it measures the compiler's CPU time, so it runs alone
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

FACTOR = 8.0
FLOOR = 0.05
LIMIT_S = 120


def comments(n):
    return "// a comment line of forty characters or so\n" * n + "mesh {X: 2}\nfn main() {\n}\n"


def blanks(n):
    return "mesh {X: 2}\nfn main() {\n    let a = 1.0\n" + "\n" * n + "    print(a)\n}\n"


def long_string(n):
    return 'mesh {X: 2}\nfn main() {\n    print("' + "x" * (n * 8) + '")\n}\n'


def statements(n):
    out = ["mesh {X: 2}", "fn main() {", "    let a0: f32[8@X] = ones()"]
    out += ["    let a%d = a%d * 1.5 + 1.0" % (i, i - 1) for i in range(1, n)]
    return "\n".join(out + ["    print(sum(a%d))" % (n - 1), "}"]) + "\n"


def functions(n):
    out = ["mesh {X: 2}"] + ["fn g%d(x: f32) -> f32 { return x + %d.0 }" % (i, i) for i in range(n)]
    out += ["fn main() {", "    var s = 0.0"] + ["    s = g%d(s)" % i for i in range(n)] + ["    print(s)", "}"]
    return "\n".join(out) + "\n"


def consts(n):
    out = ["mesh {X: 2}", "const C0 = 1"] + ["const C%d = C%d + 1" % (i, i - 1) for i in range(1, n)]
    return "\n".join(out + ["fn main() {", "    let x: f32[C%d] = zeros()" % (n - 1), "    print(sum(x))", "}"]) + "\n"


def errors(n):
    return "mesh {X: 2}\nfn main() {\n" + "".join("    let a%d = zzz%d\n" % (i, i) for i in range(n)) + "}\n"


def collectives(n):
    out = ["mesh {X: 2}", "fn main() {", "    let a0: f32[8@X] = ones()"]
    out += ["    let a%d = reshard(a%d, f32[8%s])" % (i, i - 1, "@X" if i % 2 == 0 else "") for i in range(1, n)]
    return "\n".join(out + ["    print(sum(a%d))" % (n - 1), "}"]) + "\n"


def carries(n):
    out = ["mesh {X: 2}", "fn main() {"] + ["    var v%d = %d.0" % (i, i) for i in range(n)]
    out += ["    for i in 0..2 {"] + ["        v%d = v%d + 1.0" % (i, i) for i in range(n)] + ["    }", "    print(v0)", "}"]
    return "\n".join(out) + "\n"


def gradient(n):
    out = ["mesh {X: 2}", "fn loss(x: f32[8@X]) -> f32 {", "    let a0 = x"]
    out += ["    let a%d = sin(a%d) * 1.5" % (i, i - 1) for i in range(1, n)]
    out += ["    return sum(a%d)" % (n - 1), "}", "fn main() {", "    let x: f32[8@X] = ones()",
            "    print(grad(loss)(x))", "}"]
    return "\n".join(out) + "\n"


def moves(n):
    """Slices, pads, concatenations and run-time slices and updates of a dim
    sharded over X (sizes multiples of n, so any mesh up to n divides them)."""
    b = 16 * n
    return """mesh {X: 2}
fn main() {
    let x = iota(f32[%d@X], axis=0)
    let y = x[1:%d] as f32[%d]
    let s = x[%d:] as f32[%d@X]
    let p = pad(s, ((%d, %d),)) as f32[%d@X]
    let c = concatenate((p, x), axis=0)
    let d = dynamic_slice(c, (arg("k", 4),), (%d,))
    let u = dynamic_update_slice(c, d * 2.0, (arg("k", 4),))
    print(sum(y), sum(p), sum(c), sum(d), sum(u))
}
""" % (b, b - 1, b - 2, 8 * n, 8 * n, 4 * n, 4 * n, b, b)


# name, generator, size n (4n is the other), commands (with options)
CASES = [
    ("comment lines", comments, 25000, [["check"]]),
    ("blank lines", blanks, 25000, [["check"]]),
    ("a long string", long_string, 50000, [["check"], ["emit-c"]]),
    ("statements", statements, 1500, [["check"], ["types"], ["explain"], ["emit-c"], ["show"]]),
    ("functions", functions, 800, [["check"], ["emit-c"]]),
    ("consts", consts, 3000, [["check"]]),
    ("errors", errors, 2000, [["check"], ["check", "--diagnostics=json"], ["check", "--diagnostics=sarif"]]),
    ("collectives", collectives, 1000, [["explain"]]),
    ("loop carries", carries, 400, [["check"], ["emit-c"]]),
    ("gradient chain", gradient, 400, [["check"], ["emit-c"]]),
]


def cpu_seconds(cmd):
    """The least CPU time of three runs (a loaded machine slows one run in
    several: the least is the program's own cost), and the last exit status."""
    best, rc = None, None
    for _ in range(3):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            return float(LIMIT_S), -1
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best, rc = t if best is None else min(best, t), p.returncode
    return best, rc


def main():
    shdc = testlib.shdc_option()
    failures, report = [], []
    with tempfile.TemporaryDirectory() as d:
        def measure(name, texts, cmds, flags=()):
            for cmd in cmds:
                times = []
                for k, text in enumerate(texts):
                    path = os.path.join(d, "p%d.shd" % k)
                    with open(path, "w") as f:
                        f.write(text)
                    t, rc = cpu_seconds([shdc] + cmd[:1] + [path] + cmd[1:] + list(flags[k] if flags else []))
                    if rc not in (0, 1):
                        failures.append("%s: shdc %s exit %d" % (name, " ".join(cmd), rc))
                    times.append(t)
                ratio = max(times[1], FLOOR) / max(times[0], FLOOR)
                report.append("%-16s %-28s %7.3f s -> %7.3f s  x%.1f" % (name, " ".join(cmd), times[0], times[1], ratio))
                if ratio > FACTOR:
                    failures.append("%s, shdc %s: %.3f s at n, %.3f s at 4n: %.1f times, more than %g (super-linear)"
                                    % (name, " ".join(cmd), times[0], times[1], ratio, FACTOR))

        for name, gen, n, cmds in CASES:
            measure(name, [gen(n), gen(4 * n)], cmds)
        # The mesh: cost independent of the devices for these regular moves.
        prog = moves(1 << 20)   # sizes that every mesh up to 2^20 divides
        measure("mesh 2^12/2^14", [prog, prog], [["explain"], ["emit-c"]],
                flags=[["--mesh", "X=%d" % (1 << 12)], ["--mesh", "X=%d" % (1 << 14)]])
        path = os.path.join(d, "big.shd")
        with open(path, "w") as f:
            f.write(prog)
        for cmd in ("explain", "emit-c"):
            t, rc = cpu_seconds([shdc, cmd, path, "--mesh", "X=%d" % (1 << 20)])
            report.append("%-16s %-28s %7.3f s" % ("mesh 2^20", cmd, t))
            if rc != 0 or t > 10:
                failures.append("%s at a mesh of 2^20 devices: exit %d, %.1f CPU seconds" % (cmd, rc, t))
    print("\n".join(report))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
