/* types.c: the type model: dtype, global shape, and one state per mesh axis.
 *
 * A mesh axis of an array type is in exactly one state: it shards one dim
 * (spec, ordered major to minor within the dim), it is unreduced (U), reduced
 * (R), varying (V, manual axes only), or it is none of these (replicated, or
 * invariant in a manual body). All rules in rules.c are written against this
 * model. This file owns the one canonical printer (language.md §2, fixed),
 * equality, local shapes and the well-formedness check of rules 0.3.
 */
#include "shdc.h"

#include <math.h>

Type ty_array(DType dt, int rank, const int64_t *shape) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_ARRAY;
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++)
    t.shape[i] = shape[i];
  return t;
}

Type ty_scalar(DType dt) { return ty_array(dt, 0, NULL); }

Type ty_void(void) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_VOID;
  return t;
}

Type ty_error(void) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_ERROR;
  return t;
}

Type ty_tuple(int n, const Type *elems) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_TUPLE;
  t.nelems = n;
  t.elems = arena_alloc(sizeof(Type) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++)
    t.elems[i] = elems[i];
  return t;
}

/* A str: its dtype is set to i32 only so that no float test mistakes it
 * for a differentiable value; every user looks at kind first. */
Type ty_string(void) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_STRING;
  t.dtype = DT_I32;
  return t;
}

bool ty_is_float(DType dt) { return dt == DT_F32 || dt == DT_F64 || dt == DT_BF16; }

bool ty_spec_equal(DimSpec a, DimSpec b) {
  if (a.n != b.n)
    return false;
  for (int i = 0; i < a.n; i++)
    if (a.axes[i] != b.axes[i])
      return false;
  return true;
}

AxisSet ty_spec_axes(DimSpec s) {
  AxisSet m = 0;
  for (int i = 0; i < s.n; i++)
    m |= 1u << s.axes[i];
  return m;
}

AxisSet ty_dim_axes(const Type *t) {
  AxisSet m = 0;
  for (int d = 0; d < t->rank; d++)
    m |= ty_spec_axes(t->spec[d]);
  return m;
}

bool ty_same_sharding(const Type *a, const Type *b) {
  if (a->rank != b->rank || a->U != b->U || a->R != b->R || a->V != b->V)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (!ty_spec_equal(a->spec[d], b->spec[d]))
      return false;
  return true;
}

static bool same_stack(const Type *a, const Type *b) {
  if (a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d] || !ty_spec_equal(a->spec[d], b->spec[d]))
      return false;
  return true;
}

bool ty_equal(const Type *a, const Type *b) {
  if (a->kind != b->kind)
    return false;
  if (a->kind == TY_STRUCT && (a->sdef != b->sdef || !same_stack(a, b)))
    return false;
  if (a->kind == TY_TUPLE || a->kind == TY_STRUCT) {
    if (a->nelems != b->nelems)
      return false;
    for (int i = 0; i < a->nelems; i++)
      if (!ty_equal(&a->elems[i], &b->elems[i]))
        return false;
    return true;
  }
  if (a->kind != TY_ARRAY)
    return true;
  if (a->dtype != b->dtype || a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d])
      return false;
  return ty_same_sharding(a, b);
}

int64_t ty_spec_parts(const Mesh *m, DimSpec s) {
  int64_t p = 1;
  for (int i = 0; i < s.n; i++)
    p *= m->sizes[s.axes[i]];
  return p;
}

int64_t ty_local_dim(const Mesh *m, const Type *t, int d) {
  return t->shape[d] / ty_spec_parts(m, t->spec[d]);
}

void ty_local_shape(const Mesh *m, const Type *t, int64_t *out) {
  for (int d = 0; d < t->rank; d++)
    out[d] = ty_local_dim(m, t, d);
}

int64_t ty_local_count(const Mesh *m, const Type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= ty_local_dim(m, t, d);
  return n;
}

int64_t ty_global_count(const Type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= t->shape[d];
  return n;
}

size_t ty_dtype_size(DType dt) {
  switch (dt) {
  case DT_F32: return 4;
  case DT_F64: return 8;
  case DT_I32: return 4;
  case DT_BF16: return 2;
  default: return 1;
  }
}

const char *ty_dtype_name(DType dt) {
  static const char *names[] = {"f32", "f64", "i32", "bool", "bf16"};
  return names[dt];
}

const char *ty_dtype_c(DType dt) {
  static const char *names[] = {"float", "double", "int32_t", "bool", "uint16_t"};
  return names[dt];
}

DType ty_compute_dtype(DType dt) { return dt == DT_BF16 ? DT_F32 : dt; }

/* The runtime's shd_d2bf: to f32 rounding to odd (toward zero, the last
 * bit set when inexact), then to nearest even, so v rounds once. */
uint16_t ty_bf16_bits(double v) {
  float f = (float)v;
  if (f == f && fabs((double)f) > fabs(v))
    f = nextafterf(f, 0);
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (f != f)
    return (uint16_t)((u >> 16) | 0x40);
  if ((double)f != v)
    u |= 1;
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

double ty_bf16_round(double v) {
  uint32_t u = (uint32_t)ty_bf16_bits(v) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- printing ------------------------------------------------------------ */

const char *ty_axes_str(const Mesh *m, AxisSet s) {
  Str out = {0};
  for (int a = 0; a < m->naxes; a++)
    if (s & (1u << a))
      str_printf(&out, "%s%s", out.len ? "," : "", m->names[a]);
  const char *r = arena_strdup(str_cstr(&out));
  free(out.buf);
  return r;
}

const char *ty_axes_arg(const Mesh *m, AxisSet s) {
  if (!(s & (s - 1)))
    return ty_axes_str(m, s);
  Str out = {0};
  for (int a = 0; a < m->naxes; a++)
    if (s & (1u << a))
      str_printf(&out, "%s%s", out.len ? ", " : "(", m->names[a]);
  str_putc(&out, ')');
  const char *r = arena_strdup(str_cstr(&out));
  free(out.buf);
  return r;
}

const char *ty_spec_str(const Mesh *m, DimSpec s) {
  if (s.n == 0)
    return "";
  if (s.n == 1)
    return arena_printf("@%s", m->names[s.axes[0]]);
  Str out = {0};
  str_printf(&out, "@(");
  for (int i = 0; i < s.n; i++)
    str_printf(&out, "%s%s", i ? "," : "", m->names[s.axes[i]]);
  str_putc(&out, ')');
  const char *r = arena_strdup(str_cstr(&out));
  free(out.buf);
  return r;
}

static void print_annots(Str *out, const Mesh *m, const Type *t) {
  if (t->U)
    str_printf(out, "<U:%s>", ty_axes_str(m, t->U));
  if (t->R)
    str_printf(out, "<R:%s>", ty_axes_str(m, t->R));
  if (t->V)
    str_printf(out, "<V:%s>", ty_axes_str(m, t->V));
}

static void print_type(Str *out, const Mesh *m, const Type *t, bool local) {
  switch (t->kind) {
  case TY_VOID: str_printf(out, "()"); return;
  case TY_ERROR: str_printf(out, "<error>"); return;
  case TY_STRING: str_printf(out, "str"); return;
  case TY_FUNC: str_printf(out, "function"); return;
  case TY_AXIS: str_printf(out, "mesh axis"); return;
  case TY_TAPE:
    str_printf(out, "tape<");
    print_type(out, m, &t->elems[0], local);
    str_putc(out, '>');
    return;
  case TY_TUPLE:
    str_putc(out, '(');
    for (int i = 0; i < t->nelems; i++) {
      if (i)
        str_putc(out, ',');
      print_type(out, m, &t->elems[i], local);
    }
    str_putc(out, ')');
    return;
  case TY_STRUCT:
    str_printf(out, "%s", t->sdef->name);
    if (t->rank) {
      str_putc(out, '[');
      for (int d = 0; d < t->rank; d++)
        str_printf(out, "%s%lld%s", d ? "," : "", (long long)t->shape[d], ty_spec_str(m, t->spec[d]));
      str_putc(out, ']');
    }
    return;
  case TY_ARRAY:
    break;
  }
  str_printf(out, "%s", ty_dtype_name(t->dtype));
  if (t->rank > 0) {
    str_putc(out, '[');
    for (int d = 0; d < t->rank; d++) {
      if (d)
        str_putc(out, ',');
      if (local)
        str_printf(out, "%lld", (long long)ty_local_dim(m, t, d));
      else
        str_printf(out, "%lld%s", (long long)t->shape[d], ty_spec_str(m, t->spec[d]));
    }
    str_putc(out, ']');
  }
  print_annots(out, m, t);
}

const char *ty_str(const Mesh *m, const Type *t) {
  Str out = {0};
  print_type(&out, m, t, false);
  const char *r = arena_strdup(str_cstr(&out));
  free(out.buf);
  return r;
}

const char *ty_local_str(const Mesh *m, const Type *t) {
  Str out = {0};
  print_type(&out, m, t, true);
  const char *r = arena_strdup(str_cstr(&out));
  free(out.buf);
  return r;
}

/* ---- well-formedness (typing-rules 0.3) ---------------------------------- */

static const char *axis_name(const Mesh *m, int a) { return m->names[a]; }

/* Reports only when pos has a file: a NULL file asks quietly. */
__attribute__((format(printf, 3, 4))) static void wf_error(Pos pos, const char *code, const char *fmt, ...) {
  if (!pos.file)
    return;
  va_list ap;
  va_start(ap, fmt);
  diag_verror(pos, code, fmt, ap);
  va_end(ap);
}

int64_t ty_size_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t ty_size_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

int64_t ty_size_product(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n = ty_size_mul(n, shape[d]);
  return n;
}

const char *ty_size_str(int64_t n) {
  return n == INT64_MAX ? "more than 2^63" : arena_printf("%lld", (long long)n);
}

bool ty_check_size(const Type *t, Pos pos) {
  if (t->kind != TY_ARRAY)
    return true;
  int64_t n = (int64_t)ty_dtype_size(t->dtype);
  bool over = false;
  for (int d = 0; d < t->rank; d++)
    over |= __builtin_mul_overflow(n, t->shape[d], &n);
  if (!over && n <= TY_MAX_BYTES)
    return true;
  Str dims = {0};
  for (int d = 0; d < t->rank; d++)
    str_printf(&dims, "%s%s", d ? " x " : "",
               t->shape[d] == INT64_MAX ? "(more than 2^63)" : arena_printf("%lld", (long long)t->shape[d]));
  wf_error(pos, "E_SHAPE", "an array of %s %s elements has %s bytes; an array may have at most 2^48 bytes (256 TiB)",
           str_cstr(&dims), ty_dtype_name(t->dtype), over ? "more than 2^63" : arena_printf("%lld", (long long)n));
  free(dims.buf);
  return false;
}

bool ty_check_wellformed(const Mesh *m, const Type *t, Pos pos, AxisSet manual, const char *what) {
  return ty_check_wellformed_named(m, t, pos, manual, what, NULL);
}

/* A dim not divisible by its axes' devices: when the type wrote its size
 * as a const (dim_names[d]), the message names the const to raise and the
 * -D that does it (`plan` lists these for the layouts that fail). */
static void divis_error(const Mesh *m, const Type *t, Pos pos, const char *pre, int d, int64_t parts,
                        const char *const *dim_names) {
  const char *axes = t->spec[d].n == 1 ? axis_name(m, t->spec[d].axes[0]) : ty_spec_str(m, t->spec[d]) + 1;
  const char *name = dim_names ? dim_names[d] : NULL;
  long long up = (long long)((t->shape[d] + parts - 1) / parts * parts);
  if (name)
    wf_error(pos, "E_DIVIS",
             "%sdim %d of %s has size %lld (the const %s), which is not divisible by %lld (the size of %s); raise "
             "%s to a multiple of %lld (e.g. -D %s=%lld) or shard the dim over other axes",
             pre, d, ty_str(m, t), (long long)t->shape[d], name, (long long)parts, axes, name, (long long)parts, name,
             up);
  else
    wf_error(pos, "E_DIVIS",
             "%sdim %d of %s has size %lld, which is not divisible by %lld (the size of %s); choose a size "
             "that is a multiple of %lld or shard it over other axes",
             pre, d, ty_str(m, t), (long long)t->shape[d], (long long)parts, axes, (long long)parts);
}

bool ty_check_wellformed_named(const Mesh *m, const Type *t, Pos pos, AxisSet manual, const char *what,
                               const char *const *dim_names) {
  if (t->kind != TY_ARRAY)
    return true;
  if (!ty_check_size(t, pos))
    return false;
  /* what names the type's role; empty for a type as written */
  const char *pre = what && *what ? arena_printf("%s: ", what) : "";
  AxisSet seen = 0;
  for (int d = 0; d < t->rank; d++) {
    for (int i = 0; i < t->spec[d].n; i++) {
      int a = t->spec[d].axes[i];
      if (manual & (1u << a)) {
        wf_error(pos, "E_SPEC",
                   "%smesh axis %s is manual here, so a dim cannot be sharded over it; inside the body the "
                   "array is already split: write the local size and <V:%s>",
                   pre, axis_name(m, a), axis_name(m, a));
        return false;
      }
      if (seen & (1u << a)) {
        wf_error(pos, "E_DUP",
                   "%smesh axis %s shards two dims of %s; a mesh axis shards at most one dim: remove it from one "
                   "of them",
                   pre, axis_name(m, a), ty_str(m, t));
        return false;
      }
      seen |= 1u << a;
    }
    int64_t parts = ty_spec_parts(m, t->spec[d]);
    if (t->shape[d] % parts != 0) {
      divis_error(m, t, pos, pre, d, parts, dim_names);
      return false;
    }
  }
  struct { AxisSet set; char name; } ann[3] = {{t->U, 'U'}, {t->R, 'R'}, {t->V, 'V'}};
  for (int k = 0; k < 3; k++) {
    AxisSet both = ann[k].set & seen;
    if (both) {
      wf_error(pos, "E_SPEC",
                 "%smesh axis %s both shards a dim and is in <%c:..> in %s; an axis is in one state only: remove "
                 "it from one of them",
                 pre, ty_axes_str(m, both), ann[k].name, ty_str(m, t));
      return false;
    }
    for (int j = k + 1; j < 3; j++) {
      AxisSet ov = ann[k].set & ann[j].set;
      if (ov) {
        wf_error(pos, "E_SPEC",
                   "%smesh axis %s is in both <%c:..> and <%c:..> in %s; an axis is in one state only: remove it "
                   "from one of them",
                   pre, ty_axes_str(m, ov), ann[k].name, ann[j].name, ty_str(m, t));
        return false;
      }
    }
  }
  if (t->V & ~manual) {
    AxisSet bad = t->V & ~manual;
    if (!manual)
      wf_error(pos, "E_SPEC",
                 "%s<V:%s> (varying) exists only inside a manual function body; in the global view shard a dim "
                 "instead, e.g. 8@%s",
                 pre, ty_axes_str(m, bad), ty_axes_str(m, bad));
    else
      wf_error(pos, "E_SPEC", "%s<V:%s>: only the manual axes of this function (%s) can be varying", pre,
                 ty_axes_str(m, bad), ty_axes_str(m, manual));
    return false;
  }
  return true;
}

/* The reduced type with x's rank again: the dims in mask (reduced away) kept
 * with size 1, unsharded (keepdims). */
Type ty_keep_dims(const Type *reduced, const Type *x, unsigned mask) {
  Type t = *reduced;
  t.rank = x->rank;
  int k = 0;
  for (int d = 0; d < x->rank; d++) {
    if (mask & (1u << d)) {
      t.shape[d] = 1;
      t.spec[d].n = 0;
    } else {
      t.shape[d] = reduced->shape[k];
      t.spec[d] = reduced->spec[k++];
    }
  }
  return t;
}

Type ty_strip_sharding(const Type *t) {
  Type r = *t;
  for (int d = 0; d < r.rank; d++)
    r.spec[d].n = 0;
  r.U = r.R = r.V = 0;
  r.weak = false;
  return r;
}

Type ty_ct(const Type *t) {
  Type r = *t;
  if (r.kind == TY_TUPLE || r.kind == TY_STRUCT) {
    r.elems = arena_alloc(sizeof(Type) * (size_t)(r.nelems ? r.nelems : 1));
    for (int i = 0; i < r.nelems; i++)
      r.elems[i] = ty_ct(&t->elems[i]);
    return r;
  }
  r.U = t->R;
  r.R = t->U;
  r.weak = false;
  return r;
}

/* x with dim k removed (a reduction's rows, argmax's result): its specs and
 * states, not weak. */
Type ty_without_dim(const Type *x, int k) {
  Type r = *x;
  r.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != k) {
      r.shape[r.rank] = x->shape[d];
      r.spec[r.rank++] = x->spec[d];
    }
  for (int d = r.rank; d < MAX_RANK; d++)
    r.spec[d].n = 0;
  r.weak = false;
  return r;
}

/* ---- structs ----------------------------------------------------------------- */

/* l stacked under the dims (nstack, shape, spec) (the caller checks the
 * rank and the axes). */
static Type stacked_leaf(const Type *l, int nstack, const int64_t *shape, const DimSpec *spec) {
  Type r = *l;
  r.rank = nstack + l->rank;
  for (int i = 0; i < nstack && i < MAX_RANK; i++) {
    r.shape[i] = shape[i];
    r.spec[i] = spec[i];
  }
  for (int i = 0; i < l->rank && nstack + i < MAX_RANK; i++) {
    r.shape[nstack + i] = l->shape[i];
    r.spec[nstack + i] = l->spec[i];
  }
  if (r.rank > MAX_RANK)
    r.rank = MAX_RANK;
  return r;
}

/* d's leaves under the dims (nstack, shape, spec), written to out: nested
 * structs are walked, not flattened one by one, so making the outermost of
 * a chain of n structs costs its n leaves, not the n^2 of every level's. */
static void flatten_into(const StructDef *d, int nstack, const int64_t *shape, const DimSpec *spec, Type *out) {
  for (int f = 0; f < d->nfields; f++) {
    const Type *ft = &d->field_types[f];
    Type *at = out + d->field_leaf[f];
    if (ft->kind != TY_STRUCT) {
      *at = stacked_leaf(ft, nstack, shape, spec);
      continue;
    }
    Type dims = stacked_leaf(ft, nstack, shape, spec);   /* the outer dims, then the field's */
    if (ft->sdef->leaves) {
      for (int k = 0; k < ft->sdef->nleaves; k++)
        at[k] = stacked_leaf(&ft->sdef->leaves[k], dims.rank, dims.shape, dims.spec);
    } else {
      flatten_into(ft->sdef, dims.rank, dims.shape, dims.spec, at);
    }
  }
}

const Type *ty_struct_leaves(const StructDef *d) {
  if (!d->leaves) {
    Type *l = arena_alloc(sizeof(Type) * (size_t)(d->nleaves + 1));
    flatten_into(d, 0, NULL, NULL, l);
    ((StructDef *)d)->leaves = l;   /* a cache: the same leaves every time */
  }
  return d->leaves;
}

const char *ty_leaf_path(const StructDef *d, int k) {
  Str s = {0};
  for (;;) {
    int lo = 0, hi = d->nfields - 1;   /* the last field whose first leaf is at most k */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (d->field_leaf[mid] <= k)
        lo = mid;
      else
        hi = mid - 1;
    }
    str_printf(&s, "%s%s", s.len ? "." : "", d->field_names[lo]);
    if (d->field_types[lo].kind != TY_STRUCT)
      break;
    k -= d->field_leaf[lo];
    d = d->field_types[lo].sdef;
  }
  const char *r = arena_strdup(str_cstr(&s));
  free(s.buf);
  return r;
}

/* Paths of more parts than this are shortened in ty_leaf_names. */
#define NAME_PARTS 8

static void join_parts(Str *s, const char **parts, int from, int to) {
  for (int i = from; i < to; i++)
    str_printf(s, "%s%s", i > from ? "." : "", parts[i]);
}

/* Each leaf's name below d, the fields above it in parts[0..n) (the
 * declarations nest at most MAX_STRUCT_NESTING deep). */
static void name_leaves(const StructDef *d, const char **parts, int n, const char **out) {
  for (int f = 0; f < d->nfields && n < MAX_STRUCT_NESTING; f++) {
    parts[n] = d->field_names[f];
    const Type *ft = &d->field_types[f];
    if (ft->kind == TY_STRUCT) {
      name_leaves(ft->sdef, parts, n + 1, out + d->field_leaf[f]);
      continue;
    }
    Str s = {0};
    if (n + 1 <= NAME_PARTS) {
      join_parts(&s, parts, 0, n + 1);
    } else {   /* the first 3 fields and the last 4: a.b.c...w.x.y.z */
      join_parts(&s, parts, 0, 3);
      str_printf(&s, "...");
      join_parts(&s, parts, n - 3, n + 1);
    }
    out[d->field_leaf[f]] = arena_strdup(str_cstr(&s));
    free(s.buf);
  }
}

const char **ty_leaf_names(const StructDef *d) {
  if (!d->leaf_names) {
    const char **names = arena_alloc(sizeof(char *) * (size_t)(d->nleaves + 1));
    const char **parts = mem_calloc(MAX_STRUCT_NESTING + 1, sizeof *parts);
    name_leaves(d, parts, 0, names);
    free(parts);
    ((StructDef *)d)->leaf_names = names;   /* a cache, as leaves */
  }
  return d->leaf_names;
}

Type ty_with_leaves(const Type *t) {
  return t->kind == TY_STRUCT && !t->elems ? ty_struct(t->sdef, t->rank, t->shape, t->spec) : *t;
}

Type ty_field_type(const StructDef *d, int f) { return ty_with_leaves(&d->field_types[f]); }

Type ty_struct(const StructDef *d, int nstack, const int64_t *shape, const DimSpec *spec) {
  Type t;
  memset(&t, 0, sizeof t);
  t.kind = TY_STRUCT;
  t.sdef = d;
  t.rank = nstack;
  for (int i = 0; i < nstack; i++) {
    t.shape[i] = shape[i];
    t.spec[i] = spec[i];
  }
  t.nelems = d->nleaves;
  t.elems = arena_alloc(sizeof(Type) * (size_t)(d->nleaves ? d->nleaves : 1));
  const Type *leaves = ty_struct_leaves(d);
  for (int k = 0; k < d->nleaves; k++)
    t.elems[k] = stacked_leaf(&leaves[k], nstack, shape, spec);
  return t;
}

Type ty_struct_with(const Type *t, const Type *leaves) {
  Type r = *t;
  r.elems = arena_alloc(sizeof(Type) * (size_t)(t->nelems ? t->nelems : 1));
  for (int k = 0; k < t->nelems; k++)
    r.elems[k] = leaves[k];
  return r;
}

int ty_find_field(const StructDef *d, const char *name) {
  return (int)(intptr_t)strmap_get(&d->field_index, name) - 1;
}

Type ty_field(const Type *t, int f) {
  const StructDef *d = t->sdef;
  const Type *ft = &d->field_types[f];
  int first = d->field_leaf[f];
  if (ft->kind != TY_STRUCT)
    return t->elems[first];
  /* The field's own stacked dims follow the value's. */
  Type r = *ft;
  r.rank = t->rank + ft->rank;
  for (int i = 0; i < t->rank; i++) {
    r.shape[i] = t->shape[i];
    r.spec[i] = t->spec[i];
  }
  for (int i = 0; i < ft->rank && t->rank + i < MAX_RANK; i++) {
    r.shape[t->rank + i] = ft->shape[i];
    r.spec[t->rank + i] = ft->spec[i];
  }
  r.elems = t->elems + first;   /* the leaves are shared, never written */
  return r;
}

int ty_nleaves(const Type *t) {
  switch (t->kind) {
  case TY_STRUCT:
    return t->nelems;
  case TY_TUPLE: {
    int n = 0;
    for (int i = 0; i < t->nelems; i++)
      n += ty_nleaves(&t->elems[i]);
    return n;
  }
  case TY_VOID:
    return 0;
  default:
    return 1;
  }
}

int ty_flatten(const Type *t, Type *out) {
  switch (t->kind) {
  case TY_STRUCT:
    for (int k = 0; k < t->nelems; k++)
      out[k] = t->elems[k];
    return t->nelems;
  case TY_TUPLE: {
    int n = 0;
    for (int i = 0; i < t->nelems; i++)
      n += ty_flatten(&t->elems[i], out + n);
    return n;
  }
  case TY_VOID:
    return 0;
  default:
    out[0] = *t;
    return 1;
  }
}

int ty_first_diff_leaf(const Type *t, const Type *u) {
  if (t->kind != TY_STRUCT || u->kind != TY_STRUCT || t->nelems != u->nelems)
    return -1;
  for (int k = 0; k < t->nelems; k++) {
    Type a = t->elems[k], b = u->elems[k];
    a.weak = b.weak = false;
    if (!ty_equal(&a, &b))
      return k;
  }
  return -1;
}
