#!/usr/bin/env python3
"""Every operation the registry knows is named where a user or an editor looks
(issue 16, item 5). `shdc list-ops` prints each builtin (function, operator,
form) and IR operation with its family; this test checks that

- each function and form is in a table of docs/language.md or docs/manual.md,
  and each operator's spelling in one of docs/language.md;
- each builtin is named in its family's row of docs/architecture.md's table
  of families (operators and literals as written there: `-x`, `+`, `x[i]`);
- each unary function is in typing-rules.md's rule 1.2;
- each IR operation of a family has an OpDef.infer (its result types);
- each IR operation has a row of docs/spmd-ir.md's table, whose list of
  variants (`F: ...`, `K: ...`) is exactly the operation's, and every row
  there is an operation;
- both editor grammars (editors/vim, editors/vscode) highlight exactly the
  functions and forms: collectives (manual-only builtins) as collectives.

So a new operation without its docs or its highlighting fails here.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def table_rows(md):
    """Every row of every table of a markdown text, as its cells (escaped
    pipes inside code spans kept)."""
    rows = []
    for line in md.split("\n"):
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip().replace("\\|", "|") for c in cells])
    return rows


def code_spans(text):
    return re.findall(r"`([^`]+)`", text)


def words(text):
    return set(re.findall(r"[A-Za-z_]\w*", text))


def main():
    shdc = testlib.shdc_option()
    p = subprocess.run([shdc, "list-ops"], capture_output=True, text=True, timeout=60)
    if p.returncode:
        print("shdc list-ops: exit %d\n%s" % (p.returncode, p.stderr))
        sys.exit(1)
    builtins, ops, failures = [], {}, []
    for line in p.stdout.split("\n"):
        if not line or line.startswith("#"):
            continue
        f = line.split("\t")
        if f[0] == "builtin":
            builtins.append((f[1], f[2], f[3]))
        elif f[0] == "op":
            ops.setdefault(f[1], set()).update(v for v in f[3].split(",") if v != "-")
            if f[2] != "core" and f[4] != "infer":
                failures.append("the IR operation %s (%s) has no OpDef.infer" % (f[1], f[2]))
    calls = {n for n, fam, syn in builtins if syn in ("call", "form")}
    if len(builtins) < 80 or len(ops) < 60 or "exp" not in calls or "dot" not in ops:
        failures.append("shdc list-ops lists too little:\n" + p.stdout)

    # The docs' tables of builtins.
    lang_rows = table_rows(read("docs", "language.md"))
    manual_rows = table_rows(read("docs", "manual.md"))
    first = [r[0] for r in lang_rows + manual_rows if r]
    documented = set()
    for cell in first:
        for span in code_spans(cell):
            documented |= words(span)
    lang_ops = set()
    for r in lang_rows:
        for span in code_spans(r[0]) if r else []:
            lang_ops |= set(re.findall(r"[-+*/%<>=!&|@]+", span))
            if re.search(r"\w\[", span):
                lang_ops.add("x[...]")
            if span.startswith('"'):
                lang_ops.add('"..."')
    for name, fam, syn in builtins:
        if syn in ("call", "form"):
            if name not in documented:
                failures.append("%s (%s) is in no table of docs/language.md or docs/manual.md" % (name, fam))
        elif name not in lang_ops:
            failures.append("the operator %s (%s) is in no table of docs/language.md" % (name, fam))

    # docs/architecture.md: each family's row names its builtins.
    arch = {}
    for r in table_rows(read("docs", "architecture.md")):
        if len(r) == 3:
            for fam_file in re.findall(r"op_(\w+)\.c", r[1]):
                arch[fam_file] = arch.get(fam_file, "") + " " + r[2]
    for name, fam, syn in builtins:
        if fam == "core":
            continue
        row = arch.get(fam)
        if row is None:
            failures.append("docs/architecture.md has no row for the family of op_%s.c" % fam)
            continue
        tokens = set(t.strip(",") for s in code_spans(row) for t in s.split())
        if syn == "call":
            ok = name in words(row)
        elif syn == "unary":
            ok = name + "x" in tokens
        elif syn in ("index", "string"):
            ok = any(t.startswith("x[" if syn == "index" else '"') for t in tokens)
        else:
            ok = name in tokens
        if not ok:
            failures.append("docs/architecture.md's row for op_%s.c does not name %s" % (fam, name))

    # typing-rules.md 1.2 names every unary function.
    tr = read("docs", "typing-rules.md")
    rule12 = tr[tr.index("### 1.2"):tr.index("### 1.3")]
    for name, fam, syn in builtins:
        if fam == "unary" and syn == "call" and name not in words(" ".join(code_spans(rule12))):
            failures.append("typing-rules.md 1.2 does not name the unary function %s" % name)

    # docs/spmd-ir.md's table of operations and their variants.
    rows = {}
    for r in table_rows(read("docs", "spmd-ir.md")):
        if len(r) < 3 or r[0] == "opcode":
            continue
        for span in code_spans(r[0]):
            name, _, variant = span.partition(".")
            entry = rows.setdefault(name, set())
            if variant and variant not in ("F", "K"):
                entry.add(variant)
            m = re.search(r"\b[FK]: ([\w ]+)", r[2])
            if variant in ("F", "K") and m:
                entry.update(m.group(1).split())
    for name, variants in sorted(ops.items()):
        if name not in rows:
            failures.append("the IR operation %s has no row in docs/spmd-ir.md" % name)
        elif variants != rows[name] and (rows[name] or variants):
            failures.append("docs/spmd-ir.md gives %s the variants %s; it has %s" % (
                name, sorted(rows[name]), sorted(variants)))
    for name in sorted(set(rows) - set(ops)):
        failures.append("docs/spmd-ir.md has a row for %s, which is no IR operation" % name)

    # The editor grammars highlight exactly the functions and forms.
    collectives = {n for n, fam, syn in builtins if fam == "collective" and n != "reshard"}
    vim = read("editors", "vim", "syntax", "shd.vim")
    vim_b, vim_c = set(), set()
    for group, names in re.findall(r"^syn keyword (shdBuiltin|shdCollective) (.*)$", vim, re.M):
        (vim_b if group == "shdBuiltin" else vim_c).update(names.split())
    for group, name in re.findall(r'^syn match\s+(shdBuiltin|shdCollective)\s+"\\<(\w+)\\ze', vim, re.M):
        (vim_b if group == "shdBuiltin" else vim_c).add(name)
    tm = json.loads(read("editors", "vscode", "syntaxes", "shd.tmLanguage.json"))
    tm_b, tm_c = set(), set()
    for pat in tm["repository"]["builtin"]["patterns"]:
        m = re.match(r"^\\b\(([\w|]+)\)", pat["match"])
        if m and pat["name"] == "support.function.builtin.shd":
            tm_b |= set(m.group(1).split("|"))
        elif m and pat["name"] == "support.function.collective.shd":
            tm_c |= set(m.group(1).split("|"))
    for what, b, c in (("editors/vim/syntax/shd.vim", vim_b, vim_c),
                       ("editors/vscode/syntaxes/shd.tmLanguage.json", tm_b, tm_c)):
        if c != collectives:
            failures.append("%s highlights the collectives %s; the builtins are %s" % (what, sorted(c),
                                                                                        sorted(collectives)))
        if b != calls - collectives:
            failures.append("%s highlights as builtins %s too many and misses %s" % (
                what, sorted(b - (calls - collectives)), sorted((calls - collectives) - b)))
    for f in failures:
        print("FAIL", f)
    print("%d builtins and %d IR operations against the docs and both editor grammars: %d problems" % (
        len(builtins), len(ops), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
