/* op_index.c: the indexing family: NumPy basic indexing x[i, lo:hi, :]
 * (static and run-time integer indices), dynamic_slice and
 * dynamic_update_slice (typing-rules 1.10, 3.4, 3.5, 4.2). Joining (pad,
 * concatenate, stack, split) is op_join.c, which shares this file's resize
 * rule (rule_resize), sharding check (rule_same_sharding) and slices
 * (op_slice_ad, op_slice_to); take, take_along_axis and one_hot are the
 * gather half of the family, in op_gather.c.
 *
 * Input: the typed AST of these expressions. Output: global IR (slice,
 * dynamic_slice, dynamic_update_slice, index_check), their transposes
 * (slice -> pad, dynamic_slice <-> dynamic_update_slice into zeros; integer
 * indices are reshapes around these), their partitioning, and C.
 *
 * Types (1.10): every dim whose size changes and that is sharded must stay
 * divisible by its axes ([E_RESIZE]); the result keeps the operand's
 * sharding; a result that is a scalar or has only size-1 dims is
 * replicated. An annotation on an indexing expression is its result
 * sharding. Slices keep U and R; dynamic_slice keeps R and rejects U;
 * dynamic_update_slice needs identical shardings ([E_SAME]) and equal U, R
 * (an update of one row into a batch split over devices is resharded by
 * the program first, as in JAX).
 *
 * Partitioning moves only the rows that change owner, never the whole
 * array: a dim whose size changes and that is sharded over a group of
 * axes goes through one `shift` (op_shift.c, runtime/redistribute.c:
 * output row j of the dim is input row j - offset; each rank sends exactly
 * the rows its block holds that another rank's block needs), with the offset known at
 * compile time (slice) or at run time (dynamic_slice,
 * dynamic_update_slice, x[i]). Dims that are not sharded are cut locally.
 * So x[2:6] of f32[8@X] on |X| = 2 moves nothing, and x[0:4] moves only
 * rank 0's upper half to rank 1.
 *
 * Invariants of the SPMD forms: slice and dynamic_slice change only dims
 * that are not split across ranks (local kernels); dynamic_update_slice's
 * update is either the window (dims local to every rank) or already laid
 * out like the operand (shifted dims); shift is the only one that
 * communicates.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

enum {
  IR_SLICE = IR_BASE_INDEX, /* args x; iv: start of each dim; sizes from the result */
  IR_DSLICE,                /* args x, one i32 start per dim (clamped so the window fits) */
  IR_DUPDATE,               /* args x, u, one i32 start per dim (clamped); iv: u's global sizes */
  IR_INDEX_CHECK,           /* args i (i32); dim, ival: the dim's size; result i, negative counted from the end */
};

enum { B_DSLICE, B_DUPDATE };

/* What typing learned for lowering (Expr.tc). */
typedef struct {
  Expr *x, *u;
  int rank;                         /* the operand's */
  int64_t start[MAX_RANK];          /* static starts */
  int64_t size[MAX_RANK];           /* sizes of the slice */
  Expr *dyn[MAX_RANK];              /* run-time starts or indices (NULL: static) */
  bool dynamic;
  unsigned drop;                    /* dims an integer index removes */
  Type slice;                       /* the slice before dims are dropped */
} IndexInfo;

static IndexInfo *index_info(Expr *e) {
  IndexInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  return info;
}

static int64_t parts(const Mesh *m, DimSpec s) { return ty_spec_parts(m, s); }
static bool split_over(const Mesh *m, DimSpec s) { return parts(m, s) > 1; }

/* ---- types: dims dropped --------------------------------------------------------------- */

static Type drop_dims(const Type *t, unsigned drop) {
  Type r = *t;
  r.rank = 0;
  for (int d = 0; d < t->rank; d++)
    if (!(drop & (1u << d))) {
      r.shape[r.rank] = t->shape[d];
      r.spec[r.rank++] = t->spec[d];
    }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  return r;
}

/* ---- the rule (1.10) -------------------------------------------------------------------- */

/* x resized to `size`: the result keeps x's sharding; a dim that changes
 * size and is sharded must stay divisible by its axes. A result whose dims
 * (those not in `drop`) all have size 1, or a scalar, is replicated.
 * Returns -1, or the first dim that breaks divisibility. */
static int resize_specs(const Mesh *m, const Type *x, const int64_t *size, unsigned drop, Type *r) {
  *r = *x;
  r->weak = false;
  bool all_one = true;
  for (int d = 0; d < x->rank; d++) {
    r->shape[d] = size[d];
    if (!(drop & (1u << d)))
      all_one &= size[d] == 1;
  }
  if (all_one) {
    for (int d = 0; d < x->rank; d++)
      r->spec[d].n = 0;
    return -1;
  }
  for (int d = 0; d < x->rank; d++)
    if (size[d] != x->shape[d] && x->spec[d].n && size[d] % parts(m, x->spec[d]))
      return d;
  return -1;
}

/* The operand with dim d replicated: the reshard that makes a resize legal. */
static Type unshard_dim(const Type *x, int d) {
  Type t = *x;
  t.spec[d].n = 0;
  t.weak = false;
  return t;
}

/* The fix of a resize that breaks divisibility, for calls whose
 * annotation asserts: reshard operand 0 there. */
static const char *reshard_fix(const Mesh *m, const Type *fix) {
  const char *t = ty_str(m, fix);
  return rule_stage_reshard(arena_printf("reshard the operand first: reshard(x, %s)", t), 0, t,
                            arena_printf("reshard the operand to %s", t));
}

static bool resize_fail(RuleCtx *c, const Type *x, int d, int64_t size, const char *fix) {
  return fail(c, "E_RESIZE",
              "%s: dim %d of %s is sharded over %s and would get size %lld, which is not divisible by %lld (the "
              "devices along %s could not hold equal blocks); %s",
              c->opname, d, TS(x), ty_spec_str(c->mesh, x->spec[d]) + 1, (long long)size,
              (long long)parts(c->mesh, x->spec[d]), ty_spec_str(c->mesh, x->spec[d]) + 1, fix);
}

bool rule_resize(RuleCtx *c, const Type *x, const int64_t *size, Type *out) {
  int bad = resize_specs(c->mesh, x, size, 0, out);
  if (bad < 0)
    return true;
  Type fix = unshard_dim(x, bad);
  return resize_fail(c, x, bad, size[bad], reshard_fix(c->mesh, &fix));
}

/* dynamic_slice and run-time indices have no rule for pending sums (1.10). */
static bool no_unreduced(RuleCtx *c, const Type *x, const char *what) {
  if (!x->U)
    return true;
  return fail(c, "E_UR",
              "%s of %s: the operand is unreduced (a pending sum over %s), and a slice at a run-time start has no "
              "rule for pending sums (typing-rules 1.10); reduce it first with %s",
              what, TS(x), ty_axes_str(c->mesh, x->U), rule_reduce_fix(c, x, x->U));
}

/* The annotation of an indexing expression as its out_sharding: the
 * result's shape, dtype and V, and the operand's unreduced and reduced
 * axes (a slice keeps them). */
static bool index_annot(RuleCtx *c, const Type *x, const Type *plain, const Type *annot, Type *out) {
  if (!rule_check_annot(c, annot, plain, "indexing"))
    return false;
  return rule_annot_keeps_states(c, "indexing", x, annot, out);
}

/* ---- typing: x[i, lo:hi, :] --------------------------------------------------------------- */

/* A compile-time integer: a literal, a const or arithmetic on them. */
bool op_static_int(TcCtx *c, Expr *b, int64_t *v, const char *what) {
  Type t = tc_expr(c, b);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_ARRAY || t.rank != 0 || !t.weak || t.dtype != DT_I32) {
    diag_error(b->pos, "E_ARG",
               "%s must be a compile-time integer (a literal, a const or arithmetic on them), not %s; for a start "
               "known only at run time use dynamic_slice(x, (s, ...), (n, ...))",
               what, t.kind == TY_ARRAY ? TS(&t) : "this");
    return false;
  }
  return tc_const_int(c, b, v);
}

/* A slice item lo:hi of dim d (size n), NumPy's rules: a missing bound is
 * the start or the end, a negative one counts from the end, bounds beyond
 * the dim are clamped to it. An empty slice is an error. */
static bool slice_item(TcCtx *c, Expr *it, int d, int64_t n, int64_t *start, int64_t *size) {
  int64_t lo = 0, hi = n;
  if (it->lhs && !op_static_int(c, it->lhs, &lo, "a slice bound"))
    return false;
  if (it->rhs && !op_static_int(c, it->rhs, &hi, "a slice bound"))
    return false;
  if (lo < 0)
    lo += n;
  if (hi < 0)
    hi += n;
  lo = lo < 0 ? 0 : lo > n ? n : lo;
  hi = hi < 0 ? 0 : hi > n ? n : hi;
  if (hi <= lo) {
    diag_error(it->pos, "E_SHAPE", "the slice %s of dim %d (size %lld) is empty; shdc has no empty arrays",
               tc_expr_text(it), d, (long long)n);
    return false;
  }
  *start = lo;
  *size = hi - lo;
  return true;
}

/* A run-time scalar index or start: an i32 scalar, not a pending sum. */
static bool runtime_int(TcCtx *c, Expr *i, const Type *t, const char *what) {
  if (t->kind != TY_ARRAY || t->rank != 0) {
    if (t->kind == TY_ARRAY)
      diag_error(i->pos, "E_ARG",
                 "%s must be a scalar, not the array %s; to gather with an array of indices use take(x, idx, "
                 "axis=k)",
                 what, TS(t));
    else
      tc_want_array(c, i, t, what);
    return false;
  }
  if (t->dtype != DT_I32) {
    diag_error(i->pos, "E_DTYPE", "%s must be an i32, not %s; convert with cast(i, i32)", what, TS(t));
    return false;
  }
  if (t->U) {
    Type r = *t;
    r.U &= c->manual;
    diag_error(i->pos, "E_UR", "%s is unreduced (%s); reduce it first: reshard(i, %s)", what, TS(t), TS(&r));
    return false;
  }
  return true;
}

/* An integer index of dim d: static (checked now, negative counting from
 * the end) or a run-time i32 (checked at run time). */
static bool int_item(TcCtx *c, Expr *it, int d, int64_t n, IndexInfo *info, Type *t) {
  *t = tc_expr(c, it);
  if (t->kind == TY_ERROR)
    return false;
  if (t->kind == TY_ARRAY && t->rank == 0 && t->weak) {
    if (t->dtype != DT_I32) {
      diag_error(it->pos, "E_DTYPE", "an index is an integer, not %s", TS(t));
      return false;
    }
    int64_t k;
    if (!tc_const_int(c, it, &k))
      return false;
    if (k < -n || k >= n) {
      diag_error(it->pos, "E_SHAPE", "index %lld is out of range for dim %d of size %lld", (long long)k, d,
                 (long long)n);
      return false;
    }
    info->start[d] = k < 0 ? k + n : k;
    return true;
  }
  if (!runtime_int(c, it, t, "an index"))
    return false;
  info->dyn[d] = it;
  info->dynamic = true;
  return true;
}

/* The fix for an indexing result that would break divisibility: annotate
 * the result replicated along the offending dims (the owners send). */
static const char *index_fix(TcCtx *c, Expr *e, const Type *x, const IndexInfo *info) {
  Type r, xr = *x;
  resize_specs(c->mesh, x, info->size, info->drop, &r);
  for (int d = 0; d < x->rank; d++)
    if (info->size[d] != x->shape[d] && x->spec[d].n && info->size[d] % parts(c->mesh, x->spec[d]))
      r.spec[d].n = xr.spec[d].n = 0;
  Type f = drop_dims(&r, info->drop);
  xr.weak = false;
  rule_stage_annotate(NULL, TS(&f), arena_printf("annotate the result as %s", TS(&f)));
  rule_stage_reshard(NULL, 0, TS(&xr), arena_printf("reshard the operand to %s", TS(&xr)));
  return arena_printf("annotate the result to say how it is sharded, e.g. `%s as %s` (the owners send the rows), "
                      "or reshard the operand first: reshard(x, %s)",
                      tc_expr_text(e), TS(&f), TS(&xr));
}

static Type check_index(TcCtx *c, Expr *e, const Type *annot) {
  IndexInfo *info = index_info(e);
  Type x = tc_operand(c, e->lhs, "indexing");
  if (x.kind == TY_ERROR)
    return x;
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "cannot index the scalar %s", TS(&x));
    return ty_error();
  }
  if (e->args.len > x.rank) {
    diag_error(e->pos, "E_SHAPE", "too many indices for %s: %d given, but it has %d dim%s", TS(&x), e->args.len,
               x.rank, x.rank == 1 ? "" : "s");
    return ty_error();
  }
  info->x = e->lhs;
  info->rank = x.rank;
  for (int d = 0; d < x.rank; d++)
    info->size[d] = x.shape[d];
  Type ops[MAX_RANK + 1];
  const Type *opp[MAX_RANK + 1];
  int nops = 0;
  ops[nops++] = x;
  bool ok = true;
  for (int d = 0; d < e->args.len; d++) {
    Expr *it = e->args.data[d];
    if (it->kind == EX_SLICE) {
      ok &= slice_item(c, it, d, x.shape[d], &info->start[d], &info->size[d]);
      continue;
    }
    Type t;
    if (!int_item(c, it, d, x.shape[d], info, &t)) {
      ok = false;
      continue;
    }
    info->size[d] = 1;
    info->drop |= 1u << d;
    if (info->dyn[d])
      ops[nops++] = t;
  }
  if (!ok)
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "indexing");
  if (info->dynamic && !no_unreduced(&r, &x, "indexing"))
    return ty_error();
  for (int i = 0; i < nops; i++)
    opp[i] = &ops[i];
  Type eff[MAX_RANK + 1];
  AxisSet V;
  if (!rule_vma_unify(&r, nops, opp, eff, &V))
    return ty_error();
  x = eff[0];
  Type slice, out;
  if (annot) {
    Type plain = ty_strip_sharding(&x);
    for (int d = 0; d < x.rank; d++)
      plain.shape[d] = info->size[d];
    plain = drop_dims(&plain, info->drop);
    plain.V = V;
    Type a2 = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, V, x.U, x.R);
    if (!index_annot(&r, &x, &plain, &a2, &out))
      return ty_error();
    slice = ty_keep_dims(&out, &x, info->drop);   /* size-1 unsharded dims where dropped */
  } else {
    int bad = resize_specs(c->mesh, &x, info->size, info->drop, &slice);
    if (bad >= 0 && !resize_fail(&r, &x, bad, info->size[bad], index_fix(c, e, &x, info)))
      return ty_error();
    slice.V = V;
    out = drop_dims(&slice, info->drop);
  }
  info->slice = slice;
  return out;
}

/* ---- typing: dynamic_slice, dynamic_update_slice ------------------------------------------- */

/* (a, b, ...), [a, b, ...], or for one dim a bare a. */
static int seq_items(Expr *t, Expr **items, int max) {
  if (t->kind != EX_TUPLE && t->kind != EX_LIST) {
    items[0] = t;
    return 1;
  }
  int n = t->args.len;
  for (int i = 0; i < n && i < max; i++)
    items[i] = t->args.data[i];
  return n;
}

/* One run-time start per dim into info->dyn; their types into ts. */
static bool starts_arg(TcCtx *c, Expr *a, const Type *x, IndexInfo *info, Type *ts, const char *what) {
  Expr *items[MAX_RANK + 1];
  int n = seq_items(a, items, MAX_RANK);
  if (n != x->rank) {
    diag_error(a->pos, "E_ARG", "%s: %s has %d dim%s, so it takes %d start%s, not %d", what, TS(x), x->rank,
               x->rank == 1 ? "" : "s", x->rank, x->rank == 1 ? "" : "s", n);
    return false;
  }
  bool ok = true;
  for (int d = 0; d < n; d++) {
    ts[d] = tc_expr(c, items[d]);
    if (ts[d].kind == TY_ERROR) {
      ok = false;
      continue;
    }
    if (ts[d].weak && ts[d].kind == TY_ARRAY && ts[d].rank == 0 && ts[d].dtype == DT_I32) {
      info->dyn[d] = items[d];
      continue;
    }
    ok &= runtime_int(c, items[d], &ts[d], arena_printf("%s: a start", what));
    info->dyn[d] = items[d];
  }
  return ok;
}

static bool all_static(const IndexInfo *info) {
  for (int d = 0; d < info->rank; d++)
    if (info->dyn[d] && !info->dyn[d]->ty->weak)
      return false;
  return true;
}

static Type check_dslice(TcCtx *c, Expr *e, const Type *annot) {
  IndexInfo *info = index_info(e);
  Expr *pos[3], *kw[1];
  if (tc_call_args(c, e, pos, 3, 3, kw, NULL, 0, "dynamic_slice(x, (s0, s1, ...), (n0, n1, ...))") < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], "dynamic_slice");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  info->rank = x.rank;
  Type ts[MAX_RANK + 1];
  if (!starts_arg(c, pos[1], &x, info, ts, "dynamic_slice"))
    return ty_error();
  Expr *items[MAX_RANK + 1];
  int n = seq_items(pos[2], items, MAX_RANK);
  if (n != x.rank) {
    diag_error(pos[2]->pos, "E_ARG", "dynamic_slice: %s has %d dims, so it takes %d sizes, not %d", TS(&x), x.rank,
               x.rank, n);
    return ty_error();
  }
  for (int d = 0; d < n; d++) {
    if (!op_static_int(c, items[d], &info->size[d], "a size of dynamic_slice"))
      return ty_error();
    if (info->size[d] < 1 || info->size[d] > x.shape[d]) {
      diag_error(items[d]->pos, "E_SHAPE", "dynamic_slice: size %lld of dim %d must be between 1 and %lld",
                 (long long)info->size[d], d, (long long)x.shape[d]);
      return ty_error();
    }
  }
  info->dynamic = !all_static(info);
  RuleCtx r = tc_rule(c, e->pos, "dynamic_slice");
  if (!no_unreduced(&r, &x, "dynamic_slice"))
    return ty_error();
  const Type *opp[MAX_RANK + 1];
  opp[0] = &x;
  for (int d = 0; d < x.rank; d++)
    opp[d + 1] = &ts[d];
  Type eff[MAX_RANK + 1];
  AxisSet V;
  if (!rule_vma_unify(&r, x.rank + 1, opp, eff, &V))
    return ty_error();
  Type out;
  if (!rule_resize(&r, &eff[0], info->size, &out))
    return ty_error();
  out.V = V;
  info->slice = out;
  return out;
}

static bool same_dtype_shape_rank(TcCtx *c, Expr *at, const Type *x, const Type *u, const char *what) {
  if (u->rank != x->rank) {
    diag_error(at->pos, "E_SHAPE", "%s: the update %s must have the operand's rank (%s)", what, TS(u), TS(x));
    return false;
  }
  if (u->dtype != x->dtype) {
    diag_error(at->pos, "E_DTYPE", "%s: the update %s must have the operand's dtype (%s); convert with cast(u, %s)",
               what, TS(u), TS(x), ty_dtype_name(x->dtype));
    return false;
  }
  for (int d = 0; d < x->rank; d++)
    if (u->shape[d] > x->shape[d]) {
      diag_error(at->pos, "E_SHAPE", "%s: the update %s is larger than the operand %s in dim %d", what, TS(u),
                 TS(x), d);
      return false;
    }
  return true;
}

/* Operand and update (or the operands of concatenate, stack): the same dim
 * specs ([E_SAME]), unreduced and reduced axes ([E_UR]), as JAX requires
 * (typing-rules 1.10: dynamic_update_slice's operand and update have
 * identical shardings). The fix reshards the update like the operand when
 * its sizes allow, else the operand like the update. */
bool rule_same_sharding(RuleCtx *c, const Type *a, const Type *b, const char *bname, const char *btext) {
  bool same = true;
  for (int d = 0; d < a->rank && same; d++)
    same = ty_spec_equal(a->spec[d], b->spec[d]);
  if (!same) {
    Type want = *a;
    bool fits = true;
    for (int d = 0; d < a->rank; d++) {
      want.shape[d] = b->shape[d];
      fits &= b->shape[d] % parts(c->mesh, a->spec[d]) == 0;
    }
    want.V = b->V;
    want.weak = false;
    if (fits || strcmp(bname, "update"))
      return fail(c, "E_SAME", "%s needs operands sharded alike, but %s and %s differ; reshard the %s: reshard(%s, %s)",
                  c->opname, TS(a), TS(b), bname, btext, TS(&want));
    Type op = *b;
    for (int d = 0; d < a->rank; d++)
      op.shape[d] = a->shape[d];
    op.V = a->V;
    op.weak = false;
    return fail(c, "E_SAME", "%s needs the operand and the update sharded alike, but %s and %s differ, and the "
                "update's sizes cannot be split like the operand; reshard the operand like the update first: "
                "reshard(x, %s) (and back afterwards)", c->opname, TS(a), TS(b), TS(&op));
  }
  if (a->U != b->U) {
    const Type *u = a->U & ~b->U ? a : b;
    return fail(c, "E_UR",
                "%s needs operands unreduced over the same axes, but %s and %s differ; reduce with %s first",
                c->opname, TS(a), TS(b), rule_reduce_fix(c, u, u->U & ~(u == a ? b->U : a->U)));
  }
  if (a->R != b->R) {
    const Type *o = a->R & ~b->R ? b : a;
    return fail(c, "E_UR", "%s needs operands reduced over the same axes, but %s and %s differ; mark the other one "
                "reduced: %s", c->opname, TS(a), TS(b), rule_reduced_fix(c, o, (a->R | b->R) & ~o->R));
  }
  return true;
}

static Type check_dupdate(TcCtx *c, Expr *e, const Type *annot) {
  IndexInfo *info = index_info(e);
  Expr *pos[3], *kw[1];
  if (tc_call_args(c, e, pos, 3, 3, kw, NULL, 0, "dynamic_update_slice(x, u, (s0, s1, ...))") < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], "dynamic_update_slice"), u = tc_operand(c, pos[1], "dynamic_update_slice");
  if (x.kind == TY_ERROR || u.kind == TY_ERROR)
    return ty_error();
  info->x = pos[0];
  info->u = pos[1];
  info->rank = x.rank;
  if (!same_dtype_shape_rank(c, pos[1], &x, &u, "dynamic_update_slice"))
    return ty_error();
  Type ts[MAX_RANK + 2];
  if (!starts_arg(c, pos[2], &x, info, ts + 2, "dynamic_update_slice"))
    return ty_error();
  for (int d = 0; d < x.rank; d++)
    info->size[d] = u.shape[d];
  info->dynamic = !all_static(info);
  RuleCtx r = tc_rule(c, e->pos, "dynamic_update_slice");
  ts[0] = x;
  ts[1] = u;
  const Type *opp[MAX_RANK + 2];
  for (int i = 0; i < x.rank + 2; i++)
    opp[i] = &ts[i];
  Type eff[MAX_RANK + 2];
  AxisSet V;
  if (!rule_vma_unify(&r, x.rank + 2, opp, eff, &V) ||
      !rule_same_sharding(&r, &eff[0], &eff[1], "update", tc_expr_text(info->u)))
    return ty_error();
  Type out = eff[0];
  out.V = V;
  out.weak = false;
  return out;
}

/* ---- lowering -------------------------------------------------------------------------------- */

static int64_t *copy_iv(const int64_t *v, int n) {
  int64_t *r = arena_alloc(sizeof(int64_t) * (size_t)(n + 1));
  memcpy(r, v, sizeof(int64_t) * (size_t)n);
  return r;
}

static Value *lower_slice(Lower *L, Pos pos, Value *x, const int64_t *start, const Type *t) {
  if (ty_equal(&x->type, t))
    return x;
  Inst *in = lower_emit(L, IR_SLICE, pos, 1, &x, *t);
  in->iv = copy_iv(start, t->rank);
  in->niv = t->rank;
  return in->results[0];
}

/* The starts of a run-time slice: the checked index for x[i], a static
 * start as a constant, a dynamic_slice start as it is (clamped later). */
static void lower_starts(Lower *L, Expr *e, IndexInfo *info, const Type *x, Value **args, bool checked) {
  for (int d = 0; d < info->rank; d++) {
    if (!info->dyn[d]) {
      args[d] = lower_const(L, e->pos, DT_I32, (double)info->start[d]);
      continue;
    }
    Value *s = lower_as(L, info->dyn[d], DT_I32);
    if (checked) {
      Inst *ck = lower_emit(L, IR_INDEX_CHECK, info->dyn[d]->pos, 1, &s, s->type);
      ck->dim = d;
      ck->ival = x->shape[d];
      s = ck->results[0];
    }
    args[d] = s;
  }
}

static Value *lower_index(Lower *L, Expr *e) {
  IndexInfo *info = e->tc;
  Value *x = lower_vma(L, e->pos, lower_expr(L, info->x), info->slice.V);
  Value *v;
  if (!info->dynamic) {
    v = lower_slice(L, e->pos, x, info->start, &info->slice);
  } else {
    Value **args = arena_alloc(sizeof(Value *) * (size_t)(info->rank + 2));
    args[0] = x;
    lower_starts(L, e, info, &x->type, args + 1, true);
    v = lower_emit1(L, IR_DSLICE, e->pos, info->rank + 1, args, info->slice);
  }
  if (!info->drop)
    return v;
  return lower_emit1(L, IR_RESHAPE, e->pos, 1, &v, *e->ty);
}

/* Static starts of dynamic_slice and dynamic_update_slice are clamped at
 * compile time, as the run-time ones are when they run. */
static void clamp_static(Lower *L, IndexInfo *info, const Type *x, int64_t *start) {
  for (int d = 0; d < info->rank; d++) {
    int64_t s = (int64_t)lower_fold(L, info->dyn[d]), hi = x->shape[d] - info->size[d];
    start[d] = s < 0 ? 0 : s > hi ? hi : s;
  }
}

static Value *lower_dslice(Lower *L, Expr *e) {
  IndexInfo *info = e->tc;
  Value *x = lower_vma(L, e->pos, lower_expr(L, info->x), e->ty->V);
  if (!info->dynamic) {
    int64_t start[MAX_RANK];
    clamp_static(L, info, &x->type, start);
    return lower_slice(L, e->pos, x, start, e->ty);
  }
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(info->rank + 2));
  args[0] = x;
  lower_starts(L, e, info, &x->type, args + 1, false);
  return lower_emit1(L, IR_DSLICE, e->pos, info->rank + 1, args, *e->ty);
}

static Value *lower_dupdate(Lower *L, Expr *e) {
  IndexInfo *info = e->tc;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(info->rank + 3));
  args[0] = lower_vma(L, e->pos, lower_expr(L, info->x), e->ty->V);
  args[1] = lower_vma(L, e->pos, lower_expr(L, info->u), e->ty->V);
  lower_starts(L, e, info, &args[0]->type, args + 2, false);
  Inst *in = lower_emit(L, IR_DUPDATE, e->pos, info->rank + 2, args, *e->ty);
  in->iv = copy_iv(info->size, info->rank);
  in->niv = info->rank;
  return in->results[0];
}

/* ---- transposes (4.2) ---------------------------------------------------------------------- */

static Value *ad_dupdate(AD *a, Value *x, Value *u, Value **args, int r, const Type *t);

/* Whether the cotangent prev of x (type t) can take the cotangent of its
 * window of type w in place (dupdate(prev, window(prev) + g)): the dims the
 * window cuts are unsharded, so no rows change owner. */
static bool window_in_place(const Value *prev, const Type *t, const Type *w) {
  if (!prev || !ty_equal(&prev->type, t))
    return false;
  for (int d = 0; d < t->rank; d++)
    if (w->shape[d] != t->shape[d] && t->spec[d].n)
      return false;
  return true;
}

Value *op_slice_ad(AD *a, Value *x, const int64_t *start, Type t) {
  Inst *s = ad_emit(a, IR_SLICE, 1, &x, t);
  s->iv = copy_iv(start, t.rank);
  s->niv = t.rank;
  return s->results[0];
}

static void vjp_slice(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  const Type *X = &x->type, *Y = &in->results[0]->type;
  int r = X->rank;
  Type t = ty_ct(X);
  Value *prev = ad_ct(a, x);
  if (window_in_place(prev, &t, Y)) {
    /* prev + pad(g) is g added into prev's window (as in vjp_dslice) */
    Value *w = op_slice_ad(a, prev, in->iv, ty_ct(Y));
    Value **args = arena_alloc(sizeof(Value *) * (size_t)(r + 3));
    for (int d = 0; d < r; d++)
      args[2 + d] = ad_const(a, DT_I32, (double)in->iv[d]);
    ad_set_ct(a, x, ad_dupdate(a, prev, ad_bin(a, BIN_ADD, w, g), args, r, &t));
    return;
  }
  Inst *p = ad_emit(a, IR_PAD, 1, &g, ty_ct(X));
  p->iv = arena_alloc(sizeof(int64_t) * (size_t)(2 * r + 1));
  for (int d = 0; d < r; d++) {
    p->iv[d] = in->iv[d];
    p->iv[r + d] = X->shape[d] - in->iv[d] - Y->shape[d];
  }
  p->niv = 2 * r;
  ad_add_ct(a, x, p->results[0]);
}

/* The starts of a run-time slice, as the code being emitted has them. */
static Value **primal_starts(AD *a, Inst *in, int first, int extra) {
  int r = in->args[0]->type.rank;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(r + extra + 1));
  for (int d = 0; d < r; d++)
    args[extra + d] = ad_primal(a, in->args[first + d]);
  return args;
}

static Value *ad_dupdate(AD *a, Value *x, Value *u, Value **args, int r, const Type *t) {
  args[0] = x;
  args[1] = u;
  Inst *in = ad_emit(a, IR_DUPDATE, r + 2, args, *t);
  int64_t *n = arena_alloc(sizeof(int64_t) * (size_t)(r + 1));
  for (int d = 0; d < r; d++)
    n[d] = u->type.shape[d];
  in->iv = n;
  in->niv = r;
  return in->results[0];
}

/* dynamic_slice <-> dynamic_update_slice into zeros (the same clamped
 * window). */
static void vjp_dslice(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  int r = x->type.rank;
  Type t = ty_ct(&x->type);
  Value **args = primal_starts(a, in, 1, 2);
  Value *prev = ad_ct(a, x);
  if (window_in_place(prev, &t, &in->results[0]->type)) {
    /* prev + dupdate(zeros, g, s) is dupdate(prev, dslice(prev, s) + g, s):
     * a pass over the window instead of two over the whole array (a layer
     * loop's gradient of its stacked weights, x[l], would otherwise zero
     * and add all L layers at every layer), in place when prev is not
     * shared, as a reverse loop's accumulator is not. */
    Value **sargs = primal_starts(a, in, 1, 1);
    sargs[0] = prev;
    Value *w = ad_emit1(a, IR_DSLICE, r + 1, sargs, ty_ct(&in->results[0]->type));
    ad_set_ct(a, x, ad_dupdate(a, prev, ad_bin(a, BIN_ADD, w, g), args, r, &t));
    return;
  }
  ad_add_ct(a, x, ad_dupdate(a, ad_zeros(a, &t), g, args, r, &t));
}

static void vjp_dupdate(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0], *u = in->args[1];
  int r = x->type.rank;
  if (ad_wants_ct(a, x)) {
    Type t = ty_ct(&x->type), tu = ty_ct(&u->type);
    Value **args = primal_starts(a, in, 2, 2);
    ad_add_ct(a, x, ad_dupdate(a, g, ad_zeros(a, &tu), args, r, &t));
  }
  if (ad_wants_ct(a, u)) {
    Value **args = primal_starts(a, in, 2, 1);
    args[0] = g;
    ad_add_ct(a, u, ad_emit1(a, IR_DSLICE, r + 1, args, ty_ct(&u->type)));
  }
}

/* ---- partitioning ------------------------------------------------------------------------------ */


static Value *part_const(Part *p, Pos pos, int64_t v) {
  Type t = ty_scalar(DT_I32);
  Inst *in = ir_emit(part_mod(p), part_block(p), IR_CONST, pos, 0, NULL, 1, &t);
  in->fval = (double)v;
  in->ival = v;
  return in->results[0];
}

static bool const_of(const Value *v, int64_t *out) {
  if (!v->def || v->def->op != IR_CONST)
    return false;
  *out = (int64_t)v->def->fval;
  return true;
}

static Value *part_binop(Part *p, Pos pos, int fn, Value *a, Value *b) {
  Type t = a->type;
  t.V |= b->type.V;
  t.U = t.R = 0;
  t.weak = false;
  Inst *in = ir_emit(part_mod(p), part_block(p), IR_BINARY, pos, 2, (Value *[]){a, b}, 1, &t);
  in->fn = fn;
  return in->results[0];
}

/* A start clamped so that the window fits: min(max(s, 0), hi), folded when
 * s is a constant (*known then holds it). */
static Value *clamp_start(Part *p, Pos pos, Value *s, int64_t hi, int64_t *known, bool *is_known) {
  int64_t k;
  if (const_of(s, &k)) {
    *known = k < 0 ? 0 : k > hi ? hi : k;
    *is_known = true;
    return part_const(p, pos, *known);
  }
  *is_known = false;
  return part_binop(p, pos, BIN_MIN, part_binop(p, pos, BIN_MAX, s, part_const(p, pos, 0)), part_const(p, pos, hi));
}

static Value *local_slice(Part *p, Pos pos, Value *x, const int64_t *start, const Type *t) {
  Inst *in = ir_emit(part_mod(p), part_block(p), IR_SLICE, pos, 1, &x, 1, t);
  in->iv = copy_iv(start, t->rank);
  in->niv = t->rank;
  return in->results[0];
}

/* x cut to the box (start, size) and resharded to T: local dims first (the
 * data shrinks), then one shift per split dim. */
Value *op_slice_to(Part *p, Pos pos, Value *x, const int64_t *start, const int64_t *size, const Type *T) {
  const Mesh *m = &part_mod(p)->mesh;
  Type X = x->type, L = X;
  int64_t ls[MAX_RANK] = {0};
  bool local = false;
  DimSpec g;
  unsigned fl;
  for (int d = 0; d < X.rank; d++)
    if (size[d] != X.shape[d] && !op_shift_plan(m, X.spec[d], T->spec[d], size[d], &g, &fl)) {
      L.shape[d] = size[d];
      ls[d] = start[d];
      local = true;
    }
  if (local)
    x = local_slice(p, pos, x, ls, &L);
  for (int d = 0; d < X.rank; d++)
    if (size[d] != X.shape[d] && op_shift_plan(m, X.spec[d], T->spec[d], size[d], &g, &fl)) {
      int64_t off = -start[d];
      x = op_shift_rows(p, pos, 1, &x, &off, NULL, fl, d, g, size[d]);
    }
  return part_to(p, pos, x, T);
}

static void part_slice(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  part_put(p, in->results[0], op_slice_to(p, in->pos, args[0], in->iv, T->shape, T));
}

/* dynamic_slice: the clamped starts; local dims cut at them, split dims
 * shifted by them (a constant offset when the start is one). */
static void part_dslice(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *T = &in->results[0]->type;
  Value *x = args[0];
  Type X = x->type, L = X;
  int r = X.rank;
  Value *cs[MAX_RANK];
  int64_t known[MAX_RANK] = {0};
  bool is_known[MAX_RANK], local = false, all_known = true;
  DimSpec g;
  unsigned fl;
  for (int d = 0; d < r; d++) {
    is_known[d] = true;
    cs[d] = NULL;
    if (T->shape[d] == X.shape[d])
      continue;
    cs[d] = clamp_start(p, in->pos, args[1 + d], X.shape[d] - T->shape[d], &known[d], &is_known[d]);
    all_known &= is_known[d];
  }
  if (all_known) {
    part_put(p, in->results[0], op_slice_to(p, in->pos, x, known, T->shape, T));
    return;
  }
  Value **largs = arena_alloc(sizeof(Value *) * (size_t)(r + 2));
  largs[0] = x;
  for (int d = 0; d < r; d++) {
    largs[1 + d] = part_const(p, in->pos, 0);
    if (cs[d] && !op_shift_plan(m, X.spec[d], T->spec[d], T->shape[d], &g, &fl)) {
      L.shape[d] = T->shape[d];
      largs[1 + d] = cs[d];
      local = true;
    }
  }
  if (local)
    x = ir_emit(part_mod(p), part_block(p), IR_DSLICE, in->pos, r + 1, largs, 1, &L)->results[0];
  for (int d = 0; d < r; d++) {
    if (!cs[d] || !op_shift_plan(m, X.spec[d], T->spec[d], T->shape[d], &g, &fl))
      continue;
    int64_t off = -known[d];
    x = op_shift_rows(p, in->pos, 1, &x, &off, is_known[d] ? NULL : cs[d], is_known[d] ? fl : fl | SHIFT_NEG, d, g,
              T->shape[d]);
  }
  part_put(p, in->results[0], part_to(p, in->pos, x, T));
}

/* dynamic_update_slice: the update is laid out like the operand on every
 * split dim it does not cover whole (shifted to its clamped start), and is
 * the window itself on the others; then each rank writes its part. */
static void part_dupdate(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *T = &in->results[0]->type;
  int r = T->rank;
  const int64_t *n = in->iv;
  Value **largs = arena_alloc(sizeof(Value *) * (size_t)(r + 3));
  Type Ut = args[1]->type;
  int64_t known[MAX_RANK] = {0};
  bool is_known[MAX_RANK] = {0};
  for (int d = 0; d < r; d++) {
    largs[2 + d] = n[d] == T->shape[d] ? part_const(p, in->pos, 0)
                                       : clamp_start(p, in->pos, args[2 + d], T->shape[d] - n[d], &known[d], &is_known[d]);
    bool keep = n[d] == T->shape[d] || (split_over(m, T->spec[d]) && n[d] % parts(m, T->spec[d]) == 0);
    if (keep)
      Ut.spec[d] = T->spec[d];
    else
      Ut.spec[d].n = 0;
  }
  Value *u = part_to(p, in->pos, args[1], &Ut);
  for (int d = 0; d < r; d++) {
    if (n[d] == T->shape[d] || !split_over(m, T->spec[d]))
      continue;
    unsigned fl = u->type.spec[d].n ? 0 : SHIFT_SRC_REP;
    int64_t off = is_known[d] ? known[d] : 0;
    u = op_shift_rows(p, in->pos, 1, &u, &off, is_known[d] ? NULL : largs[2 + d], fl, d, T->spec[d], T->shape[d]);
  }
  largs[0] = part_to(p, in->pos, args[0], T);
  largs[1] = u;
  Inst *up = ir_emit(part_mod(p), part_block(p), IR_DUPDATE, in->pos, r + 2, largs, 1, T);
  up->iv = in->iv;
  up->niv = in->niv;
  part_put(p, in->results[0], up->results[0]);
}

/* ---- C --------------------------------------------------------------------------------------- */

static const char *ctype(const Value *v) { return ty_dtype_c(v->type.dtype); }

/* The run-time starts args[first..first+rank) as an int64_t array literal. */
static const char *starts_lit(const Inst *in, int first, int rank) { return emit_values_lit(in->args + first, rank); }

static bool same_local_shape(const Module *mod, const Type *a, const Type *b) {
  int64_t sa[MAX_RANK], sb[MAX_RANK];
  ty_local_shape(&mod->mesh, a, sa);
  ty_local_shape(&mod->mesh, b, sb);
  for (int d = 0; d < a->rank; d++)
    if (sa[d] != sb[d])
      return false;
  return a->rank == b->rank;
}

static EmitResult result_slice(const Module *mod, const Inst *in, int k) {
  return same_local_shape(mod, &in->args[0]->type, &in->results[0]->type) ? EMIT_VIEW : EMIT_ALLOC;
}

static EmitResult result_steal(const Module *mod, const Inst *in, int k) { return EMIT_STEAL_OR_ALLOC; }

static void emit_slice(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *r = in->results[0];
  if (result_slice(emit_module_of(e), in, 0) == EMIT_VIEW) {
    emit_def_alias(e, r, x);
    return;
  }
  emit_def_array(e, r, false);
  const char *starts = in->op == IR_DSLICE ? starts_lit(in, 1, x->type.rank) : emit_i64s_lit(in->iv, x->type.rank);
  emit_line(e, "shd_%s(%s, %s, sizeof(%s), %d, %s, %s, %s);", in->op == IR_DSLICE ? "dynamic_slice" : "slice",
            vname(x), vname(r), ctype(r), r->type.rank, emit_shape_lit(e, &x->type), emit_shape_lit(e, &r->type),
            starts);
}

/* The result takes the operand's buffer when it dies here and nothing else
 * refers to it, else a copy; then the window is written. */
static void emit_dupdate(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *u = in->args[1], *r = in->results[0];
  emit_def_taken(e, r, x, in);
  unsigned aligned = 0;
  for (int d = 0; d < r->type.rank; d++)
    if (u->type.shape[d] == r->type.shape[d])
      aligned |= 1u << d;
  emit_line(e, "shd_update_window(%s, %s, sizeof(%s), %d, %s, %s, %s, %s, %s, 0x%xu);", vname(r), vname(u), ctype(r),
            r->type.rank, emit_shape_lit(e, &r->type), emit_shape_lit(e, &u->type), starts_lit(in, 2, r->type.rank),
            emit_i64s_lit(in->iv, r->type.rank), emit_offset_lit(e, &r->type), aligned);
}

static void emit_index_check(Emit *e, const Inst *in) {
  emit_line(e, "int32_t %s = shd_index_check(%s, %lld, %d, %s);", vname(in->results[0]), vname(in->args[0]),
            (long long)in->ival, in->dim, emit_where_lit(e, in->pos));
}

/* ---- the IR text --------------------------------------------------------------------------------- */

static void print_slice(FILE *out, const Module *mod, const Inst *in) {
  ir_print_i64s(out, "starts", in->iv, in->niv);
}

static void print_dupdate(FILE *out, const Module *mod, const Inst *in) {
  ir_print_i64s(out, "sizes", in->iv, in->niv);
}

static void print_check(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d size=%lld", in->dim, (long long)in->ival);
}

/* ---- the tables ---------------------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* A window of x at starts iv (static) or i32 operands (dynamic), the
 * declared sizes fitting; an update keeps x's shape; an index check passes
 * its i32 through. */
static bool infer_slice(const Module *mod, const Inst *in, Type *out) {
  if (!ir_arg_is(in, 0, out->dtype))
    return false;
  const Type *x = &in->args[0]->type;
  if (x->rank != out->rank)
    return false;
  if (in->op == IR_DSLICE) {
    if (in->nargs != 1 + x->rank)
      return false;
    for (int d = 0; d < x->rank; d++)
      if (!ir_arg_is(in, 1 + d, DT_I32) || in->args[1 + d]->type.rank || out->shape[d] > x->shape[d])
        return false;
    return true;
  }
  if (in->nargs != 1 || in->niv != x->rank)
    return false;
  for (int d = 0; d < x->rank; d++)
    if (in->iv[d] < 0 || in->iv[d] + out->shape[d] > x->shape[d])
      return false;
  return true;
}

static bool infer_dupdate(const Module *mod, const Inst *in, Type *out) {
  if (!ir_arg_is(in, 0, -1) || !ir_arg_is(in, 1, in->args[0]->type.dtype))
    return false;
  int r = in->args[0]->type.rank;
  if (in->nargs != 2 + r || in->args[1]->type.rank != r)
    return false;
  for (int d = 0; d < r; d++)
    if (!ir_arg_is(in, 2 + d, DT_I32) || in->args[2 + d]->type.rank)
      return false;
  return ir_infer_shape(out, &in->args[0]->type);
}

static bool infer_index_check(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && ir_arg_is(in, 0, DT_I32) && ir_infer_shape(out, &in->args[0]->type);
}

static const OpDef ops[] = {
    {.op = IR_SLICE, .name = "slice", .print = print_slice, .vjp = vjp_slice, .partition = part_slice,
     .emit = emit_slice, .result = result_slice, .infer = infer_slice},
    {.op = IR_DSLICE, .name = "dynamic_slice", .flags = OPF_WINDOW_READ, .vjp = vjp_dslice, .partition = part_dslice, .emit = emit_slice,
     .result = result_slice, .infer = infer_slice},
    {.op = IR_DUPDATE, .name = "dynamic_update_slice", .flags = OPF_WINDOW_WRITE, .print = print_dupdate, .vjp = vjp_dupdate,
     .partition = part_dupdate, .emit = emit_dupdate, .result = result_steal, .infer = infer_dupdate},
    {.op = IR_INDEX_CHECK, .name = "index_check", .print = print_check, .emit = emit_index_check, .infer = infer_index_check},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "x[...]", .flags = BIF_ANNOT, .check = check_index, .lower = lower_index, .syntax = SYN_INDEX},
    {.name = "dynamic_slice", .code = B_DSLICE, .check = check_dslice, .lower = lower_dslice},
    {.name = "dynamic_update_slice", .code = B_DUPDATE, .check = check_dupdate, .lower = lower_dupdate},
    {0},
};

const OpFamily op_index_family = {
    .name = "index",
    .ops = ops,
    .builtins = builtins,
};
