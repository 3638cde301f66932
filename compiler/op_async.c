/* op_async.c: the overlap pass's operations (overlap.c): a bucket of sums
 * over mesh axes started where its members are final (all_reduce_start)
 * and finished where they are first used (all_reduce_wait), run by the
 * runtime's communication thread in between (runtime/async.c); a layer
 * loop's all-gathers started an iteration ahead (all_gather_start,
 * all_gather_wait).
 *
 * all_reduce_start: operands the members' values, then the start indices
 * of the window members (their rank each), then each window member's
 * carry (the loop-carried array the window updates: its type gives the
 * window's destination shape). Results: one pending value per plain
 * member, its operand's type (the buffer its reduced values land in).
 * Attributes: axes, fn (RED_SUM), ival the site (a number of the module),
 * iv MEMBER_W integers a member: its kind (SHD_ASYNC_ order: plain, set,
 * add; with ASYNC_WIDEN a bf16 member set or added into an f32 carry, and
 * with ASYNC_NARROW too an f32 member sent as bf16: --reduce-dtype=bf16,
 * the bucket then bf16, async_wire_dtype), the wait's destination index of a window member, the window's
 * rank, its `aligned` mask (shd_update_window's), then its sizes (global,
 * MAX_RANK) and the update's local shape (MAX_RANK).
 *
 * all_reduce_wait: operands the pending values (plain members: the results
 * come back as views of them) and the destinations of the window members
 * (the loop's results: the results are their buffers, taken or copied, the
 * windows written into them), in that order; ival the site; iv the number
 * of pending operands.
 *
 * reduce_scatter_start: the same, of a loop's reduce-scatter accumulators
 * (a member's last integer, ASYNC_SCATTER_DIM, is the operand's dim that
 * the runtime splits: each rank keeps its block of the sum); its operands
 * are the whole arrays, its windows the blocks.
 *
 * all_gather_start: a layer loop's all-gathers prefetched an iteration
 * ahead (overlap.c): operands a condition (bool: whether to start, false
 * in the last iteration) and the members' blocks; no results; ival the
 * site, iv MEMBER_W integers a member, of which only the gathered dim
 * (ASYNC_SCATTER_DIM) is used. all_gather_wait: no operands; its results
 * the gathered arrays, written by the runtime from the request that the
 * site's last start made (none: a drain, after the loop, of nothing
 * normally); ival the site.
 *
 * Explain lists a start as the all_reduce (reduce_scatter, all_gather)
 * the runtime's trace counts: its bytes are those of one all-reduce
 * (reduce-scatter, all-gather) of the whole bucket.
 */
#include "ops.h"

#include "shdc.h"

/* ---- the members --------------------------------------------------------------------------- */

static int async_members(const Inst *in) { return in->niv / ASYNC_MEMBER_W; }

static const int64_t *member(const Inst *in, int j) { return in->iv + (size_t)j * ASYNC_MEMBER_W; }

/* A window member (set or added into a carry's window), not a plain one. */
static bool is_window(const Inst *in, int j) { return (member(in, j)[0] & ASYNC_KIND) != 0; }


/* The operand index of window member j's first start index, and of its
 * carry. */
static int first_index(const Inst *in, int j) {
  int n = async_members(in), at = n;
  for (int k = 0; k < j; k++)
    if (is_window(in, k))
      at += (int)member(in, k)[2];
  return at;
}

static int carry_arg(const Inst *in, int j) {
  int n = async_members(in), idx = 0, w = 0;
  for (int k = 0; k < n; k++)
    if (is_window(in, k))
      idx += (int)member(in, k)[2];
  for (int k = 0; k < j; k++)
    w += is_window(in, k);
  return n + idx + w;
}


static int64_t group_size(const Module *mod, const Inst *in) {
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= mod->mesh.sizes[in->axes[i]];
  return g;
}

/* ---- C ------------------------------------------------------------------------------------ */

static void emit_start(Emit *e, const Inst *in) {
  emit_trace_at(e, in->pos);
  emit_line(e, "shd_async_begin%s(%lld, %s, SHD_SUM, %s);", in->op == IR_REDUCE_SCATTER_START ? "_scatter" : "",
            (long long)in->ival, emit_dtconst(async_wire_dtype(in)), emit_axes_lit(in->axes, in->naxes));
  int res = 0;
  for (int j = 0; j < async_members(in); j++) {
    const int64_t *m = member(in, j);
    const Value *x = in->args[j];
    if (!is_window(in, j)) {
      const Value *r = in->results[res++];
      emit_def_array(e, r, false);
      emit_line(e, "shd_async_add%s(%s, %s, %lld);", m[0] & ASYNC_NARROW ? "_narrow" : "", emit_vname(x), emit_vname(r),
                (long long)emit_local_count(e, &x->type));
      continue;
    }
    int rank = (int)m[2];
    const Value *c = in->args[carry_arg(in, j)];
    const char *window = arena_printf("%d, %d, %d, %s, %s, %s, %s, %s, 0x%xu", (int)m[0], (int)m[1], rank,
                                      emit_shape_lit(e, &c->type), emit_i64s_lit(m + 4 + MAX_RANK, rank),
                                      emit_values_lit(in->args + first_index(in, j), rank), emit_i64s_lit(m + 4, rank),
                                      emit_offset_lit(e, &c->type), (unsigned)m[3]);
    if (m[ASYNC_SCATTER_DIM] >= 0)   /* the operand whole, split along its dim by the runtime */
      emit_line(e, "shd_async_add_scatter(%s, %d, %s, %lld, %s);", emit_vname(x), x->type.rank,
                emit_shape_lit(e, &x->type), (long long)m[ASYNC_SCATTER_DIM], window);
    else
      emit_line(e, "shd_async_add_window(%s, %s);", emit_vname(x), window);
  }
  emit_line(e, "shd_async_start(%d);", in->pos.line);
}

static void emit_wait(Emit *e, const Inst *in) {
  int npend = (int)in->iv[0];
  for (int k = 0; k < in->nargs; k++) {
    if (k < npend)
      emit_def_alias(e, in->results[k], in->args[k]);
    else
      emit_def_taken(e, in->results[k], in->args[k], in);
  }
  Str d = {0};
  for (int k = npend; k < in->nargs; k++)
    str_printf(&d, "%s%s", k > npend ? ", " : "", emit_vname(in->results[k]));
  if (in->nargs > npend)
    emit_line(e, "shd_async_wait(%lld, (void *const[]){%s}, %d, %d);", (long long)in->ival, str_cstr(&d),
              in->nargs - npend, in->pos.line);
  else
    emit_line(e, "shd_async_wait(%lld, NULL, 0, %d);", (long long)in->ival, in->pos.line);
  free(d.buf);
}

/* The members go into the request only when the condition holds: the
 * last iteration starts none. */
static void emit_gather_start(Emit *e, const Inst *in) {
  const Value *x0 = in->args[1];
  emit_trace_at(e, in->pos);
  emit_line(e, "if (%s) {", emit_vname(in->args[0]));
  emit_indent(e, 2);
  emit_line(e, "shd_async_begin_gather(%lld, %s, %s);", (long long)in->ival, emit_dtconst(x0->type.dtype),
            emit_axes_lit(in->axes, in->naxes));
  for (int j = 0; j < async_members(in); j++) {
    const Value *x = in->args[1 + j];
    emit_line(e, "shd_async_add_gather(%s, %d, %s, %d);", emit_vname(x), x->type.rank, emit_shape_lit(e, &x->type),
              (int)member(in, j)[ASYNC_SCATTER_DIM]);
  }
  emit_line(e, "shd_async_start(%d);", in->pos.line);
  emit_indent(e, -2);
  emit_line(e, "}");
}

static void emit_gather_wait(Emit *e, const Inst *in) {
  Str d = {0};
  for (int k = 0; k < in->nresults; k++) {
    emit_def_array(e, in->results[k], false);
    str_printf(&d, "%s%s", k ? ", " : "", emit_vname(in->results[k]));
  }
  if (in->nresults)
    emit_line(e, "shd_async_wait(%lld, (void *const[]){%s}, %d, %d);", (long long)in->ival, str_cstr(&d),
              in->nresults, in->pos.line);
  else
    emit_line(e, "shd_async_wait(%lld, NULL, 0, %d);", (long long)in->ival, in->pos.line);
  free(d.buf);
}

static EmitResult result_start(const Module *mod, const Inst *in, int k) { return EMIT_ALLOC; }

static EmitResult result_wait(const Module *mod, const Inst *in, int k) {
  return k < in->iv[0] ? EMIT_VIEW : EMIT_STEAL_OR_ALLOC;
}

/* ---- costs --------------------------------------------------------------------------------- */

/* (G-1) of each member's block: what a rank sends gathering the bucket. */
static int64_t gather_start_bytes(const Module *mod, const Inst *in) {
  int64_t n = 0;
  for (int j = 0; j < async_members(in); j++) {
    const Type *t = &in->args[1 + j]->type;
    n += ty_local_count(&mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
  }
  return (group_size(mod, in) - 1) * n;
}

/* The runtime's ring over the bucket's G blocks (the all-gather half of
 * the ring all-reduce's). */
static double gather_start_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = "ring (async)";
  return (c->G - 1) * c->a + c->sent * c->b;
}

static int64_t start_bytes(const Module *mod, const Inst *in) {
  int64_t n = async_bucket_bytes(mod, in), g = group_size(mod, in);
  if (in->op == IR_REDUCE_SCATTER_START)   /* (G-1)/G of the bucket */
    return (int64_t)((__int128)(g - 1) * n / g);
  return op_allreduce_bytes(n, g);
}

/* The runtime's ring over the whole bucket (sent = 2 (G-1)/G n). */
static double start_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = "ring (async)";
  if (in->op == IR_REDUCE_SCATTER_START) {   /* sent = (G-1)/G n: the ring's first half */
    double n = c->sent * c->G / (c->G - 1);
    return (c->G - 1) * c->a + c->sent * c->b + (c->G - 1) / c->G * n * c->g;
  }
  NetCost b = *c;
  b.n = c->sent * c->G / (2 * (c->G - 1));
  *algo = "ring (async)";
  return (2 * (b.G - 1)) * b.a + 2 * (b.G - 1) / b.G * b.n * b.b + (b.G - 1) / b.G * b.n * b.g;
}

/* ---- the IR text --------------------------------------------------------------------------- */

static const char *sum_variant(const Inst *in) { return "sum"; }
static const char *const sum_variants[] = {"sum", NULL};

static void print_start(FILE *out, const Module *mod, const Inst *in) {
  ir_print_axes(out, mod, in);
  fprintf(out, " site=%lld", (long long)in->ival);
  for (int j = 0; j < async_members(in); j++) {
    const int64_t *m = member(in, j);
    if (is_window(in, j))
      fprintf(out, " %%%d->%s%s[%lld]", in->args[j]->id, (m[0] & ASYNC_KIND) == 2 ? "add" : "set",
              m[0] & ASYNC_WIDEN ? ".f32" : "", (long long)m[1]);
  }
  if (async_wire_dtype(in) != in->args[0]->type.dtype)
    fprintf(out, " wire=%s", ty_dtype_name(async_wire_dtype(in)));
}

static void print_wait(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " site=%lld", (long long)in->ival); }

static void print_gather_start(FILE *out, const Module *mod, const Inst *in) {
  ir_print_axes(out, mod, in);
  fprintf(out, " site=%lld dims=[", (long long)in->ival);
  for (int j = 0; j < async_members(in); j++)
    fprintf(out, "%s%lld", j ? "," : "", (long long)member(in, j)[ASYNC_SCATTER_DIM]);
  fprintf(out, "]");
}

/* ---- types ------------------------------------------------------------------------------------ */

static bool infer_start(const Module *mod, const Inst *in, Type *out) {
  int n = async_members(in), res = 0;
  if (n < 1 || in->niv != n * ASYNC_MEMBER_W)
    return false;
  for (int j = 0; j < n; j++)
    if (!is_window(in, j)) {
      if (res >= in->nresults || !ir_infer_shape(&out[res++], &in->args[j]->type))
        return false;
    }
  return res == in->nresults;
}

static bool infer_wait(const Module *mod, const Inst *in, Type *out) {
  if (in->niv != 1 || in->nresults != in->nargs)
    return false;
  for (int k = 0; k < in->nargs; k++)
    if (!ir_infer_shape(&out[k], &in->args[k]->type))
      return false;
  return true;
}

/* A condition, then blocks each split along its dim by the group. */
static bool infer_gather_start(const Module *mod, const Inst *in, Type *out) {
  int n = async_members(in);
  if (n < 1 || in->niv != n * ASYNC_MEMBER_W || in->nargs != n + 1 || in->nresults || in->args[0]->type.rank ||
      in->args[0]->type.dtype != DT_BOOL)
    return false;
  for (int j = 0; j < n; j++) {
    int64_t d = member(in, j)[ASYNC_SCATTER_DIM];
    if (d < 0 || d >= in->args[1 + j]->type.rank || in->args[1 + j]->type.dtype != in->args[1]->type.dtype)
      return false;
  }
  return true;
}

/* Its results are what the overlap pass says (the gathers' types): only
 * that there are no operands is checked. */
static bool infer_gather_wait(const Module *mod, const Inst *in, Type *out) { return in->nargs == 0; }

static const OpDef ops[] = {
    {.op = IR_ALL_REDUCE_START, .name = "all_reduce_start", .trace_kind = "all_reduce",
     .flags = OPF_COLLECTIVE | OPF_EFFECT, .variant = sum_variant, .variants = sum_variants, .print = print_start,
     .emit = emit_start, .result = result_start, .bytes_sent = start_bytes, .net_seconds = start_seconds,
     .infer = infer_start},
    {.op = IR_REDUCE_SCATTER_START, .name = "reduce_scatter_start", .trace_kind = "reduce_scatter",
     .flags = OPF_COLLECTIVE | OPF_EFFECT, .variant = sum_variant, .variants = sum_variants, .print = print_start,
     .emit = emit_start, .result = result_start, .bytes_sent = start_bytes, .net_seconds = start_seconds,
     .infer = infer_start},
    {.op = IR_ALL_REDUCE_WAIT, .name = "all_reduce_wait", .flags = OPF_EFFECT, .print = print_wait, .emit = emit_wait,
     .result = result_wait, .infer = infer_wait},
    {.op = IR_ALL_GATHER_START, .name = "all_gather_start", .trace_kind = "all_gather",
     .flags = OPF_COLLECTIVE | OPF_EFFECT, .print = print_gather_start, .emit = emit_gather_start,
     .bytes_sent = gather_start_bytes, .net_seconds = gather_start_seconds, .infer = infer_gather_start},
    {.op = IR_ALL_GATHER_WAIT, .name = "all_gather_wait", .flags = OPF_EFFECT, .print = print_wait,
     .emit = emit_gather_wait, .result = result_start, .infer = infer_gather_wait},
    {0},
};

const OpFamily op_async_family = {
    .name = "async",
    .ops = ops,
};
