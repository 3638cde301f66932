/* op_contraction.c: the contraction family: `@` (NumPy matmul) and
 * einsum, both dot_general (typing-rules 1.4).
 *
 * The rule: batch dims must be sharded alike; a contracting dim sharded on
 * both sides is ambiguous unless an annotation chooses (replicated:
 * all-reduce, sharded: reduce-scatter, <U:..>: nothing); sharded on one
 * side only, that operand is gathered (FSDP). The partitioner chooses the
 * cheapest of four operand layouts by the reshard planner's cost. The
 * transpose of a dot is a dot with the other operand whose result type is
 * the differentiated operand's cotangent type (4.2). The C is a batched
 * sgemm, transposes passed to BLAS where the layout allows.
 */
#include "ops.h"
#include "../runtime/gemm.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

enum { K_EINSUM };

enum { IR_DOT = IR_BASE_CONTRACTION };   /* dot_general: attr dot */

static bool is_array(const Value *v) { return v->type.rank > 0; }
static const char *axes_str(RuleCtx *c, AxisSet s) { return ty_axes_str(c->mesh, s); }

/* ---- the rule ------------------------------------------------------------------------ */

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
  rule_stage_annotate(s, TS(&rep), arena_printf("annotate the result as %s (all-reduce)", TS(&rep)));
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
      rule_stage_annotate(s, TS(&sc), arena_printf("annotate the result as %s (reduce-scatter)", TS(&sc)));
      break;
    }
  }
  rule_stage_annotate(s, TS(&u), arena_printf("annotate the result as %s (no communication)", TS(&u)));
  return arena_printf("%s or `as %s` (no communication)", s, TS(&u));
}

bool rule_dot(RuleCtx *c, const Type *lhs, const Type *rhs, const DotDims *d, const Type *annot, Type *out) {
  if (lhs->dtype != rhs->dtype && !lhs->weak && !rhs->weak) {
    const Type *ops[2] = {lhs, rhs};
    DType dt;
    return rule_join_dtypes(c, 2, ops, &dt);   /* reports which one to convert, and to what */
  }
  if (lhs->dtype == DT_BOOL)
    return fail(c, "E_DTYPE", "%s of bool arrays (%s and %s); convert with cast(x, f32)", c->opname, TS(lhs),
                TS(rhs));
  for (int k = 0; k < 2; k++) {
    const Type *t = k ? rhs : lhs;
    if (t->U)
      return fail(c, "E_UR",
                  "%s: the %s operand %s is unreduced (a pending sum over %s); a contraction cannot take pending "
                  "sums; reduce it first with %s",
                  c->opname, k ? "right" : "left", TS(t), axes_str(c, t->U), rule_reduce_fix_at(c, k, t, t->U));
  }
  const Type *ops[2] = {lhs, rhs};
  Type eff[2];
  AxisSet V;
  if (!rule_vma_unify(c, 2, ops, eff, &V))
    return false;
  Type r;
  if (!dot_shapes(c, &eff[0], &eff[1], d, &r))
    return false;
  r.V = V;
  if (annot) {
    if (!rule_check_annot(c, annot, &r, c->opname))
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
                      c->opname, TS(&eff[0]), TS(&eff[1]),
                      c->manual ? TS(&want)
                                : rule_stage_reshard(TS(&want), 1, TS(&want), arena_printf("reshard it to %s", TS(&want))));
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
    return rule_manual_states(c, annot, 0, 0, out);
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
                  !ty_check_wellformed(c->mesh, &want, (Pos){0}, c->manual, NULL) ? "..."
                  : c->manual ? TS(&want)
                              : rule_stage_reshard(TS(&want), 1, TS(&want), arena_printf("reshard it to %s", TS(&want))));
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
                  c->opname, TS(&eff[0]), TS(&eff[1]), TS(&r), axes_str(c, a & seen),
                  rule_stage_annotate(TS(&want), TS(&want), arena_printf("annotate the result as %s", TS(&want))));
    }
    seen |= a;
  }
  *out = r;
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
static bool rule_matmul_dims(RuleCtx *c, const Type *a, const Type *b, DotDims *d, int *perm, int *out_rank,
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
/* ---- typing ----------------------------------------------------------------------- */

/* a @ b: the typechecker has typed a and b (BuiltinDef, ops.h). */
/* bf16 operands under an f32 annotation give an f32 result, as JAX's
 * preferred_element_type: they are typed (and lowered) as cast to f32,
 * which is exact, and the product accumulates in f32 either way. */
static bool widen_bf16(const Type *annot, Type *a, Type *b) {
  if (!annot || annot->dtype != DT_F32 || a->dtype != DT_BF16 || b->dtype != DT_BF16 || a->weak || b->weak)
    return false;
  a->dtype = b->dtype = DT_F32;
  return true;
}

static Type check_matmul(TcCtx *c, Expr *e, const Type *annot) {
  Type a = *e->lhs->ty, b = *e->rhs->ty;
  if (!tc_want_array(c, e->lhs, &a, "@") | !tc_want_array(c, e->rhs, &b, "@"))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "matmul");
  TcInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  info->widen = widen_bf16(annot, &a, &b);
  int rank = 0, drank = 0;
  if (!rule_matmul_dims(&r, &a, &b, &info->dot, info->perm, &rank, &drank))
    return ty_error();
  for (int i = 0; i < drank; i++)
    info->has_perm |= info->perm[i] != i;
  info->squeeze = drank > rank;
  Type dot_annot, *pa = NULL;
  if (annot) {
    if (annot->rank != rank) {
      diag_error(e->pos, "E_SHAPE", "matmul: the annotation %s has rank %d but the result has rank %d", TS(annot),
                 annot->rank, rank);
      return ty_error();
    }
    dot_annot = *annot;
    dot_annot.rank = drank;
    for (int i = 0; i < drank; i++) {
      dot_annot.shape[info->perm[i]] = i < rank ? annot->shape[i] : 1;
      dot_annot.spec[info->perm[i]] = i < rank ? annot->spec[i] : (DimSpec){0};
    }
    if (c->annot_v_free)
      tc_manual_states_from(c, &dot_annot, (a.weak ? 0 : a.V) | (b.weak ? 0 : b.V), 0, 0);
    pa = &dot_annot;
  }
  Type dt;
  if (!rule_dot(&r, &a, &b, &info->dot, pa, &dt))
    return ty_error();
  info->dot_type = dt;
  Type out = dt;
  if (info->has_perm && !rule_transpose(&r, &dt, info->perm, &out))
    return ty_error();
  info->type = out;
  if (!info->squeeze)
    return out;
  Type sq;
  return rule_reshape(&r, &out, rank, out.shape, NULL, &sq) ? sq : ty_error();
}

typedef struct {
  int nterms;
  char terms[2][MAX_RANK + 1];
  char out[MAX_RANK + 1];
} EinsumSpec;

static bool einsum_too_many(Expr *s, const char *what, int n) {
  diag_error(s->pos, "E_SHAPE", "einsum: %s has %d dims; arrays have at most %d (merge dims with reshape first)", what,
             n, MAX_RANK);
  return false;
}

static bool parse_einsum(TcCtx *c, Expr *s, EinsumSpec *sp) {
  memset(sp, 0, sizeof *sp);
  const char *p = s->str;
  const char *names[3] = {"the first operand's spec", "the second operand's spec", "the result's spec"};
  char buf[3][MAX_RANK + 1];
  int part = 0, len = 0;
  bool arrow = false;
  memset(buf, 0, sizeof buf);
  for (; *p; p++) {
    if (*p == ' ')
      continue;
    if (*p == ',') {
      if (arrow)
        goto bad;
      if (part >= 1) {
        diag_error(s->pos, "E_ARG", "einsum takes one or two operands; contract three in two steps, e.g. "
                                    "einsum(\"ab,bc->ac\", x, einsum(\"bc,cd->bd\", y, z))");
        return false;
      }
      part++, len = 0;
      continue;
    }
    if (p[0] == '-' && p[1] == '>') {
      if (arrow)
        goto bad;
      arrow = true;
      part = 2, len = 0;
      p++;
      continue;
    }
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
      goto bad;
    if (len >= MAX_RANK) {
      int n = len;
      for (const char *q = p; *q && *q != ',' && *q != '-'; q++)
        n += *q != ' ';
      return einsum_too_many(s, names[part], n);
    }
    buf[part][len++] = *p;
  }
  sp->nterms = buf[1][0] || strchr(s->str, ',') ? 2 : 1;
  memcpy(sp->terms[0], buf[0], MAX_RANK + 1);
  memcpy(sp->terms[1], buf[1], MAX_RANK + 1);
  if (arrow) {
    memcpy(sp->out, buf[2], MAX_RANK + 1);
  } else {
    /* NumPy's implicit output: labels that appear once, in order. */
    char out[2 * MAX_RANK + 1] = {0};
    int k = 0;
    for (char ch = 'A'; ch <= 'z'; ch++) {
      int count = 0;
      for (int t = 0; t < sp->nterms; t++)
        count += strchr(sp->terms[t], ch) != NULL && ch != 0;
      if (count == 1 && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
        out[k++] = ch;
    }
    if (k > MAX_RANK)
      return einsum_too_many(s, "the implicit result (every label that appears once)", k);
    memcpy(sp->out, out, MAX_RANK + 1);
  }
  for (int t = 0; t < sp->nterms; t++)
    for (int i = 0; sp->terms[t][i]; i++)
      if (strchr(sp->terms[t] + i + 1, sp->terms[t][i])) {
        diag_error(s->pos, "E_ARG", "einsum: label '%c' repeats within one operand (diagonals are not supported)",
                   sp->terms[t][i]);
        return false;
      }
  for (int i = 0; sp->out[i]; i++) {
    if (strchr(sp->out + i + 1, sp->out[i])) {
      diag_error(s->pos, "E_ARG", "einsum: output label '%c' repeats", sp->out[i]);
      return false;
    }
    if (!strchr(sp->terms[0], sp->out[i]) && !(sp->nterms == 2 && strchr(sp->terms[1], sp->out[i]))) {
      diag_error(s->pos, "E_ARG", "einsum: output label '%c' does not appear in any operand", sp->out[i]);
      return false;
    }
  }
  return true;
bad:
  diag_error(s->pos, "E_ARG", "einsum: cannot read the spec %s; write e.g. \"bd,df->bf\"",
             emit_str_lit(s->str, strlen(s->str)));
  return false;
}

static int label_pos(const char *labels, char ch) {
  const char *p = strchr(labels, ch);
  return p ? (int)(p - labels) : -1;
}

/* Removes the dims in mask from a label string. */
static void drop_labels(char *labels, unsigned mask) {
  char tmp[MAX_RANK + 1] = {0};
  int k = 0;
  for (int i = 0; labels[i]; i++)
    if (!(mask & (1u << i)))
      tmp[k++] = labels[i];
  memcpy(labels, tmp, MAX_RANK + 1);
}

static Type einsum_unary(TcCtx *c, Expr *e, TcInfo *info, EinsumSpec *sp, Type *x, const Type *annot) {
  RuleCtx r = tc_rule(c, e->pos, "einsum");
  unsigned sum = 0;
  for (int i = 0; sp->terms[0][i]; i++)
    if (!strchr(sp->out, sp->terms[0][i]))
      sum |= 1u << i;
  char rest[MAX_RANK + 1];
  memcpy(rest, sp->terms[0], sizeof rest);
  drop_labels(rest, sum);
  int rank = (int)strlen(sp->out);
  for (int i = 0; i < rank; i++)
    info->perm[i] = label_pos(rest, sp->out[i]);
  for (int i = 0; i < rank; i++)
    info->has_perm |= info->perm[i] != i;
  info->einsum_unary = true;
  info->sum_x = sum;
  Type a2, *pa = NULL;
  if (annot) {
    a2 = *annot;
    for (int i = 0; i < rank; i++) {
      a2.shape[info->perm[i]] = annot->shape[i];
      a2.spec[info->perm[i]] = annot->spec[i];
    }
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, x->V, x->U, x->R);
    pa = &a2;
  }
  Type red;
  if (!rule_reduce(&r, RED_SUM, x, sum, pa, &red))
    return ty_error();
  info->dot_type = red;
  Type out;
  return rule_transpose(&r, &red, info->perm, &out) ? out : ty_error();
}

static Type check_einsum(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[3], *kw[1];
  int n = tc_call_args(c, e, pos, 2, 3, kw, NULL, 0, "einsum(\"bd,df->bf\", a, b) or einsum(\"ij->ji\", a)");
  if (n < 0)
    return ty_error();
  if (pos[0]->kind != EX_STRING) {
    diag_error(pos[0]->pos, "E_ARG", "einsum: the first argument is the spec string, e.g. \"bd,df->bf\"");
    return ty_error();
  }
  EinsumSpec sp;
  if (!parse_einsum(c, pos[0], &sp))
    return ty_error();
  if (sp.nterms != n - 1) {
    diag_error(pos[0]->pos, "E_ARG", "einsum: the spec \"%s\" has %d operand%s but %d were given", pos[0]->str,
               sp.nterms, sp.nterms == 1 ? "" : "s", n - 1);
    return ty_error();
  }
  Type t[2];
  for (int i = 0; i < n - 1; i++) {
    t[i] = tc_operand(c, pos[i + 1], "einsum");
    if (t[i].kind == TY_ERROR)
      return t[i];
    if ((int)strlen(sp.terms[i]) != t[i].rank) {
      diag_error(pos[i + 1]->pos, "E_SHAPE", "einsum: operand %d is %s (rank %d) but the spec names %d dims (\"%s\")",
                 i, TS(&t[i]), t[i].rank, (int)strlen(sp.terms[i]), sp.terms[i]);
      return ty_error();
    }
  }
  info->x = pos[1];
  info->y = n == 3 ? pos[2] : NULL;
  if (n == 2)
    return einsum_unary(c, e, info, &sp, &t[0], annot);
  info->widen = widen_bf16(annot, &t[0], &t[1]);
  /* Sizes of a label must agree. */
  for (int i = 0; sp.terms[0][i]; i++) {
    int j = label_pos(sp.terms[1], sp.terms[0][i]);
    if (j >= 0 && t[0].shape[i] != t[1].shape[j]) {
      diag_error(e->pos, "E_SHAPE", "einsum: label '%c' has size %lld in %s but %lld in %s", sp.terms[0][i],
                 (long long)t[0].shape[i], TS(&t[0]), (long long)t[1].shape[j], TS(&t[1]));
      return ty_error();
    }
  }
  RuleCtx r = tc_rule(c, e->pos, "einsum");
  /* Labels in one operand only and not in the output are summed first. */
  unsigned sum[2] = {0, 0};
  for (int k = 0; k < 2; k++)
    for (int i = 0; sp.terms[k][i]; i++) {
      char ch = sp.terms[k][i];
      if (!strchr(sp.out, ch) && label_pos(sp.terms[1 - k], ch) < 0)
        sum[k] |= 1u << i;
    }
  Type op[2];
  char lab[2][MAX_RANK + 1];
  for (int k = 0; k < 2; k++) {
    memcpy(lab[k], sp.terms[k], sizeof lab[k]);
    op[k] = t[k];
    if (sum[k]) {
      if (!rule_reduce(&r, RED_SUM, &t[k], sum[k], NULL, &op[k]))
        return ty_error();
      drop_labels(lab[k], sum[k]);
    }
  }
  info->sum_x = sum[0];
  info->sum_y = sum[1];
  DotDims *d = &info->dot;
  memset(d, 0, sizeof *d);
  char order[2 * MAX_RANK + 1] = {0};
  int no = 0;
  for (int i = 0; lab[0][i]; i++) {
    int j = label_pos(lab[1], lab[0][i]);
    if (j < 0)
      continue;
    if (strchr(sp.out, lab[0][i])) {
      d->lhs_batch[d->nbatch] = i;
      d->rhs_batch[d->nbatch++] = j;
      order[no++] = lab[0][i];
    } else {
      d->lhs_contract[d->ncontract] = i;
      d->rhs_contract[d->ncontract++] = j;
    }
  }
  for (int i = 0; lab[0][i]; i++)
    if (label_pos(lab[1], lab[0][i]) < 0)
      order[no++] = lab[0][i];
  for (int i = 0; lab[1][i]; i++)
    if (label_pos(lab[0], lab[1][i]) < 0)
      order[no++] = lab[1][i];
  int rank = (int)strlen(sp.out);
  if (no != rank)
    diag_ice("einsum order %d != %d", no, rank);
  for (int i = 0; i < rank; i++) {
    info->perm[i] = label_pos(order, sp.out[i]);
    info->has_perm |= info->perm[i] != i;
  }
  Type a2, *pa = NULL;
  if (annot) {
    if (annot->rank != rank) {
      diag_error(e->pos, "E_SHAPE", "einsum: the annotation %s has rank %d but the result has rank %d", TS(annot),
                 annot->rank, rank);
      return ty_error();
    }
    a2 = *annot;
    for (int i = 0; i < rank; i++) {
      a2.shape[info->perm[i]] = annot->shape[i];
      a2.spec[info->perm[i]] = annot->spec[i];
    }
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, (op[0].weak ? 0 : op[0].V) | (op[1].weak ? 0 : op[1].V), 0, 0);
    pa = &a2;
  }
  Type dt;
  if (!rule_dot(&r, &op[0], &op[1], d, pa, &dt))
    return ty_error();
  info->dot_type = dt;
  Type out;
  return rule_transpose(&r, &dt, info->perm, &out) ? out : ty_error();
}

/* ---- lowering ---------------------------------------------------------------------- */

static Value *lower_dot(Lower *L, Pos pos, Value *a, Value *b, const DotDims *d, Type t) {
  Value *args[2] = {lower_vma(L, pos, a, t.V), lower_vma(L, pos, b, t.V)};
  Inst *in = lower_emit(L, IR_DOT, pos, 2, args, t);
  in->dot = *d;
  return in->results[0];
}

static Value *emit_transpose(Lower *L, Pos pos, Value *x, const int *perm, Type t) {
  Inst *in = lower_emit(L, IR_TRANSPOSE, pos, 1, &x, t);
  memcpy(in->perm, perm, sizeof in->perm);
  return in->results[0];
}

static Value *emit_reduce(Lower *L, Pos pos, Value *x, int redop, unsigned mask, Type t) {
  Inst *in = lower_emit(L, IR_REDUCE, pos, 1, &x, t);
  in->fn = redop;
  in->mask = mask;
  return in->results[0];
}

/* An operand of a widened contraction (TcInfo.widen). */
static Value *lower_operand(Lower *L, Expr *x, bool widen) {
  Value *v = lower_expr(L, x);
  return widen ? lower_convert(L, x->pos, v, DT_F32) : v;
}

static Value *lower_matmul(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *a = lower_operand(L, e->lhs, info->widen), *b = lower_operand(L, e->rhs, info->widen);
  Value *d = lower_dot(L, e->pos, a, b, &info->dot, info->dot_type);
  if (info->has_perm)
    d = emit_transpose(L, e->pos, d, info->perm, info->squeeze ? info->type : *e->ty);
  if (info->squeeze)
    d = lower_emit1(L, IR_RESHAPE, e->pos, 1, &d, *e->ty);
  return d;
}

static Value *presum(Lower *L, Pos pos, Value *x, unsigned mask) {
  if (!mask)
    return x;
  RuleCtx rc = {lower_mesh(L), lower_manual(L), {0}, "einsum"};
  Type t;
  if (!rule_reduce(&rc, RED_SUM, &x->type, mask, NULL, &t))
    diag_ice("einsum pre-reduction rejected");
  return emit_reduce(L, pos, x, RED_SUM, mask, t);
}

static Value *lower_einsum(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_operand(L, info->x, info->widen);
  Value *r;
  if (info->einsum_unary) {
    r = ty_equal(&x->type, &info->dot_type) ? x : emit_reduce(L, e->pos, x, RED_SUM, info->sum_x, info->dot_type);
  } else {
    Value *y = lower_operand(L, info->y, info->widen);
    x = presum(L, e->pos, x, info->sum_x);
    y = presum(L, e->pos, y, info->sum_y);
    r = lower_dot(L, e->pos, x, y, &info->dot, info->dot_type);
  }
  if (!info->has_perm)
    return r;
  return emit_transpose(L, e->pos, r, info->perm, *e->ty);
}

/* ---- transpose ---------------------------------------------------------------------- */

/* The transpose of dot_general: a dot of the cotangent with the other
 * operand, whose result type is the differentiated operand's cotangent type
 * (typing-rules 4.2). Of the two operand orders, the one whose result
 * comes out in the operand's dim order is taken, so no transpose follows
 * (the weight gradient of `x @ w` with w stored [out, in] is gᵀx, not
 * (xᵀg)ᵀ); else the cotangent first, and a transpose. */
typedef struct {
  bool g_first;          /* the cotangent is the left operand */
  DotDims nd;
  int where[MAX_RANK];   /* where each of the target's dims lands in the new dot's result */
} VjpDot;

/* The dims of `t` in order that `used` does not mark. */
static int free_dims(const Type *t, const bool *used, int *out) {
  int n = 0;
  for (int i = 0; i < t->rank; i++)
    if (!used[i])
      out[n++] = i;
  return n;
}

/* For side 0 (x's cotangent, from g and y) or side 1 (y's, from x and g). */
static VjpDot vjp_dot_plan(const DotDims *d, const Type *x, const Type *y, int side, bool g_first) {
  VjpDot v = {.g_first = g_first};
  int nb = d->nbatch;
  bool used_x[MAX_RANK] = {0}, used_y[MAX_RANK] = {0};
  for (int i = 0; i < nb; i++)
    used_x[d->lhs_batch[i]] = used_y[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    used_x[d->lhs_contract[i]] = used_y[d->rhs_contract[i]] = true;
  int fx[MAX_RANK], fy[MAX_RANK], nfx = free_dims(x, used_x, fx), nfy = free_dims(y, used_y, fy);
  /* The other operand's dims kept in the result, in its own order: y's
   * contracting dims (side 0) or x's (side 1). */
  const Type *other = side ? x : y;
  const int *ocon = side ? d->lhs_contract : d->rhs_contract, *tcon = side ? d->rhs_contract : d->lhs_contract;
  int kept[MAX_RANK], nk = 0;
  for (int k = 0; k < other->rank; k++)
    for (int i = 0; i < d->ncontract; i++)
      if (ocon[i] == k)
        kept[nk++] = k;
  /* g's dims kept: the target's free dims (g dims nb.. for x, nb+nfx.. for y) */
  int ng = side ? nfy : nfx;
  const int *tfree = side ? fy : fx;
  const int *tbatch = side ? d->rhs_batch : d->lhs_batch, *obatch = side ? d->lhs_batch : d->rhs_batch;
  int o_off = side ? nb : nb + nfx;      /* g's dims contracted with the other's free dims */
  const int *ofree = side ? fx : fy;
  int nof = side ? nfx : nfy;
  DotDims *nd = &v.nd;
  nd->nbatch = nb;
  for (int i = 0; i < nb; i++) {
    nd->lhs_batch[i] = g_first ? i : obatch[i];
    nd->rhs_batch[i] = g_first ? obatch[i] : i;
  }
  for (int i = 0; i < nof; i++) {
    nd->lhs_contract[nd->ncontract] = g_first ? o_off + i : ofree[i];
    nd->rhs_contract[nd->ncontract++] = g_first ? ofree[i] : o_off + i;
  }
  for (int i = 0; i < nb; i++)
    v.where[tbatch[i]] = i;
  int g_at = g_first ? nb : nb + nk, o_at = g_first ? nb + ng : nb;
  for (int i = 0; i < ng; i++)
    v.where[tfree[i]] = g_at + i;
  for (int j = 0; j < nk; j++)
    for (int i = 0; i < d->ncontract; i++)
      if (ocon[i] == kept[j])
        v.where[tcon[i]] = o_at + j;
  return v;
}

static bool is_identity(const int *perm, int n) {
  for (int k = 0; k < n; k++)
    if (perm[k] != k)
      return false;
  return true;
}

static void vjp_dot(AD *a, Inst *in, Value *g) {
  const DotDims *d = &in->dot;
  Value *x = ad_primal(a, in->args[0]), *y = ad_primal(a, in->args[1]);
  for (int side = 0; side < 2; side++) {
    Value *primal = in->args[side];
    if (!ad_wants_ct(a, primal))
      continue;
    const Type *target = &primal->type;
    VjpDot v = vjp_dot_plan(d, &x->type, &y->type, side, true);
    if (!is_identity(v.where, target->rank)) {
      VjpDot w = vjp_dot_plan(d, &x->type, &y->type, side, false);
      if (is_identity(w.where, target->rank))
        v = w;
    }
    Value *other = side ? x : y;
    Type ctt = ty_ct(target);
    Type dt = ctt;
    for (int k = 0; k < target->rank; k++) {
      dt.shape[v.where[k]] = ctt.shape[k];
      dt.spec[v.where[k]] = ctt.spec[k];
    }
    Value *ops[2] = {v.g_first ? g : other, v.g_first ? other : g};
    Inst *di = ad_emit(a, IR_DOT, 2, ops, dt);
    di->dot = v.nd;
    Value *r = di->results[0];
    if (!is_identity(v.where, target->rank)) {
      Inst *t = ad_emit(a, IR_TRANSPOSE, 1, &r, ctt);
      memcpy(t->perm, v.where, sizeof t->perm);
      r = t->results[0];
    }
    ad_add_ct(a, primal, r);
  }
}

/* ---- partitioning -------------------------------------------------------------------- */

/* How the operands of a dot are laid out for the local product. Each
 * contracting pair keeps a spec both sides share (partial sums, reduced
 * after); a spec on one side only is gathered (the FSDP all-gather) or,
 * with slice_other, the other side is sliced alike (partial sums instead).
 * Batch and free dims take the result's spec, or with keep_own their own,
 * unless an axis is taken already. */
typedef struct {
  Type lt, rt, natural;
} DotPlan;

static DimSpec untaken(DimSpec s, AxisSet *used) {
  if (ty_spec_axes(s) & *used)
    s.n = 0;
  *used |= ty_spec_axes(s);
  return s;
}

static DotPlan dot_plan(const Inst *in, const Type *L, const Type *R, const Type *T, bool slice_other, bool keep_own) {
  const DotDims *d = &in->dot;
  DotPlan pl;
  pl.lt = *L;
  pl.rt = *R;
  AxisSet used = 0;
  for (int i = 0; i < d->ncontract; i++) {
    DimSpec a = L->spec[d->lhs_contract[i]], b = R->spec[d->rhs_contract[i]];
    DimSpec s = {0};
    if (a.n && ty_spec_equal(a, b))
      s = a;
    else if (slice_other && (a.n == 0) != (b.n == 0))
      s = a.n ? a : b;
    s = untaken(s, &used);
    pl.lt.spec[d->lhs_contract[i]] = pl.rt.spec[d->rhs_contract[i]] = s;
  }
  AxisSet contract = used;
  bool is_l[MAX_RANK] = {0}, is_r[MAX_RANK] = {0};
  for (int i = 0; i < d->nbatch; i++)
    is_l[d->lhs_batch[i]] = is_r[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    is_l[d->lhs_contract[i]] = is_r[d->rhs_contract[i]] = true;
  pl.natural = *T;
  pl.natural.R = 0;
  pl.natural.U = contract;
  int pos = 0;
  for (int i = 0; i < d->nbatch; i++, pos++) {
    DimSpec own = L->spec[d->lhs_batch[i]];
    bool agree = ty_spec_equal(own, R->spec[d->rhs_batch[i]]);
    DimSpec s = untaken(keep_own && agree ? own : T->spec[pos], &used);
    pl.lt.spec[d->lhs_batch[i]] = pl.rt.spec[d->rhs_batch[i]] = pl.natural.spec[pos] = s;
  }
  for (int k = 0; k < L->rank; k++)
    if (!is_l[k])
      pl.lt.spec[k] = pl.natural.spec[pos] = untaken(keep_own ? L->spec[k] : T->spec[pos], &used), pos++;
  for (int k = 0; k < R->rank; k++)
    if (!is_r[k])
      pl.rt.spec[k] = pl.natural.spec[pos] = untaken(keep_own ? R->spec[k] : T->spec[pos], &used), pos++;
  pl.lt.R = L->R & ~ty_dim_axes(&pl.lt);
  pl.rt.R = R->R & ~ty_dim_axes(&pl.rt);
  return pl;
}

static int64_t plan_cost(const Mesh *m, const Type *L, const Type *R, const Type *T, const DotPlan *pl, int *ncoll) {
  int n1, n2, n3;
  int64_t b = part_reshard_cost(m, L, &pl->lt, &n1) + part_reshard_cost(m, R, &pl->rt, &n2) +
              part_reshard_cost(m, &pl->natural, T, &n3);
  *ncoll = n1 + n2 + n3;
  return b;
}

/* The four layouts, cheapest first by bytes sent per rank, then by number
 * of collectives; ties keep the first (result-driven, gathering one-sided
 * contractions), which is what JAX's rule describes. */
static void part_dot(Part *p, Inst *in, Value **args) {
  Type L = args[0]->type, R = args[1]->type, T = in->results[0]->type;
  DotPlan best = dot_plan(in, &L, &R, &T, false, false);
  int best_n;
  int64_t best_b = plan_cost(&part_mod(p)->mesh, &L, &R, &T, &best, &best_n);
  for (int v = 1; v < 4; v++) {
    DotPlan pl = dot_plan(in, &L, &R, &T, v & 1, v & 2);
    int n;
    int64_t b = plan_cost(&part_mod(p)->mesh, &L, &R, &T, &pl, &n);
    if (b < best_b || (b == best_b && n < best_n)) {
      best = pl;
      best_b = b;
      best_n = n;
    }
  }
  Value *ops[2] = {part_to(p, in->pos, args[0], &best.lt), part_to(p, in->pos, args[1], &best.rt)};
  Value *r = part_local(p, in, IR_DOT, 2, ops, best.natural);
  part_put(p, in->results[0], part_to(p, in->pos, r, &T));
}

/* ---- C ------------------------------------------------------------------------------ */

/* A gemm operand must have its dims in the order (batch, first group,
 * second group). When it has (batch, second, first) the transpose is passed
 * to gemm; any other order needs a copy. */
typedef enum { LAYOUT_DIRECT, LAYOUT_TRANS, LAYOUT_COPY } Layout;

static Layout operand_layout(int rank, const int *batch, int nb, const int *g1, int n1, const int *g2, int n2,
                             int *order) {
  int swapped[MAX_RANK], k = 0, ks = 0;
  for (int i = 0; i < nb; i++)
    order[k++] = swapped[ks++] = batch[i];
  for (int i = 0; i < n1; i++)
    order[k++] = g1[i];
  for (int i = 0; i < n2; i++)
    order[k++] = g2[i];
  for (int i = 0; i < n2; i++)
    swapped[ks++] = g2[i];
  for (int i = 0; i < n1; i++)
    swapped[ks++] = g1[i];
  bool ident = true, sw = true;
  for (int i = 0; i < k; i++) {
    ident &= order[i] == i;
    sw &= swapped[i] == i;
  }
  if (rank == 0 || ident)
    return LAYOUT_DIRECT;
  return sw ? LAYOUT_TRANS : LAYOUT_COPY;
}

/* The free dims of each operand of a dot, in order. */
static void dot_free(const Inst *in, int *fa, int *nfa, int *fb, int *nfb) {
  bool ua[MAX_RANK] = {0}, ub[MAX_RANK] = {0};
  const DotDims *d = &in->dot;
  for (int i = 0; i < d->nbatch; i++)
    ua[d->lhs_batch[i]] = ub[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    ua[d->lhs_contract[i]] = ub[d->rhs_contract[i]] = true;
  *nfa = *nfb = 0;
  for (int i = 0; i < in->args[0]->type.rank; i++)
    if (!ua[i])
      fa[(*nfa)++] = i;
  for (int i = 0; i < in->args[1]->type.rank; i++)
    if (!ub[i])
      fb[(*nfb)++] = i;
}

typedef struct {
  const char *ptr;
  bool trans;
} GemmOperand;

static GemmOperand gemm_operand(Emit *e, const Value *v, const int *batch, int nb, const int *g1, int n1,
                                const int *g2, int n2) {
  int order[MAX_RANK];
  Layout lay = operand_layout(v->type.rank, batch, nb, g1, n1, g2, n2, order);
  GemmOperand g = {is_array(v) ? vname(v) : arena_printf("&%s", vname(v)), lay == LAYOUT_TRANS};
  if (lay != LAYOUT_COPY)
    return g;
  const char *t = arena_printf("t%d", emit_tmp(e));
  emit_line(e, "%s *%s = shd_alloc(%lld * sizeof(%s));", ty_dtype_c(v->type.dtype), t, (long long)emit_local_count(e, &v->type),
       ty_dtype_c(v->type.dtype));
  emit_line(e, "shd_transpose(%s, %s, sizeof(%s), %d, %s, %s);", vname(v), t, ty_dtype_c(v->type.dtype), v->type.rank,
       emit_shape_lit(e, &v->type), emit_ints_lit(order, v->type.rank));
  g.ptr = t;
  return g;
}

/* A dot's local GEMM sizes: batch count, rows M (lhs free dims), columns
 * N (rhs free dims) and the contracted K. */
static void dot_local_sizes(const Mesh *m, const Inst *in, int64_t *batch, int64_t *M, int64_t *N, int64_t *K) {
  const DotDims *d = &in->dot;
  int64_t la[MAX_RANK], lb[MAX_RANK];
  ty_local_shape(m, &in->args[0]->type, la);
  ty_local_shape(m, &in->args[1]->type, lb);
  int fa[MAX_RANK], nfa, fb[MAX_RANK], nfb;
  dot_free(in, fa, &nfa, fb, &nfb);
  *batch = *M = *N = *K = 1;
  for (int i = 0; i < d->nbatch; i++)
    *batch *= la[d->lhs_batch[i]];
  for (int i = 0; i < d->ncontract; i++)
    *K *= la[d->lhs_contract[i]];
  for (int i = 0; i < nfa; i++)
    *M *= la[fa[i]];
  for (int i = 0; i < nfb; i++)
    *N *= lb[fb[i]];
}

static int64_t dot_temp_bytes(const Module *mod, const Inst *in) {
  int fa[MAX_RANK], nfa, fb[MAX_RANK], nfb, order[MAX_RANK];
  dot_free(in, fa, &nfa, fb, &nfb);
  const DotDims *d = &in->dot;
  int64_t bytes = 0;
  const Value *a = in->args[0], *b = in->args[1];
  if (operand_layout(a->type.rank, d->lhs_batch, d->nbatch, fa, nfa, d->lhs_contract, d->ncontract, order) ==
      LAYOUT_COPY)
    bytes += ty_local_count(&mod->mesh, &a->type) * (int64_t)ty_dtype_size(a->type.dtype);
  if (operand_layout(b->type.rank, d->rhs_batch, d->nbatch, d->rhs_contract, d->ncontract, fb, nfb, order) ==
      LAYOUT_COPY)
    bytes += ty_local_count(&mod->mesh, &b->type) * (int64_t)ty_dtype_size(b->type.dtype);
  if (a->type.dtype == DT_BF16) {   /* the f32 copies of one gemm: B whole, a panel of A and C (gemm.h) */
    int64_t batch, M, N, K;
    dot_local_sizes(&mod->mesh, in, &batch, &M, &N, &K);
    int64_t P = K + N ? SHD_BF16_PANEL / (K + N) : 0;
    P = P < 1 ? 1 : P > M ? M : P;
    if (M && N && K)
      bytes += (K * N + P * (K + N)) * (int64_t)sizeof(float);
  }
  return bytes;
}

static void emit_dot(Emit *e, const Inst *in) {
  const Value *a = in->args[0], *b = in->args[1], *r = in->results[0];
  const DotDims *d = &in->dot;
  int fa[MAX_RANK], nfa, fb[MAX_RANK], nfb;
  dot_free(in, fa, &nfa, fb, &nfb);
  int64_t batch, M, N, K;
  dot_local_sizes(emit_mesh(e), in, &batch, &M, &N, &K);
  emit_line(e, "{");
  emit_indent(e, 2);
  int t0 = emit_tmp_count(e);
  GemmOperand A = gemm_operand(e, a, d->lhs_batch, d->nbatch, fa, nfa, d->lhs_contract, d->ncontract);
  GemmOperand B = gemm_operand(e, b, d->rhs_batch, d->nbatch, d->rhs_contract, d->ncontract, fb, nfb);
  const char *out = is_array(r) ? vname(r) : arena_printf("&%s", vname(r));
  DType dt = r->type.dtype;
  emit_line(e, "for (int64_t bi = 0; bi < %lld; bi++)", (long long)batch);
  emit_line(e, "  shd_gemm(%s, %s, %s, %lld, %lld, %lld, 1.0, %s + bi * %lld, %lld, %s + bi * %lld, %lld, 0.0, %s + bi * "
          "%lld, %lld);",
       emit_dtconst(dt), A.trans ? "true" : "false", B.trans ? "true" : "false", (long long)M, (long long)N, (long long)K,
       A.ptr, (long long)(M * K), (long long)(A.trans ? M : K), B.ptr, (long long)(K * N),
       (long long)(B.trans ? K : N), out, (long long)(M * N), (long long)N);
  for (int t = t0; t < emit_tmp_count(e); t++)
    emit_line(e, "shd_release(t%d);", t);
  emit_indent(e, -2);
  emit_line(e, "}");
}

/* ---- the tables --------------------------------------------------------------------- */

static void emit_dot_inst(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  if (is_array(r))
    emit_def_array(e, r, false);
  else
    emit_def_scalar(e, r);
  emit_dot(e, in);
}

static void print_dot(FILE *out, const Module *mod, const Inst *in) {
  ir_print_ints(out, "lhs_batch", in->dot.lhs_batch, in->dot.nbatch);
  ir_print_ints(out, "rhs_batch", in->dot.rhs_batch, in->dot.nbatch);
  ir_print_ints(out, "lhs_contract", in->dot.lhs_contract, in->dot.ncontract);
  ir_print_ints(out, "rhs_contract", in->dot.rhs_contract, in->dot.ncontract);
}

/* ---- types from operands ---------------------------------------------------------- */

/* dot_general's shape: batch dims, then lhs's free dims, then rhs's; the
 * sharding is the out_sharding chosen. */
static bool infer_dot(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 2 || !ir_arg_is(in, 0, -1) || !ir_arg_is(in, 1, in->args[0]->type.dtype))
    return false;
  RuleCtx rc = ir_rule_ctx(mod, in);
  Type r;
  return dot_shapes(&rc, &in->args[0]->type, &in->args[1]->type, &in->dot, &r) && ir_infer_shape(out, &r);
}

/* 2 M N K for each rank's block: the result's local elements times the
 * local length of the contracted dims. A bf16 product's gemm widens both
 * operands to f32 and rounds the result (runtime/kernels.c: there is no
 * bf16 gemm), one elementwise operation per element each. */
static void work_dot(const Module *mod, const Inst *in, double *dot, double *ew) {
  double k = 1;
  for (int i = 0; i < in->dot.ncontract; i++)
    k *= (double)ty_local_dim(&mod->mesh, &in->args[0]->type, in->dot.lhs_contract[i]);
  double n = (double)ty_local_count(&mod->mesh, &in->results[0]->type);
  *dot += 2 * n * k;
  if (in->results[0]->type.dtype == DT_BF16)
    *ew += n + (double)ty_local_count(&mod->mesh, &in->args[0]->type) +
           (double)ty_local_count(&mod->mesh, &in->args[1]->type);
}

/* The axes the contracting dims are split over, alike on both operands
 * (0 when they differ: the partitioner gathers instead). */
static AxisSet dot_partial_axes(const Inst *d) {
  AxisSet A = 0;
  for (int i = 0; i < d->dot.ncontract; i++) {
    DimSpec l = d->args[0]->type.spec[d->dot.lhs_contract[i]], r = d->args[1]->type.spec[d->dot.rhs_contract[i]];
    if (!l.n && !r.n)
      continue;
    if (!ty_spec_equal(l, r))
      return 0;
    A |= ty_spec_axes(l);
  }
  return A;
}

static const OpDef ops[] = {
    {.op = IR_DOT, .name = "dot", .flags = OPF_OUT_SHARDING | OPF_TRACE_LINE, .print = print_dot, .vjp = vjp_dot,
     .partition = part_dot, .emit = emit_dot_inst, .temp_bytes = dot_temp_bytes, .infer = infer_dot,
     .work = work_dot, .partial_axes = dot_partial_axes},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "einsum", .code = K_EINSUM, .flags = BIF_ANNOT, .check = check_einsum, .lower = lower_einsum},
    {.name = "@", .code = BIN_MATMUL, .flags = BIF_ANNOT, .check = check_matmul, .lower = lower_matmul,
     .syntax = SYN_MATMUL},
    {0},
};

const OpFamily op_contraction_family = {
    .name = "contraction",
    .ops = ops,
    .builtins = builtins,
};
