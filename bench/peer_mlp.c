/* peer_mlp.c: the benchmark's peer, a careful hand-written MPI + OpenBLAS
 * training step for the MLPs of dsl-examples/mlp_dp.shd and mlp_fsdp.shd,
 * the yardstick for the code shdc generates from them.
 *
 *   peer_mlp dp   STEPS   128 -> 2048 -> 2048 -> 128, weights replicated
 *   peer_mlp fsdp STEPS   128 -> 2048 -> 128, weights' first dims sharded
 *
 * Global batch 8192 split over the ranks; MSE loss (mean over the batch of
 * the squared error summed over features), SGD with lr 1e-5, the same
 * initialisation statistics (not the same random numbers). Every buffer is
 * allocated once; bias and ReLU are fused into one pass; transposes are
 * passed to sgemm; gradients are all-reduced (DP) or reduce-scattered with a
 * ring of sendrecv (FSDP: MPI_Reduce_scatter_block is several times slower
 * on this machine, see reference/platform-notes.md); FSDP gathers each
 * weight in the forward pass and gathers w2 again in the backward pass
 * (ZeRO-3). Prints one line per step: step, loss, seconds, gemm seconds.
 */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 8192, D = 128, F = 2048 };

static int rank, nranks;
static double gemm_time;

static float *buf(size_t n) {
  float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
  if (!p) {
    fprintf(stderr, "peer: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, 0, n * sizeof(float));
  return p;
}

static void fill_normal(float *p, size_t n, float scale, unsigned seed) {
  srand(seed * 7919u + (unsigned)rank);
  for (size_t i = 0; i + 1 < n; i += 2) {
    double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
    double r = sqrt(-2 * log(u1));
    p[i] = (float)(scale * r * cos(2 * M_PI * u2));
    p[i + 1] = (float)(scale * r * sin(2 * M_PI * u2));
  }
}

/* C[m,n] = op(A) op(B) (+ C when acc) */
static void gemm(bool ta, bool tb, int m, int n, int k, const float *A, const float *Bm, float *C, bool acc) {
  double t = MPI_Wtime();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, A,
              ta ? m : k, Bm, tb ? k : n, acc ? 1.0f : 0.0f, C, n);
  gemm_time += MPI_Wtime() - t;
}

/* h = relu(z + b) in place over rows of width n */
static void bias_relu(float *restrict z, const float *restrict b, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++) {
      float v = z[(size_t)r * n + j] + b[j];
      z[(size_t)r * n + j] = v > 0 ? v : 0;
    }
}

static void bias(float *restrict z, const float *restrict b, int rows, int n) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      z[(size_t)r * n + j] += b[j];
}

/* g *= (h > 0) */
static void relu_grad(float *restrict g, const float *restrict h, size_t n) {
  for (size_t i = 0; i < n; i++)
    g[i] = h[i] > 0 ? g[i] : 0;
}

static void col_sum(const float *restrict g, float *restrict out, int rows, int n) {
  memset(out, 0, (size_t)n * sizeof(float));
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++)
      out[j] += g[(size_t)r * n + j];
}

static void sgd(float *restrict w, const float *restrict g, size_t n, float lr) {
  for (size_t i = 0; i < n; i++)
    w[i] -= lr * g[i];
}

/* out = block `rank` of the sum over ranks of in (n floats, n % nranks == 0),
 * a ring of sendrecv: nranks-1 steps, each moving one block. */
static void ring_reduce_scatter(float *in, float *out, size_t n, float *tmp) {
  size_t blk = n / (size_t)nranks;
  int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
  for (int s = 0; s < nranks - 1; s++) {
    int send = (rank - s - 1 + 2 * nranks) % nranks, recv = (rank - s - 2 + 2 * nranks) % nranks;
    MPI_Sendrecv(in + (size_t)send * blk, (int)blk, MPI_FLOAT, right, 0, tmp, (int)blk, MPI_FLOAT, left, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    float *dst = in + (size_t)recv * blk;
    for (size_t i = 0; i < blk; i++)
      dst[i] += tmp[i];
  }
  memcpy(out, in + (size_t)rank * blk, blk * sizeof(float));
}

static double loss_grad(const float *p, const float *y, float *g, int rows) {
  double l = 0;
  for (size_t i = 0; i < (size_t)rows * D; i++) {
    float d = p[i] - y[i];
    l += (double)d * d;
    g[i] = 2.0f * d / B;
  }
  return l / B;
}

static double allreduce_loss(double l) {
  double out;
  MPI_Allreduce(&l, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

static void run_dp(int steps) {
  int b = B / nranks;
  float *w1 = buf((size_t)D * F), *b1 = buf(F), *w2 = buf((size_t)F * F), *b2 = buf(F), *w3 = buf((size_t)F * D),
        *b3 = buf(D);
  float *x = buf((size_t)b * D), *y = buf((size_t)b * D);
  float *h1 = buf((size_t)b * F), *h2 = buf((size_t)b * F), *p = buf((size_t)b * D), *gp = buf((size_t)b * D);
  float *gh2 = buf((size_t)b * F), *gh1 = buf((size_t)b * F);
  float *gw1 = buf((size_t)D * F), *gb1 = buf(F), *gw2 = buf((size_t)F * F), *gb2 = buf(F), *gw3 = buf((size_t)F * D),
        *gb3 = buf(D);
  fill_normal(w1, (size_t)D * F, 1 / sqrtf(D), 1);
  fill_normal(b1, F, 1, 2);
  fill_normal(w2, (size_t)F * F, 1 / sqrtf(F), 3);
  fill_normal(b2, F, 1, 4);
  fill_normal(w3, (size_t)F * D, 1 / sqrtf(F), 5);
  fill_normal(b3, D, 1, 6);
  fill_normal(x, (size_t)b * D, 1, 7);
  fill_normal(y, (size_t)b * D, 1, 8);
  for (int s = 0; s < steps; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    gemm_time = 0;
    gemm(false, false, b, F, D, x, w1, h1, false);
    bias_relu(h1, b1, b, F);
    gemm(false, false, b, F, F, h1, w2, h2, false);
    bias_relu(h2, b2, b, F);
    gemm(false, false, b, D, F, h2, w3, p, false);
    bias(p, b3, b, D);
    double l = loss_grad(p, y, gp, b);
    gemm(true, false, F, D, b, h2, gp, gw3, false);
    col_sum(gp, gb3, b, D);
    gemm(false, true, b, F, D, gp, w3, gh2, false);
    relu_grad(gh2, h2, (size_t)b * F);
    gemm(true, false, F, F, b, h1, gh2, gw2, false);
    col_sum(gh2, gb2, b, F);
    gemm(false, true, b, F, F, gh2, w2, gh1, false);
    relu_grad(gh1, h1, (size_t)b * F);
    gemm(true, false, D, F, b, x, gh1, gw1, false);
    col_sum(gh1, gb1, b, F);
    float *grads[] = {gw1, gb1, gw2, gb2, gw3, gb3};
    float *params[] = {w1, b1, w2, b2, w3, b3};
    size_t sizes[] = {(size_t)D * F, F, (size_t)F * F, F, (size_t)F * D, D};
    for (int k = 0; k < 6; k++) {
      MPI_Allreduce(MPI_IN_PLACE, grads[k], (int)sizes[k], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      sgd(params[k], grads[k], sizes[k], 1e-5f);
    }
    l = allreduce_loss(l);
    double t = MPI_Wtime() - t0;
    if (rank == 0)
      printf("step %d loss %.7g seconds %.6f gemm %.6f\n", s, l, t, gemm_time);
  }
}

static void run_fsdp(int steps) {
  int b = B / nranks, dl = D / nranks, fl = F / nranks;
  float *w1 = buf((size_t)dl * F), *b1 = buf(fl), *w2 = buf((size_t)fl * D), *b2 = buf(dl);
  float *W1 = buf((size_t)D * F), *B1 = buf(F), *W2 = buf((size_t)F * D), *B2 = buf(D);
  float *x = buf((size_t)b * D), *y = buf((size_t)b * D);
  float *h = buf((size_t)b * F), *p = buf((size_t)b * D), *gp = buf((size_t)b * D), *gh = buf((size_t)b * F);
  float *gW1 = buf((size_t)D * F), *gB1 = buf(F), *gW2 = buf((size_t)F * D), *gB2 = buf(D);
  float *gw1 = buf((size_t)dl * F), *gb1 = buf(fl), *gw2 = buf((size_t)fl * D), *gb2 = buf(dl);
  float *tmp = buf((size_t)D * F / (size_t)nranks + F);
  fill_normal(w1, (size_t)dl * F, 1 / sqrtf(D), 1);
  fill_normal(b1, fl, 1, 2);
  fill_normal(w2, (size_t)fl * D, 1 / sqrtf(F), 3);
  fill_normal(b2, dl, 1, 4);
  fill_normal(x, (size_t)b * D, 1, 7);
  fill_normal(y, (size_t)b * D, 1, 8);
  for (int s = 0; s < steps; s++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    gemm_time = 0;
    MPI_Allgather(w1, dl * F, MPI_FLOAT, W1, dl * F, MPI_FLOAT, MPI_COMM_WORLD);
    MPI_Allgather(b1, fl, MPI_FLOAT, B1, fl, MPI_FLOAT, MPI_COMM_WORLD);
    gemm(false, false, b, F, D, x, W1, h, false);
    bias_relu(h, B1, b, F);
    MPI_Allgather(w2, fl * D, MPI_FLOAT, W2, fl * D, MPI_FLOAT, MPI_COMM_WORLD);
    MPI_Allgather(b2, dl, MPI_FLOAT, B2, dl, MPI_FLOAT, MPI_COMM_WORLD);
    gemm(false, false, b, D, F, h, W2, p, false);
    bias(p, B2, b, D);
    double l = loss_grad(p, y, gp, b);
    gemm(true, false, F, D, b, h, gp, gW2, false);
    col_sum(gp, gB2, b, D);
    ring_reduce_scatter(gW2, gw2, (size_t)F * D, tmp);
    ring_reduce_scatter(gB2, gb2, D, tmp);
    /* ZeRO-3: the gathered W2 was dropped after the forward pass. */
    MPI_Allgather(w2, fl * D, MPI_FLOAT, W2, fl * D, MPI_FLOAT, MPI_COMM_WORLD);
    gemm(false, true, b, F, D, gp, W2, gh, false);
    relu_grad(gh, h, (size_t)b * F);
    gemm(true, false, D, F, b, x, gh, gW1, false);
    col_sum(gh, gB1, b, F);
    ring_reduce_scatter(gW1, gw1, (size_t)D * F, tmp);
    ring_reduce_scatter(gB1, gb1, F, tmp);
    sgd(w1, gw1, (size_t)dl * F, 1e-5f);
    sgd(b1, gb1, fl, 1e-5f);
    sgd(w2, gw2, (size_t)fl * D, 1e-5f);
    sgd(b2, gb2, dl, 1e-5f);
    l = allreduce_loss(l);
    double t = MPI_Wtime() - t0;
    if (rank == 0)
      printf("step %d loss %.7g seconds %.6f gemm %.6f\n", s, l, t, gemm_time);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc < 3 || (strcmp(argv[1], "dp") && strcmp(argv[1], "fsdp")) || D % nranks || F % nranks) {
    if (rank == 0)
      fprintf(stderr, "usage: peer_mlp dp|fsdp STEPS (ranks must divide %d)\n", D);
    MPI_Finalize();
    return 2;
  }
  int steps = atoi(argv[2]);
  if (!strcmp(argv[1], "dp"))
    run_dp(steps);
  else
    run_fsdp(steps);
  MPI_Finalize();
  return 0;
}
