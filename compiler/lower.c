/* lower.c: from the typed syntax tree to the global-view IR.
 *
 * Input: a Program the typechecker accepted. Output: a Module with one Func
 * per function, in SSA form: every `var` becomes a chain of values, a `for`
 * carries the vars its body assigns, an `if` yields the vars its branches
 * assign. Every instruction's result type is the type the checker computed,
 * annotation included, so the partitioner sees each operation's
 * out_sharding in its result type.
 *
 * Weak scalars (literals, constants and arithmetic on them) are folded here
 * and become constants of the dtype their use needs. The implicit casts of
 * the manual view (invariant->varying, reduced->varying; typing-rules 2.2,
 * 2.4) become explicit pcast instructions, so autodiff sees them.
 */
#include <math.h>

#include "shdc.h"

typedef struct {
  Module *mod;
  const Mesh *mesh;
  Program *prog;
  FuncDecl *fdecl;
  Func *func;
  IrBlock *block;        /* where instructions go */
  Value **vals;          /* by Symbol.id: the current value */
  int nvals, capvals;
  int next_sym;
  Func **funcs;          /* by index in prog->funcs */
} Lower;

static Value *lower_expr(Lower *L, Expr *e);

/* ---- symbols to values ------------------------------------------------------ */

static int sym_id(Lower *L, Symbol *s) {
  if (!s->id)
    s->id = ++L->next_sym;
  if (s->id >= L->capvals) {
    int cap = L->capvals ? L->capvals * 2 : 64;
    while (cap <= s->id)
      cap *= 2;
    Value **v = arena_alloc(sizeof(Value *) * (size_t)cap);
    if (L->vals)
      memcpy(v, L->vals, sizeof(Value *) * (size_t)L->capvals);
    L->vals = v;
    L->capvals = cap;
  }
  return s->id;
}

static void set_sym(Lower *L, Symbol *s, Value *v) {
  int id = sym_id(L, s);
  L->vals[id] = v;
  if (v && !v->name)
    v->name = s->name;
}

static Value *get_sym(Lower *L, Symbol *s) {
  int id = sym_id(L, s);
  Value *v = L->vals[id];
  if (!v)
    diag_ice("symbol %s has no value", s->name);
  return v;
}

static Func *func_of(Lower *L, FuncDecl *f) {
  for (int i = 0; i < L->prog->funcs.len; i++)
    if (L->prog->funcs.data[i] == f)
      return L->funcs[i];
  diag_ice("unknown function");
}

/* ---- emitting ------------------------------------------------------------------- */

static Value *emit(Lower *L, Opcode op, Pos pos, int nargs, Value **args, Type t) {
  return ir_emit1(L->mod, L->block, op, pos, nargs, args, t);
}

static Inst *emit_inst(Lower *L, Opcode op, Pos pos, int nargs, Value **args, Type t) {
  return ir_emit(L->mod, L->block, op, pos, nargs, args, 1, &t);
}

static Value *const_value(Lower *L, Pos pos, DType dt, double v) {
  Inst *in = emit_inst(L, IR_CONST, pos, 0, NULL, ty_scalar(dt));
  in->fval = dt == DT_I32 ? (double)(int32_t)v : dt == DT_BOOL ? (v != 0) : dt == DT_F32 ? (double)(float)v : v;
  in->ival = (int64_t)in->fval;
  return in->results[0];
}

/* A pcast (no data movement) that gives v the manual states of `to`. */
static Value *pcast_to(Lower *L, Pos pos, Value *v, int kind, AxisSet axes, Type to) {
  Inst *in = emit_inst(L, IR_PCAST, pos, 1, &v, to);
  in->fn = kind;
  for (int a = 0; a < L->mesh->naxes; a++)
    if (axes & (1u << a))
      in->axes[in->naxes++] = a;
  return in->results[0];
}

/* Converts a plain (replicated/invariant) scalar constant to a scalar type
 * with states: explicit R by reshard (free), manual R and V by pcast. */
static Value *coerce_scalar(Lower *L, Pos pos, Value *v, const Type *want) {
  Type t = v->type;
  AxisSet man = L->fdecl && L->fdecl->manual ? L->fdecl->manual_set : 0;
  if (want->R & ~man & ~t.R) {
    Type n = t;
    n.R |= want->R & ~man;
    v = emit(L, IR_RESHARD, pos, 1, &v, n);
    t = n;
  }
  if (want->R & man & ~t.R) {
    Type n = t;
    n.R |= want->R & man;
    v = pcast_to(L, pos, v, PCAST_REDUCED, want->R & man, n);
    t = n;
  }
  if (want->V & ~t.V) {
    Type n = t;
    n.V |= want->V;
    v = pcast_to(L, pos, v, PCAST_VARYING, want->V & ~t.V, n);
  }
  return v;
}

/* ---- weak scalars are compile-time constants -------------------------------------- */

static double fold(Lower *L, Expr *e);

static double fold_unary(int op, double x) {
  switch (op) {
  case UN_NEG: return -x;
  case UN_EXP: return exp(x);
  case UN_LOG: return log(x);
  case UN_SIN: return sin(x);
  case UN_COS: return cos(x);
  case UN_TANH: return tanh(x);
  case UN_SQRT: return sqrt(x);
  case UN_ABS: return fabs(x);
  case UN_RELU: return x > 0 ? x : 0;
  case UN_SIGMOID: return 1 / (1 + exp(-x));
  default: return x;
  }
}

static double fold_binary(int op, double a, double b, bool integer) {
  switch (op) {
  case BIN_ADD: return a + b;
  case BIN_SUB: return a - b;
  case BIN_MUL: return a * b;
  case BIN_DIV: return integer ? (b != 0 ? (double)((int64_t)a / (int64_t)b) : 0) : a / b;
  case BIN_MAX: return a > b ? a : b;
  case BIN_MIN: return a < b ? a : b;
  case BIN_LT: return a < b;
  case BIN_LE: return a <= b;
  case BIN_GT: return a > b;
  case BIN_GE: return a >= b;
  case BIN_EQ: return a == b;
  case BIN_NE: return a != b;
  default: return 0;
  }
}

static double fold(Lower *L, Expr *e) {
  switch (e->kind) {
  case EX_INT: return (double)e->ival;
  case EX_FLOAT: return e->fval;
  case EX_BOOL: return (double)e->ival;
  case EX_NAME:
    return e->sym->fval;   /* a const, or a let-bound weak value */
  case EX_UNARY: return fold_unary(e->op, fold(L, e->lhs));
  case EX_BINARY: {
    bool integer = e->lhs->ty->dtype == DT_I32 && e->rhs->ty->dtype == DT_I32;
    return fold_binary(e->op, fold(L, e->lhs), fold(L, e->rhs), integer);
  }
  case EX_AS: return fold(L, e->lhs);
  case EX_CALL: {
    TcInfo *info = e->tc;
    if (e->builtin == BI_UNARY)
      return fold_unary(info->un, fold(L, info->x));
    if (e->builtin == BI_MAXIMUM || e->builtin == BI_MINIMUM)
      return fold_binary(e->builtin == BI_MAXIMUM ? BIN_MAX : BIN_MIN, fold(L, info->x), fold(L, info->y), false);
    if (e->builtin == BI_WHERE)
      return fold(L, info->x) != 0 ? fold(L, info->y) : fold(L, info->z);
    if (e->builtin == BI_CAST)
      return fold(L, info->x);
    break;
  }
  default:
    break;
  }
  diag_ice("cannot fold a weak expression of kind %d", e->kind);
}

/* Lowers e as an operand whose dtype must be dt (weak values adopt it). */
static Value *lower_as(Lower *L, Expr *e, DType dt) {
  if (e->ty && e->ty->weak)
    return const_value(L, e->pos, dt, fold(L, e));
  return lower_expr(L, e);
}

/* Lowers e where a value of exactly type `want` is needed. */
static Value *lower_to(Lower *L, Expr *e, const Type *want) {
  if (e->ty && e->ty->weak)
    return coerce_scalar(L, e->pos, const_value(L, e->pos, want->dtype, fold(L, e)), want);
  return lower_expr(L, e);
}

/* ---- the VMA casts of elementwise operands (2.2) ------------------------------------ */

static Value *vma_operand(Lower *L, Pos pos, Value *v, AxisSet target) {
  if (!((target & ~v->type.V)))
    return v;
  RuleCtx rc = {L->mesh, L->fdecl->manual_set, {0}, "lower"};
  AxisSet pv, rv;
  if (!rule_vma_cast(&rc, &v->type, target, &pv, &rv))
    diag_ice("vma cast rejected after typechecking");
  Type t = v->type;
  t.V |= pv | rv;
  t.R &= ~rv;
  return pcast_to(L, pos, v, PCAST_VARYING, pv | rv, t);
}

static DType operand_dtype(Expr **ops, int n) {
  for (int i = 0; i < n; i++)
    if (ops[i] && !ops[i]->ty->weak)
      return ops[i]->ty->dtype;
  return ops[0]->ty->dtype;
}

static Value *lower_elementwise(Lower *L, Expr *e, int irop, int fn, Expr **ops, int n) {
  Value *args[3];
  Expr **cases = ops;
  int ncases = n;
  if (irop == IR_SELECT) {
    args[0] = lower_as(L, ops[0], DT_BOOL);
    cases = ops + 1;
    ncases = n - 1;
  }
  DType dt = operand_dtype(cases, ncases);
  for (int i = 0; i < ncases; i++)
    args[i + (n - ncases)] = lower_as(L, cases[i], dt);
  for (int i = 0; i < n; i++)
    args[i] = vma_operand(L, e->pos, args[i], e->ty->V);
  Inst *in = emit_inst(L, irop, e->pos, n, args, *e->ty);
  in->fn = fn;
  return in->results[0];
}

/* ---- contractions -------------------------------------------------------------------- */

static Value *emit_dot(Lower *L, Pos pos, Value *a, Value *b, const DotDims *d, Type t) {
  Value *args[2] = {vma_operand(L, pos, a, t.V), vma_operand(L, pos, b, t.V)};
  Inst *in = emit_inst(L, IR_DOT, pos, 2, args, t);
  in->dot = *d;
  return in->results[0];
}

static Value *emit_transpose(Lower *L, Pos pos, Value *x, const int *perm, Type t) {
  Inst *in = emit_inst(L, IR_TRANSPOSE, pos, 1, &x, t);
  memcpy(in->perm, perm, sizeof in->perm);
  return in->results[0];
}

static Value *emit_reduce(Lower *L, Pos pos, Value *x, int redop, unsigned mask, Type t) {
  Inst *in = emit_inst(L, IR_REDUCE, pos, 1, &x, t);
  in->fn = redop;
  in->mask = mask;
  return in->results[0];
}

static Value *lower_matmul(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *a = lower_expr(L, e->lhs), *b = lower_expr(L, e->rhs);
  Value *d = emit_dot(L, e->pos, a, b, &info->dot, info->dot_type);
  if (info->has_perm)
    d = emit_transpose(L, e->pos, d, info->perm, info->squeeze ? info->type : *e->ty);
  if (info->squeeze)
    d = emit(L, IR_RESHAPE, e->pos, 1, &d, *e->ty);
  return d;
}

static Value *presum(Lower *L, Pos pos, Value *x, unsigned mask) {
  if (!mask)
    return x;
  RuleCtx rc = {L->mesh, L->fdecl->manual ? L->fdecl->manual_set : 0, {0}, "einsum"};
  Type t;
  if (!rule_reduce(&rc, RED_SUM, &x->type, mask, NULL, &t))
    diag_ice("einsum pre-reduction rejected");
  return emit_reduce(L, pos, x, RED_SUM, mask, t);
}

static Value *lower_einsum(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Value *r;
  if (info->einsum_unary) {
    r = ty_equal(&x->type, &info->dot_type) ? x : emit_reduce(L, e->pos, x, RED_SUM, info->sum_x, info->dot_type);
  } else {
    Value *y = lower_expr(L, info->y);
    x = presum(L, e->pos, x, info->sum_x);
    y = presum(L, e->pos, y, info->sum_y);
    r = emit_dot(L, e->pos, x, y, &info->dot, info->dot_type);
  }
  if (!info->has_perm)
    return r;
  return emit_transpose(L, e->pos, r, info->perm, *e->ty);
}

/* ---- builtins ---------------------------------------------------------------------------- */

static void set_axes(Inst *in, const TcInfo *info) {
  in->naxes = info->naxes;
  memcpy(in->axes, info->axes, sizeof in->axes);
}

static AxisSet info_axes(const TcInfo *info) {
  AxisSet s = 0;
  for (int i = 0; i < info->naxes; i++)
    s |= 1u << info->axes[i];
  return s;
}

static Value *scale(Lower *L, Pos pos, Value *x, double factor, Type t) {
  Value *args[2] = {x, const_value(L, pos, t.dtype, factor)};
  Inst *in = emit_inst(L, IR_BINARY, pos, 2, args, t);
  in->fn = BIN_MUL;
  return in->results[0];
}

static Value *convert(Lower *L, Pos pos, Value *x, DType dt) {
  if (x->type.dtype == dt)
    return x;
  Type t = x->type;
  t.dtype = dt;
  return emit(L, IR_CAST, pos, 1, &x, t);
}

/* psum, pmax, pmin, pmean: the all-reduce runs in info->dtype (bools are
 * counted as i32), pmean then divides in the result's float dtype. Of an
 * invariant value psum is x * |a|, the others x itself. */
static Value *lower_reduce_collective(Lower *L, Expr *e, Value *x) {
  TcInfo *info = e->tc;
  Type t = *e->ty, r = t;
  r.dtype = info->dtype;
  x = convert(L, e->pos, x, info->dtype);
  Value *y = x;
  if (info->psum_invariant && e->builtin == BI_PSUM) {
    y = scale(L, e->pos, x, info->count, r);
  } else if (!info->psum_invariant) {
    Inst *in = emit_inst(L, IR_ALL_REDUCE, e->pos, 1, &x, r);
    in->fn = info->redop;
    set_axes(in, info);
    y = in->results[0];
  }
  y = convert(L, e->pos, y, t.dtype);
  if (e->builtin == BI_PMEAN && !info->psum_invariant)
    y = scale(L, e->pos, y, 1.0 / info->count, t);
  return y;
}

static Value *lower_collective(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = info->x ? lower_expr(L, info->x) : NULL;  /* axis_index has no operand */
  Type t = *e->ty;
  AxisSet a = info_axes(info);
  Inst *in;
  switch (e->builtin) {
  case BI_PSUM: case BI_PMAX: case BI_PMIN: case BI_PMEAN:
    return lower_reduce_collective(L, e, x);
  case BI_ALL_GATHER:
  case BI_PSUM_SCATTER:
  case BI_ALL_TO_ALL:
  case BI_PPERMUTE: {
    /* The auto-pvary of invariant axes (2.3). */
    AxisSet inv = a & ~(x->type.V | x->type.U | x->type.R);
    if (inv) {
      Type vt = x->type;
      vt.V |= inv;
      x = pcast_to(L, e->pos, x, PCAST_VARYING, inv, vt);
    }
    Opcode op = e->builtin == BI_ALL_GATHER ? IR_ALL_GATHER : e->builtin == BI_PSUM_SCATTER ? IR_REDUCE_SCATTER
                : e->builtin == BI_ALL_TO_ALL ? IR_ALL_TO_ALL : IR_PPERMUTE;
    in = emit_inst(L, op, e->pos, 1, &x, t);
    set_axes(in, info);
    in->dim = info->dim;
    in->dim2 = info->dim2;
    in->shift = info->shift;
    in->fn = RED_SUM;
    return in->results[0];
  }
  case BI_AXIS_INDEX:
    in = emit_inst(L, IR_AXIS_INDEX, e->pos, 0, NULL, t);
    set_axes(in, info);
    return in->results[0];
  case BI_PCAST:
    in = emit_inst(L, IR_PCAST, e->pos, 1, &x, t);
    in->fn = info->pcast_to;
    set_axes(in, info);
    return in->results[0];
  default:
    diag_ice("collective %d", e->builtin);
  }
}

static const char PRINT_VALUE[] = "\x1e";

static Value *lower_print(Lower *L, Expr *e) {
  Str s = {0};
  Value *args[64];
  int n = 0;
  for (int i = 0; i < e->args.len && n < 64; i++) {
    Expr *a = e->args.data[i];
    if (i)
      str_putc(&s, '\x1f');
    if (a->kind == EX_STRING) {
      str_printf(&s, "%s", a->str);
      continue;
    }
    str_printf(&s, "%s", PRINT_VALUE);
    args[n++] = lower_as(L, a, a->ty->dtype);
  }
  Inst *in = ir_emit(L->mod, L->block, IR_PRINT, e->pos, n, args, 0, NULL);
  in->str = arena_strdup(str_cstr(&s));
  free(s.buf);
  return NULL;
}

static Value *lower_creation(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Type t = *e->ty;
  switch (e->builtin) {
  case BI_ZEROS:
  case BI_ONES:
  case BI_FULL: {
    Value *v = e->builtin == BI_FULL ? lower_as(L, info->value, t.dtype)
                                     : const_value(L, e->pos, t.dtype, e->builtin == BI_ONES ? 1 : 0);
    return emit(L, IR_FILL, e->pos, 1, &v, t);
  }
  case BI_IOTA: {
    Inst *in = emit_inst(L, IR_IOTA, e->pos, 0, NULL, t);
    in->dim = info->dim;
    return in->results[0];
  }
  default: {
    Value *seed = lower_as(L, info->value, DT_I32);
    Inst *in = emit_inst(L, IR_RANDOM, e->pos, 1, &seed, t);
    in->fn = e->builtin == BI_UNIFORM;
    return in->results[0];
  }
  }
}

static Value *lower_builtin(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Expr *ops[3] = {info->x, info->y, info->z};
  switch (e->builtin) {
  case BI_UNARY: {
    Value *x = lower_as(L, info->x, e->ty->dtype);
    Inst *in = emit_inst(L, IR_UNARY, e->pos, 1, &x, *e->ty);
    in->fn = info->un;
    return in->results[0];
  }
  case BI_MAXIMUM: return lower_elementwise(L, e, IR_BINARY, BIN_MAX, ops, 2);
  case BI_MINIMUM: return lower_elementwise(L, e, IR_BINARY, BIN_MIN, ops, 2);
  case BI_WHERE: return lower_elementwise(L, e, IR_SELECT, 0, ops, 3);
  case BI_SUM: case BI_MEAN: case BI_MAX: case BI_MIN_RED: {
    Value *x = lower_expr(L, info->x);
    Value *r = emit_reduce(L, e->pos, x, info->redop, info->mask, *e->ty);
    return info->scale_by_count ? scale(L, e->pos, r, 1.0 / info->count, *e->ty) : r;
  }
  case BI_TRANSPOSE: return emit_transpose(L, e->pos, lower_expr(L, info->x), info->perm, *e->ty);
  case BI_RESHAPE: {
    Value *x = lower_expr(L, info->x);
    return emit(L, IR_RESHAPE, e->pos, 1, &x, *e->ty);
  }
  case BI_EINSUM: return lower_einsum(L, e);
  case BI_CAST: {
    Value *x = lower_as(L, info->x, info->dtype);
    if (x->type.dtype == info->dtype && ty_equal(&x->type, e->ty))
      return x;
    return emit(L, IR_CAST, e->pos, 1, &x, *e->ty);
  }
  case BI_RESHARD: {
    Value *x = lower_as(L, info->x, e->ty->dtype);
    if (ty_equal(&x->type, e->ty))
      return x;
    return emit(L, IR_RESHARD, e->pos, 1, &x, *e->ty);
  }
  case BI_ZEROS: case BI_ONES: case BI_FULL: case BI_IOTA: case BI_NORMAL: case BI_UNIFORM:
    return lower_creation(L, e);
  case BI_PRINT: return lower_print(L, e);
  case BI_SAVE: {
    Value *x = lower_as(L, info->x, info->x->ty->dtype);
    Inst *in = ir_emit(L->mod, L->block, IR_SAVE, e->pos, 1, &x, 0, NULL);
    in->str = ((Expr *)e->args.data[0])->str;
    return NULL;
  }
  case BI_LOAD: {
    Inst *in = emit_inst(L, IR_LOAD, e->pos, 0, NULL, *e->ty);
    in->str = ((Expr *)e->args.data[0])->str;
    return in->results[0];
  }
  case BI_ARG: {
    Inst *in = emit_inst(L, IR_ARG, e->pos, 0, NULL, *e->ty);
    in->str = ((Expr *)e->args.data[0])->str;
    in->fval = fold(L, info->value);
    in->ival = (int64_t)in->fval;
    return in->results[0];
  }
  case BI_CLOCK:
    return emit(L, IR_CLOCK, e->pos, 0, NULL, *e->ty);
  default:
    return lower_collective(L, e);
  }
}

/* ---- calls ------------------------------------------------------------------------------- */

static int lower_call_args(Lower *L, Expr *e, FuncDecl *f, Value **args) {
  int n = e->args.len;
  for (int i = 0; i < n; i++)
    args[i] = lower_to(L, e->args.data[i], &f->param_types[i]);
  return n;
}

static Inst *lower_call(Lower *L, Expr *e) {
  FuncDecl *f = e->fn;
  Value *args[64];
  int n = lower_call_args(L, e, f, args);
  bool grad = e->builtin == BI_GRAD || e->builtin == BI_VALUE_AND_GRAD;
  const Type *rt = e->ty->kind == TY_TUPLE ? e->ty->elems : e->ty;
  int nr = e->ty->kind == TY_TUPLE ? e->ty->nelems : e->ty->kind == TY_VOID ? 0 : 1;
  Inst *in = ir_emit(L->mod, L->block, grad ? IR_GRAD : IR_CALL, e->pos, n, args, nr, rt);
  in->callee = func_of(L, f);
  if (grad) {
    TcInfo *info = e->tc;
    in->mask = info->mask;
    in->ival = info->with_value;
    in->dim = info->dim;
    in->dim2 = info->has_perm;
    memcpy(in->perm, info->perm, sizeof in->perm);
  }
  return in;
}

/* ---- expressions ------------------------------------------------------------------------ */

static Value *lower_expr(Lower *L, Expr *e) {
  if (e->ty && e->ty->weak && e->ty->kind == TY_ARRAY)
    return const_value(L, e->pos, e->ty->dtype, fold(L, e));
  switch (e->kind) {
  case EX_INT: case EX_FLOAT: case EX_BOOL:
    /* A literal that took an annotated type (let x: f32 = 1.0, an argument
     * f(3)): the typechecker gave it that type, states included. */
    return coerce_scalar(L, e->pos, const_value(L, e->pos, e->ty->dtype, fold(L, e)), e->ty);
  case EX_NAME:
    return get_sym(L, e->sym);
  case EX_UNARY: {
    Value *x = lower_as(L, e->lhs, e->ty->dtype);
    Inst *in = emit_inst(L, IR_UNARY, e->pos, 1, &x, *e->ty);
    in->fn = UN_NEG;
    return in->results[0];
  }
  case EX_BINARY: {
    if (e->op == BIN_MATMUL)
      return lower_matmul(L, e);
    Expr *ops[2] = {e->lhs, e->rhs};
    return lower_elementwise(L, e, IR_BINARY, e->op, ops, 2);
  }
  case EX_AS:
    return lower_to(L, e->lhs, e->ty);
  case EX_CALL: {
    if (e->builtin && e->builtin != BI_GRAD && e->builtin != BI_VALUE_AND_GRAD)
      return lower_builtin(L, e);
    Inst *in = lower_call(L, e);
    return in->nresults == 1 ? in->results[0] : NULL;
  }
  default:
    diag_ice("cannot lower expression kind %d", e->kind);
  }
}

/* A tuple-valued expression (a call) as its list of values. */
static int lower_multi(Lower *L, Expr *e, Value **out) {
  if (e->kind == EX_CALL && (!e->builtin || e->builtin == BI_GRAD || e->builtin == BI_VALUE_AND_GRAD)) {
    Inst *in = lower_call(L, e);
    for (int i = 0; i < in->nresults; i++)
      out[i] = in->results[i];
    return in->nresults;
  }
  if (e->kind == EX_TUPLE) {
    for (int i = 0; i < e->args.len; i++)
      out[i] = lower_expr(L, e->args.data[i]);
    return e->args.len;
  }
  out[0] = lower_expr(L, e);
  return 1;
}

/* ---- statements ----------------------------------------------------------------------------- */

static void lower_block(Lower *L, Block *b);

/* The vars a block assigns that are declared outside it. */
static void assigned_outer(Block *b, Vec *assigned, Vec *declared) {
  for (int i = 0; i < b->stmts.len; i++) {
    Stmt *s = b->stmts.data[i];
    switch (s->kind) {
    case ST_VAR:
    case ST_LET:
      vec_push(declared, s->sym);
      break;
    case ST_LET_TUPLE:
      for (int k = 0; k < s->syms.len; k++)
        vec_push(declared, s->syms.data[k]);
      break;
    case ST_ASSIGN: {
      bool seen = false;
      for (int k = 0; k < assigned->len; k++)
        seen |= assigned->data[k] == s->sym;
      if (!seen)
        vec_push(assigned, s->sym);
      break;
    }
    case ST_FOR:
      vec_push(declared, s->sym);
      assigned_outer(s->body, assigned, declared);
      break;
    case ST_IF:
      assigned_outer(s->body, assigned, declared);
      if (s->els)
        assigned_outer(s->els, assigned, declared);
      break;
    default:
      break;
    }
  }
  /* Drop the ones declared inside. */
  int k = 0;
  for (int i = 0; i < assigned->len; i++) {
    bool inner = false;
    for (int j = 0; j < declared->len; j++)
      inner |= declared->data[j] == assigned->data[i];
    if (!inner)
      assigned->data[k++] = assigned->data[i];
  }
  assigned->len = k;
}

static void carried_of(Block *a, Block *b, Vec *out) {
  Vec declared = {0};
  assigned_outer(a, out, &declared);
  if (b) {
    Vec more = {0}, decl2 = {0};
    assigned_outer(b, &more, &decl2);
    for (int i = 0; i < more.len; i++) {
      bool seen = false;
      for (int k = 0; k < out->len; k++)
        seen |= out->data[k] == more.data[i];
      if (!seen)
        vec_push(out, more.data[i]);
    }
    free(more.data);
    free(decl2.data);
  }
  free(declared.data);
}

static void lower_for(Lower *L, Stmt *s) {
  Vec carried = {0};
  carried_of(s->body, NULL, &carried);
  int nc = carried.len;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(nc + 2));
  args[0] = lower_as(L, s->expr, DT_I32);
  args[1] = lower_as(L, s->hi, DT_I32);
  Type *rtypes = arena_alloc(sizeof(Type) * (size_t)(nc + 1));
  Type *btypes = arena_alloc(sizeof(Type) * (size_t)(nc + 1));
  btypes[0] = s->sym->type;
  for (int i = 0; i < nc; i++) {
    Symbol *sym = carried.data[i];
    args[i + 2] = get_sym(L, sym);
    rtypes[i] = btypes[i + 1] = sym->type;
  }
  Inst *in = ir_emit(L->mod, L->block, IR_FOR, s->pos, nc + 2, args, nc, rtypes);
  IrBlock *body = ir_block(nc + 1, btypes, L->mod);
  ir_add_region(in, body);
  IrBlock *saved = L->block;
  L->block = body;
  set_sym(L, s->sym, body->args[0]);
  for (int i = 0; i < nc; i++)
    set_sym(L, carried.data[i], body->args[i + 1]);
  lower_block(L, s->body);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  for (int i = 0; i < nc; i++)
    ys[i] = get_sym(L, carried.data[i]);
  ir_emit(L->mod, body, IR_YIELD, s->pos, nc, ys, 0, NULL);
  L->block = saved;
  for (int i = 0; i < nc; i++)
    set_sym(L, carried.data[i], in->results[i]);
  free(carried.data);
}

static void lower_branch(Lower *L, Inst *in, Block *b, Vec *carried, Value **before, Pos pos) {
  int nc = carried->len;
  IrBlock *blk = ir_block(0, NULL, L->mod);
  ir_add_region(in, blk);
  IrBlock *saved = L->block;
  L->block = blk;
  for (int i = 0; i < nc; i++)
    set_sym(L, carried->data[i], before[i]);
  if (b)
    lower_block(L, b);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  for (int i = 0; i < nc; i++)
    ys[i] = get_sym(L, carried->data[i]);
  ir_emit(L->mod, blk, IR_YIELD, pos, nc, ys, 0, NULL);
  L->block = saved;
}

static void lower_if(Lower *L, Stmt *s) {
  Vec carried = {0};
  carried_of(s->body, s->els, &carried);
  int nc = carried.len;
  Value *cond = lower_as(L, s->expr, DT_BOOL);
  Type *rtypes = arena_alloc(sizeof(Type) * (size_t)(nc + 1));
  Value **before = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  for (int i = 0; i < nc; i++) {
    Symbol *sym = carried.data[i];
    rtypes[i] = sym->type;
    before[i] = get_sym(L, sym);
  }
  Inst *in = ir_emit(L->mod, L->block, IR_IF, s->pos, 1, &cond, nc, rtypes);
  lower_branch(L, in, s->body, &carried, before, s->pos);
  lower_branch(L, in, s->els, &carried, before, s->pos);
  for (int i = 0; i < nc; i++)
    set_sym(L, carried.data[i], in->results[i]);
  free(carried.data);
}

static void lower_return(Lower *L, Stmt *s) {
  FuncDecl *f = L->fdecl;
  Value *vals[16];
  int n = 0;
  if (s->expr)
    n = f->nresults > 1 ? lower_multi(L, s->expr, vals) : 1;
  if (s->expr && f->nresults == 1)
    vals[0] = lower_to(L, s->expr, &L->func->results[0]);
  for (int i = 0; i < n; i++) {
    const Type *want = &L->func->results[i];
    if (vals[i]->type.V != want->V && f->manual) {
      /* An invariant value leaving through a sharded result type: the
       * implicit pvary of 2.4 (a psum in the backward pass). */
      Type t = vals[i]->type;
      AxisSet missing = want->V & ~t.V;
      t.V |= missing;
      vals[i] = pcast_to(L, s->pos, vals[i], PCAST_VARYING, missing, t);
    }
  }
  ir_emit(L->mod, L->block, IR_RETURN, s->pos, n, vals, 0, NULL);
}

static void lower_stmt(Lower *L, Stmt *s) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR:
    if (s->sym->type.weak) {
      s->sym->fval = fold(L, s->expr);
      return;
    }
    set_sym(L, s->sym, lower_to(L, s->expr, &s->sym->type));
    return;
  case ST_LET_TUPLE: {
    Value *vals[64];
    int n = lower_multi(L, s->expr, vals);
    for (int i = 0; i < n && i < s->syms.len; i++)
      set_sym(L, s->syms.data[i], vals[i]);
    return;
  }
  case ST_ASSIGN:
    set_sym(L, s->sym, lower_to(L, s->expr, &s->sym->type));
    return;
  case ST_FOR:
    lower_for(L, s);
    return;
  case ST_IF:
    lower_if(L, s);
    return;
  case ST_RETURN:
    lower_return(L, s);
    return;
  case ST_EXPR:
    if (s->expr->kind == EX_CALL && (!s->expr->builtin || s->expr->builtin == BI_GRAD ||
                                     s->expr->builtin == BI_VALUE_AND_GRAD))
      lower_call(L, s->expr);
    else
      lower_expr(L, s->expr);
    return;
  }
}

static void lower_block(Lower *L, Block *b) {
  for (int i = 0; i < b->stmts.len; i++)
    lower_stmt(L, b->stmts.data[i]);
}

static Func *declare(Lower *L, FuncDecl *f) {
  int np = f->params.len;
  Type *results = arena_alloc(sizeof(Type) * (size_t)(f->nresults + 1));
  for (int i = 0; i < f->nresults; i++) {
    results[i] = f->result_types[i];
    if (f->manual) {
      TcCtx c;
      memset(&c, 0, sizeof c);
      c.mesh = (Mesh *)L->mesh;
      bool ok = true;
      results[i] = tc_manual_local(&c, &f->result_types[i], f->manual_set, f->pos, "result", &ok);
    }
  }
  Func *fn = ir_func(L->mod, tok_str(f->name), np, f->local_param_types, f->nresults, results);
  fn->pos = f->pos;
  fn->decl = f;
  fn->manual = f->manual;
  fn->manual_axes = f->manual_set;
  fn->is_main = tok_eq(f->name, "main");
  fn->sig_params = f->param_types;
  fn->sig_results = f->result_types;
  for (int i = 0; i < np; i++)
    fn->body->args[i]->name = tok_str(((Param *)f->params.data[i])->name);
  return fn;
}

Module *lower_program(Program *p, const Mesh *m) {
  Lower L;
  memset(&L, 0, sizeof L);
  L.mod = ir_module(m);
  L.mesh = &L.mod->mesh;
  L.prog = p;
  L.funcs = arena_alloc(sizeof(Func *) * (size_t)(p->funcs.len + 1));
  for (int i = 0; i < p->funcs.len; i++)
    L.funcs[i] = declare(&L, p->funcs.data[i]);
  for (int i = 0; i < p->funcs.len; i++) {
    FuncDecl *f = p->funcs.data[i];
    L.fdecl = f;
    L.func = L.funcs[i];
    L.block = L.func->body;
    for (int k = 0; k < f->params.len; k++)
      set_sym(&L, ((Param *)f->params.data[k])->sym, L.func->body->args[k]);
    lower_block(&L, f->body);
    IrBlock *b = L.func->body;
    Inst *last = b->insts.len ? b->insts.data[b->insts.len - 1] : NULL;
    if (!last || last->op != IR_RETURN)
      ir_emit(L.mod, b, IR_RETURN, f->pos, 0, NULL, 0, NULL);
  }
  return L.mod;
}
