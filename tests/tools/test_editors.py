#!/usr/bin/env python3
"""Editor support: tests/tools/editor_sample.shd tokenized with the TextMate
grammar (editors/vscode) as VS Code does it (vscode-textmate on
vscode-oniguruma, installed under build/npm by tools/install-npm), and
highlighted by Vim with editors/vim (ftdetect sets the filetype): keywords,
types with their sharding, U/R/V annotations, strings with escapes, comments,
numbers, builtins and collectives get their scopes / groups; nothing is
marked invalid; the VS Code package names the grammar it ships."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "tests", "tools", "editor_sample.shd")
GRAMMAR = os.path.join(ROOT, "editors", "vscode", "syntaxes", "shd.tmLanguage.json")

# (line, token text, n-th occurrence on the line, TextMate scope, Vim syntax item)
EXPECT = [
    (1, "//", 0, "comment.line.double-slash.shd", "shdComment"),
    (1, "sample", 0, "comment.line.double-slash.shd", "shdComment"),
    (3, "mesh", 0, "keyword.other.mesh.shd", "shdStructure"),
    (3, "data", 0, "variable.other.axis.shd", None),
    (5, "const", 0, "storage.type.declaration.shd", "shdStructure"),
    (7, "manual", 0, "storage.modifier.manual.shd", "shdManual"),
    (7, "fn", 0, "storage.type.function.shd", "shdFunctionKw"),
    (7, "colwise", 0, "entity.name.function.shd", "shdFuncName"),
    (7, "f32", 0, "storage.type.dtype.shd", "shdDtype"),
    (7, "@", 0, "keyword.operator.sharding.shd", "shdAt"),
    (7, "tp", 1, "variable.other.axis.shd", "shdAxis"),
    (8, "pcast", 0, "support.function.collective.shd", "shdCollective"),
    (9, "return", 0, "keyword.control.shd", "shdStatement"),
    (13, "let", 0, "storage.type.declaration.shd", "shdDeclaration"),
    (13, "data", 0, "variable.other.axis.shd", "shdAxis"),
    (13, "8", 0, "constant.numeric.integer.shd", "shdNumber"),
    (13, "normal", 0, "support.function.builtin.shd", "shdBuiltin"),
    (15, "(", 0, "punctuation.definition.axes.begin.shd", "shdShardAt"),
    (15, "data", 0, "variable.other.axis.shd", "shdAxis"),
    (15, "tp", 0, "variable.other.axis.shd", "shdAxis"),
    (16, "var", 0, "storage.type.declaration.shd", "shdDeclaration"),
    (16, "U", 0, "storage.modifier.annotation.shd", "shdAnnotKind"),
    (16, "data", 0, "variable.other.axis.shd", "shdAxis"),
    (16, ">", 0, "punctuation.definition.annotation.end.shd", "shdAnnot"),
    (16, "as", 0, "keyword.operator.as.shd", "shdOperatorKw"),
    (16, "U", 1, "storage.modifier.annotation.shd", "shdAnnotKind"),
    (18, "for", 0, "keyword.control.shd", "shdRepeat"),
    (18, "in", 0, "keyword.control.shd", "shdRepeat"),
    (19, "if", 0, "keyword.control.shd", "shdConditional"),
    (19, "0.5", 0, "constant.numeric.float.shd", "shdFloat"),
    (20, "step", 0, "string.quoted.double.shd", "shdString"),
    (20, "\\t", 0, "constant.character.escape.shd", "shdEscape"),
    (20, "\\\"", 0, "constant.character.escape.shd", "shdEscape"),
    (25, "1.5e3", 0, "constant.numeric.float.shd", "shdFloat"),
    (26, "metrics", 0, "support.function.builtin.shd", "shdBuiltin"),
    (27, "mkdir", 0, "support.function.builtin.shd", "shdBuiltin"),
    (28, "keep_last", 0, "support.function.builtin.shd", "shdBuiltin"),
    (29, "manifest", 0, "support.function.builtin.shd", "shdBuiltin"),
    (32, "struct", 0, "storage.type.struct.shd", "shdStructure"),
    (32, "f32", 0, "storage.type.dtype.shd", "shdDtype"),
    (32, "tp", 0, "variable.other.axis.shd", "shdAxis"),
    (33, "import", 0, "keyword.control.import.shd", "shdStructure"),
    (35, "remat", 0, "support.function.builtin.shd", "shdBuiltin"),
    (37, "bf16", 0, "storage.type.dtype.shd", "shdDtype"),
    (37, "tp", 0, "variable.other.axis.shd", "shdAxis"),
]


def textmate_tokens(build):
    modules = os.path.join(build, "npm", "node_modules")
    if not os.path.isdir(os.path.join(modules, "vscode-textmate")):
        sys.exit("vscode-textmate is not installed under %s: run make test (tools/install-npm)" % modules)
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "tools", "tokenize.js"), modules, GRAMMAR, SAMPLE],
                       capture_output=True, text=True, timeout=120)
    if p.returncode:
        sys.exit("tokenize.js failed:\n%s" % p.stderr)
    return json.loads(p.stdout)


def find(lines, line, text, nth):
    """Column (0-based) of the nth occurrence of text on a line."""
    at = -1
    for _ in range(nth + 1):
        at = lines[line - 1].find(text, at + 1)
        if at < 0:
            raise SystemExit("the sample's line %d has no %d-th %r" % (line, nth, text))
    return at


def check_textmate(build, lines, failures):
    tokens = textmate_tokens(build)
    starts = {}
    col = {}
    for t in tokens:
        c = col.get(t["line"], 0)
        starts[(t["line"], c)] = t
        col[t["line"]] = c + len(t["text"])
    for line, text, nth, scope, _ in EXPECT:
        c = find(lines, line, text, nth)
        covering = [t for (l, s), t in starts.items() if l == line and s <= c < s + len(t["text"])]
        if not covering or scope not in covering[0]["scopes"]:
            failures.append("TextMate: %r on line %d has scopes %s, expected %s" % (
                text, line, covering[0]["scopes"] if covering else None, scope))
    for t in tokens:
        if any("invalid" in s for s in t["scopes"]):
            failures.append("TextMate: %r on line %d is marked invalid: %s" % (t["text"], t["line"], t["scopes"]))
    types = [t for t in tokens if "meta.type.shd" in t["scopes"]]
    if len(types) < 30:
        failures.append("TextMate: only %d tokens inside types" % len(types))
    return len(tokens)


def check_vim(lines, failures):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "syn.txt")
        p = subprocess.run(["vim", "-Nu", "NONE", "-i", "NONE", "-n", "-es", "-c",
                            "set rtp^=" + os.path.join(ROOT, "editors", "vim"), "-c", "filetype on", "-c",
                            "syntax on", "-c", "edit " + SAMPLE, "-c",
                            "source " + os.path.join(ROOT, "tests", "tools", "vim_syntax.vim")],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, OUT=out))
        if p.returncode or not os.path.exists(out):
            failures.append("vim failed (%d): %s%s" % (p.returncode, p.stdout, p.stderr))
            return
        with open(out) as f:
            rows = f.read().split("\n")
    if rows[0] != "shd":
        failures.append("Vim: ftdetect gave filetype %r" % rows[0])
    item, group = {}, {}
    for r in rows[1:]:
        parts = r.split(" ")
        if len(parts) == 4:
            group[(int(parts[0]), int(parts[1]))] = parts[2]
            item[(int(parts[0]), int(parts[1]))] = parts[3]
    for line, text, nth, _, vim in EXPECT:
        if vim is None:
            continue
        c = find(lines, line, text, nth) + 1
        if item.get((line, c)) != vim or not group.get((line, c)):
            failures.append("Vim: %r on line %d is %r (highlighted %r), expected %s" % (
                text, line, item.get((line, c)), group.get((line, c)), vim))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shdc", default=os.path.join(ROOT, "build", "shdc"))
    build = os.path.dirname(os.path.abspath(ap.parse_args().shdc))
    with open(SAMPLE) as f:
        lines = f.read().split("\n")
    failures = []
    n = check_textmate(build, lines, failures)
    check_vim(lines, failures)
    with open(os.path.join(ROOT, "editors", "vscode", "package.json")) as f:
        pkg = json.load(f)
    g = pkg["contributes"]["grammars"][0]
    with open(os.path.join(ROOT, "editors", "vscode", g["path"])) as f:
        if json.load(f)["scopeName"] != g["scopeName"] or ".shd" not in pkg["contributes"]["languages"][0]["extensions"]:
            failures.append("editors/vscode/package.json does not match its grammar")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d TextMate tokens and the Vim groups of %d checked places as expected" % (n, len(EXPECT)))


if __name__ == "__main__":
    main()
