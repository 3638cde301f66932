/* arena.c: the compiler's one allocation choke point.
 *
 * Every node, type and IR object lives until the process exits, so memory is
 * taken from large chunks and never freed one by one. Vec and Str are the two
 * growable containers; they grow through realloc because their final size is
 * unknown and they are few. PtrMap maps IR objects to indices (functions to
 * their summaries, for passes that must stay linear in program size).
 */
#include "shdc.h"

#define CHUNK (1u << 20)

static char *chunk_cur, *chunk_end;

/* The compiler's own allocations: out of memory is an internal error (2). */
static _Noreturn void out_of_memory(void) {
  fprintf(stderr, "shdc: out of memory\n");
  exit(2);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p)
    out_of_memory();
  return p;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p)
    out_of_memory();
  return p;
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q)
    out_of_memory();
  return q;
}

void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > CHUNK / 4) {
    void *p = xmalloc(n);
    memset(p, 0, n);
    return p;
  }
  if ((size_t)(chunk_end - chunk_cur) < n) {
    chunk_cur = xmalloc(CHUNK);
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
  if (v->len == v->cap) {
    v->cap = v->cap ? v->cap * 2 : 8;
    v->data = xrealloc(v->data, sizeof(void *) * (size_t)v->cap);
  }
  v->data[v->len++] = x;
}

static void str_reserve(Str *s, size_t extra) {
  if (s->len + extra + 1 <= s->cap)
    return;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < s->len + extra + 1)
    cap *= 2;
  s->buf = xrealloc(s->buf, cap);
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

const char *str_cstr(Str *s) {
  str_reserve(s, 0);
  s->buf[s->len] = 0;
  return s->buf;
}

/* ---- a pointer-keyed map (open addressing, linear probing) ---------------- */

static size_t ptr_hash(const void *k, size_t cap) {
  return (size_t)(((uintptr_t)k >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

void ptrmap_put(PtrMap *m, const void *key, int val) {
  if (2 * (m->len + 1) > m->cap) {
    PtrMap big = {0};
    big.cap = m->cap ? 2 * m->cap : 64;
    big.keys = xcalloc((size_t)big.cap, sizeof *big.keys);
    big.vals = xcalloc((size_t)big.cap, sizeof *big.vals);
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
    big.keys = xcalloc((size_t)big.cap, sizeof *big.keys);
    big.vals = xcalloc((size_t)big.cap, sizeof *big.vals);
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
