#!/usr/bin/env python3
"""tools/brown_tokens.py on a small corpus in the Brown format (WORD/TAG,
one sentence a line): tags stripped, punctuation re-attached, byte tokens
as i32, every tenth document in validation. No network: the real corpus
is fetched by `make data`."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc")
    ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "package")
        os.makedirs(src)
        for k in range(20):
            with open(os.path.join(src, "ca%02d" % (k + 1)), "w") as f:
                f.write("\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, doc/nn %d/cd ./.\n" % k)
                f.write("\n\tIt's/pps+bez 1/2/cd done/vbn ./.\n")
        with open(os.path.join(src, "README"), "w") as f:
            f.write("not a document\n")
        out = os.path.join(d, "out")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "brown_tokens.py"), src, "--out", out],
                       check=True, capture_output=True)
        text = open(os.path.join(out, "brown.txt"), encoding="latin-1").read()
        want = 'The jury said "no evidence", doc 3.\nIt\'s 1/2 done.\n'
        if want not in text:
            sys.exit("brown.txt lacks %r:\n%s" % (want, text[:400]))
        train = np.load(os.path.join(out, "brown_train.npy"))
        val = np.load(os.path.join(out, "brown_val.npy"))
        if train.dtype != np.int32 or val.dtype != np.int32 or train.ndim != 1:
            sys.exit("tokens are not i32 vectors: %s %s" % (train.dtype, val.dtype))
        vtext = bytes(val.astype(np.uint8)).decode("latin-1")
        # documents 9 and 19 (every tenth) are validation, the other 18 training
        if "doc 9." not in vtext or "doc 19." not in vtext or "doc 3." in vtext:
            sys.exit("validation holds the wrong documents: %r" % vtext)
        ttext = bytes(train.astype(np.uint8)).decode("latin-1")
        if ttext.count("The jury") != 18 or "doc 9." in ttext:
            sys.exit("training holds the wrong documents")
        if train.min() < 0 or train.max() > 255:
            sys.exit("tokens outside 0..255")
    print("brown_tokens: tags stripped, 18/2 documents split, i32 byte tokens")


if __name__ == "__main__":
    main()
