#!/usr/bin/env python3
"""The loss curve of `make demo` (issue 17, item 2).

The tiny GPT-2 of dsl-examples/gpt2.shd trains 8 steps with a validation
every 2 and --metrics=FILE; FILE parses as strict JSON Lines (a step and a
loss on every training line, a step and val_loss on every validation one,
steps 1 to 8 in order); tools/plot-loss draws it: the PNG exists, its
header says 800x500 (the size the script asks gnuplot for), and its pixels
hold both curves' colours (gnuplot's first two line colours: the training
and the validation loss). A metrics file with no finite loss is refused.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

TRAIN_RGB = (0x94, 0x00, 0xD3)   # gnuplot's line colour 1
VAL_RGB = (0x00, 0x9E, 0x73)     # line colour 2


def png_pixels(path):
    """(width, height, set of RGB triples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    at, idat, ihdr = 8, b"", None
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("PNG of depth %d, colour type %d, interlace %d" % (depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, colours = bytearray(stride), set()
    for y in range(h):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(tuple(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return w, h, colours


def main():
    shdc = testlib.shdc_option()
    failures = []
    env = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as d:
        exe = testlib.build(shdc, os.path.join(ROOT, "dsl-examples", "gpt2.shd"), os.path.join(d, "gpt"), "-O0",
                            "--mesh", "data=1,model=1", "-D", "T=8", "-D", "L=1", "-D", "NH=2", "-D", "C=8", "-D", "B=2")
        metrics = os.path.join(d, "metrics.jsonl")
        p = subprocess.run(["mpirun", "-np", "1", exe, "--steps", "8", "--data=", "--val=", "--val-every=2",
                            "--val-batches=1", "--lr=0.01", "--metrics", metrics], capture_output=True, text=True,
                           env=env, cwd=d, timeout=300)
        if p.returncode:
            sys.exit("the GPT-2 run failed: %s%s" % (p.stdout, p.stderr))

        def strict(c):
            raise ValueError("not JSON: " + c)
        with open(metrics, encoding="utf-8") as f:
            rows = [json.loads(line, parse_constant=strict) for line in f]
        train = [r["step"] for r in rows if isinstance(r.get("loss"), float)]
        val = [r["step"] for r in rows if isinstance(r.get("val_loss"), float)]
        if train != list(range(1, 9)) or val != [2, 4, 6, 8]:
            failures.append("metrics: training steps %s, validation steps %s" % (train, val))
        png = os.path.join(d, "loss.png")
        p = subprocess.run([os.path.join(ROOT, "tools", "plot-loss"), metrics, png, "test"], capture_output=True,
                           text=True, timeout=120)
        if p.returncode or not os.path.exists(png):
            failures.append("plot-loss: exit %d\n%s" % (p.returncode, p.stderr))
        else:
            w, h, colours = png_pixels(png)
            if (w, h) != (800, 500) or TRAIN_RGB not in colours or VAL_RGB not in colours:
                failures.append("loss.png: %dx%d, training colour %s, validation colour %s; expected 800x500 with "
                                "both" % (w, h, TRAIN_RGB in colours, VAL_RGB in colours))
        bad = os.path.join(d, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"step": 1, "loss": "NaN"}\n')
        p = subprocess.run([os.path.join(ROOT, "tools", "plot-loss"), bad, os.path.join(d, "bad.png")],
                           capture_output=True, text=True, timeout=120)
        if p.returncode == 0 or "no line with a step and a finite loss" not in p.stderr:
            failures.append("plot-loss of a file without a finite loss: exit %d %s" % (p.returncode, p.stderr))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("GPT-2's metrics parse as JSON Lines (8 steps, 4 validations); loss.png is 800x500 with both curves")


if __name__ == "__main__":
    main()
