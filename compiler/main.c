/* main.c: the shdc command line: a table of the commands (one row each:
 * its name, what it takes, the function that runs it, its lines of the
 * usage, from which the usage is written), the options every command
 * shares, and the checks of a command line against the table before a
 * command runs (driver.c runs the pipeline). The pipeline, as straight-line
 * code:
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
#include <getopt.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

/* The usage text around the commands, which the table below gives. */
static const char usage_head[] =
    "usage: shdc COMMAND [options] FILE\n"
    "\n"
    "commands:\n";
static const char usage_options[] =
    "\n"
    "options:\n"
    "  --mesh AXIS=N,...      override mesh axis sizes (e.g. --mesh data=2,model=1)\n"
    "  -D NAME=VALUE          override `const NAME` (repeatable; e.g. -D C=256, -D DT=bf16)\n"
    "  -I DIR                 where `import` looks after the importing file's directory\n"
    "                         (repeatable; then the installed library, with std/)\n"
    "  -o PROG, --output=PROG output executable (build); the file the output goes to\n"
    "                         (types, emit-ir, emit-c, explain, show, plan, trace-summary)\n"
    "  -O0 ... -O3            C optimisation level of the build (default -O3, or SHDC_OPT)\n"
    "  --isa=clones|native|baseline\n"
    "                         build: each function for default, avx2 and avx512f, the\n"
    "                         loader choosing (clones, the default, or SHDC_ISA); one\n"
    "                         copy for this machine (native: -march=native); one copy\n"
    "                         for any x86-64 (baseline)\n"
    "  --keep-c               build: keep the generated C next to PROG as PROG.c (that\n"
    "                         one file is compiled, without the build cache)\n"
    "  --global               emit-ir: print the global-view IR (after autodiff)\n"
    "  --network=BW,LATENCY   explain, plan: estimate each collective's time on links of\n"
    "                         this bandwidth and latency (25GB/s,5us), or --network=FILE\n"
    "                         of per-axis links (AXIS BANDWIDTH LATENCY [LABEL] a line)\n"
    "  --bucket=BYTES         build, explain, plan: sum the gradients in buckets of up to\n"
    "                         BYTES, each started as soon as its arrays are final and\n"
    "                         moved while the program computes (default 25MiB; 0: off)\n"
    "  --prefetch=on|off      build, explain, plan: start a layer loop's all-gathers of\n"
    "                         its layer's parameters an iteration ahead (default on)\n"
    "  --reduce-dtype=f32|bf16  build, explain, plan: the dtype the buckets' f32 sums\n"
    "                         move in (bf16: half the bytes, rounded; default f32)\n"
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
    "  --color=WHEN           errors in colour: auto (on a terminal, unless NO_COLOR is\n"
    "                         set; the default), always or never\n"
    "  -Werror                check, build, lsp: warnings are errors (exit 1);\n"
    "                         -Werror=NAME: that one only\n"
    "  -Wno-NAME, -w          check, build, lsp: leave out warning NAME (psum-invariant,\n"
    "                         unused, reshard-roundtrip), or every warning\n"
    "  --help, -h             this text\n"
    "  --version, -V          the version, git revision and runtime ABI\n"
    "\n"
    "FILE - is the standard input; -- ends the options; a long option may be\n"
    "shortened to a prefix that names only it\n"
    "\n"
    "environment: SHDC_CC, SHDC_CFLAGS, SHDC_JOBS, SHDC_OPT, SHDC_ISA, SHDC_HOME;\n"
    "the build cache: SHDC_CACHE=DIR (default ~/.cache/shdc) or off,\n"
    "SHDC_CACHE_SIZE (default 1GiB), SHDC_CACHE_STATS=1 (see man shdc)\n"
    "\n"
    "exit status: 0 clean (warnings too, without -Werror), 1 errors in the program,\n"
    "2 usage, I/O or toolchain trouble\n"
    "each error ends with its code, e.g. [E_CONTRACT]: shdc explain-error E_CONTRACT explains it\n";

/* --mesh data=2,model=1: syntax here, names once the file is parsed. */
static void check_mesh_syntax(const char *m) {
  const char *p = m;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq || eq == p)
      diag_usage_error("--mesh expects AXIS=N,... (e.g. --mesh data=2,model=1), not '%s'", m);
    for (const char *q = m; q < p;) {   /* an axis named twice */
      const char *qe = strchr(q, '=');
      if (qe - q == eq - p && !strncmp(q, p, (size_t)(eq - p)))
        diag_usage_error("--mesh names axis '%.*s' twice", (int)(eq - p), p);
      q = strchr(qe, ',') + 1;
    }
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || v < 1 || v > 1 << 20 || (*end && *end != ','))
      diag_usage_error("--mesh: the size after '%.*s=' must be a positive integer", (int)(eq - p), p);
    p = *end ? end + 1 : end;
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
    diag_usage_error("-D expects NAME=VALUE with NAME a const of the file (e.g. -D C=256), not '%s'", d);
  if (!strcmp(eq + 1, "f32") || !strcmp(eq + 1, "f64") || !strcmp(eq + 1, "bf16"))
    return;   /* a dtype const's (`const DT = f32`): checked against the const once parsed */
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (end == eq + 1 || *end || errno == ERANGE || v < -(1ll << 53) || v > 1ll << 53)
    diag_usage_error("-D %.*s: the value '%s' is not an integer; -D overrides integer consts (e.g. -D %.*s=8) and dtype consts (f32, f64 or bf16)",
                (int)(eq - d), d, eq + 1, (int)(eq - d), d);
}

/* -o must not replace an input, nor anything but a regular file, and its
 * place must be writable: these are the user's mistakes, said before any
 * work is done. */
static void check_output(const char *out, const char *input, const char *what) {
  struct stat so, si;
  bool exists = stat(out, &so) == 0;
  if (!strcmp(out, input) || (exists && stat(input, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino))
    diag_usage_error("%s %s is the input file; choose another name", what, out);
  const char *bad = shd_file_unreplaceable(out);
  if (bad)
    diag_io_error("cannot write %s: %s %s", out, out, bad);
  char *copy = arena_strdup(out);
  const char *dir = dirname(copy);
  if (access(dir, W_OK | X_OK) != 0 || (exists && access(out, W_OK) != 0))
    diag_io_error("cannot write %s: %s", out, strerror(errno));
}

/* -o FILE for the commands that print (types, emit-ir, emit-c, explain,
 * show, plan, trace-summary): the standard output goes to a temporary
 * beside FILE, which replaces FILE only when the command succeeded and
 * every byte was written (safefile.h's rules: no link, FIFO or directory
 * at FILE is followed or replaced). */
static shd_temp stdout_temp;
static const char *stdout_target;   /* until committed or removed */

/* At exit (a usage or I/O error after the redirection exits at once): the
 * temporary of an output never committed goes. */
static void stdout_abandon(void) {
  if (stdout_target && shd_temp_is_ours(&stdout_temp))
    unlink(stdout_temp.path);
  stdout_target = NULL;
}

static void stdout_to_file(const Options *o) {
  if (!o->out)
    return;
  for (int i = 0; i < o->files.len; i++)
    check_output(o->out, o->files.data[i], "-o");
  fflush(stdout);
  int fd = shd_temp_create(&stdout_temp, o->out, "shdc-out");
  if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
    diag_io_error("cannot write %s: %s", stdout_temp.path, strerror(errno));
  close(fd);
  stdout_target = o->out;
  atexit(stdout_abandon);
}

/* rc, or 2 when the output could not be written or committed. */
static int stdout_commit(int rc) {
  const char *target = stdout_target;
  if (!target)
    return rc;
  bool written = fflush(stdout) == 0 && !ferror(stdout) && fsync(STDOUT_FILENO) == 0;
  int err = errno;
  const char *why = NULL;
  if (rc == 0 && written && shd_temp_commit(&stdout_temp, target, &why) == 0) {
    stdout_target = NULL;
    return rc;
  }
  stdout_abandon();
  if (rc == 0) {
    if (!written)
      fprintf(stderr, "shdc: error: cannot write %s: %s\n", target, strerror(err));
    else
      fprintf(stderr, "shdc: error: cannot write %s: %s %s\n", target, target, why);
    rc = 2;
  }
  return rc;
}

/* --isa=VALUE, or SHDC_ISA=VALUE (what names it in the message). */
static Isa parse_isa(const char *v, const char *what) {
  if (!strcmp(v, "clones"))
    return ISA_CLONES;
  if (!strcmp(v, "native"))
    return ISA_NATIVE;
  if (!strcmp(v, "baseline"))
    return ISA_BASELINE;
  diag_usage_error("%s%s%s: expected clones (copies for default, avx2 and avx512f, the default), native "
                  "(-march=native: this machine) or baseline (any x86-64), not '%s'",
                  what, what[0] == '-' ? "" : "=", what[0] == '-' ? "" : v, v);
}

/* build's defaults from the environment, used where the command line says
 * nothing: SHDC_OPT (the level), SHDC_ISA; and the cache's bound,
 * SHDC_CACHE_SIZE. A bad value is a usage error naming the variable. */
static void build_environment(Options *o, bool isa_given) {
  const char *opt = getenv("SHDC_OPT");
  if (opt && *opt) {
    if (strlen(opt) != 3 || strncmp(opt, "-O", 2) || opt[2] < '0' || opt[2] > '3')
      diag_usage_error("SHDC_OPT=%s: expected -O0, -O1, -O2 or -O3 (build's level when the command line gives none)",
                      opt);
    if (!o->opt)
      o->opt = opt;
  }
  const char *isa = getenv("SHDC_ISA");
  if (isa && *isa) {
    Isa v = parse_isa(isa, "SHDC_ISA");
    if (!isa_given)
      o->isa = v;
  }
  o->cache_limit = (int64_t)1 << 30;
  const char *size = getenv("SHDC_CACHE_SIZE");
  if (size && *size && !plan_parse_bytes(size, &o->cache_limit))
    diag_usage_error("SHDC_CACHE_SIZE=%s: expected the build cache's bound in bytes, e.g. 1GiB, 500MB or 2e9", size);
}

/* ---- the command line, as parsed --------------------------------------------------- */

/* The options only some commands take: given to another, a usage error
 * that names the commands taking it (the table's). */
enum {
  OPT_NETWORK = 1,
  OPT_MAX_MEMORY = 2,
  OPT_DEVICES = 4,
  OPT_MEMORY = 8,
  OPT_FLOPS = 16,
  OPT_JSON = 32,
  OPT_ISA = 64,
  OPT_WARN = 128,   /* -W..., -w */
};

typedef struct {
  Options o;
  int max_errors;      /* --max-errors; -1: 100 printed, all in a JSON or SARIF document */
  const char *isa;     /* --isa as given, or NULL */
} CommandLine;

/* ---- the commands ---------------------------------------------------------------------- */

/* What a command takes after its name: no FILE, one FILE, one or more, or
 * (a command that reads its own arguments) anything. */
typedef enum { TAKES_NOTHING, TAKES_ONE_FILE, TAKES_FILES, TAKES_ARGS } Takes;

typedef struct Command {
  const char *name;
  const char *synopsis;    /* what it takes, as the usage writes it after the name */
  const char *help;        /* its lines in the usage; NULL: a developer's command, not listed */
  Takes takes;
  unsigned options;        /* the OPT_ options it takes */
  /* Runs the command on the parsed command line; or (run_args), for
   * explain-error and the developer's commands, which read their own
   * arguments, on argv, when it is the first argument (and, taking
   * nothing, the only one). */
  int (*run)(CommandLine *cl, const struct Command *c);
  int (*run_args)(int argc, char **argv);
} Command;

static int run_pipeline(CommandLine *cl, const Command *c);
static int run_show(CommandLine *cl, const Command *c);
static int run_plan(CommandLine *cl, const Command *c);
static int run_trace_summary(CommandLine *cl, const Command *c);
static int run_lsp(CommandLine *cl, const Command *c);
static int explain_error_main(int argc, char **argv);
static int list_ops_main(int argc, char **argv);
static int sha256_main(int argc, char **argv);

/* One row per command, in the order of the usage. */
static const Command commands[] = {
    {"check", "FILE...", "parse, type-check and differentiate; diagnostics on stderr", TAKES_FILES,
     OPT_MAX_MEMORY | OPT_WARN, run_pipeline, NULL},
    {"types", "FILE", "print FUNCTION.NAME: TYPE for every binding", TAKES_ONE_FILE, 0, run_pipeline, NULL},
    {"show", "FILE [FUNC.NAME...]", "draw which device holds which block of each array", TAKES_FILES, 0, run_show,
     NULL},
    {"build", "FILE -o PROG", "compile to an executable for mpirun", TAKES_ONE_FILE,
     OPT_MAX_MEMORY | OPT_ISA | OPT_WARN, run_pipeline, NULL},
    {"emit-ir", "FILE", "print the SPMD IR after partitioning (--global: before)", TAKES_ONE_FILE, 0, run_pipeline,
     NULL},
    {"emit-c", "FILE", "print the generated C", TAKES_ONE_FILE, 0, run_pipeline, NULL},
    {"explain", "FILE",
     "list every collective inserted, with bytes per rank,\n"
     "and the peak bytes of live arrays per rank",
     TAKES_ONE_FILE, OPT_NETWORK, run_pipeline, NULL},
    {"plan", "FILE --devices=N",
     "every layout of the mesh axes over N devices, ranked by\n"
     "estimated step time, with the peak memory per rank",
     TAKES_ONE_FILE, OPT_NETWORK | OPT_DEVICES | OPT_MEMORY | OPT_FLOPS | OPT_JSON, run_plan, NULL},
    {"trace-summary", "RUN.json",
     "time per category (gemm, elementwise, communication,\n"
     "waiting) and collectives per rank of a SHD_TRACE=RUN.json run",
     TAKES_ONE_FILE, 0, run_trace_summary, NULL},
    {"explain-error", "[CODE]",
     "what an error code means: the rule, a program with the\n"
     "error, its message and the fix (no CODE: list them; --all)",
     TAKES_ARGS, 0, NULL, explain_error_main},
    {"lsp", "",
     "a Language Server Protocol server on stdin/stdout (editors:\n"
     "diagnostics and fixes, hover types, definitions, symbols;\n"
     "-I DIR as for check)",
     TAKES_NOTHING, OPT_WARN, run_lsp, NULL},
    /* the developer's commands: the registry's builtins and IR operations
     * (ops.c), which a test compares with the docs; the build cache's
     * SHA-256 of files */
    {"list-ops", "", NULL, TAKES_NOTHING, 0, NULL, list_ops_main},
    {"sha256", "[FILE...]", NULL, TAKES_ARGS, 0, NULL, sha256_main},
};
enum { NCOMMANDS = sizeof commands / sizeof *commands };

static const Command *command_named(const char *name) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (!strcmp(commands[i].name, name))
      return &commands[i];
  return NULL;
}

/* The usage: each listed command's name and synopsis after two spaces,
 * its help from column HELP_AT (two spaces after a longer synopsis), a
 * line of the help a line of the usage. */
enum { HELP_AT = 25 };
static const char *usage_text(void) {
  static Str s;
  if (s.len)
    return s.buf;
  str_printf(&s, "%s", usage_head);
  for (int i = 0; i < NCOMMANDS; i++) {
    const Command *c = &commands[i];
    if (!c->help)
      continue;
    const char *head = arena_printf("  %s%s%s", c->name, c->synopsis[0] ? " " : "", c->synopsis);
    int width = (int)strlen(head) < HELP_AT ? HELP_AT : (int)strlen(head) + 2;
    str_printf(&s, "%-*s", width, head);
    for (const char *h = c->help; *h;) {
      size_t n = strcspn(h, "\n");
      str_printf(&s, "%*s%.*s\n", h == c->help ? 0 : HELP_AT, "", (int)n, h);
      h += n + (h[n] == '\n');
    }
  }
  str_printf(&s, "%s", usage_options);
  return s.buf;
}

/* The commands that take option opt, in alphabetical order, as a phrase:
 * "build and check". */
static const char *commands_taking(unsigned opt) {
  const char *names[NCOMMANDS];
  int n = 0;
  for (int i = 0; i < NCOMMANDS; i++)
    if (commands[i].options & opt) {
      int k = n++;
      for (; k > 0 && strcmp(names[k - 1], commands[i].name) > 0; k--)
        names[k] = names[k - 1];
      names[k] = commands[i].name;
    }
  Str s = {0};
  for (int i = 0; i < n; i++)
    str_printf(&s, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ", names[i]);
  const char *out = arena_strdup(n ? str_cstr(&s) : "");
  free(s.buf);
  return out;
}

/* Those of the OPT_ options the command line gives. */
static unsigned options_given(const CommandLine *cl) {
  const Options *o = &cl->o;
  return (o->network ? OPT_NETWORK : 0) | (o->max_memory ? OPT_MAX_MEMORY : 0) | (o->devices ? OPT_DEVICES : 0) |
         (o->memory ? OPT_MEMORY : 0) | (o->flops > 0 ? OPT_FLOPS : 0) | (o->json ? OPT_JSON : 0) |
         (cl->isa ? OPT_ISA : 0) | (o->warning_options ? OPT_WARN : 0);
}

/* An option the command does not take: a usage error naming those that do. */
static void check_option(const CommandLine *cl, const Command *c, unsigned opt, const char *name, const char *note) {
  if ((options_given(cl) & opt) && !(c->options & opt))
    diag_usage_error("%s is an option of %s%s", name, commands_taking(opt), note);
}

/* What every command with a FILE checks before it runs: its FILEs, then
 * the options of other commands (--isa is build's own check, later). */
static void check_command_line(const CommandLine *cl, const Command *c) {
  const Options *o = &cl->o;
  if (o->files.len == 0)
    diag_usage_error("%s needs a FILE", c->name);
  if (o->files.len > 1 && c->takes == TAKES_ONE_FILE)
    diag_usage_error("%s takes one FILE", c->name);
  for (int i = 0, dashes = 0; i < o->files.len; i++)
    if (!strcmp(o->files.data[i], "-") && ++dashes > 1)
      diag_usage_error("- (the standard input) is given twice");
  check_option(cl, c, OPT_NETWORK, "--network", "");
  check_option(cl, c, OPT_MAX_MEMORY, "--max-memory", " (plan takes --memory)");
  check_option(cl, c, OPT_DEVICES, "--devices", "");
  check_option(cl, c, OPT_MEMORY, "--memory", "");
  check_option(cl, c, OPT_FLOPS, "--flops", "");
  check_option(cl, c, OPT_JSON, "--json", "");
  check_option(cl, c, OPT_WARN, "-W", " (the other commands give no warnings)");   /* lsp takes no FILE */
}

/* --help and --version: their text, and exit 2 when it could not be
 * written (a full disk, a closed pipe) rather than 0. */
static int print_info(bool version) {
  if (version)
    drv_print_version(stdout);
  else
    fputs(usage_text(), stdout);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "shdc: error: cannot write the %s: %s\n", version ? "version" : "help", strerror(errno));
    return 2;
  }
  return 0;
}

/* ---- the commands that read their own arguments ------------------------------------------ */

/* `shdc explain-error [CODE | --all]`. */
static int explain_error_main(int argc, char **argv) {
  if (argc > 3)
    diag_usage_error("explain-error takes one CODE (or --all), e.g. shdc explain-error E_CONTRACT");
  bool all = argc == 3 && !strcmp(argv[2], "--all");
  if (argc == 3 && !all && argv[2][0] == '-')
    diag_usage_error("unknown option '%s' of explain-error (its only option is --all)", argv[2]);
  int rc = drv_explain_error(argc == 3 && !all ? argv[2] : NULL, all);
  if (stdout_target)
    return stdout_commit(rc);
  if (fflush(stdout) != 0 || ferror(stdout))
    diag_io_error("cannot write the output: %s", strerror(errno));
  return rc;
}

/* `shdc list-ops`, a developer's command: the registry's builtins and IR
 * operations (ops.c), which a test compares with the docs. */
static int list_ops_main(int argc, char **argv) {
  if (op_list(stdout))
    return 0;
  fprintf(stderr, "shdc: error: cannot write the list to stdout: %s\n", strerror(errno));
  return 2;
}

/* `shdc sha256 [FILE...]`, a developer's command (as list-ops is): the
 * build cache's SHA-256 of each file (stdin without one), printed as
 * sha256sum prints, which a test compares it with. */
static int sha256_main(int argc, char **argv) {
  int rc = 0;
  for (int i = 2; i < argc || i == 2; i++) {
    const char *name = i < argc ? argv[i] : "-", *why = NULL;
    FILE *f = i < argc ? file_open_regular(name, 0, &why, NULL) : stdin;
    if (!f) {
      fprintf(stderr, "shdc: error: cannot read %s: %s\n", name, why);
      rc = 2;
      continue;
    }
    Sha256 s;
    sha256_init(&s);
    char buf[65536], hex[65];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
      sha256_update(&s, buf, n);
    if (ferror(f)) {
      fprintf(stderr, "shdc: error: cannot read %s: %s\n", name, strerror(errno));
      rc = 2;
    } else {
      sha256_hex(&s, hex);
      printf("%s  %s\n", hex, name);
    }
    if (f != stdin)
      fclose(f);
  }
  if (fflush(stdout) != 0 || ferror(stdout))
    return 2;
  return rc;
}

/* ---- the commands of the parsed command line --------------------------------------------- */

/* lsp takes no FILE; it reads -I and leaves the other options alone. */
static int run_lsp(CommandLine *cl, const Command *c) {
  if (cl->o.files.len)
    diag_usage_error("lsp takes no FILE: it talks the Language Server Protocol on stdin and stdout");
  return lsp_main(&cl->o.incdirs);
}

static int run_plan(CommandLine *cl, const Command *c) {
  if (!cl->o.devices)
    diag_usage_error("plan needs --devices=N, the number of devices to lay the mesh over");
  stdout_to_file(&cl->o);
  return stdout_commit(drv_plan(&cl->o, cl->o.files.data[0]));
}

static int run_trace_summary(CommandLine *cl, const Command *c) {
  stdout_to_file(&cl->o);
  return stdout_commit(tsum_run(cl->o.files.data[0]));
}

static int run_show(CommandLine *cl, const Command *c) {
  stdout_to_file(&cl->o);
  int r = drv_run_one(&cl->o, cl->o.files.data[0]);
  diag_finish();
  return stdout_commit(r);
}

/* check, types, build, emit-ir, emit-c, explain: each FILE through the
 * pipeline (driver.c), with the outputs and build's settings checked
 * first. */
static int run_pipeline(CommandLine *cl, const Command *c) {
  Options *o = &cl->o;
  bool check = !strcmp(c->name, "check"), build = !strcmp(c->name, "build");
  if (o->out && check && o->diagnostics == DIAG_PLAIN)
    diag_usage_error("check -o FILE writes a diagnostics document: add --diagnostics=json or --diagnostics=sarif");
  if (o->out && (build || check))
    for (int i = 0; i < o->files.len; i++)
      check_output(o->out, o->files.data[i], "-o");
  check_option(cl, c, OPT_ISA, "--isa", "");
  if (build) {
    build_environment(o, cl->isa != NULL);
    if (!o->out)
      diag_usage_error("build needs -o PROG");
    if (o->keep_c)
      check_output(arena_printf("%s.c", o->out), o->files.data[0], "--keep-c's");
  } else if (!check) {
    stdout_to_file(o);
  }
  int max_errors = cl->max_errors >= 0 ? cl->max_errors : o->diagnostics == DIAG_PLAIN ? 100 : 0;
  diag_set_max_errors(max_errors);
  diagout_start(o->diagnostics);
  int rc = 0;
  for (int i = 0; i < o->files.len; i++) {
    int r = drv_run_one(o, o->files.data[i]);
    diag_finish();
    int hidden = diag_errors_not_shown();
    if (hidden)
      fprintf(stderr, "shdc: %s: %d more error%s not shown (--max-errors=%d; --max-errors=0 shows all)\n",
              (const char *)o->files.data[i], hidden, hidden == 1 ? "" : "s", max_errors);
    if (r > rc)
      rc = r;
  }
  if (o->diagnostics != DIAG_PLAIN && !drv_write_diagnostics(o))
    rc = 2;
  if (stdout_target)
    return stdout_commit(rc);
  if (fflush(stdout) != 0 || ferror(stdout))
    diag_io_error("cannot write the output: %s", strerror(errno));
  return rc;
}

/* ---- the options, shared by every command ------------------------------------------------ */

/* getopt_long's conventions: `--mesh X=2` or `--mesh=X=2`, `-o PROG` or
 * `-oPROG`, options before and after the FILEs, `--` ends the options and
 * `-` is the standard input as a FILE; a long option may be shortened to
 * any prefix that names only it. */
enum {
  LO_MESH = 256, LO_ISA, LO_KEEP_C, LO_GLOBAL, LO_NETWORK, LO_MAX_MEMORY, LO_MEMORY, LO_JSON, LO_DEVICES,
  LO_FLOPS, LO_DIAGNOSTICS, LO_MAX_ERRORS, LO_COLOR, LO_BUCKET, LO_PREFETCH, LO_REDUCE_DTYPE,
};

static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"output", required_argument, NULL, 'o'},
    {"mesh", required_argument, NULL, LO_MESH},
    {"isa", required_argument, NULL, LO_ISA},
    {"keep-c", no_argument, NULL, LO_KEEP_C},
    {"global", no_argument, NULL, LO_GLOBAL},
    {"network", required_argument, NULL, LO_NETWORK},
    {"max-memory", required_argument, NULL, LO_MAX_MEMORY},
    {"memory", required_argument, NULL, LO_MEMORY},
    {"json", no_argument, NULL, LO_JSON},
    {"devices", required_argument, NULL, LO_DEVICES},
    {"flops", required_argument, NULL, LO_FLOPS},
    {"diagnostics", required_argument, NULL, LO_DIAGNOSTICS},
    {"max-errors", required_argument, NULL, LO_MAX_ERRORS},
    {"color", required_argument, NULL, LO_COLOR},
    {"bucket", required_argument, NULL, LO_BUCKET},
    {"prefetch", required_argument, NULL, LO_PREFETCH},
    {"reduce-dtype", required_argument, NULL, LO_REDUCE_DTYPE},
    {NULL, 0, NULL, 0},
};
#define SHORT_OPTIONS ":ho:D:I:O:VW:w"

/* What an option's value is, for "needs" messages. */
static const char *option_value(int opt) {
  switch (opt) {
  case 'o': return "-o needs a file name";
  case 'D': return "-D needs NAME=VALUE (e.g. -D C=256)";
  case 'I': return "-I needs a directory (e.g. -I lib)";
  case 'O': return "-O needs a level: -O0, -O1, -O2 or -O3";
  case 'W': return "-W needs a warning option: -Werror, -Wno-NAME";
  case LO_MESH: return "--mesh needs AXIS=N,...";
  case LO_ISA: return "--isa needs clones, native or baseline";
  case LO_NETWORK: return "--network needs BANDWIDTH,LATENCY or a file";
  case LO_MAX_MEMORY: return "--max-memory needs a number of bytes, e.g. 80GB";
  case LO_MEMORY: return "--memory needs a number of bytes, e.g. 80GB";
  case LO_DEVICES: return "--devices needs a count, e.g. --devices=8";
  case LO_FLOPS: return "--flops needs FLOP/s per device, e.g. --flops=100G";
  case LO_BUCKET: return "--bucket needs a number of bytes, e.g. 25MiB (0: no buckets, no overlap)";
  case LO_PREFETCH: return "--prefetch needs on or off";
  case LO_REDUCE_DTYPE: return "--reduce-dtype needs f32 or bf16";
  case LO_DIAGNOSTICS: return "--diagnostics needs plain, json or sarif";
  case LO_COLOR: return "--color needs auto, always or never";
  default: return "--max-errors needs a count, e.g. --max-errors=20";
  }
}

/* An option that takes one value, given twice: the second would silently
 * win, so it is refused (as a second -o always was). */
static void once(unsigned *seen, int opt) {
  unsigned bit = 1u << (opt >= 256 ? opt - 256 + 2 : opt == 'o' ? 0 : 1);
  if (*seen & bit) {
    if (opt == LO_MESH)
      diag_usage_error("--mesh is given twice; name every axis in one --mesh AXIS=N,...");
    const struct option *lo = long_options;
    while (lo->name && lo->val != opt)
      lo++;
    diag_usage_error("%s is given twice", opt == 'o' ? "-o" : opt == 'O' ? "-O" : arena_printf("--%s", lo->name));
  }
  *seen |= bit;
}

/* An option getopt_long did not take: unknown (with the nearest name),
 * a prefix of several, a value where it takes none. */
static void bad_option(const char *arg) {
  if (arg[0] != '-' || arg[1] != '-')
    diag_usage_error("unknown option '%s'", arg);
  const char *name = arg + 2;
  size_t len = strcspn(name, "=");
  const char *near = NULL;
  int best = 3, prefix_of = 0;
  Str all = {0};
  for (const struct option *lo = long_options; lo->name; lo++) {
    if (!strncmp(lo->name, name, len) && strlen(lo->name) > len) {
      str_printf(&all, "%s--%s", prefix_of++ ? ", " : "", lo->name);
    } else if (strlen(lo->name) == len && !strncmp(lo->name, name, len) && lo->has_arg == no_argument) {
      diag_usage_error("--%s takes no value, not '%s'", lo->name, name + len + 1);
    }
    char *n = arena_strdup(name);
    n[len] = 0;
    int d = str_distance(n, lo->name, best);
    if (d < best && d < (int)len) {
      best = d;
      near = lo->name;
    }
  }
  if (prefix_of > 1)
    diag_usage_error("option '--%.*s' is ambiguous: %s", (int)len, name, str_cstr(&all));
  if (near)
    diag_usage_error("unknown option '--%.*s'; did you mean '--%s'?", (int)len, name, near);
  diag_usage_error("unknown option '--%.*s'", (int)len, name);
}

/* --max-memory=BYTES or --memory=BYTES. */
static void take_bytes(Options *o, int opt, const char *v) {
  int64_t bytes;
  const char *name = opt == LO_MAX_MEMORY ? "--max-memory" : "--memory";
  if (!plan_parse_bytes(v, &bytes))
    diag_usage_error("%s expects a number of bytes, e.g. 80GB, 80GiB, 512MiB or 1.5e9, not '%s'", name, v);
  if (opt == LO_MAX_MEMORY) {
    o->max_memory = v;
    o->max_memory_bytes = bytes;
  } else {
    o->memory = v;
    o->memory_bytes = bytes;
  }
}

static void take_count(const char *name, const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno == ERANGE || n < lo || n > hi)
    diag_usage_error("%s expects a count from %lld%s to %lld, not '%s'", name, lo, lo ? "" : " (no limit)", hi, v);
  *out = n;
}

static void take_flops(Options *o, const char *v) {
  char *f = arena_strdup(v), *comma = strchr(f, ',');
  if (comma)
    *comma = 0;
  if (!plan_parse_flops(f, &o->flops) || (comma && !plan_parse_flops(comma + 1, &o->ew_flops)))
    diag_usage_error("--flops expects FLOP/s per device from 1 to 1e21, e.g. 100G, 1.5TFLOP/s or 5e10, and "
                     "optionally a second rate for elementwise work (--flops=100G,20G), not '%s'", v);
}

static void take_diagnostics(Options *o, const char *f) {
  if (!strcmp(f, "plain"))
    o->diagnostics = DIAG_PLAIN;
  else if (!strcmp(f, "json"))
    o->diagnostics = DIAG_JSON;
  else if (!strcmp(f, "sarif"))
    o->diagnostics = DIAG_SARIF;
  else
    diag_usage_error("--diagnostics is plain, json or sarif, not '%s'", f);
}

/* One option getopt_long returned, and its value v. */
static void take_option(CommandLine *cl, int opt, const char *v) {
  Options *o = &cl->o;
  long long n;
  switch (opt) {
  case 'o': o->out = v; break;
  case 'D': check_define_syntax(v); vec_push(&o->defines, (void *)v); break;
  case 'I': vec_push(&o->incdirs, (void *)v); break;
  case 'W': {
    const char *err = diag_warning_option(v);
    if (err)
      diag_usage_error("%s", err);
    o->warning_options = true;
    break;
  }
  case 'w': diag_warnings_off(true); o->warning_options = true; break;
  case 'O':
    if (strlen(v) != 1 || v[0] < '0' || v[0] > '3')
      diag_usage_error("-O expects a level from 0 to 3 (-O0 ... -O3), not '-O%s'", v);
    o->opt = arena_printf("-O%s", v);
    break;
  case LO_MESH: o->mesh = v; check_mesh_syntax(v); break;
  case LO_ISA: cl->isa = v; o->isa = parse_isa(v, "--isa"); break;
  case LO_KEEP_C: o->keep_c = true; break;
  case LO_GLOBAL: o->global_ir = true; break;
  case LO_NETWORK: {
    o->network = v;
    const char *err = net_parse(&o->net, v);
    if (err)
      diag_usage_error("--network: %s", err);
    break;
  }
  case LO_MAX_MEMORY: case LO_MEMORY: take_bytes(o, opt, v); break;
  case LO_JSON: o->json = true; break;
  case LO_BUCKET:
    o->bucket = 0;
    if (strcmp(v, "0") != 0 && !plan_parse_bytes(v, &o->bucket))
      diag_usage_error("--bucket expects a number of bytes, e.g. 25MiB, 4MB or 0 (off), not '%s'", v);
    o->bucket_given = true;
    break;
  case LO_PREFETCH:
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
      diag_usage_error("--prefetch expects on or off, not '%s'", v);
    o->no_prefetch = !strcmp(v, "off");
    break;
  case LO_REDUCE_DTYPE:
    if (strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0)
      diag_usage_error("--reduce-dtype expects f32 or bf16 (the dtype the buckets' f32 sums move in), not '%s'", v);
    o->reduce_bf16 = !strcmp(v, "bf16");
    break;
  case LO_DEVICES: take_count("--devices", v, 1, 1 << 20, &n); o->devices = n; break;
  case LO_FLOPS: take_flops(o, v); break;
  case LO_DIAGNOSTICS: take_diagnostics(o, v); break;
  case LO_MAX_ERRORS:
    take_count("--max-errors", v, 0, 1000000, &n);
    cl->max_errors = (int)n;
    break;
  case LO_COLOR:
    if (strcmp(v, "auto") && strcmp(v, "always") && strcmp(v, "never"))
      diag_usage_error("--color is auto (on a terminal, unless NO_COLOR is set), always or never, not '%s'", v);
    diag_set_color(!strcmp(v, "always") ? DIAG_COLOR_ALWAYS : !strcmp(v, "never") ? DIAG_COLOR_NEVER : DIAG_COLOR_AUTO);
    break;
  }
}

/* The options and the command's word from argv into cl; the first word
 * that is not an option is the command, the others its FILEs. --help and
 * --version end the parse: their exit status, else -1. */
static int parse_command_line(int argc, char **argv, CommandLine *cl) {
  unsigned seen = 0;
  opterr = 0;
  optind = 1;
  for (;;) {
    int opt = getopt_long(argc, argv, SHORT_OPTIONS, long_options, NULL);
    if (opt == -1)
      break;
    if (opt == 'h')
      return print_info(false);
    if (opt == 'V')
      return print_info(true);
    if (opt == ':')
      diag_usage_error("%s", option_value(optopt));
    if (opt == '?') {
      const char *a = argv[optind - 1];
      bad_option(optopt && optopt < 256 && strncmp(a, "--", 2) ? arena_printf("-%c", optopt) : a);
    }
    if (opt != 'D' && opt != 'I' && opt != 'W' && opt != 'w' && opt != LO_KEEP_C && opt != LO_GLOBAL && opt != LO_JSON)
      once(&seen, opt);
    take_option(cl, opt, optarg);
  }
  for (int i = optind; i < argc; i++) {
    if (!cl->o.cmd && !strcmp(argv[i], "help"))
      return print_info(false);
    if (!cl->o.cmd)
      cl->o.cmd = argv[i];
    else
      vec_push(&cl->o.files, argv[i]);
  }
  return -1;
}

static int drv_main(int argc, char **argv) {
  const Command *c = argc >= 2 ? command_named(argv[1]) : NULL;
  if (c && c->run_args && (c->takes != TAKES_NOTHING || argc == 2))
    return c->run_args(argc, argv);
  CommandLine cl;
  memset(&cl, 0, sizeof cl);
  cl.max_errors = -1;
  int rc = parse_command_line(argc, argv, &cl);
  if (rc >= 0)
    return rc;
  if (cl.o.reduce_bf16 && cl.o.bucket_given && cl.o.bucket == 0)
    diag_usage_error("--reduce-dtype=bf16 sends the buckets' sums as bf16, and --bucket=0 turns the buckets off: "
                     "give one of them");
  if (!cl.o.cmd) {
    fputs(usage_text(), stderr);
    return 2;
  }
  c = command_named(cl.o.cmd);
  if (!c || !c->run)
    diag_usage_error("unknown command '%s'", cl.o.cmd);
  if (c->takes != TAKES_NOTHING)
    check_command_line(&cl, c);
  return c->run(&cl, c);
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
