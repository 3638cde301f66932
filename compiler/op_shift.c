/* op_shift.c: the one data movement of the indexing and joining families:
 * `shift`, the SPMD instruction that moves the rows of one dim that change
 * owner.
 *
 * Input: built by op_index.c's and op_join.c's partitioning rules (slices,
 * run-time slices and updates, pads, splits, concatenations of a sharded
 * dim) through op_shift_rows. Output: the C call of runtime/redistribute.c's shd_shift,
 * the IR text, and the bytes one rank sends, computed with the runtime's
 * own plan so `shdc explain` equals the SHD_TRACE measurement.
 *
 * Semantics: along dim d, output row j is row j - offset[i] of source i;
 * the sources are split over a group of axes in equal blocks (or
 * replicated over it: then no rank sends anything, `shift_local`), and so
 * is the result. A shift whose static offsets keep every row on its rank is
 * `shift_local` too: no messages, not a collective. With a run-time offset
 * the bytes are an upper bound (every row a rank holds may move).
 */
#include "ops.h"

#define vname emit_vname

enum {
  IR_SHIFT = IR_BASE_SHIFT, /* args sources [, run-time offset]; dim, axes (the group), iv: offsets, fn: SHIFT_ */
  IR_SHIFT_LOCAL,           /* the same, proved local: no row leaves its rank */
};

static int64_t parts(const Mesh *m, DimSpec s) { return ty_spec_parts(m, s); }
static bool split_over(const Mesh *m, DimSpec s) { return parts(m, s) > 1; }

static int64_t shift_bytes(const Module *mod, const Inst *in);

/* ---- the builders ------------------------------------------------------------------------------- */

/* Output row j of dim d is source i's row j - offs[i] (plus the run-time
 * `dyn`, negated with SHIFT_NEG): the sources are split over `group` (or
 * replicated: SHIFT_SRC_REP), the result is split over it (or replicated:
 * SHIFT_OUT_REP), with n_out rows in all. */
Value *op_shift_rows(Part *p, Pos pos, int nsrc, Value **srcs, const int64_t *offs, Value *dyn, unsigned flags, int d,
                     DimSpec group, int64_t n_out) {
  Type t = srcs[0]->type;
  t.shape[d] = n_out;
  if (flags & SHIFT_OUT_REP)
    t.spec[d].n = 0;
  else
    t.spec[d] = group;
  t.weak = false;
  int na = nsrc + (dyn ? 1 : 0);
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(na + 1));
  memcpy(args, srcs, sizeof(Value *) * (size_t)nsrc);
  if (dyn)
    args[nsrc] = dyn;
  int op = flags & SHIFT_SRC_REP ? IR_SHIFT_LOCAL : IR_SHIFT;
  Inst *in = ir_emit(part_mod(p), part_block(p), op, pos, na, args, 1, &t);
  in->dim = d;
  in->fn = (int)(flags | (dyn ? SHIFT_DYN : 0));
  for (int i = 0; i < group.n; i++)
    in->axes[i] = group.axes[i];
  in->naxes = group.n;
  in->iv = arena_alloc(sizeof(int64_t) * (size_t)(nsrc + 1));
  memcpy(in->iv, offs, sizeof(int64_t) * (size_t)nsrc);
  in->niv = nsrc;
  /* Static offsets under which no row leaves its rank: a local copy. */
  if (op == IR_SHIFT && !dyn && shift_bytes(part_mod(p), in) == 0)
    in->op = IR_SHIFT_LOCAL;
  return in->results[0];
}

/* How a resized dim d moves, from the operand's spec xs and the target's
 * ts: over the operand's group (its result split over it when the target
 * splits the dim and the size divides, else replicated), or, for an
 * operand not split there, each rank cutting the target's block of its
 * full copy. Returns false when neither is split (a local cut). */
bool op_shift_plan(const Mesh *m, DimSpec xs, DimSpec ts, int64_t n_out, DimSpec *group, unsigned *flags) {
  if (split_over(m, xs)) {
    *group = xs;
    *flags = split_over(m, ts) && n_out % parts(m, xs) == 0 ? 0 : SHIFT_OUT_REP;
    return true;
  }
  if (split_over(m, ts)) {
    *group = ts;
    *flags = SHIFT_SRC_REP;
    return true;
  }
  return false;
}

/* ---- C ----------------------------------------------------------------------------------------- */

static const char *ctype(const Value *v) { return ty_dtype_c(v->type.dtype); }

static int nsources(const Inst *in) { return in->nargs - ((in->fn & SHIFT_DYN) ? 1 : 0); }

static void emit_shift(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  int ns = nsources(in), d = in->dim;
  int64_t *nsrc = arena_alloc(sizeof(int64_t) * (size_t)(ns + 1));
  for (int i = 0; i < ns; i++)
    nsrc[i] = in->args[i]->type.shape[d];
  emit_def_array(e, r, false);
  emit_line(e, "{");
  emit_line(e, "  const void *src[] = {%s};", emit_names_lit(in->args, ns));
  const char *offs = emit_i64s_lit(in->iv, ns);
  if (in->fn & SHIFT_DYN) {
    emit_line(e, "  const int64_t off[] = {%lld %s (int64_t)%s};", (long long)in->iv[0], (in->fn & SHIFT_NEG) ? "-" : "+",
              vname(in->args[ns]));
    offs = "off";
  }
  emit_line(e, "  shd_shift(src, %d, %s, %d, %s, %s, %lld, %d, %d, %d, sizeof(%s), %d, %s, %d, %s);", ns,
            emit_i64s_lit(nsrc, ns), !(in->fn & SHIFT_SRC_REP), offs, vname(r), (long long)r->type.shape[d],
            !(in->fn & SHIFT_OUT_REP), (in->fn & SHIFT_FILL) != 0, in->op == IR_SHIFT, ctype(r), r->type.rank,
            emit_shape_lit(e, &r->type), d,
            emit_axes_lit(in->axes, in->naxes));
  emit_line(e, "}");
}

/* ---- bytes sent (the runtime's count, redistribute.c) ------------------------------------------ */

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi > lo ? hi - lo : 0;
}

/* One exchange with the neighbours that own the rows: a + s b. */
static double shift_seconds(const NetCost *c, const Inst *in, const char **algo) {
  if (c->G <= 1)
    return 0;
  *algo = "exchange";
  return c->sent ? c->a + c->sent * c->b : 0;
}

/* The rows rank `me` of the group sends for static offsets: for each
 * source, the rows of its block [me*bi + off, +bi) that land in the output
 * ([0, n_out)) outside its own output block (or, to a replicated output,
 * in every other rank's copy). */
static int64_t rows_sent(const Inst *in, int d, int ns, int64_t g, int64_t n_out, int64_t bo, bool out_split,
                         int64_t me) {
  int64_t rows = 0;
  for (int i = 0; i < ns; i++) {
    int64_t bi = in->args[i]->type.shape[d] / g, lo = me * bi + in->iv[i], hi = lo + bi;
    int64_t landed = overlap(lo, hi, 0, n_out);
    rows += out_split ? landed - overlap(lo, hi, me * bo, me * bo + bo) : landed * (g - 1);
  }
  return rows;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Candidate ranks: the integers around me = num / den, in [0, g). */
static void around(int64_t num, int64_t den, int64_t g, int64_t *cand, int *nc) {
  if (den == 0)
    return;
  int64_t q = floor_div(num, den);
  for (int64_t k = q; k <= q + 1; k++)
    if (k >= 0 && k < g)
      cand[(*nc)++] = k;
}

/* The most rows any rank of the group sends, without visiting every rank
 * (explain and emit-c cost nothing per device, so a mesh of 2^20 devices
 * plans as fast as one of 2): as a function of me, each source's rows are
 * overlaps of intervals whose ends move linearly with me, so the total is
 * piecewise linear and its maximum over the integers is at the first or
 * last rank or next to a point where two ends meet. Those points are, per
 * source, where the block's ends cross 0 and n_out, and where they cross
 * the ends of me's own output block. With a run-time offset the figure is
 * an upper bound: every row a rank holds may go to another rank (to all
 * others when the result is replicated). */
static int64_t shift_bytes(const Module *mod, const Inst *in) {
  const Mesh *m = &mod->mesh;
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= m->sizes[in->axes[i]];
  if (g <= 1 || (in->fn & SHIFT_SRC_REP))
    return 0;
  const Type *R = &in->results[0]->type;
  int d = in->dim, ns = nsources(in);
  int64_t row = ty_local_count(m, R) / ty_local_dim(m, R, d) * (int64_t)ty_dtype_size(R->dtype);
  int64_t n_out = R->shape[d];
  bool out_split = !(in->fn & SHIFT_OUT_REP);
  int64_t bo = out_split ? n_out / g : n_out, worst = 0;
  if (in->fn & SHIFT_DYN) {
    for (int i = 0; i < ns; i++) {
      int64_t bi = in->args[i]->type.shape[d] / g, k = bi < n_out ? bi : n_out;
      worst += out_split ? k : k * (g - 1);
    }
    return worst * row;
  }
  int64_t *cand = arena_alloc(sizeof(int64_t) * (size_t)(2 + 16 * ns));
  int nc = 0;
  cand[nc++] = 0;
  cand[nc++] = g - 1;
  for (int i = 0; i < ns; i++) {
    int64_t bi = in->args[i]->type.shape[d] / g, off = in->iv[i];
    const int64_t ends[4] = {-off, n_out - off, -off - bi, n_out - off - bi};   /* me*bi = each */
    for (int k = 0; k < 4; k++)
      around(ends[k], bi, g, cand, &nc);
    if (out_split) {   /* me*(bi - bo) = each: the block's ends meet me's own output block's */
      const int64_t own[4] = {-off, bo - off - bi, -off - bi, bo - off};
      for (int k = 0; k < 4; k++)
        around(own[k], bi - bo, g, cand, &nc);
    }
  }
  for (int c = 0; c < nc; c++) {
    int64_t rows = rows_sent(in, d, ns, g, n_out, bo, out_split, cand[c]);
    if (rows > worst)
      worst = rows;
  }
  if (g <= 64)   /* small groups: every rank, as the runtime counts them */
    for (int64_t me = 0; me < g; me++)
      if (rows_sent(in, d, ns, g, n_out, bo, out_split, me) > worst)
        diag_ice("shift: the rows rank %lld sends exceed the most found at the candidate ranks", (long long)me);
  return worst * row;
}

/* ---- the IR text --------------------------------------------------------------------------------- */

static void print_shift(FILE *out, const Module *mod, const Inst *in) {
  fprintf(out, " dim=%d", in->dim);
  if (in->fn & SHIFT_DYN)
    fprintf(out, " offset=%s%%%d", (in->fn & SHIFT_NEG) ? "-" : "", in->args[nsources(in)]->id);
  else
    ir_print_i64s(out, "offsets", in->iv, in->niv);
  if (in->fn & SHIFT_FILL)
    fprintf(out, " fill");
  ir_print_axes(out, mod, in);
}

/* ---- the table ---------------------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* Rows of the sources in the declared result: their dtype. */
static bool infer_shift(const Module *mod, const Inst *in, Type *out) {
  return in->nargs >= 1 && ir_arg_is(in, 0, out->dtype) && in->args[0]->type.rank == out->rank;
}

static const OpDef ops[] = {
    {.op = IR_SHIFT, .name = "shift", .flags = OPF_COLLECTIVE, .print = print_shift, .emit = emit_shift,
     .bytes_sent = shift_bytes, .net_seconds = shift_seconds, .infer = infer_shift},
    {.op = IR_SHIFT_LOCAL, .name = "shift_local", .print = print_shift, .emit = emit_shift, .infer = infer_shift},
    {0},
};

const OpFamily op_shift_family = {
    .name = "shift",
    .ops = ops,
    .builtins = NULL,
};
