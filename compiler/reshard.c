/* reshard.c: the one reshard every partitioning rule uses.
 *
 * Given a value of type S and a target type T of the same shape and dtype,
 * it appends the SPMD instructions that turn this rank's block of S into its
 * block of T. It works on the per-axis state model: each dim's axis list
 * must become T's list, unreduced axes must be reduced (or kept, or added),
 * reduced is a relabelling. One step at a time, cheapest first:
 *
 *   1. a whole-mesh permutation, when every rank's target block is exactly
 *      some other rank's source block (one send and one receive each);
 *   2. local slices (free): a dim whose axis list is a prefix of its target
 *      takes the next target axis if that axis is replicated;
 *   3. reduce-scatter: ... or if that axis is unreduced;
 *   4. all-to-all: a dim that must lose its minor axis hands it to a dim
 *      whose next target axis it is;
 *   5. all-reduce of the unreduced axes that no dim will take;
 *   6. embed (free) of a minor axis that the target makes unreduced, else
 *      all-gather of the axes a dim must lose (minor first);
 *   7. zero_unless_first to make replicated axes unreduced; retype for R.
 *
 * A dim only ever loses axes while its list is not a prefix of its target,
 * and only gains target axes in order, so the loop ends.
 */
#include "shdc.h"

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

/* Axes that neither type uses on a dim must keep their coordinate: the data
 * along them (copies, pending-sum pieces) must not move. */
static bool permute_plan(const Mesh *m, const Type *from, const Type *to, int *dest, int *src) {
  int n = world_size(m);
  if (n > 4096)
    return false;
  for (int d = 0; d < from->rank; d++)
    if (ty_local_dim(m, from, d) != ty_local_dim(m, to, d))
      return false;
  AxisSet fixed = ~(ty_dim_axes(from) | ty_dim_axes(to)) & ((1u << m->naxes) - 1);
  for (int r = 0; r < n; r++)
    dest[r] = -1;
  for (int r = 0; r < n; r++) {
    int64_t want[MAX_RANK], have[MAX_RANK];
    int cr[MAX_AXES], cs[MAX_AXES];
    part_block_offset(m, to, r, want);
    rank_coords(m, r, cr);
    src[r] = -1;
    for (int s = 0; s < n && src[r] < 0; s++) {
      rank_coords(m, s, cs);
      bool same = true;
      for (int a = 0; a < m->naxes && same; a++)
        if (fixed & (1u << a))
          same = cs[a] == cr[a];
      part_block_offset(m, from, s, have);
      for (int d = 0; d < from->rank && same; d++)
        same = have[d] == want[d];
      if (same)
        src[r] = s;
    }
    if (src[r] < 0 || dest[src[r]] >= 0)
      return false;
    dest[src[r]] = r;
  }
  return true;
}

void part_permute_tables(const Mesh *m, const Type *from, const Type *to, int *dest, int *src) {
  if (!permute_plan(m, from, to, dest, src))
    diag_ice("permute tables requested for a non-permutation");
}

/* ---- steps --------------------------------------------------------------------- */

typedef struct {
  Module *mod;
  IrBlock *b;
  Pos pos;
  const Mesh *m;
  Value *v;
  Type cur;
  const Type *to;
} Plan;

static Inst *step(Plan *p, Opcode op, Type next) {
  next.weak = false;
  Inst *in = ir_emit(p->mod, p->b, op, p->pos, 1, &p->v, 1, &next);
  p->v = in->results[0];
  p->cur = next;
  return in;
}

static void one_axis(Inst *in, int a) {
  in->naxes = 1;
  in->axes[0] = a;
}

static bool is_prefix(DimSpec a, DimSpec b) {
  if (a.n > b.n)
    return false;
  for (int i = 0; i < a.n; i++)
    if (a.axes[i] != b.axes[i])
      return false;
  return true;
}

static bool axis_free(const Type *t, int a) {
  AxisSet bit = 1u << a;
  return !(ty_dim_axes(t) & bit) && !(t->U & bit) && !(t->V & bit);
}

static bool try_slice(Plan *p) {
  for (int d = 0; d < p->cur.rank; d++) {
    DimSpec c = p->cur.spec[d], t = p->to->spec[d];
    if (c.n >= t.n || !is_prefix(c, t))
      continue;
    int a = t.axes[c.n];
    if (!axis_free(&p->cur, a))
      continue;
    Type next = p->cur;
    next.spec[d].axes[next.spec[d].n++] = (int8_t)a;
    next.R &= ~(1u << a);
    Inst *in = step(p, IR_SLICE_BLOCK, next);
    in->dim = d;
    one_axis(in, a);
    return true;
  }
  return false;
}

static bool try_reduce_scatter(Plan *p) {
  for (int d = 0; d < p->cur.rank; d++) {
    DimSpec c = p->cur.spec[d], t = p->to->spec[d];
    if (c.n >= t.n || !is_prefix(c, t))
      continue;
    int a = t.axes[c.n];
    if (!(p->cur.U & (1u << a)))
      continue;
    Type next = p->cur;
    next.spec[d].axes[next.spec[d].n++] = (int8_t)a;
    next.U &= ~(1u << a);
    Inst *in = step(p, IR_REDUCE_SCATTER, next);
    in->dim = d;
    in->fn = RED_SUM;
    one_axis(in, a);
    return true;
  }
  return false;
}

static bool try_all_to_all(Plan *p) {
  for (int i = 0; i < p->cur.rank; i++) {
    DimSpec ci = p->cur.spec[i];
    if (!ci.n || is_prefix(ci, p->to->spec[i]))
      continue;
    int a = ci.axes[ci.n - 1];
    for (int j = 0; j < p->cur.rank; j++) {
      DimSpec cj = p->cur.spec[j], tj = p->to->spec[j];
      if (j == i || cj.n >= tj.n || !is_prefix(cj, tj) || tj.axes[cj.n] != a)
        continue;
      Type next = p->cur;
      next.spec[i].n--;
      next.spec[j].axes[next.spec[j].n++] = (int8_t)a;
      Inst *in = step(p, IR_ALL_TO_ALL, next);
      in->dim = j;    /* split: the dim that becomes sharded */
      in->dim2 = i;   /* concat: the dim that is gathered */
      one_axis(in, a);
      return true;
    }
  }
  return false;
}

static bool try_all_reduce(Plan *p) {
  AxisSet keep = p->to->U | ty_dim_axes(p->to);
  AxisSet red = p->cur.U & ~keep;
  if (!red)
    return false;
  Type next = p->cur;
  next.U &= ~red;
  Inst *in = step(p, IR_ALL_REDUCE, next);
  in->fn = RED_SUM;
  for (int a = 0; a < p->m->naxes; a++)
    if (red & (1u << a))
      in->axes[in->naxes++] = a;
  return true;
}

static bool try_gather(Plan *p) {
  for (int d = 0; d < p->cur.rank; d++) {
    DimSpec c = p->cur.spec[d], t = p->to->spec[d];
    if (!c.n || is_prefix(c, t))
      continue;
    int a = c.axes[c.n - 1];
    if (p->to->U & (1u << a)) {
      /* sharded -> unreduced is free: place the block, zeros elsewhere */
      Type next = p->cur;
      next.spec[d].n--;
      next.U |= 1u << a;
      Inst *in = step(p, IR_EMBED_BLOCK, next);
      in->dim = d;
      one_axis(in, a);
      return true;
    }
    /* Gather every axis past the common prefix at once (one collective). */
    int keep = 0;
    while (keep < c.n && keep < t.n && c.axes[keep] == t.axes[keep])
      keep++;
    int first = keep;
    for (int k = keep; k < c.n; k++)
      if (p->to->U & (1u << c.axes[k]))
        first = k + 1;
    Type next = p->cur;
    next.spec[d].n = (uint8_t)first;
    Inst *in = step(p, IR_ALL_GATHER, next);
    in->dim = d;
    for (int k = first; k < c.n; k++)
      in->axes[in->naxes++] = c.axes[k];
    return true;
  }
  return false;
}

static void finish(Plan *p) {
  AxisSet add = p->to->U & ~p->cur.U;
  if (add) {
    Type next = p->cur;
    next.U |= add;
    next.R &= ~add;
    Inst *in = step(p, IR_ZERO_UNLESS_FIRST, next);
    for (int a = 0; a < p->m->naxes; a++)
      if (add & (1u << a))
        in->axes[in->naxes++] = a;
  }
  if (!ty_equal(&p->cur, p->to))
    step(p, IR_RETYPE, *p->to);
}

static bool dims_equal(const Type *a, const Type *b) {
  for (int d = 0; d < a->rank; d++)
    if (!ty_spec_equal(a->spec[d], b->spec[d]))
      return false;
  return true;
}

Value *part_reshard(Module *mod, IrBlock *b, Pos pos, Value *v, const Type *to) {
  if (ty_equal(&v->type, to))
    return v;
  Plan p = {mod, b, pos, &mod->mesh, v, v->type, to};
  if (v->type.V != to->V)
    diag_ice("reshard cannot change varying axes (%s to %s)", ty_str(p.m, &v->type), ty_str(p.m, to));
  /* 1. one permutation */
  if (!dims_equal(&p.cur, to) && p.cur.U == to->U) {
    int n = world_size(p.m);
    int *dest = arena_alloc(sizeof(int) * (size_t)n), *src = arena_alloc(sizeof(int) * (size_t)n);
    if (permute_plan(p.m, &p.cur, to, dest, src)) {
      Type next = p.cur;
      for (int d = 0; d < next.rank; d++)
        next.spec[d] = to->spec[d];
      step(&p, IR_PERMUTE, next);
      finish(&p);
      return p.v;
    }
  }
  for (int guard = 0; guard < 64; guard++) {
    if (try_slice(&p) || try_reduce_scatter(&p) || try_all_to_all(&p) || try_all_reduce(&p) || try_gather(&p))
      continue;
    break;
  }
  if (!dims_equal(&p.cur, to))
    diag_ice("reshard did not converge: %s to %s (stuck at %s)", ty_str(p.m, &v->type), ty_str(p.m, to),
             ty_str(p.m, &p.cur));
  finish(&p);
  return p.v;
}
