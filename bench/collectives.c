/* collectives.c: time per call and bandwidth of the runtime's collectives.
 *
 * Runs every collective over the whole world (a 1-D mesh of all ranks) on
 * f32 arrays of 1, 16 and 64 MiB (or the sizes given as arguments, in MiB),
 * comparing the algorithms the runtime can choose between:
 *   all_reduce      mpi (MPI_Allreduce in place) and ring (Sendrecv ring)
 *   reduce_scatter  ring (Sendrecv + local add) and mpi (Reduce_scatter_block)
 *   all_gather      MPI_Allgather, along dim 0 and along dim 1 (packing)
 *   all_to_all      MPI_Alltoall
 * "size" is the full array: the all-reduce buffer, the reduce-scatter input,
 * the all-gather output, the all-to-all input. algbw = size / time; busbw =
 * the bytes each rank sends (the trace formula) / time. Time is the slowest
 * rank's mean over a batch of calls, best of three batches, after two
 * untimed warm-up calls.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt.h"

typedef enum { AR, RS, AG, A2A } op_kind;

typedef struct {
    op_kind op;
    const char *name, *algo;
    int dim;   /* 0 or 1: along which dim of a [rows, 256] array */
} bench_case;

static const bench_case k_cases[] = {
    { AR, "all_reduce", "mpi", 0 },      { AR, "all_reduce", "ring", 0 },
    { RS, "reduce_scatter", "ring", 0 }, { RS, "reduce_scatter", "mpi", 0 },
    { RS, "reduce_scatter", "ring", 1 }, { AG, "all_gather", "mpi", 0 },
    { AG, "all_gather", "mpi", 1 },      { A2A, "all_to_all", "mpi", 0 },
};

static void run_once(const bench_case *c, float *in, float *out, int64_t rows,
                     int P)
{
    int axis[1] = { 0 };
    int64_t shape[2] = { rows, 256 };
    switch (c->op) {
    case AR:
        shd_all_reduce(in, (size_t)(rows * 256), SHD_F32, SHD_SUM, axis, 1);
        break;
    case RS:
        shd_reduce_scatter(in, out, SHD_F32, SHD_SUM, 2, shape, c->dim, axis, 1);
        break;
    case AG:   /* input is one rank's share of the full array */
        shape[c->dim] /= P;
        shd_all_gather(in, out, SHD_F32, 2, shape, c->dim, axis, 1);
        break;
    case A2A:
        shd_all_to_all(in, out, SHD_F32, 2, shape, 0, 1, axis, 1);
        break;
    }
}

/* Mean seconds per call on the slowest rank. */
static double time_case(const bench_case *c, size_t bytes, int iters, int P,
                        uint64_t *sent)
{
    int64_t rows = (int64_t)(bytes / sizeof(float) / 256);
    float *in = shd_alloc(bytes), *out = shd_alloc(bytes);
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        in[i] = (float)(i % 17);
    if (c->op == AR || c->op == RS)
        shd_set_collective_algo(c->name, c->algo);
    for (int w = 0; w < 2; w++)
        run_once(c, in, out, rows, P);
    /* Best of three batches: on a shared machine the minimum is the
     * repeatable figure; each batch is timed on its slowest rank. */
    double slowest = 1e30;
    uint64_t b0 = shd_trace_bytes(c->name);
    for (int batch = 0; batch < 3; batch++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = shd_time();
        for (int i = 0; i < iters; i++)
            run_once(c, in, out, rows, P);
        double t = (shd_time() - t0) / iters, worst;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        slowest = worst < slowest ? worst : slowest;
    }
    *sent = (shd_trace_bytes(c->name) - b0) / (uint64_t)(3 * iters);
    shd_release(in);
    shd_release(out);
    return slowest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    static const char *const names[] = { "d" };
    shd_init(&argc, &argv, 1, names, &P);
    size_t mib[8] = { 1, 16, 64 };
    int nsizes = 3;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++)
            mib[nsizes++] = (size_t)atoi(argv[i]);
    }
    if (shd_world_rank() == 0)
        printf("%-15s %-5s %-4s %5s %7s %10s %8s %8s\n", "collective", "algo",
               "dim", "ranks", "MiB", "ms/call", "algGB/s", "busGB/s");
    for (int s = 0; s < nsizes; s++) {
        size_t bytes = mib[s] << 20;
        int iters = mib[s] <= 1 ? 20 : mib[s] <= 16 ? 5 : 2;
        for (size_t c = 0; c < sizeof k_cases / sizeof *k_cases; c++) {
            uint64_t sent;
            double t = time_case(&k_cases[c], bytes, iters, P, &sent);
            if (shd_world_rank() == 0)
                printf("%-15s %-5s %-4d %5d %7zu %10.3f %8.2f %8.2f\n",
                       k_cases[c].name, k_cases[c].algo, k_cases[c].dim, P,
                       mib[s], t * 1e3, (double)bytes / t / 1e9,
                       (double)sent / t / 1e9);
            fflush(stdout);
        }
    }
    shd_finalize();
    return 0;
}
