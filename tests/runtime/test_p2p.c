// RANKS: 1 2 4 8
/* test_p2p: shd_ppermute with positive, negative, zero and wrapping shifts
 * over each group of a 2-D mesh; shd_permute along a ring of world ranks,
 * its reverse and the identity; shd_slice_block / shd_embed_block along
 * each dim of a rank-3 array. The trace must count n bytes for a ppermute
 * that moves data (0 when G == 1 or shift % G == 0) and for a permute to
 * another rank (0 to itself).
 */
#include "check.h"

enum { N = 1000 };

static void fill(int32_t *buf, int r)
{
    for (int i = 0; i < N; i++)
        buf[i] = r * 100000 + i;
}

static void test_ppermute(const test_group *grp, int shift)
{
    int G = shd_group_size(grp->axes, grp->n), g = shd_group_index(grp->axes, grp->n);
    int32_t in[N], out[N];
    fill(in, shd_world_rank());
    uint64_t b0 = shd_trace_bytes("ppermute");
    shd_ppermute(in, out, sizeof in, shift, grp->axes, grp->n);
    bool moves = G > 1 && shift % G != 0;
    CHECK(shd_trace_bytes("ppermute") - b0 == (moves ? sizeof in : 0),
          "ppermute trace bytes (G %d shift %d)", G, shift);
    int from = ((g - shift) % G + G) % G;
    int32_t want[N];
    fill(want, shd_group_peer(grp->axes, grp->n, from));
    CHECK(memcmp(out, want, sizeof out) == 0,
          "ppermute group %s shift %d: got rank %d's data, expected rank %d's",
          grp->name, shift, out[0] / 100000, want[0] / 100000);
}

static void test_permute(int step)
{
    int me = shd_world_rank(), P = shd_world_size();
    int dest = ((me + step) % P + P) % P, src = ((me - step) % P + P) % P;
    int32_t in[N], out[N], want[N];
    fill(in, me);
    fill(want, src);
    uint64_t b0 = shd_trace_bytes("permute");
    shd_permute(in, out, sizeof in, dest, src);
    CHECK(shd_trace_bytes("permute") - b0 == (dest == me ? 0 : sizeof in),
          "permute trace bytes");
    CHECK(memcmp(out, want, sizeof out) == 0, "permute step %d", step);
}

/* Slicing each block out and embedding it back into zeros must rebuild the
 * array when the embedded pieces are summed. */
static void test_blocks(int dim, int parts)
{
    int64_t shape[3] = { 4, 8, 8 };
    int64_t bshape[3] = { 4, 8, 8 };
    bshape[dim] /= parts;
    int64_t n = 4 * 8 * 8, bn = n / parts;
    double *in = malloc((size_t)n * sizeof *in), *sum = calloc((size_t)n, sizeof *sum);
    double *blk = malloc((size_t)bn * sizeof *blk), *emb = malloc((size_t)n * sizeof *emb);
    for (int64_t i = 0; i < n; i++)
        in[i] = (double)i;
    for (int p = 0; p < parts; p++) {
        shd_slice_block(in, blk, sizeof *in, 3, shape, dim, parts, p);
        /* block p's first element sits at index p * bshape[dim] of dim */
        int64_t c[3] = { 0, 0, 0 };
        c[dim] = p * bshape[dim];
        CHECK(blk[0] == (double)((c[0] * 8 + c[1]) * 8 + c[2]),
              "slice_block dim %d part %d first element", dim, p);
        shd_embed_block(blk, emb, sizeof *blk, 3, bshape, dim, parts, p);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < n; i++) {
            sum[i] += emb[i];
            nonzero += emb[i] != 0;
        }
        CHECK(nonzero <= bn && nonzero >= bn - 1, "embed_block writes one block");
    }
    CHECK(memcmp(in, sum, (size_t)n * sizeof *in) == 0,
          "slice/embed rebuild dim %d parts %d", dim, parts);
    free(in);
    free(sum);
    free(blk);
    free(emb);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const int shifts[] = { 1, -1, 2, -3, 0, 4, 8, -9 };
    for (int g = 0; g < NGROUPS; g++)
        for (size_t s = 0; s < sizeof shifts / sizeof *shifts; s++)
            test_ppermute(&k_groups[g], shifts[s]);
    for (int step = -2; step <= 3; step++)
        test_permute(step);
    for (int dim = 0; dim < 3; dim++)
        for (int parts = 1; parts <= 4; parts *= 2)
            test_blocks(dim, parts);
    return finish("test_p2p");
}
