/* ad_saved.c: vjp_save(f, slot, slots=S)(args) and vjp_load(f, slot)(gy)
 * (docs/language.md, "Saved VJPs"), expanded before the gradients are built.
 *
 * A save and a load of the same f sit in the body of the same loop (at any
 * depth of branches in it, not in a nested loop). The save becomes f's
 * body inlined with its residuals pushed at entry slot of tapes of S
 * entries, made before the loop: the results of the operations a taped
 * loop keeps (autodiff.c's ad_walk_insts: contractions, reductions,
 * collectives, branches and nested loops that depend on the arguments the
 * loop computes), and those arguments themselves. An argument defined
 * outside the loop (a stage's weights) is the same at every iteration and
 * is not kept. The load becomes f's reverse sweep: the residuals read from
 * entry slot, the cheap code between them computed again, the cotangents
 * gy of f's results propagated back to each parameter. So a pipeline
 * schedule that runs a microbatch's backward ticks after its forward runs
 * each stage's forward once (1F1B without remat per stage), keeping S
 * microbatches' residuals, however many microbatches there are.
 */
#include "ad_internal.h"

typedef struct {
  Inst *call;
  Inst *loop;   /* the innermost loop around it, or NULL */
} Site;

static void collect(IrBlock *b, Inst *loop, Vec *saves, Vec *loads) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    if (in->op == IR_CALL && (in->fn == CALL_VJP_SAVE || in->fn == CALL_VJP_LOAD)) {
      Site *s = arena_alloc(sizeof *s);
      s->call = in;
      s->loop = loop;
      vec_push(in->fn == CALL_VJP_SAVE ? saves : loads, s);
    }
    for (int r = 0; r < in->nregions; r++)
      collect(in->regions[r], in->op == IR_FOR ? in : loop, saves, loads);
  }
}

static bool is_float_value(const Value *v) { return v->type.kind == TY_ARRAY && ty_is_float(v->type.dtype); }

/* Replaces `at` in its block by src's instructions (before it, keeping
 * it, when keep). */
static void splice(Inst *at, IrBlock *src, bool keep) {
  IrBlock *b = at->parent;
  Vec old = b->insts;
  b->insts = (Vec){0};
  for (int i = 0; i < old.len; i++) {
    Inst *in = old.data[i];
    if (in == at) {
      for (int k = 0; k < src->insts.len; k++) {
        Inst *n = src->insts.data[k];
        n->parent = b;
        vec_push(&b->insts, n);
      }
      if (!keep)
        continue;
    }
    vec_push(&b->insts, in);
  }
  free(old.data);
}

/* Every use of a value with an entry in map (by id) reads that entry. */
static void substitute(IrBlock *b, Value **map, int n) {
  for (int i = 0; i < b->insts.len; i++) {
    Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      if (in->args[k]->id < n && map[in->args[k]->id])
        in->args[k] = map[in->args[k]->id];
    for (int r = 0; r < in->nregions; r++)
      substitute(in->regions[r], map, n);
  }
}

/* The pair's expansion; the replacement of each save and load result goes
 * into map. */
static void expand(AD *a, Site *sv, Site *ld, Value **map) {
  Inst *save = sv->call, *load = ld->call, *loop = sv->loop;
  Func *f = save->callee;
  int np = f->body->nargs, nr = f->nresults;
  a->fname = ir_func_label(f);
  a->pos = a->grad_pos = save->pos;   /* ad_fail's errors (too many instructions inlined) point at the save */
  ad_grow(a);
  /* The tapes, made before the loop. */
  IrBlock *pre = ir_block(0, NULL, a->mod);
  LoopTapes lt;
  memset(&lt, 0, sizeof lt);
  lt.tb = pre;
  lt.csize = save->ival;
  lt.trips = -1;
  a->b = pre;
  lt.size = ad_const(a, DT_I32, (double)save->ival);
  /* The forward: f inlined, its residuals pushed at entry slot (NumPy's
   * slot % S, in 0..S whatever slot is). */
  IrBlock *fwd = ir_block(0, NULL, a->mod);
  a->b = fwd;
  lt.idx = ad_bin(a, BIN_MOD, save->args[np], ad_const(a, DT_I32, (double)save->ival));
  int nhead = fwd->insts.len;   /* the entry's code, which the reverse computes from the load's slot */
  const Inst **head = arena_alloc(sizeof(Inst *) * (size_t)(nhead + 1));
  for (int i = 0; i < nhead; i++)
    head[i] = fwd->insts.data[i];
  /* One value a parameter, so that each has a cotangent of its own: an
   * argument passed twice (f(x, x)) is passed as a retype each time. */
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(np + 1));
  for (int k = 0; k < np; k++) {
    args[k] = save->args[k];
    bool twice = false;
    for (int j = 0; j < np; j++)
      twice |= j != k && save->args[j] == save->args[k];
    if (twice)
      args[k] = ad_emit1(a, IR_RETYPE, 1, &args[k], args[k]->type);
  }
  Inst fake = {0};
  fake.op = IR_CALL;
  fake.callee = f;
  fake.nargs = np;
  fake.args = args;
  fake.nresults = nr;
  fake.results = save->results;
  ad_inline_call(a, &fake);
  if (a->too_big)
    return;
  for (int k = 0; k < np; k++)
    a->active[args[k]->id] = is_float_value(args[k]);
  for (int guard = 0; guard < 64 && ad_propagate_block(a, fwd); guard++)
    ;
  bool *dep = mem_calloc((size_t)a->mod->next_value + 1, sizeof(bool));
  const IrBlock *body = loop->regions[0];
  Value **kept = arena_alloc(sizeof(Value *) * (size_t)(np + 1));
  for (int k = 0; k < np; k++) {   /* each argument computed in the loop, once */
    Value *v = save->args[k];
    kept[k] = NULL;
    if (!ad_defined_in(v, body) || v->type.kind != TY_ARRAY)
      continue;
    dep[v->id] = dep[args[k]->id] = true;
    bool seen = false;
    for (int j = 0; j < k; j++)
      seen |= save->args[j] == v;
    if (seen)
      continue;
    a->b = pre;
    kept[k] = ad_new_tape(a, &v->type, lt.size);
  }
  Vec old = fwd->insts;
  fwd->insts = (Vec){0};
  ad_walk_insts(a, &lt, fwd, old, dep);
  free(old.data);
  free(dep);
  for (int k = 0; k < np; k++)
    if (kept[k])
      ad_push_at(a, fwd, save->pos, kept[k], lt.idx, save->args[k]);
  Vec fins = {0};   /* the forward's instructions, for the sweep */
  for (int i = 0; i < fwd->insts.len; i++) {
    bool entry = false;
    for (int k = 0; k < nhead; k++)
      entry |= head[k] == fwd->insts.data[i];
    if (!entry)
      vec_push(&fins, fwd->insts.data[i]);
  }
  Value **outs = arena_alloc(sizeof(Value *) * (size_t)(nr + 1));
  for (int k = 0; k < nr; k++)
    outs[k] = ad_primal(a, save->results[k]);
  /* The reverse: the residuals from entry slot, the rest computed again. */
  IrBlock *rev = ir_block(0, NULL, a->mod);
  a->b = rev;
  a->pos = load->pos;
  lt.rev_idx = ad_bin(a, BIN_MOD, load->args[load->nargs - 1], ad_const(a, DT_I32, (double)save->ival));
  a->rm[lt.idx->id] = lt.rev_idx;   /* a nested loop's entries are computed from it */
  for (int k = 0; k < np; k++) {
    if (!kept[k])
      continue;
    Inst *g = ir_emit(a->mod, rev, IR_TAPE_GET, load->pos, 2, (Value *[]){kept[k], lt.rev_idx}, 1,
                      &save->args[k]->type);
    ad_grow(a);
    a->rm[save->args[k]->id] = g->results[0];
  }
  for (int i = 0; i < fins.len; i++)
    ad_restore_or_clone(a, fins.data[i], body);
  for (int k = 0; k < nr; k++)
    if (a->active[outs[k]->id] && is_float_value(outs[k])) {
      Type want = ty_ct(&outs[k]->type);
      a->ct[outs[k]->id] = ad_to_type(a, load->args[k], &want);
    }
  for (int i = fins.len - 1; i >= 0 && !a->failed; i--)
    ad_vjp(a, fins.data[i]);
  for (int k = 0; k < np; k++) {
    Value *p = args[k];
    const Type *want = &load->results[k]->type;
    map[load->results[k]->id] = a->ct[p->id] ? ad_to_type(a, a->ct[p->id], want) : ad_zeros(a, want);
  }
  for (int k = 0; k < nr; k++)
    map[save->results[k]->id] = outs[k];
  free(fins.data);
  for (int i = 0; i < pre->insts.len; i++) {   /* rings: their entries are written again (explain's peak) */
    Inst *t = pre->insts.data[i];
    if (t->op == IR_TAPE_NEW)
      t->ival = 1;
  }
  splice(loop, pre, true);
  splice(save, fwd, false);
  splice(load, rev, false);
}

static const char *fname(const Inst *in) { return ir_func_label(in->callee); }

/* Pairs each save with the load of the same function in the same loop. */
static bool check_pairs(Vec *saves, Vec *loads, Site **partner) {
  bool ok = true;
  for (int i = 0; i < saves->len; i++) {
    Site *s = saves->data[i];
    partner[i] = NULL;
    if (!s->loop) {
      diag_error(s->call->pos, "E_ARG", "vjp_save(%s, ...) outside a loop: its entries are read by a vjp_load in a "
                 "later iteration; put both in the body of the loop (a schedule's tick loop)", fname(s->call));
      ok = false;
      continue;
    }
    for (int j = 0; j < i; j++) {
      Site *o = saves->data[j];
      if (o->loop == s->loop && o->call->callee == s->call->callee) {
        diag_error(s->call->pos, "E_ARG", "a second vjp_save(%s, ...) in the same loop: a loop body saves one "
                   "function's residuals at one place; wrap the calls in one function", fname(s->call));
        diag_note(o->call->pos, "the first");
        ok = false;
      }
    }
  }
  for (int j = 0; j < loads->len; j++) {
    Site *l = loads->data[j];
    int found = -1;
    for (int i = 0; i < saves->len && found < 0; i++) {
      Site *s = saves->data[i];
      if (s->loop && s->loop == l->loop && s->call->callee == l->call->callee)
        found = i;
    }
    if (found < 0) {
      diag_error(l->call->pos, "E_ARG", "vjp_load(%s, ...) has no vjp_save(%s, ...) in the same loop body: the "
                 "load reads the tapes that the save fills, so both go directly in one loop (not a nested one)",
                 fname(l->call), fname(l->call));
      ok = false;
    } else if (partner[found]) {
      diag_error(l->call->pos, "E_ARG", "a second vjp_load(%s, ...) in the same loop: one load a save", fname(l->call));
      ok = false;
    } else {
      partner[found] = l;
    }
  }
  for (int i = 0; i < saves->len; i++) {
    Site *s = saves->data[i];
    if (s->loop && !partner[i]) {
      diag_error(s->call->pos, "E_ARG", "vjp_save(%s, ...) without a vjp_load(%s, slot)(gy) in the same loop body: "
                 "nothing reads what it keeps; call %s(...) instead", fname(s->call), fname(s->call), fname(s->call));
      ok = false;
    }
  }
  return ok;
}

static bool expand_func(Module *mod, Func *fn) {
  Vec saves = {0}, loads = {0};
  collect(fn->body, NULL, &saves, &loads);
  if (!saves.len && !loads.len)
    return true;
  Site **partner = arena_alloc(sizeof(Site *) * (size_t)(saves.len + 1));
  bool ok = check_pairs(&saves, &loads, partner);
  for (int i = 0; ok && i < saves.len; i++) {
    AD a;
    memset(&a, 0, sizeof a);
    a.mod = mod;
    a.m = &mod->mesh;
    ad_grow(&a);
    int n = mod->next_value + 1;
    Value **map = mem_calloc((size_t)n, sizeof(Value *));
    expand(&a, saves.data[i], partner[i], map);
    substitute(fn->body, map, n);
    free(map);
    ok = !a.failed;
    ad_free(&a);
  }
  free(saves.data);
  free(loads.data);
  return ok;
}

bool ad_saved_module(Module *mod) {
  bool ok = true;
  for (int i = 0; i < mod->funcs.len; i++)
    ok &= expand_func(mod, mod->funcs.data[i]);
  return ok;
}
