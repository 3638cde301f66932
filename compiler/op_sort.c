/* op_sort.c: the sorting family (language.md §10.2): sort, argsort and
 * top_k along one dim, and segment_sum.
 *
 * Input: typed calls. Output: global IR (sort: one instruction with two
 * results, the values and their i32 positions; segment_sum: op_gather.c's
 * scatter_add in its dropping mode), partitioned to local row kernels
 * (runtime/k_sort.c) and C.
 *
 * sort(x, axis=-1) is ascending and stable with NaN last (NumPy's
 * sort(kind="stable")); argsort(x, axis=-1) the positions of that order
 * (i32); top_k(x, k) the k largest along the last dim, largest first,
 * ties to the lower index, a NaN larger than every number (jax.lax.top_k,
 * XLA's total order on floats), as the tuple (values, indices). The three
 * are one IR operation, `sort` (fn: 0 ascending, 1 descending; ival: the
 * positions kept), whose unused result is dead. The sorted dim must be
 * unsharded ([E_AXIS], the fix reshards it); the other dims keep their
 * specs, so each rank sorts the rows it holds and nothing moves. No pending
 * sums or reduced operands ([E_UR]: an order of pieces is not the order of
 * the sum). The transpose: the values' cotangent goes back to the positions
 * it came from (scatter_add_along with the indices); the indices have none.
 *
 * segment_sum(data, ids, n) is jax.ops.segment_sum: data [N, ...], ids
 * i32[N] sharded like data's dim 0; the result [n, ...] keeps data's other
 * specs and is pending (<U:A>) over the axes A that split dim 0 (each rank
 * sums its rows): an annotation is its out_sharding, as a contraction's.
 * Ids outside [0, n) are dropped (the scatter's fn=1: no run-time check).
 * Its transpose is the gather of the cotangent's rows at the ids (take,
 * fn=1: a zero row for a dropped id).
 *
 * bf16 (language.md §10.1): sort, argsort and top_k compare the values
 * widened to f32 (exact) and move the operand's bits; segment_sum adds in
 * an f32 scratch and rounds each sum once (runtime/k_index.c; its bytes are
 * op_gather.c's temp_scatter), and its <U:A> partial sums are all-reduced
 * as bf16 (2 bytes an element, added in f32). The cotangents are bf16.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

enum {
  IR_SORT = IR_BASE_SORT,   /* args x; results (values, i32 positions); dim; fn: 0 ascending, 1 descending; ival: kept */
};

enum { S_SORT, S_ARGSORT, S_TOP_K, S_SEGMENT_SUM };

typedef struct {
  Expr *x, *ids;
  int dim;
  int64_t k;                /* top_k's k, segment_sum's n */
  Type values, indices;     /* sort's two results */
} SortInfo;

/* ---- the rules ---------------------------------------------------------------------------------- */

/* The states shared by sort, argsort and top_k: no bool, no pending sum, no
 * reduced operand, the sorted dim unsharded. */
static bool sort_operand(RuleCtx *c, const Type *x, int dim) {
  if (x->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of a bool array (%s); convert with cast(x, i32)", c->opname, TS(x));
  if (x->U)
    return fail(c, "E_UR",
                "%s of %s: the operand is unreduced (a pending sum over %s), and the order of a sum's pieces is "
                "not the order of the sum; reduce it first with %s",
                c->opname, TS(x), ty_axes_str(c->mesh, x->U), rule_reduce_fix_at(c, 0, x, x->U));
  if (x->R & ~c->manual) {
    Type plain = *x;
    plain.R &= c->manual;
    plain.weak = false;
    return fail(c, "E_UR", "%s of the reduced %s: %s has no rule for reduced operands; make it plain first: %s",
                c->opname, TS(x), c->opname,
                rule_stage_reshard(arena_printf("reshard(x, %s)", TS(&plain)), 0, TS(&plain), "make it plain"));
  }
  if (x->spec[dim].n) {
    Type fixed = *x;
    fixed.spec[dim].n = 0;
    fixed.weak = false;
    AxisSet A = ty_spec_axes(x->spec[dim]);
    return fail(c, "E_AXIS",
                "%s along dim %d of %s: the sorted dim must be unsharded, and it is split over %s; reshard it "
                "first: %s",
                c->opname, dim, TS(x), ty_axes_str(c->mesh, A),
                rule_stage_reshard(arena_printf("reshard(x, %s)", TS(&fixed)), 0, TS(&fixed),
                                   arena_printf("gather dim %d (an all-gather over %s)", dim, ty_axes_str(c->mesh, A))));
  }
  return true;
}

/* The values and the positions of k elements kept along dim. */
static bool rule_sort(RuleCtx *c, const Type *x, int dim, int64_t k, Type *values, Type *indices) {
  if (!sort_operand(c, x, dim))
    return false;
  *values = *x;
  values->weak = false;
  values->shape[dim] = k;
  *indices = *values;
  indices->dtype = DT_I32;
  return true;
}

/* segment_sum: data [N, ...] (f32, f64 or bf16), ids i32[N] split like
 * data's dim 0; the result [n, ...], pending over the axes that split dim 0. */
static bool rule_segment_sum(RuleCtx *c, const Type *data0, const Type *ids0, int64_t n, const Type *annot,
                             Type *out) {
  if (!ty_is_float(data0->dtype))
    return fail(c, "E_DTYPE", "segment_sum: the data must be f32, f64 or bf16, not %s; convert with cast(data, f32)",
                TS(data0));
  if (ids0->dtype != DT_I32)
    return fail(c, "E_DTYPE", "segment_sum: the ids must be i32, not %s; convert with cast(ids, i32)", TS(ids0));
  if (ids0->rank != 1 || ids0->shape[0] != data0->shape[0])
    return fail(c, "E_SHAPE", "segment_sum: the ids %s must be one i32 per row of the data %s: i32[%lld]", TS(ids0),
                TS(data0), (long long)data0->shape[0]);
  const Type *ops[2] = {data0, ids0};
  Type eff[2];
  AxisSet V;
  if (!rule_vma_unify(c, 2, ops, eff, &V))
    return false;
  const Type *data = &eff[0], *ids = &eff[1];
  if (data->U)
    return fail(c, "E_UR",
                "segment_sum of %s: the data is unreduced (a pending sum over %s); reduce it first with %s", TS(data),
                ty_axes_str(c->mesh, data->U), rule_reduce_fix_at(c, 0, data, data->U));
  if ((data->R | ids->U | ids->R) & ~c->manual) {
    const Type *bad = data->R & ~c->manual ? data : ids;
    Type plain = *bad;
    plain.U &= c->manual;
    plain.R &= c->manual;
    plain.weak = false;
    return fail(c, "E_UR", "segment_sum: %s %s is %s; make it plain first: reshard(%s, %s)",
                bad == data ? "the data" : "the ids", TS(bad), bad->U & ~c->manual ? "unreduced" : "reduced",
                bad == data ? "data" : "ids", TS(&plain));
  }
  if (!ty_spec_equal(ids->spec[0], data->spec[0])) {
    Type fix = *ids;
    fix.spec[0] = data->spec[0];
    fix.weak = false;
    return fail(c, "E_GATHER",
                "segment_sum: the ids %s must be sharded like dim 0 of the data %s; reshard them: %s", TS(ids),
                TS(data),
                rule_stage_reshard(arena_printf("reshard(ids, %s)", TS(&fix)), 1, TS(&fix), "shard the ids like the data"));
  }
  AxisSet A = ty_spec_axes(data->spec[0]);
  Type r = *data;
  r.weak = false;
  r.shape[0] = n;
  r.spec[0].n = 0;
  r.V = V;
  r.U = A;
  r.R = 0;
  if (!annot) {
    *out = r;
    return true;
  }
  Type plain = r;
  for (int d = 0; d < plain.rank; d++)
    plain.spec[d].n = 0;
  plain.U = 0;
  if (!rule_check_annot(c, annot, &plain, "segment_sum"))
    return false;
  AxisSet m = c->manual;
  if (!rule_annot_pending_within(c, annot, A, "the data's dim 0"))
    return false;
  if (annot->R & ~m) {
    Type fix = *annot;
    fix.R &= m;
    return fail(c, "E_UR", "segment_sum: a segment sum cannot be annotated reduced (%s); annotate %s", TS(annot),
                TS(&fix));
  }
  return rule_manual_states(c, annot, 0, 0, out);
}

/* ---- typing ------------------------------------------------------------------------------------- */

static Type check_sort(TcCtx *c, Expr *e, const Type *annot) {
  SortInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  int code = e->bi->code;
  const char *f = tc_callee(e);
  Expr *pos[2], *kw[1] = {NULL};
  const char *kwn[1] = {"axis"};
  bool topk = code == S_TOP_K;
  int np = topk ? tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "top_k(x, k): the k largest along the last dim")
                : tc_call_args(c, e, pos, 1, 1, kw, kwn, 1, arena_printf("%s(x, axis=-1)", f));
  if (np < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], f);
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  info->dim = x.rank - 1;
  if (kw[0] && !tc_dim_arg(c, kw[0], x.rank, &info->dim, f))
    return ty_error();
  int64_t k = x.shape[info->dim];
  if (topk) {
    if (!tc_const_int_arg(c, pos[1], &k, "top_k's k"))
      return ty_error();
    if (k < 1 || k > x.shape[info->dim]) {
      diag_error(pos[1]->pos, "E_ARG", "top_k: k must be 1 to %lld (the size of the last dim of %s), not %lld",
                 (long long)x.shape[info->dim], TS(&x), (long long)k);
      return ty_error();
    }
  }
  info->k = k;
  RuleCtx r = tc_rule(c, e->pos, f);
  if (!rule_sort(&r, &x, info->dim, k, &info->values, &info->indices))
    return ty_error();
  if (code == S_SORT)
    return info->values;
  if (code == S_ARGSORT)
    return info->indices;
  Type elems[2] = {info->values, info->indices};
  return ty_tuple(2, elems);
}

static Type check_segment_sum(TcCtx *c, Expr *e, const Type *annot) {
  SortInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  Expr *pos[3], *kw[1];
  if (tc_call_args(c, e, pos, 3, 3, kw, NULL, 0, "segment_sum(data, ids, n)") < 0)
    return ty_error();
  Type data = tc_array_operand(c, e, pos[0], "segment_sum"), ids = tc_operand(c, pos[1], "segment_sum");
  if (data.kind == TY_ERROR || ids.kind == TY_ERROR)
    return ty_error();
  info->x = pos[0];
  info->ids = pos[1];
  if (!tc_count_arg(c, pos[2], &info->k, "segment_sum: the number of segments"))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "segment_sum");
  const Type *pa = annot;
  Type a2;
  if (annot && c->annot_v_free) {
    a2 = *annot;
    tc_manual_states_from(c, &a2, data.V | ids.V, 0, 0);
    pa = &a2;
  }
  Type out;
  return rule_segment_sum(&r, &data, &ids, info->k, pa, &out) ? out : ty_error();
}

/* ---- lowering ----------------------------------------------------------------------------------- */

static Value *lower_sort(Lower *L, Expr *e) {
  SortInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Type rt[2] = {info->values, info->indices};
  Inst *in = lower_emit_n(L, IR_SORT, e->pos, 1, &x, 2, rt);
  in->dim = info->dim;
  in->fn = e->bi->code == S_TOP_K;
  in->ival = info->k;
  return in->results[e->bi->code == S_ARGSORT];
}

static Value *lower_segment_sum(Lower *L, Expr *e) {
  SortInfo *info = e->tc;
  Value *args[2] = {lower_vma(L, e->pos, lower_expr(L, info->x), e->ty->V),
                    lower_vma(L, e->pos, lower_expr(L, info->ids), e->ty->V)};
  Inst *in = lower_emit(L, IR_SCATTER_ADD, e->pos, 2, args, *e->ty);
  in->dim = 0;
  in->fn = 1;   /* ids out of range are dropped */
  return in->results[0];
}

/* ---- transpose: the values' cotangent back to their positions ------------------------------------ */

static void vjp_sort(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  Value *gv = ad_ct(a, in->results[0]);
  if (!gv || !ad_wants_ct(a, x))
    return;
  Value *args[2] = {gv, ad_primal(a, in->results[1])};
  Inst *s = ad_emit(a, IR_SCATTER_ALONG, 2, args, ty_ct(&x->type));
  s->dim = in->dim;
  ad_add_ct(a, x, s->results[0]);
}

/* ---- partitioning: each rank sorts the rows it holds --------------------------------------------- */

static void part_sort(Part *p, Inst *in, Value **args) {
  const Type *T0 = &in->results[0]->type, *T1 = &in->results[1]->type;
  Type want = args[0]->type;
  for (int d = 0; d < want.rank; d++)
    want.spec[d] = T0->spec[d];
  want.spec[in->dim].n = 0;
  Value *x = part_to(p, in->pos, args[0], &want);
  Type nat[2] = {x->type, x->type};
  for (int i = 0; i < 2; i++) {
    nat[i].shape[in->dim] = in->ival;
    nat[i].U = 0;
  }
  nat[1].dtype = DT_I32;
  nat[1].R = 0;
  Inst *l = ir_emit(part_mod(p), part_block(p), IR_SORT, in->pos, 1, &x, 2, nat);
  ir_copy_attrs(l, in);
  part_put(p, in->results[0], part_to(p, in->pos, l->results[0], T0));
  part_put(p, in->results[1], part_to(p, in->pos, l->results[1], T1));
}

/* ---- C ------------------------------------------------------------------------------------------- */

static void emit_sort(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *v = in->results[0], *idx = in->results[1];
  emit_def_array(e, v, false);
  emit_def_array(e, idx, false);
  emit_line(e, "shd_sort_rows(%s, %s, %s, %s, %s, %lld, %s);", vname(x), vname(v), vname(idx),
            emit_dtconst(x->type.dtype), emit_row_args(e, x, in->dim), (long long)in->ival, in->fn ? "true" : "false");
}

static const char *sort_variant(const Inst *in) { return in->fn ? "top_k" : "ascending"; }
static const char *const sort_variants[] = {"ascending", "top_k", NULL};

static void print_sort(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d k=%lld", in->dim, (long long)in->ival);
}

/* The merge sort's n log2 n comparisons a row, and its scratch: a double key
 * and two i32 positions an element of a row. */
static void work_sort(const Module *mod, const Inst *in, double *dot, double *ew) {
  const Type *x = &in->args[0]->type;
  double n = (double)x->shape[in->dim], lg = 1;
  while ((double)(1LL << (int)lg) < n && lg < 62)
    lg++;
  *ew += (double)ty_local_count(&mod->mesh, x) * lg;
}

static int64_t temp_sort(const Module *mod, const Inst *in) { return in->args[0]->type.shape[in->dim] * 16; }

static bool infer_sort(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || in->nresults != 2 || !ir_arg_is(in, 0, -1))
    return false;
  const Type *x = &in->args[0]->type;
  if (x->rank < 1 || in->dim < 0 || in->dim >= x->rank || in->ival < 1 || in->ival > x->shape[in->dim] ||
      x->dtype == DT_BOOL)
    return false;
  Type r = *x;
  r.shape[in->dim] = in->ival;
  if (!ir_infer_shape(&out[0], &r))
    return false;
  r.dtype = DT_I32;
  return ir_infer_shape(&out[1], &r);
}

static const OpDef ops[] = {
    {.op = IR_SORT, .name = "sort", .variant = sort_variant, .variants = sort_variants, .print = print_sort,
     .vjp = vjp_sort, .partition = part_sort, .emit = emit_sort, .temp_bytes = temp_sort, .infer = infer_sort,
     .work = work_sort},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "sort", .code = S_SORT, .check = check_sort, .lower = lower_sort, .doc = "ascending, stable, NaN last"},
    {.name = "argsort", .code = S_ARGSORT, .check = check_sort, .lower = lower_sort, .doc = "the positions of sort"},
    {.name = "top_k", .code = S_TOP_K, .check = check_sort, .lower = lower_sort, .doc = "the k largest, with their positions"},
    {.name = "segment_sum", .code = S_SEGMENT_SUM, .flags = BIF_ANNOT, .check = check_segment_sum,
     .lower = lower_segment_sum, .doc = "sums of rows by segment id"},
    {0},
};

const OpFamily op_sort_family = {
    .name = "sort",
    .ops = ops,
    .builtins = builtins,
};
