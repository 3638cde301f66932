/* fuse.c: which loop each elementwise computation of a block runs in.
 *
 * Input: one block of the SPMD IR, the module's use counts and the block's
 * last uses (ir_last_uses) in a Schedule (schedule.h). Output, in the same
 * Schedule and the block's BlockPlan: the values fused into their
 * consumer's loop, the block's loop groups (members and their kinds, row
 * dims, stages, the tape pushes made after a group, the instructions sunk
 * after one), the members that need no buffer, and the last uses extended
 * to where the generated code really reads each value. It decides only;
 * sched.c keeps the plan for the whole module, emit_*.c writes the C it
 * says, explain.c simulates its buffers.
 *
 * Fusion: an elementwise array result used once, by an elementwise
 * instruction of the same block with the same local shape, is computed in
 * that instruction's loop: no buffer, one pass over memory instead of two.
 * Its operands then live until the consumer.
 *
 * Loop groups: elementwise instructions of one local shape (the domain) and
 * the sums of such values over its trailing dims, in one block, are emitted
 * as one loop nest: a loop over the rows (the leading k dims), in it one
 * pass over each row's columns per round of row sums (their operands
 * computed in the pass), the row-shaped values as scalars, and a last pass
 * writing the full-shaped values other code reads. So a LayerNorm or
 * RMSNorm forward or backward, a softmax-like row computation, or an
 * optimizer update of several results (AdamW's m, v and parameter) reads
 * its rows once from memory and writes only what is used outside; values
 * used only inside the group get no buffer. Without row sums the group is a
 * single loop over the domain (k = -1) writing several results. Members are
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
 * block (sched_module, after opt_module: explain, the emitter and
 * `emit-ir` see that order); one whose place matters (control flow, a
 * call, a tape, output) ends the group instead. The sum's order differs
 * from shd_reduce's (row by row, in f32 into the result), within float
 * tolerance.
 */
#include "schedule.h"

/* The block being planned. */
typedef struct {
  Schedule *s;
  const Mesh *m;
  const IrBlock *b;
} Fuse;

static bool is_array(const Value *v) { return v->type.rank > 0; }

static bool is_elementwise(const Inst *in) {
  const OpDef *d = op_def(in->op);
  return d && (d->flags & OPF_ELEMENTWISE);
}

static bool same_local_shape(const Mesh *m, const Type *a, const Type *b) {
  if (a->rank != b->rank || ty_local_count(m, a) != ty_local_count(m, b))
    return false;
  int64_t x[MAX_RANK], y[MAX_RANK];
  ty_local_shape(m, a, x);
  ty_local_shape(m, b, y);
  for (int d = 0; d < a->rank; d++)
    if (x[d] != y[d])
      return false;
  return true;
}

/* ---- fusion of elementwise chains -------------------------------------------------------- */

static void count_uses(const IrBlock *b, int *uses, bool nested) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      uses[in->args[k]->id] += nested ? 1000 : 1;  /* a use inside a loop or branch never fuses */
    for (int r = 0; r < in->nregions; r++)
      count_uses(in->regions[r], uses, true);
  }
}

/* A chain deeper than FUSE_DEPTH is cut into loops of that depth: the
 * emitter's recursion and the C expressions stay bounded however long a
 * program's chain of elementwise operations is. */
enum { FUSE_DEPTH = 32 };

/* Marks the operands of c fused into its loop; returns c's depth (fused
 * producers below it, plus one). */
static int fuse_operands(Schedule *s, const IrBlock *b, const Inst *c, const int *uses, const int *depth) {
  const Mesh *m = &s->mod->mesh;
  int deep = 1;
  for (int k = 0; k < c->nargs; k++) {
    const Value *v = c->args[k];
    const Inst *p = v->def;
    if (!p || p->parent != b || !is_elementwise(p) || !is_array(v) || uses[v->id] != 1 ||
        depth[v->id] >= FUSE_DEPTH || !same_local_shape(m, &v->type, &c->results[0]->type))
      continue;
    s->fused[v->id] = true;
    if (depth[v->id] + 1 > deep)
      deep = depth[v->id] + 1;
  }
  return deep;
}

void fuse_chains(Schedule *s, const IrBlock *b) {
  int *uses = s->scratch, *site = s->site, *depth = s->depth;
  count_uses(b, uses, false);
  int n = b->insts.len;
  for (int i = 0; i < n; i++) {
    const Inst *c = b->insts.data[i];
    if (is_elementwise(c) && is_array(c->results[0]))
      depth[c->results[0]->id] = fuse_operands(s, b, c, uses, depth);
  }
  /* Where each fused value is really computed: its final consumer. */
  for (int i = n - 1; i >= 0; i--) {
    const Inst *c = b->insts.data[i];
    int where = c->nresults && s->fused[c->results[0]->id] ? site[c->results[0]->id] : i;
    for (int k = 0; k < c->nargs; k++)
      if (s->fused[c->args[k]->id])
        site[c->args[k]->id] = where;
  }
  for (int i = 0; i < n; i++) {
    const Inst *p = b->insts.data[i];
    if (!p->nresults || !s->fused[p->results[0]->id])
      continue;
    int where = site[p->results[0]->id];
    for (int k = 0; k < p->nargs; k++) {
      const Value *v = p->args[k];
      if (v->def && v->def->parent == b && s->last_use[v->id] < where)
        s->last_use[v->id] = where;
    }
  }
  ir_clear_ids(b, uses, sizeof(int));
  ir_clear_ids(b, site, sizeof(int));
  ir_clear_ids(b, depth, sizeof(int));
}

/* ---- loop groups: shapes and members ------------------------------------------------------- */

typedef enum { ROLE_NONE, ROLE_FULL, ROLE_ROW } Role;

/* The role a value of type t would have in group g: full (the domain's
 * shape), row (the rows' shape, keepdims or not), or none. */
static Role shape_role(const Fuse *f, const Group *g, const Type *t) {
  if (t->rank == 0)
    return ROLE_NONE;
  int64_t s[MAX_RANK];
  ty_local_shape(f->m, t, s);
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

/* Group numbers are per block: membership is the number and the block. */
static bool is_member(const Fuse *f, const Value *v, int gi) {
  return f->s->gmember[v->id] == gi + 1 && v->def && v->def->parent == f->b;
}

/* The trailing dims k.. a float sum of x reduces, or 0 when it is not one
 * (nor is a bf16 sum: shd_reduce accumulates and rounds it once). */
static int row_sum_split(const Inst *in) {
  if (in->op != IR_REDUCE || in->fn != RED_SUM || !is_array(in->results[0]) || !ty_is_float(in->args[0]->type.dtype) ||
      in->args[0]->type.dtype == DT_BF16)
    return 0;
  int r = in->args[0]->type.rank, k = r;
  while (k > 0 && (in->mask & (1u << (k - 1))))
    k--;
  if (k < 1 || k == r || in->mask != (((1u << r) - 1) & ~((1u << k) - 1)))
    return 0;
  return k;
}

/* The leading dims ..k-1 a float sum of x reduces (a column sum: the
 * result keeps the trailing dims, keepdims or not), or 0 when it is not one
 * (a bf16 one is not, as for row sums). */
static int col_sum_split(const Inst *in) {
  if (in->op != IR_REDUCE || in->fn != RED_SUM || !is_array(in->results[0]) || !ty_is_float(in->args[0]->type.dtype) ||
      in->args[0]->type.dtype == DT_BF16)
    return 0;
  int r = in->args[0]->type.rank, k = 0;
  while (k < r && (in->mask & (1u << k)))
    k++;
  if (k < 1 || k == r || in->mask != (1u << k) - 1)
    return 0;
  return k;
}

/* The trailing dims a full value of g splits into columns: their count. */
static int64_t col_count(const Group *g) {
  int64_t n = 1;
  for (int d = g->k; d < g->rank; d++)
    n *= g->dom[d];
  return n;
}

static void group_add(Group *g, const Inst *in, int idx) {
  g->mem = mem_grow(g->mem, &g->cap, g->n + 1, sizeof *g->mem);
  if (!g->n)
    g->first = idx;
  g->mem[g->n++] = in;
  g->last = idx;
}

/* A sum of either kind joins g when its operand has g's domain, summed
 * over g's rows (the k of g's sums; a group without one takes this one's). */
static Role joins_sum(const Fuse *f, const Group *g, const Inst *in, int k, bool col, int *new_k) {
  Group probe = *g;
  if (probe.k < 0)
    probe.k = k;
  if (probe.k != k || shape_role(f, &probe, &in->args[0]->type) != ROLE_FULL)
    return ROLE_NONE;
  if (col ? ty_local_count(f->m, &in->results[0]->type) != col_count(&probe)
          : shape_role(f, &probe, &in->results[0]->type) != ROLE_ROW)
    return ROLE_NONE;
  *new_k = k;
  return col ? ROLE_FULL : ROLE_ROW;   /* (a column sum is its own kind: MEMBER_COL_SUM) */
}

/* Whether `in` can join group g (index gi), as which role; a group still
 * without row sums may take its first one (which fixes k). */
static Role joins(const Fuse *f, const Group *g, int gi, const Inst *in, int *new_k) {
  *new_k = g->k;
  if (g->n >= GROUP_MAX)
    return ROLE_NONE;
  int k = col_sum_split(in);
  if (k)
    return joins_sum(f, g, in, k, true, new_k);
  k = row_sum_split(in);
  if (k)
    return joins_sum(f, g, in, k, false, new_k);
  if (in->op == IR_RESHAPE) {
    if (!is_member(f, in->args[0], gi) || shape_role(f, g, &in->args[0]->type) != ROLE_ROW)
      return ROLE_NONE;
    return shape_role(f, g, &in->results[0]->type) == ROLE_ROW ? ROLE_ROW : ROLE_NONE;
  }
  if (!is_elementwise(in) || !is_array(in->results[0]) || f->s->fused[in->results[0]->id])
    return ROLE_NONE;
  return shape_role(f, g, &in->results[0]->type);
}

static void start_group(const Fuse *f, Group *g, const Inst *in) {
  memset(g, 0, sizeof *g);
  g->k = -1;
  int k = row_sum_split(in) ? row_sum_split(in) : col_sum_split(in);
  const Type *t = k ? &in->args[0]->type : &in->results[0]->type;
  g->rank = t->rank;
  ty_local_shape(f->m, t, g->dom);
  if (k)
    g->k = k;
}

/* The members a value's expression reads, through fused producers: calls
 * fn on each operand value that is not itself fused. */
static void leaf_operands(const Fuse *f, const Inst *in, void (*fn)(const Fuse *, const Value *, void *), void *arg) {
  for (int k = 0; k < in->nargs; k++) {
    const Value *v = in->args[k];
    if (f->s->fused[v->id] && v->def)
      leaf_operands(f, v->def, fn, arg);
    else
      fn(f, v, arg);
  }
}

/* ---- loop groups: closing one ----------------------------------------------------------------- */

typedef struct {
  int gi, stage;
  int *inside;     /* by value id: uses by members */
} StageScan;

static void note_operand(const Fuse *f, const Value *v, void *arg) {
  StageScan *sc = arg;
  if (!is_member(f, v, sc->gi))
    return;
  sc->inside[v->id]++;
  int st = f->s->depth[v->id];   /* the member's stage (depth is free scratch here) */
  if (st > sc->stage)
    sc->stage = st;
}

/* How the nest makes member m of g (its k final). */
static MemberKind member_kind(const Fuse *f, const Group *g, const Inst *m) {
  if (col_sum_split(m))
    return MEMBER_COL_SUM;
  if (row_sum_split(m))
    return MEMBER_ROW_SUM;
  if (m->op == IR_RESHAPE)
    return MEMBER_ROW_VIEW;
  return shape_role(f, g, &m->results[0]->type) == ROLE_ROW ? MEMBER_ROW : MEMBER_FULL;
}

/* Decides the members' kinds and stages and which need a buffer; false
 * when the group is not worth a loop nest of its own (one member). */
static bool finish_group(const Fuse *f, Group *g, int gi) {
  Schedule *s = f->s;
  if (g->n < 2) {
    for (int i = 0; i < g->n; i++)
      s->gmember[g->mem[i]->results[0]->id] = 0;
    return false;
  }
  g->stage = mem_calloc((size_t)g->n + 1, sizeof(int));
  g->kind = mem_calloc((size_t)g->n + 1, sizeof(MemberKind));
  StageScan sc = {gi, 0, s->scratch};   /* by value id; zero outside fuse_chains */
  for (int i = 0; i < g->n; i++) {
    const Inst *m = g->mem[i];
    sc.stage = 0;
    leaf_operands(f, m, note_operand, &sc);
    g->kind[i] = member_kind(f, g, m);
    int st = sc.stage + (g->kind[i] == MEMBER_ROW_SUM ? 1 : 0);
    g->stage[i] = st;
    s->depth[m->results[0]->id] = st;
    if (st > g->nstages)
      g->nstages = st;
  }
  for (int i = 0; i < g->n; i++) {
    const Value *v = g->mem[i]->results[0];
    s->nobuf[v->id] = sc.inside[v->id] == s->uses[v->id] && g->kind[i] != MEMBER_COL_SUM;
    s->kind[v->id] = (unsigned char)g->kind[i];
    sc.inside[v->id] = 0;
    s->depth[v->id] = 0;
  }
  return true;
}

static void free_group(Group *g) {
  free(g->mem);
  free(g->kind);
  free(g->stage);
  free(g->after);
  free(g->sunk);
}

/* Ends the group being built: kept in bp when worth a loop nest. */
static void close_group(const Fuse *f, Group *cur, BlockPlan *bp, int *cap) {
  for (int s = 0; s < cur->nsunk; s++) {
    const Inst *in = f->b->insts.data[cur->sunk[s]];
    for (int k = 0; k < in->nresults; k++)
      f->s->late[in->results[k]->id] = false;
  }
  if (!finish_group(f, cur, bp->ngroups)) {
    free_group(cur);
    return;
  }
  bp->groups = mem_grow(bp->groups, cap, bp->ngroups + 1, sizeof *bp->groups);
  bp->groups[bp->ngroups++] = *cur;
}

/* ---- loop groups: what ends one, what waits for one -------------------------------------------- */

typedef struct {
  int gi;
  bool hit;
} MemberScan;

static void note_member(const Fuse *f, const Value *v, void *arg) {
  MemberScan *ms = arg;
  ms->hit |= is_member(f, v, ms->gi);
}

/* Whether `in` reads, through fused producers, a column sum of group gi or
 * a value made after the group (late): it cannot be a member. */
static void note_late(const Fuse *f, const Value *v, void *arg) {
  MemberScan *ms = arg;
  ms->hit |= f->s->late[v->id] || (is_member(f, v, ms->gi) && col_sum_split(v->def));
}

static bool reads(const Fuse *f, const Inst *in, int gi, void (*note)(const Fuse *, const Value *, void *)) {
  MemberScan ms = {gi, false};
  leaf_operands(f, in, note, &ms);
  return ms.hit;
}

/* An instruction reading a column sum that can be made after the group
 * instead (sched_module moves it there): no control flow, call, tape or
 * output, whose order against the instructions it passes matters; a
 * collective passes only computation (every rank moves it alike). */
static bool sinkable(const Inst *in) {
  if (in->nregions || in->op == IR_CALL || in->op == IR_YIELD || in->op == IR_RETURN || in->op == IR_TAPE_NEW ||
      in->op == IR_TAPE_PUSH || in->op == IR_TAPE_GET)
    return false;
  const OpDef *d = op_def(in->op);
  if (d && (d->flags & OPF_OUTPUT))
    return false;
  return !d || !(d->flags & OPF_EFFECT) || (d->flags & OPF_COLLECTIVE);
}

/* Appends instruction index idx to a group's list (sunk or deferred). */
static void push_index(int **a, int *n, int *cap, int idx) {
  *a = mem_grow(*a, cap, *n + 1, sizeof **a);
  (*a)[(*n)++] = idx;
}

static void group_sink(const Fuse *f, Group *g, const Inst *in, int idx) {
  push_index(&g->sunk, &g->nsunk, &g->capsunk, idx);
  g->sunk_collective |= op_is_collective(in->op);
  for (int k = 0; k < in->nresults; k++)
    f->s->late[in->results[k]->id] = true;
}

/* A tape push of a member (the pushed value itself, its tape and index
 * defined outside the group): it can wait until the group is made. */
static bool deferrable_push(const Fuse *f, const Inst *in, int gi) {
  return in->op == IR_TAPE_PUSH && is_member(f, in->args[2], gi) && !is_member(f, in->args[0], gi) &&
         !is_member(f, in->args[1], gi) && !f->s->fused[in->args[1]->id];
}

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

/* An instruction that can be a group's first member: an elementwise array
 * result, a row sum over trailing dims or a column sum over leading ones. */
static bool group_candidate(const Inst *in) {
  return (is_elementwise(in) && in->nresults && is_array(in->results[0])) || row_sum_split(in) ||
         col_sum_split(in);
}

/* ---- loop groups: the block ------------------------------------------------------------------------ */

/* An operand from outside the group, defined in the block or one of its
 * arguments (a loop carry that a later instruction may take in place),
 * lives until the group is emitted. */
typedef struct {
  int gi, last;
} LastUse;

static void extend_last_use(const Fuse *f, const Value *v, void *arg) {
  const LastUse *lu = arg;
  if (((v->def && v->def->parent == f->b) || v->arg_of == f->b) && !is_member(f, v, lu->gi) &&
      f->s->last_use[v->id] < lu->last)
    f->s->last_use[v->id] = lu->last;
}

/* Members read their operands, and are made, at the group's last member;
 * so do the tape and index of a push made after the group. */
static void extend_to_group(const Fuse *f, const Group *g, int gi) {
  for (int m = 0; m < g->n; m++) {
    int id = g->mem[m]->results[0]->id;
    if (f->s->last_use[id] < g->last)
      f->s->last_use[id] = g->last;
  }
  /* through fused producers: their operands are read in the group's loop too */
  LastUse lu = {gi, g->last};
  for (int m = 0; m < g->n; m++)
    leaf_operands(f, g->mem[m], extend_last_use, &lu);
  for (int a = 0; a < g->nafter; a++)
    leaf_operands(f, (const Inst *)f->b->insts.data[g->after[a]], extend_last_use, &lu);
}

/* What `in` does to the open group cur (number gi): joins it (true), waits
 * for it (a deferred push, a sunk reader of a column sum: true), or
 * neither (false; *ends: it ends the group before it). */
static bool add_to_group(const Fuse *f, Group *cur, int gi, const Inst *in, int i, bool *ends) {
  int nk;
  bool late = reads(f, in, gi, note_late);
  Role r = late ? ROLE_NONE : joins(f, cur, gi, in, &nk);
  if (r != ROLE_NONE) {
    cur->k = nk;
    group_add(cur, in, i);
    f->s->gmember[in->results[0]->id] = gi + 1;
    return true;
  }
  bool hit = reads(f, in, gi, note_member), waits = reads_waiting_tape(f->b, cur, in);
  if (hit && deferrable_push(f, in, gi) && !waits) {
    push_index(&cur->after, &cur->nafter, &cur->capafter, i);
    return true;
  }
  if (late && sinkable(in) && !waits) {
    group_sink(f, cur, in, i);
    return true;
  }
  /* a sunk collective passes only computation: the collectives keep the
   * program's order */
  bool passes = cur->sunk_collective && op_is_collective(in->op);
  *ends = hit || late || passes || in->nregions || in->op == IR_CALL || group_candidate(in) || waits;
  return false;
}

void fuse_groups(Schedule *s, BlockPlan *bp) {
  const IrBlock *b = bp->block;
  Fuse f = {s, &s->mod->mesh, b};
  Group cur;
  int cap = 0;
  bool open = false;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->nresults && s->fused[in->results[0]->id]) {
      /* computed in its consumer's loop, but in the block's order too: one
       * reading a column sum moves with its consumer (which reads it too) */
      if (open && reads(&f, in, bp->ngroups, note_late))
        group_sink(&f, &cur, in, i);
      continue;
    }
    bool ends = false;
    if (open && add_to_group(&f, &cur, bp->ngroups, in, i, &ends))
      continue;
    if (ends) {
      close_group(&f, &cur, bp, &cap);
      open = false;
    }
    if (!open && group_candidate(in)) {
      start_group(&f, &cur, in);
      group_add(&cur, in, i);
      s->gmember[in->results[0]->id] = bp->ngroups + 1;
      open = true;
    }
  }
  if (open)
    close_group(&f, &cur, bp, &cap);
  for (int gi = 0; gi < bp->ngroups; gi++)
    extend_to_group(&f, &bp->groups[gi], gi);
}

void fuse_free_groups(BlockPlan *bp) {
  for (int i = 0; i < bp->ngroups; i++)
    free_group(&bp->groups[i]);
  free(bp->groups);
}
