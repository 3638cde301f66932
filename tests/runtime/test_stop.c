// RANKS: 1 2 4
/* test_stop: shd_stop_requested agrees over every rank. Before any signal
 * it is false everywhere; after the last rank alone raises SIGTERM (which,
 * once shd_stop_init ran, only records the request; at 4 ranks rank 0
 * raises SIGUSR1 and rank 1 SIGUSR2, requests too) it is true on every
 * rank, and stays true. More signals are the same request: the rank lives
 * on (the handler that was there before shd_stop_init, here one that
 * counts, in a real program guard.c's, is not called).
 */
#include <signal.h>

#include "check.h"

static volatile sig_atomic_t g_before_calls;
static void before(int sig) { (void)sig; g_before_calls++; }

int main(int argc, char **argv)
{
    start_2d(&argc, &argv);
    signal(SIGUSR2, before);   /* what was there before: never called once the program asks */
    shd_stop_init();
    int me = shd_world_rank(), last = shd_world_size() - 1;
    for (int i = 0; i < 3; i++)
        CHECK(!shd_stop_requested(), "stop requested before any signal (call %d)", i);
    if (me == last)
        raise(SIGTERM);   /* the process lives on: a request */
    else if (me == 0)
        raise(SIGUSR1);
    else if (me == 1)
        raise(SIGUSR2);
    CHECK(shd_stop_requested(), "SIGTERM on rank %d is not seen by rank %d", last, me);
    CHECK(shd_stop_requested(), "the request did not stay");
    CHECK(g_before_calls == 0, "the previous handler ran on a first request");
    bool requested_here = me == last || me == 0 || me == 1;
    if (!requested_here)
        raise(SIGUSR2);   /* this rank's first request */
    CHECK(g_before_calls == 0, "the previous handler ran on a first request");
    raise(SIGUSR2);
    raise(SIGTERM);
    CHECK(g_before_calls == 0, "a repeated request reached the previous handler (%d calls)", (int)g_before_calls);
    CHECK(shd_stop_requested(), "the request did not stay after more signals");
    return finish("test_stop");
}
