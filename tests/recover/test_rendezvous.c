/*
 * test_rendezvous.c — rendezvous rounds against a real redis-server, each
 * joiner a thread with its own connection (or a forked process, for the one
 * that is SIGKILLed): one round with the same order for all, settle with
 * min < max, hot spares beyond max, a dead registrant not counted, members
 * keeping their order across generations, concurrent and stale requests,
 * the world fence with commit records, deadline, abort, and bad input; a
 * retried join once the job moved on, a node that joins again and the settle
 * time, a generation field that is not a decimal integer, NOPERM, READONLY and
 * OOM (at once) and BUSY (waited out), one id registered twice, and Redis
 * killed or stopped under a join or an abort.
 * No wall-clock assertions: waits are on observable Redis state, bounded.
 */
#include "detect/redis_fixture.h"

#include "recover/rendezvous.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct joiner {
    redis_fixture_t *f;
    const char *job;
    char node[FTC_RDZV_NODE_MAX + 1];
    int min, max, settle, ttl, survivor_wait;
    uint64_t after;
    int delay_ms, deadline_ms;
    atomic_int *abort;
    int rc;
    ftc_err_t err;
    ftc_rdzv_round_t round;
    uint64_t t_done_ns;
    pthread_t tid;
} joiner_t;

static ftc_redis_t *conn(redis_fixture_t *f)
{
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    if (!r)
        fail_msg("connect: %s", err.msg);
    return r;
}

static void *joiner_main(void *arg)
{
    joiner_t *j = arg;
    ftc_redis_t *r = conn(j->f);
    if (j->delay_ms)
        ftc_sleep_ms((uint64_t)j->delay_ms);
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = j->job;
    o.node_id = j->node;
    o.min_nodes = j->min;
    o.max_nodes = j->max;
    o.settle_ms = j->settle;
    o.ttl_ms = j->ttl;
    o.survivor_wait_ms = j->survivor_wait;
    j->rc = ftc_rdzv_join(r, &o, j->after, &j->round,
                          ftc_deadline_in_ms((uint64_t)(j->deadline_ms ? j->deadline_ms : 20000)),
                          j->abort, &j->err);
    j->t_done_ns = ftc_now_ns();
    ftc_redis_close(r);
    return NULL;
}

/* start() with survivor_wait_ms (0: the default) */
static void start_sw(joiner_t *j, redis_fixture_t *f, const char *job, const char *node, int min,
                     int max, int settle, uint64_t after, int delay_ms, int survivor_wait)
{
    memset(j, 0, sizeof *j);
    j->survivor_wait = survivor_wait;
    j->f = f;
    j->job = job;
    snprintf(j->node, sizeof j->node, "%s", node);
    j->min = min;
    j->max = max;
    j->settle = settle;
    j->after = after;
    j->delay_ms = delay_ms;
    assert_int_equal(pthread_create(&j->tid, NULL, joiner_main, j), 0);
}

static void start(joiner_t *j, redis_fixture_t *f, const char *job, const char *node, int min,
                  int max, int settle, uint64_t after, int delay_ms)
{
    start_sw(j, f, job, node, min, max, settle, after, delay_ms, 0);
}

/* A joiner of the first round of job (min 2, deadline 60 s) that *abort_flag stops. */
static void start_abortable(joiner_t *j, redis_fixture_t *f, const char *job, const char *node,
                            atomic_int *abort_flag)
{
    memset(j, 0, sizeof *j);
    j->f = f;
    j->job = job;
    snprintf(j->node, sizeof j->node, "%s", node);
    j->min = 2;
    j->abort = abort_flag;
    j->deadline_ms = 60000;
    assert_int_equal(pthread_create(&j->tid, NULL, joiner_main, j), 0);
}

static void finish(joiner_t *j, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_join(j[i].tid, NULL);
        if (j[i].rc)
            print_message("joiner %s: %s\n", j[i].node, j[i].err.msg);
    }
}

static void free_rounds(joiner_t *j, int n)
{
    for (int i = 0; i < n; i++)
        ftc_rdzv_round_free(&j[i].round);
}

/* All joiners returned the same round; indices match their ids. */
static void same_round(joiner_t *j, int n, int members, int spares)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(j[i].rc, 0);
        assert_int_equal(j[i].round.generation, j[0].round.generation);
        assert_int_equal(j[i].round.nodes, members);
        assert_int_equal(j[i].round.spares, spares);
        for (int k = 0; k < members; k++)
            assert_string_equal(j[i].round.members[k], j[0].round.members[k]);
        if (j[i].round.index >= 0)
            assert_string_equal(j[i].round.members[j[i].round.index], j[i].node);
    }
    int seen[64] = {0};
    for (int i = 0; i < n; i++)
        if (j[i].round.index >= 0)
            seen[j[i].round.index]++;
    for (int k = 0; k < members; k++)
        assert_int_equal(seen[k], 1);
}

static int waiting(redis_fixture_t *f, const char *job, uint64_t gen)
{
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    int n = -1;
    assert_int_equal(ftc_rdzv_waiting(r, job, gen, &n, &err), 0);
    ftc_redis_close(r);
    return n;
}

/* Waits (bounded) until `want` registrants are live for the round after gen. */
static void await_waiting(redis_fixture_t *f, const char *job, uint64_t gen, int want)
{
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (waiting(f, job, gen) != want && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_int_equal(waiting(f, job, gen), want);
}

static void test_four_join_and_stable_order(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[5];
    char id[16];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "host%d:0", i);
        start(&j[i], f, "r4", id, 4, 4, 200, 0, 0);
    }
    finish(j, 4);
    same_round(j, 4, 4, 0);
    assert_int_equal(j[0].round.generation, 1);
    assert_int_equal(j[0].round.prev_nodes, 0);
    char order[4][FTC_RDZV_NODE_MAX + 1];
    memcpy(order, j[0].round.members, sizeof order);
    free_rounds(j, 4);

    /* the generation is the control plane's one counter; world waits for the layout */
    ftc_ctl_t *c = redis_fixture_ctl(f, "r4");
    ftc_redis_t *r = ftc_ctl_redis(c);
    ftc_err_t err = {0};
    uint64_t gen;
    uint32_t world;
    bool open, opened;
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 1 && world == 0);
    assert_int_equal(ftc_rdzv_state(r, "r4", &gen, &open, &err), 0);
    assert_true(gen == 1 && !open);

    /* a new round: the 4 come back in reverse order, a newcomer first; the old
     * members keep their order, the newcomer goes last */
    assert_int_equal(ftc_rdzv_request(r, "r4", 1, "grow", &opened, &err), 0);
    assert_true(opened);
    assert_int_equal(ftc_rdzv_state(r, "r4", &gen, &open, &err), 0);
    assert_true(gen == 1 && open);
    start(&j[4], f, "r4", "newcomer:0", 5, 5, 200, 1, 0);
    for (int i = 0; i < 4; i++)
        start(&j[i], f, "r4", order[3 - i], 5, 5, 200, 1, 30 * (i + 1));
    finish(j, 5);
    same_round(j, 5, 5, 0);
    assert_int_equal(j[0].round.generation, 2);
    assert_int_equal(j[0].round.prev_nodes, 4);
    for (int k = 0; k < 4; k++)
        assert_string_equal(j[0].round.members[k], order[k]);
    assert_string_equal(j[0].round.members[4], "newcomer:0");
    free_rounds(j, 5);
    assert_int_equal(ftc_rdzv_state(r, "r4", &gen, &open, &err), 0);
    assert_true(gen == 2 && !open);
    ftc_ctl_destroy(c);
}

static void test_settle_min_of_max(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[3];
    start(&j[0], f, "r3", "a", 3, 4, 300, 0, 0);
    start(&j[1], f, "r3", "b", 3, 4, 300, 0, 20);
    start(&j[2], f, "r3", "c", 3, 4, 300, 0, 40);
    uint64_t t0 = ftc_now_ns();
    finish(j, 3);
    same_round(j, 3, 3, 0);
    print_message("3 of max 4 closed %.0f ms after the first start (settle 300 ms)\n",
                  (double)(j[0].t_done_ns - t0) / 1e6);
    free_rounds(j, 3);
}

static void test_spare_and_deadline(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[5];
    char id[16];
    /* generation 1 with one node; then 5 register for the next round before it
     * opens, so all 5 are there when it closes */
    start(&j[0], f, "r5", "seed", 1, 1, 0, 0, 0);
    finish(j, 1);
    assert_int_equal(j[0].rc, 0);
    ftc_rdzv_round_free(&j[0].round);
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "s%d", i);
        start(&j[i], f, "r5", id, 4, 4, 5000, 1, 0);
    }
    await_waiting(f, "r5", 1, 5);
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    bool opened;
    assert_int_equal(ftc_rdzv_request(r, "r5", 1, "grow", &opened, &err), 0);
    assert_true(opened);
    ftc_redis_close(r);
    finish(j, 5);
    same_round(j, 5, 4, 1);
    assert_int_equal(j[0].round.generation, 2);
    int spare = -1;
    for (int i = 0; i < 5; i++)
        if (j[i].round.index < 0)
            spare = i;
    assert_true(spare >= 0);
    assert_string_equal(j[spare].round.spare_ids[0], j[spare].node);
    uint64_t gen = j[0].round.generation;
    char sid[FTC_RDZV_NODE_MAX + 1];
    snprintf(sid, sizeof sid, "%s", j[spare].node);
    free_rounds(j, 5);
    /* the spare waits for the next round, which nobody opens: its deadline passes */
    joiner_t s;
    memset(&s, 0, sizeof s);
    s.f = f;
    s.job = "r5";
    snprintf(s.node, sizeof s.node, "%s", sid);
    s.min = 1;
    s.after = gen;
    s.deadline_ms = 1500;
    assert_int_equal(pthread_create(&s.tid, NULL, joiner_main, &s), 0);
    await_waiting(f, "r5", gen, 1);
    pthread_join(s.tid, NULL);
    assert_int_equal(s.rc, FTC_ETIMEDOUT);
    print_message("%s\n", s.err.msg);
    assert_non_null(strstr(s.err.msg, "1 registered"));
    assert_non_null(strstr(s.err.msg, sid));
    assert_non_null(strstr(s.err.msg, "not open"));
    assert_int_equal(waiting(f, "r5", gen), 0); /* withdrawn */
}

/* A heartbeat for node (as a live agent keeps one) or none (ms = 0: dead). */
static void heartbeat(redis_fixture_t *f, const char *job, const char *node, int ms)
{
    ftc_redis_t *r = conn(f);
    char k[160];
    snprintf(k, sizeof k, "ftc:{%s}:hb:%s", job, node);
    if (ms > 0)
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", k, "1 -1 0 0", "PX", "60000", NULL),
                         0);
    else
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", k, NULL), 0);
    ftc_redis_close(r);
}

/* A hot spare registered before the round opened, MAX 3: the round does not
 * close at MAX without a survivor (a member of the previous generation whose
 * heartbeat is there) that registers after the spare and two others — the
 * survivor keeps its place, the spare stays a spare. A survivor whose
 * heartbeat is gone (lost) leaves its place to the spare at once: the round
 * closes at MAX without waiting out the (long) settle time. */
static void test_spare_does_not_displace_survivor(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[4];
    static const char *const ids[] = {"sv-a", "sv-b", "sv-c"};
    for (int i = 0; i < 3; i++)
        start(&j[i], f, "rsv", ids[i], 3, 3, 200, 0, 0);
    finish(j, 3);
    same_round(j, 3, 3, 0);
    char order[3][FTC_RDZV_NODE_MAX + 1];
    memcpy(order, j[0].round.members, sizeof order);
    for (int i = 0; i < 3; i++) {
        ftc_rdzv_round_free(&j[i].round);
        heartbeat(f, "rsv", ids[i], 60000); /* their agents run on */
    }
    /* the spare waits for the round after generation 1 */
    start(&j[3], f, "rsv", "sv-spare", 2, 3, 60000, 1, 0);
    await_waiting(f, "rsv", 1, 1);
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    bool opened;
    assert_int_equal(ftc_rdzv_request(r, "rsv", 1, "node failed", &opened, &err), 0);
    /* two survivors at once, the third one later, after the round had 3 */
    start(&j[0], f, "rsv", order[0], 2, 3, 60000, 1, 0);
    start(&j[1], f, "rsv", order[1], 2, 3, 60000, 1, 0);
    start(&j[2], f, "rsv", order[2], 2, 3, 60000, 1, 400);
    finish(j, 4);
    same_round(j, 4, 3, 1);
    assert_int_equal(j[0].round.generation, 2);
    assert_int_equal(j[0].round.prev_nodes, 3);
    for (int k = 0; k < 3; k++)
        assert_string_equal(j[0].round.members[k], order[k]);
    assert_string_equal(j[0].round.spare_ids[0], "sv-spare");
    assert_int_equal(j[3].round.index, -1);
    free_rounds(j, 4);

    /* the last survivor is lost (its heartbeat expired): the spare takes its
     * place as soon as the two others are there (settle 60 s, deadline 20 s) */
    heartbeat(f, "rsv", order[2], 0);
    start(&j[3], f, "rsv", "sv-spare", 2, 3, 60000, 2, 0);
    await_waiting(f, "rsv", 2, 1);
    assert_int_equal(ftc_rdzv_request(r, "rsv", 2, "node lost", &opened, &err), 0);
    start(&j[0], f, "rsv", order[0], 2, 3, 60000, 2, 0);
    start(&j[1], f, "rsv", order[1], 2, 3, 60000, 2, 50);
    uint64_t t0 = ftc_now_ns();
    finish(j, 2);
    finish(&j[3], 1);
    print_message("round with a lost survivor closed %.0f ms after the request (settle 60 s)\n",
                  (double)(j[0].t_done_ns - t0) / 1e6);
    assert_int_equal(j[0].rc, 0);
    assert_int_equal(j[1].rc, 0);
    assert_int_equal(j[3].rc, 0);
    assert_int_equal(j[0].round.generation, 3);
    assert_int_equal(j[0].round.nodes, 3);
    assert_int_equal(j[0].round.prev_nodes, 2);
    assert_string_equal(j[0].round.members[0], order[0]);
    assert_string_equal(j[0].round.members[1], order[1]);
    assert_string_equal(j[0].round.members[2], "sv-spare");
    assert_int_equal(j[3].round.index, 2);
    for (int i = 0; i < 4; i++)
        if (i != 2)
            ftc_rdzv_round_free(&j[i].round);

    /* a survivor whose heartbeat is there but that never registers (its node
     * hangs) holds its place for survivor_wait_ms (300), not for ever: then
     * the newcomer takes it (settle 60 s, deadline 20 s) */
    start_sw(&j[3], f, "rsv", "sv-new", 1, 2, 60000, 3, 0, 300);
    await_waiting(f, "rsv", 3, 1);
    assert_int_equal(ftc_rdzv_request(r, "rsv", 3, "node hangs", &opened, &err), 0);
    start_sw(&j[0], f, "rsv", order[0], 1, 2, 60000, 3, 0, 300);
    finish(j, 1);
    finish(&j[3], 1);
    assert_int_equal(j[0].rc, 0);
    assert_int_equal(j[3].rc, 0);
    assert_int_equal(j[0].round.generation, 4);
    assert_int_equal(j[0].round.nodes, 2);
    assert_string_equal(j[0].round.members[0], order[0]);
    assert_string_equal(j[0].round.members[1], "sv-new");
    ftc_rdzv_round_free(&j[0].round);
    ftc_rdzv_round_free(&j[3].round);
    ftc_redis_close(r);
}

/* A grow round under the settle rule (MIN 1, no MAX, settle 100 ms): the
 * newcomer waited for the round after generation 1, the two survivors
 * (heartbeats there) register 800 ms after it opened, as `ftc run`'s do once
 * their ranks stopped (up to --grace-ms). The settle time does not close the
 * round with the newcomer alone meanwhile (it did: the survivors then found
 * generation 2 made without them); survivor_wait_ms (10 s) bounds the wait.
 * A survivor whose heartbeat is gone (lost) holds nothing: the next round
 * closes on settle without it (survivor wait 60 s, deadline 20 s). */
static void test_grow_settle_waits_for_survivors(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[3];
    start(&j[0], f, "rgs", "gs-a", 2, 0, 100, 0, 0);
    start(&j[1], f, "rgs", "gs-b", 2, 0, 100, 0, 0);
    finish(j, 2);
    same_round(j, 2, 2, 0);
    char order[2][FTC_RDZV_NODE_MAX + 1];
    memcpy(order, j[0].round.members, sizeof order);
    for (int i = 0; i < 2; i++) {
        ftc_rdzv_round_free(&j[i].round);
        heartbeat(f, "rgs", order[i], 60000);
    }
    start_sw(&j[2], f, "rgs", "gs-new", 1, 0, 100, 1, 0, 10000);
    await_waiting(f, "rgs", 1, 1);
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    bool opened;
    assert_int_equal(ftc_rdzv_request(r, "rgs", 1, "grow", &opened, &err), 0);
    start_sw(&j[0], f, "rgs", order[0], 1, 0, 100, 1, 800, 10000);
    start_sw(&j[1], f, "rgs", order[1], 1, 0, 100, 1, 800, 10000);
    finish(j, 3);
    same_round(j, 3, 3, 0);
    assert_int_equal(j[0].round.generation, 2);
    assert_int_equal(j[0].round.prev_nodes, 2);
    assert_string_equal(j[0].round.members[0], order[0]);
    assert_string_equal(j[0].round.members[1], order[1]);
    assert_string_equal(j[0].round.members[2], "gs-new");
    free_rounds(j, 3);

    /* the newcomer is lost (no heartbeat): the survivors close on settle */
    heartbeat(f, "rgs", "gs-new", 0);
    assert_int_equal(ftc_rdzv_request(r, "rgs", 2, "node lost", &opened, &err), 0);
    start_sw(&j[0], f, "rgs", order[0], 1, 0, 100, 2, 0, 60000);
    start_sw(&j[1], f, "rgs", order[1], 1, 0, 100, 2, 0, 60000);
    finish(j, 2);
    same_round(j, 2, 2, 0);
    assert_int_equal(j[0].round.generation, 3);
    free_rounds(j, 2);
    ftc_redis_close(r);
}

static void test_killed_registrant_not_counted(void **state)
{
    redis_fixture_t *f = *state;
    pid_t child = fork();
    if (child == 0) {
        ftc_err_t err = {0};
        ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
        if (!r)
            _exit(2);
        ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
        o.job = "rk";
        o.node_id = "doomed";
        o.min_nodes = 3;
        o.ttl_ms = 300;
        ftc_rdzv_round_t out;
        ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(30000), NULL, &err);
        _exit(3);
    }
    await_waiting(f, "rk", 0, 1);
    assert_int_equal(kill(child, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFSIGNALED(st));
    joiner_t j[3];
    start(&j[0], f, "rk", "a", 3, 0, 400, 0, 0);
    start(&j[1], f, "rk", "b", 3, 0, 400, 0, 0);
    /* a and b plus the dead one make 3, but its entry expires before the settle
     * time can pass: the round waits for a live third. (Waiting for a count of
     * 2 at once could see the dead one and a before b registered: let the
     * dead one's 300 ms lifetime pass first.) */
    ftc_sleep_ms(600);
    await_waiting(f, "rk", 0, 2);
    start(&j[2], f, "rk", "c", 3, 0, 400, 0, 0);
    finish(j, 3);
    same_round(j, 3, 3, 0);
    for (int k = 0; k < 3; k++)
        assert_string_not_equal(j[0].round.members[k], "doomed");
    free_rounds(j, 3);
}

typedef struct requester {
    redis_fixture_t *f;
    pthread_barrier_t *bar;
    bool opened;
    int rc;
} requester_t;

static void *requester_main(void *arg)
{
    requester_t *q = arg;
    ftc_redis_t *r = conn(q->f);
    ftc_err_t err = {0};
    pthread_barrier_wait(q->bar);
    q->rc = ftc_rdzv_request(r, "rq", 1, "node_lost", &q->opened, &err);
    ftc_redis_close(r);
    return NULL;
}

static void test_requests_fencing_and_world(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j;
    start(&j, f, "rq", "solo", 1, 1, 0, 0, 0);
    finish(&j, 1);
    assert_int_equal(j.rc, 0);
    assert_int_equal(j.round.generation, 1);
    ftc_rdzv_round_free(&j.round);
    enum { N = 8 };
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, N);
    requester_t q[N];
    pthread_t tid[N];
    for (int i = 0; i < N; i++) {
        q[i] = (requester_t){.f = f, .bar = &bar};
        assert_int_equal(pthread_create(&tid[i], NULL, requester_main, &q[i]), 0);
    }
    int opened = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(tid[i], NULL);
        assert_int_equal(q[i].rc, 0);
        opened += q[i].opened;
    }
    pthread_barrier_destroy(&bar);
    assert_int_equal(opened, 1);

    ftc_ctl_t *c = redis_fixture_ctl(f, "rq");
    ftc_redis_t *r = ftc_ctl_redis(c);
    ftc_err_t err = {0};
    bool op;
    /* stale requests and joins are refused; a retried join gets its round back */
    assert_int_equal(ftc_rdzv_request(r, "rq", 0, "late", &op, &err), FTC_ESTALE);
    assert_non_null(strstr(err.msg, "generation is 1"));
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rq";
    o.node_id = "other";
    ftc_rdzv_round_t out;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(2000), NULL, &err),
                     FTC_ESTALE);
    print_message("%s\n", err.msg);
    o.node_id = "solo";
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(2000), NULL, &err), 0);
    assert_true(out.generation == 1 && out.index == 0);
    ftc_rdzv_round_free(&out);
    /* commit records wait for the world; set_world is fenced and idempotent */
    int64_t committed;
    bool now;
    assert_int_equal(ftc_ctl_commit_report(c, 1, 0, 0, 7, &committed, &now), FTC_ESTALE);
    assert_non_null(strstr(ftc_ctl_errstr(c), "no world size yet"));
    assert_int_equal(ftc_rdzv_set_world(r, "rq", 0, 2, &err), FTC_ESTALE);
    assert_int_equal(ftc_rdzv_set_world(r, "rq", 1, 2, &err), 0);
    assert_int_equal(ftc_rdzv_set_world(r, "rq", 1, 2, &err), 0);
    assert_int_equal(ftc_rdzv_set_world(r, "rq", 1, 3, &err), FTC_EEXIST);
    assert_int_equal(ftc_ctl_commit_report(c, 1, 0, 0, 7, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_report(c, 1, 0, 1, 7, &committed, &now), 0);
    assert_true(now && committed == 0);
    /* a world that is no whole number is FTC_CORRUPT, never taken for "unset" and
     * overwritten (tonumber made 0 of "x"), nor for 4 (" 4") */
    char gk[64];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    const char *bad[] = {"x", " 4", "4.0", "-1", "16777217"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "world", bad[i], NULL), 0);
        if (ftc_rdzv_set_world(r, "rq", 1, 4, &err) != FTC_EPROTO)
            fail_msg("world '%s': set_world did not refuse it (%s)", bad[i], err.msg);
        assert_non_null(strstr(err.msg, gk));
        ftc_redis_reply_t *rep;
        assert_int_equal(ftc_redis_cmdv(r, true, &rep, "HGET", gk, "world", NULL), 0);
        assert_string_equal(rep->str, bad[i]);
        ftc_redis_reply_free(rep);
    }
    ftc_ctl_destroy(c);
}

static void test_deadline_and_abort(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "ra";
    o.node_id = "alone";
    o.min_nodes = 2;
    ftc_rdzv_round_t out;
    uint64_t t0 = ftc_now_ns();
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(300), NULL, &err),
                     FTC_ETIMEDOUT);
    print_message("timeout after %.0f ms (deadline 300): %s\n", (double)(ftc_now_ns() - t0) / 1e6,
                  err.msg);
    assert_non_null(strstr(err.msg, "1 registered (alone)"));
    assert_non_null(strstr(err.msg, "min_nodes 2"));
    assert_int_equal(waiting(f, "ra", 0), 0);

    atomic_int abort_flag = 0;
    joiner_t j;
    start_abortable(&j, f, "ra", "aborted", &abort_flag);
    await_waiting(f, "ra", 0, 1);
    t0 = ftc_now_ns();
    atomic_store(&abort_flag, 1);
    pthread_join(j.tid, NULL);
    assert_int_equal(j.rc, FTC_ECANCELED);
    print_message("abort honoured in %.1f ms: %s\n", (double)(j.t_done_ns - t0) / 1e6, j.err.msg);
    assert_int_equal(waiting(f, "ra", 0), 0);
    ftc_redis_close(r);
}

static void test_bad_input(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    ftc_rdzv_round_t out;
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    ftc_deadline_t d = ftc_deadline_in_ms(1000);
    o.job = "bad job";
    o.node_id = "n";
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EINVAL);
    o.job = "rb";
    o.node_id = "has space";
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EINVAL);
    o.node_id = "n";
    o.min_nodes = 3;
    o.max_nodes = 2;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EINVAL);
    o.min_nodes = 0;
    o.max_nodes = 0;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EINVAL);
    o.min_nodes = 1;
    o.struct_size = 8;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EINVAL);
    assert_int_equal(ftc_rdzv_join(r, NULL, 0, &out, d, NULL, &err), FTC_EINVAL);
    o.struct_size = sizeof o;
    /* garbage in the generation: named, not a crash */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", "ftc:{rb}:gen", "gen", "seven", NULL),
                     0);
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "seven"));
    uint64_t gen;
    bool open;
    assert_int_equal(ftc_rdzv_state(r, "rb", &gen, &open, &err), FTC_EPROTO);
    assert_int_equal(ftc_rdzv_request(r, "rb", 0, "x", &open, &err), FTC_EPROTO);
    assert_int_equal(ftc_rdzv_set_world(r, "rb", 0, 0, &err), FTC_EINVAL);
    /* generations the scripts cannot hold exactly (Lua numbers: below 2^53,
     * and the round's next one too) are refused before they reach Redis: a
     * join or request above the generation would put it back there (the
     * data-loss reseed) and leave a gen nothing reads any more */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", "ftc:{rb}:gen", "gen", "5", NULL), 0);
    static const uint64_t huge[] = {(1ull << 53) - 1, 1ull << 53, (1ull << 53) + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        o.node_id = "n";
        int rc = ftc_rdzv_join(r, &o, huge[i], &out, ftc_deadline_in_ms(300), NULL, &err);
        print_message("join after %" PRIu64 ": rc %d %s\n", huge[i], rc, err.msg);
        ftc_rdzv_round_free(&out);
        assert_int_equal(rc, FTC_EINVAL);
        assert_int_equal(ftc_rdzv_request(r, "rb", huge[i], "x", &open, &err), FTC_EINVAL);
        /* (2^53 - 1 is a generation the round after 2^53 - 2 makes) */
        assert_int_equal(ftc_rdzv_set_world(r, "rb", huge[i], 2, &err),
                         i ? FTC_EINVAL : FTC_ESTALE);
        assert_int_equal(ftc_rdzv_state(r, "rb", &gen, &open, &err), 0);
        assert_int_equal(gen, 5);
    }
    ftc_rdzv_round_free(NULL);
    /* a round's id lists: ids a node can join with (fuzz_records found a
     * NUL byte read as an empty member id) */
    char(*ids)[FTC_RDZV_NODE_MAX + 1] = NULL;
    int n = 0;
    assert_int_equal(ftc_rdzv_split_ids(" a  b/c:d ", 10, &ids, &n, "members", &err), 0);
    assert_true(n == 2 && !strcmp(ids[0], "a") && !strcmp(ids[1], "b/c:d"));
    free(ids);
    const char bad[][8] = {"\0", "a \0", "a\0b c", "a b\tc", "a$ b"};
    const size_t blen[] = {1, 3, 5, 6, 4};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        if (ftc_rdzv_split_ids(bad[i], blen[i], &ids, &n, "members", &err) != FTC_EPROTO)
            fail_msg("id list %zu read as %d ids", i, n);
        free(ids);
    }
    ftc_redis_close(r);
}

/* A key of the round holding another type (foreign or corrupt) is an error
 * naming the keys at the first poll, not "Redis did not answer" after the
 * whole deadline. */
static void test_wrong_type_key_fails_fast(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    ftc_rdzv_round_t out;
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rw";
    o.node_id = "n0";
    const char *bad[] = {"ftc:{rw}:rdzv", "ftc:{rw}:rdzv:0:reg", "ftc:{rw}:rdzv:0:alive"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", bad[i], "foreign", NULL), 0);
        ftc_deadline_t d = ftc_deadline_in_ms(3000);
        int rc = ftc_rdzv_join(r, &o, 0, &out, d, NULL, &err);
        print_message("%s a string: %s\n", bad[i], err.msg);
        assert_int_equal(rc, FTC_EPROTO);
        assert_non_null(strstr(err.msg, "WRONGTYPE"));
        assert_non_null(strstr(err.msg, bad[i]));
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", bad[i], NULL), 0);
    }
    /* with the keys gone the round closes as usual */
    o.settle_ms = 10;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(5000), NULL, &err), 0);
    assert_int_equal(out.nodes, 1);
    ftc_rdzv_round_free(&out);
    ftc_redis_close(r);
}

/* Redis loses its data (a restart without persistence, FLUSHALL) while a
 * member waits in the round after generation 3: the round still closes, as
 * generation 4 — not FTC_ESTALE ("generation is 0"), after which the
 * supervisors would start over at the round after 0 and make a second
 * generation 1. */
static void test_data_loss_mid_round(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", "ftc:{rf}:gen", "gen", "3", "world",
                                    "2", NULL), 0);
    bool opened = false;
    assert_int_equal(ftc_rdzv_request(r, "rf", 3, "test", &opened, &err), 0);
    assert_true(opened);
    joiner_t j[2];
    start(&j[0], f, "rf", "a", 2, 2, 100, 3, 0);
    await_waiting(f, "rf", 3, 1);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "FLUSHALL", NULL), 0);
    ftc_sleep_ms(200); /* a has polled the empty Redis */
    start(&j[1], f, "rf", "b", 2, 2, 100, 3, 0);
    finish(j, 2);
    same_round(j, 2, 2, 0);
    assert_int_equal(j[0].round.generation, 4);
    uint64_t gen = 0;
    bool open = true;
    assert_int_equal(ftc_rdzv_state(r, "rf", &gen, &open, &err), 0);
    assert_int_equal(gen, 4);
    /* a request from the generation before the loss works the same way */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "FLUSHALL", NULL), 0);
    assert_int_equal(ftc_rdzv_request(r, "rf", 4, "after a flush", &opened, &err), 0);
    assert_true(opened);
    assert_int_equal(ftc_rdzv_state(r, "rf", &gen, &open, &err), 0);
    assert_true(gen == 4 && open);
    free_rounds(j, 2);
    ftc_redis_close(r);
}

/* A retried join gets its round back only while that round's generation is
 * current: once the job moved on past it (the others made a later generation
 * without this node), the old round is gone — FTC_ESTALE naming the current
 * generation, not a membership of a dead generation. */
static void test_retry_after_gen_moved_on_is_stale(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[2];
    start(&j[0], f, "rmo", "mo-a", 2, 2, 50, 0, 0);
    start(&j[1], f, "rmo", "mo-b", 2, 2, 50, 0, 0);
    finish(j, 2);
    same_round(j, 2, 2, 0);
    assert_int_equal(j[0].round.generation, 1);
    free_rounds(j, 2);
    /* mo-a goes silent; mo-b makes generation 2 alone */
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    bool opened;
    assert_int_equal(ftc_rdzv_request(r, "rmo", 1, "mo-a lost", &opened, &err), 0);
    start(&j[1], f, "rmo", "mo-b", 1, 0, 50, 1, 0);
    finish(&j[1], 1);
    assert_int_equal(j[1].rc, 0);
    assert_int_equal(j[1].round.generation, 2);
    ftc_rdzv_round_free(&j[1].round);
    /* mo-a comes back and retries its join of the round after 0 */
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rmo";
    o.node_id = "mo-a";
    o.min_nodes = 2;
    o.max_nodes = 2;
    ftc_rdzv_round_t out;
    int rc = ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(2000), NULL, &err);
    if (rc == 0)
        print_message("joined generation %" PRIu64 " (index %d) while generation 2 is current\n",
                      out.generation, out.index);
    ftc_rdzv_round_free(&out);
    assert_int_equal(rc, FTC_ESTALE);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "generation is 2"));
    ftc_redis_close(r);
}

typedef struct cycler {
    redis_fixture_t *f;
    atomic_int *stop;
    int rc, tries;
    ftc_rdzv_round_t round;
    pthread_t tid;
} cycler_t;

/* A registrant that waits with a short deadline and joins again after each
 * timeout, as a hot spare of `ftc run` does (2 s): its registration is
 * withdrawn and made again every time. */
static void *cycler_main(void *arg)
{
    cycler_t *c = arg;
    ftc_redis_t *r = conn(c->f);
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rcy";
    o.node_id = "cy-spare";
    o.min_nodes = 2;
    o.settle_ms = 1500;
    ftc_err_t err = {0};
    ftc_deadline_t end = ftc_deadline_in_ms(15000);
    do {
        c->tries++;
        c->rc = ftc_rdzv_join(r, &o, 0, &c->round, ftc_deadline_in_ms(300), NULL, &err);
    } while (c->rc == FTC_ETIMEDOUT && !atomic_load(c->stop) && !ftc_deadline_expired(end));
    if (c->rc)
        print_message("cycler: %s\n", err.msg);
    ftc_redis_close(r);
    return NULL;
}

/* The settle time counts from the last new arrival: a registrant that
 * withdrew (its deadline passed) and registers again is not a new arrival.
 * It was: a node joining again every 300 ms restarted the 1.5 s settle time
 * each time, and the round never closed (the other node timed out). */
static void test_rejoin_does_not_restart_settle(void **state)
{
    redis_fixture_t *f = *state;
    atomic_int stop = 0;
    cycler_t c;
    memset(&c, 0, sizeof c);
    c.f = f;
    c.stop = &stop;
    assert_int_equal(pthread_create(&c.tid, NULL, cycler_main, &c), 0);
    joiner_t j;
    start(&j, f, "rcy", "cy-member", 2, 0, 1500, 0, 0);
    finish(&j, 1);
    atomic_store(&stop, 1);
    pthread_join(c.tid, NULL);
    print_message("the re-joining node made %d joins\n", c.tries);
    assert_int_equal(j.rc, 0);
    assert_int_equal(c.rc, 0);
    assert_int_equal(j.round.generation, 1);
    assert_int_equal(c.round.generation, 1);
    assert_int_equal(j.round.nodes, 2);
    assert_int_equal(c.round.nodes, 2);
    ftc_rdzv_round_free(&j.round);
    ftc_rdzv_round_free(&c.round);
}

/* The generation field holds a decimal integer, as the control plane reads
 * it (strtoll): anything else Lua's tonumber would take ("1.5", hex, an
 * exponent, blanks, more digits than a double holds) is garbage named, not a
 * generation read one way here and another way there (a join of the round
 * after 1 refused as stale for ever while the state said generation 1). */
static void test_gen_not_an_integer(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_err_t err = {0};
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rgi";
    o.node_id = "n";
    o.settle_ms = 10;
    static const char *const bad[] = {"1.5", "0x1", "1e0", " 1", "1 ", "-1",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(
            ftc_redis_cmdv(r, true, NULL, "HSET", "ftc:{rgi}:gen", "gen", bad[i], NULL), 0);
        uint64_t gen = 0;
        bool open = false;
        ftc_rdzv_round_t out;
        int rc = ftc_rdzv_state(r, "rgi", &gen, &open, &err);
        print_message("gen '%s': state rc %d gen %" PRIu64 " (%s)\n", bad[i], rc, gen,
                      rc ? err.msg : "");
        assert_int_equal(rc, FTC_EPROTO);
        rc = ftc_rdzv_join(r, &o, 1, &out, ftc_deadline_in_ms(2000), NULL, &err);
        ftc_rdzv_round_free(&out);
        assert_int_equal(rc, FTC_EPROTO);
        assert_non_null(strstr(err.msg, "ftc:{rgi}:gen"));
        assert_int_equal(ftc_rdzv_request(r, "rgi", 1, "x", &open, &err), FTC_EPROTO);
        assert_int_equal(ftc_rdzv_set_world(r, "rgi", 1, 2, &err), FTC_EPROTO);
    }
    /* a plain integer works */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", "ftc:{rgi}:gen", "gen", "1", NULL), 0);
    bool opened = false;
    assert_int_equal(ftc_rdzv_request(r, "rgi", 1, "x", &opened, &err), 0);
    assert_true(opened);
    ftc_redis_close(r);
}

/* A user whose ACL does not allow the scripts (NOPERM) is told so at the
 * first poll, as a refused password is: waiting does not grant permissions.
 * It was taken for Redis being away: retried until the deadline (ftc run's
 * --join-timeout-ms, 2 min by default), then "Redis did not answer". */
static void test_noperm_fails_fast(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *admin = conn(f);
    assert_int_equal(ftc_redis_cmdv(admin, true, NULL, "ACL", "SETUSER", "rdzv-ro", "on",
                                    ">rdzv-pw", "~*", "&*", "+@all", "-evalsha", "-eval", NULL),
                     0);
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    snprintf(u.user, sizeof u.user, "rdzv-ro");
    snprintf(u.password, sizeof u.password, "rdzv-pw");
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(&u, NULL, &err);
    if (!r)
        fail_msg("connect as rdzv-ro: %s", err.msg);
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rnp";
    o.node_id = "np";
    o.min_nodes = 2;
    ftc_rdzv_round_t out;
    int rc = ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(3000), NULL, &err);
    print_message("join without EVALSHA permission: rc %d: %s\n", rc, err.msg);
    assert_int_equal(rc, FTC_EAUTH);
    assert_non_null(strstr(err.msg, "NOPERM"));
    uint64_t gen;
    bool open;
    assert_int_equal(ftc_rdzv_state(r, "rnp", &gen, &open, &err), FTC_EAUTH);
    ftc_redis_close(r);
    ftc_redis_close(admin);
}

/* A join that Redis refuses for a reason waiting does not cure — a read-only replica
 * (READONLY), a server at its maxmemory (OOM) — ends at the first poll with FTC_EREDIS naming
 * the round's key, Redis's words and what to do. Both were taken for Redis being away and
 * retried until the deadline (ftc run's --join-timeout-ms, 2 min by default), then "Redis did
 * not answer". The joins get a 60 s deadline; the alarm fails the test if one waits it out. */
static void test_permanent_refusal_fails_fast(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *admin = conn(f), *r = conn(f);
    static const struct {
        const char *set[5], *undo[5], *word, *hint;
    } cases[] = {
        {{"REPLICAOF", "127.0.0.1", "1", NULL}, {"REPLICAOF", "NO", "ONE", NULL}, "READONLY",
         "primary"},
        {{"CONFIG", "SET", "maxmemory", "1", NULL}, {"CONFIG", "SET", "maxmemory", "0", NULL},
         "OOM", "maxmemory"},
    };
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rpr";
    o.node_id = "n0";
    o.min_nodes = 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[5];
        int n = 0;
        for (; cases[i].set[n]; n++)
            argv[n] = cases[i].set[n];
        assert_int_equal(ftc_redis_cmd(admin, false, NULL, n, argv, NULL), 0);
        ftc_err_t err = {0};
        ftc_rdzv_round_t out;
        alarm(20); /* a join that waits for its deadline fails the test (SIGALRM) */
        int rc = ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(60000), NULL, &err);
        alarm(0);
        print_message("%s: rc %d: %s\n", cases[i].word, rc, err.msg);
        for (n = 0; cases[i].undo[n]; n++)
            argv[n] = cases[i].undo[n];
        assert_int_equal(ftc_redis_cmd(admin, false, NULL, n, argv, NULL), 0);
        assert_int_equal(rc, FTC_EREDIS);
        assert_false(ftc_redis_transient(r));
        assert_string_equal(ftc_redis_reply_error(r), cases[i].word);
        assert_non_null(strstr(err.msg, cases[i].word));
        assert_non_null(strstr(err.msg, "ftc:{rpr}:rdzv"));
        assert_non_null(strstr(err.msg, cases[i].hint));
    }
    /* with the server writable again the round closes as usual */
    o.min_nodes = 1;
    o.settle_ms = 10;
    ftc_err_t err = {0};
    ftc_rdzv_round_t out;
    assert_int_equal(ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(5000), NULL, &err), 0);
    assert_int_equal(out.nodes, 1);
    ftc_rdzv_round_free(&out);
    ftc_redis_close(r);
    ftc_redis_close(admin);
}

typedef struct busy_script {
    redis_fixture_t *f;
    int rc;
} busy_script_t;

/* Runs a script that keeps the server busy for 800 ms (Redis time). */
static void *busy_main(void *arg)
{
    busy_script_t *b = arg;
    ftc_redis_t *r = conn(b->f);
    b->rc = ftc_redis_cmdv(r, false, NULL, "EVAL",
                           "local t = redis.call('TIME') "
                           "local t0 = t[1] * 1000000 + t[2] "
                           "repeat t = redis.call('TIME') "
                           "until t[1] * 1000000 + t[2] - t0 > 800000 "
                           "return 1",
                           "0", NULL);
    ftc_redis_close(r);
    return NULL;
}

/* A server busy running a script (BUSY) is a state it leaves by itself: the join keeps
 * polling and closes its round once the script ended, as after a lost connection. */
static void test_busy_is_waited_out(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *admin = conn(f), *r = conn(f);
    assert_int_equal(ftc_redis_cmdv(admin, true, NULL, "CONFIG", "SET", "busy-reply-threshold",
                                    "50", NULL), 0);
    busy_script_t b = {f, -1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, busy_main, &b), 0);
    /* wait (bounded) until the server answers BUSY */
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    int prc = 0;
    while (!ftc_deadline_expired(d)) {
        prc = ftc_redis_cmdv(admin, true, NULL, "PING", NULL);
        if (prc)
            break;
        ftc_sleep_ms(5);
    }
    assert_int_equal(prc, FTC_EREDIS);
    assert_string_equal(ftc_redis_reply_error(admin), "BUSY");
    assert_true(ftc_redis_transient(admin));
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rbz";
    o.node_id = "n0";
    o.settle_ms = 10;
    ftc_err_t err = {0};
    ftc_rdzv_round_t out;
    int rc = ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(20000), NULL, &err);
    if (rc)
        print_message("join while BUSY: rc %d: %s\n", rc, err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(out.nodes, 1);
    ftc_rdzv_round_free(&out);
    pthread_join(tid, NULL);
    assert_int_equal(b.rc, 0);
    assert_int_equal(ftc_redis_cmdv(admin, true, NULL, "CONFIG", "SET", "busy-reply-threshold",
                                    "5000", NULL), 0);
    ftc_redis_close(r);
    ftc_redis_close(admin);
}

/* Redis dies (SIGKILL) or hangs (SIGSTOP) while a joiner waits: the join
 * ends at its deadline (plus at most a command timeout) with FTC_ETIMEDOUT
 * saying Redis did not answer — never a hang, never a member list. The
 * server is brought back for the tests after this one. */
static void test_redis_gone_mid_round(void **state)
{
    redis_fixture_t *f = *state;
    for (int hang = 0; hang < 2; hang++) {
        const char *job = hang ? "rgh" : "rgk";
        joiner_t j;
        memset(&j, 0, sizeof j);
        j.f = f;
        j.job = job;
        snprintf(j.node, sizeof j.node, "alone");
        j.min = 2;
        j.deadline_ms = 2000;
        assert_int_equal(pthread_create(&j.tid, NULL, joiner_main, &j), 0);
        await_waiting(f, job, 0, 1);
        if (hang)
            assert_int_equal(kill(ftc_redis_server_pid(f->srv), SIGSTOP), 0);
        else
            assert_int_equal(ftc_redis_server_signal(f->srv, SIGKILL), 0);
        finish(&j, 1);
        print_message("redis %s: %s\n", hang ? "stopped" : "killed", j.err.msg);
        assert_int_equal(j.rc, FTC_ETIMEDOUT);
        assert_non_null(strstr(j.err.msg, "Redis did not answer"));
        assert_int_equal(j.round.nodes, 0);
        if (hang) {
            assert_int_equal(kill(ftc_redis_server_pid(f->srv), SIGCONT), 0);
        } else {
            ftc_err_t err = {0};
            assert_int_equal(ftc_redis_server_restart(f->srv, &err), 0);
        }
    }
}

/* An abort while Redis does not answer returns once the poll in flight gives
 * up, saying so: it no longer spends a command timeout each on listing the
 * registrants and withdrawing (about 5 s in all with the default 2 s, not
 * the few milliseconds recovery.md promises); the entry expires by itself. */
static void test_abort_while_redis_gone(void **state)
{
    redis_fixture_t *f = *state;
    atomic_int abort_flag = 0;
    joiner_t j;
    start_abortable(&j, f, "rag", "alone", &abort_flag);
    await_waiting(f, "rag", 0, 1);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGKILL), 0);
    ftc_sleep_ms(1000); /* its next poll (100 ms apart) is failing */
    uint64_t t0 = ftc_now_ns();
    atomic_store(&abort_flag, 1);
    pthread_join(j.tid, NULL);
    print_message("abort with Redis gone: %.0f ms: %s\n", (double)(j.t_done_ns - t0) / 1e6,
                  j.err.msg);
    assert_int_equal(j.rc, FTC_ECANCELED);
    assert_non_null(strstr(j.err.msg, "aborted while Redis did not answer"));
    assert_non_null(strstr(j.err.msg, "expires by itself"));
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_server_restart(f->srv, &err), 0);
}

/* A node that restarts with the same id while its old registration still
 * lives (the old process hung, a new one took over) is one registrant, not
 * two: two joiners with one id do not make a MIN 2 round, and with a third
 * node the round has two members, the id once. */
static void test_same_id_counted_once(void **state)
{
    redis_fixture_t *f = *state;
    joiner_t j[3];
    for (int i = 0; i < 2; i++) {
        memset(&j[i], 0, sizeof j[i]);
        j[i].f = f;
        j[i].job = "rid";
        snprintf(j[i].node, sizeof j[i].node, "twice");
        j[i].min = 2;
        j[i].settle = 50;
        j[i].deadline_ms = 1000;
        assert_int_equal(pthread_create(&j[i].tid, NULL, joiner_main, &j[i]), 0);
    }
    finish(j, 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(j[i].rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(j[0].err.msg, "min_nodes 2"));
    for (int i = 0; i < 2; i++) {
        j[i].deadline_ms = 10000;
        assert_int_equal(pthread_create(&j[i].tid, NULL, joiner_main, &j[i]), 0);
    }
    await_waiting(f, "rid", 0, 1);
    start(&j[2], f, "rid", "other", 2, 0, 50, 0, 0);
    finish(j, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(j[i].rc, 0);
        assert_int_equal(j[i].round.nodes, 2);
        assert_int_equal(j[i].round.spares, 0);
    }
    assert_string_not_equal(j[0].round.members[0], j[0].round.members[1]);
    free_rounds(j, 3);
}

static long long connections_received(redis_fixture_t *f)
{
    ftc_redis_t *r = conn(f);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "INFO", "stats", NULL), 0);
    const char *s;
    size_t len;
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_want_str(rep, "INFO", &s, &len, &err), 0);
    const char *p = strstr(s, "total_connections_received:");
    assert_non_null(p);
    long long n = atoll(p + strlen("total_connections_received:"));
    ftc_redis_reply_free(rep);
    ftc_redis_close(r);
    return n;
}

/* A join whose deadline passes while Redis does not answer stops there: the
 * overrun is at most the one command timeout recovery.md names. It made one
 * more "last try" after the failed poll that ran into the deadline — a
 * reconnect and another whole command timeout (a 300 ms deadline ended after
 * 4 s, 2 x 2 s). Counted here as connections the hung server received. */
static void test_deadline_while_redis_hangs(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = conn(f);
    ftc_rdzv_options_t o = FTC_RDZV_OPTIONS_INIT;
    o.job = "rdh";
    o.node_id = "n";
    o.min_nodes = 2;
    ftc_err_t err = {0};
    ftc_rdzv_round_t out;
    long long before = connections_received(f);
    assert_int_equal(kill(ftc_redis_server_pid(f->srv), SIGSTOP), 0);
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_rdzv_join(r, &o, 0, &out, ftc_deadline_in_ms(300), NULL, &err);
    double ms = (double)(ftc_now_ns() - t0) / 1e6;
    assert_int_equal(kill(ftc_redis_server_pid(f->srv), SIGCONT), 0);
    long long after = connections_received(f);
    /* after - before - 1: the connection that counted */
    print_message("deadline 300 ms, Redis stopped: rc %d after %.0f ms, %lld reconnects: %s\n",
                  rc, ms, after - before - 1, err.msg);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "Redis did not answer"));
    assert_int_equal(after - before - 1, 0);
    ftc_redis_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_join_and_stable_order),
        cmocka_unit_test(test_settle_min_of_max),
        cmocka_unit_test(test_spare_and_deadline),
        cmocka_unit_test(test_spare_does_not_displace_survivor),
        cmocka_unit_test(test_grow_settle_waits_for_survivors),
        cmocka_unit_test(test_killed_registrant_not_counted),
        cmocka_unit_test(test_same_id_counted_once),
        cmocka_unit_test(test_requests_fencing_and_world),
        cmocka_unit_test(test_deadline_and_abort),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_wrong_type_key_fails_fast),
        cmocka_unit_test(test_data_loss_mid_round),
        cmocka_unit_test(test_retry_after_gen_moved_on_is_stale),
        cmocka_unit_test(test_rejoin_does_not_restart_settle),
        cmocka_unit_test(test_gen_not_an_integer),
        cmocka_unit_test(test_noperm_fails_fast),
        cmocka_unit_test(test_permanent_refusal_fails_fast),
        cmocka_unit_test(test_busy_is_waited_out),
        cmocka_unit_test(test_redis_gone_mid_round),
        cmocka_unit_test(test_abort_while_redis_gone),
        cmocka_unit_test(test_deadline_while_redis_hangs),
    };
    return cmocka_run_group_tests(tests, redis_fixture_setup, redis_fixture_teardown);
}
