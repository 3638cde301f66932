/* op_collective.c: the collectives family: the manual collectives and
 * casts (psum pmax pmin pmean all_gather psum_scatter all_to_all ppermute
 * axis_index pcast; typing-rules 2.3, 4.3), reshard (1.12), and the
 * collectives and block moves the partitioner's reshard planner inserts
 * (reshard.c): all_reduce, all_gather, reduce_scatter, all_to_all,
 * ppermute, permute, slice_block, embed_block, zero_unless_first.
 *
 * For each: its typing and lowering (builtins), its transpose (4.3: psum
 * <-> pvary, all_gather <-> psum_scatter, all_to_all with split and concat
 * swapped, ppermute with the inverse shift), its C (runtime/collectives.c)
 * and the bytes one rank sends, with the formulas of the runtime's trace,
 * so `shdc explain` and SHD_TRACE agree.
 */
#include <math.h>

#include "ops.h"
#include "../runtime/collectives.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname

enum { C_PSUM, C_PMAX, C_PMIN, C_PMEAN, C_ALL_GATHER, C_PSUM_SCATTER, C_ALL_TO_ALL, C_PPERMUTE, C_AXIS_INDEX,
       C_PCAST, C_RESHARD };

/* The collectives only manual code writes; the others are the core
 * vocabulary the reshard planner emits (shdc.h). */
enum {
  IR_PPERMUTE = IR_BASE_COLLECTIVE,   /* attr shift */
  IR_AXIS_INDEX,                      /* group index over axes, i32 */
};

static bool is_array(const Value *v) { return v->type.rank > 0; }

/* ---- typing ------------------------------------------------------------------------- */

static AxisSet axes_set(const int *axes, int n) {
  AxisSet s = 0;
  for (int i = 0; i < n; i++)
    s |= 1u << axes[i];
  return s;
}

static int64_t axes_size(TcCtx *c, const int *axes, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    p *= c->mesh->sizes[axes[i]];
  return p;
}

typedef enum { ST_V, ST_U, ST_R, ST_I, ST_MIXED } AxisState;

static const char *state_name(AxisState s) {
  static const char *n[] = {"varying", "unreduced", "reduced", "invariant", "mixed"};
  return n[s];
}

static AxisState state_of(const Type *t, AxisSet a) {
  if ((t->V & a) == a) return ST_V;
  if ((t->U & a) == a) return ST_U;
  if ((t->R & a) == a) return ST_R;
  if (!((t->V | t->U | t->R) & a)) return ST_I;
  return ST_MIXED;
}

static bool same_state(TcCtx *c, Expr *e, const Type *x, AxisSet a, AxisState *st) {
  *st = state_of(x, a);
  if (*st != ST_MIXED)
    return true;
  Str parts = {0};
  AxisSet inv = a & ~(x->V | x->U | x->R);
  struct { AxisSet set; const char *name; } st_[4] = {
      {x->V & a, "varying"}, {x->U & a, "unreduced"}, {x->R & a, "reduced"}, {inv, "invariant"}};
  for (int k = 0; k < 4; k++)
    if (st_[k].set)
      str_printf(&parts, "%s%s %s", parts.len ? ", " : "", ty_axes_str(c->mesh, st_[k].set), st_[k].name);
  diag_error(e->pos, "E_PCAST",
             "%s over (%s): in %s the axes are in different states (%s), and one %s must name axes in one state; "
             "make them agree first (e.g. pcast(x, %s, to=varying) for invariant axes), or call %s once per state",
             e->callee->str, ty_axes_str(c->mesh, a), TS(x), str_cstr(&parts), e->callee->str,
             inv ? ty_axes_arg(c->mesh, inv) : "AXES", e->callee->str);
  free(parts.buf);
  return false;
}

static bool dim_kw(TcCtx *c, Expr *kw, int rank, int *dim, const char *name, const char *what) {
  int64_t k = 0;
  if (kw && !tc_const_int(c, kw, &k))
    return false;
  if (k < -rank || k >= rank) {
    diag_error(kw ? kw->pos : (Pos){0}, "E_ARG",
               "%s: %s=%lld is out of range for rank %d; dims are 0..%d, or negative from the end", what, name,
               (long long)k, rank, rank - 1);
    return false;
  }
  *dim = (int)(k < 0 ? k + rank : k);
  return true;
}

/* A collective along a dim that explicit axes also shard would interleave
 * the wrong blocks. */
static bool dim_unsharded(TcCtx *c, Expr *e, const Type *x, int d) {
  if (!x->spec[d].n)
    return true;
  diag_error(e->pos, "E_AXIS",
             "%s along dim %d of %s: that dim is also sharded over explicit axis %s; reshard it to replicated over "
             "%s first",
             e->callee->str, d, TS(x), ty_spec_str(c->mesh, x->spec[d]) + 1, ty_spec_str(c->mesh, x->spec[d]) + 1);
  return false;
}

/* ---- the collectives ------------------------------------------------------------------ */

/* Operand text for a message: the user's own expression when it is short
 * and on one line, parenthesised where an operator follows; else `x`. */
static const char *operand_text(const Expr *x, bool paren) {
  const char *src = diag_expr_source(x);
  if (!src || strlen(src) > 60 || strchr(src, '\n'))
    return "x";
  return paren && strpbrk(src, " +-*/@<>=!") ? arena_printf("(%s)", src) : src;
}

/* psum of an invariant value: every device adds the same value |a| times,
 * which is seldom what was meant ([W_PSUM_INVARIANT]); a constant, as
 * psum(1, X) for the axis size (JAX's idiom), is meant. */
static void warn_psum_invariant(TcCtx *c, Expr *e, const TcInfo *info, const Type *x, AxisSet a) {
  if (!info->x || (info->x->ty && info->x->ty->weak) || info->x->kind == EX_INT || info->x->kind == EX_FLOAT)
    return;
  long long n = (long long)info->count;
  const char *ax = ty_axes_str(c->mesh, a), *v = operand_text(info->x, false);
  diag_warning(e->pos, "W_PSUM_INVARIANT",
               "psum of `%s` (%s), which is invariant over %s (every device holds the same value), multiplies it by "
               "%lld, the number of devices along %s; if the value is already the total, drop the psum; if the "
               "product is meant, write `%s * %lld`; if each device was to add its own part, compute the part from "
               "varying values",
               v, TS(x), ax, n, ax, operand_text(info->x, true), n);
  Pos from, to;
  const char *src = diag_expr_source(info->x);
  if (src && diag_expr_range(e->pos, &from, &to))
    diag_fix_replace(from, to, src, arena_printf("drop the psum: %s is already the same on every device", v));
}

static Type check_reduce_collective(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a) {
  AxisState st;
  if (!same_state(c, e, &x, a, &st))
    return ty_error();
  int code = e->bi->code;
  const char *name = e->callee->str;
  info->redop = code == C_PMAX ? RED_MAX : code == C_PMIN ? RED_MIN : RED_SUM;
  info->scale_by_count = code == C_PMEAN;
  info->count = (double)axes_size(c, info->axes, info->naxes);
  /* As JAX: psum and pmean count bools as i32, and pmean divides an
   * integer sum into f32. info->dtype is the dtype the reduction runs in. */
  info->dtype = x.dtype == DT_BOOL && code != C_PMAX && code != C_PMIN ? DT_I32 : x.dtype;
  Type out = x;
  out.dtype = code == C_PMEAN && !ty_is_float(x.dtype) ? DT_F32 : info->dtype;
  switch (st) {
  case ST_V:
    out.V &= ~a;
    return out;
  case ST_I:
    /* Every device holds the same value: the sum is x * |a|, max is x. */
    info->psum_invariant = (int)info->count;
    if (code == C_PSUM)
      warn_psum_invariant(c, e, info, &x, a);
    return out;
  case ST_U:
    if (code != C_PSUM && code != C_PMEAN) {
      diag_error(e->pos, "E_UR",
                 "%s of %s: the value is unreduced (a pending sum) over %s, and the %s of the pieces is not the %s "
                 "of the sum; use psum",
                 name, TS(&x), ty_axes_str(c->mesh, a), name + 1, name + 1);
      return ty_error();
    }
    out.U &= ~a;
    return out;
  case ST_R:
    diag_error(e->pos, "E_UR",
               "%s of %s: the value is reduced over %s (the same on every device, its gradient a pending sum), "
               "which %s does not take; %s",
               name, TS(&x), ty_axes_str(c->mesh, a), name,
               code == C_PSUM || code == C_PMEAN
                   ? arena_printf("to combine the copies, pcast(x, %s, to=varying) first", ty_axes_arg(c->mesh, a))
                   : "the value is already the same everywhere: drop the collective");
    return ty_error();
  default:
    return ty_error();
  }
}

static bool needs_varying(TcCtx *c, Expr *e, const Type *x, AxisSet a) {
  if ((x->U | x->R) & a) {
    diag_error(e->pos, "E_UR", "%s of %s: the value is %s over %s; %s", e->callee->str, TS(x),
               (x->U & a) ? "unreduced" : "reduced", ty_axes_str(c->mesh, (x->U | x->R) & a),
               (x->U & a) ? "reduce it with psum or psum_scatter first" : "pcast it to varying first");
    return false;
  }
  return true;
}

static Type check_all_gather(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a, Expr **kw) {
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "all_gather needs an array, not the scalar %s; reshape(x, [1]) first", TS(&x));
    return ty_error();
  }
  if (!dim_kw(c, kw[0], x.rank, &info->dim, "dim", "all_gather") || !dim_unsharded(c, e, &x, info->dim))
    return ty_error();
  info->pcast_to = -1;
  if (kw[1]) {
    const char *to = kw[1]->kind == EX_NAME ? kw[1]->str : "";
    if (!strcmp(to, "varying"))
      info->pcast_to = -1;
    else if (!strcmp(to, "invariant") || !strcmp(to, "invarying"))
      info->pcast_to = PCAST_VARYING; /* marks the invariant form */
    else if (!strcmp(to, "reduced"))
      info->pcast_to = PCAST_REDUCED;
    else {
      diag_error(kw[1]->pos, "E_ARG", "all_gather: to= is varying, invariant or reduced");
      return ty_error();
    }
  }
  Type out = x;
  out.shape[info->dim] = ty_size_mul(out.shape[info->dim], axes_size(c, info->axes, info->naxes));
  if (info->pcast_to == PCAST_REDUCED) {
    if (!needs_varying(c, e, &x, a))
      return ty_error();
    if ((x.V & a) != a) {
      const char *inv = ty_axes_str(c->mesh, a & ~x.V);
      diag_error(e->pos, "E_VMA",
                 "all_gather(..., to=reduced) of %s: every named axis must be varying (the pieces to gather), but "
                 "the value is invariant over %s; gather only the varying axes, or pcast(x, %s, to=varying) first if "
                 "the copies are the pieces",
                 TS(&x), inv, ty_axes_arg(c->mesh, a & ~x.V));
      return ty_error();
    }
    out.V &= ~a;
    out.R |= a;
    return out;
  }
  if (!needs_varying(c, e, &x, a))
    return ty_error();
  if (info->pcast_to == PCAST_VARYING)
    out.V &= ~a;  /* invariant result */
  else
    out.V |= a;   /* auto-pvary of invariant axes; the result stays varying */
  return out;
}

static Type check_psum_scatter(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a, Expr **kw) {
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "psum_scatter needs an array, not the scalar %s; use psum for a scalar", TS(&x));
    return ty_error();
  }
  if (!dim_kw(c, kw[0], x.rank, &info->dim, "dim", "psum_scatter") || !dim_unsharded(c, e, &x, info->dim))
    return ty_error();
  int64_t g = axes_size(c, info->axes, info->naxes);
  if (x.shape[info->dim] % g) {
    diag_error(e->pos, "E_SHAPE",
               "psum_scatter: dim %d of %s has size %lld, which does not divide into %lld blocks; scatter along a dim "
               "whose size is a multiple of %lld",
               info->dim, TS(&x), (long long)x.shape[info->dim], (long long)g, (long long)g);
    return ty_error();
  }
  AxisState st;
  if (!same_state(c, e, &x, a, &st))
    return ty_error();
  Type out = x;
  out.shape[info->dim] /= g;
  if (st == ST_U) {
    out.U &= ~a;
    out.V |= a;
    return out;
  }
  if (st == ST_R) {
    diag_error(e->pos, "E_UR", "psum_scatter of %s: the value is reduced over %s; pcast it to varying first", TS(&x),
               ty_axes_str(c->mesh, a));
    return ty_error();
  }
  out.V |= a;
  return out;
}

static Type check_all_to_all(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a, Expr **kw) {
  if (!kw[0] || !kw[1]) {
    diag_error(e->pos, "E_ARG", "all_to_all needs split= and concat=: all_to_all(x, AXIS, split=0, concat=1)");
    return ty_error();
  }
  if (x.rank == 0) {
    diag_error(e->pos, "E_SHAPE", "all_to_all needs an array, not the scalar %s; reshape(x, [1]) first", TS(&x));
    return ty_error();
  }
  if (!dim_kw(c, kw[0], x.rank, &info->dim, "split", "all_to_all") ||
      !dim_kw(c, kw[1], x.rank, &info->dim2, "concat", "all_to_all") || !dim_unsharded(c, e, &x, info->dim) ||
      !dim_unsharded(c, e, &x, info->dim2) || !needs_varying(c, e, &x, a))
    return ty_error();
  int64_t g = axes_size(c, info->axes, info->naxes);
  if (x.shape[info->dim] % g) {
    diag_error(e->pos, "E_SHAPE",
               "all_to_all: split dim %d of %s has size %lld, which does not divide into %lld blocks; split a dim "
               "whose size is a multiple of %lld",
               info->dim, TS(&x), (long long)x.shape[info->dim], (long long)g, (long long)g);
    return ty_error();
  }
  Type out = x;
  out.shape[info->dim] /= g;
  out.shape[info->dim2] = ty_size_mul(out.shape[info->dim2], g);
  out.V |= a;
  return out;
}

/* What to write instead of a pcast the table of 2.3 does not have. */
static const char *pcast_fix(AxisState st, const char *to, const char *ax) {
  if (st == ST_U)
    return arena_printf("reduce the pending sum first with psum(x, %s) or psum_scatter", ax);
  if (st == ST_V && !strcmp(to, "varying"))
    return arena_printf("the value is already varying over %s: drop the pcast", ax);
  if (st == ST_V)
    return arena_printf("a varying value has no single value to mark reduced: gather it with all_gather(x, %s, "
                        "dim=k, to=reduced), or psum it and pcast the invariant result", ax);
  if (st == ST_I)
    return arena_printf("an invariant value is not a pending sum of pieces: pcast(x, %s, to=varying) first if "
                        "the sum of the copies is meant", ax);
  if (!strcmp(to, "reduced"))
    return arena_printf("the value is already reduced over %s: drop the pcast", ax);
  return arena_printf("pcast(x, %s, to=varying) first (reduced->varying), then to=unreduced", ax);
}

static Type check_pcast(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a, Expr **kw) {
  if (!kw[0] || kw[0]->kind != EX_NAME) {
    diag_error(e->pos, "E_ARG", "pcast needs to=varying, to=unreduced or to=reduced");
    return ty_error();
  }
  const char *to = kw[0]->str;
  AxisState st;
  if (!same_state(c, e, &x, a, &st))
    return ty_error();
  Type out = x;
  const char *ax = ty_axes_arg(c->mesh, a);
  if (!strcmp(to, "varying")) {
    info->pcast_to = PCAST_VARYING;
    if (st == ST_I) {
      out.V |= a;
      return out;
    }
    if (st == ST_R) {
      out.R &= ~a;
      out.V |= a;
      return out;
    }
  } else if (!strcmp(to, "unreduced")) {
    info->pcast_to = PCAST_UNREDUCED;
    if (st == ST_V) {
      out.V &= ~a;
      out.U |= a;
      return out;
    }
  } else if (!strcmp(to, "reduced")) {
    info->pcast_to = PCAST_REDUCED;
    if (st == ST_I) {
      out.R |= a;
      return out;
    }
  } else {
    diag_error(kw[0]->pos, "E_ARG", "pcast: to= is varying, unreduced or reduced, not '%s'", to);
    return ty_error();
  }
  diag_error(e->pos, "E_PCAST",
             "unsupported pcast of %s over %s from %s to %s (the casts are invariant->varying, reduced->varying, "
             "varying->unreduced and invariant->reduced); %s",
             TS(&x), ax, state_name(st), to, pcast_fix(st, to, ax));
  return ty_error();
}

static Type check_collective(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  int code = e->bi->code;
  const char *name = e->callee->str;
  const char *kwn[2] = {0, 0};
  int nkw = 0;
  switch (code) {
  case C_ALL_GATHER: kwn[0] = "dim"; kwn[1] = "to"; nkw = 2; break;
  case C_PSUM_SCATTER: kwn[0] = "dim"; nkw = 1; break;
  case C_ALL_TO_ALL: kwn[0] = "split"; kwn[1] = "concat"; nkw = 2; break;
  case C_PPERMUTE: kwn[0] = "shift"; nkw = 1; break;
  case C_PCAST: kwn[0] = "to"; nkw = 1; break;
  default: break;
  }
  Expr *pos[2], *kw[2];
  int n;
  bool ok = true;
  tc_split_args(e, pos, code == C_AXIS_INDEX ? 1 : 2, &n, kw, kwn, nkw, &ok);
  if (!ok)
    return ty_error();
  if (code == C_AXIS_INDEX) {
    if (n != 1) {
      diag_error(e->pos, "E_ARG", "usage: axis_index(AXIS)");
      return ty_error();
    }
    if (!tc_axes_arg(c, pos[0], info->axes, &info->naxes, true, name))
      return ty_error();
    Type t = ty_scalar(DT_I32);
    t.V = axes_set(info->axes, info->naxes);
    return t;
  }
  if (n != 2) {
    diag_error(e->pos, "E_ARG", "usage: %s(x, AXES%s)", name,
               code == C_ALL_GATHER ? ", dim=k" : code == C_PSUM_SCATTER ? ", dim=k"
               : code == C_ALL_TO_ALL ? ", split=i, concat=j" : code == C_PPERMUTE ? ", shift=s"
               : code == C_PCAST ? ", to=varying" : "");
    return ty_error();
  }
  Type x = tc_expr(c, pos[0]);
  if (!tc_axes_arg(c, pos[1], info->axes, &info->naxes, true, name) || x.kind == TY_ERROR)
    return ty_error();
  if (x.kind != TY_ARRAY) {
    diag_error(pos[0]->pos, "E_ARG", "%s: expected an array value", name);
    return ty_error();
  }
  info->x = pos[0];
  if (x.weak) {
    x.weak = false;
  }
  AxisSet a = axes_set(info->axes, info->naxes);
  if (code != C_PCAST && !tc_check_diverge(c, e))
    return ty_error();
  switch (code) {
  case C_PSUM: case C_PMAX: case C_PMIN: case C_PMEAN:
    return check_reduce_collective(c, e, info, x, a);
  case C_ALL_GATHER:
    return check_all_gather(c, e, info, x, a, kw);
  case C_PSUM_SCATTER:
    return check_psum_scatter(c, e, info, x, a, kw);
  case C_ALL_TO_ALL:
    return check_all_to_all(c, e, info, x, a, kw);
  case C_PPERMUTE: {
    int64_t s;
    if (!kw[0]) {
      diag_error(e->pos, "E_ARG", "ppermute needs shift=: ppermute(x, AXIS, shift=1)");
      return ty_error();
    }
    if (!tc_const_int(c, kw[0], &s) || !needs_varying(c, e, &x, a))
      return ty_error();
    int64_t g = axes_size(c, info->axes, info->naxes);
    info->shift = (int)(((s % g) + g) % g);
    Type out = x;
    out.V |= a;
    return out;
  }
  case C_PCAST:
    return check_pcast(c, e, info, x, a, kw);
  default:
    diag_ice("unknown builtin %d", code);
  }
}

/* ---- reshard (1.12) ------------------------------------------------------ */

#define fail rule_fail

static char manual_state(const Type *t, int a) {
  AxisSet b = 1u << a;
  return (t->V & b) ? 'V' : (t->U & b) ? 'U' : (t->R & b) ? 'R' : 'I';
}

/* The pcast or collective that takes the first manual axis whose state
 * differs from x's to target's state (typing-rules 2.3). */
static const char *manual_change_fix(RuleCtx *c, const Type *x, const Type *target) {
  for (int a = 0; a < c->mesh->naxes; a++) {
    if (!(c->manual & (1u << a)))
      continue;
    char f = manual_state(x, a), t = manual_state(target, a);
    if (f == t)
      continue;
    const char *n = c->mesh->names[a];
    char key[3] = {f, t, 0};
    static const struct { const char *key, *fix; } fixes[] = {
        /* not all_gather(..., to=invariant): it changes the shape, which reshard keeps */
        {"VI", "psum(x, %s) to sum the devices' values"}, {"VU", "pcast(x, %s, to=unreduced)"},
        {"VR", "all_gather(x, %s, dim=k, to=reduced)"}, {"IV", "pcast(x, %s, to=varying)"},
        {"IR", "pcast(x, %s, to=reduced)"}, {"UI", "psum(x, %s)"}, {"UV", "psum_scatter(x, %s, dim=k)"},
        {"RV", "pcast(x, %s, to=varying)"},
    };
    for (size_t i = 0; i < sizeof fixes / sizeof *fixes; i++)
      if (!strcmp(fixes[i].key, key))
        return arena_printf(arena_printf("for axis %%s write %s", fixes[i].fix), n, n, n);
    return arena_printf("no single pcast or collective takes axis %s from %s to %s (docs/manual.md, section 4)", n,
                        f == 'I' ? "invariant" : f == 'U' ? "unreduced" : "reduced",
                        t == 'I' ? "invariant" : t == 'U' ? "unreduced" : "reduced");
  }
  return "use pcast or a collective";
}

bool rule_reshard(RuleCtx *c, const Type *x, const Type *target, Type *out) {
  if (x->dtype != target->dtype)
    return fail(c, "E_DTYPE", "reshard keeps the dtype: %s to %s; use cast(x, %s) to convert", TS(x), TS(target),
                ty_dtype_name(target->dtype));
  bool same = x->rank == target->rank;
  for (int d = 0; same && d < x->rank; d++)
    same = x->shape[d] == target->shape[d];
  if (!same)
    return fail(c, "E_SHAPE", "reshard keeps the shape: %s to %s; use reshape to change it", TS(x), TS(target));
  AxisSet man = c->manual;
  if ((x->V ^ target->V) || ((x->U ^ target->U) & man) || ((x->R ^ target->R) & man))
    return fail(c, "E_PCAST",
                "reshard of %s to %s changes the state of a manual axis, which reshard cannot do (it moves data "
                "along explicit axes only); %s",
                TS(x), TS(target), manual_change_fix(c, x, target));
  *out = *target;
  out->weak = false;
  return true;
}

/* A reshard that moves nothing ([W_RESHARD_ROUNDTRIP]): to the value's own
 * type, or of a reshard's result straight back to its operand's type. */
static void warn_reshard(TcCtx *c, Expr *e, Expr *arg, const Type *x, const Type *out) {
  Type xt = *x, ot = *out;
  if (x->weak || x->kind != TY_ARRAY)
    return;
  xt.weak = ot.weak = false;
  Pos from, to;
  bool placed = diag_expr_range(e->pos, &from, &to);
  if (ty_equal(&xt, &ot)) {
    diag_warning(e->pos, "W_RESHARD_ROUNDTRIP",
                 "reshard of %s to %s, its own type, moves nothing; drop the reshard", TS(x), TS(out));
    const char *src = diag_expr_source(arg);
    if (src && placed)
      diag_fix_replace(from, to, src, "drop the reshard");
    return;
  }
  const TcInfo *in = arg->kind == EX_CALL && arg->bi == e->bi ? arg->tc : NULL;
  const Expr *orig = in ? in->x : NULL;
  if (!orig || !orig->ty || orig->ty->weak)
    return;
  Type o = *orig->ty;
  o.weak = false;
  if (!ty_equal(&o, &ot))
    return;
  diag_warning(e->pos, "W_RESHARD_ROUNDTRIP",
               "reshard of %s to %s and straight back to %s, its own type: the data moves twice and ends where it "
               "was; use %s as it is",
               operand_text(orig, false), TS(x), TS(out), operand_text(orig, false));
  const char *src = diag_expr_source(orig);
  if (src && placed)
    diag_fix_replace(from, to, src, "drop both reshards");
}

static Type check_reshard(TcCtx *c, Expr *e, const Type *annot);

const Expr *op_reshard_operand(const Expr *e) {
  return e && e->kind == EX_CALL && e->bi && e->bi->check == check_reshard && e->tc ? ((const TcInfo *)e->tc)->x
                                                                                   : NULL;
}

static Type check_reshard(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "reshard(x, TYPE)");
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], "reshard");
  Type target;
  if (!tc_type_arg(c, pos[1], &target, "reshard") || x.kind == TY_ERROR)
    return ty_error();
  info->x = pos[0];
  RuleCtx r = tc_rule(c, e->pos, "reshard");
  Type out;
  if (x.weak && x.rank == 0) {
    x.dtype = target.dtype;
  }
  if (!rule_reshard(&r, &x, &target, &out))
    return ty_error();
  info->type = out;
  if (!(c->fn && c->fn->generic))   /* in a generic function the types are the instance's, not the text's */
    warn_reshard(c, e, pos[0], &x, &out);
  return out;
}

/* ---- lowering ---------------------------------------------------------------------- */

static void set_axes(Inst *in, const TcInfo *info) {
  in->naxes = info->naxes;
  memcpy(in->axes, info->axes, sizeof in->axes);
}

static AxisSet info_axes(const TcInfo *info) {
  AxisSet s = 0;
  for (int i = 0; i < info->naxes; i++)
    s |= 1u << info->axes[i];
  return s;
}

static Value *scale(Lower *L, Pos pos, Value *x, double factor, Type t) {
  Value *args[2] = {x, lower_const(L, pos, t.dtype, factor)};
  Inst *in = lower_emit(L, IR_BINARY, pos, 2, args, t);
  in->fn = BIN_MUL;
  return in->results[0];
}

static Value *convert(Lower *L, Pos pos, Value *x, DType dt) {
  if (x->type.dtype == dt)
    return x;
  Type t = x->type;
  t.dtype = dt;
  return lower_emit1(L, IR_CAST, pos, 1, &x, t);
}

/* psum, pmax, pmin, pmean: the all-reduce runs in info->dtype (bools are
 * counted as i32), pmean then divides in the result's float dtype. Of an
 * invariant value psum is x * |a|, the others x itself. */
static Value *lower_reduce_collective(Lower *L, Expr *e, Value *x) {
  TcInfo *info = e->tc;
  Type t = *e->ty, r = t;
  r.dtype = info->dtype;
  x = convert(L, e->pos, x, info->dtype);
  Value *y = x;
  if (info->psum_invariant && e->bi->code == C_PSUM) {
    y = scale(L, e->pos, x, info->count, r);
  } else if (!info->psum_invariant) {
    Inst *in = lower_emit(L, IR_ALL_REDUCE, e->pos, 1, &x, r);
    in->fn = info->redop;
    set_axes(in, info);
    y = in->results[0];
  }
  y = convert(L, e->pos, y, t.dtype);
  if (e->bi->code == C_PMEAN && !info->psum_invariant)
    y = scale(L, e->pos, y, 1.0 / info->count, t);
  return y;
}

static Value *lower_collective(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = info->x ? lower_expr(L, info->x) : NULL;  /* axis_index has no operand */
  Type t = *e->ty;
  AxisSet a = info_axes(info);
  Inst *in;
  switch (e->bi->code) {
  case C_PSUM: case C_PMAX: case C_PMIN: case C_PMEAN:
    return lower_reduce_collective(L, e, x);
  case C_ALL_GATHER:
  case C_PSUM_SCATTER:
  case C_ALL_TO_ALL:
  case C_PPERMUTE: {
    /* The auto-pvary of invariant axes (2.3). */
    AxisSet inv = a & ~(x->type.V | x->type.U | x->type.R);
    if (inv) {
      Type vt = x->type;
      vt.V |= inv;
      x = lower_pcast(L, e->pos, x, PCAST_VARYING, inv, vt);
    }
    Opcode op = e->bi->code == C_ALL_GATHER ? IR_ALL_GATHER : e->bi->code == C_PSUM_SCATTER ? IR_REDUCE_SCATTER
                : e->bi->code == C_ALL_TO_ALL ? IR_ALL_TO_ALL : IR_PPERMUTE;
    in = lower_emit(L, op, e->pos, 1, &x, t);
    set_axes(in, info);
    in->dim = info->dim;
    in->dim2 = info->dim2;
    in->shift = info->shift;
    in->fn = RED_SUM;
    return in->results[0];
  }
  case C_AXIS_INDEX:
    in = lower_emit(L, IR_AXIS_INDEX, e->pos, 0, NULL, t);
    set_axes(in, info);
    return in->results[0];
  case C_PCAST:
    in = lower_emit(L, IR_PCAST, e->pos, 1, &x, t);
    in->fn = info->pcast_to;
    set_axes(in, info);
    return in->results[0];
  default:
    diag_ice("collective %d", e->bi->code);
  }
}


static Value *lower_reshard(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_as(L, info->x, e->ty->dtype);
  if (ty_equal(&x->type, e->ty))
    return x;
  return lower_emit1(L, IR_RESHARD, e->pos, 1, &x, *e->ty);
}

/* ---- transposes (4.3) -------------------------------------------------------------- */

static Inst *collective(AD *a, int op, Value *g, const Inst *like, Type t) {
  Inst *c = ad_emit(a, op, 1, &g, t);
  c->naxes = like->naxes;
  memcpy(c->axes, like->axes, sizeof c->axes);
  c->fn = RED_SUM;
  return c;
}

static AxisSet inst_axes(const Inst *in) {
  AxisSet s = 0;
  for (int i = 0; i < in->naxes; i++)
    s |= 1u << in->axes[i];
  return s;
}

/* Collectives and casts transpose as in typing-rules 4.3. */
static void vjp_manual(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  Type X = px->type, ct = ty_ct(&X);
  AxisSet ax = inst_axes(in);
  switch (in->op) {
  case IR_PCAST: {
    int to;
    if (in->fn == PCAST_VARYING && !(X.R & ax)) {
      ad_add_ct(a, px, collective(a, IR_ALL_REDUCE, g, in, ct)->results[0]);  /* pvary -> psum */
      return;
    }
    to = in->fn == PCAST_VARYING ? PCAST_UNREDUCED : in->fn == PCAST_UNREDUCED ? PCAST_VARYING : -1;
    if (to < 0) {
      ad_add_ct(a, px, collective(a, IR_ALL_REDUCE, g, in, ct)->results[0]);  /* reduced -> unreduced psum */
      return;
    }
    Inst *c = collective(a, IR_PCAST, g, in, ct);
    c->fn = to;
    ad_add_ct(a, px, c->results[0]);
    return;
  }
  case IR_ALL_REDUCE:
    if (in->fn == RED_SUM) {
      Inst *c = collective(a, IR_PCAST, g, in, ct);
      c->fn = (X.U & ax) ? PCAST_REDUCED : PCAST_VARYING;
      ad_add_ct(a, px, c->results[0]);
      return;
    } else {
      /* pmax/pmin: the devices holding the extreme value share the
       * cotangent. */
      Value *x = ad_primal(a, px), *y = ad_primal(a, in->results[0]);
      Value *hit = ad_bin(a, BIN_EQ, x, y);
      Type ht = hit->type;
      ht.dtype = X.dtype;
      Value *m = ad_emit1(a, IR_CAST, 1, &hit, ht);
      Type ct_t = m->type;
      ct_t.V &= ~ax;
      Value *cnt = collective(a, IR_ALL_REDUCE, m, in, ct_t)->results[0];
      Value *share = ad_bin(a, BIN_DIV, g, cnt);
      Type vt = share->type;
      vt.V |= ax;
      Inst *pv = collective(a, IR_PCAST, share, in, vt);
      pv->fn = PCAST_VARYING;
      ad_add_ct(a, px, ad_bin(a, BIN_MUL, pv->results[0], m));
      return;
    }
  case IR_ALL_GATHER: {
    Type Y = in->results[0]->type;
    Opcode op = (Y.R & ax) || (Y.V & ax) ? IR_REDUCE_SCATTER : IR_SLICE_BLOCK;
    Inst *c = collective(a, op, g, in, ct);
    c->dim = in->dim;
    ad_add_ct(a, px, c->results[0]);
    return;
  }
  case IR_SLICE_BLOCK:    /* take the own block (I -> V): its transpose gathers (V -> I) */
  case IR_REDUCE_SCATTER: {
    Inst *c = collective(a, IR_ALL_GATHER, g, in, ct);
    c->dim = in->dim;
    ad_add_ct(a, px, c->results[0]);
    return;
  }
  case IR_ALL_TO_ALL: {
    Inst *c = collective(a, IR_ALL_TO_ALL, g, in, ct);
    c->dim = in->dim2;
    c->dim2 = in->dim;
    ad_add_ct(a, px, c->results[0]);
    return;
  }
  case IR_PPERMUTE: {
    int64_t n = 1;
    for (int i = 0; i < in->naxes; i++)
      n *= ad_mesh(a)->sizes[in->axes[i]];
    Inst *c = collective(a, IR_PPERMUTE, g, in, ct);
    c->shift = (int)((n - in->shift) % n);
    ad_add_ct(a, px, c->results[0]);
    return;
  }
  default:
    diag_ice("vjp_manual %s", ir_opname(in->op));
  }
}


/* reshard(src -> dst) transposes to reshard(ct(dst) -> ct(src)) (4.2):
 * ad_add_ct reshards the cotangent to ct(src). */
static void vjp_reshard(AD *a, Inst *in, Value *g) { ad_add_ct(a, in->args[0], g); }

static void part_reshard_inst(Part *p, Inst *in, Value **args) {
  part_put(p, in->results[0], part_to(p, in->pos, args[0], &in->results[0]->type));
}

/* ---- C and bytes -------------------------------------------------------------------- */

static const char *red_const(int fn) {
  static const char *n[] = {"SHD_SUM", "SHD_MAX", "SHD_MIN"};
  return n[fn];
}

static void emit_collective(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *r = in->results[0];
  const Type *t = &x->type;
  DType dt = t->dtype;
  const char *axes = emit_axes_lit(in->axes, in->naxes);
  switch (in->op) {
  case IR_ALL_REDUCE:
    if (is_array(r) && sched_result_kind(emit_module_of(e), in, 0) == EMIT_STEAL_OR_ALLOC && emit_can_steal(e, x, in)) {
      /* The operand dies here: reduce in its buffer when no view shares it. */
      emit_def_taken(e, r, x, in);
    } else if (is_array(r)) {
      emit_def_array(e, r, false);
      emit_line(e, "memcpy(%s, %s, %lld * sizeof(%s));", vname(r), vname(x), (long long)emit_local_count(e, t), ty_dtype_c(dt));
    } else {
      emit_line(e, "%s %s = %s;", ty_dtype_c(dt), vname(r), vname(x));
    }
    emit_line(e, "shd_all_reduce(%s, %lld, %s, %s, %s);", emit_addr(r), (long long)emit_local_count(e, t), emit_dtconst(dt),
         red_const(in->fn), axes);
    return;
  case IR_ALL_GATHER:
    emit_def_array(e, r, false);
    emit_line(e, "shd_all_gather(%s, %s, %s, %d, %s, %d, %s);", vname(x), vname(r), emit_dtconst(dt), t->rank,
         emit_shape_lit(e, t), in->dim, axes);
    return;
  case IR_REDUCE_SCATTER:
    emit_def_array(e, r, false);
    emit_line(e, "shd_reduce_scatter(%s, %s, %s, %s, %d, %s, %d, %s);", vname(x), vname(r), emit_dtconst(dt),
         red_const(in->fn), t->rank, emit_shape_lit(e, t), in->dim, axes);
    return;
  case IR_ALL_TO_ALL:
    emit_def_array(e, r, false);
    emit_line(e, "shd_all_to_all(%s, %s, %s, %d, %s, %d, %d, %s);", vname(x), vname(r), emit_dtconst(dt), t->rank,
         emit_shape_lit(e, t), in->dim, in->dim2, axes);
    return;
  case IR_PPERMUTE:
    if (is_array(r))
      emit_def_array(e, r, false);
    else
      emit_line(e, "%s %s;", ty_dtype_c(dt), vname(r));
    emit_line(e, "shd_ppermute(%s, %s, %lld * sizeof(%s), %d, %s);", emit_addr(x), emit_addr(r), (long long)emit_local_count(e, t),
         ty_dtype_c(dt), in->shift, axes);
    return;
  case IR_PERMUTE: {
    int n = 1;
    for (int a = 0; a < emit_mesh(e)->naxes; a++)
      n *= emit_mesh(e)->sizes[a];
    int *dest = arena_alloc(sizeof(int) * (size_t)n), *src = arena_alloc(sizeof(int) * (size_t)n);
    part_permute_tables(emit_mesh(e), t, &r->type, dest, src);
    Str ds = {0}, ss = {0};
    for (int i = 0; i < n; i++) {
      str_printf(&ds, "%s%d", i ? ", " : "", dest[i]);
      str_printf(&ss, "%s%d", i ? ", " : "", src[i]);
    }
    emit_def_array(e, r, false);
    emit_line(e, "{");
    emit_line(e, "  static const int dest[] = {%s}, src[] = {%s};", str_cstr(&ds), str_cstr(&ss));
    emit_line(e, "  shd_permute(%s, %s, %lld * sizeof(%s), dest[shd_world_rank()], src[shd_world_rank()]);", vname(x),
         vname(r), (long long)emit_local_count(e, t), ty_dtype_c(dt));
    emit_line(e, "}");
    free(ds.buf);
    free(ss.buf);
    return;
  }
  case IR_SLICE_BLOCK:
  case IR_EMBED_BLOCK:
    emit_def_array(e, r, in->op == IR_EMBED_BLOCK);
    emit_line(e, "shd_%s_block(%s, %s, sizeof(%s), %d, %s, %d, shd_group_size(%s), shd_group_index(%s));",
         in->op == IR_SLICE_BLOCK ? "slice" : "embed", vname(x), vname(r), ty_dtype_c(dt), t->rank, emit_shape_lit(e, t),
         in->dim, axes, axes);
    return;
  case IR_ZERO_UNLESS_FIRST:
    if (!is_array(r)) {
      emit_line(e, "%s %s = shd_group_index(%s) == 0 ? %s : 0;", ty_dtype_c(dt), vname(r), axes, vname(x));
      return;
    }
    emit_line(e, "%s *%s;", ty_dtype_c(dt), vname(r));
    emit_line(e, "if (shd_group_index(%s) == 0) {", axes);
    emit_line(e, "  %s = %s;", vname(r), vname(x));
    emit_line(e, "  shd_retain(%s);", vname(r));
    emit_line(e, "} else {");
    emit_line(e, "  %s = shd_zalloc(%lld * sizeof(%s));", vname(r), (long long)emit_local_count(e, &r->type), ty_dtype_c(dt));
    emit_line(e, "}");
    return;
  default:
    diag_ice("not a collective: %s", ir_opname(in->op));
  }
}


static void emit_axis_index(Emit *e, const Inst *in) {
  emit_line(e, "int32_t %s = shd_group_index(%s);", vname(in->results[0]), emit_axes_lit(in->axes, in->naxes));
}

static EmitResult result_view(const Module *mod, const Inst *in, int k) {
  return in->args[0]->type.rank ? EMIT_VIEW : EMIT_ALLOC;
}
static EmitResult result_steal(const Module *mod, const Inst *in, int k) { return EMIT_STEAL_OR_ALLOC; }
static EmitResult result_view_or_alloc(const Module *mod, const Inst *in, int k) { return EMIT_VIEW_OR_ALLOC; }

static int64_t group_size(const Module *mod, const Inst *in) {
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= mod->mesh.sizes[in->axes[i]];
  return g;
}

static int64_t local_bytes(const Module *mod, const Type *t) {
  return ty_local_count(&mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
}

/* ---- what a collective costs ------------------------------------------------------------- */

/* The bytes one rank sends when each of the g ranks of the group holds n
 * bytes: the runtime trace's formulas (runtime/collectives.c), which explain
 * predicts and reshard.c's search minimises. In 128 bits: (g - 1) n can
 * pass 2^63 although the result is below 2n. */
int64_t op_allreduce_bytes(int64_t n, int64_t g) { return (int64_t)((__int128)2 * (g - 1) * n / g); }
static int64_t all_gather_bytes(int64_t n, int64_t g) { return (g - 1) * n; }
static int64_t scatter_bytes(int64_t n, int64_t g) { return (int64_t)((__int128)(g - 1) * n / g); }
static int64_t whole_block_bytes(int64_t n, int64_t g) { return n; }

static int64_t ppermute_bytes(const Module *mod, const Inst *in) {
  int64_t g = group_size(mod, in);
  return (g == 1 || in->shift % g == 0) ? 0 : local_bytes(mod, &in->args[0]->type);
}

/* Ranks that keep their block send nothing; report the most any sends. */
static int64_t permute_bytes(const Module *mod, const Inst *in) {
  int w = 1;
  for (int a = 0; a < mod->mesh.naxes; a++)
    w *= mod->mesh.sizes[a];
  int *dest = arena_alloc(sizeof(int) * (size_t)w), *src = arena_alloc(sizeof(int) * (size_t)w);
  part_permute_tables(&mod->mesh, &in->args[0]->type, &in->results[0]->type, dest, src);
  for (int r = 0; r < w; r++)
    if (dest[r] != r)
      return local_bytes(mod, &in->args[0]->type);
  return 0;
}

/* The seconds of the runtime's algorithm for each collective, in the
 * latency-bandwidth (alpha-beta, plus gamma for local reductions) model,
 * for n bytes on each of G ranks (netmodel.c gives the link):
 *
 *   reduce-scatter    ring:                  (G-1)a + (G-1)/G n b + (G-1)/G n g
 *   all-reduce        n >= 32 MiB or bf16, ring: 2(G-1)a + 2(G-1)/G n b + (G-1)/G n g
 *                     n <= 8 KiB, MPI recursive doubling: log2(G) (a + n b + n g)
 *                     otherwise MPI (Rabenseifner): 2 log2(G) a + 2(G-1)/G n b + (G-1)/G n g
 *   all-gather        MPI: G n <= 64 KiB recursive doubling log2(G) a + (G-1) n b,
 *                     else ring (G-1) a + (G-1) n b
 *   all-to-all        MPI pairwise exchange: (G-1) a + (G-1)/G n b
 *   ppermute/permute  one exchange: a + n b
 *
 * log2 rounds up. */
#define AR_SMALL 8192.0
#define AG_SMALL 65536.0

static double log2_up(double g) { return g <= 1 ? 0 : ceil(log2(g)); }

double op_allreduce_seconds(const NetCost *c, double n, bool ring, const char **algo) {
  double G = c->G, f = (G - 1) / G;
  if (ring && n >= (double)SHD_AR_RING_MIN_BYTES) {   /* the runtime's crossover */
    *algo = "ring";
    return 2 * (G - 1) * c->a + 2 * f * n * c->b + f * n * c->g;
  }
  if (n <= AR_SMALL) {
    *algo = "recursive doubling";
    return log2_up(G) * (c->a + n * (c->b + c->g));
  }
  *algo = "Rabenseifner";
  return 2 * log2_up(G) * c->a + 2 * f * n * c->b + f * n * c->g;
}

/* bf16 always takes the ring (runtime/collectives.c: MPI has no bf16 sum). */
static double all_reduce_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  if (in->args[0]->type.dtype == DT_BF16) {
    double f = (c->G - 1) / c->G;
    *algo = "ring";
    return 2 * (c->G - 1) * c->a + 2 * f * c->n * c->b + f * c->n * c->g;
  }
  return op_allreduce_seconds(c, c->n, true, algo);
}

static double reduce_scatter_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = "ring";
  return (c->G - 1) * c->a + (c->G - 1) / c->G * c->n * (c->b + c->g);
}

static double all_gather_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = c->G * c->n <= AG_SMALL ? "recursive doubling" : "ring";
  return (c->G * c->n <= AG_SMALL ? log2_up(c->G) : c->G - 1) * c->a + (c->G - 1) * c->n * c->b;
}

static double all_to_all_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = "pairwise";
  return (c->G - 1) * c->a + (c->G - 1) / c->G * c->n * c->b;
}

static double exchange_seconds(const NetCost *c, const Inst *in, const char **algo) {
  *algo = "exchange";
  return c->sent ? c->a + c->n * c->b : 0;
}

/* ---- the IR text ------------------------------------------------------------------- */

static const char *red_variant(const Inst *in) { return ir_red_name(in->fn); }
static const char *const red_variants[] = {"sum", "max", "min", NULL};

static void print_axes(FILE *out, const Module *mod, const Inst *in) { ir_print_axes(out, mod, in); }

static void print_dim_axes(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d", in->dim);
  ir_print_axes(out, mod, in);
}

static void print_pcast(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " to=%s", in->fn == PCAST_VARYING ? "varying" : in->fn == PCAST_UNREDUCED ? "unreduced" : "reduced");
  ir_print_axes(out, mod, in);
}

static void print_all_to_all(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " split=%d concat=%d", in->dim, in->dim2);
  ir_print_axes(out, mod, in);
}

static void print_ppermute(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " shift=%d", in->shift);
  ir_print_axes(out, mod, in);
}

/* ---- the tables --------------------------------------------------------------------- */

#define COLL OPF_COLLECTIVE
/* ---- types from operands ---------------------------------------------------------- */

/* Collectives and casts move or combine blocks of one array: its dtype and
 * (but for the gathers, scatters, all-to-alls and block moves of manual
 * code, whose shapes are local) its shape; the states are the ones chosen.
 * A pcast moves nothing, so its dims keep their sharding; a ppermute keeps
 * the whole type; an axis index is an i32. */
static bool infer_same_shape(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && ir_infer_shape(out, &in->args[0]->type);
}

static bool infer_pcast(const Module *mod, const Inst *in, Type *out) {
  if (!infer_same_shape(mod, in, out))
    return false;
  for (int d = 0; d < out->rank; d++)
    out->spec[d] = in->args[0]->type.spec[d];
  return true;
}

static bool infer_same_rank(const Module *mod, const Inst *in, Type *out) {
  return in->nargs == 1 && ir_arg_is(in, 0, out->dtype) && in->args[0]->type.rank == out->rank;
}

static bool infer_ppermute(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1))
    return false;
  *out = in->args[0]->type;
  return true;
}

static bool infer_axis_index(const Module *mod, const Inst *in, Type *out) {
  Type s = ty_scalar(DT_I32);
  return in->nargs == 0 && ir_infer_shape(out, &s);
}

static const OpDef ops[] = {
    {.op = IR_RESHARD, .name = "reshard", .vjp = vjp_reshard, .partition = part_reshard_inst, .infer = infer_same_shape},
    {.op = IR_PCAST, .name = "pcast", .flags = OPF_RECOMPUTE, .print = print_pcast, .vjp = vjp_manual, .emit = emit_view,
     .result = result_view, .infer = infer_pcast},
    {.op = IR_ALL_REDUCE, .name = "all_reduce", .flags = COLL, .variant = red_variant, .variants = red_variants, .print = print_axes,
     .vjp = vjp_manual, .emit = emit_collective, .result = result_steal, .group_bytes = op_allreduce_bytes,
     .net_seconds = all_reduce_seconds, .infer = infer_same_shape},
    {.op = IR_ALL_GATHER, .name = "all_gather", .flags = COLL, .print = print_dim_axes, .vjp = vjp_manual,
     .emit = emit_collective, .group_bytes = all_gather_bytes, .net_seconds = all_gather_seconds, .infer = infer_same_rank},
    {.op = IR_REDUCE_SCATTER, .name = "reduce_scatter", .flags = COLL, .variant = red_variant,
     .variants = red_variants,
     .print = print_dim_axes, .vjp = vjp_manual, .emit = emit_collective, .group_bytes = scatter_bytes,
     .net_seconds = reduce_scatter_seconds, .infer = infer_same_rank},
    {.op = IR_ALL_TO_ALL, .name = "all_to_all", .flags = COLL, .print = print_all_to_all, .vjp = vjp_manual,
     .emit = emit_collective, .group_bytes = scatter_bytes, .net_seconds = all_to_all_seconds, .infer = infer_same_rank},
    {.op = IR_PPERMUTE, .name = "ppermute", .flags = COLL, .print = print_ppermute, .vjp = vjp_manual,
     .emit = emit_collective, .bytes_sent = ppermute_bytes, .net_seconds = exchange_seconds,
     .infer = infer_ppermute},
    {.op = IR_PERMUTE, .name = "permute", .flags = COLL, .emit = emit_collective, .bytes_sent = permute_bytes,
     .group_bytes = whole_block_bytes, .net_seconds = exchange_seconds, .infer = infer_same_shape},
    {.op = IR_AXIS_INDEX, .name = "axis_index", .print = print_axes, .emit = emit_axis_index, .infer = infer_axis_index},
    {.op = IR_SLICE_BLOCK, .name = "slice_block", .print = print_dim_axes, .vjp = vjp_manual,
     .emit = emit_collective, .infer = infer_same_rank},
    {.op = IR_EMBED_BLOCK, .name = "embed_block", .print = print_dim_axes, .emit = emit_collective,
     .infer = infer_same_rank},
    {.op = IR_ZERO_UNLESS_FIRST, .name = "zero_unless_first", .print = print_axes, .emit = emit_collective,
     .result = result_view_or_alloc, .infer = infer_same_shape},
    {0},
};

/* axis_size(AXES): the number of devices along the axes (jax.lax.axis_size),
 * a compile-time integer as size(x, k) is (a weak i32 kept in e->ival), in
 * the global view and in manual bodies: a schedule over an `ax: axis`
 * parameter sizes its buffers by it (language.md 10.4). */
static Type check_axis_size(TcCtx *c, Expr *e, const Type *annot) {
  Expr *pos[1];
  int n = tc_call_args(c, e, pos, 1, 1, NULL, NULL, 0, "axis_size(AXES): the number of devices along the axes");
  int axes[MAX_AXES], naxes;
  if (n < 0 || !tc_axes_arg(c, pos[0], axes, &naxes, false, "axis_size"))
    return ty_error();
  e->ival = axes_size(c, axes, naxes);
  Type t = ty_scalar(DT_I32);
  t.weak = true;
  return t;
}

static double fold_axis_size(Lower *L, Expr *e) { return (double)e->ival; }

#define MANUAL BIF_MANUAL_ONLY
static const BuiltinDef builtins[] = {
    {.name = "psum", .code = C_PSUM, .flags = MANUAL, .check = check_collective, .lower = lower_collective},
    {.name = "pmax", .code = C_PMAX, .flags = MANUAL, .check = check_collective, .lower = lower_collective},
    {.name = "pmin", .code = C_PMIN, .flags = MANUAL, .check = check_collective, .lower = lower_collective},
    {.name = "pmean", .code = C_PMEAN, .flags = MANUAL, .check = check_collective, .lower = lower_collective},
    {.name = "all_gather", .code = C_ALL_GATHER, .flags = MANUAL, .check = check_collective,
     .lower = lower_collective},
    {.name = "psum_scatter", .code = C_PSUM_SCATTER, .flags = MANUAL, .check = check_collective,
     .lower = lower_collective},
    {.name = "all_to_all", .code = C_ALL_TO_ALL, .flags = MANUAL, .check = check_collective,
     .lower = lower_collective},
    {.name = "ppermute", .code = C_PPERMUTE, .flags = MANUAL, .check = check_collective, .lower = lower_collective},
    {.name = "axis_index", .code = C_AXIS_INDEX, .flags = MANUAL, .check = check_collective,
     .lower = lower_collective},
    {.name = "axis_size", .flags = BIF_CONST, .check = check_axis_size, .fold = fold_axis_size,
     .doc = "the number of devices along mesh axes, a compile-time integer"},
    {.name = "pcast", .code = C_PCAST, .flags = MANUAL | BIF_FIRST_OPERAND, .check = check_collective, .lower = lower_collective},
    {.name = "reshard", .code = C_RESHARD, .flags = BIF_TYPE_ARG | BIF_STRUCT_RESHARD, .check = check_reshard, .lower = lower_reshard},
    {0},
};

const OpFamily op_collective_family = {
    .name = "collective",
    .ops = ops,
    .builtins = builtins,
};
