/* diag_codes.c: the error and warning codes, with the help text of each.
 *
 * Every [E_CODE] or [W_CODE] a diagnostic can carry is listed here once (the
 * warnings last: their example checks with the warning and exit 0), with a short
 * description (typing-rules.md section D, manual.md, autodiff.md say the
 * same in more words), the help a user reading a SARIF report or an
 * editor tooltip needs (what the rule is and the usual fix), and a small
 * program with the error and the same program fixed, which `shdc
 * explain-error CODE` shows with the message the checker gives it.
 * SARIF's rule metadata (diag_json.c) and docs/errors.md come from this
 * table; tests/tools/test_diagnostics.py checks that every code the
 * compiler reports is here and in the docs, tests/tools/test_explain_error.py
 * that each example gives exactly its code and each fix checks clean.
 */
#include "shdc.h"

static const DiagCode codes[] = {
    {"E_SYNTAX", "Syntax", "the text does not parse",
     "The statement does not follow the grammar of docs/language.md. One error is reported per bad statement and "
     "the rest of the file is still checked. Statements end at a newline; an incomplete expression at the end of a "
     "line is the usual cause.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a = (1 + 2\n"
     "    print(a)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a = (1 + 2)\n"
     "    print(a)\n"
     "}\n", NULL},
    {"E_NAME", "Name", "unknown or duplicate name, function or mesh axis; recursion",
     "A name must be declared before it is used (let, var, const, fn, a parameter or a mesh axis) and declared once "
     "in its scope. Functions may not call themselves, directly or indirectly. When a close name exists the message "
     "suggests it.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let total = 3\n"
     "    print(totl)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let total = 3\n"
     "    print(total)\n"
     "}\n", NULL},
    {"E_MESH", "Mesh", "no mesh declaration, or an axis size below 1 or above 2^20",
     "A program declares its device mesh once, e.g. `mesh {data: 4, model: 2}`, with every axis size from 1 to 2^20. "
     "`shdc build --mesh data=2` overrides sizes at compile time.",
     // the example and its fix
     "mesh {data: 0}\n"
     "fn main() {\n"
     "    print(\"hello\")\n"
     "}\n",
     "mesh {data: 1}\n"
     "fn main() {\n"
     "    print(\"hello\")\n"
     "}\n", NULL},
    {"E_SHAPE", "Shape", "shapes that do not broadcast, contract, reshape or match an annotation; too large an array",
     "Elementwise operations follow NumPy broadcasting (sizes equal or 1, aligned from the end); contractions need "
     "equal contracting sizes; a reshape keeps the element count; an annotation must have the value's shape. An "
     "array may have at most 2^48 bytes (256 TiB).",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8, 4] = ones()\n"
     "    let b: f32[8, 3] = ones()\n"
     "    let c = a + b\n"
     "    print(c)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8, 4] = ones()\n"
     "    let b: f32[8, 4] = ones()\n"
     "    let c = a + b\n"
     "    print(c)\n"
     "}\n", NULL},
    {"E_CONST", "Constant without a value",
     "integer overflow in a constant expression, a division or remainder by zero, an i32 that does not fit",
     "Literals and constants fold at compile time, exactly: integers as 64-bit values, and one that becomes an i32 "
     "must lie in -2147483648..2147483647. An overflow, a division or remainder by zero, or an integer to a "
     "negative power has no value; use smaller constants, a float literal (1.0e30), or compute the value at run "
     "time, where i32 arithmetic wraps.",
     // the example and its fix
     "mesh {X: 2}\n"
     "const N = 8\n"
     "fn main() {\n"
     "    print(N / 0)\n"
     "}\n",
     "mesh {X: 2}\n"
     "const N = 8\n"
     "fn main() {\n"
     "    print(N / 2)\n"
     "}\n", NULL},
    {"E_DTYPE", "Dtype", "operands of different dtypes, bool arithmetic, a float function of an integer",
     "Operands of one operation share a dtype (literals adapt): bf16 and f32 do not mix either; bools have no "
     "arithmetic; conditions are bool scalars; a builtin without a bf16 kernel "
     "(dot_product_attention) computes in f32. Convert with cast(x, DTYPE).",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8] = ones()\n"
     "    let n: i32[8] = ones()\n"
     "    let c = a * n\n"
     "    print(c)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8] = ones()\n"
     "    let n: i32[8] = ones()\n"
     "    let c = a * cast(n, f32)\n"
     "    print(c)\n"
     "}\n", NULL},
    {"E_SPEC", "Spec", "a malformed type: an axis both sharding and unreduced/reduced, <V:..> in the global view",
     "A mesh axis is in one state per type: sharding one dim, unreduced (<U:..>), reduced (<R:..>) or none. "
     "<V:..> exists only inside manual function bodies. Arrays have at most 8 dims.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X]<U:X> = zeros()\n"
     "    print(a)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = zeros()\n"
     "    print(a)\n"
     "}\n", NULL},
    {"E_DUP", "Duplicate axis", "a mesh axis used twice in a type, or by two dims of a result",
     "A mesh axis shards at most one dim of an array. When an operation's result would use one axis for two dims, "
     "reshard an operand first or annotate the result.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4@X] = zeros()\n"
     "    print(a)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = zeros()\n"
     "    print(a)\n"
     "}\n", NULL},
    {"E_DIVIS", "Divisibility", "a dim not divisible by the sizes of its axes",
     "A dim sharded over mesh axes must be divisible by the product of their sizes, so every device holds an equal "
     "block.",
     // the example and its fix
     "mesh {X: 4}\n"
     "fn main() {\n"
     "    let a: f32[6@X] = zeros()\n"
     "    print(a)\n"
     "}\n",
     "mesh {X: 4}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = zeros()\n"
     "    print(a)\n"
     "}\n", NULL},
    {"E_BCAST", "Broadcast sharding", "an elementwise operation meets two different shardings in one dim",
     "Zipped dims of an elementwise operation must be sharded alike, or replicated on one side. Reshard one operand "
     "so they agree.",
     // the example and its fix
     "mesh {X: 2, Y: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8@Y, 4] = ones()\n"
     "    let c = a + b\n"
     "    print(c)\n"
     "}\n",
     "mesh {X: 2, Y: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8@Y, 4] = ones()\n"
     "    let c = a + reshard(b, f32[8@X, 4])\n"
     "    print(c)\n"
     "}\n", NULL},
    {"E_CONTRACT", "Ambiguous contraction", "a contracting dim sharded on both sides, without an annotation",
     "When both sides of a contracting dim are sharded, the result could be replicated (all-reduce), sharded "
     "(reduce-scatter) or unreduced (no communication). Annotate the result with `as TYPE` or a typed let to "
     "choose.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8, 4@X] = ones()\n"
     "    let b: f32[4@X, 16] = ones()\n"
     "    let z = a @ b\n"
     "    print(z)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8, 4@X] = ones()\n"
     "    let b: f32[4@X, 16] = ones()\n"
     "    let z = a @ b as f32[8, 16]\n"
     "    print(z)\n"
     "}\n", NULL},
    {"E_BATCH", "Batch sharding", "batch dims sharded differently, without an annotation",
     "Batch dims of a contraction are never gathered implicitly: reshard one operand so both shard them alike, or "
     "annotate the result.",
     // the example and its fix
     "mesh {X: 2, Y: 2}\n"
     "fn main() {\n"
     "    let p: f32[4@X, 8, 8] = ones()\n"
     "    let q: f32[4@Y, 8, 8] = ones()\n"
     "    let r = p @ q\n"
     "    print(r)\n"
     "}\n",
     "mesh {X: 2, Y: 2}\n"
     "fn main() {\n"
     "    let p: f32[4@X, 8, 8] = ones()\n"
     "    let q: f32[4@Y, 8, 8] = ones()\n"
     "    let r = p @ reshard(q, f32[4@X, 8, 8])\n"
     "    print(r)\n"
     "}\n", NULL},
    {"E_RESHAPE", "Reshape sharding", "a reshape whose sharding rule cannot carry the data without moving it",
     "A reshape is local when it splits one dim or merges one run of adjacent dims and every device keeps its "
     "elements. Otherwise annotate the result (gather, reshape, slice) or reshard the operand first.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[6@X] = ones()\n"
     "    let b = reshape(a, [3, 2])\n"
     "    print(b)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[6@X] = ones()\n"
     "    let b: f32[3, 2] = reshape(a, [3, 2])\n"
     "    print(b)\n"
     "}\n", NULL},
    {"E_SAME", "Same sharding",
     "where(), concatenate, stack or dynamic_update_slice with operands sharded differently",
     "The condition and both cases of where() (when nothing is broadcast), the operands of concatenate and stack, "
     "and the operand and update of dynamic_update_slice must be sharded the same way. Reshard one of them.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8, 4] = zeros()\n"
     "    let v = where(a > 0.0, a, b)\n"
     "    print(v)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8, 4] = zeros()\n"
     "    let v = where(a > 0.0, a, reshard(b, f32[8@X, 4]))\n"
     "    print(v)\n"
     "}\n", NULL},
    {"E_RESIZE", "Resized sharded dim",
     "a slice, pad, split or dynamic_slice that leaves a sharded dim not divisible by its axes",
     "A dim that changes size and is sharded must stay divisible by the sizes of its axes, so every device holds "
     "an equal block. Annotate an indexing expression with the result's sharding (e.g. that dim replicated: the "
     "owners send the rows), or reshard the operand so the dim is unsharded.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let h = a[0:3]\n"
     "    print(h)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let h = a[0:3] as f32[3, 4]\n"
     "    print(h)\n"
     "}\n", NULL},
    {"E_GATHER", "Gather sharding",
     "take or take_along_axis over a sharded dim, or with operand and indices sharded over one axis",
     "Without an annotation the indexed dim must be unsharded and the indices' dims may not use an axis of the "
     "operand's other dims. Annotate the result: <U:axis> (each device looks up the rows it holds, no "
     "communication) or replicated/sharded (then the pending sum is reduced), or reshard an operand.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let ids: i32[3] = zeros()\n"
     "    let g = take(a, ids, axis=0)\n"
     "    print(g)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let ids: i32[3] = zeros()\n"
     "    let g = take(a, ids, axis=0) as f32[3, 4]\n"
     "    print(g)\n"
     "}\n", NULL},
    {"E_UR", "Unreduced or reduced", "a misuse of an unreduced or reduced value",
     "An unreduced value (<U:X>) is a pending sum over X: only linear operations may take it, together with other "
     "pending sums over the same axes. Reduce it first with reshard(x, TYPE) (an all-reduce). A reduced value "
     "(<R:X>) is replicated, and its partners must be reduced over the same axes.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let u = transpose(a) @ a as f32[4, 4]<U:X>\n"
     "    let y = exp(u)\n"
     "    print(y)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let u = transpose(a) @ a as f32[4, 4]<U:X>\n"
     "    let y = exp(reshard(u, f32[4, 4]))\n"
     "    print(y)\n"
     "}\n", NULL},
    {"E_KIND", "Reduction kind", "a max/min reduction annotated unreduced",
     "Only sum reductions can leave a pending sum; annotate a max or min with a replicated or sharded result.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let z = max(a, axis=0) as f32[4]<U:X>\n"
     "    print(z)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let z = max(a, axis=0) as f32[4]\n"
     "    print(z)\n"
     "}\n", NULL},
    {"E_ANNOT", "Annotation", "an annotation (assertion) that does not hold",
     "On anything but a contraction, reduction, reshape, creation or gather, an annotation asserts the value's "
     "type. A different sharding is an error; move the data with reshard(x, TYPE).",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8, 4] = a\n"
     "    print(b)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b: f32[8, 4] = reshard(a, f32[8, 4])\n"
     "    print(b)\n"
     "}\n", NULL},
    {"E_CARRY", "Var type", "an assignment that changes a var's type",
     "A var keeps its type: reshard or cast the new value to the declared type. Each element of a tuple "
     "assignment `(a, b) = e` is an assignment of its own, and the message names the element.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    var w: f32[8@X] = ones()\n"
     "    w = reshard(w, f32[8])\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    var w: f32[8@X] = ones()\n"
     "    w = w * 2.0\n"
     "}\n", NULL},
    {"E_ARG", "Argument", "a wrong argument to a call or builtin",
     "The call has the wrong number of arguments, an unknown keyword, a value that must be a compile-time constant "
     "or string literal, a tuple where one value is expected, or an arg(\"name\", ...) of a name another arg "
     "call reads with a different default or type (one name is one value on the command line).",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let s = sum(a, axes=0)\n"
     "    print(s)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let s = sum(a, axis=0)\n"
     "    print(s)\n"
     "}\n", NULL},
    {"E_RETURN", "Return", "a missing, misplaced or wrong-arity return",
     "A function with a result type ends with `return EXPR` of that arity; return must be the last statement.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn half(x: f32) -> f32 {\n"
     "    let h = x / 2.0\n"
     "}\n"
     "fn main() {\n"
     "    print(half(3.0))\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn half(x: f32) -> f32 {\n"
     "    let h = x / 2.0\n"
     "    return h\n"
     "}\n"
     "fn main() {\n"
     "    print(half(3.0))\n"
     "}\n", NULL},
    {"E_MANUAL", "Manual only", "a collective or axis_index outside a manual function",
     "Collectives are written only in manual function bodies, over their manual axes. In the global view reshard "
     "and reductions insert the collectives the types call for.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let s = psum(a, X)\n"
     "    print(s)\n"
     "}\n",
     "mesh {X: 2}\n"
     "manual(X) fn local_sum(a: f32[8@X]) -> f32 {\n"
     "    return psum(sum(a), X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let s = local_sum(a)\n"
     "    print(s)\n"
     "}\n", NULL},
    {"E_VMA", "Varying states", "operands whose varying/invariant/unreduced/reduced states cannot meet",
     "Inside a manual body, operands of one operation need the same varying axes; invariant operands are cast "
     "implicitly, unreduced ones must be reduced first (docs/manual.md section 2).",
     // the example and its fix
     "mesh {X: 2}\n"
     "manual(X) fn f(a: f32[8@X], u: f32[4]<U:X>) -> f32[4]<U:X> {\n"
     "    let v = a * 2.0\n"
     "    return u + v\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let u: f32[4]<U:X> = ones()\n"
     "    print(f(a, u))\n"
     "}\n",
     "mesh {X: 2}\n"
     "manual(X) fn f(a: f32[8@X], u: f32[4]<U:X>) -> f32[4]<U:X> {\n"
     "    let v = a * 2.0\n"
     "    return u + pcast(v, X, to=unreduced)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let u: f32[4]<U:X> = ones()\n"
     "    print(f(a, u))\n"
     "}\n", NULL},
    {"E_PCAST", "Cast of states", "a pcast or collective over axes in different states",
     "pcast moves a value between the states listed in docs/manual.md; every axis a collective names must be in "
     "one state. The message says what to write instead.",
     // the example and its fix
     "mesh {X: 2, Y: 2}\n"
     "manual(X, Y) fn f(a: f32[8@X]) -> f32[4] {\n"
     "    return psum(a, (X, Y))\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(f(a))\n"
     "}\n",
     "mesh {X: 2, Y: 2}\n"
     "manual(X, Y) fn f(a: f32[8@X]) -> f32[4] {\n"
     "    return psum(a, X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(f(a))\n"
     "}\n", NULL},
    {"E_AXIS", "Collective axis", "a collective along a dim that an explicit axis also shards",
     "A collective inside a manual body cannot work along a dim that a non-manual (explicit) mesh axis shards.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let x: f32[8@X, 4] = ones()\n"
     "    let c = cumsum(x, axis=0)\n"
     "    print(c)\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let x: f32[8@X, 4] = ones()\n"
     "    let c = cumsum(reshard(x, f32[8, 4]), axis=0)\n"
     "    print(c)\n"
     "}\n", NULL},
    {"E_INSPEC", "Manual in-spec", "a manual function parameter whose manual axes do not lead a dim",
     "In a manual function's signature the manual axes must come first in each dim's axis list, e.g. `@(X,Y)` with "
     "manual(X).",
     // the example and its fix
     "mesh {X: 2, Y: 2}\n"
     "manual(X) fn total(a: f32[8@(Y, X)]) -> f32 {\n"
     "    return psum(sum(a), X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@(Y, X)] = ones()\n"
     "    print(total(a))\n"
     "}\n",
     "mesh {X: 2, Y: 2}\n"
     "manual(X) fn total(a: f32[8@(X, Y)]) -> f32 {\n"
     "    return psum(sum(a), X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@(X, Y)] = ones()\n"
     "    print(total(a))\n"
     "}\n", NULL},
    {"E_OUTSPEC", "Manual out-spec", "a manual function result that does not fit the declared type",
     "An axis the declared result does not shard must be invariant (or unreduced where the type says <U:..>); "
     "psum or pcast the value before returning it.",
     // the example and its fix
     "mesh {X: 2}\n"
     "manual(X) fn total(a: f32[8@X]) -> f32 {\n"
     "    return sum(a)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(total(a))\n"
     "}\n",
     "mesh {X: 2}\n"
     "manual(X) fn total(a: f32[8@X]) -> f32 {\n"
     "    return psum(sum(a), X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(total(a))\n"
     "}\n", NULL},
    {"E_DIVERGE", "Divergent collective", "a collective under a condition or loop bound that varies across devices",
     "Every device must reach every collective. Compute the condition from invariant values (after psum or pmax), "
     "or move the collective out of the branch.",
     // the example and its fix
     "mesh {X: 2}\n"
     "manual(X) fn f(a: f32[8@X]) -> f32[8@X] {\n"
     "    var b = a\n"
     "    if axis_index(X) == 0 {\n"
     "        b = a * psum(sum(a), X)\n"
     "    }\n"
     "    return b\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(f(a))\n"
     "}\n",
     "mesh {X: 2}\n"
     "manual(X) fn f(a: f32[8@X]) -> f32[8@X] {\n"
     "    let t = psum(sum(a), X)\n"
     "    var b = a\n"
     "    if axis_index(X) == 0 {\n"
     "        b = a * t\n"
     "    }\n"
     "    return b\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(f(a))\n"
     "}\n", NULL},
    {"E_GRAD", "Gradient", "a program that grad cannot differentiate",
     "grad and value_and_grad differentiate scalar functions; a cast whose transpose all-reduces under a varying "
     "condition, or a second derivative through a loop, cannot be differentiated (docs/autodiff.md).",
     // the example and its fix
     "mesh {X: 4}\n"
     "manual(X) fn f(x: f32[8@X], w: f32[2]) -> f32[8@X] {\n"
     "    var y = x\n"
     "    if axis_index(X) == 0 {\n"
     "        y = x * pcast(w, X, to=varying)\n"
     "    }\n"
     "    return y\n"
     "}\n"
     "fn loss(x: f32[8@X], w: f32[2]) -> f32 {\n"
     "    return sum(f(x, w))\n"
     "}\n"
     "fn main() {\n"
     "    let x: f32[8@X] = ones()\n"
     "    let w: f32[2] = ones()\n"
     "    let g = grad(loss, wrt=1)(x, w)\n"
     "    print(g)\n"
     "}\n",
     "mesh {X: 4}\n"
     "manual(X) fn f(x: f32[8@X], w: f32[2]) -> f32[8@X] {\n"
     "    let wv = pcast(w, X, to=varying)\n"
     "    var y = x\n"
     "    if axis_index(X) == 0 {\n"
     "        y = x * wv\n"
     "    }\n"
     "    return y\n"
     "}\n"
     "fn loss(x: f32[8@X], w: f32[2]) -> f32 {\n"
     "    return sum(f(x, w))\n"
     "}\n"
     "fn main() {\n"
     "    let x: f32[8@X] = ones()\n"
     "    let w: f32[2] = ones()\n"
     "    let g = grad(loss, wrt=1)(x, w)\n"
     "    print(g)\n"
     "}\n", NULL},
    {"E_IMPORT", "Import", "an import without a file name, of a file that cannot be found or read, or in a cycle",
     "import \"FILE.shd\" looks relative to the importing file, then in each -I DIR, then in the installed "
     "library (std/nn.shd, std/optim.shd); files may not import each other in a cycle: move what both need to a "
     "third file.",
     // the example and its fix
     "import \"\"\n"
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let x: f32[4, 8@X] = ones()\n"
     "    print(sum(relu(x)))\n"
     "}\n",
     "import \"std/nn.shd\"\n"
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let x: f32[4, 8@X] = ones()\n"
     "    print(sum(relu(x)))\n"
     "}\n", NULL},
    {"E_MEMORY", "Memory per rank", "more bytes of arrays per rank at the peak than --max-memory allows",
     "shdc build and check with --max-memory=BYTES simulate the generated code's buffers (as `shdc explain` does) "
     "and report a program whose peak bytes of live arrays on one rank exceed the limit, at the line of the peak "
     "with the largest arrays live there. Shard the largest arrays over more devices (a larger mesh, or another "
     "layout: `shdc plan FILE --devices=N --memory=BYTES` lists the layouts that fit), or keep fewer of them live "
     "at once.",
     // the example and its fix, checked with --max-memory=3MB
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[1024, 1024] = ones()\n"
     "    print(sum(a))\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[1024@X, 1024] = ones()\n"
     "    print(sum(a))\n"
     "}\n",
     "3MB"},
    /* The warnings: the program is valid, but probably not what was meant. */
    {"W_PSUM_INVARIANT", "Psum of an invariant value", "a psum of a value that is the same on every device",
     "Inside a manual body a value invariant over an axis is the same on every device along it, so psum over that "
     "axis adds it to itself once per device: the result is the value times the axis size. If the value is already "
     "the total (a sum of a replicated array, a psum done before), drop the psum; if the product is meant, write "
     "the multiplication; if each device was to contribute its own part, compute the part from the device's "
     "varying values (a parameter sharded over the axis, axis_index). psum(1, X), the axis size, is not warned "
     "about.",
     // the example and its fix
     "mesh {X: 2}\n"
     "manual(X) fn total(a: f32[8@X]) -> f32 {\n"
     "    let s = psum(sum(a), X)\n"
     "    return psum(s, X)\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(total(a))\n"
     "}\n",
     "mesh {X: 2}\n"
     "manual(X) fn total(a: f32[8@X]) -> f32 {\n"
     "    let s = psum(sum(a), X)\n"
     "    return s\n"
     "}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    print(total(a))\n"
     "}\n", NULL},
    {"W_UNUSED", "Unused variable", "a let whose value is never read",
     "A `let` binds a value that nothing reads: usually a typo in a later use, or a leftover. Drop the let (keep "
     "the call alone if it has an effect), or name it with a leading underscore (`_x`) to say it is meant to be "
     "unused, as in Rust. var, for and parameters are not warned about.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let scaled = a * 2.0\n"
     "    print(sum(a))\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X] = ones()\n"
     "    let scaled = a * 2.0\n"
     "    print(sum(scaled))\n"
     "}\n", NULL},
    {"W_RESHARD_ROUNDTRIP", "Reshard round trip", "a reshard to the value's own type, or straight back",
     "reshard(x, T) moves data between layouts; to x's own type it moves nothing, and reshard(reshard(x, A), B) "
     "with B x's own type moves the data twice to end where it was: drop the reshard, or both. After `let y = "
     "reshard(x, A)`, reshard(y, B) with B x's own type moves the data back to where x (a let or a parameter, "
     "unchanged) holds it already: use x.",
     // the example and its fix
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b = reshard(reshard(a, f32[8, 4]), f32[8@X, 4])\n"
     "    print(sum(b))\n"
     "}\n",
     "mesh {X: 2}\n"
     "fn main() {\n"
     "    let a: f32[8@X, 4] = ones()\n"
     "    let b = a\n"
     "    print(sum(b))\n"
     "}\n", NULL},
};

int diag_code_count(void) { return (int)(sizeof codes / sizeof *codes); }

const DiagCode *diag_code_at(int i) { return i >= 0 && i < diag_code_count() ? &codes[i] : NULL; }

int diag_code_index(const char *code) {
  for (int i = 0; code && i < diag_code_count(); i++)
    if (!strcmp(codes[i].code, code))
      return i;
  return -1;
}
