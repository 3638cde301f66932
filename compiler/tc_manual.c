/* tc_manual.c: manual functions: the boundary between the global and the
 * per-device view (typing-rules 2.1, 2.4), the axes arguments of the
 * collectives (whose typing, table 2.3, is in op_collective.c), and
 * divergence checking ([E_DIVERGE]).
 *
 * Inside `manual(X) fn` every manual axis of a value is varying, invariant,
 * unreduced or reduced; the explicit axes keep their global-view rules.
 * tc.c pushes a Diverge for every if/for whose condition varies; under one,
 * collectives are [E_DIVERGE] and a var from outside that is assigned must
 * be varying over the condition's axes ([E_CARRY]). The collectives the
 * global rules insert for explicit axes are checked by partition.c. Every
 * message names the types involved and the pcast, collective or type that
 * would make the program check (docs/manual.md).
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))

/* ---- the boundary -------------------------------------------------------------- */

Type tc_manual_local(TcCtx *c, const Type *g, AxisSet manual, Pos pos, const char *what, bool *ok) {
  if (g->kind == TY_STRUCT) {
    /* Leaf by leaf; the stacked dims as the leaves have them. */
    Type r = *g;
    r.elems = arena_alloc(sizeof(Type) * (size_t)(g->nelems ? g->nelems : 1));
    for (int k = 0; k < g->nelems; k++) {
      r.elems[k] = tc_manual_local(c, &g->elems[k], manual, pos, what, ok);
      if (!*ok)
        return ty_error();
    }
    for (int d = 0; d < g->rank && g->nelems; d++) {
      r.shape[d] = r.elems[0].shape[d];
      r.spec[d] = r.elems[0].spec[d];
    }
    return r;
  }
  Type l = *g;
  for (int d = 0; d < g->rank; d++) {
    DimSpec s = g->spec[d];
    int lead = 0;
    while (lead < s.n && (manual & (1u << s.axes[lead])))
      lead++;
    for (int i = lead; i < s.n; i++)
      if (manual & (1u << s.axes[i])) {
        /* a parameter's spec is the in_spec, the result's the out_spec */
        const char *code = !strcmp(what, "result") ? "E_OUTSPEC" : !strncmp(what, "parameter", 9) ? "E_INSPEC"
                                                                                                  : "E_SPEC";
        diag_error(pos, code,
                   "%s: in %s, manual axis %s follows explicit axis %s in dim %d; the manual axes of a dim must lead "
                   "its axis list, e.g. @(%s,%s)",
                   what, TS(g), c->mesh->names[s.axes[i]], c->mesh->names[s.axes[0]], d, c->mesh->names[s.axes[i]],
                   c->mesh->names[s.axes[0]]);
        *ok = false;
        return ty_error();
      }
    int64_t parts = 1;
    for (int i = 0; i < lead; i++) {
      parts *= c->mesh->sizes[s.axes[i]];
      l.V |= 1u << s.axes[i];
    }
    l.shape[d] = g->shape[d] / parts;
    DimSpec rest = {0};
    for (int i = lead; i < s.n; i++)
      rest.axes[rest.n++] = s.axes[i];
    l.spec[d] = rest;
  }
  return l;
}

void tc_manual_states_from(TcCtx *c, Type *annot, AxisSet V, AxisSet U, AxisSet R) {
  AxisSet m = c->manual;
  annot->V = V;
  annot->U = (annot->U & ~m) | (U & m);
  annot->R = (annot->R & ~m) | (R & m);
}

/* The fix for a result whose unreduced (k 'U') or reduced ('R') axes `ax`
 * differ from those of its declared local type l. */
static const char *outspec_state_fix(TcCtx *c, const Type *v, const Type *l, char k, AxisSet ax) {
  const char *a = ty_axes_arg(c->mesh, ax), *s = ty_axes_str(c->mesh, ax);
  bool sharded = (l->V & ax) != 0;
  if (k == 'U' && (v->U & ax))
    return sharded ? arena_printf("reduce-scatter it with psum_scatter(x, %s, dim=k)", a)
                   : arena_printf("reduce it with psum(x, %s), or declare the result <U:%s>", a, s);
  if (k == 'U')
    return (v->V & ax) ? arena_printf("mark the pieces as a pending sum with pcast(x, %s, to=unreduced)", a)
                       : arena_printf("the value is not a pending sum over %s: drop <U:%s> from the result type", s, s);
  if (v->R & ax)
    return arena_printf("declare the result <R:%s> (a reshard outside makes it replicated, at no cost); no cast "
                        "turns a reduced value back into an invariant one%s",
                        s, sharded ? arena_printf(", or pcast(x, %s, to=varying) for the sharded result", a) : "");
  if (v->U & ax)
    return arena_printf("reduce it with psum(x, %s), then pcast(..., %s, to=reduced)", a, a);
  return (v->V & ax) ? arena_printf("gather it with all_gather(x, %s, dim=k, to=reduced)", a)
                     : arena_printf("mark it reduced with pcast(x, %s, to=reduced)", a);
}

bool tc_check_manual_result(TcCtx *c, const Type *v, const Type *declared, Pos pos) {
  bool ok = true;
  AxisSet man = c->manual;
  Type l = tc_manual_local(c, declared, man, pos, "result", &ok);
  if (!ok)
    return false;
  if (v->dtype != l.dtype && !v->weak) {
    diag_error(pos, "E_DTYPE", "the result is %s but the declared result type is %s; convert with cast(x, %s)", TS(v),
               TS(declared), ty_dtype_name(l.dtype));
    return false;
  }
  AxisSet extra = v->V & ~l.V;
  if (extra && ((l.U | l.R) & extra) == extra) {
    const char *ax = ty_axes_str(c->mesh, extra), *arg = ty_axes_arg(c->mesh, extra);
    bool u = (l.U & extra) == extra;
    diag_error(pos, "E_OUTSPEC", "the result %s is varying over %s, but the result type %s is %s over %s; %s", TS(v),
               ax, TS(declared), u ? "unreduced" : "reduced", ax,
               u ? arena_printf("mark the pieces as a pending sum with pcast(x, %s, to=unreduced)", arg)
                 : arena_printf("gather the pieces with all_gather(x, %s, dim=k, to=reduced)", arg));
    return false;
  }
  if (extra) {
    const char *ax = ty_axes_str(c->mesh, extra), *arg = ty_axes_arg(c->mesh, extra);
    (void)arg;
    diag_error(pos, "E_OUTSPEC",
               "the result %s is varying over %s, but the result type %s does not shard any dim over %s, which "
               "promises the value is the same on every device along %s; %s; or shard a dim of the result type "
               "over %s",
               TS(v), ax, TS(declared), ax, ax, tc_combine_fix(c, diag_expr_at(pos), v, &l, extra, false), ax);
    tc_combine_fix(c, diag_expr_at(pos), v, &l, extra, true);
    return false;
  }
  AxisSet du = (v->U ^ l.U) & man, dr = (v->R ^ l.R) & man;
  if (du || dr) {
    AxisSet ax = du ? du : dr;
    char k = du ? 'U' : 'R';
    bool value_has = ((du ? v->U : v->R) & ax) != 0;
    const char *axs = ty_axes_str(c->mesh, ax);
    diag_error(pos, "E_OUTSPEC", "the result %s is %s over %s but the result type %s %s <%c:%s>; %s", TS(v),
               value_has ? (k == 'U' ? "unreduced" : "reduced") : (k == 'U' ? "not unreduced" : "not reduced"), axs,
               TS(declared), value_has ? "does not say" : "says", k, axs, outspec_state_fix(c, v, &l, k, ax));
    return false;
  }
  bool same_shape = v->rank == l.rank;
  for (int d = 0; same_shape && d < l.rank; d++)
    same_shape = v->shape[d] == l.shape[d];
  if (!same_shape) {
    diag_error(pos, "E_SHAPE", "the result %s has the wrong local shape: the result type %s needs %s on each device",
               TS(v), TS(declared), TS(&l));
    return false;
  }
  Type vv = *v, ll = l;
  vv.V = ll.V = 0;
  vv.U &= ~man, ll.U &= ~man, vv.R &= ~man, ll.R &= ~man;
  vv.weak = false;
  for (int d = 0; d < MAX_RANK; d++)
    vv.shape[d] = ll.shape[d];
  if (!ty_same_sharding(&vv, &ll)) {
    /* reshard's target in the body: the declared type itself (a dim N@i
     * over a manual axis is the local block) when the varying sets agree. */
    Type target = l;
    target.V = v->V;
    diag_error(pos, "E_OUTSPEC",
               "the result %s does not match the explicit axes of the result type %s (locally %s); a return "
               "asserts the type, so move the data inside the function: return reshard(x, %s)",
               TS(v), TS(declared), TS(&l), v->V == l.V ? TS(declared) : TS(&target));
    return false;
  }
  return true;
}

/* ---- arguments -------------------------------------------------------------------- */

bool tc_axes_arg(TcCtx *c, Expr *e, int *axes, int *naxes, bool manual_only, const char *what) {
  Expr *items[MAX_AXES + 1];
  int n = 0;
  if (e->kind == EX_TUPLE || e->kind == EX_LIST) {
    for (int i = 0; i < e->args.len && n <= MAX_AXES; i++)
      items[n++] = e->args.data[i];
  } else {
    items[n++] = e;
  }
  *naxes = 0;
  AxisSet seen = 0;
  for (int i = 0; i < n; i++) {
    Expr *it = items[i];
    int a = -1;
    Symbol *s = it->kind == EX_NAME ? tc_up.lookup(c, it->str) : NULL;
    if (s && s->kind == SYM_AXIS)   /* an axis, or a generic's `ax: axis` parameter (language.md 10.4) */
      a = s->axis;
    if (it->kind == EX_NAME && a < 0)
      for (int k = 0; k < c->mesh->naxes; k++)
        if (!strcmp(c->mesh->names[k], it->str))
          a = k;
    if (a < 0 && it->kind == EX_NAME) {
      Str names = {0};
      for (int k = 0; k < c->mesh->naxes; k++)
        str_printf(&names, "%s%s", k ? ", " : "", c->mesh->names[k]);
      diag_error(it->pos, "E_NAME", "%s: unknown mesh axis '%s'; the mesh has %s", what, it->str, str_cstr(&names));
      free(names.buf);
      return false;
    }
    if (a < 0) {
      diag_error(it->pos, "E_ARG", "%s: expected a mesh axis name or a list of them, e.g. %s or (X, Y)", what,
                 c->mesh->naxes ? c->mesh->names[0] : "X");
      return false;
    }
    if (manual_only && !(c->manual & (1u << a))) {
      diag_error(it->pos, "E_MANUAL",
                 "%s over axis %s, which is not a manual axis of this function (manual: %s); list it in manual(...) "
                 "to write its collectives, or leave it to the global rules, which communicate over an explicit axis "
                 "where the types call for it (a sum or reshard of a dim sharded over %s)",
                 what, c->mesh->names[a], c->manual ? ty_axes_str(c->mesh, c->manual) : "none", c->mesh->names[a]);
      return false;
    }
    if (seen & (1u << a)) {
      diag_error(it->pos, "E_DUP", "%s: axis %s is named twice; name each axis once", what, c->mesh->names[a]);
      return false;
    }
    seen |= 1u << a;
    axes[(*naxes)++] = a;
  }
  return true;
}

/* ---- divergence ------------------------------------------------------------------ */

static void text_of(Str *s, const Expr *e);

static void text_list(Str *s, const Vec *v) {
  for (int i = 0; i < v->len; i++) {
    if (i)
      str_printf(s, ", ");
    text_of(s, v->data[i]);
  }
}

static void text_of(Str *s, const Expr *e) {
  switch (e->kind) {
  case EX_STRING: str_printf(s, "\"%s\"", e->str); return;
  case EX_UNARY: str_printf(s, "-"); text_of(s, e->lhs); return;
  case EX_BINARY: {
    bool pl = e->lhs->kind == EX_BINARY, pr = e->rhs->kind == EX_BINARY;
    str_printf(s, "%s", pl ? "(" : "");
    text_of(s, e->lhs);
    str_printf(s, "%s %s %s", pl ? ")" : "", ast_binop_text(e->op), pr ? "(" : "");
    text_of(s, e->rhs);
    str_printf(s, "%s", pr ? ")" : "");
    return;
  }
  case EX_CALL: text_of(s, e->callee); str_putc(s, '('); text_list(s, &e->args); str_putc(s, ')'); return;
  case EX_KWARG: str_printf(s, "%s=", e->str); text_of(s, e->lhs); return;
  case EX_TUPLE: str_putc(s, '('); text_list(s, &e->args); str_putc(s, ')'); return;
  case EX_LIST: str_putc(s, '['); text_list(s, &e->args); str_putc(s, ']'); return;
  case EX_AS: str_putc(s, '('); text_of(s, e->lhs); str_printf(s, " as "); ast_type_text(s, e->type); str_putc(s, ')'); return;
  case EX_TYPE: ast_type_text(s, e->type); return;
  case EX_INDEX: text_of(s, e->lhs); str_putc(s, '['); text_list(s, &e->args); str_putc(s, ']'); return;
  case EX_FIELD: text_of(s, e->lhs); str_printf(s, ".%s", e->str); return;
  case EX_LEAF:
    text_of(s, e->lhs);
    if (e->ival >= 0 && e->lhs->ty && e->lhs->ty->kind == TY_STRUCT)
      str_printf(s, ".%s", ty_leaf_path(e->lhs->ty->sdef, e->ival));
    return;
  case EX_SLICE:
    if (e->lhs)
      text_of(s, e->lhs);
    str_putc(s, ':');
    if (e->rhs)
      text_of(s, e->rhs);
    return;
  default: str_printf(s, "%.*s", e->tok.len, e->tok.start); return;
  }
}

const char *tc_expr_text(const Expr *e) {
  Str s = {0};
  text_of(&s, e);
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* `if COND` or `for i in LO..HI`, as written. */
static const char *stmt_head(const Diverge *d) {
  Stmt *s = d->stmt;
  if (s->kind == ST_IF)
    return arena_printf("if %s", tc_expr_text(s->expr));
  return arena_printf("for %.*s in %s..%s", s->name.len, s->name.start, tc_expr_text(s->expr),
                      tc_expr_text(s->hi));
}

static const char *diverge_reason(TcCtx *c, const Diverge *d) {
  const char *what = d->stmt->kind == ST_IF ? "condition" : arena_printf("bound %s", tc_expr_text(d->cond));
  return arena_printf("`%s`, whose %s is varying over %s (%s)", stmt_head(d), what,
                      ty_axes_str(c->mesh, d->cond->ty->V), TS(d->cond->ty));
}

void tc_push_diverge(TcCtx *c, Stmt *s, Expr *cond, Scope *outer) {
  Diverge *d = arena_alloc(sizeof *d);
  d->stmt = s;
  d->cond = cond;
  d->outer = outer;
  vec_push(&c->diverge, d);
  c->prog->diverge_in_manual = true;
}

/* Collectives need every device to take part: none may sit under control
 * flow whose condition differs between devices. */
bool tc_check_diverge(TcCtx *c, Expr *e) {
  if (!c->diverge.len)
    return true;
  const Diverge *d = c->diverge.data[c->diverge.len - 1];
  const char *name = e->callee->str;
  diag_error(e->pos, "E_DIVERGE",
             "collective %s is reached under %s, so some devices would skip it while the others wait; every "
             "device must reach every collective: compute the %s from invariant values (e.g. after a psum or pmax), "
             "or move %s out of the %s",
             name, diverge_reason(c, d), d->stmt->kind == ST_IF ? "condition" : "bound", name,
             d->stmt->kind == ST_IF ? "branch" : "loop");
  diag_note(d->cond->pos, "the varying %s is here", d->stmt->kind == ST_IF ? "condition" : "bound");
  return false;
}

static bool declared_in(Scope *sc, const Symbol *sym) {
  for (; sc; sc = sc->up)
    for (int i = 0; i < sc->syms.len; i++)
      if (sc->syms.data[i] == sym)
        return true;
  return false;
}

/* A var from outside a varying branch or loop that the body assigns holds,
 * after it, a value that depends on the device: its type must be varying
 * over the condition's axes (JAX makes the outputs of a cond with a varying
 * predicate varying). */
bool tc_check_diverge_assign(TcCtx *c, Stmt *assign, Symbol *sym) {
  /* A struct var is varying over the axes all its leaves vary over
   * (language.md 10.3). */
  AxisSet have = sym->type.V;
  bool is_struct = sym->type.kind == TY_STRUCT;
  if (is_struct) {
    have = ~(AxisSet)0;
    for (int k = 0; k < sym->type.nelems; k++)
      have &= sym->type.elems[k].V;
  }
  for (int i = 0; i < c->diverge.len; i++) {
    const Diverge *d = c->diverge.data[i];
    AxisSet missing = d->cond->ty->V & ~have;
    if (!missing || !declared_in(d->outer, sym))
      continue;
    const char *ax = ty_axes_str(c->mesh, missing);
    const char *fix = arena_printf("e.g. var %s = pcast(..., %s, to=varying)", sym->name,
                                   ty_axes_arg(c->mesh, missing));
    const char *leaf = "";
    if (is_struct) {   /* name a leaf that does not vary; pcast of the struct fits if none does */
      int k = 0, some = 0;
      while (k < sym->type.nelems && !(missing & ~sym->type.elems[k].V))
        k++;
      for (int j = 0; j < sym->type.nelems; j++)
        some |= (sym->type.elems[j].V & missing) != 0;
      leaf = arena_printf(" on every leaf (%s is not)", ty_leaf_path(sym->type.sdef, k));
      if (some)
        fix = "or, as other leaves vary already (a pcast of the struct would cast them again), choose the value "
              "with where(...) outside the branch";
    }
    diag_error(assign->pos, "E_CARRY",
               "var '%s' (%s) is assigned under %s, so afterwards it may differ across devices along %s; declare it "
               "varying over %s%s, %s",
               sym->name, TS(&sym->type), diverge_reason(c, d), ax, ax, leaf, fix);
    diag_note(sym->pos, "'%s' is declared here", sym->name);
    return false;
  }
  return true;
}

/* ---- combining the devices' values (item 2 of issue 27, section 3) ------------ */

static bool shape_equal(const Type *a, const Type *b) {
  bool same = a->rank == b->rank;
  for (int d = 0; same && d < a->rank; d++)
    same = a->shape[d] == b->shape[d];
  return same;
}

static const char *plain(TcCtx *c, const Type *t) {
  Type p = ty_strip_sharding(t);
  return TS(&p);
}

const char *tc_combine_fix(TcCtx *c, const Expr *at, const Type *v, const Type *want, AxisSet ax, bool add_fix) {
  const char *arg = ty_axes_arg(c->mesh, ax);
  int64_t n = 1;
  for (int a = 0; a < c->mesh->naxes; a++)
    if (ax & (1u << a))
      n *= c->mesh->sizes[a];
  /* an all_gather whose pieces have the shape wanted: a sum was meant */
  const TcInfo *gi = at && at->kind == EX_CALL && at->bi && at->bi == op_builtin("all_gather") && at->tc
                          ? at->tc : NULL;   /* all_gather keeps its facts in a TcInfo */
  if (gi && gi->x && gi->x->ty && shape_equal(gi->x->ty, want)) {
    const char *src = diag_expr_source(gi->x);
    Pos from, to;
    const char *text = arena_printf("psum(%s, %s)", src ? src : "x", arg);
    if (add_fix && src && diag_expr_range(at->pos, &from, &to))
      diag_fix_replace(from, to, text, arena_printf("sum the pieces: %s", text));
    return arena_printf("this all_gather concatenates the devices' %s pieces into %s, not the %s the result type "
                        "needs; to add them up write %s, which keeps the shape",
                        plain(c, gi->x->ty), plain(c, v), plain(c, want), text);
  }
  int k = -1;
  for (int d = 0; k < 0 && v->rank == want->rank && d < v->rank; d++) {
    bool fits = v->shape[d] * n == want->shape[d];
    for (int e = 0; fits && e < v->rank; e++)
      fits = e == d || v->shape[e] == want->shape[e];
    if (fits)
      k = d;
  }
  bool sum = shape_equal(v, want);
  if (sum && k >= 0)   /* only where n == 1 */
    return arena_printf("reduce it with psum(x, %s)", arg);
  if (sum)
    return arena_printf("reduce it with psum(x, %s), which keeps the shape %s (all_gather would make a dim %lld "
                        "times longer)",
                        arg, plain(c, want), (long long)n);
  if (k >= 0)
    return arena_printf("gather the %s pieces with all_gather(x, %s, dim=%d, to=invariant), which makes the %s the "
                        "result type needs (psum would keep %s)",
                        plain(c, v), arg, k, plain(c, want), plain(c, v));
  return arena_printf("combine the devices' values with a collective, but note the shapes: psum(x, %s) keeps %s and "
                      "all_gather(x, %s, dim=k, to=invariant) makes dim k %lld times longer, while %s is needed",
                      arg, plain(c, v), arg, (long long)n, plain(c, want));
}
