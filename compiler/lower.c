/* lower.c: from the typed syntax tree to the global-view IR.
 *
 * Input: a Program the typechecker accepted. Output: a Module with one Func
 * per function, in SSA form: every `var` becomes a chain of values, a `for`
 * carries the vars its body assigns, an `if` yields the vars its branches
 * assign. Every instruction's result type is the type the checker computed,
 * annotation included, so the partitioner sees each operation's
 * out_sharding in its result type.
 *
 * This file lowers statements, control flow, calls and names; each builtin
 * and each operator is lowered by its row of the builtin table
 * (BuiltinDef.lower and .fold, Expr.bi), through the builders below.
 *
 * A struct value is its leaves (language.md §9): a struct symbol holds one
 * value per leaf, a function taking a struct takes one IR parameter per
 * leaf, a call returning one gives one result per leaf, and a struct
 * operation lowers the array expression of each leaf (Expr.leaves), whose
 * EX_LEAF operands are lowered once and shared. So the IR, and every stage
 * after this one, sees arrays only.
 *
 * Weak scalars (literals, constants and arithmetic on them) are folded here
 * and become constants of the dtype their use needs. The implicit casts of
 * the manual view (invariant->varying, reduced->varying; typing-rules 2.2,
 * 2.4) become explicit pcast instructions, so autodiff sees them.
 */
#include <float.h>
#include <math.h>

#include "ops.h"

struct Lower {
  Module *mod;
  const Mesh *mesh;
  Program *prog;
  FuncDecl *fdecl;
  Func *func;
  IrBlock *block;        /* where instructions go */
  Value **vals;          /* by Symbol.id: the current value */
  Value ***svals;        /* by Symbol.id: the current leaves of a struct */
  int nvals, capvals;
  PtrMap leaf_index;     /* Expr * whose leaves EX_LEAF nodes read -> index in leaf_cache */
  Vec leaf_cache;        /* Value **: its leaves, lowered once */
  int next_sym;
  Func **funcs;          /* by index in prog->funcs */
  PtrMap func_index;     /* FuncDecl * -> that index */
};

const Mesh *lower_mesh(Lower *L) { return L->mesh; }
/* The manual axes of the code being lowered: a manual function's, or those
 * of the manual body a function called from it is lowered in (§9.7). */
static AxisSet manual_of(const FuncDecl *f) { return f && (f->manual || f->view_manual) ? f->manual_set : 0; }
AxisSet lower_manual(Lower *L) { return manual_of(L->fdecl); }

/* ---- symbols to values ------------------------------------------------------ */

static int sym_id(Lower *L, Symbol *s) {
  if (!s->id)
    s->id = ++L->next_sym;
  if (s->id >= L->capvals) {
    int old = L->capvals;
    L->vals = mem_grow(L->vals, &L->capvals, s->id + 1, sizeof *L->vals);
    L->svals = mem_resize(L->svals, old, L->capvals, sizeof *L->svals);
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

/* A leaf's names: in the IR and the C, the symbol's, then its path, with
 * '_' for '.' (p_w_layers_w1); in what users read, the source's own path
 * (p.w.layers.w1). */
static void name_leaf(Value *v, const char *base, const char *path) {
  char *n = arena_printf("%s_%s", base, path);
  for (char *p = n; *p; p++)
    if (*p == '.')
      *p = '_';
  v->name = n;
  v->display = arena_printf("%s.%s", base, path);
}

/* The leaves of symbol s's value (one for an array or str). */
static int get_leaves(Lower *L, Symbol *s, Value **out) {
  if (s->type.kind != TY_STRUCT) {
    out[0] = get_sym(L, s);
    return 1;
  }
  int id = sym_id(L, s);
  Value **v = L->svals[id];
  if (!v)
    diag_ice("struct %s has no value", s->name);
  memcpy(out, v, sizeof(Value *) * (size_t)s->type.nelems);
  return s->type.nelems;
}

static void set_leaves(Lower *L, Symbol *s, Value **in) {
  if (s->type.kind != TY_STRUCT) {
    set_sym(L, s, in[0]);
    return;
  }
  int n = s->type.nelems;
  Value **v = arena_alloc(sizeof(Value *) * (size_t)(n + 1));
  memcpy(v, in, sizeof(Value *) * (size_t)n);
  for (int k = 0; k < n; k++)
    if (!v[k]->name)
      name_leaf(v[k], s->name, ty_leaf_names(s->type.sdef)[k]);
  int id = sym_id(L, s);   /* first: it may move svals */
  L->svals[id] = v;
}

static Value **leaves_buf(const Type *t) {
  return arena_alloc(sizeof(Value *) * (size_t)(ty_nleaves(t) + 1));
}

static Func *func_of(Lower *L, FuncDecl *f) {
  int i = ptrmap_get(&L->func_index, f);
  if (i < 0)
    diag_ice("unknown function");
  return L->funcs[i];
}

/* ---- emitting ------------------------------------------------------------------- */

Value *lower_emit1(Lower *L, int op, Pos pos, int nargs, Value **args, Type t) {
  return ir_emit1(L->mod, L->block, op, pos, nargs, args, t);
}

Inst *lower_emit(Lower *L, int op, Pos pos, int nargs, Value **args, Type t) {
  return ir_emit(L->mod, L->block, op, pos, nargs, args, 1, &t);
}

Inst *lower_emit_n(Lower *L, int op, Pos pos, int nargs, Value **args, int nresults, const Type *types) {
  return ir_emit(L->mod, L->block, op, pos, nargs, args, nresults, types);
}

Inst *lower_emit0(Lower *L, int op, Pos pos, int nargs, Value **args) {
  return ir_emit(L->mod, L->block, op, pos, nargs, args, 0, NULL);
}

/* A constant becomes a value of dtype dt: an i32 must hold it exactly
 * ([E_CONST] otherwise, as NumPy refuses int32(2**31)); a float beyond f32
 * becomes infinite, as the same arithmetic at run time would. */
static double const_in(Pos pos, DType dt, double v) {
  if (dt == DT_I32 && !(v >= INT32_MIN && v <= INT32_MAX)) {
    diag_error(pos, "E_CONST", "the constant %.17g does not fit in i32 (-2147483648 to 2147483647)", v);
    return 0;
  }
  if (dt == DT_F32 && isfinite(v) && fabs(v) > FLT_MAX)
    return v > 0 ? INFINITY : -INFINITY;
  if (dt == DT_BF16)
    return ty_bf16_round(v);
  return dt == DT_I32 ? (double)(int32_t)v : dt == DT_BOOL ? (v != 0) : dt == DT_F32 ? (double)(float)v : v;
}

Value *lower_const(Lower *L, Pos pos, DType dt, double v) {
  Inst *in = lower_emit(L, IR_CONST, pos, 0, NULL, ty_scalar(dt));
  in->fval = const_in(pos, dt, v);
  in->ival = (int64_t)in->fval;
  return in->results[0];
}

/* A pcast (no data movement) that gives v the manual states of `to`. */
Value *lower_pcast(Lower *L, Pos pos, Value *v, int kind, AxisSet axes, Type to) {
  Inst *in = lower_emit(L, IR_PCAST, pos, 1, &v, to);
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
  AxisSet man = manual_of(L->fdecl);
  if (want->R & ~man & ~t.R) {
    Type n = t;
    n.R |= want->R & ~man;
    v = lower_emit1(L, IR_RESHARD, pos, 1, &v, n);
    t = n;
  }
  if (want->R & man & ~t.R) {
    Type n = t;
    n.R |= want->R & man;
    v = lower_pcast(L, pos, v, PCAST_REDUCED, want->R & man, n);
    t = n;
  }
  if (want->V & ~t.V) {
    Type n = t;
    n.V |= want->V;
    v = lower_pcast(L, pos, v, PCAST_VARYING, want->V & ~t.V, n);
  }
  return v;
}

/* ---- weak scalars are compile-time constants -------------------------------------- */

double lower_fold(Lower *L, Expr *e) {
  switch (e->kind) {
  case EX_INT: return (double)e->ival;
  case EX_FLOAT: return e->fval;
  case EX_BOOL: return (double)e->ival;
  case EX_NAME:
    return e->sym->fval;   /* a const, or a let-bound weak value */
  case EX_AS: return lower_fold(L, e->lhs);
  case EX_LEAF: return lower_fold(L, e->lhs);
  case EX_UNARY:
  case EX_BINARY:
  case EX_CALL:            /* an operator's or a builtin's row folds it */
    if (e->bi && e->bi->fold)
      return e->bi->fold(L, e);
    break;
  default:
    break;
  }
  diag_ice("cannot fold a weak expression of kind %d", e->kind);
}

/* Lowers e as an operand whose dtype must be dt (weak values adopt it). */
Value *lower_as(Lower *L, Expr *e, DType dt) {
  if (e->ty && e->ty->weak)
    return lower_const(L, e->pos, dt, lower_fold(L, e));
  return lower_expr(L, e);
}

Value *lower_convert(Lower *L, Pos pos, Value *x, DType dt) {
  if (x->type.dtype == dt)
    return x;
  Type t = x->type;
  t.dtype = dt;
  return lower_emit1(L, IR_CAST, pos, 1, &x, t);
}

/* Lowers e where a value of exactly type `want` is needed. */
Value *lower_to(Lower *L, Expr *e, const Type *want) {
  if (e->ty && e->ty->weak)
    return coerce_scalar(L, e->pos, lower_const(L, e->pos, want->dtype, lower_fold(L, e)), want);
  return lower_expr(L, e);
}

/* ---- the VMA casts of elementwise operands (2.2) ------------------------------------ */

Value *lower_vma(Lower *L, Pos pos, Value *v, AxisSet target) {
  if (!((target & ~v->type.V)))
    return v;
  RuleCtx rc = {L->mesh, L->fdecl->manual_set, {0}, "lower"};
  AxisSet pv, rv;
  if (!rule_vma_cast(&rc, &v->type, target, &pv, &rv))
    diag_ice("vma cast rejected after typechecking");
  Type t = v->type;
  t.V |= pv | rv;
  t.R &= ~rv;
  return lower_pcast(L, pos, v, PCAST_VARYING, pv | rv, t);
}

/* ---- calls ------------------------------------------------------------------------------- */

static int lower_leaves(Lower *L, Expr *e, Value **out);
static int lower_multi(Lower *L, Expr *e, Value **out);
static void lower_stmt(Lower *L, Stmt *s);
static int lower_call_values(Lower *L, Expr *e, Value **out);

/* x where a value of type want is needed, as its leaves. */
static int lower_value_to(Lower *L, Expr *x, const Type *want, Value **out) {
  if (want->kind == TY_STRUCT)
    return lower_leaves(L, x, out);
  out[0] = lower_to(L, x, want);
  return 1;
}

static int lower_call_args(Lower *L, Expr *e, FuncDecl *f, Value **args) {
  int n = 0;
  for (int i = 0; i < e->args.len; i++)
    n += lower_value_to(L, e->args.data[i], &f->param_types[i], args + n);
  return n;
}

/* grad's wrt positions, in the IR: a struct parameter is its leaves. */
static void grad_wrt_leaves(FuncDecl *f, const TcInfo *info, Inst *in) {
  int np = f->params.len;
  int *first = arena_alloc(sizeof(int) * (size_t)(np + 1));
  for (int i = 0, at = 0; i < np; i++) {
    first[i] = at;
    at += ty_nleaves(&f->param_types[i]);
  }
  int n = 0;
  for (int i = 0; i < info->nwrt; i++)
    n += ty_nleaves(&f->param_types[info->wrt[i]]);
  in->iv = arena_alloc(sizeof(int64_t) * (size_t)(n + 1));
  in->niv = 0;
  for (int i = 0; i < info->nwrt; i++) {
    int p = (int)info->wrt[i];
    for (int k = 0; k < ty_nleaves(&f->param_types[p]); k++)
      in->iv[in->niv++] = first[p] + k;
  }
}

static Inst *lower_call(Lower *L, Expr *e) {
  FuncDecl *f = e->fn;
  int nargs = 0;
  for (int i = 0; i < f->params.len; i++)
    nargs += ty_nleaves(&f->param_types[i]);
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(nargs + 1));
  int n = e->vjp == FORM_VJP_LOAD ? 0 : lower_call_args(L, e, f, args);
  bool grad = e->grad != 0;
  int nr = ty_nleaves(e->ty);
  Type *rt = arena_alloc(sizeof(Type) * (size_t)(nr + 1));
  ty_flatten(e->ty, rt);
  if (e->vjp) {   /* the cotangents (a load's), then the entry */
    TcInfo *info = e->tc;
    if (e->vjp == FORM_VJP_LOAD) {
      int nl = 0;
      for (int i = 0; i < f->nresults; i++)
        nl += ty_nleaves(&f->result_types[i]);
      args = arena_alloc(sizeof(Value *) * (size_t)(nl + 2));
      n = 0;
      for (int i = 0; i < e->args.len; i++) {
        Type want = ty_ct(&f->result_types[i]);
        n += lower_value_to(L, e->args.data[i], &want, args + n);
      }
    }
    args[n++] = lower_to(L, info->slot, info->slot->ty);
  }
  Inst *in = ir_emit(L->mod, L->block, grad ? IR_GRAD : IR_CALL, e->pos, n, args, nr, rt);
  in->callee = func_of(L, f);
  if (e->remat)
    in->fn = CALL_REMAT;
  if (e->vjp) {
    in->fn = e->vjp == FORM_VJP_SAVE ? CALL_VJP_SAVE : CALL_VJP_LOAD;
    in->ival = e->vjp == FORM_VJP_SAVE ? ((TcInfo *)e->tc)->slots : 0;
  }
  if (grad) {
    TcInfo *info = e->tc;
    in->ival = info->with_value;
    in->dim2 = info->has_perm;
    grad_wrt_leaves(f, info, in);
  }
  return in;
}

static void lower_block(Lower *L, Block *b);

/* A call of a generic function's instance (a library function: an
 * optimizer, a layer) is lowered in place, its body's statements into the
 * caller's block: the caller then owns every value, and an argument that
 * dies in the call is freed as the callee's code consumes it (an AdamW
 * step over a struct holds one leaf's temporaries at a time, not the whole
 * struct's), and the callee's elementwise code fuses with the caller's. A
 * grad of an instance still calls its (generated) gradient function. */
static int lower_inline(Lower *L, Expr *e, Value **out) {
  FuncDecl *f = e->fn;
  int nargs = 0;
  for (int i = 0; i < f->params.len; i++)
    nargs += ty_nleaves(&f->param_types[i]);
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(nargs + 1));
  lower_call_args(L, e, f, args);
  /* The callee's EX_LEAF operands are its own: a fresh cache (the same
   * body is lowered again at each call). */
  PtrMap saved_index = L->leaf_index;
  Vec saved_cache = L->leaf_cache;
  FuncDecl *saved_fdecl = L->fdecl;
  L->leaf_index = (PtrMap){0};
  L->leaf_cache = (Vec){0};
  L->fdecl = f;
  for (int k = 0, at = 0; k < f->params.len; k++) {
    Symbol *ps = ((Param *)f->params.data[k])->sym;
    set_leaves(L, ps, args + at);
    at += ty_nleaves(&ps->type);
  }
  Block *b = f->body;
  Stmt *ret = b->stmts.len ? b->stmts.data[b->stmts.len - 1] : NULL;
  if (ret && ret->kind != ST_RETURN)
    ret = NULL;
  for (int i = 0; i < b->stmts.len - (ret ? 1 : 0); i++)
    lower_stmt(L, b->stmts.data[i]);
  int n = 0;
  if (ret && ret->expr && f->nresults > 1)
    n = lower_multi(L, ret->expr, out);
  else if (ret && ret->expr)
    n = lower_value_to(L, ret->expr, &f->result_types[0], out);
  ptrmap_free(&L->leaf_index);
  free(L->leaf_cache.data);
  L->leaf_index = saved_index;
  L->leaf_cache = saved_cache;
  L->fdecl = saved_fdecl;
  return n;
}

/* The results of a call of a user function (or of grad), as leaves. */
static int lower_call_values(Lower *L, Expr *e, Value **out) {
  if (!e->grad && !e->remat && !e->vjp && e->fn->generic && !e->fn->manual)   /* generic or called from a manual body */
    return lower_inline(L, e, out);
  Inst *in = lower_call(L, e);
  memcpy(out, in->results, sizeof(Value *) * (size_t)in->nresults);
  return in->nresults;
}

/* Whether x is an operation on structs given leaf by leaf (arithmetic,
 * creation, indexing, load): its leaves can be lowered one at a time. */
static bool leafwise(const Expr *x) {
  return x->ty->kind == TY_STRUCT && x->leaves.len == x->ty->nelems && x->kind != EX_NAME && x->kind != EX_FIELD;
}

/* Leaf k (k < 0: the whole value) of an operand that EX_LEAF nodes read.
 * Each is lowered once, when first needed; an operand given leaf by leaf
 * lowers only that leaf, so a struct expression such as
 * normal(S, seed=1) * 0.02 or 0.9 * m + 0.1 * g runs leaf after leaf, each
 * leaf's chain fused as the same code written with separate arrays, and
 * never holds a whole struct of temporaries. */
static Value *leaf_value(Lower *L, Expr *x, int k) {
  int i = ptrmap_get(&L->leaf_index, x);
  Value **v;
  if (i >= 0) {
    v = L->leaf_cache.data[i];
  } else {
    v = leaves_buf(x->ty);
    ptrmap_put(&L->leaf_index, x, L->leaf_cache.len);
    vec_push(&L->leaf_cache, v);
    if (!leafwise(x))
      lower_leaves(L, x, v);
  }
  int at = k < 0 ? 0 : k;
  if (!v[at])
    v[at] = lower_to(L, x->leaves.data[at], &x->ty->elems[at]);
  return v[at];
}

/* The leaves of the struct-valued e, read in place where e names a value
 * (a variable, or a field of one: p.h.w), so that a field access costs its
 * own leaves, not a copy of the whole struct's (n accesses to a struct of n
 * fields were n^2); lowered into a new buffer otherwise. Not written. */
static Value **struct_leaves(Lower *L, Expr *e) {
  if (e->kind == EX_NAME && e->sym && e->sym->type.kind == TY_STRUCT) {
    Value **v = L->svals[sym_id(L, e->sym)];
    if (!v)
      diag_ice("struct %s has no value", e->sym->name);
    return v;
  }
  if (e->kind == EX_FIELD && e->lhs->ty->kind == TY_STRUCT)
    return struct_leaves(L, e->lhs) + e->lhs->ty->sdef->field_leaf[ty_find_field(e->lhs->ty->sdef, e->str)];
  Value **v = leaves_buf(e->ty);
  lower_leaves(L, e, v);
  return v;
}

/* The leaves of a struct-valued (or array-valued) expression. */
static int lower_leaves(Lower *L, Expr *e, Value **out) {
  const Type *t = e->ty;
  if (t->kind != TY_STRUCT) {
    out[0] = lower_expr(L, e);
    return 1;
  }
  int n = t->nelems;
  switch (e->kind) {
  case EX_NAME:
    return get_leaves(L, e->sym, out);
  case EX_AS:
    return lower_leaves(L, e->lhs, out);
  case EX_LEAF:
    for (int k = 0; k < n; k++)
      out[k] = leaf_value(L, e->lhs, k);
    return n;
  case EX_FIELD: {
    Value **all = struct_leaves(L, e->lhs);
    int f = ty_find_field(e->lhs->ty->sdef, e->str);
    memcpy(out, all + e->lhs->ty->sdef->field_leaf[f], sizeof(Value *) * (size_t)n);
    return n;
  }
  case EX_CALL:
    if (e->sym && e->sym->kind == SYM_STRUCT) {   /* a construction */
      Expr **vals = e->tc;
      const StructDef *d = t->sdef;
      for (int f = 0; f < d->nfields; f++) {
        Type ft = ty_field(t, f);
        lower_value_to(L, vals[f], &ft, out + d->field_leaf[f]);
      }
      return n;
    }
    if (!e->bi && !e->leaves.len)
      return lower_call_values(L, e, out);
    break;
  default:
    break;
  }
  if (e->leaves.len != n)
    diag_ice("a struct expression (kind %d) without its leaves", e->kind);
  for (int k = 0; k < n; k++)
    out[k] = lower_to(L, e->leaves.data[k], &t->elems[k]);
  return n;
}

/* ---- expressions ------------------------------------------------------------------------ */

Value *lower_expr(Lower *L, Expr *e) {
  if (e->ty && e->ty->weak && e->ty->kind == TY_ARRAY)
    return lower_const(L, e->pos, e->ty->dtype, lower_fold(L, e));
  switch (e->kind) {
  case EX_INT: case EX_FLOAT: case EX_BOOL:
    /* A literal that took an annotated type (let x: f32 = 1.0, an argument
     * f(3)): the typechecker gave it that type, states included. */
    return coerce_scalar(L, e->pos, lower_const(L, e->pos, e->ty->dtype, lower_fold(L, e)), e->ty);
  case EX_NAME:
    /* A const that took a strong type (an argument f(N), like a literal's). */
    if (e->sym->kind == SYM_CONST)
      return coerce_scalar(L, e->pos, lower_const(L, e->pos, e->ty->dtype, e->sym->fval), e->ty);
    return get_sym(L, e->sym);
  case EX_STRING:
  case EX_UNARY:
  case EX_BINARY:
  case EX_INDEX:           /* operators: their rows lower them */
    return e->bi->lower(L, e);
  case EX_AS:
    return lower_to(L, e->lhs, e->ty);
  case EX_LEAF:
    return leaf_value(L, e->lhs, e->ival);
  case EX_FIELD:
    return struct_leaves(L, e->lhs)[e->lhs->ty->sdef->field_leaf[ty_find_field(e->lhs->ty->sdef, e->str)]];
  case EX_CALL: {
    if (e->leaves.len == 1 && e->ty->kind == TY_ARRAY)   /* sum of a struct (tc_struct.c) */
      return lower_expr(L, e->leaves.data[0]);
    if (e->leaves.len && e->ty->kind == TY_VOID) {   /* save of a struct: its leaves, then the swap */
      for (int k = 0; k < e->leaves.len; k++)
        lower_expr(L, e->leaves.data[k]);
      return NULL;
    }
    if (e->bi)
      return e->bi->lower ? e->bi->lower(L, e) : NULL;
    Value **r = leaves_buf(e->ty);
    return lower_call_values(L, e, r) == 1 ? r[0] : NULL;
  }
  default:
    diag_ice("cannot lower expression kind %d", e->kind);
  }
}

/* A tuple-valued expression (a call) as its list of values, a struct
 * among them as its leaves. */
static int lower_multi(Lower *L, Expr *e, Value **out) {
  if (e->kind == EX_CALL && !e->bi && !(e->sym && e->sym->kind == SYM_STRUCT))
    return lower_call_values(L, e, out);
  if (e->kind == EX_CALL && e->bi && e->ty->kind == TY_TUPLE) {
    /* A builtin with a tuple of results (split) lowers to one instruction
     * with a result per element and returns the first. */
    Inst *in = e->bi->lower(L, e)->def;
    for (int i = 0; i < in->nresults; i++)
      out[i] = in->results[i];
    return in->nresults;
  }
  if (e->kind == EX_TUPLE) {
    int n = 0;
    for (int i = 0; i < e->args.len; i++)
      n += lower_leaves(L, e->args.data[i], out + n);
    return n;
  }
  return lower_leaves(L, e, out);
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

/* The current values of the carried vars, a struct var as its leaves. */
static int carried_count(Vec *carried) {
  int n = 0;
  for (int i = 0; i < carried->len; i++)
    n += ty_nleaves(&((Symbol *)carried->data[i])->type);
  return n;
}

static void get_carried(Lower *L, Vec *carried, Value **vals, Type *types) {
  int n = 0;
  for (int i = 0; i < carried->len; i++) {
    Symbol *sym = carried->data[i];
    if (types)
      ty_flatten(&sym->type, types + n);
    n += get_leaves(L, sym, vals + n);
  }
}

static void set_carried(Lower *L, Vec *carried, Value **vals) {
  for (int i = 0, n = 0; i < carried->len; i++) {
    Symbol *sym = carried->data[i];
    set_leaves(L, sym, vals + n);
    n += ty_nleaves(&sym->type);
  }
}

static void lower_for(Lower *L, Stmt *s) {
  Vec carried = {0};
  carried_of(s->body, NULL, &carried);
  int nc = carried_count(&carried);
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(nc + 2));
  args[0] = lower_as(L, s->expr, DT_I32);
  args[1] = lower_as(L, s->hi, DT_I32);
  Type *btypes = arena_alloc(sizeof(Type) * (size_t)(nc + 1));
  btypes[0] = s->sym->type;
  get_carried(L, &carried, args + 2, btypes + 1);
  Inst *in = ir_emit(L->mod, L->block, IR_FOR, s->pos, nc + 2, args, nc, btypes + 1);
  IrBlock *body = ir_block(nc + 1, btypes, L->mod);
  ir_add_region(in, body);
  IrBlock *saved = L->block;
  L->block = body;
  set_sym(L, s->sym, body->args[0]);
  set_carried(L, &carried, body->args + 1);
  lower_block(L, s->body);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  get_carried(L, &carried, ys, NULL);
  ir_emit(L->mod, body, IR_YIELD, s->pos, nc, ys, 0, NULL);
  L->block = saved;
  set_carried(L, &carried, in->results);
  free(carried.data);
}

static void lower_branch(Lower *L, Inst *in, Block *b, Vec *carried, Value **before, Pos pos) {
  int nc = carried_count(carried);
  IrBlock *blk = ir_block(0, NULL, L->mod);
  ir_add_region(in, blk);
  IrBlock *saved = L->block;
  L->block = blk;
  set_carried(L, carried, before);
  if (b)
    lower_block(L, b);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  get_carried(L, carried, ys, NULL);
  ir_emit(L->mod, blk, IR_YIELD, pos, nc, ys, 0, NULL);
  L->block = saved;
}

static void lower_if(Lower *L, Stmt *s) {
  Vec carried = {0};
  carried_of(s->body, s->els, &carried);
  int nc = carried_count(&carried);
  Value *cond = lower_as(L, s->expr, DT_BOOL);
  Type *rtypes = arena_alloc(sizeof(Type) * (size_t)(nc + 1));
  Value **before = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  get_carried(L, &carried, before, rtypes);
  Inst *in = ir_emit(L->mod, L->block, IR_IF, s->pos, 1, &cond, nc, rtypes);
  lower_branch(L, in, s->body, &carried, before, s->pos);
  lower_branch(L, in, s->els, &carried, before, s->pos);
  set_carried(L, &carried, in->results);
  free(carried.data);
}

static void lower_return(Lower *L, Stmt *s) {
  FuncDecl *f = L->fdecl;
  Value **vals = arena_alloc(sizeof(Value *) * (size_t)(L->func->nresults + 1));
  int n = 0;
  if (s->expr && f->nresults > 1)
    n = lower_multi(L, s->expr, vals);
  else if (s->expr && f->result_types[0].kind == TY_STRUCT)
    n = lower_leaves(L, s->expr, vals);
  else if (s->expr) {
    vals[0] = lower_to(L, s->expr, &L->func->results[0]);
    n = 1;
  }
  for (int i = 0; i < n; i++) {
    const Type *want = &L->func->results[i];
    if (vals[i]->type.V != want->V && f->manual) {
      /* An invariant value leaving through a sharded result type: the
       * implicit pvary of 2.4 (a psum in the backward pass). */
      Type t = vals[i]->type;
      AxisSet missing = want->V & ~t.V;
      t.V |= missing;
      vals[i] = lower_pcast(L, s->pos, vals[i], PCAST_VARYING, missing, t);
    }
  }
  ir_emit(L->mod, L->block, IR_RETURN, s->pos, n, vals, 0, NULL);
}

/* x = e, or p.h.w = e: the field's leaves of the var are replaced. */
static void lower_assign(Lower *L, Stmt *s) {
  Symbol *sym = s->sym;
  Value **v = leaves_buf(&sym->type);
  get_leaves(L, sym, v);
  Type t = sym->type;
  int at = 0;
  for (int i = 0; i < s->path.len; i++) {
    int f = ty_find_field(t.sdef, tok_str(*(Token *)s->path.data[i]));
    at += t.sdef->field_leaf[f];
    t = ty_field(&t, f);
  }
  lower_value_to(L, s->expr, &t, v + at);
  set_leaves(L, sym, v);
}

static void lower_stmt(Lower *L, Stmt *s) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR: {
    if (s->sym->type.weak) {
      s->sym->fval = lower_fold(L, s->expr);
      return;
    }
    Value **v = leaves_buf(&s->sym->type);
    lower_value_to(L, s->expr, &s->sym->type, v);
    set_leaves(L, s->sym, v);
    return;
  }
  case ST_LET_TUPLE: {
    Value **vals = leaves_buf(s->expr->ty);
    int n = lower_multi(L, s->expr, vals);
    for (int i = 0, at = 0; i < s->syms.len && at < n; i++) {
      Symbol *sym = s->syms.data[i];
      set_leaves(L, sym, vals + at);
      at += ty_nleaves(&sym->type);
    }
    return;
  }
  case ST_ASSIGN:
    lower_assign(L, s);
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
    if (s->expr->kind == EX_CALL && !s->expr->bi && !(s->expr->sym && s->expr->sym->kind == SYM_STRUCT))
      lower_call_values(L, s->expr, leaves_buf(s->expr->ty));
    else if (s->expr->ty->kind == TY_STRUCT)
      lower_leaves(L, s->expr, leaves_buf(s->expr->ty));
    else
      lower_expr(L, s->expr);
    return;
  }
}

static void lower_block(Lower *L, Block *b) {
  for (int i = 0; i < b->stmts.len; i++)
    lower_stmt(L, b->stmts.data[i]);
}

/* The types a list of n language-level types flattens to (a struct is its
 * leaves); the count in *nout. */
static Type *flatten_all(const Type *ts, int n, int *nout) {
  int total = 0;
  for (int i = 0; i < n; i++)
    total += ty_nleaves(&ts[i]);
  Type *out = arena_alloc(sizeof(Type) * (size_t)(total + 1));
  for (int i = 0, at = 0; i < n; i++)
    at += ty_flatten(&ts[i], out + at);
  *nout = total;
  return out;
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
  int nparams, nres, nsig;
  Type *params = flatten_all(f->local_param_types, np, &nparams);
  Type *flat_res = flatten_all(results, f->nresults, &nres);
  Func *fn = ir_func(L->mod, f->cname ? f->cname : tok_str(f->name), nparams, params, nres, flat_res);
  fn->pos = f->pos;
  fn->decl = f;
  fn->manual = f->manual || f->view_manual;
  fn->manual_axes = f->manual_set;
  fn->is_main = tok_eq(f->name, "main");
  fn->sig_params = flatten_all(f->param_types, np, &nsig);
  fn->sig_results = flatten_all(f->result_types, f->nresults, &nsig);
  for (int i = 0, at = 0; i < np; i++) {
    Param *p = f->params.data[i];
    const Type *t = &f->local_param_types[i];
    if (t->kind == TY_STRUCT)
      for (int k = 0; k < t->nelems; k++)
        name_leaf(fn->body->args[at + k], tok_str(p->name), ty_leaf_names(t->sdef)[k]);
    else
      fn->body->args[at]->name = tok_str(p->name);
    at += ty_nleaves(t);
  }
  return fn;
}

/* The functions' names in what users read: the source's (an instance of a
 * generic function f is f, or f<T = S> where f has several instances; a
 * per-device instance is f), not the C's f_1, f_2. */
static void label_funcs(const Program *p, Func **funcs) {
  PtrMap count = {0};
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    if (f->generic && f->binding)
      ptrmap_put(&count, f->generic, ptrmap_get(&count, f->generic) < 0 ? 1 : ptrmap_get(&count, f->generic) + 1);
  }
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    if (!funcs[i] || !f->generic)
      continue;
    funcs[i]->display = f->binding && ptrmap_get(&count, f->generic) > 1 ? f->binding : tok_str(f->name);
  }
  ptrmap_free(&count);
}

Module *lower_program(Program *p, const Mesh *m) {
  Lower L;
  memset(&L, 0, sizeof L);
  L.mod = ir_module(m);
  L.mesh = &L.mod->mesh;
  L.prog = p;
  L.funcs = arena_alloc(sizeof(Func *) * (size_t)(p->funcs.len + 1));
  /* A generic function is lowered only as its instances (instance.c). */
  for (int i = 0; i < p->funcs.len; i++) {
    if (((FuncDecl *)p->funcs.data[i])->ntparams)
      continue;
    L.funcs[i] = declare(&L, p->funcs.data[i]);
    ptrmap_put(&L.func_index, p->funcs.data[i], i);
  }
  label_funcs(p, L.funcs);
  for (int i = 0; i < p->funcs.len; i++) {
    FuncDecl *f = p->funcs.data[i];
    if (f->ntparams)
      continue;
    L.fdecl = f;
    L.func = L.funcs[i];
    L.block = L.func->body;
    for (int k = 0, at = 0; k < f->params.len; k++) {
      Symbol *ps = ((Param *)f->params.data[k])->sym;
      set_leaves(&L, ps, L.func->body->args + at);
      at += ty_nleaves(&ps->type);
    }
    lower_block(&L, f->body);
    IrBlock *b = L.func->body;
    Inst *last = b->insts.len ? b->insts.data[b->insts.len - 1] : NULL;
    if (!last || last->op != IR_RETURN)
      ir_emit(L.mod, b, IR_RETURN, f->pos, 0, NULL, 0, NULL);
  }
  ptrmap_free(&L.func_index);
  ptrmap_free(&L.leaf_index);
  free(L.leaf_cache.data);
  free(L.vals);
  free(L.svals);
  return L.mod;
}
