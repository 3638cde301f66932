/* explain.c: `shdc explain`, the compile-time report of communication and
 * memory.
 *
 * For every function it lists each collective of the SPMD IR with its
 * source line, kind, mesh axes, the bytes one rank sends (net_bytes_sent:
 * the formulas the runtime's SHD_TRACE counters use, so prediction and
 * measurement agree) and
 * the local types before and after. The peak bytes of live arrays per rank
 * come from simulating the generated code's buffers: the emitter's own plan
 * of loops and buffers (sched_plan: the values fused or grouped, those
 * without a buffer, when each value dies) and the same allocation
 * decisions (sched_result_kind, sched_temp_bytes).
 *
 * The simulation is linear in the program: each function is simulated once,
 * callees first (a call then costs its summary, not its body), each loop
 * body once (the second iteration follows from the first), and byte sums
 * are checked ([E_SHAPE] on the line where one would overflow).
 */
#include "schedule.h"

static int64_t local_bytes(const Module *mod, const Type *t) {
  return ty_local_count(&mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype);
}

/* ---- the list ------------------------------------------------------------------------ */

typedef struct {
  FILE *out;
  const Module *mod;
  int count;
  int64_t bytes;
  const NetModel *net;   /* --network: estimates too */
  double seconds;
} Report;

static void list_block(Report *r, const IrBlock *b, const char *ctx);

/* " of FILE" for a position in an imported file (a std/nn.shd function
 * inlined into the program's step), "" in the program's own: a bare line
 * number would point into the wrong file. A collective's own file goes at
 * the end of its line, after the loop or branch it is in, so the columns
 * before stay as they were. */
static const char *of_file(Pos p) {
  return p.file && p.file->order > 0 ? arena_printf(" of %s", p.file->name) : "";
}

/* What a collective's line shows after its operand: its result, or for a
 * bucket (overlap.c) how many arrays it holds and where it is waited. */
static const char *shapes_after(const Report *r, const Inst *in) {
  if (!ir_is_async_start(in->op))
    return ty_local_str(&r->mod->mesh, &in->results[0]->type);
  int n = in->niv / ASYNC_MEMBER_W;
  double dot, ew;
  const Inst *wait = overlap_work(r->mod, in, &dot, &ew);
  DType wire = async_wire_dtype(in);
  const char *as = wire != in->args[in->op == IR_ALL_GATHER_START ? 1 : 0]->type.dtype
                       ? arena_printf(", sent as %s", ty_dtype_name(wire)) : "";
  return arena_printf("... (a bucket of %d array%s%s, overlapped with %.3g GFLOP and %.3g M element operations "
                      "before its wait at line %d)", n, n == 1 ? "" : "s", as, dot / 1e9, ew / 1e6,
                      wait ? wait->pos.line : 0);
}

static void list_inst(Report *r, const Inst *in, const char *ctx) {
  if (op_is_collective(in->op)) {
    const Mesh *m = &r->mod->mesh;
    Str axes = {0};
    for (int i = 0; i < in->naxes; i++)
      str_printf(&axes, "%s%s", i ? "," : "", m->names[in->axes[i]]);
    int64_t bytes = net_bytes_sent(r->mod, in);
    const OpDef *d = op_def(in->op);
    const char *kind = d->trace_kind ? d->trace_kind : ir_opname(in->op);
    if (d->variant)
      kind = arena_printf("%s.%s", kind, d->variant(in));
    const char *est = "";
    if (r->net) {
      const char *algo;
      double sec = net_collective_seconds(r->net, r->mod, in, &algo);
      r->seconds += sec;
      est = arena_printf("  est %10s %-18s", net_seconds_str(sec), *algo ? algo : "-");
    }
    const char *of = of_file(in->pos);
    const char *where = *of ? arena_printf("   (line %d%s)", in->pos.line, of) : "";
    fprintf(r->out, "  line %-4d %-18s over (%s)%*s %12lld bytes/rank%s   %s -> %s%s%s\n", in->pos.line, kind,
            in->naxes == 0 ? "mesh" : str_cstr(&axes), (int)(8 - (in->naxes == 0 ? 4 : axes.len)), "",
            (long long)bytes, est, ty_local_str(m, &in->args[in->op == IR_ALL_GATHER_START]->type), shapes_after(r, in),
            ctx, where);
    free(axes.buf);
    r->count++;
    if (__builtin_add_overflow(r->bytes, bytes, &r->bytes)) {
      diag_error(in->pos, "E_SHAPE", "explain: the bytes sent per rank do not fit in 64 bits");
      r->bytes = INT64_MAX;
    }
  }
  const char *of = in->nregions ? of_file(in->pos) : "";
  for (int k = 0; k < in->nregions; k++) {
    const char *inner = in->op == IR_FOR ? arena_printf("   (in the loop at line %d%s)", in->pos.line, of)
                                         : arena_printf("   (in the %s branch at line %d%s)", k ? "else" : "then",
                                                        in->pos.line, of);
    list_block(r, in->regions[k], inner);
  }
}

static void list_block(Report *r, const IrBlock *b, const char *ctx) {
  for (int i = 0; i < b->insts.len; i++)
    list_inst(r, b->insts.data[i], ctx);
}

/* ---- peak memory: a simulation of the generated code's buffers -------------------------- */

/* What a call of a function does to its caller's buffers: the most bytes
 * it has live beyond its caller's at any moment (extra), the bytes still
 * live when it returns (net: its new results), and for each result a
 * scalar (-1), a parameter's buffer (p), or new buffer np + b. A callee
 * cannot reuse its parameters' buffers (only values defined in the same
 * block are stolen), so the summary does not depend on the caller: each
 * function is simulated once, callees first, and a call costs O(results). */
typedef struct {
  int64_t extra, net, peak;
  int nparams, nres;
  int *res;
  int64_t *res_bytes;
} Summary;

/* Where a function's peak is, for --max-memory's message: the instruction,
 * the largest arrays live then (each with its buffer while the snapshot is
 * current, -1 for an instruction's temporaries), and the call whose callee
 * holds the rest of the peak. */
#define SITE_KEEP 16

typedef struct {
  const Value *v;      /* NULL: the temporaries of tmp_of, or with tmp_of NULL a bucket's buffer */
  const Inst *tmp_of;
  const Func *fn;
  int buf;
  int count;           /* arrays of this value (a loop's carry and its next) */
  int64_t bytes;
} SiteArray;

typedef struct {
  SiteArray a[SITE_KEEP];
  int n;
  const Inst *at;
  const Inst *call;
} Site;

/* A level of live bytes to take a snapshot at, the first time it is
 * reached: the function's peak, and each loop body's own peak (a loop's
 * second iteration is not simulated, so the body's arrays at its peak are
 * taken in the first). */
typedef struct {
  int64_t target;
  bool hit;
  int first_fresh;     /* buffers from here on are the body's */
  Site site;
} Watch;

typedef struct {
  const Module *mod;
  int64_t *bytes;      /* by buffer */
  int *refs;
  /* A loop's accumulator updated in place (dynamic_update_slice or an
   * all-reduce taking its carry's buffer) is copied in the first iteration,
   * while the initial value is still held, and taken in the later ones: such
   * a buffer of the body is marked with the loop's depth, and peak2 is the
   * peak of the live bytes not counting the marked ones (stolen), which the
   * later iterations reach. */
  int *steal_of;       /* by buffer: the loop depth whose later iterations take it, or 0 */
  bool *taped;         /* by buffer: already pushed on a tape (its bytes are the tape's) */
  int64_t *cap;        /* by buffer: a tape whose entries are written again (vjp_save's): its most bytes, else -1 */
  Schedule *plan;      /* the emitter's plan: fusion, loop groups, last uses (sched.c) */
  int depth;
  int64_t stolen, peak2;
  int64_t prefetch;    /* staging bytes of prefetched all-gathers started in loop bodies (stolen too) */
  int nbufs, capbufs;
  int *buf_of;         /* by value id */
  const int *last_use; /* by value id, for the block defining it: the plan's */
  int *dead_next;      /* by value id: the next value released at the same instruction */
  int64_t live, peak;
  PtrMap func_index;
  Summary *sums;       /* by function index */
  bool overflow;
  /* Tape pushes of arrays, for loops to repeat: the tape's buffer and the
   * bytes it took on (pushes[2i], pushes[2i+1]). */
  int64_t *pushes;
  int npushes, cappushes;
  /* For the peak's site (explain_peak_site): the value of each buffer, the
   * function and instruction being simulated, the temporaries it holds,
   * and while a call or a loop's second iteration adds its extra bytes,
   * the call or the body's watch. A first pass (track 1) records each
   * loop body's extra bytes (loop_extra, by the for's index in loop_map),
   * the second (track 2) takes the snapshots. */
  const Value **val;
  const Func *fn;
  const Inst *cur, *bump_call;
  const Watch *bump_body;
  int64_t cur_temp;
  int track;
  Watch *watch[64];
  int nwatch;
  PtrMap loop_map;
  int64_t *loop_extra;
  PtrMap sites;        /* a bucket's site (+1) -> the buffer of its staged copies (the runtime's, async.c) */
  int nloops;
} Sim;

/* Byte sums are checked: an overflow is an error at the instruction. */
static void add_live(Sim *s, int64_t bytes, Pos pos) {
  if (__builtin_add_overflow(s->live, bytes, &s->live)) {
    s->live = INT64_MAX;
    if (!s->overflow)
      diag_error(pos, "E_SHAPE", "explain: the bytes of arrays live here do not fit in 64 bits");
    s->overflow = true;
  }
}

static void site_snapshot(Sim *s, Watch *w);

static void bump(Sim *s) {
  if (s->live > s->peak)
    s->peak = s->live;
  for (int i = 0; i < s->nwatch; i++)
    if (!s->watch[i]->hit && s->live >= s->watch[i]->target)
      site_snapshot(s, s->watch[i]);
  if (s->live - s->stolen > s->peak2)
    s->peak2 = s->live - s->stolen;
}

static int buf_entry(Sim *s, int64_t bytes, const Value *v) {
  if (s->nbufs == s->capbufs) {   /* the by-buffer arrays grow together */
    int old = s->capbufs;
    s->bytes = mem_grow(s->bytes, &s->capbufs, s->nbufs + 1, sizeof *s->bytes);
    s->refs = mem_resize(s->refs, old, s->capbufs, sizeof *s->refs);
    s->val = mem_resize(s->val, old, s->capbufs, sizeof *s->val);
    s->steal_of = mem_resize(s->steal_of, old, s->capbufs, sizeof *s->steal_of);
    s->taped = mem_resize(s->taped, old, s->capbufs, sizeof *s->taped);
    s->cap = mem_resize(s->cap, old, s->capbufs, sizeof *s->cap);
  }
  s->cap[s->nbufs] = -1;
  s->bytes[s->nbufs] = bytes;
  s->refs[s->nbufs] = 1;
  s->val[s->nbufs] = v;
  s->steal_of[s->nbufs] = 0;
  s->taped[s->nbufs] = false;
  return s->nbufs++;
}

static int buf_new(Sim *s, int64_t bytes, Pos pos, const Value *v) {
  int b = buf_entry(s, bytes, v);
  add_live(s, bytes, pos);
  bump(s);
  return b;
}

static void buf_retain(Sim *s, int b) {
  if (b >= 0)
    s->refs[b]++;
}

static void buf_release(Sim *s, int b) {
  if (b >= 0 && --s->refs[b] == 0) {
    s->live -= s->bytes[b];
    if (s->depth && s->steal_of[b] == s->depth)
      s->stolen -= s->bytes[b];
  }
}

static void sim_block(Sim *s, const IrBlock *b, int *yield_bufs);

static void sim_call(Sim *s, const Inst *in) {
  const Summary *sm = &s->sums[ptrmap_get(&s->func_index, in->callee)];
  int64_t at = s->live;
  add_live(s, sm->extra, in->pos);
  s->bump_call = in;
  bump(s);
  s->bump_call = NULL;
  s->live = at;
  add_live(s, sm->net, in->pos);
  for (int k = 0; k < in->nresults; k++) {
    int r = sm->res[k], b = -1;
    if (r >= 0 && r < sm->nparams) {
      b = s->buf_of[in->args[r]->id];
      buf_retain(s, b);
    } else if (r >= 0) {
      for (int j = 0; j < k && b < 0; j++)   /* the same new buffer returned twice */
        if (sm->res[j] == r)
          b = s->buf_of[in->results[j]->id];
      if (b >= 0)
        buf_retain(s, b);
      else
        b = buf_entry(s, sm->res_bytes[k], in->results[k]);   /* its bytes are in net */
    }
    s->buf_of[in->results[k]->id] = b;
  }
}

/* The iterations a for runs, when its bounds are known at compile time;
 * otherwise the two the simulation follows. */
static int64_t trip_count(const Inst *in) {
  int64_t n;
  if (!ir_const_trips(in, &n))
    return 2;
  return n > (int64_t)1e15 ? (int64_t)1e15 : n;
}

/* The simulation follows two iterations; the tapes a loop pushes on (a
 * forward loop's residuals, kept for the backward pass) grow in every one,
 * so the first iteration's pushes are repeated for the iterations between
 * the first and the last (the second simulated iteration stands for the
 * last: its net bytes hold its own pushes). A tape's bytes are its n
 * iterations' pushes; the repeats are pushes too, for an enclosing loop. */
static void tape_iterations(Sim *s, const Inst *in, int push0) {
  int64_t n = trip_count(in), end = s->npushes, grow = 0;
  if (n == 2)   /* the second iteration's pushes are in its net bytes: the tapes hold them too */
    for (int64_t i = push0; i < end; i++) {
      s->bytes[s->pushes[2 * i]] += s->pushes[2 * i + 1];
      s->pushes[2 * i + 1] *= 2;
    }
  if (n <= 2)
    return;
  for (int64_t i = push0; i < end; i++) {
    int bt = (int)s->pushes[2 * i];
    int64_t bytes = s->pushes[2 * i + 1], rest, later;
    if (__builtin_mul_overflow(bytes, n - 1, &rest) || __builtin_mul_overflow(bytes, n - 2, &later)) {
      if (!s->overflow)
        diag_error(in->pos, "E_SHAPE", "explain: the bytes this loop keeps for its gradient do not fit in 64 bits");
      s->overflow = true;
      return;
    }
    if (s->cap[bt] >= 0 && rest > s->cap[bt] - s->bytes[bt]) {
      /* a tape of S entries written again: it holds S at most (the
       * second iteration's push, in its net bytes, replaces one) */
      rest = s->cap[bt] > s->bytes[bt] ? s->cap[bt] - s->bytes[bt] : 0;
      later = rest > bytes ? rest - bytes : 0;
    }
    if (__builtin_add_overflow(grow, later, &grow)) {
      if (!s->overflow)
        diag_error(in->pos, "E_SHAPE", "explain: the bytes this loop keeps for its gradient do not fit in 64 bits");
      s->overflow = true;
      return;
    }
    s->bytes[bt] += rest;
    s->pushes[2 * i + 1] = bytes + rest;
  }
  add_live(s, grow, in->pos);
  bump(s);
}

/* How a loop body's yield relates to its start: a carry it passes on, a
 * buffer the body made, or one from outside the loop. */
typedef enum { YIELD_NONE, YIELD_CARRY, YIELD_FRESH, YIELD_OUTER } YieldKind;

/* A loop runs its body once with stand-ins (no bytes) for the carries, to
 * learn the body's extra and net bytes and what each yield is; the second
 * iteration, which starts without the initial values, then follows without
 * simulating the body again, so nested loops cost one pass each. */
static void sim_for(Sim *s, const Inst *in) {
  const IrBlock *body = in->regions[0];
  int nc = in->nresults;
  int *carry = arena_alloc(sizeof(int) * 6 * (size_t)(nc + 1)), *next = carry + nc + 1, *proxy = next + nc + 1,
      *kind = proxy + nc + 1, *from = kind + nc + 1, *second = from + nc + 1;
  for (int k = 0; k < nc; k++) {
    carry[k] = in->args[k + 2]->type.rank ? s->buf_of[in->args[k + 2]->id] : -1;
    buf_retain(s, carry[k]);
    proxy[k] = carry[k] >= 0 ? buf_entry(s, 0, body->args[k + 1]) : -1;
    s->buf_of[body->args[k + 1]->id] = proxy[k];
  }
  s->buf_of[body->args[0]->id] = -1;
  int first_fresh = s->nbufs, push0 = s->npushes;
  int64_t live0 = s->live, peak0 = s->peak, stolen0 = s->stolen, peak2_0 = s->peak2, prefetch0 = s->prefetch;
  s->peak = s->peak2 = s->live;
  s->stolen = 0;
  s->depth++;
  int loop = s->track ? ptrmap_get(&s->loop_map, in) : -1;
  Watch body_watch = {0};
  if (s->track == 2 && loop >= 0 && s->nwatch < 64) {
    body_watch.target = live0 + s->loop_extra[loop];
    body_watch.first_fresh = first_fresh;
    s->watch[s->nwatch++] = &body_watch;
  }
  sim_block(s, body, next);
  if (s->track == 2 && loop >= 0 && s->nwatch && s->watch[s->nwatch - 1] == &body_watch)
    s->nwatch--;
  int64_t extra = s->peak - live0, net = s->live - live0, extra2 = s->peak2 - live0;
  for (int b = first_fresh; b < s->nbufs; b++)
    if (s->steal_of[b] == s->depth)
      s->steal_of[b] = 0;
  s->depth--;
  s->stolen = stolen0;
  if (s->track == 1) {
    if (loop < 0) {
      loop = s->nloops++;
      ptrmap_put(&s->loop_map, in, loop);
      s->loop_extra = mem_resize(s->loop_extra, s->nloops - 1, s->nloops, sizeof *s->loop_extra);
    }
    s->loop_extra[loop] = extra;
  }
  s->peak = s->peak > peak0 ? s->peak : peak0;
  for (int k = 0; k < nc; k++) {
    kind[k] = next[k] < 0 ? YIELD_NONE : next[k] >= first_fresh ? YIELD_FRESH : YIELD_OUTER;
    for (int j = 0; j < nc; j++)
      if (next[k] >= 0 && next[k] == proxy[j]) {
        kind[k] = YIELD_CARRY;
        from[k] = j;
        next[k] = carry[j];
        buf_retain(s, carry[j]);
      }
  }
  /* End of the first iteration: the initial values are let go. */
  for (int k = 0; k < nc; k++) {
    buf_release(s, carry[k]);
    carry[k] = next[k];
  }
  /* A prefetch's staging is not in the last iteration's peak; the one
   * before holds it, with one iteration's pushes less on the tapes. */
  int64_t per = 0, trips = trip_count(in);
  for (int i = push0; i < s->npushes; i++)
    per += s->pushes[2 * i + 1];
  if (s->prefetch > prefetch0 && trips >= 3 && live0 + extra + (trips - 2) * per > s->peak)
    s->peak = live0 + extra + (trips - 2) * per;
  s->prefetch = prefetch0;
  tape_iterations(s, in, push0);
  int64_t start2 = s->live;
  s->peak2 = peak2_0;
  if (live0 + extra - stolen0 > s->peak2)
    s->peak2 = live0 + extra - stolen0;
  add_live(s, extra2, in->pos);
  s->bump_body = body_watch.hit ? &body_watch : NULL;
  bump(s);
  s->bump_body = NULL;
  s->live = start2;
  add_live(s, net, in->pos);
  for (int k = 0; k < nc; k++) {
    second[k] = kind[k] == YIELD_CARRY ? carry[from[k]] : kind[k] == YIELD_OUTER ? carry[k] : -1;
    if (kind[k] == YIELD_FRESH) {
      for (int j = 0; j < k && second[k] < 0; j++)
        if (kind[j] == YIELD_FRESH && next[j] == next[k])
          second[k] = second[j];
      if (second[k] < 0) {
        second[k] = buf_entry(s, s->bytes[next[k]], in->results[k]);
        continue;
      }
    }
    buf_retain(s, second[k]);
  }
  for (int k = 0; k < nc; k++) {
    buf_release(s, carry[k]);
    s->buf_of[in->results[k]->id] = second[k];
  }
}

static void sim_if(Sim *s, const Inst *in) {
  /* Peak of the larger branch; the state after is the then-branch's. */
  int64_t live0 = s->live, peak0 = s->peak, stolen0 = s->stolen, peak2_0 = s->peak2;
  int *outs = arena_alloc(sizeof(int) * (size_t)(in->nresults + 1));
  int saved_n = s->nbufs, saved_pushes = s->npushes;
  int *saved_refs = mem_alloc(sizeof(int) * (size_t)(s->nbufs + 1));
  if (s->nbufs)
    memcpy(saved_refs, s->refs, sizeof(int) * (size_t)s->nbufs);
  sim_block(s, in->regions[1], outs);
  int64_t else_peak = s->peak, else_peak2 = s->peak2;
  s->live = live0;
  s->peak = peak0;
  s->stolen = stolen0;
  s->peak2 = peak2_0;
  if (saved_n)
    memcpy(s->refs, saved_refs, sizeof(int) * (size_t)saved_n);
  s->nbufs = saved_n;
  s->npushes = saved_pushes;
  free(saved_refs);
  sim_block(s, in->regions[0], outs);
  if (else_peak > s->peak)
    s->peak = else_peak;
  if (else_peak2 > s->peak2)
    s->peak2 = else_peak2;
  for (int k = 0; k < in->nresults; k++)
    s->buf_of[in->results[k]->id] = outs[k];
}

static void sim_results(Sim *s, const Inst *in, int idx) {
  for (int k = 0; k < in->nresults; k++) {
    const Value *r = in->results[k];
    if (r->type.rank && sched_nobuf(s->plan, r)) {
      s->buf_of[r->id] = -1;   /* computed inside its consumer's loop */
      continue;
    }
    EmitResult kind = s->plan->gmember[r->id] ? EMIT_ALLOC : sched_result_kind(s->mod, in, k);
    if (kind == EMIT_STEAL_OR_ALLOC) {
      /* an instruction of several such results (a bucket's wait) takes each its own operand's buffer */
      const Value *x = in->nresults > 1 && k < in->nargs ? in->args[k] : in->args[0];
      int bx = s->buf_of[x->id];
      if (s->depth && ir_is_carry(x, in->parent) && s->last_use[x->id] == idx && bx >= 0) {
        /* a copy now, the carry's own buffer in the later iterations */
        int b = buf_entry(s, local_bytes(s->mod, &r->type), r);
        s->steal_of[b] = s->depth;
        s->stolen += s->bytes[b];
        add_live(s, s->bytes[b], in->pos);
        bump(s);
        s->buf_of[r->id] = b;
        continue;
      }
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
      s->buf_of[r->id] = buf_new(s, local_bytes(s->mod, &r->type), in->pos, r);
      break;
    }
  }
}

/* A push of bytes onto buffer bt, for the enclosing loops to repeat. */
static void record_push(Sim *s, int bt, int64_t bytes) {
  if (s->npushes == s->cappushes) {   /* (buffer, bytes) pairs */
    int old = s->cappushes;
    s->cappushes = old ? 2 * old : 64;
    s->pushes = mem_resize(s->pushes, 2 * old, 2 * s->cappushes, sizeof *s->pushes);
  }
  s->pushes[2 * s->npushes] = bt;
  s->pushes[2 * s->npushes + 1] = bytes;
  s->npushes++;
}

/* A tape is a buffer whose bytes are those of the arrays pushed on it: a
 * pushed array's bytes move to the tape's account (the tape keeps a
 * reference; the array's own release then frees nothing), and a loop carry
 * pushed through its 0-byte stand-in adds its type's bytes. A buffer pushed
 * again (the same array, or a view of it such as a reshape, saved twice)
 * adds nothing: the tape holds one reference to one buffer. */
static void sim_tape_push(Sim *s, const Inst *in) {
  const Value *v = in->args[2];
  int bt = s->buf_of[in->args[0]->id];
  if (!v->type.rank || bt < 0)
    return;
  int bv = s->buf_of[v->id];
  int64_t moved = bv >= 0 ? s->bytes[bv] : 0;
  if (bv >= 0 && s->taped[bv]) {
    moved = 0;
  } else if (moved > 0) {
    s->bytes[bv] = 0;
  } else {
    moved = local_bytes(s->mod, &v->type);
    add_live(s, moved, in->pos);
    bump(s);
  }
  if (bv >= 0)
    s->taped[bv] = true;
  s->bytes[bt] += moved;
  record_push(s, bt, moved);
}

/* A prefetched all-gather's staging buffer: its gathered arrays. */
static int64_t gather_bytes(const Sim *s, const Inst *in) {
  int64_t g = 1, bytes = 0;
  for (int i = 0; i < in->naxes; i++)
    g *= s->mod->mesh.sizes[in->axes[i]];
  for (int j = 1; j < in->nargs; j++)
    bytes += g * local_bytes(s->mod, &in->args[j]->type);
  return bytes;
}

/* A bucket (overlap.c): the runtime copies its arrays into a staging
 * buffer at the start and frees it at the wait. A loop's bucket is waited
 * after the loop: its copies are pushes, as on a tape, which the loop
 * repeats for every iteration. A prefetched all-gather's is waited in the
 * next iteration (the loop holds one at a time: the second buffer beside
 * the gathered arrays in use), its last by the drain after the loop. */
static void sim_bucket(Sim *s, const Inst *in) {
  const void *key = (const void *)(uintptr_t)(in->ival + 1);
  int b = ptrmap_get(&s->sites, key);
  if (ir_is_async_wait(in->op)) {
    if (b >= 0 && s->refs[b] > 0)
      buf_release(s, b);
    return;
  }
  if (b < 0 || s->refs[b] == 0) {
    b = buf_entry(s, 0, NULL);
    ptrmap_put(&s->sites, key, b);
  }
  int64_t bytes = in->op == IR_ALL_GATHER_START ? gather_bytes(s, in) : async_bucket_bytes(s->mod, in);
  s->bytes[b] += bytes;
  add_live(s, bytes, in->pos);
  bump(s);
  int64_t c;
  if (in->op == IR_ALL_GATHER_START && s->depth && !ir_const_int(in->args[0], &c)) {
    /* started in every iteration but the last: the later iterations' peak
     * (the last's) is without it; sim_for adds the one before */
    s->steal_of[b] = s->depth;
    s->stolen += bytes;
    s->prefetch += bytes;
  }
  bool waited_here = in->op == IR_ALL_GATHER_START;
  for (int k = 0; k < in->parent->insts.len && !waited_here; k++) {
    const Inst *w = in->parent->insts.data[k];
    waited_here = w->op == IR_ALL_REDUCE_WAIT && w->ival == in->ival;
  }
  if (waited_here)
    return;
  record_push(s, b, bytes);
}

static void sim_inst(Sim *s, const Inst *in, int i, int *yield_bufs) {
  /* a gather's wait: its arrays written from the staging, which goes after */
  if (ir_is_async_start(in->op) || in->op == IR_ALL_REDUCE_WAIT)
    sim_bucket(s, in);
  switch (in->op) {
  case IR_TAPE_NEW: {
    int bt = s->buf_of[in->results[0]->id] = buf_entry(s, 0, in->results[0]);
    int64_t n;
    const Type *el = &in->results[0]->type.elems[0];
    if (in->ival && ir_const_int(in->args[0], &n) && el->rank)
      s->cap[bt] = n * local_bytes(s->mod, el);
    break;
  }
  case IR_TAPE_PUSH: sim_tape_push(s, in); break;
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
    int64_t tmp = sched_temp_bytes(s->mod, in);
    sim_results(s, in, i);
    int64_t after = s->live;
    add_live(s, tmp, in->pos);
    s->cur_temp = tmp;
    bump(s);
    s->cur_temp = 0;
    s->live = after;   /* the instruction frees its temporaries again */
  }
  }
  if (in->op == IR_ALL_GATHER_WAIT)
    sim_bucket(s, in);
}

/* Each value is released right after its last use, as the generated code
 * does; the values dying at each instruction are listed once, so a block
 * costs time linear in its length. */
static void sim_block(Sim *s, const IrBlock *b, int *yield_bufs) {
  int n = b->insts.len;
  const BlockPlan *bp = sched_block(s->plan, b);
  /* the instructions made at each index, in order (a loop group's members
   * at its last one, then the tape pushes made after the group) */
  int *head = mem_alloc(sizeof(int) * (size_t)(n + 1)), *tail = mem_alloc(sizeof(int) * (size_t)(n + 1)),
      *next = mem_alloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    head[i] = tail[i] = next[i] = -1;
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < n; j++) {
      if ((bp->deferred[j] != 0) != (pass == 1))
        continue;
      int i = bp->at[j];
      if (tail[i] < 0)
        head[i] = j;
      else
        next[tail[i]] = j;
      tail[i] = j;
    }
  int *dying = mem_alloc(sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    dying[i] = -1;
  for (int i = 0; i < n; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++) {
      const Value *v = in->results[k];
      if (!v->type.rank && v->type.kind != TY_TAPE)
        continue;
      s->dead_next[v->id] = dying[s->last_use[v->id]];
      dying[s->last_use[v->id]] = v->id;
    }
  }
  for (int i = 0; i < n; i++) {
    for (int j = head[i]; j >= 0; j = next[j]) {
      s->cur = b->insts.data[j];
      sim_inst(s, b->insts.data[j], i, yield_bufs);
    }
    for (int v = dying[i]; v >= 0; v = s->dead_next[v])
      buf_release(s, s->buf_of[v]);
  }
  free(dying);
  free(head);
  free(tail);
  free(next);
}

static void summarise(Sim *s, const Func *f, Summary *sm) {
  s->nbufs = s->npushes = 0;
  ptrmap_free(&s->sites);   /* buffer numbers start again */
  s->sites = (PtrMap){0};
  s->live = s->peak = s->peak2 = s->stolen = 0;
  s->depth = 0;
  s->fn = f;
  s->cur = NULL;
  /* Parameters are the caller's buffers: counted, never released here. */
  int np = f->body->nargs;
  int *param_of = mem_calloc((size_t)np + 1, sizeof(int));
  for (int i = 0; i < np; i++) {
    const Value *p = f->body->args[i];
    s->buf_of[p->id] = p->type.rank ? buf_new(s, local_bytes(s->mod, &p->type), f->pos, p) : -1;
    buf_retain(s, s->buf_of[p->id]);
    if (s->buf_of[p->id] >= 0)
      param_of[s->buf_of[p->id]] = i;
  }
  int nparam_bufs = s->nbufs;
  int64_t params = s->live;
  int *rets = arena_alloc(sizeof(int) * (size_t)(f->nresults + 1));
  for (int k = 0; k < f->nresults; k++)
    rets[k] = -1;
  sim_block(s, f->body, rets);
  sm->peak = s->peak;
  sm->extra = s->peak - params;
  sm->net = s->live - params;
  sm->nparams = np;
  sm->nres = f->nresults;
  sm->res = arena_alloc(sizeof(int) * (size_t)(f->nresults + 1));
  sm->res_bytes = arena_alloc(sizeof(int64_t) * (size_t)(f->nresults + 1));
  for (int k = 0; k < f->nresults; k++) {
    int b = rets[k];
    sm->res[k] = b < 0 ? -1 : b < nparam_bufs ? param_of[b] : np + b;
    sm->res_bytes[k] = b >= 0 ? s->bytes[b] : 0;
  }
  free(param_of);
}

/* Callees before callers (a call that closes a cycle sees the callee's
 * summary still empty). */
static void summarise_all(Sim *s) {
  int nf = s->mod->funcs.len;
  CallGraph g;
  ir_call_graph(s->mod, nf, &g);
  s->func_index = g.index;
  g.index = (PtrMap){0};
  s->sums = mem_calloc((size_t)nf + 1, sizeof(Summary));
  for (int k = 0; k < nf; k++)
    summarise(s, s->mod->funcs.data[g.order[k]], &s->sums[g.order[k]]);
  ir_call_graph_free(&g);
}

static Sim *sim_module(const Module *mod) {
  static Sim cache;
  if (cache.mod == mod)
    return &cache;
  Sim *s = &cache;
  /* Another module (shdc plan compiles one per layout): let the last go. */
  free(s->bytes);
  free(s->refs);
  free(s->val);
  free(s->steal_of);
  free(s->taped);
  free(s->cap);
  free(s->buf_of);
  sched_free(s->plan);
  free(s->dead_next);
  free(s->sums);
  free(s->pushes);
  free(s->loop_extra);
  ptrmap_free(&s->func_index);
  ptrmap_free(&s->loop_map);
  memset(s, 0, sizeof *s);
  s->mod = mod;
  size_t nv = (size_t)mod->next_value + 1;
  s->buf_of = mem_calloc(nv, sizeof(int));
  s->dead_next = mem_calloc(nv, sizeof(int));
  s->plan = sched_plan(mod);
  s->last_use = s->plan->last_use;
  summarise_all(s);
  return s;
}

/* ---- where the peak is (--max-memory) --------------------------------------------------- */

/* Keeps the SITE_KEEP largest, by bytes; two arrays of one value (a carry
 * and its next iteration's) are one entry. */
static void site_add(Site *st, SiteArray e) {
  if (e.bytes <= 0)
    return;
  for (int i = 0; e.v && i < st->n; i++)
    if (st->a[i].v == e.v && st->a[i].fn == e.fn) {
      e.bytes += st->a[i].bytes;
      e.count += st->a[i].count;
      memmove(&st->a[i], &st->a[i + 1], sizeof(SiteArray) * (size_t)(st->n - i - 1));
      st->n--;
      break;
    }
  int p = st->n;
  while (p > 0 && st->a[p - 1].bytes < e.bytes)
    p--;
  if (p >= SITE_KEEP)
    return;
  int last = st->n < SITE_KEEP ? st->n++ : SITE_KEEP - 1;
  memmove(&st->a[p + 1], &st->a[p], sizeof(SiteArray) * (size_t)(last - p));
  st->a[p] = e;
}

/* The live buffers now; at a loop's second iteration, with the body's own
 * arrays at its peak (the first iteration's snapshot), at a call, the call
 * (its callee's arrays are found by simulating it in turn). */
static void site_snapshot(Sim *s, Watch *w) {
  Site *st = &w->site;
  w->hit = true;
  memset(st, 0, sizeof *st);
  st->at = s->cur;
  st->call = s->bump_call;
  for (int b = 0; b < s->nbufs; b++)
    if (s->refs[b] > 0)
      site_add(st, (SiteArray){s->val[b], NULL, s->fn, b, 1, s->bytes[b]});
  site_add(st, (SiteArray){NULL, s->cur, s->fn, -1, 1, s->cur_temp});
  const Watch *bw = s->bump_body;
  if (bw) {
    for (int i = 0; i < bw->site.n; i++)
      if (bw->site.a[i].buf < 0 || bw->site.a[i].buf >= bw->first_fresh)
        site_add(st, bw->site.a[i]);
    st->at = bw->site.at;
    st->call = bw->site.call;
  }
}

/* f's peak, simulated twice: the first pass learns each loop body's extra
 * bytes, the second takes the snapshots when the live bytes first reach
 * the peak (and each body's). Linear in f, like the first simulation. */
static Site func_site(Sim *s, const Func *f) {
  Summary tmp;
  ptrmap_free(&s->loop_map);
  s->loop_map = (PtrMap){0};
  ptrmap_free(&s->sites);
  s->sites = (PtrMap){0};
  s->nloops = 0;
  s->track = 1;
  summarise(s, f, &tmp);
  Watch w = {0};
  w.target = tmp.peak;
  s->watch[0] = &w;
  s->nwatch = 1;
  s->track = 2;
  summarise(s, f, &tmp);
  s->nwatch = 0;
  s->track = 0;
  return w.site;
}

static const char *bytes_str(int64_t b) {
  static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    u++;
  }
  return u ? arena_printf("%.1f %s", v, unit[u]) : arena_printf("%lld bytes", (long long)b);
}

/* "w2 f32[2048,2048] (line 39, main): 16.0 MiB". */
static const char *site_array_str(const Mesh *m, const SiteArray *e) {
  const char *n = e->count > 1 ? arena_printf("%d arrays, ", e->count) : "";
  if (!e->v && !e->tmp_of)   /* sim_bucket's buffer, of no value */
    return arena_printf("the staging buffer of a bucket of collectives (%s): %s", ir_func_label(e->fn),
                        bytes_str(e->bytes));
  if (!e->v)
    return arena_printf("the temporaries of %s (line %d%s, %s): %s", ir_opname(e->tmp_of->op), e->tmp_of->pos.line,
                        of_file(e->tmp_of->pos), ir_func_label(e->fn), bytes_str(e->bytes));
  const Inst *d = e->v->def;
  if (e->v->type.kind == TY_TAPE)
    return arena_printf("the tape of the loop at line %d, the residuals it keeps for the gradient (%s): %s%s",
                        d ? d->pos.line : e->fn->pos.line, ir_func_label(e->fn), n, bytes_str(e->bytes));
  const char *name = ir_value_label(e->v) ? ir_value_label(e->v) : d ? arena_printf("a %s result", ir_opname(d->op)) : "a parameter";
  Pos at = d ? d->pos : e->fn->pos;
  return arena_printf("%s %s (line %d%s, %s): %s%s", name, ty_str(m, &e->v->type), at.line, of_file(at),
                      ir_func_label(e->fn), n, bytes_str(e->bytes));
}

/* One error at the peak of f: its bytes, the functions down to the one
 * the peak is in, the largest arrays live then (notes at their
 * definitions). */
static void report_peak(Sim *s, const Func *f, int64_t peak, int64_t limit, const char *limit_text) {
  const Mesh *m = &s->mod->mesh;
  Site site = func_site(s, f), all = {0};
  for (int i = 0; i < site.n; i++)
    site_add(&all, site.a[i]);
  const Inst *at = site.at, *call = site.call;
  const Func *inner = f;
  Str chain = {0};
  for (int depth = 0; call && call->callee && depth < 10000; depth++) {
    const Func *g = call->callee;
    str_printf(&chain, "%s%s (called from %s at line %d)", depth ? ", in " : ", in ", ir_func_label(g), ir_func_label(inner),
               call->pos.line);
    Site cs = func_site(s, g);
    for (int i = 0; i < cs.n; i++) {
      const Value *v = cs.a[i].v;
      if (!(v && !v->def && v->arg_of == g->body))   /* g's parameters are its caller's arrays */
        site_add(&all, cs.a[i]);
    }
    at = cs.at ? cs.at : call;
    call = cs.call;
    inner = g;
  }
  Str mesh = {0}, list = {0};
  for (int a = 0; a < m->naxes; a++)
    str_printf(&mesh, "%s%s=%d", a ? "," : "", m->names[a], m->sizes[a]);
  int shown = all.n < 5 ? all.n : 5;
  for (int i = 0; i < shown; i++)
    str_printf(&list, "%s%s", i ? "; " : "", site_array_str(m, &all.a[i]));
  Pos pos = at ? at->pos : f->pos;
  diag_error(pos, "E_MEMORY",
             "fn %s needs %lld bytes (%s) of arrays per rank at its peak with --mesh %s, above --max-memory=%s "
             "(%lld bytes); the peak is at line %d%s; the largest arrays live then: %s; shard them over more "
             "devices (a larger mesh, or another layout: `shdc plan`), or keep fewer of them live at once",
             ir_func_label(f), (long long)peak, bytes_str(peak), mesh.len ? str_cstr(&mesh) : "(none)", limit_text,
             (long long)limit, pos.line, chain.len ? str_cstr(&chain) : "", shown ? str_cstr(&list) : "(none)");
  for (int i = 0; i < shown && i < 3; i++)
    if (all.a[i].v && all.a[i].v->def)
      diag_note(all.a[i].v->def->pos, "%s, %s per rank at the peak, is defined here",
                all.a[i].v->type.kind == TY_TAPE ? "the tape of this loop"
                : ir_value_label(all.a[i].v) ? ir_value_label(all.a[i].v) : arena_printf("this %s result", ir_opname(all.a[i].v->def->op)),
                bytes_str(all.a[i].bytes));
  free(chain.buf);
  free(mesh.buf);
  free(list.buf);
}

static const Func *main_func(const Module *mod) {
  const Func *mainf = NULL;
  for (int i = 0; i < mod->funcs.len; i++)
    if (((const Func *)mod->funcs.data[i])->is_main)
      mainf = mod->funcs.data[i];
  return mainf;
}

int64_t explain_check_memory(const Module *mod, int64_t limit, const char *limit_text) {
  Sim *s = sim_module(mod);
  const Func *mainf = main_func(mod);
  int64_t worst = 0;
  for (int i = 0; i < mod->funcs.len; i++) {
    const Func *f = mod->funcs.data[i];
    if (mainf && f != mainf)
      continue;
    int64_t peak = s->sums[ptrmap_get(&s->func_index, f)].peak;
    if (peak > worst)
      worst = peak;
    if (peak > limit)
      report_peak(s, f, peak, limit, limit_text);
  }
  return worst;
}

int64_t explain_func_peak(const Module *mod, const Func *f) {
  Sim *s = sim_module(mod);
  return s->sums[ptrmap_get(&s->func_index, f)].peak;
}

void explain_module(FILE *out, const Module *mod, const SourceFile *file, const NetModel *net) {
  fprintf(out, "shdc explain %s, mesh {", file ? file->name : "?");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(out, "%s%s: %d", a ? ", " : "", mod->mesh.names[a], mod->mesh.sizes[a]);
  fprintf(out, "}\nbytes/rank: what one rank sends (all-reduce 2(G-1)n/G, all-gather (G-1)n, reduce-scatter and "
               "all-to-all (G-1)n/G, permute n)\n");
  if (net)
    net_describe(out, net, &mod->mesh);
  for (int i = 0; i < mod->funcs.len; i++) {
    const Func *f = mod->funcs.data[i];
    Report r = {out, mod, 0, 0, net, 0};
    fprintf(out, "\nfn %s%s%s\n", ir_func_label(f), f->manual ? arena_printf(" (manual over %s)", ty_axes_str(&mod->mesh, f->manual_axes)) : "",
            f->generated ? " (generated by autodiff)" : "");
    list_block(&r, f->body, "");
    fprintf(out, "  %d collective%s, %lld bytes sent per rank (loop bodies counted once)%s\n", r.count,
            r.count == 1 ? "" : "s", (long long)r.bytes,
            net ? arena_printf(", communication estimated %s", net_seconds_str(r.seconds)) : "");
    fprintf(out, "  peak live arrays per rank: %lld bytes\n", (long long)explain_func_peak(mod, f));
  }
  const Func *mainf = main_func(mod);
  if (net)
    net_report_steps(out, net, mod, mainf ? explain_func_peak(mod, mainf) : 0);
}
