/* partition.c: the global-view IR becomes one SPMD program.
 *
 * Every value keeps its global sharded type; after this pass an
 * instruction computes this rank's block of its result from its operands'
 * blocks. Each operation has a rule of the same shape (XLA's partitioner):
 *
 *   1. choose the sharding each operand should have for a local computation;
 *   2. part_reshard the operands there (usually nothing, or a local slice);
 *   3. the local operation, whose result has a "natural" type;
 *   4. part_reshard the natural result to the type the program asked for
 *      (an all-reduce for a replicated sum, a reduce-scatter for a sharded
 *      one, nothing for an unreduced one...).
 *
 * Manual function bodies are already per-device along their manual axes:
 * their collectives pass through, and their explicit axes are partitioned
 * by the same rules. A collective those rules insert under an if or for
 * whose condition varies across devices is reported ([E_DIVERGE]): the
 * typechecker cannot see it.
 */
#include "shdc.h"

typedef struct {
  Module *mod;
  const Mesh *m;
  Value **map;         /* old value id -> new value */
  int cap;
  IrBlock *b;          /* the block being built */
  const Inst *diverge; /* innermost if/for of a manual body whose condition varies */
} Part;

static Value *get(Part *p, Value *old) {
  if (old->id >= p->cap || !p->map[old->id])
    diag_ice("partition: value %%%d has no SPMD value", old->id);
  return p->map[old->id];
}

static void put(Part *p, Value *old, Value *nv) {
  if (old->id >= p->cap)
    diag_ice("partition: value id out of range");
  p->map[old->id] = nv;
  if (!nv->name)
    nv->name = old->name;
}

static Inst *copy_inst(Part *p, Inst *in, Value **args) {
  Type rt[64];
  for (int i = 0; i < in->nresults; i++)
    rt[i] = in->results[i]->type;
  Inst *n = ir_emit(p->mod, p->b, in->op, in->pos, in->nargs, args, in->nresults, rt);
  ir_copy_attrs(n, in);
  for (int i = 0; i < in->nresults; i++)
    put(p, in->results[i], n->results[i]);
  return n;
}

static Value *reshard(Part *p, Pos pos, Value *v, const Type *to) { return part_reshard(p->mod, p->b, pos, v, to); }

static Value *local(Part *p, Inst *in, Opcode op, int nargs, Value **args, Type t) {
  Inst *n = ir_emit(p->mod, p->b, op, in->pos, nargs, args, 1, &t);
  n->fn = in->fn;
  n->dim = in->dim;
  n->mask = in->mask;
  n->dot = in->dot;
  memcpy(n->perm, in->perm, sizeof n->perm);
  n->str = in->str;
  return n->results[0];
}

/* ---- creation: zeros of the unreduced copies but one ------------------------- */

static void part_creation(Part *p, Inst *in, Value **args) {
  Type t = in->results[0]->type;
  bool zero_fill = in->op == IR_FILL && in->args[0]->def && in->args[0]->def->op == IR_CONST &&
                   in->args[0]->def->fval == 0;
  if (!t.U || zero_fill) {
    copy_inst(p, in, args);
    return;
  }
  Type rep = t;
  AxisSet u = t.U;
  rep.U = 0;
  Value *v = local(p, in, in->op, in->nargs, args, rep);
  Inst *z = ir_emit(p->mod, p->b, IR_ZERO_UNLESS_FIRST, in->pos, 1, &v, 1, &t);
  for (int a = 0; a < p->m->naxes; a++)
    if (u & (1u << a))
      z->axes[z->naxes++] = a;
  put(p, in->results[0], z->results[0]);
}

/* ---- elementwise ---------------------------------------------------------------- */

/* The sharding an operand needs so that the local op sees matching blocks:
 * the result's spec on the operand's full-size dims, none on broadcast ones,
 * and the operand's own U, R and V. */
static Type operand_target(const Type *op, const Type *res) {
  Type t = *op;
  int off = res->rank - op->rank;
  for (int d = 0; d < op->rank; d++) {
    if (op->shape[d] == res->shape[d + off])
      t.spec[d] = res->spec[d + off];
    else
      t.spec[d].n = 0;
  }
  /* An axis the operand is reduced over but the result shards (never in
   * valid programs; kept consistent for generated code). */
  t.R &= ~ty_dim_axes(&t);
  return t;
}

static void part_elementwise(Part *p, Inst *in, Value **args) {
  const Type *res = &in->results[0]->type;
  Value *na[3];
  for (int i = 0; i < in->nargs; i++) {
    Type want = operand_target(&args[i]->type, res);
    na[i] = reshard(p, in->pos, args[i], &want);
  }
  copy_inst(p, in, na);
}

/* ---- dot_general -------------------------------------------------------------------- */

/* How the operands of a dot are laid out for the local product. Each
 * contracting pair keeps a spec both sides share (partial sums, reduced
 * after); a spec on one side only is gathered (the FSDP all-gather) or,
 * with slice_other, the other side is sliced alike (partial sums instead).
 * Batch and free dims take the result's spec, or with keep_own their own,
 * unless an axis is taken already. */
typedef struct {
  Type lt, rt, natural;
} DotPlan;

static DimSpec untaken(DimSpec s, AxisSet *used) {
  if (ty_spec_axes(s) & *used)
    s.n = 0;
  *used |= ty_spec_axes(s);
  return s;
}

static DotPlan dot_plan(const Inst *in, const Type *L, const Type *R, const Type *T, bool slice_other, bool keep_own) {
  const DotDims *d = &in->dot;
  DotPlan pl;
  pl.lt = *L;
  pl.rt = *R;
  AxisSet used = 0;
  for (int i = 0; i < d->ncontract; i++) {
    DimSpec a = L->spec[d->lhs_contract[i]], b = R->spec[d->rhs_contract[i]];
    DimSpec s = {0};
    if (a.n && ty_spec_equal(a, b))
      s = a;
    else if (slice_other && (a.n == 0) != (b.n == 0))
      s = a.n ? a : b;
    s = untaken(s, &used);
    pl.lt.spec[d->lhs_contract[i]] = pl.rt.spec[d->rhs_contract[i]] = s;
  }
  AxisSet contract = used;
  bool is_l[MAX_RANK] = {0}, is_r[MAX_RANK] = {0};
  for (int i = 0; i < d->nbatch; i++)
    is_l[d->lhs_batch[i]] = is_r[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    is_l[d->lhs_contract[i]] = is_r[d->rhs_contract[i]] = true;
  pl.natural = *T;
  pl.natural.R = 0;
  pl.natural.U = contract;
  int pos = 0;
  for (int i = 0; i < d->nbatch; i++, pos++) {
    DimSpec own = L->spec[d->lhs_batch[i]];
    bool agree = ty_spec_equal(own, R->spec[d->rhs_batch[i]]);
    DimSpec s = untaken(keep_own && agree ? own : T->spec[pos], &used);
    pl.lt.spec[d->lhs_batch[i]] = pl.rt.spec[d->rhs_batch[i]] = pl.natural.spec[pos] = s;
  }
  for (int k = 0; k < L->rank; k++)
    if (!is_l[k])
      pl.lt.spec[k] = pl.natural.spec[pos] = untaken(keep_own ? L->spec[k] : T->spec[pos], &used), pos++;
  for (int k = 0; k < R->rank; k++)
    if (!is_r[k])
      pl.rt.spec[k] = pl.natural.spec[pos] = untaken(keep_own ? R->spec[k] : T->spec[pos], &used), pos++;
  pl.lt.R = L->R & ~ty_dim_axes(&pl.lt);
  pl.rt.R = R->R & ~ty_dim_axes(&pl.rt);
  return pl;
}

static int64_t plan_cost(const Mesh *m, const Type *L, const Type *R, const Type *T, const DotPlan *pl, int *ncoll) {
  int n1, n2, n3;
  int64_t b = part_reshard_cost(m, L, &pl->lt, &n1) + part_reshard_cost(m, R, &pl->rt, &n2) +
              part_reshard_cost(m, &pl->natural, T, &n3);
  *ncoll = n1 + n2 + n3;
  return b;
}

/* The four layouts, cheapest first by bytes sent per rank, then by number
 * of collectives; ties keep the first (result-driven, gathering one-sided
 * contractions), which is what JAX's rule describes. */
static void part_dot(Part *p, Inst *in, Value **args) {
  Type L = args[0]->type, R = args[1]->type, T = in->results[0]->type;
  DotPlan best = dot_plan(in, &L, &R, &T, false, false);
  int best_n;
  int64_t best_b = plan_cost(p->m, &L, &R, &T, &best, &best_n);
  for (int v = 1; v < 4; v++) {
    DotPlan pl = dot_plan(in, &L, &R, &T, v & 1, v & 2);
    int n;
    int64_t b = plan_cost(p->m, &L, &R, &T, &pl, &n);
    if (b < best_b || (b == best_b && n < best_n)) {
      best = pl;
      best_b = b;
      best_n = n;
    }
  }
  Value *ops[2] = {reshard(p, in->pos, args[0], &best.lt), reshard(p, in->pos, args[1], &best.rt)};
  Value *r = local(p, in, IR_DOT, 2, ops, best.natural);
  put(p, in->results[0], reshard(p, in->pos, r, &T));
}

/* ---- reductions ------------------------------------------------------------------------ */

static void part_reduce(Part *p, Inst *in, Value **args) {
  Type X = args[0]->type, T = in->results[0]->type;
  Type natural = X;
  natural.rank = 0;
  AxisSet red = 0;
  for (int d = 0; d < X.rank; d++) {
    if (in->mask & (1u << d)) {
      red |= ty_spec_axes(X.spec[d]);
      continue;
    }
    natural.shape[natural.rank] = X.shape[d];
    natural.spec[natural.rank++] = X.spec[d];
  }
  for (int d = natural.rank; d < MAX_RANK; d++)
    natural.spec[d].n = 0;
  Value *r;
  if (in->fn == RED_SUM) {
    natural.U |= red;
    natural.R &= ~red;
    r = local(p, in, IR_REDUCE, 1, args, natural);
  } else {
    /* max/min: no pending kind in the types, so combine at once. The axes
     * the result shards a dim over next are combined by a reduce-scatter
     * (max or min), which leaves each rank only its block; the others by
     * an all-reduce of that smaller block. */
    r = local(p, in, IR_REDUCE, 1, args, natural);
    for (int d = 0; d < natural.rank && red; d++) {
      DimSpec ns = natural.spec[d], ts = T.spec[d];
      bool prefix = ts.n > ns.n;
      for (int i = 0; prefix && i < ns.n; i++)
        prefix = ns.axes[i] == ts.axes[i];
      AxisSet extra = 0;
      for (int i = ns.n; prefix && i < ts.n; i++)
        extra |= 1u << ts.axes[i];
      if (!prefix || (extra & ~red))
        continue;
      Type next = natural;
      next.spec[d] = ts;
      Inst *rs = ir_emit(p->mod, p->b, IR_REDUCE_SCATTER, in->pos, 1, &r, 1, &next);
      rs->fn = in->fn;
      rs->dim = d;
      for (int i = ns.n; i < ts.n; i++)
        rs->axes[rs->naxes++] = ts.axes[i];
      r = rs->results[0];
      natural = next;
      red &= ~extra;
    }
    if (red) {
      Inst *ar = ir_emit(p->mod, p->b, IR_ALL_REDUCE, in->pos, 1, &r, 1, &natural);
      ar->fn = in->fn;
      for (int a = 0; a < p->m->naxes; a++)
        if (red & (1u << a))
          ar->axes[ar->naxes++] = a;
      r = ar->results[0];
    }
  }
  put(p, in->results[0], reshard(p, in->pos, r, &T));
}

/* ---- reshape: local when every rank's block stays in place --------------------------- */

/* A row-major box (offset, length per dim) in a global shape, reduced to a
 * canonical list of (global, local, offset) runs, so that two boxes hold the
 * same elements in the same order iff their canonical lists are equal. */
typedef struct {
  int n;
  int64_t size[MAX_RANK], len[MAX_RANK], off[MAX_RANK];
} Box;

static Box canonical_box(int rank, const int64_t *shape, const int64_t *len, const int64_t *off) {
  Box b = {0};
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 1)
      continue;
    if (b.n > 0) {
      int k = b.n - 1;
      bool full = len[d] == shape[d];
      bool outer_one = b.len[k] == 1;
      if (full || outer_one) {
        b.off[k] = b.off[k] * shape[d] + (full ? 0 : off[d]);
        b.len[k] = full ? b.len[k] * shape[d] : len[d];
        b.size[k] *= shape[d];
        continue;
      }
    }
    b.size[b.n] = shape[d];
    b.len[b.n] = len[d];
    b.off[b.n] = off[d];
    b.n++;
  }
  return b;
}

static bool box_equal(const Box *a, const Box *b) {
  if (a->n != b->n)
    return false;
  for (int i = 0; i < a->n; i++)
    if (a->size[i] != b->size[i] || a->len[i] != b->len[i] || a->off[i] != b->off[i])
      return false;
  return true;
}

static bool reshape_is_local(const Mesh *m, const Type *from, const Type *to) {
  int n = 1;
  for (int a = 0; a < m->naxes; a++)
    n *= m->sizes[a];
  int64_t lf[MAX_RANK], lt[MAX_RANK], of[MAX_RANK], ot[MAX_RANK];
  ty_local_shape(m, from, lf);
  ty_local_shape(m, to, lt);
  for (int r = 0; r < n; r++) {
    part_block_offset(m, from, r, of);
    part_block_offset(m, to, r, ot);
    Box a = canonical_box(from->rank, from->shape, lf, of), b = canonical_box(to->rank, to->shape, lt, ot);
    if (!box_equal(&a, &b))
      return false;
  }
  return true;
}

static void part_reshape(Part *p, Inst *in, Value **args) {
  Type X = args[0]->type, T = in->results[0]->type;
  if (reshape_is_local(p->m, &X, &T)) {
    copy_inst(p, in, args);
    return;
  }
  RuleCtx rc = {p->m, 0, {0}, "reshape"};
  Type natural;
  if (rule_reshape(&rc, &X, T.rank, T.shape, NULL, &natural) && (natural.V = X.V, true) &&
      reshape_is_local(p->m, &X, &natural)) {
    Value *r = local(p, in, IR_RESHAPE, 1, args, natural);
    put(p, in->results[0], reshard(p, in->pos, r, &T));
    return;
  }
  /* Gather the sharded dims, reshape locally, slice to the target. */
  Type xr = X, tr = T;
  for (int d = 0; d < X.rank; d++)
    xr.spec[d].n = 0;
  for (int d = 0; d < T.rank; d++)
    tr.spec[d].n = 0;
  tr.U = X.U;
  tr.R = X.R;
  tr.V = X.V;
  Value *g = reshard(p, in->pos, args[0], &xr);
  Value *r = local(p, in, IR_RESHAPE, 1, &g, tr);
  put(p, in->results[0], reshard(p, in->pos, r, &T));
}

/* ---- transpose, broadcast ---------------------------------------------------------------- */

static void part_transpose(Part *p, Inst *in, Value **args) {
  Type X = args[0]->type, T = in->results[0]->type;
  Type natural = X;
  for (int d = 0; d < X.rank; d++) {
    natural.shape[d] = X.shape[in->perm[d]];
    natural.spec[d] = X.spec[in->perm[d]];
  }
  Value *r = local(p, in, IR_TRANSPOSE, 1, args, natural);
  put(p, in->results[0], reshard(p, in->pos, r, &T));
}

static void part_broadcast(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type want = operand_target(&args[0]->type, T);
  want.U = T->U;
  want.R = args[0]->type.R;
  Value *x = reshard(p, in->pos, args[0], &want);
  Type natural = *T;
  natural.R = x->type.R & ~ty_dim_axes(T);
  Value *r = local(p, in, IR_BROADCAST, 1, &x, natural);
  put(p, in->results[0], reshard(p, in->pos, r, T));
}

/* ---- io ----------------------------------------------------------------------------------- */

static Type replicated(const Type *t) {
  Type r = *t;
  for (int d = 0; d < r.rank; d++)
    r.spec[d].n = 0;
  r.U = 0;
  return r;
}

static void part_print(Part *p, Inst *in, Value **args) {
  Value *na[64];
  for (int i = 0; i < in->nargs; i++) {
    Type want = replicated(&args[i]->type);
    na[i] = reshard(p, in->pos, args[i], &want);
  }
  copy_inst(p, in, na);
}

static void part_save(Part *p, Inst *in, Value **args) {
  Type want = args[0]->type;
  want.U = 0;
  Value *x = reshard(p, in->pos, args[0], &want);
  copy_inst(p, in, &x);
}

/* ---- divergence ------------------------------------------------------------------------------ */

static bool is_collective(Opcode op) {
  switch (op) {
  case IR_ALL_REDUCE: case IR_ALL_GATHER: case IR_REDUCE_SCATTER: case IR_ALL_TO_ALL: case IR_PPERMUTE:
  case IR_PERMUTE:
    return true;
  default:
    return false;
  }
}

/* The varying condition of an if, or bound of a for, in a manual body. */
static AxisSet varying_condition(const Inst *in) {
  if (in->op == IR_IF)
    return in->args[0]->type.V;
  if (in->op == IR_FOR)
    return in->args[0]->type.V | in->args[1]->type.V;
  return 0;
}

/* The typechecker rejects written collectives under a varying condition;
 * the ones the global rules insert for the explicit axes of a partial
 * manual body are known only here. Reports the first such collective that
 * partitioning `in` produced (instructions from index `from` of the block). */
static void check_implicit_diverge(Part *p, const Inst *in, int from) {
  if (!p->diverge || is_collective(in->op))
    return;
  for (int i = from; i < p->b->insts.len; i++) {
    const Inst *n = p->b->insts.data[i];
    if (!is_collective(n->op))
      continue;
    Str ax = {0};
    for (int k = 0; k < n->naxes; k++)
      str_printf(&ax, "%s%s", k ? "," : "", p->m->names[n->axes[k]]);
    if (!n->naxes)
      str_printf(&ax, "the whole mesh");
    diag_error(in->pos, "E_DIVERGE",
               "this %s needs %s %s over %s (an explicit axis of this partial manual function), and it is reached "
               "under a %s that varies across devices (over %s); every device must reach every collective: "
               "compute it before the %s, or make the condition invariant",
               ir_opname(in->op), strchr("aeiou", ir_opname(n->op)[0]) ? "an" : "a", ir_opname(n->op), str_cstr(&ax), p->diverge->op == IR_IF ? "condition" : "loop bound",
               ty_axes_str(p->m, varying_condition(p->diverge)), p->diverge->op == IR_IF ? "branch" : "loop");
    diag_note(p->diverge->pos, "the varying %s is here", p->diverge->op == IR_IF ? "condition" : "loop bound");
    free(ax.buf);
    return;
  }
}

/* ---- blocks --------------------------------------------------------------------------------- */

static void part_block(Part *p, IrBlock *old, IrBlock *nb);

static void part_region_inst(Part *p, Inst *in, Value **args) {
  const Inst *saved = p->diverge;
  if (varying_condition(in))
    p->diverge = in;
  Inst *n = copy_inst(p, in, args);
  for (int r = 0; r < in->nregions; r++) {
    IrBlock *ob = in->regions[r];
    Type types[64];
    for (int i = 0; i < ob->nargs; i++)
      types[i] = ob->args[i]->type;
    IrBlock *nb = ir_block(ob->nargs, types, p->mod);
    ir_add_region(n, nb);
    for (int i = 0; i < ob->nargs; i++)
      put(p, ob->args[i], nb->args[i]);
    part_block(p, ob, nb);
  }
  p->diverge = saved;
}

static void part_inst(Part *p, Inst *in) {
  Value *args[64];
  for (int i = 0; i < in->nargs; i++)
    args[i] = get(p, in->args[i]);
  switch (in->op) {
  case IR_FILL: case IR_IOTA: case IR_RANDOM: case IR_LOAD:
    part_creation(p, in, args);
    return;
  case IR_BINARY: case IR_SELECT:
    part_elementwise(p, in, args);
    return;
  case IR_UNARY: case IR_CAST: {
    Type want = args[0]->type;
    const Type *res = &in->results[0]->type;
    for (int d = 0; d < want.rank; d++)
      want.spec[d] = res->spec[d];
    want.U = res->U;
    Value *x = reshard(p, in->pos, args[0], &want);
    copy_inst(p, in, &x);
    return;
  }
  case IR_BROADCAST: part_broadcast(p, in, args); return;
  case IR_DOT: part_dot(p, in, args); return;
  case IR_REDUCE: part_reduce(p, in, args); return;
  case IR_TRANSPOSE: part_transpose(p, in, args); return;
  case IR_RESHAPE: part_reshape(p, in, args); return;
  case IR_RESHARD: put(p, in->results[0], reshard(p, in->pos, args[0], &in->results[0]->type)); return;
  case IR_PRINT: part_print(p, in, args); return;
  case IR_SAVE: part_save(p, in, args); return;
  case IR_FOR: case IR_IF:
    part_region_inst(p, in, args);
    return;
  case IR_GRAD:
    diag_ice("grad survived autodiff");
  default:
    copy_inst(p, in, args);
    return;
  }
}

static void part_block(Part *p, IrBlock *old, IrBlock *nb) {
  IrBlock *saved = p->b;
  p->b = nb;
  for (int i = 0; i < old->insts.len; i++) {
    int from = nb->insts.len;
    part_inst(p, old->insts.data[i]);
    check_implicit_diverge(p, old->insts.data[i], from);
  }
  p->b = saved;
}

bool part_module(Module *mod) {
  Part p;
  memset(&p, 0, sizeof p);
  p.mod = mod;
  p.m = &mod->mesh;
  p.cap = mod->next_value + 1;
  p.map = calloc((size_t)p.cap, sizeof(Value *));
  int errors = diag_error_count();
  for (int i = 0; i < mod->funcs.len; i++) {
    Func *f = mod->funcs.data[i];
    IrBlock *old = f->body;
    Type types[64];
    for (int k = 0; k < old->nargs; k++)
      types[k] = old->args[k]->type;
    IrBlock *nb = ir_block(old->nargs, types, mod);
    for (int k = 0; k < old->nargs; k++) {
      nb->args[k]->name = old->args[k]->name;
      put(&p, old->args[k], nb->args[k]);
    }
    part_block(&p, old, nb);
    f->body = nb;
  }
  free(p.map);
  mod->spmd = true;
  return diag_error_count() == errors;
}
