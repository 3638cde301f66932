/* install.c: what shdc knows about where it came from and where it lives.
 *
 * `shdc --version` prints the version, the git revision the binary was
 * built from and the runtime ABI its generated C is written for (all baked
 * in at build time by tools/gen-version into version.h). `shdc build` needs
 * the runtime (shdrt.h and libshdrt.a); drv_find_runtime looks for it
 * relative to the shdc executable itself (/proc/self/exe), in the two
 * layouts shdc is used from:
 *
 *   build tree:  DIR/shdc, DIR/include/shdrt.h, DIR/libshdrt.a
 *   installed:   PREFIX/bin/shdc, PREFIX/include/shdrt.h, PREFIX/lib/libshdrt.a
 *
 * so an installed or copied-with-its-runtime compiler works from any
 * directory with no environment variable. SHDC_HOME, when set, names such a
 * directory (either layout) and wins.
 */
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shdc.h"
#include "version.h"

void drv_print_version(FILE *out) {
  fprintf(out, "shdc %s (git %s)\nruntime ABI %d\n", SHDC_VERSION, SHDC_GIT_REVISION, SHDC_ABI_VERSION);
}

int drv_abi_version(void) { return SHDC_ABI_VERSION; }

const char *drv_version(void) { return SHDC_VERSION; }

const char *drv_version_full(void) { return "shdc " SHDC_VERSION " (git " SHDC_GIT_REVISION ")"; }

static bool exe_dir(char *out, size_t n) {
  ssize_t len = readlink("/proc/self/exe", out, n - 1);
  if (len <= 0)
    return false;
  out[len] = 0;
  char *slash = strrchr(out, '/');
  if (slash)
    *slash = 0;
  return true;
}

const char *drv_doc_path(void) {
  char dir[4096];
  if (!exe_dir(dir, sizeof dir))
    return NULL;
  /* installed; build/shdc in the source tree; build/san/shdc */
  static const char *rel[] = {"../share/man/man1/shdc.1", "../docs/cli.md", "../../docs/cli.md"};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    char *p = realpath(arena_printf("%s/%s", dir, rel[i]), NULL);
    if (p && access(p, R_OK) == 0) {
      const char *r = arena_strdup(p);
      free(p);
      return r;
    }
    free(p);
  }
  return NULL;
}

const char *drv_docs_dir(void) {
  char dir[4096];
  if (!exe_dir(dir, sizeof dir))
    return NULL;
  /* installed (make install: DOCDIR); build/shdc in the source tree; build/san/shdc */
  static const char *rel[] = {"../share/doc/shdc", "../docs", "../../docs"};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    char *p = realpath(arena_printf("%s/%s", dir, rel[i]), NULL);
    if (p && access(arena_printf("%s/errors.md", p), R_OK) == 0) {
      const char *r = arena_strdup(p);
      free(p);
      return r;
    }
    free(p);
  }
  return NULL;
}

/* The standard library's directory (it holds std/): SHDC_HOME's, or the
 * one beside this shdc: installed (PREFIX/bin/shdc: PREFIX/share/shdc/lib),
 * the source tree (build/shdc, build/san/shdc: lib/). */
const char *drv_library_dir(void) {
  char dir[4096];
  const char *home = getenv("SHDC_HOME");
  if (home && *home)
    snprintf(dir, sizeof dir, "%s", home);
  else if (!exe_dir(dir, sizeof dir))
    return NULL;
  static const char *rel[] = {"../share/shdc/lib", "share/shdc/lib", "../lib", "../../lib"};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
    char *p = realpath(arena_printf("%s/%s", dir, rel[i]), NULL);
    struct stat st;
    if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
      const char *r = arena_strdup(p);
      free(p);
      return r;
    }
    free(p);
  }
  return NULL;
}

static bool readable(const char *dir, const char *rel) {
  char path[4352];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  return access(path, R_OK) == 0;
}

/* dir holds the runtime in the build-tree or the installed layout: fills
 * inc (the -I directory) and lib (the archive). */
static bool runtime_in(const char *dir, RuntimePaths *rp) {
  if (readable(dir, "libshdrt.a") && readable(dir, "include/shdrt.h")) {
    snprintf(rp->inc, sizeof rp->inc, "%s/include", dir);
    snprintf(rp->lib, sizeof rp->lib, "%s/libshdrt.a", dir);
    return true;
  }
  if (readable(dir, "lib/libshdrt.a") && readable(dir, "include/shdrt.h")) {
    snprintf(rp->inc, sizeof rp->inc, "%s/include", dir);
    snprintf(rp->lib, sizeof rp->lib, "%s/lib/libshdrt.a", dir);
    return true;
  }
  return false;
}

bool drv_find_runtime(RuntimePaths *rp) {
  memset(rp, 0, sizeof *rp);
  const char *home = getenv("SHDC_HOME");
  if (home && *home) {
    snprintf(rp->searched, sizeof rp->searched, "%s (SHDC_HOME)", home);
    return runtime_in(home, rp);
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(rp->searched, sizeof rp->searched, "(the shdc executable's location is unknown: set SHDC_HOME)");
    return false;
  }
  exe[n] = 0;
  char *dir = dirname(exe);   /* DIR of DIR/shdc */
  char parent[4200];
  snprintf(parent, sizeof parent, "%s/..", dir);
  snprintf(rp->searched, sizeof rp->searched, "%s and %s", dir, parent);
  return runtime_in(dir, rp) || runtime_in(parent, rp);
}
