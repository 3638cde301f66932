/* guard.c: what happens when a run ends badly, and what is checked before
 * it starts.
 *
 * A save (npy.c) and the SHD_TRACE timeline write a temporary file beside
 * their target, in a private random name (safefile.c), and rename it into
 * place. While one is being written its name is registered here,
 * and every exit path the runtime controls removes it: shd_fatal (which
 * every run-time error goes through, before MPI_Abort), exit (Open MPI
 * exits a rank whose launcher died) and the signals a process can catch
 * (SIGTERM, which mpirun sends to the surviving ranks when one dies,
 * SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGABRT). Every rank registers
 * the name, so when rank 0 is killed outright (SIGKILL, which nothing can
 * catch) a surviving rank still removes the file. MPI-IO may put files of
 * its own beside the temporary while it is open, named after it (Open MPI
 * probes for locking with TMP.locktest.RANK; its shared-file-pointer
 * components keep TMP.data.RANK and TMP.metadata.RANK); a rank killed
 * there cannot remove its own, so removing the temporary removes every
 * file in its directory whose name begins with the temporary's name (a
 * private random name: nothing of anyone else's begins so).
 * SIGXFSZ is ignored, so a write past `ulimit -f` fails with EFBIG and is
 * reported like a full disk instead of killing the rank silently.
 *
 * At start-up shd_check_memory compares the peak bytes `shdc explain`
 * predicts for one rank, times the ranks on this host, with the memory the
 * host has available, so that an allocation the kernel cannot back is
 * reported with a message instead of ending in the OOM killer.
 *
 * Invariant: the signal handlers only call async-signal-safe functions
 * (unlink, open, getdents64, unlinkat, close, signal, raise) on names and
 * a buffer that are static.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shdrt_internal.h"

static char g_pending[4096];
static char g_dir[4096];          /* directory of g_pending: "." or its prefix */
static const char *g_base;        /* g_pending's last component */
static size_t g_base_len;
static volatile sig_atomic_t g_has_pending;

static bool begins_with_base(const char *name)
{
    for (size_t i = 0; i < g_base_len; i++)
        if (name[i] != g_base[i])
            return false;
    return true;
}

/* Remove the pending temporary and the files named after it (see above). */
static void remove_pending(void)
{
    static char buf[8192] __attribute__((aligned(8)));
    unlink(g_pending);   /* also when the directory cannot be listed */
    int fd = open(g_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    for (;;) {
        ssize_t n = getdents64(fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            const struct dirent64 *d = (const struct dirent64 *)(buf + off);
            if (begins_with_base(d->d_name))
                unlinkat(fd, d->d_name, 0);
            off += d->d_reclen;
        }
    }
    close(fd);
}

static const int g_signals[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGABRT };

static void on_signal(int sig)
{
    if (g_has_pending)
        remove_pending();
    signal(sig, SIG_DFL);
    raise(sig);
}

void shd_guard_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof g_signals / sizeof *g_signals; i++) {
        struct sigaction old;
        /* A signal the launcher made us ignore stays ignored. */
        if (sigaction(g_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(g_signals[i], &sa, NULL);
    }
    signal(SIGXFSZ, SIG_IGN);
    atexit(shd_guard_cleanup);
}

bool shd_guard_temp(const char *path)
{
    g_has_pending = 0;
    if (!path || strlen(path) >= sizeof g_pending)
        return path == NULL;
    size_t len = strlen(path);
    memcpy(g_pending, path, len + 1);
    const char *slash = strrchr(g_pending, '/');
    g_base = slash ? slash + 1 : g_pending;
    g_base_len = strlen(g_base);
    if (!slash)
        memcpy(g_dir, ".", 2);
    else if (slash == g_pending)
        memcpy(g_dir, "/", 2);
    else {
        memcpy(g_dir, g_pending, (size_t)(slash - g_pending));
        g_dir[slash - g_pending] = '\0';
    }
    g_has_pending = g_base_len > 0;
    return g_has_pending;
}

void shd_guard_cleanup(void)
{
    if (g_has_pending)
        remove_pending();
    g_has_pending = 0;
}

/* ---- memory at start-up ---------------------------------------------------- */

/* MemAvailable of /proc/meminfo in bytes, or 0 when unknown. */
static unsigned long long available_memory(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024ull;
}

/* Ranks sharing this host's memory. */
static int ranks_on_host(void)
{
    MPI_Comm local;
    int n = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &n);
        MPI_Comm_free(&local);
    }
    return n;
}

void shd_check_memory(uint64_t peak_bytes)
{
    const char *env = getenv("SHD_MEMORY_CHECK");
    int local = ranks_on_host();   /* collective: every rank takes part */
    if (env && strcmp(env, "0") == 0)
        return;
    unsigned long long avail = available_memory();
    long double need = (long double)peak_bytes * local;
    char msg[1024] = "";
    if (avail > 0 && need > (long double)avail)
        snprintf(msg, sizeof msg, "this program needs %llu bytes of arrays per rank at its peak (shdc explain), "
                 "%d rank%s on this host: %.0Lf bytes, but the host has %llu bytes available; run on more hosts "
                 "or a larger mesh, or set SHD_MEMORY_CHECK=0 to start anyway",
                 (unsigned long long)peak_bytes, local, local == 1 ? "" : "s", need, avail);
    shd_agree(msg[0] ? msg : NULL);
}

/* ---- agreement ----------------------------------------------------------------- */

void shd_agree(const char *msg)
{
    int me = shd_world_rank(), size = shd_world_size();
    int mine = msg ? me : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return;
    if (first == me)
        shd_fatal("%s", msg);
    MPI_Barrier(MPI_COMM_WORLD);   /* ended by that rank's MPI_Abort */
    shd_fatal("aborted after an error on rank %d", first);
}

void shd_msgf(char *msg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, SHD_MSG_LEN, fmt, ap);
    va_end(ap);
}
