/* shdc.h: the compiler's core header, sectioned by the file that owns each
 * declaration (chibicc style): the arena, diagnostics, tokens and the AST,
 * types, the IR, the registry as the stages read it (OpDef, op_def) and
 * each stage's entry points. What the operation families are written with
 * (the builtin rows, the families' tables, the rules' and typechecker's
 * helpers, the builders lower_, ad_, part_, emit_) is ops.h's, which the
 * families and the builders' own files include. Exported names carry the
 * prefix of their module:
 *
 *   arena_ mem_ vec_ str_ ptrmap_ strmap_  arena.c
 *   diag_      diag.c, diag_fix.c, diag_codes.c, diag_json.c
 *   diagout_   diag_json.c (the diagnostics as data)
 *   lex_       lexer.re
 *   Parse      grammar.y (Lemon's names)
 *   parse_     parse.c
 *   ast_ tok_  ast.c
 *   import_    import.c
 *   ty_        types.c
 *   rule_      rules.c, and each family's sharding rules in its op_*.c (ops.h)
 *   tc_        tc.c, tc_expr.c, tc_args.c, tc_manual.c, tc_struct.c, instance.c
 *   ir_        ir.c
 *   lower_     lower.c
 *   ad_        autodiff.c
 *   part_      partition.c, reshard.c
 *   opt_       optimize.c
 *   op_        ops.c and the operation families op_*.c
 *   explain_   explain.c
 *   emit_      emit_c.c, emit_group.c, emit_program.c, emit_parts.c
 *   fuse_      fuse.c (the fusion and loop-group plan)
 *   sched_     sched.c (the plan, and the pass that orders column sums)
 *   net_       netmodel.c
 *   plan_      plan.c
 *   show_      show.c
 *   tsum_      trace_summary.c
 *   file_      files.c
 *   lsp_       lsp.c, lsp_query.c, lsp_index.c, lsp_hover.c (lsp.h)
 *   drv_       driver.c, build.c, install.c, explain_error.c (main.c exports none)
 *   cache_     cache.c (the build cache)
 *   sha256_    sha256.c
 *   shd_       runtime/blockmap.c, runtime/safefile.c, linked into shdc too
 */
#ifndef SHDC_H
#define SHDC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 8      /* array rank limit, as in the runtime */
#define MAX_AXES 8      /* mesh axes limit; an AxisSet is a bitmask over them */
#define MAX_DEVICES (1 << 24) /* product of the mesh sizes: ranks fit an int, byte sums int64 */

/* ---- arena.c ------------------------------------------------------------ */

/* The one allocation choke point: every heap allocation of the compiler
 * (the arena's chunks too) is one of these, and none returns NULL: out of
 * memory prints "shdc: out of memory" and exits 2, an internal error.
 * SHDC_FAIL_ALLOC=N makes the Nth and every later one fail (tests).
 * mem_calloc zero-fills; mem_resize reallocates an array of old elements
 * of elem bytes to n, zeroing the new ones; mem_grow makes *cap (doubled,
 * at least need) hold need elements the same way. */
void *mem_alloc(size_t n);
void *mem_calloc(size_t n, size_t size);
void *mem_realloc(void *p, size_t n);
char *mem_strdup(const char *s);
void *mem_resize(void *p, int old, int n, size_t elem);
void *mem_grow(void *p, int *cap, int need, size_t elem);
/* A stream writing into *buf (open_memstream), the same way: mem_close_stream
 * closes it, *buf and *len then hold the text (free *buf). */
FILE *mem_open_stream(char **buf, size_t *len);
void mem_close_stream(FILE *f);

/* All compiler memory comes from one arena freed at exit: nodes, types and
 * IR are never freed individually. arena_alloc zero-fills. */
void *arena_alloc(size_t n);
char *arena_strndup(const char *s, size_t n);
char *arena_strdup(const char *s);
__attribute__((format(printf, 1, 2))) char *arena_printf(const char *fmt, ...);
char *arena_vprintf(const char *fmt, va_list ap);

/* A growable array of pointers. */
typedef struct {
  void **data;
  int len, cap;
} Vec;
void vec_push(Vec *v, void *x);
#define VEC_AT(v, i) ((v).data[i])

/* A map from pointers to non-negative ints; ptrmap_get gives -1 for a key
 * never put. Zero-initialise; ptrmap_free releases it. */
typedef struct {
  const void **keys;
  int *vals;
  int cap, len;
} PtrMap;
void ptrmap_put(PtrMap *m, const void *key, int val);
int ptrmap_get(const PtrMap *m, const void *key);
void ptrmap_free(PtrMap *m);

/* A map from strings (kept by pointer, not copied) to pointers; a later
 * put of the same key replaces the value. */
typedef struct {
  const char **keys;
  void **vals;
  int cap, len;
} StrMap;
void strmap_put(StrMap *m, const char *key, void *val);
void *strmap_get(const StrMap *m, const char *key);
void strmap_free(StrMap *m);

/* A growable string. */
typedef struct {
  char *buf;
  size_t len, cap;
} Str;
__attribute__((format(printf, 2, 3))) void str_printf(Str *s, const char *fmt, ...);
void str_vprintf(Str *s, const char *fmt, va_list ap);
void str_putc(Str *s, char c);
void str_read_fd(Str *s, int fd, size_t limit);   /* until fd's end, at most limit bytes kept */
const char *str_cstr(Str *s);
int str_distance(const char *a, const char *b, int limit);   /* edit distance with transpositions, 99 past limit */

/* ---- diag.c ------------------------------------------------------------- */

typedef struct {
  const char *name;  /* as given on the command line */
  const char *text;  /* NUL-terminated contents */
  size_t len;
  int order;         /* imports: files in the order they are read (the program's file first) */
} SourceFile;

typedef struct {
  const SourceFile *file;
  int line, col;     /* 1-based; line 0 means "no position" */
} Pos;

/* FILE:LINE:COL: error: MESSAGE [CODE], then the source line and a caret.
 * code is a stable E_ name from typing-rules.md (without brackets). */
__attribute__((format(printf, 3, 4))) void diag_error(Pos pos, const char *code, const char *fmt, ...);
void diag_verror(Pos pos, const char *code, const char *fmt, va_list ap);
/* The struct field being typed leaf by leaf (NULL: none): messages name it.
 * Returns the previous one, to restore. */
const char *diag_set_field(const char *field);
/* The same, the field's name made by path(obj, k) only if a message needs it. */
void diag_set_field_lazy(const char *(*path)(const void *obj, int k), const void *obj, int k);
bool diag_fixes_apply(void);
/* While pushed, every error is followed by this note (innermost last
 * pushed, printed first): "in adamw<P = GPT> called from FILE:LINE:COL". */
void diag_push_note(Pos pos, const char *text);
void diag_pop_note(void);
/* While set, errors are reported at `at` (a call from a manual body), their
 * message naming the place they arose: "f, line 12: ...". Nested ones
 * keep the outermost. Returns whether this one took effect (pop only then). */
bool diag_push_redirect(Pos at, const char *callee);
void diag_pop_redirect(void);
/* A note attached to the previous error: "FILE:LINE:COL: note: ...". */
__attribute__((format(printf, 2, 3))) /* Colour on stderr: auto (a terminal, NO_COLOR unset), always, never. */
enum { DIAG_COLOR_AUTO, DIAG_COLOR_ALWAYS, DIAG_COLOR_NEVER };
void diag_set_color(int mode);
void diag_note(Pos pos, const char *fmt, ...);
/* While set, the first error's text (FILE:LINE:COL: MESSAGE [CODE]) is
 * stored in *first and nothing is printed (shdc plan tries layouts). */
void diag_capture(const char **first);
/* The text of a line (1-based) of f, without its newline. */
const char *diag_line_text(const SourceFile *f, int line, size_t *len);
int diag_error_count(void);
const char *diag_last_code(void);   /* the code of the error reported last (NULL: none) */
struct Expr;
/* A warning (diag.c): "FILE:LINE:COL: warning: MESSAGE [W_CODE]", the
 * source line with the range marked, notes and fixes as an error's. It
 * does not change the exit status, unless -Werror (or -Werror=NAME) makes
 * it an error; -Wno-NAME (or -w: every one) leaves it out. The code is a
 * W_ code of diag_codes.c. */
__attribute__((format(printf, 3, 4))) void diag_warning(Pos pos, const char *code, const char *fmt, ...);
int diag_warning_count(void);
/* The errors that are warnings made errors by -Werror. */
int diag_promoted_count(void);
/* Warnings are given only about this file's text (NULL, the default: none;
 * check, build and the language server set the file they check). */
void diag_warn_file(const SourceFile *f);
/* A -W option's text after -W (error, error=NAME, no-NAME, NAME, all,
 * no-error): NULL when taken, else what is wrong with it. -w: off = true. */
const char *diag_warning_option(const char *arg);
void diag_warnings_off(bool off);
/* The option name of a W_ code: W_UNUSED -> unused (-Wno-unused). */
const char *diag_warning_flag(const char *code);
/* The source text of expression e (its exact extent), or NULL. */
const char *diag_expr_source(const struct Expr *e);
/* The operator, call or indexing of the registered program at pos, or NULL. */
const struct Expr *diag_expr_at(Pos pos);
void diag_reset(void);
/* Ends the last plain diagnostic (its explain-error hint, after its notes):
 * call when a file's diagnostics are done, before other output. */
void diag_finish(void);
/* At most n errors are printed (0: all); the rest are counted only. */
void diag_set_max_errors(int n);
int diag_errors_not_shown(void);
/* Whether the next error would be printed (work that only improves its
 * message can be skipped otherwise). */
bool diag_will_show(void);
/* Fatal internal error: the compiler found a bug in itself. */
/* Trouble outside the program text (usage, I/O, the toolchain): "shdc:
 * error: ..." after the diagnostics, exit 2; a usage error adds --help. */
__attribute__((noreturn, format(printf, 1, 2))) void diag_usage_error(const char *fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void diag_io_error(const char *fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void diag_ice(const char *fmt, ...);

/* Structured fixes for the error reported last (diag_fix.c). The plain
 * format says a fix in words; --diagnostics=json and sarif also carry it as
 * a replacement of a source range, which an editor or CI bot can apply.
 * Each call adds one alternative. A fix whose place cannot be found in the
 * source (generated code, no expression at the error's position) is
 * dropped, never guessed. */
struct Expr;
/* Replace the text from `from` up to (not including) `to`. */
void diag_fix_replace(Pos from, Pos to, const char *text, const char *what);
/* Replace expression e's text T by before + T + after. */
void diag_fix_wrap(const struct Expr *e, const char *before, const char *after, const char *what);
/* The same for operand k (0 = left; a call's k-th positional argument,
 * einsum's spec string not counted) of
 * the operator or call at the error's position: for rules.c, which sees
 * only types. */
void diag_fix_wrap_operand(int k, const char *before, const char *after, const char *what);
/* Annotate the operator or call at the error's position: `EXPR as TYPE`
 * (parenthesised where the context needs it). */
void diag_fix_annotate(const char *type, const char *what);
/* Replace the keyword `old` written just before `name` (let x -> var x). */
void diag_fix_keyword(Pos name, const char *old, const char *text, const char *what);

/* ---- lexer.re ----------------------------------------------------------- */

typedef struct {
  int kind;            /* TK_ codes from the generated grammar.h */
  const char *start;   /* points into the source text: never copied */
  int len;
  Pos pos;
} Token;

typedef struct {
  const SourceFile *file;
  const char *cur;     /* next byte to scan; the text ends in a NUL sentinel */
  const char *line_start;
  int line;
  int depth;           /* ( and [ nesting: newlines inside them are spaces */
  int last_kind;       /* previous token, for newline-as-terminator */
  bool peeking;        /* scanning ahead: report nothing */
  const char *peek_at; /* the first token after the last run of newlines, and its kind */
  int peek_kind;
} Lexer;

void lex_init(Lexer *lx, const SourceFile *file);
/* Next token; TK_NL is produced for a newline that ends a statement, EOF
 * as kind 0. Bad characters are reported with [E_SYNTAX] and skipped. */
Token lex_next(Lexer *lx);
const char *lex_token_name(int kind);

/* ---- ast.c: the syntax tree --------------------------------------------- */

/* bf16 (language.md §10.1) is stored as its bit pattern, computed in f32. */
typedef enum { DT_F32, DT_F64, DT_I32, DT_BOOL, DT_BF16, DT__COUNT } DType;

typedef struct Expr Expr;
typedef struct Stmt Stmt;
typedef struct Block Block;
typedef struct FuncDecl FuncDecl;
typedef struct Symbol Symbol;
typedef struct Type Type;

/* The written form of a type; tc resolves it into a Type. */
typedef struct {
  Token size;          /* INT or constant name */
  Token axes[MAX_AXES];
  int naxes;
  bool paren;          /* written 8@(X,Y) */
} DimExpr;

typedef struct {
  char kind;           /* 'U', 'R' or 'V' */
  Token axes[MAX_AXES];
  int naxes;
  Pos pos;
} AnnotExpr;

typedef struct TypeExpr {
  Pos pos;
  DType dtype;
  int rank;
  DimExpr *dims;       /* rank of them */
  int ndims_written;   /* > MAX_RANK is reported by tc */
  AnnotExpr *annots;   /* at most 6 */
  int nannots;
  bool str;            /* written `str` (a string; dtype is unused) */
  bool named;          /* a struct or a type parameter: NAME, or NAME[N@X] (stacked, dims) */
  Token name;
  const Type *resolved;/* a type the compiler built itself (struct lifting): used as it is */
  char meta;           /* a parameter bound at each call (language.md 10.4): 'f' `f: fn`, 'a' `ax: axis` */
} TypeExpr;

typedef enum {
  EX_INT, EX_FLOAT, EX_BOOL, EX_STRING, EX_NAME,
  EX_UNARY,            /* op: '-' */
  EX_BINARY,           /* op: + - * / @ < <= > >= == != */
  EX_CALL,             /* callee(args...) */
  EX_KWARG,            /* name=value, only as a call argument */
  EX_TUPLE,            /* (a, b, ...) */
  EX_LIST,             /* [a, b, ...] */
  EX_TYPE,             /* a type written as an argument: zeros(f32[8]) */
  EX_AS,               /* expr as TYPE */
  EX_INDEX,            /* lhs[args...]: each arg an index expression or an EX_SLICE */
  EX_SLICE,            /* lo:hi inside [ ]: lhs = lo, rhs = hi, each NULL when left out */
  EX_FIELD,            /* lhs.NAME: str = NAME */
  EX_LEAF,             /* compiler-made: leaf ival of the struct value lhs (ival -1: lhs itself, a
                        * non-struct operand shared by the per-leaf copies), evaluated once */
} ExprKind;

/* Binary/unary operator codes shared by AST and IR (BIN_, UN_). */
typedef enum {
  BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_MAX, BIN_MIN, BIN_POW, BIN_MOD,
  BIN_LT, BIN_LE, BIN_GT, BIN_GE, BIN_EQ, BIN_NE, BIN_AND, BIN_OR,
  BIN_MATMUL,          /* AST only: lowered to a dot */
  BIN__COUNT
} BinOp;

/* The unary functions other files build by name, at their places in
 * op_unary.c's table, whose order is the builtins' (shdc list-ops, the
 * helper functions of the generated file); the other entries are that
 * file's own. */
typedef enum { UN_NEG = 0, UN_EXP = 1, UN_LOG = 2, UN_NOT = 10, UN_FLOOR = 15 } UnOp;

struct Expr {
  ExprKind kind;
  Pos pos;
  Token tok;           /* the name, literal or operator token */
  int op;              /* BinOp / UnOp */
  Expr *lhs, *rhs;     /* binary; unary uses lhs; EX_AS uses lhs */
  Vec args;            /* call arguments, tuple and list elements (Expr *) */
  Expr *callee;        /* EX_CALL */
  TypeExpr *type;      /* EX_TYPE, EX_AS */
  int64_t ival;
  double fval;
  char *str;           /* EX_STRING contents (escapes resolved), names */
  int depth;           /* nesting depth of the subtree (parse.c bounds it) */

  /* set by the typechecker */
  Type *ty;            /* result type (TY_TUPLE for tuple-valued calls) */
  Symbol *sym;         /* EX_NAME */
  const struct BuiltinDef *bi; /* a builtin call's or an operator's row (ops.c), else NULL */
  int grad;            /* EX_CALL of grad(f, ...)(...): GRAD_PLAIN or GRAD_WITH_VALUE */
  bool remat;          /* EX_CALL of remat(f)(...) */
  int vjp;             /* EX_CALL of vjp_save(f, ...)(...) or vjp_load(f, ...)(...): FORM_VJP_SAVE or _LOAD */
  FuncDecl *fn;        /* EX_CALL of a user function, or grad's function */
  void *tc;            /* builtin-specific facts for lowering (tc_*.c) */
  /* A struct-valued operation (arithmetic, creation, indexing, load of a
   * struct): one array expression per leaf, in leaf order, whose operands
   * are EX_LEAF nodes (tc_struct.c). Lowering lowers these. */
  Vec leaves;
  bool pretyped;       /* typed already (tc_struct.c): the next check returns *ty once */
};

typedef enum {
  ST_LET, ST_LET_TUPLE, ST_VAR, ST_ASSIGN, ST_FOR, ST_IF, ST_RETURN, ST_EXPR
} StmtKind;

struct Stmt {
  StmtKind kind;
  Pos pos;
  Token name;          /* let/var/assign target, for variable */
  Vec names;           /* ST_LET_TUPLE: Token * */
  Vec path;            /* ST_ASSIGN of a field, p.h.w = ...: the field names (Token *) after the var */
  Vec then;            /* ST_LET_TUPLE of a tuple assignment (a, b) = e: the ST_ASSIGNs that follow it */
  int tuple_elem;      /* ST_ASSIGN made from a tuple assignment: its element, from 1; the ST_LET_TUPLE
                        * of its hidden names: -1 (not shown by the language server); else 0 */
  TypeExpr *type;      /* optional annotation */
  Expr *expr;          /* value; for: lower bound; if: condition */
  Expr *hi;            /* for: upper bound */
  Block *body;         /* for body, if then-block */
  Block *els;          /* if else-block (else-if is an else-block holding one if) */

  /* set by the typechecker */
  Symbol *sym;         /* the bound/assigned symbol */
  Vec syms;            /* ST_LET_TUPLE symbols */
};

struct Block {
  Pos pos;
  Vec stmts;           /* Stmt * */
};

typedef struct {
  Token name;
  TypeExpr *type;
  Symbol *sym;
} Param;

struct FuncDecl {
  Token name;
  Pos pos;
  bool manual;
  Token manual_axes[MAX_AXES];
  int nmanual;
  Pos manual_pos;
  Vec params;          /* Param * */
  TypeExpr **results;  /* nresults of them */
  int nresults;
  bool result_tuple;   /* written -> (T, ...) */
  Block *body;

  Token *tparams;      /* fn NAME<A, B>: type parameters (a generic function) */
  int ntparams;
  /* An instance (instance.c): a copy of the generic function `generic`
   * with its type parameters bound (targs, visible through tscope), named
   * cname in the IR and the C. */
  struct FuncDecl *generic;
  Type *targs;
  struct Scope *tscope;
  const char *cname;
  const char *binding; /* an instance of a generic: f<T = Decay>, its name in
                          messages where f has several instances */
  struct Scope *mscope;/* a generic's fn and axis parameters bound by a call
                          (instance.c: the view's params are the others) */
  /* An instance for a call from a manual body (language.md §9.7): typed in
   * the per-device view of these manual axes, with the arguments'
   * device-local types (manual_set holds them too). */
  unsigned view_manual;
  const char *fail_code;   /* an instance that did not type-check: its first error's code */

  /* set by the typechecker */
  bool checked, checking, ok;
  unsigned manual_set;             /* AxisSet of the manual axes */
  Type *param_types;               /* global types (signature) */
  Type *local_param_types;         /* body view (= param_types unless manual) */
  Type *result_types;              /* global */
  Vec bindings;                    /* Symbol * in source order, for `types` */
  Vec callees;                     /* Expr *: calls of user functions in the body */
};

typedef struct {
  Token name;
  Expr *value;
  Symbol *sym;
} ConstDecl;

typedef struct {
  Pos pos;
  int naxes;
  Token names[MAX_AXES];
  Expr *sizes[MAX_AXES];
} MeshDecl;

/* struct NAME { FIELD: TYPE, ... } (language.md §9.1). */
typedef struct StructDecl {
  Token name;
  Pos pos;
  Vec fields;          /* Param *: name and type */
  struct StructDef *def;   /* set by the typechecker */
  int state;           /* tc: 0 unresolved, 1 resolving (a cycle if met again), 2 done */
} StructDecl;

/* import "FILE.shd" (language.md §9.6). */
typedef struct {
  Pos pos;
  const char *path;    /* as written */
  const char *real;    /* import.c: the file it names (real path), NULL when not found */
} ImportDecl;

/* A top-level declaration, in the order the program declares them (an
 * imported file's where its import is): duplicates are reported at the
 * later one, consts are evaluated in this order. */
typedef enum { ITEM_CONST, ITEM_STRUCT, ITEM_FUNC, ITEM_IMPORT } ItemKind;
typedef struct {
  ItemKind kind;
  void *decl;          /* ConstDecl *, StructDecl *, FuncDecl *, ImportDecl * */
} Item;

typedef struct {
  const SourceFile *file;
  MeshDecl *mesh;      /* NULL if the file has none (an error in tc) */
  int nmesh_decls;
  Vec consts;          /* ConstDecl * */
  Vec funcs;           /* FuncDecl * */
  Vec structs;         /* StructDecl * */
  Vec items_order;     /* Item *, in declaration order (imports merged by import.c) */
  Vec imports;         /* ImportDecl *: this file's, then (import.c) those of every file it imports */
  /* set by the typechecker: a manual body has varying control flow, so
   * `check` partitions too, to find the collectives under it that are not
   * written there (a partial manual body's implicit ones: partition.c; a
   * call's: diverge.c) */
  bool diverge_in_manual;
} Program;

Expr *ast_expr(ExprKind kind, Pos pos);
/* Whether e is root or reached from it through elementwise arithmetic only
 * (elementwise false: through any operator). */
bool ast_through_operators(const Expr *root, const Expr *e, bool elementwise);
Stmt *ast_stmt(StmtKind kind, Pos pos);
const char *ast_binop_text(int op);
void ast_type_text(Str *s, const TypeExpr *t);
bool tok_eq(Token t, const char *s);
char *tok_str(Token t);

/* ---- parse.c ------------------------------------------------------------ */

/* Parses a whole file. Syntax errors are reported ([E_SYNTAX]); the result
 * is NULL when there were any. */
Program *parse_file(const SourceFile *file);

/* Called by the Lemon grammar actions (grammar.y). */
typedef struct ParseCtx {
  Program *prog;
  const SourceFile *file;
  bool failed;
  bool error_now;      /* the token just fed was a syntax error */
  Token last, prev;    /* the token being fed and the one before it */
} ParseCtx;
void parse_syntax_error(ParseCtx *pc, Token tok);
void parse_too_deep(ParseCtx *pc);
TypeExpr *parse_type(ParseCtx *pc, Token dtype);
void parse_type_dim(ParseCtx *pc, TypeExpr *t, DimExpr d, Pos pos);
void parse_type_annot(ParseCtx *pc, TypeExpr *t, char kind, Vec *axes, Pos pos);
DimExpr parse_dim(Token size, Vec *axes, bool paren);
Expr *parse_literal(ParseCtx *pc, ExprKind kind, Token tok);
Expr *parse_binary(int op, Expr *l, Expr *r, Token optok);
Expr *parse_unary(int op, Expr *e, Token optok);
Expr *parse_call(Expr *callee, Vec *args);
Expr *parse_kwarg(Token name, Expr *value);
Expr *parse_seq(ExprKind kind, Vec *elems, Pos pos);
Expr *parse_as(Expr *e, TypeExpr *t, Token astok);
Expr *parse_type_expr(TypeExpr *t);
Expr *parse_index(Expr *x, Vec *items, Token lbracket);
Expr *parse_slice(Expr *lo, Expr *hi, Token colon);
void parse_func(ParseCtx *pc, FuncDecl *f);
void parse_manual(ParseCtx *pc, FuncDecl *f, Token kw, Vec *axes);
FuncDecl *parse_func_head(Token name, Vec *params, Vec *results, bool tuple);
Param *parse_param(Token name, TypeExpr *t);
Param *parse_meta_param(ParseCtx *pc, Token name, TypeExpr *t, Token fn);
void parse_type_params(FuncDecl *f, Vec *names);
void parse_mesh(ParseCtx *pc, Token kw, Vec *names, Vec *sizes);
void parse_const(ParseCtx *pc, Token name, Expr *value);
Stmt *parse_stmt_let(Token kw, Token name, TypeExpr *t, Expr *e, StmtKind k);
Stmt *parse_stmt_let_tuple(Token kw, Vec *names, Expr *e);
Stmt *parse_stmt_assign(ParseCtx *pc, Expr *target, Token assign, Expr *e);
void parse_push_stmt(Vec *stmts, Stmt *s);
TypeExpr *parse_named_type(ParseCtx *pc, Token name);
Expr *parse_field(Expr *x, Token name, Token dot);
void parse_struct(ParseCtx *pc, Token kw, Token name, Vec *fields);
Stmt *parse_stmt_for(Token kw, Token var, Expr *lo, Expr *hi, Block *b);
Stmt *parse_stmt_if(Token kw, Expr *c, Block *then, Block *els);
Stmt *parse_stmt_return(Token kw, Expr *e);
Stmt *parse_stmt_expr(Expr *e);
Block *parse_block(Token lbrace, Vec *stmts);
Block *parse_block_of(Stmt *s);
Pos tok_pos(Token t);

void parse_import(ParseCtx *pc, Token kw, Token path);

/* ---- import.c: import "FILE.shd" ----------------------------------------- */

/* Reads every file the program imports (relative to the importing file,
 * then each -I directory, then the installed library directory), and
 * merges their structs, consts and functions into p in declaration order,
 * each keeping its own file for diagnostics. Errors ([E_IMPORT] a missing
 * file or a cycle, [E_MESH] a library with a mesh) are reported at the
 * import. incdirs: the -I directories (const char *). */
void import_program(Program *p, const Vec *incdirs);
/* The installed library directory (holding std/), or NULL. */
const char *drv_library_dir(void);

/* The Lemon entry points (generated). */
void *ParseAlloc(void *(*mallocProc)(size_t));
void Parse(void *parser, int kind, Token tok, ParseCtx *pc);
void ParseFree(void *parser, void (*freeProc)(void *));
/* Lets the next syntax error be reported at once (grammar.y %code). */
void ParseErrorsReported(void *parser);

/* ---- types.c: the type model -------------------------------------------- */

typedef unsigned AxisSet;   /* bit i: mesh axis i */

typedef struct {
  int naxes;
  const char *names[MAX_AXES];
  int sizes[MAX_AXES];
} Mesh;

typedef struct {
  uint8_t n;                 /* axes sharding this dim, major first */
  int8_t axes[MAX_AXES];
} DimSpec;

/* TY_TAPE: autodiff's per-iteration store of a loop carry (elems[0] is the
 * carry's type); it exists only in generated IR. */
/* TY_STRUCT: a struct value (language.md §9.1): sdef its declaration; rank,
 * shape and spec its stacked dims (S[N@X], outermost first); elems its
 * nelems leaves in declaration order (depth first), each a full array type
 * with the stacked dims leading. Leaves carry their own states (a gradient
 * swaps U and R, a manual body sees local types), so two values of one
 * struct may differ in their leaves' types. Lowering flattens a struct to
 * its leaves: later stages never see one. */
typedef enum { TY_ARRAY, TY_TUPLE, TY_VOID, TY_STRING, TY_FUNC, TY_AXIS, TY_ERROR, TY_TAPE, TY_STRUCT } TypeKind;

typedef struct StructDef StructDef;

/* An array type: dtype, global shape, and the state of every mesh axis:
 * sharding one dim (spec), unreduced (U), reduced (R), varying (V, manual
 * axes only), or replicated/invariant (none of these). Inside a manual
 * function the shape is local along the manual axes and global along the
 * others. weak marks a literal or constant scalar that adopts its partner's
 * dtype and states (typing-rules D7). */
struct Type {
  TypeKind kind;
  DType dtype;
  bool weak;
  int rank;
  int64_t shape[MAX_RANK];
  DimSpec spec[MAX_RANK];
  AxisSet U, R, V;
  int nelems;                /* TY_TUPLE, TY_STRUCT */
  Type *elems;
  const StructDef *sdef;     /* TY_STRUCT */
};

/* A struct declaration, resolved: its fields (an array type, or a struct
 * type whose dims are the field's stacked dims: ty_field_type gives it with
 * its leaves). Its leaves, flattened (nested stacks applied), are made on
 * first use (ty_struct_leaves), and a leaf's path "h.qkvw" when asked
 * (ty_leaf_path): a chain of structs nested n deep costs n, not n^2 leaves
 * or n^3 bytes of paths, until a value of the outermost is made. */
#define MAX_STRUCT_NESTING 2000   /* struct declarations nest at most this deep (E_NAME) */
struct StructDef {
  const char *name;
  Pos pos;
  int nfields;
  const char **field_names;
  Type *field_types;
  int *field_leaf;           /* first leaf of each field */
  StrMap field_index;        /* name -> field + 1 */
  int nleaves;
  int depth;                 /* 1, or 1 + the deepest struct field's */
  Type *leaves;              /* NULL until ty_struct_leaves */
  const char **leaf_names;   /* NULL until ty_leaf_names */
};

Type ty_array(DType dt, int rank, const int64_t *shape);
Type ty_scalar(DType dt);
Type ty_void(void);
Type ty_error(void);
Type ty_tuple(int n, const Type *elems);
Type ty_string(void);                    /* str: replicated, no shape */
bool ty_is_float(DType dt);
bool ty_equal(const Type *a, const Type *b);          /* ignores weak */
bool ty_same_sharding(const Type *a, const Type *b);  /* specs, U, R, V */
bool ty_spec_equal(DimSpec a, DimSpec b);
AxisSet ty_spec_axes(DimSpec s);
AxisSet ty_dim_axes(const Type *t);                   /* axes used by any dim */
int64_t ty_spec_parts(const Mesh *m, DimSpec s);      /* product of sizes */
int64_t ty_local_dim(const Mesh *m, const Type *t, int d);
void ty_local_shape(const Mesh *m, const Type *t, int64_t *out);
int64_t ty_local_count(const Mesh *m, const Type *t);
int64_t ty_global_count(const Type *t);
size_t ty_dtype_size(DType dt);
const char *ty_dtype_name(DType dt);
const char *ty_dtype_c(DType dt);
/* v rounded to bf16 (nearest even, NaN stays NaN, overflow gives inf):
 * its bit pattern, and its value. */
uint16_t ty_bf16_bits(double v);
double ty_bf16_round(double v);
/* The dtype a value is computed in: bf16 in f32, the others in their own. */
DType ty_compute_dtype(DType dt);
/* Canonical printing (language.md §2, fixed). */
const char *ty_str(const Mesh *m, const Type *t);
const char *ty_spec_str(const Mesh *m, DimSpec s);
const char *ty_axes_str(const Mesh *m, AxisSet s);          /* X,Y */
const char *ty_axes_arg(const Mesh *m, AxisSet s);          /* X or (X, Y): a collective's AXES */
const char *ty_local_str(const Mesh *m, const Type *t);     /* f32[4,8] */
/* Well-formedness (rules 0.3): E_DUP, E_DIVIS, E_SPEC; reports at pos (if
 * pos.file is set) and returns false on the first problem. manual: axes
 * allowed in V. */
bool ty_check_wellformed(const Mesh *m, const Type *t, Pos pos, AxisSet manual, const char *what);
/* The same, dim_names[d] the const a written type sized dim d with (or NULL). */
bool ty_check_wellformed_named(const Mesh *m, const Type *t, Pos pos, AxisSet manual, const char *what,
                               const char *const *dim_names);
/* Every array's global byte count fits in TY_MAX_BYTES (so no size, local
 * count or byte sum computed from types overflows); E_SHAPE at pos when
 * not (reported only if pos.file is set). */
#define TY_MAX_BYTES ((int64_t)1 << 48)
bool ty_check_size(const Type *t, Pos pos);
/* The one checked arithmetic on sizes a program writes (shapes, counts,
 * pad amounts) before ty_check_size has bounded them: the exact result of
 * non-negative a, b, or INT64_MAX when it would pass it, which every size
 * check rejects, so a huge size is never seen small, negative or zero. */
int64_t ty_size_mul(int64_t a, int64_t b);
int64_t ty_size_add(int64_t a, int64_t b);
/* ty_size_mul over shape[0..rank). */
int64_t ty_size_product(int rank, const int64_t *shape);
/* "12345", or "more than 2^63" for a saturated size. */
const char *ty_size_str(int64_t n);
Type ty_keep_dims(const Type *reduced, const Type *x, unsigned mask);
Type ty_strip_sharding(const Type *t);   /* same shape/dtype, replicated */
Type ty_without_dim(const Type *x, int k);
Type ty_ct(const Type *t);               /* cotangent type: U and R swap (per leaf of a struct) */
/* The struct d stacked by nstack leading dims (none: 0). */
Type ty_struct(const StructDef *d, int nstack, const int64_t *shape, const DimSpec *spec);
/* A struct type with these leaves (the same struct and stacking as t). */
Type ty_struct_with(const Type *t, const Type *leaves);
/* Field f of a value of struct type t: an array type or a struct type. */
Type ty_field(const Type *t, int f);
int ty_find_field(const StructDef *d, const char *name);
/* Leaves of a value in lowering order: an array or str is one, a struct its
 * leaves, a tuple its elements' in turn, void none. */
int ty_nleaves(const Type *t);
const Type *ty_struct_leaves(const StructDef *d);        /* d's leaves, made on first use */
const char *ty_leaf_path(const StructDef *d, int k);    /* "h.qkvw", made at each call */
const char **ty_leaf_names(const StructDef *d);        /* every leaf's path, deep ones shortened (a.b.c...y.z) */
Type ty_field_type(const StructDef *d, int f);          /* field f's declared type, with its leaves */
Type ty_with_leaves(const Type *t);   /* t, a struct field's type given its leaves (StructDef.field_types has none) */
int ty_flatten(const Type *t, Type *out);   /* writes ty_nleaves(t) types */
/* The first leaf of t (a struct or a tuple of them) whose type differs
 * from u's (same struct): its index, or -1. */
int ty_first_diff_leaf(const Type *t, const Type *u);

/* ---- tc*.c: the typechecker --------------------------------------------- */

/* SYM_STRUCT: a struct declaration (sdecl); SYM_TYPE: a type parameter of
 * a generic function's instance, bound to `type`. */
typedef enum { SYM_LOCAL, SYM_CONST, SYM_FUNC, SYM_AXIS, SYM_STRUCT, SYM_TYPE } SymKind;

struct Symbol {
  SymKind kind;
  const char *name;
  Pos pos;
  Type type;
  bool mutable_;
  FuncDecl *fn;
  int axis;
  bool is_float_const;
  bool dtype_const;    /* SYM_TYPE: `const DT = f32`, also a dtype with dims (DT[8@X]) */
  bool static_int;     /* SYM_LOCAL: a let bound to a compile-time integer (ival), usable as a size */
  int64_t ival;
  double fval;
  int id;              /* lowering: index of the value slot */
  StructDecl *sdecl;   /* SYM_STRUCT */
};

/* Type-checks the program. Returns false if any error was reported.
 * mesh_override: --mesh AXIS=N,... (or NULL); defines: the "NAME=VALUE"
 * strings of -D (or NULL), each replacing the value of `const NAME` (the
 * driver has checked the names and that each value is an integer). */
bool tc_program(Program *p, Mesh *mesh_out, const char *mesh_override, const Vec *defines);
/* `shdc types`: FUNCTION.NAME: TYPE for every binding in source order. */
void tc_print_bindings(FILE *out, const Program *p, const Mesh *m);

enum { GRAD_PLAIN = 1, GRAD_WITH_VALUE = 2, FORM_REMAT = 3, FORM_VJP_SAVE = 4, FORM_VJP_LOAD = 5 };   /* Expr.grad (the others: op_form only) */

/* ---- ir.c: the IR (global view before partitioning, SPMD after) --------- */

/* The core opcodes: control and calls, which the stages handle themselves,
 * and the small vocabulary the stages' builders emit (lower_, ad_, part_,
 * reshard.c); their OpDefs live in the families like any other. Every
 * other operation is numbered by its family from the family's base (ops.h),
 * in its own file (ops.c registers them): adding one touches only that
 * file. */
typedef enum {
  IR_CONST,            /* scalar literal: fval/ival */
  IR_FILL,             /* args: scalar; fills the result type */
  IR_UNARY,            /* attr fn: UnOp */
  IR_BINARY,           /* attr fn: BinOp; NumPy broadcasting */
  IR_SELECT,           /* args: cond, a, b */
  IR_CAST,             /* dtype conversion to the result dtype */
  IR_BROADCAST,        /* NumPy broadcast_to the result shape */
  IR_REDUCE,           /* attr fn: shd redop (RED_); mask: dims */
  IR_RESHAPE,          /* result shape from the type */
  IR_RESHARD,          /* global view only: any type to any type */
  IR_PCAST,            /* manual state change, no data movement */
  /* collectives: attr axes/naxes (ordered group) */
  IR_ALL_REDUCE,       /* attr fn: RED_ */
  IR_ALL_GATHER,       /* attr dim */
  IR_REDUCE_SCATTER,   /* attr dim, fn */
  IR_ALL_TO_ALL,       /* attr split (dim), concat (dim2) */
  IR_PERMUTE,          /* SPMD: whole-mesh permutation, tables from types */
  IR_SLICE_BLOCK,      /* SPMD: keep block (group index over axes) of dim */
  IR_EMBED_BLOCK,      /* SPMD: zeros except own block of dim */
  IR_ZERO_UNLESS_FIRST,/* SPMD: zeros unless group index over axes is 0 */
  IR_RETYPE,           /* SPMD: same bytes, another type (R <-> replicated) */
  IR_ALL_REDUCE_START, /* SPMD (overlap.c): a bucket of sums started; op_async.c says its operands */
  IR_REDUCE_SCATTER_START, /* SPMD (overlap.c): a bucket of reduce-scatters started (the same operands) */
  IR_ALL_REDUCE_WAIT,  /* SPMD (overlap.c): the bucket finished where its results are first used */
  IR_ALL_GATHER_START, /* SPMD (overlap.c): a loop's next all-gathers started an iteration ahead (prefetch) */
  IR_ALL_GATHER_WAIT,  /* SPMD (overlap.c): the prefetched all-gathers finished where first used */
  /* control and calls */
  IR_CALL,             /* callee */
  IR_FOR,              /* args: lo, hi, carried inits; region 0 args: i, carries */
  IR_IF,               /* args: cond; regions: then, else; results yielded */
  IR_YIELD,
  IR_RETURN,
  IR_GRAD,             /* global only: callee, wrt mask, with_value */
  IR_TAPE_NEW,         /* args: count (i32); result: a tape of the carry type */
  IR_TAPE_PUSH,        /* args: tape, index, value: keeps a reference */
  IR_TAPE_GET,         /* args: tape, index; result: the value stored there */
  IR__CORE,
} Opcode;

enum { RED_SUM, RED_MAX, RED_MIN };
/* IR_ALL_REDUCE_START's iv: this many integers a member (op_async.c); the
 * last is the operand's dim a reduce-scatter bucket splits (-1: none). */
enum { ASYNC_MEMBER_W = 5 + 2 * MAX_RANK, ASYNC_SCATTER_DIM = 4 + 2 * MAX_RANK };
/* A member's kind (SHD_ASYNC_ order) and its flags (shdrt.h's): a bf16 sum into an f32 carry (SHD_ASYNC_WIDEN);
 * with it, an f32 member sent as bf16 (SHD_ASYNC_NARROW, --reduce-dtype=bf16). */
enum { ASYNC_KIND = 3, ASYNC_WIDEN = 4, ASYNC_NARROW = 8 };
/* The views (reshapes of unit dims, retypes) overlap.c and scatter.c follow between a sum and its use. */
enum { ACC_VIEWS = 6 };
/* A bucket's start (overlap.c): of all-reduces, reduce-scatters or prefetched all-gathers. */
static inline bool ir_is_async_start(int op) {
  return op == IR_ALL_REDUCE_START || op == IR_REDUCE_SCATTER_START || op == IR_ALL_GATHER_START;
}
static inline bool ir_is_async_wait(int op) { return op == IR_ALL_REDUCE_WAIT || op == IR_ALL_GATHER_WAIT; }
/* IR_CALL's fn: remat(f)(args) (language.md §9.8); vjp_save(f, slot,
 * slots=S)(args), its args then slot (ival: S), and vjp_load(f, slot)(gy),
 * its args the cotangents then slot: both expanded by the autodiff. */
enum { CALL_PLAIN, CALL_REMAT, CALL_VJP_SAVE, CALL_VJP_LOAD };
enum { PCAST_VARYING, PCAST_UNREDUCED, PCAST_REDUCED };

/* The dims of a dot_general: an instruction's (Inst.dot) and the
 * typechecker's (TcInfo.dot). */
typedef struct {
  int nbatch, ncontract;
  int lhs_batch[MAX_RANK], rhs_batch[MAX_RANK];
  int lhs_contract[MAX_RANK], rhs_contract[MAX_RANK];
} DotDims;

typedef struct IrBlock IrBlock;
typedef struct Inst Inst;
typedef struct Func Func;

typedef struct Value {
  int id;
  Type type;
  Inst *def;           /* NULL for block arguments */
  IrBlock *arg_of;     /* block whose argument this is */
  int index;           /* result or argument index */
  const char *name;    /* source name, for readable IR and C (a struct leaf: p_w_b) */
  const char *display; /* the name users read (a struct leaf: p.w.b), when it differs:
                          ir_value_label */
  int cnum;            /* its number in its function's C names (emit_number_values): an edit
                          elsewhere in the program leaves a function's C unchanged */
} Value;

struct Inst {
  int op;              /* Opcode, or a family's own (ops.c) */
  Pos pos;
  Value **args;
  int nargs;
  Value **results;
  int nresults;
  IrBlock *regions[2];
  int nregions;
  IrBlock *parent;
  /* attributes */
  int fn;
  int dim, dim2;
  int shift;
  int64_t ival;
  double fval;
  unsigned mask;
  int perm[MAX_RANK];
  int axes[MAX_AXES];
  int naxes;
  DotDims dot;
  const char *str;
  Func *callee;
  int64_t *iv;         /* a list of integers (slice bounds, wrt order...) */
  int niv;
};

struct IrBlock {
  Vec insts;           /* Inst * */
  Value **args;
  int nargs;
  Inst *owner;         /* the for/if this block belongs to; NULL for a body */
};

struct Func {
  const char *name;    /* in the IR and the C: unique (adamw_1, loss_value_and_grad_0_1) */
  const char *display; /* the name users read (adamw, value_and_grad(loss)): ir_func_label */
  Pos pos;
  IrBlock *body;       /* body->args are the parameters */
  Type *results;
  int nresults;
  bool manual;
  AxisSet manual_axes;
  bool is_main;
  bool generated;      /* made by autodiff */
  FuncDecl *decl;
  Type *sig_params;    /* global types at the call boundary (= body types */
  Type *sig_results;   /* unless manual) */
};

typedef struct {
  Mesh mesh;
  Vec funcs;           /* Func * */
  bool spmd;           /* after partitioning */
  int next_value;
  bool numbered;       /* emit_number_values ran: the module can be emitted */
} Module;

/* op_async.c: the dtype a reduction bucket's values move in (bf16 for --reduce-dtype=bf16's narrowed
 * members), and its staging buffer's bytes. */
DType async_wire_dtype(const Inst *in);
int64_t async_bucket_bytes(const Module *mod, const Inst *in);

Module *ir_module(const Mesh *m);
Func *ir_func(Module *mod, const char *name, int nparams, const Type *params, int nresults, const Type *results);
IrBlock *ir_block(int nargs, const Type *types, Module *mod);
Value *ir_value(Module *mod, Type t);
/* Appends an instruction with fresh results of the given types. */
Inst *ir_emit(Module *mod, IrBlock *b, int op, Pos pos, int nargs, Value **args, int nresults, const Type *rtypes);
Value *ir_emit1(Module *mod, IrBlock *b, int op, Pos pos, int nargs, Value **args, Type rtype);
void ir_add_region(Inst *in, IrBlock *b);
/* Copies every attribute (not operands, results or regions). */
void ir_copy_attrs(Inst *dst, const Inst *src);
/* A cast widening bf16 to f32: exact and elementwise, so it commutes with
 * a sum's slicing and bucketing (mixed precision's bf16 gradients into
 * their f32 master weights). */
static inline bool ir_is_widen(const Inst *in) {
  return in && in->op == IR_CAST && in->args[0]->type.dtype == DT_BF16 && in->results[0]->type.dtype == DT_F32;
}
int ir_index_of(const IrBlock *b, const Inst *in);          /* in's position in b, -1 when absent */
void ir_insert_at(IrBlock *b, int at, Inst *in);           /* in goes into b at position at */
void ir_print_module(FILE *out, const Module *mod);
void ir_print_func(FILE *out, const Module *mod, const Func *f);
const char *ir_opname(int op);
/* The names every message and table a user reads shows (explain, plan,
 * E_MEMORY, the trace's spans): the source's own, never the IR's mangled
 * ones. A value: its source path (p.w.layers.w1), or NULL for a temporary;
 * a function: its source name, value_and_grad(loss), adamw<T = Decay>. */
const char *ir_value_label(const Value *v);
const char *ir_func_label(const Func *f);
/* Gives nv v's names (IR and display) where nv has none. */
void ir_copy_name(Value *nv, const Value *v);
/* Makes the functions' display names unique: a later function that would
 * read like an earlier one gets " (manual over X)" if it is a per-device
 * instance, then #2, #3, ... */
void ir_unique_labels(Module *mod);
/* For the values defined in b (results of its instructions) and b's
 * arguments: the index of the instruction of b that uses them last,
 * counting uses inside nested blocks as uses by the instruction that owns
 * the block; unused results get their defining index, unused arguments -1.
 * last_use is indexed by value id. */
void ir_last_uses(const IrBlock *b, int *last_use);
/* Zeroes the entry (elem bytes) of every value b defines or uses, nested
 * blocks included: passes keep one by-id array for the module and clear
 * it per function, so that they stay linear in the program's size. */
void ir_clear_ids(const IrBlock *b, void *by_id, size_t elem);
/* Adds to uses[id] every use of each value in b, nested blocks included. */
void ir_count_uses(const IrBlock *b, int *uses);
/* A loop-carried argument of a for body b (not its index): the loop holds
 * one reference to it until the iteration ends. */
bool ir_is_carry(const Value *v, const IrBlock *b);
/* The calls between the first nf functions of a module (calls of later
 * functions are left out). to[first[f] .. first[f+1]) are the indices (into
 * mod->funcs) of the functions f calls, one per call site; order lists the
 * nf functions callees first (a depth-first post-order), and pos inverts
 * it. On a call cycle, exactly the calls of a function that comes later in
 * the order (pos[callee] > pos[caller]) close the cycle. Built without
 * recursion: a call chain may be as long as the program. */
typedef struct {
  int nf;
  int *first, *to;
  int *order, *pos;
  PtrMap index;                  /* Func * -> its index */
} CallGraph;
void ir_call_graph(const Module *mod, int nf, CallGraph *g);
void ir_call_graph_free(CallGraph *g);
/* Structural checks between passes: operands defined before use and in
 * scope, region arity, terminators; in test and debug builds (SHDC_VERIFY=1
 * in the environment, as tests/run.py sets it, or shdc compiled with
 * -DSHDC_VERIFY) also every result's type against its OpDef's infer.
 * Aborts with an ICE on the first failure. */
void ir_verify(const Module *mod);
/* in's result types from its OpDef.infer into out (pre-filled as infer
 * says); true without one. */
bool ir_infer(const Module *mod, const Inst *in, Type *out);
/* An integer scalar known at compile time (a constant, or +, -, * of such):
 * a loop's trip count. */
bool ir_const_int(const Value *v, int64_t *out);
/* A for loop's trip count when both bounds are such constants (0 when the
 * upper is not above the lower). */
bool ir_const_trips(const Inst *loop, int64_t *trips);

/* ---- ops.c: the operation registry, as the stages see it -------------- */

/* Every operation is defined once, in the file of its family (op_*.c):
 * its builtin names with their typing and lowering (BuiltinDef), and its IR
 * opcodes with their autodiff transpose, partitioning rule and C emission
 * (OpDef). The stages dispatch through these tables, as JAX binds each
 * primitive's abstract evaluation, sharding rule, transpose and lowering to
 * the primitive. This header holds what a stage reads of an IR operation
 * (its OpDef, found by op_def); what the families are written with (the
 * builtin rows, the families' tables, the builders each stage exports
 * for them) is ops.h's. The stage contexts are opaque to the families. */
/* How the generated code gets an instruction's array result: a new buffer,
 * a view of operand 0 (no bytes), (zero_unless_first) a view on the first
 * rank and a new buffer elsewhere, or (all_reduce) operand 0's own buffer
 * when the operand dies here and nothing else refers to it. Scalars are
 * EMIT_NONE. */
typedef enum { EMIT_NONE, EMIT_ALLOC, EMIT_VIEW, EMIT_VIEW_OR_ALLOC, EMIT_STEAL_OR_ALLOC } EmitResult;
typedef struct Lower Lower;
typedef struct AD AD;
typedef struct Part Part;
typedef struct Emit Emit;

enum {                     /* OpDef.flags */
  OPF_ELEMENTWISE = 1,     /* one value per element: emitted by expr, fused into its consumer's loop */
  OPF_COLLECTIVE = 2,      /* communicates: bytes_sent, listed by explain */
  OPF_EFFECT = 4,          /* kept when its results are unused (I/O, calls, control) */
  OPF_OUT_SHARDING = 8,    /* its partition rule reshards its natural result to the result type, so a
                            * reshard after it may become its result type (optimize.c: a weight
                            * gradient's sum is reduce-scattered to the shards, not all-reduced) */
  OPF_RECOMPUTE = 16,      /* cheap and free of communication (creation, broadcasts, state casts, reads of
                            * the command line, the clock or a file): a loop's backward pass recomputes it
                            * rather than saving it on a tape (autodiff.c) */
  OPF_OUTPUT = 32,         /* writes output (print, save): recomputed code (autodiff.c) leaves it out */
  OPF_TRACE_LINE = 64,     /* the timeline (SHD_TRACE=FILE.json) names its source line, as a GEMM's (every
                            * collective's is named too) */
  OPF_ADDS_INTO = 128,     /* a scatter-add (operands g, idx): adds g into a zero-filled result. With a
                            * first operand more (base, g, idx), the form optimize.c makes of base +
                            * scatter, it adds into base's buffer (taken when base dies there, else a copy):
                            * the gradient of a pick or a lookup added to another's is one pass, not three */
  OPF_WINDOW_READ = 256,   /* a window at run-time starts (args x, one i32 start a dim) read: dynamic_slice */
  OPF_WINDOW_WRITE = 512,  /* a window written (args x, u, starts; iv u's global sizes): dynamic_update_slice.
                            * overlap.c defers a reduced update of a loop's carry into its bucket's wait */
};

/* What a collective costs on a network (netmodel.c, OpDef.net_seconds): a
 * group of G ranks, n bytes of operand 0 on each, `sent` the bytes explain
 * says the busiest rank sends, `world` ranks in all; the slowest link of
 * the group has latency a (s) and takes b s a byte, a local reduction g s
 * a byte. */
typedef struct {
  double G, n, sent, world;
  double a, b, g;
} NetCost;

typedef struct OpDef {
  int op;                  /* Opcode, or a family's own opcode from its IR_BASE_ */
  const char *name;        /* in the IR text */
  const char *trace_kind;  /* the collective the runtime's trace counts it as (NULL: name) */
  unsigned flags;
  /* The variant after the name in the IR text ("sum" in all_reduce.sum),
   * and the attributes after the operands (both may be NULL). */
  const char *(*variant)(const Inst *in);
  void (*print)(FILE *out, const Module *mod, const Inst *in);
  const char *const *variants;   /* every variant it may print (NULL-terminated), for shdc list-ops */
  /* Autodiff: adds the cotangents of in's operands, given g, the cotangent
   * of its result (NULL: not differentiable). */
  void (*vjp)(AD *a, Inst *in, Value *g);
  /* Partitioner: this rank's block of the result from the operands'
   * blocks `args` (NULL: the instruction is copied as it is). */
  void (*partition)(Part *p, Inst *in, Value **args);
  /* C emission: statements (emit) or, for OPF_ELEMENTWISE, the per-element
   * expression (expr). */
  void (*emit)(Emit *e, const Inst *in);
  const char *(*expr)(Emit *e, const Inst *in);
  /* How the generated code gets result k (NULL: a new buffer), the bytes
   * of temporaries it allocates and frees itself, and (collectives) the
   * bytes one rank sends, with the runtime trace's formulas (NULL: those
   * of group_bytes, for operand 0's block over the group of in's axes). */
  EmitResult (*result)(const Module *mod, const Inst *in, int k);
  int64_t (*temp_bytes)(const Module *mod, const Inst *in);
  int64_t (*bytes_sent)(const Module *mod, const Inst *in);
  /* Collectives: the bytes one rank sends when each of the g ranks of the
   * group holds n bytes: the one formula explain, SHD_TRACE's check and
   * reshard.c's plan search use. And the seconds the runtime's algorithm
   * takes on a network (netmodel.c), naming the algorithm. */
  int64_t (*group_bytes)(int64_t n, int64_t g);
  double (*net_seconds)(const NetCost *c, const Inst *in, const char **algo);
  /* A view that only moves dims (transpose, a reshape adding or dropping
   * size-1 dims): the type operand 0 needs for the result to have type t,
   * false when there is none; optimize.c folds an out_sharding through it. */
  bool (*operand_for)(const Inst *in, const Type *t, Type *operand);
  /* A contraction or a scatter-add: the mesh axes over which its local
   * result is a partial sum (contracting dims split alike on both operands;
   * the indices split), 0 when none; optimize.c adds such terms of a sum
   * before one reduction. */
  AxisSet (*partial_axes)(const Inst *in);
  /* The types of in's results from its operands and attributes (JAX's
   * abstract evaluation), for the IR verifier (ir_verify_types) and for
   * what autodiff builds (ad_infer). On entry out[k] is result k's declared
   * type (zeros for an instruction being built); infer overwrites what the
   * operation determines: dtype and shape, and the sharding states unless
   * they are an out_sharding the program or a pass chose. False (nothing
   * reported) when the operands are not valid for it. */
  bool (*infer)(const Module *mod, const Inst *in, Type *out);
  /* The work of one rank's block, for shdc plan's compute estimate (plan.c):
   * adds a contraction's FLOPs to *dot (they run at the sgemm rate) and any
   * other operation's element operations to *ew. NULL: an OPF_ELEMENTWISE
   * operation adds its result's elements to *ew, any other nothing. */
  void (*work)(const Module *mod, const Inst *in, double *dot, double *ew);
} OpDef;

const OpDef *op_def(int op);   /* NULL for an unknown opcode */
static inline bool op_is_collective(int op) {
  const OpDef *d = op_def(op);
  return d && (d->flags & OPF_COLLECTIVE);
}
/* The axes an if's condition or a for's bounds vary over (in a manual
 * body; 0 for any other instruction). */
static inline AxisSet ir_varying_axes(const Inst *in) {
  if (in->op == IR_IF)
    return in->args[0]->type.V;
  if (in->op == IR_FOR)
    return in->args[0]->type.V | in->args[1]->type.V;
  return 0;
}
/* The work of in's own block (not its regions'), for plan and the overlap
 * pass: its OpDef.work, else an elementwise result's elements; added to
 * *dot (contraction FLOPs) and *ew (element operations). */
void op_work(const Module *mod, const Inst *in, double *dot, double *ew);
/* `shdc list-ops` (a developer's command): every builtin, operator and form
 * and every IR operation with its family and variants, one a line,
 * tab-separated; tests/tools/test_list_ops.py compares it with the docs
 * and the editor grammars. False when the write failed. */
bool op_list(FILE *out);

/* ---- lower.c: typed AST to global IR ------------------------------------ */

Module *lower_program(Program *p, const Mesh *m);

/* ---- autodiff.c --------------------------------------------------------- */

/* Replaces every IR_GRAD by a call of a generated function that returns the
 * value (if asked) and the gradients. Errors ([E_GRAD]...) are reported. */
bool ad_module(Module *mod);

/* ---- overlap.c ----------------------------------------------------------- */

/* scatter.c: a loop's all-reduced gradient accumulator kept only in blocks
 * after the loop reduce-scatters inside it (ZeRO's gradients). */
void scatter_accumulators(Module *mod);
/* After opt_module: sums over mesh axes gathered into buckets of at most
 * bucket_bytes (0: the pass is off), each started where its operands are
 * final and waited where its results are first used (IR_ALL_REDUCE_START,
 * IR_ALL_REDUCE_WAIT); a loop accumulator's reduced updates are deferred
 * to the loop's end. With prefetch, a layer loop's all-gathers of its
 * layer's parameters go one iteration ahead (IR_ALL_GATHER_START,
 * IR_ALL_GATHER_WAIT: FSDP's prefetch). The default cap (--bucket) is
 * PyTorch DDP's. */
enum { OVERLAP_BUCKET = 25 << 20 };
void overlap_module(Module *mod, int64_t bucket_bytes, bool prefetch, bool narrow);
/* The work a bucket's start can hide behind (contraction FLOPs and
 * elementwise operations per rank): what runs between it and its wait, and
 * for a loop's bucket one iteration of the loop's body (the next one runs
 * while it travels). Returns the wait (NULL if not found). */
const Inst *overlap_work(const Module *mod, const Inst *start, double *dot, double *ew);
/* How many times an instruction of a loop body of `trips` iterations runs
 * a pass of the loop: a prefetched all-gather's start there (its condition
 * not a constant) runs in all but the last. */
static inline double overlap_runs(const Inst *in, double trips) {
  int64_t c;
  return in->op == IR_ALL_GATHER_START && trips >= 1 && !ir_const_int(in->args[0], &c) ? trips - 1 : trips;
}

/* ---- partition.c, reshard.c --------------------------------------------- */

/* Rewrites every function into SPMD form: local shapes, explicit collectives. */
bool part_module(Module *mod);
/* diverge.c: after part_module, a call under a condition varying over axes
 * V whose callee reaches a collective over V is [E_DIVERGE]; false then. */
bool diverge_check_calls(Module *mod);

/* Offsets of rank r's local block of t along each dim (global coordinates). */
void part_block_offset(const Mesh *m, const Type *t, int rank, int64_t *off);

/* ---- optimize.c --------------------------------------------------------- */

/* Before partitioning: folds a reshard into the reduction or contraction
 * it is the only use of. After: removes dead instructions. */
void opt_global(Module *mod);
void opt_module(Module *mod);
/* Dead code out of a generated gradient, then the tapes no tape_get reads
 * (residuals the backward pass did not need) with their pushes. */
void opt_prune_tapes(Module *mod, Func *f);

/* ---- explain.c ---------------------------------------------------------- */

typedef struct NetModel NetModel;
/* net: with --network, each collective's estimated time and the per-step
 * totals (netmodel.c); NULL for the plain report. */
void explain_module(FILE *out, const Module *mod, const SourceFile *file, const NetModel *net);
/* Peak bytes of live arrays on one rank while f runs (its parameters
 * counted): for main, the program's peak. */
int64_t explain_func_peak(const Module *mod, const Func *f);
/* --max-memory: an [E_MEMORY] error where main's peak (every function's,
 * without a main) exceeds limit bytes (limit_text as the user wrote it),
 * naming the function, the peak and the largest arrays live then. Returns
 * the largest peak checked. */
int64_t explain_check_memory(const Module *mod, int64_t limit, const char *limit_text);

/* ---- sched.c, fuse.c: the plan of loops and buffers (schedule.h) --------- */

/* The pass after opt_module: moves the instructions that read a loop
 * group's column sum (a sum over the leading dims, made in the group's row
 * loop) after the group, so that the group is not cut there (fuse.c). */
void sched_module(Module *mod);
/* How the generated code gets result k of in (OpDef.result, or the
 * control flow's and views' own), as the emitter and explain both count
 * it; the bytes of the temporaries an instruction allocates and frees
 * itself (OpDef.temp_bytes). */
EmitResult sched_result_kind(const Module *mod, const Inst *in, int k);
int64_t sched_temp_bytes(const Module *mod, const Inst *in);

/* ---- emit_program.c, emit_parts.c, emit_c.c: the C (emit_internal.h) ---- */

/* Numbers each function's values in their order of appearance in it (the
 * N of their C names x_N, vN), so that a function's C does not change
 * when another function does; the last step before emission. */
void emit_number_values(Module *mod);
/* main_peak: explain's peak of live arrays in main (explain_func_peak),
 * which the program checks against the host's memory at start-up; the
 * caller computes it, so the emitter does not depend on explain. */
void emit_module(FILE *out, const Module *mod, const SourceFile *file, int64_t main_peak);
/* A translation unit of a build (emit_parts.c): its C (malloc'd) and what
 * it holds, for messages ("main", "step for avx2"). */
typedef struct {
  char *text;
  size_t len;
  const char *label;
} EmitUnit;
/* The same program as translation units that `shdc build` compiles at once
 * and its cache keeps (cache.c): each unit's text depends only on the
 * functions it holds (and the program's file name), never on the number
 * of cores or on the other functions, so an edit recompiles only the
 * units of the functions it changed. With clones, a function's copies for
 * default, avx2 and avx512f are three units; small functions share units
 * (a stable grouping, emit_parts.c). The last unit holds main, the mesh
 * table and the resolvers. The module has a main. Returns the count. */
int emit_module_units(const Module *mod, const SourceFile *file, int64_t main_peak, bool clones, EmitUnit **units);


/* ---- diag_json.c, diag_fix.c, diag_codes.c: machine-readable diagnostics - */

typedef enum { DIAG_PLAIN, DIAG_JSON, DIAG_SARIF } DiagFormat;
/* From here on diag_error/diag_note record instead of printing. */
void diagout_start(DiagFormat format);
bool diagout_recording(void);
void diagout_add(Pos pos, const char *code, const char *message, bool note);
void diagout_add_warning(Pos pos, const char *code, const char *message);
/* The parsed program of a file, where fixes find their expressions. */
void diagout_program(const Program *prog);
/* A problem that is not in a program (an unreadable file): exit status 2,
 * reported in the document too. */
void diagout_tool_error(const char *message);
/* Writes the document (a JSON array, or one SARIF 2.1.0 log); false when
 * the write failed. */
bool diagout_write(FILE *out);
/* s as a JSON string literal (UTF-8 kept, invalid bytes as U+FFFD). */
void diag_json_string(FILE *o, const char *s);
/* v as a JSON number, or null when it is not finite (JSON has no inf, nan). */
void diag_json_number(FILE *o, double v);

/* A pending fix, resolved to a source range when the document is written. */
typedef enum { FIX_RANGE, FIX_WRAP_EXPR, FIX_WRAP_OPERAND, FIX_ANNOTATE, FIX_KEYWORD } FixKind;
typedef struct {
  FixKind kind;
  Pos at;                 /* the error's position (operand/annotate) */
  Pos from, to;           /* FIX_RANGE */
  const struct Expr *expr;/* FIX_WRAP_EXPR */
  int operand;
  const char *before, *after, *text, *what;
} PendingFix;
/* A resolved fix: replace [from, to) by text. */
typedef struct {
  Pos from, to;
  const char *text, *what;
} SourceFix;
void diagout_add_fix(const PendingFix *f);
/* A fix of the plain diagnostic being printed (diag.c shows it as a help
 * line with the source line edited, before the explain-error hint). */
void diag_plain_fix(const PendingFix *f);
/* The last error or warning was not reported (past --max-errors, turned
 * off, captured): its notes and fixes are dropped with it. */
bool diag_last_suppressed(void);
bool diag_fix_resolve(const PendingFix *f, const Program *prog, SourceFix *out);
/* The column just past the token at pos (for a diagnostic's range). */
int diag_token_end(Pos pos);
/* The extent [from, to) of the operator, call or indexing at pos. */
bool diag_expr_range(Pos at, Pos *from, Pos *to);
const Program *diagout_program_of(const SourceFile *file);

typedef struct {
  const char *code;        /* E_CONTRACT */
  const char *name;        /* a short title */
  const char *summary;     /* one line */
  const char *help;        /* what the rule is and the usual fix */
  const char *example;     /* a program with this error (and no other) */
  const char *fixed;       /* the same program, fixed: it checks clean */
  const char *max_memory;  /* both are checked with --max-memory=THIS (E_MEMORY), or NULL */
} DiagCode;
int diag_code_count(void);
const DiagCode *diag_code_at(int i);
int diag_code_index(const char *code);

/* ---- warn.c: the warnings of a program that type-checks ----------------- */

/* W_PSUM_INVARIANT, W_UNUSED, W_RESHARD_ROUNDTRIP on the functions of
 * prog's own file (not those of the files it imports), through
 * diag_warning. */
void warn_program(const Program *prog, const Mesh *mesh);
/* op_collective.c: the operand of a type-checked reshard call, else NULL. */
const struct Expr *op_reshard_operand(const struct Expr *e);

/* ---- show.c: shdc show FILE [FUNC.NAME...] ------------------------------- */

/* Pictures of the array bindings (all, or those named FUNC.NAME or FUNC):
 * which device holds which block. Returns 0, or 2 when a name matched
 * nothing. */
int show_program(FILE *out, const Program *p, const Mesh *m, const char *const *names, int nnames);

/* ---- netmodel.c: shdc explain --network=... ------------------------------ */

typedef struct {
  double bandwidth;    /* bytes per second */
  double latency;      /* seconds */
  const char *label;   /* "intra-node", for the report */
} NetLink;

struct NetModel {
  NetLink def;                     /* axes not listed */
  bool have_def;
  int naxes;
  const char *axis_names[MAX_AXES];
  NetLink axes[MAX_AXES];
  double reduce_bandwidth;         /* bytes/s of local reductions; 0: free */
};

/* BANDWIDTH,LATENCY or a file of per-axis links; an error message or NULL. */
const char *net_parse(NetModel *n, const char *spec);
const char *net_check_mesh(const NetModel *n, const Mesh *m);
/* Bytes one rank sends for a collective instruction (the formulas of the
 * runtime's trace): explain's, plan's and the network models'. */
int64_t net_bytes_sent(const Module *mod, const Inst *in);
/* The estimated seconds of a collective instruction, and the algorithm. */
double net_collective_seconds(const NetModel *n, const Module *mod, const Inst *in, const char **algo);
const char *net_seconds_str(double s);
void net_describe(FILE *out, const NetModel *n, const Mesh *m);
/* For each loop of main: collectives, bytes and seconds of one iteration;
 * then main's peak of live arrays (explain_func_peak, the caller's). */
void net_report_steps(FILE *out, const NetModel *net, const Module *mod, int64_t main_peak);

/* ---- plan.c: shdc plan FILE --devices=N ---------------------------------- */

/* 80GB, 80GiB, 512MiB, 1.5e9 (bytes); 100G, 1.5TFLOP/s, 5e10 (FLOP/s). */
bool plan_parse_bytes(const char *s, int64_t *out);
bool plan_parse_flops(const char *s, double *out);
#define PLAN_MAX_LAYOUTS 1024
#define PLAN_FN_COLUMNS 4
/* Compiles the file for mesh "AXIS=N,...": its SPMD module, or NULL with
 * *error the first error's text. */
typedef const Module *(*PlanCompile)(void *ctx, const char *mesh, const char **error);
typedef struct {
  const char *file;
  int naxes;
  const char *names[MAX_AXES];
  int fixed[MAX_AXES];      /* --mesh: the size of an axis; 0: to choose */
  int64_t devices;
  int64_t memory;           /* --memory: bytes per device; 0: no limit */
  const char *memory_text;
  const NetModel *net;
  const char *network_text;
  double flops, ew_flops;   /* contractions, elementwise work: FLOP/s per device */
  PlanCompile compile;
  void *ctx;
  bool json;                /* --json: one JSON object instead of the tables */
} PlanArgs;
/* The table of layouts on out; 0 when one type-checks and fits, 1 when
 * none does, 2 on a usage error. */
int plan_run(FILE *out, const PlanArgs *a);

/* ---- trace_summary.c: shdc trace-summary RUN.json ------------------------ */

/* Time per category and collectives per rank of a SHD_TRACE=FILE.json
 * timeline, on stdout; the exit status (0, 1 malformed, 2 unreadable). */
int tsum_run(const char *path);

/* ---- sha256.c ------------------------------------------------------------ */

/* SHA-256 (FIPS 180-4): the build cache's keys and checksums. */
typedef struct {
  uint32_t h[8];
  uint64_t len;
  unsigned char buf[64];
  size_t nbuf;
} Sha256;
void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
void sha256_final(Sha256 *s, unsigned char out[32]);
void sha256_hex(Sha256 *s, char out[65]);         /* the digest as 64 hex digits and a NUL */
void sha256_str(Sha256 *s, const char *text);     /* text and its NUL: fields stay apart */

/* ---- files.c: what shdc reads and writes -------------------------------- */

#include "../runtime/safefile.h"

/* Opens a regular file for reading (a FIFO, a device, a socket or a
 * directory is refused without blocking; max > 0 bounds its size); NULL
 * with *why set. *size gets its size when size is not NULL. */
FILE *file_open_regular(const char *path, long long max, const char **why, long long *size);
/* A file written under a private temporary name beside target and renamed
 * over it (only when target is absent or a regular file). */
typedef struct {
  const char *target, *why;
  shd_temp tmp;
  FILE *f;
} FileOut;
/* NULL with o->why set ("PATH is a FIFO, not a regular file", ...). */
FILE *file_out_open(FileOut *o, const char *path);
/* Flushes, closes and renames; NULL, or why not (the temporary is gone). */
const char *file_out_commit(FileOut *o);
/* A new private directory (mode 0700) beside `beside` (NULL: in TMPDIR),
 * and a path inside it; both removed at exit and on SIGINT/SIGTERM/SIGHUP
 * unless forgotten. NULL when it cannot be made (errno). */
const char *file_private_dir(const char *beside);
const char *file_private_path(const char *dir, const char *name);
void file_forget(const char *path);

/* ---- cache.c: the build cache -------------------------------------------- */

/* Compiled translation units kept under a key (64 hex digits of SHA-256
 * over everything that determines the object), in $SHDC_CACHE, else
 * $XDG_CACHE_HOME/shdc, else ~/.cache/shdc. */
typedef struct BuildCache BuildCache;
typedef struct {
  int stored, evicted, corrupt;
} CacheStats;
/* False when SHDC_CACHE=off. */
bool cache_enabled(void);
/* The cache, bounded to limit bytes; NULL when it is off or cannot be used
 * (a warning, once, says why: the build goes on without it). */
BuildCache *cache_open(int64_t limit);
const char *cache_root(const BuildCache *c);
/* On a hit, the object of key written to the new file obj, and the
 * compiler's messages when it was made (malloc'd, or NULL). A miss: no
 * entry, a corrupt one (removed), or one whose headers changed. */
bool cache_get(BuildCache *c, const char *key, const char *obj, char **messages, size_t *nmessages);
/* Keeps obj under key with the messages, and the headers the compiler's
 * dependency file deps (-MD -MT x) lists but source; a failure warns once
 * and the build goes on without storing. */
void cache_put(BuildCache *c, const char *key, const char *obj, const char *deps, const char *source,
               const char *messages, size_t nmessages);
/* Evicts the least recently used entries beyond the bound (when the build
 * stored any), closes, and says what happened. */
void cache_close(BuildCache *c, CacheStats *stats);

/* ---- install.c: version, and where the runtime is ------------------------ */

void drv_print_version(FILE *out);
int drv_abi_version(void);
const char *drv_version(void);
/* "shdc VERSION (git REVISION)": what a manifest records. */
const char *drv_version_full(void);
/* The documentation beside this shdc (the installed man page, or docs/cli.md
 * of its source tree) as an absolute path, or NULL. */
const char *drv_doc_path(void);
/* The directory of the pages of docs/ beside this shdc (installed in
 * PREFIX/share/doc/shdc, or docs/ of its source tree), absolute, or NULL. */
const char *drv_docs_dir(void);
/* main.c: `shdc check` of a program held in memory (named `name` in the
 * diagnostics), in a child process: its exit status (0, 1 or 2), and the
 * plain diagnostics it printed in *out (malloc'd). */
int drv_check_text(const char *name, const char *text, const char *max_memory, char **out);
/* driver.c, for the language server: the front end on src, imports looked
 * up in incdirs (-I) as check does (and with full, check's later stages);
 * whether it typechecked in *typed; the program, NULL only when nothing
 * parsed. */
Program *drv_analyze(SourceFile *src, const Vec *incdirs, Mesh *mesh, bool full, bool *typed);
/* lsp.c: `shdc lsp [-I DIR]...`, the server's loop; the exit status. */
int lsp_main(const Vec *incdirs);
/* explain_error.c: `shdc explain-error [CODE | --all]`; the exit status. */
int drv_explain_error(const char *code, bool all);
typedef struct {
  char inc[4300];      /* the -I directory holding shdrt.h */
  char lib[4300];      /* libshdrt.a */
  char searched[8800]; /* where it looked, for the error message */
} RuntimePaths;
/* SHDC_HOME, else the directory of the shdc executable, else its parent
 * (PREFIX/bin/shdc -> PREFIX/include, PREFIX/lib). */
bool drv_find_runtime(RuntimePaths *rp);

#endif
