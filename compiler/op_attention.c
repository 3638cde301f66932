/* op_attention.c: dot_product_attention(q, k, v, causal=false, scale=F)
 * (language.md §9.9): jax.nn.dot_product_attention with JAX's layout, as
 * one operation from the typechecker to the C, run by the fused kernel of
 * runtime/k_attention.c (flash attention: the T x S scores are never
 * formed).
 *
 * Typing (rule_attention): q: f[B, T, N, H], k and v: f[B, S, K, H] of one
 * float dtype, N a multiple of K (grouped-query attention: query head n
 * uses key/value head n / (N/K)); the result is shaped and sharded like q.
 * B may be sharded, alike on the three ([E_BATCH] otherwise, fix: reshard);
 * N may be sharded, and then K is sharded over the same axes or replicated
 * ([E_BATCH] otherwise); T, S and H must be unsharded ([E_AXIS], fix:
 * reshard). The operation is not linear, so an unreduced operand is
 * [E_UR]; reduced operands follow the common rule of typing-rules 3.5 (all
 * reduced over the same axes, result reduced too). In a manual body the
 * operands' varying sets are unified by the VMA rule of 2.2 (implicit
 * pvary), as for any multi-operand operation. causal is a literal bool,
 * scale a constant (default 1/sqrt(H)). bf16 operands (all three: mixing
 * dtypes is [E_DTYPE]) give a bf16 result computed in f32 (language.md
 * §10.1): the kernel widens each block it loads, and rounds the output
 * (and the gradient's dq, dk, dv) to bf16 once.
 *
 * IR: `attention` (args q, k, v; results out and lse [B, T, N, 2]: each
 * query row's max score and the log of its sum of exp(score - max), which
 * only the gradient reads: kept apart, not added, so that a probability
 * exp((score - max) - log sum) loses nothing where the scores are large:
 * one rounded log-sum-exp at 1e6 is off by up to 1/32, at 1e37 it has
 * lost log S altogether; f32 for bf16 operands, whose kernel computes in f32)
 * and `attention_grad` (args q, k, v, out, lse, g; results dq, dk, dv). The
 * gradient is the closed-form attention backward, linear in g, so a
 * pending (unreduced) cotangent of a reduced result stays pending; its own
 * derivative (a second derivative) is not provided [E_GRAD].
 *
 * Partitioning: q (and out, lse, g, dq) keep the result's B and N specs;
 * k and v (dk, dv) take the result's B spec and, for K, N's axes when K is
 * split over them already, else replicated: each rank runs the kernel on
 * its own batch rows and query heads, with the key heads those need, and
 * never communicates in the forward pass. Where the key heads are
 * replicated while the query heads are split over axes A, each rank's dk
 * and dv are partial sums over A (only its query heads contribute): pending
 * over A and reduced to the cotangent's type by the planner (one all-reduce
 * or reduce-scatter). explain and the timeline see one operation each way.
 */
#include <math.h>

#include "ops.h"

#include "../runtime/attention_blocks.h"

#define TS(t) ty_str(c->mesh, (t))
#define fail rule_fail

enum {
  IR_ATTENTION = IR_BASE_ATTENTION,   /* fn: causal; fval: scale */
  IR_ATTENTION_GRAD,
};

enum { QB, QT, QN, QH };   /* the dims of q, out (and B, S, K, H of k, v) */

static const char *const operand_name[3] = {"q", "k", "v"};

/* ---- the rule -------------------------------------------------------------------- */

/* t with dim d's spec replaced by `s` (the fix of a mis-sharded operand). */
/* "Y" or "(X,Y)": the axes of a dim's spec, in order. */
static const char *spec_axes(RuleCtx *c, DimSpec s) {
  const char *t = ty_spec_str(c->mesh, s);
  return t[0] == '@' ? t + 1 : t;
}

static Type with_spec(const Type *t, int d, DimSpec s) {
  Type r = *t;
  r.spec[d] = s;
  r.weak = false;
  return r;
}

static bool check_shapes(RuleCtx *c, const Type *const *ops) {
  for (int i = 0; i < 3; i++) {
    if (!ty_is_float(ops[i]->dtype))
      return fail(c, "E_DTYPE", "dot_product_attention needs float operands, but %s is %s; convert with cast(%s, f32)",
                  operand_name[i], TS(ops[i]), operand_name[i]);
    if (ops[i]->rank != 4)
      return fail(c, "E_SHAPE",
                  "dot_product_attention: %s is %s, but q must be [B, T, N, H] and k, v [B, S, K, H] (batch, "
                  "positions, heads, head size), as jax.nn.dot_product_attention",
                  operand_name[i], TS(ops[i]));
  }
  const Type *q = ops[0], *k = ops[1], *v = ops[2];
  if (q->dtype != k->dtype || q->dtype != v->dtype) {
    int odd = q->dtype != k->dtype ? 1 : 2;
    return fail(c, "E_DTYPE", "dot_product_attention: q, k and v must have one dtype, not %s, %s and %s; convert with cast, "
                "e.g. cast(%s, %s)", TS(q), TS(k), TS(v), operand_name[odd], ty_dtype_name(q->dtype));
  }
  for (int d = 0; d < 4; d++)
    if (k->shape[d] != v->shape[d])
      return fail(c, "E_SHAPE", "dot_product_attention: k and v must have one shape [B, S, K, H], not %s and %s", TS(k),
                  TS(v));
  if (q->shape[QB] != k->shape[QB])
    return fail(c, "E_SHAPE", "dot_product_attention: q and k have different batch sizes (%s and %s)", TS(q), TS(k));
  if (q->shape[QH] != k->shape[QH])
    return fail(c, "E_SHAPE", "dot_product_attention: q and k have different head sizes (last dim: %s and %s)", TS(q),
                TS(k));
  int64_t N = q->shape[QN], K = k->shape[QN];
  if (K == 0 ? N != 0 : N % K != 0)
    return fail(c, "E_SHAPE",
                "dot_product_attention: q has %lld heads and k, v %lld; the query heads must be a multiple of the "
                "key/value heads (grouped-query attention: query head n uses key head n / (N/K))",
                (long long)N, (long long)K);
  return true;
}

/* T, S and H unsharded; B alike; K over N's axes or replicated. */
static bool check_specs(RuleCtx *c, const Type *eff) {
  static const int unsharded[2] = {QT, QH};
  static const char *const dim_name[4] = {"batch", "position", "head", "head-size"};
  for (int i = 0; i < 3; i++)
    for (int u = 0; u < 2; u++) {
      int d = unsharded[u];
      if (!eff[i].spec[d].n)
        continue;
      Type want = with_spec(&eff[i], d, (DimSpec){0});
      return fail(c, "E_AXIS",
                  "dot_product_attention: the %s dim of %s (%s) is sharded over %s, but every query attends to "
                  "every key position over the whole head size, so positions and head size must be unsharded; "
                  "reshard it first: reshard(%s, %s)",
                  dim_name[d], operand_name[i], TS(&eff[i]), spec_axes(c, eff[i].spec[d]), operand_name[i],
                  rule_stage_reshard(TS(&want), i, TS(&want), arena_printf("reshard %s to %s", operand_name[i], TS(&want))));
    }
  for (int i = 1; i < 3; i++)
    if (!ty_spec_equal(eff[i].spec[QB], eff[0].spec[QB])) {
      Type want = with_spec(&eff[i], QB, eff[0].spec[QB]);
      return fail(c, "E_BATCH",
                  "dot_product_attention: the batch dim is sharded differently on q (%s) and %s (%s); batch dims are "
                  "never gathered implicitly: reshard(%s, %s)",
                  TS(&eff[0]), operand_name[i], TS(&eff[i]), operand_name[i],
                  rule_stage_reshard(TS(&want), i, TS(&want), arena_printf("reshard %s to %s", operand_name[i], TS(&want))));
    }
  DimSpec A = eff[0].spec[QN];
  for (int i = 1; i < 3; i++) {
    DimSpec ks = eff[i].spec[QN];
    if (!ks.n || (A.n && ty_spec_equal(ks, A)))
      continue;
    bool can_split = A.n && eff[i].shape[QN] % ty_spec_parts(c->mesh, A) == 0;
    Type want = with_spec(&eff[i], QN, can_split ? A : (DimSpec){0});
    const char *why = !A.n ? "q's heads are not sharded, so every device needs every key/value head"
                           : arena_printf("q's heads are sharded over %s, so the key/value heads must be sharded over "
                                          "the same axes%s or replicated",
                                          spec_axes(c, A), can_split ? "" : " (their number is not a multiple)");
    return fail(c, "E_BATCH", "dot_product_attention: the head dim of %s (%s) is sharded over %s, but %s; reshard(%s, %s)",
                operand_name[i], TS(&eff[i]), spec_axes(c, ks), why, operand_name[i],
                rule_stage_reshard(TS(&want), i, TS(&want), arena_printf("reshard %s to %s", operand_name[i], TS(&want))));
  }
  return true;
}

bool rule_attention(RuleCtx *c, const Type *q, const Type *k, const Type *v, Type *out) {
  const Type *ops[3] = {q, k, v};
  if (!check_shapes(c, ops))
    return false;
  for (int i = 0; i < 3; i++)
    if (ops[i]->U)
      return fail(c, "E_UR",
                  "dot_product_attention is not linear, so %s (%s) cannot be unreduced (a pending sum over %s); "
                  "reduce it first with %s",
                  operand_name[i], TS(ops[i]), ty_axes_str(c->mesh, ops[i]->U),
                  rule_reduce_fix_at(c, i, ops[i], ops[i]->U));
  Type eff[3];
  AxisSet V;
  if (!rule_vma_unify(c, 3, ops, eff, &V) || !check_specs(c, eff))
    return false;
  AxisSet R;
  if (!rule_reduced_common(c, 3, eff, &R))
    return false;
  Type r = eff[0];
  r.U = 0;
  r.R = R;
  r.V = V;
  r.weak = false;
  *out = r;
  return true;
}

/* The per-row statistics that the forward keeps for the gradient: out with
 * its (unsharded) head-size dim replaced by the pair (max, log sum). */
static Type lse_type(const Type *out) {
  Type t = *out;
  t.shape[QH] = 2;
  t.spec[QH] = (DimSpec){0};
  if (t.dtype == DT_BF16)
    t.dtype = DT_F32;   /* bf16 attention computes in f32: its statistics stay f32 */
  return t;
}

/* ---- typing and lowering ----------------------------------------------------------- */

static Type check_attention(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[3], *kw[2] = {NULL, NULL};
  const char *kwn[2] = {"causal", "scale"};
  const char *usage = "dot_product_attention(q, k, v), optionally causal=true and scale=F";
  if (tc_call_args(c, e, pos, 3, 3, kw, kwn, 2, usage) < 0)
    return ty_error();
  Type t[3];
  bool ok = true;
  for (int i = 0; i < 3; i++) {
    t[i] = tc_operand(c, pos[i], "dot_product_attention");
    ok &= t[i].kind != TY_ERROR;
  }
  bool causal = false;
  if (kw[0] && !tc_bool_arg(c, kw[0], &causal, "causal"))
    ok = false;
  if (kw[1]) {
    Type s = tc_expr(c, kw[1]);
    if (s.kind != TY_ERROR && (s.kind != TY_ARRAY || s.rank || !s.weak || s.dtype == DT_BOOL)) {
      diag_error(kw[1]->pos, "E_ARG",
                 "dot_product_attention: scale is a constant number (a literal or an expression of consts), e.g. "
                 "scale=0.125; to scale by a run-time value, scale q first: dot_product_attention(q * s, k, v, "
                 "scale=1.0)");
      ok = false;
    }
    ok &= s.kind != TY_ERROR;
  }
  if (!ok)
    return ty_error();
  info->x = pos[0];
  info->y = pos[1];
  info->z = pos[2];
  info->value = kw[1];
  info->mask = causal;
  RuleCtx r = tc_rule(c, e->pos, "dot_product_attention");
  Type out;
  if (!rule_attention(&r, &t[0], &t[1], &t[2], &out))
    return ty_error();
  info->type = out;
  return out;
}

static Value *lower_attention(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  const Type *out = &info->type;
  Expr *ops[3] = {info->x, info->y, info->z};
  Value *args[3];
  for (int i = 0; i < 3; i++)
    args[i] = lower_vma(L, e->pos, lower_expr(L, ops[i]), out->V);
  Type rt[2] = {*out, lse_type(out)};
  Inst *in = lower_emit_n(L, IR_ATTENTION, e->pos, 3, args, 2, rt);
  in->fn = (int)info->mask;
  in->fval = info->value ? lower_fold(L, info->value) : 1.0 / sqrt((double)out->shape[QH]);
  return in->results[0];
}

/* ---- transpose --------------------------------------------------------------------- */

/* The closed-form backward: one attention_grad for the three operands,
 * each result typed as its operand's cotangent (typing-rules 4.1). */
static void vjp_attention(AD *a, Inst *in, Value *unused) {
  Value *g = ad_ct(a, in->results[0]);
  bool any = false;
  for (int i = 0; i < 3; i++)
    any |= ad_wants_ct(a, in->args[i]);
  if (!g || !any)
    return;
  Value *args[6] = {ad_primal(a, in->args[0]),    ad_primal(a, in->args[1]),    ad_primal(a, in->args[2]),
                    ad_primal(a, in->results[0]), ad_primal(a, in->results[1]), g};
  Type rt[3];
  for (int i = 0; i < 3; i++)
    rt[i] = ty_ct(&in->args[i]->type);
  Inst *d = ad_emit_n(a, IR_ATTENTION_GRAD, 6, args, 3, rt);
  d->fn = in->fn;
  d->fval = in->fval;
  for (int i = 0; i < 3; i++)
    if (ad_wants_ct(a, in->args[i]))
      ad_add_ct(a, in->args[i], d->results[i]);
}

static void vjp_attention_grad(AD *a, Inst *in, Value *unused) {
  ad_fail(a, in->pos,
          "cannot differentiate the gradient of dot_product_attention (a second derivative); write the attention "
          "with einsum and softmax where a second derivative is needed");
}

/* ---- partitioning ------------------------------------------------------------------ */

/* v with the dim specs of `like` (its own U, R, V). */
static Value *with_specs(Part *p, Pos pos, Value *v, const Type *like) {
  Type t = v->type;
  for (int d = 0; d < t.rank; d++)
    t.spec[d] = like->spec[d];
  return part_to(p, pos, v, &t);
}

/* Where k and v (and dk, dv) are computed, given the layout `qt` of q and
 * the key operand's type: the batch split like q's, the key heads split
 * like the query heads when they are already (or sliced, free, when
 * replicated), else replicated; positions and head size whole. */
static Type kv_layout(const Mesh *m, const Type *qt, const Type *kv) {
  Type t = *kv;
  for (int d = 0; d < t.rank; d++)
    t.spec[d] = (DimSpec){0};
  t.spec[QB] = qt->spec[QB];
  DimSpec A = qt->spec[QN];
  if (A.n && kv->shape[QN] % ty_spec_parts(m, A) == 0 && (!kv->spec[QN].n || ty_spec_equal(kv->spec[QN], A)))
    t.spec[QN] = A;
  return t;
}

/* The axes over which a rank's dk, dv are partial sums: the query heads'
 * axes when the key heads are not split with them. */
static AxisSet kv_pending(const Type *qt, const Type *kt) {
  return ty_spec_equal(qt->spec[QN], kt->spec[QN]) ? 0 : ty_spec_axes(qt->spec[QN]);
}

static Inst *local(Part *p, const Inst *in, int op, int n, Value **args, int nres, const Type *rt) {
  Inst *r = ir_emit(part_mod(p), part_block(p), op, in->pos, n, args, nres, rt);
  ir_copy_attrs(r, in);
  return r;
}

static void part_attention(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *T = &in->results[0]->type;
  Value *q = with_specs(p, in->pos, args[0], T);
  Type kt = kv_layout(m, T, &args[1]->type);
  Value *k = with_specs(p, in->pos, args[1], &kt), *v = with_specs(p, in->pos, args[2], &kt);
  Type rt[2] = {*T, lse_type(T)};
  Inst *r = local(p, in, IR_ATTENTION, 3, (Value *[]){q, k, v}, 2, rt);
  for (int i = 0; i < 2; i++)
    part_put(p, in->results[i], part_to(p, in->pos, r->results[i], &in->results[i]->type));
}

static void part_attention_grad(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *DQ = &in->results[0]->type;
  Type lt = lse_type(DQ);
  Value *q = with_specs(p, in->pos, args[0], DQ), *o = with_specs(p, in->pos, args[3], DQ);
  Value *lse = with_specs(p, in->pos, args[4], &lt), *g = with_specs(p, in->pos, args[5], DQ);
  Type kt = kv_layout(m, DQ, &args[1]->type);
  Value *k = with_specs(p, in->pos, args[1], &kt), *v = with_specs(p, in->pos, args[2], &kt);
  /* Natural results: linear in g, so pending where g is; dk, dv also over
   * the query heads' axes when each rank holds every key head. */
  Type rt[3];
  for (int i = 0; i < 3; i++) {
    rt[i] = i ? kt : q->type;
    rt[i].U = g->type.U | (i ? kv_pending(&q->type, &kt) : 0);
    rt[i].R = 0;
    rt[i].V = g->type.V;
  }
  Inst *r = local(p, in, IR_ATTENTION_GRAD, 6, (Value *[]){q, k, v, o, lse, g}, 3, rt);
  for (int i = 0; i < 3; i++)
    part_put(p, in->results[i], part_to(p, in->pos, r->results[i], &in->results[i]->type));
}

/* ---- C ------------------------------------------------------------------------------ */

/* The kernel's sizes: local B, T, S, N, K, H, the group size N/K (global)
 * and where this rank's query heads start relative to its key heads. */
static const char *dims_args(Emit *e, const Value *q, const Value *k) {
  const Mesh *m = emit_mesh(e);
  int64_t lq[MAX_RANK], lk[MAX_RANK];
  ty_local_shape(m, &q->type, lq);
  ty_local_shape(m, &k->type, lk);
  int64_t G = k->type.shape[QN] ? q->type.shape[QN] / k->type.shape[QN] : 1;
  const char *qoff = "0";
  if (q->type.spec[QN].n)
    qoff = k->type.spec[QN].n ? arena_printf("%s[2] - %s[2] * %lld", emit_offset_lit(e, &q->type),
                                             emit_offset_lit(e, &k->type), (long long)G)
                              : arena_printf("%s[2]", emit_offset_lit(e, &q->type));
  return arena_printf("%lld, %lld, %lld, %lld, %lld, %lld, %lld, %s", (long long)lq[QB], (long long)lq[QT],
                      (long long)lk[QT], (long long)lq[QN], (long long)lk[QN], (long long)lq[QH], (long long)(G ? G : 1),
                      qoff);
}

static void emit_attention(Emit *e, const Inst *in) {
  for (int i = 0; i < in->nresults; i++)
    emit_def_array(e, in->results[i], false);
  const Value *q = in->args[0], *k = in->args[1];
  const char *dt = emit_dtconst(in->results[0]->type.dtype);
  emit_trace_at(e, in->pos);
  if (in->op == IR_ATTENTION)
    emit_line(e, "shd_attention(%s, %s, %s, %s, %s, %s, %s, %s, %s);", emit_vname(q), emit_vname(k),
              emit_vname(in->args[2]), emit_vname(in->results[0]), emit_vname(in->results[1]), dt, dims_args(e, q, k),
              in->fn ? "true" : "false", emit_flit(DT_F64, in->fval));
  else
    emit_line(e, "shd_attention_grad(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s);", emit_vname(q), emit_vname(k),
              emit_names_lit(in->args + 2, 4), emit_vname(in->results[0]), emit_vname(in->results[1]),
              emit_vname(in->results[2]), dt, dims_args(e, q, k), in->fn ? "true" : "false",
              emit_flit(DT_F64, in->fval));
}

static int64_t temp_bytes(const Module *mod, const Inst *in) {
  int64_t lq[MAX_RANK], lk[MAX_RANK];
  const Type *q = &in->args[0]->type, *k = &in->args[1]->type;
  ty_local_shape(&mod->mesh, q, lq);
  ty_local_shape(&mod->mesh, k, lk);
  /* the kernels allocate nothing for empty sizes (k_attention.c) */
  if (!lq[QB] || !lq[QT] || !lq[QN] || !lq[QH] || !lk[QT])
    return 0;
  return shd_attention_scratch_bytes(in->op == IR_ATTENTION_GRAD, lq[QT], lk[QT], lq[QH], ty_dtype_size(q->dtype));
}

static const char *variant(const Inst *in) { return in->fn ? "causal" : "full"; }

static void print_scale(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " scale=%.9g", in->fval); }

/* ---- types from operands ---------------------------------------------------------- */

/* attention: out takes q's shape (v's head size is q's: rule_attention),
 * lse q's with the head-size dim 2 (lse_type); attention_grad: each operand's
 * cotangent its operand's shape. Operands of one float dtype, rank 4. */
static bool infer_attention(const Module *mod, const Inst *in, Type *out) {
  bool fwd = in->op == IR_ATTENTION;
  if (in->nargs != (fwd ? 3 : 6) || !ir_arg_is(in, 0, -1) || !ty_is_float(in->args[0]->type.dtype))
    return false;
  const Type *q = &in->args[0]->type;
  Type lse = lse_type(q);
  for (int i = 0; i < in->nargs; i++)
    if (!ir_arg_is(in, i, i == 4 ? lse.dtype : q->dtype) || (i < 4 && in->args[i]->type.rank != 4))
      return false;
  if (fwd)
    return ir_infer_shape(&out[0], q) && ir_infer_shape(&out[1], &lse);
  for (int i = 0; i < 3; i++)
    if (!ir_infer_shape(&out[i], &in->args[i]->type))
      return false;
  return true;
}

static const char *const variants[] = {"full", "causal", NULL};

/* ---- the tables ------------------------------------------------------------------- */

/* For plan and the overlap pass: the scores and the weighted sum, 2 T S H
 * multiply-adds each per batch row and query head on this rank (half of
 * them under causal=true); the gradient computes the scores again and four
 * products of the same size (dp, dq, dk, dv). bf16 operands are widened
 * block by block inside the kernel: no separate pass. */
static void work_attention(const Module *mod, const Inst *in, double *dot, double *ew) {
  double S = (double)ty_local_dim(&mod->mesh, &in->args[1]->type, 1);
  double H = (double)ty_local_dim(&mod->mesh, &in->args[0]->type, 3);
  double q = (double)ty_local_count(&mod->mesh, &in->args[0]->type);   /* B T N H */
  double scores = (H > 0 ? q / H : 0) * S * (in->fn ? 0.5 : 1);        /* B T N S, half of them causal */
  bool fwd = in->op == IR_ATTENTION;
  *dot += 2 * 2 * scores * H * (fwd ? 1 : 2.5);
  *ew += scores * (fwd ? 1 : 2);   /* their exps */
}

static const OpDef ops[] = {
    {.op = IR_ATTENTION, .name = "attention", .variant = variant, .variants = variants, .print = print_scale,
     .vjp = vjp_attention, .partition = part_attention, .emit = emit_attention, .temp_bytes = temp_bytes,
     .infer = infer_attention, .work = work_attention},
    {.op = IR_ATTENTION_GRAD, .name = "attention_grad", .variant = variant, .variants = variants,
     .print = print_scale, .vjp = vjp_attention_grad, .partition = part_attention_grad, .emit = emit_attention,
     .temp_bytes = temp_bytes, .infer = infer_attention, .work = work_attention},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "dot_product_attention", .check = check_attention, .lower = lower_attention,
     .doc = "scaled dot-product attention"},
    {0},
};

const OpFamily op_attention_family = {
    .name = "attention",
    .ops = ops,
    .builtins = builtins,
};
