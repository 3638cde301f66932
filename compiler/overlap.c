/* overlap.c: the sums over mesh axes, in buckets, started where their
 * operands are final and waited where their results are first used, so
 * that the communication runs while the program computes (XLA's
 * latency-hiding scheduler and collective pipeliner, PyTorch DDP's
 * buckets). A pass of the driver's list, after opt_module and before
 * sched_module; its operations are op_async.c's, the runtime's thread is
 * runtime/async.c.
 *
 * Two forms, both exact (the same additions in the same order as the
 * program without the pass: the results are bitwise the same where the
 * group's algorithm adds in the same order):
 *
 *  - A loop's accumulator (a training step's backward pass over stacked
 *    layers): in the body, a carry c updated only by
 *        c' = dynamic_update_slice(c, [dynamic_slice(c, s) +] all_reduce(x), s)
 *    and yielded, with the reduced value used nowhere else. The update is
 *    deferred: the body sends x in a bucket (all_reduce_start, one per
 *    bucket of the iteration's members) and yields c unchanged; after the
 *    loop, where its result is first used, all_reduce_wait adds (or sets)
 *    every iteration's windows in the order they were started. Iteration
 *    i's bucket travels during iterations i+1...: layer by layer, as DDP's
 *    buckets do.
 *  - Straight-line code: all_reduce.sum of arrays in one block, over the
 *    same axes and dtype, are gathered into a bucket until its bytes reach
 *    the cap or a member's result is needed; the bucket starts after its
 *    last member and is waited before the first use of any member. A
 *    bucket with less than about 4 MFLOP of work between its start and its
 *    wait stays a plain all_reduce (there is nothing to hide it behind),
 *    and so does one under 64 KiB (its cost is latency, not bandwidth).
 *
 * The bucket cap (build's --bucket=BYTES; 0 turns the pass off) bounds
 * the bytes a bucket waits for before it starts. A window member's bucket
 * never spans two loops or two iterations.
 *
 * Invariants: every start has its wait in the same function, after it on
 * every path (the same block, or the loop's parent block after the loop);
 * what the pass removes is exactly the pattern's instructions, each used
 * once and only inside the pattern.
 */
#include "shdc.h"

typedef struct {
  Module *mod;
  int64_t cap;
  int *uses;           /* by value id, over the function (counted before each change) */
  int nuses;
  Func *f;
} Ov;

static int g_site;     /* sites are numbered over the module */

static void count_uses(Ov *o) {
  free(o->uses);
  o->nuses = o->mod->next_value + 1;
  o->uses = mem_calloc((size_t)o->nuses, sizeof(int));
  ir_count_uses(o->f->body, o->uses);
}

static int uses_of(const Ov *o, const Value *v) { return v->id < o->nuses ? o->uses[v->id] : 0; }

static int64_t local_bytes(const Ov *o, const Type *t) {
  return ty_local_count(&o->mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
}

static int index_of(const IrBlock *b, const Inst *in) {
  for (int i = 0; i < b->insts.len; i++)
    if (b->insts.data[i] == in)
      return i;
  return -1;
}

static void insert_at(IrBlock *b, int at, Inst *in) {
  vec_push(&b->insts, in);
  for (int i = b->insts.len - 1; i > at; i--)
    b->insts.data[i] = b->insts.data[i - 1];
  b->insts.data[at] = in;
  in->parent = b;
}

static void remove_inst(IrBlock *b, const Inst *in) {
  int at = index_of(b, in);
  if (at < 0)
    diag_ice("overlap: an instruction outside its block");
  for (int i = at; i + 1 < b->insts.len; i++)
    b->insts.data[i] = b->insts.data[i + 1];
  b->insts.len--;
}

/* The one instruction of b (not nested) that uses v, or NULL. */
static Inst *sole_user(const Ov *o, const IrBlock *b, const Value *v) {
  if (uses_of(o, v) != 1)
    return NULL;
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      if (in->args[k] == v)
        return in;
  }
  return NULL;
}

static bool uses_value(const Inst *in, const Value *const *vs, int n) {
  for (int k = 0; k < in->nargs; k++)
    for (int j = 0; j < n; j++)
      if (in->args[k] == vs[j])
        return true;
  for (int r = 0; r < in->nregions; r++)
    for (int i = 0; i < in->regions[r]->insts.len; i++)
      if (uses_value(in->regions[r]->insts.data[i], vs, n))
        return true;
  return false;
}

static void replace_in_block(IrBlock *b, const Value *from, Value *to, const Inst *skip) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in != skip)
      for (int k = 0; k < in->nargs; k++)
        if (in->args[k] == from)
          in->args[k] = to;
    for (int r = 0; r < in->nregions; r++)
      replace_in_block(in->regions[r], from, to, skip);
  }
}

static bool has_flag(const Inst *in, unsigned f) {
  const OpDef *d = op_def(in->op);
  return d && (d->flags & f);
}

/* Two i32 values computed alike (an index the partitioner computed twice). */
static bool same_value(const Value *a, const Value *b, int depth) {
  if (a == b)
    return true;
  if (!a->def || !b->def || depth > 8)
    return false;
  const Inst *x = a->def, *y = b->def;
  if (x->op != y->op || x->nargs != y->nargs || x->nresults != 1 || y->nresults != 1 || x->nregions || y->nregions)
    return false;
  if (x->op == IR_CALL || has_flag(x, OPF_EFFECT | OPF_COLLECTIVE))
    return false;
  if (x->fn != y->fn || x->ival != y->ival || x->fval != y->fval || x->dim != y->dim || x->niv || y->niv ||
      !ty_equal(&a->type, &b->type))
    return false;
  for (int k = 0; k < x->nargs; k++)
    if (!same_value(x->args[k], y->args[k], depth + 1))
      return false;
  return true;
}

/* ---- a loop's accumulators --------------------------------------------------------------------- */

typedef struct {
  Inst *ar, *view[4], *slice, *add, *update;
  int carry;           /* the body's argument index of the carry */
  int kind;            /* 1 set, 2 add (SHD_ASYNC_) */
} Acc;

/* Whether the all-reduce ar of body y is the reduced update of one of y's
 * carries, and how. */
static bool match_acc(const Ov *o, IrBlock *y, Inst *ar, Acc *m) {
  memset(m, 0, sizeof *m);
  if (ar->op != IR_ALL_REDUCE || ar->fn != RED_SUM || !ar->results[0]->type.rank)
    return false;
  m->ar = ar;
  Value *r = ar->results[0];
  Inst *u = sole_user(o, y, r);
  for (int v = 0; u && (u->op == IR_RESHAPE || u->op == IR_RETYPE) && v < 4; v++) {   /* views: the same bytes */
    m->view[v] = u;
    r = u->results[0];
    u = sole_user(o, y, r);
  }
  if (!u)
    return false;
  Value *c = NULL;
  if (u->op == IR_BINARY && u->fn == BIN_ADD && u->nargs == 2) {
    Value *s = u->args[0] == r ? u->args[1] : u->args[0];
    Inst *sl = s->def;
    if (!sl || sl->parent != y || !has_flag(sl, OPF_WINDOW_READ) || uses_of(o, s) != 1 ||
        !ty_equal(&s->type, &r->type) || !ty_equal(&u->results[0]->type, &r->type))
      return false;
    m->slice = sl;
    m->add = u;
    c = sl->args[0];
    u = sole_user(o, y, u->results[0]);
    if (!u)
      return false;
  }
  if (!has_flag(u, OPF_WINDOW_WRITE) || u->args[1] != (m->add ? m->add->results[0] : r))
    return false;
  m->update = u;
  if (!c)
    c = u->args[0];
  if (u->args[0] != c || !ir_is_carry(c, y) || uses_of(o, c) != (m->add ? 2 : 1))
    return false;
  int rank = c->type.rank;
  if (m->slice)
    for (int d = 0; d < rank; d++)
      if (!same_value(m->slice->args[1 + d], u->args[2 + d], 0))
        return false;
  Inst *yield = y->insts.data[y->insts.len - 1];
  Value *nc = u->results[0];
  if (yield->op != IR_YIELD || uses_of(o, nc) != 1 || yield->args[c->index - 1] != nc)
    return false;
  m->carry = c->index;
  m->kind = m->add ? 2 : 1;
  return ar->args[0]->type.dtype == c->type.dtype;
}

static bool same_group(const Inst *a, const Inst *b) {
  return a->naxes == b->naxes && memcmp(a->axes, b->axes, sizeof(int) * (size_t)a->naxes) == 0 &&
         a->args[0]->type.dtype == b->args[0]->type.dtype;
}

/* The position after the last of in's operands defined in b. */
static int after_operands(const IrBlock *b, const Inst *in) {
  int at = 0;
  for (int k = 0; k < in->nargs; k++) {
    const Inst *d = in->args[k]->def;
    if (d && d->parent == b) {
      int i = index_of(b, d);
      if (i + 1 > at)
        at = i + 1;
    }
  }
  return at;
}

/* The start of one bucket of accumulator members m[0..n) of the loop F. */
static void start_accs(Ov *o, Inst *F, Acc *m, int n) {
  IrBlock *y = F->regions[0], *b = F->parent;
  int ncarry = 0, *carries = mem_calloc((size_t)n, sizeof(int)), nidx = 0;
  for (int j = 0; j < n; j++)
    nidx += m[j].update->results[0]->type.rank;
  Value **args = mem_calloc((size_t)(2 * n + nidx), sizeof(Value *));
  int64_t *iv = arena_alloc(sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  memset(iv, 0, sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  int at = n;
  for (int j = 0; j < n; j++) {
    Inst *u = m[j].update;
    const Type *rt = &u->results[0]->type, *ut = &u->args[1]->type;
    int t = 0;
    while (t < ncarry && carries[t] != m[j].carry)
      t++;
    if (t == ncarry)
      carries[ncarry++] = m[j].carry;
    int64_t *w = iv + (size_t)j * ASYNC_MEMBER_W;
    w[0] = m[j].kind;
    w[1] = t;
    w[2] = rt->rank;
    int64_t local[MAX_RANK];
    ty_local_shape(&o->mod->mesh, ut, local);
    for (int d = 0; d < rt->rank; d++) {
      if (ut->shape[d] == rt->shape[d])
        w[3] |= 1 << d;
      w[4 + d] = u->iv[d];
      w[4 + MAX_RANK + d] = local[d];
      args[at++] = u->args[2 + d];
    }
    args[j] = m[j].ar->args[0];
  }
  for (int j = 0; j < n; j++)
    args[at++] = m[j].update->args[0];
  Inst *st = ir_emit(o->mod, NULL, IR_ALL_REDUCE_START, m[n - 1].ar->pos, at, args, 0, NULL);
  memcpy(st->axes, m[0].ar->axes, sizeof st->axes);
  st->naxes = m[0].ar->naxes;
  st->fn = RED_SUM;
  st->ival = g_site++;
  st->iv = iv;
  st->niv = n * ASYNC_MEMBER_W;
  /* the pattern goes; the carries pass through */
  Inst *yield = y->insts.data[y->insts.len - 1];
  for (int j = 0; j < n; j++) {
    Value *c = m[j].update->args[0];
    yield->args[c->index - 1] = c;
    Inst *gone[] = {m[j].update, m[j].add, m[j].slice, m[j].view[3], m[j].view[2], m[j].view[1], m[j].view[0], m[j].ar};
    for (int g = 0; g < 8; g++)
      if (gone[g])
        remove_inst(y, gone[g]);
  }
  insert_at(y, after_operands(y, st), st);
  /* the wait, before the first use of the loop's results */
  Value **res = mem_calloc((size_t)ncarry, sizeof(Value *));
  Type *types = mem_calloc((size_t)ncarry, sizeof(Type));
  for (int t = 0; t < ncarry; t++) {
    res[t] = F->results[carries[t] - 1];
    types[t] = res[t]->type;
  }
  int fi = index_of(b, F), wi = fi + 1;
  while (wi < b->insts.len - 1 && !uses_value(b->insts.data[wi], (const Value *const *)res, ncarry))
    wi++;
  Inst *wt = ir_emit(o->mod, NULL, IR_ALL_REDUCE_WAIT, F->pos, ncarry, res, ncarry, types);
  wt->ival = st->ival;
  wt->iv = arena_alloc(sizeof(int64_t));
  wt->iv[0] = 0;
  wt->niv = 1;
  insert_at(b, wi, wt);
  for (int t = 0; t < ncarry; t++) {
    wt->results[t]->name = res[t]->name;
    replace_in_block(o->f->body, res[t], wt->results[t], wt);
  }
  free(carries);
  free(args);
  free(res);
  free(types);
}

static void overlap_loop(Ov *o, Inst *F) {
  IrBlock *y = F->regions[0];
  count_uses(o);
  Acc *acc = mem_calloc((size_t)y->insts.len + 1, sizeof *acc);
  int n = 0;
  for (int i = 0; i < y->insts.len; i++)
    if (match_acc(o, y, y->insts.data[i], &acc[n]))
      n++;
  /* buckets: members of one group, in order, up to the cap */
  bool *done = mem_calloc((size_t)n + 1, sizeof(bool));
  Acc *bucket = mem_calloc((size_t)n + 1, sizeof *bucket);
  for (int i = 0; i < n; i++) {
    if (done[i])
      continue;
    int nb = 0;
    int64_t bytes = 0;
    for (int j = i; j < n; j++) {
      if (done[j] || !same_group(acc[i].ar, acc[j].ar))
        continue;
      int64_t add = local_bytes(o, &acc[j].ar->args[0]->type);
      if (nb && bytes + add > o->cap)
        break;
      bucket[nb++] = acc[j];
      bytes += add;
      done[j] = true;
    }
    start_accs(o, F, bucket, nb);
  }
  free(acc);
  free(done);
  free(bucket);
}

/* ---- straight-line buckets ----------------------------------------------------------------------- */

/* The work of an instruction, for whether a bucket is worth a thread's
 * hand-off (about 20 us): its FLOPs and element operations (plan.c's
 * measure); a loop, a branch or a call counts as enough. */
enum { OVERLAP_MIN_WORK = 4000000, OVERLAP_MIN_BYTES = 64 << 10 };

static double work_of(const Ov *o, const Inst *in) {
  if (in->nregions || in->op == IR_CALL)
    return OVERLAP_MIN_WORK;
  double dot = 0, ew = 0;
  op_work(o->mod, in, &dot, &ew);
  return dot + ew;
}

/* Work worth not waiting behind: a loop, a branch, a call, or as much as
 * makes a bucket worth starting. */
static bool is_heavy(const Ov *o, const Inst *in) { return work_of(o, in) >= OVERLAP_MIN_WORK; }

static void close_bucket(Ov *o, IrBlock *b, Inst **mem, int n) {
  if (!n)
    return;
  Value **res = mem_calloc((size_t)n, sizeof(Value *));
  for (int j = 0; j < n; j++)
    res[j] = mem[j]->results[0];
  int last = index_of(b, mem[n - 1]);
  int wi = last + 1;
  double work = 0;
  while (wi < b->insts.len - 1 && !uses_value(b->insts.data[wi], (const Value *const *)res, n)) {
    work += work_of(o, b->insts.data[wi]);
    wi++;
  }
  int64_t bytes = 0;
  for (int j = 0; j < n; j++)
    bytes += local_bytes(o, &mem[j]->args[0]->type);
  if (work < OVERLAP_MIN_WORK || bytes < OVERLAP_MIN_BYTES) {
    free(res);
    return;
  }
  Value **args = mem_calloc((size_t)n, sizeof(Value *));
  Type *types = mem_calloc((size_t)n, sizeof(Type));
  int64_t *iv = arena_alloc(sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  memset(iv, 0, sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  for (int j = 0; j < n; j++) {
    args[j] = mem[j]->args[0];
    types[j] = mem[j]->results[0]->type;
  }
  Inst *st = ir_emit(o->mod, NULL, IR_ALL_REDUCE_START, mem[n - 1]->pos, n, args, n, types);
  memcpy(st->axes, mem[0]->axes, sizeof st->axes);
  st->naxes = mem[0]->naxes;
  st->fn = RED_SUM;
  st->ival = g_site++;
  st->iv = iv;
  st->niv = n * ASYNC_MEMBER_W;
  Inst *wt = ir_emit(o->mod, NULL, IR_ALL_REDUCE_WAIT, b->insts.data[wi] ? ((Inst *)b->insts.data[wi])->pos : st->pos,
                     n, st->results, n, types);
  wt->ival = st->ival;
  wt->iv = arena_alloc(sizeof(int64_t));
  wt->iv[0] = n;
  wt->niv = 1;
  for (int j = 0; j < n; j++) {
    st->results[j]->name = mem[j]->results[0]->name;
    wt->results[j]->name = mem[j]->results[0]->name;
    replace_in_block(o->f->body, res[j], wt->results[j], NULL);
  }
  insert_at(b, wi, wt);
  insert_at(b, last + 1, st);
  for (int j = 0; j < n; j++)
    remove_inst(b, mem[j]);
  free(res);
  free(args);
  free(types);
}

/* Buckets of b's remaining sums, by group. */
static void overlap_straight(Ov *o, IrBlock *b) {
  count_uses(o);
  Vec cand = {0};
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR_ALL_REDUCE && in->fn == RED_SUM && in->results[0]->type.rank && uses_of(o, in->results[0]) > 0)
      vec_push(&cand, in);
  }
  bool *taken = mem_calloc((size_t)cand.len + 1, sizeof(bool));
  Inst **mem = mem_calloc((size_t)cand.len + 1, sizeof(Inst *));
  for (int i = 0; i < cand.len; i++) {
    if (taken[i])
      continue;
    Inst *first = cand.data[i];
    int n = 0;
    int64_t bytes = 0;
    Value **res = mem_calloc((size_t)cand.len + 1, sizeof(Value *));
    for (int j = i; j < cand.len; j++) {
      Inst *in = cand.data[j];
      if (taken[j] || !same_group(first, in))
        continue;
      /* a member's result used before in, or work between them (the
       * bucket would wait for in when it could travel): it closes there */
      bool used = false;
      if (n)
        for (int k = index_of(b, mem[n - 1]) + 1, to = index_of(b, in); k < to && !used; k++)
          used = uses_value(b->insts.data[k], (const Value *const *)res, n) || is_heavy(o, b->insts.data[k]);
      int64_t add = local_bytes(o, &in->args[0]->type);
      if (used || (n && bytes + add > o->cap))
        break;
      res[n] = in->results[0];
      mem[n++] = in;
      bytes += add;
      taken[j] = true;
    }
    free(res);
    close_bucket(o, b, mem, n);
    count_uses(o);
  }
  free(taken);
  free(mem);
  free(cand.data);
}

static void overlap_block(Ov *o, IrBlock *b) {
  Vec fors = {0};
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR_FOR)
      vec_push(&fors, in);
  }
  for (int i = 0; i < fors.len; i++)
    overlap_loop(o, fors.data[i]);
  free(fors.data);
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      overlap_block(o, in->regions[r]);
  }
  overlap_straight(o, b);
}

void overlap_module(Module *mod, int64_t bucket_bytes) {
  g_site = 0;
  if (bucket_bytes <= 0)
    return;
  Ov o = {.mod = mod, .cap = bucket_bytes};
  for (int i = 0; i < mod->funcs.len; i++) {
    o.f = mod->funcs.data[i];
    overlap_block(&o, o.f->body);
  }
  free(o.uses);
}

/* ---- what a bucket hides behind (explain, plan) -------------------------------------------------- */

static void add_work(const Module *mod, const Inst *in, double *dot, double *ew) {
  if (has_flag(in, OPF_COLLECTIVE))
    return;
  op_work(mod, in, dot, ew);
  for (int r = 0; r < in->nregions; r++)
    for (int i = 0; i < in->regions[r]->insts.len; i++)
      add_work(mod, in->regions[r]->insts.data[i], dot, ew);
}

static bool is_wait_of(const Inst *in, const Inst *start) {
  return in->op == IR_ALL_REDUCE_WAIT && in->ival == start->ival;
}

const Inst *overlap_work(const Module *mod, const Inst *start, double *dot, double *ew) {
  *dot = *ew = 0;
  const IrBlock *b = start->parent;
  int at = index_of(b, start);
  if (at < 0)
    return NULL;
  for (int i = at + 1; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (is_wait_of(in, start))
      return in;
    add_work(mod, in, dot, ew);
  }
  /* a loop's bucket: the next iteration's work, then the loop's block up to the wait */
  const Inst *loop = b->owner;
  if (!loop || loop->op != IR_FOR)
    return NULL;
  for (int i = 0; i < b->insts.len; i++)
    add_work(mod, b->insts.data[i], dot, ew);
  const IrBlock *pb = loop->parent;
  for (int i = index_of(pb, loop) + 1; i < pb->insts.len; i++) {
    const Inst *in = pb->insts.data[i];
    if (is_wait_of(in, start))
      return in;
  }
  return NULL;
}
