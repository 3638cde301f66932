/* attention_blocks.h: the block sizes of the fused attention kernels
 * (k_attention.c) and the scratch they allocate, shared with the compiler
 * (compiler/op_attention.c) so that `shdc explain` counts exactly the bytes
 * the run-time kernel takes from the buffer cache. Pure C, no includes
 * beyond <stdint.h> and <stddef.h>.
 */
#ifndef SHD_ATTENTION_BLOCKS_H
#define SHD_ATTENTION_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* A block of BQ query rows against BK key rows: the score block (BQ x BK),
 * the query rows and the key/value rows it multiplies stay in L2 (1 MiB per
 * core on the machines measured) at head sizes up to 256. */
enum { SHD_ATTN_BQ = 64, SHD_ATTN_BK = 128 };

/* Bytes of scratch one call allocates (and frees before it returns): the
 * forward, the score block, the output accumulator of a query block and the
 * running max and sum of its rows; the backward, the probability and
 * gradient blocks and the per-row dot(dO, O) of one head. elem is the
 * stored element's size: bf16 (2) computes in f32, and widens besides the
 * forward's query block and a key and a value block, the backward's
 * query, cotangent, key and value heads with f32 accumulators of dq, dk
 * and dv. Sizes of 0 need none. */
static inline int64_t shd_attention_scratch_bytes(int grad, int64_t T, int64_t S, int64_t H, size_t elem)
{
    if (T <= 0 || S <= 0 || H <= 0)
        return 0;
    int64_t bq = T < SHD_ATTN_BQ ? T : SHD_ATTN_BQ, bk = S < SHD_ATTN_BK ? S : SHD_ATTN_BK;
    int64_t wide = elem == 2 ? 4 * (grad ? 3 * T * H + 4 * S * H : bq * H + 2 * bk * H) : 0;
    if (elem == 2)
        elem = 4;
    if (!grad)
        return (int64_t)elem * (bq * bk + bq * H) + 2 * (int64_t)sizeof(double) * bq + wide;
    return (int64_t)elem * 2 * bq * bk + (int64_t)sizeof(double) * T + wide;
}

#endif
