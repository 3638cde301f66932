// RANKS: 1 2 4 8
/* test_gather_scatter: shd_all_gather and shd_reduce_scatter on rank-3
 * arrays along dim 0, the middle dim and the last dim, over each group of a
 * 2-D mesh (one axis, the pair in both orders, the empty group), for every
 * dtype, reduce-scatter with SUM/MAX/MIN and with both the ring and the
 * MPI_Reduce_scatter_block algorithms, and with blocks along non-leading
 * dims moved both ways (strided MPI datatypes, packing into scratch).
 *
 * Values are functions of (world rank, coordinates), so every output
 * element is checked exactly against the member of the group it must come
 * from (gather) or the fold over the members (reduce-scatter). The trace
 * must grow by (G-1) n (gather) and (G-1) n / G (reduce-scatter).
 */
#include "check.h"

static const int64_t k_base[3] = { 2, 3, 5 };

static double gather_value(int r, const int64_t c[3], shd_dtype dt)
{
    int v = r * 100 + (int)(c[0] * 15 + c[1] * 5 + c[2]);
    return dt == SHD_BOOL ? v % 3 == 0 : v % (dt == SHD_BF16 ? 256 : 1000);   /* bf16: exact to 256 */
}

static double scatter_value(int r, const int64_t c[3], shd_dtype dt)
{
    int v = (r * 7 + (int)(c[0] * 5 + c[1] * 3 + c[2])) % 13;
    return dt == SHD_BOOL ? v % 4 == 0 : v - 6;
}

static void unflatten(int64_t f, const int64_t shape[3], int64_t c[3])
{
    c[2] = f % shape[2];
    c[1] = f / shape[2] % shape[1];
    c[0] = f / (shape[1] * shape[2]);
}


static void test_gather(shd_dtype dt, const test_group *grp, int dim)
{
    int G = shd_group_size(grp->axes, grp->n), me = shd_world_rank();
    int64_t oshape[3] = { k_base[0], k_base[1], k_base[2] }, c[3];
    oshape[dim] *= G;
    size_t n = (size_t)(k_base[0] * k_base[1] * k_base[2]), es = dt_size(dt);
    void *in = malloc(n * es), *out = malloc(n * (size_t)G * es);
    for (size_t f = 0; f < n; f++) {
        unflatten((int64_t)f, k_base, c);
        put(in, dt, f, gather_value(me, c, dt));
    }
    uint64_t b0 = shd_trace_bytes("all_gather");
    shd_all_gather(in, out, dt, 3, k_base, dim, grp->axes, grp->n);
    CHECK(shd_trace_bytes("all_gather") - b0 == (uint64_t)(G - 1) * n * es,
          "all_gather trace bytes");
    int bad = 0;
    for (int64_t f = 0; f < (int64_t)n * G; f++) {
        unflatten(f, oshape, c);
        int g = (int)(c[dim] / k_base[dim]);
        c[dim] %= k_base[dim];
        double want = gather_value(shd_group_peer(grp->axes, grp->n, g), c, dt);
        if (get(out, dt, (size_t)f) != want && bad++ < 3)
            CHECK(0, "all_gather %s dim %d group %s [%lld]: %g != %g", dt_name(dt),
                  dim, grp->name, (long long)f, get(out, dt, (size_t)f), want);
    }
    free(in);
    free(out);
}

static double fold(double acc, double v, shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BOOL)
        return op == SHD_MIN ? (acc && v) : (acc || v);
    if (op == SHD_SUM)
        return acc + v;
    return op == SHD_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

static void test_scatter(shd_dtype dt, shd_redop op, const test_group *grp,
                         int dim)
{
    int G = shd_group_size(grp->axes, grp->n), me = shd_world_rank();
    int g = shd_group_index(grp->axes, grp->n);
    int64_t ishape[3] = { k_base[0], k_base[1], k_base[2] }, c[3];
    ishape[dim] *= G;
    size_t n = (size_t)(k_base[0] * k_base[1] * k_base[2]), es = dt_size(dt);
    void *in = malloc(n * (size_t)G * es), *out = malloc(n * es);
    for (int64_t f = 0; f < (int64_t)n * G; f++) {
        unflatten(f, ishape, c);
        put(in, dt, (size_t)f, scatter_value(me, c, dt));
    }
    uint64_t b0 = shd_trace_bytes("reduce_scatter");
    shd_reduce_scatter(in, out, dt, op, 3, ishape, dim, grp->axes, grp->n);
    CHECK(shd_trace_bytes("reduce_scatter") - b0 == (uint64_t)(G - 1) * n * es,
          "reduce_scatter trace bytes");
    int bad = 0;
    for (int64_t f = 0; f < (int64_t)n; f++) {
        unflatten(f, k_base, c);
        c[dim] += g * k_base[dim];
        double want = scatter_value(shd_group_peer(grp->axes, grp->n, 0), c, dt);
        for (int m = 1; m < G; m++)
            want = fold(want, scatter_value(shd_group_peer(grp->axes, grp->n, m), c, dt),
                        dt, op);
        if (get(out, dt, (size_t)f) != want && bad++ < 3)
            CHECK(0, "reduce_scatter %s op %d dim %d group %s [%lld]: %g != %g",
                  dt_name(dt), (int)op, dim, grp->name, (long long)f,
                  get(out, dt, (size_t)f), want);
    }
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const char *const algos[] = { "ring", "mpi" };
    static const char *const modes[] = { "datatype", "pack" };
    for (int m = 0; m < 2; m++) {
    shd_set_collective_algo("strided_blocks", modes[m]);
    for (int dt = SHD_F32; dt <= SHD_BF16; dt++)
        for (int g = 0; g < NGROUPS; g++)
            for (int dim = 0; dim < 3; dim++) {
                test_gather((shd_dtype)dt, &k_groups[g], dim);
                for (int a = 0; a < 2; a++) {
                    shd_set_collective_algo("reduce_scatter", algos[a]);
                    for (int op = SHD_SUM; op <= SHD_MIN; op++)
                        test_scatter((shd_dtype)dt, (shd_redop)op, &k_groups[g], dim);
                }
            }
    }
    return finish("test_gather_scatter");
}
