/* warn.c: the warnings of a whole function, after it type-checks.
 *
 * W_UNUSED: a `let` (or a name of `let (a, b) = ...`) whose value is never
 * read, as rustc's unused_variables: names that start with `_` are meant
 * to be unused and are left alone. A name is read where an expression or a
 * type (a let bound to an integer sizes a dim: f32[n]) names it, resolved
 * by scope as the typechecker resolves it: a later let of the same name
 * shadows it from its own statement on, its value still reading the older
 * one (`let x = x + 1`). var, for and parameters are not warned about.
 *
 * W_RESHARD_ROUNDTRIP across a let (`let y = reshard(x, A)`, then
 * reshard(y, B) with B x's type): the one-expression forms and
 * W_PSUM_INVARIANT are given by the operations' own typing
 * (op_collective.c). Only the functions of the program's own file are
 * looked at: an imported library is not the user's to change (clang's
 * system headers).
 */
#include "shdc.h"

typedef struct {
  const char *name;   /* NUL-terminated (arena) */
  int len;
  Pos pos;            /* the name as bound */
  bool warn;          /* a let's name (not var, for or a parameter) */
  bool used;
  bool fixed;         /* a let or a parameter: its value never changes */
  int shadowed;       /* the binding of the same name this one hides, + 1 (0: none) */
  const Expr *value;  /* a let's value, when it is a reshard of a name */
  int source;         /* then that name's binding + 1 when the let was made */
} Binding;

/* The bindings in scope, innermost last, and by name the innermost of each
 * (index + 1, or NULL): a use is found in O(1), however many names a long
 * function binds. */
typedef struct {
  Binding *b;
  int n, cap;
  StrMap by_name;
} Bindings;

/* The binding a name resolves to here, + 1 (0: none of this function's). */
static int lookup(const Bindings *s, Token t) {
  if (!t.start || t.len <= 0)
    return 0;
  char buf[128];
  const char *key = t.len < (int)sizeof buf ? buf : arena_printf("%.*s", t.len, t.start);
  if (key == buf) {
    memcpy(buf, t.start, (size_t)t.len);
    buf[t.len] = 0;
  }
  return (int)(intptr_t)strmap_get(&s->by_name, key);
}

static void bind(Bindings *s, Token name, bool warn) {
  if (!name.start || name.len <= 0)
    return;
  s->b = mem_grow(s->b, &s->cap, s->n + 1, sizeof *s->b);
  const char *key = arena_printf("%.*s", name.len, name.start);
  int prev = (int)(intptr_t)strmap_get(&s->by_name, key);
  s->b[s->n] = (Binding){key, name.len, name.pos, warn && name.start[0] != '_', false, warn, prev, NULL, 0};
  strmap_put(&s->by_name, key, (void *)(intptr_t)(s->n + 1));
  s->n++;
}

static void use_tok(Bindings *s, Token t) {
  int k = lookup(s, t);
  if (k > 0)
    s->b[k - 1].used = true;
}

static void use_type(Bindings *s, const TypeExpr *t) {
  if (!t)
    return;
  int nd = t->ndims_written < MAX_RANK ? t->ndims_written : MAX_RANK;
  for (int d = 0; t->dims && d < nd && d < t->rank; d++)
    use_tok(s, t->dims[d].size);
  if (t->named)
    use_tok(s, t->name);
}

/* W_RESHARD_ROUNDTRIP across a let: `let y = reshard(x, A)`, then
 * reshard(y, B) with B x's own type, x unchanged (a let or a parameter) and
 * still the x in scope: the data moves twice to end where it was, and x is
 * that value already. (A reshard of a reshard in one expression is
 * op_collective.c's.) */
static const Mesh *mesh_now;

static void roundtrip(const Bindings *s, const Expr *e) {
  const Expr *arg = op_reshard_operand(e);
  int y = arg && arg->kind == EX_NAME ? lookup(s, arg->tok) : 0;
  const Binding *by = y ? &s->b[y - 1] : NULL;
  if (!by || !by->value || !by->source || !e->ty)
    return;
  const Expr *x = op_reshard_operand(by->value);
  const Binding *bx = &s->b[by->source - 1];
  if (!x || !x->ty || x->ty->weak || lookup(s, x->tok) != by->source || !bx->fixed)
    return;
  Type xt = *x->ty, out = *e->ty;
  out.weak = false;
  if (!ty_equal(&xt, &out) || !arg->ty || ty_equal(arg->ty, &out))
    return;
  diag_warning(e->pos, "W_RESHARD_ROUNDTRIP",
               "`%.*s` is `%.*s` resharded (line %d); resharding it back to %s, `%.*s`'s own type, moves the data "
               "again to where `%.*s` holds it already: use `%.*s`",
               by->len, by->name, bx->len, bx->name, by->pos.line, ty_str(mesh_now, &out), bx->len, bx->name,
               bx->len, bx->name, bx->len, bx->name);
  Pos from, to;
  if (diag_expr_range(e->pos, &from, &to))
    diag_fix_replace(from, to, bx->name, arena_printf("use `%s` itself", bx->name));
}

static void use_expr(Bindings *s, const Expr *e) {
  if (!e)
    return;
  if (e->kind == EX_CALL)
    roundtrip(s, e);
  if (e->kind == EX_NAME)
    use_tok(s, e->tok);
  use_expr(s, e->lhs);
  use_expr(s, e->rhs);
  use_expr(s, e->callee);
  for (int i = 0; i < e->args.len; i++)
    use_expr(s, e->args.data[i]);
  use_type(s, e->type);
}

/* The names bound from `from` on leave scope: the unread lets among them
 * are warned about. */
static void leave(Bindings *s, int from) {
  for (int i = from; i < s->n; i++) {
    const Binding *b = &s->b[i];
    if (!b->warn || b->used)
      continue;
    diag_warning(b->pos, "W_UNUSED",
                 "`%.*s` is never read; drop the let (keep the call alone if it has an effect), or name it `_%.*s` "
                 "if it is meant to be unused",
                 b->len, b->name, b->len, b->name);
    Pos to = b->pos;
    to.col += b->len;
    diag_fix_replace(b->pos, to, arena_printf("_%.*s", b->len, b->name),
                     arena_printf("if `%.*s` is meant to be unused, name it `_%.*s`", b->len, b->name, b->len,
                                  b->name));
  }
  for (int i = s->n - 1; i >= from; i--)   /* the names they hid are visible again */
    strmap_put(&s->by_name, s->b[i].name, (void *)(intptr_t)s->b[i].shadowed);
  s->n = from;
}

static void walk_block(Bindings *s, const Block *b);

static void walk_stmt(Bindings *s, const Stmt *st) {
  use_type(s, st->type);
  use_expr(s, st->expr);
  use_expr(s, st->hi);
  switch (st->kind) {
  case ST_LET: {
    const Expr *x = op_reshard_operand(st->expr);
    int source = x && x->kind == EX_NAME ? lookup(s, x->tok) : 0;
    bind(s, st->name, true);
    if (source && s->n && s->b[s->n - 1].pos.line == st->name.pos.line) {
      s->b[s->n - 1].value = st->expr;
      s->b[s->n - 1].source = source;
    }
    break;
  }
  case ST_LET_TUPLE:
    for (int i = 0; i < st->names.len; i++)
      bind(s, *(Token *)st->names.data[i], true);
    break;
  case ST_VAR:
    bind(s, st->name, false);
    break;
  case ST_ASSIGN:
    use_tok(s, st->name);   /* an assignment of a field reads the rest of the struct */
    break;
  case ST_FOR: {
    int mark = s->n;
    bind(s, st->name, false);
    walk_block(s, st->body);
    leave(s, mark);
    return;
  }
  default:
    break;
  }
  walk_block(s, st->body);
  walk_block(s, st->els);
}

static void walk_block(Bindings *s, const Block *b) {
  if (!b)
    return;
  int mark = s->n;
  for (int i = 0; i < b->stmts.len; i++)
    walk_stmt(s, b->stmts.data[i]);
  leave(s, mark);
}

void warn_program(const Program *prog, const Mesh *mesh) {
  if (!prog || !mesh)
    return;
  mesh_now = mesh;
  Bindings s = {0};
  for (int i = 0; i < prog->funcs.len; i++) {
    const FuncDecl *f = prog->funcs.data[i];
    /* instances are copies of a generic function's text: it is looked at once, as written */
    if (f->generic || !f->body || f->pos.file != prog->file)
      continue;
    for (int k = 0; k < f->params.len; k++) {
      bind(&s, ((const Param *)f->params.data[k])->name, false);
      if (s.n)
        s.b[s.n - 1].fixed = true;   /* a parameter is not assigned */
    }
    walk_block(&s, f->body);
    leave(&s, 0);   /* the parameters */
  }
  free(s.b);
  strmap_free(&s.by_name);
}
