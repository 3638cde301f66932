/* lsp_index.c: the language server's index of one document: every place in
 * its text that means something, each a token with what it denotes (Occ):
 * a declaration (function, type parameter, parameter, binding, const, mesh
 * axis, struct, field, import) or a use (a name, a call, a struct or type
 * parameter named in a type or as an argument, a field in p.w, in S(w=...)
 * or in p.w = ..., an operator or literal whose expression has a type, an
 * axis or const written in a type). Hover and definition (lsp_query.c,
 * lsp_hover.c) ask for the innermost place under the cursor.
 *
 * Only the document's own declarations are indexed: an imported file's
 * places are never under the cursor. A generic function's declaration is
 * never typed (language.md §9.3: each call's instance is), so its body is
 * indexed through its instances: a place inside it appears once per
 * instance (Occ.fn the instance), each with that instance's types, and
 * hover lists them; a generic function nothing calls is indexed as written,
 * untyped. Instances made for calls from manual bodies (per-device views,
 * §9.7) are left out: the ordinary instance or function says the same.
 */
#include <ctype.h>

#include "lsp.h"

static Occ *add(LspIndex *ix, OccKind k, Pos pos, int len) {
  Occ *o = arena_alloc(sizeof *o);
  o->kind = k;
  o->pos = pos;
  o->len = len > 0 ? len : 1;
  o->fn = ix->fn;
  o->axis = -1;
  o->field = -1;
  o->tparam = -1;
  o->fty = ty_error();
  vec_push(&ix->occs, o);
  return o;
}

/* ---- lookups ------------------------------------------------------------------------ */

const FuncDecl *lsp_decl_of(const FuncDecl *f) { return f && f->generic ? f->generic : f; }

const FuncDecl *lsp_func_named(const LspCtx *c, const char *name, int len) {
  for (int i = 0; c->prog && name && i < c->prog->funcs.len; i++) {
    const FuncDecl *f = c->prog->funcs.data[i];
    if (!f->generic && f->name.len == len && !strncmp(f->name.start, name, (size_t)len))
      return f;
  }
  return NULL;
}

const StructDecl *lsp_struct_named(const LspCtx *c, const char *name, int len) {
  for (int i = 0; c->prog && name && i < c->prog->structs.len; i++) {
    const StructDecl *sd = c->prog->structs.data[i];
    if (sd->name.len == len && !strncmp(sd->name.start, name, (size_t)len))
      return sd;
  }
  return NULL;
}

const StructDecl *lsp_struct_of(const LspCtx *c, const StructDef *d) {
  for (int i = 0; c->prog && d && i < c->prog->structs.len; i++) {
    const StructDecl *sd = c->prog->structs.data[i];
    if (sd->def == d)
      return sd;
  }
  return NULL;
}

static int axis_index(const LspCtx *c, Token t) {
  for (int a = 0; a < c->mesh.naxes; a++)
    if (tok_eq(t, c->mesh.names[a]))
      return a;
  const MeshDecl *m = c->prog ? c->prog->mesh : NULL;
  for (int a = 0; m && a < m->naxes; a++)
    if (m->names[a].len == t.len && !strncmp(m->names[a].start, t.start, (size_t)t.len))
      return a;
  return -1;
}

static const ConstDecl *const_named(const LspCtx *c, Token t) {
  for (int i = 0; c->prog && i < c->prog->consts.len; i++) {
    const ConstDecl *cd = c->prog->consts.data[i];
    if (cd->name.len == t.len && !strncmp(cd->name.start, t.start, (size_t)t.len))
      return cd;
  }
  return NULL;
}

/* The index of type parameter t of the function being indexed, or -1. */
static int tparam_named(const LspIndex *ix, Token t) {
  const FuncDecl *g = lsp_decl_of(ix->fn);
  for (int k = 0; g && k < g->ntparams; k++)
    if (g->tparams[k].len == t.len && !strncmp(g->tparams[k].start, t.start, (size_t)t.len))
      return k;
  return -1;
}

/* ---- building it -------------------------------------------------------------------- */

/* A struct or type parameter named by token t (in a type, or as a name). */
static bool add_named(LspIndex *ix, Token t, const Expr *e) {
  int k = tparam_named(ix, t);
  if (k >= 0) {
    add(ix, OC_TPARAM, t.pos, t.len)->tparam = k;
    return true;
  }
  const StructDecl *sd = lsp_struct_named(ix->c, t.start, t.len);
  if (!sd)
    return false;
  Occ *o = add(ix, OC_STRUCT, t.pos, t.len);
  o->sd = sd;
  o->e = e;
  return true;
}

/* The name the typechecker replaced by the type it names (a struct or type
 * parameter as a builtin's argument, zeros(S) or zeros(Block[L]): an
 * EX_TYPE at the name, or at the `[` after it): its token in the text. */
static bool name_at(Pos p, Token *t) {
  if (!p.file || p.line <= 0)
    return false;
  size_t len;
  const char *l = diag_line_text(p.file, p.line, &len);
  size_t b = (size_t)p.col - 1, e;
  if (b < len && l[b] == '[')
    while (b > 0 && (isalnum((unsigned char)l[b - 1]) || l[b - 1] == '_'))
      b--;
  for (e = b; e < len && (isalnum((unsigned char)l[e]) || l[e] == '_'); e++)
    ;
  if (e == b || isdigit((unsigned char)l[b]))
    return false;
  memset(t, 0, sizeof *t);
  t->start = l + b;
  t->len = (int)(e - b);
  t->pos = p;
  t->pos.col = (int)b + 1;
  return true;
}

static void index_type(LspIndex *ix, const TypeExpr *t) {
  if (!t)
    return;
  Token name;
  if (t->named)
    add_named(ix, t->name, NULL);
  else if (t->resolved && name_at(t->pos, &name))
    add_named(ix, name, NULL);
  for (int d = 0; d < t->rank && t->dims; d++) {
    const DimExpr *de = &t->dims[d];
    if (de->size.len && !isdigit((unsigned char)de->size.start[0])) {
      const ConstDecl *cd = const_named(ix->c, de->size);
      if (cd)
        add(ix, OC_CONST_SIZE, de->size.pos, de->size.len)->cd = cd;
    }
    for (int k = 0; k < de->naxes; k++)
      add(ix, OC_AXIS, de->axes[k].pos, de->axes[k].len)->axis = axis_index(ix->c, de->axes[k]);
  }
  for (int a = 0; a < t->nannots && t->annots; a++)
    for (int k = 0; k < t->annots[a].naxes; k++)
      add(ix, OC_AXIS, t->annots[a].axes[k].pos, t->annots[a].axes[k].len)->axis =
          axis_index(ix->c, t->annots[a].axes[k]);
}

/* A field named by token t of struct sd (NULL: unknown) in a value whose
 * field has type fty (NULL: the declared type). */
static void add_field(LspIndex *ix, Token t, const StructDecl *sd, const Type *fty, const Expr *e) {
  Occ *o = add(ix, OC_FIELD, t.pos, t.len);
  o->e = e;
  o->sd = sd;
  if (sd && sd->def) {
    char *name = tok_str(t);
    o->field = ty_find_field(sd->def, name);
    if (o->field >= 0)
      o->fty = fty ? *fty : ty_field_type(sd->def, o->field);
  } else if (sd) {
    for (int f = 0; f < sd->fields.len; f++) {
      const Param *p = sd->fields.data[f];
      if (p->name.len == t.len && !strncmp(p->name.start, t.start, (size_t)t.len))
        o->field = f;
    }
  }
}

static void index_expr(LspIndex *ix, const Expr *e);

/* The name written as the first argument of a call f(NAME...). */
static bool first_arg(const Expr *call, Token *t) {
  Pos p = call->callee->tok.pos;
  if (!p.file || p.line <= 0)
    return false;
  size_t len;
  const char *l = diag_line_text(p.file, p.line, &len);
  size_t k = (size_t)p.col - 1 + (size_t)call->callee->tok.len;
  while (k < len && (l[k] == ' ' || l[k] == '\t'))
    k++;
  if (k >= len || l[k] != '(')
    return false;
  for (k++; k < len && (l[k] == ' ' || l[k] == '\t'); k++)
    ;
  p.col = (int)k + 1;
  return k < len && l[k] != '[' && name_at(p, t);
}

/* S(f=..., g=...): the struct and each field; a type written as an
 * argument (ones(S), zeros(Block[L]), zeros(P)) is a name or an indexing. */
static bool index_construction(LspIndex *ix, const Expr *e) {
  const Expr *callee = e->callee;
  const StructDecl *sd = e->sym && e->sym->kind == SYM_STRUCT ? e->sym->sdecl : NULL;
  if (!sd && !e->sym && (e->fn || e->bi))
    return false;
  if (!sd)
    sd = lsp_struct_named(ix->c, callee->tok.start, callee->tok.len);
  if (!sd)
    return false;
  Occ *o = add(ix, OC_STRUCT, callee->tok.pos, callee->tok.len);
  o->sd = sd;
  o->e = e;
  for (int i = 0; i < e->args.len; i++) {
    const Expr *a = e->args.data[i];
    if (a->kind == EX_KWARG)
      add_field(ix, a->tok, sd, NULL, a);
    index_expr(ix, a->kind == EX_KWARG ? a->lhs : a);
  }
  return true;
}

/* Every argument (or element, or index) of e. */
static void index_args(LspIndex *ix, const Expr *e) {
  for (int i = 0; i < e->args.len; i++)
    index_expr(ix, e->args.data[i]);
}

static void index_expr(LspIndex *ix, const Expr *e) {
  if (!e)
    return;
  switch (e->kind) {
  case EX_NAME: {
    if ((!e->sym || e->sym->kind == SYM_STRUCT || e->sym->kind == SYM_TYPE) && add_named(ix, e->tok, e))
      return;
    Occ *o = add(ix, OC_NAME, e->tok.pos, e->tok.len);
    o->e = e;
    o->sym = e->sym;
    return;
  }
  case EX_CALL:
    if (e->callee && e->callee->kind == EX_NAME) {
      if (index_construction(ix, e))
        return;
      add(ix, OC_CALL, e->callee->tok.pos, e->callee->tok.len)->e = e;
      /* zeros(S), normal(P, seed=...) of a struct: the typechecker took the
       * type out of the arguments (the leaves are created instead) */
      Token name;
      if (e->bi && e->ty && e->ty->kind == TY_STRUCT && first_arg(e, &name))
        add_named(ix, name, NULL);
    } else {
      index_expr(ix, e->callee);
    }
    index_args(ix, e);
    return;
  case EX_KWARG:
    index_expr(ix, e->lhs);
    return;
  case EX_TUPLE:
  case EX_LIST:
    index_args(ix, e);
    return;
  case EX_TYPE:
    index_type(ix, e->type);
    return;
  case EX_AS:
    add(ix, OC_EXPR, e->tok.pos, e->tok.len)->e = e;
    index_expr(ix, e->lhs);
    index_type(ix, e->type);
    return;
  case EX_INDEX:
    add(ix, OC_EXPR, e->tok.pos, e->tok.len)->e = e;
    index_expr(ix, e->lhs);
    index_args(ix, e);
    return;
  case EX_SLICE:
    index_expr(ix, e->lhs);
    index_expr(ix, e->rhs);
    return;
  case EX_FIELD: {
    index_expr(ix, e->lhs);
    const Type *lt = e->lhs ? e->lhs->ty : NULL;
    const StructDecl *sd = lt && lt->kind == TY_STRUCT ? lsp_struct_of(ix->c, lt->sdef) : NULL;
    add_field(ix, e->tok, sd, e->ty && e->ty->kind != TY_ERROR ? e->ty : NULL, e);
    return;
  }
  case EX_LEAF:
    return;   /* compiler-made, never written */
  default:   /* literals, unary and binary operators */
    if (e->tok.len)
      add(ix, OC_EXPR, e->tok.pos, e->tok.len)->e = e;
    index_expr(ix, e->lhs);
    index_expr(ix, e->rhs);
    return;
  }
}

static void bind(LspIndex *ix, OccKind k, Token name, const Symbol *sym, const Stmt *st) {
  Occ *o = add(ix, k, name.pos, name.len);
  o->sym = sym;
  o->st = st;
  if (sym)
    ptrmap_put(&ix->sym_kind, sym, k);
}

/* p.h.w = e: each field of the path, typed from the var's type. */
static void index_path(LspIndex *ix, const Stmt *s) {
  Type t = s->sym ? s->sym->type : ty_error();
  for (int i = 0; i < s->path.len; i++) {
    Token name = *(Token *)s->path.data[i];
    const StructDecl *sd = t.kind == TY_STRUCT ? lsp_struct_of(ix->c, t.sdef) : NULL;
    int f = t.kind == TY_STRUCT ? ty_find_field(t.sdef, tok_str(name)) : -1;
    Type ft = f >= 0 ? ty_field(&t, f) : ty_error();
    add_field(ix, name, sd, f >= 0 ? &ft : NULL, NULL);
    t = ft;
  }
}

static void index_block(LspIndex *ix, const Block *b);

static void index_stmt(LspIndex *ix, const Stmt *s) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR:
    index_expr(ix, s->expr);
    index_type(ix, s->type);
    bind(ix, OC_BIND, s->name, s->sym, s);
    return;
  case ST_LET_TUPLE:
    index_expr(ix, s->expr);
    for (int i = 0; s->tuple_elem >= 0 && i < s->names.len; i++)   /* not (a, b) = e's hidden names */
      bind(ix, OC_BIND, *(Token *)s->names.data[i], i < s->syms.len ? s->syms.data[i] : NULL, s);
    return;
  case ST_ASSIGN:
    index_expr(ix, s->expr);
    if (s->sym)
      add(ix, OC_NAME, s->name.pos, s->name.len)->sym = s->sym;
    index_path(ix, s);
    return;
  case ST_FOR:
    index_expr(ix, s->expr);
    index_expr(ix, s->hi);
    bind(ix, OC_BIND, s->name, s->sym, s);
    index_block(ix, s->body);
    return;
  case ST_IF:
    index_expr(ix, s->expr);
    index_block(ix, s->body);
    index_block(ix, s->els);
    return;
  case ST_RETURN:
  case ST_EXPR:
    index_expr(ix, s->expr);
    return;
  }
}

static void index_block(LspIndex *ix, const Block *b) {
  for (int i = 0; b && i < b->stmts.len; i++)
    if (b->stmts.data[i])
      index_stmt(ix, b->stmts.data[i]);
}

/* A function's parameters, result types and body (an instance's: typed). */
static void index_body(LspIndex *ix, const FuncDecl *f) {
  for (int k = 0; k < f->params.len; k++) {
    const Param *pa = f->params.data[k];
    bind(ix, OC_PARAM, pa->name, pa->sym, NULL);
    index_type(ix, pa->type);
  }
  for (int k = 0; k < f->nresults; k++)
    index_type(ix, f->results[k]);
  index_block(ix, f->body);
}

static bool has_instance(const Program *p, const FuncDecl *g) {
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    if (f->generic == g && !f->view_manual)
      return true;
  }
  return false;
}

static void index_struct(LspIndex *ix, const StructDecl *sd) {
  add(ix, OC_STRUCT_DECL, sd->name.pos, sd->name.len)->sd = sd;
  for (int f = 0; f < sd->fields.len; f++) {
    const Param *p = sd->fields.data[f];
    Occ *o = add(ix, OC_FIELD_DECL, p->name.pos, p->name.len);
    o->sd = sd;
    o->field = f;
    if (sd->def && f < sd->def->nfields)
      o->fty = sd->def->field_types[f];   /* its leaves made only for a hover: ty_with_leaves */
    index_type(ix, p->type);
  }
}

void lsp_index(LspIndex *ix, LspCtx *c) {
  memset(ix, 0, sizeof *ix);
  ix->c = c;
  const Program *p = c->prog;
  if (!p)
    return;
  const SourceFile *doc = p->file;
  if (p->mesh)
    for (int a = 0; a < p->mesh->naxes; a++) {
      add(ix, OC_AXIS_DECL, p->mesh->names[a].pos, p->mesh->names[a].len)->axis = a;
      index_expr(ix, p->mesh->sizes[a]);
    }
  for (int i = 0; i < p->imports.len; i++) {
    const ImportDecl *d = p->imports.data[i];
    if (d->pos.file == doc)
      add(ix, OC_IMPORT, d->pos, lsp_string_len(d->pos))->imp = d;
  }
  for (int i = 0; i < p->consts.len; i++) {
    const ConstDecl *cd = p->consts.data[i];
    if (cd->name.pos.file != doc)
      continue;
    add(ix, OC_CONST, cd->name.pos, cd->name.len)->cd = cd;
    index_expr(ix, cd->value);
  }
  for (int i = 0; i < p->structs.len; i++)
    if (((const StructDecl *)p->structs.data[i])->name.pos.file == doc)
      index_struct(ix, p->structs.data[i]);
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    if (f->name.pos.file != doc || (f->generic && (f->view_manual || !f->generic->ntparams)))
      continue;
    ix->fn = f;
    if (f->generic) {   /* an instance: the generic declaration's body, typed */
      index_body(ix, f);
      continue;
    }
    add(ix, OC_FUNC, f->name.pos, f->name.len);
    for (int k = 0; k < f->ntparams; k++)
      add(ix, OC_TPARAM_DECL, f->tparams[k].pos, f->tparams[k].len)->tparam = k;
    if (!f->ntparams || !has_instance(p, f))
      index_body(ix, f);
  }
  ix->fn = NULL;
}

const Occ *lsp_occ_at(const LspIndex *ix, int line, int col) {
  const Occ *best = NULL;
  for (int i = 0; i < ix->occs.len; i++) {
    const Occ *o = ix->occs.data[i];
    if (o->pos.file != &ix->c->src || o->pos.line != line || col < o->pos.col || col >= o->pos.col + o->len)
      continue;
    if (!best || o->len < best->len || (o->len == best->len && o->sym && !best->sym))
      best = o;
  }
  return best;
}
