/* k_rows.h: what the row kernels of k_reduce.c and k_attention.c (and
 * kernels.c's conversions around a bf16 gemm) share.
 *
 * Each .c file compiles its exported functions once per instruction set
 * (CLONES: default, AVX2, AVX-512, the loader choosing) and inlines the
 * kernels below into each of them (KERNEL), so that every clone gets its
 * own vector code. Rows are summed in LANES independent double
 * accumulators, which the compiler turns into vector code and which make
 * the result independent of the instruction set chosen.
 */
#ifndef SHD_K_ROWS_H
#define SHD_K_ROWS_H

#include <math.h>
#include <stdint.h>

#include "shdrt_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define CLONES
#endif

#define KERNEL static inline __attribute__((always_inline))

enum { LANES = 16 };

/* GCC's vector extensions, for reductions the loop vectoriser leaves
 * scalar (a float compare-and-select). */
typedef float vf32 __attribute__((vector_size(32)));
typedef int32_t vi32 __attribute__((vector_size(32)));
typedef double vf64 __attribute__((vector_size(32)));
typedef int64_t vi64 __attribute__((vector_size(32)));

static inline float exp_f32(float x) { return shd_expf(x); }   /* shdrt.h: vectorises */
static inline double exp_f64(double x) { return exp(x); }

/* rdot_T(x, y, n): the sum of x * y over a contiguous row, in double lanes. */
#define DEFINE_RDOT(T)                                                                   \
    KERNEL double rdot_##T(const T *restrict x, const T *restrict y, int64_t n)          \
    {                                                                                    \
        double p[LANES] = { 0 };                                                         \
        int64_t j = 0;                                                                   \
        for (; j + LANES <= n; j += LANES)                                               \
            for (int k = 0; k < LANES; k++) p[k] += (double)x[j + k] * (double)y[j + k]; \
        for (; j < n; j++) p[0] += (double)x[j] * (double)y[j];                          \
        double total = p[0];                                                             \
        for (int k = 1; k < LANES; k++) total += p[k];                                   \
        return total;                                                                    \
    }

DEFINE_RDOT(float)
DEFINE_RDOT(double)

/* The conversions of a bf16 operand computed in f32 (shdrt.h's):
 * bf16_widen_rows copies rows x cols of x (leading dim ld) into the dense
 * w, exactly; bf16_narrow_rows rounds them back from w into x, each element
 * once. Inlined into each clone, they become its vector code (vpmovzxwd and
 * vpslld widen 8 or 16 at once): scalar, they took about a third of a
 * small bf16 product's time. */
KERNEL void bf16_widen_rows(float *restrict w, const uint16_t *restrict x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) w[i * cols + j] = shd_bf2f(x[i * ld + j]);
}

KERNEL void bf16_narrow_rows(uint16_t *restrict x, int64_t ld, const float *restrict w, int64_t rows, int64_t cols)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) x[i * ld + j] = shd_f2bf(w[i * cols + j]);
}

#endif
