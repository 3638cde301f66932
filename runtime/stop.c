/* stop.c: stopping a job cleanly when it is asked to (stop_requested()).
 *
 * Schedulers end a job with signals: Slurm sends SIGTERM to every task at
 * its time limit or on scancel, then SIGKILL KillWait seconds later (30 by
 * default), and with `--signal=USR1@120` SIGUSR1 two minutes before the
 * limit; mpirun passes SIGUSR1 and SIGUSR2 on to the ranks and answers its
 * own SIGTERM with SIGTERM to every rank (SIGKILL a few seconds later).
 * A program that calls stop_requested() wants that time to checkpoint, so
 * from shd_stop_init on (its main calls it first thing) the first of these
 * signals a rank receives only sets a flag, and shd_stop_requested
 * all-reduces the flags over every rank: each rank gets the same answer at
 * the same call, so the program's branches agree (one rank stopping alone
 * would leave the others waiting in a collective). Once true, the answer
 * stays true without another all-reduce. Further signals are the same
 * request: launchers repeat it (at a Slurm time limit a task gets SIGTERM
 * from slurmstepd and again from srun, milliseconds apart), and a rank
 * that died of the second would lose the checkpoint the first asked for.
 * What ends a rank at once is SIGKILL, which Slurm sends KillWait seconds
 * after SIGTERM and mpirun odls_base_sigkill_timeout seconds after it, or
 * SIGINT. After a request SIGPIPE is ignored: mpirun, told to stop, closes
 * the ranks' output pipes, and a print into one must fail quietly, not end
 * the rank before its checkpoint.
 *
 * Invariant: the handler only reads and writes the sig_atomic_t flag and
 * calls sigaction (async-signal-safe).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "shdrt_internal.h"

static const int g_stop_signals[] = { SIGTERM, SIGUSR1, SIGUSR2 };
#define NSTOP ((int)(sizeof g_stop_signals / sizeof *g_stop_signals))

static volatile sig_atomic_t g_got;   /* the first signal received; 0: none */
static bool g_agreed;

static void on_stop(int sig)
{
    if (g_got)
        return;   /* the same request again */
    g_got = sig;
    /* A launcher that is stopping may close the ranks' output first: a
     * print must not end the rank before its checkpoint. */
    static struct sigaction ignore;
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, NULL);
}

void shd_stop_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSTOP; i++) {
        struct sigaction before;
        /* A signal the launcher made us ignore stays ignored. */
        if (sigaction(g_stop_signals[i], NULL, &before) == 0 && before.sa_handler == SIG_IGN)
            continue;
        sigaction(g_stop_signals[i], &sa, NULL);
    }
}

static const char *signal_name(int sig)
{
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGUSR2 ? "SIGUSR2" : "a signal";
}

bool shd_stop_requested(void)
{
    if (g_agreed)
        return true;
    int mine = g_got, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any)
        return false;
    g_agreed = true;
    if (shd_world_rank() == 0) {
        fprintf(stderr, "%s: rank 0: stop requested (%s): stop_requested() is true on every rank from here on\n",
                shd_program_name(), signal_name(any));
        fflush(stderr);
    }
    return true;
}
