/* redistribute.c: moving the rows of one dim that change owner.
 *
 * shd_shift is the one primitive behind slices, pads, splits,
 * concatenations, run-time slices and updates of a dim split across a group
 * of mesh axes: output row j of the dim is row j - offset[i] of source i
 * (every source covers its own rows; rows no source covers are zero when
 * `fill`, else left as they are). The sources are split over the group in
 * equal blocks (or replicated over it), and so is the output (or
 * replicated). Each rank works out, from the offsets alone, which rows of
 * its blocks land in which other rank's output block and which it receives,
 * sends exactly those with non-blocking point-to-point messages (a strided
 * MPI datatype when the dim is not the leading one), copies what stays,
 * and waits. Nothing else moves: never the whole array.
 *
 * Input: the sources' local blocks, their global row counts, the offsets
 * (the same on every rank of the group), the output's local block.
 * Output: this rank's output block. Invariant: every rank of the group
 * computes the same plan, so every message has its matching receive; one
 * call adds exactly one "shift" trace entry with the bytes this rank sent
 * (the formula shdc explain uses), and a call the compiler proved local
 * (`traced` false) sends nothing and is not counted.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

typedef struct {
    int64_t outer;   /* product of the dims before `dim` */
    size_t row;      /* bytes of one row: the dims after `dim` */
} shape_split;

static shape_split split_of(int rank, const int64_t *shape, int dim, size_t elem)
{
    if (rank < 1 || rank > SHD_MAX_RANK || dim < 0 || dim >= rank)
        shd_fatal("shift: dim %d of a rank-%d array", dim, rank);
    shape_split s = { 1, elem };
    for (int d = 0; d < dim; d++)
        s.outer *= shape[d];
    for (int d = dim + 1; d < rank; d++)
        s.row *= (size_t)shape[d];
    return s;
}

/* [lo, hi) of a block: rows [q * b, q * b + b) when split, else all n. */
static void block_of(int64_t q, bool split, int64_t b, int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = split ? q * b : 0;
    *hi = split ? *lo + b : n;
}

static bool meet(int64_t a0, int64_t a1, int64_t b0, int64_t b1, int64_t *lo, int64_t *hi)
{
    *lo = a0 > b0 ? a0 : b0;
    *hi = a1 < b1 ? a1 : b1;
    return *hi > *lo;
}

/* Rows [r0, r0 + rows) of each of `outer` slices of `total` rows: one MPI
 * datatype (outer runs of rows * row bytes, total * row bytes apart). */
static MPI_Datatype rows_type(shape_split s, int64_t total, int64_t rows)
{
    MPI_Datatype row, v;
    if (s.row > INT_MAX || rows > INT_MAX || s.outer > INT_MAX)
        shd_fatal("shift: a message of %lld rows of %zu bytes is too large", (long long)rows, s.row);
    MPI_Type_contiguous((int)s.row, MPI_BYTE, &row);
    MPI_Type_create_hvector((int)s.outer, (int)rows, (MPI_Aint)((size_t)total * s.row), row, &v);
    MPI_Type_commit(&v);
    MPI_Type_free(&row);
    return v;
}

static void copy_rows(char *dst, int64_t dtotal, int64_t d0, const char *src, int64_t stotal, int64_t s0,
                      int64_t rows, shape_split s)
{
    size_t run = (size_t)rows * s.row;
    for (int64_t o = 0; o < s.outer; o++)
        memcpy(dst + (size_t)(o * dtotal + d0) * s.row, src + (size_t)(o * stotal + s0) * s.row, run);
}

static void zero_rows(char *dst, int64_t total, int64_t r0, int64_t rows, shape_split s)
{
    if (rows <= 0)
        return;
    for (int64_t o = 0; o < s.outer; o++)
        memset(dst + (size_t)(o * total + r0) * s.row, 0, (size_t)rows * s.row);
}

/* Grow-only request and datatype arrays, so a loop allocates nothing. */
static struct {
    MPI_Request *req;
    MPI_Datatype *types;
    size_t cap_req, cap_types;
} g_shift;

static void reserve(int n)
{
    g_shift.req = shd_mem_grow(g_shift.req, &g_shift.cap_req, (size_t)n, sizeof *g_shift.req, "shift requests");
    g_shift.types = shd_mem_grow(g_shift.types, &g_shift.cap_types, (size_t)n, sizeof *g_shift.types, "shift requests");
}

static void shift_impl(const void *const *src, int nsrc, const int64_t *n_src, bool src_split, const int64_t *offset,
                       void *out, int64_t n_out, bool out_split, bool fill, bool traced, size_t elem, int rank,
                       const int64_t *shape, int dim, const int *axes, int naxes)
{
    int G = shd_group_size(axes, naxes), me = shd_group_index(axes, naxes);
    shape_split s = split_of(rank, shape, dim, elem);
    int64_t bo = out_split ? n_out / G : n_out, olo, ohi;
    if (bo != shape[dim] || (out_split && n_out % G))
        shd_fatal("shift: %lld output rows over %d ranks, but a block has %lld", (long long)n_out, G,
                  (long long)shape[dim]);
    block_of(me, out_split, bo, n_out, &olo, &ohi);
    char *o = out;
    if (fill && nsrc > 1)
        zero_rows(o, bo, 0, bo, s);
    size_t sent = 0;
    int nreq = 0;
    reserve(2 * nsrc * G + 1);
    MPI_Comm comm = src_split && traced && G > 1 ? shd_group_comm(axes, naxes) : MPI_COMM_NULL;
    for (int i = 0; i < nsrc; i++) {
        int64_t bi = src_split ? n_src[i] / G : n_src[i], lo, hi, slo, shi;
        if (src_split && n_src[i] % G)
            shd_fatal("shift: %lld source rows over %d ranks", (long long)n_src[i], G);
        const char *x = src[i];
        /* Zeros around the one source's rows (pad). */
        if (fill && nsrc == 1) {
            int64_t clo = offset[i] > olo ? offset[i] : olo, chi = offset[i] + n_src[i] < ohi ? offset[i] + n_src[i] : ohi;
            if (chi < clo)
                clo = chi = ohi;
            zero_rows(o, bo, 0, clo - olo, s);
            zero_rows(o, bo, chi - olo, ohi - chi, s);
        }
        /* What stays here. */
        block_of(me, src_split, bi, n_src[i], &slo, &shi);
        if (meet(slo + offset[i], shi + offset[i], olo, ohi, &lo, &hi))
            copy_rows(o, bo, lo - olo, x, bi, lo - offset[i] - slo, hi - lo, s);
        if (comm == MPI_COMM_NULL)
            continue;
        for (int q = 0; q < G; q++) {
            if (q == me)
                continue;
            int64_t qlo, qhi, plo, phi;
            /* My rows that land in q's block. */
            block_of(q, out_split, bo, n_out, &qlo, &qhi);
            if (meet(slo + offset[i], shi + offset[i], qlo, qhi, &lo, &hi)) {
                MPI_Datatype t = rows_type(s, bi, hi - lo);
                g_shift.types[nreq] = t;
                MPI_Isend(x + (size_t)(lo - offset[i] - slo) * s.row, 1, t, q, i, comm, &g_shift.req[nreq++]);
                sent += (size_t)(hi - lo) * (size_t)s.outer * s.row;
            }
            /* q's rows that land in my block. */
            block_of(q, src_split, bi, n_src[i], &plo, &phi);
            if (meet(plo + offset[i], phi + offset[i], olo, ohi, &lo, &hi)) {
                MPI_Datatype t = rows_type(s, bo, hi - lo);
                g_shift.types[nreq] = t;
                MPI_Irecv(o + (size_t)(lo - olo) * s.row, 1, t, q, i, comm, &g_shift.req[nreq++]);
            }
        }
    }
    if (nreq)
        MPI_Waitall(nreq, g_shift.req, MPI_STATUSES_IGNORE);
    for (int k = 0; k < nreq; k++)
        MPI_Type_free(&g_shift.types[k]);
    if (traced)
        shd_trace_add("shift", sent);
}

/* With SHD_TRACE=FILE.json a counted shift is a collective span, whose first
 * child is the wait at a barrier of its group (timeline.c). */
void shd_shift(const void *const *src, int nsrc, const int64_t *n_src, bool src_split, const int64_t *offset,
               void *out, int64_t n_out, bool out_split, bool fill, bool traced, size_t elem, int rank,
               const int64_t *shape, int dim, const int *axes, int naxes)
{
    bool span = traced && shd_timeline_on;
    if (span)
        shd_timeline_begin_collective(axes, naxes,
                                      shd_group_size(axes, naxes) > 1 ? shd_group_comm(axes, naxes) : MPI_COMM_NULL);
    shift_impl(src, nsrc, n_src, src_split, offset, out, n_out, out_split, fill, traced, elem, rank, shape, dim, axes,
               naxes);
    if (span)
        shd_span_end();
}
