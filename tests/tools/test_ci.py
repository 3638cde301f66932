#!/usr/bin/env python3
"""The CI pieces of docs/ci.md: the GitHub workflow (tools/ci/) parses as YAML,
runs `shdc check --diagnostics=sarif -o FILE`, uploads that file and adds the
problem matcher it ships; docs/ci.md shows both files as they are; the
problem matcher's pattern, applied to the plain diagnostics of every error
test program, finds exactly the errors the JSON format reports (file, line,
column, code, message); and the SARIF log's paths, resolved against its
%SRCROOT%, are the checked files."""
import json
import os
import re
import subprocess
import sys
import tempfile
from urllib.parse import unquote, urlparse

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
CI = os.path.join(ROOT, "tools", "ci")


def code_blocks(md, lang):
    return re.findall(r"^```%s\n(.*?)^```" % lang, md, re.S | re.M)


def main():
    shdc = testlib.shdc_option()
    failures = []
    with open(os.path.join(ROOT, "docs", "ci.md")) as f:
        doc = f.read()
    with open(os.path.join(CI, "github-workflow.yml")) as f:
        wf_text = f.read()
    with open(os.path.join(CI, "shdc-problem-matcher.json")) as f:
        matcher_text = f.read()
    body = "".join(l for l in wf_text.splitlines(True) if not l.startswith("#"))
    if body not in code_blocks(doc, "yaml"):
        failures.append("docs/ci.md does not show tools/ci/github-workflow.yml as it is")
    if matcher_text not in code_blocks(doc, "json"):
        failures.append("docs/ci.md does not show tools/ci/shdc-problem-matcher.json as it is")

    wf = yaml.safe_load(wf_text)
    steps = wf["jobs"]["check"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    upload = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    m = re.search(r"shdc check --diagnostics=sarif -o (\S+)", runs)
    if not m or not upload or upload[0]["with"]["sarif_file"] != m.group(1):
        failures.append("the workflow does not upload the SARIF log shdc check writes")
    if wf["permissions"].get("security-events") != "write":
        failures.append("the workflow cannot upload to code scanning (permissions)")
    am = re.search(r"::add-matcher::shdc/([^\s\"]+)", runs)
    if not am or not os.path.exists(os.path.join(ROOT, am.group(1))):
        failures.append("the workflow's problem matcher is not tools/ci/shdc-problem-matcher.json")

    pattern = json.loads(matcher_text)["problemMatcher"][0]["pattern"][0]
    rx = re.compile(pattern["regexp"])
    progs = testlib.error_programs()
    total = 0
    for prog in progs:
        plain = subprocess.run([shdc, "check", prog], capture_output=True, text=True, cwd=ROOT).stderr
        found = set()
        for line in plain.split("\n"):
            mm = rx.match(line)
            if mm:
                found.add((mm.group(pattern["file"]), int(mm.group(pattern["line"])), int(mm.group(pattern["column"])),
                           mm.group(pattern["code"]), mm.group(pattern["message"]), mm.group(pattern["severity"])))
        js = json.loads(subprocess.run([shdc, "check", "--diagnostics=json", prog], capture_output=True, text=True,
                                       cwd=ROOT).stdout)
        want = {(d["file"], d["line"], d["column"], d["code"], d["message"], d["severity"]) for d in js if d["line"]}
        total += len(want)
        if found != want:
            failures.append("%s: the problem matcher finds %s\n  the JSON diagnostics are %s" % (
                prog, sorted(found - want), sorted(want - found)))

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "shdc.sarif")
        subprocess.run([shdc, "check", "--diagnostics=sarif", "-o", log] + progs, cwd=ROOT)
        with open(log) as f:
            run = json.load(f)["runs"][0]
        base = urlparse(run["originalUriBaseIds"]["%SRCROOT%"]["uri"])
        for a in run["artifacts"]:
            loc = a["location"]
            path = os.path.join(unquote(base.path), unquote(loc["uri"])) if loc.get("uriBaseId") else \
                unquote(urlparse(loc["uri"]).path)
            if not os.path.isfile(path):
                failures.append("SARIF artifact %s does not resolve to a file (%s)" % (loc, path))
        if len(run["artifacts"]) != len(progs):
            failures.append("SARIF names %d files for %d programs" % (len(run["artifacts"]), len(progs)))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("workflow and problem matcher as documented; the matcher finds all %d errors of %d programs" % (
        total, len(progs)))


if __name__ == "__main__":
    main()
