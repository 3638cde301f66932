/* sched.c: the module's plan of loops and buffers, and the pass that
 * orders each block for it.
 *
 * Input: a partitioned Module. sched_plan gives every block of every
 * function its plan (fuse.c's decisions, kept in a Schedule: schedule.h): the
 * values fused into their consumer's loop, the loop groups, the values
 * without a buffer, the tape pushes made after a group, where each
 * instruction's results are made and when each value dies. The emitter
 * writes what it says and explain simulates its buffers; both call
 * sched_plan on the module they are given, so what explain says about
 * memory is what the code does.
 *
 * sched_module is a pass of the driver's list, after opt_module: it moves
 * the instructions that read a loop group's column sum after the group
 * (fuse.c says which), so that the group is not cut there; explain, the
 * emitter and `emit-ir` see that order.
 *
 * Also here, for the families' emit functions and explain alike: how the
 * generated code gets an instruction's result (sched_result_kind) and the
 * bytes of the temporaries it takes (sched_temp_bytes).
 *
 * Invariant: a plan is of the module as it was planned; a change to the IR
 * makes it stale (sched_module frees its plan before it returns).
 */
#include "schedule.h"

/* ---- the plan -------------------------------------------------------------------------------- */

static BlockPlan *new_plan(Schedule *s, const IrBlock *b) {
  s->plans = mem_grow(s->plans, &s->capplans, s->nplans + 1, sizeof *s->plans);
  BlockPlan *bp = mem_calloc(1, sizeof *bp);
  bp->block = b;
  ptrmap_put(&s->index, b, s->nplans);
  s->plans[s->nplans++] = bp;
  return bp;
}

/* By instruction index: the group (index + 1) after which a deferred tape
 * push is made, or 0. */
static int *deferred_pushes(const BlockPlan *bp) {
  int *d = mem_calloc((size_t)bp->block->insts.len + 1, sizeof(int));
  for (int gi = 0; gi < bp->ngroups; gi++)
    for (int a = 0; a < bp->groups[gi].nafter; a++)
      d[bp->groups[gi].after[a]] = gi + 1;
  return d;
}

/* By instruction index: where its results are made. */
static int *made_at(const Schedule *s, const BlockPlan *bp) {
  const IrBlock *b = bp->block;
  int *at = mem_alloc(sizeof(int) * (size_t)(b->insts.len + 1));
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int g = in->nresults ? s->gmember[in->results[0]->id] : bp->deferred[i];
    at[i] = g ? bp->groups[g - 1].last : i;
  }
  return at;
}

/* b's plan, then its nested blocks' (each block's entries by value id are
 * its own values', so the order does not matter). */
static void plan_block(Schedule *s, const IrBlock *b) {
  BlockPlan *bp = new_plan(s, b);
  ir_last_uses(b, s->last_use);
  fuse_chains(s, b);
  fuse_groups(s, bp);
  bp->deferred = deferred_pushes(bp);
  bp->at = made_at(s, bp);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      plan_block(s, in->regions[r]);
  }
}

static void *by_id(const Schedule *s, size_t elem) { return mem_calloc((size_t)s->mod->next_value + 1, elem); }

Schedule *sched_plan(const Module *mod) {
  Schedule *s = mem_calloc(1, sizeof *s);
  s->mod = mod;
  s->uses = by_id(s, sizeof(int));
  s->last_use = by_id(s, sizeof(int));
  s->fused = by_id(s, sizeof(bool));
  s->gmember = by_id(s, sizeof(int));
  s->nobuf = by_id(s, sizeof(bool));
  s->kind = by_id(s, sizeof(unsigned char));
  s->scratch = by_id(s, sizeof(int));
  s->site = by_id(s, sizeof(int));
  s->depth = by_id(s, sizeof(int));
  s->late = by_id(s, sizeof(bool));
  for (int i = 0; i < mod->funcs.len; i++)
    ir_count_uses(((const Func *)mod->funcs.data[i])->body, s->uses);
  for (int i = 0; i < mod->funcs.len; i++)
    plan_block(s, ((const Func *)mod->funcs.data[i])->body);
  return s;
}

void sched_free(Schedule *s) {
  if (!s)
    return;
  for (int i = 0; i < s->nplans; i++) {
    fuse_free_groups(s->plans[i]);
    free(s->plans[i]->deferred);
    free(s->plans[i]->at);
    free(s->plans[i]);
  }
  free(s->plans);
  ptrmap_free(&s->index);
  free(s->uses);
  free(s->last_use);
  free(s->fused);
  free(s->gmember);
  free(s->nobuf);
  free(s->kind);
  free(s->scratch);
  free(s->site);
  free(s->depth);
  free(s->late);
  free(s);
}

const BlockPlan *sched_block(const Schedule *s, const IrBlock *b) {
  int i = ptrmap_get(&s->index, b);
  if (i < 0)
    diag_ice("sched_block: a block the plan does not hold");
  return s->plans[i];
}

/* ---- the pass: readers of a column sum after its group ------------------------------------------ */

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
  void **tmp = mem_alloc(sizeof(void *) * (size_t)span);
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

static void sink_block(const Schedule *s, IrBlock *b) {
  const BlockPlan *bp = sched_block(s, b);
  for (int gi = 0; gi < bp->ngroups; gi++)
    sink_after(b, &bp->groups[gi]);
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int r = 0; r < in->nregions; r++)
      sink_block(s, in->regions[r]);
  }
}

void sched_module(Module *mod) {
  Schedule *s = sched_plan(mod);
  for (int i = 0; i < mod->funcs.len; i++)
    sink_block(s, ((Func *)mod->funcs.data[i])->body);
  sched_free(s);
}

/* ---- buffers: how the generated code gets a result ----------------------------------------------- */

EmitResult sched_result_kind(const Module *mod, const Inst *in, int k) {
  const Value *r = in->results[k];
  if (r->type.rank == 0)
    return EMIT_NONE;
  switch (in->op) {
  case IR_CALL: case IR_FOR: case IR_IF:
    return EMIT_NONE;   /* made by the callee or the block */
  case IR_TAPE_GET:
    return EMIT_NONE;   /* a reference to a buffer the tape keeps (not simulated) */
  case IR_RETYPE:
    return in->args[0]->type.rank ? EMIT_VIEW : EMIT_ALLOC;
  default: {
    const OpDef *d = op_def(in->op);
    return d && d->result ? d->result(mod, in, k) : EMIT_ALLOC;
  }
  }
}

int64_t sched_temp_bytes(const Module *mod, const Inst *in) {
  const OpDef *d = op_def(in->op);
  return d && d->temp_bytes ? d->temp_bytes(mod, in) : 0;
}
