#!/usr/bin/env python3
"""`shdc build`'s cache of compiled translation units (issue 29; cache.c,
build.c, emit_parts.c): each assertion below can fail.

- the cache's SHA-256 (`shdc sha256`, a developer's command) equals
  sha256sum's on the empty input, one block, the padding's edges and many
  blocks;
- a second build of an unchanged program compiles nothing (the
  SHDC_CACHE_STATS line, and a wrapper SHDC_CC that logs every `-c`), and
  its program prints what the first printed (mpirun -np 2);
- an edit of one function (new instructions, a unary function no other
  function uses) compiles only the units that hold it (and the entry
  point's), the others come from the cache, and the program equals the one
  built without the cache;
- a corrupt entry (truncated, emptied, a byte flipped in its object or in
  its header, another key's entry) is never used: it is compiled again and
  the program is right; the next build finds the new entry;
- four builds at once into one empty cache all succeed and their programs
  are right; then everything is in the cache;
- SHDC_CACHE_SIZE bounds the cache: the least recently used entries go (a
  hit renews an entry);
- a header whose time changed (the manifest) or whose bytes changed (the
  key) makes the units compile again;
- a cache that cannot be made or written is one warning and a working
  program; links planted in the cache are never written through;
- SHDC_CACHE=off, the default places (XDG_CACHE_HOME, HOME);
- --isa=native and baseline build and run alike, with one unit per function
  group where clones have three; SHDC_ISA and SHDC_OPT are defaults the
  command line overrides; bad values are usage errors (exit 2) that name
  the option and the values allowed.
"""
import glob
import hashlib
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

# Four functions, each in units of its own: every name here ends a group of
# small functions (emit_parts.c: FNV-1a of the name modulo 4 is 0), which the
# first build's unit labels confirm.
PROGRAM = """mesh {X: 2}
const N = 16

fn squash(x: f32[N@X]) -> f32[N@X] {
    return x * 0.5 + 1.0
}

fn twist(x: f32[N@X], a: f32) -> f32[N@X] {
    return x * a - 2.0
}

fn blend(x: f32[N@X], y: f32[N@X]) -> f32 {
    return sum(exp(x * 0.01) + y)
}

fn main() {
    let x: f32[N@X] = iota()
    let y = twist(squash(x), 3.0)
    print("blend", blend(x, y), sum(y))
}
"""
# twist with more instructions and a unary function no other function uses
EDITED = PROGRAM.replace("return x * a - 2.0", "return tanh(x * a * 0.05) * 4.0 - 2.0")

STATS = re.compile(r"^shdc: build cache (.*): (\d+) units, (\d+) from the cache, (\d+) compiled(.*?)(?:: ([^:\n]*))?$",
                   re.M)
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]


class Ctx:
    def __init__(self, shdc, tmp):
        self.shdc, self.tmp, self.failures, self.n = shdc, tmp, [], 0
        self.env = dict(os.environ, SHDC_CACHE_STATS="1", SHDC_OPT="-O1", SHDC_ISA="baseline", SHD_QUIET="1",
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_btl_vader_single_copy_mechanism="none")
        for k in ("SHDC_CACHE", "SHDC_CACHE_SIZE", "SHDC_CC", "SHDC_JOBS"):
            self.env.pop(k, None)

    def fail(self, what):
        self.failures.append(what)

    def source(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def build(self, src, cache, *flags, env=None, want=0):
        """shdc build into cache (a directory, or None: SHDC_CACHE unset);
        (exe, stats, stderr)."""
        self.n += 1
        exe = os.path.join(self.tmp, "prog%d" % self.n)
        e = dict(self.env, **(env or {}))
        if cache is not None:
            e["SHDC_CACHE"] = cache
        p = subprocess.run([self.shdc, "build", src, "-o", exe] + list(flags), capture_output=True, text=True,
                           env=e, timeout=600)
        if p.returncode != want:
            self.fail("shdc build %s %s (SHDC_CACHE=%s): exit %d, expected %d\n%s" % (
                src, " ".join(flags), cache, p.returncode, want, p.stderr[-3000:]))
            return None, None, p.stderr
        m = STATS.search(p.stderr)
        stats = None
        if m:
            stats = {"dir": m.group(1), "units": int(m.group(2)), "hits": int(m.group(3)),
                     "compiled": int(m.group(4)), "extra": m.group(5),
                     "labels": m.group(6).split("; ") if m.group(6) else []}
        elif want == 0:
            self.fail("shdc build %s: no SHDC_CACHE_STATS line in\n%s" % (src, p.stderr))
        return exe, stats, p.stderr

    def run(self, exe):
        p = subprocess.run(MPIRUN + [exe], capture_output=True, text=True, env=self.env, timeout=300)
        if p.returncode:
            self.fail("%s: exit %d\n%s" % (exe, p.returncode, p.stderr[-2000:]))
        return p.stdout


def entries(cache):
    return sorted(p for p in glob.glob(os.path.join(cache, "v1", "??", "*")) if re.search(r"/[0-9a-f]{64}$", p))


def cache_bytes(cache):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(cache, "v1", "??", "*")))


def check_sha256(c):
    data = [b"", b"abc", bytes(range(55)), bytes(range(56)), bytes(range(64)), bytes(range(119)),
            bytes(random.Random(29).getrandbits(8) for _ in range(100003))]
    paths = []
    for i, d in enumerate(data):
        paths.append(os.path.join(c.tmp, "sha%d" % i))
        with open(paths[-1], "wb") as f:
            f.write(d)
    p = subprocess.run([c.shdc, "sha256"] + paths, capture_output=True, text=True)
    q = subprocess.run(["sha256sum"] + paths, capture_output=True, text=True)
    if p.returncode or p.stdout != q.stdout or len(p.stdout.splitlines()) != len(data):
        c.fail("shdc sha256 differs from sha256sum:\n%s\n%s%s" % (p.stdout, q.stdout, p.stderr))
    p = subprocess.run([c.shdc, "sha256"], input=b"abc", capture_output=True)
    if p.stdout.decode().split()[0] != hashlib.sha256(b"abc").hexdigest():
        c.fail("shdc sha256 of stdin: %r" % p.stdout)


def check_usage(c, src):
    cases = [
        (["build", src, "-o", "x", "--isa=avx9"], {}, r"--isa: expected clones .* native .* baseline .*'avx9'"),
        (["build", src, "-o", "x", "--isa"], {}, r"--isa needs clones, native or baseline"),
        (["check", src, "--isa=native"], {}, r"--isa is an option of build"),
        (["build", src, "-o", "x"], {"SHDC_ISA": "fast"}, r"SHDC_ISA=fast: expected clones .* native .* baseline"),
        (["build", src, "-o", "x"], {"SHDC_OPT": "-O9"}, r"SHDC_OPT=-O9: expected -O0, -O1, -O2 or -O3"),
        (["build", src, "-o", "x"], {"SHDC_CACHE_SIZE": "lots"}, r"SHDC_CACHE_SIZE=lots: expected .*bytes"),
    ]
    for args, env, pattern in cases:
        p = subprocess.run([c.shdc] + args, capture_output=True, text=True, env=dict(c.env, **env), cwd=c.tmp)
        if p.returncode != 2 or not re.search(pattern, p.stderr):
            c.fail("shdc %s %s: exit %d, expected 2 and /%s/\n%s" % (env, " ".join(args), p.returncode, pattern,
                                                                      p.stderr))
    # the environment is a default: check ignores it, the command line wins
    p = subprocess.run([c.shdc, "check", src], capture_output=True, text=True, env=dict(c.env, SHDC_ISA="fast"))
    if p.returncode:
        c.fail("check with SHDC_ISA=fast: exit %d\n%s" % (p.returncode, p.stderr))


def wrapper(c, name):
    """An SHDC_CC that logs each command line to LOG and runs mpicc."""
    log = os.path.join(c.tmp, name + ".log")
    cc = os.path.join(c.tmp, name)
    with open(cc, "w") as f:
        f.write('#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\nexec mpicc "$@"\n' % log)
    os.chmod(cc, 0o755)
    return cc, log


def compiles(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [l for l in f.read().splitlines() if " -c " in " %s " % l]


def check_rebuild_and_edit(c, src):
    cache = os.path.join(c.tmp, "cache-a")
    cc, log = wrapper(c, "cc-a")
    env = {"SHDC_CC": cc}
    exe, s1, _ = c.build(src, cache, env=env)
    if not s1:
        return None
    first = c.run(exe)
    if not re.search(r"^blend \S+ \S+$", first, re.M):
        c.fail("the program printed %r" % first)
    if s1["hits"] or s1["compiled"] != s1["units"] or len(compiles(log)) != s1["units"]:
        c.fail("first build into an empty cache: %s, %d compiles logged" % (s1, len(compiles(log))))
    want = {"squash for default", "twist for default", "blend for default", "main for default", "entry point"}
    if set(s1["labels"]) != want:
        c.fail("the units are %s, expected %s (each function alone: emit_parts.c's grouping changed?)" % (
            s1["labels"], sorted(want)))
    if len(entries(cache)) != s1["units"]:
        c.fail("%d entries stored for %d units" % (len(entries(cache)), s1["units"]))
    open(log, "w").close()
    exe2, s2, _ = c.build(src, cache, env=env)
    if s2 and (s2["compiled"] or s2["hits"] != s2["units"] or compiles(log)):
        c.fail("second build of the same program: %s; compiles logged: %s" % (s2, compiles(log)))
    if exe2 and c.run(exe2) != first:
        c.fail("the program from the cache prints otherwise")
    edited = c.source("prog.shd", EDITED)   # edited in place (run-time messages name the file)
    exe3, s3, _ = c.build(edited, cache, env=env)
    if s3:
        compiled = set(s3["labels"])
        if not compiled or not all("twist" in l or l == "entry point" for l in compiled) or \
                "twist for default" not in compiled or s3["hits"] < 3:
            c.fail("after an edit of twist the build compiled %s (%d from the cache)" % (sorted(compiled),
                                                                                           s3["hits"]))
    ref, _, _ = c.build(edited, "off")
    if exe3 and ref and c.run(exe3) != c.run(ref):
        c.fail("the edited program built through the cache differs from the one built without it")
    if exe3 and c.run(exe3) == first:
        c.fail("the edited program prints what the original printed: was it rebuilt?")
    c.source("prog.shd", PROGRAM)
    return first


def corrupt(path, how):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "emptied":
        data = bytearray()
    elif how == "object byte":
        data[-200] ^= 0x10
    elif how == "header byte":
        data[80] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


def check_corruption(c, src, first):
    cache = os.path.join(c.tmp, "cache-h")
    c.build(src, cache)
    for how in ("truncated", "emptied", "object byte", "header byte", "another key's entry"):
        es = entries(cache)
        victim = max(es, key=os.path.getsize)
        if how == "another key's entry":
            other = min(es, key=os.path.getsize)
            shutil.copyfile(other, victim)
        else:
            corrupt(victim, how)
        exe, s, _ = c.build(src, cache)
        if not s or s["compiled"] != 1 or "1 corrupt" not in s["extra"]:
            c.fail("an entry %s: the build says %s, expected one corrupt entry compiled again" % (how, s))
        if exe and c.run(exe) != first:
            c.fail("an entry %s: the program prints otherwise" % how)
        _, s, _ = c.build(src, cache)
        if s and s["compiled"]:
            c.fail("after an entry %s was replaced the next build compiled %s" % (how, s["labels"]))


def check_concurrent(c, src, first):
    cache = os.path.join(c.tmp, "cache-b")
    procs = []
    for i in range(4):
        exe = os.path.join(c.tmp, "conc%d" % i)
        procs.append((exe, subprocess.Popen([c.shdc, "build", src, "-o", exe], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, env=dict(c.env, SHDC_CACHE=cache))))
    for exe, p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            c.fail("one of 4 builds at once: exit %d\n%s" % (p.returncode, err))
        elif c.run(exe) != first:
            c.fail("one of 4 builds at once made a program that prints otherwise")
    _, s, _ = c.build(src, cache)
    if s and s["compiled"]:
        c.fail("after 4 builds at once the next one compiled %s" % s["labels"])
    left = glob.glob(os.path.join(cache, "v1", "??", ".*"))
    if left:
        c.fail("builds at once left temporaries %s" % left)


def check_bound(c, src):
    """Programs A, B, then A again (a hit renews its entries), then C beyond
    the bound: B's entries, the least recently used, are the ones evicted."""
    cache = os.path.join(c.tmp, "cache-c")
    a, b, cc = ("-D", "N=16"), ("-D", "N=32"), ("-D", "N=48")
    c.build(src, cache, *a)
    one = cache_bytes(cache)
    limit = one * 5 // 2
    env = {"SHDC_CACHE_SIZE": str(limit)}
    time.sleep(0.05)
    _, s, _ = c.build(src, cache, *b, env=env)
    time.sleep(0.05)
    _, s, _ = c.build(src, cache, *a, env=env)
    if s and s["compiled"]:
        c.fail("A again within the bound compiled %s" % s["labels"])
    time.sleep(0.05)
    _, s, _ = c.build(src, cache, *cc, env=env)
    if not s or "evicted" not in s["extra"]:
        c.fail("a third program beyond SHDC_CACHE_SIZE=%d evicted nothing: %s" % (limit, s))
    if cache_bytes(cache) > limit:
        c.fail("the cache holds %d bytes, more than SHDC_CACHE_SIZE=%d" % (cache_bytes(cache), limit))
    for flags, name, want_hits in ((a, "A (used last but one)", True), (cc, "C (the newest)", True),
                                   (b, "B (the least recently used)", False)):
        _, s, _ = c.build(src, cache, *flags, env=dict(env, SHDC_CACHE_SIZE=str(100 * limit)))
        if s and (s["compiled"] == 0) != want_hits:
            c.fail("after the eviction, %s: %s" % (name, s))


def check_headers(c, src):
    """A copy of the runtime (SHDC_HOME, a name with a blank): shdrt.h touched,
    then changed."""
    home = os.path.join(c.tmp, "home rt")   # a blank: the dependency file escapes it
    os.makedirs(os.path.join(home, "include"))
    rt = os.path.dirname(c.shdc)
    header = os.path.join(home, "include", "shdrt.h")
    shutil.copyfile(os.path.join(rt, "include", "shdrt.h"), header)
    shutil.copyfile(os.path.join(rt, "libshdrt.a"), os.path.join(home, "libshdrt.a"))
    past = time.time() - 1000
    os.utime(header, (past, past))
    time.sleep(1.1)   # a header changed (its ctime) in the second the build starts is not recorded
    cache = os.path.join(c.tmp, "cache-d")
    env = {"SHDC_HOME": home}
    c.build(src, cache, env=env)
    _, s, _ = c.build(src, cache, env=env)
    if s and s["compiled"]:
        c.fail("a second build with SHDC_HOME compiled %s" % s["labels"])
    os.utime(header, (past - 100, past - 100))
    _, s, _ = c.build(src, cache, env=env)
    if s and s["hits"]:
        c.fail("shdrt.h's time changed (the manifest), yet %d units came from the cache" % s["hits"])
    with open(header, "a") as f:
        f.write("/* changed */\n")
    os.utime(header, (past, past))
    exe, s, _ = c.build(src, cache, env=env)
    if s and s["hits"]:
        c.fail("shdrt.h's bytes changed (the key), yet %d units came from the cache" % s["hits"])


def check_unusable(c, src, first):
    plain = c.source("plain-file", "not a directory\n")
    for what, cache in (("under a regular file", os.path.join(plain, "sub")), ("a regular file", plain)):
        exe, s, err = c.build(src, cache)
        if exe is None:
            continue
        if err.count("warning") != 1 or "build cache" not in err:
            c.fail("a cache %s: expected one warning, got\n%s" % (what, err))
        if s and s["compiled"] != s["units"]:
            c.fail("a cache %s: %s" % (what, s))
        if c.run(exe) != first:
            c.fail("a cache %s: the program prints otherwise" % what)
    if os.geteuid() != 0:   # root writes anywhere
        ro = os.path.join(c.tmp, "cache-ro")
        os.mkdir(ro, 0o500)
        exe, s, err = c.build(src, ro)
        if exe and (err.count("warning") != 1 or c.run(exe) != first):
            c.fail("a read-only cache: expected one warning and a working program, got\n%s" % err)
        os.chmod(ro, 0o700)
    # links planted where the cache's directories go are not followed
    victim = os.path.join(c.tmp, "victim-dir")
    os.mkdir(victim)
    cache = os.path.join(c.tmp, "cache-e")
    os.makedirs(os.path.join(cache, "v1"))
    for i in range(256):
        os.symlink(victim, os.path.join(cache, "v1", "%02x" % i))
    exe, s, err = c.build(src, cache)
    if exe and (os.listdir(victim) or err.count("warning") != 1 or c.run(exe) != first):
        c.fail("links planted for the cache's directories: %s written there; stderr\n%s" % (os.listdir(victim), err))
    # a link planted at an entry's name: not read, replaced (not written through)
    cache = os.path.join(c.tmp, "cache-f")
    c.build(src, cache)
    target = os.path.join(c.tmp, "victim-file")
    with open(target, "w") as f:
        f.write("victim\n")
    entry = entries(cache)[0]
    os.unlink(entry)
    os.symlink(target, entry)
    exe, s, err = c.build(src, cache)
    with open(target) as f:
        if f.read() != "victim\n":
            c.fail("a link planted at an entry's name was written through")
    if exe and (not s or s["compiled"] != 1 or os.path.islink(entry) or c.run(exe) != first):
        c.fail("a link planted at an entry's name: %s, still a link: %s" % (s, os.path.islink(entry)))


def check_places(c, src):
    home, xdg = os.path.join(c.tmp, "home"), os.path.join(c.tmp, "xdg")
    os.makedirs(home)
    os.makedirs(xdg)
    env = dict(c.env, HOME=home, XDG_CACHE_HOME=xdg)
    saved = c.env
    c.env = env
    _, s, _ = c.build(src, "off")
    if s and (s["dir"] != "off" or s["hits"] or os.listdir(home) or os.listdir(xdg)):
        c.fail("SHDC_CACHE=off: %s; made %s" % (s, os.listdir(home) + os.listdir(xdg)))
    c.build(src, None)
    if not entries(os.path.join(xdg, "shdc")) or not os.path.exists(os.path.join(xdg, "shdc", "CACHEDIR.TAG")):
        c.fail("with XDG_CACHE_HOME set, nothing in $XDG_CACHE_HOME/shdc")
    del env["XDG_CACHE_HOME"]
    c.build(src, None)
    if not entries(os.path.join(home, ".cache", "shdc")):
        c.fail("without XDG_CACHE_HOME, nothing in ~/.cache/shdc")
    c.env = saved


def check_isa(c, src, first):
    cache = os.path.join(c.tmp, "cache-g")
    cc, log = wrapper(c, "cc-g")
    env = {"SHDC_CC": cc}
    counts, san = {}, False
    for isa in ("baseline", "native", "clones"):
        open(log, "w").close()
        exe, s, _ = c.build(src, cache, "--isa=" + isa, "-O2", env=env)
        if not s:
            continue
        counts[isa] = s["units"]
        if s["hits"]:
            c.fail("--isa=%s after the others: %d units from the cache (the key must differ)" % (isa, s["hits"]))
        lines = compiles(log)
        flags = {"baseline": ["-DSHD_NO_CLONES"], "native": ["-march=native", "-DSHD_NO_CLONES"], "clones": []}[isa]
        for l in lines:
            words = l.split()
            # a sanitizer build of shdc adds its own -O1 -DSHD_NO_CLONES after the build's options
            san = any(w.startswith("-fsanitize=") for w in words)
            levels = [w for w in words if re.match(r"^-O\d$", w)]
            if any(f not in words for f in flags) or levels[:1] != ["-O2"] or \
                    (isa == "clones" and "-DSHD_NO_CLONES" in words and not san):
                c.fail("--isa=%s -O2 (SHDC_ISA=baseline, SHDC_OPT=-O1 in the environment): compiled with %s" % (isa, l))
                break
        if c.run(exe) != first:
            c.fail("--isa=%s: the program prints otherwise" % isa)
    if counts and (counts.get("clones") != (counts.get("baseline") if san else 3 * (counts.get("baseline", 0) - 1) + 1) or
                   counts.get("native") != counts.get("baseline")):
        c.fail("units per --isa: %s (clones: three per function group, and the entry point)" % counts)
    # the environment's defaults reach the compiler
    open(log, "w").close()
    c.build(src, cache, env=dict(env, SHDC_OPT="-O0", SHDC_ISA="native"))
    lines = compiles(log)
    if not lines or any([w for w in l.split() if re.match(r"^-O\d$", w)][:1] != ["-O0"] or
                        "-march=native" not in l.split() for l in lines):
        c.fail("SHDC_OPT=-O0 SHDC_ISA=native: compiled with %s" % lines)


def main():
    shdc = testlib.shdc_option(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        c = Ctx(shdc, tmp)
        src = c.source("prog.shd", PROGRAM)
        check_sha256(c)
        check_usage(c, src)
        r = check_rebuild_and_edit(c, src)
        if r:
            first = r
            check_corruption(c, src, first)
            check_concurrent(c, src, first)
            check_bound(c, src)
            check_headers(c, src)
            check_unusable(c, src, first)
            check_places(c, src)
            check_isa(c, src, first)
        for f in c.failures:
            print("FAIL: " + f)
        if c.failures:
            sys.exit(1)
        print("build cache: %d builds checked" % c.n)


if __name__ == "__main__":
    main()
