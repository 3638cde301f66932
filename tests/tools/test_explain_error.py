#!/usr/bin/env python3
"""shdc explain-error CODE (issue 17, item 4).

- Every code of docs/typing-rules.md and every code `shdc explain-error`
  lists (the W_ warnings too: their example warns, exit 0) has an entry: the title, the help text, a program with the error,
  the diagnostics `shdc check` gives it and the program fixed. The example
  and the fix are taken from the output and checked here, independently:
  `shdc check example.shd` exits 1 reporting that code and no other, with
  exactly the diagnostics the entry shows; the fix exits 0.
- The code may be written E_CONTRACT, e_contract, CONTRACT or
  [E_CONTRACT]; an unknown code is exit 2 with a suggestion; no code lists
  them all; `--all` is docs/errors.md exactly (the page is current).
- `shdc --help` names the command, and every plain diagnostic ends (after
  its notes) with the line naming `shdc explain-error` and its code.
- SARIF rules link their section of errors.md in the docs beside shdc
  (helpUri), whose anchor is in the page.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

DIAG = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): error: .* \[(?P<code>E_[A-Z]+)\]$", re.M)
WDIAG = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): warning: .* \[(?P<code>W_[A-Z_]+)\]$", re.M)


def section(text, start, end):
    """The 4-space indented block between the line `start` and `end`."""
    i = text.index(start) + len(start)
    j = text.index(end, i)
    lines = text[i:j].strip("\n").split("\n")
    return "".join((l[4:] if l.startswith("    ") else l) + "\n" for l in lines)


def main():
    shdc = testlib.shdc_option()
    failures = []
    listing = subprocess.run([shdc, "explain-error"], capture_output=True, text=True)
    listed = re.findall(r"^  ([EW]_[A-Z_]+) ", listing.stdout, re.M)
    with open(os.path.join(ROOT, "docs", "typing-rules.md")) as f:
        documented = set(re.findall(r"\b(E_[A-Z]+)\b", f.read())) - {"E_CODE"}
    if listing.returncode or len(listed) < 30 or not documented <= set(listed):
        failures.append("shdc explain-error lists %s; typing-rules.md has %s" % (listed, sorted(documented)))
    with tempfile.TemporaryDirectory() as d:
        for code in sorted(set(listed) | documented):
            p = subprocess.run([shdc, "explain-error", code], capture_output=True, text=True)
            out = p.stdout
            if p.returncode or not out.startswith(code + ": "):
                failures.append("%s: exit %d\n%s%s" % (code, p.returncode, out, p.stderr))
                continue
            try:
                flags = re.search(r"^`shdc check (.*?)example\.shd` says", out, re.M).group(1).split()
                warning = code.startswith("W_")   # a warning's example checks with exit 0
                example = section(out, "A program with the %s:\n" % ("warning" if warning else "error"),
                                  "`shdc check ")
                said = section(out, "says (exit status %d):\n" % (0 if warning else 1), "The program fixed")
                fixed = section(out, "The program fixed (it checks clean):\n", "The same, with the other codes")
            except (ValueError, AttributeError):
                failures.append("%s: the entry does not have its parts:\n%s" % (code, out))
                continue
            with open(os.path.join(d, "example.shd"), "w") as f:
                f.write(example)
            c = subprocess.run([shdc, "check"] + flags + ["example.shd"], capture_output=True, text=True, cwd=d)
            codes = [m.group("code") for m in (WDIAG if warning else DIAG).finditer(c.stderr)]
            if c.returncode != (0 if warning else 1) or not codes or set(codes) != {code}:
                failures.append("%s: its example gives exit %d and codes %s:\n%s" % (code, c.returncode, codes,
                                                                                    c.stderr))
            if c.stderr != said:
                failures.append("%s: the entry shows\n%s\nbut shdc check says\n%s" % (code, said, c.stderr))
            with open(os.path.join(d, "example.shd"), "w") as f:
                f.write(fixed)
            c = subprocess.run([shdc, "check"] + flags + ["example.shd"], capture_output=True, text=True, cwd=d)
            if c.returncode != 0 or c.stderr:
                failures.append("%s: its fix does not check clean (exit %d):\n%s" % (code, c.returncode, c.stderr))
        # the ways to write a code, and a wrong one
        want = subprocess.run([shdc, "explain-error", "E_CONTRACT"], capture_output=True, text=True).stdout
        for alias in ("e_contract", "CONTRACT", "[E_CONTRACT]"):
            if subprocess.run([shdc, "explain-error", alias], capture_output=True, text=True).stdout != want:
                failures.append("shdc explain-error %s is not E_CONTRACT's entry" % alias)
        # the nearest code by edit distance, a transposition one edit (issue 28 P3: E_SHAPEX once
        # suggested E_RESHAPE, two edits away, over E_SHAPE, one)
        for typed, near in (("E_CONTRCT", "E_CONTRACT"), ("E_SHAPEX", "E_SHAPE"), ("E_SAHPE", "E_SHAPE"),
                            ("shapex", "E_SHAPE"), ("[E_GARD]", "E_GRAD"), ("E_RESHAPX", "E_RESHAPE")):
            p = subprocess.run([shdc, "explain-error", typed], capture_output=True, text=True)
            if p.returncode != 2 or "did you mean %s?" % near not in p.stderr:
                failures.append("unknown code %s: exit %d %r, expected 'did you mean %s?'"
                                % (typed, p.returncode, p.stderr, near))
        p = subprocess.run([shdc, "explain-error", "--all"], capture_output=True, text=True)
        with open(os.path.join(ROOT, "docs", "errors.md")) as f:
            page = f.read()
        if p.returncode or p.stdout != page:
            failures.append("docs/errors.md is not the output of shdc explain-error --all (run it to update the page)")
        # --help, and the last line of each plain diagnostic (after its notes)
        h = subprocess.run([shdc, "--help"], capture_output=True, text=True).stdout
        if not re.search(r"^  explain-error \[CODE\]", h, re.M) or "shdc explain-error E_CONTRACT explains it" not in h:
            failures.append("shdc --help does not name explain-error:\n%s" % h)
        prog = os.path.join(d, "two.shd")
        with open(prog, "w") as f:
            f.write("mesh {X: 2}\nfn f(a: f32) -> f32 { return a }\nfn f(a: f32) -> f32 { return a }\n"
                    "fn main() {\n    let x: f32[6@X, 4@X] = zeros()\n}\n")
        c = subprocess.run([shdc, "check", prog], capture_output=True, text=True)
        blocks = re.split(r"(?m)^(?=\S+:\d+:\d+: error: )", c.stderr)[1:]
        if len(blocks) < 2:
            failures.append("two.shd: expected several errors:\n%s" % c.stderr)
        for b in blocks:
            code = re.search(r"\[(E_[A-Z]+)\]\n", b).group(1)
            last = b.rstrip("\n").split("\n")[-1]
            if last != "  = help: shdc explain-error %s (the rule, an example, the fix)" % code:
                failures.append("the diagnostic's last line is %r, expected the explain-error hint:\n%s" % (last, b))
        if not any("note:" in b for b in blocks):
            failures.append("two.shd: expected a note (the first definition):\n%s" % c.stderr)
        # SARIF: helpUri to the page, at the code's anchor
        p = subprocess.run([shdc, "check", "--diagnostics=sarif", prog], capture_output=True, text=True)
        rules = json.loads(p.stdout)["runs"][0]["tool"]["driver"]["rules"]
        for r in rules:
            uri = r.get("helpUri", "")
            m = re.match(r"file://(/\S+/errors\.md)#([ew]_[a-z_]+)$", uri)
            if not m or not os.path.isfile(m.group(1)) or '<a id="%s"></a>' % m.group(2) not in open(m.group(1)).read() \
                    or m.group(2) != r["id"].lower():
                failures.append("SARIF rule %s: helpUri %r" % (r["id"], uri))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("explain-error: %d codes, each example gives its code and its fix checks; docs/errors.md is current; "
          "hints and helpUri" % len(listed))


if __name__ == "__main__":
    main()
