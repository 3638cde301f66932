// RANKS: 1 2 4 8
/* test_allreduce: shd_all_reduce for every dtype and reduction, over each
 * group of a 2-D mesh (each axis, both orders of the pair, the empty
 * group), with each algorithm (MPI_Allreduce, the ring, auto), on counts that
 * do and do not divide by the group size, including 0 and 1.
 *
 * Element i of world rank r holds a small integer v(r, i), exact in every
 * dtype (bf16 too: its sums go by the ring whatever the algorithm, adding
 * in f32), so the expected result (folded over the group's members from
 * shd_group_peer) is exact whatever order the algorithm adds in. Each call
 * must also add one "all_reduce" to the trace with 2 (G-1) n / G bytes.
 */
#include "check.h"

static double value(int r, size_t i, shd_dtype dt)
{
    if (dt == SHD_BOOL)   /* mostly false, some true: OR and AND both vary */
        return (r * 5 + (int)i * 3) % 7 == 0;
    return (double)((r * 7 + (int)i * 3) % 11) - 5.0;
}

static double fold(double acc, double v, shd_dtype dt, shd_redop op)
{
    if (dt == SHD_BOOL)
        return op == SHD_MIN ? (acc && v) : (acc || v);
    if (op == SHD_SUM)
        return acc + v;
    return op == SHD_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

static void run_case(shd_dtype dt, shd_redop op, const test_group *grp,
                     size_t count, const char *algo)
{
    size_t es = dt_size(dt);
    void *buf = malloc(count * es + 1);
    int me = shd_world_rank();
    for (size_t i = 0; i < count; i++)
        put(buf, dt, i, value(me, i, dt));
    uint64_t c0 = shd_trace_count("all_reduce"), b0 = shd_trace_bytes("all_reduce");
    shd_all_reduce(buf, count, dt, op, grp->axes, grp->n);
    size_t G = (size_t)shd_group_size(grp->axes, grp->n);
    CHECK(shd_trace_count("all_reduce") == c0 + 1, "trace count");
    CHECK(shd_trace_bytes("all_reduce") - b0 == 2 * (G - 1) * count * es / G,
          "trace bytes %s count=%zu G=%zu", dt_name(dt), count, G);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double want = value(shd_group_peer(grp->axes, grp->n, 0), i, dt);
        for (size_t g = 1; g < G; g++)
            want = fold(want, value(shd_group_peer(grp->axes, grp->n, (int)g), i, dt), dt, op);
        if (get(buf, dt, i) != want && bad++ < 3)
            CHECK(0, "%s all_reduce %s op=%d group %s count=%zu [%zu]: %g != %g",
                  algo, dt_name(dt), (int)op, grp->name, count, i,
                  get(buf, dt, i), want);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const size_t counts[] = { 0, 1, 7, 64, 1001, 30000 };
    static const char *const algos[] = { "mpi", "ring", "auto" };
    for (int a = 0; a < 3; a++) {
        shd_set_collective_algo("all_reduce", algos[a]);
        /* auto picks one of the other two; once over the groups suffices */
        int last_dt = a == 2 ? SHD_F32 : SHD_BF16, last_op = a == 2 ? SHD_SUM : SHD_MIN;
        for (int dt = SHD_F32; dt <= last_dt; dt++)
            for (int op = SHD_SUM; op <= last_op; op++)
                for (int g = 0; g < NGROUPS; g++)
                    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
                        run_case((shd_dtype)dt, (shd_redop)op, &k_groups[g],
                                 counts[c], algos[a]);
    }
    return finish("test_allreduce");
}
