// RANKS: 1 2 4 8
/* test_io: printing and command-line arguments.
 *
 * Array text is captured from stdout and compared with what NumPy 1.24's
 * str() prints for the same integer and bool arrays (nested brackets,
 * right-aligned columns, blank lines between blocks, wrapping at 75
 * columns, "..." summaries beyond 1000 elements in 1-4 dims), plus the
 * documented float and scalar formats (%.7g / %.15g, nan, True/False).
 * Arguments: shd_init is given an argv with --name=value pairs; the last
 * occurrence wins, a bare --flag is true, a longer name does not match a
 * prefix, and absent names give the default.
 */
#include <math.h>
#include <unistd.h>

#include "check.h"

static int g_saved = -1, g_fd = -1;
static char g_path[64];

static void capture_begin(void)
{
    snprintf(g_path, sizeof g_path, "/tmp/shd_test_io.XXXXXX");
    g_fd = mkstemp(g_path);
    fflush(stdout);
    g_saved = dup(1);
    dup2(g_fd, 1);
}

static char *capture_end(void)
{
    fflush(stdout);
    dup2(g_saved, 1);
    close(g_saved);
    off_t n = lseek(g_fd, 0, SEEK_END);
    char *buf = calloc((size_t)n + 1, 1);
    if (pread(g_fd, buf, (size_t)n, 0) != n)
        buf[0] = 0;
    close(g_fd);
    unlink(g_path);
    return buf;
}

static void expect_array(const void *data, shd_dtype dt, int rank,
                         const int64_t *shape, const char *want)
{
    capture_begin();
    shd_print_array(data, dt, rank, shape);
    char *got = capture_end();
    CHECK(strcmp(got, want) == 0, "print %s rank %d:\n%s\n--- expected:\n%s",
          dt_name(dt), rank, got, want);
    free(got);
}

/* i32 array of the given shape holding f(i) at flat index i. */
static int32_t *iota(int64_t n, int mul, int add, int mod)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)((mod ? (i % mod) : i) * mul + add);
    return p;
}

static void test_numpy_layouts(void)
{
    static const struct {
        int rank;
        int64_t shape[4];
        int mul, add, mod;
        const char *want;
    } cases[] = {
        { 2, { 3, 4 }, 1, 0, 0, "[[ 0  1  2  3]\n [ 4  5  6  7]\n [ 8  9 10 11]]" },
        { 3, { 2, 3, 4 }, 1, 0, 0,
          "[[[ 0  1  2  3]\n  [ 4  5  6  7]\n  [ 8  9 10 11]]\n\n"
          " [[12 13 14 15]\n  [16 17 18 19]\n  [20 21 22 23]]]" },
        { 1, { 2000 }, 1, 0, 0, "[   0    1    2 ... 1997 1998 1999]" },
        { 2, { 30, 100 }, 1, 0, 0,
          "[[   0    1    2 ...   97   98   99]\n [ 100  101  102 ...  197  198  199]\n"
          " [ 200  201  202 ...  297  298  299]\n ...\n [2700 2701 2702 ... 2797 2798 2799]\n"
          " [2800 2801 2802 ... 2897 2898 2899]\n [2900 2901 2902 ... 2997 2998 2999]]" },
        { 1, { 40 }, 1, 0, 0,
          "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
          " 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39]" },
        { 1, { 1001 }, 1, -500, 0, "[-500 -499 -498 ...  498  499  500]" },
        { 2, { 7, 200 }, 1, -6, 13,
          "[[-6 -5 -4 ... -4 -3 -2]\n [-1  0  1 ...  1  2  3]\n [ 4  5  6 ...  6 -6 -5]\n"
          " ...\n [ 1  2  3 ...  3  4  5]\n [ 6 -6 -5 ... -5 -4 -3]\n [-2 -1  0 ...  0  1  2]]" },
        { 2, { 4, 25 }, 1000, 0, 0,
          "[[    0  1000  2000  3000  4000  5000  6000  7000  8000  9000 10000 11000\n"
          "  12000 13000 14000 15000 16000 17000 18000 19000 20000 21000 22000 23000\n"
          "  24000]\n"
          " [25000 26000 27000 28000 29000 30000 31000 32000 33000 34000 35000 36000\n"
          "  37000 38000 39000 40000 41000 42000 43000 44000 45000 46000 47000 48000\n"
          "  49000]\n"
          " [50000 51000 52000 53000 54000 55000 56000 57000 58000 59000 60000 61000\n"
          "  62000 63000 64000 65000 66000 67000 68000 69000 70000 71000 72000 73000\n"
          "  74000]\n"
          " [75000 76000 77000 78000 79000 80000 81000 82000 83000 84000 85000 86000\n"
          "  87000 88000 89000 90000 91000 92000 93000 94000 95000 96000 97000 98000\n"
          "  99000]]" },
        { 4, { 2, 3, 4, 50 }, 1, 0, 0,
          "[[[[   0    1    2 ...   47   48   49]\n   [  50   51   52 ...   97   98   99]\n"
          "   [ 100  101  102 ...  147  148  149]\n   [ 150  151  152 ...  197  198  199]]\n\n"
          "  [[ 200  201  202 ...  247  248  249]\n   [ 250  251  252 ...  297  298  299]\n"
          "   [ 300  301  302 ...  347  348  349]\n   [ 350  351  352 ...  397  398  399]]\n\n"
          "  [[ 400  401  402 ...  447  448  449]\n   [ 450  451  452 ...  497  498  499]\n"
          "   [ 500  501  502 ...  547  548  549]\n   [ 550  551  552 ...  597  598  599]]]\n\n\n"
          " [[[ 600  601  602 ...  647  648  649]\n   [ 650  651  652 ...  697  698  699]\n"
          "   [ 700  701  702 ...  747  748  749]\n   [ 750  751  752 ...  797  798  799]]\n\n"
          "  [[ 800  801  802 ...  847  848  849]\n   [ 850  851  852 ...  897  898  899]\n"
          "   [ 900  901  902 ...  947  948  949]\n   [ 950  951  952 ...  997  998  999]]\n\n"
          "  [[1000 1001 1002 ... 1047 1048 1049]\n   [1050 1051 1052 ... 1097 1098 1099]\n"
          "   [1100 1101 1102 ... 1147 1148 1149]\n   [1150 1151 1152 ... 1197 1198 1199]]]]" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int64_t n = 1;
        for (int d = 0; d < cases[c].rank; d++)
            n *= cases[c].shape[d];
        int32_t *p = iota(n, cases[c].mul, cases[c].add, cases[c].mod);
        expect_array(p, SHD_I32, cases[c].rank, cases[c].shape, cases[c].want);
        free(p);
    }
}

static void test_other_types(void)
{
    uint8_t b[3] = { 1, 0, 1 };
    int64_t s3[1] = { 3 }, s0[2] = { 0, 4 };
    expect_array(b, SHD_BOOL, 1, s3, "[ True False  True]");
    float f[3] = { 0.5f, -1.25f, 3.0f };
    expect_array(f, SHD_F32, 1, s3, "[  0.5 -1.25    3.]");
    float g[3] = { NAN, INFINITY, -INFINITY };
    expect_array(g, SHD_F32, 1, s3, "[ nan  inf -inf]");
    double d[3] = { 0.1, 1.0 / 3, 1e-8 };
    expect_array(d, SHD_F64, 1, s3, "[              0.1 0.333333333333333             1e-08]");
    float f1[1] = { 0.1f };
    int64_t s1[1] = { 1 };
    expect_array(f1, SHD_F32, 1, s1, "[0.1]");
    expect_array(f, SHD_F32, 2, s0, "[]");
    double scalar = 2.5;
    expect_array(&scalar, SHD_F64, 0, NULL, "2.5");

    capture_begin();
    shd_print_scalar(2.5, SHD_F32);
    shd_print_text(" ");
    shd_print_scalar(1.0 / 3, SHD_F32);
    shd_print_text(" ");
    shd_print_scalar(-7, SHD_I32);
    shd_print_text(" ");
    shd_print_scalar(1, SHD_BOOL);
    shd_print_text(" ");
    shd_print_scalar(0, SHD_BOOL);
    shd_print_text(" ");
    shd_print_scalar(-NAN, SHD_F64);
    shd_print_end();
    char *got = capture_end();
    CHECK(strcmp(got, "2.5 0.3333333 -7 True False nan\n") == 0, "scalars: %s", got);
    free(got);
}

static void test_args(void)
{
    CHECK(shd_arg_i32("n", 1) == 7, "last --n wins: %d", shd_arg_i32("n", 1));
    CHECK(shd_arg_f64("lr", 1) == 0.25, "--lr");
    CHECK(shd_arg_f64("scale", -2.5) == -2.5, "absent f64 default");
    CHECK(shd_arg_bool("flag", false), "bare --flag is true");
    CHECK(!shd_arg_bool("off", true), "--off=false");
    CHECK(shd_arg_bool("on", false), "--on=1");
    CHECK(shd_arg_i32("nn", 3) == 3, "--nnn does not match --nn");
    CHECK(shd_arg_i32("steps", 11) == 11, "absent i32 default");
    CHECK(shd_arg_i32("neg", 0) == -12, "negative i32");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    char *fake[] = { argv[0], "--n=5", "--lr=0.25", "--flag", "--off=false",
                     "--on=1", "--nnn=4", "--n=7", "--neg=-12", NULL };
    int fargc = 9;
    char **fargv = fake;
    static const char *const names[] = { "d" };
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    shd_init(&fargc, &fargv, 1, names, &P);
    if (shd_world_rank() == 0) {
        test_numpy_layouts();
        test_other_types();
    }
    test_args();
    return finish("test_io");
}
