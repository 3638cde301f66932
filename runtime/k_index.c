/* k_index.c: the local kernels of the indexing family: slices (static and
 * at run-time starts), zero padding, window updates, concatenation, run-time
 * index checks, gathers (take, take_along_axis), their scatter-adds, and
 * one_hot.
 *
 * Input: local blocks, row-major, with their local shapes; for gathers the
 * global size of the indexed dim and the global index of this rank's first
 * row of it (a masked lookup: rows another rank holds read as zeros, are
 * skipped by a scatter). Output: the local block of the result.
 *
 * Box copies (slice, pad, update, concatenate) merge the trailing dims that
 * are copied whole into one contiguous run and memcpy runs, so the inner
 * loop is a plain block copy. take copies one contiguous row (the dims
 * after the indexed one) per index. take_along_axis and its scatter walk
 * the result in memory order with per-dim strides (a broadcast dim has
 * stride 0).
 *
 * Invariants: no index is ever used before it is checked: an index outside
 * [-N, N) of the global dim stops every rank through shd_fatal with
 * "FILE:LINE: index I out of range for dim D of size N"; negative indices
 * count from the end, as NumPy's.
 */
#include <string.h>

#include "shdrt_internal.h"

/* ---- box copies ------------------------------------------------------------- */

/* One contiguous run of a box: copied, or (add) added element by element
 * in dtype dt. */
static void put_run(char *d, const char *s, size_t bytes, int add)
{
    if (add < 0) {
        memcpy(d, s, bytes);
        return;
    }
    switch ((shd_dtype)add) {
    case SHD_F32:
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            ((float *)d)[i] += ((const float *)s)[i];
        return;
    case SHD_F64:
        for (size_t i = 0; i < bytes / sizeof(double); i++)
            ((double *)d)[i] += ((const double *)s)[i];
        return;
    case SHD_I32:
        for (size_t i = 0; i < bytes / sizeof(int32_t); i++)
            ((int32_t *)d)[i] = (int32_t)((uint32_t)((int32_t *)d)[i] + (uint32_t)((const int32_t *)s)[i]);
        return;
    case SHD_BOOL:
        for (size_t i = 0; i < bytes; i++)
            d[i] = (char)(d[i] || s[i]);
        return;
    case SHD_BF16:
        for (size_t i = 0; i < bytes / sizeof(uint16_t); i++)
            ((uint16_t *)d)[i] = shd_f2bf(shd_bf2f(((uint16_t *)d)[i]) + shd_bf2f(((const uint16_t *)s)[i]));
        return;
    }
}

/* Copies the box `count` from src (shape ss, starting at s0) into dst
 * (shape ds, starting at d0); with add >= 0 adds it instead, in dtype add. */
static void apply_box(void *dst, const int64_t *ds, const int64_t *d0, const void *src, const int64_t *ss,
                      const int64_t *s0, const int64_t *count, int rank, size_t elem, int add)
{
    for (int d = 0; d < rank; d++)
        if (count[d] <= 0)
            return;
    /* The trailing dims copied whole, and the last partial one, are one run. */
    int j = rank - 1;
    size_t run = (size_t)count[j] * elem;
    while (j > 0 && count[j] == ds[j] && count[j] == ss[j]) {
        j--;
        run *= (size_t)count[j];
    }
    int64_t dstr[SHD_MAX_RANK], sstr[SHD_MAX_RANK];
    int64_t a = (int64_t)elem, b = (int64_t)elem;
    for (int d = rank - 1; d >= 0; d--) {
        dstr[d] = a;
        sstr[d] = b;
        a *= ds[d];
        b *= ss[d];
    }
    int64_t doff = 0, soff = 0;
    for (int d = 0; d < rank; d++) {
        doff += d0[d] * dstr[d];
        soff += s0[d] * sstr[d];
    }
    int64_t idx[SHD_MAX_RANK] = {0};
    char *dp = dst;
    const char *sp = src;
    for (;;) {
        put_run(dp + doff, sp + soff, run, add);
        int d = j - 1;
        while (d >= 0) {
            idx[d]++;
            doff += dstr[d];
            soff += sstr[d];
            if (idx[d] < count[d])
                break;
            doff -= idx[d] * dstr[d];
            soff -= idx[d] * sstr[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0)
            return;
    }
}

static void copy_box(void *dst, const int64_t *ds, const int64_t *d0, const void *src, const int64_t *ss,
                     const int64_t *s0, const int64_t *count, int rank, size_t elem)
{
    apply_box(dst, ds, d0, src, ss, s0, count, rank, elem, -1);
}

void shd_box_apply(void *dst, const int64_t *ds, const int64_t *d0, const void *src, const int64_t *ss,
                   const int64_t *s0, const int64_t *count, int rank, shd_dtype dt, bool add)
{
    apply_box(dst, ds, d0, src, ss, s0, count, rank, shd_dtype_size(dt), add ? (int)dt : -1);
}

static void check_rank(int rank, const char *what)
{
    if (rank < 1 || rank > SHD_MAX_RANK)
        shd_fatal("%s: rank %d", what, rank);
}

void shd_slice(const void *in, void *out, size_t elem, int rank, const int64_t *in_shape, const int64_t *out_shape,
               const int64_t *start)
{
    check_rank(rank, "slice");
    int64_t zero[SHD_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++)
        if (start[d] < 0 || start[d] + out_shape[d] > in_shape[d])
            shd_fatal("slice: start %lld and size %lld of dim %d do not fit in %lld", (long long)start[d],
                      (long long)out_shape[d], d, (long long)in_shape[d]);
    copy_box(out, out_shape, zero, in, in_shape, start, out_shape, rank, elem);
}

void shd_dynamic_slice(const void *in, void *out, size_t elem, int rank, const int64_t *in_shape,
                       const int64_t *out_shape, const int64_t *start)
{
    check_rank(rank, "dynamic_slice");
    int64_t s[SHD_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int64_t hi = in_shape[d] - out_shape[d];
        s[d] = start[d] < 0 ? 0 : start[d] > hi ? hi : start[d];
    }
    shd_slice(in, out, elem, rank, in_shape, out_shape, s);
}

void shd_pad(const void *in, void *out, size_t elem, int rank, const int64_t *in_shape, const int64_t *out_shape,
             const int64_t *lo)
{
    check_rank(rank, "pad");
    int64_t zero[SHD_MAX_RANK] = {0};
    memset(out, 0, (size_t)shd_shape_count(rank, out_shape) * elem);
    copy_box(out, out_shape, lo, in, in_shape, zero, in_shape, rank, elem);
}

bool shd_window_box(int rank, const int64_t *dst_shape, const int64_t *src_shape, const int64_t *start,
                    const int64_t *size, const int64_t *dst_off, unsigned aligned, int64_t *d0, int64_t *s0,
                    int64_t *cnt)
{
    check_rank(rank, "dynamic_update_slice");
    for (int d = 0; d < rank; d++) {
        if (aligned & (1u << d)) {
            /* src is laid out like dst along d: the window's part in this block. */
            int64_t lo = start[d] > dst_off[d] ? start[d] : dst_off[d];
            int64_t hi = start[d] + size[d] < dst_off[d] + dst_shape[d] ? start[d] + size[d] : dst_off[d] + dst_shape[d];
            if (hi <= lo)
                return false;
            d0[d] = s0[d] = lo - dst_off[d];
            cnt[d] = hi - lo;
        } else {
            if (start[d] < 0 || start[d] + src_shape[d] > dst_shape[d])
                shd_fatal("dynamic_update_slice: start %lld of dim %d does not fit", (long long)start[d], d);
            d0[d] = start[d];
            s0[d] = 0;
            cnt[d] = src_shape[d];
        }
    }
    return true;
}

void shd_update_window(void *dst, const void *src, size_t elem, int rank, const int64_t *dst_shape,
                       const int64_t *src_shape, const int64_t *start, const int64_t *size, const int64_t *dst_off,
                       unsigned aligned)
{
    int64_t d0[SHD_MAX_RANK], s0[SHD_MAX_RANK], cnt[SHD_MAX_RANK];
    if (shd_window_box(rank, dst_shape, src_shape, start, size, dst_off, aligned, d0, s0, cnt))
        copy_box(dst, dst_shape, d0, src, src_shape, s0, cnt, rank, elem);
}

void shd_concat(const void *const *src, int n, const int64_t *rows, void *out, size_t elem, int rank,
                const int64_t *out_shape, int dim)
{
    check_rank(rank, "concatenate");
    int64_t zero[SHD_MAX_RANK] = {0}, at[SHD_MAX_RANK] = {0}, shape[SHD_MAX_RANK];
    memcpy(shape, out_shape, sizeof(int64_t) * (size_t)rank);
    for (int i = 0; i < n; i++) {
        shape[dim] = rows[i];
        copy_box(out, out_shape, at, src[i], shape, zero, shape, rank, elem);
        at[dim] += rows[i];
    }
    if (at[dim] != out_shape[dim])
        shd_fatal("concatenate: %lld rows into %lld", (long long)at[dim], (long long)out_shape[dim]);
}

/* ---- run-time indices ---------------------------------------------------------- */

static void out_of_range(int64_t i, int dim, int64_t n, const char *where)
{
    shd_fatal("%s: index %lld out of range for dim %d of size %lld", where, (long long)i, dim, (long long)n);
}

int32_t shd_index_check(int32_t i, int64_t n, int dim, const char *where)
{
    if (i < -n || i >= n)
        out_of_range(i, dim, n, where);
    return i < 0 ? (int32_t)(i + n) : i;
}

/* The local row of index i (global dim of size n, this block's rows
 * [row0, row0 + rows)), or -1 when another rank holds it (or, where NULL,
 * when i is outside [0, n): dropped). */
static inline int64_t local_row(int32_t i, int64_t n, int64_t row0, int64_t rows, int dim, const char *where)
{
    int64_t g = i;
    if (!where && (g < 0 || g >= n))   /* segment_sum's ids: dropped */
        return -1;
    if (g < -n || g >= n)
        out_of_range(g, dim, n, where);
    if (g < 0)
        g += n;
    g -= row0;
    return g >= 0 && g < rows ? g : -1;
}

/* ---- take and its scatter-add --------------------------------------------------- */

void shd_take(const void *x, const int32_t *idx, void *out, size_t elem, int64_t outer, int64_t rows, int64_t inner,
              int64_t nidx, int64_t row0, int64_t n, int dim, const char *where)
{
    size_t run = (size_t)inner * elem;
    const char *xs = x;
    char *os = out;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nidx; j++) {
            int64_t r = local_row(idx[j], n, row0, rows, dim, where);
            char *dp = os + (size_t)(o * nidx + j) * run;
            if (r < 0)
                memset(dp, 0, run);
            else
                memcpy(dp, xs + (size_t)(o * rows + r) * run, run);
        }
}

/* g's rows (elements S) added into DST's (elements T) at the indices, one
 * element by ADD(d, s). */
#define SCATTER_ROWS(T, S, DST, ADD)                                                           \
    do {                                                                                       \
        const S *gp = g;                                                                       \
        T *op = DST;                                                                           \
        for (int64_t o = 0; o < outer; o++)                                                    \
            for (int64_t j = 0; j < nidx; j++) {                                               \
                int64_t r = local_row(idx[j], n, row0, rows, dim, where);                      \
                if (r < 0)                                                                     \
                    continue;                                                                  \
                T *restrict dp = op + (o * rows + r) * inner;                                  \
                const S *restrict sp = gp + (o * nidx + j) * inner;                            \
                for (int64_t k = 0; k < inner; k++)                                            \
                    ADD(dp[k], sp[k]);                                                         \
            }                                                                                  \
    } while (0)

#define ADD_TO(d, s) ((d) += (s))
/* bf16 into bf16: each add in f32, rounded once (take's gradient). */
#define ADD_BF16(d, s) ((d) = shd_f2bf(shd_bf2f(d) + shd_bf2f(s)))
/* bf16 into an f32 accumulator. */
#define ADD_WIDE(d, s) ((d) += shd_bf2f(s))

void shd_scatter_add(const void *g, const int32_t *idx, void *out, shd_dtype dt, int64_t outer, int64_t rows,
                     int64_t inner, int64_t nidx, int64_t row0, int64_t n, int dim, const char *where)
{
    switch (dt) {
    case SHD_F32: SCATTER_ROWS(float, float, out, ADD_TO); return;
    case SHD_F64: SCATTER_ROWS(double, double, out, ADD_TO); return;
    case SHD_BF16:
        if (where) {
            SCATTER_ROWS(uint16_t, uint16_t, out, ADD_BF16);
            return;
        }
        /* segment_sum (ids dropped, no where): the sums in f32, each
         * rounded once (language.md §10.1), in a zeroed scratch of the
         * result's size that explain counts (op_gather.c's temp_scatter);
         * then added to the result's buffer, zeros or the base that
         * optimize.c folded in (`base + segment_sum(...)`, rounded once
         * more as that addition is). */
        size_t count = (size_t)(outer * rows * inner);
        float *acc = shd_zalloc(count * sizeof *acc);
        uint16_t *o16 = out;
        SCATTER_ROWS(float, uint16_t, acc, ADD_WIDE);
        for (size_t i = 0; i < count; i++)
            o16[i] = shd_f2bf(shd_bf2f(o16[i]) + shd_bfr(acc[i]));
        shd_release(acc);
        return;
    default: shd_fatal("scatter_add: dtype %s", shd_dtype_name(dt));
    }
}

/* ---- take_along_axis and its scatter-add --------------------------------------- */

/* Strides in elements of an array of shape s as seen from the loop over
 * the shape `over` (a dim of size 1 against a larger one broadcasts). */
static void strides_over(int rank, const int64_t *s, const int64_t *over, int64_t *st)
{
    int64_t a = 1;
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = s[d] == 1 && over[d] != 1 ? 0 : a;
        a *= s[d];
    }
}

/* Walks `small` (the gathered result, or the scatter's g) in memory order;
 * for each element calls BODY with xo (the element of the indexed array
 * `big` along every dim but `dim`), r (its local row along dim, -1 when
 * another rank holds it) and so (the element of small). */
#define ALONG_LOOP(BODY)                                                                        \
    do {                                                                                        \
        int64_t bst[SHD_MAX_RANK], ist[SHD_MAX_RANK], c[SHD_MAX_RANK] = {0};                    \
        strides_over(rank, big_shape, small_shape, bst);                                        \
        strides_over(rank, idx_shape, small_shape, ist);                                        \
        int64_t total = shd_shape_count(rank, small_shape), bo = 0, io = 0;                     \
        int64_t brow = 1;                                                                       \
        for (int d = dim + 1; d < rank; d++)                                                    \
            brow *= big_shape[d];                                                               \
        bst[dim] = 0;                                                                           \
        for (int64_t so = 0; so < total; so++) {                                                \
            int64_t r = local_row(idx[io], n, row0, big_shape[dim], dim, where);                \
            int64_t xo = bo;                                                                    \
            BODY;                                                                               \
            for (int d = rank - 1; d >= 0; d--) {                                               \
                c[d]++;                                                                         \
                bo += bst[d];                                                                   \
                io += ist[d];                                                                   \
                if (c[d] < small_shape[d])                                                      \
                    break;                                                                      \
                bo -= c[d] * bst[d];                                                            \
                io -= c[d] * ist[d];                                                            \
                c[d] = 0;                                                                       \
            }                                                                                   \
        }                                                                                       \
    } while (0)

void shd_take_along(const void *x, const int32_t *idx, void *out, size_t elem, int rank, const int64_t *big_shape,
                    const int64_t *small_shape, const int64_t *idx_shape, int dim, int64_t row0, int64_t n,
                    const char *where)
{
    check_rank(rank, "take_along_axis");
    const char *xs = x;
    char *os = out;
    ALONG_LOOP({
        if (r < 0)
            memset(os + so * (int64_t)elem, 0, elem);
        else
            memcpy(os + so * (int64_t)elem, xs + (xo + r * brow) * (int64_t)elem, elem);
    });
}

void shd_scatter_add_along(const void *g, const int32_t *idx, void *out, shd_dtype dt, int rank,
                           const int64_t *big_shape, const int64_t *small_shape, const int64_t *idx_shape, int dim,
                           int64_t row0, int64_t n, const char *where)
{
    check_rank(rank, "scatter_add_along");
    if (dt == SHD_F32) {
        const float *gs = g;
        float *os = out;
        ALONG_LOOP(if (r >= 0) os[xo + r * brow] += gs[so]);
    } else if (dt == SHD_F64) {
        const double *gs = g;
        double *os = out;
        ALONG_LOOP(if (r >= 0) os[xo + r * brow] += gs[so]);
    } else if (dt == SHD_BF16) {
        const uint16_t *gs = g;
        uint16_t *os = out;
        ALONG_LOOP(if (r >= 0) os[xo + r * brow] = shd_f2bf(shd_bf2f(os[xo + r * brow]) + shd_bf2f(gs[so])));
    } else {
        shd_fatal("scatter_add_along: dtype %s", shd_dtype_name(dt));
    }
}

/* ---- one_hot -------------------------------------------------------------------- */

void shd_one_hot(const int32_t *idx, void *out, shd_dtype dt, int64_t nidx, int64_t classes, int64_t class0)
{
    size_t elem = shd_dtype_size(dt);
    memset(out, 0, (size_t)(nidx * classes) * elem);
    for (int64_t j = 0; j < nidx; j++) {
        int64_t c = (int64_t)idx[j] - class0;
        if (c < 0 || c >= classes)
            continue;
        if (dt == SHD_F32)
            ((float *)out)[j * classes + c] = 1.0f;
        else if (dt == SHD_F64)
            ((double *)out)[j * classes + c] = 1.0;
        else if (dt == SHD_BF16)
            ((uint16_t *)out)[j * classes + c] = shd_f2bf(1.0f);
        else
            shd_fatal("one_hot: dtype %s", shd_dtype_name(dt));
    }
}
