/* emit_c.c: the C of values and instructions, the builders every part of
 * the emitter and every family's OpDef.emit uses.
 *
 * Input: the emitter's state (Emit: the module, its plan, the instruction
 * being emitted). Output: pieces of C: names, literals, declarations and
 * allocations, references handed over, elementwise loop nests and the
 * operands' expressions inside them. Every local shape is a compile-time
 * constant, so loops have literal bounds.
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
 * ownership, elementwise loops (a fused chain computed inside its
 * consumer's, a loop group's member as its local or scalar); emit_group.c
 * a loop group's nest; emit_program.c blocks, control flow, calls,
 * functions and the file. What is fused and grouped, and where each value
 * dies, is the plan's (sched.c, fuse.c), made before any C is written: the
 * emitter follows it and decides none of it. Each operation's own C comes
 * from its family (OpDef.emit, or OpDef.expr for the elementwise ones).
 *
 * Invariant: this file calls no other part of the emitter; they call it
 * (tests/tools/test_layering.py).
 *
 * The C is deterministic and readable: DSL names survive in C names and
 * every statement has its source line above it.
 */
#include "emit_internal.h"

/* struct Emit: emit_internal.h */

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
bool emit_unit_holds(Emit *e, int i) { return !e->unit || e->unit[i]; }
FILE *emit_out(Emit *e) { return e->out; }

#define vname emit_vname
#define ctype emit_ctype
#define is_array emit_is_array

/* ---- names and types ------------------------------------------------------------- */

/* N is the value's number in its function (emit_number_values), not its
 * id in the module: a function's C stays the same when another changes. */
const char *emit_vname(const Value *v) {
  if (v->name)
    return arena_printf("%s_%d", v->name, v->cnum);
  return arena_printf("v%d", v->cnum);
}

static void number_block(const IrBlock *b, int *n) {
  for (int i = 0; i < b->nargs; i++)
    b->args[i]->cnum = (*n)++;
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    for (int k = 0; k < in->nresults; k++)
      in->results[k]->cnum = (*n)++;
    for (int r = 0; r < in->nregions; r++)
      number_block(in->regions[r], n);
  }
}

void emit_number_values(Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++) {
    int n = 0;
    number_block(((Func *)mod->funcs.data[i])->body, &n);
  }
  mod->numbered = true;
}

const char *emit_fname(const Func *f) { return arena_printf("shd_fn_%s", f->name); }

const char *emit_dtconst(DType dt) {
  static const char *n[] = {"SHD_F32", "SHD_F64", "SHD_I32", "SHD_BOOL", "SHD_BF16"};
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
  if (dt == DT_BF16)
    return arena_printf("(uint16_t)0x%04x", ty_bf16_bits(v));
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

const char *emit_values_lit(Value *const *v, int n) {
  Str b = {0};
  str_printf(&b, "(const int64_t[]){");
  for (int i = 0; i < n; i++)
    str_printf(&b, "%s%s", i ? ", " : "", emit_vname(v[i]));
  str_putc(&b, '}');
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
    e->files = mem_resize(e->files, e->nfiles, k + 1, sizeof *e->files);
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

/* A member's value inside the loops of the group being emitted: a local of
 * the pass (full), a scalar of the row (row values, row sums); a column
 * sum, complete only after the nest, is read from its buffer. */
const char *emit_group_operand(Emit *e, const Value *op) {
  const Group *g = e->cur_group;
  if (!g || sched_group_of(e->plan, e->bp, op) != (int)(g - e->bp->groups) + 1)
    return NULL;
  MemberKind k = (MemberKind)e->plan->kind[op->id];
  if (k == MEMBER_COL_SUM)
    return NULL;
  return arena_printf("%s_%s", vname(op), k == MEMBER_FULL ? "l" : "s");
}

static const char *operand_stored(Emit *e, const Value *op, const Type *res) {
  const char *g = emit_group_operand(e, op);
  if (g)
    return g;
  const char *ix = index_expr(e, op, res);
  if (!ix)
    return vname(op);
  return arena_printf("%s[%s]", vname(op), ix);
}

/* An operand as the elementwise expressions compute with it: a bf16 one
 * widened to f32 (a fused bf16 result rounded to bf16 first, so that each
 * operation rounds once, language.md §10.1). */
const char *emit_operand_at(Emit *e, const Value *op, const Type *res) {
  bool bf = op->type.dtype == DT_BF16;
  if (e->fused[op->id] && !emit_group_operand(e, op))
    return arena_printf(bf ? "shd_bfr(%s)" : "(%s)", emit_elementwise_expr(e, op->def));
  const char *s = operand_stored(e, op, res);
  return bf ? arena_printf("shd_bf2f(%s)", s) : s;
}

/* A scalar value as a double (a bf16 one widened from its bits). */
const char *emit_scalar_double(const Value *v) {
  return arena_printf(v->type.dtype == DT_BF16 ? "(double)shd_bf2f(%s)" : "(double)%s", vname(v));
}

/* An elementwise expression (computed in ty_compute_dtype) as the value
 * stored for type t. */
const char *emit_stored(const Type *t, const char *x) {
  return t->dtype == DT_BF16 ? arena_printf("shd_f2bf(%s)", x) : x;
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

/* ---- views ------------------------------------------------------------------------------------- */

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

/* ---- ownership ---------------------------------------------------------------------------------- */

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
  if (ir_is_carry(v, in->parent))
    return e->last_use[v->id] == inst_index(e, in);
  return emit_is_last_use(e, v, in);
}

bool emit_is_last_use(Emit *e, const Value *v, const Inst *in) {
  if (!v->def || v->def->parent != in->parent || !e->owned[v->id])
    return false;
  return e->last_use[v->id] == inst_index(e, in);
}

/* ---- the emitter's state ------------------------------------------------------------------------ */

void emit_state_init(Emit *e, FILE *out, const Module *mod, const SourceFile *file) {
  memset(e, 0, sizeof *e);
  e->out = out;
  e->mod = mod;
  e->m = &mod->mesh;
  e->src = file;
  e->plan = sched_plan(mod);
  e->last_use = e->plan->last_use;
  e->fused = e->plan->fused;
  e->uses = e->plan->uses;
  e->nobuf = e->plan->nobuf;
  e->owned = mem_calloc((size_t)mod->next_value + 1, sizeof(bool));
  const Func *mainf = emit_main_func(mod);
  e->main_body = mainf ? mainf->body : NULL;
}

void emit_state_fini(Emit *e) {
  sched_free(e->plan);
  free(e->owned);
  free(e->files);
}

const Func *emit_main_func(const Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++)
    if (((Func *)mod->funcs.data[i])->is_main)
      return mod->funcs.data[i];
  return NULL;
}
