/* diag_fix.c: structured fixes, from "what to write" to "replace this range".
 *
 * Error sites say what a fix is in terms they know: an expression to wrap
 * (reshard(EXPR, TYPE)), an operand of the operator at the error's position
 * (rules.c sees only types), an annotation to add, or a raw range. The
 * fixes stay pending until the diagnostics document is written; then they
 * are resolved against the parsed program: the expression's source extent
 * is the span of its tokens (tokens point into the source text), widened
 * over the brackets its tokens leave open or closed (a call's `)`, a type's
 * `]`, a parenthesised operand), and the replacement is built from that
 * exact text. A fix that cannot be placed exactly is dropped.
 *
 * Invariant: a resolved fix replaces a range of one file's text, given as
 * 1-based line and column (bytes) positions, `to` exclusive.
 */
#include "shdc.h"

/* ---- the API the error sites call ---------------------------------------- */

void diag_fix_replace(Pos from, Pos to, const char *text, const char *what) {
  PendingFix f = {.kind = FIX_RANGE, .at = from, .from = from, .to = to, .text = text, .what = what};
  diagout_add_fix(&f);
}

void diag_fix_wrap(const Expr *e, const char *before, const char *after, const char *what) {
  if (!e)
    return;
  PendingFix f = {.kind = FIX_WRAP_EXPR, .at = e->pos, .expr = e, .before = before, .after = after, .what = what};
  diagout_add_fix(&f);
}

void diag_fix_wrap_operand(int k, const char *before, const char *after, const char *what) {
  PendingFix f = {.kind = FIX_WRAP_OPERAND, .operand = k, .before = before, .after = after, .what = what};
  diagout_add_fix(&f);
}

void diag_fix_annotate(const char *type, const char *what) {
  PendingFix f = {.kind = FIX_ANNOTATE, .text = type, .what = what};
  diagout_add_fix(&f);
}

void diag_fix_keyword(Pos name, const char *old, const char *text, const char *what) {
  PendingFix f = {.kind = FIX_KEYWORD, .at = name, .before = old, .text = text, .what = what};
  diagout_add_fix(&f);
}

/* ---- positions and pointers --------------------------------------------------- */

static const char *ptr_of(const SourceFile *f, Pos p) {
  if (!f || p.line <= 0)
    return NULL;
  size_t len, plen;
  const char *s = diag_line_text(f, p.line, &len);   /* O(1): an index of the lines */
  if (s == f->text + f->len && p.line > 1) {   /* the empty line after a last '\n', or past the end */
    const char *prev = diag_line_text(f, p.line - 1, &plen);
    if (prev + plen + 1 != s)
      return NULL;
  }
  return p.col >= 1 && (size_t)(p.col - 1) <= len ? s + p.col - 1 : NULL;
}

static Pos pos_of(const SourceFile *f, const char *p) {
  Pos r = {f, 1, 1};
  for (const char *s = f->text; s < p; s++) {
    if (*s == '\n') {
      r.line++;
      r.col = 1;
    } else {
      r.col++;
    }
  }
  return r;
}

/* The position of p, a pointer into f's text near line `line`: found from
 * that line's start (diag_line_text's index) in the distance between them,
 * not from the start of the file. */
static Pos pos_near(const SourceFile *f, int line, const char *p) {
  size_t len;
  const char *start = diag_line_text(f, line, &len);
  while (p < start && line > 1)
    start = diag_line_text(f, --line, &len);
  for (const char *q = start; q < p; q++)
    if (*q == '\n') {
      line++;
      start = q + 1;
    }
  return (Pos){f, line, (int)(p - start) + 1};
}

static bool ident_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* `<U:` `<R:` `<V:` with optional blanks: the length, or 0. */
static int annot_open(const char *s) {
  if (*s != '<')
    return 0;
  const char *p = s + 1;
  while (*p == ' ' || *p == '\t')
    p++;
  if (*p != 'U' && *p != 'R' && *p != 'V')
    return 0;
  p++;
  while (*p == ' ' || *p == '\t')
    p++;
  return *p == ':' ? (int)(p + 1 - s) : 0;
}

static const char *token_end(const char *s) {
  if (!*s || *s == '\n')
    return s;
  if (ident_char(*s)) {
    bool num = *s >= '0' && *s <= '9';
    while (ident_char(*s) || (num && *s == '.' && s[1] >= '0' && s[1] <= '9') ||
           (num && (s[-1] == 'e' || s[-1] == 'E') && (*s == '+' || *s == '-')))
      s++;
    return s;
  }
  if (*s == '"') {
    for (s++; *s && *s != '\n' && *s != '"'; s++)
      if (*s == '\\' && s[1] && s[1] != '\n')
        s++;
    return *s == '"' ? s + 1 : s;
  }
  int a = annot_open(s);
  if (a)
    return s + a;
  static const char *two[] = {"->", "..", "<=", ">=", "==", "!=", "**"};
  for (size_t i = 0; i < sizeof two / sizeof *two; i++)
    if (s[0] == two[i][0] && s[1] == two[i][1])
      return s + 2;
  return s + 1;
}

int diag_token_end(Pos pos) {
  const char *p = ptr_of(pos.file, pos);
  return p ? pos.col + (int)(token_end(p) - p) : pos.col;
}

/* ---- the source extent of an expression ------------------------------------- */

typedef struct {
  const SourceFile *file;
  const char *lo, *hi;
} Span;

static void span_range(Span *s, const char *a, const char *b) {
  if (!a || b <= a)
    return;
  if (!s->lo || a < s->lo)
    s->lo = a;
  if (!s->hi || b > s->hi)
    s->hi = b;
}

static void span_tok(Span *s, Token t) {
  if (t.start && t.len > 0 && t.start >= s->file->text && t.start + t.len <= s->file->text + s->file->len)
    span_range(s, t.start, t.start + t.len);
}

static void span_pos(Span *s, Pos p) {
  const char *q = p.file == s->file ? ptr_of(s->file, p) : NULL;
  if (q)
    span_range(s, q, token_end(q));
}

static void span_type(Span *s, const TypeExpr *t) {
  if (!t)
    return;
  span_pos(s, t->pos);
  int nd = t->ndims_written < MAX_RANK ? t->ndims_written : MAX_RANK;
  for (int d = 0; d < nd; d++) {
    span_tok(s, t->dims[d].size);
    for (int a = 0; a < t->dims[d].naxes; a++)
      span_tok(s, t->dims[d].axes[a]);
  }
  for (int i = 0; i < t->nannots; i++) {
    span_pos(s, t->annots[i].pos);
    for (int a = 0; a < t->annots[i].naxes; a++)
      span_tok(s, t->annots[i].axes[a]);
  }
}

static const char *skip_blank(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    p++;
  return p;
}

static void span_expr(Span *s, const Expr *e) {
  if (!e)
    return;
  switch (e->kind) {
  case EX_TUPLE: case EX_LIST:
    span_pos(s, e->pos);
    break;
  case EX_TYPE:
    break;
  default:
    span_tok(s, e->tok);
  }
  span_expr(s, e->lhs);
  span_expr(s, e->rhs);
  span_expr(s, e->callee);
  for (int i = 0; i < e->args.len; i++)
    span_expr(s, e->args.data[i]);
  span_type(s, e->type);
  if (e->kind == EX_CALL && !e->args.len && e->callee && e->callee->tok.start) {
    /* f(): no token of the call stands for its parentheses. */
    const char *p = e->callee->tok.start + e->callee->tok.len, *end = s->file->text + s->file->len;
    p = skip_blank(p, end);
    if (p < end && *p == '(') {
      p = skip_blank(p + 1, end);
      if (p < end && *p == ')')
        span_range(s, e->callee->tok.start, p + 1);
    }
  }
}

static char closer_of(char open) { return open == '(' ? ')' : open == '[' ? ']' : open == '{' ? '}' : '>'; }

/* Widens [lo, hi) so that its brackets balance: closers the tokens leave
 * open are taken in after hi, openers before lo. False if that fails. */
static bool balance(Span *s) {
  char stack[256], missing[256];
  int depth = 0, nmissing = 0;
  const char *text_end = s->file->text + s->file->len;
  for (const char *p = s->lo; p < s->hi; p++) {
    if (*p == '"') {
      p = token_end(p) - 1;
      continue;
    }
    if (p[0] == '/' && p[1] == '/') {
      while (p + 1 < s->hi && p[1] != '\n')
        p++;
      continue;
    }
    int a = annot_open(p);
    if (*p == '(' || *p == '[' || *p == '{' || a) {
      if (depth == (int)sizeof stack)
        return false;
      stack[depth++] = a ? '<' : *p;
      if (a)
        p += a - 1;
    } else if (*p == ')' || *p == ']' || *p == '}' || (*p == '>' && depth && stack[depth - 1] == '<')) {
      if (depth) {
        if (closer_of(stack[depth - 1]) != *p)
          return false;
        depth--;
      } else if (nmissing < (int)sizeof missing) {
        missing[nmissing++] = *p == ')' ? '(' : *p == ']' ? '[' : '{';
      } else {
        return false;
      }
    }
  }
  while (depth > 0) {
    const char *p = skip_blank(s->hi, text_end);
    if (p >= text_end || *p != closer_of(stack[depth - 1]))
      return false;
    s->hi = p + 1;
    depth--;
  }
  for (int i = 0; i < nmissing; i++) {
    const char *p = s->lo;
    while (p > s->file->text && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r'))
      p--;
    if (p == s->file->text || p[-1] != missing[i])
      return false;
    s->lo = p - 1;
  }
  return true;
}

static bool expr_span(const SourceFile *f, const Expr *e, Span *out) {
  Span s = {f, NULL, NULL};
  span_expr(&s, e);
  if (!s.lo || !balance(&s))
    return false;
  *out = s;
  return true;
}

/* ---- finding the expression at an error's position ------------------------------- */

/* The operators, calls and indexings of one program by position, built
 * once, so that ranging each of a file's errors costs O(1) (a file may
 * have 100,000 of them in a JSON document). The outermost expression at a
 * position wins. */
static struct {
  const Program *prog;
  PtrMap at;     /* (line, col) -> index in exprs */
  Vec exprs;
} ranged;

/* A distinct key per (line, col), its bits mixed (a bijection: an odd
 * multiplier, the high half xored into the low, a rotation) so that ptrmap's hash, which reads the low
 * bits above the 4th, sees the line too: keys that differed only in their
 * high (line) bits all fell in one probe run, and a file of 20,000 lines
 * took seconds to index. */
static const void *pos_key(int line, int col) {
  uint64_t x = ((uint64_t)line << 24 | (uint64_t)col) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 32;   /* the high bits (the line's) into the low ones; invertible */
  return (const void *)(uintptr_t)((x << 4 | x >> 60) | (x ? 0 : 1));
}

static void index_expr(const Expr *e) {
  if (!e)
    return;
  if ((e->kind == EX_BINARY || e->kind == EX_UNARY || e->kind == EX_CALL || e->kind == EX_INDEX) && e->pos.line > 0 &&
      e->pos.col > 0 && e->pos.col < (1 << 24) && ptrmap_get(&ranged.at, pos_key(e->pos.line, e->pos.col)) < 0) {
    ptrmap_put(&ranged.at, pos_key(e->pos.line, e->pos.col), ranged.exprs.len);
    vec_push(&ranged.exprs, (void *)e);
  }
  index_expr(e->lhs);
  index_expr(e->rhs);
  index_expr(e->callee);
  for (int i = 0; i < e->args.len; i++)
    index_expr(e->args.data[i]);
}

static void index_block(const Block *b) {
  for (int i = 0; b && i < b->stmts.len; i++) {
    const Stmt *s = b->stmts.data[i];
    index_expr(s->expr);
    index_expr(s->hi);
    index_block(s->body);
    index_block(s->els);
  }
}

/* The source extent of the operator, call or indexing whose position is
 * at: what a diagnostic there is about (`a @ b`, not only its `@`), for
 * the caret line's ~~~ and the JSON document's range. False when at is
 * no such expression's, or its extent is not one stretch of the text. */
/* The operator, call or indexing of prog at `at`, or NULL. */
static const Expr *expr_at(const Program *prog, Pos at) {
  if (!prog || at.line <= 0 || at.col <= 0 || at.col >= (1 << 24))
    return NULL;
  if (ranged.prog != prog) {
    ptrmap_free(&ranged.at);
    free(ranged.exprs.data);
    memset(&ranged, 0, sizeof ranged);
    ranged.prog = prog;
    for (int i = 0; i < prog->funcs.len; i++)
      index_block(((FuncDecl *)prog->funcs.data[i])->body);
    for (int i = 0; i < prog->consts.len; i++)
      index_expr(((ConstDecl *)prog->consts.data[i])->value);
  }
  int k = ptrmap_get(&ranged.at, pos_key(at.line, at.col));
  return k < 0 ? NULL : ranged.exprs.data[k];
}

bool diag_expr_range(Pos at, Pos *from, Pos *to) {
  const Expr *e = expr_at(at.file ? diagout_program_of(at.file) : NULL, at);
  Span s;
  if (!e || !expr_span(at.file, e, &s))
    return false;
  *from = pos_near(at.file, at.line, s.lo);
  *to = pos_near(at.file, at.line, s.hi);
  return true;
}

static const Expr *operand_of(const Expr *e, int k) {
  if (!e)
    return NULL;
  if (e->kind == EX_BINARY)
    return k == 0 ? e->lhs : k == 1 ? e->rhs : NULL;
  if (e->kind == EX_UNARY || e->kind == EX_INDEX)
    return k == 0 ? e->lhs : NULL;
  int n = 0;
  for (int i = 0; i < e->args.len; i++) {
    const Expr *a = e->args.data[i];
    /* einsum's spec string is not an operand */
    if (a && a->kind != EX_KWARG && a->kind != EX_STRING && n++ == k)
      return a;
  }
  return NULL;
}

/* ---- resolution ---------------------------------------------------------------------- */

/* `as` binds loosest, so EXPR as TYPE needs no parentheses when the
 * expression is a whole right-hand side, argument or return value. */
static bool delimited(const SourceFile *f, Span s) {
  const char *p = s.lo;
  while (p > f->text && (p[-1] == ' ' || p[-1] == '\t'))
    p--;
  bool left = p == f->text || p[-1] == '(' || p[-1] == ',' || p[-1] == '\n' ||
              (p[-1] == '=' && (p - 1 == f->text || !strchr("=<>!", p[-2])));
  if (p - f->text >= 6 && !strncmp(p - 6, "return", 6) && (p - 6 == f->text || !ident_char(p[-7])))
    left = true;
  const char *q = s.hi;
  while (*q == ' ' || *q == '\t')
    q++;
  bool right = !*q || *q == ')' || *q == ',' || *q == '\n' || *q == '\r' || (q[0] == '/' && q[1] == '/');
  return left && right;
}

static bool wrap(const SourceFile *f, const Expr *e, const char *before, const char *after, const char *what,
                 SourceFix *out) {
  Span s;
  if (!e || !expr_span(f, e, &s))
    return false;
  out->from = e->pos.line > 0 ? pos_near(f, e->pos.line, s.lo) : pos_of(f, s.lo);   /* O(distance), not O(file) */
  out->to = e->pos.line > 0 ? pos_near(f, e->pos.line, s.hi) : pos_of(f, s.hi);
  out->text = arena_printf("%s%.*s%s", before, (int)(s.hi - s.lo), s.lo, after);
  out->what = what;
  return true;
}

bool diag_fix_resolve(const PendingFix *f, const Program *prog, SourceFix *out) {
  const SourceFile *file = f->at.file;
  if (!file)
    return false;
  switch (f->kind) {
  case FIX_RANGE:
    if (!ptr_of(file, f->from) || !ptr_of(file, f->to))
      return false;
    *out = (SourceFix){f->from, f->to, f->text, f->what};
    return true;
  case FIX_WRAP_EXPR:
    return wrap(file, f->expr, f->before, f->after, f->what, out);
  case FIX_KEYWORD: {
    const char *p = ptr_of(file, f->at);
    size_t n = strlen(f->before);
    while (p && p > file->text && (p[-1] == ' ' || p[-1] == '\t'))
      p--;
    if (!p || (size_t)(p - file->text) < n || strncmp(p - n, f->before, n) ||
        (p - n > file->text && ident_char(p[-n - 1])))
      return false;
    *out = (SourceFix){pos_near(file, f->at.line, p - n), pos_near(file, f->at.line, p), f->text, f->what};
    return true;
  }
  case FIX_WRAP_OPERAND:
    return wrap(file, operand_of(expr_at(prog, f->at), f->operand), f->before, f->after, f->what, out);
  case FIX_ANNOTATE: {
    const Expr *e = expr_at(prog, f->at);
    Span s;
    if (!e || !expr_span(file, e, &s))
      return false;
    bool bare = delimited(file, s);
    return wrap(file, e, bare ? "" : "(", arena_printf(" as %s%s", f->text, bare ? "" : ")"), f->what, out);
  }
  }
  return false;
}

/* ---- the source text of an expression ------------------------------------------------- */

const char *diag_expr_source(const Expr *e) {
  Span s;
  if (!e || !e->pos.file || !expr_span(e->pos.file, e, &s))
    return NULL;
  return arena_printf("%.*s", (int)(s.hi - s.lo), s.lo);
}

const Expr *diag_expr_at(Pos pos) { return expr_at(pos.file ? diagout_program_of(pos.file) : NULL, pos); }
