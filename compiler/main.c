/* main.c: the shdc driver. The pipeline, as straight-line code:
 *
 *   parse -> typecheck -> lower (global IR) -> autodiff -> partition (SPMD IR)
 *         -> optimize -> emit C -> mpicc
 *
 * Each stage reports through diag.c; the driver stops between stages when
 * there were errors. Exit status (fixed): 0 clean, 1 errors in the program,
 * 2 usage, I/O or toolchain trouble (io_error names the cause) and internal
 * errors (diag_ice). The driver checks what it can before any work: inputs
 * are regular files of at most 8 MiB, -o is writable and not an input;
 * when the C compiler fails it compiles an empty program with the same
 * options to tell a broken toolchain from a bug in the generated C. The
 * compiler runs on a thread with a 512 MiB stack (main_thread).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shdc.h"

static const char usage[] =
    "usage: shdc COMMAND [options] FILE\n"
    "\n"
    "commands:\n"
    "  check FILE...          parse, type-check and differentiate; diagnostics on stderr\n"
    "  types FILE             print FUNCTION.NAME: TYPE for every binding\n"
    "  show FILE [FUNC.NAME...]  draw which device holds which block of each array\n"
    "  build FILE -o PROG     compile to an executable for mpirun\n"
    "  emit-ir FILE           print the SPMD IR after partitioning (--global: before)\n"
    "  emit-c FILE            print the generated C\n"
    "  explain FILE           list every collective inserted, with bytes per rank,\n"
    "                         and the peak bytes of live arrays per rank\n"
    "  trace-summary RUN.json time per category (gemm, elementwise, communication,\n"
    "                         waiting) and collectives per rank of a SHD_TRACE=RUN.json run\n"
    "\n"
    "options:\n"
    "  --mesh AXIS=N,...      override mesh axis sizes (e.g. --mesh data=2,model=1)\n"
    "  -D NAME=VALUE          override the integer `const NAME` (repeatable; e.g. -D C=256)\n"
    "  -o PROG                output executable (build)\n"
    "  -O0 ... -O3            C optimisation level of the build (default -O3)\n"
    "  --keep-c               build: keep the generated C next to PROG as PROG.c\n"
    "  --global               emit-ir: print the global-view IR (after autodiff)\n"
    "  --network=BW,LATENCY   explain: estimate each collective's time on links of this\n"
    "                         bandwidth and latency (25GB/s,5us), or --network=FILE of\n"
    "                         per-axis links (AXIS BANDWIDTH LATENCY [LABEL] a line)\n"
    "  --diagnostics=FORMAT   plain (default), json or sarif: errors as one document on\n"
    "                         stdout (check; check -o FILE writes it to FILE), else stderr\n"
    "  --max-errors=N         print at most N errors (default 100, and all in a json or\n"
    "                         sarif document; 0: all)\n"
    "  --help                 this text\n"
    "  --version              the version, git revision and runtime ABI\n"
    "\n"
    "exit status: 0 clean, 1 errors in the program, 2 usage, I/O or toolchain trouble\n";

typedef struct {
  const char *cmd;
  Vec files;
  const char *out;
  const char *mesh;
  Vec defines;         /* "NAME=VALUE" of each -D, in order (the last one wins) */
  const char *opt;
  bool keep_c;
  bool global_ir;
  DiagFormat diagnostics;
  const char *network;
  NetModel net;
} Options;

__attribute__((noreturn, format(printf, 1, 2))) static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(run shdc --help for usage)\n", stderr);
  va_end(ap);
  exit(2);
}

__attribute__((noreturn, format(printf, 1, 2))) static void io_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
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

/* --mesh data=2,model=1: syntax here, names once the file is parsed. */
static void check_mesh_syntax(const char *m) {
  const char *p = m;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq || eq == p)
      usage_error("--mesh expects AXIS=N,... (e.g. --mesh data=2,model=1), not '%s'", m);
    for (const char *q = m; q < p;) {   /* an axis named twice */
      const char *qe = strchr(q, '=');
      if (qe - q == eq - p && !strncmp(q, p, (size_t)(eq - p)))
        usage_error("--mesh names axis '%.*s' twice", (int)(eq - p), p);
      q = strchr(qe, ',') + 1;
    }
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || v < 1 || v > 1 << 20 || (*end && *end != ','))
      usage_error("--mesh: the size after '%.*s=' must be a positive integer", (int)(eq - p), p);
    p = *end ? end + 1 : end;
  }
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
      usage_error("--mesh: %s has no mesh axis '%.*s' (its axes: %s)", file, len, p, str_cstr(&names));
    }
    const char *comma = strchr(eq, ',');
    p = comma ? comma + 1 : eq + strlen(eq);
  }
}

/* -D NAME=VALUE: NAME an identifier, VALUE an integer (syntax here, the
 * name once the file is parsed). */
static void check_define_syntax(const char *d) {
  const char *eq = strchr(d, '=');
  bool ident = eq && eq != d && !(d[0] >= '0' && d[0] <= '9');
  for (const char *p = d; ident && p < eq; p++)
    ident = *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
  if (!ident)
    usage_error("-D expects NAME=VALUE with NAME a const of the file (e.g. -D C=256), not '%s'", d);
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (end == eq + 1 || *end || errno == ERANGE || v < -(1ll << 53) || v > 1ll << 53)
    usage_error("-D %.*s: the value '%s' is not an integer; -D overrides integer consts (e.g. -D %.*s=8)",
                (int)(eq - d), d, eq + 1, (int)(eq - d), d);
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
      usage_error("-D: %s has no const '%.*s' (its consts: %s)", file, len, d,
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
  return true;
}

/* ---- build: emit C, then mpicc ----------------------------------------------------- */

/* The C compiler's command line: SHDC_CC (default mpicc), the options of
 * the build, SHDC_CFLAGS split at blanks (e.g. -march=native, or -Wall
 * -Werror as the tests use to keep the generated C warning-free). With
 * compile_only, `-c` of the one input to the object `out`; otherwise the
 * inputs (C files or objects) linked to `out` with the runtime. */
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
  for (char *tok = extra ? strtok(extra, " \t\n") : NULL; tok; tok = strtok(NULL, " \t\n")) {
    if (argc == limit)
      io_error("SHDC_CFLAGS has more than %d flags", limit - argc);
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
    io_error("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0)
    io_error("fork: %s", strerror(errno));
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
    io_error("cannot run the C compiler '%s'%s: %s%s", t.name, getenv("SHDC_CC") ? " (SHDC_CC)" : "", strerror(err),
             getenv("SHDC_CC") ? "" : "; install Open MPI (apt-get install libopenmpi-dev) or set SHDC_CC");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_tool(const char **argv, bool quiet) { return finish_tool(start_tool(argv, quiet)); }

/* shdc's private directory under TMPDIR (files.c), made on first use:
 * the generated C and the toolchain probe live there. */
static const char *work_dir(void) {
  static const char *dir;
  if (!dir && !(dir = file_private_dir(NULL)))
    io_error("cannot create a directory in %s: %s", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
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
    io_error("the C compiler '%s' cannot build even an empty program with these options%s%s%s (its messages are "
             "above); check SHDC_CC, SHDC_CFLAGS and the Open MPI and OpenBLAS installation",
             cc_argv(rp, "", "", opt)[0], flags ? " (SHDC_CFLAGS='" : "", flags ? flags : "", flags ? "')" : "");
  }
  file_forget(cfile);   /* kept for the report */
  file_forget(work_dir());
  diag_ice("the C compiler failed on the generated code, kept in %s", cfile);
}

static void find_runtime(RuntimePaths *rp) {
  if (!drv_find_runtime(rp))
    io_error("cannot find the runtime (include/shdrt.h and libshdrt.a) in %s; reinstall shdc, or set SHDC_HOME to "
             "the directory that holds them", rp->searched);
}

/* The program is linked in a private directory beside -o (so the rename
 * stays in one file system and nothing planted at a name is written
 * through), then renamed over -o when that is absent or a regular file. */
static const char *private_prog(const char *out) {
  const char *dir = file_private_dir(out);
  if (!dir)
    io_error("cannot write %s: %s", out, strerror(errno));
  return file_private_path(dir, "prog");
}

static void replace_output(const char *prog, const char *out) {
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    io_error("cannot write %s: %s %s", out, out, bad);
  if (rename(prog, out) != 0)
    io_error("cannot write %s: %s", out, strerror(errno));
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
      usage_error("SHDC_JOBS=%s: expected a number of compiler jobs from 1 to 16", j);
    return (int)n;
  }
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 16 ? 16 : n;
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
      io_error("cannot write %s: %s", cfiles[p], strerror(errno));
  }
  emit_module_parts(c->mod, c->src, jobs, outs);
  for (int p = 0; p < jobs; p++)
    if (fflush(outs[p]) != 0 || ferror(outs[p]) || fclose(outs[p]) != 0)
      io_error("cannot write %s: %s", cfiles[p], strerror(errno));
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

/* -o must not replace an input, nor anything but a regular file, and its
 * place must be writable: these are the user's mistakes, said before any
 * work is done. */
static void check_output(const char *out, const char *input, const char *what) {
  struct stat so, si;
  bool exists = stat(out, &so) == 0;
  if (!strcmp(out, input) || (exists && stat(input, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino))
    usage_error("%s %s is the input file; choose another name", what, out);
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    io_error("cannot write %s: %s %s", out, out, bad);
  char *copy = arena_strdup(out);
  const char *dir = dirname(copy);
  if (access(dir, W_OK | X_OK) != 0 || (exists && access(out, W_OK) != 0))
    io_error("cannot write %s: %s", out, strerror(errno));
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
      io_error("cannot write %s: %s", cfile, kept.why);
  } else {
    int fd = open(cfile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
      io_error("cannot write %s: %s", cfile, strerror(errno));
  }
  emit_module(f, c->mod, c->src);
  if (o->keep_c) {
    const char *why = file_out_commit(&kept);
    if (why)
      io_error("cannot write %s: %s", cfile, why);
  } else if (fflush(f) != 0 || ferror(f) || fclose(f) != 0) {
    io_error("cannot write %s: %s", cfile, strerror(errno));
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

static int run_one(const Options *o, const char *path) {
  Compilation c;
  memset(&c, 0, sizeof c);
  diag_reset();
  c.src = read_source(path);
  if (!c.src)
    return 2;
  bool ok = front(&c, path, o);
  const char *cmd = o->cmd;
  if (!strcmp(cmd, "check")) {
    /* grad and value_and_grad are expanded on the lowered program; what
     * cannot be differentiated ([E_GRAD]) is a compile-time error too. The
     * collectives the global rules insert for the explicit axes of a
     * partial manual body are known after partitioning; one under a
     * varying condition is a compile-time error ([E_DIVERGE]). */
    if (ok)
      ok = middle(&c, c.prog->diverge_in_partial_manual);
    /* A program (a file with a mesh) must have the main that build needs:
     * check says what build would. */
    if (ok && c.prog->mesh)
      ok = has_main(&c);
    return ok ? 0 : 1;
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
        usage_error("--network: %s", err);
    }
    explain_module(stdout, c.mod, c.src, o->network ? &o->net : NULL);
    return diag_error_count() ? 1 : 0;   /* a sum that overflowed is reported on its line */
  }
  if (!strcmp(cmd, "emit-c")) {
    emit_module(stdout, c.mod, c.src);
    return 0;
  }
  return do_build(&c, o);
}

/* The document goes to stdout for check (its only output), or to the file
 * of check -o; the other commands keep stdout for what they print, so
 * theirs goes to stderr. */
static bool write_diagnostics(const Options *o) {
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

/* --help and --version: their text, and exit 2 when it could not be
 * written (a full disk, a closed pipe) rather than 0. */
static int print_info(bool version) {
  if (version)
    drv_print_version(stdout);
  else
    fputs(usage, stdout);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "shdc: error: cannot write the %s: %s\n", version ? "version" : "help", strerror(errno));
    return 2;
  }
  return 0;
}

static int drv_main(int argc, char **argv) {
  /* A developer's command, not in the usage: the registry's builtins and
   * IR operations (ops.c), which a test compares with the docs. */
  if (argc == 2 && !strcmp(argv[1], "list-ops")) {
    if (op_list(stdout))
      return 0;
    fprintf(stderr, "shdc: error: cannot write the list to stdout: %s\n", strerror(errno));
    return 2;
  }
  Options o;
  memset(&o, 0, sizeof o);
  int max_errors = -1;   /* default: 100 printed; all in a JSON or SARIF document */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help")) {
      return print_info(false);
    } else if (!strcmp(a, "--version")) {
      return print_info(true);
    } else if (!strcmp(a, "-o")) {
      if (++i >= argc)
        usage_error("-o needs a file name");
      if (o.out)
        usage_error("-o is given twice");
      o.out = argv[i];
    } else if (!strncmp(a, "--max-errors=", 13)) {
      char *end;
      long n = strtol(a + 13, &end, 10);
      if (!a[13] || *end || n < 0 || n > 1000000)
        usage_error("--max-errors expects a count from 0 (no limit) to 1000000, not '%s'", a + 13);
      max_errors = (int)n;
    } else if (!strcmp(a, "--mesh") || !strncmp(a, "--mesh=", 7)) {
      if (o.mesh)
        usage_error("--mesh is given twice; name every axis in one --mesh AXIS=N,...");
      if (a[6] == '=')
        o.mesh = a + 7;
      else if (++i >= argc)
        usage_error("--mesh needs AXIS=N,...");
      else
        o.mesh = argv[i];
      check_mesh_syntax(o.mesh);
    } else if (!strcmp(a, "-D") || !strncmp(a, "-D", 2)) {
      const char *d = a[2] ? a + 2 : NULL;
      if (!d && ++i >= argc)
        usage_error("-D needs NAME=VALUE (e.g. -D C=256)");
      d = d ? d : argv[i];
      check_define_syntax(d);
      vec_push(&o.defines, (void *)d);
    } else if (!strncmp(a, "-O", 2) && strlen(a) == 3 && a[2] >= '0' && a[2] <= '3') {
      o.opt = a;
    } else if (!strcmp(a, "--keep-c")) {
      o.keep_c = true;
    } else if (!strcmp(a, "--global")) {
      o.global_ir = true;
    } else if (!strcmp(a, "--network") || !strncmp(a, "--network=", 10)) {
      if (a[9] == '=')
        o.network = a + 10;
      else if (++i >= argc)
        usage_error("--network needs BANDWIDTH,LATENCY or a file");
      else
        o.network = argv[i];
      const char *err = net_parse(&o.net, o.network);
      if (err)
        usage_error("--network: %s", err);
    } else if (!strncmp(a, "--diagnostics=", 14)) {
      const char *f = a + 14;
      if (!strcmp(f, "plain"))
        o.diagnostics = DIAG_PLAIN;
      else if (!strcmp(f, "json"))
        o.diagnostics = DIAG_JSON;
      else if (!strcmp(f, "sarif"))
        o.diagnostics = DIAG_SARIF;
      else
        usage_error("--diagnostics is plain, json or sarif, not '%s'", f);
    } else if (a[0] == '-' && a[1]) {
      usage_error("unknown option '%s'", a);
    } else if (!o.cmd) {
      o.cmd = a;
    } else {
      vec_push(&o.files, (void *)a);
    }
  }
  if (!o.cmd) {
    fputs(usage, stderr);
    return 2;
  }
  static const char *cmds[] = {"check", "types", "build", "emit-ir", "emit-c", "explain", "show", "trace-summary"};
  bool known = false;
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    known |= !strcmp(o.cmd, cmds[i]);
  if (!known)
    usage_error("unknown command '%s'", o.cmd);
  if (o.files.len == 0)
    usage_error("%s needs a FILE", o.cmd);
  if (o.files.len > 1 && strcmp(o.cmd, "check") && strcmp(o.cmd, "show"))
    usage_error("%s takes one FILE", o.cmd);
  if (o.network && strcmp(o.cmd, "explain"))
    usage_error("--network is an option of explain");
  if (!strcmp(o.cmd, "trace-summary"))
    return tsum_run(o.files.data[0]);
  if (!strcmp(o.cmd, "show"))
    return run_one(&o, o.files.data[0]);
  if (o.out && !strcmp(o.cmd, "check") && o.diagnostics == DIAG_PLAIN)
    usage_error("check -o FILE writes a diagnostics document: add --diagnostics=json or --diagnostics=sarif");
  if (o.out && (!strcmp(o.cmd, "build") || !strcmp(o.cmd, "check")))
    for (int i = 0; i < o.files.len; i++)
      check_output(o.out, o.files.data[i], "-o");
  if (!strcmp(o.cmd, "build")) {
    if (!o.out)
      usage_error("build needs -o PROG");
    if (o.keep_c)
      check_output(arena_printf("%s.c", o.out), o.files.data[0], "--keep-c's");
  }
  if (max_errors < 0)
    max_errors = o.diagnostics == DIAG_PLAIN ? 100 : 0;
  diag_set_max_errors(max_errors);
  diagout_start(o.diagnostics);
  int rc = 0;
  for (int i = 0; i < o.files.len; i++) {
    int r = run_one(&o, o.files.data[i]);
    int hidden = diag_errors_not_shown();
    if (hidden)
      fprintf(stderr, "shdc: %s: %d more error%s not shown (--max-errors=%d; --max-errors=0 shows all)\n",
              (const char *)o.files.data[i], hidden, hidden == 1 ? "" : "s", max_errors);
    if (r > rc)
      rc = r;
  }
  if (o.diagnostics != DIAG_PLAIN && !write_diagnostics(&o))
    rc = 2;
  if (fflush(stdout) != 0 || ferror(stdout))
    io_error("cannot write the output: %s", strerror(errno));
  return rc;
}

/* The compiler runs on a thread with a large stack: its passes recurse over
 * expressions and nested blocks, whose depth the parser bounds (1000), and
 * a bound that holds under ASan's larger frames needs room. Call chains,
 * whose length the program controls, are walked without recursion. */
typedef struct {
  int argc;
  char **argv;
  int rc;
} MainArgs;

static void *main_thread(void *p) {
  MainArgs *m = p;
  m->rc = drv_main(m->argc, m->argv);
  return NULL;
}

int main(int argc, char **argv) {
  MainArgs m = {argc, argv, 2};
  pthread_attr_t attr;
  pthread_t t;
  if (pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, (size_t)512 << 20) == 0 &&
      pthread_create(&t, &attr, main_thread, &m) == 0 && pthread_join(t, NULL) == 0) {
    fflush(stdout);
    return m.rc;
  }
  return drv_main(argc, argv);   /* no thread to be had: the default stack */
}
