/* parse.c: drives the Lemon parser and builds the syntax tree.
 *
 * Input: a source file. Output: a Program (mesh, constants, functions).
 * The grammar actions in grammar.y are one-liners that call the builders
 * here (SQLite's habit), so all tree-building logic is in this file. Syntax
 * errors are reported as [E_SYNTAX] in the user's terms; Lemon's `error`
 * rule resynchronises at the next statement, so one run reports several.
 */
#include "shdc.h"
#include "grammar.h"

static const char *describe(Token t) {
  const char *name = lex_token_name(t.kind);
  if (t.kind == TK_STRING || t.kind == TK_IDENT || t.kind == TK_INT || t.kind == TK_FLOAT || t.kind == TK_DTYPE)
    return arena_printf("%s '%.*s'", name, t.len, t.start);
  if (name)
    return name;
  return arena_printf("'%.*s'", t.len, t.start);
}

/* Tokens after which the lexer keeps reading the next line: an error on
 * the next line's first token is really this line's incomplete end. */
static bool continues_line(int kind) {
  switch (kind) {
  case TK_PLUS: case TK_MINUS: case TK_STAR: case TK_SLASH: case TK_AT: case TK_LT: case TK_LE: case TK_GT:
  case TK_GE: case TK_EQEQ: case TK_NE: case TK_ASSIGN: case TK_COMMA: case TK_COLON: case TK_LPAREN:
  case TK_LBRACKET: case TK_ARROW: case TK_DOTDOT: case TK_AS: case TK_IN: case TK_LET: case TK_VAR:
  case TK_FOR: case TK_IF: case TK_FN: case TK_CONST: case TK_MESH: case TK_DOT: case TK_STRUCT: case TK_IMPORT:
    return true;
  default:
    return false;
  }
}

void parse_syntax_error(ParseCtx *pc, Token tok) {
  pc->failed = true;
  pc->error_now = true;
  Token prev = pc->prev;
  if (tok.kind && prev.len && tok.pos.line > prev.pos.line && continues_line(prev.kind)) {
    Pos end = prev.pos;
    end.col += prev.len;
    diag_error(end, "E_SYNTAX", "syntax error: this line ends after '%.*s', in the middle of a %s; the next line "
               "starts with %s",
               prev.len, prev.start, prev.kind == TK_COMMA || prev.kind == TK_LPAREN ? "list" : "statement",
               describe(tok));
    return;
  }
  const char *hint = "";
  if ((tok.kind == TK_NL || tok.kind == 0) && prev.len && prev.kind != TK_NL) {
    /* Point just after the last token, not at the end of a comment. */
    Pos end = prev.pos;
    end.col += prev.len;
    diag_error(end, "E_SYNTAX", "syntax error: %s after '%.*s'; the expression or statement is incomplete",
               tok.kind ? "the line ends" : "the file ends", prev.len, prev.start);
    return;
  }
  if (tok.kind == TK_NL || tok.kind == 0)
    hint = "; the expression or statement is incomplete";
  else if (tok.kind == TK_ASSIGN)
    hint = "; bind a name with `let NAME = ...`, or assign a `var`";
  else if (tok.kind == TK_LBRACE)
    hint = "; a block must follow `fn NAME(...)`, `for`, `if` or `else`";
  else if (tok.kind == TK_ELSE)
    hint = "; `else` must follow the closing brace of an `if` block";
  else if (tok.kind == TK_LT || tok.kind == TK_LE || tok.kind == TK_GT || tok.kind == TK_GE || tok.kind == TK_EQEQ ||
           tok.kind == TK_NE)
    hint = "; comparisons do not chain (a < b < c): compare two values at a time";
  diag_error(tok.pos, "E_SYNTAX", "syntax error: unexpected %s%s", describe(tok), hint);
}

/* The parser's stack has room for 1000 open constructs. */
void parse_too_deep(ParseCtx *pc) {
  pc->failed = true;
  pc->error_now = true;
  diag_error(pc->last.pos, "E_SYNTAX",
             "the program nests too deeply here (more than about 1000 open parentheses, brackets, blocks or "
             "operators); split the expression with `let`");
}

/* Later stages walk expressions recursively; a chain like 1+1+...+1 is
 * parsed without growing the parser's stack but would exhaust theirs. */
#define MAX_EXPR_DEPTH 1000

static int max_depth(int a, int b) { return a > b ? a : b; }

static void check_depth(ParseCtx *pc, Expr *e) {
  if (e && e->depth > MAX_EXPR_DEPTH) {
    pc->failed = true;
    diag_error(e->pos, "E_SYNTAX", "this expression nests %d levels deep (at most %d); split it with `let`",
               e->depth, MAX_EXPR_DEPTH);
  }
}

static void check_block_depth(ParseCtx *pc, Block *b) {
  for (int i = 0; b && i < b->stmts.len; i++) {
    Stmt *s = b->stmts.data[i];
    check_depth(pc, s->expr);
    check_depth(pc, s->hi);
    check_block_depth(pc, s->body);
    check_block_depth(pc, s->els);
  }
}

/* ---- types ------------------------------------------------------------ */

static DType dtype_of(Token t) {
  if (tok_eq(t, "f32")) return DT_F32;
  if (tok_eq(t, "f64")) return DT_F64;
  if (tok_eq(t, "i32")) return DT_I32;
  if (tok_eq(t, "bf16")) return DT_BF16;
  return DT_BOOL;
}

TypeExpr *parse_type(ParseCtx *pc, Token dtype) {
  TypeExpr *t = arena_alloc(sizeof *t);
  t->pos = dtype.pos;
  t->dtype = dtype_of(dtype);
  t->str = tok_eq(dtype, "str");
  return t;
}

/* A struct or a type parameter, by name; stacked dims (S[N@X]) follow. */
TypeExpr *parse_named_type(ParseCtx *pc, Token name) {
  TypeExpr *t = arena_alloc(sizeof *t);
  t->pos = name.pos;
  t->named = true;
  t->name = name;
  return t;
}

DimExpr parse_dim(Token size, Vec *axes, bool paren) {
  DimExpr d;
  memset(&d, 0, sizeof d);
  d.size = size;
  d.paren = paren;
  for (int i = 0; axes && i < axes->len; i++) {
    if (d.naxes < MAX_AXES)
      d.axes[d.naxes] = *(Token *)axes->data[i];
    d.naxes++;
  }
  return d;
}

void parse_type_dim(ParseCtx *pc, TypeExpr *t, DimExpr d, Pos pos) {
  if (t->ndims_written++ >= MAX_RANK)
    return;   /* reported by tc_resolve_type */
  if (d.naxes > MAX_AXES) {
    diag_error(pos, "E_SPEC", "a dim can be sharded over at most %d axes", MAX_AXES);
    d.naxes = MAX_AXES;
  }
  /* Grown one at a time (a type has a few dims): a program of many
   * signatures keeps only the dims it wrote. */
  DimExpr *dims = arena_alloc(sizeof(DimExpr) * (size_t)(t->rank + 1));
  if (t->rank)
    memcpy(dims, t->dims, sizeof(DimExpr) * (size_t)t->rank);
  dims[t->rank++] = d;
  t->dims = dims;
}

void parse_type_annot(ParseCtx *pc, TypeExpr *t, char kind, Vec *axes, Pos pos) {
  if (t->nannots >= 6) {
    diag_error(pos, "E_SPEC", "too many annotations on one type; write each of U, R, V once");
    return;
  }
  AnnotExpr *annots = arena_alloc(sizeof(AnnotExpr) * (size_t)(t->nannots + 1));
  if (t->nannots)
    memcpy(annots, t->annots, sizeof(AnnotExpr) * (size_t)t->nannots);
  t->annots = annots;
  AnnotExpr *a = &t->annots[t->nannots++];
  a->kind = kind;
  a->pos = pos;
  if (axes->len > MAX_AXES)
    diag_error(pos, "E_SPEC", "an annotation names %d axes, but a mesh has at most %d; name each axis once",
               axes->len, MAX_AXES);
  for (int i = 0; i < axes->len && a->naxes < MAX_AXES; i++)
    a->axes[a->naxes++] = *(Token *)axes->data[i];
}

/* ---- expressions -------------------------------------------------------- */

static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* \xHH: any byte but NUL (strings reach the runtime as C strings). */
static bool unescape_hex(ParseCtx *pc, Token t, int *i, Str *s) {
  int hi = *i + 2 < t.len - 1 ? hex_digit(t.start[*i + 1]) : -1, lo = hi >= 0 ? hex_digit(t.start[*i + 2]) : -1;
  Pos p = t.pos;
  p.col += *i - 1;
  if (lo < 0 || (hi | lo) == 0) {
    diag_error(p, "E_SYNTAX", "\\x takes two hex digits of a byte from 01 to ff, e.g. \\x1b");
    pc->failed = true;
    return false;
  }
  str_putc(s, (char)(hi * 16 + lo));
  *i += 2;
  return true;
}

static char *unescape(ParseCtx *pc, Token t, int64_t *len) {
  Str s = {0};
  for (int i = 1; i < t.len - 1; i++) {
    char c = t.start[i];
    if (c != '\\') {
      str_putc(&s, c);
      continue;
    }
    c = t.start[++i];
    switch (c) {
    case 'n': str_putc(&s, '\n'); break;
    case 't': str_putc(&s, '\t'); break;
    case 'r': str_putc(&s, '\r'); break;
    case '\\': str_putc(&s, '\\'); break;
    case '"': str_putc(&s, '"'); break;
    case 'x': unescape_hex(pc, t, &i, &s); break;
    default: {
      Pos p = t.pos;
      p.col += i - 1;
      diag_error(p, "E_SYNTAX", "unknown escape '\\%c' in string; use \\n, \\t, \\r, \\\\, \\\" or \\xHH", c);
      pc->failed = true;
    }
    }
  }
  char *r = arena_strndup(s.buf ? s.buf : "", s.len);
  *len = (int64_t)s.len;
  free(s.buf);
  return r;
}

Expr *parse_literal(ParseCtx *pc, ExprKind kind, Token tok) {
  Expr *e = ast_expr(kind, tok.pos);
  e->tok = tok;
  switch (kind) {
  case EX_INT: {
    char *s = tok_str(tok);
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (v > 2147483647ULL * 4096ULL) {
      diag_error(tok.pos, "E_SYNTAX", "integer literal %s is too large", s);
      pc->failed = true;
    }
    e->ival = (int64_t)v;
    e->fval = (double)v;
    break;
  }
  case EX_FLOAT:
    e->fval = strtod(tok_str(tok), NULL);
    break;
  case EX_STRING:
    e->str = unescape(pc, tok, &e->ival);   /* ival: the length (a \x00 is a byte too) */
    break;
  case EX_BOOL:
    e->ival = tok_eq(tok, "true");
    break;
  case EX_NAME:
    e->str = tok_str(tok);
    break;
  default:
    break;
  }
  return e;
}

Expr *parse_binary(int op, Expr *l, Expr *r, Token optok) {
  Expr *e = ast_expr(EX_BINARY, optok.pos);
  e->op = op;
  e->tok = optok;
  e->lhs = l;
  e->rhs = r;
  e->depth = 1 + max_depth(l->depth, r->depth);
  return e;
}

Expr *parse_unary(int op, Expr *x, Token optok) {
  Expr *e = ast_expr(EX_UNARY, optok.pos);
  e->op = op;
  e->tok = optok;
  e->lhs = x;
  e->depth = 1 + x->depth;
  return e;
}

Expr *parse_call(Expr *callee, Vec *args) {
  Expr *e = ast_expr(EX_CALL, callee->pos);
  e->callee = callee;
  e->args = *args;
  e->tok = callee->tok;
  e->depth = 1 + callee->depth;
  for (int i = 0; i < args->len; i++)
    e->depth = max_depth(e->depth, 1 + ((Expr *)args->data[i])->depth);
  return e;
}

Expr *parse_kwarg(Token name, Expr *value) {
  Expr *e = ast_expr(EX_KWARG, name.pos);
  e->tok = name;
  e->str = tok_str(name);
  e->lhs = value;
  e->depth = 1 + value->depth;
  return e;
}

Expr *parse_seq(ExprKind kind, Vec *elems, Pos pos) {
  Expr *e = ast_expr(kind, pos);
  e->args = *elems;
  for (int i = 0; i < elems->len; i++)
    if (elems->data[i])
      e->depth = max_depth(e->depth, 1 + ((Expr *)elems->data[i])->depth);
  return e;
}

Expr *parse_as(Expr *x, TypeExpr *t, Token astok) {
  Expr *e = ast_expr(EX_AS, astok.pos);
  e->tok = astok;
  e->lhs = x;
  e->type = t;
  e->depth = 1 + x->depth;
  return e;
}

Expr *parse_index(Expr *x, Vec *items, Token lbracket) {
  Expr *e = ast_expr(EX_INDEX, lbracket.pos);
  e->tok = lbracket;
  e->lhs = x;
  e->args = *items;
  e->depth = 1 + x->depth;
  for (int i = 0; i < items->len; i++)
    e->depth = max_depth(e->depth, 1 + ((Expr *)items->data[i])->depth);
  return e;
}

Expr *parse_slice(Expr *lo, Expr *hi, Token colon) {
  Expr *e = ast_expr(EX_SLICE, colon.pos);
  e->tok = colon;
  e->lhs = lo;
  e->rhs = hi;
  e->depth = 1 + max_depth(lo ? lo->depth : 0, hi ? hi->depth : 0);
  return e;
}

Expr *parse_field(Expr *x, Token name, Token dot) {
  Expr *e = ast_expr(EX_FIELD, name.pos);
  e->tok = name;
  e->str = tok_str(name);
  e->lhs = x;
  e->depth = 1 + x->depth;
  return e;
}

Expr *parse_type_expr(TypeExpr *t) {
  Expr *e = ast_expr(EX_TYPE, t->pos);
  e->type = t;
  return e;
}

/* ---- statements and blocks ---------------------------------------------- */

Stmt *parse_stmt_let(Token kw, Token name, TypeExpr *t, Expr *e, StmtKind k) {
  Stmt *s = ast_stmt(k, name.pos);
  s->name = name;
  s->type = t;
  s->expr = e;
  return s;
}

Stmt *parse_stmt_let_tuple(Token kw, Vec *names, Expr *e) {
  Stmt *s = ast_stmt(ST_LET_TUPLE, kw.pos);
  s->names = *names;
  s->expr = e;
  return s;
}

static Stmt *assign_one(ParseCtx *pc, Expr *target, Expr *e);

/* (a, p.w, _) = e (language.md 10.3): `let (_tupN_0, _tupN_1, _) = e`
 * then `a = _tupN_0`, `p.w = _tupN_1` as the let's `then`, so each
 * element is assigned, typed and carried as a single assignment is. The
 * hidden names start with `_` (never warned about) and are C names. */
static Stmt *assign_tuple(ParseCtx *pc, Expr *target, Token assign, Expr *e) {
  static int ntuples;
  int id = ntuples++;
  Vec names = {0}, then = {0};
  bool ok = true;
  for (int i = 0; i < target->args.len; i++) {
    Expr *el = target->args.data[i];
    Token *name = arena_alloc(sizeof *name);
    *name = el->tok;
    if (el->kind == EX_NAME && tok_eq(el->tok, "_")) {
      vec_push(&names, name);
      continue;
    }
    char *hidden = arena_printf("_tup%d_%d", id, i);
    name->start = hidden;
    name->len = (int)strlen(hidden);
    name->pos = el->pos;
    vec_push(&names, name);
    Expr *ref = ast_expr(EX_NAME, el->pos);
    ref->tok = *name;
    ref->str = hidden;
    Stmt *a = assign_one(pc, el, ref);
    if (!a) {
      ok = false;
      continue;
    }
    a->tuple_elem = i + 1;
    vec_push(&then, a);
  }
  if (!ok)
    return NULL;
  Stmt *s = parse_stmt_let_tuple(assign, &names, e);
  s->pos = target->pos;
  s->then = then;
  s->tuple_elem = -1;
  return s;
}

/* NAME = e, or NAME.f.g = e (a field of a struct var), or a tuple of
 * these; anything else on the left is a syntax error. */
Stmt *parse_stmt_assign(ParseCtx *pc, Expr *target, Token assign, Expr *e) {
  if (target->kind == EX_TUPLE)
    return assign_tuple(pc, target, assign, e);
  return assign_one(pc, target, e);
}

/* The statements of a sequence: s and those it stands for (a tuple
 * assignment's). */
void parse_push_stmt(Vec *stmts, Stmt *s) {
  if (!s)
    return;
  vec_push(stmts, s);
  for (int i = 0; i < s->then.len; i++)
    vec_push(stmts, s->then.data[i]);
}

static Stmt *assign_one(ParseCtx *pc, Expr *target, Expr *e) {
  Vec path = {0};
  Expr *t = target;
  while (t->kind == EX_FIELD) {
    vec_push(&path, &t->tok);
    t = t->lhs;
  }
  if (t->kind != EX_NAME) {
    diag_error(target->pos, "E_SYNTAX",
               "cannot assign to %s; the left of `=` is a var, a field of one (p.w = ...) or a tuple of these "
               "((a, p.w, _) = ...)",
               t->kind == EX_INDEX ? "an indexing expression (use dynamic_update_slice)" : "an expression");
    pc->failed = true;
    return NULL;
  }
  for (int i = 0, j = path.len - 1; i < j; i++, j--) {   /* outermost field first */
    void *x = path.data[i];
    path.data[i] = path.data[j];
    path.data[j] = x;
  }
  Stmt *s = ast_stmt(ST_ASSIGN, t->tok.pos);
  s->name = t->tok;
  s->path = path;
  s->expr = e;
  return s;
}

Stmt *parse_stmt_for(Token kw, Token var, Expr *lo, Expr *hi, Block *b) {
  Stmt *s = ast_stmt(ST_FOR, kw.pos);
  s->name = var;
  s->expr = lo;
  s->hi = hi;
  s->body = b;
  return s;
}

Stmt *parse_stmt_if(Token kw, Expr *c, Block *then, Block *els) {
  Stmt *s = ast_stmt(ST_IF, kw.pos);
  s->expr = c;
  s->body = then;
  s->els = els;
  return s;
}

Stmt *parse_stmt_return(Token kw, Expr *e) {
  Stmt *s = ast_stmt(ST_RETURN, kw.pos);
  s->expr = e;
  return s;
}

Stmt *parse_stmt_expr(Expr *e) {
  Stmt *s = ast_stmt(ST_EXPR, e->pos);
  s->expr = e;
  return s;
}

Block *parse_block(Token lbrace, Vec *stmts) {
  Block *b = arena_alloc(sizeof *b);
  b->pos = lbrace.pos;
  b->stmts = *stmts;
  return b;
}

Block *parse_block_of(Stmt *s) {
  Block *b = arena_alloc(sizeof *b);
  b->pos = s->pos;
  vec_push(&b->stmts, s);
  return b;
}

/* ---- items ---------------------------------------------------------------- */

Param *parse_param(Token name, TypeExpr *t) {
  Param *p = arena_alloc(sizeof *p);
  p->name = name;
  p->type = t;
  return p;
}

/* A function's parameter: `x: TYPE`, or one bound at each call
 * (language.md 10.4): `f: fn` (fn a token of that keyword, else t) or
 * `ax: axis`. */
Param *parse_meta_param(ParseCtx *pc, Token name, TypeExpr *t, Token fn) {
  if (!t) {
    t = parse_named_type(pc, fn);   /* named `fn`, as messages and hovers print it */
    t->meta = 'f';
  } else if (t->named && !t->rank && !t->nannots && tok_eq(t->name, "axis")) {
    t->meta = 'a';
  }
  return parse_param(name, t);
}

FuncDecl *parse_func_head(Token name, Vec *params, Vec *results, bool tuple) {
  FuncDecl *f = arena_alloc(sizeof *f);
  f->name = name;
  f->pos = name.pos;
  f->params = *params;
  f->result_tuple = tuple;
  f->results = (TypeExpr **)results->data;
  f->nresults = results->len;
  return f;
}

/* fn NAME<A, B>(...): a generic function (language.md §9.3). */
void parse_type_params(FuncDecl *f, Vec *names) {
  f->ntparams = names->len;
  f->tparams = arena_alloc(sizeof(Token) * (size_t)(names->len + 1));
  for (int i = 0; i < names->len; i++)
    f->tparams[i] = *(Token *)names->data[i];
}

static void add_item(ParseCtx *pc, ItemKind kind, void *decl) {
  Item *it = arena_alloc(sizeof *it);
  it->kind = kind;
  it->decl = decl;
  vec_push(&pc->prog->items_order, it);
}

void parse_func(ParseCtx *pc, FuncDecl *f) {
  check_block_depth(pc, f->body);
  vec_push(&pc->prog->funcs, f);
  add_item(pc, ITEM_FUNC, f);
}

void parse_import(ParseCtx *pc, Token kw, Token path) {
  Expr *s = parse_literal(pc, EX_STRING, path);
  ImportDecl *d = arena_alloc(sizeof *d);
  d->pos = path.pos;
  d->path = s->str;
  if ((size_t)s->ival != strlen(s->str) || !s->ival) {
    diag_error(path.pos, "E_IMPORT", "import takes a file name: import \"std/nn.shd\"");
    pc->failed = true;
    return;
  }
  add_item(pc, ITEM_IMPORT, d);
  vec_push(&pc->prog->imports, d);
}

void parse_manual(ParseCtx *pc, FuncDecl *f, Token kw, Vec *axes) {
  f->manual = true;
  f->manual_pos = kw.pos;
  check_block_depth(pc, f->body);
  for (int i = 0; i < axes->len; i++) {
    if (f->nmanual >= MAX_AXES) {
      diag_error(kw.pos, "E_SPEC", "a mesh has at most %d axes", MAX_AXES);
      break;
    }
    f->manual_axes[f->nmanual++] = *(Token *)axes->data[i];
  }
  vec_push(&pc->prog->funcs, f);
  add_item(pc, ITEM_FUNC, f);
}

void parse_mesh(ParseCtx *pc, Token kw, Vec *names, Vec *sizes) {
  Program *p = pc->prog;
  p->nmesh_decls++;
  if (p->mesh) {
    diag_error(kw.pos, "E_SYNTAX", "a file declares one mesh; this is a second `mesh`");
    diag_note(p->mesh->pos, "the first mesh is declared here");
    return;
  }
  MeshDecl *m = arena_alloc(sizeof *m);
  m->pos = kw.pos;
  for (int i = 0; i < names->len; i++) {
    if (m->naxes >= MAX_AXES) {
      diag_error(((Token *)names->data[i])->pos, "E_SPEC", "a mesh has at most %d axes", MAX_AXES);
      break;
    }
    m->names[m->naxes] = *(Token *)names->data[i];
    m->sizes[m->naxes] = sizes->data[i];
    check_depth(pc, sizes->data[i]);
    m->naxes++;
  }
  p->mesh = m;
}

void parse_struct(ParseCtx *pc, Token kw, Token name, Vec *fields) {
  StructDecl *d = arena_alloc(sizeof *d);
  d->name = name;
  d->pos = name.pos;
  d->fields = *fields;
  vec_push(&pc->prog->structs, d);
  add_item(pc, ITEM_STRUCT, d);
}

void parse_const(ParseCtx *pc, Token name, Expr *value) {
  check_depth(pc, value);
  ConstDecl *c = arena_alloc(sizeof *c);
  c->name = name;
  c->value = value;
  vec_push(&pc->prog->consts, c);
  add_item(pc, ITEM_CONST, c);
}

Program *parse_file(const SourceFile *file) {
  ParseCtx pc;
  memset(&pc, 0, sizeof pc);
  pc.file = file;
  pc.prog = arena_alloc(sizeof *pc.prog);
  pc.prog->file = file;
  Lexer lx;
  lex_init(&lx, file);
  void *parser = ParseAlloc(mem_alloc);
  /* After a syntax error the rest of the statement is skipped, a { } block
   * in it included, up to the end of its line or an unmatched }; then
   * parsing goes on with the next statement, so one run reports the errors
   * of many statements without cascades. */
  bool skipping = false;
  int depth = 0;
  for (;;) {
    Token t = lex_next(&lx);
    if (skipping) {
      if (t.kind == TK_LBRACE)
        depth++;
      if (t.kind == TK_RBRACE && depth > 0) {
        depth--;
        continue;
      }
      if (t.kind && !(depth == 0 && (t.kind == TK_NL || t.kind == TK_RBRACE)))
        continue;
    }
    pc.prev = pc.last;
    pc.last = t;
    pc.error_now = false;
    /* The token that ends a skipped statement can still be an error to
     * Lemon (its recovery may have reduced past the statement list); it
     * stays silent, as Lemon is still counting, and only then is the
     * count cleared. */
    Parse(parser, t.kind, t, &pc);
    if (t.kind == 0)
      break;
    if (pc.error_now && !skipping && t.kind != TK_NL && t.kind != TK_RBRACE) {
      skipping = true;
      depth = t.kind == TK_LBRACE;
      continue;
    }
    if (pc.error_now || skipping)
      ParseErrorsReported(parser);
    skipping = false;
  }
  ParseFree(parser, free);
  return pc.prog;
}
