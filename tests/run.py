#!/usr/bin/env python3
"""The shdc test runner: `make test` runs it over everything in tests/.

Each .shd test carries its expectations in comments (the format is in
tests/README.md):

  // ERROR: E_CODE [E_CODE...] [| regex]   on a line: `shdc check` reports
                                 exactly these codes there (and a message
                                 matching regex); nothing on other lines
  // TYPE: main.y: f32[4@Y,8@X]  `shdc types` prints this line
  // IR: regex                   lines of `shdc emit-ir`, matched in order
  // IR-NOT: regex               no line of `shdc emit-ir` matches
  // IR-COUNT: N regex           exactly N lines match
  // EXPLAIN: regex / EXPLAIN-NOT: / EXPLAIN-COUNT: N regex   for `shdc explain`
  // MESH: X=2,Y=1               compile-only tests: the --mesh for IR/EXPLAIN
  // RUN: X=1 | X=2 | X=4        build for each mesh and run under mpirun; every
                                 saved .npy must equal the all-ones build's
  // REF: ref_y = np.sin(x)      NumPy reference: saved arrays are variables,
                                 every ref_NAME must equal the saved NAME
  // MESH-DEPENDENT: a b         these saved arrays depend on the mesh: they are
                                 not compared with the all-ones build; instead
                                 the REF lines run on every mesh's results, with
                                 `mesh` a dict of the axis sizes
  // TOL: rtol atol              tolerance of those comparisons
  // ARGS: --steps=3             program arguments
  // STDOUT: regex               rank 0's output contains these lines, in order
  // STDOUT-NOT: regex           no line of any run's output matches
  // SAME-STDOUT                 the numbers printed agree with the all-ones build
  // RUNFAIL: X=2 np=3 [args=--a=1,--b=2] regex   this launch (with these
                                 program arguments instead of ARGS) must fail
                                 and print regex
  // BUILD-FLAGS: -O0            extra `shdc build` options (huge generated tests);
                                 its -D NAME=VALUE also apply to types, emit-ir
                                 and explain
  // TRACE: X=2,Y=2              built for that mesh and run with SHD_TRACE=1, the
                                 largest count and bytes of each collective kind
                                 over the ranks, and the peak bytes, equal what
                                 `shdc explain` predicts (no loops; each function
                                 called at most once)

Runtime unit tests (tests/runtime/test_*.c, first line `// RANKS: 1 2 4`)
run under mpirun at each rank count. Test scripts (tests/**/test_*.py) run
with this Python and `--shdc PATH`; they pass when they exit 0, and are
skipped (not passed) when they exit 77, their last line saying why. In
docs/*.md, a ```shd block whose first line is `// tests/FILE.shd` must be
an excerpt (consecutive lines) of that test, so the documented examples are
tested ones.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*) \[(?P<code>E_[A-Z]+)\]$")

try:
    import numpy as np
except ImportError:  # the NumPy comparisons need python3-numpy
    np = None


class Failure(Exception):
    pass


class Skipped(Exception):
    pass


def mpirun_cmd(np_):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np_)]


def run(cmd, cwd=None, timeout=300, env=None):
    e = dict(os.environ)
    e.update({"SHD_QUIET": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
              # the generated C must stay warning-free under the compiler's own flags
              "SHDC_CFLAGS": "-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes "
                             "-Wno-unused-parameter -Wvla",
              "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    if env:
        e.update(env)
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        raise Failure("timed out after %ds: %s" % (timeout, " ".join(cmd)))
    return p.returncode, p.stdout, p.stderr


class ShdTest:
    def __init__(self, path, shdc):
        self.path = path
        self.shdc = shdc
        self.text = open(path).read()
        self.lines = self.text.split("\n")
        self.errors = {}          # line -> [codes]
        self.error_msgs = {}      # line -> regex the line's messages must match
        self.types, self.ir, self.explain = [], [], []
        self.runs, self.refs, self.stdout, self.runfail = [], [], [], []
        self.stdout_not, self.build_flags, self.trace = [], [], []
        self.args, self.mesh, self.tol, self.same_stdout = [], None, None, False
        self.mesh_dependent = []
        for i, l in enumerate(self.lines, 1):
            m = re.search(r"//\s*ERROR:\s*(.*)$", l)
            if m:
                codes, _, msg = m.group(1).partition(" | ")
                self.errors[i] = codes.split()
                if msg.strip():
                    self.error_msgs[i] = msg.strip()
            m = re.search(r"//\s*([A-Z-]+):?\s?(.*)$", l)
            if not m:
                continue
            key, val = m.group(1), m.group(2).strip()
            if key == "TYPE":
                self.types.append(val)
            elif key in ("IR", "IR-NOT", "IR-COUNT"):
                self.ir.append((key, val))
            elif key in ("EXPLAIN", "EXPLAIN-NOT", "EXPLAIN-COUNT"):
                self.explain.append((key, val))
            elif key == "RUN":
                self.runs = [r.strip() for r in val.split("|") if r.strip()]
            elif key == "REF":
                self.refs.append(val)
            elif key == "TOL":
                self.tol = [float(x) for x in val.split()]
            elif key == "ARGS":
                self.args = val.split()
            elif key == "STDOUT":
                self.stdout.append(val)
            elif key == "STDOUT-NOT":
                self.stdout_not.append(val)
            elif key == "BUILD-FLAGS":
                self.build_flags = val.split()
            elif key == "TRACE":
                self.trace.append(val)
            elif key == "SAME-STDOUT":
                self.same_stdout = True
            elif key == "MESH":
                self.mesh = val
            elif key == "RUNFAIL":
                self.runfail.append(val)
            elif key == "MESH-DEPENDENT":
                self.mesh_dependent += val.split()

    def shdc_cmd(self, *args):
        return [self.shdc] + list(args)

    # ---- compile-time expectations ------------------------------------------

    def check_errors(self):
        rc, out, err = run(self.shdc_cmd("check", self.path))
        got = {}
        for l in err.split("\n"):
            m = DIAG.match(l)
            if m:
                got.setdefault(int(m.group("line")), []).append(m.group("code"))
        if not self.errors:
            if rc != 0:
                raise Failure("shdc check failed (exit %d):\n%s" % (rc, err))
            return
        if rc != 1:
            raise Failure("shdc check should exit 1 on errors, exited %d:\n%s" % (rc, err))
        msgs = {}
        for l in err.split("\n"):
            m = DIAG.match(l)
            if m:
                msgs.setdefault(int(m.group("line")), []).append(m.group("msg"))
        for line, codes in self.errors.items():
            if sorted(got.get(line, [])) != sorted(codes):
                raise Failure("line %d: expected %s, got %s\n%s" % (line, codes, got.get(line, []), err))
            pat = self.error_msgs.get(line)
            if pat and not any(re.search(pat, msg) for msg in msgs.get(line, [])):
                raise Failure("line %d: no message matches %r:\n%s" % (line, pat, "\n".join(msgs.get(line, []))))
        extra = {l: c for l, c in got.items() if l not in self.errors}
        if extra:
            raise Failure("unexpected errors %s:\n%s" % (extra, err))
        # Every error line is in the fixed format, with a source line and a caret.
        elines = err.split("\n")
        for k, l in enumerate(elines):
            if ": error: " in l and not DIAG.match(l):
                raise Failure("diagnostic not in the fixed format: %r" % l)
            if DIAG.match(l) and (k + 2 >= len(elines) or "^" not in elines[k + 2]):
                raise Failure("diagnostic without source line and caret: %r" % l)

    def check_types(self):
        rc, out, err = run(self.shdc_cmd("types", self.path) + (["--mesh", self.mesh] if self.mesh else []) +
                           self.defines())
        if rc != 0:
            raise Failure("shdc types failed:\n%s" % err)
        have = out.split("\n")
        for t in self.types:
            if t not in have:
                raise Failure("shdc types: missing line %r in:\n%s" % (t, out))

    def match_lines(self, what, text, checks):
        """Positive patterns match in order. A -NOT or -COUNT pattern looks at
        the section after the previous positive match (up to the next blank
        line), or at the whole text before any positive match."""
        lines = text.split("\n")
        pos, scoped = 0, False

        def section():
            if not scoped:
                return lines
            end = pos
            while end < len(lines) and lines[end].strip():
                end += 1
            return lines[pos:end]

        for key, val in checks:
            if key.endswith("-NOT"):
                bad = [l for l in section() if re.search(val, l)]
                if bad:
                    raise Failure("%s: %r should not match, but matches %r" % (what, val, bad[0]))
            elif key.endswith("-COUNT"):
                n, pat = val.split(None, 1)
                k = sum(1 for l in section() if re.search(pat, l))
                if k != int(n):
                    raise Failure("%s: %r matches %d lines, expected %s:\n%s" % (what, pat, k, n, text))
            else:
                while pos < len(lines) and not re.search(val, lines[pos]):
                    pos += 1
                if pos == len(lines):
                    raise Failure("%s: no line matches %r (in order) in:\n%s" % (what, val, text))
                pos += 1
                scoped = True

    def defines(self):
        """The -D NAME=VALUE options of BUILD-FLAGS: types, emit-ir and
        explain see the configuration that is built."""
        out, flags = [], self.build_flags
        for i, f in enumerate(flags):
            if f == "-D" and i + 1 < len(flags):
                out += ["-D", flags[i + 1]]
            elif f.startswith("-D") and len(f) > 2:
                out.append(f)
        return out

    def check_output(self, cmd, checks):
        mesh = ["--mesh", self.mesh] if self.mesh else []
        rc, out, err = run(self.shdc_cmd(cmd, self.path, *mesh, *self.defines()))
        if rc != 0:
            raise Failure("shdc %s failed:\n%s" % (cmd, err))
        self.match_lines("shdc " + cmd, out, checks)

    # ---- running -------------------------------------------------------------

    def build(self, mesh, exe):
        rc, out, err = run(self.shdc_cmd("build", self.path, "-o", exe, "--mesh", mesh, *self.build_flags),
                           timeout=300)
        if rc != 0:
            raise Failure("shdc build --mesh %s failed:\n%s%s" % (mesh, out, err))

    def ranks(self, mesh):
        n = 1
        for part in mesh.split(","):
            n *= int(part.split("=")[1])
        return n

    def execute(self, mesh, tmp, tag):
        d = os.path.join(tmp, tag)
        os.makedirs(d)
        exe = os.path.join(tmp, "prog_" + tag)
        self.build(mesh, exe)
        rc, out, err = run(mpirun_cmd(self.ranks(mesh)) + [exe] + self.args, cwd=d)
        if rc != 0:
            raise Failure("run with --mesh %s exited %d:\n%s%s" % (mesh, rc, out, err))
        return d, out

    def ones_mesh(self):
        m = self.runs[0]
        return ",".join(p.split("=")[0] + "=1" for p in m.split(","))

    def compare_dirs(self, ref, d, mesh):
        rfiles = sorted(os.path.basename(f) for f in glob.glob(os.path.join(ref, "*.npy")))
        dfiles = sorted(os.path.basename(f) for f in glob.glob(os.path.join(d, "*.npy")))
        if rfiles != dfiles:
            raise Failure("mesh %s saved %s, the all-ones build saved %s" % (mesh, dfiles, rfiles))
        for f in rfiles:
            if f[:-4] in self.mesh_dependent:
                continue
            a, b = np.load(os.path.join(ref, f)), np.load(os.path.join(d, f))
            self.assert_close(f + " at mesh " + mesh, b, a)

    def assert_close(self, what, got, want):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Failure("%s: %s %s, expected %s %s" % (what, got.dtype, got.shape, want.dtype, want.shape))
        if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
            if not np.array_equal(got, want):
                raise Failure("%s differs:\n%s\nexpected\n%s" % (what, got, want))
            return
        rtol, atol = self.tol or ((1e-4, 1e-5) if got.dtype == np.float32 else (1e-9, 1e-12))
        if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            raise Failure("%s differs (max abs error %g, rtol %g atol %g):\n%s\nexpected\n%s" %
                          (what, err, rtol, atol, got, want))

    def mesh_sizes(self, mesh):
        return {p.split("=")[0]: int(p.split("=")[1]) for p in mesh.split(",")}

    def check_refs(self, d, mesh):
        env = {"np": np, "mesh": self.mesh_sizes(mesh)}
        for f in glob.glob(os.path.join(d, "*.npy")):
            env[os.path.basename(f)[:-4]] = np.load(f)
        try:
            exec("\n".join(self.refs), env)
        except Exception as e:  # an assertion of the REF lines, or a mistake in them
            raise Failure("the REF lines failed: %s: %s" % (type(e).__name__, e))
        refs = [k for k in env if k.startswith("ref_")]
        if not refs:
            raise Failure("REF lines define no ref_NAME")
        for name in self.mesh_dependent:
            if "ref_" + name not in refs:
                raise Failure("MESH-DEPENDENT %s has no ref_%s" % (name, name))
        for k in refs:
            name = k[4:]
            if name not in env:
                raise Failure("%s: the program saved no %s.npy" % (k, name))
            want = np.asarray(env[k])
            got = env[name]
            if want.dtype != got.dtype:
                want = want.astype(got.dtype)
            self.assert_close("%s against NumPy at mesh %s" % (name, mesh), got, want)

    def check_stdout(self, out, mesh):
        self.match_lines("output at mesh " + mesh, out, [("STDOUT", s) for s in self.stdout] +
                         [("STDOUT-NOT", s) for s in self.stdout_not])

    def numbers(self, out):
        return [float(x) for x in re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf", out)]

    def check_runs(self):
        tmp = tempfile.mkdtemp(prefix="shdt-")
        try:
            ones = self.ones_mesh()
            ref, ref_out = self.execute(ones, tmp, "ref")
            self.check_stdout(ref_out, ones)
            if self.refs:
                if np is None:
                    raise Failure("REF needs NumPy (apt-get install python3-numpy)")
                self.check_refs(ref, ones)
            for k, mesh in enumerate(self.runs):
                if mesh == ones:
                    continue
                d, out = self.execute(mesh, tmp, "m%d" % k)
                self.check_stdout(out, mesh)
                if np is not None:
                    self.compare_dirs(ref, d, mesh)
                    if self.mesh_dependent:
                        self.check_refs(d, mesh)
                if self.same_stdout:
                    a, b = self.numbers(ref_out), self.numbers(out)
                    if len(a) != len(b) or not all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)):
                        raise Failure("printed numbers at mesh %s differ from the all-ones build:\n%s\nvs\n%s"
                                      % (mesh, out, ref_out))
            for rf in self.runfail:
                self.check_runfail(rf, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def check_runfail(self, spec, tmp):
        m = re.match(r"(\S+)\s+np=(\d+)\s+(?:args=(\S+)\s+)?(.*)$", spec)
        if not m:
            raise Failure("bad RUNFAIL line %r" % spec)
        mesh, n, pat = m.group(1), int(m.group(2)), m.group(4)
        args = m.group(3).split(",") if m.group(3) else self.args
        exe = os.path.join(tmp, "fail_prog")
        self.build(mesh, exe)
        d = os.path.join(tmp, "fail")
        os.makedirs(d, exist_ok=True)
        rc, out, err = run(mpirun_cmd(n) + [exe] + args, cwd=d, timeout=120)
        if rc == 0:
            raise Failure("RUNFAIL %s: the program succeeded" % spec)
        if not re.search(pat, out + err):
            raise Failure("RUNFAIL %s: %r not in the output:\n%s%s" % (spec, pat, out, err))

    # ---- SHD_TRACE against shdc explain ------------------------------------------

    def explain_totals(self, mesh):
        rc, out, err = run(self.shdc_cmd("explain", self.path, "--mesh", mesh, *self.defines()))
        if rc != 0:
            raise Failure("shdc explain failed:\n%s" % err)
        kinds, peak, fn = {}, None, None
        for l in out.split("\n"):
            m = re.match(r"fn (\S+)", l)
            if m:
                fn = m.group(1)
            m = re.match(r"\s+line\s+\d+\s+(\w+)(?:\.\w+)?\s+over .*?(\d+) bytes/rank", l)
            if m:
                c, b = kinds.get(m.group(1), (0, 0))
                kinds[m.group(1)] = (c + 1, b + int(m.group(2)))
            m = re.match(r"\s+peak live arrays per rank: (\d+) bytes", l)
            if m and fn == "main":
                peak = int(m.group(1))
        return kinds, peak, out

    def check_trace(self, mesh, tmp):
        exe = os.path.join(tmp, "trace_prog")
        self.build(mesh, exe)
        d = os.path.join(tmp, "trace")
        os.makedirs(d, exist_ok=True)
        rc, out, err = run(mpirun_cmd(self.ranks(mesh)) + [exe] + self.args, cwd=d, env={"SHD_TRACE": "1"})
        if rc != 0:
            raise Failure("SHD_TRACE run with --mesh %s exited %d:\n%s%s" % (mesh, rc, out, err))
        got, peak = {}, None
        for l in err.split("\n"):
            m = re.match(r"shdc trace: max over ranks: (\w+) count=(\d+) bytes=(\d+)", l)
            if m:
                got[m.group(1)] = (int(m.group(2)), int(m.group(3)))
            m = re.match(r"shdc trace: max over ranks: peak_bytes=(\d+)", l)
            if m:
                peak = int(m.group(1))
        want, want_peak, text = self.explain_totals(mesh)
        if got != want or peak != want_peak:
            raise Failure("SHD_TRACE at mesh %s measured %s, peak %s; shdc explain predicts %s, peak %s:\n%s%s"
                          % (mesh, got, peak, want, want_peak, text, err))

    def run_all(self):
        self.check_errors()
        if self.errors:
            return
        if self.types:
            self.check_types()
        if self.ir:
            self.check_output("emit-ir", self.ir)
        if self.explain:
            self.check_output("explain", self.explain)
        if self.runs or self.runfail:
            if not self.runs:
                self.runs = [self.runfail[0].split()[0]]
            self.check_runs()
        if self.trace:
            tmp = tempfile.mkdtemp(prefix="shdt-")
            try:
                for mesh in self.trace:
                    self.check_trace(mesh, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


def runtime_test(path, build):
    exe = os.path.join(build, "tests", "runtime", os.path.basename(path)[:-2])
    first = open(path).readline()
    m = re.match(r"//\s*RANKS:\s*(.*)", first)
    ranks = [int(x) for x in m.group(1).split()] if m else [1]
    for n in ranks:
        rc, out, err = run(mpirun_cmd(n) + [exe], timeout=300)
        if rc != 0:
            raise Failure("%d ranks: exit %d\n%s%s" % (n, rc, out, err))


def script_test(path, shdc):
    rc, out, err = run([sys.executable, path, "--shdc", shdc], timeout=600)
    if rc == 77:   # testlib.skip: the machine cannot run it
        raise Skipped(re.sub(r"^skipped: ", "", (out.strip().split("\n") or [""])[-1]))
    if rc != 0:
        raise Failure("exit %d\n%s%s" % (rc, out, err))


EXCERPT = re.compile(r"^```shd\n// ((?:tests|dsl-examples)/\S+\.shd)\n(.*?)^```", re.M | re.S)


def docs_excerpts(path):
    """The ```shd blocks of a doc that start with `// tests/FILE.shd`: the
    examples of the docs are excerpts of tests, so they compile and run."""
    return EXCERPT.findall(open(path).read())


def docs_test(path):
    for src, body in docs_excerpts(path):
        f = os.path.join(ROOT, src)
        if not os.path.exists(f):
            raise Failure("excerpt of %s: no such file" % src)
        want = [l.rstrip() for l in body.rstrip("\n").split("\n")]
        have = [l.rstrip() for l in open(f).read().split("\n")]
        if not any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
            raise Failure("the excerpt of %s starting %r is not in that file (keep the example and the test "
                          "the same)" % (src, want[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("patterns", nargs="*", help="run only tests whose path contains one of these")
    a = ap.parse_args()
    shdc = os.path.abspath(a.shdc)
    tests = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"), recursive=True))
    tests += sorted(glob.glob(os.path.join(ROOT, "dsl-examples", "*.shd")))
    rt = sorted(glob.glob(os.path.join(ROOT, "tests", "runtime", "test_*.c")))
    scripts = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True))
    docs = [d for d in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) if docs_excerpts(d)]
    if a.patterns:
        tests = [t for t in tests if any(p in t for p in a.patterns)]
        rt = [t for t in rt if any(p in t for p in a.patterns)]
        scripts = [t for t in scripts if any(p in t for p in a.patterns)]
        docs = [d for d in docs if any(p in d for p in a.patterns)]
    if np is None:
        print("warning: NumPy is missing, so results are not compared with references (apt-get install python3-numpy)")
    failed, skipped = [], []
    start = time.time()
    build = os.path.abspath(a.build)
    kinds = [(rt, lambda t: runtime_test(t, build)), (scripts, lambda t: script_test(t, shdc)),
             (tests, lambda t: ShdTest(t, shdc).run_all()), (docs, docs_test)]
    for paths, check in kinds:
        for t in paths:
            name = os.path.relpath(t, ROOT)
            t0 = time.time()
            try:
                check(t)
                print("PASS %s (%.1fs)" % (name, time.time() - t0), flush=True)
            except Skipped as s:
                print("SKIP %s: %s" % (name, s), flush=True)
                skipped.append(name)
            except Failure as f:
                print("FAIL %s\n  %s" % (name, str(f).replace("\n", "\n  ")), flush=True)
                failed.append(name)
    total = len(tests) + len(rt) + len(scripts) + len(docs)
    print("\n%d of %d tests passed%s in %.0fs" % (total - len(failed) - len(skipped), total,
                                                 ", %d skipped" % len(skipped) if skipped else "", time.time() - start))
    if failed:
        print("failed:\n  " + "\n  ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
