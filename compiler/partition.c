/* partition.c: the global-view IR becomes one SPMD program.
 *
 * Every value keeps its global sharded type; after this pass an
 * instruction computes this rank's block of its result from its operands'
 * blocks. Each operation has a rule of the same shape (XLA's partitioner):
 *
 *   1. choose the sharding each operand should have for a local computation;
 *   2. part_reshard the operands there (usually nothing, or a local slice);
 *   3. the local operation, whose result has a "natural" type;
 *   4. part_reshard the natural result to the type the program asked for
 *      (an all-reduce for a replicated sum, a reduce-scatter for a sharded
 *      one, nothing for an unreduced one...).
 *
 * This file holds the machinery (values, blocks, control flow) and the
 * builders the families' rules use; each operation's rule is its
 * OpDef.partition, in its family's file.
 *
 * Manual function bodies are already per-device along their manual axes:
 * their collectives pass through, and their explicit axes are partitioned
 * by the same rules. A collective those rules insert is over explicit axes
 * only, over which a condition in the body (varying over manual axes) is
 * invariant: under a varying if or for every device of its group takes the
 * branch alike, and the runtime makes a group's communicator among its
 * members, so it needs no check (a callee's collectives do: diverge.c).
 */
#include "ops.h"

struct Part {
  Module *mod;
  const Mesh *m;
  Value **map;         /* old value id -> new value */
  int cap;
  IrBlock *b;          /* the block being built */
};

static Value *get(Part *p, Value *old) {
  if (old->id >= p->cap || !p->map[old->id])
    diag_ice("partition: value %%%d has no SPMD value", old->id);
  return p->map[old->id];
}

void part_put(Part *p, Value *old, Value *nv) {
  if (old->id >= p->cap)
    diag_ice("partition: value id out of range");
  p->map[old->id] = nv;
  ir_copy_name(nv, old);
}

Module *part_mod(Part *p) { return p->mod; }
IrBlock *part_block(Part *p) { return p->b; }

Inst *part_copy(Part *p, Inst *in, Value **args) {
  Type *rt = arena_alloc(sizeof(Type) * (size_t)(in->nresults + 1));
  for (int i = 0; i < in->nresults; i++)
    rt[i] = in->results[i]->type;
  Inst *n = ir_emit(p->mod, p->b, in->op, in->pos, in->nargs, args, in->nresults, rt);
  ir_copy_attrs(n, in);
  for (int i = 0; i < in->nresults; i++)
    part_put(p, in->results[i], n->results[i]);
  return n;
}

Value *part_to(Part *p, Pos pos, Value *v, const Type *to) { return part_reshard(p->mod, p->b, pos, v, to); }

Value *part_local(Part *p, const Inst *in, int op, int nargs, Value **args, Type t) {
  Inst *n = ir_emit(p->mod, p->b, op, in->pos, nargs, args, 1, &t);
  ir_copy_attrs(n, in);
  return n->results[0];
}

/* ---- creation: zeros of the unreduced copies but one ------------------------- */

void part_created(Part *p, Inst *in, Value **args) {
  Type t = in->results[0]->type;
  bool zero_fill = in->op == IR_FILL && in->args[0]->def && in->args[0]->def->op == IR_CONST &&
                   in->args[0]->def->fval == 0;
  if (!t.U || zero_fill) {
    part_copy(p, in, args);
    return;
  }
  Type rep = t;
  AxisSet u = t.U;
  rep.U = 0;
  Value *v = part_local(p, in, in->op, in->nargs, args, rep);
  Inst *z = ir_emit(p->mod, p->b, IR_ZERO_UNLESS_FIRST, in->pos, 1, &v, 1, &t);
  for (int a = 0; a < p->m->naxes; a++)
    if (u & (1u << a))
      z->axes[z->naxes++] = a;
  part_put(p, in->results[0], z->results[0]);
}

/* An operation whose one operand has the result's shape: the operand is
 * resharded to the result's dim specs and U, then the instruction runs on
 * the blocks (unary functions, cast). */
void part_as_result(Part *p, Inst *in, Value **args) {
  Type want = args[0]->type;
  const Type *res = &in->results[0]->type;
  for (int d = 0; d < want.rank; d++)
    want.spec[d] = res->spec[d];
  want.U = res->U;
  Value *x = part_to(p, in->pos, args[0], &want);
  part_copy(p, in, &x);
}

/* The sharding an operand needs so that the local op sees matching blocks:
 * the result's spec on the operand's full-size dims, none on broadcast ones,
 * and the operand's own U, R and V. */
Type part_operand_target(const Type *op, const Type *res) {
  Type t = *op;
  int off = res->rank - op->rank;
  for (int d = 0; d < op->rank; d++) {
    if (op->shape[d] == res->shape[d + off])
      t.spec[d] = res->spec[d + off];
    else
      t.spec[d].n = 0;
  }
  /* An axis the operand is reduced over but the result shards (never in
   * valid programs; kept consistent for generated code). */
  t.R &= ~ty_dim_axes(&t);
  return t;
}

/* ---- blocks --------------------------------------------------------------------------------- */

static void part_block_into(Part *p, IrBlock *old, IrBlock *nb);

static void part_region_inst(Part *p, Inst *in, Value **args) {
  Inst *n = part_copy(p, in, args);
  for (int r = 0; r < in->nregions; r++) {
    IrBlock *ob = in->regions[r];
    Type *types = arena_alloc(sizeof(Type) * (size_t)(ob->nargs + 1));
    for (int i = 0; i < ob->nargs; i++)
      types[i] = ob->args[i]->type;
    IrBlock *nb = ir_block(ob->nargs, types, p->mod);
    ir_add_region(n, nb);
    for (int i = 0; i < ob->nargs; i++)
      part_put(p, ob->args[i], nb->args[i]);
    part_block_into(p, ob, nb);
  }
}

static void part_inst(Part *p, Inst *in) {
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(in->nargs + 1));
  for (int i = 0; i < in->nargs; i++)
    args[i] = get(p, in->args[i]);
  switch (in->op) {
  case IR_FOR: case IR_IF:
    part_region_inst(p, in, args);
    return;
  case IR_GRAD:
    diag_ice("grad survived autodiff");
  default: {
    const OpDef *d = op_def(in->op);
    if (d && d->partition)
      d->partition(p, in, args);
    else
      part_copy(p, in, args);
    return;
  }
  }
}

static void part_block_into(Part *p, IrBlock *old, IrBlock *nb) {
  IrBlock *saved = p->b;
  p->b = nb;
  for (int i = 0; i < old->insts.len; i++)
    part_inst(p, old->insts.data[i]);
  p->b = saved;
}

bool part_module(Module *mod) {
  Part p;
  memset(&p, 0, sizeof p);
  p.mod = mod;
  p.m = &mod->mesh;
  p.cap = mod->next_value + 1;
  p.map = mem_calloc((size_t)p.cap, sizeof(Value *));
  int errors = diag_error_count();
  for (int i = 0; i < mod->funcs.len; i++) {
    Func *f = mod->funcs.data[i];
    IrBlock *old = f->body;
    Type *types = arena_alloc(sizeof(Type) * (size_t)(old->nargs + 1));
    for (int k = 0; k < old->nargs; k++)
      types[k] = old->args[k]->type;
    IrBlock *nb = ir_block(old->nargs, types, mod);
    for (int k = 0; k < old->nargs; k++) {
      ir_copy_name(nb->args[k], old->args[k]);
      part_put(&p, old->args[k], nb->args[k]);
    }
    part_block_into(&p, old, nb);
    f->body = nb;
  }
  free(p.map);
  mod->spmd = true;
  return diag_error_count() == errors;
}
