/* op_elementwise.c: the elementwise family with more than one operand:
 * the binary operators (+ - * / ** % < <= > >= == != & |, rows of the
 * builtin table like the functions, with integer constant folding), maximum,
 * minimum, where (typing-rules 1.3 with 3.4, 3.5, D2, D7), and cast (1.2).
 * The unary functions are in op_unary.c.
 *
 * The rule: NumPy broadcasting of shapes; per dim, equal specs, or one
 * spec against replicated/size-1 ones ([E_BCAST] for two different specs,
 * [E_DUP] for an axis used twice); only + and - keep pending sums (both
 * operands unreduced over the same axes), * and / a pending sum with a
 * partner reduced over exactly its axes; reduced operands must agree. In
 * manual bodies the VMA rule (2.2) casts invariant operands to varying.
 *
 * Every operation here is one value per element: the emitter fuses chains
 * of them into one loop (OPF_ELEMENTWISE: fuse.c, emit_c.c) over helper functions
 * the preamble defines.
 */
#include <math.h>

#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define fail rule_fail

enum { E_WHERE = -1, E_CAST = -2 };   /* BuiltinDef.code; maximum/minimum use their BinOp */

static const char *axes_str(RuleCtx *c, AxisSet s) { return ty_axes_str(c->mesh, s); }

/* ---- the rules (1.3, 3.4, 3.5) ------------------------------------------------------ */

static bool is_linear_add(int op) { return op == BIN_ADD || op == BIN_SUB; }

static bool elementwise_unreduced(RuleCtx *c, int op, int n, const Type *eff, AxisSet *U, AxisSet *consumedR) {
  int nu = 0, first = -1;
  for (int k = 0; k < n; k++)
    if (eff[k].U) {
      if (first < 0)
        first = k;
      nu++;
    }
  *U = 0;
  *consumedR = 0;
  if (!nu)
    return true;
  const Type *u = &eff[first];
  AxisSet A = u->U;
  if (is_linear_add(op)) {
    for (int k = 0; k < n; k++) {
      if (eff[k].weak) {
        Type rep = *u;
        rep.U = 0;
        return fail(c, "E_UR",
                    "%s: %s is unreduced over %s, so adding a literal would add it once per device; reduce first "
                    "with %s",
                    c->opname, TS(u), axes_str(c, A), rule_reduce_fix_at(c, first, &rep, A));
      }
      if (eff[k].U != A) {
        const Type *o = &eff[k];
        if (!o->U)
          return fail(c, "E_UR",
                      "%s: %s is unreduced over %s while %s is not; reduce it first with %s (an all-reduce), or make "
                      "both unreduced over the same axes",
                      c->opname, TS(u), axes_str(c, A), TS(o), rule_reduce_fix_at(c, first, u, A));
        return fail(c, "E_UR",
                    "%s: operands are unreduced over different axes: %s and %s; reshard one of them so both are "
                    "unreduced over the same axes",
                    c->opname, TS(u), TS(o));
      }
    }
    *U = A;
    return true;
  }
  if (op == BIN_MUL || op == BIN_DIV) {
    if (nu > 1)
      return fail(c, "E_UR",
                  "%s: both operands are unreduced (%s and %s); a product of two pending sums is not a pending sum; "
                  "reduce one of them first with %s",
                  c->opname, TS(&eff[0]), TS(&eff[1]), rule_reduce_fix(c, &eff[1], eff[1].U));
    if (op == BIN_DIV && first != 0)
      return fail(c, "E_UR",
                  "%s: the denominator %s is unreduced; reduce it first with %s (an all-reduce)",
                  c->opname, TS(u), rule_reduce_fix_at(c, first, u, A));
    for (int k = 0; k < n; k++) {
      if (k == first || eff[k].weak)
        continue;
      if (eff[k].R != A) {
        Type base = eff[k];
        base.R = 0;
        return fail(c, "E_UR",
                    "%s: %s is unreduced over %s, so its partner must be reduced over exactly %s, but it is %s; "
                    "write %s to mark it reduced (free: no communication)",
                    c->opname, TS(u), axes_str(c, A), axes_str(c, A), TS(&eff[k]), rule_reduced_fix_at(c, k, &base, A));
      }
    }
    *U = A;
    *consumedR = A;
    return true;
  }
  return fail(c, "E_UR",
              "%s is not linear, so its operand %s cannot be unreduced (a pending sum over %s); reduce it first "
              "with %s",
              c->opname, TS(u), axes_str(c, A), rule_reduce_fix_at(c, nu == 1 ? first : -1, u, A));
}

static bool elementwise_reduced(RuleCtx *c, int n, Type *eff, AxisSet consumedR, AxisSet *Rout) {
  AxisSet R = 0;
  int who = -1;
  for (int k = 0; k < n; k++) {
    if (eff[k].weak || !eff[k].R)
      continue;
    if (who >= 0 && eff[k].R != R) {
      Type want = eff[k];
      want.R = R;
      want.weak = false;
      return fail(c, "E_UR",
                  "%s: operands are reduced over different axes: %s and %s; they must agree: reshard one of them, "
                  "e.g. reshard(y, %s)",
                  c->opname, TS(&eff[who]), TS(&eff[k]),
                  rule_stage_reshard(TS(&want), k, TS(&want), arena_printf("reshard it to %s", TS(&want))));
    }
    R = eff[k].R;
    who = k;
  }
  *Rout = 0;
  if (!R)
    return true;
  for (int k = 0; k < n; k++) {
    Type *t = &eff[k];
    if (t->weak || t->R == R)
      continue;
    if ((t->U & R) == R && consumedR == R)
      continue;
    AxisSet sharded = (ty_dim_axes(t) | t->V) & R;
    if (sharded) {
      Type want = *t;
      for (int d = 0; d < want.rank; d++)
        if (ty_spec_axes(want.spec[d]) & R)
          want.spec[d].n = 0;
      want.R |= R & ~want.V;
      want.weak = false;
      return fail(c, "E_UR",
                  "%s: %s is reduced over %s, so its partner cannot be sharded or varying over it, but %s is; "
                  "reshard it first: reshard(y, %s)",
                  c->opname, TS(&eff[who]), axes_str(c, R), TS(t),
                  rule_stage_reshard(TS(&want), k, TS(&want), arena_printf("reshard it to %s", TS(&want))));
    }
    /* Explicit mode: a rank-0 replicated partner of a two-operand op is
     * cast to reduced implicitly (3.5 item 4). */
    if (n == 2 && t->rank == 0 && !(R & c->manual) && !t->U && !t->R) {
      t->R = R;
      continue;
    }
    return fail(c, "E_UR",
                "%s: %s is reduced over %s, so its partner must be reduced over %s too, but %s is replicated "
                "there; write %s",
                c->opname, TS(&eff[who]), axes_str(c, R), axes_str(c, R), TS(t), rule_reduced_fix_at(c, k, t, R & ~t->R));
  }
  *Rout = R & ~consumedR;
  return true;
}

/* ---- dim specs of elementwise results (1.3) ----------------------------- */

static bool elementwise_specs(RuleCtx *c, int n, const Type *eff, Type *out) {
  int rank = out->rank;
  for (int d = 0; d < rank; d++) {
    DimSpec chosen = {0};
    bool have = false, all_same = true;
    DimSpec first = {0};
    int nentries = 0;
    for (int k = 0; k < n; k++) {
      if (eff[k].rank == 0)
        continue;
      int od = d - (rank - eff[k].rank);
      DimSpec s = od >= 0 ? eff[k].spec[od] : (DimSpec){0};
      if (nentries++ == 0)
        first = s;
      else if (!ty_spec_equal(first, s))
        all_same = false;
    }
    if (all_same) {
      out->spec[d] = first;
      continue;
    }
    int from = -1;
    for (int k = 0; k < n; k++) {
      if (eff[k].rank == 0)
        continue;
      int od = d - (rank - eff[k].rank);
      int64_t size = od >= 0 ? eff[k].shape[od] : 1;
      DimSpec s = od >= 0 ? eff[k].spec[od] : (DimSpec){0};
      if (size == 1 && s.n == 0)
        continue;
      if (s.n == 0)
        continue;
      if (have && !ty_spec_equal(chosen, s)) {
        Type want = eff[k];
        want.spec[od] = chosen;
        want.weak = false;
        return fail(c, "E_BCAST",
                    "%s: incompatible shardings for broadcasting in dim %d: %s and %s; reshard one operand so the "
                    "dim is sharded the same way (or replicated) in both, e.g. reshard(y, %s)",
                    c->opname, d, TS(&eff[from]), TS(&eff[k]),
                    !ty_check_wellformed(c->mesh, &want, (Pos){0}, c->manual, NULL) ? "..."
                    : c->manual ? TS(&want)
                                : rule_stage_reshard(TS(&want), k, TS(&want), arena_printf("reshard it to %s", TS(&want))));
      }
      chosen = s;
      have = true;
      from = k;
    }
    out->spec[d] = chosen;
  }
  AxisSet seen = 0;
  for (int d = 0; d < rank; d++) {
    AxisSet a = ty_spec_axes(out->spec[d]);
    if (a & seen) {
      const char *ops_str = TS(&eff[0]);
      for (int k = 1; k < n; k++)
        ops_str = arena_printf("%s, %s", ops_str, TS(&eff[k]));
      /* The fix: the last operand that shards dim d over the axis, with
       * that dim replicated. */
      const char *fix = "reshard one operand first";
      int fix_k = -1;
      const char *fix_type = NULL;
      for (int k = 0; k < n; k++) {
        int od = d - (rank - eff[k].rank);
        if (od < 0 || !(ty_spec_axes(eff[k].spec[od]) & a & seen))
          continue;
        Type want = eff[k];
        want.spec[od].n = 0;
        want.weak = false;
        fix = arena_printf("reshard one operand first, e.g. reshard(y, %s)", TS(&want));
        fix_k = c->manual ? -1 : k;
        fix_type = TS(&want);
      }
      if (fix_k >= 0)
        fix = rule_stage_reshard(fix, fix_k, fix_type, arena_printf("reshard it to %s", fix_type));
      return fail(c, "E_DUP",
                  "%s with inputs %s produces an illegally sharded result %s (mesh axis %s shards two dims); %s",
                  c->opname, ops_str, TS(out), axes_str(c, a & seen), fix);
    }
    seen |= a;
  }
  return true;
}

static bool check_elementwise_dtype(RuleCtx *c, int op, int n, const Type *const *ops, DType dt) {
  bool logic = op == BIN_AND || op == BIN_OR;
  if (logic && dt != DT_BOOL)
    return fail(c, "E_DTYPE", "%s: %s works on bool values, not %s; compare first, e.g. (x > 0) %s (y > 0)",
                c->opname, ast_binop_text(op), TS(ops[0]->dtype != DT_BOOL || n < 2 ? ops[0] : ops[1]),
                ast_binop_text(op));
  if (dt == DT_BOOL && !(op == BIN_EQ || op == BIN_NE || logic))
    return fail(c, "E_DTYPE", "%s: arithmetic on bool values (%s); convert with cast(x, f32)", c->opname,
                TS(ops[0]));
  return true;
}

/* where(cond, a, b) is jnp.where. When the three operands have the same
 * shape nothing is broadcast and lax.select's rule applies: the cases must
 * be sharded identically and a non-scalar condition like them ([E_SAME]).
 * Otherwise every operand is first broadcast to the common sharding of the
 * elementwise rule (1.3), so only [E_BCAST]/[E_DUP] can fail. A scalar
 * condition takes no part. Select is linear in its cases, so cases that are
 * both unreduced over the same axes give an unreduced result (3.4). */
static bool select_specs(RuleCtx *c, int n, const Type *eff, Type *r) {
  int first = eff[0].rank ? 0 : 1;
  bool same_shape = true;
  for (int k = first + 1; k < n; k++) {
    same_shape &= eff[k].rank == eff[first].rank;
    for (int d = 0; same_shape && d < eff[k].rank; d++)
      same_shape &= eff[k].shape[d] == eff[first].shape[d];
  }
  if (!same_shape)
    return elementwise_specs(c, n - first, eff + first, r);
  for (int d = 0; d < r->rank; d++)
    r->spec[d] = eff[1].spec[d];
  if (!ty_same_sharding(&eff[1], &eff[2]) && (eff[1].rank || eff[2].rank))
    return fail(c, "E_SAME",
                "where: the cases must be sharded the same way, but they are %s and %s (nothing is broadcast "
                "here, as all operands have one shape); reshard one of them, e.g. reshard(b, %s)",
                TS(&eff[1]), TS(&eff[2]), TS(&eff[1]));
  if (first == 0)
    for (int d = 0; d < r->rank; d++)
      if (!ty_spec_equal(eff[0].spec[d], eff[1].spec[d])) {
        Type want = eff[0];
        for (int k = 0; k < r->rank; k++)
          want.spec[k] = eff[1].spec[k];
        return fail(c, "E_SAME",
                    "where: the condition %s must be sharded like the cases %s (nothing is broadcast here, as "
                    "all operands have one shape); reshard it: reshard(cond, %s)",
                    TS(&eff[0]), TS(&eff[1]), TS(&want));
      }
  return true;
}

static bool rule_select(RuleCtx *c, const Type *const *ops, Type *out) {
  if (ops[0]->dtype != DT_BOOL)
    return fail(c, "E_DTYPE", "where: the condition must be bool, not %s; compare, e.g. where(x > 0, a, b)",
                TS(ops[0]));
  DType dt = DT_F32;
  if (!rule_join_dtypes(c, 2, ops + 1, &dt))
    return false;
  Type shape;
  if (!rule_broadcast_shapes(c, 3, ops, &shape))
    return false;
  Type eff[3];
  AxisSet V;
  if (!rule_vma_unify(c, 3, ops, eff, &V))
    return false;
  if (eff[0].U)
    return fail(c, "E_UR", "where: the condition %s is unreduced; a condition cannot be a pending sum", TS(&eff[0]));
  if (eff[1].U != eff[2].U) {
    const Type *u = eff[1].U ? &eff[1] : &eff[2], *o = eff[1].U ? &eff[2] : &eff[1];
    return fail(c, "E_UR",
                "where: the cases must be unreduced over the same axes, but they are %s and %s; select is linear "
                "only when both are pending sums over the same axes: reduce with %s first",
                TS(u), TS(o), rule_reduce_fix_at(c, eff[1].U ? 1 : 2, u, u->U));
  }
  Type r = shape;
  r.dtype = dt;
  r.V = V;
  r.weak = ops[0]->weak && ops[1]->weak && ops[2]->weak;
  AxisSet R = 0;
  if (!elementwise_reduced(c, 2, eff + 1, 0, &R) || !select_specs(c, 3, eff, &r))
    return false;
  if (ty_dim_axes(&r) & R)
    return fail(c, "E_UR",
                "where: the cases are reduced over %s, but the condition %s is sharded over it; reshard the "
                "condition to replicated there",
                axes_str(c, ty_dim_axes(&r) & R), TS(&eff[0]));
  r.U = eff[1].U;
  r.R = R;
  *out = r;
  return true;
}

/* op: a BinOp, or -1 for where(cond, a, b). */
bool rule_reduced_common(RuleCtx *c, int n, Type *eff, AxisSet *R) { return elementwise_reduced(c, n, eff, 0, R); }

bool rule_elementwise(RuleCtx *c, int op, int n, const Type *const *ops, Type *out) {
  if (op < 0)
    return rule_select(c, ops, out);
  for (int k = 0; (op == BIN_AND || op == BIN_OR) && k < n; k++)
    if (ops[k]->dtype != DT_BOOL)
      return fail(c, "E_DTYPE", "%s: %s works on bool values, not %s; compare first, e.g. (x > 0) %s (y > 0)",
                  c->opname, ast_binop_text(op), TS(ops[k]), ast_binop_text(op));
  DType dt = DT_F32;
  if (!rule_join_dtypes(c, n, ops, &dt) || !check_elementwise_dtype(c, op, n, ops, dt))
    return false;
  Type shape;
  if (!rule_broadcast_shapes(c, n, ops, &shape))
    return false;
  Type eff[4];
  AxisSet V;
  if (!rule_vma_unify(c, n, ops, eff, &V))
    return false;
  Type r = shape;
  r.dtype = (op >= BIN_LT && op <= BIN_NE) ? DT_BOOL : dt;
  r.V = V;
  bool all_weak = true;
  for (int k = 0; k < n; k++)
    all_weak &= ops[k]->weak;
  r.weak = all_weak;
  AxisSet U = 0, consumed = 0, R = 0;
  if (!elementwise_unreduced(c, op, n, eff, &U, &consumed) || !elementwise_reduced(c, n, eff, consumed, &R) ||
      !elementwise_specs(c, n, eff, &r))
    return false;
  r.U = U;
  r.R = R;
  *out = r;
  return true;
}

/* ---- typing ------------------------------------------------------------------------ */

static const char *binop_opname(int op) {
  switch (op) {
  case BIN_ADD: return "add";
  case BIN_SUB: return "subtract";
  case BIN_MUL: return "multiply";
  case BIN_DIV: return "divide";
  case BIN_POW: return "power";
  case BIN_MOD: return "remainder";
  case BIN_AND: return "logical and";
  case BIN_OR: return "logical or";
  default: return arena_printf("comparison %s", ast_binop_text(op));
  }
}

/* a + b, ... on arrays and scalars: the typechecker has typed a and b
 * (BuiltinDef, ops.h); a str operand goes to op_string.c's rows. */
static Type check_binary_op(TcCtx *c, Expr *e, const Type *annot) {
  Type a = *e->lhs->ty, b = *e->rhs->ty;
  const char *name = e->bi->name;
  if (!tc_want_array(c, e->lhs, &a, name) | !tc_want_array(c, e->rhs, &b, name))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, binop_opname(e->op));
  /* x ** 2 with an integer literal (or const) exponent is JAX's
   * integer_pow, a unary op with no rule for reduced operands (typing-rules
   * 3.5); x ** 2.0 is pow, which keeps R like every binary op. */
  if (e->op == BIN_POW && b.weak && b.dtype == DT_I32 && b.rank == 0 && !a.weak && a.R) {
    const char *x = tc_expr_text(e->lhs), *n = tc_expr_text(e->rhs);
    bool digits = n[n[0] == '-'] != 0 && strspn(n + (n[0] == '-'), "0123456789") == strlen(n + (n[0] == '-'));
    const char *fl = digits ? arena_printf("%s.0", n) : arena_printf("cast(%s, %s)", n, ty_dtype_name(a.dtype));
    AxisSet m = a.R & c->manual, g = a.R & ~c->manual;
    Type plain = a;
    plain.R &= c->manual;
    const char *other = g ? arena_printf("reshard(%s, %s)", x, ty_str(c->mesh, &plain))
                          : arena_printf("pcast(%s, %s, to=varying)", x, ty_axes_arg(c->mesh, m));
    rule_fail(&r, "E_UR",
              "power: %s ** %s with an integer exponent is integer_pow, which has no rule for reduced operands "
              "(typing-rules 3.5), and %s is %s; write %s ** %s (a float exponent keeps it reduced), or change "
              "the operand first: %s",
              x, n, x, ty_str(c->mesh, &a), x, fl, other);
    return ty_error();
  }
  const Type *ops[2] = {&a, &b};
  Type out;
  return rule_elementwise(&r, e->op, 2, ops, &out) ? out : ty_error();
}

/* maximum(a, b), minimum(a, b) (e->bi->code: the BinOp) and where(cond, a,
 * b) (code -1). */
static Type check_nary(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  int op = e->bi->code, nargs = op < 0 ? 3 : 2;
  Expr *pos[3], *kw[1];
  const char *usage = nargs == 3 ? "where(cond, a, b)" : arena_printf("%s(a, b)", tc_callee(e));
  if (tc_call_args(c, e, pos, nargs, nargs, kw, NULL, 0, usage) < 0)
    return ty_error();
  bool ok = true;
  Type t[3];
  for (int i = 0; i < nargs; i++) {
    t[i] = tc_operand(c, pos[i], tc_callee(e));
    ok &= t[i].kind != TY_ERROR;
  }
  if (!ok)
    return ty_error();
  info->x = pos[0];
  info->y = pos[1];
  info->z = nargs == 3 ? pos[2] : NULL;
  const Type *ops[3] = {&t[0], &t[1], &t[2]};
  RuleCtx r = tc_rule(c, e->pos, tc_callee(e));
  Type out;
  return rule_elementwise(&r, op, nargs, ops, &out) ? out : ty_error();
}

static Type check_cast(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "cast(x, f64)");
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], "cast");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  /* A dtype written, or a name standing for one: a type parameter bound to
   * a scalar type, or a dtype const (`const DT = f32`), resolved earlier. */
  const TypeExpr *te = pos[1]->kind == EX_TYPE ? pos[1]->type : NULL;
  const Type *rt = te ? te->resolved : NULL;
  if (rt && rt->kind == TY_ERROR)
    return ty_error();
  if (!te || (rt ? rt->kind != TY_ARRAY || rt->rank || rt->U || rt->R || rt->V
                 : te->rank || te->nannots || te->ndims_written)) {
    diag_error(pos[1]->pos, "E_ARG", "cast takes a dtype (f32, f64, bf16, i32 or bool), e.g. cast(x, f64)%s%s",
               rt ? "; this name stands for " : "", rt ? TS(rt) : "");
    return ty_error();
  }
  info->dtype = rt ? rt->dtype : te->dtype;
  if (x.U && !ty_is_float(info->dtype) && ty_is_float(x.dtype)) {
    Type r = x;
    r.U &= c->manual;
    diag_error(e->pos, "E_UR",
               "cast of %s to %s: the value is a pending sum over %s, and converting each piece to %s does not "
               "convert the sum; reduce it first with reshard(x, %s)",
               TS(&x), ty_dtype_name(info->dtype), ty_axes_str(c->mesh, x.U), ty_dtype_name(info->dtype), TS(&r));
    return ty_error();
  }
  Type out = x;
  out.dtype = info->dtype;
  out.weak = false;
  return out;
}

/* ---- lowering ---------------------------------------------------------------------- */

/* The dtype the operands are computed in: a strong operand's, as weak ones
 * adopt it (D7). Weak operands only are a constant expression that took a
 * strong type from an annotation (`-> f64 { return 0.0 - 3.195 }`): it is
 * computed in that type, not in the literals' f32 (a comparison's or
 * logic's bool result says nothing of its operands). */
static DType operand_dtype(Expr **ops, int n, const Type *result) {
  for (int i = 0; i < n; i++)
    if (ops[i] && !ops[i]->ty->weak)
      return ops[i]->ty->dtype;
  return result->dtype != DT_BOOL ? result->dtype : ops[0]->ty->dtype;
}

static Value *lower_elementwise(Lower *L, Expr *e, int irop, int fn, Expr **ops, int n) {
  Value *args[3];
  Expr **cases = ops;
  int ncases = n;
  if (irop == IR_SELECT) {
    args[0] = lower_as(L, ops[0], DT_BOOL);
    cases = ops + 1;
    ncases = n - 1;
  }
  DType dt = operand_dtype(cases, ncases, e->ty);
  for (int i = 0; i < ncases; i++)
    args[i + (n - ncases)] = lower_as(L, cases[i], dt);
  for (int i = 0; i < n; i++)
    args[i] = lower_vma(L, e->pos, args[i], e->ty->V);
  Inst *in = lower_emit(L, irop, e->pos, n, args, *e->ty);
  in->fn = fn;
  return in->results[0];
}


static Value *lower_nary(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Expr *ops[3] = {info->x, info->y, info->z};
  int op = e->bi->code;
  return op == E_WHERE ? lower_elementwise(L, e, IR_SELECT, 0, ops, 3) : lower_elementwise(L, e, IR_BINARY, op, ops, 2);
}

static Value *lower_binary_op(Lower *L, Expr *e) {
  Expr *ops[2] = {e->lhs, e->rhs};
  return lower_elementwise(L, e, IR_BINARY, e->op, ops, 2);
}

static Value *lower_cast(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_as(L, info->x, info->dtype);
  if (x->type.dtype == info->dtype && ty_equal(&x->type, e->ty))
    return x;
  return lower_emit1(L, IR_CAST, e->pos, 1, &x, *e->ty);
}

/* ---- constants ------------------------------------------------------------------------ */

static double ipow(double a, double b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? (((int64_t)b) % 2 ? -1 : 1) : 0;
  double r = 1;
  for (int64_t k = (int64_t)b; k > 0; k--)
    r *= a;
  return (double)(int32_t)(int64_t)r;
}

static double fold_bin(int op, double a, double b, bool integer) {
  switch (op) {
  case BIN_ADD: return a + b;
  case BIN_SUB: return a - b;
  case BIN_MUL: return a * b;
  case BIN_DIV: return integer ? (b != 0 ? (double)((int64_t)a / (int64_t)b) : 0) : a / b;
  case BIN_MAX: return a > b || a != a ? a : b;
  case BIN_MIN: return a < b || a != a ? a : b;
  case BIN_POW: return integer ? ipow(a, b) : pow(a, b);
  case BIN_MOD: {
    if (integer) {
      if (b == 0)
        return 0;
      int64_t r = (int64_t)a % (int64_t)b;
      return (double)(r != 0 && (r < 0) != (b < 0) ? r + (int64_t)b : r);
    }
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
  }
  case BIN_LT: return a < b;
  case BIN_LE: return a <= b;
  case BIN_GT: return a > b;
  case BIN_GE: return a >= b;
  case BIN_EQ: return a == b;
  case BIN_NE: return a != b;
  case BIN_AND: return a != 0 && b != 0;
  case BIN_OR: return a != 0 || b != 0;
  default: return 0;
  }
}

static double fold_nary(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  if (e->bi->code == E_WHERE)
    return lower_fold(L, info->x) != 0 ? lower_fold(L, info->y) : lower_fold(L, info->z);
  return fold_bin(e->bi->code, lower_fold(L, info->x), lower_fold(L, info->y), false);
}

/* ---- constant operators: integers exactly, in 64 bits ------------------------------------ */

static bool const_error(Expr *e, const char *what) {
  diag_error(e->pos, "E_CONST", "%s in a constant expression: %s", what, tc_expr_text(e));
  return false;
}

/* x ** y of integers by squaring, false on overflow. */
static bool ipow_checked(int64_t x, int64_t y, int64_t *r) {
  *r = 1;
  for (; y > 0; y >>= 1) {
    if ((y & 1) && __builtin_mul_overflow(*r, x, r))
      return false;
    if (y > 1 && __builtin_mul_overflow(x, x, &x))
      return false;
  }
  return true;
}

/* Integer constants fold exactly in 64 bits; overflow, a division or
 * remainder by zero and a negative power are errors at the expression
 * ([E_CONST]), where the run time would stop or wrap. */
static double fold_integer(Expr *e, double a, double b) {
  if (!(fabs(a) < 0x1p63 && fabs(b) < 0x1p63))
    return const_error(e, "integer overflow (beyond 64 bits)");
  int64_t x = (int64_t)a, y = (int64_t)b, r = 0;
  bool over = false;
  switch (e->op) {
  case BIN_ADD: over = __builtin_add_overflow(x, y, &r); break;
  case BIN_SUB: over = __builtin_sub_overflow(x, y, &r); break;
  case BIN_MUL: over = __builtin_mul_overflow(x, y, &r); break;
  case BIN_DIV:
  case BIN_MOD:
    if (y == 0)
      return const_error(e, e->op == BIN_DIV ? "division by zero" : "remainder by zero");
    over = x == INT64_MIN && y == -1;
    r = over ? 0 : e->op == BIN_DIV ? x / y : x % y;
    if (e->op == BIN_MOD && r != 0 && (r < 0) != (y < 0))   /* the sign of the divisor, as NumPy */
      r += y;
    break;
  case BIN_POW:
    if (y < 0)
      return const_error(e, "an integer to a negative integer power (not allowed, as in NumPy)");
    over = !ipow_checked(x, y, &r);
    break;
  default:
    return fold_bin(e->op, a, b, true);
  }
  if (over)
    return const_error(e, "integer overflow (beyond 64 bits)");
  return (double)r;
}

static double fold_binary_op(Lower *L, Expr *e) {
  bool integer = e->lhs->ty->dtype == DT_I32 && e->rhs->ty->dtype == DT_I32;
  double a = lower_fold(L, e->lhs), b = lower_fold(L, e->rhs);
  return integer ? fold_integer(e, a, b) : fold_bin(e->op, a, b, false);
}

static double fold_cast(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  return lower_fold(L, info->x);
}

/* ---- transposes -------------------------------------------------------------------- */

static void vjp_binary(AD *a, Inst *in, Value *g) {
  Value *x = ad_primal(a, in->args[0]), *y = ad_primal(a, in->args[1]);
  Value *px = in->args[0], *py = in->args[1];
  bool ax = ad_wants_ct(a, px), ay = ad_wants_ct(a, py);
  DType dt = in->results[0]->type.dtype;
  switch (in->fn) {
  case BIN_ADD:
    if (ax)
      ad_add_ct_unbroadcast(a, px, g);
    if (ay)
      ad_add_ct_unbroadcast(a, py, g);
    return;
  case BIN_SUB:
    if (ax)
      ad_add_ct_unbroadcast(a, px, g);
    if (ay)
      ad_add_ct_unbroadcast(a, py, ad_un(a, UN_NEG, g));
    return;
  case BIN_MUL:
    if (ax)
      ad_add_ct_unbroadcast(a, px, ad_bin(a, BIN_MUL, g, y));
    if (ay)
      ad_add_ct_unbroadcast(a, py, ad_bin(a, BIN_MUL, g, x));
    return;
  case BIN_DIV:
    if (ax)
      ad_add_ct_unbroadcast(a, px, ad_bin(a, BIN_DIV, g, y));
    if (ay) {
      Value *q = ad_primal(a, in->results[0]);
      ad_add_ct_unbroadcast(a, py, ad_un(a, UN_NEG, ad_bin(a, BIN_DIV, ad_bin(a, BIN_MUL, g, q), y)));
    }
    return;
  case BIN_MAX:
  case BIN_MIN: {
    if (!ax && !ay)
      return;
    /* Ties split evenly, as JAX does. */
    Value *win = ad_bin(a, in->fn == BIN_MAX ? BIN_GT : BIN_LT, x, y);
    Value *lose = ad_bin(a, in->fn == BIN_MAX ? BIN_LT : BIN_GT, x, y);
    Value *tie = ad_bin(a, BIN_EQ, x, y);
    Value *half = ad_gate(a, ad_bin(a, BIN_MUL, g, ad_const(a, dt, 0.5)), tie);
    if (ax)
      ad_add_ct_unbroadcast(a, px, ad_bin(a, BIN_ADD, ad_gate(a, g, win), half));
    if (ay)
      ad_add_ct_unbroadcast(a, py, ad_bin(a, BIN_ADD, ad_gate(a, g, lose), half));
    return;
  }
  case BIN_POW: {
    /* d/dx x**y = y x**(y-1); d/dy = log(x) x**y, 0 where x == 0 (as JAX,
     * so that 0**y does not give NaN). */
    Value *r = ad_primal(a, in->results[0]);
    if (ax)
      ad_add_ct_unbroadcast(a, px, ad_bin(a, BIN_MUL, g, ad_bin(a, BIN_MUL, y, ad_bin(a, BIN_POW, x,
                                                                                  ad_bin(a, BIN_SUB, y, ad_const(a, dt, 1))))));
    if (ay) {
      Value *zero = ad_bin(a, BIN_EQ, x, ad_const(a, dt, 0));
      Value *logx = ad_un(a, UN_LOG, ad_select(a, zero, ad_const(a, dt, 1), x));
      ad_add_ct_unbroadcast(a, py, ad_bin(a, BIN_MUL, g, ad_bin(a, BIN_MUL, logx, r)));
    }
    return;
  }
  case BIN_MOD:
    /* x % y = x - floor(x / y) * y */
    if (ax)
      ad_add_ct_unbroadcast(a, px, g);
    if (ay)
      ad_add_ct_unbroadcast(a, py, ad_un(a, UN_NEG, ad_bin(a, BIN_MUL, g, ad_un(a, UN_FLOOR,
                                                                                 ad_bin(a, BIN_DIV, x, y)))));
    return;
  default:
    return;  /* comparisons and logic have no derivative */
  }
}

static void vjp_select(AD *a, Inst *in, Value *g) {
  Value *c = ad_primal(a, in->args[0]);
  if (ad_wants_ct(a, in->args[1]))
    ad_add_ct_unbroadcast(a, in->args[1], ad_gate(a, g, c));
  if (ad_wants_ct(a, in->args[2]))
    ad_add_ct_unbroadcast(a, in->args[2], ad_gate(a, g, ad_un(a, UN_NOT, c)));
}

static void vjp_cast(AD *a, Inst *in, Value *g) {
  if (ad_wants_ct(a, in->args[0]))
    ad_add_ct(a, in->args[0], g);
}

/* ---- types from operands ------------------------------------------------------------- */

/* The rule of the operator (1.3), a literal operand weak (D7). */
static bool infer_elementwise(const Module *mod, const Inst *in, Type *out) {
  Type ts[3];
  const Type *tp[3];
  if (in->nargs != (in->op == IR_SELECT ? 3 : 2))
    return false;
  for (int i = 0; i < in->nargs; i++) {
    ts[i] = in->args[i]->type;
    ts[i].weak = ir_is_literal(in->args[i]);
    tp[i] = &ts[i];
  }
  RuleCtx rc = ir_rule_ctx(mod, in);
  if (!rule_elementwise(&rc, in->op == IR_SELECT ? -1 : in->fn, in->nargs, tp, out))
    return false;
  out->weak = false;
  return true;
}

/* The operand's type in the result's dtype (which is the cast's only
 * attribute). */
static bool infer_cast(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || in->args[0]->type.kind != TY_ARRAY)
    return false;
  DType dt = out->dtype;
  *out = in->args[0]->type;
  out->dtype = dt;
  return true;
}

/* ---- partitioning -------------------------------------------------------------------- */

static void part_elementwise(Part *p, Inst *in, Value **args) {
  const Type *res = &in->results[0]->type;
  Value *na[3];
  for (int i = 0; i < in->nargs; i++) {
    Type want = part_operand_target(&args[i]->type, res);
    na[i] = part_to(p, in->pos, args[i], &want);
  }
  part_copy(p, in, na);
}

/* ---- C ---------------------------------------------------------------------------------- */

/* NULL-terminated at BIN_MATMUL, which is no IR operation (OpDef.variants). */
static const char *binop_names[BIN__COUNT] = {
    [BIN_ADD] = "add", [BIN_SUB] = "sub", [BIN_MUL] = "mul", [BIN_DIV] = "div", [BIN_MAX] = "max",
    [BIN_MIN] = "min", [BIN_POW] = "pow", [BIN_MOD] = "mod", [BIN_LT] = "lt", [BIN_LE] = "le", [BIN_GT] = "gt",
    [BIN_GE] = "ge", [BIN_EQ] = "eq", [BIN_NE] = "ne", [BIN_AND] = "and", [BIN_OR] = "or",
};


static const char *binary_c(int fn, DType dt, const char *a, const char *b) {
  dt = ty_compute_dtype(dt);
  const char *n = ty_dtype_name(dt);
  switch (fn) {
  case BIN_ADD: return arena_printf(dt == DT_I32 ? "shd_addi(%s, %s)" : "%s + %s", a, b);
  case BIN_SUB: return arena_printf(dt == DT_I32 ? "shd_subi(%s, %s)" : "%s - %s", a, b);
  case BIN_MUL: return arena_printf(dt == DT_I32 ? "shd_muli(%s, %s)" : "%s * %s", a, b);
  case BIN_DIV:
    if (dt == DT_I32)
      return arena_printf("shd_idiv(%s, %s)", a, b);
    return arena_printf("%s / %s", a, b);
  case BIN_MAX: return arena_printf("shd_max_%s(%s, %s)", n, a, b);
  case BIN_MIN: return arena_printf("shd_min_%s(%s, %s)", n, a, b);
  case BIN_POW: return arena_printf("shd_pow_%s(%s, %s)", n, a, b);
  case BIN_MOD: return arena_printf("shd_mod_%s(%s, %s)", n, a, b);
  case BIN_LT: return arena_printf("%s < %s", a, b);
  case BIN_LE: return arena_printf("%s <= %s", a, b);
  case BIN_GT: return arena_printf("%s > %s", a, b);
  case BIN_GE: return arena_printf("%s >= %s", a, b);
  case BIN_EQ: return arena_printf("%s == %s", a, b);
  case BIN_NE: return arena_printf("%s != %s", a, b);
  case BIN_AND: return arena_printf("%s && %s", a, b);
  case BIN_OR: return arena_printf("%s || %s", a, b);
  default: diag_ice("binary %d", fn);
  }
}

static const char *binary_expr(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  return binary_c(in->fn, in->args[0]->type.dtype, emit_operand_at(e, in->args[0], res),
                  emit_operand_at(e, in->args[1], res));
}

static const char *select_expr(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  return arena_printf("%s ? %s : %s", emit_operand_at(e, in->args[0], res), emit_operand_at(e, in->args[1], res),
                      emit_operand_at(e, in->args[2], res));
}

static const char *cast_expr(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  const char *x = emit_operand_at(e, in->args[0], res);
  if (res->dtype == DT_BOOL)
    return arena_printf("%s != 0", x);
  if (res->dtype == DT_I32 && ty_is_float(in->args[0]->type.dtype))
    return arena_printf("shd_f2i(%s)", x);
  if (res->dtype == DT_BF16 && in->args[0]->type.dtype == DT_F64)
    return arena_printf("shd_bf2f(shd_d2bf(%s))", x);
  return arena_printf("(%s)%s", ty_dtype_c(ty_compute_dtype(res->dtype)), x);
}

static void mark_unary(const IrBlock *b, bool *used) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_UNARY && in->nresults)
      used[in->fn * DT__COUNT + ty_compute_dtype(in->results[0]->type.dtype)] = true;
    for (int r = 0; r < in->nregions; r++)
      mark_unary(in->regions[r], used);
  }
}

/* The helpers of the binary operators (NumPy semantics: maximum and
 * minimum propagate NaN, % has the sign of the divisor, integer division
 * and remainder by zero stop the program), and of the unary functions the
 * unit's functions use (not the whole module's: a function's first use of
 * exp must not change every other unit of a build, cache.c). */
static void preamble(Emit *e) {
  FILE *o = emit_out(e);
  /* i32 arithmetic wraps as NumPy's does, computed in uint32_t so that C
   * has no undefined overflow; a float outside the i32 range (or NaN)
   * casts to INT32_MIN, as NumPy's cast does on x86. */
  fprintf(o, "static inline int32_t shd_idiv(int32_t a, int32_t b) {\n"
             "  if (b == 0)\n    shd_fatal(\"integer division by zero (%%d / 0)\", (int)a);\n"
             "  if (b == -1 && a == INT32_MIN)\n"
             "    shd_fatal(\"integer division overflow (-2147483648 / -1 does not fit in i32)\");\n"
             "  return a / b;\n}\n");
  fprintf(o, "static inline int32_t shd_addi(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }\n");
  fprintf(o, "static inline int32_t shd_subi(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }\n");
  fprintf(o, "static inline int32_t shd_muli(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }\n");
  fprintf(o, "static inline int32_t shd_negi(int32_t a) { return (int32_t)(0u - (uint32_t)a); }\n");
  fprintf(o, "static inline int32_t shd_f2i(double x) {\n"
             "  return x > -2147483649.0 && x < 2147483648.0 ? (int32_t)x : INT32_MIN;\n}\n");
  fprintf(o, "static inline int32_t shd_mod_i32(int32_t a, int32_t b) {\n"
             "  if (b == 0)\n    shd_fatal(\"integer remainder by zero\");\n"
             "  if (b == -1)\n    return 0;\n"
             "  int32_t r = a %% b;\n  return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n}\n");
  fprintf(o, "static inline int32_t shd_pow_i32(int32_t a, int32_t b) {\n"
             "  if (b < 0)\n    shd_fatal(\"integers to negative integer powers are not allowed (%%d ** %%d)\", a, b);\n"
             "  uint32_t r = 1, x = (uint32_t)a;\n"
             "  for (; b; b >>= 1, x *= x)\n    if (b & 1)\n      r *= x;\n  return (int32_t)r;\n}\n");
  for (int k = 0; k < 3; k++) {   /* f32, f64, i32: bool has no arithmetic */
    DType dt = (DType)k;
    const char *n = ty_dtype_name(dt), *t = ty_dtype_c(dt);
    const char *nan = ty_is_float(dt) ? " || a != a" : "";
    fprintf(o, "static inline %s shd_max_%s(%s a, %s b) { return (a > b%s) ? a : b; }\n", t, n, t, t, nan);
    fprintf(o, "static inline %s shd_min_%s(%s a, %s b) { return (a < b%s) ? a : b; }\n", t, n, t, t, nan);
    if (!ty_is_float(dt))
      continue;
    const char *f = dt == DT_F32 ? "f" : "";
    fprintf(o, "static inline %s shd_pow_%s(%s a, %s b) { return pow%s(a, b); }\n", t, n, t, t, f);
    fprintf(o, "static inline %s shd_mod_%s(%s a, %s b) {\n  %s r = fmod%s(a, b);\n"
               "  return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n}\n", t, n, t, t, t, f);
  }
  const Module *mod = emit_module_of(e);
  int nun = op_unary_count();
  bool *used = mem_calloc((size_t)nun * DT__COUNT, sizeof(bool));
  for (int i = 0; i < mod->funcs.len; i++)
    if (emit_unit_holds(e, i))
      mark_unary(((Func *)mod->funcs.data[i])->body, used);
  for (int un = 0; un < nun; un++)
    for (int dt = 0; dt < DT__COUNT; dt++)
      if (used[un * DT__COUNT + dt])
        op_unary_helper(o, un, (DType)dt);
  free(used);
  fputc('\n', o);
}

/* ---- the tables --------------------------------------------------------------------- */

static const char *binary_variant(const Inst *in) { return binop_names[in->fn]; }

static const OpDef ops[] = {
    {.op = IR_BINARY, .name = "binary", .flags = OPF_ELEMENTWISE, .variant = binary_variant, .variants = binop_names, .vjp = vjp_binary,
     .partition = part_elementwise, .expr = binary_expr, .infer = infer_elementwise},
    {.op = IR_SELECT, .name = "select", .flags = OPF_ELEMENTWISE, .vjp = vjp_select, .partition = part_elementwise,
     .expr = select_expr, .infer = infer_elementwise},
    {.op = IR_CAST, .name = "cast", .flags = OPF_ELEMENTWISE, .vjp = vjp_cast, .partition = part_as_result,
     .expr = cast_expr, .infer = infer_cast},
    {0},
};

#define OPERATOR(text, op)                                                                                    \
  {.name = text, .code = op, .flags = BIF_ELEMENTWISE, .check = check_binary_op, .lower = lower_binary_op, .fold = fold_binary_op,            \
   .syntax = SYN_BINARY}
static const BuiltinDef builtins[] = {
    {.name = "maximum", .code = BIN_MAX, .flags = BIF_ELEMENTWISE, .check = check_nary, .lower = lower_nary, .fold = fold_nary},
    {.name = "minimum", .code = BIN_MIN, .flags = BIF_ELEMENTWISE, .check = check_nary, .lower = lower_nary, .fold = fold_nary},
    {.name = "where", .code = E_WHERE, .flags = BIF_ELEMENTWISE, .check = check_nary, .lower = lower_nary, .fold = fold_nary},
    {.name = "cast", .code = E_CAST, .flags = BIF_TYPE_ARG | BIF_ELEMENTWISE, .check = check_cast, .lower = lower_cast, .fold = fold_cast},
    OPERATOR("+", BIN_ADD), OPERATOR("-", BIN_SUB), OPERATOR("*", BIN_MUL), OPERATOR("/", BIN_DIV),
    OPERATOR("**", BIN_POW), OPERATOR("%", BIN_MOD), OPERATOR("<", BIN_LT), OPERATOR("<=", BIN_LE),
    OPERATOR(">", BIN_GT), OPERATOR(">=", BIN_GE), OPERATOR("==", BIN_EQ), OPERATOR("!=", BIN_NE),
    OPERATOR("&", BIN_AND), OPERATOR("|", BIN_OR),
    {0},
};

const OpFamily op_elementwise_family = {
    .name = "elementwise",
    .ops = ops,
    .builtins = builtins,
    .preamble = preamble,
};
