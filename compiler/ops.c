/* ops.c: the operation registry.
 *
 * Each family file (op_elementwise.c, op_unary.c, op_contraction.c,
 * op_reduction.c, op_softmax.c, op_shape.c, op_collective.c, op_creation.c,
 * op_io.c, op_index.c, op_gather.c, op_shift.c, op_string.c)
 * defines a table of its builtins (name or operator, typing, lowering,
 * folding) and a table of its IR opcodes (printing, transpose,
 * partitioning, emission). This file only collects them: an opcode maps to
 * its OpDef through a direct index, a builtin name or an operator (its
 * syntax, code and operand kind) through a linear search of a few dozen
 * entries (done once per call site or operator by the typechecker).
 *
 * Invariant: every opcode below IR__CORE that appears in the IR has an
 * entry, except the control and call instructions the stages handle
 * themselves (const, call, for, if, yield, return, grad, tapes, copy,
 * retype), and no two entries share an opcode or a builtin name (checked
 * once, at the first lookup).
 */
#include "shdc.h"

static const OpDef *const op_families[] = {
    op_elementwise_ops, op_unary_ops, op_contraction_ops, op_reduction_ops,
    op_shape_ops,       op_collective_ops, op_creation_ops, op_io_ops,
    op_softmax_ops,     op_index_ops,      op_gather_ops,     op_shift_ops,      op_string_ops, NULL,
};

static const BuiltinDef *const builtin_families[] = {
    op_elementwise_builtins, op_unary_builtins, op_contraction_builtins, op_reduction_builtins,
    op_shape_builtins,       op_collective_builtins, op_creation_builtins, op_io_builtins,
    op_softmax_builtins,     op_index_builtins,     op_gather_builtins,     op_string_builtins, NULL,
};

static const OpDef *by_opcode[IR__LIMIT];
static const char **names;
static const BuiltinDef **operators;   /* the operator rows, in table order */
static int noperators;
static bool ready;

#define EACH_BUILTIN(b)                                                                                     \
  for (const BuiltinDef *const *fam_ = builtin_families; *fam_; fam_++)                                       \
    for (const BuiltinDef *b = *fam_; b->name; b++)

static void build(void) {
  ready = true;
  for (const OpDef *const *fam = op_families; *fam; fam++)
    for (const OpDef *d = *fam; d->name; d++) {
      if (d->op < 0 || d->op >= IR__LIMIT || by_opcode[d->op])
        diag_ice("ops: opcode %d (%s) registered twice or out of range", d->op, d->name);
      by_opcode[d->op] = d;
    }
  int n = 0;
  EACH_BUILTIN(b)
    n++;
  names = calloc((size_t)n + 1, sizeof *names);
  operators = calloc((size_t)n + 1, sizeof *operators);
  if (!names || !operators)
    diag_ice("ops: out of memory");
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
}

const OpDef *op_def(int op) {
  if (!ready)
    build();
  return op >= 0 && op < IR__LIMIT ? by_opcode[op] : NULL;
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
      str_printf(&s, "%s%s", k == i ? "" : k == j ? " and " : ", ", rows[k]->name);
    if (rows[i]->doc)
      str_printf(&s, " (%s)", rows[i]->doc);
    i = j + 1;
  }
  const char *r = arena_strdup(n ? str_cstr(&s) : "none");
  free(s.buf);
  return r;
}

const char *const *op_builtin_names(void) {
  if (!ready)
    build();
  return names;
}
