/* rng.c: counter-based random numbers (Philox4x32-10).
 *
 * Philox, from Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
 * easy as 1, 2, 3" (SC 2011), is a keyed bijection of a 128-bit counter:
 * ten rounds, each multiplying two of the four 32-bit words by fixed
 * constants and mixing the high halves of the products with the other
 * words and the key, the key being bumped by two Weyl constants between
 * rounds. Here the key is the 64-bit seed (low word, high word) and the
 * counter is the element's global row-major flat index (low, high, 0, 0).
 *
 * Invariant: an element's value depends only on (seed, global index), never
 * on how the array is split into blocks, so a sharded program draws exactly
 * the numbers the unsharded one does. Conversions, from the output words
 * w0..w3 of one block:
 *   uniform f32: (w0 >> 8) * 2^-24, in [0, 1)
 *   uniform f64: ((w0 << 32 | w1) >> 11) * 2^-53, in [0, 1); its top 24 bits
 *                are the f32 value (the f32 value is the f64 one truncated)
 *   normal:      Box-Muller on u1 = 1 - w0 * 2^-32 (in (0, 1], so log is
 *                finite) and u2 = w1 * 2^-32, computed in double; the f32
 *                value is the f64 value rounded to float.
 */
#include <math.h>
#include <string.h>

#include "shdrt_internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

typedef struct {
    uint32_t w[4];
} philox_block;

static philox_block philox4x32_10(philox_block c, uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c.w[0];
        uint64_t p1 = (uint64_t)PHILOX_M1 * c.w[2];
        philox_block n;
        n.w[0] = (uint32_t)(p1 >> 32) ^ c.w[1] ^ k0;
        n.w[1] = (uint32_t)p1;
        n.w[2] = (uint32_t)(p0 >> 32) ^ c.w[3] ^ k1;
        n.w[3] = (uint32_t)p0;
        c = n;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return c;
}

/* Exposed for the known-answer test (tests/runtime/test_rng.c). */
void shd_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    philox_block c = { { ctr[0], ctr[1], ctr[2], ctr[3] } };
    philox_block r = philox4x32_10(c, key[0], key[1]);
    for (int i = 0; i < 4; i++)
        out[i] = r.w[i];
}

static philox_block draw(uint64_t seed, uint64_t g)
{
    philox_block c = { { (uint32_t)g, (uint32_t)(g >> 32), 0, 0 } };
    return philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

static double uniform_f64(philox_block b)
{
    uint64_t bits = ((uint64_t)b.w[0] << 32 | b.w[1]) >> 11;
    return (double)bits * 0x1p-53;
}

static float uniform_f32(philox_block b)
{
    return (float)(b.w[0] >> 8) * 0x1p-24f;
}

static double normal_f64(philox_block b)
{
    double u1 = 1.0 - (double)b.w[0] * 0x1p-32;
    double u2 = (double)b.w[1] * 0x1p-32;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double shd_uniform_at(uint64_t seed, uint64_t g)
{
    return uniform_f64(draw(seed, g));
}

double shd_normal_at(uint64_t seed, uint64_t g)
{
    return normal_f64(draw(seed, g));
}

/* bf16 uniforms: the f32 one cut (toward zero) to bf16, so still in [0, 1);
 * normals round to nearest, as cast(normal(f32), bf16) would. */
static uint16_t uniform_bf16(philox_block b)
{
    union { float f; uint32_t u; } c = { .f = uniform_f32(b) };
    return (uint16_t)(c.u >> 16);
}

double shd_uniform_at_dt(uint64_t seed, uint64_t g, shd_dtype dt)
{
    philox_block b = draw(seed, g);
    return dt == SHD_F32 ? (double)uniform_f32(b) : dt == SHD_BF16 ? shd_bf2f(uniform_bf16(b)) : uniform_f64(b);
}

double shd_normal_at_dt(uint64_t seed, uint64_t g, shd_dtype dt)
{
    double z = normal_f64(draw(seed, g));
    return dt == SHD_F32 ? (double)(float)z : dt == SHD_BF16 ? shd_bf2f(shd_d2bf(z)) : z;
}

/* Philox on BATCH consecutive counters g, g+1, ... at once, keeping words
 * 0 and 1. The lanes are independent and the loops have a fixed trip
 * count, so the compiler vectorises or interleaves them; one counter at a
 * time is a chain of dependent multiplies, about 4x slower. */
enum { BATCH = 16 };

static void philox_lanes(uint64_t seed, uint64_t g, uint32_t w0[BATCH],
                         uint32_t w1[BATCH])
{
    uint32_t c0[BATCH], c1[BATCH], c2[BATCH] = { 0 }, c3[BATCH] = { 0 };
    for (int i = 0; i < BATCH; i++) {
        c0[i] = (uint32_t)(g + (uint64_t)i);
        c1[i] = (uint32_t)((g + (uint64_t)i) >> 32);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < BATCH; i++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[i];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[i];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[i] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[i] ^ k1;
            c1[i] = (uint32_t)p1;
            c3[i] = (uint32_t)p0;
            c0[i] = n0;
            c2[i] = n2;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    memcpy(w0, c0, sizeof c0);
    memcpy(w1, c1, sizeof c1);
}

/* Fills out[0..n) with the elements at global indices g, g+1, ... */
static void fill_run(void *out, int64_t n, shd_dtype dt, bool normal,
                     uint64_t seed, uint64_t g)
{
    uint32_t w0[BATCH], w1[BATCH];
    for (int64_t j0 = 0; j0 < n; j0 += BATCH) {
        philox_lanes(seed, g + (uint64_t)j0, w0, w1);
        int m = n - j0 < BATCH ? (int)(n - j0) : BATCH;
        for (int i = 0; i < m; i++) {
            philox_block b = { { w0[i], w1[i], 0, 0 } };
            if (dt == SHD_F32)
                ((float *)out)[j0 + i] = normal ? (float)normal_f64(b) : uniform_f32(b);
            else if (dt == SHD_BF16)
                ((uint16_t *)out)[j0 + i] = normal ? shd_d2bf(normal_f64(b)) : uniform_bf16(b);
            else
                ((double *)out)[j0 + i] = normal ? normal_f64(b) : uniform_f64(b);
        }
    }
}

/* Walks the local block row by row; the global index of a row's first
 * element comes from an odometer over the local coordinates. */
static void fill(void *out, shd_dtype dt, bool normal, uint64_t seed, int rank,
                 const int64_t *gshape, const int64_t *offset,
                 const int64_t *shape)
{
    if (dt != SHD_F32 && dt != SHD_F64 && dt != SHD_BF16)
        shd_fatal("random %s arrays are not supported (f32, f64 and bf16 are)",
                  shd_dtype_name(dt));
    if (rank < 0 || rank > SHD_MAX_RANK)
        shd_fatal("random fill of a rank-%d array", rank);
    if (shd_shape_count(rank, shape) == 0)
        return;
    int64_t gstride[SHD_MAX_RANK + 1], idx[SHD_MAX_RANK] = { 0 };
    gstride[rank] = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (offset[d] < 0 || offset[d] + shape[d] > gshape[d])
            shd_fatal("random fill: block [%lld, %lld) outside dim %d of size %lld",
                      (long long)offset[d], (long long)(offset[d] + shape[d]), d,
                      (long long)gshape[d]);
        gstride[d] = gstride[d + 1] * gshape[d];
    }
    int64_t n = rank ? shape[rank - 1] : 1;
    size_t row = (size_t)n * shd_dtype_size(dt);
    char *at = out;
    for (;;) {
        uint64_t g = 0;
        for (int d = 0; d < rank; d++)
            g += (uint64_t)(offset[d] + idx[d]) * (uint64_t)gstride[d + 1];
        fill_run(at, n, dt, normal, seed, g);
        at += row;
        int d = rank - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

void shd_fill_normal(void *out, shd_dtype dt, uint64_t seed, int rank,
                     const int64_t *gshape, const int64_t *offset,
                     const int64_t *shape)
{
    fill(out, dt, true, seed, rank, gshape, offset, shape);
}

void shd_fill_uniform(void *out, shd_dtype dt, uint64_t seed, int rank,
                      const int64_t *gshape, const int64_t *offset,
                      const int64_t *shape)
{
    fill(out, dt, false, seed, rank, gshape, offset, shape);
}
