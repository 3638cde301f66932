// RANKS: 1 2 4 8
/* test_rng: Philox4x32-10 and the fills built on it.
 *
 * - Known answers: the three philox4x32 10 vectors of Random123's
 *   kat_vectors (zero, all-ones, and the digits of pi).
 * - Decomposition independence: a global [6, 10, 4] array filled whole must
 *   equal, bit for bit, the same array assembled from blocks of several
 *   decompositions (split along each dim, along two dims, uneven blocks),
 *   and each element must equal shd_*_at_dt at its global index, for
 *   uniform and normal, f32 and f64.
 * - Distribution: a [1000, 1000] array sharded along dim 0 over all ranks,
 *   reduced with all_reduce: normal mean within 0.005 of 0 and variance
 *   within 0.01 of 1; uniform mean within 0.002 of 1/2, all in [0, 1).
 * - f32 and f64 agree as documented (f32 uniform = f64 truncated to 24 bits,
 *   f32 normal = f64 rounded), and different seeds give different numbers.
 */
#include <math.h>

#include "check.h"

static void test_kat(void)
{
    static const uint32_t v[3][10] = {
        { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
          0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
          0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 },
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        shd_philox4x32_10(v[t], v[t] + 4, out);
        CHECK(memcmp(out, v[t] + 6, sizeof out) == 0,
              "philox KAT %d: %08x %08x %08x %08x", t, out[0], out[1], out[2], out[3]);
    }
}

typedef void fill_fn(void *, shd_dtype, uint64_t, int, const int64_t *,
                     const int64_t *, const int64_t *);

/* Fills block [off, off+shape) of the global array and copies it into place
 * in `whole` (global [6, 10, 4]). */
static void fill_block(fill_fn *fill, shd_dtype dt, uint64_t seed, void *whole,
                       const int64_t off[3], const int64_t shape[3])
{
    static const int64_t g[3] = { 6, 10, 4 };
    size_t es = dt_size(dt);
    char *blk = malloc((size_t)(shape[0] * shape[1] * shape[2]) * es + 1);
    fill(blk, dt, seed, 3, g, off, shape);
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
            memcpy((char *)whole + (size_t)(((off[0] + i) * 10 + off[1] + j) * 4 + off[2]) * es,
                   blk + (size_t)((i * shape[1] + j) * shape[2]) * es,
                   (size_t)shape[2] * es);
    free(blk);
}

static void test_decompositions(fill_fn *fill, bool normal, shd_dtype dt)
{
    static const int64_t g[3] = { 6, 10, 4 }, zero[3] = { 0, 0, 0 };
    /* Cut points per dim for each decomposition: {dim0 cuts, dim1, dim2}. */
    static const int64_t cuts[][3][4] = {
        { { 0, 3, 6 }, { 0, 10 }, { 0, 4 } },
        { { 0, 6 }, { 0, 5, 10 }, { 0, 4 } },
        { { 0, 6 }, { 0, 10 }, { 0, 1, 2, 4 } },
        { { 0, 2, 6 }, { 0, 7, 10 }, { 0, 4 } },
        { { 0, 1, 6 }, { 0, 3, 10 }, { 0, 3, 4 } },
    };
    static const int ncuts[][3] = { { 3, 2, 2 }, { 2, 3, 2 }, { 2, 2, 4 },
                                    { 3, 3, 2 }, { 3, 3, 3 } };
    size_t es = dt_size(dt), n = 6 * 10 * 4;
    uint64_t seed = 0x1234567890abcdefull;
    char *ref = malloc(n * es), *asm_ = malloc(n * es);
    fill(ref, dt, seed, 3, g, zero, g);
    for (size_t i = 0; i < n; i++) {
        double want = normal ? shd_normal_at_dt(seed, i, dt) : shd_uniform_at_dt(seed, i, dt);
        if (get(ref, dt, i) != want) {
            CHECK(0, "%s %s element %zu: %g != *_at_dt %g", normal ? "normal" : "uniform",
                  dt_name(dt), i, get(ref, dt, i), want);
            break;
        }
    }
    for (size_t d = 0; d < sizeof ncuts / sizeof *ncuts; d++) {
        memset(asm_, 0xff, n * es);
        for (int a = 0; a + 1 < ncuts[d][0]; a++)
            for (int b = 0; b + 1 < ncuts[d][1]; b++)
                for (int c = 0; c + 1 < ncuts[d][2]; c++) {
                    int64_t off[3] = { cuts[d][0][a], cuts[d][1][b], cuts[d][2][c] };
                    int64_t shape[3] = { cuts[d][0][a + 1] - off[0],
                                         cuts[d][1][b + 1] - off[1],
                                         cuts[d][2][c + 1] - off[2] };
                    fill_block(fill, dt, seed, asm_, off, shape);
                }
        CHECK(memcmp(ref, asm_, n * es) == 0, "%s %s decomposition %zu differs",
              normal ? "normal" : "uniform", dt_name(dt), d);
    }
    free(ref);
    free(asm_);
}

/* Mean and variance over a [1000, 1000] array split along dim 0. */
static void test_distribution(bool normal, shd_dtype dt)
{
    int P = shd_world_size(), me = shd_world_rank();
    int64_t g[2] = { 1000, 1000 }, shape[2] = { 1000 / P, 1000 }, off[2] = { me * (1000 / P), 0 };
    size_t n = (size_t)(shape[0] * shape[1]);
    void *x = malloc(n * dt_size(dt));
    (normal ? shd_fill_normal : shd_fill_uniform)(x, dt, 42, 2, g, off, shape);
    double s[3] = { 0, 0, 0 };   /* sum, sum of squares, out-of-range count */
    for (size_t i = 0; i < n; i++) {
        double v = get(x, dt, i);
        s[0] += v;
        s[1] += v * v;
        s[2] += !normal && (v < 0 || v >= 1);
    }
    int all[2] = { 0, 1 };
    shd_all_reduce(s, 3, SHD_F64, SHD_SUM, all, 2);
    double mean = s[0] / 1e6, var = s[1] / 1e6 - mean * mean;
    if (normal) {
        CHECK(fabs(mean) < 0.005, "normal %s mean %g", dt_name(dt), mean);
        CHECK(fabs(var - 1) < 0.01, "normal %s variance %g", dt_name(dt), var);
    } else {
        CHECK(fabs(mean - 0.5) < 0.002, "uniform %s mean %g", dt_name(dt), mean);
        CHECK(fabs(var - 1.0 / 12) < 0.002, "uniform %s variance %g", dt_name(dt), var);
        CHECK(s[2] == 0, "uniform %s: %g values outside [0, 1)", dt_name(dt), s[2]);
    }
    free(x);
}

static void test_relations(void)
{
    int same = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        double u = shd_uniform_at(7, i), u32 = shd_uniform_at_dt(7, i, SHD_F32);
        CHECK(u32 == floor(u * 16777216.0) / 16777216.0, "f32 uniform truncates f64");
        CHECK(shd_uniform_at_dt(7, i, SHD_F64) == u, "f64 uniform");
        double z = shd_normal_at(7, i);
        CHECK(shd_normal_at_dt(7, i, SHD_F32) == (double)(float)z, "f32 normal rounds f64");
        CHECK(isfinite(z), "normal finite");
        same += shd_uniform_at(8, i) == u;
    }
    CHECK(same < 5, "seeds 7 and 8 agree on %d of 10000 values", same);
    /* A 64-bit index: the high counter word matters. */
    CHECK(shd_uniform_at(7, 5) != shd_uniform_at(7, 5 + (1ull << 32)),
          "counter high word ignored");
    CHECK(shd_uniform_at(7, 5) != shd_uniform_at(7 + (1ull << 32), 5),
          "key high word ignored");
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    test_kat();
    for (int dt = SHD_F32; dt <= SHD_F64; dt++) {
        test_decompositions(shd_fill_uniform, false, (shd_dtype)dt);
        test_decompositions(shd_fill_normal, true, (shd_dtype)dt);
        test_distribution(false, (shd_dtype)dt);
        test_distribution(true, (shd_dtype)dt);
    }
    test_relations();
    return finish("test_rng");
}
