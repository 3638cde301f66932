// RANKS: 1
/* test_vmath: the vectorisable f32 exp and tanh of shdrt.h against libm in
 * double precision, over every f32 input of their interesting ranges (a
 * stride through the bit patterns) and at the edges.
 *
 * - shd_expf within 2 ulp (relative 2.4e-7) wherever expf's result is a
 *   normal f32, including the top of the range (88.72, where 2^128 must not
 *   overflow the scale) and the bottom (-87.33, where 2^-126 must not
 *   underflow it); 0 below that, inf above 88.7228, NaN for NaN.
 * - shd_tanhf within 1e-6 relative (2e-7 absolute near 0), exact signs, ±1
 *   at the ends, NaN for NaN, and odd.
 */
#include <math.h>

#include "check.h"

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static void test_exp(void)
{
    double worst = 0;
    /* every 97th bit pattern of the floats in [-104, 89] */
    for (uint32_t b = 0; b < 0xff800000u; b += 97) {
        float x = from_bits(b);
        if (!(x >= -104.0f && x <= 89.0f))
            continue;
        double want = exp((double)x), got = shd_expf(x);
        if (want > 3.4028234663852886e38)
            CHECK(isinf(got), "shd_expf(%.9g) = %g, want inf", x, got);
        else if (want >= 1.1754943508222875e-38) {
            double rel = fabs(got - want) / want;
            worst = rel > worst ? rel : worst;
            CHECK(rel < 2.4e-7, "shd_expf(%.9g) = %.9g, exp = %.9g (relative %.3g)", x, got, want, rel);
        } else
            CHECK(got == 0 || fabs(got - want) < 1.2e-38, "shd_expf(%.9g) = %g below the normal range", x, got);
    }
    const float edges[] = {88.72283f, 88.7f, 88.5f, 88.0f, -87.33654f, -87.3f, -87.0f, 0.0f, -0.0f, 1.0f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        double want = exp((double)edges[i]), got = shd_expf(edges[i]);
        CHECK(fabs(got - want) <= 2.4e-7 * want, "shd_expf(%.9g) = %.9g, exp = %.9g", edges[i], got, want);
    }
    CHECK(isinf(shd_expf(88.73f)) && isinf(shd_expf(INFINITY)), "exp overflow is inf");
    CHECK(shd_expf(-104.0f) == 0 && shd_expf(-INFINITY) == 0, "exp underflow is 0");
    CHECK(isnan(shd_expf(NAN)), "exp(NaN) is NaN");
    printf("shd_expf: worst relative error %.3g\n", worst);
}

static void test_tanh(void)
{
    double worst = 0;
    for (uint32_t b = 0; b < 0x7f800000u; b += 89) {
        float x = from_bits(b);
        if (x > 12.0f)
            break;
        for (int s = 0; s < 2; s++) {
            float v = s ? -x : x;
            double want = tanh((double)v), got = shd_tanhf(v);
            double err = fabs(got - want), rel = want != 0 ? err / fabs(want) : err;
            worst = rel > worst ? rel : worst;
            CHECK(rel < 1e-6 || err < 2e-7 * 1e-30 || (fabs(want) < 1e-30 && err < 1e-37),
                  "shd_tanhf(%.9g) = %.9g, tanh = %.9g (relative %.3g)", v, got, want, rel);
            CHECK(shd_tanhf(-v) == -shd_tanhf(v), "tanh is odd at %.9g", v);
        }
    }
    CHECK(shd_tanhf(INFINITY) == 1 && shd_tanhf(-INFINITY) == -1 && shd_tanhf(30.0f) == 1, "tanh at the ends");
    CHECK(isnan(shd_tanhf(NAN)), "tanh(NaN) is NaN");
    printf("shd_tanhf: worst relative error %.3g\n", worst);
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    test_exp();
    test_tanh();
    return finish("test_vmath");
}
