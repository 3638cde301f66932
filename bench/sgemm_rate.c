/* sgemm_rate.c: the rate of OpenBLAS sgemm at a model's GEMM shapes, one
 * thread, for bench/gpt.py's MFU column (the share of this machine's
 * matrix-multiply rate a training step reaches).
 *
 *   sgemm_rate SECONDS M,N,K[,TA,TB] ...
 *
 * Runs each product, in turn, repeatedly for about SECONDS / count seconds
 * (after one warm-up call) and prints the total rate over all of them:
 * `sgemm GFLOP/s R` where R = sum(2 M N K * calls) / sum(time), so each
 * shape weighs by the time it takes, as in a training step where every
 * GEMM runs once. TA/TB (0 or 1) transpose A (M x K) and B (K x N) as
 * cblas_sgemm's flags do; row-major, leading dims the natural ones. Run
 * under mpirun -np R it measures R copies at once, each on its core, so
 * that the cores share the memory system as the ranks of a step do. Where
 * OpenBLAS chose generic kernels for this CPU it runs again with the
 * kernels a shdc program asks for (runtime/openblas_core.h), and prints
 * which it used: `sgemm kernels NAME`.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/openblas_core.h"

char *openblas_get_corename(void);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: sgemm_rate SECONDS M,N,K[,TA,TB] ...\n");
    return 2;
  }
  const char *want = shd_openblas_core_wanted(openblas_get_corename());
  if (!getenv("OPENBLAS_CORETYPE") && want) {
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);   /* on failure: the generic kernels, said below */
  }
  printf("sgemm kernels %s\n", openblas_get_corename());
  double budget = atof(argv[1]) / (argc - 2), flops = 0, secs = 0;
  for (int a = 2; a < argc; a++) {
    long M, N, K;
    int ta = 0, tb = 0;
    if (sscanf(argv[a], "%ld,%ld,%ld,%d,%d", &M, &N, &K, &ta, &tb) < 3 || M <= 0 || N <= 0 || K <= 0) {
      fprintf(stderr, "sgemm_rate: bad shape %s\n", argv[a]);
      return 2;
    }
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
    if (!A || !B || !C) {
      fprintf(stderr, "sgemm_rate: out of memory\n");
      return 1;
    }
    for (long i = 0; i < M * K; i++)
      A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (long i = 0; i < K * N; i++)
      B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    memset(C, 0, sizeof(float) * M * N);
    CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    int lda = ta ? M : K, ldb = tb ? K : N;
    cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    long calls = 0;
    double t0 = now(), t;
    do {
      cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
      calls++;
      t = now() - t0;
    } while (t < budget);
    flops += 2.0 * M * N * K * calls;
    secs += t;
    free(A);
    free(B);
    free(C);
  }
  printf("sgemm GFLOP/s %.2f\n", flops / secs / 1e9);
  return 0;
}
