/* ad_clone.c: the autodiff's copies of code (autodiff.c). The forward pass
 * of a gradient is the differentiated function's body copied with every
 * call inlined; the reverse sweep copies a loop body or a branch again to
 * recompute what it does not take from a tape. Both walk the code with a
 * stack of frames of their own (a call chain may be as long as the
 * program), and both are capped by the instructions all gradients copy.
 */
#include "ad_internal.h"

/* ---- cloning (with inlining) ------------------------------------------------------------- */

/* Cloning walks a body and, at each call, the callee's body, and at each
 * for/if its regions. A call chain may be as long as the program, so the
 * walk keeps its own stack of frames on the heap instead of recursing:
 * each frame is a block being copied into `target`, and a callee's frame
 * maps its return values to the call's results when it ends. Every call is
 * inlined, so a function called from k places is copied k times; the
 * copies all gradients together may make are capped (MAX_CLONED), since a
 * program of functions that each call the next twice would otherwise
 * double with every level. */
#define MAX_CLONED 1000000

typedef struct {
  const IrBlock *src;
  int next;             /* src's next instruction */
  IrBlock *target;      /* where the copies go */
  const Inst *call;     /* the call whose callee src is the body of; NULL for a region */
  Pos saved_nested;
  bool saved_in_nested;
} CloneFrame;

typedef struct {
  CloneFrame *f;
  int n, cap;
  bool recompute;
  const IrBlock *region;
} CloneStack;

static CloneFrame *push_frame(CloneStack *st, const IrBlock *src, IrBlock *target, const Inst *call) {
  st->f = mem_grow(st->f, &st->cap, st->n + 1, sizeof *st->f);
  CloneFrame *fr = &st->f[st->n++];
  memset(fr, 0, sizeof *fr);
  fr->src = src;
  fr->target = target;
  fr->call = call;
  return fr;
}

static Value *retype_to(AD *a, Value *v, const Type *t) {
  if (ty_equal(&v->type, t))
    return v;
  return ad_emit1(a, IR_RETYPE, 1, &v, *t);
}

/* A call: its arguments become the callee's parameters, and its body is
 * copied next (a generated gradient inlined into another one marks where
 * its tape pushes came from). */
static void enter_call(AD *a, CloneStack *st, const Inst *in) {
  const Func *f = in->callee;
  for (int k = 0; k < f->body->nargs; k++)
    a->rm[f->body->args[k]->id] = retype_to(a, ad_primal(a, in->args[k]), &f->body->args[k]->type);
  CloneFrame *fr = push_frame(st, f->body, a->b, in);
  fr->saved_nested = a->nested;
  fr->saved_in_nested = a->in_nested;
  if (f->generated && !a->in_nested) {
    a->nested = in->pos;
    a->in_nested = true;
  }
}

static void leave_frame(AD *a, CloneStack *st) {
  CloneFrame *fr = &st->f[--st->n];
  if (fr->call) {
    a->nested = fr->saved_nested;
    a->in_nested = fr->saved_in_nested;
  }
}

/* Copies one instruction; a call or a region pushes frames instead. */
static void clone_one(AD *a, CloneStack *st, const Inst *in) {
  ad_grow(a);
  a->pos = in->pos;
  const OpDef *d = op_def(in->op);
  if (st->recompute && d && (d->flags & OPF_OUTPUT))
    return;
  if (st->recompute && in->op == IR_TAPE_PUSH && ptrmap_get(&a->fwd_pushes, in) >= 0 &&
      !ad_defined_in(in->args[0], st->region))
    return;   /* its tape, made outside the code computed again, holds the forward's entry */
  if (in->op == IR_CALL && in->fn != CALL_REMAT) {
    enter_call(a, st, in);
    return;
  }   /* remat(f)(args) stays a call: f's inside values are not kept (vjp_remat) */
  if (in->op == IR_GRAD) {
    ad_fail(a, in->pos, "this grad is part of the function %s that is being differentiated, and its own gradient "
                     "could not be built first (a call cycle?) [not supported yet]", a->fname);
    for (int k = 0; k < in->nresults; k++)
      a->rm[in->results[k]->id] = ad_zeros(a, &in->results[k]->type);
    return;
  }
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(in->nargs + 1));
  for (int i = 0; i < in->nargs; i++)
    args[i] = ad_primal(a, in->args[i]);
  Type *rt = arena_alloc(sizeof(Type) * (size_t)(in->nresults + 1));
  for (int i = 0; i < in->nresults; i++)
    rt[i] = in->results[i]->type;
  Inst *n = ir_emit(a->mod, a->b, in->op, in->pos, in->nargs, args, in->nresults, rt);
  ad_grow(a);
  ir_copy_attrs(n, in);
  for (int i = 0; i < in->nresults; i++) {
    a->rm[in->results[i]->id] = n->results[i];
    ir_copy_name(n->results[i], in->results[i]);
  }
  const Inst *tape = in->op == IR_TAPE_PUSH ? in->args[0]->def : NULL;
  bool ring = tape && tape->op == IR_TAPE_NEW && tape->ival;   /* a vjp_save's (ad_saved.c) */
  if (in->op == IR_TAPE_PUSH && (a->in_nested || ring)) {
    NestedPush *np = arena_alloc(sizeof *np);
    np->push = n;
    np->site = ring ? in->pos : a->nested;
    np->loop = in->pos;
    np->ring = ring;
    vec_push(&a->nested_pushes, np);
  }
  IrBlock *nbs[2];
  for (int r = 0; r < in->nregions; r++) {
    const IrBlock *src = in->regions[r];
    Type *ts = arena_alloc(sizeof(Type) * (size_t)(src->nargs + 1));
    for (int k = 0; k < src->nargs; k++)
      ts[k] = src->args[k]->type;
    nbs[r] = ir_block(src->nargs, ts, a->mod);
    ad_grow(a);
    ir_add_region(n, nbs[r]);
    for (int k = 0; k < src->nargs; k++)
      a->rm[src->args[k]->id] = nbs[r]->args[k];
  }
  for (int r = in->nregions - 1; r >= 0; r--)   /* region 0 is copied first */
    push_frame(st, in->regions[r], nbs[r], NULL);
}

/* Runs the frames until the stack is empty; a->b is where it was. */
static void clone_drain(AD *a, CloneStack *st) {
  IrBlock *saved = a->b;
  while (st->n > 0 && !a->too_big) {
    CloneFrame *fr = &st->f[st->n - 1];
    if (fr->next == fr->src->insts.len) {
      leave_frame(a, st);
      continue;
    }
    const Inst *in = fr->src->insts.data[fr->next++];
    a->b = fr->target;
    if (fr->call && in->op == IR_RETURN) {
      for (int k = 0; k < in->nargs; k++)
        a->rm[fr->call->results[k]->id] = retype_to(a, ad_primal(a, in->args[k]), &fr->call->results[k]->type);
      fr->next = fr->src->insts.len;
      continue;
    }
    if (++a->cloned > MAX_CLONED) {
      a->too_big = true;
      ad_fail(a, a->grad_pos, "differentiating %s copies more than %d instructions: every call inside it is "
                           "inlined, once per call site; call fewer functions from several places, or split the "
                           "computation into several gradients", a->fname, MAX_CLONED);
      break;
    }
    clone_one(a, st, in);
  }
  while (st->n > 0)
    leave_frame(a, st);
  free(st->f);
  a->b = saved;
}

void ad_inline_call(AD *a, const Inst *in) {
  CloneStack st = {NULL, 0, 0, false, NULL};
  enter_call(a, &st, in);
  clone_drain(a, &st);
}

void ad_recompute(AD *a, const Inst *in, const IrBlock *region) {
  CloneStack st = {NULL, 0, 0, true, region};
  clone_one(a, &st, in);
  clone_drain(a, &st);
}

/* Whether v is defined inside root (in it, or in a region nested in it). */
bool ad_defined_in(const Value *v, const IrBlock *root) {
  for (const IrBlock *p = v->def ? v->def->parent : v->arg_of; p; p = p->owner ? p->owner->parent : NULL)
    if (p == root)
      return true;
  return false;
}

