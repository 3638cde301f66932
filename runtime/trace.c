/* trace.c: per-kind counters of the communication this rank performed.
 *
 * Every collective adds one call and the bytes this rank sent, computed by
 * the same formulas `shdc explain` uses, so measured and predicted agree
 * exactly; the table ends with the largest figures of any rank, which are
 * the ones explain prints. The six collective kinds are listed first, in a fixed order, so
 * the SHD_TRACE table always comes out in the same order; other kinds are
 * appended as they appear.
 *
 * Invariants: a kind appears in the table at most once; counters only grow,
 * except through shd_trace_reset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

#define MAX_KINDS 32

typedef struct {
    char name[32];
    uint64_t count, bytes;
} trace_kind;

static struct {
    trace_kind kinds[MAX_KINDS];
    int n;
} g_trace = {
    .kinds = { { "all_reduce", 0, 0 }, { "all_gather", 0, 0 },
               { "reduce_scatter", 0, 0 }, { "all_to_all", 0, 0 },
               { "ppermute", 0, 0 }, { "permute", 0, 0 } },
    .n = 6,
};

static trace_kind *find_kind(const char *kind, bool create)
{
    for (int i = 0; i < g_trace.n; i++)
        if (strcmp(g_trace.kinds[i].name, kind) == 0)
            return &g_trace.kinds[i];
    if (!create)
        return NULL;
    if (g_trace.n == MAX_KINDS || strlen(kind) >= sizeof g_trace.kinds[0].name)
        shd_fatal("trace: cannot record kind '%s'", kind);
    trace_kind *k = &g_trace.kinds[g_trace.n++];
    snprintf(k->name, sizeof k->name, "%s", kind);
    return k;
}

void shd_trace_add(const char *kind, size_t bytes_sent)
{
    trace_kind *k = find_kind(kind, true);
    k->count++;
    k->bytes += bytes_sent;
}

uint64_t shd_trace_count(const char *kind)
{
    trace_kind *k = find_kind(kind, false);
    return k ? k->count : 0;
}

uint64_t shd_trace_bytes(const char *kind)
{
    trace_kind *k = find_kind(kind, false);
    return k ? k->bytes : 0;
}

void shd_trace_reset(void)
{
    for (int i = 0; i < g_trace.n; i++)
        g_trace.kinds[i].count = g_trace.kinds[i].bytes = 0;
}

static bool trace_enabled(void)
{
    const char *v = getenv("SHD_TRACE");
    return v && *v && strcmp(v, "0") != 0;
}

/* The rank 0 table, then the largest count, bytes and peak of any rank,
 * which is what `shdc explain` predicts (for a permute, the most any rank
 * sends). The reduction runs on every rank whether or not SHD_TRACE is set
 * there, so ranks that disagree about the variable cannot hang. */
void shd_trace_report(void)
{
    uint64_t mine[2 * 6 + 1], most[2 * 6 + 1];
    for (int i = 0; i < 6; i++) {
        mine[2 * i] = g_trace.kinds[i].count;
        mine[2 * i + 1] = g_trace.kinds[i].bytes;
    }
    mine[12] = shd_peak_bytes();
    MPI_Reduce(mine, most, 13, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (shd_world_rank() != 0 || !trace_enabled())
        return;
    for (int i = 0; i < g_trace.n; i++) {
        const trace_kind *k = &g_trace.kinds[i];
        if (k->count)
            fprintf(stderr, "shdc trace: rank 0: %s count=%llu bytes=%llu\n",
                    k->name, (unsigned long long)k->count,
                    (unsigned long long)k->bytes);
    }
    fprintf(stderr, "shdc trace: rank 0: peak_bytes=%zu\n", shd_peak_bytes());
    for (int i = 0; i < 6; i++)
        if (most[2 * i])
            fprintf(stderr, "shdc trace: max over ranks: %s count=%llu bytes=%llu\n",
                    g_trace.kinds[i].name, (unsigned long long)most[2 * i],
                    (unsigned long long)most[2 * i + 1]);
    fprintf(stderr, "shdc trace: max over ranks: peak_bytes=%llu\n", (unsigned long long)most[12]);
    fflush(stderr);
}
