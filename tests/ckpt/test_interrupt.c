/*
 * test_interrupt.c — ftc_interrupt ends a wait for the agent: a real Redis, a
 * real `ftc agent` process, libftc in this process. The agent is frozen with
 * SIGSTOP, so a checkpoint's BEGIN gets no answer; ftc_interrupt from another
 * thread must make ftc_checkpoint return FTC_ECANCELED instead of waiting out
 * its 60 s deadline (`ftc run --in-process` relies on it: a rank told to
 * leave its generation may be blocked on the agent). No wall-clock bound is
 * asserted: a broken interrupt shows as the deadline's FTC_ETIMEDOUT.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ftc.h"

#include <pthread.h>

static void *interrupt_later(void *arg)
{
    ftc_sleep_ms(300);
    ftc_interrupt(arg);
    return NULL;
}

static float g_w[4096];

/* A context of rank 0 of node 0 with one tensor registered. */
static ftc_ctx_t *open_ctx(env_t *e)
{
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    ftc_ctx_t *c = NULL;
    if (ftc_create(&o, &c))
        fail_msg("ftc_create: %s", ftc_last_error(c));
    int64_t shape[1] = {4096};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, shape, g_w, FTC_HOST), 0);
    return c;
}

/* Opens a context and commits step 0 through it. */
static ftc_ctx_t *open_committed(env_t *e)
{
    ftc_ctx_t *c = open_ctx(e);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    return c;
}

static void test_interrupt_blocked_checkpoint(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    ftc_ctx_t *c = open_committed(e);
    /* the agent freezes: the next BEGIN gets no answer */
    kill(e->agent[0], SIGSTOP);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, interrupt_later, c), 0);
    uint64_t t0 = ftc_now_ns();
    int rc = FTC_OK;
    for (int64_t step = 1; step <= 4 && rc == FTC_OK; step++) /* slots free: the first may pass */
        rc = ftc_checkpoint(c, step, NULL, 0);
    pthread_join(tid, NULL);
    print_message("ftc_checkpoint returned %s after %.0f ms (%s)\n", ftc_errname(rc),
                  (double)(ftc_now_ns() - t0) / 1e6, ftc_last_error(c));
    assert_int_equal(rc, FTC_ECANCELED);
    /* and from then on */
    assert_int_equal(ftc_wait_committed(c, 1), FTC_ECANCELED);
    kill(e->agent[0], SIGCONT);
    ftc_destroy(c);
    teardown_env(e);
}

/* A context interrupted while idle asks the agent for nothing more: an
 * ftc_checkpoint after ftc_interrupt used to send its BEGIN all the same
 * (the interrupt was seen only while waiting for the answer), and the agent
 * acted on it. Step 0 again makes the agent log what it did with the BEGIN
 * (a skip: not after the committed step). */
static void test_interrupted_context_sends_nothing(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    ftc_ctx_t *c = open_committed(e);
    ftc_interrupt(c);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), FTC_ECANCELED);
    assert_non_null(strstr(ftc_last_error(c), "interrupted"));
    ftc_destroy(c);
    /* the rank's next incarnation checkpoints: by its commit the agent has
     * read everything the interrupted context sent before it */
    c = open_ctx(e);
    assert_int_equal(ftc_checkpoint(c, 2, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 2), 0);
    ftc_destroy(c);
    assert_false(agent_said(e, 0, "step 0 skipped"));
    teardown_env(e);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_interrupt_blocked_checkpoint),
        T(test_interrupted_context_sends_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
