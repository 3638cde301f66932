#!/usr/bin/env python3
"""The benchmark scripts still run (bench/gpt.py, bench/gpt_v2.py).

They are run by hand, on this machine or a lent one, and nothing else
exercises them: three of their bugs (a step line no longer matched, a
metric read from the wrong trace pid, two ranks' JSON joined on one line)
were found only when a measurement was due. Here each runs at its smoke
sizes (`tiny`, `llama-tiny`: seconds, not measurements) with PyTorch, at 1
and 2 ranks, and every cell of its table must hold a number where a number
belongs; the table's own checks (explain's peak against the measured one)
must agree within 25%. No timing is asserted.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

ENV = dict(os.environ, SHD_QUIET="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
NUM = re.compile(r"^-?\d+(\.\d+)?%?$")


def run(cmd):
    p = subprocess.run([sys.executable] + cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=ENV)
    if p.returncode:
        sys.exit("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def table(out, what):
    """The rows of the markdown table in out, as lists of cells."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in out.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    if len(rows) < 2:
        sys.exit("%s printed no table:\n%s" % (what, out))
    return rows[0], rows[1:]


def check_numbers(head, rows, what, failures, other=None):
    """Every cell after the first a number (or numbers, comma separated),
    but the columns named in other: {column: a check of the cell and its
    row}."""
    other = other or {}
    for r in rows:
        if len(r) != len(head):
            failures.append("%s: row %s has %d cells, the header %d" % (what, r[0], len(r), len(head)))
            continue
        for h, c in zip(head[1:], r[1:]):
            if h in other:
                if not other[h](c, dict(zip(head, r))):
                    failures.append("%s: %s, column %r is %r" % (what, r[0], h, c))
                continue
            parts = [x.strip() for x in c.split(",")]
            if not all(NUM.match(x) for x in parts):
                failures.append("%s: %s, column %r is %r, not a number" % (what, r[0], h, c))


def main():
    shdc = testlib.shdc_option()
    failures = []

    out = run(["bench/gpt.py", "--shdc", shdc, "--configs", "tiny", "llama-tiny", "--ranks", "1", "2", "--steps", "4"])
    head, rows = table(out, "bench/gpt.py")
    col = {h: i for i, h in enumerate(head)}
    got = [(r[0].split()[0], r[col["ranks"]], r[col["DT"]]) for r in rows] if "ranks" in col and "DT" in col else []
    want = [(m, n, dt) for m in ("tiny", "llama-tiny") for n in ("1", "2") for dt in ("f32", "bf16")]
    if got != want:
        failures.append("bench/gpt.py: rows (model, ranks, DT) %s, expected %s" % (got, want))
    # DT names the row's dtype; the bf16 row's difference to the f32 one is signed, the f32 row has none
    diff = "bf16 - f32 ms/step"
    check_numbers(head, rows, "bench/gpt.py", failures, {
        "DT": lambda c, row: c in ("f32", "bf16"),
        diff: lambda c, row: c == "-" if row.get("DT") == "f32" else bool(re.match(r"^[+-]\d+(\.\d+)?$", c))})
    for name in ("shdc ms/step", "GFLOP/step", "MFU vs machine", "PyTorch ms/step"):
        if name not in col:
            failures.append("bench/gpt.py: no column %r in %s" % (name, head))
    for r in rows:
        if len(r) != len(head):
            continue
        if "shdc ms/step" in col and NUM.match(r[col["shdc ms/step"]]) and float(r[col["shdc ms/step"]]) <= 0:
            failures.append("bench/gpt.py: %s %s: ms/step %s" % (r[0], r[1], r[col["shdc ms/step"]]))
        arrays = [c for h, c in zip(head, r) if "explain" in h]
        m = re.match(r"^([\d.]+), ([\d.]+)$", arrays[0]) if arrays else None
        if not m or not 0.75 <= float(m.group(2)) / max(float(m.group(1)), 1e-9) <= 1.25:
            failures.append("bench/gpt.py: %s %s: arrays measured, explain = %s" % (r[0], r[1], arrays))
    print("bench/gpt.py: %d rows (tiny, llama-tiny at 1 and 2 ranks, f32 and bf16, PyTorch beside), every cell a "
          "number"
          % len(rows))

    out = run(["bench/gpt_v2.py", "--first", shdc, os.path.join(ROOT, "tests", "gpt2", "gpt2_v1.shd"),
               "--configs", "tiny", "--ranks", "1", "--rounds", "1", "--steps", "4"])
    head, rows = table(out, "bench/gpt_v2.py")
    if len(rows) != 1:
        failures.append("bench/gpt_v2.py: %d rows, expected 1:\n%s" % (len(rows), out))
    check_numbers(head, rows, "bench/gpt_v2.py", failures)
    print("bench/gpt_v2.py: version 1 against version 2 at the tiny size, every cell a number")

    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
