#!/usr/bin/env python3
"""shdc check's errors reach Vim and Neovim (issue 27, item 2).

Vim: editors/vim's ftplugin sets the filetype's comments (`// %s`) and the
compiler file, so `:make` runs `shdc check` on the file and its quickfix
list holds each error at its file, line and column with its message, type
e (the source lines, carets and help lines under it left out).

Neovim: the Lua recipe of docs/cli.md ("In Neovim"), taken from the doc as
it is, is the configuration of a headless Neovim (Debian 12's 0.7.2, which
has no vim.fs or vim.lsp.start): opening a .shd file starts `shdc lsp` and
the buffer gets the server's diagnostics, the same errors at the same
places as `shdc check --diagnostics=json` (an error's range: `a @ b`, not
only its `@`); a second .shd file in the directory shares the
server.
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

PROGRAM = """mesh {X: 2}
// two errors: an ambiguous contraction and an unknown name
fn main() {
    let a: f32[8@X] = zeros()
    let b = a @ a
    print(c)
}
"""

VIM_PROBE = r"""let s:out = [&filetype, &commentstring]
silent make
for s:e in getqflist()
  call add(s:out, bufname(s:e.bufnr) . '|' . s:e.lnum . '|' . s:e.col . '|' . s:e.type . '|' . s:e.text)
endfor
call writefile(s:out, $OUT)
qall!
"""

NVIM_PROBE = r"""local buf = vim.api.nvim_get_current_buf()
local ok = vim.wait(30000, function() return #vim.diagnostic.get(buf) >= 2 end, 50)
vim.cmd("edit " .. vim.fn.fnameescape(os.getenv("SECOND")))
local buf2 = vim.api.nvim_get_current_buf()
vim.wait(30000, function() return #vim.diagnostic.get(buf2) >= 1 end, 50)
local out = { vim.bo[buf].filetype, tostring(ok), tostring(#vim.lsp.get_active_clients()) }
for _, b in ipairs({ buf, buf2 }) do
  for _, d in ipairs(vim.diagnostic.get(b)) do
    table.insert(out, string.format("%d|%d|%d|%d|%s", b == buf and 1 or 2, d.lnum + 1, d.col + 1, d.severity, d.message))
  end
end
vim.fn.writefile(out, os.getenv("OUT"))
vim.cmd("qall!")
"""


def check_errors(shdc, path):
    """[(line, col, message without its [CODE])] of shdc check."""
    p = subprocess.run([shdc, "check", path], capture_output=True, text=True, timeout=60)
    errs = re.findall(r"^[^\n]*?:(\d+):(\d+): error: (.*?)(?: \[E_\w+\])?$", p.stderr, re.M)
    if p.returncode != 1 or len(errs) < 2:
        sys.exit("shdc check %s: rc %d, expected two errors:\n%s" % (path, p.returncode, p.stderr))
    return [(int(l), int(c), m) for l, c, m in errs]


def lsp_places(shdc, path):
    """[(line, col, message)] where an editor's LSP marks check's errors: the
    start of the expression an error is about (its JSON range), else the caret."""
    p = subprocess.run([shdc, "check", "--diagnostics=json", path], capture_output=True, text=True, timeout=60)
    out = []
    for d in json.loads(p.stdout):
        at = d.get("range") or d
        out.append((at["line"], at["column"], d["message"]))
    return out


def run_editor(argv, env, out, what, failures):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)
    if p.returncode or not os.path.exists(out):
        failures.append("%s failed (%d): %s%s" % (what, p.returncode, p.stdout, p.stderr))
        return None
    with open(out) as f:
        return f.read().split("\n")


def check_vim(src, env, tmp, want, failures):
    probe, out = os.path.join(tmp, "probe.vim"), os.path.join(tmp, "vim.out")
    with open(probe, "w") as f:
        f.write(VIM_PROBE)
    rows = run_editor(["vim", "-Nu", "NONE", "-i", "NONE", "-n", "-es", "-c",
                       "set rtp^=" + os.path.join(ROOT, "editors", "vim"), "-c", "filetype plugin on",
                       "-c", "edit " + src, "-c", "source " + probe], dict(env, OUT=out), out, "vim", failures)
    if rows is None:
        return
    if rows[:2] != ["shd", "// %s"]:
        failures.append("Vim: filetype %r, commentstring %r (expected shd, '// %%s')" % tuple(rows[:2]))
    got = [r.split("|", 4) for r in rows[2:] if r]
    expect = [[src, str(l), str(c), "e", m] for l, c, m in want]
    if [g[:4] + [re.sub(r" \[E_\w+\]$", "", g[4])] for g in got] != expect or \
            not all(re.search(r"\[E_\w+\]$", g[4]) for g in got):
        failures.append("Vim's quickfix list after :make:\n  %s\nexpected (with the codes):\n  %s" % (
            "\n  ".join("|".join(g) for g in got), "\n  ".join("|".join(e) for e in expect)))


def doc_recipe():
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        doc = f.read()
    m = re.search(r"In Neovim[^\n]*\n(?:[^\n]*\n)*?```lua\n(.*?)```", doc, re.S)
    if not m:
        sys.exit("docs/cli.md has no ```lua block after 'In Neovim'")
    return m.group(1)


def check_neovim(src, second, env, tmp, want, want2, failures):
    init, probe, out = (os.path.join(tmp, n) for n in ("init.lua", "probe.lua", "nvim.out"))
    with open(init, "w") as f:
        f.write(doc_recipe())
    with open(probe, "w") as f:
        f.write(NVIM_PROBE)
    rows = run_editor(["nvim", "--headless", "-i", "NONE", "-n", "-u", init, "--cmd",
                       "set rtp^=" + os.path.join(ROOT, "editors", "vim"), "-c", "luafile " + probe, src],
                      dict(env, OUT=out, SECOND=second, XDG_CONFIG_HOME=tmp, XDG_DATA_HOME=tmp,
                           XDG_STATE_HOME=tmp, XDG_CACHE_HOME=tmp), out, "nvim", failures)
    if rows is None:
        return
    if rows[:3] != ["shd", "true", "1"]:
        failures.append("Neovim with docs/cli.md's recipe: filetype %r, diagnostics arrived %r, %r language "
                        "servers for two files of one directory (expected shd, true, 1)" % tuple(rows[:3]))
    got = sorted(tuple(r.split("|", 4)) for r in rows[3:] if r)
    expect = sorted([("1", str(l), str(c), "1", m) for l, c, m in want] +
                    [("2", str(l), str(c), "1", m) for l, c, m in want2])
    if got != expect:
        failures.append("Neovim's diagnostics:\n  %s\nexpected shdc check's:\n  %s" % (
            "\n  ".join("|".join(g) for g in got), "\n  ".join("|".join(e) for e in expect)))


def main():
    shdc = testlib.shdc_option()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        src, second = os.path.join(tmp, "two_errors.shd"), os.path.join(tmp, "other.shd")
        with open(src, "w") as f:
            f.write(PROGRAM)
        with open(second, "w") as f:
            f.write(PROGRAM.replace("print(c)", "print(a)"))
        want = check_errors(shdc, src)
        env = dict(os.environ, PATH=os.path.dirname(shdc) + os.pathsep + os.environ.get("PATH", ""))
        check_vim(src, env, tmp, want, failures)
        check_neovim(src, second, env, tmp, lsp_places(shdc, src), lsp_places(shdc, second), failures)
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("Vim's :make lists shdc check's %d errors; Neovim with the documented recipe shows them from one "
          "`shdc lsp`" % len(want))


if __name__ == "__main__":
    main()
