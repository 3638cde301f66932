/* ops.c: the operation registry.
 *
 * Each family file (op_elementwise.c, op_unary.c, op_contraction.c,
 * op_reduction.c, op_softmax.c, op_shape.c, op_collective.c, op_creation.c,
 * op_io.c, op_index.c, op_gather.c, op_shift.c, op_string.c, op_attention.c)
 * defines a table of its builtins (name, typing, lowering, folding) and a
 * table of its IR opcodes (printing, transpose, partitioning, emission).
 * This file only collects them: an opcode maps to its OpDef through a
 * direct index, a builtin name through a linear search of a few dozen
 * entries (done once per call site by the typechecker).
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
    op_softmax_ops,     op_index_ops,      op_gather_ops,     op_shift_ops,      op_string_ops,
    op_attention_ops,   NULL,
};

static const BuiltinDef *const builtin_families[] = {
    op_elementwise_builtins, op_unary_builtins, op_contraction_builtins, op_reduction_builtins,
    op_shape_builtins,       op_collective_builtins, op_creation_builtins, op_io_builtins,
    op_softmax_builtins,     op_index_builtins,     op_gather_builtins,     op_string_builtins,
    op_attention_builtins,   NULL,
};

static const OpDef *by_opcode[IR__LIMIT];
static const char **names;
static bool ready;

static void build(void) {
  ready = true;
  for (const OpDef *const *fam = op_families; *fam; fam++)
    for (const OpDef *d = *fam; d->name; d++) {
      if (d->op < 0 || d->op >= IR__LIMIT || by_opcode[d->op])
        diag_ice("ops: opcode %d (%s) registered twice or out of range", d->op, d->name);
      by_opcode[d->op] = d;
    }
  int n = 0;
  for (const BuiltinDef *const *fam = builtin_families; *fam; fam++)
    for (const BuiltinDef *b = *fam; b->name; b++)
      n++;
  names = calloc((size_t)n + 1, sizeof *names);
  int k = 0;
  for (const BuiltinDef *const *fam = builtin_families; *fam; fam++)
    for (const BuiltinDef *b = *fam; b->name; b++) {
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
  for (const BuiltinDef *const *fam = builtin_families; *fam; fam++)
    for (const BuiltinDef *b = *fam; b->name; b++)
      if (!strcmp(b->name, name))
        return b;
  return NULL;
}

const char *const *op_builtin_names(void) {
  if (!ready)
    build();
  return names;
}
