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
 * Weak scalars (literals, constants and arithmetic on them) are folded here
 * and become constants of the dtype their use needs. The implicit casts of
 * the manual view (invariant->varying, reduced->varying; typing-rules 2.2,
 * 2.4) become explicit pcast instructions, so autodiff sees them.
 */
#include <float.h>
#include <math.h>

#include "shdc.h"

struct Lower {
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
  PtrMap func_index;     /* FuncDecl * -> that index */
};

const Mesh *lower_mesh(Lower *L) { return L->mesh; }
AxisSet lower_manual(Lower *L) { return L->fdecl && L->fdecl->manual ? L->fdecl->manual_set : 0; }

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
  AxisSet man = L->fdecl && L->fdecl->manual ? L->fdecl->manual_set : 0;
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

static int lower_call_args(Lower *L, Expr *e, FuncDecl *f, Value **args) {
  int n = e->args.len;
  for (int i = 0; i < n; i++)
    args[i] = lower_to(L, e->args.data[i], &f->param_types[i]);
  return n;
}

static Inst *lower_call(Lower *L, Expr *e) {
  FuncDecl *f = e->fn;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(e->args.len + 1));
  int n = lower_call_args(L, e, f, args);
  bool grad = e->grad != 0;
  const Type *rt = e->ty->kind == TY_TUPLE ? e->ty->elems : e->ty;
  int nr = e->ty->kind == TY_TUPLE ? e->ty->nelems : e->ty->kind == TY_VOID ? 0 : 1;
  Inst *in = ir_emit(L->mod, L->block, grad ? IR_GRAD : IR_CALL, e->pos, n, args, nr, rt);
  in->callee = func_of(L, f);
  if (grad) {
    TcInfo *info = e->tc;
    in->ival = info->with_value;
    in->dim2 = info->has_perm;
    in->iv = info->wrt;
    in->niv = info->nwrt;
  }
  return in;
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
  case EX_CALL: {
    if (e->bi)
      return e->bi->lower ? e->bi->lower(L, e) : NULL;
    Inst *in = lower_call(L, e);
    return in->nresults == 1 ? in->results[0] : NULL;
  }
  default:
    diag_ice("cannot lower expression kind %d", e->kind);
  }
}

/* A tuple-valued expression (a call) as its list of values. */
static int lower_multi(Lower *L, Expr *e, Value **out) {
  if (e->kind == EX_CALL && !e->bi) {
    Inst *in = lower_call(L, e);
    for (int i = 0; i < in->nresults; i++)
      out[i] = in->results[i];
    return in->nresults;
  }
  if (e->kind == EX_CALL && e->bi && e->ty->kind == TY_TUPLE) {
    /* A builtin with a tuple of results (split) lowers to one instruction
     * with a result per element and returns the first. */
    Inst *in = e->bi->lower(L, e)->def;
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
  Value **vals = arena_alloc(sizeof(Value *) * (size_t)(f->nresults + 1));
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
      vals[i] = lower_pcast(L, s->pos, vals[i], PCAST_VARYING, missing, t);
    }
  }
  ir_emit(L->mod, L->block, IR_RETURN, s->pos, n, vals, 0, NULL);
}

static void lower_stmt(Lower *L, Stmt *s) {
  switch (s->kind) {
  case ST_LET:
  case ST_VAR:
    if (s->sym->type.weak) {
      s->sym->fval = lower_fold(L, s->expr);
      return;
    }
    set_sym(L, s->sym, lower_to(L, s->expr, &s->sym->type));
    return;
  case ST_LET_TUPLE: {
    Value **vals = arena_alloc(sizeof(Value *) * (size_t)(s->syms.len + 1));
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
    if (s->expr->kind == EX_CALL && !s->expr->bi)
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
  for (int i = 0; i < p->funcs.len; i++) {
    L.funcs[i] = declare(&L, p->funcs.data[i]);
    ptrmap_put(&L.func_index, p->funcs.data[i], i);
  }
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
  ptrmap_free(&L.func_index);
  return L.mod;
}
