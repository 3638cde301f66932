/* reduce.c: the row kernels of the reduction family against the generic
 * reduction walk they replace, on one rank (bench/reduce.sh prints this
 * table beside NumPy's for the same operations).
 *
 * For each rows x cols f32 problem: mean over the last dim (a layer norm's
 * statistic, and sum((x - m)^2) the same kernel), sum over the first dim (a
 * bias gradient), softmax along the last dim, its gradient and logsumexp's
 * gradient; each the best of several repetitions, in ms, with the bytes it
 * must read and write per second. "generic" is shd_reduce's odometer walk (the code before the
 * fast paths), "fast" the vector kernel shdc's generated code now calls.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "shdrt_internal.h"

static double best_ms(void (*f)(void *), void *arg, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = shd_time();
        f(arg);
        t = shd_time() - t;
        if (t < best)
            best = t;
    }
    return best * 1e3;
}

typedef struct {
    float *x, *y, *g, *out;
    int64_t rows, cols;
} problem;

static void mean_generic(void *a) {
    problem *p = a;
    shd_reduce_generic(p->x, p->out, SHD_F32, SHD_SUM, 2, (int64_t[]){p->rows, p->cols}, 2u);
}
static void mean_fast(void *a) {
    problem *p = a;
    shd_reduce(p->x, p->out, SHD_F32, SHD_SUM, 2, (int64_t[]){p->rows, p->cols}, 2u);
}
static void col_generic(void *a) {
    problem *p = a;
    shd_reduce_generic(p->x, p->out, SHD_F32, SHD_SUM, 2, (int64_t[]){p->rows, p->cols}, 1u);
}
static void col_fast(void *a) {
    problem *p = a;
    shd_reduce(p->x, p->out, SHD_F32, SHD_SUM, 2, (int64_t[]){p->rows, p->cols}, 1u);
}
static void max_generic(void *a) {
    problem *p = a;
    shd_reduce_generic(p->x, p->out, SHD_F32, SHD_MAX, 2, (int64_t[]){p->rows, p->cols}, 2u);
}
static void max_fast(void *a) {
    problem *p = a;
    shd_reduce(p->x, p->out, SHD_F32, SHD_MAX, 2, (int64_t[]){p->rows, p->cols}, 2u);
}
/* softmax as a chain of whole-array passes (what a composition of generic
 * reduce and elementwise code does): max, exp(x - max) and its sum, divide */
static void softmax_chain(void *a) {
    problem *p = a;
    int64_t shape[2] = {p->rows, p->cols};
    shd_reduce_generic(p->x, p->out, SHD_F32, SHD_MAX, 2, shape, 2u);
    for (int64_t r = 0; r < p->rows; r++)
        for (int64_t j = 0; j < p->cols; j++)
            p->y[r * p->cols + j] = expf(p->x[r * p->cols + j] - p->out[r]);
    shd_reduce_generic(p->y, p->out, SHD_F32, SHD_SUM, 2, shape, 2u);
    for (int64_t r = 0; r < p->rows; r++)
        for (int64_t j = 0; j < p->cols; j++)
            p->y[r * p->cols + j] /= p->out[r];
}
static void softmax_fast(void *a) {
    problem *p = a;
    shd_softmax(p->x, p->y, SHD_F32, SHD_SOFTMAX, p->rows, p->cols, 1);
}
static void lsm_fast(void *a) {
    problem *p = a;
    shd_softmax(p->x, p->y, SHD_F32, SHD_LOG_SOFTMAX, p->rows, p->cols, 1);
}
static void grad_fast(void *a) {
    problem *p = a;
    shd_softmax_grad(p->y, p->g, p->out, SHD_F32, SHD_SOFTMAX, p->rows, p->cols, 1);
}

/* logsumexp's gradient g * exp(x - y), y and g per row (the loss's
 * backward over the logits) */
static void lsegrad_fast(void *a) {
    problem *p = a;
    shd_logsumexp_grad(p->x, p->out, p->g, p->y, SHD_F32, p->rows, p->cols, 1);
}

static void row(const char *what, int64_t rows, int64_t cols, double bytes, double generic, double fast) {
    if (generic > 0)
        printf("| %-22s | %6lld x %-6lld | %9.3f | %9.3f | %6.1fx | %7.1f |\n", what, (long long)rows,
               (long long)cols, generic, fast, generic / fast, bytes / fast / 1e6);
    else
        printf("| %-22s | %6lld x %-6lld | %9s | %9.3f | %7s | %7.1f |\n", what, (long long)rows, (long long)cols,
               "-", fast, "", bytes / fast / 1e6);
}

int main(int argc, char **argv) {
    shd_init(&argc, &argv, 0, NULL, NULL);
    int64_t sizes[][2] = {{4096, 768}, {1024, 1024}, {16384, 64}, {64, 50304}};
    printf("| operation (f32)        | rows x cols     | generic ms|   fast ms | speedup | GB/s    |\n");
    printf("|------------------------|-----------------|-----------|-----------|---------|---------|\n");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        problem p = {0};
        p.rows = sizes[s][0];
        p.cols = sizes[s][1];
        size_t n = (size_t)(p.rows * p.cols);
        p.x = shd_alloc(n * 4);
        p.y = shd_alloc(n * 4);
        p.g = shd_alloc(n * 4);
        p.out = shd_alloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            p.x[i] = (float)shd_normal_at(1, i);
            p.g[i] = (float)shd_normal_at(2, i);
        }
        double in = (double)n * 4;
        int reps = 10;
        row("mean(x, axis=-1)", p.rows, p.cols, in, best_ms(mean_generic, &p, reps), best_ms(mean_fast, &p, reps));
        row("max(x, axis=-1)", p.rows, p.cols, in, best_ms(max_generic, &p, reps), best_ms(max_fast, &p, reps));
        row("sum(x, axis=0)", p.rows, p.cols, in, best_ms(col_generic, &p, reps), best_ms(col_fast, &p, reps));
        row("softmax(x, axis=-1)", p.rows, p.cols, 2 * in, best_ms(softmax_chain, &p, reps),
            best_ms(softmax_fast, &p, reps));
        row("log_softmax(x, axis=-1)", p.rows, p.cols, 2 * in, 0, best_ms(lsm_fast, &p, reps));
        row("softmax gradient", p.rows, p.cols, 3 * in, 0, best_ms(grad_fast, &p, reps));
        shd_softmax(p.x, p.out, SHD_F32, SHD_LOGSUMEXP, p.rows, p.cols, 1);
        row("logsumexp gradient", p.rows, p.cols, 2 * in, 0, best_ms(lsegrad_fast, &p, reps));
        shd_release(p.x);
        shd_release(p.y);
        shd_release(p.g);
        shd_release(p.out);
    }
    shd_finalize();
    return 0;
}
