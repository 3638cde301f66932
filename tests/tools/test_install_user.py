#!/usr/bin/env python3
"""`make install` as a user who is not root, on a machine without NumPy or
PyTorch, and the editor files where editors look (issue 17, item 1).

The dependency check (tools/install-deps) is pointed at an empty dpkg
database (SHD_DPKG_ADMINDIR), which stands for a machine where no package
is known to be installed: the build group is then met only by the tools it
finds on PATH and through pkg-config, and NumPy, PyTorch and the other test
and demo packages are missing. As the user `nobody`, with HOME in a
scratch directory:

- `make install PREFIX=$HOME/.local` (README's command) succeeds: the
  build group asks for nothing else; the Vim files land in ~/.vim, the
  Neovim ones in ~/.local/share/nvim/site, the docs in
  ~/.local/share/doc/shdc;
- Vim, run as that user with its default runtimepath, gives a .shd file the
  filetype shd and loads its syntax;
- the same check for `make demo`'s and `make test`'s groups fails, naming
  python3-numpy and python3-torch, and says the apt-get line to run: the
  empty database really hides them;
- the build group names none of NumPy, PyTorch, npm, Vim or groff.

The build directory's objects are copied (their dependency stamp removed, so
the check runs again), so nothing is compiled but what the version stamp
asks for.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = 65534


def as_nobody(cmd, env, cwd=None, timeout=600):
    pre = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] if os.getuid() == 0 else []
    return subprocess.run(pre + cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def copy_build(src, dst):
    """The objects, archive and generated files of a build directory (not
    its data, npm tools or sanitizer build)."""
    os.makedirs(dst)
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if name in ("compiler", "runtime", "gen", "include") and os.path.isdir(p):
            shutil.copytree(p, os.path.join(dst, name), symlinks=True)
        elif name in ("shdc", "libshdrt.a", "config.mk"):
            shutil.copy2(p, dst)


def chown_tree(path):
    if os.getuid() != 0:
        return
    for d, dirs, files in os.walk(path):
        for n in [d] + [os.path.join(d, f) for f in dirs + files]:
            os.lchown(n, NOBODY, NOBODY)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    build = os.path.dirname(os.path.abspath(ap.parse_args().shdc))
    failures = []
    listed = subprocess.run([os.path.join(ROOT, "tools", "install-deps"), "--list", "build"], capture_output=True,
                            text=True, check=True).stdout.split()
    for p in ("python3-numpy", "python3-torch", "npm", "nodejs", "vim", "groff-base"):
        if p in listed:
            failures.append("the build group lists %s" % p)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        admin = os.path.join(tmp, "dpkg")
        os.makedirs(os.path.join(admin, "info"))
        open(os.path.join(admin, "status"), "w").close()
        home = os.path.join(tmp, "home")
        os.makedirs(home)
        b = os.path.join(tmp, "build")
        copy_build(build, b)
        chown_tree(tmp)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "SHD_DPKG_ADMINDIR": admin,
               "LANG": "C.UTF-8"}
        prefix = os.path.join(home, ".local")
        p = as_nobody(["make", "-C", ROOT, "B=" + b, "install", "PREFIX=" + prefix], env)
        if p.returncode:
            failures.append("make install PREFIX=$HOME/.local as nobody, no NumPy or PyTorch: exit %d\n%s%s"
                            % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        else:
            want = [".local/bin/shdc", ".local/lib/libshdrt.a", ".local/include/shdrt.h",
                    ".local/lib/pkgconfig/shdrt.pc", ".local/share/man/man1/shdc.1",
                    ".vim/syntax/shd.vim", ".vim/ftdetect/shd.vim",
                    ".local/share/nvim/site/syntax/shd.vim", ".local/share/nvim/site/ftdetect/shd.vim",
                    ".local/share/doc/shdc/cli.md", ".local/share/doc/shdc/README.md",
                    ".local/share/shdc/editors/vscode/package.json"]
            for f in want:
                if not os.path.isfile(os.path.join(home, f)):
                    failures.append("make install PREFIX=$HOME/.local did not install ~/%s" % f)
            if "install-deps" in p.stderr:
                failures.append("make install complained about packages:\n%s" % p.stderr)
            sample = os.path.join(tmp, "x.shd")
            with open(sample, "w") as f:
                f.write("mesh {X: 2}\nfn main() {\n    let x: f32[8@X] = zeros()\n}\n")
            chown_tree(sample)
            out = os.path.join(tmp, "vim.out")
            v = as_nobody(["vim", "-N", "-u", "NONE", "-i", "NONE", "-es", "-c", "filetype on", "-c", "syntax on",
                           "-c", "edit " + sample, "-c",
                           "call writefile([&filetype, get(b:, 'current_syntax', '')], '%s')" % out, "-c", "qa!"],
                          env, cwd=tmp, timeout=60)
            got = open(out).read().split() if os.path.exists(out) else []
            if got != ["shd", "shd"]:
                failures.append("vim with HOME=%s (default runtimepath): filetype and syntax %r, expected shd, shd "
                                "(exit %d %s)" % (home, got, v.returncode, v.stderr))
        for group, pkg in (("demo", "python3-numpy"), ("test", "python3-torch")):
            p = as_nobody([os.path.join(ROOT, "tools", "install-deps"), group], env)
            if p.returncode == 0 or pkg not in p.stderr or "apt-get install" not in p.stderr:
                failures.append("install-deps %s as nobody with an empty package list: exit %d, expected a failure "
                                "naming %s and the apt-get line:\n%s" % (group, p.returncode, pkg, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("make install PREFIX=$HOME/.local as a user, no NumPy or PyTorch: installed, Vim finds the syntax; the demo "
          "and test groups name what is missing")


if __name__ == "__main__":
    main()
