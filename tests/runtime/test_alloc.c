// RANKS: 1 2 4 8
/* test_alloc: the refcounted buffer cache.
 *
 * - alignment: every pointer is 64-byte aligned, sizes 0 included, and
 *   size-0 buffers are distinct;
 * - reuse: release then alloc of the same size returns the same pointer
 *   (last freed first), a different size does not, and a retained buffer is
 *   not reused until its last release;
 * - shd_zalloc zero-fills even a reused (dirty) block;
 * - accounting: live bytes follow alloc/release exactly (cached blocks do
 *   not count) and peak bytes record the maximum;
 * - under AddressSanitizer (make test-san), a cached block's data is
 *   poisoned until it is handed out again, so a use after the last release
 *   is reported instead of hidden by the cache.
 */
#include <stdint.h>

#include "check.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

static void test_alignment(void)
{
    void *p[6];
    static const size_t sizes[6] = { 0, 0, 1, 63, 64, 100000 };
    for (int i = 0; i < 6; i++) {
        p[i] = shd_alloc(sizes[i]);
        CHECK(p[i] && (uintptr_t)p[i] % 64 == 0, "alloc(%zu) alignment", sizes[i]);
    }
    CHECK(p[0] != p[1], "two size-0 buffers are distinct");
    memset(p[5], 0xab, sizes[5]);
    for (int i = 0; i < 6; i++)
        shd_release(p[i]);
    shd_release(NULL);
    shd_retain(NULL);
}

static void test_reuse(void)
{
    void *a = shd_alloc(4096), *b = shd_alloc(4096);
    shd_release(a);
    void *c = shd_alloc(4096);
    CHECK(c == a, "same size reuses the freed block");
    void *d = shd_alloc(4100);
    CHECK(d != a && d != b, "a different size gets a new block");
    shd_release(d);
    void *e = shd_alloc(4100);
    CHECK(e == d, "exact size class reused");

    shd_retain(b);   /* refcount 2 */
    shd_release(b);  /* 1: still live */
    void *f = shd_alloc(4096);
    CHECK(f != b, "a retained buffer is not reused");
    memset(b, 0x5a, 4096);   /* still ours to write */
    shd_release(b);  /* 0: cached */
    void *g = shd_zalloc(4096);
    CHECK(g == b, "released buffer reused by zalloc");
    int nonzero = 0;
    for (int i = 0; i < 4096; i++)
        nonzero += ((unsigned char *)g)[i] != 0;
    CHECK(nonzero == 0, "zalloc of a dirty block is zero (%d nonzero)", nonzero);
    shd_release(c);
    shd_release(e);
    shd_release(f);
    shd_release(g);
}

static void test_accounting(void)
{
    size_t live0 = shd_live_bytes(), peak0 = shd_peak_bytes();
    CHECK(live0 == 0, "nothing live at the start of accounting (%zu)", live0);
    void *a = shd_alloc(1000);
    CHECK(shd_live_bytes() == 1000, "live after alloc");
    void *b = shd_alloc(3000000);
    CHECK(shd_live_bytes() == 3001000, "live after second alloc");
    size_t peak = shd_peak_bytes();
    CHECK(peak >= 3001000 && peak >= peak0, "peak %zu", peak);
    shd_release(b);
    CHECK(shd_live_bytes() == 1000, "cached blocks are not live");
    CHECK(shd_peak_bytes() == peak, "peak stays");
    shd_retain(a);
    shd_release(a);
    CHECK(shd_live_bytes() == 1000, "still live while referenced");
    shd_release(a);
    CHECK(shd_live_bytes() == 0, "all released");
    void *c = shd_alloc(3000000);   /* from the cache: live again, peak same */
    CHECK(shd_live_bytes() == 3000000, "reused block counts as live");
    CHECK(shd_peak_bytes() == peak, "peak unchanged by reuse below it");
    void *d = shd_alloc(5000000);
    CHECK(shd_peak_bytes() == 8000000, "new peak %zu", shd_peak_bytes());
    shd_release(c);
    shd_release(d);
}

static void test_poison(void)
{
#if defined(__SANITIZE_ADDRESS__)
    char *a = shd_alloc(4096);
    CHECK(!__asan_region_is_poisoned(a, 4096), "a live block is not poisoned");
    shd_release(a);
    CHECK(__asan_address_is_poisoned(a) && __asan_address_is_poisoned(a + 4095), "a cached block is poisoned");
    char *b = shd_alloc(4096);
    CHECK(b == a && !__asan_region_is_poisoned(b, 4096), "a reused block is unpoisoned");
    shd_release(b);
#endif
}

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    test_alignment();
    test_reuse();
    test_accounting();
    test_poison();
    return finish("test_alloc");
}
