#!/usr/bin/env python3
"""A normalisation's forward in a layer loop under value_and_grad is one
loop nest, with its row statistics still saved for the backward pass.

norm_loop.shd trains, in a step loop, a function whose layer loop holds an
RMSNorm and a LayerNorm (written out over several lines). The backward pass
takes their row statistics (RMSNorm's mean square, LayerNorm's mean and
variance) from tapes, and each tape push reads a member of the
normalisation's loop group: the push must wait until after the group
instead of ending it there (which cut an RMSNorm's forward into three loop
nests and a LayerNorm's into three as well). In the C that `shdc emit-c`
generates for the gradient function, the forward layer loop must hold
exactly two elementwise loop nests, both loop groups: the RMSNorm's, from
its first line to its last, and the LayerNorm's (with the residual add
before it), ending at its last line; and the statistics pushed onto tapes
after each group, never inside it. 
The backward pass of each normalisation is one loop nest too: its row
sums and its column sums (the weight's and the bias's gradients, summed
over the rows of the [B,T,C] batch) in the same row loop, each column sum
accumulated (`acc[ic] += ...`) in the row's last pass and all-reduced over
`data` after the nest. So the backward layer loop holds exactly one loop
group within the LayerNorm's lines (from its last line back to its first),
with two column-sum accumulations, and one within the RMSNorm's, with one,
and no separate reduction (`shd_reduce`) at all. colsum_group.shd (column
sums over two leading dims, keepdims, a mean, columns of the rows' shape,
sharded columns; its numerics are its own RUN, REF and TRACE lines) must
make each of its five column sums in a loop nest, the only `shd_reduce`
left being the row sum over its sharded trailing dim.

explain simulates the pushes, and the column sums, at their place: its
peak for main must stay within the bounds test_loop_peak.py sets against
the peak SHD_TRACE=1 measures (not more than 3% below, nor 15% above), at 2
ranks. The numerics (two SGD steps against PyTorch, every mesh against the
one-rank build) are norm_loop.shd's own RUN and REF lines."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from run import mpirun_cmd, run, Failure  # noqa: E402
import testlib  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "explain"))
from test_loop_peak import explain_peak, measured_peak  # noqa: E402  (explain's and SHD_TRACE's peaks of main)

SRC = os.path.join(ROOT, "tests", "autodiff", "norm_loop.shd")
COLSUM = os.path.join(ROOT, "tests", "autodiff", "colsum_group.shd")


def fn_lines(text, name):
    """The line numbers of the body of `fn name` in text (1-based)."""
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("fn %s(" % name))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return list(range(start + 2, end + 1))


def block_at(text, start):
    """The text of the C block whose opening line starts at offset start, up
    to its closing brace at the same indentation."""
    line_end = text.index("\n", start)
    indent = len(text[start:line_end]) - len(text[start:line_end].lstrip(" "))
    close = re.compile(r"^%s}$" % (" " * indent), re.M).search(text, line_end)
    if not close:
        raise Failure("no closing brace for:\n" + text[start:line_end])
    return text[start:close.end()]


def emit_c(shdc, src):
    p = subprocess.run([shdc, "emit-c", src], capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise Failure("shdc emit-c %s: exit %d\n%s" % (src, p.returncode, p.stderr))
    return p.stdout


def group_texts(body):
    """Each loop group of body: (first line, last line, its C from the
    comment naming it to the end of its span)."""
    out = []
    for m in re.finditer(r"/\* one loop nest: lines (\d+) to (\d+) \*/", body):
        end = body.index("shd_span_end();", m.end())
        out.append((int(m.group(1)), int(m.group(2)), body[m.start():end]))
    return out


COL_ACC = re.compile(r"^ *v\d+\[ic\] \+= .*;$", re.M)


def check_backward(fn, src_text):
    loops = list(re.finditer(r"^  for \(int32_t .*\{$", fn, re.M))
    if len(loops) < 2:
        raise Failure("no backward layer loop in the gradient function:\n" + fn)
    body = block_at(fn, loops[1].start())
    problems = []
    for name, ncols in (("ln", 2), ("rms", 1)):
        lines = set(fn_lines(src_text, name))
        inside = [g for g in group_texts(body) if g[0] in lines and g[1] in lines]
        if len(inside) != 1:
            problems.append("%d loop groups within %s's lines %s in the backward layer loop, not one: %s" %
                            (len(inside), name, sorted(lines), [g[:2] for g in inside]))
            continue
        cols = len(COL_ACC.findall(inside[0][2]))
        if cols != ncols:
            problems.append("%s's backward loop nest (lines %d to %d) accumulates %d column sums, not %d" %
                            (name, inside[0][0], inside[0][1], cols, ncols))
    if "shd_reduce(" in body:
        problems.append("a reduction outside the loop nests in the backward layer loop")
    if problems:
        raise Failure("\n".join(problems) + "\nthe backward layer loop of the gradient function:\n" + body)
    print("backward layer loop: %d loop nests, groups %s" % (
        len(re.findall(r'shd_span_begin_at\(SHD_SPAN_ELEMENTWISE', body)), [g[:2] for g in group_texts(body)]))


def check_colsum_group(shdc):
    c = emit_c(shdc, COLSUM)
    m = re.search(r"^static void shd_fn_main\(.*\) \{$", c, re.M)
    if not m:
        raise Failure("no main in the C of " + COLSUM)
    fn = block_at(c, m.start())
    groups = group_texts(fn)
    cols = sum(len(COL_ACC.findall(g[2])) for g in groups)
    reduces = fn.count("shd_reduce(")
    if cols != 5 or reduces != 1:
        raise Failure("%s: %d column sums accumulated in loop groups (not 5), %d shd_reduce calls (not 1):\n%s" %
                      (COLSUM, cols, reduces, fn))
    print("colsum_group.shd: 5 column sums in %d loop groups" % len(groups))


def check_loop_nests(shdc, src_text):
    c = emit_c(shdc, SRC)
    m = re.search(r"^static void shd_fn_net_value_and_grad_\w*\(.*\) \{$", c, re.M)
    if not m:
        raise Failure("no definition of the gradient function of net in the generated C")
    fn = block_at(c, m.start())
    loop = re.search(r"^  for \(int32_t .*\{$", fn, re.M)   # the forward layer loop: the first loop of the body
    if not loop:
        raise Failure("no layer loop in the gradient function:\n" + fn)
    body = block_at(fn, loop.start())
    rms, ln = fn_lines(src_text, "rms"), fn_lines(src_text, "ln")
    nests = re.findall(r'shd_span_begin_at\(SHD_SPAN_ELEMENTWISE, "elementwise", \d+, (\d+)\)', body)
    groups = [(int(a), int(b)) for a, b in re.findall(r"/\* one loop nest: lines (\d+) to (\d+) \*/", body)]
    problems = []
    if len(nests) != 2 or len(groups) != 2:
        problems.append("the forward layer loop has %d elementwise loop nests (%d of them loop groups: %s), "
                        "not one per normalisation" % (len(nests), len(groups), groups))
    if (rms[0], rms[-1]) not in groups:
        problems.append("no loop group from the RMSNorm's first line %d to its last %d: %s" % (rms[0], rms[-1], groups))
    if not any(b == ln[-1] for a, b in groups):
        problems.append("no loop group ending at the LayerNorm's last line %d: %s" % (ln[-1], groups))
    # each statistic goes onto its tape (`tape[index] = stat;`) after the loop nests, none inside one
    for stat in ("ms", "mu", "vr"):
        push = re.search(r"^ *v\d+\[v\d+\] = %s_\d+;$" % stat, body, re.M)
        if not push:
            problems.append("no tape push of the statistic %s in the forward layer loop" % stat)
            continue
        before = body[:push.start()]
        if before.count("shd_span_begin") != before.count("shd_span_end("):
            problems.append("the tape push of %s is inside a loop nest" % stat)
    if problems:
        raise Failure("\n".join(problems) + "\nthe forward layer loop of the gradient function:\n" + body)
    print("forward layer loop: %d loop nests, groups %s" % (len(nests), groups))
    check_backward(fn, src_text)


def main():
    shdc = testlib.shdc_option(__doc__)
    with open(SRC) as f:
        src_text = f.read()
    check_loop_nests(shdc, src_text)
    check_colsum_group(shdc)
    with tempfile.TemporaryDirectory() as d:
        e, m = explain_peak(shdc, SRC, "data=2", []), measured_peak(shdc, SRC, "data=2", 2, [], [], d)
        print("peak of main at 2 ranks: explain %d bytes, measured %d" % (e, m))
        if e < 0.97 * m or e > 1.15 * m:
            raise Failure("explain's peak %d bytes, measured %d (%+.1f%%)" % (e, m, 100.0 * (e - m) / m))


if __name__ == "__main__":
    try:
        main()
    except Failure as f:
        sys.exit(str(f))
