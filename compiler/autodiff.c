/* autodiff.c: grad and value_and_grad as a source transformation of the
 * global-view IR (typing-rules section 4).
 *
 * For each distinct grad(f, wrt=...) the pass builds one function G with f's
 * parameters. G's body is f's body with every call inlined (manual bodies
 * included: the boundary is a retype, the same bytes), then the reverse
 * sweep: each instruction's vector-Jacobian product, last to first. Every
 * cotangent has the type of section 4.1 (the primal's, with U and R
 * swapped), and each backward operation is given the cotangent type of the
 * operand it differentiates as its result type (its out_sharding), so the
 * partitioner inserts exactly the collectives the primal types imply: the
 * all-reduce of data parallelism, the reduce-scatter of FSDP, the
 * all-reduce that transposes pcast(to=varying).
 *
 * Loops: the forward loop saves its carries on a tape, one entry per
 * iteration; the reverse loop runs the iterations backwards, recomputes each
 * body from its saved carries, and backpropagates through it, carrying the
 * cotangents of the carries and of the outer values the body reads. Branches
 * recompute the taken branch; under a condition that varies across devices,
 * an active cast whose transpose all-reduces is an error [E_GRAD].
 * Recomputed code drops print and save.
 *
 * Masks, tie counts and other values computed from primal values keep the
 * primal's states, so a pending (unreduced) cotangent of a reduced value
 * meets only reduced partners and stays pending: no VJP communicates
 * beyond what the types ask for.
 *
 * A grad inside a differentiated function is built first and inlined like
 * any call: second derivatives work, except through a loop (the inner
 * gradient's tape is not differentiated: [E_GRAD]).
 */
#include "shdc.h"

typedef struct {
  Inst *loop;
  Value *tapes[64];
} LoopTapes;

typedef struct {
  Module *mod;
  const Mesh *m;
  IrBlock *b;           /* where instructions go */
  Pos pos;
  Value **ct;           /* by value id: the cotangent accumulated so far */
  Value **rm;           /* by value id: the copy of a value in the current code */
  bool *active;         /* by value id */
  int cap;
  Vec tapes;            /* LoopTapes * */
  bool failed;
  const char *fname;
  Pos grad_pos;         /* the grad call being built (notes point at it) */
  Pos nested;           /* while inlining a generated gradient: the call's place */
  bool in_nested;
  Vec nested_pushes;    /* NestedPush *: tape pushes copied from a generated gradient */
} AD;

/* A tape push of a gradient function that is itself being differentiated
 * (grad of a function that calls grad): differentiating through a tape is not
 * supported, so an active push is an error at the inner grad call. */
typedef struct {
  const Inst *push;
  Pos site, loop;
} NestedPush;

static void grow(AD *a) {
  int need = a->mod->next_value + 1;
  if (need <= a->cap)
    return;
  int cap = a->cap ? a->cap : 1024;
  while (cap < need)
    cap *= 2;
  a->ct = realloc(a->ct, sizeof(Value *) * (size_t)cap);
  a->rm = realloc(a->rm, sizeof(Value *) * (size_t)cap);
  a->active = realloc(a->active, sizeof(bool) * (size_t)cap);
  memset(a->ct + a->cap, 0, sizeof(Value *) * (size_t)(cap - a->cap));
  memset(a->rm + a->cap, 0, sizeof(Value *) * (size_t)(cap - a->cap));
  memset(a->active + a->cap, 0, sizeof(bool) * (size_t)(cap - a->cap));
  a->cap = cap;
}

static void fail(AD *a, Pos pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(AD *a, Pos pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, "E_GRAD", fmt, ap);
  va_end(ap);
  if (a->grad_pos.file && (a->grad_pos.line != pos.line || a->grad_pos.col != pos.col))
    diag_note(a->grad_pos, "in the gradient of %s taken here", a->fname);
  a->failed = true;
}

/* The value a primal value has in the code being emitted. */
static Value *P(AD *a, Value *v) {
  grow(a);
  return a->rm[v->id] ? a->rm[v->id] : v;
}

/* ---- emitting typed instructions ---------------------------------------------------- */

static Inst *emit(AD *a, Opcode op, int n, Value **args, Type t) {
  Inst *in = ir_emit(a->mod, a->b, op, a->pos, n, args, 1, &t);
  grow(a);
  return in;
}

static Value *emit1(AD *a, Opcode op, int n, Value **args, Type t) { return emit(a, op, n, args, t)->results[0]; }

static bool is_literal(const Value *v) { return v->def && v->def->op == IR_CONST; }

static Value *cst(AD *a, DType dt, double x) {
  Inst *in = emit(a, IR_CONST, 0, NULL, ty_scalar(dt));
  in->fval = x;
  in->ival = (int64_t)x;
  return in->results[0];
}

static RuleCtx quiet(AD *a, const char *op) {
  RuleCtx r = {a->m, 0, {0}, op};
  return r;
}

static Value *to_type(AD *a, Value *v, const Type *t);

/* An elementwise op whose result type the rules compute; a literal operand
 * adopts states as typing-rules D7 says. */
static Value *ew(AD *a, int irop, int fn, int n, Value **args) {
  Type ts[3];
  const Type *tp[3];
  AxisSet man = 0;
  for (int i = 0; i < n; i++) {
    ts[i] = args[i]->type;
    ts[i].weak = is_literal(args[i]);
    tp[i] = &ts[i];
    man |= args[i]->type.V;
  }
  RuleCtx rc = quiet(a, "autodiff");
  rc.manual = man;
  Type out;
  if (!rule_elementwise(&rc, irop == IR_SELECT ? -1 : fn, n, tp, &out)) {
    /* Pending sums or reduced marks that the rules do not combine: use
     * the plain (replicated) representation of the same values. */
    for (int i = 0; i < n; i++) {
      if (!(args[i]->type.U | args[i]->type.R) || is_literal(args[i]))
        continue;
      Type plain = args[i]->type;
      plain.U = plain.R = 0;
      args[i] = to_type(a, args[i], &plain);
      ts[i] = args[i]->type;
      ts[i].weak = false;
    }
    if (!rule_elementwise(&rc, irop == IR_SELECT ? -1 : fn, n, tp, &out))
      diag_ice("autodiff: no type for an elementwise %s", irop == IR_SELECT ? "select" : ir_binop_name(fn));
  }
  out.weak = false;
  Inst *in = emit(a, irop, n, args, out);
  in->fn = fn;
  return in->results[0];
}

static Value *bin(AD *a, int fn, Value *x, Value *y) {
  Value *args[2] = {x, y};
  return ew(a, IR_BINARY, fn, 2, args);
}

static Value *un(AD *a, int fn, Value *x) {
  Type t = x->type;
  if (fn == UN_STEP || fn == UN_SIGN)
    t.U = 0;
  Inst *in = emit(a, IR_UNARY, 1, &x, t);
  in->fn = fn;
  return in->results[0];
}

static Value *select3(AD *a, Value *c, Value *x, Value *y) {
  Value *args[3] = {c, x, y};
  return ew(a, IR_SELECT, 0, 3, args);
}

/* The same logical value in another representation: a reshard in the
 * global view (free when only R changes), a retype across a manual
 * boundary. */
static Value *to_type(AD *a, Value *v, const Type *t) {
  if (ty_equal(&v->type, t))
    return v;
  bool same_shape = v->type.rank == t->rank;
  for (int d = 0; same_shape && d < t->rank; d++)
    same_shape = v->type.shape[d] == t->shape[d];
  if (v->type.dtype != t->dtype) {
    Type c = v->type;
    c.dtype = t->dtype;
    v = emit1(a, IR_CAST, 1, &v, c);
    if (ty_equal(&v->type, t))
      return v;
  }
  if (same_shape && v->type.V == t->V)
    return emit1(a, IR_RESHARD, 1, &v, *t);
  diag_ice("autodiff: cannot convert %s to %s", ty_str(a->m, &v->type), ty_str(a->m, t));
}

static Value *zeros(AD *a, const Type *t) {
  Type plain = *t;
  Value *z = cst(a, t->dtype, 0);
  if (t->rank == 0 && !t->U && !t->R && !t->V)
    return z;
  if (t->rank == 0)   /* a zero scalar with states: the same bytes everywhere */
    return emit1(a, IR_RETYPE, 1, &z, plain);
  return emit1(a, IR_FILL, 1, &z, plain);
}

static bool is_float_value(const Value *v) { return v->type.kind == TY_ARRAY && ty_is_float(v->type.dtype); }

/* ---- accumulation -------------------------------------------------------------------- */

static void add_ct(AD *a, Value *primal, Value *c) {
  grow(a);
  if (!a->active[primal->id] || !is_float_value(primal))
    return;
  Type want = ty_ct(&primal->type);
  c = to_type(a, c, &want);
  Value *prev = a->ct[primal->id];
  if (!prev) {
    a->ct[primal->id] = c;
    return;
  }
  Inst *in = emit(a, IR_BINARY, 2, (Value *[]){prev, c}, want);
  in->fn = BIN_ADD;
  a->ct[primal->id] = in->results[0];
}

static Value *ct_or_zero(AD *a, Value *primal) {
  grow(a);
  if (a->ct[primal->id])
    return a->ct[primal->id];
  Type t = ty_ct(&primal->type);
  return zeros(a, &t);
}

/* Sums g (shaped like a broadcast result) down to the shape of the primal
 * type `primal`, typed as its cotangent. The sum keeps the pending sums that
 * the cotangent type keeps (a <R:X> operand's cotangent stays <U:X>: no
 * all-reduce), and produces none that it does not (an <U:X> operand's
 * cotangent, <R:X>, is summed locally from the replicated g). */
static Value *unbroadcast(AD *a, Value *g, const Type *primal) {
  const Type *G = &g->type;
  Type want = ty_ct(primal);
  int off = G->rank - want.rank;
  unsigned mask = 0;
  for (int d = 0; d < G->rank; d++) {
    int td = d - off;
    if (td < 0 || (want.shape[td] == 1 && G->shape[d] != 1))
      mask |= 1u << d;
  }
  if (!mask)
    return to_type(a, g, &want);
  Type r = *G;
  r.rank = 0;
  for (int d = 0; d < G->rank; d++) {
    if (mask & (1u << d))
      continue;
    r.shape[r.rank] = G->shape[d];
    r.spec[r.rank] = want.spec[d - off];
    r.rank++;
  }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  r.U = want.U & ~ty_dim_axes(&r);
  r.R = 0;
  r.V = G->V;
  Inst *in = emit(a, IR_REDUCE, 1, &g, r);
  in->fn = RED_SUM;
  in->mask = mask;
  Value *s = in->results[0];
  if (r.rank != want.rank) {
    Type t = want;
    t.R = 0;
    t.U = r.U;
    s = emit1(a, IR_RESHAPE, 1, &s, t);
  }
  return to_type(a, s, &want);
}

/* v (shaped like a reduction of x over `mask`) broadcast back to x's shape,
 * typed t. */
static Value *broadcast_as(AD *a, Value *v, const Type *x, unsigned mask, Type t) {
  Type keep = v->type;
  keep.rank = x->rank;
  int k = 0;
  for (int d = 0; d < x->rank; d++) {
    if (mask & (1u << d)) {
      keep.shape[d] = 1;
      keep.spec[d].n = 0;
    } else {
      keep.shape[d] = v->type.shape[k];
      keep.spec[d] = v->type.spec[k];
      k++;
    }
  }
  Value *r = keep.rank == v->type.rank ? v : emit1(a, IR_RESHAPE, 1, &v, keep);
  return emit1(a, IR_BROADCAST, 1, &r, t);
}

/* The transpose of a sum: g broadcast back over the reduced dims, typed
 * ct(x). */
static Value *broadcast_back(AD *a, Value *g, const Type *x, unsigned mask) {
  return broadcast_as(a, g, x, mask, ty_ct(x));
}

/* g where cond holds, 0 elsewhere. A pending (unreduced) g cannot meet a
 * literal 0 in a select, so it is multiplied by a 0/1 mask marked reduced
 * over g's unreduced axes (U(A) x R(A) is U(A)); the mask, computed from
 * replicated or reduced values, is the same on every device, so marking it
 * is free. Otherwise a select: no NaN from an infinite g where cond fails. */
static Value *gate(AD *a, Value *g, Value *cond) {
  if (!g->type.U)
    return select3(a, cond, g, cst(a, g->type.dtype, 0));
  Type t = cond->type;
  t.dtype = g->type.dtype;
  Value *m = emit1(a, IR_CAST, 1, &cond, t);
  Type r = m->type;
  r.R = g->type.U;
  return bin(a, BIN_MUL, g, to_type(a, m, &r));
}

/* ---- the VJP of each instruction ------------------------------------------------------- */

static void vjp_unary(AD *a, Inst *in, Value *g) {
  Value *x = P(a, in->args[0]), *y = P(a, in->results[0]);
  DType dt = x->type.dtype;
  Value *r;
  switch (in->fn) {
  case UN_NEG: r = un(a, UN_NEG, g); break;
  case UN_EXP: r = bin(a, BIN_MUL, g, y); break;
  case UN_LOG: r = bin(a, BIN_DIV, g, x); break;
  case UN_SIN: r = bin(a, BIN_MUL, g, un(a, UN_COS, x)); break;
  case UN_COS: r = un(a, UN_NEG, bin(a, BIN_MUL, g, un(a, UN_SIN, x))); break;
  case UN_TANH: r = bin(a, BIN_MUL, g, bin(a, BIN_SUB, cst(a, dt, 1), bin(a, BIN_MUL, y, y))); break;
  case UN_SQRT: r = bin(a, BIN_DIV, bin(a, BIN_MUL, g, cst(a, dt, 0.5)), y); break;
  case UN_ABS: r = bin(a, BIN_MUL, g, un(a, UN_SIGN, x)); break;
  /* relu' from the output (y > 0 iff x > 0): the pre-activation then has
   * one use and fuses with whatever produced it. */
  case UN_RELU: r = bin(a, BIN_MUL, g, un(a, UN_STEP, y)); break;
  case UN_SIGMOID: r = bin(a, BIN_MUL, g, bin(a, BIN_MUL, y, bin(a, BIN_SUB, cst(a, dt, 1), y))); break;
  default: return;   /* sign, step, not: zero derivative */
  }
  add_ct(a, in->args[0], r);
}

/* Whether primal needs a cotangent (active and float): checked before a
 * VJP emits anything, so inactive operands cost no code. A literal operand
 * is never active; its own unbroadcast would even be ill-typed (a varying
 * cotangent summed to an invariant literal's type). */
static bool wants_ct(AD *a, const Value *primal) {
  grow(a);
  return a->active[primal->id] && is_float_value(primal);
}

/* Adds g, summed over the dims that broadcasting stretched, to primal. */
static void add_ct_unbroadcast(AD *a, Value *primal, Value *g) {
  add_ct(a, primal, unbroadcast(a, g, &primal->type));
}

static void vjp_binary(AD *a, Inst *in, Value *g) {
  Value *x = P(a, in->args[0]), *y = P(a, in->args[1]);
  Value *px = in->args[0], *py = in->args[1];
  bool ax = wants_ct(a, px), ay = wants_ct(a, py);
  DType dt = in->results[0]->type.dtype;
  switch (in->fn) {
  case BIN_ADD:
    if (ax)
      add_ct_unbroadcast(a, px, g);
    if (ay)
      add_ct_unbroadcast(a, py, g);
    return;
  case BIN_SUB:
    if (ax)
      add_ct_unbroadcast(a, px, g);
    if (ay)
      add_ct_unbroadcast(a, py, un(a, UN_NEG, g));
    return;
  case BIN_MUL:
    if (ax)
      add_ct_unbroadcast(a, px, bin(a, BIN_MUL, g, y));
    if (ay)
      add_ct_unbroadcast(a, py, bin(a, BIN_MUL, g, x));
    return;
  case BIN_DIV:
    if (ax)
      add_ct_unbroadcast(a, px, bin(a, BIN_DIV, g, y));
    if (ay) {
      Value *q = P(a, in->results[0]);
      add_ct_unbroadcast(a, py, un(a, UN_NEG, bin(a, BIN_DIV, bin(a, BIN_MUL, g, q), y)));
    }
    return;
  case BIN_MAX:
  case BIN_MIN: {
    if (!ax && !ay)
      return;
    /* Ties split evenly, as JAX does. */
    Value *win = bin(a, in->fn == BIN_MAX ? BIN_GT : BIN_LT, x, y);
    Value *lose = bin(a, in->fn == BIN_MAX ? BIN_LT : BIN_GT, x, y);
    Value *tie = bin(a, BIN_EQ, x, y);
    Value *half = gate(a, bin(a, BIN_MUL, g, cst(a, dt, 0.5)), tie);
    if (ax)
      add_ct_unbroadcast(a, px, bin(a, BIN_ADD, gate(a, g, win), half));
    if (ay)
      add_ct_unbroadcast(a, py, bin(a, BIN_ADD, gate(a, g, lose), half));
    return;
  }
  default:
    return;  /* comparisons and logic have no derivative */
  }
}

/* The transpose of dot_general: a dot of the cotangent with the other
 * operand, whose result type is the differentiated operand's cotangent type
 * (typing-rules 4.2). */
static void vjp_dot(AD *a, Inst *in, Value *g) {
  const DotDims *d = &in->dot;
  Value *x = P(a, in->args[0]), *y = P(a, in->args[1]);
  int nb = d->nbatch;
  bool used_x[MAX_RANK] = {0}, used_y[MAX_RANK] = {0};
  for (int i = 0; i < nb; i++)
    used_x[d->lhs_batch[i]] = used_y[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    used_x[d->lhs_contract[i]] = used_y[d->rhs_contract[i]] = true;
  int fx[MAX_RANK], nfx = 0, fy[MAX_RANK], nfy = 0;
  for (int i = 0; i < x->type.rank; i++)
    if (!used_x[i])
      fx[nfx++] = i;
  for (int i = 0; i < y->type.rank; i++)
    if (!used_y[i])
      fy[nfy++] = i;
  for (int side = 0; side < 2; side++) {
    Value *primal = in->args[side];
    if (!a->active[primal->id])
      continue;
    /* side 0: ct_x = dot(g, y) contracting g's y-free dims with y's free
     * dims; side 1: ct_y = dot(x, g) contracting x's free dims with g's
     * x-free dims. */
    Value *other = side ? x : y;
    const Type *target = &primal->type;
    DotDims nd = {0};
    nd.nbatch = nb;
    for (int i = 0; i < nb; i++) {
      nd.lhs_batch[i] = side ? d->lhs_batch[i] : i;
      nd.rhs_batch[i] = side ? i : d->rhs_batch[i];
    }
    if (!side) {
      for (int i = 0; i < nfy; i++) {
        nd.lhs_contract[nd.ncontract] = nb + nfx + i;
        nd.rhs_contract[nd.ncontract++] = fy[i];
      }
    } else {
      for (int i = 0; i < nfx; i++) {
        nd.lhs_contract[nd.ncontract] = fx[i];
        nd.rhs_contract[nd.ncontract++] = nb + i;
      }
    }
    /* The new dot's result order and where each of target's dims lands. */
    int where[MAX_RANK];
    int pos = nb;
    if (!side) {
      /* (batch, x free (g's), y's remaining = y's contracting, in y order) */
      for (int i = 0; i < nb; i++)
        where[d->lhs_batch[i]] = i;
      for (int i = 0; i < nfx; i++)
        where[fx[i]] = pos++;
      int ycon[MAX_RANK], nyc = 0;
      for (int k = 0; k < y->type.rank; k++) {
        bool is_c = false;
        for (int i = 0; i < d->ncontract; i++)
          is_c |= d->rhs_contract[i] == k;
        if (is_c)
          ycon[nyc++] = k;
      }
      for (int j = 0; j < nyc; j++)
        for (int i = 0; i < d->ncontract; i++)
          if (d->rhs_contract[i] == ycon[j])
            where[d->lhs_contract[i]] = pos + j;
    } else {
      /* (batch, x's remaining = x's contracting in x order, y free (g's)) */
      for (int i = 0; i < nb; i++)
        where[d->rhs_batch[i]] = i;
      int xcon[MAX_RANK], nxc = 0;
      for (int k = 0; k < x->type.rank; k++) {
        bool is_c = false;
        for (int i = 0; i < d->ncontract; i++)
          is_c |= d->lhs_contract[i] == k;
        if (is_c)
          xcon[nxc++] = k;
      }
      for (int j = 0; j < nxc; j++)
        for (int i = 0; i < d->ncontract; i++)
          if (d->lhs_contract[i] == xcon[j])
            where[d->rhs_contract[i]] = pos + j;
      pos += nxc;
      for (int i = 0; i < nfy; i++)
        where[fy[i]] = pos++;
    }
    Type ctt = ty_ct(target);
    Type dt = ctt;
    for (int k = 0; k < target->rank; k++) {
      dt.shape[where[k]] = ctt.shape[k];
      dt.spec[where[k]] = ctt.spec[k];
    }
    Value *ops[2] = {side ? other : g, side ? g : other};
    Inst *di = emit(a, IR_DOT, 2, ops, dt);
    di->dot = nd;
    Value *r = di->results[0];
    bool ident = true;
    int perm[MAX_RANK];
    for (int k = 0; k < target->rank; k++) {
      perm[k] = where[k];
      ident &= perm[k] == k;
    }
    if (!ident) {
      Inst *t = emit(a, IR_TRANSPOSE, 1, &r, ctt);
      memcpy(t->perm, perm, sizeof t->perm);
      r = t->results[0];
    }
    add_ct(a, primal, r);
  }
}

static void vjp_reduce(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  const Type *X = &px->type;
  if (in->fn == RED_SUM) {
    add_ct(a, px, broadcast_back(a, g, X, in->mask));
    return;
  }
  /* max/min: the cotangent goes to the elements equal to the result, split
   * evenly among ties. */
  /* Everything but g is typed like the primal values (a reduced x gives
   * reduced masks and counts, which a pending g may be divided and
   * multiplied by without communication). */
  Value *x = P(a, px), *y = P(a, in->results[0]);
  Value *yb = broadcast_as(a, y, X, in->mask, x->type);
  Value *hit = bin(a, BIN_EQ, x, yb);
  Type ht = hit->type;
  ht.dtype = X->dtype;
  Value *m = emit1(a, IR_CAST, 1, &hit, ht);
  Inst *cnt = emit(a, IR_REDUCE, 1, &m, y->type);
  cnt->fn = RED_SUM;
  cnt->mask = in->mask;
  Value *share = bin(a, BIN_DIV, g, cnt->results[0]);
  add_ct(a, px, bin(a, BIN_MUL, broadcast_back(a, share, X, in->mask), m));
}

static void vjp_transpose(AD *a, Inst *in, Value *g) {
  int inv[MAX_RANK];
  int rank = in->results[0]->type.rank;
  for (int k = 0; k < rank; k++)
    inv[in->perm[k]] = k;
  Type t = ty_ct(&in->args[0]->type);
  Inst *tr = emit(a, IR_TRANSPOSE, 1, &g, t);
  memcpy(tr->perm, inv, sizeof tr->perm);
  add_ct(a, in->args[0], tr->results[0]);
}

static Inst *collective(AD *a, Opcode op, Value *g, const Inst *like, Type t) {
  Inst *c = emit(a, op, 1, &g, t);
  c->naxes = like->naxes;
  memcpy(c->axes, like->axes, sizeof c->axes);
  c->fn = RED_SUM;
  return c;
}

static AxisSet inst_axes(const Inst *in) {
  AxisSet s = 0;
  for (int i = 0; i < in->naxes; i++)
    s |= 1u << in->axes[i];
  return s;
}

/* Collectives and casts transpose as in typing-rules 4.3. */
static void vjp_manual(AD *a, Inst *in, Value *g) {
  Value *px = in->args[0];
  Type X = px->type, ct = ty_ct(&X);
  AxisSet ax = inst_axes(in);
  switch (in->op) {
  case IR_PCAST: {
    int to;
    if (in->fn == PCAST_VARYING && !(X.R & ax)) {
      add_ct(a, px, collective(a, IR_ALL_REDUCE, g, in, ct)->results[0]);  /* pvary -> psum */
      return;
    }
    to = in->fn == PCAST_VARYING ? PCAST_UNREDUCED : in->fn == PCAST_UNREDUCED ? PCAST_VARYING : -1;
    if (to < 0) {
      add_ct(a, px, collective(a, IR_ALL_REDUCE, g, in, ct)->results[0]);  /* reduced -> unreduced psum */
      return;
    }
    Inst *c = collective(a, IR_PCAST, g, in, ct);
    c->fn = to;
    add_ct(a, px, c->results[0]);
    return;
  }
  case IR_ALL_REDUCE:
    if (in->fn == RED_SUM) {
      Inst *c = collective(a, IR_PCAST, g, in, ct);
      c->fn = (X.U & ax) ? PCAST_REDUCED : PCAST_VARYING;
      add_ct(a, px, c->results[0]);
      return;
    } else {
      /* pmax/pmin: the devices holding the extreme value share the
       * cotangent. */
      Value *x = P(a, px), *y = P(a, in->results[0]);
      Value *hit = bin(a, BIN_EQ, x, y);
      Type ht = hit->type;
      ht.dtype = X.dtype;
      Value *m = emit1(a, IR_CAST, 1, &hit, ht);
      Type ct_t = m->type;
      ct_t.V &= ~ax;
      Value *cnt = collective(a, IR_ALL_REDUCE, m, in, ct_t)->results[0];
      Value *share = bin(a, BIN_DIV, g, cnt);
      Type vt = share->type;
      vt.V |= ax;
      Inst *pv = collective(a, IR_PCAST, share, in, vt);
      pv->fn = PCAST_VARYING;
      add_ct(a, px, bin(a, BIN_MUL, pv->results[0], m));
      return;
    }
  case IR_ALL_GATHER: {
    Type Y = in->results[0]->type;
    Opcode op = (Y.R & ax) || (Y.V & ax) ? IR_REDUCE_SCATTER : IR_SLICE_BLOCK;
    Inst *c = collective(a, op, g, in, ct);
    c->dim = in->dim;
    add_ct(a, px, c->results[0]);
    return;
  }
  case IR_SLICE_BLOCK:    /* take the own block (I -> V): its transpose gathers (V -> I) */
  case IR_REDUCE_SCATTER: {
    Inst *c = collective(a, IR_ALL_GATHER, g, in, ct);
    c->dim = in->dim;
    add_ct(a, px, c->results[0]);
    return;
  }
  case IR_ALL_TO_ALL: {
    Inst *c = collective(a, IR_ALL_TO_ALL, g, in, ct);
    c->dim = in->dim2;
    c->dim2 = in->dim;
    add_ct(a, px, c->results[0]);
    return;
  }
  case IR_PPERMUTE: {
    int64_t n = 1;
    for (int i = 0; i < in->naxes; i++)
      n *= a->m->sizes[in->axes[i]];
    Inst *c = collective(a, IR_PPERMUTE, g, in, ct);
    c->shift = (int)((n - in->shift) % n);
    add_ct(a, px, c->results[0]);
    return;
  }
  case IR_RETYPE:
    add_ct(a, px, emit1(a, IR_RETYPE, 1, &g, ct));
    return;
  default:
    diag_ice("vjp_manual %s", ir_opname(in->op));
  }
}

/* ---- cloning (with inlining) ------------------------------------------------------------- */

static void clone_block(AD *a, const IrBlock *src, bool recompute, const IrBlock *own_loop_body);
static void clone_inst(AD *a, const Inst *in, bool recompute, const IrBlock *own_loop_body);

static void inline_body(AD *a, const Inst *in, const Func *f, bool recompute);

static Value *retype_to(AD *a, Value *v, const Type *t) {
  if (ty_equal(&v->type, t))
    return v;
  return emit1(a, IR_RETYPE, 1, &v, *t);
}

static void inline_call(AD *a, const Inst *in, bool recompute) {
  const Func *f = in->callee;
  Pos saved_site = a->nested;
  bool saved_in = a->in_nested;
  if (f->generated && !a->in_nested) {
    a->nested = in->pos;
    a->in_nested = true;
  }
  inline_body(a, in, f, recompute);
  a->nested = saved_site;
  a->in_nested = saved_in;
}

static void inline_body(AD *a, const Inst *in, const Func *f, bool recompute) {
  for (int k = 0; k < f->body->nargs; k++)
    a->rm[f->body->args[k]->id] = retype_to(a, P(a, in->args[k]), &f->body->args[k]->type);
  const IrBlock *body = f->body;
  for (int i = 0; i < body->insts.len; i++) {
    const Inst *bi = body->insts.data[i];
    if (bi->op == IR_RETURN) {
      for (int k = 0; k < bi->nargs; k++)
        a->rm[in->results[k]->id] = retype_to(a, P(a, bi->args[k]), &in->results[k]->type);
      return;
    }
    clone_inst(a, bi, recompute, NULL);
  }
}

static void clone_inst(AD *a, const Inst *in, bool recompute, const IrBlock *own_loop_body) {
  grow(a);
  a->pos = in->pos;
  if (recompute && (in->op == IR_PRINT || in->op == IR_SAVE))
    return;
  if (recompute && in->op == IR_TAPE_PUSH && in->parent == own_loop_body)
    return;
  if (in->op == IR_CALL) {
    inline_call(a, in, recompute);
    return;
  }
  if (in->op == IR_GRAD) {
    fail(a, in->pos, "this grad is part of the function %s that is being differentiated, and its own gradient "
                     "could not be built first (a call cycle?) [not supported yet]", a->fname);
    for (int k = 0; k < in->nresults; k++)
      a->rm[in->results[k]->id] = zeros(a, &in->results[k]->type);
    return;
  }
  Value *args[64];
  for (int i = 0; i < in->nargs; i++)
    args[i] = P(a, in->args[i]);
  Type rt[64];
  for (int i = 0; i < in->nresults; i++)
    rt[i] = in->results[i]->type;
  Inst *n = ir_emit(a->mod, a->b, in->op, in->pos, in->nargs, args, in->nresults, rt);
  grow(a);
  ir_copy_attrs(n, in);
  for (int i = 0; i < in->nresults; i++) {
    a->rm[in->results[i]->id] = n->results[i];
    n->results[i]->name = in->results[i]->name;
  }
  if (in->op == IR_TAPE_PUSH && a->in_nested) {
    NestedPush *np = arena_alloc(sizeof *np);
    np->push = n;
    np->site = a->nested;
    np->loop = in->pos;
    vec_push(&a->nested_pushes, np);
  }
  for (int r = 0; r < in->nregions; r++) {
    const IrBlock *src = in->regions[r];
    Type ts[64];
    for (int k = 0; k < src->nargs; k++)
      ts[k] = src->args[k]->type;
    IrBlock *nb = ir_block(src->nargs, ts, a->mod);
    grow(a);
    ir_add_region(n, nb);
    for (int k = 0; k < src->nargs; k++)
      a->rm[src->args[k]->id] = nb->args[k];
    IrBlock *saved = a->b;
    a->b = nb;
    clone_block(a, src, recompute, NULL);
    a->b = saved;
  }
}

static void clone_block(AD *a, const IrBlock *src, bool recompute, const IrBlock *own_loop_body) {
  for (int i = 0; i < src->insts.len; i++)
    clone_inst(a, src->insts.data[i], recompute, own_loop_body);
}

/* ---- activity ------------------------------------------------------------------------------ */

static bool any_active_arg(AD *a, const Inst *in, int from) {
  for (int i = from; i < in->nargs; i++)
    if (a->active[in->args[i]->id])
      return true;
  return false;
}

static bool propagate_block(AD *a, const IrBlock *b);

static bool propagate_inst(AD *a, const Inst *in) {
  bool changed = false;
  if (in->op == IR_FOR) {
    const IrBlock *body = in->regions[0];
    for (int k = 0; k < in->nresults; k++)
      if (a->active[in->args[k + 2]->id] && is_float_value(body->args[k + 1]) && !a->active[body->args[k + 1]->id])
        a->active[body->args[k + 1]->id] = changed = true;
    for (int guard = 0; guard < 64; guard++) {
      propagate_block(a, body);
      const Inst *y = body->insts.data[body->insts.len - 1];
      bool more = false;
      for (int k = 0; k < y->nargs; k++)
        if (a->active[y->args[k]->id] && is_float_value(body->args[k + 1]) && !a->active[body->args[k + 1]->id])
          a->active[body->args[k + 1]->id] = more = true;
      changed |= more;
      if (!more)
        break;
    }
    for (int k = 0; k < in->nresults; k++)
      if (a->active[body->args[k + 1]->id] && !a->active[in->results[k]->id])
        a->active[in->results[k]->id] = changed = true;
    return changed;
  }
  if (in->op == IR_IF) {
    for (int r = 0; r < 2; r++) {
      propagate_block(a, in->regions[r]);
      const Inst *y = in->regions[r]->insts.data[in->regions[r]->insts.len - 1];
      for (int k = 0; k < y->nargs; k++)
        if (a->active[y->args[k]->id] && is_float_value(in->results[k]) && !a->active[in->results[k]->id])
          a->active[in->results[k]->id] = changed = true;
    }
    return changed;
  }
  if (in->op == IR_TAPE_GET || in->op == IR_TAPE_NEW || in->op == IR_TAPE_PUSH)
    return false;
  bool act = any_active_arg(a, in, 0);
  for (int k = 0; k < in->nresults; k++)
    if (act && is_float_value(in->results[k]) && !a->active[in->results[k]->id])
      a->active[in->results[k]->id] = changed = true;
  return changed;
}

static bool propagate_block(AD *a, const IrBlock *b) {
  bool changed = false;
  for (int i = 0; i < b->insts.len; i++)
    changed |= propagate_inst(a, b->insts.data[i]);
  return changed;
}

/* ---- tapes ----------------------------------------------------------------------------------- */

static bool loop_is_active(AD *a, const Inst *in) {
  for (int k = 0; k < in->nresults; k++)
    if (a->active[in->results[k]->id])
      return true;
  return false;
}

/* Inserts, before each active loop, one tape per carry sized by the trip
 * count, and at the top of its body the pushes of the carries. */
static void instrument_block(AD *a, IrBlock *b) {
  Vec old = b->insts;
  b->insts = (Vec){0};
  for (int i = 0; i < old.len; i++) {
    Inst *in = old.data[i];
    if (in->op == IR_FOR && loop_is_active(a, in)) {
      IrBlock *saved = a->b;
      a->b = b;
      a->pos = in->pos;
      Value *lo = in->args[0], *hi = in->args[1];
      Value *n = bin(a, BIN_SUB, hi, lo);
      LoopTapes *lt = arena_alloc(sizeof *lt);
      lt->loop = in;
      for (int k = 0; k < in->nresults; k++) {
        Type tt = ty_void();
        tt.kind = TY_TAPE;
        tt.elems = arena_alloc(sizeof(Type));
        tt.elems[0] = in->regions[0]->args[k + 1]->type;
        lt->tapes[k] = emit1(a, IR_TAPE_NEW, 1, &n, tt);
      }
      vec_push(&a->tapes, lt);
      IrBlock *body = in->regions[0];
      Vec bold = body->insts;
      body->insts = (Vec){0};
      a->b = body;
      Value *idx = bin(a, BIN_SUB, body->args[0], lo);
      for (int k = 0; k < in->nresults; k++)
        ir_emit(a->mod, body, IR_TAPE_PUSH, in->pos, 3, (Value *[]){lt->tapes[k], idx, body->args[k + 1]}, 0, NULL);
      for (int j = 0; j < bold.len; j++)
        vec_push(&body->insts, bold.data[j]);
      free(bold.data);
      a->b = saved;
      in->parent = b;
    }
    vec_push(&b->insts, in);
    in->parent = b;
    for (int r = 0; r < in->nregions; r++)
      instrument_block(a, in->regions[r]);
  }
  free(old.data);
}

static LoopTapes *tapes_of(AD *a, const Inst *loop) {
  for (int i = 0; i < a->tapes.len; i++) {
    LoopTapes *lt = a->tapes.data[i];
    if (lt->loop == loop)
      return lt;
  }
  return NULL;
}

/* ---- the reverse sweep --------------------------------------------------------------------- */

static void backprop(AD *a, const IrBlock *b, int n);

/* Active values defined outside `blk` that instructions in it read. */
static void outer_uses(AD *a, const IrBlock *blk, const IrBlock *root, Vec *out) {
  for (int i = 0; i < blk->insts.len; i++) {
    const Inst *in = blk->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      Value *v = in->args[k];
      if (!a->active[v->id] || !is_float_value(v))
        continue;
      /* defined inside root? */
      const IrBlock *p = v->def ? v->def->parent : v->arg_of;
      bool inside = false;
      while (p) {
        if (p == root) {
          inside = true;
          break;
        }
        p = p->owner ? p->owner->parent : NULL;
      }
      if (inside)
        continue;
      bool seen = false;
      for (int j = 0; j < out->len; j++)
        seen |= out->data[j] == v;
      if (!seen)
        vec_push(out, v);
    }
    for (int r = 0; r < in->nregions; r++)
      outer_uses(a, in->regions[r], root, out);
  }
}

/* Backpropagates through one recomputed copy of `src` (a loop body or a
 * branch): seeds the yielded values with `seeds`, redirects the outer
 * values' cotangents to `acc`, and returns the updated accumulators and the
 * cotangents of the block's arguments. */
static void backprop_region(AD *a, const IrBlock *src, Value **seeds, Vec *outer, Value **acc, Value **acc_out,
                            Value **arg_ct) {
  Value **saved = arena_alloc(sizeof(Value *) * (size_t)(outer->len + 1));
  for (int j = 0; j < outer->len; j++) {
    Value *o = outer->data[j];
    saved[j] = a->ct[o->id];
    a->ct[o->id] = acc[j];
  }
  const Inst *y = src->insts.data[src->insts.len - 1];
  for (int k = 0; k < y->nargs; k++)
    if (seeds[k])
      add_ct(a, y->args[k], seeds[k]);
  backprop(a, src, src->insts.len - 1);
  for (int j = 0; j < outer->len; j++) {
    Value *o = outer->data[j];
    acc_out[j] = ct_or_zero(a, o);
    a->ct[o->id] = saved[j];
  }
  for (int k = 0; arg_ct && k < src->nargs; k++)
    arg_ct[k] = a->active[src->args[k]->id] ? ct_or_zero(a, src->args[k]) : NULL;
}

static void vjp_for(AD *a, Inst *in) {
  const IrBlock *body = in->regions[0];
  LoopTapes *lt = tapes_of(a, in);
  if (!lt)
    diag_ice("autodiff: loop without tapes");
  int nc = in->nresults;
  Vec outer = {0};
  outer_uses(a, body, body, &outer);
  /* Reverse loop carries: cotangents of the active carries, then of the
   * outer values. */
  int act[64], na = 0;
  for (int k = 0; k < nc; k++)
    if (a->active[body->args[k + 1]->id])
      act[na++] = k;
  int ncar = na + outer.len;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(ncar + 2));
  Type *types = arena_alloc(sizeof(Type) * (size_t)(ncar + 2));
  Value *lo = P(a, in->args[0]), *hi = P(a, in->args[1]);
  Value *trips = bin(a, BIN_SUB, hi, lo);
  args[0] = cst(a, DT_I32, 0);
  args[1] = trips;
  types[0] = ty_scalar(DT_I32);
  for (int j = 0; j < na; j++) {
    args[j + 2] = ct_or_zero(a, in->results[act[j]]);
    types[j + 1] = args[j + 2]->type;
  }
  for (int j = 0; j < outer.len; j++) {
    args[na + j + 2] = ct_or_zero(a, outer.data[j]);
    types[na + j + 1] = args[na + j + 2]->type;
  }
  Type *rtypes = types + 1;
  Inst *rev = ir_emit(a->mod, a->b, IR_FOR, in->pos, ncar + 2, args, ncar, rtypes);
  IrBlock *rb = ir_block(ncar + 1, types, a->mod);
  grow(a);
  ir_add_region(rev, rb);
  IrBlock *saved_b = a->b;
  a->b = rb;
  /* i = hi - 1 - j; the tape index is i - lo. */
  Value *j = rb->args[0];
  Value *i = bin(a, BIN_SUB, bin(a, BIN_SUB, hi, cst(a, DT_I32, 1)), j);
  Value *idx = bin(a, BIN_SUB, i, lo);
  a->rm[body->args[0]->id] = i;
  for (int k = 0; k < nc; k++) {
    Value *tape = P(a, lt->tapes[k]);
    Inst *g = ir_emit(a->mod, rb, IR_TAPE_GET, in->pos, 2, (Value *[]){tape, idx}, 1, &body->args[k + 1]->type);
    grow(a);
    a->rm[body->args[k + 1]->id] = g->results[0];
  }
  /* Recompute the body (without its last yield), then sweep it backwards. */
  for (int q = 0; q + 1 < body->insts.len; q++)
    clone_inst(a, body->insts.data[q], true, body);
  Value **seeds = arena_alloc(sizeof(Value *) * (size_t)(nc + 1));
  for (int k = 0; k < nc; k++)
    seeds[k] = NULL;
  for (int jj = 0; jj < na; jj++)
    seeds[act[jj]] = rb->args[jj + 1];
  Value **acc = arena_alloc(sizeof(Value *) * (size_t)(outer.len + 1));
  Value **acc_out = arena_alloc(sizeof(Value *) * (size_t)(outer.len + 1));
  for (int q = 0; q < outer.len; q++)
    acc[q] = rb->args[na + q + 1];
  Value **arg_ct = arena_alloc(sizeof(Value *) * (size_t)(body->nargs + 1));
  backprop_region(a, body, seeds, &outer, acc, acc_out, arg_ct);
  Value **ys = arena_alloc(sizeof(Value *) * (size_t)(ncar + 1));
  for (int jj = 0; jj < na; jj++)
    ys[jj] = arg_ct[act[jj] + 1] ? arg_ct[act[jj] + 1] : ct_or_zero(a, body->args[act[jj] + 1]);
  for (int q = 0; q < outer.len; q++)
    ys[na + q] = acc_out[q];
  ir_emit(a->mod, rb, IR_YIELD, in->pos, ncar, ys, 0, NULL);
  a->b = saved_b;
  /* The outer values' accumulators replace their cotangents (they started
   * from them), then the initial carries' cotangents add to them: a value
   * can be both (var y = x; for ... { y = f(y) + x }). */
  for (int q = 0; q < outer.len; q++) {
    Value *o = outer.data[q];
    a->ct[o->id] = rev->results[na + q];
  }
  for (int jj = 0; jj < na; jj++)
    add_ct(a, in->args[act[jj] + 2], rev->results[jj]);
  free(outer.data);
}

/* Whether the transpose of `in` communicates: the psum of an implicit or
 * explicit pcast to varying from invariant, the unreduced psum of a pcast to
 * reduced, and any collective (which a varying condition already forbids in
 * the forward pass, [E_DIVERGE]). Casts between reduced, varying and
 * unreduced transpose to casts. */
static bool transpose_communicates(const Inst *in) {
  switch (in->op) {
  case IR_PCAST:
    return (in->fn == PCAST_VARYING && !(in->args[0]->type.R & inst_axes(in))) || in->fn == PCAST_REDUCED;
  case IR_ALL_REDUCE: case IR_ALL_GATHER: case IR_REDUCE_SCATTER: case IR_ALL_TO_ALL: case IR_PPERMUTE:
    return true;
  default:
    return false;
  }
}

/* The first active instruction under `blk` (nested regions included) whose
 * transpose communicates. */
static const Inst *diverging_transpose(AD *a, const IrBlock *blk) {
  for (int q = 0; q < blk->insts.len; q++) {
    const Inst *bi = blk->insts.data[q];
    if (transpose_communicates(bi) && bi->nargs && a->active[bi->args[0]->id])
      return bi;
    for (int r = 0; r < bi->nregions; r++) {
      const Inst *d = diverging_transpose(a, bi->regions[r]);
      if (d)
        return d;
    }
  }
  return NULL;
}

static void vjp_if(AD *a, Inst *in) {
  Vec outer = {0};
  for (int r = 0; r < 2; r++)
    outer_uses(a, in->regions[r], in->regions[r], &outer);
  int no = outer.len;
  Value *cond = P(a, in->args[0]);
  if (cond->type.V) {
    /* A varying condition: the branches' backward collectives (the psum of
     * a pcast) would not be reached by every device. */
    for (int r = 0; r < 2; r++) {
      const Inst *bi = diverging_transpose(a, in->regions[r]);
      if (bi) {
        const char *what = bi->op != IR_PCAST ? "collective"
                           : bi->fn == PCAST_REDUCED ? "pcast to reduced"
                           : "cast of an invariant value to varying (a pcast, or the implicit one where it meets "
                             "a varying operand)";
        fail(a, bi->pos,
             "cannot differentiate through this %s: it sits under a condition that varies across devices, so its "
             "transpose (an all-reduce) would not be reached by every device; cast the value before the branch "
             "(pcast(x, AXES, to=varying)) or select between values computed outside it with where()", what);
        free(outer.data);
        return;
      }
    }
  }
  Type *types = arena_alloc(sizeof(Type) * (size_t)(no + 1));
  Value **init = arena_alloc(sizeof(Value *) * (size_t)(no + 1));
  for (int q = 0; q < no; q++) {
    init[q] = ct_or_zero(a, outer.data[q]);
    types[q] = init[q]->type;
  }
  Inst *nif = ir_emit(a->mod, a->b, IR_IF, in->pos, 1, &cond, no, types);
  grow(a);
  Value **seeds = arena_alloc(sizeof(Value *) * (size_t)(in->nresults + 1));
  for (int k = 0; k < in->nresults; k++)
    seeds[k] = a->active[in->results[k]->id] ? a->ct[in->results[k]->id] : NULL;
  for (int r = 0; r < 2; r++) {
    const IrBlock *src = in->regions[r];
    IrBlock *nb = ir_block(0, NULL, a->mod);
    ir_add_region(nif, nb);
    IrBlock *saved_b = a->b;
    a->b = nb;
    for (int q = 0; q + 1 < src->insts.len; q++)
      clone_inst(a, src->insts.data[q], true, src);
    Value **acc_out = arena_alloc(sizeof(Value *) * (size_t)(no + 1));
    backprop_region(a, src, seeds, &outer, init, acc_out, NULL);
    ir_emit(a->mod, nb, IR_YIELD, in->pos, no, acc_out, 0, NULL);
    a->b = saved_b;
  }
  for (int q = 0; q < no; q++) {
    Value *o = outer.data[q];
    a->ct[o->id] = nif->results[q];
  }
  free(outer.data);
}

static void vjp(AD *a, Inst *in) {
  grow(a);
  a->pos = in->pos;
  if (in->op == IR_FOR) {
    if (loop_is_active(a, in))
      vjp_for(a, in);
    return;
  }
  if (in->op == IR_IF) {
    bool any = false;
    for (int k = 0; k < in->nresults; k++)
      any |= a->ct[in->results[k]->id] != NULL;
    if (any)
      vjp_if(a, in);
    return;
  }
  if (in->nresults != 1 || !a->active[in->results[0]->id])
    return;
  Value *g = a->ct[in->results[0]->id];
  if (!g)
    return;
  switch (in->op) {
  case IR_UNARY: vjp_unary(a, in, g); return;
  case IR_BINARY: vjp_binary(a, in, g); return;
  case IR_SELECT: {
    Value *c = P(a, in->args[0]);
    if (wants_ct(a, in->args[1]))
      add_ct_unbroadcast(a, in->args[1], gate(a, g, c));
    if (wants_ct(a, in->args[2])) {
      Value *nc = emit1(a, IR_UNARY, 1, &c, c->type);
      nc->def->fn = UN_NOT;
      add_ct_unbroadcast(a, in->args[2], gate(a, g, nc));
    }
    return;
  }
  case IR_CAST:
    if (is_float_value(in->args[0]))
      add_ct(a, in->args[0], g);
    return;
  case IR_BROADCAST:
    if (wants_ct(a, in->args[0]))
      add_ct_unbroadcast(a, in->args[0], g);
    return;
  case IR_FILL: {
    Inst *s = emit(a, IR_REDUCE, 1, &g, ty_ct(&in->args[0]->type));
    s->fn = RED_SUM;
    s->mask = (1u << g->type.rank) - 1;
    add_ct(a, in->args[0], s->results[0]);
    return;
  }
  case IR_DOT: vjp_dot(a, in, g); return;
  case IR_REDUCE: vjp_reduce(a, in, g); return;
  case IR_TRANSPOSE: vjp_transpose(a, in, g); return;
  case IR_RESHAPE: {
    Type t = ty_ct(&in->args[0]->type);
    add_ct(a, in->args[0], emit1(a, IR_RESHAPE, 1, &g, t));
    return;
  }
  case IR_RESHARD: add_ct(a, in->args[0], g); return;   /* add_ct reshards to ct(x) */
  case IR_PCAST: case IR_ALL_REDUCE: case IR_ALL_GATHER: case IR_REDUCE_SCATTER: case IR_ALL_TO_ALL:
  case IR_PPERMUTE: case IR_RETYPE: case IR_SLICE_BLOCK:
    vjp_manual(a, in, g);
    return;
  case IR_TAPE_GET: case IR_TAPE_NEW: case IR_TAPE_PUSH:
    return;
  default:
    fail(a, in->pos, "cannot differentiate %s (in %s)", ir_opname(in->op), a->fname);
    return;
  }
}

static void backprop(AD *a, const IrBlock *b, int n) {
  for (int i = n - 1; i >= 0; i--)
    vjp(a, b->insts.data[i]);
}

/* ---- building the gradient function --------------------------------------------------------- */

/* A second derivative through a loop would differentiate the tape that the
 * inner gradient keeps; that is not supported, and saying so beats a wrong
 * (zero) contribution. */
static bool check_nested_pushes(AD *a) {
  for (int i = 0; i < a->nested_pushes.len; i++) {
    NestedPush *np = a->nested_pushes.data[i];
    if (!a->active[np->push->args[2]->id])
      continue;
    fail(a, np->site,
         "cannot differentiate this gradient again (a second derivative): the function it differentiates has a "
         "loop whose carries depend on the differentiated values, and differentiating through the loop's tape is "
         "not supported yet; write the inner gradient by hand, or take the second derivative of a loop-free "
         "function");
    diag_note(np->loop, "the loop");
    a->nested_pushes.len = 0;
    return false;
  }
  a->nested_pushes.len = 0;
  return true;
}

typedef struct {
  Func *f;
  unsigned mask;
  int order[MAX_RANK * 2], norder;
  bool tuple, with_value;
  Func *g;
} GradKey;

static Func *build_grad(AD *a, GradKey *k) {
  Func *f = k->f;
  int np = f->body->nargs;
  Type *ptypes = f->sig_params ? f->sig_params : arena_alloc(sizeof(Type) * (size_t)(np + 1));
  if (!f->sig_params)
    for (int i = 0; i < np; i++)
      ptypes[i] = f->body->args[i]->type;
  Type res[64];
  int nr = 0;
  Type loss_t = f->sig_results ? f->sig_results[0] : f->results[0];
  if (k->with_value)
    res[nr++] = loss_t;
  for (int i = 0; i < k->norder; i++)
    res[nr++] = ty_ct(&ptypes[k->order[i]]);
  Str name = {0};
  str_printf(&name, "%s_%s", f->name, k->with_value ? "value_and_grad" : "grad");
  for (int i = 0; i < k->norder; i++)
    str_printf(&name, "_%d", k->order[i]);
  Func *g = ir_func(a->mod, arena_strdup(str_cstr(&name)), np, ptypes, nr, res);
  free(name.buf);
  g->generated = true;
  g->pos = f->pos;
  g->sig_params = ptypes;
  g->sig_results = g->results;
  a->fname = f->name;
  grow(a);
  for (int i = 0; i < np; i++)
    g->body->args[i]->name = f->body->args[i]->name;
  /* Forward: f's body, inlined, up to its return. */
  a->b = g->body;
  Inst fake = {0};
  fake.op = IR_CALL;
  fake.callee = f;
  fake.nargs = np;
  fake.args = g->body->args;
  Value *loss_slot = ir_value(a->mod, loss_t);
  grow(a);
  fake.nresults = 1;
  fake.results = &loss_slot;
  inline_call(a, &fake, false);
  Value *loss = P(a, loss_slot);
  /* Activity, tapes, seed, sweep. */
  for (int i = 0; i < k->norder; i++)
    a->active[g->body->args[k->order[i]]->id] = is_float_value(g->body->args[k->order[i]]);
  for (int guard = 0; guard < 64 && propagate_block(a, g->body); guard++)
    ;
  if (!check_nested_pushes(a))
    return g;
  instrument_block(a, g->body);
  int nfwd = g->body->insts.len;
  a->b = g->body;
  a->pos = f->pos;
  if (a->active[loss->id]) {
    Type seed_t = ty_ct(&loss->type);
    Value *one = cst(a, seed_t.dtype, 1);
    if (seed_t.U) {
      Type rep = seed_t;
      rep.U = 0;
      one = to_type(a, one, &rep);
    }
    a->ct[loss->id] = to_type(a, one, &seed_t);
    backprop(a, g->body, nfwd);
  }
  Value *outs[64];
  int no = 0;
  if (k->with_value)
    outs[no++] = loss;
  for (int i = 0; i < k->norder; i++) {
    Value *p = g->body->args[k->order[i]];
    Type want = ty_ct(&p->type);
    outs[no++] = a->ct[p->id] ? to_type(a, a->ct[p->id], &want) : zeros(a, &want);
  }
  ir_emit(a->mod, g->body, IR_RETURN, f->pos, no, outs, 0, NULL);
  return g;
}

static void collect_grads(Module *mod, IrBlock *b, Vec *out) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR_GRAD)
      vec_push(out, in);
    for (int r = 0; r < in->nregions; r++)
      collect_grads(mod, in->regions[r], out);
  }
}

/* Whether f's body, or a function it calls, still holds a grad. */
static bool reaches_grad(const IrBlock *b, int depth) {
  if (depth > 64)
    return true;   /* a call cycle: never ready */
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_GRAD || (in->op == IR_CALL && reaches_grad(in->callee->body, depth + 1)))
      return true;
    for (int r = 0; r < in->nregions; r++)
      if (reaches_grad(in->regions[r], depth))
        return true;
  }
  return false;
}

static GradKey *grad_key(AD *a, Vec *keys, Inst *in) {
  for (int j = 0; j < keys->len; j++) {
    GradKey *k = keys->data[j];
    bool same = k->f == in->callee && k->with_value == (in->ival != 0) && k->norder == in->dim &&
                k->tuple == (in->dim2 != 0);
    for (int q = 0; same && q < in->dim; q++)
      same = k->order[q] == in->perm[q];
    if (same)
      return k;
  }
  GradKey *key = arena_alloc(sizeof *key);
  key->f = in->callee;
  key->with_value = in->ival != 0;
  key->tuple = in->dim2 != 0;
  key->norder = in->dim;
  memcpy(key->order, in->perm, sizeof(int) * (size_t)in->dim);
  a->grad_pos = in->pos;
  key->g = build_grad(a, key);
  a->grad_pos = (Pos){0};
  vec_push(keys, key);
  return key;
}

/* Each grad becomes a call of its gradient function. A function that calls
 * grad is differentiated after that inner grad became a call, so a gradient
 * of a gradient (a second derivative) inlines the inner gradient function
 * and differentiates it like any other code. */
bool ad_module(Module *mod) {
  AD a;
  memset(&a, 0, sizeof a);
  a.mod = mod;
  a.m = &mod->mesh;
  Vec grads = {0}, keys = {0};
  int nfuncs = mod->funcs.len;
  for (int i = 0; i < nfuncs; i++)
    collect_grads(mod, ((Func *)mod->funcs.data[i])->body, &grads);
  for (int done = 0, progress = 1; done < grads.len && progress;) {
    progress = 0;
    for (int i = 0; i < grads.len; i++) {
      Inst *in = grads.data[i];
      if (in->op != IR_GRAD || reaches_grad(in->callee->body, 0))
        continue;
      in->callee = grad_key(&a, &keys, in)->g;
      in->op = IR_CALL;
      done++;
      progress = 1;
    }
  }
  /* What is left sits on a call cycle; build_grad reports it. */
  for (int i = 0; i < grads.len; i++) {
    Inst *in = grads.data[i];
    if (in->op == IR_GRAD) {
      in->callee = grad_key(&a, &keys, in)->g;
      in->op = IR_CALL;
    }
  }
  free(grads.data);
  free(keys.data);
  free(a.ct);
  free(a.rm);
  free(a.active);
  free(a.tapes.data);
  free(a.nested_pushes.data);
  return !a.failed;
}
