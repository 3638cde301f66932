#!/usr/bin/env python3
"""Program strings reach the generated C only as data (issue 11, item 1).

Every byte value 1..255 and strings written to break out of a C literal
(quotes, backslashes, trigraphs, comment closers, printf formats, the bytes
0x1e and 0x1f that once separated print's texts) go through print, save,
load and arg. The program must print exactly those bytes, write exactly the
files named, read them back, take `--NAME=VALUE` for exactly that name, and
create nothing else: no file named by a fragment of injected C. A user
function named like a generated gradient (f_grad_0) must not collide with
it. Every command (check, types, emit-ir, emit-c, explain, build) must
succeed on the program.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
CFLAGS = ("-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes "
          "-Wno-unused-parameter -Wvla")


def lit(data):
    """A .shd string literal holding exactly these bytes (\\xHH for each)."""
    return '"' + "".join("\\x%02x" % b for b in data) + '"'


def raw_lit(data):
    """The same with the bytes written raw where the lexer allows it."""
    out = b'"'
    for b in data:
        if b in b'"\\\n':
            out += b"\\x%02x" % b
        else:
            out += bytes([b])
    return out + b'"'


ALL = bytes(range(1, 256))
HOSTILE = [
    b'n", 3); { extern int system(const char *); system("touch pwned_arg"); } //',
    b"??=??(??)??/??'??<??>??!??-",
    b"*/ int pwned; /*",
    b"%s%n%x%p",
    b"\x1e",
    b"\x1f",
    b"back\\slash \"quoted\"",
    b"line\nbreak\rreturn\ttab",
]
# File names: any byte but NUL and '/', split in two (a name has at most
# 255 bytes), plus the hostile strings made into names.
NAMES = [bytes(b for b in range(1, 128) if b != ord("/")), bytes(range(128, 256))]
NAMES += [h.replace(b"/", b"_") + b".npy" for h in HOSTILE]
ARG_NAMES = [bytes(b for b in range(1, 256) if b != ord("=")), HOSTILE[0], HOSTILE[1].replace(b"=", b"_")]


def program():
    lines = [b"mesh {X: 2}", b"",
             b"fn f_grad_0(x: f32) -> f32 { return x + 100.0 }",
             b"fn f(x: f32) -> f32 { return x * x }",
             b"fn main() {",
             b"    let x: f32[4@X] = iota(axis=0)"]
    lines.append(b"    print(" + lit(ALL).encode() + b")")
    lines.append(b"    print(" + raw_lit(ALL) + b")")
    for i, h in enumerate(HOSTILE):
        lines.append(b'    print("<", ' + lit(h).encode() + b', ">", %d)' % i)
    for i, name in enumerate(NAMES):
        lines.append(b"    save(" + lit(name).encode() + b", x + %d.0)" % i)
        lines.append(b"    let y%d: f32[4@X] = load(" % i + lit(name).encode() + b")")
        lines.append(b'    print("loaded", sum(y%d))' % i)
    for i, name in enumerate(ARG_NAMES):
        lines.append(b'    print("arg", arg(' + lit(name).encode() + b", %d))" % i)
    lines.append(b'    print("grads", f_grad_0(1.0), grad(f, wrt=0)(3.0))')
    lines.append(b"}")
    return b"\n".join(lines) + b"\n"


def expected_stdout():
    out = [ALL, ALL]
    out += [b"< " + h + b" > %d" % i for i, h in enumerate(HOSTILE)]
    for i in range(len(NAMES)):
        out.append(b"loaded %d.0" % (0 + 1 + 2 + 3 + 4 * i))
    out += [b"arg %d" % (10 * (i + 1)) for i in range(len(ARG_NAMES))]
    out.append(b"grads 101.0 6.0")
    return b"\n".join(out) + b"\n"


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=300, **kw)


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "hostile.shd")
        with open(src, "wb") as f:
            f.write(program())
        for cmd in (["check"], ["types"], ["emit-ir"], ["emit-ir", "--global"], ["emit-c"], ["explain"]):
            p = run([shdc] + cmd + [src])
            if p.returncode != 0:
                failures.append("shdc %s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr.decode("latin-1")))
        emitted = run([shdc, "emit-c", src]).stdout
        for h in HOSTILE:
            if b"system(" in h and h in emitted:
                failures.append("emit-c: the hostile string appears unescaped in the C")
        exe = os.path.join(d, "prog")
        env = dict(os.environ, SHDC_CFLAGS=CFLAGS, SHD_QUIET="1")
        p = run([shdc, "build", src, "-o", exe], env=env)
        if p.returncode != 0:
            failures.append("shdc build: exit %d\n%s" % (p.returncode, p.stderr.decode("latin-1")))
        else:
            work = os.path.join(d, "run")
            os.mkdir(work)
            args = [b"--" + n + b"=%d" % (10 * (i + 1)) for i, n in enumerate(ARG_NAMES)]
            p = run(MPIRUN + ["-np", "2", exe] + args, cwd=work, env=env)
            if p.returncode != 0:
                failures.append("run: exit %d\n%s" % (p.returncode, p.stderr.decode("latin-1")))
            elif p.stdout != expected_stdout():
                want, got = expected_stdout().split(b"\n"), p.stdout.split(b"\n")
                first = next((i for i in range(min(len(want), len(got))) if want[i] != got[i]), None)
                failures.append("run: output differs at line %s:\n  want %r\n  got  %r" % (
                    first, want[first] if first is not None else want, got[first] if first is not None else got))
            files = sorted(os.listdir(os.fsencode(work)))
            if files != sorted(NAMES):
                failures.append("run: the program created %r, expected exactly %r" % (
                    sorted(set(files) - set(NAMES)), sorted(set(NAMES) - set(files))))
            for stray in ("pwned_arg", "pwned"):
                if os.path.exists(os.path.join(work, stray)) or os.path.exists(os.path.join(d, stray)):
                    failures.append("run: injected code ran (%s exists)" % stray)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d byte values, %d hostile strings, %d file names and %d argument names went through exactly" % (
        len(ALL), len(HOSTILE), len(NAMES), len(ARG_NAMES)))


if __name__ == "__main__":
    main()
