#!/usr/bin/env python3
"""The test runner cannot pass vacuously (issue 16, item 6): tests/run.py given
test files with a misspelled directive, a known one without its colon, an
ordinary comment that looks like a directive and a malformed value fails each
of them, naming the file and line, and still runs the good test beside them;
a failing test prints commands that, pasted into a shell, show the failure
again; --keep keeps a passing test's temporary directory, a failing test's
is kept anyway; -j 2 runs the same tests to the same verdicts;
--meshes=ends builds the all-ones and the largest RUN mesh only,
--meshes=largest the largest alone (with its REF checks); and the
directives tests/README.md documents are exactly those the runner knows."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROG = """mesh {X: 2}
fn main() {
  let x: f32[8@X] = ones()
  save("x.npy", x)
}
"""
CASES = {
    # name: (directive lines, whether it passes, what the report must say)
    "good": (["// RUN: X=1", "// REF: ref_x = np.ones(8, np.float32)"], True, None),
    "misspelled": (["// MESH: X=2", "// EXPLIAN: all_reduce"], False,
                   r"misspelled\.shd:2: unknown directive EXPLIAN: did you mean EXPLAIN\?"),
    "nocolon": (["// MESH: X=2", "// EXPLAIN-NOT all_reduce"], False,
                r"nocolon\.shd:2: directive EXPLAIN-NOT needs a colon"),
    "comment": (["// RUN: X=1", "// NOTE: an ordinary comment"], False, r"comment\.shd:2: unknown directive NOTE"),
    "badtol": (["// RUN: X=1", "// TOL: 1e-3"], False, r"badtol\.shd:2: malformed TOL: '1e-3'"),
    "badcount": (["// MESH: X=2", "// IR-COUNT: some fill"], False, r"badcount\.shd:2: malformed IR-COUNT"),
    "badregex": (["// MESH: X=2", "// IR: fill(("], False, r"badregex\.shd:2: malformed IR"),
    "badmesh": (["// RUN: X=1 | X2"], False, r"badmesh\.shd:1: malformed RUN"),
    "twice": (["// MESH: X=2", "// MESH: X=1"], False, r"twice\.shd:2: MESH is given twice \(first on line 1\)"),
    "wrongir": (["// MESH: X=2", "// IR: no_such_instruction"], False, r"no line matches 'no_such_instruction'"),
}


def runner(args, build, tmpdir=None):
    env = dict(os.environ, TMPDIR=tmpdir) if tmpdir else None
    return subprocess.run([sys.executable, os.path.join(ROOT, "tests", "run.py"), "--build", build] + args,
                          capture_output=True, text=True, timeout=900, env=env)


def blocks(out):
    """The report of each test: name -> (PASS/FAIL, its lines)."""
    res, cur = {}, None
    for l in out.split("\n"):
        m = re.match(r"^(PASS|FAIL) (\S+)", l)
        if m:
            cur = os.path.basename(m.group(2))[:-4]
            res[cur] = (m.group(1), [])
        elif l.startswith("  ") and cur:
            res[cur][1].append(l[2:])
        else:
            cur = None
    return res


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name, (lines, _, _) in CASES.items():
            f = os.path.join(d, name + ".shd")
            with open(f, "w") as fh:
                fh.write("\n".join(lines) + "\n" + PROG)
            files.append(f)
        for jobs in ("1", "2"):
            p = runner(["--shdc", shdc, "-j", jobs, "--keep"] + files, d)
            got = blocks(p.stdout)
            if p.returncode != 1:
                failures.append("-j %s: the runner exited %d, expected 1:\n%s%s" % (jobs, p.returncode, p.stdout,
                                                                                  p.stderr))
            if "1 of %d tests passed" % len(CASES) not in p.stdout:
                failures.append("-j %s: the summary does not say 1 of %d passed:\n%s" % (jobs, len(CASES), p.stdout))
            for name, (_, passes, pattern) in CASES.items():
                verdict, lines = got.get(name, (None, []))
                text = "\n".join(lines)
                if verdict != ("PASS" if passes else "FAIL"):
                    failures.append("-j %s: %s: %s, expected %s:\n%s" % (jobs, name, verdict,
                                                                          "PASS" if passes else "FAIL", p.stdout))
                elif pattern and not re.search(pattern, text):
                    failures.append("-j %s: %s: the report does not match %r:\n%s" % (jobs, name, pattern, text))
            # --keep: the passing test's directory, with its saved array.
            m = re.search(r"its files are in (\S+)", "\n".join(got.get("good", ("", []))[1]))
            if not m or not os.path.exists(os.path.join(m.group(1), "ref", "x.npy")):
                failures.append("-j %s: --keep did not keep the passing test's directory:\n%s" % (jobs, p.stdout))
            elif m:
                shutil.rmtree(m.group(1), ignore_errors=True)
            # The failing IR check's command, pasted into a shell, prints the
            # IR it looked at.
            lines = got.get("wrongir", ("", []))[1]
            if "to see it again, in a shell:" not in lines:
                failures.append("-j %s: wrongir prints no command:\n%s" % (jobs, "\n".join(lines)))
            else:
                cmd = lines[lines.index("to see it again, in a shell:") + 1].strip()
                s = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=120)
                if s.returncode != 0 or not re.search(r"= fill", s.stdout):
                    failures.append("-j %s: the printed command %r did not show the IR (exit %d):\n%s%s"
                                    % (jobs, cmd, s.returncode, s.stdout, s.stderr))
        # --meshes=ends builds and runs the all-ones mesh and the largest RUN
        # mesh only (the last of equals), --meshes=largest (the sanitizer
        # pass) the largest alone; the default, every one.
        f = os.path.join(d, "meshes.shd")
        with open(f, "w") as fh:
            fh.write("// RUN: X=2 | X=1 | X=4 | X=2\n// REF: ref_x = np.ones(8, np.float32)\n" + PROG.replace(
                "mesh {X: 2}", "mesh {X: 4}"))
        # Each mesh is built once (X=2 runs twice on one program).
        for opt, want, nbuilt in (("--meshes=ends", ["m2", "ref"], 2), ("--meshes=largest", ["largest"], 1),
                                  ("--meshes=all", ["m0", "m2", "m3", "ref"], 3)):
            p = runner(["--shdc", shdc, "--keep", opt, f], d)
            m = re.search(r"its files are in (\S+)", p.stdout)
            ran = sorted(x for x in os.listdir(m.group(1)) if os.path.isdir(os.path.join(m.group(1), x))) if m else None
            built = len([x for x in os.listdir(m.group(1)) if x.startswith("prog_")]) if m else None
            if p.returncode != 0 or ran != want or built != nbuilt:
                failures.append("%s: exit %d, ran %s from %s programs, expected %s from %d:\n%s"
                                % (opt, p.returncode, ran, built, want, nbuilt, p.stdout))
            if m:
                shutil.rmtree(m.group(1), ignore_errors=True)
        # --leave-out FILE: the tests it lists do not run (a line naming no
        # test is an error, so that a list cannot outlive a renamed test).
        listed = os.path.join(d, "leave-out")
        with open(listed, "w") as fh:
            fh.write("# a comment\n%s\n" % os.path.relpath(files[0], testlib.ROOT))
        p = runner(["--shdc", shdc, "--leave-out", listed, files[0], f], d)
        if p.returncode != 0 or "leaving out 1 tests" not in p.stdout or "1 of 1 tests passed" not in p.stdout:
            failures.append("--leave-out: exit %d, expected the one listed test left out:\n%s" % (p.returncode, p.stdout))
        with open(listed, "a") as fh:
            fh.write("tests/no/such_test.shd\n")
        p = runner(["--shdc", shdc, "--leave-out", listed, f], d)
        if p.returncode == 0 or not re.search(r"leave-out:3: tests/no/such_test.shd: no such test", p.stdout + p.stderr):
            failures.append("--leave-out naming no test: exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))
        # Without --keep a passing test leaves nothing behind (in a temporary
        # directory of its own: the suite's other tests use the shared one).
        own = tempfile.mkdtemp(prefix="runner-tmp-")
        p = runner(["--shdc", shdc, files[0]], d, own)
        left = [x for x in os.listdir(own) if x.startswith("shdt-")]
        shutil.rmtree(own, ignore_errors=True)
        if p.returncode != 0 or left:
            failures.append("a passing test without --keep: exit %d, left %s:\n%s" % (p.returncode, left, p.stdout))

    # The directives of tests/README.md's table are the runner's.
    import importlib.util
    spec = importlib.util.spec_from_file_location("shd_test_runner", os.path.join(ROOT, "tests", "run.py"))
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    with open(os.path.join(ROOT, "tests", "README.md")) as f:
        readme = f.read()
    table = readme[readme.index("| directive | meaning |"):]
    table = table[:table.index("\n\n")]
    documented = set()
    for row in table.split("\n")[2:]:
        documented |= set(re.findall(r"`(?://\s*)?([A-Z][A-Z-]+)[:`]", row.split(" | ")[0]))
    if documented != set(run.DIRECTIVES):
        failures.append("tests/README.md documents %s; the runner knows %s" % (sorted(documented),
                                                                            sorted(run.DIRECTIVES)))
    for f in failures:
        print("FAIL", f)
    print("%d problems" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
