/* op_gather.c: the gather half of the indexing family: take,
 * take_along_axis and one_hot (typing-rules 1.1, 1.10 gather, 3.4, 3.5),
 * with the scatter-adds that are their transposes (4.2).
 *
 * Input: typed calls. Output: global IR (take, take_along_axis,
 * scatter_add, scatter_add_along, one_hot), partitioned to local kernels
 * (runtime/k_index.c) and C.
 *
 * Types: the gathered dim of the operand must be unsharded, or the call
 * annotated ([E_GATHER], whose fix is the annotation); the other dims keep
 * their specs. Indices sharded on a dim that is not a batch dim of the
 * gather (every dim of take's indices; take_along_axis's where the operand
 * broadcasts) need the annotation too ([E_GATHER], as JAX asks for
 * out_sharding); take_along_axis's batch dims agree, or one side is
 * unsharded, and the result takes the sharded side. A gather over a dim split
 * across an axis, annotated <U:axis>, is a masked local lookup: each
 * device contributes the rows it holds and zeros elsewhere, so the result
 * is a pending sum and nothing moves (Megatron's vocab-parallel embedding
 * and cross-entropy); annotated otherwise, the partitioner reduces that
 * sum as the annotation asks (an all-reduce for a replicated result).
 * Unreduced operands and indices, and reduced indices, are [E_UR]; a
 * reduced operand gives a reduced result when the indices are replicated.
 *
 * Partitioning has the shape of every rule: the operands are resharded to
 * the layout the result asks for (the embedding lookup
 * take(wte: f32[V, C@model], ids: i32[B@data, T], axis=0) as
 * f32[B@data, T, C@model] needs nothing),
 * the kernel runs on local blocks and its natural result (pending over
 * the gathered dim's axes, or over the axes that split the indices of a
 * scatter-add) is resharded to the asked type. So the gradient of an
 * embedding replicated over `data` is a local scatter-add and then the
 * data-parallel all-reduce, from the types alone.
 *
 * Indices may be negative (counted from the end, as NumPy's take); one out
 * of [-N, N) stops every rank with its position and value
 * (runtime shd_fatal). one_hot gives a zero row for an index out of range,
 * as jax.nn.one_hot does.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

/* The opcodes (IR_TAKE ...) are in ops.h: op_sort.c emits them too. */

enum { G_TAKE, G_TAKE_ALONG, G_ONE_HOT };

typedef struct {
  Expr *x, *idx;
  int dim;
} GatherInfo;


static DimSpec strip(DimSpec s, AxisSet drop) {
  DimSpec r = {0};
  for (int i = 0; i < s.n; i++)
    if (!(drop & (1u << s.axes[i])))
      r.axes[r.n++] = s.axes[i];
  return r;
}

static void clear_tail(Type *t) {
  for (int d = t->rank; d < MAX_RANK; d++)
    t->spec[d].n = 0;
}

/* ---- the rules ------------------------------------------------------------------------------- */

/* take's result: x.shape[:k] + idx.shape + x.shape[k+1:], the specs of
 * the dims they come from. */
static Type take_type(const Type *x, const Type *idx, int k) {
  Type r = *x;
  r.rank = 0;
  for (int d = 0; d < k; d++) {
    r.shape[r.rank] = x->shape[d];
    r.spec[r.rank++] = x->spec[d];
  }
  for (int j = 0; j < idx->rank; j++) {
    r.shape[r.rank] = idx->shape[j];
    r.spec[r.rank++] = idx->spec[j];
  }
  for (int d = k + 1; d < x->rank; d++) {
    r.shape[r.rank] = x->shape[d];
    r.spec[r.rank++] = x->spec[d];
  }
  clear_tail(&r);
  r.weak = false;
  return r;
}

/* U and R (3.4, 3.5): no pending sums anywhere, no reduced indices, a
 * reduced operand only with replicated indices. */
static bool gather_states(RuleCtx *c, const Type *x, const Type *idx, const char *what) {
  if (x->U)
    return fail(c, "E_UR",
                "%s of %s: the operand is unreduced (a pending sum over %s), and a gather has no rule for pending "
                "sums (typing-rules 3.4); reduce it first with %s",
                what, TS(x), ty_axes_str(c->mesh, x->U), rule_reduce_fix(c, x, x->U));
  if (idx->U || idx->R) {
    Type plain = *idx;
    plain.U &= c->manual;
    plain.R &= c->manual;
    return fail(c, "E_UR", "%s: the indices %s are %s; indices are plain integers: reshard(idx, %s)", what, TS(idx),
                idx->U ? "unreduced" : "reduced", TS(&plain));
  }
  if ((x->R & ~c->manual) && ty_dim_axes(idx)) {
    Type rep = *idx, plain = *x;
    for (int d = 0; d < rep.rank; d++)
      rep.spec[d].n = 0;
    plain.R &= c->manual;
    return fail(c, "E_UR",
                "%s of the reduced %s with the sharded indices %s: a reduced operand gives a reduced result only with "
                "replicated indices (typing-rules 3.5); reshard the indices, reshard(idx, %s), or the operand, "
                "reshard(x, %s)",
                what, TS(x), TS(idx), TS(&rep), TS(&plain));
  }
  return true;
}

static bool index_dtype(RuleCtx *c, const Type *idx, const char *what) {
  if (idx->dtype == DT_I32)
    return true;
  return fail(c, "E_DTYPE", "%s: the indices must be i32, not %s; convert with cast(idx, i32)", what, TS(idx));
}

/* The result type a fix may name: without the axes A (the lookup is
 * masked over them) and with an axis two dims would use kept on the
 * operand's dim (the indices' dims from..from+n give it up). */
static Type fix_specs(const Type *r, AxisSet A, int from, int n) {
  Type f = *r;
  AxisSet kept = A;
  for (int d = 0; d < f.rank; d++)
    if (d < from || d >= from + n) {
      f.spec[d] = strip(r->spec[d], kept);
      kept |= ty_spec_axes(f.spec[d]);
    }
  for (int d = from; d < from + n; d++) {
    f.spec[d] = strip(r->spec[d], kept);
    kept |= ty_spec_axes(f.spec[d]);
  }
  return f;
}

/* An axis used by two dims of the result (one from the operand, one from
 * the indices): the caller's annotation must say which keeps it. */
static bool no_duplicate(RuleCtx *c, const Type *r, const Type *x, const Type *idx, int from, int n,
                         const char *call) {
  AxisSet seen = 0, dup = 0;
  for (int d = 0; d < r->rank; d++) {
    AxisSet a = ty_spec_axes(r->spec[d]);
    dup |= seen & a;
    seen |= a;
  }
  if (!dup)
    return true;
  Type fix = fix_specs(r, 0, from, n);
  return fail(c, "E_GATHER",
              "%s: the operand %s and the indices %s are both sharded over %s, which would shard two dims of the "
              "result; annotate the result to say where it goes, e.g. `%s as %s`, or reshard one of them",
              c->opname, TS(x), TS(idx), ty_axes_str(c->mesh, dup), call, TS(&fix));
}

/* The gathered dim k split across devices: the annotation chooses. The
 * result's dims k..k+n come from the indices. */
static bool gathered_dim_fail(RuleCtx *c, const Type *x, int k, int n, const Type *r, const char *call) {
  AxisSet A = ty_spec_axes(x->spec[k]);
  Type u = fix_specs(r, A, k, n), rep = u, xr = *x;
  u.U |= A;
  xr.spec[k].n = 0;
  rule_stage_annotate(NULL, TS(&u), arena_printf("annotate the result as %s (no communication)", TS(&u)));
  rule_stage_annotate(NULL, TS(&rep), arena_printf("annotate the result as %s (an all-reduce)", TS(&rep)));
  return fail(c, "E_GATHER",
              "%s: dim %d of %s, the one indexed, is sharded over %s, so each device holds only some of the rows; "
              "annotate the result to say where it goes: `%s as %s` (each device looks up the rows it holds: no "
              "communication, the result is a pending sum) or `%s as %s` (the same, then an all-reduce), or "
              "reshard the operand first: reshard(x, %s)",
              c->opname, k, TS(x), ty_axes_str(c->mesh, A), call, TS(&u), call, TS(&rep), TS(&xr));
}

/* Indices sharded on dims that are not batch dims of the gather (all of
 * take's; take_along_axis's where the operand's dim is 1): JAX's rule
 * (typing-rules 1.10) accepts only unsharded ones without out_sharding,
 * since the result could follow the indices or not; the annotation says. */
static bool sharded_indices_fail(RuleCtx *c, const Type *idx, AxisSet A, Type fix, const char *call) {
  Type rep = *idx;
  for (int d = 0; d < rep.rank; d++)
    if (ty_spec_axes(rep.spec[d]) & A)
      rep.spec[d].n = 0;
  rule_stage_annotate(NULL, TS(&fix), arena_printf("annotate the result as %s (sharded like the indices)", TS(&fix)));
  return fail(c, "E_GATHER",
              "%s: the indices %s are sharded over %s on dims that are not batch dims of the gather (typing-rules "
              "1.10), so the result's sharding is ambiguous; annotate the result to say where it goes, e.g. `%s as "
              "%s` (sharded like the indices: no communication), or reshard the indices first: reshard(idx, %s)",
              c->opname, TS(idx), ty_axes_str(c->mesh, A), call, TS(&fix), TS(&rep));
}

/* An annotation as the out_sharding of a gather: shape, dtype and V of the
 * result, the operand's R, and pending sums only over the axes that split
 * the gathered dim. */
static bool gather_annot(RuleCtx *c, const Type *x, int k, const Type *computed, const Type *annot, Type *out) {
  if (!rule_check_annot(c, annot, computed, c->opname))
    return false;
  AxisSet m = c->manual;
  if (!rule_annot_pending_within(c, annot, ty_spec_axes(x->spec[k]), "the indexed dim"))
    return false;
  if ((annot->R ^ computed->R) & ~m) {
    Type fix = *annot;
    fix.R = (computed->R & ~m) | (annot->R & m);
    return fail(c, "E_UR", "%s: the annotation %s must keep the result's reduced axes (%s): annotate %s", c->opname,
                TS(annot), TS(computed), TS(&fix));
  }
  return rule_manual_states(c, annot, 0, computed->R & m, out);
}

static bool rule_take(RuleCtx *c, const Type *x0, const Type *idx0, int k, const Type *annot, const char *call,
                      Type *out) {
  if (!index_dtype(c, idx0, "take"))
    return false;
  const Type *ops[2] = {x0, idx0};
  Type eff[2];
  AxisSet V;
  if (!rule_vma_unify(c, 2, ops, eff, &V) || !gather_states(c, &eff[0], &eff[1], "take"))
    return false;
  if (x0->rank - 1 + idx0->rank > MAX_RANK)
    return fail(c, "E_SHAPE", "take: the result would have more than %d dims", MAX_RANK);
  Type r = take_type(&eff[0], &eff[1], k);
  r.V = V;
  r.R = eff[0].R;
  r.U = 0;
  if (annot) {
    Type plain = r;
    for (int d = 0; d < plain.rank; d++)
      plain.spec[d].n = 0;
    return gather_annot(c, &eff[0], k, &plain, annot, out);
  }
  if (eff[0].spec[k].n)
    return gathered_dim_fail(c, &eff[0], k, eff[1].rank, &r, call);
  if (!no_duplicate(c, &r, &eff[0], &eff[1], k, eff[1].rank, call))
    return false;
  if (ty_dim_axes(&eff[1]))
    return sharded_indices_fail(c, &eff[1], ty_dim_axes(&eff[1]), r, call);
  *out = r;
  return true;
}

/* take_along_axis: the same rank; dims other than k broadcast (sizes equal
 * or 1). Dims of equal size are batch dims, whose specs agree or are
 * unsharded on one side; where the indices' size is 1 the operand's dim is
 * taken whole (its spec); where the operand's is 1 the indices' dim is not
 * a batch dim and must be unsharded unless annotated (as jnp's gather
 * numbers them). Dim k has the indices' size and must be unsharded in the
 * indices. */
static bool rule_take_along(RuleCtx *c, const Type *x0, const Type *idx0, int k, const Type *annot, const char *call,
                            Type *out) {
  if (!index_dtype(c, idx0, "take_along_axis"))
    return false;
  if (x0->rank != idx0->rank)
    return fail(c, "E_SHAPE", "take_along_axis: the indices %s must have the operand's rank (%s), as in NumPy",
                TS(idx0), TS(x0));
  const Type *ops[2] = {x0, idx0};
  Type eff[2];
  AxisSet V;
  if (!rule_vma_unify(c, 2, ops, eff, &V) || !gather_states(c, &eff[0], &eff[1], "take_along_axis"))
    return false;
  const Type *x = &eff[0], *idx = &eff[1];
  Type r = *x;
  r.weak = false;
  r.V = V;
  r.U = 0;
  AxisSet nonbatch = 0;   /* axes sharding indices' dims the operand broadcasts (its size 1) */
  for (int d = 0; d < x->rank; d++) {
    int64_t a = x->shape[d], b = idx->shape[d];
    if (d == k) {
      r.shape[d] = b;
      r.spec[d].n = 0;
      continue;
    }
    if (a != b && a != 1 && b != 1)
      return fail(c, "E_SHAPE",
                  "take_along_axis: %s and the indices %s differ in dim %d (%lld vs %lld); outside the axis sizes "
                  "must be equal or 1",
                  TS(x), TS(idx), d, (long long)a, (long long)b);
    r.shape[d] = a > b ? a : b;
    DimSpec xs = a == r.shape[d] ? x->spec[d] : (DimSpec){0}, is = b == r.shape[d] ? idx->spec[d] : (DimSpec){0};
    if (xs.n && is.n && !ty_spec_equal(xs, is)) {
      Type fix = *idx;
      fix.spec[d] = xs;
      return fail(c, "E_GATHER",
                  "take_along_axis: dim %d is sharded differently in %s and in the indices %s; reshard the indices: "
                  "reshard(idx, %s)",
                  d, TS(x), TS(idx), TS(&fix));
    }
    r.spec[d] = xs.n ? xs : is;
    if (a == 1 && b != 1)
      nonbatch |= ty_spec_axes(idx->spec[d]);
  }
  if (idx->spec[k].n) {
    Type fix = *idx;
    fix.spec[k].n = 0;
    return fail(c, "E_GATHER",
                "take_along_axis: the indices %s are sharded along the axis dim %d; reshard them: reshard(idx, %s)",
                TS(idx), k, TS(&fix));
  }
  if (annot) {
    Type plain = r;
    for (int d = 0; d < plain.rank; d++)
      plain.spec[d].n = 0;
    return gather_annot(c, x, k, &plain, annot, out);
  }
  if (x->spec[k].n)
    return gathered_dim_fail(c, x, k, 1, &r, call);
  if (!no_duplicate(c, &r, x, idx, 0, 0, call))
    return false;
  if (nonbatch)
    return sharded_indices_fail(c, idx, nonbatch, r, call);
  *out = r;
  return true;
}

/* one_hot (1.1): the indices' dims keep their specs, the class dim is
 * unsharded unless the annotation shards it; an annotation must agree with
 * the indices on their dims. */
static bool rule_one_hot(RuleCtx *c, const Type *idx, int64_t n, const Type *annot, const char *call, Type *out) {
  if (!index_dtype(c, idx, "one_hot"))
    return false;
  if (idx->U)
    return fail(c, "E_UR", "one_hot of %s: the indices are unreduced; reduce them first with %s", TS(idx),
                rule_reduce_fix(c, idx, idx->U));
  if (idx->rank + 1 > MAX_RANK)
    return fail(c, "E_SHAPE", "one_hot: the result would have more than %d dims", MAX_RANK);
  Type r = *idx;
  r.dtype = DT_F32;
  r.weak = false;
  r.shape[r.rank] = n;
  r.spec[r.rank].n = 0;
  r.rank++;
  if (!annot) {
    *out = r;
    return true;
  }
  Type plain = r;
  for (int d = 0; d < plain.rank; d++)
    plain.spec[d].n = 0;
  if (!rule_check_annot(c, annot, &plain, "one_hot"))
    return false;
  for (int d = 0; d < idx->rank; d++)
    if (!ty_spec_equal(annot->spec[d], idx->spec[d])) {
      Type fix = *annot, ri = *idx;
      for (int j = 0; j < idx->rank; j++) {
        fix.spec[j] = idx->spec[j];
        ri.spec[j] = annot->spec[j];
      }
      fix.spec[idx->rank] = strip(annot->spec[idx->rank], ty_dim_axes(idx));
      return fail(c, "E_ANNOT",
                  "one_hot: the annotation %s must shard the indices' dims as the indices %s are (typing-rules 1.1); "
                  "annotate %s, or reshard the indices first: reshard(idx, %s)",
                  TS(annot), TS(idx), TS(&fix), TS(&ri));
    }
  AxisSet m = c->manual;
  if ((annot->U & ~m) || ((annot->R ^ idx->R) & ~m)) {
    Type fix = *annot;
    fix.U &= m;
    fix.R = (idx->R & ~m) | (annot->R & m);
    return fail(c, "E_UR", "one_hot: the annotation %s must have the indices' unreduced and reduced axes: annotate %s",
                TS(annot), TS(&fix));
  }
  return rule_manual_states(c, annot, 0, idx->R & m, out);
}

/* ---- typing ------------------------------------------------------------------------------------ */

static GatherInfo *gather_info(Expr *e) {
  GatherInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  return info;
}

static Type check_take(TcCtx *c, Expr *e, const Type *annot) {
  GatherInfo *info = gather_info(e);
  bool along = e->bi->code == G_TAKE_ALONG;
  const char *what = tc_callee(e);
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {"axis"};
  if (tc_call_args(c, e, pos, 2, 2, kw, kwn, 1, arena_printf("%s(x, idx, axis=k)", what)) < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], what), idx = tc_operand(c, pos[1], what);
  if (x.kind == TY_ERROR || idx.kind == TY_ERROR)
    return ty_error();
  info->x = pos[0];
  info->idx = pos[1];
  if (!kw[0] && x.rank > 1) {
    diag_error(e->pos, "E_ARG", "%s needs axis=k for %s (jnp.take without an axis flattens: reshape(x, [-1]) "
                                "first for that)", what, TS(&x));
    return ty_error();
  }
  if (kw[0] && !tc_dim_arg(c, kw[0], x.rank, &info->dim, what))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, what);
  const Type *pa = annot;
  Type a2;
  if (annot && c->annot_v_free) {
    a2 = *annot;
    /* A reduced table meeting varying indices is cast to varying (2.2):
     * the result is not reduced over those axes (its gradient, through
     * the cast's transpose, is unreduced there: 4.3). */
    tc_manual_states_from(c, &a2, x.V | idx.V, 0, x.R & ~(x.V | idx.V));
    pa = &a2;
  }
  Type out;
  const char *call = tc_expr_text(e);
  bool ok = along ? rule_take_along(&r, &x, &idx, info->dim, pa, call, &out)
                  : rule_take(&r, &x, &idx, info->dim, pa, call, &out);
  return ok ? out : ty_error();
}

static Type check_one_hot(TcCtx *c, Expr *e, const Type *annot) {
  GatherInfo *info = gather_info(e);
  Expr *pos[2], *kw[1];
  if (tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "one_hot(idx, n)") < 0)
    return ty_error();
  Type idx = tc_operand(c, pos[0], "one_hot");
  if (idx.kind == TY_ERROR)
    return idx;
  info->idx = pos[0];
  int64_t n;
  if (!tc_count_arg(c, pos[1], &n, "one_hot: the number of classes"))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "one_hot");
  const Type *pa = annot;
  Type a2;
  if (annot && c->annot_v_free) {
    a2 = *annot;
    tc_manual_states_from(c, &a2, idx.V, 0, idx.R);
    pa = &a2;
  }
  Type out;
  return rule_one_hot(&r, &idx, n, pa, tc_expr_text(e), &out) ? out : ty_error();
}

/* ---- lowering ------------------------------------------------------------------------------------ */

static Value *lower_take(Lower *L, Expr *e) {
  GatherInfo *info = e->tc;
  Value *args[2] = {lower_vma(L, e->pos, lower_expr(L, info->x), e->ty->V),
                    lower_vma(L, e->pos, lower_expr(L, info->idx), e->ty->V)};
  Inst *in = lower_emit(L, e->bi->code == G_TAKE_ALONG ? IR_TAKE_ALONG : IR_TAKE, e->pos, 2, args, *e->ty);
  in->dim = info->dim;
  return in->results[0];
}

static Value *lower_one_hot(Lower *L, Expr *e) {
  GatherInfo *info = e->tc;
  Value *idx = lower_expr(L, info->idx);
  return lower_emit1(L, IR_ONE_HOT, e->pos, 1, &idx, *e->ty);
}

/* ---- transposes (4.2): take <-> scatter-add ------------------------------------------------------ */

static void vjp_gather(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  Value *args[2] = {g, ad_primal(a, in->args[1])};
  Inst *s = ad_emit(a, in->op == IR_TAKE ? IR_SCATTER_ADD : IR_SCATTER_ALONG, 2, args, ty_ct(&x->type));
  s->dim = in->dim;
  s->fn = in->fn;
  ad_add_ct(a, x, s->results[0]);
}

static void vjp_scatter(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  Value *args[2] = {g, ad_primal(a, in->args[1])};
  Inst *t = ad_emit(a, in->op == IR_SCATTER_ADD ? IR_TAKE : IR_TAKE_ALONG, 2, args, ty_ct(&x->type));
  t->dim = in->dim;
  t->fn = in->fn;
  ad_add_ct(a, x, t->results[0]);
}

/* ---- partitioning -------------------------------------------------------------------------------- */

static Value *local(Part *p, const Inst *in, Value *a, Value *b, Type t) {
  Value *args[2] = {a, b};
  return part_local(p, in, in->op, b ? 2 : 1, args, t);
}

/* The dim of take's result that operand dim d (not k) becomes. */
static int take_dim(int d, int k, int ri) { return d < k ? d : d - 1 + ri; }

/* The operands in the result's layout (without the axes A that split the
 * gathered dim: those the lookup is masked over), the local gather, its
 * natural result pending over A, resharded to the asked type. */
static void part_take(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type X = args[0]->type, I = args[1]->type;
  int k = in->dim;
  AxisSet A = ty_spec_axes(X.spec[k]);
  Type Xt = X, It = I, N = *T;
  for (int d = 0; d < X.rank; d++)
    if (d != k)
      Xt.spec[d] = strip(T->spec[take_dim(d, k, I.rank)], A);
  for (int j = 0; j < I.rank; j++)
    It.spec[j] = strip(T->spec[k + j], A);
  Xt.R &= ~ty_dim_axes(&Xt);
  for (int d = 0; d < N.rank; d++)
    N.spec[d] = strip(T->spec[d], A);
  N.U = A;
  N.R = Xt.R & ~ty_dim_axes(&N) & ~A;
  Value *x = part_to(p, in->pos, args[0], &Xt), *idx = part_to(p, in->pos, args[1], &It);
  part_put(p, in->results[0], part_to(p, in->pos, local(p, in, x, idx, N), T));
}

static void part_take_along(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type X = args[0]->type, I = args[1]->type;
  int k = in->dim;
  AxisSet A = ty_spec_axes(X.spec[k]);
  Type Xt = X, It = I, N = *T;
  for (int d = 0; d < T->rank; d++) {
    N.spec[d] = strip(T->spec[d], A);
    if (d == k) {
      It.spec[d].n = 0;
      continue;
    }
    Xt.spec[d] = X.shape[d] == T->shape[d] ? N.spec[d] : (DimSpec){0};
    It.spec[d] = I.shape[d] == T->shape[d] ? N.spec[d] : (DimSpec){0};
  }
  Xt.R &= ~ty_dim_axes(&Xt);
  N.U = A;
  N.R = Xt.R & ~ty_dim_axes(&N) & ~A;
  Value *x = part_to(p, in->pos, args[0], &Xt), *idx = part_to(p, in->pos, args[1], &It);
  part_put(p, in->results[0], part_to(p, in->pos, local(p, in, x, idx, N), T));
}

/* scatter-add: g and the indices keep the indices' own split (less the
 * result's axes), g's other dims take the result's layout; each rank adds
 * its indices' rows, so the natural result is pending over the axes that
 * split the indices; a result split along the scattered dim is masked:
 * each rank keeps only its block's rows (g replicated there). The layouts
 * of g and the indices for result type S, and the pending axes. */
static AxisSet scatter_layout(const Inst *in, const Type *S, Type G, Type I, Type *gt, Type *it) {
  int k = in->dim;
  bool along = in->op == IR_SCATTER_ALONG;
  AxisSet A = ty_spec_axes(S->spec[k]), forbid = ty_dim_axes(S) | A, pend = 0;
  Type Gt = G, It = I;
  if (!along) {
    for (int d = 0; d < S->rank; d++)
      if (d != k)
        Gt.spec[take_dim(d, k, I.rank)] = S->spec[d];
    for (int j = 0; j < I.rank; j++) {
      It.spec[j] = Gt.spec[k + j] = strip(I.spec[j], forbid);
      pend |= ty_spec_axes(It.spec[j]);
    }
  } else {
    for (int d = 0; d < S->rank; d++) {
      bool aligned = d != k && S->shape[d] == G.shape[d];
      Gt.spec[d] = aligned ? S->spec[d] : strip(G.spec[d], forbid);
      It.spec[d] = I.shape[d] == G.shape[d] ? Gt.spec[d] : (DimSpec){0};
      if (!aligned)
        pend |= ty_spec_axes(Gt.spec[d]);
    }
  }
  Gt.U = G.U & ~ty_dim_axes(&Gt) & ~A;
  Gt.R &= ~ty_dim_axes(&Gt);
  It.U = It.R = 0;
  *gt = Gt, *it = It;
  return pend | Gt.U;
}

/* The axes over which a scatter-add's local result is a partial sum
 * (scatter_layout's): optimize.c adds it to other such terms of a sum
 * before one reduction (a tied embedding's two gradients). */
static AxisSet scatter_partial_axes(const Inst *in) {
  Type Gt, It;
  const Type *S = &in->results[0]->type;
  AxisSet P = scatter_layout(in, S, in->args[in->nargs - 2]->type, in->args[in->nargs - 1]->type, &Gt, &It);
  return P & ~ty_dim_axes(S);
}

static void part_scatter(Part *p, Inst *in, Value **args) {
  const Type *S = &in->results[0]->type;
  Type Gt, It, N = *S;
  N.U = scatter_layout(in, S, args[0]->type, args[1]->type, &Gt, &It);
  N.R = Gt.R & ~ty_dim_axes(&N) & ~N.U;
  Value *g = part_to(p, in->pos, args[0], &Gt), *idx = part_to(p, in->pos, args[1], &It);
  part_put(p, in->results[0], part_to(p, in->pos, local(p, in, g, idx, N), S));
}

static void part_one_hot(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type It = args[0]->type;
  for (int j = 0; j < It.rank; j++)
    It.spec[j] = T->spec[j];
  Value *idx = part_to(p, in->pos, args[0], &It);
  part_put(p, in->results[0], local(p, in, idx, NULL, *T));
}

/* ---- C ---------------------------------------------------------------------------------------------- */

static const char *ctype(const Value *v) { return ty_dtype_c(v->type.dtype); }

/* Global index of this rank's first row of dim d of t. */
static const char *row0(Emit *e, const Type *t, int d) {
  if (!t->spec[d].n)
    return "0";
  return arena_printf("(int64_t)shd_group_index(%s) * %lld", emit_spec_axes_lit(t->spec[d]),
                      (long long)ty_local_dim(emit_mesh(e), t, d));
}

static void outer_inner(Emit *e, const Type *t, int k, int64_t *outer, int64_t *inner) {
  int64_t s[MAX_RANK];
  ty_local_shape(emit_mesh(e), t, s);
  *outer = *inner = 1;
  for (int d = 0; d < t->rank; d++) {
    if (d < k)
      *outer *= s[d];
    if (d > k)
      *inner *= s[d];
  }
}

static void emit_take(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *idx = in->args[1], *r = in->results[0];
  int k = in->dim;
  int64_t outer, inner;
  outer_inner(e, &x->type, k, &outer, &inner);
  if (r->type.rank == 0)   /* a 1-D x at a scalar index: a scalar, a C variable */
    emit_def_scalar(e, r);
  else
    emit_def_array(e, r, false);
  emit_line(e, "shd_take(%s, %s, %s, sizeof(%s), %lld, %lld, %lld, %lld, %s, %lld, %d, %s);", vname(x), emit_addr(idx),
            emit_addr(r), ctype(r), (long long)outer, (long long)ty_local_dim(emit_mesh(e), &x->type, k), (long long)inner,
            (long long)emit_local_count(e, &idx->type), row0(e, &x->type, k), (long long)x->type.shape[k], k,
            in->fn ? "NULL" : emit_where_lit(e, in->pos));
}

/* A scatter's result: zeros, or (operands base, g, idx: optimize.c's form
 * of base + scatter) base's buffer or a copy of it. Its g and idx. */
static void def_scatter(Emit *e, const Inst *in, const Value **g, const Value **idx) {
  int b = in->nargs == 3;
  *g = in->args[b], *idx = in->args[b + 1];
  if (b)
    emit_def_taken(e, in->results[0], in->args[0], in);
  else
    emit_def_array(e, in->results[0], true);
}

static EmitResult result_scatter(const Module *mod, const Inst *in, int k) {
  return in->nargs == 3 ? EMIT_STEAL_OR_ALLOC : EMIT_ALLOC;
}

static void emit_scatter(Emit *e, const Inst *in) {
  const Value *g, *idx, *r = in->results[0];
  int k = in->dim;
  int64_t outer, inner;
  outer_inner(e, &r->type, k, &outer, &inner);
  def_scatter(e, in, &g, &idx);
  emit_line(e, "shd_scatter_add(%s, %s, %s, %s, %lld, %lld, %lld, %lld, %s, %lld, %d, %s);", emit_addr(g), emit_addr(idx),
            vname(r), emit_dtconst(r->type.dtype), (long long)outer, (long long)ty_local_dim(emit_mesh(e), &r->type, k),
            (long long)inner, (long long)emit_local_count(e, &idx->type), row0(e, &r->type, k),
            (long long)r->type.shape[k], k, in->fn ? "NULL" : emit_where_lit(e, in->pos));
}

/* take_along_axis and its scatter: x (or the scatter's result) is `big`,
 * the one indexed along k. */
static void emit_along(Emit *e, const Inst *in) {
  bool scatter = in->op == IR_SCATTER_ALONG;
  const Value *src = in->args[0], *idx = in->args[1], *r = in->results[0];
  if (scatter)
    def_scatter(e, in, &src, &idx);
  else
    emit_def_array(e, r, false);
  const Value *big = scatter ? r : src, *small = scatter ? src : r;
  int k = in->dim;
  emit_line(e, "shd_%s(%s, %s, %s, %s, %d, %s, %s, %s, %d, %s, %lld, %s);", scatter ? "scatter_add_along" : "take_along",
            vname(src), emit_addr(idx), vname(r), scatter ? emit_dtconst(r->type.dtype) : arena_printf("sizeof(%s)", ctype(r)),
            r->type.rank, emit_shape_lit(e, &big->type), emit_shape_lit(e, &small->type), emit_shape_lit(e, &idx->type), k,
            row0(e, &big->type, k), (long long)big->type.shape[k], emit_where_lit(e, in->pos));
}

static void emit_one_hot(Emit *e, const Inst *in) {
  const Value *idx = in->args[0], *r = in->results[0];
  int c = r->type.rank - 1;
  emit_def_array(e, r, false);
  emit_line(e, "shd_one_hot(%s, %s, %s, %lld, %lld, %s);", emit_addr(idx), vname(r), emit_dtconst(r->type.dtype),
            (long long)emit_local_count(e, &idx->type), (long long)ty_local_dim(emit_mesh(e), &r->type, c),
            row0(e, &r->type, c));
}

/* segment_sum of bf16 (fn=1) adds in an f32 scratch of its result's local
 * size and rounds once (runtime/k_index.c). */
static int64_t temp_scatter(const Module *mod, const Inst *in) {
  const Type *r = &in->results[0]->type;
  return in->fn && r->dtype == DT_BF16 ? ty_local_count(&mod->mesh, r) * 4 : 0;
}

/* fn=1 (segment_sum and its transpose): an index outside [0, n) is dropped. */
static void print_dim(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d%s", in->dim, in->fn ? " drop" : "");
}

/* ---- the tables ---------------------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* take: x's dims around dim, idx's dims in its place; take_along_axis:
 * idx's size along dim, the others broadcast; one_hot: idx's dims and the classes (the declared last
 * dim). A scatter-add makes the declared array (its transpose's operand)
 * from updates of its dtype. Indices are i32. */
static bool infer_take(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 2 || !ir_arg_is(in, 0, -1) || !ir_arg_is(in, 1, DT_I32))
    return false;
  const Type *x = &in->args[0]->type, *idx = &in->args[1]->type;
  if (in->dim < 0 || in->dim >= x->rank)
    return false;
  Type r = *x;
  if (in->op == IR_TAKE_ALONG) {   /* the other dims broadcast, as NumPy's */
    if (idx->rank != x->rank)
      return false;
    for (int d = 0; d < idx->rank; d++) {
      if (d != in->dim && idx->shape[d] != x->shape[d] && idx->shape[d] != 1 && x->shape[d] != 1)
        return false;
      r.shape[d] = d == in->dim || x->shape[d] == 1 ? idx->shape[d] : x->shape[d];
    }
    return ir_infer_shape(out, &r);
  }
  if (x->rank - 1 + idx->rank > MAX_RANK)
    return false;
  r.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != in->dim)
      r.shape[r.rank++] = x->shape[d];
    else
      for (int k = 0; k < idx->rank; k++)
        r.shape[r.rank++] = idx->shape[k];
  return ir_infer_shape(out, &r);
}

static bool infer_scatter(const Module *mod, const Inst *in, Type *out) {
  int b = in->nargs == 3;   /* with a base: base + scatter, of the result's type */
  if (b && !ty_equal(&in->args[0]->type, out))
    return false;
  return in->nargs == 2 + b && ir_arg_is(in, b, out->dtype) && ir_arg_is(in, b + 1, DT_I32) && in->dim >= 0 &&
         in->dim < out->rank;
}

static bool infer_one_hot(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, DT_I32) || in->args[0]->type.rank + 1 > MAX_RANK || out->rank < 1)
    return false;
  Type r = in->args[0]->type;
  r.dtype = out->dtype;
  r.shape[r.rank++] = out->shape[out->rank - 1];
  return ir_infer_shape(out, &r);
}

static const OpDef ops[] = {
    {.op = IR_TAKE, .name = "take", .print = print_dim, .vjp = vjp_gather, .partition = part_take, .emit = emit_take, .infer = infer_take},
    {.op = IR_TAKE_ALONG, .name = "take_along_axis", .print = print_dim, .vjp = vjp_gather,
     .partition = part_take_along, .emit = emit_along, .infer = infer_take},
    {.op = IR_SCATTER_ADD, .name = "scatter_add", .flags = OPF_OUT_SHARDING | OPF_ADDS_INTO, .print = print_dim,
     .vjp = vjp_scatter, .partition = part_scatter, .emit = emit_scatter, .result = result_scatter,
     .temp_bytes = temp_scatter, .infer = infer_scatter, .partial_axes = scatter_partial_axes},
    {.op = IR_SCATTER_ALONG, .name = "scatter_add_along", .flags = OPF_ADDS_INTO, .print = print_dim,
     .vjp = vjp_scatter, .partition = part_scatter, .emit = emit_along, .result = result_scatter,
     .infer = infer_scatter, .partial_axes = scatter_partial_axes},
    {.op = IR_ONE_HOT, .name = "one_hot", .partition = part_one_hot, .emit = emit_one_hot, .infer = infer_one_hot},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "take", .code = G_TAKE, .flags = BIF_ANNOT, .check = check_take, .lower = lower_take},
    {.name = "take_along_axis", .code = G_TAKE_ALONG, .flags = BIF_ANNOT, .check = check_take, .lower = lower_take},
    {.name = "one_hot", .code = G_ONE_HOT, .flags = BIF_ANNOT, .check = check_one_hot, .lower = lower_one_hot},
    {0},
};

const OpFamily op_gather_family = {
    .name = "gather",
    .ops = ops,
    .builtins = builtins,
};
