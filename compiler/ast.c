/* ast.c: constructors and small helpers for the syntax tree.
 *
 * Nodes are arena-allocated and zeroed; every node carries the position of
 * the token it came from, so every diagnostic points somewhere.
 */
#include "shdc.h"

Expr *ast_expr(ExprKind kind, Pos pos) {
  Expr *e = arena_alloc(sizeof *e);
  e->kind = kind;
  e->pos = pos;
  return e;
}

Stmt *ast_stmt(StmtKind kind, Pos pos) {
  Stmt *s = arena_alloc(sizeof *s);
  s->kind = kind;
  s->pos = pos;
  return s;
}

const char *ast_binop_text(int op) {
  static const char *names[BIN__COUNT] = {
      [BIN_ADD] = "+", [BIN_SUB] = "-", [BIN_MUL] = "*", [BIN_DIV] = "/",
      [BIN_MAX] = "maximum", [BIN_MIN] = "minimum", [BIN_POW] = "**", [BIN_MOD] = "%",
      [BIN_LT] = "<", [BIN_LE] = "<=", [BIN_GT] = ">", [BIN_GE] = ">=",
      [BIN_EQ] = "==", [BIN_NE] = "!=", [BIN_AND] = "&", [BIN_OR] = "|",
      [BIN_MATMUL] = "@",
  };
  return op >= 0 && op < BIN__COUNT ? names[op] : "?";
}

/* A type as written in the source (f32[8@X, 4]<U:Y>, Block[L@pipe], str):
 * the text fixes, notes and the editor's hover quote. */
void ast_type_text(Str *s, const TypeExpr *t) {
  if (!t) {
    str_printf(s, "?");
    return;
  }
  if (t->named)
    str_printf(s, "%.*s", t->name.len, t->name.start);
  else
    str_printf(s, "%s", t->str ? "str" : ty_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && t->dims; d++) {
    const DimExpr *de = &t->dims[d];
    str_printf(s, "%s%.*s", d ? ", " : "[", de->size.len, de->size.start);
    if (de->naxes)
      str_printf(s, "@%s", de->paren ? "(" : "");
    for (int i = 0; i < de->naxes; i++)
      str_printf(s, "%s%.*s", i ? "," : "", de->axes[i].len, de->axes[i].start);
    if (de->paren)
      str_putc(s, ')');
  }
  if (t->rank && t->dims)
    str_putc(s, ']');
  for (int k = 0; k < t->nannots && t->annots; k++) {
    str_printf(s, "<%c:", t->annots[k].kind);
    for (int i = 0; i < t->annots[k].naxes; i++)
      str_printf(s, "%s%.*s", i ? "," : "", t->annots[k].axes[i].len, t->annots[k].axes[i].start);
    str_putc(s, '>');
  }
}

bool tok_eq(Token t, const char *s) {
  return (int)strlen(s) == t.len && memcmp(t.start, s, (size_t)t.len) == 0;
}

char *tok_str(Token t) { return arena_strndup(t.start, (size_t)t.len); }

Pos tok_pos(Token t) { return t.pos; }

/* Whether e is root or reached from it through elementwise arithmetic only
 * (a * 2.0, -a, (a), a + b): a creation there has the bound value's type
 * (language.md 10.3). `elementwise` false: through any operator (for the
 * message when the type cannot reach it, e.g. through @ or a comparison). */
bool ast_through_operators(const Expr *root, const Expr *e, bool elementwise) {
  if (!root)
    return false;
  if (root == e)
    return true;
  if (root->kind == EX_UNARY)
    return ast_through_operators(root->lhs, e, elementwise);
  if (root->kind != EX_BINARY)
    return false;
  if (elementwise && !(root->op == BIN_ADD || root->op == BIN_SUB || root->op == BIN_MUL || root->op == BIN_DIV ||
                       root->op == BIN_MAX || root->op == BIN_MIN || root->op == BIN_POW || root->op == BIN_MOD))
    return false;
  return ast_through_operators(root->lhs, e, elementwise) || ast_through_operators(root->rhs, e, elementwise);
}
