/* openblas_core.h: which OpenBLAS kernels to ask for on this CPU, shared by
 * the runtime (mesh.c re-executes a program with OPENBLAS_CORETYPE set
 * when OpenBLAS chose generic kernels) and bench/sgemm_rate.c (the rate it
 * compares a step with must be that of the kernels the step runs). */
#ifndef SHD_OPENBLAS_CORE_H
#define SHD_OPENBLAS_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <strings.h>

/* Kernels OpenBLAS falls back to when it does not know the CPU: all predate
 * AVX2, so on a CPU with AVX2 or AVX-512 they waste most of the FPU. */
static inline bool shd_generic_core(const char *name, bool has_avx2)
{
    static const char *const old[] = {
        "prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
        "katmai", "coppermine", "northwood", "banias", "generic", "unknown",
        "athlon", "opteron", "barcelona",
    };
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
        if (strcasecmp(name, old[i]) == 0)
            return true;
    return has_avx2 && strcasecmp(name, "sandybridge") == 0;
}

/* The OPENBLAS_CORETYPE to ask for when OpenBLAS chose `core`: NULL when
 * core suits this CPU (or nothing better does). */
static inline const char *shd_openblas_core_wanted(const char *core)
{
    __builtin_cpu_init();
    if (!core || !shd_generic_core(core, __builtin_cpu_supports("avx2")))
        return NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

#endif
