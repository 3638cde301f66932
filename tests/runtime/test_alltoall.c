// RANKS: 1 2 4 8
/* test_alltoall: shd_all_to_all on rank-3 arrays for every (split, concat)
 * pair, split == concat included, over each group of a 2-D mesh, for every
 * dtype, with strided blocks moved by MPI datatypes and by packing.
 *
 * Input element c of world rank r holds v(r, c). Output element c (out shape
 * = shape with shape[split] / G and shape[concat] * G) must come from group
 * member j = c[concat] / block[concat], at its coordinates c with
 * c[concat] mod block[concat] and c[split] + g * block[split] (g: this
 * rank's group index). Then the inverse all_to_all (split and concat
 * swapped) must give back the input exactly. Trace: (G-1) n / G per call.
 */
#include "check.h"

static void unflatten(int64_t f, const int64_t s[3], int64_t c[3])
{
    c[2] = f % s[2];
    c[1] = f / s[2] % s[1];
    c[0] = f / (s[1] * s[2]);
}

static double value(int r, const int64_t c[3], shd_dtype dt)
{
    int v = r * 211 + (int)((c[0] * 7 + c[1]) * 11 + c[2]);
    return dt == SHD_BOOL ? v % 3 == 1 : v % 2000;
}

static void run_case(shd_dtype dt, const test_group *grp, int split, int concat)
{
    int G = shd_group_size(grp->axes, grp->n), me = shd_world_rank();
    int g = shd_group_index(grp->axes, grp->n);
    int64_t shape[3] = { 2, 3, 2 }, c[3];
    shape[split] *= G;
    int64_t block[3] = { shape[0], shape[1], shape[2] };
    block[split] /= G;
    int64_t oshape[3] = { block[0], block[1], block[2] };
    oshape[concat] *= G;
    size_t n = (size_t)(shape[0] * shape[1] * shape[2]), es = dt_size(dt);
    void *in = malloc(n * es), *out = malloc(n * es), *back = malloc(n * es);
    for (int64_t f = 0; f < (int64_t)n; f++) {
        unflatten(f, shape, c);
        put(in, dt, (size_t)f, value(me, c, dt));
    }
    uint64_t b0 = shd_trace_bytes("all_to_all");
    shd_all_to_all(in, out, dt, 3, shape, split, concat, grp->axes, grp->n);
    CHECK(shd_trace_bytes("all_to_all") - b0 == (uint64_t)(G - 1) * n * es / (uint64_t)G,
          "all_to_all trace bytes");
    int bad = 0;
    for (int64_t f = 0; f < (int64_t)n; f++) {
        unflatten(f, oshape, c);
        int j = (int)(c[concat] / block[concat]);
        c[concat] %= block[concat];
        c[split] += g * block[split];
        double want = value(shd_group_peer(grp->axes, grp->n, j), c, dt);
        if (get(out, dt, (size_t)f) != want && bad++ < 3)
            CHECK(0, "all_to_all %s split %d concat %d group %s [%lld]: %g != %g",
                  dt_name(dt), split, concat, grp->name, (long long)f,
                  get(out, dt, (size_t)f), want);
    }
    shd_all_to_all(out, back, dt, 3, oshape, concat, split, grp->axes, grp->n);
    CHECK(memcmp(in, back, n * es) == 0, "all_to_all round trip %s split %d "
          "concat %d group %s", dt_name(dt), split, concat, grp->name);
    free(in);
    free(out);
    free(back);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const char *const modes[] = { "datatype", "pack" };
    for (int m = 0; m < 2; m++) {
        shd_set_collective_algo("strided_blocks", modes[m]);
        for (int dt = SHD_F32; dt <= SHD_BOOL; dt++)
            for (int g = 0; g < NGROUPS; g++)
                for (int split = 0; split < 3; split++)
                    for (int concat = 0; concat < 3; concat++)
                        run_case((shd_dtype)dt, &k_groups[g], split, concat);
    }
    return finish("test_alltoall");
}
