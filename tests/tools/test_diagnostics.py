#!/usr/bin/env python3
"""--diagnostics=json and --diagnostics=sarif on every error test program.

- json: one object per error, the same errors (place, code, message) as the
  plain format, each with its range and notes;
- every fix: applied to the program alone, the error it fixes is gone from
  its line and the program has no more errors than before (an error the
  fixed one hid, later in the same expression, may now show);
- sarif: Microsoft's SARIF validator (build/npm, tools/install-npm) reports
  no error or warning on the log of all the programs together; rules are the
  E_ codes with help, every code the compiler can report has a rule, and the
  SARIF fixes are the JSON fixes;
- a failed write is exit status 2, never success; check -o FILE writes the
  document there.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402
PLAIN = re.compile(r"^(\S+?):(\d+):(\d+): error: (.*) \[(E_[A-Z]+)\]$", re.M)


def shdc(exe, args, **kw):
    return subprocess.run([exe] + args, capture_output=True, text=True, timeout=120, cwd=ROOT, **kw)


def check_json(exe, prog, failures):
    plain = shdc(exe, ["check", prog])
    p = shdc(exe, ["check", "--diagnostics=json", prog])
    if p.returncode != plain.returncode:
        failures.append("%s: exit %d with json, %d plain" % (prog, p.returncode, plain.returncode))
    if p.stderr:
        failures.append("%s: json mode printed on stderr:\n%s" % (prog, p.stderr))
    try:
        diags = json.loads(p.stdout)
    except ValueError as e:
        failures.append("%s: not JSON (%s):\n%s" % (prog, e, p.stdout[:500]))
        return []
    want = sorted((int(m[1]), int(m[2]), m[4], m[3]) for m in PLAIN.findall(plain.stderr))
    got = sorted((d["line"] or 0, d["column"] or 0, d["code"], d["message"]) for d in diags)
    if got != want:
        failures.append("%s: json diagnostics differ from plain:\n  json  %s\n  plain %s" % (prog, got, want))
    for d in diags:
        keys = {"file", "line", "column", "endLine", "endColumn", "severity", "code", "message", "notes", "fixes"}
        if set(d) != keys or d["file"] != prog or d["severity"] != "error":
            failures.append("%s: malformed diagnostic %s" % (prog, d))
        elif d["line"] and not d["endColumn"] >= d["column"]:
            failures.append("%s:%d: end column %d before column %d" % (prog, d["line"], d["endColumn"], d["column"]))
    return diags


def apply_fix(text, fix):
    lines = text.split("\n")

    def offset(line, col):
        return sum(len(l) + 1 for l in lines[:line - 1]) + col - 1
    a, b = offset(fix["line"], fix["column"]), offset(fix["endLine"], fix["endColumn"])
    return text[:a] + fix["replacement"] + text[b:]


def check_fixes(exe, prog, diags, failures, tmp):
    with open(os.path.join(ROOT, prog)) as f:
        text = f.read()
    count = 0
    for d in diags:
        for fix in d["fixes"]:
            count += 1
            new = apply_fix(text, fix)
            if new == text:
                failures.append("%s:%d: fix %r changes nothing" % (prog, d["line"], fix))
                continue
            path = os.path.join(tmp, os.path.basename(prog))
            with open(path, "w") as f:
                f.write(new)
            p = shdc(exe, ["check", "--diagnostics=json", path])
            after = json.loads(p.stdout)
            shift = fix["replacement"].count("\n") - (fix["endLine"] - fix["line"])
            line = d["line"] + (shift if d["line"] > fix["line"] else 0)
            still = [a for a in after if a["line"] == line and a["code"] == d["code"]]
            # The error is gone and no error was added (one the fixed error
            # hid, further along the same expression, may now show).
            if still or len(after) > len(diags):
                failures.append("%s:%d: the fix %r (%s) leaves %s (%d errors, %d before)" % (
                    prog, d["line"], fix["replacement"], fix["description"],
                    [a["message"] for a in still], len(after), len(diags)))
    return count


def validator(exe):
    build = os.path.dirname(os.path.abspath(exe))
    tool = os.path.join(build, "npm", "node_modules", "@microsoft", "sarif-multitool-linux", "Sarif.Multitool")
    if not os.access(tool, os.X_OK):
        sys.exit("the SARIF validator is not installed at %s: run make test (it runs tools/install-npm)" % tool)
    return tool


def check_sarif(exe, progs, json_fixes, failures, tmp):
    log = os.path.join(tmp, "shdc.sarif")
    p = shdc(exe, ["check", "--diagnostics=sarif", "-o", log] + progs)
    if p.returncode != 1 or p.stdout or p.stderr:
        failures.append("check -o %s: exit %d, stdout %r, stderr %r" % (log, p.returncode, p.stdout, p.stderr))
    report = os.path.join(tmp, "validation.sarif")
    env = dict(os.environ, DOTNET_SYSTEM_GLOBALIZATION_INVARIANT="1")
    v = subprocess.run([validator(exe), "validate", "--output", report, "--level", "Error;Warning;Note",
                        log], capture_output=True, text=True, timeout=300, env=env)
    if v.returncode != 0 or not os.path.exists(report):
        failures.append("the SARIF validator failed (%d):\n%s%s" % (v.returncode, v.stdout, v.stderr))
        return
    with open(report) as f:
        results = [r for run in json.load(f)["runs"] for r in run.get("results", [])]
    # Errors and warnings fail; notes are the validator's style advice
    # (help URIs, embedded file contents, rule ids of the form ABC1234).
    for r in results:
        if r.get("level", "warning") in ("error", "warning"):
            failures.append("SARIF validator: %s %s: %s" % (r.get("level", "warning"), r.get("ruleId"),
                                                              r["message"].get("text", r["message"])))
    with open(log) as f:
        sarif = json.load(f)
    run = sarif["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    for r in run["tool"]["driver"]["rules"]:
        if not r["help"]["text"] or not r["shortDescription"]["text"]:
            failures.append("rule %s has no help" % r["id"])
    used = set()
    for src in glob.glob(os.path.join(ROOT, "compiler", "*.[cy]")) + glob.glob(os.path.join(ROOT, "compiler", "*.re")):
        with open(src) as f:
            used |= set(re.findall(r'"(E_[A-Z]+)"', f.read()))
    docs = ""
    for d in glob.glob(os.path.join(ROOT, "docs", "*.md")):
        with open(d) as f:
            docs += f.read()
    for code in sorted(used):
        if code not in rules:
            failures.append("%s is reported by the compiler but has no SARIF rule (compiler/diag_codes.c)" % code)
        if code not in docs:
            failures.append("%s is reported by the compiler but docs/ never mention it" % code)
    sarif_fixes = sum(len(r.get("fixes", [])) for r in run["results"])
    if sarif_fixes != json_fixes:
        failures.append("SARIF has %d fixes, JSON %d" % (sarif_fixes, json_fixes))
    for r in run["results"]:
        if r["ruleId"] not in rules or rules[r["ruleIndex"]] != r["ruleId"]:
            failures.append("result with rule %s/%s" % (r.get("ruleId"), r.get("ruleIndex")))
    return len(run["results"])


def check_io(exe, failures, tmp):
    bad = os.path.join("tests", "errors", "shapes.shd")
    for args in (["check", "--diagnostics=json", bad, "-o", os.path.join(tmp, "no", "such", "dir.json")],
                 ["check", "--diagnostics=xml", bad],
                 ["check", "-o", os.path.join(tmp, "x.json"), bad]):
        p = shdc(exe, args)
        if p.returncode != 2 or "error" not in p.stderr:
            failures.append("shdc %s: exit %d (expected 2 and a message)" % (" ".join(args), p.returncode))
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([exe, "check", "--diagnostics=sarif", bad], stdout=full, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT)
        if p.returncode != 2 or "cannot write" not in p.stderr:
            failures.append("a SARIF document written to /dev/full: exit %d, %r" % (p.returncode, p.stderr))
    p = shdc(exe, ["check", "--diagnostics=sarif", bad, os.path.join(tmp, "missing.shd")])
    log = json.loads(p.stdout)
    inv = log["runs"][0]["invocations"][0]
    if p.returncode != 2 or inv["executionSuccessful"] or "missing.shd" not in json.dumps(inv):
        failures.append("an unreadable file: exit %d, invocation %s" % (p.returncode, inv))
    p = shdc(exe, ["check", "--diagnostics=json", os.path.join("tests", "docs", "broadcast.shd")])
    if p.returncode != 0 or json.loads(p.stdout) != []:
        failures.append("a clean file: exit %d, %r" % (p.returncode, p.stdout))


def main():
    exe = testlib.shdc_option()
    failures = []
    progs = testlib.error_programs()
    nfix = ndiag = 0
    with tempfile.TemporaryDirectory() as tmp:
        for prog in progs:
            diags = check_json(exe, prog, failures)
            ndiag += len(diags)
            nfix += check_fixes(exe, prog, diags, failures, tmp)
        nres = check_sarif(exe, progs, nfix, failures, tmp)
        check_io(exe, failures, tmp)
    if nfix < 40:
        failures.append("only %d fixes in %d diagnostics" % (nfix, ndiag))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d programs, %d diagnostics (%s in SARIF, validated), %d fixes applied, each removes its error" % (
        len(progs), ndiag, nres, nfix))


if __name__ == "__main__":
    main()
