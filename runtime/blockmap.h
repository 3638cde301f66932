/* blockmap.h: which elements of a block-sharded array move between which
 * ranks when the same row-major sequence of elements is laid out twice
 * (a reshape whose blocks do not stay in place).
 *
 * Pure C with no MPI: the runtime (reshape_move.c) runs it to plan the
 * move, and the compiler (op_shape.c) runs the same code to predict the
 * bytes each rank sends, so `shdc explain` and SHD_TRACE agree by
 * construction.
 */
#ifndef SHD_BLOCKMAP_H
#define SHD_BLOCKMAP_H

#include <stdbool.h>
#include <stdint.h>

#define SHD_BM_MAX 8

/* The mesh: axis sizes in declaration order; ranks are row-major over them. */
typedef struct {
    int naxes;
    int sizes[SHD_BM_MAX];
} shd_bm_mesh;

/* A block layout of a global array: its shape, and for each dim the mesh
 * axes that shard it, major first. */
typedef struct {
    int rank;
    int64_t shape[SHD_BM_MAX];
    int naxes[SHD_BM_MAX];
    int axes[SHD_BM_MAX][SHD_BM_MAX];
} shd_bm_layout;

/* A contiguous piece: `len` elements at `src` in the sender's block and at
 * `dst` in the receiver's block (local element offsets). */
typedef void (*shd_bm_piece_fn)(void *arg, int64_t src, int64_t dst, int64_t len);

/* Calls fn, in increasing row-major order, for every piece that rank s
 * sends to rank r when moving from layout `from` to layout `to` (same
 * element count). An element goes to r from the rank that holds it in
 * `from` with r's coordinates on every axis that shards no dim of `from`
 * (so pending sums, replicated and varying copies pair up). */
void shd_bm_pieces(const shd_bm_mesh *m, const shd_bm_layout *from, const shd_bm_layout *to, int s, int r,
                   shd_bm_piece_fn fn, void *arg);

/* Elements rank s sends to other ranks (not to itself). */
int64_t shd_bm_sent(const shd_bm_mesh *m, const shd_bm_layout *from, const shd_bm_layout *to, int s);

#endif
