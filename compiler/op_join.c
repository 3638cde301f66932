/* op_join.c: the joining family: pad, concatenate, stack and split
 * (typing-rules 1.9, 3.5, 4.2): an array grown by zeros, arrays joined
 * along a dim, an array cut into equal pieces. Indexing (x[i, lo:hi],
 * dynamic_slice, dynamic_update_slice) is op_index.c, whose resize rule
 * (rule_resize), sharding check (rule_same_sharding) and slices
 * (op_slice_ad, op_slice_to) this family uses.
 *
 * Input: the typed AST of these calls. Output: global IR (pad,
 * concatenate, split), their transposes (pad -> slice, concatenate <->
 * split; stack is reshapes around a concatenate), their partitioning, and
 * C.
 *
 * Types (1.9): pad and split keep the operand's sharding, and every
 * sharded dim whose size changes must stay divisible by its axes
 * ([E_RESIZE]); concatenate and stack need identical shardings ([E_SAME])
 * and equal U, R, and along a split dim every operand's size divisible by
 * its axes. All four keep U and R.
 *
 * Partitioning moves only the rows that change owner, never the whole
 * array (op_shift.c): a pad along a split dim is one shift that fills the
 * rest with zeros, a concatenate along one a single shift of all its
 * operands into the result's blocks, each piece of a split a slice
 * (op_slice_to); dims that are not split are padded or joined locally.
 * Invariant of the SPMD forms: pad and concatenate change only dims that
 * are not split across ranks.
 */
#include "ops.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

/* IR_PAD = IR_BASE_JOIN is in ops.h: op_index.c's slice transposes to it. */
enum {
  IR_CONCAT = IR_PAD + 1, /* args the operands; dim */
  IR_SPLIT,               /* global only: one result per piece; dim */
};

enum { B_PAD, B_CONCAT, B_STACK, B_SPLIT };

/* What typing learned for lowering (Expr.tc). */
typedef struct {
  Expr *x;
  int rank;                         /* the operand's */
  int64_t start[MAX_RANK];          /* pad: lo */
  int64_t size[MAX_RANK];           /* pad: hi; split: a piece's sizes */
  int dim;                          /* concatenate, stack, split */
  Expr **ops;                       /* concatenate, stack */
  int nops;
} JoinInfo;

static JoinInfo *join_info(Expr *e) {
  JoinInfo *info = arena_alloc(sizeof *info);
  e->tc = info;
  return info;
}

/* ---- typing: pad ------------------------------------------------------------------------- */

static Type check_pad(TcCtx *c, Expr *e, const Type *annot) {
  JoinInfo *info = join_info(e);
  Expr *pos[2], *kw[1];
  if (tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "pad(x, ((lo0, hi0), (lo1, hi1), ...))") < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], "pad");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  info->rank = x.rank;
  Expr *pairs[MAX_RANK + 1], *p = pos[1];
  bool one_pair = x.rank == 1 && p->kind == EX_TUPLE && p->args.len == 2 &&
                  ((Expr *)p->args.data[0])->kind != EX_TUPLE;
  int n = one_pair ? 1 : (p->kind == EX_TUPLE || p->kind == EX_LIST) ? p->args.len : -1;
  if (one_pair)
    pairs[0] = p;
  else
    for (int i = 0; i < n && i < MAX_RANK; i++)
      pairs[i] = p->args.data[i];
  if (n != x.rank) {
    diag_error(p->pos, "E_ARG", "pad takes one (lo, hi) pair per dim: %s has %d, e.g. pad(x, (%s))", TS(&x), x.rank,
               x.rank == 1 ? "(1, 1),": "(1, 1), (0, 2)");
    return ty_error();
  }
  int64_t size[MAX_RANK];
  for (int d = 0; d < n; d++) {
    Expr *pr = pairs[d];
    if ((pr->kind != EX_TUPLE && pr->kind != EX_LIST) || pr->args.len != 2) {
      diag_error(pr->pos, "E_ARG", "pad: each dim takes a pair (lo, hi) of the zeros added before and after it");
      return ty_error();
    }
    if (!op_static_int(c, pr->args.data[0], &info->start[d], "pad's lo") ||
        !op_static_int(c, pr->args.data[1], &info->size[d], "pad's hi"))
      return ty_error();
    if (info->start[d] < 0 || info->size[d] < 0) {
      diag_error(pr->pos, "E_ARG", "pad: the amounts are at least 0 (to cut, slice: x[lo:hi])");
      return ty_error();
    }
    size[d] = ty_size_add(ty_size_add(x.shape[d], info->start[d]), info->size[d]);
  }
  RuleCtx r = tc_rule(c, e->pos, "pad");
  Type out;
  if (!rule_resize(&r, &x, size, &out) || !ty_check_wellformed(c->mesh, &out, e->pos, c->manual, "pad"))
    return ty_error();
  return out;
}

/* ---- typing: concatenate, stack, split ------------------------------------------------------- */

/* The operands of concatenate and stack: a tuple or list of arrays. */
static bool operands_arg(TcCtx *c, Expr *a, Type **ts, JoinInfo *info, const char *what) {
  if (a->kind != EX_TUPLE && a->kind != EX_LIST) {
    diag_error(a->pos, "E_ARG", "%s takes a tuple of arrays: %s((a, b), axis=0)", what, what);
    return false;
  }
  int n = a->args.len;
  info->ops = arena_alloc(sizeof(Expr *) * (size_t)(n + 1));
  *ts = arena_alloc(sizeof(Type) * (size_t)(n + 1));
  info->nops = n;
  bool ok = true;
  for (int i = 0; i < n; i++) {
    info->ops[i] = a->args.data[i];
    (*ts)[i] = tc_operand(c, info->ops[i], what);
    ok &= (*ts)[i].kind != TY_ERROR;
    if (ok && (*ts)[i].rank == 0) {
      diag_error(info->ops[i]->pos, "E_SHAPE", "%s of the scalar %s; reshape it first: reshape(x, [1])", what,
                 ty_str(c->mesh, &(*ts)[i]));
      ok = false;
    }
  }
  return ok;
}

/* Shapes of concatenate (equal except along dim k) or stack (equal). */
static bool join_shapes(TcCtx *c, JoinInfo *info, const Type *ts, int k, bool stack, const char *what) {
  for (int i = 1; i < info->nops; i++) {
    const Type *a = &ts[0], *b = &ts[i];
    bool ok = a->rank == b->rank && a->dtype == b->dtype;
    for (int d = 0; ok && d < a->rank; d++)
      ok = a->shape[d] == b->shape[d] || (!stack && d == k);
    if (ok)
      continue;
    if (a->dtype != b->dtype)
      diag_error(info->ops[i]->pos, "E_DTYPE", "%s: operands %s and %s have different dtypes; convert with cast(x, %s)",
                 what, TS(a), TS(b), ty_dtype_name(a->dtype));
    else
      diag_error(info->ops[i]->pos, "E_SHAPE", "%s: operands %s and %s must have the same shape%s", what, TS(a),
                 TS(b), stack ? "" : arena_printf(" except along axis %d", k));
    return false;
  }
  return true;
}

static bool axis_kw(TcCtx *c, Expr *kw, int rank, int *k, const char *what) {
  *k = 0;
  return !kw || tc_dim_arg(c, kw, rank, k, what);
}

/* concatenate along a split dim: every operand's size along it must be
 * divisible by the first operand's axes (else no operand can be sharded
 * like the first, [E_SAME]); the fix joins them unsplit. */
static bool split_divides(RuleCtx *r, JoinInfo *info, const Type *ts) {
  int k = info->dim;
  int64_t np = ty_spec_parts(r->mesh, ts[0].spec[k]);
  for (int i = 1; i < info->nops; i++) {
    if (ts[i].shape[k] % np == 0)
      continue;
    Type want = ts[0];
    want.spec[k].n = 0;
    want.weak = false;
    return fail(r, "E_SAME", "%s along dim %d (%s) needs every operand's size there divisible by %lld, "
                "but %s has %lld; join them unsplit: reshard(%s, %s)", r->opname, k,
                ty_spec_str(r->mesh, ts[0].spec[k]), (long long)np, ty_str(r->mesh, &ts[i]), (long long)ts[i].shape[k],
                tc_expr_text(info->ops[0]), ty_str(r->mesh, &want));
  }
  return true;
}

static bool unify_ops(RuleCtx *r, JoinInfo *info, Type *ts, AxisSet *V, bool stack) {
  int n = info->nops;
  const Type **opp = arena_alloc(sizeof(Type *) * (size_t)(n + 1));
  Type *eff = arena_alloc(sizeof(Type) * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    opp[i] = &ts[i];
  if (!rule_vma_unify(r, n, opp, eff, V))
    return false;
  for (int i = 0; i < n; i++)
    ts[i] = eff[i];
  if (!stack && !split_divides(r, info, ts))
    return false;
  for (int i = 1; i < n; i++)
    if (!rule_same_sharding(r, &ts[0], &ts[i], "other operand", tc_expr_text(info->ops[i])))
      return false;
  return true;
}

static Type check_concat(TcCtx *c, Expr *e, const Type *annot) {
  JoinInfo *info = join_info(e);
  bool stack = e->bi->code == B_STACK;
  const char *what = tc_callee(e);
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"axis"};
  if (tc_call_args(c, e, pos, 1, 1, kw, kwn, 1, arena_printf("%s((a, b, ...), axis=k)", what)) < 0)
    return ty_error();
  Type *ts;
  if (!operands_arg(c, pos[0], &ts, info, what))
    return ty_error();
  if (info->nops == 0) {
    diag_error(pos[0]->pos, "E_ARG", "%s needs at least one array", what);
    return ty_error();
  }
  int rank = ts[0].rank + (stack ? 1 : 0);
  if (rank > MAX_RANK) {
    diag_error(e->pos, "E_SHAPE", "%s: the result would have more than %d dims", what, MAX_RANK);
    return ty_error();
  }
  if (!axis_kw(c, kw[0], rank, &info->dim, what) || !join_shapes(c, info, ts, info->dim, stack, what))
    return ty_error();
  RuleCtx r = tc_rule(c, e->pos, what);
  AxisSet V;
  if (!unify_ops(&r, info, ts, &V, stack))
    return ty_error();
  int k = info->dim;
  Type out = ts[0];
  out.weak = false;
  out.V = V;
  if (stack) {
    out = ty_keep_dims(&ts[0], &(Type){.rank = rank}, 1u << k);
    out.shape[k] = info->nops;
    out.weak = false;
    out.V = V;
    return out;
  }
  for (int i = 1; i < info->nops; i++)
    out.shape[k] += ts[i].shape[k];
  return out;
}

static Type check_split(TcCtx *c, Expr *e, const Type *annot) {
  JoinInfo *info = join_info(e);
  Expr *pos[2], *kw[1];
  const char *kwn[1] = {"axis"};
  if (tc_call_args(c, e, pos, 2, 2, kw, kwn, 1, "split(x, n, axis=k): n equal pieces") < 0)
    return ty_error();
  Type x = tc_array_operand(c, e, pos[0], "split");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  info->rank = x.rank;
  int64_t n;
  if (pos[1]->kind == EX_TUPLE || pos[1]->kind == EX_LIST) {
    diag_error(pos[1]->pos, "E_ARG", "split takes the number of equal pieces, e.g. split(x, 3, axis=0)");
    return ty_error();
  }
  if (!op_static_int(c, pos[1], &n, "split's number of pieces") || !axis_kw(c, kw[0], x.rank, &info->dim, "split"))
    return ty_error();
  int k = info->dim;
  if (n < 1 || x.shape[k] % n) {
    diag_error(pos[1]->pos, "E_SHAPE", "split: dim %d of %s (size %lld) cannot be split into %lld equal pieces", k,
               TS(&x), (long long)x.shape[k], (long long)n);
    return ty_error();
  }
  for (int d = 0; d < x.rank; d++)
    info->size[d] = x.shape[d];
  info->size[k] = x.shape[k] / n;
  RuleCtx r = tc_rule(c, e->pos, "split");
  Type piece;
  if (!rule_resize(&r, &x, info->size, &piece))
    return ty_error();
  Type *elems = arena_alloc(sizeof(Type) * (size_t)(n + 1));
  for (int i = 0; i < n; i++)
    elems[i] = piece;
  return ty_tuple((int)n, elems);
}

/* ---- lowering -------------------------------------------------------------------------------- */

static Value *lower_pad(Lower *L, Expr *e) {
  JoinInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Inst *in = lower_emit(L, IR_PAD, e->pos, 1, &x, *e->ty);
  int r = info->rank;
  in->iv = arena_alloc(sizeof(int64_t) * (size_t)(2 * r + 1));
  memcpy(in->iv, info->start, sizeof(int64_t) * (size_t)r);
  memcpy(in->iv + r, info->size, sizeof(int64_t) * (size_t)r);
  in->niv = 2 * r;
  return in->results[0];
}

static Value *lower_concat(Lower *L, Expr *e) {
  JoinInfo *info = e->tc;
  bool stack = e->bi->code == B_STACK;
  int n = info->nops, k = info->dim;
  Value **args = arena_alloc(sizeof(Value *) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    args[i] = lower_vma(L, e->pos, lower_expr(L, info->ops[i]), e->ty->V);
    if (stack) {
      Type t = ty_keep_dims(&args[i]->type, e->ty, 1u << k);
      args[i] = lower_emit1(L, IR_RESHAPE, e->pos, 1, &args[i], t);
    }
  }
  if (n == 1)
    return args[0];
  Inst *in = lower_emit(L, IR_CONCAT, e->pos, n, args, *e->ty);
  in->dim = k;
  return in->results[0];
}

static Value *lower_split(Lower *L, Expr *e) {
  JoinInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Inst *in = lower_emit_n(L, IR_SPLIT, e->pos, 1, &x, e->ty->nelems, e->ty->elems);
  in->dim = info->dim;
  return in->results[0];
}

/* ---- transposes (4.2) ---------------------------------------------------------------------- */

static void vjp_pad(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  ad_add_ct(a, x, op_slice_ad(a, g, in->iv, ty_ct(&x->type)));
}

/* concatenate <-> split: each operand's cotangent is its slice of g. */
static void vjp_concat(AD *a, Inst *in, Value *g) {
  int k = in->dim;
  int64_t off = 0;
  for (int i = 0; i < in->nargs; i++) {
    Value *x = in->args[i];
    if (ad_wants_ct(a, x)) {
      int64_t start[MAX_RANK] = {0};
      start[k] = off;
      ad_add_ct(a, x, op_slice_ad(a, g, start, ty_ct(&x->type)));
    }
    off += x->type.shape[in->dim];
  }
}

static void vjp_split(AD *a, Inst *in, Value *g) {
  Value *x = in->args[0];
  if (!ad_wants_ct(a, x))
    return;
  Value **cts = arena_alloc(sizeof(Value *) * (size_t)(in->nresults + 1));
  for (int i = 0; i < in->nresults; i++) {
    Type t = ty_ct(&in->results[i]->type);
    cts[i] = ad_ct(a, in->results[i]);
    cts[i] = cts[i] ? ad_to_type(a, cts[i], &t) : ad_zeros(a, &t);
  }
  Inst *c = ad_emit(a, IR_CONCAT, in->nresults, cts, ty_ct(&x->type));
  c->dim = in->dim;
  ad_add_ct(a, x, c->results[0]);
}

/* ---- partitioning ------------------------------------------------------------------------------ */

static void part_split(Part *p, Inst *in, Value **args) {
  int k = in->dim;
  for (int i = 0; i < in->nresults; i++) {
    const Type *T = &in->results[i]->type;
    int64_t start[MAX_RANK] = {0};
    start[k] = i * T->shape[k];
    part_put(p, in->results[i], op_slice_to(p, in->pos, args[0], start, T->shape, T));
  }
}

/* Zeros around x: split dims by a shift that fills, the others locally. */
static void part_pad(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *T = &in->results[0]->type;
  Value *x = args[0];
  int r = T->rank;
  const int64_t *lo = in->iv, *hi = in->iv + r;
  int64_t llo[MAX_RANK] = {0}, lhi[MAX_RANK] = {0};
  bool local = false;
  DimSpec g;
  unsigned fl;
  for (int d = 0; d < r; d++) {
    if (!lo[d] && !hi[d])
      continue;
    if (!op_shift_plan(m, x->type.spec[d], T->spec[d], T->shape[d], &g, &fl)) {
      llo[d] = lo[d];
      lhi[d] = hi[d];
      local = true;
      continue;
    }
    x = op_shift_rows(p, in->pos, 1, &x, &lo[d], NULL, fl | SHIFT_FILL, d, g, T->shape[d]);
  }
  if (local) {
    Type L = x->type;
    for (int d = 0; d < r; d++)
      L.shape[d] += llo[d] + lhi[d];
    Inst *pi = ir_emit(part_mod(p), part_block(p), IR_PAD, in->pos, 1, &x, 1, &L);
    pi->iv = arena_alloc(sizeof(int64_t) * (size_t)(2 * r + 1));
    memcpy(pi->iv, llo, sizeof(int64_t) * (size_t)r);
    memcpy(pi->iv + r, lhi, sizeof(int64_t) * (size_t)r);
    pi->niv = 2 * r;
    x = pi->results[0];
  }
  part_put(p, in->results[0], part_to(p, in->pos, x, T));
}

/* concatenate: locally when the dim is not split, else one shift of all
 * the operands into the result's blocks. */
static void part_concat(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  const Type *T = &in->results[0]->type;
  int k = in->dim, n = in->nargs;
  bool dist = ty_spec_parts(m, T->spec[k]) > 1, divides = true;
  for (int i = 0; i < n; i++)
    divides &= args[i]->type.shape[k] % ty_spec_parts(m, T->spec[k]) == 0;
  Value **vals = arena_alloc(sizeof(Value *) * (size_t)(n + 1));
  int64_t *offs = arena_alloc(sizeof(int64_t) * (size_t)(n + 1));
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    Type t = *T;
    t.shape[k] = args[i]->type.shape[k];
    if (!divides)
      t.spec[k].n = 0;
    vals[i] = part_to(p, in->pos, args[i], &t);
    offs[i] = off;
    off += t.shape[k];
  }
  Value *r;
  if (!dist) {
    Inst *c = ir_emit(part_mod(p), part_block(p), IR_CONCAT, in->pos, n, vals, 1, T);
    c->dim = k;
    r = c->results[0];
  } else {
    r = op_shift_rows(p, in->pos, n, vals, offs, NULL, divides ? 0 : SHIFT_SRC_REP, k, T->spec[k], T->shape[k]);
  }
  part_put(p, in->results[0], r);
}

/* ---- C --------------------------------------------------------------------------------------- */

static void emit_pad(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *r = in->results[0];
  emit_def_array(e, r, false);
  emit_line(e, "shd_pad(%s, %s, sizeof(%s), %d, %s, %s, %s);", vname(x), vname(r), ty_dtype_c(r->type.dtype), r->type.rank,
            emit_shape_lit(e, &x->type), emit_shape_lit(e, &r->type), emit_i64s_lit(in->iv, r->type.rank));
}

static void emit_concat(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  int k = in->dim;
  int64_t *rows = arena_alloc(sizeof(int64_t) * (size_t)(in->nargs + 1));
  for (int i = 0; i < in->nargs; i++)
    rows[i] = ty_local_dim(emit_mesh(e), &in->args[i]->type, k);
  emit_def_array(e, r, false);
  emit_line(e, "{");
  emit_line(e, "  const void *src[] = {%s};", emit_names_lit(in->args, in->nargs));
  emit_line(e, "  shd_concat(src, %d, %s, %s, sizeof(%s), %d, %s, %d);", in->nargs, emit_i64s_lit(rows, in->nargs), vname(r),
            ty_dtype_c(r->type.dtype), r->type.rank, emit_shape_lit(e, &r->type), k);
  emit_line(e, "}");
}

/* ---- the IR text --------------------------------------------------------------------------------- */

static void print_pad(FILE *out, const Module *mod, const Inst *in) {
  ir_print_i64s(out, "lo", in->iv, in->niv / 2);
  ir_print_i64s(out, "hi", in->iv + in->niv / 2, in->niv / 2);
}

static void print_dim(FILE *out, const Module *mod, const Inst *in) { fprintf(out, " dim=%d", in->dim); }

/* ---- the tables ---------------------------------------------------------------------------------- */

/* ---- types from operands ---------------------------------------------------------- */

/* pad grows each dim by lo + hi; concatenate adds the dims along dim,
 * split divides it. */
static bool infer_pad(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1) || in->niv != 2 * in->args[0]->type.rank)
    return false;
  Type r = in->args[0]->type;
  for (int d = 0; d < r.rank; d++)
    r.shape[d] += in->iv[d] + in->iv[r.rank + d];
  return ir_infer_shape(out, &r);
}

static bool infer_concat(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs < 1 || !ir_arg_is(in, 0, -1) || in->dim < 0 || in->dim >= in->args[0]->type.rank)
    return false;
  Type r = in->args[0]->type;
  for (int i = 1; i < in->nargs; i++) {
    const Type *a = &in->args[i]->type;
    if (!ir_arg_is(in, i, r.dtype) || a->rank != r.rank)
      return false;
    for (int d = 0; d < r.rank; d++)
      if (d != in->dim && a->shape[d] != r.shape[d])
        return false;
    r.shape[in->dim] += a->shape[in->dim];
  }
  return ir_infer_shape(out, &r);
}

static bool infer_split(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1) || in->dim < 0 || in->dim >= in->args[0]->type.rank ||
      in->nresults < 1 || in->args[0]->type.shape[in->dim] % in->nresults)
    return false;
  Type r = in->args[0]->type;
  r.shape[in->dim] /= in->nresults;
  for (int k = 0; k < in->nresults; k++)
    if (!ir_infer_shape(&out[k], &r))
      return false;
  return true;
}

static const OpDef ops[] = {
    {.op = IR_PAD, .name = "pad", .print = print_pad, .vjp = vjp_pad, .partition = part_pad, .emit = emit_pad, .infer = infer_pad},
    {.op = IR_CONCAT, .name = "concatenate", .print = print_dim, .vjp = vjp_concat, .partition = part_concat,
     .emit = emit_concat, .infer = infer_concat},
    {.op = IR_SPLIT, .name = "split", .print = print_dim, .vjp = vjp_split, .partition = part_split, .infer = infer_split},
    {0},
};

static const BuiltinDef builtins[] = {
    {.name = "pad", .code = B_PAD, .check = check_pad, .lower = lower_pad},
    {.name = "concatenate", .code = B_CONCAT, .check = check_concat, .lower = lower_concat},
    {.name = "stack", .code = B_STACK, .check = check_concat, .lower = lower_concat},
    {.name = "split", .code = B_SPLIT, .check = check_split, .lower = lower_split},
    {0},
};

const OpFamily op_join_family = {
    .name = "join",
    .ops = ops,
    .builtins = builtins,
};
