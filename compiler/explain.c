/* explain.c: `shdc explain`, the compile-time report of communication and
 * memory.
 *
 * For every function it lists each collective of the SPMD IR with its
 * source line, kind, mesh axes, the bytes one rank sends (the formulas the
 * runtime's SHD_TRACE counters use, so prediction and measurement agree) and
 * the local types before and after. The peak bytes of live arrays per rank
 * come from simulating the generated code's buffers: the same allocation
 * decisions as emit_c.c (emit_result_kind, emit_temp_bytes) and the same
 * release points (ir_last_uses).
 */
#include "shdc.h"

/* ---- bytes sent ------------------------------------------------------------------ */

static int64_t group_size(const Module *mod, const Inst *in) {
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= mod->mesh.sizes[in->axes[i]];
  return g;
}

static int64_t local_bytes(const Module *mod, const Type *t) {
  return ty_local_count(&mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
}

static bool is_collective(Opcode op) {
  return op == IR_ALL_REDUCE || op == IR_ALL_GATHER || op == IR_REDUCE_SCATTER || op == IR_ALL_TO_ALL ||
         op == IR_PPERMUTE || op == IR_PERMUTE;
}

int64_t explain_bytes_sent(const Module *mod, const Inst *in) {
  int64_t n = local_bytes(mod, &in->args[0]->type), g = group_size(mod, in);
  switch (in->op) {
  case IR_ALL_REDUCE: return 2 * (g - 1) * n / g;
  case IR_ALL_GATHER: return (g - 1) * n;
  case IR_REDUCE_SCATTER: return (g - 1) * n / g;
  case IR_ALL_TO_ALL: return (g - 1) * n / g;
  case IR_PPERMUTE: return (g == 1 || in->shift % g == 0) ? 0 : n;
  case IR_PERMUTE: {
    /* Ranks that keep their block send nothing; report the most any sends. */
    int w = 1;
    for (int a = 0; a < mod->mesh.naxes; a++)
      w *= mod->mesh.sizes[a];
    int *dest = arena_alloc(sizeof(int) * (size_t)w), *src = arena_alloc(sizeof(int) * (size_t)w);
    part_permute_tables(&mod->mesh, &in->args[0]->type, &in->results[0]->type, dest, src);
    for (int r = 0; r < w; r++)
      if (dest[r] != r)
        return n;
    return 0;
  }
  default: return 0;
  }
}

/* ---- the list ------------------------------------------------------------------------ */

typedef struct {
  FILE *out;
  const Module *mod;
  int count;
  int64_t bytes;
} Report;

static void list_block(Report *r, const IrBlock *b, const char *ctx);

static void list_inst(Report *r, const Inst *in, const char *ctx) {
  if (is_collective(in->op)) {
    const Mesh *m = &r->mod->mesh;
    Str axes = {0};
    for (int i = 0; i < in->naxes; i++)
      str_printf(&axes, "%s%s", i ? "," : "", m->names[in->axes[i]]);
    int64_t bytes = explain_bytes_sent(r->mod, in);
    const char *kind = ir_opname(in->op);
    if (in->op == IR_ALL_REDUCE || in->op == IR_REDUCE_SCATTER)
      kind = arena_printf("%s.%s", kind, ir_red_name(in->fn));
    fprintf(r->out, "  line %-4d %-18s over (%s)%*s %12lld bytes/rank   %s -> %s%s\n", in->pos.line, kind,
            in->op == IR_PERMUTE ? "mesh" : str_cstr(&axes), (int)(8 - (in->op == IR_PERMUTE ? 4 : axes.len)), "",
            (long long)bytes, ty_local_str(m, &in->args[0]->type), ty_local_str(m, &in->results[0]->type), ctx);
    free(axes.buf);
    r->count++;
    r->bytes += bytes;
  }
  for (int k = 0; k < in->nregions; k++) {
    const char *inner = in->op == IR_FOR ? arena_printf("   (in the loop at line %d)", in->pos.line)
                                         : arena_printf("   (in the %s branch at line %d)", k ? "else" : "then",
                                                        in->pos.line);
    list_block(r, in->regions[k], inner);
  }
}

static void list_block(Report *r, const IrBlock *b, const char *ctx) {
  for (int i = 0; i < b->insts.len; i++)
    list_inst(r, b->insts.data[i], ctx);
}

/* ---- peak memory: a simulation of the generated code's buffers -------------------------- */

typedef struct {
  const Module *mod;
  int64_t *bytes;      /* by buffer */
  int *refs;
  int nbufs, capbufs;
  int *buf_of;         /* by value id */
  int *last_use;       /* by value id, for the block being walked */
  int64_t live, peak;
} Sim;

static void bump(Sim *s) {
  if (s->live > s->peak)
    s->peak = s->live;
}

static int buf_new(Sim *s, int64_t bytes) {
  if (s->nbufs == s->capbufs) {
    s->capbufs = s->capbufs ? s->capbufs * 2 : 256;
    s->bytes = realloc(s->bytes, sizeof(int64_t) * (size_t)s->capbufs);
    s->refs = realloc(s->refs, sizeof(int) * (size_t)s->capbufs);
  }
  s->bytes[s->nbufs] = bytes;
  s->refs[s->nbufs] = 1;
  s->live += bytes;
  bump(s);
  return s->nbufs++;
}

static void buf_retain(Sim *s, int b) {
  if (b >= 0)
    s->refs[b]++;
}

static void buf_release(Sim *s, int b) {
  if (b >= 0 && --s->refs[b] == 0)
    s->live -= s->bytes[b];
}

static void sim_block(Sim *s, const IrBlock *b, int *yield_bufs);

static void sim_call(Sim *s, const Inst *in) {
  const Func *f = in->callee;
  for (int i = 0; i < f->body->nargs; i++)
    s->buf_of[f->body->args[i]->id] = in->args[i]->type.rank ? s->buf_of[in->args[i]->id] : -1;
  int rets[64];
  sim_block(s, f->body, rets);
  for (int k = 0; k < in->nresults; k++)
    s->buf_of[in->results[k]->id] = in->results[k]->type.rank ? rets[k] : -1;
}

static void sim_for(Sim *s, const Inst *in) {
  const IrBlock *body = in->regions[0];
  int nc = in->nresults;
  int carry[64], next[64];
  for (int k = 0; k < nc; k++) {
    carry[k] = in->args[k + 2]->type.rank ? s->buf_of[in->args[k + 2]->id] : -1;
    buf_retain(s, carry[k]);
  }
  /* Two iterations: the second one starts without the initial values. */
  for (int it = 0; it < 2; it++) {
    s->buf_of[body->args[0]->id] = -1;
    for (int k = 0; k < nc; k++)
      s->buf_of[body->args[k + 1]->id] = carry[k];
    sim_block(s, body, next);
    for (int k = 0; k < nc; k++) {
      buf_release(s, carry[k]);
      carry[k] = next[k];
    }
  }
  for (int k = 0; k < nc; k++)
    s->buf_of[in->results[k]->id] = carry[k];
}

static void sim_if(Sim *s, const Inst *in) {
  /* Peak of the larger branch; the state after is the then-branch's. */
  int64_t live0 = s->live, peak0 = s->peak;
  int outs[64];
  int saved_n = s->nbufs;
  int *saved_refs = malloc(sizeof(int) * (size_t)(s->nbufs + 1));
  memcpy(saved_refs, s->refs, sizeof(int) * (size_t)s->nbufs);
  sim_block(s, in->regions[1], outs);
  int64_t else_peak = s->peak;
  s->live = live0;
  s->peak = peak0;
  memcpy(s->refs, saved_refs, sizeof(int) * (size_t)saved_n);
  s->nbufs = saved_n;
  free(saved_refs);
  sim_block(s, in->regions[0], outs);
  if (else_peak > s->peak)
    s->peak = else_peak;
  for (int k = 0; k < in->nresults; k++)
    s->buf_of[in->results[k]->id] = outs[k];
}

static void sim_results(Sim *s, const Inst *in, int idx) {
  for (int k = 0; k < in->nresults; k++) {
    const Value *r = in->results[k];
    EmitResult kind = emit_result_kind(s->mod, in, k);
    if (kind == EMIT_STEAL_OR_ALLOC) {
      const Value *x = in->args[0];
      int bx = s->buf_of[x->id];
      bool dies = x->def && x->def->parent == in->parent && s->last_use[x->id] == idx;
      kind = dies && bx >= 0 && s->refs[bx] == 1 ? EMIT_VIEW : EMIT_ALLOC;
    }
    switch (kind) {
    case EMIT_NONE:
      s->buf_of[r->id] = -1;
      break;
    case EMIT_VIEW:
      s->buf_of[r->id] = s->buf_of[in->args[0]->id];
      buf_retain(s, s->buf_of[r->id]);
      break;
    case EMIT_VIEW_OR_ALLOC:
    case EMIT_STEAL_OR_ALLOC:
    case EMIT_ALLOC:
      s->buf_of[r->id] = buf_new(s, local_bytes(s->mod, &r->type));
      break;
    }
  }
}

static void sim_block(Sim *s, const IrBlock *b, int *yield_bufs) {
  int *saved = malloc(sizeof(int) * (size_t)(s->mod->next_value + 1));
  memcpy(saved, s->last_use, sizeof(int) * (size_t)(s->mod->next_value + 1));
  ir_last_uses(b, s->last_use);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    switch (in->op) {
    case IR_CALL: sim_call(s, in); break;
    case IR_FOR: sim_for(s, in); break;
    case IR_IF: sim_if(s, in); break;
    case IR_YIELD:
    case IR_RETURN:
      for (int k = 0; k < in->nargs; k++) {
        int bf = in->args[k]->type.rank ? s->buf_of[in->args[k]->id] : -1;
        buf_retain(s, bf);
        yield_bufs[k] = bf;
      }
      break;
    default: {
      int64_t tmp = emit_temp_bytes(s->mod, in);
      sim_results(s, in, i);
      s->live += tmp;
      bump(s);
      s->live -= tmp;
    }
    }
    /* Releases after the instruction, as the generated code does them. */
    for (int j = 0; j <= i; j++) {
      const Inst *d = b->insts.data[j];
      for (int k = 0; k < d->nresults; k++) {
        const Value *v = d->results[k];
        if (v->type.rank && s->last_use[v->id] == i)
          buf_release(s, s->buf_of[v->id]);
      }
    }
  }
  memcpy(s->last_use, saved, sizeof(int) * (size_t)(s->mod->next_value + 1));
  free(saved);
}

static int64_t func_peak(const Module *mod, const Func *f) {
  Sim s;
  memset(&s, 0, sizeof s);
  s.mod = mod;
  s.buf_of = calloc((size_t)mod->next_value + 1, sizeof(int));
  s.last_use = calloc((size_t)mod->next_value + 1, sizeof(int));
  /* Parameters are the caller's buffers: counted, never released here. */
  for (int i = 0; i < f->body->nargs; i++) {
    const Value *p = f->body->args[i];
    s.buf_of[p->id] = p->type.rank ? buf_new(&s, local_bytes(mod, &p->type)) : -1;
    buf_retain(&s, s.buf_of[p->id]);
  }
  int rets[64];
  sim_block(&s, f->body, rets);
  free(s.buf_of);
  free(s.last_use);
  free(s.bytes);
  free(s.refs);
  return s.peak;
}

void explain_module(FILE *out, const Module *mod, const SourceFile *file) {
  fprintf(out, "shdc explain %s, mesh {", file ? file->name : "?");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(out, "%s%s: %d", a ? ", " : "", mod->mesh.names[a], mod->mesh.sizes[a]);
  fprintf(out, "}\nbytes/rank: what one rank sends (all-reduce 2(G-1)n/G, all-gather (G-1)n, reduce-scatter and "
               "all-to-all (G-1)n/G, permute n)\n");
  for (int i = 0; i < mod->funcs.len; i++) {
    const Func *f = mod->funcs.data[i];
    Report r = {out, mod, 0, 0};
    fprintf(out, "\nfn %s%s%s\n", f->name, f->manual ? arena_printf(" (manual over %s)", ty_axes_str(&mod->mesh, f->manual_axes)) : "",
            f->generated ? " (generated by autodiff)" : "");
    list_block(&r, f->body, "");
    fprintf(out, "  %d collective%s, %lld bytes sent per rank (loop bodies counted once)\n", r.count,
            r.count == 1 ? "" : "s", (long long)r.bytes);
    fprintf(out, "  peak live arrays per rank: %lld bytes\n", (long long)func_peak(mod, f));
  }
}
