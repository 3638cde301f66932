/* tc_manual.c: manual functions: the boundary between the global and the
 * per-device view (typing-rules 2.1, 2.4), and the collectives and casts of
 * the table in 2.3, with divergence checking ([E_DIVERGE]).
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
#include "shdc.h"

#define TS(t) ty_str(c->mesh, (t))

/* ---- the boundary -------------------------------------------------------------- */

Type tc_manual_local(TcCtx *c, const Type *g, AxisSet manual, Pos pos, const char *what, bool *ok) {
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
    diag_error(pos, "E_OUTSPEC",
               "the result %s is varying over %s, but the result type %s does not shard any dim over %s, which "
               "promises the value is the same on every device along %s; reduce it with psum(x, %s), gather it "
               "with all_gather(x, %s, dim=k, to=invariant), or shard a dim of the result type over %s",
               TS(v), ax, TS(declared), ax, ax, arg, arg, ax);
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
    if (it->kind == EX_NAME)
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
  case EX_AS: text_of(s, e->lhs); str_printf(s, " as ..."); return;
  case EX_TYPE: str_printf(s, "TYPE"); return;
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
  if (c->manual != (1u << c->mesh->naxes) - 1)
    c->prog->diverge_in_partial_manual = true;
}

/* Collectives need every device to take part: none may sit under control
 * flow whose condition differs between devices. */
static bool check_diverge(TcCtx *c, Expr *e) {
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
  for (int i = 0; i < c->diverge.len; i++) {
    const Diverge *d = c->diverge.data[i];
    AxisSet missing = d->cond->ty->V & ~sym->type.V;
    if (!missing || !declared_in(d->outer, sym))
      continue;
    const char *ax = ty_axes_str(c->mesh, missing);
    diag_error(assign->pos, "E_CARRY",
               "var '%s' (%s) is assigned under %s, so afterwards it may differ across devices along %s; declare it "
               "varying over %s, e.g. var %s = pcast(..., %s, to=varying)",
               sym->name, TS(&sym->type), diverge_reason(c, d), ax, ax, sym->name, ty_axes_arg(c->mesh, missing));
    diag_note(sym->pos, "'%s' is declared here", sym->name);
    return false;
  }
  return true;
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

static Type check_reduce_collective(TcCtx *c, Expr *e, TcInfo *info, Type x, AxisSet a) {
  AxisState st;
  if (!same_state(c, e, &x, a, &st))
    return ty_error();
  int code = e->builtin;
  const char *name = e->callee->str;
  info->redop = code == BI_PMAX ? RED_MAX : code == BI_PMIN ? RED_MIN : RED_SUM;
  info->scale_by_count = code == BI_PMEAN;
  info->count = (double)axes_size(c, info->axes, info->naxes);
  /* As JAX: psum and pmean count bools as i32, and pmean divides an
   * integer sum into f32. info->dtype is the dtype the reduction runs in. */
  info->dtype = x.dtype == DT_BOOL && code != BI_PMAX && code != BI_PMIN ? DT_I32 : x.dtype;
  Type out = x;
  out.dtype = code == BI_PMEAN && !ty_is_float(x.dtype) ? DT_F32 : info->dtype;
  switch (st) {
  case ST_V:
    out.V &= ~a;
    return out;
  case ST_I:
    /* Every device holds the same value: the sum is x * |a|, max is x. */
    info->psum_invariant = (int)info->count;
    return out;
  case ST_U:
    if (code != BI_PSUM && code != BI_PMEAN) {
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
               code == BI_PSUM || code == BI_PMEAN
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
  out.shape[info->dim] *= axes_size(c, info->axes, info->naxes);
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
  out.shape[info->dim2] *= g;
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

Type tc_collective(TcCtx *c, Expr *e) {
  TcInfo *info = e->tc;
  int code = e->builtin;
  const char *name = e->callee->str;
  if (!c->manual) {
    diag_error(e->pos, "E_MANUAL",
               "%s is only available inside a manual function body; in the global view, reshard and reductions "
               "insert the collectives the types call for",
               name);
    return ty_error();
  }
  const char *kwn[2] = {0, 0};
  int nkw = 0;
  switch (code) {
  case BI_ALL_GATHER: kwn[0] = "dim"; kwn[1] = "to"; nkw = 2; break;
  case BI_PSUM_SCATTER: kwn[0] = "dim"; nkw = 1; break;
  case BI_ALL_TO_ALL: kwn[0] = "split"; kwn[1] = "concat"; nkw = 2; break;
  case BI_PPERMUTE: kwn[0] = "shift"; nkw = 1; break;
  case BI_PCAST: kwn[0] = "to"; nkw = 1; break;
  default: break;
  }
  Expr *pos[2], *kw[2];
  int n;
  bool ok = true;
  tc_split_args(e, pos, code == BI_AXIS_INDEX ? 1 : 2, &n, kw, kwn, nkw, &ok);
  if (!ok)
    return ty_error();
  if (code == BI_AXIS_INDEX) {
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
               code == BI_ALL_GATHER ? ", dim=k" : code == BI_PSUM_SCATTER ? ", dim=k"
               : code == BI_ALL_TO_ALL ? ", split=i, concat=j" : code == BI_PPERMUTE ? ", shift=s"
               : code == BI_PCAST ? ", to=varying" : "");
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
  if (code != BI_PCAST && !check_diverge(c, e))
    return ty_error();
  switch (code) {
  case BI_PSUM: case BI_PMAX: case BI_PMIN: case BI_PMEAN:
    return check_reduce_collective(c, e, info, x, a);
  case BI_ALL_GATHER:
    return check_all_gather(c, e, info, x, a, kw);
  case BI_PSUM_SCATTER:
    return check_psum_scatter(c, e, info, x, a, kw);
  case BI_ALL_TO_ALL:
    return check_all_to_all(c, e, info, x, a, kw);
  case BI_PPERMUTE: {
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
  case BI_PCAST:
    return check_pcast(c, e, info, x, a, kw);
  default:
    diag_ice("unknown builtin %d", code);
  }
}
