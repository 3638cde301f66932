/* rules.c: what the sharding rules of typing-rules.md share: failure
 * reporting, dtype joining, NumPy broadcasting of shapes, the VMA
 * auto-pcast (2.2), the fixes for unreduced and reduced operands (3.4,
 * 3.5), and the checks of an annotation used as an out_sharding. Each
 * operation's own rule is a pure function in its family's file (op_*.c).
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
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))

static bool reporting(RuleCtx *c) { return c->pos.file != NULL; }

/* Structured fixes (diag_fix.c) are staged while rule_fail's arguments
 * build the message, and attached by rule_fail to the error it reports: the
 * rules see only types, so a fix names an operand by its index (0 = left
 * operand, a call's k-th positional argument) and diag_fix.c finds its
 * source text. */
typedef struct {
  bool annotate;
  int operand;
  const char *before, *after, *what;
} StagedFix;
static StagedFix staged[4];
static int nstaged;

const char *rule_stage_wrap(const char *text, int k, const char *before, const char *after, const char *what) {
  if (k >= 0 && nstaged < 4)
    staged[nstaged++] = (StagedFix){false, k, before, after, what};
  return text;
}

const char *rule_stage_reshard(const char *text, int k, const char *type, const char *what) {
  return rule_stage_wrap(text, k, "reshard(", arena_printf(", %s)", type), what);
}

const char *rule_stage_annotate(const char *text, const char *type, const char *what) {
  if (nstaged < 4)
    staged[nstaged++] = (StagedFix){true, 0, type, NULL, what};
  return text;
}

static void attach_staged(bool report) {
  for (int i = 0; report && i < nstaged; i++) {
    const StagedFix *f = &staged[i];
    if (f->annotate)
      diag_fix_annotate(f->before, f->what);
    else
      diag_fix_wrap_operand(f->operand, f->before, f->after, f->what);
  }
  nstaged = 0;
}

bool rule_fail(RuleCtx *c, const char *code, const char *fmt, ...) {
  if (!reporting(c)) {
    attach_staged(false);
    return false;
  }
  va_list ap;
  va_start(ap, fmt);
  diag_verror(c->pos, code, fmt, ap);
  va_end(ap);
  attach_staged(true);
  return false;
}

#define fail rule_fail

static const char *axes_str(RuleCtx *c, AxisSet s) { return ty_axes_str(c->mesh, s); }

/* ---- dtypes ---------------------------------------------------------------- */

/* The dtype of an elementwise result. Weak operands (literals, constants)
 * adopt the others' dtype; an int literal may become a float, a float
 * literal may not become an int. */
bool rule_join_dtypes(RuleCtx *c, int n, const Type *const *ops, DType *out) {
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
      /* Convert toward the float partner (f64 when both are floats, f32
       * for bf16 and f32), and say which operand. */
      DType da = ops[strong]->dtype, db = t->dtype;
      bool fa = ty_is_float(da), fb = ty_is_float(db);
      bool bf = (da == DT_BF16 && db == DT_F32) || (da == DT_F32 && db == DT_BF16);
      DType want = bf ? DT_F32 : fa && fb ? DT_F64 : fa ? da : fb ? db : (da == DT_I32 || db == DT_I32) ? DT_I32 : da;
      int conv = want == da ? k : strong;
      const char *name = ty_dtype_name(want);
      return fail(c, "E_DTYPE", "%s: operands have different dtypes, %s and %s; convert the %s one with %s%s",
                  c->opname, TS(ops[strong]), TS(t), ty_dtype_name(ops[conv]->dtype),
                  rule_stage_wrap(arena_printf("cast(x, %s)", name), conv, "cast(", arena_printf(", %s)", name),
                                  arena_printf("convert the operand to %s", name)),
                  bf ? " (or compute in bf16: cast(y, bf16) on the f32 one)" : "");
    }
  }
  if (strong < 0) {
    *out = weak_float >= 0 ? ops[weak_float]->dtype : ops[weak_any]->dtype;
    return true;
  }
  DType dt = ops[strong]->dtype;
  if (weak_float >= 0 && !ty_is_float(dt))
    return fail(c, "E_DTYPE", "%s: a float literal cannot combine with %s; convert with cast(x, f32)", c->opname,
                rule_stage_wrap(TS(ops[strong]), strong, "cast(", ", f32)", "convert the operand to f32"));
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
bool rule_vma_unify(RuleCtx *c, int n, const Type *const *ops, Type *eff, AxisSet *vout) {
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

/* ---- unreduced and reduced operands (3.4, 3.5) ------------------------------ */

/* How to reduce u's pending sum over A: reshard in the global view, psum
 * over manual axes (a reshard cannot change a manual axis's state). */
const char *rule_reduce_fix(RuleCtx *c, const Type *u, AxisSet A) { return rule_reduce_fix_at(c, -1, u, A); }

const char *rule_reduce_fix_at(RuleCtx *c, int k, const Type *u, AxisSet A) {
  AxisSet m = A & c->manual;
  Type rep = *u;
  rep.U &= ~(A & ~m);
  rep.weak = false;
  const char *psum = arena_printf("psum(x, %s)", ty_axes_arg(c->mesh, m));
  if (m == A)
    return psum;
  const char *rs = arena_printf("reshard(x, %s)", TS(&rep));
  if (m)
    return arena_printf("%s and %s", psum, rs);
  return rule_stage_reshard(rs, k, TS(&rep), arena_printf("reduce it: reshard to %s (an all-reduce)", TS(&rep)));
}

/* How to mark y reduced over A: reshard (free) in the global view, pcast
 * over manual axes. */
const char *rule_reduced_fix(RuleCtx *c, const Type *y, AxisSet A) { return rule_reduced_fix_at(c, -1, y, A); }

const char *rule_reduced_fix_at(RuleCtx *c, int k, const Type *y, AxisSet A) {
  AxisSet m = A & c->manual;
  Type want = *y;
  want.R |= A & ~m;
  want.weak = false;
  const char *pc = arena_printf("pcast(y, %s, to=reduced)", ty_axes_arg(c->mesh, m));
  if (m == A)
    return pc;
  const char *rs = arena_printf("reshard(y, %s)", TS(&want));
  if (m)
    return arena_printf("%s and %s", pc, rs);
  return rule_stage_reshard(rs, k, TS(&want), arena_printf("mark it reduced: reshard to %s (free)", TS(&want)));
}

/* ---- annotations as out_sharding (D8) ---------------------------------------- */

bool rule_check_annot(RuleCtx *c, const Type *annot, const Type *computed, const char *what) {
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
bool rule_annot_pending_within(RuleCtx *c, const Type *annot, AxisSet A, const char *dim) {
  AxisSet m = c->manual, bad = annot->U & ~m & ~A;
  if (!bad)
    return true;
  Type fix = *annot;
  fix.U &= A | m;
  return fail(c, "E_UR",
              "%s: the annotation %s is unreduced over %s, but only the axes that split %s (%s) can leave a pending "
              "sum; annotate %s",
              c->opname, TS(annot), ty_axes_str(c->mesh, bad), dim, A ? ty_axes_str(c->mesh, A) : "none here",
              TS(&fix));
}

bool rule_manual_states(RuleCtx *c, const Type *annot, AxisSet U, AxisSet R, Type *out) {
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

/* An annotation of an operation that moves data without summing (reshape,
 * indexing): the result keeps the operand's unreduced and reduced axes, so
 * the annotation may not change them. */
bool rule_annot_keeps_states(RuleCtx *c, const char *what, const Type *x, const Type *annot, Type *out) {
  AxisSet m = c->manual;
  if ((annot->U ^ x->U) & ~m || (annot->R ^ x->R) & ~m) {
    Type want = *annot;
    want.U = (x->U & ~m) | (annot->U & m);
    want.R = (x->R & ~m) | (annot->R & m);
    return fail(c, "E_UR",
                "%s: the annotation %s must keep the operand's unreduced and reduced axes (%s): annotate %s, and "
                "reshard before or after to change them",
                what, TS(annot), TS(x), TS(&want));
  }
  return rule_manual_states(c, annot, x->U & m, x->R & m, out);
}
