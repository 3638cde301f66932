/* tc_expr.c: typing of expressions: literals, names, operators, @, `as`,
 * calls of user functions and of grad/value_and_grad.
 *
 * An annotation reaches an expression as `annot`. On a contraction, a
 * reduction, a reshape or a creation call it is that operation's
 * out_sharding (typing-rules D8), and so on an indexing expression, take,
 * take_along_axis and one_hot (language.md §8); on anything else it is an
 * assertion whose
 * failure is [E_ANNOT] with a `reshard` fix. Builtins and operators are
 * typed by their rows of the families' tables (BuiltinDef.check, ops.c):
 * a call's found by its name, an operator's by its syntax, its code and the
 * kind of its operands.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))

static Type check(TcCtx *c, Expr *e, const Type *annot);

static Type set(Expr *e, Type t) {
  e->ty = arena_alloc(sizeof(Type));
  *e->ty = t;
  return t;
}

/* ---- names --------------------------------------------------------------- */

/* A name close to an unknown one, looked for only when the error will be
 * printed and among the latest names of each scope, so that a file of many
 * errors costs linear time. */
static const char *suggest(TcCtx *c, const char *name) {
  const char *best = NULL;
  int bestd = 3;
  if (!diag_will_show())
    return NULL;
  for (Scope *s = c->scope; s; s = s->up)
    for (int i = s->syms.len > 500 ? s->syms.len - 500 : 0; i < s->syms.len; i++) {
      Symbol *sym = s->syms.data[i];
      int d = str_distance(name, sym->name, bestd);
      if (d < bestd && d < (int)strlen(name)) {
        bestd = d;
        best = sym->name;
      }
    }
  for (const char *const *b = op_builtin_names(); *b; b++) {
    int d = str_distance(name, *b, bestd);
    if (d < bestd && d < (int)strlen(name)) {
      bestd = d;
      best = *b;
    }
  }
  for (int a = 0; a < c->mesh->naxes; a++) {
    int d = str_distance(name, c->mesh->names[a], bestd);
    if (d < bestd && d < (int)strlen(name)) {
      bestd = d;
      best = c->mesh->names[a];
    }
  }
  return best;
}

static Type check_name(TcCtx *c, Expr *e) {
  Symbol *s = tc_lookup(c, e->str);
  if (!s && op_builtin(e->str)) {
    diag_error(e->pos, "E_ARG", "'%s' is a builtin function, not a value; call it: %s(...)", e->str, e->str);
    return ty_error();
  }
  if (!s && op_form(e->str)) {
    diag_error(e->pos, "E_ARG", "'%s' makes a function, it is not a value; call it: %s(f%s)(args...)", e->str, e->str,
               op_form(e->str) == FORM_REMAT ? "" : op_form(e->str) == FORM_VJP_SAVE ? ", slot, slots=S"
               : op_form(e->str) == FORM_VJP_LOAD ? ", slot" : ", wrt=...");
    return ty_error();
  }
  if (!s) {
    const char *sug = suggest(c, e->str);
    if (sug)
    {
      diag_error(e->pos, "E_NAME", "unknown name '%s'; did you mean '%s'?", e->str, sug);
      diag_fix_replace(e->tok.pos, (Pos){e->tok.pos.file, e->tok.pos.line, e->tok.pos.col + e->tok.len}, sug,
                       arena_printf("replace with '%s'", sug));
    }
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
  case SYM_STRUCT:
  case SYM_TYPE:
    diag_error(e->pos, "E_ARG", "'%s' is a type, not a value; %s", e->str,
               s->kind == SYM_STRUCT ? arena_printf("construct one with %s(FIELD=..., ...) or zeros(%s)", e->str, e->str)
                                     : arena_printf("create one with zeros(%s)", e->str));
    return ty_error();
  }
  return ty_error();
}

/* ---- values: only arrays and scalars flow through operators ---------------- */

bool tc_want_array(TcCtx *c, Expr *e, const Type *t, const char *what) {
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
  case TY_STRUCT:
    diag_error(e->pos, "E_ARG", "%s: %s is a struct (%s), not an array; use one of its fields (x.FIELD)", what,
               tc_expr_text(e), t->sdef->name);
    return false;
  case TY_TAPE:
    break;
  }
  return false;
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

/* The expression whose value did not match its expected type, reported
 * last (check_call_args adds a note at the parameter's declaration). */
static struct {
  const Expr *at;
  int count;
} mismatch;

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
    if (t.kind == TY_ERROR && mismatch.at == args[i] && mismatch.count == diag_error_count() && p->name.pos.file)
      diag_note(p->name.pos, "parameter '%.*s' of %s is declared %s here", p->name.len, p->name.start, fname,
                TS(pt));
  }
  return ok;
}

Type tc_call_user(TcCtx *c, Expr *e, FuncDecl *f, Vec *argv, int first_arg) {
  const char *fname = tok_str(f->name);
  e->fn = f;
  if (c->manual && f->manual) {
    diag_error(e->pos, "E_MANUAL", "%s is a manual function; a manual body calls global-view functions (typed "
               "with its device-local values) but not another manual function: call %s from the global view",
               fname, fname);
    return ty_error();
  }
  if (c->fn)
    vec_push(&c->fn->callees, e);
  Expr **args = arena_alloc(sizeof(Expr *) * (size_t)(argv->len + 1));
  int n = 0;
  bool ok = true;
  for (int i = first_arg; i < argv->len; i++) {
    Expr *a = argv->data[i];
    if (a->kind == EX_KWARG) {
      diag_error(a->pos, "E_ARG", "%s takes positional arguments only", fname);
      ok = false;
      continue;
    }
    args[n++] = a;
  }
  if (ok && f->ntparams && !f->mscope && tc_meta_params(f)) {
    /* fn and axis parameters: the view of f with them bound, their
     * arguments taken out of the call's (language.md 10.4). */
    f = tc_bind_meta(c, e, f, args, &n, argv);
    if (!f)
      return ty_error();
    e->fn = f;
  }
  if (ok && c->manual) {
    /* From a manual body: the instance for these device-local arguments. */
    f = tc_instantiate_manual(c, e, f, args, n);
    if (!f)
      return ty_error();
    e->fn = f;
  } else if (ok && f->ntparams) {
    /* A generic function: the instance for these arguments' types. */
    f = tc_instantiate_call(c, e, f, args, n);
    if (!f)
      return ty_error();
    e->fn = f;
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
  bool with_value = op_form(g->callee->str) == GRAD_WITH_VALUE;
  const char *gname = g->callee->str;
  TcInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  e->grad = with_value ? GRAD_WITH_VALUE : GRAD_PLAIN;
  info->with_value = with_value;
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
  const FuncDecl *written = f;   /* wrt counts its parameters, fn and axis ones too */
  if (f->ntparams || c->manual) {
    /* grad of a generic function, or inside a manual body (§9.7): the
     * instance for the call's arguments. */
    for (int i = 0; i < e->args.len; i++)
      if (((Expr *)e->args.data[i])->kind == EX_KWARG) {
        diag_error(((Expr *)e->args.data[i])->pos, "E_ARG", "%s takes positional arguments only", fname);
        return ty_error();
      }
    if (f->ntparams && tc_meta_params(f)) {   /* language.md 10.4 */
      int n = e->args.len;
      f = tc_bind_meta(c, e, f, (Expr **)e->args.data, &n, &e->args);
      if (!f)
        return ty_error();
    }
    f = c->manual ? tc_instantiate_manual(c, e, f, (Expr **)e->args.data, e->args.len)
                  : tc_instantiate_call(c, e, f, (Expr **)e->args.data, e->args.len);
    if (!f)
      return ty_error();
    e->fn = f;
  }
  /* wrt: one position (the gradient itself) or a tuple (a tuple of them),
   * any number of them. */
  bool tuple = false;
  Expr *w = kw[0];
  int nitems = w && (w->kind == EX_TUPLE || w->kind == EX_LIST) ? w->args.len : 1;
  Expr **items = arena_alloc(sizeof(Expr *) * (size_t)(nitems + 1));
  if (!w) {
    items[0] = NULL;
  } else if (w->kind == EX_TUPLE || w->kind == EX_LIST) {
    tuple = true;
    for (int i = 0; i < nitems; i++)
      items[i] = w->args.data[i];
  } else {
    items[0] = w;
  }
  int np = f->params.len;
  int64_t *order = arena_alloc(sizeof(int64_t) * (size_t)(nitems + 1));
  int norder = 0;
  Pos *wrt_pos = arena_alloc(sizeof(Pos) * (size_t)(nitems + 1));
  bool *seen = arena_alloc((size_t)np + 1);
  for (int i = 0; i < nitems; i++) {
    int64_t k = 0;
    if (items[i] && !tc_const_int(c, items[i], &k))
      return ty_error();
    Pos p = items[i] ? items[i]->pos : g->pos;
    if (written != f && k >= 0 && k < written->params.len) {   /* past the fn and axis parameters */
      const Param *wp = written->params.data[k];
      if (wp->type->meta) {
        diag_error(p, "E_ARG", "%s: wrt position %lld is parameter '%.*s' of %s, `%s`: only a value has a "
                   "gradient; leave it out of wrt", gname, (long long)k, wp->name.len, wp->name.start, fname,
                   wp->type->meta == 'f' ? "fn" : "axis");
        return ty_error();
      }
      int skip = 0;
      for (int j = 0; j < k; j++)
        skip += ((Param *)written->params.data[j])->type->meta != 0;
      k -= skip;
    }
    if (k < 0 || k >= np) {
      diag_error(p, "E_ARG", "%s: wrt position %lld is out of range: %s has %d parameter%s (positions 0 to %d)",
                 gname, (long long)k, fname, np, np == 1 ? "" : "s", np - 1);
      return ty_error();
    }
    wrt_pos[norder] = p;
    if (seen[k]) {
      diag_error(p, "E_ARG", "%s: position %lld appears twice in wrt", gname, (long long)k);
      return ty_error();
    }
    seen[k] = true;
    order[norder++] = k;
  }
  info->wrt = order;
  info->nwrt = norder;
  info->has_perm = tuple;
  Expr **args = (Expr **)e->args.data;
  if (!check_call_args(c, e, f, args, e->args.len, fname) || !f->ok)
    return ty_error();
  if (f->nresults != 1 || f->result_types[0].kind != TY_ARRAY || f->result_types[0].rank != 0 ||
      !ty_is_float(f->result_types[0].dtype)) {
    diag_error(pos[0]->pos, "E_ARG",
               "%s needs a function that returns one float scalar (f32, f64 or bf16, maybe <U:..> or <R:..>); %s returns "
               "%s",
               gname, fname,
               f->nresults == 1 ? TS(&f->result_types[0])
               : f->nresults == 0 ? "nothing" : arena_printf("%d values", f->nresults));
    return ty_error();
  }
  Type *outs = arena_alloc(sizeof(Type) * (size_t)(norder + 2));
  int nout = 0;
  if (with_value)
    outs[nout++] = f->result_types[0];
  for (int i = 0; i < norder; i++) {
    Type *pt = &f->param_types[order[i]];
    if (pt->kind == TY_STRUCT) {
      /* A struct's gradient is the struct of its leaves' cotangents (§9.4). */
      for (int k = 0; k < pt->nelems; k++)
        if (!ty_is_float(pt->elems[k].dtype)) {
          Param *p = f->params.data[order[i]];
          diag_error(wrt_pos[i], "E_GRAD",
                     "%s: wrt position %d is parameter '%.*s' of %s, a %s whose field %s is %s; a struct has a "
                     "gradient only if every leaf is a float (f32, f64, bf16): move the integer fields to another "
                     "parameter, or leave it out of wrt",
                     gname, (int)order[i], p->name.len, p->name.start, fname, pt->sdef->name,
                     ty_leaf_path(pt->sdef, k), TS(&pt->elems[k]));
          return ty_error();
        }
      outs[nout++] = ty_ct(pt);
      continue;
    }
    if (!ty_is_float(pt->dtype)) {
      Param *p = f->params.data[order[i]];
      diag_error(wrt_pos[i], "E_DTYPE",
                 "%s: wrt position %d is parameter '%.*s' of %s, which is %s; only float (f32, f64, bf16) parameters have "
                 "gradients: leave it out of wrt",
                 gname, (int)order[i], p->name.len, p->name.start, fname, TS(pt));
      return ty_error();
    }
    outs[nout++] = ty_ct(pt);
  }
  if (!with_value && !tuple)
    return outs[0];
  return ty_tuple(nout, outs);
}

/* annot: the expected type (a struct one reaches constructions and struct
 * creation only). */
/* remat(f)(args): a call of f whose inside values a gradient does not keep
 * but computes again (language.md §9.8). */
static Type check_remat(TcCtx *c, Expr *e) {
  Expr *r = e->callee;
  if (r->args.len != 1 || ((Expr *)r->args.data[0])->kind != EX_NAME) {
    diag_error(r->pos, "E_ARG", "remat takes a function name: remat(f)(args...)");
    return ty_error();
  }
  Expr *fn = r->args.data[0];
  Symbol *s = tc_lookup(c, fn->str);
  if (!s || s->kind != SYM_FUNC) {
    diag_error(fn->pos, s ? "E_ARG" : "E_NAME", s ? "remat: '%s' is not a function" : "remat: unknown function '%s'",
               fn->str);
    return ty_error();
  }
  /* In a manual body, per call (language.md 10.3): f's instance for the
   * device-local arguments, called rather than inlined (lower.c). */
  if (s->fn->manual) {
    diag_error(fn->pos, "E_ARG", "remat of the manual function %s: remat a global-view function (which may call it)",
               fn->str);
    return ty_error();
  }
  e->remat = true;
  return tc_call_user(c, e, s->fn, &e->args, 0);
}

/* vjp_save(f, slot, slots=S)(args) and vjp_load(f, slot)(gy) (language.md
 * §9.8): f's call with its residuals kept at entry slot of S, and f's
 * reverse sweep from that entry. The saves seen so far, per function being
 * checked: a load takes its function's instance (and so its types) from
 * the last save of the same name before it. */
typedef struct {
  const FuncDecl *in;
  const char *name;
  Expr *save;
} VjpSave;
static Vec vjp_saves;   /* VjpSave * */

void tc_vjp_reset(void) {
  free(vjp_saves.data);
  vjp_saves = (Vec){0};
}

static bool same_dims(const Type *a, const Type *b) {
  bool same = a->rank == b->rank;
  for (int d = 0; same && d < a->rank; d++)
    same = a->shape[d] == b->shape[d];
  return same;
}

/* The function f names in form(f, slot, ...), and its slot typed; NULL
 * after reporting. */
static Symbol *vjp_form_args(TcCtx *c, Expr *r, const char *form, Expr **pos, Expr **kw, const char **kwn, int nkw) {
  int npos;
  bool ok = true;
  tc_split_args(r, pos, 2, &npos, kw, kwn, nkw, &ok);
  if (!ok)
    return NULL;
  const char *usage = nkw ? "vjp_save(f, slot, slots=S)(args...)" : "vjp_load(f, slot)(cotangents...)";
  if (npos != 2 || pos[0]->kind != EX_NAME) {
    diag_error(r->pos, "E_ARG", "%s takes a function name and an entry: %s", form, usage);
    return NULL;
  }
  Symbol *s = tc_lookup(c, pos[0]->str);
  if (!s || s->kind != SYM_FUNC) {
    diag_error(pos[0]->pos, s ? "E_ARG" : "E_NAME", s ? "%s: '%s' is not a function" : "%s: unknown function '%s'",
               form, pos[0]->str);
    return NULL;
  }
  if (s->fn->manual) {
    diag_error(pos[0]->pos, "E_ARG", "%s of the manual function %s: name a global-view function (which may call it)",
               form, pos[0]->str);
    return NULL;
  }
  Type st = tc_expr(c, pos[1]);
  if (st.kind == TY_ERROR)
    return NULL;
  if (st.kind != TY_ARRAY || st.rank != 0 || st.dtype != DT_I32) {
    diag_error(pos[1]->pos, "E_ARG", "%s: the entry (slot) is an integer scalar, not %s: %s", form, TS(&st), usage);
    return NULL;
  }
  return s;
}

static Type check_vjp_save(TcCtx *c, Expr *e) {
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {"slots"};
  Symbol *s = vjp_form_args(c, e->callee, "vjp_save", pos, kw, kwn, 1);
  if (!s)
    return ty_error();
  int64_t n = 0;
  if (!kw[0]) {
    diag_error(e->callee->pos, "E_ARG", "vjp_save needs slots=S, the number of entries its tapes keep (a "
               "compile-time integer): vjp_save(%s, slot, slots=S)(args...)", pos[0]->str);
    return ty_error();
  }
  if (!tc_const_int(c, kw[0], &n))
    return ty_error();
  if (n < 1 || n > INT32_MAX) {
    diag_error(kw[0]->pos, "E_ARG", "vjp_save: slots=%lld; the tapes keep at least one entry (slots=1 or more)",
               (long long)n);
    return ty_error();
  }
  Type t = tc_call_user(c, e, s->fn, &e->args, 0);
  if (t.kind == TY_ERROR)
    return t;
  TcInfo *info = tc_info(e);
  info->slots = n;
  info->slot = pos[1];
  e->vjp = FORM_VJP_SAVE;
  VjpSave *v = arena_alloc(sizeof *v);
  v->in = c->fn;
  v->name = pos[0]->str;
  v->save = e;
  vec_push(&vjp_saves, v);
  return t;
}

static Type check_vjp_load(TcCtx *c, Expr *e) {
  Expr *pos[2];
  if (!vjp_form_args(c, e->callee, "vjp_load", pos, NULL, NULL, 0))
    return ty_error();
  const VjpSave *v = NULL;
  for (int i = vjp_saves.len - 1; i >= 0 && !v; i--) {
    const VjpSave *w = vjp_saves.data[i];
    if (w->in == c->fn && !strcmp(w->name, pos[0]->str))
      v = w;
  }
  if (!v) {
    diag_error(pos[0]->pos, "E_ARG", "vjp_load(%s, ...) reads what a vjp_save(%s, ...) kept, but none comes before it "
               "in this function: write `let y = vjp_save(%s, slot, slots=S)(args...)` at the forward call, earlier "
               "in the same loop body", pos[0]->str, pos[0]->str, pos[0]->str);
    return ty_error();
  }
  FuncDecl *f = v->save->fn;
  if (e->args.len != f->nresults) {
    diag_error(e->pos, "E_ARG", "vjp_load(%s, ...) takes the cotangent of each result of %s: %d, not %d",
               pos[0]->str, tok_str(f->name), f->nresults, e->args.len);
    return ty_error();
  }
  for (int k = 0; k < e->args.len; k++) {
    Expr *a = e->args.data[k];
    Type want = ty_ct(&f->result_types[k]);
    Type t = a->kind == EX_KWARG ? ty_error() : tc_expr(c, a);
    if (a->kind == EX_KWARG) {
      diag_error(a->pos, "E_ARG", "vjp_load takes positional arguments only");
      return ty_error();
    }
    if (t.kind == TY_ERROR)
      return t;
    if (t.kind != want.kind || t.dtype != want.dtype || !same_dims(&t, &want)) {
      diag_error(a->pos, "E_ARG", "vjp_load(%s, ...): cotangent %d is %s, but %s's result %d is %s: give a value of "
                 "its shape and dtype", pos[0]->str, k, TS(&t), tok_str(f->name), k, TS(&f->result_types[k]));
      return ty_error();
    }
  }
  if (!f->params.len) {
    diag_error(pos[0]->pos, "E_ARG", "vjp_load(%s, ...): %s has no parameters, so there is no cotangent to give; "
               "call %s() without vjp_save and vjp_load", pos[0]->str, tok_str(f->name), tok_str(f->name));
    return ty_error();
  }
  Type *outs = arena_alloc(sizeof(Type) * (size_t)(f->params.len + 1));
  for (int i = 0; i < f->params.len; i++) {
    const Type *pt = &f->param_types[i];
    bool flt = pt->kind == TY_ARRAY && ty_is_float(pt->dtype);
    for (int k = 0; pt->kind == TY_STRUCT && k < pt->nelems; k++)
      flt = ty_is_float(pt->elems[k].dtype);
    if (!flt) {
      diag_error(pos[0]->pos, "E_GRAD", "vjp_load(%s, ...): parameter %d of %s is %s; vjp_load gives a cotangent "
                 "for every parameter, so each must be a float (f32, f64, bf16) or a struct of floats: pass the "
                 "others through a wrapper function's body instead", pos[0]->str, i, tok_str(f->name), TS(pt));
      return ty_error();
    }
    outs[i] = ty_ct(pt);
  }
  e->fn = f;
  e->vjp = FORM_VJP_LOAD;
  tc_info(e)->slot = pos[1];
  return f->params.len == 1 ? outs[0] : ty_tuple(f->params.len, outs);
}

static Type check_call(TcCtx *c, Expr *e, const Type *annot) {
  Expr *callee = e->callee;
  const Type *aannot = annot && annot->kind == TY_STRUCT ? NULL : annot;
  Type st;
  if (e->bi) {   /* built by the compiler, bound to its builtin (tc_struct.c) */
    if (tc_struct_op(c, e, annot, &st))
      return st;
    return tc_builtin(c, e, (e->bi->flags & BIF_STRUCT_ANNOT) ? annot : aannot);
  }
  int form = callee->kind == EX_CALL && callee->callee->kind == EX_NAME ? op_form(callee->callee->str) : 0;
  if (form == FORM_REMAT)
    return check_remat(c, e);
  if (form == FORM_VJP_SAVE)
    return check_vjp_save(c, e);
  if (form == FORM_VJP_LOAD)
    return check_vjp_load(c, e);
  if (form)
    return check_grad(c, e);
  if (callee->kind != EX_NAME) {
    diag_error(e->pos, "E_ARG", "only functions can be called");
    return ty_error();
  }
  Symbol *s = tc_lookup(c, callee->str);
  if (s && s->kind == SYM_FUNC)
    return tc_call_user(c, e, s->fn, &e->args, 0);
  if (s && s->kind == SYM_STRUCT)
    return tc_construct(c, e, s, annot);
  const BuiltinDef *bi = op_builtin(callee->str);
  if (bi && (!s || s->kind == SYM_AXIS)) {
    e->bi = bi;
    if (tc_struct_op(c, e, annot, &st))
      return st;
    return tc_builtin(c, e, (e->bi->flags & BIF_STRUCT_ANNOT) ? annot : aannot);
  }
  if (s) {
    diag_error(e->pos, "E_ARG", "'%s' is not a function", callee->str);
    return ty_error();
  }
  const char *sug = suggest(c, callee->str);
  if (op_form(callee->str) == FORM_REMAT)
    diag_error(e->pos, "E_ARG", "remat(f) makes a function; call it: remat(f)(args...)");
  else if (op_form(callee->str) >= FORM_VJP_SAVE)
    diag_error(e->pos, "E_ARG", "%s makes a function; call it: %s", callee->str,
               op_form(callee->str) == FORM_VJP_SAVE ? "vjp_save(f, slot, slots=S)(args...)"
                                                     : "vjp_load(f, slot)(cotangents...)");
  else if (op_form(callee->str))
    diag_error(e->pos, "E_ARG", "%s(f, wrt=...) makes a function; call it: %s(f, wrt=0)(args...)", callee->str,
               callee->str);
  else if (sug)
  {
    diag_error(e->pos, "E_NAME", "unknown function '%s'; did you mean '%s'?", callee->str, sug);
    diag_fix_replace(callee->tok.pos, (Pos){callee->tok.pos.file, callee->tok.pos.line, callee->tok.pos.col + callee->tok.len},
                     sug, arena_printf("replace with '%s'", sug));
  }
  else
    diag_error(e->pos, "E_NAME", "unknown function '%s'", callee->str);
  return ty_error();
}

/* ---- operators: rows of the builtin table, as calls are -------------------------- */

static OpSyntax syntax_of(const Expr *e) {
  switch (e->kind) {
  case EX_UNARY: return SYN_UNARY;
  case EX_BINARY: return e->op == BIN_MATMUL ? SYN_MATMUL : SYN_BINARY;
  case EX_INDEX: return SYN_INDEX;
  default: return SYN_STRING;
  }
}

static int operator_code(const Expr *e, OpSyntax syn) {
  return syn == SYN_INDEX || syn == SYN_STRING ? 0 : e->op;
}

/* The operands of -x, a + b and a @ b are typed first; the row for the
 * operator and the kind of its operands (a str picks the string family's)
 * types the expression. A binary operator that other rows take on a str
 * but this one does not is an error that lists those; otherwise the array
 * row says why the operand is not an array. */
/* sannot: the expected type when it is a struct (annot is then NULL). An
 * operator on a struct operand takes the row of its leaves (arrays): a row
 * that applies elementwise (BIF_ELEMENTWISE) is applied leaf by leaf
 * (tc_struct.c), any other sees the struct and says what it takes; a
 * stacked struct is indexed leaf by leaf. */
static Type check_operator(TcCtx *c, Expr *e, const Type *annot, const Type *sannot) {
  OpSyntax syn = syntax_of(e);
  int code = operator_code(e, syn);
  TypeKind kind = syn == SYN_STRING ? TY_STRING : TY_ARRAY;
  bool structs = false;
  if (syn == SYN_UNARY || syn == SYN_BINARY || syn == SYN_MATMUL) {
    Type a = tc_expr(c, e->lhs);
    Type b = e->rhs ? tc_expr(c, e->rhs) : a;
    if (a.kind == TY_STRING || b.kind == TY_STRING)
      kind = TY_STRING;
    structs = a.kind == TY_STRUCT || b.kind == TY_STRUCT;
  } else if (syn == SYN_INDEX) {
    Type x = tc_expr(c, e->lhs);
    if (x.kind == TY_STRUCT) {
      e->bi = op_operator(syn, code, TY_ARRAY);
      return tc_struct_index(c, e, &x, sannot);
    }
    e->lhs->pretyped = true;   /* the row's check types it again: the same type, once */
  }
  e->bi = op_operator(syn, code, kind);
  if (structs && kind == TY_ARRAY && e->bi && (e->bi->flags & BIF_ELEMENTWISE)) {
    Type t;
    e->lhs->pretyped = true;   /* tc_struct_op types the operands again: the same types, once */
    if (e->rhs)
      e->rhs->pretyped = true;
    if (tc_struct_op(c, e, sannot, &t))
      return t;
  }
  if (!e->bi && kind == TY_STRING && syn == SYN_BINARY) {
    diag_error(e->pos, "E_DTYPE", "%s is not defined on strings; a str supports %s", ast_binop_text(e->op),
               op_operators_phrase(SYN_BINARY, TY_STRING));
    return ty_error();
  }
  if (!e->bi)
    e->bi = op_operator(syn, code, TY_ARRAY);
  if (!e->bi)
    diag_ice("no row of the builtin table for operator %d of syntax %d", e->op, syn);
  return e->bi->check(c, e, annot);
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

/* The type of EX_LEAF: a leaf of its (typed) struct operand, or the
 * operand's own type. */
static Type leaf_type(const Expr *e) {
  const Type *x = e->lhs->ty;
  if (!x)
    diag_ice("a leaf of an untyped expression");
  return e->ival < 0 ? *x : x->elems[e->ival];
}

static Type check(TcCtx *c, Expr *e, const Type *annot) {
  Type t;
  if (e->pretyped) {
    e->pretyped = false;
    return *e->ty;
  }
  const Type *sannot = annot;   /* a struct annotation reaches the struct-valued forms only */
  if (annot && annot->kind == TY_STRUCT)
    annot = NULL;
  switch (e->kind) {
  case EX_INT:
  case EX_FLOAT:
  case EX_BOOL:
    t = check_literal(c, e);
    break;
  case EX_NAME:
    t = check_name(c, e);
    break;
  case EX_STRING:
  case EX_UNARY:
  case EX_BINARY:
  case EX_INDEX:
    t = check_operator(c, e, annot, sannot);
    break;
  case EX_CALL:
    t = check_call(c, e, sannot);
    break;
  case EX_FIELD:
    t = tc_field(c, e);
    break;
  case EX_LEAF:
    t = leaf_type(e);
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
    diag_error(e->pos, "E_ARG", "a list [..] is not a value; it is an argument of %s",
               op_builtins_phrase(BIF_LIST_ARG));
    t = ty_error();
    break;
  case EX_TYPE:
    diag_error(e->pos, "E_ARG", "a type is not a value here; types are arguments of %s",
               op_builtins_phrase(BIF_TYPE_ARG));
    t = ty_error();
    break;
  case EX_KWARG:
    diag_error(e->pos, "E_ARG", "keyword argument '%s=' outside a call", e->str);
    t = ty_error();
    break;
  default:
    t = ty_error();
  }
  /* An operation's result can outgrow its operands (an outer product). */
  if (t.kind == TY_ARRAY && !ty_check_size(&t, e->pos))
    t = ty_error();
  return set(e, t);
}

Type tc_expr(TcCtx *c, Expr *e) { return check(c, e, NULL); }

Type tc_expr_with(TcCtx *c, Expr *e, const Type *annot) { return check(c, e, annot); }

Type tc_expr_unannotated(TcCtx *c, Expr *e) {
  Expr *saved = c->bad_annot;
  c->bad_annot = e;
  Type t = check(c, e, NULL);
  c->bad_annot = saved;
  return t.kind == TY_ERROR ? t : ty_error();
}

bool tc_is_annotatable(TcCtx *c, Expr *e) {
  if (e->kind == EX_BINARY || e->kind == EX_INDEX) {
    OpSyntax syn = syntax_of(e);
    const BuiltinDef *row = op_operator(syn, operator_code(e, syn), TY_ARRAY);
    return row && (row->flags & BIF_ANNOT);
  }
  if (e->kind != EX_CALL || e->callee->kind != EX_NAME)
    return false;
  Symbol *s = tc_lookup(c, e->callee->str);
  if (s && s->kind == SYM_STRUCT)
    return true;   /* a construction: each field value as its field's annotation */
  if (s && s->kind != SYM_AXIS)
    return false;
  const BuiltinDef *bi = op_builtin(e->callee->str);
  return bi && (bi->flags & BIF_ANNOT);
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

/* Where a str is expected (a `str` annotation, parameter or result), the
 * value must be one. */
static Type check_str_annot(TcCtx *c, Expr *e, const Type *annot, const char *where) {
  /* load and arg read their type from the annotation, and say what a str
   * annotation means for them (BIF_STR_ANNOT); other calls must not see one. */
  const BuiltinDef *bi = e->kind == EX_CALL && e->callee->kind == EX_NAME ? op_builtin(e->callee->str) : NULL;
  bool reads_annot = bi && (bi->flags & BIF_STR_ANNOT) && tc_is_annotatable(c, e);
  Type t = check(c, e, reads_annot ? annot : NULL);
  if (t.kind == TY_ERROR || t.kind == TY_STRING)
    return t;
  if (t.kind == TY_ARRAY && t.rank == 0)
    diag_error(e->pos, "E_DTYPE", "%s: the value has type %s but str is expected; convert it: str(%s)", where,
               TS(&t), tc_expr_text(e));
  else
    diag_error(e->pos, "E_DTYPE", "%s: the value has type %s but str is expected", where,
               t.kind == TY_ARRAY ? TS(&t) : "(not a value)");
  return ty_error();
}

/* Where a struct type is expected: a construction, indexing or creation
 * takes it as each leaf's out_sharding; any other value must have it. */
static Type check_struct_annot(TcCtx *c, Expr *e, const Type *annot, const char *where) {
  Type t = check(c, e, tc_is_annotatable(c, e) ? annot : NULL);
  if (t.kind == TY_ERROR)
    return t;
  return tc_struct_fits(c, e, &t, annot, where) ? t : ty_error();
}

Type tc_expr_annot(TcCtx *c, Expr *e, const Type *annot, const char *where) {
  if (annot && annot->kind == TY_STRING)
    return check_str_annot(c, e, annot, where);
  if (annot && annot->kind == TY_STRUCT)
    return check_struct_annot(c, e, annot, where);
  if (!annot || annot->kind != TY_ARRAY)
    return check(c, e, NULL);
  if (tc_is_annotatable(c, e))
    return check(c, e, annot);
  Type t = check(c, e, NULL);
  if (t.kind == TY_STRUCT) {
    diag_error(e->pos, "E_DTYPE", "%s: the value is a struct (%s) but %s is expected", where, TS(&t), TS(annot));
    return ty_error();
  }
  if (t.kind == TY_STRING) {
    diag_error(e->pos, "E_DTYPE", "%s: the value is a str but %s is expected", where, TS(annot));
    return ty_error();
  }
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
    Type cast_t = t;
    cast_t.dtype = annot->dtype;
    if (t.dtype != annot->dtype && ty_equal(&cast_t, annot))
      diag_fix_wrap(e, "cast(", arena_printf(", %s)", ty_dtype_name(annot->dtype)),
                    arena_printf("convert to %s", ty_dtype_name(annot->dtype)));
    mismatch.at = e;
    mismatch.count = diag_error_count();
    return ty_error();
  }
  if ((t.V != annot->V) && c->manual) {
    AxisSet add = annot->V & ~t.V, drop = t.V & ~annot->V;
    diag_error(e->pos, "E_VMA", "%s: the value has type %s but %s is expected; %s", where, TS(&t), TS(annot),
               add ? arena_printf("make it varying over %s with pcast(x, %s, to=varying)", ty_axes_str(c->mesh, add),
                                  ty_axes_arg(c->mesh, add))
                   : arena_printf("it varies over %s: %s", ty_axes_str(c->mesh, drop),
                                  tc_combine_fix(c, e, &t, annot, drop, false)));
    if (!add)
      tc_combine_fix(c, e, &t, annot, drop, true);
  }
  else {
    /* The user's own expression in the fix (short, one line), and what
     * asserts the type: a parameter's at a call, the annotation elsewhere. */
    const char *src = diag_expr_source(e);
    if (!src || strlen(src) > 60 || strchr(src, '\n'))
      src = "x";
    const char *asserts = !strncmp(where, "argument '", 10)
                              ? "a parameter's type asserts the argument's type (a call moves no data)"
                          : !strcmp(where, "the return type")
                              ? "a result type asserts the returned value's type (a return moves no data)"
                          : !strncmp(where, "assignment to ", 14)
                              ? "a var's type asserts the assigned value's type (an assignment moves no data)"
                          : !strcmp(where, "`as`") ? "`as` on this expression asserts its type (it moves no data)"
                                                   : "a type annotation asserts the value's type (it moves no data)";
    diag_error(e->pos, "E_ANNOT",
               "%s: the value has type %s but %s is expected; %s, so write reshard(%s, %s) to move the data", where,
               TS(&t), TS(annot), asserts, src, TS(annot));
    if (!c->manual)
      diag_fix_wrap(e, "reshard(", arena_printf(", %s)", TS(annot)), arena_printf("reshard the value to %s", TS(annot)));
  }
  mismatch.at = e;
  mismatch.count = diag_error_count();
  return ty_error();
}
