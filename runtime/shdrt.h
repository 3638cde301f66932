/* shdrt.h: the runtime ABI of shdc-generated programs.
 *
 * This is the only header the generated C includes. Every exported name is
 * prefixed shd_. The generated program is one SPMD program: every MPI rank
 * runs it on its own shard of each array. Shapes handed to the runtime are
 * local (per-rank) shapes in elements, row-major (C order), unless a comment
 * says "global".
 *
 * Mesh model: the mesh is an ordered list of named axes with sizes; ranks are
 * laid out row-major over the axes in declaration order, so with
 * mesh {X: 4, Y: 2} rank r has coordinates (r / 2, r % 2). A *group* is an
 * ordered list of mesh axes (major first), e.g. {X, Y} or {Y, X}; the index of
 * a rank within a group linearises its coordinates along those axes in the
 * given order. Every collective works within the group of ranks that share
 * their coordinates on all axes outside the group.
 *
 * Errors: every runtime failure goes through shd_fatal, which prints
 * "PROG: rank R: MESSAGE" (PROG: the program's name) to stderr and calls MPI_Abort, so no rank is ever
 * left waiting in a collective.
 */
#ifndef SHDRT_H
#define SHDRT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

/* The ABI version: bumped whenever a declaration below changes meaning.
 * Generated C checks it (#error on a mismatch), and `shdc --version`
 * prints the one its compiler emits for. */
#define SHD_ABI_VERSION 7

#define SHD_MAX_AXES 8
#define SHD_MAX_RANK 8

typedef enum { SHD_F32, SHD_F64, SHD_I32, SHD_BOOL, SHD_BF16 } shd_dtype;

/* bf16 (language.md §10.1) is stored as the high 16 bits of an f32 and
 * computed in f32: shd_bf2f widens exactly, shd_f2bf rounds to nearest
 * even (NaN stays NaN, quieted; overflow gives inf), shd_bfr rounds an
 * f32 to bf16's precision. */
static inline float shd_bf2f(uint16_t b) {
    union { uint32_t u; float f; } c = {.u = (uint32_t)b << 16};
    return c.f;
}
static inline uint16_t shd_f2bf(float f) {
    union { float f; uint32_t u; } c = {.f = f};
    if (f != f)
        return (uint16_t)((c.u >> 16) | 0x40);
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}
static inline float shd_bfr(float f) { return shd_bf2f(shd_f2bf(f)); }
/* An f64 rounded to bf16 once: to f32 rounding to odd (toward zero, the
 * last bit set when inexact), which then rounds to nearest even exactly. */
static inline uint16_t shd_d2bf(double d) {
    float f = (float)d;
    if (f == f && __builtin_fabs((double)f) > __builtin_fabs(d))
        f = __builtin_nextafterf(f, 0);
    union { float f; uint32_t u; } c = {.f = f};
    if (f == f && (double)f != d)
        c.u |= 1;
    return shd_f2bf(c.f);
}
typedef enum { SHD_SUM, SHD_MAX, SHD_MIN } shd_redop;

/* ---- mesh.c: start, stop, coordinates, errors ------------------------- */

/* Starts MPI and builds the mesh. Before MPI_Init it checks the OpenBLAS
 * kernel choice (see docs/runtime.md): when OPENBLAS_CORETYPE is unset and
 * OpenBLAS picked generic kernels on a CPU with AVX-512 (or AVX2), it sets
 * OPENBLAS_CORETYPE and re-executes the program once, printing a note on
 * rank 0; it also sets OPENBLAS_NUM_THREADS=1 when unset. If the world size
 * differs from the product of the sizes, rank 0 prints an error naming both
 * and every rank exits with status 1. */
void shd_init(int *argc, char ***argv, int naxes, const char *const *names,
              const int *sizes);
/* Prints the trace summary when SHD_TRACE is set, then MPI_Finalize. */
void shd_finalize(void);

int shd_world_rank(void);
int shd_world_size(void);
/* Coordinate of this rank along mesh axis `axis` (declaration index). */
int shd_axis_index(int axis);
/* Index of this rank within the ordered group `axes[0..n)`, and its size. */
int shd_group_index(const int *axes, int n);
int shd_group_size(const int *axes, int n);
/* World rank of the rank whose coordinates equal this rank's, except along
 * the ordered group `axes`, where its group index is `gindex`. */
int shd_group_peer(const int *axes, int n, int gindex);

__attribute__((noreturn, format(printf, 1, 2)))
void shd_fatal(const char *fmt, ...);

double shd_time(void);   /* seconds, MPI_Wtime */

/* ---- stop.c ------------------------------------------------------------- */

/* For programs that call stop_requested(): from shd_stop_init on, the first
 * SIGTERM, SIGUSR1 or SIGUSR2 a rank receives is a request to stop, not the
 * end of the process (a second one ends it as before). shd_stop_requested
 * is collective over every rank and returns the same answer on each: true
 * once any rank has received one. */
void shd_stop_init(void);
bool shd_stop_requested(void);

/* ---- guard.c ------------------------------------------------------------ */

/* Collective, at start-up: when peak_bytes (shdc explain's peak for one
 * rank) times the ranks on this host exceeds the host's available memory,
 * every rank stops with a message, unless SHD_MEMORY_CHECK=0. */
void shd_check_memory(uint64_t peak_bytes);

/* ---- vectorisable math ------------------------------------------------- */

/* exp and tanh of f32 as straight-line arithmetic, so that a loop calling
 * them vectorises (libm's calls do not): GELU, sigmoid, SiLU and softmax
 * run at SIMD speed. exp is 2^n p(r) with n = round(x / ln 2) and a
 * degree-6 polynomial on |r| <= ln2 / 2 (Cephes' expf, within 2 ulp of
 * libm's, 0 below the f32 range's bottom instead of a subnormal); tanh is
 * 1 - 2 / (exp(2|x|) + 1), with its Taylor polynomial below |x| = 1/8 where
 * that formula cancels (within a few ulp). NaN and infinities behave as
 * libm's. The f64 forms are libm's own. */
static inline float shd_expf(float x)
{
    const float lo = -87.33654f, hi = 88.72283f;
    /* clamped so that NaN becomes lo: n below is always a small integer
     * (converting NaN to int would be undefined); NaN is returned last */
    float xc = x > lo ? x : lo;
    xc = xc < hi ? xc : hi;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick: adds only */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n as 2^h 2^(n-h), h = n/2: both factors normal for n in [-126, 128] */
    int32_t ni = (int32_t)n, h = ni / 2;
    int32_t e1 = (h + 127) << 23, e2 = (ni - h + 127) << 23;
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    y = y * s1 * s2;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

static inline float shd_tanhf(float x)
{
    float a = x < 0 ? -x : x;
    float e = shd_expf(2.0f * (a > 9.0f ? 9.0f : a));
    float t = a >= 9.0f ? 1.0f : 1.0f - 2.0f / (e + 1.0f);   /* tanhf rounds to 1 from 9 on */
    float x2 = x * x;
    float small = x + x * x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f));
    float r = x < 0 ? -t : t;
    r = a < 0.125f ? small : r;
    return x != x ? x : r;
}

static inline double shd_exp(double x) { return exp(x); }
static inline double shd_tanh(double x) { return tanh(x); }

/* ---- alloc.c: refcounted, cached array buffers ------------------------ */

/* Returns 64-byte aligned storage with refcount 1. Freed blocks are kept in
 * per-size free lists and reused, so a loop that allocates the same shapes
 * every iteration touches the system allocator only on its first one.
 * Contents of shd_alloc are undefined; shd_zalloc zero-fills. bytes may be
 * 0 (a valid, unique pointer is returned). Out of memory is shd_fatal. */
void *shd_alloc(size_t bytes);
void *shd_zalloc(size_t bytes);
void shd_retain(void *p);       /* p may be NULL */
void shd_release(void *p);      /* p may be NULL; frees into the cache at 0 */
/* True when the caller holds the only reference: the generated code then
 * reuses the buffer in place (an all-reduce of a value used nowhere else). */
bool shd_unique(const void *p);
/* Bytes in live buffers now and at peak (this rank). */
size_t shd_live_bytes(void);
size_t shd_peak_bytes(void);
/* Zeroed scratch outside the array buffers (not counted in live or peak
 * bytes, as a stack array is not): a wide column sum's double array.
 * Out of memory is shd_fatal. */
void *shd_scratch_zalloc(size_t bytes);
void shd_scratch_free(void *p);

/* ---- collectives.c: collectives over ordered axis groups --------------- */

/* In place: buf[0..count) becomes the reduction over the group. */
void shd_all_reduce(void *buf, size_t count, shd_dtype dt, shd_redop op,
                    const int *axes, int naxes);

/* in: local array of rank `rank` and shape `shape`. out: same shape except
 * shape[dim] * G (G = group size); block g along `dim` is the input of the
 * rank with group index g. */
void shd_all_gather(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int dim, const int *axes, int naxes);

/* in: shape `shape` with shape[dim] divisible by G. out: shape[dim] / G.
 * out = block g (this rank's group index) of the sum (op) over the group. */
void shd_reduce_scatter(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, int dim,
                        const int *axes, int naxes);

/* in: shape `shape` with shape[split] divisible by G. Block k of dim `split`
 * goes to group index k; out concatenates the received blocks along
 * `concat` in group order: out shape = shape with shape[split] / G and
 * shape[concat] * G (when split == concat the shape is unchanged). */
void shd_all_to_all(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int split, int concat,
                    const int *axes, int naxes);

/* Within the group: send `in` (bytes) to group index (g + shift) mod G and
 * receive into `out` from (g - shift) mod G. in and out may not alias. */
void shd_ppermute(const void *in, void *out, size_t bytes, int shift,
                  const int *axes, int naxes);

/* Whole-mesh permutation: send `in` to world rank dest, receive `out` from
 * world rank src (dest == self is a copy). Every rank calls it once. */
void shd_permute(const void *in, void *out, size_t bytes, int dest, int src);

/* Copies block `index` of `parts` equal blocks along `dim` of `in` (shape
 * `shape`) into out (shape[dim] / parts along dim). Purely local. */
void shd_slice_block(const void *in, void *out, size_t elem, int rank,
                     const int64_t *shape, int dim, int parts, int index);
/* Inverse: out (shape[dim] * parts along dim) is zero except block `index`,
 * which is `in` (shape `shape`). Purely local. */
void shd_embed_block(const void *in, void *out, size_t elem, int rank,
                     const int64_t *shape, int dim, int parts, int index);

/* A block layout of a global array: its shape and, for each dim, the mesh
 * axes that shard it (major first). */
typedef struct {
    int rank;
    int64_t shape[SHD_MAX_RANK];
    int naxes[SHD_MAX_RANK];
    int axes[SHD_MAX_RANK][SHD_MAX_AXES];
} shd_layout;

/* reshape_move.c, collective over the world: out = this rank's block of
 * layout `to` of the array whose blocks of layout `from` the ranks hold in
 * `in` (the same row-major sequence of elements). Only elements that change
 * owner are sent; an element comes from the rank holding it with this
 * rank's coordinates on the axes that shard no dim of `from`. *plan (NULL
 * at first, one per call site) keeps the plan between calls. */
void shd_reshape_move(const void *in, void *out, size_t elem, const shd_layout *from, const shd_layout *to,
                      void **plan);

/* Algorithm of a collective, for benchmarks and tests: collective is
 * "reduce_scatter" or "all_reduce", algo "ring" (MPI_Sendrecv ring + local
 * reduction), "mpi" (MPI_Reduce_scatter_block / MPI_Allreduce) or, for
 * all_reduce, "auto" (ring from 32 MiB up, else mpi). Defaults come from
 * SHD_RS / SHD_AR as read by rank 0 in shd_init (reduce_scatter: ring,
 * all_reduce: auto). collective "strided_blocks" with algo "pack",
 * "datatype" or "auto" (default: datatype for runs of 256 bytes and more)
 * chooses how blocks along a non-leading dim are moved: copied into
 * contiguous scratch, or described to MPI by a strided datatype. Every rank
 * must make the same call. */
/* async.c: an all-reduce bucket started where its members are final and
 * waited where they are first used (compiler/overlap.c places both): begin
 * a bucket of a site, add members (plain: reduced values to dst; window:
 * set or added into a window of the wait's destination `target`, with
 * shd_update_window's arguments), start it; shd_async_wait(site) finishes
 * every outstanding bucket of the site, oldest first. shd_async_enable
 * before shd_init: the program has such sites. A window member's kind
 * may carry SHD_ASYNC_WIDEN: the bucket is bf16, the destination f32 (the
 * values widened, exactly, as they are set or added); and with it
 * SHD_ASYNC_NARROW: the operand is f32 too, rounded to bf16 (nearest even)
 * into the bucket at its start (--reduce-dtype=bf16: half the bytes).
 * shd_async_add_narrow is a plain member's both. */
enum { SHD_ASYNC_PLAIN, SHD_ASYNC_SET, SHD_ASYNC_ADD, SHD_ASYNC_KIND = 3, SHD_ASYNC_WIDEN = 4, SHD_ASYNC_NARROW = 8 };
void shd_async_enable(void);
void shd_async_begin(int site, shd_dtype dt, shd_redop op, const int *axes, int naxes);
void shd_async_add(const void *src, void *dst, size_t count);
void shd_async_add_narrow(const float *src, float *dst, size_t count);
void shd_async_add_window(const void *src, int kind, int target, int rank, const int64_t *dst_shape,
                          const int64_t *src_shape, const int64_t *start, const int64_t *size, const int64_t *dst_off,
                          unsigned aligned);
/* A bucket of reduce-scatters: each member's operand whole, split along
 * dim sdim over the group, this rank's block set or added into a window. */
void shd_async_begin_scatter(int site, shd_dtype dt, shd_redop op, const int *axes, int naxes);
void shd_async_add_scatter(const void *src, int frank, const int64_t *full, int sdim, int kind, int target, int rank,
                           const int64_t *dst_shape, const int64_t *src_shape, const int64_t *start,
                           const int64_t *size, const int64_t *dst_off, unsigned aligned);
/* A bucket of all-gathers (a layer loop's, prefetched an iteration
 * ahead): each member this rank's block of shape[rank], gathered along
 * dim; the wait's destinations are the gathered arrays, in member order
 * (none: the request is let go). */
void shd_async_begin_gather(int site, shd_dtype dt, const int *axes, int naxes);
void shd_async_add_gather(const void *src, int rank, const int64_t *shape, int dim);
void shd_async_start(int line);
void shd_async_wait(int site, void *const *dst, int ndst, int line);
void shd_set_collective_algo(const char *collective, const char *algo);

/* ---- kernels.c: local compute ----------------------------------------- */

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when
 * ta/tb. f32 and f64 go to CBLAS; i32 is a plain loop. */
void shd_gemm(shd_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              double alpha, const void *A, int64_t lda, const void *B,
              int64_t ldb, double beta, void *C, int64_t ldc);

/* out = in with its dims permuted: out dim i is in dim perm[i]. */
void shd_transpose(const void *in, void *out, size_t elem, int rank,
                   const int64_t *shape, const int *perm);

/* out = reduction of in over the dims whose bit is set in dims_mask (bit d
 * for dim d); out has the remaining dims in order. */
void shd_reduce(const void *in, void *out, shd_dtype dt, shd_redop op,
                int rank, const int64_t *shape, unsigned dims_mask);

/* ---- rng.c: counter-based random numbers ------------------------------ */

/* Philox4x32-10 keyed by seed, counter = global flat index, so element g of
 * a global array has the same value however the array is sharded. The local
 * block `out` of shape `shape` starts at global coordinates `offset` of a
 * global array of shape `gshape`. */
void shd_fill_normal(void *out, shd_dtype dt, uint64_t seed, int rank,
                     const int64_t *gshape, const int64_t *offset,
                     const int64_t *shape);
void shd_fill_uniform(void *out, shd_dtype dt, uint64_t seed, int rank,
                      const int64_t *gshape, const int64_t *offset,
                      const int64_t *shape);
/* Element at global flat index g, for tests and scalars. */
double shd_normal_at(uint64_t seed, uint64_t g);
double shd_uniform_at(uint64_t seed, uint64_t g);
/* The value an f32 or f64 fill stores at global index g (the f32 uniform is
 * the f64 one truncated to 24 bits, the f32 normal the f64 one rounded;
 * shd_*_at above give the f64 values). */
double shd_uniform_at_dt(uint64_t seed, uint64_t g, shd_dtype dt);
double shd_normal_at_dt(uint64_t seed, uint64_t g, shd_dtype dt);
/* The raw generator, for known-answer tests. */
void shd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                       uint32_t out[4]);

/* ---- npy.c: .npy files of global arrays -------------------------------- */

/* Collective over the world. Every rank passes its local block (shape
 * `shape` at global offset `offset` of the global shape `gshape`); ranks
 * with writer == true write their block, and the writers' blocks must tile
 * the global array exactly once. The file is written to a temporary name and
 * renamed, so a reader never sees a half-written file. rank 0 is a 0-d
 * array. */
void shd_save_npy(const char *path, const void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape, bool writer);
/* Collective: every rank reads its own block. A missing file, a dtype or
 * global shape different from the expected one, or a Fortran-order or
 * big-endian file is shd_fatal with the path and both types. */
void shd_load_npy(const char *path, void *local, shd_dtype dt, int rank,
                  const int64_t *gshape, const int64_t *offset,
                  const int64_t *shape);
/* Collective: a window of global shape gshape, starting at start (the same
 * on every rank), of the larger array the file holds (same dtype and rank);
 * each rank reads its own block of the window. A window that does not fit
 * the file is shd_fatal naming the source line. */
void shd_load_npy_window(const char *path, void *local, shd_dtype dt, int rank, const int64_t *gshape,
                         const int64_t *offset, const int64_t *shape, const int64_t *start, int line);
/* Collective: the size of dim k of the array in the file (rank 0 reads the
 * header; every rank returns it). A file that cannot be read, an array
 * without dim k, or a size past INT32_MAX is shd_fatal naming the line. */
int32_t shd_npy_dim(const char *path, int k, int line);

/* ---- io.c: printing ------------------------------------------------------ */

/* Formats a whole (global) array held by the calling rank, NumPy style
 * (nested brackets, summarised beyond 1000 elements), into stdout. Callers
 * call it on rank 0 only. */
void shd_print_array(const void *data, shd_dtype dt, int rank,
                     const int64_t *shape);
void shd_print_scalar(double v, shd_dtype dt);
void shd_print_text(const char *s);   /* no newline */
void shd_print_end(void);             /* newline and fflush */

/* ---- args.c: the program's command line -------------------------------- */

/* One arg("NAME", default, help="...") of the program: its name, the
 * dtype of its value and the default; a str argument has sdef, its default
 * of sdef_len bytes, instead (and dtype is unused); help is "" or the text
 * --help shows. */
typedef struct {
    const char *name;
    shd_dtype dtype;
    double def;
    const char *sdef;
    int64_t sdef_len;
    const char *help;
} shd_arg_spec;

/* Collective, called by main right after shd_init with every arg the
 * program reads (specs may be NULL when n is 0). --help (or -h) prints them
 * with their types, help and defaults on rank 0 and every rank exits with
 * status 0; an unknown or malformed flag, a bare word, or a value that does
 * not parse or does not fit its type is reported by rank 0 as `PROG: rank
 * 0: argument ...`, and every rank exits with status 1. A value follows
 * '=' or is the next word (a bool's only after '='). */
void shd_args_check(const shd_arg_spec *specs, int n);
/* Called by main before shd_args_check: the shdc that built the program
 * ("shdc 1.0.0 (git ...)"), which --version prints with the program's
 * mesh and the runtime ABI (unless the program reads an arg "version"). */
void shd_program_info(const char *shdc);

/* --name=value from the command line (the last one when repeated), else
 * the default; a value that does not parse is shd_fatal naming it. */
int32_t shd_arg_i32(const char *name, int32_t def);
double shd_arg_f64(const char *name, double def);
bool shd_arg_bool(const char *name, bool def);

/* ---- metrics.c: metrics(key=value, ...) and manifest(PATH, key=value, ...) -- */

/* Called by main before shd_args_check when the program calls metrics():
 * --metrics=FILE is then one of its flags, and shd_args_check opens FILE
 * for appending on rank 0 before any computation. */
void shd_metrics_enable(void);
/* Rank 0: whether --metrics=FILE was given (else a metrics() call does
 * nothing). */
bool shd_metrics_on(void);
/* The values of one JSON object, in order (rank 0 only): i32 and bool as
 * JSON numbers and booleans, floats as the shortest decimal that reads
 * back as the same f32 (f32 true) or f64, NaN and the infinities as the
 * strings "NaN", "Infinity" and "-Infinity" (JSON has no such numbers),
 * str values as JSON strings (bytes that are not UTF-8 become U+FFFD). */
struct shd_str;
void shd_json_i32(const char *key, int32_t v);
void shd_json_float(const char *key, double v, bool f32);
void shd_json_bool(const char *key, bool v);
void shd_json_str(const char *key, const struct shd_str *v);
/* Rank 0, one metrics line: begin, the values, end. end appends the object
 * and a newline to FILE with one write; a write that fails stops every rank
 * naming FILE, the source line and the cause. */
void shd_metrics_begin(void);
void shd_metrics_end(int line);

/* A const of the program (its value after -D) for a manifest, by kind:
 * 'i' an integer const (integer), 'f' a float const (number), 'd' a dtype
 * const (text: its dtype's name, "f32", "f64" or "bf16"). */
typedef struct {
    const char *name;
    char kind;
    long long integer;
    double number;
    const char *text;
} shd_const;
/* Collective: begin (rank 0 starts the object with "program", "shdc" (the
 * compiler that built the program), "ranks", "mesh", "config": the n
 * consts, "args": every arg's value in this run), the values of the call
 * (rank 0), end: rank 0 writes the object to PATH through a temporary
 * renamed into place; a failure stops every rank with the path, the line
 * and the cause. */
void shd_manifest_begin(const char *shdc, const shd_const *consts, int n);
void shd_manifest_end(const char *path, int line);

/* ---- fs.c: directories of a long run ----------------------------------------- */

/* Collective: creates the directory path and its missing parents and
 * checks that a file can be created in it (rank 0); otherwise every rank
 * stops naming the path, the line and the cause. */
void shd_mkdir(const char *path, int line);
/* Collective: removes (rank 0), among the entries of dir whose names
 * start with prefix, all but the keep that sort last by name; symbolic
 * links are removed, never followed. A prefix that is empty or holds '/',
 * keep < 1, or a removal that fails stops every rank. */
void shd_keep_last(const char *dir, const char *prefix, int32_t keep, int line);

/* ---- str.c: run-time strings (the language's str) -------------------------- */

/* A str value: at most SHD_STR_MAX - 1 bytes (PATH_MAX: every path the
 * system can open fits), NUL-terminated after len bytes. Generated code
 * keeps them by value, like scalars: no allocation, nothing to release.
 * Every function that would make a longer string stops every rank with the
 * source line. A str is the same on every rank (the language allows no
 * varying or sharded strings), so every rank stops alike. */
#define SHD_STR_MAX 4096
typedef struct shd_str {
    int32_t len;
    char s[SHD_STR_MAX];
} shd_str;

void shd_str_lit(shd_str *out, const char *bytes, int64_t len);
void shd_str_cat(shd_str *out, const shd_str *a, const shd_str *b, int line);
/* Decimal i32, zero-padded to width digits (after the sign) when width > 0. */
void shd_str_i32(shd_str *out, int32_t x, int width, int line);
/* The one-byte str of byte x (1 to 255; anything else stops every rank). */
void shd_str_chr(shd_str *out, int32_t x, int line);
/* Shortest text that reads back as the same f32 (f32 true) or f64. */
void shd_str_f64(shd_str *out, double x, bool f32);
/* Fixed-point with `digits` digits after the point (0 to 20), as C's %.*f
 * and Python's f"{x:.3f}": 2.3114 -> "2.311"; NaN and the infinities as
 * "nan", "inf", "-inf". */
void shd_str_fixed(shd_str *out, double x, int digits, int line);
void shd_str_bool(shd_str *out, bool x);
bool shd_str_eq(const shd_str *a, const shd_str *b);
/* The string as a file path: stops every rank when it holds a NUL byte
 * (which no path can hold) or is empty. what: "save", "load". */
const char *shd_str_path(const shd_str *p, const char *what, int line);
/* --name=value as a string, else the default. */
void shd_arg_str(shd_str *out, const char *name, const char *def, int64_t def_len);

/* ---- savedir.c: a struct's directory of .npy files, replaced as a whole --- */

/* save(DIR, p) of a struct: a fresh directory beside DIR for the leaves
 * (its path in *tmp, the same on every rank), each saved into it with
 * shd_save_npy at shd_savedir_leaf(&scratch, tmp, "h.w.npy", ...); then
 * commit puts it in DIR's place in one step (the earlier contents are
 * removed). Any failure stops every rank with the cause, naming the line. */
void shd_savedir_begin(shd_str *tmp, const shd_str *dir, int line);
const char *shd_savedir_leaf(shd_str *out, const shd_str *dir, const char *leaf, const char *what, int line);
void shd_savedir_commit(const shd_str *tmp, const shd_str *dir, int line);
/* exists(PATH): rank 0 looks, every rank gets its answer. */
bool shd_exists(const char *path);

/* ---- trace.c: measured communication ---------------------------------- */

/* Each collective adds the bytes this rank sent; with SHD_TRACE=1 the
 * per-kind totals and the buffer peak are printed by shd_finalize. */
void shd_trace_add(const char *kind, size_t bytes_sent);
/* Totals so far for one kind (0 for a kind never seen), and a reset; for
 * tests and benchmarks. */
uint64_t shd_trace_count(const char *kind);
uint64_t shd_trace_bytes(const char *kind);
void shd_trace_reset(void);

/* ---- k_reduce.c: row kernels of the reduction family ------------------- */

/* Each works on a local array seen as [outer, n, inner] (row-major), along
 * the middle dim for every (outer, inner) pair; per-row statistics (a max,
 * a sum, an index) are [outer, inner]. Floats only, except argreduce and
 * cumsum (also i32). See k_reduce.c for the numerics. */
typedef enum { SHD_SOFTMAX, SHD_LOG_SOFTMAX, SHD_LOGSUMEXP } shd_softmax_kind;

/* y = softmax / log_softmax of x along n (y shaped like x), or logsumexp
 * (y: [outer, inner]); the max is subtracted first. */
void shd_softmax(const void *x, void *y, shd_dtype dt, int kind, int64_t outer,
                 int64_t n, int64_t inner);
/* The pieces of the same over a dim split across devices: s = sum(exp(x -
 * m)) of this block's part of each row (in double whatever the dtype: an
 * f32 s, off by half its ulp, scaled every probability of the row alike),
 * given the all-reduced row max m of the whole row; then y from x, m and
 * the all-reduced s (kind as above; x unused for logsumexp). */
void shd_softmax_expsum(const void *x, const void *m, void *s, shd_dtype dt,
                        int64_t outer, int64_t n, int64_t inner);
void shd_softmax_finish(const void *x, const void *m, const void *s, void *y,
                        shd_dtype dt, int kind, int64_t outer, int64_t n,
                        int64_t inner);
/* Derivatives, from the result y and its cotangent g: softmax dx = y * (g
 * - sum(g * y)), log_softmax dx = g - exp(y) * sum(g). shd_softmax_grad
 * does the whole row; over a split dim gsum gives the block's part of each
 * row's sum, in double whatever the dtype (g - sum cancels: an f32 sum of
 * terms of g ~ 1e3 is off by its ulp), and gfinish uses the all-reduced
 * (double) sums. */
void shd_softmax_grad(const void *y, const void *g, void *dx, shd_dtype dt,
                      int kind, int64_t outer, int64_t n, int64_t inner);
void shd_softmax_gsum(const void *y, const void *g, void *s, shd_dtype dt,
                      int kind, int64_t outer, int64_t n, int64_t inner);
void shd_softmax_gfinish(const void *y, const void *g, const void *s, void *dx,
                         shd_dtype dt, int kind, int64_t outer, int64_t n,
                         int64_t inner);
/* logsumexp: dx = g * exp(x - y) / t, y and g per row, t the row's sum of
 * exp(x - y) (1 but for y's rounding, which it takes out). Over a split
 * dim gsum gives the block's part of t and gfinish uses the all-reduced t. */
void shd_logsumexp_grad(const void *x, const void *y, const void *g, void *dx,
                        shd_dtype dt, int64_t outer, int64_t n, int64_t inner);
void shd_logsumexp_gsum(const void *x, const void *y, void *t, shd_dtype dt, int64_t outer,
                        int64_t n, int64_t inner);
void shd_logsumexp_gfinish(const void *x, const void *y, const void *g, const void *t, void *dx,
                           shd_dtype dt, int64_t outer, int64_t n, int64_t inner);
/* idx = the first index of the max (SHD_MAX) or min of each row; a NaN is
 * the extreme, as in NumPy. */
void shd_argreduce(const void *x, int32_t *idx, shd_dtype dt, shd_redop op,
                   int64_t outer, int64_t n, int64_t inner);
/* Collective: the same over a dim split across the group `axes` (this
 * rank's block is block g = its group index): (value, global index) pairs
 * are all-reduced, the smallest index winning ties. Traced as one
 * all_reduce of 16 bytes per row. */
void shd_argreduce_group(const void *x, int32_t *idx, shd_dtype dt,
                         shd_redop op, int64_t outer, int64_t n, int64_t inner,
                         const int *axes, int naxes);
/* y = the running sum of x along n (from the end when reverse). */
void shd_cumsum(const void *x, void *y, shd_dtype dt, bool reverse,
                int64_t outer, int64_t n, int64_t inner);

/* ---- k_sort.c: sort, argsort, top_k ----------------------------------- */

/* Each row of x ([outer][n][inner], along n) sorted stably: ascending with
 * NaN last, or (descending) largest first with NaN first, ties to the
 * lower position either way; the first k of the order into vals and their
 * positions into idx ([outer][k][inner]). */
void shd_sort_rows(const void *x, void *vals, int32_t *idx, shd_dtype dt,
                   int64_t outer, int64_t n, int64_t inner, int64_t k,
                   bool descending);

/* ---- k_attention.c: fused attention ------------------------------------ */

/* softmax(scale * q kᵀ + mask) v without the T x S score matrix (flash
 * attention). q, out: [B, T, N, H]; k, v: [B, S, K, H]; lse: [B, T, N, 2],
 * each query row's max scaled score and the log of its sum of exp(score -
 * max) (kept apart: their sum would round away the second at large
 * scores), which the gradient needs. Query
 * head n uses key/value head (qoff + n) / group. causal hides keys s > t.
 * f32, f64 and bf16 (computed in f32, each block widened as it is loaded;
 * lse is f32; out, and the gradient's dq, dk, dv, rounded once). */
void shd_attention(const void *q, const void *k, const void *v, void *out,
                   void *lse, shd_dtype dt, int64_t B, int64_t T, int64_t S,
                   int64_t N, int64_t K, int64_t H, int64_t group,
                   int64_t qoff, bool causal, double scale);
/* The gradient from q, k, v, the result o, lse and o's cotangent g: dq, dk,
 * dv (each overwritten; dk and dv sum over the query heads of a group). */
void shd_attention_grad(const void *q, const void *k, const void *v,
                        const void *o, const void *lse, const void *g,
                        void *dq, void *dk, void *dv, shd_dtype dt, int64_t B,
                        int64_t T, int64_t S, int64_t N, int64_t K, int64_t H,
                        int64_t group, int64_t qoff, bool causal,
                        double scale);
/* ---- timeline.c: SHD_TRACE=FILE.json, a Chrome trace-event timeline ------
 *
 * Generated code marks spans: each function call (with the call's source
 * line), each elementwise pass and each iteration of a loop at the top of
 * main (a step); the runtime adds GEMMs, collectives with
 * their waits, and a live-bytes counter. Spans nest: every shd_span_begin
 * has its shd_span_end. Off (SHD_TRACE unset, 0 or 1) they cost one test of
 * shd_timeline_on. shd_trace_at gives the source file and line of the next
 * GEMM or collective. A file is an index into the program's table of source
 * files (shd_trace_files: the program's own file first, then its imports);
 * shd_span_begin's line is in the program's own file, and a span begun
 * with line 0 takes the last shd_trace_at's. */
enum { SHD_SPAN_CALL, SHD_SPAN_ELEMENTWISE, SHD_SPAN_GEMM, SHD_SPAN_COLLECTIVE, SHD_SPAN_WAIT, SHD_SPAN_COMPUTE,
       SHD_SPAN_STEP };
extern bool shd_timeline_on;
/* async.c, SHD_OVERLAP=progress: buckets in flight advance at the ends of
 * the runtime's kernels and the generated code's spans. */
extern bool shd_async_active;
void shd_async_progress_slow(void);
void shd_span_begin_slow(int kind, const char *name, int file, int line);
void shd_span_end_slow(void);
static inline void shd_span_begin_at(int kind, const char *name, int file, int line)
{
    if (shd_timeline_on)
        shd_span_begin_slow(kind, name, file, line);
}
static inline void shd_span_begin(int kind, const char *name, int line)
{
    if (shd_timeline_on)
        shd_span_begin_slow(kind, name, 0, line);
}
static inline void shd_span_end(void)
{
    if (shd_timeline_on)
        shd_span_end_slow();
    if (shd_async_active)
        shd_async_progress_slow();
}
void shd_trace_at(int file, int line);
void shd_trace_files(int n, const char *const *names);
/* One iteration of a loop at the top of main (a training step): a "step"
 * span with the loop variable's value; SHD_TRACE_STEPS=A:B records only
 * the steps A <= step < B (timeline.c). */
void shd_step_begin_slow(int32_t step, int line);
void shd_step_end_slow(void);
static inline void shd_step_begin(int32_t step, int line)
{
    if (shd_timeline_on)
        shd_step_begin_slow(step, line);
}
static inline void shd_step_end(void)
{
    if (shd_timeline_on)
        shd_step_end_slow();
}

/* ---- k_index.c: slices, pads, gathers and scatters (local) ------------- */

/* out (shape out_shape) = the box of `in` (shape in_shape) starting at
 * start; shd_dynamic_slice first clamps each start into [0, in - out], as
 * JAX's dynamic_slice does. */
void shd_slice(const void *in, void *out, size_t elem, int rank,
               const int64_t *in_shape, const int64_t *out_shape,
               const int64_t *start);
void shd_dynamic_slice(const void *in, void *out, size_t elem, int rank,
                       const int64_t *in_shape, const int64_t *out_shape,
                       const int64_t *start);
/* out = in with lo[d] zero rows before it along each dim d (and zeros up to
 * out_shape after it). */
void shd_pad(const void *in, void *out, size_t elem, int rank,
             const int64_t *in_shape, const int64_t *out_shape,
             const int64_t *lo);
/* Writes the window of global starts `start` and sizes `size` into dst,
 * this rank's block at global offsets dst_off. Along a dim whose bit is set
 * in `aligned`, src is laid out like dst (the part of the window this block
 * holds is copied); along the others src is the window itself and dst holds
 * the whole dim. */
void shd_update_window(void *dst, const void *src, size_t elem, int rank,
                       const int64_t *dst_shape, const int64_t *src_shape,
                       const int64_t *start, const int64_t *size,
                       const int64_t *dst_off, unsigned aligned);
/* out (shape out_shape) = the n sources concatenated along dim; source i
 * has rows[i] rows there and out's shape elsewhere. */
void shd_concat(const void *const *src, int n, const int64_t *rows, void *out,
                size_t elem, int rank, const int64_t *out_shape, int dim);
/* i as an index of a dim of size n: negative counts from the end; outside
 * [-n, n) is shd_fatal "WHERE: index I out of range for dim D of size N". */
int32_t shd_index_check(int32_t i, int64_t n, int dim, const char *where);
/* take along dim: x is [outer][rows][inner] (this rank's rows
 * [row0, row0 + rows) of a dim of n), out is [outer][nidx][inner]; an index
 * another rank holds gives a zero row (a masked lookup). Indices are
 * checked as shd_index_check does. */
void shd_take(const void *x, const int32_t *idx, void *out, size_t elem,
              int64_t outer, int64_t rows, int64_t inner, int64_t nidx,
              int64_t row0, int64_t n, int dim, const char *where);
/* The transpose: out ([outer][rows][inner], zeroed by the caller) +=
 * g ([outer][nidx][inner]) at the indices this rank holds. */
void shd_scatter_add(const void *g, const int32_t *idx, void *out,
                     shd_dtype dt, int64_t outer, int64_t rows, int64_t inner,
                     int64_t nidx, int64_t row0, int64_t n, int dim,
                     const char *where);
/* take_along_axis: big is the indexed array (its rows [row0, ..) of a dim
 * of n along dim), small the result, idx has small's shape along dim;
 * elsewhere a size-1 dim broadcasts. The scatter adds small (g) into big
 * (out, zeroed by the caller). */
void shd_take_along(const void *x, const int32_t *idx, void *out, size_t elem,
                    int rank, const int64_t *big_shape,
                    const int64_t *small_shape, const int64_t *idx_shape,
                    int dim, int64_t row0, int64_t n, const char *where);
void shd_scatter_add_along(const void *g, const int32_t *idx, void *out,
                           shd_dtype dt, int rank, const int64_t *big_shape,
                           const int64_t *small_shape,
                           const int64_t *idx_shape, int dim, int64_t row0,
                           int64_t n, const char *where);
/* out[j][c] = 1 where idx[j] == class0 + c, else 0 (an index out of range
 * gives a zero row, as jax.nn.one_hot). */
void shd_one_hot(const int32_t *idx, void *out, shd_dtype dt, int64_t nidx,
                 int64_t classes, int64_t class0);

/* ---- redistribute.c: rows that change owner ---------------------------- */

/* Along dim, output row j is row j - offset[i] of source i (n_src[i] rows
 * in all); rows no source covers are zeros when fill, else untouched. The
 * sources are split in equal blocks over the group axes (src_split) or
 * replicated over it, and so is the output (n_out rows; out_split); shape
 * is out's local shape. Each rank sends only the rows of its blocks that
 * another rank's output block needs. Collective over the group when
 * traced (one "shift" trace entry); traced false: the compiler proved no
 * row leaves its rank, and nothing is sent. */
void shd_shift(const void *const *src, int nsrc, const int64_t *n_src,
               bool src_split, const int64_t *offset, void *out, int64_t n_out,
               bool out_split, bool fill, bool traced, size_t elem, int rank,
               const int64_t *shape, int dim, const int *axes, int naxes);

#endif
