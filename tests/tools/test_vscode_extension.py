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

The .vsix that `make vsix` packs (build/shd-VERSION.vsix, issue 27, item
7) is one VS Code can install: its manifest names the extension, version,
publisher and engine of package.json and a license that is the
repository's MIT LICENSE; it holds the files .vscodeignore keeps and no
others, and vscode-languageclient with every package it needs, at the
versions package-lock.json pins; its extension.js, unpacked, starts the
server as the checkout's does, and the language client resolves from its
node_modules.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

EXT = os.path.join(ROOT, "editors", "vscode")


def check_extension(ext, shdc, failures):
    """extension.js in EXT activated with stand-ins, and the server it starts."""
    where = "" if ext == EXT else " (%s)" % ext
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "tools", "vscode_ext.js"), ext, shdc],
                       capture_output=True, text=True, timeout=120)
    if p.returncode:
        failures.append("node vscode_ext.js%s failed:\n%s%s" % (where, p.stdout, p.stderr))
        return
    log = json.loads(p.stdout)
    first, second = log["clients"]
    want = {"command": "shdc", "args": ["lsp"], "transport": 0}
    if first["serverOptions"]["run"] != want or not first["started"] or not first["stopped"]:
        failures.append("the client with the default setting%s: %s" % (where, first))
    if {"scheme": "file", "language": "shd"} not in first["clientOptions"]["documentSelector"] or first["id"] != "shd":
        failures.append("the client's documents: %s" % first["clientOptions"])
    if second["serverOptions"]["run"]["command"] != shdc or second["serverOptions"]["run"]["args"] != \
            ["lsp", "-I", ext] or not second["started"] or not second["stopped"] or log["subscriptions"] < 1:
        failures.append("with shd.server.path%s: %s (subscriptions %d)" % (where, second, log["subscriptions"]))
    out = log["server"]["stdout"]
    caps = re.search(r'"capabilities":\{[^{]*"textDocumentSync":\{[^{}]*(\{[^{}]*\}[^{}]*)*\}[^}]*"hoverProvider":true',
                     out)
    if log["server"]["status"] != 0 or not caps or '"id":2,"result":null' not in out.replace(" ", ""):
        failures.append("the server the extension starts: %s" % log["server"])


def find_vsix(shdc, version):
    """build/shd-VERSION.vsix beside the shdc under test (or its parent
    build directory's, for build/san/shdc)."""
    d = os.path.dirname(os.path.abspath(shdc))
    for b in (d, os.path.dirname(d)):
        v = os.path.join(b, "shd-%s.vsix" % version)
        if os.path.isfile(v):
            return v
    return None


def dependency_closure(lock):
    """{node_modules/NAME: version} of the packages the extension needs at run time."""
    pkgs = lock["packages"]
    need, todo = {}, list(pkgs[""].get("dependencies", {}))
    while todo:
        key = "node_modules/" + todo.pop()
        if key in need or key not in pkgs:
            continue
        need[key] = pkgs[key]["version"]
        todo += list(pkgs[key].get("dependencies", {}))
    return need


def check_vsix(shdc, pkg, failures):
    vsix = find_vsix(shdc, pkg["version"])
    if vsix is None:
        failures.append("no build/shd-%s.vsix beside %s: run make vsix" % (pkg["version"], shdc))
        return
    with zipfile.ZipFile(vsix) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        ns = {"v": "http://schemas.microsoft.com/developer/vsx-schema/2011"}
        meta = ET.fromstring(z.read("extension.vsixmanifest")).find("v:Metadata", ns)
        ident = meta.find("v:Identity", ns).attrib
        engine = meta.find("v:Properties/v:Property[@Id='Microsoft.VisualStudio.Code.Engine']", ns)
        if (ident.get("Id"), ident.get("Version"), ident.get("Publisher")) != (pkg["name"], pkg["version"],
                                                                               pkg["publisher"]) or \
                engine is None or engine.get("Value") != pkg["engines"]["vscode"]:
            failures.append("%s: the manifest's identity %s and engine %s are not package.json's" % (
                vsix, ident, engine is not None and engine.attrib))
        lic = meta.findtext("v:License", namespaces=ns)
        with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
            repo_license = f.read()
        if pkg.get("license") != "MIT" or not repo_license.startswith(b"MIT License") or lic not in names or \
                z.read(lic) != repo_license:
            failures.append("%s: license %s in package.json, %s in the manifest: not the repository's MIT LICENSE" % (
                vsix, pkg.get("license"), lic))
        with open(os.path.join(EXT, ".vscodeignore")) as f:
            keep = {"extension/" + l.strip()[1:] for l in f if l.strip().startswith("!")} - {"extension/node_modules/**"}
        own = {n for n in names if not n.startswith("extension/node_modules/")} - {"extension.vsixmanifest",
                                                                                 "[Content_Types].xml"}
        if own != keep:
            failures.append("%s: holds %s beside node_modules; .vscodeignore keeps %s" % (
                vsix, sorted(own), sorted(keep)))
        with open(os.path.join(EXT, "package-lock.json")) as f:
            need = dependency_closure(json.load(f))
        if "node_modules/vscode-languageclient" not in need:
            failures.append("package-lock.json does not pin vscode-languageclient")
        for key, version in sorted(need.items()):
            m = "extension/%s/package.json" % key
            got = json.loads(z.read(m)).get("version") if m in names else None
            if got != version:
                failures.append("%s: %s is %s, package-lock.json pins %s" % (vsix, key, got, version))
        z.extractall(tmp)
        ext = os.path.join(tmp, "extension")
        p = subprocess.run(["node", "-e", "console.log(require.resolve('vscode-languageclient/node', {paths: [process.argv[1]]}))",
                            ext], capture_output=True, text=True, timeout=60)
        if p.returncode or not p.stdout.startswith(os.path.join(ext, "node_modules")):
            failures.append("the unpacked %s: vscode-languageclient/node does not resolve in it: %s%s" % (
                vsix, p.stdout, p.stderr))
        check_extension(ext, shdc, failures)


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
    check_extension(EXT, shdc, failures)
    check_vsix(shdc, pkg, failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("the VS Code extension starts `shdc lsp` (default and configured path, import paths), and that server "
          "answers; so does the packed .vsix, which holds its files, its license and its pinned language client")


if __name__ == "__main__":
    main()
