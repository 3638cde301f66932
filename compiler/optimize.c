/* optimize.c: rewrites that make the partitioned program cheaper without
 * changing any value.
 *
 * Before partitioning (opt_global):
 *   - a reshard whose operand is a reduction, contraction or reshape used
 *     nowhere else becomes that operation's result type, as if the program
 *     had annotated it (language.md §4): sum-then-slice becomes a
 *     reduce-scatter, gather-then-compute becomes compute-then-reduce.
 *     Autodiff produces this pattern for the gradient of a sharded weight
 *     that was gathered in the forward pass.
 *   - chains of reshards collapse into one.
 *
 * After partitioning (opt_module): an all-reduce of an all-reduce (same
 * operation, its only use) becomes one all-reduce over both groups of axes;
 * dead pure instructions are removed.
 */
#include "shdc.h"

static bool foldable(const Inst *def) {
  return def->op == IR_REDUCE || def->op == IR_DOT || def->op == IR_RESHARD;
}

static void fold_block(Module *mod, IrBlock *b, int *uses) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      fold_block(mod, in->regions[r], uses);
    if (in->op != IR_RESHARD)
      continue;
    Value *x = in->args[0];
    Inst *def = x->def;
    if (!def || def->parent != b || uses[x->id] != 1 || !foldable(def))
      continue;
    /* Only the explicit axes may change; a reduction cannot be annotated
     * reduced (typing-rules 1.5), so keep R as a reshard after it. */
    const Type *to = &in->results[0]->type;
    if (to->V != x->type.V)
      continue;
    Type t = *to;
    if (def->op == IR_REDUCE && t.R)
      continue;
    if (def->op == IR_REDUCE && def->fn != RED_SUM && t.U)
      continue;
    def->results[0]->type = t;
    /* The reshard is now the identity: make it a view of its operand. */
    in->op = IR_RETYPE;
    in->results[0]->type = t;
  }
}

/* Drops retypes between equal types by rewiring their uses. */
static void forward_identity(IrBlock *b, Value **repl) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      while (repl[in->args[k]->id])
        in->args[k] = repl[in->args[k]->id];
    for (int r = 0; r < in->nregions; r++)
      forward_identity(in->regions[r], repl);
    if (in->op == IR_RETYPE && ty_equal(&in->args[0]->type, &in->results[0]->type))
      repl[in->results[0]->id] = in->args[0];
  }
}

static bool pure(const Inst *in) {
  switch (in->op) {
  case IR_PRINT: case IR_SAVE: case IR_CALL: case IR_FOR: case IR_IF: case IR_YIELD: case IR_RETURN:
  case IR_TAPE_PUSH: case IR_GRAD: case IR_LOAD: case IR_CLOCK:   /* load reports a bad file even if unused */
    return false;
  /* Collectives must run on every rank even if unused here: all ranks
   * drop them alike, since the program is the same on every rank. */
  default:
    return true;
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

static void each_func(Module *mod, void (*fn)(Module *, Func *)) {
  for (int i = 0; i < mod->funcs.len; i++)
    fn(mod, mod->funcs.data[i]);
}

static void fold_func(Module *mod, Func *f) {
  int n = mod->next_value + 1;
  int *uses = calloc((size_t)n, sizeof(int));
  ir_count_uses(f->body, uses);
  fold_block(mod, f->body, uses);
  Value **repl = calloc((size_t)n, sizeof(Value *));
  forward_identity(f->body, repl);
  free(repl);
  free(uses);
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

static void dce_func(Module *mod, Func *f) {
  int n = mod->next_value + 1;
  int *uses = calloc((size_t)n, sizeof(int));
  ir_count_uses(f->body, uses);
  merge_all_reduces(f->body, uses);
  while (dce_block(f->body, uses))
    ;
  free(uses);
}

void opt_global(Module *mod) { each_func(mod, fold_func); }

void opt_module(Module *mod) { each_func(mod, dce_func); }
