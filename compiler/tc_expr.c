/* tc_expr.c: typing of expressions: literals, names, operators, @, `as`,
 * calls of user functions and of grad/value_and_grad.
 *
 * An annotation reaches an expression as `annot`. On a contraction, a
 * reduction, a reshape or a creation call it is that operation's
 * out_sharding (typing-rules D8); on anything else it is an assertion whose
 * failure is [E_ANNOT] with a `reshard` fix. Builtins are in tc_builtins.c.
 */
#include "shdc.h"

#define TS(t) ty_str(c->mesh, (t))

static Type check(TcCtx *c, Expr *e, const Type *annot);

static Type set(Expr *e, Type t) {
  e->ty = arena_alloc(sizeof(Type));
  *e->ty = t;
  return t;
}

/* ---- names --------------------------------------------------------------- */

static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 32 || lb > 32)
    return 99;
  int d[33][33];
  for (int i = 0; i <= la; i++)
    d[i][0] = i;
  for (int j = 0; j <= lb; j++)
    d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
  return d[la][lb];
}

static const char *suggest(TcCtx *c, const char *name) {
  const char *best = NULL;
  int bestd = 3;
  for (Scope *s = c->scope; s; s = s->up)
    for (int i = 0; i < s->syms.len; i++) {
      Symbol *sym = s->syms.data[i];
      int d = edit_distance(name, sym->name);
      if (d < bestd && d < (int)strlen(name)) {
        bestd = d;
        best = sym->name;
      }
    }
  static const char *builtins[] = {"exp", "log", "sin", "cos", "tanh", "sqrt", "abs", "relu", "sigmoid",
                                   "maximum", "minimum", "where", "sum", "mean", "max", "min", "transpose",
                                   "reshape", "einsum", "cast", "reshard", "zeros", "ones", "full", "iota",
                                   "normal", "uniform", "print", "save", "load", "arg", "clock", "grad",
                                   "value_and_grad", "psum", "pmax", "pmin", "pmean", "all_gather",
                                   "psum_scatter", "all_to_all", "ppermute", "axis_index", "pcast"};
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++) {
    int d = edit_distance(name, builtins[i]);
    if (d < bestd && d < (int)strlen(name)) {
      bestd = d;
      best = builtins[i];
    }
  }
  for (int a = 0; a < c->mesh->naxes; a++) {
    int d = edit_distance(name, c->mesh->names[a]);
    if (d < bestd && d < (int)strlen(name)) {
      bestd = d;
      best = c->mesh->names[a];
    }
  }
  return best;
}

static Type check_name(TcCtx *c, Expr *e) {
  Symbol *s = tc_lookup(c, e->str);
  int un;
  if (!s && tc_builtin_code(e->str, &un)) {
    diag_error(e->pos, "E_ARG", "'%s' is a builtin function, not a value; call it: %s(...)", e->str, e->str);
    return ty_error();
  }
  if (!s) {
    const char *sug = suggest(c, e->str);
    if (sug)
      diag_error(e->pos, "E_NAME", "unknown name '%s'; did you mean '%s'?", e->str, sug);
    else
      diag_error(e->pos, "E_NAME", "unknown name '%s'", e->str);
    return ty_error();
  }
  e->sym = s;
  switch (s->kind) {
  case SYM_LOCAL:
    return s->type;
  case SYM_CONST:
    return s->type;
  case SYM_FUNC: {
    Type t = ty_void();
    t.kind = TY_FUNC;
    return t;
  }
  case SYM_AXIS: {
    Type t = ty_void();
    t.kind = TY_AXIS;
    return t;
  }
  }
  return ty_error();
}

/* ---- values: only arrays and scalars flow through operators ---------------- */

static bool want_array(TcCtx *c, Expr *e, const Type *t, const char *what) {
  switch (t->kind) {
  case TY_ARRAY:
    return true;
  case TY_ERROR:
    return false;
  case TY_FUNC:
    diag_error(e->pos, "E_ARG", "%s: '%s' is a function, not a value; call it", what, e->str ? e->str : "?");
    return false;
  case TY_AXIS:
    diag_error(e->pos, "E_ARG", "%s: '%s' is a mesh axis, not a value; use axis_index(%s) in a manual function",
               what, e->str ? e->str : "?", e->str ? e->str : "AXIS");
    return false;
  case TY_TUPLE:
    diag_error(e->pos, "E_ARG", "%s: a tuple of %d values is not an array; destructure it with let (a, b) = ...",
               what, t->nelems);
    return false;
  case TY_VOID:
    diag_error(e->pos, "E_ARG", "%s: this call returns no value", what);
    return false;
  case TY_STRING:
    diag_error(e->pos, "E_ARG", "%s: a string is not an array", what);
    return false;
  case TY_TAPE:
    break;
  }
  return false;
}

/* ---- operators -------------------------------------------------------------- */

static Type check_unary(TcCtx *c, Expr *e) {
  Type x = check(c, e->lhs, NULL);
  if (!want_array(c, e->lhs, &x, "-"))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "negation");
  Type out;
  return rule_unary(&r, UN_NEG, &x, &out) ? out : ty_error();
}

static const char *binop_opname(int op) {
  switch (op) {
  case BIN_ADD: return "add";
  case BIN_SUB: return "subtract";
  case BIN_MUL: return "multiply";
  case BIN_DIV: return "divide";
  default: return arena_printf("comparison %s", ast_binop_text(op));
  }
}

static Type check_matmul(TcCtx *c, Expr *e, const Type *annot) {
  Type a = check(c, e->lhs, NULL), b = check(c, e->rhs, NULL);
  if (!want_array(c, e->lhs, &a, "@") | !want_array(c, e->rhs, &b, "@"))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, "matmul");
  TcInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  int rank, drank;
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

static Type check_binary(TcCtx *c, Expr *e, const Type *annot) {
  if (e->op == BIN_MATMUL)
    return check_matmul(c, e, annot);
  Type a = check(c, e->lhs, NULL), b = check(c, e->rhs, NULL);
  const char *name = ast_binop_text(e->op);
  if (!want_array(c, e->lhs, &a, name) | !want_array(c, e->rhs, &b, name))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, binop_opname(e->op));
  const Type *ops[2] = {&a, &b};
  Type out;
  return rule_elementwise(&r, e->op, 2, ops, &out) ? out : ty_error();
}

/* ---- calls ------------------------------------------------------------------- */

void tc_split_args(Expr *call, Expr **pos, int maxpos, int *npos, Expr **kw, const char **kwnames, int nkw,
                   bool *ok) {
  *npos = 0;
  for (int k = 0; k < nkw; k++)
    kw[k] = NULL;
  bool seen_kw = false;
  const char *fname = call->callee && call->callee->kind == EX_NAME ? call->callee->str : "the function";
  for (int i = 0; i < call->args.len; i++) {
    Expr *a = call->args.data[i];
    if (a->kind != EX_KWARG) {
      if (seen_kw) {
        diag_error(a->pos, "E_ARG", "%s: positional argument after a keyword argument", fname);
        *ok = false;
        continue;
      }
      if (*npos >= maxpos) {
        diag_error(a->pos, "E_ARG", "%s takes at most %d positional argument%s", fname, maxpos,
                   maxpos == 1 ? "" : "s");
        *ok = false;
        continue;
      }
      pos[(*npos)++] = a;
      continue;
    }
    seen_kw = true;
    int k = 0;
    while (k < nkw && strcmp(kwnames[k], a->str))
      k++;
    if (k == nkw) {
      Str s = {0};
      for (int j = 0; j < nkw; j++)
        str_printf(&s, "%s%s=", j ? ", " : "", kwnames[j]);
      if (nkw)
        diag_error(a->pos, "E_ARG", "%s has no argument '%s'; it takes %s", fname, a->str, str_cstr(&s));
      else
        diag_error(a->pos, "E_ARG", "%s takes no keyword arguments", fname);
      free(s.buf);
      *ok = false;
      continue;
    }
    if (kw[k]) {
      diag_error(a->pos, "E_ARG", "%s: argument '%s' is given twice", fname, a->str);
      *ok = false;
      continue;
    }
    kw[k] = a->lhs;
  }
}

/* Checks call arguments against parameter types. An annotatable argument
 * (zeros(), a contraction...) takes the parameter type as its annotation. */
static bool check_call_args(TcCtx *c, Expr *call, FuncDecl *f, Expr **args, int nargs, const char *fname) {
  bool ok = true;
  int np = f->params.len;
  if (nargs != np) {
    diag_error(call->pos, "E_ARG", "%s takes %d argument%s but %d %s given", fname, np, np == 1 ? "" : "s", nargs,
               nargs == 1 ? "was" : "were");
    for (int i = 0; i < nargs; i++)
      check(c, args[i], NULL);
    return false;
  }
  for (int i = 0; i < nargs; i++) {
    Type *pt = &f->param_types[i];
    Param *p = f->params.data[i];
    if (pt->kind == TY_ERROR) {
      tc_expr_unannotated(c, args[i]);
      ok = false;
      continue;
    }
    Type t = tc_expr_annot(c, args[i], pt, arena_printf("argument '%.*s' of %s", p->name.len, p->name.start, fname));
    ok &= t.kind != TY_ERROR;
  }
  return ok;
}

Type tc_call_user(TcCtx *c, Expr *e, FuncDecl *f, Vec *argv, int first_arg) {
  const char *fname = tok_str(f->name);
  e->fn = f;
  if (c->manual) {
    diag_error(e->pos, "E_MANUAL",
               "a manual function body cannot call other functions (here '%s'); call it from the global view",
               fname);
    return ty_error();
  }
  if (c->fn)
    vec_push(&c->fn->callees, e);
  Expr *args[64];
  int n = 0;
  bool ok = true;
  for (int i = first_arg; i < argv->len && n < 64; i++) {
    Expr *a = argv->data[i];
    if (a->kind == EX_KWARG) {
      diag_error(a->pos, "E_ARG", "%s takes positional arguments only", fname);
      ok = false;
      continue;
    }
    args[n++] = a;
  }
  ok &= check_call_args(c, e, f, args, n, fname);
  if (!ok || !f->ok)
    return ty_error();
  if (f->nresults == 0)
    return ty_void();
  if (f->nresults == 1 && !f->result_tuple)
    return f->result_types[0];
  return ty_tuple(f->nresults, f->result_types);
}

/* grad(f, wrt=...)(args) and value_and_grad(f, wrt=...)(args). */
static Type check_grad(TcCtx *c, Expr *e) {
  Expr *g = e->callee;
  bool with_value = !strcmp(g->callee->str, "value_and_grad");
  const char *gname = g->callee->str;
  TcInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  e->builtin = with_value ? BI_VALUE_AND_GRAD : BI_GRAD;
  info->with_value = with_value;
  if (c->manual) {
    diag_error(e->pos, "E_MANUAL", "%s is not available inside a manual function body; take the gradient of a "
                                   "global-view function that calls the manual one", gname);
    return ty_error();
  }
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"wrt"};
  int npos;
  bool ok = true;
  tc_split_args(g, pos, 1, &npos, kw, kwn, 1, &ok);
  if (!ok)
    return ty_error();
  if (npos != 1 || pos[0]->kind != EX_NAME) {
    diag_error(g->pos, "E_ARG", "%s takes a function name: %s(f, wrt=(0, 1))(args...)", gname, gname);
    return ty_error();
  }
  Symbol *s = tc_lookup(c, pos[0]->str);
  if (!s || s->kind != SYM_FUNC) {
    diag_error(pos[0]->pos, s ? "E_ARG" : "E_NAME", s ? "%s: '%s' is not a function" : "%s: unknown function '%s'",
               gname, pos[0]->str);
    return ty_error();
  }
  FuncDecl *f = s->fn;
  e->fn = f;
  if (c->fn)
    vec_push(&c->fn->callees, e);
  const char *fname = tok_str(f->name);
  /* wrt: one position (the gradient itself) or a tuple (a tuple of them). */
  unsigned mask = 0;
  bool tuple = false;
  int order[MAX_RANK * 2], norder = 0;
  Expr *w = kw[0];
  Expr *items[32];
  int nitems = 0;
  if (!w) {
    items[nitems++] = NULL;
  } else if (w->kind == EX_TUPLE || w->kind == EX_LIST) {
    tuple = true;
    for (int i = 0; i < w->args.len && nitems < 32; i++)
      items[nitems++] = w->args.data[i];
  } else {
    items[nitems++] = w;
  }
  int np = f->params.len;
  Pos wrt_pos[32];
  for (int i = 0; i < nitems; i++) {
    int64_t k = 0;
    if (items[i] && !tc_const_int(c, items[i], &k))
      return ty_error();
    Pos p = items[i] ? items[i]->pos : g->pos;
    if (k < 0 || k >= np) {
      diag_error(p, "E_ARG", "%s: wrt position %lld is out of range: %s has %d parameter%s (positions 0 to %d)",
                 gname, (long long)k, fname, np, np == 1 ? "" : "s", np - 1);
      return ty_error();
    }
    wrt_pos[norder] = p;
    if (mask & (1u << k)) {
      diag_error(p, "E_ARG", "%s: position %lld appears twice in wrt", gname, (long long)k);
      return ty_error();
    }
    mask |= 1u << k;
    order[norder++] = (int)k;
  }
  for (int i = 0; i < norder; i++)
    info->perm[i] = order[i];
  info->mask = mask;
  info->dim = norder;
  info->has_perm = tuple;
  Expr *args[64];
  int n = 0;
  for (int i = 0; i < e->args.len && n < 64; i++)
    args[n++] = e->args.data[i];
  if (!check_call_args(c, e, f, args, n, fname) || !f->ok)
    return ty_error();
  if (f->nresults != 1 || f->result_types[0].kind != TY_ARRAY || f->result_types[0].rank != 0 ||
      !ty_is_float(f->result_types[0].dtype)) {
    diag_error(pos[0]->pos, "E_ARG",
               "%s needs a function that returns one float scalar (f32 or f64, maybe <U:..> or <R:..>); %s returns "
               "%s",
               gname, fname,
               f->nresults == 1 ? TS(&f->result_types[0])
               : f->nresults == 0 ? "nothing" : arena_printf("%d values", f->nresults));
    return ty_error();
  }
  Type outs[40];
  int nout = 0;
  if (with_value)
    outs[nout++] = f->result_types[0];
  for (int i = 0; i < norder; i++) {
    Type *pt = &f->param_types[order[i]];
    if (!ty_is_float(pt->dtype)) {
      Param *p = f->params.data[order[i]];
      diag_error(wrt_pos[i], "E_DTYPE",
                 "%s: wrt position %d is parameter '%.*s' of %s, which is %s; only float (f32, f64) parameters have "
                 "gradients: leave it out of wrt",
                 gname, order[i], p->name.len, p->name.start, fname, TS(pt));
      return ty_error();
    }
    outs[nout++] = ty_ct(pt);
  }
  if (!with_value && !tuple)
    return outs[0];
  return ty_tuple(nout, outs);
}

static Type check_call(TcCtx *c, Expr *e, const Type *annot) {
  Expr *callee = e->callee;
  if (callee->kind == EX_CALL && callee->callee->kind == EX_NAME &&
      (!strcmp(callee->callee->str, "grad") || !strcmp(callee->callee->str, "value_and_grad")))
    return check_grad(c, e);
  if (callee->kind != EX_NAME) {
    diag_error(e->pos, "E_ARG", "only functions can be called");
    return ty_error();
  }
  Symbol *s = tc_lookup(c, callee->str);
  if (s && s->kind == SYM_FUNC)
    return tc_call_user(c, e, s->fn, &e->args, 0);
  int un;
  int code = tc_builtin_code(callee->str, &un);
  if (code && (!s || s->kind == SYM_AXIS)) {
    e->builtin = code;
    return tc_builtin(c, e, annot);
  }
  if (s) {
    diag_error(e->pos, "E_ARG", "'%s' is not a function", callee->str);
    return ty_error();
  }
  const char *sug = suggest(c, callee->str);
  if (!strcmp(callee->str, "grad") || !strcmp(callee->str, "value_and_grad"))
    diag_error(e->pos, "E_ARG", "%s(f, wrt=...) makes a function; call it: %s(f, wrt=0)(args...)", callee->str,
               callee->str);
  else if (sug)
    diag_error(e->pos, "E_NAME", "unknown function '%s'; did you mean '%s'?", callee->str, sug);
  else
    diag_error(e->pos, "E_NAME", "unknown function '%s'", callee->str);
  return ty_error();
}

/* ---- dispatch ----------------------------------------------------------------- */

static Type check_literal(TcCtx *c, Expr *e) {
  Type t;
  switch (e->kind) {
  case EX_INT:
    if (e->ival > 2147483647LL) {
      diag_error(e->pos, "E_DTYPE", "integer literal %lld does not fit in i32", (long long)e->ival);
      return ty_error();
    }
    t = ty_scalar(DT_I32);
    break;
  case EX_FLOAT:
    t = ty_scalar(DT_F32);
    break;
  default:
    t = ty_scalar(DT_BOOL);
    break;
  }
  t.weak = true;
  return t;
}

static Type check(TcCtx *c, Expr *e, const Type *annot) {
  Type t;
  switch (e->kind) {
  case EX_INT:
  case EX_FLOAT:
  case EX_BOOL:
    t = check_literal(c, e);
    break;
  case EX_STRING:
    t = ty_void();
    t.kind = TY_STRING;
    break;
  case EX_NAME:
    t = check_name(c, e);
    break;
  case EX_UNARY:
    t = check_unary(c, e);
    break;
  case EX_BINARY:
    t = check_binary(c, e, annot);
    break;
  case EX_CALL:
    t = check_call(c, e, annot);
    break;
  case EX_AS: {
    Type at;
    if (!tc_resolve_type(c, e->type, &at)) {
      tc_expr_unannotated(c, e->lhs);
      t = ty_error();
      break;
    }
    t = tc_expr_annot(c, e->lhs, &at, "`as`");
    if (t.kind != TY_ERROR)
      t = at;
    break;
  }
  case EX_TUPLE: {
    int n = e->args.len;
    Type *elems = arena_alloc(sizeof(Type) * (size_t)(n + 1));
    bool ok = true;
    for (int i = 0; i < n; i++) {
      elems[i] = check(c, e->args.data[i], NULL);
      ok &= elems[i].kind != TY_ERROR;
    }
    t = ok ? ty_tuple(n, elems) : ty_error();
    break;
  }
  case EX_LIST:
    diag_error(e->pos, "E_ARG", "a list [..] is only an argument of reshape or transpose(perm=...)");
    t = ty_error();
    break;
  case EX_TYPE:
    diag_error(e->pos, "E_ARG", "a type is not a value here; types are arguments of zeros, ones, full, iota, "
                                "normal, uniform, reshard and cast");
    t = ty_error();
    break;
  case EX_KWARG:
    diag_error(e->pos, "E_ARG", "keyword argument '%s=' outside a call", e->str);
    t = ty_error();
    break;
  default:
    t = ty_error();
  }
  return set(e, t);
}

Type tc_expr(TcCtx *c, Expr *e) { return check(c, e, NULL); }

Type tc_expr_unannotated(TcCtx *c, Expr *e) {
  Expr *saved = c->bad_annot;
  c->bad_annot = e;
  Type t = check(c, e, NULL);
  c->bad_annot = saved;
  return t.kind == TY_ERROR ? t : ty_error();
}

bool tc_is_annotatable(TcCtx *c, Expr *e) {
  if (e->kind == EX_BINARY)
    return e->op == BIN_MATMUL;
  if (e->kind != EX_CALL || e->callee->kind != EX_NAME)
    return false;
  Symbol *s = tc_lookup(c, e->callee->str);
  if (s && s->kind != SYM_AXIS)
    return false;
  int un;
  switch (tc_builtin_code(e->callee->str, &un)) {
  case BI_EINSUM: case BI_SUM: case BI_MEAN: case BI_MAX: case BI_MIN_RED: case BI_RESHAPE:
  case BI_ZEROS: case BI_ONES: case BI_FULL: case BI_IOTA: case BI_NORMAL: case BI_UNIFORM:
  case BI_LOAD: case BI_ARG:
    return true;
  default:
    return false;
  }
}

/* A weak scalar (a literal or a constant expression) takes the annotated
 * dtype and states, except unreduced (typing-rules D7). */
static bool weak_fits(const Type *t, const Type *annot) {
  if (!t->weak || t->rank != 0 || annot->rank != 0 || annot->U)
    return false;
  if (ty_is_float(t->dtype) && !ty_is_float(annot->dtype))
    return false;
  if (t->dtype == DT_BOOL) 
    return annot->dtype == DT_BOOL;
  return annot->dtype != DT_BOOL;
}

Type tc_expr_annot(TcCtx *c, Expr *e, const Type *annot, const char *where) {
  if (!annot || annot->kind != TY_ARRAY)
    return check(c, e, NULL);
  if (tc_is_annotatable(c, e))
    return check(c, e, annot);
  Type t = check(c, e, NULL);
  if (t.kind == TY_ERROR || t.kind != TY_ARRAY)
    return t;
  if (weak_fits(&t, annot)) {
    Type r = *annot;
    if (c->annot_v_free)
      r.V = 0;
    *e->ty = r;
    return r;
  }
  Type tt = t;
  tt.weak = false;
  Type want = *annot;
  if (c->annot_v_free)
    tc_manual_states_from(c, &want, t.V, t.U, t.R);
  if (ty_equal(&tt, &want))
    return t;
  Type plain_t = ty_strip_sharding(&t), plain_a = ty_strip_sharding(annot);
  if (!ty_equal(&plain_t, &plain_a)) {
    const char *code = t.dtype != annot->dtype ? "E_DTYPE" : "E_SHAPE";
    const char *fix = "";
    if (t.dtype != annot->dtype) {
      fix = arena_printf("; convert with cast(x, %s)", ty_dtype_name(annot->dtype));
    } else if (ty_global_count(&t) == ty_global_count(annot) && annot->rank) {
      Str dims = {0};
      for (int d = 0; d < annot->rank; d++)
        str_printf(&dims, "%s%lld", d ? ", " : "", (long long)annot->shape[d]);
      fix = arena_printf("; reshape it: reshape(x, [%s])", str_cstr(&dims));
      free(dims.buf);
    }
    diag_error(e->pos, code, "%s: the value has type %s but %s is expected%s", where, TS(&t), TS(annot), fix);
    return ty_error();
  }
  if ((t.V != annot->V) && c->manual) {
    AxisSet add = annot->V & ~t.V, drop = t.V & ~annot->V;
    diag_error(e->pos, "E_VMA", "%s: the value has type %s but %s is expected; %s", where, TS(&t), TS(annot),
               add ? arena_printf("make it varying over %s with pcast(x, %s, to=varying)", ty_axes_str(c->mesh, add),
                                  ty_axes_arg(c->mesh, add))
                   : arena_printf("it varies over %s: combine the devices' values with a collective (psum(x, %s), "
                                  "all_gather(x, %s, dim=k, to=invariant), ...)",
                                  ty_axes_str(c->mesh, drop), ty_axes_arg(c->mesh, drop), ty_axes_arg(c->mesh, drop)));
  }
  else
    diag_error(e->pos, "E_ANNOT",
               "%s: the value has type %s but %s is expected; an annotation on this expression is an assertion, "
               "so write reshard(x, %s) to move the data",
               where, TS(&t), TS(annot), TS(annot));
  return ty_error();
}
