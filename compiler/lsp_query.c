/* lsp_query.c: the language server's answers, computed in a child process
 * (lsp.c) from the compiler's own analysis of one document.
 *
 * Diagnostics: the document runs through check's stages (drv_analyze) with
 * diagnostics recorded as for --diagnostics=json (diag_json.c resolves the
 * fixes); each becomes an LSP Diagnostic: its range, code (with a link to
 * its section of the docs' errors.md), message, notes as related
 * information, and its fixes in data.fixes (lsp.c offers them as quick-fix
 * code actions).
 *
 * Hover, definition and symbols: the front end only (parse, and the
 * typechecker when the text parses), then an index of the places in the
 * text that mean something, each a token with what it denotes (Occ): a
 * declaration (function, parameter, binding, const, mesh axis) or a use (a
 * name, a call, an operator or literal whose expression has a type, an axis
 * written in a type). The innermost place under the cursor answers: hover
 * shows the type in canonical form (ty_str) and what every device holds,
 * or a function's signature, a const's value, an axis's size; definition
 * goes to the declaration (Symbol.pos, the FuncDecl, the mesh), in
 * whichever file declares it, as a URI. New kinds of declarations (structs,
 * imports) add an Occ kind and a line to hover_text/definition; a type with
 * parts (a struct) describes them in type_markdown.
 *
 * Positions: the compiler's are 1-based lines and byte columns; LSP's are
 * 0-based lines and characters counted in UTF-16 code units (or bytes when
 * the client chose utf-8): lsp_offset and lsp_position convert, line by
 * line of the text the position belongs to.
 */
#include <ctype.h>

#include "lsp.h"

/* ---- positions and URIs ----------------------------------------------------------- */

/* Length of the UTF-8 sequence starting with byte c (1 for a stray byte). */
static int seq_len(unsigned char c) {
  return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
}

/* UTF-16 code units of the sequence (2 for a 4-byte one: a surrogate pair). */
static int units16(int n) { return n == 4 ? 2 : 1; }

/* The start of 0-based line `line` (the text's end when it has fewer). */
static const char *line_start(const char *text, size_t len, int64_t line) {
  const char *p = text, *end = text + len;
  for (int64_t l = 0; l < line && p < end; p++)
    if (*p == '\n')
      l++;
  return p;
}

size_t lsp_offset(const char *text, size_t len, int64_t line, int64_t ch, LspEncoding enc) {
  const char *p = line_start(text, len, line), *end = text + len;
  for (int64_t u = 0; p < end && *p != '\n' && u < ch;) {
    int n = seq_len((unsigned char)*p);
    if (p + n > end)
      n = (int)(end - p);
    u += enc == ENC_UTF8 ? n : units16(n);
    p += n;
  }
  return (size_t)(p - text);
}

json_t *lsp_position(const char *text, size_t len, int line, int col, LspEncoding enc) {
  const char *p = line_start(text, len, line - 1), *end = text + len;
  int64_t u = 0;
  for (int b = 1; b < col && p < end && *p != '\n';) {
    int n = seq_len((unsigned char)*p);
    if (p + n > end)
      n = (int)(end - p);
    u += enc == ENC_UTF8 ? n : units16(n);
    p += n;
    b += n;
  }
  return json_pack("{s:i, s:I}", "line", line > 0 ? line - 1 : 0, "character", (json_int_t)u);
}

char *lsp_path_uri(const char *path) {
  Str s = {0};
  str_printf(&s, "file://");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if (isalnum(*p) || strchr("-._~/", *p))
      str_putc(&s, (char)*p);
    else
      str_printf(&s, "%%%02X", *p);
  }
  return s.buf;
}

char *lsp_uri_path(const char *uri) {
  if (strncmp(uri, "file://", 7))
    return NULL;
  const char *p = uri + 7;
  if (strncmp(p, "localhost/", 10) == 0)
    p += 9;
  if (*p != '/')
    return NULL;
  char *out = malloc(strlen(p) + 1), *o = out;
  if (!out)
    return NULL;
  for (; *p && *p != '?' && *p != '#'; p++) {
    if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
      char hex[3] = {p[1], p[2], 0};
      *o++ = (char)strtol(hex, NULL, 16);
      p += 2;
    } else {
      *o++ = *p;
    }
  }
  *o = 0;
  return out;
}

/* ---- the document in the compiler ------------------------------------------------- */

typedef struct {
  const LspDoc *doc;
  LspEncoding enc;
  SourceFile src;
  Program *prog;
  Mesh mesh;
  bool typed;
} Ctx;

/* The URI of a compiler file: the document's own, or a file: URI. */
static json_t *uri_of(const Ctx *c, const SourceFile *f) {
  if (!f || f == &c->src || !strcmp(f->name, c->src.name))
    return json_string(c->doc->uri);
  char *u = lsp_path_uri(f->name);
  json_t *j = json_string(u);
  free(u);
  return j;
}

static json_t *pos_json(const Ctx *c, const SourceFile *f, int line, int col) {
  f = f ? f : &c->src;
  return lsp_position(f->text, f->len, line, col, c->enc);
}

static json_t *range_json(const Ctx *c, const SourceFile *f, int line, int col, int end_line, int end_col) {
  return json_pack("{s:o, s:o}", "start", pos_json(c, f, line, col), "end", pos_json(c, f, end_line, end_col));
}

/* ---- diagnostics ----------------------------------------------------------------- */

static const SourceFile *file_named(const Ctx *c, const char *name) {
  return name && !strcmp(name, c->src.name) ? &c->src : NULL;
}

/* A --diagnostics=json place ({file, line, column, endLine, endColumn}) as
 * an LSP range; a whole-file one is the file's start. */
static json_t *place_range(const Ctx *c, json_t *d) {
  json_t *l = json_object_get(d, "line");
  if (!json_is_integer(l))
    return range_json(c, NULL, 1, 1, 1, 1);
  const SourceFile *f = file_named(c, json_string_value(json_object_get(d, "file")));
  return range_json(c, f, (int)json_integer_value(l), (int)json_integer_value(json_object_get(d, "column")),
                    (int)json_integer_value(json_object_get(d, "endLine")),
                    (int)json_integer_value(json_object_get(d, "endColumn")));
}

static json_t *lsp_diagnostic(const Ctx *c, json_t *d, const char *docs) {
  const char *code = json_string_value(json_object_get(d, "code"));
  json_t *out = json_pack("{s:o, s:i, s:s, s:O}", "range", place_range(c, d), "severity", 1, "source", "shdc",
                          "message", json_object_get(d, "message"));
  if (code) {
    json_object_set_new(out, "code", json_string(code));
    if (docs) {
      char id[32];
      size_t k = 0;
      for (; code[k] && k + 1 < sizeof id; k++)
        id[k] = (char)tolower((unsigned char)code[k]);
      id[k] = 0;
      char *u = lsp_path_uri(arena_printf("%s/errors.md", docs));
      json_object_set_new(out, "codeDescription", json_pack("{s:s}", "href", arena_printf("%s#%s", u, id)));
      free(u);
    }
  }
  json_t *related = json_array(), *note;
  size_t i;
  json_array_foreach(json_object_get(d, "notes"), i, note) {
    const char *file = json_string_value(json_object_get(note, "file"));
    const SourceFile *f = file_named(c, file);
    json_t *uri = f || !file ? json_string(c->doc->uri) : NULL;
    if (!uri) {
      char *u = lsp_path_uri(file);
      uri = json_string(u);
      free(u);
    }
    json_array_append_new(related, json_pack("{s:{s:o, s:o}, s:O}", "location", "uri", uri, "range",
                                             place_range(c, note), "message", json_object_get(note, "message")));
  }
  if (json_array_size(related))
    json_object_set_new(out, "relatedInformation", related);
  else
    json_decref(related);
  json_t *fixes = json_array(), *fix;
  json_array_foreach(json_object_get(d, "fixes"), i, fix) {
    json_t *range = range_json(c, NULL, (int)json_integer_value(json_object_get(fix, "line")),
                               (int)json_integer_value(json_object_get(fix, "column")),
                               (int)json_integer_value(json_object_get(fix, "endLine")),
                               (int)json_integer_value(json_object_get(fix, "endColumn")));
    json_array_append_new(fixes, json_pack("{s:O, s:[{s:o, s:O}]}", "title", json_object_get(fix, "description"),
                                           "edits", "range", range, "newText",
                                           json_object_get(fix, "replacement")));
  }
  json_object_set_new(out, "data", json_pack("{s:o}", "fixes", fixes));
  return out;
}

/* Every diagnostic of the document itself (an imported file's own would be
 * published for that file). */
static json_t *diagnostics(Ctx *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return json_array();
  diagout_write(f);
  fclose(f);
  json_error_t err;
  json_t *all = json_loadb(text ? text : "[]", len, 0, &err);
  free(text);
  json_t *out = json_array(), *d;
  size_t i;
  const char *docs = drv_docs_dir();
  json_array_foreach(all, i, d) {
    const char *file = json_string_value(json_object_get(d, "file"));
    if (!file || !strcmp(file, c->src.name))
      json_array_append_new(out, lsp_diagnostic(c, d, docs));
  }
  json_decref(all);
  return out;
}

/* ---- the index: what each place of the text means ------------------------------------ */

typedef enum {
  OC_FUNC,         /* a function's name where it is declared */
  OC_PARAM,        /* a parameter where it is declared */
  OC_BIND,         /* a let, var, loop variable where it is bound */
  OC_CONST,        /* a const where it is declared */
  OC_AXIS_DECL,    /* a mesh axis in the mesh declaration */
  OC_NAME,         /* a name used (Symbol) */
  OC_CALL,         /* the name of a called function or builtin */
  OC_EXPR,         /* an operator or literal: its expression's type */
  OC_AXIS,         /* a mesh axis written in a type */
  OC_CONST_SIZE,   /* a const used as a size in a type */
} OccKind;

typedef struct {
  OccKind kind;
  Pos pos;
  int len;
  const Expr *e;          /* OC_NAME, OC_CALL, OC_EXPR */
  const Symbol *sym;      /* OC_PARAM, OC_BIND, OC_NAME */
  const FuncDecl *fn;     /* OC_FUNC; the function a declaration is in */
  const Stmt *st;         /* OC_BIND */
  int axis;               /* OC_AXIS, OC_AXIS_DECL */
  const ConstDecl *cd;    /* OC_CONST, OC_CONST_SIZE */
} Occ;

typedef struct {
  Ctx *c;
  Vec occs;               /* Occ * */
  const FuncDecl *fn;
  PtrMap sym_kind;        /* Symbol * -> OC_PARAM / OC_BIND */
  PtrMap sym_stmt;        /* Symbol * -> index of its Occ (the binding) */
} Index;

static Occ *add(Index *ix, OccKind k, Pos pos, int len) {
  Occ *o = arena_alloc(sizeof *o);
  o->kind = k;
  o->pos = pos;
  o->len = len > 0 ? len : 1;
  o->fn = ix->fn;
  o->axis = -1;
  vec_push(&ix->occs, o);
  return o;
}

static int axis_index(const Ctx *c, Token t) {
  for (int a = 0; a < c->mesh.naxes; a++)
    if (tok_eq(t, c->mesh.names[a]))
      return a;
  const MeshDecl *m = c->prog ? c->prog->mesh : NULL;
  for (int a = 0; m && a < m->naxes; a++)
    if (m->names[a].len == t.len && !strncmp(m->names[a].start, t.start, (size_t)t.len))
      return a;
  return -1;
}

static const ConstDecl *const_named(const Ctx *c, Token t) {
  for (int i = 0; c->prog && i < c->prog->consts.len; i++) {
    const ConstDecl *cd = c->prog->consts.data[i];
    if (cd->name.len == t.len && !strncmp(cd->name.start, t.start, (size_t)t.len))
      return cd;
  }
  return NULL;
}

static void index_type(Index *ix, const TypeExpr *t) {
  if (!t)
    return;
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

static void index_expr(Index *ix, const Expr *e) {
  if (!e)
    return;
  switch (e->kind) {
  case EX_NAME: {
    Occ *o = add(ix, OC_NAME, e->tok.pos, e->tok.len);
    o->e = e;
    o->sym = e->sym;
    return;
  }
  case EX_CALL:
    if (e->callee && e->callee->kind == EX_NAME)
      add(ix, OC_CALL, e->callee->tok.pos, e->callee->tok.len)->e = e;
    else
      index_expr(ix, e->callee);
    for (int i = 0; i < e->args.len; i++)
      index_expr(ix, e->args.data[i]);
    return;
  case EX_KWARG:
    index_expr(ix, e->lhs);
    return;
  case EX_TUPLE:
  case EX_LIST:
    for (int i = 0; i < e->args.len; i++)
      index_expr(ix, e->args.data[i]);
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
    for (int i = 0; i < e->args.len; i++)
      index_expr(ix, e->args.data[i]);
    return;
  case EX_SLICE:
    index_expr(ix, e->lhs);
    index_expr(ix, e->rhs);
    return;
  default:   /* literals, unary and binary operators */
    if (e->tok.len)
      add(ix, OC_EXPR, e->tok.pos, e->tok.len)->e = e;
    index_expr(ix, e->lhs);
    index_expr(ix, e->rhs);
    return;
  }
}

static void bind(Index *ix, OccKind k, Token name, const Symbol *sym, const Stmt *st) {
  Occ *o = add(ix, k, name.pos, name.len);
  o->sym = sym;
  o->st = st;
  if (sym) {
    ptrmap_put(&ix->sym_kind, sym, k);
    ptrmap_put(&ix->sym_stmt, sym, ix->occs.len - 1);
  }
}

static void index_block(Index *ix, const Block *b);

static void index_stmt(Index *ix, const Stmt *s) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR:
    index_expr(ix, s->expr);
    index_type(ix, s->type);
    bind(ix, OC_BIND, s->name, s->sym, s);
    return;
  case ST_LET_TUPLE:
    index_expr(ix, s->expr);
    for (int i = 0; i < s->names.len; i++)
      bind(ix, OC_BIND, *(Token *)s->names.data[i], i < s->syms.len ? s->syms.data[i] : NULL, s);
    return;
  case ST_ASSIGN:
    index_expr(ix, s->expr);
    if (s->sym)
      add(ix, OC_NAME, s->name.pos, s->name.len)->sym = s->sym;
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

static void index_block(Index *ix, const Block *b) {
  for (int i = 0; b && i < b->stmts.len; i++)
    if (b->stmts.data[i])
      index_stmt(ix, b->stmts.data[i]);
}

static void build_index(Index *ix, Ctx *c) {
  memset(ix, 0, sizeof *ix);
  ix->c = c;
  const Program *p = c->prog;
  if (!p)
    return;
  if (p->mesh)
    for (int a = 0; a < p->mesh->naxes; a++) {
      add(ix, OC_AXIS_DECL, p->mesh->names[a].pos, p->mesh->names[a].len)->axis = a;
      index_expr(ix, p->mesh->sizes[a]);
    }
  for (int i = 0; i < p->consts.len; i++) {
    const ConstDecl *cd = p->consts.data[i];
    add(ix, OC_CONST, cd->name.pos, cd->name.len)->cd = cd;
    index_expr(ix, cd->value);
  }
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    ix->fn = f;
    add(ix, OC_FUNC, f->name.pos, f->name.len);
    for (int k = 0; k < f->params.len; k++) {
      const Param *pa = f->params.data[k];
      bind(ix, OC_PARAM, pa->name, pa->sym, NULL);
      index_type(ix, pa->type);
    }
    for (int k = 0; k < f->nresults; k++)
      index_type(ix, f->results[k]);
    index_block(ix, f->body);
  }
  ix->fn = NULL;
}

/* The innermost place at the 1-based line and byte column. */
static const Occ *occ_at(const Index *ix, int line, int col) {
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

/* ---- hover --------------------------------------------------------------------- */

/* A type for a person: its canonical form and, for an array, what one
 * device holds (inside a manual function the types are already the
 * per-device ones). The place to describe a type's parts (a struct's
 * fields) once the language has them. */
static void type_markdown(Str *s, const Ctx *c, const Type *t, const FuncDecl *fn) {
  if (!t || t->kind == TY_ERROR)
    return;
  if (fn && fn->manual) {
    str_printf(s, "\n\nInside `manual(");
    for (int k = 0; k < fn->nmanual; k++)
      str_printf(s, "%s%.*s", k ? ", " : "", fn->manual_axes[k].len, fn->manual_axes[k].start);
    str_printf(s, ") fn %.*s`: the type one device sees", fn->name.len, fn->name.start);
    return;
  }
  if (t->kind == TY_ARRAY && t->rank > 0) {
    bool sharded = ty_dim_axes(t) != 0;
    str_printf(s, "\n\n%s: every device holds `%s` (%lld bytes)%s",
               sharded ? "Sharded" : "Replicated", ty_local_str(&c->mesh, t),
               (long long)(ty_local_count(&c->mesh, t) * (int64_t)ty_dtype_size(t->dtype)),
               t->U ? "; unreduced (`U`): each device holds a partial sum" : "");
  } else if (t->kind == TY_ARRAY && t->U) {
    str_printf(s, "\n\nUnreduced (`U`): each device holds a partial sum");
  }
}

static const char *type_text(const Ctx *c, const Type *t) {
  return t && t->kind != TY_ERROR ? ty_str(&c->mesh, t) : "(not typed: see the errors)";
}

static void signature(Str *s, const Ctx *c, const FuncDecl *f) {
  str_printf(s, "```shd\n");
  if (f->manual) {
    str_printf(s, "manual(");
    for (int k = 0; k < f->nmanual; k++)
      str_printf(s, "%s%.*s", k ? ", " : "", f->manual_axes[k].len, f->manual_axes[k].start);
    str_printf(s, ") ");
  }
  str_printf(s, "fn %.*s(", f->name.len, f->name.start);
  for (int k = 0; k < f->params.len; k++) {
    const Param *p = f->params.data[k];
    str_printf(s, "%s%.*s: %s", k ? ", " : "", p->name.len, p->name.start,
               f->param_types ? type_text(c, &f->param_types[k]) : "?");
  }
  str_printf(s, ")");
  if (f->nresults == 1 && !f->result_tuple)
    str_printf(s, " -> %s", f->result_types ? type_text(c, &f->result_types[0]) : "?");
  else if (f->nresults) {
    str_printf(s, " -> (");
    for (int k = 0; k < f->nresults; k++)
      str_printf(s, "%s%s", k ? ", " : "", f->result_types ? type_text(c, &f->result_types[k]) : "?");
    str_printf(s, ")");
  }
  str_printf(s, "\n```");
}

static const FuncDecl *func_named(const Ctx *c, const char *name) {
  for (int i = 0; c->prog && name && i < c->prog->funcs.len; i++) {
    const FuncDecl *f = c->prog->funcs.data[i];
    if (tok_eq(f->name, name))
      return f;
  }
  return NULL;
}

static void axis_markdown(Str *s, const Ctx *c, int a) {
  if (a < 0 || a >= c->mesh.naxes) {
    str_printf(s, "mesh axis (not in the mesh)");
    return;
  }
  int total = 1;
  for (int k = 0; k < c->mesh.naxes; k++)
    total *= c->mesh.sizes[k];
  str_printf(s, "```shd\n%s: %d\n```\nmesh axis %d of `mesh {", c->mesh.names[a], c->mesh.sizes[a], a);
  for (int k = 0; k < c->mesh.naxes; k++)
    str_printf(s, "%s%s: %d", k ? ", " : "", c->mesh.names[k], c->mesh.sizes[k]);
  str_printf(s, "}` (%d devices)", total);
}

static void const_markdown(Str *s, const ConstDecl *cd) {
  const Symbol *sym = cd->sym;
  if (!sym)
    str_printf(s, "```shd\nconst %.*s\n```", cd->name.len, cd->name.start);
  else if (sym->is_float_const)
    str_printf(s, "```shd\nconst %s = %.17g\n```", sym->name, sym->fval);
  else
    str_printf(s, "```shd\nconst %s = %lld\n```", sym->name, (long long)sym->ival);
}

static void symbol_markdown(Str *s, const Ctx *c, const Index *ix, const Symbol *sym, const FuncDecl *fn) {
  if (sym->kind == SYM_FUNC && sym->fn) {
    signature(s, c, sym->fn);
    return;
  }
  if (sym->kind == SYM_CONST) {
    for (int i = 0; c->prog && i < c->prog->consts.len; i++)
      if (((const ConstDecl *)c->prog->consts.data[i])->sym == sym)
        const_markdown(s, c->prog->consts.data[i]);
    return;
  }
  if (sym->kind == SYM_AXIS) {
    axis_markdown(s, c, sym->axis);
    return;
  }
  int k = ptrmap_get(&ix->sym_kind, sym);
  const char *what = k == OC_PARAM ? "parameter" : sym->mutable_ ? "var" : "let";
  str_printf(s, "```shd\n%s %s: %s\n```", k == OC_PARAM ? "param" : what, sym->name, type_text(c, &sym->type));
  type_markdown(s, c, &sym->type, fn);
}

static json_t *hover(Ctx *c, int line, int col) {
  Index ix;
  build_index(&ix, c);
  const Occ *o = occ_at(&ix, line, col);
  if (!o)
    return json_null();
  Str s = {0};
  switch (o->kind) {
  case OC_FUNC:
    signature(&s, c, o->fn);
    break;
  case OC_PARAM:
  case OC_BIND:
  case OC_NAME:
    if (o->sym)
      symbol_markdown(&s, c, &ix, o->sym, o->fn);
    else if (o->e && o->e->kind == EX_NAME && func_named(c, o->e->str))
      signature(&s, c, func_named(c, o->e->str));
    break;
  case OC_CONST:
  case OC_CONST_SIZE:
    const_markdown(&s, o->cd);
    break;
  case OC_AXIS:
  case OC_AXIS_DECL:
    axis_markdown(&s, c, o->axis);
    break;
  case OC_CALL: {
    const Expr *e = o->e;
    if (e->fn) {
      signature(&s, c, e->fn);
      str_printf(&s, "\n\nThis call gives `%s`", type_text(c, e->ty));
    } else {
      str_printf(&s, "```shd\n%.*s(...) -> %s\n```\n%s", e->callee->tok.len, e->callee->tok.start,
                 type_text(c, e->ty), e->bi ? "builtin (docs/language.md)" : "");
    }
    type_markdown(&s, c, e->ty, o->fn);
    break;
  }
  case OC_EXPR:
    if (!o->e->ty)
      break;
    str_printf(&s, "```shd\n%s\n```", type_text(c, o->e->ty));
    type_markdown(&s, c, o->e->ty, o->fn);
    break;
  }
  if (!s.len)
    return json_null();
  json_t *h = json_pack("{s:{s:s, s:s}, s:o}", "contents", "kind", "markdown", "value", str_cstr(&s), "range",
                        range_json(c, NULL, o->pos.line, o->pos.col, o->pos.line, o->pos.col + o->len));
  free(s.buf);
  return h;
}

/* ---- definition ------------------------------------------------------------------ */

static json_t *location(const Ctx *c, Pos p, int len) {
  if (!p.file || p.line <= 0)
    return json_null();
  return json_pack("{s:o, s:o}", "uri", uri_of(c, p.file), "range",
                   range_json(c, p.file, p.line, p.col, p.line, p.col + len));
}

static json_t *func_location(const Ctx *c, const FuncDecl *f) { return location(c, f->name.pos, f->name.len); }

static json_t *axis_location(const Ctx *c, int a) {
  const MeshDecl *m = c->prog ? c->prog->mesh : NULL;
  if (!m || a < 0 || a >= m->naxes)
    return json_null();
  return location(c, m->names[a].pos, m->names[a].len);
}

static json_t *symbol_location(const Ctx *c, const Symbol *sym) {
  if (sym->kind == SYM_FUNC && sym->fn)
    return func_location(c, sym->fn);
  if (sym->kind == SYM_AXIS)
    return axis_location(c, sym->axis);
  return location(c, sym->pos, (int)strlen(sym->name));
}

static json_t *definition(Ctx *c, int line, int col) {
  Index ix;
  build_index(&ix, c);
  const Occ *o = occ_at(&ix, line, col);
  if (!o)
    return json_null();
  switch (o->kind) {
  case OC_FUNC:
    return func_location(c, o->fn);
  case OC_PARAM:
  case OC_BIND:
  case OC_NAME:
    if (o->sym)
      return symbol_location(c, o->sym);
    if (o->e && o->e->kind == EX_NAME && func_named(c, o->e->str))
      return func_location(c, func_named(c, o->e->str));
    return json_null();
  case OC_CONST:
  case OC_CONST_SIZE:
    return location(c, o->cd->name.pos, o->cd->name.len);
  case OC_AXIS:
  case OC_AXIS_DECL:
    return axis_location(c, o->axis);
  case OC_CALL:
    if (o->e->fn)
      return func_location(c, o->e->fn);
    if (func_named(c, o->e->callee->str))
      return func_location(c, func_named(c, o->e->callee->str));
    return json_null();
  case OC_EXPR:
    return json_null();
  }
  return json_null();
}

/* ---- document symbols --------------------------------------------------------------- */

enum { SK_NAMESPACE = 3, SK_FUNCTION = 12, SK_VARIABLE = 13, SK_CONSTANT = 14 };

/* The 1-based line and column just past the } matching the { at `open`
 * (skipping strings and comments), or the text's end. */
static void block_end(const SourceFile *f, Pos open, int *line, int *col) {
  size_t len;
  const char *p = diag_line_text(f, open.line, &len) + (open.col - 1);
  int l = open.line, depth = 0;
  const char *ls = p - (open.col - 1), *end = f->text + f->len;
  for (; p < end; p++) {
    if (*p == '\n') {
      l++;
      ls = p + 1;
    } else if (*p == '"') {
      for (p++; p < end && *p != '"' && *p != '\n'; p++)
        if (*p == '\\' && p + 1 < end)
          p++;
    } else if (*p == '/' && p + 1 < end && p[1] == '/') {
      while (p + 1 < end && p[1] != '\n')
        p++;
    } else if (*p == '{') {
      depth++;
    } else if (*p == '}' && --depth == 0) {
      *line = l;
      *col = (int)(p - ls) + 2;
      return;
    }
  }
  *line = l;
  *col = (int)(p - ls) + 1;
}

/* Where `fn NAME` begins: the keyword before the name on its line. */
static Pos fn_keyword(const Ctx *c, const FuncDecl *f) {
  size_t len;
  const char *l = diag_line_text(&c->src, f->name.pos.line, &len);
  Pos p = f->name.pos;
  for (int k = p.col - 2; k >= 1; k--)
    if (!strncmp(l + k - 1, "fn", 2) && (k == 1 || l[k - 2] == ' ' || l[k - 2] == '\t')) {
      p.col = k;
      break;
    }
  return p;
}

static json_t *doc_symbol(const Ctx *c, const char *name, const char *detail, int kind, Pos from, int end_line,
                          int end_col, Pos sel, int sel_len) {
  json_t *s = json_pack("{s:s, s:i, s:o, s:o}", "name", name, "kind", kind, "range",
                        range_json(c, NULL, from.line, from.col, end_line, end_col), "selectionRange",
                        range_json(c, NULL, sel.line, sel.col, sel.line, sel.col + sel_len));
  if (detail)
    json_object_set_new(s, "detail", json_string(detail));
  return s;
}

static void binding_symbols(const Ctx *c, const Block *b, json_t *out) {
  for (int i = 0; b && i < b->stmts.len; i++) {
    const Stmt *st = b->stmts.data[i];
    if (!st)
      continue;
    if (st->kind == ST_LET || st->kind == ST_VAR) {
      char *name = tok_str(st->name);
      json_array_append_new(out, doc_symbol(c, name, st->sym ? type_text(c, &st->sym->type) : NULL, SK_VARIABLE,
                                            st->name.pos, st->name.pos.line, st->name.pos.col + st->name.len,
                                            st->name.pos, st->name.len));
    } else if (st->kind == ST_LET_TUPLE) {
      for (int k = 0; k < st->names.len; k++) {
        Token t = *(Token *)st->names.data[k];
        const Symbol *sym = k < st->syms.len ? st->syms.data[k] : NULL;
        json_array_append_new(out, doc_symbol(c, tok_str(t), sym ? type_text(c, &sym->type) : NULL, SK_VARIABLE,
                                              t.pos, t.pos.line, t.pos.col + t.len, t.pos, t.len));
      }
    } else if (st->kind == ST_FOR) {
      binding_symbols(c, st->body, out);
    } else if (st->kind == ST_IF) {
      binding_symbols(c, st->body, out);
      binding_symbols(c, st->els, out);
    }
  }
}

static json_t *symbols(Ctx *c) {
  json_t *out = json_array();
  const Program *p = c->prog;
  if (!p)
    return out;
  if (p->mesh) {
    Str d = {0};
    for (int a = 0; a < p->mesh->naxes; a++)
      str_printf(&d, "%s%.*s", a ? ", " : "", p->mesh->names[a].len, p->mesh->names[a].start);
    int el, ec;
    block_end(&c->src, p->mesh->pos, &el, &ec);
    json_array_append_new(out, doc_symbol(c, "mesh", d.len ? str_cstr(&d) : "", SK_NAMESPACE, p->mesh->pos, el, ec,
                                          p->mesh->pos, 4));
    free(d.buf);
  }
  for (int i = 0; i < p->consts.len; i++) {
    const ConstDecl *cd = p->consts.data[i];
    Str d = {0};
    const_markdown(&d, cd);
    const char *v = strstr(str_cstr(&d), "= ");
    char *detail = v ? arena_strndup(v + 2, strcspn(v + 2, "\n")) : NULL;
    json_array_append_new(out, doc_symbol(c, tok_str(cd->name), detail, SK_CONSTANT, cd->name.pos, cd->name.pos.line,
                                          cd->name.pos.col + cd->name.len, cd->name.pos, cd->name.len));
    free(d.buf);
  }
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    Str sig = {0};
    signature(&sig, c, f);
    char *detail = arena_strndup(sig.buf + 7, sig.len - 11);   /* without the ```shd fence */
    free(sig.buf);
    int el = f->pos.line, ec = f->pos.col + 1;
    if (f->body)
      block_end(&c->src, f->body->pos, &el, &ec);
    json_t *fs = doc_symbol(c, tok_str(f->name), detail, SK_FUNCTION, f->manual ? f->manual_pos : fn_keyword(c, f),
                            el, ec, f->name.pos, f->name.len);
    json_t *children = json_array();
    for (int k = 0; k < f->params.len; k++) {
      const Param *pa = f->params.data[k];
      json_array_append_new(children, doc_symbol(c, tok_str(pa->name), pa->sym ? type_text(c, &pa->sym->type) : NULL,
                                                 SK_VARIABLE, pa->name.pos, pa->name.pos.line,
                                                 pa->name.pos.col + pa->name.len, pa->name.pos, pa->name.len));
    }
    binding_symbols(c, f->body, children);
    json_object_set_new(fs, "children", children);
    json_array_append_new(out, fs);
  }
  return out;
}

/* ---- the answer --------------------------------------------------------------------- */

json_t *lsp_answer(const LspDoc *doc, LspQuery q, int64_t line, int64_t ch, LspEncoding enc) {
  Ctx c;
  memset(&c, 0, sizeof c);
  c.doc = doc;
  c.enc = enc;
  c.src.name = doc->path;
  c.src.text = doc->text;
  c.src.len = doc->len;
  diagout_start(DIAG_JSON);   /* recorded, never printed */
  diag_set_max_errors(0);
  c.prog = drv_analyze(&c.src, &c.mesh, q == Q_DIAGNOSTICS, &c.typed);
  if (q == Q_DIAGNOSTICS)
    return diagnostics(&c);
  if (q == Q_SYMBOLS)
    return symbols(&c);
  /* The 1-based line and byte column of the query's position. */
  size_t off = lsp_offset(doc->text, doc->len, line, ch, enc);
  const char *ls = line_start(doc->text, doc->len, line);
  int bline = (int)line + 1, bcol = (int)(doc->text + off - ls) + 1;
  return q == Q_HOVER ? hover(&c, bline, bcol) : definition(&c, bline, bcol);
}
