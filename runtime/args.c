/* args.c: the program's command line, `--NAME=VALUE` or `--NAME VALUE`
 * for each arg("NAME", default, help="...") of the program.
 *
 * The generated main hands shd_args_check the table of every arg the
 * program reads (name, dtype, default, help) right after shd_init. Before
 * any computation it checks the whole command line: `--help` (or -h)
 * prints the arguments with their types, help and defaults and ends the run
 * with status 0; an unknown or malformed flag, a bare word, a value that
 * does not parse or does not fit the argument's type (1e99 for an f32, 2^31
 * for an i32, inf or nan for a float) is an error naming the flag, and every rank exits with status
 * 1 after MPI_Finalize (no MPI_Abort, whose banner would bury the message).
 * A flag's value follows '=' or is the next word (a bool's only after '=':
 * a bare `--flag` is true). `--metrics=FILE` is the runtime's own flag of a
 * program that calls metrics() (metrics.c opens FILE here, before any
 * step). A flag given twice is an error naming it. The later lookups
 * (shd_arg_i32, ...) read the values that were checked. Messages begin
 * with the program's name.
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

#include "editdist.h"
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

/* The command line as shd_args_check read it: each flag's name and value
 * ("" for a bare bool flag), in order. */
typedef struct {
    const char *name;
    size_t len;
    const char *value;
} parsed_flag;

static struct {
    parsed_flag *flags;
    int n;
    bool checked;            /* shd_args_check ran: flags is the whole truth */
} g_cl;

/* The value of the last --name=value or --name value, "" for a bare
 * --name, else NULL. Without shd_args_check (hand-written C) the words are
 * read as --name=value and --name only. */
static const char *find_arg(const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;
    if (g_cl.checked) {
        for (int i = 0; i < g_cl.n; i++)
            if (g_cl.flags[i].len == n && memcmp(g_cl.flags[i].name, name, n) == 0)
                found = g_cl.flags[i].value;
        return found;
    }
    int argc;
    char **argv;
    shd_saved_args(&argc, &argv);
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
        return dt == SHD_F32 ? "out of range for f32 (magnitude at most 3.4028235e+38)"
                             : "out of range for f64 (magnitude at most 1.7976931348623157e+308)";
    if (isnan(x) || isinf(x))
        return dt == SHD_F32 ? "not a finite number (an f32 argument is a number of magnitude at most 3.4028235e+38)"
                             : "not a finite number (an f64 argument is a number of magnitude at most "
                               "1.7976931348623157e+308)";
    if (dt == SHD_F32 && isfinite(x) && fabs(x) > FLT_MAX)
        return "out of range for f32 (magnitude at most 3.4028235e+38)";
    return "";
}

/* ---- the whole command line --------------------------------------------------- */

/* The runtime's own flags, known to every program that uses them. */
static const shd_arg_spec metrics_spec = {
    "metrics", SHD_I32, 0.0, "", 0,
    "append one JSON object per line for each metrics() call to FILE (rank 0, flushed each line)"};

static const shd_arg_spec *lookup(const shd_arg_spec *specs, int n, const char *a, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && memcmp(specs[i].name, a, len) == 0)
            return &specs[i];
    if (shd_metrics_wanted() && len == 7 && memcmp(a, "metrics", 7) == 0)
        return &metrics_spec;
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
    if (shd_metrics_wanted() && at + 1 < cap)
        snprintf(buf + at, cap - at, "%s--metrics", n ? ", " : "");
}

/* The flag nearest an unknown one (--step=3: steps), or NULL: within two
 * edits, and fewer than the name's length. */
static const char *nearest_name(const char *a, size_t len, const shd_arg_spec *specs, int n)
{
    char name[64];
    if (len >= sizeof name)
        return NULL;
    memcpy(name, a, len);
    name[len] = 0;
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i <= n; i++) {
        const char *cand = i < n ? specs[i].name : shd_metrics_wanted() ? "metrics" : NULL;
        int d = cand ? shd_edit_distance(name, cand, bestd) : 99;
        if (d < bestd && d < (int)len) {
            bestd = d;
            best = cand;
        }
    }
    return best;
}

__attribute__((format(printf, 2, 3)))
static void problem(char *msg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, MSG_LEN, fmt, ap);
    va_end(ap);
}

static const char *type_word(const shd_arg_spec *s)
{
    return s == &metrics_spec ? "FILE" : s->sdef ? "str" : shd_dtype_name(s->dtype);
}

/* Reads the flag at argv[*i] (and its value, when it is the next word)
 * into *out; the first problem into msg. after_bool: the word before was a
 * bare bool flag (to explain a stray "false"). */
static void read_flag(char **argv, int argc, int *i, const shd_arg_spec *specs, int n, parsed_flag *out,
                      bool after_bool, char *msg)
{
    char nm[512], names[2048];
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || a[2] == 0 || a[2] == '=') {
        if (after_bool && (parse_bool(a) >= 0))
            problem(msg, "unexpected argument '%s': a bool flag takes its value after '=': --%s=%s",
                    shown(a, nm, sizeof nm), argv[*i - 1] + 2, nm);
        else
            problem(msg, "unexpected argument '%s': arguments are written --NAME=VALUE or --NAME VALUE (see --help)",
                    shown(a, nm, sizeof nm));
        return;
    }
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    const shd_arg_spec *s = lookup(specs, n, a + 2, len);
    if (!s) {
        const char *near = nearest_name(a + 2, len, specs, n);
        char near_nm[256];
        list_names(names, sizeof names, specs, n);
        if (near)
            problem(msg, "unknown argument '%s'; did you mean --%s? (this program takes %s; see --help)",
                    shown(a, nm, sizeof nm), shown(near, near_nm, sizeof near_nm), names);
        else
            problem(msg, "unknown argument '%s'; %s%s (see --help)", shown(a, nm, sizeof nm),
                    n || shd_metrics_wanted() ? "this program takes " : "this program takes no arguments", names);
        return;
    }
    out->name = a + 2;
    out->len = len;
    bool str = s->sdef != NULL;
    if (eq) {
        out->value = eq + 1;
    } else if (!str && s->dtype == SHD_BOOL) {
        out->value = "";
    } else if (*i + 1 < argc && argv[*i + 1] && strncmp(argv[*i + 1], "--", 2) != 0) {
        out->value = argv[++*i];
    } else {
        problem(msg, "argument --%s needs a value: --%s=%s or --%s %s", shown(s->name, nm, sizeof nm), nm,
                type_word(s), nm, type_word(s));
        return;
    }
    const char *why = str ? str_problem(out->value) : value_problem(out->value, s->dtype);
    if (*why) {
        if (eq)
            problem(msg, "argument %s: %s", shown(a, nm, sizeof nm), why);
        else
            problem(msg, "argument --%s %s: %s", shown(s->name, nm, sizeof nm), out->value, why);
    }
}

static void print_help(const char *prog, const shd_arg_spec *specs, int n)
{
    const char *slash = prog ? strrchr(prog, '/') : NULL;
    int all = n + (shd_metrics_wanted() ? 1 : 0);
    printf("usage: mpirun -np N %s%s\n", slash ? slash + 1 : prog ? prog : "PROGRAM",
           all ? " [--NAME=VALUE | --NAME VALUE ...]" : "");
    printf(all ? "\narguments:\n" : "\nthis program takes no arguments\n");
    int width = 0;
    char flag[600], nm[512];
    for (int i = 0; i < all; i++) {
        const shd_arg_spec *s = i < n ? &specs[i] : &metrics_spec;
        int w = snprintf(flag, sizeof flag, "--%s=%s", shown(s->name, nm, sizeof nm), type_word(s));
        width = w > width && w < 40 ? w : width;
    }
    for (int i = 0; i < all; i++) {
        const shd_arg_spec *s = i < n ? &specs[i] : &metrics_spec;
        char def[128], help[1024];
        if (s == &metrics_spec)
            snprintf(def, sizeof def, "none");
        else if (s->dtype == SHD_BOOL && !s->sdef)
            snprintf(def, sizeof def, "%s", s->def != 0 ? "true" : "false");
        else if (s->sdef)
            snprintf(def, sizeof def, "\"%.80s\"", shown(s->sdef, nm, sizeof nm));
        else
            snprintf(def, sizeof def, "%.9g", s->def);
        snprintf(flag, sizeof flag, "--%s=%s", shown(s->name, nm, sizeof nm), type_word(s));
        snprintf(help, sizeof help, "%s", s->help ? s->help : "");   /* printable: the compiler checks */
        printf("  %-*s  %s%s(default %s)\n", width, flag, help, *help ? " " : "", def);
    }
    fflush(stdout);
}

/* A flag given twice is an error, as getopt-based tools and shdc's own -o
 * make it: which of the two was meant is not ours to guess. */
static void check_once(const parsed_flag *f, char *msg)
{
    char raw[512], nm[512], first[512], second[512];
    for (int i = 0; i < g_cl.n; i++)
        if (g_cl.flags[i].len == f->len && memcmp(g_cl.flags[i].name, f->name, f->len) == 0) {
            snprintf(raw, sizeof raw, "%.*s", (int)f->len, f->name);
            shown(raw, nm, sizeof nm);
            shown(g_cl.flags[i].value, first, sizeof first);
            shown(f->value, second, sizeof second);
            problem(msg, "argument --%s is given twice (--%s=%s, then --%s=%s): give it once", nm, nm, first, nm,
                    second);
            return;
        }
}

static const shd_arg_spec *g_specs;   /* the table shd_args_check read */
static int g_nspecs;

void shd_args_describe(void)
{
    for (int i = 0; i < g_nspecs; i++) {
        const shd_arg_spec *s = &g_specs[i];
        if (s->sdef) {
            shd_str v;
            shd_arg_str(&v, s->name, s->sdef, s->sdef_len);
            shd_json_str(s->name, &v);
        } else if (s->dtype == SHD_BOOL) {
            shd_json_bool(s->name, shd_arg_bool(s->name, s->def != 0));
        } else if (s->dtype == SHD_I32) {
            shd_json_i32(s->name, shd_arg_i32(s->name, (int32_t)s->def));
        } else {
            shd_json_float(s->name, shd_arg_f64(s->name, s->def), s->dtype == SHD_F32);
        }
    }
}

static const char *g_built_by = "";

void shd_program_info(const char *shdc) { g_built_by = shdc ? shdc : ""; }

/* --version, rank 0: the program, the shdc that built it, its mesh. */
static void print_version(void)
{
    int naxes, sizes[SHD_MAX_AXES];
    long ranks = 1;
    shd_mesh_shape(&naxes, sizes);
    for (int a = 0; a < naxes; a++)
        ranks *= sizes[a];
    printf("%s: built by %s for --mesh %s (%ld ranks); runtime ABI %d\n", shd_program_name(),
           *g_built_by ? g_built_by : "shdc", shd_mesh_desc(), ranks, SHD_ABI_VERSION);
    fflush(stdout);
}

void shd_args_check(const shd_arg_spec *specs, int n)
{
    g_specs = specs;
    g_nspecs = n;
    int argc;
    char **argv;
    shd_saved_args(&argc, &argv);
    char msg[MSG_LEN] = "";
    int help = 0;
    g_cl.flags = shd_mem_zero((size_t)(argc > 0 ? argc : 1), sizeof *g_cl.flags, "reading the command line");
    bool after_bool = false;
    for (int i = 1; i < argc && argv && argv[i] && !msg[0]; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help = help ? help : 1;
            continue;
        }
        if (strcmp(argv[i], "--version") == 0 && !lookup(specs, n, "version", 7)) {
            help = 3;
            continue;
        }
        parsed_flag f = {0};
        int at = i;
        read_flag(argv, argc, &i, specs, n, &f, after_bool, msg);
        after_bool = !msg[0] && f.name && !strchr(argv[at], '=') && i == at && f.value && *f.value == 0;
        if (f.name && !msg[0])
            check_once(&f, msg);
        if (f.name && !msg[0])
            g_cl.flags[g_cl.n++] = f;
    }
    g_cl.checked = true;
    int verdict = msg[0] ? 2 : help, all = verdict;
    MPI_Allreduce(&verdict, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all == 0) {
        shd_mesh_check_size();
        shd_metrics_open(find_arg("metrics"));
        return;
    }
    if (shd_world_rank() == 0) {
        if (all == 2)
            fprintf(stderr, "%s: rank 0: %s\n", shd_program_name(), msg[0] ? msg : "bad arguments on another rank");
        else if (all == 3)
            print_version();
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
