// RANKS: 1 2 4
/* test_async_gather: a bucket of all-gathers started early and waited later
 * (shd_async_begin_gather, shd_async_add_gather, shd_async_start,
 * shd_async_wait: FSDP's prefetch, compiler/overlap.c) gives exactly what
 * shd_all_gather gives each member: three members gathered along dims 0, 1
 * and 2 of rank-3 arrays of different shapes, over each group of a 2-D mesh,
 * in a small bucket (MPI_Iallgather) and a large one (the ring, > 64 KiB),
 * two buckets of two sites in flight at once and waited in the other order;
 * a wait without destinations (the drain after a loop) lets a request go.
 * The trace grows by (G-1) n for the bucket's n bytes, once a bucket.
 */
#include "check.h"

typedef struct {
    int64_t shape[3];
    int dim;
} member_spec;

static double value(int r, int m, int64_t f) { return (double)((r * 7919 + m * 104729 + f * 31) % 100003); }

static int64_t count3(const int64_t s[3]) { return s[0] * s[1] * s[2]; }

/* Starts site's bucket of the members; in[j] this rank's blocks. */
static void start(int site, const test_group *grp, const member_spec *ms, int n, float **in)
{
    shd_async_begin_gather(site, SHD_F32, grp->axes, grp->n);
    for (int j = 0; j < n; j++)
        shd_async_add_gather(in[j], 3, ms[j].shape, ms[j].dim);
    shd_async_start(__LINE__);
}

static void test_buckets(const test_group *grp, int64_t scale)
{
    int G = shd_group_size(grp->axes, grp->n), me = shd_world_rank();
    member_spec ms[3] = { { { 2, 3, 5 }, 0 }, { { 3, 2 * scale, 4 }, 1 }, { { 4, 5, 3 * scale }, 2 } };
    float *in[2][3], *got[2][3], *want[2][3];
    uint64_t bytes = 0;
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++) {
            int64_t n = count3(ms[j].shape);
            in[b][j] = malloc((size_t)n * sizeof(float));
            got[b][j] = malloc((size_t)(n * G) * sizeof(float));
            want[b][j] = malloc((size_t)(n * G) * sizeof(float));
            for (int64_t f = 0; f < n; f++)
                in[b][j][f] = (float)value(me, 10 * b + j, f);
            shd_all_gather(in[b][j], want[b][j], SHD_F32, 3, ms[j].shape, ms[j].dim, grp->axes, grp->n);
            bytes += (uint64_t)(G - 1) * (uint64_t)n * sizeof(float);
        }
    uint64_t b0 = shd_trace_bytes("all_gather");
    start(101, grp, ms, 3, in[0]);
    start(102, grp, ms, 3, in[1]);
    for (int b = 0; b < 2; b++)   /* the blocks are staged at the start: changing them now changes nothing */
        for (int j = 0; j < 3; j++)
            in[b][j][0] = -1;
    shd_async_wait(102, (void *const[]){ got[1][0], got[1][1], got[1][2] }, 3, __LINE__);
    shd_async_wait(101, (void *const[]){ got[0][0], got[0][1], got[0][2] }, 3, __LINE__);
    CHECK(shd_trace_bytes("all_gather") - b0 == bytes, "group %s: trace bytes %llu, want %llu", grp->name,
          (unsigned long long)(shd_trace_bytes("all_gather") - b0), (unsigned long long)bytes);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++) {
            int64_t n = count3(ms[j].shape) * G;
            int bad = 0;
            for (int64_t f = 0; f < n; f++)
                if (got[b][j][f] != want[b][j][f] && bad++ < 3)
                    CHECK(0, "group %s, scale %lld, bucket %d, member %d (dim %d) [%lld]: %g != %g", grp->name,
                          (long long)scale, b, j, ms[j].dim, (long long)f, got[b][j][f], want[b][j][f]);
        }
    /* a drain: the request goes, nothing is written */
    start(103, grp, ms, 3, in[0]);
    shd_async_wait(103, NULL, 0, __LINE__);
    shd_async_wait(103, NULL, 0, __LINE__);   /* nothing outstanding: nothing to do */
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++) {
            free(in[b][j]);
            free(got[b][j]);
            free(want[b][j]);
        }
}

int main(int argc, char **argv)
{
    shd_async_enable();
    start_2d(&argc, &argv);
    for (int g = 0; g < NGROUPS; g++) {
        test_buckets(&k_groups[g], 1);      /* a few hundred bytes: MPI_Iallgather */
        test_buckets(&k_groups[g], 600);    /* about 100 KiB a rank: the ring */
    }
    return finish("test_async_gather");
}
