/* emit_group.c: loop groups.
 *
 * Elementwise instructions of one local shape (the domain) and the sums of
 * such values over its trailing dims, in one block, are emitted as one
 * loop nest: a loop over the rows (the leading k dims), in it one pass over
 * each row's columns per round of row sums (their operands computed in the
 * pass), the row-shaped values as scalars, and a last pass writing the
 * full-shaped values other code reads. So a LayerNorm or RMSNorm forward or
 * backward, a softmax-like row computation, or an optimizer update of
 * several results (AdamW's m, v and parameter) reads its rows once from
 * memory and writes only what is used outside; values used only inside
 * the group get no buffer. Without row sums the group is a single loop
 * over the domain (k = -1) writing several results. Members are
 * elementwise instructions (of the domain's shape, or of the rows' shape
 * once k is known), sums over the trailing dims (float), and reshapes of
 * row values; the group is emitted at its last member, so each member's
 * operands are defined by then; an instruction outside the group that
 * reads a member ends the group before it, except a tape push of a member
 * (a row statistic saved for the backward pass): it is made right after the
 * group instead (the group's `after`), so that saving a LayerNorm's or
 * RMSNorm's statistics does not cut its loop nest in three; until the group
 * ends, nothing else may read that tape.
 *
 * A group also holds column sums: float sums of a full value over the
 * leading k dims (the rows), keepdims or not, such as a normalisation's
 * weight and bias gradients. Each has a buffer of the columns, zeroed
 * before the nest and added into (`acc[ic] += x`) in the row's last pass,
 * so it is complete only after the group: no member reads one (a reader,
 * whatever its shape, cannot join). The instructions that read one (the
 * all-reduce of a pending sum over a sharded batch, a mean's scale, the
 * code after) are moved after the group before anything else plans the
 * block (emit_schedule_module, after opt_module: explain, the emitter and
 * `emit-ir` see that order); one whose place matters (control flow, a
 * call, a tape, output) ends the group instead. The sum's order differs
 * from shd_reduce's (row by row, in f32 into the result), within float
 * tolerance. */
#include "emit_internal.h"

#define vname emit_vname
#define ctype emit_ctype
#define is_array emit_is_array

typedef enum { ROLE_NONE, ROLE_FULL, ROLE_ROW } Role;

/* The role a value of type t would have in group g: full (the domain's
 * shape), row (the rows' shape, keepdims or not), or none. */
static Role shape_role(Emit *e, const Group *g, const Type *t) {
  if (t->rank == 0)
    return ROLE_NONE;
  int64_t s[MAX_RANK];
  ty_local_shape(e->m, t, s);
  if (t->rank == g->rank) {
    bool same = true;
    for (int d = 0; d < t->rank; d++)
      same &= s[d] == g->dom[d];
    if (same)
      return ROLE_FULL;
  }
  if (g->k < 1)
    return ROLE_NONE;
  if (t->rank == g->k || t->rank == g->rank) {
    for (int d = 0; d < t->rank; d++)
      if (s[d] != (d < g->k ? g->dom[d] : 1))
        return ROLE_NONE;
    return ROLE_ROW;
  }
  return ROLE_NONE;
}

/* Group numbers are per block, and a nested block's group may read a
 * member of its enclosing block's group of the same number: membership is
 * the number and the block (e->group_block, the block planned or emitted). */
static bool is_member(Emit *e, const Value *v, int gi) {
  return e->gmember[v->id] == gi + 1 && v->def && v->def->parent == e->group_block;
}

/* The trailing dims k.. a float sum of x reduces, or 0 when it is not one. */
static int row_sum_split(Emit *e, const Inst *in) {
  if (in->op != IR_REDUCE || in->fn != RED_SUM || !is_array(in->results[0]) || !ty_is_float(in->args[0]->type.dtype))
    return 0;
  int r = in->args[0]->type.rank, k = r;
  while (k > 0 && (in->mask & (1u << (k - 1))))
    k--;
  if (k < 1 || k == r || in->mask != (((1u << r) - 1) & ~((1u << k) - 1)))
    return 0;
  return k;
}

/* The leading dims ..k-1 a float sum of x reduces (a column sum: the
 * result keeps the trailing dims, keepdims or not), or 0 when it is not one. */
static int col_sum_split(Emit *e, const Inst *in) {
  if (in->op != IR_REDUCE || in->fn != RED_SUM || !is_array(in->results[0]) || !ty_is_float(in->args[0]->type.dtype))
    return 0;
  int r = in->args[0]->type.rank, k = 0;
  while (k < r && (in->mask & (1u << k)))
    k++;
  if (k < 1 || k == r || in->mask != (1u << k) - 1)
    return 0;
  return k;
}

/* A member made in the group's loops but read only after the group. */
static bool is_col_member(Emit *e, const Inst *m) { return col_sum_split(e, m) != 0; }

/* The trailing dims a full value of g splits into columns: their count. */
static int64_t col_count(const Group *g) {
  int64_t n = 1;
  for (int d = g->k; d < g->rank; d++)
    n *= g->dom[d];
  return n;
}

static void group_add(Group *g, const Inst *in, int idx) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 8;
    g->mem = realloc(g->mem, sizeof(Inst *) * (size_t)g->cap);
    if (!g->mem)
      diag_ice("out of memory");
  }
  if (!g->n)
    g->first = idx;
  g->mem[g->n++] = in;
  g->last = idx;
}

/* Whether `in` can join group g (index gi), as which role; a group still
 * without row sums may take its first one (which fixes k). */
static Role joins(Emit *e, Group *g, int gi, const Inst *in, int *new_k) {
  *new_k = g->k;
  if (g->n >= GROUP_MAX)
    return ROLE_NONE;
  int k = col_sum_split(e, in);
  if (k) {
    /* a column sum: its operand of the domain's shape, summed over the
     * rows (the same k as the row sums) into a buffer of the columns */
    Group probe = *g;
    if (probe.k < 0)
      probe.k = k;
    if (probe.k != k || shape_role(e, &probe, &in->args[0]->type) != ROLE_FULL ||
        emit_local_count(e, &in->results[0]->type) != col_count(&probe))
      return ROLE_NONE;
    *new_k = k;
    return ROLE_FULL;   /* (its own kind: is_col_member) */
  }
  k = row_sum_split(e, in);
  if (k) {
    Group probe = *g;
    if (probe.k < 0)
      probe.k = k;
    if (probe.k != k || shape_role(e, &probe, &in->args[0]->type) != ROLE_FULL ||
        shape_role(e, &probe, &in->results[0]->type) != ROLE_ROW)
      return ROLE_NONE;
    *new_k = k;
    return ROLE_ROW;
  }
  if (in->op == IR_RESHAPE) {
    if (!is_member(e, in->args[0], gi) || shape_role(e, g, &in->args[0]->type) != ROLE_ROW)
      return ROLE_NONE;
    return shape_role(e, g, &in->results[0]->type) == ROLE_ROW ? ROLE_ROW : ROLE_NONE;
  }
  if (!emit_is_elementwise(in) || !is_array(in->results[0]) || e->fused[in->results[0]->id])
    return ROLE_NONE;
  return shape_role(e, g, &in->results[0]->type);
}

static void start_group(Emit *e, Group *g, const Inst *in) {
  memset(g, 0, sizeof *g);
  g->k = -1;
  int k = row_sum_split(e, in) ? row_sum_split(e, in) : col_sum_split(e, in);
  const Type *t = k ? &in->args[0]->type : &in->results[0]->type;
  g->rank = t->rank;
  ty_local_shape(e->m, t, g->dom);
  if (k)
    g->k = k;
}

/* The members a value's expression reads, through fused producers: calls
 * fn on each operand value that is not itself fused. */
static void leaf_operands(Emit *e, const Inst *in, void (*fn)(Emit *, const Value *, void *), void *arg) {
  for (int k = 0; k < in->nargs; k++) {
    const Value *v = in->args[k];
    if (e->fused[v->id] && v->def)
      leaf_operands(e, v->def, fn, arg);
    else
      fn(e, v, arg);
  }
}

typedef struct {
  int gi, stage;
  int *inside;     /* by value id: uses by members */
} StageScan;

static void note_operand(Emit *e, const Value *v, void *arg) {
  StageScan *sc = arg;
  if (!is_member(e, v, sc->gi))
    return;
  sc->inside[v->id]++;
  int st = e->fuse_depth[v->id];   /* the member's stage (fuse_depth is free scratch here) */
  if (st > sc->stage)
    sc->stage = st;
}

/* Decides the stages and which members need a buffer; false when the group
 * is not worth a loop nest of its own (one member). */
static bool finish_group(Emit *e, Group *g, int gi) {
  if (g->n < 2) {
    for (int i = 0; i < g->n; i++)
      e->gmember[g->mem[i]->results[0]->id] = 0;
    return false;
  }
  g->stage = calloc((size_t)g->n + 1, sizeof(int));
  int *inside = e->fuse_uses;   /* by value id; zero outside plan_fusion */
  StageScan sc = {gi, 0, inside};
  for (int i = 0; i < g->n; i++) {
    const Inst *m = g->mem[i];
    sc.stage = 0;
    leaf_operands(e, m, note_operand, &sc);
    int st = sc.stage + (row_sum_split(e, m) ? 1 : 0);
    g->stage[i] = st;
    e->fuse_depth[m->results[0]->id] = st;
    if (st > g->nstages)
      g->nstages = st;
  }
  for (int i = 0; i < g->n; i++) {
    const Value *v = g->mem[i]->results[0];
    e->nobuf[v->id] = inside[v->id] == e->uses[v->id] && !is_col_member(e, g->mem[i]);
    inside[v->id] = 0;
    e->fuse_depth[v->id] = 0;
  }
  g->ok = true;
  return true;
}

/* An instruction a loop group can hold: an elementwise array result or a
 * row sum over trailing dims. */
static bool group_candidate(Emit *e, const Inst *in) {
  return (emit_is_elementwise(in) && in->nresults && is_array(in->results[0])) || row_sum_split(e, in) ||
         col_sum_split(e, in);
}

/* Ends the group being built: kept in gs when worth a loop nest. */
static void close_group(Emit *e, const IrBlock *b, Group *cur, Group **gs, int *ng, int *cap) {
  for (int s = 0; s < cur->nsunk; s++) {
    const Inst *in = b->insts.data[cur->sunk[s]];
    for (int k = 0; k < in->nresults; k++)
      e->late[in->results[k]->id] = false;
  }
  if (!finish_group(e, cur, *ng)) {
    free(cur->mem);
    free(cur->after);
    free(cur->sunk);
    return;
  }
  if (*ng == *cap) {
    *cap = *cap ? 2 * *cap : 4;
    *gs = realloc(*gs, sizeof(Group) * (size_t)*cap);
    if (!*gs)
      diag_ice("out of memory");
  }
  (*gs)[(*ng)++] = *cur;
}

typedef struct {
  int gi;
  bool hit;
} MemberScan;

static void note_member(Emit *e, const Value *v, void *arg) {
  MemberScan *ms = arg;
  ms->hit |= is_member(e, v, ms->gi);
}

/* Whether `in` reads, through fused producers, a column sum of group gi or
 * a value made after the group (e->late): it cannot be a member. */
static void note_late(Emit *e, const Value *v, void *arg) {
  MemberScan *ms = arg;
  ms->hit |= e->late[v->id] || (is_member(e, v, ms->gi) && is_col_member(e, v->def));
}

/* An instruction reading a column sum that can be made after the group
 * instead (emit_schedule_module moves it there): no control flow, call,
 * tape or output, whose order against the instructions it passes matters;
 * a collective passes only computation (every rank moves it alike). */
static bool sinkable(const Inst *in) {
  if (in->nregions || in->op == IR_CALL || in->op == IR_YIELD || in->op == IR_RETURN || in->op == IR_TAPE_NEW ||
      in->op == IR_TAPE_PUSH || in->op == IR_TAPE_GET)
    return false;
  const OpDef *d = op_def(in->op);
  if (d && (d->flags & OPF_OUTPUT))
    return false;
  return !d || !(d->flags & OPF_EFFECT) || (d->flags & OPF_COLLECTIVE);
}

static bool is_collective(const Inst *in) {
  const OpDef *d = op_def(in->op);
  return d && (d->flags & OPF_COLLECTIVE);
}

/* Appends instruction index idx to a group's list (sunk or deferred). */
static void push_index(int **a, int *n, int *cap, int idx) {
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 4;
    *a = realloc(*a, sizeof(int) * (size_t)*cap);
    if (!*a)
      diag_ice("out of memory");
  }
  (*a)[(*n)++] = idx;
}

static void group_sink(Emit *e, Group *g, const Inst *in, int idx) {
  push_index(&g->sunk, &g->nsunk, &g->capsunk, idx);
  g->sunk_collective |= is_collective(in);
  for (int k = 0; k < in->nresults; k++)
    e->late[in->results[k]->id] = true;
}

typedef struct {
  const IrBlock *b;
  int gi, last;
} LastUse;

/* An operand from outside the group, defined in the block or one of its
 * arguments (a loop carry that a later instruction may take in place),
 * lives until the group is emitted. */
static void extend_last_use(Emit *e, const Value *v, void *arg) {
  const LastUse *lu = arg;
  if (((v->def && v->def->parent == lu->b) || v->arg_of == lu->b) && !is_member(e, v, lu->gi) &&
      e->last_use[v->id] < lu->last)
    e->last_use[v->id] = lu->last;
}

/* A tape push of a member (the pushed value itself, its tape and index
 * defined outside the group): it can wait until the group is made. */
static bool deferrable_push(Emit *e, const Inst *in, int gi) {
  return in->op == IR_TAPE_PUSH && is_member(e, in->args[2], gi) && !is_member(e, in->args[0], gi) &&
         !is_member(e, in->args[1], gi) && !e->fused[in->args[1]->id];
}

static void group_defer(Group *g, int idx) { push_index(&g->after, &g->nafter, &g->capafter, idx); }

/* Whether `in` reads a tape that a push waiting for group g writes. */
static bool reads_waiting_tape(const IrBlock *b, const Group *g, const Inst *in) {
  for (int a = 0; a < g->nafter; a++) {
    const Inst *push = b->insts.data[g->after[a]];
    const Value *tape = push->args[0];
    for (int k = 0; k < in->nargs; k++)
      if (in->args[k] == tape)
        return true;
  }
  return false;
}

/* Groups the block's elementwise instructions, row sums and column sums
 * (after plan_fusion); extends the operands' lifetimes to the groups'
 * emission points. */
void emit_plan_groups(Emit *e, const IrBlock *b, Group **out, int *nout) {
  e->group_block = b;
  Group *gs = NULL, cur;
  int ng = 0, cap = 0;
  bool open = false;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->nresults && e->fused[in->results[0]->id]) {
      /* computed in its consumer's loop, but in the block's order too: one
       * reading a column sum moves with its consumer (which reads it too) */
      MemberScan late = {ng, false};
      if (open)
        leaf_operands(e, in, note_late, &late);
      if (late.hit)
        group_sink(e, &cur, in, i);
      continue;
    }
    if (open) {
      int nk;
      MemberScan late = {ng, false};
      leaf_operands(e, in, note_late, &late);
      Role r = late.hit ? ROLE_NONE : joins(e, &cur, ng, in, &nk);
      if (r != ROLE_NONE) {
        cur.k = nk;
        group_add(&cur, in, i);
        e->gmember[in->results[0]->id] = ng + 1;
        continue;
      }
      MemberScan ms = {ng, false};
      leaf_operands(e, in, note_member, &ms);
      if (ms.hit && deferrable_push(e, in, ng) && !reads_waiting_tape(b, &cur, in)) {
        group_defer(&cur, i);
        continue;
      }
      if (late.hit && sinkable(in) && !reads_waiting_tape(b, &cur, in)) {
        group_sink(e, &cur, in, i);
        continue;
      }
      /* a sunk collective passes only computation: the collectives keep
       * the program's order */
      bool passes = cur.sunk_collective && is_collective(in);
      if (ms.hit || late.hit || passes || in->nregions || in->op == IR_CALL || group_candidate(e, in) ||
          reads_waiting_tape(b, &cur, in)) {
        close_group(e, b, &cur, &gs, &ng, &cap);
        open = false;
      }
    }
    if (!open && group_candidate(e, in)) {
      start_group(e, &cur, in);
      group_add(&cur, in, i);
      e->gmember[in->results[0]->id] = ng + 1;
      open = true;
    }
  }
  if (open)
    close_group(e, b, &cur, &gs, &ng, &cap);
  /* Members read their operands, and are made, at the group's last member. */
  for (int gi = 0; gi < ng; gi++) {
    Group *g = &gs[gi];
    for (int m = 0; m < g->n; m++) {
      int id = g->mem[m]->results[0]->id;
      if (e->last_use[id] < g->last)
        e->last_use[id] = g->last;
    }
    /* through fused producers: their operands are read in the group's loop too */
    LastUse lu = {b, gi, g->last};
    for (int m = 0; m < g->n; m++)
      leaf_operands(e, g->mem[m], extend_last_use, &lu);
    for (int a = 0; a < g->nafter; a++)   /* the tape and index of a push made after the group */
      leaf_operands(e, (const Inst *)b->insts.data[g->after[a]], extend_last_use, &lu);
  }
  *out = gs;
  *nout = ng;
}

void emit_free_groups(Group *gs, int n) {
  for (int i = 0; i < n; i++) {
    free(gs[i].mem);
    free(gs[i].stage);
    free(gs[i].after);
    free(gs[i].sunk);
  }
  free(gs);
}

/* By instruction index of the block: the group (index + 1) after which a
 * deferred tape push is made, or 0; malloc'd. */
int *emit_deferred_pushes(const IrBlock *b, const Group *gs, int ng) {
  int *d = calloc((size_t)b->insts.len + 1, sizeof(int));
  if (!d)
    diag_ice("out of memory");
  for (int gi = 0; gi < ng; gi++)
    for (int a = 0; a < gs[gi].nafter; a++)
      d[gs[gi].after[a]] = gi + 1;
  return d;
}

/* A member's value inside its group's loops: a local of the pass (full) or
 * a scalar of the row (row). */
const char *emit_group_operand(Emit *e, const Value *op) {
  const Group *g = e->cur_group;
  if (!g || !is_member(e, op, (int)(g - e->groups)) || is_col_member(e, op->def))
    return NULL;
  bool row = op->type.rank != g->rank || shape_role(e, g, &op->type) == ROLE_ROW;
  return arena_printf("%s_%s", vname(op), row ? "s" : "l");
}

static bool is_row_member(Emit *e, const Group *g, const Inst *m) {
  if (is_col_member(e, m))
    return false;
  return row_sum_split(e, m) || m->op == IR_RESHAPE || shape_role(e, g, &m->results[0]->type) == ROLE_ROW;
}

/* The full members needed in a pass: those the given values read, through
 * members, marked in need[] (by member index). */
static void need_full(Emit *e, const Group *g, int gi, const Value *v, bool *need) {
  if (!is_member(e, v, gi)) {
    if (e->fused[v->id] && v->def)
      for (int k = 0; k < v->def->nargs; k++)
        need_full(e, g, gi, v->def->args[k], need);
    return;
  }
  for (int m = 0; m < g->n; m++)
    if (g->mem[m]->results[0] == v) {
      if (need[m] || is_row_member(e, g, g->mem[m]))
        return;
      need[m] = true;
      for (int k = 0; k < g->mem[m]->nargs; k++)
        need_full(e, g, gi, g->mem[m]->args[k], need);
      return;
    }
}

/* (a loop, not memset: gcc cannot bound n here) */
static void clear_need(const Group *g, bool *need) {
  for (int m = 0; m < g->n; m++)
    need[m] = false;
}

static void emit_locals(Emit *e, const Group *g, const bool *need) {
  for (int m = 0; m < g->n; m++)
    if (need[m]) {
      const Value *v = g->mem[m]->results[0];
      emit_line(e, "const %s %s_l = %s;", ctype(&v->type), vname(v), emit_elementwise_expr(e, g->mem[m]));
    }
}

/* The row-major index of the domain's first n dims from the loop
 * counters i0..i{n-1}: "i1 + 8 * i0". */
static const char *flat_index(const Group *g, int n) {
  Str flat = {0};
  int64_t stride = 1;
  for (int d = n - 1; d >= 0; d--) {
    str_printf(&flat, "%s%si%d", flat.len ? " + " : "", stride == 1 ? "" : arena_printf("%lld * ", (long long)stride), d);
    stride *= g->dom[d];
  }
  const char *r = arena_strdup(str_cstr(&flat));
  free(flat.buf);
  return r;
}

/* The row-major index of the columns (dims k.. of the domain) from the
 * loop counters: "i2", or "i3 + 8 * i2". */
static const char *col_index(const Group *g) {
  Str flat = {0};
  int64_t stride = 1;
  for (int d = g->rank - 1; d >= g->k; d--) {
    str_printf(&flat, "%s%si%d", flat.len ? " + " : "", stride == 1 ? "" : arena_printf("%lld * ", (long long)stride), d);
    stride *= g->dom[d];
  }
  const char *r = arena_strdup(str_cstr(&flat));
  free(flat.buf);
  return r;
}

/* Opens the loops over dims from..rank-1 of the domain; `simd` puts the
 * vectorisation pragma (with its reductions) on the innermost. */
static void open_cols(Emit *e, const Group *g, int from, const char *simd) {
  for (int d = from; d < g->rank; d++) {
    if (d == g->rank - 1 && simd)
      emit_line(e, "#pragma omp simd%s", simd);
    emit_line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)g->dom[d], d);
    e->indent += 2;
  }
  emit_line(e, "const int64_t i = %s;", flat_index(g, g->rank));
  emit_line(e, "(void)i;");   /* a pass over broadcast operands only reads by i0.. */
}

void emit_group(Emit *e, const Group *g) {
  int gi = (int)(g - e->groups);
  emit_line(e, "/* one loop nest: lines %d to %d */", g->mem[0]->pos.line, g->mem[g->n - 1]->pos.line);
  for (int m = 0; m < g->n; m++) {
    const Value *v = g->mem[m]->results[0];
    if (!e->nobuf[v->id])
      emit_def_array(e, v, is_col_member(e, g->mem[m]));   /* a column sum starts at zero */
  }
  emit_line(e, "shd_span_begin_at(SHD_SPAN_ELEMENTWISE, \"elementwise\", %d, %d);", emit_file_index(e, g->mem[0]->pos),
            g->mem[0]->pos.line);
  e->cur_group = g;
  bool *need = calloc((size_t)g->n + 1, sizeof(bool));
  if (g->k < 0) {
    bool dims = false;
    for (int m = 0; m < g->n; m++)
      dims |= emit_needs_dims(e, g->mem[m]);
    Type dom = g->mem[0]->results[0]->type;
    int n = emit_open_loops(e, &dom, dims);
    for (int m = 0; m < g->n; m++)
      need[m] = true;
    emit_locals(e, g, need);
    for (int m = 0; m < g->n; m++) {
      const Value *v = g->mem[m]->results[0];
      if (!e->nobuf[v->id])
        emit_line(e, "%s[i] = %s_l;", vname(v), vname(v));
    }
    emit_close_loops(e, n);
  } else {
    for (int d = 0; d < g->k; d++) {
      emit_line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)g->dom[d], d);
      e->indent += 2;
    }
    emit_line(e, "const int64_t ir = %s;", flat_index(g, g->k));
    emit_line(e, "(void)ir;");
    for (int st = 0; st <= g->nstages; st++) {
      if (st > 0) {
        /* the row sums of this stage, their operands computed in one pass */
        Str red = {0};
        clear_need(g, need);
        for (int m = 0; m < g->n; m++)
          if (g->stage[m] == st && row_sum_split(e, g->mem[m])) {
            const Value *v = g->mem[m]->results[0];
            emit_line(e, "double %s_a = 0;", vname(v));
            str_printf(&red, "%s%s_a", red.len ? ", " : "", vname(v));
            need_full(e, g, gi, g->mem[m]->args[0], need);
          }
        open_cols(e, g, g->k, arena_printf(" reduction(+:%s)", str_cstr(&red)));
        free(red.buf);
        e->flat = "i";
        emit_locals(e, g, need);
        for (int m = 0; m < g->n; m++)
          if (g->stage[m] == st && row_sum_split(e, g->mem[m])) {
            const Value *x = g->mem[m]->args[0];
            emit_line(e, "%s_a += (double)%s;", vname(g->mem[m]->results[0]), emit_operand_at(e, x, &x->type));
          }
        emit_close_loops(e, g->rank - g->k);
      }
      e->flat = "ir";
      for (int m = 0; m < g->n; m++) {
        const Inst *in = g->mem[m];
        const Value *v = in->results[0];
        if (g->stage[m] != st || !is_row_member(e, g, in))
          continue;
        const char *x = row_sum_split(e, in) ? arena_printf("(%s)%s_a", ctype(&v->type), vname(v))
                        : in->op == IR_RESHAPE ? emit_group_operand(e, in->args[0])
                                               : emit_elementwise_expr(e, in);
        emit_line(e, "const %s %s_s = %s;", ctype(&v->type), vname(v), x);
        if (!e->nobuf[v->id])
          emit_line(e, "%s[ir] = %s_s;", vname(v), vname(v));
      }
    }
    /* the last pass: the full values read outside the group, and the
     * column sums (each column's element of this row added in) */
    clear_need(g, need);
    bool any = false, cols = false;
    for (int m = 0; m < g->n; m++) {
      const Value *v = g->mem[m]->results[0];
      if (is_col_member(e, g->mem[m])) {
        need_full(e, g, gi, g->mem[m]->args[0], need);
        any = cols = true;
      } else if (!is_row_member(e, g, g->mem[m]) && !e->nobuf[v->id]) {
        need_full(e, g, gi, v, need);
        any = true;
      }
    }
    if (any) {
      open_cols(e, g, g->k, "");
      e->flat = "i";
      if (cols)
        emit_line(e, "const int64_t ic = %s;", col_index(g));
      emit_locals(e, g, need);
      for (int m = 0; m < g->n; m++) {
        const Value *v = g->mem[m]->results[0];
        if (is_col_member(e, g->mem[m])) {
          const Value *x = g->mem[m]->args[0];
          emit_line(e, "%s[ic] += %s;", vname(v), emit_operand_at(e, x, &x->type));
        } else if (need[m] && !e->nobuf[v->id])
          emit_line(e, "%s[i] = %s_l;", vname(v), vname(v));
      }
      emit_close_loops(e, g->rank - g->k);
    }
    emit_close_loops(e, g->k);
  }
  free(need);
  e->cur_group = NULL;
  e->flat = NULL;
  emit_line(e, "shd_span_end();");
}

/* ---- scheduling: instructions reading a column sum after its group ---- */

/* Moves each group's sunk instructions that precede its last member to
 * right after it, in their order; the others stay. An instruction keeps
 * every operand's definition before it (the ones it passes define nothing
 * it reads: it read them before), and anything that reads its results
 * later is sunk too or ends the group after them. */
static void sink_after(IrBlock *b, const Group *g) {
  int n = 0;
  for (int s = 0; s < g->nsunk; s++)
    n += g->sunk[s] < g->last;
  if (!n)
    return;
  int span = g->last - g->first + 1, w = 0, s = 0;
  void **tmp = malloc(sizeof(void *) * (size_t)span);
  if (!tmp)
    diag_ice("out of memory");
  for (int i = g->first; i <= g->last; i++) {
    if (s < g->nsunk && g->sunk[s] == i) {
      s++;
      continue;
    }
    tmp[w++] = b->insts.data[i];
  }
  for (s = 0; s < g->nsunk && g->sunk[s] < g->last; s++)
    tmp[w++] = b->insts.data[g->sunk[s]];
  memcpy(&b->insts.data[g->first], tmp, sizeof(void *) * (size_t)span);
  free(tmp);
}

static void schedule_block(Emit *e, IrBlock *b) {
  ir_last_uses(b, e->last_use);
  emit_plan_fusion(e, b);
  Group *gs;
  int ng;
  emit_plan_groups(e, b, &gs, &ng);
  for (int gi = 0; gi < ng; gi++)
    sink_after(b, &gs[gi]);
  emit_free_groups(gs, ng);
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      schedule_block(e, in->regions[r]);
  }
}

void emit_schedule_module(Module *mod) {
  Emit e;
  emit_state_init(&e, NULL, mod, NULL);
  for (int i = 0; i < mod->funcs.len; i++)
    schedule_block(&e, ((Func *)mod->funcs.data[i])->body);
  emit_state_fini(&e);
}
