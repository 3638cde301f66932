#!/usr/bin/env python3
"""A struct save and keep_last remove nothing they did not write (issue 28:
F06, F08, P1 and keep_last).

One program, run on 2 ranks in a scratch directory:

- save(DIR, p) onto an existing directory that is not a checkpoint (the
  user's files, a subdirectory, another program's files) stops every rank
  with the path and the cause, and every file stays; onto a checkpoint
  that someone added a file to, too;
- onto an empty directory it saves, and onto its own checkpoint again
  (the marker .shd-checkpoint tells it is one);
- onto a symbolic link to a directory it stops, saying links are refused,
  and the link and its target stay;
- a fresh directory of another job that is still being written (its
  marker locked, as the writer holds it) is kept by the sweep; one whose
  job has ended (unlocked) is swept; two jobs saving to one directory at
  once both succeed;
- keep_last removes only older checkpoints: a file, a directory without
  the marker and a symbolic link that share the prefix stay, and are not
  counted among the kept;
- a single array's save, a manifest and the SHD_TRACE file replace a file
  they wrote, never a file of the user's at their name.
"""
import fcntl
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]

PROGRAM = """mesh {X: 2}
struct P { w: f32[8@X], b: f32[4] }
fn main() {
    let out = arg("out", "ck")
    let n = arg("n", 0)
    if (n == 0) & (arg("reps", 0) == 0) {
        save(out, full(P, 2.0))
    }
    if n == -1 {
        let a: f32[8@X] = iota(axis=0)
        save(out, a)
    }
    if n == -2 {
        manifest(out, step=1)
    }
    for i in 0..arg("reps", 0) {
        save(out, full(P, arg("v", 1.0)))
    }
    for i in 0..n {
        save(out + "/step_" + str(i, width=6), full(P, cast(i, f32)))
        keep_last(out, "step_", 2)
    }
    print("saved")
}
"""


def run(exe, work, *args, env=None):
    return subprocess.run(MPI + [exe] + list(args), cwd=work, capture_output=True, text=True, errors="replace",
                          timeout=120, env=dict(os.environ, SHD_QUIET="1", **(env or {})))


def write(path, text="mine\n"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def tree(d):
    """Every path under d with its bytes (links as their target)."""
    out = {}
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(top, name)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[rel] = f.read()
            else:
                out[rel] = "dir"
    return out


def expect_refused(exe, work, target, cause, failures):
    before = tree(work)
    p = run(exe, work, "--out=" + target)
    want = r'^ck: rank 0: line \d+: save\("%s"\): %s %s' % (re.escape(target), re.escape(target), cause)
    if p.returncode == 0 or not re.search(want, p.stderr, re.M) or "saved" in p.stdout:
        failures.append("save to %s: exit %d, expected /%s/:\n%s" % (target, p.returncode, want, p.stderr[-1500:]))
    if tree(work) != before:
        failures.append("save to %s changed the directory: %r" % (target, sorted(set(before) ^ set(tree(work)))))


def foreign_targets(exe, work, failures):
    write(os.path.join(work, "home", "notes.txt"))
    write(os.path.join(work, "home", ".ssh", "id_rsa"), "key\n")
    write(os.path.join(work, "home", "other", "w.npy"), "not ours\n")
    expect_refused(exe, work, "home", r"exists and is not a checkpoint \(it has no \.shd-checkpoint", failures)
    write(os.path.join(work, "npys", "w.npy"), "a user's array\n")
    expect_refused(exe, work, "npys", r"exists and is not a checkpoint \(it has no \.shd-checkpoint", failures)
    os.symlink("home", os.path.join(work, "lnk"))
    expect_refused(exe, work, "lnk", r"is a symbolic link; a struct save never replaces a link", failures)


def own_checkpoints(exe, work, failures):
    os.mkdir(os.path.join(work, "empty"))
    for attempt in ("an empty directory", "its own checkpoint"):
        p = run(exe, work, "--out=empty")
        names = sorted(os.listdir(os.path.join(work, "empty")))
        if p.returncode or names != [".shd-checkpoint", "b.npy", "w.npy"]:
            failures.append("save onto %s: exit %d, holds %r\n%s" % (attempt, p.returncode, names, p.stderr[-1500:]))
    write(os.path.join(work, "empty", "notes.txt"))
    expect_refused(exe, work, "empty", r"exists and is not a checkpoint \(it holds notes\.txt, which no save wrote\)",
                   failures)


def live_and_dead_temporaries(exe, work, failures):
    """Another job's fresh directory, its marker locked, survives our sweep;
    a dead one is swept."""
    live, dead = os.path.join(work, ".params.shd-save-LIVE01"), os.path.join(work, ".params.shd-save-DEAD01")
    for d in (live, dead):
        write(os.path.join(d, "w.npy"), "being written\n")
        write(os.path.join(d, ".shd-checkpoint"), "")
    fd = os.open(os.path.join(live, ".shd-checkpoint"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        p = run(exe, work, "--out=params")
    finally:
        os.close(fd)
    if p.returncode:
        failures.append("save beside another job's fresh directory: exit %d\n%s" % (p.returncode, p.stderr[-1500:]))
    if not os.path.isfile(os.path.join(live, "w.npy")):
        failures.append("the sweep removed another job's live fresh directory")
    if os.path.exists(dead):
        failures.append("the sweep left a dead job's fresh directory")


def two_jobs(exe, work, failures):
    """Two jobs save to one directory at once, 12 times each: both succeed
    (neither sweeps the other's fresh directory), and it ends a whole
    checkpoint of one of them, with nothing left beside it."""
    d = os.path.join(work, "shared")
    os.mkdir(d)
    jobs = [subprocess.Popen(MPI + [exe, "--out=ck2", "--reps=12", "--v=%d" % v], cwd=d, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace",
                             env=dict(os.environ, SHD_QUIET="1")) for v in (1, 2)]
    for v, p in zip((1, 2), jobs):
        out, err = p.communicate(timeout=300)
        if p.returncode or "saved" not in out:
            failures.append("job %d of two saving to one directory: exit %d\n%s" % (v, p.returncode, err[-1500:]))
    names = sorted(os.listdir(d))
    if names != ["ck2"] or sorted(os.listdir(os.path.join(d, "ck2"))) != [".shd-checkpoint", "b.npy", "w.npy"]:
        failures.append("two jobs left %r, ck2 holding %r" % (names, sorted(os.listdir(os.path.join(d, "ck2")))))


def keep_last_own_only(exe, work, failures):
    d = os.path.join(work, "run")
    write(os.path.join(d, "step_notes.txt"))
    write(os.path.join(d, "step_mine", "w.npy"), "a user's array\n")
    os.symlink("../home", os.path.join(d, "step_link"))
    p = run(exe, work, "--out=run", "--n=4")
    names = sorted(os.listdir(d))
    want = ["step_000002", "step_000003", "step_link", "step_mine", "step_notes.txt"]
    if p.returncode or names != want:
        failures.append("keep_last: exit %d, left %r, expected %r\n%s" % (p.returncode, names, want, p.stderr[-1500:]))
    if not os.path.isfile(os.path.join(d, "step_mine", "w.npy")) or not os.path.isfile(
            os.path.join(work, "home", "notes.txt")):
        failures.append("keep_last removed a file of the user's")


def foreign_files(exe, work, failures):
    """A single array's save, a manifest and SHD_TRACE replace a file of
    their own kind (their second run here), never a file of the user's."""
    d = os.path.join(work, "files")
    os.mkdir(d)
    cases = ((["--n=-1", "--out=a.npy"], {}, "a.npy", r'save\("a\.npy"\): a\.npy exists and is not a \.npy file'),
             (["--n=-2", "--out=m.json"], {}, "m.json", r"line \d+: manifest: m\.json exists and is not a manifest"),
             (["--n=-1", "--out=b.npy"], {"SHD_TRACE": "t.json"}, "t.json",
              r"SHD_TRACE=t\.json: t\.json exists and is not a trace this runtime wrote"))
    for args, env, name, refusal in cases:
        for attempt in ("new", "its own"):
            p = run(exe, d, *args, env=env)
            if p.returncode:
                failures.append("%s onto %s file: exit %d\n%s" % (name, attempt, p.returncode, p.stderr[-1500:]))
        write(os.path.join(d, name), "the user's notes\n")
        p = run(exe, d, *args, env=env)
        with open(os.path.join(d, name)) as f:
            kept = f.read() == "the user's notes\n"
        if p.returncode == 0 or not re.search(r"^ck: rank 0: .*" + refusal, p.stderr, re.M) or not kept:
            failures.append("%s onto a file of the user's: exit %d, kept %s, expected /%s/\n%s" % (
                name, p.returncode, kept, refusal, p.stderr[-1500:]))


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as work:
        exe = testlib.build(shdc, os.path.join(work, "ck.shd"), os.path.join(work, "ck"), text=PROGRAM)
        foreign_targets(exe, work, failures)
        own_checkpoints(exe, work, failures)
        live_and_dead_temporaries(exe, work, failures)
        two_jobs(exe, work, failures)
        keep_last_own_only(exe, work, failures)
        foreign_files(exe, work, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("saves and keep_last removed only what saves wrote")


if __name__ == "__main__":
    main()
