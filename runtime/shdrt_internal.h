/* shdrt_internal.h: what the runtime's own files share and generated code
 * never sees (it includes only shdrt.h). Kept out of shdrt.h so that MPI
 * types do not leak into the ABI.
 */
#ifndef SHDRT_INTERNAL_H
#define SHDRT_INTERNAL_H

#include <mpi.h>
#include "shdrt.h"

/* mesh.c: communicator of the ordered group `axes[0..n)`, created on first
 * use (collectively: every rank must ask for the same groups in the same
 * order, which SPMD code does) and cached. The rank of the caller in it is
 * its group index. */
MPI_Comm shd_group_comm(const int *axes, int n);
/* mesh.c: the number of mesh axes and their sizes. */
void shd_mesh_shape(int *naxes, int *sizes);
/* mesh.c: argc/argv as seen by shd_init (for io.c's arguments). */
void shd_saved_args(int *argc, char ***argv);
/* mesh.c: the program's name (argv[0] without its directory), which every
 * run-time message starts with. */
const char *shd_program_name(void);
/* mesh.c: the rank count against the mesh's size, when shd_init left it to
 * the command-line check (a --help answers at any count). */
void shd_mesh_check_size(void);

/* metrics.c: whether the program calls metrics() (shd_metrics_enable, so
 * --metrics=FILE is a flag of the program); opening FILE on rank 0 (NULL:
 * no file), collective, before any step: a FILE that cannot be opened for
 * appending stops every rank with the cause. */
bool shd_metrics_wanted(void);
void shd_metrics_open(const char *path);
/* metrics.c: JSON nesting and a plain C string value, for the manifest
 * (rank 0). */
void shd_json_open(const char *key);
void shd_json_close(void);
void shd_json_text(const char *key, const char *v);
/* s as a quoted JSON string (escaped; bytes that are not UTF-8 as U+FFFD);
 * malloc'd. */
char *shd_json_quote(const char *s);
/* args.c: every arg of the program with its value in this run, as keys of
 * the open JSON object (rank 0). */
void shd_args_describe(void);

/* collectives.c: reads SHD_RS/SHD_AR on rank 0 and broadcasts the choice so
 * that every rank runs the same algorithm; releases scratch at the end. */
void shd_coll_init(void);
void shd_coll_fini(void);

/* collectives.c: the MPI type and operation of a dtype and reduction, and
 * d = d OP s over n elements (async.c's ring). */
MPI_Datatype shd_mpi_type(shd_dtype dt);
MPI_Op shd_mpi_op(shd_dtype dt, shd_redop op);
void shd_reduce_into(void *d, const void *s, size_t n, shd_dtype dt, shd_redop op);

/* async.c: at start-up, whether the communication thread runs (MPI gave
 * `provided`; SHD_OVERLAP=0 turns it off; every rank alike); at the end,
 * stops it. shd_async_wanted: the program has async sites and SHD_OVERLAP
 * leaves the thread on (MPI_Init_thread asks for MPI_THREAD_MULTIPLE). */
void shd_async_init(int provided);
void shd_async_fini(void);
bool shd_async_wanted(void);

/* k_index.c: the box of dst that a window update writes (shd_update_window's
 * rules; false when it misses this block), and a box copied or added
 * (add) from src into dst. */
bool shd_window_box(int rank, const int64_t *dst_shape, const int64_t *src_shape, const int64_t *start,
                    const int64_t *size, const int64_t *dst_off, unsigned aligned, int64_t *d0, int64_t *s0,
                    int64_t *cnt);
void shd_box_apply(void *dst, const int64_t *ds, const int64_t *d0, const void *src, const int64_t *ss,
                   const int64_t *s0, const int64_t *count, int rank, shd_dtype dt, bool add);

/* timeline.c: ns since the timeline's start, and a span of the
 * communication thread (its own track: tid 2), recorded under a lock. */
int64_t shd_timeline_now(void);
void shd_timeline_async(const char *name, const char *axes, int64_t t0, int64_t t1, size_t bytes, int line);

/* alloc.c: bytes the runtime holds for the program outside its blocks
 * (async.c's staged buckets, which explain counts) added to (or, negative,
 * taken from) the live bytes and their peak. */
void shd_live_adjust(int64_t delta);

/* alloc.c: returns the cached free blocks to the system. */
void shd_alloc_fini(void);

/* alloc.c, the one allocation choke point: every heap allocation of the
 * runtime is one of these. shd_mem_try is realloc (old NULL: malloc),
 * shd_mem_aligned_try a 64-byte aligned block (for free), and
 * shd_mem_grow_try p grown to hold need elements of elem bytes (*cap
 * doubled, from 16): NULL when the system has no memory (p and *cap kept),
 * for callers that go on without it. shd_out_of_memory is the one report,
 * "out of memory: cannot allocate N bytes (WHAT)" through shd_fatal, so
 * every rank stops; shd_mem, shd_mem_zero (zeroed), shd_mem_strdup and
 * shd_mem_grow make it, with WHAT from their format, instead of returning
 * NULL. SHD_FAIL_ALLOC=N makes the Nth allocation of the process and every
 * later one fail (tests). */
void *shd_mem_try(void *old, size_t bytes);
void *shd_mem_aligned_try(size_t bytes);
void *shd_mem_grow_try(void *p, size_t *cap, size_t need, size_t elem);
__attribute__((noreturn, format(printf, 2, 3))) void shd_out_of_memory(size_t bytes, const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void *shd_mem(void *old, size_t bytes, const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void *shd_mem_zero(size_t n, size_t size, const char *fmt, ...);
__attribute__((format(printf, 2, 3))) char *shd_mem_strdup(const char *s, const char *fmt, ...);
__attribute__((format(printf, 5, 6))) void *shd_mem_grow(void *p, size_t *cap, size_t need, size_t elem,
                                                         const char *fmt, ...);

/* trace.c: prints the SHD_TRACE table (rank 0) at shd_finalize. */
void shd_trace_report(void);

/* timeline.c (SHD_TRACE=FILE.json): set-up in shd_init (rank 0 creates the
 * file), the whole timeline written at shd_finalize; a collective span with
 * its wait (a barrier on comm, none for MPI_COMM_NULL) and its kind and
 * bytes (from shd_trace_add); the arguments of the innermost open span; a
 * sample of the live array bytes. */
void shd_timeline_init(void);
void shd_timeline_write(void);
void shd_timeline_begin_collective(const int *axes, int naxes, MPI_Comm comm);
void shd_timeline_collective(const char *kind, size_t bytes);
void shd_span_args(int64_t a, int64_t b, int64_t c);
void shd_timeline_counter(size_t live_bytes);

/* mesh.c: an axis's name, and the mesh as "data=4,model=2". */
const char *shd_axis_name(int axis);
const char *shd_mesh_desc(void);

/* guard.c: signal handlers and SIGXFSZ ignored (shd_init); the temporary
 * file that shd_fatal and the handlers remove (NULL: none; false when the
 * name is too long to keep); removing it now. */
void shd_guard_init(void);
bool shd_guard_temp(const char *path);
void shd_guard_cleanup(void);
/* guard.c, collective: when any rank has a message, the lowest such rank
 * reports it through shd_fatal and every rank stops; NULL everywhere
 * returns. */
void shd_agree(const char *msg);
/* guard.c: formats a message into msg[SHD_MSG_LEN], cut there on purpose
 * (through a va_list, which keeps -Wformat-truncation quiet about it). */
#define SHD_MSG_LEN 1024
__attribute__((format(printf, 2, 3))) void shd_msgf(char *msg, const char *fmt, ...);

/* ckpt.c: what the runtime wrote in a directory (see there). The marker
 * a directory the runtime makes holds; why path is not a directory the
 * runtime wrote (NULL when it is one; empty_ok: an empty one passes too;
 * static text); whether it is one; removing one: only the entries it
 * wrote (fresh: a struct save's unfinished directory, whose leaves are not
 * listed yet), then the directory when that emptied it (0, or -1 with
 * errno: ENOTEMPTY when something else is in it). Rank 0 writes markers:
 * a new one in dir (0 or an errno), a struct save's leaves into the
 * marker open at fd, and path noted in its directory's marker, if it has
 * one (dir: path is a directory). Nothing follows a symbolic link. */
#define SHD_CKPT_MARKER ".shd-checkpoint"
const char *shd_ckpt_not_ours(const char *path, bool empty_ok);
bool shd_is_checkpoint(const char *path);
int shd_checkpoint_remove(const char *path, bool fresh);
int shd_ckpt_mark(const char *dir);
int shd_ckpt_list_leaves(int fd, const char *dir);
void shd_ckpt_note(const char *path, bool dir);

/* npy.c: closes the file a window load keeps open (collective; shd_finalize). */
void shd_npy_fini(void);

/* npy_header.c: a .npy header dict, parsed as a Python literal; false
 * with *why set when it is not one NumPy could have written. */
typedef struct {
    char descr[64];
    bool descr_odd;      /* longer than descr holds, or holding a NUL: no dtype's */
    bool fortran;
    int rank;
    int64_t shape[SHD_MAX_RANK + 1];
} shd_npy_header;
bool shd_npy_parse_header(const char *text, size_t len, shd_npy_header *h, const char **why);

/* Bytes per element, and the short name used in messages ("f32"). */
size_t shd_dtype_size(shd_dtype dt);
const char *shd_dtype_name(shd_dtype dt);

/* Product of shape[0..rank), 1 for rank 0 (shapes the program built,
 * which fit). */
int64_t shd_shape_count(int rank, const int64_t *shape);
/* The one checked size product, for shapes from outside (a file's header):
 * elem times the product of shape[0..rank) in bytes; false when a dim is
 * negative or the product passes INT64_MAX. */
bool shd_shape_bytes(int rank, const int64_t *shape, size_t elem, int64_t *bytes);

/* k_reduce.c: the vectorised reductions of f32/f64 that shd_reduce hands
 * [outer, n, inner] problems with n reduced; false for other dtypes. */
bool shd_reduce_fast(const void *in, void *out, shd_dtype dt, shd_redop op,
                     int64_t outer, int64_t n, int64_t inner);
/* kernels.c: shd_reduce without the fast paths (for the benchmark). */
void shd_reduce_generic(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, unsigned dims_mask);

/* kernels.c: rows x cols of bf16 x (leading dim ld) widened into the dense
 * f32 w, exactly; and rounded back (nearest even), vector code per ISA. */
void shd_widen_bf16(float *w, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld);
void shd_narrow_bf16(uint16_t *x, int64_t ld, const float *w, int64_t rows, int64_t cols);

#endif
