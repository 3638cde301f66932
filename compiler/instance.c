/* instance.c: instantiation of generic functions (language.md §9.3), the one
 * place every stage relies on for them.
 *
 * A call of `fn f<P>(...)` binds each type parameter to the type of the
 * first argument in a position of that parameter (a parameter written
 * exactly `P`), states included; every other argument in such a position
 * must have that same type ([E_ARG] at the call, naming both). The
 * function is then instantiated: its syntax tree is copied, the copy's type
 * parameters are bound in a scope of SYM_TYPE symbols, and the copy is
 * type-checked once per distinct binding, like any function, with every
 * error it reports followed by the note `in f<P = T> called from
 * FILE:LINE:COL`. The instance is appended to the program's functions, so
 * lowering, autodiff, partitioning and emission see an ordinary function
 * (named f_1, f_2, ... in the IR and the C, and f, or f<T = S> where f has
 * several instances, in what users read: ir_func_label); the generic
 * function itself is never lowered.
 *
 * A call from a manual body (§9.7) instantiates its callee, generic or not,
 * in the per-device view of the body's manual axes: the parameters take
 * the arguments' device-local types (their varying, unreduced and reduced
 * states on the manual axes), the body is typed by the manual rules, each
 * result keeps the manual states of the value returned, and the callee's
 * own types may not mention a manual axis (its global meaning would need a
 * collective over it). Errors of such an instance are reported at the
 * call, naming the callee's line. Lowering lowers these calls in place.
 *
 * Invariants: one instance per (function, binding); an instance is
 * registered before its body is checked, so a recursive call finds it (and
 * check_recursion reports the cycle); instantiation nests at most
 * MAX_INST_DEPTH deep (a function that calls itself with ever larger types
 * would not end), with an error at the call that goes past.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define MAX_INST_DEPTH 500

typedef struct {
  FuncDecl *g;
  Type *targs;
  AxisSet manual;      /* a per-device instance (§9.7): its manual axes */
  Type *argtypes;      /* ... and its arguments' device-local types */
  int nargs;
  FuncDecl *inst;
  uint64_t hash;       /* of g and targs: the key of `by_targs` */
} Instance;

static Vec instances;   /* Instance * */

/* A view of a generic function with its fn and axis parameters bound
 * (tc_bind_meta). */
typedef struct {
  FuncDecl *g, *view;
  Vec bound;   /* Symbol *: one per fn/axis parameter, in order */
} MetaView;

static Vec views;   /* MetaView * */
static int depth;

/* The generic instances by (g, targs): open addressing on Instance.hash,
 * each slot an index into instances + 1, so that finding a call's instance
 * costs one probe, not a pass over every instance. */
static int *by_targs;
static int by_cap, by_len;

/* Names taken by functions (their C names), and the next number to try for
 * each generic function's instances: naming an instance costs O(1), where
 * trying g_1, g_2, ... against every function was quadratic per instance. */
static StrMap taken;
static int ntaken;              /* functions of `named_prog` in `taken` */
static const Program *named_prog;
static PtrMap next_number;      /* generic FuncDecl -> the next n of g_n to try */

void tc_instances_reset(void) {
  free(instances.data);
  instances = (Vec){0};
  for (int i = 0; i < views.len; i++)
    free(((MetaView *)views.data[i])->bound.data);
  free(views.data);
  views = (Vec){0};
  depth = 0;
  free(by_targs);
  by_targs = NULL;
  by_cap = by_len = 0;
  strmap_free(&taken);
  taken = (StrMap){0};
  ntaken = 0;
  named_prog = NULL;
  ptrmap_free(&next_number);
  next_number = (PtrMap){0};
}

/* ---- copies of the syntax tree --------------------------------------------------- */

static Block *clone_block(const Block *b);

/* A copy of e as the parser made it: no types, symbols or facts. */
static Expr *clone_expr(const Expr *e) {
  if (!e)
    return NULL;
  Expr *n = arena_alloc(sizeof *n);
  *n = *e;
  n->ty = NULL;
  n->sym = NULL;
  n->bi = NULL;
  n->grad = 0;
  n->fn = NULL;
  n->tc = NULL;
  n->leaves = (Vec){0};
  n->pretyped = false;
  n->lhs = clone_expr(e->lhs);
  n->rhs = clone_expr(e->rhs);
  n->callee = clone_expr(e->callee);
  n->args = (Vec){0};
  for (int i = 0; i < e->args.len; i++)
    vec_push(&n->args, clone_expr(e->args.data[i]));
  return n;
}

static Stmt *clone_stmt(const Stmt *s) {
  Stmt *n = arena_alloc(sizeof *n);
  *n = *s;
  n->expr = clone_expr(s->expr);
  n->hi = clone_expr(s->hi);
  n->body = s->body ? clone_block(s->body) : NULL;
  n->els = s->els ? clone_block(s->els) : NULL;
  n->names = (Vec){0};
  for (int i = 0; i < s->names.len; i++)
    vec_push(&n->names, s->names.data[i]);
  n->path = (Vec){0};
  for (int i = 0; i < s->path.len; i++)
    vec_push(&n->path, s->path.data[i]);
  n->sym = NULL;
  n->syms = (Vec){0};
  return n;
}

static Block *clone_block(const Block *b) {
  Block *n = arena_alloc(sizeof *n);
  n->pos = b->pos;
  for (int i = 0; i < b->stmts.len; i++)
    vec_push(&n->stmts, clone_stmt(b->stmts.data[i]));
  return n;
}

/* The declaration as written (types are TypeExprs, shared: resolving one
 * does not change it), with a fresh body and no checked state. */
static FuncDecl *clone_func(const FuncDecl *g) {
  FuncDecl *f = arena_alloc(sizeof *f);
  f->name = g->name;
  f->pos = g->pos;
  f->manual = g->manual;
  memcpy(f->manual_axes, g->manual_axes, sizeof g->manual_axes);
  f->nmanual = g->nmanual;
  f->manual_pos = g->manual_pos;
  for (int i = 0; i < g->params.len; i++) {
    const Param *p = g->params.data[i];
    vec_push(&f->params, parse_param(p->name, p->type));
  }
  f->results = g->results;
  f->nresults = g->nresults;
  f->result_tuple = g->result_tuple;
  f->body = clone_block(g->body);
  f->tparams = g->tparams;
  return f;
}

/* ---- the declaration ------------------------------------------------------------- */

static int tparam_index(const FuncDecl *g, Token name) {
  for (int k = 0; k < g->ntparams; k++)
    if (g->tparams[k].len == name.len && !memcmp(g->tparams[k].start, name.start, (size_t)name.len))
      return k;
  return -1;
}

/* The type parameter a parameter's type is (written exactly `P`), or -1. */
static int param_tparam(const FuncDecl *g, const TypeExpr *te) {
  if (!te->named || te->rank || te->nannots)
    return -1;
  return tparam_index(g, te->name);
}

/* Whether type te mentions type parameter k at all (used wrongly or not:
 * a misuse is the error to report then). */
static bool mentions(const FuncDecl *g, const TypeExpr *te, int k) {
  if (te->named && tparam_index(g, te->name) == k)
    return true;
  for (int d = 0; d < te->rank; d++)
    if (tparam_index(g, te->dims[d].size) == k)
      return true;
  return false;
}

/* A type parameter written inside another type (f32[P], P[4]). */
static bool misused_tparam(TcCtx *c, const FuncDecl *g, const TypeExpr *te) {
  for (int d = 0; d < te->rank; d++)
    if (tparam_index(g, te->dims[d].size) >= 0) {
      diag_error(te->dims[d].size.pos, "E_SPEC", "type parameter %.*s stands for a whole type; it cannot be a dim "
                 "inside another type (use size(x, k) for a size from an argument's type)",
                 te->dims[d].size.len, te->dims[d].size.start);
      return true;
    }
  if (te->named && te->rank && tparam_index(g, te->name) >= 0) {
    diag_error(te->pos, "E_SPEC", "type parameter %.*s stands for a whole type; it cannot be stacked (%.*s[...])",
               te->name.len, te->name.start, te->name.len, te->name.start);
    return true;
  }
  return false;
}

bool tc_check_generic(TcCtx *c, FuncDecl *g) {
  bool ok = true;
  if (g->manual) {
    diag_error(g->pos, "E_ARG", "a manual function cannot be generic: its signature states the in/out specs; "
               "call a generic function from its body instead");
    ok = false;
  }
  for (int k = 0; k < g->ntparams; k++) {
    bool dup = false;
    for (int j = 0; j < k && !dup; j++)
      dup = tok_eq(g->tparams[j], tok_str(g->tparams[k]));
    if (dup) {
      diag_error(g->tparams[k].pos, "E_NAME", "type parameter %.*s is declared twice", g->tparams[k].len,
                 g->tparams[k].start);
      ok = false;
      continue;
    }
    bool used = false;
    for (int i = 0; i < g->params.len; i++)
      used |= mentions(g, ((Param *)g->params.data[i])->type, k);
    if (!used) {
      diag_error(g->tparams[k].pos, "E_ARG", "type parameter %.*s is the type of no parameter, so a call cannot "
                 "bind it; write a parameter `x: %.*s`", g->tparams[k].len, g->tparams[k].start,
                 g->tparams[k].len, g->tparams[k].start);
      ok = false;
    }
  }
  for (int i = 0; i < g->params.len; i++)
    ok &= !misused_tparam(c, g, ((Param *)g->params.data[i])->type);
  for (int i = 0; i < g->nresults; i++)
    ok &= !misused_tparam(c, g, g->results[i]);
  return ok;
}

/* ---- instances -------------------------------------------------------------------- */

static const char *binding_text(TcCtx *c, const FuncDecl *g, const Type *targs) {
  Str s = {0};
  str_printf(&s, "%.*s<", g->name.len, g->name.start);
  for (int k = 0; k < g->ntparams; k++)
    str_printf(&s, "%s%.*s = %s", k ? ", " : "", g->tparams[k].len, g->tparams[k].start, TS(&targs[k]));
  for (int i = 0; g->mscope && i < g->mscope->syms.len; i++) {   /* stage = block, ax = pipe */
    const Symbol *m = g->mscope->syms.data[i];
    str_printf(&s, ", %s = %s", m->name, m->kind == SYM_FUNC ? tok_str(m->fn->name) : c->mesh->names[m->axis]);
  }
  str_putc(&s, '>');
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* A name for the instance in the IR and the C, unlike any function's. */
static const char *instance_name(const Program *p, const FuncDecl *g) {
  if (named_prog != p) {
    strmap_free(&taken);
    taken = (StrMap){0};
    ntaken = 0;
    named_prog = p;
  }
  for (; ntaken < p->funcs.len; ntaken++) {   /* the functions added since the last call */
    const FuncDecl *f = p->funcs.data[ntaken];
    strmap_put(&taken, f->cname ? f->cname : tok_str(f->name), (void *)1);
  }
  int n = ptrmap_get(&next_number, g);
  for (n = n < 1 ? 1 : n;; n++) {
    const char *name = arena_printf("%.*s_%d", g->name.len, g->name.start, n);
    if (!strmap_get(&taken, name)) {
      ptrmap_put(&next_number, g, n + 1);
      return name;
    }
  }
}

/* A hash of t consistent with ty_equal (equal types hash alike). */
static uint64_t type_hash(const Type *t) {
  uint64_t h = (uint64_t)t->kind * 0x9E3779B97F4A7C15ull;
  if (t->kind == TY_TUPLE) {
    for (int i = 0; i < t->nelems; i++)
      h = (h ^ type_hash(&t->elems[i])) * 0x100000001B3ull;
    return h;
  }
  if (t->kind != TY_ARRAY && t->kind != TY_STRUCT)
    return h;
  h = (h ^ (t->kind == TY_STRUCT ? (uint64_t)(uintptr_t)t->sdef : (uint64_t)t->dtype)) * 0x100000001B3ull;
  h = (h ^ (uint64_t)t->rank) * 0x100000001B3ull;
  for (int d = 0; d < t->rank && d < MAX_RANK; d++)
    h = (h ^ (uint64_t)t->shape[d]) * 0x100000001B3ull;
  if (t->kind == TY_ARRAY)
    h = (h ^ ((uint64_t)t->U | (uint64_t)t->R << 16 | (uint64_t)t->V << 32)) * 0x100000001B3ull;
  return h;
}

static uint64_t instance_hash(const FuncDecl *g, const Type *targs) {
  uint64_t h = (uint64_t)(uintptr_t)g * 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < g->ntparams; k++)
    h = (h ^ type_hash(&targs[k])) * 0x100000001B3ull;
  return h ^ (h >> 29);
}

/* The instance of g for targs made before, or NULL. */
static Instance *find_instance(const FuncDecl *g, const Type *targs, uint64_t h) {
  for (size_t i = by_cap ? h & (size_t)(by_cap - 1) : 0; by_cap && by_targs[i]; i = (i + 1) & (size_t)(by_cap - 1)) {
    Instance *in = instances.data[by_targs[i] - 1];
    bool same = in->hash == h && in->g == g;
    for (int k = 0; same && k < g->ntparams; k++)
      same = ty_equal(&in->targs[k], &targs[k]);
    if (same)
      return in;
  }
  return NULL;
}

/* Adds instances' last entry to by_targs. */
static void index_instance(void) {
  if (2 * (by_len + 1) > by_cap) {
    int cap = by_cap ? 2 * by_cap : 64;
    int *t = mem_calloc((size_t)cap, sizeof *t);
    for (int i = 0; i < by_cap; i++)
      if (by_targs[i]) {
        size_t j = ((Instance *)instances.data[by_targs[i] - 1])->hash & (size_t)(cap - 1);
        while (t[j])
          j = (j + 1) & (size_t)(cap - 1);
        t[j] = by_targs[i];
      }
    free(by_targs);
    by_targs = t;
    by_cap = cap;
  }
  size_t j = ((Instance *)instances.data[instances.len - 1])->hash & (size_t)(by_cap - 1);
  while (by_targs[j])
    j = (j + 1) & (size_t)(by_cap - 1);
  by_targs[j] = instances.len;
  by_len++;
}

/* A copy of g's declaration for the type arguments targs (one per type
 * parameter, bound in its own scope), added to the program's functions. */
static FuncDecl *new_instance(TcCtx *c, FuncDecl *g, Type *targs) {
  FuncDecl *f = clone_func(g);
  f->generic = g->mscope ? g->generic : g;   /* a view's instance: the declaration's (tc_bind_meta) */
  f->targs = targs;
  f->cname = instance_name(c->prog, g);
  f->binding = g->ntparams ? binding_text(c, g, targs) : NULL;
  Scope *sc = arena_alloc(sizeof *sc);
  for (int i = 0; g->mscope && i < g->mscope->syms.len; i++)   /* the view's fn and axis parameters */
    vec_push(&sc->syms, g->mscope->syms.data[i]);
  for (int k = 0; k < g->ntparams; k++) {
    Symbol *s = arena_alloc(sizeof *s);
    s->kind = SYM_TYPE;
    s->name = tok_str(g->tparams[k]);
    s->pos = g->tparams[k].pos;
    s->type = targs[k];
    vec_push(&sc->syms, s);
  }
  f->tscope = sc;
  vec_push(&c->prog->funcs, f);
  return f;
}

/* A checking context of an instance's own, on the caller's program and mesh. */
static TcCtx instance_ctx(const TcCtx *c) {
  TcCtx ic;
  memset(&ic, 0, sizeof ic);
  ic.prog = c->prog;
  ic.mesh = c->mesh;
  return ic;
}

static FuncDecl *instantiate(TcCtx *c, FuncDecl *g, Type *targs, Pos site) {
  uint64_t h = instance_hash(g, targs);
  Instance *old = find_instance(g, targs, h);
  if (old)
    return old->inst;
  if (depth >= MAX_INST_DEPTH) {
    diag_error(site, "E_NAME", "generic functions instantiate each other more than %d deep here (a function "
               "that calls itself, with ever new types?); %s", MAX_INST_DEPTH, binding_text(c, g, targs));
    return NULL;
  }
  FuncDecl *f = new_instance(c, g, targs);
  Instance *in = arena_alloc(sizeof *in);
  in->g = g;
  in->targs = targs;
  in->inst = f;
  in->hash = h;
  vec_push(&instances, in);
  index_instance();
  /* Checked now, in a context of its own: the caller's is in the middle of
   * its body. */
  TcCtx ic = instance_ctx(c);
  depth++;
  diag_push_note(site, arena_printf("in %s called from %s:%d:%d", binding_text(c, g, targs),
                                    site.file ? site.file->name : "?", site.line, site.col));
  f->ok = tc_up.check_signature(&ic, f);
  f->checked = true;
  tc_up.check_body(&ic, f);
  diag_pop_note();
  depth--;
  return f;
}

/* Binds g's type parameters from the arguments (each typed here, once, and
 * marked pretyped for the arguments' check); NULL after reporting. */
static Type *bind_tparams(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int nargs) {
  const char *fname = tok_str(g->name);
  Type *targs = arena_alloc(sizeof(Type) * (size_t)(g->ntparams + 1));
  int *by = arena_alloc(sizeof(int) * (size_t)(g->ntparams + 1));
  for (int k = 0; k < g->ntparams; k++)
    by[k] = -1;
  bool ok = true;
  for (int i = 0; i < nargs; i++) {
    Param *p = g->params.data[i];
    int k = param_tparam(g, p->type);
    if (k < 0)
      continue;
    Type t = tc_up.expr(c, args[i]);
    args[i]->pretyped = true;   /* the arguments' check types it again: once */
    if (t.kind == TY_ERROR) {
      ok = false;
      continue;
    }
    if (t.kind != TY_ARRAY && t.kind != TY_STRUCT && t.kind != TY_STRING) {
      tc_up.want_array(c, args[i], &t, arena_printf("argument '%.*s' of %s", p->name.len, p->name.start, fname));
      ok = false;
      continue;
    }
    t.weak = false;
    if (by[k] < 0) {
      targs[k] = t;
      by[k] = i;
      continue;
    }
    if (!ty_equal(&t, &targs[k])) {
      Param *first = g->params.data[by[k]];
      diag_error(args[i]->pos, "E_ARG", "%s: argument '%.*s' has type %s, but %.*s is bound to %s by argument "
                 "'%.*s'; every argument in a position of %.*s must have that type",
                 fname, p->name.len, p->name.start, TS(&t), g->tparams[k].len, g->tparams[k].start,
                 TS(&targs[k]), first->name.len, first->name.start, g->tparams[k].len, g->tparams[k].start);
      ok = false;
    }
  }
  return ok ? targs : NULL;
}

static bool right_count(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int nargs) {
  if (nargs == g->params.len)
    return true;
  diag_error(call->pos, "E_ARG", "%.*s takes %d argument%s but %d %s given", g->name.len, g->name.start,
             g->params.len, g->params.len == 1 ? "" : "s", nargs, nargs == 1 ? "was" : "were");
  for (int i = 0; i < nargs; i++)
    tc_up.expr(c, args[i]);
  return false;
}

FuncDecl *tc_instantiate_call(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int nargs) {
  if (!right_count(c, call, g, args, nargs))
    return NULL;
  Type *targs = bind_tparams(c, call, g, args, nargs);
  if (!targs || !g->ok)
    return NULL;
  return instantiate(c, g, targs, call->pos);
}

/* ---- fn and axis parameters (language.md 10.4) ------------------------------------------ */

/* A generic function's parameter `f: fn` or `ax: axis` is bound at each
 * call to a function or a mesh axis the argument names. The call then
 * calls a *view* of the function: a declaration of the same body whose
 * parameters are the others, with those bound in its mscope (one view per
 * function and binding, so its instances are distinct from another
 * binding's); every instance of the view sees them in its tscope, so the
 * body's `f(x)`, `grad(f, ...)`, `remat(f)` and `ppermute(x, ax, ...)` name
 * them as a function's or an axis's own name would. Nothing after the
 * typechecker sees a function or an axis as a value. */
int tc_meta_params(const FuncDecl *f) {
  int n = 0;
  for (int i = 0; i < f->params.len; i++)
    n += ((Param *)f->params.data[i])->type->meta != 0;
  return n;
}

/* The symbol the argument a names for parameter p ('f' or 'a'), or NULL
 * after reporting. */
static Symbol *meta_arg(TcCtx *c, const FuncDecl *g, const Param *p, Expr *a) {
  bool fn = p->type->meta == 'f';
  Symbol *s = a->kind == EX_NAME ? tc_up.lookup(c, a->str) : NULL;
  if (s && s->kind == (fn ? SYM_FUNC : SYM_AXIS)) {
    Symbol *m = arena_alloc(sizeof *m);
    *m = *s;
    m->name = tok_str(p->name);
    m->pos = p->name.pos;
    return m;
  }
  const char *what = !s ? (a->kind == EX_NAME ? arena_printf("'%s', which is not defined", a->str) : "an expression")
                     : arena_printf("'%s', %s", a->str, s->kind == SYM_FUNC ? "a function" : s->kind == SYM_AXIS
                                                 ? "a mesh axis" : s->kind == SYM_STRUCT ? "a struct" : "a value");
  diag_error(a->pos, "E_ARG", "%.*s: parameter '%.*s' is `%.*s: %s`, bound at the call to the %s the argument "
             "names, but the argument is %s; pass %s", g->name.len, g->name.start, p->name.len, p->name.start,
             p->name.len, p->name.start, fn ? "fn" : "axis", fn ? "function" : "mesh axis", what,
             fn ? "a function's name (a generic one too)" : arena_printf("an axis of the mesh (%s)",
             c->mesh->naxes ? c->mesh->names[0] : "none"));
  return NULL;
}

static bool same_binding(const Vec *a, const Vec *b) {
  for (int i = 0; i < a->len; i++) {
    const Symbol *x = a->data[i], *y = b->data[i];
    if (x->kind != y->kind || (x->kind == SYM_FUNC ? x->fn != y->fn : x->axis != y->axis))
      return false;
  }
  return true;
}

static FuncDecl *new_view(FuncDecl *g, const Vec *bound) {
  FuncDecl *v = arena_alloc(sizeof *v);
  *v = *g;
  v->params = (Vec){0};
  for (int i = 0; i < g->params.len; i++)
    if (!((Param *)g->params.data[i])->type->meta)
      vec_push(&v->params, g->params.data[i]);
  v->generic = g;   /* what the language server and the display names see */
  v->mscope = arena_alloc(sizeof *v->mscope);
  for (int i = 0; i < bound->len; i++)
    vec_push(&v->mscope->syms, bound->data[i]);
  v->bindings = (Vec){0};
  v->callees = (Vec){0};
  return v;
}

FuncDecl *tc_bind_meta(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int *nargs, Vec *argv) {
  if (!right_count(c, call, g, args, *nargs))
    return NULL;
  Vec bound = {0};
  bool ok = true;
  int n = 0;
  for (int i = 0; i < *nargs; i++) {
    const Param *p = g->params.data[i];
    if (!p->type->meta) {
      args[n++] = args[i];
      continue;
    }
    Symbol *m = meta_arg(c, g, p, args[i]);
    ok &= m != NULL;
    vec_push(&bound, m);
  }
  if (!ok) {
    free(bound.data);
    return NULL;
  }
  *nargs = n;
  argv->len = 0;   /* the call passes the others (no keyword arguments: tc_call_user) */
  for (int i = 0; i < n; i++)
    vec_push(argv, args[i]);
  for (int i = 0; i < views.len; i++) {
    MetaView *mv = views.data[i];
    if (mv->g == g && same_binding(&mv->bound, &bound)) {
      free(bound.data);
      return mv->view;
    }
  }
  MetaView *mv = arena_alloc(sizeof *mv);
  mv->g = g;
  mv->bound = bound;
  mv->view = new_view(g, &bound);
  vec_push(&views, mv);
  return mv->view;
}

/* ---- calls from manual bodies (§9.7) ---------------------------------------------- */

bool tc_equal_but_manual(const Type *a, const Type *b, AxisSet M) {
  if (a->kind == TY_STRUCT || b->kind == TY_STRUCT) {
    if (a->kind != b->kind || a->sdef != b->sdef || a->nelems != b->nelems || a->rank != b->rank)
      return false;
    for (int k = 0; k < a->nelems; k++)
      if (!tc_equal_but_manual(&a->elems[k], &b->elems[k], M))
        return false;
    return true;
  }
  Type x = *a, y = *b;
  x.weak = y.weak = false;
  x.V &= ~M, y.V &= ~M;
  x.U &= ~M, y.U &= ~M;
  x.R &= ~M, y.R &= ~M;
  return ty_equal(&x, &y);
}

/* t with the manual states (V, and U and R on M) of the argument's type. */
static Type with_states(const Type *t, const Type *arg, AxisSet M) {
  if (t->kind == TY_STRUCT) {
    Type r = *t;
    r.elems = arena_alloc(sizeof(Type) * (size_t)(t->nelems + 1));
    for (int k = 0; k < t->nelems; k++)
      r.elems[k] = arg->kind == TY_STRUCT && arg->nelems == t->nelems ? with_states(&t->elems[k], &arg->elems[k], M)
                                                                      : t->elems[k];
    return r;
  }
  Type r = *t;
  if (arg->kind != TY_ARRAY)
    return r;
  r.V = arg->V & M;
  r.U = (r.U & ~M) | (arg->U & M);
  r.R = (r.R & ~M) | (arg->R & M);
  return r;
}

/* A manual axis in a callee's own (global) type: its meaning would need a
 * collective over an axis the caller is in the per-device view of. */
static AxisSet manual_axes_in(const Type *t, AxisSet M) {
  if (t->kind == TY_STRUCT) {
    AxisSet a = 0;
    for (int k = 0; k < t->nelems; k++)
      a |= manual_axes_in(&t->elems[k], M);
    return a;
  }
  return t->kind == TY_ARRAY ? (ty_dim_axes(t) | t->U | t->R | t->V) & M : 0;
}

static FuncDecl *find_manual(FuncDecl *f, AxisSet M, const Type *argtypes, int nargs) {
  for (int i = 0; i < instances.len; i++) {
    Instance *in = instances.data[i];
    bool same = in->g == f && in->manual == M && in->nargs == nargs;
    for (int k = 0; same && k < nargs; k++)
      same = ty_equal(&in->argtypes[k], &argtypes[k]);
    if (same)
      return in->inst;
  }
  return NULL;
}

FuncDecl *tc_instantiate_manual(TcCtx *c, Expr *call, FuncDecl *f, Expr **args, int nargs) {
  const char *fname = tok_str(f->name);
  if (f->manual) {
    diag_error(call->pos, "E_MANUAL", "%s is a manual function; a manual body calls global-view functions (typed "
               "with its device-local values) but not another manual function: call %s from the global view",
               fname, fname);
    return NULL;
  }
  if (!right_count(c, call, f, args, nargs))
    return NULL;
  Type *targs = f->ntparams ? bind_tparams(c, call, f, args, nargs) : NULL;
  if (f->ntparams && !targs)
    return NULL;
  Type *argtypes = arena_alloc(sizeof(Type) * (size_t)(nargs + 1));
  bool ok = true;
  for (int i = 0; i < nargs; i++) {
    argtypes[i] = args[i]->pretyped ? *args[i]->ty : tc_up.expr(c, args[i]);
    args[i]->pretyped = true;
    argtypes[i].weak = false;
    ok &= argtypes[i].kind != TY_ERROR;
  }
  if (!ok || !f->ok)
    return NULL;
  AxisSet M = c->manual;
  FuncDecl *inst = find_manual(f, M, argtypes, nargs);
  if (inst && !inst->ok)
    diag_error(call->pos, inst->fail_code ? inst->fail_code : "E_ARG", "in %s (called from a manual body): it does "
               "not type-check with these arguments (reported above)", fname);
  if (inst)
    return inst->ok ? inst : NULL;
  if (depth >= MAX_INST_DEPTH) {
    diag_error(call->pos, "E_NAME", "functions called from manual bodies instantiate each other more than %d deep "
               "here", MAX_INST_DEPTH);
    return NULL;
  }
  inst = new_instance(c, f, targs);
  inst->view_manual = M;
  inst->manual_set = M;
  Instance *rec = arena_alloc(sizeof *rec);
  rec->g = f;
  rec->manual = M;
  rec->argtypes = argtypes;
  rec->nargs = nargs;
  rec->inst = inst;
  vec_push(&instances, rec);
  TcCtx ic = instance_ctx(c);
  depth++;
  bool mine = diag_push_redirect(call->pos, arena_printf("in %s (called from this manual body)", fname));
  inst->ok = tc_up.check_signature(&ic, inst);
  /* The parameters: the arguments' device-local types; a type of the
   * callee's own may not mention a manual axis. */
  for (int i = 0; inst->ok && i < nargs; i++) {
    Param *p = inst->params.data[i];
    Type *pt = &inst->param_types[i];
    AxisSet bad = manual_axes_in(pt, M);
    if (bad && !(f->ntparams && param_tparam(f, p->type) >= 0)) {
      diag_error(p->type->pos, "E_MANUAL", "parameter '%.*s' is %s, which names the manual axis %s: a function "
                 "called from a manual body sees each device's block, so its global meaning would need a "
                 "collective over %s; declare the parameter with the device-local type (the dims unsharded over "
                 "%s) or call it from the global view",
                 p->name.len, p->name.start, TS(pt), ty_axes_str(c->mesh, bad), ty_axes_str(c->mesh, bad),
                 ty_axes_str(c->mesh, bad));
      inst->ok = false;
      break;
    }
    *pt = with_states(pt, &argtypes[i], M);
    inst->local_param_types[i] = *pt;
  }
  for (int i = 0; inst->ok && i < inst->nresults; i++)
    if (manual_axes_in(&inst->result_types[i], M) && !(f->ntparams && param_tparam(f, f->results[i]) >= 0)) {
      diag_error(f->results[i]->pos, "E_MANUAL", "the result type %s names the manual axis %s: a function called "
                 "from a manual body returns each device's block; declare the device-local type",
                 TS(&inst->result_types[i]), ty_axes_str(c->mesh, manual_axes_in(&inst->result_types[i], M)));
      inst->ok = false;
    }
  inst->checked = true;
  if (inst->ok) {
    int errs = diag_error_count();
    tc_up.check_body(&ic, inst);
    inst->ok = diag_error_count() == errs;
  }
  if (mine)
    diag_pop_redirect();
  depth--;
  if (!inst->ok)
    inst->fail_code = diag_last_code();
  return inst->ok ? inst : NULL;
}
