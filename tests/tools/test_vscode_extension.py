#!/usr/bin/env python3
"""The VS Code extension starts the language server (issue 17, item 5).

editors/vscode/extension.js is loaded by node with stand-ins for the
modules VS Code provides (tests/tools/vscode_ext.js) and activated as VS
Code does for a .shd file: it creates one LanguageClient for the language
shd whose server is `shdc lsp` over stdio (`shdc` from PATH by default,
the setting shd.server.path otherwise, with -I DIR for each directory of
the setting shd.importPaths) and starts it; deactivate stops it.
The command it was given, run with the tested shdc, answers initialize
(text sync, hover, definition, symbols, code actions) and shutdown, and
exits 0. package.json names the script, its activation on the language and
the vscode-languageclient it needs, and make install ships the script.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

EXT = os.path.join(ROOT, "editors", "vscode")


def main():
    shdc = testlib.shdc_option()
    failures = []
    with open(os.path.join(EXT, "package.json")) as f:
        pkg = json.load(f)
    if pkg.get("main") != "./extension.js" or "onLanguage:shd" not in pkg.get("activationEvents", []) or \
            "vscode-languageclient" not in pkg.get("dependencies", {}) or \
            pkg["contributes"]["configuration"]["properties"]["shd.server.path"]["default"] != "shdc":
        failures.append("package.json: main %s, activation %s, dependencies %s" % (
            pkg.get("main"), pkg.get("activationEvents"), pkg.get("dependencies")))
    with open(os.path.join(ROOT, "Makefile")) as f:
        if not re.search(r"^VSCODE\s*:=.*\bextension\.js\b", f.read(), re.M):
            failures.append("make install does not ship editors/vscode/extension.js")
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "tools", "vscode_ext.js"), EXT, shdc],
                       capture_output=True, text=True, timeout=120)
    if p.returncode:
        sys.exit("node vscode_ext.js failed:\n%s%s" % (p.stdout, p.stderr))
    log = json.loads(p.stdout)
    first, second = log["clients"]
    want = {"command": "shdc", "args": ["lsp"], "transport": 0}
    if first["serverOptions"]["run"] != want or not first["started"] or not first["stopped"]:
        failures.append("the client with the default setting: %s" % first)
    if {"scheme": "file", "language": "shd"} not in first["clientOptions"]["documentSelector"] or first["id"] != "shd":
        failures.append("the client's documents: %s" % first["clientOptions"])
    if second["serverOptions"]["run"]["command"] != shdc or second["serverOptions"]["run"]["args"] != \
            ["lsp", "-I", EXT] or not second["started"] or not second["stopped"] or log["subscriptions"] < 1:
        failures.append("with shd.server.path: %s (subscriptions %d)" % (second, log["subscriptions"]))
    out = log["server"]["stdout"]
    caps = re.search(r'"capabilities":\{[^{]*"textDocumentSync":\{[^{}]*(\{[^{}]*\}[^{}]*)*\}[^}]*"hoverProvider":true',
                     out)
    if log["server"]["status"] != 0 or not caps or '"id":2,"result":null' not in out.replace(" ", ""):
        failures.append("the server the extension starts: %s" % log["server"])
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("the VS Code extension starts `shdc lsp` (default and configured path, import paths), and that server answers")


if __name__ == "__main__":
    main()
