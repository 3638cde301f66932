// RANKS: 1 2 4
/* test_k_reduce: the reduction family's row kernels (runtime/k_reduce.c)
 * against naive double-precision loops, on rows long enough for every
 * vector path (several blocks of 1024, tails of every length), along the
 * last dim (inner == 1) and a strided one (inner > 1, chunks of 256 and a
 * tail): softmax, log_softmax, logsumexp (fused and in the sharded pieces),
 * their gradients, argmax/argmin with ties and NaNs at every lane position,
 * cumsum, and shd_reduce's fast paths (sum, max, min with NaNs).
 * argreduce_group: the global index of each row's extreme over the mesh
 * axis y, each rank holding one block of every row. bf16: cumsum's f32
 * sums rounded once per output (bit for bit, both directions, the strided
 * path across its chunks of 256), argmax/argmin the f32 kernel's positions
 * on the widened values (ties, NaNs), also across the mesh.
 */
#include <math.h>

#include "check.h"

static double val(int64_t i, int seed) { return sin((double)(i * 7 + seed * 13) * 0.37) * 4 + (double)(i % 5); }

static bool close(double a, double b, double tol) {
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= tol * (1 + fabs(b));
}

/* x[o, j, i] of a row problem */
#define AT(o, j, i) (((o) * n + (j)) * inner + (i))

static void test_softmax_case(shd_dtype dt, int64_t outer, int64_t n, int64_t inner) {
    size_t cnt = (size_t)(outer * n * inner), rows = (size_t)(outer * inner), es = dt == SHD_F32 ? 4 : 8;
    double tol = dt == SHD_F32 ? 2e-5 : 1e-12;
    void *x = malloc(cnt * es), *y = malloc(cnt * es), *g = malloc(cnt * es), *dx = malloc(cnt * es);
    /* the sharded pieces' row sums are double whatever the dtype (shdrt.h) */
    void *m = malloc(rows * es), *s = malloc(rows * sizeof(double)), *l = malloc(rows * es), *y2 = malloc(cnt * es);
#define GET(p, k) (dt == SHD_F32 ? (double)((float *)(p))[k] : ((double *)(p))[k])
#define PUT(p, k, v) (dt == SHD_F32 ? (void)(((float *)(p))[k] = (float)(v)) : (void)(((double *)(p))[k] = (v)))
    for (size_t k = 0; k < cnt; k++) {
        PUT(x, k, val((int64_t)k, 1));
        PUT(g, k, val((int64_t)k, 2) * 0.1);
    }
    for (int kind = 0; kind < 3; kind++) {
        shd_softmax(x, y, dt, kind, outer, n, inner);
        /* the same from the sharded pieces, on one block */
        shd_reduce(x, m, dt, SHD_MAX, 3, (int64_t[]){outer, n, inner}, 2u);
        shd_softmax_expsum(x, m, s, dt, outer, n, inner);
        shd_softmax_finish(x, m, s, y2, dt, kind, outer, n, inner);
        int bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < n; j++)
                    mx = fmax(mx, GET(x, AT(o, j, i)));
                for (int64_t j = 0; j < n; j++)
                    sum += exp(GET(x, AT(o, j, i)) - mx);
                double lse = mx + log(sum);
                if (kind == 2) {
                    bad += !close(GET(y, o * inner + i), lse, tol) || !close(GET(y2, o * inner + i), lse, tol);
                    continue;
                }
                for (int64_t j = 0; j < n; j++) {
                    double xv = GET(x, AT(o, j, i));
                    double want = kind == 0 ? exp(xv - lse) : xv - lse;
                    bad += !close(GET(y, AT(o, j, i)), want, tol) || !close(GET(y2, AT(o, j, i)), want, tol);
                }
            }
        CHECK(!bad, "softmax kind %d dt %d [%lld,%lld,%lld]: %d wrong", kind, dt, (long long)outer, (long long)n,
              (long long)inner, bad);
        if (kind == 2)
            continue;
        /* gradients, fused and in pieces */
        shd_softmax_grad(y, g, dx, dt, kind, outer, n, inner);
        shd_softmax_gsum(y, g, s, dt, kind, outer, n, inner);
        shd_softmax_gfinish(y, g, s, y2, dt, kind, outer, n, inner);
        bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double sum = 0;
                for (int64_t j = 0; j < n; j++)
                    sum += GET(g, AT(o, j, i)) * (kind == 0 ? GET(y, AT(o, j, i)) : 1);
                for (int64_t j = 0; j < n; j++) {
                    double yv = GET(y, AT(o, j, i)), gv = GET(g, AT(o, j, i));
                    double want = kind == 0 ? yv * (gv - sum) : gv - exp(yv) * sum;
                    bad += !close(GET(dx, AT(o, j, i)), want, tol * 10) || !close(GET(y2, AT(o, j, i)), want, tol * 10);
                }
            }
        CHECK(!bad, "softmax grad kind %d dt %d [%lld,%lld,%lld]: %d wrong", kind, dt, (long long)outer, (long long)n,
              (long long)inner, bad);
    }
    /* logsumexp's gradient: g * exp(x - lse) */
    shd_softmax(x, l, dt, 2, outer, n, inner);
    shd_logsumexp_grad(x, l, g, dx, dt, outer, n, inner);
    int bad = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = GET(g, o * inner + i) * exp(GET(x, AT(o, j, i)) - GET(l, o * inner + i));
                bad += !close(GET(dx, AT(o, j, i)), want, tol * 10);
            }
    CHECK(!bad, "logsumexp grad dt %d: %d wrong", dt, bad);
    free(x); free(y); free(g); free(dx); free(m); free(s); free(l); free(y2);
}

/* rows of -inf, NaN anywhere, +inf */
static void test_softmax_special(void) {
    enum { N = 100 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = -INFINITY;
    float lse;
    shd_softmax(x, &lse, SHD_F32, 2, 1, N, 1);
    CHECK(lse == -INFINITY, "logsumexp of -inf: %g", (double)lse);
    for (int p = 0; p < N; p += 7) {
        for (int i = 0; i < N; i++) x[i] = (float)val(i, 3);
        x[p] = NAN;
        shd_softmax(x, y, SHD_F32, 0, 1, N, 1);
        bool all = true;
        for (int i = 0; i < N; i++) all &= isnan(y[i]);
        CHECK(all, "softmax with a NaN at %d", p);
        x[p] = 1000.0f;
        shd_softmax(x, y, SHD_F32, 0, 1, N, 1);
        CHECK(close(y[p], 1.0, 1e-6), "softmax with a huge value at %d: %g", p, (double)y[p]);
        x[p] = INFINITY;   /* as NumPy's exp(x - max) / sum, JAX and PyTorch */
        shd_softmax(x, y, SHD_F32, 0, 1, N, 1);
        all = true;
        for (int i = 0; i < N; i++) all &= isnan(y[i]);
        CHECK(all, "softmax with +inf at %d", p);
        shd_softmax(x, &lse, SHD_F32, 2, 1, N, 1);
        CHECK(lse == INFINITY, "logsumexp with +inf at %d: %g", p, (double)lse);
    }
}

/* logits of 1e7, whose f32 ulp is 1: log_softmax and logsumexp's gradient
 * lose nothing (issue 28, F05: they were computed from x - logsumexp) */
static void test_softmax_offset(void) {
    enum { N = 50 };
    float x[N], y[N], dx[N], lse, g = 1;
    for (int i = 0; i < N; i++) x[i] = 1e7f + (float)(i % 3);
    shd_softmax(x, &lse, SHD_F32, SHD_LOGSUMEXP, 1, N, 1);
    shd_logsumexp_grad(x, &lse, &g, dx, SHD_F32, 1, N, 1);
    shd_softmax(x, y, SHD_F32, SHD_LOG_SOFTMAX, 1, N, 1);
    double z = 16 + 17 * exp(-1) + 17 * exp(-2);   /* the row's sum of exp(x - max) */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += !close(dx[i], exp(i % 3 - 2) / z, 1e-6);
        bad += !close(y[i], i % 3 - 2 - log(z), 1e-6);
    }
    CHECK(!bad, "softmax at an offset of 1e7: %d wrong", bad);
}

static void test_argreduce(void) {
    for (int64_t n = 1; n < 300; n += 37)
        for (int64_t inner = 1; inner <= 300; inner += 299) {
            int64_t outer = 3;
            size_t cnt = (size_t)(outer * n * inner);
            float *x = malloc(cnt * 4);
            int32_t *idx = malloc((size_t)(outer * inner) * 4), *xi = malloc(cnt * 4);
            for (size_t k = 0; k < cnt; k++) {
                x[k] = (float)((k * 7) % 5);      /* ties everywhere */
                xi[k] = (int32_t)((k * 11) % 4);
            }
            if (n > 5)
                x[AT(1, n - 2, 0)] = NAN;         /* row (1, 0): a NaN wins both */
            for (int op = SHD_MAX; op <= SHD_MIN; op++) {
                shd_argreduce(x, idx, SHD_F32, op, outer, n, inner);
                int bad = 0;
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t i = 0; i < inner; i++) {
                        int64_t best = 0;
                        for (int64_t j = 1; j < n; j++) {
                            float v = x[AT(o, j, i)], b = x[AT(o, best, i)];
                            if (isnan(b))
                                break;
                            if (isnan(v) || (op == SHD_MAX ? v > b : v < b))
                                best = j;
                        }
                        bad += idx[o * inner + i] != best;
                    }
                CHECK(!bad, "argreduce op %d n %lld inner %lld: %d wrong", op, (long long)n, (long long)inner, bad);
                shd_argreduce(xi, idx, SHD_I32, op, outer, n, inner);
                bad = 0;
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t i = 0; i < inner; i++) {
                        int64_t best = 0;
                        for (int64_t j = 1; j < n; j++)
                            if (op == SHD_MAX ? xi[AT(o, j, i)] > xi[AT(o, best, i)] : xi[AT(o, j, i)] < xi[AT(o, best, i)])
                                best = j;
                        bad += idx[o * inner + i] != best;
                    }
                CHECK(!bad, "argreduce i32 op %d: %d wrong", op, bad);
            }
            free(x); free(idx); free(xi);
        }
}

/* Every rank holds block g (its index along y) of each of 5 rows of the
 * global [5, G*m] array; the maximum sits at a global index every rank
 * knows, duplicated on two ranks (the smaller index wins). */
static void test_argreduce_group(void) {
    int axes[1] = {1};
    int G = shd_group_size(axes, 1), g = shd_group_index(axes, 1);
    enum { R = 5, M = 40 };
    float x[R * M];
    int32_t idx[R];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < M; j++) {
            int64_t gj = (int64_t)g * M + j;
            x[r * M + j] = (float)((gj * 3 + r) % 7);
            if (gj == (r * 17) % (G * M) || gj == (r * 17 + M) % (G * M))
                x[r * M + j] = 100.0f;
        }
    shd_argreduce_group(x, idx, SHD_F32, SHD_MAX, R, M, 1, axes, 1);
    for (int r = 0; r < R; r++) {
        int64_t a = (r * 17) % (G * M), b = (r * 17 + M) % (G * M);
        int64_t want = a < b ? a : b;
        CHECK(idx[r] == want, "argreduce_group row %d: %d, want %lld", r, idx[r], (long long)want);
    }
    shd_argreduce_group(x, idx, SHD_F32, SHD_MIN, R, M, 1, axes, 1);
    for (int r = 0; r < R; r++) {
        int64_t want = -1;
        for (int64_t gj = 0; gj < (int64_t)G * M && want < 0; gj++)
            if ((gj * 3 + r) % 7 == 0 && gj != (r * 17) % (G * M) && gj != (r * 17 + M) % (G * M))
                want = gj;
        CHECK(idx[r] == want, "argreduce_group min row %d: %d, want %lld", r, idx[r], (long long)want);
    }
}

static void test_cumsum(void) {
    int64_t outer = 2, n = 77, inner = 300;
    size_t cnt = (size_t)(outer * n * inner);
    double *x = malloc(cnt * 8), *y = malloc(cnt * 8);
    for (size_t k = 0; k < cnt; k++) x[k] = val((int64_t)k, 4);
    for (int64_t in = 1; in <= inner; in += inner - 1)
        for (int rev = 0; rev < 2; rev++) {
            shd_cumsum(x, y, SHD_F64, rev, outer, n, in);
            int bad = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < in; i++) {
                    double acc = 0;
                    for (int64_t jj = 0; jj < n; jj++) {
                        int64_t j = rev ? n - 1 - jj : jj;
                        acc += x[(o * n + j) * in + i];
                        bad += !close(y[(o * n + j) * in + i], acc, 1e-12);
                    }
                }
            CHECK(!bad, "cumsum inner %lld rev %d: %d wrong", (long long)in, rev, bad);
        }
    free(x); free(y);
}

static void test_bf16(void) {
    int64_t outer = 2, n = 77, inner = 300;
    size_t cnt = (size_t)(outer * n * inner);
    uint16_t *x = malloc(cnt * 2), *y = malloc(cnt * 2);
    float *xf = malloc(cnt * 4);
    int32_t *idx = malloc((size_t)(outer * inner) * 4), *want = malloc((size_t)(outer * inner) * 4);
    for (size_t k = 0; k < cnt; k++) {
        x[k] = shd_f2bf((float)val((int64_t)k, 6) * (k % 3 ? 1.0f : 37.0f));
        if (k % 11 == 0)
            x[k] = shd_f2bf((float)(k % 4));   /* ties */
        if (k % 1013 == 5)
            x[k] = shd_f2bf(NAN);
        xf[k] = shd_bf2f(x[k]);
    }
    for (int64_t in = 1; in <= inner; in += inner - 1) {
        for (int rev = 0; rev < 2; rev++) {
            shd_cumsum(x, y, SHD_BF16, rev, outer, n, in);
            int bad = 0, differs = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < in; i++) {
                    float acc = 0, step = 0;
                    for (int64_t jj = 0; jj < n; jj++) {
                        int64_t at = (o * n + (rev ? n - 1 - jj : jj)) * in + i;
                        acc += xf[at];
                        step = shd_bfr(step + xf[at]);
                        uint16_t w = shd_f2bf(acc);
                        bad += y[at] != w && !(isnan(acc) && isnan(shd_bf2f(y[at])));
                        differs += shd_f2bf(step) != w && !isnan(acc);
                    }
                }
            CHECK(!bad && differs, "bf16 cumsum inner %lld rev %d: %d wrong (%d would differ per step)",
                  (long long)in, rev, bad, differs);
        }
        for (int op = SHD_MAX; op <= SHD_MIN; op++) {
            shd_argreduce(x, idx, SHD_BF16, op, outer, n, in);
            shd_argreduce(xf, want, SHD_F32, op, outer, n, in);
            int bad = 0;
            for (int64_t r = 0; r < outer * in; r++)
                bad += idx[r] != want[r];
            CHECK(!bad, "bf16 argreduce op %d inner %lld: %d wrong", op, (long long)in, bad);
        }
    }
    int axes[1] = {1};
    for (int op = SHD_MAX; op <= SHD_MIN; op++) {
        shd_argreduce_group(x, idx, SHD_BF16, op, outer, n, inner, axes, 1);
        shd_argreduce_group(xf, want, SHD_F32, op, outer, n, inner, axes, 1);
        int bad = 0;
        for (int64_t r = 0; r < outer * inner; r++)
            bad += idx[r] != want[r];
        CHECK(!bad, "bf16 argreduce_group op %d: %d wrong", op, bad);
    }
    free(x); free(y); free(xf); free(idx); free(want);
}

static void test_reduce_fast(void) {
    int64_t shapes[][3] = {{7, 3001, 1}, {1, 5000, 1}, {3, 41, 300}, {1, 33, 517}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int64_t outer = shapes[c][0], n = shapes[c][1], inner = shapes[c][2];
        size_t cnt = (size_t)(outer * n * inner);
        float *x = malloc(cnt * 4), *out = malloc((size_t)(outer * inner) * 4);
        for (size_t k = 0; k < cnt; k++) x[k] = (float)val((int64_t)k, 5);
        x[AT(0, n - 1, 0)] = NAN;
        for (int op = 0; op < 3; op++) {
            shd_reduce(x, out, SHD_F32, op, 3, (int64_t[]){outer, n, inner}, 2u);
            int bad = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    double acc = op == SHD_SUM ? 0 : op == SHD_MAX ? -INFINITY : INFINITY;
                    bool nan = false;
                    for (int64_t j = 0; j < n; j++) {
                        double v = x[AT(o, j, i)];
                        nan |= isnan(v);
                        acc = op == SHD_SUM ? acc + v : op == SHD_MAX ? fmax(acc, v) : fmin(acc, v);
                    }
                    if (nan)
                        acc = NAN;
                    bad += !close(out[o * inner + i], acc, 1e-6);
                }
            CHECK(!bad, "reduce op %d [%lld,%lld,%lld]: %d wrong", op, (long long)outer, (long long)n,
                  (long long)inner, bad);
        }
        free(x); free(out);
    }
}

int main(int argc, char **argv) {
    start_2d(&argc, &argv);
    int64_t cases[][3] = {{3, 3001, 1}, {2, 17, 1}, {1, 1, 1}, {2, 33, 300}, {1, 5, 7}, {2, 1030, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        test_softmax_case(SHD_F32, cases[c][0], cases[c][1], cases[c][2]);
        test_softmax_case(SHD_F64, cases[c][0], cases[c][1], cases[c][2]);
    }
    test_softmax_special();
    test_softmax_offset();
    test_argreduce();
    test_argreduce_group();
    test_cumsum();
    test_bf16();
    test_reduce_fast();
    return finish("test_k_reduce");
}
