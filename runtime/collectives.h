/* collectives.h: the runtime's choice of collective algorithm, which the
 * compiler's cost model (compiler/op_collective.c: `shdc explain
 * --network`, `shdc plan`) makes alike.
 *
 * Constants only, no MPI: the compiler includes it too.
 */
#ifndef SHD_COLLECTIVES_H
#define SHD_COLLECTIVES_H

#include <stddef.h>

/* all_reduce "auto": from this buffer size up the ring beats Open MPI's
 * MPI_Allreduce here (at 2, 4 and 8 ranks: 32 MiB 8.7 vs 12.8 ms at 2
 * ranks), below it MPI_Allreduce is ~10% faster (bench/collectives.sh). */
#define SHD_AR_RING_MIN_BYTES ((size_t)32 << 20)

#endif
