// RANKS: 1 2 4 8
/* test_openblas: shd_init's OpenBLAS fix-up, the way a generated program
 * meets it: shd_init is the first call (no MPI yet), so it may re-execute
 * the program with OPENBLAS_CORETYPE set.
 *
 * Checks, on every rank: OPENBLAS_NUM_THREADS is set (to 1 unless the user
 * chose) and OpenBLAS runs one thread; when the re-exec happened (marker
 * SHD_OPENBLAS_REEXEC set) OpenBLAS now reports the chosen core; when the
 * user did not choose a core and the CPU has AVX-512 (or AVX2 + FMA),
 * OpenBLAS does not run its generic Prescott kernels any more; argv
 * survived the re-exec unchanged (an extra argument is passed through).
 * The mesh is {d: P}, P taken from the launcher's environment.
 */
#include <strings.h>

#include "check.h"

char *openblas_get_corename(void);
int openblas_get_num_threads(void);

int main(int argc, char **argv)
{
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    int P = ws ? atoi(ws) : 1;
    static const char *const names[] = { "d" };
    shd_init(&argc, &argv, 1, names, &P);

    const char *threads = getenv("OPENBLAS_NUM_THREADS");
    CHECK(threads != NULL, "OPENBLAS_NUM_THREADS unset");
    if (threads && strcmp(threads, "1") == 0)
        CHECK(openblas_get_num_threads() == 1, "OpenBLAS runs %d threads",
              openblas_get_num_threads());
    const char *core = openblas_get_corename();
    const char *marker = getenv("SHD_OPENBLAS_REEXEC");
    const char *chosen = getenv("OPENBLAS_CORETYPE");
    if (marker) {
        CHECK(chosen != NULL, "re-executed without OPENBLAS_CORETYPE");
        CHECK(chosen && strcasecmp(core, chosen) == 0,
              "re-executed with OPENBLAS_CORETYPE=%s but OpenBLAS uses '%s'",
              chosen ? chosen : "?", core);
    }
    __builtin_cpu_init();
    bool modern = __builtin_cpu_supports("avx512f") ||
                  (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    if (modern && (!chosen || marker))
        CHECK(strcasecmp(core, "Prescott") != 0, "still on Prescott kernels");
    /* argv is intact after the re-exec (the runner passes none; we check
     * the program name at least). */
    CHECK(argc >= 1 && argv[0] && strstr(argv[0], "test_openblas"), "argv[0] = %s",
          argc >= 1 ? argv[0] : "(none)");
    if (shd_world_rank() == 0)
        fprintf(stderr, "test_openblas: OpenBLAS core %s%s%s\n", core,
                marker ? ", re-executed from " : "", marker ? marker : "");
    return finish("test_openblas");
}
