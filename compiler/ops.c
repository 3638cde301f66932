/* ops.c: the operation registry.
 *
 * Each family file (op_elementwise.c, op_unary.c, op_contraction.c,
 * op_reduction.c, op_softmax.c, op_shape.c, op_collective.c, op_creation.c,
 * op_io.c, op_index.c, op_join.c, op_gather.c, op_shift.c, op_string.c,
 * op_attention.c) exports one OpFamily: a table of its builtins (name or
 * operator, typing, lowering, folding), a table of its IR operations (types, text, transpose,
 * partitioning, emission, costs) and what it adds to the generated file.
 * This file only collects them: an opcode maps to its OpDef through a
 * direct index, a builtin name or an operator (its syntax, code and
 * operand kind) through a linear search of a hundred entries (done once
 * per call site or operator by the typechecker). It also knows the forms
 * (grad, value_and_grad), prints the whole registry (shdc list-ops) and
 * reads a bucket's members for its two families and explain.
 *
 * The stages reach the families only through here, and the families reach
 * the stages only through their builders (tests/tools/test_layering.py).
 *
 * Invariant: every opcode below IR__CORE that appears in the IR has an
 * entry, except the control and call instructions the stages handle
 * themselves (const, call, for, if, yield, return, grad, tapes, retype),
 * and no two entries share an opcode, a builtin name or an operator's
 * (syntax, code, operand kind) (checked once, at the first lookup).
 */
#include "ops.h"

/* In the order of their preambles in the generated file. */
static const OpFamily *const families[] = {
    &op_elementwise_family, &op_unary_family,      &op_contraction_family, &op_reduction_family,
    &op_shape_family,       &op_collective_family, &op_creation_family,    &op_io_family,
    &op_softmax_family,     &op_index_family,      &op_join_family,        &op_gather_family,
    &op_shift_family,       &op_string_family,     &op_attention_family,   &op_async_family,
    &op_sort_family,
    NULL,
};

/* Forms that make a function of a function (tc_expr.c types them). */
static const char *const forms[] = {"grad", "value_and_grad", "remat", "vjp_save", "vjp_load", NULL};

static const OpDef *by_opcode[IR__LIMIT];
static const char **names;
static const BuiltinDef **operators;   /* the operator rows, in table order */
static int noperators;
static bool ready;

#define EACH_BUILTIN(b)                                                                                     \
  for (const OpFamily *const *fam_ = families; *fam_; fam_++)                                                 \
    for (const BuiltinDef *b = (*fam_)->builtins; b && b->name; b++)

static void build(void) {
  ready = true;
  for (const OpFamily *const *fam = families; *fam; fam++)
    for (const OpDef *d = (*fam)->ops; d && d->name; d++) {
      if (d->op < 0 || d->op >= IR__LIMIT || by_opcode[d->op])
        diag_ice("ops: opcode %d (%s) registered twice or out of range", d->op, d->name);
      by_opcode[d->op] = d;
    }
  int n = 2;
  EACH_BUILTIN(b)
    n++;
  names = mem_calloc((size_t)n + 1, sizeof *names);
  operators = mem_calloc((size_t)n + 1, sizeof *operators);
  int k = 0;
  EACH_BUILTIN(b) {
    if (b->syntax != SYN_CALL) {
      for (int j = 0; j < noperators; j++)
        if (operators[j]->syntax == b->syntax && operators[j]->code == b->code && operators[j]->operand == b->operand)
          diag_ice("ops: operator %s registered twice", b->name);
      operators[noperators++] = b;
      continue;
    }
    for (int j = 0; j < k; j++)
      if (!strcmp(names[j], b->name))
        diag_ice("ops: builtin %s registered twice", b->name);
    names[k++] = b->name;
  }
  for (int i = 0; forms[i]; i++)
    names[k++] = forms[i];
}

const OpFamily *const *op_families(void) { return families; }

int op_form(const char *name) {
  return !strcmp(name, "grad") ? GRAD_PLAIN : !strcmp(name, "value_and_grad") ? GRAD_WITH_VALUE
         : !strcmp(name, "remat")                                      ? FORM_REMAT
         : !strcmp(name, "vjp_save")                                   ? FORM_VJP_SAVE
         : !strcmp(name, "vjp_load")                                   ? FORM_VJP_LOAD
                                                                       : 0;
}

/* "a, b and c" */
static void phrase_add(Str *s, int i, int n, const char *name) {
  str_printf(s, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", name);
}

const char *op_builtins_phrase(unsigned flag) {
  int n = 0;
  EACH_BUILTIN(b)
    n += b->syntax == SYN_CALL && (b->flags & flag);
  Str s = {0};
  int i = 0;
  EACH_BUILTIN(b)
    if (b->syntax == SYN_CALL && (b->flags & flag))
      phrase_add(&s, i++, n, b->name);
  const char *r = arena_strdup(n ? str_cstr(&s) : "none");
  free(s.buf);
  return r;
}

/* bf16 is stored, computed in f32 (language.md 10.1): each element read
 * is widened and each result rounded, so an operation on bf16 counts twice
 * the elementwise operations of its f32 form (the traced demo GPT-2's
 * elementwise passes took 2.3 times as long in bf16 as in f32). */
static double dtype_factor(const Type *t) { return t->dtype == DT_BF16 ? 2 : 1; }

void op_work_reads(const Module *mod, const Inst *in, double *dot, double *ew) {
  if (in->nargs && in->args[0]->type.kind == TY_ARRAY)
    *ew += (double)ty_local_count(&mod->mesh, &in->args[0]->type) * dtype_factor(&in->args[0]->type);
}

const OpDef *op_def(int op) {
  if (!ready)
    build();
  return op >= 0 && op < IR__LIMIT ? by_opcode[op] : NULL;
}

void op_work(const Module *mod, const Inst *in, double *dot, double *ew) {
  const OpDef *d = op_def(in->op);
  if (d && d->work)
    d->work(mod, in, dot, ew);
  else if (d && (d->flags & OPF_ELEMENTWISE) && in->nresults && in->results[0]->type.kind == TY_ARRAY)
    *ew += (double)ty_local_count(&mod->mesh, &in->results[0]->type) * dtype_factor(&in->results[0]->type);
}

const BuiltinDef *op_builtin(const char *name) {
  if (!ready)
    build();
  EACH_BUILTIN(b)
    if (b->syntax == SYN_CALL && !strcmp(b->name, name))
      return b;
  return NULL;
}

const BuiltinDef *op_operator(OpSyntax syn, int code, TypeKind operand) {
  if (!ready)
    build();
  for (int i = 0; i < noperators; i++)
    if (operators[i]->syntax == syn && operators[i]->code == code && operators[i]->operand == operand)
      return operators[i];
  return NULL;
}

/* Runs of rows with the same doc share it: "+ (concatenation), == and !=
 * (comparison)". */
const char *op_operators_phrase(OpSyntax syn, TypeKind operand) {
  if (!ready)
    build();
  Str s = {0};
  const BuiltinDef *rows[64];
  int n = 0;
  for (int i = 0; i < noperators && n < 64; i++)
    if (operators[i]->syntax == syn && operators[i]->operand == operand)
      rows[n++] = operators[i];
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && rows[j + 1]->doc && rows[i]->doc && !strcmp(rows[j + 1]->doc, rows[i]->doc))
      j++;
    str_printf(&s, "%s", i ? ", " : "");
    for (int k = i; k <= j; k++)
      phrase_add(&s, k - i, j - i + 1, rows[k]->name);
    if (rows[i]->doc)
      str_printf(&s, " (%s)", rows[i]->doc);
    i = j + 1;
  }
  const char *r = arena_strdup(n ? str_cstr(&s) : "none");
  free(s.buf);
  return r;
}

static const char *const syntax_names[SYN__COUNT] = {"call", "unary", "binary", "matmul", "index", "string"};

bool op_list(FILE *out) {
  if (!ready)
    build();
  fprintf(out, "# shdc list-ops: KIND NAME FAMILY, then for a builtin its SYNTAX, for an op its VARIANTS (or -) "
               "and whether it infers its types\n");
  for (const OpFamily *const *f = families; *f; f++)
    for (const BuiltinDef *b = (*f)->builtins; b && b->name; b++)
      fprintf(out, "builtin\t%s\t%s\t%s\n", b->name, (*f)->name, syntax_names[b->syntax]);
  for (int i = 0; forms[i]; i++)
    fprintf(out, "builtin\t%s\tcore\tform\n", forms[i]);
  for (const OpFamily *const *f = families; *f; f++)
    for (const OpDef *d = (*f)->ops; d && d->name; d++) {
      fprintf(out, "op\t%s\t%s\t", d->name, (*f)->name);
      for (int v = 0; d->variants && d->variants[v]; v++)
        fprintf(out, "%s%s", v ? "," : "", d->variants[v]);
      fprintf(out, "%s\t%s\n", d->variants ? "" : "-", d->infer ? "infer" : "no-infer");
    }
  for (int op = 0; op < IR__CORE; op++)
    if (!by_opcode[op] && strcmp(ir_opname(op), "?"))
      fprintf(out, "op\t%s\tcore\t-\t-\n", ir_opname(op));
  return fflush(out) == 0 && !ferror(out);
}

const char *const *op_builtin_names(void) {
  if (!ready)
    build();
  return names;
}

/* ---- a bucket's members (overlap.c's format: shdc.h's ASYNC_) ---------------------------- */

/* The dtype a reduction bucket's values move in: its members' own, or
 * bf16 for the f32 members of --reduce-dtype=bf16 (ASYNC_NARROW; a
 * bucket's members share their dtype, and so the flag). */
DType async_wire_dtype(const Inst *in) {
  bool gather = in->op == IR_ALL_GATHER_START;
  DType dt = in->args[gather ? 1 : 0]->type.dtype;
  return !gather && in->niv >= ASYNC_MEMBER_W && (in->iv[0] & ASYNC_NARROW) ? DT_BF16 : dt;
}

/* The bytes of a reduction bucket's staging buffer (what a rank's ring
 * moves 2(G-1)/G of): its members' elements in the wire's dtype. */
int64_t async_bucket_bytes(const Module *mod, const Inst *in) {
  int64_t n = 0;
  for (int j = 0; j < in->niv / ASYNC_MEMBER_W; j++)
    n += ty_local_count(&mod->mesh, &in->args[j]->type);
  return n * (int64_t)ty_dtype_size(async_wire_dtype(in));
}
