/* driver.c: the shdc pipeline, as straight-line code:
 *
 *   parse -> typecheck -> lower (global IR) -> autodiff -> partition (SPMD IR)
 *         -> optimize -> emit C -> mpicc
 *
 * Each stage reports through diag.c; the driver stops between stages when
 * there were errors. Exit status (fixed): 0 clean, 1 errors in the program,
 * 2 usage, I/O or toolchain trouble (drv_io_error names the cause) and
 * internal errors (diag_ice). The driver checks what it can before any
 * work: inputs are regular files of at most 8 MiB, -o is writable and not
 * an input; when the C compiler fails it compiles an empty program with the
 * same options to tell a broken toolchain from a bug in the generated C.
 * The language server and explain-error run the front end through it too
 * (drv_analyze, drv_check_text). main.c reads the command line.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

__attribute__((noreturn, format(printf, 1, 2))) void drv_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_finish();
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(run shdc --help for usage)\n", stderr);
  va_end(ap);
  exit(2);
}

__attribute__((noreturn, format(printf, 1, 2))) void drv_io_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_finish();
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

/* An unreadable file is exit status 2; the other files are still checked. */
static SourceFile *cannot_read(const char *path, const char *why) {
  fprintf(stderr, "shdc: error: cannot read %s: %s\n", path, why);
  diagout_tool_error(arena_printf("cannot read %s: %s", path, why));
  return NULL;
}

/* A program is read only from a regular file of at most MAX_SOURCE bytes
 * (files.c): a FIFO would block, a device such as /dev/zero never end. */
#define MAX_SOURCE (8 << 20)

static SourceFile *read_source(const char *path) {
  const char *why;
  long long size = 0;
  FILE *f = file_open_regular(path, MAX_SOURCE, &why, &size);
  if (!f)
    return cannot_read(path, size > MAX_SOURCE
                                 ? arena_printf("it has %lld bytes; a program may have at most %d bytes (8 MiB)",
                                                size, MAX_SOURCE)
                                 : why);
  char *text = arena_alloc((size_t)size + 1);
  size_t len = fread(text, 1, (size_t)size, f);
  bool err = ferror(f);
  int e = errno;
  fclose(f);
  if (err)
    return cannot_read(path, strerror(e));
  text[len] = 0;
  SourceFile *sf = arena_alloc(sizeof *sf);
  sf->name = path;
  sf->len = len;
  sf->text = text;
  return sf;
}

static void check_mesh_names(const char *m, const Program *prog, const char *file) {
  if (!m || !prog->mesh)
    return;
  const char *p = m;
  while (*p) {
    const char *eq = strchr(p, '=');
    int len = (int)(eq - p);
    bool found = false;
    for (int a = 0; a < prog->mesh->naxes; a++)
      found |= prog->mesh->names[a].len == len && !strncmp(prog->mesh->names[a].start, p, (size_t)len);
    if (!found) {
      Str names = {0};
      for (int a = 0; a < prog->mesh->naxes; a++)
        str_printf(&names, "%s%.*s", a ? ", " : "", prog->mesh->names[a].len, prog->mesh->names[a].start);
      drv_usage_error("--mesh: %s has no mesh axis '%.*s' (its axes: %s)", file, len, p, str_cstr(&names));
    }
    const char *comma = strchr(eq, ',');
    p = comma ? comma + 1 : eq + strlen(eq);
  }
}

static void check_define_names(const Vec *defines, const Program *prog, const char *file) {
  for (int i = 0; i < defines->len; i++) {
    const char *d = defines->data[i];
    int len = (int)(strchr(d, '=') - d);
    bool found = false;
    for (int k = 0; k < prog->consts.len; k++) {
      const ConstDecl *cd = prog->consts.data[k];
      found |= cd->name.len == len && !strncmp(cd->name.start, d, (size_t)len);
    }
    if (!found) {
      Str names = {0};
      for (int k = 0; k < prog->consts.len; k++) {
        const ConstDecl *cd = prog->consts.data[k];
        str_printf(&names, "%s%.*s", k ? ", " : "", cd->name.len, cd->name.start);
      }
      drv_usage_error("-D: %s has no const '%.*s' (its consts: %s)", file, len, d,
                  names.len ? str_cstr(&names) : "none");
    }
  }
}

/* ---- the pipeline ------------------------------------------------------------- */

typedef struct {
  SourceFile *src;
  Program *prog;
  Mesh mesh;
  Module *mod;
} Compilation;

static bool front(Compilation *c, const char *path, const Options *o) {
  c->prog = parse_file(c->src);
  if (!diag_error_count())
    import_program(c->prog, &o->incdirs);
  diagout_program(c->prog);
  if (diag_error_count())
    return false;
  check_mesh_names(o->mesh, c->prog, path);
  check_define_names(&o->defines, c->prog, path);
  return tc_program(c->prog, &c->mesh, o->mesh, &o->defines);
}

static bool middle(Compilation *c, bool partition) {
  c->mod = lower_program(c->prog, &c->mesh);
  if (diag_error_count())
    return false;
  ir_verify(c->mod);
  if (!ad_module(c->mod))
    return false;
  ir_verify(c->mod);
  opt_global(c->mod);
  ir_verify(c->mod);
  if (!partition)
    return true;
  if (!part_module(c->mod))
    return false;
  ir_verify(c->mod);
  opt_module(c->mod);
  ir_verify(c->mod);
  sched_module(c->mod);
  ir_verify(c->mod);
  return true;
}

/* ---- build: emit C, then mpicc ----------------------------------------------------- */

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

/* The C compiler's command line: SHDC_CC (default mpicc), the options of
 * the build, SHDC_CFLAGS split at blanks (e.g. -march=native, or -Wall
 * -Werror as the tests use to keep the generated C warning-free; files it
 * names are linked into the program). With compile_only, `-c` of the one
 * input to the object `out`; otherwise the inputs (C files or objects)
 * linked to `out` with the runtime. */
static const char **cc_command(const RuntimePaths *rp, const char *const *inputs, int ninputs, const char *out,
                               const char *opt, bool compile_only) {
  const char *cc = getenv("SHDC_CC") && *getenv("SHDC_CC") ? getenv("SHDC_CC") : "mpicc";
  int cap = 80 + ninputs;
  const char **argv = arena_alloc(sizeof(char *) * (size_t)cap);
  int argc = 0;
  /* No generated code reads errno or the floating-point exception flags,
   * so the loop vectoriser may evaluate both arms of a conditional (GELU's
   * tanh, where, relu): without -fno-trapping-math it leaves such loops
   * scalar. -fopenmp-simd honours the loop groups' `omp simd` pragmas (the
   * row sums' reductions vectorised; no OpenMP run time). */
  const char *fixed[] = {cc, "-std=c11", opt, "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd",
                         arena_printf("-I%s", rp->inc), "-o", out};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    argv[argc++] = fixed[i];
  if (compile_only)
    argv[argc++] = "-c";
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
    argv[argc++] = tok;
#endif
  char *extra = getenv("SHDC_CFLAGS") ? arena_strdup(getenv("SHDC_CFLAGS")) : NULL;
  const char *prev = NULL;
  for (char *tok = extra ? strtok(extra, " \t\n") : NULL; tok; prev = tok, tok = strtok(NULL, " \t\n")) {
    if (compile_only && link_input(tok, prev))
      continue;
    if (argc == limit)
      drv_io_error("SHDC_CFLAGS has more words than the %d it may add", limit - (ninputs + 15));
    argv[argc++] = tok;
  }
  argv[argc] = NULL;
  return argv;
}

static const char **cc_argv(const RuntimePaths *rp, const char *cfile, const char *out, const char *opt) {
  return cc_command(rp, &cfile, 1, out, opt, false);
}

/* Runs argv; 0 when it succeeds. A program that cannot be started at all
 * (exec's errno comes back through a close-on-exec pipe) is an I/O error
 * that names it; `quiet` sends its output to /dev/null. */
typedef struct {
  pid_t pid;
  int fd;                /* exec's errno comes back through it */
  const char *name;
} Tool;

static Tool start_tool(const char **argv, bool quiet) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    drv_io_error("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0)
    drv_io_error("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    int null = quiet ? open("/dev/null", O_WRONLY) : -1;
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
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

static int finish_tool(Tool t) {
  int err = 0;
  ssize_t n = read(t.fd, &err, sizeof err);
  close(t.fd);
  int status;
  while (waitpid(t.pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (n == (ssize_t)sizeof err)
    drv_io_error("cannot run the C compiler '%s'%s: %s%s", t.name, getenv("SHDC_CC") ? " (SHDC_CC)" : "", strerror(err),
             getenv("SHDC_CC") ? "" : "; install Open MPI (apt-get install libopenmpi-dev) or set SHDC_CC");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_tool(const char **argv, bool quiet) { return finish_tool(start_tool(argv, quiet)); }

/* shdc's private directory under TMPDIR (files.c), made on first use:
 * the generated C and the toolchain probe live there. */
static const char *work_dir(void) {
  static const char *dir;
  if (!dir && !(dir = file_private_dir(NULL)))
    drv_io_error("cannot create a directory in %s: %s", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             strerror(errno));
  return dir;
}

/* The C compiler failed on the generated code. If it cannot build an
 * empty program either, the toolchain or its flags are at fault, not
 * shdc: that is exit 2 with the cause; otherwise it is a bug in shdc. */
static int cc_failed(const RuntimePaths *rp, const char *cfile, const char *opt) {
  const char *probe_c = file_private_path(work_dir(), "shdc-probe-empty.c");
  const char *probe_out = file_private_path(work_dir(), "shdc-probe-empty.out");
  int fd = open(probe_c, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write(fd, "int main(void) { return 0; }\n", 29) == 29;
  if (fd >= 0)
    close(fd);
  ok = ok && run_tool(cc_argv(rp, probe_c, probe_out, opt), true) == 0;
  unlink(probe_c);
  unlink(probe_out);
  if (!ok) {
    const char *flags = getenv("SHDC_CFLAGS");
    drv_io_error("the C compiler '%s' cannot build even an empty program with these options%s%s%s (its messages are "
             "above); check SHDC_CC, SHDC_CFLAGS and the Open MPI and OpenBLAS installation",
             cc_argv(rp, "", "", opt)[0], flags ? " (SHDC_CFLAGS='" : "", flags ? flags : "", flags ? "')" : "");
  }
  file_forget(cfile);   /* kept for the report */
  file_forget(work_dir());
  diag_ice("the C compiler failed on the generated code, kept in %s", cfile);
}

static void find_runtime(RuntimePaths *rp) {
  if (!drv_find_runtime(rp))
    drv_io_error("cannot find the runtime (include/shdrt.h and libshdrt.a) in %s; reinstall shdc, or set SHDC_HOME to "
             "the directory that holds them", rp->searched);
}

/* The program is linked in a private directory beside -o (so the rename
 * stays in one file system and nothing planted at a name is written
 * through), then renamed over -o when that is absent or a regular file. */
static const char *private_prog(const char *out) {
  const char *dir = file_private_dir(out);
  if (!dir)
    drv_io_error("cannot write %s: %s", out, strerror(errno));
  return file_private_path(dir, "prog");
}

static void replace_output(const char *prog, const char *out) {
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    drv_io_error("cannot write %s: %s %s", out, out, bad);
  if (rename(prog, out) != 0)
    drv_io_error("cannot write %s: %s", out, strerror(errno));
}

static int run_cc(const char *cfile, const char *out, const char *opt) {
  RuntimePaths rp;
  find_runtime(&rp);
  const char *prog = private_prog(out);
  if (run_tool(cc_argv(&rp, cfile, prog, opt), false) != 0)
    return cc_failed(&rp, cfile, opt);
  replace_output(prog, out);
  return 0;
}

/* How many C compilers a build runs at once: SHDC_JOBS, else the cores
 * this process may run on (at most 16). */
static int build_jobs(void) {
  const char *j = getenv("SHDC_JOBS");
  if (j && *j) {
    char *end;
    long n = strtol(j, &end, 10);
    if (*end || n < 1 || n > 16)
      drv_usage_error("SHDC_JOBS=%s: expected a number of compiler jobs from 1 to 16", j);
    return (int)n;
  }
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* explain's peak of live arrays in main, which the generated program
 * checks against the host's memory before it runs (0 without a main). */
static int64_t main_peak(const Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++)
    if (((Func *)mod->funcs.data[i])->is_main)
      return explain_func_peak(mod, mod->funcs.data[i]);
  return 0;
}

/* The program as `jobs` translation units in shdc's private directory,
 * compiled at once and linked as run_cc links: the functions' copies for
 * each instruction set spread over the machine's cores
 * (emit_module_parts). On a compiler failure the files stay for the
 * report. */
static int build_parts(Compilation *c, const char *out, const char *opt, int jobs) {
  const char **cfiles = arena_alloc(sizeof(char *) * (size_t)jobs), **objs = arena_alloc(sizeof(char *) * (size_t)jobs);
  FILE **outs = arena_alloc(sizeof(FILE *) * (size_t)jobs);
  for (int p = 0; p < jobs; p++) {
    cfiles[p] = file_private_path(work_dir(), arena_printf("part%d.c", p));
    objs[p] = file_private_path(work_dir(), arena_printf("part%d.o", p));
    int fd = open(cfiles[p], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    outs[p] = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!outs[p])
      drv_io_error("cannot write %s: %s", cfiles[p], strerror(errno));
  }
  emit_module_parts(c->mod, c->src, main_peak(c->mod), jobs, outs);
  for (int p = 0; p < jobs; p++)
    if (fflush(outs[p]) != 0 || ferror(outs[p]) || fclose(outs[p]) != 0)
      drv_io_error("cannot write %s: %s", cfiles[p], strerror(errno));
  if (diag_error_count())   /* e.g. the peak memory check's sum overflowed */
    return 1;
  RuntimePaths rp;
  find_runtime(&rp);
  Tool *t = arena_alloc(sizeof(Tool) * (size_t)jobs);
  for (int p = 0; p < jobs; p++)
    t[p] = start_tool(cc_command(&rp, &cfiles[p], 1, objs[p], opt, true), false);
  int bad = -1;
  for (int p = 0; p < jobs; p++)
    if (finish_tool(t[p]) != 0 && bad < 0)
      bad = p;
  if (bad >= 0)
    return cc_failed(&rp, cfiles[bad], opt);
  const char *prog = private_prog(out);
  if (run_tool(cc_command(&rp, objs, jobs, prog, opt, false), false) != 0)
    return cc_failed(&rp, cfiles[0], opt);
  replace_output(prog, out);
  return 0;
}

static int do_build(Compilation *c, const Options *o) {
  const char *opt = o->opt ? o->opt : "-O3";
  int jobs = build_jobs();
  if (jobs > 1 && !o->keep_c)
    return build_parts(c, o->out, opt, jobs);
  const char *cfile = o->keep_c ? arena_printf("%s.c", o->out) : file_private_path(work_dir(), "prog.c");
  FileOut kept;
  FILE *f = NULL;
  if (o->keep_c) {
    f = file_out_open(&kept, cfile);
    if (!f)
      drv_io_error("cannot write %s: %s", cfile, kept.why);
  } else {
    int fd = open(cfile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
      drv_io_error("cannot write %s: %s", cfile, strerror(errno));
  }
  emit_module(f, c->mod, c->src, main_peak(c->mod));
  if (o->keep_c) {
    const char *why = file_out_commit(&kept);
    if (why)
      drv_io_error("cannot write %s: %s", cfile, why);
  } else if (fflush(f) != 0 || ferror(f) || fclose(f) != 0) {
    drv_io_error("cannot write %s: %s", cfile, strerror(errno));
  }
  if (diag_error_count())   /* e.g. the peak memory check's sum overflowed */
    return 1;
  return run_cc(cfile, o->out, opt);
}

static bool has_main(Compilation *c) {
  for (int i = 0; i < c->prog->funcs.len; i++) {
    FuncDecl *f = c->prog->funcs.data[i];
    if (tok_eq(f->name, "main")) {
      if (f->params.len || f->nresults) {
        diag_error(f->pos, "E_NAME", "fn main takes no parameters and returns nothing; read inputs with arg() or load()");
        return false;
      }
      return true;
    }
  }
  Pos p = {c->src, 1, 1};
  diag_error(c->prog->mesh ? c->prog->mesh->pos : p, "E_NAME", "the program has no `fn main()`, where it starts");
  return false;
}

static int run_source(const Options *o, SourceFile *src, const char *path);

int drv_run_one(const Options *o, const char *path) {
  diag_reset();
  SourceFile *src = read_source(path);
  if (!src)
    return 2;
  return run_source(o, src, path);
}

/* `shdc check` of text in a child process, its stderr (the diagnostics)
 * collected through a pipe: the compiler's state (diagnostics, the arena)
 * stays the parent's own, and an internal error in the child is its exit
 * status 2, not the end of the caller. */
int drv_check_text(const char *name, const char *text, const char *max_memory, char **out) {
  int fds[2];
  *out = NULL;
  if (pipe2(fds, O_CLOEXEC) != 0)
    drv_io_error("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    drv_io_error("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    SourceFile *sf = arena_alloc(sizeof *sf);
    sf->name = name;
    sf->text = text;
    sf->len = strlen(text);
    Options o;
    memset(&o, 0, sizeof o);
    o.cmd = "check";
    if (max_memory && plan_parse_bytes(max_memory, &o.max_memory_bytes))
      o.max_memory = max_memory;
    diag_reset();
    diagout_start(DIAG_PLAIN);
    int rc = run_source(&o, sf, name);
    diag_finish();
    fflush(stderr);
    _exit(rc);
  }
  close(fds[1]);
  Str s = {0};
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    str_printf(&s, "%.*s", (int)n, buf);
  }
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  *out = s.buf ? s.buf : strdup("");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* For the language server (lsp_query.c): the front end on src (imports
 * looked up as check looks them up, incdirs its -I directories), and with
 * full (the diagnostics) check's later stages too, the diagnostics going
 * where diagout records them. The program (NULL only if it could not be
 * parsed at all) and whether it was typechecked in *typed; *mesh its mesh.
 * The diagnostics are check's: nothing is typechecked after a syntax or
 * import error. A query (not full) typechecks a document that parsed even
 * when an import failed, so hover and definition still answer for what the
 * document and the files that could be imported declare. */
Program *drv_analyze(SourceFile *src, const Vec *incdirs, Mesh *mesh, bool full, bool *typed) {
  Compilation c;
  memset(&c, 0, sizeof c);
  c.src = src;
  diag_reset();
  c.prog = parse_file(src);
  Vec none = {0};
  bool parsed = c.prog && !diag_error_count();
  if (parsed)
    import_program(c.prog, incdirs ? incdirs : &none);
  diagout_program(c.prog);
  *typed = parsed && (!diag_error_count() || !full);
  if (*typed) {
    if (tc_program(c.prog, &c.mesh, NULL, &none) && full)
      middle(&c, c.prog->diverge_in_partial_manual);
  }
  *mesh = c.mesh;
  return c.prog;
}

static int run_source(const Options *o, SourceFile *src, const char *path) {
  Compilation c;
  memset(&c, 0, sizeof c);
  c.src = src;
  bool ok = front(&c, path, o);
  const char *cmd = o->cmd;
  if (!strcmp(cmd, "check")) {
    /* grad and value_and_grad are expanded on the lowered program; what
     * cannot be differentiated ([E_GRAD]) is a compile-time error too. The
     * collectives the global rules insert for the explicit axes of a
     * partial manual body are known after partitioning; one under a
     * varying condition is a compile-time error ([E_DIVERGE]). */
    if (ok)
      ok = middle(&c, c.prog->diverge_in_partial_manual || o->max_memory);
    if (ok && o->max_memory)
      explain_check_memory(c.mod, o->max_memory_bytes, o->max_memory);
    /* A program (a file with a mesh) must have the main that build needs:
     * check says what build would. */
    if (ok && c.prog->mesh)
      ok = has_main(&c);
    return ok && !diag_error_count() ? 0 : 1;
  }
  if (!strcmp(cmd, "show")) {
    if (!ok)
      return 1;
    int rc = show_program(stdout, c.prog, &c.mesh, (const char *const *)o->files.data + 1, o->files.len - 1);
    if (fflush(stdout) != 0 || ferror(stdout)) {
      fprintf(stderr, "shdc: error: cannot write to stdout: %s\n", strerror(errno));
      return 2;
    }
    return rc;
  }
  if (!strcmp(cmd, "types")) {
    if (c.prog && c.prog->mesh && c.mesh.naxes)
      tc_print_bindings(stdout, c.prog, &c.mesh);
    return ok ? 0 : 1;
  }
  if (!ok)
    return 1;
  bool want_main = !strcmp(cmd, "build") || !strcmp(cmd, "emit-c");
  if (want_main && !has_main(&c))
    return 1;
  if (!middle(&c, !(o->global_ir && !strcmp(cmd, "emit-ir"))))
    return 1;
  if (!strcmp(cmd, "emit-ir")) {
    ir_print_module(stdout, c.mod);
    return 0;
  }
  if (!strcmp(cmd, "explain")) {
    if (o->network) {
      const char *err = net_check_mesh(&o->net, &c.mesh);
      if (err)
        drv_usage_error("--network: %s", err);
    }
    explain_module(stdout, c.mod, c.src, o->network ? &o->net : NULL);
    return diag_error_count() ? 1 : 0;   /* a sum that overflowed is reported on its line */
  }
  if (!strcmp(cmd, "emit-c")) {
    emit_module(stdout, c.mod, c.src, main_peak(c.mod));
    return 0;
  }
  if (o->max_memory) {   /* an out-of-memory crash found before the job runs */
    explain_check_memory(c.mod, o->max_memory_bytes, o->max_memory);
    if (diag_error_count())
      return 1;
  }
  return do_build(&c, o);
}

/* ---- plan: the pipeline once per layout ------------------------------------------- */

typedef struct {
  const Options *o;
  SourceFile *src;
  const char *path;
} PlanCtx;

static const Module *plan_compile(void *ctx, const char *mesh, const char **error) {
  const PlanCtx *p = ctx;
  Options o = *p->o;
  o.mesh = mesh;
  Compilation c;
  memset(&c, 0, sizeof c);
  c.src = p->src;
  diag_reset();
  *error = NULL;
  diag_capture(error);
  bool ok = front(&c, p->path, &o) && middle(&c, true);
  diag_capture(NULL);
  return ok && !diag_error_count() ? c.mod : NULL;
}

/* The axes come from the file's mesh declaration; --mesh fixes some. */
int drv_plan(const Options *o, const char *path) {
  SourceFile *src = read_source(path);
  if (!src)
    return 2;
  diag_reset();
  Program *prog = parse_file(src);
  if (!diag_error_count())
    import_program(prog, &o->incdirs);
  if (diag_error_count())
    return 1;
  if (!prog->mesh) {
    Compilation c;
    memset(&c, 0, sizeof c);
    c.src = src;
    front(&c, path, o);   /* the error about the missing mesh */
    return 1;
  }
  check_mesh_names(o->mesh, prog, path);
  check_define_names(&o->defines, prog, path);
  PlanArgs a;
  memset(&a, 0, sizeof a);
  a.file = path;
  a.naxes = prog->mesh->naxes;
  for (int i = 0; i < a.naxes; i++) {
    a.names[i] = tok_str(prog->mesh->names[i]);
    for (const char *m = o->mesh; m && *m;) {   /* syntax and names were checked */
      const char *eq = strchr(m, '=');
      if ((size_t)(eq - m) == strlen(a.names[i]) && !strncmp(m, a.names[i], (size_t)(eq - m)))
        a.fixed[i] = atoi(eq + 1);
      m = strchr(eq, ',') ? strchr(eq, ',') + 1 : eq + strlen(eq);
    }
  }
  a.devices = o->devices;
  a.memory = o->memory_bytes;
  a.memory_text = o->memory;
  NetModel def;
  a.network_text = o->network;
  if (!o->network)
    net_parse(&def, "25GB/s,5us");
  a.net = o->network ? &o->net : &def;
  Mesh names;
  memset(&names, 0, sizeof names);
  names.naxes = a.naxes;
  for (int i = 0; i < a.naxes; i++)
    names.names[i] = a.names[i];
  const char *err = net_check_mesh(a.net, &names);
  if (err)
    drv_usage_error("--network: %s", err);
  a.flops = o->flops > 0 ? o->flops : 1e12;
  a.ew_flops = o->ew_flops > 0 ? o->ew_flops : a.flops;
  PlanCtx ctx = {o, src, path};
  a.compile = plan_compile;
  a.ctx = &ctx;
  a.json = o->json;
  int rc = plan_run(stdout, &a);
  diag_reset();
  return rc;
}

/* The document goes to stdout for check (its only output), or to the file
 * of check -o; the other commands keep stdout for what they print, so
 * theirs goes to stderr. */
bool drv_write_diagnostics(const Options *o) {
  bool check = !strcmp(o->cmd, "check");
  const char *path = check && o->out ? o->out : NULL;
  FileOut fo;
  FILE *f = path ? file_out_open(&fo, path) : check ? stdout : stderr;
  if (!f) {
    fprintf(stderr, "shdc: error: cannot write %s: %s\n", path, fo.why);
    return false;
  }
  bool ok = diagout_write(f);
  const char *why = NULL;
  if (path && (why = file_out_commit(&fo)) != NULL)
    ok = false;
  if (!ok)
    fprintf(stderr, "shdc: error: cannot write the diagnostics to %s: %s\n", path ? path : check ? "stdout" : "stderr",
            why ? why : strerror(errno));
  return ok;
}
