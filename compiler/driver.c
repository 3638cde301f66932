/* driver.c: the shdc pipeline, as straight-line code:
 *
 *   parse -> typecheck -> lower (global IR) -> autodiff -> partition (SPMD IR)
 *         -> optimize -> emit C -> mpicc
 *
 * Each stage reports through diag.c; the driver stops between stages when
 * there were errors. Exit status (fixed): 0 clean, 1 errors in the program,
 * 2 usage, I/O or toolchain trouble (diag_io_error names the cause) and
 * internal errors (diag_ice). The driver checks what it can before any
 * work: inputs are regular files of at most 8 MiB, -o is writable and not
 * an input. build.c compiles and links the C (through the build cache).
 * The language server and explain-error run the front end through it too
 * (drv_analyze, drv_check_text). main.c reads the command line.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

/* An unreadable file is exit status 2; the other files are still checked. */
static SourceFile *cannot_read(const char *path, const char *why) {
  fprintf(stderr, "shdc: error: cannot read %s: %s\n", path, why);
  diagout_tool_error(arena_printf("cannot read %s: %s", path, why));
  return NULL;
}

/* A program is read only from a regular file of at most MAX_SOURCE bytes
 * (files.c): a FIFO would block, a device such as /dev/zero never end. */
#define MAX_SOURCE (8 << 20)

/* `-`: the program on the standard input (an editor's buffer piped to
 * `shdc check -`), named <stdin> in messages; its imports are looked up
 * from the current directory and -I. */
static SourceFile *read_stdin(void) {
  Str text = {0};
  str_read_fd(&text, 0, (size_t)MAX_SOURCE + 1);
  if (text.len > (size_t)MAX_SOURCE)
    return cannot_read("<stdin>", arena_printf("it has more than %d bytes; a program may have at most %d bytes (8 MiB)",
                                               MAX_SOURCE, MAX_SOURCE));
  SourceFile *sf = arena_alloc(sizeof *sf);
  sf->name = "<stdin>";
  sf->len = text.len;
  char *copy = arena_alloc(text.len + 1);
  memcpy(copy, str_cstr(&text), text.len + 1);   /* NULs and all: the lexer reports them */
  sf->text = copy;
  free(text.buf);
  return sf;
}

static SourceFile *read_source(const char *path) {
  if (!strcmp(path, "-"))
    return read_stdin();
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
      diag_usage_error("--mesh: %s has no mesh axis '%.*s' (its axes: %s)", file, len, p, str_cstr(&names));
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
      diag_usage_error("-D: %s has no const '%.*s' (its consts: %s)", file, len, d,
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
  int64_t bucket;      /* the overlap pass's cap (Options.bucket, or the default) */
  bool prefetch;       /* !Options.no_prefetch */
  bool narrow;         /* Options.reduce_bf16 */
} Compilation;

static bool front(Compilation *c, const char *path, const Options *o) {
  c->bucket = o->bucket_given ? o->bucket : OVERLAP_BUCKET;
  c->prefetch = !o->no_prefetch;
  c->narrow = o->reduce_bf16;
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
  bool ad_ok = ad_module(c->mod);
  ir_unique_labels(c->mod);
  if (!ad_ok)
    return false;
  ir_verify(c->mod);
  opt_global(c->mod);
  ir_verify(c->mod);
  if (!partition)
    return true;
  if (!part_module(c->mod) || !diverge_check_calls(c->mod))
    return false;
  ir_verify(c->mod);
  opt_module(c->mod);
  ir_verify(c->mod);
  scatter_accumulators(c->mod);
  ir_verify(c->mod);
  overlap_module(c->mod, c->bucket, c->prefetch, c->narrow);
  ir_verify(c->mod);
  sched_module(c->mod);
  ir_verify(c->mod);
  emit_number_values(c->mod);
  return true;
}

/* ---- build ---------------------------------------------------------------------------- */

/* explain's peak of live arrays in main, which the generated program
 * checks against the host's memory before it runs (0 without a main). */
static int64_t main_peak(const Module *mod) {
  for (int i = 0; i < mod->funcs.len; i++)
    if (((Func *)mod->funcs.data[i])->is_main)
      return explain_func_peak(mod, mod->funcs.data[i]);
  return 0;
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
    diag_io_error("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    diag_io_error("fork: %s", strerror(errno));
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
  str_read_fd(&s, fds[0], SIZE_MAX);
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  *out = s.buf ? s.buf : mem_strdup("");
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
  diag_warn_file(full ? src : NULL);
  c.prog = parse_file(src);
  Vec none = {0};
  bool parsed = c.prog && !diag_error_count();
  if (parsed)
    import_program(c.prog, incdirs ? incdirs : &none);
  diagout_program(c.prog);
  *typed = parsed && (!diag_error_count() || !full);
  if (*typed) {
    if (tc_program(c.prog, &c.mesh, NULL, &none) && full) {
      warn_program(c.prog, &c.mesh);
      middle(&c, c.prog->diverge_in_manual);
    }
  }
  *mesh = c.mesh;
  return c.prog;
}

static int run_source(const Options *o, SourceFile *src, const char *path) {
  Compilation c;
  memset(&c, 0, sizeof c);
  c.src = src;
  const char *cmd = o->cmd;
  diag_warn_file(!strcmp(cmd, "check") || !strcmp(cmd, "build") ? src : NULL);
  bool ok = front(&c, path, o);
  /* check and build warn (warn.c) about a program that type-checks; with
   * -Werror a warning is an error, and build stops there. */
  bool typed = ok || (c.prog && diag_error_count() && diag_error_count() == diag_promoted_count());
  if (typed && (!strcmp(cmd, "check") || !strcmp(cmd, "build"))) {
    warn_program(c.prog, &c.mesh);
    ok = !diag_error_count();
  }
  if (!strcmp(cmd, "check")) {
    /* grad and value_and_grad are expanded on the lowered program; what
     * cannot be differentiated ([E_GRAD]) is a compile-time error too. The
     * collectives the global rules insert for the explicit axes of a
     * partial manual body, and those a call reaches, are known after
     * partitioning; one under a varying condition is a compile-time error
     * ([E_DIVERGE]). */
    if (ok)
      ok = middle(&c, c.prog->diverge_in_manual || o->max_memory);
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
        diag_usage_error("--network: %s", err);
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
  return drv_build(c.mod, c.src, main_peak(c.mod), o);
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
    diag_usage_error("--network: %s", err);
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
