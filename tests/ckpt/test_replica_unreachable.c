/*
 * test_replica_unreachable.c — one unreachable peer does not freeze the
 * replication engine (ckpt/replica.h). Engine A (node 0) and engine B
 * (node 1) run in this process on their own "tcp;ofi_rxm" endpoints on
 * loopback; node 2's address is that of a real process that opened an
 * endpoint and was killed with SIGKILL, so nobody listens there any more and
 * rxm answers every post to it with -FI_EAGAIN (still connecting).
 *
 * While A's push to node 2 and A's fetch from node 2 are outstanding, A's
 * push to B, B's push to A (A receives and ACKs) and A's fetch from B all
 * complete; then the dead transfers fail by their deadline with
 * FTC_ETIMEDOUT and a detail naming the peer and "could not post
 * (connection not established?)" (the fetch after 1 s, the bound on posting
 * a GET, so an agent asks its next candidate soon), and A's endpoint is still healthy (nothing
 * was ever posted to node 2, so no send is stuck in libfabric).
 *
 * Before the try posts, A's thread sat in the post to node 2 until that
 * transfer's deadline, and B's transfers waited for it. Timings are printed,
 * never asserted; the ordering asserted (the live transfers finish while the
 * dead ones are outstanding) has the dead deadline (10 s) as its margin.
 * tcp only: shm has no connection to set up, so no post to it waits.
 */
#include "ftc_test.h"

#include "ckpt/replica.h"
#include "ckpt/slot.h"
#include "core/clock.h"
#include "core/fabric.h"

#include <signal.h>
#include <sys/wait.h>

#define PROV "tcp;ofi_rxm"
#define DEAD_MS 10000  /* deadline of the transfers to the killed peer */
#define LIVE_MS 120000 /* the live ones': a backstop only */

static const char *k_secret = "0123456789abcdef0123456789abcdef";
static char g_job[64];

static ftc_fabric_t *open_fab(void)
{
    ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
    o.provider = PROV;
    ftc_fabric_t *f = NULL;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&o, &f, &err) < 0)
        print_error("%s\n", err.msg);
    assert_non_null(f);
    return f;
}

static ftc_repl_t *open_repl(ftc_fabric_t *f, uint32_t self)
{
    ftc_repl_options_t o = FTC_REPL_OPTIONS_INIT;
    ftc_err_t err = {0};
    assert_int_equal(ftc_wire_key_init(&o.key, "test-job", k_secret, strlen(k_secret), &err), 0);
    o.fab = f;
    o.job = g_job;
    o.self = self;
    o.generation = 1;
    ftc_repl_t *r = ftc_repl_create(&o, &err);
    if (!r)
        print_error("%s\n", err.msg);
    assert_non_null(r);
    return r;
}

/* A real process opens an endpoint, hands its address over and is killed. */
static void killed_peer_addr(uint8_t *addr, size_t *len)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
        o.provider = PROV;
        ftc_fabric_t *f = NULL;
        ftc_err_t err = {0};
        uint8_t a[FTC_FABRIC_ADDR_MAX];
        size_t n = sizeof a;
        if (ftc_fabric_open(&o, &f, &err) < 0 || ftc_fabric_getname(f, a, &n) < 0)
            _exit(1);
        uint32_t n32 = (uint32_t)n;
        if (write(fd[1], &n32, 4) != 4 || write(fd[1], a, n) != (ssize_t)n)
            _exit(1);
        for (;;)
            pause(); /* until SIGKILL */
    }
    close(fd[1]);
    uint32_t n32 = 0;
    assert_int_equal(read(fd[0], &n32, 4), 4);
    assert_true(n32 > 0 && n32 <= *len);
    assert_int_equal(read(fd[0], addr, n32), (ssize_t)n32);
    *len = n32;
    close(fd[0]);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void add_peer(ftc_repl_t *r, uint32_t node, ftc_fabric_t *of)
{
    uint8_t a[FTC_FABRIC_ADDR_MAX];
    size_t n = sizeof a;
    assert_int_equal(ftc_fabric_getname(of, a, &n), 0);
    assert_int_equal(ftc_repl_peer_add(r, node, a, n), 0);
}

static ftc_repl_status_t status_of(ftc_repl_t *r, ftc_repl_xfer_t x)
{
    ftc_repl_status_t st;
    assert_int_equal(ftc_repl_status(r, x, &st), 0);
    return st;
}

/* Drives both engines a little (as two agents' threads would). */
static void drive(ftc_repl_t *a, ftc_repl_t *b)
{
    assert_int_equal(ftc_repl_progress(a, ftc_deadline_in_ms(2), true), 0);
    assert_int_equal(ftc_repl_progress(b, ftc_deadline_in_ms(2), true), 0);
}

static double ms_since(uint64_t t0)
{
    return (double)(ftc_now_ns() - t0) / 1e6;
}

static void unlink_slots(void)
{
    for (uint32_t n = 0; n < 3; n++)
        for (uint32_t o = 0; o < 3; o++)
            for (int k = 0; k < 2; k++) {
                char name[FTC_SLOT_NAME_MAX];
                snprintf(name, sizeof name, "ftc.%s.n%u.p%u.s%d", g_job, n, o, k);
                ftc_slot_unlink(name, NULL);
            }
}

static void test_unreachable_peer(void **state)
{
    (void)state;
    snprintf(g_job, sizeof g_job, "ru%d", (int)getpid());
    uint8_t dead[FTC_FABRIC_ADDR_MAX];
    size_t deadlen = sizeof dead;
    killed_peer_addr(dead, &deadlen);

    ftc_fabric_t *fa = open_fab(), *fb = open_fab();
    ftc_repl_t *a = open_repl(fa, 0), *b = open_repl(fb, 1);
    add_peer(a, 1, fb);
    add_peer(b, 0, fa);
    assert_int_equal(ftc_repl_peer_add(a, 2, dead, deadlen), 0);

    uint64_t n0 = 0, n1 = 0;
    uint8_t *s0 = ftc_test_make_shard(1, 0, 150000, 21, &n0); /* ~10 MiB: 3 chunks */
    uint8_t *s1 = ftc_test_make_shard(1, 1, 150000, 22, &n1);

    uint64_t t0 = ftc_now_ns();
    /* the dead transfers first: with a blocking post A would sit in them */
    ftc_repl_xfer_t xdead, xdeadf, xlive, xin;
    uint32_t to_dead = 2, to_b = 1, to_a = 0;
    assert_int_equal(ftc_repl_push(a, 0, 1, s0, n0, &to_dead, 1, ftc_deadline_in_ms(DEAD_MS),
                                   &xdead),
                     0);
    assert_int_equal(ftc_repl_fetch(a, 2, 1, UINT64_MAX, ftc_deadline_in_ms(DEAD_MS), &xdeadf),
                     0);
    assert_int_equal(ftc_repl_push(a, 0, 1, s0, n0, &to_b, 1, ftc_deadline_in_ms(LIVE_MS),
                                   &xlive),
                     0);
    assert_int_equal(ftc_repl_push(b, 1, 1, s1, n1, &to_a, 1, ftc_deadline_in_ms(LIVE_MS), &xin),
                     0);
    ftc_deadline_t backstop = ftc_deadline_in_ms(LIVE_MS);
    while (!(status_of(a, xlive).done && status_of(b, xin).done)) {
        assert_false(ftc_deadline_expired(backstop));
        drive(a, b);
    }
    double live_ms = ms_since(t0);
    ftc_repl_status_t st = status_of(a, xlive);
    assert_int_equal(st.rc, 0);
    assert_int_equal(st.acked, 1);
    st = status_of(b, xin);
    assert_int_equal(st.rc, 0);
    assert_int_equal(st.acked, 1);
    /* and a fetch back from B, into A, still with the dead ones outstanding */
    ftc_repl_xfer_t xf;
    assert_int_equal(ftc_repl_fetch(a, 1, 0, UINT64_MAX, ftc_deadline_in_ms(LIVE_MS), &xf), 0);
    while (!status_of(a, xf).done) {
        assert_false(ftc_deadline_expired(backstop));
        drive(a, b);
    }
    uint8_t *back = NULL;
    uint64_t nback = 0;
    assert_int_equal(ftc_repl_take(a, xf, &back, &nback), 0);
    assert_true(nback == n0 && memcmp(back, s0, n0) == 0);
    free(back);
    ftc_repl_release(a, xf);
    double fetch_ms = ms_since(t0);
    /* the point: all of it happened while the dead push was pending (the
     * dead fetch gives up after 1 s: its GET could not be posted) */
    assert_false(status_of(a, xdead).done);
    printf("# push A->B, push B->A (%.1f MiB each) done after %.1f ms, fetch B->A after "
           "%.1f ms, with a push to and a fetch from a killed peer outstanding\n",
           (double)n0 / (1 << 20), live_ms, fetch_ms);

    while (!(status_of(a, xdead).done && status_of(a, xdeadf).done)) {
        assert_false(ftc_deadline_expired(backstop));
        drive(a, b);
    }
    st = status_of(a, xdead);
    printf("# push to the killed peer after %.1f ms (deadline %d ms): %s: %s\n", ms_since(t0),
           DEAD_MS, ftc_errname(st.rc), st.detail);
    assert_int_equal(st.rc, FTC_ETIMEDOUT);
    assert_int_equal(st.failed, 1);
    assert_non_null(strstr(st.detail, "peer 2"));
    assert_non_null(strstr(st.detail, "could not post (connection not established?)"));
    st = status_of(a, xdeadf);
    printf("# fetch from the killed peer: %s: %s\n", ftc_errname(st.rc), st.detail);
    assert_int_equal(st.rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(st.detail, "peer 2"));
    assert_non_null(strstr(st.detail, "could not post its GET (connection not established?)"));
    /* a fetch released while its GET waits to be posted: the GET is dropped
     * with it (ASan: nothing leaks) */
    assert_int_equal(ftc_repl_fetch(a, 2, 1, UINT64_MAX, ftc_deadline_in_ms(DEAD_MS), &xf), 0);
    assert_int_equal(ftc_repl_progress(a, ftc_deadline_in_ms(2), false), 0);
    ftc_repl_release(a, xf);
    /* nothing was lent to libfabric for node 2: the endpoint is fine */
    assert_int_equal(ftc_fabric_health(fa), 0);
    /* and B holds A's shard, A holds B's */
    const uint8_t *held = NULL;
    uint64_t step = 0, hn = 0;
    assert_int_equal(ftc_repl_held(b, 0, &step, &held, &hn), 0);
    assert_true(hn == n0 && memcmp(held, s0, n0) == 0);
    assert_int_equal(ftc_repl_held(a, 1, &step, &held, &hn), 0);
    assert_true(hn == n1 && memcmp(held, s1, n1) == 0);

    ftc_repl_release(a, xdead);
    ftc_repl_release(a, xdeadf);
    ftc_repl_release(a, xlive);
    ftc_repl_release(b, xin);
    ftc_repl_destroy(a);
    ftc_repl_destroy(b);
    ftc_fabric_close(fa);
    ftc_fabric_close(fb);
    free(s0);
    free(s1);
    unlink_slots();
}

int main(void)
{
    unsetenv("FI_PROVIDER"); /* the test names its provider */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unreachable_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
