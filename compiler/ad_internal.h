/* ad_internal.h: the state of the autodiff pass, shared by autodiff.c (the
 * pass: activity, tapes, the reverse sweep) and ad_clone.c (copying code,
 * with inlining). */
#ifndef AD_INTERNAL_H
#define AD_INTERNAL_H

#include "ops.h"

typedef struct LoopTapes LoopTapes;
struct LoopTapes {
  Inst *loop;
  LoopTapes *parent;    /* the loop of a nest whose entries index this one's, or NULL */
  IrBlock *tb;          /* where the tapes are made: before the loop, or its nest */
  Value **tapes;        /* one per carry */
  Value *size;          /* entries a tape has: the trips, times the parent's entries */
  int64_t csize;        /* ... when known at compile time, else -1 */
  int64_t trips;        /* the loop's trip count when constant, else -1 */
  Value *idx;           /* the iteration's entry, in the forward body */
  Value *rev_idx;       /* ... in the reverse loop's body (vjp_for) */
};

/* A forward instruction whose results are taped, and its loop. */
typedef struct {
  LoopTapes *lt;
  Value **tapes;        /* one per result */
} Saved;

struct AD {
  Module *mod;
  const Mesh *m;
  IrBlock *b;           /* where instructions go */
  Pos pos;
  Value **ct;           /* by value id: the cotangent accumulated so far */
  Value **rm;           /* by value id: the copy of a value in the current code */
  bool *active;         /* by value id */
  int cap;
  Vec tapes;            /* LoopTapes * */
  PtrMap tapes_index;   /* Inst * (a loop) -> its index in tapes */
  PtrMap saved_index;   /* Inst * -> its index in saved */
  Vec saved;            /* Saved * */
  PtrMap fwd_pushes;    /* Inst *: the forward pass's tape pushes (push_at) */
  bool failed;
  const char *fname;
  Pos grad_pos;         /* the grad call being built (notes point at it) */
  Pos nested;           /* while inlining a generated gradient: the call's place */
  bool in_nested;
  Vec nested_pushes;    /* NestedPush *: tape pushes copied from a generated gradient */
  long cloned;          /* instructions copied for all gradients so far */
  bool too_big;         /* ... more than MAX_CLONED: autodiff is abandoned */
  PtrMap vjp_index;     /* Func * called by remat -> index in vjps */
  Vec vjps;             /* Func *: each one's VJP function (build_vjp) */
};

/* A tape push of a gradient function that is itself being differentiated
 * (grad of a function that calls grad), or of a vjp_save: differentiating
 * through a tape is not supported, so an active push is an error at the
 * inner grad call (at the gradient, for a vjp_save's). */
typedef struct {
  const Inst *push;
  Pos site, loop;
  bool ring;            /* a vjp_save's push (ad_saved.c), in a function being differentiated */
} NestedPush;

void ad_grow(AD *a);   /* the by-id arrays, grown to every value id */
bool ad_defined_in(const Value *v, const IrBlock *root);   /* in root or a region nested in it */
/* Copies of code into a->b. ad_inline_call: a call, its callee's body
 * inlined (the forward pass of a gradient). ad_recompute: one instruction
 * of region (a loop body or a branch being computed again in the reverse
 * sweep), with its regions and calls inlined, without outputs (print,
 * save) and without the forward pass's pushes onto tapes made outside
 * region, which already hold their entries. */
void ad_inline_call(AD *a, const Inst *in);
void ad_recompute(AD *a, const Inst *in, const IrBlock *region);

/* autodiff.c's machinery, for ad_saved.c: activity, a loop body's
 * residuals saved on lt's tapes (ad_walk_insts over the instructions old,
 * into blk; dep marks what depends on the varying inputs), a tape and a
 * forward push, a forward instruction's copy in the reverse sweep, and one
 * instruction's VJP. */
bool ad_propagate_block(AD *a, const IrBlock *b);
void ad_walk_insts(AD *a, LoopTapes *lt, IrBlock *blk, Vec old, bool *dep);
Value *ad_new_tape(AD *a, const Type *el, Value *n);
void ad_push_at(AD *a, IrBlock *blk, Pos pos, Value *tape, Value *idx, Value *v);
void ad_restore_or_clone(AD *a, const Inst *bi, const IrBlock *region);
Value *ad_ct_or_zero(AD *a, Value *primal);
void ad_vjp(AD *a, Inst *in);
void ad_free(AD *a);
/* ad_saved.c: vjp_save and vjp_load expanded, in every function. */
bool ad_saved_module(Module *mod);

#endif
