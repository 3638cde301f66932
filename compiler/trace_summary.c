/* trace_summary.c: `shdc trace-summary RUN.json`, where the time of a run went.
 *
 * Input: a timeline written by a program run with SHD_TRACE=RUN.json (Chrome
 * trace-event JSON, runtime/timeline.c). Output: per rank, the wall time
 * of main and the time in each category: GEMM, elementwise passes,
 * communication (a collective's span less its wait), waiting (at the
 * barrier before a collective), other runtime compute (reductions,
 * transposes) and the rest (untraced code: creation, I/O, small ops); then
 * each collective kind's count and bytes sent per rank. A trace of some
 * steps only (SHD_TRACE_STEPS) is summarised over the steps it recorded,
 * not over main. Ranks are the processes, numbered from otherData's
 * "first_pid" (1; 0 in traces of older programs).
 *
 * The file is read as a stream: one event at a time is parsed into a small
 * tree (a bump allocator reset after each event), so a long run's trace
 * needs no more memory than its largest event. Malformed JSON is an error
 * with its line and column (exit 1); an unreadable file exit 2.
 */
#include <ctype.h>
#include <errno.h>

#include "shdc.h"

/* ---- a streaming JSON reader ------------------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } JKind;
typedef struct JVal JVal;
struct JVal {
  JKind kind;
  double num;
  const char *str;
  int n;
  const char **keys;   /* J_OBJ */
  JVal **items;        /* J_ARR, J_OBJ */
};

typedef struct {
  FILE *f;
  const char *path;
  int c;               /* current character, EOF at the end */
  int line, col;
  char *pool;          /* bump allocator for one event */
  size_t used, cap;
  Vec spill;           /* what did not fit in the pool, freed with it */
} Reader;

__attribute__((noreturn, format(printf, 2, 3))) static void bad(Reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%d:%d: error: ", r->path, r->line, r->col);
  vfprintf(stderr, fmt, ap);
  fputs(" (a timeline written with SHD_TRACE=FILE.json is expected)\n", stderr);
  va_end(ap);
  exit(1);
}

static void next(Reader *r) {
  if (r->c == '\n') {
    r->line++;
    r->col = 0;
  }
  r->c = getc(r->f);
  r->col++;
}

static void skip_ws(Reader *r) {
  while (r->c == ' ' || r->c == '\t' || r->c == '\n' || r->c == '\r')
    next(r);
}

static void *pool_alloc(Reader *r, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (r->used + n > r->cap) {
    void *p = mem_calloc(1, n);
    vec_push(&r->spill, p);
    return p;
  }
  void *p = r->pool + r->used;
  r->used += n;
  memset(p, 0, n);
  return p;
}

/* Between events: everything of the last one goes. */
static void pool_reset(Reader *r) {
  r->used = 0;
  for (int i = 0; i < r->spill.len; i++)
    free(r->spill.data[i]);
  r->spill.len = 0;
}

static void expect(Reader *r, int ch) {
  skip_ws(r);
  if (r->c != ch)
    bad(r, "expected '%c'", ch);
  next(r);
}

static const char *read_string(Reader *r) {
  Str s = {0};
  next(r);   /* the opening quote */
  while (r->c != '"') {
    if (r->c == EOF || r->c == '\n')
      bad(r, "unterminated string");
    if (r->c == '\\') {
      next(r);
      int e = r->c;
      str_putc(&s, e == 'n' ? '\n' : e == 't' ? '\t' : e == 'u' ? '?' : (char)e);
      if (e == 'u')
        for (int i = 0; i < 4; i++)
          next(r);
    } else {
      str_putc(&s, (char)r->c);
    }
    next(r);
  }
  next(r);
  char *out = pool_alloc(r, s.len + 1);
  memcpy(out, s.buf ? s.buf : "", s.len);
  free(s.buf);
  return out;
}

static JVal *read_value(Reader *r, int depth);

static JVal *read_compound(Reader *r, int depth, bool obj) {
  JVal *v = pool_alloc(r, sizeof *v);
  v->kind = obj ? J_OBJ : J_ARR;
  next(r);
  Vec items = {0}, keys = {0};
  skip_ws(r);
  if (r->c != (obj ? '}' : ']'))
    for (;;) {
      if (obj) {
        skip_ws(r);
        if (r->c != '"')
          bad(r, "expected a key");
        vec_push(&keys, (void *)read_string(r));
        expect(r, ':');
      }
      vec_push(&items, read_value(r, depth + 1));
      skip_ws(r);
      if (r->c == ',') {
        next(r);
        continue;
      }
      break;
    }
  expect(r, obj ? '}' : ']');
  v->n = items.len;
  v->items = pool_alloc(r, sizeof(JVal *) * (size_t)(items.len + 1));
  if (items.len)
    memcpy(v->items, items.data, sizeof(JVal *) * (size_t)items.len);
  if (obj) {
    v->keys = pool_alloc(r, sizeof(char *) * (size_t)(keys.len + 1));
    if (keys.len)
      memcpy(v->keys, keys.data, sizeof(char *) * (size_t)keys.len);
  }
  free(items.data);
  free(keys.data);
  return v;
}

static JVal *read_value(Reader *r, int depth) {
  if (depth > 64)
    bad(r, "nesting too deep");
  skip_ws(r);
  if (r->c == '{' || r->c == '[')
    return read_compound(r, depth, r->c == '{');
  JVal *v = pool_alloc(r, sizeof *v);
  if (r->c == '"') {
    v->kind = J_STR;
    v->str = read_string(r);
    return v;
  }
  char buf[64];
  int n = 0;
  while (n < 63 && r->c != EOF && (isalnum(r->c) || r->c == '-' || r->c == '+' || r->c == '.')) {
    buf[n++] = (char)r->c;
    next(r);
  }
  buf[n] = 0;
  if (!strcmp(buf, "null"))
    v->kind = J_NULL;
  else if (!strcmp(buf, "true") || !strcmp(buf, "false")) {
    v->kind = J_BOOL;
    v->num = buf[0] == 't';
  } else {
    char *end;
    v->kind = J_NUM;
    v->num = strtod(buf, &end);
    if (!n || *end)
      bad(r, "expected a value");
  }
  return v;
}

static const JVal *get(const JVal *o, const char *key) {
  for (int i = 0; o && o->kind == J_OBJ && i < o->n; i++)
    if (!strcmp(o->keys[i], key))
      return o->items[i];
  return NULL;
}

static const char *get_str(const JVal *o, const char *key) {
  const JVal *v = get(o, key);
  return v && v->kind == J_STR ? v->str : NULL;
}

static double get_num(const JVal *o, const char *key) {
  const JVal *v = get(o, key);
  return v && v->kind == J_NUM ? v->num : 0;
}

/* ---- the summary ------------------------------------------------------------------ */

enum { CAT_GEMM, CAT_ELEMENTWISE, CAT_COMM, CAT_WAIT, CAT_COMPUTE, CAT__COUNT };
static const char *const cat_names[] = {"gemm", "elementwise", "communication", "waiting", "other compute"};

#define MAX_KINDS 8

typedef struct {
  bool seen;
  double main_us, first, last;   /* main's span; the earliest and latest times */
  double step_us;                /* the step spans (iterations of main's loops) */
  int64_t nsteps;
  double cat_us[CAT__COUNT];
  double overlapped_us;          /* buckets moved on the second track (tid 2) while the rank computed */
  int64_t count[MAX_KINDS], bytes[MAX_KINDS];
  double flight_us[MAX_KINDS];   /* overlapped_us by kind (all_reduce, reduce_scatter, all_gather) */
} RankSum;

typedef struct {
  RankSum *ranks;
  int nranks;
  const char *kinds[MAX_KINDS];
  int nkinds;
  const char *mesh;
  const char *steps;             /* otherData's window: "all" or "A:B" */
  int first_pid;
  int64_t events;
} Summary;

static RankSum *rank_of(Summary *s, Reader *r, int pid) {
  if (pid < 0 || pid > 1 << 20)
    bad(r, "pid %d is not a rank", pid);
  if (pid >= s->nranks) {
    s->ranks = mem_resize(s->ranks, s->nranks, pid + 1, sizeof *s->ranks);
    s->nranks = pid + 1;
  }
  return &s->ranks[pid];
}

static int kind_index(Summary *s, const char *kind) {
  for (int i = 0; i < s->nkinds; i++)
    if (!strcmp(s->kinds[i], kind))
      return i;
  if (s->nkinds == MAX_KINDS)
    return -1;
  s->kinds[s->nkinds] = arena_strdup(kind);
  return s->nkinds++;
}

/* One collective of kind (its "kind" argument, else its name) and its bytes. */
static int count_collective(Summary *s, RankSum *rs, const JVal *e, const char *name) {
  const JVal *args = get(e, "args");
  int k = kind_index(s, get_str(args, "kind") ? get_str(args, "kind") : name ? name : "?");
  if (k >= 0) {
    rs->count[k]++;
    rs->bytes[k] += (int64_t)get_num(args, "bytes");
  }
  return k;
}

static void add_event(Summary *s, Reader *r, const JVal *e) {
  const char *ph = get_str(e, "ph"), *cat = get_str(e, "cat"), *name = get_str(e, "name");
  if (!ph || !get(e, "pid"))
    bad(r, "an event without \"ph\" or \"pid\"");
  if (strcmp(ph, "X"))
    return;
  RankSum *rs = rank_of(s, r, (int)get_num(e, "pid") - s->first_pid);
  double ts = get_num(e, "ts"), dur = get_num(e, "dur");
  if (!rs->seen || ts < rs->first)
    rs->first = ts;
  if (!rs->seen || ts + dur > rs->last)
    rs->last = ts + dur;
  rs->seen = true;
  s->events++;
  if (!cat)
    return;
  bool track2 = get(e, "tid") && get_num(e, "tid") == 2;   /* a bucket's transfer: beside main's time, not in it */
  if (track2 || (!strcmp(cat, "wait") && name && !strcmp(name, "async wait"))) {
    if (!track2)
      rs->cat_us[CAT_COMM] += dur;   /* a bucket's exposed part: main waits for it */
    else if (!strcmp(cat, "communication")) {
      rs->overlapped_us += dur;
      int k = count_collective(s, rs, e, name);
      if (k >= 0)
        rs->flight_us[k] += dur;
    }
    return;
  }
  if (!strcmp(cat, "function") && name && !strcmp(name, "main"))
    rs->main_us += dur;
  else if (!strcmp(cat, "step"))
    rs->step_us += dur, rs->nsteps++;
  else if (!strcmp(cat, "gemm"))
    rs->cat_us[CAT_GEMM] += dur;
  else if (!strcmp(cat, "elementwise"))
    rs->cat_us[CAT_ELEMENTWISE] += dur;
  else if (!strcmp(cat, "wait"))
    rs->cat_us[CAT_WAIT] += dur, rs->cat_us[CAT_COMM] -= dur;   /* a wait is inside its collective */
  else if (!strcmp(cat, "compute"))
    rs->cat_us[CAT_COMPUTE] += dur;
  else if (!strcmp(cat, "communication")) {
    rs->cat_us[CAT_COMM] += dur;
    count_collective(s, rs, e, name);
  }
}

static void read_events(Summary *s, Reader *r) {
  next(r);   /* '[' */
  skip_ws(r);
  if (r->c == ']') {
    next(r);
    return;
  }
  for (;;) {
    pool_reset(r);
    skip_ws(r);
    if (r->c != '{')
      bad(r, "expected an event object");
    add_event(s, r, read_value(r, 1));
    skip_ws(r);
    if (r->c == ',') {
      next(r);
      continue;
    }
    expect(r, ']');
    return;
  }
}

static void read_trace(Summary *s, Reader *r) {
  expect(r, '{');
  bool events = false;
  skip_ws(r);
  while (r->c == '"') {
    pool_reset(r);
    const char *key = arena_strdup(read_string(r));
    expect(r, ':');
    skip_ws(r);
    if (!strcmp(key, "traceEvents") && r->c == '[') {
      read_events(s, r);
      events = true;
    } else {
      JVal *v = read_value(r, 1);
      const char *mesh = get_str(v, "mesh"), *steps = get_str(v, "steps");
      if (!strcmp(key, "otherData") && mesh)
        s->mesh = arena_strdup(mesh);
      if (!strcmp(key, "otherData") && steps && strcmp(steps, "all"))
        s->steps = arena_strdup(steps);
      if (!strcmp(key, "otherData") && get(v, "first_pid"))
        s->first_pid = (int)get_num(v, "first_pid");
    }
    skip_ws(r);
    if (r->c != ',')
      break;
    next(r);
    skip_ws(r);
  }
  expect(r, '}');
  skip_ws(r);
  if (r->c != EOF)
    bad(r, "text after the end of the trace");
  if (!events)
    bad(r, "no \"traceEvents\" array");
}

static void print_summary(FILE *o, const Summary *s, const char *path) {
  fprintf(o, "%s: %d rank%s%s%s, %lld spans\n", path, s->nranks, s->nranks == 1 ? "" : "s",
          s->mesh ? ", mesh " : "", s->mesh ? s->mesh : "", (long long)s->events);
  /* A window of steps is summarised over its steps: main was recorded
   * only around them. */
  if (s->steps)
    fprintf(o, "\ntime per rank in ms over the traced steps (SHD_TRACE_STEPS=%s; share of them):\n%-5s %10s",
            s->steps, "rank", "steps");
  else
    fprintf(o, "\ntime per rank in ms (share of main):\n%-5s %10s", "rank", "main");
  for (int c = 0; c < CAT__COUNT; c++)
    fprintf(o, " %19s", cat_names[c]);
  fprintf(o, " %19s\n", "rest");
  for (int i = 0; i < s->nranks; i++) {
    const RankSum *rs = &s->ranks[i];
    double total = s->steps ? rs->step_us : rs->main_us > 0 ? rs->main_us : rs->last - rs->first, known = 0;
    fprintf(o, "%-5d %10.3f", i, total / 1000);
    for (int c = 0; c < CAT__COUNT; c++) {
      double v = rs->cat_us[c] > 0 ? rs->cat_us[c] : 0;
      known += v;
      fprintf(o, " %12.3f %5.1f%%", v / 1000, total > 0 ? 100 * v / total : 0);
    }
    double rest = total - known > 0 ? total - known : 0;
    fprintf(o, " %12.3f %5.1f%%\n", rest / 1000, total > 0 ? 100 * rest / total : 0);
  }
  for (int i = 0; i < s->nranks; i++) {
    const RankSum *rs = &s->ranks[i];
    if (rs->overlapped_us <= 0)
      continue;
    fprintf(o, "rank %d: buckets in flight %.3f ms beside the computation (", i, rs->overlapped_us / 1000);
    for (int k = 0, n = 0; k < s->nkinds; k++)
      if (rs->flight_us[k] > 0)
        fprintf(o, "%s%s %.3f ms", n++ ? ", " : "", s->kinds[k], rs->flight_us[k] / 1000);
    fprintf(o, "; communication counts the waits for them)\n");
  }
  if (s->nranks && s->ranks[0].nsteps)
    fprintf(o, "\nsteps (iterations of main's loops): %lld on rank 0, %.3f ms each on average\n",
            (long long)s->ranks[0].nsteps, s->ranks[0].step_us / 1000 / (double)s->ranks[0].nsteps);
  if (!s->nkinds)
    return;
  fprintf(o, "\ncollectives per rank (count, bytes sent):\n%-5s", "rank");
  for (int k = 0; k < s->nkinds; k++)
    fprintf(o, " %24s", s->kinds[k]);
  fputc('\n', o);
  for (int i = 0; i < s->nranks; i++) {
    fprintf(o, "%-5d", i);
    for (int k = 0; k < s->nkinds; k++)
      fprintf(o, " %6lld %17lld", (long long)s->ranks[i].count[k], (long long)s->ranks[i].bytes[k]);
    fputc('\n', o);
  }
}

int tsum_run(const char *path) {
  const char *why;
  FILE *f = file_open_regular(path, 0, &why, NULL);   /* a FIFO or a device is refused, never waited on */
  if (!f) {
    fprintf(stderr, "shdc: error: cannot read %s: %s\n", path, why);
    return 2;
  }
  Reader r = {f, path, 0, 1, 0, NULL, 0, 0, {0}};
  r.cap = 1 << 20;
  r.pool = mem_alloc(r.cap);
  next(&r);
  Summary s = {0};
  read_trace(&s, &r);
  bool err = ferror(f);
  fclose(f);
  pool_reset(&r);
  free(r.spill.data);
  free(r.pool);
  if (err) {
    fprintf(stderr, "shdc: error: cannot read %s\n", path);
    return 2;
  }
  print_summary(stdout, &s, path);
  free(s.ranks);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "shdc: error: cannot write the summary: %s\n", strerror(errno));
    return 2;
  }
  return 0;
}
