#!/usr/bin/env python3
"""The shdc test runner: `make test` runs it over everything in tests/.

Each .shd test carries its expectations in comments (the format is in
tests/README.md):

  // ERROR: E_CODE [E_CODE...] [| regex]   on a line: `shdc check` reports
                                 exactly these codes there (and a message
                                 matching regex); nothing on other lines
  // WARNING: W_CODE [W_CODE...] [| regex]  on a line: `shdc check` warns
                                 exactly these codes there (exit 0); with any
                                 WARNING line, no warning on other lines (other
                                 tests may warn; dsl-examples may not)
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
  // SERIAL: reason              run this test alone, never beside another (it
                                 times something, or needs the whole machine)

A comment that starts with an upper-case word and a colon is a directive:
one this runner does not know is an error at its file and line, and so is a
directive whose value is malformed (that test fails; the others run).

Runtime unit tests (tests/runtime/test_*.c, first line `// RANKS: 1 2 4`)
run under mpirun at each rank count. Test scripts (tests/**/test_*.py) run
with this Python and `--shdc PATH`; they pass when they exit 0, and are
skipped (not passed) when they exit 77, their last line saying why. A script or
runtime test with a line `# SERIAL: reason` (`// SERIAL: reason`) runs alone.
In docs/*.md, a ```shd block whose first line is `// tests/FILE.shd` must be
an excerpt (consecutive lines) of that test, so the documented examples are
tested ones.

Options: -j N runs N tests at a time (the SERIAL ones first, each alone,
then the rest, longest first by the times of the previous run, kept in
BUILD/test-times.json); --keep keeps every test's temporary directory (a
failing test's is always kept). A failure prints the commands to paste into
a shell to see it again.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*) \[(?P<code>E_[A-Z]+)\]$")
WDIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): warning: (?P<msg>.*) \[(?P<code>W_[A-Z_]+)\]$")

try:
    import numpy as np
except ImportError:  # the NumPy comparisons need python3-numpy
    np = None

# What every command the runner starts sees on top of the caller's
# environment: the generated C must stay warning-free under the compiler's
# own flags, and shdc re-infers every IR result's type between passes.
# Test programs are built at -O1 for plain x86-64 (SHDC_OPT, SHDC_ISA:
# a fifth of the C compiler's time of -O3 with three instruction-set copies
# of every function); a test that checks the optimised, cloned code says
# `// BUILD-FLAGS: -O3 --isa=clones` (the loop groups' vectorised sums,
# an example), and `make bench` builds as users do. main() adds the build
# cache (SHDC_CACHE), one per build directory.
BASE_ENV = {"SHD_QUIET": "1", "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "SHDC_VERIFY": "1",
            "SHDC_OPT": "-O1", "SHDC_ISA": "baseline",
            "SHDC_CFLAGS": "-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes "
                           "-Wno-unused-parameter -Wvla",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Settings of the caller's environment a pasted command needs as well (the
# sanitizer build's exit codes, the sanitizer pass's sampling).
PASSED_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "SHD_TEST_SAMPLE")



class Failure(Exception):
    """A test's expectation not met; cmds are the shell commands that show it."""

    def __init__(self, msg, cmds=()):
        super().__init__(msg)
        self.cmds = [c for c in cmds if c]


class Skipped(Exception):
    """A test script the machine cannot run (testlib.skip: exit 77)."""


def mpirun_cmd(np_):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np_)]


def shell_line(cmd, cwd=None, env=None):
    """cmd as one line to paste into a POSIX shell: its directory, the
    environment the runner gave it, the words quoted."""
    e = dict(BASE_ENV)
    e.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    e.update(env or {})
    words = ["env"] + ["%s=%s" % (k, v) for k, v in e.items()] + list(cmd)
    line = " ".join(shlex.quote(w) for w in words)
    return "cd %s && %s" % (shlex.quote(cwd), line) if cwd else line


class Result:
    def __init__(self, rc, out, err, shell):
        self.rc, self.out, self.err, self.shell = rc, out, err, shell

    def __iter__(self):  # rc, out, err = run(...)
        return iter((self.rc, self.out, self.err))


# What the commands of the test this thread runs see on top of BASE_ENV
# (--gcov: the test's own GCOV_PREFIX).
JOB_ENV = threading.local()


def run(cmd, cwd=None, timeout=300, env=None):
    e = dict(os.environ)
    e.update(BASE_ENV)
    e.update(getattr(JOB_ENV, "env", {}))
    if env:
        e.update(env)
    shell = shell_line(cmd, cwd, env)
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        raise Failure("timed out after %ds" % timeout, [shell])
    return Result(p.returncode, p.stdout, p.stderr, shell)


# ---- directives --------------------------------------------------------------------

MESH_RE = re.compile(r"^[A-Za-z_]\w*=\d+(,[A-Za-z_]\w*=\d+)*$")


def _regex(v):
    re.compile(v)
    return v


def _nonempty(v):
    if not v:
        raise ValueError("needs a value")
    return v


def _mesh(v):
    if not MESH_RE.match(v):
        raise ValueError("%r is not a mesh (AXIS=N,AXIS=N)" % v)
    return v


def _count(v):
    m = re.match(r"^(\d+)\s+(\S.*)$", v)
    if not m:
        raise ValueError("expected N REGEX")
    re.compile(m.group(2))
    return v


def _runs(v):
    runs = [r.strip() for r in v.split("|")]
    for r in runs:
        _mesh(r)
    return runs


def _tol(v):
    parts = v.split()
    if len(parts) != 2:
        raise ValueError("expected two numbers, rtol and atol (e.g. 1e-4 1e-5)")
    vals = [float(x) for x in parts]
    if any(not (x >= 0) for x in vals):
        raise ValueError("tolerances are numbers >= 0")
    return vals


RUNFAIL_RE = re.compile(r"(\S+)\s+np=(\d+)\s+(?:args=(\S+)\s+)?(.*)$")


def _runfail(v):
    m = RUNFAIL_RE.match(v)
    if not m or not m.group(4):
        raise ValueError("expected MESH np=N [args=A,B] REGEX")
    _mesh(m.group(1))
    re.compile(m.group(4))
    return v


def _errors(v, prefix="E", what="error"):
    codes, _, msg = v.partition(" | ")
    codes = codes.split()
    if not codes:
        raise ValueError("names no %s code" % what)
    for c in codes:
        if not re.match(r"^%s_[A-Z_]+$" % prefix, c):
            raise ValueError("%r is not an %s code (%s_NAME)" % (c, what, prefix))
    if msg.strip():
        re.compile(msg.strip())
    return codes, msg.strip()


def _warnings(v):
    return _errors(v, "W", "warning")


def _none(v):
    if v:
        raise ValueError("takes no value")
    return True


# Every directive: how its value is read (raising ValueError or re.error
# when it is malformed), and whether it may be given more than once.
DIRECTIVES = {
    "ERROR": (_errors, True), "WARNING": (_warnings, True), "TYPE": (_nonempty, True),
    "IR": (_regex, True), "IR-NOT": (_regex, True), "IR-COUNT": (_count, True),
    "EXPLAIN": (_regex, True), "EXPLAIN-NOT": (_regex, True), "EXPLAIN-COUNT": (_count, True),
    "MESH": (_mesh, False), "RUN": (_runs, False), "REF": (_nonempty, True),
    "MESH-DEPENDENT": (lambda v: _nonempty(v).split(), True), "TOL": (_tol, False),
    "ARGS": (lambda v: v.split(), False), "STDOUT": (_regex, True), "STDOUT-NOT": (_regex, True),
    "SAME-STDOUT": (_none, False), "RUNFAIL": (_runfail, True),
    "BUILD-FLAGS": (lambda v: _nonempty(v).split(), False), "TRACE": (_mesh, True),
    "SERIAL": (lambda v: v, False),
}
# A comment's first word in capitals (and digits, - and _), then the rest.
DIRECTIVE_RE = re.compile(r"//\s*([A-Z][A-Z0-9_]*(?:-[A-Z0-9_]+)*)\b(:?)[ \t]?(.*)$")


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ca != cb))
    return d[len(b)]


def closest_directive(word):
    best = min(DIRECTIVES, key=lambda k: edit_distance(word, k))
    return best if edit_distance(word, best) <= max(1, len(word) // 3) else None


def find_directives(path, lines):
    """The directives of a test file as (line, key, value) with the problems
    found: an unknown directive, a known one without its colon, or a
    malformed value, each as 'FILE:LINE: what'."""
    found, problems = [], []
    rel = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
    for i, l in enumerate(lines, 1):
        for m in DIRECTIVE_RE.finditer(l):
            key, colon, val = m.group(1), m.group(2), m.group(3).strip()
            if len(key) < 2:
                continue
            if key not in DIRECTIVES:
                near = closest_directive(key)
                if colon or (near and len(key) >= 4):
                    problems.append("%s:%d: unknown directive %s: %s" % (
                        rel, i, key, "did you mean %s?" % near if near else
                        "the runner knows %s (reword an ordinary comment so that it does not start with a word "
                        "in capitals and a colon)" % ", ".join(sorted(DIRECTIVES))))
                continue
            if not colon and key != "SAME-STDOUT":
                problems.append("%s:%d: directive %s needs a colon: // %s: ..." % (rel, i, key, key))
                continue
            found.append((i, key, val))
            break
    return found, problems


def file_directive(path, key):
    """The value of a `# KEY: value` or `// KEY: value` line of a script or
    runtime test, or None."""
    with open(path, errors="replace") as f:
        for l in f:
            m = re.match(r"^\s*(?:#|//)\s*%s:\s*(.*)$" % re.escape(key), l)
            if m:
                return m.group(1).strip()
    return None



def compare_lines(kind, want, want_msgs, got, msgs, err, cmd, note):
    """The ERROR (or WARNING) lines' codes exactly, each line's regex
    matching one of its messages, and no such diagnostic on other lines."""
    for line, codes in want.items():
        if sorted(got.get(line, [])) != sorted(codes):
            raise Failure("line %d: expected %s %s, got %s\n%s" % (line, kind, codes, got.get(line, []), err), cmd)
        pat = want_msgs.get(line)
        if pat and not any(re.search(pat, msg) for msg in msgs.get(line, [])):
            raise Failure("line %d: no %s message matches %r:\n%s" % (line, kind[:-1], pat,
                                                                       "\n".join(msgs.get(line, []))), cmd)
    extra = {l: c for l, c in got.items() if l not in want}
    if extra:
        raise Failure("unexpected %s %s%s:\n%s" % (kind, extra, note, err), cmd)


class ShdTest:
    def __init__(self, path, shdc):
        self.path = path
        self.shdc = shdc
        self.text = open(path).read()
        self.lines = self.text.split("\n")
        self.errors = {}          # line -> [codes]
        self.error_msgs = {}      # line -> regex the line's messages must match
        self.warnings = {}        # line -> [W_ codes]
        self.warning_msgs = {}
        self.types, self.ir, self.explain = [], [], []
        self.runs, self.refs, self.stdout, self.runfail = [], [], [], []
        self.stdout_not, self.build_flags, self.trace = [], [], []
        self.args, self.mesh, self.tol, self.same_stdout = [], None, None, False
        self.meshes = "all"       # --meshes
        self.mesh_dependent = []
        self.serial = None
        self.tmp = None           # the test's temporary directory, once made
        self.built = {}           # mesh -> (program, the command that built it)
        found, self.problems = find_directives(path, self.lines)
        seen = {}
        for i, key, raw in found:
            read, many = DIRECTIVES[key]
            rel = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
            if not many and key in seen:
                self.problems.append("%s:%d: %s is given twice (first on line %d)" % (rel, i, key, seen[key]))
                continue
            seen.setdefault(key, i)
            try:
                val = read(raw)
            except (ValueError, re.error) as e:
                self.problems.append("%s:%d: malformed %s: %r: %s" % (rel, i, key, raw, e))
                continue
            self.add(i, key, val, raw)
        if self.refs:
            try:
                compile("\n".join(self.refs), path + " (REF lines)", "exec")
            except SyntaxError as e:
                self.problems.append("%s: the REF lines are not Python: %s" % (path, e))

    def add(self, i, key, val, raw):
        if key == "ERROR":
            self.errors[i], msg = val
            if msg:
                self.error_msgs[i] = msg
        elif key == "WARNING":
            self.warnings[i], msg = val
            if msg:
                self.warning_msgs[i] = msg
        elif key == "TYPE":
            self.types.append(val)
        elif key in ("IR", "IR-NOT", "IR-COUNT"):
            self.ir.append((key, val))
        elif key in ("EXPLAIN", "EXPLAIN-NOT", "EXPLAIN-COUNT"):
            self.explain.append((key, val))
        elif key == "RUN":
            self.runs = val
        elif key == "REF":
            self.refs.append(val)
        elif key == "TOL":
            self.tol = val
        elif key == "ARGS":
            self.args = val
        elif key == "STDOUT":
            self.stdout.append(val)
        elif key == "STDOUT-NOT":
            self.stdout_not.append(val)
        elif key == "BUILD-FLAGS":
            self.build_flags = val
        elif key == "TRACE":
            self.trace.append(val)
        elif key == "SAME-STDOUT":
            self.same_stdout = True
        elif key == "MESH":
            self.mesh = val
        elif key == "RUNFAIL":
            self.runfail.append(val)
        elif key == "MESH-DEPENDENT":
            self.mesh_dependent += val
        elif key == "SERIAL":
            self.serial = val or "serial"

    def shdc_cmd(self, *args):
        return [self.shdc] + list(args)

    def tmpdir(self):
        if not self.tmp:
            self.tmp = tempfile.mkdtemp(prefix="shdt-")
        return self.tmp

    # ---- compile-time expectations ------------------------------------------

    def check_errors(self):
        res = run(self.shdc_cmd("check", self.path))
        rc, out, err = res
        cmd = [res.shell]
        got = {}
        for l in err.split("\n"):
            m = DIAG.match(l)
            if m:
                got.setdefault(int(m.group("line")), []).append(m.group("code"))
        self.check_warnings(err, cmd)
        if not self.errors:
            if rc != 0:
                raise Failure("shdc check failed (exit %d):\n%s" % (rc, err), cmd)
            return
        if rc != 1:
            raise Failure("shdc check should exit 1 on errors, exited %d:\n%s" % (rc, err), cmd)
        msgs = {}
        for l in err.split("\n"):
            m = DIAG.match(l)
            if m:
                msgs.setdefault(int(m.group("line")), []).append(m.group("msg"))
        compare_lines("errors", self.errors, self.error_msgs, got, msgs, err, cmd, "")
        # Every error line is in the fixed format, with a source line and a caret.
        elines = err.split("\n")
        for k, l in enumerate(elines):
            if ": error: " in l and not DIAG.match(l):
                raise Failure("diagnostic not in the fixed format: %r" % l, cmd)
            if DIAG.match(l) and (k + 2 >= len(elines) or "^" not in elines[k + 2]):
                raise Failure("diagnostic without source line and caret: %r" % l, cmd)

    def check_warnings(self, err, cmd):
        """The WARNING lines' codes exactly; with any, no other warning; in
        dsl-examples, none at all. Every warning in the fixed format."""
        got, msgs = {}, {}
        elines = err.split("\n")
        for k, l in enumerate(elines):
            m = WDIAG.match(l)
            if m:
                got.setdefault(int(m.group("line")), []).append(m.group("code"))
                msgs.setdefault(int(m.group("line")), []).append(m.group("msg"))
                if k + 2 >= len(elines) or "^" not in elines[k + 2]:
                    raise Failure("warning without source line and caret: %r" % l, cmd)
            elif ": warning: " in l and re.match(r"^\S+:\d+:\d+: warning: ", l):
                raise Failure("warning not in the fixed format: %r" % l, cmd)
        example = os.path.relpath(self.path, ROOT).startswith("dsl-examples" + os.sep)
        if not self.warnings and not example:
            return
        compare_lines("warnings", self.warnings, self.warning_msgs, got, msgs, err, cmd,
                      " (a dsl-example must check without warnings)" if example else "")

    def check_types(self):
        res = run(self.shdc_cmd("types", self.path) + (["--mesh", self.mesh] if self.mesh else []) +
                  self.defines())
        if res.rc != 0:
            raise Failure("shdc types failed:\n%s" % res.err, [res.shell])
        have = res.out.split("\n")
        for t in self.types:
            if t not in have:
                raise Failure("shdc types: missing line %r in:\n%s" % (t, res.out), [res.shell])

    def match_lines(self, what, text, checks, cmds=()):
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
                    raise Failure("%s: %r should not match, but matches %r" % (what, val, bad[0]), cmds)
            elif key.endswith("-COUNT"):
                n, pat = val.split(None, 1)
                k = sum(1 for l in section() if re.search(pat, l))
                if k != int(n):
                    raise Failure("%s: %r matches %d lines, expected %s:\n%s" % (what, pat, k, n, text), cmds)
            else:
                while pos < len(lines) and not re.search(val, lines[pos]):
                    pos += 1
                if pos == len(lines):
                    raise Failure("%s: no line matches %r (in order) in:\n%s" % (what, val, text), cmds)
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
        res = run(self.shdc_cmd(cmd, self.path, *mesh, *self.defines()))
        if res.rc != 0:
            raise Failure("shdc %s failed:\n%s" % (cmd, res.err), [res.shell])
        self.match_lines("shdc " + cmd, res.out, checks, [res.shell])

    # ---- running -------------------------------------------------------------

    def build(self, mesh):
        """The program built for mesh, once per test: its path and the
        command line that built it (RUN, RUNFAIL and TRACE at one mesh run
        one binary)."""
        if mesh not in self.built:
            exe = os.path.join(self.tmpdir(), "prog_%d" % len(self.built))
            res = run(self.shdc_cmd("build", self.path, "-o", exe, "--mesh", mesh, *self.build_flags), timeout=300)
            if res.rc != 0:
                raise Failure("shdc build --mesh %s failed:\n%s%s" % (mesh, res.out, res.err), [res.shell])
            self.built[mesh] = (exe, res.shell)
        return self.built[mesh]

    def ranks(self, mesh):
        n = 1
        for part in mesh.split(","):
            n *= int(part.split("=")[1])
        return n

    def execute(self, mesh, tag):
        """Builds for mesh and runs in a directory of its own: that
        directory, rank 0's output and the commands (build, run)."""
        tmp = self.tmpdir()
        d = os.path.join(tmp, tag)
        os.makedirs(d)
        exe, built = self.build(mesh)
        res = run(mpirun_cmd(self.ranks(mesh)) + [exe] + self.args, cwd=d)
        cmds = [built, res.shell]
        if res.rc != 0:
            raise Failure("run with --mesh %s exited %d:\n%s%s" % (mesh, res.rc, res.out, res.err), cmds)
        return d, res.out, cmds

    def largest_mesh(self, ones):
        """The RUN mesh of the most devices (the last of equals) other than
        the all-ones one: with --meshes=ends the only other mesh run."""
        others = [m for m in self.runs if m != ones]
        return max(reversed(others), key=self.ranks) if others else None

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

    def check_stdout(self, out, mesh, cmds):
        self.match_lines("output at mesh " + mesh, out, [("STDOUT", s) for s in self.stdout] +
                         [("STDOUT-NOT", s) for s in self.stdout_not], cmds)

    def numbers(self, out):
        return [float(x) for x in re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf", out)]

    def check_runs(self):
        ones = self.ones_mesh()
        largest = self.largest_mesh(ones)
        if self.refs and np is None:
            raise Failure("REF needs NumPy (apt-get install python3-numpy)")
        if self.meshes == "largest":
            # The sanitizer pass: one build, at the mesh of the most devices,
            # its output and REF checks; no comparison with other meshes.
            mesh = largest or ones
            d, out, cmds = self.execute(mesh, "largest")
            self.check_stdout(out, mesh, cmds)
            if self.refs:
                with_cmds(cmds, self.check_refs, d, mesh)
            for rf in self.runfail:
                self.check_runfail(rf)
            return
        ref, ref_out, ref_cmds = self.execute(ones, "ref")
        self.check_stdout(ref_out, ones, ref_cmds)
        if self.refs:
            with_cmds(ref_cmds, self.check_refs, ref, ones)
        for k, mesh in enumerate(self.runs):
            if mesh == ones or (self.meshes == "ends" and mesh != largest):
                continue
            d, out, cmds = self.execute(mesh, "m%d" % k)
            self.check_stdout(out, mesh, cmds)
            if np is not None:
                with_cmds(ref_cmds + cmds, self.compare_dirs, ref, d, mesh)
                if self.mesh_dependent:
                    with_cmds(cmds, self.check_refs, d, mesh)
            if self.same_stdout:
                a, b = self.numbers(ref_out), self.numbers(out)
                if len(a) != len(b) or not all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)):
                    raise Failure("printed numbers at mesh %s differ from the all-ones build:\n%s\nvs\n%s"
                                  % (mesh, out, ref_out), ref_cmds + cmds)
        for rf in self.runfail:
            self.check_runfail(rf)

    def check_runfail(self, spec):
        m = RUNFAIL_RE.match(spec)
        mesh, n, pat = m.group(1), int(m.group(2)), m.group(4)
        args = m.group(3).split(",") if m.group(3) else self.args
        tmp = self.tmpdir()
        exe, built = self.build(mesh)
        d = os.path.join(tmp, "fail")
        os.makedirs(d, exist_ok=True)
        res = run(mpirun_cmd(n) + [exe] + args, cwd=d, timeout=120)
        if res.rc == 0:
            raise Failure("RUNFAIL %s: the program succeeded" % spec, [built, res.shell])
        if not re.search(pat, res.out + res.err):
            raise Failure("RUNFAIL %s: %r not in the output:\n%s%s" % (spec, pat, res.out, res.err),
                          [built, res.shell])

    # ---- SHD_TRACE against shdc explain ------------------------------------------

    def explain_totals(self, mesh):
        res = run(self.shdc_cmd("explain", self.path, "--mesh", mesh, *self.defines()))
        if res.rc != 0:
            raise Failure("shdc explain failed:\n%s" % res.err, [res.shell])
        kinds, peak, fn = {}, None, None
        for l in res.out.split("\n"):
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
        return kinds, peak, res.out, res.shell

    def check_trace(self, mesh):
        tmp = self.tmpdir()
        exe, built = self.build(mesh)
        d = os.path.join(tmp, "trace")
        os.makedirs(d, exist_ok=True)
        res = run(mpirun_cmd(self.ranks(mesh)) + [exe] + self.args, cwd=d, env={"SHD_TRACE": "1"})
        if res.rc != 0:
            raise Failure("SHD_TRACE run with --mesh %s exited %d:\n%s%s" % (mesh, res.rc, res.out, res.err),
                          [built, res.shell])
        got, peak = {}, None
        for l in res.err.split("\n"):
            m = re.match(r"shdc trace: max over ranks: (\w+) count=(\d+) bytes=(\d+)", l)
            if m:
                got[m.group(1)] = (int(m.group(2)), int(m.group(3)))
            m = re.match(r"shdc trace: max over ranks: peak_bytes=(\d+)", l)
            if m:
                peak = int(m.group(1))
        want, want_peak, text, explain_cmd = self.explain_totals(mesh)
        if got != want or peak != want_peak:
            raise Failure("SHD_TRACE at mesh %s measured %s, peak %s; shdc explain predicts %s, peak %s:\n%s%s"
                          % (mesh, got, peak, want, want_peak, text, res.err), [built, res.shell, explain_cmd])

    def run_all(self):
        if self.problems:
            raise Failure("\n".join(self.problems))
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
        for mesh in self.trace:
            self.check_trace(mesh)


def with_cmds(cmds, fn, *args):
    """fn(*args), its failure showing the commands that made what it checks."""
    try:
        return fn(*args)
    except Failure as f:
        raise Failure(str(f), cmds + f.cmds)


def runtime_test(path, build):
    exe = os.path.join(build, "tests", "runtime", os.path.basename(path)[:-2])
    first = open(path).readline()
    m = re.match(r"//\s*RANKS:\s*(.*)", first)
    try:
        ranks = [int(x) for x in m.group(1).split()] if m else [1]
    except ValueError:
        raise Failure("%s:1: malformed RANKS: %r (rank counts, e.g. // RANKS: 1 2 4)"
                      % (os.path.relpath(path, ROOT), m.group(1)))
    for n in ranks:
        res = run(mpirun_cmd(n) + [exe], timeout=300)
        if res.rc != 0:
            raise Failure("%d ranks: exit %d\n%s%s" % (n, res.rc, res.out, res.err), [res.shell])


def script_test(path, shdc):
    res = run([sys.executable, path, "--shdc", shdc], timeout=600)
    if res.rc == 77:
        raise Skipped(re.sub(r"^skipped: ", "", (res.out.strip().split("\n") or [""])[-1]))
    if res.rc != 0:
        raise Failure("exit %d\n%s%s" % (res.rc, res.out, res.err), [res.shell])


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


# ---- running the tests, N at a time -------------------------------------------------

class Job:
    """One test: its name (path relative to the tree), how to check it, and
    whether it must run alone."""

    def __init__(self, path, check, serial=None):
        self.path, self.check, self.serial = path, check, serial
        self.name = os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


class Runner:
    def __init__(self, jobs, keep, times, gcov=None):
        self.jobs, self.keep, self.times, self.gcov = jobs, keep, times, gcov
        self.failed, self.skipped, self.took = [], [], {}
        self.lock = threading.Lock()

    def one(self, job):
        """Runs a job and prints its PASS or FAIL block in one piece."""
        t0 = time.time()
        ctx, lines, ok, skip = {}, [], False, None
        # --gcov: each test's coverage counters in a directory of its own
        # (tools/san-coverage reads them per test).
        JOB_ENV.env = {"GCOV_PREFIX": os.path.join(self.gcov, job.name.replace(os.sep, "__"))} if self.gcov else {}
        try:
            job.check(job.path, ctx)
            ok = True
        except Skipped as s:
            ok, skip = True, str(s)
        except Failure as f:
            lines.append("  " + str(f).replace("\n", "\n  "))
            if f.cmds:
                lines.append("  to see it again, in a shell:")
                lines += ["    " + c for c in f.cmds]
        except Exception:  # a mistake in the runner or in the test's own data: this test fails, the run goes on
            lines.append("  the runner failed on this test:\n  " +
                         traceback.format_exc().rstrip().replace("\n", "\n  "))
        tmp = ctx.get("tmp") and ctx["tmp"]()
        if tmp and (self.keep or not ok):
            lines.append("  its files are in %s" % tmp)
        elif tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        dt = time.time() - t0
        with self.lock:
            self.took[job.name] = dt
            if skip is not None:
                self.skipped.append(job.name)
                print("SKIP %s: %s" % (job.name, skip), flush=True)
            elif ok:
                print("PASS %s (%.1fs)%s" % (job.name, dt, "\n" + "\n".join(lines) if lines else ""), flush=True)
            else:
                self.failed.append(job.name)
                print("FAIL %s (%.1fs)\n%s" % (job.name, dt, "\n".join(lines)), flush=True)

    def run(self, nproc):
        serial = [j for j in self.jobs if j.serial]
        rest = [j for j in self.jobs if not j.serial]
        if nproc > 1:
            # Longest first (by the last run's times; unknown tests first), so
            # that the last tests to start are short ones.
            rest.sort(key=lambda j: -self.times.get(j.name, 1e9))
        for j in serial:
            self.one(j)
        if nproc <= 1:
            for j in rest:
                self.one(j)
            return
        queue = list(reversed(rest))
        qlock = threading.Lock()

        def worker():
            while True:
                with qlock:
                    if not queue:
                        return
                    j = queue.pop()
                self.one(j)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(nproc, len(rest)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


class ShdJob:
    """A .shd test: parsed when it runs, so that a malformed one fails alone."""

    def __init__(self, shdc, meshes):
        self.shdc, self.meshes = shdc, meshes

    def __call__(self, path, ctx):
        t = ShdTest(path, self.shdc)
        t.meshes = self.meshes
        ctx["tmp"] = lambda: t.tmp
        t.run_all()


def read_list(path):
    """The test paths a list file names (relative to the tree), one a
    line; blank lines and # comments ignored. A path that names no test is
    an error: a list must not silently outlive a renamed test."""
    out = set()
    with open(path) as f:
        for k, l in enumerate(f, 1):
            l = l.split("#", 1)[0].strip()
            if not l:
                continue
            if not os.path.isfile(os.path.join(ROOT, l)):
                sys.exit("%s:%d: %s: no such test" % (path, k, l))
            out.add(l)
    return out


def load_times(path):
    try:
        with open(path) as f:
            return {k: float(v) for k, v in json.load(f).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def save_times(path, times):
    try:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(times, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # only an ordering hint for the next run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="run N tests at a time (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep every test's temporary directory")
    ap.add_argument("--meshes", choices=("all", "ends", "largest"), default="all",
                    help="the RUN meshes a .shd test builds and runs: all of them, compared with the all-ones one "
                         "(default); the all-ones one and the largest; or the largest alone, with its output and "
                         "REF checks (the sanitizer pass: memory errors and undefined behaviour; the normal pass "
                         "compares every mesh)")
    ap.add_argument("--leave-out", metavar="FILE",
                    help="do not run the tests FILE lists (one path a line, # comments): the sanitizer pass leaves "
                         "out what tests/san-leave-out lists, tests whose compiler and runtime lines the others reach "
                         "(tools/san-coverage chose them)")
    ap.add_argument("--gcov", metavar="DIR",
                    help="give each test GCOV_PREFIX=DIR/NAME, so that a build with --coverage writes each test's "
                         "counters apart (tools/san-coverage)")
    ap.add_argument("patterns", nargs="*", help="run only tests whose path contains one of these (or these files)")
    a = ap.parse_args()
    if a.jobs < 1:
        ap.error("-j needs a number of tests >= 1")
    shdc = os.path.abspath(a.shdc)
    build = os.path.abspath(a.build)
    # Every build of the run shares one cache (the translation units of a
    # program built at one mesh by several tests, or by RUN and a script,
    # compile once); a test of the cache itself sets its own.
    BASE_ENV["SHDC_CACHE"] = os.path.join(build, "test-cache")
    tests = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.shd"), recursive=True))
    tests += sorted(glob.glob(os.path.join(ROOT, "dsl-examples", "*.shd")))
    rt = sorted(glob.glob(os.path.join(ROOT, "tests", "runtime", "test_*.c")))
    scripts = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True))
    docs = [d for d in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) if docs_excerpts(d)]
    if a.patterns:
        def pick(paths):
            return [t for t in paths if any(p in t for p in a.patterns)]
        # A pattern naming a .shd file outside the tree runs that file.
        outside = [os.path.abspath(p) for p in a.patterns if p.endswith(".shd") and os.path.isfile(p) and
                   not os.path.abspath(p).startswith(ROOT + os.sep)]
        tests = pick(tests) + outside
        rt, scripts, docs = pick(rt), pick(scripts), pick(docs)
    left_out = []
    if a.leave_out:
        listed = read_list(a.leave_out)
        left_out = [j for j in tests + scripts + rt if os.path.relpath(j, ROOT) in listed]
        tests, scripts, rt = ([t for t in paths if t not in left_out] for paths in (tests, scripts, rt))
    if np is None:
        print("warning: NumPy is missing, so results are not compared with references (apt-get install python3-numpy)")
    shd = ShdJob(shdc, a.meshes)
    jobs = [Job(t, lambda t, ctx: runtime_test(t, build), file_directive(t, "SERIAL")) for t in rt]
    jobs += [Job(t, lambda t, ctx: script_test(t, shdc), file_directive(t, "SERIAL")) for t in scripts]
    jobs += [Job(t, shd, file_directive(t, "SERIAL")) for t in tests]
    jobs += [Job(d, lambda d, ctx: docs_test(d)) for d in docs]
    times_path = os.path.join(build, "test-times.json")
    times = load_times(times_path)
    start = time.time()
    r = Runner(jobs, a.keep, times, a.gcov and os.path.abspath(a.gcov))
    if left_out:
        print("leaving out %d tests listed in %s" % (len(left_out), os.path.relpath(os.path.abspath(a.leave_out))),
              flush=True)
    try:
        r.run(a.jobs)
    except KeyboardInterrupt:
        print("\ninterrupted after %d of %d tests" % (len(r.took), len(jobs)), flush=True)
        os._exit(130)
    times.update(r.took)
    if not a.patterns:
        times = {k: v for k, v in times.items() if k in r.took}
    save_times(times_path, times)
    print("\n%d of %d tests passed%s in %.0fs (-j %d)" % (len(jobs) - len(r.failed) - len(r.skipped), len(jobs),
                                                        ", %d skipped" % len(r.skipped) if r.skipped else "",
                                                        time.time() - start, a.jobs))
    if r.failed:
        print("failed:\n  " + "\n  ".join(sorted(r.failed)))
        sys.exit(1)


if __name__ == "__main__":
    main()
