/* op_reduction.c: the reduction family: sum, mean, max, min over dims
 * (typing-rules 1.5, 3.4, D3, D8), with keepdims; argmax and argmin; cumsum.
 * (softmax, log_softmax and logsumexp are in op_softmax.c.)
 *
 * Reducing over a sharded dim is always allowed: the axes that sharded it
 * leave the type, and the partitioner reduces the local partial results
 * across them (an all-reduce, or a reduce-scatter when the annotated result
 * shards a dim over those axes, or nothing when it is <U:..>). A sum keeps
 * pending sums (U) pending; max and min of a pending sum are errors. With
 * keepdims=true the reduced dims stay with size 1, unsharded: the IR is the
 * reduction and a reshape (a view). An annotation on the call is its
 * out_sharding (of the keepdims shape), and one equal to the inferred type
 * is always accepted (D8).
 *
 * argmax/argmin give i32 indices (the first on ties; a NaN is the extreme,
 * as NumPy's). Over a sharded dim each rank finds its block's (value,
 * global index) per row and one all-reduce of those pairs across the axes
 * that shard the dim picks the winner (the smallest index on ties): the
 * rows are never gathered. No U/R rule (E_UR), and no gradient (an integer
 * result: the operand gets none, as in JAX).
 *
 * cumsum needs the scanned dim unsharded ([E_AXIS]); its transpose is the
 * reversed cumsum. Not linear in JAX's rules, so a pending sum is [E_UR].
 *
 * bf16 (language.md §10.1): argmax/argmin compare the values widened to
 * f32; cumsum (and so its transpose) adds in f32 and rounds each output
 * once (runtime/k_reduce.c). The pairs all-reduced stay 16 bytes a row.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

/* BuiltinDef.code: the runtime's reduction (RED_), or R_MEAN; R_CUMSUM. */
enum { R_MEAN = 16, R_CUMSUM };

/* The family's own opcodes. */
enum {
  IR_ARGREDUCE = IR_BASE_REDUCTION,   /* fn: RED_MAX/RED_MIN; dim */
  IR_ARGREDUCE_GROUP,                 /* SPMD: the same over a dim sharded over axes (a collective) */
  IR_CUMSUM,                          /* fn: 0 forward, 1 reversed; dim */
};

static bool is_array(const Value *v) { return v->type.rank > 0; }
static const char *axes_str(RuleCtx *c, AxisSet s) { return ty_axes_str(c->mesh, s); }

/* ---- the rule ------------------------------------------------------------------------ */

bool rule_reduce(RuleCtx *c, int redop, const Type *x, unsigned dims, const Type *annot, Type *out) {
  if (x->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of a bool array (%s); convert with cast(x, f32)", c->opname, TS(x));
  if (redop != RED_SUM && x->U)
    return fail(c, "E_UR",
                "%s of %s: the operand is unreduced (a pending sum over %s), and the %s of a sum's pieces is not "
                "the %s of the sum; reduce first with %s",
                c->opname, TS(x), axes_str(c, x->U), c->opname, c->opname, rule_reduce_fix_at(c, 0, x, x->U));
  Type r = *x;
  r.rank = 0;
  AxisSet reduced_axes = 0;
  for (int d = 0; d < x->rank; d++) {
    if (dims & (1u << d)) {
      reduced_axes |= ty_spec_axes(x->spec[d]);
      continue;
    }
    r.shape[r.rank] = x->shape[d];
    r.spec[r.rank] = x->spec[d];
    r.rank++;
  }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  r.weak = false;
  if (!annot) {
    *out = r;
    return true;
  }
  if (!rule_check_annot(c, annot, &r, c->opname))
    return false;
  if (ty_equal(annot, &r)) {   /* D8: the annotation changes nothing */
    *out = r;
    return true;
  }
  AxisSet m = c->manual;
  if (annot->R & ~m) {
    Type plain = *annot;
    plain.R &= m;
    return fail(c, "E_UR",
                "%s: a reduction's result cannot be annotated reduced (%s); annotate %s and reshard it "
                "afterwards (free)",
                c->opname, TS(annot), TS(&plain));
  }
  if ((annot->U & ~m) && redop != RED_SUM)
    return fail(c, "E_KIND",
                "%s: only sum reductions can leave a pending sum (<U:..> is a sum); %s asks for an unreduced %s "
                "result; annotate a replicated or sharded result instead",
                c->opname, TS(annot), c->opname);
  AxisSet allowed = reduced_axes | x->U;
  if (annot->U & ~allowed & ~m)
    return fail(c, "E_UR",
                "%s: %s is unreduced over %s, but only the axes that shard the reduced dims or that the operand is "
                "unreduced over can stay pending (%s); drop <U:%s> from the annotation",
                c->opname, TS(annot), axes_str(c, annot->U & ~allowed & ~m),
                allowed ? arena_printf("here: %s", axes_str(c, allowed)) : "none here",
                axes_str(c, annot->U & ~allowed & ~m));
  return rule_manual_states(c, annot, x->U & m, x->R & m, out);
}

/* ---- typing ----------------------------------------------------------------------- */


/* An annotation of a keepdims result, as the out_sharding of the reduction
 * itself: the size-1 dims removed (they must be unsharded). */
static bool squeeze_annot(TcCtx *c, Expr *e, Type *annot, const Type *x, unsigned mask) {
  bool shape_ok = annot->rank == x->rank;
  for (int d = 0; shape_ok && d < x->rank; d++)
    shape_ok = annot->shape[d] == ((mask & (1u << d)) ? 1 : x->shape[d]);
  if (!shape_ok) {
    Type want = ty_keep_dims(x, x, 0), plain;
    for (int d = 0; d < x->rank; d++)
      if (mask & (1u << d))
        want.shape[d] = 1;
    plain = ty_strip_sharding(&want);
    diag_error(e->pos, "E_SHAPE",
               "%s: the annotation %s does not have the result's shape %s (keepdims=true keeps the reduced dims "
               "with size 1)",
               tc_callee(e), TS(annot), TS(&plain));
    return false;
  }
  Type fixed = *annot;
  bool sharded = false;
  for (int d = 0; d < x->rank; d++)
    if ((mask & (1u << d)) && annot->spec[d].n) {
      sharded = true;
      fixed.spec[d].n = 0;
    }
  if (sharded) {
    diag_error(e->pos, "E_ANNOT",
               "%s: the annotation %s shards a dim that keepdims=true keeps with size 1, unsharded; annotate %s",
               tc_callee(e), TS(annot), TS(&fixed));
    return false;
  }
  Type r = *annot;
  r.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (!(mask & (1u << d))) {
      r.shape[r.rank] = annot->shape[d];
      r.spec[r.rank++] = annot->spec[d];
    }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  *annot = r;
  return true;
}

static Type check_reduction(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[1], *kw[2] = {NULL, NULL};
  const char *kwn[2] = {"axis", "keepdims"};
  const char *f = tc_callee(e);
  int n = tc_call_args(c, e, pos, 1, 1, kw, kwn, 2,
                       arena_printf("%s(x) or %s(x, axis=k) or %s(x, axis=(j, k)), each with keepdims=true to keep "
                                    "the reduced dims",
                                    f, f, f));
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], f);
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  unsigned mask = x.rank ? (1u << x.rank) - 1 : 0;
  if (kw[0] && !tc_dims_arg(c, kw[0], x.rank, &mask, f))
    return ty_error();
  bool keep = false;
  if (kw[1] && !tc_bool_arg(c, kw[1], &keep, "keepdims"))
    return ty_error();
  info->mask = mask;
  info->redop = e->bi->code == R_MEAN ? RED_SUM : e->bi->code;
  if (e->bi->code == R_MEAN) {
    if (!ty_is_float(x.dtype)) {
      diag_error(e->pos, "E_DTYPE", "mean of %s; convert to a float first with cast(x, f32)", TS(&x));
      return ty_error();
    }
    double count = 1;
    for (int d = 0; d < x.rank; d++)
      if (mask & (1u << d))
        count *= (double)x.shape[d];
    info->scale_by_count = true;
    info->count = count;
  }
  RuleCtx r = tc_rule(c, e->pos, f);
  Type a2, *pa = NULL;
  if (annot) {
    a2 = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, x.V, x.U, x.R);
    if (keep && (a2.R & ~c->manual)) {
      /* say it in the keepdims shapes: the squeezed ones would mislead */
      RuleCtx quiet = tc_rule(c, (Pos){0}, f);
      Type inferred;
      if (rule_reduce(&quiet, info->redop, &x, mask, NULL, &inferred)) {
        Type kept = ty_keep_dims(&inferred, &x, mask), plain = a2;
        plain.R &= c->manual;
        if (!ty_equal(&kept, &a2)) {
          diag_error(e->pos, "E_UR",
                     "%s: a reduction's result cannot be annotated reduced (%s); annotate %s and reshard it "
                     "afterwards (free)",
                     f, TS(&a2), TS(&plain));
          return ty_error();
        }
      }
    }
    if (keep && !squeeze_annot(c, e, &a2, &x, mask))
      return ty_error();
    pa = &a2;
  }
  Type out;
  if (!rule_reduce(&r, info->redop, &x, mask, pa, &out))
    return ty_error();
  info->type = out;
  return keep ? ty_keep_dims(&out, &x, mask) : out;
}

/* ---- lowering ---------------------------------------------------------------------- */

/* A bf16 mean is computed in f32, the sum divided before it is rounded
 * (language.md §10.1): cast(mean(cast(x, f32)), bf16). */
static Value *lower_reduction(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Type rt = info->type;
  bool bf = info->scale_by_count && rt.dtype == DT_BF16;
  if (bf) {
    x = lower_convert(L, e->pos, x, DT_F32);
    rt.dtype = DT_F32;
  }
  Inst *in = lower_emit(L, IR_REDUCE, e->pos, 1, &x, rt);
  in->fn = info->redop;
  in->mask = info->mask;
  Value *r = in->results[0];
  if (info->scale_by_count) {
    Value *args[2] = {r, lower_const(L, e->pos, rt.dtype, 1.0 / info->count)};
    Inst *m = lower_emit(L, IR_BINARY, e->pos, 2, args, rt);
    m->fn = BIN_MUL;
    r = m->results[0];
  }
  if (bf)
    r = lower_convert(L, e->pos, r, DT_BF16);
  return r->type.rank == e->ty->rank ? r : lower_emit1(L, IR_RESHAPE, e->pos, 1, &r, *e->ty);
}

/* ---- transpose ------------------------------------------------------------------------ */

static void vjp_reduce(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  const Type *X = &px->type;
  if (in->fn == RED_SUM) {
    ad_add_ct(a, px, ad_broadcast_as(a, g, X, in->mask, ty_ct(X)));
    return;
  }
  /* max/min: the cotangent goes to the elements equal to the result, split
   * evenly among ties. */
  /* Everything but g is typed like the primal values (a reduced x gives
   * reduced masks and counts, which a pending g may be divided and
   * multiplied by without communication). */
  Value *x = ad_primal(a, px), *y = ad_primal(a, in->results[0]);
  Value *yb = ad_broadcast_as(a, y, X, in->mask, x->type);
  Value *hit = ad_bin(a, BIN_EQ, x, yb);
  Type ht = hit->type;
  ht.dtype = X->dtype;
  Value *m = ad_emit1(a, IR_CAST, 1, &hit, ht);
  Inst *cnt = ad_emit(a, IR_REDUCE, 1, &m, y->type);
  cnt->fn = RED_SUM;
  cnt->mask = in->mask;
  Value *share = ad_bin(a, BIN_DIV, g, cnt->results[0]);
  ad_add_ct(a, px, ad_bin(a, BIN_MUL, ad_broadcast_as(a, share, X, in->mask, ty_ct(X)), m));
}


/* ---- argmax, argmin, cumsum (1.5) ------------------------------------------------------ */

/* The fix that makes x plain over its R axes: a reshard in the global view,
 * a pcast to varying over manual axes. */
static const char *unreduce_fix(RuleCtx *c, const Type *x) {
  AxisSet m = x->R & c->manual;
  Type plain = *x;
  plain.R &= c->manual;
  plain.weak = false;
  const char *pc = arena_printf("pcast(x, %s, to=varying)", ty_axes_arg(c->mesh, m));
  const char *rs = arena_printf("reshard(x, %s)", TS(&plain));
  if (m == x->R)
    return pc;
  return m ? arena_printf("%s and %s", rs, pc) : rs;
}

bool rule_argreduce(RuleCtx *c, int redop, const Type *x, int dim, Type *out) {
  if (x->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of a bool array (%s); convert with cast(x, i32)", c->opname, TS(x));
  if (x->U)
    return fail(c, "E_UR",
                "%s of %s: the operand is unreduced (a pending sum over %s), and %s has no rule for pending sums; "
                "reduce it first with %s",
                c->opname, TS(x), axes_str(c, x->U), c->opname, rule_reduce_fix(c, x, x->U));
  if (x->R)
    return fail(c, "E_UR",
                "%s of %s: %s has no rule for reduced operands (its result is an index, with no cotangent); make "
                "it plain first with %s",
                c->opname, TS(x), c->opname, unreduce_fix(c, x));
  Type r = ty_without_dim(x, dim);
  r.dtype = DT_I32;
  *out = r;
  return true;
}

bool rule_cumsum(RuleCtx *c, const Type *x, int dim, Type *out) {
  if (x->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "cumsum of a bool array (%s); convert with cast(x, i32)", TS(x));
  if (x->U)
    return fail(c, "E_UR",
                "cumsum of %s: the operand is unreduced (a pending sum over %s) and cumsum has no rule for pending "
                "sums; reduce it first with %s",
                TS(x), axes_str(c, x->U), rule_reduce_fix(c, x, x->U));
  if (x->spec[dim].n) {
    Type fixed = *x;
    fixed.spec[dim].n = 0;
    fixed.weak = false;
    return fail(c, "E_AXIS",
                "cumsum along dim %d of %s: the scanned dim must be unsharded, and it is split over %s; gather it "
                "first: reshard(x, %s)",
                dim, TS(x), axes_str(c, ty_spec_axes(x->spec[dim])), TS(&fixed));
  }
  Type r = *x;
  r.weak = false;
  *out = r;
  return true;
}

static Type check_along(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  const char *f = tc_callee(e);
  Expr *pos[1], *kw[1] = {NULL};
  const char *kwn[1] = {"axis"};
  const char *usage = arena_printf("%s(x, axis=k)", f);
  if (tc_call_args(c, e, pos, 1, 1, kw, kwn, 1, usage) < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], f);
  if (x.kind == TY_ERROR)
    return x;
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "%s of a scalar (%s): it works along a dim of an array", f, TS(&x));
    return ty_error();
  }
  int dim = 0;
  if (!kw[0] && x.rank > 1) {
    diag_error(e->pos, "E_ARG", "%s of %s: which dim? usage: %s", f, TS(&x), usage);
    return ty_error();
  }
  if (kw[0] && !tc_dim_arg(c, kw[0], x.rank, &dim, f))
    return ty_error();
  info->x = pos[0];
  info->dim = dim;
  RuleCtx r = tc_rule(c, e->pos, f);
  Type out;
  bool ok = e->bi->code == R_CUMSUM ? rule_cumsum(&r, &x, dim, &out) : rule_argreduce(&r, e->bi->code, &x, dim, &out);
  return ok ? out : ty_error();
}

static Value *lower_along(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  bool cum = e->bi->code == R_CUMSUM;
  Inst *in = lower_emit(L, cum ? IR_CUMSUM : IR_ARGREDUCE, e->pos, 1, &x, *e->ty);
  in->fn = cum ? 0 : e->bi->code;
  in->dim = info->dim;
  return in->results[0];
}

/* cumsum's transpose: the reversed cumsum of the cotangent (a pending sum
 * stays pending: it is linear). */
static void vjp_cumsum(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  if (!ad_wants_ct(a, px))
    return;
  Inst *r = ad_emit(a, IR_CUMSUM, 1, &g, ty_ct(&px->type));
  r->fn = !in->fn;
  r->dim = in->dim;
  ad_add_ct(a, px, r->results[0]);
}

/* The operand takes the result's specs (and U) on every dim. */
static void part_cumsum(Part *p, Inst *in, Value **args) {
  Type want = args[0]->type;
  const Type *res = &in->results[0]->type;
  for (int d = 0; d < want.rank; d++)
    want.spec[d] = res->spec[d];
  want.U = res->U;
  want.spec[in->dim].n = 0;
  Value *x = part_to(p, in->pos, args[0], &want);
  Value *r = part_local(p, in, IR_CUMSUM, 1, &x, x->type);
  part_put(p, in->results[0], part_to(p, in->pos, r, res));
}

/* Each rank's block of the rows (the result's specs on the kept dims); a
 * sharded dim k is reduced across its axes by one collective. */
static void part_argreduce(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type want = args[0]->type;
  for (int d = 0, k = 0; d < want.rank; d++)
    if (d != in->dim)
      want.spec[d] = T->spec[k++];
  /* An axis the result shards may not also shard dim k. */
  AxisSet used = ty_dim_axes(T);
  DimSpec *sk = &want.spec[in->dim];
  int n = 0;
  for (int i = 0; i < sk->n; i++)
    if (!(used & (1u << sk->axes[i])) && n == i)
      sk->axes[n++] = sk->axes[i];
  sk->n = (uint8_t)n;
  Value *x = part_to(p, in->pos, args[0], &want);
  Type natural = ty_without_dim(&x->type, in->dim);
  natural.dtype = DT_I32;
  Value *r;
  if (!want.spec[in->dim].n) {
    r = part_local(p, in, IR_ARGREDUCE, 1, &x, natural);
  } else {
    Inst *g = ir_emit(part_mod(p), part_block(p), IR_ARGREDUCE_GROUP, in->pos, 1, &x, 1, &natural);
    g->fn = in->fn;
    g->dim = in->dim;
    for (int i = 0; i < want.spec[in->dim].n; i++)
      g->axes[g->naxes++] = want.spec[in->dim].axes[i];
    r = g->results[0];
  }
  part_put(p, in->results[0], part_to(p, in->pos, r, T));
}

/* ---- partitioning -------------------------------------------------------------------- */

static void part_reduce(Part *p, Inst *in, Value **args) {
  Type X = args[0]->type, T = in->results[0]->type;
  Type natural = X;
  natural.rank = 0;
  AxisSet red = 0;
  for (int d = 0; d < X.rank; d++) {
    if (in->mask & (1u << d)) {
      red |= ty_spec_axes(X.spec[d]);
      continue;
    }
    natural.shape[natural.rank] = X.shape[d];
    natural.spec[natural.rank++] = X.spec[d];
  }
  for (int d = natural.rank; d < MAX_RANK; d++)
    natural.spec[d].n = 0;
  Value *r;
  if (in->fn == RED_SUM) {
    natural.U |= red;
    natural.R &= ~red;
    r = part_local(p, in, IR_REDUCE, 1, args, natural);
  } else {
    /* max/min: no pending kind in the types, so combine at once. The axes
     * the result shards a dim over next are combined by a reduce-scatter
     * (max or min), which leaves each rank only its block; the others by
     * an all-reduce of that smaller block. */
    r = part_local(p, in, IR_REDUCE, 1, args, natural);
    for (int d = 0; d < natural.rank && red; d++) {
      DimSpec ns = natural.spec[d], ts = T.spec[d];
      bool prefix = ts.n > ns.n;
      for (int i = 0; prefix && i < ns.n; i++)
        prefix = ns.axes[i] == ts.axes[i];
      AxisSet extra = 0;
      for (int i = ns.n; prefix && i < ts.n; i++)
        extra |= 1u << ts.axes[i];
      if (!prefix || (extra & ~red))
        continue;
      Type next = natural;
      next.spec[d] = ts;
      Inst *rs = ir_emit(part_mod(p), part_block(p), IR_REDUCE_SCATTER, in->pos, 1, &r, 1, &next);
      rs->fn = in->fn;
      rs->dim = d;
      for (int i = ns.n; i < ts.n; i++)
        rs->axes[rs->naxes++] = ts.axes[i];
      r = rs->results[0];
      natural = next;
      red &= ~extra;
    }
    if (red) {
      Inst *ar = ir_emit(part_mod(p), part_block(p), IR_ALL_REDUCE, in->pos, 1, &r, 1, &natural);
      ar->fn = in->fn;
      for (int a = 0; a < part_mod(p)->mesh.naxes; a++)
        if (red & (1u << a))
          ar->axes[ar->naxes++] = a;
      r = ar->results[0];
    }
  }
  part_put(p, in->results[0], part_to(p, in->pos, r, &T));
}

/* ---- C ------------------------------------------------------------------------------ */

static EmitResult result_reduce(const Module *mod, const Inst *in, int k) {
  return in->mask == 0 ? EMIT_VIEW : EMIT_ALLOC;
}

static const char *red_const(int fn) {
  static const char *n[] = {"SHD_SUM", "SHD_MAX", "SHD_MIN"};
  return n[fn];
}

static void emit_reduce(Emit *e, const Inst *in) {
  const Value *r = in->results[0], *x = in->args[0];
  if (result_reduce(emit_module_of(e), in, 0) == EMIT_VIEW && is_array(r)) {
    emit_def_alias(e, r, x);
    return;
  }
  if (is_array(r))
    emit_def_array(e, r, false);
  else
    emit_def_scalar(e, r);
  if (!is_array(x)) {
    emit_line(e, "%s = %s;", vname(r), vname(x));
    return;
  }
  emit_line(e, "shd_reduce(%s, %s, %s, %s, %d, %s, 0x%xu);", vname(x), emit_addr(r), emit_dtconst(r->type.dtype),
       red_const(in->fn), x->type.rank, emit_shape_lit(e, &x->type), in->mask);
}

static void emit_along(Emit *e, const Inst *in) {
  const Value *r = in->results[0], *x = in->args[0];
  if (is_array(r))
    emit_def_array(e, r, false);
  else
    emit_def_scalar(e, r);
  const char *rows = emit_row_args(e, x, in->dim), *dt = emit_dtconst(x->type.dtype);
  switch (in->op) {
  case IR_CUMSUM:
    emit_line(e, "shd_cumsum(%s, %s, %s, %s, %s);", vname(x), vname(r), dt, in->fn ? "true" : "false", rows);
    return;
  case IR_ARGREDUCE:
    emit_line(e, "shd_argreduce(%s, %s, %s, %s, %s);", vname(x), emit_addr(r), dt, red_const(in->fn), rows);
    return;
  default:
    emit_line(e, "shd_argreduce_group(%s, %s, %s, %s, %s, %s);", vname(x), emit_addr(r), dt, red_const(in->fn),
              rows, emit_axes_lit(in->axes, in->naxes));
  }
}

/* The (value, index) pairs of 16 bytes per row that the group all-reduces
 * (runtime/k_reduce.c), with the runtime trace's all-reduce formula. */
static int64_t pair_bytes(const Module *mod, const Inst *in) {
  return ty_local_count(&mod->mesh, &in->results[0]->type) * 16;
}

/* MPI_Allreduce of the (value, index) pairs: recursive doubling or
 * Rabenseifner on the pairs, whose bytes come from explain's. */
static double argreduce_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  return op_allreduce_seconds(c, c->sent * c->G / (2 * (c->G - 1)), false, algo);
}

static int64_t argreduce_bytes_sent(const Module *mod, const Inst *in) {
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= mod->mesh.sizes[in->axes[i]];
  return op_allreduce_bytes(pair_bytes(mod, in), g);
}

static const char *arg_variant(const Inst *in) { return in->fn == RED_MAX ? "argmax" : "argmin"; }
static const char *cum_variant(const Inst *in) { return in->fn ? "reverse" : "forward"; }
static const char *const arg_variants[] = {"argmax", "argmin", NULL};
static const char *const cum_variants[] = {"forward", "reverse", NULL};
static void print_dim(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " dim=%d", in->dim); }
static void print_dim_axes(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d", in->dim);
  ir_print_axes(out, mod, in);
}

static const char *red_variant(const Inst *in) { return ir_red_name(in->fn); }
static const char *const red_variants[] = {"sum", "max", "min", NULL};

static void print_dims(FILE *out, const Module *mod, const Inst *in) {
  int dims[MAX_RANK], n = 0;
  for (int d = 0; d < MAX_RANK; d++)
    if (in->mask & (1u << d))
      dims[n++] = d;
  ir_print_ints(out, "dims", dims, n);
}

/* ---- the tables --------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* A reduction drops the dims of its mask (the sharding is its
 * out_sharding); argmax/argmin drop their dim and give i32 indices; a
 * cumulative sum keeps its operand's type. */
static bool infer_reduce(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1))
    return false;
  const Type *x = &in->args[0]->type;
  Type r = *x;
  r.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (!(in->mask & (1u << d)))
      r.shape[r.rank++] = x->shape[d];
  return ir_infer_shape(out, &r);
}

static bool infer_argreduce(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1) || in->dim < 0 || in->dim >= in->args[0]->type.rank)
    return false;
  Type r = ty_without_dim(&in->args[0]->type, in->dim);
  r.dtype = DT_I32;
  return ir_infer_shape(out, &r);
}

static bool infer_cumsum(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1))
    return false;
  *out = in->args[0]->type;
  return true;
}

static const OpDef ops[] = {
    {.op = IR_REDUCE, .name = "reduce", .flags = OPF_OUT_SHARDING, .variant = red_variant, .variants = red_variants, .print = print_dims,
     .vjp = vjp_reduce, .partition = part_reduce, .emit = emit_reduce, .result = result_reduce, .infer = infer_reduce, .work = op_work_reads},
    {.op = IR_ARGREDUCE, .name = "argreduce", .variant = arg_variant, .variants = arg_variants, .print = print_dim,
     .partition = part_argreduce, .emit = emit_along, .infer = infer_argreduce, .work = op_work_reads},
    {.op = IR_ARGREDUCE_GROUP, .name = "all_reduce", .flags = OPF_COLLECTIVE, .variant = arg_variant, .variants = arg_variants,
     .print = print_dim_axes, .emit = emit_along, .temp_bytes = pair_bytes, .bytes_sent = argreduce_bytes_sent,
     .net_seconds = argreduce_seconds, .infer = infer_argreduce},
    {.op = IR_CUMSUM, .name = "cumsum", .variant = cum_variant, .variants = cum_variants, .print = print_dim, .vjp = vjp_cumsum,
     .partition = part_cumsum, .emit = emit_along, .infer = infer_cumsum, .work = op_work_reads},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "sum", .code = RED_SUM, .flags = BIF_ANNOT | BIF_STRUCT_SUM, .check = check_reduction, .lower = lower_reduction},
    {.name = "mean", .code = R_MEAN, .flags = BIF_ANNOT, .check = check_reduction, .lower = lower_reduction},
    {.name = "max", .code = RED_MAX, .flags = BIF_ANNOT, .check = check_reduction, .lower = lower_reduction},
    {.name = "min", .code = RED_MIN, .flags = BIF_ANNOT, .check = check_reduction, .lower = lower_reduction},
    {.name = "argmax", .code = RED_MAX, .check = check_along, .lower = lower_along},
    {.name = "argmin", .code = RED_MIN, .check = check_along, .lower = lower_along},
    {.name = "cumsum", .code = R_CUMSUM, .check = check_along, .lower = lower_along},
    {0},
};

const OpFamily op_reduction_family = {
    .name = "reduction",
    .ops = ops,
    .builtins = builtins,
};
