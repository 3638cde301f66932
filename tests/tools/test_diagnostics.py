#!/usr/bin/env python3
"""--diagnostics=json and --diagnostics=sarif on every error test program.

- json: one object per error or warning (severity "warning", a W_ code),
  the same ones (place, code, message) as the plain format, each with its
  range and notes;
- every fix: applied to the program alone, the error it fixes is gone from
  its line and the program has no more errors than before (an error the
  fixed one hid, later in the same expression, may now show);
- sarif: Microsoft's SARIF validator (build/npm, tools/install-npm) reports
  no error or warning on the log of all the programs together; rules are the
  E_ codes with help, every code the compiler can report has a rule, and the
  SARIF fixes are the JSON fixes;
- a failed write is exit status 2, never success; check -o FILE writes the
  document there;
- a source line with invalid UTF-8 in a string gives valid UTF-8 documents
  (each bad byte U+FFFD, columns counted alike) that the validator accepts.
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
PLAIN = re.compile(r"^(\S+?):(\d+):(\d+): (?:error|warning): (.*) \[([EW]_[A-Z_]+)\]$", re.M)


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
    ranged = 0
    for d in diags:
        keys = {"file", "line", "column", "endLine", "endColumn", "severity", "code", "message", "notes", "fixes"}
        severity = "warning" if (d.get("code") or "").startswith("W_") else "error"
        if set(d) - {"range"} != keys or d["file"] != prog or d["severity"] != severity:
            failures.append("%s: malformed diagnostic %s" % (prog, d))
        elif d["line"] and not d["endColumn"] >= d["column"]:
            failures.append("%s:%d: end column %d before column %d" % (prog, d["line"], d["endColumn"], d["column"]))
        elif "range" in d:
            # The expression the caret is in: it holds the caret's token.
            r = d["range"]
            ranged += 1
            if set(r) != {"line", "column", "endLine", "endColumn"} or \
                    (r["line"], r["column"]) > (d["line"], d["column"]) or \
                    (r["endLine"], r["endColumn"]) < (d["endLine"], d["endColumn"]):
                failures.append("%s:%d: range %s does not hold the caret's token (columns %d to %d)" % (
                    prog, d["line"], r, d["column"], d["endColumn"]))
    if diags and PLAIN.search(plain.stderr) and ranged == 0 and "E_CONTRACT" in plain.stderr:
        failures.append("%s: no diagnostic has the range of its expression" % prog)
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


BAD_UTF8 = [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\x80",
            b"\xf0\x80\x80\x80", b"\xe2\x82"]


def check_utf8(exe, failures, tmp):
    """A source line holding invalid UTF-8 (overlong forms, surrogates, past
    U+10FFFF, stray and cut bytes) inside strings: the JSON and SARIF
    documents are valid UTF-8 (each bad byte one U+FFFD), SARIF's columns
    count those as the code points the snippet holds, and the validator
    accepts the log."""
    prog = os.path.join(tmp, "utf8.shd")
    head = b"mesh {X: 2}\nfn main() {\n"
    lines = [b'    print("' + bad + b'\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", zzz%d)\n' % i
             for i, bad in enumerate(BAD_UTF8)]
    with open(prog, "wb") as f:
        f.write(head + b"".join(lines) + b"}\n")
    for fmt in ("json", "sarif"):
        p = subprocess.run([exe, "check", "--diagnostics=" + fmt, prog], capture_output=True, timeout=120)
        try:
            doc = json.loads(p.stdout.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            failures.append("--diagnostics=%s of a line with invalid UTF-8: not valid UTF-8 JSON (%s)" % (fmt, e))
            continue
        if p.returncode != 1:
            failures.append("--diagnostics=%s of utf8.shd: exit %d" % (fmt, p.returncode))
        if fmt == "sarif":
            results = doc["runs"][0]["results"]
            if len(results) != len(BAD_UTF8):
                failures.append("SARIF of utf8.shd: %d results, expected %d" % (len(results), len(BAD_UTF8)))
            for i, r in enumerate(results):
                loc = r["locations"][0]["physicalLocation"]
                line = loc["contextRegion"]["snippet"]["text"]
                want = lines[i].decode("utf-8", "replace").rstrip("\n")
                col = loc["region"]["startColumn"]
                if line != want or line[col - 1:col + 3] != "zzz%d" % i:
                    failures.append("SARIF of utf8.shd line %d: context %r (expected %r), column %d points at %r" % (
                        i + 3, line, want, col, line[col - 1:col + 3]))
            log = os.path.join(tmp, "utf8.sarif")
            with open(log, "wb") as f:
                f.write(p.stdout)
            report = os.path.join(tmp, "utf8-validation.sarif")
            v = subprocess.run([validator(exe), "validate", "--output", report, "--level", "Error;Warning", log],
                               capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, DOTNET_SYSTEM_GLOBALIZATION_INVARIANT="1"))
            bad = [r for run in json.load(open(report))["runs"] for r in run.get("results", [])
                   if r.get("level", "warning") in ("error", "warning")] if os.path.exists(report) else None
            if v.returncode != 0 or bad:
                failures.append("the SARIF validator on utf8.shd's log: exit %d, %r\n%s" % (v.returncode, bad, v.stdout))


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
        check_utf8(exe, failures, tmp)
    if nfix < 40:
        failures.append("only %d fixes in %d diagnostics" % (nfix, ndiag))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d programs, %d diagnostics (%s in SARIF, validated), %d fixes applied, each removes its error" % (
        len(progs), ndiag, nres, nfix))


if __name__ == "__main__":
    main()
