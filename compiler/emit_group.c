/* emit_group.c: the C of a planned loop group.
 *
 * Input: a Group of the block being emitted (fuse.c planned it: members
 * and their kinds, row dims, stages, which members need no buffer). Output:
 * its loop nest. Without row dims (k = -1) one loop over the domain
 * computes every member and writes those with a buffer. With them, a loop
 * over the rows (the leading k dims) holds, for each stage of row sums,
 * one pass over the row's columns that accumulates the stage's sums (their
 * operands computed in the pass as locals), then the row members of the
 * stage as scalars; a last pass writes the full members other code reads
 * and adds each column sum's element of the row into its buffer (zeroed
 * before the nest). An f32 column sum adds COL_BLOCK rows at a time in
 * f32, each block then into a double array (on the stack when its columns
 * fit in COL_STACK bytes, else on the heap), so that a sum over many rows is off by about
 * COL_BLOCK roundings rather than one per row (0.3% over 262144 rows of
 * 1000, issue 28), and the inner loop stays f32. The members' operands are defined before the group's
 * last member, where the group is emitted (emit_program.c). This file decides
 * nothing about what is grouped: it writes what the plan says.
 */
#include "emit_internal.h"

#define vname emit_vname
#define ctype emit_ctype

static bool is_member(Emit *e, const Value *v, int gi) { return sched_group_of(e->plan, e->bp, v) == gi + 1; }

enum { COL_BLOCK = 64, COL_STACK = 32768 };

/* The columns of a row (dims k.. of the domain). */
static int64_t cols_of(const Group *g) {
  int64_t n = 1;
  for (int d = g->k; d < g->rank; d++)
    n *= g->dom[d];
  return n;
}

/* Whether member m is an f32 column sum kept in blocks (above). */
static bool col_blocked(const Group *g, int m) {
  return g->kind[m] == MEMBER_COL_SUM && g->mem[m]->results[0]->type.dtype == DT_F32;
}

/* Whether the double array of a blocked column sum is on the heap: wider
 * than COL_STACK bytes (4096 columns), it is shd_scratch_zalloc'd before
 * the nest and freed after it (outside shd_alloc, so that, as the stack array, it is no
 * array of the program's: explain's peak and the runtime's measured one
 * leave both out). Before, such sums were added in f32 row by row. */
static bool col_heap(const Group *g) { return cols_of(g) * (int64_t)sizeof(double) > COL_STACK; }

/* Each blocked column sum's f32 block added into its double array: every
 * COL_BLOCK rows (in the row loop), or at the end into the result. */
static void flush_cols(Emit *e, const Group *g, bool last) {
  bool any = false;
  for (int m = 0; m < g->n; m++)
    any |= col_blocked(g, m);
  if (!any)
    return;
  if (!last) {
    emit_line(e, "if ((ir & %d) == %d) {", COL_BLOCK - 1, COL_BLOCK - 1);
    e->indent += 2;
  }
  for (int m = 0; m < g->n; m++) {
    if (!col_blocked(g, m))
      continue;
    const char *v = vname(g->mem[m]->results[0]);
    emit_line(e, "for (int64_t ic = 0; ic < %lld; ic++) {", (long long)cols_of(g));
    if (last) {
      emit_line(e, "  %s[ic] = (float)(%s_c64[ic] + (double)%s[ic]);", v, v, v);
    } else {
      emit_line(e, "  %s_c64[ic] += (double)%s[ic];", v, v);
      emit_line(e, "  %s[ic] = 0;", v);
    }
    emit_line(e, "}");
  }
  if (!last) {
    e->indent -= 2;
    emit_line(e, "}");
  }
}

/* A member made in the row loop (a scalar of the row), not in a pass. */
static bool is_row_kind(MemberKind k) { return k == MEMBER_ROW || k == MEMBER_ROW_VIEW || k == MEMBER_ROW_SUM; }

/* The full members needed in a pass: those the given values read, through
 * members, marked in need[] (by member index). */
static void need_full(Emit *e, const Group *g, int gi, const Value *v, bool *need) {
  if (!is_member(e, v, gi)) {
    if (e->fused[v->id] && v->def)
      for (int k = 0; k < v->def->nargs; k++)
        need_full(e, g, gi, v->def->args[k], need);
    return;
  }
  for (int m = 0; m < g->n; m++)
    if (g->mem[m]->results[0] == v) {
      if (need[m] || is_row_kind(g->kind[m]))
        return;
      need[m] = true;
      for (int k = 0; k < g->mem[m]->nargs; k++)
        need_full(e, g, gi, g->mem[m]->args[k], need);
      return;
    }
}

/* (a loop, not memset: gcc cannot bound n here) */
static void clear_need(const Group *g, bool *need) {
  for (int m = 0; m < g->n; m++)
    need[m] = false;
}

static void emit_locals(Emit *e, const Group *g, const bool *need) {
  for (int m = 0; m < g->n; m++)
    if (need[m]) {
      const Value *v = g->mem[m]->results[0];
      emit_line(e, "const %s %s_l = %s;", ctype(&v->type), vname(v),
                emit_stored(&v->type, emit_elementwise_expr(e, g->mem[m])));
    }
}

/* The row-major index of the domain's first n dims from the loop
 * counters i0..i{n-1}: "i1 + 8 * i0". */
static const char *flat_index(const Group *g, int n) {
  Str flat = {0};
  int64_t stride = 1;
  for (int d = n - 1; d >= 0; d--) {
    str_printf(&flat, "%s%si%d", flat.len ? " + " : "", stride == 1 ? "" : arena_printf("%lld * ", (long long)stride), d);
    stride *= g->dom[d];
  }
  const char *r = arena_strdup(str_cstr(&flat));
  free(flat.buf);
  return r;
}

/* The row-major index of the columns (dims k.. of the domain) from the
 * loop counters: "i2", or "i3 + 8 * i2". */
static const char *col_index(const Group *g) {
  Str flat = {0};
  int64_t stride = 1;
  for (int d = g->rank - 1; d >= g->k; d--) {
    str_printf(&flat, "%s%si%d", flat.len ? " + " : "", stride == 1 ? "" : arena_printf("%lld * ", (long long)stride), d);
    stride *= g->dom[d];
  }
  const char *r = arena_strdup(str_cstr(&flat));
  free(flat.buf);
  return r;
}

/* Opens the loops over dims from..rank-1 of the domain; `simd` puts the
 * vectorisation pragma (with its reductions) on the innermost. */
static void open_cols(Emit *e, const Group *g, int from, const char *simd) {
  for (int d = from; d < g->rank; d++) {
    if (d == g->rank - 1 && simd)
      emit_line(e, "#pragma omp simd%s", simd);
    emit_line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)g->dom[d], d);
    e->indent += 2;
  }
  emit_line(e, "const int64_t i = %s;", flat_index(g, g->rank));
  emit_line(e, "(void)i;");   /* a pass over broadcast operands only reads by i0.. */
}

/* Without row dims: one loop over the domain computes every member and
 * writes those with a buffer. */
static void flat_nest(Emit *e, const Group *g, bool *need) {
  bool dims = false;
  for (int m = 0; m < g->n; m++)
    dims |= emit_needs_dims(e, g->mem[m]);
  Type dom = g->mem[0]->results[0]->type;
  int n = emit_open_loops(e, &dom, dims);
  for (int m = 0; m < g->n; m++)
    need[m] = true;
  emit_locals(e, g, need);
  for (int m = 0; m < g->n; m++) {
    const Value *v = g->mem[m]->results[0];
    if (!e->nobuf[v->id])
      emit_line(e, "%s[i] = %s_l;", vname(v), vname(v));
  }
  emit_close_loops(e, n);
}

/* The row sums of stage st (> 0), their operands computed in one pass. */
static void sum_pass(Emit *e, const Group *g, int gi, int st, bool *need) {
  Str red = {0};
  clear_need(g, need);
  for (int m = 0; m < g->n; m++)
    if (g->stage[m] == st && g->kind[m] == MEMBER_ROW_SUM) {
      const Value *v = g->mem[m]->results[0];
      emit_line(e, "double %s_a = 0;", vname(v));
      str_printf(&red, "%s%s_a", red.len ? ", " : "", vname(v));
      need_full(e, g, gi, g->mem[m]->args[0], need);
    }
  open_cols(e, g, g->k, arena_printf(" reduction(+:%s)", str_cstr(&red)));
  free(red.buf);
  e->flat = "i";
  emit_locals(e, g, need);
  for (int m = 0; m < g->n; m++)
    if (g->stage[m] == st && g->kind[m] == MEMBER_ROW_SUM) {
      const Value *x = g->mem[m]->args[0];
      emit_line(e, "%s_a += (double)%s;", vname(g->mem[m]->results[0]), emit_operand_at(e, x, &x->type));
    }
  emit_close_loops(e, g->rank - g->k);
}

/* The row members of stage st, as scalars of the row. */
static void row_values(Emit *e, const Group *g, int st) {
  e->flat = "ir";
  for (int m = 0; m < g->n; m++) {
    const Inst *in = g->mem[m];
    const Value *v = in->results[0];
    if (g->stage[m] != st || !is_row_kind(g->kind[m]))
      continue;
    const char *x = g->kind[m] == MEMBER_ROW_SUM    ? arena_printf("(%s)%s_a", ctype(&v->type), vname(v))
                    : g->kind[m] == MEMBER_ROW_VIEW ? emit_group_operand(e, in->args[0])
                                                    : emit_stored(&v->type, emit_elementwise_expr(e, in));
    emit_line(e, "const %s %s_s = %s;", ctype(&v->type), vname(v), x);
    if (!e->nobuf[v->id])
      emit_line(e, "%s[ir] = %s_s;", vname(v), vname(v));
  }
}

/* The last pass over the row: the full values read outside the group, and
 * the column sums (each column's element of this row added in). */
static void last_pass(Emit *e, const Group *g, int gi, bool *need) {
  clear_need(g, need);
  bool any = false, cols = false;
  for (int m = 0; m < g->n; m++) {
    const Value *v = g->mem[m]->results[0];
    if (g->kind[m] == MEMBER_COL_SUM) {
      need_full(e, g, gi, g->mem[m]->args[0], need);
      any = cols = true;
    } else if (!is_row_kind(g->kind[m]) && !e->nobuf[v->id]) {
      need_full(e, g, gi, v, need);
      any = true;
    }
  }
  if (!any)
    return;
  open_cols(e, g, g->k, "");
  e->flat = "i";
  if (cols)
    emit_line(e, "const int64_t ic = %s;", col_index(g));
  emit_locals(e, g, need);
  for (int m = 0; m < g->n; m++) {
    const Value *v = g->mem[m]->results[0];
    if (g->kind[m] == MEMBER_COL_SUM) {
      const Value *x = g->mem[m]->args[0];
      emit_line(e, "%s[ic] += %s;", vname(v), emit_operand_at(e, x, &x->type));
    } else if (need[m] && !e->nobuf[v->id])
      emit_line(e, "%s[i] = %s_l;", vname(v), vname(v));
  }
  emit_close_loops(e, g->rank - g->k);
}

/* With row dims: the loop over the rows, in it each stage's pass and row
 * values, then the last pass. */
static void row_nest(Emit *e, const Group *g, int gi, bool *need) {
  for (int d = 0; d < g->k; d++) {
    emit_line(e, "for (int64_t i%d = 0; i%d < %lld; i%d++) {", d, d, (long long)g->dom[d], d);
    e->indent += 2;
  }
  emit_line(e, "const int64_t ir = %s;", flat_index(g, g->k));
  emit_line(e, "(void)ir;");
  for (int st = 0; st <= g->nstages; st++) {
    if (st > 0)
      sum_pass(e, g, gi, st, need);
    row_values(e, g, st);
  }
  last_pass(e, g, gi, need);
  flush_cols(e, g, false);
  emit_close_loops(e, g->k);
  flush_cols(e, g, true);
  for (int m = 0; m < g->n; m++)
    if (col_blocked(g, m) && col_heap(g))
      emit_line(e, "shd_scratch_free(%s_c64);", vname(g->mem[m]->results[0]));
}

void emit_group(Emit *e, const Group *g) {
  int gi = (int)(g - e->bp->groups);
  emit_line(e, "/* one loop nest: lines %d to %d */", g->mem[0]->pos.line, g->mem[g->n - 1]->pos.line);
  for (int m = 0; m < g->n; m++) {
    const Value *v = g->mem[m]->results[0];
    if (!e->nobuf[v->id])
      emit_def_array(e, v, g->kind[m] == MEMBER_COL_SUM);   /* a column sum starts at zero */
    if (col_blocked(g, m) && col_heap(g)) {
      emit_line(e, "double *%s_c64 = shd_scratch_zalloc(%lld * sizeof(double));", vname(v), (long long)cols_of(g));
    } else if (col_blocked(g, m)) {
      emit_line(e, "double %s_c64[%lld] = {0};", vname(v), (long long)cols_of(g));
    }
  }
  emit_line(e, "shd_span_begin_at(SHD_SPAN_ELEMENTWISE, \"elementwise\", %d, %d);", emit_file_index(e, g->mem[0]->pos),
            g->mem[0]->pos.line);
  e->cur_group = g;
  bool *need = mem_calloc((size_t)g->n + 1, sizeof(bool));
  if (g->k < 0)
    flat_nest(e, g, need);
  else
    row_nest(e, g, gi, need);
  free(need);
  e->cur_group = NULL;
  e->flat = NULL;
  emit_line(e, "shd_span_end();");
}
