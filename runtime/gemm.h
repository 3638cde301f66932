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
 * one row), so the copies stay near L2 size however tall A is. */
#define SHD_BF16_PANEL 65536

#endif
