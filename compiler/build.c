/* build.c: `shdc build`'s last step: the emitted C to an executable.
 *
 * Input: the partitioned, scheduled and numbered module. Output: the
 * program at -o, linked in a private directory beside it and renamed over
 * it (files.c). The C is the program's translation units (emit_parts.c);
 * each is looked up in the build cache (cache.c) under its key, and those
 * that miss are compiled at once, SHDC_JOBS at a time (default: the cores
 * this process may use), the largest first; then all are linked.
 *
 * The key of a unit is SHA-256 over everything that determines its object:
 * its C; the compile command's words (the options, not the temporary
 * paths); the compiler's identity (the resolved path, size and time of
 * SHDC_CC or mpicc and of the compiler under it, their --version, Open
 * MPI's --showme, cc1's path, size and time; the environment variables
 * that steer them); the bytes of the shdrt.h the build includes and the
 * runtime ABI; shdc's version and git revision; with -march=native, the
 * CPU (model and flags). The headers are checked on each hit by the
 * entry's manifest (cache.c). When the compiler cannot be identified (it
 * cannot be run), nothing is looked up or stored.
 *
 * Invariants: the program is always produced by compiling or by objects
 * whose entries were verified; the cache never fails a build (cache.c);
 * when the C compiler fails on the generated code it compiles an empty
 * program with the same options to tell a broken toolchain (exit 2, the
 * cause named) from a bug in shdc (an internal error, the C kept).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

/* ---- the compiler's command line ---------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && !strcmp(s + n - k, suffix);
}

/* A word of SHDC_CFLAGS that names a file for the program (a source,
 * object or library: x.c, x.o, x.a, x.so, x.so.N) rather than an option or
 * an option's argument: the link step takes it, each translation unit's
 * `-c` does not (gcc refuses -o with -c and several inputs). */
static bool link_input(const char *tok, const char *prev) {
  static const char *const takes_arg[] = {"-o",      "-x",      "-include", "-imacros",  "-MF", "-MT",
                                          "-MQ",     "-I",      "-L",       "-D",        "-U",  "-isystem",
                                          "-iquote", "-idirafter", "-Xlinker", "-Xpreprocessor"};
  if (tok[0] == '-')
    return false;
  for (size_t i = 0; prev && i < sizeof takes_arg / sizeof *takes_arg; i++)
    if (!strcmp(prev, takes_arg[i]))
      return false;
  return ends_with(tok, ".c") || ends_with(tok, ".o") || ends_with(tok, ".a") || ends_with(tok, ".so") ||
         strstr(tok, ".so.");
}

/* What a build compiles with: the optimisation level and the choice of
 * instruction sets (--isa). */
typedef struct {
  const char *opt;
  Isa isa;
} CcOptions;

static const char *cc_name(void) { return getenv("SHDC_CC") && *getenv("SHDC_CC") ? getenv("SHDC_CC") : "mpicc"; }

/* The C compiler's command line: SHDC_CC (default mpicc), the options of
 * the build, SHDC_CFLAGS split at blanks (e.g. -Wall -Werror as the tests
 * use to keep the generated C warning-free; files it names are linked into
 * the program). With compile_only, `-c` of the one input to the object
 * `out` (deps: also its dependency file, -MD); otherwise the inputs (C
 * files or objects) linked to `out` with the runtime. */
static const char **cc_command(const RuntimePaths *rp, const char *const *inputs, int ninputs, const char *out,
                               const CcOptions *cc, bool compile_only, const char *deps) {
  int cap = 96 + ninputs;
  const char **argv = arena_alloc(sizeof(char *) * (size_t)cap);
  int argc = 0;
  /* No generated code reads errno or the floating-point exception flags,
   * so the loop vectoriser may evaluate both arms of a conditional (GELU's
   * tanh, where, relu): without -fno-trapping-math it leaves such loops
   * scalar. -fopenmp-simd honours the loop groups' `omp simd` pragmas (the
   * row sums' reductions vectorised; no OpenMP run time). */
  const char *fixed[] = {cc_name(), "-std=c11", cc->opt, "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd",
                         arena_printf("-I%s", rp->inc), "-o", out};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    argv[argc++] = fixed[i];
  /* --isa=native: this machine's instruction sets, one copy of each
   * function; baseline: one copy for the compiler's default target. */
  if (cc->isa == ISA_NATIVE)
    argv[argc++] = "-march=native";
  if (cc->isa != ISA_CLONES)
    argv[argc++] = "-DSHD_NO_CLONES";
  if (compile_only)
    argv[argc++] = "-c";
  if (deps) {
    const char *dep_words[] = {"-MD", "-MF", deps, "-MT", "x"};
    for (size_t i = 0; i < sizeof dep_words / sizeof *dep_words; i++)
      argv[argc++] = dep_words[i];
  }
  for (int i = 0; i < ninputs; i++)
    argv[argc++] = inputs[i];
  if (!compile_only) {
    argv[argc++] = rp->lib;
    argv[argc++] = "-lopenblas";
    argv[argc++] = "-lm";
  }
  int limit = cap - 2;
#ifdef SHDC_PROGRAM_CFLAGS
  /* A sanitizer build of shdc links programs against the sanitizer build of
   * the runtime, so it compiles them with the same flags. */
  char *san = arena_strdup(SHDC_PROGRAM_CFLAGS);
  for (char *tok = strtok(san, " \t"); tok && argc < limit - 40; tok = strtok(NULL, " \t"))
    if (!compile_only || !link_input(tok, NULL))   /* the coverage build's libgcov.a: the link's */
      argv[argc++] = tok;
#endif
  int before = argc;
  char *extra = getenv("SHDC_CFLAGS") ? arena_strdup(getenv("SHDC_CFLAGS")) : NULL;
  const char *prev = NULL;
  for (char *tok = extra ? strtok(extra, " \t\n") : NULL; tok; prev = tok, tok = strtok(NULL, " \t\n")) {
    if (compile_only && link_input(tok, prev))
      continue;
    if (argc == limit)
      diag_io_error("SHDC_CFLAGS has more words than the %d it may add", limit - before);
    argv[argc++] = tok;
  }
  argv[argc] = NULL;
  return argv;
}

static const char **cc_argv(const RuntimePaths *rp, const char *cfile, const char *out, const CcOptions *cc) {
  return cc_command(rp, &cfile, 1, out, cc, false, NULL);
}

/* ---- running the tools ---------------------------------------------------------------- */

/* A program started; exec's errno comes back through fd when it could
 * not be started at all, which is an I/O error that names it. */
typedef struct {
  pid_t pid;
  int fd;
  const char *name;
} Tool;

/* out_fd >= 0: the tool's stdout and stderr go there. */
static Tool start_tool(const char **argv, int out_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    diag_io_error("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0)
    diag_io_error("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    if (out_fd >= 0) {
      dup2(out_fd, 1);
      dup2(out_fd, 2);
    }
    execvp(argv[0], (char *const *)argv);
    int err = errno;
    ssize_t w = write(fds[1], &err, sizeof err);
    (void)w;
    _exit(127);
  }
  close(fds[1]);
  return (Tool){pid, fds[0], argv[0]};
}

/* The exit status of t, whose wait status is `status`. */
static int tool_status(Tool t, int status) {
  int err = 0;
  ssize_t n = read(t.fd, &err, sizeof err);
  close(t.fd);
  if (n == (ssize_t)sizeof err)
    diag_io_error("cannot run the C compiler '%s'%s: %s%s", t.name, getenv("SHDC_CC") ? " (SHDC_CC)" : "", strerror(err),
             getenv("SHDC_CC") ? "" : "; install Open MPI (apt-get install libopenmpi-dev) or set SHDC_CC");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int finish_tool(Tool t) {
  int status;
  while (waitpid(t.pid, &status, 0) < 0 && errno == EINTR)
    ;
  return tool_status(t, status);
}

static int run_tool(const char **argv, bool quiet) {
  int null = quiet ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
  Tool t = start_tool(argv, null);
  if (null >= 0)
    close(null);
  return finish_tool(t);
}

/* argv's exit status with its stdout and stderr (at most 64 KiB kept) in
 * *out, stdin empty; -1 when it cannot be started. For the compiler's
 * identity: never an error. */
static int capture(const char **argv, Str *out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0)
      dup2(null, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  str_read_fd(out, fds[0], 65536);
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* shdc's private directory under TMPDIR (files.c), made on first use:
 * the generated C, the objects and the toolchain probe live there. */
static const char *work_dir(void) {
  static const char *dir;
  if (!dir && !(dir = file_private_dir(NULL)))
    diag_io_error("cannot create a directory in %s: %s", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             strerror(errno));
  return dir;
}

/* A new file in the private directory, for writing. */
static int private_file(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    diag_io_error("cannot write %s: %s", path, strerror(errno));
  return fd;
}

/* The C compiler failed on the generated code. If it cannot build an
 * empty program either, the toolchain or its flags are at fault, not
 * shdc: that is exit 2 with the cause; otherwise it is a bug in shdc. */
static int cc_failed(const RuntimePaths *rp, const char *cfile, const CcOptions *cc) {
  const char *probe_c = file_private_path(work_dir(), "shdc-probe-empty.c");
  const char *probe_out = file_private_path(work_dir(), "shdc-probe-empty.out");
  int fd = open(probe_c, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write(fd, "int main(void) { return 0; }\n", 29) == 29;
  if (fd >= 0)
    close(fd);
  ok = ok && run_tool(cc_argv(rp, probe_c, probe_out, cc), true) == 0;
  unlink(probe_c);
  unlink(probe_out);
  if (!ok) {
    const char *flags = getenv("SHDC_CFLAGS");
    diag_io_error("the C compiler '%s' cannot build even an empty program with these options%s%s%s (its messages are "
             "above); check SHDC_CC, SHDC_CFLAGS and the Open MPI and OpenBLAS installation",
             cc_name(), flags ? " (SHDC_CFLAGS='" : "", flags ? flags : "", flags ? "')" : "");
  }
  file_forget(cfile);   /* kept for the report */
  file_forget(work_dir());
  diag_ice("the C compiler failed on the generated code, kept in %s", cfile);
}

static void find_runtime(RuntimePaths *rp) {
  if (!drv_find_runtime(rp))
    diag_io_error("cannot find the runtime (include/shdrt.h and libshdrt.a) in %s; reinstall shdc, or set SHDC_HOME to "
             "the directory that holds them", rp->searched);
}

/* The program is linked in a private directory beside -o (so the rename
 * stays in one file system and nothing planted at a name is written
 * through), then renamed over -o when that is absent or a regular file. */
static const char *private_prog(const char *out) {
  const char *dir = file_private_dir(out);
  if (!dir)
    diag_io_error("cannot write %s: %s", out, strerror(errno));
  return file_private_path(dir, "prog");
}

static void replace_output(const char *prog, const char *out) {
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    diag_io_error("cannot write %s: %s %s", out, out, bad);
  if (rename(prog, out) != 0)
    diag_io_error("cannot write %s: %s", out, strerror(errno));
}

/* How many C compilers a build runs at once: SHDC_JOBS, else the cores
 * this process may run on (at most 16). */
static int build_jobs(void) {
  const char *j = getenv("SHDC_JOBS");
  if (j && *j) {
    char *end;
    long n = strtol(j, &end, 10);
    if (*end || n < 1 || n > 16)
      diag_usage_error("SHDC_JOBS=%s: expected a number of compiler jobs from 1 to 16", j);
    return (int)n;
  }
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* ---- the key ------------------------------------------------------------------------------ */

/* name as execvp would find it, or NULL. */
static const char *find_program(const char *name) {
  if (!*name)
    return NULL;
  if (strchr(name, '/'))
    return access(name, X_OK) == 0 ? name : NULL;
  const char *path = getenv("PATH") && *getenv("PATH") ? getenv("PATH") : "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    const char *cand = n ? arena_printf("%.*s/%s", (int)n, p, name) : name;
    struct stat st;
    if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
      return cand;
    if (!colon)
      return NULL;
    p = colon + 1;
  }
}

/* "PATH -> REAL size S time T" of an executable (or a file). */
static void describe_file(Str *id, const char *what, const char *path) {
  char *real = path ? realpath(path, NULL) : NULL;
  struct stat st;
  if (real && stat(real, &st) == 0)
    str_printf(id, "%s %s -> %s size %lld time %lld.%09ld\n", what, path, real, (long long)st.st_size,
               (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  else
    str_printf(id, "%s %s: not found\n", what, path ? path : "?");
  free(real);
}

/* What identifies the C compiler, or false when it cannot be run (no
 * cache then: the compile itself says what is wrong). */
static bool compiler_identity(Str *id) {
  const char *cc = cc_name(), *path = find_program(cc);
  if (!path)
    return false;
  describe_file(id, "compiler", path);
  Str out = {0};
  int rc = capture((const char *[]){cc, "--version", NULL}, &out);
  if (rc < 0) {
    free(out.buf);
    return false;
  }
  str_printf(id, "--version %d: %s\n", rc, out.buf ? out.buf : "");
  /* Open MPI's wrapper names the compiler under it and its flags
   * (OMPI_CC, OMPI_CFLAGS...); other compilers refuse the option, alike
   * every time. */
  out.len = 0;
  rc = capture((const char *[]){cc, "--showme", NULL}, &out);
  str_printf(id, "--showme %d: %s\n", rc, out.len ? str_cstr(&out) : "");
  if (rc == 0 && out.len) {
    char *first = arena_strndup(out.buf, strcspn(out.buf, " \t\n"));
    describe_file(id, "under", find_program(first));
  }
  out.len = 0;
  rc = capture((const char *[]){cc, "-print-prog-name=cc1", NULL}, &out);
  if (rc == 0 && out.len && out.buf[0] == '/')
    describe_file(id, "cc1", arena_strndup(out.buf, strcspn(out.buf, "\n")));
  free(out.buf);
  /* What steers gcc and the MPI wrappers besides their command line. */
  static const char *const env[] = {"CPATH",   "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "OMPI_CC",
                                    "OMPI_CFLAGS", "OMPI_CPPFLAGS", "MPICH_CC",     "I_MPI_CC"};
  for (size_t i = 0; i < sizeof env / sizeof *env; i++)
    if (getenv(env[i]))
      str_printf(id, "%s=%s\n", env[i], getenv(env[i]));
  return true;
}

/* The CPU, for -march=native (which gcc resolves on each machine): the
 * first processor's model name and flags. */
static void cpu_identity(Sha256 *s) {
  const char *why;
  FILE *f = file_open_regular("/proc/cpuinfo", 0, &why, NULL);
  char line[8192];
  while (f && fgets(line, sizeof line, f) && line[0] != '\n')
    if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5) || !strncmp(line, "Features", 8) ||
        !strncmp(line, "CPU part", 8))
      sha256_str(s, line);
  if (f)
    fclose(f);
}

static bool has_word(const char *const *argv, const char *prefix) {
  for (; *argv; argv++)
    if (!strncmp(*argv, prefix, strlen(prefix)))
      return true;
  return false;
}

/* The part of every unit's key that the build shares: false when the
 * compiler cannot be identified. tmpl is the compile command with
 * placeholders for the paths. */
static bool key_base(Sha256 *s, const RuntimePaths *rp, const char *const *tmpl) {
  Str id = {0};
  if (!compiler_identity(&id)) {
    free(id.buf);
    return false;
  }
  sha256_init(s);
  sha256_str(s, "shdc build cache key 1");
  sha256_str(s, drv_version_full());
  sha256_str(s, arena_printf("runtime ABI %d", drv_abi_version()));
  sha256_str(s, str_cstr(&id));
  free(id.buf);
  const char *header = arena_printf("%s/shdrt.h", rp->inc), *why;
  long long size = 0;
  FILE *f = file_open_regular(header, 0, &why, &size);
  if (!f)
    return false;
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    sha256_update(s, buf, n);
  bool err = ferror(f);
  fclose(f);
  if (err)
    return false;
  sha256_str(s, arena_printf("shdrt.h %lld bytes", size));
  for (const char *const *w = tmpl; *w; w++)
    sha256_str(s, *w);
  if (has_word(tmpl, "-march=native") || has_word(tmpl, "-mtune=native") || has_word(tmpl, "-mcpu=native"))
    cpu_identity(s);
  return true;
}

/* ---- the units ------------------------------------------------------------------------------ */

typedef struct {
  const EmitUnit *u;
  char key[65];
  const char *cfile, *obj, *deps, *log;
  bool hit;
} Unit;

static int larger_first(const void *a, const void *b) {
  size_t x = (*(Unit *const *)a)->u->len, y = (*(Unit *const *)b)->u->len;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void write_text(const char *path, const char *text, size_t len) {
  int fd = private_file(path);
  bool ok = true;
  for (size_t done = 0; ok && done < len;) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    done += ok ? (size_t)w : 0;
  }
  if (close(fd) != 0 || !ok)
    diag_io_error("cannot write %s: %s", path, strerror(errno));
}

/* A compile's messages (its stdout and stderr, kept in u->log) to our
 * stderr, one unit's at a time; malloc'd in *text for the cache. */
static void show_log(const Unit *u, char **text, size_t *len) {
  const char *why;
  long long size = 0;
  *text = NULL;
  *len = 0;
  FILE *f = file_open_regular(u->log, 64 << 20, &why, &size);
  if (!f)
    return;
  *text = mem_alloc((size_t)size + 1);
  *len = fread(*text, 1, (size_t)size, f);
  fclose(f);
  if (*len)
    fwrite(*text, 1, *len, stderr);
}

/* Compiles the units that missed, `jobs` at a time, the largest first;
 * stores each object that compiled. The index of the first that failed,
 * or -1. */
static int compile_misses(Unit **miss, int n, int jobs, const RuntimePaths *rp, const CcOptions *cc,
                          BuildCache *cache) {
  qsort(miss, (size_t)n, sizeof *miss, larger_first);
  Tool *running = arena_alloc(sizeof(Tool) * (size_t)(jobs + 1));
  int *which = arena_alloc(sizeof(int) * (size_t)(jobs + 1));
  int started = 0, active = 0, bad = -1;
  while (active || (started < n && bad < 0)) {
    while (active < jobs && started < n && bad < 0) {
      Unit *u = miss[started];
      write_text(u->cfile, u->u->text, u->u->len);
      int log = private_file(u->log);
      running[active] = start_tool(cc_command(rp, &u->cfile, 1, u->obj, cc, true, cache ? u->deps : NULL), log);
      close(log);
      which[active++] = started++;
    }
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      diag_io_error("waiting for the C compiler: %s", strerror(errno));
    }
    int k = 0;
    while (k < active && running[k].pid != pid)
      k++;
    if (k == active)
      continue;   /* not a compiler of ours */
    Tool t = running[k];
    int idx = which[k];
    Unit *u = miss[idx];
    running[k] = running[active - 1];
    which[k] = which[active - 1];
    active--;
    int rc = tool_status(t, status);
    char *log;
    size_t nlog;
    show_log(u, &log, &nlog);
    if (rc != 0 && (bad < 0 || idx < bad))
      bad = idx;
    else if (rc == 0 && cache)
      cache_put(cache, u->key, u->obj, u->deps, u->cfile, log, nlog);
    free(log);
  }
  return bad;
}

static bool want_stats(void) {
  const char *s = getenv("SHDC_CACHE_STATS");
  return s && *s && strcmp(s, "0");
}

/* One line on stderr (SHDC_CACHE_STATS=1): what the build compiled. */
static void print_stats(const Unit *units, int n, const BuildCache *cache, const CacheStats *st) {
  int hits = 0;
  for (int i = 0; i < n; i++)
    hits += units[i].hit;
  fprintf(stderr, "shdc: build cache %s: %d units, %d from the cache, %d compiled",
          cache ? cache_root(cache) : cache_enabled() ? "unavailable" : "off", n, hits, n - hits);
  if (st->stored)
    fprintf(stderr, ", %d stored", st->stored);
  if (st->evicted)
    fprintf(stderr, ", %d evicted", st->evicted);
  if (st->corrupt)
    fprintf(stderr, ", %d corrupt entries replaced", st->corrupt);
  const char *sep = ": ";
  for (int i = 0; i < n; i++)
    if (!units[i].hit) {
      fprintf(stderr, "%s%s", sep, units[i].u->label);
      sep = "; ";
    }
  fputc('\n', stderr);
}

static int build_units(const Module *mod, const SourceFile *src, int64_t main_peak, const Options *o,
                       const CcOptions *cc) {
  RuntimePaths rp;
  find_runtime(&rp);
  const char *const *tmpl = cc_command(&rp, (const char *[]){"SOURCE.c"}, 1, "OBJECT.o", cc, true, NULL);
  /* Without clones (--isa=native or baseline, or -DSHD_NO_CLONES in the
   * flags), one unit per function group: no empty avx2 and avx512f ones. */
  bool clones = !has_word(tmpl, "-DSHD_NO_CLONES");
  EmitUnit *eu;
  int n = emit_module_units(mod, src, main_peak, clones, &eu);
  if (diag_error_count())   /* e.g. the peak memory check's sum overflowed */
    return 1;
  /* The cache first: the compiler's identity is probed only for a usable one. */
  BuildCache *cache = cache_enabled() ? cache_open(o->cache_limit) : NULL;
  Sha256 base;
  if (cache && !key_base(&base, &rp, tmpl)) {
    CacheStats unused;
    cache_close(cache, &unused);
    cache = NULL;
  }
  if (!cache)   /* the keys then only name the files */
    sha256_init(&base);
  Unit *units = arena_alloc(sizeof(Unit) * (size_t)n);
  Unit **miss = arena_alloc(sizeof(Unit *) * (size_t)n);
  const char **objs = arena_alloc(sizeof(char *) * (size_t)n);
  int nmiss = 0;
  for (int i = 0; i < n; i++) {
    Unit *u = &units[i];
    u->u = &eu[i];
    Sha256 s = base;
    sha256_update(&s, eu[i].text, eu[i].len);
    sha256_hex(&s, u->key);
    u->cfile = file_private_path(work_dir(), arena_printf("u%d.c", i));
    u->obj = objs[i] = file_private_path(work_dir(), arena_printf("u%d.o", i));
    u->deps = file_private_path(work_dir(), arena_printf("u%d.d", i));
    u->log = file_private_path(work_dir(), arena_printf("u%d.log", i));
    char *log = NULL;
    size_t nlog = 0;
    u->hit = cache && cache_get(cache, u->key, u->obj, &log, &nlog);
    if (log)
      fwrite(log, 1, nlog, stderr);   /* the warnings of the compile that made it */
    free(log);
    if (!u->hit)
      miss[nmiss++] = u;
  }
  int bad = compile_misses(miss, nmiss, build_jobs(), &rp, cc, cache);
  CacheStats st = {0};
  if (cache)
    cache_close(cache, &st);
  if (want_stats())
    print_stats(units, n, cache, &st);
  if (bad >= 0)
    return cc_failed(&rp, miss[bad]->cfile, cc);
  const char *prog = private_prog(o->out);
  if (run_tool(cc_command(&rp, objs, n, prog, cc, false, NULL), false) != 0) {
    if (units[n - 1].hit)   /* the entry point's C, for the report */
      write_text(units[n - 1].cfile, eu[n - 1].text, eu[n - 1].len);
    return cc_failed(&rp, units[n - 1].cfile, cc);
  }
  replace_output(prog, o->out);
  for (int i = 0; i < n; i++)
    free(eu[i].text);
  free(eu);
  return 0;
}

/* --keep-c: the one-file program (emit_module) at PROG.c, and that file
 * compiled as it is, without the cache: what is kept is what was built. */
static int build_one_file(const Module *mod, const SourceFile *src, int64_t main_peak, const Options *o,
                          const CcOptions *cc) {
  const char *cfile = arena_printf("%s.c", o->out);
  FileOut kept;
  FILE *f = file_out_open(&kept, cfile);
  if (!f)
    diag_io_error("cannot write %s: %s", cfile, kept.why);
  emit_module(f, mod, src, main_peak);
  const char *why = file_out_commit(&kept);
  if (why)
    diag_io_error("cannot write %s: %s", cfile, why);
  if (diag_error_count())   /* e.g. the peak memory check's sum overflowed */
    return 1;
  RuntimePaths rp;
  find_runtime(&rp);
  const char *prog = private_prog(o->out);
  if (run_tool(cc_argv(&rp, cfile, prog, cc), false) != 0)
    return cc_failed(&rp, cfile, cc);
  replace_output(prog, o->out);
  return 0;
}

int drv_build(const Module *mod, const SourceFile *src, int64_t main_peak, const Options *o) {
  CcOptions cc = {o->opt ? o->opt : "-O3", o->isa};
  if (o->keep_c)
    return build_one_file(mod, src, main_peak, o, &cc);
  return build_units(mod, src, main_peak, o, &cc);
}
