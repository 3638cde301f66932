/* op_shape.c: the shape family: transpose (typing-rules 1.6), reshape
 * (1.7), expand_dims and squeeze (reshapes that insert or remove one
 * size-1 dim) and broadcast (1.8, made by autodiff for the transpose of a
 * sum).
 *
 * A transpose permutes the specs; a reshape keeps a sharded dim's axes on
 * the major pieces of a split and merges runs whose trailing dims are
 * unsharded. expand_dims inserts an unsharded size-1 dim and squeeze
 * removes an unsharded one; both keep the other dims' specs and the
 * U/R/V states, and lower to a reshape (a view: no copy, local on every
 * mesh, its transpose the other one). Partitioning: a reshape is local when every rank's block
 * keeps its elements in order (checked exactly, per rank); otherwise the
 * natural result of the rule is resharded to the asked type, and only as a
 * last resort the operand is gathered, reshaped and sliced.
 */
#include "ops.h"
#include "../runtime/blockmap.h"

#define TS(t) ty_str(c->mesh, (t))
#define vname emit_vname
#define fail rule_fail

enum { S_TRANSPOSE, S_RESHAPE, S_EXPAND_DIMS, S_SQUEEZE };

/* The data movement of a reshape whose blocks do not stay in place
 * (runtime/reshape_move.c): operand and result have the same states. */
enum { IR_RESHAPE_MOVE = IR_BASE_SHAPE };   /* IR_TRANSPOSE = IR_BASE_SHAPE + 1 (ops.h) */


/* ---- the rules ---------------------------------------------------------------------- */

/* ---- transpose (1.6) ----------------------------------------------------- */

bool rule_transpose(RuleCtx *c, const Type *x, const int *perm, Type *out) {
  unsigned seen = 0;
  for (int i = 0; i < x->rank; i++) {
    if (perm[i] < 0 || perm[i] >= x->rank || (seen & (1u << perm[i])))
      return fail(c, "E_SHAPE", "transpose: perm must be a permutation of 0..%d for %s", x->rank - 1, TS(x));
    seen |= 1u << perm[i];
  }
  Type r = *x;
  for (int i = 0; i < x->rank; i++) {
    r.shape[i] = x->shape[perm[i]];
    r.spec[i] = x->spec[perm[i]];
  }
  r.weak = false;
  *out = r;
  return true;
}

/* ---- reshape (1.7) ------------------------------------------------------- */

typedef struct {
  int n;
  int64_t size[MAX_RANK];
  int pos[MAX_RANK];   /* index in the full dim list */
} NonOne;

static NonOne non_one(int rank, const int64_t *shape) {
  NonOne r = {0};
  for (int d = 0; d < rank; d++)
    if (shape[d] != 1) {
      r.size[r.n] = shape[d];
      r.pos[r.n++] = d;
    }
  return r;
}

/* why: what rule 1.7 could not do, for the message. */
static bool reshape_fail(RuleCtx *c, const Type *x, const Type *plain_out, const char *why) {
  return fail(c, "E_RESHAPE",
              "reshape of %s to %s: %s, so the sharded data would have to move between devices; annotate the "
              "result to say where it goes (e.g. `as %s`: gather, reshape, slice) or reshard the operand first",
              TS(x), TS(plain_out), why,
              rule_stage_annotate(TS(plain_out), TS(plain_out),
                                  arena_printf("annotate the result as %s (gather, reshape, slice)", TS(plain_out))));
}

/* Hands the split dim's axes to its pieces, major piece first. */
static bool split_axes(RuleCtx *c, const Type *x, DimSpec s, const int64_t *pieces, int npieces, DimSpec *outspec,
                       const Type *plain_out) {
  int next = 0;
  for (int i = 0; i < npieces; i++) {
    int64_t p = pieces[i];
    DimSpec ps = {0};
    while (p > 1 && next < s.n) {
      int a = s.axes[next];
      if (p % c->mesh->sizes[a] != 0)
        return reshape_fail(c, x, plain_out,
                            arena_printf("the split dim is sharded over %s, but its piece of size %lld is not "
                                         "divisible by %d (the size of %s)",
                                         ty_spec_str(c->mesh, s) + 1, (long long)pieces[i], c->mesh->sizes[a],
                                         c->mesh->names[a]));
      p /= c->mesh->sizes[a];
      ps.axes[ps.n++] = (int8_t)a;
      next++;
    }
    outspec[i] = ps;
  }
  if (next < s.n)
    return reshape_fail(c, x, plain_out,
                        arena_printf("the split dim's pieces cannot take all of its axes %s",
                                     ty_spec_str(c->mesh, s) + 1));
  return true;
}

/* Walks two lists of non-1 sizes together: equal sizes pair up, and in one
 * place one element of `one` is the product of a run of >= 2 elements of
 * `many`. Finds that place (*at_one, *at_many, run length *len). */
static bool find_run(const NonOne *one, const NonOne *many, int *at_one, int *at_many, int *len) {
  int i = 0, j = 0;
  *len = 0;
  while (i < one->n && j < many->n) {
    if (one->size[i] == many->size[j]) {
      i++, j++;
      continue;
    }
    if (*len)
      return false;
    int64_t prod = many->size[j];
    int k = j + 1;
    while (k < many->n && prod < one->size[i])
      prod *= many->size[k++];
    if (prod != one->size[i] || k - j < 2)
      return false;
    *at_one = i;
    *at_many = j;
    *len = k - j;
    i++;
    j = k;
  }
  return *len && i == one->n && j == many->n;
}

static bool reshape_specs_non_one(RuleCtx *c, const Type *x, Type *r) {
  bool any = false;
  for (int d = 0; d < x->rank; d++)
    any |= x->spec[d].n > 0;
  for (int d = 0; d < r->rank; d++)
    r->spec[d].n = 0;
  if (!any)
    return true;
  NonOne a = non_one(x->rank, x->shape), b = non_one(r->rank, r->shape);
  /* Only singleton dims inserted or removed. */
  bool same = a.n == b.n;
  for (int i = 0; same && i < a.n; i++)
    same = a.size[i] == b.size[i];
  if (same) {
    for (int i = 0; i < a.n; i++)
      r->spec[b.pos[i]] = x->spec[a.pos[i]];
    return true;
  }
  int ia, ib, len;
  DimSpec outspec[MAX_RANK];
  memset(outspec, 0, sizeof outspec);
  /* Split: one operand dim becomes a run of >= 2 output dims. */
  if (find_run(&a, &b, &ia, &ib, &len)) {
    for (int k = 0; k < b.n; k++) {
      if (k < ib)
        outspec[k] = x->spec[a.pos[k]];
      else if (k >= ib + len)
        outspec[k] = x->spec[a.pos[k - len + 1]];
    }
    if (!split_axes(c, x, x->spec[a.pos[ia]], &b.size[ib], len, &outspec[ib], r))
      return false;
    for (int i = 0; i < b.n; i++)
      r->spec[b.pos[i]] = outspec[i];
    return true;
  }
  /* Merge: a run of >= 2 operand dims becomes one output dim. */
  if (find_run(&b, &a, &ib, &ia, &len)) {
    for (int k = 0; k < b.n; k++) {
      if (k < ib)
        outspec[k] = x->spec[a.pos[k]];
      else if (k > ib)
        outspec[k] = x->spec[a.pos[k + len - 1]];
    }
    DimSpec m = {0};
    int last_sharded = -1;
    for (int k = ia; k < ia + len; k++)
      if (x->spec[a.pos[k]].n)
        last_sharded = k;
    for (int k = ia; k <= last_sharded; k++) {
      DimSpec sp = x->spec[a.pos[k]];
      if (!sp.n)
        return reshape_fail(c, x, r, "the merged dims have an unsharded dim before a sharded one");
      for (int q = 0; q < sp.n; q++)
        m.axes[m.n++] = sp.axes[q];
    }
    if (b.size[ib] % ty_spec_parts(c->mesh, m))
      return reshape_fail(c, x, r, "the merged dim is not divisible by its axes");
    outspec[ib] = m;
    for (int i = 0; i < b.n; i++)
      r->spec[b.pos[i]] = outspec[i];
    return true;
  }
  return reshape_fail(c, x, r, "it neither splits one dim nor merges one run of adjacent dims");
}

/* The specs of the non-1 dims by the rule above; then a size-1 output dim
 * takes the operand's spec where the operand has a size-1 dim at the same
 * position (1.7; JAX test_reshape_preserve_singleton_dim_spec), so
 * f32[1@x,512@y] -> [1, 4, 128] is f32[1@x,4@y,128] and back. */
static bool reshape_specs(RuleCtx *c, const Type *x, Type *r) {
  if (!reshape_specs_non_one(c, x, r))
    return false;
  for (int k = 0; k < r->rank && k < x->rank; k++)
    if (r->shape[k] == 1 && x->shape[k] == 1)
      r->spec[k] = x->spec[k];
  return true;
}

bool rule_reshape(RuleCtx *c, const Type *x, int rank, const int64_t *shape, const Type *annot, Type *out) {
  int64_t n = ty_size_product(rank, shape);
  Type r = ty_array(x->dtype, rank, shape);
  if (n != ty_global_count(x))
    return fail(c, "E_SHAPE", "reshape: %s has %lld elements but the new shape %s has %s", TS(x),
                (long long)ty_global_count(x), TS(&r), ty_size_str(n));
  r.U = x->U;
  r.R = x->R;
  r.V = x->V;
  if (annot) {
    if (!rule_check_annot(c, annot, &r, "reshape"))
      return false;
    return rule_annot_keeps_states(c, "reshape", x, annot, out);
  }
  if (!reshape_specs(c, x, &r))
    return false;
  *out = r;
  return true;
}

/* ---- typing ----------------------------------------------------------------------- */

static Type check_transpose(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"perm"};
  int n = tc_call_args(c, e, pos, 1, 1, kw, kwn, 1, "transpose(x) or transpose(x, perm=[1, 0, 2])");
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], "transpose");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  if (!kw[0]) {
    for (int i = 0; i < x.rank; i++)
      info->perm[i] = x.rank - 1 - i;
  } else {
    Expr *p = kw[0];
    if (p->kind != EX_LIST && p->kind != EX_TUPLE) {
      diag_error(p->pos, "E_ARG", "transpose: perm is a list, e.g. perm=[1, 0]");
      return ty_error();
    }
    if (p->args.len != x.rank) {
      diag_error(p->pos, "E_SHAPE", "transpose: perm has %d entries but %s has rank %d", p->args.len, TS(&x), x.rank);
      return ty_error();
    }
    for (int i = 0; i < x.rank; i++) {
      int64_t k;
      if (!tc_const_int(c, p->args.data[i], &k))
        return ty_error();
      info->perm[i] = (int)(k < 0 ? k + x.rank : k);
    }
  }
  RuleCtx r = tc_rule(c, e->pos, "transpose");
  Type out;
  return rule_transpose(&r, &x, info->perm, &out) ? out : ty_error();
}

static Type check_reshape(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  Expr *pos[2], *kw[1];
  int n = tc_call_args(c, e, pos, 2, 2, kw, NULL, 0, "reshape(x, [dims])");
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], "reshape");
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  Expr *l = pos[1];
  if (l->kind != EX_LIST && l->kind != EX_TUPLE) {
    diag_error(l->pos, "E_ARG", "reshape: the new shape is a list, e.g. reshape(x, [8, 4])");
    return ty_error();
  }
  if (l->args.len > MAX_RANK) {
    diag_error(l->pos, "E_SHAPE", "reshape: at most %d dims", MAX_RANK);
    return ty_error();
  }
  int infer = -1;
  int64_t known = 1;
  info->rank = l->args.len;
  for (int i = 0; i < info->rank; i++) {
    int64_t k;
    if (!tc_const_int(c, l->args.data[i], &k))
      return ty_error();
    if (k == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (k < 1) {
      diag_error(((Expr *)l->args.data[i])->pos, "E_SHAPE", "reshape: sizes are at least 1 (one may be -1)");
      return ty_error();
    }
    info->shape[i] = k;
    known = ty_size_mul(known, k);
  }
  if (infer >= 0) {
    int64_t total = ty_global_count(&x);
    if (known > total) {
      if (known == INT64_MAX)
        diag_error(l->pos, "E_SHAPE", "reshape: the sizes besides -1 multiply past 2^63; %s has %lld elements", TS(&x),
                   (long long)total);
      else
        diag_error(l->pos, "E_SHAPE", "reshape: the sizes besides -1 multiply to %lld, more than the %lld elements "
                   "of %s", (long long)known, (long long)total, TS(&x));
      return ty_error();
    }
    if (total % known) {
      diag_error(l->pos, "E_SHAPE", "reshape: %s has %lld elements, which is not a multiple of %lld", TS(&x),
                 (long long)total, (long long)known);
      return ty_error();
    }
    info->shape[infer] = total / known;
  }
  RuleCtx r = tc_rule(c, e->pos, "reshape");
  Type a2, *pa = NULL;
  if (annot) {
    a2 = *annot;
    if (c->annot_v_free)
      tc_manual_states_from(c, &a2, x.V, x.U, x.R);
    pa = &a2;
  }
  Type out;
  return rule_reshape(&r, &x, info->rank, info->shape, pa, &out) ? out : ty_error();
}


/* expand_dims(x, axis=k) and squeeze(x, axis=k): jnp's, with one axis.
 * k counts from the end when negative: of the result's rank for
 * expand_dims (NumPy's), of the operand's for squeeze. The type is the
 * operand's with one unsharded size-1 dim inserted or removed; the other
 * dims keep their specs and the value its U, R and V. */
static Type check_one_dim(TcCtx *c, Expr *e, const Type *annot) {
  TcInfo *info = tc_info(e);
  bool expand = e->bi->code == S_EXPAND_DIMS;
  const char *name = expand ? "expand_dims" : "squeeze";
  Expr *pos[1], *kw[1];
  const char *kwn[1] = {"axis"};
  const char *usage = expand ? "expand_dims(x, axis=k)" : "squeeze(x, axis=k)";
  if (tc_call_args(c, e, pos, 1, 1, kw, kwn, 1, usage) < 0)
    return ty_error();
  if (!kw[0]) {
    diag_error(e->pos, "E_ARG", "%s needs the dim: %s", name, usage);
    return ty_error();
  }
  Type x = tc_operand(c, pos[0], name);
  if (x.kind == TY_ERROR)
    return x;
  info->x = pos[0];
  int n = expand ? x.rank + 1 : x.rank;   /* the rank k indexes */
  if (expand && n > MAX_RANK) {
    diag_error(e->pos, "E_SHAPE", "expand_dims: %s already has %d dims, the most an array may have", TS(&x), MAX_RANK);
    return ty_error();
  }
  if (!expand && x.rank == 0) {
    diag_error(pos[0]->pos, "E_SHAPE", "squeeze of the scalar %s: it has no dim to remove", TS(&x));
    return ty_error();
  }
  int64_t k;
  if (!tc_const_int(c, kw[0], &k))
    return ty_error();
  if (k < -n || k >= n) {
    diag_error(kw[0]->pos, "E_ARG", "%s: axis %lld is out of range for %s, %s (0 to %d, or -%d to -1)", name,
               (long long)k, TS(&x),
               expand ? arena_printf("whose result has %d dim%s", n, n == 1 ? "" : "s")
                      : arena_printf("which has %d dim%s", n, n == 1 ? "" : "s"),
               n - 1, n);
    return ty_error();
  }
  int d = (int)(k < 0 ? k + n : k);
  Type r = x;
  r.weak = false;
  if (expand) {
    for (int i = x.rank; i > d; i--) {
      r.shape[i] = x.shape[i - 1];
      r.spec[i] = x.spec[i - 1];
    }
    r.shape[d] = 1;
    r.spec[d] = (DimSpec){0};
    r.rank = x.rank + 1;
  } else {
    if (x.shape[d] != 1) {
      diag_error(kw[0]->pos, "E_SHAPE", "squeeze: dim %d of %s has size %lld, not 1; only a size-1 dim can be removed "
                 "(reshape changes other sizes)", d, TS(&x), (long long)x.shape[d]);
      return ty_error();
    }
    if (x.spec[d].n) {
      Type fix = x;
      fix.spec[d].n = 0;
      diag_error(kw[0]->pos, "E_RESHAPE", "squeeze: dim %d of %s is sharded over %s; reshard it first: "
                 "squeeze(reshard(%s, %s), axis=%lld)", d, TS(&x), ty_spec_str(c->mesh, x.spec[d]) + 1,
                 tc_expr_text(pos[0]), TS(&fix), (long long)k);
      return ty_error();
    }
    for (int i = d; i + 1 < x.rank; i++) {
      r.shape[i] = x.shape[i + 1];
      r.spec[i] = x.spec[i + 1];
    }
    r.rank = x.rank - 1;
  }
  info->rank = r.rank;
  memcpy(info->shape, r.shape, sizeof info->shape);
  return r;
}

/* ---- lowering ---------------------------------------------------------------------- */

static Value *lower_transpose(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  Inst *in = lower_emit(L, IR_TRANSPOSE, e->pos, 1, &x, *e->ty);
  memcpy(in->perm, info->perm, sizeof in->perm);
  return in->results[0];
}

static Value *lower_reshape(Lower *L, Expr *e) {
  TcInfo *info = e->tc;
  Value *x = lower_expr(L, info->x);
  return lower_emit1(L, IR_RESHAPE, e->pos, 1, &x, *e->ty);
}

/* ---- transposes (4.2) -------------------------------------------------------------- */

static void vjp_transpose(AD *a, Inst *in, Value *g) {
  int inv[MAX_RANK];
  int rank = in->results[0]->type.rank;
  for (int k = 0; k < rank; k++)
    inv[in->perm[k]] = k;
  Type t = ty_ct(&in->args[0]->type);
  Inst *tr = ad_emit(a, IR_TRANSPOSE, 1, &g, t);
  memcpy(tr->perm, inv, sizeof tr->perm);
  ad_add_ct(a, in->args[0], tr->results[0]);
}

static void vjp_reshape(AD *a, Inst *in, Value *g) {
  Type t = ty_ct(&in->args[0]->type);
  ad_add_ct(a, in->args[0], ad_emit1(a, IR_RESHAPE, 1, &g, t));
}

/* The transpose of a broadcast is the sum over the broadcast dims. */
static void vjp_broadcast(AD *a, Inst *in, Value *g) {
  if (ad_wants_ct(a, in->args[0]))
    ad_add_ct_unbroadcast(a, in->args[0], g);
}

/* ---- partitioning -------------------------------------------------------------------- */

/* ---- reshape: local when every rank's block stays in place --------------------------- */

/* A row-major box (offset, length per dim) in a global shape, reduced to a
 * canonical list of (global, local, offset) runs, so that two boxes hold the
 * same elements in the same order iff their canonical lists are equal. */
typedef struct {
  int n;
  int64_t size[MAX_RANK], len[MAX_RANK], off[MAX_RANK];
} Box;

static Box canonical_box(int rank, const int64_t *shape, const int64_t *len, const int64_t *off) {
  Box b = {0};
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 1)
      continue;
    if (b.n > 0) {
      int k = b.n - 1;
      bool full = len[d] == shape[d];
      bool outer_one = b.len[k] == 1;
      if (full || outer_one) {
        b.off[k] = b.off[k] * shape[d] + (full ? 0 : off[d]);
        b.len[k] = full ? b.len[k] * shape[d] : len[d];
        b.size[k] *= shape[d];
        continue;
      }
    }
    b.size[b.n] = shape[d];
    b.len[b.n] = len[d];
    b.off[b.n] = off[d];
    b.n++;
  }
  return b;
}

static bool box_equal(const Box *a, const Box *b) {
  if (a->n != b->n)
    return false;
  for (int i = 0; i < a->n; i++)
    if (a->size[i] != b->size[i] || a->len[i] != b->len[i] || a->off[i] != b->off[i])
      return false;
  return true;
}

static bool reshape_is_local(const Mesh *m, const Type *from, const Type *to) {
  int n = 1;
  for (int a = 0; a < m->naxes; a++)
    n *= m->sizes[a];
  int64_t lf[MAX_RANK], lt[MAX_RANK], of[MAX_RANK], ot[MAX_RANK];
  ty_local_shape(m, from, lf);
  ty_local_shape(m, to, lt);
  for (int r = 0; r < n; r++) {
    part_block_offset(m, from, r, of);
    part_block_offset(m, to, r, ot);
    Box a = canonical_box(from->rank, from->shape, lf, of), b = canonical_box(to->rank, to->shape, lt, ot);
    if (!box_equal(&a, &b))
      return false;
  }
  return true;
}

static shd_bm_layout bm_layout(const Type *t) {
  shd_bm_layout l;
  memset(&l, 0, sizeof l);
  l.rank = t->rank;
  for (int d = 0; d < t->rank; d++) {
    l.shape[d] = t->shape[d];
    l.naxes[d] = t->spec[d].n;
    for (int i = 0; i < t->spec[d].n; i++)
      l.axes[d][i] = t->spec[d].axes[i];
  }
  return l;
}

/* The most bytes any rank sends in the move (the runtime's count, from the
 * same blockmap.c). On meshes past 64 ranks, the most of 64 ranks spread
 * over the mesh (block layouts send alike, so this is the maximum in every
 * case the tests can measure). */
static int64_t move_bytes(const Mesh *m, const Type *from, const Type *to) {
  shd_bm_mesh bm = {m->naxes, {0}};
  int world = 1;
  for (int a = 0; a < m->naxes; a++)
    world *= bm.sizes[a] = m->sizes[a];
  shd_bm_layout a = bm_layout(from), b = bm_layout(to);
  int64_t most = 0;
  int step = world > 64 ? world / 64 : 1;
  for (int s = 0; s < world; s += step) {
    int64_t n = shd_bm_sent(&bm, &a, &b, s);
    if (n > most)
      most = n;
  }
  return most * (int64_t)ty_dtype_size(from->dtype);
}

/* One MPI_Alltoallv of the world: (P-1) a + s b, s the bytes of the busiest
 * rank. */
static double move_seconds(const NetCost *c, const Inst *in, const char **algo) {
  *algo = "all-to-all-v";
  return c->sent ? (c->world - 1) * c->a + c->sent * c->b : 0;
}

static int64_t move_bytes_sent(const Module *mod, const Inst *in) {
  return move_bytes(&mod->mesh, &in->args[0]->type, &in->results[0]->type);
}

/* Local when every rank's block keeps its elements in order; otherwise the
 * cheaper of: the rule's natural result (when local) then a reshard, or a
 * direct move of the elements that change owner (never a gather of the
 * whole array). */
static void part_reshape(Part *p, Inst *in, Value **args) {
  const Mesh *m = &part_mod(p)->mesh;
  Type X = args[0]->type, T = in->results[0]->type;
  if (reshape_is_local(m, &X, &T)) {
    part_copy(p, in, args);
    return;
  }
  Type moved = T;
  moved.U = X.U;
  moved.R = X.R & ~ty_dim_axes(&T);
  moved.V = X.V;
  int n1, n2;
  int64_t move_cost = move_bytes(m, &X, &moved) + part_reshard_cost(m, &moved, &T, &n1);
  RuleCtx rc = {m, 0, {0}, "reshape"};
  Type natural;
  if (rule_reshape(&rc, &X, T.rank, T.shape, NULL, &natural) && (natural.V = X.V, true) &&
      reshape_is_local(m, &X, &natural) && part_reshard_cost(m, &natural, &T, &n2) <= move_cost) {
    Value *r = part_local(p, in, IR_RESHAPE, 1, args, natural);
    part_put(p, in->results[0], part_to(p, in->pos, r, &T));
    return;
  }
  Value *r = part_local(p, in, IR_RESHAPE_MOVE, 1, args, moved);
  part_put(p, in->results[0], part_to(p, in->pos, r, &T));
}

static const char *layout_lit(const Type *t) {
  Str b = {0};
  str_printf(&b, "{%d, {", t->rank);
  for (int d = 0; d < t->rank; d++)
    str_printf(&b, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  str_printf(&b, "}, {");
  for (int d = 0; d < t->rank; d++)
    str_printf(&b, "%s%d", d ? ", " : "", t->spec[d].n);
  str_printf(&b, "}, {");
  for (int d = 0; d < t->rank; d++) {
    str_printf(&b, "%s{", d ? ", " : "");
    for (int i = 0; i < t->spec[d].n; i++)
      str_printf(&b, "%s%d", i ? ", " : "", t->spec[d].axes[i]);
    str_printf(&b, "}");
  }
  str_printf(&b, "}}");
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static void emit_reshape_move(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *r = in->results[0];
  emit_def_array(e, r, false);
  emit_line(e, "{");
  emit_line(e, "  static const shd_layout from = %s, to = %s;", layout_lit(&x->type), layout_lit(&r->type));
  emit_line(e, "  static void *plan;");
  emit_line(e, "  shd_reshape_move(%s, %s, sizeof(%s), &from, &to, &plan);", vname(x), vname(r),
            ty_dtype_c(r->type.dtype));
  emit_line(e, "}");
}

/* ---- transpose, broadcast ---------------------------------------------------------------- */

static void part_transpose(Part *p, Inst *in, Value **args) {
  Type X = args[0]->type, T = in->results[0]->type;
  Type natural = X;
  for (int d = 0; d < X.rank; d++) {
    natural.shape[d] = X.shape[in->perm[d]];
    natural.spec[d] = X.spec[in->perm[d]];
  }
  Value *r = part_local(p, in, IR_TRANSPOSE, 1, args, natural);
  part_put(p, in->results[0], part_to(p, in->pos, r, &T));
}

static void part_broadcast(Part *p, Inst *in, Value **args) {
  const Type *T = &in->results[0]->type;
  Type want = part_operand_target(&args[0]->type, T);
  want.U = T->U;
  want.R = args[0]->type.R;
  Value *x = part_to(p, in->pos, args[0], &want);
  Type natural = *T;
  natural.R = x->type.R & ~ty_dim_axes(T);
  Value *r = part_local(p, in, IR_BROADCAST, 1, &x, natural);
  part_put(p, in->results[0], part_to(p, in->pos, r, T));
}

/* ---- C ------------------------------------------------------------------------------ */

static bool identity_perm(const Inst *in) {
  for (int d = 0; d < in->results[0]->type.rank; d++)
    if (in->perm[d] != d)
      return false;
  return true;
}

static EmitResult result_transpose(const Module *mod, const Inst *in, int k) {
  return identity_perm(in) || in->results[0]->type.rank < 2 ? EMIT_VIEW : EMIT_ALLOC;
}

static EmitResult result_view(const Module *mod, const Inst *in, int k) {
  return in->args[0]->type.rank ? EMIT_VIEW : EMIT_ALLOC;
}

static void emit_transpose(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  if (result_transpose(emit_module_of(e), in, 0) != EMIT_ALLOC) {
    emit_def_alias(e, r, in->args[0]);
    return;
  }
  emit_def_array(e, r, false);
  emit_line(e, "shd_transpose(%s, %s, sizeof(%s), %d, %s, %s);", vname(in->args[0]), vname(r), ty_dtype_c(r->type.dtype),
       r->type.rank, emit_shape_lit(e, &in->args[0]->type), emit_ints_lit(in->perm, r->type.rank));
}

static const char *broadcast_expr(Emit *e, const Inst *in) {
  return emit_operand_at(e, in->args[0], &in->results[0]->type);
}

static void print_perm(FILE *out, const Module *mod, const Inst *in) {
  ir_print_ints(out, "perm", in->perm, in->args[0]->type.rank);
}

/* ---- the tables --------------------------------------------------------------------- */

/* ---- an out_sharding through a view (optimize.c) ----------------------------------- */

/* The operand type of a transpose whose result has type t. */
static bool untransposed(const Inst *tr, const Type *t, Type *x) {
  *x = *t;
  for (int i = 0; i < t->rank; i++) {
    x->shape[tr->perm[i]] = t->shape[i];
    x->spec[tr->perm[i]] = t->spec[i];
  }
  return true;
}

/* The operand type of a reshape that only inserts or removes size-1 dims
 * (a bias broadcast's shape) whose result has type t: the other dims keep
 * their specs, in order. False for any other reshape. */
static bool unsqueezed(const Inst *in, const Type *t, Type *out) {
  const Type *x = &in->args[0]->type;
  *out = *x;
  out->U = t->U;
  out->R = t->R;
  out->V = t->V;
  int j = 0;
  for (int d = 0; d < x->rank; d++) {
    out->spec[d].n = 0;
    if (x->shape[d] == 1)
      continue;
    while (j < t->rank && t->shape[j] == 1) {
      if (t->spec[j].n)
        return false;
      j++;
    }
    if (j == t->rank || t->shape[j] != x->shape[d])
      return false;
    out->spec[d] = t->spec[j++];
  }
  for (; j < t->rank; j++)
    if (t->shape[j] != 1 || t->spec[j].n)
      return false;
  return true;
}

/* ---- types from operands ---------------------------------------------------------- */

/* The operand's dims (with their sharding) in perm's order. */
static bool infer_transpose(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1))
    return false;
  const Type *x = &in->args[0]->type;
  Type r = *x;
  unsigned seen = 0;
  for (int i = 0; i < x->rank; i++) {
    int p = in->perm[i];
    if (p < 0 || p >= x->rank || (seen & (1u << p)))
      return false;
    seen |= 1u << p;
    r.shape[i] = x->shape[p];
    r.spec[i] = x->spec[p];
  }
  r.weak = false;
  *out = r;
  return true;
}

/* The same elements in the declared shape. */
static bool infer_reshape(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1) || ty_global_count(&in->args[0]->type) != ty_global_count(out))
    return false;
  out->dtype = in->args[0]->type.dtype;
  return true;
}

/* NumPy's broadcast_to the declared shape. */
static bool infer_broadcast(const Module *mod, const Inst *in, Type *out) {
  if (in->nargs != 1 || !ir_arg_is(in, 0, -1))
    return false;
  const Type *x = &in->args[0]->type;
  int off = out->rank - x->rank;
  if (off < 0)
    return false;
  for (int d = 0; d < x->rank; d++)
    if (x->shape[d] != 1 && x->shape[d] != out->shape[off + d])
      return false;
  out->dtype = x->dtype;
  return true;
}

static const OpDef ops[] = {
    {.op = IR_TRANSPOSE, .name = "transpose", .print = print_perm, .vjp = vjp_transpose, .partition = part_transpose,
     .emit = emit_transpose, .result = result_transpose, .operand_for = untransposed, .infer = infer_transpose},
    {.op = IR_RESHAPE_MOVE, .name = "reshape_move", .flags = OPF_COLLECTIVE, .emit = emit_reshape_move,
     .bytes_sent = move_bytes_sent, .net_seconds = move_seconds, .infer = infer_reshape},
    {.op = IR_RESHAPE, .name = "reshape", .vjp = vjp_reshape, .partition = part_reshape, .emit = emit_view,
     .result = result_view, .operand_for = unsqueezed, .infer = infer_reshape},
    {.op = IR_BROADCAST, .name = "broadcast", .flags = OPF_ELEMENTWISE | OPF_RECOMPUTE, .vjp = vjp_broadcast,
     .partition = part_broadcast, .expr = broadcast_expr, .infer = infer_broadcast},
    {0},
};

/* size(x, k): dim k of x's type (its local size in a manual body), a
 * compile-time integer (language.md §9.3): a weak i32 whose value is kept
 * in e->ival, usable in types (let T = size(q, -2)). */
static Type check_size(TcCtx *c, Expr *e, const Type *annot) {
  Expr *pos[2];
  int n = tc_call_args(c, e, pos, 2, 2, NULL, NULL, 0, "size(x, k): the size of dim k of x");
  if (n < 0)
    return ty_error();
  Type x = tc_operand(c, pos[0], "size");
  if (x.kind == TY_ERROR)
    return x;
  int64_t k;
  if (!tc_const_int(c, pos[1], &k))
    return ty_error();
  if (k < -x.rank || k >= x.rank) {
    diag_error(pos[1]->pos, "E_ARG", "size: dim %lld is out of range for %s, which has %d dim%s%s", (long long)k,
               TS(&x), x.rank, x.rank == 1 ? "" : "s",
               x.rank ? arena_printf(" (0 to %d, or -%d to -1)", x.rank - 1, x.rank) : "");
    return ty_error();
  }
  e->ival = x.shape[k < 0 ? k + x.rank : k];
  Type t = ty_scalar(DT_I32);
  t.weak = true;
  return t;
}

static double fold_size(Lower *L, Expr *e) { return (double)e->ival; }

static const BuiltinDef builtins[] = {
    {.name = "size", .flags = BIF_CONST, .check = check_size, .fold = fold_size,
     .doc = "the size of a dim, a compile-time integer"},
    {.name = "transpose", .code = S_TRANSPOSE, .flags = BIF_LIST_ARG, .check = check_transpose, .lower = lower_transpose},
    {.name = "reshape", .code = S_RESHAPE, .flags = BIF_ANNOT | BIF_LIST_ARG, .check = check_reshape, .lower = lower_reshape},
    {.name = "expand_dims", .code = S_EXPAND_DIMS, .check = check_one_dim, .lower = lower_reshape,
     .doc = "a size-1 dim inserted (a view)"},
    {.name = "squeeze", .code = S_SQUEEZE, .check = check_one_dim, .lower = lower_reshape,
     .doc = "a size-1 dim removed (a view)"},
    {0},
};

const OpFamily op_shape_family = {
    .name = "shape",
    .ops = ops,
    .builtins = builtins,
};
