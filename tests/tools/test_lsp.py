#!/usr/bin/env python3
"""shdc lsp, the Language Server Protocol server (issue 17, item 5).

Each recorded session in tests/tools/lsp/*.json is played to `shdc lsp`
over a pipe, with its documents written to a scratch directory outside the
project (their file: URIs are what the session names $URI(FILE), their text
$TEXT(FILE); a FILE may be in a subdirectory, and the session's "args" are
given to `shdc lsp`, $DIR the scratch directory: `-I $DIR/lib`); messages
marked "$raw" go as they are (headers included). The
server's messages must contain the session's "expect" list in order (each
expected object a partial match: the keys it names, lists element by
element, "$MATCH(regex)" for text), none of its "absent" ones, and the
server must exit with the session's status. The sessions cover a whole
editing session (diagnostics and their fixes as code actions, hover,
definition, symbols, incremental edits, close), malformed and out-of-order
messages (each a JSON-RPC error, never a crash), UTF-16 and UTF-8
positions, and version 2: structs (hover with their fields, nested and
stacked), field access, generic functions (the instance a call was checked
with, a place in a generic body once per instance), imports of a user file
(through -I) and of the standard library (definition in whichever file
declares it), the symbols of structs, and documents whose imports are
missing, cyclic or broken, with unknown fields and an error inside an
imported generic function (each diagnostic where the document causes it).

Then the messages of every session, mutated (cut short, bytes changed,
headers lost) with a fixed seed, are played to one server, followed by a
shutdown request: the server answers it and exits by itself (status 0 or
1), however the messages before it were broken. Under the sanitizer build
(make test-san) a memory error fails the test.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

SESSIONS = os.path.join(ROOT, "tests", "tools", "lsp")


def frame(body):
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def messages_of(out):
    """The server's messages; raises ValueError on a malformed frame."""
    msgs = []
    while out:
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("a frame without its header's end: %r" % out[:200])
        m = re.match(rb"Content-Length: (\d+)$", head)
        if not m:
            raise ValueError("a header that is not Content-Length: %r" % head)
        n = int(m.group(1))
        msgs.append(json.loads(rest[:n]))
        out = rest[n:]
    return msgs


def substitute(x, files):
    if isinstance(x, str):
        for name, (uri, text) in files.items():
            if x == "$TEXT(%s)" % name:
                return text
            x = x.replace("$URI(%s)" % name, uri)
        return x
    if isinstance(x, list):
        return [substitute(v, files) for v in x]
    if isinstance(x, dict):
        return {substitute(k, files): substitute(v, files) for k, v in x.items()}
    return x


def matches(want, got):
    if isinstance(want, str) and want.startswith("$MATCH(") and want.endswith(")"):
        return isinstance(got, str) and re.search(want[7:-1], got) is not None
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and matches(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(matches(w, g) for w, g in zip(want, got))
    return want == got and type(want) is type(got)


def play(shdc, stdin, timeout=300, args=()):
    try:
        p = subprocess.run([shdc, "lsp"] + list(args), input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return p


def run_session(shdc, path, tmp, failures):
    with open(path, encoding="utf-8") as f:
        s = json.load(f)
    name = os.path.basename(path)
    d = os.path.join(tmp, name[:-5] + " docs")   # a space: percent-encoded in the URI
    os.makedirs(d)
    files = {}
    for fname, text in s["files"].items():
        p = os.path.join(d, fname)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        files[fname] = ("file://" + urllib.parse.quote(p), text)
    args = [a.replace("$DIR", d) for a in s.get("args", [])]
    stdin = b""
    for m in s["send"]:
        if isinstance(m, dict) and "$raw" in m:
            stdin += m["$raw"].encode("utf-8")
        else:
            stdin += frame(json.dumps(substitute(m, files), ensure_ascii=False).encode("utf-8"))
    p = play(shdc, stdin, args=args)
    if p is None:
        failures.append("%s: the server did not finish" % name)
        return
    try:
        got = messages_of(p.stdout)
    except ValueError as e:
        failures.append("%s: %s" % (name, e))
        return
    at = 0
    for want in substitute(s["expect"], files):
        k = next((i for i in range(at, len(got)) if matches(want, got[i])), None)
        if k is None:
            failures.append("%s: no message (after the %d-th) matches\n  %s\nthe server said:\n  %s" % (
                name, at, json.dumps(want, ensure_ascii=False),
                "\n  ".join(json.dumps(g, ensure_ascii=False)[:400] for g in got[at:])))
            return
        at = k + 1
    for want in substitute(s.get("absent", []), files):
        if any(matches(want, g) for g in got):
            failures.append("%s: the server answered %s" % (name, json.dumps(want)))
    if p.returncode != s["exit"]:
        failures.append("%s: exit status %d, expected %d\n%s" % (name, p.returncode, s["exit"],
                                                                p.stderr.decode(errors="replace")[-2000:]))


def mutate(frames, rnd):
    out = b""
    for f in frames:
        r = rnd.random()
        if r < 0.15:
            f = f[:rnd.randrange(len(f))]                           # cut short (the next frame is then misread)
        elif r < 0.3:
            b = bytearray(f)
            for _ in range(rnd.randrange(1, 4)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            f = bytes(b)
        elif r < 0.35:
            f = f.split(b"\r\n\r\n", 1)[-1]                           # no header
        elif r < 0.4:
            f = b"Content-Length: %d\r\n\r\n" % (len(f) * 3) + f     # too long a length
        out += f + (b"\r\n\r\n" if r < 0.2 else b"")
    return out


def fuzz(shdc, tmp, failures):
    frames = []
    for path in sorted(os.listdir(SESSIONS)):
        with open(os.path.join(SESSIONS, path), encoding="utf-8") as f:
            s = json.load(f)
        files = {n: ("file://" + os.path.join(tmp, n), t) for n, t in s["files"].items()}
        for m in s["send"]:
            if isinstance(m, dict) and "$raw" in m:
                frames.append(m["$raw"].encode())
            elif m.get("method") != "exit":
                frames.append(frame(json.dumps(substitute(m, files)).encode()))
    rnd = random.Random(17)
    for round_ in range(6):
        stdin = mutate(frames, rnd)
        # whatever came before, a clean end: more bytes than a frame whose
        # length was tripled can still want, a header's end, then a shutdown
        # request and exit
        stdin += b" " * 32768 + b"\r\n\r\n" + frame(b'{"jsonrpc": "2.0", "id": "last", "method": "shutdown"}') + \
            frame(b'{"jsonrpc": "2.0", "method": "exit"}')
        p = play(shdc, stdin)
        if p is None:
            failures.append("fuzz round %d: the server did not finish" % round_)
            continue
        try:
            got = messages_of(p.stdout)
        except ValueError as e:
            failures.append("fuzz round %d: %s" % (round_, e))
            continue
        if p.returncode not in (0, 1) or not any(m.get("id") == "last" for m in got):
            failures.append("fuzz round %d: exit %d, answered the last request: %s\n%s" % (
                round_, p.returncode, any(m.get("id") == "last" for m in got),
                p.stderr.decode(errors="replace")[-3000:]))


def main():
    shdc = testlib.shdc_option()
    failures = []
    sessions = sorted(f for f in os.listdir(SESSIONS) if f.endswith(".json"))
    with tempfile.TemporaryDirectory() as tmp:
        for s in sessions:
            run_session(shdc, os.path.join(SESSIONS, s), tmp, failures)
        fuzz(shdc, tmp, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("shdc lsp: %d recorded sessions as expected, 6 rounds of mutated messages answered" % len(sessions))


if __name__ == "__main__":
    main()
