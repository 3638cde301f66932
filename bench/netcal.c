/* netcal.c: measures this machine's link for `shdc explain --network=FILE`.
 *
 * Two ranks exchange messages with MPI_Sendrecv (the call the runtime's
 * rings and permutes use): the latency is the time of an 8-byte exchange,
 * the bandwidth the bytes of a 64 MiB exchange over its time less that
 * latency. Rank 0 also times the local reduction the rings do (float
 * a[i] += b[i] over 64 MiB). The best of several repetitions counts, as a
 * model wants the machine's capability, not its noise. Prints a network
 * file: `* BANDWIDTH LATENCY this-machine` and `reduce BANDWIDTH`.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double exchange(void *s, void *r, int bytes, int peer, int reps)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Sendrecv(s, bytes, MPI_BYTE, peer, 1, r, bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        t = MPI_Wtime() - t;
        double worst;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (worst < best)
            best = worst;
    }
    return best;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "netcal: run with 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    const int big = 64 << 20;
    char *s = malloc(big), *r = malloc(big);
    if (!s || !r)
        MPI_Abort(MPI_COMM_WORLD, 1);
    memset(s, 1, big);
    memset(r, 0, big);
    int peer = 1 - rank;
    double lat = exchange(s, r, 8, peer, 200);
    double t = exchange(s, r, big, peer, 5);
    double bw = big / (t - lat > 0 ? t - lat : t);
    double red = 0;
    if (rank == 0) {
        float *a = (float *)s, *b = (float *)r;
        size_t n = (size_t)big / sizeof(float);
        double best = 1e30;
        for (int k = 0; k < 5; k++) {
            double t0 = MPI_Wtime();
            for (size_t i = 0; i < n; i++)
                a[i] += b[i];
            double dt = MPI_Wtime() - t0;
            if (dt < best)
                best = dt;
        }
        red = big / best;
        printf("# measured by tools/calibrate-network (bench/netcal.c): MPI_Sendrecv between 2 ranks\n");
        printf("*       %.3gGB/s  %.3gus  this-machine\n", bw / 1e9, lat * 1e6);
        printf("reduce  %.3gGB/s\n", red / 1e9);
        if (a[0] < 0)   /* keep the loop */
            printf("#\n");
    }
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
