#!/usr/bin/env python3
"""The IR verifier re-infers every result's type from its operands (issue 16,
item 2): a small C program, linked with the compiler's own objects (those of
the shdc under test), builds IR by hand and runs ir_verify. With
SHDC_VERIFY=1 (as tests/run.py sets it) a result whose shape, dtype or
sharding its operation does not give from its operands stops the compiler
with an internal error naming the instruction, the declared type and the
inferred one; a correct module passes; without SHDC_VERIFY the types are
not checked (the structural checks still are). Every test program of the
suite runs through the same check, since tests/run.py sets SHDC_VERIFY=1.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

PROGRAM = r"""
#include "shdc.h"

/* argv[1] picks a case; each builds fn main(a: f32[8@X], b: f32[8@X]) on
 * the mesh {X: 2} and verifies it. */
int main(int argc, char **argv) {
  Mesh m = {1, {"X"}, {2}};
  Module *mod = ir_module(&m);
  int64_t s8[2] = {8, 4}, s4[1] = {4};
  Type a = ty_array(DT_F32, 1, s8);
  a.spec[0].n = 1;
  a.spec[0].axes[0] = 0;
  Type params[2] = {a, a};
  Func *f = ir_func(mod, "main", 2, params, 0, NULL);
  f->is_main = true;
  IrBlock *b = f->body;
  Pos pos = {0, 7, 1};
  const char *c = argc > 1 ? argv[1] : "ok";
  Type t = a;
  int op = IR_BINARY;
  if (!strcmp(c, "shape"))
    t = ty_array(DT_F32, 1, s4);
  else if (!strcmp(c, "dtype"))
    t.dtype = DT_F64;
  else if (!strcmp(c, "sharding"))
    t.spec[0].n = 0;
  else if (!strcmp(c, "unreduced"))
    t.U = 1;
  Value *args[2] = {b->args[0], b->args[1]};
  if (!strcmp(c, "reduce")) {       /* a sum over dim 0 declared as f32[8] */
    op = IR_REDUCE;
    t = ty_array(DT_F32, 1, s8);
  }
  Inst *in = ir_emit(mod, b, op, pos, op == IR_REDUCE ? 1 : 2, args, 1, &t);
  in->fn = op == IR_REDUCE ? RED_SUM : BIN_ADD;
  in->mask = 1;
  ir_emit(mod, b, IR_RETURN, pos, 0, NULL, 0, NULL);
  ir_verify(mod);
  printf("verified\n");
  return 0;
}
"""

# case: (SHDC_VERIFY, exit status, what stderr or stdout must match)
CASES = [
    ("ok", "1", 0, r"^verified$"),
    ("shape", "1", 2, r"at binary \(line 7\): result 0 has type f32\[4\], but its operands give f32\[8@X\]"),
    ("dtype", "1", 2, r"result 0 has type f64\[8@X\], but its operands give f32\[8@X\]"),
    ("sharding", "1", 2, r"result 0 has type f32\[8\], but its operands give f32\[8@X\]"),
    ("unreduced", "1", 2, r"result 0 has type f32\[8@X\]<U:X>, but its operands give f32\[8@X\]"),
    ("reduce", "1", 2, r"at reduce \(line 7\): result 0 has type f32\[8\], but its operands give f32"),
    ("shape", "0", 0, r"^verified$"),
]


def main():
    shdc = testlib.shdc_option()
    build = os.path.dirname(shdc)
    objs = [o for o in glob.glob(os.path.join(build, "compiler", "*.o")) if not o.endswith("/main.o")]
    objs += glob.glob(os.path.join(build, "gen", "*.o"))
    if not objs:
        print("no compiler objects beside %s: nothing to link the verifier with" % shdc)
        sys.exit(1)
    # A sanitizer build's objects link with the sanitizers, the coverage
    # build's (tools/san-coverage) with gcov's library too.
    san = subprocess.run(["nm", os.path.join(build, "compiler", "ir.o")], capture_output=True, text=True).stdout
    flags = (["-fsanitize=address,undefined"] if "__asan" in san else []) + (["--coverage"] if "__gcov" in san else [])
    failures = []
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "verify.c"), os.path.join(d, "verify")
        with open(src, "w") as f:
            f.write(PROGRAM)
        p = subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "compiler"),
                            "-I" + os.path.join(build, "gen"), "-o", exe, src] + sorted(objs) + flags + ["-ljansson", "-lm"],
                           capture_output=True, text=True)
        if p.returncode:
            print("cannot link the verifier test:\n" + p.stderr)
            sys.exit(1)
        for case, verify, rc, pattern in CASES:
            if verify == "0" and flags:
                continue   # the sanitizer build is compiled with -DSHDC_VERIFY: types are always checked
            env = dict(os.environ, SHDC_VERIFY=verify, ASAN_OPTIONS="detect_leaks=0")
            r = subprocess.run([exe, case], capture_output=True, text=True, env=env, timeout=60)
            if r.returncode != rc or not re.search(pattern, r.stdout + r.stderr, re.M):
                failures.append("%s (SHDC_VERIFY=%s): exit %d, expected %d and /%s/:\n%s%s" % (
                    case, verify, r.returncode, rc, pattern, r.stdout, r.stderr))
    for f in failures:
        print("FAIL", f)
    print("%d of %d verifier cases as expected" % (len(CASES) - len(failures), len(CASES)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
