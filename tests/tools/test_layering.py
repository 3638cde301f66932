#!/usr/bin/env python3
"""The operation registry is the only way between the compiler's stages and
its operation families (issue 16, item 7), measured on the object files of
the shdc under test (nm) and on its sources:

- no stage object (tc*, lower, autodiff, partition, reshard, optimize,
  sched, fuse, emit_*, explain, netmodel, plan, show, ir, main) uses a
  symbol defined in an op_*.o: stages reach operations through ops.o's
  tables only;
- no circle of compiler files that use each other's symbols is larger than
  3 files, discounting the registry table (ops.o, which every stage uses
  and which lists every family);
- the planner, the emitter's files and explain with its network models are
  in no circle at all: fuse.c and sched.c plan before any C is written,
  each emitter file calls only those below it (emit_parts, emit_program,
  emit_group, emit_c), and explain uses netmodel, never the reverse; so
  are the driver's files (main, driver, build, cache): the build is
  called, calls nothing above it;
- no stage source names a family's own opcode (only the core enum of
  shdc.h: control and the stages' builder vocabulary);
- the headers' cut: ops.h, the vocabulary of the families (builtin rows,
  the families' tables, the builders the stages export for them), is seen
  (included, directly or through a header of the compiler) only by the
  families, ops.c and the files that define something it declares (and
  those sharing a private header with one: the emitter's emit_internal.h);
  every other file reads operations through shdc.h alone;
- no source but ops.c and ir.c compares a name with a builtin's or an IR
  operation's name (strcmp on op names), using `shdc list-ops` for the
  names;
- no object but arena.o calls the C library's allocators (malloc, realloc,
  strdup, open_memstream...): every allocation goes through arena.c's
  mem_* and arena_* functions, which report running out of memory.
"""
import glob
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

STAGES = ("import", "tc", "tc_args", "tc_expr", "tc_manual", "tc_struct", "instance", "lower", "autodiff", "ad_clone", "ad_saved",
          "partition",
          "reshard", "optimize", "sched", "fuse", "emit_c", "emit_group", "emit_program", "emit_parts", "explain",
          "netmodel", "plan", "show", "ir", "driver", "main")
MAX_CIRCLE = 3
# Files in no dependency circle of any size (each a stage: a missing object fails above).
ACYCLIC = ("fuse", "sched", "emit_c", "emit_group", "emit_program", "emit_parts", "explain", "netmodel", "build",
           "cache", "driver", "main")


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.split("\n"):
        f = line.split()
        if len(f) == 3 and f[1] in "TDRBC":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return defined, used


def circles(nodes, edges):
    """Strongly connected components (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in nodes:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def why_circle(comp, edges, uses, defs):
    """Which symbols make each edge of a circle: 'a -> b (sym, ...)'."""
    out = []
    for a in comp:
        for b in comp:
            if b in edges[a]:
                syms = sorted(s for s in uses[a] if defs.get(s) == b)
                out.append("%s -> %s: %s" % (a, b, ", ".join(syms[:4]) + (", ..." if len(syms) > 4 else "")))
    return "; ".join(out)


def local_includes(path):
    return re.findall(r'^#include "([\w.]+)"', open(path).read(), re.M)


def header_cut(ops_header, defs):
    """The compiler sources that see ops.h and have no business with it."""
    comp = os.path.join(ROOT, "compiler")
    declared = set(re.findall(r"\b([a-z]\w*)\s*\(", re.sub(r"/\*.*?\*/", "", ops_header, flags=re.S)))
    owners = {defs[s] for s in declared if s in defs}

    def closure(name, seen):
        for h in local_includes(os.path.join(comp, name)):
            if h not in seen and os.path.exists(os.path.join(comp, h)):
                seen.add(h)
                closure(h, seen)
        return seen

    sources = sorted(os.path.basename(p) for p in glob.glob(os.path.join(comp, "*.c")))
    seen = {src: closure(src, set()) for src in sources}
    # a private header (not shdc.h, not ops.h) included by an owner shares ops.h with its other includers
    shared = {h for src in sources if src[:-2] in owners for h in seen[src]} - {"shdc.h", "ops.h"}
    out, nseeing = [], 0
    if len(owners) < 10:
        out.append("found only %d files defining what ops.h declares" % len(owners))
    for src in sources:
        name = src[:-2]
        if "ops.h" not in seen[src]:
            continue
        nseeing += 1
        if name.startswith("op_") or name == "ops" or name in owners:
            continue
        via = sorted(h for h in seen[src] & shared if "ops.h" in closure(h, set()))
        if via:
            continue
        out.append("compiler/%s sees ops.h but defines nothing it declares: include shdc.h (the stages read "
                   "operations through OpDef)" % src)
    return out, nseeing


def main():
    shdc = testlib.shdc_option()
    build = os.path.dirname(shdc)
    objs = glob.glob(os.path.join(build, "compiler", "*.o")) + glob.glob(os.path.join(build, "gen", "*.o"))
    if len(objs) < 20:
        print("no compiler objects beside %s to measure" % shdc)
        sys.exit(1)
    failures = []
    defs, uses = {}, {}
    for o in objs:
        name = os.path.basename(o)[:-2]
        d, u = symbols(o)
        uses[name] = u
        for s in d:
            defs[s] = name
    missing = [s for s in STAGES if s not in uses]
    if missing:
        failures.append("no object for the stages %s" % missing)

    # 1. Stages use no family's symbol.
    for st in STAGES:
        bad = sorted(s for s in uses.get(st, ()) if defs.get(s, "").startswith("op_"))
        for s in bad:
            failures.append("%s.o uses %s, defined in %s.o: reach it through the registry (ops.c)" % (st, s, defs[s]))

    # 2. No circle of more than MAX_CIRCLE files, the registry discounted.
    edges = defaultdict(set)
    for f, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != f:
                edges[f].add(defs[s])
    nodes = set(uses) - {"ops"}
    comps = [c for c in circles(nodes, edges) if len(c) > 1]
    for c in comps:
        if len(c) > MAX_CIRCLE:
            failures.append("a dependency circle of %d files: %s" % (len(c), " ".join(c)))
        held = sorted(set(c) & set(ACYCLIC))
        if held:
            failures.append("%s, which must be in no dependency circle, in one of %d files: %s" %
                            (" and ".join(held), len(c), why_circle(c, edges, uses, defs)))
    biggest = max((len(c) for c in comps), default=1)

    # 3. No family opcode in a stage source.
    header = open(os.path.join(ROOT, "compiler", "shdc.h")).read()
    ops_header = open(os.path.join(ROOT, "compiler", "ops.h")).read()
    enum = header[header.index("  IR_CONST,"):header.index("} Opcode;")]
    core = set(re.findall(r"\b(IR_\w+)\b", enum))
    family_ops = set()
    for src in glob.glob(os.path.join(ROOT, "compiler", "op_*.c")):
        family_ops |= set(re.findall(r"\b(IR_\w+)\b", open(src).read())) - core
    family_ops |= set(re.findall(r"\b(IR_\w+) = IR_BASE_", ops_header))
    if "IR_DOT" not in family_ops or "IR_BINARY" not in core:
        failures.append("could not tell family opcodes (%d) from core ones (%d)" % (len(family_ops), len(core)))
    for st in STAGES:
        for src in glob.glob(os.path.join(ROOT, "compiler", st + ".c")):
            for op in sorted(set(re.findall(r"\b(IR_\w+)\b", open(src).read())) & family_ops):
                failures.append("compiler/%s.c names the family opcode %s" % (st, op))

    # 4. Who sees ops.h.
    cut, nseeing = header_cut(ops_header, defs)
    failures += cut

    # 5. No strcmp on an op's name outside ops.c and ir.c.
    p = subprocess.run([shdc, "list-ops"], capture_output=True, text=True, timeout=60)
    names = set()
    for line in p.stdout.split("\n"):
        f = line.split("\t")
        if len(f) >= 2 and f[0] in ("builtin", "op"):
            names.add(f[1])
    if len(names) < 100:
        failures.append("shdc list-ops gave %d names" % len(names))
    for src in sorted(glob.glob(os.path.join(ROOT, "compiler", "*.c"))):
        base = os.path.basename(src)
        if base in ("ops.c", "ir.c"):
            continue
        text = open(src).read()
        for m in re.finditer(r"\bstrn?cmp\s*\(([^;]*?)\)", text):
            lits = re.findall(r'"([^"]*)"', m.group(1))
            other = re.sub(r'"[^"]*"', "", m.group(1))
            if any(l in names for l in lits) and re.search(r"callee|->name|->str|\bname\b|tc_callee|opname", other):
                line = text[:m.start()].count("\n") + 1
                failures.append("compiler/%s:%d compares a name with an operation's: %s" % (base, line,
                                                                                           m.group(0)))
    # 6. Every allocation through arena.c's choke point (mem_*, arena_*): its out-of-memory
    # message and SHDC_FAIL_ALLOC reach every one (issue 28: autodiff.c once grew its arrays
    # with realloc and used them unchecked).
    libc_alloc = {"malloc", "calloc", "realloc", "reallocarray", "strdup", "strndup", "asprintf", "vasprintf",
                  "open_memstream", "aligned_alloc", "posix_memalign"}
    for name, syms in sorted(uses.items()):
        for s in sorted(syms & libc_alloc):
            if name != "arena":
                failures.append("%s.o calls %s: allocate through arena.c (mem_alloc, mem_grow, arena_alloc, ...)"
                                % (name, s))
    for f in failures:
        print("FAIL", f)
    print("%d stage objects checked; largest dependency circle without ops.o: %d files (%s); %d family opcodes kept "
          "out of the stages; %d sources see ops.h: %d problems" % (
              len(STAGES), biggest, ", ".join("/".join(c) for c in comps) or "none", len(family_ops), nseeing,
              len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
