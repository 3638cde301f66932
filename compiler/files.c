/* files.c: every file shdc reads or writes, through one set of rules.
 *
 * Reading (a program, a --network file, a trace for trace-summary): only a
 * regular file is read. The open is non-blocking and the type is checked
 * on the open descriptor (fstat), so a FIFO, a device such as /dev/zero, a
 * socket or a directory is refused at once, never waited on or read
 * forever.
 *
 * Writing (check -o, build --keep-c): a file is written under a private
 * random name beside its target, created with O_EXCL|O_NOFOLLOW, and
 * renamed over the target only when the target is absent or a regular file
 * (runtime/safefile.c, shared with the runtime). build links the program in
 * a private directory (mkdtemp, mode 0700) beside -o and renames it from
 * there; the generated C and the toolchain probe live in a private
 * directory under TMPDIR. Nothing is ever opened through a name someone
 * else could have planted.
 *
 * Invariant: the private directories and the files made in them are
 * registered here and removed at exit and on SIGINT, SIGTERM and SIGHUP
 * (unlink and rmdir only, from the handler), unless kept (an internal
 * error keeps the C for the report).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdc.h"

/* ---- reading -------------------------------------------------------------------------------- */

static const char *kind_of(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
         : S_ISSOCK(m) ? "a socket" : "a special file";
}

FILE *file_open_regular(const char *path, long long max, const char **why, long long *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    *why = strerror(errno);
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  if (size)
    *size = st.st_size;
  if (!S_ISREG(st.st_mode) || (max > 0 && st.st_size > max)) {
    *why = !S_ISREG(st.st_mode) ? arena_printf("not a regular file (%s)", kind_of(st.st_mode))
                                : arena_printf("it has %lld bytes, more than the %lld bytes allowed",
                                               (long long)st.st_size, (long long)max);
    close(fd);
    return NULL;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0)
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "r");
  if (!f) {
    *why = strerror(errno);
    close(fd);
    return NULL;
  }
  return f;
}

/* ---- what to remove at exit ------------------------------------------------------------------ */

/* The registry grows (a build registers four files per translation unit
 * it compiles); a signal handler may read it at any moment, so a slot is
 * filled before the count takes it in, and a grown array is published
 * whole and the old one never freed. */
typedef struct {
  char *path;   /* "" once forgotten */
  bool dir;
} Made;

static struct {
  Made *volatile slots;
  volatile sig_atomic_t n;
  int cap;
  bool hooked;
} g_made;

static void remove_made(void) {
  Made *slots = g_made.slots;
  for (int i = g_made.n - 1; i >= 0; i--)
    if (slots[i].path[0])
      slots[i].dir ? rmdir(slots[i].path) : unlink(slots[i].path);
  g_made.n = 0;
}

static void on_signal(int sig) {
  remove_made();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Room for one more path of at most len bytes, taken before the file is
 * made: once it exists, registering it (made) cannot fail, so out of
 * memory never leaves behind a file it made. */
static char *made_reserve(size_t len) {
  if (!g_made.hooked) {
    g_made.hooked = true;
    atexit(remove_made);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
      struct sigaction old;
      if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
        continue;
      signal(sigs[i], on_signal);
    }
  }
  if (g_made.n == g_made.cap) {
    int cap = g_made.cap ? 2 * g_made.cap : 64;
    Made *grown = mem_alloc(sizeof(Made) * (size_t)cap);
    if (g_made.n)
      memcpy(grown, g_made.slots, sizeof(Made) * (size_t)g_made.n);
    g_made.slots = grown;   /* the old array stays readable: a handler may hold it */
    g_made.cap = cap;
  }
  return mem_alloc(len + 1);
}

/* Registers path in the room made_reserve took (room: at least its length). */
static void made(char *room, const char *path, bool dir) {
  int i = g_made.n;
  g_made.slots[i] = (Made){strcpy(room, path), dir};
  g_made.n = i + 1;
}

void file_forget(const char *path) {
  for (int i = 0; i < g_made.n; i++)
    if (!strcmp(g_made.slots[i].path, path))
      g_made.slots[i].path[0] = 0;
}

/* ---- private directories --------------------------------------------------------------------- */

const char *file_private_dir(const char *beside) {
  char *tmpl;
  if (beside) {
    const char *slash = strrchr(beside, '/');
    tmpl = arena_printf("%.*s.shdc-build-XXXXXX", slash ? (int)(slash - beside) + 1 : 0, beside);
  } else {
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    tmpl = arena_printf("%s/shdc-XXXXXX", tmp);
  }
  char *room = made_reserve(strlen(tmpl));   /* mkdtemp keeps the length */
  if (!mkdtemp(tmpl)) {
    free(room);
    return NULL;
  }
  made(room, tmpl, true);
  return tmpl;
}

const char *file_private_path(const char *dir, const char *name) {
  const char *p = arena_printf("%s/%s", dir, name);
  made(made_reserve(strlen(p)), p, false);   /* before the file exists */
  return p;
}

/* ---- writing through a temporary ------------------------------------------------------------- */

FILE *file_out_open(FileOut *o, const char *path) {
  memset(o, 0, sizeof *o);
  o->target = path;
  const char *bad = shd_file_unreplaceable(path);
  if (bad) {
    o->why = arena_printf("%s %s", path, bad);
    errno = EEXIST;
    return NULL;
  }
  char *room = made_reserve(sizeof o->tmp.path);
  int fd = shd_temp_create(&o->tmp, path, "shdc-out");
  if (fd < 0) {
    o->why = arena_printf("cannot create a file beside %s: %s", path, strerror(errno));
    free(room);
    return NULL;
  }
  made(room, o->tmp.path, false);
  o->f = fdopen(fd, "w");
  if (!o->f) {
    o->why = arena_printf("cannot write %s: %s", path, strerror(errno));
    close(fd);
  }
  return o->f;
}

const char *file_out_commit(FileOut *o) {
  bool ok = fflush(o->f) == 0 && !ferror(o->f);
  int err = errno;
  ok = fclose(o->f) == 0 && ok;
  o->f = NULL;
  const char *why = NULL;
  if (!ok)
    why = arena_printf("cannot write %s: %s", o->target, strerror(err ? err : errno));
  else if (shd_temp_commit(&o->tmp, o->target, &why) != 0)
    why = arena_printf("%s %s", o->target, why);
  if (why)
    unlink(o->tmp.path);
  file_forget(o->tmp.path);
  return why;
}
