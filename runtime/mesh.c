/* mesh.c: process start and stop, the device mesh, groups of mesh axes,
 * fatal errors and the clock.
 *
 * Invariants: ranks are laid out row-major over the mesh axes in declaration
 * order, so a rank's coordinates are a pure function of its world rank and
 * the sizes. A group is an *ordered* list of distinct axes; the group index
 * linearises the coordinates on those axes in the given order (major first),
 * so {1,0} and {0,1} are different groups with different communicators. The
 * communicator of a group is made once, on first use, by
 * MPI_Comm_create_group with its members in group-index order, so the rank
 * inside it *is* the group index. That call is collective over the group's
 * members only, never over every rank: in a manual body a collective over
 * axes A may sit under a condition that varies over other axes (a pipeline
 * stage's gradient all-reduced over data), which only some groups reach,
 * and a group's members all reach it (the VMA rules: the condition is
 * invariant over A). An MPI_Comm_split over MPI_COMM_WORLD there waited
 * for ranks that never came.
 *
 * Before MPI_Init, shd_init may re-execute the program once with
 * OPENBLAS_CORETYPE set, because Debian's OpenBLAS picks slow generic kernels
 * on CPUs newer than itself and reads the variable only when it is loaded.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shdrt_internal.h"
#include "openblas_core.h"

char *openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);

#define REEXEC_MARKER "SHD_OPENBLAS_REEXEC"

typedef struct {
    int n;
    int axes[SHD_MAX_AXES];
    MPI_Comm comm;
} group_entry;

/* The mesh, the saved arguments and the communicator cache: the only state
 * this file keeps. */
static struct {
    int naxes;
    int sizes[SHD_MAX_AXES];
    char names[SHD_MAX_AXES][64];
    int coords[SHD_MAX_AXES];
    int rank, size;
    long product;            /* the ranks the mesh needs */
    int argc;
    char **argv;
    group_entry *groups;
    int ngroups;
    size_t cap_groups;
} g_mesh = { .size = 1, .product = 1 };

/* ---- small shared helpers --------------------------------------------- */

size_t shd_dtype_size(shd_dtype dt)
{
    switch (dt) {
    case SHD_F32: return 4;
    case SHD_F64: return 8;
    case SHD_I32: return 4;
    case SHD_BOOL: return 1;
    case SHD_BF16: return 2;
    }
    shd_fatal("invalid dtype %d", (int)dt);
}

const char *shd_dtype_name(shd_dtype dt)
{
    switch (dt) {
    case SHD_F32: return "f32";
    case SHD_F64: return "f64";
    case SHD_I32: return "i32";
    case SHD_BOOL: return "bool";
    case SHD_BF16: return "bf16";
    }
    return "?";
}

int64_t shd_shape_count(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

bool shd_shape_bytes(int rank, const int64_t *shape, size_t elem, int64_t *bytes)
{
    int64_t n = (int64_t)elem;
    for (int d = 0; d < rank; d++)
        if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n))
            return false;
    *bytes = n;
    return true;
}

/* ---- OpenBLAS kernel choice (before MPI_Init) ------------------------- */

/* Sets OPENBLAS_CORETYPE and re-executes when OpenBLAS chose generic
 * kernels; returns only when no re-exec happened. */
static void fix_openblas(char **argv, bool mpi_started)
{
    bool threads_unset = getenv("OPENBLAS_NUM_THREADS") == NULL;
    if (threads_unset) {
        /* One rank per core: OpenBLAS threads would only oversubscribe. The
         * library is already loaded, so also tell it directly. */
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        openblas_set_num_threads(1);
    }
    if (getenv("OPENBLAS_CORETYPE") || getenv(REEXEC_MARKER) || mpi_started ||
        !argv || !argv[0])
        return;
    const char *core = openblas_get_corename();
    const char *want = shd_openblas_core_wanted(core);
    if (!want)
        return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv(REEXEC_MARKER, core, 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* exec failed: run on with the slow kernels rather than not at all. */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(REEXEC_MARKER);
}

static void openblas_note(void)
{
    const char *old = getenv(REEXEC_MARKER);
    const char *quiet = getenv("SHD_QUIET");
    const char *now = getenv("OPENBLAS_CORETYPE");
    if (g_mesh.rank != 0 || !old || !now || (quiet && strcmp(quiet, "1") == 0))
        return;
    fprintf(stderr,
            "%s: note: OpenBLAS chose its generic '%s' kernels on this CPU; "
            "running with OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE to "
            "choose yourself, SHD_QUIET=1 to hide this note)\n", shd_program_name(), old, now);
    fflush(stderr);
}

/* ---- start and stop --------------------------------------------------- */

static void check_mesh_args(int naxes, const char *const *names, const int *sizes)
{
    if (naxes < 0 || naxes > SHD_MAX_AXES)
        shd_fatal("mesh has %d axes; at most %d are supported", naxes, SHD_MAX_AXES);
    for (int a = 0; a < naxes; a++)
        if (sizes[a] < 1)
            shd_fatal("mesh axis %s has size %d", names ? names[a] : "?", sizes[a]);
}

const char *shd_axis_name(int axis)
{
    return axis >= 0 && axis < g_mesh.naxes ? g_mesh.names[axis] : "?";
}

const char *shd_mesh_desc(void)
{
    static char desc[1024];
    size_t at = 0;
    desc[0] = 0;
    for (int a = 0; a < g_mesh.naxes && at < sizeof desc; a++)
        at += (size_t)snprintf(desc + at, sizeof desc - at, "%s%s=%d", a ? "," : "", g_mesh.names[a],
                               g_mesh.sizes[a]);
    return desc;
}

/* Wrong number of ranks: one clear message, then every rank leaves cleanly
 * (no MPI_Abort, whose report would bury the message). */
static void size_mismatch(long product)
{
    if (g_mesh.rank == 0) {
        char desc[1024];
        size_t at = 0;
        at += (size_t)snprintf(desc, sizeof desc, "{");
        for (int a = 0; a < g_mesh.naxes && at < sizeof desc; a++)
            at += (size_t)snprintf(desc + at, sizeof desc - at, "%s%s: %d",
                                   a ? ", " : "", g_mesh.names[a], g_mesh.sizes[a]);
        if (at < sizeof desc)
            snprintf(desc + at, sizeof desc - at, "}");
        fprintf(stderr,
                "%s: error: this program was built for mesh %s (%ld ranks) "
                "but was started with %d ranks; run it with mpirun -np %ld, or "
                "rebuild with shdc build --mesh ...\n",
                shd_program_name(), desc, product, g_mesh.size, product);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(1);
}

/* `prog --help` and `prog --version` answer at any rank count
 * (shd_args_check prints them, and checks the count when the command line
 * turns out to ask for neither). */
static bool wants_help(void)
{
    for (int i = 1; i < g_mesh.argc && g_mesh.argv && g_mesh.argv[i]; i++)
        if (strcmp(g_mesh.argv[i], "--help") == 0 || strcmp(g_mesh.argv[i], "-h") == 0 ||
            strcmp(g_mesh.argv[i], "--version") == 0)
            return true;
    return false;
}

void shd_init(int *argc, char ***argv, int naxes, const char *const *names,
              const int *sizes)
{
    int started = 0;
    MPI_Initialized(&started);
    fix_openblas(argv ? *argv : NULL, started);
    int provided = MPI_THREAD_SINGLE;
    if (!started)
        MPI_Init_thread(argc, argv, shd_async_wanted() ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    else
        MPI_Query_thread(&provided);
    shd_guard_init();
    MPI_Comm_rank(MPI_COMM_WORLD, &g_mesh.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_mesh.size);
    g_mesh.argc = argc ? *argc : 0;
    g_mesh.argv = argv ? *argv : NULL;
    openblas_note();
    check_mesh_args(naxes, names, sizes);
    g_mesh.naxes = naxes;
    long product = 1;
    for (int a = 0; a < naxes; a++) {
        g_mesh.sizes[a] = sizes[a];
        snprintf(g_mesh.names[a], sizeof g_mesh.names[a], "%s",
                 names && names[a] ? names[a] : "?");
        product *= sizes[a];
    }
    g_mesh.product = product;
    if (product != g_mesh.size && !wants_help())
        size_mismatch(product);
    int r = g_mesh.rank;
    for (int a = naxes - 1; a >= 0; a--) {
        g_mesh.coords[a] = r % sizes[a];
        r /= sizes[a];
    }
    shd_coll_init();
    shd_async_init(provided);
    shd_timeline_init();
}

void shd_finalize(void)
{
    shd_async_fini();
    shd_timeline_write();
    shd_trace_report();
    for (int i = 0; i < g_mesh.ngroups; i++)
        MPI_Comm_free(&g_mesh.groups[i].comm);
    free(g_mesh.groups);
    g_mesh.groups = NULL;
    g_mesh.ngroups = g_mesh.cap_groups = 0;
    shd_npy_fini();
    shd_coll_fini();
    shd_alloc_fini();
    MPI_Finalize();
}

void shd_mesh_check_size(void)
{
    if (g_mesh.product != g_mesh.size)
        size_mismatch(g_mesh.product);
}

/* Messages name the program (argv[0] without its directory), not shdc. */
const char *shd_program_name(void)
{
    return program_invocation_short_name && *program_invocation_short_name ? program_invocation_short_name
                                                                           : "shdrt";
}

void shd_saved_args(int *argc, char ***argv)
{
    *argc = g_mesh.argc;
    *argv = g_mesh.argv;
}

/* ---- coordinates and groups ------------------------------------------- */

void shd_mesh_shape(int *naxes, int *sizes)
{
    *naxes = g_mesh.naxes;
    memcpy(sizes, g_mesh.sizes, sizeof(int) * (size_t)g_mesh.naxes);
}

int shd_world_rank(void) { return g_mesh.rank; }
int shd_world_size(void) { return g_mesh.size; }

int shd_axis_index(int axis)
{
    if (axis < 0 || axis >= g_mesh.naxes)
        shd_fatal("mesh axis %d out of range (mesh has %d axes)", axis, g_mesh.naxes);
    return g_mesh.coords[axis];
}

/* A group must name distinct axes of the mesh. */
static void check_group(const int *axes, int n)
{
    if (n < 0 || n > g_mesh.naxes)
        shd_fatal("group of %d axes on a mesh of %d axes", n, g_mesh.naxes);
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        if (axes[i] < 0 || axes[i] >= g_mesh.naxes)
            shd_fatal("group names mesh axis %d; the mesh has %d axes",
                      axes[i], g_mesh.naxes);
        if (seen & (1u << axes[i]))
            shd_fatal("group names mesh axis %s twice", g_mesh.names[axes[i]]);
        seen |= 1u << axes[i];
    }
}

int shd_group_size(const int *axes, int n)
{
    check_group(axes, n);
    int s = 1;
    for (int i = 0; i < n; i++)
        s *= g_mesh.sizes[axes[i]];
    return s;
}

int shd_group_index(const int *axes, int n)
{
    check_group(axes, n);
    int g = 0;
    for (int i = 0; i < n; i++)
        g = g * g_mesh.sizes[axes[i]] + g_mesh.coords[axes[i]];
    return g;
}

int shd_group_peer(const int *axes, int n, int gindex)
{
    int gs = shd_group_size(axes, n);
    if (gindex < 0 || gindex >= gs)
        shd_fatal("group index %d out of range (group size %d)", gindex, gs);
    int c[SHD_MAX_AXES];
    memcpy(c, g_mesh.coords, sizeof c);
    for (int i = n - 1; i >= 0; i--) {
        c[axes[i]] = gindex % g_mesh.sizes[axes[i]];
        gindex /= g_mesh.sizes[axes[i]];
    }
    int r = 0;
    for (int a = 0; a < g_mesh.naxes; a++)
        r = r * g_mesh.sizes[a] + c[a];
    return r;
}

MPI_Comm shd_group_comm(const int *axes, int n)
{
    check_group(axes, n);
    for (int i = 0; i < g_mesh.ngroups; i++) {
        group_entry *e = &g_mesh.groups[i];
        if (e->n == n && memcmp(e->axes, axes, (size_t)n * sizeof *axes) == 0)
            return e->comm;
    }
    g_mesh.groups = shd_mem_grow(g_mesh.groups, &g_mesh.cap_groups, (size_t)g_mesh.ngroups + 1, sizeof *g_mesh.groups,
                                 "the communicators of the axis groups");
    group_entry *e = &g_mesh.groups[g_mesh.ngroups];
    memset(e, 0, sizeof *e);
    e->n = n;
    memcpy(e->axes, axes, (size_t)n * sizeof *axes);
    int gs = shd_group_size(axes, n), tag = 1;
    int *members = shd_mem(NULL, (size_t)gs * sizeof *members, "the ranks of a group of %d", gs);
    for (int i = 0; i < gs; i++)
        members[i] = shd_group_peer(axes, n, i);
    for (int i = 0; i < n; i++)   /* the ordered axes: distinct groups' creations never meet */
        tag = (tag * 31 + axes[i] + 1) % 32000;
    MPI_Group world, mine;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, gs, members, &mine);
    MPI_Comm_create_group(MPI_COMM_WORLD, mine, tag, &e->comm);
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    free(members);
    g_mesh.ngroups++;
    return e->comm;
}

/* ---- errors and time -------------------------------------------------- */

void shd_fatal(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    shd_guard_cleanup();
    fprintf(stderr, "%s: rank %d: %s\n", shd_program_name(), g_mesh.rank, msg);
    fflush(stderr);
    fflush(stdout);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

double shd_time(void)
{
    return MPI_Wtime();
}
