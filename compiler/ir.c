/* ir.c: the IR shared by the global view (after lowering) and the SPMD view
 * (after partitioning): functions of structured blocks of instructions in
 * SSA form. A `for` carries values through its block arguments and yields
 * the next ones; an `if` yields its results from both blocks.
 *
 * Every value carries its global sharded type; in the SPMD IR an
 * instruction works on the local block that type implies, and the printer
 * shows local shapes. The text form is documented in docs/spmd-ir.md, and
 * the verifier checks the invariants every pass relies on.
 */
#include "ops.h"

Module *ir_module(const Mesh *m) {
  Module *mod = arena_alloc(sizeof *mod);
  mod->mesh = *m;
  return mod;
}

Value *ir_value(Module *mod, Type t) {
  Value *v = arena_alloc(sizeof *v);
  v->id = mod->next_value++;
  v->type = t;
  v->type.weak = false;
  return v;
}

IrBlock *ir_block(int nargs, const Type *types, Module *mod) {
  IrBlock *b = arena_alloc(sizeof *b);
  b->nargs = nargs;
  b->args = arena_alloc(sizeof(Value *) * (size_t)(nargs + 1));
  for (int i = 0; i < nargs; i++) {
    b->args[i] = ir_value(mod, types[i]);
    b->args[i]->arg_of = b;
    b->args[i]->index = i;
  }
  return b;
}

Func *ir_func(Module *mod, const char *name, int nparams, const Type *params, int nresults, const Type *results) {
  Func *f = arena_alloc(sizeof *f);
  f->name = name;
  f->body = ir_block(nparams, params, mod);
  f->nresults = nresults;
  f->results = arena_alloc(sizeof(Type) * (size_t)(nresults + 1));
  for (int i = 0; i < nresults; i++)
    f->results[i] = results[i];
  vec_push(&mod->funcs, f);
  return f;
}

Inst *ir_emit(Module *mod, IrBlock *b, int op, Pos pos, int nargs, Value **args, int nresults, const Type *rtypes) {
  Inst *in = arena_alloc(sizeof *in);
  in->op = op;
  in->pos = pos;
  in->nargs = nargs;
  in->args = arena_alloc(sizeof(Value *) * (size_t)(nargs + 1));
  for (int i = 0; i < nargs; i++)
    in->args[i] = args[i];
  in->nresults = nresults;
  in->results = arena_alloc(sizeof(Value *) * (size_t)(nresults + 1));
  for (int i = 0; i < nresults; i++) {
    in->results[i] = ir_value(mod, rtypes[i]);
    in->results[i]->def = in;
    in->results[i]->index = i;
  }
  in->parent = b;
  if (b)
    vec_push(&b->insts, in);
  return in;
}

int ir_index_of(const IrBlock *b, const Inst *in) {
  for (int i = 0; i < b->insts.len; i++)
    if (b->insts.data[i] == in)
      return i;
  return -1;
}

void ir_insert_at(IrBlock *b, int at, Inst *in) {
  vec_push(&b->insts, in);
  for (int i = b->insts.len - 1; i > at; i--)
    b->insts.data[i] = b->insts.data[i - 1];
  b->insts.data[at] = in;
  in->parent = b;
}

void ir_copy_attrs(Inst *dst, const Inst *src) {
  dst->fn = src->fn;
  dst->dim = src->dim;
  dst->dim2 = src->dim2;
  dst->shift = src->shift;
  dst->ival = src->ival;
  dst->fval = src->fval;
  dst->mask = src->mask;
  memcpy(dst->perm, src->perm, sizeof dst->perm);
  memcpy(dst->axes, src->axes, sizeof dst->axes);
  dst->naxes = src->naxes;
  dst->dot = src->dot;
  dst->str = src->str;
  dst->callee = src->callee;
  dst->iv = src->iv;   /* never written after creation: sharing is safe */
  dst->niv = src->niv;
}

void ir_add_region(Inst *in, IrBlock *b) {
  if (in->nregions >= 2)
    diag_ice("too many regions");
  b->owner = in;
  in->regions[in->nregions++] = b;
}

Value *ir_emit1(Module *mod, IrBlock *b, int op, Pos pos, int nargs, Value **args, Type rtype) {
  return ir_emit(mod, b, op, pos, nargs, args, 1, &rtype)->results[0];
}

/* ---- printing ------------------------------------------------------------- */

const char *ir_opname(int op) {
  static const char *core[IR__CORE] = {
      [IR_CONST] = "const", [IR_RETYPE] = "retype", [IR_CALL] = "call", [IR_FOR] = "for",
      [IR_IF] = "if", [IR_YIELD] = "yield", [IR_RETURN] = "return", [IR_GRAD] = "grad",
      [IR_TAPE_NEW] = "tape_new", [IR_TAPE_PUSH] = "tape_push", [IR_TAPE_GET] = "tape_get",
  };
  const OpDef *d = op_def(op);
  if (d)
    return d->name;
  return op >= 0 && op < IR__CORE && core[op] ? core[op] : "?";
}

const char *ir_value_label(const Value *v) { return v->display ? v->display : v->name; }

const char *ir_func_label(const Func *f) { return f->display ? f->display : f->name; }

void ir_copy_name(Value *nv, const Value *v) {
  if (nv->name)
    return;
  nv->name = v->name;
  nv->display = v->display;
}

void ir_unique_labels(Module *mod) {
  StrMap seen = {0};
  for (int i = 0; i < mod->funcs.len; i++) {
    Func *f = mod->funcs.data[i];
    const char *want = ir_func_label(f), *label = want;
    if (strmap_get(&seen, label) && f->manual)
      label = want = arena_printf("%s (manual over %s)", want, ty_axes_str(&mod->mesh, f->manual_axes));
    for (int n = 2; strmap_get(&seen, label); n++)
      label = arena_printf("%s#%d", want, n);
    f->display = label;
    strmap_put(&seen, label, (void *)1);
  }
  strmap_free(&seen);
}

static const char *red_names[] = {"sum", "max", "min"};

const char *ir_red_name(int op) { return red_names[op]; }

static void print_value(FILE *out, const Value *v) {
  if (v->name)
    fprintf(out, "%%%s.%d", v->name, v->id);
  else
    fprintf(out, "%%%d", v->id);
}

static void print_type(FILE *out, const Module *mod, const Type *t) {
  if (mod->spmd) {
    fputs(ty_local_str(&mod->mesh, t), out);
    Type g = *t;
    bool sharded = ty_dim_axes(t) != 0;
    if (sharded)
      fprintf(out, " (global %s)", ty_str(&mod->mesh, &g));
  } else {
    fputs(ty_str(&mod->mesh, t), out);
  }
}

void ir_print_axes(FILE *out, const Module *mod, const Inst *in) {
  fputs(" over (", out);
  for (int i = 0; i < in->naxes; i++)
    fprintf(out, "%s%s", i ? "," : "", mod->mesh.names[in->axes[i]]);
  fputc(')', out);
}

void ir_print_ints(FILE *out, const char *name, const int *v, int n) {
  fprintf(out, " %s=[", name);
  for (int i = 0; i < n; i++)
    fprintf(out, "%s%d", i ? "," : "", v[i]);
  fputc(']', out);
}

void ir_print_i64s(FILE *out, const char *name, const int64_t *v, int n) {
  fprintf(out, " %s=[", name);
  for (int i = 0; i < n; i++)
    fprintf(out, "%s%lld", i ? "," : "", (long long)v[i]);
  fputc(']', out);
}

static void print_attrs(FILE *out, const Module *mod, const Inst *in) {
  switch (in->op) {
  case IR_CONST:
    if (ty_is_float(in->results[0]->type.dtype))
      fprintf(out, " %.17g", in->fval);
    else
      fprintf(out, " %lld", (long long)in->ival);
    break;
  case IR_CALL:
    fprintf(out, " @%s%s", in->callee->name, in->fn == CALL_REMAT ? " remat" : in->fn == CALL_VJP_SAVE ? " vjp_save" : in->fn == CALL_VJP_LOAD ? " vjp_load" : "");
    break;
  case IR_GRAD:
    fprintf(out, " @%s wrt=[", in->callee->name);
    for (int i = 0; i < in->niv; i++)
      fprintf(out, "%s%lld", i ? "," : "", (long long)in->iv[i]);
    fprintf(out, "]%s", in->ival ? " with_value" : "");
    break;
  default: {
    const OpDef *d = op_def(in->op);
    if (d && d->print)
      d->print(out, mod, in);
    break;
  }
  }
}

static void print_block(FILE *out, const Module *mod, const IrBlock *b, int indent);

static void print_inst(FILE *out, const Module *mod, const Inst *in, int indent) {
  fprintf(out, "%*s", indent, "");
  for (int i = 0; i < in->nresults; i++) {
    if (i)
      fputs(", ", out);
    print_value(out, in->results[i]);
  }
  if (in->nresults)
    fputs(" = ", out);
  fputs(ir_opname(in->op), out);
  const OpDef *d = op_def(in->op);
  if (d && d->variant)
    fprintf(out, ".%s", d->variant(in));
  for (int i = 0; i < in->nargs; i++) {
    fputs(i ? ", " : " ", out);
    print_value(out, in->args[i]);
  }
  print_attrs(out, mod, in);
  if (in->nresults == 1) {
    fputs(" : ", out);
    print_type(out, mod, &in->results[0]->type);
  } else if (in->nresults > 1) {
    fputs(" : (", out);
    for (int i = 0; i < in->nresults; i++) {
      if (i)
        fputs(", ", out);
      print_type(out, mod, &in->results[i]->type);
    }
    fputc(')', out);
  }
  if (in->pos.line)
    fprintf(out, "  ; line %d", in->pos.line);
  fputc('\n', out);
  for (int r = 0; r < in->nregions; r++) {
    fprintf(out, "%*s%s (", indent, "", r == 0 ? "{" : "} else {");
    const IrBlock *b = in->regions[r];
    for (int i = 0; i < b->nargs; i++) {
      if (i)
        fputs(", ", out);
      print_value(out, b->args[i]);
      fputs(": ", out);
      print_type(out, mod, &b->args[i]->type);
    }
    fputs(")\n", out);
    print_block(out, mod, b, indent + 2);
  }
  if (in->nregions)
    fprintf(out, "%*s}\n", indent, "");
}

static void print_block(FILE *out, const Module *mod, const IrBlock *b, int indent) {
  for (int i = 0; i < b->insts.len; i++)
    print_inst(out, mod, b->insts.data[i], indent);
}

void ir_print_func(FILE *out, const Module *mod, const Func *f) {
  fprintf(out, "func @%s%s(", f->name, f->manual ? arena_printf(" manual(%s)", ty_axes_str(&mod->mesh, f->manual_axes)) : "");
  for (int i = 0; i < f->body->nargs; i++) {
    if (i)
      fputs(", ", out);
    print_value(out, f->body->args[i]);
    fputs(": ", out);
    print_type(out, mod, &f->body->args[i]->type);
  }
  fputs(")", out);
  if (f->nresults) {
    fputs(" -> (", out);
    for (int i = 0; i < f->nresults; i++) {
      if (i)
        fputs(", ", out);
      print_type(out, mod, &f->results[i]);
    }
    fputs(")", out);
  }
  fputs(" {\n", out);
  print_block(out, mod, f->body, 2);
  fputs("}\n", out);
}

void ir_print_module(FILE *out, const Module *mod) {
  fprintf(out, "; shdc %s IR, mesh {", mod->spmd ? "SPMD" : "global");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(out, "%s%s: %d", a ? ", " : "", mod->mesh.names[a], mod->mesh.sizes[a]);
  fputs("}\n", out);
  for (int i = 0; i < mod->funcs.len; i++) {
    fputc('\n', out);
    ir_print_func(out, mod, mod->funcs.data[i]);
  }
}

/* ---- liveness ------------------------------------------------------------------ */

/* Uses inside nested blocks count as uses by the instruction that owns
 * them: a value lives until the loop or branch that reads it has ended. */
static void note_uses(const Inst *in, int idx, const IrBlock *b, int *last_use);

static void note_block_uses(const IrBlock *inner, int idx, const IrBlock *outer, int *last_use) {
  for (int i = 0; i < inner->insts.len; i++)
    note_uses(inner->insts.data[i], idx, outer, last_use);
}

static void note_uses(const Inst *in, int idx, const IrBlock *b, int *last_use) {
  for (int i = 0; i < in->nargs; i++) {
    const Value *v = in->args[i];
    if ((v->def && v->def->parent == b) || v->arg_of == b)
      last_use[v->id] = idx;
  }
  for (int r = 0; r < in->nregions; r++)
    note_block_uses(in->regions[r], idx, b, last_use);
}

void ir_clear_ids(const IrBlock *b, void *by_id, size_t elem) {
  for (int k = 0; k < b->nargs; k++)
    memset((char *)by_id + (size_t)b->args[k]->id * elem, 0, elem);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      memset((char *)by_id + (size_t)in->args[k]->id * elem, 0, elem);
    for (int k = 0; k < in->nresults; k++)
      memset((char *)by_id + (size_t)in->results[k]->id * elem, 0, elem);
    for (int r = 0; r < in->nregions; r++)
      ir_clear_ids(in->regions[r], by_id, elem);
  }
}

static void collect_calls(const IrBlock *b, const PtrMap *index, Vec *out) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int f = in->op == IR_CALL ? ptrmap_get(index, in->callee) : -1;
    if (f >= 0)
      vec_push(out, (void *)(intptr_t)f);
    for (int r = 0; r < in->nregions; r++)
      collect_calls(in->regions[r], index, out);
  }
}

void ir_call_graph(const Module *mod, int nf, CallGraph *g) {
  memset(g, 0, sizeof *g);
  g->nf = nf;
  for (int i = 0; i < nf; i++)
    ptrmap_put(&g->index, mod->funcs.data[i], i);
  Vec edges = {0};
  g->first = mem_calloc((size_t)nf + 1, sizeof(int));
  for (int f = 0; f < nf; f++) {
    g->first[f] = edges.len;
    collect_calls(((Func *)mod->funcs.data[f])->body, &g->index, &edges);
  }
  g->first[nf] = edges.len;
  g->to = mem_alloc(sizeof(int) * ((size_t)edges.len + 1));
  for (int e = 0; e < edges.len; e++)
    g->to[e] = (int)(intptr_t)edges.data[e];
  free(edges.data);
  g->order = mem_alloc(sizeof(int) * ((size_t)nf + 1));
  g->pos = mem_alloc(sizeof(int) * ((size_t)nf + 1));
  int *stack = mem_alloc(sizeof(int) * ((size_t)nf + 1)), *next = mem_alloc(sizeof(int) * ((size_t)nf + 1));
  char *seen = mem_calloc((size_t)nf + 1, 1);
  int n = 0;
  for (int root = 0; root < nf; root++) {
    if (seen[root])
      continue;
    int top = 0;
    stack[top++] = root;
    seen[root] = 1;
    next[root] = g->first[root];
    while (top) {
      int f = stack[top - 1];
      if (next[f] < g->first[f + 1]) {
        int c = g->to[next[f]++];
        if (!seen[c]) {
          seen[c] = 1;
          next[c] = g->first[c];
          stack[top++] = c;
        }
        continue;
      }
      g->pos[f] = n;
      g->order[n++] = f;
      top--;
    }
  }
  free(seen);
  free(next);
  free(stack);
}

void ir_call_graph_free(CallGraph *g) {
  free(g->first);
  free(g->to);
  free(g->order);
  free(g->pos);
  ptrmap_free(&g->index);
  memset(g, 0, sizeof *g);
}

void ir_count_uses(const IrBlock *b, int *uses) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      uses[in->args[k]->id]++;
    for (int r = 0; r < in->nregions; r++)
      ir_count_uses(in->regions[r], uses);
  }
}

bool ir_is_carry(const Value *v, const IrBlock *b) {
  return !v->def && v->arg_of == b && b->owner && b->owner->op == IR_FOR && v->index > 0;
}

void ir_last_uses(const IrBlock *b, int *last_use) {
  for (int k = 0; k < b->nargs; k++)
    last_use[b->args[k]->id] = -1;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      last_use[in->results[k]->id] = i;
  }
  for (int i = 0; i < b->insts.len; i++)
    note_uses(b->insts.data[i], i, b, last_use);
}

/* ---- types from operands (OpDef.infer) --------------------------------------------- */

bool ir_is_literal(const Value *v) { return v->def && v->def->op == IR_CONST; }

RuleCtx ir_rule_ctx(const Module *mod, const Inst *in) {
  RuleCtx r = {&mod->mesh, 0, {0}, ir_opname(in->op)};
  for (int i = 0; i < in->nargs; i++)
    if (in->args[i]->type.kind == TY_ARRAY)
      r.manual |= in->args[i]->type.V;
  return r;
}

bool ir_infer_shape(Type *out, const Type *t) {
  if (t->kind != TY_ARRAY)
    return false;
  Type r = *out;
  r.kind = TY_ARRAY;
  r.dtype = t->dtype;
  r.rank = t->rank;
  for (int d = 0; d < MAX_RANK; d++)
    r.shape[d] = d < t->rank ? t->shape[d] : 0;
  *out = r;
  return true;
}

bool ir_arg_is(const Inst *in, int k, int dt) {
  return k < in->nargs && in->args[k]->type.kind == TY_ARRAY && (dt < 0 || in->args[k]->type.dtype == (DType)dt);
}

bool ir_infer(const Module *mod, const Inst *in, Type *out) {
  const OpDef *d = op_def(in->op);
  return !d || !d->infer || d->infer(mod, in, out);
}

/* ---- verifier ---------------------------------------------------------------- */

typedef struct {
  const Module *mod;
  const Func *f;
  char *defined;   /* by value id: in scope */
  int cap;
  bool types;      /* re-infer every result (SHDC_VERIFY) */
} Verifier;

__attribute__((noreturn)) static void vfail(Verifier *v, const Inst *in, const char *msg) {
  fprintf(stderr, "IR verifier: in @%s, at %s (line %d): %s\n", v->f->name, in ? ir_opname(in->op) : "?",
          in ? in->pos.line : 0, msg);
  ir_print_func(stderr, v->mod, v->f);
  diag_ice("IR verification failed");
}

static void define(Verifier *v, const Value *x) {
  if (x->id >= v->cap)
    diag_ice("value id %d out of range", x->id);
  v->defined[x->id] = 1;
}

static void verify_block(Verifier *v, const IrBlock *b);
static void undefine_block(Verifier *v, const IrBlock *b);

/* Every result has the type its operation infers from its operands. */
static void verify_types(Verifier *v, const Inst *in) {
  const OpDef *d = op_def(in->op);
  if (!d || !d->infer)
    return;
  Type *out = arena_alloc(sizeof(Type) * (size_t)(in->nresults + 1));
  for (int k = 0; k < in->nresults; k++)
    out[k] = in->results[k]->type;
  if (!d->infer(v->mod, in, out)) {
    Str s = {0};
    for (int i = 0; i < in->nargs; i++)
      str_printf(&s, "%s%s", i ? ", " : "", ty_str(&v->mod->mesh, &in->args[i]->type));
    vfail(v, in, arena_printf("its operands (%s) are not valid for it", str_cstr(&s)));
  }
  for (int k = 0; k < in->nresults; k++)
    if (out[k].kind != in->results[k]->type.kind || !ty_equal(&out[k], &in->results[k]->type))
      vfail(v, in, arena_printf("result %d has type %s, but its operands give %s", k,
                                ty_str(&v->mod->mesh, &in->results[k]->type), ty_str(&v->mod->mesh, &out[k])));
}

static bool verify_types_wanted(void) {
#ifdef SHDC_VERIFY
  return true;
#else
  const char *e = getenv("SHDC_VERIFY");
  return e && *e && strcmp(e, "0");
#endif
}

static void verify_inst(Verifier *v, const Inst *in, const IrBlock *b, bool last) {
  for (int i = 0; i < in->nargs; i++) {
    if (!in->args[i])
      vfail(v, in, "null operand");
    if (!v->defined[in->args[i]->id])
      vfail(v, in, arena_printf("operand %%%d used before its definition or out of scope", in->args[i]->id));
  }
  if (in->parent != b)
    vfail(v, in, "instruction's parent block is wrong");
  bool term = in->op == IR_YIELD || in->op == IR_RETURN;
  if (term && !last)
    vfail(v, in, "terminator in the middle of a block");
  if (in->op == IR_FOR) {
    if (in->nregions != 1 || in->nargs < 2 || in->regions[0]->nargs != in->nargs - 1 ||
        in->nresults != in->nargs - 2)
      vfail(v, in, "for: arity of bounds, carries, block arguments and results disagree");
  }
  if (in->op == IR_IF && (in->nregions != 2 || in->nargs != 1))
    vfail(v, in, "if: needs a condition and two blocks");
  for (int r = 0; r < in->nregions; r++) {
    const IrBlock *rb = in->regions[r];
    if (rb->owner != in)
      vfail(v, in, "region's owner is wrong");
    for (int i = 0; i < rb->nargs; i++)
      define(v, rb->args[i]);
    verify_block(v, rb);
    const Inst *t = rb->insts.len ? rb->insts.data[rb->insts.len - 1] : NULL;
    if (!t || t->op != IR_YIELD)
      vfail(v, in, "region does not end with yield");
    int want = in->nresults;
    if (t->nargs != want)
      vfail(v, in, "yield count differs from the results");
    for (int i = 0; i < want; i++)
      if (!ty_equal(&t->args[i]->type, &in->results[i]->type))
        vfail(v, in, arena_printf("yield %d has type %s, result has %s", i, ty_str(&v->mod->mesh, &t->args[i]->type),
                                  ty_str(&v->mod->mesh, &in->results[i]->type)));
    /* A block's values go out of scope at its end. */
    undefine_block(v, rb);
    for (int i = 0; i < rb->nargs; i++)
      v->defined[rb->args[i]->id] = 0;
  }
  for (int i = 0; i < in->nresults; i++)
    define(v, in->results[i]);
  if (v->types)
    verify_types(v, in);
}

static void verify_block(Verifier *v, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++)
    verify_inst(v, b->insts.data[i], b, i == b->insts.len - 1);
}

static void undefine_block(Verifier *v, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      v->defined[in->results[k]->id] = 0;
    for (int r = 0; r < in->nregions; r++)
      undefine_block(v, in->regions[r]);
  }
}

void ir_verify(const Module *mod) {
  Verifier v = {mod, NULL, NULL, mod->next_value + 1, verify_types_wanted()};
  v.defined = mem_calloc((size_t)v.cap, 1);
  for (int i = 0; i < mod->funcs.len; i++) {
    const Func *f = mod->funcs.data[i];
    v.f = f;
    if (i)   /* clear what the previous function defined: linear, not O(values) per function */
      ir_clear_ids(((const Func *)mod->funcs.data[i - 1])->body, v.defined, 1);
    for (int k = 0; k < f->body->nargs; k++)
      define(&v, f->body->args[k]);
    const IrBlock *b = f->body;
    for (int k = 0; k < b->insts.len; k++) {
      const Inst *in = b->insts.data[k];
      verify_inst(&v, in, b, k == b->insts.len - 1);
      if (in->op == IR_RETURN) {
        if (in->nargs != f->nresults)
          vfail(&v, in, "return count differs from the signature");
        for (int r = 0; r < in->nargs; r++)
          if (!ty_equal(&in->args[r]->type, &f->results[r]))
            vfail(&v, in, arena_printf("return %d has type %s, signature says %s", r,
                                       ty_str(&mod->mesh, &in->args[r]->type), ty_str(&mod->mesh, &f->results[r])));
      }
    }
    const Inst *t = b->insts.len ? b->insts.data[b->insts.len - 1] : NULL;
    if (!t || t->op != IR_RETURN)
      vfail(&v, t, "function body does not end with return");
  }
  free(v.defined);
}

/* An integer scalar known at compile time: a constant, or a sum,
 * difference or product of such (autodiff's reverse loop runs over
 * hi - lo). Recursion follows the bound's expression, whose depth the
 * parser bounds. */
bool ir_const_int(const Value *v, int64_t *out) {
  const Inst *d = v->def;
  if (!d || v->type.kind != TY_ARRAY || v->type.rank)
    return false;
  if (d->op == IR_CONST) {
    if (!(d->fval >= -9e15 && d->fval <= 9e15))
      return false;
    *out = (int64_t)d->fval;
    return d->fval == (double)*out;
  }
  int64_t a, b;
  if (d->op != IR_BINARY || d->nargs != 2 || (d->fn != BIN_ADD && d->fn != BIN_SUB && d->fn != BIN_MUL) ||
      !ir_const_int(d->args[0], &a) || !ir_const_int(d->args[1], &b))
    return false;
  return !(d->fn == BIN_ADD ? __builtin_add_overflow(a, b, out)
           : d->fn == BIN_SUB ? __builtin_sub_overflow(a, b, out) : __builtin_mul_overflow(a, b, out));
}

bool ir_const_trips(const Inst *loop, int64_t *trips) {
  int64_t lo, hi;
  if (!ir_const_int(loop->args[0], &lo) || !ir_const_int(loop->args[1], &hi))
    return false;
  *trips = hi > lo ? hi - lo : 0;   /* both within 9e15: no overflow */
  return true;
}
