/* show.c: `shdc show FILE [FUNC.NAME...]`, pictures of sharded arrays.
 *
 * For each array binding (all of them, or the ones named), a terminal
 * picture in the spirit of jax.debug.visualize_array_sharding: the global
 * array cut into the blocks its type implies, each block labelled with the
 * devices (ranks) that hold it, with the local shape every device holds,
 * which mesh axes shard which dim, and what U (pending sum), R (reduced)
 * and V (varying, inside manual bodies) mean for it.
 *
 * Layout: the last dim runs across, the one before it down; a 1-D array is
 * one row of blocks; for more dims one grid is drawn per block of the
 * leading sharded dims. Devices are ranks, laid out row-major over the mesh
 * axes as the runtime does (part_block_offset computes each rank's block).
 * Long dims show their first and last blocks with an ellipsis between, so
 * a mesh of thousands of devices still prints a screenful.
 *
 * Input: the typed program (after tc_program). Output: text on stdout.
 */
#include "shdc.h"

#define SHOW_HEAD 6   /* blocks shown at each end of a long dim */

/* Columns a UTF-8 string takes (Σ is two bytes, one column). */
static int cols_of(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

/* Devices along some axes / in the mesh (saturating past 2^40: --mesh allows
 * sizes whose product overflows even 64 bits). */
static int64_t axes_product(const Mesh *m, AxisSet axes) {
  int64_t n = 1;
  for (int a = 0; a < m->naxes; a++)
    if (axes & (1u << a))
      n = n > ((int64_t)1 << 40) ? n : n * m->sizes[a];
  return n;
}

static int64_t world(const Mesh *m) { return axes_product(m, ~0u); }

/* Grids list each block's ranks, computed from every rank's coordinates:
 * beyond this many devices the picture is the words only. */
#define SHOW_MAX_DEVICES (1 << 22)

/* "3", "0 2 4 6", "0,8..4088 (512)": the ranks of one block. */
static const char *rank_list(const int *r, int n) {
  if (n <= 4) {
    Str s = {0};
    for (int i = 0; i < n; i++)
      str_printf(&s, "%s%d", i ? " " : "", r[i]);
    const char *out = arena_strdup(str_cstr(&s));
    free(s.buf);
    return out;
  }
  int step = r[1] - r[0];
  bool even = true;
  for (int i = 2; i < n; i++)
    even &= r[i] - r[i - 1] == step;
  if (even)
    return step == 1 ? arena_printf("%d-%d", r[0], r[n - 1]) : arena_printf("%d,%d..%d (%d)", r[0], r[1], r[n - 1], n);
  return arena_printf("%d %d %d .. (%d)", r[0], r[1], r[2], n);
}

/* Which blocks of dims 0..rank-1 to draw: all, or the first and last
 * SHOW_HEAD with -1 for the ellipsis. */
static int visible_blocks(int64_t parts, int *out) {
  int n = 0;
  if (parts <= 2 * SHOW_HEAD + 1) {
    for (int64_t i = 0; i < parts; i++)
      out[n++] = (int)i;
    return n;
  }
  for (int i = 0; i < SHOW_HEAD; i++)
    out[n++] = i;
  out[n++] = -1;
  for (int64_t i = parts - SHOW_HEAD; i < parts; i++)
    out[n++] = (int)i;
  return n;
}

typedef struct {
  const Mesh *m;
  const Type *t;
  int64_t local[MAX_RANK];
  int64_t parts[MAX_RANK];
  int nranks;
  int64_t *block_of;   /* [rank * rank_dims + d]: the rank's block index along d */
} Layout;

static void layout_init(Layout *L, const Mesh *m, const Type *t) {
  L->m = m;
  L->t = t;
  L->nranks = (int)world(m);
  ty_local_shape(m, t, L->local);
  for (int d = 0; d < t->rank; d++)
    L->parts[d] = ty_spec_parts(m, t->spec[d]);
  L->block_of = arena_alloc(sizeof(int64_t) * (size_t)(L->nranks * (t->rank ? t->rank : 1)));
  for (int r = 0; r < L->nranks; r++) {
    int64_t off[MAX_RANK];
    part_block_offset(m, t, r, off);
    for (int d = 0; d < t->rank; d++)
      L->block_of[r * t->rank + d] = L->local[d] ? off[d] / L->local[d] : 0;
  }
}

/* The ranks holding block want[d] along every dim d where want[d] >= 0. */
static const char *holders(const Layout *L, const int64_t *want) {
  int *r = arena_alloc(sizeof(int) * (size_t)L->nranks), n = 0;
  for (int k = 0; k < L->nranks; k++) {
    bool in = true;
    for (int d = 0; d < L->t->rank; d++)
      in &= want[d] < 0 || L->block_of[k * L->t->rank + d] == want[d];
    if (in)
      r[n++] = k;
  }
  return rank_list(r, n);
}

static const char *range(const Layout *L, int d, int block) {
  if (block < 0)
    return "...";
  return arena_printf("%lld:%lld", (long long)(block * L->local[d]), (long long)((block + 1) * L->local[d]));
}

static void rule(FILE *o, int lead, const int *width, int ncol, const char *l, const char *mid, const char *r) {
  fprintf(o, "%*s%s", lead, "", l);
  for (int c = 0; c < ncol; c++) {
    for (int i = 0; i < width[c] + 2; i++)
      fputs("─", o);
    fputs(c + 1 < ncol ? mid : r, o);
  }
  fputc('\n', o);
}

/* One grid: dim `rd` down (-1: one row), dim `cd` across, the leading
 * dims fixed at lead[]. */
static void grid(FILE *o, const Layout *L, int rd, int cd, const int64_t *lead) {
  int rows[2 * SHOW_HEAD + 1], cols[2 * SHOW_HEAD + 1];
  int nr = rd >= 0 ? visible_blocks(L->parts[rd], rows) : 1, nc = visible_blocks(L->parts[cd], cols);
  if (rd < 0)
    rows[0] = 0;
  const char *cell[2 * SHOW_HEAD + 1][2 * SHOW_HEAD + 1];
  int width[2 * SHOW_HEAD + 1], lead_w = 0;
  for (int c = 0; c < nc; c++)
    width[c] = (int)strlen(range(L, cd, cols[c]));
  for (int i = 0; i < nr; i++) {
    if (rd >= 0)
      lead_w = (int)strlen(range(L, rd, rows[i])) > lead_w ? (int)strlen(range(L, rd, rows[i])) : lead_w;
    for (int c = 0; c < nc; c++) {
      int64_t want[MAX_RANK];
      memcpy(want, lead, sizeof want);
      want[cd] = cols[c];
      if (rd >= 0)
        want[rd] = rows[i];
      cell[i][c] = rows[i] < 0 || cols[c] < 0 ? "..." : holders(L, want);
      if (L->t->U && strcmp(cell[i][c], "..."))
        cell[i][c] = arena_printf("\u03a3 %s", cell[i][c]);
      if (cols_of(cell[i][c]) > width[c])
        width[c] = cols_of(cell[i][c]);
    }
  }
  int indent = 4 + lead_w + 1;
  Str head = {0};
  str_printf(&head, "%*s", indent, "");
  for (int c = 0; c < nc; c++)
    str_printf(&head, "  %-*s", width[c] + 1, range(L, cd, cols[c]));
  while (head.len && head.buf[head.len - 1] == ' ')   /* no trailing blanks */
    head.len--;
  fprintf(o, "%.*s\n", (int)head.len, head.buf);
  free(head.buf);
  rule(o, indent, width, nc, "┌", "┬", "┐");
  for (int i = 0; i < nr; i++) {
    fprintf(o, "    %*s ", lead_w, rd >= 0 ? range(L, rd, rows[i]) : "");
    for (int c = 0; c < nc; c++)
      fprintf(o, "│ %s%*s ", cell[i][c], width[c] - cols_of(cell[i][c]), "");
    fputs("│\n", o);
    if (i + 1 < nr)
      rule(o, indent, width, nc, "├", "┼", "┤");
  }
  rule(o, indent, width, nc, "└", "┴", "┘");
}

static const char *bytes_str(int64_t b) {
  if (b >= (int64_t)1 << 30)
    return arena_printf("%.1f GiB", (double)b / (1 << 30));
  if (b >= 1 << 20)
    return arena_printf("%.1f MiB", (double)b / (1 << 20));
  if (b >= 1 << 10)
    return arena_printf("%.1f KiB", (double)b / (1 << 10));
  return arena_printf("%lld bytes", (long long)b);
}

/* "X", or "(X,Y)" major first. */
static const char *spec_axes(const Mesh *m, DimSpec s) {
  Str b = {0};
  for (int i = 0; i < s.n; i++)
    str_printf(&b, "%s%s", i ? "," : "", m->names[s.axes[i]]);
  const char *out = s.n > 1 ? arena_printf("(%s)", str_cstr(&b)) : arena_strdup(str_cstr(&b));
  free(b.buf);
  return out;
}

/* The words under the type: which axes shard which dim, who holds copies,
 * what U/R/V mean, the local shape. */
static void describe(FILE *o, const Mesh *m, const Type *t, bool manual) {
  for (int d = 0; d < t->rank; d++)
    if (t->spec[d].n)
      fprintf(o, "  dim %d (%lld) split over %s into %lld blocks of %lld\n", d, (long long)t->shape[d],
              spec_axes(m, t->spec[d]), (long long)ty_spec_parts(m, t->spec[d]), (long long)ty_local_dim(m, t, d));
  AxisSet all = 0, rep;
  for (int a = 0; a < m->naxes; a++)
    all |= 1u << a;
  rep = all & ~(ty_dim_axes(t) | t->U | t->V);
  int64_t copies = axes_product(m, rep);
  if (rep)
    fprintf(o, "  replicated over %s: %lld copies of each block\n", ty_axes_str(m, rep), (long long)copies);
  if (t->U) {
    int64_t parts = axes_product(m, t->U);
    fprintf(o, "  U (unreduced) over %s: each device holds a partial sum; a block (marked \u03a3) is the sum of "
               "what %lld devices along %s hold\n",
            ty_axes_str(m, t->U), (long long)parts, ty_axes_str(m, t->U));
  }
  if (t->R)
    fprintf(o, "  R (reduced) over %s: replicated there; its gradient is a pending sum over %s\n",
            ty_axes_str(m, t->R), ty_axes_str(m, t->R));
  if (t->V)
    fprintf(o, "  V (varying) over %s: inside manual code each device holds its own value\n", ty_axes_str(m, t->V));
  if (manual)
    return;
  int64_t n = ty_local_count(m, t) * (int64_t)ty_dtype_size(t->dtype);
  fprintf(o, "  every device holds %s (%s)\n", ty_local_str(m, t), bytes_str(n));
}

static void show_one(FILE *o, const Mesh *m, const char *fname, const Symbol *s, bool manual) {
  const Type *t = &s->type;
  fprintf(o, "%s.%s: %s\n", fname, s->name, ty_str(m, t));
  describe(o, m, t, manual);
  if (manual) {
    fprintf(o, "  (per-device view of a manual function: the shape is each device's own%s)\n\n",
            t->V ? "; V marks the axes it varies over" : "");
    return;
  }
  if (t->rank == 0) {
    fprintf(o, "  a scalar on all %lld devices%s\n\n", (long long)world(m), t->U ? " (partial sums)" : "");
    return;
  }
  if (world(m) > SHOW_MAX_DEVICES) {
    fprintf(o, "  (%lld devices: too many to draw each block's holders)\n\n", (long long)world(m));
    return;
  }
  Layout L;
  layout_init(&L, m, t);
  int cd = t->rank - 1, rd = t->rank - 2;
  /* Leading dims (before rd): one grid per block combination of the
   * sharded ones, at most a few. */
  int64_t lead[MAX_RANK];
  for (int d = 0; d < MAX_RANK; d++)
    lead[d] = -1;
  int64_t grids = 1;
  for (int d = 0; d < rd; d++)
    grids *= L.parts[d];
  int64_t shown = grids > 4 ? 4 : grids;
  for (int64_t g = 0; g < shown; g++) {
    int64_t rest = g;
    Str cap = {0};
    for (int d = rd - 1; d >= 0; d--) {
      lead[d] = L.parts[d] > 1 ? rest % L.parts[d] : -1;
      rest = L.parts[d] > 1 ? rest / L.parts[d] : rest;
    }
    for (int d = 0; d < rd; d++)
      if (lead[d] >= 0)
        str_printf(&cap, "%sdim %d %s", cap.len ? ", " : "", d, range(&L, d, (int)lead[d]));
    if (cap.len)
      fprintf(o, "  [%s]\n", str_cstr(&cap));
    free(cap.buf);
    grid(o, &L, rd, cd, lead);
  }
  if (grids > shown)
    fprintf(o, "  ... %lld more grids of the leading dims\n", (long long)(grids - shown));
  fputc('\n', o);
}

/* The mesh and how ranks map to coordinates. */
static void show_mesh(FILE *o, const Mesh *m) {
  int64_t n = world(m);
  fprintf(o, "mesh {");
  for (int a = 0; a < m->naxes; a++)
    fprintf(o, "%s%s: %d", a ? ", " : "", m->names[a], m->sizes[a]);
  fprintf(o, "}: %lld devices, numbered row-major over (", (long long)n);
  for (int a = 0; a < m->naxes; a++)
    fprintf(o, "%s%s", a ? ", " : "", m->names[a]);
  fprintf(o, ")");
  if (n <= 16 && m->naxes > 1) {
    fprintf(o, ":");
    for (int r = 0; r < n; r++) {
      int rest = r, c[MAX_AXES];
      for (int a = m->naxes - 1; a >= 0; a--) {
        c[a] = rest % m->sizes[a];
        rest /= m->sizes[a];
      }
      fprintf(o, " %d=(", r);
      for (int a = 0; a < m->naxes; a++)
        fprintf(o, "%s%d", a ? "," : "", c[a]);
      fprintf(o, ")");
    }
  }
  fprintf(o, "\n\n");
}

int show_program(FILE *out, const Program *p, const Mesh *m, const char *const *names, int nnames) {
  bool *found = arena_alloc(sizeof(bool) * (size_t)(nnames + 1));
  show_mesh(out, m);
  for (int i = 0; i < p->funcs.len; i++) {
    const FuncDecl *f = p->funcs.data[i];
    const char *fname = arena_printf("%.*s", f->name.len, f->name.start);
    for (int j = 0; j < f->bindings.len; j++) {
      const Symbol *s = f->bindings.data[j];
      const char *full = arena_printf("%s.%s", fname, s->name);
      bool want = nnames == 0;
      for (int k = 0; k < nnames; k++)
        if (!strcmp(names[k], full) || !strcmp(names[k], fname))
          want = found[k] = true;
      if (want && s->type.kind == TY_ARRAY)
        show_one(out, m, fname, s, f->manual);
      /* A struct binding: each leaf, named FUNC.NAME.PATH as `types` prints it. */
      for (int k = 0; s->type.kind == TY_STRUCT && k < s->type.nelems; k++) {
        Symbol leaf = *s;
        leaf.name = arena_printf("%s.%s", s->name, ty_leaf_path(s->type.sdef, k));
        leaf.type = s->type.elems[k];
        bool w = want;
        for (int q = 0; q < nnames; q++)
          if (!strcmp(names[q], arena_printf("%s.%s", fname, leaf.name)))
            w = found[q] = true;
        if (w)
          show_one(out, m, fname, &leaf, f->manual);
      }
    }
  }
  int rc = 0;
  for (int k = 0; k < nnames; k++)
    if (!found[k]) {
      fprintf(stderr, "shdc: error: show: %s names no binding of %s (FUNCTION.NAME or FUNCTION, as `shdc types` "
                      "prints them)\n",
              names[k], p->file->name);
      rc = 2;
    }
  return rc;
}
