// RANKS: 1
/* test_k_sort: the row kernel of sort, argsort and top_k (runtime/k_sort.c)
 * against a reference that orders (key, position) pairs by insertion:
 *
 * - rows along a contiguous and a strided dim, n from 1 to 37 (merge runs
 *   of every parity), f32, f64, i32 and bf16 (its bits moved, compared
 *   as f32), values with many ties;
 * - ascending: NaN after every number, and -inf, +inf in their places;
 *   descending (top_k): NaN before every number; both stable (equal keys
 *   keep their positions' order), k < n keeping the first k.
 */
#include <math.h>

#include "check.h"

static bool before(double a, double b, bool desc)
{
    if (desc)
        return isnan(a) ? !isnan(b) : !isnan(b) && a > b;
    return isnan(b) ? !isnan(a) : !isnan(a) && a < b;
}

static double key_at(shd_dtype dt, const void *x, int64_t i)
{
    switch (dt) {
    case SHD_F32: return ((const float *)x)[i];
    case SHD_F64: return ((const double *)x)[i];
    case SHD_BF16: return shd_bf2f(((const uint16_t *)x)[i]);
    default: return ((const int32_t *)x)[i];
    }
}

static void test_case(shd_dtype dt, int64_t outer, int64_t n, int64_t inner, int64_t k, bool desc, unsigned seed)
{
    size_t es = dt == SHD_F64 ? 8 : dt == SHD_BF16 ? 2 : 4;
    int64_t total = outer * n * inner, out = outer * k * inner;
    char *x = malloc((size_t)total * es), *v = malloc((size_t)out * es + 8);
    int32_t *idx = malloc((size_t)out * 4 + 8), *ref = malloc((size_t)n * 4);
    srand(seed);
    for (int64_t i = 0; i < total; i++) {
        int r = rand() % 9;
        double val = r == 7 && dt != SHD_I32 ? NAN : r == 8 && dt != SHD_I32 ? (rand() % 2 ? INFINITY : -INFINITY)
                                                                             : (double)(rand() % 5) - 2.0;
        if (dt == SHD_F32)
            ((float *)x)[i] = (float)val;
        else if (dt == SHD_F64)
            ((double *)x)[i] = val;
        else if (dt == SHD_BF16)   /* -2 to 2.5 in halves: ties */
            ((uint16_t *)x)[i] = shd_f2bf((float)(val + (rand() % 2) * 0.5));
        else
            ((int32_t *)x)[i] = (int32_t)val;
    }
    shd_sort_rows(x, v, idx, dt, outer, n, inner, k, desc);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i, obase = o * k * inner + i;
            for (int64_t j = 0; j < n; j++) {   /* insertion: stable */
                int64_t p = j;
                while (p > 0 && before(key_at(dt, x, base + j * inner), key_at(dt, x, base + ref[p - 1] * inner), desc)) {
                    ref[p] = ref[p - 1];
                    p--;
                }
                ref[p] = (int32_t)j;
            }
            for (int64_t j = 0; j < k; j++) {
                int64_t at = obase + j * inner;
                double want = key_at(dt, x, base + ref[j] * inner), got = key_at(dt, v, at);
                CHECK(idx[at] == ref[j], "dt %d %s n %lld row (%lld,%lld) pos %lld: index %d, want %d", (int)dt,
                      desc ? "desc" : "asc", (long long)n, (long long)o, (long long)i, (long long)j, idx[at], ref[j]);
                CHECK(got == want || (isnan(got) && isnan(want)), "value at %lld: %g, want %g", (long long)j, got, want);
            }
        }
    free(x);
    free(v);
    free(idx);
    free(ref);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    static const shd_dtype dts[4] = { SHD_F32, SHD_F64, SHD_I32, SHD_BF16 };
    unsigned seed = 1;
    for (int d = 0; d < 4; d++)
        for (int64_t n = 1; n <= 37; n += 3)
            for (int desc = 0; desc < 2; desc++) {
                test_case(dts[d], 3, n, 1, n, desc, seed++);
                test_case(dts[d], 2, n, 5, n, desc, seed++);
                test_case(dts[d], 2, n, 3, (n + 1) / 2, desc, seed++);
            }
    return finish("test_k_sort");
}
