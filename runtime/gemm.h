/* gemm.h: how the runtime's bf16 gemm widens its operands, which the
 * compiler's temporary-bytes count (compiler/op_contraction.c, explain's
 * peak) makes alike.
 *
 * Constants only: the compiler includes it too.
 */
#ifndef SHD_GEMM_H
#define SHD_GEMM_H

/* A bf16 product widens B whole and A and C a panel of rows at a time:
 * a panel holds about this many f32 elements of A and C together (at least
 * one row), 4 MiB, so the copies stay bounded however tall A is. sgemm packs
 * B again for each panel: at 65536 elements (34 rows of a C=384 GPT-2's
 * MLP) the packing took a quarter of the bf16 step, and the step was 2x the
 * f32 one; at 2^20, 1.2-1.3x. */
#define SHD_BF16_PANEL (1 << 20)

#endif
