// RANKS: 1 2 3 4 8
/* test_shift: shd_shift over each group of a 2-D mesh, along each dim of a
 * rank-3 array: one source at offsets before, inside and beyond the output
 * (with and without fill), sources and outputs split over the group or
 * replicated, and several sources placed side by side (a concatenation).
 * Every output row must be the source row it maps to (zeros with fill,
 * untouched without), and the trace must count exactly the bytes of the
 * rows this rank's blocks send to other ranks.
 */
#include "check.h"

enum { A = 3, B = 2 };   /* the dims around the shifted one (A before, B after, moved to suit dim) */

typedef struct {
    int dim;
    int64_t rows;        /* the shifted dim's local size */
    int64_t shape[3];
} layout;

static layout make_layout(int dim, int64_t rows)
{
    layout l = { dim, rows, { A, B, 2 } };
    l.shape[dim] = rows;
    return l;
}

static int64_t count(const layout *l) { return l->shape[0] * l->shape[1] * l->shape[2]; }

/* The value of source s at global row g and the other coordinates. */
static double value(int s, int64_t g, int64_t o, int64_t i)
{
    return 1 + s * 100000 + g * 100 + o * 10 + i;
}

/* Fills a local block of source s holding global rows from row0. */
static void fill_block(double *p, const layout *l, int s, int64_t row0)
{
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < l->dim; d++)
        outer *= l->shape[d];
    for (int d = l->dim + 1; d < 3; d++)
        inner *= l->shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t r = 0; r < l->rows; r++)
            for (int64_t i = 0; i < inner; i++)
                p[(o * l->rows + r) * inner + i] = value(s, row0 + r, o, i);
}

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

typedef struct {
    int nsrc;
    int64_t n_src[3], offset[3], n_out;
    bool src_split, out_split, fill;
} plan;

static void run(const test_group *grp, int dim, const plan *pl)
{
    int G = shd_group_size(grp->axes, grp->n), me = shd_group_index(grp->axes, grp->n);
    int64_t bo = pl->out_split ? pl->n_out / G : pl->n_out, olo = pl->out_split ? me * bo : 0;
    layout lo = make_layout(dim, bo);
    double *out = malloc((size_t)count(&lo) * sizeof *out);
    double *src[3];
    int64_t sent = 0, row_elems = count(&lo) / bo;
    for (int s = 0; s < pl->nsrc; s++) {
        int64_t bi = pl->src_split ? pl->n_src[s] / G : pl->n_src[s], slo = pl->src_split ? me * bi : 0;
        layout ls = make_layout(dim, bi);
        src[s] = malloc((size_t)count(&ls) * sizeof *src[s]);
        fill_block(src[s], &ls, s, slo);
        for (int q = 0; q < G && pl->src_split; q++)
            if (q != me)
                sent += overlap(slo + pl->offset[s], slo + bi + pl->offset[s], pl->out_split ? q * bo : 0,
                                pl->out_split ? (q + 1) * bo : pl->n_out);
    }
    for (int64_t k = 0; k < count(&lo); k++)
        out[k] = -7;
    uint64_t b0 = shd_trace_bytes("shift"), c0 = shd_trace_count("shift");
    shd_shift((const void *const *)src, pl->nsrc, pl->n_src, pl->src_split, pl->offset, out, pl->n_out,
              pl->out_split, pl->fill, true, sizeof(double), 3, lo.shape, dim, grp->axes, grp->n);
    CHECK(shd_trace_count("shift") - c0 == 1, "shift counted once");
    CHECK(shd_trace_bytes("shift") - b0 == (uint64_t)(sent * row_elems * 8), "shift %s dim %d: %llu bytes, expected %lld",
          grp->name, dim, (unsigned long long)(shd_trace_bytes("shift") - b0), (long long)(sent * row_elems * 8));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++)
        outer *= lo.shape[d];
    for (int d = dim + 1; d < 3; d++)
        inner *= lo.shape[d];
    int bad = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t r = 0; r < bo; r++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t g = olo + r;
                double want = pl->fill ? 0 : -7;
                for (int s = 0; s < pl->nsrc; s++)
                    if (g - pl->offset[s] >= 0 && g - pl->offset[s] < pl->n_src[s])
                        want = value(s, g - pl->offset[s], o, i);
                bad += out[(o * bo + r) * inner + i] != want;
            }
    CHECK(bad == 0, "shift %s dim %d nsrc %d offset %lld n_out %lld src_split %d out_split %d fill %d: %d wrong",
          grp->name, dim, pl->nsrc, (long long)pl->offset[0], (long long)pl->n_out, pl->src_split, pl->out_split,
          pl->fill, bad);
    for (int s = 0; s < pl->nsrc; s++)
        free(src[s]);
    free(out);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const int64_t offsets[] = { 0, 1, -1, 3, -5, 7, 12, -12, 40 };
    for (int g = 0; g < NGROUPS; g++) {
        const test_group *grp = &k_groups[g];
        int64_t G = shd_group_size(grp->axes, grp->n);
        for (int dim = 0; dim < 3; dim++) {
            for (size_t k = 0; k < sizeof offsets / sizeof *offsets; k++)
                for (int mode = 0; mode < 3; mode++)
                    for (int fill = 0; fill < 2; fill++) {
                        /* mode 0: split -> split, 1: split -> replicated, 2: replicated -> split */
                        plan p = { 1, { 4 * G }, { offsets[k] }, 2 * G, mode != 2, mode != 1, fill };
                        run(grp, dim, &p);
                        p.n_out = 6 * G;
                        run(grp, dim, &p);
                    }
            /* concatenations: sources side by side, split over the group */
            plan c = { 3, { 2 * G, G, 3 * G }, { 0, 2 * G, 3 * G }, 6 * G, true, true, false };
            run(grp, dim, &c);
            plan c2 = { 2, { G, G }, { 0, G }, 2 * G, true, false, false };
            run(grp, dim, &c2);
        }
    }
    return finish("test_shift");
}
