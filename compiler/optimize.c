/* optimize.c: rewrites that make the partitioned program cheaper without
 * changing any value.
 *
 * Before partitioning (opt_global):
 *   - a sum of several products or scatter-adds that each leave a partial
 *     sum over the same axes (contracting dims split alike on both sides,
 *     indices split), which the partitioner would reduce one by one, is
 *     summed while pending and reduced once: autodiff builds these where a
 *     value replicated over an axis feeds several products whose weights
 *     are split over it (the Megatron block input feeding Q, K, V or gate
 *     and up), so the backward pass all-reduces each such value once, as
 *     Megatron-LM does, and for a tied embedding (its lookup's gradient
 *     and its output product's, both pending over the batch's axes).
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
 * both groups of axes; a scatter-add used only by an addition adds into the
 * addition's other operand (OPF_ADDS_INTO); dead pure instructions are
 * removed.
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

/* ---- one reduction for a sum of pending products ------------------------------------------- */

/* The mesh axes over which the local product computing v (used once, in
 * b) leaves a partial sum before the partitioner reduces it to v's type:
 * a contraction whose contracting dims are split alike on both operands
 * (the Megatron input gradient: the cotangent of a column-parallel
 * product's output against its weight, both split over the hidden dim),
 * also through a transpose or a size-1 reshape of it (fold_to's forms).
 * 0 when there is none, or when v's type already uses those axes. */
static AxisSet natural_pending(const Value *v, const IrBlock *b, const int *uses) {
  const Inst *d = v->def;
  if (!d || d->parent != b || uses[v->id] != 1 || v->type.U || v->type.R)
    return 0;
  const OpDef *od = op_def(d->op);
  Type operand;
  if (od && od->operand_for)   /* a transpose, a size-1 reshape */
    return od->operand_for(d, &v->type, &operand) ? natural_pending(d->args[0], b, uses) : 0;
  AxisSet A = od && od->partial_axes ? od->partial_axes(d) : 0;
  return A & (ty_dim_axes(&v->type) | v->type.V) ? 0 : A;
}

typedef struct {
  Value *v;
  bool neg;
} Term;

/* The terms of the sum rooted at `in` (+ and - of one type, inner sums
 * used once in b), in order. */
static void sum_terms(Inst *in, const IrBlock *b, const int *uses, Vec *terms, Vec *inner, bool neg) {
  for (int k = 0; k < 2; k++) {
    Value *a = in->args[k];
    bool n = neg ^ (k == 1 && in->fn == BIN_SUB);
    Inst *d = a->def;
    if (d && d->parent == b && d->op == IR_BINARY && (d->fn == BIN_ADD || d->fn == BIN_SUB) && uses[a->id] == 1 &&
        ty_equal(&a->type, &in->results[0]->type)) {
      vec_push(inner, d);
      sum_terms(d, b, uses, terms, inner, n);
      continue;
    }
    Term *t = arena_alloc(sizeof *t);
    *t = (Term){a, n};
    vec_push(terms, t);
  }
}

static bool is_sum(const Inst *in) {
  return in->op == IR_BINARY && (in->fn == BIN_ADD || in->fn == BIN_SUB) && in->nresults == 1 &&
         in->results[0]->type.kind == TY_ARRAY;
}

static Inst *new_inst(Module *mod, IrBlock *b, int op, Pos pos, int n, Value **args, Type t, Vec *out) {
  Inst *in = ir_emit(mod, NULL, op, pos, n, args, 1, &t);
  in->parent = b;
  vec_push(out, in);
  return in;
}

/* A sum of several terms that are each a product's partial sum over the
 * same axes A, reduced one by one to the sum's type by the partitioner,
 * becomes one pending sum reduced once: the terms take the pending type
 * (as fold_to types them), are added while pending, one reshard reduces
 * them, and the other terms are added after it. Autodiff builds such sums
 * where a value replicated over A feeds several products whose weights
 * are split over A (Megatron's Q, K, V or gate and up projections): one
 * all-reduce per value instead of one per product. The new instructions
 * take the root's place; the root's uses are renamed through `renamed`. */
static bool pend_sum(Module *mod, IrBlock *b, Inst *root, int *uses, Vec *out, PtrMap *renamed, Vec *to) {
  Type T = root->results[0]->type;
  if (T.U || T.R || T.weak)
    return false;
  Vec terms = {0}, inner = {0};
  sum_terms(root, b, uses, &terms, &inner, false);
  /* the axes most terms are pending over */
  AxisSet best = 0;
  int nbest = 0;
  for (int i = 0; i < terms.len; i++) {
    Term *t = terms.data[i];
    AxisSet A = t->neg || !ty_equal(&t->v->type, &T) ? 0 : natural_pending(t->v, b, uses);
    int n = 0;
    for (int j = 0; A && j < terms.len; j++) {
      Term *u = terms.data[j];
      n += !u->neg && ty_equal(&u->v->type, &T) && natural_pending(u->v, b, uses) == A;
    }
    if (n > nbest) {
      nbest = n;
      best = A;
    }
  }
  Type P = T;
  P.U |= best;
  bool *in_group = mem_calloc((size_t)terms.len + 1, sizeof(bool));
  int ngroup = 0;
  for (int i = 0; best && i < terms.len; i++) {
    Term *t = terms.data[i];
    in_group[i] = !t->neg && ty_equal(&t->v->type, &T) && natural_pending(t->v, b, uses) == best &&
                  fold_to(t->v, &P, b, uses, 0, false);
    ngroup += in_group[i];
  }
  /* the other terms must add back to T as they did */
  for (int i = 0; ngroup >= 2 && i < terms.len; i++) {
    Term *t = terms.data[i];
    /* T op term, typed by the registry (the IR_BINARY the sum is made of) */
    Inst probe = {.op = IR_BINARY, .fn = t->neg ? BIN_SUB : BIN_ADD, .nargs = 2,
                  .args = (Value *[]){root->results[0], t->v}};
    Type r = {0};
    if (!in_group[i] && (!ir_infer(mod, &probe, &r) || !ty_equal(&r, &T)))
      ngroup = 0;
  }
  bool done = ngroup >= 2;
  if (done) {
    Value *s = NULL;
    for (int i = 0; i < terms.len; i++) {
      if (!in_group[i])
        continue;
      Term *t = terms.data[i];
      fold_to(t->v, &P, b, uses, 0, true);
      s = s ? new_inst(mod, b, IR_BINARY, root->pos, 2, (Value *[]){s, t->v}, P, out)->results[0] : t->v;
      if (s != t->v)
        s->def->fn = BIN_ADD;
    }
    Value *r = new_inst(mod, b, IR_RESHARD, root->pos, 1, &s, T, out)->results[0];
    for (int i = 0; i < terms.len; i++) {
      Term *t = terms.data[i];
      if (in_group[i])
        continue;
      Inst *a = new_inst(mod, b, IR_BINARY, root->pos, 2, (Value *[]){r, t->v}, T, out);
      a->fn = t->neg ? BIN_SUB : BIN_ADD;
      r = a->results[0];
    }
    /* the old sum's inner nodes are dead: dropped with the root */
    for (int i = 0; i < inner.len; i++)
      ((Inst *)inner.data[i])->op = IR__CORE;
    ptrmap_put(renamed, root->results[0], to->len);
    vec_push(to, r);
  }
  free(in_group);
  free(terms.data);
  free(inner.data);
  return done;
}

static void pend_sums_block(Module *mod, IrBlock *b, int *uses, PtrMap *renamed, Vec *to) {
  Vec out = {0};
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      pend_sums_block(mod, in->regions[r], uses, renamed, to);
  }
  /* A sum used once by a sum of the same type is a term of that one: only
   * the outermost sums are roots. */
  PtrMap inner = {0};
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; is_sum(in) && k < 2; k++) {
      Inst *d = in->args[k]->def;
      if (d && d->parent == b && is_sum(d) && uses[in->args[k]->id] == 1 &&
          ty_equal(&in->args[k]->type, &in->results[0]->type))
        ptrmap_put(&inner, d, 1);
    }
  }
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR__CORE)
      continue;
    if (is_sum(in) && ptrmap_get(&inner, in) < 0 && pend_sum(mod, b, in, uses, &out, renamed, to))
      continue;
    vec_push(&out, in);
  }
  /* drop the dead inner sums marked above (they precede their roots) */
  int k = 0;
  for (int i = 0; i < out.len; i++)
    if (((Inst *)out.data[i])->op != IR__CORE)
      out.data[k++] = out.data[i];
  out.len = k;
  free(b->insts.data);
  b->insts = out;
  ptrmap_free(&inner);
}

static void rename_block(IrBlock *b, const PtrMap *renamed, const Vec *to) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      int j;
      while ((j = ptrmap_get(renamed, in->args[k])) >= 0)
        in->args[k] = to->data[j];
    }
    for (int r = 0; r < in->nregions; r++)
      rename_block(in->regions[r], renamed, to);
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
  Scratch sc = {mem_calloc((size_t)n, sizeof(int)), mem_calloc((size_t)n, sizeof(Value *))};
  for (int i = 0; i < mod->funcs.len; i++) {
    Func *f = mod->funcs.data[i];
    fn(mod, f, &sc);
    if (mod->next_value + 1 > n) {
      /* the pass made values: their (zero) entries, for the clearing below */
      int m = mod->next_value + 1;
      sc.uses = mem_resize(sc.uses, n, m, sizeof *sc.uses);
      sc.repl = mem_resize(sc.repl, n, m, sizeof *sc.repl);
      n = m;
    }
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

static void pend_func(Module *mod, Func *f, Scratch *sc) {
  ir_count_uses(f->body, sc->uses);
  PtrMap renamed = {0};
  Vec to = {0};
  pend_sums_block(mod, f->body, sc->uses, &renamed, &to);
  if (to.len)
    rename_block(f->body, &renamed, &to);
  ptrmap_free(&renamed);
  free(to.data);
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

/* ---- scatter-adds into a sum ------------------------------------------------------------------ */

/* The scatter-add (OPF_ADDS_INTO) that computes term v of a sum in b, used
 * only there, or through a retype that drops a pending state over a size-1
 * axis; NULL when v is not one. */
static Inst *scatter_term(Value *v, const IrBlock *b, const int *uses) {
  Inst *d = v->def;
  if (d && d->op == IR_RETYPE && d->parent == b && uses[v->id] == 1)
    v = d->args[0], d = v->def;
  const OpDef *od = d ? op_def(d->op) : NULL;
  return od && (od->flags & OPF_ADDS_INTO) && d->parent == b && uses[v->id] == 1 ? d : NULL;
}

/* Moves b's instruction `in` from index j to index i (j < i). */
static void move_inst(IrBlock *b, int j, int i) {
  Inst *in = b->insts.data[j];
  memmove(&b->insts.data[j], &b->insts.data[j + 1], sizeof(Inst *) * (size_t)(i - j));
  b->insts.data[i] = in;
}

/* `a + s` where s is a scatter-add of a's shape (scatter_term): the
 * addition becomes the scatter with a as its base (operands a, g, idx),
 * which adds g's rows into a's buffer, and the zero-filled scatter dies.
 * When s already has a base c, `a + scatter(c, g, idx)` becomes
 * `scatter(a + c, g, idx)`: s's instruction turns into the inner sum, moved
 * to just before, and is visited again, so a chain of scatters adds into
 * the one whole gradient. Autodiff builds these sums wherever a value is
 * both picked or looked up and used whole: the cross-entropy's logits
 * (logsumexp's gradient plus the pick's scatter), a tied embedding (the
 * lookup's scatter plus the output product's gradient). A scatter's
 * operands are defined before it, so before the addition. */
static void scatter_into_sums(IrBlock *b, int *uses) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      scatter_into_sums(in->regions[r], uses);
    if (!is_sum(in) || in->fn != BIN_ADD || !ty_is_float(in->results[0]->type.dtype))
      continue;
    const Type *rt = &in->results[0]->type;
    for (int k = 0; k < 2; k++) {
      Value *a = in->args[1 - k];
      Inst *sc = scatter_term(in->args[k], b, uses);
      if (!sc || a == in->args[k] || !ty_equal(&a->type, rt) || !same_shape(&sc->results[0]->type, rt))
        continue;
      Inst scatter = *sc;   /* its attributes; its args array is sc's own */
      Value *c = sc->args[0], **args = arena_alloc(sizeof(Value *) * 4);
      args[0] = a, args[1] = sc->args[sc->nargs - 2], args[2] = sc->args[sc->nargs - 1];
      if (sc->nargs == 3) {
        if (sc->results[0] != in->args[k] || !ty_equal(&sc->results[0]->type, rt))
          continue;
        int j = 0;
        while (b->insts.data[j] != sc)
          j++;
        move_inst(b, j, i - 1);
        ir_copy_attrs(sc, in);
        sc->op = IR_BINARY, sc->pos = in->pos, sc->nargs = 2;
        sc->args[0] = a, sc->args[1] = c;
        args[0] = sc->results[0];
        i -= 2;   /* the moved sum next */
      } else {
        uses[in->args[k]->id]--;
        uses[args[1]->id]++;
        uses[args[2]->id]++;
      }
      ir_copy_attrs(in, &scatter);
      in->op = scatter.op, in->pos = scatter.pos, in->args = args, in->nargs = 3;
      break;
    }
  }
}

static void dce_func(Module *mod, Func *f, Scratch *sc) {
  cse_collectives(f->body, sc->repl);
  ir_count_uses(f->body, sc->uses);
  merge_all_reduces(f->body, sc->uses);
  scatter_into_sums(f->body, sc->uses);
  while (dce_block(f->body, sc->uses))
    ;
}

void opt_global(Module *mod) {
  each_func(mod, pend_func);
  each_func(mod, fold_func);
}

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
  int *uses = mem_calloc((size_t)n, sizeof(int));
  bool *read = mem_calloc((size_t)n, sizeof(bool));
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
