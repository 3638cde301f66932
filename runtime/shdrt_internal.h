/* shdrt_internal.h: what the runtime's own files share and generated code
 * never sees (it includes only shdrt.h). Kept out of shdrt.h so that MPI
 * types do not leak into the ABI.
 */
#ifndef SHDRT_INTERNAL_H
#define SHDRT_INTERNAL_H

#include <mpi.h>
#include "shdrt.h"

/* mesh.c: communicator of the ordered group `axes[0..n)`, created on first
 * use (collectively: every rank must ask for the same groups in the same
 * order, which SPMD code does) and cached. The rank of the caller in it is
 * its group index. */
MPI_Comm shd_group_comm(const int *axes, int n);
/* mesh.c: argc/argv as seen by shd_init (for io.c's arguments). */
void shd_saved_args(int *argc, char ***argv);

/* collectives.c: reads SHD_RS/SHD_AR on rank 0 and broadcasts the choice so
 * that every rank runs the same algorithm; releases scratch at the end. */
void shd_coll_init(void);
void shd_coll_fini(void);

/* alloc.c: returns the cached free blocks to the system. */
void shd_alloc_fini(void);

/* trace.c: prints the SHD_TRACE table (rank 0) at shd_finalize. */
void shd_trace_report(void);

/* Bytes per element, and the short name used in messages ("f32"). */
size_t shd_dtype_size(shd_dtype dt);
const char *shd_dtype_name(shd_dtype dt);

/* Product of shape[0..rank), 1 for rank 0. */
int64_t shd_shape_count(int rank, const int64_t *shape);

#endif
