/* k_rows.h: what the row kernels of k_reduce.c and k_attention.c share.
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

#endif
