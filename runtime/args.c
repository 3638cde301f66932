/* args.c: the program's command line, `--NAME=VALUE` for each arg("NAME",
 * default) of the program.
 *
 * The generated main hands shd_args_check the table of every arg the
 * program reads (name, dtype, default) right after shd_init. Before any
 * computation it checks the whole command line: `--help` (or -h) prints
 * the arguments with their types and defaults and ends the run with status
 * 0; an unknown or malformed flag, a bare word, a value that does not parse
 * or does not fit the argument's type (1e99 for an f32, 2^31 for an i32,
 * inf or nan for a float)
 * is an error naming the flag, and every rank exits with status 1 after
 * MPI_Finalize (no MPI_Abort, whose banner would bury the message). The
 * later lookups (shd_arg_i32, ...) read values that were checked; the last
 * of a repeated flag wins.
 *
 * Invariant: every rank sees the same argv and decides alike, and the
 * verdict is agreed on collectively anyway, so no rank is ever left waiting
 * in the program's first collective while the others exit.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shdrt_internal.h"

#define MSG_LEN 1024

/* A name as the user can read it: bytes outside printable ASCII as \xHH. */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < cap; p++)
        n += (size_t)snprintf(buf + n, cap - n, *p >= 32 && *p < 127 ? "%c" : "\\x%02x", *p);
    buf[n] = 0;
    return buf;
}

/* The value of the last --name=value, "" for a bare --name, else NULL. */
static const char *find_arg(const char *name)
{
    int argc;
    char **argv;
    shd_saved_args(&argc, &argv);
    size_t n = strlen(name);
    const char *found = NULL;
    for (int i = 1; i < argc && argv && argv[i]; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0)
            continue;
        if (a[2 + n] == '=')
            found = a + 3 + n;
        else if (a[2 + n] == 0)
            found = "";
    }
    return found;
}

/* ---- values ----------------------------------------------------------------- */

static const char *const yes[] = { "", "1", "true", "True", "yes", "on" };
static const char *const no[] = { "0", "false", "False", "no", "off" };

static int parse_bool(const char *v)
{
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (strcmp(v, yes[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (strcmp(v, no[i]) == 0)
            return 0;
    return -1;
}

/* A str argument takes any value that fits a str. */
static const char *str_problem(const char *v)
{
    return strlen(v) < SHD_STR_MAX ? "" : "longer than 4095 bytes, the limit of a str";
}

/* Checks one value against its dtype; "" when it is fine, else why not. */
static const char *value_problem(const char *v, shd_dtype dt)
{
    char *end;
    errno = 0;
    if (dt == SHD_BOOL)
        return parse_bool(v) >= 0 ? "" : "expected true or false";
    if (!*v || *v == ' ' || *v == '\t')
        return dt == SHD_I32 ? "expected an i32 integer" : "expected a number";
    if (dt == SHD_I32) {
        long long x = strtoll(v, &end, 10);
        if (*end)
            return "expected an i32 integer";
        if (errno == ERANGE || x < INT32_MIN || x > INT32_MAX)
            return "out of range for i32 (-2147483648 to 2147483647)";
        return "";
    }
    double x = strtod(v, &end);
    if (*end)
        return "expected a number";
    if (errno == ERANGE && fabs(x) > 1)
        return "out of range for f64 (magnitude at most 1.7976931348623157e+308)";
    if (isnan(x) || isinf(x))
        return dt == SHD_F32 ? "not a finite number (an f32 argument is a number of magnitude at most 3.4028235e+38)"
                             : "not a finite number (an f64 argument is a number of magnitude at most "
                               "1.7976931348623157e+308)";
    if (dt == SHD_F32 && isfinite(x) && fabs(x) > FLT_MAX)
        return "out of range for f32 (magnitude at most 3.4028235e+38)";
    return "";
}

/* ---- the whole command line --------------------------------------------------- */

static const shd_arg_spec *lookup(const shd_arg_spec *specs, int n, const char *a, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && memcmp(specs[i].name, a, len) == 0)
            return &specs[i];
    return NULL;
}

static void list_names(char *buf, size_t cap, const shd_arg_spec *specs, int n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at + 1 < cap; i++) {
        char nm[256];
        at += (size_t)snprintf(buf + at, cap - at, "%s--%s", i ? ", " : "", shown(specs[i].name, nm, sizeof nm));
    }
}

__attribute__((format(printf, 2, 3)))
static void problem(char *msg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, MSG_LEN, fmt, ap);
    va_end(ap);
}

/* The first problem of one command-line word, into msg. */
static void check_word(const char *a, const shd_arg_spec *specs, int n, char *msg)
{
    char nm[512], names[2048];
    if (strncmp(a, "--", 2) != 0 || a[2] == 0 || a[2] == '=') {
        problem(msg, "unexpected argument '%s': arguments are written --NAME=VALUE (see --help)", shown(a, nm, sizeof nm));
        return;
    }
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    const shd_arg_spec *s = lookup(specs, n, a + 2, len);
    if (!s) {
        list_names(names, sizeof names, specs, n);
        problem(msg, "unknown argument '%s'; %s%s (see --help)", shown(a, nm, sizeof nm),
                n ? "this program takes " : "this program takes no arguments", names);
        return;
    }
    const char *why = s->sdef ? str_problem(eq ? eq + 1 : "") : value_problem(eq ? eq + 1 : "", s->dtype);
    if (!eq && (s->sdef || s->dtype != SHD_BOOL))
        problem(msg, "argument --%s needs a value: --%s=%s", shown(s->name, nm, sizeof nm), nm,
                s->sdef ? "str" : shd_dtype_name(s->dtype));
    else if (*why)
        problem(msg, "argument %s: %s", shown(a, nm, sizeof nm), why);
}

static void print_help(const char *prog, const shd_arg_spec *specs, int n)
{
    const char *slash = prog ? strrchr(prog, '/') : NULL;
    printf("usage: mpirun -np N %s%s\n", slash ? slash + 1 : prog ? prog : "PROGRAM", n ? " [--NAME=VALUE ...]" : "");
    printf(n ? "\narguments:\n" : "\nthis program takes no arguments\n");
    for (int i = 0; i < n; i++) {
        char nm[512], def[64];
        if (specs[i].dtype == SHD_BOOL)
            snprintf(def, sizeof def, "%s", specs[i].def != 0 ? "true" : "false");
        else if (specs[i].sdef)
            snprintf(def, sizeof def, "\"%.40s\"", shown(specs[i].sdef, nm, sizeof nm));
        else
            snprintf(def, sizeof def, "%.9g", specs[i].def);
        printf("  --%s=%s  (default %s)\n", shown(specs[i].name, nm, sizeof nm),
               specs[i].sdef ? "str" : shd_dtype_name(specs[i].dtype), def);
    }
    fflush(stdout);
}

void shd_args_check(const shd_arg_spec *specs, int n)
{
    int argc;
    char **argv;
    shd_saved_args(&argc, &argv);
    char msg[MSG_LEN] = "";
    int help = 0;
    for (int i = 1; i < argc && argv && argv[i] && !msg[0]; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            help = 1;
        else
            check_word(argv[i], specs, n, msg);
    }
    int verdict = msg[0] ? 2 : help, all = verdict;
    MPI_Allreduce(&verdict, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all == 0)
        return;
    if (shd_world_rank() == 0) {
        if (all == 2)
            fprintf(stderr, "shdc: rank 0: %s\n", msg[0] ? msg : "bad arguments on another rank");
        else
            print_help(argv ? argv[0] : NULL, specs, n);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(all == 2 ? 1 : 0);
}

/* ---- lookups ---------------------------------------------------------------- */

/* A value shd_args_check did not see (a program built without the table)
 * is still checked; every rank decides alike, rank 0 reports. */
static void recheck(const char *name, const char *v, shd_dtype dt)
{
    const char *why = value_problem(v, dt);
    if (*why) {
        char nm[512];
        shd_fatal("argument --%s=%s: %s", shown(name, nm, sizeof nm), v, why);
    }
}

int32_t shd_arg_i32(const char *name, int32_t def)
{
    const char *v = find_arg(name);
    if (!v)
        return def;
    recheck(name, v, SHD_I32);
    return (int32_t)strtoll(v, NULL, 10);
}

double shd_arg_f64(const char *name, double def)
{
    const char *v = find_arg(name);
    if (!v)
        return def;
    recheck(name, v, SHD_F64);
    return strtod(v, NULL);
}

bool shd_arg_bool(const char *name, bool def)
{
    const char *v = find_arg(name);
    if (!v)
        return def;
    recheck(name, v, SHD_BOOL);
    return parse_bool(v) == 1;
}

void shd_arg_str(shd_str *out, const char *name, const char *def, int64_t def_len)
{
    const char *v = find_arg(name);
    if (!v) {
        shd_str_lit(out, def, def_len);
        return;
    }
    if (*str_problem(v)) {
        char nm[512];
        shd_fatal("argument --%s: %s", shown(name, nm, sizeof nm), str_problem(v));
    }
    shd_str_lit(out, v, (int64_t)strlen(v));
}
