/* arena.c: the compiler's one allocation choke point.
 *
 * Every heap allocation of the compiler goes through mem_realloc or
 * mem_calloc below (arena chunks, the growable containers, the passes'
 * tables by value id), so out of memory is reported in one place, and
 * SHDC_FAIL_ALLOC=N, which makes the Nth of them and every later one fail,
 * reaches every one (tests/errors/test_out_of_memory.py). Allocations
 * inside the C library (realpath, getline, stdio buffers) are its own,
 * but for text built in memory: mem_open_stream and mem_close_stream
 * count open_memstream as an allocation and report its refusal here too.
 *
 * Every node, type and IR object lives until the process exits, so memory is
 * taken from large chunks and never freed one by one. Vec and Str are the two
 * growable containers; mem_grow grows any other array. PtrMap maps IR
 * objects to indices (functions to their summaries, for passes that must
 * stay linear in program size).
 */
#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include "shdc.h"
#include "../runtime/editdist.h"

#define CHUNK (1u << 20)

static char *chunk_cur, *chunk_end;

/* Out of memory is an internal error (2): no verdict on the program. */
static _Noreturn void out_of_memory(size_t n) {
  fprintf(stderr, "shdc: out of memory (allocating %zu bytes)\n", n);
  exit(2);
}

/* SHDC_FAIL_ALLOC=N: from the Nth allocation on (counting from 1), every
 * one fails as if the system had no memory left. Compiled into every
 * build, so the tests run it against the shdc they test; read once, at the
 * first allocation. */
static bool injected_failure(void) {
  static long fail_at = -1, count;
  if (fail_at < 0) {
    const char *v = getenv("SHDC_FAIL_ALLOC");
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    fail_at = v && *v && !*end && n > 0 ? n : 0;
  }
  return fail_at && ++count >= fail_at;
}

void *mem_realloc(void *p, size_t n) {
  void *q = injected_failure() ? NULL : realloc(p, n ? n : 1);
  if (!q)
    out_of_memory(n);
  return q;
}

void *mem_alloc(size_t n) { return mem_realloc(NULL, n); }

void *mem_calloc(size_t n, size_t size) {
  void *p = injected_failure() ? NULL : calloc(n ? n : 1, size ? size : 1);
  if (!p)
    out_of_memory(size && n > SIZE_MAX / size ? SIZE_MAX : n * size);
  return p;
}

char *mem_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(mem_alloc(n), s, n);
}

void *mem_resize(void *p, int old, int n, size_t elem) {
  if (n < 0 || (size_t)n > SIZE_MAX / elem)
    out_of_memory(SIZE_MAX);
  p = mem_realloc(p, (size_t)n * elem);
  if (n > old)
    memset((char *)p + (size_t)old * elem, 0, (size_t)(n - old) * elem);
  return p;
}

void *mem_grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap)
    return p;
  int n = *cap <= 0 ? 8 : *cap <= INT_MAX / 2 ? 2 * *cap : INT_MAX;
  if (n < need)
    n = need;
  p = mem_resize(p, *cap, n, elem);
  *cap = n;
  return p;
}

FILE *mem_open_stream(char **buf, size_t *len) {
  FILE *f = injected_failure() ? NULL : open_memstream(buf, len);
  if (!f)
    out_of_memory(BUFSIZ);   /* the C library's first buffer */
  return f;
}

void mem_close_stream(FILE *f) {
  long n = ftell(f);
  if (fclose(f) != 0)   /* the last flush grows the buffer */
    out_of_memory(n > 0 ? (size_t)n + 1 : 1);
}

void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > CHUNK / 4)
    return mem_calloc(1, n);
  if ((size_t)(chunk_end - chunk_cur) < n) {
    chunk_cur = mem_alloc(CHUNK);
    chunk_end = chunk_cur + CHUNK;
  }
  void *p = chunk_cur;
  chunk_cur += n;
  memset(p, 0, n);
  return p;
}

char *arena_strndup(const char *s, size_t n) {
  char *p = arena_alloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(const char *s) { return arena_strndup(s, strlen(s)); }

char *arena_vprintf(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  char *p = arena_alloc((size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  return p;
}

char *arena_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *p = arena_vprintf(fmt, ap);
  va_end(ap);
  return p;
}

void vec_push(Vec *v, void *x) {
  if (v->len == v->cap)
    v->data = mem_grow(v->data, &v->cap, v->len + 1, sizeof *v->data);
  v->data[v->len++] = x;
}

static void str_reserve(Str *s, size_t extra) {
  if (s->len + extra + 1 <= s->cap)
    return;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < s->len + extra + 1)
    cap *= 2;
  s->buf = mem_realloc(s->buf, cap);
  s->cap = cap;
}

void str_vprintf(Str *s, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  str_reserve(s, (size_t)n);
  vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
  s->len += (size_t)n;
}

void str_printf(Str *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  str_vprintf(s, fmt, ap);
  va_end(ap);
}

void str_putc(Str *s, char c) {
  str_reserve(s, 1);
  s->buf[s->len++] = c;
  s->buf[s->len] = 0;
}

/* Appends what fd gives until its end, keeping at most `limit` bytes in s
 * (the rest is read and dropped, so a writer is never left blocked on a
 * full pipe); a read error ends it like the end. */
void str_read_fd(Str *s, int fd, size_t limit) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    size_t keep = s->len >= limit ? 0 : (size_t)n < limit - s->len ? (size_t)n : limit - s->len;
    str_reserve(s, keep);
    memcpy(s->buf + s->len, buf, keep);
    s->len += keep;
    s->buf[s->len] = 0;
  }
}

const char *str_cstr(Str *s) {
  str_reserve(s, 0);
  s->buf[s->len] = 0;
  return s->buf;
}

/* The did-you-mean distance: runtime/editdist.c, shared with programs. */
int str_distance(const char *a, const char *b, int limit) { return shd_edit_distance(a, b, limit); }

/* ---- a pointer-keyed map (open addressing, linear probing) ---------------- */

static size_t ptr_hash(const void *k, size_t cap) {
  return (size_t)(((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

void ptrmap_put(PtrMap *m, const void *key, int val) {
  if (2 * (m->len + 1) > m->cap) {
    PtrMap big = {0};
    big.cap = m->cap ? 2 * m->cap : 64;
    big.keys = mem_calloc((size_t)big.cap, sizeof *big.keys);
    big.vals = mem_calloc((size_t)big.cap, sizeof *big.vals);
    for (int i = 0; i < m->cap; i++)
      if (m->keys[i])
        ptrmap_put(&big, m->keys[i], m->vals[i]);
    ptrmap_free(m);
    *m = big;
  }
  size_t i = ptr_hash(key, (size_t)m->cap);
  while (m->keys[i] && m->keys[i] != key)
    i = (i + 1) & (size_t)(m->cap - 1);
  m->len += !m->keys[i];
  m->keys[i] = key;
  m->vals[i] = val;
}

int ptrmap_get(const PtrMap *m, const void *key) {
  if (!m->cap)
    return -1;
  size_t i = ptr_hash(key, (size_t)m->cap);
  while (m->keys[i] && m->keys[i] != key)
    i = (i + 1) & (size_t)(m->cap - 1);
  return m->keys[i] ? m->vals[i] : -1;
}

void ptrmap_free(PtrMap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---- a string-keyed map ---------------------------------------------------- */

static size_t str_hash(const char *k, size_t cap) {
  uint64_t h = 1469598103934665603ull;
  for (; *k; k++)
    h = (h ^ (unsigned char)*k) * 1099511628211ull;
  return (size_t)h & (cap - 1);
}

void strmap_put(StrMap *m, const char *key, void *val) {
  if (2 * (m->len + 1) > m->cap) {
    StrMap big = {0};
    big.cap = m->cap ? 2 * m->cap : 64;
    big.keys = mem_calloc((size_t)big.cap, sizeof *big.keys);
    big.vals = mem_calloc((size_t)big.cap, sizeof *big.vals);
    for (int i = 0; i < m->cap; i++)
      if (m->keys[i])
        strmap_put(&big, m->keys[i], m->vals[i]);
    strmap_free(m);
    *m = big;
  }
  size_t i = str_hash(key, (size_t)m->cap);
  while (m->keys[i] && strcmp(m->keys[i], key))
    i = (i + 1) & (size_t)(m->cap - 1);
  m->len += !m->keys[i];
  m->keys[i] = key;
  m->vals[i] = val;
}

void *strmap_get(const StrMap *m, const char *key) {
  if (!m->cap)
    return NULL;
  size_t i = str_hash(key, (size_t)m->cap);
  while (m->keys[i] && strcmp(m->keys[i], key))
    i = (i + 1) & (size_t)(m->cap - 1);
  return m->keys[i] ? m->vals[i] : NULL;
}

void strmap_free(StrMap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}
