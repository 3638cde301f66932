/* cache.c: the build cache: compiled translation units kept on disk under
 * a key, so that `shdc build` of a program it has built before, or after
 * an edit of one function, compiles only the units that changed.
 *
 * Input: a key (SHA-256, in hex, of everything that determines the object:
 * the unit's C, the compiler's identity and options, shdrt.h, shdc's
 * version; the driver computes it) and, after a compile, the object, the
 * compiler's messages and its dependency file (-MD: the headers it read).
 * Output: on a later lookup of the key, the same object and messages.
 *
 * Where: $SHDC_CACHE, else $XDG_CACHE_HOME/shdc, else ~/.cache/shdc
 * (SHDC_CACHE=off: no cache). Inside, v1/XX/KEY, XX the key's first two
 * digits. An entry is one file:
 *
 *   shdc-cache 1 SHA256-OF-THE-REST\n
 *   key KEY\n  object N\n  messages M\n  headers H\n
 *   H lines: SIZE MTIME_S MTIME_NS LENGTH PATH\n
 *   M bytes of messages, then N bytes of object
 *
 * Invariants:
 * - a reader never sees a partial entry: an entry is written under a
 *   private random name in its directory (O_EXCL|O_NOFOLLOW) and renamed
 *   over KEY complete; two builds storing one key at once each rename a
 *   whole entry, and either one is the same object;
 * - nothing is used unchecked: an entry whose checksum, key or length is
 *   wrong (a truncated file, a flipped byte) is removed and compiled again;
 *   one whose headers (system headers too: mpi.h, cblas.h after a package
 *   upgrade) no longer have the size and time they had is compiled again;
 *   a header changed while the build ran is never recorded;
 * - the cache never decides whether a build succeeds: a directory that
 *   cannot be made or written is one warning on stderr and the build goes
 *   on without it (or without storing);
 * - nothing is written through a link: the directories inside the cache
 *   are opened with O_NOFOLLOW and everything else is relative to them
 *   (openat, renameat), so a planted symbolic link is refused, never
 *   followed (the cache's own directory may be a link: the user's choice);
 * - bounded: after a build that stored something, the oldest entries (by
 *   modification time, which a hit renews: least recently used) are
 *   removed until the cache holds at most SHDC_CACHE_SIZE bytes (default
 *   1 GiB); temporaries left by a killed build are removed after an hour.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shdc.h"

#define ENTRY_MAGIC "shdc-cache 1 "
#define MAX_ENTRY ((long long)1 << 30)   /* an entry bigger than this is not read */
#define STALE_TEMP_SECONDS 3600

struct BuildCache {
  const char *root;       /* as the user named it, for messages */
  int v1;                 /* the directory fd of ROOT/v1 */
  int sub[256];           /* of ROOT/v1/XX, opened on first use; -1 */
  int64_t limit;
  time_t start;           /* a header changed after this is not recorded */
  bool no_store;          /* a store failed: the rest of the build does not try */
  StrMap headers;         /* path -> HeaderStat *, stat'ed once per build */
  CacheStats stats;
};

typedef struct {
  bool ok;
  long long size, sec, nsec, csec;
} HeaderStat;

static bool warned;

__attribute__((format(printf, 1, 2))) static void warn_once(const char *fmt, ...) {
  if (warned)
    return;
  warned = true;
  va_list ap;
  va_start(ap, fmt);
  fputs("shdc: warning: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- the directories ---------------------------------------------------------------------- */

/* Makes the missing directories of path (mode 0700: a fresh cache is
 * private), following the links of those that exist: where the cache
 * lives is the user's choice. */
static bool make_dirs(const char *path) {
  char *p = arena_strdup(path);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s)
      continue;
    char c = *s;
    *s = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return false;
    *s = c;
    if (!c)
      return true;
  }
}

/* dir/name as a directory, made when absent (mode 0777 less the umask: a
 * shared cache is shared as its owner set it up); never through a link. */
static int open_subdir(int dir, const char *name, bool create) {
  if (create && mkdirat(dir, name, 0777) != 0 && errno != EEXIST)
    return -1;
  return openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static const char *default_root(void) {
  const char *dir = getenv("SHDC_CACHE");
  if (dir && *dir)
    return dir;
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/')   /* the XDG spec: a relative path is ignored */
    return arena_printf("%s/shdc", xdg);
  const char *home = getenv("HOME");
  return home && *home ? arena_printf("%s/.cache/shdc", home) : NULL;
}

bool cache_enabled(void) {
  const char *dir = getenv("SHDC_CACHE");
  return !dir || strcmp(dir, "off");
}

BuildCache *cache_open(int64_t limit) {
  if (!cache_enabled())
    return NULL;
  const char *root = default_root();
  if (!root) {
    warn_once("no directory for the build cache (HOME is not set): building without it; set SHDC_CACHE=DIR, or "
              "SHDC_CACHE=off");
    return NULL;
  }
  int rootfd = -1, v1 = -1;
  if (make_dirs(root))
    rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd >= 0)
    v1 = open_subdir(rootfd, "v1", true);
  if (v1 < 0) {
    warn_once("cannot use the build cache %s: %s; building without it (SHDC_CACHE=DIR moves it, SHDC_CACHE=off "
              "turns it off)", root, strerror(errno));
    if (rootfd >= 0)
      close(rootfd);
    return NULL;
  }
  /* Backup tools skip a directory with this tag (bford.info/cachedir). */
  int tag = openat(rootfd, "CACHEDIR.TAG", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (tag >= 0) {
    static const char text[] = "Signature: 8a477f597d28d172789f06886806bc55\n"
                               "# This file marks the build cache of shdc (SHDC_CACHE=off turns it off).\n";
    ssize_t w = write(tag, text, sizeof text - 1);
    (void)w;
    close(tag);
  }
  close(rootfd);
  BuildCache *c = arena_alloc(sizeof *c);
  c->root = root;
  c->v1 = v1;
  for (int i = 0; i < 256; i++)
    c->sub[i] = -1;
  c->limit = limit;
  c->start = time(NULL);
  return c;
}

const char *cache_root(const BuildCache *c) { return c->root; }

static int hexval(char ch) {
  return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* The directory of key's entry (create: made when absent), or -1. */
static int key_dir(BuildCache *c, const char *key, bool create) {
  int hi = hexval(key[0]), lo = hexval(key[1]);
  if (hi < 0 || lo < 0)
    diag_ice("cache: bad key %s", key);
  int i = hi * 16 + lo;
  if (c->sub[i] < 0)
    c->sub[i] = open_subdir(c->v1, arena_printf("%c%c", key[0], key[1]), create);
  return c->sub[i];
}

/* ---- reading and writing whole files ------------------------------------------------------ */

static bool write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* The whole of fd (a regular file of at most max bytes), malloc'd; NULL
 * when it is not one or cannot be read. */
static unsigned char *read_fd(int fd, long long max, size_t *len) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > max)
    return NULL;
  size_t cap = (size_t)st.st_size, n = 0;
  unsigned char *buf = mem_alloc(cap + 1);
  while (n < cap) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  if (n != cap) {   /* shorter than fstat said: changed under us */
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

static unsigned char *read_path(const char *path, long long max, size_t *len) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  unsigned char *buf = read_fd(fd, max, len);
  close(fd);
  return buf;
}

/* ---- the headers an object was compiled with ---------------------------------------------- */

static const HeaderStat *header_stat(BuildCache *c, const char *path) {
  HeaderStat *h = strmap_get(&c->headers, path);
  if (h)
    return h;
  h = arena_alloc(sizeof *h);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
    h->ok = true;
    h->size = (long long)st.st_size;
    h->sec = (long long)st.st_mtim.tv_sec;
    h->nsec = (long long)st.st_mtim.tv_nsec;
    h->csec = (long long)st.st_ctim.tv_sec;
  }
  strmap_put(&c->headers, arena_strdup(path), h);
  return h;
}

/* The words of a dependency file written with -MT x: "x: SOURCE HEADER...",
 * backslash-newline continuing a line, "\ " a blank in a name, "$$" a $. */
static Vec dep_words(const char *text) {
  Vec words = {0};
  const char *p = strchr(text, ':');
  if (!p)
    return words;
  p++;
  Str w = {0};
  for (;; p++) {
    if (*p == '\\' && p[1] == '\n') {
      p++;
      continue;
    }
    if (*p == '\\' && (p[1] == ' ' || p[1] == '#' || p[1] == '\\')) {
      str_putc(&w, *++p);
      continue;
    }
    if (*p == '$' && p[1] == '$') {
      str_putc(&w, *++p);
      continue;
    }
    if (*p && *p != ' ' && *p != '\t' && *p != '\n') {
      str_putc(&w, *p);
      continue;
    }
    if (w.len) {
      vec_push(&words, arena_strdup(str_cstr(&w)));
      w.len = 0;
    }
    if (!*p || (*p == '\n' && p[1] != ' '))   /* -MD without -MP: one rule */
      break;
  }
  free(w.buf);
  return words;
}

/* ---- entries ----------------------------------------------------------------------------------- */

typedef struct {
  const char *key;
  long long object, messages, nheaders;
  const char *headers;     /* the header lines */
  const unsigned char *body_messages, *body_object;
} Entry;

/* A decimal number at *p (below 2^44: no overflow, and room for any
 * size or time), then the character `after`; false when it is not there. */
static bool number(const char **p, const char *end, char after, long long *value) {
  const char *q = *p;
  long long v = 0;
  if (q >= end || *q < '0' || *q > '9')
    return false;
  for (; q < end && *q >= '0' && *q <= '9'; q++) {
    if (v >= (long long)1 << 40)
      return false;
    v = v * 10 + (*q - '0');
  }
  if (q >= end || *q != after)
    return false;
  *value = v;
  *p = q + 1;
  return true;
}

/* "NAME VALUE\n" at *p. */
static bool field(const char **p, const char *end, const char *name, long long *value) {
  size_t n = strlen(name);
  if ((size_t)(end - *p) < n + 2 || memcmp(*p, name, n) || (*p)[n] != ' ')
    return false;
  const char *q = *p + n + 1;
  if (!number(&q, end, '\n', value))
    return false;
  *p = q;
  return true;
}

/* A header line at *p: "SIZE MTIME_S MTIME_NS LENGTH PATH\n", PATH
 * LENGTH bytes without a newline. */
typedef struct {
  long long size, sec, nsec, len;
  const char *path;
} HeaderLine;

static bool header_line(const char **p, const char *end, HeaderLine *h) {
  const char *q = *p;
  if (!number(&q, end, ' ', &h->size) || !number(&q, end, ' ', &h->sec) || !number(&q, end, ' ', &h->nsec) ||
      !number(&q, end, ' ', &h->len) || h->len < 1 || end - q <= h->len || q[h->len] != '\n' ||
      memchr(q, '\n', (size_t)h->len))
    return false;
  h->path = q;
  *p = q + h->len + 1;
  return true;
}

/* Checks an entry's text whole: its checksum, its key, each length. */
static bool parse_entry(const unsigned char *buf, size_t len, const char *key, Entry *e) {
  size_t magic = strlen(ENTRY_MAGIC);
  if (len < magic + 65 || memcmp(buf, ENTRY_MAGIC, magic) || buf[magic + 64] != '\n')
    return false;
  const char *rest = (const char *)buf + magic + 65, *end = (const char *)buf + len;
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, rest, (size_t)(end - rest));
  char hex[65];
  sha256_hex(&s, hex);
  if (memcmp(hex, buf + magic, 64))
    return false;
  const char *p = rest;
  if ((size_t)(end - p) < 69 || memcmp(p, "key ", 4) || memcmp(p + 4, key, 64) || p[68] != '\n')
    return false;
  p += 69;
  if (!field(&p, end, "object", &e->object) || !field(&p, end, "messages", &e->messages) ||
      !field(&p, end, "headers", &e->nheaders))
    return false;
  e->headers = p;
  HeaderLine h;
  for (long long i = 0; i < e->nheaders; i++)
    if (!header_line(&p, end, &h))
      return false;
  if ((long long)(end - p) != e->messages + e->object)
    return false;
  e->body_messages = (const unsigned char *)p;
  e->body_object = (const unsigned char *)p + e->messages;
  e->key = key;
  return true;
}

/* Whether every header of the entry has the size and time it had. */
static bool headers_unchanged(BuildCache *c, const Entry *e) {
  const char *p = e->headers, *end = (const char *)e->body_messages;
  HeaderLine l;
  for (long long i = 0; i < e->nheaders; i++) {
    if (!header_line(&p, end, &l))
      return false;
    const HeaderStat *h = header_stat(c, arena_strndup(l.path, (size_t)l.len));
    if (!h->ok || h->size != l.size || h->sec != l.sec || h->nsec != l.nsec)
      return false;
  }
  return true;
}

bool cache_get(BuildCache *c, const char *key, const char *obj, char **messages, size_t *nmessages) {
  *messages = NULL;
  *nmessages = 0;
  int dir = key_dir(c, key, false);
  if (dir < 0)
    return false;
  int fd = openat(dir, key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return false;
  size_t len = 0;
  unsigned char *buf = read_fd(fd, MAX_ENTRY, &len);
  Entry e;
  bool whole = buf && parse_entry(buf, len, key, &e);
  if (!whole) {
    /* corrupt or truncated: never used; removed so that the compile
     * stores a good one (if another build just renamed a good one here,
     * it is only compiled again) */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
      unlinkat(dir, key, 0);
    c->stats.corrupt++;
    close(fd);
    free(buf);
    return false;
  }
  bool ok = headers_unchanged(c, &e);
  if (ok) {
    int out = open(obj, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    ok = out >= 0 && write_all(out, e.body_object, (size_t)e.object);
    if (out >= 0 && close(out) != 0)
      ok = false;
    if (!ok && out >= 0)
      unlink(obj);
  }
  if (ok) {
    futimens(fd, NULL);   /* least recently used goes first; fails harmlessly on another user's entry */
    if (e.messages) {
      *messages = memcpy(mem_alloc((size_t)e.messages), e.body_messages, (size_t)e.messages);
      *nmessages = (size_t)e.messages;
    }
  }
  close(fd);
  free(buf);
  return ok;
}

/* The header lines of an entry, from the dependency file: false when a
 * header cannot be examined or changed after the build started (its
 * object may be of either version: not recorded). */
static bool header_lines(BuildCache *c, const char *deps, const char *source, Str *out, long long *count) {
  size_t len;
  char *text = (char *)read_path(deps, 64 << 20, &len);
  if (!text)
    return false;
  Vec words = dep_words(text);
  free(text);
  bool ok = words.len > 0;
  *count = 0;
  for (int i = 0; ok && i < words.len; i++) {
    const char *path = words.data[i];
    if (!strcmp(path, source))
      continue;
    const HeaderStat *h = header_stat(c, path);
    ok = !strchr(path, '\n') && h->ok && h->sec < (long long)c->start && h->csec < (long long)c->start;
    if (ok) {
      str_printf(out, "%lld %lld %lld %zu %s\n", h->size, h->sec, h->nsec, strlen(path), path);
      ++*count;
    }
  }
  free(words.data);
  return ok;
}

static void store_failed(BuildCache *c, const char *why) {
  c->no_store = true;
  warn_once("cannot store in the build cache %s: %s; the build goes on without storing (SHDC_CACHE=DIR moves the "
            "cache, SHDC_CACHE=off turns it off)", c->root, why);
}

void cache_put(BuildCache *c, const char *key, const char *obj, const char *deps, const char *source,
               const char *messages, size_t nmessages) {
  if (c->no_store)
    return;
  Str body = {0};
  long long nheaders = 0;
  Str lines = {0};
  if (!header_lines(c, deps, source, &lines, &nheaders)) {
    free(lines.buf);
    return;
  }
  size_t olen;
  unsigned char *object = read_path(obj, MAX_ENTRY / 2, &olen);
  if (!object) {
    free(lines.buf);
    return;
  }
  str_printf(&body, "key %s\nobject %zu\nmessages %zu\nheaders %lld\n%s", key, olen, nmessages, nheaders,
             lines.len ? str_cstr(&lines) : "");
  free(lines.buf);
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, body.buf, body.len);
  sha256_update(&s, messages, nmessages);
  sha256_update(&s, object, olen);
  char hex[65];
  sha256_hex(&s, hex);
  int dir = key_dir(c, key, true);
  if (dir < 0) {
    free(body.buf);
    free(object);
    store_failed(c, strerror(errno));
    return;
  }
  char tmp[96];
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
    if (!shd_temp_name(tmp, sizeof tmp, key, "new"))
      break;
    fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  bool ok = fd >= 0 && write_all(fd, ENTRY_MAGIC, strlen(ENTRY_MAGIC)) && write_all(fd, hex, 64) &&
            write_all(fd, "\n", 1) && write_all(fd, body.buf, body.len) && write_all(fd, messages, nmessages) &&
            write_all(fd, object, olen);
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && renameat(dir, tmp, dir, key) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    if (fd >= 0)
      unlinkat(dir, tmp, 0);
    store_failed(c, strerror(err));
  } else {
    c->stats.stored++;
  }
  free(body.buf);
  free(object);
}

/* ---- the bound ----------------------------------------------------------------------------------- */

typedef struct {
  long long sec, nsec, size;
  int dir;
  char name[80];
} Held;

static int older_first(const void *a, const void *b) {
  const Held *x = a, *y = b;
  if (x->sec != y->sec)
    return x->sec < y->sec ? -1 : 1;
  if (x->nsec != y->nsec)
    return x->nsec < y->nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Every entry (and temporary) of the cache; stale temporaries removed. */
static Held *list_entries(BuildCache *c, int *n, long long *total) {
  int cap = 0;
  Held *h = NULL;
  *n = 0;
  *total = 0;
  time_t now = time(NULL);
  for (int i = 0; i < 256; i++) {
    const char *xx = arena_printf("%02x", i);
    int dir = c->sub[i] >= 0 ? c->sub[i] : (c->sub[i] = open_subdir(c->v1, xx, false));
    int dup_fd = dir >= 0 ? dup(dir) : -1;
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
      if (dup_fd >= 0)
        close(dup_fd);
      continue;
    }
    rewinddir(d);
    for (struct dirent *de; (de = readdir(d));) {
      struct stat st;
      if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
        continue;
      if (strlen(de->d_name) >= sizeof h->name || fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode))
        continue;
      if (de->d_name[0] == '.' && now - st.st_mtim.tv_sec > STALE_TEMP_SECONDS) {
        unlinkat(dir, de->d_name, 0);   /* left by a build that was killed */
        continue;
      }
      h = mem_grow(h, &cap, *n + 1, sizeof *h);
      Held *e = &h[(*n)++];
      e->sec = (long long)st.st_mtim.tv_sec;
      e->nsec = (long long)st.st_mtim.tv_nsec;
      e->size = (long long)st.st_size;
      e->dir = i;
      snprintf(e->name, sizeof e->name, "%s", de->d_name);
      *total += e->size;
    }
    closedir(d);
  }
  return h;
}

void cache_close(BuildCache *c, CacheStats *stats) {
  if (c->stats.stored) {
    int n;
    long long total;
    Held *h = list_entries(c, &n, &total);
    if (h && total > c->limit) {
      qsort(h, (size_t)n, sizeof *h, older_first);
      for (int i = 0; i < n && total > c->limit; i++) {
        if (h[i].name[0] == '.')
          continue;   /* another build's entry being written */
        if (unlinkat(c->sub[h[i].dir], h[i].name, 0) == 0 || errno == ENOENT) {
          total -= h[i].size;
          c->stats.evicted++;
        }
      }
    }
    free(h);
  }
  for (int i = 0; i < 256; i++)
    if (c->sub[i] >= 0)
      close(c->sub[i]);
  close(c->v1);
  strmap_free(&c->headers);
  *stats = c->stats;
}
