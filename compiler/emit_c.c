/* emit_c.c: SPMD IR to C.
 *
 * Input: a partitioned Module. Output: one C file that includes shdrt.h and
 * defines one C function per IR function plus main(). Every local shape is
 * a compile-time constant, so loops have literal bounds.
 *
 * Values: a scalar (rank 0) is a C variable; an array is a pointer to a
 * refcounted runtime buffer. Every array value owns one reference, released
 * right after its last use in the block that defines it; function
 * parameters and loop-carried block arguments are borrowed. yield and return
 * hand a reference over (retain, or a move when it was the last use).
 * Nothing writes into a buffer another value can see, so views (reshape,
 * retype, pcast) share their operand's buffer.
 *
 * The C is deterministic and readable: DSL names survive in C names and
 * every statement has its source line above it.
 */
#include "shdc.h"

typedef struct {
  FILE *out;
  const Module *mod;
  const Mesh *m;
  const SourceFile *src;
  int indent;
  int last_line;
  int tmp;
  /* liveness of the block being emitted, by value id */
  int *last_use;
  bool *owned;
  bool *fused;         /* by value id: computed inside its one consumer's loop */
  int *uses;           /* by value id, over the whole module */
  int cap;
} Emit;

#define W(...) fprintf(e->out, __VA_ARGS__)

static void line(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(Emit *e, const char *fmt, ...) {
  fprintf(e->out, "%*s", e->indent, "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->out, fmt, ap);
  va_end(ap);
  fputc('\n', e->out);
}

/* ---- names and types ------------------------------------------------------------- */

static const char *vname(const Value *v) {
  if (v->name)
    return arena_printf("%s_%d", v->name, v->id);
  return arena_printf("v%d", v->id);
}

static const char *fname(const Func *f) { return arena_printf("shd_fn_%s", f->name); }

static const char *ctype(DType dt) { return ty_dtype_c(dt); }

static const char *dtconst(DType dt) {
  static const char *n[] = {"SHD_F32", "SHD_F64", "SHD_I32", "SHD_BOOL"};
  return n[dt];
}

static bool is_array(const Value *v) { return v->type.rank > 0; }

static int64_t local_count(Emit *e, const Type *t) { return ty_local_count(e->m, t); }

static const char *shape_lit(Emit *e, const Type *t) {
  if (t->rank == 0)
    return "NULL";
  int64_t s[MAX_RANK];
  ty_local_shape(e->m, t, s);
  Str b = {0};
  str_printf(&b, "(const int64_t[]){");
  for (int d = 0; d < t->rank; d++)
    str_printf(&b, "%s%lld", d ? ", " : "", (long long)s[d]);
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static const char *gshape_lit(const Type *t) {
  if (t->rank == 0)
    return "NULL";
  Str b = {0};
  str_printf(&b, "(const int64_t[]){");
  for (int d = 0; d < t->rank; d++)
    str_printf(&b, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static const char *axes_lit(const int *axes, int n) {
  Str b = {0};
  str_printf(&b, "(const int[]){");
  for (int i = 0; i < n; i++)
    str_printf(&b, "%s%d", i ? ", " : "", axes[i]);
  if (!n)
    str_printf(&b, "0");
  str_printf(&b, "}, %d", n);
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static const char *spec_axes_lit(DimSpec s) {
  int a[MAX_AXES];
  for (int i = 0; i < s.n; i++)
    a[i] = s.axes[i];
  return axes_lit(a, s.n);
}

/* Global coordinates of this rank's block: one expression per dim. */
static const char *offset_lit(Emit *e, const Type *t) {
  if (t->rank == 0)
    return "NULL";
  Str b = {0};
  str_printf(&b, "(const int64_t[]){");
  for (int d = 0; d < t->rank; d++) {
    if (d)
      str_printf(&b, ", ");
    if (!t->spec[d].n)
      str_printf(&b, "0");
    else
      str_printf(&b, "(int64_t)shd_group_index(%s) * %lld", spec_axes_lit(t->spec[d]),
                 (long long)ty_local_dim(e->m, t, d));
  }
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static const char *flit(DType dt, double v) {
  if (dt == DT_F32 || dt == DT_F64) {
    if (v != v)
      return "NAN";
    if (v == 1.0 / 0.0 || v == -1.0 / 0.0)
      return v > 0 ? "INFINITY" : "-INFINITY";
    const char *s = arena_printf(dt == DT_F32 ? "%.9g" : "%.17g", v);
    if (!strpbrk(s, ".e"))
      s = arena_printf("%s.0", s);
    return dt == DT_F32 ? arena_printf("%sf", s) : s;
  }
  if (dt == DT_BOOL)
    return v != 0 ? "true" : "false";
  return arena_printf("%lld", (long long)v);
}

static bool is_last_use(Emit *e, const Value *v, const Inst *in);

/* ---- allocation and ownership ---------------------------------------------------------- */

static void def_array(Emit *e, const Value *v, bool zero) {
  int64_t n = local_count(e, &v->type);
  line(e, "%s *%s = shd_%salloc(%lld * sizeof(%s));", ctype(v->type.dtype), vname(v), zero ? "z" : "",
       (long long)n, ctype(v->type.dtype));
}

static void def_alias(Emit *e, const Value *v, const Value *of) {
  if (!is_array(v)) {
    line(e, "%s %s = %s;", ctype(v->type.dtype), vname(v), vname(of));
    return;
  }
  line(e, "%s *%s = %s;", ctype(v->type.dtype), vname(v), vname(of));
  line(e, "shd_retain(%s);", vname(v));
}

/* Address of a value's data, for runtime calls that take void *. */
static const char *addr(const Value *v) { return is_array(v) ? vname(v) : arena_printf("&%s", vname(v)); }

/* ---- elementwise loops ------------------------------------------------------------------ */

/* An operand's index expression in the loop nest over the result's local
 * shape: NumPy broadcasting with trailing alignment. */
static const char *index_expr(Emit *e, const Value *op, const Type *res) {
  if (op->type.rank == 0)
    return NULL;
  int64_t rs[MAX_RANK], os[MAX_RANK];
  ty_local_shape(e->m, res, rs);
  ty_local_shape(e->m, &op->type, os);
  int off = res->rank - op->type.rank;
  bool same = off == 0;
  for (int d = 0; same && d < res->rank; d++)
    same = rs[d] == os[d];
  if (same)
    return "i";
  Str b = {0};
  int64_t stride = 1;
  bool any = false;
  for (int d = op->type.rank - 1; d >= 0; d--) {
    if (os[d] != 1) {
      str_printf(&b, "%si%d * %lld", any ? " + " : "", d + off, (long long)stride);
      any = true;
    }
    stride *= os[d];
  }
  if (!any)
    str_printf(&b, "0");
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

static const char *elementwise_expr(Emit *e, const Inst *in);

static const char *operand_at(Emit *e, const Value *op, const Type *res) {
  if (e->fused[op->id])
    return arena_printf("(%s)", elementwise_expr(e, op->def));
  const char *ix = index_expr(e, op, res);
  if (!ix)
    return vname(op);
  return arena_printf("%s[%s]", vname(op), ix);
}

/* Opens the loop nest over res's local shape; the body sees i (flat) and,
 * when need_dims, i0..ik. Returns the number of loops opened. */
static int open_loops(Emit *e, const Type *res, bool need_dims) {
  int64_t rs[MAX_RANK];
  ty_local_shape(e->m, res, rs);
  int64_t n = local_count(e, res);
  if (!need_dims) {
    line(e, "for (int64_t i = 0; i < %lld; i++) {", (long long)n);
    e->indent += 2;
    return 1;
  }
  Str flat = {0};
  int64_t stride = 1;
  for (int d = res->rank - 1; d >= 0; d--) {
    str_printf(&flat, "%s%si%d", flat.len ? " + " : "", stride == 1 ? "" : arena_printf("%lld * ", (long long)stride),
               d);
    stride *= rs[d];
  }
  for (int d = 0; d < res->rank; d++) {
    line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)rs[d], d);
    e->indent += 2;
  }
  line(e, "const int64_t i = %s;", str_cstr(&flat));
  free(flat.buf);
  return res->rank;
}

static void close_loops(Emit *e, int n) {
  for (int k = 0; k < n; k++) {
    e->indent -= 2;
    line(e, "}");
  }
}

static const char *unary_expr(int fn, DType dt, const char *x) {
  bool f32 = dt == DT_F32;
  const char *suf = f32 ? "f" : "";
  switch (fn) {
  case UN_NEG: return arena_printf("-%s", x);
  case UN_EXP: return arena_printf("exp%s(%s)", suf, x);
  case UN_LOG: return arena_printf("log%s(%s)", suf, x);
  case UN_SIN: return arena_printf("sin%s(%s)", suf, x);
  case UN_COS: return arena_printf("cos%s(%s)", suf, x);
  case UN_TANH: return arena_printf("tanh%s(%s)", suf, x);
  case UN_SQRT: return arena_printf("sqrt%s(%s)", suf, x);
  case UN_ABS:
    if (dt == DT_I32)
      return arena_printf("shd_absi(%s)", x);
    return arena_printf("fabs%s(%s)", suf, x);
  case UN_RELU:
    return arena_printf("shd_max_%s(%s, 0)", ty_dtype_name(dt), x);
  case UN_SIGMOID: return arena_printf("(1 / (1 + exp%s(-%s)))", suf, x);
  case UN_NOT: return arena_printf("!%s", x);
  case UN_SIGN: return arena_printf("shd_sign_%s(%s)", ty_dtype_name(dt), x);
  case UN_STEP: return arena_printf("(%s)(%s > 0)", ctype(dt), x);
  default: diag_ice("unary %d", fn);
  }
}

static const char *binary_expr(int fn, DType dt, const char *a, const char *b) {
  switch (fn) {
  case BIN_ADD: return arena_printf("%s + %s", a, b);
  case BIN_SUB: return arena_printf("%s - %s", a, b);
  case BIN_MUL: return arena_printf("%s * %s", a, b);
  case BIN_DIV:
    if (dt == DT_I32)
      return arena_printf("shd_idiv(%s, %s)", a, b);
    return arena_printf("%s / %s", a, b);
  case BIN_MAX: return arena_printf("shd_max_%s(%s, %s)", ty_dtype_name(dt), a, b);
  case BIN_MIN: return arena_printf("shd_min_%s(%s, %s)", ty_dtype_name(dt), a, b);
  case BIN_POW: return arena_printf("pow%s(%s, %s)", dt == DT_F32 ? "f" : "", a, b);
  case BIN_LT: return arena_printf("%s < %s", a, b);
  case BIN_LE: return arena_printf("%s <= %s", a, b);
  case BIN_GT: return arena_printf("%s > %s", a, b);
  case BIN_GE: return arena_printf("%s >= %s", a, b);
  case BIN_EQ: return arena_printf("%s == %s", a, b);
  case BIN_NE: return arena_printf("%s != %s", a, b);
  case BIN_AND: return arena_printf("%s && %s", a, b);
  case BIN_OR: return arena_printf("%s || %s", a, b);
  default: diag_ice("binary %d", fn);
  }
}

static bool needs_dims(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  for (int i = 0; i < in->nargs; i++) {
    if (e->fused[in->args[i]->id]) {
      if (needs_dims(e, in->args[i]->def))
        return true;
      continue;
    }
    const char *ix = index_expr(e, in->args[i], res);
    if (ix && strcmp(ix, "i"))
      return true;
  }
  return false;
}

/* ---- fusion ---------------------------------------------------------------------------- */

static bool is_elementwise(const Inst *in) {
  return in->op == IR_UNARY || in->op == IR_BINARY || in->op == IR_SELECT || in->op == IR_CAST ||
         in->op == IR_BROADCAST;
}

static void count_uses(const IrBlock *b, int *uses, bool nested, const IrBlock *top) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nargs; k++)
      uses[in->args[k]->id] += nested ? 1000 : 1;  /* a use inside a loop or branch never fuses */
    for (int r = 0; r < in->nregions; r++)
      count_uses(in->regions[r], uses, true, top);
  }
}

/* An elementwise array result used once, by an elementwise instruction of
 * the same block with the same local shape, is computed in that
 * instruction's loop: no buffer, one pass over memory instead of two. Its
 * operands then live until the consumer. */
static void plan_fusion(Emit *e, const IrBlock *b) {
  int *uses = calloc((size_t)e->cap, sizeof(int));
  int *site = calloc((size_t)e->cap, sizeof(int));
  count_uses(b, uses, false, b);
  int n = b->insts.len;
  for (int i = 0; i < n; i++) {
    const Inst *c = b->insts.data[i];
    if (!is_elementwise(c) || !is_array(c->results[0]))
      continue;
    for (int k = 0; k < c->nargs; k++) {
      const Value *v = c->args[k];
      const Inst *p = v->def;
      if (!p || p->parent != b || !is_elementwise(p) || !is_array(v) || uses[v->id] != 1 ||
          v->type.rank != c->results[0]->type.rank || local_count(e, &v->type) != local_count(e, &c->results[0]->type))
        continue;
      int64_t a[MAX_RANK], r[MAX_RANK];
      ty_local_shape(e->m, &v->type, a);
      ty_local_shape(e->m, &c->results[0]->type, r);
      bool same = true;
      for (int d = 0; d < v->type.rank; d++)
        same &= a[d] == r[d];
      if (same)
        e->fused[v->id] = true;
    }
  }
  /* Where each fused value is really computed: its final consumer. */
  for (int i = n - 1; i >= 0; i--) {
    const Inst *c = b->insts.data[i];
    int where = c->nresults && e->fused[c->results[0]->id] ? site[c->results[0]->id] : i;
    for (int k = 0; k < c->nargs; k++)
      if (e->fused[c->args[k]->id])
        site[c->args[k]->id] = where;
  }
  for (int i = 0; i < n; i++) {
    const Inst *p = b->insts.data[i];
    if (!p->nresults || !e->fused[p->results[0]->id])
      continue;
    int where = site[p->results[0]->id];
    for (int k = 0; k < p->nargs; k++) {
      const Value *v = p->args[k];
      if (v->def && v->def->parent == b && e->last_use[v->id] < where)
        e->last_use[v->id] = where;
    }
  }
  free(uses);
  free(site);
}

/* The C expression an elementwise instruction computes per element. */
static const char *elementwise_expr(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  switch (in->op) {
  case IR_UNARY:
    return unary_expr(in->fn, res->dtype, operand_at(e, in->args[0], res));
  case IR_BINARY:
    return binary_expr(in->fn, in->args[0]->type.dtype, operand_at(e, in->args[0], res),
                       operand_at(e, in->args[1], res));
  case IR_SELECT:
    return arena_printf("%s ? %s : %s", operand_at(e, in->args[0], res), operand_at(e, in->args[1], res),
                        operand_at(e, in->args[2], res));
  case IR_CAST:
    if (res->dtype == DT_BOOL)
      return arena_printf("%s != 0", operand_at(e, in->args[0], res));
    return arena_printf("(%s)%s", ctype(res->dtype), operand_at(e, in->args[0], res));
  case IR_BROADCAST:
    return operand_at(e, in->args[0], res);
  default:
    diag_ice("not elementwise: %s", ir_opname(in->op));
  }
}

static void emit_elementwise(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const char *x = elementwise_expr(e, in);
  if (!is_array(r)) {
    line(e, "%s %s = %s;", ctype(r->type.dtype), vname(r), x);
    return;
  }
  def_array(e, r, false);
  bool dims = needs_dims(e, in);
  int n = open_loops(e, &r->type, dims);
  line(e, "%s[i] = %s;", vname(r), x);
  close_loops(e, n);
}

/* ---- creation --------------------------------------------------------------------------- */

static void emit_fill(Emit *e, const Inst *in) {
  const Value *r = in->results[0], *s = in->args[0];
  if (!is_array(r)) {
    line(e, "%s %s = %s;", ctype(r->type.dtype), vname(r), vname(s));
    return;
  }
  bool zero = s->def && s->def->op == IR_CONST && s->def->fval == 0;
  def_array(e, r, zero);
  if (zero) {
    line(e, "(void)%s;", vname(s));
    return;
  }
  line(e, "for (int64_t i = 0; i < %lld; i++)", (long long)local_count(e, &r->type));
  line(e, "  %s[i] = %s;", vname(r), vname(s));
}

static void emit_iota(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  int64_t ls[MAX_RANK];
  ty_local_shape(e->m, t, ls);
  int64_t inner = 1;
  for (int d = in->dim + 1; d < t->rank; d++)
    inner *= ls[d];
  def_array(e, r, false);
  line(e, "{");
  e->indent += 2;
  if (t->spec[in->dim].n)
    line(e, "int64_t off = (int64_t)shd_group_index(%s) * %lld;", spec_axes_lit(t->spec[in->dim]),
         (long long)ls[in->dim]);
  else
    line(e, "int64_t off = 0;");
  line(e, "for (int64_t i = 0; i < %lld; i++)", (long long)local_count(e, t));
  line(e, "  %s[i] = (%s)(off + (i / %lld) %% %lld);", vname(r), ctype(t->dtype), (long long)inner,
       (long long)ls[in->dim]);
  e->indent -= 2;
  line(e, "}");
}

static void emit_random(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  const char *fn = in->fn ? "shd_fill_uniform" : "shd_fill_normal";
  if (!is_array(r)) {
    line(e, "%s %s = (%s)%s_at_dt((uint64_t)(uint32_t)%s, 0, %s);", ctype(t->dtype), vname(r), ctype(t->dtype),
         in->fn ? "shd_uniform" : "shd_normal", vname(in->args[0]), dtconst(t->dtype));
    return;
  }
  def_array(e, r, false);
  line(e, "%s(%s, %s, (uint64_t)(uint32_t)%s, %d, %s, %s, %s);", fn, vname(r), dtconst(t->dtype),
       vname(in->args[0]), t->rank, gshape_lit(t), offset_lit(e, t), shape_lit(e, t));
}

static void emit_load(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const Type *t = &r->type;
  if (!is_array(r)) {
    line(e, "%s %s;", ctype(t->dtype), vname(r));
    line(e, "shd_load_npy(\"%s\", &%s, %s, 0, NULL, NULL, NULL);", in->str, vname(r), dtconst(t->dtype));
    return;
  }
  def_array(e, r, false);
  line(e, "shd_load_npy(\"%s\", %s, %s, %d, %s, %s, %s);", in->str, vname(r), dtconst(t->dtype), t->rank,
       gshape_lit(t), offset_lit(e, t), shape_lit(e, t));
}

static void emit_save(Emit *e, const Inst *in) {
  const Value *x = in->args[0];
  const Type *t = &x->type;
  /* One copy of each block is written: by the rank at index 0 along every
   * axis the array is replicated (or varying) over. */
  AxisSet rep = ((1u << e->m->naxes) - 1) & ~ty_dim_axes(t);
  int axes[MAX_AXES], n = 0;
  for (int a = 0; a < e->m->naxes; a++)
    if (rep & (1u << a))
      axes[n++] = a;
  const char *writer = n ? arena_printf("shd_group_index(%s) == 0", axes_lit(axes, n)) : "true";
  line(e, "shd_save_npy(\"%s\", %s, %s, %d, %s, %s, %s, %s);", in->str, addr(x), dtconst(t->dtype), t->rank,
       gshape_lit(t), offset_lit(e, t), shape_lit(e, t), writer);
}

/* ---- dot_general through BLAS --------------------------------------------------------------- */

/* A gemm operand must have its dims in the order (batch, first group,
 * second group). When it has (batch, second, first) the transpose is passed
 * to gemm; any other order needs a copy. */
typedef enum { LAYOUT_DIRECT, LAYOUT_TRANS, LAYOUT_COPY } Layout;

static Layout operand_layout(int rank, const int *batch, int nb, const int *g1, int n1, const int *g2, int n2,
                             int *order) {
  int swapped[MAX_RANK], k = 0, ks = 0;
  for (int i = 0; i < nb; i++)
    order[k++] = swapped[ks++] = batch[i];
  for (int i = 0; i < n1; i++)
    order[k++] = g1[i];
  for (int i = 0; i < n2; i++)
    order[k++] = g2[i];
  for (int i = 0; i < n2; i++)
    swapped[ks++] = g2[i];
  for (int i = 0; i < n1; i++)
    swapped[ks++] = g1[i];
  bool ident = true, sw = true;
  for (int i = 0; i < k; i++) {
    ident &= order[i] == i;
    sw &= swapped[i] == i;
  }
  if (rank == 0 || ident)
    return LAYOUT_DIRECT;
  return sw ? LAYOUT_TRANS : LAYOUT_COPY;
}

/* The free dims of each operand of a dot, in order. */
static void dot_free(const Inst *in, int *fa, int *nfa, int *fb, int *nfb) {
  bool ua[MAX_RANK] = {0}, ub[MAX_RANK] = {0};
  const DotDims *d = &in->dot;
  for (int i = 0; i < d->nbatch; i++)
    ua[d->lhs_batch[i]] = ub[d->rhs_batch[i]] = true;
  for (int i = 0; i < d->ncontract; i++)
    ua[d->lhs_contract[i]] = ub[d->rhs_contract[i]] = true;
  *nfa = *nfb = 0;
  for (int i = 0; i < in->args[0]->type.rank; i++)
    if (!ua[i])
      fa[(*nfa)++] = i;
  for (int i = 0; i < in->args[1]->type.rank; i++)
    if (!ub[i])
      fb[(*nfb)++] = i;
}

typedef struct {
  const char *ptr;
  bool trans;
} GemmOperand;

static GemmOperand gemm_operand(Emit *e, const Value *v, const int *batch, int nb, const int *g1, int n1,
                                const int *g2, int n2) {
  int order[MAX_RANK];
  Layout lay = operand_layout(v->type.rank, batch, nb, g1, n1, g2, n2, order);
  GemmOperand g = {is_array(v) ? vname(v) : arena_printf("&%s", vname(v)), lay == LAYOUT_TRANS};
  if (lay != LAYOUT_COPY)
    return g;
  const char *t = arena_printf("t%d", e->tmp++);
  line(e, "%s *%s = shd_alloc(%lld * sizeof(%s));", ctype(v->type.dtype), t, (long long)local_count(e, &v->type),
       ctype(v->type.dtype));
  Str p = {0};
  str_printf(&p, "(const int[]){");
  for (int i = 0; i < v->type.rank; i++)
    str_printf(&p, "%s%d", i ? ", " : "", order[i]);
  str_putc(&p, '}');
  line(e, "shd_transpose(%s, %s, sizeof(%s), %d, %s, %s);", vname(v), t, ctype(v->type.dtype), v->type.rank,
       shape_lit(e, &v->type), str_cstr(&p));
  free(p.buf);
  g.ptr = t;
  return g;
}

int64_t emit_temp_bytes(const Module *mod, const Inst *in) {
  if (in->op != IR_DOT)
    return 0;
  int fa[MAX_RANK], nfa, fb[MAX_RANK], nfb, order[MAX_RANK];
  dot_free(in, fa, &nfa, fb, &nfb);
  const DotDims *d = &in->dot;
  int64_t bytes = 0;
  const Value *a = in->args[0], *b = in->args[1];
  if (operand_layout(a->type.rank, d->lhs_batch, d->nbatch, fa, nfa, d->lhs_contract, d->ncontract, order) ==
      LAYOUT_COPY)
    bytes += ty_local_count(&mod->mesh, &a->type) * (int64_t)ty_dtype_size(a->type.dtype);
  if (operand_layout(b->type.rank, d->rhs_batch, d->nbatch, d->rhs_contract, d->ncontract, fb, nfb, order) ==
      LAYOUT_COPY)
    bytes += ty_local_count(&mod->mesh, &b->type) * (int64_t)ty_dtype_size(b->type.dtype);
  return bytes;
}

EmitResult emit_result_kind(const Module *mod, const Inst *in, int k) {
  const Value *r = in->results[k];
  if (r->type.rank == 0)
    return EMIT_NONE;
  switch (in->op) {
  case IR_CALL: case IR_FOR: case IR_IF:
    return EMIT_NONE;   /* made by the callee or the block */
  case IR_TAPE_GET:
    return EMIT_NONE;   /* a reference to a buffer the tape keeps (not simulated) */
  case IR_REDUCE:
    return in->mask == 0 ? EMIT_VIEW : EMIT_ALLOC;
  case IR_TRANSPOSE: {
    bool ident = true;
    for (int d = 0; d < r->type.rank; d++)
      ident &= in->perm[d] == d;
    return ident || r->type.rank < 2 ? EMIT_VIEW : EMIT_ALLOC;
  }
  case IR_RESHAPE: case IR_RETYPE: case IR_PCAST:
    return in->args[0]->type.rank ? EMIT_VIEW : EMIT_ALLOC;
  case IR_ZERO_UNLESS_FIRST:
    return EMIT_VIEW_OR_ALLOC;
  case IR_ALL_REDUCE:
    return EMIT_STEAL_OR_ALLOC;
  default:
    return EMIT_ALLOC;
  }
}

static void emit_dot(Emit *e, const Inst *in) {
  const Value *a = in->args[0], *b = in->args[1], *r = in->results[0];
  const DotDims *d = &in->dot;
  int64_t la[MAX_RANK], lb[MAX_RANK];
  ty_local_shape(e->m, &a->type, la);
  ty_local_shape(e->m, &b->type, lb);
  int fa[MAX_RANK], nfa, fb[MAX_RANK], nfb;
  dot_free(in, fa, &nfa, fb, &nfb);
  int64_t batch = 1, K = 1, M = 1, N = 1;
  for (int i = 0; i < d->nbatch; i++)
    batch *= la[d->lhs_batch[i]];
  for (int i = 0; i < d->ncontract; i++)
    K *= la[d->lhs_contract[i]];
  for (int i = 0; i < nfa; i++)
    M *= la[fa[i]];
  for (int i = 0; i < nfb; i++)
    N *= lb[fb[i]];
  line(e, "{");
  e->indent += 2;
  int t0 = e->tmp;
  GemmOperand A = gemm_operand(e, a, d->lhs_batch, d->nbatch, fa, nfa, d->lhs_contract, d->ncontract);
  GemmOperand B = gemm_operand(e, b, d->rhs_batch, d->nbatch, d->rhs_contract, d->ncontract, fb, nfb);
  const char *out = is_array(r) ? vname(r) : arena_printf("&%s", vname(r));
  DType dt = r->type.dtype;
  line(e, "for (int64_t bi = 0; bi < %lld; bi++)", (long long)batch);
  line(e, "  shd_gemm(%s, %s, %s, %lld, %lld, %lld, 1.0, %s + bi * %lld, %lld, %s + bi * %lld, %lld, 0.0, %s + bi * "
          "%lld, %lld);",
       dtconst(dt), A.trans ? "true" : "false", B.trans ? "true" : "false", (long long)M, (long long)N, (long long)K,
       A.ptr, (long long)(M * K), (long long)(A.trans ? M : K), B.ptr, (long long)(K * N),
       (long long)(B.trans ? K : N), out, (long long)(M * N), (long long)N);
  for (int t = t0; t < e->tmp; t++)
    line(e, "shd_release(t%d);", t);
  e->indent -= 2;
  line(e, "}");
}

/* ---- collectives ------------------------------------------------------------------------------ */

static const char *red_const(int fn) {
  static const char *n[] = {"SHD_SUM", "SHD_MAX", "SHD_MIN"};
  return n[fn];
}

static void emit_collective(Emit *e, const Inst *in) {
  const Value *x = in->args[0], *r = in->results[0];
  const Type *t = &x->type;
  DType dt = t->dtype;
  const char *axes = axes_lit(in->axes, in->naxes);
  switch (in->op) {
  case IR_ALL_REDUCE:
    if (is_array(r) && emit_result_kind(e->mod, in, 0) == EMIT_STEAL_OR_ALLOC && is_last_use(e, x, in)) {
      /* The operand dies here: reduce in its buffer when no view shares it. */
      line(e, "%s *%s;", ctype(dt), vname(r));
      line(e, "if (shd_unique(%s)) {", vname(x));
      line(e, "  %s = %s;", vname(r), vname(x));
      line(e, "  shd_retain(%s);", vname(r));
      line(e, "} else {");
      line(e, "  %s = shd_alloc(%lld * sizeof(%s));", vname(r), (long long)local_count(e, t), ctype(dt));
      line(e, "  memcpy(%s, %s, %lld * sizeof(%s));", vname(r), vname(x), (long long)local_count(e, t), ctype(dt));
      line(e, "}");
    } else if (is_array(r)) {
      def_array(e, r, false);
      line(e, "memcpy(%s, %s, %lld * sizeof(%s));", vname(r), vname(x), (long long)local_count(e, t), ctype(dt));
    } else {
      line(e, "%s %s = %s;", ctype(dt), vname(r), vname(x));
    }
    line(e, "shd_all_reduce(%s, %lld, %s, %s, %s);", addr(r), (long long)local_count(e, t), dtconst(dt),
         red_const(in->fn), axes);
    return;
  case IR_ALL_GATHER:
    def_array(e, r, false);
    line(e, "shd_all_gather(%s, %s, %s, %d, %s, %d, %s);", vname(x), vname(r), dtconst(dt), t->rank,
         shape_lit(e, t), in->dim, axes);
    return;
  case IR_REDUCE_SCATTER:
    def_array(e, r, false);
    line(e, "shd_reduce_scatter(%s, %s, %s, %s, %d, %s, %d, %s);", vname(x), vname(r), dtconst(dt),
         red_const(in->fn), t->rank, shape_lit(e, t), in->dim, axes);
    return;
  case IR_ALL_TO_ALL:
    def_array(e, r, false);
    line(e, "shd_all_to_all(%s, %s, %s, %d, %s, %d, %d, %s);", vname(x), vname(r), dtconst(dt), t->rank,
         shape_lit(e, t), in->dim, in->dim2, axes);
    return;
  case IR_PPERMUTE:
    if (is_array(r))
      def_array(e, r, false);
    else
      line(e, "%s %s;", ctype(dt), vname(r));
    line(e, "shd_ppermute(%s, %s, %lld * sizeof(%s), %d, %s);", addr(x), addr(r), (long long)local_count(e, t),
         ctype(dt), in->shift, axes);
    return;
  case IR_PERMUTE: {
    int n = 1;
    for (int a = 0; a < e->m->naxes; a++)
      n *= e->m->sizes[a];
    int *dest = arena_alloc(sizeof(int) * (size_t)n), *src = arena_alloc(sizeof(int) * (size_t)n);
    part_permute_tables(e->m, t, &r->type, dest, src);
    Str ds = {0}, ss = {0};
    for (int i = 0; i < n; i++) {
      str_printf(&ds, "%s%d", i ? ", " : "", dest[i]);
      str_printf(&ss, "%s%d", i ? ", " : "", src[i]);
    }
    def_array(e, r, false);
    line(e, "{");
    line(e, "  static const int dest[] = {%s}, src[] = {%s};", str_cstr(&ds), str_cstr(&ss));
    line(e, "  shd_permute(%s, %s, %lld * sizeof(%s), dest[shd_world_rank()], src[shd_world_rank()]);", vname(x),
         vname(r), (long long)local_count(e, t), ctype(dt));
    line(e, "}");
    free(ds.buf);
    free(ss.buf);
    return;
  }
  case IR_SLICE_BLOCK:
  case IR_EMBED_BLOCK:
    def_array(e, r, in->op == IR_EMBED_BLOCK);
    line(e, "shd_%s_block(%s, %s, sizeof(%s), %d, %s, %d, shd_group_size(%s), shd_group_index(%s));",
         in->op == IR_SLICE_BLOCK ? "slice" : "embed", vname(x), vname(r), ctype(dt), t->rank, shape_lit(e, t),
         in->dim, axes, axes);
    return;
  case IR_ZERO_UNLESS_FIRST:
    if (!is_array(r)) {
      line(e, "%s %s = shd_group_index(%s) == 0 ? %s : 0;", ctype(dt), vname(r), axes, vname(x));
      return;
    }
    line(e, "%s *%s;", ctype(dt), vname(r));
    line(e, "if (shd_group_index(%s) == 0) {", axes);
    line(e, "  %s = %s;", vname(r), vname(x));
    line(e, "  shd_retain(%s);", vname(r));
    line(e, "} else {");
    line(e, "  %s = shd_zalloc(%lld * sizeof(%s));", vname(r), (long long)local_count(e, &r->type), ctype(dt));
    line(e, "}");
    return;
  default:
    diag_ice("not a collective: %s", ir_opname(in->op));
  }
}

/* ---- print -------------------------------------------------------------------------------------- */

static void emit_c_string(Emit *e, const char *s) {
  fputc('"', e->out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(e->out, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", e->out);
    else if (*s == '\t')
      fputs("\\t", e->out);
    else if ((unsigned char)*s < 32)
      fprintf(e->out, "\\%03o", (unsigned char)*s);
    else
      fputc(*s, e->out);
  }
  fputc('"', e->out);
}

static void emit_print(Emit *e, const Inst *in) {
  line(e, "if (shd_world_rank() == 0) {");
  e->indent += 2;
  const char *p = in->str ? in->str : "";
  int k = 0;
  bool first = true;
  while (true) {
    const char *end = strchr(p, '\x1f');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!first)
      line(e, "shd_print_text(\" \");");
    first = false;
    if (len == 1 && *p == '\x1e') {
      const Value *v = in->args[k++];
      if (is_array(v))
        line(e, "shd_print_array(%s, %s, %d, %s);", vname(v), dtconst(v->type.dtype), v->type.rank,
             shape_lit(e, &v->type));
      else
        line(e, "shd_print_scalar((double)%s, %s);", vname(v), dtconst(v->type.dtype));
    } else if (len) {
      fprintf(e->out, "%*sshd_print_text(", e->indent, "");
      emit_c_string(e, arena_strndup(p, len));
      fputs(");\n", e->out);
    }
    if (!end)
      break;
    p = end + 1;
  }
  line(e, "shd_print_end();");
  e->indent -= 2;
  line(e, "}");
}

/* ---- liveness ----------------------------------------------------------------------------------- */

static void release_dead(Emit *e, const IrBlock *b, int idx, const Inst *skip_moved) {
  for (int i = 0; i <= idx; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++) {
      const Value *v = in->results[k];
      if (v->type.kind == TY_TAPE && e->last_use[v->id] == idx) {
        if (v->type.elems[0].rank)
          line(e, "for (int64_t k = 0; k < %s_n; k++) shd_release(%s[k]);", vname(v), vname(v));
        line(e, "shd_release(%s);", vname(v));
        continue;
      }
      if (!is_array(v) || e->last_use[v->id] != idx || !e->owned[v->id] || e->fused[v->id])
        continue;
      bool moved = false;
      for (int a = 0; skip_moved && a < skip_moved->nargs; a++)
        moved |= skip_moved->args[a] == v;
      if (!moved)
        line(e, "shd_release(%s);", vname(v));
    }
  }
}

/* ---- instructions --------------------------------------------------------------------------------- */

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to);

static bool is_last_use(Emit *e, const Value *v, const Inst *in) {
  if (!v->def || v->def->parent != in->parent || !e->owned[v->id])
    return false;
  const IrBlock *b = in->parent;
  int idx = -1;
  for (int i = 0; i < b->insts.len; i++)
    if (b->insts.data[i] == in)
      idx = i;
  return e->last_use[v->id] == idx;
}

/* Hands v over to `dest`: a move when this is v's last use, else a new
 * reference. Moved values are not released again. */
static void hand_over(Emit *e, const Inst *in, int k, const char *dest) {
  const Value *v = in->args[k];
  line(e, "%s = %s;", dest, vname(v));
  if (!is_array(v))
    return;
  bool twice = false;
  for (int j = 0; j < k; j++)
    twice |= in->args[j] == v;
  if (!is_last_use(e, v, in) || twice)
    line(e, "shd_retain(%s);", dest);
}

static void emit_for(Emit *e, const Inst *in) {
  int nc = in->nresults;
  const IrBlock *body = in->regions[0];
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    line(e, "%s%s %s;", ctype(c->type.dtype), is_array(c) ? " *" : "", vname(c));
    line(e, "%s = %s;", vname(c), vname(in->args[k + 2]));
    if (is_array(c))
      line(e, "shd_retain(%s);", vname(c));
  }
  line(e, "for (int32_t %s = %s; %s < %s; %s++) {", vname(body->args[0]), vname(in->args[0]), vname(body->args[0]),
       vname(in->args[1]), vname(body->args[0]));
  e->indent += 2;
  const char **next = arena_alloc(sizeof(char *) * (size_t)(nc + 1));
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    next[k] = arena_printf("next_%s", vname(c));
  }
  emit_block(e, body, next);
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    if (is_array(c))
      line(e, "shd_release(%s);", vname(c));
    line(e, "%s = %s;", vname(c), next[k]);
  }
  e->indent -= 2;
  line(e, "}");
  for (int k = 0; k < nc; k++)
    line(e, "%s%s %s = %s;", ctype(in->results[k]->type.dtype), is_array(in->results[k]) ? " *" : "",
         vname(in->results[k]), vname(body->args[k + 1]));
}

static void emit_if(Emit *e, const Inst *in) {
  int nr = in->nresults;
  const char **dest = arena_alloc(sizeof(char *) * (size_t)(nr + 1));
  for (int k = 0; k < nr; k++) {
    const Value *r = in->results[k];
    line(e, "%s%s %s;", ctype(r->type.dtype), is_array(r) ? " *" : "", vname(r));
    dest[k] = vname(r);
  }
  line(e, "if (%s) {", vname(in->args[0]));
  e->indent += 2;
  emit_block(e, in->regions[0], dest);
  e->indent -= 2;
  line(e, "} else {");
  e->indent += 2;
  emit_block(e, in->regions[1], dest);
  e->indent -= 2;
  line(e, "}");
}

static void emit_call(Emit *e, const Inst *in) {
  Str s = {0};
  for (int k = 0; k < in->nresults; k++) {
    const Value *r = in->results[k];
    line(e, "%s%s %s;", ctype(r->type.dtype), is_array(r) ? " *" : "", vname(r));
  }
  str_printf(&s, "%s(", fname(in->callee));
  for (int k = 0; k < in->nargs; k++)
    str_printf(&s, "%s%s", k ? ", " : "", vname(in->args[k]));
  for (int k = 0; k < in->nresults; k++)
    str_printf(&s, "%s&%s", k || in->nargs ? ", " : "", vname(in->results[k]));
  str_printf(&s, ");");
  line(e, "%s", str_cstr(&s));
  free(s.buf);
}

static void emit_source_line(Emit *e, const Inst *in) {
  if (!in->pos.line || in->pos.line == e->last_line || !e->src)
    return;
  e->last_line = in->pos.line;
  const char *p = e->src->text;
  for (int l = 1; l < in->pos.line && *p; p++)
    if (*p == '\n')
      l++;
  while (*p == ' ' || *p == '\t')
    p++;
  const char *end = p;
  while (*end && *end != '\n')
    end++;
  Str s = {0};
  for (const char *q = p; q < end; q++) {
    if (q[0] == '*' && q[1] == '/')
      str_printf(&s, "* /");
    else if (q[0] == '/' && q[1] == '*')
      str_printf(&s, "/ *");
    else
      str_putc(&s, *q);
  }
  line(e, "/* %d: %s */", in->pos.line, str_cstr(&s));
  free(s.buf);
}

static void emit_inst(Emit *e, const Inst *in, const char **yield_to) {
  const Value *r = in->nresults ? in->results[0] : NULL;
  if (r && e->fused[r->id])
    return;
  emit_source_line(e, in);
  switch (in->op) {
  case IR_CONST:
    line(e, "%s %s = %s;", ctype(r->type.dtype), vname(r), flit(r->type.dtype, in->fval));
    return;
  case IR_FILL: emit_fill(e, in); return;
  case IR_IOTA: emit_iota(e, in); return;
  case IR_RANDOM: emit_random(e, in); return;
  case IR_LOAD: emit_load(e, in); return;
  case IR_SAVE: emit_save(e, in); return;
  case IR_ARG: {
    DType dt = r->type.dtype;
    const char *get = dt == DT_I32 ? "shd_arg_i32" : dt == DT_BOOL ? "shd_arg_bool" : "shd_arg_f64";
    line(e, "%s %s = (%s)%s(\"%s\", %s);", ctype(dt), vname(r), ctype(dt), get, in->str,
         dt == DT_BOOL ? (in->fval != 0 ? "true" : "false") : flit(dt == DT_I32 ? DT_I32 : DT_F64, in->fval));
    return;
  }
  case IR_UNARY: case IR_BINARY: case IR_SELECT: case IR_CAST: case IR_BROADCAST:
    emit_elementwise(e, in);
    return;
  case IR_CLOCK:
    line(e, "double %s = shd_time();", vname(r));
    return;
  case IR_DOT:
    if (is_array(r))
      def_array(e, r, false);
    else
      line(e, "%s %s;", ctype(r->type.dtype), vname(r));
    emit_dot(e, in);
    return;
  case IR_REDUCE:
    if (emit_result_kind(e->mod, in, 0) == EMIT_VIEW) {
      def_alias(e, r, in->args[0]);
      return;
    }
    if (is_array(r))
      def_array(e, r, false);
    else
      line(e, "%s %s;", ctype(r->type.dtype), vname(r));
    if (!is_array(in->args[0])) {
      line(e, "%s = %s;", vname(r), vname(in->args[0]));
      return;
    }
    line(e, "shd_reduce(%s, %s, %s, %s, %d, %s, 0x%xu);", vname(in->args[0]), addr(r), dtconst(r->type.dtype),
         red_const(in->fn), in->args[0]->type.rank, shape_lit(e, &in->args[0]->type), in->mask);
    return;
  case IR_TRANSPOSE: {
    if (emit_result_kind(e->mod, in, 0) != EMIT_ALLOC) {
      def_alias(e, r, in->args[0]);
      return;
    }
    def_array(e, r, false);
    Str p = {0};
    str_printf(&p, "(const int[]){");
    for (int d = 0; d < r->type.rank; d++)
      str_printf(&p, "%s%d", d ? ", " : "", in->perm[d]);
    str_putc(&p, '}');
    line(e, "shd_transpose(%s, %s, sizeof(%s), %d, %s, %s);", vname(in->args[0]), vname(r), ctype(r->type.dtype),
         r->type.rank, shape_lit(e, &in->args[0]->type), str_cstr(&p));
    free(p.buf);
    return;
  }
  case IR_RESHAPE: case IR_RETYPE: case IR_PCAST:
    if (!is_array(r) && is_array(in->args[0])) {
      line(e, "%s %s = %s[0];", ctype(r->type.dtype), vname(r), vname(in->args[0]));
      return;
    }
    if (is_array(r) && !is_array(in->args[0])) {
      def_array(e, r, false);
      line(e, "%s[0] = %s;", vname(r), vname(in->args[0]));
      return;
    }
    def_alias(e, r, in->args[0]);
    return;
  case IR_COPY:
    def_array(e, r, false);
    line(e, "memcpy(%s, %s, %lld * sizeof(%s));", vname(r), vname(in->args[0]), (long long)local_count(e, &r->type),
         ctype(r->type.dtype));
    return;
  case IR_ALL_REDUCE: case IR_ALL_GATHER: case IR_REDUCE_SCATTER: case IR_ALL_TO_ALL: case IR_PPERMUTE:
  case IR_PERMUTE: case IR_SLICE_BLOCK: case IR_EMBED_BLOCK: case IR_ZERO_UNLESS_FIRST:
    emit_collective(e, in);
    return;
  case IR_AXIS_INDEX:
    line(e, "int32_t %s = shd_group_index(%s);", vname(r), axes_lit(in->axes, in->naxes));
    return;
  case IR_TAPE_NEW: {
    const Type *el = &r->type.elems[0];
    const char *n = vname(in->args[0]);
    if (el->rank)
      line(e, "void **%s = shd_zalloc((size_t)(%s > 0 ? %s : 0) * sizeof(void *));", vname(r), n, n);
    else
      line(e, "%s *%s = shd_alloc((size_t)(%s > 0 ? %s : 0) * sizeof(%s));", ctype(el->dtype), vname(r), n, n,
           ctype(el->dtype));
    if (el->rank)
      line(e, "int64_t %s_n = %s > 0 ? %s : 0;", vname(r), n, n);
    return;
  }
  case IR_TAPE_PUSH:
    line(e, "%s[%s] = %s;", vname(in->args[0]), vname(in->args[1]), vname(in->args[2]));
    if (is_array(in->args[2]))
      line(e, "shd_retain(%s);", vname(in->args[2]));
    return;
  case IR_TAPE_GET:
    if (is_array(r)) {
      line(e, "%s *%s = %s[%s];", ctype(r->type.dtype), vname(r), vname(in->args[0]), vname(in->args[1]));
      line(e, "shd_retain(%s);", vname(r));
    } else {
      line(e, "%s %s = %s[%s];", ctype(r->type.dtype), vname(r), vname(in->args[0]), vname(in->args[1]));
    }
    return;
  case IR_CALL: emit_call(e, in); return;
  case IR_FOR: emit_for(e, in); return;
  case IR_IF: emit_if(e, in); return;
  case IR_PRINT: emit_print(e, in); return;
  case IR_YIELD:
  case IR_RETURN:
    for (int k = 0; k < in->nargs; k++)
      hand_over(e, in, k, in->op == IR_YIELD ? yield_to[k] : arena_printf("*ret%d", k));
    return;
  default:
    diag_ice("emit: unexpected %s", ir_opname(in->op));
  }
}

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to) {
  ir_last_uses(b, e->last_use);
  plan_fusion(e, b);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_YIELD && yield_to) {
      /* Declare the hand-over targets of a for before filling them. */
      const Inst *owner = b->owner;
      if (owner && owner->op == IR_FOR)
        for (int k = 0; k < in->nargs; k++)
          line(e, "%s%s %s;", ctype(in->args[k]->type.dtype), is_array(in->args[k]) ? " *" : "", yield_to[k]);
    }
    emit_inst(e, in, yield_to);
    for (int k = 0; k < in->nresults; k++) {
      const Value *v = in->results[k];
      if (v->type.kind == TY_ARRAY && !is_array(v) && !e->uses[v->id] && !e->fused[v->id])
        line(e, "(void)%s;", vname(v));
    }
    bool term = in->op == IR_YIELD || in->op == IR_RETURN;
    release_dead(e, b, i, term ? in : NULL);
  }
}

/* ---- functions and the file ---------------------------------------------------------------------- */

static void signature(Emit *e, const Func *f) {
  W("static void %s(", fname(f));
  int n = 0;
  for (int i = 0; i < f->body->nargs; i++) {
    const Value *p = f->body->args[i];
    W("%s%s%s %s", n++ ? ", " : "", ctype(p->type.dtype), is_array(p) ? " *" : "", vname(p));
  }
  for (int i = 0; i < f->nresults; i++) {
    const Type *t = &f->results[i];
    W("%s%s %s*ret%d", n++ ? ", " : "", ctype(t->dtype), t->rank ? " *" : "", i);
  }
  if (!n)
    W("void");
  W(")");
}

static void mark_owned(Emit *e, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      e->owned[in->results[k]->id] = true;
    for (int r = 0; r < in->nregions; r++)
      mark_owned(e, in->regions[r]);
  }
}

static void emit_func(Emit *e, const Func *f) {
  W("\n/* %s%s */\n", f->name, f->generated ? " (generated by autodiff)" : "");
  /* Each function is compiled for several instruction sets and the loader
   * picks the best the CPU has: vectorised elementwise loops without tying
   * the binary to the build machine's CPU. */
  W("SHD_CLONES\n");
  signature(e, f);
  W(" {\n");
  e->indent = 2;
  e->last_line = 0;
  mark_owned(e, f->body);
  emit_block(e, f->body, NULL);
  e->indent = 0;
  W("}\n");
}

static bool calls(const IrBlock *b, const Func *f) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_CALL && in->callee == f)
      return true;
    for (int r = 0; r < in->nregions; r++)
      if (calls(in->regions[r], f))
        return true;
  }
  return false;
}

void emit_module(FILE *out, const Module *mod, const SourceFile *file) {
  Emit e;
  memset(&e, 0, sizeof e);
  e.out = out;
  e.mod = mod;
  e.m = &mod->mesh;
  e.src = file;
  e.cap = mod->next_value + 1;
  e.last_use = calloc((size_t)e.cap, sizeof(int));
  e.owned = calloc((size_t)e.cap, sizeof(bool));
  e.fused = calloc((size_t)e.cap, sizeof(bool));
  e.uses = calloc((size_t)e.cap, sizeof(int));
  FILE *o = out;
  fprintf(o, "/* Generated by shdc from %s: do not edit. */\n", file ? file->name : "?");
  fprintf(o, "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n#include \"shdrt.h\"\n\n");
  fprintf(o, "static const char *const shd_mesh_names[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s\"%s\"", a ? ", " : "", mod->mesh.names[a]);
  fprintf(o, "};\nstatic const int shd_mesh_sizes[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s%d", a ? ", " : "", mod->mesh.sizes[a]);
  fprintf(o, "};\n\n");
  fprintf(o, "#if defined(__x86_64__) && defined(__GNUC__) && !defined(SHD_NO_CLONES)\n"
             "#define SHD_CLONES __attribute__((target_clones(\"default\", \"avx2\", \"avx512f\")))\n"
             "#else\n#define SHD_CLONES\n#endif\n\n");
  fprintf(o, "static inline int32_t shd_idiv(int32_t a, int32_t b) {\n"
             "  if (b == 0)\n    shd_fatal(\"integer division by zero\");\n  return a / b;\n}\n");
  fprintf(o, "static inline int32_t shd_absi(int32_t a) { return a < 0 ? -a : a; }\n");
  /* maximum/minimum propagate NaN, as NumPy's do; relu is maximum(x, 0). */
  for (int k = 0; k < 3; k++) {   /* f32, f64, i32: bool has no arithmetic */
    const char *n = ty_dtype_name((DType)k), *t = ty_dtype_c((DType)k);
    const char *nan = ty_is_float((DType)k) ? " || a != a" : "";
    fprintf(o, "static inline %s shd_max_%s(%s a, %s b) { return (a > b%s) ? a : b; }\n", t, n, t, t, nan);
    fprintf(o, "static inline %s shd_min_%s(%s a, %s b) { return (a < b%s) ? a : b; }\n", t, n, t, t, nan);
    fprintf(o, "static inline %s shd_sign_%s(%s a) { return (%s)((a > 0) - (a < 0)); }\n", t, n, t, t);
  }
  fprintf(o, "\n");
  const Func *mainf = NULL;
  for (int i = 0; i < mod->funcs.len; i++)
    if (((Func *)mod->funcs.data[i])->is_main)
      mainf = mod->funcs.data[i];
  /* Only what main reaches (everything when there is no main). */
  bool *live = calloc((size_t)mod->funcs.len + 1, sizeof(bool));
  for (int i = 0; i < mod->funcs.len; i++)
    live[i] = !mainf || mod->funcs.data[i] == mainf;
  for (bool more = true; more;) {
    more = false;
    for (int i = 0; i < mod->funcs.len; i++)
      if (live[i])
        for (int j = 0; j < mod->funcs.len; j++)
          if (!live[j] && calls(((Func *)mod->funcs.data[i])->body, mod->funcs.data[j]))
            live[j] = more = true;
  }
  for (int i = 0; i < mod->funcs.len; i++)
    ir_count_uses(((Func *)mod->funcs.data[i])->body, e.uses);
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i]) {
      if (!mainf)
        fprintf(o, "__attribute__((unused)) ");
      signature(&e, mod->funcs.data[i]);
      fprintf(o, ";\n");
    }
  for (int i = 0; i < mod->funcs.len; i++)
    if (live[i])
      emit_func(&e, mod->funcs.data[i]);
  free(live);
  if (mainf) {
    fprintf(o, "\nint main(int argc, char **argv) {\n");
    fprintf(o, "  shd_init(&argc, &argv, %d, shd_mesh_names, shd_mesh_sizes);\n", mod->mesh.naxes);
    fprintf(o, "  %s();\n", fname(mainf));
    fprintf(o, "  shd_finalize();\n  return 0;\n}\n");
  }
  free(e.last_use);
  free(e.owned);
  free(e.fused);
  free(e.uses);
}
