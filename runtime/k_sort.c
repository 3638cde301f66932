/* k_sort.c: the row kernel of the sorting family (compiler/op_sort.c):
 * sort, argsort and top_k.
 *
 * Input: a local array seen as [outer, n, inner] (row-major), each
 * (outer, inner) pair a row of n along the middle dim. Output: the first k
 * of each row's order, values and i32 positions, [outer, k, inner].
 *
 * A row's keys are copied as doubles (exact for f32, f64, i32 and bf16) and its
 * positions merge-sorted bottom-up, a merge taking the right run's element
 * only when it comes strictly before the left's: stable, so equal keys keep
 * their positions' order (NumPy's sort(kind="stable"), and jax.lax.top_k's
 * ties to the lower index). Ascending puts a NaN after every number (NumPy);
 * descending (top_k) before every number (XLA's total order, a NaN larger
 * than +inf). O(n log n) a row; the scratch (a key and two positions an
 * element) is allocated once a call.
 */
#include "shdrt_internal.h"

#include <math.h>
#include <string.h>

/* Whether key a comes strictly before key b. */
static inline bool before(double a, double b, bool desc)
{
    if (desc)
        return isnan(a) ? !isnan(b) : !isnan(b) && a > b;
    return isnan(b) ? !isnan(a) : !isnan(a) && a < b;
}

static void merge_sort(const double *key, int32_t *p, int32_t *tmp, int64_t n, bool desc)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                tmp[o++] = before(key[p[j]], key[p[i]], desc) ? p[j++] : p[i++];
            while (i < mid)
                tmp[o++] = p[i++];
            while (j < hi)
                tmp[o++] = p[j++];
        }
        memcpy(p, tmp, (size_t)n * sizeof *p);
    }
}

void shd_sort_rows(const void *x, void *vals, int32_t *idx, shd_dtype dt, int64_t outer, int64_t n, int64_t inner,
                   int64_t k, bool descending)
{
    if (n <= 0 || outer <= 0 || inner <= 0)
        return;
    double *key = shd_alloc((size_t)n * sizeof *key);
    int32_t *p = shd_alloc((size_t)n * sizeof *p), *tmp = shd_alloc((size_t)n * sizeof *tmp);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i, obase = o * k * inner + i;
            for (int64_t j = 0; j < n; j++) {
                int64_t at = base + j * inner;
                key[j] = dt == SHD_F32   ? (double)((const float *)x)[at]
                         : dt == SHD_F64  ? ((const double *)x)[at]
                         : dt == SHD_BF16 ? (double)shd_bf2f(((const uint16_t *)x)[at])
                                          : (double)((const int32_t *)x)[at];
                p[j] = (int32_t)j;
            }
            merge_sort(key, p, tmp, n, descending);
            for (int64_t j = 0; j < k; j++) {
                int64_t from = base + (int64_t)p[j] * inner, to = obase + j * inner;
                idx[to] = p[j];
                switch (dt) {
                case SHD_F32: ((float *)vals)[to] = ((const float *)x)[from]; break;
                case SHD_F64: ((double *)vals)[to] = ((const double *)x)[from]; break;
                case SHD_I32: ((int32_t *)vals)[to] = ((const int32_t *)x)[from]; break;
                case SHD_BF16: ((uint16_t *)vals)[to] = ((const uint16_t *)x)[from]; break;
                default: shd_fatal("sort of a %s array", shd_dtype_name(dt));
                }
            }
        }
    shd_release(key);
    shd_release(p);
    shd_release(tmp);
}
