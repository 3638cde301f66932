/* ops.h: the vocabulary the operation families (op_*.c) are written in,
 * sectioned like shdc.h by the file that owns each declaration: the
 * families' opcode bases, the sharding rules' helpers, the typechecker's
 * internals and argument helpers, the builtin rows and the families'
 * tables (ops.c), what the families share, and the builders the stages
 * export for the families' hooks (lower_, ad_, part_, emit_).
 *
 * Included by the families, by ops.c, and by the stage files that own
 * something declared here (their builders); every other file needs only
 * shdc.h, which has what a stage reads of an operation: its OpDef
 * (tests/tools/test_layering.py holds the cut).
 */
#ifndef OPS_H
#define OPS_H

#include "shdc.h"

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

__attribute__((format(printf, 3, 4))) bool rule_fail(RuleCtx *c, const char *code, const char *fmt, ...);
/* The dtype of an elementwise result: weak operands adopt the others'. */
bool rule_join_dtypes(RuleCtx *c, int n, const Type *const *ops, DType *out);
bool rule_broadcast_shapes(RuleCtx *c, int n, const Type *const *ops, Type *out);
/* The casts that make an operand varying over `target` (2.2): pvary for
 * invariant axes, r2v for reduced ones. */
bool rule_vma_cast(RuleCtx *c, const Type *op, AxisSet target, AxisSet *pvary, AxisSet *r2v);
/* Copies of the operands with those casts applied (eff), and the result's V. */
bool rule_vma_unify(RuleCtx *c, int n, const Type *const *ops, Type *eff, AxisSet *vout);
/* The fix that reduces u's pending sum over A / marks y reduced over A. */
const char *rule_reduce_fix(RuleCtx *c, const Type *u, AxisSet A);
const char *rule_reduced_fix(RuleCtx *c, const Type *y, AxisSet A);
/* The same, staging the structured fix (diag_fix.c) for operand k (0 =
 * left, a call's k-th positional argument; k < 0: none) that rule_fail
 * attaches to the error it reports; rule_stage_* return `text` unchanged
 * for the message, so they are called inside rule_fail's arguments. */
const char *rule_reduce_fix_at(RuleCtx *c, int k, const Type *u, AxisSet A);
const char *rule_reduced_fix_at(RuleCtx *c, int k, const Type *y, AxisSet A);
const char *rule_stage_wrap(const char *text, int k, const char *before, const char *after, const char *what);
const char *rule_stage_reshard(const char *text, int k, const char *type, const char *what);
const char *rule_stage_annotate(const char *text, const char *type, const char *what);
/* An annotation used as out_sharding: dtype, shape and V must match the
 * computed result; in a manual body the manual axes keep the computed U, R. */
bool rule_check_annot(RuleCtx *c, const Type *annot, const Type *computed, const char *what);
bool rule_manual_states(RuleCtx *c, const Type *annot, AxisSet U, AxisSet R, Type *out);
/* An annotation of a result summed over a dim split across axes A (a
 * gather's indexed dim, segment_sum's data dim 0) may be unreduced over A
 * (and manual axes) only: else [E_UR] naming `dim` and the fix. */
bool rule_annot_pending_within(RuleCtx *c, const Type *annot, AxisSet A, const char *dim);
bool rule_annot_keeps_states(RuleCtx *c, const char *what, const Type *x, const Type *annot, Type *out);

/* ---- typecheck internals (tc.c, tc_expr.c, tc_args.c, tc_manual.c) ------- */

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
  bool widen;                    /* matmul/einsum: bf16 operands, an f32 result (annotated, §10.1) */
  bool scale_by_count;           /* mean, pmean */
  double count;
  bool with_value;               /* value_and_grad */
  int64_t *wrt;                  /* grad: the wrt positions in order */
  int nwrt;
  int psum_invariant;            /* psum of an invariant value: multiply by this */
  int64_t slots;                 /* vjp_save: its tapes' entries */
  Expr *slot;                    /* vjp_save, vjp_load: the entry */
} TcInfo;

typedef struct Scope {
  struct Scope *up;
  Vec syms;                      /* Symbol * */
  StrMap index;                  /* name -> latest Symbol *, once the scope is large */
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
  const Type *bound;             /* the declared type of the let, var or assignment being checked */
  const Expr *bound_expr;        /* its value: a creation inside its elementwise arithmetic takes bound's type,
                                  * one behind another operator names it in the message */
} TcCtx;

/* tc.c */
Symbol *tc_lookup(TcCtx *c, const char *name);
Symbol *tc_global(const char *name);          /* a constant, function, struct or mesh axis */
bool tc_is_duplicate(const void *decl);       /* a declaration whose name was declared before (reported) */
void tc_add_global(Symbol *s);
Symbol *tc_bind(TcCtx *c, SymKind kind, Token name, Type t);
bool tc_resolve_type(TcCtx *c, TypeExpr *te, Type *out);
bool tc_const_int(TcCtx *c, Expr *e, int64_t *out);
RuleCtx tc_rule(TcCtx *c, Pos pos, const char *opname);
Type tc_manual_local(TcCtx *c, const Type *global, AxisSet manual, Pos pos, const char *what, bool *ok);
/* op_creation.c: whether e is root or inside it through operators (elementwise arithmetic only, or any). */
/* tc_expr.c */
Type tc_expr(TcCtx *c, Expr *e);
Type tc_expr_with(TcCtx *c, Expr *e, const Type *annot);   /* annot as out_sharding, unchecked */
/* Reports why a non-array (a function, an axis, a tuple...) is not a value. */
bool tc_want_array(TcCtx *c, Expr *e, const Type *t, const char *what);
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
void tc_vjp_reset(void);   /* forgets the vjp_saves seen (a new program: tc_program) */
void tc_split_args(Expr *call, Expr **pos, int maxpos, int *npos, Expr **kw, const char **kwnames, int nkw, bool *ok);
/* tc_args.c: the forms of builtin arguments, for the families' checks */
Type tc_builtin(TcCtx *c, Expr *e, const Type *annot);    /* dispatches to e->bi->check */
TcInfo *tc_info(Expr *e);                                  /* e->tc, allocated */
const char *tc_callee(const Expr *e);                      /* the called name */
Type tc_operand(TcCtx *c, Expr *x, const char *what);      /* an array or scalar value */
Type tc_array_operand(TcCtx *c, Expr *call, Expr *x, const char *what);   /* rank >= 1 */
/* Positional arguments lo..hi into pos and the keyword ones kwn[0..nkw) into
 * kw; the number of positional ones, or -1 after reporting with usage. */
int tc_call_args(TcCtx *c, Expr *e, Expr **pos, int lo, int hi, Expr **kw, const char **kwn, int nkw,
                 const char *usage);
bool tc_dims_arg(TcCtx *c, Expr *a, int rank, unsigned *mask, const char *what);   /* axis=k or (j, k) */
bool tc_dim_arg(TcCtx *c, Expr *a, int rank, int *dim, const char *what);           /* one dim */
bool tc_bool_arg(TcCtx *c, Expr *a, bool *out, const char *what);
/* A compile-time integer (a literal, a const or arithmetic on them): top_k's
 * k; tc_count_arg's also 1 to 2^31 - 1 (a number of classes or segments
 * that i32 indices address; `what` begins the message: "one_hot: the
 * number of classes"). */
bool tc_const_int_arg(TcCtx *c, Expr *a, int64_t *v, const char *what);
bool tc_count_arg(TcCtx *c, Expr *a, int64_t *v, const char *what);
bool tc_type_arg(TcCtx *c, Expr *a, Type *out, const char *what);
bool tc_string_arg(TcCtx *c, Expr *a, const char *what);
bool tc_scalar_value(TcCtx *c, Expr *v, DType dt, const char *what, bool allow_v);
const Type *tc_out_annot(TcCtx *c, const Type *annot, AxisSet V, AxisSet U, AxisSet R, Type *buf);
/* tc.c, for instance.c: a function's signature and body */
bool tc_check_signature(TcCtx *c, FuncDecl *f);
void tc_check_body(TcCtx *c, FuncDecl *f);
/* The typechecker's entry points that its lower layers call back up
 * through: tc_struct.c (struct operations, typed leaf by leaf) and
 * instance.c (a generic or manual-call instance's signature and body) are
 * called by the expression typer and need it back. They reach it only
 * through this table, which tc_program fills (tc.c), never by name: so the
 * files that call each other stay tc, tc_args and tc_expr, and the two
 * lower layers depend on the typer's interface, not on its files (the
 * layering test counts symbol references). */
typedef struct {
  Symbol *(*lookup)(TcCtx *c, const char *name);
  Symbol *(*global)(const char *name);
  bool (*is_duplicate)(const void *decl);
  void (*add_global)(Symbol *s);
  bool (*resolve_type)(TcCtx *c, TypeExpr *te, Type *out);
  Type (*expr)(TcCtx *c, Expr *e);
  Type (*expr_with)(TcCtx *c, Expr *e, const Type *annot);
  Type (*expr_annot)(TcCtx *c, Expr *e, const Type *annot, const char *where);
  Type (*expr_unannotated)(TcCtx *c, Expr *e);
  bool (*want_array)(TcCtx *c, Expr *e, const Type *t, const char *what);
  bool (*check_signature)(TcCtx *c, FuncDecl *f);
  void (*check_body)(TcCtx *c, FuncDecl *f);
} TcUp;
extern TcUp tc_up;   /* defined in tc_struct.c, filled by tc_program */
/* instance.c: the one place where functions are instantiated: a generic
 * function per distinct binding of its type parameters (language.md §9.3).
 * An instance is an ordinary function (a copy of the body, checked once,
 * appended to the program), so every later stage sees only concrete
 * functions. */
void tc_instances_reset(void);
/* Checks a generic function's declaration (its type parameters). */
bool tc_check_generic(TcCtx *c, FuncDecl *g);
/* The instance of generic g called by `call` with these arguments (typed
 * here, once), or NULL after reporting. */
FuncDecl *tc_instantiate_call(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int nargs);
/* fn and axis parameters (language.md 10.4): how many f has; the view of
 * the generic g with those bound by the call's arguments (removed from
 * args and argv), or NULL after reporting. */
int tc_meta_params(const FuncDecl *f);
FuncDecl *tc_bind_meta(TcCtx *c, Expr *call, FuncDecl *g, Expr **args, int *nargs, Vec *argv);
/* The instance of f (generic or not) called from a manual body: typed by
 * the manual rules, with the device-local types of the arguments (their
 * <V:..> states included). Errors inside it are reported at the call,
 * naming the callee's line. NULL after reporting. */
FuncDecl *tc_instantiate_manual(TcCtx *c, Expr *call, FuncDecl *f, Expr **args, int nargs);
/* Whether two types are equal but for the states of manual axes M. */
bool tc_equal_but_manual(const Type *a, const Type *b, AxisSet M);
/* tc_struct.c: struct declarations, types, construction, fields, and the
 * struct operations that apply an array operation leaf by leaf. */
void tc_structs(TcCtx *c);
bool tc_resolve_named(TcCtx *c, TypeExpr *te, Type *out);
/* A type written as an argument (zeros(GPT), zeros(Block[L]), cast(x, f64)):
 * an EX_TYPE, or a name or indexing that names a struct or type parameter. */
bool tc_type_of_arg(TcCtx *c, Expr *a, Type *out, bool report);
Type tc_field(TcCtx *c, Expr *e);
Type tc_construct(TcCtx *c, Expr *e, Symbol *s, const Type *annot);
Type tc_struct_index(TcCtx *c, Expr *e, const Type *lhs, const Type *annot);
/* e (already checked, struct-valued) where a value of struct type annot is
 * expected: equal leaf by leaf, or an error naming the first field that
 * differs. */
bool tc_struct_fits(TcCtx *c, Expr *e, const Type *t, const Type *annot, const char *where);
/* save(DIR, p) of a struct: one save per leaf into a fresh directory,
 * then the swap (language.md §9.5), the two halves being the save row's
 * own (begin: a fresh directory beside DIR, a str; commit: its swap into
 * DIR's place); load(DIR) typed by a struct: one load per leaf. */
Type tc_struct_save(TcCtx *c, Expr *e, Expr *dir, Expr *x, const struct BuiltinDef *begin,
                    const struct BuiltinDef *commit);
Type tc_struct_load(TcCtx *c, Expr *e, Expr *dir, const Type *annot);
/* An operator or builtin call on struct values (arithmetic, creation of a
 * struct, sum of a struct): types it leaf by leaf into *out and returns
 * true; false (e untouched but for its operands, typed once) when no
 * struct is involved. */
bool tc_struct_op(TcCtx *c, Expr *e, const Type *annot, Type *out);
/* tc_manual.c */
bool tc_check_diverge(TcCtx *c, Expr *e);    /* a collective here: [E_DIVERGE] under a varying condition */
bool tc_check_manual_result(TcCtx *c, const Type *value, const Type *declared, Pos pos);
/* tc_manual.c: how to make v, varying over ax, the invariant value of
 * the local type want: psum or all_gather, as the shapes allow, and saying
 * the shapes; at, the expression (or NULL): an all_gather of pieces of the
 * wanted shape gets psum instead, and with add_fix (called again after the
 * error is reported) that as a fix of it. */
const char *tc_combine_fix(TcCtx *c, const struct Expr *at, const Type *v, const Type *want, AxisSet ax, bool add_fix);
/* An annotation at a manual function's return fixes the explicit axes only:
 * its manual states become V and the manual parts of U and R. */
void tc_manual_states_from(TcCtx *c, Type *annot, AxisSet V, AxisSet U, AxisSet R);
bool tc_axes_arg(TcCtx *c, Expr *e, int *axes, int *naxes, bool manual_only, const char *what);
void tc_push_diverge(TcCtx *c, Stmt *s, Expr *cond, Scope *outer);
bool tc_check_diverge_assign(TcCtx *c, Stmt *assign, Symbol *sym);
/* The source form of an expression, for messages. */
const char *tc_expr_text(const Expr *e);

/* ---- ir.c: the families' opcodes, and what their infer and print use ---- */

/* Each family numbers its IR opcodes from its base, in its own file (ops.c
 * registers them), after shdc.h's core opcodes (below IR__CORE): one base
 * per family file, at least 0x40 opcodes apart; a new family takes the
 * next free one. */
enum {
  IR_BASE_SHAPE = 0x100,
  IR_BASE_INDEX = 0x200,
  IR_BASE_REDUCTION = 0x300,
  IR_BASE_STRING = 0x500,
  IR_BASE_CREATION = 0x540,
  IR_BASE_CONTRACTION = 0x580,
  IR_BASE_COLLECTIVE = 0x5c0,
  IR_BASE_IO = 0x600,
  IR_BASE_ATTENTION = 0x640,
  IR_BASE_GATHER = 0x680,
  IR_BASE_SHIFT = 0x6c0,
  IR_BASE_SOFTMAX = 0x700,
  IR_BASE_JOIN = 0x740,
  IR_BASE_SORT = 0x780,
  IR__LIMIT = 0x800
};

const char *ir_red_name(int op);
/* For the families' OpDef.print: " over (X,Y)", " name=[1,2]". */
void ir_print_axes(FILE *out, const Module *mod, const Inst *in);
void ir_print_ints(FILE *out, const char *name, const int *v, int n);
void ir_print_i64s(FILE *out, const char *name, const int64_t *v, int n);
/* For the families' infer: a RuleCtx that reports nothing, its manual axes
 * those in's operands vary over. */
RuleCtx ir_rule_ctx(const Module *mod, const Inst *in);
/* A literal (IR_CONST): a weak operand, adopting its partner's states as
 * typing-rules D7 says. */
bool ir_is_literal(const Value *v);
/* For the families' infer: out takes t's dtype, rank and global shape,
 * keeping its declared sharding states (an out_sharding); false when t is
 * not an array. */
bool ir_infer_shape(Type *out, const Type *t);
/* Operand k of in is an array (or scalar) of dtype dt (dt < 0: any). */
bool ir_arg_is(const Inst *in, int k, int dt);

/* ---- ops.c: the builtin rows and the families' tables ------------------ */

enum {                     /* BuiltinDef.flags */
  BIF_ANNOT = 1,           /* an annotation on the call is its out_sharding (language.md §4, §8) */
  BIF_MANUAL_ONLY = 2,     /* a collective: only in manual bodies */
  BIF_TYPE_ARG = 4,        /* takes a type as an argument: zeros(f32[8]), cast(x, f64) */
  BIF_LIST_ARG = 8,        /* takes a list [..] as its docs write it: reshape(x, [8, 4]), transpose(x, perm=[1, 0]) */
  BIF_STR_ANNOT = 16,      /* its type is the annotation's, which may be str (load, arg) */
  BIF_ELEMENTWISE = 32,    /* applies field by field to struct operands (language.md §9.2) */
  BIF_CREATION = 64,       /* creates a struct leaf by leaf from a struct type (§9.2) */
  BIF_RANDOM = 128,        /* ... each leaf from its own stream */
  BIF_CONST = 256,         /* a compile-time integer (size): its check leaves the value in Expr.ival */
  BIF_STRUCT_ANNOT = 512,  /* an annotation with a struct type reaches its check (load of a struct) */
  BIF_STRUCT_SUM = 1024,   /* of one struct: the sum of every leaf, one all-reduce per set of axes (§9.2) */
  BIF_STRUCT_RESHARD = 2048, /* of a struct to a struct type with the same leaves, leaf by leaf (reshard) */
  BIF_FIRST_OPERAND = 4096, /* applies to a struct leaf by leaf, its first argument the one operand (pcast) */
  BIF_NO_BF16 = 8192,      /* has no bf16 kernel: a bf16 operand or result is [E_DTYPE] (language.md §10.1) */
};

/* The syntax a builtin row answers to: a call by its name, or an operator
 * of the AST (its code is the Expr's op: a UnOp or BinOp). */
typedef enum {
  SYN_CALL,                /* name(args...) */
  SYN_UNARY,               /* -x, !x (EX_UNARY) */
  SYN_BINARY,              /* a + b ... (EX_BINARY but @) */
  SYN_MATMUL,              /* a @ b */
  SYN_INDEX,               /* x[i, lo:hi] (EX_INDEX) */
  SYN_STRING,              /* "..." (EX_STRING) */
  SYN__COUNT
} OpSyntax;

/* A row of a family's builtin table: a function called by name, or an
 * operator. The typechecker finds a call's row by name (op_builtin) and an
 * operator's by its syntax, its code and the kind of its operands
 * (op_operator), then calls check; lowering calls the same row's lower and
 * fold (Expr.bi). The operands of a unary, binary or @ operator are typed
 * before its row is chosen (a str operand picks the rows whose operand is
 * TY_STRING), so those rows read them from e->lhs->ty and e->rhs->ty. */
typedef struct BuiltinDef {
  const char *name;        /* the function's name, or the operator as written ("+", "@", "x[...]") */
  int code;                /* the family's own code (UnOp, RED_, ...); an operator's UnOp or BinOp */
  unsigned flags;
  /* Types the call or operator e (e->bi is this entry); annot, if not
   * NULL, is the expected type (its out_sharding when BIF_ANNOT). */
  Type (*check)(TcCtx *c, Expr *e, const Type *annot);
  /* Lowers the checked call; NULL for a call that yields no value. */
  Value *(*lower)(Lower *L, Expr *e);
  /* The value of an expression whose type is weak (a constant expression). */
  double (*fold)(Lower *L, Expr *e);
  OpSyntax syntax;         /* SYN_CALL unless an operator */
  TypeKind operand;        /* an operator's operands: TY_ARRAY (0) or TY_STRING */
  const char *doc;         /* a few words on what it does (messages, shdc list-ops), or NULL */
} BuiltinDef;

/* A family of operations (one op_*.c file): its IR operations, its
 * builtins and operators, and what it adds to the generated file. */
typedef struct OpFamily {
  const char *name;        /* "elementwise" */
  const OpDef *ops;        /* NULL-name terminated (or NULL) */
  const BuiltinDef *builtins;
  /* C before the functions of the generated file: the helpers its
   * operations' C calls (NULL: none). */
  void (*preamble)(Emit *e);
  /* C main needs before the program runs: declarations written before
   * main; returns a statement main runs after shd_init (NULL: none).
   * live[i]: function i of the module is emitted. */
  const char *(*main_setup)(Emit *e, const bool *live);
} OpFamily;

/* The families, NULL-terminated, in the order of their preambles. */
const OpFamily *const *op_families(void);
/* OpDef.work for an operation that reads operand 0 once (reductions, scans,
 * row kernels): its local elements, added to *ew. */
void op_work_reads(const Module *mod, const Inst *in, double *dot, double *ew);
const BuiltinDef *op_builtin(const char *name);   /* a function by name, or NULL */
/* The row of an operator: its syntax, its code (UnOp, BinOp; 0 for @,
 * indexing and literals) and the kind of its operands; NULL when no row
 * takes operands of that kind. */
const BuiltinDef *op_operator(OpSyntax syn, int code, TypeKind operand);
/* The operators of a syntax that take operands of a kind, as a phrase for
 * messages: "+ (concatenation), == and != (comparison)". */
const char *op_operators_phrase(OpSyntax syn, TypeKind operand);
/* Every builtin name and form (grad), for suggestions ("did you mean");
 * NULL-terminated. */
const char *const *op_builtin_names(void);
/* The builtins with a BIF_ flag, as a phrase for messages: "zeros, ones
 * and cast". */
const char *op_builtins_phrase(unsigned flag);
/* GRAD_PLAIN for grad, GRAD_WITH_VALUE for value_and_grad, FORM_REMAT for
 * remat (forms that make a function: grad(f, wrt=0)(x), remat(f)(x)), 0 for
 * any other name. */
int op_form(const char *name);

/* ---- op_*.c: what the families offer each other and the stages ------------- */

/* op_elementwise.c, op_unary.c: the elementwise rules (typing-rules 1.2,
 * 1.3, 3.4, 3.5). op: a BinOp, or -1 for where(cond, a, b). */
bool rule_elementwise(RuleCtx *c, int op, int n, const Type *const *ops, Type *out);
bool rule_unary(RuleCtx *c, int op, const Type *x, Type *out);
/* The C of unary function un of a dtype at operand x. */
const char *op_unary_c(int un, DType dt, const char *x);
void op_unary_helper(FILE *out, int un, DType dt);   /* its static inline helper */
int op_unary_count(void);                            /* entries of the table */
/* The all-reduce's seconds on a network (MPI below 32 MiB, a ring above;
 * bf16 all-reduces are the ring's at any size, op_collective.c),
 * for n bytes on each rank; ring false: MPI's algorithms only (the
 * all-reduce of argmax's (value, index) pairs). */
double op_allreduce_seconds(const NetCost *c, double n, bool ring, const char **algo);
/* The bytes one rank of a group of g sends in an all-reduce of n bytes
 * (the runtime trace's formula, without overflow), for the same pairs. */
int64_t op_allreduce_bytes(int64_t n, int64_t g);

/* op_contraction.c: @ and einsum (1.4). */
bool rule_dot(RuleCtx *c, const Type *lhs, const Type *rhs, const DotDims *d, const Type *annot, Type *out);

/* op_reduction.c (1.5), op_shape.c (1.6, 1.7), op_collective.c (1.12). */
bool rule_reduce(RuleCtx *c, int redop, const Type *x, unsigned dims, const Type *annot, Type *out);
/* argmax/argmin (redop RED_MAX/RED_MIN) and cumsum along dim (1.5). */
bool rule_argreduce(RuleCtx *c, int redop, const Type *x, int dim, Type *out);
bool rule_cumsum(RuleCtx *c, const Type *x, int dim, Type *out);
/* op_softmax.c: kind 0 softmax, 1 log_softmax, 2 logsumexp along dim. */
bool rule_softmax(RuleCtx *c, int kind, const Type *x, int dim, Type *out);
/* The reduced rule every multi-operand operation shares (typing-rules
 * 3.5): the operands' R sets agree, and no operand is replicated, sharded
 * or varying over them; *R is the result's. eff as rule_vma_unify gives. */
bool rule_reduced_common(RuleCtx *c, int n, Type *eff, AxisSet *R);
/* op_attention.c: dot_product_attention (language.md §9.9). */
bool rule_attention(RuleCtx *c, const Type *q, const Type *k, const Type *v, Type *out);
bool rule_transpose(RuleCtx *c, const Type *x, const int *perm, Type *out);
/* op_shape.c's transpose (attr perm), which contractions emit too. */
enum { IR_TRANSPOSE = IR_BASE_SHAPE + 1 };
bool rule_reshape(RuleCtx *c, const Type *x, int rank, const int64_t *shape, const Type *annot, Type *out);
bool rule_reshard(RuleCtx *c, const Type *x, const Type *target, Type *out);

/* op_index.c: what joining (op_join.c) shares with indexing. The resize
 * rule (1.9, 1.10): x resized to size keeps its sharding, and a sharded
 * dim whose size changes must stay divisible by its axes ([E_RESIZE], the
 * fix reshards that dim away). Operands sharded alike ([E_SAME], [E_UR];
 * bname is b in the message: "update" or "other operand", btext its source).
 * A compile-time integer argument (a literal, a const or arithmetic on
 * them). The slice of x at start, typed t, in a transpose; x cut to the box
 * (start, size) and resharded to T, in a partitioning rule. */
bool rule_resize(RuleCtx *c, const Type *x, const int64_t *size, Type *out);
bool rule_same_sharding(RuleCtx *c, const Type *a, const Type *b, const char *bname, const char *btext);
bool op_static_int(TcCtx *c, Expr *b, int64_t *v, const char *what);
Value *op_slice_ad(AD *a, Value *x, const int64_t *start, Type t);
Value *op_slice_to(Part *p, Pos pos, Value *x, const int64_t *start, const int64_t *size, const Type *T);
/* op_join.c's pad (iv: lo of each dim, then hi of each dim), which
 * op_index.c's slice transposes to. */
enum { IR_PAD = IR_BASE_JOIN };

/* op_gather.c's opcodes, which op_sort.c's segment_sum and sort's transpose
 * emit too. take and scatter_add with fn=1 drop an index outside [0, n)
 * (a zero row, nothing added) instead of stopping the program. */
enum {
  IR_TAKE = IR_BASE_GATHER, /* args x, idx (i32); dim */
  IR_TAKE_ALONG,            /* args x, idx (i32, x's rank); dim */
  IR_SCATTER_ADD,           /* args g, idx; dim: the transpose of take; the result has x's shape */
  IR_SCATTER_ALONG,         /* args g, idx; dim: the transpose of take_along_axis */
  IR_ONE_HOT,               /* args idx; the classes are the result's last dim */
};

/* op_shift.c: the rows of one dim that change owner, for op_index.c's and
 * op_join.c's partitioning rules. Output row j of dim d is row j - offs[i] of source i
 * (plus the run-time dyn, negated with SHIFT_NEG); the sources are split
 * over `group` (or replicated over it: SHIFT_SRC_REP), so is the result
 * (or replicated: SHIFT_OUT_REP), n_out rows in all; SHIFT_FILL zeros the
 * rows no source covers. */
enum { SHIFT_FILL = 1, SHIFT_DYN = 2, SHIFT_NEG = 4, SHIFT_SRC_REP = 8, SHIFT_OUT_REP = 16 };
Value *op_shift_rows(Part *p, Pos pos, int nsrc, Value **srcs, const int64_t *offs, Value *dyn, unsigned flags,
                     int d, DimSpec group, int64_t n_out);
/* How a dim resized to n_out moves from spec xs to spec ts: the group and
 * the flags of its shift; false when neither splits it (a local cut). */
bool op_shift_plan(const Mesh *m, DimSpec xs, DimSpec ts, int64_t n_out, DimSpec *group, unsigned *flags);

/* Adding an operation (docs/architecture.md):
 *  - a builtin or operator: a BuiltinDef row in its family's table (check,
 *    lower, fold; .syntax and .operand for an operator; the BIF_ flags that
 *    apply), typed with the tc_* helpers and lowered with lower_*;
 *  - an IR operation: an opcode in its family's own enum from the family's
 *    IR_BASE_, and an OpDef: .infer always, then .vjp, .partition, .emit or
 *    .expr, and the OPF_ flags and cost hooks that apply;
 *  - a family: a file op_NAME.c ending in `const OpFamily op_NAME_family`,
 *    a base in the IR_BASE_ enum above, its line in ops.c and its extern below;
 *  - then its docs and highlighting: tests/tools/test_list_ops.py says
 *    what is missing.
 * A stage never calls a family (tests/tools/test_layering.py).
 *
 * The families (op_*.c), listed by ops.c. */
extern const OpFamily op_elementwise_family, op_unary_family, op_contraction_family, op_reduction_family,
    op_shape_family, op_collective_family, op_creation_family, op_io_family, op_softmax_family, op_index_family,
    op_join_family, op_gather_family, op_shift_family, op_string_family, op_attention_family, op_async_family,
    op_sort_family;

/* ---- lower.c: the builders of the families' lowering -------------------- */

Value *lower_expr(Lower *L, Expr *e);
/* e as an operand of dtype dt: a weak (constant) e is folded to it. */
Value *lower_as(Lower *L, Expr *e, DType dt);
/* x cast to dtype dt (x itself when it has it): bf16 computed in f32. */
Value *lower_convert(Lower *L, Pos pos, Value *x, DType dt);
/* e where a value of exactly type `want` is needed (constants adopt it). */
Value *lower_to(Lower *L, Expr *e, const Type *want);
double lower_fold(Lower *L, Expr *e);
Inst *lower_emit(Lower *L, int op, Pos pos, int nargs, Value **args, Type t);
Value *lower_emit1(Lower *L, int op, Pos pos, int nargs, Value **args, Type t);
Inst *lower_emit0(Lower *L, int op, Pos pos, int nargs, Value **args);   /* no result */
/* An instruction with several results (split); a builtin whose type is a
 * tuple returns the first from its lower, and let (a, b) = ... takes them all. */
Inst *lower_emit_n(Lower *L, int op, Pos pos, int nargs, Value **args, int nresults, const Type *types);
Value *lower_const(Lower *L, Pos pos, DType dt, double v);
/* A pcast (no data movement) giving v the manual states of `to`. */
Value *lower_pcast(Lower *L, Pos pos, Value *v, int kind, AxisSet axes, Type to);
/* v made varying over `target` by the implicit casts of typing-rules 2.2. */
Value *lower_vma(Lower *L, Pos pos, Value *v, AxisSet target);
const Mesh *lower_mesh(Lower *L);
AxisSet lower_manual(Lower *L);     /* manual axes of the function being lowered */

/* ---- autodiff.c: the builders of the families' vjp ---------------------- */

/* Builders for the families' vjp functions. Every value they make is typed
 * by the rules (rules.c) from its operands, so cotangents keep the states
 * of typing-rules 4.1. */
Value *ad_primal(AD *a, Value *v);       /* v's copy in the code being emitted */
bool ad_wants_ct(AD *a, const Value *primal);   /* active and float */
/* The cotangent accumulated for primal so far (NULL: none). The VJP of an
 * instruction with several results is called with g NULL and reads each
 * result's cotangent with this. */
Value *ad_ct(AD *a, Value *primal);
void ad_add_ct(AD *a, Value *primal, Value *ct);
/* Replaces the accumulated cotangent by ct, which already includes it. */
void ad_set_ct(AD *a, Value *primal, Value *ct);
/* Adds g, summed over the dims broadcasting stretched, to primal. */
void ad_add_ct_unbroadcast(AD *a, Value *primal, Value *g);
Inst *ad_emit(AD *a, int op, int nargs, Value **args, Type t);
/* The same with several results (an instruction like attention_grad). */
Inst *ad_emit_n(AD *a, int op, int nargs, Value **args, int nresults, const Type *types);
Value *ad_emit1(AD *a, int op, int nargs, Value **args, Type t);
/* op (attribute fn) on args, its result typed by its OpDef.infer; operands
 * with pending sums or reduced marks the rules do not combine are used in
 * their plain form. */
Value *ad_infer(AD *a, int op, int fn, int nargs, Value **args);
Value *ad_const(AD *a, DType dt, double x);
Value *ad_bin(AD *a, int fn, Value *x, Value *y);
Value *ad_un(AD *a, int fn, Value *x);
Value *ad_select(AD *a, Value *c, Value *x, Value *y);
/* g where cond holds, 0 elsewhere (pending sums stay pending). */
Value *ad_gate(AD *a, Value *g, Value *cond);
/* The same logical value with type t (a reshard, cast or retype). */
Value *ad_to_type(AD *a, Value *v, const Type *t);
Value *ad_zeros(AD *a, const Type *t);
Value *ad_unbroadcast(AD *a, Value *g, const Type *primal);
/* v (shaped like x reduced over mask) broadcast back to x's shape, typed t. */
Value *ad_broadcast_as(AD *a, Value *v, const Type *x, unsigned mask, Type t);
const Mesh *ad_mesh(AD *a);
__attribute__((format(printf, 3, 4))) void ad_fail(AD *a, Pos pos, const char *fmt, ...);

/* ---- partition.c, reshard.c: the builders of the partitioning rules ------ */

/* Builders for the families' partition functions. Every rule has one shape
 * (partition.c): reshard the operands to a layout where the local op
 * computes this rank's block, run it, reshard its natural result to the
 * type the program asked for. */
Value *part_to(Part *p, Pos pos, Value *v, const Type *to);       /* part_reshard here */
/* The local operation: in's attributes, opcode op, these operands. */
Value *part_local(Part *p, const Inst *in, int op, int nargs, Value **args, Type t);
void part_put(Part *p, Value *old, Value *nv);
Inst *part_copy(Part *p, Inst *in, Value **args);   /* in itself, on these operands */
/* A created value (fill, iota, random, load) of a type with U: the value
 * on the first device along the U axes, zeros on the others. */
void part_created(Part *p, Inst *in, Value **args);
/* One operand of the result's shape: resharded to the result's specs and U,
 * then the instruction on the blocks (unary functions, cast). */
void part_as_result(Part *p, Inst *in, Value **args);
/* The sharding an elementwise operand needs for the local op to see
 * matching blocks: res's spec on the operand's full-size dims. */
Type part_operand_target(const Type *op, const Type *res);
Module *part_mod(Part *p);
IrBlock *part_block(Part *p);
/* Appends the SPMD instructions that move v to type `to` (reshard.c): local
 * slices, reduce-scatters, all-to-alls, all-reduces, all-gathers, embeds,
 * or one whole-mesh permutation, chosen greedily for the least traffic. */
Value *part_reshard(Module *mod, IrBlock *b, Pos pos, Value *v, const Type *to);
/* What part_reshard would cost: bytes one rank sends (and the number of
 * collectives), without emitting anything. */
int64_t part_reshard_cost(const Mesh *m, const Type *from, const Type *to, int *ncoll);
/* For IR_PERMUTE: the world rank this rank sends to and receives from. */
void part_permute_tables(const Mesh *m, const Type *from, const Type *to, int *dest, int *src);

/* ---- emit_c.c: the builders of the families' C (emit_internal.h) ------- */

__attribute__((format(printf, 2, 3))) void emit_line(Emit *e, const char *fmt, ...);
void emit_indent(Emit *e, int delta);
const char *emit_vname(const Value *v);
const char *emit_dtconst(DType dt);                 /* SHD_F32 ... */
const char *emit_addr(const Value *v);             /* a void * to the data */
const char *emit_flit(DType dt, double v);         /* a C literal */
/* C string literal of s: every byte outside printable ASCII, and " \ ?,
 * as an octal escape. */
const char *emit_str_lit(const char *s, size_t len);
int64_t emit_local_count(Emit *e, const Type *t);
const char *emit_shape_lit(Emit *e, const Type *t);        /* local shape */
const char *emit_row_args(Emit *e, const Value *x, int k); /* "outer, n, inner" around dim k */
const char *emit_gshape_lit(const Type *t);                /* global shape */
const char *emit_axes_lit(const int *axes, int n);         /* (const int[]){..}, n */
const char *emit_spec_axes_lit(DimSpec s);
const char *emit_offset_lit(Emit *e, const Type *t);       /* this rank's block offsets */
const char *emit_ints_lit(const int *v, int n);            /* (const int[]){..} */
const char *emit_where_lit(Emit *e, Pos pos);              /* "FILE:LINE", for run-time errors */
int emit_file_index(Emit *e, Pos pos);                     /* pos's file in the timeline's table */
void emit_trace_at(Emit *e, Pos pos);                      /* the timeline's line of the next GEMM/collective */
const char *emit_i64s_lit(const int64_t *v, int n);        /* (const int64_t[]){..} */
const char *emit_values_lit(Value *const *v, int n);       /* (const int64_t[]){a, b}: the C names of n integers */
const char *emit_names_lit(Value *const *v, int n);        /* a, b, c: the C names */
void emit_def_array(Emit *e, const Value *v, bool zero);   /* declares and allocates */
void emit_def_alias(Emit *e, const Value *v, const Value *of);   /* a view sharing of's buffer */
void emit_def_taken(Emit *e, const Value *v, const Value *x, const Inst *in);   /* x's buffer or a copy */
void emit_def_scalar(Emit *e, const Value *v);             /* declares a scalar */
bool emit_is_last_use(Emit *e, const Value *v, const Inst *in);
/* Whether in may take v's buffer when no one else refers to it
 * (shd_unique): in is v's last use, v being a value the block owns or the
 * carry of the loop whose body the block is (the loop's reference lasts
 * until the iteration ends, so taking the buffer means sharing it). */
bool emit_can_steal(Emit *e, const Value *v, const Inst *in);
/* An operand's value at element i of res's loop nest (fused producers inline). */
const char *emit_operand_at(Emit *e, const Value *op, const Type *res);
const char *emit_stored(const Type *t, const char *x);
const char *emit_scalar_double(const Value *v);
int emit_tmp(Emit *e);                                     /* a fresh number for t%d */
int emit_tmp_count(Emit *e);                               /* how many were taken */
const Mesh *emit_mesh(Emit *e);
const Module *emit_module_of(Emit *e);
/* Whether the translation unit being written holds function i of the
 * module (every function in the one-file program): a preamble declares
 * only what its unit's functions use. */
bool emit_unit_holds(Emit *e, int i);
FILE *emit_out(Emit *e);
/* Reshape, retype, pcast: the result shares operand 0's buffer. */
void emit_view(Emit *e, const Inst *in);

#endif
