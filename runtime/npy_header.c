/* npy_header.c: the header of a .npy file, read as the Python dict literal
 * it is.
 *
 * NumPy writes {'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }
 * and reads it back with ast.literal_eval, so this parser follows Python's
 * syntax rather than searching for substrings: keys and string values may
 * use either quote and backslash escapes, a key's text inside another
 * string is only text, a repeated key takes the last value (as a Python
 * dict does), and the values of keys other than the three NumPy needs are
 * skipped whatever literal they are (nested tuples, lists and dicts up to
 * a fixed depth). `shape` must be a tuple of non-negative integers (a
 * Python 2 `L` suffix allowed), `fortran_order` True or False, `descr` a
 * string.
 *
 * Input: the header text and its length (it need not be NUL-terminated).
 * Output: descr, fortran order, rank and shape, or a reason.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "shdrt_internal.h"

#define MAX_NESTING 32

typedef struct {
    const char *p, *end;
    const char *why;
} scanner;

static void skip_ws(scanner *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool fail(scanner *s, const char *why)
{
    if (!s->why)
        s->why = why;
    return false;
}

static bool eat(scanner *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* A quoted string; its unescaped text goes to out (cut at cap) when out is
 * not NULL, and its full length to *len when len is not NULL. */
static bool string_lit(scanner *s, char *out, size_t cap, size_t *len)
{
    skip_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return fail(s, "expected a quoted string");
    char q = *s->p++;
    size_t n = 0, full = 0;
    while (s->p < s->end && *s->p != q) {
        if (*s->p == '\\' && s->p + 1 < s->end)
            s->p++;
        if (out && n + 1 < cap)
            out[n++] = *s->p;
        full++;
        s->p++;
    }
    if (s->p >= s->end)
        return fail(s, "unterminated string");
    s->p++;
    if (out && cap)
        out[n] = 0;
    if (len)
        *len = full;
    return true;
}

/* A non-negative integer, with Python 2's L suffix allowed. */
static bool int_lit(scanner *s, int64_t *v)
{
    skip_ws(s);
    if (s->p >= s->end || !isdigit((unsigned char)*s->p))
        return fail(s, "expected an integer in 'shape'");
    int64_t x = 0;
    while (s->p < s->end && isdigit((unsigned char)*s->p)) {
        if (x > (INT64_MAX - 9) / 10)
            return fail(s, "a dimension in 'shape' is too large");
        x = x * 10 + (*s->p++ - '0');
    }
    if (s->p < s->end && (*s->p == 'L' || *s->p == 'l'))
        s->p++;
    *v = x;
    return true;
}

static bool shape_lit(scanner *s, shd_npy_header *h)
{
    if (!eat(s, '('))
        return fail(s, "'shape' is not a tuple");
    h->rank = 0;
    if (eat(s, ')'))
        return true;
    for (;;) {
        if (h->rank > SHD_MAX_RANK)
            return fail(s, "'shape' has too many dimensions");
        if (!int_lit(s, &h->shape[h->rank++]))
            return false;
        bool comma = eat(s, ',');
        if (eat(s, ')'))
            return h->rank > 1 || comma ? true : fail(s, "'shape' is not a tuple (a 1-d shape is written (n,))");
        if (!comma)
            return fail(s, "expected ',' or ')' in 'shape'");
    }
}

/* Any literal: a string, a bracketed sequence or dict, or a bare word or
 * number (True, None, -1.5e3). */
static bool skip_value(scanner *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end)
        return fail(s, "a value is missing");
    char c = *s->p;
    if (c == '\'' || c == '"')
        return string_lit(s, NULL, 0, NULL);
    if (c == '(' || c == '[' || c == '{') {
        if (depth >= MAX_NESTING)
            return fail(s, "values nest too deeply");
        char close = c == '(' ? ')' : c == '[' ? ']' : '}';
        s->p++;
        while (!eat(s, close)) {
            if (!skip_value(s, depth + 1) || (c == '{' && (!eat(s, ':') || !skip_value(s, depth + 1))))
                return false;
            if (!eat(s, ',') && (skip_ws(s), s->p >= s->end || *s->p != close))
                return fail(s, "expected ',' between values");
        }
        return true;
    }
    const char *start = s->p;
    while (s->p < s->end && (isalnum((unsigned char)*s->p) || strchr("+-._", *s->p)))
        s->p++;
    return s->p > start ? true : fail(s, "unexpected character");
}

static bool entry(scanner *s, shd_npy_header *h, unsigned *seen)
{
    char key[64];
    if (!string_lit(s, key, sizeof key, NULL) || !eat(s, ':'))
        return fail(s, "expected 'key': value");
    if (strcmp(key, "descr") == 0) {
        *seen |= 1;
        size_t len;
        if (!string_lit(s, h->descr, sizeof h->descr, &len))
            return false;
        h->descr_odd = len >= sizeof h->descr || strlen(h->descr) != len;
        return true;
    }
    if (strcmp(key, "fortran_order") == 0) {
        skip_ws(s);
        size_t left = (size_t)(s->end - s->p);
        bool t = left >= 4 && memcmp(s->p, "True", 4) == 0, f = left >= 5 && memcmp(s->p, "False", 5) == 0;
        if (!t && !f)
            return fail(s, "'fortran_order' is not True or False");
        h->fortran = t;
        s->p += t ? 4 : 5;
        *seen |= 2;
        return true;
    }
    if (strcmp(key, "shape") == 0) {
        *seen |= 4;
        return shape_lit(s, h);
    }
    return skip_value(s, 0);
}

bool shd_npy_parse_header(const char *text, size_t len, shd_npy_header *h, const char **why)
{
    scanner s = { text, text + len, NULL };
    unsigned seen = 0;
    memset(h, 0, sizeof *h);
    bool ok = eat(&s, '{') || fail(&s, "the header is not a dict");
    while (ok && !eat(&s, '}')) {
        ok = entry(&s, h, &seen);
        if (ok && !eat(&s, ',') && (skip_ws(&s), s.p >= s.end || *s.p != '}'))
            ok = fail(&s, "expected ',' between entries");
    }
    skip_ws(&s);
    if (ok && s.p != s.end)
        ok = fail(&s, "text after the dict");
    if (ok && seen != 7)
        ok = fail(&s, !(seen & 1) ? "no 'descr'" : !(seen & 2) ? "no 'fortran_order'" : "no 'shape'");
    *why = s.why;
    return ok;
}
