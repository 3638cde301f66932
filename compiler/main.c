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
    "  plan FILE --devices=N  every layout of the mesh axes over N devices, ranked by\n"
    "                         estimated step time, with the peak memory per rank\n"
    "  trace-summary RUN.json time per category (gemm, elementwise, communication,\n"
    "                         waiting) and collectives per rank of a SHD_TRACE=RUN.json run\n"
    "  explain-error [CODE]   what an error code means: the rule, a program with the\n"
    "                         error, its message and the fix (no CODE: list them; --all)\n"
    "  lsp                    a Language Server Protocol server on stdin/stdout (editors:\n"
    "                         diagnostics and fixes, hover types, definitions, symbols)\n"
    "\n"
    "options:\n"
    "  --mesh AXIS=N,...      override mesh axis sizes (e.g. --mesh data=2,model=1)\n"
    "  -D NAME=VALUE          override the integer `const NAME` (repeatable; e.g. -D C=256)\n"
    "  -o PROG                output executable (build)\n"
    "  -O0 ... -O3            C optimisation level of the build (default -O3)\n"
    "  --keep-c               build: keep the generated C next to PROG as PROG.c\n"
    "  --global               emit-ir: print the global-view IR (after autodiff)\n"
    "  --network=BW,LATENCY   explain, plan: estimate each collective's time on links of\n"
    "                         this bandwidth and latency (25GB/s,5us), or --network=FILE\n"
    "                         of per-axis links (AXIS BANDWIDTH LATENCY [LABEL] a line)\n"
    "  --max-memory=BYTES     build, check: an error where a rank's peak bytes of live\n"
    "                         arrays exceed BYTES (80GB, 80GiB, 512MiB)\n"
    "  --devices=N            plan: the number of devices to lay the mesh over\n"
    "  --memory=BYTES         plan: memory per device; layouts above it do not fit\n"
    "  --flops=F[,E]          plan: FLOP/s per device of contractions (and of elementwise\n"
    "                         work, default F), e.g. 100G or 1.5TFLOP/s\n"
    "  --json                 plan: the layouts as one JSON object\n"
    "  --diagnostics=FORMAT   plain (default), json or sarif: errors as one document on\n"
    "                         stdout (check; check -o FILE writes it to FILE), else stderr\n"
    "  --max-errors=N         print at most N errors (default 100, and all in a json or\n"
    "                         sarif document; 0: all)\n"
    "  --help                 this text\n"
    "  --version              the version, git revision and runtime ABI\n"
    "\n"
    "exit status: 0 clean, 1 errors in the program, 2 usage, I/O or toolchain trouble\n"
    "each error ends with its code, e.g. [E_CONTRACT]: shdc explain-error E_CONTRACT explains it\n";

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
  const char *max_memory;      /* --max-memory, as written */
  int64_t max_memory_bytes;
  int64_t devices;             /* plan */
  const char *memory;
  int64_t memory_bytes;
  double flops, ew_flops;
  bool json;
} Options;

__attribute__((noreturn, format(printf, 1, 2))) static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_finish();
  fputs("shdc: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(run shdc --help for usage)\n", stderr);
  va_end(ap);
  exit(2);
}

__attribute__((noreturn, format(printf, 1, 2))) static void io_error(const char *fmt, ...) {
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
 * -Werror as the tests use to keep the generated C warning-free). */
static const char **cc_argv(const RuntimePaths *rp, const char *cfile, const char *out, const char *opt) {
  const char *cc = getenv("SHDC_CC") && *getenv("SHDC_CC") ? getenv("SHDC_CC") : "mpicc";
  const char **argv = arena_alloc(sizeof(char *) * 80);
  int argc = 0;
  const char *fixed[] = {cc, "-std=c11", opt, "-fno-math-errno", arena_printf("-I%s", rp->inc), "-o", out, cfile,
                         rp->lib, "-lopenblas", "-lm"};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    argv[argc++] = fixed[i];
#ifdef SHDC_PROGRAM_CFLAGS
  /* A sanitizer build of shdc links programs against the sanitizer build of
   * the runtime, so it compiles them with the same flags. */
  char *san = arena_strdup(SHDC_PROGRAM_CFLAGS);
  for (char *tok = strtok(san, " \t"); tok && argc < 40; tok = strtok(NULL, " \t"))
    argv[argc++] = tok;
#endif
  char *extra = getenv("SHDC_CFLAGS") ? arena_strdup(getenv("SHDC_CFLAGS")) : NULL;
  for (char *tok = extra ? strtok(extra, " \t\n") : NULL; tok; tok = strtok(NULL, " \t\n")) {
    if (argc == 78)
      io_error("SHDC_CFLAGS has more than %d flags", 78 - (int)(sizeof fixed / sizeof *fixed));
    argv[argc++] = tok;
  }
  argv[argc] = NULL;
  return argv;
}

/* Runs argv; 0 when it succeeds. A program that cannot be started at all
 * (exec's errno comes back through a close-on-exec pipe) is an I/O error
 * that names it; `quiet` sends its output to /dev/null. */
static int run_tool(const char **argv, bool quiet) {
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
  int err = 0;
  ssize_t n = read(fds[0], &err, sizeof err);
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (n == (ssize_t)sizeof err)
    io_error("cannot run the C compiler '%s'%s: %s%s", argv[0], getenv("SHDC_CC") ? " (SHDC_CC)" : "", strerror(err),
             getenv("SHDC_CC") ? "" : "; install Open MPI (apt-get install libopenmpi-dev) or set SHDC_CC");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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

/* The program is linked in a private directory beside -o (so the rename
 * stays in one file system and nothing planted at a name is written
 * through), then renamed over -o when that is absent or a regular file. */
static int run_cc(const char *cfile, const char *out, const char *opt) {
  RuntimePaths rp;
  if (!drv_find_runtime(&rp))
    io_error("cannot find the runtime (include/shdrt.h and libshdrt.a) in %s; reinstall shdc, or set SHDC_HOME to "
             "the directory that holds them", rp.searched);
  const char *dir = file_private_dir(out);
  if (!dir)
    io_error("cannot write %s: %s", out, strerror(errno));
  const char *prog = file_private_path(dir, "prog");
  if (run_tool(cc_argv(&rp, cfile, prog, opt), false) != 0)
    return cc_failed(&rp, cfile, opt);
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    io_error("cannot write %s: %s %s", out, out, bad);
  if (rename(prog, out) != 0)
    io_error("cannot write %s: %s", out, strerror(errno));
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
  return run_cc(cfile, o->out, o->opt ? o->opt : "-O3");
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

static int run_one(const Options *o, const char *path) {
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
    io_error("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    io_error("fork: %s", strerror(errno));
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

/* For the language server (lsp_query.c): the front end on src, and with
 * full check's later stages too, the diagnostics going where diagout
 * records them. The program (NULL only if it could not be parsed at all)
 * and whether it was typechecked (no syntax errors); *mesh its mesh. */
Program *drv_analyze(SourceFile *src, Mesh *mesh, bool full, bool *typed) {
  Compilation c;
  memset(&c, 0, sizeof c);
  c.src = src;
  diag_reset();
  c.prog = parse_file(src);
  diagout_program(c.prog);
  *typed = c.prog && !diag_error_count();
  if (*typed) {
    Vec none = {0};
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
        usage_error("--network: %s", err);
    }
    explain_module(stdout, c.mod, c.src, o->network ? &o->net : NULL);
    return diag_error_count() ? 1 : 0;   /* a sum that overflowed is reported on its line */
  }
  if (!strcmp(cmd, "emit-c")) {
    emit_module(stdout, c.mod, c.src);
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
static int do_plan(const Options *o, const char *path) {
  SourceFile *src = read_source(path);
  if (!src)
    return 2;
  diag_reset();
  Program *prog = parse_file(src);
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
    usage_error("--network: %s", err);
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
  if (argc >= 2 && !strcmp(argv[1], "explain-error")) {
    if (argc > 3)
      usage_error("explain-error takes one CODE (or --all), e.g. shdc explain-error E_CONTRACT");
    bool all = argc == 3 && !strcmp(argv[2], "--all");
    if (argc == 3 && !all && argv[2][0] == '-')
      usage_error("unknown option '%s' of explain-error (its only option is --all)", argv[2]);
    int rc = drv_explain_error(argc == 3 && !all ? argv[2] : NULL, all);
    if (fflush(stdout) != 0 || ferror(stdout))
      io_error("cannot write the output: %s", strerror(errno));
    return rc;
  }
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
    } else if (!strncmp(a, "--max-memory=", 13) || !strncmp(a, "--memory=", 9)) {
      bool max = a[2] == 'm' && a[3] == 'a';
      const char *v = strchr(a, '=') + 1;
      int64_t bytes;
      if (!plan_parse_bytes(v, &bytes))
        usage_error("%.*s expects a number of bytes, e.g. 80GB, 80GiB, 512MiB or 1.5e9, not '%s'",
                    (int)(strchr(a, '=') - a), a, v);
      if (max) {
        o.max_memory = v;
        o.max_memory_bytes = bytes;
      } else {
        o.memory = v;
        o.memory_bytes = bytes;
      }
    } else if (!strcmp(a, "--json")) {
      o.json = true;
    } else if (!strncmp(a, "--devices=", 10)) {
      char *end;
      long long n = strtoll(a + 10, &end, 10);
      if (!a[10] || *end || n < 1 || n > 1 << 20)
        usage_error("--devices expects a count from 1 to 1048576, not '%s'", a + 10);
      o.devices = n;
    } else if (!strncmp(a, "--flops=", 8)) {
      char *f = arena_strdup(a + 8), *comma = strchr(f, ',');
      if (comma)
        *comma = 0;
      if (!plan_parse_flops(f, &o.flops) || (comma && !plan_parse_flops(comma + 1, &o.ew_flops)))
        usage_error("--flops expects FLOP/s per device, e.g. 100G, 1.5TFLOP/s or 5e10, and optionally a second "
                    "rate for elementwise work (--flops=100G,20G), not '%s'", a + 8);
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
  static const char *cmds[] = {"check", "types", "build", "emit-ir", "emit-c", "explain", "show", "trace-summary",
                               "plan"};
  if (!strcmp(o.cmd, "lsp")) {
    if (o.files.len)
      usage_error("lsp takes no FILE: it talks the Language Server Protocol on stdin and stdout");
    return lsp_main();
  }
  bool known = false;
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    known |= !strcmp(o.cmd, cmds[i]);
  if (!known)
    usage_error("unknown command '%s'", o.cmd);
  if (o.files.len == 0)
    usage_error("%s needs a FILE", o.cmd);
  if (o.files.len > 1 && strcmp(o.cmd, "check") && strcmp(o.cmd, "show"))
    usage_error("%s takes one FILE", o.cmd);
  if (o.network && strcmp(o.cmd, "explain") && strcmp(o.cmd, "plan"))
    usage_error("--network is an option of explain and plan");
  if (o.max_memory && strcmp(o.cmd, "build") && strcmp(o.cmd, "check"))
    usage_error("--max-memory is an option of build and check (plan takes --memory)");
  if ((o.devices || o.memory || o.flops > 0 || o.json) && strcmp(o.cmd, "plan"))
    usage_error("%s is an option of plan",
                o.devices ? "--devices" : o.memory ? "--memory" : o.flops > 0 ? "--flops" : "--json");
  if (!strcmp(o.cmd, "plan")) {
    if (!o.devices)
      usage_error("plan needs --devices=N, the number of devices to lay the mesh over");
    return do_plan(&o, o.files.data[0]);
  }
  if (!strcmp(o.cmd, "trace-summary"))
    return tsum_run(o.files.data[0]);
  if (!strcmp(o.cmd, "show")) {
    int r = run_one(&o, o.files.data[0]);
    diag_finish();
    return r;
  }
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
    diag_finish();
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
