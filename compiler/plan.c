/* plan.c: `shdc plan FILE --devices=N`, the layouts of a program over N
 * devices ranked by estimated step time, before any job is queued.
 *
 * A layout is an assignment of sizes to the mesh axes of the file whose
 * product is N (axes that --mesh names keep the size given). The driver
 * (main.c) compiles the program for each one through the whole pipeline,
 * in a child process per layout (the compiler never frees its memory);
 * one that does not type-check (a dim not divisible by its axes, a
 * contraction the layout makes ambiguous) is listed with its first error.
 * For the others the estimate is, per rank:
 *
 *   compute        the FLOPs of the contractions (2 M N K of each local
 *                  product, attention's products) at --flops, and of the
 *                  elementwise work (one operation per element of each
 *                  elementwise result and of each reduction's operand, two
 *                  in bf16; a bf16 product's conversions) at the second
 *                  rate of --flops: each family's OpDef.work;
 *   communication  explain --network's cost of each collective
 *                  (net_collective_seconds, the same code) and its bytes
 *                  (net_bytes_sent);
 *   memory         explain's peak of live arrays (explain_func_peak), to
 *                  compare with --memory.
 *
 * The step is one iteration of main's costliest loop (the one with the most
 * contraction FLOPs: a training loop, not a generation loop), calls
 * included; a loop with constant bounds counts its trips, one with run-time
 * bounds once; an if counts its cheaper branch: one step takes one path,
 * and the work a training step does only now and then (validation,
 * checkpoints, logging) is under an if (explain --network's per-step line
 * counts both branches, an upper bound). Compute and
 * communication are added, except a bucket's (--bucket: overlap.c), which
 * counts only what the work between its start and its wait does not hide
 * (overlap_work: for a loop's bucket, one iteration of the body). Per-function costs are summed callees first
 * over the call graph, without recursion.
 */
#include <errno.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shdc.h"

/* ---- units -------------------------------------------------------------------------- */

/* A count with a decimal (k M G T P E) or binary (Ki Mi Gi Ti Pi Ei) prefix;
 * the unit after it is left in *rest. */
static bool scaled(const char *s, double *out, const char **rest) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0)
    return false;
  static const char pre[] = "kMGTPE";
  const char *p = *end ? strchr(pre, *end == 'K' ? 'k' : *end) : NULL;
  if (p) {
    int e = (int)(p - pre) + 1;
    end++;
    if (*end == 'i') {
      v *= pow(1024, e);
      end++;
    } else {
      v *= pow(1000, e);
    }
  }
  *out = v;
  *rest = end;
  return isfinite(v);
}

bool plan_parse_bytes(const char *s, int64_t *out) {
  double v;
  const char *rest;
  if (!scaled(s, &v, &rest) || (*rest && strcmp(rest, "B")) || v < 1 || v >= 9.2e18 || v != floor(v))
    return false;
  *out = (int64_t)v;
  return true;
}

/* The rates --flops may give, as --network's links are bounded: anything
 * outside is a typo (a unit forgotten), and would make estimates of inf
 * seconds or hundreds of digits. */
#define MIN_FLOPS 1.0
#define MAX_FLOPS 1e21

bool plan_parse_flops(const char *s, double *out) {
  double v;
  const char *rest;
  if (!scaled(s, &v, &rest) || !(v >= MIN_FLOPS && v <= MAX_FLOPS))
    return false;
  if (*rest && strcmp(rest, "FLOP/s") && strcmp(rest, "flop/s") && strcmp(rest, "FLOPS") && strcmp(rest, "flops"))
    return false;
  *out = v;
  return true;
}

static const char *flops_str(double f) {
  return f >= 1e12 ? arena_printf("%g TFLOP/s", f / 1e12) : f >= 1e9 ? arena_printf("%g GFLOP/s", f / 1e9)
                                                                     : arena_printf("%g FLOP/s", f);
}

static const char *mem_str(int64_t b) {
  return b >= 1 << 30 ? arena_printf("%.1f GiB", (double)b / (1 << 30))
         : b >= 1 << 20 ? arena_printf("%.1f MiB", (double)b / (1 << 20))
         : b >= 1 << 10 ? arena_printf("%.1f KiB", (double)b / (1 << 10)) : arena_printf("%lld B", (long long)b);
}

/* ---- the cost of code ------------------------------------------------------------------ */

typedef struct {
  double dot, ew;       /* FLOPs per rank: contractions, elementwise work */
  double comm, bytes;   /* seconds and bytes sent per rank */
  double colls;
  bool approx;          /* a loop with run-time bounds counted once */
} Cost;

typedef struct {
  const Module *mod;
  const NetModel *net;
  double flops, ew_flops;
  PtrMap index;         /* Func * -> its index */
  Cost *incl;           /* by function index: a call's cost, callees included */
} Walk;

static double secs(const Walk *w, const Cost *c) { return c->dot / w->flops + c->ew / w->ew_flops + c->comm; }

static void cost_add(Cost *to, const Cost *c, double times) {
  to->dot += times * c->dot;
  to->ew += times * c->ew;
  to->comm += times * c->comm;
  to->bytes += times * c->bytes;
  to->colls += times * c->colls;
  to->approx |= c->approx;
}

static void inst_cost(const Walk *w, const Inst *in, Cost *c) {
  const OpDef *d = op_def(in->op);
  if (d && (d->flags & OPF_COLLECTIVE)) {
    const char *algo;
    double t = net_collective_seconds(w->net, w->mod, in, &algo);
    if (ir_is_async_start(in->op)) {   /* a bucket: what its work before the wait does not hide */
      double dot, ew;
      overlap_work(w->mod, in, &dot, &ew);
      double hidden = dot / w->flops + ew / w->ew_flops;
      t = t > hidden ? t - hidden : 0;
    }
    c->comm += t;
    c->bytes += (double)net_bytes_sent(w->mod, in);
    c->colls += 1;
  } else {
    op_work(w->mod, in, &c->dot, &c->ew);
  }
}

/* Nested blocks recurse (their depth is bounded by the parser); calls take
 * the callee's cost, computed before (callees first); an if its cheaper
 * branch. */
static void block_cost(const Walk *w, const IrBlock *b, double times, Cost *c, double trips) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op == IR_CALL) {
      int k = ptrmap_get(&w->index, in->callee);
      if (k >= 0)
        cost_add(c, &w->incl[k], times);
    } else if (in->op == IR_FOR) {
      int64_t t;
      bool known = ir_const_trips(in, &t);
      double n = known ? (double)t : 1;
      c->approx |= !known;
      block_cost(w, in->regions[0], times * n, c, n);
    } else if (in->op == IR_IF) {
      Cost br[2];
      memset(br, 0, sizeof br);
      for (int r = 0; r < in->nregions && r < 2; r++)
        block_cost(w, in->regions[r], times, &br[r], trips);
      cost_add(c, secs(w, &br[0]) <= secs(w, &br[1]) ? &br[0] : &br[1], 1);
    } else {
      Cost one = {0};
      inst_cost(w, in, &one);
      cost_add(c, &one, trips >= 1 ? times / trips * overlap_runs(in, trips) : times);   /* a prefetch: one less */
    }
  }
}

/* ---- one layout ----------------------------------------------------------------------- */

typedef struct {
  int sizes[MAX_AXES];
  const char *mesh;     /* data=4,model=2 */
  const char *error;    /* the first error when it does not type-check */
  Cost step;
  double secs;
  int step_line;        /* the loop of main; 0: all of main */
  int64_t peak;
  int nf;
  const char **fnames;
  double *fsecs;        /* per call, callees included */
} Row;

static void measure(const Walk *w0, const Module *mod, Row *row) {
  Walk w = *w0;
  w.mod = mod;
  int nf = mod->funcs.len;
  CallGraph g;
  ir_call_graph(mod, nf, &g);
  w.index = g.index;
  w.incl = mem_calloc((size_t)nf + 1, sizeof(Cost));
  for (int k = 0; k < nf; k++) {
    int f = g.order[k];
    block_cost(&w, ((const Func *)mod->funcs.data[f])->body, 1, &w.incl[f], 0);
  }
  row->nf = nf;
  row->fnames = arena_alloc(sizeof(char *) * (size_t)(nf + 1));
  row->fsecs = arena_alloc(sizeof(double) * (size_t)(nf + 1));
  const Func *mainf = NULL;
  for (int f = 0; f < nf; f++) {
    const Func *fn = mod->funcs.data[f];
    row->fnames[f] = ir_func_label(fn);
    row->fsecs[f] = secs(&w, &w.incl[f]);
    if (fn->is_main)
      mainf = fn;
  }
  Cost step = {0};
  if (mainf) {
    row->peak = explain_func_peak(mod, mainf);
    step = w.incl[ptrmap_get(&w.index, mainf)];
    double most = -1;
    for (int i = 0; i < mainf->body->insts.len; i++) {
      const Inst *in = mainf->body->insts.data[i];
      if (in->op != IR_FOR)
        continue;
      Cost it = {0};
      block_cost(&w, in->regions[0], 1, &it, 0);
      if (it.dot > most) {
        most = it.dot;
        step = it;
        row->step_line = in->pos.line;
      }
    }
  } else {   /* a file without main: each function no other calls, once */
    for (int f = 0; f < nf; f++) {
      int64_t p = explain_func_peak(mod, mod->funcs.data[f]);
      row->peak = p > row->peak ? p : row->peak;
      bool called = false;
      for (int e = 0; e < g.first[nf] && !called; e++)
        called = g.to[e] == f;
      if (!called)
        cost_add(&step, &w.incl[f], 1);
    }
  }
  row->step = step;
  row->secs = secs(&w, &step);
  free(w.incl);
  ir_call_graph_free(&g);
}

/* ---- one layout in a process of its own ------------------------------------------------ */

/* A child compiles and measures one layout and sends the row back as text:
 * the compiler's memory is never freed (arena.c), and a thousand layouts of
 * a large program must not add up; an internal error in one layout is then
 * that layout's verdict, not the end of the plan. Lines: `error TEXT`, or
 * `row` and the figures, then `fn NAME SECONDS` per function. */
static void send_row(FILE *f, const Row *r) {
  if (r->error) {
    fputs("error ", f);
    for (const char *c = r->error; *c; c++)
      fputc(*c == '\n' ? ' ' : *c, f);
    fputc('\n', f);
    return;
  }
  fprintf(f, "row %.17g %.17g %.17g %.17g %.17g %d %.17g %d %lld %d\n", r->step.dot, r->step.ew, r->step.comm,
          r->step.bytes, r->step.colls, r->step.approx, r->secs, r->step_line, (long long)r->peak, r->nf);
  for (int k = 0; k < r->nf; k++)
    fprintf(f, "fn %s %.17g\n", r->fnames[k], r->fsecs[k]);
}

static bool read_row(FILE *f, Row *r) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int k = 0, approx = 0;
  long long peak = 0;
  bool ok = false;
  while ((n = getline(&line, &cap, f)) > 0) {
    if (line[n - 1] == '\n')
      line[--n] = 0;
    if (!strncmp(line, "error ", 6)) {
      r->error = arena_strdup(line + 6);
      ok = true;
    } else if (sscanf(line, "row %lf %lf %lf %lf %lf %d %lf %d %lld %d", &r->step.dot, &r->step.ew, &r->step.comm,
                      &r->step.bytes, &r->step.colls, &approx, &r->secs, &r->step_line, &peak, &r->nf) == 10 &&
               r->nf >= 0) {
      r->step.approx = approx;
      r->peak = peak;
      r->fnames = arena_alloc(sizeof(char *) * (size_t)(r->nf + 1));
      r->fsecs = arena_alloc(sizeof(double) * (size_t)(r->nf + 1));
      ok = true;
    } else if (!strncmp(line, "fn ", 3) && k < r->nf) {
      char *sp = strrchr(line + 3, ' ');
      if (sp) {
        r->fnames[k] = arena_strndup(line + 3, (size_t)(sp - line - 3));
        r->fsecs[k++] = strtod(sp + 1, NULL);
      }
    }
  }
  free(line);
  return ok && (r->error || k == r->nf);
}

/* Compiles r's layout and fills its row, or its error. */
static void compile_and_measure(const PlanArgs *a, const Walk *w, Row *r) {
  const char *err = NULL;
  const Module *mod = a->compile(a->ctx, r->mesh, &err);
  if (!mod)
    r->error = err ? err : "does not compile";
  else
    measure(w, mod, r);
}

static void layout(const Walk *w, const PlanArgs *a, Row *r) {
  int fds[2];
  fflush(stdout);   /* a child that exits must not write the parent's buffers again */
  fflush(stderr);
  pid_t pid = pipe(fds) == 0 ? fork() : -1;
  if (pid == 0) {
    close(fds[0]);
    FILE *f = fdopen(fds[1], "w");
    compile_and_measure(a, w, r);
    if (f)
      send_row(f, r);
    _exit(f && fclose(f) == 0 ? 0 : 3);
  }
  if (pid < 0) {   /* no process to be had: compile it here */
    compile_and_measure(a, w, r);
    return;
  }
  close(fds[1]);
  FILE *f = fdopen(fds[0], "r");
  bool got = f && read_row(f, r);
  if (f)
    fclose(f);
  else
    close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    r->error = arena_printf("internal compiler error while compiling this layout (%s %d; its message is above)",
                            WIFSIGNALED(status) ? "signal" : "exit status",
                            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* ---- every layout --------------------------------------------------------------------- */

typedef struct {
  const PlanArgs *a;
  Row *rows;
  int n, cap;
} Plan;

static const char *mesh_text(const PlanArgs *a, const int *sizes) {
  Str s = {0};
  for (int i = 0; i < a->naxes; i++)
    str_printf(&s, "%s%s=%d", i ? "," : "", a->names[i], sizes[i]);
  const char *t = arena_strdup(str_cstr(&s));
  free(s.buf);
  return t;
}

/* Ordered factorisations of n over the free axes from axis i on; false
 * when there are more than PLAN_MAX_LAYOUTS. */
static bool enumerate(Plan *p, int *sizes, int i, int64_t n) {
  const PlanArgs *a = p->a;
  if (i == a->naxes) {
    if (n != 1)
      return true;
    p->rows = mem_grow(p->rows, &p->cap, p->n + 1, sizeof *p->rows);
    Row *r = &p->rows[p->n++];
    memset(r, 0, sizeof *r);
    memcpy(r->sizes, sizes, sizeof(int) * MAX_AXES);
    r->mesh = mesh_text(a, sizes);
    return p->n <= PLAN_MAX_LAYOUTS;
  }
  if (a->fixed[i]) {
    sizes[i] = a->fixed[i];
    return n % a->fixed[i] != 0 || enumerate(p, sizes, i + 1, n / a->fixed[i]);
  }
  for (int64_t d = 1; d <= n; d++)
    if (n % d == 0) {
      sizes[i] = (int)d;
      if (!enumerate(p, sizes, i + 1, n / d))
        return false;
    }
  return true;
}

/* Fits first, then by estimated time; those that do not type-check last. */
static const Plan *g_sort_plan;
static int row_order(const void *x, const void *y) {
  const Row *a = x, *b = y;
  int64_t mem = g_sort_plan->a->memory;
  int ka = a->error ? 2 : mem && a->peak > mem, kb = b->error ? 2 : mem && b->peak > mem;
  if (ka != kb)
    return ka - kb;
  if (!a->error && a->secs != b->secs)
    return a->secs < b->secs ? -1 : 1;
  return strcmp(a->mesh, b->mesh);
}

static double fn_secs(const Row *r, const char *name) {
  for (int f = 0; f < r->nf; f++)
    if (!strcmp(r->fnames[f], name))
      return r->fsecs[f];
  return NAN;
}

static void print_table(FILE *out, const Plan *p, int ok) {
  const PlanArgs *a = p->a;
  int w = 4;
  for (int i = 0; i < ok; i++)
    w = (int)strlen(p->rows[i].mesh) > w ? (int)strlen(p->rows[i].mesh) : w;
  fprintf(out, "\n%3s  %-*s  %10s  %10s  %10s  %11s  %12s  %10s%s\n", "#", w, "mesh", "step", "compute",
          "comm", "collectives", "bytes/rank", "peak/rank", a->memory ? "  fits" : "");
  for (int i = 0; i < ok; i++) {
    const Row *r = &p->rows[i];
    const char *fits = !a->memory ? "" : r->peak <= a->memory ? "yes"
                       : arena_printf("no: %s over", mem_str(r->peak - a->memory));
    fprintf(out, "%3d  %-*s  %10s  %10s  %10s  %11.0f  %12.0f  %10s%s%s\n", i + 1, w, r->mesh,
            net_seconds_str(r->secs), net_seconds_str(r->step.dot / a->flops + r->step.ew / a->ew_flops),
            net_seconds_str(r->step.comm), r->step.colls, r->step.bytes, mem_str(r->peak), *fits ? "  " : "", fits);
  }
}

/* Each function's time per call in the best layouts, as columns. */
static void print_functions(FILE *out, const Plan *p, int ok) {
  int cols = ok < PLAN_FN_COLUMNS ? ok : PLAN_FN_COLUMNS;
  if (!cols)
    return;
  const Row *best = &p->rows[0];
  int w = 2;
  for (int f = 0; f < best->nf; f++)
    w = (int)strlen(best->fnames[f]) > w ? (int)strlen(best->fnames[f]) : w;
  fprintf(out, "\nper function: estimated time of one call, callees included (the %d fastest layout%s):\n%-*s",
          cols, cols == 1 ? "" : "s", w, "fn");
  for (int c = 0; c < cols; c++)
    fprintf(out, "  %*s", (int)strlen(p->rows[c].mesh) > 10 ? (int)strlen(p->rows[c].mesh) : 10, p->rows[c].mesh);
  fputc('\n', out);
  int zero = 0;
  for (int f = 0; f < best->nf; f++) {
    bool any = false;
    for (int c = 0; c < cols; c++)
      any |= fn_secs(&p->rows[c], best->fnames[f]) > 0;
    if (!any) {   /* no contraction, elementwise work or collective */
      zero++;
      continue;
    }
    fprintf(out, "%-*s", w, best->fnames[f]);
    for (int c = 0; c < cols; c++) {
      double s = fn_secs(&p->rows[c], best->fnames[f]);
      int cw = (int)strlen(p->rows[c].mesh) > 10 ? (int)strlen(p->rows[c].mesh) : 10;
      fprintf(out, "  %*s", cw, isnan(s) ? "-" : net_seconds_str(s));
    }
    fputc('\n', out);
  }
  if (zero)
    fprintf(out, "(%d function%s without contractions, elementwise work or collectives left out)\n", zero,
            zero == 1 ? "" : "s");
}

/* ", "NAME": V, V a JSON number (never inf or nan). */
static void json_figure(FILE *out, const char *name, double v) {
  fprintf(out, ", \"%s\": ", name);
  diag_json_number(out, v);
}

/* --json: the same figures, unrounded, for scripts. */
static void print_json(FILE *out, const Plan *p) {
  const PlanArgs *a = p->a;
  fputs("{\"file\": ", out);
  diag_json_string(out, a->file);
  fprintf(out, ", \"devices\": %lld, \"axes\": [", (long long)a->devices);
  for (int i = 0; i < a->naxes; i++) {
    fputs(i ? ", " : "", out);
    diag_json_string(out, a->names[i]);
  }
  fputs("], \"contraction_flops_per_second\": ", out);
  diag_json_number(out, a->flops);
  fputs(", \"elementwise_flops_per_second\": ", out);
  diag_json_number(out, a->ew_flops);
  fputs(", \"memory\": ", out);
  if (a->memory)
    fprintf(out, "%lld", (long long)a->memory);
  else
    fputs("null", out);
  fputs(",\n \"layouts\": [", out);
  for (int i = 0; i < p->n; i++) {
    const Row *r = &p->rows[i];
    fprintf(out, "%s\n  {\"mesh\": {", i ? "," : "");
    for (int k = 0; k < a->naxes; k++) {
      fputs(k ? ", " : "", out);
      diag_json_string(out, a->names[k]);
      fprintf(out, ": %d", r->sizes[k]);
    }
    fputs("}, ", out);
    if (r->error) {
      fputs("\"type_checks\": false, \"error\": ", out);
      diag_json_string(out, r->error);
      fputc('}', out);
      continue;
    }
    fprintf(out, "\"type_checks\": true, \"fits\": %s, \"step_loop_line\": %d",
            !a->memory || r->peak <= a->memory ? "true" : "false", r->step_line);
    json_figure(out, "step_seconds", r->secs);
    json_figure(out, "compute_seconds", r->step.dot / a->flops + r->step.ew / a->ew_flops);
    json_figure(out, "communication_seconds", r->step.comm);
    json_figure(out, "contraction_flops", r->step.dot);
    json_figure(out, "elementwise_flops", r->step.ew);
    json_figure(out, "collectives", r->step.colls);
    json_figure(out, "bytes_sent", r->step.bytes);
    fprintf(out, ", \"run_time_bounds_counted_once\": %s, \"peak_bytes\": %lld,\n   \"functions\": {",
            r->step.approx ? "true" : "false", (long long)r->peak);
    for (int f = 0; f < r->nf; f++) {
      fputs(f ? ", " : "", out);
      diag_json_string(out, r->fnames[f]);
      fputs(": ", out);
      diag_json_number(out, r->fsecs[f]);
    }
    fputs("}}", out);
  }
  fputs("\n]}\n", out);
}

int plan_run(FILE *out, const PlanArgs *a) {
  Plan p = {a, NULL, 0, 0};
  int sizes[MAX_AXES] = {0};
  if (!enumerate(&p, sizes, 0, a->devices)) {
    fprintf(stderr, "shdc: error: plan: more than %d layouts of %lld devices over the %d axes of %s; fix some "
                    "axes with --mesh AXIS=SIZE\n", PLAN_MAX_LAYOUTS, (long long)a->devices, a->naxes, a->file);
    free(p.rows);
    return 2;
  }
  if (!p.n) {
    fprintf(stderr, "shdc: error: plan: the sizes --mesh fixes do not divide --devices=%lld\n", (long long)a->devices);
    return 2;
  }
  Walk w = {NULL, a->net, a->flops, a->ew_flops, {0}, NULL};
  for (int i = 0; i < p.n; i++)
    layout(&w, a, &p.rows[i]);
  g_sort_plan = &p;
  qsort(p.rows, (size_t)p.n, sizeof(Row), row_order);
  int ok = 0, fit = 0;
  for (int i = 0; i < p.n; i++) {
    ok += !p.rows[i].error;
    fit += !p.rows[i].error && (!a->memory || p.rows[i].peak <= a->memory);
  }
  if (a->json) {
    print_json(out, &p);
    free(p.rows);
    return fit ? 0 : 1;
  }
  Str axes = {0};
  for (int i = 0; i < a->naxes; i++)
    str_printf(&axes, "%s%s%s", i ? ", " : "", a->names[i], a->fixed[i] ? arena_printf("=%d", a->fixed[i]) : "");
  fprintf(out, "shdc plan %s: %lld devices over (%s): %d layout%s, %d type-check%s", a->file, (long long)a->devices,
          str_cstr(&axes), p.n, p.n == 1 ? "" : "s", ok, ok == 1 ? "s" : "");
  if (a->memory)
    fprintf(out, ", %d fit%s %s per device", fit, fit == 1 ? "s" : "", a->memory_text);
  fprintf(out, "\ncompute: contractions at %s, elementwise work at %s per device (--flops)\n", flops_str(a->flops),
          flops_str(a->ew_flops));
  Mesh m;
  memset(&m, 0, sizeof m);
  m.naxes = a->naxes;
  for (int i = 0; i < a->naxes; i++)
    m.names[i] = a->names[i];
  net_describe(out, a->net, &m);
  if (!a->network_text)
    fprintf(out, "(--network was not given: every axis is costed at 25GB/s,5us)\n");
  const Row *any = NULL;
  bool approx = false;
  for (int i = 0; i < p.n; i++) {
    any = any ? any : p.rows[i].error ? NULL : &p.rows[i];
    approx |= !p.rows[i].error && p.rows[i].step.approx;
  }
  if (any)
    fprintf(out, "step: %s, calls included; an if counts its cheaper branch%s\n",
            any->step_line ? arena_printf("one iteration of the loop at line %d of main", any->step_line)
                           : "one run of main",
            approx ? "; a loop with run-time bounds counts once" : "");
  if (ok)
    print_table(out, &p, ok);
  if (ok < p.n) {
    fprintf(out, "\ndo not type-check on %lld devices:\n", (long long)a->devices);
    for (int i = ok; i < p.n; i++)
      fprintf(out, "  %s: %s\n", p.rows[i].mesh, p.rows[i].error);
  }
  if (!fit)
    fprintf(out, "\nno layout of %lld devices %s\n", (long long)a->devices,
            ok ? arena_printf("fits %s per device", a->memory_text) : "type-checks");
  print_functions(out, &p, ok);
  free(axes.buf);
  free(p.rows);
  return fit ? 0 : 1;
}
