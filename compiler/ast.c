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

bool tok_eq(Token t, const char *s) {
  return (int)strlen(s) == t.len && memcmp(t.start, s, (size_t)t.len) == 0;
}

char *tok_str(Token t) { return arena_strndup(t.start, (size_t)t.len); }

Pos tok_pos(Token t) { return t.pos; }
