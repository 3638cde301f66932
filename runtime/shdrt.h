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
 * "shdc: rank R: MESSAGE" to stderr and calls MPI_Abort, so no rank is ever
 * left waiting in a collective.
 */
#ifndef SHDRT_H
#define SHDRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define SHD_MAX_AXES 8
#define SHD_MAX_RANK 8

typedef enum { SHD_F32, SHD_F64, SHD_I32, SHD_BOOL } shd_dtype;
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

/* ---- io.c: printing and arguments ------------------------------------- */

/* Formats a whole (global) array held by the calling rank, NumPy style
 * (nested brackets, summarised beyond 1000 elements), into stdout. Callers
 * call it on rank 0 only. */
void shd_print_array(const void *data, shd_dtype dt, int rank,
                     const int64_t *shape);
void shd_print_scalar(double v, shd_dtype dt);
void shd_print_text(const char *s);   /* no newline */
void shd_print_end(void);             /* newline and fflush */

/* --name=value from the command line, else the default; a value that does
 * not parse is shd_fatal naming the argument. */
int32_t shd_arg_i32(const char *name, int32_t def);
double shd_arg_f64(const char *name, double def);
bool shd_arg_bool(const char *name, bool def);

/* ---- trace.c: measured communication ---------------------------------- */

/* Each collective adds the bytes this rank sent; with SHD_TRACE=1 the
 * per-kind totals and the buffer peak are printed by shd_finalize. */
void shd_trace_add(const char *kind, size_t bytes_sent);
/* Totals so far for one kind (0 for a kind never seen), and a reset; for
 * tests and benchmarks. */
uint64_t shd_trace_count(const char *kind);
uint64_t shd_trace_bytes(const char *kind);
void shd_trace_reset(void);

#endif
