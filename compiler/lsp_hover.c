/* lsp_hover.c: the language server's hover text for a place of the index
 * (lsp_index.c), as Markdown with shd code blocks.
 *
 * A value (binding, parameter, expression, field p.w) shows its type in
 * canonical form (ty_str) and what every device holds; a struct value also
 * its fields, each with its type in that value (stacked dims leading, the
 * states its leaves have: a gradient's U and R swapped), nested structs
 * indented, and the totals (leaves, elements, bytes on every device). The
 * field list is bounded (HOVER_LINES lines, HOVER_DEPTH levels of nesting):
 * a struct of thousands of fields gives a hover of a screen, with a count
 * of what was left out. A struct's name shows its declaration, resolved. A
 * function shows its signature, where it is declared (an imported file, the
 * standard library) and the comment above it; a call of a generic function
 * shows the instance that call was checked with (fn adamw<P = GPT>(p: GPT,
 * ...)) and the generic declaration as written. A place inside a generic
 * function's body is typed once per instance: each instance's type is
 * listed (at most HOVER_INSTANCES).
 */
#include "lsp.h"

#define HOVER_LINES 40       /* field lines of a struct */
#define HOVER_DEPTH 3        /* nesting of structs shown */
#define HOVER_INSTANCES 8    /* instances listed for a place in a generic body */
#define COMMENT_LINES 12     /* lines of a declaration's comment */

const char *lsp_type_text(const LspCtx *c, const Type *t) {
  return t && t->kind != TY_ERROR ? ty_str(&c->mesh, t) : "(not typed: see the errors)";
}

static void bytes_text(Str *s, int64_t n) {
  if (n < 10240)
    str_printf(s, "%lld bytes", (long long)n);
  else if (n < (int64_t)10 << 20)
    str_printf(s, "%.1f KiB", (double)n / 1024);
  else if (n < (int64_t)10 << 30)
    str_printf(s, "%.1f MiB", (double)n / (1 << 20));
  else
    str_printf(s, "%.1f GiB", (double)n / (1 << 30));
}

/* ---- structs -------------------------------------------------------------------------- */

static void indent(Str *s, int depth) {
  for (int i = 0; i < depth; i++)
    str_printf(s, "    ");
}

/* The fields of struct value t, one a line at `depth`, while *budget
 * lines are left; a nested struct's own fields follow it, indented. */
static void struct_fields(Str *s, const LspCtx *c, const Type *t, int depth, int *budget) {
  const StructDef *d = t->sdef;
  for (int f = 0; f < d->nfields; f++) {
    if (*budget <= 0) {
      indent(s, depth);
      str_printf(s, "// ... %d more field%s of %s\n", d->nfields - f, d->nfields - f == 1 ? "" : "s", d->name);
      return;
    }
    (*budget)--;
    Type ft = ty_field(t, f);
    indent(s, depth);
    str_printf(s, "%s: %s", d->field_names[f], lsp_type_text(c, &ft));
    if (ft.kind != TY_STRUCT) {
      str_putc(s, '\n');
    } else if (depth >= HOVER_DEPTH) {
      str_printf(s, " { ... }   // %d lea%s\n", ft.nelems, ft.nelems == 1 ? "f" : "ves");
    } else {
      str_printf(s, " {\n");
      struct_fields(s, c, &ft, depth + 1, budget);
      indent(s, depth);
      str_printf(s, "}\n");
    }
  }
}

/* The declaration's fields as written, for a struct that did not resolve. */
static void written_fields(Str *s, const StructDecl *sd) {
  int n = sd->fields.len < HOVER_LINES ? sd->fields.len : HOVER_LINES;
  for (int f = 0; f < n; f++) {
    const Param *p = sd->fields.data[f];
    str_printf(s, "    %.*s: ", p->name.len, p->name.start);
    ast_type_text(s, p->type);
    str_putc(s, '\n');
  }
  if (n < sd->fields.len)
    str_printf(s, "    // ... %d more fields\n", sd->fields.len - n);
}

/* Leaves, elements and bytes of struct value t (every device's share too,
 * unless the types are already one device's). */
static void struct_totals(Str *s, const LspCtx *c, const Type *t, bool local) {
  int64_t elems = 0, bytes = 0, dev = 0;
  for (int k = 0; k < t->nelems; k++) {
    const Type *l = &t->elems[k];
    elems = ty_size_add(elems, ty_global_count(l));
    bytes = ty_size_add(bytes, ty_size_mul(ty_global_count(l), (int64_t)ty_dtype_size(l->dtype)));
    dev = ty_size_add(dev, ty_size_mul(ty_local_count(&c->mesh, l), (int64_t)ty_dtype_size(l->dtype)));
  }
  str_printf(s, "\n\n`%s`: %d field%s, %d lea%s, %s elements (", t->sdef->name, t->sdef->nfields,
             t->sdef->nfields == 1 ? "" : "s", t->nelems, t->nelems == 1 ? "f" : "ves", ty_size_str(elems));
  bytes_text(s, bytes);
  str_printf(s, ")");
  if (!local) {
    str_printf(s, "; every device holds ");
    bytes_text(s, dev);
  }
}

static void struct_block(Str *s, const LspCtx *c, const Type *t, const char *header) {
  int budget = HOVER_LINES;
  str_printf(s, "\n```shd\n%s {\n", header);
  struct_fields(s, c, t, 1, &budget);
  str_printf(s, "}\n```");
}

/* struct NAME and its fields (resolved, else as written). */
static void struct_decl_markdown(Str *s, const LspCtx *c, const StructDecl *sd) {
  if (sd->def) {
    Type t = ty_struct(sd->def, 0, NULL, NULL);
    str_printf(s, "```shd\nstruct %s\n```", sd->def->name);
    struct_totals(s, c, &t, false);
    struct_block(s, c, &t, arena_printf("struct %s", sd->def->name));
  } else {
    str_printf(s, "```shd\nstruct %.*s {\n", sd->name.len, sd->name.start);
    written_fields(s, sd);
    str_printf(s, "}\n```\n(not resolved: see the errors)");
  }
}

/* ---- types, declarations ------------------------------------------------------------------- */

/* What a value of type t is beyond its canonical form: what one device
 * holds (inside a manual function the types are already one device's),
 * and a struct's fields. */
static void type_markdown(Str *s, const LspCtx *c, const Type *t, const FuncDecl *fn) {
  if (!t || t->kind == TY_ERROR)
    return;
  bool local = fn && fn->manual;
  if (local) {
    str_printf(s, "\n\nInside `manual(");
    for (int k = 0; k < fn->nmanual; k++)
      str_printf(s, "%s%.*s", k ? ", " : "", fn->manual_axes[k].len, fn->manual_axes[k].start);
    str_printf(s, ") fn %.*s`: the type one device sees", fn->name.len, fn->name.start);
  }
  if (t->kind == TY_STRUCT) {
    struct_totals(s, c, t, local);
    struct_block(s, c, t, ty_str(&c->mesh, t));
  } else if (local) {
    return;
  } else if (t->kind == TY_ARRAY && t->rank > 0) {
    bool sharded = ty_dim_axes(t) != 0;
    str_printf(s, "\n\n%s: every device holds `%s` (%lld bytes)%s",
               sharded ? "Sharded" : "Replicated", ty_local_str(&c->mesh, t),
               (long long)(ty_local_count(&c->mesh, t) * (int64_t)ty_dtype_size(t->dtype)),
               t->U ? "; unreduced (`U`): each device holds a partial sum" : "");
  } else if (t->kind == TY_ARRAY && t->U) {
    str_printf(s, "\n\nUnreduced (`U`): each device holds a partial sum");
  }
}

/* The // comment lines just above line `line` of f, and where f is when it
 * is not the document. */
static void declared_at(Str *s, const LspCtx *c, Pos p) {
  if (!p.file || p.line <= 0)
    return;
  if (p.file != &c->src)
    str_printf(s, "\n\nDeclared in `%s`, line %d", p.file->name, p.line);
  int first = p.line;
  for (int l = p.line - 1; l >= 1 && p.line - l <= COMMENT_LINES; l--) {
    size_t len;
    const char *t = diag_line_text(p.file, l, &len);
    while (len && (*t == ' ' || *t == '\t'))
      t++, len--;
    if (len < 2 || t[0] != '/' || t[1] != '/')
      break;
    first = l;
  }
  if (first == p.line)
    return;
  str_printf(s, "\n\n");
  for (int l = first; l < p.line; l++) {
    size_t len;
    const char *t = diag_line_text(p.file, l, &len);
    const char *slash = memchr(t, '/', len);
    const char *text = slash + 2;
    size_t n = len - (size_t)(text - t);
    if (n && *text == ' ')
      text++, n--;
    str_printf(s, "%.*s\n", (int)n, text);
  }
}

void lsp_signature(Str *s, const LspCtx *c, const FuncDecl *f, bool fence) {
  const FuncDecl *g = lsp_decl_of(f);
  bool typed = !(g == f && f->ntparams);   /* a generic declaration is never typed */
  if (fence)
    str_printf(s, "```shd\n");
  if (f->manual) {
    str_printf(s, "manual(");
    for (int k = 0; k < f->nmanual; k++)
      str_printf(s, "%s%.*s", k ? ", " : "", f->manual_axes[k].len, f->manual_axes[k].start);
    str_printf(s, ") ");
  }
  str_printf(s, "fn %.*s", f->name.len, f->name.start);
  for (int k = 0; k < g->ntparams; k++) {
    str_printf(s, "%s%.*s", k ? ", " : "<", g->tparams[k].len, g->tparams[k].start);
    if (f != g && f->targs)
      str_printf(s, " = %s", lsp_type_text(c, &f->targs[k]));
  }
  str_printf(s, "%s(", g->ntparams ? ">" : "");
  for (int k = 0; k < f->params.len; k++) {
    const Param *p = f->params.data[k];
    str_printf(s, "%s%.*s: ", k ? ", " : "", p->name.len, p->name.start);
    if (typed)
      str_printf(s, "%s", f->param_types ? lsp_type_text(c, &f->param_types[k]) : "?");
    else
      ast_type_text(s, p->type);
  }
  str_printf(s, ")");
  for (int k = 0; k < f->nresults; k++) {
    bool tuple = f->nresults > 1 || f->result_tuple;
    str_printf(s, "%s", k ? ", " : tuple ? " -> (" : " -> ");
    if (typed)
      str_printf(s, "%s", f->result_types ? lsp_type_text(c, &f->result_types[k]) : "?");
    else
      ast_type_text(s, f->results[k]);
    if (tuple && k == f->nresults - 1)
      str_printf(s, ")");
  }
  if (fence)
    str_printf(s, "\n```");
}

/* A function: its signature, where it is declared, its comment. */
static void func_markdown(Str *s, const LspCtx *c, const FuncDecl *f) {
  lsp_signature(s, c, f, true);
  declared_at(s, c, f->name.pos);
}

static void axis_markdown(Str *s, const LspCtx *c, int a) {
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

const char *lsp_const_text(const ConstDecl *cd) {
  const Symbol *sym = cd->sym;
  if (!sym)
    return arena_printf("const %.*s", cd->name.len, cd->name.start);
  if (sym->is_float_const)
    return arena_printf("const %s = %.17g", sym->name, sym->fval);
  return arena_printf("const %s = %lld", sym->name, (long long)sym->ival);
}

static void const_markdown(Str *s, const LspCtx *c, const ConstDecl *cd) {
  str_printf(s, "```shd\n%s\n```", lsp_const_text(cd));
  declared_at(s, c, cd->name.pos);
}

static void symbol_markdown(Str *s, const LspCtx *c, const LspIndex *ix, const Symbol *sym, const FuncDecl *fn) {
  if (sym->kind == SYM_FUNC && sym->fn) {
    func_markdown(s, c, sym->fn);
    return;
  }
  if (sym->kind == SYM_CONST) {
    for (int i = 0; c->prog && i < c->prog->consts.len; i++)
      if (((const ConstDecl *)c->prog->consts.data[i])->sym == sym)
        const_markdown(s, c, c->prog->consts.data[i]);
    return;
  }
  if (sym->kind == SYM_AXIS) {
    axis_markdown(s, c, sym->axis);
    return;
  }
  if (sym->kind == SYM_STRUCT && sym->sdecl) {
    struct_decl_markdown(s, c, sym->sdecl);
    return;
  }
  int k = ptrmap_get(&ix->sym_kind, sym);
  const char *what = k == OC_PARAM ? "param" : sym->mutable_ ? "var" : "let";
  str_printf(s, "```shd\n%s %s: %s\n```", what, sym->name, lsp_type_text(c, &sym->type));
  type_markdown(s, c, &sym->type, fn);
}

/* ---- the places --------------------------------------------------------------------------- */

static void field_markdown(Str *s, const LspCtx *c, const Occ *o) {
  const StructDecl *sd = o->sd;
  const Param *p = sd && o->field >= 0 && o->field < sd->fields.len ? sd->fields.data[o->field] : NULL;
  if (sd && !p) {
    size_t len;
    const char *name = diag_line_text(o->pos.file, o->pos.line, &len) + o->pos.col - 1;
    str_printf(s, "struct `%.*s` has no field `%.*s`; its fields: ", sd->name.len, sd->name.start, o->len, name);
    for (int f = 0; f < sd->fields.len && f < HOVER_LINES; f++)
      str_printf(s, "%s`%.*s`", f ? ", " : "", ((const Param *)sd->fields.data[f])->name.len,
                 ((const Param *)sd->fields.data[f])->name.start);
    if (sd->fields.len > HOVER_LINES)
      str_printf(s, ", ... (%d in all)", sd->fields.len);
    return;
  }
  if (!p) {
    if (o->e && o->e->ty) {
      str_printf(s, "```shd\n%s\n```", lsp_type_text(c, o->e->ty));
      type_markdown(s, c, o->e->ty, o->fn);
    }
    return;
  }
  str_printf(s, "```shd\n%.*s.%.*s: ", sd->name.len, sd->name.start, p->name.len, p->name.start);
  Type fty = ty_with_leaves(&o->fty);   /* a field's declaration is indexed without its leaves */
  if (fty.kind != TY_ERROR)
    str_printf(s, "%s", lsp_type_text(c, &fty));
  else
    ast_type_text(s, p->type);
  str_printf(s, "\n```\nfield %d of struct `%.*s`", o->field + 1, sd->name.len, sd->name.start);
  if (o->kind == OC_FIELD && sd->def && fty.kind != TY_ERROR) {
    Type decl = ty_field_type(sd->def, o->field);
    if (!ty_equal(&fty, &decl))
      str_printf(s, ", declared `%s`", lsp_type_text(c, &decl));
  }
  if (fty.kind != TY_ERROR)
    type_markdown(s, c, &fty, o->kind == OC_FIELD ? o->fn : NULL);
  if (o->kind == OC_FIELD)
    declared_at(s, c, p->name.pos);
}

static void tparam_markdown(Str *s, const LspCtx *c, const Occ *o) {
  const FuncDecl *g = lsp_decl_of(o->fn);
  if (!g || o->tparam < 0 || o->tparam >= g->ntparams)
    return;
  Token t = g->tparams[o->tparam];
  if (o->fn && o->fn->generic && o->fn->targs) {
    str_printf(s, "```shd\n%.*s = %s\n```", t.len, t.start, lsp_type_text(c, &o->fn->targs[o->tparam]));
    type_markdown(s, c, &o->fn->targs[o->tparam], NULL);
    return;
  }
  str_printf(s, "```shd\n%.*s\n```\ntype parameter of `%.*s`: it stands for the whole type of the argument "
             "that binds it", t.len, t.start, g->name.len, g->name.start);
  int n = 0;
  for (int i = 0; c->prog && i < c->prog->funcs.len; i++) {
    const FuncDecl *f = c->prog->funcs.data[i];
    if (f->generic != g || f->view_manual || !f->targs || ++n > HOVER_INSTANCES)
      continue;
    str_printf(s, "%s\n- `%.*s = %s`", n == 1 ? "; the calls bind it to" : "", t.len, t.start,
               lsp_type_text(c, &f->targs[o->tparam]));
  }
  if (n > HOVER_INSTANCES)
    str_printf(s, "\n- ... and %d more", n - HOVER_INSTANCES);
  else if (!n)
    str_printf(s, " (nothing calls this function yet)");
}

static void call_markdown(Str *s, const LspCtx *c, const Occ *o) {
  const Expr *e = o->e;
  const FuncDecl *f = e->fn;
  if (!f && !e->bi && e->callee->kind == EX_NAME)
    f = lsp_func_named(c, e->callee->tok.start, e->callee->tok.len);
  if (f) {
    const FuncDecl *g = lsp_decl_of(f);
    lsp_signature(s, c, f, true);
    if (g != f && g->ntparams) {
      str_printf(s, "\n\nThis call's instance; declared generic:\n");
      lsp_signature(s, c, g, true);
    }
    declared_at(s, c, g->name.pos);
    if (e->ty)
      str_printf(s, "\n\nThis call gives `%s`", lsp_type_text(c, e->ty));
  } else {
    str_printf(s, "```shd\n%.*s(...) -> %s\n```\n%s", e->callee->tok.len, e->callee->tok.start,
               lsp_type_text(c, e->ty), e->bi ? "builtin (docs/language.md)" : "");
  }
  type_markdown(s, c, e->ty, o->fn);
}

static void import_markdown(Str *s, const LspCtx *c, const ImportDecl *d) {
  str_printf(s, "```shd\nimport \"%s\"\n```\n", d->path);
  if (!d->real) {
    str_printf(s, "not found (see the error)");
    return;
  }
  str_printf(s, "`%s`", d->real);
  int nf = 0, ns = 0;
  for (int i = 0; c->prog && i < c->prog->funcs.len; i++) {
    const FuncDecl *f = c->prog->funcs.data[i];
    nf += !f->generic && f->name.pos.file && !strcmp(f->name.pos.file->name, d->real);
  }
  for (int i = 0; c->prog && i < c->prog->structs.len; i++) {
    const StructDecl *sd = c->prog->structs.data[i];
    ns += sd->name.pos.file && !strcmp(sd->name.pos.file->name, d->real);
  }
  str_printf(s, ": %d function%s, %d struct%s", nf, nf == 1 ? "" : "s", ns, ns == 1 ? "" : "s");
}

static void occ_markdown(Str *s, LspCtx *c, const LspIndex *ix, const Occ *o) {
  switch (o->kind) {
  case OC_FUNC:
    func_markdown(s, c, o->fn);
    break;
  case OC_PARAM:
  case OC_BIND:
  case OC_NAME:
    if (o->sym)
      symbol_markdown(s, c, ix, o->sym, o->fn);
    else if (o->e && o->e->kind == EX_NAME && lsp_func_named(c, o->e->tok.start, o->e->tok.len))
      func_markdown(s, c, lsp_func_named(c, o->e->tok.start, o->e->tok.len));
    break;
  case OC_CONST:
  case OC_CONST_SIZE:
    const_markdown(s, c, o->cd);
    break;
  case OC_AXIS:
  case OC_AXIS_DECL:
    axis_markdown(s, c, o->axis);
    break;
  case OC_CALL:
    call_markdown(s, c, o);
    break;
  case OC_EXPR:
    if (!o->e->ty)
      break;
    str_printf(s, "```shd\n%s\n```", lsp_type_text(c, o->e->ty));
    type_markdown(s, c, o->e->ty, o->fn);
    break;
  case OC_STRUCT_DECL:
  case OC_STRUCT:
    struct_decl_markdown(s, c, o->sd);
    if (o->kind == OC_STRUCT)
      declared_at(s, c, o->sd->name.pos);
    break;
  case OC_FIELD_DECL:
  case OC_FIELD:
    field_markdown(s, c, o);
    break;
  case OC_TPARAM_DECL:
  case OC_TPARAM:
    tparam_markdown(s, c, o);
    break;
  case OC_IMPORT:
    import_markdown(s, c, o->imp);
    break;
  }
}

json_t *lsp_hover(LspCtx *c, const LspIndex *ix, const Occ *o) {
  Str s = {0};
  const FuncDecl *g = o->fn && o->fn->generic ? o->fn->generic : NULL;
  if (g) {
    /* A place in a generic body: what it is in each instance. */
    int n = 0, shown = 0;
    for (int i = 0; i < ix->occs.len; i++) {
      const Occ *p = ix->occs.data[i];
      if (p->kind != o->kind || p->pos.line != o->pos.line || p->pos.col != o->pos.col || p->len != o->len ||
          !p->fn || p->fn->generic != g)
        continue;
      if (++n > HOVER_INSTANCES)
        continue;
      Str one = {0};
      occ_markdown(&one, c, ix, p);
      if (one.len) {
        str_printf(&s, "%sIn the instance `", shown++ ? "\n\n---\n\n" : "");
        lsp_signature(&s, c, p->fn, false);
        str_printf(&s, "`:\n\n%s", str_cstr(&one));
      }
      free(one.buf);
    }
    if (n > HOVER_INSTANCES)
      str_printf(&s, "\n\n---\n\n... and %d more instances", n - HOVER_INSTANCES);
  } else {
    occ_markdown(&s, c, ix, o);
  }
  if (!s.len)
    return json_null();
  json_t *h = json_pack("{s:{s:s, s:s}, s:o}", "contents", "kind", "markdown", "value", str_cstr(&s), "range",
                        lsp_range(c, NULL, o->pos.line, o->pos.col, o->pos.line, o->pos.col + o->len));
  free(s.buf);
  return h;
}
