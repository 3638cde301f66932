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
 * This file holds what every instruction shares: names, literals,
 * ownership and liveness, the fusion of elementwise chains into one loop,
 * control flow and calls; emit_group.c the loop groups (several
 * elementwise instructions and row sums as one loop nest). Each operation's own C comes from its family
 * (OpDef.emit, or OpDef.expr for the elementwise ones).
 *
 * The C is deterministic and readable: DSL names survive in C names and
 * every statement has its source line above it.
 */
#include "emit_internal.h"

/* struct Emit: emit_internal.h */

/* The values of a block released after each of its instructions, in
 * definition order: vals[at[i] .. at[i + 1]). */
typedef struct {
  const Value **vals;
  int *at;
} Releases;

#define W(...) fprintf(e->out, __VA_ARGS__)

void emit_line(Emit *e, const char *fmt, ...) {
  fprintf(e->out, "%*s", e->indent, "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->out, fmt, ap);
  va_end(ap);
  fputc('\n', e->out);
}

void emit_indent(Emit *e, int delta) { e->indent += delta; }
int emit_tmp(Emit *e) { return e->tmp++; }
int emit_tmp_count(Emit *e) { return e->tmp; }
const Mesh *emit_mesh(Emit *e) { return e->m; }
const Module *emit_module_of(Emit *e) { return e->mod; }
FILE *emit_out(Emit *e) { return e->out; }

#define vname emit_vname
#define ctype emit_ctype
#define is_array emit_is_array

/* ---- names and types ------------------------------------------------------------- */

const char *emit_vname(const Value *v) {
  if (v->name)
    return arena_printf("%s_%d", v->name, v->id);
  return arena_printf("v%d", v->id);
}

const char *emit_fname(const Func *f) { return arena_printf("shd_fn_%s", f->name); }

const char *emit_dtconst(DType dt) {
  static const char *n[] = {"SHD_F32", "SHD_F64", "SHD_I32", "SHD_BOOL"};
  return n[dt];
}


int64_t emit_local_count(Emit *e, const Type *t) { return ty_local_count(e->m, t); }

const char *emit_shape_lit(Emit *e, const Type *t) {
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

/* The local array x as [outer, n, inner] around dim k. */
const char *emit_row_args(Emit *e, const Value *x, int k) {
  int64_t s[MAX_RANK], outer = 1, inner = 1;
  ty_local_shape(emit_mesh(e), &x->type, s);
  for (int d = 0; d < k; d++)
    outer *= s[d];
  for (int d = k + 1; d < x->type.rank; d++)
    inner *= s[d];
  return arena_printf("%lld, %lld, %lld", (long long)outer, (long long)s[k], (long long)inner);
}

const char *emit_gshape_lit(const Type *t) {
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

const char *emit_axes_lit(const int *axes, int n) { return arena_printf("%s, %d", emit_ints_lit(axes, n), n); }

const char *emit_spec_axes_lit(DimSpec s) {
  int a[MAX_AXES];
  for (int i = 0; i < s.n; i++)
    a[i] = s.axes[i];
  return emit_axes_lit(a, s.n);
}

/* Global coordinates of this rank's block: one expression per dim. */
const char *emit_offset_lit(Emit *e, const Type *t) {
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
      str_printf(&b, "(int64_t)shd_group_index(%s) * %lld", emit_spec_axes_lit(t->spec[d]),
                 (long long)ty_local_dim(e->m, t, d));
  }
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

const char *emit_flit(DType dt, double v) {
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

const char *emit_ints_lit(const int *v, int n) {
  Str b = {0};
  str_printf(&b, "(const int[]){");
  for (int i = 0; i < n; i++)
    str_printf(&b, "%s%d", i ? ", " : "", v[i]);
  if (!n)
    str_printf(&b, "0");
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

/* Every byte outside printable ASCII, and the three that C gives a meaning
 * inside a literal (the quote, the backslash, and ? that starts trigraphs),
 * becomes a three-digit octal escape, so no program text can end the
 * literal or be read as anything but its bytes. */
const char *emit_str_lit(const char *s, size_t len) {
  Str b = {0};
  str_putc(&b, '"');
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 32 || ch > 126 || ch == '"' || ch == '\\' || ch == '?')
      str_printf(&b, "\\%03o", ch);
    else
      str_putc(&b, (char)ch);
  }
  str_putc(&b, '"');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

const char *emit_i64s_lit(const int64_t *v, int n) {
  Str b = {0};
  str_printf(&b, "(const int64_t[]){");
  for (int i = 0; i < n; i++)
    str_printf(&b, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (!n)
    str_printf(&b, "0");
  str_putc(&b, '}');
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

const char *emit_names_lit(Value *const *v, int n) {
  Str b = {0};
  for (int i = 0; i < n; i++)
    str_printf(&b, "%s%s", i ? ", " : "", emit_vname(v[i]));
  const char *r = arena_strdup(str_cstr(&b));
  free(b.buf);
  return r;
}

/* The index of pos's file in the program's table of source files
 * (shd_src_files, SourceFile.order: the program's own file 0, then its
 * imports in the order they are read), noted for the table. */
int emit_file_index(Emit *e, Pos pos) {
  const SourceFile *f = pos.file ? pos.file : e->src;
  int k = f ? f->order : 0;
  if (k < 0)
    diag_ice("emit_file_index: order %d", k);
  if (k >= e->nfiles) {
    const SourceFile **p = realloc(e->files, sizeof(*p) * (size_t)(k + 1));
    if (!p)
      diag_ice("out of memory");
    for (int i = e->nfiles; i <= k; i++)
      p[i] = NULL;
    e->files = p;
    e->nfiles = k + 1;
  }
  if (f)
    e->files[k] = f;
  return k;
}

void emit_trace_at(Emit *e, Pos pos) { emit_line(e, "shd_trace_at(%d, %d);", emit_file_index(e, pos), pos.line); }

/* FILE:LINE of pos as a C string literal: the imported file's own name for
 * a function of an imported file (std's included). */
const char *emit_where_lit(Emit *e, Pos pos) {
  const char *name = pos.file ? pos.file->name : e->src ? e->src->name : "?";
  const char *s = arena_printf("%s:%d", name, pos.line);
  return emit_str_lit(s, strlen(s));
}

/* ---- allocation and ownership ---------------------------------------------------------- */

void emit_def_array(Emit *e, const Value *v, bool zero) {
  int64_t n = emit_local_count(e, &v->type);
  emit_line(e, "%s *%s = shd_%salloc(%lld * sizeof(%s));", ctype(&v->type), vname(v), zero ? "z" : "",
       (long long)n, ctype(&v->type));
}

/* Declares array v as x's buffer when x dies at `in` and no view shares
 * it (shd_unique, at run time), else as a copy of x (EMIT_STEAL_OR_ALLOC). */
void emit_def_taken(Emit *e, const Value *v, const Value *x, const Inst *in) {
  int64_t n = emit_local_count(e, &v->type);
  bool steal = emit_can_steal(e, x, in);
  emit_line(e, "%s *%s;", ctype(&v->type), vname(v));
  if (steal) {
    emit_line(e, "if (shd_unique(%s)) {", vname(x));
    emit_line(e, "  %s = %s;", vname(v), vname(x));
    emit_line(e, "  shd_retain(%s);", vname(v));
    emit_line(e, "} else {");
    emit_indent(e, 2);
  }
  emit_line(e, "%s = shd_alloc(%lld * sizeof(%s));", vname(v), (long long)n, ctype(&v->type));
  emit_line(e, "memcpy(%s, %s, %lld * sizeof(%s));", vname(v), vname(x), (long long)n, ctype(&v->type));
  if (steal) {
    emit_indent(e, -2);
    emit_line(e, "}");
  }
}

void emit_def_alias(Emit *e, const Value *v, const Value *of) {
  if (!is_array(v)) {
    emit_line(e, "%s %s = %s;", ctype(&v->type), vname(v), vname(of));
    return;
  }
  emit_line(e, "%s *%s = %s;", ctype(&v->type), vname(v), vname(of));
  emit_line(e, "shd_retain(%s);", vname(v));
}

void emit_def_scalar(Emit *e, const Value *v) { emit_line(e, "%s %s;", ctype(&v->type), vname(v)); }

/* Address of a value's data, for runtime calls that take void *. */
const char *emit_addr(const Value *v) { return is_array(v) ? vname(v) : arena_printf("&%s", vname(v)); }

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
    return e->flat ? e->flat : "i";
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

const char *emit_elementwise_expr(Emit *e, const Inst *in) { return op_def(in->op)->expr(e, in); }

const char *emit_operand_at(Emit *e, const Value *op, const Type *res) {
  const char *g = emit_group_operand(e, op);
  if (g)
    return g;
  if (e->fused[op->id])
    return arena_printf("(%s)", emit_elementwise_expr(e, op->def));
  const char *ix = index_expr(e, op, res);
  if (!ix)
    return vname(op);
  return arena_printf("%s[%s]", vname(op), ix);
}

/* Opens the loop nest over res's local shape; the body sees i (flat) and,
 * when need_dims, i0..ik. Returns the number of loops opened. */
int emit_open_loops(Emit *e, const Type *res, bool need_dims) {
  int64_t rs[MAX_RANK];
  ty_local_shape(e->m, res, rs);
  int64_t n = emit_local_count(e, res);
  if (!need_dims) {
    emit_line(e, "for (int64_t i = 0; i < %lld; i++) {", (long long)n);
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
    emit_line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)rs[d], d);
    e->indent += 2;
  }
  emit_line(e, "const int64_t i = %s;", str_cstr(&flat));
  free(flat.buf);
  return res->rank;
}

void emit_close_loops(Emit *e, int n) {
  for (int k = 0; k < n; k++) {
    e->indent -= 2;
    emit_line(e, "}");
  }
}

bool emit_needs_dims(Emit *e, const Inst *in) {
  const Type *res = &in->results[0]->type;
  for (int i = 0; i < in->nargs; i++) {
    if (e->fused[in->args[i]->id]) {
      if (emit_needs_dims(e, in->args[i]->def))
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

bool emit_is_elementwise(const Inst *in) {
  const OpDef *d = op_def(in->op);
  return d && (d->flags & OPF_ELEMENTWISE);
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
enum { FUSE_DEPTH = 32 };

void emit_plan_fusion(Emit *e, const IrBlock *b) {
  int *uses = e->fuse_uses, *site = e->fuse_site, *depth = e->fuse_depth;   /* depth: fused producers below a value, plus one */
  count_uses(b, uses, false, b);
  int n = b->insts.len;
  for (int i = 0; i < n; i++) {
    const Inst *c = b->insts.data[i];
    if (!emit_is_elementwise(c) || !is_array(c->results[0]))
      continue;
    int deep = 1;
    for (int k = 0; k < c->nargs; k++) {
      const Value *v = c->args[k];
      const Inst *p = v->def;
      /* A chain deeper than FUSE_DEPTH is cut into loops of that depth:
       * the emitter's recursion and the C expressions stay bounded however
       * long a program's chain of elementwise operations is. */
      if (!p || p->parent != b || !emit_is_elementwise(p) || !is_array(v) || uses[v->id] != 1 ||
          depth[v->id] >= FUSE_DEPTH || v->type.rank != c->results[0]->type.rank ||
          emit_local_count(e, &v->type) != emit_local_count(e, &c->results[0]->type))
        continue;
      int64_t a[MAX_RANK], r[MAX_RANK];
      ty_local_shape(e->m, &v->type, a);
      ty_local_shape(e->m, &c->results[0]->type, r);
      bool same = true;
      for (int d = 0; d < v->type.rank; d++)
        same &= a[d] == r[d];
      if (same) {
        e->fused[v->id] = true;
        if (depth[v->id] + 1 > deep)
          deep = depth[v->id] + 1;
      }
    }
    depth[c->results[0]->id] = deep;
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
  ir_clear_ids(b, uses, sizeof(int));
  ir_clear_ids(b, site, sizeof(int));
  ir_clear_ids(b, depth, sizeof(int));
}

static void emit_elementwise(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  const char *x = emit_elementwise_expr(e, in);
  if (!is_array(r)) {
    emit_line(e, "%s %s = %s;", ctype(&r->type), vname(r), x);
    return;
  }
  emit_def_array(e, r, false);
  bool dims = emit_needs_dims(e, in);
  emit_line(e, "shd_span_begin_at(SHD_SPAN_ELEMENTWISE, \"elementwise\", %d, %d);", emit_file_index(e, in->pos),
            in->pos.line);
  int n = emit_open_loops(e, &r->type, dims);
  emit_line(e, "%s[i] = %s;", vname(r), x);
  emit_close_loops(e, n);
  emit_line(e, "shd_span_end();");
}

/* ---- liveness ----------------------------------------------------------------------------------- */

/* Lists, once per block, the values whose last use is each index, so that
 * a block costs time linear in its length. */
static Releases plan_releases(Emit *e, const IrBlock *b) {
  int n = b->insts.len, total = 0;
  Releases r = {NULL, calloc((size_t)n + 2, sizeof(int))};
  for (int i = 0; i < n; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++, total++) {
      int at = e->last_use[in->results[k]->id];
      if (at >= 0 && at < n)
        r.at[at + 1]++;
    }
  }
  for (int i = 0; i < n; i++)
    r.at[i + 1] += r.at[i];
  r.vals = malloc(sizeof(Value *) * (size_t)(total + 1));
  int *fill = malloc(sizeof(int) * (size_t)(n + 1));
  memcpy(fill, r.at, sizeof(int) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++) {
      int at = e->last_use[in->results[k]->id];
      if (at >= 0 && at < n)
        r.vals[fill[at]++] = in->results[k];
    }
  }
  free(fill);
  return r;
}

static void release_dead(Emit *e, const Releases *rel, int idx, const Inst *skip_moved) {
  for (int j = rel->at[idx]; j < rel->at[idx + 1]; j++) {
    const Value *v = rel->vals[j];
    if (v->type.kind == TY_TAPE) {
      if (v->type.elems[0].rank)
        emit_line(e, "for (int64_t k = 0; k < %s_n; k++) shd_release(%s[k]);", vname(v), vname(v));
      emit_line(e, "shd_release(%s);", vname(v));
      continue;
    }
    if (!is_array(v) || !e->owned[v->id] || e->fused[v->id] || e->nobuf[v->id])
      continue;
    bool moved = false;
    for (int a = 0; skip_moved && a < skip_moved->nargs; a++)
      moved |= skip_moved->args[a] == v;
    if (!moved)
      emit_line(e, "shd_release(%s);", vname(v));
  }
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
  case IR_RETYPE:
    return in->args[0]->type.rank ? EMIT_VIEW : EMIT_ALLOC;
  default: {
    const OpDef *d = op_def(in->op);
    return d && d->result ? d->result(mod, in, k) : EMIT_ALLOC;
  }
  }
}

int64_t emit_temp_bytes(const Module *mod, const Inst *in) {
  const OpDef *d = op_def(in->op);
  return d && d->temp_bytes ? d->temp_bytes(mod, in) : 0;
}

/* A view of operand 0 (reshape, retype, pcast: the same bytes), or a move
 * between a scalar and a one-element array. */
void emit_view(Emit *e, const Inst *in) {
  const Value *r = in->results[0];
  if (!is_array(r) && is_array(in->args[0])) {
    emit_line(e, "%s %s = %s[0];", ctype(&r->type), vname(r), vname(in->args[0]));
    return;
  }
  if (is_array(r) && !is_array(in->args[0])) {
    emit_def_array(e, r, false);
    emit_line(e, "%s[0] = %s;", vname(r), vname(in->args[0]));
    return;
  }
  emit_def_alias(e, r, in->args[0]);
}

/* ---- instructions --------------------------------------------------------------------------------- */

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to);

/* A loop-carried argument of a for body (not its index): the loop holds
 * one reference to it until the iteration ends. */
bool emit_carry_arg(const Value *v, const IrBlock *b) {
  return !v->def && v->arg_of == b && b->owner && b->owner->op == IR_FOR && v->index > 0;
}

static int inst_index(Emit *e, const Inst *in) {
  if (in == e->cur)
    return e->cur_idx;
  const IrBlock *b = in->parent;
  for (int i = 0; i < b->insts.len; i++)
    if (b->insts.data[i] == in)
      return i;
  return -1;
}

bool emit_can_steal(Emit *e, const Value *v, const Inst *in) {
  if (emit_carry_arg(v, in->parent))
    return e->last_use[v->id] == inst_index(e, in);
  return emit_is_last_use(e, v, in);
}

bool emit_is_last_use(Emit *e, const Value *v, const Inst *in) {
  if (!v->def || v->def->parent != in->parent || !e->owned[v->id])
    return false;
  return e->last_use[v->id] == inst_index(e, in);
}

/* Hands v over to `dest`: a move when this is v's last use, else a new
 * reference. Moved values are not released again. */
static void hand_over(Emit *e, const Inst *in, int k, const char *dest) {
  const Value *v = in->args[k];
  emit_line(e, "%s = %s;", dest, vname(v));
  if (!is_array(v))
    return;
  bool twice = false;
  for (int j = 0; j < k; j++)
    twice |= in->args[j] == v;
  if (!emit_is_last_use(e, v, in) || twice)
    emit_line(e, "shd_retain(%s);", dest);
}

static void emit_for(Emit *e, const Inst *in) {
  int nc = in->nresults;
  const IrBlock *body = in->regions[0];
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    emit_line(e, "%s%s %s;", ctype(&c->type), is_array(c) ? " *" : "", vname(c));
    emit_line(e, "%s = %s;", vname(c), vname(in->args[k + 2]));
    if (is_array(c))
      emit_line(e, "shd_retain(%s);", vname(c));
  }
  emit_line(e, "for (int32_t %s = %s; %s < %s; %s++) {", vname(body->args[0]), vname(in->args[0]), vname(body->args[0]),
       vname(in->args[1]), vname(body->args[0]));
  e->indent += 2;
  bool step = in->parent && in->parent == e->main_body;
  if (step)
    emit_line(e, "shd_step_begin(%s, %d);", vname(body->args[0]), in->pos.line);
  const char **next = arena_alloc(sizeof(char *) * (size_t)(nc + 1));
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    next[k] = arena_printf("next_%s", vname(c));
  }
  emit_block(e, body, next);
  for (int k = 0; k < nc; k++) {
    const Value *c = body->args[k + 1];
    if (is_array(c))
      emit_line(e, "shd_release(%s);", vname(c));
    emit_line(e, "%s = %s;", vname(c), next[k]);
  }
  if (step)
    emit_line(e, "shd_step_end();");
  e->indent -= 2;
  emit_line(e, "}");
  for (int k = 0; k < nc; k++)
    emit_line(e, "%s%s %s = %s;", ctype(&in->results[k]->type), is_array(in->results[k]) ? " *" : "",
         vname(in->results[k]), vname(body->args[k + 1]));
}

static void emit_if(Emit *e, const Inst *in) {
  int nr = in->nresults;
  const char **dest = arena_alloc(sizeof(char *) * (size_t)(nr + 1));
  for (int k = 0; k < nr; k++) {
    const Value *r = in->results[k];
    emit_line(e, "%s%s %s;", ctype(&r->type), is_array(r) ? " *" : "", vname(r));
    dest[k] = vname(r);
  }
  emit_line(e, "if (%s) {", vname(in->args[0]));
  e->indent += 2;
  emit_block(e, in->regions[0], dest);
  e->indent -= 2;
  emit_line(e, "} else {");
  e->indent += 2;
  emit_block(e, in->regions[1], dest);
  e->indent -= 2;
  emit_line(e, "}");
}

static void emit_call(Emit *e, const Inst *in) {
  Str s = {0};
  for (int k = 0; k < in->nresults; k++) {
    const Value *r = in->results[k];
    emit_line(e, "%s%s %s;", ctype(&r->type), is_array(r) ? " *" : "", vname(r));
  }
  str_printf(&s, "%s(", emit_fname(in->callee));
  for (int k = 0; k < in->nargs; k++)
    str_printf(&s, "%s%s", k ? ", " : "", vname(in->args[k]));
  for (int k = 0; k < in->nresults; k++)
    str_printf(&s, "%s&%s", k || in->nargs ? ", " : "", vname(in->results[k]));
  str_printf(&s, ");");
  emit_line(e, "shd_span_begin_at(SHD_SPAN_CALL, \"%s\", %d, %d);", in->callee->name, emit_file_index(e, in->pos),
            in->pos.line);
  emit_line(e, "%s", str_cstr(&s));
  emit_line(e, "shd_span_end();");
  free(s.buf);
}

/* Program text inside a C comment must stay a comment: no closing or
 * nested opener, no trigraph (??/ could splice lines), no byte outside
 * printable ASCII. */
static const char *comment_text(const char *p, size_t n) {
  Str s = {0};
  for (size_t k = 0; k < n; k++) {
    unsigned char ch = (unsigned char)p[k];
    char next = k + 1 < n ? p[k + 1] : 0;
    if ((ch == '*' && next == '/') || (ch == '/' && next == '*') || (ch == '?' && next == '?'))
      str_printf(&s, "%c ", ch);
    else
      str_putc(&s, ch >= 32 && ch < 127 ? (char)ch : '.');
  }
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* The source line of `in` as a comment, when it differs from the last one:
 * "N: text" in the program's file, "FILE N: text" (FILE's last component)
 * in an imported one. */
static void emit_source_line(Emit *e, const Inst *in) {
  const SourceFile *f = in->pos.file ? in->pos.file : e->src;
  if (!in->pos.line || (in->pos.line == e->last_line && f == e->last_file) || !f)
    return;
  e->last_line = in->pos.line;
  e->last_file = f;
  size_t len;
  const char *p = diag_line_text(f, in->pos.line, &len), *end = p + len;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  const char *base = strrchr(f->name, '/');
  base = base ? base + 1 : f->name;
  const char *file = f == e->src ? "" : arena_printf("%s ", comment_text(base, strlen(base)));
  emit_line(e, "/* %s%d: %s */", file, in->pos.line, comment_text(p, (size_t)(end - p)));
}

static void emit_tape(Emit *e, const Inst *in) {
  const Value *r = in->nresults ? in->results[0] : NULL;
  switch (in->op) {
  case IR_TAPE_NEW: {
    const Type *el = &r->type.elems[0];
    const char *n = vname(in->args[0]);
    if (el->rank)
      emit_line(e, "void **%s = shd_zalloc((size_t)(%s > 0 ? %s : 0) * sizeof(void *));", vname(r), n, n);
    else
      emit_line(e, "%s *%s = shd_alloc((size_t)(%s > 0 ? %s : 0) * sizeof(%s));", ctype(el), vname(r), n, n,
           ctype(el));
    if (el->rank)
      emit_line(e, "int64_t %s_n = %s > 0 ? %s : 0;", vname(r), n, n);
    return;
  }
  case IR_TAPE_PUSH:
    emit_line(e, "%s[%s] = %s;", vname(in->args[0]), vname(in->args[1]), vname(in->args[2]));
    if (is_array(in->args[2]))
      emit_line(e, "shd_retain(%s);", vname(in->args[2]));
    return;
  default:   /* IR_TAPE_GET */
    if (is_array(r)) {
      emit_line(e, "%s *%s = %s[%s];", ctype(&r->type), vname(r), vname(in->args[0]), vname(in->args[1]));
      emit_line(e, "shd_retain(%s);", vname(r));
    } else {
      emit_line(e, "%s %s = %s[%s];", ctype(&r->type), vname(r), vname(in->args[0]), vname(in->args[1]));
    }
    return;
  }
}

static void emit_inst(Emit *e, const Inst *in, const char **yield_to) {
  const Value *r = in->nresults ? in->results[0] : NULL;
  if (r && e->fused[r->id])
    return;
  if (e->deferred && e->deferred[e->cur_idx] && !e->making_deferred)
    return;   /* a tape push made after its group */
  if (r && e->gmember[r->id]) {
    /* a loop group is emitted at its last member, then the pushes that waited for it */
    const Group *g = &e->groups[e->gmember[r->id] - 1];
    if (g->mem[g->n - 1] == in) {
      emit_source_line(e, in);
      emit_group(e, g);
      int idx = e->cur_idx;
      e->making_deferred = true;
      for (int a = 0; a < g->nafter; a++) {
        e->cur = (const Inst *)e->group_block->insts.data[g->after[a]];
        e->cur_idx = g->after[a];
        emit_inst(e, e->cur, yield_to);
      }
      e->making_deferred = false;
      e->cur = in;
      e->cur_idx = idx;
    }
    return;
  }
  emit_source_line(e, in);
  /* The timeline (SHD_TRACE=FILE.json) names the line of each GEMM and collective. */
  const OpDef *def = op_def(in->op);
  if (def && (def->flags & (OPF_TRACE_LINE | OPF_COLLECTIVE)))
    emit_trace_at(e, in->pos);
  switch (in->op) {
  case IR_CONST:
    emit_line(e, "%s %s = %s;", ctype(&r->type), vname(r), emit_flit(r->type.dtype, in->fval));
    return;
  case IR_RETYPE:
    emit_view(e, in);
    return;
  case IR_TAPE_NEW: case IR_TAPE_PUSH: case IR_TAPE_GET:
    emit_tape(e, in);
    return;
  case IR_CALL: emit_call(e, in); return;
  case IR_FOR: emit_for(e, in); return;
  case IR_IF: emit_if(e, in); return;
  case IR_YIELD:
  case IR_RETURN:
    for (int k = 0; k < in->nargs; k++)
      hand_over(e, in, k, in->op == IR_YIELD ? yield_to[k] : arena_printf("*ret%d", k));
    return;
  default: {
    const OpDef *d = op_def(in->op);
    if (d && (d->flags & OPF_ELEMENTWISE))
      emit_elementwise(e, in);
    else if (d && d->emit)
      d->emit(e, in);
    else
      diag_ice("emit: unexpected %s", ir_opname(in->op));
    return;
  }
  }
}

static void emit_block(Emit *e, const IrBlock *b, const char **yield_to) {
  ir_last_uses(b, e->last_use);
  emit_plan_fusion(e, b);
  Group *gs;
  int ng;
  emit_plan_groups(e, b, &gs, &ng);
  int *deferred = emit_deferred_pushes(b, gs, ng);
  Releases rel = plan_releases(e, b);
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    e->groups = gs;   /* again after a nested block's emission */
    e->ngroups = ng;
    e->group_block = b;
    e->deferred = deferred;
    if (in->op == IR_YIELD && yield_to) {
      /* Declare the hand-over targets of a for before filling them. */
      const Inst *owner = b->owner;
      if (owner && owner->op == IR_FOR)
        for (int k = 0; k < in->nargs; k++)
          emit_line(e, "%s%s %s;", ctype(&in->args[k]->type), is_array(in->args[k]) ? " *" : "", yield_to[k]);
    }
    e->cur = in;
    e->cur_idx = i;
    emit_inst(e, in, yield_to);
    for (int k = 0; k < in->nresults; k++) {
      const Value *v = in->results[k];
      if (v->type.kind == TY_ARRAY && !is_array(v) && !e->uses[v->id] && !e->fused[v->id])
        emit_line(e, "(void)%s;", vname(v));
    }
    bool term = in->op == IR_YIELD || in->op == IR_RETURN;
    release_dead(e, &rel, i, term ? in : NULL);
  }
  free(rel.vals);
  free(rel.at);
  emit_free_groups(gs, ng);
  free(deferred);
  e->deferred = NULL;
}

/* ---- functions and the file ---------------------------------------------------------------------- */

/* The C prototype of f: static in a one-file program; in a program of
 * several translation units external, and named NAME__SUFFIX for one
 * instruction set's copy (suffix NULL: the entry everyone calls). */
void emit_signature_named(Emit *e, const Func *f, bool external, const char *name) {
  W("%svoid %s(", external ? "" : "static ", name);
  int n = 0;
  for (int i = 0; i < f->body->nargs; i++) {
    const Value *p = f->body->args[i];
    W("%s%s%s %s", n++ ? ", " : "", ctype(&p->type), is_array(p) ? " *" : "", vname(p));
  }
  for (int i = 0; i < f->nresults; i++) {
    const Type *t = &f->results[i];
    W("%s%s %s*ret%d", n++ ? ", " : "", ctype(t), t->rank ? " *" : "", i);
  }
  if (!n)
    W("void");
  W(")");
}

void emit_signature_as(Emit *e, const Func *f, bool external, const char *suffix) {
  emit_signature_named(e, f, external, suffix ? arena_printf("%s__%s", emit_fname(f), suffix) : emit_fname(f));
}

static void signature(Emit *e, const Func *f) { emit_signature_as(e, f, false, NULL); }

static void mark_owned(Emit *e, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      e->owned[in->results[k]->id] = true;
    for (int r = 0; r < in->nregions; r++)
      mark_owned(e, in->regions[r]);
  }
}

/* f's body, from its opening brace to its closing one. */
void emit_func_body(Emit *e, const Func *f) {
  W(" {\n");
  e->indent = 2;
  e->last_line = 0;
  e->last_file = NULL;
  mark_owned(e, f->body);
  emit_block(e, f->body, NULL);
  e->indent = 0;
  W("}\n");
}

static void emit_func(Emit *e, const Func *f) {
  W("\n/* %s%s */\n", f->name, f->generated ? " (generated by autodiff)" : "");
  /* Each function is compiled for several instruction sets and the loader
   * picks the best the CPU has: vectorised elementwise loops without tying
   * the binary to the build machine's CPU. */
  W("SHD_CLONES\n");
  signature(e, f);
  emit_func_body(e, f);
}

static void mark_callees(const IrBlock *b, const PtrMap *index, bool *live, int *work, int *n) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int j = in->op == IR_CALL ? ptrmap_get(index, in->callee) : -1;
    if (j >= 0 && !live[j]) {
      live[j] = true;
      work[(*n)++] = j;
    }
    for (int r = 0; r < in->nregions; r++)
      mark_callees(in->regions[r], index, live, work, n);
  }
}

/* By function index: what main reaches (everything when there is no
 * main), by a worklist over the calls: linear in the program. */
bool *emit_reachable(const Module *mod, const Func *mainf) {
  int nf = mod->funcs.len, n = 0;
  bool *live = calloc((size_t)nf + 1, sizeof(bool));
  int *work = malloc(sizeof(int) * (size_t)(nf + 1));
  PtrMap index = {0};
  for (int i = 0; i < nf; i++) {
    ptrmap_put(&index, mod->funcs.data[i], i);
    if (!mainf || mod->funcs.data[i] == mainf) {
      live[i] = true;
      work[n++] = i;
    }
  }
  while (n > 0) {
    const Func *f = mod->funcs.data[work[--n]];
    mark_callees(f->body, &index, live, work, &n);
  }
  ptrmap_free(&index);
  free(work);
  return live;
}

/* main: the runtime starts, runs what the families set up (the table of
 * the program's args, which checks the command line: op_io.c), checks the
 * memory `explain` predicts against the host's, then runs fn main. The
 * families' declarations go to e's file before it. */
void emit_main_fn(Emit *e, FILE *o, const Module *mod, const Func *mainf, const bool *live) {
  const OpFamily *const *fams = op_families();
  int nf = 0;
  while (fams[nf])
    nf++;
  const char **setup = calloc((size_t)nf + 1, sizeof *setup);
  for (int i = 0; i < nf; i++)
    setup[i] = fams[i]->main_setup ? fams[i]->main_setup(e, live) : NULL;
  int mfile = emit_file_index(e, mainf->pos);
  /* the timeline's file names: every file the bodies named, by order */
  fprintf(o, "\nstatic const char *const shd_src_files[%d] = {", e->nfiles);
  for (int i = 0; i < e->nfiles; i++) {
    const char *name = e->files[i] ? e->files[i]->name : "?";
    fprintf(o, "%s%s", i ? ", " : "", emit_str_lit(name, strlen(name)));
  }
  fprintf(o, "};\n");
  fprintf(o, "\nint main(int argc, char **argv) {\n");
  fprintf(o, "  shd_init(&argc, &argv, %d, shd_mesh_names, shd_mesh_sizes);\n", mod->mesh.naxes);
  fprintf(o, "  shd_trace_files(%d, shd_src_files);\n", e->nfiles);
  for (int i = 0; i < nf; i++)
    if (setup[i])
      fprintf(o, "  %s\n", setup[i]);
  fprintf(o, "  shd_check_memory(%lldull);\n", (long long)e->main_peak);
  fprintf(o, "  shd_span_begin_at(SHD_SPAN_CALL, \"main\", %d, %d);\n  %s();\n  shd_span_end();\n", mfile,
          mainf->pos.line, emit_fname(mainf));
  fprintf(o, "  shd_finalize();\n  return 0;\n}\n");
  free(setup);
}

void emit_state_init(Emit *e, FILE *out, const Module *mod, const SourceFile *file) {
  memset(e, 0, sizeof *e);
  e->out = out;
  e->mod = mod;
  e->m = &mod->mesh;
  e->src = file;
  e->cap = mod->next_value + 1;
  e->last_use = calloc((size_t)e->cap, sizeof(int));
  e->owned = calloc((size_t)e->cap, sizeof(bool));
  e->fused = calloc((size_t)e->cap, sizeof(bool));
  e->uses = calloc((size_t)e->cap, sizeof(int));
  e->fuse_uses = calloc((size_t)e->cap, sizeof(int));
  e->fuse_site = calloc((size_t)e->cap, sizeof(int));
  e->fuse_depth = calloc((size_t)e->cap, sizeof(int));
  e->gmember = calloc((size_t)e->cap, sizeof(int));
  e->nobuf = calloc((size_t)e->cap, sizeof(bool));
  e->late = calloc((size_t)e->cap, sizeof(bool));
  for (int i = 0; i < mod->funcs.len; i++)
    ir_count_uses(((Func *)mod->funcs.data[i])->body, e->uses);
  const Func *mainf = emit_main_func(mod);
  e->main_body = mainf ? mainf->body : NULL;
}

void emit_state_fini(Emit *e) {
  free(e->last_use);
  free(e->owned);
  free(e->fused);
  free(e->uses);
  free(e->fuse_uses);
  free(e->fuse_site);
  free(e->fuse_depth);
  free(e->gmember);
  free(e->nobuf);
  free(e->late);
  free(e->files);
}

/* What every translation unit starts with: the includes, the ABI check,
 * the clones' attribute and the families' preambles. */
void emit_file_header(Emit *e, const SourceFile *file) {
  FILE *o = e->out;
  fprintf(o, "/* Generated by shdc from %s: do not edit. */\n", file ? comment_text(file->name, strlen(file->name)) : "?");
  fprintf(o, "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n#include \"shdrt.h\"\n\n");
  fprintf(o, "#if !defined(SHD_ABI_VERSION) || SHD_ABI_VERSION != %d\n#error \"this C was generated for runtime ABI %d, "
             "but the shdrt.h found is another version: use the shdrt.h installed with this shdc\"\n#endif\n\n",
          drv_abi_version(), drv_abi_version());
  fprintf(o, "#if defined(__x86_64__) && defined(__GNUC__) && !defined(SHD_NO_CLONES)\n"
             "#define SHD_CLONES __attribute__((target_clones(\"default\", \"avx2\", \"avx512f\")))\n"
             "#define SHD_SPLIT_CLONES 1\n"
             "#else\n#define SHD_CLONES\n#endif\n\n");
  for (const OpFamily *const *f = op_families(); *f; f++)
    if ((*f)->preamble)
      (*f)->preamble(e);
  fprintf(o, "\n");
}

void emit_mesh_table(FILE *o, const Module *mod) {
  fprintf(o, "static const char *const shd_mesh_names[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s\"%s\"", a ? ", " : "", mod->mesh.names[a]);
  fprintf(o, "};\nstatic const int shd_mesh_sizes[] = {");
  for (int a = 0; a < mod->mesh.naxes; a++)
    fprintf(o, "%s%d", a ? ", " : "", mod->mesh.sizes[a]);
  fprintf(o, "};\n\n");
}

const Func *emit_main_func(const Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++)
    if (((Func *)mod->funcs.data[i])->is_main)
      return mod->funcs.data[i];
  return NULL;
}

void emit_module(FILE *out, const Module *mod, const SourceFile *file, int64_t main_peak) {
  Emit e;
  emit_state_init(&e, out, mod, file);
  e.main_peak = main_peak;
  FILE *o = out;
  emit_file_header(&e, file);
  emit_mesh_table(o, mod);
  const Func *mainf = emit_main_func(mod);
  /* Only what main reaches (everything when there is no main). */
  bool *live = emit_reachable(mod, mainf);
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
  if (mainf)
    emit_main_fn(&e, o, mod, mainf, live);
  free(live);
  emit_state_fini(&e);
}

/* ---- the plan, for explain ------------------------------------------------------------------------ */

/* explain simulates the generated code's buffers: it needs the same
 * fusion and loop groups, computed here by the same functions. */
struct EmitPlanner {
  Emit e;
  int *own_last_use;
};

EmitPlanner *emit_planner_new(const Module *mod) {
  EmitPlanner *p = calloc(1, sizeof *p);
  if (!p)
    diag_ice("out of memory");
  emit_state_init(&p->e, NULL, mod, NULL);
  p->own_last_use = p->e.last_use;
  return p;
}

int *emit_plan_block(EmitPlanner *p, const IrBlock *b, int *last_use, bool *after) {
  Emit *e = &p->e;
  e->last_use = last_use;
  emit_plan_fusion(e, b);
  Group *gs;
  int ng;
  emit_plan_groups(e, b, &gs, &ng);
  int *deferred = emit_deferred_pushes(b, gs, ng);
  int *at = malloc(sizeof(int) * (size_t)(b->insts.len + 1));
  if (!at)
    diag_ice("out of memory");
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    int g = in->nresults ? e->gmember[in->results[0]->id] : deferred[i];
    at[i] = g ? gs[g - 1].last : i;
    after[i] = deferred[i] != 0;
  }
  free(deferred);
  emit_free_groups(gs, ng);
  e->last_use = p->own_last_use;
  return at;
}

bool emit_planned_nobuf(const EmitPlanner *p, const Value *v) { return p->e.fused[v->id] || p->e.nobuf[v->id]; }
bool emit_planned_member(const EmitPlanner *p, const Value *v) { return p->e.gmember[v->id] != 0; }
