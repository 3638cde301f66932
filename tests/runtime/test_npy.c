// RANKS: 1 2 4 8
/* test_npy: .npy save and load of sharded arrays through MPI-IO.
 *
 * Saves, each checked byte for byte on rank 0 with plain stdio (header:
 * magic, version 1.0, little-endian length, the exact dict text, space
 * padding, '\n', data offset a multiple of 64; then the C-order data), and
 * loaded back through a *different* decomposition:
 *   f32 [8, 16] split along dim 0, loaded split along dim 1 and whole;
 *   i32 [8, 16] split along dim 1, loaded split along dim 0;
 *   f64 [5, 3] replicated, written by rank 0 alone, loaded whole;
 *   bool [16] split along dim 0 (shape "(16,)", descr '|b1');
 *   f64 0-d (shape "()");
 *   f32 [4, 6, 8] split along dims 0 and 2 over the 2-D mesh;
 *   f32 [0, 4] (empty).
 * Load also accepts a hand-written version 2.0 file with its keys in another
 * order and extra padding. No temporary file may be left behind.
 */
#include <dirent.h>
#include <unistd.h>

#include "check.h"

static char g_dir[256];

static double value(int64_t flat, shd_dtype dt)
{
    if (dt == SHD_BOOL)
        return flat % 3 == 0;
    return dt == SHD_I32 ? (double)(flat * 7 - 50) : (double)flat * 0.5 + 1;
}

/* Fills a block [off, off+shape) of a global array of rank <= 3. */
static void *make_block(shd_dtype dt, int rank, const int64_t *g,
                        const int64_t *off, const int64_t *shape)
{
    int64_t G[3] = { 1, 1, 1 }, O[3] = { 0, 0, 0 }, S[3] = { 1, 1, 1 };
    for (int d = 0; d < rank; d++) {
        G[3 - rank + d] = g[d];
        O[3 - rank + d] = off[d];
        S[3 - rank + d] = shape[d];
    }
    void *p = malloc((size_t)(S[0] * S[1] * S[2]) * dt_size(dt) + 1);
    size_t at = 0;
    for (int64_t i = 0; i < S[0]; i++)
        for (int64_t j = 0; j < S[1]; j++)
            for (int64_t k = 0; k < S[2]; k++)
                put(p, dt, at++, value(((O[0] + i) * G[1] + O[1] + j) * G[2] + O[2] + k, dt));
    return p;
}

static void path_of(char *buf, const char *name)
{
    snprintf(buf, 512, "%s/%s", g_dir, name);
}

/* Rank 0: the file must be exactly header + global data. */
static void check_file(const char *name, shd_dtype dt, int rank, const int64_t *g,
                       const char *dict)
{
    if (shd_world_rank() != 0)
        return;
    char path[512];
    path_of(path, name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s not written", name);
    if (!f)
        return;
    unsigned char buf[1 << 14];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t dl = strlen(dict), hlen = buf[8] | (size_t)buf[9] << 8, data = 10 + hlen;
    CHECK(len >= 10 && memcmp(buf, "\x93NUMPY\x01\x00", 8) == 0, "%s magic", name);
    CHECK(data % 64 == 0, "%s data offset %zu", name, data);
    CHECK(memcmp(buf + 10, dict, dl) == 0, "%s dict: %.*s", name, (int)dl, buf + 10);
    for (size_t i = 10 + dl; i + 1 < data; i++)
        CHECK(buf[i] == ' ', "%s padding byte %zu", name, i);
    CHECK(buf[data - 1] == '\n', "%s header end", name);
    int64_t zero[3] = { 0, 0, 0 }, n = 1;
    for (int d = 0; d < rank; d++)
        n *= g[d];
    CHECK(len == data + (size_t)n * dt_size(dt), "%s size %zu", name, len);
    void *want = make_block(dt, rank, g, zero, g);
    CHECK(memcmp(buf + data, want, (size_t)n * dt_size(dt)) == 0, "%s data", name);
    free(want);
}

/* Loads block [off, off+shape) and compares with the expected values. */
static void check_load(const char *name, shd_dtype dt, int rank, const int64_t *g,
                       const int64_t *off, const int64_t *shape, const char *how)
{
    char path[512];
    path_of(path, name);
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    void *got = malloc((size_t)n * dt_size(dt) + 1), *want = make_block(dt, rank, g, off, shape);
    shd_load_npy(path, got, dt, rank, g, off, shape);
    CHECK(memcmp(got, want, (size_t)n * dt_size(dt)) == 0, "load %s (%s)", name, how);
    free(got);
    free(want);
}

static void save(const char *name, shd_dtype dt, int rank, const int64_t *g,
                 const int64_t *off, const int64_t *shape, bool writer)
{
    char path[512];
    path_of(path, name);
    void *blk = make_block(dt, rank, g, off, shape);
    shd_save_npy(path, blk, dt, rank, g, off, shape, writer);
    free(blk);
}

static void test_2d(void)
{
    int P = shd_world_size(), r = shd_world_rank();
    int64_t g[2] = { 8, 16 }, zero[2] = { 0, 0 };
    int64_t rows_off[2] = { r * (8 / P), 0 }, rows[2] = { 8 / P, 16 };
    int64_t cols_off[2] = { 0, r * (16 / P) }, cols[2] = { 8, 16 / P };
    save("rows.npy", SHD_F32, 2, g, rows_off, rows, true);
    check_file("rows.npy", SHD_F32, 2, g,
               "{'descr': '<f4', 'fortran_order': False, 'shape': (8, 16), }");
    check_load("rows.npy", SHD_F32, 2, g, cols_off, cols, "by columns");
    check_load("rows.npy", SHD_F32, 2, g, zero, g, "whole");
    save("cols.npy", SHD_I32, 2, g, cols_off, cols, true);
    check_file("cols.npy", SHD_I32, 2, g,
               "{'descr': '<i4', 'fortran_order': False, 'shape': (8, 16), }");
    check_load("cols.npy", SHD_I32, 2, g, rows_off, rows, "by rows");
    int64_t g53[2] = { 5, 3 };
    save("repl.npy", SHD_F64, 2, g53, zero, g53, r == 0);
    check_file("repl.npy", SHD_F64, 2, g53,
               "{'descr': '<f8', 'fortran_order': False, 'shape': (5, 3), }");
    check_load("repl.npy", SHD_F64, 2, g53, zero, g53, "replicated");
    int64_t g04[2] = { 0, 4 };
    save("empty.npy", SHD_F32, 2, g04, zero, g04, true);
    check_file("empty.npy", SHD_F32, 2, g04,
               "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }");
    check_load("empty.npy", SHD_F32, 2, g04, zero, g04, "empty");
}

static void test_other_ranks(void)
{
    int P = shd_world_size(), r = shd_world_rank();
    int64_t g1[1] = { 16 }, off1[1] = { r * (16 / P) }, s1[1] = { 16 / P }, z[3] = { 0, 0, 0 };
    save("flags.npy", SHD_BOOL, 1, g1, off1, s1, true);
    check_file("flags.npy", SHD_BOOL, 1, g1,
               "{'descr': '|b1', 'fortran_order': False, 'shape': (16,), }");
    check_load("flags.npy", SHD_BOOL, 1, g1, z, g1, "whole");
    save("scalar.npy", SHD_F64, 0, NULL, NULL, NULL, r == 0);
    check_file("scalar.npy", SHD_F64, 0, NULL,
               "{'descr': '<f8', 'fortran_order': False, 'shape': (), }");
    check_load("scalar.npy", SHD_F64, 0, NULL, NULL, NULL, "0-d");
    /* [4, 6, 8]: dim 0 split over mesh axis x, dim 2 over axis y. */
    int X = P % 2 == 0 ? 2 : 1, Y = P / X;
    int x = shd_axis_index(0), y = shd_axis_index(1);
    int64_t g3[3] = { 4, 6, 8 }, s3[3] = { 4 / X, 6, 8 / Y }, o3[3] = { x * (4 / X), 0, y * (8 / Y) };
    save("cube.npy", SHD_F32, 3, g3, o3, s3, true);
    check_file("cube.npy", SHD_F32, 3, g3,
               "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6, 8), }");
    int64_t s3b[3] = { 4, 6 / (P <= 2 ? P : 2), 8 }, o3b[3] = { 0, (r % 2) * s3b[1], 0 };
    if (P == 1)
        o3b[1] = 0;
    check_load("cube.npy", SHD_F32, 3, g3, o3b, s3b, "split along dim 1");
}

/* A version 2.0 file as another writer might produce it. */
static void test_v2(void)
{
    int64_t g[2] = { 3, 4 }, z[2] = { 0, 0 };
    if (shd_world_rank() == 0) {
        char path[512];
        path_of(path, "v2.npy");
        const char *dict = "{'shape': (3, 4), 'fortran_order': False, 'descr': '<i4'}";
        size_t hlen = 128 - 12;
        unsigned char head[128];
        memcpy(head, "\x93NUMPY\x02\x00", 8);
        head[8] = (unsigned char)hlen;
        head[9] = head[10] = head[11] = 0;
        memset(head + 12, ' ', hlen);
        memcpy(head + 12, dict, strlen(dict));
        head[127] = '\n';
        void *data = make_block(SHD_I32, 2, g, z, g);
        FILE *f = fopen(path, "wb");
        fwrite(head, 1, sizeof head, f);
        fwrite(data, 4, 12, f);
        fclose(f);
        free(data);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_load("v2.npy", SHD_I32, 2, g, z, g, "version 2.0");
}

/* Only the saved files remain: no PATH.tmp.* left behind. */
static void check_and_clean_dir(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (shd_world_rank() == 0) {
        DIR *d = opendir(g_dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            CHECK(strstr(e->d_name, ".tmp.") == NULL, "left behind: %s", e->d_name);
            char path[512];
            path_of(path, e->d_name);
            unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(g_dir);
    }
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    if (shd_world_rank() == 0) {
        snprintf(g_dir, sizeof g_dir, "/tmp/shd_test_npy.XXXXXX");
        if (!mkdtemp(g_dir))
            shd_fatal("mkdtemp failed");
    }
    MPI_Bcast(g_dir, sizeof g_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    test_2d();
    test_other_ranks();
    test_v2();
    check_and_clean_dir();
    return finish("test_npy");
}
