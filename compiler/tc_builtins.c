/* tc_builtins.c: typing of the builtin functions of language.md §3:
 * elementwise functions, reductions, transpose, reshape, einsum, cast,
 * reshard, creation, print/save/load/arg. Manual collectives are in
 * tc_manual.c.
 *
 * Each builtin checks its arguments' forms (positional, keyword, constant),
 * computes its type with the rule of rules.c, and leaves what lowering needs
 * in a TcInfo (Expr.tc).
 */
#include "shdc.h"

#define TS(t) ty_str(c->mesh, (t))

static const struct {
  const char *name;
  int code;
  int un;
} builtins[] = {
    {"exp", BI_UNARY, UN_EXP},         {"log", BI_UNARY, UN_LOG},
    {"sin", BI_UNARY, UN_SIN},         {"cos", BI_UNARY, UN_COS},
    {"tanh", BI_UNARY, UN_TANH},       {"sqrt", BI_UNARY, UN_SQRT},
    {"abs", BI_UNARY, UN_ABS},         {"relu", BI_UNARY, UN_RELU},
    {"sigmoid", BI_UNARY, UN_SIGMOID}, {"maximum", BI_MAXIMUM, 0},
    {"minimum", BI_MINIMUM, 0},        {"where", BI_WHERE, 0},
    {"sum", BI_SUM, 0},                {"mean", BI_MEAN, 0},
    {"max", BI_MAX, 0},                {"min", BI_MIN_RED, 0},
    {"transpose", BI_TRANSPOSE, 0},    {"reshape", BI_RESHAPE, 0},
    {"einsum", BI_EINSUM, 0},          {"cast", BI_CAST, 0},
    {"reshard", BI_RESHARD, 0},        {"zeros", BI_ZEROS, 0},
    {"ones", BI_ONES, 0},              {"full", BI_FULL, 0},
    {"iota", BI_IOTA, 0},              {"normal", BI_NORMAL, 0},
    {"uniform", BI_UNIFORM, 0},        {"print", BI_PRINT, 0},
    {"save", BI_SAVE, 0},              {"load", BI_LOAD, 0},
    {"arg", BI_ARG, 0},                {"clock", BI_CLOCK, 0},
    {"grad", BI_GRAD, 0},
    {"value_and_grad", BI_VALUE_AND_GRAD, 0},
    {"psum", BI_PSUM, 0},              {"pmax", BI_PMAX, 0},
    {"pmin", BI_PMIN, 0},              {"pmean", BI_PMEAN, 0},
    {"all_gather", BI_ALL_GATHER, 0},  {"psum_scatter", BI_PSUM_SCATTER, 0},
    {"all_to_all", BI_ALL_TO_ALL, 0},  {"ppermute", BI_PPERMUTE, 0},
    {"axis_index", BI_AXIS_INDEX, 0},  {"pcast", BI_PCAST, 0},
};

int tc_builtin_code(const char *name, int *un) {
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    if (!strcmp(builtins[i].name, name)) {
      *un = builtins[i].un;
      return builtins[i].code;
    }
  return 0;
}

static const char *fname(Expr *e) { return e->callee->str; }

static Type operand(TcCtx *c, Expr *x, const char *what) {
  Type t = tc_expr(c, x);
  if (t.kind == TY_ERROR)
    return t;
  if (t.kind != TY_ARRAY) {
    diag_error(x->pos, "E_ARG", "%s: expected an array or scalar value here", what);
    return ty_error();
  }
  return t;
}

static bool need_pos(TcCtx *c, Expr *e, int npos, int want_min, int want_max, const char *usage) {
  if (npos < want_min || npos > want_max) {
    diag_error(e->pos, "E_ARG", "%s: wrong number of arguments; usage: %s", fname(e), usage);
    return false;
  }
  return true;
}

/* Splits a call's arguments into lo..hi positional ones and the keyword
 * arguments kwn[0..nkw); returns how many positional ones there are, or -1
 * after reporting a misuse with the usage line. */
static int call_args(TcCtx *c, Expr *e, Expr **pos, int lo, int hi, Expr **kw, const char **kwn, int nkw,
                     const char *usage) {
  int n;
  bool ok = true;
  tc_split_args(e, pos, hi, &n, kw, kwn, nkw, &ok);
  return ok && need_pos(c, e, n, lo, hi, usage) ? n : -1;
}

/* axis=k, axis=(j, k) or axis=[j, k] -> a dims mask; negative counts from
 * the end as in NumPy. */
static bool dims_arg(TcCtx *c, Expr *a, int rank, unsigned *mask, const char *what) {
  Expr *items[MAX_RANK + 1];
  int n = 0;
  if (a->kind == EX_TUPLE || a->kind == EX_LIST) {
    for (int i = 0; i < a->args.len; i++) {
      if (n > MAX_RANK) {
        diag_error(a->pos, "E_ARG", "%s: too many dims", what);
        return false;
      }
      items[n++] = a->args.data[i];
    }
  } else {
    items[n++] = a;
  }
  *mask = 0;
  for (int i = 0; i < n; i++) {
    int64_t k;
    if (!tc_const_int(c, items[i], &k))
      return false;
    if (k < -rank || k >= rank) {
      diag_error(items[i]->pos, "E_ARG", "%s: axis %lld is out of range for an array of rank %d", what, (long long)k,
                 rank);
      return false;
    }
    if (k < 0)
      k += rank;
    if (*mask & (1u << k)) {
      diag_error(items[i]->pos, "E_ARG", "%s: axis %lld is repeated", what, (long long)k);
      return false;
    }
    *mask |= 1u << k;
  }
  return true;
}

static bool one_dim_arg(TcCtx *c, Expr *a, int rank, int *dim, const char *what) {
  unsigned m;
  if (a->kind == EX_TUPLE || a->kind == EX_LIST) {
    diag_error(a->pos, "E_ARG", "%s takes a single dim", what);
    return false;
  }
  if (!dims_arg(c, a, rank, &m, what))
    return false;
  *dim = __builtin_ctz(m);
  return true;
}

/* ---- elementwise ------------------------------------------------------------ */

static Type check_unary_fn(TcCtx *c, Expr *e, TcInfo *info) {
  Expr *pos[1], *kw[1];
  int n = call_args(c, e, pos, 1, 1, kw, NULL, 0, arena_printf("%s(x)", fname(e)));
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], fname(e));
  if (x.kind == TY_ERROR)
    return x;
  RuleCtx r = tc_rule(c, e->pos, fname(e));
  Type out;
  info->x = pos[0];
  return rule_unary(&r, info->un, &x, &out) ? out : ty_error();
}

static Type check_nary(TcCtx *c, Expr *e, TcInfo *info, int op, int nargs) {
  Expr *pos[3], *kw[1];
  const char *usage = nargs == 3 ? "where(cond, a, b)" : arena_printf("%s(a, b)", fname(e));
  if (call_args(c, e, pos, nargs, nargs, kw, NULL, 0, usage) < 0)
    return ty_error();
  bool ok = true;
  Type t[3];
  for (int i = 0; i < nargs; i++) {
    t[i] = operand(c, pos[i], fname(e));
    ok &= t[i].kind != TY_ERROR;
  }
  if (!ok)
    return ty_error();
  info->x = pos[0];
  info->y = pos[1];
  info->z = nargs == 3 ? pos[2] : NULL;
  const Type *ops[3] = {&t[0], &t[1], &t[2]};
  RuleCtx r = tc_rule(c, e->pos, fname(e));
  Type out;
  return rule_elementwise(&r, op, nargs, ops, &out) ? out : ty_error();
}

/* ---- reductions --------------------------------------------------------------- */

static Type check_reduction(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"axis"};
  int n = call_args(c, e, pos, 1, 1, kw, kwn, 1, arena_printf("%s(x) or %s(x, axis=k) or %s(x, axis=(j, k))", fname(e),
                                                     fname(e), fname(e)));
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], fname(e));
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  unsigned mask = x.rank ? (1u << x.rank) - 1 : 0;
  if (kw[0] && !dims_arg(c, kw[0], x.rank, &mask, fname(e)))
    return ty_error();
  info->mask = mask;
  int code = e->builtin;
  info->redop = code == BI_MAX ? RED_MAX : code == BI_MIN_RED ? RED_MIN : RED_SUM;
  if (code == BI_MEAN) {
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
  RuleCtx r = tc_rule(c, e->pos, fname(e));
  Type a2, *pa = NULL;
  if (annot) {
    a2 = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, x.V, x.U, x.R);
    pa = &a2;
  }
  Type out;
  if (!rule_reduce(&r, info->redop, &x, mask, pa, &out))
    return ty_error();
  info->type = out;
  return out;
}

/* ---- transpose, reshape, einsum ------------------------------------------------- */

static Type check_transpose(TcCtx *c, Expr *e, TcInfo *info) {
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"perm"};
  int n = call_args(c, e, pos, 1, 1, kw, kwn, 1, "transpose(x) or transpose(x, perm=[1, 0, 2])");
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], "transpose");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  if (!kw[0]) {
    for (int i = 0; i < x.rank; i++)
      info->perm[i] = x.rank - 1 - i;
  } else {
    Expr *p = kw[0];
    if (p->kind != EX_LIST && p->kind != EX_TUPLE) {
      diag_error(p->pos, "E_ARG", "transpose: perm is a list, e.g. perm=[1, 0]");
      return ty_error();
    }
    if (p->args.len != x.rank) {
      diag_error(p->pos, "E_SHAPE", "transpose: perm has %d entries but %s has rank %d", p->args.len, TS(&x), x.rank);
      return ty_error();
    }
    for (int i = 0; i < x.rank; i++) {
      int64_t k;
      if (!tc_const_int(c, p->args.data[i], &k))
        return ty_error();
      info->perm[i] = (int)(k < 0 ? k + x.rank : k);
    }
  }
  RuleCtx r = tc_rule(c, e->pos, "transpose");
  Type out;
  return rule_transpose(&r, &x, info->perm, &out) ? out : ty_error();
}

static Type check_reshape(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  Expr *pos[2], *kw[1];
  int n = call_args(c, e, pos, 2, 2, kw, NULL, 0, "reshape(x, [dims])");
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], "reshape");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  Expr *l = pos[1];
  if (l->kind != EX_LIST && l->kind != EX_TUPLE) {
    diag_error(l->pos, "E_ARG", "reshape: the new shape is a list, e.g. reshape(x, [8, 4])");
    return ty_error();
  }
  if (l->args.len > MAX_RANK) {
    diag_error(l->pos, "E_SHAPE", "reshape: at most %d dims", MAX_RANK);
    return ty_error();
  }
  int infer = -1;
  int64_t known = 1;
  info->rank = l->args.len;
  for (int i = 0; i < info->rank; i++) {
    int64_t k;
    if (!tc_const_int(c, l->args.data[i], &k))
      return ty_error();
    if (k == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (k < 1) {
      diag_error(((Expr *)l->args.data[i])->pos, "E_SHAPE", "reshape: sizes are at least 1 (one may be -1)");
      return ty_error();
    }
    info->shape[i] = k;
    known *= k;
  }
  if (infer >= 0) {
    int64_t total = ty_global_count(&x);
    if (total % known) {
      diag_error(l->pos, "E_SHAPE", "reshape: %s has %lld elements, which is not a multiple of %lld", TS(&x),
                 (long long)total, (long long)known);
      return ty_error();
    }
    info->shape[infer] = total / known;
  }
  RuleCtx r = tc_rule(c, e->pos, "reshape");
  Type a2, *pa = NULL;
  if (annot) {
    a2 = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, x.V, x.U, x.R);
    pa = &a2;
  }
  Type out;
  return rule_reshape(&r, &x, info->rank, info->shape, pa, &out) ? out : ty_error();
}

typedef struct {
  int nterms;
  char terms[2][MAX_RANK + 1];
  char out[MAX_RANK + 1];
} EinsumSpec;

static bool parse_einsum(TcCtx *c, Expr *s, EinsumSpec *sp) {
  memset(sp, 0, sizeof *sp);
  const char *p = s->str;
  char buf[3][64];
  int part = 0, len = 0;
  bool arrow = false;
  memset(buf, 0, sizeof buf);
  for (; *p; p++) {
    if (*p == ' ')
      continue;
    if (*p == ',') {
      if (arrow || part >= 1)
        goto bad;
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
    if (len >= MAX_RANK)
      goto bad;
    buf[part][len++] = *p;
  }
  sp->nterms = buf[1][0] || strchr(s->str, ',') ? 2 : 1;
  memcpy(sp->terms[0], buf[0], MAX_RANK + 1);
  memcpy(sp->terms[1], buf[1], MAX_RANK + 1);
  if (arrow) {
    memcpy(sp->out, buf[2], MAX_RANK + 1);
  } else {
    /* NumPy's implicit output: labels that appear once, in order. */
    int k = 0;
    for (char ch = 'A'; ch <= 'z'; ch++) {
      int count = 0;
      for (int t = 0; t < sp->nterms; t++)
        count += strchr(sp->terms[t], ch) != NULL && ch != 0;
      if (count == 1 && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
        sp->out[k++] = ch;
    }
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
  diag_error(s->pos, "E_ARG", "einsum: cannot read the spec \"%s\"; write e.g. \"bd,df->bf\"", s->str);
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

static Type check_einsum(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  Expr *pos[3], *kw[1];
  int n = call_args(c, e, pos, 2, 3, kw, NULL, 0, "einsum(\"bd,df->bf\", a, b) or einsum(\"ij->ji\", a)");
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
    t[i] = operand(c, pos[i + 1], "einsum");
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

/* ---- cast, reshard ------------------------------------------------------------ */

static bool type_arg(TcCtx *c, Expr *a, Type *out, const char *what) {
  if (a->kind != EX_TYPE) {
    diag_error(a->pos, "E_ARG", "%s: expected a type here, e.g. f32[8@X,4]", what);
    return false;
  }
  return tc_resolve_type(c, a->type, out);
}

static Type check_cast(TcCtx *c, Expr *e, TcInfo *info) {
  Expr *pos[2], *kw[1];
  int n = call_args(c, e, pos, 2, 2, kw, NULL, 0, "cast(x, f64)");
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], "cast");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  if (pos[1]->kind != EX_TYPE || pos[1]->type->rank || pos[1]->type->nannots || pos[1]->type->ndims_written) {
    diag_error(pos[1]->pos, "E_ARG", "cast takes a dtype (f32, f64, i32 or bool), e.g. cast(x, f64)");
    return ty_error();
  }
  info->dtype = pos[1]->type->dtype;
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

static Type check_reshard(TcCtx *c, Expr *e, TcInfo *info) {
  Expr *pos[2], *kw[1];
  int n = call_args(c, e, pos, 2, 2, kw, NULL, 0, "reshard(x, TYPE)");
  if (n < 0)
    return ty_error();
  Type x = operand(c, pos[0], "reshard");
  Type target;
  if (!type_arg(c, pos[1], &target, "reshard") || x.kind == TY_ERROR)
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
  return out;
}

/* ---- creation ------------------------------------------------------------------ */

static Type creation_type(TcCtx *c, Expr *e, Expr *targ, const Type *annot, bool *ok) {
  Type t;
  if (targ) {
    if (!type_arg(c, targ, &t, fname(e))) {
      *ok = false;
      return ty_error();
    }
    if (annot) {
      Type want = *annot;
      if (c->annot_v_free)
        tc_manual_states_from(c, &want, t.V, t.U, t.R);
      if (!ty_equal(&t, &want)) {
        diag_error(e->pos, c->annot_code ? c->annot_code : "E_ANNOT",
                   "%s creates %s but %s is expected; change one of them, or reshard(x, %s) afterwards", fname(e),
                   TS(&t), TS(annot), TS(annot));
        *ok = false;
        return ty_error();
      }
    }
  } else if (annot) {
    t = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &t, 0, 0, 0);
  } else if (c->bad_annot == e) {
    *ok = false;
    return ty_error();
  } else {
    diag_error(e->pos, "E_ARG", "%s needs a type: %s(f32[8,4], ...), or annotate the binding: let x: f32[8,4] = %s(...)",
               fname(e), fname(e), fname(e));
    *ok = false;
    return ty_error();
  }
  if (t.V) {
    diag_error(e->pos, "E_VMA",
               "%s creates the same array on every device, so it cannot be varying (%s); create it invariant and "
               "cast it with pcast(x, %s, to=varying)",
               fname(e), TS(&t), ty_axes_arg(c->mesh, t.V));
    *ok = false;
    return ty_error();
  }
  t.weak = false;
  return t;
}

static bool scalar_value(TcCtx *c, Expr *v, DType dt, const char *what, bool allow_v) {
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

static Type check_creation(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  int code = e->builtin;
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {code == BI_IOTA ? "axis" : "seed"};
  int nkw = (code == BI_IOTA || code == BI_NORMAL || code == BI_UNIFORM) ? 1 : 0;
  int n;
  bool ok = true;
  int maxpos = code == BI_FULL ? 2 : 1;
  tc_split_args(e, pos, maxpos, &n, kw, kwn, nkw, &ok);
  if (!ok)
    return ty_error();
  Expr *targ = n > 0 && pos[0]->kind == EX_TYPE ? pos[0] : NULL;
  int nval = n - (targ ? 1 : 0);
  int want_val = code == BI_FULL ? 1 : 0;
  if (nval != want_val) {
    static const char *usage[] = {[BI_ZEROS] = "zeros(TYPE)", [BI_ONES] = "ones(TYPE)",
                                  [BI_FULL] = "full(TYPE, value)", [BI_IOTA] = "iota(TYPE, axis=k)",
                                  [BI_NORMAL] = "normal(TYPE, seed=s)", [BI_UNIFORM] = "uniform(TYPE, seed=s)"};
    diag_error(e->pos, "E_ARG", "%s: wrong arguments; usage: %s (TYPE may be left out when the binding is annotated)",
               fname(e), usage[code]);
    return ty_error();
  }
  Type t = creation_type(c, e, targ, annot, &ok);
  if (!ok)
    return ty_error();
  info->type = t;
  if (code == BI_FULL) {
    info->value = pos[n - 1];
    if (!scalar_value(c, info->value, t.dtype, "the fill value", false))
      return ty_error();
  }
  if (code == BI_IOTA) {
    if (t.dtype == DT_BOOL) {
      diag_error(e->pos, "E_DTYPE", "iota makes numbers, not %s; make it i32, f32 or f64 and compare if you need "
                                    "bool", TS(&t));
      return ty_error();
    }
    if (t.rank == 0) {
      diag_error(e->pos, "E_SHAPE", "iota makes an array of rank 1 or more, not %s; give it a shape, e.g. "
                                    "iota(%s[8], axis=0)", TS(&t), ty_dtype_name(t.dtype));
      return ty_error();
    }
    info->dim = 0;
    if (kw[0] && !one_dim_arg(c, kw[0], t.rank, &info->dim, "iota"))
      return ty_error();
  }
  if (code == BI_NORMAL || code == BI_UNIFORM) {
    if (!ty_is_float(t.dtype)) {
      diag_error(e->pos, "E_DTYPE", "%s makes float arrays (f32 or f64), not %s; cast the result if you need "
                                    "another dtype", fname(e), TS(&t));
      return ty_error();
    }
    if (!kw[0]) {
      diag_error(e->pos, "E_ARG", "%s needs a seed: %s(TYPE, seed=1)", fname(e), fname(e));
      return ty_error();
    }
    info->value = kw[0];
    if (!scalar_value(c, kw[0], DT_I32, "the seed", false))
      return ty_error();
  }
  return t;
}

/* ---- print, save, load, arg ------------------------------------------------------- */

static Type check_print(TcCtx *c, Expr *e) {
  for (int i = 0; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    if (a->kind == EX_KWARG) {
      diag_error(a->pos, "E_ARG", "print takes no keyword arguments");
      continue;
    }
    if (a->kind == EX_STRING) {
      tc_expr(c, a);
      continue;
    }
    operand(c, a, "print");
  }
  return ty_void();
}

static bool string_arg(TcCtx *c, Expr *a, const char *what) {
  if (a->kind != EX_STRING) {
    diag_error(a->pos, "E_ARG", "%s: expected a string literal", what);
    return false;
  }
  tc_expr(c, a);
  return true;
}

static Type check_save(TcCtx *c, Expr *e, TcInfo *info) {
  Expr *pos[2], *kw[1];
  int n = call_args(c, e, pos, 2, 2, kw, NULL, 0, "save(\"path.npy\", x)");
  if (n < 0 || !string_arg(c, pos[0], "save"))
    return ty_error();
  Type x = operand(c, pos[1], "save");
  if (x.kind == TY_ERROR)
    return x;
  if (x.weak)
    x.weak = false;
  info->x = pos[1];
  return ty_void();
}

static Type check_load(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  Expr *pos[1], *kw[1];
  int n = call_args(c, e, pos, 1, 1, kw, NULL, 0, "load(\"path.npy\")");
  if (n < 0 || !string_arg(c, pos[0], "load"))
    return ty_error();
  if (!annot && c->bad_annot == e)
    return ty_error();
  if (!annot) {
    diag_error(e->pos, "E_ARG", "load takes its type from an annotation: let w: f32[8@X,4] = load(\"w.npy\")");
    return ty_error();
  }
  Type t = *annot;
  if (t.V) {
    diag_error(e->pos, "E_VMA", "load gives the same array on every device, so it cannot be varying (%s)", TS(&t));
    return ty_error();
  }
  info->type = t;
  return t;
}

static Type check_arg(TcCtx *c, Expr *e, TcInfo *info, const Type *annot) {
  Expr *pos[2], *kw[1];
  int n = call_args(c, e, pos, 2, 2, kw, NULL, 0, "arg(\"name\", default)");
  if (n < 0 || !string_arg(c, pos[0], "arg"))
    return ty_error();
  Type d = tc_expr(c, pos[1]);
  if (d.kind == TY_ERROR)
    return d;
  if (d.kind != TY_ARRAY || !d.weak) {
    diag_error(pos[1]->pos, "E_ARG", "arg: the default must be a literal or a const, e.g. arg(\"steps\", 10)");
    return ty_error();
  }
  info->value = pos[1];
  Type t = ty_scalar(d.dtype);
  if (annot) {
    if (annot->rank || annot->U || annot->V) {
      diag_error(e->pos, "E_SHAPE", "arg gives a replicated scalar, not %s", TS(annot));
      return ty_error();
    }
    if (ty_is_float(d.dtype) && !ty_is_float(annot->dtype)) {
      diag_error(pos[1]->pos, "E_DTYPE", "arg: the default is a float but the annotation is %s", TS(annot));
      return ty_error();
    }
    t = *annot;
  }
  info->type = t;
  return t;
}

/* ---- dispatch ---------------------------------------------------------------------- */

Type tc_builtin(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  int un = 0;
  tc_builtin_code(e->callee->str, &un);
  info->un = un;
  switch (e->builtin) {
  case BI_UNARY: return check_unary_fn(c, e, info);
  case BI_MAXIMUM: return check_nary(c, e, info, BIN_MAX, 2);
  case BI_MINIMUM: return check_nary(c, e, info, BIN_MIN, 2);
  case BI_WHERE: return check_nary(c, e, info, -1, 3);
  case BI_SUM: case BI_MEAN: case BI_MAX: case BI_MIN_RED: return check_reduction(c, e, info, annot);
  case BI_TRANSPOSE: return check_transpose(c, e, info);
  case BI_RESHAPE: return check_reshape(c, e, info, annot);
  case BI_EINSUM: return check_einsum(c, e, info, annot);
  case BI_CAST: return check_cast(c, e, info);
  case BI_RESHARD: return check_reshard(c, e, info);
  case BI_ZEROS: case BI_ONES: case BI_FULL: case BI_IOTA: case BI_NORMAL: case BI_UNIFORM:
    return check_creation(c, e, info, annot);
  case BI_PRINT: return check_print(c, e);
  case BI_SAVE: case BI_LOAD:
    if (c->manual) {
      /* .npy I/O is collective over the whole mesh and works on global
       * arrays: a manual body (per-device, maybe under a varying branch)
       * has neither. */
      diag_error(e->pos, "E_MANUAL",
                 "%s reads or writes a global array with every device taking part, so it is only available in the "
                 "global view; %s",
                 fname(e), e->builtin == BI_SAVE ? "return the value from the manual function and save it there"
                                                 : "load it in the global view and pass it as an argument");
      return ty_error();
    }
    return e->builtin == BI_SAVE ? check_save(c, e, info) : check_load(c, e, info, annot);
  case BI_ARG: return check_arg(c, e, info, annot);
  case BI_CLOCK:
    if (e->args.len) {
      diag_error(e->pos, "E_ARG", "clock() takes no arguments");
      return ty_error();
    }
    return ty_scalar(DT_F64);
  case BI_GRAD: case BI_VALUE_AND_GRAD:
    diag_error(e->pos, "E_ARG", "%s(f, wrt=...) makes a function; call it: %s(f, wrt=0)(args...)", fname(e), fname(e));
    return ty_error();
  default:
    return tc_collective(c, e);
  }
}
