/* op_unary.c: the unary elementwise functions (typing-rules 1.2), one
 * table entry each: name, flags, constant folding, C, derivative.
 *
 * Adding a function is one entry here (and its tests): the typechecker,
 * lowering, autodiff, the partitioner and the emitter all read this table.
 * The C of a float function is an expression in x where `@` stands for the
 * math library's suffix (expf for f32, exp for f64) and `$` for a float
 * literal's (0.5f, 0.5); exp and tanh are shd_exp@/shd_tanh@ (shdrt.h),
 * whose f32 forms vectorise; it becomes a static inline helper in the
 * generated file (shd_u_NAME_f32), so an operand is computed once however
 * often the expression names it, and a chain of elementwise operations
 * still fuses into one vectorisable loop (fuse.c, emit_c.c).
 *
 * The derivative is either a function of (x, y = f(x), g) in AD builders
 * (vjp), or a hidden entry of the table computing f'(x) (deriv), in which
 * case the cotangent is g * f'(x). Only `-x` is linear, so only it keeps a
 * pending sum (<U:..>); every function keeps reduced (<R:..>) operands
 * reduced (3.4, 3.5).
 */
#include <math.h>

#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define fail rule_fail

enum {
  UF_BUILTIN = 1,      /* callable by name: exp(x) */
  UF_LINEAR = 2,       /* keeps a pending sum (3.4): negation */
  UF_INT = 4,          /* also on i32 (cint); otherwise floats only */
  UF_BOOL = 8,         /* on bool only */
};

typedef Value *(*UnaryVjp)(AD *a, Value *x, Value *y, Value *g);

typedef struct {
  const char *name;
  unsigned flags;
  double (*fold)(double);
  const char *cfloat;  /* C of a float x (@: math suffix, $: literal suffix) */
  const char *cint;    /* C of an i32 or bool x, or NULL */
  UnaryVjp vjp;        /* cotangent of x; NULL with deriv < 0: zero */
  int deriv;           /* a hidden entry computing f'(x), or -1 */
  const char *op;      /* the operator it also is (-x, !x), or NULL */
} UnaryDef;

/* The entries no other file names, around shdc.h's UnOp: the functions,
 * then the hidden entries (derivatives). */
enum {
  UN_SIN = UN_LOG + 1, UN_COS, UN_TANH, UN_SQRT, UN_ABS, UN_RELU, UN_SIGMOID,
  UN_SIGN = UN_NOT + 1, UN_STEP, /* step(x) = x > 0 */
  UN_RSQRT, UN_SQUARE,
  UN_ERF = UN_FLOOR + 1, UN_LOG1P, UN_EXPM1, UN_GELU, UN_SILU, UN_SOFTPLUS,
  UN_ERF_D, UN_GELU_D, UN_SILU_D,
  UN__COUNT
};
_Static_assert(UN_SIGMOID + 1 == UN_NOT && UN_SQUARE + 1 == UN_FLOOR, "the table has no gap around UnOp's entries");

/* ---- folding: the same functions in f64 ------------------------------------------- */

static double f_neg(double x) { return -x; }
static double f_relu(double x) { return x > 0 || x != x ? x : 0; }
static double f_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double f_not(double x) { return x == 0; }
static double f_sign(double x) { return x != x ? x : (double)((x > 0) - (x < 0)); }
static double f_step(double x) { return x > 0; }
static double f_rsqrt(double x) { return 1 / sqrt(x); }
static double f_square(double x) { return x * x; }
static double f_gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double f_silu(double x) { return x / (1 + exp(-x)); }
static double f_softplus(double x) { return fmax(x, 0) + log1p(exp(-fabs(x))); }
static double f_erf_d(double x) { return 1.1283791670955126 * exp(-x * x); }
static double f_gelu_d(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
static double f_silu_d(double x) {
  double s = 1 / (1 + exp(-x));
  return s * (1 + x * (1 - s));
}

/* ---- derivatives in AD builders ---------------------------------------------------- */

static Value *mul(AD *a, Value *x, Value *y) { return ad_bin(a, BIN_MUL, x, y); }
static Value *one(AD *a, Value *x) { return ad_const(a, x->type.dtype, 1); }

static Value *d_neg(AD *a, Value *x, Value *y, Value *g) { return ad_un(a, UN_NEG, g); }
static Value *d_exp(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, y); }
static Value *d_log(AD *a, Value *x, Value *y, Value *g) { return ad_bin(a, BIN_DIV, g, x); }
static Value *d_sin(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, ad_un(a, UN_COS, x)); }
static Value *d_cos(AD *a, Value *x, Value *y, Value *g) { return ad_un(a, UN_NEG, mul(a, g, ad_un(a, UN_SIN, x))); }
static Value *d_tanh(AD *a, Value *x, Value *y, Value *g) {
  return mul(a, g, ad_bin(a, BIN_SUB, one(a, x), mul(a, y, y)));
}
static Value *d_sqrt(AD *a, Value *x, Value *y, Value *g) {
  return ad_bin(a, BIN_DIV, mul(a, g, ad_const(a, x->type.dtype, 0.5)), y);
}
static Value *d_abs(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, ad_un(a, UN_SIGN, x)); }
/* relu' from the output (y > 0 iff x > 0): the pre-activation then has one
 * use and fuses with whatever produced it. */
static Value *d_relu(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, ad_un(a, UN_STEP, y)); }
static Value *d_sigmoid(AD *a, Value *x, Value *y, Value *g) {
  return mul(a, g, mul(a, y, ad_bin(a, BIN_SUB, one(a, x), y)));
}
/* d rsqrt(x) = -y^3 / 2 */
static Value *d_rsqrt(AD *a, Value *x, Value *y, Value *g) {
  return mul(a, g, mul(a, ad_const(a, x->type.dtype, -0.5), mul(a, y, mul(a, y, y))));
}
static Value *d_square(AD *a, Value *x, Value *y, Value *g) {
  return mul(a, g, mul(a, ad_const(a, x->type.dtype, 2), x));
}
static Value *d_log1p(AD *a, Value *x, Value *y, Value *g) {
  return ad_bin(a, BIN_DIV, g, ad_bin(a, BIN_ADD, one(a, x), x));
}
static Value *d_expm1(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, ad_bin(a, BIN_ADD, y, one(a, x))); }
static Value *d_softplus(AD *a, Value *x, Value *y, Value *g) { return mul(a, g, ad_un(a, UN_SIGMOID, x)); }

/* ---- the table ---------------------------------------------------------------------- */

#define B UF_BUILTIN
static const UnaryDef unary_defs[UN__COUNT] = {
    [UN_NEG] = {"neg", UF_LINEAR | UF_INT, f_neg, "-x", "shd_negi(x)", d_neg, -1, "-"},
    [UN_EXP] = {"exp", B, exp, "shd_exp@(x)", NULL, d_exp, -1},
    [UN_LOG] = {"log", B, log, "log@(x)", NULL, d_log, -1},
    [UN_SIN] = {"sin", B, sin, "sin@(x)", NULL, d_sin, -1},
    [UN_COS] = {"cos", B, cos, "cos@(x)", NULL, d_cos, -1},
    [UN_TANH] = {"tanh", B, tanh, "shd_tanh@(x)", NULL, d_tanh, -1},
    [UN_SQRT] = {"sqrt", B, sqrt, "sqrt@(x)", NULL, d_sqrt, -1},
    [UN_ABS] = {"abs", B | UF_INT, fabs, "fabs@(x)", "x < 0 ? shd_negi(x) : x", d_abs, -1},
    /* maximum(x, 0), NaN propagating as NumPy's maximum */
    [UN_RELU] = {"relu", B | UF_INT, f_relu, "(x > 0 || x != x) ? x : 0", "x > 0 ? x : 0", d_relu, -1},
    [UN_SIGMOID] = {"sigmoid", B, f_sigmoid, "1 / (1 + shd_exp@(-x))", NULL, d_sigmoid, -1},
    [UN_NOT] = {"not", UF_BOOL, f_not, NULL, "!x", NULL, -1, "!"},
    [UN_SIGN] = {"sign", B | UF_INT, f_sign, "x != x ? x : (x > 0) - (x < 0)", "(x > 0) - (x < 0)", NULL, -1},
    [UN_STEP] = {"step", UF_INT, f_step, "x > 0", "x > 0", NULL, -1},
    [UN_RSQRT] = {"rsqrt", B, f_rsqrt, "1 / sqrt@(x)", NULL, d_rsqrt, -1},
    [UN_SQUARE] = {"square", B | UF_INT, f_square, "x * x", "shd_muli(x, x)", d_square, -1},
    [UN_ERF] = {"erf", B, erf, "erf@(x)", NULL, NULL, UN_ERF_D},
    [UN_FLOOR] = {"floor", B, floor, "floor@(x)", NULL, NULL, -1},
    [UN_LOG1P] = {"log1p", B, log1p, "log1p@(x)", NULL, d_log1p, -1},
    [UN_EXPM1] = {"expm1", B, expm1, "expm1@(x)", NULL, d_expm1, -1},
    /* the tanh approximation, as jax.nn.gelu (approximate=True) and GPT-2 */
    [UN_GELU] = {"gelu", B, f_gelu, "0.5$ * x * (1 + shd_tanh@(0.7978845608028654$ * (x + 0.044715$ * x * x * x)))", NULL,
                 NULL, UN_GELU_D},
    [UN_SILU] = {"silu", B, f_silu, "x / (1 + shd_exp@(-x))", NULL, NULL, UN_SILU_D},
    [UN_SOFTPLUS] = {"softplus", B, f_softplus, "fmax@(x, 0) + log1p@(shd_exp@(-fabs@(x)))", NULL, d_softplus, -1},
    [UN_ERF_D] = {"erf_d", 0, f_erf_d, "1.1283791670955126$ * shd_exp@(-x * x)", NULL, NULL, -1},
    [UN_GELU_D] = {"gelu_d", 0, f_gelu_d,
                   "(0.5$ * (1 + shd_tanh@(0.7978845608028654$ * (x + 0.044715$ * x * x * x))) + 0.5$ * x * "
                   "(1 - shd_tanh@(0.7978845608028654$ * (x + 0.044715$ * x * x * x)) * "
                   "shd_tanh@(0.7978845608028654$ * (x + 0.044715$ * x * x * x))) * 0.7978845608028654$ * "
                   "(1 + 0.134145$ * x * x))",
                   NULL, NULL, -1},
    [UN_SILU_D] = {"silu_d", 0, f_silu_d, "(1 / (1 + shd_exp@(-x))) * (1 + x * (1 - 1 / (1 + shd_exp@(-x))))", NULL, NULL,
                   -1},
};
#undef B

static const UnaryDef *def_of(int un) {
  if (un < 0 || un >= UN__COUNT || !unary_defs[un].name)
    diag_ice("unary function %d", un);
  return &unary_defs[un];
}

int op_unary_count(void) { return UN__COUNT; }
static double fold_un(int un, double x) { return def_of(un)->fold(x); }

/* ---- the rule (1.2) ----------------------------------------------------------------- */

bool rule_unary(RuleCtx *c, int op, const Type *x, Type *out) {
  const UnaryDef *u = def_of(op);
  const char *name = op == UN_NEG ? "negation" : u->name;
  if (u->flags & UF_BOOL) {
    if (x->dtype != DT_BOOL)
      return fail(c, "E_DTYPE", "%s needs a bool operand, not %s; compare first, e.g. !(x > 0)", name, TS(x));
  } else if (x->dtype == DT_BOOL) {
    return fail(c, "E_DTYPE", "%s of a bool value (%s); convert with cast(x, f32)", name, TS(x));
  } else if (!(u->flags & UF_INT) && !ty_is_float(x->dtype) && !x->weak) {
    return fail(c, "E_DTYPE", "%s needs a float operand, not %s; convert with cast(x, f32)", name,
                rule_stage_wrap(TS(x), 0, "cast(", ", f32)", "convert the operand to f32"));
  }
  if (x->U && !(u->flags & UF_LINEAR))
    return fail(c, "E_UR",
                "%s is not linear, so its operand %s cannot be unreduced (a pending sum over %s); reduce it first "
                "with %s",
                name, TS(x), ty_axes_str(c->mesh, x->U), rule_reduce_fix_at(c, 0, x, x->U));
  Type r = *x;
  if (!(u->flags & (UF_INT | UF_BOOL)) && r.weak && !ty_is_float(r.dtype))
    r.dtype = DT_F32;
  *out = r;
  return true;
}

/* ---- typing and lowering: exp(x) and -x, !x ----------------------------------------- */

static Type check_unary_fn(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[1], *kw[1];
  int n = tc_call_args(c, e, pos, 1, 1, kw, NULL, 0, arena_printf("%s(x)", tc_callee(e)));
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], tc_callee(e));
  if (x.kind == TY_ERROR)
    return x;
  RuleCtx r = tc_rule(c, e->pos, tc_callee(e));
  Type out;
  info->x = pos[0];
  info->un = e->bi->code;
  return rule_unary(&r, info->un, &x, &out) ? out : ty_error();
}

/* -x and !x: the typechecker has typed x (BuiltinDef, ops.h). */
static Type check_unary_op(TcCtx *c, Expr *e, const Type *annot) {
  Type x = *e->lhs->ty;
  if (!tc_want_array(c, e->lhs, &x, e->bi->name))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, e->op == UN_NOT ? "not" : "negation");
  Type out;
  return rule_unary(&r, e->op, &x, &out) ? out : ty_error();
}

static Value *lower_un(Lower *L, Pos pos, int un, Expr *x, const Type *t) {
  Value *v = lower_as(L, x, t->dtype);
  Inst *in = lower_emit(L, IR_UNARY, pos, 1, &v, *t);
  in->fn = un;
  return in->results[0];
}

static Value *lower_unary_fn(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  return lower_un(L, e->pos, info->un, info->x, e->ty);
}

static Value *lower_unary_op(Lower *L, Expr *e) { return lower_un(L, e->pos, e->op, e->lhs, e->ty); }

static double fold_unary_fn(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  return fold_un(info->un, lower_fold(L, info->x));
}

static double fold_unary_op(Lower *L, Expr *e) { return fold_un(e->op, lower_fold(L, e->lhs)); }

/* ---- autodiff, partitioning, C ------------------------------------------------------- */

static void vjp_unary(AD *a, Inst *in, Value *g) {
  const UnaryDef *u = def_of(in->fn);
  Value *x = ad_primal(a, in->args[0]), *y = ad_primal(a, in->results[0]);
  Value *r = NULL;
  if (u->vjp)
    r = u->vjp(a, x, y, g);
  else if (u->deriv >= 0)
    r = mul(a, g, ad_un(a, u->deriv, x));
  if (r)
    ad_add_ct(a, in->args[0], r);
}

/* The rule (1.2) on the operand. */
static bool infer_unary(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || in->args[0]->type.kind != TY_ARRAY)
    return false;
  RuleCtx rc = ir_rule_ctx(mod, in);
  return rule_unary(&rc, in->fn, &in->args[0]->type, out);
}

/* The helper function's name, or the inline C of neg and not. */
const char *op_unary_c(int un, DType dt, const char *x) {
  dt = ty_compute_dtype(dt);
  if (un == UN_NEG && dt == DT_I32)
    return arena_printf("shd_negi(%s)", x);
  if (un == UN_NEG || un == UN_NOT)
    return arena_printf("%s%s", un == UN_NEG ? "-" : "!", x);
  return arena_printf("shd_u_%s_%s(%s)", def_of(un)->name, ty_dtype_name(dt), x);
}

static const char *unary_expr(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  return op_unary_c(in->fn, res->dtype, emit_operand_at(e, in->args[0], res));
}

/* The helper of (un, dt) for the generated file's preamble. */
void op_unary_helper(FILE *out, int un, DType dt) {
  dt = ty_compute_dtype(dt);
  const UnaryDef *u = def_of(un);
  bool fl = ty_is_float(dt);
  const char *src = fl ? u->cfloat : u->cint;
  if (!src || un == UN_NEG || un == UN_NOT)
    return;
  const char *t = ty_dtype_c(dt);
  fprintf(out, "static inline %s shd_u_%s_%s(%s x) { return (%s)(", t, u->name, ty_dtype_name(dt), t, t);
  for (const char *p = src; *p; p++) {
    if (*p == '@' || *p == '$')
      fputs(dt == DT_F32 ? "f" : "", out);
    else
      fputc(*p, out);
  }
  fputs("); }\n", out);
}

static const char *unary_variant(const Inst *in) { return def_of(in->fn)->name; }
static const char *unary_names[UN__COUNT + 1];   /* filled with the builtins, before main */

static const OpDef ops[] = {
    {.op = IR_UNARY, .name = "unary", .flags = OPF_ELEMENTWISE, .variant = unary_variant, .variants = unary_names, .vjp = vjp_unary,
     .partition = part_as_result, .expr = unary_expr, .infer = infer_unary},
    {0},
};

/* The builtins are the entries flagged UF_BUILTIN and the operators (-x,
 * !x), registered before main so that the table above is the only list of
 * names. */
static BuiltinDef builtins[2 * UN__COUNT + 1];

__attribute__((constructor)) static void register_builtins(void) {
  int k = 0;
  for (int un = 0; un < UN__COUNT; un++) {
    const UnaryDef *u = &unary_defs[un];
    unary_names[un] = u->name;
    if (u->flags & UF_BUILTIN)
      builtins[k++] = (BuiltinDef){.name = u->name, .code = un, .flags = BIF_ELEMENTWISE, .check = check_unary_fn,
                                            .lower = lower_unary_fn, .fold = fold_unary_fn};
    if (u->op)
      builtins[k++] = (BuiltinDef){.name = u->op, .code = un, .flags = BIF_ELEMENTWISE, .check = check_unary_op,
                                            .lower = lower_unary_op, .fold = fold_unary_op, .syntax = SYN_UNARY};
  }
}

const OpFamily op_unary_family = {
    .name = "unary",
    .ops = ops,
    .builtins = builtins,
};
