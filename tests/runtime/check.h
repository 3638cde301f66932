/* check.h: what the runtime unit tests share: a CHECK that records and
 * reports failures without stopping, start-up on a mesh that fits the
 * number of ranks, and a verdict agreed over all ranks.
 *
 * Each test calls MPI_Init itself first (shd_init accepts an MPI that is
 * already running), so it can pick its mesh from the world size.
 */
#ifndef CHECK_H
#define CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt.h"

static int g_failures;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            if (++g_failures <= 25) {                                        \
                fprintf(stderr, "rank %d: FAIL %s:%d: ", shd_world_rank(),   \
                        __FILE__, __LINE__);                                 \
                fprintf(stderr, __VA_ARGS__);                                \
                fputc('\n', stderr);                                         \
            }                                                                \
        }                                                                    \
    } while (0)

/* Starts MPI, then the runtime on the mesh {x: a, y: P/a} with a = 2 when
 * P is even, else 1 (so P = 8 gives {2, 4}, a mesh whose axes differ). */
static inline void start_2d(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    static const char *const names[] = { "x", "y" };
    int sizes[2] = { P % 2 == 0 ? 2 : 1, P % 2 == 0 ? P / 2 : P };
    shd_init(argc, argv, 2, names, sizes);
}

/* Agrees on the verdict, prints it on rank 0, stops the runtime; returns
 * the process exit status. */
static inline int finish(const char *name)
{
    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (shd_world_rank() == 0) {
        if (total)
            printf("%s: %d failures on %d ranks\n", name, total, shd_world_size());
        else
            printf("%s: ok (%d ranks)\n", name, shd_world_size());
    }
    fflush(stdout);
    shd_finalize();
    return total ? 1 : 0;
}

/* The groups every collective test runs over on a 2-D mesh: each axis, the
 * pair in both orders, and the empty group. */
typedef struct {
    int n;
    int axes[2];
    const char *name;
} test_group;

static const test_group k_groups[] = {
    { 1, { 0, 0 }, "{x}" },   { 1, { 1, 0 }, "{y}" },
    { 2, { 0, 1 }, "{x,y}" }, { 2, { 1, 0 }, "{y,x}" },
    { 0, { 0, 0 }, "{}" },
};
#define NGROUPS ((int)(sizeof k_groups / sizeof k_groups[0]))

static inline size_t dt_size(shd_dtype dt)
{
    return dt == SHD_F64 ? 8 : dt == SHD_BOOL ? 1 : dt == SHD_BF16 ? 2 : 4;
}

/* Stores / loads element i of a typed buffer through a double (all test
 * values are small integers, exact in every dtype (bf16: up to 256); bools
 * store v != 0). */
static inline void put(void *p, shd_dtype dt, size_t i, double v)
{
    switch (dt) {
    case SHD_F32: ((float *)p)[i] = (float)v; break;
    case SHD_F64: ((double *)p)[i] = v; break;
    case SHD_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case SHD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case SHD_BF16: ((uint16_t *)p)[i] = shd_f2bf((float)v); break;
    }
}

static inline double get(const void *p, shd_dtype dt, size_t i)
{
    switch (dt) {
    case SHD_F32: return ((const float *)p)[i];
    case SHD_F64: return ((const double *)p)[i];
    case SHD_I32: return ((const int32_t *)p)[i];
    case SHD_BOOL: return ((const uint8_t *)p)[i];
    case SHD_BF16: return shd_bf2f(((const uint16_t *)p)[i]);
    }
    return 0;
}

static inline const char *dt_name(shd_dtype dt)
{
    static const char *const n[] = { "f32", "f64", "i32", "bool", "bf16" };
    return n[dt];
}

#endif
