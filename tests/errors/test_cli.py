#!/usr/bin/env python3
"""Exit status of shdc (fixed): 0 clean, 1 errors in the program, 2 usage or
I/O trouble; and one diagnostic per error in the fixed format on stderr."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIAG = re.compile(r"^\S+:\d+:\d+: error: .* \[E_[A-Z]+\]$", re.M)


def trouble_cases(shdc, good, d):
    """I/O, toolchain and usage trouble: exit 2 with the cause named, never a
    hang, never blamed on shdc, never an overwritten input."""
    copy = os.path.join(d, "prog.shd")
    with open(good) as f, open(copy, "w") as g:
        g.write(f.read())
    fifo = os.path.join(d, "fifo.shd")
    os.mkfifo(fifo)
    big = os.path.join(d, "big.shd")
    with open(big, "w") as f:
        f.write("// padding\n" * (900 * 1024))
    # A C compiler that fails on the generated code but builds anything else:
    # what shdc reports when its own C is wrong (a bug in shdc).
    fussy = os.path.join(d, "fussy-cc")
    with open(fussy, "w") as f:
        f.write('#!/bin/sh\ncase "$*" in *shdc-probe-*) exec mpicc "$@";; esac\nexit 1\n')
    os.chmod(fussy, 0o755)
    victim = os.path.join(d, "victim")
    with open(victim, "w") as f:
        f.write("not to be written\n")
    link = os.path.join(d, "link")
    os.symlink(victim, link)
    os.symlink(victim, os.path.join(d, "p3.c"))
    ro = os.path.join(d, "ro")
    os.mkdir(ro)
    os.chmod(ro, 0o555)
    out = os.path.join(d, "p")
    cases = [
        (["build", copy, "-o", copy], {}, 2, r"-o .* is the input file"),
        (["build", copy, "-o", os.path.join(d, ".", "prog.shd")], {}, 2, r"is the input file"),
        (["check", fifo], {}, 2, r"not a regular file \(a FIFO\)"),
        (["check", "/dev/zero"], {}, 2, r"not a regular file \(a device\)"),
        (["check", d], {}, 2, r"not a regular file \(a directory\)"),
        (["check", big], {}, 2, r"at most 8388608 bytes"),
        (["build", copy, "-o", out], {"SHDC_CC": os.path.join(d, "no-such-cc")}, 2,
         r"cannot run the C compiler .*no-such-cc.*No such file"),
        (["build", copy, "-o", out], {"SHDC_CFLAGS": "-fno-such-flag-at-all"}, 2,
         r"cannot build even an empty program .*SHDC_CFLAGS='-fno-such-flag-at-all'"),
        (["build", copy, "-o", os.path.join(d, "missing-dir", "p")], {}, 2, r"cannot write .*missing-dir"),
        (["build", copy, "-o", d], {}, 2, r"is a directory"),
        (["build", copy, "-o", out], {"SHDC_CC": fussy}, 2, r"internal compiler error: the C compiler failed"),
        (["check", copy, "--mesh", "X=2,X=4"], {}, 2, r"names axis 'X' twice"),
        (["check", copy, "--mesh", "X=2", "--mesh", "Y=1"], {}, 2, r"--mesh is given twice"),
        (["check", copy, "--max-errors=-1"], {}, 2, r"--max-errors expects"),
        (["build", copy, "-o", out, "-o", out], {}, 2, r"-o is given twice"),
        # What is at an output's name is never written through or replaced
        # unless it is a regular file (issue 19): a FIFO would block, a link
        # would be followed.
        (["check", copy, "--diagnostics=json", "-o", fifo], {}, 2, r"fifo.shd is a FIFO, not a regular file"),
        (["build", copy, "-o", fifo], {}, 2, r"fifo.shd is a FIFO, not a regular file"),
        (["build", copy, "-o", link], {}, 2, r"link is a symbolic link, not a regular file"),
        (["build", copy, "-o", os.path.join(d, "p2"), "--keep-c"], {}, 0, r"^$"),
        (["build", copy, "-o", os.path.join(d, "p3"), "--keep-c"], {}, 2,
         r"p3\.c is a symbolic link, not a regular file"),
        (["trace-summary", fifo], {}, 2, r"not a regular file \(a FIFO\)"),
        (["trace-summary", "/dev/zero"], {}, 2, r"not a regular file \(a device\)"),
    ]
    if os.geteuid() != 0:   # root writes anywhere
        cases.append((["build", copy, "-o", os.path.join(ro, "p")], {}, 2, r"cannot write .*Permission denied"))
    failures = []
    for args, env, want, pattern in cases:
        e = dict(os.environ, **env)
        try:
            p = subprocess.run([shdc] + args, capture_output=True, text=True, timeout=120, env=e)
        except subprocess.TimeoutExpired:
            failures.append("shdc %s: no answer in 120 s" % " ".join(args))
            continue
        if p.returncode != want or not re.search(pattern, p.stderr):
            failures.append("shdc %s %s: exit %d, expected %d and /%s/\n%s" % (
                " ".join("%s=%s" % kv for kv in env.items()), " ".join(args), p.returncode, want, pattern, p.stderr))
        if "internal compiler error" in p.stderr and "fussy" not in str(env):
            failures.append("shdc %s: blamed itself for the user's trouble:\n%s" % (" ".join(args), p.stderr))
    with open(good) as f, open(copy) as g:
        if f.read() != g.read():
            failures.append("build -o INPUT changed the input file")
    with open(victim) as f:
        if f.read() != "not to be written\n":
            failures.append("an output was written through a symbolic link")
    if not os.path.islink(link) or not os.path.exists(os.path.join(d, "p2.c")):
        failures.append("build -o LINK replaced the link, or --keep-c kept no C")
    left = [f for f in os.listdir(d) if f.startswith(".shdc")]
    if left:
        failures.append("builds left %r" % left)
    os.chmod(ro, 0o755)
    return failures


DEFINES_SHD = """mesh {X: 2}
const C = 4
const H = C * 2            // follows an override of C
fn main() {
    let a: f32[H@X] = ones()
    let b: f32[C] = zeros()
    save("a.npy", a)
}
"""


def check_defines(shdc, d, failures):
    """-D NAME=VALUE overrides an integer const for every command that types
    the program; unknown names and non-integer values are usage errors (2)
    that name them."""
    src = os.path.join(d, "defines.shd")
    with open(src, "w") as f:
        f.write(DEFINES_SHD)
    want = {
        (): ["main.a: f32[8@X]", "main.b: f32[4]"],
        ("-D", "C=8"): ["main.a: f32[16@X]", "main.b: f32[8]"],
        ("-DC=8",): ["main.a: f32[16@X]", "main.b: f32[8]"],
        ("-D", "C=8", "-D", "C=2"): ["main.a: f32[4@X]", "main.b: f32[2]"],   # the last one wins
        ("-D", "H=6", "-D", "C=1"): ["main.a: f32[6@X]", "main.b: f32[1]"],   # a derived const itself
    }
    for flags, lines in want.items():
        p = subprocess.run([shdc, "types", src] + list(flags), capture_output=True, text=True, timeout=60)
        if p.returncode != 0 or p.stdout.split() != " ".join(lines).split():
            failures.append("shdc types %s: %r (exit %d), expected %r\n%s" % (" ".join(flags), p.stdout, p.returncode,
                                                                              lines, p.stderr))
    for cmd in ("check", "emit-ir", "emit-c", "explain"):
        base = subprocess.run([shdc, cmd, src], capture_output=True, text=True, timeout=60)
        p = subprocess.run([shdc, cmd, src, "-D", "C=16"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0 or (cmd != "check" and p.stdout == base.stdout):
            failures.append("shdc %s -D C=16: exit %d or the same output as without it\n%s" % (cmd, p.returncode,
                                                                                             p.stderr))
    prog = os.path.join(d, "defines")
    p = subprocess.run([shdc, "build", src, "-o", prog, "-D", "C=3"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not os.path.exists(prog):
        failures.append("shdc build -D C=3 failed:\n%s" % p.stderr)
    # H = 6 is divisible by X = 2; C = 5 gives H = 10, still fine; C = 1 over X = 4 is not.
    p = subprocess.run([shdc, "check", src, "-D", "C=1", "--mesh", "X=4"], capture_output=True, text=True)
    # The message names the const that sized the dim, and the -D that fixes it (issue 27, item 5).
    if p.returncode != 1 or not re.search(r"dim 0 of f32\[2@X\] has size 2 \(the const H\), which is not divisible "
                                          r"by 4 \(the size of X\); raise H to a multiple of 4 \(e\.g\. -D H=4\) "
                                          r"or shard the dim over other axes \[E_DIVIS\]", p.stderr):
        failures.append("shdc check -D C=1 --mesh X=4: expected E_DIVIS naming H (exit 1), got %d\n%s" % (
            p.returncode, p.stderr))
    bad = [
        (["-D", "Q=8"], r"no const 'Q' \(its consts: C, H\)"),
        (["-D", "C=8.5"], r"-D C: the value '8\.5' is not an integer"),
        (["-D", "C=x"], r"-D C: the value 'x' is not an integer"),
        (["-D", "C="], r"-D C: the value '' is not an integer"),
        (["-D", "C=99999999999999999999"], r"is not an integer"),
        (["-D", "C"], r"-D expects NAME=VALUE .* not 'C'"),
        (["-D", "=3"], r"-D expects NAME=VALUE"),
        (["-D", "1C=3"], r"-D expects NAME=VALUE"),
        (["-D"], r"-D needs NAME=VALUE"),
    ]
    for flags, pat in bad:
        for cmd in ("check", "build", "types"):
            p = subprocess.run([shdc, cmd, src] + (["-o", prog] if cmd == "build" else []) + flags,
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 2 or not re.search(pat, p.stderr):
                failures.append("shdc %s %s: exit %d (expected 2) or no message matching %r:\n%s" %
                                (cmd, " ".join(flags), p.returncode, pat, p.stderr))


def convention_cases(shdc, good, bad, d):
    """getopt_long's conventions (issue 27, item 6): `-` reads the program
    from stdin (named <stdin>), `--` ends the options, `-oFILE`, `--opt VALUE`
    and `--opt=VALUE`, a unique prefix of a long option, -V; a mistyped
    option gets the nearest one, an ambiguous prefix its candidates, and an
    option of one value given twice is refused."""
    failures = []
    dash = os.path.join(d, "-dash.shd")
    with open(good) as f, open(dash, "w") as g:
        g.write(f.read())
    with open(good) as f:
        good_text = f.read()
    with open(bad) as f:
        bad_text = f.read()
    doc = os.path.join(d, "diag.json")
    version = subprocess.run([shdc, "--version"], capture_output=True, text=True).stdout
    cases = [
        (["check", "-"], good_text, 0, None, r"^$"),
        (["check", "-"], bad_text, 1, None, r"^<stdin>:\d+:\d+: error: .*\[E_SHAPE\]$"),
        (["check", "--diagnostics=json", "-"], bad_text, 1, r'"file": "<stdin>"', None),
        (["check", "-", "-"], good_text, 2, None, r"- \(the standard input\) is given twice"),
        (["check", "--", "-dash.shd"], None, 0, None, r"^$"),
        (["check", "-dash.shd"], None, 2, None, r"unknown option '-d'"),
        (["check", good, "--mesh=X=2"], None, 0, None, r"^$"),
        (["check", good, "--mesh", "X=2"], None, 0, None, r"^$"),
        (["check", "--mes", "X=2", good], None, 0, None, r"^$"),
        (["check", good, "--diagnostics", "json", "-o" + doc], None, 0, None, r"^$"),
        (["-V"], None, 0, "^" + re.escape(version) + "$", None),
        (["check", good, "--meshh=X=2"], None, 2, None, r"unknown option '--meshh'; did you mean '--mesh'\?"),
        (["check", good, "--max-erors=3"], None, 2, None, r"did you mean '--max-errors'\?"),
        (["check", good, "--m", "X=2"], None, 2, None, r"'--m' is ambiguous: .*--mesh.*--max-memory"),
        (["check", good, "--json=yes"], None, 2, None, r"--json takes no value"),
        (["check", good, "--mesh"], None, 2, None, r"--mesh needs AXIS=N"),
        (["check", good, "-O5"], None, 2, None, r"-O expects a level from 0 to 3"),
        (["check", good, "--network=1GB/s,5us", "--network", "2GB/s,5us"], None, 2, None,
         r"--network is given twice"),
        (["plan", good, "--devices=2", "--devices=4"], None, 2, None, r"--devices is given twice"),
    ]
    for args, stdin, want, out_pat, err_pat in cases:
        p = subprocess.run([shdc] + args, input=stdin if stdin is not None else "", capture_output=True,
                           text=True, timeout=60, cwd=d)
        if p.returncode != want or (err_pat and not re.search(err_pat, p.stderr, re.M)) or \
                (out_pat and not re.search(out_pat, p.stdout, re.M)):
            failures.append("shdc %s%s: exit %d (expected %d), stdout /%s/, stderr /%s/:\n%s%s" % (
                " ".join(args), " < program" if stdin else "", p.returncode, want, out_pat, err_pat, p.stdout,
                p.stderr))
    if not os.path.exists(doc) or open(doc).read().strip() != "[]":
        failures.append("check --diagnostics json -oFILE wrote no document to FILE")
    return failures


def output_cases(shdc, good, bad, d):
    """-o FILE on the commands that print (types, emit-ir, emit-c, explain,
    show, plan): FILE holds exactly what stdout would, nothing goes to
    stdout, and FILE is replaced only when the command succeeded (a program
    with errors leaves an existing FILE as it was and no temporary)."""
    failures = []
    for cmd, extra in (("types", []), ("emit-ir", []), ("emit-c", []), ("explain", []), ("show", []),
                       ("plan", ["--devices=2"])):
        ref = subprocess.run([shdc, cmd, good] + extra, capture_output=True, text=True, timeout=60)
        out = os.path.join(d, "out-" + cmd)
        p = subprocess.run([shdc, cmd, good, "-o", out] + extra, capture_output=True, text=True, timeout=60)
        got = open(out).read() if os.path.exists(out) else None
        if ref.returncode != 0 or p.returncode != 0 or p.stdout or got != ref.stdout:
            failures.append("shdc %s -o FILE: exit %d, %d bytes on stdout, FILE %s the %d bytes of stdout without -o"
                            % (cmd, p.returncode, len(p.stdout), "holds" if got == ref.stdout else "does not hold",
                               len(ref.stdout)))
    keep = os.path.join(d, "keep.c")
    with open(keep, "w") as f:
        f.write("kept\n")
    p = subprocess.run([shdc, "emit-c", bad, "-o", keep], capture_output=True, text=True, timeout=60)
    if p.returncode != 1 or open(keep).read() != "kept\n":
        failures.append("shdc emit-c BAD -o FILE: exit %d (expected 1), FILE %s" % (
            p.returncode, "kept" if open(keep).read() == "kept\n" else "replaced"))
    p = subprocess.run([shdc, "emit-c", good, "-o", os.path.join(d, "no-dir", "x.c")], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 2 or "cannot write" not in p.stderr:
        failures.append("shdc emit-c -o NO-DIR/x.c: exit %d, expected 2 and 'cannot write'\n%s" % (
            p.returncode, p.stderr))
    left = [f for f in os.listdir(d) if f.startswith(".shdc-out")]
    if left:
        failures.append("-o left temporaries %r" % left)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    good = os.path.join(ROOT, "tests", "docs", "broadcast.shd")
    bad = os.path.join(ROOT, "tests", "errors", "shapes.shd")
    with tempfile.TemporaryDirectory() as d:
        # A program (a file with a mesh) without `fn main()`: check says what
        # build would.
        with open(os.path.join(d, "nomain.shd"), "w") as f:
            f.write("mesh {X: 2}\nfn f(x: f32) -> f32 {\n    return x * 2.0\n}\n")
        cases = [
            (["check", good], 0),
            (["check", bad], 1),
            (["check", good, bad], 1),            # several files: the worst status
            (["types", bad], 1),
            (["emit-ir", bad], 1),
            (["build", bad, "-o", os.path.join(d, "p")], 1),
            (["check", os.path.join(d, "missing.shd")], 2),
            (["frobnicate", good], 2),
            (["check"], 2),
            (["check", good, "--bogus"], 2),
            (["check", good, "--mesh", "Q=2"], 2),
            (["check", good, "--mesh", "X=0"], 2),
            (["check", good, "--mesh", "X"], 2),
            (["types", good, bad], 2),             # types takes one file
            (["build", good], 2),                  # no -o
            (["check", good, "--mesh", "X=4,Y=1"], 0),
            (["--help"], 0),
            (["check", os.path.join(d, "nomain.shd")], 1),
        ]
        failures = []
        for args, want in cases:
            p = subprocess.run([shdc] + args, capture_output=True, text=True, timeout=60)
            if p.returncode != want:
                failures.append("shdc %s: exit %d, expected %d\n%s" % (" ".join(args), p.returncode, want, p.stderr))
            elif want == 1 and not DIAG.search(p.stderr):
                failures.append("shdc %s: exit 1 without a diagnostic\n%s" % (" ".join(args), p.stderr))
            elif want == 2 and "error" not in p.stderr and "usage" not in p.stderr:
                failures.append("shdc %s: exit 2 without a message\n%s" % (" ".join(args), p.stderr))
        failures += trouble_cases(shdc, good, d)
        failures += convention_cases(shdc, good, bad, d)
        failures += output_cases(shdc, good, bad, d)
        # --help and --version into a full disk: not a success (exit 2, said).
        for flag in ("--help", "--version"):
            with open("/dev/full", "w") as full:
                p = subprocess.run([shdc, flag], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
            if p.returncode != 2 or "No space left" not in p.stderr:
                failures.append("shdc %s > /dev/full: exit %d, expected 2\n%s" % (flag, p.returncode, p.stderr))
        check_defines(shdc, d, failures)
        n = subprocess.run([shdc, "check", bad], capture_output=True, text=True).stderr
        count = len(DIAG.findall(n))
        if count < 10:
            failures.append("shdc check %s reported %d errors, expected one per bad line" % (bad, count))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d command lines, exit status as documented" % len(cases))


if __name__ == "__main__":
    main()
