/* blockmap.c: the element runs a block move sends between two ranks.
 *
 * A rank's block of a layout is a box of the global array. In row-major
 * (flat) order a box is a sorted list of disjoint runs: the dims after the
 * last partially covered dim are whole, so each run is that dim's block
 * times their size, and it is contiguous in the rank's local buffer too.
 * The pieces rank s sends to rank r are the intersections of s's runs in
 * the source layout with r's runs in the target layout, found by merging
 * the two sorted lists: no element is visited, so planning costs the
 * number of runs, not of elements.
 */
#include "blockmap.h"

typedef struct {
    int rank;
    int64_t shape[SHD_BM_MAX], off[SHD_BM_MAX], len[SHD_BM_MAX];
    int64_t gstride[SHD_BM_MAX], lstride[SHD_BM_MAX];
    int k;                 /* last partially covered dim, or -1 */
    int64_t runlen;        /* elements per run */
} Box;

typedef struct {
    const Box *b;
    int64_t idx[SHD_BM_MAX];   /* position among the runs: dims 0..k-1 within the box */
    int64_t start, local;      /* the current run */
    bool done;
} Runs;

static void coords_of(const shd_bm_mesh *m, int rank, int *c)
{
    for (int a = m->naxes - 1; a >= 0; a--) {
        c[a] = rank % m->sizes[a];
        rank /= m->sizes[a];
    }
}

static void box_of(const shd_bm_mesh *m, const shd_bm_layout *l, const int *c, Box *b)
{
    b->rank = l->rank;
    int64_t gs = 1, ls = 1;
    for (int d = l->rank - 1; d >= 0; d--) {
        int64_t parts = 1, g = 0;
        for (int i = 0; i < l->naxes[d]; i++) {
            int a = l->axes[d][i];
            parts *= m->sizes[a];
            g = g * m->sizes[a] + c[a];
        }
        b->shape[d] = l->shape[d];
        b->len[d] = l->shape[d] / parts;
        b->off[d] = g * b->len[d];
        b->gstride[d] = gs;
        b->lstride[d] = ls;
        gs *= l->shape[d];
        ls *= b->len[d];
    }
    b->k = -1;
    for (int d = 0; d < l->rank; d++)
        if (b->len[d] < b->shape[d])
            b->k = d;
    b->runlen = b->k < 0 ? gs : b->len[b->k] * b->gstride[b->k];
}

static void runs_at(Runs *r)
{
    const Box *b = r->b;
    r->start = 0;
    r->local = 0;
    for (int d = 0; d < b->k; d++) {
        r->start += (b->off[d] + r->idx[d]) * b->gstride[d];
        r->local += r->idx[d] * b->lstride[d];
    }
    if (b->k >= 0)
        r->start += b->off[b->k] * b->gstride[b->k];
}

static void runs_begin(Runs *r, const Box *b)
{
    r->b = b;
    for (int d = 0; d < SHD_BM_MAX; d++)
        r->idx[d] = 0;
    r->done = b->runlen == 0;
    runs_at(r);
}

static void runs_next(Runs *r)
{
    const Box *b = r->b;
    int d = b->k - 1;
    for (; d >= 0; d--) {
        if (++r->idx[d] < b->len[d])
            break;
        r->idx[d] = 0;
    }
    if (d < 0) {
        r->done = true;
        return;
    }
    runs_at(r);
}

void shd_bm_pieces(const shd_bm_mesh *m, const shd_bm_layout *from, const shd_bm_layout *to, int s, int r,
                   shd_bm_piece_fn fn, void *arg)
{
    int cs[SHD_BM_MAX] = {0}, cr[SHD_BM_MAX] = {0};
    coords_of(m, s, cs);
    coords_of(m, r, cr);
    unsigned sharding = 0;
    for (int d = 0; d < from->rank; d++)
        for (int i = 0; i < from->naxes[d]; i++)
            sharding |= 1u << from->axes[d][i];
    for (int a = 0; a < m->naxes; a++)
        if (!(sharding & (1u << a)) && cs[a] != cr[a])
            return;
    Box bs, br;
    box_of(m, from, cs, &bs);
    box_of(m, to, cr, &br);
    Runs a, b;
    runs_begin(&a, &bs);
    runs_begin(&b, &br);
    while (!a.done && !b.done) {
        int64_t aend = a.start + bs.runlen, bend = b.start + br.runlen;
        int64_t lo = a.start > b.start ? a.start : b.start, hi = aend < bend ? aend : bend;
        if (lo < hi)
            fn(arg, a.local + (lo - a.start), b.local + (lo - b.start), hi - lo);
        if (aend <= bend)
            runs_next(&a);
        if (bend <= aend)
            runs_next(&b);
    }
}

static void count_piece(void *arg, int64_t src, int64_t dst, int64_t len)
{
    (void)src;
    (void)dst;
    *(int64_t *)arg += len;
}

int64_t shd_bm_sent(const shd_bm_mesh *m, const shd_bm_layout *from, const shd_bm_layout *to, int s)
{
    int world = 1;
    for (int a = 0; a < m->naxes; a++)
        world *= m->sizes[a];
    int64_t n = 0;
    for (int r = 0; r < world; r++)
        if (r != s)
            shd_bm_pieces(m, from, to, s, r, count_piece, &n);
    return n;
}
