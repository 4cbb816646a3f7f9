/*
 * test_interrupt.c — ftc_interrupt ends a wait for the agent: a real Redis, a
 * real `ftc agent` process, libftc in this process. The agent is frozen with
 * SIGSTOP, so a checkpoint's BEGIN gets no answer; ftc_interrupt from another
 * thread must make ftc_checkpoint return FTC_ECANCELED instead of waiting out
 * its 60 s deadline (`ftc run --in-process` relies on it: a rank told to
 * leave its generation may be blocked on the agent). No wall-clock bound is
 * asserted: a broken interrupt shows as the deadline's FTC_ETIMEDOUT. The
 * same holds for a checkpoint blocked in sending its BEGIN (the frozen
 * agent's socket full).
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ckpt/agent_proto.h"
#include "ftc.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>

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
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 0);
    register_w(c, g_w, 4096);
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

/* The descriptor of the connection of this process to the agent at sock
 * (bound as sock.PID, then renamed). */
static int agent_conn_fd(const char *sock)
{
    for (int fd = 3; fd < 4096; fd++) {
        int type = 0;
        socklen_t tl = sizeof type;
        struct sockaddr_un sa;
        socklen_t sl = sizeof sa;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_SEQPACKET &&
            getpeername(fd, (struct sockaddr *)&sa, &sl) == 0 &&
            !strncmp(sa.sun_path, sock, strlen(sock)))
            return fd;
    }
    return -1;
}

/* A frozen agent whose socket is full (the rank's earlier requests, unread):
 * a checkpoint blocked in sending its BEGIN ends at ftc_interrupt too. The
 * send waited out timeout_ms whatever ftc_interrupt said (FTC_ETIMEDOUT). */
static void test_interrupt_blocked_send(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_ctx_t *c = create_ctx_at(e, 0, 0, 1, 5000, sock, sizeof sock);
    register_w(c, g_w, 4096);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    kill(e->agent[0], SIGSTOP);
    /* what a rank that timed out on request after request leaves there (each
     * of these closes the connection once the agent reads it again) */
    int fd = agent_conn_fd(sock);
    assert_true(fd >= 0);
    static char junk[sizeof(ftc_ap_msg_t)];
    int queued = 0;
    while (send(fd, junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof junk)
        queued++;
    print_message("%d messages queued\n", queued);
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, interrupt_later, c), 0);
    int rc = ftc_checkpoint(c, 1, NULL, 0);
    pthread_join(tid, NULL);
    print_message("ftc_checkpoint: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_ECANCELED);
    kill(e->agent[0], SIGCONT);
    ftc_destroy(c);
    teardown_env(e);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_interrupt_blocked_checkpoint),
        T(test_interrupted_context_sends_nothing),
        T(test_interrupt_blocked_send),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
