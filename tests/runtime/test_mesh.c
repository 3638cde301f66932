// RANKS: 1 2 4 8
/* test_mesh: coordinates and ordered groups on a 3-D mesh.
 *
 * The mesh is {a: A, b: B, c: C} with A*B*C = P (P = 8: {2, 2, 2}; P = 4:
 * {2, 1, 2}; P = 2: {1, 2, 1}). For every ordered group (every permutation
 * of every subset of the axes) it checks size, index and peers against a
 * direct computation from row-major coordinates, and that the group's
 * communicator really holds those ranks in group order: an all_gather of the
 * world ranks over the group must equal shd_group_peer(g) for each g.
 */
#include "check.h"

static int g_sizes[3];

static void coords_of(int r, int c[3])
{
    for (int a = 2; a >= 0; a--) {
        c[a] = r % g_sizes[a];
        r /= g_sizes[a];
    }
}

static int rank_of(const int c[3])
{
    return (c[0] * g_sizes[1] + c[1]) * g_sizes[2] + c[2];
}

static void check_group(const int *axes, int n)
{
    int me = shd_world_rank(), c[3];
    coords_of(me, c);
    int size = 1, index = 0;
    for (int i = 0; i < n; i++) {
        size *= g_sizes[axes[i]];
        index = index * g_sizes[axes[i]] + c[axes[i]];
    }
    CHECK(shd_group_size(axes, n) == size, "group size n=%d", n);
    CHECK(shd_group_index(axes, n) == index, "group index n=%d: %d != %d", n,
          shd_group_index(axes, n), index);
    int32_t *all = malloc((size_t)size * sizeof *all);
    int32_t mine = me;
    int64_t shape[1] = { 1 };
    shd_all_gather(&mine, all, SHD_I32, 1, shape, 0, axes, n);
    for (int g = 0; g < size; g++) {
        int pc[3] = { c[0], c[1], c[2] }, rest = g;
        for (int i = n - 1; i >= 0; i--) {
            pc[axes[i]] = rest % g_sizes[axes[i]];
            rest /= g_sizes[axes[i]];
        }
        int peer = shd_group_peer(axes, n, g);
        CHECK(peer == rank_of(pc), "peer %d of group (n=%d, %d %d %d): %d != %d",
              g, n, axes[0], n > 1 ? axes[1] : -1, n > 2 ? axes[2] : -1, peer,
              rank_of(pc));
        CHECK(all[g] == peer, "group comm member %d is rank %d, expected %d",
              g, all[g], peer);
    }
    free(all);
}

/* Calls check_group for every ordered list of distinct axes. */
static void each_ordered_group(int *axes, int n, unsigned used)
{
    check_group(axes, n);
    if (n == 3)
        return;
    for (int a = 0; a < 3; a++)
        if (!(used & (1u << a))) {
            axes[n] = a;
            each_ordered_group(axes, n + 1, used | (1u << a));
        }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    g_sizes[0] = P >= 4 ? 2 : 1;
    g_sizes[1] = P == 2 || P == 8 ? 2 : 1;
    g_sizes[2] = P / (g_sizes[0] * g_sizes[1]);
    static const char *const names[] = { "a", "b", "c" };
    shd_init(&argc, &argv, 3, names, g_sizes);

    int me = shd_world_rank(), c[3];
    CHECK(shd_world_size() == P, "world size");
    coords_of(me, c);
    for (int a = 0; a < 3; a++)
        CHECK(shd_axis_index(a) == c[a], "axis %d coordinate", a);
    int axes[3];
    each_ordered_group(axes, 0, 0);
    /* Asking again returns the cached communicator (same answers). */
    int yx[2] = { 2, 0 };
    check_group(yx, 2);
    return finish("test_mesh");
}
