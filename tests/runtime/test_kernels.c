// RANKS: 1 2 4 8
/* test_kernels: the local compute kernels against naive loops.
 *
 * gemm: f32, f64 and i32, every ta/tb combination, leading dimensions wider
 * than the rows, alpha/beta variants, M, N or K = 0; C's padding columns
 * must stay untouched and beta = 0 must ignore NaNs in C. Values are small
 * integers so every dtype's result is exact.
 * transpose: every permutation of rank 2, 3 and 4 arrays (with size-1 dims,
 * with rank-2 sizes spanning several 32x32 tiles), elements of 1, 2, 4 and
 * 8 bytes, plus ranks 5 and 8.
 * reduce: every dims mask of rank 0-4 arrays, every dtype and reduction,
 * size-1 and size-0 dims, f32 sums accumulated in double, NaN propagation.
 */
#include <math.h>

#include "check.h"

/* ---- gemm ---------------------------------------------------------------- */

static void test_gemm_case(shd_dtype dt, bool ta, bool tb, int64_t M, int64_t N,
                           int64_t K, double alpha, double beta)
{
    const int64_t pad = 3;
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t arows = ta ? K : M, brows = tb ? N : K;
    size_t es = dt_size(dt);
    void *A = calloc((size_t)(arows * lda + 1), es), *B = calloc((size_t)(brows * ldb + 1), es);
    void *C = malloc((size_t)(M * ldc + 1) * es);
    for (int64_t i = 0; i < arows * lda; i++)
        put(A, dt, (size_t)i, (double)((i * 7) % 5) - 2);
    for (int64_t i = 0; i < brows * ldb; i++)
        put(B, dt, (size_t)i, (double)((i * 3) % 7) - 3);
    for (int64_t i = 0; i < M * ldc; i++)
        put(C, dt, (size_t)i, (i % ldc) >= N ? 777 :
            (beta == 0 && dt != SHD_I32) ? NAN : (double)(i % 4));
    double *want = malloc((size_t)(M * N + 1) * sizeof *want);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += get(A, dt, (size_t)(ta ? k * lda + i : i * lda + k)) *
                     get(B, dt, (size_t)(tb ? j * ldb + k : k * ldb + j));
            double c = get(C, dt, (size_t)(i * ldc + j));
            want[i * N + j] = alpha * s + (beta == 0 ? 0 : beta * c);
        }
    shd_gemm(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            double got = get(C, dt, (size_t)(i * ldc + j));
            double w = j < N ? want[i * N + j] : 777;
            if (got != w && bad++ < 3)
                CHECK(0, "gemm %s ta=%d tb=%d %lldx%lldx%lld alpha=%g beta=%g "
                      "C[%lld,%lld] = %g, expected %g", dt_name(dt), ta, tb,
                      (long long)M, (long long)N, (long long)K, alpha, beta,
                      (long long)i, (long long)j, got, w);
        }
    free(A);
    free(B);
    free(C);
    free(want);
}

static void test_gemm(void)
{
    static const int64_t dims[][3] = {
        { 0, 3, 4 }, { 3, 0, 4 }, { 3, 4, 0 }, { 1, 1, 1 }, { 5, 7, 3 },
        { 33, 17, 65 }, { 64, 48, 40 },
    };
    static const double ab[][2] = { { 1, 0 }, { 0.5, 1 }, { 2, -2 } };
    for (int dt = SHD_F32; dt <= SHD_I32; dt++)
        for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
            for (int t = 0; t < 4; t++)
                for (size_t a = 0; a < sizeof ab / sizeof *ab; a++)
                    if (dt != SHD_I32 || ab[a][0] == floor(ab[a][0]))
                        test_gemm_case((shd_dtype)dt, t & 1, t & 2, dims[d][0],
                                   dims[d][1], dims[d][2], ab[a][0], ab[a][1]);
}

/* ---- transpose ------------------------------------------------------------ */

static void test_transpose_case(int rank, const int64_t *shape, const int *perm,
                                size_t elem)
{
    int64_t n = 1, stride[8], oshape[8], ostride[8];
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = n;
        n *= shape[d];
    }
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        oshape[i] = shape[perm[i]];
        ostride[i] = s;
        s *= oshape[i];
    }
    unsigned char *in = calloc((size_t)n, elem), *out = malloc((size_t)n * elem);
    for (size_t b = 0; b < (size_t)n * elem; b++)
        in[b] = (unsigned char)(b * 31 + b / 251);
    shd_transpose(in, out, elem, rank, shape, perm);
    int bad = 0;
    for (int64_t f = 0; f < n; f++) {
        int64_t src = 0;   /* out coordinate i is in coordinate perm[i] */
        for (int i = 0; i < rank; i++)
            src += (f / ostride[i] % oshape[i]) * stride[perm[i]];
        if (memcmp(out + (size_t)f * elem, in + (size_t)src * elem, elem) != 0 &&
            bad++ < 3)
            CHECK(0, "transpose rank %d perm %d%d%d%d... elem %zu: out[%lld] "
                  "!= in[%lld]", rank, perm[0], perm[1], rank > 2 ? perm[2] : 0,
                  rank > 3 ? perm[3] : 0, elem, (long long)f, (long long)src);
    }
    free(in);
    free(out);
}

/* Every permutation of rank dims, by Heap-free recursion over free slots. */
static void each_perm(int rank, const int64_t *shape, int *perm, int at,
                      unsigned used, size_t elem)
{
    if (at == rank) {
        test_transpose_case(rank, shape, perm, elem);
        return;
    }
    for (int d = 0; d < rank; d++)
        if (!(used & (1u << d))) {
            perm[at] = d;
            each_perm(rank, shape, perm, at + 1, used | (1u << d), elem);
        }
}

static void test_transpose(void)
{
    static const int64_t shapes[][4] = {
        { 3, 5, 0, 0 }, { 67, 45, 0, 0 }, { 1, 9, 0, 0 }, { 2, 3, 4, 0 },
        { 5, 1, 7, 0 }, { 40, 3, 33, 0 }, { 2, 3, 4, 5 }, { 2, 1, 3, 5 },
    };
    static const int ranks[] = { 2, 2, 2, 3, 3, 3, 4, 4 };
    static const size_t elems[] = { 1, 2, 4, 8 };
    int perm[8];
    for (size_t s = 0; s < sizeof ranks / sizeof *ranks; s++)
        for (size_t e = 0; e < 4; e++)
            each_perm(ranks[s], shapes[s], perm, 0, 0, elems[e]);
    static const int64_t shape5[] = { 2, 3, 2, 4, 3 };
    static const int perm5[] = { 4, 2, 0, 3, 1 };
    test_transpose_case(5, shape5, perm5, 4);
    static const int64_t shape8[] = { 2, 2, 3, 2, 1, 2, 3, 2 };
    static const int perm8[] = { 7, 0, 5, 2, 4, 1, 6, 3 };
    test_transpose_case(8, shape8, perm8, 8);
    static const int ident8[] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    test_transpose_case(8, shape8, ident8, 4);
}

/* ---- reduce --------------------------------------------------------------- */

static double fold(double acc, double v, shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BOOL)
        return op == SHD_MIN ? (acc && v) : (acc || v);
    if (op == SHD_SUM)
        return acc + v;
    return op == SHD_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

static double identity(shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BOOL)
        return op == SHD_MIN;
    return op == SHD_SUM ? 0 : op == SHD_MAX ? -INFINITY : INFINITY;
}

static void test_reduce_case(shd_dtype dt, shd_redop op, int rank,
                             const int64_t *shape, unsigned mask)
{
    int64_t n = 1, nout = 1;
    for (int d = 0; d < rank; d++) {
        n *= shape[d];
        if (!((mask >> d) & 1))
            nout *= shape[d];
    }
    size_t es = dt_size(dt);
    void *in = malloc((size_t)n * es + 1), *out = malloc((size_t)nout * es + 1);
    double *want = malloc((size_t)(nout + 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        put(in, dt, (size_t)i, dt == SHD_BOOL ? (i * 7) % 5 == 0 : (double)((i * 13) % 9) - 4);
    for (int64_t o = 0; o < nout; o++)
        want[o] = identity(dt, op);
    for (int64_t f = 0; f < n; f++) {
        int64_t rest = f, o = 0, ostride = 1;
        for (int d = rank - 1; d >= 0; d--) {
            int64_t c = rest % shape[d];
            rest /= shape[d];
            if (!((mask >> d) & 1)) {
                o += c * ostride;
                ostride *= shape[d];
            }
        }
        want[o] = fold(want[o], get(in, dt, (size_t)f), dt, op);
    }
    shd_reduce(in, out, dt, op, rank, shape, mask);
    int bad = 0;
    for (int64_t o = 0; o < nout; o++) {
        double w = want[o];
        if (dt == SHD_I32 && isinf(w))
            w = w > 0 ? INT32_MAX : INT32_MIN;
        if (get(out, dt, (size_t)o) != w && bad++ < 3)
            CHECK(0, "reduce %s op %d rank %d mask 0x%x out[%lld] = %g, expected %g",
                  dt_name(dt), (int)op, rank, mask, (long long)o,
                  get(out, dt, (size_t)o), w);
    }
    free(in);
    free(out);
    free(want);
}

static void test_reduce_special(void)
{
    /* f32 sums accumulate in double: 10^6 x 0.1f is exact to f32 rounding. */
    enum { M = 1000000 };
    float *x = malloc(M * sizeof *x), s;
    for (int i = 0; i < M; i++)
        x[i] = 0.1f;
    int64_t shape[1] = { M };
    shd_reduce(x, &s, SHD_F32, SHD_SUM, 1, shape, 1);
    CHECK(s == (float)(M * (double)0.1f), "f32 sum in double: %.9g", s);
    free(x);
    float v[3] = { 1, NAN, 3 }, r;
    int64_t s3[1] = { 3 };
    shd_reduce(v, &r, SHD_F32, SHD_MAX, 1, s3, 1);
    CHECK(isnan(r), "max propagates NaN");
    shd_reduce(v, &r, SHD_F32, SHD_MIN, 1, s3, 1);
    CHECK(isnan(r), "min propagates NaN");
    int32_t big[2] = { INT32_MAX, 1 }, w;
    int64_t s2[1] = { 2 };
    shd_reduce(big, &w, SHD_I32, SHD_SUM, 1, s2, 1);
    CHECK(w == INT32_MIN, "i32 sum wraps like NumPy's int32");
}

static void test_reduce(void)
{
    static const int64_t shapes[][4] = {
        { 0, 0, 0, 0 }, { 7, 0, 0, 0 }, { 3, 5, 0, 0 }, { 4, 1, 6, 0 },
        { 2, 3, 4, 5 }, { 3, 0, 2, 0 }, { 1, 1, 1, 1 },
    };
    static const int ranks[] = { 0, 1, 2, 3, 4, 3, 4 };
    for (size_t s = 0; s < sizeof ranks / sizeof *ranks; s++)
        for (unsigned mask = 0; mask < (1u << ranks[s]); mask++)
            for (int dt = SHD_F32; dt <= SHD_BOOL; dt++)
                for (int op = SHD_SUM; op <= SHD_MIN; op++)
                    test_reduce_case((shd_dtype)dt, (shd_redop)op, ranks[s],
                                     shapes[s], mask);
    test_reduce_special();
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    test_gemm();
    test_transpose();
    test_reduce();
    return finish("test_kernels");
}
