/* alloc.c: the runtime's one allocation choke point, and refcounted,
 * 64-byte aligned array buffers with a size-exact cache.
 *
 * Every heap allocation of the runtime goes through shd_mem_try or
 * shd_mem_aligned_try below (the others are built on them), so out of
 * memory is reported in one place (shd_out_of_memory: the rank, the bytes,
 * what for, and every rank stops) and SHD_FAIL_ALLOC=N, which makes the
 * Nth allocation of a process and every later one fail, reaches every one
 * (tests/e2e/test_out_of_memory.py). Callers that can go on without the
 * memory (the timeline drops events) use the _try forms. Allocations
 * inside MPI, OpenBLAS and the C library (open_memstream) are their own.
 *
 * Every buffer is one block from posix_memalign: a 64-byte header, then the
 * data, so the data stays 64-byte aligned and the header is found by pointer
 * arithmetic. A block whose refcount drops to 0 goes onto the free list of
 * its exact byte size (a chained hash table keyed by size) and is handed out
 * again by the next request of that size: programs allocate the same shapes
 * every step, and reusing blocks avoids page faults and zeroing of fresh
 * memory (see platform-notes.md, "Memory"). Blocks leave the cache only at
 * shd_finalize, or all at once when the system allocator runs out.
 *
 * Invariants: live_bytes is the sum of the requested sizes of blocks with
 * refcount > 0 and never counts cached blocks; peak_bytes is its maximum.
 * A header's magic is HDR_LIVE exactly while the block is live.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

/* Under AddressSanitizer a cached block's data is poisoned until it is
 * handed out again, so that generated code reading or writing a buffer
 * after its last release is reported (the cache would otherwise hide it). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR_LIVE 0x5348444c49564521ull  /* "SHDLIVE!" */
#define HDR_FREE 0x5348444652454521ull  /* "SHDFREE!" */
#define ALIGN 64
#define NBUCKETS 256

typedef struct header {
    uint64_t magic;
    size_t bytes;
    int64_t refs;
    struct header *next_free;
} header;

_Static_assert(sizeof(header) <= ALIGN, "header must fit before the data");

/* One free list per distinct size. */
typedef struct size_class {
    size_t bytes;
    header *free;
    struct size_class *next;
} size_class;

static struct {
    size_class *buckets[NBUCKETS];
    size_t live, peak, cached;
} g_alloc;

/* ---- the choke point ------------------------------------------------------ */

/* SHD_FAIL_ALLOC=N: from the Nth allocation of this process on (counting
 * from 1), every one fails as if the system had no memory left. Compiled
 * into every build, so the tests run it against the runtime they test;
 * read once, at the first allocation. */
static bool injected_failure(void)
{
    static long fail_at = -1, count;
    if (fail_at < 0) {
        const char *v = getenv("SHD_FAIL_ALLOC");
        char *end;
        long n = v ? strtol(v, &end, 10) : 0;
        fail_at = v && *v && !*end && n > 0 ? n : 0;
    }
    return fail_at && ++count >= fail_at;
}

void *shd_mem_try(void *old, size_t bytes)
{
    return injected_failure() ? NULL : realloc(old, bytes ? bytes : 1);
}

void *shd_mem_aligned_try(size_t bytes)
{
    void *p = NULL;
    if (injected_failure() || posix_memalign(&p, ALIGN, bytes ? bytes : 1) != 0)
        return NULL;
    return p;
}

/* The one report: the rank (shd_fatal), the bytes, what they were for. */
__attribute__((noreturn)) static void out_of_memory_v(size_t bytes, const char *fmt, va_list ap)
{
    char what[SHD_MSG_LEN];
    vsnprintf(what, sizeof what, fmt, ap);
    shd_fatal("out of memory: cannot allocate %zu bytes (%s)", bytes, what);
}

void shd_out_of_memory(size_t bytes, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_of_memory_v(bytes, fmt, ap);
}

void *shd_mem(void *old, size_t bytes, const char *fmt, ...)
{
    void *p = shd_mem_try(old, bytes);
    if (!p) {
        va_list ap;
        va_start(ap, fmt);
        out_of_memory_v(bytes, fmt, ap);
    }
    return p;
}

void *shd_mem_zero(size_t n, size_t size, const char *fmt, ...)
{
    size_t bytes = size && n > SIZE_MAX / size ? SIZE_MAX : n * size;
    void *p = bytes == SIZE_MAX ? NULL : shd_mem_try(NULL, bytes);
    if (!p) {
        va_list ap;
        va_start(ap, fmt);
        out_of_memory_v(bytes, fmt, ap);
    }
    return memset(p, 0, bytes);
}

char *shd_mem_strdup(const char *s, const char *fmt, ...)
{
    size_t n = strlen(s) + 1;
    void *p = shd_mem_try(NULL, n);
    if (!p) {
        va_list ap;
        va_start(ap, fmt);
        out_of_memory_v(n, fmt, ap);
    }
    return memcpy(p, s, n);
}

void *shd_mem_grow_try(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : 16;
    while (n < need && n <= SIZE_MAX / 2)
        n *= 2;
    void *q = n < need || n > SIZE_MAX / elem ? NULL : shd_mem_try(p, n * elem);
    if (q)
        *cap = n;
    return q;
}

void *shd_mem_grow(void *p, size_t *cap, size_t need, size_t elem, const char *fmt, ...)
{
    if (need <= *cap)
        return p;
    void *q = shd_mem_grow_try(p, cap, need, elem);
    if (!q) {
        va_list ap;
        va_start(ap, fmt);
        out_of_memory_v(need <= SIZE_MAX / elem ? need * elem : SIZE_MAX, fmt, ap);
    }
    return q;
}

/* ---- array buffers --------------------------------------------------------- */

static header *hdr_of(void *p)
{
    return (header *)((char *)p - ALIGN);
}

static size_t bucket_of(size_t bytes)
{
    uint64_t h = (uint64_t)bytes * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 56) % NBUCKETS;
}

static size_class *find_class(size_t bytes, bool create)
{
    size_class **head = &g_alloc.buckets[bucket_of(bytes)];
    for (size_class *c = *head; c; c = c->next)
        if (c->bytes == bytes)
            return c;
    if (!create)
        return NULL;
    size_class *c = shd_mem_zero(1, sizeof *c, "the allocator's cache");
    c->bytes = bytes;
    c->next = *head;
    *head = c;
    return c;
}

/* Returns every cached block to the system; keeps the (empty) classes. */
static void drop_cache(void)
{
    for (size_t b = 0; b < NBUCKETS; b++)
        for (size_class *c = g_alloc.buckets[b]; c; c = c->next)
            while (c->free) {
                header *h = c->free;
                c->free = h->next_free;
                UNPOISON((char *)h + ALIGN, c->bytes);
                free(h);
            }
    g_alloc.cached = 0;
}

static header *fresh_block(size_t bytes)
{
    if (bytes > SIZE_MAX - 2 * ALIGN)
        shd_out_of_memory(bytes, "more than the address space");
    void *raw = shd_mem_aligned_try(ALIGN + bytes);
    if (!raw) {
        drop_cache();
        raw = shd_mem_aligned_try(ALIGN + bytes);
    }
    if (!raw)
        shd_out_of_memory(bytes, "%zu bytes live", g_alloc.live);
    return raw;
}

void *shd_alloc(size_t bytes)
{
    size_class *c = find_class(bytes, false);
    header *h;
    if (c && c->free) {
        h = c->free;
        c->free = h->next_free;
        g_alloc.cached -= bytes;
        UNPOISON((char *)h + ALIGN, bytes);
    } else {
        h = fresh_block(bytes);
    }
    h->magic = HDR_LIVE;
    h->bytes = bytes;
    h->refs = 1;
    h->next_free = NULL;
    g_alloc.live += bytes;
    if (g_alloc.live > g_alloc.peak)
        g_alloc.peak = g_alloc.live;
    shd_timeline_counter(g_alloc.live);
    return (char *)h + ALIGN;
}

void *shd_zalloc(size_t bytes)
{
    void *p = shd_alloc(bytes);
    memset(p, 0, bytes);
    return p;
}

static header *live_header(void *p, const char *what)
{
    header *h = hdr_of(p);
    if (h->magic == HDR_FREE)
        shd_fatal("%s of a buffer that was already freed (%p)", what, p);
    if (h->magic != HDR_LIVE)
        shd_fatal("%s of a pointer that shd_alloc did not return (%p)", what, p);
    return h;
}

void shd_retain(void *p)
{
    if (p)
        live_header(p, "shd_retain")->refs++;
}

bool shd_unique(const void *p)
{
    return p && live_header((void *)p, "shd_unique")->refs == 1;
}

void shd_release(void *p)
{
    if (!p)
        return;
    header *h = live_header(p, "shd_release");
    if (--h->refs > 0)
        return;
    size_class *c = find_class(h->bytes, true);
    h->magic = HDR_FREE;
    h->next_free = c->free;
    c->free = h;
    POISON((char *)h + ALIGN, h->bytes);
    g_alloc.live -= h->bytes;
    g_alloc.cached += h->bytes;
    shd_timeline_counter(g_alloc.live);
}

void shd_live_adjust(int64_t delta)
{
    g_alloc.live = (size_t)((int64_t)g_alloc.live + delta);
    if (g_alloc.live > g_alloc.peak)
        g_alloc.peak = g_alloc.live;
    shd_timeline_counter(g_alloc.live);
}

size_t shd_live_bytes(void) { return g_alloc.live; }
size_t shd_peak_bytes(void) { return g_alloc.peak; }

void shd_alloc_fini(void)
{
    drop_cache();
    for (size_t b = 0; b < NBUCKETS; b++) {
        while (g_alloc.buckets[b]) {
            size_class *c = g_alloc.buckets[b];
            g_alloc.buckets[b] = c->next;
            free(c);
        }
    }
}

void *shd_scratch_zalloc(size_t bytes)
{
    return shd_mem_zero(bytes ? bytes : 1, 1, "a column sum's scratch");
}

void shd_scratch_free(void *p) { free(p); }
