/* str.c: run-time strings, the language's `str` (file names built from a
 * directory given on the command line and step numbers).
 *
 * Input: literals (bytes and a length, as the generated C's escaped
 * literals), command-line values, numbers. Output: shd_str values, held by
 * value in the generated code (no allocation, nothing to free), at most
 * SHD_STR_MAX - 1 bytes and NUL-terminated. Invariant: a str is the same on
 * every rank (the typechecker allows no varying or sharded strings), so a
 * string too long for the limit, or a path no file can have, stops every
 * rank at the same statement, naming its source line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

static void too_long(int64_t len, int line)
{
    shd_fatal("line %d: a string of %lld bytes is longer than the limit of %d bytes for str values", line,
              (long long)len, SHD_STR_MAX - 1);
}

void shd_str_lit(shd_str *out, const char *bytes, int64_t len)
{
    if (len >= SHD_STR_MAX)
        too_long(len, 0);
    memcpy(out->s, bytes, (size_t)len);
    out->s[len] = 0;
    out->len = (int32_t)len;
}

void shd_str_cat(shd_str *out, const shd_str *a, const shd_str *b, int line)
{
    int64_t len = (int64_t)a->len + b->len;
    if (len >= SHD_STR_MAX)
        too_long(len, line);
    /* out may be a or b: move the second part first. */
    memmove(out->s + a->len, b->s, (size_t)b->len);
    if (out != a)
        memmove(out->s, a->s, (size_t)a->len);
    out->s[len] = 0;
    out->len = (int32_t)len;
}

void shd_str_chr(shd_str *out, int32_t x, int line)
{
    if (x < 1 || x > 255)
        shd_fatal("line %d: chr(%d): a str byte is 1 to 255", line, (int)x);
    out->s[0] = (char)x;
    out->s[1] = 0;
    out->len = 1;
}

void shd_str_i32(shd_str *out, int32_t x, int width, int line)
{
    if (width < 0 || width > 1000)
        shd_fatal("line %d: str(x, width=%d): the width must be 0 to 1000", line, width);
    int64_t v = x;
    int n = v < 0 ? snprintf(out->s, SHD_STR_MAX, "-%0*lld", width, (long long)-v)
                  : snprintf(out->s, SHD_STR_MAX, "%0*lld", width, (long long)v);
    out->len = n;
}

void shd_str_f64(shd_str *out, double x, bool f32)
{
    /* The shortest precision that reads back exactly, as Python's repr;
     * a NaN is "nan" whatever its sign bit (x86's 0/0 sets it: glibc
     * would write "-nan"), as print shows it. */
    if (isnan(x)) {
        shd_str_lit(out, "nan", 3);
        return;
    }
    int n = 0;
    for (int p = 1; p <= (f32 ? 9 : 17); p++) {
        n = snprintf(out->s, SHD_STR_MAX, "%.*g", p, x);
        if (!isfinite(x) || (f32 ? (float)strtod(out->s, NULL) == (float)x : strtod(out->s, NULL) == x))
            break;
    }
    out->len = n;
}

void shd_str_bool(shd_str *out, bool x)
{
    shd_str_lit(out, x ? "true" : "false", x ? 4 : 5);
}

bool shd_str_eq(const shd_str *a, const shd_str *b)
{
    return a->len == b->len && memcmp(a->s, b->s, (size_t)a->len) == 0;
}

const char *shd_str_path(const shd_str *p, const char *what, int line)
{
    if (p->len == 0)
        shd_fatal("line %d: %s: the path is an empty string", line, what);
    if (memchr(p->s, 0, (size_t)p->len))
        shd_fatal("line %d: %s: the path \"%s...\" holds a NUL byte, which no file name can", line, what, p->s);
    return p->s;
}
