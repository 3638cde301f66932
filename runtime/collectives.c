/* collectives.c: collectives over ordered groups of mesh axes.
 *
 * Arrays are row-major, so a collective along dim `dim` sees its input as
 * [outer][rows][inner] (outer = product of the dims before `dim`, inner = the
 * bytes of one row). MPI exchanges contiguous blocks, so blocks along a
 * non-leading dim are packed into [G][outer][rows/G][inner] first (or
 * unpacked after); along dim 0 (outer == 1) the blocks are already
 * contiguous and no copy is made.
 *
 * Algorithms, chosen from measurements on this machine (bench/collectives.sh
 * and platform-notes.md): reduce-scatter is a ring of MPI_Sendrecv plus a
 * local reduction (Open MPI's MPI_Reduce_scatter_block is several times
 * slower over shared memory); all-reduce is MPI_Allreduce in place. SHD_RS
 * and SHD_AR (ring | mpi) override either; rank 0's choice is broadcast at
 * start-up so all ranks always run the same algorithm.
 *
 * Invariants: a group of size 1 never calls MPI (plain copy); every call
 * adds exactly one shd_trace_add with the formula `shdc explain` uses;
 * messages over INT_MAX bytes are described by a derived datatype, never a
 * truncated count. Scratch buffers are kept (grow-only) between calls so a
 * training loop does not fault in fresh pages every step; they are not
 * counted as live buffers.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

enum { ALGO_RING, ALGO_MPI };
enum { NSCRATCH = 3 };

static struct {
    int rs_algo, ar_algo;
    void *scratch[NSCRATCH];
    size_t cap[NSCRATCH];
} g_coll = { .rs_algo = ALGO_RING, .ar_algo = ALGO_MPI };

/* ---- set-up ------------------------------------------------------------ */

static int parse_algo(const char *var, int def)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return def;
    if (strcmp(v, "ring") == 0)
        return ALGO_RING;
    if (strcmp(v, "mpi") == 0)
        return ALGO_MPI;
    shd_fatal("%s=%s: expected 'ring' or 'mpi'", var, v);
}

void shd_coll_init(void)
{
    int algo[2] = { g_coll.rs_algo, g_coll.ar_algo };
    if (shd_world_rank() == 0) {
        algo[0] = parse_algo("SHD_RS", ALGO_RING);
        algo[1] = parse_algo("SHD_AR", ALGO_MPI);
    }
    MPI_Bcast(algo, 2, MPI_INT, 0, MPI_COMM_WORLD);
    g_coll.rs_algo = algo[0];
    g_coll.ar_algo = algo[1];
}

void shd_coll_fini(void)
{
    for (int i = 0; i < NSCRATCH; i++) {
        free(g_coll.scratch[i]);
        g_coll.scratch[i] = NULL;
        g_coll.cap[i] = 0;
    }
}

void shd_set_collective_algo(const char *collective, const char *algo)
{
    int a;
    if (strcmp(algo, "ring") == 0)
        a = ALGO_RING;
    else if (strcmp(algo, "mpi") == 0)
        a = ALGO_MPI;
    else
        shd_fatal("collective algorithm '%s': expected 'ring' or 'mpi'", algo);
    if (strcmp(collective, "reduce_scatter") == 0)
        g_coll.rs_algo = a;
    else if (strcmp(collective, "all_reduce") == 0)
        g_coll.ar_algo = a;
    else
        shd_fatal("no algorithm choice for collective '%s'", collective);
}

static void *scratch(int slot, size_t bytes)
{
    if (bytes > g_coll.cap[slot]) {
        free(g_coll.scratch[slot]);
        g_coll.scratch[slot] = NULL;
        if (posix_memalign(&g_coll.scratch[slot], 64, bytes) != 0)
            shd_fatal("out of memory: collective scratch of %zu bytes", bytes);
        g_coll.cap[slot] = bytes;
    }
    return g_coll.scratch[slot];
}

/* ---- MPI types and ops -------------------------------------------------- */

static MPI_Datatype mpi_type(shd_dtype dt)
{
    switch (dt) {
    case SHD_F32: return MPI_FLOAT;
    case SHD_F64: return MPI_DOUBLE;
    case SHD_I32: return MPI_INT32_T;
    case SHD_BOOL: return MPI_UNSIGNED_CHAR;
    }
    shd_fatal("invalid dtype %d", (int)dt);
}

/* Bools are bytes 0/1: SUM and MAX are OR, MIN is AND. */
static MPI_Op mpi_op(shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BOOL)
        return op == SHD_MIN ? MPI_BAND : MPI_BOR;
    switch (op) {
    case SHD_SUM: return MPI_SUM;
    case SHD_MAX: return MPI_MAX;
    case SHD_MIN: return MPI_MIN;
    }
    shd_fatal("invalid reduction %d", (int)op);
}

/* A run of `bytes` bytes as (count, type): MPI_BYTE when the count fits in
 * an int, else one derived type of GiB chunks plus a tail, whose extent is
 * exactly `bytes` (so gathers place block g at g * bytes). */
typedef struct {
    MPI_Datatype type;
    int count;
    bool owned;
} byte_run;

static byte_run byte_run_make(size_t bytes)
{
    byte_run r = { MPI_BYTE, (int)bytes, false };
    if (bytes <= INT_MAX)
        return r;
    const size_t chunk = (size_t)1 << 30;
    MPI_Datatype gib, body;
    MPI_Type_contiguous((int)chunk, MPI_BYTE, &gib);
    MPI_Type_contiguous((int)(bytes / chunk), gib, &body);
    int lens[2] = { 1, (int)(bytes % chunk) };
    MPI_Aint disps[2] = { 0, (MPI_Aint)(bytes / chunk * chunk) };
    MPI_Datatype types[2] = { body, MPI_BYTE };
    MPI_Type_create_struct(lens[1] ? 2 : 1, lens, disps, types, &r.type);
    MPI_Type_commit(&r.type);
    MPI_Type_free(&gib);
    MPI_Type_free(&body);
    r.count = 1;
    r.owned = true;
    return r;
}

static void byte_run_free(byte_run *r)
{
    if (r->owned)
        MPI_Type_free(&r->type);
}

static void sendrecv_bytes(const void *sbuf, size_t sbytes, int dest,
                           void *rbuf, size_t rbytes, int src, MPI_Comm comm)
{
    byte_run s = byte_run_make(sbytes), r = byte_run_make(rbytes);
    MPI_Sendrecv(sbuf, s.count, s.type, dest, 0x5d, rbuf, r.count, r.type,
                 src, 0x5d, comm, MPI_STATUS_IGNORE);
    byte_run_free(&s);
    byte_run_free(&r);
}

/* ---- local reductions --------------------------------------------------- */

/* NaN-propagating max/min, as NumPy's maximum/minimum. */
#define MAXOF(a, b) ((a) != (a) || (a) >= (b) ? (a) : (b))
#define MINOF(a, b) ((a) != (a) || (a) <= (b) ? (a) : (b))

#define DEFINE_REDUCE3(NAME, T, SUMEXPR)                                      \
    static void NAME(T *d, const T *a, const T *b, size_t n,         \
                     shd_redop op)                                            \
    {                                                                         \
        if (op == SHD_SUM)                                                    \
            for (size_t i = 0; i < n; i++) d[i] = SUMEXPR(a[i], b[i]);        \
        else if (op == SHD_MAX)                                               \
            for (size_t i = 0; i < n; i++) d[i] = MAXOF(a[i], b[i]);          \
        else                                                                  \
            for (size_t i = 0; i < n; i++) d[i] = MINOF(a[i], b[i]);          \
    }

#define PLAIN_ADD(x, y) ((x) + (y))
/* int32 sums wrap, as NumPy's do, without signed-overflow UB. */
#define WRAP_ADD(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
/* bool SUM is OR; 0/1 bytes make MAX an OR and MIN an AND. */
#define BOOL_OR(x, y) ((uint8_t)((x) | (y)))

DEFINE_REDUCE3(reduce3_f32, float, PLAIN_ADD)
DEFINE_REDUCE3(reduce3_f64, double, PLAIN_ADD)
DEFINE_REDUCE3(reduce3_i32, int32_t, WRAP_ADD)
DEFINE_REDUCE3(reduce3_bool, uint8_t, BOOL_OR)

/* d = a op b elementwise over n elements; d may alias a (not b). */
static void reduce3(void *d, const void *a, const void *b, size_t n,
                    shd_dtype dt, shd_redop op)
{
    switch (dt) {
    case SHD_F32: reduce3_f32(d, a, b, n, op); break;
    case SHD_F64: reduce3_f64(d, a, b, n, op); break;
    case SHD_I32: reduce3_i32(d, a, b, n, op); break;
    case SHD_BOOL: reduce3_bool(d, a, b, n, op); break;
    }
}

/* ---- block layout helpers ---------------------------------------------- */

typedef struct {
    int64_t outer, rows;
    size_t inner;   /* bytes of one row */
} layout;

static layout layout_of(int rank, const int64_t *shape, int dim, size_t elem,
                        const char *what)
{
    if (rank < 1 || rank > SHD_MAX_RANK || dim < 0 || dim >= rank)
        shd_fatal("%s: dim %d of a rank-%d array", what, dim, rank);
    layout l = { 1, shape[dim], elem };
    for (int d = 0; d < dim; d++)
        l.outer *= shape[d];
    for (int d = dim + 1; d < rank; d++)
        l.inner *= (size_t)shape[d];
    return l;
}

/* Copies rows [s0, s0+rows) of each outer slice of src (srows rows per
 * slice) to rows [d0, d0+rows) of dst (drows rows per slice). */
static void copy_rows(const char *src, int64_t srows, int64_t s0, char *dst,
                      int64_t drows, int64_t d0, int64_t outer, int64_t rows,
                      size_t inner)
{
    size_t run = (size_t)rows * inner;
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + (size_t)(o * drows + d0) * inner,
               src + (size_t)(o * srows + s0) * inner, run);
}

/* [outer][G*b][inner] -> [G][outer][b][inner] */
static void pack_blocks(const void *in, void *out, layout l, int G)
{
    int64_t b = l.rows / G;
    size_t blk = (size_t)(l.outer * b) * l.inner;
    for (int g = 0; g < G; g++)
        copy_rows(in, l.rows, g * b, (char *)out + g * blk, b, 0, l.outer, b, l.inner);
}

/* [G][outer][b][inner] -> [outer][G*b][inner] (l describes one block) */
static void unpack_blocks(const void *in, void *out, layout l, int G)
{
    size_t blk = (size_t)(l.outer * l.rows) * l.inner;
    for (int g = 0; g < G; g++)
        copy_rows((const char *)in + g * blk, l.rows, 0, out, l.rows * G,
                  g * l.rows, l.outer, l.rows, l.inner);
}

static int mod(int64_t a, int m)
{
    int r = (int)(a % m);
    return r < 0 ? r + m : r;
}

/* ---- all-reduce ---------------------------------------------------------- */

static void allreduce_mpi(void *buf, size_t count, shd_dtype dt, shd_redop op,
                          MPI_Comm comm)
{
    size_t es = shd_dtype_size(dt);
    for (size_t done = 0; done < count;) {
        size_t n = count - done < INT_MAX ? count - done : INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * es, (int)n,
                      mpi_type(dt), mpi_op(dt, op), comm);
        done += n;
    }
}

/* Chunk i of a balanced split of count into G: the first count % G chunks
 * get one element more. */
static size_t chunk_off(size_t count, int G, int i)
{
    size_t q = count / (size_t)G, r = count % (size_t)G;
    return (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
}

/* Ring all-reduce: a ring reduce-scatter in place, then a ring all-gather.
 * Each rank sends 2 (G-1)/G of the buffer, the bandwidth optimum. */
static void allreduce_ring(void *buf, size_t count, shd_dtype dt,
                           shd_redop op, MPI_Comm comm, int g, int G)
{
    size_t es = shd_dtype_size(dt);
    char *b = buf;
    char *tmp = scratch(1, (count / (size_t)G + 1) * es);
    int next = mod(g + 1, G), prev = mod(g - 1, G);
    for (int s = 0; s < G - 1; s++) {
        int sc = mod(g - s - 1, G), rc = mod(g - s - 2, G);
        size_t so = chunk_off(count, G, sc), sn = chunk_off(count, G, sc + 1) - so;
        size_t ro = chunk_off(count, G, rc), rn = chunk_off(count, G, rc + 1) - ro;
        sendrecv_bytes(b + so * es, sn * es, next, tmp, rn * es, prev, comm);
        reduce3(b + ro * es, b + ro * es, tmp, rn, dt, op);
    }
    for (int s = 0; s < G - 1; s++) {
        int sc = mod(g - s, G), rc = mod(g - s - 1, G);
        size_t so = chunk_off(count, G, sc), sn = chunk_off(count, G, sc + 1) - so;
        size_t ro = chunk_off(count, G, rc), rn = chunk_off(count, G, rc + 1) - ro;
        sendrecv_bytes(b + so * es, sn * es, next, b + ro * es, rn * es, prev, comm);
    }
}

void shd_all_reduce(void *buf, size_t count, shd_dtype dt, shd_redop op,
                    const int *axes, int naxes)
{
    size_t G = (size_t)shd_group_size(axes, naxes);
    size_t n = count * shd_dtype_size(dt);
    shd_trace_add("all_reduce", 2 * (G - 1) * n / G);
    if (G == 1 || count == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    if (g_coll.ar_algo == ALGO_RING)
        allreduce_ring(buf, count, dt, op, comm, shd_group_index(axes, naxes), (int)G);
    else
        allreduce_mpi(buf, count, dt, op, comm);
}

/* ---- all-gather ---------------------------------------------------------- */

void shd_all_gather(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int dim, const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    size_t es = shd_dtype_size(dt);
    layout l = layout_of(rank, shape, dim, es, "all_gather");
    size_t n = (size_t)shd_shape_count(rank, shape) * es;
    shd_trace_add("all_gather", (size_t)(G - 1) * n);
    if (G == 1) {
        memcpy(out, in, n);
        return;
    }
    if (n == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    void *dst = l.outer == 1 ? out : scratch(0, n * (size_t)G);
    byte_run r = byte_run_make(n);
    MPI_Allgather(in, r.count, r.type, dst, r.count, r.type, comm);
    byte_run_free(&r);
    if (l.outer != 1)
        unpack_blocks(dst, out, l, G);
}

/* ---- reduce-scatter ------------------------------------------------------ */

/* Ring over the G blocks of `packed` (each blk bytes): at step s this rank
 * sends its running sum of block g-s-1 to the next rank and receives the
 * running sum of block g-s-2 from the previous one, adding its own
 * contribution; after G-1 steps it holds the full sum of block g. */
static void reduce_scatter_ring(const char *packed, void *out, size_t blk,
                                shd_dtype dt, shd_redop op, MPI_Comm comm,
                                int g, int G)
{
    size_t count = blk / shd_dtype_size(dt);
    int next = mod(g + 1, G), prev = mod(g - 1, G);
    char *buf[2] = { scratch(1, blk), scratch(2, blk) };
    const char *send = packed + (size_t)mod(g - 1, G) * blk;
    for (int s = 0; s < G - 1; s++) {
        char *recv = buf[s % 2];
        sendrecv_bytes(send, blk, next, recv, blk, prev, comm);
        const char *own = packed + (size_t)mod(g - s - 2, G) * blk;
        char *dst = s == G - 2 ? out : recv;
        reduce3(dst, recv, own, count, dt, op);
        send = recv;
    }
}

void shd_reduce_scatter(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, int dim,
                        const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    size_t es = shd_dtype_size(dt);
    layout l = layout_of(rank, shape, dim, es, "reduce_scatter");
    if (l.rows % G != 0)
        shd_fatal("reduce_scatter: dim %d has size %lld, not divisible by the "
                  "group size %d", dim, (long long)l.rows, G);
    size_t n = (size_t)shd_shape_count(rank, shape) * es;
    shd_trace_add("reduce_scatter", (size_t)(G - 1) * n / (size_t)G);
    if (G == 1) {
        memcpy(out, in, n);
        return;
    }
    if (n == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    const void *packed = in;
    if (l.outer != 1) {
        void *p = scratch(0, n);
        pack_blocks(in, p, l, G);
        packed = p;
    }
    size_t blk = n / (size_t)G;
    if (g_coll.rs_algo == ALGO_MPI && blk / es <= INT_MAX)
        MPI_Reduce_scatter_block(packed, out, (int)(blk / es), mpi_type(dt),
                                 mpi_op(dt, op), comm);
    else
        reduce_scatter_ring(packed, out, blk, dt, op, comm,
                            shd_group_index(axes, naxes), G);
}

/* ---- all-to-all ---------------------------------------------------------- */

void shd_all_to_all(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int split, int concat,
                    const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    size_t es = shd_dtype_size(dt);
    layout ls = layout_of(rank, shape, split, es, "all_to_all");
    (void)layout_of(rank, shape, concat, es, "all_to_all");
    if (ls.rows % G != 0)
        shd_fatal("all_to_all: split dim %d has size %lld, not divisible by "
                  "the group size %d", split, (long long)ls.rows, G);
    size_t n = (size_t)shd_shape_count(rank, shape) * es;
    shd_trace_add("all_to_all", (size_t)(G - 1) * n / (size_t)G);
    if (G == 1) {
        memcpy(out, in, n);
        return;
    }
    if (n == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    int64_t bshape[SHD_MAX_RANK];
    memcpy(bshape, shape, (size_t)rank * sizeof *shape);
    bshape[split] /= G;
    layout lc = layout_of(rank, bshape, concat, es, "all_to_all");
    const void *send = in;
    if (ls.outer != 1) {
        void *p = scratch(0, n);
        pack_blocks(in, p, ls, G);
        send = p;
    }
    void *recv = lc.outer == 1 ? out : scratch(1, n);
    byte_run r = byte_run_make(n / (size_t)G);
    MPI_Alltoall(send, r.count, r.type, recv, r.count, r.type, comm);
    byte_run_free(&r);
    if (lc.outer != 1)
        unpack_blocks(recv, out, lc, G);
}

/* ---- point to point ------------------------------------------------------ */

void shd_ppermute(const void *in, void *out, size_t bytes, int shift,
                  const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    bool moves = G > 1 && shift % G != 0;
    shd_trace_add("ppermute", moves ? bytes : 0);
    if (!moves) {
        memcpy(out, in, bytes);
        return;
    }
    MPI_Comm comm = shd_group_comm(axes, naxes);
    int g = shd_group_index(axes, naxes);
    sendrecv_bytes(in, bytes, mod((int64_t)g + shift, G), out, bytes,
                   mod((int64_t)g - shift, G), comm);
}

void shd_permute(const void *in, void *out, size_t bytes, int dest, int src)
{
    int me = shd_world_rank(), P = shd_world_size();
    if (dest < 0 || dest >= P || src < 0 || src >= P)
        shd_fatal("permute: rank %d sends to %d and receives from %d, but "
                  "there are %d ranks", me, dest, src, P);
    shd_trace_add("permute", dest == me ? 0 : bytes);
    if (dest == me && src == me) {
        memcpy(out, in, bytes);
        return;
    }
    sendrecv_bytes(in, bytes, dest, out, bytes, src, MPI_COMM_WORLD);
}

/* ---- local block moves --------------------------------------------------- */

void shd_slice_block(const void *in, void *out, size_t elem, int rank,
                     const int64_t *shape, int dim, int parts, int index)
{
    layout l = layout_of(rank, shape, dim, elem, "slice_block");
    if (parts < 1 || l.rows % parts != 0 || index < 0 || index >= parts)
        shd_fatal("slice_block: block %d of %d along dim %d of size %lld",
                  index, parts, dim, (long long)l.rows);
    int64_t b = l.rows / parts;
    copy_rows(in, l.rows, index * b, out, b, 0, l.outer, b, l.inner);
}

void shd_embed_block(const void *in, void *out, size_t elem, int rank,
                     const int64_t *shape, int dim, int parts, int index)
{
    layout l = layout_of(rank, shape, dim, elem, "embed_block");
    if (parts < 1 || index < 0 || index >= parts)
        shd_fatal("embed_block: block %d of %d", index, parts);
    size_t total = (size_t)shd_shape_count(rank, shape) * elem * (size_t)parts;
    memset(out, 0, total);
    copy_rows(in, l.rows, 0, out, l.rows * parts, index * l.rows, l.outer,
              l.rows, l.inner);
}
