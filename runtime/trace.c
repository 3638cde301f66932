/* trace.c: per-kind counters of the communication this rank performed.
 *
 * Every collective adds one call and the bytes this rank sent, computed by
 * the same formulas `shdc explain` uses, so measured and predicted agree
 * exactly; the table ends with the figures explain prints: per kind, the
 * number of calls and the sum over the calls of the bytes the busiest rank
 * sent in that call (explain's bytes/rank of one instruction; a shift or a
 * permute may keep some ranks idle, and the busiest rank differs from call
 * to call). The collective kinds (the shift of redistribute.c included) are
 * listed first, in a fixed order, so the SHD_TRACE table always comes out
 * in the same order; other kinds are appended as they appear.
 *
 * With SHD_TRACE=1 each call of a collective kind is logged (kind, bytes:
 * 16 bytes a call, up to 2^24 calls; past that the bytes are the largest
 * total of any rank), and at the end the logs of all ranks are reduced
 * call by call.
 *
 * The table's last line is the largest peak resident set of any rank
 * (getrusage), for the benchmarks' memory column.
 *
 * Invariants: a kind appears in the table at most once; counters only grow,
 * except through shd_trace_reset; every rank makes the same calls in the
 * same order (SPMD), so the logs line up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "shdrt_internal.h"

#define MAX_KINDS 32
#define NFIXED 8    /* the kinds every rank knows from the start, reduced across ranks */

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
               { "ppermute", 0, 0 }, { "permute", 0, 0 }, { "reshape_move", 0, 0 },
               { "shift", 0, 0 } },
    .n = NFIXED,
};

#define MAX_LOG ((size_t)1 << 24)

static struct {
    uint64_t *kind, *bytes;
    size_t n, cap;
    bool overflow;
    int on;              /* -1 unknown, 0, 1 */
} g_log = { .on = -1 };

static bool trace_enabled(void);

static void log_call(int kind, size_t bytes)
{
    if (g_log.on < 0)
        g_log.on = trace_enabled();
    if (!g_log.on || g_log.overflow)
        return;
    if (g_log.n == g_log.cap) {   /* both arrays grow to the same capacity */
        size_t kcap = g_log.cap, bcap = g_log.cap;
        uint64_t *k = g_log.n < MAX_LOG ? shd_mem_grow_try(g_log.kind, &kcap, g_log.n + 1, sizeof *k) : NULL;
        if (k)
            g_log.kind = k;
        uint64_t *b = k ? shd_mem_grow_try(g_log.bytes, &bcap, g_log.n + 1, sizeof *b) : NULL;
        if (!k || !b) {
            g_log.overflow = true;
            return;
        }
        g_log.bytes = b;
        g_log.cap = kcap;
    }
    g_log.kind[g_log.n] = (uint64_t)kind;
    g_log.bytes[g_log.n++] = bytes;
}

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
    shd_timeline_collective(kind, bytes_sent);
    trace_kind *k = find_kind(kind, true);
    k->count++;
    k->bytes += bytes_sent;
    if (k - g_trace.kinds < NFIXED)
        log_call((int)(k - g_trace.kinds), bytes_sent);
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
    g_log.n = 0;
    g_log.overflow = false;
}

/* Per kind, the sum over the calls of the most any rank sent in the call,
 * into most[2 * i + 1]; false (most untouched) when some rank's log is
 * incomplete. Collective over the world. */
static bool busiest_per_call(uint64_t *most)
{
    uint64_t mine[2] = { g_log.n, g_log.overflow }, all[2];
    MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (all[1] || all[0] == 0 || all[0] > INT32_MAX)
        return false;
    size_t n = (size_t)all[0];
    uint64_t *buf = shd_mem_zero(2 * n, sizeof *buf, "trace: reducing %zu calls", n);
    uint64_t *red = shd_mem_zero(2 * n, sizeof *red, "trace: reducing %zu calls", n);
    for (size_t i = 0; i < g_log.n; i++) {
        buf[i] = g_log.kind[i];
        buf[n + i] = g_log.bytes[i];
    }
    MPI_Reduce(buf, red, (int)(2 * n), MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (shd_world_rank() == 0) {
        for (int i = 0; i < NFIXED; i++)
            most[2 * i + 1] = 0;
        for (size_t i = 0; i < n; i++)
            if (red[i] < NFIXED)
                most[2 * red[i] + 1] += red[n + i];
    }
    free(buf);
    free(red);
    return true;
}

/* SHD_TRACE=1: the totals; any other value but 0 names a timeline file
 * (timeline.c). */
static bool trace_enabled(void)
{
    const char *v = getenv("SHD_TRACE");
    return v && strcmp(v, "1") == 0;
}

/* This process's peak resident set so far (KiB), as the kernel counts it:
 * the benchmarks' memory column, reported by the program itself so that it
 * reaches mpirun's output before the process exits (a wrapper's line printed
 * after the exit can be lost as mpirun tears its output forwarding down). */
static uint64_t max_rss_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0 ? (uint64_t)ru.ru_maxrss : 0;
}

/* The rank 0 table, then what `shdc explain` predicts: the largest count
 * and peak of any rank, and the bytes of the busiest rank of each call. The
 * reductions run on every rank whether or not SHD_TRACE is set there, so
 * ranks that disagree about the variable cannot hang. */
void shd_trace_report(void)
{
    uint64_t mine[2 * NFIXED + 2], most[2 * NFIXED + 2];
    for (int i = 0; i < NFIXED; i++) {
        mine[2 * i] = g_trace.kinds[i].count;
        mine[2 * i + 1] = g_trace.kinds[i].bytes;
    }
    mine[2 * NFIXED] = shd_peak_bytes();
    mine[2 * NFIXED + 1] = max_rss_kib();
    MPI_Reduce(mine, most, 2 * NFIXED + 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    busiest_per_call(most);
    free(g_log.kind);
    free(g_log.bytes);
    g_log.kind = g_log.bytes = NULL;
    g_log.n = g_log.cap = 0;
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
    for (int i = 0; i < NFIXED; i++)
        if (most[2 * i])
            fprintf(stderr, "shdc trace: max over ranks: %s count=%llu bytes=%llu\n",
                    g_trace.kinds[i].name, (unsigned long long)most[2 * i],
                    (unsigned long long)most[2 * i + 1]);
    fprintf(stderr, "shdc trace: max over ranks: peak_bytes=%llu\n", (unsigned long long)most[2 * NFIXED]);
    fprintf(stderr, "shdc trace: max over ranks: maxrss_kib=%llu\n", (unsigned long long)most[2 * NFIXED + 1]);
    fflush(stderr);
}
