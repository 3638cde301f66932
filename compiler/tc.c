/* tc.c: the typechecker's top level: mesh, constants, function signatures,
 * statements and scopes.
 *
 * Input: a parsed Program. Output: every Expr has a Type (Expr.ty), every
 * name a Symbol, every function its global signature and, for a manual
 * function, the local types its body sees (typing-rules 2.1). Errors are
 * reported and checking continues with an error type, so one run reports
 * many. Expressions are in tc_expr.c, builtins in the op_*.c families
 * (their arguments through tc_args.c), the manual boundary in tc_manual.c.
 */
#include "ops.h"

static Scope globals;   /* constants, functions, structs and mesh axes */
static PtrMap duplicates;   /* declarations (ConstDecl, StructDecl, FuncDecl *) of a name declared before */
static StrMap global_index;   /* their names: lookups stay O(1) in a program of many functions */

static void add_global(Symbol *s) {
  vec_push(&globals.syms, s);
  strmap_put(&global_index, s->name, s);
}

void tc_add_global(Symbol *s) { add_global(s); }
Symbol *tc_global(const char *name) { return strmap_get(&global_index, name); }

RuleCtx tc_rule(TcCtx *c, Pos pos, const char *opname) {
  RuleCtx r = {c->mesh, c->manual, pos, opname};
  return r;
}

/* ---- symbols ---------------------------------------------------------------- */

/* A scope of many names (a long function body) is looked up by hash, so
 * checking stays linear in the program. */
#define SCOPE_INDEX_FROM 16

static Symbol *find_in(Scope *s, const char *name) {
  if (s == &globals)
    return strmap_get(&global_index, name);
  if (s->index.cap)
    return strmap_get(&s->index, name);
  for (int i = s->syms.len - 1; i >= 0; i--) {
    Symbol *sym = s->syms.data[i];
    if (!strcmp(sym->name, name))
      return sym;
  }
  return NULL;
}

Symbol *tc_lookup(TcCtx *c, const char *name) {
  for (Scope *s = c->scope; s; s = s->up) {
    Symbol *sym = find_in(s, name);
    if (sym)
      return sym;
  }
  return find_in(&globals, name);
}

Symbol *tc_bind(TcCtx *c, SymKind kind, Token name, Type t) {
  Symbol *s = arena_alloc(sizeof *s);
  s->kind = kind;
  s->name = tok_str(name);
  s->pos = name.pos;
  s->type = t;
  Scope *sc = c->scope;
  vec_push(&sc->syms, s);
  if (sc->syms.len == SCOPE_INDEX_FROM)
    for (int i = 0; i < sc->syms.len; i++)
      strmap_put(&sc->index, ((Symbol *)sc->syms.data[i])->name, sc->syms.data[i]);
  else if (sc->syms.len > SCOPE_INDEX_FROM)
    strmap_put(&sc->index, s->name, s);
  if (c->fn && kind == SYM_LOCAL)
    vec_push(&c->fn->bindings, s);
  return s;
}

static void push_scope(TcCtx *c) {
  Scope *s = arena_alloc(sizeof *s);
  s->up = c->scope;
  c->scope = s;
}

static void pop_scope(TcCtx *c) { c->scope = c->scope->up; }

/* ---- names declared twice ------------------------------------------------------ */

/* Constants, structs and functions share one namespace: a name declared
 * again is an error at the later declaration (in declaration order, an
 * imported file's declarations where its import is), with a note at the
 * first, whatever the kinds (language.md §9.1, §9.6). */
static void check_duplicates(Program *p) {
  StrMap first = {0};
  for (int i = 0; i < p->items_order.len; i++) {
    Item *it = p->items_order.data[i];
    Token name = it->kind == ITEM_CONST ? ((ConstDecl *)it->decl)->name
                 : it->kind == ITEM_STRUCT ? ((StructDecl *)it->decl)->name
                 : ((FuncDecl *)it->decl)->name;
    if (it->kind == ITEM_IMPORT)
      continue;
    char *s = tok_str(name);
    Pos *prev = strmap_get(&first, s);
    if (!prev) {
      Pos *at = arena_alloc(sizeof *at);
      *at = name.pos;
      strmap_put(&first, s, at);
      continue;
    }
    diag_error(name.pos, "E_NAME", "'%s' is already defined", s);
    diag_note(*prev, "previous definition is here");
    ptrmap_put(&duplicates, it->decl, 1);
  }
  strmap_free(&first);
}

bool tc_is_duplicate(const void *decl) { return ptrmap_get(&duplicates, decl) >= 0; }

/* ---- constant expressions -------------------------------------------------- */

typedef struct {
  bool is_float;
  int64_t i;
  double f;
} ConstVal;

static bool const_overflow(Expr *e, bool report) {
  if (report)
    diag_error(e->pos, "E_CONST", "integer overflow in a constant expression: %s does not fit in 64 bits",
               tc_expr_text(e));
  return false;
}

/* Integer constants are exact 64-bit values: an operation that overflows,
 * or divides by zero, has no value and is an error where it is written. */
static bool const_binary(Expr *e, ConstVal a, ConstVal b, ConstVal *out, bool report) {
  bool fl = a.is_float || b.is_float;
  double fa = a.is_float ? a.f : (double)a.i, fb = b.is_float ? b.f : (double)b.i;
  int64_t r = 0;
  bool over = false;
  switch (e->op) {
  case BIN_ADD: over = !fl && __builtin_add_overflow(a.i, b.i, &r); fa += fb; break;
  case BIN_SUB: over = !fl && __builtin_sub_overflow(a.i, b.i, &r); fa -= fb; break;
  case BIN_MUL: over = !fl && __builtin_mul_overflow(a.i, b.i, &r); fa *= fb; break;
  case BIN_DIV:
    if (!fl && b.i == 0) {
      if (report)
        diag_error(e->pos, "E_CONST", "division by zero in a constant expression: %s", tc_expr_text(e));
      return false;
    }
    over = !fl && a.i == INT64_MIN && b.i == -1;
    r = fl || over ? 0 : a.i / b.i;
    fa /= fb;
    break;
  default:
    if (report)
      diag_error(e->pos, "E_ARG", "expected a compile-time constant (integers, consts and + - * /)");
    return false;
  }
  if (over)
    return const_overflow(e, report);
  *out = (ConstVal){fl, fl ? 0 : r, fl ? fa : (double)r};
  return true;
}

static bool const_eval(TcCtx *c, Expr *e, ConstVal *out, bool report) {
  switch (e->kind) {
  case EX_INT:
    *out = (ConstVal){false, e->ival, (double)e->ival};
    return true;
  case EX_FLOAT:
    *out = (ConstVal){true, 0, e->fval};
    return true;
  case EX_NAME: {
    Symbol *s = tc_lookup(c, e->str);
    if (s && s->kind == SYM_CONST) {
      *out = (ConstVal){s->is_float_const, s->ival, s->fval};
      return true;
    }
    if (s && s->kind == SYM_LOCAL && s->static_int) {
      *out = (ConstVal){false, s->ival, (double)s->ival};
      return true;
    }
    if (report)
      diag_error(e->pos, s ? "E_ARG" : "E_NAME", "%s '%s' is not a compile-time constant%s",
                 s ? "name" : "unknown name", e->str, s ? "; use a `const` or a literal" : "");
    return false;
  }
  case EX_CALL:   /* size(x, k), typed */
    if (e->bi && (e->bi->flags & BIF_CONST) && e->ty && e->ty->kind == TY_ARRAY) {
      *out = (ConstVal){false, e->ival, (double)e->ival};
      return true;
    }
    break;
  case EX_LEAF:   /* an operand shared by a struct operation's leaves */
    if (e->ival < 0)
      return const_eval(c, e->lhs, out, report);
    break;
  case EX_UNARY: {
    if (!const_eval(c, e->lhs, out, report))
      return false;
    if (!out->is_float && out->i == INT64_MIN)
      return const_overflow(e, report);
    out->i = -out->i;
    out->f = -out->f;
    return true;
  }
  case EX_BINARY: {
    ConstVal a, b;
    if (!const_eval(c, e->lhs, &a, report) || !const_eval(c, e->rhs, &b, report))
      return false;
    return const_binary(e, a, b, out, report);
  }
  default:
    break;
  }
  if (report)
    diag_error(e->pos, "E_ARG", "expected a compile-time constant (integers, consts and + - * /)");
  return false;
}

bool tc_const_int(TcCtx *c, Expr *e, int64_t *out) {
  ConstVal v;
  if (!const_eval(c, e, &v, true))
    return false;
  if (v.is_float) {
    diag_error(e->pos, "E_ARG", "expected an integer constant, not %g", v.f);
    return false;
  }
  *out = v.i;
  return true;
}

/* ---- types ------------------------------------------------------------------- */

static int axis_index(TcCtx *c, Token t) {
  for (int a = 0; a < c->mesh->naxes; a++)
    if (tok_eq(t, c->mesh->names[a]))
      return a;
  return -1;
}

static bool resolve_axis(TcCtx *c, Token t, int *out) {
  int a = axis_index(c, t);
  if (a < 0) {
    Str names = {0};
    for (int i = 0; i < c->mesh->naxes; i++)
      str_printf(&names, "%s%s", i ? ", " : "", c->mesh->names[i]);
    diag_error(t.pos, "E_NAME", "unknown mesh axis '%.*s'; the mesh has %s", t.len, t.start, str_cstr(&names));
    free(names.buf);
    return false;
  }
  *out = a;
  return true;
}

/* The consts a written type sizes its dims with (NULL for a number or a
 * local), for messages that say which const to raise. */
static const char *const *const_dims(TcCtx *c, const TypeExpr *te) {
  const char **names = arena_alloc(sizeof *names * MAX_RANK);
  for (int d = 0; d < te->rank && d < MAX_RANK; d++) {
    Token t = te->dims[d].size;
    if (t.kind == 0 || (t.start[0] >= '0' && t.start[0] <= '9'))
      continue;
    Symbol *s = tc_lookup(c, tok_str(t));
    names[d] = s && s->kind == SYM_CONST ? s->name : NULL;
  }
  return names;
}

static bool resolve_size(TcCtx *c, Token t, int64_t *out) {
  if (t.kind != 0 && t.start[0] >= '0' && t.start[0] <= '9') {
    *out = strtoll(t.start, NULL, 10);
  } else {
    char *name = tok_str(t);
    Symbol *s = tc_lookup(c, name);
    if (s && s->kind == SYM_TYPE) {
      diag_error(t.pos, "E_SPEC", "type parameter %s stands for a whole type; it cannot be a dim inside another "
                 "type (use size(x, k) for a size from an argument's type)", name);
      return false;
    }
    bool local = s && s->kind == SYM_LOCAL && s->static_int;   /* let T = size(x, 0) */
    if (!local && (!s || s->kind != SYM_CONST)) {
      diag_error(t.pos, "E_NAME", "%s '%s' in a type; sizes are integers, `const` names or names bound to "
                 "compile-time integers (let T = size(x, 0))", s ? "non-constant name" : "unknown name", name);
      return false;
    }
    if (s->is_float_const) {
      diag_error(t.pos, "E_SHAPE", "const '%s' is not an integer and cannot be a size", name);
      return false;
    }
    *out = s->ival;
  }
  if (*out < 1) {
    diag_error(t.pos, "E_SHAPE", "array sizes must be at least 1, not %lld", (long long)*out);
    return false;
  }
  return true;
}

/* Inside a manual body a dim written N@i over a manual axis i is this
 * device's block of it: local size N/|i|, varying over i, as a parameter of
 * that type is split at the boundary (typing-rules 2.1). So body types can
 * be written without the mesh sizes: f32[8@i,4] is f32[4,4]<V:i> at |i|=2. */
static Type body_block_type(TcCtx *c, const Type *t, Pos pos, bool *ok) {
  Type g = *t;
  g.V = 0;
  AxisSet both = t->V & ty_dim_axes(t);
  if (both) {
    diag_error(pos, "E_SPEC", "type: mesh axis %s both shards a dim and is in <V:..>; a dim written N@%s is already "
                              "varying over %s, so leave out <V:%s>",
               ty_axes_str(c->mesh, both), ty_axes_str(c->mesh, both), ty_axes_str(c->mesh, both),
               ty_axes_str(c->mesh, both));
    *ok = false;
    return ty_error();
  }
  if (!ty_check_wellformed(c->mesh, &g, pos, 0, "type")) {
    *ok = false;
    return ty_error();
  }
  g.V = t->V;
  Type l = tc_manual_local(c, &g, c->manual, pos, "type", ok);
  if (*ok)
    *ok = ty_check_wellformed(c->mesh, &l, pos, c->manual, "type");
  return *ok ? l : ty_error();
}

/* `str`: a string has no dims and no sharding (it is the same on every
 * device). */
static bool resolve_str_type(TcCtx *c, TypeExpr *te, Type *out) {
  *out = ty_error();
  if (te->ndims_written) {
    diag_error(te->pos, "E_SHAPE", "str is one string, not an array: it has no dims; write `str`");
    return false;
  }
  if (te->nannots) {
    diag_error(te->annots[0].pos, "E_SPEC",
               "a str is the same on every device: it cannot be unreduced, reduced or varying; write `str`");
    return false;
  }
  *out = ty_string();
  return true;
}

bool tc_resolve_type(TcCtx *c, TypeExpr *te, Type *out) {
  if (te->resolved) {
    *out = *te->resolved;
    return te->resolved->kind != TY_ERROR;   /* an error reported where it was resolved */
  }
  if (te->named)
    return tc_resolve_named(c, te, out);
  if (te->str)
    return resolve_str_type(c, te, out);
  int64_t shape[MAX_RANK] = {0};
  Type t = ty_array(te->dtype, te->rank, shape);
  bool ok = te->ndims_written <= MAX_RANK;
  if (!ok)
    diag_error(te->pos, "E_SPEC", "arrays have at most %d dims, this type has %d; merge dims with reshape", MAX_RANK,
               te->ndims_written);
  for (int d = 0; d < te->rank; d++) {
    DimExpr *de = &te->dims[d];
    ok &= resolve_size(c, de->size, &t.shape[d]);
    AxisSet seen = 0;
    for (int i = 0; i < de->naxes; i++) {
      int a;
      if (!resolve_axis(c, de->axes[i], &a)) {
        ok = false;
        continue;
      }
      if (seen & (1u << a)) {
        diag_error(de->axes[i].pos, "E_DUP",
                   "mesh axis %s appears twice in one dim; a mesh axis shards one dim once: write it once",
                   c->mesh->names[a]);
        ok = false;
        continue;
      }
      seen |= 1u << a;
      t.spec[d].axes[t.spec[d].n++] = (int8_t)a;
    }
  }
  AxisSet *sets[3] = {&t.U, &t.R, &t.V};
  for (int k = 0; k < te->nannots; k++) {
    AnnotExpr *an = &te->annots[k];
    AxisSet *set = sets[an->kind == 'U' ? 0 : an->kind == 'R' ? 1 : 2];
    for (int i = 0; i < an->naxes; i++) {
      int a;
      if (!resolve_axis(c, an->axes[i], &a)) {
        ok = false;
        continue;
      }
      if (*set & (1u << a)) {
        diag_error(an->axes[i].pos, "E_DUP", "mesh axis %s appears twice in <%c:..>; write it once",
                   c->mesh->names[a], an->kind);
        ok = false;
      }
      *set |= 1u << a;
    }
  }
  if (ok && (ty_dim_axes(&t) & c->manual))
    t = body_block_type(c, &t, te->pos, &ok);
  else if (ok)
    ok = ty_check_wellformed_named(c->mesh, &t, te->pos, c->manual, "", const_dims(c, te));
  *out = ok ? t : ty_error();
  return ok;
}

/* ---- mesh and constants --------------------------------------------------------- */

/* The value -D gives const `name` (the last -D of it), if any. */
static const char *define_of(const Vec *defines, const char *name) {
  const char *val = NULL;
  size_t len = strlen(name);
  for (int i = 0; defines && i < defines->len; i++) {
    const char *d = defines->data[i];
    if (!strncmp(d, name, len) && d[len] == '=')
      val = d + len + 1;
  }
  return val;
}

static bool is_int_text(const char *s) {
  char *end;
  strtoll(s, &end, 10);
  return end != s && !*end;
}

/* `const DT = f32`: a const naming a float dtype (a scalar type, as a type
 * parameter bound to it is), so `cast(x, DT)` and `zeros(DT)` follow
 * `-D DT=bf16`; language.md "Dtype consts". */
static void check_dtype_const(TcCtx *c, ConstDecl *cd, char *name, const char *def) {
  const TypeExpr *te = cd->value->kind == EX_TYPE ? cd->value->type : NULL;
  if (!te) {
    diag_error(cd->name.pos, "E_ARG", "-D %s=%s: const %s is a compile-time number, so -D gives it an integer (e.g. "
               "-D %s=8); a const that chooses a dtype is declared with one: `const %s = f32`, then -D %s=bf16",
               name, def, name, name, name, name);
    return;
  }
  if (te->rank || te->nannots || te->ndims_written || !ty_is_float(te->dtype)) {
    diag_error(cd->value->pos, "E_ARG", "const %s names a dtype: f32, f64 or bf16 (a float dtype, without dims or "
               "states), e.g. `const %s = f32`", name, name);
    return;
  }
  DType dt = te->dtype;
  if (def) {
    if (!strcmp(def, "f32") || !strcmp(def, "f64") || !strcmp(def, "bf16")) {
      dt = !strcmp(def, "f32") ? DT_F32 : !strcmp(def, "f64") ? DT_F64 : DT_BF16;
    } else {
      diag_error(cd->name.pos, "E_ARG", "-D %s=%s: const %s names a dtype (%s here); -D gives it f32, f64 or bf16 "
                 "(e.g. -D %s=bf16)", name, def, name, ty_dtype_name(te->dtype), name);
    }   /* (declared with its own dtype, so its uses report nothing more) */
  }
  Symbol *s = arena_alloc(sizeof *s);
  s->kind = SYM_TYPE;
  s->dtype_const = true;
  s->name = name;
  s->pos = cd->name.pos;
  s->type = ty_scalar(dt);
  cd->sym = s;
  add_global(s);
}

/* Consts in source order; a const overridden by -D takes that integer
 * instead of its expression, and the consts after it that use it follow. */
static void check_consts(TcCtx *c, const Vec *defines) {
  for (int i = 0; i < c->prog->consts.len; i++) {
    ConstDecl *cd = c->prog->consts.data[i];
    char *name = tok_str(cd->name);
    if (tc_is_duplicate(cd))
      continue;
    if (find_in(&globals, name)) {
      diag_error(cd->name.pos, "E_NAME", "'%s' is already defined", name);
      continue;
    }
    const char *def = define_of(defines, name);
    if (cd->value->kind == EX_TYPE || (def && !is_int_text(def))) {
      check_dtype_const(c, cd, name, def);
      continue;
    }
    ConstVal v;
    if (def)
      v = (ConstVal){false, strtoll(def, NULL, 10), (double)strtoll(def, NULL, 10)};
    else if (!const_eval(c, cd->value, &v, true))
      continue;
    Symbol *s = arena_alloc(sizeof *s);
    s->kind = SYM_CONST;
    s->name = name;
    s->pos = cd->name.pos;
    s->is_float_const = v.is_float;
    s->ival = v.i;
    s->fval = v.is_float ? v.f : (double)v.i;
    s->type = ty_scalar(v.is_float ? DT_F32 : DT_I32);
    s->type.weak = true;
    cd->sym = s;
    add_global(s);
  }
}

static bool apply_override(Mesh *m, const char *ovr) {
  const char *p = ovr;
  while (p && *p) {
    const char *eq = strchr(p, '=');
    if (!eq)
      return false;
    int len = (int)(eq - p);
    int a = -1;
    for (int i = 0; i < m->naxes; i++)
      if ((int)strlen(m->names[i]) == len && !strncmp(m->names[i], p, (size_t)len))
        a = i;
    if (a < 0)
      return false;
    m->sizes[a] = atoi(eq + 1);
    p = strchr(eq, ',');
    if (p)
      p++;
  }
  return true;
}

static bool check_mesh(TcCtx *c, const char *ovr) {
  Program *p = c->prog;
  Mesh *m = c->mesh;
  if (!p->mesh) {
    Pos pos = {p->file, 1, 1};
    diag_error(pos, "E_MESH", "the file declares no mesh; start it with a mesh declaration, e.g. `mesh {X: 2}`");
    return false;
  }
  bool ok = true;
  m->naxes = p->mesh->naxes;
  for (int a = 0; a < m->naxes; a++) {
    Token name = p->mesh->names[a];
    m->names[a] = tok_str(name);
    for (int b = 0; b < a; b++)
      if (!strcmp(m->names[a], m->names[b])) {
        diag_error(name.pos, "E_NAME", "mesh axis '%s' is declared twice", m->names[a]);
        ok = false;
      }
    int64_t size = 1;
    if (!tc_const_int(c, p->mesh->sizes[a], &size)) {
      ok = false;
    } else if (size < 1 || size > 1 << 20) {
      diag_error(p->mesh->sizes[a]->pos, "E_MESH", "mesh axis '%s' has size %lld; a mesh axis has 1 to 1048576 (2^20) "
                 "devices", m->names[a], (long long)size);
      ok = false;
    }
    m->sizes[a] = (int)size;
  }
  if (ovr && !apply_override(m, ovr))
    diag_ice("mesh override '%s' was not validated", ovr);
  int64_t devices = 1;
  for (int a = 0; a < m->naxes && ok && devices <= MAX_DEVICES; a++)
    devices *= m->sizes[a];   /* each size is at most 2^20: no overflow */
  if (ok && devices > MAX_DEVICES) {
    diag_error(p->mesh->pos, "E_MESH", "the mesh has more than %d devices%s; that is the most supported",
               MAX_DEVICES, ovr ? " (after --mesh)" : "");
    ok = false;
  }
  for (int a = 0; a < m->naxes; a++) {
    Symbol *s = arena_alloc(sizeof *s);
    s->kind = SYM_AXIS;
    s->name = m->names[a];
    s->axis = a;
    s->pos = p->mesh->names[a].pos;
    s->type.kind = TY_AXIS;
    add_global(s);
  }
  return ok;
}

/* ---- function signatures ------------------------------------------------------ */

/* The function's name in the global namespace. */
static bool declare_func(TcCtx *c, FuncDecl *f) {
  bool ok = true;
  char *name = tok_str(f->name);
  /* A function may take a builtin's name (a program written before the
   * builtin existed keeps its meaning): calls then mean the function.
   * grad, value_and_grad and remat are forms, not functions, so not those. */
  if (op_form(name)) {
    diag_error(f->name.pos, "E_NAME", "'%s' is a builtin form; choose another name", name);
    ok = false;
  }
  Symbol *prev = find_in(&globals, name);
  if (tc_is_duplicate(f)) {
    ok = false;
  } else if (prev) {
    diag_error(f->name.pos, "E_NAME", "'%s' is already defined", name);
    diag_note(prev->pos, "previous definition is here");
    ok = false;
  } else {
    Symbol *s = arena_alloc(sizeof *s);
    s->kind = SYM_FUNC;
    s->name = name;
    s->pos = f->name.pos;
    s->fn = f;
    s->type.kind = TY_FUNC;
    add_global(s);
  }
  return ok;
}

/* Manual axes, parameter and result types (an instance's type parameters
 * are in its tscope). */
bool tc_check_signature(TcCtx *c, FuncDecl *f) {
  bool ok = true;
  Scope *saved = c->scope;
  c->scope = f->tscope;
  for (int i = 0; i < f->nmanual; i++) {
    int a;
    if (!resolve_axis(c, f->manual_axes[i], &a)) {
      ok = false;
      continue;
    }
    if (f->manual_set & (1u << a)) {
      diag_error(f->manual_axes[i].pos, "E_DUP", "manual axis %s is listed twice", c->mesh->names[a]);
      ok = false;
    }
    f->manual_set |= 1u << a;
  }
  int np = f->params.len;
  f->param_types = arena_alloc(sizeof(Type) * (size_t)(np + 1));
  f->local_param_types = arena_alloc(sizeof(Type) * (size_t)(np + 1));
  c->manual = 0;
  for (int i = 0; i < np; i++) {
    Param *p = f->params.data[i];
    for (int j = 0; j < i; j++)
      if (tok_eq(((Param *)f->params.data[j])->name, tok_str(p->name))) {
        diag_error(p->name.pos, "E_NAME", "parameter '%.*s' is declared twice", p->name.len, p->name.start);
        ok = false;
      }
    if (p->type->meta) {   /* a generic's view has none (instance.c) */
      diag_error(p->type->pos, "E_ARG", "parameter '%.*s: %s' is bound at each call, so only a generic function "
                 "takes it (each call instantiates it): declare %.*s<T>(..., x: T) with a type parameter, or take "
                 "the %s's name out", p->name.len, p->name.start, p->type->meta == 'f' ? "fn" : "axis",
                 f->name.len, f->name.start, p->type->meta == 'f' ? "function" : "axis");
      f->param_types[i] = f->local_param_types[i] = ty_error();
      ok = false;
      continue;
    }
    ok &= tc_resolve_type(c, p->type, &f->param_types[i]);
    f->local_param_types[i] = f->param_types[i];
    if (f->manual && (f->param_types[i].kind == TY_ARRAY || f->param_types[i].kind == TY_STRUCT)) {
      bool lok = true;
      f->local_param_types[i] = tc_manual_local(c, &f->param_types[i], f->manual_set, p->type->pos,
                                                arena_printf("parameter '%s'", tok_str(p->name)), &lok);
      ok &= lok;
    }
  }
  f->result_types = arena_alloc(sizeof(Type) * (size_t)(f->nresults + 1));
  for (int i = 0; i < f->nresults; i++)
    ok &= tc_resolve_type(c, f->results[i], &f->result_types[i]);
  if (f->manual)
    for (int i = 0; i < f->nresults; i++)
      if (f->result_types[i].kind == TY_ARRAY || f->result_types[i].kind == TY_STRUCT) {
        bool lok = true;
        tc_manual_local(c, &f->result_types[i], f->manual_set, f->results[i]->pos, "result", &lok);
        if (!lok)
          f->result_types[i] = ty_error();  /* reported here, not again at the return */
        ok &= lok;
      }
  c->scope = saved;
  return ok;
}

/* ---- statements ---------------------------------------------------------------- */

static void check_block(TcCtx *c, Block *b, bool fn_body);

/* The type a binding or assignment gives the value e (c->bound), for
 * creations that leave out TYPE inside its elementwise arithmetic
 * (op_creation.c, tc_struct.c); with_bound returns the outer one for
 * restore_bound. */
typedef struct {
  const Type *type;
  const Expr *expr;
} Bound;

static Bound with_bound(TcCtx *c, const Type *t, const Expr *e) {
  Bound outer = {c->bound, c->bound_expr};
  c->bound = t;
  c->bound_expr = e;
  return outer;
}

static void restore_bound(TcCtx *c, Bound outer) {
  c->bound = outer.type;
  c->bound_expr = outer.expr;
}

static Type bind_value(TcCtx *c, Stmt *s, bool mutable_) {
  Type t;
  const char *what = arena_printf("%s %.*s", mutable_ ? "var" : "let", s->name.len, s->name.start);
  if (s->type) {
    Type annot;
    if (!tc_resolve_type(c, s->type, &annot)) {
      tc_expr_unannotated(c, s->expr);
      return ty_error();
    }
    Bound outer = with_bound(c, &annot, s->expr);
    t = tc_expr_annot(c, s->expr, &annot, what);
    restore_bound(c, outer);
    if (t.kind != TY_ERROR)
      t = annot;
  } else {
    t = tc_expr(c, s->expr);
  }
  if (t.kind == TY_TUPLE) {
    diag_error(s->expr->pos, "E_ARG", "this expression has %d values; bind them with `let (a, b, ...) = ...`",
               t.nelems);
    return ty_error();
  }
  if (t.kind == TY_VOID) {
    diag_error(s->expr->pos, "E_ARG", "this expression has no value to bind");
    return ty_error();
  }
  if (t.kind != TY_ARRAY && t.kind != TY_ERROR && t.kind != TY_STRING && t.kind != TY_STRUCT) {
    diag_error(s->expr->pos, "E_ARG", "only arrays, scalars, strings and structs can be bound to names");
    return ty_error();
  }
  if (mutable_ && t.weak) {
    /* A var holds a run-time value: a literal initial value fixes it. */
    t.weak = false;
  }
  return t;
}

static void check_assign(TcCtx *c, Stmt *s) {
  char *name = tok_str(s->name);
  Symbol *sym = tc_lookup(c, name);
  if (!sym || sym->kind != SYM_LOCAL) {
    diag_error(s->pos, "E_NAME", "%s '%s'; declare it first with `var %s = ...`",
               sym ? "cannot assign to" : "unknown name", name, name);
    tc_expr(c, s->expr);
    return;
  }
  if (!sym->mutable_) {
    diag_error(s->pos, "E_NAME", "'%s' is bound with let and cannot change; declare it with `var %s = ...`", name,
               name);
    diag_fix_keyword(sym->pos, "let", "var", arena_printf("declare '%s' with var", name));
    diag_note(sym->pos, "'%s' is bound here", name);
    tc_expr(c, s->expr);
    return;
  }
  s->sym = sym;
  if (sym->type.kind == TY_ERROR) {
    tc_expr_unannotated(c, s->expr);
    return;
  }
  if (!tc_check_diverge_assign(c, s, sym)) {
    tc_expr(c, s->expr);
    return;
  }
  /* p.h.w = e: the field's type is the var's part that must stay. */
  Type target = sym->type;
  for (int i = 0; i < s->path.len; i++) {
    Token *f = s->path.data[i];
    char *fname = tok_str(*f);
    int k = target.kind == TY_STRUCT ? ty_find_field(target.sdef, fname) : -1;
    if (k < 0) {
      if (target.kind == TY_STRUCT)
        diag_error(f->pos, "E_NAME", "struct %s has no field '%s'", target.sdef->name, fname);
      else
        diag_error(f->pos, "E_ARG", "%s has type %s, which has no fields", name, ty_str(c->mesh, &target));
      tc_expr(c, s->expr);
      return;
    }
    target = ty_field(&target, k);
    name = arena_printf("%s.%s", name, fname);
  }
  /* (a, b) = e: name the element in messages (language.md 10.3). */
  const char *elem = s->tuple_elem ? arena_printf("element %d of the tuple: ", s->tuple_elem) : "";
  const char *where = s->tuple_elem ? arena_printf("element %d of the tuple, assigned to %s", s->tuple_elem, name)
                                    : arena_printf("assignment to %s", name);
  Type t;
  if (tc_is_annotatable(c, s->expr)) {
    /* The var's type is the out_sharding; a creation that names another
     * type changes the var's type. */
    c->annot_code = "E_CARRY";
    Bound outer = with_bound(c, &target, s->expr);
    tc_expr_annot(c, s->expr, &target, where);
    restore_bound(c, outer);
    c->annot_code = NULL;
    return;
  }
  Bound outer = with_bound(c, &target, s->expr);   /* p.w = normal(seed=1) * 2.0: the field's type */
  t = tc_expr(c, s->expr);
  restore_bound(c, outer);
  if (t.kind == TY_ERROR)
    return;
  if (target.kind == TY_STRUCT || t.kind == TY_STRUCT) {
    c->annot_code = "E_CARRY";
    tc_struct_fits(c, s->expr, &t, &target, where);
    c->annot_code = NULL;
    return;
  }
  Type tt = t;
  tt.weak = false;
  if (t.weak && t.kind == TY_ARRAY && t.rank == 0 && target.kind == TY_ARRAY && target.rank == 0 &&
      (ty_is_float(target.dtype) || !ty_is_float(t.dtype)))
    return; /* a literal takes the var's type */
  if (!ty_equal(&tt, &target)) {
    AxisSet dv = tt.V ^ target.V;
    if (dv)
      diag_error(s->pos, "E_CARRY",
                 "%sassignment changes the type of var '%s' from %s to %s; a var keeps its type, and it differs in "
                 "the varying axes %s: declare the var varying with pcast(x, %s, to=varying), or make the value "
                 "invariant with a collective",
                 elem, name, ty_str(c->mesh, &target), ty_str(c->mesh, &t), ty_axes_str(c->mesh, dv),
                 ty_axes_arg(c->mesh, dv));
    else
      diag_error(s->pos, "E_CARRY",
                 "%sassignment changes the type of var '%s' from %s to %s; a var keeps its type (reshard or cast the "
                 "value)",
                 elem, name, ty_str(c->mesh, &target), ty_str(c->mesh, &t));
    diag_note(sym->pos, "'%s' is declared here", sym->name);
  }
}

static bool check_scalar_index(TcCtx *c, Expr *e, const char *what) {
  Type t = tc_expr(c, e);
  if (t.kind == TY_ERROR)
    return false;
  if (t.kind != TY_ARRAY || t.rank != 0 || t.dtype != DT_I32) {
    diag_error(e->pos, "E_DTYPE", "%s must be an i32 scalar, not %s", what, ty_str(c->mesh, &t));
    return false;
  }
  if (t.U) {
    Type r = t;
    r.U &= c->manual;
    diag_error(e->pos, "E_UR", "%s is unreduced (%s); reduce it first: reshard(x, %s)", what, ty_str(c->mesh, &t),
               ty_str(c->mesh, &r));
    return false;
  }
  return true;
}

static void check_for(TcCtx *c, Stmt *s) {
  bool ok = check_scalar_index(c, s->expr, "a loop bound");
  ok &= check_scalar_index(c, s->hi, "a loop bound");
  AxisSet v = 0;
  if (ok)
    v = s->expr->ty->V | s->hi->ty->V;
  Scope *outer = c->scope;
  push_scope(c);
  Type it = ty_scalar(DT_I32);
  it.V = v;
  s->sym = tc_bind(c, SYM_LOCAL, s->name, it);
  int depth = c->diverge.len;
  if (v)
    tc_push_diverge(c, s, s->expr->ty->V ? s->expr : s->hi, outer);
  check_block(c, s->body, false);
  c->diverge.len = depth;
  pop_scope(c);
}

static void check_if(TcCtx *c, Stmt *s) {
  Type t = tc_expr(c, s->expr);
  AxisSet v = 0;
  if (t.kind != TY_ERROR) {
    if (t.kind != TY_ARRAY || t.rank != 0 || t.dtype != DT_BOOL)
      diag_error(s->expr->pos, "E_DTYPE", "an if condition must be a bool scalar, not %s; compare, e.g. x > 0",
                 ty_str(c->mesh, &t));
    else if (t.U)
      diag_error(s->expr->pos, "E_UR", "the if condition %s is unreduced; reduce what it compares first with "
                 "reshard", ty_str(c->mesh, &t));
    v = t.V;
  }
  int depth = c->diverge.len;
  if (v)
    tc_push_diverge(c, s, s->expr, c->scope);
  push_scope(c);
  check_block(c, s->body, false);
  pop_scope(c);
  if (s->els) {
    push_scope(c);
    check_block(c, s->els, false);
    pop_scope(c);
  }
  c->diverge.len = depth;
}

static void check_return(TcCtx *c, Stmt *s, bool last_in_body) {
  FuncDecl *f = c->fn;
  if (!last_in_body) {
    diag_error(s->pos, "E_RETURN",
               "return must be the last statement of the function body (early returns are not supported)");
    if (s->expr)
      tc_expr(c, s->expr);
    return;
  }
  int want = f->nresults;
  if (!s->expr) {
    if (want)
      diag_error(s->pos, "E_RETURN", "'%.*s' must return %d value%s", f->name.len, f->name.start, want,
                 want > 1 ? "s" : "");
    return;
  }
  if (!want) {
    diag_error(s->pos, "E_RETURN", "'%.*s' declares no result; add `-> TYPE` to the signature", f->name.len,
               f->name.start);
    tc_expr(c, s->expr);
    return;
  }
  Expr **vals = &s->expr;
  int n = 1;
  if (s->expr->kind == EX_TUPLE && want > 1) {
    n = s->expr->args.len;
    vals = (Expr **)s->expr->args.data;
  }
  if (n != want && !(n == 1 && want > 1)) {
    diag_error(s->pos, "E_RETURN", "'%.*s' returns %d values but this returns %d", f->name.len, f->name.start, want, n);
    return;
  }
  if (n == 1 && want > 1) {
    /* return f(...) where f returns the whole tuple */
    Type t = tc_expr(c, s->expr);
    Type decl = ty_tuple(want, f->result_types);
    if (t.kind == TY_ERROR || ty_equal(&t, &decl))
      return;
    if (t.kind != TY_TUPLE || t.nelems != want)
      diag_error(s->pos, "E_RETURN", "'%.*s' declares %d results %s but this returns %s; write return (a, b, ...)",
                 f->name.len, f->name.start, want, ty_str(c->mesh, &decl), ty_str(c->mesh, &t));
    else
      diag_error(s->pos, "E_ANNOT", "returns %s but '%.*s' declares %s", ty_str(c->mesh, &t), f->name.len,
                 f->name.start, ty_str(c->mesh, &decl));
    return;
  }
  for (int i = 0; i < n; i++) {
    Type *decl = &f->result_types[i];
    if (decl->kind == TY_ERROR) {
      tc_expr_unannotated(c, vals[i]);
      continue;
    }
    if (f->view_manual) {
      /* Called from a manual body: the result keeps the value's manual
       * states (a varying activation stays varying). */
      Type t = tc_expr(c, vals[i]);
      if (t.kind == TY_ERROR)
        continue;
      Type tt = t;
      tt.weak = false;
      if (t.weak && t.kind == TY_ARRAY && decl->kind == TY_ARRAY && !decl->rank) {
        tt = *decl;
        tt.V |= t.V;
      }
      if (!tc_equal_but_manual(&tt, decl, f->manual_set)) {
        Type pt = ty_strip_sharding(&tt), pd = ty_strip_sharding(decl);
        bool arrays = t.kind == TY_ARRAY && decl->kind == TY_ARRAY;
        diag_error(vals[i]->pos, !arrays ? "E_DTYPE" : t.dtype != decl->dtype ? "E_DTYPE"
                   : !ty_equal(&pt, &pd) ? "E_SHAPE" : "E_ANNOT",
                   "the return type: the value has type %s but %s is expected", ty_str(c->mesh, &t),
                   ty_str(c->mesh, decl));
        continue;
      }
      f->result_types[i] = tt;
      continue;
    }
    if (!f->manual) {
      tc_expr_annot(c, vals[i], decl, "the return type");
      continue;
    }
    bool ok = true;
    Type local = tc_manual_local(c, decl, f->manual_set, s->pos, "result", &ok);
    if (!ok) {
      tc_expr_unannotated(c, vals[i]);
      continue;
    }
    Type t;
    c->annot_v_free = true;
    if (tc_is_annotatable(c, vals[i]))
      t = tc_expr_annot(c, vals[i], &local, "the return type");
    else
      t = tc_expr(c, vals[i]);
    c->annot_v_free = false;
    if (t.kind == TY_ARRAY)
      tc_check_manual_result(c, &t, decl, vals[i]->pos);
  }
}

static void check_stmt(TcCtx *c, Stmt *s, bool last_in_body) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR: {
    Type t = bind_value(c, s, s->kind == ST_VAR);
    s->sym = tc_bind(c, SYM_LOCAL, s->name, t);
    s->sym->mutable_ = s->kind == ST_VAR;
    ConstVal v;
    if (s->kind == ST_LET && t.kind == TY_ARRAY && t.weak && t.dtype == DT_I32 && const_eval(c, s->expr, &v, false) &&
        !v.is_float) {
      s->sym->static_int = true;   /* a size for types: let T = size(q, -2) */
      s->sym->ival = v.i;
    }
    break;
  }
  case ST_LET_TUPLE: {
    Type t = tc_expr(c, s->expr);
    int n = s->names.len;
    if (t.kind != TY_ERROR && (t.kind != TY_TUPLE || t.nelems != n)) {
      diag_error(s->pos, "E_ARG", "cannot destructure %s into %d names", ty_str(c->mesh, &t), n);
      t = ty_error();
    }
    for (int i = 0; i < n; i++) {
      Type ti = t.kind == TY_TUPLE ? t.elems[i] : ty_error();
      vec_push(&s->syms, tc_bind(c, SYM_LOCAL, *(Token *)s->names.data[i], ti));
    }
    break;
  }
  case ST_ASSIGN:
    check_assign(c, s);
    break;
  case ST_FOR:
    check_for(c, s);
    break;
  case ST_IF:
    check_if(c, s);
    break;
  case ST_RETURN:
    check_return(c, s, last_in_body);
    break;
  case ST_EXPR: {
    Type t = tc_expr(c, s->expr);
    (void)t;
    break;
  }
  }
}

static void check_block(TcCtx *c, Block *b, bool fn_body) {
  for (int i = 0; i < b->stmts.len; i++)
    check_stmt(c, b->stmts.data[i], fn_body && i == b->stmts.len - 1);
}

void tc_check_body(TcCtx *c, FuncDecl *f) {
  c->fn = f;
  c->manual = f->manual || f->view_manual ? f->manual_set : 0;
  c->diverge.len = 0;
  c->scope = f->tscope;
  push_scope(c);
  for (int i = 0; i < f->params.len; i++) {
    Param *p = f->params.data[i];
    p->sym = tc_bind(c, SYM_LOCAL, p->name, f->local_param_types[i]);
  }
  check_block(c, f->body, true);
  Block *b = f->body;
  bool returns = false;   /* a misplaced return was reported already */
  for (int i = 0; i < b->stmts.len; i++)
    returns |= ((Stmt *)b->stmts.data[i])->kind == ST_RETURN;
  if (f->nresults && !returns)
    diag_error(f->pos, "E_RETURN", "'%.*s' declares a result but does not end with `return`", f->name.len,
               f->name.start);
  pop_scope(c);
  c->fn = NULL;
  c->manual = 0;
}

/* Calls must form a DAG: a recursive function would need a dynamic call
 * stack of shards, which the static buffer plan does not have. */
/* Recursion is an error at a call on the cycle. A depth-first search with
 * its own stack: a chain of calls may be as long as the program. */
static void check_recursion(Program *p) {
  int n = p->funcs.len;
  PtrMap index = {0};
  for (int i = 0; i < n; i++)
    ptrmap_put(&index, p->funcs.data[i], i);
  char *state = arena_alloc((size_t)n + 1);   /* 0 new, 1 on the stack, 2 done */
  int *stack = mem_alloc(sizeof(int) * (size_t)(n + 1)), *next = mem_calloc((size_t)n + 1, sizeof(int));
  for (int root = 0; root < n; root++) {
    if (state[root])
      continue;
    int top = 0;
    stack[top++] = root;
    state[root] = 1;
    while (top) {
      FuncDecl *f = p->funcs.data[stack[top - 1]];
      if (next[stack[top - 1]] == f->callees.len) {
        state[stack[--top]] = 2;
        continue;
      }
      Expr *call = f->callees.data[next[stack[top - 1]]++];
      int g = ptrmap_get(&index, call->fn);
      if (g >= 0 && state[g] == 1)
        diag_error(call->pos, "E_NAME", "recursive call: functions cannot call themselves, directly or indirectly");
      if (g >= 0 && state[g] == 0) {
        state[g] = 1;
        stack[top++] = g;
      }
    }
  }
  free(stack);
  free(next);
  ptrmap_free(&index);
}

bool tc_program(Program *p, Mesh *mesh_out, const char *mesh_override, const Vec *defines) {
  tc_up = (TcUp){tc_lookup, tc_global, tc_is_duplicate, tc_add_global, tc_resolve_type, tc_expr, tc_expr_with,
                 tc_expr_annot, tc_expr_unannotated, tc_want_array, tc_check_signature, tc_check_body};
  TcCtx c;
  memset(&c, 0, sizeof c);
  c.prog = p;
  c.mesh = mesh_out;
  memset(&globals, 0, sizeof globals);
  strmap_free(&global_index);
  ptrmap_free(&duplicates);
  int errs = diag_error_count();
  check_duplicates(p);
  check_consts(&c, defines);
  if (!check_mesh(&c, mesh_override))
    return false;
  tc_structs(&c);
  tc_instances_reset();
  tc_vjp_reset();
  int nwritten = p->funcs.len;
  for (int i = 0; i < nwritten; i++) {
    FuncDecl *f = p->funcs.data[i];
    f->ok = declare_func(&c, f);
    f->ok &= f->ntparams ? tc_check_generic(&c, f) : tc_check_signature(&c, f);
  }
  /* Generic functions are checked per instance, when called (instance.c);
   * instances join the list as they are made, already checked. */
  for (int i = 0; i < p->funcs.len; i++) {
    FuncDecl *f = p->funcs.data[i];
    if (!f->ntparams && !f->checked) {
      f->checked = true;
      tc_check_body(&c, f);
    }
  }
  check_recursion(p);
  return diag_error_count() == errs;
}

/* A struct binding prints as its struct's name, then a line per leaf
 * (language.md §9.1). */
void tc_print_bindings(FILE *out, const Program *p, const Mesh *m) {
  for (int i = 0; i < p->funcs.len; i++) {
    FuncDecl *f = p->funcs.data[i];
    for (int j = 0; j < f->bindings.len; j++) {
      Symbol *s = f->bindings.data[j];
      fprintf(out, "%.*s.%s: %s\n", f->name.len, f->name.start, s->name, ty_str(m, &s->type));
      if (s->type.kind == TY_STRUCT)
        for (int k = 0; k < s->type.nelems; k++)
          fprintf(out, "%.*s.%s.%s: %s\n", f->name.len, f->name.start, s->name, ty_leaf_path(s->type.sdef, k),
                  ty_str(m, &s->type.elems[k]));
    }
  }
}
