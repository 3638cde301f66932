/* tc_struct.c: structs (language.md §9.1, §9.2): declarations, struct types,
 * construction by keyword, field access, indexing a stacked struct, and the
 * operations that apply an array operation leaf by leaf.
 *
 * A struct is a compile-time grouping. Its type (TY_STRUCT) lists its leaves,
 * each a full array type, so every rule of the array language types a leaf
 * as it would a separate array; a struct adds no sharding rule of its own.
 * An operation on struct values (p.h[i], 0.9 * m + 0.1 * g, zeros(GPT)) is
 * given one array expression per leaf (Expr.leaves), whose struct operands
 * are EX_LEAF nodes: each leaf expression is typed by the ordinary rules,
 * with the leaf's path in every message ("add: in field h.w: ..."), and
 * lowered as ordinary code, so the IR holds the same instructions as the
 * program written with separate arrays. Operands shared by every leaf (a
 * scalar, an index) are EX_LEAF nodes with leaf -1: typed once, evaluated
 * once.
 *
 * Invariants: a StructDef is complete (every field resolved) before any
 * type refers to it; a struct that contains itself, directly or through
 * others, is reported once, at the field that closes the cycle; every leaf
 * type is well formed (rank at most MAX_RANK with the stacked dims, each
 * mesh axis once).
 */
#include "ops.h"

TcUp tc_up;

#define TS(t) ty_str(c->mesh, (t))

/* Leaves a struct may have (after nesting and stacking): a program cannot
 * make the compiler's memory grow without bound by nesting. */
#define MAX_LEAVES (1 << 16)

/* ---- declarations ------------------------------------------------------------- */

static bool resolve_struct(TcCtx *c, StructDecl *d, Pos use);

/* The stacked dims of a named type (S[N@X, M]), resolved as the dims of an
 * array type would be. */
static bool stack_dims(TcCtx *c, TypeExpr *te, Type *dims) {
  if (!te->rank) {
    *dims = ty_scalar(DT_F32);
    return true;
  }
  TypeExpr fake = *te;
  fake.named = false;
  fake.dtype = DT_F32;
  fake.nannots = 0;
  AxisSet saved = c->manual;
  c->manual = 0;   /* global dims; a manual body localises the whole type */
  bool ok = tc_up.resolve_type(c, &fake, dims);
  c->manual = saved;
  return ok;
}

/* The leaves of d stacked by `dims` checked (rank, axes): each quietly
 * first, so that a leaf's path is made only for the message. Unstacked,
 * they are the leaves d's declaration checked. */
static bool check_stacked(TcCtx *c, const StructDef *d, const Type *dims, Pos pos) {
  if (!dims->rank)
    return true;
  const Type *leaves = ty_struct_leaves(d);
  Type t = ty_struct(d, dims->rank, dims->shape, dims->spec);
  for (int k = 0; k < d->nleaves; k++) {
    if (dims->rank + leaves[k].rank > MAX_RANK) {
      diag_error(pos, "E_SPEC", "stacking %s by %d dim%s gives its leaf %s %d dims; arrays have at most %d", d->name,
                 dims->rank, dims->rank == 1 ? "" : "s", ty_leaf_path(d, k), dims->rank + leaves[k].rank, MAX_RANK);
      return false;
    }
    if (!ty_check_wellformed(c->mesh, &t.elems[k], (Pos){0}, 0, NULL) &&
        !ty_check_wellformed(c->mesh, &t.elems[k], pos, 0, arena_printf("leaf %s of %s", ty_leaf_path(d, k), TS(&t))))
      return false;
  }
  return true;
}

/* The struct d stacked by `dims`, with every leaf checked (rank, axes). */
static bool stacked_type(TcCtx *c, const StructDef *d, const Type *dims, Pos pos, Type *out) {
  if (!check_stacked(c, d, dims, pos))
    return false;
  *out = ty_struct(d, dims->rank, dims->shape, dims->spec);
  return true;
}

static const char *struct_cycle(StructDecl *from, StructDecl *to) {
  return arena_printf("struct %.*s contains itself (through %.*s); a struct cannot contain itself, stacked or not: "
                      "hold the inner part as arrays or another struct",
                      to->name.len, to->name.start, from->name.len, from->name.start);
}

/* A field's type: an array type, or a (stacked) struct, resolved first. */
static bool field_type(TcCtx *c, StructDecl *owner, TypeExpr *te, Type *out) {
  if (!te->named)
    return tc_up.resolve_type(c, te, out);
  char *name = tok_str(te->name);
  Symbol *s = tc_up.global(name);
  if (!s || s->kind != SYM_STRUCT)
    return tc_up.resolve_type(c, te, out);   /* reports what the name is */
  if (s->sdecl->state == 1) {
    diag_error(te->pos, "E_NAME", "%s", struct_cycle(owner, s->sdecl));
    return false;
  }
  if (!resolve_struct(c, s->sdecl, te->pos))
    return false;
  if (te->nannots) {
    diag_error(te->annots[0].pos, "E_SPEC", "a struct type takes no <U:..>, <R:..> or <V:..>; its fields' types "
                                            "carry their states");
    return false;
  }
  /* The field's type without its leaves (ty_field_type makes them): a
   * struct nested in a struct costs one Type, however many leaves it has. */
  Type dims;
  const StructDef *sd = s->sdecl->def;
  if (!stack_dims(c, te, &dims) || !check_stacked(c, sd, &dims, te->pos))
    return false;
  memset(out, 0, sizeof *out);
  *out = dims;
  out->kind = TY_STRUCT;
  out->sdef = sd;
  out->nelems = sd->nleaves;
  out->elems = NULL;
  return true;
}

/* Nesting of struct declarations, in whichever order they are declared:
 * the depth of each struct (1 + its deepest field's), and the recursion of
 * resolve_struct (a struct declared before the ones it holds). */
#define MAX_NESTING MAX_STRUCT_NESTING
static int depth;

static bool too_deep(Pos use, int d) {
  if (d <= MAX_NESTING)
    return false;
  diag_error(use, "E_NAME", "structs nest more than %d deep here; flatten some of them", MAX_NESTING);
  return true;
}

static bool resolve_struct(TcCtx *c, StructDecl *d, Pos use) {
  if (d->state == 2)
    return d->def != NULL;
  if (too_deep(use, depth + 1))
    return false;
  d->state = 1;
  depth++;
  int nf = d->fields.len;
  StructDef *def = arena_alloc(sizeof *def);
  def->name = tok_str(d->name);
  def->pos = d->pos;
  def->nfields = nf;
  def->field_names = arena_alloc(sizeof(char *) * (size_t)(nf + 1));
  def->field_types = arena_alloc(sizeof(Type) * (size_t)(nf + 1));
  def->field_leaf = arena_alloc(sizeof(int) * (size_t)(nf + 1));
  bool ok = true;
  if (!nf) {
    diag_error(d->pos, "E_ARG", "struct %s has no fields; give it at least one: struct %s { w: f32[4] }", def->name,
               def->name);
    ok = false;
  }
  int64_t nleaves = 0;
  def->depth = 1;
  for (int f = 0; f < nf; f++) {
    Param *p = d->fields.data[f];
    def->field_names[f] = tok_str(p->name);
    int g = ty_find_field(def, def->field_names[f]);
    if (g >= 0) {
      diag_error(p->name.pos, "E_NAME", "struct %s has two fields named '%s'; name each field once", def->name,
                 def->field_names[f]);
      diag_note(((Param *)d->fields.data[g])->name.pos, "the first '%s' is here", def->field_names[f]);
      ok = false;
    } else {
      strmap_put(&def->field_index, def->field_names[f], (void *)(intptr_t)(f + 1));
    }
    if (!field_type(c, d, p->type, &def->field_types[f])) {
      ok = false;
      continue;
    }
    Type *ft = &def->field_types[f];
    if (ft->kind == TY_STRING) {
      diag_error(p->type->pos, "E_ARG", "a struct field is an array or a struct, not a str");
      ok = false;
      continue;
    }
    if (ft->kind == TY_STRUCT && ft->sdef->depth + 1 > def->depth) {
      def->depth = ft->sdef->depth + 1;
      if (too_deep(p->type->pos, def->depth)) {
        ok = false;
        break;
      }
    }
    def->field_leaf[f] = (int)nleaves;
    nleaves += ft->kind == TY_STRUCT ? ft->nelems : 1;
    if (nleaves > MAX_LEAVES) {
      diag_error(p->name.pos, "E_ARG", "struct %s has more than %d (2^16) leaves (arrays, counting those of nested "
                                       "structs) from this field on; that is the most a struct may have: split it "
                                       "into structs passed separately", def->name, MAX_LEAVES);
      ok = false;
      break;
    }
  }
  if (ok)
    def->nleaves = (int)nleaves;   /* the leaves themselves: ty_struct_leaves, when a value needs them */
  depth--;
  d->state = 2;
  d->def = ok ? def : NULL;
  return ok;
}

void tc_structs(TcCtx *c) {
  Program *p = c->prog;
  for (int i = 0; i < p->structs.len; i++) {
    StructDecl *d = p->structs.data[i];
    char *name = tok_str(d->name);
    Symbol *prev = tc_up.global(name);
    if (tc_up.is_duplicate(d)) {
      d->state = 2;
      continue;
    }
    if (prev) {
      diag_error(d->name.pos, "E_NAME", "'%s' is already defined", name);
      if (prev->pos.file)
        diag_note(prev->pos, "previous definition is here");
      d->state = 2;
      continue;
    }
    Symbol *s = arena_alloc(sizeof *s);
    s->kind = SYM_STRUCT;
    s->name = name;
    s->pos = d->name.pos;
    s->sdecl = d;
    s->type.kind = TY_FUNC;   /* not a value */
    tc_up.add_global(s);
  }
  AxisSet saved = c->manual;
  c->manual = 0;
  for (int i = 0; i < p->structs.len; i++)
    resolve_struct(c, p->structs.data[i], ((StructDecl *)p->structs.data[i])->pos);
  c->manual = saved;
}

/* ---- named types -------------------------------------------------------------- */

bool tc_resolve_named(TcCtx *c, TypeExpr *te, Type *out) {
  *out = ty_error();
  char *name = tok_str(te->name);
  Symbol *s = tc_up.lookup(c, name);
  if (!s) {
    diag_error(te->pos, "E_NAME", "unknown type '%s'; a type is a dtype (f32, f64, i32, bool, str), a struct or a "
                                  "type parameter", name);
    return false;
  }
  if (s->kind == SYM_TYPE && s->dtype_const && te->rank) {   /* DT[8@X, 4]: an array of the const's dtype */
    TypeExpr at = *te;
    at.named = false;
    at.dtype = s->type.dtype;
    return tc_up.resolve_type(c, &at, out);
  }
  if (s->kind == SYM_TYPE) {
    if (te->rank || te->nannots) {
      diag_error(te->pos, "E_SPEC", "type parameter %s stands for a whole type; it takes no dims or annotations "
                                    "(here %s)", name, TS(&s->type));
      return false;
    }
    *out = s->type;
    return true;
  }
  if (s->kind != SYM_STRUCT) {
    const char *what = s->kind == SYM_FUNC ? "a function" : s->kind == SYM_CONST ? "a constant"
                       : s->kind == SYM_AXIS ? "a mesh axis" : "a value";
    diag_error(te->pos, "E_NAME", "'%s' is %s, not a type", name, what);
    return false;
  }
  if (!s->sdecl->def)
    return false;   /* its declaration was wrong and reported */
  if (te->nannots) {
    diag_error(te->annots[0].pos, "E_SPEC", "a struct type takes no <U:..>, <R:..> or <V:..>; its fields' types "
                                            "carry their states");
    return false;
  }
  Type dims, t;
  if (!stack_dims(c, te, &dims) || !stacked_type(c, s->sdecl->def, &dims, te->pos, &t))
    return false;
  if (c->manual) {
    bool ok = true;
    t = tc_manual_local(c, &t, c->manual, te->pos, "type", &ok);
    if (!ok)
      return false;
  }
  *out = t;
  return true;
}

/* A size or N@X written as an expression (an argument Block[L@X]), as the
 * dim of a type. */
static bool expr_dim(Expr *e, DimExpr *d) {
  memset(d, 0, sizeof *d);
  Expr *size = e, *axes = NULL;
  if (e->kind == EX_BINARY && e->op == BIN_MATMUL) {
    size = e->lhs;
    axes = e->rhs;
  }
  if (size->kind != EX_INT && size->kind != EX_NAME)
    return false;
  d->size = size->tok;
  if (!axes)
    return true;
  if (axes->kind == EX_NAME) {
    d->axes[d->naxes++] = axes->tok;
    return true;
  }
  if (axes->kind != EX_TUPLE || axes->args.len > MAX_AXES)
    return false;
  d->paren = true;
  for (int i = 0; i < axes->args.len; i++) {
    Expr *a = axes->args.data[i];
    if (a->kind != EX_NAME)
      return false;
    d->axes[d->naxes++] = a->tok;
  }
  return true;
}

bool tc_type_of_arg(TcCtx *c, Expr *a, Type *out, bool report) {
  if (a->kind == EX_TYPE)
    return tc_up.resolve_type(c, a->type, out);
  Expr *name = a->kind == EX_INDEX ? a->lhs : a;
  Symbol *s = name->kind == EX_NAME ? tc_up.lookup(c, name->str) : NULL;
  if (!s || (s->kind != SYM_STRUCT && s->kind != SYM_TYPE)) {
    if (report)
      diag_error(a->pos, "E_ARG", "expected a type here, e.g. f32[8@X,4] or a struct name");
    return false;
  }
  TypeExpr *te = parse_named_type(NULL, name->tok);
  if (a->kind == EX_INDEX)
    for (int i = 0; i < a->args.len; i++) {
      DimExpr d;
      if (!expr_dim(a->args.data[i], &d)) {
        diag_error(((Expr *)a->args.data[i])->pos, "E_ARG", "a stacked dim is a size, N@AXIS or N@(X, Y)");
        return false;
      }
      parse_type_dim(NULL, te, d, ((Expr *)a->args.data[i])->pos);
    }
  return tc_up.resolve_type(c, te, out);
}

/* ---- fields and construction -------------------------------------------------- */

static const char *field_list(const StructDef *d) {
  Str s = {0};
  for (int f = 0; f < d->nfields; f++)
    str_printf(&s, "%s%s", f ? ", " : "", d->field_names[f]);
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* The field of d closest to `name`, or NULL. */
static const char *closest_field(const StructDef *d, const char *name) {
  const char *best = NULL;
  int bestd = 3;
  for (int f = 0; f < d->nfields; f++) {
    int dist = str_distance(name, d->field_names[f], bestd);
    if (dist < bestd && dist < (int)strlen(name)) {
      bestd = dist;
      best = d->field_names[f];
    }
  }
  return best;
}

static void unknown_field(TcCtx *c, Pos pos, Token tok, const StructDef *d, const char *name) {
  const char *near = closest_field(d, name);
  if (near) {
    diag_error(pos, "E_NAME", "struct %s has no field '%s'; did you mean '%s'?", d->name, name, near);
    diag_fix_replace(tok.pos, (Pos){tok.pos.file, tok.pos.line, tok.pos.col + tok.len}, near,
                     arena_printf("replace with '%s'", near));
  } else {
    diag_error(pos, "E_NAME", "struct %s has no field '%s'; its fields: %s", d->name, name, field_list(d));
  }
}

Type tc_field(TcCtx *c, Expr *e) {
  Type t = tc_up.expr(c, e->lhs);
  if (t.kind == TY_ERROR)
    return t;
  if (t.kind != TY_STRUCT) {
    diag_error(e->pos, "E_ARG", "%s has type %s, which has no fields; only a struct value has fields",
               tc_expr_text(e->lhs), t.kind == TY_ARRAY ? TS(&t) : "(not a value)");
    return ty_error();
  }
  int f = ty_find_field(t.sdef, e->str);
  if (f < 0) {
    unknown_field(c, e->pos, e->tok, t.sdef, e->str);
    return ty_error();
  }
  return ty_field(&t, f);
}

/* S(f=..., g=...): every field once, by keyword, each value typed as an
 * annotation of the field's type would type it (its out_sharding where
 * the value is a contraction or a creation). The field values, in
 * declaration order, go to e->tc for lowering. */
Type tc_construct(TcCtx *c, Expr *e, Symbol *s, const Type *annot) {
  StructDef *d = s->sdecl->def;
  e->sym = s;
  for (int i = 0; i < e->args.len; i++)
    if (((Expr *)e->args.data[i])->kind != EX_KWARG) {
      for (int j = 0; j < e->args.len; j++) {
        Expr *a = e->args.data[j];
        tc_up.expr_unannotated(c, a->kind == EX_KWARG ? a->lhs : a);
      }
      if (d)
        diag_error(((Expr *)e->args.data[i])->pos, "E_ARG", "construct a struct by keyword, every field once: "
                   "%s(%s=...)", d->name, d->field_names[0]);
      return ty_error();
    }
  if (!d) {
    for (int j = 0; j < e->args.len; j++)
      tc_up.expr_unannotated(c, ((Expr *)e->args.data[j])->lhs);
    return ty_error();
  }
  Type decl = ty_struct(d, 0, NULL, NULL);
  if (c->manual) {
    bool lok = true;
    decl = tc_manual_local(c, &decl, c->manual, e->pos, "type", &lok);
  }
  /* Where the expected type is this struct stacked (a field h: Block[L]),
   * the values are the stacked fields. */
  const Type *want = annot && annot->kind == TY_STRUCT && annot->sdef == d ? annot : &decl;
  Expr **vals = arena_alloc(sizeof(Expr *) * (size_t)(d->nfields + 1));
  bool ok = true;
  for (int i = 0; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    int f = ty_find_field(d, a->str);
    if (f < 0) {
      unknown_field(c, a->pos, a->tok, d, a->str);
      tc_up.expr_unannotated(c, a->lhs);
      ok = false;
      continue;
    }
    if (vals[f]) {
      diag_error(a->pos, "E_ARG", "%s: field '%s' is given twice; give each field once", d->name, a->str);
      tc_up.expr_unannotated(c, a->lhs);
      ok = false;
      continue;
    }
    vals[f] = a->lhs;
    Type ft = ty_field(want, f);
    const char *outer = diag_set_field(NULL);
    diag_set_field(outer ? arena_printf("%s.%s", outer, a->str) : a->str);
    Type t = tc_up.expr_annot(c, a->lhs, &ft, arena_printf("%s(...)", d->name));
    diag_set_field(outer);
    ok &= t.kind != TY_ERROR;
  }
  Str missing = {0};
  int nmissing = 0;
  for (int f = 0; f < d->nfields; f++)
    if (!vals[f]) {
      str_printf(&missing, "%s%s", nmissing ? ", " : "", d->field_names[f]);
      nmissing++;
    }
  if (nmissing) {
    diag_error(e->pos, "E_ARG", "%s(...) leaves out field%s %s; give every field, by keyword", d->name,
               nmissing == 1 ? "" : "s", str_cstr(&missing));
    ok = false;
  }
  free(missing.buf);
  if (!ok)
    return ty_error();
  e->tc = vals;
  /* The leaves are the values' types (a weak literal took its field's). */
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(d->nleaves + 1));
  for (int f = 0; f < d->nfields; f++) {
    Type *vt = vals[f]->ty;
    Type ft = ty_field(want, f);
    int at = d->field_leaf[f];
    if (vt->kind == TY_STRUCT) {
      for (int k = 0; k < vt->nelems; k++)
        leaves[at + k] = vt->elems[k];
    } else {
      leaves[at] = vt->weak ? ft : *vt;
      leaves[at].weak = false;
    }
  }
  return ty_struct_with(want, leaves);
}

/* ---- leaf by leaf ------------------------------------------------------------- */

/* Leaf k's path in struct d, for diag_set_field_lazy. */
static const char *leaf_path_of(const void *d, int k) { return ty_leaf_path(d, k); }

/* EX_LEAF: leaf k of the struct-valued (already typed) x, or x itself. */
static Expr *leaf_of(Expr *x, int k) {
  Expr *l = ast_expr(EX_LEAF, x->pos);
  l->tok = x->tok;
  l->lhs = x;
  l->ival = k;
  l->depth = x->depth;
  return l;
}

/* The path of leaf k of the struct value x as messages name it: the fields
 * x was selected by (p.h -> "h."), then the leaf's own path. */
static const char *leaf_path(const Expr *x, int k) {
  const char *path = ty_leaf_path(x->ty->sdef, k);
  for (; x->kind == EX_FIELD; x = x->lhs)
    path = arena_printf("%s.%s", x->str, path);
  return path;
}

/* p.h[i], p.h[0:2]: the struct stacked by p.h's leading dims indexed in
 * those dims, every leaf indexed alike with the rules of §8. */
Type tc_struct_index(TcCtx *c, Expr *e, const Type *t, const Type *annot) {
  int nidx = e->args.len;
  if (!t->rank) {
    diag_error(e->pos, "E_ARG", "%s is a %s, not a stacked struct: only a stacked struct (S[N]) is indexed; index a "
               "field instead", tc_expr_text(e->lhs), TS(t));
    return ty_error();
  }
  if (nidx > t->rank) {
    for (int i = 0; i < nidx; i++)
      if (((Expr *)e->args.data[i])->kind != EX_SLICE)
        tc_up.expr(c, e->args.data[i]);
    diag_error(e->pos, "E_ARG", "%s is %s, stacked in %d dim%s: index only those (here %d indices); to index a "
               "field, write %s.FIELD[...]",
               tc_expr_text(e->lhs), TS(t), t->rank, t->rank == 1 ? "" : "s", nidx, tc_expr_text(e->lhs));
    return ty_error();
  }
  /* The indices, typed once, shared by the leaves (a slice is constant). */
  Vec idx = {0};
  for (int i = 0; i < nidx; i++) {
    Expr *a = e->args.data[i];
    if (a->kind == EX_SLICE) {
      vec_push(&idx, a);
      continue;
    }
    Type it = tc_up.expr(c, a);
    if (it.kind == TY_ERROR)
      return ty_error();
    vec_push(&idx, leaf_of(a, -1));
  }
  int nl = t->nelems;
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(nl + 1));
  bool ok = true;
  const char *saved = diag_set_field(NULL);
  for (int k = 0; k < nl && ok; k++) {
    Expr *le = ast_expr(EX_INDEX, e->pos);
    le->tok = e->tok;
    le->lhs = leaf_of(e->lhs, k);
    le->args = idx;
    le->depth = e->depth;
    vec_push(&e->leaves, le);
    diag_set_field(leaf_path(e->lhs, k));
    const Type *la = annot && annot->kind == TY_STRUCT && annot->nelems == nl ? &annot->elems[k] : NULL;
    leaves[k] = tc_up.expr_with(c, le, la);
    ok = leaves[k].kind != TY_ERROR;
  }
  diag_set_field(saved);
  if (!ok)
    return ty_error();
  /* The stacked dims left: the leading dims of any leaf, less the leaf's own. */
  Type r = *t;
  r.rank = leaves[0].rank - (t->elems[0].rank - t->rank);
  for (int d = 0; d < r.rank; d++) {
    r.shape[d] = leaves[0].shape[d];
    r.spec[d] = leaves[0].spec[d];
  }
  return ty_struct_with(&r, leaves);
}

/* ---- fitting an expected struct type ------------------------------------------- */

/* Why the leaf type t is not the expected u: the code and the words, as an
 * annotation's assertion says it for an array. */
static void leaf_mismatch(TcCtx *c, Pos pos, const char *where, const char *path, const Type *t, const Type *u) {
  Type pt = ty_strip_sharding(t), pu = ty_strip_sharding(u);
  const char *code = c->annot_code ? c->annot_code : "E_ANNOT";
  const char *fix = arena_printf("; reshard the field to %s", TS(u));
  if (t->dtype != u->dtype) {
    code = "E_DTYPE";
    fix = arena_printf("; convert it with cast(x, %s)", ty_dtype_name(u->dtype));
  } else if (!ty_equal(&pt, &pu)) {
    code = "E_SHAPE";
    fix = "";
  } else if (c->manual && t->V != u->V) {
    code = "E_VMA";
    fix = "; cast the field with pcast, or combine the devices' values with a collective";
  }
  diag_error(pos, code, "%s: in field %s: the value has type %s but %s is expected%s", where, path, TS(t), TS(u), fix);
}

bool tc_struct_fits(TcCtx *c, Expr *e, const Type *t, const Type *annot, const char *where) {
  if (t->kind == TY_ERROR)
    return false;
  if (t->kind != TY_STRUCT || annot->kind != TY_STRUCT || t->sdef != annot->sdef) {
    diag_error(e->pos, "E_DTYPE", "%s: the value has type %s but %s is expected%s", where,
               t->kind == TY_ARRAY || t->kind == TY_STRUCT ? TS(t) : "(not a value)", TS(annot),
               t->kind == TY_STRUCT && annot->kind == TY_STRUCT ? "; two struct types are equal only if they have the "
                                                                  "same name"
                                                                : "");
    return false;
  }
  if (t->rank != annot->rank || t->nelems != annot->nelems) {
    diag_error(e->pos, "E_SHAPE", "%s: the value has type %s but %s is expected (its stacked dims differ)", where,
               TS(t), TS(annot));
    return false;
  }
  int k = ty_first_diff_leaf(t, annot);
  Type a = *t, b = *annot;
  if (k < 0 && !ty_equal(&a, &b)) {
    diag_error(e->pos, "E_ANNOT", "%s: the value has type %s but %s is expected (its stacked dims are sharded "
               "differently)", where, TS(t), TS(annot));
    return false;
  }
  if (k < 0)
    return true;
  leaf_mismatch(c, e->pos, where, ty_leaf_path(t->sdef, k), &t->elems[k], &annot->elems[k]);
  return false;
}

/* ---- operations leaf by leaf (§9.2) ---------------------------------------------- */

/* A copy of the node e for one leaf, untyped, its operands to be replaced. */
static Expr *copy_node(const Expr *e) {
  Expr *n = ast_expr(e->kind, e->pos);
  *n = *e;
  n->ty = NULL;
  n->tc = NULL;
  n->sym = NULL;
  n->bi = NULL;
  n->leaves = (Vec){0};
  n->pretyped = false;
  n->args = (Vec){0};
  for (int i = 0; i < e->args.len; i++)
    vec_push(&n->args, e->args.data[i]);
  return n;
}

/* An EX_TYPE argument holding an already resolved type. */
static Expr *type_arg(Pos pos, const Type *t) {
  TypeExpr *te = arena_alloc(sizeof *te);
  te->pos = pos;
  Type *r = arena_alloc(sizeof *r);
  *r = *t;
  te->resolved = r;
  return parse_type_expr(te);
}

/* The random stream of a struct leaf: a hash of its path (FNV-1a), never
 * 0 (a plain array's stream), so that every leaf draws its own numbers,
 * the same on every mesh. */
static int64_t leaf_stream(const char *path) {
  uint32_t h = 2166136261u;
  for (const char *p = path; *p; p++) {
    h ^= (unsigned char)*p;
    h *= 16777619u;
  }
  return h ? h : 1;
}

static bool is_reshard(const Expr *e) { return e->bi && (e->bi->flags & BIF_STRUCT_RESHARD); }

/* A builtin argument that names a type (a struct, or a type parameter)
 * becomes an EX_TYPE holding it, so that the families see a type. */
static void resolve_type_names(TcCtx *c, Expr *e) {
  for (int i = 0; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    Expr *name = a->kind == EX_INDEX ? a->lhs : a;
    if (name->kind != EX_NAME)
      continue;
    Symbol *s = tc_up.lookup(c, name->str);
    if (!s || (s->kind != SYM_STRUCT && s->kind != SYM_TYPE))
      continue;
    Type t;
    if (!tc_type_of_arg(c, a, &t, true))
      t = ty_error();
    if (t.kind == TY_STRUCT && !(e->bi->flags & BIF_CREATION) && !is_reshard(e)) {
      diag_error(a->pos, "E_ARG", "%s takes an array type, not the struct %s", e->bi->name, TS(&t));
      t = ty_error();
    }
    e->args.data[i] = type_arg(a->pos, &t);
  }
}

/* Whether an operand that is not a struct may join struct operands: a
 * scalar, applied to every field. */
static bool check_struct_partner(TcCtx *c, Expr *e, Expr *x, const Type *st) {
  const Type *t = x->ty;
  if (t->kind == TY_ERROR)
    return false;
  if (t->kind == TY_ARRAY && t->rank == 0)
    return true;
  const char *op = e->kind == EX_CALL ? e->callee->str : ast_binop_text(e->op);
  diag_error(x->pos, "E_SHAPE", "%s: %s is %s; a struct (%s) combines with a struct of its type, field by field, or "
             "with a scalar, applied to every field; apply it to a field instead (p.FIELD)", op, tc_expr_text(x),
             t->kind == TY_ARRAY ? TS(t) : "not an array", TS(st));
  return false;
}

/* Struct operands must be of one struct type, stacked alike. */
static bool check_same_struct(TcCtx *c, Expr *e, const Type *a, const Type *b) {
  const char *op = e->kind == EX_CALL ? e->callee->str : ast_binop_text(e->op);
  if (a->sdef != b->sdef) {
    diag_error(e->pos, "E_DTYPE", "%s: the operands are structs of different types, %s and %s; arithmetic on "
               "structs pairs the fields of one struct type (or a struct whose leaves are all scalars, unstacked, "
               "pairs leaf by leaf at the same field paths: a mask)", op, TS(a), TS(b));
    return false;
  }
  bool same = a->rank == b->rank;
  for (int d = 0; same && d < a->rank; d++)
    same = a->shape[d] == b->shape[d] && ty_spec_equal(a->spec[d], b->spec[d]);
  if (!same) {
    diag_error(e->pos, "E_SHAPE", "%s: the operands are %s and %s, stacked differently; index or reshard one so "
               "that both are the same", op, TS(a), TS(b));
    return false;
  }
  return true;
}

/* A struct value whose leaves are all scalars, not stacked: a mask, which
 * pairs with a struct of another type by leaf path (language.md 10.4). */
static bool scalar_leaves(const Type *t) {
  if (t->kind != TY_STRUCT || t->rank)
    return false;
  for (int k = 0; k < t->nelems; k++)
    if (t->elems[k].rank)
      return false;
  return true;
}

/* The leaf of the mask x (scalar_leaves, another struct type than st) at
 * each leaf path of st: map[k] for st's leaf k. Every leaf of st must have
 * one and every leaf of the mask must be one, else E_SHAPE naming it. */
static int *mask_map(TcCtx *c, Expr *e, const Type *st, Expr *x) {
  const Type *mt = x->ty;
  const char *op = e->kind == EX_CALL ? e->callee->str : ast_binop_text(e->op);
  int nl = st->nelems, nm = mt->nelems;
  const char **mpath = arena_alloc(sizeof(char *) * (size_t)(nm + 1));
  bool *used = arena_alloc(sizeof(bool) * (size_t)(nm + 1));
  for (int i = 0; i < nm; i++)
    mpath[i] = ty_leaf_path(mt->sdef, i), used[i] = false;
  int *map = arena_alloc(sizeof(int) * (size_t)(nl + 1));
  for (int k = 0; k < nl; k++) {
    const char *path = ty_leaf_path(st->sdef, k);
    int i = 0;
    while (i < nm && strcmp(mpath[i], path))
      i++;
    if (i == nm) {
      diag_error(x->pos, "E_SHAPE", "%s: %s is the mask %s (scalar leaves, paired with %s leaf by leaf at the same "
                 "paths), but it has no leaf %s, a leaf of %s (%s); give %s that field", op, tc_expr_text(x), TS(mt),
                 TS(st), path, TS(st), TS(&st->elems[k]), TS(mt));
      return NULL;
    }
    map[k] = i;
    used[i] = true;
  }
  for (int i = 0; i < nm; i++)
    if (!used[i]) {
      diag_error(x->pos, "E_SHAPE", "%s: %s is the mask %s (scalar leaves, paired with %s leaf by leaf at the same "
                 "paths), but its leaf %s is no leaf of %s; remove that field from %s, or rename it to a leaf of %s",
                 op, tc_expr_text(x), TS(mt), TS(st), mpath[i], TS(st), TS(mt), TS(st));
      return NULL;
    }
  return map;
}

/* The operands of an elementwise operator or builtin (not type arguments
 * or keyword arguments): pointers to their slots in e. */
/* pcast(p, AXES, to=...) of a struct: each leaf cast (language.md 10.3);
 * its operand is the first argument only (BIF_FIRST_OPERAND). */
static bool is_pcast(const Expr *e) { return e->kind == EX_CALL && e->bi && (e->bi->flags & BIF_FIRST_OPERAND); }

/* first_only: e's builtin takes one operand, its first argument (a leaf's
 * copy of e has no builtin yet: the caller asks the original). */
static int operand_slots(Expr *e, Expr ***slots, bool first_only) {
  int n = 0;
  if (first_only) {
    if (e->args.len && ((Expr *)e->args.data[0])->kind != EX_KWARG)
      slots[n++] = (Expr **)&e->args.data[0];
  } else if (e->kind == EX_UNARY) {
    slots[n++] = &e->lhs;
  } else if (e->kind == EX_BINARY) {
    slots[n++] = &e->lhs;
    slots[n++] = &e->rhs;
  } else {
    for (int i = 0; i < e->args.len && n < 8; i++) {
      Expr *a = e->args.data[i];
      if (a->kind != EX_TYPE && a->kind != EX_KWARG)
        slots[n++] = (Expr **)&e->args.data[i];
    }
  }
  return n;
}

/* 0.9 * m + 0.1 * g, sqrt(v), maximum(p, 0.0), cast(p, f64): one copy of e
 * per leaf, struct operands replaced by their leaf, the others shared. */
static Type lift_elementwise(TcCtx *c, Expr *e, Expr **ops[], int *maps[], int nops, const Type *st) {
  int nl = st->nelems;
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(nl + 1));
  Expr **shared = arena_alloc(sizeof(Expr *) * (size_t)(nops + 1));
  for (int j = 0; j < nops; j++)
    if ((*ops[j])->ty->kind != TY_STRUCT)
      shared[j] = leaf_of(*ops[j], -1);
  const char *saved = diag_set_field(NULL);
  bool ok = true;
  for (int k = 0; k < nl && ok; k++) {
    Expr *le = copy_node(e);
    Expr **lops[8];
    operand_slots(le, lops, is_pcast(e));
    for (int j = 0; j < nops; j++)
      *lops[j] = (*ops[j])->ty->kind == TY_STRUCT ? leaf_of(*ops[j], maps[j] ? maps[j][k] : k) : shared[j];
    vec_push(&e->leaves, le);
    diag_set_field_lazy(leaf_path_of, st->sdef, k);
    leaves[k] = tc_up.expr(c, le);
    ok = leaves[k].kind != TY_ERROR;
    if (ok && leaves[k].kind != TY_ARRAY)
      diag_ice("a leaf operation gave a non-array");
  }
  diag_set_field(saved);
  return ok ? ty_struct_with(st, leaves) : ty_error();
}

/* zeros(S), ones(S), full(S, v), normal(S, seed=s), uniform(S, seed=s), or
 * with S from the annotation: each leaf created with its own type (and, for
 * the random ones, its own stream). */
static Type lift_creation(TcCtx *c, Expr *e, const Type *st) {
  int nl = st->nelems;
  bool random = (e->bi->flags & BIF_RANDOM) != 0;
  /* The value or seed, typed once, shared. */
  Vec rest = {0};
  bool ok = true;
  for (int i = 0; i < e->args.len; i++) {
    Expr *a = e->args.data[i];
    if (a->kind == EX_TYPE)
      continue;
    Expr *v = a->kind == EX_KWARG ? a->lhs : a;
    Type t = tc_up.expr(c, v);
    ok &= t.kind != TY_ERROR;
    if (a->kind == EX_KWARG) {
      Expr *kw = copy_node(a);
      kw->lhs = leaf_of(v, -1);
      vec_push(&rest, kw);
    } else {
      vec_push(&rest, leaf_of(v, -1));
    }
  }
  if (!ok)
    return ty_error();
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(nl + 1));
  const char *saved = diag_set_field(NULL);
  for (int k = 0; k < nl && ok; k++) {
    Expr *le = copy_node(e);
    le->args = (Vec){0};
    vec_push(&le->args, type_arg(e->pos, &st->elems[k]));
    for (int i = 0; i < rest.len; i++)
      vec_push(&le->args, rest.data[i]);
    if (random)
      le->ival = leaf_stream(ty_leaf_path(st->sdef, k));
    vec_push(&e->leaves, le);
    diag_set_field_lazy(leaf_path_of, st->sdef, k);
    leaves[k] = tc_up.expr(c, le);
    ok = leaves[k].kind != TY_ERROR;
  }
  diag_set_field(saved);
  free(rest.data);
  return ok ? ty_struct_with(st, leaves) : ty_error();
}

/* A typed expression built here (its parts typed by the ordinary rules). */
/* A call of builtin `name` (bound now: a function of the program named
 * alike does not take it). */
static Expr *call2(Pos pos, const char *name, Expr *a, Expr *b) {
  Expr *callee = ast_expr(EX_NAME, pos);
  callee->str = arena_strdup(name);
  callee->tok.start = callee->str;
  callee->tok.len = (int)strlen(name);
  callee->tok.pos = pos;
  Vec args = {0};
  vec_push(&args, a);
  if (b)
    vec_push(&args, b);
  Expr *e = parse_call(callee, &args);
  e->bi = op_builtin(name);
  return e;
}

static Expr *as_type(Pos pos, Expr *x, const Type *t) {
  TypeExpr *te = arena_alloc(sizeof *te);
  te->pos = pos;
  Type *r = arena_alloc(sizeof *r);
  *r = *t;
  te->resolved = r;
  Expr *e = ast_expr(EX_AS, pos);
  e->lhs = x;
  e->type = te;
  e->tok = x->tok;
  return e;
}

static Expr *add(Pos pos, Expr *a, Expr *b) {
  Token t = {0};
  t.pos = pos;
  t.start = "+";
  t.len = 1;
  return parse_binary(BIN_ADD, a, b, t);
}

/* The sum of terms[lo..hi) as a balanced tree of additions: its depth, and
 * so the recursion of the passes that walk it, grows as log(n). */
static Expr *add_tree(Pos pos, Expr **terms, int lo, int hi) {
  if (hi - lo == 1)
    return terms[lo];
  int mid = lo + (hi - lo) / 2;
  return add(pos, add_tree(pos, terms, lo, mid), add_tree(pos, terms, mid, hi));
}

/* sum(p): every element of every field, in one scalar. Each leaf is summed
 * locally into a pending sum over the axes that shard it (and its own
 * pending axes); leaves with the same such axes are added, and each group
 * is reduced once: at most one all-reduce per distinct set of mesh axes. */
static Type lift_sum(TcCtx *c, Expr *e, Expr *x, const Type *st) {
  int nl = st->nelems;
  for (int i = 0; i < e->args.len; i++)
    if (((Expr *)e->args.data[i])->kind == EX_KWARG) {
      diag_error(((Expr *)e->args.data[i])->pos, "E_ARG", "sum of a struct adds every element of every field into "
                 "one scalar; it takes no %s=: sum a field instead (sum(p.FIELD, axis=...))",
                 ((Expr *)e->args.data[i])->str);
      return ty_error();
    }
  DType dt = st->elems[0].dtype;
  for (int k = 1; k < nl; k++)
    if (st->elems[k].dtype != dt) {
      diag_error(e->pos, "E_DTYPE", "sum of a struct needs fields of one dtype, but %s is %s and %s is %s; sum "
                 "the fields apart, or cast them", ty_leaf_path(st->sdef, 0), TS(&st->elems[0]),
                 ty_leaf_path(st->sdef, k), TS(&st->elems[k]));
      return ty_error();
    }
  AxisSet *gA = arena_alloc(sizeof(AxisSet) * (size_t)(nl + 1)), *gR = arena_alloc(sizeof(AxisSet) * (size_t)(nl + 1));
  AxisSet *gV = arena_alloc(sizeof(AxisSet) * (size_t)(nl + 1));
  int *group = arena_alloc(sizeof(int) * (size_t)(nl + 1));
  Expr **terms = arena_alloc(sizeof(Expr *) * (size_t)(nl + 1));
  int ng = 0;
  for (int k = 0; k < nl; k++) {
    const Type *l = &st->elems[k];
    AxisSet A = ty_dim_axes(l) | l->U;
    int g = 0;
    while (g < ng && !(gA[g] == A && gR[g] == l->R && gV[g] == l->V))
      g++;
    if (g == ng)
      gA[ng] = A, gR[ng] = l->R, gV[ng] = l->V, ng++;
    group[k] = g;
    Type part = ty_scalar(dt);
    part.U = A;
    part.R = l->R;
    part.V = l->V;
    terms[k] = as_type(e->pos, call2(e->pos, "sum", leaf_of(x, k), NULL), &part);
  }
  /* The terms of each group, summed as a balanced tree; then the groups. */
  Expr **sorted = arena_alloc(sizeof(Expr *) * (size_t)(nl + 1));
  Expr **reduced = arena_alloc(sizeof(Expr *) * (size_t)(ng + 1));
  for (int g = 0, at = 0; g < ng; g++) {
    int first = at;
    for (int k = 0; k < nl; k++)
      if (group[k] == g)
        sorted[at++] = terms[k];
    Expr *r = add_tree(e->pos, sorted, first, at);
    AxisSet reduce = gA[g] & ~c->manual;   /* a manual axis's pending sum stays: psum it */
    if (reduce) {
      Type to = ty_scalar(dt);
      to.U = gA[g] & c->manual;
      to.R = gR[g];
      to.V = gV[g];
      r = call2(e->pos, "reshard", r, type_arg(e->pos, &to));
    }
    reduced[g] = r;
  }
  Expr *total = add_tree(e->pos, reduced, 0, ng);
  vec_push(&e->leaves, total);
  return tc_up.expr(c, total);
}

/* reshard(s, T) of a struct s: each leaf resharded to the type of T's
 * leaf at the same path. T is s's own struct type or another with the same
 * leaves (paths, shapes and dtypes) sharded otherwise: the parameters and
 * their copy sharded over data for a sharded optimizer, the gradient of
 * whose all-gather is a reduce-scatter. */
static Type lift_reshard(TcCtx *c, Expr *e, Expr *x, const Expr *targ) {
  const Type *st = x->ty, *to = targ->type->resolved;   /* a struct type's, from resolve_type_names */
  if (to && to->kind == TY_ERROR)
    return ty_error();   /* reported where the type is declared */
  if (st->kind != TY_STRUCT || !to || to->kind != TY_STRUCT) {
    diag_error(e->pos, "E_ARG", "reshard: %s is %s but the type is %s; a struct is resharded to a struct type "
               "with the same fields (reshard(p, S)), an array to an array type", tc_expr_text(x),
               st->kind == TY_STRUCT ? arena_printf("the struct %s", TS(st)) : TS(st),
               to ? arena_printf("the struct %s", TS(to)) : tc_expr_text(targ));
    return ty_error();
  }
  int nl = st->nelems, bad = -1;
  bool same = st->rank == to->rank && nl == to->nelems;
  for (int d = 0; same && d < st->rank; d++)
    same = st->shape[d] == to->shape[d];
  for (int k = 0; same && k < nl && bad < 0; k++) {
    const Type *a = &st->elems[k], *b = &to->elems[k];
    bool ok = a->dtype == b->dtype && a->rank == b->rank &&
              (st->sdef == to->sdef || !strcmp(ty_leaf_path(st->sdef, k), ty_leaf_path(to->sdef, k)));
    for (int d = 0; ok && d < a->rank; d++)
      ok = a->shape[d] == b->shape[d];
    if (!ok)
      bad = k;
  }
  if (!same || bad >= 0) {
    const char *why = !same ? arena_printf("%d leaves and %d, or stacked differently", nl, to->nelems)
                            : arena_printf("its leaf %s is %s where %s has %s %s", ty_leaf_path(st->sdef, bad),
                                           TS(&st->elems[bad]), TS(to), ty_leaf_path(to->sdef, bad),
                                           TS(&to->elems[bad]));
    diag_error(e->pos, "E_SHAPE", "reshard: %s (%s) cannot become %s: %s; a struct is resharded to a struct with "
               "the same fields, shapes and dtypes, sharded otherwise", tc_expr_text(x), TS(st), TS(to), why);
    return ty_error();
  }
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(nl + 1));
  const char *saved = diag_set_field(NULL);
  bool ok = true;
  for (int k = 0; k < nl && ok; k++) {
    Expr *le = call2(e->pos, "reshard", leaf_of(x, k), type_arg(e->pos, &to->elems[k]));
    vec_push(&e->leaves, le);
    diag_set_field_lazy(leaf_path_of, st->sdef, k);
    leaves[k] = tc_up.expr(c, le);
    ok = leaves[k].kind != TY_ERROR;
  }
  diag_set_field(saved);
  return ok ? ty_struct_with(to, leaves) : ty_error();
}

bool tc_struct_op(TcCtx *c, Expr *e, const Type *annot, Type *out) {
  if (e->kind == EX_BINARY && e->op == BIN_MATMUL)
    return false;
  if (e->kind == EX_CALL) {
    if (!e->bi)
      return false;
    resolve_type_names(c, e);
    if (e->bi->flags & BIF_CREATION) {
      Expr *targ = e->args.len && ((Expr *)e->args.data[0])->kind == EX_TYPE ? e->args.data[0] : NULL;
      Type t = ty_error();
      if (targ && targ->type->resolved)
        t = *targ->type->resolved;
      else if (targ)
        return false;
      else if (annot && annot->kind == TY_STRUCT)
        t = *annot;
      else if (c->bound && c->bound->kind == TY_STRUCT && ast_through_operators(c->bound_expr, e, true))
        t = *c->bound;   /* var p: Model = normal(seed=1) * 0.02 (language.md 10.3) */
      if (t.kind != TY_STRUCT)
        return false;
      if (targ)
        for (int i = 0; i + 1 < e->args.len; i++)   /* the type is the leaves' */
          e->args.data[i] = e->args.data[i + 1];
      if (targ)
        e->args.len--;
      *out = lift_creation(c, e, &t);
      return true;
    }
    if (is_reshard(e) && e->args.len == 2 && ((Expr *)e->args.data[1])->kind == EX_TYPE) {
      Expr *x = e->args.data[0];
      const TypeExpr *te = ((Expr *)e->args.data[1])->type;
      Type xt = tc_up.expr(c, x);
      if (xt.kind != TY_STRUCT && !(te->resolved && te->resolved->kind == TY_STRUCT)) {
        x->pretyped = true;   /* the family's check types it again: once */
        return false;
      }
      *out = xt.kind == TY_ERROR ? ty_error() : lift_reshard(c, e, x, e->args.data[1]);
      return true;
    }
    if (!(e->bi->flags & (BIF_ELEMENTWISE | BIF_STRUCT_SUM)) && !is_pcast(e))
      return false;
  }
  Expr **ops[8];
  int nops = operand_slots(e, ops, is_pcast(e));
  const Type *st = NULL;
  bool bad = false;
  for (int j = 0; j < nops; j++) {
    Type t = tc_up.expr(c, *ops[j]);
    bad |= t.kind == TY_ERROR;
    if (t.kind == TY_STRUCT && (!st || (scalar_leaves(st) && !scalar_leaves(&t))))
      st = (*ops[j])->ty;   /* a mask's partner gives the result's type */
  }
  if (!st) {
    for (int j = 0; j < nops; j++)
      (*ops[j])->pretyped = true;   /* the family's check types them again: once */
    return false;
  }
  if (bad) {
    *out = ty_error();
    return true;
  }
  int *maps[8] = {0};
  for (int j = 0; j < nops; j++) {
    const Type *t = (*ops[j])->ty;
    bool mask = t->kind == TY_STRUCT && t->sdef != st->sdef && scalar_leaves(t);
    if (mask ? !(maps[j] = mask_map(c, e, st, *ops[j]))
             : t->kind == TY_STRUCT ? !check_same_struct(c, e, st, t) : !check_struct_partner(c, e, *ops[j], st)) {
      *out = ty_error();
      return true;
    }
  }
  if (e->kind == EX_CALL && (e->bi->flags & BIF_STRUCT_SUM)) {
    if (nops != 1) {
      diag_error(e->pos, "E_ARG", "sum takes one struct: sum(p)");
      *out = ty_error();
      return true;
    }
    *out = lift_sum(c, e, *ops[0], st);
    return true;
  }
  *out = lift_elementwise(c, e, ops, maps, nops, st);
  return true;
}

/* ---- save and load (§9.5) ------------------------------------------------------------ */

/* A str literal made here: "/h.w.npy". */
static Expr *str_lit(Pos pos, const char *s) {
  Expr *e = ast_expr(EX_STRING, pos);
  e->str = arena_strdup(s);
  e->ival = (int64_t)strlen(s);
  e->tok.start = e->str;
  e->tok.len = (int)strlen(s);
  e->tok.pos = pos;
  return e;
}

/* A call of a row that is not in the registry's table (save's two halves,
 * which the save row hands over). */
static Expr *call_internal(Pos pos, const BuiltinDef *bi, Expr *a, Expr *b) {
  Expr *e = call2(pos, "save", a, b);
  e->bi = bi;
  return e;
}

/* DIR's leaf file: dir + "/h.w.npy", a str expression. */
static Expr *leaf_file(Pos pos, Expr *dir, const char *path) {
  return add(pos, dir, str_lit(pos, arena_printf("/%s.npy", path)));
}

Type tc_struct_save(TcCtx *c, Expr *e, Expr *dir, Expr *x, const BuiltinDef *begin_row,
                    const BuiltinDef *commit_row) {
  const Type *st = x->ty;
  Expr *begin = call_internal(e->pos, begin_row, leaf_of(dir, -1), NULL);
  if (tc_up.expr(c, begin).kind == TY_ERROR)
    return ty_error();
  Expr *tmp = leaf_of(begin, -1);
  bool ok = true;
  for (int k = 0; k < st->nelems && ok; k++) {
    Expr *s = call2(e->pos, "save", leaf_file(e->pos, tmp, ty_leaf_path(st->sdef, k)), leaf_of(x, k));
    vec_push(&e->leaves, s);
    ok = tc_up.expr(c, s).kind != TY_ERROR;
  }
  Expr *commit = call_internal(e->pos, commit_row, tmp, leaf_of(dir, -1));
  vec_push(&e->leaves, commit);
  ok = ok && tc_up.expr(c, commit).kind != TY_ERROR;
  return ok ? ty_void() : ty_error();
}

Type tc_struct_load(TcCtx *c, Expr *e, Expr *dir, const Type *annot) {
  int nl = annot->nelems;
  Type *leaves = arena_alloc(sizeof(Type) * (size_t)(nl + 1));
  if (tc_up.expr(c, dir).kind == TY_ERROR)
    return ty_error();
  Expr *d = leaf_of(dir, -1);
  const char *saved = diag_set_field(NULL);
  bool ok = true;
  for (int k = 0; k < nl && ok; k++) {
    Expr *l = call2(e->pos, "load", leaf_file(e->pos, d, ty_leaf_path(annot->sdef, k)), NULL);
    vec_push(&e->leaves, l);
    diag_set_field_lazy(leaf_path_of, annot->sdef, k);
    leaves[k] = tc_up.expr_with(c, l, &annot->elems[k]);
    ok = leaves[k].kind != TY_ERROR;
  }
  diag_set_field(saved);
  return ok ? ty_struct_with(annot, leaves) : ty_error();
}
