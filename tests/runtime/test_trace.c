// RANKS: 1 2 4 8
/* test_trace: the communication counters against the formulas `shdc
 * explain` uses (n = bytes of this rank's input, G = group size):
 *   all_reduce 2 (G-1) n / G, all_gather (G-1) n, reduce_scatter (G-1) n / G,
 *   all_to_all (G-1) n / G, ppermute n (0 when G == 1 or shift % G == 0),
 *   permute n (0 when dest == self).
 * One call of each kind over the whole 2-D mesh and over one axis, then
 * shd_trace_reset, then the SHD_TRACE=1 table that shd_finalize prints on
 * rank 0 (captured from stderr), including peak_bytes and the maxima over
 * ranks.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"

enum { N = 4096 };   /* elements; divisible by every group size used */

static uint64_t expect[6][2];   /* per kind: count, bytes */
static const char *const kinds[6] = { "all_reduce", "all_gather", "reduce_scatter",
                                      "all_to_all", "ppermute", "permute" };

static void one_of_each(const int *axes, int n)
{
    static float in[N], out[N * 8];
    uint64_t G = (uint64_t)shd_group_size(axes, n), bytes = sizeof in;
    int64_t shape[1] = { N };
    shd_all_reduce(in, N, SHD_F32, SHD_SUM, axes, n);
    expect[0][1] += 2 * (G - 1) * bytes / G;
    shd_all_gather(in, out, SHD_F32, 1, shape, 0, axes, n);
    expect[1][1] += (G - 1) * bytes;
    shd_reduce_scatter(in, out, SHD_F32, SHD_SUM, 1, shape, 0, axes, n);
    expect[2][1] += (G - 1) * bytes / G;
    shd_all_to_all(in, out, SHD_F32, 1, shape, 0, 0, axes, n);
    expect[3][1] += (G - 1) * bytes / G;
    shd_ppermute(in, out, bytes, 1, axes, n);
    expect[4][1] += G == 1 ? 0 : bytes;
    shd_ppermute(in, out, bytes, (int)G, axes, n);   /* no movement */
    expect[4][1] += 0;
    expect[4][0]++;
    int me = shd_world_rank(), P = shd_world_size();
    shd_permute(in, out, bytes, (me + 1) % P, (me + P - 1) % P);
    expect[5][1] += P == 1 ? 0 : bytes;
    for (int k = 0; k < 6; k++)
        expect[k][0]++;
}

static void check_counters(void)
{
    for (int k = 0; k < 6; k++) {
        CHECK(shd_trace_count(kinds[k]) == expect[k][0], "%s count %llu != %llu",
              kinds[k], (unsigned long long)shd_trace_count(kinds[k]),
              (unsigned long long)expect[k][0]);
        CHECK(shd_trace_bytes(kinds[k]) == expect[k][1], "%s bytes %llu != %llu",
              kinds[k], (unsigned long long)shd_trace_bytes(kinds[k]),
              (unsigned long long)expect[k][1]);
    }
}

/* Rank 0: runs shd_finalize with SHD_TRACE=1 and stderr in a file, then
 * compares the table. Returns the number of mismatches. */
static int finalize_and_check_table(void)
{
    char path[] = "/tmp/shd_test_trace.XXXXXX";
    int fd = -1, saved = -1;
    if (shd_world_rank() == 0) {
        setenv("SHD_TRACE", "1", 1);
        fd = mkstemp(path);
        fflush(stderr);
        saved = dup(2);
        dup2(fd, 2);
    } else {
        unsetenv("SHD_TRACE");
    }
    size_t peak = shd_peak_bytes();
    struct rusage before;
    getrusage(RUSAGE_SELF, &before);
    long rss_before = before.ru_maxrss;
    shd_finalize();
    if (fd < 0)
        return 0;
    fflush(stderr);
    dup2(saved, 2);
    char got[4096] = { 0 }, want[4096];
    pread(fd, got, sizeof got - 1, 0);
    close(fd);
    unlink(path);
    size_t at = 0;
    for (int k = 0; k < 6; k++)
        at += (size_t)snprintf(want + at, sizeof want - at,
                               "shdc trace: rank 0: %s count=%llu bytes=%llu\n",
                               kinds[k], (unsigned long long)expect[k][0],
                               (unsigned long long)expect[k][1]);
    at += (size_t)snprintf(want + at, sizeof want - at, "shdc trace: rank 0: peak_bytes=%zu\n", peak);
    /* Every rank made the same calls, and every rank moves in the permute. */
    for (int k = 0; k < 6; k++)
        at += (size_t)snprintf(want + at, sizeof want - at,
                               "shdc trace: max over ranks: %s count=%llu bytes=%llu\n",
                               kinds[k], (unsigned long long)expect[k][0],
                               (unsigned long long)expect[k][1]);
    snprintf(want + at, sizeof want - at, "shdc trace: max over ranks: peak_bytes=%zu\n", peak);
    /* Then the largest peak resident set of any rank: at least this rank's
     * before finalize, at most the largest after (every rank has exited
     * finalize's reduction by then, so its peak is final). */
    const char *rss_line = "shdc trace: max over ranks: maxrss_kib=";
    char *rss = strstr(got, rss_line);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!rss || rss[strlen(rss) - 1] != '\n' || strtoull(rss + strlen(rss_line), NULL, 10) < (unsigned long long)rss_before ||
        strtoull(rss + strlen(rss_line), NULL, 10) > (unsigned long long)ru.ru_maxrss * 64) {
        fprintf(stderr, "FAIL: SHD_TRACE table: no maxrss_kib line from %ld KiB on:\n%s", rss_before, got);
        return 1;
    }
    *rss = 0;
    if (strcmp(got, want) == 0)
        return 0;
    fprintf(stderr, "FAIL: SHD_TRACE table:\n%s--- expected:\n%s", got, want);
    return 1;
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    int xy[2] = { 0, 1 }, y[1] = { 1 };
    one_of_each(xy, 2);
    check_counters();
    shd_trace_reset();
    memset(expect, 0, sizeof expect);
    check_counters();
    one_of_each(y, 1);
    one_of_each(xy, 0);   /* empty group: G = 1, counted with 0 bytes */
    check_counters();
    void *p = shd_alloc(12345);   /* peak_bytes is printed by the table */
    shd_release(p);

    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    total += finalize_and_check_table();
    if (shd_world_rank() == 0)
        printf("test_trace: %s\n", total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
