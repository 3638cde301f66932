/* rules.c: the sharding propagation rules of typing-rules.md as pure
 * functions from operand types to a result type.
 *
 * Each rule either fills *out and returns true, or reports one error with
 * the rule's code, the operand types and a fix, and returns false. The
 * typechecker calls them on source expressions; autodiff calls them to type
 * the operations it creates; so one rule text holds for both. The rule's
 * text from typing-rules.md is summarised above each function.
 *
 * Manual bodies (RuleCtx.manual != 0) use the same rules on the explicit
 * axes, and the VMA rules (section 2.2) on the manual ones.
 */
#include "shdc.h"

#define TS(t) ty_str(c->mesh, (t))

static bool reporting(RuleCtx *c) { return c->pos.file != NULL; }

__attribute__((format(printf, 3, 4))) static bool fail(RuleCtx *c, const char *code, const char *fmt, ...) {
  if (!reporting(c))
    return false;
  va_list ap;
  va_start(ap, fmt);
  diag_verror(c->pos, code, fmt, ap);
  va_end(ap);
  return false;
}

static const char *axes_str(RuleCtx *c, AxisSet s) { return ty_axes_str(c->mesh, s); }

/* ---- dtypes ---------------------------------------------------------------- */

/* The dtype of an elementwise result. Weak operands (literals, constants)
 * adopt the others' dtype; an int literal may become a float, a float
 * literal may not become an int. */
static bool join_dtypes(RuleCtx *c, int n, const Type *const *ops, DType *out) {
  int strong = -1, weak_float = -1, weak_any = -1;
  for (int k = 0; k < n; k++) {
    const Type *t = ops[k];
    if (t->weak) {
      if (weak_any < 0)
        weak_any = k;
      if (ty_is_float(t->dtype) && weak_float < 0)
        weak_float = k;
      continue;
    }
    if (strong < 0) {
      strong = k;
    } else if (ops[strong]->dtype != t->dtype) {
      DType want = ops[strong]->dtype == DT_F64 || t->dtype == DT_F64 ? DT_F64 : ops[strong]->dtype;
      return fail(c, "E_DTYPE", "%s: operands have different dtypes, %s and %s; convert one with cast(x, %s)",
                  c->opname, TS(ops[strong]), TS(t), ty_dtype_name(want));
    }
  }
  if (strong < 0) {
    *out = weak_float >= 0 ? ops[weak_float]->dtype : ops[weak_any]->dtype;
    return true;
  }
  DType dt = ops[strong]->dtype;
  if (weak_float >= 0 && !ty_is_float(dt))
    return fail(c, "E_DTYPE", "%s: a float literal cannot combine with %s; convert with cast(x, f32)", c->opname,
                TS(ops[strong]));
  *out = dt;
  return true;
}

/* ---- shapes ---------------------------------------------------------------- */

/* NumPy broadcasting: trailing alignment, size-1 dims stretch. */
bool rule_broadcast_shapes(RuleCtx *c, int n, const Type *const *ops, Type *out) {
  int rank = 0;
  for (int k = 0; k < n; k++)
    if (ops[k]->rank > rank)
      rank = ops[k]->rank;
  int64_t shape[MAX_RANK];
  for (int d = 0; d < rank; d++) {
    shape[d] = 1;
    for (int k = 0; k < n; k++) {
      int od = d - (rank - ops[k]->rank);
      if (od < 0)
        continue;
      int64_t s = ops[k]->shape[od];
      if (s == shape[d] || s == 1)
        continue;
      if (shape[d] == 1) {
        shape[d] = s;
        continue;
      }
      const Type *other = NULL;
      for (int j = 0; j < k; j++) {
        int jd = d - (rank - ops[j]->rank);
        if (jd >= 0 && ops[j]->shape[jd] != 1)
          other = ops[j];
      }
      return fail(c, "E_SHAPE",
                  "%s: shapes do not broadcast: %s and %s differ in dim %d (%lld vs %lld, counting from the end "
                  "as NumPy does); sizes must be equal or 1",
                  c->opname, other ? TS(other) : "?", TS(ops[k]), d, (long long)shape[d], (long long)s);
    }
  }
  *out = ty_array(DT_F32, rank, shape);
  return true;
}

/* ---- VMA: the auto-pcast of typing-rules 2.2 ----------------------------- */

/* For an operand with manual states (V, U, R) that must become varying over
 * `target`: the axes it is missing are cast invariant->varying (pvary), or,
 * when they are exactly its reduced set, reduced->varying. */
bool rule_vma_cast(RuleCtx *c, const Type *op, AxisSet target, AxisSet *pvary, AxisSet *r2v) {
  AxisSet missing = target & ~op->V;
  *pvary = *r2v = 0;
  if (!missing)
    return true;
  if (missing & op->U)
    return fail(c, "E_VMA",
                "%s: operand %s is unreduced over %s where another operand is varying; reduce it first with "
                "psum(x, %s)",
                c->opname, TS(op), axes_str(c, missing & op->U), ty_axes_arg(c->mesh, missing & op->U));
  if (missing & op->R) {
    if (missing != op->R)
      return fail(c, "E_VMA",
                  "%s: operand %s is reduced over %s but would need to become varying over %s only; the implicit "
                  "reduced->varying cast takes exactly its reduced axes, so cast it yourself: pcast(x, %s, "
                  "to=varying), and make the other operand varying over the same axes",
                  c->opname, TS(op), axes_str(c, op->R), axes_str(c, missing), ty_axes_arg(c->mesh, op->R));
    *r2v = missing;
    return true;
  }
  *pvary = missing;
  return true;
}

static AxisSet vma_target(int n, const Type *const *ops) {
  AxisSet v = 0;
  for (int k = 0; k < n; k++)
    if (!ops[k]->weak)
      v |= ops[k]->V;
  return v;
}

/* Applies the casts to copies of the operands. */
static bool vma_unify(RuleCtx *c, int n, const Type *const *ops, Type *eff, AxisSet *vout) {
  AxisSet target = vma_target(n, ops);
  for (int k = 0; k < n; k++) {
    eff[k] = *ops[k];
    if (ops[k]->weak) {
      eff[k].V = 0;
      continue;
    }
    AxisSet pv, rv;
    if (!rule_vma_cast(c, ops[k], target, &pv, &rv))
      return false;
    eff[k].V |= pv | rv;
    eff[k].R &= ~rv;
  }
  *vout = target;
  return true;
}

/* ---- unreduced and reduced in elementwise ops (3.4, 3.5, D2, D7) ---------- */

/* How to reduce u's pending sum over A: reshard in the global view, psum
 * over manual axes (a reshard cannot change a manual axis's state). */
static const char *reduce_fix(RuleCtx *c, const Type *u, AxisSet A) {
  AxisSet m = A & c->manual;
  Type rep = *u;
  rep.U &= ~(A & ~m);
  rep.weak = false;
  const char *psum = arena_printf("psum(x, %s)", ty_axes_arg(c->mesh, m));
  if (m == A)
    return psum;
  const char *rs = arena_printf("reshard(x, %s)", TS(&rep));
  return m ? arena_printf("%s and %s", psum, rs) : rs;
}

/* How to mark y reduced over A: reshard (free) in the global view, pcast
 * over manual axes. */
static const char *reduced_fix(RuleCtx *c, const Type *y, AxisSet A) {
  AxisSet m = A & c->manual;
  Type want = *y;
  want.R |= A & ~m;
  want.weak = false;
  const char *pc = arena_printf("pcast(y, %s, to=reduced)", ty_axes_arg(c->mesh, m));
  if (m == A)
    return pc;
  const char *rs = arena_printf("reshard(y, %s)", TS(&want));
  return m ? arena_printf("%s and %s", pc, rs) : rs;
}

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
                    c->opname, TS(u), axes_str(c, A), reduce_fix(c, &rep, A));
      }
      if (eff[k].U != A) {
        const Type *o = &eff[k];
        if (!o->U)
          return fail(c, "E_UR",
                      "%s: %s is unreduced over %s while %s is not; reduce it first with %s (an all-reduce), or make "
                      "both unreduced over the same axes",
                      c->opname, TS(u), axes_str(c, A), TS(o), reduce_fix(c, u, A));
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
                  c->opname, TS(&eff[0]), TS(&eff[1]), reduce_fix(c, &eff[1], eff[1].U));
    if (op == BIN_DIV && first != 0)
      return fail(c, "E_UR",
                  "%s: the denominator %s is unreduced; reduce it first with %s (an all-reduce)",
                  c->opname, TS(u), reduce_fix(c, u, A));
    for (int k = 0; k < n; k++) {
      if (k == first || eff[k].weak)
        continue;
      if (eff[k].R != A) {
        Type base = eff[k];
        base.R = 0;
        return fail(c, "E_UR",
                    "%s: %s is unreduced over %s, so its partner must be reduced over exactly %s, but it is %s; "
                    "write %s to mark it reduced (free: no communication)",
                    c->opname, TS(u), axes_str(c, A), axes_str(c, A), TS(&eff[k]), reduced_fix(c, &base, A));
      }
    }
    *U = A;
    *consumedR = A;
    return true;
  }
  return fail(c, "E_UR",
              "%s is not linear, so its operand %s cannot be unreduced (a pending sum over %s); reduce it first "
              "with %s",
              c->opname, TS(u), axes_str(c, A), reduce_fix(c, u, A));
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
                  c->opname, TS(&eff[who]), TS(&eff[k]), TS(&want));
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
                  c->opname, TS(&eff[who]), axes_str(c, R), TS(t), TS(&want));
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
                c->opname, TS(&eff[who]), axes_str(c, R), axes_str(c, R), TS(t), reduced_fix(c, t, R & ~t->R));
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
                    ty_check_wellformed(c->mesh, &want, (Pos){0}, c->manual, NULL) ? TS(&want) : "...");
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
      for (int k = 0; k < n; k++) {
        int od = d - (rank - eff[k].rank);
        if (od < 0 || !(ty_spec_axes(eff[k].spec[od]) & a & seen))
          continue;
        Type want = eff[k];
        want.spec[od].n = 0;
        want.weak = false;
        fix = arena_printf("reshard one operand first, e.g. reshard(y, %s)", TS(&want));
      }
      return fail(c, "E_DUP",
                  "%s with inputs %s produces an illegally sharded result %s (mesh axis %s shards two dims); %s",
                  c->opname, ops_str, TS(out), axes_str(c, a & seen), fix);
    }
    seen |= a;
  }
  return true;
}

static bool check_elementwise_dtype(RuleCtx *c, int op, int n, const Type *const *ops, DType dt) {
  if (dt == DT_BOOL && !(op == BIN_EQ || op == BIN_NE || op == BIN_AND || op == BIN_OR))
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
  if (!join_dtypes(c, 2, ops + 1, &dt))
    return false;
  Type shape;
  if (!rule_broadcast_shapes(c, 3, ops, &shape))
    return false;
  Type eff[3];
  AxisSet V;
  if (!vma_unify(c, 3, ops, eff, &V))
    return false;
  if (eff[0].U)
    return fail(c, "E_UR", "where: the condition %s is unreduced; a condition cannot be a pending sum", TS(&eff[0]));
  if (eff[1].U != eff[2].U) {
    const Type *u = eff[1].U ? &eff[1] : &eff[2], *o = eff[1].U ? &eff[2] : &eff[1];
    return fail(c, "E_UR",
                "where: the cases must be unreduced over the same axes, but they are %s and %s; select is linear "
                "only when both are pending sums over the same axes: reduce with %s first",
                TS(u), TS(o), reduce_fix(c, u, u->U));
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
bool rule_elementwise(RuleCtx *c, int op, int n, const Type *const *ops, Type *out) {
  if (op < 0)
    return rule_select(c, ops, out);
  DType dt = DT_F32;
  if (!join_dtypes(c, n, ops, &dt) || !check_elementwise_dtype(c, op, n, ops, dt))
    return false;
  Type shape;
  if (!rule_broadcast_shapes(c, n, ops, &shape))
    return false;
  Type eff[4];
  AxisSet V;
  if (!vma_unify(c, n, ops, eff, &V))
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

/* ---- unary elementwise (1.2) -------------------------------------------- */

static const char *unop_name(int op) {
  static const char *names[UN__COUNT] = {
      [UN_NEG] = "negation", [UN_EXP] = "exp", [UN_LOG] = "log", [UN_SIN] = "sin", [UN_COS] = "cos",
      [UN_TANH] = "tanh", [UN_SQRT] = "sqrt", [UN_ABS] = "abs", [UN_RELU] = "relu", [UN_SIGMOID] = "sigmoid",
      [UN_NOT] = "not", [UN_SIGN] = "sign", [UN_STEP] = "step",
  };
  return names[op];
}

bool rule_unary(RuleCtx *c, int op, const Type *x, Type *out) {
  bool float_only = !(op == UN_NEG || op == UN_ABS || op == UN_RELU || op == UN_SIGN || op == UN_STEP || op == UN_NOT);
  if (x->dtype == DT_BOOL && op != UN_NOT)
    return fail(c, "E_DTYPE", "%s of a bool value (%s); convert with cast(x, f32)", unop_name(op), TS(x));
  if (float_only && !ty_is_float(x->dtype) && !x->weak)
    return fail(c, "E_DTYPE", "%s needs a float operand, not %s; convert with cast(x, f32)", unop_name(op), TS(x));
  if (x->U && op != UN_NEG)
    return fail(c, "E_UR",
                "%s is not linear, so its operand %s cannot be unreduced (a pending sum over %s); reduce it first "
                "with %s",
                unop_name(op), TS(x), axes_str(c, x->U), reduce_fix(c, x, x->U));
  Type r = *x;
  if (float_only && r.weak && !ty_is_float(r.dtype))
    r.dtype = DT_F32;
  if (op == UN_STEP)
    r.dtype = x->dtype;
  *out = r;
  return true;
}

/* ---- dot_general (1.4) --------------------------------------------------- */

static bool check_annot_matches(RuleCtx *c, const Type *annot, const Type *computed, const char *what) {
  if (annot->dtype != computed->dtype)
    return fail(c, "E_DTYPE", "%s: the annotation %s has dtype %s but the result is %s", what, TS(annot),
                ty_dtype_name(annot->dtype), ty_dtype_name(computed->dtype));
  bool same = annot->rank == computed->rank;
  for (int d = 0; same && d < annot->rank; d++)
    same = annot->shape[d] == computed->shape[d];
  if (!same) {
    Type plain = ty_strip_sharding(computed);
    return fail(c, "E_SHAPE", "%s: the annotation %s does not have the result's shape %s", what, TS(annot),
                TS(&plain));
  }
  if (annot->V != computed->V) {
    AxisSet add = annot->V & ~computed->V, drop = computed->V & ~annot->V;
    const char *fix =
        drop ? ((annot->U & drop) == drop
                    ? arena_printf("to leave a pending sum, pcast(x, %s, to=unreduced) the result of the operation",
                                   ty_axes_arg(c->mesh, drop))
                    : arena_printf("combine the devices' results with a collective afterwards (psum(x, %s), ...)",
                                   ty_axes_arg(c->mesh, drop)))
             : arena_printf("pcast(x, %s, to=varying) an operand", ty_axes_arg(c->mesh, add));
    return fail(c, "E_VMA",
                "%s: the annotation %s is varying over {%s} but the result is varying over {%s}; an annotation "
                "cannot change the varying set: %s",
                what, TS(annot), axes_str(c, annot->V), axes_str(c, computed->V), fix);
  }
  return true;
}

/* The result of an annotated operation: the annotation, except that in a
 * manual body the manual axes keep the states U, R the operation computes
 * (an annotation cannot make a manual axis unreduced or reduced; pcast and
 * the collectives do that, 2.3). */
static bool manual_states(RuleCtx *c, const Type *annot, AxisSet U, AxisSet R, Type *out) {
  AxisSet m = c->manual;
  *out = *annot;
  out->weak = false;
  if (!m)
    return true;
  AxisSet du = (annot->U ^ U) & m, dr = (annot->R ^ R) & m;
  if (du || dr) {
    AxisSet ax = du ? du : dr;
    bool says = ((du ? annot->U : annot->R) & ax) != 0;
    const char *st = du ? "unreduced" : "reduced", *a = ty_axes_arg(c->mesh, ax);
    return fail(c, "E_UR",
                "%s: the annotation %s %s %s over manual axis %s, but the result %s; in a manual body an annotation "
                "cannot change the state of a manual axis: %s",
                c->opname, TS(annot), says ? "is" : "is not", st, axes_str(c, ax), says ? "is not" : "is",
                says ? (du ? arena_printf("pcast(x, %s, to=unreduced) a varying result", a)
                           : arena_printf("pcast(x, %s, to=reduced) an invariant result", a))
                     : (du ? arena_printf("reduce it with psum(x, %s), or write <U:%s> in the annotation", a,
                                          axes_str(c, ax))
                           : arena_printf("write <R:%s> in the annotation", axes_str(c, ax))));
  }
  out->U = (annot->U & ~m) | (U & m);
  out->R = (annot->R & ~m) | (R & m);
  return true;
}

static AxisSet contract_axes(const Type *t, const int *dims, int n) {
  AxisSet a = 0;
  for (int i = 0; i < n; i++)
    a |= ty_spec_axes(t->spec[dims[i]]);
  return a;
}

static bool dot_shapes(RuleCtx *c, const Type *l, const Type *r, const DotDims *d, Type *out) {
  bool used_l[MAX_RANK] = {0}, used_r[MAX_RANK] = {0};
  for (int i = 0; i < d->nbatch; i++) {
    if (l->shape[d->lhs_batch[i]] != r->shape[d->rhs_batch[i]])
      return fail(c, "E_SHAPE", "%s: batch dims differ in size: %s and %s", c->opname, TS(l), TS(r));
    used_l[d->lhs_batch[i]] = used_r[d->rhs_batch[i]] = true;
  }
  for (int i = 0; i < d->ncontract; i++) {
    int a = d->lhs_contract[i], b = d->rhs_contract[i];
    if (l->shape[a] != r->shape[b])
      return fail(c, "E_SHAPE",
                  "%s: contracting dims differ in size: dim %d of %s (%lld) and dim %d of %s (%lld)", c->opname, a,
                  TS(l), (long long)l->shape[a], b, TS(r), (long long)r->shape[b]);
    used_l[a] = used_r[b] = true;
  }
  int64_t shape[MAX_RANK];
  DimSpec spec[MAX_RANK];
  int rank = 0;
  for (int i = 0; i < d->nbatch; i++) {
    spec[rank] = l->spec[d->lhs_batch[i]];
    shape[rank++] = l->shape[d->lhs_batch[i]];
  }
  for (int i = 0; i < l->rank; i++)
    if (!used_l[i]) {
      if (rank >= MAX_RANK)
        return fail(c, "E_SHAPE", "%s: the result would have more than %d dims", c->opname, MAX_RANK);
      spec[rank] = l->spec[i];
      shape[rank++] = l->shape[i];
    }
  for (int i = 0; i < r->rank; i++)
    if (!used_r[i]) {
      if (rank >= MAX_RANK)
        return fail(c, "E_SHAPE", "%s: the result would have more than %d dims", c->opname, MAX_RANK);
      spec[rank] = r->spec[i];
      shape[rank++] = r->shape[i];
    }
  *out = ty_array(l->dtype, rank, shape);
  for (int i = 0; i < rank; i++)
    out->spec[i] = spec[i];
  return true;
}

/* The result types a user could choose for an ambiguous contraction, as a
 * readable list for the E_CONTRACT fix. */
static const char *contract_choices(RuleCtx *c, const Type *plain, AxisSet axes) {
  Type rep = *plain, u = *plain;
  u.U = axes;
  const char *s = arena_printf("`as %s` (all-reduce)", TS(&rep));
  int single = -1;
  for (int a = 0; a < c->mesh->naxes; a++)
    if (axes == (1u << a))
      single = a;
  if (single >= 0) {
    for (int d = 0; d < plain->rank; d++) {
      if (plain->spec[d].n || plain->shape[d] % c->mesh->sizes[single])
        continue;
      Type sc = *plain;
      sc.spec[d].n = 1;
      sc.spec[d].axes[0] = (int8_t)single;
      s = arena_printf("%s, `as %s` (reduce-scatter)", s, TS(&sc));
      break;
    }
  }
  return arena_printf("%s or `as %s` (no communication)", s, TS(&u));
}

bool rule_dot(RuleCtx *c, const Type *lhs, const Type *rhs, const DotDims *d, const Type *annot, Type *out) {
  if (lhs->dtype != rhs->dtype && !lhs->weak && !rhs->weak)
    return fail(c, "E_DTYPE", "%s: operands have different dtypes, %s and %s; convert one with cast(x, %s)",
                c->opname, TS(lhs), TS(rhs), ty_dtype_name(DT_F64));
  if (lhs->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of bool arrays (%s and %s); convert with cast(x, f32)", c->opname, TS(lhs),
                TS(rhs));
  for (int k = 0; k < 2; k++) {
    const Type *t = k ? rhs : lhs;
    if (t->U)
      return fail(c, "E_UR",
                  "%s: the %s operand %s is unreduced (a pending sum over %s); a contraction cannot take pending "
                  "sums; reduce it first with %s",
                  c->opname, k ? "right" : "left", TS(t), axes_str(c, t->U), reduce_fix(c, t, t->U));
  }
  const Type *ops[2] = {lhs, rhs};
  Type eff[2];
  AxisSet V;
  if (!vma_unify(c, 2, ops, eff, &V))
    return false;
  Type r;
  if (!dot_shapes(c, &eff[0], &eff[1], d, &r))
    return false;
  r.V = V;
  if (annot) {
    if (!check_annot_matches(c, annot, &r, c->opname))
      return false;
    if (annot->U & ~c->manual) {
      AxisSet explicitU = annot->U & ~c->manual;
      for (int i = 0; i < d->ncontract; i++) {
        DimSpec a = eff[0].spec[d->lhs_contract[i]], b = eff[1].spec[d->rhs_contract[i]];
        if (!ty_spec_equal(a, b)) {
          Type want = eff[1];
          for (int k = 0; k < d->ncontract; k++)
            want.spec[d->rhs_contract[k]] = eff[0].spec[d->lhs_contract[k]];
          want.weak = false;
          return fail(c, "E_UR",
                      "%s: an unreduced result needs the contracting dims sharded identically on both sides, but "
                      "they are %s and %s; reshard one operand, e.g. reshard(y, %s)",
                      c->opname, TS(&eff[0]), TS(&eff[1]), TS(&want));
        }
      }
      AxisSet ca = contract_axes(&eff[0], d->lhs_contract, d->ncontract);
      if (explicitU != ca) {
        Type want = *annot;
        want.U = ca | (annot->U & c->manual);
        return fail(c, "E_UR",
                    "%s: the unreduced axes of %s must equal the axes sharding the contracting dims, which are {%s}; "
                    "annotate %s",
                    c->opname, TS(annot), axes_str(c, ca), TS(&want));
      }
    }
    return manual_states(c, annot, 0, 0, out);
  }
  for (int i = 0; i < d->nbatch; i++) {
    DimSpec a = eff[0].spec[d->lhs_batch[i]], b = eff[1].spec[d->rhs_batch[i]];
    if (!ty_spec_equal(a, b)) {
      Type want = eff[1];
      for (int k = 0; k < d->nbatch; k++)
        want.spec[d->rhs_batch[k]] = eff[0].spec[d->lhs_batch[k]];
      want.weak = false;
      return fail(c, "E_BATCH",
                  "%s: batch dims are sharded differently, %s and %s; batch dims are never gathered implicitly: "
                  "reshard one operand (e.g. reshard(y, %s)), or annotate the result type",
                  c->opname, TS(&eff[0]), TS(&eff[1]),
                  ty_check_wellformed(c->mesh, &want, (Pos){0}, c->manual, NULL) ? TS(&want) : "...");
    }
  }
  AxisSet both = 0;
  for (int i = 0; i < d->ncontract; i++) {
    DimSpec a = eff[0].spec[d->lhs_contract[i]], b = eff[1].spec[d->rhs_contract[i]];
    if (a.n && b.n)
      both |= ty_spec_axes(a) | ty_spec_axes(b);
  }
  if (both) {
    Type plain = r;
    return fail(c, "E_CONTRACT",
                "%s: contracting dims are sharded on both sides (%s and %s) and it is ambiguous how the result "
                "should be sharded; annotate the result: %s",
                c->opname, TS(&eff[0]), TS(&eff[1]), contract_choices(c, &plain, both));
  }
  AxisSet seen = 0;
  for (int i = 0; i < r.rank; i++) {
    AxisSet a = ty_spec_axes(r.spec[i]);
    if (a & seen) {
      Type want = r;
      want.spec[i].n = 0;
      return fail(c, "E_DUP",
                  "%s of %s and %s produces an illegally sharded result %s (mesh axis %s shards two dims); "
                  "annotate the result type (e.g. `as %s`) or reshard an operand",
                  c->opname, TS(&eff[0]), TS(&eff[1]), TS(&r), axes_str(c, a & seen), TS(&want));
    }
    seen |= a;
  }
  *out = r;
  return true;
}

/* ---- reductions (1.5, D3) ------------------------------------------------ */

bool rule_reduce(RuleCtx *c, int redop, const Type *x, unsigned dims, const Type *annot, Type *out) {
  if (x->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of a bool array (%s); convert with cast(x, f32)", c->opname, TS(x));
  if (redop != RED_SUM && x->U)
    return fail(c, "E_UR",
                "%s of %s: the operand is unreduced (a pending sum over %s), and the %s of a sum's pieces is not "
                "the %s of the sum; reduce first with %s",
                c->opname, TS(x), axes_str(c, x->U), c->opname, c->opname, reduce_fix(c, x, x->U));
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
  if (!check_annot_matches(c, annot, &r, c->opname))
    return false;
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
  return manual_states(c, annot, x->U & m, x->R & m, out);
}

/* ---- transpose (1.6) ----------------------------------------------------- */

bool rule_transpose(RuleCtx *c, const Type *x, const int *perm, Type *out) {
  unsigned seen = 0;
  for (int i = 0; i < x->rank; i++) {
    if (perm[i] < 0 || perm[i] >= x->rank || (seen & (1u << perm[i])))
      return fail(c, "E_SHAPE", "transpose: perm must be a permutation of 0..%d for %s", x->rank - 1, TS(x));
    seen |= 1u << perm[i];
  }
  Type r = *x;
  for (int i = 0; i < x->rank; i++) {
    r.shape[i] = x->shape[perm[i]];
    r.spec[i] = x->spec[perm[i]];
  }
  r.weak = false;
  *out = r;
  return true;
}

/* ---- reshape (1.7) ------------------------------------------------------- */

typedef struct {
  int n;
  int64_t size[MAX_RANK];
  int pos[MAX_RANK];   /* index in the full dim list */
} NonOne;

static NonOne non_one(int rank, const int64_t *shape) {
  NonOne r = {0};
  for (int d = 0; d < rank; d++)
    if (shape[d] != 1) {
      r.size[r.n] = shape[d];
      r.pos[r.n++] = d;
    }
  return r;
}

/* why: what rule 1.7 could not do, for the message. */
static bool reshape_fail(RuleCtx *c, const Type *x, const Type *plain_out, const char *why) {
  return fail(c, "E_RESHAPE",
              "reshape of %s to %s: %s, so the sharded data would have to move between devices; annotate the "
              "result to say where it goes (e.g. `as %s`: gather, reshape, slice) or reshard the operand first",
              TS(x), TS(plain_out), why, TS(plain_out));
}

/* Hands the split dim's axes to its pieces, major piece first. */
static bool split_axes(RuleCtx *c, const Type *x, DimSpec s, const int64_t *pieces, int npieces, DimSpec *outspec,
                       const Type *plain_out) {
  int next = 0;
  for (int i = 0; i < npieces; i++) {
    int64_t p = pieces[i];
    DimSpec ps = {0};
    while (p > 1 && next < s.n) {
      int a = s.axes[next];
      if (p % c->mesh->sizes[a] != 0)
        return reshape_fail(c, x, plain_out,
                            arena_printf("the split dim is sharded over %s, but its piece of size %lld is not "
                                         "divisible by %d (the size of %s)",
                                         ty_spec_str(c->mesh, s) + 1, (long long)pieces[i], c->mesh->sizes[a],
                                         c->mesh->names[a]));
      p /= c->mesh->sizes[a];
      ps.axes[ps.n++] = (int8_t)a;
      next++;
    }
    outspec[i] = ps;
  }
  if (next < s.n)
    return reshape_fail(c, x, plain_out,
                        arena_printf("the split dim's pieces cannot take all of its axes %s",
                                     ty_spec_str(c->mesh, s) + 1));
  return true;
}

/* Walks two lists of non-1 sizes together: equal sizes pair up, and in one
 * place one element of `one` is the product of a run of >= 2 elements of
 * `many`. Finds that place (*at_one, *at_many, run length *len). */
static bool find_run(const NonOne *one, const NonOne *many, int *at_one, int *at_many, int *len) {
  int i = 0, j = 0;
  *len = 0;
  while (i < one->n && j < many->n) {
    if (one->size[i] == many->size[j]) {
      i++, j++;
      continue;
    }
    if (*len)
      return false;
    int64_t prod = many->size[j];
    int k = j + 1;
    while (k < many->n && prod < one->size[i])
      prod *= many->size[k++];
    if (prod != one->size[i] || k - j < 2)
      return false;
    *at_one = i;
    *at_many = j;
    *len = k - j;
    i++;
    j = k;
  }
  return *len && i == one->n && j == many->n;
}

static bool reshape_specs(RuleCtx *c, const Type *x, Type *r) {
  bool any = false;
  for (int d = 0; d < x->rank; d++)
    any |= x->spec[d].n > 0;
  for (int d = 0; d < r->rank; d++)
    r->spec[d].n = 0;
  if (!any)
    return true;
  NonOne a = non_one(x->rank, x->shape), b = non_one(r->rank, r->shape);
  /* Only singleton dims inserted or removed. */
  bool same = a.n == b.n;
  for (int i = 0; same && i < a.n; i++)
    same = a.size[i] == b.size[i];
  if (same) {
    for (int i = 0; i < a.n; i++)
      r->spec[b.pos[i]] = x->spec[a.pos[i]];
    return true;
  }
  int ia, ib, len;
  DimSpec outspec[MAX_RANK];
  memset(outspec, 0, sizeof outspec);
  /* Split: one operand dim becomes a run of >= 2 output dims. */
  if (find_run(&a, &b, &ia, &ib, &len)) {
    for (int k = 0; k < b.n; k++) {
      if (k < ib)
        outspec[k] = x->spec[a.pos[k]];
      else if (k >= ib + len)
        outspec[k] = x->spec[a.pos[k - len + 1]];
    }
    if (!split_axes(c, x, x->spec[a.pos[ia]], &b.size[ib], len, &outspec[ib], r))
      return false;
    for (int i = 0; i < b.n; i++)
      r->spec[b.pos[i]] = outspec[i];
    return true;
  }
  /* Merge: a run of >= 2 operand dims becomes one output dim. */
  if (find_run(&b, &a, &ib, &ia, &len)) {
    for (int k = 0; k < b.n; k++) {
      if (k < ib)
        outspec[k] = x->spec[a.pos[k]];
      else if (k > ib)
        outspec[k] = x->spec[a.pos[k + len - 1]];
    }
    DimSpec m = {0};
    int last_sharded = -1;
    for (int k = ia; k < ia + len; k++)
      if (x->spec[a.pos[k]].n)
        last_sharded = k;
    for (int k = ia; k <= last_sharded; k++) {
      DimSpec sp = x->spec[a.pos[k]];
      if (!sp.n)
        return reshape_fail(c, x, r, "the merged dims have an unsharded dim before a sharded one");
      for (int q = 0; q < sp.n; q++)
        m.axes[m.n++] = sp.axes[q];
    }
    if (b.size[ib] % ty_spec_parts(c->mesh, m))
      return reshape_fail(c, x, r, "the merged dim is not divisible by its axes");
    outspec[ib] = m;
    for (int i = 0; i < b.n; i++)
      r->spec[b.pos[i]] = outspec[i];
    return true;
  }
  return reshape_fail(c, x, r, "it neither splits one dim nor merges one run of adjacent dims");
}

bool rule_reshape(RuleCtx *c, const Type *x, int rank, const int64_t *shape, const Type *annot, Type *out) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  Type r = ty_array(x->dtype, rank, shape);
  if (n != ty_global_count(x))
    return fail(c, "E_SHAPE", "reshape: %s has %lld elements but the new shape %s has %lld", TS(x),
                (long long)ty_global_count(x), TS(&r), (long long)n);
  r.U = x->U;
  r.R = x->R;
  r.V = x->V;
  if (annot) {
    if (!check_annot_matches(c, annot, &r, "reshape"))
      return false;
    AxisSet m = c->manual;
    if ((annot->U ^ x->U) & ~m || (annot->R ^ x->R) & ~m) {
      Type want = *annot;
      want.U = (x->U & ~m) | (annot->U & m);
      want.R = (x->R & ~m) | (annot->R & m);
      return fail(c, "E_UR",
                  "reshape: the annotation %s must keep the operand's unreduced and reduced axes (%s): annotate %s, "
                  "and reshard before or after to change them",
                  TS(annot), TS(x), TS(&want));
    }
    return manual_states(c, annot, x->U & m, x->R & m, out);
  }
  if (!reshape_specs(c, x, &r))
    return false;
  *out = r;
  return true;
}

/* ---- reshard (1.12) ------------------------------------------------------ */

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
        {"VI", "psum(x, %s), or all_gather(x, %s, dim=k, to=invariant)"}, {"VU", "pcast(x, %s, to=unreduced)"},
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

/* ---- NumPy matmul as dot_general ------------------------------------------ */

/* NumPy's matmul: the batch dims (all but the last two; a 1-D operand has
 * none) are right-aligned and broadcast. Equal sizes make a dot_general
 * batch pair; a size-1 dim against a larger one is dropped from its
 * operand's side, and the other operand's dim becomes a free dim of that
 * operand (as jnp.matmul squeezes it); a dim only one operand has is a free
 * dim of it. The dot's result (batch pairs, lhs free, rhs free) is put in
 * NumPy's order (batch positions, then m, then n) by perm; the dropped
 * dims, size 1, come last in perm and a reshape removes them
 * (*dot_rank > *out_rank). */
bool rule_matmul_dims(RuleCtx *c, const Type *a, const Type *b, DotDims *d, int *perm, int *out_rank,
                      int *dot_rank) {
  memset(d, 0, sizeof *d);
  if (a->rank == 0 || b->rank == 0)
    return fail(c, "E_SHAPE", "@ needs arrays of rank 1 or more, not %s and %s; use * to scale by a scalar",
                TS(a), TS(b));
  d->ncontract = 1;
  d->lhs_contract[0] = a->rank - 1;
  d->rhs_contract[0] = b->rank >= 2 ? b->rank - 2 : 0;
  int ab = a->rank >= 2 ? a->rank - 2 : 0, bb = b->rank >= 2 ? b->rank - 2 : 0;
  int nB = ab > bb ? ab : bb;
  /* Output position of every operand dim: >= 0, or -1 dropped, -2 batch
   * pair (its output position is in pair_pos), -3 contracted. */
  int apos[MAX_RANK], bpos[MAX_RANK], pair_pos[MAX_RANK];
  apos[a->rank - 1] = -3;
  bpos[d->rhs_contract[0]] = -3;
  for (int p = 0; p < nB; p++) {
    int ia = p - (nB - ab), ib = p - (nB - bb);
    if (ia < 0) {
      bpos[ib] = p;
    } else if (ib < 0) {
      apos[ia] = p;
    } else if (a->shape[ia] == b->shape[ib]) {
      apos[ia] = bpos[ib] = -2;
      pair_pos[d->nbatch] = p;
      d->lhs_batch[d->nbatch] = ia;
      d->rhs_batch[d->nbatch++] = ib;
    } else if (a->shape[ia] == 1 || b->shape[ib] == 1) {
      apos[ia] = a->shape[ia] == 1 ? -1 : p;
      bpos[ib] = a->shape[ia] == 1 ? p : -1;
    } else {
      return fail(c, "E_SHAPE",
                  "@: batch dims do not broadcast: dim %d of %s (%lld) and dim %d of %s (%lld); sizes must be equal "
                  "or 1",
                  ia, TS(a), (long long)a->shape[ia], ib, TS(b), (long long)b->shape[ib]);
    }
  }
  int rank = nB;
  if (a->rank >= 2)
    apos[a->rank - 2] = rank++;
  if (b->rank >= 2)
    bpos[b->rank - 1] = rank++;
  int drank = d->nbatch + (a->rank - 1 - d->nbatch) + (b->rank - 1 - d->nbatch);
  if (drank > MAX_RANK)
    return fail(c, "E_SHAPE", "@ of %s and %s: the product would have more than %d dims", TS(a), TS(b), MAX_RANK);
  /* Output position of each dot position (-1: dropped). */
  int out_of[MAX_RANK], q = 0;
  for (int i = 0; i < d->nbatch; i++)
    out_of[q++] = pair_pos[i];
  for (int i = 0; i < a->rank; i++)
    if (apos[i] >= -1)
      out_of[q++] = apos[i];
  for (int i = 0; i < b->rank; i++)
    if (bpos[i] >= -1)
      out_of[q++] = bpos[i];
  if (q != drank)
    diag_ice("matmul dims: %d != %d", q, drank);
  int k = 0;
  for (int o = 0; o < rank; o++)
    for (int i = 0; i < drank; i++)
      if (out_of[i] == o)
        perm[k++] = i;
  for (int i = 0; i < drank; i++)
    if (out_of[i] == -1)
      perm[k++] = i;
  if (k != drank)
    diag_ice("matmul perm: %d != %d", k, drank);
  *out_rank = rank;
  *dot_rank = drank;
  return true;
}
