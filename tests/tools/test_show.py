#!/usr/bin/env python3
"""`shdc show`: every block of every picture is held by exactly the devices an
independent model of the layout says (ranks row-major over the mesh axes; a
dim's block index linearises the coordinates of its axes, major first), for
1-D, 2-D, multi-axis and 3-D arrays of tests/tools/show_types.shd; the local
shape and U marks are right; a 512-device mesh is drawn with an ellipsis;
names select bindings, an unknown name is exit 2, a wrong program exit 1."""
import argparse
import itertools
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "tools", "show_types.shd")
MESH = [("X", 2), ("Y", 2), ("Z", 2)]


def parse_type(t):
    m = re.match(r"^(\w+)\[(.*?)\]((?:<[URV]:[\w,]+>)*)$", t)
    dims = []
    for d in re.findall(r"(\d+)(?:@\(([\w,]+)\)|@(\w+))?", m.group(2)):
        axes = (d[1] or d[2]).split(",") if (d[1] or d[2]) else []
        dims.append((int(d[0]), axes))
    ann = dict((k, v.split(",")) for k, v in re.findall(r"<([URV]):([\w,]+)>", m.group(3)))
    return dims, ann


def coords(r, mesh):
    c = {}
    for name, size in reversed(mesh):
        c[name] = r % size
        r //= size
    return c


def block_index(r, axes, mesh):
    c, sizes, idx = coords(r, mesh), dict(mesh), 0
    for a in axes:
        idx = idx * sizes[a] + c[a]
    return idx


def ranks_of(text):
    text = text.replace("Σ", "").strip()
    m = re.match(r"^(\d+)-(\d+)$", text)
    if m:
        return set(range(int(m.group(1)), int(m.group(2)) + 1))
    m = re.match(r"^(\d+),(\d+)\.\.(\d+) \((\d+)\)$", text)
    if m:
        a, b, z = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return set(range(a, z + 1, b - a))
    return set(int(x) for x in text.split())


def pictures(out):
    """{name: (type, lines)} for each binding drawn."""
    pics, cur = {}, None
    for l in out.split("\n"):
        m = re.match(r"^(\w+\.\w+): (\S+)$", l)
        if m:
            cur = m.group(1)
            pics[cur] = (m.group(2), [])
        elif cur:
            pics[cur][1].append(l)
    return pics


def grids(lines):
    """[(caption, column ranges, [(row range, [cells])])]"""
    out, caption, cols = [], None, None
    for l in lines:
        m = re.match(r"^\s+\[(.*)\]$", l)
        if m:
            caption = m.group(1)
        elif re.match(r"^\s+(\d+:\d+\s*)+$", l) or re.match(r"^\s+(\d+:\d+|\.\.\.)(\s+(\d+:\d+|\.\.\.))*\s*$", l):
            cols = l.split()
            out.append((caption, cols, []))
        elif "│" in l and out:
            parts = l.split("│")
            out[-1][2].append((parts[0].strip(), [p.strip() for p in parts[1:-1]]))
    return out


def check_picture(name, ty, lines, failures):
    dims, ann = parse_type(ty)
    nranks = 1
    for _, s in MESH:
        nranks *= s
    sizes = dict(MESH)
    parts = []
    for size, axes in dims:
        p = 1
        for a in axes:
            p *= sizes[a]
        parts.append(p)
    local = [size // p for (size, _), p in zip(dims, parts)]
    text = "\n".join(lines)
    if "every device holds %s[%s]" % (ty.split("[")[0], ",".join(map(str, local))) not in text:
        failures.append("%s: local shape %s not in\n%s" % (name, local, text))
    gs = grids(lines)
    rank = len(dims)
    lead = list(itertools.product(*[range(p) for p in parts[:max(rank - 2, 0)]]))
    if len(gs) != max(1, len([x for x in lead if True])) and rank > 2:
        failures.append("%s: %d grids for %d leading blocks" % (name, len(gs), len(lead)))
    ncells = 0
    for gi, (caption, cols, rows) in enumerate(gs):
        fixed = list(lead[gi]) if rank > 2 else []
        for ri, (rlabel, cells) in enumerate(rows):
            for ci, cell in enumerate(cells):
                idx = fixed + ([ri] if rank >= 2 else []) + [ci]
                want = set(r for r in range(nranks)
                           if all(block_index(r, dims[d][1], MESH) == idx[d] for d in range(rank)))
                got = ranks_of(cell)
                ncells += 1
                if got != want:
                    failures.append("%s: block %s is held by %s, the picture says %r" % (name, idx, sorted(want), cell))
                if ("Σ" in cell) != ("U" in ann):
                    failures.append("%s: cell %r and U %s" % (name, cell, ann.get("U")))
                lo = idx[-1] * local[-1]
                if cols[ci] != "%d:%d" % (lo, lo + local[-1]):
                    failures.append("%s: column %d labelled %s" % (name, ci, cols[ci]))
    total = 1
    for p in parts:
        total *= p
    if ncells != total:
        failures.append("%s: %d cells drawn for %d blocks" % (name, ncells, total))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    shdc = ap.parse_args().shdc
    failures = []
    p = subprocess.run([shdc, "show", PROG], capture_output=True, text=True)
    if p.returncode:
        sys.exit("shdc show: exit %d\n%s" % (p.returncode, p.stderr))
    pics = pictures(p.stdout)
    want = {"main.%s" % n for n in "abcdefxyur"}
    if set(pics) != want:
        failures.append("pictures of %s, expected %s" % (sorted(pics), sorted(want)))
    for name, (ty, lines) in sorted(pics.items()):
        check_picture(name, ty, lines, failures)
    if "replicated over X,Y,Z: 8 copies" not in "\n".join(pics.get("main.r", ("", []))[1]):
        failures.append("main.r (reduced over Y) is replicated on all 8 devices:\n%s" % "\n".join(pics["main.r"][1]))
    # names select
    p = subprocess.run([shdc, "show", PROG, "main.b", "main.e"], capture_output=True, text=True)
    if p.returncode or set(pictures(p.stdout)) != {"main.b", "main.e"}:
        failures.append("show main.b main.e: exit %d, %s" % (p.returncode, sorted(pictures(p.stdout))))
    p = subprocess.run([shdc, "show", PROG, "main.nothing"], capture_output=True, text=True)
    if p.returncode != 2 or "main.nothing" not in p.stderr:
        failures.append("show main.nothing: exit %d, %r" % (p.returncode, p.stderr))
    p = subprocess.run([shdc, "show", os.path.join(ROOT, "tests", "errors", "shapes.shd")], capture_output=True,
                       text=True)
    if p.returncode != 1:
        failures.append("show of a wrong program: exit %d" % p.returncode)
    # a big mesh: the first and last blocks, an ellipsis between
    p = subprocess.run([shdc, "show", os.path.join(ROOT, "dsl-examples", "mlp_dp.shd"), "--mesh", "data=512",
                        "main.x"], capture_output=True, text=True)
    rows = [g for g in grids(pictures(p.stdout)["main.x"][1])][0][2] if p.returncode == 0 else []
    labels = [r[0] for r in rows]
    if len(rows) != 13 or labels[6] != "..." or labels[0] != "0:16" or labels[-1] != "8176:8192" \
            or rows[-1][1] != ["511"]:
        failures.append("show --mesh data=512: rows %s" % labels)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d pictures: every block held by the devices the layout model says" % len(pics))


if __name__ == "__main__":
    main()
