/* k_attention.c: fused scaled dot-product attention (jax.nn.dot_product_
 * attention's layout) and its derivative, without ever forming the T x S
 * score matrix (flash attention: Dao et al. 2022, FlashAttention-2's loop
 * order for the backward pass).
 *
 * Layout (local blocks, row-major): q, out [B, T, N, H]; k, v [B, S, K, H];
 * lse [B, T, N, 2] (f32 for bf16 arrays): each query row's max scaled score m and log l, l the
 * sum of exp(score - m), from which the backward pass recomputes the
 * probabilities as exp((score - m) - log l). Not their sum, the
 * log-sum-exp: rounded to the dtype at a row's magnitude, that loses up to
 * half an ulp of m (1/32 at 1e6 in f32, a 3% error in every probability),
 * and beside m = 1e37 it loses log l altogether. Query head n uses
 * key/value head (qoff + n) / G, G = N_global / K_global (grouped-query
 * attention); qoff places this rank's query heads relative to its key
 * heads (0 when both are split alike, the first query head's global index
 * when the key heads are replicated). causal hides keys s > t (top-left
 * aligned, as JAX's mask).
 *
 * Forward, per (batch, head) and block of SHD_ATTN_BQ query rows: for each
 * block of SHD_ATTN_BK keys that a causal mask does not hide entirely, the
 * score block scale * Q Kᵀ (one GEMM, operands read in place with their
 * strides), the causal mask on the diagonal block, the online softmax
 * (running row max and sum; the accumulator rescaled when the max grows),
 * and acc += P V (one GEMM); finally out = acc / sum and lse = (max,
 * log(sum)). Backward, per (batch, head): D = rowsum(dO * O), then for each
 * key block and each query block that sees it: P = exp((scale Q Kᵀ - max) -
 * log sum),
 * dV += Pᵀ dO, dP = dO Vᵀ, dS = P * (dP - D), dQ += scale dS K, dK +=
 * scale dSᵀ Q: five GEMMs on blocks in cache, the elementwise steps one
 * pass each over the block. dK and dV of a key head collect the
 * contributions of every query head of its group.
 *
 * Speed: the products are OpenBLAS GEMMs on blocks that stay in L2; the
 * row statistics, exp and rescaling run over contiguous rows with
 * independent lanes (as k_reduce.c's row kernels), which the compiler turns
 * into vector code; f32 exp is shdrt.h's vectorisable shd_expf. Every
 * function is compiled for the default, AVX2 and AVX-512 instruction sets,
 * the loader choosing.
 *
 * Numerics: scores, probabilities and the accumulator are in the array's
 * dtype (as PyTorch's CPU flash attention); row sums accumulate in double.
 * bf16 arrays compute in f32, as PyTorch's CPU flash attention does for
 * bf16: the forward widens each query block and each key and value block
 * as it loads them (a block's copy in f32, leading dim H), the gradient
 * a head's q, g, k and v; out is rounded to bf16 once, dq, dk and dv are
 * accumulated in f32 and each rounded once (a key head's dk and dv when
 * its group's last query head is done), and lse is f32. The kernels are
 * written once over the storage type, through inline load/acc/flush/store
 * helpers that are the identity for f32 and f64, and the bf16 ones are
 * called from functions of their own: the f32 and f64 code is what it was
 * (the same results bit for bit, the same instruction counts;
 * tests/runtime/test_k_attention.c --bench times f32 and bf16).
 * A NaN in a row makes that row's output and lse NaN; a row whose keys are
 * all masked cannot occur (key 0 is always visible), except with S = 0,
 * where the output is 0 and lse (0, -inf) (the empty softmax).
 *
 * Invariants: each call allocates exactly shd_attention_scratch_bytes
 * (attention_blocks.h) from the buffer cache and releases it before it
 * returns, which is what `shdc explain` counts; each call is one timeline
 * span (SHD_TRACE=FILE.json), its GEMMs inside it, not separate spans.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attention_blocks.h"
#include "k_rows.h"
#include "shdrt_internal.h"

enum { BQ = SHD_ATTN_BQ, BK = SHD_ATTN_BK };

typedef struct {
    int64_t B, T, S, N, K, H, G, qoff;
} Dims;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- BLAS on blocks ---------------------------------------------------------- */

KERNEL void gemm_float(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

KERNEL void gemm_double(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                        int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc)
{
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* ---- row kernels ------------------------------------------------------------------ */

/* The max of a contiguous row in GCC's vector extensions (the loop
 * vectoriser leaves a float compare-and-select reduction scalar). A NaN is
 * skipped here; it still reaches the output through exp (NaN - m). */

#define DEFINE_ROWMAX(T, VT, VI)                                                        \
    KERNEL T rowmax_##T(const T *restrict x, int64_t n)                                 \
    {                                                                                   \
        enum { W = sizeof(VT) / sizeof(T) };                                            \
        VT a0, a1, v;                                                                   \
        for (int k = 0; k < W; k++) a0[k] = -INFINITY;                                  \
        a1 = a0;                                                                        \
        int64_t j = 0;                                                                  \
        for (; j + 2 * W <= n; j += 2 * W) {                                            \
            VI m;                                                                       \
            memcpy(&v, x + j, sizeof v);                                                \
            m = v > a0;                                                                 \
            a0 = (VT)(((VI)v & m) | ((VI)a0 & ~m));                                     \
            memcpy(&v, x + j + W, sizeof v);                                            \
            m = v > a1;                                                                 \
            a1 = (VT)(((VI)v & m) | ((VI)a1 & ~m));                                     \
        }                                                                               \
        T r = -INFINITY;                                                                \
        for (int k = 0; k < W; k++) {                                                   \
            r = a0[k] > r ? a0[k] : r;                                                  \
            r = a1[k] > r ? a1[k] : r;                                                  \
        }                                                                               \
        for (; j < n; j++) r = x[j] > r ? x[j] : r;                                     \
        return r;                                                                       \
    }

DEFINE_ROWMAX(float, vf32, vi32)
DEFINE_ROWMAX(double, vf64, vi64)


#define DEFINE_ROWS(T, EXP)                                                              \
    /* x = exp(x - m) in place; returns the row's sum (lanes, added in double) */       \
    KERNEL double rexp_##T(T *restrict x, T m, int64_t n)                                \
    {                                                                                    \
        T p[LANES] = { 0 };                                                              \
        int64_t j = 0;                                                                   \
        for (; j + LANES <= n; j += LANES)                                               \
            for (int k = 0; k < LANES; k++) {                                            \
                T e = EXP(x[j + k] - m);                                                 \
                x[j + k] = e;                                                            \
                p[k] += e;                                                               \
            }                                                                            \
        double s = 0;                                                                    \
        for (; j < n; j++) {                                                             \
            T e = EXP(x[j] - m);                                                         \
            x[j] = e;                                                                    \
            s += (double)e;                                                              \
        }                                                                                \
        for (int k = 0; k < LANES; k++) s += (double)p[k];                               \
        return s;                                                                        \
    }

DEFINE_ROWS(float, exp_f32)
DEFINE_ROWS(double, exp_f64)

/* ---- loading and storing by the arrays' dtype -------------------------------------- */

/* The kernels below are written once for a storage type ST (float, double,
 * bf16) and the type FT they compute in (ST itself, f32 for bf16). Rows x H
 * elements of an array of leading dim ld are read as FT through load_ST:
 * in place for float and double (the pointer and ld returned unchanged,
 * which the compiler inlines to nothing, so those kernels are what they
 * were), widened into the scratch w (leading dim H) for bf16. Results go
 * back through acc_ST and flush_ST: float and double accumulate in the
 * result arrays themselves; bf16 in the f32 scratch w, rounded once into
 * the result when the head is done. */
typedef uint16_t bf16;

#define DEFINE_SAME(T)                                                                         \
    KERNEL const T *load_##T(T *w, const T *x, int64_t rows, int64_t ld, int64_t H, int64_t *ldo) \
    {                                                                                          \
        (void)w, (void)rows, (void)H;                                                          \
        *ldo = ld;                                                                             \
        return x;                                                                              \
    }                                                                                          \
    KERNEL T *acc_##T(T *w, T *x, int64_t rows, int64_t ld, int64_t H, int64_t *ldo)             \
    {                                                                                          \
        (void)w, (void)rows, (void)H;                                                          \
        *ldo = ld;                                                                             \
        return x;                                                                              \
    }                                                                                          \
    KERNEL void flush_##T(T *x, const T *w, int64_t rows, int64_t ld, int64_t H)                 \
    {                                                                                          \
        (void)x, (void)w, (void)rows, (void)ld, (void)H;                                       \
    }                                                                                          \
    KERNEL void store_##T(T *restrict y, const T *restrict x, T mul, int64_t n)                 \
    {                                                                                          \
        for (int64_t h = 0; h < n; h++) y[h] = x[h] * mul;                                     \
    }

DEFINE_SAME(float)
DEFINE_SAME(double)

KERNEL const float *load_bf16(float *restrict w, const bf16 *restrict x, int64_t rows, int64_t ld, int64_t H,
                              int64_t *ldo)
{
    bf16_widen_rows(w, x, rows, H, ld);
    *ldo = H;
    return w;
}

KERNEL float *acc_bf16(float *w, bf16 *x, int64_t rows, int64_t ld, int64_t H, int64_t *ldo)
{
    (void)x, (void)ld;
    memset(w, 0, sizeof(float) * (size_t)(rows * H));
    *ldo = H;
    return w;
}

KERNEL void flush_bf16(bf16 *restrict x, const float *restrict w, int64_t rows, int64_t ld, int64_t H)
{
    bf16_narrow_rows(x, ld, w, rows, H);
}

KERNEL void store_bf16(bf16 *restrict y, const float *restrict x, float mul, int64_t n)
{
    for (int64_t h = 0; h < n; h++) y[h] = shd_f2bf(x[h] * mul);
}

/* The sum of x * y over a bf16 row, in double lanes (rdot_float's). */
KERNEL double rdot_bf16(const bf16 *restrict x, const bf16 *restrict y, int64_t n)
{
    double p[LANES] = { 0 };
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) p[k] += (double)shd_bf2f(x[j + k]) * (double)shd_bf2f(y[j + k]);
    for (; j < n; j++) p[0] += (double)shd_bf2f(x[j]) * (double)shd_bf2f(y[j]);
    double total = p[0];
    for (int k = 1; k < LANES; k++) total += p[k];
    return total;
}

/* ---- forward ----------------------------------------------------------------------- */

/* qw, kw, vw: bf16's widened blocks of q (BQ x H), k and v (BK x H each);
 * unused for float and double, which read their blocks in place. */
#define DEFINE_FORWARD(ST, FT, EXP)                                                                  \
    KERNEL void forward_##ST(const ST *q, const ST *k, const ST *v, ST *o, FT *lse, const Dims *d,   \
                             bool causal, FT scale, FT *restrict sb, FT *restrict acc,               \
                             double *restrict mrow, double *restrict lrow, FT *qw, FT *kw, FT *vw)   \
    {                                                                                               \
        const int64_t H = d->H, ldq = d->N * H, ldk = d->K * H;                                     \
        for (int64_t b = 0; b < d->B; b++)                                                          \
            for (int64_t n = 0; n < d->N; n++) {                                                    \
                int64_t kh = (d->qoff + n) / d->G;                                                  \
                const ST *qb = q + b * d->T * ldq + n * H;                                          \
                const ST *kb = k + b * d->S * ldk + kh * H, *vb = v + b * d->S * ldk + kh * H;      \
                ST *ob = o + b * d->T * ldq + n * H;                                                \
                FT *lb = lse + 2 * (b * d->T * d->N + n);                                           \
                for (int64_t t0 = 0; t0 < d->T; t0 += BQ) {                                         \
                    int64_t bq = min64(BQ, d->T - t0), ldqb, ldkb, ldvb;                            \
                    int64_t send = causal ? min64(d->S, t0 + bq) : d->S;                            \
                    const FT *qp = load_##ST(qw, qb + t0 * ldq, bq, ldq, H, &ldqb);                 \
                    for (int64_t i = 0; i < bq; i++) {                                              \
                        mrow[i] = -INFINITY;                                                        \
                        lrow[i] = 0;                                                                \
                    }                                                                               \
                    memset(acc, 0, sizeof(FT) * (size_t)(bq * H));                                  \
                    for (int64_t s0 = 0; s0 < send; s0 += BK) {                                     \
                        int64_t bk = min64(BK, send - s0);                                          \
                        const FT *kp = load_##ST(kw, kb + s0 * ldk, bk, ldk, H, &ldkb);             \
                        gemm_##FT(false, true, bq, bk, H, scale, qp, ldqb, kp, ldkb, 0, sb, bk);    \
                        if (causal && s0 + bk - 1 > t0)                                             \
                            for (int64_t i = 0; i < bq; i++) {                                      \
                                int64_t from = t0 + i - s0 + 1;                                     \
                                for (int64_t j = from < 0 ? 0 : from; j < bk; j++)                  \
                                    sb[i * bk + j] = -INFINITY;                                     \
                            }                                                                       \
                        for (int64_t i = 0; i < bq; i++) {                                          \
                            FT *row = sb + i * bk;                                                  \
                            double mx = rowmax_##FT(row, bk), mold = mrow[i];                       \
                            double mnew = mx > mold ? mx : mold;                                    \
                            if (mnew == -INFINITY) {                                                \
                                memset(row, 0, sizeof(FT) * (size_t)bk);                            \
                                continue;                                                           \
                            }                                                                       \
                            FT ms = isfinite(mnew) ? (FT)mnew : 0;                                  \
                            double s = rexp_##FT(row, ms, bk);                                      \
                            FT alpha = mold == -INFINITY ? 0 : (FT)exp(mold - (double)ms);          \
                            lrow[i] = lrow[i] * (double)alpha + s;                                  \
                            mrow[i] = ms;                                                           \
                            if (alpha != 1) {                                                       \
                                FT *ar = acc + i * H;                                               \
                                for (int64_t h = 0; h < H; h++) ar[h] *= alpha;                     \
                            }                                                                       \
                        }                                                                           \
                        const FT *vp = load_##ST(vw, vb + s0 * ldk, bk, ldk, H, &ldvb);             \
                        gemm_##FT(false, false, bq, H, bk, 1, sb, bk, vp, ldvb, 1, acc, H);         \
                    }                                                                               \
                    for (int64_t i = 0; i < bq; i++) {                                              \
                        store_##ST(ob + (t0 + i) * ldq, acc + i * H, (FT)(1.0 / lrow[i]), H);       \
                        lb[2 * (t0 + i) * d->N] = (FT)mrow[i];                                      \
                        lb[2 * (t0 + i) * d->N + 1] = (FT)log(lrow[i]);                             \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
    }

DEFINE_FORWARD(float, float, exp_f32)
DEFINE_FORWARD(double, double, exp_f64)
DEFINE_FORWARD(bf16, float, exp_f32)

/* ---- backward ---------------------------------------------------------------------- */

/* w: bf16's scratch, in turn a head's widened q and g (T x H each), k and v
 * (S x H each) and its f32 accumulators of dq (T x H), dk and dv (S x H
 * each); unused for float and double, which read in place and accumulate
 * in dq, dk, dv. The key/value head is loaded, and its dk and dv started,
 * when n reaches a new one (the query heads of a group are consecutive),
 * and flushed after the group's last query head. */
#define DEFINE_BACKWARD(ST, FT, EXP)                                                                 \
    KERNEL void backward_##ST(const ST *q, const ST *k, const ST *v, const ST *o, const FT *lse,     \
                              const ST *g, ST *dq, ST *dk, ST *dv, const Dims *d, bool causal,       \
                              FT scale, FT *restrict pb, FT *restrict dpb, double *restrict D, FT *w) \
    {                                                                                               \
        const int64_t H = d->H, ldq = d->N * H, ldk = d->K * H;                                     \
        FT *qw = w, *gw = w ? qw + d->T * H : w, *kw = w ? gw + d->T * H : w;                       \
        FT *vw = w ? kw + d->S * H : w, *dqw = w ? vw + d->S * H : w;                               \
        FT *dkw = w ? dqw + d->T * H : w, *dvw = w ? dkw + d->S * H : w;                            \
        for (int64_t b = 0; b < d->B; b++) {                                                        \
            const FT *kp = NULL, *vp = NULL;                                                        \
            FT *dka = NULL, *dva = NULL;                                                            \
            int64_t ldkp = 0, ldvp = 0, lddk = 0, lddv = 0, ldqp, ldgp, lddq;                       \
            for (int64_t n = 0; n < d->N; n++) {                                                    \
                int64_t kh = (d->qoff + n) / d->G;                                                  \
                int64_t qo = b * d->T * ldq + n * H, ko = b * d->S * ldk + kh * H;                  \
                const FT *lb = lse + 2 * (b * d->T * d->N + n);                                     \
                if (n == 0 || kh != (d->qoff + n - 1) / d->G) {                                     \
                    kp = load_##ST(kw, k + ko, d->S, ldk, H, &ldkp);                                \
                    vp = load_##ST(vw, v + ko, d->S, ldk, H, &ldvp);                                \
                    dka = acc_##ST(dkw, dk + ko, d->S, ldk, H, &lddk);                              \
                    dva = acc_##ST(dvw, dv + ko, d->S, ldk, H, &lddv);                              \
                }                                                                                   \
                const FT *qp = load_##ST(qw, q + qo, d->T, ldq, H, &ldqp);                          \
                const FT *gp = load_##ST(gw, g + qo, d->T, ldq, H, &ldgp);                          \
                FT *dqa = acc_##ST(dqw, dq + qo, d->T, ldq, H, &lddq);                              \
                for (int64_t t = 0; t < d->T; t++)                                                  \
                    D[t] = rdot_##ST(g + qo + t * ldq, o + qo + t * ldq, H);                        \
                for (int64_t s0 = 0; s0 < d->S; s0 += BK) {                                         \
                    int64_t bk = min64(BK, d->S - s0);                                              \
                    const FT *kj = kp + s0 * ldkp, *vj = vp + s0 * ldvp;                            \
                    FT *dkj = dka + s0 * lddk, *dvj = dva + s0 * lddv;                              \
                    for (int64_t t0 = causal ? s0 / BQ * BQ : 0; t0 < d->T; t0 += BQ) {             \
                        int64_t bq = min64(BQ, d->T - t0);                                          \
                        const FT *qi = qp + t0 * ldqp, *gi = gp + t0 * ldgp;                        \
                        gemm_##FT(false, true, bq, bk, H, scale, qi, ldqp, kj, ldkp, 0, pb, bk);    \
                        for (int64_t i = 0; i < bq; i++) {                                          \
                            FT *row = pb + i * bk, m = lb[2 * (t0 + i) * d->N];                     \
                            FT l = lb[2 * (t0 + i) * d->N + 1];                                     \
                            int64_t vis = causal ? min64(bk, t0 + i - s0 + 1) : bk;                 \
                            if (vis < 0) vis = 0;                                                   \
                            for (int64_t j = 0; j < vis; j++) row[j] = EXP((row[j] - m) - l);       \
                            for (int64_t j = vis; j < bk; j++) row[j] = 0;                          \
                        }                                                                           \
                        gemm_##FT(true, false, bk, H, bq, 1, pb, bk, gi, ldgp, 1, dvj, lddv);       \
                        gemm_##FT(false, true, bq, bk, H, 1, gi, ldgp, vj, ldvp, 0, dpb, bk);       \
                        for (int64_t i = 0; i < bq; i++) {                                          \
                            FT di = (FT)D[t0 + i], *dr = dpb + i * bk;                              \
                            const FT *pr = pb + i * bk;                                             \
                            for (int64_t j = 0; j < bk; j++) dr[j] = pr[j] * (dr[j] - di);          \
                        }                                                                           \
                        gemm_##FT(false, false, bq, H, bk, scale, dpb, bk, kj, ldkp, 1,             \
                                  dqa + t0 * lddq, lddq);                                           \
                        gemm_##FT(true, false, bk, H, bq, scale, dpb, bk, qi, ldqp, 1, dkj, lddk);  \
                    }                                                                               \
                }                                                                                   \
                flush_##ST(dq + qo, dqa, d->T, ldq, H);                                             \
                if (n == d->N - 1 || kh != (d->qoff + n + 1) / d->G) {                              \
                    flush_##ST(dk + ko, dka, d->S, ldk, H);                                         \
                    flush_##ST(dv + ko, dva, d->S, ldk, H);                                         \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }

DEFINE_BACKWARD(float, float, exp_f32)
DEFINE_BACKWARD(double, double, exp_f64)
DEFINE_BACKWARD(bf16, float, exp_f32)

/* ---- checks and the entry points ---------------------------------------------------- */

static Dims dims_of(shd_dtype dt, int64_t B, int64_t T, int64_t S, int64_t N, int64_t K, int64_t H, int64_t G,
                    int64_t qoff, const char *what)
{
    if (dt != SHD_F32 && dt != SHD_F64 && dt != SHD_BF16)
        shd_fatal("%s: dtype %s is not a float", what, shd_dtype_name(dt));
    if (B < 0 || T < 0 || S < 0 || N < 0 || K <= 0 || H < 0 || G <= 0)
        shd_fatal("%s: bad sizes B=%lld T=%lld S=%lld N=%lld K=%lld H=%lld G=%lld", what, (long long)B,
                  (long long)T, (long long)S, (long long)N, (long long)K, (long long)H, (long long)G);
    if (N * H > INT_MAX || K * H > INT_MAX || T > INT_MAX || S > INT_MAX)
        shd_fatal("%s: a row of %lld or %lld elements exceeds the BLAS integer range", what, (long long)(N * H),
                  (long long)(K * H));
    if (N && (qoff < 0 || (qoff + N - 1) / G >= K))
        shd_fatal("%s: query heads %lld..%lld (group size %lld) need key heads this rank does not hold (%lld)", what,
                  (long long)qoff, (long long)(qoff + N - 1), (long long)G, (long long)K);
    return (Dims){B, T, S, N, K, H, G, qoff};
}

/* The bytes of an element as stored and as computed (bf16 in f32). */
static size_t stored_size(shd_dtype dt) { return dt == SHD_F32 ? 4 : dt == SHD_BF16 ? 2 : 8; }
static size_t compute_size(shd_dtype dt) { return dt == SHD_F64 ? 8 : 4; }

/* The bf16 kernels in functions of their own, so that the f32 and f64
 * ones are compiled alone in theirs, as before bf16 had a kernel. */
CLONES static void attention_bf16(const void *q, const void *k, const void *v, void *out, void *lse, const Dims *d,
                                  bool causal, float scale, void *sb, void *acc, double *mrow, double *lrow)
{
    int64_t bq = min64(BQ, d->T), bk = min64(BK, d->S);
    float *qw = (float *)acc + bq * d->H, *kw = qw + bq * d->H, *vw = kw + bk * d->H;
    forward_bf16(q, k, v, out, lse, d, causal, scale, sb, acc, mrow, lrow, qw, kw, vw);
}

CLONES static void attention_grad_bf16(const void *q, const void *k, const void *v, const void *o, const void *lse,
                                       const void *g, void *dq, void *dk, void *dv, const Dims *d, bool causal,
                                       float scale, void *pb, void *dpb, double *D)
{
    int64_t bq = min64(BQ, d->T), bk = min64(BK, d->S);
    backward_bf16(q, k, v, o, lse, g, dq, dk, dv, d, causal, scale, pb, dpb, D, (float *)dpb + bq * bk);
}

CLONES static void attention_impl(const void *q, const void *k, const void *v, void *out, void *lse,
                                  shd_dtype dt, const Dims *d, bool causal, double scale)
{
    size_t es = compute_size(dt);
    int64_t rows = d->B * d->T * d->N;
    if (!rows)
        return;
    if (!d->S || !d->H) {
        /* the empty softmax: weights over no keys, or values of no size */
        memset(out, 0, stored_size(dt) * (size_t)(rows * d->H));
        for (int64_t i = 0; i < rows; i++) {
            double l = d->S ? log((double)d->S) : -INFINITY;
            if (dt != SHD_F64) ((float *)lse)[2 * i] = 0, ((float *)lse)[2 * i + 1] = (float)l;
            else ((double *)lse)[2 * i] = 0, ((double *)lse)[2 * i + 1] = l;
        }
        return;
    }
    int64_t bq = min64(BQ, d->T), bk = min64(BK, d->S);
    char *scratch = shd_alloc((size_t)shd_attention_scratch_bytes(0, d->T, d->S, d->H, stored_size(dt)));
    double *mrow = (double *)scratch, *lrow = mrow + bq;
    void *sb = lrow + bq, *acc = (char *)sb + es * (size_t)(bq * bk);
    if (dt == SHD_F32) {
        forward_float(q, k, v, out, lse, d, causal, (float)scale, sb, acc, mrow, lrow, NULL, NULL, NULL);
    } else if (dt == SHD_BF16) {
        attention_bf16(q, k, v, out, lse, d, causal, (float)scale, sb, acc, mrow, lrow);
    } else {
        forward_double(q, k, v, out, lse, d, causal, scale, sb, acc, mrow, lrow, NULL, NULL, NULL);
    }
    shd_release(scratch);
}

CLONES static void attention_grad_impl(const void *q, const void *k, const void *v, const void *o,
                                       const void *lse, const void *g, void *dq, void *dk, void *dv,
                                       shd_dtype dt, const Dims *d, bool causal, double scale)
{
    size_t es = compute_size(dt), ss = stored_size(dt);
    memset(dq, 0, ss * (size_t)(d->B * d->T * d->N * d->H));
    memset(dk, 0, ss * (size_t)(d->B * d->S * d->K * d->H));
    memset(dv, 0, ss * (size_t)(d->B * d->S * d->K * d->H));
    if (!d->B || !d->T || !d->S || !d->N || !d->H)
        return;
    int64_t bq = min64(BQ, d->T), bk = min64(BK, d->S);
    char *scratch = shd_alloc((size_t)shd_attention_scratch_bytes(1, d->T, d->S, d->H, ss));
    double *D = (double *)scratch;
    void *pb = D + d->T, *dpb = (char *)pb + es * (size_t)(bq * bk);
    if (dt == SHD_F32)
        backward_float(q, k, v, o, lse, g, dq, dk, dv, d, causal, (float)scale, pb, dpb, D, NULL);
    else if (dt == SHD_BF16)
        attention_grad_bf16(q, k, v, o, lse, g, dq, dk, dv, d, causal, (float)scale, pb, dpb, D);
    else
        backward_double(q, k, v, o, lse, g, dq, dk, dv, d, causal, scale, pb, dpb, D, NULL);
    shd_release(scratch);
}

void shd_attention(const void *q, const void *k, const void *v, void *out, void *lse, shd_dtype dt, int64_t B,
                   int64_t T, int64_t S, int64_t N, int64_t K, int64_t H, int64_t group, int64_t qoff, bool causal,
                   double scale)
{
    Dims d = dims_of(dt, B, T, S, N, K, H, group, qoff, "dot_product_attention");
    shd_span_begin(SHD_SPAN_COMPUTE, "attention", 0);
    shd_span_args(B * N, T, S);
    attention_impl(q, k, v, out, lse, dt, &d, causal, scale);
    shd_span_end();
}

void shd_attention_grad(const void *q, const void *k, const void *v, const void *o, const void *lse, const void *g,
                        void *dq, void *dk, void *dv, shd_dtype dt, int64_t B, int64_t T, int64_t S, int64_t N,
                        int64_t K, int64_t H, int64_t group, int64_t qoff, bool causal, double scale)
{
    Dims d = dims_of(dt, B, T, S, N, K, H, group, qoff, "dot_product_attention's gradient");
    shd_span_begin(SHD_SPAN_COMPUTE, "attention_grad", 0);
    shd_span_args(B * N, T, S);
    attention_grad_impl(q, k, v, o, lse, g, dq, dk, dv, dt, &d, causal, scale);
    shd_span_end();
}
