/* netmodel.c: what a program's communication would cost on a given network,
 * without the machines (`shdc explain --network=...`).
 *
 * A network is a link per mesh axis: bandwidth (bytes/s) and latency (s),
 * given once for every axis (--network=BANDWIDTH,LATENCY) or per axis in a
 * file (--network=FILE, one `AXIS BANDWIDTH LATENCY [label]` a line, `*`
 * for the other axes, `reduce BANDWIDTH` for the local reduction speed,
 * `#` comments). A collective over several axes runs at the pace of its
 * slowest link (the largest latency, the smallest bandwidth).
 *
 * Each collective is costed with the standard latency-bandwidth (alpha-beta,
 * plus gamma for local reductions) model of the algorithm the runtime uses
 * (runtime/collectives.c), for a local input of n bytes over G ranks; each
 * formula is its operation's OpDef.net_seconds (op_collective.c and the
 * families of the last three):
 *
 *   reduce-scatter    ring:                  (G-1)a + (G-1)/G n b + (G-1)/G n g
 *   all-reduce        n >= 32 MiB, ring:    2(G-1)a + 2(G-1)/G n b + (G-1)/G n g
 *                     n <= 8 KiB, MPI recursive doubling: log2(G) (a + n b + n g)
 *                     otherwise MPI (Rabenseifner): 2 log2(G) a + 2(G-1)/G n b + (G-1)/G n g
 *   all-gather        MPI: G n <= 64 KiB recursive doubling log2(G) a + (G-1) n b,
 *                     else ring (G-1) a + (G-1) n b
 *   all-to-all        MPI pairwise exchange: (G-1) a + (G-1)/G n b
 *   ppermute/permute  one exchange: a + n b
 *   reshape_move      MPI_Alltoallv of the world: (P-1) a + s b
 *   argmax/argmin     MPI_Allreduce of (value, index) pairs, as all-reduce
 *   shift             one exchange with the neighbours: a + s b
 * (s: the bytes explain says the busiest rank sends)
 *
 * log2 rounds up; an operation without a model is G-1 steps carrying its
 * bytes.
 *
 * The bytes one rank sends (net_bytes_sent) are computed here too, with
 * every operation's formula (OpDef.bytes_sent or .group_bytes, those of the
 * runtime's SHD_TRACE counters): `shdc explain` lists them, `shdc plan`
 * sums them, and the models above take them as `sent`. This file uses
 * neither explain nor plan; both use it.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>

#include "shdc.h"

/* The links a model may describe: anything outside is a typo (a unit
 * forgotten), and would print estimates of inf or hundreds of digits. */
#define MIN_BANDWIDTH 1.0
#define MAX_BANDWIDTH 1e15
#define MAX_LATENCY 10.0

/* ---- parsing ------------------------------------------------------------------ */

/* 25GB/s, 100Gbit/s, 12.5e9, 800M: bytes per second. */
static bool parse_bandwidth(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v > 0))
    return false;
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1e3; end++; break;
  case 'M': mul = 1e6; end++; break;
  case 'G': mul = 1e9; end++; break;
  case 'T': mul = 1e12; end++; break;
  case 'P': mul = 1e15; end++; break;
  default: break;
  }
  if (!strcmp(end, "bit/s") || !strcmp(end, "b/s") || !strcmp(end, "bit"))
    mul /= 8;
  else if (*end && strcmp(end, "B/s") && strcmp(end, "B"))
    return false;
  *out = v * mul;
  return *out >= MIN_BANDWIDTH && *out <= MAX_BANDWIDTH;
}

/* 5us, 1.5ms, 2e-6, 800ns: seconds. */
static bool parse_latency(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0)
    return false;
  double mul = !*end || !strcmp(end, "s") ? 1 : !strcmp(end, "ms") ? 1e-3 : !strcmp(end, "us") ? 1e-6
               : !strcmp(end, "ns") ? 1e-9 : -1;
  if (mul < 0)
    return false;
  *out = v * mul;
  return *out <= MAX_LATENCY;
}

static const char *spec_error(const char *what, const char *text) {
  return arena_printf("%s '%s': write bandwidth as 25GB/s, 100Gbit/s or 12.5e9 (bytes/s, from 1B/s to 1PB/s), "
                      "latency as 5us, 1ms or 2e-6 (s, from 0 to 10s)", what, text);
}

static const char *parse_pair(NetModel *n, const char *spec) {
  const char *comma = strchr(spec, ',');
  char *bw = arena_strndup(spec, (size_t)(comma - spec));
  if (!parse_bandwidth(bw, &n->def.bandwidth))
    return spec_error("bandwidth", bw);
  if (!parse_latency(comma + 1, &n->def.latency))
    return spec_error("latency", comma + 1);
  n->def.label = "every axis";
  n->have_def = true;
  return NULL;
}

static const char *parse_line(NetModel *n, char *line, const char *path, int lineno) {
  char *hash = strchr(line, '#');
  if (hash)
    *hash = 0;
  char *f[4] = {0};
  int nf = 0;
  for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n"))
    if (nf < 4)
      f[nf++] = tok;
    else
      return arena_printf("%s:%d: too many fields; expected AXIS BANDWIDTH LATENCY [LABEL]", path, lineno);
  if (!nf)
    return NULL;
  if (!strcmp(f[0], "reduce")) {
    if (nf != 2 || !parse_bandwidth(f[1], &n->reduce_bandwidth))
      return arena_printf("%s:%d: expected `reduce BANDWIDTH` (the local reduction speed, e.g. 10GB/s)", path, lineno);
    return NULL;
  }
  NetLink l = {0, 0, nf == 4 ? arena_strdup(f[3]) : NULL};
  if (nf < 3 || !parse_bandwidth(f[1], &l.bandwidth) || !parse_latency(f[2], &l.latency))
    return arena_printf("%s:%d: expected AXIS BANDWIDTH LATENCY [LABEL], e.g. `data 25GB/s 10us inter-node`; %s",
                        path, lineno, spec_error("got", f[1] ? f[1] : ""));
  if (!strcmp(f[0], "*") || !strcmp(f[0], "default")) {
    n->def = l;
    n->have_def = true;
  } else if (n->naxes < MAX_AXES) {
    n->axis_names[n->naxes] = arena_strdup(f[0]);
    n->axes[n->naxes++] = l;
  } else {
    return arena_printf("%s:%d: more than %d axes", path, lineno, MAX_AXES);
  }
  return NULL;
}

static const char *read_net_file(NetModel *n, const char *path) {
  const char *why;
  FILE *f = file_open_regular(path, 1 << 20, &why, NULL);   /* a FIFO or /dev/zero is refused, never waited on */
  if (!f)
    return arena_printf("cannot read the network file %s: %s", path, why);
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  const char *err = NULL;
  for (int lineno = 1; !err && (len = getline(&buf, &cap, f)) >= 0; lineno++)
    err = (size_t)len != strlen(buf) ? arena_printf("%s:%d: a NUL byte; a network file is text", path, lineno)
          : len > 1024 ? arena_printf("%s:%d: a line of %zd bytes; a link is one short line", path, lineno, len)
                       : parse_line(n, buf, path, lineno);
  free(buf);
  if (!err && ferror(f))
    err = arena_printf("cannot read the network file %s", path);
  fclose(f);
  if (!err && !n->have_def && !n->naxes)
    err = arena_printf("%s names no link; write e.g. `* 25GB/s 5us`", path);
  return err;
}

const char *net_parse(NetModel *n, const char *spec) {
  memset(n, 0, sizeof *n);
  const char *comma = strchr(spec, ',');
  if (comma && !strchr(comma + 1, ','))
    return parse_pair(n, spec);
  if (!comma)
    return read_net_file(n, spec);
  return arena_printf("--network is BANDWIDTH,LATENCY (e.g. 25GB/s,5us) or a file, not '%s'", spec);
}

/* Every axis the program's mesh has must have a link. */
const char *net_check_mesh(const NetModel *n, const Mesh *m) {
  for (int i = 0; i < n->naxes; i++) {
    bool found = false;
    for (int a = 0; a < m->naxes; a++)
      found |= !strcmp(m->names[a], n->axis_names[i]);
    if (!found)
      return arena_printf("the network names axis '%s', which the mesh does not have", n->axis_names[i]);
  }
  for (int a = 0; a < m->naxes && !n->have_def; a++) {
    bool found = false;
    for (int i = 0; i < n->naxes; i++)
      found |= !strcmp(m->names[a], n->axis_names[i]);
    if (!found)
      return arena_printf("the network gives no link for mesh axis '%s' (add a line for it, or `* BANDWIDTH "
                          "LATENCY`)", m->names[a]);
  }
  return NULL;
}

/* ---- costs -------------------------------------------------------------------------- */

int64_t net_bytes_sent(const Module *mod, const Inst *in) {
  const OpDef *d = op_def(in->op);
  if (d && d->bytes_sent)
    return d->bytes_sent(mod, in);
  if (!d || !d->group_bytes)
    return 0;
  int64_t g = 1;
  for (int i = 0; i < in->naxes; i++)
    g *= mod->mesh.sizes[in->axes[i]];
  const Type *t = &in->args[0]->type;
  return d->group_bytes(ty_local_count(&mod->mesh, t) * (int64_t)ty_dtype_size(t->dtype), g);
}

static NetLink link_of(const NetModel *n, const char *axis) {
  for (int i = 0; i < n->naxes; i++)
    if (!strcmp(n->axis_names[i], axis))
      return n->axes[i];
  return n->def;
}

/* The slowest link among the group's axes (permute: every axis). */
static NetLink group_link(const NetModel *n, const Module *mod, const Inst *in) {
  NetLink worst = {INFINITY, 0, NULL};
  bool whole = in->naxes == 0;   /* permute, reshape_move: the whole mesh */
  int na = whole ? mod->mesh.naxes : in->naxes;
  for (int i = 0; i < na; i++) {
    int a = whole ? i : in->axes[i];
    if (whole && mod->mesh.sizes[a] == 1)
      continue;
    NetLink l = link_of(n, mod->mesh.names[a]);
    if (l.bandwidth < worst.bandwidth)
      worst.bandwidth = l.bandwidth;
    if (l.latency > worst.latency)
      worst.latency = l.latency;
  }
  if (!isfinite(worst.bandwidth))
    worst = n->def;
  return worst;
}

/* The OpDef's model of its algorithm (net_seconds), or G-1 steps carrying
 * the bytes explain says one rank sends. */
double net_collective_seconds(const NetModel *n, const Module *mod, const Inst *in, const char **algo) {
  NetCost c = {1, 0, 0, 1, 0, 0, 0};
  for (int i = 0; i < in->naxes; i++)
    c.G *= mod->mesh.sizes[in->axes[i]];
  for (int k = 0; k < mod->mesh.naxes; k++)
    c.world *= mod->mesh.sizes[k];
  c.n = (double)ty_local_count(&mod->mesh, &in->args[0]->type) * (double)ty_dtype_size(in->args[0]->type.dtype);
  c.sent = (double)net_bytes_sent(mod, in);
  NetLink l = group_link(n, mod, in);
  c.a = l.latency;
  c.b = 1 / l.bandwidth;
  c.g = n->reduce_bandwidth > 0 ? 1 / n->reduce_bandwidth : 0;
  *algo = "";
  const OpDef *d = op_def(in->op);
  if (d && d->net_seconds)
    return d->net_seconds(&c, in, algo);
  if (c.G <= 1)
    return 0;
  *algo = "steps";
  return (c.G - 1) * c.a + c.sent * c.b;
}

static const char *rate_str(double bps) {
  return bps >= 1e9 ? arena_printf("%g GB/s", bps / 1e9) : bps >= 1e6 ? arena_printf("%g MB/s", bps / 1e6)
                                                                       : arena_printf("%g B/s", bps);
}

const char *net_seconds_str(double s) {
  return s >= 1e6 ? arena_printf("%.3e s", s) : s >= 1 ? arena_printf("%.3f s", s)
         : s >= 1e-3 ? arena_printf("%.3f ms", s * 1e3) : arena_printf("%.1f us", s * 1e6);
}

void net_describe(FILE *out, const NetModel *n, const Mesh *m) {
  fprintf(out, "network:");
  for (int a = 0; a < m->naxes; a++) {
    NetLink l = link_of(n, m->names[a]);
    fprintf(out, "%s %s %s, %s%s%s%s", a ? ";" : "", m->names[a], rate_str(l.bandwidth), net_seconds_str(l.latency),
            l.label ? " (" : "", l.label ? l.label : "", l.label ? ")" : "");
  }
  if (n->reduce_bandwidth > 0)
    fprintf(out, "; local reductions %s", rate_str(n->reduce_bandwidth));
  fprintf(out, "\nestimates: the alpha-beta cost of the runtime's algorithm for each collective (ring reduce-scatter; "
               "all-reduce: MPI below 32 MiB, ring above and for bf16; MPI all-gather and all-to-all); a group's "
               "slowest link sets its pace\n");
}

/* ---- per step: the loops of a function, with the calls inside them ------------------------ */

typedef struct {
  const NetModel *net;
  const Module *mod;
  int count;
  double bytes, seconds;
  bool approx;         /* an inner loop with a run-time bound, counted once */
} Step;

/* trips: the innermost loop's (times counts them), 0 outside one. */
static void step_block(Step *s, const IrBlock *b, double times, int depth, double trips) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    const char *algo;
    const OpDef *def = op_def(in->op);
    if (def && (def->flags & OPF_COLLECTIVE)) {
      double t = trips >= 1 ? times / trips * overlap_runs(in, trips) : times;
      s->count += (int)t;
      s->bytes += t * (double)net_bytes_sent(s->mod, in);
      s->seconds += t * net_collective_seconds(s->net, s->mod, in, &algo);
    } else if (in->op == IR_CALL && depth < 64) {
      step_block(s, in->callee->body, times, depth + 1, 0);
    } else if (in->op == IR_FOR) {
      int64_t t;
      bool known = ir_const_trips(in, &t);
      double n = known ? (double)t : 1;
      s->approx |= !known;
      step_block(s, in->regions[0], times * (n > 0 ? n : 1), depth, n > 0 ? n : 1);
    } else {
      for (int r = 0; r < in->nregions; r++)   /* if: both branches, an upper bound */
        step_block(s, in->regions[r], times, depth, trips);
    }
  }
}

static void report_loops(FILE *out, const NetModel *net, const Module *mod, const Func *f, const IrBlock *b) {
  for (int i = 0; i < b->insts.len; i++) {
    const Inst *in = b->insts.data[i];
    if (in->op != IR_FOR)
      continue;
    Step s = {net, mod, 0, 0, 0, false};
    step_block(&s, in->regions[0], 1, 0, 0);
    if (s.count)
      fprintf(out, "  per iteration of the loop at line %d of %s: %d collectives, %.0f bytes sent per rank, "
                   "communication estimated %s%s\n",
              in->pos.line, ir_func_label(f), s.count, s.bytes, net_seconds_str(s.seconds),
              s.approx ? " (inner loops with run-time bounds counted once)" : "");
  }
}

void net_report_steps(FILE *out, const NetModel *net, const Module *mod, int64_t main_peak) {
  fprintf(out, "\nper step (one iteration of each loop of main, calls included):\n");
  for (int i = 0; i < mod->funcs.len; i++) {
    const Func *f = mod->funcs.data[i];
    if (!f->is_main)
      continue;
    report_loops(out, net, mod, f, f->body);
    fprintf(out, "  peak live arrays per rank: %lld bytes\n", (long long)main_peak);
  }
}
