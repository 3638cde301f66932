/* k_reduce.c: the row kernels of the reduction family: softmax,
 * log_softmax, logsumexp and their derivatives, argmax/argmin (also across
 * a mesh group), cumsum, and the fast paths of shd_reduce.
 *
 * Input: a local array seen as [outer, n, inner] (row-major), the operation
 * running along the middle dim for each (outer, inner) pair; per-row
 * statistics (a max, a sum, an index) are [outer, inner]. Output: the
 * result array (same layout) or the statistics.
 *
 * Speed: a row is processed while it is in cache, in one or two passes
 * over it (max, then exp-and-sum, then scale), never as a chain of
 * whole-array passes. Along contiguous rows (inner == 1) the loops run over
 * the row with independent partial results (lanes), which the compiler turns
 * into vector code; along a strided dim (inner > 1) they run over chunks of
 * the inner dim, which is contiguous, with the statistics of one chunk on
 * the stack (no allocation). exp in f32 is shdrt.h's shd_expf, a
 * branch-free polynomial (Cephes' expf, < 2 ulp) that vectorises, since
 * libm's expf does not without -ffast-math; f64 uses libm. Every function is compiled for the default,
 * AVX2 and AVX-512 instruction sets, the loader choosing.
 *
 * Numerics: the row max is subtracted first (a row of -inf gives a
 * logsumexp of -inf and a softmax of NaN, as JAX; a NaN anywhere in a row
 * makes the row NaN), and log_softmax is (x - max) - log(sum), so that
 * logits of 1e7 (whose f32 ulp is 1) lose nothing: only what the result
 * itself cannot hold is rounded. Sums of rows accumulate in double lanes (as the
 * generic reduction does: an f32 sum rounds once, at the end); softmax's
 * sums of exponentials in f32 lanes over blocks of 1024, added in double
 * (along a strided dim, in double).
 * argmax/argmin return the first index of the extreme value; a NaN counts
 * as the extreme, as NumPy's. bf16 (language.md §10.1): argmax/argmin
 * compare the values widened to f32 (exact), cumsum adds in f32 and rounds
 * each output once; the kernels are the f32 ones' macros with a widening
 * load and a rounding store.
 *
 * Invariants: no function allocates except shd_argreduce_group, whose pair
 * buffer comes from the refcounted cache (shdc explain counts it). With
 * SHD_TRACE=FILE.json each call is a timeline span (a compute span, and
 * for shd_argreduce_group a collective span with its wait), as the other
 * kernels' are.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_rows.h"
#include "shdrt_internal.h"

enum { BLOCK = 1024, CHUNK = 256 };

/* ---- exp in f32, vectorisable --------------------------------------------- */


/* IEEE 754-2019 maximum and minimum: a NaN wins, and -0 < +0, so a max
 * or min (its sign of zero included) is the same whatever order values are
 * combined in: in lanes here, or across ranks (collectives.c). */
#define MAXV(a, v) (((v) > (a)) | ((v) != (v)) | (((v) == (a)) & (signbit(a) != 0) & (signbit(v) == 0)) ? (v) : (a))
#define MINV(a, v) (((v) < (a)) | ((v) != (v)) | (((v) == (a)) & (signbit(v) != 0) & (signbit(a) == 0)) ? (v) : (a))

/* The max a row's values are shifted by: the max, or 0 for a row of -inf
 * (whose softmax is then 0/0, NaN, and logsumexp log(0) = -inf). A row
 * whose max is +inf or NaN gets a softmax and log_softmax of NaN (inf -
 * inf), as JAX, PyTorch and NumPy's exp(x - max) / sum; its logsumexp is
 * the max itself (LSE_OF), as theirs. */
#define SHIFT(m) ((m) == -INFINITY ? 0 : (m))
#define LSE_OF(m, l) ((m) != (m) || (m) == INFINITY ? (m) : (l))

/* ---- NaN-propagating max and min of a contiguous row -------------------------- */

/* In GCC's vector extensions: the loop vectoriser does not turn a
 * NaN-propagating compare-and-select into vector code, these do (one
 * vector register per accumulator in every instruction-set clone). */

#define DEFINE_VEXT(T, VT, VI)                                                          \
    KERNEL VT vsel_##T(VT a, VT v, int op)                                              \
    {   /* equal values differ in their bits only as -0 (negative) and +0 */            \
        VI m = (op == SHD_MAX ? (v > a) | ((v == a) & ((VI)v > (VI)a))                  \
                              : (v < a) | ((v == a) & ((VI)v < (VI)a))) | (v != v);      \
        return (VT)(((VI)v & m) | ((VI)a & ~m));                                        \
    }                                                                                   \
    KERNEL T vext_##T(const T *restrict x, int64_t n, int op)                           \
    {                                                                                   \
        enum { W = sizeof(VT) / sizeof(T) };                                            \
        T init = op == SHD_MAX ? -INFINITY : INFINITY;                                  \
        VT a0, a1, a2, a3, v;                                                           \
        for (int k = 0; k < W; k++) a0[k] = init;                                       \
        a1 = a2 = a3 = a0;                                                              \
        int64_t j = 0;                                                                  \
        for (; j + 4 * W <= n; j += 4 * W) {                                            \
            memcpy(&v, x + j, sizeof v); a0 = vsel_##T(a0, v, op);                      \
            memcpy(&v, x + j + W, sizeof v); a1 = vsel_##T(a1, v, op);                  \
            memcpy(&v, x + j + 2 * W, sizeof v); a2 = vsel_##T(a2, v, op);              \
            memcpy(&v, x + j + 3 * W, sizeof v); a3 = vsel_##T(a3, v, op);              \
        }                                                                               \
        a0 = vsel_##T(vsel_##T(a0, a1, op), vsel_##T(a2, a3, op), op);                  \
        T m = a0[0];                                                                    \
        for (int k = 1; k < W; k++)                                                     \
            m = op == SHD_MAX ? MAXV(m, a0[k]) : MINV(m, a0[k]);                        \
        for (; j < n; j++)                                                              \
            m = op == SHD_MAX ? MAXV(m, x[j]) : MINV(m, x[j]);                          \
        return m;                                                                       \
    }

DEFINE_VEXT(float, vf32, vi32)
DEFINE_VEXT(double, vf64, vi64)

/* ---- per-type kernels ------------------------------------------------------- */

/* Defines, for element type T with exp EXP and log LOG:
 *   rmax_T(x, n): NaN-propagating max of a contiguous row
 *   rsum_T(x, n): sum of a contiguous row, accurate (blocks in double)
 *   and the strided versions over a chunk of w inner columns
 * (rdot_T, the sum of x*y, is k_rows.h's). */
#define DEFINE_ROWS(T, EXP, LOG)                                                       \
    KERNEL T rmax_##T(const T *restrict x, int64_t n) { return vext_##T(x, n, SHD_MAX); }      \
    KERNEL double rsum_##T(const T *restrict x, int64_t n)                             \
    {                                                                                  \
        double p[LANES];                                                               \
        for (int k = 0; k < LANES; k++) p[k] = -0.0;                                   \
        int64_t j = 0;                                                                 \
        for (; j + LANES <= n; j += LANES)                                             \
            for (int k = 0; k < LANES; k++) p[k] += (double)x[j + k];                  \
        for (; j < n; j++) p[0] += (double)x[j];                                       \
        double total = p[0];                                                           \
        for (int k = 1; k < LANES; k++) total += p[k];                                 \
        return total;                                                                  \
    }                                                                                  \
    /* y = exp(x - m) along a row; returns the sum */                                  \
    KERNEL double rexp_##T(const T *restrict x, T *restrict y, T m, int64_t n)  \
    {                                                                                  \
        for (int64_t j = 0; j < n; j++) y[j] = EXP(x[j] - m);                          \
        return rsum_##T(y, n);                                                         \
    }                                                                                  \
    /* strided: the row max of w columns (stride inner) */                            \
    KERNEL void cmax_##T(const T *restrict x, T *restrict m, int64_t n,         \
                                int64_t inner, int w)                                  \
    {                                                                                  \
        for (int k = 0; k < w; k++) m[k] = -INFINITY;                                  \
        for (int64_t j = 0; j < n; j++)                                                \
            for (int k = 0; k < w; k++) m[k] = MAXV(m[k], x[j * inner + k]);           \
    }

DEFINE_ROWS(float, exp_f32, logf)
DEFINE_ROWS(double, exp_f64, log)

/* ---- softmax, log_softmax, logsumexp ----------------------------------------- */

#define DEFINE_SOFTMAX(T, EXP, LOG)                                                           \
    KERNEL void softmax_rows_##T(const T *restrict x, T *restrict y, int kind, int64_t rows,  \
                                 int64_t n)                                                   \
    {                                                                                         \
        for (int64_t r = 0; r < rows; r++) {                                                  \
            const T *xr = x + r * n;                                                          \
            T m = rmax_##T(xr, n), ms = SHIFT(m);                                             \
            if (kind == SHD_SOFTMAX) {                                                        \
                T *yr = y + r * n;                                                            \
                T inv = (T)(1.0 / rexp_##T(xr, yr, ms, n));                                   \
                for (int64_t j = 0; j < n; j++) yr[j] *= inv;                                 \
                continue;                                                                     \
            }                                                                                 \
            double s = 0;                                                                     \
            for (int64_t b = 0; b < n; b += BLOCK) {                                          \
                int64_t e = b + BLOCK < n ? b + BLOCK : n, j = b;                             \
                T p[LANES] = { 0 };                                                           \
                for (; j + LANES <= e; j += LANES)                                            \
                    for (int k = 0; k < LANES; k++) p[k] += EXP(xr[j + k] - ms);              \
                for (; j < e; j++) p[0] += EXP(xr[j] - ms);                                   \
                for (int k = 0; k < LANES; k++) s += (double)p[k];                            \
            }                                                                                 \
            if (kind == SHD_LOGSUMEXP) {                                                      \
                y[r] = LSE_OF(m, (T)((double)ms + log(s)));                                   \
                continue;                                                                     \
            }                                                                                 \
            /* (x - max) - log(s), never x - logsumexp: that is rounded at x's magnitude */   \
            T *yr = y + r * n, ls = (T)log(s);                                                \
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - ms) - ls;                        \
        }                                                                                     \
    }                                                                                         \
    /* along a strided dim: chunks of w <= CHUNK inner columns */                            \
    KERNEL void softmax_cols_##T(const T *restrict x, T *restrict y, int kind, int64_t outer, \
                                 int64_t n, int64_t inner)                                    \
    {                                                                                         \
        T m[CHUNK], sh[CHUNK], ls[CHUNK];                                                     \
        double s[CHUNK];                                                                      \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int w = (int)(inner - c < CHUNK ? inner - c : CHUNK);                         \
                const T *xo = x + o * n * inner + c;                                          \
                cmax_##T(xo, m, n, inner, w);                                                 \
                for (int k = 0; k < w; k++) {                                                 \
                    s[k] = 0;                                                                 \
                    sh[k] = SHIFT(m[k]);                                                      \
                }                                                                             \
                if (kind == SHD_SOFTMAX) {                                                    \
                    T *yo = y + o * n * inner + c;                                            \
                    for (int64_t j = 0; j < n; j++)                                           \
                        for (int k = 0; k < w; k++) {                                         \
                            T e = EXP(xo[j * inner + k] - sh[k]);                             \
                            yo[j * inner + k] = e;                                            \
                            s[k] += e;                                                        \
                        }                                                                     \
                    for (int k = 0; k < w; k++) ls[k] = (T)(1 / s[k]);                        \
                    for (int64_t j = 0; j < n; j++)                                           \
                        for (int k = 0; k < w; k++) yo[j * inner + k] *= ls[k];               \
                    continue;                                                                 \
                }                                                                             \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int k = 0; k < w; k++) s[k] += EXP(xo[j * inner + k] - sh[k]);       \
                for (int k = 0; k < w; k++) ls[k] = (T)log(s[k]);                             \
                if (kind == SHD_LOGSUMEXP) {                                                  \
                    T *yo = y + o * inner + c;                                                \
                    for (int k = 0; k < w; k++) yo[k] = LSE_OF(m[k], sh[k] + ls[k]);          \
                    continue;                                                                 \
                }                                                                             \
                T *yo = y + o * n * inner + c;                                                \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int k = 0; k < w; k++)                                               \
                        yo[j * inner + k] = (xo[j * inner + k] - sh[k]) - ls[k];              \
            }                                                                                 \
    }

DEFINE_SOFTMAX(float, exp_f32, logf)
DEFINE_SOFTMAX(double, exp_f64, log)

static void check_float(shd_dtype dt, const char *what)
{
    if (dt != SHD_F32 && dt != SHD_F64)
        shd_fatal("%s: dtype %s is not a float", what, shd_dtype_name(dt));
}

CLONES static void softmax_impl(const void *x, void *y, shd_dtype dt, int kind, int64_t outer,
                        int64_t n, int64_t inner)
{
    check_float(dt, "softmax");
    if (n == 0) {
        /* an empty row: logsumexp is -inf, as NumPy's */
        if (kind == SHD_LOGSUMEXP)
            for (int64_t i = 0; i < outer * inner; i++) {
                if (dt == SHD_F32) ((float *)y)[i] = -INFINITY;
                else ((double *)y)[i] = -INFINITY;
            }
        return;
    }
    if (dt == SHD_F32) {
        if (inner == 1) softmax_rows_float(x, y, kind, outer, n);
        else softmax_cols_float(x, y, kind, outer, n, inner);
    } else {
        if (inner == 1) softmax_rows_double(x, y, kind, outer, n);
        else softmax_cols_double(x, y, kind, outer, n, inner);
    }
}

/* ---- the pieces of a softmax over a dim sharded across devices --------------- */

#define DEFINE_SHARDED(T, EXP, LOG)                                                           \
    KERNEL void expsum_##T(const T *restrict x, const T *restrict m, double *restrict s,      \
                           int64_t outer, int64_t n, int64_t inner)                           \
    {                                                                                         \
        T tmp[CHUNK];                                                                         \
        double acc2[CHUNK];                                                                   \
        for (int64_t o = 0; o < outer; o++) {                                                 \
            if (inner == 1) {                                                                 \
                const T *xr = x + o * n;                                                      \
                T ms = SHIFT(m[o]);                                                           \
                double acc = 0;                                                               \
                for (int64_t b = 0; b < n; b += CHUNK) {                                      \
                    int w = (int)(n - b < CHUNK ? n - b : CHUNK);                             \
                    for (int k = 0; k < w; k++) tmp[k] = EXP(xr[b + k] - ms);                 \
                    acc += rsum_##T(tmp, w);                                                  \
                }                                                                             \
                s[o] = acc;                                                                   \
                continue;                                                                     \
            }                                                                                 \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int w = (int)(inner - c < CHUNK ? inner - c : CHUNK);                         \
                const T *xo = x + o * n * inner + c;                                          \
                const T *mo = m + o * inner + c;                                              \
                double *so = s + o * inner + c;                                               \
                for (int k = 0; k < w; k++) {                                                 \
                    acc2[k] = 0;                                                              \
                    tmp[k] = SHIFT(mo[k]);                                                    \
                }                                                                             \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int k = 0; k < w; k++) acc2[k] += EXP(xo[j * inner + k] - tmp[k]);   \
                for (int k = 0; k < w; k++) so[k] = acc2[k];                                  \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    KERNEL void finish_##T(const T *restrict x, const T *restrict m, const double *restrict s, \
                           T *restrict y, int kind, int64_t outer, int64_t n, int64_t inner)  \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t i = 0; i < inner; i++) {                                             \
                T mi = m[o * inner + i], ms = SHIFT(mi);                                      \
                double si = s[o * inner + i];                                                 \
                if (kind == SHD_LOGSUMEXP) {                                                  \
                    y[o * inner + i] = LSE_OF(mi, ms + (T)log(si));                           \
                    continue;                                                                 \
                }                                                                             \
                const T *xr = x + o * n * inner + i;                                          \
                T *yr = y + o * n * inner + i;                                                \
                if (kind == SHD_SOFTMAX) {                                                    \
                    T inv = (T)(1 / si);                                                      \
                    for (int64_t j = 0; j < n; j++) yr[j * inner] = EXP(xr[j * inner] - ms) * inv; \
                } else {                                                                      \
                    T ls = (T)log(si);                                                        \
                    for (int64_t j = 0; j < n; j++) yr[j * inner] = (xr[j * inner] - ms) - ls; \
                }                                                                             \
            }                                                                                 \
    }

DEFINE_SHARDED(float, exp_f32, logf)
DEFINE_SHARDED(double, exp_f64, log)

CLONES static void softmax_expsum_impl(const void *x, const void *m, void *s, shd_dtype dt,
                               int64_t outer, int64_t n, int64_t inner)
{
    check_float(dt, "softmax");
    if (dt == SHD_F32) expsum_float(x, m, s, outer, n, inner);
    else expsum_double(x, m, s, outer, n, inner);
}

CLONES static void softmax_finish_impl(const void *x, const void *m, const void *s, void *y,
                               shd_dtype dt, int kind, int64_t outer, int64_t n,
                               int64_t inner)
{
    check_float(dt, "softmax");
    if (dt == SHD_F32) finish_float(x, m, s, y, kind, outer, n, inner);
    else finish_double(x, m, s, y, kind, outer, n, inner);
}

/* ---- derivatives ------------------------------------------------------------- */

/* softmax:     dx = y * (g - sum(g * y))
 * log_softmax: dx = g - exp(y) * sum(g)
 * The per-row sum is `s` (computed here, or given: over a sharded dim it
 * is all-reduced between gsum and gfinish). */
#define DEFINE_GRAD(T, EXP)                                                                   \
    KERNEL void gsum_##T(const T *restrict y, const T *restrict g, double *restrict s, int kind, \
                         int64_t outer, int64_t n, int64_t inner)                             \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++) {                                                 \
            if (inner == 1) {                                                                 \
                s[o] = kind == SHD_SOFTMAX ? rdot_##T(g + o * n, y + o * n, n)                \
                                           : rsum_##T(g + o * n, n);                          \
                continue;                                                                     \
            }                                                                                 \
            /* along a strided dim: chunks of columns summed in double (an f32 */            \
            /* sum of 2^15 terms of g * y at g ~ 1e3 was off by 1e-3) */                     \
            double *so = s + o * inner;                                                       \
            const T *yo = y + o * n * inner, *go = g + o * n * inner;                         \
            double acc[CHUNK];                                                                \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int64_t w = inner - c < CHUNK ? inner - c : CHUNK;                            \
                for (int64_t i = 0; i < w; i++) acc[i] = 0;                                   \
                for (int64_t j = 0; j < n; j++)                                               \
                    if (kind == SHD_SOFTMAX)                                                  \
                        for (int64_t i = 0; i < w; i++)                                       \
                            acc[i] += (double)go[j * inner + c + i] * yo[j * inner + c + i];  \
                    else                                                                      \
                        for (int64_t i = 0; i < w; i++) acc[i] += go[j * inner + c + i];      \
                for (int64_t i = 0; i < w; i++) so[c + i] = acc[i];                           \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    KERNEL void gfinish_##T(const T *restrict y, const T *restrict g, const double *restrict s, \
                            T *restrict dx, int kind, int64_t outer, int64_t n, int64_t inner) \
    {                                                                                         \
        if (inner == 1) { /* rows: the loop over the row vectorises */                        \
            for (int64_t o = 0; o < outer; o++) {                                             \
                const T *yr = y + o * n, *gr = g + o * n;                                     \
                T *d = dx + o * n, so = (T)s[o];                                              \
                if (kind == SHD_SOFTMAX)                                                      \
                    for (int64_t j = 0; j < n; j++) d[j] = yr[j] * (gr[j] - so);              \
                else                                                                          \
                    for (int64_t j = 0; j < n; j++) d[j] = gr[j] - EXP(yr[j]) * so;           \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        for (int64_t o = 0; o < outer; o++) {                                                 \
            const T *yo = y + o * n * inner, *go = g + o * n * inner;                         \
            T so[CHUNK], *d = dx + o * n * inner;                                             \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int64_t w = inner - c < CHUNK ? inner - c : CHUNK;                            \
                for (int64_t i = 0; i < w; i++) so[i] = (T)s[o * inner + c + i];              \
                for (int64_t j = 0; j < n; j++)                                               \
                    if (kind == SHD_SOFTMAX)                                                  \
                        for (int64_t i = 0; i < w; i++)                                       \
                            d[j * inner + c + i] =                                            \
                                yo[j * inner + c + i] * (go[j * inner + c + i] - so[i]);      \
                    else                                                                      \
                        for (int64_t i = 0; i < w; i++)                                       \
                            d[j * inner + c + i] =                                            \
                                go[j * inner + c + i] - EXP(yo[j * inner + c + i]) * so[i];   \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* both at once, a row (or a chunk of columns) at a time while it is in cache */          \
    KERNEL void grad_##T(const T *restrict y, const T *restrict g, T *restrict dx, int kind,  \
                         int64_t outer, int64_t n, int64_t inner)                             \
    {                                                                                         \
        if (inner == 1) {                                                                     \
            for (int64_t o = 0; o < outer; o++) {                                             \
                const T *yr = y + o * n, *gr = g + o * n;                                     \
                T *d = dx + o * n;                                                            \
                if (kind == SHD_SOFTMAX) {                                                    \
                    T s = (T)rdot_##T(gr, yr, n);                                             \
                    for (int64_t j = 0; j < n; j++) d[j] = yr[j] * (gr[j] - s);               \
                } else {                                                                      \
                    T s = (T)rsum_##T(gr, n);                                                 \
                    for (int64_t j = 0; j < n; j++) d[j] = gr[j] - EXP(yr[j]) * s;            \
                }                                                                             \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        double s[CHUNK]; /* the column sums in double, as the forward's */                 \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int64_t w = inner - c < CHUNK ? inner - c : CHUNK;                            \
                int64_t off = o * n * inner + c;                                              \
                for (int64_t i = 0; i < w; i++) s[i] = 0;                                     \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int64_t i = 0; i < w; i++)                                           \
                        s[i] += (double)g[off + j * inner + i] *                              \
                                (kind == SHD_SOFTMAX ? y[off + j * inner + i] : 1);           \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int64_t i = 0; i < w; i++) {                                         \
                        int64_t at = off + j * inner + i;                                     \
                        dx[at] = kind == SHD_SOFTMAX ? y[at] * (g[at] - s[i])                 \
                                                     : g[at] - EXP(y[at]) * s[i];             \
                    }                                                                         \
            }                                                                                 \
    }

/* logsumexp: dx = g * p, p = exp(x - y) / t, y and g per row, t the row's
 * sum of exp(x - y). y is the forward's logsumexp rounded to T, off by up
 * to half its ulp (0.5 at 1e7 in f32), so exp(x - y) is the softmax times
 * a factor common to the row, which dividing by t takes out: p is as exact
 * as a softmax computed from x - max (x - y is exact wherever p is not 0).
 * Over a dim split across devices lsegsum gives the block's part of t and
 * lsegfinish uses the all-reduced t. */
#define DEFINE_LSE_GRAD(T, EXP)                                                               \
    KERNEL void lsegrad_##T(const T *restrict x, const T *restrict y, const T *restrict g,    \
                            T *restrict dx, int64_t outer, int64_t n, int64_t inner)          \
    {                                                                                         \
        if (inner == 1) { /* rows: exp and its sum in one pass, then the scale in cache */    \
            for (int64_t o = 0; o < outer; o++) {                                             \
                T *d = dx + o * n;                                                            \
                T c = (T)((double)g[o] / rexp_##T(x + o * n, d, y[o], n));                    \
                for (int64_t j = 0; j < n; j++) d[j] *= c;                                    \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        double t[CHUNK];                                                                      \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int64_t w = inner - c < CHUNK ? inner - c : CHUNK, off = o * n * inner + c;   \
                const T *yo = y + o * inner + c, *go = g + o * inner + c;                     \
                for (int64_t i = 0; i < w; i++) t[i] = 0;                                     \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int64_t i = 0; i < w; i++) {                                         \
                        T e = EXP(x[off + j * inner + i] - yo[i]);                            \
                        dx[off + j * inner + i] = e;                                          \
                        t[i] += e;                                                            \
                    }                                                                         \
                for (int64_t i = 0; i < w; i++) t[i] = go[i] / t[i];                          \
                for (int64_t j = 0; j < n; j++)                                               \
                    for (int64_t i = 0; i < w; i++) dx[off + j * inner + i] *= (T)t[i];       \
            }                                                                                 \
    }                                                                                         \
    KERNEL void lsegsum_##T(const T *restrict x, const T *restrict y, T *restrict t,          \
                            int64_t outer, int64_t n, int64_t inner)                          \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t i = 0; i < inner; i++) {                                             \
                const T *xr = x + o * n * inner + i;                                          \
                T yi = y[o * inner + i];                                                      \
                double acc = 0;                                                               \
                for (int64_t j = 0; j < n; j++) acc += EXP(xr[j * inner] - yi);               \
                t[o * inner + i] = (T)acc;                                                    \
            }                                                                                 \
    }                                                                                         \
    KERNEL void lsegfinish_##T(const T *restrict x, const T *restrict y, const T *restrict g, \
                               const T *restrict t, T *restrict dx, int64_t outer, int64_t n, \
                               int64_t inner)                                                 \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t i = 0; i < inner; i++) {                                             \
                int64_t r = o * inner + i;                                                    \
                const T *xr = x + o * n * inner + i;                                          \
                T *d = dx + o * n * inner + i, yi = y[r], c = (T)((double)g[r] / t[r]);       \
                for (int64_t j = 0; j < n; j++) d[j * inner] = EXP(xr[j * inner] - yi) * c;   \
            }                                                                                 \
    }
DEFINE_GRAD(float, exp_f32)
DEFINE_GRAD(double, exp_f64)
DEFINE_LSE_GRAD(float, exp_f32)
DEFINE_LSE_GRAD(double, exp_f64)

CLONES static void softmax_grad_impl(const void *y, const void *g, void *dx, shd_dtype dt, int kind,
                             int64_t outer, int64_t n, int64_t inner)
{
    check_float(dt, "softmax gradient");
    if (dt == SHD_F32) grad_float(y, g, dx, kind, outer, n, inner);
    else grad_double(y, g, dx, kind, outer, n, inner);
}

CLONES static void softmax_gsum_impl(const void *y, const void *g, void *s, shd_dtype dt, int kind,
                             int64_t outer, int64_t n, int64_t inner)
{
    check_float(dt, "softmax gradient");
    if (dt == SHD_F32) gsum_float(y, g, s, kind, outer, n, inner);
    else gsum_double(y, g, s, kind, outer, n, inner);
}

CLONES static void softmax_gfinish_impl(const void *y, const void *g, const void *s, void *dx,
                                shd_dtype dt, int kind, int64_t outer, int64_t n,
                                int64_t inner)
{
    check_float(dt, "softmax gradient");
    if (dt == SHD_F32) gfinish_float(y, g, s, dx, kind, outer, n, inner);
    else gfinish_double(y, g, s, dx, kind, outer, n, inner);
}

CLONES static void logsumexp_grad_impl(const void *x, const void *y, const void *g, void *dx,
                               shd_dtype dt, int64_t outer, int64_t n, int64_t inner)
{
    check_float(dt, "logsumexp gradient");
    if (dt == SHD_F32) lsegrad_float(x, y, g, dx, outer, n, inner);
    else lsegrad_double(x, y, g, dx, outer, n, inner);
}

CLONES static void logsumexp_gsum_impl(const void *x, const void *y, void *t, shd_dtype dt,
                                       int64_t outer, int64_t n, int64_t inner)
{
    check_float(dt, "logsumexp gradient");
    if (dt == SHD_F32) lsegsum_float(x, y, t, outer, n, inner);
    else lsegsum_double(x, y, t, outer, n, inner);
}

CLONES static void logsumexp_gfinish_impl(const void *x, const void *y, const void *g, const void *t,
                                          void *dx, shd_dtype dt, int64_t outer, int64_t n,
                                          int64_t inner)
{
    check_float(dt, "logsumexp gradient");
    if (dt == SHD_F32) lsegfinish_float(x, y, g, t, dx, outer, n, inner);
    else lsegfinish_double(x, y, g, t, dx, outer, n, inner);
}

/* ---- argmax, argmin ------------------------------------------------------------ */

/* Whether v beats the best so far: a NaN beats any number (NumPy returns
 * the first NaN); a later equal value never does (the first index wins). */
#define BEATS(v, best, op) \
    ((v) != (v) ? (best) == (best) : ((op) == SHD_MAX ? (v) > (best) : (v) < (best)))
#define BEATS_INT(v, best, op) ((op) == SHD_MAX ? (v) > (best) : (v) < (best))

/* NAME's kernel over elements of type T compared as V (LOAD widens one: a
 * bf16 to its f32 value, exactly; the identity otherwise). */
#define DEFINE_ARG(NAME, T, V, LOAD, WINS)                                                        \
    KERNEL void NAME(const T *restrict x, int32_t *restrict idx, V *restrict val, int op,     \
                     int64_t outer, int64_t n, int64_t inner)                                 \
    {                                                                                         \
        V best[CHUNK];                                                                        \
        int32_t bi[CHUNK];                                                                    \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int w = (int)(inner - c < CHUNK ? inner - c : CHUNK);                         \
                const T *xo = x + o * n * inner + c;                                          \
                for (int k = 0; k < w; k++) {                                                 \
                    best[k] = LOAD(xo[k]);                                                    \
                    bi[k] = 0;                                                                \
                }                                                                             \
                for (int64_t j = 1; j < n; j++)                                               \
                    for (int k = 0; k < w; k++) {                                             \
                        V v = LOAD(xo[j * inner + k]);                                        \
                        bool b = WINS(v, best[k], op);                                        \
                        best[k] = b ? v : best[k];                                            \
                        bi[k] = b ? (int32_t)j : bi[k];                                       \
                    }                                                                         \
                for (int k = 0; k < w; k++) {                                                 \
                    idx[o * inner + c + k] = bi[k];                                           \
                    if (val)                                                                  \
                        val[o * inner + c + k] = best[k];                                     \
                }                                                                             \
            }                                                                                 \
    }

typedef float f32_t;
typedef double f64_t;
#define SAME(v) (v)
DEFINE_ARG(arg_f32_t, f32_t, f32_t, SAME, BEATS)
DEFINE_ARG(arg_f64_t, f64_t, f64_t, SAME, BEATS)
DEFINE_ARG(arg_int32_t, int32_t, int32_t, SAME, BEATS_INT)
DEFINE_ARG(arg_bf16, uint16_t, f32_t, shd_bf2f, BEATS)

KERNEL void argreduce(const void *x, int32_t *idx, void *val, shd_dtype dt, shd_redop op,
                      int64_t outer, int64_t n, int64_t inner)
{
    if (n == 0)
        shd_fatal("arg%s of an empty dim", op == SHD_MAX ? "max" : "min");
    switch (dt) {
    case SHD_F32: arg_f32_t(x, idx, val, op, outer, n, inner); break;
    case SHD_F64: arg_f64_t(x, idx, val, op, outer, n, inner); break;
    case SHD_I32: arg_int32_t(x, idx, val, op, outer, n, inner); break;
    case SHD_BF16: arg_bf16(x, idx, val, op, outer, n, inner); break;
    default: shd_fatal("argmax/argmin of a %s array", shd_dtype_name(dt));
    }
}

CLONES static void argreduce_impl(const void *x, int32_t *idx, shd_dtype dt, shd_redop op,
                          int64_t outer, int64_t n, int64_t inner)
{
    argreduce(x, idx, NULL, dt, op, outer, n, inner);
}

/* A (value, global index) pair; every dtype's values are exact in double. */
typedef struct {
    double v;
    int64_t i;
} arg_pair;

static void combine(arg_pair *in, arg_pair *io, int len, shd_redop op)
{
    for (int k = 0; k < len; k++) {
        double a = io[k].v, b = in[k].v;
        bool same = a == b || (a != a && b != b);
        if (same ? in[k].i < io[k].i : BEATS(b, a, op))
            io[k] = in[k];
    }
}

static void combine_max(void *in, void *io, int *len, MPI_Datatype *t) { combine(in, io, *len, SHD_MAX); }
static void combine_min(void *in, void *io, int *len, MPI_Datatype *t) { combine(in, io, *len, SHD_MIN); }

static struct {
    bool ready;
    MPI_Datatype pair;
    MPI_Op max, min;
} g_arg;

static void arg_setup(void)
{
    if (g_arg.ready)
        return;
    MPI_Type_contiguous((int)sizeof(arg_pair), MPI_BYTE, &g_arg.pair);
    MPI_Type_commit(&g_arg.pair);
    MPI_Op_create(combine_max, 1, &g_arg.max);
    MPI_Op_create(combine_min, 1, &g_arg.min);
    g_arg.ready = true;
}

static double value_at(const void *x, shd_dtype dt, int64_t at)
{
    switch (dt) {
    case SHD_F32: return ((const float *)x)[at];
    case SHD_F64: return ((const double *)x)[at];
    case SHD_BF16: return shd_bf2f(((const uint16_t *)x)[at]);
    default: return ((const int32_t *)x)[at];
    }
}

static void argreduce_group(const void *x, int32_t *idx, shd_dtype dt, shd_redop op,
                            int64_t outer, int64_t n, int64_t inner, const int *axes, int naxes)
{
    size_t rows = (size_t)(outer * inner), G = (size_t)shd_group_size(axes, naxes);
    size_t bytes = rows * sizeof(arg_pair);
    shd_trace_add("all_reduce", 2 * (G - 1) * bytes / G);
    arg_pair *pairs = shd_alloc(bytes);
    argreduce_impl(x, idx, dt, op, outer, n, inner);
    int64_t offset = (int64_t)shd_group_index(axes, naxes) * n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t r = o * inner + i;
            pairs[r] = (arg_pair){ value_at(x, dt, (o * n + idx[r]) * inner + i), idx[r] + offset };
        }
    if (G > 1 && rows > 0) {
        arg_setup();
        if (rows > (size_t)INT32_MAX)
            shd_fatal("arg%s: %zu rows exceed one MPI call", op == SHD_MAX ? "max" : "min", rows);
        MPI_Allreduce(MPI_IN_PLACE, pairs, (int)rows, g_arg.pair, op == SHD_MAX ? g_arg.max : g_arg.min,
                      shd_group_comm(axes, naxes));
    }
    for (size_t r = 0; r < rows; r++)
        idx[r] = (int32_t)pairs[r].i;
    shd_release(pairs);
}

/* ---- cumsum ---------------------------------------------------------------------- */

/* NAME's kernel over elements of type T, accumulated in A: LOAD widens an
 * element to A, STORE narrows a sum back (bf16: the sums in f32, each
 * output rounded once, language.md §10.1; the identity otherwise). Along a
 * strided dim, where the output holds the running sums exactly (OWN: A is
 * T), the previous output row is the accumulator and the rows are walked
 * in memory order; otherwise (bf16) a chunk of the inner dim's running sums
 * stays on the stack. */
#define DEFINE_CUMSUM(NAME, T, A, LOAD, STORE, ADD, OWN)                                       \
    KERNEL void NAME(const T *restrict x, T *restrict y, bool rev, int64_t outer, int64_t n,  \
                     int64_t inner)                                                           \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++) {                                                 \
            const T *xo = x + o * n * inner;                                                  \
            T *yo = y + o * n * inner;                                                        \
            if (inner == 1) {                                                                 \
                A acc = 0;                                                                    \
                if (rev)                                                                      \
                    for (int64_t j = n - 1; j >= 0; j--) yo[j] = STORE(acc = ADD(acc, LOAD(xo[j]))); \
                else                                                                          \
                    for (int64_t j = 0; j < n; j++) yo[j] = STORE(acc = ADD(acc, LOAD(xo[j]))); \
                continue;                                                                     \
            }                                                                                 \
            for (int64_t c = 0; c < inner; c += OWN ? inner : CHUNK) {                        \
                int64_t w = OWN ? inner : inner - c < CHUNK ? inner - c : CHUNK;              \
                A acc[CHUNK];                                                                 \
                for (int64_t jj = 0; jj < n; jj++) {                                          \
                    int64_t j = rev ? n - 1 - jj : jj, p = rev ? j + 1 : j - 1;               \
                    T *restrict yj = yo + j * inner + c;                                      \
                    const T *restrict xj = xo + j * inner + c, *yp = yo + p * inner + c;      \
                    if (jj == 0) {                                                            \
                        for (int64_t k = 0; k < w; k++) yj[k] = xj[k];                        \
                        if (!OWN)                                                             \
                            for (int64_t k = 0; k < w; k++) acc[k] = LOAD(xj[k]);             \
                    } else if (OWN)                                                           \
                        for (int64_t k = 0; k < w; k++) yj[k] = STORE(ADD(LOAD(yp[k]), LOAD(xj[k]))); \
                    else                                                                      \
                        for (int64_t k = 0; k < w; k++) yj[k] = STORE(acc[k] = ADD(acc[k], LOAD(xj[k]))); \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

#define ADDF(a, b) ((a) + (b))
#define ADDI(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
DEFINE_CUMSUM(cumsum_f32_t, f32_t, f32_t, SAME, SAME, ADDF, true)
DEFINE_CUMSUM(cumsum_f64_t, f64_t, f64_t, SAME, SAME, ADDF, true)
DEFINE_CUMSUM(cumsum_int32_t, int32_t, int32_t, SAME, SAME, ADDI, true)
DEFINE_CUMSUM(cumsum_bf16, uint16_t, f32_t, shd_bf2f, shd_f2bf, ADDF, false)

CLONES static void cumsum_impl(const void *x, void *y, shd_dtype dt, bool reverse, int64_t outer,
                       int64_t n, int64_t inner)
{
    switch (dt) {
    case SHD_F32: cumsum_f32_t(x, y, reverse, outer, n, inner); break;
    case SHD_F64: cumsum_f64_t(x, y, reverse, outer, n, inner); break;
    case SHD_I32: cumsum_int32_t(x, y, reverse, outer, n, inner); break;
    case SHD_BF16: cumsum_bf16(x, y, reverse, outer, n, inner); break;
    default: shd_fatal("cumsum of a %s array", shd_dtype_name(dt));
    }
}

/* ---- fast paths of shd_reduce ------------------------------------------------------ */

/* Rows: [outer, n] reduced over the contiguous n (a layer norm's mean and
 * variance, a loss's sum). */
#define DEFINE_RED_ROWS(T)                                                                    \
    KERNEL void redrows_##T(const T *restrict x, T *restrict out, shd_redop op, int64_t outer, \
                            int64_t n)                                                        \
    {                                                                                         \
        for (int64_t o = 0; o < outer; o++) {                                                 \
            const T *xr = x + o * n;                                                          \
            if (op == SHD_SUM) {                                                              \
                out[o] = (T)rsum_##T(xr, n);                                                  \
                continue;                                                                     \
            }                                                                                 \
            out[o] = vext_##T(xr, n, op);                                                     \
        }                                                                                     \
    }                                                                                         \
    /* Columns: [outer, n, inner] reduced over n, inner contiguous (a bias's                  \
     * gradient, a mean over the batch); sums accumulate in double. */                        \
    KERNEL void redcols_##T(const T *restrict x, T *restrict out, shd_redop op, int64_t outer, \
                            int64_t n, int64_t inner)                                         \
    {                                                                                         \
        double acc[CHUNK];                                                                    \
        T m[CHUNK];                                                                           \
        for (int64_t o = 0; o < outer; o++)                                                   \
            for (int64_t c = 0; c < inner; c += CHUNK) {                                      \
                int w = (int)(inner - c < CHUNK ? inner - c : CHUNK);                         \
                const T *xo = x + o * n * inner + c;                                          \
                T *oo = out + o * inner + c;                                                  \
                if (op == SHD_SUM) {                                                          \
                    for (int k = 0; k < w; k++) acc[k] = -0.0;                                \
                    for (int64_t j = 0; j < n; j++)                                           \
                        for (int k = 0; k < w; k++) acc[k] += (double)xo[j * inner + k];      \
                    for (int k = 0; k < w; k++) oo[k] = (T)acc[k];                            \
                    continue;                                                                 \
                }                                                                             \
                for (int k = 0; k < w; k++) m[k] = op == SHD_MAX ? -INFINITY : INFINITY;      \
                if (op == SHD_MAX)                                                            \
                    for (int64_t j = 0; j < n; j++)                                           \
                        for (int k = 0; k < w; k++) m[k] = MAXV(m[k], xo[j * inner + k]);     \
                else                                                                          \
                    for (int64_t j = 0; j < n; j++)                                           \
                        for (int k = 0; k < w; k++) m[k] = MINV(m[k], xo[j * inner + k]);     \
                for (int k = 0; k < w; k++) oo[k] = m[k];                                     \
            }                                                                                 \
    }

DEFINE_RED_ROWS(float)
DEFINE_RED_ROWS(double)

/* A reduction of f32 or f64 over one run of contiguous dims, with kept dims
 * before it, after it, or both: [outer, n, inner] with n reduced. */
CLONES bool shd_reduce_fast(const void *in, void *out, shd_dtype dt, shd_redop op,
                            int64_t outer, int64_t n, int64_t inner)
{
    if (dt != SHD_F32 && dt != SHD_F64)
        return false;
    if (inner == 1) {
        if (dt == SHD_F32) redrows_float(in, out, op, outer, n);
        else redrows_double(in, out, op, outer, n);
    } else {
        if (dt == SHD_F32) redcols_float(in, out, op, outer, n, inner);
        else redcols_double(in, out, op, outer, n, inner);
    }
    return true;
}

/* ---- the public entry points: timeline spans (SHD_TRACE=FILE.json) ------------- */

void shd_softmax(const void *x, void *y, shd_dtype dt, int kind, int64_t outer,
                        int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax", 0);
    softmax_impl(x, y, dt, kind, outer, n, inner);
    shd_span_end();
}

void shd_softmax_expsum(const void *x, const void *m, void *s, shd_dtype dt,
                               int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax_expsum", 0);
    softmax_expsum_impl(x, m, s, dt, outer, n, inner);
    shd_span_end();
}

void shd_softmax_finish(const void *x, const void *m, const void *s, void *y,
                               shd_dtype dt, int kind, int64_t outer, int64_t n,
                               int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax_finish", 0);
    softmax_finish_impl(x, m, s, y, dt, kind, outer, n, inner);
    shd_span_end();
}

void shd_softmax_grad(const void *y, const void *g, void *dx, shd_dtype dt, int kind,
                             int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax_grad", 0);
    softmax_grad_impl(y, g, dx, dt, kind, outer, n, inner);
    shd_span_end();
}

void shd_softmax_gsum(const void *y, const void *g, void *s, shd_dtype dt, int kind,
                             int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax_gsum", 0);
    softmax_gsum_impl(y, g, s, dt, kind, outer, n, inner);
    shd_span_end();
}

void shd_softmax_gfinish(const void *y, const void *g, const void *s, void *dx,
                                shd_dtype dt, int kind, int64_t outer, int64_t n,
                                int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "softmax_gfinish", 0);
    softmax_gfinish_impl(y, g, s, dx, dt, kind, outer, n, inner);
    shd_span_end();
}

void shd_logsumexp_grad(const void *x, const void *y, const void *g, void *dx,
                               shd_dtype dt, int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "logsumexp_grad", 0);
    logsumexp_grad_impl(x, y, g, dx, dt, outer, n, inner);
    shd_span_end();
}

void shd_logsumexp_gsum(const void *x, const void *y, void *t, shd_dtype dt, int64_t outer,
                        int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "logsumexp_gsum", 0);
    logsumexp_gsum_impl(x, y, t, dt, outer, n, inner);
    shd_span_end();
}

void shd_logsumexp_gfinish(const void *x, const void *y, const void *g, const void *t, void *dx,
                           shd_dtype dt, int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "logsumexp_gfinish", 0);
    logsumexp_gfinish_impl(x, y, g, t, dx, dt, outer, n, inner);
    shd_span_end();
}

void shd_argreduce(const void *x, int32_t *idx, shd_dtype dt, shd_redop op,
                          int64_t outer, int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "argreduce", 0);
    argreduce_impl(x, idx, dt, op, outer, n, inner);
    shd_span_end();
}

void shd_cumsum(const void *x, void *y, shd_dtype dt, bool reverse, int64_t outer,
                       int64_t n, int64_t inner)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "cumsum", 0);
    cumsum_impl(x, y, dt, reverse, outer, n, inner);
    shd_span_end();
}

/* A collective span whose first child is the wait at a barrier of the
 * group, as collectives.c's. */
void shd_argreduce_group(const void *x, int32_t *idx, shd_dtype dt, shd_redop op,
                         int64_t outer, int64_t n, int64_t inner, const int *axes, int naxes)
{
    if (shd_timeline_on)
        shd_timeline_begin_collective(axes, naxes, shd_group_size(axes, naxes) > 1 ? shd_group_comm(axes, naxes)
                                                                                    : MPI_COMM_NULL);
    argreduce_group(x, idx, dt, op, outer, n, inner, axes, naxes);
    if (shd_timeline_on)
        shd_span_end();
}
