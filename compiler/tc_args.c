/* tc_args.c: the forms of builtin arguments, shared by every family's
 * typing (BuiltinDef.check in op_*.c).
 *
 * A builtin call is typed by its family: it splits its arguments into
 * positional and keyword ones (tc_call_args, with the usage line for a
 * wrong count), types its array operands (tc_operand), and reads its
 * compile-time arguments: dims (axis=k, axis=(j, k), negative counting
 * from the end), types, string literals and scalar values. Each helper
 * reports its own error on the argument's position and returns false (or
 * -1 / ty_error()).
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))

const char *tc_callee(const Expr *e) { return e->callee->str; }

TcInfo *tc_info(Expr *e) {
  if (!e->tc)
    e->tc = arena_alloc(sizeof(TcInfo));
  return e->tc;
}

/* A builtin without a bf16 kernel, given or asked for bf16: computing it
 * in f32 is the fix (language.md §10.1). */
static bool refuse_bf16(TcCtx *c, Expr *e, const Type *t) {
  const Type *bad = t->dtype == DT_BF16 ? t : NULL;
  for (int i = 0; !bad && i < e->args.len; i++) {
    const Expr *a = e->args.data[i];
    if (a->ty && a->ty->kind == TY_ARRAY && a->ty->dtype == DT_BF16)
      bad = a->ty;
  }
  if (!bad)
    return true;
  diag_error(e->pos, "E_DTYPE", "%s has no bf16 kernel (it was given %s); compute it in f32: cast the operand with "
             "cast(x, f32), and the result back with cast(y, bf16) if you need bf16", tc_callee(e), TS(bad));
  return false;
}

Type tc_builtin(TcCtx *c, Expr *e, const Type *annot) {
  tc_info(e);
  if ((e->bi->flags & BIF_MANUAL_ONLY) && !c->manual) {
    diag_error(e->pos, "E_MANUAL",
               "%s is only available inside a manual function body; in the global view, reshard and reductions "
               "insert the collectives the types call for",
               tc_callee(e));
    return ty_error();
  }
  Type t = e->bi->check(c, e, annot);
  if (t.kind == TY_ARRAY && (e->bi->flags & BIF_NO_BF16) && !refuse_bf16(c, e, &t))
    return ty_error();
  return t;
}

Type tc_operand(TcCtx *c, Expr *x, const char *what) {
  Type t = tc_expr(c, x);
  if (t.kind == TY_ERROR)
    return t;
  if (t.kind != TY_ARRAY) {
    tc_want_array(c, x, &t, what);
    return ty_error();
  }
  return t;
}

/* Operand X of CALL (to WHAT) where an array of rank 1 or more is needed:
 * a scalar is an E_SHAPE error at the call. */
Type tc_array_operand(TcCtx *c, Expr *call, Expr *x, const char *what) {
  Type t = tc_operand(c, x, what);
  if (t.kind != TY_ERROR && t.rank == 0) {
    diag_error(call->pos, "E_SHAPE", "%s of the scalar %s; make it an array first: reshape(%s, [1])", what,
               ty_str(c->mesh, &t), tc_expr_text(x));
    return ty_error();
  }
  return t;
}

int tc_call_args(TcCtx *c, Expr *e, Expr **pos, int lo, int hi, Expr **kw, const char **kwn, int nkw,
                 const char *usage) {
  int n;
  bool ok = true;
  tc_split_args(e, pos, hi, &n, kw, kwn, nkw, &ok);
  if (!ok)
    return -1;
  if (n < lo || n > hi) {
    diag_error(e->pos, "E_ARG", "%s: wrong number of arguments; usage: %s", tc_callee(e), usage);
    return -1;
  }
  return n;
}

/* axis=k, axis=(j, k) or axis=[j, k] -> a dims mask; negative counts from
 * the end as in NumPy. */
bool tc_dims_arg(TcCtx *c, Expr *a, int rank, unsigned *mask, const char *what) {
  int n = a->kind == EX_TUPLE || a->kind == EX_LIST ? a->args.len : 1;
  *mask = 0;
  for (int i = 0; i < n; i++) {
    Expr *item = a->kind == EX_TUPLE || a->kind == EX_LIST ? a->args.data[i] : a;
    int64_t k;
    if (!tc_const_int(c, item, &k))
      return false;
    if (k < -rank || k >= rank) {
      diag_error(item->pos, "E_ARG", "%s: axis %lld is out of range for an array of rank %d", what, (long long)k,
                 rank);
      return false;
    }
    if (k < 0)
      k += rank;
    if (*mask & (1u << k)) {
      diag_error(item->pos, "E_ARG", "%s: axis %lld is repeated", what, (long long)k);
      return false;
    }
    *mask |= 1u << k;
  }
  return true;
}

bool tc_dim_arg(TcCtx *c, Expr *a, int rank, int *dim, const char *what) {
  unsigned m;
  if (a->kind == EX_TUPLE || a->kind == EX_LIST) {
    diag_error(a->pos, "E_ARG", "%s takes a single dim", what);
    return false;
  }
  if (!tc_dims_arg(c, a, rank, &m, what))
    return false;
  *dim = __builtin_ctz(m);
  return true;
}

bool tc_bool_arg(TcCtx *c, Expr *a, bool *out, const char *what) {
  if (a->kind != EX_BOOL) {
    diag_error(a->pos, "E_ARG", "%s is true or false", what);
    return false;
  }
  *out = a->ival != 0;
  return true;
}

bool tc_const_int_arg(TcCtx *c, Expr *a, int64_t *v, const char *what) {
  if (a->kind == EX_INT)   /* any size: the caller checks the range */
    return tc_const_int(c, a, v);
  Type t = tc_expr(c, a);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_ARRAY || t.rank != 0 || !t.weak || t.dtype != DT_I32) {
    diag_error(a->pos, "E_ARG", "%s must be a compile-time integer (a literal, a const or arithmetic on them), not %s",
               what, t.kind == TY_ARRAY ? ty_str(c->mesh, &t) : "this");
    return false;
  }
  return tc_const_int(c, a, v);
}

bool tc_count_arg(TcCtx *c, Expr *a, int64_t *v, const char *what) {
  if (!tc_const_int_arg(c, a, v, what))
    return false;
  if (*v < 1 || *v > 2147483647LL) {
    diag_error(a->pos, "E_ARG", "%s must be 1 to 2147483647 (an i32 index), not %lld", what,
               (long long)*v);
    return false;
  }
  return true;
}

bool tc_type_arg(TcCtx *c, Expr *a, Type *out, const char *what) {
  if (a->kind != EX_TYPE) {
    diag_error(a->pos, "E_ARG", "%s: expected a type here, e.g. f32[8@X,4]", what);
    return false;
  }
  return tc_resolve_type(c, a->type, out);
}

bool tc_string_arg(TcCtx *c, Expr *a, const char *what) {
  if (a->kind != EX_STRING) {
    diag_error(a->pos, "E_ARG", "%s: expected a string literal", what);
    return false;
  }
  tc_expr(c, a);
  return true;
}

bool tc_scalar_value(TcCtx *c, Expr *v, DType dt, const char *what, bool allow_v) {
  Type t = tc_expr(c, v);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_ARRAY || t.rank != 0) {
    diag_error(v->pos, "E_SHAPE", "%s must be a scalar, not %s", what, TS(&t));
    return false;
  }
  if (t.U) {
    Type r = t;
    r.U &= c->manual;
    diag_error(v->pos, "E_UR", "%s is unreduced (%s); reduce it first: reshard(x, %s)", what, TS(&t), TS(&r));
    return false;
  }
  if (t.V && !allow_v) {
    diag_error(v->pos, "E_VMA",
               "%s varies across devices (%s); it must be the same on every device: make it invariant with a "
               "collective (psum, pmax, ...) over %s",
               what, TS(&t), ty_axes_str(c->mesh, t.V));
    return false;
  }
  if (!t.weak && t.dtype != dt) {
    diag_error(v->pos, "E_DTYPE", "%s is %s but %s is needed; convert with cast(x, %s)", what, TS(&t),
               ty_dtype_name(dt), ty_dtype_name(dt));
    return false;
  }
  if (t.weak && ty_is_float(t.dtype) && !ty_is_float(dt)) {
    diag_error(v->pos, "E_DTYPE", "%s is a float but the array is %s", what, ty_dtype_name(dt));
    return false;
  }
  return true;
}

/* The annotation as an out_sharding inside a manual body: its manual
 * states come from the operand (V, U, R), as the annotation fixes only the
 * explicit axes there. Returns NULL when there is no annotation. */
const Type *tc_out_annot(TcCtx *c, const Type *annot, AxisSet V, AxisSet U, AxisSet R, Type *buf) {
  if (!annot)
    return NULL;
  *buf = *annot;
  if (c->annot_v_free)
    tc_manual_states_from(c, buf, V, U, R);
  return buf;
}
