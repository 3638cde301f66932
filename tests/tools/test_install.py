#!/usr/bin/env python3
"""make install / uninstall, and an installed shdc used from elsewhere.

- `make install PREFIX=P` puts bin/shdc, lib/libshdrt.a, include/shdrt.h,
  share/man/man1/shdc.1, lib/pkgconfig/shdrt.pc and the editor files under
  P; the installed shdc prints its version, and from another directory,
  with no SHDC_HOME, builds dsl-examples/matmul.shd, which runs on 2 ranks;
  the installed tree still works after it is moved (the runtime is found
  relative to the executable); pkg-config's flags compile generated C;
- the installed man page renders without warnings (groff -man -ww -z) and
  documents every command and option of `shdc --help`, every environment
  variable the compiler and runtime read, and the exit statuses;
- shdrt.pc names its directories through ${prefix}: pkg-config
  --define-prefix gives the moved tree's directories after a move;
- SARIF rules link the installed errors.md (helpUri), also after a move;
- the docs are installed under share/doc/shdc, and every relative link of
  every installed page resolves there (no link leaves the docs);
- DESTDIR stages the files under DESTDIR/PREFIX with PREFIX in shdrt.pc;
- `make uninstall` removes every installed file;
- and only what install made (issue 28): a file changed since the install
  is kept and named (uninstall exits non-zero), a file of the user's in an
  installed directory and a directory that was there before stay;
- a PREFIX with a space, a quote, a comma, `&` and `|` is one path to
  every recipe: install puts everything under it (nothing inside the
  checkout), shdrt.pc's flags name it as pkg-config escapes it, and
  uninstall removes its files and nothing else (not the path's first
  word, a file of its own here).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from run import mpirun_cmd, run  # noqa: E402

FILES = ["bin/shdc", "bin/shdc-plot-loss", "lib/libshdrt.a", "include/shdrt.h", "share/man/man1/shdc.1",
         "lib/pkgconfig/shdrt.pc",
         "share/vim/vimfiles/syntax/shd.vim", "share/vim/vimfiles/ftdetect/shd.vim",
         "share/vim/vimfiles/ftplugin/shd.vim", "share/vim/vimfiles/compiler/shdc.vim",
         "share/nvim/site/syntax/shd.vim", "share/nvim/site/ftdetect/shd.vim",
         "share/nvim/site/ftplugin/shd.vim", "share/nvim/site/compiler/shdc.vim",
         "share/shdc/editors/vscode/package.json", "share/shdc/editors/vscode/language-configuration.json",
         "share/shdc/editors/vscode/syntaxes/shd.tmLanguage.json", "share/shdc/editors/vscode/extension.js",
         "share/doc/shdc/README.md", "share/shdc/lib/std/nn.shd", "share/shdc/lib/std/optim.shd",
         "share/shdc/lib/std/progress.shd"] + \
        ["share/doc/shdc/" + f for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]

# A program that only the installed standard library lets compile.
USES_STD = """mesh {X: 2}
import "std/nn.shd"
import "std/optim.shd"
fn main() {
    let x: f32[4@X, 8] = ones()
    let w = ones(f32[8])
    let (p, m, v) = adamw(w, w, w, w, 0.1, 0.0, 1)
    save("y.npy", layernorm(x, p, w))
}
"""


def make(build, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(["make", "-s", "-C", ROOT, "B=" + build] + list(args), capture_output=True, text=True,
                       timeout=600, env=e)
    if p.returncode:
        raise SystemExit("make %s failed:\n%s%s" % (" ".join(args), p.stdout, p.stderr))


def clean_env():
    e = {k: v for k, v in os.environ.items() if k != "SHDC_HOME"}
    e["SHDC_HOME"] = ""
    return e


def use_installed(prefix, tmp, failures, what):
    shdc = os.path.join(prefix, "bin", "shdc")
    p = subprocess.run([shdc, "check", "--diagnostics=sarif", os.path.join(ROOT, "tests", "tools", "diag_example.shd")],
                       capture_output=True, text=True)
    want = "file://" + os.path.join(prefix, "share", "doc", "shdc", "errors.md") + "#e_"
    uris = re.findall(r'"helpUri": "([^"]+)"', p.stdout)
    if not uris or not all(u.startswith(want) or u.startswith(want[:-2] + "w_") for u in uris):   # E_ and W_ codes
        failures.append("%s: SARIF helpUri %s, expected the installed errors.md (%s...)" % (what, uris[:2], want))
    p = subprocess.run([shdc, "--version"], capture_output=True, text=True)
    if p.returncode or not re.match(r"shdc \d+\.\d+\.\d+ \(git \S+\)\nruntime ABI \d+\n$", p.stdout):
        failures.append("%s: shdc --version: %d %r" % (what, p.returncode, p.stdout))
    work = os.path.join(tmp, "work-" + what)
    os.makedirs(work)
    shutil.copy(os.path.join(ROOT, "dsl-examples", "matmul.shd"), work)
    env = clean_env()
    env.pop("SHDC_HOME")
    p = subprocess.run([shdc, "build", "matmul.shd", "-o", "mm", "--mesh", "X=2,Y=1"], cwd=work,
                       capture_output=True, text=True, env=env, timeout=300)
    if p.returncode:
        failures.append("%s: the installed shdc cannot build from %s:\n%s" % (what, work, p.stderr))
        return
    rc, out, err = run(mpirun_cmd(2) + ["./mm"], cwd=work)
    if rc or "max abs error" not in out or not os.path.exists(os.path.join(work, "scattered.npy")):
        failures.append("%s: the program built by the installed shdc: exit %d\n%s%s" % (what, rc, out, err))
    with open(os.path.join(work, "std.shd"), "w") as f:
        f.write(USES_STD)
    p = subprocess.run([shdc, "check", "std.shd"], cwd=work, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode:
        failures.append("%s: the installed shdc does not find its standard library:\n%s" % (what, p.stderr))


def check_pkgconfig(prefix, tmp, failures):
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    p = subprocess.run(["pkg-config", "--cflags", "--libs", "shdrt"], capture_output=True, text=True, env=env)
    if p.returncode or "-I" + os.path.join(prefix, "include") not in p.stdout or "-lshdrt" not in p.stdout:
        failures.append("pkg-config shdrt: %d %r %r" % (p.returncode, p.stdout, p.stderr))
        return
    c = os.path.join(tmp, "gen.c")
    with open(c, "w") as f:
        f.write(subprocess.run([os.path.join(prefix, "bin", "shdc"), "emit-c",
                                os.path.join(ROOT, "dsl-examples", "matmul.shd")],
                               capture_output=True, text=True, check=True).stdout)
    p = subprocess.run(["mpicc", "-std=c11", "-O1", "-o", os.path.join(tmp, "gen"), c] + p.stdout.split(),
                       capture_output=True, text=True)
    if p.returncode:
        failures.append("generated C with pkg-config's flags does not build:\n%s" % p.stderr)


def check_relocatable_pc(prefix, moved, failures):
    with open(os.path.join(moved, "lib", "pkgconfig", "shdrt.pc")) as f:
        pc = f.read()
    for var in ("libdir", "includedir"):
        if not re.search(r"^%s=\$\{prefix\}/" % var, pc, re.M):
            failures.append("shdrt.pc: %s is not relative to ${prefix}:\n%s" % (var, pc))
    if "@" in pc:
        failures.append("shdrt.pc has an unfilled @...@:\n%s" % pc)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(moved, "lib", "pkgconfig"))
    p = subprocess.run(["pkg-config", "--define-prefix", "--cflags", "--libs", "shdrt"], capture_output=True,
                       text=True, env=env)
    flags = p.stdout.split()
    if p.returncode or "-I" + os.path.join(moved, "include") not in flags or \
            "-L" + os.path.join(moved, "lib") not in flags or any(prefix in x for x in flags):
        failures.append("pkg-config --define-prefix after a move: %d %r %r" % (p.returncode, p.stdout, p.stderr))


def check_doc_links(docdir, failures):
    """Every relative link of an installed page names a file beside it."""
    for page in sorted(os.listdir(docdir)):
        with open(os.path.join(docdir, page)) as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path = target.split("#")[0]
            if path and not os.path.isfile(os.path.normpath(os.path.join(docdir, path))):
                failures.append("installed %s links to %s, which is not installed beside it" % (page, target))
        if "../shared" in text:
            failures.append("installed %s cites ../shared, outside the repository" % page)


def check_man(page, shdc, failures):
    p = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True)
    if p.returncode or p.stderr:
        failures.append("groff -man -ww -z %s: %d\n%s" % (page, p.returncode, p.stderr))
    text = subprocess.run(["groff", "-man", "-Tutf8", page], capture_output=True, text=True).stdout
    text = re.sub(r".\x08", "", text).replace("\u2010", "-").replace("\u2212", "-")
    helptext = subprocess.run([shdc, "--help"], capture_output=True, text=True).stdout
    words = set(re.findall(r"^  ([a-z][a-z-]+) ", helptext, re.M))        # commands
    words |= set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", helptext))  # options
    words |= {"-O0", "-O3"}
    # environment variables: the SHD/SHDC/OPENBLAS names the sources quote,
    # less the runtime's C constants (SHD_SUM...) and the re-exec marker
    with open(os.path.join(ROOT, "runtime", "shdrt.h")) as f:
        code = re.sub(r'"[^"]*"', "", re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S))
        constants = set(re.findall(r"\b(SHD_[A-Z0-9_]+)\b", code))
    for src in glob.glob(os.path.join(ROOT, "compiler", "*.c")) + glob.glob(os.path.join(ROOT, "runtime", "*.c")):
        with open(src) as f:
            names = set(re.findall(r'"((?:SHDC?|OPENBLAS)_[A-Z_]+)"', f.read())) | {"TMPDIR"}
        words |= {v for v in names if v not in constants and "REEXEC" not in v}
    missing = sorted(w for w in words if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(w), text))
    if len(words) < 25 or missing:
        failures.append("the man page does not document %s (of %d names)" % (missing, len(words)))
    for status in ("EXIT STATUS", "ENVIRONMENT", "DIAGNOSTICS"):
        if status not in text:
            failures.append("the man page has no %s section" % status)


def odd_prefix(build, tmp, failures):
    base = os.path.join(tmp, "odd")
    os.makedirs(base)
    first = os.path.join(base, "my")
    with open(first, "w") as f:
        f.write("the first word of the prefix, not to be removed\n")
    prefix = os.path.join(base, "my tools, it's a & b|c")
    before = set(os.listdir(ROOT)) | set(os.listdir(os.path.join(ROOT, "tools")))
    make(build, "install", "PREFIX=" + prefix)
    for f in FILES:
        if not os.path.isfile(os.path.join(prefix, f)):
            failures.append("make install PREFIX=%r did not install %s" % (prefix, f))
    after = set(os.listdir(ROOT)) | set(os.listdir(os.path.join(ROOT, "tools")))
    if after - before:
        failures.append("make install PREFIX=%r created %s in the checkout" % (prefix, sorted(after - before)))
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    p = subprocess.run(["pkg-config", "--cflags", "shdrt"], capture_output=True, text=True, env=env)
    want = "-I" + os.path.join(prefix, "include").replace("\\", "\\\\").replace(" ", "\\ ").replace(
        "'", "\\'").replace("&", "\\&").replace("|", "\\|")
    if p.returncode or p.stdout.strip() != want:
        failures.append("pkg-config --cflags shdrt with PREFIX=%r: %r, expected %r" % (prefix, p.stdout, want))
    make(build, "uninstall", "PREFIX=" + prefix)
    left = [f for f in FILES if os.path.exists(os.path.join(prefix, f))]
    if left or not os.path.isfile(first):
        failures.append("make uninstall PREFIX=%r: left %s, removed the file %s: %s" % (
            prefix, left, first, not os.path.isfile(first)))


def only_what_it_made(build, tmp, failures):
    prefix = os.path.join(tmp, "own")
    os.makedirs(os.path.join(prefix, "share", "shdc", "lib", "std"))   # there before, empty
    os.makedirs(os.path.join(prefix, "bin"))
    with open(os.path.join(prefix, "bin", "mine"), "w") as f:
        f.write("a tool of the user's\n")
    make(build, "install", "PREFIX=" + prefix)
    readme = os.path.join(prefix, "share", "doc", "shdc", "README.md")
    with open(readme, "a") as f:
        f.write("my notes\n")
    p = subprocess.run(["make", "-s", "-C", ROOT, "B=" + build, "uninstall", "PREFIX=" + prefix],
                       capture_output=True, text=True, timeout=600)
    if p.returncode == 0 or "kept %s: it changed since it was installed" % readme not in p.stderr:
        failures.append("uninstall with a changed file: exit %d, expected a message naming it:\n%s" % (
            p.returncode, p.stderr))
    for path in (readme, os.path.join(prefix, "bin", "mine")):
        if not os.path.isfile(path):
            failures.append("make uninstall removed %s, which it did not install" % path)
    if not os.path.isdir(os.path.join(prefix, "share", "shdc", "lib", "std")):
        failures.append("make uninstall removed share/shdc/lib/std, which was there before the install")
    left = [f for f in FILES if os.path.exists(os.path.join(prefix, f)) and not readme.endswith(f)]
    if left:
        failures.append("make uninstall (a changed file kept) left installed files %s" % left)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    build = os.path.dirname(os.path.abspath(ap.parse_args().shdc))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "prefix")
        make(build, "install", "PREFIX=" + prefix)
        for f in FILES:
            if not os.path.isfile(os.path.join(prefix, f)):
                failures.append("make install did not install %s" % f)
        use_installed(prefix, tmp, failures, "installed")
        check_pkgconfig(prefix, tmp, failures)
        check_man(os.path.join(prefix, "share", "man", "man1", "shdc.1"), os.path.join(prefix, "bin", "shdc"),
                  failures)
        check_doc_links(os.path.join(prefix, "share", "doc", "shdc"), failures)
        moved = os.path.join(tmp, "moved")
        shutil.copytree(prefix, moved, symlinks=True)
        use_installed(moved, tmp, failures, "moved")
        check_relocatable_pc(prefix, moved, failures)
        make(build, "uninstall", "PREFIX=" + prefix)
        left = [os.path.relpath(os.path.join(d, f), prefix) for d, _, fs in os.walk(prefix) for f in fs]
        if left:
            failures.append("make uninstall left %s" % left)
        stage = os.path.join(tmp, "stage")
        make(build, "install", "PREFIX=/opt/shdc", "DESTDIR=" + stage)
        for f in FILES:
            if not os.path.isfile(os.path.join(stage, "opt", "shdc", f)):
                failures.append("make install DESTDIR=... did not stage %s" % f)
        with open(os.path.join(stage, "opt", "shdc", "lib", "pkgconfig", "shdrt.pc")) as f:
            if "prefix=/opt/shdc\n" not in f.read():
                failures.append("the staged shdrt.pc does not name PREFIX=/opt/shdc")
        make(build, "uninstall", "PREFIX=/opt/shdc", "DESTDIR=" + stage)
        if [f for _, _, fs in os.walk(stage) for f in fs]:
            failures.append("make uninstall DESTDIR=... left files")
        odd_prefix(build, tmp, failures)
        only_what_it_made(build, tmp, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("installed, used from another directory and after a move, pkg-config (relocatable), docs and their links, "
          "man page, DESTDIR, uninstall, a PREFIX with spaces and quotes")


if __name__ == "__main__":
    main()
