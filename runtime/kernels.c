/* kernels.c: local compute: matrix products, transposes and reductions.
 *
 * shd_gemm hands f32/f64 to CBLAS (row-major; transposes are passed as
 * flags, never materialised, since OpenBLAS runs A^T B as fast as A B); the
 * i32 product is a plain loop accumulating in int64 and wrapping to int32 as
 * NumPy does. Degenerate sizes (M, N or K = 0) are handled here because
 * BLAS rejects the leading dimensions callers naturally pass for them.
 *
 * shd_transpose and shd_reduce first normalise the problem: size-1 dims are
 * dropped and neighbouring dims that stay contiguous are merged, so e.g. a
 * rank-4 transpose that swaps two inner dims becomes a batched rank-2 one.
 * The transpose then either copies contiguous runs or copies 32x32 tiles
 * pairing out's last dim with the dim that is contiguous in the input, so
 * both reads and writes stay in cache. The reduction
 * walks the input once in memory order, accumulating in double (floats; so
 * f32 sums round once at the end) or int64 (i32, bool) per output element.
 * Float reductions over one run of contiguous dims (a row's mean, a column
 * sum) go to the vector kernels of k_reduce.c instead.
 * With SHD_TRACE=FILE.json each call is a timeline span (timeline.c).
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"
#include "gemm.h"
#include "k_rows.h"   /* CLONES, the bf16 row conversions */

/* ---- gemm ---------------------------------------------------------------- */

static void check_ld(const char *name, int64_t ld, int64_t cols)
{
    int64_t need = cols > 1 ? cols : 1;
    if (ld < need)
        shd_fatal("gemm: %s = %lld, but a row has %lld elements", name,
                  (long long)ld, (long long)cols);
    if (ld > INT_MAX)
        shd_fatal("gemm: %s = %lld exceeds the BLAS integer range", name,
                  (long long)ld);
}

/* C = beta * C, the whole product when K == 0. */
static void scale_c(shd_dtype dt, int64_t M, int64_t N, double beta, void *C,
                    int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t at = i * ldc + j;
            if (dt == SHD_F32)
                ((float *)C)[at] = beta == 0 ? 0.0f : (float)(beta * ((float *)C)[at]);
            else if (dt == SHD_BF16)
                ((uint16_t *)C)[at] = beta == 0 ? 0 : shd_f2bf((float)(beta * shd_bf2f(((uint16_t *)C)[at])));
            else if (dt == SHD_F64)
                ((double *)C)[at] = beta == 0 ? 0.0 : beta * ((double *)C)[at];
            else
                ((int32_t *)C)[at] = beta == 0 ? 0 : (int32_t)llround(beta * ((int32_t *)C)[at]);
        }
}

static int64_t scale_i64(double s, int64_t v)
{
    return s == 1.0 ? v : (int64_t)llround(s * (double)v);
}

static void gemm_i32(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     double alpha, const int32_t *A, int64_t lda,
                     const int32_t *B, int64_t ldb, double beta, int32_t *C,
                     int64_t ldc)
{
    int64_t *row = shd_mem(NULL, (size_t)N * sizeof *row, "an integer product's row of %lld", (long long)N);
    for (int64_t i = 0; i < M; i++) {
        memset(row, 0, (size_t)N * sizeof *row);
        for (int64_t k = 0; k < K; k++) {
            int64_t a = ta ? A[k * lda + i] : A[i * lda + k];
            if (a == 0)
                continue;
            for (int64_t j = 0; j < N; j++)
                row[j] += a * (tb ? B[j * ldb + k] : B[k * ldb + j]);
        }
        for (int64_t j = 0; j < N; j++) {
            int64_t c = beta == 0 ? 0 : scale_i64(beta, C[i * ldc + j]);
            C[i * ldc + j] = (int32_t)(uint32_t)(uint64_t)(scale_i64(alpha, row[j]) + c);
        }
    }
    free(row);
}

/* The conversions around a bf16 gemm (k_rows.h's, as attention's), compiled
 * (-O3, Makefile) once per instruction set: shd_widen_bf16, rows x cols of a
 * bf16 matrix (leading dim ld) into a dense f32 w; shd_narrow_bf16 the
 * reverse, each element rounded once. The async buckets' conversions
 * (async.c) are theirs too. */
CLONES void shd_widen_bf16(float *w, const uint16_t *x, int64_t rows, int64_t cols, int64_t ld)
{
    bf16_widen_rows(w, x, rows, cols, ld);
}

CLONES void shd_narrow_bf16(uint16_t *x, int64_t ld, const float *w, int64_t rows, int64_t cols)
{
    bf16_narrow_rows(x, ld, w, rows, cols);
}

/* Rows of a bf16 gemm's panel (gemm.h): P rows of A and C widened at once. */
static int64_t bf16_panel_rows(int64_t M, int64_t N, int64_t K)
{
    int64_t p = SHD_BF16_PANEL / (K + N);
    return p < 1 ? 1 : p > M ? M : p;
}

/* bf16 operands accumulate in f32 (language.md §10.1): B widened whole,
 * then A and C a panel of rows at a time, sgemm'd, each product rounded
 * once. Debian's OpenBLAS 0.3.21 is built without sbgemm (even where the
 * CPU has AVX512-BF16 or AMX), so this widening is what sbgemm would do. */
static void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const uint16_t *A,
                      int64_t lda, const uint16_t *B, int64_t ldb, double beta, uint16_t *C, int64_t ldc)
{
    int64_t P = bf16_panel_rows(M, N, K);
    /* shd_alloc: the copies count in the traced peak, as explain's does */
    float *b = shd_alloc((size_t)(K * N) * sizeof(float));
    float *a = shd_alloc((size_t)(P * (K + N)) * sizeof(float));
    float *c = a + P * K;
    shd_widen_bf16(b, B, tb ? N : K, tb ? K : N, ldb);
    for (int64_t i0 = 0; i0 < M; i0 += P) {
        int64_t p = M - i0 < P ? M - i0 : P;
        if (ta)   /* A is K x M: columns i0.. of it, as a K x p block */
            shd_widen_bf16(a, A + i0, K, p, lda);
        else
            shd_widen_bf16(a, A + i0 * lda, p, K, lda);
        if (beta != 0)
            shd_widen_bf16(c, C + i0 * ldc, p, N, ldc);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)p, (int)N,
                    (int)K, (float)alpha, a, (int)(ta ? p : K), b, (int)(tb ? K : N), (float)beta, c, (int)N);
        shd_narrow_bf16(C + i0 * ldc, ldc, c, p, N);
    }
    shd_release(a);
    shd_release(b);
}

static void gemm_impl(shd_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      double alpha, const void *A, int64_t lda, const void *B,
                      int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (M < 0 || N < 0 || K < 0)
        shd_fatal("gemm: negative size %lld x %lld x %lld", (long long)M,
                  (long long)N, (long long)K);
    if (M == 0 || N == 0)
        return;
    check_ld("ldc", ldc, N);
    if (K == 0) {
        scale_c(dt, M, N, beta, C, ldc);
        return;
    }
    check_ld("lda", lda, ta ? M : K);
    check_ld("ldb", ldb, tb ? K : N);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        shd_fatal("gemm: %lld x %lld x %lld exceeds the BLAS integer range",
                  (long long)M, (long long)N, (long long)K);
    enum CBLAS_TRANSPOSE a = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE b = tb ? CblasTrans : CblasNoTrans;
    switch (dt) {
    case SHD_F32:
        cblas_sgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, (float)alpha,
                    A, (int)lda, B, (int)ldb, (float)beta, C, (int)ldc);
        break;
    case SHD_F64:
        cblas_dgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, alpha, A,
                    (int)lda, B, (int)ldb, beta, C, (int)ldc);
        break;
    case SHD_I32:
        gemm_i32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        break;
    case SHD_BF16:
        gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        break;
    case SHD_BOOL:
        shd_fatal("gemm: bool matrices are not supported");
    }
}

/* ---- transpose ----------------------------------------------------------- */

/* A transpose after normalisation: out is dense row-major over size[],
 * and out dim i steps the input by stride[i] elements. */
typedef struct {
    int nd;
    int64_t size[SHD_MAX_RANK];
    int64_t stride[SHD_MAX_RANK];
} strided;

static void check_perm(int rank, const int *perm)
{
    if (rank < 0 || rank > SHD_MAX_RANK)
        shd_fatal("transpose: rank %d (at most %d)", rank, SHD_MAX_RANK);
    unsigned seen = 0;
    for (int i = 0; i < rank; i++) {
        if (perm[i] < 0 || perm[i] >= rank || (seen & (1u << perm[i])))
            shd_fatal("transpose: perm is not a permutation of %d dims", rank);
        seen |= 1u << perm[i];
    }
}

static strided normalise_transpose(int rank, const int64_t *shape, const int *perm)
{
    int64_t istride[SHD_MAX_RANK];
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        istride[d] = s;
        s *= shape[d];
    }
    strided t = { 0, { 0 }, { 0 } };
    for (int i = 0; i < rank; i++) {
        int64_t sz = shape[perm[i]], st = istride[perm[i]];
        if (sz == 1)
            continue;
        /* Out dims i-1, i that are also neighbours in the input merge. */
        if (t.nd > 0 && t.stride[t.nd - 1] == st * sz) {
            t.size[t.nd - 1] *= sz;
            t.stride[t.nd - 1] = st;
            continue;
        }
        t.size[t.nd] = sz;
        t.stride[t.nd] = st;
        t.nd++;
    }
    if (t.nd == 0) {
        t.size[0] = 1;
        t.stride[0] = 1;
        t.nd = 1;
    }
    return t;
}

#define TILE 32

/* out[i*oi + j] = in[i*si + j*sj] for an ni x nj block, in TILE x TILE
 * tiles so that the strided side of each tile stays in L1. */
#define DEFINE_TILE_COPY(NAME, T)                                            \
    static void NAME(const T *in, T *out, int64_t ni, int64_t nj,            \
                     int64_t si, int64_t sj, int64_t oi)                     \
    {                                                                        \
        for (int64_t i0 = 0; i0 < ni; i0 += TILE)                            \
            for (int64_t j0 = 0; j0 < nj; j0 += TILE) {                      \
                int64_t i1 = i0 + TILE < ni ? i0 + TILE : ni;                \
                int64_t j1 = j0 + TILE < nj ? j0 + TILE : nj;                \
                for (int64_t i = i0; i < i1; i++)                            \
                    for (int64_t j = j0; j < j1; j++)                        \
                        out[i * oi + j] = in[i * si + j * sj];               \
            }                                                                \
    }

DEFINE_TILE_COPY(tile_copy1, uint8_t)
DEFINE_TILE_COPY(tile_copy2, uint16_t)
DEFINE_TILE_COPY(tile_copy4, uint32_t)
DEFINE_TILE_COPY(tile_copy8, uint64_t)

static void tile_copy_bytes(const char *in, char *out, size_t elem, int64_t ni,
                            int64_t nj, int64_t si, int64_t sj, int64_t oi)
{
    for (int64_t i = 0; i < ni; i++)
        for (int64_t j = 0; j < nj; j++)
            memcpy(out + (size_t)(i * oi + j) * elem,
                   in + (size_t)(i * si + j * sj) * elem, elem);
}

static void tile_copy(const char *in, char *out, size_t elem, int64_t ni,
                      int64_t nj, int64_t si, int64_t sj, int64_t oi)
{
    switch (elem) {
    case 1: tile_copy1((const void *)in, (void *)out, ni, nj, si, sj, oi); break;
    case 2: tile_copy2((const void *)in, (void *)out, ni, nj, si, sj, oi); break;
    case 4: tile_copy4((const void *)in, (void *)out, ni, nj, si, sj, oi); break;
    case 8: tile_copy8((const void *)in, (void *)out, ni, nj, si, sj, oi); break;
    default: tile_copy_bytes(in, out, elem, ni, nj, si, sj, oi); break;
    }
}

/* The innermost work of a transpose: out's last dim (contiguous writes)
 * against the dim `tdim` whose input stride is 1 (contiguous reads); when
 * they coincide, whole rows are memcpy'd. The other dims are walked by an
 * odometer that tracks both offsets. */
static void transpose_walk(const char *in, char *out, size_t elem, const strided *t)
{
    int last = t->nd - 1, tdim = last;
    for (int d = 0; d < t->nd; d++)
        if (t->stride[d] == 1)
            tdim = d;
    int64_t ostride[SHD_MAX_RANK], s = 1;
    for (int d = last; d >= 0; d--) {
        ostride[d] = s;
        s *= t->size[d];
    }
    int64_t nj = t->size[last], sj = t->stride[last];
    int64_t ni = tdim == last ? 1 : t->size[tdim], oi = ostride[tdim];
    int64_t idx[SHD_MAX_RANK] = { 0 }, ioff = 0, ooff = 0;
    for (;;) {
        if (tdim == last)
            memcpy(out + (size_t)ooff * elem, in + (size_t)ioff * elem,
                   (size_t)nj * elem);
        else
            tile_copy(in + (size_t)ioff * elem, out + (size_t)ooff * elem, elem,
                      ni, nj, 1, sj, oi);
        int d = last - 1;
        for (; d >= 0; d--) {
            if (d == tdim)
                continue;
            ioff += t->stride[d];
            ooff += ostride[d];
            if (++idx[d] < t->size[d])
                break;
            ioff -= t->stride[d] * t->size[d];
            ooff -= ostride[d] * t->size[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

static void transpose_impl(const void *in, void *out, size_t elem, int rank,
                           const int64_t *shape, const int *perm)
{
    check_perm(rank, perm);
    if (shd_shape_count(rank, shape) == 0)
        return;
    strided t = normalise_transpose(rank, shape, perm);
    transpose_walk(in, out, elem, &t);
}

/* ---- reduce -------------------------------------------------------------- */

/* A reduction after normalisation: alternating runs of kept and reduced
 * dims, none of size 1. */
typedef struct {
    int nd;
    int64_t size[SHD_MAX_RANK];
    bool red[SHD_MAX_RANK];
    int64_t ostride[SHD_MAX_RANK];   /* 0 for reduced dims */
} reduction;

static reduction normalise_reduce(int rank, const int64_t *shape, unsigned mask)
{
    reduction r = { 0, { 0 }, { false }, { 0 } };
    for (int d = 0; d < rank; d++) {
        bool red = (mask >> d) & 1u;
        if (shape[d] == 1)
            continue;
        if (r.nd > 0 && r.red[r.nd - 1] == red) {
            r.size[r.nd - 1] *= shape[d];
            continue;
        }
        r.size[r.nd] = shape[d];
        r.red[r.nd] = red;
        r.nd++;
    }
    if (r.nd == 0) {   /* a single element: treat as one kept dim */
        r.size[0] = 1;
        r.nd = 1;
    }
    int64_t s = 1;
    for (int d = r.nd - 1; d >= 0; d--) {
        r.ostride[d] = r.red[d] ? 0 : s;
        if (!r.red[d])
            s *= r.size[d];
    }
    return r;
}

/* NaN-propagating max/min, as NumPy's: a NaN already in `a` survives (no
 * comparison with it is true) and a NaN `v` wins. */
#define MAXV(a, v) ((v) > (a) || (v) != (v) ? (v) : (a))
#define MINV(a, v) ((v) < (a) || (v) != (v) ? (v) : (a))
/* Floats: IEEE 754-2019 maximum and minimum (a NaN wins, -0 < +0), so the
 * result is the same in any order of combination (k_reduce.c alike). */
#define FMAXV(a, v) ((v) > (a) || (v) != (v) || ((v) == (a) && signbit(a) && !signbit(v)) ? (v) : (a))
#define FMINV(a, v) ((v) < (a) || (v) != (v) || ((v) == (a) && signbit(v) && !signbit(a)) ? (v) : (a))

/* Folds a contiguous row into one accumulator with 8 independent partial
 * results, so the adds or compares of neighbouring elements overlap. */
#define FOLD8(A, s, x, n, STEP)                                              \
    do {                                                                     \
        A p_[8] = { s, s, s, s, s, s, s, s };                                \
        int64_t j_ = 0;                                                      \
        for (; j_ + 8 <= (n); j_ += 8)                                       \
            for (int k_ = 0; k_ < 8; k_++)                                   \
                p_[k_] = STEP(p_[k_], (A)(x)[j_ + k_]);                      \
        for (; j_ < (n); j_++)                                               \
            p_[0] = STEP(p_[0], (A)(x)[j_]);                                 \
        for (int k_ = 1; k_ < 8; k_++)                                       \
            p_[0] = STEP(p_[0], p_[k_]);                                     \
        s = p_[0];                                                           \
    } while (0)

#define ADDV(a, v) ((a) + (v))

/* Folds one contiguous row x[0..n) into the accumulators: into acc[0] when
 * the row's dim is reduced, elementwise into acc[0..n) when it is kept. */
#define DEFINE_ROW(NAME, T, A, MAXV, MINV)                                   \
    static void NAME(A *acc, const T *x, int64_t n, shd_redop op, bool fold) \
    {                                                                        \
        if (!fold) {                                                         \
            if (op == SHD_SUM)                                               \
                for (int64_t j = 0; j < n; j++) acc[j] += (A)x[j];           \
            else if (op == SHD_MAX)                                          \
                for (int64_t j = 0; j < n; j++) acc[j] = MAXV(acc[j], (A)x[j]); \
            else                                                             \
                for (int64_t j = 0; j < n; j++) acc[j] = MINV(acc[j], (A)x[j]); \
            return;                                                          \
        }                                                                    \
        A s = op == SHD_SUM ? (A)-0.0 : acc[0];                              \
        if (op == SHD_SUM) {                                                 \
            FOLD8(A, s, x, n, ADDV);                                         \
            s = acc[0] + s;                                                  \
        } else if (op == SHD_MAX) {                                          \
            FOLD8(A, s, x, n, MAXV);                                         \
        } else {                                                             \
            FOLD8(A, s, x, n, MINV);                                         \
        }                                                                    \
        acc[0] = s;                                                          \
    }

DEFINE_ROW(row_f32, float, double, FMAXV, FMINV)
DEFINE_ROW(row_f64, double, double, FMAXV, FMINV)
DEFINE_ROW(row_i32, int32_t, int64_t, MAXV, MINV)
DEFINE_ROW(row_bool, uint8_t, int64_t, MAXV, MINV)

/* bf16 rows widen each element; sums accumulate as f32's do (in double),
 * the result rounded to bf16 once (store_result). */
static void row_bf16(double *acc, const uint16_t *x, int64_t n, shd_redop op, bool fold)
{
    for (int64_t j = 0; j < n; j++) {
        double v = shd_bf2f(x[j]), *a = fold ? acc : acc + j;
        *a = op == SHD_SUM ? *a + v : op == SHD_MAX ? FMAXV(*a, v) : FMINV(*a, v);
    }
}

/* Bool reductions act on 0/1: SUM is OR, which MAX computes. */
static shd_redop effective_op(shd_dtype dt, shd_redop op)
{
    return dt == SHD_BOOL && op == SHD_SUM ? SHD_MAX : op;
}

static void fill_identity(void *acc, int64_t n, shd_dtype dt, shd_redop op)
{
    bool fp = dt == SHD_F32 || dt == SHD_F64 || dt == SHD_BF16;
    for (int64_t i = 0; i < n; i++) {
        if (fp)   /* -0.0 so that a sum of -0.0 stays -0.0, as in NumPy */
            ((double *)acc)[i] = op == SHD_SUM ? -0.0 : op == SHD_MAX ? -INFINITY : INFINITY;
        else if (dt == SHD_I32)
            ((int64_t *)acc)[i] = op == SHD_SUM ? 0 : op == SHD_MAX ? INT32_MIN : INT32_MAX;
        else
            ((int64_t *)acc)[i] = op == SHD_MIN ? 1 : 0;
    }
}

static void store_result(void *out, const void *acc, int64_t n, shd_dtype dt)
{
    const double *fa = acc;
    const int64_t *ia = acc;
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case SHD_F32: ((float *)out)[i] = (float)fa[i]; break;
        case SHD_F64: ((double *)out)[i] = fa[i]; break;
        case SHD_I32: ((int32_t *)out)[i] = (int32_t)(uint32_t)(uint64_t)ia[i]; break;
        case SHD_BOOL: ((uint8_t *)out)[i] = ia[i] != 0; break;
        case SHD_BF16: ((uint16_t *)out)[i] = shd_d2bf(fa[i]); break;
        }
    }
}

static void reduce_row(void *acc, const void *x, int64_t n, shd_dtype dt,
                       shd_redop op, bool fold)
{
    switch (dt) {
    case SHD_F32: row_f32(acc, x, n, op, fold); break;
    case SHD_F64: row_f64(acc, x, n, op, fold); break;
    case SHD_I32: row_i32(acc, x, n, op, fold); break;
    case SHD_BOOL: row_bool(acc, x, n, op, fold); break;
    case SHD_BF16: row_bf16(acc, x, n, op, fold); break;
    }
}

/* Walks the input rows in memory order; the output offset of each row comes
 * from an odometer over the dims before the last. */
static void reduce_walk(const char *in, char *acc, const reduction *r,
                        shd_dtype dt, shd_redop op)
{
    size_t es = shd_dtype_size(dt);
    int last = r->nd - 1;
    int64_t n = r->size[last];
    int64_t idx[SHD_MAX_RANK] = { 0 };
    int64_t o = 0;
    for (;;) {
        reduce_row(acc + (size_t)o * 8, in, n, dt, op, r->red[last]);
        in += (size_t)n * es;
        int d = last - 1;
        for (; d >= 0; d--) {
            o += r->ostride[d];
            if (++idx[d] < r->size[d])
                break;
            o -= r->ostride[d] * r->size[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* The run-of-reduced-dims patterns k_reduce.c has vector kernels for:
 * [n], [outer, n], [n, inner], [outer, n, inner] with n reduced. */
static bool fast_shape(const reduction *r, int64_t *outer, int64_t *n, int64_t *inner)
{
    int k = 0;
    *outer = *inner = 1;
    if (r->nd > 3)
        return false;
    if (!r->red[0])
        *outer = r->size[k++];
    if (k >= r->nd || !r->red[k])
        return false;
    *n = r->size[k++];
    if (k < r->nd)
        *inner = r->size[k++];
    return k == r->nd;
}

static void reduce_impl(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, unsigned dims_mask, bool fast)
{
    if (rank < 0 || rank > SHD_MAX_RANK || (rank < 32 && (dims_mask >> rank)))
        shd_fatal("reduce: dims mask 0x%x on a rank-%d array", dims_mask, rank);
    int64_t nout = 1;
    for (int d = 0; d < rank; d++)
        if (!((dims_mask >> d) & 1u))
            nout *= shape[d];
    if (nout == 0)
        return;
    op = effective_op(dt, op);
    bool nonempty = shd_shape_count(rank, shape) > 0;
    if (fast && nonempty) {
        reduction r = normalise_reduce(rank, shape, dims_mask);
        int64_t outer, n, inner;
        if (fast_shape(&r, &outer, &n, &inner) && shd_reduce_fast(in, out, dt, op, outer, n, inner))
            return;
    }
    /* Accumulators are 8 bytes: double for floats, int64 otherwise. */
    void *acc = shd_mem(NULL, (size_t)nout * 8, "the accumulators of a reduce to %lld outputs", (long long)nout);
    fill_identity(acc, nout, dt, op);
    if (nonempty) {
        reduction r = normalise_reduce(rank, shape, dims_mask);
        reduce_walk(in, acc, &r, dt, op);
    }
    store_result(out, acc, nout, dt);
    free(acc);
}

/* ---- the public entry points: timeline spans (SHD_TRACE=FILE.json) ----- */

void shd_gemm(shd_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
              double alpha, const void *A, int64_t lda, const void *B,
              int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (shd_async_active)
        shd_async_progress_slow();
    shd_span_begin(SHD_SPAN_GEMM,
                   dt == SHD_F64 ? "dgemm" : dt == SHD_F32 ? "sgemm" : dt == SHD_BF16 ? "bf16 gemm" : "gemm", 0);
    shd_span_args(M, N, K);
    gemm_impl(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    shd_span_end();
}

void shd_transpose(const void *in, void *out, size_t elem, int rank,
                   const int64_t *shape, const int *perm)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "transpose", 0);
    transpose_impl(in, out, elem, rank, shape, perm);
    shd_span_end();
}

void shd_reduce(const void *in, void *out, shd_dtype dt, shd_redop op,
                int rank, const int64_t *shape, unsigned dims_mask)
{
    shd_span_begin(SHD_SPAN_COMPUTE, "reduce", 0);
    reduce_impl(in, out, dt, op, rank, shape, dims_mask, true);
    shd_span_end();
}

void shd_reduce_generic(const void *in, void *out, shd_dtype dt, shd_redop op,
                        int rank, const int64_t *shape, unsigned dims_mask)
{
    reduce_impl(in, out, dt, op, rank, shape, dims_mask, false);
}
