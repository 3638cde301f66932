/* shdc.h: the one internal header of the compiler, sectioned by the file that
 * owns each declaration (chibicc style). Exported names carry the prefix of
 * their module: arena_/vec_ (arena.c), diag_ (diag.c), lex_ (lexer.re),
 * parse_ (parse.c), ast_ (ast.c), ty_ (types.c), rule_ (rules.c), tc_
 * (typecheck*.c), ir_ (ir.c), lower_ (lower.c), ad_ (autodiff.c), part_
 * (partition.c, reshard.c), opt_ (optimize.c), explain_ (explain.c), emit_
 * (emit_c.c), drv_ (main.c).
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

/* ---- arena.c ------------------------------------------------------------ */

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

/* A growable string. */
typedef struct {
  char *buf;
  size_t len, cap;
} Str;
__attribute__((format(printf, 2, 3))) void str_printf(Str *s, const char *fmt, ...);
void str_vprintf(Str *s, const char *fmt, va_list ap);
void str_putc(Str *s, char c);
const char *str_cstr(Str *s);

/* ---- diag.c ------------------------------------------------------------- */

typedef struct {
  const char *name;  /* as given on the command line */
  const char *text;  /* NUL-terminated contents */
  size_t len;
} SourceFile;

typedef struct {
  const SourceFile *file;
  int line, col;     /* 1-based; line 0 means "no position" */
} Pos;

/* FILE:LINE:COL: error: MESSAGE [CODE], then the source line and a caret.
 * code is a stable E_ name from typing-rules.md (without brackets). */
__attribute__((format(printf, 3, 4))) void diag_error(Pos pos, const char *code, const char *fmt, ...);
void diag_verror(Pos pos, const char *code, const char *fmt, va_list ap);
/* A note attached to the previous error: "FILE:LINE:COL: note: ...". */
__attribute__((format(printf, 2, 3))) void diag_note(Pos pos, const char *fmt, ...);
int diag_error_count(void);
void diag_reset(void);
/* Fatal internal error: the compiler found a bug in itself. */
__attribute__((noreturn, format(printf, 1, 2))) void diag_ice(const char *fmt, ...);

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
} Lexer;

void lex_init(Lexer *lx, const SourceFile *file);
/* Next token; TK_NL is produced for a newline that ends a statement, EOF
 * as kind 0. Bad characters are reported with [E_SYNTAX] and skipped. */
Token lex_next(Lexer *lx);
const char *lex_token_name(int kind);

/* ---- ast.c: the syntax tree --------------------------------------------- */

typedef enum { DT_F32, DT_F64, DT_I32, DT_BOOL, DT__COUNT } DType;

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
  DimExpr dims[MAX_RANK];
  int ndims_written;   /* > MAX_RANK is reported by tc */
  AnnotExpr annots[6];
  int nannots;
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
} ExprKind;

/* Binary/unary operator codes shared by AST and IR (BIN_, UN_). */
typedef enum {
  BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_MAX, BIN_MIN, BIN_POW,
  BIN_LT, BIN_LE, BIN_GT, BIN_GE, BIN_EQ, BIN_NE, BIN_AND, BIN_OR,
  BIN_MATMUL,          /* AST only: lowered to a dot */
  BIN__COUNT
} BinOp;

typedef enum {
  UN_NEG, UN_EXP, UN_LOG, UN_SIN, UN_COS, UN_TANH, UN_SQRT, UN_ABS,
  UN_RELU, UN_SIGMOID, UN_NOT, UN_SIGN, UN_STEP, /* step(x) = x > 0 */
  UN__COUNT
} UnOp;

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
  int builtin;         /* EX_CALL: BI_ code, or 0 for a user function */
  FuncDecl *fn;        /* EX_CALL of a user function, or grad's function */
  void *tc;            /* builtin-specific facts for lowering (tc_*.c) */
};

typedef enum {
  ST_LET, ST_LET_TUPLE, ST_VAR, ST_ASSIGN, ST_FOR, ST_IF, ST_RETURN, ST_EXPR
} StmtKind;

struct Stmt {
  StmtKind kind;
  Pos pos;
  Token name;          /* let/var/assign target, for variable */
  Vec names;           /* ST_LET_TUPLE: Token * */
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
  TypeExpr *results[16];
  int nresults;
  bool result_tuple;   /* written -> (T, ...) */
  Block *body;

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

typedef struct {
  const SourceFile *file;
  MeshDecl *mesh;      /* NULL if the file has none (an error in tc) */
  int nmesh_decls;
  Vec consts;          /* ConstDecl * */
  Vec funcs;           /* FuncDecl * */
  Vec items_order;     /* for diagnostics of duplicates */
  /* set by the typechecker: a partial manual body has varying control flow,
   * so `check` partitions too, to find implicit collectives under it */
  bool diverge_in_partial_manual;
} Program;

Expr *ast_expr(ExprKind kind, Pos pos);
Stmt *ast_stmt(StmtKind kind, Pos pos);
const char *ast_binop_text(int op);
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
void parse_func(ParseCtx *pc, FuncDecl *f);
void parse_manual(ParseCtx *pc, FuncDecl *f, Token kw, Vec *axes);
FuncDecl *parse_func_head(Token name, Vec *params, Vec *results, bool tuple);
Param *parse_param(Token name, TypeExpr *t);
void parse_mesh(ParseCtx *pc, Token kw, Vec *names, Vec *sizes);
void parse_const(ParseCtx *pc, Token name, Expr *value);
Stmt *parse_stmt_let(Token kw, Token name, TypeExpr *t, Expr *e, StmtKind k);
Stmt *parse_stmt_let_tuple(Token kw, Vec *names, Expr *e);
Stmt *parse_stmt_assign(Token name, Expr *e);
Stmt *parse_stmt_for(Token kw, Token var, Expr *lo, Expr *hi, Block *b);
Stmt *parse_stmt_if(Token kw, Expr *c, Block *then, Block *els);
Stmt *parse_stmt_return(Token kw, Expr *e);
Stmt *parse_stmt_expr(Expr *e);
Block *parse_block(Token lbrace, Vec *stmts);
Block *parse_block_of(Stmt *s);
Pos tok_pos(Token t);

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
typedef enum { TY_ARRAY, TY_TUPLE, TY_VOID, TY_STRING, TY_FUNC, TY_AXIS, TY_ERROR, TY_TAPE } TypeKind;

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
  int nelems;                /* TY_TUPLE */
  Type *elems;
};

Type ty_array(DType dt, int rank, const int64_t *shape);
Type ty_scalar(DType dt);
Type ty_void(void);
Type ty_error(void);
Type ty_tuple(int n, const Type *elems);
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
Type ty_strip_sharding(const Type *t);   /* same shape/dtype, replicated */
Type ty_ct(const Type *t);               /* cotangent type: U and R swap */

/* ---- rules.c: sharding propagation rules, pure functions on types -------- */

/* Every rule returns true and fills *out on success; on failure it reports
 * at pos with the rule's error code and a fix, and returns false. A NULL pos
 * file means "do not report" (used by autodiff to probe). */
typedef struct {
  const Mesh *mesh;
  AxisSet manual;            /* manual axes in scope (0 in the global view) */
  Pos pos;
  const char *opname;        /* for messages: "add", "matmul", ... */
} RuleCtx;

bool rule_broadcast_shapes(RuleCtx *c, int n, const Type *const *ops, Type *out);
bool rule_elementwise(RuleCtx *c, int op, int n, const Type *const *ops, Type *out);
bool rule_unary(RuleCtx *c, int op, const Type *x, Type *out);
/* The casts that make an operand varying over `target` (2.2): pvary for
 * invariant axes, r2v for reduced ones. */
bool rule_vma_cast(RuleCtx *c, const Type *op, AxisSet target, AxisSet *pvary, AxisSet *r2v);

typedef struct {
  int nbatch, ncontract;
  int lhs_batch[MAX_RANK], rhs_batch[MAX_RANK];
  int lhs_contract[MAX_RANK], rhs_contract[MAX_RANK];
} DotDims;
/* dot_general: result dims are batch, lhs free, rhs free. annot (may be
 * NULL) is the out_sharding. */
bool rule_dot(RuleCtx *c, const Type *lhs, const Type *rhs, const DotDims *d, const Type *annot, Type *out);
bool rule_reduce(RuleCtx *c, int redop, const Type *x, unsigned dims, const Type *annot, Type *out);
bool rule_transpose(RuleCtx *c, const Type *x, const int *perm, Type *out);
bool rule_reshape(RuleCtx *c, const Type *x, int rank, const int64_t *shape, const Type *annot, Type *out);
bool rule_reshard(RuleCtx *c, const Type *x, const Type *target, Type *out);
/* NumPy matmul as dot_general (+ the transpose to NumPy order in *perm,
 * identity when none is needed; size-1 batch dims broadcast against
 * larger ones are left in the dot's result and come last in perm, to be
 * removed by a reshape when *dot_rank > *out_rank). */
bool rule_matmul_dims(RuleCtx *c, const Type *a, const Type *b, DotDims *d, int *perm, int *out_rank,
                      int *dot_rank);

/* ---- tc*.c: the typechecker --------------------------------------------- */

typedef enum { SYM_LOCAL, SYM_CONST, SYM_FUNC, SYM_AXIS } SymKind;

struct Symbol {
  SymKind kind;
  const char *name;
  Pos pos;
  Type type;
  bool mutable_;
  FuncDecl *fn;
  int axis;
  bool is_float_const;
  int64_t ival;
  double fval;
  int id;              /* lowering: index of the value slot */
};

/* Type-checks the program. Returns false if any error was reported. */
bool tc_program(Program *p, Mesh *mesh_out, const char *mesh_override);
/* `shdc types`: FUNCTION.NAME: TYPE for every binding in source order. */
void tc_print_bindings(FILE *out, const Program *p, const Mesh *m);

/* Builtin function codes (EX_CALL.builtin). */
typedef enum {
  BI_NONE,
  BI_UNARY,            /* exp log sin cos tanh sqrt abs relu sigmoid */
  BI_MAXIMUM, BI_MINIMUM, BI_WHERE,
  BI_SUM, BI_MEAN, BI_MAX, BI_MIN_RED,
  BI_TRANSPOSE, BI_RESHAPE, BI_EINSUM, BI_CAST, BI_RESHARD,
  BI_ZEROS, BI_ONES, BI_FULL, BI_IOTA, BI_NORMAL, BI_UNIFORM,
  BI_PRINT, BI_SAVE, BI_LOAD, BI_ARG, BI_CLOCK,
  BI_GRAD, BI_VALUE_AND_GRAD,
  BI_PSUM, BI_PMAX, BI_PMIN, BI_PMEAN, BI_ALL_GATHER, BI_PSUM_SCATTER,
  BI_ALL_TO_ALL, BI_PPERMUTE, BI_AXIS_INDEX, BI_PCAST,
  BI__COUNT
} Builtin;

/* ---- typecheck internals (tc.c, tc_expr.c, tc_builtins.c, tc_manual.c) --- */

/* What the typechecker learned about a call or operator that lowering needs
 * (Expr.tc). Fields are used per builtin as commented there. */
typedef struct {
  unsigned mask;                 /* reduced dims; grad: wrt positions */
  int perm[MAX_RANK];            /* transpose; matmul/einsum result order */
  bool has_perm;
  int axes[MAX_AXES];            /* collectives: ordered mesh axes */
  int naxes;
  int dim, dim2, shift;          /* all_gather/psum_scatter dim, all_to_all split/concat, ppermute */
  int redop;                     /* RED_ */
  int pcast_to;                  /* PCAST_; all_gather: -1 varying, PCAST_* otherwise */
  int un;                        /* UnOp of BI_UNARY */
  DType dtype;                   /* cast target */
  int rank;                      /* reshape target */
  int64_t shape[MAX_RANK];
  Expr *x, *y, *z;               /* positional operands */
  Expr *value;                   /* full's value, seed, arg default */
  Type type;                     /* the type argument or the annotation used */
  DotDims dot;                   /* matmul/einsum */
  Type dot_type;                 /* dot_general result (before perm) */
  unsigned sum_x, sum_y;         /* einsum: dims summed out of one operand first */
  bool einsum_unary;
  bool squeeze;                  /* matmul: reshape away broadcast size-1 batch dims */
  bool scale_by_count;           /* mean, pmean */
  double count;
  bool with_value;               /* value_and_grad */
  int psum_invariant;            /* psum of an invariant value: multiply by this */
} TcInfo;

typedef struct Scope {
  struct Scope *up;
  Vec syms;                      /* Symbol * */
} Scope;

/* An `if` or `for` of a manual body whose condition or bound varies across
 * devices: no collective may run under it, and a var from outside that it
 * assigns must be varying over the condition's axes. */
typedef struct {
  Stmt *stmt;                    /* the if or for */
  Expr *cond;                    /* its varying condition or bound */
  Scope *outer;                  /* the scope the statement is in */
} Diverge;

typedef struct {
  Program *prog;
  Mesh *mesh;
  FuncDecl *fn;                  /* function being checked */
  AxisSet manual;                /* its manual axes */
  Scope *scope;
  Vec diverge;                   /* Diverge *: varying conditions we are under */
  bool annot_v_free;             /* manual returns: annotations do not fix the manual states */
  Expr *bad_annot;               /* an expression whose annotation was itself wrong */
  const char *annot_code;        /* code of a creation/annotation mismatch (E_ANNOT if NULL) */
} TcCtx;

/* tc.c */
Symbol *tc_lookup(TcCtx *c, const char *name);
Symbol *tc_bind(TcCtx *c, SymKind kind, Token name, Type t);
bool tc_resolve_type(TcCtx *c, TypeExpr *te, Type *out);
bool tc_const_int(TcCtx *c, Expr *e, int64_t *out);
RuleCtx tc_rule(TcCtx *c, Pos pos, const char *opname);
Type tc_manual_local(TcCtx *c, const Type *global, AxisSet manual, Pos pos, const char *what, bool *ok);
/* tc_expr.c */
Type tc_expr(TcCtx *c, Expr *e);
/* Types e where annot (may be NULL) is the expected type: it is the
 * out_sharding of an annotatable operation, an assertion ([E_ANNOT])
 * otherwise. Returns the type of e. */
Type tc_expr_annot(TcCtx *c, Expr *e, const Type *annot, const char *where);
/* Types e whose annotation (or parameter or result type) was itself
 * wrong and already reported: a creation call, load or arg there then says
 * nothing more. */
Type tc_expr_unannotated(TcCtx *c, Expr *e);
bool tc_is_annotatable(TcCtx *c, Expr *e);
Type tc_call_user(TcCtx *c, Expr *e, FuncDecl *f, Vec *args, int first_arg);
void tc_split_args(Expr *call, Expr **pos, int maxpos, int *npos, Expr **kw, const char **kwnames, int nkw, bool *ok);
/* tc_builtins.c */
int tc_builtin_code(const char *name, int *un);
Type tc_builtin(TcCtx *c, Expr *e, const Type *annot);
/* tc_manual.c */
Type tc_collective(TcCtx *c, Expr *e);
bool tc_check_manual_result(TcCtx *c, const Type *value, const Type *declared, Pos pos);
/* An annotation at a manual function's return fixes the explicit axes only:
 * its manual states become V and the manual parts of U and R. */
void tc_manual_states_from(TcCtx *c, Type *annot, AxisSet V, AxisSet U, AxisSet R);
bool tc_axes_arg(TcCtx *c, Expr *e, int *axes, int *naxes, bool manual_only, const char *what);
void tc_push_diverge(TcCtx *c, Stmt *s, Expr *cond, Scope *outer);
bool tc_check_diverge_assign(TcCtx *c, Stmt *assign, Symbol *sym);
/* The source form of an expression, for messages. */
const char *tc_expr_text(const Expr *e);

/* ---- ir.c: the IR (global view before partitioning, SPMD after) --------- */

typedef enum {
  IR_CONST,            /* scalar literal: fval/ival */
  IR_FILL,             /* args: scalar; fills the result type */
  IR_IOTA,             /* attr dim: value = global index along dim */
  IR_RANDOM,           /* args: seed (i32); attr fn: 0 normal, 1 uniform */
  IR_UNARY,            /* attr fn: UnOp */
  IR_BINARY,           /* attr fn: BinOp; NumPy broadcasting */
  IR_SELECT,           /* args: cond, a, b */
  IR_CAST,             /* dtype conversion to the result dtype */
  IR_BROADCAST,        /* NumPy broadcast_to the result shape */
  IR_DOT,              /* dot_general: attr dot */
  IR_REDUCE,           /* attr fn: shd redop (RED_); mask: dims */
  IR_TRANSPOSE,        /* attr perm */
  IR_RESHAPE,          /* result shape from the type */
  IR_RESHARD,          /* global view only: any type to any type */
  IR_PCAST,            /* manual state change, no data movement */
  IR_COPY,             /* a fresh copy (SPMD) */
  /* collectives: attr axes/naxes (ordered group) */
  IR_ALL_REDUCE,       /* attr fn: RED_ */
  IR_ALL_GATHER,       /* attr dim */
  IR_REDUCE_SCATTER,   /* attr dim, fn */
  IR_ALL_TO_ALL,       /* attr split (dim), concat (dim2) */
  IR_PPERMUTE,         /* attr shift */
  IR_PERMUTE,          /* SPMD: whole-mesh permutation, tables from types */
  IR_AXIS_INDEX,       /* group index over axes, i32 */
  IR_SLICE_BLOCK,      /* SPMD: keep block (group index over axes) of dim */
  IR_EMBED_BLOCK,      /* SPMD: zeros except own block of dim */
  IR_ZERO_UNLESS_FIRST,/* SPMD: zeros unless group index over axes is 0 */
  IR_RETYPE,           /* SPMD: same bytes, another type (R <-> replicated) */
  /* control and calls */
  IR_CALL,             /* callee */
  IR_FOR,              /* args: lo, hi, carried inits; region 0 args: i, carries */
  IR_IF,               /* args: cond; regions: then, else; results yielded */
  IR_YIELD,
  IR_RETURN,
  /* io */
  IR_PRINT,            /* args: values; str: '\x1f'-separated texts */
  IR_SAVE,             /* str: path */
  IR_LOAD,             /* str: path */
  IR_ARG,              /* str: name; fval/ival default */
  IR_CLOCK,            /* wall-clock seconds (f64), for timing steps */
  IR_GRAD,             /* global only: callee, wrt mask, with_value */
  IR_TAPE_NEW,         /* args: count (i32); result: a tape of the carry type */
  IR_TAPE_PUSH,        /* args: tape, index, value: keeps a reference */
  IR_TAPE_GET,         /* args: tape, index; result: the value stored there */
  IR__COUNT
} Opcode;

enum { RED_SUM, RED_MAX, RED_MIN };
enum { PCAST_VARYING, PCAST_UNREDUCED, PCAST_REDUCED };

typedef struct IrBlock IrBlock;
typedef struct Inst Inst;
typedef struct Func Func;

typedef struct Value {
  int id;
  Type type;
  Inst *def;           /* NULL for block arguments */
  IrBlock *arg_of;     /* block whose argument this is */
  int index;           /* result or argument index */
  const char *name;    /* source name, for readable IR and C */
} Value;

struct Inst {
  Opcode op;
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
};

struct IrBlock {
  Vec insts;           /* Inst * */
  Value **args;
  int nargs;
  Inst *owner;         /* the for/if this block belongs to; NULL for a body */
};

struct Func {
  const char *name;
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
} Module;

Module *ir_module(const Mesh *m);
Func *ir_func(Module *mod, const char *name, int nparams, const Type *params, int nresults, const Type *results);
IrBlock *ir_block(int nargs, const Type *types, Module *mod);
Value *ir_value(Module *mod, Type t);
/* Appends an instruction with fresh results of the given types. */
Inst *ir_emit(Module *mod, IrBlock *b, Opcode op, Pos pos, int nargs, Value **args, int nresults, const Type *rtypes);
Value *ir_emit1(Module *mod, IrBlock *b, Opcode op, Pos pos, int nargs, Value **args, Type rtype);
void ir_add_region(Inst *in, IrBlock *b);
/* Copies every attribute (not operands, results or regions). */
void ir_copy_attrs(Inst *dst, const Inst *src);
const char *ir_binop_name(int op);
const char *ir_red_name(int op);
void ir_print_module(FILE *out, const Module *mod);
void ir_print_func(FILE *out, const Module *mod, const Func *f);
const char *ir_opname(Opcode op);
/* For the values defined in b (results of its instructions): the index of
 * the instruction of b that uses them last, counting uses inside nested
 * blocks as uses by the instruction that owns the block; unused values get
 * their defining index. last_use is indexed by value id. */
void ir_last_uses(const IrBlock *b, int *last_use);
/* Adds to uses[id] every use of each value in b, nested blocks included. */
void ir_count_uses(const IrBlock *b, int *uses);
/* Structural checks between passes: operands defined before use and in
 * scope, region arity, terminators. Aborts with an ICE on failure. */
void ir_verify(const Module *mod);

/* ---- lower.c: typed AST to global IR ------------------------------------ */

Module *lower_program(Program *p, const Mesh *m);

/* ---- autodiff.c --------------------------------------------------------- */

/* Replaces every IR_GRAD by a call of a generated function that returns the
 * value (if asked) and the gradients. Errors ([E_GRAD]...) are reported. */
bool ad_module(Module *mod);

/* ---- partition.c, reshard.c --------------------------------------------- */

/* Rewrites every function into SPMD form: local shapes, explicit collectives. */
bool part_module(Module *mod);
/* Appends the SPMD instructions that move v to type `to` (reshard.c): local
 * slices, reduce-scatters, all-to-alls, all-reduces, all-gathers, embeds,
 * or one whole-mesh permutation, chosen greedily for the least traffic. */
Value *part_reshard(Module *mod, IrBlock *b, Pos pos, Value *v, const Type *to);
/* What part_reshard would cost: bytes one rank sends (and the number of
 * collectives), without emitting anything. */
int64_t part_reshard_cost(const Mesh *m, const Type *from, const Type *to, int *ncoll);
/* For IR_PERMUTE: the world rank this rank sends to and receives from. */
void part_permute_tables(const Mesh *m, const Type *from, const Type *to, int *dest, int *src);
/* Offsets of rank r's local block of t along each dim (global coordinates). */
void part_block_offset(const Mesh *m, const Type *t, int rank, int64_t *off);

/* ---- optimize.c --------------------------------------------------------- */

/* Before partitioning: folds a reshard into the reduction or contraction
 * it is the only use of. After: removes dead instructions. */
void opt_global(Module *mod);
void opt_module(Module *mod);

/* ---- explain.c ---------------------------------------------------------- */

void explain_module(FILE *out, const Module *mod, const SourceFile *file);
/* Bytes one rank sends for a collective instruction (same formulas as the
 * runtime's trace). */
int64_t explain_bytes_sent(const Module *mod, const Inst *in);

/* ---- emit_c.c ----------------------------------------------------------- */

void emit_module(FILE *out, const Module *mod, const SourceFile *file);
/* How the generated code gets an instruction's array result: a new buffer,
 * a view of operand 0 (no bytes), (zero_unless_first) a view on the first
 * rank and a new buffer elsewhere, or (all_reduce) operand 0's own buffer
 * when the operand dies here and nothing else refers to it. Scalars are
 * EMIT_NONE. */
typedef enum { EMIT_NONE, EMIT_ALLOC, EMIT_VIEW, EMIT_VIEW_OR_ALLOC, EMIT_STEAL_OR_ALLOC } EmitResult;
EmitResult emit_result_kind(const Module *mod, const Inst *in, int k);
/* Bytes of the temporaries an instruction allocates and frees itself. */
int64_t emit_temp_bytes(const Module *mod, const Inst *in);

#endif
