/* reshard.c: the one reshard every partitioning rule uses.
 *
 * Given a value of type S and a target type T of the same shape and dtype,
 * it appends the SPMD instructions that turn this rank's block of S into its
 * block of T, choosing the cheapest sequence of steps by a shortest-path
 * search over sharding states. A state is a type whose axes each shard a
 * dim, are unreduced, or are replicated; reduced is physically replicated
 * (only autodiff tells them apart), so R is set by a final retype, and an
 * axis of size 1 is physically absent, so it is left out of the search. The
 * steps, from a state to the next:
 *
 *   slice_block        free: a dim takes replicated axes as its minor ones
 *   embed_block        free: a dim's minor axes become unreduced (own
 *                      block in place, zeros elsewhere)
 *   zero_unless_first  free: replicated axes become unreduced
 *   all_gather         a dim's minor axes become replicated
 *   reduce_scatter     unreduced axes become a dim's minor ones
 *   all_reduce         unreduced axes become replicated
 *   all_to_all         a dim's minor axes move to another dim's minor end
 *   permute            any other layout with the same local shape: each rank
 *                      sends its block to one rank and receives one
 *
 * A plan costs, in this order: the bytes one rank sends (the formulas of
 * explain.c and the runtime trace), then the number of collectives, then
 * the bytes of the buffers it allocates. Dijkstra's algorithm returns a
 * cheapest plan in that order; ties go to the step listed first above.
 */
#include "ops.h"

/* ---- block geometry ----------------------------------------------------------- */

static void rank_coords(const Mesh *m, int rank, int *coord) {
  for (int a = m->naxes - 1; a >= 0; a--) {
    coord[a] = rank % m->sizes[a];
    rank /= m->sizes[a];
  }
}

void part_block_offset(const Mesh *m, const Type *t, int rank, int64_t *off) {
  int coord[MAX_AXES];
  rank_coords(m, rank, coord);
  for (int d = 0; d < t->rank; d++) {
    int64_t idx = 0;
    for (int i = 0; i < t->spec[d].n; i++) {
      int a = t->spec[d].axes[i];
      idx = idx * m->sizes[a] + coord[a];
    }
    off[d] = idx * ty_local_dim(m, t, d);
  }
}

static int world_size(const Mesh *m) {
  int n = 1;
  for (int a = 0; a < m->naxes; a++)
    n *= m->sizes[a];
  return n;
}

static bool same_block(const Mesh *m, const Type *a, int ra, const Type *b, int rb) {
  int64_t oa[MAX_RANK], ob[MAX_RANK];
  part_block_offset(m, a, ra, oa);
  part_block_offset(m, b, rb, ob);
  for (int d = 0; d < a->rank; d++)
    if (oa[d] != ob[d])
      return false;
  return true;
}

/* Two types with the same local shape: every rank's target block is some
 * rank's source block. Along the axes that shard a dim in neither type the
 * data (copies, pending-sum pieces, varying values) must not move, so a
 * rank receives from a rank with the same coordinates there. Within such a
 * slice every block has as many holders as it has receivers, so the match
 * always succeeds: first every rank that holds its own target block keeps
 * it, then the others take the unused holders in rank order. */
void part_permute_tables(const Mesh *m, const Type *from, const Type *to, int *dest, int *src) {
  int n = world_size(m);
  AxisSet fixed = ~(ty_dim_axes(from) | ty_dim_axes(to)) & ((1u << m->naxes) - 1);
  for (int r = 0; r < n; r++) {
    bool keep = same_block(m, from, r, to, r);
    dest[r] = src[r] = keep ? r : -1;
  }
  for (int r = 0; r < n; r++) {
    if (src[r] >= 0)
      continue;
    int cr[MAX_AXES], cs[MAX_AXES];
    rank_coords(m, r, cr);
    for (int s = 0; s < n && src[r] < 0; s++) {
      if (dest[s] >= 0)
        continue;
      rank_coords(m, s, cs);
      bool ok = true;
      for (int a = 0; a < m->naxes && ok; a++)
        ok = !(fixed & (1u << a)) || cs[a] == cr[a];
      if (ok && same_block(m, from, s, to, r)) {
        src[r] = s;
        dest[s] = r;
      }
    }
    if (src[r] < 0)
      diag_ice("permute: no source block for rank %d (%s to %s)", r, ty_str(m, from), ty_str(m, to));
  }
}

/* True when some rank's block differs between the two layouts. */
static bool blocks_move(const Mesh *m, const Type *from, const Type *to) {
  int n = world_size(m);
  for (int r = 0; r < n; r++)
    if (!same_block(m, from, r, to, r))
      return true;
  return false;
}

/* ---- states ----------------------------------------------------------------------- */

/* The search's view of a type: reduced is replicated, and axes of size 1
 * take no part (a dim sharded over them is not divided, a sum over them has
 * one piece). */
static Type physical(const Mesh *m, const Type *t) {
  Type r = *t;
  AxisSet ones = 0;
  for (int a = 0; a < m->naxes; a++)
    if (m->sizes[a] == 1)
      ones |= 1u << a;
  for (int d = 0; d < r.rank; d++) {
    DimSpec s = {0};
    for (int i = 0; i < r.spec[d].n; i++)
      if (!(ones & (1u << r.spec[d].axes[i])))
        s.axes[s.n++] = r.spec[d].axes[i];
    r.spec[d] = s;
  }
  r.U &= ~ones;
  r.R = 0;
  r.weak = false;
  return r;
}

typedef struct {
  int64_t bytes;       /* sent per rank */
  int ncoll;
  int64_t mem;         /* bytes of buffers allocated */
} Cost;

static bool cost_less(Cost a, Cost b) {
  if (a.bytes != b.bytes)
    return a.bytes < b.bytes;
  if (a.ncoll != b.ncoll)
    return a.ncoll < b.ncoll;
  return a.mem < b.mem;
}

static Cost cost_add(Cost a, Cost b) { return (Cost){a.bytes + b.bytes, a.ncoll + b.ncoll, a.mem + b.mem}; }

typedef struct {
  Opcode op;
  int dim, dim2;
  int axes[MAX_AXES];
  int naxes;
} Step;

typedef struct {
  Type t;
  Cost cost;
  int prev;
  Step step;
  bool done;
} Node;

typedef struct {
  const Mesh *m;
  AxisSet movable;     /* axes the search may change (not varying, size > 1) */
  Node *nodes;
  int n, cap;
} Search;

static int64_t local_bytes(const Mesh *m, const Type *t) {
  return ty_local_count(m, t) * (int64_t)ty_dtype_size(t->dtype);
}

static int64_t group_of(const Mesh *m, const int *axes, int n) {
  int64_t g = 1;
  for (int i = 0; i < n; i++)
    g *= m->sizes[axes[i]];
  return g;
}

static bool divisible(const Mesh *m, const Type *t) {
  for (int d = 0; d < t->rank; d++)
    if (t->shape[d] % ty_spec_parts(m, t->spec[d]))
      return false;
  return true;
}

static int find_node(Search *s, const Type *t) {
  for (int i = 0; i < s->n; i++)
    if (ty_same_sharding(&s->nodes[i].t, t))
      return i;
  return -1;
}

/* Records that `t` is reachable from node `from` by `step` at `cost`. */
static void relax(Search *s, int from, const Type *t, Step step, Cost cost) {
  if (!divisible(s->m, t))
    return;
  Cost c = cost_add(s->nodes[from].cost, cost);
  int i = find_node(s, t);
  if (i < 0) {
    s->nodes = mem_grow(s->nodes, &s->cap, s->n + 1, sizeof *s->nodes);
    i = s->n++;
    s->nodes[i] = (Node){*t, c, from, step, false};
    return;
  }
  if (!s->nodes[i].done && cost_less(c, s->nodes[i].cost)) {
    s->nodes[i].cost = c;
    s->nodes[i].prev = from;
    s->nodes[i].step = step;
  }
}

static Step mk_step(Opcode op, int dim, int dim2, const int *axes, int naxes) {
  Step st = {op, dim, dim2, {0}, naxes};
  for (int i = 0; i < naxes; i++)
    st.axes[i] = axes[i];
  return st;
}

/* Cost of a collective step on `from` producing `to`: the bytes of its
 * OpDef's formula, the one explain reports. */
static Cost coll_cost(const Mesh *m, Opcode op, const Type *from, const Type *to, const int *axes, int naxes) {
  return (Cost){op_def(op)->group_bytes(local_bytes(m, from), group_of(m, axes, naxes)), 1, local_bytes(m, to)};
}

static Cost local_cost(const Mesh *m, const Type *to) { return (Cost){0, 0, local_bytes(m, to)}; }

/* Ordered sequences (length >= 1) of the axes in set, as callbacks. */
typedef void (*SeqFn)(Search *s, int from, const int *axes, int n, void *arg);

static void sequences(Search *s, int from, AxisSet set, int *buf, int len, SeqFn fn, void *arg) {
  if (len)
    fn(s, from, buf, len, arg);
  if (len == 3)   /* longer runs only save local copies; they cost search time on big meshes */
    return;
  for (int a = 0; a < s->m->naxes; a++)
    if (set & (1u << a)) {
      buf[len] = a;
      sequences(s, from, set & ~(1u << a), buf, len + 1, fn, arg);
    }
}

static AxisSet set_of(const int *axes, int n) {
  AxisSet r = 0;
  for (int i = 0; i < n; i++)
    r |= 1u << axes[i];
  return r;
}

static void append_axes(DimSpec *d, const int *axes, int n) {
  for (int i = 0; i < n; i++)
    d->axes[d->n++] = (int8_t)axes[i];
}

/* slice_block: replicated axes become dim d's minor ones. */
static void on_slice(Search *s, int from, const int *axes, int n, void *arg) {
  Type c0 = s->nodes[from].t;
  const Type *c = &c0;
  for (int d = 0; d < c->rank; d++) {
    Type t = *c;
    append_axes(&t.spec[d], axes, n);
    relax(s, from, &t, mk_step(IR_SLICE_BLOCK, d, 0, axes, n), local_cost(s->m, &t));
  }
}

/* reduce_scatter: unreduced axes become dim d's minor ones. */
static void on_reduce_scatter(Search *s, int from, const int *axes, int n, void *arg) {
  Type c0 = s->nodes[from].t;
  const Type *c = &c0;
  for (int d = 0; d < c->rank; d++) {
    Type t = *c;
    append_axes(&t.spec[d], axes, n);
    t.U &= ~set_of(axes, n);
    relax(s, from, &t, mk_step(IR_REDUCE_SCATTER, d, 0, axes, n), coll_cost(s->m, IR_REDUCE_SCATTER, c, &t, axes, n));
  }
}

/* The steps that take a dim's minor k axes: gather, embed, all-to-all. */
static void suffix_steps(Search *s, int from) {
  Type c0 = s->nodes[from].t;
  const Type *c = &c0;
  for (int d = 0; d < c->rank; d++) {
    DimSpec sp = c->spec[d];
    for (int k = 1; k <= sp.n; k++) {
      int axes[MAX_AXES];
      for (int i = 0; i < k; i++)
        axes[i] = sp.axes[sp.n - k + i];
      Type g = *c;
      g.spec[d].n = (uint8_t)(sp.n - k);
      relax(s, from, &g, mk_step(IR_ALL_GATHER, d, 0, axes, k), coll_cost(s->m, IR_ALL_GATHER, c, &g, axes, k));
      Type e = g;
      e.U |= set_of(axes, k);
      relax(s, from, &e, mk_step(IR_EMBED_BLOCK, d, 0, axes, k), local_cost(s->m, &e));
      for (int j = 0; j < c->rank; j++) {
        if (j == d)
          continue;
        Type a = g;
        append_axes(&a.spec[j], axes, k);
        /* split: the dim that becomes sharded; concat: the one gathered */
        relax(s, from, &a, mk_step(IR_ALL_TO_ALL, j, d, axes, k), coll_cost(s->m, IR_ALL_TO_ALL, c, &a, axes, k));
      }
    }
  }
}

/* Subsets of unreduced axes all-reduced, of replicated axes made unreduced. */
static void subset_steps(Search *s, int from) {
  Type c0 = s->nodes[from].t;
  const Type *c = &c0;
  AxisSet rep = s->movable & ~ty_dim_axes(c) & ~c->U;
  for (AxisSet sub = c->U; sub; sub = (sub - 1) & c->U) {
    int axes[MAX_AXES], n = 0;
    for (int a = 0; a < s->m->naxes; a++)
      if (sub & (1u << a))
        axes[n++] = a;
    Type t = *c;
    t.U &= ~sub;
    relax(s, from, &t, mk_step(IR_ALL_REDUCE, 0, 0, axes, n), coll_cost(s->m, IR_ALL_REDUCE, c, &t, axes, n));
  }
  for (AxisSet sub = rep; sub; sub = (sub - 1) & rep) {
    int axes[MAX_AXES], n = 0;
    for (int a = 0; a < s->m->naxes; a++)
      if (sub & (1u << a))
        axes[n++] = a;
    Type t = *c;
    t.U |= sub;
    relax(s, from, &t, mk_step(IR_ZERO_UNLESS_FIRST, 0, 0, axes, n), local_cost(s->m, &t));
  }
}

/* permute: every placement of the non-unreduced movable axes on dims with
 * the same local shape. */
static void place_axes(Search *s, int from, Type *t, const int *axes, int n, int i) {
  Type c0 = s->nodes[from].t;
  const Type *c = &c0;
  if (i == n) {
    for (int d = 0; d < c->rank; d++)
      if (ty_local_dim(s->m, t, d) != ty_local_dim(s->m, c, d) || t->shape[d] % ty_spec_parts(s->m, t->spec[d]))
        return;
    if (ty_same_sharding(t, c) || !blocks_move(s->m, c, t))
      return;
    Cost cost = coll_cost(s->m, IR_PERMUTE, c, t, NULL, 0);
    relax(s, from, t, mk_step(IR_PERMUTE, 0, 0, NULL, 0), cost);
    return;
  }
  place_axes(s, from, t, axes, n, i + 1);   /* axis i replicated */
  for (int d = 0; d < t->rank; d++)
    for (int at = 0; at <= t->spec[d].n; at++) {
      DimSpec saved = t->spec[d];
      for (int k = t->spec[d].n; k > at; k--)
        t->spec[d].axes[k] = t->spec[d].axes[k - 1];
      t->spec[d].axes[at] = (int8_t)axes[i];
      t->spec[d].n++;
      place_axes(s, from, t, axes, n, i + 1);
      t->spec[d] = saved;
    }
}

static void permute_steps(Search *s, int from) {
  const Type *c = &s->nodes[from].t;
  if (!ty_dim_axes(c) || world_size(s->m) > 4096)
    return;
  AxisSet cand = s->movable & ~c->U;
  int axes[MAX_AXES], n = 0;
  for (int a = 0; a < s->m->naxes; a++)
    if (cand & (1u << a))
      axes[n++] = a;
  Type t = *c;
  for (int d = 0; d < t.rank; d++)
    t.spec[d].n = 0;
  place_axes(s, from, &t, axes, n, 0);
}

static void expand(Search *s, int from) {
  int buf[MAX_AXES];
  Type c = s->nodes[from].t;
  AxisSet rep = s->movable & ~ty_dim_axes(&c) & ~c.U;
  sequences(s, from, rep, buf, 0, on_slice, NULL);
  suffix_steps(s, from);
  sequences(s, from, c.U & s->movable, buf, 0, on_reduce_scatter, NULL);
  subset_steps(s, from);
  permute_steps(s, from);
}

/* Dijkstra from node 0 to `to` (a physical state); returns the node of
 * `to`, whose prev chain is the plan. */
/* States beyond which the search gives up (large meshes only: on 3 axes and
 * rank 4 it visits a few hundred) and a plain plan is used instead. */
#define MAX_NODES 3000

static int search(Search *s, const Type *to) {
  /* SHDC_RESHARD_NODES lowers the limit, so tests can check the fallback. */
  static int limit = -1;
  if (limit < 0) {
    const char *e = getenv("SHDC_RESHARD_NODES");
    limit = e ? atoi(e) : MAX_NODES;
  }
  for (;;) {
    int best = -1;
    for (int i = 0; i < s->n; i++)
      if (!s->nodes[i].done && (best < 0 || cost_less(s->nodes[i].cost, s->nodes[best].cost)))
        best = i;
    if (best < 0 || s->n > limit)
      return -1;
    s->nodes[best].done = true;
    if (ty_same_sharding(&s->nodes[best].t, to))
      return best;
    expand(s, best);
  }
}

/* Appends a node reached from `from` by `step` (no search). */
static int chain(Search *s, int from, const Type *t, Step step) {
  s->nodes = mem_grow(s->nodes, &s->cap, s->n + 1, sizeof *s->nodes);
  s->nodes[s->n] = (Node){*t, {0, 0, 0}, from, step, true};
  return s->n++;
}

/* The plan that always works: gather every dim, all-reduce the unreduced
 * axes the target does not keep, slice to the target's dims, make the
 * target's other unreduced axes unreduced. */
static int plain_plan(Search *s, const Type *to) {
  s->n = 1;
  int at = 0;
  Type c = s->nodes[0].t;
  for (int d = 0; d < c.rank; d++)
    if (c.spec[d].n) {
      int axes[MAX_AXES];
      for (int i = 0; i < c.spec[d].n; i++)
        axes[i] = c.spec[d].axes[i];
      Step st = mk_step(IR_ALL_GATHER, d, 0, axes, c.spec[d].n);
      c.spec[d].n = 0;
      at = chain(s, at, &c, st);
    }
  int axes[MAX_AXES], n = 0;
  for (int a = 0; a < s->m->naxes; a++)
    if (c.U & ~to->U & (1u << a))
      axes[n++] = a;
  if (n) {
    c.U &= to->U;
    at = chain(s, at, &c, mk_step(IR_ALL_REDUCE, 0, 0, axes, n));
  }
  for (int d = 0; d < c.rank; d++)
    if (to->spec[d].n) {
      for (int i = 0; i < to->spec[d].n; i++)
        axes[i] = to->spec[d].axes[i];
      c.spec[d] = to->spec[d];
      at = chain(s, at, &c, mk_step(IR_SLICE_BLOCK, d, 0, axes, to->spec[d].n));
    }
  n = 0;
  for (int a = 0; a < s->m->naxes; a++)
    if (to->U & ~c.U & (1u << a))
      axes[n++] = a;
  if (n) {
    c.U |= to->U;
    at = chain(s, at, &c, mk_step(IR_ZERO_UNLESS_FIRST, 0, 0, axes, n));
  }
  return at;
}

/* ---- emitting the plan ---------------------------------------------------------- */

/* Runs the search from `from` to `to`; returns the end node (-1: none). */
static int plan(const Mesh *m, const Type *from, const Type *to, Search *s) {
  if (from->V != to->V)
    diag_ice("reshard cannot change varying axes (%s to %s)", ty_str(m, from), ty_str(m, to));
  Type src = physical(m, from), goal = physical(m, to);
  memset(s, 0, sizeof *s);
  s->m = m;
  for (int a = 0; a < m->naxes; a++)
    if (m->sizes[a] > 1 && !(to->V & (1u << a)))
      s->movable |= 1u << a;
  /* Node 0 is the physical source; the caller frees s->nodes. */
  s->nodes = mem_grow(NULL, &s->cap, 64, sizeof *s->nodes);
  s->nodes[0] = (Node){src, {0, 0, 0}, -1, {0}, false};
  s->n = 1;
  int end = search(s, &goal);
  return end >= 0 ? end : plain_plan(s, &goal);
}

int64_t part_reshard_cost(const Mesh *m, const Type *from, const Type *to, int *ncoll) {
  *ncoll = 0;
  if (ty_equal(from, to))
    return 0;
  Search s;
  int end = plan(m, from, to, &s);
  *ncoll = s.nodes[end].cost.ncoll;
  int64_t bytes = s.nodes[end].cost.bytes;
  free(s.nodes);
  return bytes;
}

Value *part_reshard(Module *mod, IrBlock *b, Pos pos, Value *v, const Type *to) {
  if (ty_equal(&v->type, to))
    return v;
  Search s;
  int end = plan(&mod->mesh, &v->type, to, &s);
  int path[256], len = 0;
  for (int i = end; i > 0 && len < 256; i = s.nodes[i].prev)
    path[len++] = i;
  for (int k = len - 1; k >= 0; k--) {
    Node *nd = &s.nodes[path[k]];
    Type next = nd->t;
    next.weak = false;
    Inst *in = ir_emit(mod, b, nd->step.op, pos, 1, &v, 1, &next);
    in->dim = nd->step.dim;
    in->dim2 = nd->step.dim2;
    in->fn = RED_SUM;
    in->naxes = nd->step.naxes;
    memcpy(in->axes, nd->step.axes, sizeof in->axes);
    v = in->results[0];
  }
  free(s.nodes);
  if (!ty_equal(&v->type, to))
    v = ir_emit1(mod, b, IR_RETYPE, pos, 1, &v, *to);
  return v;
}
