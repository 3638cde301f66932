/* timeline.c: SHD_TRACE=FILE.json, one Chrome trace-event timeline of a run.
 *
 * Each rank records spans in memory: function calls and elementwise passes
 * (marked by the generated code, with their source line), GEMMs
 * (shd_gemm), collectives (kind, axes, bytes sent, source line) with the
 * wait before each one as a child span, and a counter of live array bytes
 * (alloc.c). Spans nest by construction: a span is a stack entry from
 * shd_span_begin to its shd_span_end, written as one complete ("X") event
 * when it closes. Times are nanoseconds of CLOCK_MONOTONIC since a barrier
 * at start-up, so the ranks' tracks line up.
 *
 * The wait: while the timeline is on, every collective over more than one
 * rank first passes a barrier on its group, recorded as a "wait" span; the
 * rest of the collective is the data movement. That separates load
 * imbalance from communication (and costs one barrier per collective, only
 * when tracing to a file).
 *
 * Steps: each iteration of a loop at the top of main (a training step) is
 * a "step" span with the loop variable's value (shd_step_begin/end). With
 * SHD_TRACE_STEPS=A:B (or A: or :B or N) only the steps A <= step < B are
 * recorded, with what runs inside them and the spans that enclose them
 * (main, the function of the loop); nothing else is kept, and collectives
 * outside the window skip their barrier, so a long run can be traced for a
 * few steps at the cost of those steps.
 *
 * Processes and threads are numbered from 1 (pid = rank + 1, tid 1: the
 * trace viewers treat 0 as "no process"); otherData says so ("first_pid")
 * and names the window ("steps").
 *
 * At shd_finalize each rank formats its events as JSON text and rank 0
 * writes them, rank by rank, into FILE: through a temporary in a private
 * random name beside it (safefile.c), renamed over FILE at the end and
 * removed by guard.c if the run stops while it is written. Only a new name
 * or a regular file is replaced: at start-up rank 0 refuses a directory, a
 * device, a FIFO or a symbolic link at FILE and creates (and removes) a
 * temporary beside it, so that a bad path fails before the run, not after. Loadable by Perfetto (ui.perfetto.dev) and chrome://tracing:
 * a process per rank ("rank R"), one thread track each, one counter track.
 *
 * Invariants: the span stack depth never exceeds MAX_DEPTH (deeper spans are
 * counted, not recorded); at most SHD_TRACE_MAX_EVENTS events per rank
 * (default 4 million) are kept, the rest counted as dropped and reported.
 */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "safefile.h"
#include "shdrt_internal.h"

#define MAX_DEPTH 256

bool shd_timeline_on = false;

typedef struct {
    int64_t start, dur;      /* ns since t0; dur < 0: a counter sample */
    const char *name;        /* static: generated code's literals, runtime names */
    int kind;                /* SHD_SPAN_* */
    int file, line;          /* file: an index into g_tl.files */
    int64_t a, b, c;         /* gemm: M N K; collective: bytes; counter: value; step: the step */
    char axes[24];
} tl_event;

typedef struct {
    tl_event ev;
    int64_t begin;
    bool in_window;          /* recording when it began */
    uint64_t windows;        /* g_tl.windows when it began */
} tl_open;

static struct {
    tl_event *events;
    size_t n, cap, max, dropped;
    tl_open stack[MAX_DEPTH];
    int depth, overflow;
    int64_t t0;
    int file, line;          /* shd_trace_at: the next GEMM's or collective's */
    char **files;            /* shd_trace_files: the source files' names, as JSON strings */
    int nfiles;
    FILE *out;               /* rank 0, while writing */
    char path[4096];
    shd_temp tmp;            /* rank 0, while writing */
    bool windowed;           /* SHD_TRACE_STEPS given */
    int64_t lo, hi;          /* its steps: lo <= step < hi */
    char window[64];         /* as given, for otherData */
    bool in_window;          /* recording now: always, or inside a step of the window */
    uint64_t windows;        /* how many steps of the window have begun */
} g_tl;

static const char *const kind_names[] = {
    [SHD_SPAN_CALL] = "function", [SHD_SPAN_ELEMENTWISE] = "elementwise", [SHD_SPAN_GEMM] = "gemm",
    [SHD_SPAN_COLLECTIVE] = "communication", [SHD_SPAN_WAIT] = "wait", [SHD_SPAN_COMPUTE] = "compute",
    [SHD_SPAN_STEP] = "step",
};

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The communication thread's spans (async.c): its own list and lock. */
static struct {
    pthread_mutex_t mu;
    tl_event *events;
    size_t n, cap;
} g_comm = {.mu = PTHREAD_MUTEX_INITIALIZER};

int64_t shd_timeline_now(void) { return now_ns() - g_tl.t0; }

void shd_timeline_async(const char *name, const char *axes, int64_t t0, int64_t t1, size_t bytes, int line)
{
    if (!shd_timeline_on || !g_tl.in_window)
        return;
    pthread_mutex_lock(&g_comm.mu);
    if (g_comm.n < g_tl.max) {
        tl_event *p = g_comm.n < g_comm.cap ? g_comm.events
                                            : shd_mem_grow_try(g_comm.events, &g_comm.cap, g_comm.n + 1, sizeof *p);
        if (p) {
            g_comm.events = p;
            tl_event *e = &p[g_comm.n++];
            memset(e, 0, sizeof *e);
            e->start = t0;
            e->dur = t1 - t0;
            e->name = name;
            e->kind = SHD_SPAN_COLLECTIVE;
            e->line = line;
            e->a = (int64_t)bytes;
            snprintf(e->axes, sizeof e->axes, "%s", axes);
        }
    }
    pthread_mutex_unlock(&g_comm.mu);
}

/* ---- set-up ------------------------------------------------------------ */

/* How a trace file begins: a file at SHD_TRACE that does not is not
 * replaced. */
#define TRACE_HEAD "{\"displayTimeUnit\""

/* SHD_TRACE names a file unless it is empty, 0 or 1 (the totals). */
static bool names_file(const char *v)
{
    return v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0;
}

/* Rank 0, at start-up: whether the trace can be written to path, "" if
 * so. Only a new name or a regular file is replaced (safefile.c), and a
 * temporary is created (and removed) in its directory, so a directory, a
 * device, a FIFO or a symbolic link at the name, or a directory that cannot
 * be written, fails now rather than after the run. */
static const char *trace_problem(const char *path, char *buf, size_t cap)
{
    const char *bad = shd_file_unreplaceable(path);
    if (bad) {
        snprintf(buf, cap, "%s %s; name a new file or a regular one", path, bad);
        return buf;
    }
    if ((bad = shd_file_foreign(path, TRACE_HEAD, strlen(TRACE_HEAD), "a trace this runtime wrote"))) {
        snprintf(buf, cap, "%s %s", path, bad);
        return buf;
    }
    shd_temp t;
    int fd = shd_temp_create(&t, path, "shd-trace");
    if (fd < 0) {
        snprintf(buf, cap, "cannot create the trace file: %s", strerror(errno));
        return buf;
    }
    close(fd);
    unlink(t.path);
    return "";
}

/* SHD_TRACE_STEPS: "A:B", "A:", ":B" or "N" (the one step N); false when
 * it is none of them. */
static bool parse_window(const char *v)
{
    char *end;
    const char *colon = strchr(v, ':');
    g_tl.lo = INT64_MIN;
    g_tl.hi = INT64_MAX;
    if (!colon) {
        g_tl.lo = strtoll(v, &end, 10);
        g_tl.hi = g_tl.lo + 1;
        return *v && !*end;
    }
    if (colon != v) {
        g_tl.lo = strtoll(v, &end, 10);
        if (end != colon)
            return false;
    }
    if (colon[1]) {
        g_tl.hi = strtoll(colon + 1, &end, 10);
        if (*end)
            return false;
    }
    return g_tl.lo < g_tl.hi;
}

void shd_timeline_init(void)
{
    /* Rank 0 decides, so ranks that see different environments agree. */
    char path[4096] = "", why[8800] = "", inner[4600];
    if (shd_world_rank() == 0) {
        const char *v = getenv("SHD_TRACE");
        if (names_file(v) && strlen(v) < sizeof path) {
            snprintf(path, sizeof path, "%s", v);
            snprintf(g_tl.path, sizeof g_tl.path, "%s", v);
            const char *bad = trace_problem(path, inner, sizeof inner);
            if (*bad)
                snprintf(why, sizeof why, "SHD_TRACE=%s: %s", v, bad);
        } else if (names_file(v)) {
            snprintf(why, sizeof why, "SHD_TRACE: the path is longer than %zu bytes", sizeof path - 1);
        }
    }
    shd_agree(why[0] ? why : NULL);
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!path[0])
        return;
    const char *max = getenv("SHD_TRACE_MAX_EVENTS");
    g_tl.max = max && atol(max) > 0 ? (size_t)atol(max) : (size_t)4 << 20;
    /* The window, as rank 0 reads it, so that every rank records alike. */
    char window[64] = "";
    int bad = 0;
    if (shd_world_rank() == 0) {
        const char *w = getenv("SHD_TRACE_STEPS");
        if (w && *w) {
            snprintf(window, sizeof window, "%s", w);
            bad = strlen(w) >= sizeof window || !parse_window(w);
        }
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad)
        shd_fatal("SHD_TRACE_STEPS=%s: expected the steps to trace as A:B (A <= step < B), A:, :B or N",
                  getenv("SHD_TRACE_STEPS"));
    MPI_Bcast(window, sizeof window, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (*window) {
        parse_window(window);
        snprintf(g_tl.window, sizeof g_tl.window, "%s", window);
        g_tl.windowed = true;
    }
    g_tl.in_window = !g_tl.windowed;
    shd_timeline_on = true;
    MPI_Barrier(MPI_COMM_WORLD);
    g_tl.t0 = now_ns();
}

/* ---- recording --------------------------------------------------------- */

static void record(const tl_event *e)
{
    if (g_tl.n >= g_tl.max) {
        g_tl.dropped++;
        return;
    }
    if (g_tl.n == g_tl.cap) {
        tl_event *p = shd_mem_grow_try(g_tl.events, &g_tl.cap, g_tl.n + 1, sizeof *p);
        if (!p) {   /* keep what we have rather than fail the program */
            g_tl.max = g_tl.n;
            g_tl.dropped++;
            return;
        }
        g_tl.events = p;
    }
    g_tl.events[g_tl.n++] = *e;
}

void shd_trace_at(int file, int line)
{
    g_tl.file = file;
    g_tl.line = line;
}

/* The generated program's source files (static strings), each kept as a
 * quoted JSON string for the events' "file"; called once, after shd_init. */
void shd_trace_files(int n, const char *const *names)
{
    if (!shd_timeline_on || g_tl.files)
        return;
    g_tl.files = shd_mem_zero((size_t)(n > 0 ? n : 1), sizeof(char *), "trace: the source files' names");
    for (int i = 0; i < n; i++)
        g_tl.files[i] = shd_json_quote(names[i] ? names[i] : "?");
    g_tl.nfiles = n;
}

void shd_span_begin_slow(int kind, const char *name, int file, int line)
{
    if (g_tl.depth == MAX_DEPTH) {
        g_tl.overflow++;
        return;
    }
    tl_open *o = &g_tl.stack[g_tl.depth++];
    memset(o, 0, sizeof *o);
    o->ev.kind = kind;
    o->ev.name = name;
    o->ev.file = line ? file : g_tl.file;
    o->ev.line = line ? line : g_tl.line;
    o->in_window = g_tl.in_window;
    o->windows = g_tl.windows;
    o->begin = now_ns();
}

void shd_span_end_slow(void)
{
    if (g_tl.overflow) {
        g_tl.overflow--;
        return;
    }
    if (g_tl.depth == 0)
        shd_fatal("trace: a span ends that never began (a bug in shdc's generated code)");
    tl_open *o = &g_tl.stack[--g_tl.depth];
    o->ev.start = o->begin - g_tl.t0;
    o->ev.dur = now_ns() - o->begin;
    /* Kept when recording was on at any moment of it: at its start, at its
     * end, or in a step of the window that began inside it. */
    if (o->in_window || g_tl.in_window || o->windows != g_tl.windows)
        record(&o->ev);
}

void shd_step_begin_slow(int32_t step, int line)
{
    if (g_tl.windowed) {
        g_tl.in_window = step >= g_tl.lo && step < g_tl.hi;
        g_tl.windows += g_tl.in_window;
    }
    shd_span_begin_slow(SHD_SPAN_STEP, "step", 0, line);
    if (!g_tl.overflow && g_tl.depth)
        g_tl.stack[g_tl.depth - 1].ev.a = step;
}

void shd_step_end_slow(void)
{
    shd_span_end_slow();
    g_tl.in_window = !g_tl.windowed;
}

void shd_span_args(int64_t a, int64_t b, int64_t c)
{
    if (!shd_timeline_on || g_tl.overflow || !g_tl.depth)
        return;
    tl_event *e = &g_tl.stack[g_tl.depth - 1].ev;
    e->a = a;
    e->b = b;
    e->c = c;
}

void shd_timeline_collective(const char *kind, size_t bytes)
{
    if (!shd_timeline_on || g_tl.overflow || !g_tl.depth)
        return;
    tl_event *e = &g_tl.stack[g_tl.depth - 1].ev;
    if (e->kind != SHD_SPAN_COLLECTIVE)
        return;
    e->name = kind;
    e->a = (int64_t)bytes;
}

void shd_timeline_begin_collective(const int *axes, int naxes, MPI_Comm comm)
{
    if (!shd_timeline_on)
        return;
    shd_span_begin_slow(SHD_SPAN_COLLECTIVE, "collective", 0, 0);
    if (!g_tl.overflow && g_tl.depth) {
        tl_event *e = &g_tl.stack[g_tl.depth - 1].ev;
        size_t used = 0;
        for (int i = 0; i < naxes && used + 2 < sizeof e->axes; i++)
            used += (size_t)snprintf(e->axes + used, sizeof e->axes - used, "%s%s", i ? "," : "",
                                     shd_axis_name(axes[i]));
        if (!axes)
            snprintf(e->axes, sizeof e->axes, "mesh");
    }
    if (comm != MPI_COMM_NULL && g_tl.in_window) {   /* every rank is in or out of the window alike */
        shd_span_begin_slow(SHD_SPAN_WAIT, "wait", 0, 0);
        MPI_Barrier(comm);
        shd_span_end_slow();
    }
}

void shd_timeline_counter(size_t live_bytes)
{
    if (!shd_timeline_on || !g_tl.in_window)
        return;
    tl_event e = {now_ns() - g_tl.t0, -1, "live array bytes", 0, 0, 0, (int64_t)live_bytes, 0, 0, ""};
    record(&e);
}

/* ---- output ------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            shd_fatal("trace: formatting failed");
        if (t->buf && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        t->buf = shd_mem_grow(t->buf, &t->cap, t->len + (size_t)n + 1, 1, "trace: formatting %zu events", g_tl.n);
    }
}

static void put_time(text *t, const char *key, int64_t ns)
{
    put(t, "\"%s\":%lld.%03lld", key, (long long)(ns / 1000), (long long)(ns % 1000));
}

static void format_event(text *t, const tl_event *e, int rank, int tid)
{
    put(t, ",\n{\"pid\":%d,\"tid\":%d,", rank + 1, tid);
    if (e->dur < 0) {
        put(t, "\"ph\":\"C\",\"name\":\"%s\",", e->name);
        put_time(t, "ts", e->start);
        put(t, ",\"args\":{\"bytes\":%lld}}", (long long)e->a);
        return;
    }
    put(t, "\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",", kind_names[e->kind], e->name);
    put_time(t, "ts", e->start);
    put(t, ",");
    put_time(t, "dur", e->dur);
    put(t, ",\"args\":{\"line\":%d", e->line);
    if (e->line && e->file >= 0 && e->file < g_tl.nfiles)
        put(t, ",\"file\":%s", g_tl.files[e->file]);
    if (e->kind == SHD_SPAN_GEMM)
        put(t, ",\"M\":%lld,\"N\":%lld,\"K\":%lld", (long long)e->a, (long long)e->b, (long long)e->c);
    if (e->kind == SHD_SPAN_COLLECTIVE)
        put(t, ",\"kind\":\"%s\",\"axes\":\"%s\",\"bytes\":%lld", e->name, e->axes, (long long)e->a);
    if (e->kind == SHD_SPAN_STEP)
        put(t, ",\"step\":%lld", (long long)e->a);
    put(t, "}}");
}

static text format_rank(int rank)
{
    text t = {0};
    put(&t, ",\n{\"pid\":%d,\"tid\":1,\"ph\":\"M\",\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}}",
        rank + 1, rank);
    put(&t, ",\n{\"pid\":%d,\"tid\":1,\"ph\":\"M\",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
        rank + 1, rank);
    put(&t, ",\n{\"pid\":%d,\"tid\":1,\"ph\":\"M\",\"name\":\"thread_name\",\"args\":{\"name\":\"rank %d\"}}",
        rank + 1, rank);
    for (size_t i = 0; i < g_tl.n; i++)
        format_event(&t, &g_tl.events[i], rank, 1);
    if (g_comm.n)
        put(&t, ",\n{\"pid\":%d,\"tid\":2,\"ph\":\"M\",\"name\":\"thread_name\",\"args\":{\"name\":\"rank %d "
                "communication\"}}", rank + 1, rank);
    for (size_t i = 0; i < g_comm.n; i++)
        format_event(&t, &g_comm.events[i], rank, 2);
    return t;
}

static void write_or_die(const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, g_tl.out) != n)
        shd_fatal("cannot write the trace %s: %s", g_tl.path, strerror(errno));
}

/* Rank 0 receives each rank's text in pieces that fit an int count. */
static void collect(int from)
{
    uint64_t len;
    MPI_Recv(&len, 1, MPI_UINT64_T, from, 0x7e, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    char *buf = shd_mem(NULL, len, "trace: receiving rank %d's timeline", from);
    for (uint64_t done = 0; done < len;) {
        int n = len - done > (1u << 30) ? 1 << 30 : (int)(len - done);
        MPI_Recv(buf + done, n, MPI_CHAR, from, 0x7f, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        done += (uint64_t)n;
    }
    write_or_die(buf, len);
    free(buf);
}

static void send_to_root(const text *t)
{
    uint64_t len = t->len;
    MPI_Send(&len, 1, MPI_UINT64_T, 0, 0x7e, MPI_COMM_WORLD);
    for (uint64_t done = 0; done < len;) {
        int n = len - done > (1u << 30) ? 1 << 30 : (int)(len - done);
        MPI_Send(t->buf + done, n, MPI_CHAR, 0, 0x7f, MPI_COMM_WORLD);
        done += (uint64_t)n;
    }
}

void shd_timeline_write(void)
{
    if (!shd_timeline_on)
        return;
    while (g_tl.depth)   /* spans still open (none in generated code) close now */
        shd_span_end_slow();
    shd_timeline_on = false;
    uint64_t dropped = g_tl.dropped, total = 0;
    MPI_Reduce(&dropped, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    text t = format_rank(shd_world_rank());
    free(g_tl.events);
    g_tl.events = NULL;
    for (int i = 0; i < g_tl.nfiles; i++)
        free(g_tl.files[i]);
    free(g_tl.files);
    g_tl.files = NULL;
    g_tl.nfiles = 0;
    if (shd_world_rank() != 0) {
        send_to_root(&t);
        free(t.buf);
        return;
    }
    int fd = shd_temp_create(&g_tl.tmp, g_tl.path, "shd-trace");
    if (fd >= 0)
        shd_guard_temp(g_tl.tmp.path);   /* removed if anything below stops the run */
    g_tl.out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!g_tl.out)
        shd_fatal("cannot write the trace %s: cannot create %s: %s", g_tl.path, g_tl.tmp.path, strerror(errno));
    text head = {0};
    put(&head, TRACE_HEAD ":\"ms\",\"otherData\":{\"producer\":\"shdc runtime\",\"ranks\":%d,"
               "\"mesh\":\"%s\",\"first_pid\":1,\"steps\":\"%s\",\"dropped_events\":%llu},\n\"traceEvents\":[",
        shd_world_size(), shd_mesh_desc(), g_tl.windowed ? g_tl.window : "all", (unsigned long long)total);
    write_or_die(head.buf, head.len);
    free(head.buf);
    write_or_die(t.buf + 1, t.len - 1);   /* rank 0 starts the list: no comma */
    free(t.buf);
    for (int r = 1; r < shd_world_size(); r++)
        collect(r);
    write_or_die("\n]}\n", 4);
    if (fclose(g_tl.out) != 0) {
        g_tl.out = NULL;
        shd_fatal("cannot write the trace %s: %s", g_tl.path, strerror(errno));
    }
    g_tl.out = NULL;
    const char *why;
    if (shd_temp_commit(&g_tl.tmp, g_tl.path, &why) != 0)
        shd_fatal("cannot write the trace: %s %s", g_tl.path, why);
    shd_guard_temp(NULL);
    if (total)
        fprintf(stderr, "%s: trace: %llu events were dropped (over SHD_TRACE_MAX_EVENTS=%zu per rank; "
                "SHD_TRACE_STEPS=A:B traces a window of steps)\n", shd_program_name(), (unsigned long long)total,
                g_tl.max);
}
