/* lsp_query.c: the language server's answers, computed in a child process
 * (lsp.c) from the compiler's own analysis of one document: positions and
 * URIs, diagnostics, definition and the document's symbols; the index of
 * what each place means is lsp_index.c's, the hover text lsp_hover.c's.
 *
 * The document is analysed as `check` analyses a file (drv_analyze), with
 * its imports looked up relative to its own path, then in the server's -I
 * directories, then in the installed library (std/): an imported file is
 * read from the disk, as check reads it.
 *
 * Diagnostics: the document runs through check's stages with diagnostics
 * recorded as for --diagnostics=json (diag_json.c resolves the fixes); each
 * becomes an LSP Diagnostic: its range, code (with a link to its section of
 * the docs' errors.md), message, notes as related information, and its
 * fixes in data.fixes (lsp.c offers them as quick-fix code actions). An
 * error in another file (an imported file, or a generic function's body
 * in one, instantiated by this document) is shown where this document
 * causes it: at a note in the document (the call of the instance), else at
 * the document's import that leads to that file; the message says where
 * the error is, the related information points there, and it has no fix
 * (the edits would be another file's).
 *
 * Definition goes to the declaration (Symbol.pos, the FuncDecl, the
 * StructDecl and its fields, the mesh, a generic's type parameters, an
 * imported file) in whichever file declares it, as a URI. Symbols are the
 * document's own declarations: imports, the mesh, consts, structs with
 * their fields, functions with their parameters and bindings.
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

json_t *lsp_position(const char *text, size_t len, int line, int col, LspEncoding enc, int report_line) {
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
  return json_pack("{s:i, s:I}", "line", report_line > 0 ? report_line - 1 : 0, "character", (json_int_t)u);
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
  char *out = mem_alloc(strlen(p) + 1), *o = out;
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

json_t *lsp_uri_of(const LspCtx *c, const SourceFile *f) {
  if (!f || f == &c->src || !strcmp(f->name, c->src.name))
    return json_string(c->doc->uri);
  char *u = lsp_path_uri(f->name);
  json_t *j = json_string(u);
  free(u);
  return j;
}

static json_t *pos_json(const LspCtx *c, const SourceFile *f, int line, int col) {
  f = f ? f : &c->src;
  if (c->line_starts && line >= 1 && line <= c->nlines && (f == &c->src || !strcmp(f->name, c->src.name))) {
    size_t at = c->line_starts[line - 1];   /* the same conversion, from the line's start */
    return lsp_position(c->src.text + at, c->src.len - at, 1, col, c->enc, line);
  }
  return lsp_position(f->text, f->len, line, col, c->enc, line);
}

/* The offset of each line of the document, for pos_json. */
static void index_lines(LspCtx *c) {
  int64_t n = 1;
  for (size_t i = 0; i < c->src.len; i++)
    n += c->src.text[i] == '\n';
  c->line_starts = mem_calloc((size_t)n, sizeof *c->line_starts);
  c->nlines = n;
  int64_t l = 1;
  for (size_t i = 0; i < c->src.len; i++)
    if (c->src.text[i] == '\n')
      c->line_starts[l++] = i + 1;
}

json_t *lsp_range(const LspCtx *c, const SourceFile *f, int line, int col, int end_line, int end_col) {
  return json_pack("{s:o, s:o}", "start", pos_json(c, f, line, col), "end", pos_json(c, f, end_line, end_col));
}

json_t *lsp_location(const LspCtx *c, Pos p, int len) {
  if (!p.file || p.line <= 0)
    return json_null();
  return json_pack("{s:o, s:o}", "uri", lsp_uri_of(c, p.file), "range",
                   lsp_range(c, p.file, p.line, p.col, p.line, p.col + len));
}

int lsp_string_len(Pos p) {
  if (!p.file || p.line <= 0)
    return 1;
  size_t len;
  const char *l = diag_line_text(p.file, p.line, &len);
  size_t k = (size_t)p.col - 1;
  if (k >= len || l[k] != '"')
    return 1;
  for (k++; k < len && l[k] != '"'; k++)
    if (l[k] == '\\' && k + 1 < len)
      k++;
  return (int)(k + 1 - ((size_t)p.col - 1) - (k == len));
}

/* ---- diagnostics ----------------------------------------------------------------- */

/* The compiler's file of this name: the document, or a file it imports
 * (found through a declaration or an import in it); NULL when not known. */
static const SourceFile *file_named(const LspCtx *c, const char *name) {
  if (!name || !strcmp(name, c->src.name))
    return &c->src;
  const Program *p = c->prog;
  const Vec *decls[3] = {p ? &p->funcs : NULL, p ? &p->structs : NULL, p ? &p->imports : NULL};
  for (int v = 0; v < 3 && p; v++)
    for (int i = 0; i < decls[v]->len; i++) {
      const void *d = decls[v]->data[i];
      const SourceFile *f = v == 0 ? ((const FuncDecl *)d)->name.pos.file
                            : v == 1 ? ((const StructDecl *)d)->name.pos.file : ((const ImportDecl *)d)->pos.file;
      if (f && !strcmp(f->name, name))
        return f;
    }
  return NULL;
}

/* A --diagnostics=json place ({file, line, column, endLine, endColumn},
 * or its range: the whole expression, `a @ b` rather than `@`) as an LSP
 * range; a whole-file one is the file's start; one in a file whose text is
 * not at hand counts bytes. */
static json_t *place_range(const LspCtx *c, json_t *d) {
  json_t *l = json_object_get(d, "line"), *r = json_object_get(d, "range");
  if (!json_is_integer(l))
    return lsp_range(c, NULL, 1, 1, 1, 1);
  json_t *at = json_is_object(r) && json_is_integer(json_object_get(r, "line")) ? r : d;
  int line = (int)json_integer_value(json_object_get(at, "line"));
  int col = (int)json_integer_value(json_object_get(at, "column"));
  int el = (int)json_integer_value(json_object_get(at, "endLine"));
  int ec = (int)json_integer_value(json_object_get(at, "endColumn"));
  const SourceFile *f = file_named(c, json_string_value(json_object_get(d, "file")));
  if (f)
    return lsp_range(c, f, line, col, el, ec);
  return json_pack("{s:{s:i, s:i}, s:{s:i, s:i}}", "start", "line", line > 0 ? line - 1 : 0, "character",
                   col > 0 ? col - 1 : 0, "end", "line", el > 0 ? el - 1 : 0, "character", ec > 0 ? ec - 1 : 0);
}

static json_t *file_uri(const LspCtx *c, const char *file) {
  if (!file || !strcmp(file, c->src.name))
    return json_string(c->doc->uri);
  char *u = lsp_path_uri(file);
  json_t *j = json_string(u);
  free(u);
  return j;
}

static bool in_doc(const LspCtx *c, json_t *d) {
  const char *file = json_string_value(json_object_get(d, "file"));
  return !file || !strcmp(file, c->src.name);
}

/* The document's import through which the file `name` was read: its own
 * import of it, or of the file that imported it, and so on. */
static const ImportDecl *import_leading_to(const LspCtx *c, const char *name) {
  const Program *p = c->prog;
  for (int hops = 0; p && name && hops <= p->imports.len; hops++) {
    const ImportDecl *by = NULL;
    for (int i = 0; i < p->imports.len && !by; i++) {
      const ImportDecl *d = p->imports.data[i];
      if (d->real && !strcmp(d->real, name))
        by = d;
    }
    if (!by || !by->pos.file)
      return NULL;
    if (by->pos.file == &c->src)
      return by;
    name = by->pos.file->name;
  }
  return NULL;
}

static json_t *lsp_diagnostic(const LspCtx *c, json_t *d, const char *docs, json_t *range, const char *prefix) {
  const char *code = json_string_value(json_object_get(d, "code"));
  const char *msg = json_string_value(json_object_get(d, "message"));
  const char *sev = json_string_value(json_object_get(d, "severity"));
  int severity = sev && !strcmp(sev, "warning") ? 2 : 1;   /* LSP's DiagnosticSeverity: Error 1, Warning 2 */
  json_t *out = json_pack("{s:o, s:i, s:s, s:s}", "range", range, "severity", severity, "source", "shdc", "message",
                          prefix ? arena_printf("%s%s", prefix, msg ? msg : "") : msg ? msg : "");
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
  if (prefix)   /* the error itself, in its own file */
    json_array_append_new(related, json_pack("{s:{s:o, s:o}, s:s}", "location", "uri",
                                             file_uri(c, json_string_value(json_object_get(d, "file"))), "range",
                                             place_range(c, d), "message", msg ? msg : ""));
  json_array_foreach(json_object_get(d, "notes"), i, note) {
    json_array_append_new(related, json_pack("{s:{s:o, s:o}, s:O}", "location", "uri",
                                             file_uri(c, json_string_value(json_object_get(note, "file"))), "range",
                                             place_range(c, note), "message", json_object_get(note, "message")));
  }
  if (json_array_size(related))
    json_object_set_new(out, "relatedInformation", related);
  else
    json_decref(related);
  json_t *fixes = json_array(), *fix;
  json_array_foreach(prefix ? NULL : json_object_get(d, "fixes"), i, fix) {
    json_t *r = lsp_range(c, NULL, (int)json_integer_value(json_object_get(fix, "line")),
                          (int)json_integer_value(json_object_get(fix, "column")),
                          (int)json_integer_value(json_object_get(fix, "endLine")),
                          (int)json_integer_value(json_object_get(fix, "endColumn")));
    json_array_append_new(fixes, json_pack("{s:O, s:[{s:o, s:O}]}", "title", json_object_get(fix, "description"),
                                           "edits", "range", r, "newText", json_object_get(fix, "replacement")));
  }
  json_object_set_new(out, "data", json_pack("{s:o}", "fixes", fixes));
  return out;
}

/* An error in another file, where the document causes it (NULL: nowhere). */
static json_t *elsewhere(const LspCtx *c, json_t *d, const char *docs) {
  const char *file = json_string_value(json_object_get(d, "file"));
  const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  int line = (int)json_integer_value(json_object_get(d, "line"));
  json_t *note;
  size_t i;
  json_array_foreach(json_object_get(d, "notes"), i, note) {
    if (in_doc(c, note) && json_is_integer(json_object_get(note, "line")))
      return lsp_diagnostic(c, d, docs, place_range(c, note), arena_printf("%s:%d: ", base, line));
  }
  const ImportDecl *imp = import_leading_to(c, file);
  if (!imp)
    return NULL;
  json_t *range = lsp_range(c, NULL, imp->pos.line, imp->pos.col, imp->pos.line,
                            imp->pos.col + lsp_string_len(imp->pos));
  return lsp_diagnostic(c, d, docs, range, arena_printf("in the imported file %s, line %d: ", base, line));
}

/* Every diagnostic of the document, and those of other files it causes. */
static json_t *diagnostics(LspCtx *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = mem_open_stream(&text, &len);
  diagout_write(f);
  mem_close_stream(f);
  json_error_t err;
  json_t *all = json_loadb(text ? text : "[]", len, 0, &err);
  free(text);
  json_t *out = json_array(), *d;
  size_t i;
  const char *docs = drv_docs_dir();
  json_array_foreach(all, i, d) {
    json_t *one = in_doc(c, d) ? lsp_diagnostic(c, d, docs, place_range(c, d), NULL) : elsewhere(c, d, docs);
    if (one)
      json_array_append_new(out, one);
  }
  json_decref(all);
  return out;
}

/* ---- definition ------------------------------------------------------------------ */

static json_t *func_location(const LspCtx *c, const FuncDecl *f) {
  f = lsp_decl_of(f);
  return lsp_location(c, f->name.pos, f->name.len);
}

static json_t *axis_location(const LspCtx *c, int a) {
  const MeshDecl *m = c->prog ? c->prog->mesh : NULL;
  if (!m || a < 0 || a >= m->naxes)
    return json_null();
  return lsp_location(c, m->names[a].pos, m->names[a].len);
}

static json_t *struct_location(const LspCtx *c, const StructDecl *sd, int field) {
  if (!sd)
    return json_null();
  if (field >= 0 && field < sd->fields.len) {
    const Param *p = sd->fields.data[field];
    return lsp_location(c, p->name.pos, p->name.len);
  }
  return lsp_location(c, sd->name.pos, sd->name.len);
}

static json_t *symbol_location(const LspCtx *c, const Symbol *sym) {
  if (sym->kind == SYM_FUNC && sym->fn)
    return func_location(c, sym->fn);
  if (sym->kind == SYM_AXIS)
    return axis_location(c, sym->axis);
  if (sym->kind == SYM_STRUCT)
    return struct_location(c, sym->sdecl, -1);
  return lsp_location(c, sym->pos, (int)strlen(sym->name));
}

static json_t *definition(LspCtx *c, const Occ *o) {
  switch (o->kind) {
  case OC_FUNC:
    return func_location(c, o->fn);
  case OC_PARAM:
  case OC_BIND:
  case OC_NAME:
    if (o->sym)
      return symbol_location(c, o->sym);
    if (o->e && o->e->kind == EX_NAME && lsp_func_named(c, o->e->tok.start, o->e->tok.len))
      return func_location(c, lsp_func_named(c, o->e->tok.start, o->e->tok.len));
    return json_null();
  case OC_CONST:
  case OC_CONST_SIZE:
    return lsp_location(c, o->cd->name.pos, o->cd->name.len);
  case OC_AXIS:
  case OC_AXIS_DECL:
    return axis_location(c, o->axis);
  case OC_CALL:
    if (o->e->fn)
      return func_location(c, o->e->fn);
    if (!o->e->bi && lsp_func_named(c, o->e->callee->tok.start, o->e->callee->tok.len))
      return func_location(c, lsp_func_named(c, o->e->callee->tok.start, o->e->callee->tok.len));
    return json_null();
  case OC_STRUCT_DECL:
  case OC_STRUCT:
    return struct_location(c, o->sd, -1);
  case OC_FIELD_DECL:
  case OC_FIELD:
    return o->field >= 0 ? struct_location(c, o->sd, o->field) : json_null();
  case OC_TPARAM_DECL:
  case OC_TPARAM: {
    const FuncDecl *g = lsp_decl_of(o->fn);
    if (!g || o->tparam < 0 || o->tparam >= g->ntparams)
      return json_null();
    return lsp_location(c, g->tparams[o->tparam].pos, g->tparams[o->tparam].len);
  }
  case OC_IMPORT: {
    if (!o->imp->real)
      return json_null();
    char *u = lsp_path_uri(o->imp->real);
    json_t *loc = json_pack("{s:s, s:{s:{s:i, s:i}, s:{s:i, s:i}}}", "uri", u, "range", "start", "line", 0,
                            "character", 0, "end", "line", 0, "character", 0);
    free(u);
    return loc;
  }
  case OC_EXPR:
    return json_null();
  }
  return json_null();
}

/* ---- document symbols --------------------------------------------------------------- */

enum { SK_MODULE = 2, SK_NAMESPACE = 3, SK_FIELD = 8, SK_FUNCTION = 12, SK_VARIABLE = 13, SK_CONSTANT = 14,
       SK_STRUCT = 23, SK_TYPE_PARAMETER = 26 };

/* The 1-based line and column just past the } matching the first { at or
 * after `from` (skipping strings and comments), or the text's end. */
static void block_end(const SourceFile *f, Pos from, int *line, int *col) {
  size_t len;
  const char *p = diag_line_text(f, from.line, &len) + (from.col - 1);
  int l = from.line, depth = 0;
  const char *ls = p - (from.col - 1), *end = f->text + f->len;
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
    } else if (*p == '}' && depth > 0 && --depth == 0) {
      *line = l;
      *col = (int)(p - ls) + 2;
      return;
    }
  }
  *line = l;
  *col = (int)(p - ls) + 1;
}

/* Where `KEYWORD NAME` begins: the keyword before the name on its line. */
static Pos keyword_before(const LspCtx *c, Pos name, const char *kw) {
  size_t len, n = strlen(kw);
  const char *l = diag_line_text(&c->src, name.line, &len);
  Pos p = name;
  for (int k = name.col - 1 - (int)n; k >= 1; k--)
    if (!strncmp(l + k - 1, kw, n) && (k == 1 || l[k - 2] == ' ' || l[k - 2] == '\t')) {
      p.col = k;
      break;
    }
  return p;
}

static json_t *doc_symbol(const LspCtx *c, const char *name, const char *detail, int kind, Pos from, int end_line,
                          int end_col, Pos sel, int sel_len) {
  json_t *s = json_pack("{s:s, s:i, s:o, s:o}", "name", name, "kind", kind, "range",
                        lsp_range(c, NULL, from.line, from.col, end_line, end_col), "selectionRange",
                        lsp_range(c, NULL, sel.line, sel.col, sel.line, sel.col + sel_len));
  if (detail)
    json_object_set_new(s, "detail", json_string(detail));
  return s;
}

/* A symbol whose range is its name. */
static json_t *name_symbol(const LspCtx *c, Token t, const char *detail, int kind) {
  return doc_symbol(c, tok_str(t), detail, kind, t.pos, t.pos.line, t.pos.col + t.len, t.pos, t.len);
}

static void binding_symbols(const LspCtx *c, const Block *b, json_t *out) {
  for (int i = 0; b && i < b->stmts.len; i++) {
    const Stmt *st = b->stmts.data[i];
    if (!st)
      continue;
    if (st->kind == ST_LET || st->kind == ST_VAR) {
      json_array_append_new(out, name_symbol(c, st->name, st->sym ? lsp_type_text(c, &st->sym->type) : NULL,
                                             SK_VARIABLE));
    } else if (st->kind == ST_LET_TUPLE && st->tuple_elem >= 0) {   /* not (a, b) = e's hidden names */
      for (int k = 0; k < st->names.len; k++) {
        const Symbol *sym = k < st->syms.len ? st->syms.data[k] : NULL;
        json_array_append_new(out, name_symbol(c, *(Token *)st->names.data[k],
                                               sym ? lsp_type_text(c, &sym->type) : NULL, SK_VARIABLE));
      }
    } else if (st->kind == ST_FOR) {
      binding_symbols(c, st->body, out);
    } else if (st->kind == ST_IF) {
      binding_symbols(c, st->body, out);
      binding_symbols(c, st->els, out);
    }
  }
}

static json_t *struct_symbol(const LspCtx *c, const StructDecl *sd) {
  int el, ec;
  block_end(&c->src, sd->name.pos, &el, &ec);
  json_t *s = doc_symbol(c, tok_str(sd->name), NULL, SK_STRUCT, keyword_before(c, sd->name.pos, "struct"), el, ec,
                         sd->name.pos, sd->name.len);
  json_t *children = json_array();
  for (int f = 0; f < sd->fields.len; f++) {
    const Param *p = sd->fields.data[f];
    const char *detail;
    if (sd->def && f < sd->def->nfields)
      detail = lsp_type_text(c, &sd->def->field_types[f]);   /* the name and dims: no leaves */
    else {
      Str t = {0};
      ast_type_text(&t, p->type);
      detail = arena_strdup(str_cstr(&t));
      free(t.buf);
    }
    json_array_append_new(children, name_symbol(c, p->name, detail, SK_FIELD));
  }
  json_object_set_new(s, "children", children);
  return s;
}

static json_t *func_symbol(const LspCtx *c, const FuncDecl *f) {
  Str sig = {0};
  lsp_signature(&sig, c, f, false);
  char *detail = arena_strdup(str_cstr(&sig));
  free(sig.buf);
  int el = f->pos.line, ec = f->pos.col + 1;
  if (f->body)
    block_end(&c->src, f->body->pos, &el, &ec);
  json_t *fs = doc_symbol(c, tok_str(f->name), detail, SK_FUNCTION,
                          f->manual ? f->manual_pos : keyword_before(c, f->name.pos, "fn"), el, ec, f->name.pos,
                          f->name.len);
  json_t *children = json_array();
  for (int k = 0; k < f->ntparams; k++)
    json_array_append_new(children, name_symbol(c, f->tparams[k], NULL, SK_TYPE_PARAMETER));
  for (int k = 0; k < f->params.len; k++) {
    const Param *pa = f->params.data[k];
    const char *detail_k = pa->sym ? lsp_type_text(c, &pa->sym->type) : NULL;
    if (!pa->sym) {
      Str t = {0};
      ast_type_text(&t, pa->type);
      detail_k = arena_strdup(str_cstr(&t));
      free(t.buf);
    }
    json_array_append_new(children, name_symbol(c, pa->name, detail_k, SK_VARIABLE));
  }
  binding_symbols(c, f->body, children);
  json_object_set_new(fs, "children", children);
  return fs;
}

/* The document's own declarations, in the order they are written (an
 * imported file's are that file's symbols; instances are not declared). */
static json_t *symbols(LspCtx *c) {
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
  for (int i = 0; i < p->imports.len; i++) {
    const ImportDecl *d = p->imports.data[i];
    if (d->pos.file != &c->src)
      continue;
    int n = lsp_string_len(d->pos);
    json_array_append_new(out, doc_symbol(c, d->path, d->real, SK_MODULE, keyword_before(c, d->pos, "import"),
                                          d->pos.line, d->pos.col + n, d->pos, n));
  }
  for (int i = 0; i < p->items_order.len; i++) {
    const Item *it = p->items_order.data[i];
    if (it->kind == ITEM_CONST) {
      const ConstDecl *cd = it->decl;
      if (cd->name.pos.file != &c->src)
        continue;
      const char *v = strstr(lsp_const_text(cd), "= ");
      json_array_append_new(out, name_symbol(c, cd->name, v ? v + 2 : NULL, SK_CONSTANT));
    } else if (it->kind == ITEM_STRUCT) {
      const StructDecl *sd = it->decl;
      if (sd->name.pos.file == &c->src)
        json_array_append_new(out, struct_symbol(c, sd));
    } else if (it->kind == ITEM_FUNC) {
      const FuncDecl *f = it->decl;
      if (f->name.pos.file == &c->src && !f->generic)
        json_array_append_new(out, func_symbol(c, f));
    }
  }
  return out;
}

/* ---- the answer --------------------------------------------------------------------- */

json_t *lsp_answer(const LspDoc *doc, const Vec *incdirs, LspQuery q, int64_t line, int64_t ch,
                   LspEncoding enc) {
  LspCtx c;
  memset(&c, 0, sizeof c);
  c.doc = doc;
  c.enc = enc;
  c.src.name = doc->path;
  c.src.text = doc->text;
  c.src.len = doc->len;
  index_lines(&c);
  diagout_start(DIAG_JSON);   /* recorded, never printed */
  diag_set_max_errors(0);
  c.prog = drv_analyze(&c.src, incdirs, &c.mesh, q == Q_DIAGNOSTICS, &c.typed);
  if (q == Q_DIAGNOSTICS)
    return diagnostics(&c);
  if (q == Q_SYMBOLS)
    return symbols(&c);
  /* The 1-based line and byte column of the query's position. */
  size_t off = lsp_offset(doc->text, doc->len, line, ch, enc);
  const char *ls = line_start(doc->text, doc->len, line);
  int bline = (int)line + 1, bcol = (int)(doc->text + off - ls) + 1;
  LspIndex ix;
  lsp_index(&ix, &c);
  const Occ *o = lsp_occ_at(&ix, bline, bcol);
  if (!o)
    return json_null();
  return q == Q_HOVER ? lsp_hover(&c, &ix, o) : definition(&c, o);
}
