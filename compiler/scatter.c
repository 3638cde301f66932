/* scatter.c: a loop's gradient accumulator that is kept only in blocks after
 * the loop is reduce-scattered inside it (the sharded optimizer's gradients).
 *
 * The backward pass of a layer loop adds each iteration's all-reduced
 * gradient into an accumulator:
 *
 *     c' = dynamic_update_slice(c, dynamic_slice(c, i, 0..) + all_reduce(x) over A, i, 0..)
 *
 * (c + all_reduce(x) for a loop of one trip, whose window is all of c).
 * Where the loop's result is only kept in blocks of a dim d over the same
 * axes A after the loop (slice_block: the transpose of the parameters'
 * all-gather from their shards when a model is trained with its optimizer
 * state sharded over data, ZeRO), each rank needs only its block of each
 * sum. The all-reduce becomes a reduce-scatter of d, the accumulator its
 * block (1/|A| of the memory), the slice goes and the loop's result is the
 * block: the same sums, half the bytes (a reduce-scatter sends (G-1)/G of
 * the data, an all-reduce twice that), and the gradient, all-gather and
 * reduce-scatter of a sharded optimizer cost what data parallelism's
 * all-reduce does.
 *
 * Straight-line code gets the same: slice_block(all_reduce(x)) of the same
 * axes, the sum used only there, is reduce_scatter(x).
 *
 * Mixed precision (f32 master weights cast to bf16 for the forward pass):
 * a bf16 sum reaches the slice or the f32 accumulator through a widening
 * cast, which is exact and elementwise and so commutes with the slice:
 * the sum is reduce-scattered in bf16 (half the bytes) and the cast
 * widens this rank's block. A slice of a + b (a tied weight's two
 * gradients; a gradient's bf16 and f32 parts) is first pushed into both
 * operands, each then a candidate.
 *
 * The pass runs on the SPMD IR after opt_module and before overlap.c (which
 * then buckets a loop's reduce-scatters as it does its all-reduces). Global
 * shapes do not change: each rewritten value's type gains the slice's
 * sharding at its dim. */
#include "shdc.h"

typedef struct {
  int *uses;           /* by value id, over the function */
  Inst **user;         /* by value id: the (innermost) instruction that uses it last */
  int n;
  Vec sites;           /* Inst *: the function's for loops and block slices */
} Sc;

static void walk(Sc *s, IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      s->uses[in->args[k]->id]++;
      s->user[in->args[k]->id] = in;
    }
    if (in->op == IR_FOR || in->op == IR_SLICE_BLOCK)
      vec_push(&s->sites, in);
    for (int r = 0; r < in->nregions; r++)
      walk(s, in->regions[r]);
  }
}

/* The sole user of v, or NULL. */
static Inst *sole(const Sc *s, const Value *v) { return s->uses[v->id] == 1 ? s->user[v->id] : NULL; }

static bool is_zero_const(const Value *v) {
  return v->def && v->def->op == IR_CONST && v->type.rank == 0 && v->def->ival == 0 && v->def->fval == 0;
}

/* The dim of from's shape holding dim d of to's, for a reshape that only
 * adds or drops dims of size 1 (the same bytes in the same order), or -1. */
static int unit_view_dim(const Type *from, const Type *to, int d) {
  if (to->shape[d] == 1)
    return -1;
  int k = 0, a = 0, b = 0;
  for (int j = 0; j < d; j++)
    k += to->shape[j] != 1;
  for (; a < from->rank || b < to->rank; a++, b++) {
    while (a < from->rank && from->shape[a] == 1)
      a++;
    while (b < to->rank && to->shape[b] == 1)
      b++;
    if ((a < from->rank) != (b < to->rank) || (a < from->rank && from->shape[a] != to->shape[b]))
      return -1;
  }
  for (a = 0; a < from->rank; a++)
    if (from->shape[a] != 1 && k-- == 0)
      return a;
  return -1;
}

static void reshard_dim(Value *v, int d, DimSpec sp) { v->type.spec[d] = sp; }

/* The axes of a dim's sharding that split it (size > 1). */
static DimSpec splitting(const Mesh *m, DimSpec sp) {
  DimSpec r = {0};
  for (int i = 0; i < sp.n; i++)
    if (m->sizes[sp.axes[i]] > 1)
      r.axes[r.n++] = sp.axes[i];
  return r;
}

/* Whether a slice of a dim sharded as `was` makes it `now`: more axes after
 * those it had (each rank keeps a block of its block). */
static bool splits_further(const Mesh *m, DimSpec was, DimSpec now) {
  was = splitting(m, was);
  now = splitting(m, now);
  return was.n < now.n && memcmp(was.axes, now.axes, (size_t)was.n * sizeof was.axes[0]) == 0;
}

/* Every use of old in b (nested blocks included) becomes new. */
static void replace_uses(IrBlock *b, const Value *old, Value *new) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      if (in->args[k] == old)
        in->args[k] = new;
    for (int r = 0; r < in->nregions; r++)
      replace_uses(in->regions[r], old, new);
  }
}

/* The slice S leaves its block; its users (there) take by instead. */
static void drop_slice(Inst *S, Value *by) {
  IrBlock *b = S->parent;
  int at = 0;
  while (b->insts.data[at] != S)
    at++;
  for (int k = at + 1; k < b->insts.len; k++)
    b->insts.data[k - 1] = b->insts.data[k];
  b->insts.len--;
  replace_uses(b, S->results[0], by);
}

/* slice_block(a + b), the sum used only there: slice_block(a) +
 * slice_block(b), each slice then a candidate (a tied weight's two
 * gradients, or a gradient's widened bf16 part and its f32 part). The
 * slices are appended to sites. */
static bool push_through_add(Sc *s, Module *mod, Inst *S) {
  Value *r = S->args[0];
  Inst *add = r->def;
  if (!add || add->op != IR_BINARY || add->fn != BIN_ADD || add->nargs != 2 || add->parent != S->parent ||
      s->uses[r->id] != 1)
    return false;
  for (int k = 0; k < 2; k++)
    if (!ty_equal(&add->args[k]->type, &r->type))
      return false;
  Type t = r->type;   /* the sum's sharding, d split as the slice splits it */
  t.spec[S->dim] = S->results[0]->type.spec[S->dim];
  for (int k = 0; k < 2; k++) {
    Inst *sk = ir_emit(mod, NULL, IR_SLICE_BLOCK, S->pos, 1, &add->args[k], 1, &t);
    ir_copy_attrs(sk, S);
    ir_insert_at(add->parent, ir_index_of(add->parent, add), sk);
    add->args[k] = sk->results[0];
    vec_push(&s->sites, sk);
  }
  add->results[0]->type = t;
  if (ty_equal(&t, &S->results[0]->type))
    drop_slice(S, r);
  else
    S->op = IR_RETYPE;   /* the slice's type where it drops an axis of size 1: the same block */
  return true;
}

/* The pattern for carry j of loop F, rewritten if it matches. */
static bool try_carry(Sc *s, Module *mod, Inst *F, int j) {
  IrBlock *y = F->regions[0], *outer = F->parent;
  Value *c = y->args[j], *R = F->results[j - 1];
  Inst *S = sole(s, R), *wc = NULL;
  if (ir_is_widen(S) && S->parent == outer) {   /* a bf16 accumulator widened after the loop */
    wc = S;
    S = sole(s, wc->results[0]);
  }
  if (!S || S->op != IR_SLICE_BLOCK || S->parent != outer || S->args[0] != (wc ? wc->results[0] : R))
    return false;
  int d = S->dim, rank = c->type.rank;
  if (d < 0 || d >= rank || !splits_further(&mod->mesh, c->type.spec[d], S->results[0]->type.spec[d]) || s->uses[c->id] != 2)
    return false;
  int64_t local = ty_local_dim(&mod->mesh, &c->type, d);   /* the views' and the sum's dim, before */
  Inst *yield = y->insts.data[y->insts.len - 1];
  Value *nc = yield->op == IR_YIELD ? yield->args[j - 1] : NULL;
  Inst *up = nc ? nc->def : NULL;
  if (!up || up->parent != y || !(op_def(up->op)->flags & OPF_WINDOW_WRITE))
    return false;
  if (up->args[0] != c || sole(s, nc) != yield)
    return false;
  Value *sum = up->args[1];
  Inst *add = sum->def;
  if (!add || add->parent != y || add->op != IR_BINARY || add->fn != BIN_ADD || add->nargs != 2 || sole(s, sum) != up)
    return false;
  /* The window read of c, or c itself where the window is all of it (a
   * loop of one trip: the optimiser folds the dynamic_slice away). */
  int side = add->args[0] == c || (add->args[0]->def && add->args[0]->def->args[0] == c) ? 0 : 1;
  Value *win = add->args[side], *part = add->args[1 - side];
  Inst *ds = win == c ? NULL : win->def;
  if (ds && (ds->parent != y || !(op_def(ds->op)->flags & OPF_WINDOW_READ) || ds->args[0] != c ||
             sole(s, win) != add || !is_zero_const(ds->args[1 + d])))
    return false;
  if ((win != c && !ds) || !is_zero_const(up->args[2 + d]) || win->type.shape[d] != c->type.shape[d])
    return false;
  /* Back from the addend through views of the same bytes (and a widening
   * cast: a bf16 sum into an f32 accumulator) to the all-reduce. */
  Inst *views[ACC_VIEWS];
  int nviews = 0, dd = d;
  Value *v = part;
  while (v->def && v->def->parent == y && (v->def->op == IR_RESHAPE || v->def->op == IR_RETYPE || ir_is_widen(v->def)) &&
         nviews < ACC_VIEWS) {
    if (ty_local_dim(&mod->mesh, &v->type, dd) != local)
      return false;
    if (v->def->op != IR_CAST)
      dd = unit_view_dim(&v->def->args[0]->type, &v->type, dd);
    if (dd < 0 || s->uses[v->id] != 1)
      return false;
    views[nviews++] = v->def;
    v = v->def->args[0];
  }
  Inst *ar = v->def;
  if (!ar || ar->parent != y || ar->op != IR_ALL_REDUCE || ar->fn != RED_SUM || s->uses[v->id] != 1 ||
      ar->naxes != S->naxes || memcmp(ar->axes, S->axes, sizeof(int) * (size_t)S->naxes) ||
      ty_local_dim(&mod->mesh, &ar->args[0]->type, dd) != local || ar->args[0]->type.shape[dd] != c->type.shape[d])
    return false;
  /* Rewrite: the slice moves to the accumulator's initial value. */
  DimSpec sp = S->results[0]->type.spec[d];
  Value *init = F->args[1 + j];
  Type st = S->results[0]->type;
  st.dtype = init->type.dtype;   /* the accumulator's (bf16 where the loop's result is widened) */
  Inst *sl = ir_emit(mod, outer, IR_SLICE_BLOCK, S->pos, 1, &init, 1, &st);
  ir_copy_attrs(sl, S);
  outer->insts.len--;
  ir_insert_at(outer, ir_index_of(outer, F), sl);
  F->args[1 + j] = sl->results[0];
  reshard_dim(c, d, sp);
  reshard_dim(R, d, sp);
  reshard_dim(nc, d, sp);
  if (win != c)
    reshard_dim(win, d, sp);
  reshard_dim(sum, d, sp);
  int vd = d;
  for (int k = 0; k < nviews; k++) {
    reshard_dim(views[k]->results[0], vd, sp);
    if (views[k]->op != IR_CAST)
      vd = unit_view_dim(&views[k]->args[0]->type, &views[k]->results[0]->type, vd);
  }
  ar->op = IR_REDUCE_SCATTER;
  ar->dim = dd;
  reshard_dim(ar->results[0], dd, sp);
  if (wc)
    reshard_dim(wc->results[0], d, sp);   /* the widening applies to the block */
  drop_slice(S, wc ? wc->results[0] : R);   /* the slice's users take the loop's result */
  return true;
}

/* slice_block(all_reduce(x) over A) of dim d over A, the sum used only
 * there: reduce_scatter(x) of d (the straight-line form, e.g. a gathered
 * parameter used outside the layer loop). Between the sum and the slice
 * may be retypes (the same block on each rank) and a widening cast: they
 * apply to the block. */
static bool try_slice(Sc *s, const Module *mod, Inst *S) {
  Value *r = S->args[0];
  Inst *ar = r->def, *between[4];
  int d = S->dim, n = 0;
  bool wide = false;
  const Value *last = r;
  while (ar && ar->parent == S->parent && n < 4 && (ar->op == IR_RETYPE || (ir_is_widen(ar) && !wide)) &&
         s->uses[last->id] == 1 && ty_local_dim(&mod->mesh, &ar->args[0]->type, d) == ty_local_dim(&mod->mesh, &last->type, d) &&
         ar->args[0]->type.rank == last->type.rank) {
    wide |= ar->op == IR_CAST;
    between[n++] = ar;
    last = ar->args[0];
    ar = last->def;
  }
  if (!ar || ar->op != IR_ALL_REDUCE || ar->fn != RED_SUM || ar->parent != S->parent || s->uses[last->id] != 1 ||
      (!n && sole(s, r) != S) || ar->naxes != S->naxes ||
      memcmp(ar->axes, S->axes, sizeof(int) * (size_t)S->naxes) ||
      ar->args[0]->type.rank != S->results[0]->type.rank ||
      ty_local_dim(&mod->mesh, &ar->args[0]->type, d) != ty_local_dim(&mod->mesh, &r->type, d) ||
      !splits_further(&mod->mesh, r->type.spec[d], S->results[0]->type.spec[d]))
    return false;
  for (int k = 0; k < n; k++)   /* each already splits d as the sum does (the same local dim) */
    if (memcmp(&between[k]->results[0]->type.spec[d], &r->type.spec[d], sizeof(DimSpec)))
      return false;
  DimSpec sp = S->results[0]->type.spec[d];
  ar->op = IR_REDUCE_SCATTER;
  ar->dim = d;
  reshard_dim(ar->results[0], d, sp);
  for (int k = 0; k < n; k++)
    reshard_dim(between[k]->results[0], d, sp);
  drop_slice(S, r);
  return true;
}

/* The use maps of fn's values, from scratch. */
static void count_uses(Sc *s, Module *mod, Func *fn) {
  int n = mod->next_value + 1;   /* the maps grow with the values the pass made */
  s->uses = mem_resize(s->uses, s->n, n, sizeof(int));
  s->user = mem_resize(s->user, s->n, n, sizeof(Inst *));
  s->n = n;
  ir_clear_ids(fn->body, s->uses, sizeof(int));
  ir_clear_ids(fn->body, s->user, sizeof(Inst *));
  s->sites.len = 0;
  walk(s, fn->body);
}

void scatter_accumulators(Module *mod) {
  Sc s = {0};
  for (int f = 0; f < mod->funcs.len; f++) {
    Func *fn = mod->funcs.data[f];
    count_uses(&s, mod, fn);
    bool pushed = false;
    for (int i = 0; i < s.sites.len; i++)   /* grows with the slices pushed through sums */
      if (((Inst *)s.sites.data[i])->op == IR_SLICE_BLOCK)
        pushed |= push_through_add(&s, mod, s.sites.data[i]);
    if (pushed)
      count_uses(&s, mod, fn);
    for (int i = 0; i < s.sites.len; i++) {
      Inst *F = s.sites.data[i];
      for (int j = 1; F->op == IR_FOR && j < F->regions[0]->nargs; j++)
        try_carry(&s, mod, F, j);
    }
    for (int i = 0; i < s.sites.len; i++) {   /* after the loops: try_carry removes the slices it takes */
      Inst *S = s.sites.data[i];
      if (S->op == IR_SLICE_BLOCK && S->args[0]->def &&
          (S->args[0]->def->op == IR_ALL_REDUCE || S->args[0]->def->op == IR_RETYPE || ir_is_widen(S->args[0]->def)))
        try_slice(&s, mod, S);
    }
    int n = mod->next_value + 1;
    s.uses = mem_resize(s.uses, s.n, n, sizeof(int));
    s.user = mem_resize(s.user, s.n, n, sizeof(Inst *));
    s.n = n;
    ir_clear_ids(fn->body, s.uses, sizeof(int));
    ir_clear_ids(fn->body, s.user, sizeof(Inst *));
  }
  free(s.sites.data);
  free(s.uses);
  free(s.user);
}
