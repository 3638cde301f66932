/* diag_codes.c: the error codes, with the help text of each.
 *
 * Every [E_CODE] a diagnostic can carry is listed here once, with a short
 * description (typing-rules.md section D, manual.md, autodiff.md say the
 * same in more words) and the help a user reading a SARIF report or an
 * editor tooltip needs: what the rule is and the usual fix. SARIF's rule
 * metadata (diag_json.c) comes from this table; tests/tools/test_diagnostics.py
 * checks that every code the compiler reports is here and in the docs.
 */
#include "shdc.h"

static const DiagCode codes[] = {
    {"E_SYNTAX", "Syntax", "the text does not parse",
     "The statement does not follow the grammar of docs/language.md. One error is reported per bad statement and "
     "the rest of the file is still checked. Statements end at a newline; an incomplete expression at the end of a "
     "line is the usual cause."},
    {"E_NAME", "Name", "unknown or duplicate name, function or mesh axis; recursion",
     "A name must be declared before it is used (let, var, const, fn, a parameter or a mesh axis) and declared once "
     "in its scope. Functions may not call themselves, directly or indirectly. When a close name exists the message "
     "suggests it."},
    {"E_MESH", "Mesh", "no mesh declaration, or an axis size below 1 or above 2^20",
     "A program declares its device mesh once, e.g. `mesh {data: 4, model: 2}`, with every axis size from 1 to 2^20. "
     "`shdc build --mesh data=2` overrides sizes at compile time."},
    {"E_SHAPE", "Shape", "shapes that do not broadcast, contract, reshape or match an annotation; too large an array",
     "Elementwise operations follow NumPy broadcasting (sizes equal or 1, aligned from the end); contractions need "
     "equal contracting sizes; a reshape keeps the element count; an annotation must have the value's shape. An "
     "array may have at most 2^48 bytes (256 TiB)."},
    {"E_CONST", "Constant without a value",
     "integer overflow in a constant expression, a division or remainder by zero, an i32 that does not fit",
     "Literals and constants fold at compile time, exactly: integers as 64-bit values, and one that becomes an i32 "
     "must lie in -2147483648..2147483647. An overflow, a division or remainder by zero, or an integer to a "
     "negative power has no value; use smaller constants, a float literal (1.0e30), or compute the value at run "
     "time, where i32 arithmetic wraps."},
    {"E_DTYPE", "Dtype", "operands of different dtypes, bool arithmetic, a float function of an integer",
     "Operands of one operation share a dtype (literals adapt); bools have no arithmetic; conditions are bool "
     "scalars. Convert with cast(x, DTYPE)."},
    {"E_SPEC", "Spec", "a malformed type: an axis both sharding and unreduced/reduced, <V:..> in the global view",
     "A mesh axis is in one state per type: sharding one dim, unreduced (<U:..>), reduced (<R:..>) or none. "
     "<V:..> exists only inside manual function bodies. Arrays have at most 8 dims."},
    {"E_DUP", "Duplicate axis", "a mesh axis used twice in a type, or by two dims of a result",
     "A mesh axis shards at most one dim of an array. When an operation's result would use one axis for two dims, "
     "reshard an operand first or annotate the result."},
    {"E_DIVIS", "Divisibility", "a dim not divisible by the sizes of its axes",
     "A dim sharded over mesh axes must be divisible by the product of their sizes, so every device holds an equal "
     "block."},
    {"E_BCAST", "Broadcast sharding", "an elementwise operation meets two different shardings in one dim",
     "Zipped dims of an elementwise operation must be sharded alike, or replicated on one side. Reshard one operand "
     "so they agree."},
    {"E_CONTRACT", "Ambiguous contraction", "a contracting dim sharded on both sides, without an annotation",
     "When both sides of a contracting dim are sharded, the result could be replicated (all-reduce), sharded "
     "(reduce-scatter) or unreduced (no communication). Annotate the result with `as TYPE` or a typed let to "
     "choose."},
    {"E_BATCH", "Batch sharding", "batch dims sharded differently, without an annotation",
     "Batch dims of a contraction are never gathered implicitly: reshard one operand so both shard them alike, or "
     "annotate the result."},
    {"E_RESHAPE", "Reshape sharding", "a reshape whose sharding rule cannot carry the data without moving it",
     "A reshape is local when it splits one dim or merges one run of adjacent dims and every device keeps its "
     "elements. Otherwise annotate the result (gather, reshape, slice) or reshard the operand first."},
    {"E_SAME", "Same sharding",
     "where(), concatenate, stack or dynamic_update_slice with operands sharded differently",
     "The condition and both cases of where() (when nothing is broadcast), the operands of concatenate and stack, "
     "and the operand and update of dynamic_update_slice must be sharded the same way. Reshard one of them."},
    {"E_RESIZE", "Resized sharded dim",
     "a slice, pad, split or dynamic_slice that leaves a sharded dim not divisible by its axes",
     "A dim that changes size and is sharded must stay divisible by the sizes of its axes, so every device holds "
     "an equal block. Annotate an indexing expression with the result's sharding (e.g. that dim replicated: the "
     "owners send the rows), or reshard the operand so the dim is unsharded."},
    {"E_GATHER", "Gather sharding",
     "take or take_along_axis over a sharded dim, or with operand and indices sharded over one axis",
     "Without an annotation the indexed dim must be unsharded and the indices' dims may not use an axis of the "
     "operand's other dims. Annotate the result: <U:axis> (each device looks up the rows it holds, no "
     "communication) or replicated/sharded (then the pending sum is reduced), or reshard an operand."},
    {"E_UR", "Unreduced or reduced", "a misuse of an unreduced or reduced value",
     "An unreduced value (<U:X>) is a pending sum over X: only linear operations may take it, together with other "
     "pending sums over the same axes. Reduce it first with reshard(x, TYPE) (an all-reduce). A reduced value "
     "(<R:X>) is replicated, and its partners must be reduced over the same axes."},
    {"E_KIND", "Reduction kind", "a max/min reduction annotated unreduced",
     "Only sum reductions can leave a pending sum; annotate a max or min with a replicated or sharded result."},
    {"E_ANNOT", "Annotation", "an annotation (assertion) that does not hold",
     "On anything but a contraction, reduction, reshape, creation or gather, an annotation asserts the value's "
     "type. A different sharding is an error; move the data with reshard(x, TYPE)."},
    {"E_CARRY", "Var type", "an assignment that changes a var's type",
     "A var keeps its type: reshard or cast the new value to the declared type."},
    {"E_ARG", "Argument", "a wrong argument to a call or builtin",
     "The call has the wrong number of arguments, an unknown keyword, a value that must be a compile-time constant "
     "or string literal, or a tuple where one value is expected."},
    {"E_RETURN", "Return", "a missing, misplaced or wrong-arity return",
     "A function with a result type ends with `return EXPR` of that arity; return must be the last statement."},
    {"E_MANUAL", "Manual only", "a collective or axis_index outside a manual function",
     "Collectives are written only in manual function bodies, over their manual axes. In the global view reshard "
     "and reductions insert the collectives the types call for."},
    {"E_VMA", "Varying states", "operands whose varying/invariant/unreduced/reduced states cannot meet",
     "Inside a manual body, operands of one operation need the same varying axes; invariant operands are cast "
     "implicitly, unreduced ones must be reduced first (docs/manual.md section 2)."},
    {"E_PCAST", "Cast of states", "a pcast or collective over axes in different states",
     "pcast moves a value between the states listed in docs/manual.md; every axis a collective names must be in "
     "one state. The message says what to write instead."},
    {"E_AXIS", "Collective axis", "a collective along a dim that an explicit axis also shards",
     "A collective inside a manual body cannot work along a dim that a non-manual (explicit) mesh axis shards."},
    {"E_INSPEC", "Manual in-spec", "a manual function parameter whose manual axes do not lead a dim",
     "In a manual function's signature the manual axes must come first in each dim's axis list, e.g. `@(X,Y)` with "
     "manual(X)."},
    {"E_OUTSPEC", "Manual out-spec", "a manual function result that does not fit the declared type",
     "An axis the declared result does not shard must be invariant (or unreduced where the type says <U:..>); "
     "psum or pcast the value before returning it."},
    {"E_DIVERGE", "Divergent collective", "a collective under a condition or loop bound that varies across devices",
     "Every device must reach every collective. Compute the condition from invariant values (after psum or pmax), "
     "or move the collective out of the branch."},
    {"E_GRAD", "Gradient", "a program that grad cannot differentiate",
     "grad and value_and_grad differentiate scalar functions; a cast whose transpose all-reduces under a varying "
     "condition, or a second derivative through a loop, cannot be differentiated (docs/autodiff.md)."},
};

int diag_code_count(void) { return (int)(sizeof codes / sizeof *codes); }

const DiagCode *diag_code_at(int i) { return i >= 0 && i < diag_code_count() ? &codes[i] : NULL; }

int diag_code_index(const char *code) {
  for (int i = 0; code && i < diag_code_count(); i++)
    if (!strcmp(codes[i].code, code))
      return i;
  return -1;
}
