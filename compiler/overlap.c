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
 *    and yielded, with the reduced value used nowhere else (through views,
 *    and for a bf16 x and an f32 c its widening cast: mixed precision's
 *    bf16 gradients, sent as bf16 and widened at the wait). The update is
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
 *  - Prefetch (FSDP's, --prefetch=on): in a loop of constant bounds, the
 *    all-gathers of its body whose blocks come from the loop's index and
 *    outside values alone (a layer's parameters, w[l]) go in a bucket
 *    started an iteration ahead: the first before the loop, iteration
 *    i+1's in iteration i right after the bucket's wait (its blocks
 *    computed again for i+1; none in the last iteration: the start's
 *    condition), the wait where a member is first used, a drain after the
 *    loop. A gather only copies: the results are the same bytes. (The
 *    blocks' index checks run an iteration early: a loop whose index
 *    leaves its array's range stops there one iteration sooner, with the
 *    same message.)
 *
 * The bucket cap (build's --bucket=BYTES; 0 turns the pass off) bounds
 * the bytes a bucket waits for before it starts (its members' own bytes).
 * With --reduce-dtype=bf16 (DDP's bf16_compress_hook, FSDP's
 * reduce_dtype) a bucket of f32 sums over more than one device moves as
 * bf16: its members rounded to bf16 as they are staged, the sums widened
 * into their f32 results at the wait (ASYNC_NARROW; the ring's additions
 * are in f32, each rounded to bf16). Only the buckets change: a sum the
 * pass leaves alone stays f32, and so these forms are no longer exact. A window member's bucket
 * never spans two loops or two iterations.
 *
 * Invariants: every start has its wait in the same function, after it on
 * every path (the same block, or the loop's parent block after the loop;
 * a prefetch's, the next iteration's wait or the drain after the loop);
 * what the pass removes is exactly the pattern's instructions, each used
 * once and only inside the pattern.
 */
#include <limits.h>

#include "shdc.h"

typedef struct {
  Module *mod;
  int64_t cap;
  int *uses;           /* by value id, over the function (counted before each change) */
  int nuses;
  Func *f;
  int *first;          /* by value id: its first use in the block being planned, or -1 (overlap_straight) */
  Inst **user;         /* by value id: its user in the loop body being matched (overlap_loop) */
  PtrMap pos;          /* that body's instructions -> their positions */
  Value **repl;        /* by value id: a bucketed sum's result -> its wait's result */
  char *mark;          /* by value id: where a loop body's value comes from (prefetch) */
  int *need;           /* by value id: the first prefetch bucket whose blocks need it, or -1 */
  Value **clone;       /* by value id: its copy for another iteration (prefetch) */
  bool prefetch;
  bool narrow;         /* --reduce-dtype=bf16: f32 sums move as bf16 */
} Ov;

static int g_site;     /* sites are numbered over the module */

/* The by-id maps are the module's size (grown by half at least when the
 * pass has added values, so that growing them is linear): a function's phase
 * clears only the entries of the values in its body (ids are unique over
 * the module), so the pass is linear in the module, not functions x values. */
static void grow_maps(Ov *o) {
  int n = o->mod->next_value + 1;
  if (n <= o->nuses)
    return;
  if (o->nuses && n < o->nuses + o->nuses / 2 && o->nuses < INT_MAX / 2)   /* each loop's prefetch adds values */
    n = o->nuses + o->nuses / 2;
  o->uses = mem_resize(o->uses, o->nuses, n, sizeof(int));
  o->repl = mem_resize(o->repl, o->nuses, n, sizeof(Value *));
  o->user = mem_resize(o->user, o->nuses, n, sizeof(Inst *));
  o->first = mem_resize(o->first, o->nuses, n, sizeof(int));
  o->mark = mem_resize(o->mark, o->nuses, n, sizeof(char));
  o->need = mem_resize(o->need, o->nuses, n, sizeof(int));
  o->clone = mem_resize(o->clone, o->nuses, n, sizeof(Value *));
  for (int v = o->nuses; v < n; v++)
    o->first[v] = o->need[v] = -1;
  o->nuses = n;
}

static void clear_ids(Ov *o, const IrBlock *b) {
  for (int k = 0; k < b->nargs; k++)
    o->uses[b->args[k]->id] = 0, o->repl[b->args[k]->id] = NULL;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      o->uses[in->args[k]->id] = 0, o->repl[in->args[k]->id] = NULL;
    for (int k = 0; k < in->nresults; k++)
      o->uses[in->results[k]->id] = 0, o->repl[in->results[k]->id] = NULL;
    for (int r = 0; r < in->nregions; r++)
      clear_ids(o, in->regions[r]);
  }
}

/* The function's use counts, taken before a phase, with no replacements. */
static void count_uses(Ov *o) {
  grow_maps(o);
  clear_ids(o, o->f->body);
  ir_count_uses(o->f->body, o->uses);
}

static int uses_of(const Ov *o, const Value *v) { return v->id < o->nuses ? o->uses[v->id] : 0; }

static int64_t local_bytes(const Ov *o, const Type *t) {
  return ty_local_count(&o->mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
}

/* The one instruction of b (not nested) that uses v, or NULL (o->user:
 * the body's users, noted by overlap_loop). */
static Inst *sole_user(const Ov *o, const IrBlock *b, const Value *v) {
  if (uses_of(o, v) != 1 || v->id >= o->nuses)
    return NULL;
  Inst *u = o->user[v->id];
  return u && u->parent == b ? u : NULL;
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

/* The flags of a member summed by ar: with --reduce-dtype=bf16, an f32
 * sum over more than one device is sent as bf16 (rounded at the start,
 * widened at the wait: ASYNC_NARROW). */
static int narrow_flags(const Ov *o, const Inst *ar) {
  int64_t g = 1;
  for (int i = 0; i < ar->naxes; i++)
    g *= o->mod->mesh.sizes[ar->axes[i]];
  return o->narrow && g > 1 && ar->args[0]->type.dtype == DT_F32 ? ASYNC_NARROW | ASYNC_WIDEN : 0;
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
  Inst *ar, *widen, *view[ACC_VIEWS], *slice, *add, *update;
  int carry;           /* the body's argument index of the carry */
  int kind;            /* 1 set, 2 add (SHD_ASYNC_) */
} Acc;

/* Whether the all-reduce ar of body y is the reduced update of one of y's
 * carries, and how. */
static bool match_acc(const Ov *o, IrBlock *y, Inst *ar, Acc *m) {
  memset(m, 0, sizeof *m);
  if ((ar->op != IR_ALL_REDUCE && ar->op != IR_REDUCE_SCATTER) || ar->fn != RED_SUM || !ar->results[0]->type.rank)
    return false;
  m->ar = ar;
  Value *r = ar->results[0];
  Inst *u = sole_user(o, y, r);
  for (int v = 0; u && v < ACC_VIEWS;) {
    if (!m->widen && ir_is_widen(u))
      m->widen = u;   /* mixed precision: the bf16 copy's gradient into an f32 one (exact, elementwise) */
    else if (u->op == IR_RESHAPE || u->op == IR_RETYPE)
      m->view[v++] = u;   /* views: the same bytes */
    else
      break;
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
  return (m->widen ? DT_F32 : ar->args[0]->type.dtype) == c->type.dtype;
}

static bool same_group(const Inst *a, const Inst *b) {
  return a->op == b->op && a->naxes == b->naxes && memcmp(a->axes, b->axes, sizeof(int) * (size_t)a->naxes) == 0 &&
         a->args[0]->type.dtype == b->args[0]->type.dtype;
}

/* The position in the body (as it was matched) after the last of in's
 * operands defined there. */
static int after_operands(const Ov *o, const IrBlock *b, const Inst *in) {
  int at = 0;
  for (int k = 0; k < in->nargs; k++) {
    const Inst *d = in->args[k]->def;
    int i = d && d->parent == b ? ptrmap_get(&o->pos, d) : -1;
    if (i + 1 > at)
      at = i + 1;
  }
  return at;
}

/* The start of one bucket of accumulator members m[0..n) of the loop F,
 * to go into the body after position *at (the caller rebuilds the body:
 * the pattern's instructions are marked in gone), and its wait in F's
 * block before the first use of the loop's results. */
static Inst *start_accs(Ov *o, Inst *F, Acc *m, int n, PtrMap *gone, int *at_out) {
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
    w[0] = m[j].kind | (m[j].widen ? ASYNC_WIDEN : 0) | narrow_flags(o, m[j].ar);
    w[1] = t;
    w[2] = rt->rank;
    w[ASYNC_SCATTER_DIM] = m[j].ar->op == IR_REDUCE_SCATTER ? m[j].ar->dim : -1;
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
  int op = m[0].ar->op == IR_REDUCE_SCATTER ? IR_REDUCE_SCATTER_START : IR_ALL_REDUCE_START;
  Inst *st = ir_emit(o->mod, NULL, op, m[n - 1].ar->pos, at, args, 0, NULL);
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
    Inst *g[] = {m[j].update, m[j].add, m[j].slice, m[j].widen, m[j].ar};
    for (int k = 0; k < 5; k++)
      if (g[k])
        ptrmap_put(gone, g[k], 1);
    for (int k = 0; k < ACC_VIEWS; k++)
      if (m[j].view[k])
        ptrmap_put(gone, m[j].view[k], 1);
  }
  *at_out = after_operands(o, y, st);
  /* the wait, before the first use of the loop's results */
  Value **res = mem_calloc((size_t)ncarry, sizeof(Value *));
  Type *types = mem_calloc((size_t)ncarry, sizeof(Type));
  for (int t = 0; t < ncarry; t++) {
    res[t] = F->results[carries[t] - 1];
    types[t] = res[t]->type;
  }
  int fi = ir_index_of(b, F), wi = fi + 1;
  while (wi < b->insts.len - 1 && !uses_value(b->insts.data[wi], (const Value *const *)res, ncarry))
    wi++;
  Inst *wt = ir_emit(o->mod, NULL, IR_ALL_REDUCE_WAIT, F->pos, ncarry, res, ncarry, types);
  wt->ival = st->ival;
  wt->iv = arena_alloc(sizeof(int64_t));
  wt->iv[0] = 0;
  wt->niv = 1;
  ir_insert_at(b, wi, wt);
  for (int t = 0; t < ncarry; t++) {
    wt->results[t]->name = res[t]->name;
    wt->results[t]->display = res[t]->display;
    o->repl[res[t]->id] = wt->results[t];   /* every use but the wait's own, once the loops are done */
  }
  free(carries);
  free(args);
  free(res);
  free(types);
  return st;
}

static void overlap_loop(Ov *o, Inst *F) {
  IrBlock *y = F->regions[0];
  int len = y->insts.len;
  Vec touched = {0};
  for (int i = 0; i < len; i++) {   /* the body's users and positions, as matched */
    Inst *in = y->insts.data[i];
    ptrmap_put(&o->pos, in, i);
    for (int k = 0; k < in->nargs; k++)
      if (in->args[k]->id < o->nuses) {
        o->user[in->args[k]->id] = in;
        vec_push(&touched, (void *)(intptr_t)in->args[k]->id);
      }
  }
  Acc *acc = mem_calloc((size_t)len + 1, sizeof *acc);
  int n = 0;
  for (int i = 0; i < len; i++)
    if (match_acc(o, y, y->insts.data[i], &acc[n]))
      n++;
  /* buckets: members of one group, in order, up to the cap */
  bool *done = mem_calloc((size_t)n + 1, sizeof(bool));
  Acc *bucket = mem_calloc((size_t)n + 1, sizeof *bucket);
  Vec *after = mem_calloc((size_t)len + 1, sizeof(Vec));
  PtrMap gone = {0};
  for (int i = 0; i < n; i++) {
    if (done[i])
      continue;
    int nb = 0, at;
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
    Inst *st = start_accs(o, F, bucket, nb, &gone, &at);
    vec_push(&after[at], st);
  }
  if (n) {   /* the body rebuilt once: the patterns gone, each start after its operands */
    Vec out = {0};
    for (int i = 0; i <= len; i++) {
      for (int k = 0; k < after[i].len; k++) {
        ((Inst *)after[i].data[k])->parent = y;
        vec_push(&out, after[i].data[k]);
      }
      if (i < len && ptrmap_get(&gone, y->insts.data[i]) < 0)
        vec_push(&out, y->insts.data[i]);
    }
    free(y->insts.data);
    y->insts = out;
  }
  for (int i = 0; i < touched.len; i++)
    o->user[(intptr_t)touched.data[i]] = NULL;
  for (int i = 0; i <= len; i++)
    free(after[i].data);
  ptrmap_free(&gone);
  ptrmap_free(&o->pos);
  o->pos = (PtrMap){0};
  free(touched.data);
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

/* One block's straight-line pass, planned on the block as it is and then
 * applied in one rebuild of its list, so that a block of n sums costs
 * O(n + its length), not a scan of the block per sum. */
typedef struct {
  int *first;          /* by value id: its first use in the block (a position), or -1 */
  int *heavy;          /* by position: heavy instructions before it */
  double *work;        /* by position: the work before it */
} Marks;

static void note_first(Ov *o, int *first, Vec *touched, const Inst *in, int pos) {
  for (int k = 0; k < in->nargs; k++) {
    int id = in->args[k]->id;
    if (id < o->nuses && first[id] < 0) {
      first[id] = pos;
      vec_push(touched, (void *)(intptr_t)id);
    }
  }
  for (int r = 0; r < in->nregions; r++)
    for (int i = 0; i < in->regions[r]->insts.len; i++)
      note_first(o, first, touched, in->regions[r]->insts.data[i], pos);
}

/* The start and wait of the bucket mem[0..n) (their positions: after
 * `last`, before `wait`), or NULL when it is not worth starting. */
static Inst *make_bucket(Ov *o, Inst **mem, int n, const Marks *mk, int last, int wait, Inst **wait_out) {
  int64_t bytes = 0;
  for (int j = 0; j < n; j++)
    bytes += local_bytes(o, &mem[j]->args[0]->type);
  if (mk->work[wait] - mk->work[last + 1] < OVERLAP_MIN_WORK || bytes < OVERLAP_MIN_BYTES)
    return NULL;
  Value **args = mem_calloc((size_t)n, sizeof(Value *));
  Type *types = mem_calloc((size_t)n, sizeof(Type));
  int64_t *iv = arena_alloc(sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  memset(iv, 0, sizeof(int64_t) * (size_t)n * ASYNC_MEMBER_W);
  for (int j = 0; j < n; j++) {
    args[j] = mem[j]->args[0];
    types[j] = mem[j]->results[0]->type;
    iv[(size_t)j * ASYNC_MEMBER_W] = narrow_flags(o, mem[j]);
    iv[(size_t)j * ASYNC_MEMBER_W + ASYNC_SCATTER_DIM] = -1;
  }
  Inst *st = ir_emit(o->mod, NULL, IR_ALL_REDUCE_START, mem[n - 1]->pos, n, args, n, types);
  memcpy(st->axes, mem[0]->axes, sizeof st->axes);
  st->naxes = mem[0]->naxes;
  st->fn = RED_SUM;
  st->ival = g_site++;
  st->iv = iv;
  st->niv = n * ASYNC_MEMBER_W;
  Inst *wt = ir_emit(o->mod, NULL, IR_ALL_REDUCE_WAIT, st->pos, n, st->results, n, types);
  wt->ival = st->ival;
  wt->iv = arena_alloc(sizeof(int64_t));
  wt->iv[0] = n;
  wt->niv = 1;
  for (int j = 0; j < n; j++) {
    st->results[j]->name = wt->results[j]->name = mem[j]->results[0]->name;
    st->results[j]->display = wt->results[j]->display = mem[j]->results[0]->display;
    o->repl[mem[j]->results[0]->id] = wt->results[j];   /* every use, replaced once the function is done */
  }
  free(args);
  free(types);
  *wait_out = wt;
  return st;
}

/* Buckets of b's sums by group: a bucket closes where a member's result
 * is used, where heavy work lies before the next member (the bucket would
 * wait for it when it could travel), or at the cap. */
static void overlap_straight(Ov *o, IrBlock *b) {
  int len = b->insts.len;
  Marks mk = {.first = o->first, .heavy = mem_calloc((size_t)len + 1, sizeof(int)),
              .work = mem_calloc((size_t)len + 1, sizeof(double))};
  Vec touched = {0}, cand = {0};
  for (int i = 0; i < len; i++) {
    Inst *in = b->insts.data[i];
    note_first(o, o->first, &touched, in, i);
    double w = work_of(o, in);
    mk.work[i + 1] = mk.work[i] + w;
    mk.heavy[i + 1] = mk.heavy[i] + (w >= OVERLAP_MIN_WORK);
    if (in->op == IR_ALL_REDUCE && in->fn == RED_SUM && in->results[0]->type.rank && uses_of(o, in->results[0]) > 0)
      vec_push(&cand, (void *)(intptr_t)i);
  }
  Vec *after = mem_calloc((size_t)len + 1, sizeof(Vec)), *before = mem_calloc((size_t)len + 1, sizeof(Vec));
  bool *gone = mem_calloc((size_t)len + 1, sizeof(bool)), *taken = mem_calloc((size_t)cand.len + 1, sizeof(bool));
  Inst **mem = mem_calloc((size_t)cand.len + 1, sizeof(Inst *));
  int *at = mem_calloc((size_t)cand.len + 1, sizeof(int)), nb = 0;
  for (int i = 0; i < cand.len; i++) {
    if (taken[i])
      continue;
    Inst *first = b->insts.data[(intptr_t)cand.data[i]];
    int n = 0, last = -1, use = len - 1;   /* the first use of a member (the terminator at the latest) */
    int64_t bytes = 0;
    for (int j = i; j < cand.len; j++) {
      int q = (int)(intptr_t)cand.data[j];
      Inst *in = b->insts.data[q];
      if (taken[j] || !same_group(first, in))
        continue;
      int64_t add = local_bytes(o, &in->args[0]->type);
      if (n && (use < q || mk.heavy[q] - mk.heavy[last + 1] > 0 || bytes + add > o->cap))
        break;
      int f = o->first[in->results[0]->id];
      if (f >= 0 && f < use)
        use = f;
      at[n] = q;
      mem[n++] = in;
      last = q;
      bytes += add;
      taken[j] = true;
    }
    Inst *wt, *st = make_bucket(o, mem, n, &mk, last, use, &wt);
    if (!st)
      continue;
    vec_push(&after[last], st);
    vec_push(&before[use], wt);
    for (int j = 0; j < n; j++)
      gone[at[j]] = true;
    nb++;
  }
  if (nb) {   /* the rebuild: waits before their position, starts after theirs, members gone */
    Vec out = {0};
    for (int i = 0; i < len; i++) {
      for (int k = 0; k < before[i].len; k++)
        vec_push(&out, before[i].data[k]);
      if (!gone[i])
        vec_push(&out, b->insts.data[i]);
      for (int k = 0; k < after[i].len; k++)
        vec_push(&out, after[i].data[k]);
    }
    for (int i = 0; i < out.len; i++)
      ((Inst *)out.data[i])->parent = b;
    free(b->insts.data);
    b->insts = out;
  }
  for (int i = 0; i <= len; i++) {
    free(after[i].data);
    free(before[i].data);
  }
  for (int i = 0; i < touched.len; i++)
    o->first[(intptr_t)touched.data[i]] = -1;
  free(touched.data);
  free(cand.data);
  free(mk.heavy);
  free(mk.work);
  free(after);
  free(before);
  free(gone);
  free(taken);
  free(mem);
  free(at);
}

/* Loops first (each body's matches found before it changes), then the
 * straight-line buckets of every block, innermost first. */
static void overlap_loops(Ov *o, IrBlock *b) {
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
      overlap_loops(o, in->regions[r]);
  }
}

static void overlap_blocks(Ov *o, IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      overlap_blocks(o, in->regions[r]);
  }
  overlap_straight(o, b);
}

/* ---- a layer loop's all-gathers, an iteration ahead (FSDP's prefetch) ------------------------------ */

/* Where a loop body's value comes from: outside the loop, the body's index
 * and outside values alone (so it can be computed for another iteration),
 * or anything else of the body. */
enum { FROM_OUTSIDE, FROM_INDEX, FROM_BODY };

/* Whether in may be computed again from its operands, for another
 * iteration's index: one result, no regions, no call, effect, output,
 * communication or tape. */
static bool recomputable(const Inst *in) {
  if (in->nresults != 1 || in->nregions || in->op == IR_CALL || in->op == IR_TAPE_GET || in->op == IR_TAPE_NEW)
    return false;
  return !has_flag(in, OPF_EFFECT | OPF_COLLECTIVE | OPF_OUTPUT);
}

static int from_of(const Ov *o, const Value *v) { return v->id < o->nuses ? o->mark[v->id] : FROM_OUTSIDE; }

static int64_t group_of(const Ov *o, const Inst *in) {
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= o->mod->mesh.sizes[in->axes[i]];
  return g;
}

/* One bucket of a loop's prefetched gathers. */
typedef struct {
  Inst **mem;          /* the gathers, in the body's order */
  int n;
  int wait;            /* the body's position its wait goes before: the first use of a member */
  int site;
  Inst *wt;
  Vec body;            /* its copies of the index's instructions for the next iteration, then its start */
} Pf;

static int by_wait(const void *a, const void *b) {
  const Pf *x = a, *y = b;
  return x->wait != y->wait ? (x->wait < y->wait ? -1 : 1) : (x->site < y->site ? -1 : x->site > y->site);
}

static void use_args(Ov *o, const Inst *in, int by) {
  for (int k = 0; k < in->nargs; k++)
    if (in->args[k]->id < o->nuses)
      o->uses[in->args[k]->id] += by;
}

static Value *emit_int(Ov *o, Vec *out, int op, int fn, Pos pos, Value *a, Value *b, DType dt, double c) {
  Value *args[2] = {a, b};
  Inst *in = ir_emit(o->mod, NULL, op, pos, op == IR_CONST ? 0 : 2, args, 1, (Type[]){ty_scalar(dt)});
  in->fn = fn;
  in->fval = c;
  in->ival = (int64_t)c;
  use_args(o, in, 1);
  vec_push(out, in);
  return in->results[0];
}

/* Copies of the body's instructions that the buckets' blocks need, the
 * index read as sub: each onto the bucket that needs it first (every one
 * onto pf[0] when one is true). */
static void clone_index(Ov *o, IrBlock *y, Value *sub, Pf *pf, bool one) {
  for (int i = 0; i < y->insts.len; i++) {
    Inst *in = y->insts.data[i];
    Value *r = in->nresults == 1 ? in->results[0] : NULL;
    if (!r || r->id >= o->nuses || o->mark[r->id] != FROM_INDEX || o->need[r->id] < 0)
      continue;
    Value **args = mem_calloc((size_t)in->nargs + 1, sizeof(Value *));
    for (int k = 0; k < in->nargs; k++) {
      Value *a = in->args[k];
      args[k] = a == y->args[0] ? sub : from_of(o, a) == FROM_INDEX ? o->clone[a->id] : a;
    }
    Inst *c = ir_emit(o->mod, NULL, in->op, in->pos, in->nargs, args, 1, &r->type);
    ir_copy_attrs(c, in);
    use_args(o, c, 1);
    o->clone[r->id] = c->results[0];
    vec_push(&pf[one ? 0 : o->need[r->id]].body, c);
    free(args);
  }
}

/* Bucket b's start: active (bool) whether it runs, its members' blocks
 * (their copies for the iteration it gathers). */
static Inst *gather_start(Ov *o, const Pf *b, Value *active) {
  Value **args = mem_calloc((size_t)b->n + 1, sizeof(Value *));
  int64_t *iv = arena_alloc(sizeof(int64_t) * (size_t)b->n * ASYNC_MEMBER_W);
  memset(iv, 0, sizeof(int64_t) * (size_t)b->n * ASYNC_MEMBER_W);
  args[0] = active;
  for (int j = 0; j < b->n; j++) {
    Value *x = b->mem[j]->args[0];
    args[1 + j] = from_of(o, x) == FROM_INDEX ? o->clone[x->id] : x;
    iv[(size_t)j * ASYNC_MEMBER_W + ASYNC_SCATTER_DIM] = b->mem[j]->dim;
  }
  Inst *st = ir_emit(o->mod, NULL, IR_ALL_GATHER_START, b->mem[b->n - 1]->pos, b->n + 1, args, 0, NULL);
  memcpy(st->axes, b->mem[0]->axes, sizeof st->axes);
  st->naxes = b->mem[0]->naxes;
  st->ival = b->site;
  st->iv = iv;
  st->niv = b->n * ASYNC_MEMBER_W;
  use_args(o, st, 1);
  free(args);
  return st;
}

/* The buckets of y's gathers whose blocks are the index's (or the loop's
 * outside values'), by group, up to the cap; their waits before the first
 * use of a member. Returns how many. */
static int plan_buckets(Ov *o, IrBlock *y, Pf *pf, Inst **mem, Vec *touched) {
  int len = y->insts.len, nb = 0, used = 0;
  Vec cand = {0};
  for (int i = 0; i < len; i++) {
    Inst *in = y->insts.data[i];
    note_first(o, o->first, touched, in, i);
    if (in->op == IR_ALL_GATHER && in->naxes && group_of(o, in) > 1 && from_of(o, in->args[0]) != FROM_BODY)
      vec_push(&cand, in);
  }
  bool *taken = mem_calloc((size_t)cand.len + 1, sizeof(bool));
  for (int i = 0; i < cand.len; i++) {
    if (taken[i])
      continue;
    Pf *b = &pf[nb++];
    b->mem = mem + used;
    b->wait = len - 1;
    b->site = g_site++;
    int64_t bytes = 0;
    for (int j = i; j < cand.len; j++) {
      Inst *in = cand.data[j];
      if (taken[j] || !same_group(cand.data[i], in))
        continue;
      int64_t add = local_bytes(o, &in->results[0]->type);
      if (b->n && bytes + add > o->cap)
        break;
      b->mem[b->n++] = in;
      used++;
      bytes += add;
      taken[j] = true;
      int f = o->first[in->results[0]->id];
      if (f >= 0 && f < b->wait)
        b->wait = f;
    }
  }
  free(taken);
  free(cand.data);
  return nb;
}

/* The values the buckets' blocks are computed from (o->need: the first
 * bucket, in wait order, that needs each), found backwards over y. */
static void mark_needs(Ov *o, IrBlock *y, Pf *pf, int nb, Vec *touched) {
  for (int k = 0; k < nb; k++)
    for (int j = 0; j < pf[k].n; j++) {
      Value *x = pf[k].mem[j]->args[0];
      if (from_of(o, x) == FROM_INDEX && (o->need[x->id] < 0 || o->need[x->id] > k)) {
        if (o->need[x->id] < 0)
          vec_push(touched, (void *)(intptr_t)x->id);
        o->need[x->id] = k;
      }
    }
  for (int i = y->insts.len - 1; i >= 0; i--) {
    Inst *in = y->insts.data[i];
    if (in->nresults != 1 || from_of(o, in->results[0]) != FROM_INDEX || o->need[in->results[0]->id] < 0)
      continue;
    int k = o->need[in->results[0]->id];
    for (int a = 0; a < in->nargs; a++) {
      Value *x = in->args[a];
      if (x->def && x->def->parent == y && from_of(o, x) == FROM_INDEX && (o->need[x->id] < 0 || o->need[x->id] > k)) {
        if (o->need[x->id] < 0)
          vec_push(touched, (void *)(intptr_t)x->id);
        o->need[x->id] = k;
      }
    }
  }
}

/* Loop F's all-gathers of blocks that depend only on its index (a layer's
 * parameters: w[l]) prefetched: the first iteration's started before the
 * loop, iteration i+1's started in iteration i right after i's wait (none
 * in the last: its start's condition), each waited where a member is first
 * used, and a drain after the loop. F's bounds are constants, 2 or more
 * iterations apart. Before-loop instructions go to pre, the drains to
 * post; F's body is rebuilt. */
static void prefetch_loop(Ov *o, Inst *F, Vec *pre, Vec *post) {
  IrBlock *y = F->regions[0];
  int64_t lo, hi;
  if (!ir_const_int(F->args[0], &lo) || !ir_const_int(F->args[1], &hi) || hi - lo < 2)
    return;
  grow_maps(o);
  int len = y->insts.len;
  Value *iv = y->args[0];
  o->mark[iv->id] = FROM_INDEX;
  for (int k = 1; k < y->nargs; k++)
    o->mark[y->args[k]->id] = FROM_BODY;
  for (int i = 0; i < len; i++) {
    Inst *in = y->insts.data[i];
    int from = recomputable(in) ? FROM_INDEX : FROM_BODY;
    for (int k = 0; k < in->nargs && from == FROM_INDEX; k++)
      if (from_of(o, in->args[k]) == FROM_BODY)
        from = FROM_BODY;
    for (int k = 0; k < in->nresults; k++)
      o->mark[in->results[k]->id] = (char)from;
  }
  Vec touched = {0}, needed = {0};
  Pf *pf = mem_calloc((size_t)len + 1, sizeof *pf);
  Inst **mem = mem_calloc((size_t)len + 1, sizeof(Inst *));
  int nb = plan_buckets(o, y, pf, mem, &touched);
  if (nb) {
    qsort(pf, (size_t)nb, sizeof *pf, by_wait);
    mark_needs(o, y, pf, nb, &needed);
    /* before the loop: the first iteration's blocks, gathered */
    Pf first = {0};
    clone_index(o, y, F->args[0], &first, true);
    for (int i = 0; i < first.body.len; i++)
      vec_push(pre, first.body.data[i]);
    free(first.body.data);
    Value *yes = emit_int(o, pre, IR_CONST, 0, F->pos, NULL, NULL, DT_BOOL, 1);
    for (int k = 0; k < nb; k++)
      vec_push(pre, gather_start(o, &pf[k], yes));
    /* in the body: the next iteration's, after the first wait */
    Vec idx = {0};
    Value *one = emit_int(o, &idx, IR_CONST, 0, F->pos, NULL, NULL, DT_I32, 1);
    Value *nx = emit_int(o, &idx, IR_BINARY, BIN_ADD, F->pos, iv, one, DT_I32, 0);
    Value *last = emit_int(o, &idx, IR_CONST, 0, F->pos, NULL, NULL, DT_I32, (double)(hi - 1));
    Value *next = emit_int(o, &idx, IR_BINARY, BIN_MIN, F->pos, nx, last, DT_I32, 0);
    Value *active = emit_int(o, &idx, IR_BINARY, BIN_LT, F->pos, nx, F->args[1], DT_BOOL, 0);
    for (int i = 0; i < needed.len; i++)
      o->clone[(intptr_t)needed.data[i]] = NULL;
    clone_index(o, y, next, pf, false);
    bool *gone = mem_calloc((size_t)len + 1, sizeof(bool));
    PtrMap pos = {0};
    for (int i = 0; i < len; i++)
      ptrmap_put(&pos, y->insts.data[i], i);
    for (int k = 0; k < nb; k++) {
      Pf *b = &pf[k];
      vec_push(&b->body, gather_start(o, b, active));
      Type *types = mem_calloc((size_t)b->n, sizeof(Type));
      for (int j = 0; j < b->n; j++)
        types[j] = b->mem[j]->results[0]->type;
      b->wt = ir_emit(o->mod, NULL, IR_ALL_GATHER_WAIT, b->mem[0]->pos, 0, NULL, b->n, types);
      b->wt->ival = b->site;
      for (int j = 0; j < b->n; j++) {
        Value *r = b->mem[j]->results[0];
        b->wt->results[j]->name = r->name;
        b->wt->results[j]->display = r->display;
        o->repl[r->id] = b->wt->results[j];
        use_args(o, b->mem[j], -1);
        gone[ptrmap_get(&pos, b->mem[j])] = true;
      }
      free(types);
      Inst *drain = ir_emit(o->mod, NULL, IR_ALL_GATHER_WAIT, F->pos, 0, NULL, 0, NULL);
      drain->ival = b->site;
      vec_push(post, drain);
    }
    /* what only the gathers used goes */
    for (int i = len - 1; i >= 0; i--) {
      Inst *in = y->insts.data[i];
      if (!gone[i] && in->nresults == 1 && from_of(o, in->results[0]) == FROM_INDEX &&
          o->need[in->results[0]->id] >= 0 && o->uses[in->results[0]->id] == 0) {
        gone[i] = true;
        use_args(o, in, -1);
      }
    }
    Vec out = {0};
    for (int i = 0, k = 0; i < len; i++) {
      for (; k < nb && pf[k].wait == i; k++) {
        vec_push(&out, pf[k].wt);
        for (int j = 0; k == 0 && j < idx.len; j++)
          vec_push(&out, idx.data[j]);
        for (int j = 0; j < pf[k].body.len; j++)
          vec_push(&out, pf[k].body.data[j]);
      }
      if (!gone[i])
        vec_push(&out, y->insts.data[i]);
    }
    for (int i = 0; i < len; i++)   /* the marks go before the list does */
      for (int r = 0; r < ((Inst *)y->insts.data[i])->nresults; r++)
        o->mark[((Inst *)y->insts.data[i])->results[r]->id] = FROM_OUTSIDE;
    for (int i = 0; i < out.len; i++)
      ((Inst *)out.data[i])->parent = y;
    free(y->insts.data);
    y->insts = out;
    for (int k = 0; k < nb; k++)
      free(pf[k].body.data);
    free(idx.data);
    free(gone);
    ptrmap_free(&pos);
  }
  for (int i = 0; i < y->insts.len; i++)
    for (int r = 0; r < ((Inst *)y->insts.data[i])->nresults; r++)
      if (((Inst *)y->insts.data[i])->results[r]->id < o->nuses)
        o->mark[((Inst *)y->insts.data[i])->results[r]->id] = FROM_OUTSIDE;
  for (int k = 0; k < y->nargs; k++)
    o->mark[y->args[k]->id] = FROM_OUTSIDE;
  for (int i = 0; i < needed.len; i++)
    o->need[(intptr_t)needed.data[i]] = -1, o->clone[(intptr_t)needed.data[i]] = NULL;
  for (int i = 0; i < touched.len; i++)
    o->first[(intptr_t)touched.data[i]] = -1;
  free(needed.data);
  free(touched.data);
  free(pf);
  free(mem);
}

/* Every loop's prefetch, inner loops first; a block's list rebuilt once. */
static void prefetch_blocks(Ov *o, IrBlock *b) {
  bool any = false;
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      prefetch_blocks(o, in->regions[r]);
    any |= in->op == IR_FOR;
  }
  if (!any)
    return;
  Vec out = {0};
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    Vec pre = {0}, post = {0};
    if (in->op == IR_FOR)
      prefetch_loop(o, in, &pre, &post);
    for (int k = 0; k < pre.len; k++)
      vec_push(&out, pre.data[k]);
    vec_push(&out, in);
    for (int k = 0; k < post.len; k++)
      vec_push(&out, post.data[k]);
    free(pre.data);
    free(post.data);
  }
  for (int i = 0; i < out.len; i++)
    ((Inst *)out.data[i])->parent = b;
  free(b->insts.data);
  b->insts = out;
}

static void replace_all(Ov *o, IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++) {
      Value *to = in->args[k]->id < o->nuses ? o->repl[in->args[k]->id] : NULL;
      if (to && to->def != in)   /* a loop's wait keeps the loop's results as its operands */
        in->args[k] = to;
    }
    for (int r = 0; r < in->nregions; r++)
      replace_all(o, in->regions[r]);
  }
}

void overlap_module(Module *mod, int64_t bucket_bytes, bool prefetch, bool narrow) {
  g_site = 0;
  if (bucket_bytes <= 0)
    return;
  Ov o = {.mod = mod, .cap = bucket_bytes, .prefetch = prefetch, .narrow = narrow};
  for (int i = 0; i < mod->funcs.len; i++) {
    o.f = mod->funcs.data[i];
    /* Each phase plans on the function's use counts taken before it (a
     * change only moves uses it counted or removes some: the counts stay
     * safe for what is matched later) and replaces uses once, after. */
    count_uses(&o);
    overlap_loops(&o, o.f->body);
    replace_all(&o, o.f->body);
    if (prefetch) {
      count_uses(&o);
      prefetch_blocks(&o, o.f->body);
      replace_all(&o, o.f->body);
    }
    count_uses(&o);
    overlap_blocks(&o, o.f->body);
    replace_all(&o, o.f->body);
  }
  free(o.repl);
  free(o.mark);
  free(o.need);
  free(o.clone);
  free(o.user);
  free(o.first);
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
  return ir_is_async_wait(in->op) && in->ival == start->ival;
}

/* A prefetched gather's wait in loop body y (top level), or NULL. */
static const Inst *wait_in(const IrBlock *y, const Inst *start) {
  for (int i = 0; i < y->insts.len; i++)
    if (is_wait_of(y->insts.data[i], start))
      return y->insts.data[i];
  return NULL;
}

/* A prefetched gather (before the loop, or in its body for the next
 * iteration): what runs up to its wait in the body, wrapping around the
 * body's end once. */
static const Inst *gather_work(const Module *mod, const IrBlock *b, int at, const Inst *start, double *dot,
                               double *ew) {
  for (int i = at + 1; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    const Inst *w = in->op == IR_FOR ? wait_in(in->regions[0], start) : NULL;
    if (is_wait_of(in, start))
      return in;
    if (!w) {
      add_work(mod, in, dot, ew);
      continue;
    }
    for (int k = 0; in->regions[0]->insts.data[k] != w; k++)
      add_work(mod, in->regions[0]->insts.data[k], dot, ew);
    return w;
  }
  if (!b->owner || b->owner->op != IR_FOR)
    return NULL;
  for (int i = 0; i <= at; i++) {
    const Inst *in = b->insts.data[i];
    if (is_wait_of(in, start))
      return in;
    add_work(mod, in, dot, ew);
  }
  return NULL;
}

const Inst *overlap_work(const Module *mod, const Inst *start, double *dot, double *ew) {
  *dot = *ew = 0;
  const IrBlock *b = start->parent;
  int at = ir_index_of(b, start);
  if (at < 0)
    return NULL;
  if (start->op == IR_ALL_GATHER_START)
    return gather_work(mod, b, at, start, dot, ew);
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
  for (int i = ir_index_of(pb, loop) + 1; i < pb->insts.len; i++) {
    const Inst *in = pb->insts.data[i];
    if (is_wait_of(in, start))
      return in;
  }
  return NULL;
}
