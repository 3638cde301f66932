// RANKS: 1
/* test_k_attention: the fused attention kernels (runtime/k_attention.c)
 * against a float64 attention written out, for f32, f64 and bf16:
 *
 * - sizes that leave partial blocks (T = 1, 70, 130 query rows against
 *   S = 1, 129, 200 keys: SHD_ATTN_BQ 64, SHD_ATTN_BK 128), head sizes 3
 *   and 16, plain and causal;
 * - grouped-query heads: 4 query heads on 2 key heads, a rank's 2 query
 *   heads 2 and 3 of a group of 4 on the one key head (qoff 2), and one
 *   key head per query head;
 * - the forward's out and lse (max, log sum), the gradient's dq, dk, dv
 *   from the kernel's own out (D = rowsum(g * out), as the kernel takes
 *   it); bf16 within half a bf16 ulp of each value plus the f32
 *   computation's error, its lse f32;
 * - no keys (S = 0): out 0, lse (0, -inf).
 *
 * `test_k_attention --bench` times f32 and bf16 at B=2, T=S=1024, N=8,
 * K=4, H=64 instead (the best of 5 calls each way).
 */
#include <math.h>
#include <time.h>

#include "check.h"

typedef struct {
    int64_t B, T, S, N, K, H, G, qoff;
} Sizes;

static size_t esize(shd_dtype dt) { return dt == SHD_F64 ? 8 : dt == SHD_F32 ? 4 : 2; }

static double elem_get(shd_dtype dt, const void *x, int64_t i)
{
    return dt == SHD_F64 ? ((const double *)x)[i] : dt == SHD_F32 ? ((const float *)x)[i]
                                                                  : shd_bf2f(((const uint16_t *)x)[i]);
}

static void elem_put(shd_dtype dt, void *x, int64_t i, double v)
{
    if (dt == SHD_F64)
        ((double *)x)[i] = v;
    else if (dt == SHD_F32)
        ((float *)x)[i] = (float)v;
    else
        ((uint16_t *)x)[i] = shd_d2bf(v);
}

static void *fill(shd_dtype dt, int64_t n, double amp)
{
    void *x = malloc((size_t)n * esize(dt) + 8);
    for (int64_t i = 0; i < n; i++)
        elem_put(dt, x, i, amp * ((double)rand() / RAND_MAX - 0.5));
    return x;
}

static double *widen(shd_dtype dt, const void *x, int64_t n)
{
    double *w = malloc((size_t)n * sizeof(double) + 8);
    for (int64_t i = 0; i < n; i++)
        w[i] = elem_get(dt, x, i);
    return w;
}

/* The probabilities of query row t of head n in batch b: p[0..S). */
static void probs(const Sizes *z, const double *q, const double *k, int64_t b, int64_t n, int64_t t, bool causal,
                  double scale, double *p)
{
    int64_t kh = (z->qoff + n) / z->G, vis = causal ? (t + 1 < z->S ? t + 1 : z->S) : z->S;
    double m = -INFINITY, l = 0;
    for (int64_t s = 0; s < z->S; s++) {
        double a = 0;
        for (int64_t h = 0; h < z->H; h++)
            a += q[((b * z->T + t) * z->N + n) * z->H + h] * k[((b * z->S + s) * z->K + kh) * z->H + h];
        p[s] = s < vis ? a * scale : -INFINITY;
        m = p[s] > m ? p[s] : m;
    }
    for (int64_t s = 0; s < z->S; s++)
        l += p[s] = exp(p[s] - m);
    for (int64_t s = 0; s < z->S; s++)
        p[s] /= l;
    p[z->S] = m, p[z->S + 1] = log(l);
}

/* |got - want| within half a unit of got's dtype at want (bf16: the final
 * rounding) plus the computation's error relative to the scale. */
static bool near(shd_dtype dt, double got, double want, double scale)
{
    double comp = dt == SHD_F64 ? 1e-12 : 2e-5, half = 0;
    if (dt == SHD_BF16 && want != 0)
        half = ldexp(1.0, ilogb(want) - 8);
    return fabs(got - want) <= half + comp * (scale > 1 ? scale : 1);
}

static double absmax(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static void test_case(shd_dtype dt, Sizes z, bool causal)
{
    int64_t nq = z.B * z.T * z.N * z.H, nk = z.B * z.S * z.K * z.H, rows = z.B * z.T * z.N;
    double scale = 1 / sqrt((double)(z.H ? z.H : 1));
    void *q = fill(dt, nq, 4), *k = fill(dt, nk, 2), *v = fill(dt, nk, 2), *g = fill(dt, nq, 2);
    size_t ls = dt == SHD_F64 ? 8 : 4;   /* lse: f32 for bf16 */
    void *o = malloc((size_t)nq * esize(dt) + 8), *lse = malloc((size_t)rows * 2 * ls + 8);
    void *dq = malloc((size_t)nq * esize(dt) + 8), *dk = malloc((size_t)nk * esize(dt) + 8);
    void *dv = malloc((size_t)nk * esize(dt) + 8);
    shd_attention(q, k, v, o, lse, dt, z.B, z.T, z.S, z.N, z.K, z.H, z.G, z.qoff, causal, scale);
    shd_attention_grad(q, k, v, o, lse, g, dq, dk, dv, dt, z.B, z.T, z.S, z.N, z.K, z.H, z.G, z.qoff, causal, scale);
    double *Q = widen(dt, q, nq), *K = widen(dt, k, nk), *V = widen(dt, v, nk), *G = widen(dt, g, nq);
    double *O = widen(dt, o, nq), *ro = calloc((size_t)nq + 1, 8), *rdq = calloc((size_t)nq + 1, 8);
    double *rdk = calloc((size_t)nk + 1, 8), *rdv = calloc((size_t)nk + 1, 8), *p = malloc(sizeof(double) * (size_t)(z.S + 2));
    double *dp = malloc(sizeof(double) * (size_t)(z.S + 1));
    const char *name = dt == SHD_F64 ? "f64" : dt == SHD_F32 ? "f32" : "bf16";
    for (int64_t b = 0; b < z.B; b++)
        for (int64_t n = 0; n < z.N; n++) {
            int64_t kh = (z.qoff + n) / z.G;
            for (int64_t t = 0; t < z.T; t++) {
                int64_t r = (b * z.T + t) * z.N + n, qi = r * z.H;
                probs(&z, Q, K, b, n, t, causal, scale, p);
                double lm = ls == 8 ? ((double *)lse)[2 * r] : ((float *)lse)[2 * r];
                double ll = ls == 8 ? ((double *)lse)[2 * r + 1] : ((float *)lse)[2 * r + 1];
                CHECK(fabs(lm - p[z.S]) <= 1e-5 * (1 + fabs(p[z.S])) && fabs(ll - p[z.S + 1]) <= 1e-5 * (1 + ll),
                      "%s lse of row %lld: (%g, %g), want (%g, %g)", name, (long long)r, lm, ll, p[z.S], p[z.S + 1]);
                double D = 0;
                for (int64_t h = 0; h < z.H; h++)
                    D += G[qi + h] * O[qi + h];
                for (int64_t s = 0; s < z.S; s++) {
                    int64_t ki = ((b * z.S + s) * z.K + kh) * z.H;
                    dp[s] = 0;
                    for (int64_t h = 0; h < z.H; h++) {
                        ro[qi + h] += p[s] * V[ki + h];
                        rdv[ki + h] += p[s] * G[qi + h];
                        dp[s] += G[qi + h] * V[ki + h];
                    }
                    double ds = p[s] * (dp[s] - D) * scale;
                    for (int64_t h = 0; h < z.H; h++) {
                        rdq[qi + h] += ds * K[ki + h];
                        rdk[ki + h] += ds * Q[qi + h];
                    }
                }
            }
        }
    struct { const char *what; const void *got; const double *want; int64_t n; } outs[4] = {
        { "out", o, ro, nq }, { "dq", dq, rdq, nq }, { "dk", dk, rdk, nk }, { "dv", dv, rdv, nk } };
    for (int i = 0; i < 4; i++) {
        double sc = absmax(outs[i].want, outs[i].n);
        int bad = 0;
        for (int64_t j = 0; j < outs[i].n && bad < 3; j++) {
            double got = elem_get(dt, outs[i].got, j);
            if (!near(dt, got, outs[i].want[j], sc)) {
                bad++;
                CHECK(0, "%s %s B%lld T%lld S%lld N%lld K%lld H%lld G%lld qoff%lld %s at %lld: %.9g, want %.9g",
                      name, outs[i].what, (long long)z.B, (long long)z.T, (long long)z.S, (long long)z.N,
                      (long long)z.K, (long long)z.H, (long long)z.G, (long long)z.qoff, causal ? "causal" : "full",
                      (long long)j, got, outs[i].want[j]);
            }
        }
    }
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
    free(Q), free(K), free(V), free(G), free(O), free(ro), free(rdq), free(rdk), free(rdv), free(p), free(dp);
}

static void test_empty(shd_dtype dt)
{
    float lse[2 * 6];
    uint16_t o[6 * 4];
    memset(o, 0xff, sizeof o);
    shd_attention(o, o, o, o, lse, dt, 1, 3, 0, 2, 1, 4, 2, 0, false, 0.5);
    for (int i = 0; i < 6; i++)
        CHECK(lse[2 * i] == 0 && lse[2 * i + 1] == -INFINITY, "bf16 empty lse %d: (%g, %g)", i, lse[2 * i],
              lse[2 * i + 1]);
    for (int i = 0; i < 6 * 4; i++)
        CHECK(o[i] == 0, "bf16 empty out %d: %#x", i, o[i]);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void bench(shd_dtype dt)
{
    int64_t B = 2, T = 1024, S = 1024, N = 8, K = 4, H = 64, nq = B * T * N * H, nk = B * S * K * H;
    void *q = fill(dt, nq, 1), *k = fill(dt, nk, 1), *v = fill(dt, nk, 1), *g = fill(dt, nq, 1);
    void *o = malloc((size_t)nq * esize(dt)), *lse = malloc((size_t)(B * T * N) * 2 * 4);
    void *dq = malloc((size_t)nq * esize(dt)), *dk = malloc((size_t)nk * esize(dt)), *dv = malloc((size_t)nk * esize(dt));
    for (int causal = 0; causal < 2; causal++) {
        double bf = INFINITY, bb = INFINITY;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            shd_attention(q, k, v, o, lse, dt, B, T, S, N, K, H, 2, 0, causal, 0.125);
            double t1 = now();
            shd_attention_grad(q, k, v, o, lse, g, dq, dk, dv, dt, B, T, S, N, K, H, 2, 0, causal, 0.125);
            double t2 = now();
            bf = t1 - t0 < bf ? t1 - t0 : bf;
            bb = t2 - t1 < bb ? t2 - t1 : bb;
        }
        printf("%s %s: forward %.1f ms, gradient %.1f ms\n", dt == SHD_F32 ? "f32" : "bf16",
               causal ? "causal" : "full", 1e3 * bf, 1e3 * bb);
    }
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
}

int main(int argc, char **argv)
{
    bool timing = argc > 1 && !strcmp(argv[1], "--bench");
    start_2d(&argc, &argv);
    if (timing) {
        bench(SHD_F32);
        bench(SHD_BF16);
        return finish("test_k_attention");
    }
    static const shd_dtype dts[3] = { SHD_F32, SHD_F64, SHD_BF16 };
    static const int64_t Ts[3] = { 1, 70, 130 }, Ss[3] = { 1, 129, 200 };
    static const Sizes heads[3] = { { .N = 4, .K = 2, .G = 2 }, { .N = 2, .K = 1, .G = 4, .qoff = 2 },
                                    { .N = 2, .K = 2, .G = 1 } };
    srand(7);
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 2; c++) {
                Sizes z = heads[(i + c) % 3];
                z.B = 2, z.T = Ts[i], z.S = Ss[(i + c) % 3], z.H = i == 1 ? 3 : 16;
                test_case(dts[d], z, c);
            }
    }
    test_empty(SHD_BF16);
    return finish("test_k_attention");
}
