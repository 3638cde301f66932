/* op_string.c: the string family: run-time `str` values (file names from
 * the command line and step numbers: docs/language.md, "Strings").
 *
 * Operations: literals "...", concatenation a + b, chr(i) (the one-byte
 * string of byte i, to print generated text), conversion str(x) of a
 * scalar (i32 zero-padded with width=k, f32/f64 the shortest text that reads
 * back, or with digits=k fixed-point with k decimals, bool true/false, a
 * str itself), comparison a == b and a != b (a
 * bool), and, in the I/O family, arg("name", "default"), save(PATH, x),
 * load(PATH) and print with str values.
 *
 * Input: typed expressions whose type is TY_STRING (types.c: ty_string).
 * Output: IR values of that type and the C that makes them: a str is a
 * shd_str held by value, like a scalar (runtime/str.c), so nothing is
 * allocated or released and loops, branches and calls carry strings as
 * they carry scalars.
 *
 * Invariants: a str is replicated, never sharded, unreduced or varying: it
 * is built only from literals, args and replicated (or invariant) scalars,
 * so every rank holds the same bytes and a run-time error in a string
 * operation stops every rank at the same statement. Strings are not
 * differentiable (no vjp: a gradient never flows through one). Program
 * text reaches the C only as escaped literals (emit_str_lit), with its
 * length, so no byte of a string can change the generated code.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname

enum { IR_STR_LIT = IR_BASE_STRING, IR_STR_CAT, IR_STR_FROM, IR_STR_EQ, IR_STR_CHR };

static bool is_str(const Type *t) { return t->kind == TY_STRING; }

/* ---- typing ---------------------------------------------------------------------- */

/* a + b, a == b, a != b where one side is a str: the typechecker has typed
 * both and chosen these rows for the str operand (BuiltinDef, ops.h). */
static Type check_binary(TcCtx *c, Expr *e, const Type *annot) {
  const char *op = e->bi->name;
  const Type *a = e->lhs->ty, *b = e->rhs->ty;
  if (a->kind == TY_ERROR || b->kind == TY_ERROR)
    return ty_error();
  if (!is_str(a) || !is_str(b)) {
    const Type *other = is_str(a) ? b : a;
    Expr *oe = is_str(a) ? e->rhs : e->lhs;
    if (other->kind == TY_ARRAY && other->rank == 0)
      diag_error(oe->pos, "E_DTYPE", "%s of a str and %s: convert the number to text first: str(%s)", op,
                 TS(other), tc_expr_text(oe));
    else
      diag_error(oe->pos, "E_DTYPE", "%s of a str and %s: both sides must be str", op,
                 other->kind == TY_ARRAY ? TS(other) : "a value that is not a string");
    return ty_error();
  }
  if (e->op == BIN_ADD)
    return ty_string();
  Type r = ty_scalar(DT_BOOL);
  return r;
}

/* str(x): x a str or a replicated (or invariant) scalar; width=k pads an
 * integer with zeros to k digits; digits=k writes a float with k digits
 * after the point (Inst.dim: the width; Inst.dim2: digits + 1, 0 for the
 * shortest text). */
static Type check_str(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[1], *kw[2];
  const char *kwn[2] = {"width", "digits"};
  if (tc_call_args(c, e, pos, 1, 1, kw, kwn, 2, "str(x), str(step, width=6) or str(loss, digits=3)") < 0)
    return ty_error();
  Type x = tc_expr(c, pos[0]);
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  if (kw[0] && kw[1]) {
    diag_error(kw[1]->pos, "E_ARG", "str: width= pads integers and digits= rounds floats; give one of them");
    return ty_error();
  }
  if (kw[0]) {
    int64_t w;
    if (!tc_const_int(c, kw[0], &w))
      return ty_error();
    if (w < 0 || w > 1000) {
      diag_error(kw[0]->pos, "E_ARG", "str: width=%lld is out of range; the width is 0 to 1000 digits",
                 (long long)w);
      return ty_error();
    }
    if (!(x.kind == TY_ARRAY && x.dtype == DT_I32)) {
      diag_error(kw[0]->pos, "E_ARG", "str: width= pads integers with zeros, and %s is %s; leave width= out%s",
                 tc_expr_text(pos[0]), x.kind == TY_ARRAY ? TS(&x) : "a str",
                 x.kind == TY_ARRAY && ty_is_float(x.dtype) ? ", or round it with digits=" : "");
      return ty_error();
    }
    info->dim = (int)w;
  }
  if (kw[1]) {
    int64_t d;
    if (!tc_const_int(c, kw[1], &d))
      return ty_error();
    if (d < 0 || d > 20) {
      diag_error(kw[1]->pos, "E_ARG", "str: digits=%lld is out of range; a float is written with 0 to 20 digits "
                 "after the point", (long long)d);
      return ty_error();
    }
    if (!(x.kind == TY_ARRAY && ty_is_float(x.dtype))) {
      diag_error(kw[1]->pos, "E_ARG", "str: digits= rounds floats, and %s is %s; %s",
                 tc_expr_text(pos[0]), x.kind == TY_ARRAY ? TS(&x) : "a str",
                 x.kind == TY_ARRAY && x.dtype == DT_I32
                     ? arena_printf("leave digits= out, or convert it first: str(cast(%s, f64), digits=%d)",
                                    tc_expr_text(pos[0]), (int)d)
                     : "leave digits= out");
      return ty_error();
    }
    info->dim2 = (int)d + 1;
  }
  if (is_str(&x))
    return ty_string();
  if (!tc_want_array(c, pos[0], &x, "str"))
    return ty_error();
  if (x.rank) {
    diag_error(pos[0]->pos, "E_SHAPE", "str converts one scalar, not the array %s; print arrays with print(\"name\", x)",
               TS(&x));
    return ty_error();
  }
  if (x.U) {
    Type r = x;
    r.U = 0;
    diag_error(pos[0]->pos, "E_UR", "str: %s is %s, a pending sum that no rank holds whole; reduce it first: "
               "str(reshard(%s, %s))", tc_expr_text(pos[0]), TS(&x), tc_expr_text(pos[0]), TS(&r));
    return ty_error();
  }
  if (x.V) {
    diag_error(pos[0]->pos, "E_VMA", "str: %s is %s, different on each device along %s, and a str is the same on "
               "every device; make it invariant first, e.g. psum(x, %s) or pmax(x, %s)", tc_expr_text(pos[0]),
               TS(&x), ty_axes_str(c->mesh, x.V), ty_axes_arg(c->mesh, x.V), ty_axes_arg(c->mesh, x.V));
    return ty_error();
  }
  info->dtype = x.dtype;
  return ty_string();
}

/* chr(i): the str of the one byte i (1 to 255, checked at run time: a str
 * holds no NUL), for the text a language model generates. */
static Type check_chr(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[1], *kw[1];
  if (tc_call_args(c, e, pos, 1, 1, kw, NULL, 0, "chr(i)") < 0)
    return ty_error();
  if (!tc_scalar_value(c, pos[0], DT_I32, "chr's byte", false))
    return ty_error();
  info->x = pos[0];
  return ty_string();
}

/* ---- lowering ---------------------------------------------------------------------- */

static Value *lower_chr(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_as(L, info->x, DT_I32);
  return lower_emit1(L, IR_STR_CHR, e->pos, 1, &x, ty_string());
}

static Type check_lit(TcCtx *c, Expr *e, const Type *annot) { return ty_string(); }

static Value *lower_lit(Lower *L, Expr *e) {
  Inst *in = lower_emit(L, IR_STR_LIT, e->pos, 0, NULL, ty_string());
  in->str = e->str;
  in->ival = e->ival;
  return in->results[0];
}

static Value *lower_binary(Lower *L, Expr *e) {
  Value *args[2] = {lower_expr(L, e->lhs), lower_expr(L, e->rhs)};
  if (e->op == BIN_ADD)
    return lower_emit1(L, IR_STR_CAT, e->pos, 2, args, ty_string());
  Inst *in = lower_emit(L, IR_STR_EQ, e->pos, 2, args, *e->ty);
  in->fn = e->op;
  return in->results[0];
}

static Value *lower_str(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  if (is_str(info->x->ty))
    return lower_expr(L, info->x);
  Value *x = lower_as(L, info->x, info->dtype);
  Inst *in = lower_emit(L, IR_STR_FROM, e->pos, 1, &x, ty_string());
  in->dim = info->dim;
  in->dim2 = info->dim2;
  return in->results[0];
}

/* ---- C ----------------------------------------------------------------------------- */

static void emit_lit(Emit *e, const Inst *in) {
  const char *r = vname(in->results[0]);
  emit_line(e, "shd_str %s;", r);
  emit_line(e, "shd_str_lit(&%s, %s, %lld);", r, emit_str_lit(in->str, (size_t)in->ival), (long long)in->ival);
}

static void emit_cat(Emit *e, const Inst *in) {
  const char *r = vname(in->results[0]);
  emit_line(e, "shd_str %s;", r);
  emit_line(e, "shd_str_cat(&%s, &%s, &%s, %d);", r, vname(in->args[0]), vname(in->args[1]), in->pos.line);
}

static void emit_from(Emit *e, const Inst *in) {
  const char *r = vname(in->results[0]);
  const Value *x = in->args[0];
  emit_line(e, "shd_str %s;", r);
  switch (x->type.dtype) {
  case DT_I32:
    emit_line(e, "shd_str_i32(&%s, %s, %d, %d);", r, vname(x), in->dim, in->pos.line);
    break;
  case DT_BOOL:
    emit_line(e, "shd_str_bool(&%s, %s);", r, vname(x));
    break;
  default:
    if (in->dim2)
      emit_line(e, "shd_str_fixed(&%s, %s, %d, %d);", r, emit_scalar_double(x), in->dim2 - 1, in->pos.line);
    else
      emit_line(e, "shd_str_f64(&%s, %s, %s);", r, emit_scalar_double(x), x->type.dtype != DT_F64 ? "true" : "false");
    break;
  }
}

static void emit_chr(Emit *e, const Inst *in) {
  const char *r = vname(in->results[0]);
  emit_line(e, "shd_str %s;", r);
  emit_line(e, "shd_str_chr(&%s, %s, %d);", r, vname(in->args[0]), in->pos.line);
}

static void emit_eq(Emit *e, const Inst *in) {
  emit_line(e, "bool %s = %sshd_str_eq(&%s, &%s);", vname(in->results[0]), in->fn == BIN_NE ? "!" : "",
            vname(in->args[0]), vname(in->args[1]));
}

/* ---- the IR text --------------------------------------------------------------------- */

static void print_lit(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " %s", emit_str_lit(in->str, (size_t)in->ival));
}

static void print_from(FILE *out, const Module *mod, const Inst *in) {
  if (in->dim)
    fprintf(out, " width=%d", in->dim);
  if (in->dim2)
    fprintf(out, " digits=%d", in->dim2 - 1);
}

static const char *variant_eq(const Inst *in) { return in->fn == BIN_NE ? "ne" : "eq"; }
static const char *const eq_variants[] = {"eq", "ne", NULL};

/* ---- the tables ---------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* A str from str operands, i32 bytes or scalars; comparing two is a bool. */
static bool infer_str(const Module *mod, const Inst *in, Type *out) {
  if (in->op == IR_STR_CAT && (in->nargs != 2 || !is_str(&in->args[0]->type) || !is_str(&in->args[1]->type)))
    return false;
  if ((in->op == IR_STR_FROM || in->op == IR_STR_CHR) && (in->nargs != 1 || !ir_arg_is(in, 0, -1)))
    return false;
  *out = ty_string();
  return true;
}

static bool infer_eq(const Module *mod, const Inst *in, Type *out) {
  Type b = ty_scalar(DT_BOOL);
  return in->nargs == 2 && is_str(&in->args[0]->type) && is_str(&in->args[1]->type) && ir_infer_shape(out, &b);
}

static const OpDef ops[] = {
    {.op = IR_STR_LIT, .name = "str_lit", .print = print_lit, .emit = emit_lit, .infer = infer_str},
    {.op = IR_STR_CAT, .name = "str_cat", .emit = emit_cat, .infer = infer_str},
    {.op = IR_STR_FROM, .name = "str_from", .print = print_from, .emit = emit_from, .infer = infer_str},
    {.op = IR_STR_EQ, .name = "str_cmp", .variant = variant_eq, .variants = eq_variants, .emit = emit_eq, .infer = infer_eq},
    {.op = IR_STR_CHR, .name = "str_chr", .emit = emit_chr, .infer = infer_str},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "str", .check = check_str, .lower = lower_str},
    {.name = "chr", .check = check_chr, .lower = lower_chr},
    {.name = "\"...\"", .check = check_lit, .lower = lower_lit, .syntax = SYN_STRING, .operand = TY_STRING},
    {.name = "+", .code = BIN_ADD, .check = check_binary, .lower = lower_binary, .syntax = SYN_BINARY,
     .operand = TY_STRING, .doc = "concatenation"},
    {.name = "==", .code = BIN_EQ, .check = check_binary, .lower = lower_binary, .syntax = SYN_BINARY,
     .operand = TY_STRING, .doc = "comparison"},
    {.name = "!=", .code = BIN_NE, .check = check_binary, .lower = lower_binary, .syntax = SYN_BINARY,
     .operand = TY_STRING, .doc = "comparison"},
    {0},
};

const OpFamily op_string_family = {
    .name = "string",
    .ops = ops,
    .builtins = builtins,
};
