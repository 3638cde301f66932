/* diverge.c: calls under a varying condition that reach a collective the
 * devices skipping the call would never join ([E_DIVERGE]).
 *
 * In a manual body, a branch whose condition varies over axes V (or a loop
 * whose bound does) is taken by some devices along V and not by others.
 * The typechecker rejects the collectives written there, and partition.c
 * the ones the global rules insert for a partial manual body's explicit
 * axes. A call there runs its callee on the devices that take the branch
 * only: a collective inside it over any axis of V waits for devices that
 * never come. The callee's collectives are known only after partitioning
 * (the gradient of a value invariant over V, used where it varies, is a
 * psum over V that autodiff makes: JAX's transpose of pvary), so this pass
 * runs on the SPMD IR. A collective over other axes is fine: every device
 * of its group takes the branch alike (the condition is invariant there),
 * and the runtime makes a group's communicator among its members only.
 *
 * Linear: each function's axes are found once (memoized by function), and
 * each instruction is looked at once. */
#include "shdc.h"

typedef struct {
  Module *mod;
  PtrMap index;        /* Func * -> its place in mod->funcs */
  AxisSet *axes;       /* by place: the axes of every collective it reaches */
  char *state;         /* by place: 0 not yet, 1 in progress, 2 done */
  int errors;
} Dv;

static AxisSet inst_axes(const Mesh *m, const Inst *in) {
  if (!in->naxes)
    return m->naxes ? (AxisSet)((1u << m->naxes) - 1) : 0;
  AxisSet s = 0;
  for (int k = 0; k < in->naxes; k++)
    s |= 1u << in->axes[k];
  return s;
}


static AxisSet func_axes(Dv *d, Func *f);

/* The axes of the collectives a block reaches, its calls' included. */
static AxisSet block_axes(Dv *d, const IrBlock *b) {
  AxisSet s = 0;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (op_is_collective(in->op))
      s |= inst_axes(&d->mod->mesh, in);
    if (in->op == IR_CALL && in->callee)
      s |= func_axes(d, in->callee);
    for (int r = 0; r < in->nregions; r++)
      s |= block_axes(d, in->regions[r]);
  }
  return s;
}

static AxisSet func_axes(Dv *d, Func *f) {
  int k = ptrmap_get(&d->index, f);
  if (k < 0)
    return 0;
  if (d->state[k] == 0) {
    d->state[k] = 1;   /* the language has no recursion; a cycle counts once */
    d->axes[k] = block_axes(d, f->body);
    d->state[k] = 2;
  }
  return d->axes[k];
}


static void report(Dv *d, const Inst *call, AxisSet bad, const Inst *cond) {
  const Mesh *m = &d->mod->mesh;
  const char *name = call->callee->display ? call->callee->display : call->callee->name;
  bool branch = cond->op == IR_IF;
  const char *ax = ty_axes_str(m, bad), *what = branch ? "branch" : "loop";
  diag_error(call->pos, "E_DIVERGE",
             "this call of %s reaches a collective over %s under a %s that varies over %s: the devices that skip "
             "the %s never join it while the others wait. Keep the call's collectives off %s (the gradient of a "
             "value invariant over %s is summed over it: pcast the value to varying over %s first, so that each "
             "device keeps its own gradient), or call it outside the %s",
             name, ax, branch ? "condition" : "loop bound", ty_axes_str(m, ir_varying_axes(cond)), what, ax, ax, ax, what);
  diag_note(cond->pos, "the varying %s is here", branch ? "condition" : "loop bound");
  d->errors++;
}

/* Calls under the innermost varying if/for `cond` (NULL: none), whose
 * varying axes so far are V. */
static void scan(Dv *d, const IrBlock *b, const Inst *cond, AxisSet V) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (V && in->op == IR_CALL && in->callee) {
      AxisSet bad = func_axes(d, in->callee) & V;
      if (bad)
        report(d, in, bad, cond);
    }
    AxisSet v = ir_varying_axes(in);
    for (int r = 0; r < in->nregions; r++)
      scan(d, in->regions[r], v ? in : cond, V | v);
  }
}

bool diverge_check_calls(Module *mod) {
  Dv d = {.mod = mod};
  int n = mod->funcs.len;
  d.axes = mem_calloc((size_t)n + 1, sizeof *d.axes);
  d.state = mem_calloc((size_t)n + 1, 1);
  for (int i = 0; i < n; i++)
    ptrmap_put(&d.index, mod->funcs.data[i], i);
  for (int i = 0; i < n; i++) {
    Func *f = mod->funcs.data[i];
    if (f->manual)
      scan(&d, f->body, NULL, 0);
  }
  ptrmap_free(&d.index);
  free(d.axes);
  free(d.state);
  return d.errors == 0;
}
