/* collectives.c: collectives over ordered groups of mesh axes.
 *
 * Arrays are row-major, so a collective along dim `dim` sees its input as
 * [outer][rows][inner] (outer = product of the dims before `dim`, inner = the
 * bytes of one row). Along dim 0 (outer == 1) the G blocks are contiguous
 * and MPI moves them in place. Along a later dim a block is `outer` runs,
 * described to MPI by a strided datatype (an hvector resized to one run) so
 * that MPI's own copy does the gathering and scattering; with runs of
 * 256 bytes or more that measured 10-35% faster than packing into scratch
 * first. Packing remains for shorter runs, for MPI_Reduce_scatter_block (it
 * needs contiguous blocks) and for runs too big for an int count.
 *
 * Algorithms, chosen from measurements on this machine (bench/collectives.sh
 * and platform-notes.md): reduce-scatter is a ring of MPI_Sendrecv plus a
 * local reduction, 3-5x faster than Open MPI's MPI_Reduce_scatter_block over
 * shared memory at 2, 4 and 8 ranks. All-reduce is MPI_Allreduce in place
 * below 32 MiB and a ring (reduce-scatter then all-gather, in place) from
 * 32 MiB up, where it is 15-40% faster. SHD_RS and SHD_AR (ring | mpi |
 * auto) override the choice; rank 0's choice is broadcast at start-up so
 * all ranks always run the same algorithm.
 *
 * With SHD_TRACE=FILE.json every public entry point is a timeline span
 * (timeline.c), and a group of more than one rank first meets at a barrier
 * recorded as the collective's wait.
 *
 * Invariants: a group of size 1 never calls MPI (plain copy); every call
 * adds exactly one shd_trace_add with the formula `shdc explain` uses;
 * messages over INT_MAX bytes are described by a derived datatype, never a
 * truncated count. Scratch buffers are kept (grow-only) between calls so a
 * training loop does not fault in fresh pages every step; they are not
 * counted as live buffers.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "shdrt_internal.h"

enum { ALGO_RING, ALGO_MPI, ALGO_AUTO };
enum { NSCRATCH = 3 };
enum { STRIDED_AUTO, STRIDED_DATATYPE, STRIDED_PACK };
/* Strided MPI datatypes beat packing when each run is long enough; with
 * runs of ~128 bytes (8 ranks splitting a 256-float row) Open MPI's
 * datatype engine is slower than a memcpy pack (measured with
 * bench/collectives.sh and variants). */
#define MIN_STRIDED_RUN 256

static struct {
    int rs_algo, ar_algo;
    int strided_mode;  /* STRIDED_AUTO, or forced by tests and benchmarks */
    void *scratch[NSCRATCH];
    size_t cap[NSCRATCH];
} g_coll = { .rs_algo = ALGO_RING, .ar_algo = ALGO_AUTO };

/* The float max and min as MPI ops (mpi_op), made on first use. */
static struct {
    bool ready;
    MPI_Op max[2], min[2];   /* [0] f32, [1] f64 */
} g_fops;


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
    if (strcmp(v, "auto") == 0)
        return ALGO_AUTO;
    shd_fatal("%s=%s: expected 'ring', 'mpi' or 'auto'", var, v);
}

void shd_coll_init(void)
{
    int algo[2] = { g_coll.rs_algo, g_coll.ar_algo };
    if (shd_world_rank() == 0) {
        algo[0] = parse_algo("SHD_RS", ALGO_RING);
        algo[1] = parse_algo("SHD_AR", ALGO_AUTO);
    }
    MPI_Bcast(algo, 2, MPI_INT, 0, MPI_COMM_WORLD);
    g_coll.rs_algo = algo[0];
    g_coll.ar_algo = algo[1];
}

void shd_coll_fini(void)
{
    if (g_fops.ready) {
        for (int k = 0; k < 2; k++) {
            MPI_Op_free(&g_fops.max[k]);
            MPI_Op_free(&g_fops.min[k]);
        }
        g_fops.ready = false;
    }
    for (int i = 0; i < NSCRATCH; i++) {
        free(g_coll.scratch[i]);
        g_coll.scratch[i] = NULL;
        g_coll.cap[i] = 0;
    }
}

void shd_set_collective_algo(const char *collective, const char *algo)
{
    if (strcmp(collective, "strided_blocks") == 0) {
        if (strcmp(algo, "pack") == 0)
            g_coll.strided_mode = STRIDED_PACK;
        else if (strcmp(algo, "datatype") == 0)
            g_coll.strided_mode = STRIDED_DATATYPE;
        else if (strcmp(algo, "auto") == 0)
            g_coll.strided_mode = STRIDED_AUTO;
        else
            shd_fatal("strided_blocks: expected 'pack', 'datatype' or 'auto', "
                      "not '%s'", algo);
        return;
    }
    int a;
    if (strcmp(algo, "ring") == 0)
        a = ALGO_RING;
    else if (strcmp(algo, "mpi") == 0)
        a = ALGO_MPI;
    else if (strcmp(algo, "auto") == 0)
        a = ALGO_AUTO;
    else
        shd_fatal("collective algorithm '%s': expected 'ring', 'mpi' or 'auto'", algo);
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
        if (!(g_coll.scratch[slot] = shd_mem_aligned_try(bytes)))
            shd_out_of_memory(bytes, "collective scratch");
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
    case SHD_BF16: return MPI_UINT16_T;   /* moves only: reductions are reduce3's */
    }
    shd_fatal("invalid dtype %d", (int)dt);
}

/* Bools are bytes 0/1: SUM and MAX are OR, MIN is AND. Float max and
 * min are the IEEE 754-2019 ops above, never MPI_MAX/MPI_MIN. */
static MPI_Op float_op(shd_dtype dt, shd_redop op);
static MPI_Op mpi_op(shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BF16)
        shd_fatal("internal: bf16 reductions are the ring's (reduce3), not MPI's");
    if (dt == SHD_BOOL)
        return op == SHD_MIN ? MPI_BAND : MPI_BOR;
    if ((dt == SHD_F32 || dt == SHD_F64) && op != SHD_SUM)
        return float_op(dt, op);
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

/* Max and min across ranks: for integers plain; for floats IEEE 754-2019
 * maximum and minimum (a NaN wins, -0 < +0), the local kernels' rule
 * (k_reduce.c), so a result does not depend on how the ranks are combined,
 * that is, on the mesh. MPI_MAX and MPI_MIN are neither (a NaN survives or
 * not depending on the order MPI combines the ranks in): MPI_Allreduce
 * and MPI_Reduce_scatter_block get these as user ops (mpi_op). */
#define MAXOF(a, b) ((a) >= (b) ? (a) : (b))
#define MINOF(a, b) ((a) <= (b) ? (a) : (b))
#define FMAXOF(a, b) \
    ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b) > (a) ? (b) : signbit(a) ? (b) : (a))
#define FMINOF(a, b) \
    ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b) < (a) ? (b) : signbit(a) ? (a) : (b))

#define DEFINE_REDUCE3(NAME, T, SUMEXPR, MAXOF, MINOF)                        \
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

DEFINE_REDUCE3(reduce3_f32, float, PLAIN_ADD, FMAXOF, FMINOF)
DEFINE_REDUCE3(reduce3_f64, double, PLAIN_ADD, FMAXOF, FMINOF)
DEFINE_REDUCE3(reduce3_i32, int32_t, WRAP_ADD, MAXOF, MINOF)
DEFINE_REDUCE3(reduce3_bool, uint8_t, BOOL_OR, MAXOF, MINOF)

/* bf16: each pair added (or compared) in f32 and rounded once. */
static void reduce3_bf16(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, shd_redop op)
{
    for (size_t i = 0; i < n; i++) {
        float x = shd_bf2f(a[i]), y = shd_bf2f(b[i]);
        d[i] = shd_f2bf(op == SHD_SUM ? x + y : op == SHD_MAX ? FMAXOF(x, y) : FMINOF(x, y));
    }
}

/* The float max/min as MPI user ops (commutative: the rule is). */
#define DEFINE_MPI_OP(NAME, T, OP)                                            \
    static void NAME(void *in, void *io, int *len, MPI_Datatype *t)           \
    {                                                                         \
        (void)t;                                                              \
        const T *a = in;                                                      \
        T *b = io;                                                            \
        for (int i = 0; i < *len; i++)                                        \
            b[i] = OP(a[i], b[i]);                                            \
    }
DEFINE_MPI_OP(mpi_fmax_f32, float, FMAXOF)
DEFINE_MPI_OP(mpi_fmin_f32, float, FMINOF)
DEFINE_MPI_OP(mpi_fmax_f64, double, FMAXOF)
DEFINE_MPI_OP(mpi_fmin_f64, double, FMINOF)

static MPI_Op float_op(shd_dtype dt, shd_redop op)
{
    if (!g_fops.ready) {
        MPI_Op_create(mpi_fmax_f32, 1, &g_fops.max[0]);
        MPI_Op_create(mpi_fmin_f32, 1, &g_fops.min[0]);
        MPI_Op_create(mpi_fmax_f64, 1, &g_fops.max[1]);
        MPI_Op_create(mpi_fmin_f64, 1, &g_fops.min[1]);
        g_fops.ready = true;
    }
    int k = dt == SHD_F64;
    return op == SHD_MAX ? g_fops.max[k] : g_fops.min[k];
}

/* d = a op b elementwise over n elements; d may alias a (not b). */
static void reduce3(void *d, const void *a, const void *b, size_t n,
                    shd_dtype dt, shd_redop op)
{
    switch (dt) {
    case SHD_F32: reduce3_f32(d, a, b, n, op); break;
    case SHD_F64: reduce3_f64(d, a, b, n, op); break;
    case SHD_I32: reduce3_i32(d, a, b, n, op); break;
    case SHD_BOOL: reduce3_bool(d, a, b, n, op); break;
    case SHD_BF16: reduce3_bf16(d, a, b, n, op); break;
    }
}

/* For async.c's thread: the same types, operations and local reduction
 * (sums need no made operation, so the thread never makes one). */
MPI_Datatype shd_mpi_type(shd_dtype dt) { return mpi_type(dt); }
MPI_Op shd_mpi_op(shd_dtype dt, shd_redop op) { return mpi_op(dt, op); }
void shd_reduce_into(void *d, const void *s, size_t n, shd_dtype dt, shd_redop op) { reduce3(d, d, s, n, dt, op); }

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

/* One block of G along the middle dim of [outer][G*rows][inner] (l
 * describes one block) as an MPI type: outer runs of rows*inner bytes,
 * G*rows*inner apart, resized so block g starts g extents in. False when
 * the runs are short (or packing is forced), or the sizes do not fit MPI's
 * int counts: callers then pack. */
static bool block_type(layout l, int G, MPI_Datatype *t)
{
    size_t run = (size_t)l.rows * l.inner;
    if (l.outer > INT_MAX || run > INT_MAX || g_coll.strided_mode == STRIDED_PACK ||
        (g_coll.strided_mode == STRIDED_AUTO && run < MIN_STRIDED_RUN))
        return false;
    MPI_Datatype v;
    MPI_Type_create_hvector((int)l.outer, (int)run, (MPI_Aint)(run * (size_t)G),
                            MPI_BYTE, &v);
    MPI_Type_create_resized(v, 0, (MPI_Aint)run, t);
    MPI_Type_commit(t);
    MPI_Type_free(&v);
    return true;
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

static void all_reduce_impl(void *buf, size_t count, shd_dtype dt, shd_redop op,
                    const int *axes, int naxes)
{
    size_t G = (size_t)shd_group_size(axes, naxes);
    size_t n = count * shd_dtype_size(dt);
    shd_trace_add("all_reduce", 2 * (G - 1) * n / G);
    if (G == 1 || count == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    /* bf16 always takes the ring, whose reduce3 adds in f32 (MPI has no
     * bf16 sum); two ranks round once, G ranks G-1 times. */
    bool ring = g_coll.ar_algo == ALGO_RING || dt == SHD_BF16 ||
                (g_coll.ar_algo == ALGO_AUTO && n >= SHD_AR_RING_MIN_BYTES);
    if (ring)
        allreduce_ring(buf, count, dt, op, comm, shd_group_index(axes, naxes), (int)G);
    else
        allreduce_mpi(buf, count, dt, op, comm);
}

/* ---- all-gather ---------------------------------------------------------- */

static void all_gather_impl(const void *in, void *out, shd_dtype dt, int rank,
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
    byte_run r = byte_run_make(n);
    MPI_Datatype blocks;
    if (l.outer == 1) {
        MPI_Allgather(in, r.count, r.type, out, r.count, r.type, comm);
    } else if (block_type(l, G, &blocks)) {
        /* MPI places each block straight into its strided home. */
        MPI_Allgather(in, r.count, r.type, out, 1, blocks, comm);
        MPI_Type_free(&blocks);
    } else {
        void *tmp = scratch(0, n * (size_t)G);
        MPI_Allgather(in, r.count, r.type, tmp, r.count, r.type, comm);
        unpack_blocks(tmp, out, l, G);
    }
    byte_run_free(&r);
}

/* ---- reduce-scatter ------------------------------------------------------ */

/* The G blocks of a reduce-scatter input, packed or not: outer slice o of
 * block b is the run of `run` bytes at base + b * bstride + o * slice. */
typedef struct {
    const char *base;
    int64_t outer;
    size_t run, slice, bstride;
    bool strided;   /* blocks interleave in memory (not packed, outer > 1) */
} block_set;

static block_set blocks_of(const void *in, layout l, int G, bool strided)
{
    size_t run = (size_t)(l.rows / G) * l.inner;
    block_set b = { in, l.outer, run, run, (size_t)l.outer * run, strided };
    if (strided) {
        b.slice = run * (size_t)G;
        b.bstride = run;
    }
    return b;
}

static void send_block(const block_set *b, int blk, int dest, void *recv,
                       int src, MPI_Comm comm, MPI_Datatype strided_type)
{
    const char *at = b->base + (size_t)blk * b->bstride;
    size_t bytes = (size_t)b->outer * b->run;
    if (!b->strided) {
        sendrecv_bytes(at, bytes, dest, recv, bytes, src, comm);
        return;
    }
    byte_run r = byte_run_make(bytes);
    MPI_Sendrecv(at, 1, strided_type, dest, 0x5d, recv, r.count, r.type, src,
                 0x5d, comm, MPI_STATUS_IGNORE);
    byte_run_free(&r);
}

/* dst = acc op (this rank's block blk), slice by slice. */
static void add_own_block(void *dst, const void *acc, const block_set *b,
                          int blk, shd_dtype dt, shd_redop op)
{
    size_t count = b->run / shd_dtype_size(dt);
    const char *own = b->base + (size_t)blk * b->bstride;
    for (int64_t o = 0; o < b->outer; o++)
        reduce3((char *)dst + (size_t)o * b->run, (const char *)acc + (size_t)o * b->run,
                own + (size_t)o * b->slice, count, dt, op);
}

/* Ring over the G blocks: at step s this rank sends its running sum of
 * block g-s-1 to the next rank and receives the running sum of block g-s-2
 * from the previous one, adding its own contribution; after G-1 steps it
 * holds the full sum of block g. Its own blocks are read in place (strided
 * when the dim is not the leading one), so the input is never packed. */
static void reduce_scatter_ring(const block_set *b, void *out, shd_dtype dt,
                                shd_redop op, MPI_Comm comm, int g, int G,
                                MPI_Datatype strided_type)
{
    size_t blk = (size_t)b->outer * b->run;
    int next = mod(g + 1, G), prev = mod(g - 1, G);
    char *buf[2] = { scratch(1, blk), scratch(2, blk) };
    for (int s = 0; s < G - 1; s++) {
        char *recv = buf[s % 2];
        if (s == 0)
            send_block(b, mod(g - 1, G), next, recv, prev, comm, strided_type);
        else
            sendrecv_bytes(buf[(s - 1) % 2], blk, next, recv, blk, prev, comm);
        add_own_block(s == G - 2 ? out : recv, recv, b, mod(g - s - 2, G), dt, op);
    }
}

/* What reduce_scatter and all_to_all do first: dim (described as `dimname`,
 * its layout l) must divide into the G members' blocks; the bytes moved are
 * traced; a group of one copies in to out. Returns the array's bytes, or 0
 * when nothing is left to do (one member, or an empty array). */
static size_t split_start(const char *what, const char *dimname, int dim, layout l, int G,
                          const void *in, void *out, int rank, const int64_t *shape, size_t es)
{
    if (l.rows % G != 0)
        shd_fatal("%s: %s %d has size %lld, not divisible by the group size %d",
                  what, dimname, dim, (long long)l.rows, G);
    size_t n = (size_t)shd_shape_count(rank, shape) * es;
    shd_trace_add(what, (size_t)(G - 1) * n / (size_t)G);
    if (G > 1)
        return n;
    if (n)
        memcpy(out, in, n);
    return 0;
}

static void reduce_scatter_impl(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, int dim,
                        const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    size_t es = shd_dtype_size(dt);
    layout l = layout_of(rank, shape, dim, es, "reduce_scatter");
    size_t n = split_start("reduce_scatter", "dim", dim, l, G, in, out, rank, shape, es);
    if (n == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    layout lb = { l.outer, l.rows / G, l.inner };
    size_t blk = n / (size_t)G;
    bool use_mpi = g_coll.rs_algo == ALGO_MPI && blk / es <= INT_MAX && dt != SHD_BF16;
    MPI_Datatype strided = MPI_DATATYPE_NULL;
    const void *src = in;
    /* MPI_Reduce_scatter_block needs contiguous blocks; the ring needs them
     * only when the strided block does not fit an MPI type. */
    if (l.outer != 1 && (use_mpi || !block_type(lb, G, &strided))) {
        void *p = scratch(0, n);
        pack_blocks(in, p, l, G);
        src = p;
    }
    if (use_mpi) {
        MPI_Reduce_scatter_block(src, out, (int)(blk / es), mpi_type(dt),
                                 mpi_op(dt, op), comm);
        return;
    }
    block_set b = blocks_of(src, l, G, strided != MPI_DATATYPE_NULL);
    reduce_scatter_ring(&b, out, dt, op, comm, shd_group_index(axes, naxes), G,
                        strided);
    if (strided != MPI_DATATYPE_NULL)
        MPI_Type_free(&strided);
}

/* ---- all-to-all ---------------------------------------------------------- */

/* One side of an all-to-all: contiguous blocks of `bytes`, or the strided
 * block type of l when l.outer > 1 (packing only if that does not fit). */
typedef struct {
    const void *buf;
    int count;
    MPI_Datatype type;
    bool owned, packed;
} a2a_side;

static a2a_side a2a_side_of(const void *buf, layout lb, int G, size_t bytes)
{
    a2a_side s = { buf, 0, MPI_DATATYPE_NULL, false, false };
    if (lb.outer > 1 && block_type(lb, G, &s.type)) {
        s.count = 1;
        s.owned = true;
        return s;
    }
    s.packed = lb.outer > 1;
    byte_run r = byte_run_make(bytes);
    s.count = r.count;
    s.type = r.type;
    s.owned = r.owned;
    return s;
}

static void all_to_all_impl(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int split, int concat,
                    const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes);
    size_t es = shd_dtype_size(dt);
    layout ls = layout_of(rank, shape, split, es, "all_to_all");
    (void)layout_of(rank, shape, concat, es, "all_to_all");
    size_t n = split_start("all_to_all", "split dim", split, ls, G, in, out, rank, shape, es);
    if (n == 0)
        return;
    MPI_Comm comm = shd_group_comm(axes, naxes);
    int64_t bshape[SHD_MAX_RANK];
    memcpy(bshape, shape, (size_t)rank * sizeof *shape);
    bshape[split] /= G;
    layout lc = layout_of(rank, bshape, concat, es, "all_to_all");
    layout lsb = { ls.outer, ls.rows / G, ls.inner };
    /* Block k of the split dim goes out as a strided type, block j of the
     * concat dim lands through one: MPI does the (un)packing in its copy. */
    a2a_side snd = a2a_side_of(in, lsb, G, n / (size_t)G);
    a2a_side rcv = a2a_side_of(out, lc, G, n / (size_t)G);
    if (snd.packed) {
        void *p = scratch(0, n);
        pack_blocks(in, p, ls, G);
        snd.buf = p;
    }
    void *dst = rcv.packed ? scratch(1, n) : out;
    MPI_Alltoall(snd.buf, snd.count, snd.type, dst, rcv.count, rcv.type, comm);
    if (rcv.packed)
        unpack_blocks(dst, out, lc, G);
    if (snd.owned)
        MPI_Type_free(&snd.type);
    if (rcv.owned)
        MPI_Type_free(&rcv.type);
}

/* ---- point to point ------------------------------------------------------ */

static void ppermute_impl(const void *in, void *out, size_t bytes, int shift,
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

static void permute_impl(const void *in, void *out, size_t bytes, int dest, int src)
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

/* ---- the public entry points: each a timeline span --------------------- */

/* With SHD_TRACE=FILE.json, a collective is a span whose first child is the
 * wait at a barrier of its group (timeline.c); otherwise this is one test. */
static void span_collective(const int *axes, int naxes)
{
    if (!shd_timeline_on)
        return;
    bool many = axes ? shd_group_size(axes, naxes) > 1 : shd_world_size() > 1;
    MPI_Comm comm = !many ? MPI_COMM_NULL : axes ? shd_group_comm(axes, naxes) : MPI_COMM_WORLD;
    shd_timeline_begin_collective(axes, naxes, comm);
}

void shd_all_reduce(void *buf, size_t count, shd_dtype dt, shd_redop op,
                    const int *axes, int naxes)
{
    span_collective(axes, naxes);
    all_reduce_impl(buf, count, dt, op, axes, naxes);
    shd_span_end();
}

void shd_all_gather(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int dim, const int *axes, int naxes)
{
    span_collective(axes, naxes);
    all_gather_impl(in, out, dt, rank, shape, dim, axes, naxes);
    shd_span_end();
}

void shd_reduce_scatter(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, int dim,
                        const int *axes, int naxes)
{
    span_collective(axes, naxes);
    reduce_scatter_impl(in, out, dt, op, rank, shape, dim, axes, naxes);
    shd_span_end();
}

void shd_all_to_all(const void *in, void *out, shd_dtype dt, int rank,
                    const int64_t *shape, int split, int concat,
                    const int *axes, int naxes)
{
    span_collective(axes, naxes);
    all_to_all_impl(in, out, dt, rank, shape, split, concat, axes, naxes);
    shd_span_end();
}

void shd_ppermute(const void *in, void *out, size_t bytes, int shift,
                  const int *axes, int naxes)
{
    span_collective(axes, naxes);
    ppermute_impl(in, out, bytes, shift, axes, naxes);
    shd_span_end();
}

void shd_permute(const void *in, void *out, size_t bytes, int dest, int src)
{
    span_collective(NULL, 0);
    permute_impl(in, out, bytes, dest, src);
    shd_span_end();
}
