/* op_softmax.c: softmax, log_softmax and logsumexp along one dim
 * (language.md §8; typed as the reduction/elementwise composition they
 * stand for, typing-rules 1.2, 1.5, 3.4, 3.5), with their closed-form
 * derivatives.
 *
 * Typing: a float operand; softmax and log_softmax keep its type, logsumexp
 * removes the dim like sum (keepdims=true keeps it with size 1, unsharded).
 * None is linear, so an unreduced operand is [E_UR]; reduced stays reduced.
 * An annotation on the call asserts (language.md §8).
 *
 * IR: one global instruction, softmax.KIND dim=k, whose derivative is one
 * softmax_grad.KIND (softmax dx = y*(g - sum(g*y)), log_softmax dx = g -
 * exp(y)*sum(g), logsumexp dx = g*exp(x - y)/rowsum(exp(x - y)) = g*softmax(x),
 * the division taking out the rounding of y): linear in g,
 * so a pending-sum cotangent (the gradient of a reduced operand) stays
 * pending. Its own derivative (grad of grad) is written out from products,
 * exp and row sums (vjp_softmax_grad).
 *
 * Partitioning: along an unsharded dim every rank runs the whole row kernel
 * (runtime/k_reduce.c: the row in cache, one or two passes). Along a dim
 * sharded over axes A the rows are never gathered: the local row max is
 * all-reduced (max) over A, the local sum of exp(x - max) all-reduced (sum),
 * and each rank normalises its own block; so the bytes moved are those of
 * the per-row statistics. The derivative all-reduces one per-row sum the
 * same way (logsumexp's none).
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

/* The family's opcodes; the last four exist only in the SPMD IR. */
enum {
  IR_SOFTMAX = IR_BASE_SOFTMAX,   /* fn: kind; dim */
  IR_SOFTMAX_GRAD,      /* args (y, g), or (x, y, g) for logsumexp */
  IR_SOFTMAX_EXPSUM,    /* args (x, m): this block's sum of exp(x - m) per row */
  IR_SOFTMAX_FINISH,    /* args (x, m, s): the result from the whole rows' max and sum */
  IR_SOFTMAX_GSUM,      /* args (y, g), or (x, y) for logsumexp: this block's part of the gradient's row sum */
  IR_SOFTMAX_GFINISH,   /* args (y, g, s), or (x, y, g, t) for logsumexp */
};

/* The kinds are the runtime's shd_softmax_kind. */
enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_LOGSUMEXP };

static const char *kind_name(int k) {
  static const char *n[] = {"softmax", "log_softmax", "logsumexp"};
  return n[k];
}

static bool is_array(const Value *v) { return v->type.rank > 0; }

/* ---- the rule ------------------------------------------------------------------------ */

bool rule_softmax(RuleCtx *c, int kind, const Type *x, int dim, Type *out) {
  const char *name = kind_name(kind);
  if (!ty_is_float(x->dtype))
    return fail(c, "E_DTYPE", "%s needs a float operand, not %s; convert with cast(x, f32)", name, TS(x));
  if (x->U)
    return fail(c, "E_UR",
                "%s is not linear, so its operand %s cannot be unreduced (a pending sum over %s); reduce it first "
                "with %s",
                name, TS(x), ty_axes_str(c->mesh, x->U), rule_reduce_fix(c, x, x->U));
  Type r = kind == SM_LOGSUMEXP ? ty_without_dim(x, dim) : *x;
  r.weak = false;
  *out = r;
  return true;
}

/* ---- typing and lowering ---------------------------------------------------------------- */


static Type check_softmax(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  int kind = e->bi->code;
  const char *name = tc_callee(e);
  Expr *pos[1], *kw[2] = {NULL, NULL};
  const char *kwn[2] = {"axis", "keepdims"};
  const char *usage = kind == SM_LOGSUMEXP ? "logsumexp(x, axis=k) or logsumexp(x, axis=k, keepdims=true)"
                                           : arena_printf("%s(x, axis=k)", name);
  if (tc_call_args(c, e, pos, 1, 1, kw, kwn, kind == SM_LOGSUMEXP ? 2 : 1, usage) < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], name);
  if (x.kind == TY_ERROR)
    return x;
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "%s of a scalar (%s): it works along a dim of an array", name, TS(&x));
    return ty_error();
  }
  int dim = x.rank - 1;
  if (kind == SM_LOGSUMEXP && !kw[0]) {
    diag_error(e->pos, "E_ARG", "%s: which dim? usage: %s", name, usage);
    return ty_error();
  }
  if (kw[0] && !tc_dim_arg(c, kw[0], x.rank, &dim, name))
    return ty_error();
  bool keep = false;
  if (kw[1] && !tc_bool_arg(c, kw[1], &keep, "keepdims"))
    return ty_error();
  info->x = pos[0];
  info->dim = dim;
  RuleCtx r = tc_rule(c, e->pos, name);
  Type out;
  if (!rule_softmax(&r, kind, &x, dim, &out))
    return ty_error();
  info->type = out;
  return keep ? ty_keep_dims(&out, &x, 1u << dim) : out;
}

/* bf16 is computed in f32 and rounded once (language.md §10.1): the row
 * kernels are f32's and f64's. */
static Value *lower_softmax(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  DType dt = info->type.dtype;
  Type t = info->type;
  t.dtype = ty_compute_dtype(dt);
  Value *x = lower_convert(L, e->pos, lower_expr(L, info->x), t.dtype);
  Inst *in = lower_emit(L, IR_SOFTMAX, e->pos, 1, &x, t);
  in->fn = e->bi->code;
  in->dim = info->dim;
  Value *r = lower_convert(L, e->pos, in->results[0], dt);
  return r->type.rank == e->ty->rank ? r : lower_emit1(L, IR_RESHAPE, e->pos, 1, &r, *e->ty);
}

/* ---- transpose -------------------------------------------------------------------------- */

static void vjp_softmax(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  if (!ad_wants_ct(a, px))
    return;
  Value *y = ad_primal(a, in->results[0]);
  Value *args[3] = {ad_primal(a, px), y, g};
  bool lse = in->fn == SM_LOGSUMEXP;
  Inst *d = ad_emit(a, IR_SOFTMAX_GRAD, lse ? 3 : 2, lse ? args : args + 1, ty_ct(&px->type));
  d->fn = in->fn;
  d->dim = in->dim;
  ad_add_ct(a, px, d->results[0]);
}

/* The derivative's own derivative (second derivatives, as grad of grad):
 * written with products, exp and row sums, which the rules type and the
 * partitioner communicates like any other (a row sum over a sharded dim is
 * an all-reduce of the per-row partial sums). With h the cotangent of dx:
 *   softmax      dx = y*(g - s), s = rowsum(g*y), t = rowsum(h*y):
 *                ct_g = y*(h - t), ct_y = h*(g - s) - g*t
 *   log_softmax  dx = g - exp(y)*rowsum(g):
 *                ct_g = h - rowsum(h*exp(y)), ct_y = -h*exp(y)*rowsum(g)
 *   logsumexp    dx = g*p, p = exp(x - y) (g, y per row):
 *                ct_g = rowsum(h*p), ct_x = h*g*p, ct_y = -g*ct_g */
static Value *row_sum(AD *a, Value *v, int k) {
  Inst *r = ad_emit(a, IR_REDUCE, 1, &v, ty_without_dim(&v->type, k));
  r->fn = RED_SUM;
  r->mask = 1u << k;
  return r->results[0];
}

/* rows (x with dim k removed) broadcast back to like's shape and sharding. */
static Value *rows_back(AD *a, Value *rows, const Type *like, int k) {
  Type t = *like;
  t.U = rows->type.U;
  t.R = rows->type.R;
  t.weak = false;
  return ad_broadcast_as(a, rows, like, 1u << k, t);
}

static void vjp_softmax_grad(AD *a, Inst *in, Value *h) {
  int k = in->dim;
  if (in->fn == SM_LOGSUMEXP) {
    Value *px = in->args[0], *py = in->args[1], *pg = in->args[2];
    if (!ad_wants_ct(a, px) && !ad_wants_ct(a, py) && !ad_wants_ct(a, pg))
      return;
    Value *x = ad_primal(a, px);
    const Type *X = &x->type;
    Value *p = ad_un(a, UN_EXP, ad_bin(a, BIN_SUB, x, rows_back(a, ad_primal(a, py), X, k)));
    Value *gb = rows_back(a, ad_primal(a, pg), X, k);
    Value *ct_g = row_sum(a, ad_bin(a, BIN_MUL, h, p), k);
    ad_add_ct(a, pg, ct_g);
    ad_add_ct(a, px, ad_bin(a, BIN_MUL, ad_bin(a, BIN_MUL, h, gb), p));
    ad_add_ct(a, py, ad_un(a, UN_NEG, ad_bin(a, BIN_MUL, ad_primal(a, pg), ct_g)));
    return;
  }
  Value *py = in->args[0], *pg = in->args[1];
  if (!ad_wants_ct(a, py) && !ad_wants_ct(a, pg))
    return;
  Value *y = ad_primal(a, py), *g = ad_primal(a, pg);
  const Type *Y = &y->type;
  if (in->fn == SM_SOFTMAX) {
    Value *t = rows_back(a, row_sum(a, ad_bin(a, BIN_MUL, h, y), k), Y, k);
    Value *s = rows_back(a, row_sum(a, ad_bin(a, BIN_MUL, g, y), k), Y, k);
    ad_add_ct(a, pg, ad_bin(a, BIN_MUL, y, ad_bin(a, BIN_SUB, h, t)));
    ad_add_ct(a, py, ad_bin(a, BIN_SUB, ad_bin(a, BIN_MUL, h, ad_bin(a, BIN_SUB, g, s)), ad_bin(a, BIN_MUL, g, t)));
  } else {
    Value *e = ad_un(a, UN_EXP, y);
    Value *he = ad_bin(a, BIN_MUL, h, e);
    ad_add_ct(a, pg, ad_bin(a, BIN_SUB, h, rows_back(a, row_sum(a, he, k), Y, k)));
    Value *sg = rows_back(a, row_sum(a, g, k), Y, k);
    ad_add_ct(a, py, ad_un(a, UN_NEG, ad_bin(a, BIN_MUL, he, sg)));
  }
}

/* ---- partitioning -------------------------------------------------------------------- */

static Value *local(Part *p, const Inst *in, int op, int n, Value **args, Type t) {
  Inst *r = ir_emit(part_mod(p), part_block(p), op, in->pos, n, args, 1, &t);
  r->fn = in->fn;
  r->dim = in->dim;
  return r->results[0];
}

/* v with the dim specs of `like` (its own U, R, V). */
static Value *with_specs(Part *p, Pos pos, Value *v, const Type *like) {
  Type t = v->type;
  for (int d = 0; d < t.rank; d++)
    t.spec[d] = like->spec[d];
  return part_to(p, pos, v, &t);
}

static AxisSet spec_set(DimSpec s) { return ty_spec_axes(s); }

static void part_softmax(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Value *x = args[0];
  if (in->fn != SM_LOGSUMEXP)
    x = with_specs(p, in->pos, x, T);
  const Type *X = &x->type;
  DimSpec A = X->spec[in->dim];
  Type rows = ty_without_dim(X, in->dim), natural = in->fn == SM_LOGSUMEXP ? rows : *X;
  Value *y;
  if (ty_spec_parts(&part_mod(p)->mesh, A) == 1) {
    /* each rank holds whole rows (the dim unsplit, or split over axes of
     * size 1): one row kernel, no collective */
    y = local(p, in, IR_SOFTMAX, 1, &x, natural);
  } else {
    /* The (max, sum) statistics of the whole rows, never the rows: M =
     * the max over ranks of each block's row max, S = the sum over ranks
     * of each block's sum of exp(x - M), the row's logsumexp M + log(S),
     * exp(x - M) / S for softmax. Every exp is of x - M, as on one device
     * (exact where it matters), so a row of large logits gets the one
     * device's answer (a block's logsumexp, rounded to the dtype and then
     * combined, was off by up to half its ulp: 0.5 at 1e7 in f32).
     * softmax and log_softmax read the block once more to write it. */
    Inst *mx = ir_emit(part_mod(p), part_block(p), IR_REDUCE, in->pos, 1, &x, 1, &rows);
    mx->fn = RED_MAX;
    mx->mask = 1u << in->dim;
    Value *l = mx->results[0];
    Inst *ar = ir_emit(part_mod(p), part_block(p), IR_ALL_REDUCE, in->pos, 1, &l, 1, &rows);
    ar->fn = RED_MAX;
    for (int i = 0; i < A.n; i++)
      ar->axes[ar->naxes++] = A.axes[i];
    Value *m = ar->results[0];
    /* the blocks' sums in f64 (rounded to f32 they scaled a row's
     * probabilities by up to 1 + 6e-8 alike, which g - sum(g * y) in the
     * gradient magnifies by g) */
    Type sums = rows, pending;
    sums.dtype = DT_F64;
    pending = sums;
    pending.U |= spec_set(A);
    Value *s = local(p, in, IR_SOFTMAX_EXPSUM, 2, (Value *[]){x, m}, pending);
    s = part_to(p, in->pos, s, &sums);
    y = local(p, in, IR_SOFTMAX_FINISH, 3, (Value *[]){x, m, s}, natural);
  }
  part_put(p, in->results[0], part_to(p, in->pos, y, T));
}

static void part_softmax_grad(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  int k = in->dim;
  Value *dx;
  if (in->fn == SM_LOGSUMEXP) {
    /* dx = g * exp(x - y) / t on each rank's block: y and g are per row,
     * t the row's sum of exp(x - y) (1 but for y's rounding), all-reduced
     * over the axes that split the dim */
    Value *x = with_specs(p, in->pos, args[0], T);
    Type rows = ty_without_dim(&x->type, k);
    Value *y = with_specs(p, in->pos, args[1], &rows), *g = with_specs(p, in->pos, args[2], &rows);
    DimSpec A = T->spec[k];
    if (ty_spec_parts(&part_mod(p)->mesh, A) == 1) {
      dx = local(p, in, IR_SOFTMAX_GRAD, 3, (Value *[]){x, y, g}, *T);
    } else {
      Type pending = rows;
      pending.U |= spec_set(A);
      Value *t = local(p, in, IR_SOFTMAX_GSUM, 2, (Value *[]){x, y}, pending);
      t = part_to(p, in->pos, t, &rows);
      dx = local(p, in, IR_SOFTMAX_GFINISH, 4, (Value *[]){x, y, g, t}, *T);
    }
  } else {
    Value *y = with_specs(p, in->pos, args[0], T), *g = with_specs(p, in->pos, args[1], T);
    DimSpec A = T->spec[k];
    if (!A.n) {
      dx = local(p, in, IR_SOFTMAX_GRAD, 2, (Value *[]){y, g}, *T);
    } else {
      /* the blocks' sums in f64, all-reduced so: g - sum cancels (g ~ 1e3
       * in f32 was off by 1e-4 over 2 blocks), and the finish rounds the
       * whole row's sum to the dtype once, as the one-device kernel does */
      Type rows = ty_without_dim(&g->type, k), pending;
      rows.dtype = DT_F64;
      pending = rows;
      pending.U |= spec_set(A);
      Value *s = local(p, in, IR_SOFTMAX_GSUM, 2, (Value *[]){y, g}, pending);
      s = part_to(p, in->pos, s, &rows);
      dx = local(p, in, IR_SOFTMAX_GFINISH, 3, (Value *[]){y, g, s}, *T);
    }
  }
  part_put(p, in->results[0], part_to(p, in->pos, dx, T));
}

/* ---- C ------------------------------------------------------------------------------ */

static void def_result(Emit *e, const Value *r) {
  if (is_array(r))
    emit_def_array(e, r, false);
  else
    emit_def_scalar(e, r);
}

static void emit_softmax(Emit *e, const Inst *in) {
  const Value *r = in->results[0], *x = in->args[0];
  const char *dt = emit_dtconst(x->type.dtype);   /* softmax_gsum's result is f64 */
  def_result(e, r);
  /* Every operand 0 is shaped like the rows (x, or y for the gradients). */
  const char *rows = emit_row_args(e, x, in->dim);
  const char *a0 = emit_addr(x), *res = emit_addr(r);
  switch (in->op) {
  case IR_SOFTMAX:
    emit_line(e, "shd_softmax(%s, %s, %s, %d, %s);", a0, res, dt, in->fn, rows);
    return;
  case IR_SOFTMAX_EXPSUM:
    emit_line(e, "shd_softmax_expsum(%s, %s, %s, %s, %s);", a0, emit_addr(in->args[1]), res, dt, rows);
    return;
  case IR_SOFTMAX_FINISH:
    emit_line(e, "shd_softmax_finish(%s, %s, %s, %s, %s, %d, %s);", a0, emit_addr(in->args[1]),
              emit_addr(in->args[2]), res, dt, in->fn, rows);
    return;
  case IR_SOFTMAX_GRAD:
    if (in->fn == SM_LOGSUMEXP)
      emit_line(e, "shd_logsumexp_grad(%s, %s, %s, %s, %s, %s);", a0, emit_addr(in->args[1]),
                emit_addr(in->args[2]), res, dt, rows);
    else
      emit_line(e, "shd_softmax_grad(%s, %s, %s, %s, %d, %s);", a0, emit_addr(in->args[1]), res, dt, in->fn, rows);
    return;
  case IR_SOFTMAX_GSUM:
    if (in->fn == SM_LOGSUMEXP)
      emit_line(e, "shd_logsumexp_gsum(%s, %s, %s, %s, %s);", a0, emit_addr(in->args[1]), res, dt, rows);
    else
      emit_line(e, "shd_softmax_gsum(%s, %s, %s, %s, %d, %s);", a0, emit_addr(in->args[1]), res, dt, in->fn, rows);
    return;
  case IR_SOFTMAX_GFINISH:
    if (in->fn == SM_LOGSUMEXP)
      emit_line(e, "shd_logsumexp_gfinish(%s, %s, %s, %s, %s, %s, %s);", a0, emit_addr(in->args[1]),
                emit_addr(in->args[2]), emit_addr(in->args[3]), res, dt, rows);
    else
      emit_line(e, "shd_softmax_gfinish(%s, %s, %s, %s, %s, %d, %s);", a0, emit_addr(in->args[1]),
              emit_addr(in->args[2]), res, dt, in->fn, rows);
    return;
  default:
    diag_ice("emit_softmax: %s", ir_opname(in->op));
  }
}

static const char *variant(const Inst *in) { return kind_name(in->fn); }
static const char *const variants[] = {"softmax", "log_softmax", "logsumexp", NULL};

static void print_dim(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " dim=%d", in->dim); }

/* ---- the tables --------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* Each keeps its first operand's shape, but logsumexp (and the finish of
 * its blocks) and the blocks' row sums, which drop the row's dim. */
static bool infer_softmax(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs < 1 || !ir_arg_is(in, 0, -1) || in->dim < 0 || in->dim >= in->args[0]->type.rank)
    return false;
  /* the blocks' row sums are f64: the forward's of every kind, the
   * gradient's of softmax and log_softmax (part_softmax, part_softmax_grad) */
  bool f64_gsums = in->fn != SM_LOGSUMEXP;
  for (int i = 1; i < in->nargs; i++) {
    bool sums = (in->op == IR_SOFTMAX_FINISH && i == 2) || (f64_gsums && in->op == IR_SOFTMAX_GFINISH && i == 2);
    if (!ir_arg_is(in, i, sums ? DT_F64 : in->args[0]->type.dtype))
      return false;
  }
  bool rows = ((in->op == IR_SOFTMAX || in->op == IR_SOFTMAX_FINISH) && in->fn == SM_LOGSUMEXP) ||
              in->op == IR_SOFTMAX_EXPSUM || in->op == IR_SOFTMAX_GSUM;
  Type r = rows ? ty_without_dim(&in->args[0]->type, in->dim) : in->args[0]->type;
  if ((in->op == IR_SOFTMAX_GSUM && f64_gsums) || in->op == IR_SOFTMAX_EXPSUM)
    r.dtype = DT_F64;
  return ir_infer_shape(out, &r);
}

#define SM(op_, name_, vjp_, part_) \
  {.op = op_, .name = name_, .variant = variant, .variants = variants, .print = print_dim, .vjp = vjp_, .partition = part_, \
   .emit = emit_softmax, .infer = infer_softmax, .work = op_work_reads}
static const OpDef ops[] = {
    SM(IR_SOFTMAX, "softmax", vjp_softmax, part_softmax),
    SM(IR_SOFTMAX_GRAD, "softmax_grad", vjp_softmax_grad, part_softmax_grad),
    SM(IR_SOFTMAX_EXPSUM, "softmax_expsum", NULL, NULL),
    SM(IR_SOFTMAX_FINISH, "softmax_finish", NULL, NULL),
    SM(IR_SOFTMAX_GSUM, "softmax_gsum", NULL, NULL),
    SM(IR_SOFTMAX_GFINISH, "softmax_gfinish", NULL, NULL),
    {0},
};
#undef SM

static const BuiltinDef builtins[] = {
    {.name = "softmax", .code = SM_SOFTMAX, .check = check_softmax, .lower = lower_softmax},
    {.name = "log_softmax", .code = SM_LOG_SOFTMAX, .check = check_softmax, .lower = lower_softmax},
    {.name = "logsumexp", .code = SM_LOGSUMEXP, .check = check_softmax, .lower = lower_softmax},
    {0},
};

const OpFamily op_softmax_family = {
    .name = "softmax",
    .ops = ops,
    .builtins = builtins,
};
