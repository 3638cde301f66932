#!/usr/bin/env python3
"""import "FILE.shd" (language.md §9.6).

- A file is found relative to the importing file (an imported file's own
  imports relative to it), then in each -I DIR, then in the installed
  standard library (std/); importing a file twice is harmless; the merged
  program builds and runs, the imported functions and structs used as if
  declared in it.
- Errors, each at its line with its code: a missing file (naming where it
  looked), a library that declares a mesh (at the import, a note at the
  mesh), a cyclic import, a name declared twice across files (at the later
  declaration, a note at the first, in the other file), and an error
  inside an imported file (reported in that file), an arg of the program
  with another default than the library's arg of that name (at the
  program's call, naming the library's); at run time, an index
  out of range inside an imported function (named with that file's line,
  and the generated C's comments quote that file), and the timeline
  (SHD_TRACE) names its spans by that file and line.
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
from run import mpirun_cmd, run  # noqa: E402

FILES = {
    "main.shd": """mesh {X: 2}
import "lib/util.shd"
import "inc.shd"
import "lib/util.shd"
import "std/optim.shd"

fn main() {
    let p = Pair(a=ones(f32[4@X]), b=2.0)
    let q = twice(p)
    print("sum", sum(q), "k", K, "inc", inc(1.0), "sgd", sgd(1.0, 1.0, 0.5))
}
""",
    "lib/util.shd": """import "more.shd"
// a struct and a generic function from a library
struct Pair { a: f32[4@X], b: f32 }
fn twice<P>(p: P) -> P {
    return scale(p, 2.0)
}
""",
    "lib/more.shd": """const K = 7
fn scale<P>(p: P, s: f32) -> P {
    return p * s
}
""",
    "incdir/inc.shd": """fn inc(x: f32) -> f32 {
    return x + 1.0
}
""",
    # errors
    "missing.shd": """mesh {X: 2}
import "nowhere.shd"
fn main() {
}
""",
    # a name that is there but is no regular file (main() makes them)
    "odddir.shd": """mesh {X: 2}
import "adir.shd"
fn main() {
}
""",
    "oddfifo.shd": """mesh {X: 2}
import "afifo.shd"
fn main() {
}
""",
    "withmesh.shd": """mesh {X: 2}
import "lib/meshed.shd"
fn main() {
}
""",
    "lib/meshed.shd": """// a library may not declare a mesh
mesh {X: 4}
fn f() {
}
""",
    "cycle.shd": """mesh {X: 2}
import "lib/a.shd"
fn main() {
}
""",
    "lib/a.shd": """import "b.shd"
fn fa() {
}
""",
    "lib/b.shd": """import "a.shd"
fn fb() {
}
""",
    "twice.shd": """mesh {X: 2}
import "lib/more.shd"
fn scale(x: f32) -> f32 {
    return x
}
fn main() {
}
""",
    "inner.shd": """mesh {X: 2}
import "lib/bad.shd"
fn main() {
    let y = bad(1.0)
}
""",
    "lib/bad.shd": """fn bad(x: f32) -> f32 {
    return x @ x
}
""",
    # a run-time error inside an imported function names that file's line
    "runerr.shd": """mesh {X: 2}
import "lib/pick.shd"
fn main() {
    print("got", pick(ones(f32[8]), arg("i", 0)))
}
""",
    "lib/pick.shd": """// a lookup whose index comes from the caller
fn pick(x: f32[8], i: i32) -> f32 {
    return take(x, i, axis=0)
}
""",
    # the timeline names an imported function's GEMM and elementwise pass by
    # that file and line (the program's file name is JSON-escaped data)
    'tr"a\\ce\u00e9.shd': """mesh {X: 2}
import "lib/mm.shd"
fn main() {
    let a = ones(f32[8@X, 4])
    print("mm", sum(mm(a)))
}
""",
    # an arg read in a library and in the program with another default:
    # one [E_ARG], at the program's call (the library's, lowered first, is
    # the first), naming the library's; the generic's call, in two
    # instances, and the same default elsewhere are no error
    "argtwice.shd": """mesh {X: 2}
import "lib/steps.shd"
fn main() {
    print(lib_steps() + every(1.0) + every(1) + arg("every", 2) + arg("steps", 5))
}
""",
    "lib/steps.shd": """fn lib_steps() -> i32 { return arg("steps", 4) }
fn every<T>(x: T) -> i32 { return arg("every", 2) }
""",
    "lib/mm.shd": """// a product and a pass over it
fn mm(a: f32[8@X, 4]) -> f32[8@X, 4] {
    let w = ones(f32[4, 4])
    let h = a @ w
    return exp(h) * 2.0
}
""",
}

# file, line, code, message pattern (the error's place: file and line)
ERRORS = [
    ("missing.shd", "missing.shd", 2, "E_IMPORT", r'cannot find the imported file "nowhere\.shd" \(looked for \./nowhere\.shd, .*nowhere\.shd\)'),
    ("odddir.shd", "odddir.shd", 2, "E_IMPORT", r'cannot import "adir\.shd": \./adir\.shd is a directory, not a regular file'),
    ("oddfifo.shd", "oddfifo.shd", 2, "E_IMPORT", r'cannot import "afifo\.shd": \./afifo\.shd is a FIFO, not a regular file'),
    ("withmesh.shd", "withmesh.shd", 2, "E_MESH", r'declares a mesh; a library is mesh-independent'),
    ("cycle.shd", "b.shd", 1, "E_IMPORT", r'cyclic import'),
    ("twice.shd", "twice.shd", 3, "E_NAME", r"'scale' is already defined"),
    ("inner.shd", "bad.shd", 2, "E_SHAPE", r"@"),
    ("argtwice.shd", "argtwice.shd", 4, "E_ARG", r'"steps" is read here as i32 with default 5, but at \S*lib/steps\.shd:1:32 '
     r'as i32 with default 4'),
]


def check_trace(shdc, d):
    """The timeline's GEMM and elementwise spans inside mm name lib/mm.shd
    and its lines (4 and 5), not the program's lines with those numbers;
    main's span names the program's file, quote, backslash and all."""
    prog = [n for n in FILES if n.startswith("tr")][0]
    exe = testlib.build(shdc, os.path.join(d, prog), os.path.join(d, "traced"))
    env = dict(os.environ, SHD_TRACE=os.path.join(d, "t.json"))
    p = subprocess.run(mpirun_cmd(2) + [exe], cwd=d, capture_output=True, text=True, env=env, timeout=120)
    if p.returncode or not re.search(r"^mm 3494\.2\d*$", p.stdout, re.M):
        return ["traced: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr)]
    with open(os.path.join(d, "t.json"), encoding="utf-8") as f:
        ev = json.load(f)["traceEvents"]
    spans = [e for e in ev if e.get("ph") == "X" and e["pid"] == 1]
    gemm = [e["args"] for e in spans if e["cat"] == "gemm"]
    ew = [e["args"] for e in spans if e["cat"] == "elementwise" and e["args"].get("file", "").endswith("mm.shd")]
    main = [e["args"] for e in spans if e["name"] == "main"]
    bad = []
    if not gemm or any(not a.get("file", "").endswith("lib/mm.shd") or a["line"] != 4 for a in gemm):
        bad.append("traced: the GEMM is not at lib/mm.shd:4: %s" % gemm)
    if not ew or any(a["line"] != 5 for a in ew):
        bad.append("traced: no elementwise pass at lib/mm.shd:5: %s" % ew)
    if len(main) != 1 or os.path.basename(main[0].get("file", "")) != prog or main[0]["line"] != 3:
        bad.append("traced: main is not at %r line 3: %s" % (prog, main))
    return bad


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for name, text in FILES.items():
            os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        os.mkdir(os.path.join(d, "adir.shd"))
        os.mkfifo(os.path.join(d, "afifo.shd"))
        exe = testlib.build(shdc, os.path.join(d, "main.shd"), os.path.join(d, "main"), "-I", os.path.join(d, "incdir"))
        rc, out, err = run(mpirun_cmd(2) + [exe], cwd=d)
        if rc or not re.search(r"^sum 12\.0 k 7 inc 2\.0 sgd 0\.5$", out, re.M):
            failures.append("main: exit %d\n%s%s" % (rc, out, err))
        p = subprocess.run([shdc, "check", "main.shd"], cwd=d, capture_output=True, text=True)
        if p.returncode != 1 or not re.search(r"main\.shd:3:8: error: cannot find the imported file \"inc\.shd\"",
                                               p.stderr):
            failures.append("without -I: exit %d\n%s" % (p.returncode, p.stderr))
        for prog, where, line, code, pattern in ERRORS:
            p = subprocess.run([shdc, "check", prog], cwd=d, capture_output=True, text=True)
            errs = [l for l in p.stderr.splitlines() if ": error: " in l]
            ok = p.returncode == 1 and len(errs) == 1
            m = re.match(r"(\S+?):(\d+):\d+: error: (.*) \[(E_\w+)\]$", errs[0]) if errs else None
            ok = ok and m and m.group(1).endswith(where) and int(m.group(2)) == line and m.group(4) == code
            ok = ok and re.search(pattern, m.group(3))
            if not ok:
                failures.append("%s: expected one %s at %s:%d /%s/, got exit %d:\n%s" % (
                    prog, code, where, line, pattern, p.returncode, p.stderr))
        p = subprocess.run([shdc, "check", "withmesh.shd"], cwd=d, capture_output=True, text=True)
        if not re.search(r"meshed\.shd:2:1: note: the mesh is declared here", p.stderr):
            failures.append("withmesh: no note at the library's mesh:\n%s" % p.stderr)
        exe = testlib.build(shdc, os.path.join(d, "runerr.shd"), os.path.join(d, "runerr"), "--keep-c")
        rc, out, err = run(mpirun_cmd(2) + [exe, "--i=3"], cwd=d)
        if rc or not re.search(r"^got 1\.0$", out, re.M):
            failures.append("runerr --i=3: exit %d\n%s%s" % (rc, out, err))
        rc, out, err = run(mpirun_cmd(2) + [exe, "--i=9"], cwd=d)
        if rc == 0 or not re.search(r"pick\.shd:3\b.*out of range|out of range.*pick\.shd:3\b", err):
            failures.append("runerr --i=9: expected an index error at lib/pick.shd:3, exit %d\n%s%s" % (rc, out, err))
        gen = open(os.path.join(d, "runerr.c")).read()
        if "/* pick.shd 3: return take(x, i, axis=0) */" not in gen:
            failures.append("runerr.c: the imported function's lines are not commented as pick.shd's")
        failures += check_trace(shdc, d)
        p = subprocess.run([shdc, "check", "twice.shd"], cwd=d, capture_output=True, text=True)
        if not re.search(r"more\.shd:2:4: note: previous definition is here", p.stderr):
            failures.append("twice: no note at the first declaration:\n%s" % p.stderr)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("imports found relative, with -I and in the installed library; every import error on its line; a "
          "run-time error and the timeline's spans in an imported function name its file and line")


if __name__ == "__main__":
    main()
