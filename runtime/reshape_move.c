/* reshape_move.c: the data movement of a reshape whose blocks do not stay
 * in place: every rank gets its block of the target layout directly from
 * the ranks that hold its elements, and only the elements that change owner
 * travel (one MPI_Alltoallv over the world). No rank ever holds more than
 * its own blocks, unlike gathering the array first.
 *
 * The plan (which runs go to and come from each rank, and the buffers to
 * pack them in) is computed by blockmap.c on the first call of a call site
 * and kept in *plan, so a training loop plans and allocates once. Its bytes
 * are counted for SHD_TRACE with the same code `shdc explain` uses.
 */
#include <stdlib.h>
#include <string.h>

#include "blockmap.h"
#include "shdrt_internal.h"

typedef struct {
    int64_t off, len;      /* elements */
} Run;

typedef struct {
    Run *runs;
    int n;
    size_t cap;
} RunList;

typedef struct {
    int world;
    RunList *send, *recv;  /* per rank: runs of my source block to send, of my target block to fill */
    int *scount, *sdispl, *rcount, *rdispl;   /* bytes */
    size_t elem;
    int64_t sbytes, rbytes;
    char *sbuf, *rbuf;     /* kept for the next call of the call site */
    size_t most;           /* the most bytes any rank sends, for the trace */
} Plan;

static void push(RunList *l, int64_t off, int64_t len)
{
    l->runs = shd_mem_grow(l->runs, &l->cap, (size_t)l->n + 1, sizeof *l->runs, "reshape: planning a data movement");
    l->runs[l->n++] = (Run){off, len};
}

static void add_send(void *arg, int64_t src, int64_t dst, int64_t len)
{
    (void)dst;
    push(arg, src, len);
}

static void add_recv(void *arg, int64_t src, int64_t dst, int64_t len)
{
    (void)src;
    push(arg, dst, len);
}

static shd_bm_layout bm_layout(const shd_layout *l)
{
    shd_bm_layout b;
    memset(&b, 0, sizeof b);
    b.rank = l->rank;
    for (int d = 0; d < l->rank; d++) {
        b.shape[d] = l->shape[d];
        b.naxes[d] = l->naxes[d];
        for (int i = 0; i < l->naxes[d]; i++)
            b.axes[d][i] = l->axes[d][i];
    }
    return b;
}

static int to_int(int64_t bytes)
{
    if (bytes > 0x7fffffff)
        shd_fatal("reshape: %lld bytes to move between two ranks, more than MPI_Alltoallv counts (2 GiB); "
                  "reshape in smaller pieces",
                  (long long)bytes);
    return (int)bytes;
}

static Plan *make_plan(const shd_layout *from, const shd_layout *to, size_t elem)
{
    shd_bm_mesh m;
    shd_mesh_shape(&m.naxes, m.sizes);
    shd_bm_layout a = bm_layout(from), b = bm_layout(to);
    const char *what = "reshape: planning a data movement";
    Plan *p = shd_mem_zero(1, sizeof *p, "%s", what);
    int P = shd_world_size(), me = shd_world_rank();
    p->world = P;
    p->elem = elem;
    p->send = shd_mem_zero((size_t)P, sizeof(RunList), "%s", what);
    p->recv = shd_mem_zero((size_t)P, sizeof(RunList), "%s", what);
    p->scount = shd_mem_zero((size_t)P, sizeof(int), "%s", what);
    p->sdispl = shd_mem_zero((size_t)P, sizeof(int), "%s", what);
    p->rcount = shd_mem_zero((size_t)P, sizeof(int), "%s", what);
    p->rdispl = shd_mem_zero((size_t)P, sizeof(int), "%s", what);
    for (int r = 0; r < P; r++) {
        shd_bm_pieces(&m, &a, &b, me, r, add_send, &p->send[r]);
        shd_bm_pieces(&m, &a, &b, r, me, add_recv, &p->recv[r]);
        int64_t sn = 0, rn = 0;
        for (int k = 0; k < p->send[r].n; k++)
            sn += p->send[r].runs[k].len;
        for (int k = 0; k < p->recv[r].n; k++)
            rn += p->recv[r].runs[k].len;
        if (r == me)
            continue;    /* the own part is copied, not sent */
        p->scount[r] = to_int(sn * (int64_t)elem);
        p->rcount[r] = to_int(rn * (int64_t)elem);
        p->sdispl[r] = to_int(p->sbytes);
        p->rdispl[r] = to_int(p->rbytes);
        p->sbytes += p->scount[r];
        p->rbytes += p->rcount[r];
    }
    /* Each call counts the most any rank sends, as `shdc explain` reports
     * it, so the traced totals equal explain's on every rank. */
    unsigned long long mine = (unsigned long long)p->sbytes, most = 0;
    MPI_Allreduce(&mine, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    p->most = (size_t)most;
    p->sbuf = shd_mem(NULL, (size_t)p->sbytes + 1, "reshape: the send buffer");
    p->rbuf = shd_mem(NULL, (size_t)p->rbytes + 1, "reshape: the receive buffer");
    return p;
}

static void reshape_move_impl(const void *in, void *out, size_t elem, const shd_layout *from,
                              const shd_layout *to, void **plan)
{
    if (!*plan)
        *plan = make_plan(from, to, elem);
    Plan *p = *plan;
    int me = shd_world_rank();
    const char *src = in;
    char *dst = out;
    /* own elements: runs of the send and receive lists to myself pair up in order */
    const RunList *ss = &p->send[me], *rs = &p->recv[me];
    for (int k = 0; k < ss->n && k < rs->n; k++)
        memcpy(dst + rs->runs[k].off * (int64_t)elem, src + ss->runs[k].off * (int64_t)elem,
               (size_t)ss->runs[k].len * elem);
    shd_trace_add("reshape_move", p->most);
    if (p->world == 1)
        return;
    char *sbuf = p->sbuf, *rbuf = p->rbuf;
    for (int r = 0; r < p->world; r++) {
        if (r == me)
            continue;
        char *q = sbuf + p->sdispl[r];
        for (int k = 0; k < p->send[r].n; k++) {
            size_t n = (size_t)p->send[r].runs[k].len * elem;
            memcpy(q, src + p->send[r].runs[k].off * (int64_t)elem, n);
            q += n;
        }
    }
    MPI_Alltoallv(sbuf, p->scount, p->sdispl, MPI_BYTE, rbuf, p->rcount, p->rdispl, MPI_BYTE, MPI_COMM_WORLD);
    for (int r = 0; r < p->world; r++) {
        if (r == me)
            continue;
        const char *q = rbuf + p->rdispl[r];
        for (int k = 0; k < p->recv[r].n; k++) {
            size_t n = (size_t)p->recv[r].runs[k].len * elem;
            memcpy(dst + p->recv[r].runs[k].off * (int64_t)elem, q, n);
            q += n;
        }
    }
}

/* With SHD_TRACE=FILE.json, a span whose first child is the wait at a
 * barrier of the world (timeline.c). */
void shd_reshape_move(const void *in, void *out, size_t elem, const shd_layout *from, const shd_layout *to,
                      void **plan)
{
    shd_timeline_begin_collective(NULL, 0, shd_world_size() > 1 ? MPI_COMM_WORLD : MPI_COMM_NULL);
    reshape_move_impl(in, out, elem, from, to, plan);
    shd_span_end();
}
