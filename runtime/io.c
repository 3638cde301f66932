/* io.c: printing values.
 *
 * Arrays print the way NumPy's str() shows them: nested brackets, elements
 * separated by spaces and right-aligned to a common width, rows on new lines
 * indented under their opening bracket, blank lines between blocks of rank
 * 3 and up, lines wrapped at 75 columns, and, beyond 1000 elements, only the
 * first and last 3 entries of each longer dim around a "...". Element text
 * follows the scalar formats (f32 %.7g, f64 %.15g, i32 %d, True/False); the
 * float digits are not NumPy's shortest-repr ones.
 *
 * Invariant: the whole array text is built in memory and written with one
 * fwrite, so it is never interleaved with other output of the same rank.
 * (Program arguments are in args.c.)
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shdrt_internal.h"

#define LINE_WIDTH 75
#define EDGE_ITEMS 3
#define SUMMARY_THRESHOLD 1000

/* ---- growable string ------------------------------------------------------ */

typedef struct {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    b->s = shd_mem_grow(b->s, &b->cap, b->len + n + 1, 1, "printing");
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_spaces(sbuf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sb_put(b, " ", 1);
}

/* ---- elements ------------------------------------------------------------- */

/* A float that prints without a point or exponent gets one, as NumPy
 * shows them: "28." in an array, "28.0" for a scalar. */
static int mark_float(char *buf, size_t cap, int n, const char *suffix)
{
    if (n < 0 || (size_t)n >= cap || strpbrk(buf, ".einf"))
        return n;
    return n + snprintf(buf + n, cap - (size_t)n, "%s", suffix);
}

static int format_scalar(char *buf, size_t cap, double v, shd_dtype dt);

/* An array element: integral floats keep NumPy's trailing point. */
static int format_element(char *buf, size_t cap, double v, shd_dtype dt)
{
    int n = format_scalar(buf, cap, v, dt);
    return dt == SHD_F32 || dt == SHD_F64 || dt == SHD_BF16 ? mark_float(buf, cap, n, ".") : n;
}

static int format_scalar(char *buf, size_t cap, double v, shd_dtype dt)
{
    switch (dt) {
    case SHD_BOOL:
        return snprintf(buf, cap, "%s", v != 0 ? "True" : "False");
    case SHD_I32:
        return snprintf(buf, cap, "%d", (int)(int32_t)v);
    case SHD_F32:
    case SHD_F64:
    case SHD_BF16:   /* 4 digits: enough to tell every bf16 apart, as torch shows them */
        if (isnan(v))   /* glibc would write "-nan" for a negative NaN */
            return snprintf(buf, cap, "nan");
        return snprintf(buf, cap, dt == SHD_F32 ? "%.7g" : dt == SHD_BF16 ? "%.4g" : "%.15g", v);
    }
    return snprintf(buf, cap, "?");
}

static double element(const void *data, shd_dtype dt, int64_t i)
{
    switch (dt) {
    case SHD_F32: return ((const float *)data)[i];
    case SHD_F64: return ((const double *)data)[i];
    case SHD_I32: return ((const int32_t *)data)[i];
    case SHD_BOOL: return ((const uint8_t *)data)[i] != 0;
    case SHD_BF16: return shd_bf2f(((const uint16_t *)data)[i]);
    }
    return 0;
}

void shd_print_scalar(double v, shd_dtype dt)
{
    char buf[64];
    int n = format_scalar(buf, sizeof buf, v, dt);
    if (dt == SHD_F32 || dt == SHD_F64 || dt == SHD_BF16)
        mark_float(buf, sizeof buf, n, ".0");
    fputs(buf, stdout);
}

void shd_print_text(const char *s)
{
    fputs(s, stdout);
}

void shd_print_end(void)
{
    fputc('\n', stdout);
    fflush(stdout);
}

/* ---- arrays --------------------------------------------------------------- */

typedef struct {
    const void *data;
    shd_dtype dt;
    int rank;
    const int64_t *shape;
    int64_t stride[SHD_MAX_RANK];
    bool summarise;
    int width;   /* of the widest shown element */
} printer;

static bool shows_summary(const printer *p, int axis)
{
    return p->summarise && p->shape[axis] > 2 * EDGE_ITEMS;
}

/* Index of the k-th shown entry along `axis` and how many are shown: all,
 * or the first and last EDGE_ITEMS. */
static int64_t shown_index(const printer *p, int axis, int64_t k)
{
    if (!shows_summary(p, axis) || k < EDGE_ITEMS)
        return k;
    return p->shape[axis] - 2 * EDGE_ITEMS + k;
}

static int64_t shown_count(const printer *p, int axis)
{
    return shows_summary(p, axis) ? 2 * EDGE_ITEMS : p->shape[axis];
}

static void measure(printer *p, int axis, int64_t off)
{
    if (axis == p->rank) {
        char buf[64];
        int w = format_element(buf, sizeof buf, element(p->data, p->dt, off), p->dt);
        if (w > p->width)
            p->width = w;
        return;
    }
    for (int64_t k = 0; k < shown_count(p, axis); k++)
        measure(p, axis + 1, off + shown_index(p, axis, k) * p->stride[axis]);
}

static void put_word(const printer *p, sbuf *b, int64_t off)
{
    char buf[64];
    int w = format_element(buf, sizeof buf, element(p->data, p->dt, off), p->dt);
    sb_spaces(b, (size_t)(p->width - w));
    sb_puts(b, buf);
}

/* Appends `word` to the current line, first moving to a new line indented
 * by `hang` when it would pass `width` (but never wrapping an empty line). */
static void extend_line(sbuf *s, sbuf *line, const char *word, size_t width,
                        size_t hang)
{
    size_t wl = strlen(word);
    if (line->len + wl > width && line->len > hang) {
        size_t n = line->len;
        while (n > 0 && line->s[n - 1] == ' ')
            n--;
        sb_put(s, line->s, n);
        sb_put(s, "\n", 1);
        line->len = 0;
        sb_spaces(line, hang);
    }
    sb_put(line, word, wl);
}

/* The innermost dim: words on lines of at most `width` columns (the
 * caller keeps one column free for the closing ']'). */
static void format_row(const printer *p, int axis, int64_t off, size_t hang,
                       size_t width, sbuf *s)
{
    sbuf line = { 0 }, word = { 0 };
    sb_spaces(&line, hang);
    int64_t n = shown_count(p, axis);
    for (int64_t k = 0; k < n; k++) {
        if (shows_summary(p, axis) && k == EDGE_ITEMS) {
            extend_line(s, &line, "...", width, hang);
            sb_put(&line, " ", 1);
        }
        word.len = 0;
        put_word(p, &word, off + shown_index(p, axis, k) * p->stride[axis]);
        extend_line(s, &line, word.s, width, hang);
        if (k < n - 1)
            sb_put(&line, " ", 1);
    }
    sb_put(s, line.s, line.len);
    free(line.s);
    free(word.s);
}

/* NumPy's layout: the text of a sub-array is built with `hang` spaces of
 * hanging indent on every line, then the first line's indent is replaced
 * by its '['. */
static void format_rec(const printer *p, int axis, int64_t off, size_t hang,
                       size_t width, sbuf *out)
{
    sbuf s = { 0 };
    if (axis == p->rank - 1) {
        format_row(p, axis, off, hang, width - 1, &s);
    } else {
        int64_t n = shown_count(p, axis);
        size_t blank = (size_t)(p->rank - axis - 1);
        for (int64_t k = 0; k < n; k++) {
            if (shows_summary(p, axis) && k == EDGE_ITEMS) {
                sb_spaces(&s, hang);
                sb_puts(&s, "...");
                for (size_t i = 0; i < blank; i++)
                    sb_put(&s, "\n", 1);
            }
            sbuf nested = { 0 };
            format_rec(p, axis + 1, off + shown_index(p, axis, k) * p->stride[axis],
                       hang + 1, width - 1, &nested);
            sb_spaces(&s, hang);
            sb_put(&s, nested.s, nested.len);
            free(nested.s);
            for (size_t i = 0; k < n - 1 && i < blank; i++)
                sb_put(&s, "\n", 1);
        }
    }
    sb_put(out, "[", 1);
    if (s.len > hang)
        sb_put(out, s.s + hang, s.len - hang);
    sb_put(out, "]", 1);
    free(s.s);
}

void shd_print_array(const void *data, shd_dtype dt, int rank,
                     const int64_t *shape)
{
    if (rank < 0 || rank > SHD_MAX_RANK)
        shd_fatal("print of a rank-%d array", rank);
    int64_t count = shd_shape_count(rank, shape);
    if (rank == 0) {
        shd_print_scalar(element(data, dt, 0), dt);
        return;
    }
    if (count == 0) {
        fputs("[]", stdout);
        return;
    }
    printer p = { data, dt, rank, shape, { 0 }, count > SUMMARY_THRESHOLD, 0 };
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        p.stride[d] = s;
        s *= shape[d];
    }
    measure(&p, 0, 0);
    sbuf out = { 0 };
    format_rec(&p, 0, 0, 1, LINE_WIDTH, &out);
    fwrite(out.s, 1, out.len, stdout);
    free(out.s);
}
