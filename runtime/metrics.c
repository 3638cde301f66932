/* metrics.c: what a run reports as JSON: metrics(key=value, ...) as JSON
 * Lines, for plots and dashboards, and manifest(PATH, key=value, ...), the
 * record a checkpoint keeps of the run that wrote it.
 *
 * A program that calls metrics() accepts --metrics=FILE (args.c). Rank 0
 * opens FILE for appending when the command line is checked, before any
 * computation, so a path that cannot be written stops the run at once, not
 * after hours of training; a resumed run appends to the lines of the run
 * it continues. Each metrics() call on rank 0 becomes one line: a JSON
 * object of the call's keys in order, written with one write() and so
 * visible to a reader (tail -f, a plotting script) as soon as the call
 * returns. Without --metrics a call costs one test.
 *
 * Every line is valid JSON whatever the values: floats are the shortest
 * decimal that reads back exactly (as Python's repr); NaN and the
 * infinities, which JSON numbers cannot spell, are the strings "NaN",
 * "Infinity" and "-Infinity" (Python's float() and JavaScript's Number()
 * read them back); strings are escaped, bytes that are not UTF-8 replaced
 * by U+FFFD. A failed write stops every rank (shd_fatal) with the file,
 * the source line of the call and the cause: a metrics file is never left
 * short without a word.
 *
 * A manifest is one JSON object written to PATH through a temporary beside
 * it, renamed into place once complete: the program's name, the shdc that
 * built it, the mesh, its consts (after -D: an integer as such, a float as
 * the shortest decimal that reads back exactly, a dtype as its name, a
 * string), the value of every arg() as this run has it, then the keys of
 * the call. Rank 0 writes it;
 * every rank takes part in the verdict (shd_agree), so a manifest that
 * cannot be written stops every rank at that statement.
 *
 * Both build their object with the same writer (shd_json_*), which only
 * rank 0 fills; objects nest (shd_json_open/close) for the manifest's
 * parts.
 *
 * Invariant: only rank 0 writes; the other ranks never open the files.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "safefile.h"
#include "shdrt_internal.h"

#define MAX_NEST 8

static struct {
    bool wanted;             /* the program calls metrics() */
    int fd;                  /* rank 0, with --metrics: the file; else -1 */
    char path[4096];
    char *buf;               /* the object being built */
    size_t len, cap;
    int nkeys[MAX_NEST];     /* keys so far in each open object */
    int depth;
    bool pretty;             /* a manifest: one key a line, indented */
} g_m = { .fd = -1 };



void shd_metrics_enable(void) { g_m.wanted = true; }
bool shd_metrics_wanted(void) { return g_m.wanted; }
bool shd_metrics_on(void) { return g_m.fd >= 0; }

void shd_metrics_open(const char *path)
{
    if (!g_m.wanted)
        return;
    char why[4400] = "";
    if (shd_world_rank() == 0 && path) {
        if (!*path || strlen(path) >= sizeof g_m.path) {
            snprintf(why, sizeof why, "--metrics=%.100s: %s", path,
                     *path ? "the path is too long" : "the file name is empty");
        } else {
            /* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of
             * blocking the start; a terminal or pipe (/dev/stdout) works. */
            int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
            if (fd < 0)
                snprintf(why, sizeof why, "--metrics=%s: cannot open the file for appending: %s", path,
                         strerror(errno));   /* a directory is EISDIR */
            else {
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
                g_m.fd = fd;
                snprintf(g_m.path, sizeof g_m.path, "%s", path);
            }
        }
    }
    int bad = *why != 0;
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!bad)
        return;
    if (shd_world_rank() == 0) {
        fprintf(stderr, "%s: rank 0: %s\n", shd_program_name(), why);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(1);
}

/* ---- the line --------------------------------------------------------------- */

static void put(const char *s, size_t n)
{
    g_m.buf = shd_mem_grow(g_m.buf, &g_m.cap, g_m.len + n + 2, 1, "metrics: a line of %zu bytes", g_m.len + n);
    memcpy(g_m.buf + g_m.len, s, n);
    g_m.len += n;
}

static void puts_(const char *s) { put(s, strlen(s)); }

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (k == 0 || k > n || (k == 2 && s[0] < 0xC2) || (k == 4 && s[0] > 0xF4))
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (k == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0)))
        return 0;   /* overlong, or a UTF-16 surrogate */
    if (k == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;   /* overlong, or past U+10FFFF */
    return k;
}

/* s[0..n) as a quoted JSON string, in pieces to sink: quote and backslash
 * escaped, control bytes as \u00XX, bytes that are not UTF-8 as U+FFFD. */
static void json_escape(const char *s, size_t n, void (*sink)(void *, const char *, size_t), void *arg)
{
    sink(arg, "\"", 1);
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t k = utf8_len(p, (size_t)(end - p));
        char esc[8];
        if (k == 0) {
            sink(arg, "\\ufffd", 6);
            p++;
        } else if (k > 1) {
            sink(arg, (const char *)p, k);
            p += k;
        } else if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p++;
            sink(arg, esc, 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *p++);
            sink(arg, esc, 6);
        } else {
            sink(arg, (const char *)p++, 1);
        }
    }
    sink(arg, "\"", 1);
}

static void line_sink(void *arg, const char *s, size_t n)
{
    (void)arg;
    put(s, n);
}

static void json_string(const char *s, size_t n) { json_escape(s, n, line_sink, NULL); }

static void stream_sink(void *arg, const char *s, size_t n) { fwrite(s, 1, n, (FILE *)arg); }

char *shd_json_quote(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        shd_out_of_memory(strlen(s), "quoting a string");
    json_escape(s, strlen(s), stream_sink, f);
    if (fclose(f) != 0 || !buf)
        shd_out_of_memory(strlen(s), "quoting a string");
    return buf;
}

static void key(const char *k)
{
    if (g_m.nkeys[g_m.depth]++)
        put(",", 1);
    if (g_m.pretty) {
        put("\n", 1);
        for (int i = 0; i <= g_m.depth; i++)
            put("  ", 2);
    } else if (g_m.nkeys[g_m.depth] > 1) {
        put(" ", 1);
    }
    json_string(k, strlen(k));
    put(": ", 2);
}

static void begin(bool pretty)
{
    g_m.len = 0;
    g_m.depth = 0;
    g_m.nkeys[0] = 0;
    g_m.pretty = pretty;
    put("{", 1);
}

void shd_json_open(const char *k)
{
    if (g_m.depth + 1 >= MAX_NEST)
        shd_fatal("metrics: objects nest more than %d deep", MAX_NEST);
    key(k);
    put("{", 1);
    g_m.nkeys[++g_m.depth] = 0;
}

void shd_json_close(void)
{
    if (g_m.pretty && g_m.nkeys[g_m.depth]) {
        put("\n", 1);
        for (int i = 0; i < g_m.depth; i++)
            put("  ", 2);
    }
    put("}", 1);
    if (g_m.depth)
        g_m.depth--;
}

void shd_metrics_begin(void) { begin(false); }

void shd_json_i32(const char *k, int32_t v)
{
    char t[16];
    key(k);
    snprintf(t, sizeof t, "%d", (int)v);
    puts_(t);
}

void shd_json_float(const char *k, double v, bool f32)
{
    key(k);
    if (isnan(v)) {
        puts_("\"NaN\"");
        return;
    }
    if (isinf(v)) {
        puts_(v < 0 ? "\"-Infinity\"" : "\"Infinity\"");
        return;
    }
    shd_str t;
    shd_str_f64(&t, v, f32);   /* %g's forms are JSON numbers: 2.5, 1e-05, -3e+38 */
    put(t.s, (size_t)t.len);
}

void shd_json_bool(const char *k, bool v)
{
    key(k);
    puts_(v ? "true" : "false");
}

void shd_json_str(const char *k, const struct shd_str *v)
{
    key(k);
    json_string(v->s, (size_t)v->len);
}

void shd_json_text(const char *k, const char *v)
{
    key(k);
    json_string(v, strlen(v));
}

/* Each line ends with the wall-clock time it was written, as TensorBoard's
 * events carry theirs: "time", Unix seconds to the microsecond (the
 * compiler refuses a key of that name). */
void shd_metrics_end(int line)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char t[48];
    key("time");
    snprintf(t, sizeof t, "%lld.%06ld", (long long)ts.tv_sec, (long)(ts.tv_nsec / 1000));
    puts_(t);
    put("}\n", 2);
    for (size_t done = 0; done < g_m.len;) {
        ssize_t n = write(g_m.fd, g_m.buf + done, g_m.len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            shd_fatal("line %d: metrics: cannot write to %s: %s", line, g_m.path, n < 0 ? strerror(errno) : "no space");
        done += (size_t)n;
    }
}

/* ---- manifest ---------------------------------------------------------------- */

void shd_manifest_begin(const char *shdc, const shd_const *consts, int n)
{
    begin(true);
    if (shd_world_rank() != 0)
        return;
    shd_json_text("program", shd_program_name());
    shd_json_text("shdc", shdc);
    shd_json_i32("ranks", shd_world_size());
    int naxes, sizes[SHD_MAX_AXES];
    shd_mesh_shape(&naxes, sizes);
    shd_json_open("mesh");
    for (int a = 0; a < naxes; a++)
        shd_json_i32(shd_axis_name(a), sizes[a]);
    shd_json_close();
    shd_json_open("config");
    for (int i = 0; i < n; i++) {
        if (consts[i].kind == 'i') {
            char t[32];
            key(consts[i].name);
            snprintf(t, sizeof t, "%lld", consts[i].integer);
            puts_(t);
        } else if (consts[i].kind == 'd') {
            shd_json_text(consts[i].name, consts[i].text);
        } else {
            shd_json_float(consts[i].name, consts[i].number, false);
        }
    }
    shd_json_close();
    shd_json_open("args");
    shd_args_describe();
    shd_json_close();
}

/* How a manifest begins: only such a file (or a new name) is replaced. */
#define MANIFEST_HEAD "{\n  \"program\": "

/* Rank 0 writes PATH.tmp-PID, then renames it over PATH; the temporary is
 * removed if the run stops in between (guard.c). */
static const char *write_manifest(const char *path)
{
    static char why[4400];
    char tmp[4200];
    const char *bad = shd_file_unreplaceable(path);
    if (bad || (bad = shd_file_foreign(path, MANIFEST_HEAD, strlen(MANIFEST_HEAD), "a manifest this runtime wrote"))) {
        snprintf(why, sizeof why, "%.4000s %s", path, bad);
        return why;
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return "the path is too long";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot create %s: %s", tmp, strerror(errno));
        return why;
    }
    shd_guard_temp(tmp);
    const char *err = NULL;
    for (size_t done = 0; done < g_m.len && !err;) {
        ssize_t n = write(fd, g_m.buf + done, g_m.len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            err = n < 0 ? strerror(errno) : "no space";
        else
            done += (size_t)n;
    }
    if (!err && fsync(fd) != 0)
        err = strerror(errno);
    if (close(fd) != 0 && !err)
        err = strerror(errno);
    if (!err && rename(tmp, path) != 0)
        err = strerror(errno);
    if (err) {
        unlink(tmp);
        shd_guard_temp(NULL);
        snprintf(why, sizeof why, "cannot write %s: %s", path, err);
        return why;
    }
    shd_guard_temp(NULL);
    shd_ckpt_note(path, false);   /* in its directory's marker, when the runtime made it */
    return NULL;
}

void shd_manifest_end(const char *path, int line)
{
    const char *why = NULL;
    char msg[4600];
    if (shd_world_rank() == 0) {
        shd_json_close();
        put("\n", 1);
        why = write_manifest(path);
        if (why)
            snprintf(msg, sizeof msg, "line %d: manifest: %s", line, why);
    }
    shd_agree(why ? msg : NULL);
}
