/* optimize.c: rewrites that make the partitioned program cheaper without
 * changing any value.
 *
 * Before partitioning (opt_global):
 *   - a reshard whose operand is a reduction, contraction or reshape used
 *     nowhere else becomes that operation's result type, as if the program
 *     had annotated it (language.md §4): sum-then-slice becomes a
 *     reduce-scatter, gather-then-compute becomes compute-then-reduce; also
 *     through a view between them that only moves dims (OpDef.operand_for:
 *     a transpose, whose product takes the permuted type). Autodiff produces this pattern for the gradient of a sharded
 *     weight that was gathered in the forward pass.
 *   - chains of reshards collapse into one.
 *
 * After partitioning (opt_module): a collective computed twice in a block
 * (the same operand to the same type) is computed once; an all-reduce of
 * an all-reduce (same operation, its only use) becomes one all-reduce over
 * both groups of axes; dead pure instructions are removed.
 *
 * After autodiff built a gradient (opt_prune_tapes): dead code is removed
 * and then the residual tapes of its loops that no tape_get reads, with
 * their pushes, so a loop keeps only what its backward pass uses.
 */
#include "shdc.h"

static bool foldable(const Inst *def) {
  const OpDef *d = op_def(def->op);
  return def->op == IR_RESHARD || (d && (d->flags & OPF_OUT_SHARDING));
}

/* Whether the result of def (a reduction, contraction or reshard) may take
 * type t as its out_sharding: only the explicit axes may change, and a
 * reduction cannot be annotated reduced (typing-rules 1.5), nor a max/min
 * one unreduced. */
static bool takes_type(const Inst *def, const Type *t) {
  if (t->V != def->results[0]->type.V)
    return false;
  if (def->op == IR_REDUCE && t->R)
    return false;
  if (def->op == IR_REDUCE && def->fn != RED_SUM && t->U)
    return false;
  return true;
}

static bool same_shape(const Type *a, const Type *b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d])
      return false;
  return true;
}

/* Whether value x (used once, in block b) can be made to have type t by
 * changing the result types of the operations that compute it: one that
 * takes an out_sharding, a transpose of one (a contraction's result put in
 * its operand's dim order, as autodiff writes a weight gradient), a reshape
 * of one that only adds or drops size-1 dims (a bias's gradient), or, for
 * a pending type t, a sum of such (a weight used twice, as the tied
 * embedding: its two partial gradients add up pending, addition keeps a
 * pending sum, typing-rules 3.4, and one reduce-scatter follows). With
 * apply, makes it so. */
static bool fold_to(Value *x, const Type *t, IrBlock *b, const int *uses, int depth, bool apply) {
  Inst *def = x->def;
  if (!def || def->parent != b || uses[x->id] != 1 || depth > 8 || x->type.V != t->V)
    return false;
  const OpDef *d = op_def(def->op);
  if (foldable(def)) {
    if (!takes_type(def, t))
      return false;
  } else if (d && d->operand_for) {
    Type inner;
    if (!d->operand_for(def, t, &inner) || !fold_to(def->args[0], &inner, b, uses, depth + 1, apply))
      return false;
  } else if (def->op == IR_BINARY && (def->fn == BIN_ADD || def->fn == BIN_SUB) && !t->R && t->U &&
             same_shape(&def->args[0]->type, &x->type) && same_shape(&def->args[1]->type, &x->type)) {
    if (!fold_to(def->args[0], t, b, uses, depth + 1, false) || !fold_to(def->args[1], t, b, uses, depth + 1, false))
      return false;
    if (apply) {
      fold_to(def->args[0], t, b, uses, depth + 1, true);
      fold_to(def->args[1], t, b, uses, depth + 1, true);
    }
  } else {
    return false;
  }
  if (apply)
    def->results[0]->type = *t;
  return true;
}

static void fold_block(Module *mod, IrBlock *b, int *uses) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      fold_block(mod, in->regions[r], uses);
    if (in->op != IR_RESHARD)
      continue;
    Type t = in->results[0]->type;
    t.weak = false;
    Inst *def = in->args[0]->def;
    if (def && def->op == IR_BINARY && !t.R) {
      /* A sum of partial results stays pending: the terms skip their own
       * reductions, and the reshard reduces (or reduce-scatters) once. The
       * dims the sum already has split as the target keep their split; the
       * axes of the others become pending. */
      Type pend = t;
      const Type *now = &in->args[0]->type;
      for (int d = 0; d < t.rank; d++)
        if (!ty_spec_equal(t.spec[d], now->spec[d])) {
          pend.U |= ty_spec_axes(t.spec[d]);
          pend.spec[d].n = 0;
        }
      if (ty_dim_axes(&pend) & pend.U)
        continue;
      if (!ty_equal(&pend, &in->args[0]->type) && fold_to(in->args[0], &pend, b, uses, 0, false))
        fold_to(in->args[0], &pend, b, uses, 0, true);
      continue;
    }
    if (!fold_to(in->args[0], &t, b, uses, 0, false))
      continue;
    fold_to(in->args[0], &t, b, uses, 0, true);
    /* The reshard is now the identity: make it a view of its operand. */
    in->op = IR_RETYPE;
    in->results[0]->type = t;
  }
}

/* in's operands through repl (a value replaced by another, by id). */
static void rename_args(Inst *in, Value **repl) {
  for (int k = 0; k < in->nargs; k++)
    while (repl[in->args[k]->id])
      in->args[k] = repl[in->args[k]->id];
}

/* Drops retypes between equal types by rewiring their uses. */
static void forward_identity(IrBlock *b, Value **repl) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    rename_args(in, repl);
    for (int r = 0; r < in->nregions; r++)
      forward_identity(in->regions[r], repl);
    if (in->op == IR_RETYPE && ty_equal(&in->args[0]->type, &in->results[0]->type))
      repl[in->results[0]->id] = in->args[0];
  }
}

/* Collectives may go when unused: every rank drops them alike, since the
 * program is the same on every rank. I/O (OPF_EFFECT: load reports a bad
 * file even if unused), calls and control stay. */
static bool pure(const Inst *in) {
  switch (in->op) {
  case IR_CALL: case IR_FOR: case IR_IF: case IR_YIELD: case IR_RETURN: case IR_TAPE_PUSH: case IR_GRAD:
    return false;
  default: {
    const OpDef *d = op_def(in->op);
    return !d || !(d->flags & OPF_EFFECT);
  }
  }
}

static bool dce_block(IrBlock *b, int *uses) {
  bool changed = false;
  int k = 0;
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      changed |= dce_block(in->regions[r], uses);
    bool dead = pure(in) && in->nresults > 0;
    for (int j = 0; dead && j < in->nresults; j++)
      dead = uses[in->results[j]->id] == 0;
    if (dead) {
      for (int j = 0; j < in->nargs; j++)
        uses[in->args[j]->id]--;
      changed = true;
      continue;
    }
    b->insts.data[k++] = in;
  }
  b->insts.len = k;
  return changed;
}

/* The by-id scratch arrays are the module's, cleared after each function
 * (ir_clear_ids), so a pass costs time linear in the program. */
typedef struct {
  int *uses;
  Value **repl;
} Scratch;

static void each_func(Module *mod, void (*fn)(Module *, Func *, Scratch *)) {
  int n = mod->next_value + 1;
  Scratch sc = {calloc((size_t)n, sizeof(int)), calloc((size_t)n, sizeof(Value *))};
  for (int i = 0; i < mod->funcs.len; i++) {
    Func *f = mod->funcs.data[i];
    fn(mod, f, &sc);
    ir_clear_ids(f->body, sc.uses, sizeof(int));
    ir_clear_ids(f->body, sc.repl, sizeof(Value *));
  }
  free(sc.uses);
  free(sc.repl);
}

static void fold_func(Module *mod, Func *f, Scratch *sc) {
  ir_count_uses(f->body, sc->uses);
  fold_block(mod, f->body, sc->uses);
  forward_identity(f->body, sc->repl);
}

static void merge_all_reduces(IrBlock *b, int *uses) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      merge_all_reduces(in->regions[r], uses);
    Inst *def = in->op == IR_ALL_REDUCE ? in->args[0]->def : NULL;
    if (!def || def->op != IR_ALL_REDUCE || def->fn != in->fn || def->parent != b || uses[in->args[0]->id] != 1)
      continue;
    AxisSet axes = 0;
    for (int k = 0; k < def->naxes; k++)
      axes |= 1u << def->axes[k];
    for (int k = 0; k < in->naxes; k++)
      axes |= 1u << in->axes[k];
    in->naxes = 0;
    for (int a = 0; a < MAX_AXES; a++)
      if (axes & (1u << a))
        in->axes[in->naxes++] = a;
    uses[in->args[0]->id]--;
    in->args[0] = def->args[0];
    uses[in->args[0]->id]++;
  }
}

/* ---- one collective per value and target -------------------------------------------------- */

/* Whether two instructions compute the same value: the same operation,
 * operands, attributes and result type. */
static bool same_inst(const Inst *a, const Inst *b) {
  if (a->op != b->op || a->nargs != b->nargs || a->nresults != 1 || b->nresults != 1 || a->fn != b->fn ||
      a->dim != b->dim || a->dim2 != b->dim2 || a->shift != b->shift || a->ival != b->ival || a->mask != b->mask ||
      a->naxes != b->naxes || a->niv != b->niv || a->str != b->str || a->callee != b->callee ||
      memcmp(&a->fval, &b->fval, sizeof a->fval) || memcmp(a->perm, b->perm, sizeof a->perm) ||
      memcmp(a->axes, b->axes, sizeof a->axes) || memcmp(&a->dot, &b->dot, sizeof a->dot) ||
      !ty_equal(&a->results[0]->type, &b->results[0]->type))
    return false;
  for (int k = 0; k < a->nargs; k++)
    if (a->args[k] != b->args[k])
      return false;
  for (int k = 0; k < a->niv; k++)
    if (a->iv[k] != b->iv[k])
      return false;
  return true;
}

/* A collective whose twin was computed earlier in the same block, with no
 * other collective between them: the partitioner reshards each operand of
 * each operation on its own, so two operations that need the same value
 * gathered (the weight gradient and the input gradient of a layer both
 * read its output's cotangent, gathered over the sequence) would gather it
 * twice. A twin separated by other communication is left alone: that is a
 * deliberate second gather (ZeRO-3 gathers a weight again in the backward
 * pass rather than keeping it alive from the forward pass). */
static bool cse_candidate(const Inst *in) {
  const OpDef *d = op_def(in->op);
  return in->nresults == 1 && in->nregions == 0 && d && (d->flags & OPF_COLLECTIVE) && !(d->flags & OPF_EFFECT);
}

/* One pass in program order: uses are renamed through repl as they are met
 * (a value's uses all follow its definition), so the pass is linear. */
static void cse_collectives(IrBlock *b, Value **repl) {
  const Inst *prev = NULL;   /* the block's latest collective */
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    rename_args(in, repl);
    for (int r = 0; r < in->nregions; r++)
      cse_collectives(in->regions[r], repl);
    if (!cse_candidate(in))
      continue;
    if (prev && same_inst(prev, in))
      repl[in->results[0]->id] = prev->results[0];
    prev = in;
  }
}

static void dce_func(Module *mod, Func *f, Scratch *sc) {
  cse_collectives(f->body, sc->repl);
  ir_count_uses(f->body, sc->uses);
  merge_all_reduces(f->body, sc->uses);
  while (dce_block(f->body, sc->uses))
    ;
}

void opt_global(Module *mod) { each_func(mod, fold_func); }

void opt_module(Module *mod) { each_func(mod, dce_func); }

/* ---- residual tapes ---------------------------------------------------------------------------- */

/* Marks each tape that a tape_get reads. */
static void tapes_read(const IrBlock *b, bool *read) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_TAPE_GET)
      read[in->args[0]->id] = true;
    for (int r = 0; r < in->nregions; r++)
      tapes_read(in->regions[r], read);
  }
}

/* Drops the pushes onto tapes nobody reads, and the tapes themselves. */
static bool drop_unread(IrBlock *b, const bool *read) {
  bool changed = false;
  int k = 0;
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      changed |= drop_unread(in->regions[r], read);
    if ((in->op == IR_TAPE_PUSH && !read[in->args[0]->id]) || (in->op == IR_TAPE_NEW && !read[in->results[0]->id])) {
      changed = true;
      continue;
    }
    b->insts.data[k++] = in;
  }
  b->insts.len = k;
  return changed;
}

void opt_prune_tapes(Module *mod, Func *f) {
  int n = mod->next_value + 1;
  int *uses = calloc((size_t)n, sizeof(int));
  bool *read = calloc((size_t)n, sizeof(bool));
  for (bool again = true; again;) {
    memset(uses, 0, sizeof(int) * (size_t)n);
    ir_count_uses(f->body, uses);
    while (dce_block(f->body, uses))
      ;
    memset(read, 0, sizeof(bool) * (size_t)n);
    tapes_read(f->body, read);
    again = drop_unread(f->body, read);
  }
  free(read);
  free(uses);
}
