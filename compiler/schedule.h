/* schedule.h: the plan of a module's loops and buffers, made before emission
 * (fuse.c decides each block's fusion and loop groups, sched.c keeps the
 * module's plan) and read, never changed, by the emitter (emit_*.c) and by
 * explain's simulation of the buffers, so that the two cannot disagree.
 *
 * Everything by value id is the module's: a value belongs to one block (it
 * is defined there or is one of its arguments), and that block's plan sets
 * its entries.
 */
#ifndef SCHEDULE_H
#define SCHEDULE_H
#include "shdc.h"

/* A loop group: elementwise instructions, row sums and column sums of one
 * block emitted as one loop nest at its last member (fuse.c tells why). */
enum { GROUP_MAX = 96 };

/* What a member is, which fixes where the nest makes it: a local of each
 * pass over the domain (full), a scalar of the row (row, a reshape of a
 * row value, a row sum), or a buffer of the columns added into in the
 * row's last pass and complete only after the nest (column sum). */
typedef enum { MEMBER_FULL, MEMBER_ROW, MEMBER_ROW_VIEW, MEMBER_ROW_SUM, MEMBER_COL_SUM } MemberKind;

typedef struct Group {
  int first, last;          /* instruction indices in the block */
  int k;                    /* row dims (leading); -1: no row sums, one flat pass */
  int rank;
  int64_t dom[MAX_RANK];    /* local shape of the full values */
  const Inst **mem;         /* members, in block order */
  MemberKind *kind;         /* per member */
  int n, cap;
  int *after;               /* tape pushes of members made after the group: instruction indices */
  int nafter, capafter;
  int *sunk;                /* instructions reading a column sum: moved after the group (sched_module) */
  int nsunk, capsunk;
  bool sunk_collective;     /* one of them is a collective: another collective ends the group */
  int *stage;               /* per member: the pass after which it is known (row) or in which it is used (full) */
  int nstages;
} Group;

/* One block's plan. */
typedef struct {
  const IrBlock *block;
  Group *groups;
  int ngroups;
  int *deferred;   /* by instruction index: the group (index + 1) after which this tape push is made, or 0 */
  int *at;         /* by instruction index: where its results are made (its own index, or its group's last
                    * member's); a deferred push is made there after the group's members */
} BlockPlan;

/* The module's plan: every block of every function. */
typedef struct Schedule {
  const Module *mod;
  int *uses;           /* by value id: uses over the module */
  int *last_use;       /* by value id: the instruction of its block after which it dies, extended to where the
                        * code really reads it (a fused consumer, a loop group); -1: never used */
  bool *fused;         /* by value id: computed inside its one consumer's loop, no buffer */
  int *gmember;        /* by value id: the group (index + 1) of its block whose member defines it, or 0 */
  bool *nobuf;         /* by value id: a group member used only inside its group, no buffer */
  unsigned char *kind; /* by value id: a member's MemberKind */
  /* fuse.c's scratch by value id, zero between blocks */
  int *scratch, *site, *depth;
  bool *late;
  PtrMap index;        /* IrBlock * -> its plan in plans */
  BlockPlan **plans;
  int nplans, capplans;
} Schedule;

/* fuse.c: one block's decisions, in this order (fuse_groups reads the
 * fusion). fuse_chains marks the elementwise chains computed in their
 * consumer's loop and extends their operands' last uses (set before, by
 * ir_last_uses); fuse_groups makes the block's loop groups, marks their
 * members, those needing no buffer and the tape pushes made after a group,
 * and extends the last uses to the groups' emission points. */
void fuse_chains(Schedule *s, const IrBlock *b);
void fuse_groups(Schedule *s, BlockPlan *bp);
void fuse_free_groups(BlockPlan *bp);

/* sched.c: the plan of every block of mod (malloc'd; sched_free). */
Schedule *sched_plan(const Module *mod);
void sched_free(Schedule *s);
const BlockPlan *sched_block(const Schedule *s, const IrBlock *b);

/* The group (index + 1) of bp whose member defines v, or 0: a nested
 * block's group may read a member of its enclosing block's group of the
 * same number, so membership is the number and the block. */
static inline int sched_group_of(const Schedule *s, const BlockPlan *bp, const Value *v) {
  return v->def && v->def->parent == bp->block ? s->gmember[v->id] : 0;
}

/* No buffer of its own: fused into its consumer, or used only in its group. */
static inline bool sched_nobuf(const Schedule *s, const Value *v) { return s->fused[v->id] || s->nobuf[v->id]; }

#endif
