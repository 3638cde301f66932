/* autodiff.c: grad and value_and_grad as a source transformation of the
 * global-view IR (typing-rules section 4).
 *
 * For each distinct grad(f, wrt=...) the pass builds one function G with f's
 * parameters. G's body is f's body with every call inlined (manual bodies
 * included: the boundary is a retype, the same bytes), then the reverse
 * sweep: each instruction's vector-Jacobian product, last to first. Every
 * cotangent has the type of section 4.1 (the primal's, with U and R
 * swapped), and each backward operation is given the cotangent type of the
 * operand it differentiates as its result type (its out_sharding), so the
 * partitioner inserts exactly the collectives the primal types imply: the
 * all-reduce of data parallelism, the reduce-scatter of FSDP, the
 * all-reduce that transposes pcast(to=varying).
 *
 * Loops: the forward loop saves its carries on a tape, one entry per
 * iteration, and the results of the body's costly operations (contractions,
 * reductions, reshards and every other operation that may communicate or
 * is not a fusable elementwise one) that depend on the carries: its
 * residuals, as JAX's scan saves them (what depends only on outer values,
 * such as a layer's weights gathered from their shards, is recomputed). The reverse loop runs the iterations backwards, takes the residuals
 * from their tapes and recomputes only the cheap elementwise code between
 * them (which fuses into the backward's loops), then backpropagates through
 * the body, carrying the cotangents of the carries and of the outer values
 * the body reads. So a layer loop communicates and multiplies matrices in
 * the backward pass exactly as an unrolled one; residual tapes that the
 * backward does not read are dropped (opt_prune_tapes). A branch in a
 * taped loop saves its residuals and results on the loop's tapes (pushed
 * when taken), and a nested loop with a constant trip count keeps its tapes
 * beside the outer loop's (entry outer * trips + inner), so the reverse
 * runs it backward without its forward. Elsewhere a branch is recomputed
 * in the reverse; under a condition that varies across devices,
 * an active cast whose transpose all-reduces is an error [E_GRAD].
 * Recomputed code drops print and save.
 *
 * Masks, tie counts and other values computed from primal values keep the
 * primal's states, so a pending (unreduced) cotangent of a reduced value
 * meets only reduced partners and stays pending: no VJP communicates
 * beyond what the types ask for.
 *
 * This file holds the machinery (activity, accumulation, tapes, loops,
 * branches; copying code with inlining is ad_clone.c's) and the builders
 * that the families' VJPs use; each operation's own VJP is its OpDef.vjp,
 * in its family's file.
 *
 * A grad inside a differentiated function is built first and inlined like
 * any call: second derivatives work, except through a loop (the inner
 * gradient's tape is not differentiated: [E_GRAD]).
 */
#include "ad_internal.h"

/* The by-id arrays, grown together (new entries zero) to every value id. */
void ad_grow(AD *a) {
  int old = a->cap;
  a->ct = mem_grow(a->ct, &a->cap, a->mod->next_value + 1, sizeof *a->ct);
  if (a->cap == old)
    return;
  a->rm = mem_resize(a->rm, old, a->cap, sizeof *a->rm);
  a->active = mem_resize(a->active, old, a->cap, sizeof *a->active);
}

void ad_fail(AD *a, Pos pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, "E_GRAD", fmt, ap);
  va_end(ap);
  if (a->grad_pos.file && (a->grad_pos.line != pos.line || a->grad_pos.col != pos.col))
    diag_note(a->grad_pos, "in the gradient of %s taken here", a->fname);
  a->failed = true;
}

const Mesh *ad_mesh(AD *a) { return a->m; }

/* The value a primal value has in the code being emitted. */
Value *ad_primal(AD *a, Value *v) {
  ad_grow(a);
  return a->rm[v->id] ? a->rm[v->id] : v;
}

/* ---- emitting typed instructions ---------------------------------------------------- */

Inst *ad_emit(AD *a, int op, int n, Value **args, Type t) {
  Inst *in = ir_emit(a->mod, a->b, op, a->pos, n, args, 1, &t);
  ad_grow(a);
  return in;
}

Value *ad_emit1(AD *a, int op, int n, Value **args, Type t) { return ad_emit(a, op, n, args, t)->results[0]; }

Inst *ad_emit_n(AD *a, int op, int n, Value **args, int nresults, const Type *types) {
  Inst *in = ir_emit(a->mod, a->b, op, a->pos, n, args, nresults, types);
  ad_grow(a);
  return in;
}

Value *ad_const(AD *a, DType dt, double x) {
  Inst *in = ad_emit(a, IR_CONST, 0, NULL, ty_scalar(dt));
  in->fval = x;
  in->ival = (int64_t)x;
  return in->results[0];
}

/* The type op (attribute fn) would give args: its OpDef.infer on an
 * instruction not yet in any block. */
static bool probe(AD *a, int op, int fn, int n, Value **args, Type *out) {
  Value r;
  memset(&r, 0, sizeof r);
  Value *rp = &r;
  Inst in;
  memset(&in, 0, sizeof in);
  in.op = op;
  in.fn = fn;
  in.args = args;
  in.nargs = n;
  in.results = &rp;
  in.nresults = 1;
  in.pos = a->pos;
  memset(out, 0, sizeof *out);
  return ir_infer(a->mod, &in, out);
}

Value *ad_infer(AD *a, int op, int fn, int n, Value **args) {
  Type out;
  if (!probe(a, op, fn, n, args, &out)) {
    /* Pending sums or reduced marks that the rules do not combine: use
     * the plain (replicated) representation of the same values. */
    for (int i = 0; i < n; i++) {
      if (!(args[i]->type.U | args[i]->type.R) || ir_is_literal(args[i]))
        continue;
      Type plain = args[i]->type;
      plain.U = plain.R = 0;
      args[i] = ad_to_type(a, args[i], &plain);
    }
    if (!probe(a, op, fn, n, args, &out))
      diag_ice("autodiff: no type for %s", ir_opname(op));
  }
  out.weak = false;
  Inst *in = ad_emit(a, op, n, args, out);
  in->fn = fn;
  return in->results[0];
}

Value *ad_bin(AD *a, int fn, Value *x, Value *y) {
  Value *args[2] = {x, y};
  return ad_infer(a, IR_BINARY, fn, 2, args);
}

Value *ad_un(AD *a, int fn, Value *x) { return ad_infer(a, IR_UNARY, fn, 1, &x); }

Value *ad_select(AD *a, Value *c, Value *x, Value *y) {
  Value *args[3] = {c, x, y};
  return ad_infer(a, IR_SELECT, 0, 3, args);
}

/* The same logical value in another representation: a reshard in the
 * global view (free when only R changes), a retype across a manual
 * boundary. */
Value *ad_to_type(AD *a, Value *v, const Type *t) {
  if (ty_equal(&v->type, t))
    return v;
  bool same_shape = v->type.rank == t->rank;
  for (int d = 0; same_shape && d < t->rank; d++)
    same_shape = v->type.shape[d] == t->shape[d];
  if (v->type.dtype != t->dtype) {
    Type c = v->type;
    c.dtype = t->dtype;
    v = ad_emit1(a, IR_CAST, 1, &v, c);
    if (ty_equal(&v->type, t))
      return v;
  }
  if (same_shape && (t->V & ~v->type.V) && !(v->type.V & ~t->V)) {
    /* An invariant value where a varying one is needed (the seed of a
     * gradient taken in a manual body, §9.7): a pcast, no data movement. */
    Type n = v->type;
    AxisSet add = t->V & ~v->type.V;
    n.V |= add;
    Inst *in = ad_emit(a, IR_PCAST, 1, &v, n);
    in->fn = PCAST_VARYING;
    for (int ax = 0; ax < a->m->naxes; ax++)
      if (add & (1u << ax))
        in->axes[in->naxes++] = ax;
    v = in->results[0];
    if (ty_equal(&v->type, t))
      return v;
  }
  if (same_shape && v->type.V == t->V)
    return ad_emit1(a, IR_RESHARD, 1, &v, *t);
  diag_ice("autodiff: cannot convert %s to %s", ty_str(a->m, &v->type), ty_str(a->m, t));
}

Value *ad_zeros(AD *a, const Type *t) {
  Type plain = *t;
  Value *z = ad_const(a, t->dtype, 0);
  if (t->rank == 0 && !t->U && !t->R && !t->V)
    return z;
  if (t->rank == 0)   /* a zero scalar with states: the same bytes everywhere */
    return ad_emit1(a, IR_RETYPE, 1, &z, plain);
  return ad_emit1(a, IR_FILL, 1, &z, plain);
}

static bool is_float_value(const Value *v) { return v->type.kind == TY_ARRAY && ty_is_float(v->type.dtype); }

/* ---- accumulation -------------------------------------------------------------------- */

void ad_add_ct(AD *a, Value *primal, Value *c) {
  ad_grow(a);
  if (!a->active[primal->id] || !is_float_value(primal))
    return;
  Type want = ty_ct(&primal->type);
  c = ad_to_type(a, c, &want);
  Value *prev = a->ct[primal->id];
  if (!prev) {
    a->ct[primal->id] = c;
    return;
  }
  Inst *in = ad_emit(a, IR_BINARY, 2, (Value *[]){prev, c}, want);
  in->fn = BIN_ADD;
  a->ct[primal->id] = in->results[0];
}

/* Replaces the cotangent accumulated for primal by ct, which already
 * includes it (a VJP that adds its part in place, e.g. into a window). */
void ad_set_ct(AD *a, Value *primal, Value *ct) {
  ad_grow(a);
  if (!a->active[primal->id] || !is_float_value(primal))
    return;
  Type want = ty_ct(&primal->type);
  a->ct[primal->id] = ad_to_type(a, ct, &want);
}

Value *ad_ct(AD *a, Value *primal) {
  ad_grow(a);
  return a->ct[primal->id];
}

Value *ad_ct_or_zero(AD *a, Value *primal) {
  ad_grow(a);
  if (a->ct[primal->id])
    return a->ct[primal->id];
  Type t = ty_ct(&primal->type);
  return ad_zeros(a, &t);
}

/* Sums g (shaped like a broadcast result) down to the shape of the primal
 * type `primal`, typed as its cotangent. The sum keeps the pending sums that
 * the cotangent type keeps (a <R:X> operand's cotangent stays <U:X>: no
 * all-reduce), and produces none that it does not (an <U:X> operand's
 * cotangent, <R:X>, is summed locally from the replicated g). */
Value *ad_unbroadcast(AD *a, Value *g, const Type *primal) {
  const Type *G = &g->type;
  Type want = ty_ct(primal);
  int off = G->rank - want.rank;
  unsigned mask = 0;
  for (int d = 0; d < G->rank; d++) {
    int td = d - off;
    if (td < 0 || (want.shape[td] == 1 && G->shape[d] != 1))
      mask |= 1u << d;
  }
  if (!mask)
    return ad_to_type(a, g, &want);
  Type r = *G;
  r.rank = 0;
  for (int d = 0; d < G->rank; d++) {
    if (mask & (1u << d))
      continue;
    r.shape[r.rank] = G->shape[d];
    r.spec[r.rank] = want.spec[d - off];
    r.rank++;
  }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  r.U = want.U & ~ty_dim_axes(&r);
  r.R = 0;
  r.V = G->V;
  Inst *in = ad_emit(a, IR_REDUCE, 1, &g, r);
  in->fn = RED_SUM;
  in->mask = mask;
  Value *s = in->results[0];
  if (r.rank != want.rank) {
    Type t = want;
    t.R = 0;
    t.U = r.U;
    s = ad_emit1(a, IR_RESHAPE, 1, &s, t);
  }
  return ad_to_type(a, s, &want);
}

/* v (shaped like a reduction of x over `mask`) broadcast back to x's shape,
 * typed t. */
Value *ad_broadcast_as(AD *a, Value *v, const Type *x, unsigned mask, Type t) {
  Type keep = v->type;
  keep.rank = x->rank;
  int k = 0;
  for (int d = 0; d < x->rank; d++) {
    if (mask & (1u << d)) {
      keep.shape[d] = 1;
      keep.spec[d].n = 0;
    } else {
      keep.shape[d] = v->type.shape[k];
      keep.spec[d] = v->type.spec[k];
      k++;
    }
  }
  Value *r = keep.rank == v->type.rank ? v : ad_emit1(a, IR_RESHAPE, 1, &v, keep);
  return ad_emit1(a, IR_BROADCAST, 1, &r, t);
}

/* g where cond holds, 0 elsewhere. A pending (unreduced) g cannot meet a
 * literal 0 in a select, so it is multiplied by a 0/1 mask marked reduced
 * over g's unreduced axes (U(A) x R(A) is U(A)); the mask, computed from
 * replicated or reduced values, is the same on every device, so marking it
 * is free. Otherwise a select: no NaN from an infinite g where cond fails. */
Value *ad_gate(AD *a, Value *g, Value *cond) {
  if (!g->type.U)
    return ad_select(a, cond, g, ad_const(a, g->type.dtype, 0));
  Type t = cond->type;
  t.dtype = g->type.dtype;
  Value *m = ad_emit1(a, IR_CAST, 1, &cond, t);
  Type r = m->type;
  r.R = g->type.U;
  return ad_bin(a, BIN_MUL, g, ad_to_type(a, m, &r));
}

/* Whether primal needs a cotangent (active and float): checked before a
 * VJP emits anything, so inactive operands cost no code. A literal operand
 * is never active; its own unbroadcast would even be ill-typed (a varying
 * cotangent summed to an invariant literal's type). */
bool ad_wants_ct(AD *a, const Value *primal) {
  ad_grow(a);
  return a->active[primal->id] && is_float_value(primal);
}

/* Adds g, summed over the dims that broadcasting stretched, to primal. */
void ad_add_ct_unbroadcast(AD *a, Value *primal, Value *g) {
  ad_add_ct(a, primal, ad_unbroadcast(a, g, &primal->type));
}

/* ---- activity ------------------------------------------------------------------------------ */

static bool any_active_arg(AD *a, const Inst *in, int from) {
  for (int i = from; i < in->nargs; i++)
    if (a->active[in->args[i]->id])
      return true;
  return false;
}

bool ad_propagate_block(AD *a, const IrBlock *b);

static bool propagate_inst(AD *a, const Inst *in) {
  bool changed = false;
  if (in->op == IR_FOR) {
    const IrBlock *body = in->regions[0];
    for (int k = 0; k < in->nresults; k++)
      if (a->active[in->args[k + 2]->id] && is_float_value(body->args[k + 1]) && !a->active[body->args[k + 1]->id])
        a->active[body->args[k + 1]->id] = changed = true;
    for (int guard = 0; guard < 64; guard++) {
      ad_propagate_block(a, body);
      const Inst *y = body->insts.data[body->insts.len - 1];
      bool more = false;
      for (int k = 0; k < y->nargs; k++)
        if (a->active[y->args[k]->id] && is_float_value(body->args[k + 1]) && !a->active[body->args[k + 1]->id])
          a->active[body->args[k + 1]->id] = more = true;
      changed |= more;
      if (!more)
        break;
    }
    for (int k = 0; k < in->nresults; k++)
      if (a->active[body->args[k + 1]->id] && !a->active[in->results[k]->id])
        a->active[in->results[k]->id] = changed = true;
    return changed;
  }
  if (in->op == IR_IF) {
    for (int r = 0; r < 2; r++) {
      ad_propagate_block(a, in->regions[r]);
      const Inst *y = in->regions[r]->insts.data[in->regions[r]->insts.len - 1];
      for (int k = 0; k < y->nargs; k++)
        if (a->active[y->args[k]->id] && is_float_value(in->results[k]) && !a->active[in->results[k]->id])
          a->active[in->results[k]->id] = changed = true;
    }
    return changed;
  }
  if (in->op == IR_TAPE_GET || in->op == IR_TAPE_NEW || in->op == IR_TAPE_PUSH)
    return false;
  bool act = any_active_arg(a, in, 0);
  for (int k = 0; k < in->nresults; k++)
    if (act && is_float_value(in->results[k]) && !a->active[in->results[k]->id])
      a->active[in->results[k]->id] = changed = true;
  return changed;
}

bool ad_propagate_block(AD *a, const IrBlock *b) {
  bool changed = false;
  for (int i = 0; i < b->insts.len; i++)
    changed |= propagate_inst(a, b->insts.data[i]);
  return changed;
}

/* ---- tapes ----------------------------------------------------------------------------------- */

static bool loop_is_active(AD *a, const Inst *in) {
  for (int k = 0; k < in->nresults; k++)
    if (a->active[in->results[k]->id])
      return true;
  return false;
}

/* Whether every result of `in` is an array a tape can hold. */
static bool all_arrays(const Inst *in) {
  for (int k = 0; k < in->nresults; k++)
    if (in->results[k]->type.kind != TY_ARRAY)
      return false;
  return in->nresults > 0;
}

/* Whether a loop body's instruction is a residual, saved for the backward
 * pass rather than recomputed: anything but cheap elementwise code and
 * what its OpDef says recomputes without communication (OPF_RECOMPUTE:
 * creation, broadcasts, state casts, reads), constants, retypes, control
 * flow and calls. (A branch and a nested loop are saved by ad_walk_insts.) */
static bool is_residual(const Inst *in) {
  if (in->nregions || !all_arrays(in))
    return false;
  switch (in->op) {
  case IR_CALL:   /* a remat call's results are kept: its inside is what is computed again */
    return in->fn == CALL_REMAT;
  case IR_CONST: case IR_RETYPE: case IR_GRAD: case IR_TAPE_NEW: case IR_TAPE_GET:
    return false;
  default: {
    const OpDef *d = op_def(in->op);
    return !d || !(d->flags & (OPF_ELEMENTWISE | OPF_RECOMPUTE));
  }
  }
}

/* Whether `in` reads a value marked in dep (directly, or inside its
 * regions); marks its results so. */
static bool reads_marked(const Inst *in, const bool *dep) {
  for (int k = 0; k < in->nargs; k++)
    if (dep[in->args[k]->id])
      return true;
  for (int r = 0; r < in->nregions; r++)
    for (int i = 0; i < in->regions[r]->insts.len; i++)
      if (reads_marked(in->regions[r]->insts.data[i], dep))
        return true;
  return false;
}

/* Marks the results of a loop body's instruction that depend on the loop's
 * carries (the activations of a layer loop), and says whether it does.
 * Only those are residuals: what depends on outer values and the index
 * alone (a layer's weights sliced from the stack, gathered for use) is
 * computed again in the backward pass, as ZeRO-3 gathers a layer's
 * weights again rather than keeping every layer's gathered. */
static bool mark_dependent(const Inst *in, bool *dep) {
  if (!reads_marked(in, dep))
    return false;
  for (int k = 0; k < in->nresults; k++)
    dep[in->results[k]->id] = true;
  return true;
}

/* A loop's trip count when its bounds are constants, else -1. */
static int64_t trips_or_none(const Inst *loop) {
  int64_t n;
  return ir_const_trips(loop, &n) ? n : -1;
}

Value *ad_new_tape(AD *a, const Type *el, Value *n) {
  Type tt = ty_void();
  tt.kind = TY_TAPE;
  tt.elems = arena_alloc(sizeof(Type));
  tt.elems[0] = *el;
  return ad_emit1(a, IR_TAPE_NEW, 1, &n, tt);
}

/* A push of the forward pass: the copies the reverse sweep makes of the
 * code around it leave it out when its tape already holds the entry. */
void ad_push_at(AD *a, IrBlock *blk, Pos pos, Value *tape, Value *idx, Value *v) {
  Inst *p = ir_emit(a->mod, blk, IR_TAPE_PUSH, pos, 3, (Value *[]){tape, idx, v}, 0, NULL);
  ptrmap_put(&a->fwd_pushes, p, 1);
}

/* One tape per result of `in` (a residual of loop lt's body, at any depth
 * of branches in it), made where lt's tapes are and pushed right after
 * `in` in blk at lt's entry. */
static void save_residual(AD *a, LoopTapes *lt, IrBlock *blk, Inst *in) {
  Value **tapes = arena_alloc(sizeof(Value *) * (size_t)in->nresults);
  IrBlock *saved = a->b;
  a->b = lt->tb;
  for (int k = 0; k < in->nresults; k++)
    tapes[k] = ad_new_tape(a, &in->results[k]->type, lt->size);
  a->b = saved;
  for (int k = 0; k < in->nresults; k++)
    ad_push_at(a, blk, in->pos, tapes[k], lt->idx, in->results[k]);
  Saved *s = arena_alloc(sizeof *s);
  s->lt = lt;
  s->tapes = tapes;
  ptrmap_put(&a->saved_index, in, a->saved.len);
  vec_push(&a->saved, s);
}

static LoopTapes *instrument_loop(AD *a, Inst *in, IrBlock *tb, LoopTapes *parent, bool *dep);
static void instrument_block(AD *a, IrBlock *b);

/* Walks `old`, the instructions of blk (lt's body, or a branch in it),
 * into blk again with lt's residuals saved: the operations of
 * is_residual, and each branch's and nested loop's results, that depend
 * on the carries. Inside a branch the same holds (the branch's taken
 * iterations push; the reverse takes the same branch). A nested active
 * loop with a constant trip count keeps its tapes beside lt's, sized lt's
 * entries times its trips (its entry lt's times its trips plus its own
 * index), so the reverse runs it backward from them instead of running it
 * forward again; one whose trip count is known only at run time makes its
 * tapes in each iteration and runs again in the reverse. */
void ad_walk_insts(AD *a, LoopTapes *lt, IrBlock *blk, Vec old, bool *dep) {
  for (int j = 0; j < old.len; j++) {
    Inst *bi = old.data[j];
    bool d = mark_dependent(bi, dep);
    if (bi->op == IR_FOR && loop_is_active(a, bi)) {
      int64_t n = trips_or_none(bi);
      bool nest = lt->csize >= 0 && n >= 0 && (n == 0 || lt->csize <= INT32_MAX / n);
      instrument_loop(a, bi, nest ? lt->tb : blk, nest ? lt : NULL, nest ? dep : NULL);
      vec_push(&blk->insts, bi);
      bi->parent = blk;
      if (nest && d && all_arrays(bi))
        save_residual(a, lt, blk, bi);
      continue;
    }
    vec_push(&blk->insts, bi);
    bi->parent = blk;
    if (bi->op == IR_IF) {
      for (int r = 0; r < bi->nregions; r++) {
        Vec bold = bi->regions[r]->insts;
        bi->regions[r]->insts = (Vec){0};
        ad_walk_insts(a, lt, bi->regions[r], bold, dep);
        free(bold.data);
      }
      if (d && all_arrays(bi))
        save_residual(a, lt, blk, bi);
      continue;
    }
    for (int r = 0; r < bi->nregions; r++)
      instrument_block(a, bi->regions[r]);
    if (d && is_residual(bi))
      save_residual(a, lt, blk, bi);
  }
}

/* Instruments the active loop `in`: one tape per carry, made in tb (before
 * the loop, or before the outermost loop of a nest: parent), and at the
 * top of its body the carries pushed at this iteration's entry; then its
 * residuals (ad_walk_insts). dep is the nest's (NULL: a new one). */
static LoopTapes *instrument_loop(AD *a, Inst *in, IrBlock *tb, LoopTapes *parent, bool *dep) {
  IrBlock *saved = a->b;
  a->b = tb;
  a->pos = in->pos;
  LoopTapes *lt = arena_alloc(sizeof *lt);
  memset(lt, 0, sizeof *lt);
  lt->loop = in;
  lt->parent = parent;
  lt->tb = tb;
  int64_t n = lt->trips = trips_or_none(in);
  if (parent) {
    lt->csize = parent->csize * n;
    lt->size = ad_const(a, DT_I32, (double)lt->csize);
  } else {
    lt->csize = n;
    lt->size = ad_bin(a, BIN_SUB, in->args[1], in->args[0]);
  }
  lt->tapes = arena_alloc(sizeof(Value *) * (size_t)(in->nresults + 1));
  for (int k = 0; k < in->nresults; k++)
    lt->tapes[k] = ad_new_tape(a, &in->regions[0]->args[k + 1]->type, lt->size);
  ptrmap_put(&a->tapes_index, in, a->tapes.len);
  vec_push(&a->tapes, lt);
  IrBlock *body = in->regions[0];
  Vec bold = body->insts;
  body->insts = (Vec){0};
  a->b = body;
  lt->idx = ad_bin(a, BIN_SUB, body->args[0], in->args[0]);
  if (parent)
    lt->idx = ad_bin(a, BIN_ADD, ad_bin(a, BIN_MUL, parent->idx, ad_const(a, DT_I32, (double)n)), lt->idx);
  for (int k = 0; k < in->nresults; k++)
    ad_push_at(a, body, in->pos, lt->tapes[k], lt->idx, body->args[k + 1]);
  bool *own = dep ? NULL : mem_calloc((size_t)a->mod->next_value + 1, sizeof(bool));
  if (own)
    dep = own;
  for (int k = 1; k < body->nargs; k++)
    dep[body->args[k]->id] = true;
  ad_walk_insts(a, lt, body, bold, dep);
  free(own);
  free(bold.data);
  a->b = saved;
  return lt;
}

/* Instruments each active loop of b and, inside other regions, theirs. */
static void instrument_block(AD *a, IrBlock *b) {
  Vec old = b->insts;
  b->insts = (Vec){0};
  for (int i = 0; i < old.len; i++) {
    Inst *in = old.data[i];
    if (in->op == IR_FOR && loop_is_active(a, in)) {
      instrument_loop(a, in, b, NULL, NULL);
    } else {
      for (int r = 0; r < in->nregions; r++)
        instrument_block(a, in->regions[r]);
    }
    vec_push(&b->insts, in);
    in->parent = b;
  }
  free(old.data);
}

static LoopTapes *tapes_of(AD *a, const Inst *loop) {
  int i = ptrmap_get(&a->tapes_index, loop);
  return i < 0 ? NULL : a->tapes.data[i];
}

/* The copy of the forward instruction bi in the reverse sweep of region:
 * a saved one's results from its tapes at its loop's entry, any other
 * computed again (without the pushes whose tapes already hold theirs). */
void ad_restore_or_clone(AD *a, const Inst *bi, const IrBlock *region) {
  int s = ptrmap_get(&a->saved_index, bi);
  if (s < 0) {
    ad_recompute(a, bi, region);
    return;
  }
  const Saved *sv = a->saved.data[s];
  for (int k = 0; k < bi->nresults; k++) {
    Value *tape = ad_primal(a, sv->tapes[k]);
    Inst *g = ir_emit(a->mod, a->b, IR_TAPE_GET, bi->pos, 2, (Value *[]){tape, sv->lt->rev_idx}, 1,
                      &bi->results[k]->type);
    ad_grow(a);
    a->rm[bi->results[k]->id] = g->results[0];
  }
}

/* ---- the reverse sweep --------------------------------------------------------------------- */

static void backprop(AD *a, const IrBlock *b, int n);

/* Active values defined outside `blk` that instructions in it read. */
static void outer_uses(AD *a, const IrBlock *blk, const IrBlock *root, Vec *out) {
  for (int i = 0; i < blk->insts.len; i++) {
    const Inst *in = blk->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      Value *v = in->args[k];
      if (!a->active[v->id] || !is_float_value(v))
        continue;
      if (ad_defined_in(v, root))
        continue;
      bool seen = false;
      for (int j = 0; j < out->len; j++)
        seen |= out->data[j] == v;
      if (!seen)
        vec_push(out, v);
    }
    for (int r = 0; r < in->nregions; r++)
      outer_uses(a, in->regions[r], root, out);
  }
}

/* Backpropagates through one recomputed copy of `src` (a loop body or a
 * branch): seeds the yielded values with `seeds`, redirects the outer
 * values' cotangents to `acc`, and returns the updated accumulators and the
 * cotangents of the block's arguments. */
static void backprop_region(AD *a, const IrBlock *src, Value **seeds, Vec *outer, Value **acc, Value **acc_out,
                            Value **arg_ct) {
  Value **saved = arena_alloc(sizeof(Value *) * (size_t)(outer->len + 1));
  for (int j = 0; j < outer->len; j++) {
    Value *o = outer->data[j];
    saved[j] = a->ct[o->id];
    a->ct[o->id] = acc[j];
  }
  const Inst *y = src->insts.data[src->insts.len - 1];
  for (int k = 0; k < y->nargs; k++)
    if (seeds[k])
      ad_add_ct(a, y->args[k], seeds[k]);
  backprop(a, src, src->insts.len - 1);
  for (int j = 0; j < outer->len; j++) {
    Value *o = outer->data[j];
    acc_out[j] = ad_ct_or_zero(a, o);
    a->ct[o->id] = saved[j];
  }
  for (int k = 0; arg_ct && k < src->nargs; k++)
    arg_ct[k] = a->active[src->args[k]->id] ? ad_ct_or_zero(a, src->args[k]) : NULL;
}

static void vjp_for(AD *a, Inst *in) {
  const IrBlock *body = in->regions[0];
  LoopTapes *lt = tapes_of(a, in);
  if (!lt)
    diag_ice("autodiff: loop without tapes");
  int nc = in->nresults;
  Vec outer = {0};
  outer_uses(a, body, body, &outer);
  /* Reverse loop carries: cotangents of the active carries, then of the
   * outer values. */
  int *act = arena_alloc(sizeof(int) * (size_t)(nc + 1)), na = 0;
  for (int k = 0; k < nc; k++)
    if (a->active[body->args[k + 1]->id])
      act[na++] = k;
  int ncar = na + outer.len;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(ncar + 2));
  Type *types = arena_alloc(sizeof(Type) * (size_t)(ncar + 2));
  Value *lo = ad_primal(a, in->args[0]), *hi = ad_primal(a, in->args[1]);
  Value *trips = ad_bin(a, BIN_SUB, hi, lo);
  args[0] = ad_const(a, DT_I32, 0);
  args[1] = trips;
  types[0] = ty_scalar(DT_I32);
  for (int j = 0; j < na; j++) {
    args[j + 2] = ad_ct_or_zero(a, in->results[act[j]]);
    types[j + 1] = args[j + 2]->type;
  }
  for (int j = 0; j < outer.len; j++) {
    args[na + j + 2] = ad_ct_or_zero(a, outer.data[j]);
    types[na + j + 1] = args[na + j + 2]->type;
  }
  Type *rtypes = types + 1;
  Inst *rev = ir_emit(a->mod, a->b, IR_FOR, in->pos, ncar + 2, args, ncar, rtypes);
  IrBlock *rb = ir_block(ncar + 1, types, a->mod);
  ad_grow(a);
  ir_add_region(rev, rb);
  IrBlock *saved_b = a->b;
  a->b = rb;
  /* i = hi - 1 - j; the tape index is i - lo. */
  Value *j = rb->args[0];
  Value *i = ad_bin(a, BIN_SUB, ad_bin(a, BIN_SUB, hi, ad_const(a, DT_I32, 1)), j);
  Value *idx = ad_bin(a, BIN_SUB, i, lo);
  if (lt->parent)   /* the nest's entry: the parent's times the trips, plus ours */
    idx = ad_bin(a, BIN_ADD, ad_bin(a, BIN_MUL, lt->parent->rev_idx, ad_const(a, DT_I32, (double)lt->trips)), idx);
  lt->rev_idx = idx;
  a->rm[body->args[0]->id] = i;
  for (int k = 0; k < nc; k++) {
    Value *tape = ad_primal(a, lt->tapes[k]);
    Inst *g = ir_emit(a->mod, rb, IR_TAPE_GET, in->pos, 2, (Value *[]){tape, idx}, 1, &body->args[k + 1]->type);
    ad_grow(a);
    a->rm[body->args[k + 1]->id] = g->results[0];
  }
  /* The residuals from their tapes, the rest of the body (without its last
   * yield) recomputed; then sweep it backwards. */
  for (int q = 0; q + 1 < body->insts.len; q++)
    ad_restore_or_clone(a, body->insts.data[q], body);
  Value **seeds = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  for (int k = 0; k < nc; k++)
    seeds[k] = NULL;
  for (int jj = 0; jj < na; jj++)
    seeds[act[jj]] = rb->args[jj + 1];
  Value **acc = arena_alloc(sizeof(Value *) * (size_t)(outer.len + 1));
  Value **acc_out = arena_alloc(sizeof(Value *) * (size_t)(outer.len + 1));
  for (int q = 0; q < outer.len; q++)
    acc[q] = rb->args[na + q + 1];
  Value **arg_ct = arena_alloc(sizeof(Value *) * (size_t)(body->nargs + 1));
  backprop_region(a, body, seeds, &outer, acc, acc_out, arg_ct);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(ncar + 1));
  for (int jj = 0; jj < na; jj++)
    ys[jj] = arg_ct[act[jj] + 1] ? arg_ct[act[jj] + 1] : ad_ct_or_zero(a, body->args[act[jj] + 1]);
  for (int q = 0; q < outer.len; q++)
    ys[na + q] = acc_out[q];
  ir_emit(a->mod, rb, IR_YIELD, in->pos, ncar, ys, 0, NULL);
  a->b = saved_b;
  /* The outer values' accumulators replace their cotangents (they started
   * from them), then the initial carries' cotangents add to them: a value
   * can be both (var y = x; for ... { y = f(y) + x }). */
  for (int q = 0; q < outer.len; q++) {
    Value *o = outer.data[q];
    a->ct[o->id] = rev->results[na + q];
  }
  for (int jj = 0; jj < na; jj++)
    ad_add_ct(a, in->args[act[jj] + 2], rev->results[jj]);
  free(outer.data);
}

/* Whether the transpose of `in` communicates: the psum of an implicit or
 * explicit pcast to varying from invariant, the unreduced psum of a pcast to
 * reduced, and any collective (which a varying condition already forbids in
 * the forward pass, [E_DIVERGE]). Casts between reduced, varying and
 * unreduced transpose to casts. */
static bool transpose_communicates(const Inst *in) {
  if (in->op == IR_PCAST) {
    AxisSet ax = 0;
    for (int i = 0; i < in->naxes; i++)
      ax |= 1u << in->axes[i];
    return (in->fn == PCAST_VARYING && !(in->args[0]->type.R & ax)) || in->fn == PCAST_REDUCED;
  }
  const OpDef *d = op_def(in->op);
  return d && (d->flags & OPF_COLLECTIVE);
}

/* The first active instruction under `blk` (nested regions included) whose
 * transpose communicates. */
static const Inst *diverging_transpose(AD *a, const IrBlock *blk) {
  for (int q = 0; q < blk->insts.len; q++) {
    const Inst *bi = blk->insts.data[q];
    if (transpose_communicates(bi) && bi->nargs && a->active[bi->args[0]->id])
      return bi;
    for (int r = 0; r < bi->nregions; r++) {
      const Inst *d = diverging_transpose(a, bi->regions[r]);
      if (d)
        return d;
    }
  }
  return NULL;
}

static void vjp_if(AD *a, Inst *in) {
  Vec outer = {0};
  for (int r = 0; r < 2; r++)
    outer_uses(a, in->regions[r], in->regions[r], &outer);
  int no = outer.len;
  Value *cond = ad_primal(a, in->args[0]);
  if (cond->type.V) {
    /* A varying condition: the branches' backward collectives (the psum of
     * a pcast) would not be reached by every device. */
    for (int r = 0; r < 2; r++) {
      const Inst *bi = diverging_transpose(a, in->regions[r]);
      if (bi) {
        const char *what = bi->op != IR_PCAST ? "collective"
                           : bi->fn == PCAST_REDUCED ? "pcast to reduced"
                           : "cast of an invariant value to varying (a pcast, or the implicit one where it meets "
                             "a varying operand)";
        ad_fail(a, bi->pos,
             "cannot differentiate through this %s: it sits under a condition that varies across devices, so its "
             "transpose (an all-reduce) would not be reached by every device; cast the value before the branch "
             "(pcast(x, AXES, to=varying)) or select between values computed outside it with where()", what);
        free(outer.data);
        return;
      }
    }
  }
  Type *types = arena_alloc(sizeof(Type) * (size_t)(no + 1));
  Value **init = arena_alloc(sizeof(Value *) * (size_t)(no + 1));
  for (int q = 0; q < no; q++) {
    init[q] = ad_ct_or_zero(a, outer.data[q]);
    types[q] = init[q]->type;
  }
  Inst *nif = ir_emit(a->mod, a->b, IR_IF, in->pos, 1, &cond, no, types);
  ad_grow(a);
  Value **seeds = arena_alloc(sizeof(Value *) * (size_t)(in->nresults + 1));
  for (int k = 0; k < in->nresults; k++)
    seeds[k] = a->active[in->results[k]->id] ? a->ct[in->results[k]->id] : NULL;
  for (int r = 0; r < 2; r++) {
    const IrBlock *src = in->regions[r];
    IrBlock *nb = ir_block(0, NULL, a->mod);
    ir_add_region(nif, nb);
    IrBlock *saved_b = a->b;
    a->b = nb;
    for (int q = 0; q + 1 < src->insts.len; q++)
      ad_restore_or_clone(a, src->insts.data[q], src);
    Value **acc_out = arena_alloc(sizeof(Value *) * (size_t)(no + 1));
    backprop_region(a, src, seeds, &outer, init, acc_out, NULL);
    ir_emit(a->mod, nb, IR_YIELD, in->pos, no, acc_out, 0, NULL);
    a->b = saved_b;
  }
  for (int q = 0; q < no; q++) {
    Value *o = outer.data[q];
    a->ct[o->id] = nif->results[q];
  }
  free(outer.data);
}

static void vjp_remat(AD *a, Inst *in);

void ad_vjp(AD *a, Inst *in) {
  ad_grow(a);
  a->pos = in->pos;
  if (in->op == IR_CALL && in->fn == CALL_REMAT) {
    vjp_remat(a, in);
    return;
  }
  if (in->op == IR_FOR) {
    if (loop_is_active(a, in))
      vjp_for(a, in);
    return;
  }
  if (in->op == IR_IF) {
    bool any = false;
    for (int k = 0; k < in->nresults; k++)
      any |= a->ct[in->results[k]->id] != NULL;
    if (any)
      vjp_if(a, in);
    return;
  }
  if (in->nresults > 1 && in->op >= IR__CORE) {
    /* A family instruction with several results (split): its VJP reads
     * each result's cotangent with ad_ct. */
    bool any = false;
    for (int k = 0; k < in->nresults; k++)
      any |= a->ct[in->results[k]->id] != NULL;
    const OpDef *d = op_def(in->op);
    if (any && d && d->vjp)
      d->vjp(a, in, NULL);
    else if (any)
      ad_fail(a, in->pos, "cannot differentiate %s (in %s)", ir_opname(in->op), a->fname);
    return;
  }
  if (in->nresults != 1 || !a->active[in->results[0]->id])
    return;
  Value *g = a->ct[in->results[0]->id];
  if (!g)
    return;
  switch (in->op) {
  case IR_RETYPE:   /* a manual boundary: the same bytes, another type */
    ad_add_ct(a, in->args[0], ad_emit1(a, IR_RETYPE, 1, &g, ty_ct(&in->args[0]->type)));
    return;
  case IR_TAPE_GET: case IR_TAPE_NEW: case IR_TAPE_PUSH:
    return;
  default: {
    const OpDef *d = op_def(in->op);
    if (d && d->vjp)
      d->vjp(a, in, g);
    else
      ad_fail(a, in->pos, "cannot differentiate %s (in %s)", ir_opname(in->op), a->fname);
    return;
  }
  }
}

static void backprop(AD *a, const IrBlock *b, int n) {
  for (int i = n - 1; i >= 0; i--)
    ad_vjp(a, b->insts.data[i]);
}

/* ---- building the gradient function --------------------------------------------------------- */

/* A second derivative through a loop would differentiate the tape that the
 * inner gradient keeps; that is not supported, and saying so beats a wrong
 * (zero) contribution. */
static bool check_nested_pushes(AD *a) {
  for (int i = 0; i < a->nested_pushes.len; i++) {
    NestedPush *np = a->nested_pushes.data[i];
    if (!a->active[np->push->args[2]->id])
      continue;
    if (np->ring) {
      ad_fail(a, np->site, "cannot differentiate through this vjp_save: the function being differentiated keeps "
              "its call's residuals on tapes that a vjp_load reads, and a gradient does not follow values through "
              "them; differentiate a function without vjp_save and vjp_load (the stage itself, or a schedule "
              "written with grad), or take this function's results as they are");
      a->nested_pushes.len = 0;
      return false;
    }
    ad_fail(a, np->site,
         "cannot differentiate this gradient again (a second derivative): the function it differentiates has a "
         "loop whose carries depend on the differentiated values, and differentiating through the loop's tape is "
         "not supported yet; write the inner gradient by hand, or take the second derivative of a loop-free "
         "function");
    diag_note(np->loop, "the loop");
    a->nested_pushes.len = 0;
    return false;
  }
  a->nested_pushes.len = 0;
  return true;
}

typedef struct {
  Func *f;
  unsigned mask;
  const int64_t *order;   /* the wrt positions, in the order asked */
  int norder;
  bool tuple, with_value;
  Func *g;
} GradKey;

/* A program may name its own function f_grad_0, and two natural names
 * may meet (value_and_grad of f and grad of f_value_and, both wrt 0): the
 * C function names come from these, so a taken name gets a suffix. */
static const char *unique_func_name(const Module *mod, const char *want) {
  const char *name = want;
  for (int n = 2;; n++) {
    bool taken = false;
    for (int i = 0; i < mod->funcs.len && !taken; i++)
      taken = !strcmp(((Func *)mod->funcs.data[i])->name, name);
    if (!taken)
      return arena_strdup(name);
    name = arena_printf("%s_%d", want, n);
  }
}

/* The gradient function's name in what users read: the call as written,
 * value_and_grad(loss) or grad(f, wrt=(0, 2)) (wrt=0, the default, left
 * out), the IR's leaf positions mapped back to f's parameters. */
static const char *grad_label(const GradKey *k) {
  const Func *f = k->f;
  Str s = {0};
  str_printf(&s, "%s(%s", k->with_value ? "value_and_grad" : "grad", ir_func_label(f));
  const FuncDecl *d = f->decl;
  int np = d ? d->params.len : 0, nw = 0;
  int *first = arena_alloc(sizeof(int) * (size_t)(np + 2)), *wrt = arena_alloc(sizeof(int) * (size_t)(k->norder + 1));
  for (int i = 0, at = 0; i <= np; i++) {
    first[i] = at;
    at += i < np ? ty_nleaves(&d->param_types[i]) : 0;
  }
  for (int q = 0; q < k->norder; q++) {
    int p = 0;
    while (p + 1 < np && k->order[q] >= first[p + 1])
      p++;
    if (!nw || wrt[nw - 1] != p)
      wrt[nw++] = p;
  }
  if (d && (k->tuple || nw != 1 || wrt[0] != 0)) {
    str_printf(&s, "%s", k->tuple ? ", wrt=(" : ", wrt=");
    for (int i = 0; i < nw; i++)
      str_printf(&s, "%s%d", i ? ", " : "", wrt[i]);
    str_printf(&s, "%s", k->tuple ? (nw == 1 ? ",)" : ")") : "");
  }
  str_putc(&s, ')');
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

static Func *build_grad(AD *a, GradKey *k) {
  Func *f = k->f;
  int np = f->body->nargs;
  Type *ptypes = f->sig_params ? f->sig_params : arena_alloc(sizeof(Type) * (size_t)(np + 1));
  if (!f->sig_params)
    for (int i = 0; i < np; i++)
      ptypes[i] = f->body->args[i]->type;
  Type *res = arena_alloc(sizeof(Type) * (size_t)(k->norder + 2));
  int nr = 0;
  Type loss_t = f->sig_results ? f->sig_results[0] : f->results[0];
  if (k->with_value)
    res[nr++] = loss_t;
  for (int i = 0; i < k->norder; i++)
    res[nr++] = ty_ct(&ptypes[k->order[i]]);
  Str name = {0};
  str_printf(&name, "%s_%s", f->name, k->with_value ? "value_and_grad" : "grad");
  for (int i = 0; i < k->norder; i++)
    str_printf(&name, "_%d", (int)k->order[i]);
  Func *g = ir_func(a->mod, unique_func_name(a->mod, str_cstr(&name)), np, ptypes, nr, res);
  free(name.buf);
  g->generated = true;
  g->display = grad_label(k);
  g->pos = f->pos;
  if (f->decl && f->decl->view_manual) {
    /* grad inside a manual body (§9.7): the gradient is in the same
     * per-device view, called from that body with its local values. */
    g->manual = true;
    g->manual_axes = f->manual_axes;
  }
  g->sig_params = ptypes;
  g->sig_results = g->results;
  a->fname = ir_func_label(f);
  ad_grow(a);
  for (int i = 0; i < np; i++)
    ir_copy_name(g->body->args[i], f->body->args[i]);
  /* Forward: f's body, inlined, up to its return. */
  a->b = g->body;
  Inst fake = {0};
  fake.op = IR_CALL;
  fake.callee = f;
  fake.nargs = np;
  fake.args = g->body->args;
  Value *loss_slot = ir_value(a->mod, loss_t);
  ad_grow(a);
  fake.nresults = 1;
  fake.results = &loss_slot;
  ad_inline_call(a, &fake);
  if (a->too_big)
    return g;
  Value *loss = ad_primal(a, loss_slot);
  /* Activity, tapes, seed, sweep. */
  for (int i = 0; i < k->norder; i++)
    a->active[g->body->args[k->order[i]]->id] = is_float_value(g->body->args[k->order[i]]);
  for (int guard = 0; guard < 64 && ad_propagate_block(a, g->body); guard++)
    ;
  if (!check_nested_pushes(a))
    return g;
  instrument_block(a, g->body);
  int nfwd = g->body->insts.len;
  a->b = g->body;
  a->pos = f->pos;
  if (a->active[loss->id]) {
    Type seed_t = ty_ct(&loss->type);
    Value *one = ad_const(a, seed_t.dtype, 1);
    if (seed_t.U) {
      Type rep = seed_t;
      rep.U = 0;
      one = ad_to_type(a, one, &rep);
    }
    a->ct[loss->id] = ad_to_type(a, one, &seed_t);
    backprop(a, g->body, nfwd);
  }
  Value **outs = arena_alloc(sizeof(Value *) * (size_t)(k->norder + 2));
  int no = 0;
  if (k->with_value)
    outs[no++] = loss;
  for (int i = 0; i < k->norder; i++) {
    Value *p = g->body->args[k->order[i]];
    Type want = ty_ct(&p->type);
    outs[no++] = a->ct[p->id] ? ad_to_type(a, a->ct[p->id], &want) : ad_zeros(a, &want);
  }
  ir_emit(a->mod, g->body, IR_RETURN, f->pos, no, outs, 0, NULL);
  opt_prune_tapes(a->mod, g);
  return g;
}

/* ---- remat: VJP functions ------------------------------------------------------------------ */

/* f's VJP function: f's parameters, then a cotangent for each float result;
 * it computes f's forward again (f's body inlined, its loops taped as in
 * any gradient) and returns the cotangents of f's float parameters, in
 * order. Built once per f, when a gradient first meets remat(f). */
static Func *build_vjp(AD *a, Func *f) {
  int i = ptrmap_get(&a->vjp_index, f);
  if (i >= 0)
    return a->vjps.data[i];
  /* The state of the gradient being built around this one. */
  IrBlock *saved_b = a->b;
  Pos saved_pos = a->pos, saved_grad_pos = a->grad_pos, saved_nested = a->nested;
  const char *saved_fname = a->fname;
  bool saved_in_nested = a->in_nested;
  int np = f->body->nargs, nr = f->nresults;
  const Type *ptypes = f->sig_params ? f->sig_params : NULL;
  const Type *rtypes = f->sig_results ? f->sig_results : f->results;
  Type *params = arena_alloc(sizeof(Type) * (size_t)(np + nr + 1));
  Type *res = arena_alloc(sizeof(Type) * (size_t)(np + 1));
  int nf = 0;
  for (int k = 0; k < np; k++) {
    params[k] = ptypes ? ptypes[k] : f->body->args[k]->type;
    if (is_float_value(f->body->args[k]))
      res[nf++] = ty_ct(&params[k]);
  }
  for (int k = 0; k < nr; k++)
    params[np + k] = ty_ct(&rtypes[k]);
  Func *g = ir_func(a->mod, unique_func_name(a->mod, arena_printf("%s_vjp", f->name)), np + nr, params, nf, res);
  g->generated = true;
  g->display = arena_printf("vjp(%s)", ir_func_label(f));
  g->pos = f->pos;
  g->sig_params = params;
  g->sig_results = g->results;
  ptrmap_put(&a->vjp_index, f, a->vjps.len);
  vec_push(&a->vjps, g);
  ad_grow(a);
  for (int k = 0; k < np; k++)
    ir_copy_name(g->body->args[k], f->body->args[k]);
  a->fname = ir_func_label(f);
  a->b = g->body;
  Inst fake = {0};
  fake.op = IR_CALL;
  fake.callee = f;
  fake.nargs = np;
  fake.args = g->body->args;
  Value **slots = arena_alloc(sizeof(Value *) * (size_t)(nr + 1));
  for (int k = 0; k < nr; k++)
    slots[k] = ir_value(a->mod, rtypes[k]);
  ad_grow(a);
  fake.nresults = nr;
  fake.results = slots;
  ad_inline_call(a, &fake);
  if (!a->too_big) {
    for (int k = 0; k < np; k++)
      a->active[g->body->args[k]->id] = is_float_value(g->body->args[k]);
    for (int guard = 0; guard < 64 && ad_propagate_block(a, g->body); guard++)
      ;
    if (check_nested_pushes(a)) {
      instrument_block(a, g->body);
      int nfwd = g->body->insts.len;
      a->b = g->body;
      a->pos = f->pos;
      for (int k = 0; k < nr; k++) {
        Value *r = ad_primal(a, slots[k]);
        if (a->active[r->id] && is_float_value(r))
          a->ct[r->id] = ad_to_type(a, g->body->args[np + k], &params[np + k]);
      }
      backprop(a, g->body, nfwd);
      Value **outs = arena_alloc(sizeof(Value *) * (size_t)(nf + 1));
      int no = 0;
      for (int k = 0; k < np; k++) {
        Value *p = g->body->args[k];
        if (!is_float_value(p))
          continue;
        Type want = ty_ct(&p->type);
        outs[no++] = a->ct[p->id] ? ad_to_type(a, a->ct[p->id], &want) : ad_zeros(a, &want);
      }
      ir_emit(a->mod, g->body, IR_RETURN, f->pos, no, outs, 0, NULL);
      opt_prune_tapes(a->mod, g);
    }
  }
  a->b = saved_b;
  a->pos = saved_pos;
  a->grad_pos = saved_grad_pos;
  a->fname = saved_fname;
  a->nested = saved_nested;
  a->in_nested = saved_in_nested;
  return g;
}

/* The transpose of remat(f)(args): f's VJP function, called with the
 * arguments and the results' cotangents, computes f's inside again and
 * gives the arguments' cotangents. */
static void vjp_remat(AD *a, Inst *in) {
  bool any = false;
  for (int k = 0; k < in->nresults; k++)
    any |= a->ct[in->results[k]->id] != NULL;
  if (!any)
    return;
  Func *f = in->callee;
  Func *g = build_vjp(a, f);
  if (a->too_big || a->failed)
    return;
  int np = in->nargs, nr = in->nresults;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(np + nr + 1));
  for (int k = 0; k < np; k++)
    args[k] = ad_primal(a, in->args[k]);
  for (int k = 0; k < nr; k++)
    args[np + k] = a->ct[in->results[k]->id] ? ad_to_type(a, a->ct[in->results[k]->id], &g->body->args[np + k]->type)
                                            : ad_zeros(a, &g->body->args[np + k]->type);
  Inst *call = ir_emit(a->mod, a->b, IR_CALL, in->pos, np + nr, args, g->nresults, g->results);
  ad_grow(a);
  call->callee = g;
  for (int k = 0, j = 0; k < np; k++)
    if (is_float_value(f->body->args[k]))
      ad_add_ct(a, in->args[k], call->results[j++]);
}

static void collect_grads(Module *mod, IrBlock *b, Vec *out) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR_GRAD)
      vec_push(out, in);
    for (int r = 0; r < in->nregions; r++)
      collect_grads(mod, in->regions[r], out);
  }
}

static bool holds_grad(const IrBlock *b) {
  bool found = false;
  for (int i = 0; i < b->insts.len && !found; i++) {
    const Inst *in = b->insts.data[i];
    found = in->op == IR_GRAD;
    for (int r = 0; r < in->nregions && !found; r++)
      found = holds_grad(in->regions[r]);
  }
  return found;
}

/* reach[f]: whether f's body, or a function it calls, still holds a grad;
 * a call that closes a cycle counts as one (it is never ready). */
static void mark_reaching(const Module *mod, const CallGraph *g, char *reach) {
  for (int k = 0; k < g->nf; k++) {
    int f = g->order[k];
    bool r = holds_grad(((Func *)mod->funcs.data[f])->body);
    for (int e = g->first[f]; e < g->first[f + 1] && !r; e++)
      r = g->pos[g->to[e]] > k || reach[g->to[e]];
    reach[f] = r;
  }
}

static GradKey *grad_key(AD *a, Vec *keys, Inst *in) {
  for (int j = 0; j < keys->len; j++) {
    GradKey *k = keys->data[j];
    bool same = k->f == in->callee && k->with_value == (in->ival != 0) && k->norder == in->niv &&
                k->tuple == (in->dim2 != 0);
    for (int q = 0; same && q < in->niv; q++)
      same = k->order[q] == in->iv[q];
    if (same)
      return k;
  }
  GradKey *key = arena_alloc(sizeof *key);
  key->f = in->callee;
  key->with_value = in->ival != 0;
  key->tuple = in->dim2 != 0;
  key->norder = in->niv;
  key->order = in->iv;
  a->grad_pos = in->pos;
  key->g = build_grad(a, key);
  a->grad_pos = (Pos){0};
  vec_push(keys, key);
  return key;
}

/* Each grad becomes a call of its gradient function. A function that calls
 * grad is differentiated after that inner grad became a call, so a gradient
 * of a gradient (a second derivative) inlines the inner gradient function
 * and differentiates it like any other code. */
bool ad_module(Module *mod) {
  if (!ad_saved_module(mod))
    return false;
  AD a;
  memset(&a, 0, sizeof a);
  a.mod = mod;
  a.m = &mod->mesh;
  Vec grads = {0}, keys = {0};
  int nfuncs = mod->funcs.len;
  for (int i = 0; i < nfuncs; i++)
    collect_grads(mod, ((Func *)mod->funcs.data[i])->body, &grads);
  CallGraph cg;   /* of the functions written; below, each grad only adds a call of a new function */
  ir_call_graph(mod, nfuncs, &cg);
  char *reach = mem_calloc((size_t)nfuncs + 1, 1);
  for (int done = 0, progress = 1; done < grads.len && progress;) {
    progress = 0;
    mark_reaching(mod, &cg, reach);
    for (int i = 0; i < grads.len; i++) {
      Inst *in = grads.data[i];
      int f = ptrmap_get(&cg.index, in->callee);
      if (in->op != IR_GRAD || f < 0 || reach[f])
        continue;
      in->callee = grad_key(&a, &keys, in)->g;
      in->op = IR_CALL;
      done++;
      progress = 1;
    }
  }
  /* What is left sits on a call cycle; build_grad reports it. */
  for (int i = 0; i < grads.len; i++) {
    Inst *in = grads.data[i];
    if (in->op == IR_GRAD) {
      in->callee = grad_key(&a, &keys, in)->g;
      in->op = IR_CALL;
    }
  }
  free(reach);
  ir_call_graph_free(&cg);
  free(grads.data);
  free(keys.data);
  ad_free(&a);
  return !a.failed;
}

/* The pass's state, freed. */
void ad_free(AD *a) {
  free(a->ct);
  free(a->rm);
  free(a->active);
  free(a->tapes.data);
  ptrmap_free(&a->tapes_index);
  free(a->saved.data);
  ptrmap_free(&a->saved_index);
  ptrmap_free(&a->fwd_pushes);
  free(a->nested_pushes.data);
  ptrmap_free(&a->vjp_index);
  free(a->vjps.data);
}
