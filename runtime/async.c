/* async.c: reductions started where their operands are final and finished
 * where their results are first used (the compiler's overlap pass,
 * compiler/overlap.c, places both), moved while the program computes.
 *
 * A bucket is one request: the generated code opens it (shd_async_begin),
 * adds its members (shd_async_add: an array whose reduced values go to a
 * buffer given now; shd_async_add_window: an update of a window of an
 * array given only at the wait, set or added into it, in the order the
 * requests were started), and starts it (shd_async_start): the members are
 * copied into the request's staging buffer, contiguous, and the request is
 * queued. shd_async_wait(site) waits for every request of that site that
 * is still outstanding, oldest first, and writes each member where it
 * belongs. A site is one start instruction of the program: its requests
 * (one per loop iteration when the start is in a loop body and the wait
 * after the loop) are all waited at its wait.
 *
 * Buckets move in the order they were started, which every rank does
 * alike (SPMD), so the groups' collectives match without tags, each on
 * its own duplicate of the group's communicator (the main thread's
 * collectives never match its messages): from 64 KiB a ring
 * (reduce-scatter, then all-gather: each rank sends 2(G-1)/G of the bucket
 * whatever MPI's default would pick), in 60 KiB messages that Open MPI
 * sends eagerly over TCP; below that MPI_Iallreduce. A bf16 bucket always
 * takes the ring, whose steps add each pair in f32 and round once
 * (shd_reduce_into; MPI has no bf16 sum), as the blocking ring does
 * (collectives.c): the same additions in the same order. A request is a
 * machine (advance) moved by progress calls, made by (SHD_OVERLAP):
 *  - thread (the default): a communication thread (MPI_THREAD_MULTIPLE),
 *    sleeping in nanosleep between its MPI_Test calls (2 us doubling to
 *    100 us), the main thread waiting on a condition variable; without
 *    MPI_THREAD_MULTIPLE, progress;
 *  - progress: the runtime's kernels between each other (shd_gemm, the
 *    end of each span of the generated code), and a wait;
 *  - sync (0): each bucket in the main thread when it is started.
 *
 * A bf16 bucket of f32 members (--reduce-dtype=bf16: SHD_ASYNC_NARROW,
 * shd_async_add_narrow) rounds each member to bf16 (nearest even) as it
 * is staged and widens the sums (exactly) into the f32 destinations at the
 * wait: half the bytes on the wire, each value rounded once at the start
 * and once at each of the ring's G-1 additions (PyTorch DDP's
 * bf16_compress_hook, FSDP's reduce_dtype).
 *
 * A reduce-scatter bucket (shd_async_begin_scatter, shd_async_add_scatter)
 * is packed at its start so that chunk k holds every member's block k
 * along its split dim, and runs only the ring's first half: rank g keeps
 * chunk g, its members' blocks of the sum.
 *
 * An all-gather bucket (shd_async_begin_gather, shd_async_add_gather: a
 * layer loop's parameters prefetched an iteration ahead) puts rank g's
 * blocks in chunk g at its start and runs only the ring's second half
 * (each rank sends (G-1)/G of the bucket; MPI_Iallgather below 64 KiB);
 * its wait places each member's G blocks along its dim in the wait's
 * destinations (none: a drain, which only lets the request go).
 *
 * Every start adds one shd_trace_add("all_reduce", 2(G-1)n/G) for the
 * bucket's n bytes ("reduce_scatter" and "all_gather", (G-1)n/G; explain's
 * formula for the start instruction); with
 * SHD_TRACE=FILE.json the thread's collectives are spans on the rank's
 * second track and the main thread's waits are "wait" spans.
 *
 * Invariants: a request's staging buffer is touched only by the thread
 * between its start and its completion, and only by the main thread
 * otherwise; every request is waited before the program ends (the compiler
 * places a wait for every start, in the same function).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shdrt_internal.h"

enum { RING_MIN_BYTES = 64 << 10, SEGMENT_BYTES = 256 << 20, PIECE_BYTES = 60 << 10 };

typedef struct {
    int kind;                        /* SHD_ASYNC_* */
    int target;                      /* window: its destination's index in the wait's list */
    void *dst;                       /* plain: where the reduced values go */
    size_t off, count;               /* elements, in the staging buffer */
    int rank;                        /* window: */
    int64_t dshape[SHD_MAX_RANK], sshape[SHD_MAX_RANK];
    int64_t d0[SHD_MAX_RANK], s0[SHD_MAX_RANK], cnt[SHD_MAX_RANK];
    bool empty;                      /* the window misses this rank's block */
    /* a reduce-scatter's member: the operand, packed at the start */
    const void *src;
    int sdim, frank;                 /* the dim split over the group, the operand's rank */
    int64_t full[SHD_MAX_RANK];      /* the operand's local shape (a gather's: its block's) */
    size_t poff;                     /* its block's offset in each rank's chunk */
} member;

typedef struct request {
    struct request *next;            /* in the outstanding list, in start order */
    struct request *qnext;           /* in the thread's queue */
    int site, line;
    shd_dtype dt;
    shd_redop op;
    MPI_Comm comm;
    int g, G;
    char axes[24];
    char *buf;
    size_t count, cap;               /* elements; bytes of buf */
    bool scatter;                    /* a reduce-scatter: rank g keeps chunk g of the sum */
    bool gather;                     /* an all-gather: chunk g is rank g's blocks */
    size_t csum;                     /* a scatter's chunk: its members' blocks, elements */
    member *m;
    int n;
    size_t capm;
    bool done;
    /* the machine (advance) */
    int phase, step, nrq;
    size_t seg;                      /* elements of buf before the current segment */
    MPI_Request *rq;
    size_t caprq;
    char *tmp, *recv_at;
    size_t tmpcap, recv_n;
    int64_t t0;
    char *wide;                      /* a widening member's f32 values at the wait (main thread) */
    size_t widecap;
} request;

enum { PHASE_NEW, PHASE_SMALL, PHASE_RS, PHASE_AG, PHASE_DONE };
enum { MODE_SYNC, MODE_THREAD, MODE_PROGRESS };

static long g_poll_max = 100000;     /* SHD_ASYNC_POLL_NS: the thread's longest sleep */
bool shd_async_active = false;

typedef struct {
    int axes[SHD_MAX_AXES], naxes;
    MPI_Comm comm;
} async_comm;

static struct {
    bool wanted, started, stop;
    int mode;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    request *queue, *qtail;          /* started, not yet taken by the thread */
    request *out, *otail;            /* started, not yet waited */
    request *spare;                  /* waited: kept for their buffers */
    request *open;                   /* between shd_async_begin and shd_async_start */
    async_comm *comms;
    size_t ncomms, capcomms;
} g_as = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

void shd_async_enable(void) { g_as.wanted = true; }

/* MPI_THREAD_MULTIPLE is asked for only where the thread may run (it makes
 * every MPI call take locks): a program with buckets, unless this rank's
 * SHD_OVERLAP says progress or sync. */
bool shd_async_wanted(void)
{
    const char *v = getenv("SHD_OVERLAP");
    return g_as.wanted && !(v && (!strcmp(v, "progress") || !strcmp(v, "sync") || !strcmp(v, "0")));
}

/* ---- the reduction: a machine advanced by progress calls ------------------ */

static void sleep_ns(long ns)
{
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static size_t chunk_off(size_t count, int G, int i)
{
    size_t q = count / (size_t)G, r = count % (size_t)G;
    return (size_t)i * q + ((size_t)i < r ? (size_t)i : r);
}

static int mod(int a, int m) { return ((a % m) + m) % m; }

/* Posts the exchange of r's current ring step: the chunk it sends to the
 * next rank and the one it receives from the previous (into tmp while
 * reducing, in place while gathering). */
static void post_step(request *r)
{
    size_t es = shd_dtype_size(r->dt), seg = r->scatter || r->gather ? r->count : SEGMENT_BYTES / es;
    size_t base = r->seg, n = r->count - base < seg ? r->count - base : seg;
    char *b = r->buf + base * es;
    int g = r->g, G = r->G, s = r->step, sc, rc;
    if (r->phase == PHASE_RS) {
        sc = mod(g - s - 1, G);
        rc = mod(g - s - 2, G);
    } else {
        sc = mod(g - s, G);
        rc = mod(g - s - 1, G);
    }
    size_t so = chunk_off(n, G, sc), sn = chunk_off(n, G, sc + 1) - so;
    size_t ro = chunk_off(n, G, rc), rn = chunk_off(n, G, rc + 1) - ro;
    r->recv_at = b + ro * es;
    r->recv_n = rn;
    char *into = r->phase == PHASE_RS ? r->tmp : r->recv_at;
    /* In pieces that MPI sends eagerly over TCP (below btl_tcp_eager_limit,
     * 64 KiB with its header): a large message's rendezvous waits for the
     * peer's answer, which queues behind the peer's own large message in the
     * same connection, and the exchange runs one direction at a time. */
    size_t rb = rn * es, sb = sn * es, np = (rb > sb ? rb : sb) / PIECE_BYTES + 1;
    if (2 * np > r->caprq) {
        r->rq = shd_mem(r->rq, 2 * np * sizeof *r->rq, "an async all-reduce's messages");
        r->caprq = 2 * np;
    }
    int k = 0;
    for (size_t off = 0; off < rb; off += PIECE_BYTES)
        MPI_Irecv(into + off, (int)(rb - off < PIECE_BYTES ? rb - off : PIECE_BYTES), MPI_BYTE, mod(g - 1, G), 0x5e,
                  r->comm, &r->rq[k++]);
    for (size_t off = 0; off < sb; off += PIECE_BYTES)
        MPI_Isend(b + so * es + off, (int)(sb - off < PIECE_BYTES ? sb - off : PIECE_BYTES), MPI_BYTE, mod(g + 1, G),
                  0x5e, r->comm, &r->rq[k++]);
    r->nrq = k;
}

/* What a rank sends for r (explain's formula for its start): 2(G-1)/G of
 * the bucket for an all-reduce, (G-1)/G for a reduce-scatter or an
 * all-gather. */
static size_t sent_bytes(const request *r)
{
    size_t n = r->count * shd_dtype_size(r->dt);
    return (r->scatter || r->gather ? 1 : 2) * (size_t)(r->G - 1) * n / (size_t)r->G;
}

static const char *kind_name(const request *r)
{
    return r->scatter ? "reduce_scatter" : r->gather ? "all_gather" : "all_reduce";
}

/* Advances r as far as its messages allow without blocking (block: waits
 * for them); true when it is complete. */
static bool advance(request *r, bool block)
{
    size_t es = shd_dtype_size(r->dt);
    for (;;) {
        if (r->nrq) {
            int flag = 1;
            if (block)
                MPI_Waitall(r->nrq, r->rq, MPI_STATUSES_IGNORE);
            else
                MPI_Testall(r->nrq, r->rq, &flag, MPI_STATUSES_IGNORE);
            if (!flag)
                return false;
            r->nrq = 0;
            if (r->phase == PHASE_SMALL)
                r->phase = PHASE_DONE;
            else {
                if (r->phase == PHASE_RS)
                    shd_reduce_into(r->recv_at, r->tmp, r->recv_n, r->dt, r->op);
                r->step++;
            }
        }
        switch (r->phase) {
        case PHASE_NEW:
            if (r->G == 1 || r->count == 0) {
                r->phase = PHASE_DONE;
                continue;
            }
            r->t0 = shd_timeline_now();
            if (r->gather) {   /* chunk g is this rank's: the ring's second half */
                if (r->count * es < RING_MIN_BYTES) {
                    if (!r->caprq) {
                        r->rq = shd_mem(NULL, 2 * sizeof *r->rq, "an async all-gather's messages");
                        r->caprq = 2;
                    }
                    r->phase = PHASE_SMALL;
                    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->buf, (int)r->csum, shd_mpi_type(r->dt),
                                   r->comm, &r->rq[0]);
                    r->nrq = 1;
                    continue;
                }
                r->phase = PHASE_AG;
                r->seg = 0;
                r->step = 0;
                post_step(r);
                continue;
            }
            if (r->count * es < RING_MIN_BYTES && !r->scatter && r->dt != SHD_BF16) {
                if (!r->caprq) {
                    r->rq = shd_mem(NULL, 2 * sizeof *r->rq, "an async all-reduce's messages");
                    r->caprq = 2;
                }
                r->phase = PHASE_SMALL;
                MPI_Iallreduce(MPI_IN_PLACE, r->buf, (int)r->count, shd_mpi_type(r->dt), shd_mpi_op(r->dt, r->op),
                               r->comm, &r->rq[0]);
                r->nrq = 1;
                continue;
            }
            size_t seg = r->scatter ? r->count : SEGMENT_BYTES / es;   /* a scatter's chunks are its ranks' */
            size_t chunk = (seg < r->count ? seg : r->count) / (size_t)r->G + 1;
            if (chunk * es > r->tmpcap) {
                r->tmp = shd_mem(r->tmp, chunk * es, "an async all-reduce's chunk");
                r->tmpcap = chunk * es;
            }
            r->phase = PHASE_RS;
            r->seg = 0;
            r->step = 0;
            post_step(r);
            continue;
        case PHASE_RS:
        case PHASE_AG:
            if (r->step == r->G - 1) {
                if ((r->phase == PHASE_RS && r->scatter) || r->gather) {
                    r->phase = PHASE_DONE;
                    continue;
                } else if (r->phase == PHASE_RS) {
                    r->phase = PHASE_AG;
                } else {
                    r->seg += SEGMENT_BYTES / es;
                    if (r->seg >= r->count) {
                        r->phase = PHASE_DONE;
                        continue;
                    }
                    r->phase = PHASE_RS;
                }
                r->step = 0;
            }
            post_step(r);
            continue;
        case PHASE_SMALL:
            continue;   /* its one request is posted */
        case PHASE_DONE:
            if (r->G > 1 && r->count)
                shd_timeline_async(kind_name(r), r->axes, r->t0, shd_timeline_now(), sent_bytes(r), r->line);
            return true;
        }
    }
}

/* The thread: each request in turn, sleeping in the kernel between its
 * progress calls (2 us doubling to 100 us). */
static void *thread_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_as.mu);
    for (;;) {
        while (!g_as.queue && !g_as.stop)
            pthread_cond_wait(&g_as.work, &g_as.mu);
        request *r = g_as.queue;
        if (!r)
            break;
        g_as.queue = r->qnext;
        if (!g_as.queue)
            g_as.qtail = NULL;
        pthread_mutex_unlock(&g_as.mu);
        for (long ns = 2000; !advance(r, false); ns = ns < g_poll_max ? 2 * ns : g_poll_max)
            if (g_poll_max > 0)
                sleep_ns(ns < g_poll_max ? ns : g_poll_max);
        pthread_mutex_lock(&g_as.mu);
        r->done = true;
        pthread_cond_broadcast(&g_as.done);
    }
    pthread_mutex_unlock(&g_as.mu);
    return NULL;
}

/* Progress mode: the queue's requests advanced in order, as far as they
 * go without blocking (the runtime's kernels call this between them). */
/* Advances the oldest queued request (block: to its end); true when it
 * completed and left the queue. */
static bool advance_head(bool block)
{
    request *r = g_as.queue;
    if (!advance(r, block))
        return false;
    r->done = true;
    g_as.queue = r->qnext;
    if (!g_as.queue) {
        g_as.qtail = NULL;
        shd_async_active = false;
    }
    return true;
}

void shd_async_progress_slow(void)
{
    while (g_as.queue && advance_head(false))
        ;
}

/* ---- set-up ---------------------------------------------------------------- */

void shd_async_init(int provided)
{
    if (!g_as.wanted)
        return;
    int mode = MODE_THREAD, all = 0;
    if (shd_world_rank() == 0) {
        const char *v = getenv("SHD_OVERLAP");
        if (v && (!strcmp(v, "0") || !strcmp(v, "sync")))
            mode = MODE_SYNC;
        else if (v && !strcmp(v, "progress"))
            mode = MODE_PROGRESS;
        else if (v && *v && strcmp(v, "1") != 0 && strcmp(v, "thread") != 0)
            shd_fatal("SHD_OVERLAP=%s: expected 'thread' (1, the default), 'progress' or 'sync' (0)", v);
    }
    MPI_Bcast(&mode, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int threads = provided >= MPI_THREAD_MULTIPLE;
    MPI_Allreduce(&threads, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);   /* every rank alike */
    g_as.mode = mode == MODE_THREAD && !all ? MODE_PROGRESS : mode;
    const char *pm = getenv("SHD_ASYNC_POLL_NS");
    if (pm && *pm) {
        char *end;
        errno = 0;
        long v = strtol(pm, &end, 10);
        if (*end || errno || v < 0 || v > 999999999)
            shd_fatal("SHD_ASYNC_POLL_NS=%s: expected nanoseconds from 0 to 999999999", pm);
        g_poll_max = v;
    }
}

void shd_async_fini(void)
{
    if (g_as.started) {
        pthread_mutex_lock(&g_as.mu);
        g_as.stop = true;
        pthread_cond_signal(&g_as.work);
        pthread_mutex_unlock(&g_as.mu);
        pthread_join(g_as.thread, NULL);
        g_as.started = false;
    }
    for (request *r = g_as.spare, *next; r; r = next) {
        next = r->next;
        free(r->buf);
        free(r->m);
        free(r->tmp);
        free(r->wide);
        free(r->rq);
        free(r);
    }
    g_as.spare = NULL;
    for (size_t i = 0; i < g_as.ncomms; i++)
        MPI_Comm_free(&g_as.comms[i].comm);
    free(g_as.comms);
    g_as.comms = NULL;
    g_as.ncomms = g_as.capcomms = 0;
}

/* The thread's duplicate of the group's communicator, made on first use
 * (collectively, in program order, as shd_group_comm's). */
static MPI_Comm async_comm_of(const int *axes, int naxes)
{
    for (size_t i = 0; i < g_as.ncomms; i++)
        if (g_as.comms[i].naxes == naxes && memcmp(g_as.comms[i].axes, axes, sizeof(int) * (size_t)naxes) == 0)
            return g_as.comms[i].comm;
    g_as.comms = shd_mem_grow(g_as.comms, &g_as.capcomms, g_as.ncomms + 1, sizeof *g_as.comms, "async communicators");
    async_comm *c = &g_as.comms[g_as.ncomms++];
    memset(c, 0, sizeof *c);
    memcpy(c->axes, axes, sizeof(int) * (size_t)naxes);
    c->naxes = naxes;
    MPI_Comm_dup(shd_group_comm(axes, naxes), &c->comm);
    return c->comm;
}

/* ---- the generated code's calls ---------------------------------------------- */

void shd_async_begin(int site, shd_dtype dt, shd_redop op, const int *axes, int naxes)
{
    if (naxes > SHD_MAX_AXES)
        shd_fatal("async all-reduce: %d axes", naxes);
    request *r = g_as.spare;
    if (r)
        g_as.spare = r->next;
    else
        r = shd_mem_zero(1, sizeof *r, "an async all-reduce");
    r->next = r->qnext = NULL;
    r->site = site;
    r->dt = dt;
    r->op = op;
    r->G = shd_group_size(axes, naxes);
    r->g = shd_group_index(axes, naxes);
    r->comm = r->G > 1 ? async_comm_of(axes, naxes) : MPI_COMM_NULL;
    size_t used = 0;
    r->axes[0] = 0;
    for (int i = 0; i < naxes && used + 2 < sizeof r->axes; i++)
        used += (size_t)snprintf(r->axes + used, sizeof r->axes - used, "%s%s", i ? "," : "", shd_axis_name(axes[i]));
    r->count = 0;
    r->n = 0;
    r->scatter = false;
    r->gather = false;
    r->csum = 0;
    r->done = false;
    r->phase = PHASE_NEW;
    r->nrq = 0;
    g_as.open = r;
}

static member *add_member(size_t count)
{
    request *r = g_as.open;
    if (!r)
        shd_fatal("async all-reduce: a member outside a bucket");
    r->m = shd_mem_grow(r->m, &r->capm, (size_t)r->n + 1, sizeof *r->m, "an async all-reduce's members");
    member *m = &r->m[r->n++];
    memset(m, 0, sizeof *m);
    m->off = r->count;
    m->count = count;
    size_t es = shd_dtype_size(r->dt), need = (r->count + count) * es;
    if (need > r->cap) {
        r->buf = shd_mem(r->buf, need, "an async all-reduce's bucket of %zu bytes", need);
        r->cap = need;
    }
    r->count += count;
    return m;
}

void shd_async_begin_scatter(int site, shd_dtype dt, shd_redop op, const int *axes, int naxes)
{
    shd_async_begin(site, dt, op, axes, naxes);
    g_as.open->scatter = true;
}

/* count elements of src into the staging buffer at element off: copied,
 * or with SHD_ASYNC_NARROW f32 values rounded into a bf16 bucket. */
static void stage(request *r, size_t off, const void *src, size_t count, int kind)
{
    if (!(kind & SHD_ASYNC_NARROW)) {
        memcpy(r->buf + off * shd_dtype_size(r->dt), src, count * shd_dtype_size(r->dt));
        return;
    }
    if (r->dt != SHD_BF16 || !(kind & SHD_ASYNC_WIDEN))
        shd_fatal("internal: a narrowed async member of a %s bucket", shd_dtype_name(r->dt));
    shd_narrow_bf16((uint16_t *)r->buf + off, (int64_t)count, (const float *)src, 1, (int64_t)count);
}

void shd_async_add(const void *src, void *dst, size_t count)
{
    member *m = add_member(count);
    m->kind = SHD_ASYNC_PLAIN;
    m->dst = dst;
    stage(g_as.open, m->off, src, count, m->kind);
}

void shd_async_add_narrow(const float *src, float *dst, size_t count)
{
    member *m = add_member(count);
    m->kind = SHD_ASYNC_PLAIN | SHD_ASYNC_WIDEN | SHD_ASYNC_NARROW;
    m->dst = dst;
    stage(g_as.open, m->off, src, count, m->kind);
}

/* A window member of count elements in the staging buffer: where its
 * values go at the wait (shd_update_window's arguments). */
static member *add_window_member(size_t count, int kind, int target, int rank, const int64_t *dst_shape,
                                 const int64_t *src_shape, const int64_t *start, const int64_t *size,
                                 const int64_t *dst_off, unsigned aligned)
{
    member *m = add_member(count);
    m->kind = kind;
    m->target = target;
    m->rank = rank;
    memcpy(m->dshape, dst_shape, sizeof(int64_t) * (size_t)rank);
    memcpy(m->sshape, src_shape, sizeof(int64_t) * (size_t)rank);
    m->empty = !shd_window_box(rank, dst_shape, src_shape, start, size, dst_off, aligned, m->d0, m->s0, m->cnt);
    return m;
}

void shd_async_add_window(const void *src, int kind, int target, int rank, const int64_t *dst_shape,
                          const int64_t *src_shape, const int64_t *start, const int64_t *size, const int64_t *dst_off,
                          unsigned aligned)
{
    size_t count = (size_t)shd_shape_count(rank, src_shape);
    member *m = add_window_member(count, kind, target, rank, dst_shape, src_shape, start, size, dst_off, aligned);
    stage(g_as.open, m->off, src, count, kind);
}

/* A reduce-scatter bucket's staging: chunk k (each rank's, csum
 * elements) holds every member's block k along its split dim, in order. */
static void pack(request *r)
{
    size_t es = shd_dtype_size(r->dt), G = (size_t)r->G;
    for (int i = 0; i < r->n; i++) {
        const member *m = &r->m[i];
        size_t outer = 1, inner = 1, mid = (size_t)m->full[m->sdim];
        for (int d = 0; d < m->sdim; d++)
            outer *= (size_t)m->full[d];
        for (int d = m->sdim + 1; d < m->frank; d++)
            inner *= (size_t)m->full[d];
        size_t blk = mid / G * inner, ses = m->kind & SHD_ASYNC_NARROW ? sizeof(float) : es;
        for (size_t k = 0; k < G; k++)
            for (size_t o = 0; o < outer; o++)
                stage(r, k * r->csum + m->poff + o * blk, (const char *)m->src + (o * mid * inner + k * blk) * ses,
                      blk, m->kind);
    }
}

/* A reduce-scatter's member: src (of local shape full, frank dims) split
 * along dim sdim over the group, this rank's block of the sum set or added
 * into a window of the wait's destination (shd_async_add_window's
 * arguments, src_shape the block's shape). */
void shd_async_add_scatter(const void *src, int frank, const int64_t *full, int sdim, int kind, int target, int rank,
                           const int64_t *dst_shape, const int64_t *src_shape, const int64_t *start,
                           const int64_t *size, const int64_t *dst_off, unsigned aligned)
{
    request *r = g_as.open;
    if (!r || !r->scatter || frank > SHD_MAX_RANK || sdim < 0 || sdim >= frank || full[sdim] % r->G)
        shd_fatal("async reduce-scatter: a member of %d dims split along dim %d over %d ranks", frank, sdim,
                  r ? r->G : 0);
    size_t count = (size_t)shd_shape_count(frank, full);
    if ((size_t)shd_shape_count(rank, src_shape) * (size_t)r->G != count)
        shd_fatal("async reduce-scatter: a block of %lld elements of %zu over %d ranks",
                  (long long)shd_shape_count(rank, src_shape), count, r->G);
    member *m = add_window_member(count, kind, target, rank, dst_shape, src_shape, start, size, dst_off, aligned);
    m->src = src;
    m->sdim = sdim;
    m->frank = frank;
    memcpy(m->full, full, sizeof(int64_t) * (size_t)frank);
    m->poff = r->csum;
    r->csum += count / (size_t)r->G;
}

void shd_async_begin_gather(int site, shd_dtype dt, const int *axes, int naxes)
{
    shd_async_begin(site, dt, SHD_SUM, axes, naxes);
    g_as.open->gather = true;
}

/* A gather's member: this rank's block src (rank dims of local shape
 * shape), gathered along dim dim; copied into chunk g at the start. */
void shd_async_add_gather(const void *src, int rank, const int64_t *shape, int dim)
{
    request *r = g_as.open;
    if (!r || !r->gather || rank < 1 || rank > SHD_MAX_RANK || dim < 0 || dim >= rank)
        shd_fatal("async all-gather: a member of %d dims gathered along dim %d", rank, dim);
    size_t count = (size_t)shd_shape_count(rank, shape);
    member *m = add_member(count * (size_t)r->G);
    m->kind = SHD_ASYNC_PLAIN;
    m->src = src;
    m->sdim = dim;
    m->frank = rank;
    memcpy(m->full, shape, sizeof(int64_t) * (size_t)rank);
    m->poff = r->csum;
    r->csum += count;
}

/* An all-gather bucket's staging: chunk g (csum elements) holds this
 * rank's blocks, in order. */
static void pack_gather(request *r)
{
    size_t es = shd_dtype_size(r->dt);
    for (int i = 0; i < r->n; i++) {
        const member *m = &r->m[i];
        memcpy(r->buf + ((size_t)r->g * r->csum + m->poff) * es, m->src,
               (size_t)shd_shape_count(m->frank, m->full) * es);
    }
}

void shd_async_start(int line)
{
    request *r = g_as.open;
    g_as.open = NULL;
    r->line = line;
    size_t n = r->count * shd_dtype_size(r->dt);
    if (r->scatter)
        pack(r);
    if (r->gather)
        pack_gather(r);
    shd_trace_add(kind_name(r), sent_bytes(r));
    shd_live_adjust((int64_t)n);   /* the staged copy, until its wait (explain counts it) */
    if (g_as.out)
        g_as.otail->next = r;
    else
        g_as.out = r;
    g_as.otail = r;
    if (g_as.mode == MODE_SYNC || r->G == 1) {
        if (r->G > 1) {
            shd_span_begin(SHD_SPAN_COLLECTIVE, "collective", line);
            shd_timeline_collective(kind_name(r), sent_bytes(r));
            advance(r, true);
            shd_span_end();
        }
        r->done = true;
        return;
    }
    if (g_as.mode == MODE_PROGRESS) {
        if (g_as.qtail)
            g_as.qtail->qnext = r;
        else
            g_as.queue = r;
        g_as.qtail = r;
        shd_async_active = true;
        shd_async_progress_slow();
        return;
    }
    if (!g_as.started) {
        if (pthread_create(&g_as.thread, NULL, thread_main, NULL) != 0)
            shd_fatal("cannot start the communication thread: %s", strerror(errno));
        g_as.started = true;
    }
    pthread_mutex_lock(&g_as.mu);
    if (g_as.qtail)
        g_as.qtail->qnext = r;
    else
        g_as.queue = r;
    g_as.qtail = r;
    pthread_cond_signal(&g_as.work);
    pthread_mutex_unlock(&g_as.mu);
}

/* A gather's member i: its G blocks (block k in chunk k) placed along its
 * dim in out. */
static void unpack_gather(const request *r, const member *m, void *out)
{
    size_t es = shd_dtype_size(r->dt), outer = 1, inner = es, rows = (size_t)m->full[m->sdim], G = (size_t)r->G;
    for (int d = 0; d < m->sdim; d++)
        outer *= (size_t)m->full[d];
    for (int d = m->sdim + 1; d < m->frank; d++)
        inner *= (size_t)m->full[d];
    size_t run = rows * inner;
    for (size_t k = 0; k < G; k++) {
        const char *blk = r->buf + (k * r->csum + m->poff) * es;
        for (size_t o = 0; o < outer; o++)
            memcpy((char *)out + (o * G + k) * run, blk + o * run, run);
    }
}

/* m's bf16 values at src widened into r's f32 scratch: its count, or in
 * a reduce-scatter this rank's block of them (1/G). */
static void widen_member(request *r, const member *m, const char *src)
{
    if (r->dt != SHD_BF16)
        shd_fatal("internal: a widening async member of a %s bucket", shd_dtype_name(r->dt));
    size_t n = r->scatter ? m->count / (size_t)r->G : m->count;
    if (n * sizeof(float) > r->widecap) {
        r->wide = shd_mem(r->wide, n * sizeof(float), "an async bf16 member widened");
        r->widecap = n * sizeof(float);
    }
    shd_widen_bf16((float *)r->wide, (const uint16_t *)src, 1, (int64_t)n, (int64_t)n);
}

/* Writes r's members where they belong (dst: the wait's destinations). */
static void finish(request *r, void *const *dst, int ndst)
{
    size_t es = shd_dtype_size(r->dt);
    if (r->gather && ndst && ndst != r->n)
        shd_fatal("async all-gather: %d destinations for %d members", ndst, r->n);
    for (int i = 0; i < r->n && r->gather && ndst; i++)
        unpack_gather(r, &r->m[i], dst[i]);
    for (int i = 0; i < r->n && !r->gather; i++) {
        const member *m = &r->m[i];
        const char *src = r->buf + (r->scatter ? (size_t)r->g * r->csum + m->poff : m->off) * es;
        if ((m->kind & SHD_ASYNC_KIND) == SHD_ASYNC_PLAIN) {
            if (m->kind & SHD_ASYNC_WIDEN)   /* a narrowed f32 member: its sums widened (exact) */
                shd_widen_bf16(m->dst, (const uint16_t *)src, 1, (int64_t)m->count, (int64_t)m->count);
            else
                memcpy(m->dst, src, m->count * es);
            continue;
        }
        if (m->target < 0 || m->target >= ndst)
            shd_fatal("async all-reduce: destination %d of %d", m->target, ndst);
        if (m->empty)
            continue;
        shd_dtype dt = r->dt;
        if (m->kind & SHD_ASYNC_WIDEN) {   /* bf16 sums into an f32 destination: widened (exact) first */
            widen_member(r, m, src);
            src = r->wide;
            dt = SHD_F32;
        }
        shd_box_apply(dst[m->target], m->dshape, m->d0, src, m->sshape, m->s0, m->cnt, m->rank, dt,
                      (m->kind & SHD_ASYNC_KIND) == SHD_ASYNC_ADD);
    }
}

void shd_async_wait(int site, void *const *dst, int ndst, int line)
{
    bool waited = false;
    request **link = &g_as.out, *prev = NULL;
    while (*link) {
        request *r = *link;
        if (r->site != site) {
            prev = r;
            link = &r->next;
            continue;
        }
        if (g_as.mode == MODE_THREAD) {
            pthread_mutex_lock(&g_as.mu);
            if (!r->done && !waited) {
                pthread_mutex_unlock(&g_as.mu);
                shd_span_begin(SHD_SPAN_WAIT, "async wait", line);
                pthread_mutex_lock(&g_as.mu);
                waited = true;
            }
            while (!r->done)
                pthread_cond_wait(&g_as.done, &g_as.mu);
            pthread_mutex_unlock(&g_as.mu);
        } else if (g_as.mode == MODE_PROGRESS && !r->done) {
            if (!waited)
                shd_span_begin(SHD_SPAN_WAIT, "async wait", line);
            waited = true;
            while (!r->done)   /* the requests before it first, in order */
                advance_head(true);
        }
        finish(r, dst, ndst);
        shd_live_adjust(-(int64_t)(r->count * shd_dtype_size(r->dt)));
        *link = r->next;
        if (g_as.otail == r)
            g_as.otail = prev;
        r->next = g_as.spare;
        g_as.spare = r;
    }
    if (waited)
        shd_span_end();
}
