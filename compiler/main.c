/* main.c: the shdc driver. The pipeline, as straight-line code:
 *
 *   parse -> typecheck -> lower (global IR) -> autodiff -> partition (SPMD IR)
 *         -> optimize -> emit C -> mpicc
 *
 * Each stage reports through diag.c; the driver stops between stages when
 * there were errors. Exit status (fixed): 0 clean, 1 errors in the program,
 * 2 usage or I/O trouble.
 */
#include <errno.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shdc.h"

static const char usage[] =
    "usage: shdc COMMAND [options] FILE\n"
    "\n"
    "commands:\n"
    "  check FILE...          parse and type-check; diagnostics on stderr\n"
    "  types FILE             print FUNCTION.NAME: TYPE for every binding\n"
    "  build FILE -o PROG     compile to an executable for mpirun\n"
    "  emit-ir FILE           print the SPMD IR after partitioning (--global: before)\n"
    "  emit-c FILE            print the generated C\n"
    "  explain FILE           list every collective inserted, with bytes per rank,\n"
    "                         and the peak bytes of live arrays per rank\n"
    "\n"
    "options:\n"
    "  --mesh AXIS=N,...      override mesh axis sizes (e.g. --mesh data=2,model=1)\n"
    "  -o PROG                output executable (build)\n"
    "  -O0 ... -O3            C optimisation level of the build (default -O3)\n"
    "  --keep-c               build: keep the generated C next to PROG as PROG.c\n"
    "  --global               emit-ir: print the global-view IR (after autodiff)\n"
    "  --help                 this text\n"
    "\n"
    "exit status: 0 clean, 1 errors in the program, 2 usage or I/O trouble\n";

typedef struct {
  const char *cmd;
  Vec files;
  const char *out;
  const char *mesh;
  const char *opt;
  bool keep_c;
  bool global_ir;
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

static SourceFile *read_source(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "shdc: error: cannot read %s: %s\n", path, strerror(errno));
    exit(2);
  }
  Str s = {0};
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++)
      str_putc(&s, buf[i]);
  bool err = ferror(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "shdc: error: cannot read %s: %s\n", path, strerror(errno));
    exit(2);
  }
  SourceFile *sf = arena_alloc(sizeof *sf);
  sf->name = path;
  sf->len = s.len;
  sf->text = arena_strndup(s.buf ? s.buf : "", s.len);
  free(s.buf);
  return sf;
}

/* --mesh data=2,model=1: syntax here, names once the file is parsed. */
static void check_mesh_syntax(const char *m) {
  const char *p = m;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq || eq == p)
      usage_error("--mesh expects AXIS=N,... (e.g. --mesh data=2,model=1), not '%s'", m);
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

/* ---- the pipeline ------------------------------------------------------------- */

typedef struct {
  SourceFile *src;
  Program *prog;
  Mesh mesh;
  Module *mod;
} Compilation;

static bool front(Compilation *c, const char *path, const Options *o) {
  c->src = read_source(path);
  c->prog = parse_file(c->src);
  if (diag_error_count())
    return false;
  check_mesh_names(o->mesh, c->prog, path);
  return tc_program(c->prog, &c->mesh, o->mesh);
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

static const char *runtime_dir(void) {
  const char *home = getenv("SHDC_HOME");
  if (home)
    return home;
  static char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return ".";
  buf[n] = 0;
  return dirname(buf);
}

static int run_cc(const char *cfile, const char *out, const char *opt) {
  const char *dir = runtime_dir();
  const char *cc = getenv("SHDC_CC") ? getenv("SHDC_CC") : "mpicc";
  char inc[4200], lib[4200];
  snprintf(inc, sizeof inc, "-I%s/include", dir);
  snprintf(lib, sizeof lib, "%s/libshdrt.a", dir);
  if (access(lib, R_OK) != 0) {
    fprintf(stderr, "shdc: error: cannot find the runtime library %s (set SHDC_HOME to the build directory)\n", lib);
    return 2;
  }
  /* SHDC_CFLAGS: extra flags for the C compiler (e.g. -march=native, or
   * -Wall -Werror as the tests use to keep the generated C warning-free). */
  const char *argv[64] = {cc, "-std=c11", opt, "-fno-math-errno", inc, "-o", out, cfile, lib, "-lopenblas", "-lm"};
  int argc = 11;
  char *extra = getenv("SHDC_CFLAGS") ? arena_strdup(getenv("SHDC_CFLAGS")) : NULL;
  for (char *tok = extra ? strtok(extra, " \t") : NULL; tok && argc < 62; tok = strtok(NULL, " \t"))
    argv[argc++] = tok;
  argv[argc] = NULL;
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "shdc: error: fork: %s\n", strerror(errno));
    return 2;
  }
  if (pid == 0) {
    execvp(cc, (char *const *)argv);
    fprintf(stderr, "shdc: error: cannot run %s: %s (install Open MPI: apt-get install libopenmpi-dev)\n", cc,
            strerror(errno));
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "shdc: error: the C compiler failed on the generated code %s; this is a bug in shdc\n", cfile);
    return 2;
  }
  return 0;
}

static int do_build(Compilation *c, const Options *o) {
  if (!o->out)
    usage_error("build needs -o PROG");
  char cfile[4200];
  int fd = -1;
  if (o->keep_c) {
    snprintf(cfile, sizeof cfile, "%s.c", o->out);
  } else {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(cfile, sizeof cfile, "%s/shdc-XXXXXX.c", tmp);
    fd = mkstemps(cfile, 2);
    if (fd < 0) {
      fprintf(stderr, "shdc: error: cannot create a temporary file in %s: %s\n", tmp, strerror(errno));
      return 2;
    }
  }
  FILE *f = fd >= 0 ? fdopen(fd, "w") : fopen(cfile, "w");
  if (!f) {
    fprintf(stderr, "shdc: error: cannot write %s: %s\n", cfile, strerror(errno));
    return 2;
  }
  emit_module(f, c->mod, c->src);
  if (fclose(f) != 0) {
    fprintf(stderr, "shdc: error: cannot write %s: %s\n", cfile, strerror(errno));
    return 2;
  }
  int rc = run_cc(cfile, o->out, o->opt ? o->opt : "-O3");
  if (!o->keep_c && rc == 0)
    unlink(cfile);
  return rc;
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
  Pos p = {c->src, 0, 0};
  diag_error(p, "E_NAME", "the program has no `fn main()`, where it starts");
  return false;
}

static int run_one(const Options *o, const char *path) {
  Compilation c;
  memset(&c, 0, sizeof c);
  diag_reset();
  bool ok = front(&c, path, o);
  const char *cmd = o->cmd;
  if (!strcmp(cmd, "check")) {
    /* The collectives the global rules insert for the explicit axes of a
     * partial manual body are known after partitioning; one under a
     * varying condition is a compile-time error ([E_DIVERGE]). */
    if (ok && c.prog->diverge_in_partial_manual)
      ok = middle(&c, true);
    return ok ? 0 : 1;
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
    explain_module(stdout, c.mod, c.src);
    return 0;
  }
  if (!strcmp(cmd, "emit-c")) {
    emit_module(stdout, c.mod, c.src);
    return 0;
  }
  return do_build(&c, o);
}

int main(int argc, char **argv) {
  Options o;
  memset(&o, 0, sizeof o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "-o")) {
      if (++i >= argc)
        usage_error("-o needs a file name");
      o.out = argv[i];
    } else if (!strcmp(a, "--mesh") || !strncmp(a, "--mesh=", 7)) {
      if (a[6] == '=')
        o.mesh = a + 7;
      else if (++i >= argc)
        usage_error("--mesh needs AXIS=N,...");
      else
        o.mesh = argv[i];
      check_mesh_syntax(o.mesh);
    } else if (!strncmp(a, "-O", 2) && strlen(a) == 3 && a[2] >= '0' && a[2] <= '3') {
      o.opt = a;
    } else if (!strcmp(a, "--keep-c")) {
      o.keep_c = true;
    } else if (!strcmp(a, "--global")) {
      o.global_ir = true;
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
  static const char *cmds[] = {"check", "types", "build", "emit-ir", "emit-c", "explain"};
  bool known = false;
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    known |= !strcmp(o.cmd, cmds[i]);
  if (!known)
    usage_error("unknown command '%s'", o.cmd);
  if (o.files.len == 0)
    usage_error("%s needs a FILE", o.cmd);
  if (o.files.len > 1 && strcmp(o.cmd, "check"))
    usage_error("%s takes one FILE", o.cmd);
  int rc = 0;
  for (int i = 0; i < o.files.len; i++) {
    int r = run_one(&o, o.files.data[i]);
    if (r > rc)
      rc = r;
  }
  return rc;
}
