/*
 * test_agent.c — `ftc agent` and libftc end to end, with a real Redis, real
 * agent processes talking libfabric (tcp;ofi_rxm on loopback), real rank
 * processes and real SIGKILLs:
 *   - replicate then restore (from the node's own slots);
 *   - a rank killed with SIGKILL restores from its node's shm;
 *   - an agent killed with SIGKILL and its node's shm wiped (node loss):
 *     its rank restores from a peer's replica, and checkpoints on into its
 *     fresh slots (two of them reserved after the restore);
 *   - k = 2: two nodes lost at once, both ranks restore from the third;
 *   - a corrupted replica is detected and another source is used;
 *   - a rank's corrupted own slots: restored from a peer's replica;
 *   - with no replicas and no shm left, the persist tier restores;
 *   - nothing committed: a clear "nothing committed" error;
 *   - failure domains {A, A, B, B}, k = 1: every replica lands in the other
 *     domain; both domain-A nodes lost at once, both their ranks restore;
 *   - --persist-every 3: only every third commit reaches the persist tier;
 *   - a fetch the persist tier answers gets the newest older persisted step,
 *     never a newer one;
 *   - ftc_fetch of an older step that was never committed (one rank
 *     checkpointed it, the other skipped it): FTC_ENOENT saying so, from
 *     either node, before and after the node that holds a verified copy of
 *     it is lost, while older committed steps still fetch (slots, another
 *     node, the persist tier);
 *   - ftc_fetch_at_most over committed steps with gaps: the newest committed
 *     step at or before the one asked for that has a copy (slots, persist
 *     tier; after the node's memory is lost, walking over the lost ones in
 *     one request), FTC_ENOENT naming the oldest committed step below it;
 *     and with Redis stopped, within the rank's timeout (Redis not asked
 *     again once it failed);
 *   - checkpoint.busy wait: with no free slot the checkpoint waits (never
 *     FTC_EAGAIN) until a commit frees one, and a checkpoint_waiting event
 *     says so; checkpoint.inflight 1: a checkpoint waits for the previous
 *     version's commit although slots are free, and the third slot's memory
 *     is never reserved; a BEGIN parked behind a version whose parity fails
 *     is answered at the failure;
 *   - two ranks of a node fetching the same shard at once both get it (the
 *     holder busy with the first fetch is asked again), each answered by its
 *     own fetch (the first to ask, first); a first holder that
 *     cannot be asked is passed over for the next one;
 *   - a restarted agent does not take a surviving slot of a step that was
 *     never committed for committed;
 *   - a rank whose snapshot fails (a stand-in device, fake_device.h) tells
 *     its agent (ABORT): the other rank's copy of that step on the node is
 *     abandoned at once (NOT_COMMITTED, checkpoint_failed and
 *     checkpoint_abandoned events), not after agent.timeout_ms, and the
 *     committed step stays; on another node too (the abort marker of the
 *     step's commit record), and an encoder's gather of the failed rank's
 *     shard ends at once (parity);
 *   - with Redis stopped, the commit reports and event writes are skipped
 *     (no command timeout each) and made once Redis answers; with Redis
 *     known down a push does not read the generation's plan, and the abort
 *     markers of any number of ABORTs are written once Redis answers; an
 *     error reply (WRONGTYPE) is not taken for Redis down;
 *   - a corrupt copy in this node's replica store is refused and the live
 *     peer asked; a hung peer (alive by its heartbeat) is asked in one
 *     round, not three, before the persist tier.
 * FTC_TEST_FILTER=NAME (cmocka pattern) runs only the matching tests.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ckpt/client_internal.h"
#include "ckpt/fake_device.h"
#include "ftc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_replicate_kill_rank_lose_node(void **state)
{
    env_t *e = setup_env(*state, 3, "1", 1000);
    run_all(e, "4");
    /* restart of a rank: its node's slots */
    restore_rank(e, 1, "RESTORED 3 OK");
    /* a rank killed with SIGKILL mid-run restores from its node's shm */
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank0.die.out", e->jobdir);
    pid_t p0 = start_rank(e, 0, 3, out, "--restore", "--steps", "100", NULL);
    /* the others must report too for a step to commit: run them alongside */
    char o1[PATH_MAX + 32], o2[PATH_MAX + 32];
    snprintf(o1, sizeof o1, "%s/rank1.more.out", e->jobdir);
    snprintf(o2, sizeof o2, "%s/rank2.more.out", e->jobdir);
    pid_t p1 = start_rank(e, 1, 3, o1, "--restore", "--steps", "7", NULL);
    pid_t p2 = start_rank(e, 2, 3, o2, "--restore", "--steps", "7", NULL);
    wait_rank(p1, 60000);
    wait_rank(p2, 60000);
    assert_true(said(o1, "COMMITTED 6"));
    /* ftc_ckpt_status: restored at 3, steps 4..6 checkpointed and committed */
    assert_true(said(o1, "STATUS rank 1 world 3 committed 6 checkpoints 3 skipped 0\n"));
    kill(p0, SIGKILL); /* rank 0 dies while it is still checkpointing */
    wait_rank(p0, 10000);
    restore_rank(e, 0, "RESTORED 6 OK");
    /* node loss: agent 0 killed and its shared memory gone */
    lose_and_replace(e, (int[]){0}, 1);
    restore_rank(e, 0, "RESTORED 6 OK");
    /* lost again, and this time its rank goes on: restored from a peer into
     * fresh slots (the landing one reserved by prefaulting it, the two others
     * only after RESTORE_OK), then checkpoints into all three */
    lose_and_replace(e, (int[]){0}, 1);
    char o0[PATH_MAX + 32];
    snprintf(o0, sizeof o0, "%s/rank0.cont.out", e->jobdir);
    snprintf(o1, sizeof o1, "%s/rank1.cont.out", e->jobdir);
    snprintf(o2, sizeof o2, "%s/rank2.cont.out", e->jobdir);
    p0 = start_rank(e, 0, 3, o0, "--restore", "--steps", "10", NULL);
    p1 = start_rank(e, 1, 3, o1, "--restore", "--steps", "10", NULL);
    p2 = start_rank(e, 2, 3, o2, "--restore", "--steps", "10", NULL);
    wait_rank(p0, 60000);
    wait_rank(p1, 60000);
    wait_rank(p2, 60000);
    assert_true(said(o0, "RESTORED 6 OK"));
    assert_true(said(o0, "COMMITTED 9"));
    teardown_env(e);
}

/* Three slots per rank: with the steps never committing (rank 1 of the
 * world never runs) and policy skip, a rank still writes three versions —
 * step 0 replicated and waiting for its commit, step 1 waiting for step 0's
 * commit before its push, step 2 — before the agent has no slot left and
 * skips. The newest committed version is never among them (nothing is
 * committed here); with two slots step 2 would be skipped. */
static void test_three_slots_before_skip(void **state)
{
    setenv("FTC_CHECKPOINT_BUSY", "skip", 1); /* inherited by the agents */
    env_t *e = setup_env(*state, 2, "1", 1000);
    unsetenv("FTC_CHECKPOINT_BUSY");
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank0.skip.out", e->jobdir);
    pid_t p = start_rank(e, 0, 2, out, "--steps", "5", "--no-commit", NULL);
    wait_rank(p, 60000);
    assert_true(said(out, "CHECKPOINTED 0\nCHECKPOINTED 1\nCHECKPOINTED 2\nSKIPPED 3\n"
                          "SKIPPED 4\n"));
    /* ftc_ckpt_status counts them; nothing committed */
    assert_true(said(out, "STATUS rank 0 world 2 committed -1 checkpoints 3 skipped 2\n"));
    teardown_env(e);
}

/* After a layout change a rank continues another rank's state: ftc_fetch
 * reads any rank's committed shard (this node's replica store, a peer, after
 * the node that wrote it is lost), ftc_restore_from (FTC_RESTORE_RANK)
 * installs it; an uncommitted step is refused. */
static void test_fetch_and_restore_from(void **state)
{
    env_t *e = setup_env(*state, 3, "1", 1000);
    run_all(e, "4");
    char out[PATH_MAX + 32];
    /* rank 2's replica lives on node 0 (ring order): this node's store */
    snprintf(out, sizeof out, "%s/rank0.fetch2.out", e->jobdir);
    pid_t p = start_rank(e, 0, 3, out, "--steps", "0", "--fetch", "2");
    wait_rank(p, 60000);
    assert_true(said(out, "FETCHED 2 3 OK"));
    /* rank 1's shard: node 1's slots or node 2's replica, over the fabric */
    snprintf(out, sizeof out, "%s/rank0.fetch1.out", e->jobdir);
    p = start_rank(e, 0, 3, out, "--steps", "0", "--fetch", "1");
    wait_rank(p, 60000);
    assert_true(said(out, "FETCHED 1 3 OK"));
    /* a step that is not committed is refused */
    snprintf(out, sizeof out, "%s/rank0.fetch99.out", e->jobdir);
    p = start_rank(e, 0, 3, out, "--steps", "0", "--fetch", "1:99");
    wait_rank(p, 60000);
    assert_true(said(out, "FETCH NONE: agent: step 99 is not committed"));
    /* node 1 lost: rank 0 continues rank 1's state (restore_from, a peer) */
    kill_agent(e, 1);
    wipe_node_shm(e, 1);
    setenv("FTC_RESTORE_RANK", "1", 1);
    snprintf(out, sizeof out, "%s/rank0.from1.out", e->jobdir);
    p = start_rank(e, 0, 3, out, "--restore", "--steps", "0", NULL);
    unsetenv("FTC_RESTORE_RANK");
    wait_rank(p, 60000);
    assert_true(said(out, "RESTORED 3 OK"));
    start_agent(e, 1);
    teardown_env(e);
}

static void test_two_concurrent_losses_k2(void **state)
{
    env_t *e = setup_env(*state, 3, "2", 1000);
    run_all(e, "3");
    lose_and_replace(e, (int[]){0, 1}, 2);
    restore_rank(e, 0, "RESTORED 2 OK");
    restore_rank(e, 1, "RESTORED 2 OK");
    teardown_env(e);
}

static void test_corrupt_replica_other_source(void **state)
{
    env_t *e = setup_env(*state, 3, "2", 1000);
    run_all(e, "3");
    /* node 1's replicas of rank 0 get a flipped byte; node 2's stay good */
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n1.p0.", e->job);
    assert_true(corrupt_shm(prefix) >= 1);
    lose_and_replace(e, (int[]){0}, 1);
    restore_rank(e, 0, "RESTORED 2 OK");
    teardown_env(e);
}

/* The rank's own slots corrupted on a live node: the agent's check of its
 * slots fails, the shard comes from a peer's replica, landing straight in
 * one of the rank's slots (verified as it lands), and the rank's own check
 * of what it restored passes. */
static void test_corrupt_own_slots_peer_replica(void **state)
{
    env_t *e = setup_env(*state, 3, "1", 1000);
    run_all(e, "3");
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.r0.", e->job);
    assert_int_equal(corrupt_shm(prefix), 3);
    restore_rank(e, 0, "RESTORED 2 OK");
    /* and again: the slot it landed in is now a verified, committed one */
    restore_rank(e, 0, "RESTORED 2 OK");
    teardown_env(e);
}

static void test_persist_tier_last_resort(void **state)
{
    env_t *e = setup_env(*state, 2, "0", 1);
    run_all(e, "3");
    wait_persisted(e, 0, 2);
    wait_persisted(e, 1, 2);
    for (int i = 0; i < 2; i++) {
        kill_agent(e, i);
        wipe_node_shm(e, i);
    }
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    restore_rank(e, 0, "RESTORED 2 OK");
    restore_rank(e, 1, "RESTORED 2 OK");
    teardown_env(e);
}

static void test_nothing_committed(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    restore_rank(e, 0, "RESTORE NONE: agent: nothing committed");
    teardown_env(e);
}

/* Number of /dev/shm objects whose name starts with "ftc.<job>.n<holder>.p<owner>.":
 * node holder's replicas of rank owner (replica.c names them so). */
static int replicas_on(env_t *e, int holder, int owner)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n%d.p%d.", e->job, holder, owner);
    int n = 0;
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Domains {A, A, B, B}, k = 1: a replica goes to the next node in ring order
 * whose domain differs (docs/agent.md): rank 0 (A) -> node 2, not node 1;
 * rank 1 (A) -> node 2; rank 2 (B) -> node 0 (node 3 is B); rank 3 (B) ->
 * node 0. Losing both A nodes at once (agents SIGKILLed, their memory gone)
 * leaves a copy of both A ranks on node 2: both restore, bytes verified. */
static void test_failure_domain_placement(void **state)
{
    const char *dom[] = {"A", "A", "B", "B"};
    env_t *e = setup_env_domains(*state, 4, "1", 1000, dom);
    run_all(e, "3");
    int want[4] = {2, 2, 0, 0}; /* holder of each rank's replica, in ring order */
    for (int r = 0; r < 4; r++)
        for (int h = 0; h < 4; h++) {
            int n = replicas_on(e, h, r);
            print_message("rank %d (domain %s): %d replica object(s) on node %d (domain %s)\n", r,
                          dom[r], n, h, dom[h]);
            if (h == want[r] && n == 0)
                fail_msg("no replica of rank %d on node %d", r, h);
            if (!strcmp(dom[h], dom[r]) && n != 0) /* never in the rank's own domain */
                fail_msg("%d replica object(s) of rank %d on node %d, both of domain %s", n, r,
                         h, dom[r]);
        }
    lose_and_replace(e, (int[]){0, 1}, 2);
    restore_rank(e, 0, "RESTORED 2 OK");
    restore_rank(e, 1, "RESTORED 2 OK");
    teardown_env(e);
}

/* A libftc context in this process: rank `rank` of `world` on node `node`,
 * timeout_ms 30 s, tensor "w" of n floats on the host. */
static ftc_ctx_t *open_ctx(env_t *e, int node, int rank, int world, float *w, int n)
{
    ftc_ctx_t *c = create_ctx(e, node, rank, world, 30000);
    register_w(c, w, n);
    return c;
}

/* The version directories v<STEP> of node's persist directory, as a bitmask
 * of steps 0..63. */
static uint64_t persisted_steps(env_t *e, int node)
{
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/node%d", e->persist, node);
    uint64_t mask = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        if (de->d_name[0] != 'v')
            continue;
        long long s = strtoll(de->d_name + 1, &end, 10);
        if (*end == 0 && s >= 0 && s < 64)
            mask |= 1ull << s;
    }
    closedir(d);
    return mask;
}

/* --persist-every 3: the agent persists at its 3rd, 6th, 9th... commit. One
 * rank, k = 0, every step committed (ftc_wait_committed) before the next, and
 * the writer idle again (the version's COMMITTED marker) before the next due
 * one, so the versions are exactly steps 2, 5 and 8 — no other step, and none
 * taken late by a busy writer. */
static void test_persist_every_third_commit(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 3);
    static float w[4096];
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    for (int64_t s = 0; s < 10; s++) {
        for (int i = 0; i < 4096; i++)
            w[i] = (float)(s * 4096 + i);
        assert_int_equal(ftc_checkpoint(c, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c), 0);
        if (ftc_wait_committed(c, s))
            fail_msg("step %lld: %s", (long long)s, ftc_last_error(c));
        if (s % 3 == 2)
            wait_persisted(e, 0, (int)s);
    }
    ftc_destroy(c);
    uint64_t m = persisted_steps(e, 0);
    print_message("persisted steps mask 0x%llx\n", (unsigned long long)m);
    assert_true(m == ((1ull << 2) | (1ull << 5) | (1ull << 8)));
    teardown_env(e);
}

/* The persist tier lags the commits (--persist-every 2: steps 1, 3, 5). A
 * fetch of committed step 2 or 4 that only the persist tier can answer (one
 * node, k = 0, its agent killed and its memory gone) gets the newest older
 * persisted step, 1 or 3: never step 5, a later state than the one asked
 * for (the agent used to fall back to the newest version). */
static void test_persist_fetch_never_newer(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 2);
    static float w[4096];
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    for (int64_t s = 0; s < 6; s++) {
        for (int i = 0; i < 4096; i++)
            w[i] = (float)(s * 4096 + i);
        assert_int_equal(ftc_checkpoint(c, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c), 0);
        if (ftc_wait_committed(c, s))
            fail_msg("step %lld: %s", (long long)s, ftc_last_error(c));
        if (s % 2 == 1)
            wait_persisted(e, 0, (int)s);
    }
    ftc_destroy(c);
    assert_true(persisted_steps(e, 0) == ((1ull << 1) | (1ull << 3) | (1ull << 5)));
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
    c = open_ctx(e, 0, 0, 1, w, 4096);
    const int64_t ask[] = {2, 4, 5}, got_want[] = {1, 3, 5};
    for (int k = 0; k < 3; k++) {
        ftc_shard_ref_t *ref = NULL;
        if (ftc_fetch(c, 0, ask[k], &ref))
            fail_msg("fetch of step %lld: %s", (long long)ask[k], ftc_last_error(c));
        int64_t got = ftc_shard_step(ref);
        const void *data = NULL;
        int dtype = 0;
        uint64_t numel = 0;
        assert_int_equal(ftc_shard_tensor(ref, "w", &data, &dtype, &numel), 0);
        print_message("fetch of step %lld: step %lld, w[7] = %g\n", (long long)ask[k],
                      (long long)got, (double)((const float *)data)[7]);
        assert_int_equal(got, got_want[k]);
        assert_true(((const float *)data)[7] == (float)(got * 4096 + 7));
        ftc_shard_release(ref);
    }
    ftc_destroy(c);
    teardown_env(e);
}

/* ftc_fetch_at_most(max_step) of rank 0's shard: the step it got (its w[7]
 * must be that step's), or the error code (the message printed). */
static int64_t fetch_at_most(ftc_ctx_t *c, int64_t max_step)
{
    ftc_shard_ref_t *ref = NULL;
    int rc = ftc_fetch_at_most(c, 0, max_step, &ref);
    if (rc) {
        assert_null(ref);
        print_message("at most %lld: %s: %s\n", (long long)max_step, ftc_errname(rc),
                      ftc_last_error(c));
        return rc;
    }
    int64_t got = ftc_shard_step(ref);
    const void *data = NULL;
    int dtype = 0;
    uint64_t numel = 0;
    assert_int_equal(ftc_shard_tensor(ref, "w", &data, &dtype, &numel), 0);
    print_message("at most %lld: step %lld, w[7] = %g\n", (long long)max_step, (long long)got,
                  (double)((const float *)data)[7]);
    assert_true(got >= 0 && (max_step < 0 || got <= max_step));
    assert_true(((const float *)data)[7] == (float)(got * 4096 + 7));
    ftc_shard_release(ref);
    return got;
}

/* Whether node i's agent log has what (quiet: agent_said prints the log
 * when it has not). */
static bool agent_log_has(env_t *e, int i, const char *what)
{
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/agent%d.log", e->jobdir, i);
    uint8_t *buf;
    size_t len;
    ftc_err_t err = {0};
    if (ftc_fs_read_file(log, 1 << 24, &buf, &len, &err))
        return false;
    bool y = strstr((char *)buf, what) != NULL;
    free(buf);
    return y;
}

/* ftc_fetch_at_most: steps 1, 3, 4, 6, 7 committed (0, 2 and 5 never
 * checkpointed, as the checkpoint.busy=skip policy leaves them), one node,
 * k = 0, --persist-every 2 (steps 1, 3, 7 persisted), the slots holding 6
 * and 7 (the third is used only when two versions are in flight). At most 6
 * is 6 (the slots); at most 5 is 3: the never committed 5 is not looked
 * for, the lost 4 is, then the persisted 3, in one request; at most 2 is
 * 1; beyond the committed step, the committed 7; below the oldest
 * committed step, FTC_ENOENT naming it. With the node's memory gone, at
 * most 6 walks over the lost 6 and 4 to the persisted 3; with the persisted
 * 1 and 3 gone too, FTC_ENOENT naming the committed steps tried. */
static void test_fetch_at_most(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 2);
    static float w[4096];
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    const int64_t steps[] = {1, 3, 4, 6, 7};
    for (int k = 0; k < 5; k++) {
        int64_t s = steps[k];
        for (int i = 0; i < 4096; i++)
            w[i] = (float)(s * 4096 + i);
        assert_int_equal(ftc_checkpoint(c, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c), 0);
        if (ftc_wait_committed(c, s))
            fail_msg("step %lld: %s", (long long)s, ftc_last_error(c));
        if (s % 2 == 1)
            wait_persisted(e, 0, (int)s);
    }
    assert_true(persisted_steps(e, 0) == ((1ull << 1) | (1ull << 3) | (1ull << 7)));
    assert_int_equal(fetch_at_most(c, 6), 6);
    assert_int_equal(fetch_at_most(c, 5), 3);
    assert_true(agent_log_has(e, 0, "rank 0's step 4 failed")); /* looked for, lost */
    assert_false(agent_log_has(e, 0, "rank 0's step 5")); /* never committed: never looked for */
    assert_int_equal(fetch_at_most(c, 2), 1);
    assert_int_equal(fetch_at_most(c, 100), 7);
    assert_int_equal(fetch_at_most(c, -1), 7);
    assert_int_equal(fetch_at_most(c, 0), FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(c), "no committed step at or before step 0"));
    assert_non_null(strstr(ftc_last_error(c), "the oldest committed step known is 1"));
    /* misuse: a clear FTC_EINVAL, *out NULL */
    ftc_shard_ref_t *ref = (ftc_shard_ref_t *)1;
    assert_int_equal(ftc_fetch_at_most(c, -2, 3, &ref), FTC_EINVAL);
    assert_null(ref);
    assert_non_null(strstr(ftc_last_error(c), "ftc_fetch_at_most: rank -2"));
    assert_int_equal(ftc_fetch_at_most(c, 0, 3, NULL), FTC_EINVAL);
    assert_int_equal(ftc_fetch_at_most(NULL, 0, 3, &ref), FTC_EINVAL);
    ftc_destroy(c);
    /* the node's memory gone: only the persist tier (1, 3, 7) is left */
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
    c = open_ctx(e, 0, 0, 1, w, 4096);
    assert_int_equal(fetch_at_most(c, 6), 3);
    assert_int_equal(fetch_at_most(c, 7), 7);
    assert_int_equal(fetch_at_most(c, 0), FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(c), "the oldest committed step known is 1"));
    /* and the persisted 1 and 3 gone too: no copy of any committed step at
     * or before 6, each one tried named (never the uncommitted 5, 2) */
    for (int v = 1; v <= 3; v += 2) {
        char dir[PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/node0/v%020d", e->persist, v);
        ftc_test_rmrf(dir);
    }
    assert_int_equal(fetch_at_most(c, 6), FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(c), "no verified copy of rank 0's shard of any "
                                              "committed step at or before step 6 (tried 6, 4, "
                                              "3, 1, newest first)"));
    ftc_destroy(c);
    assert_true(agent_said(e, 0, "fetched rank 0's shard of step 3"));
    teardown_env(e);
}


/* ftc_fetch_at_most while Redis does not answer (SIGSTOP), the node's
 * memory lost: one node, k = 0, every commit persisted, steps 1..4
 * committed, the persisted 4 removed. The candidates are the committed 4
 * (lost) and the persisted 3, 2, 1; each is looked for at the peers first
 * (three rounds) before the persist tier, and every round refreshed the
 * peer table from Redis (HGETALL: a command timeout, 2 s, each), beside the
 * search's own refresh: some 12 s of Redis timeouts for steps 4 and 3,
 * past the rank's timeout (10 s), so the rank got FTC_ETIMEDOUT. Once a
 * Redis call of the request failed, Redis is not asked again for it: the
 * rounds use the peer addresses already known and the answer (step 3, from
 * the persist tier) comes within the rank's timeout. */
static void test_fetch_at_most_redis_down(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1);
    static float w[4096];
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    for (int64_t s = 1; s <= 4; s++) {
        for (int i = 0; i < 4096; i++)
            w[i] = (float)(s * 4096 + i);
        assert_int_equal(ftc_checkpoint(c, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c), 0);
        if (ftc_wait_committed(c, s))
            fail_msg("step %lld: %s", (long long)s, ftc_last_error(c));
        wait_persisted(e, 0, (int)s);
    }
    ftc_destroy(c);
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    char dir[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/node0/v%020d", e->persist, 4);
    ftc_test_rmrf(dir);
    start_agent(e, 0);
    c = create_ctx(e, 0, 0, 1, 10000);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGSTOP), 0);
    int64_t got = fetch_at_most(c, 4);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGCONT), 0);
    assert_int_equal(got, 3);
    assert_true(agent_said(e, 0, "at the addresses already known (Redis does not answer)"));
    ftc_destroy(c);
    teardown_env(e);
}

/* ftc_fetch of rank src's shard of step: 0 and the step it got (its w[7]
 * must be that rank's and step's: src x 1e6 + step x 4096 + 7), or the
 * error code (the message printed). */
static int fetch_of(ftc_ctx_t *c, int src, int64_t step, int64_t *got)
{
    ftc_shard_ref_t *ref = NULL;
    int rc = ftc_fetch(c, src, step, &ref);
    if (rc) {
        assert_null(ref);
        print_message("fetch of rank %d step %lld: %s: %s\n", src, (long long)step,
                      ftc_errname(rc), ftc_last_error(c));
        return rc;
    }
    *got = ftc_shard_step(ref);
    const void *data = NULL;
    int dtype = 0;
    uint64_t numel = 0;
    assert_int_equal(ftc_shard_tensor(ref, "w", &data, &dtype, &numel), 0);
    print_message("fetch of rank %d step %lld: step %lld, w[7] = %g\n", src, (long long)step,
                  (long long)*got, (double)((const float *)data)[7]);
    assert_true(((const float *)data)[7] == (float)(src * 1000000 + *got * 4096 + 7));
    ftc_shard_release(ref);
    return 0;
}

/* The values of rank r's tensor at step s. */
static void fill(float *w, int r, int64_t s)
{
    for (int i = 0; i < 4096; i++)
        w[i] = (float)(r * 1000000 + s * 4096 + i);
}

/* Rank r (c over w) checkpoints step, and its snapshot is taken. */
static void seal_step(ftc_ctx_t *c, float *w, int r, int64_t step)
{
    fill(w, r, step);
    assert_int_equal(ftc_checkpoint(c, step, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
}

/* Rank r (c over w) checkpoints step, and it commits. */
static void commit_step(ftc_ctx_t *c, float *w, int r, int64_t step)
{
    seal_step(c, w, r, step);
    if (ftc_wait_committed(c, step))
        fail_msg("step %lld: %s", (long long)step, ftc_last_error(c));
}

/* Ranks 0 to n-1 (c[r] over w[r]) checkpoint step, and it commits for all. */
static void all_commit(ftc_ctx_t *const *c, float (*w)[4096], int n, int64_t step)
{
    for (int r = 0; r < n; r++)
        seal_step(c[r], w[r], r, step);
    for (int r = 0; r < n; r++)
        if (ftc_wait_committed(c[r], step))
            fail_msg("step %lld: %s", (long long)step, ftc_last_error(c[r]));
}

/* I1 for ftc_fetch of an older step: two nodes, k = 0, every commit
 * persisted; steps 1, 2 and 4 committed, step 3 checkpointed by rank 0 only
 * (rank 1 skipped it: it never commits) and verified in node 0's slot. When
 * step 4 committed, node 0 took its reported step 3 for committed too
 * (persisted it as committed, told the rank COMMITTED); it is freed now. The
 * FETCH of step 3 took that slot (its checksums pass) without asking
 * whether step 3 was ever committed: only the newest committed step was
 * checked against the commit record. It is refused now, FTC_ENOENT naming
 * the newest committed step before it, from node 0 and from node 1, and
 * again once node 0's memory is lost; ftc_fetch_at_most(3) is 2. Committed
 * step 2 still fetches from node 0's slots, from node 1 (rank 0's shard is
 * on node 0) and, after the loss, from the persist tier; rank 1's step 2
 * from node 1's slots. */
static void test_fetch_never_committed(void **state)
{
    env_t *e = setup_env(*state, 2, "0", 1);
    static float w0[4096], w1[4096];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    ftc_ctx_t *c1 = open_ctx(e, 1, 1, 2, w1, 4096);
    for (int64_t s = 1; s <= 4; s++) {
        fill(w0, 0, s);
        fill(w1, 1, s);
        assert_int_equal(ftc_checkpoint(c0, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c0), 0);
        if (s == 3)
            continue; /* rank 1 skips it */
        assert_int_equal(ftc_checkpoint(c1, s, NULL, 0), 0);
        if (ftc_wait_committed(c0, s) || ftc_wait_committed(c1, s))
            fail_msg("step %lld: %s / %s", (long long)s, ftc_last_error(c0),
                     ftc_last_error(c1));
    }
    /* step 3 was not taken for committed when step 4 committed: not
     * persisted as such (it was, and ftc_fetch_at_most(3) returned it) */
    wait_persisted(e, 0, 4);
    assert_true(agent_said(e, 0, "rank 0: step 3 was never committed (the job committed step 4 "
                                 "without it"));
    assert_true((persisted_steps(e, 0) & (1ull << 3)) == 0);
    int64_t got = -1;
    /* step 3 is in node 0's slot, verified, never committed */
    for (int k = 0; k < 2; k++) {
        ftc_ctx_t *c = k ? c1 : c0;
        assert_int_equal(fetch_of(c, 0, 3, &got), FTC_ENOENT);
        assert_non_null(strstr(ftc_last_error(c), "step 3 of job"));
        assert_non_null(strstr(ftc_last_error(c), "was never committed"));
        assert_non_null(strstr(ftc_last_error(c), "the newest committed step before it is 2"));
        /* committed step 2: node 0's slot, or from node 1 */
        assert_int_equal(fetch_of(c, 0, 2, &got), 0);
        assert_int_equal(got, 2);
    }
    assert_int_equal(fetch_of(c1, 1, 2, &got), 0);
    assert_int_equal(got, 2);
    assert_int_equal(fetch_at_most(c0, 3), 2);
    assert_true(agent_said(e, 0, "rank 0 fetched rank 0's shard of step 2"));
    assert_true(agent_said(e, 1, "rank 1 fetched rank 0's shard of step 2"));
    /* node 0's memory lost: the persist tier has step 2 */
    ftc_destroy(c0);
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
    c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    assert_int_equal(fetch_of(c0, 0, 3, &got), FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(c0), "was never committed"));
    assert_int_equal(fetch_of(c0, 0, 2, &got), 0);
    assert_int_equal(got, 2);
    assert_true(agent_said(e, 0, "rank 0 fetched rank 0's shard of step 2"));
    assert_true(agent_said(e, 0, "from the persist tier"));
    assert_int_equal(fetch_of(c0, 1, 2, &got), 0); /* rank 1's, from node 1 */
    assert_int_equal(got, 2);
    assert_int_equal(fetch_of(c1, 0, 1, &got), 0);
    assert_int_equal(got, 1);
    assert_int_equal(fetch_of(c1, 0, 3, &got), FTC_ENOENT);
    ftc_destroy(c0);
    ftc_destroy(c1);
    teardown_env(e);
}

typedef struct {
    ftc_ctx_t *c;
    int64_t step;
    int rc;
    atomic_int done;
} bg_ckpt_t;

static void *bg_checkpoint(void *arg)
{
    bg_ckpt_t *b = arg;
    b->rc = ftc_checkpoint(b->c, b->step, NULL, 0);
    atomic_store(&b->done, 1);
    return NULL;
}

/* The first entry of the job's event stream of kind `kind`: its step, or -1
 * when there is none. */
static int64_t stream_event_step(env_t *e, const char *kind, int rank)
{
    int64_t step = -1;
    ftc_redis_reply_t *rep = redis_fixture_events(e->f, e->job);
    for (size_t i = 0; i < rep->elements && step < 0; i++) {
        const char *k = redis_fixture_event_field(rep, i, "kind");
        const char *s = redis_fixture_event_field(rep, i, "step");
        const char *r = redis_fixture_event_field(rep, i, "rank");
        if (k && s && !strcmp(k, kind) && (!r || atoi(r) == rank))
            step = strtoll(s, NULL, 10);
    }
    ftc_redis_reply_free(rep);
    return step;
}

/* checkpoint.busy wait (the default): rank 0 of a world of 2 checkpoints
 * steps 0, 1, 2 while rank 1 checkpoints nothing, so nothing commits and
 * its three slots fill (test_three_slots_before_skip); step 3 then has no
 * free slot and ftc_checkpoint waits — it neither returns FTC_EAGAIN (skip)
 * nor fails — and the agent records a checkpoint_waiting event for it. Rank
 * 1 then checkpoints steps 0..2: step 1's commit supersedes step 0's slot,
 * the parked checkpoint of step 3 gets it and returns 0, and step 3 commits
 * for both. */
static void test_busy_wait_policy(void **state)
{
    setenv("FTC_CHECKPOINT_BUSY", "wait", 1); /* the default, said explicitly */
    env_t *e = setup_env(*state, 2, "1", 1000);
    unsetenv("FTC_CHECKPOINT_BUSY");
    static float w0[4096], w1[4096];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    for (int64_t s = 0; s < 3; s++) {
        assert_int_equal(ftc_checkpoint(c0, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c0), 0);
    }
    bg_ckpt_t b = {.c = c0, .step = 3, .rc = 1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, bg_checkpoint, &b), 0);
    /* the agent reports the parked checkpoint; meanwhile it has not returned */
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (stream_event_step(e, "checkpoint_waiting", 0) != 3) {
        if (ftc_deadline_expired(d))
            fail_msg("no checkpoint_waiting event for rank 0 step 3");
        ftc_sleep_ms(50);
    }
    assert_int_equal(atomic_load(&b.done), 0);
    ftc_ctx_t *c1 = open_ctx(e, 1, 1, 2, w1, 4096);
    for (int64_t s = 0; s < 3; s++) {
        assert_int_equal(ftc_checkpoint(c1, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c1), 0);
    }
    pthread_join(tid, NULL);
    print_message("parked checkpoint of step 3 returned %s (%s)\n", ftc_errname(b.rc),
                  b.rc ? ftc_last_error(c0) : "");
    assert_int_equal(b.rc, 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    assert_int_equal(ftc_checkpoint(c1, 3, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c1), 0);
    assert_int_equal(ftc_wait_committed(c0, 3), 0);
    assert_int_equal(ftc_wait_committed(c1, 3), 0);
    assert_int_equal(stream_event_step(e, "checkpoint_skipped", 0), -1);
    ftc_destroy(c0);
    ftc_destroy(c1);
    teardown_env(e);
}

/* checkpoint.inflight 1: a checkpoint waits for the previous version's
 * commit. World 2, rank 0 checkpoints step 0 (it cannot commit: rank 1 has
 * not checkpointed), then step 1, which parks (checkpoint_waiting) although
 * two slots are free; rank 1's step 0 commits step 0 and releases it. */
static void test_inflight_one(void **state)
{
    setenv("FTC_CHECKPOINT_INFLIGHT", "1", 1); /* inherited by the agents */
    env_t *e = setup_env(*state, 2, "1", 1000);
    unsetenv("FTC_CHECKPOINT_INFLIGHT");
    static float w0[4096], w1[4096];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    assert_int_equal(ftc_checkpoint(c0, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    bg_ckpt_t b = {.c = c0, .step = 1, .rc = 1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, bg_checkpoint, &b), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (stream_event_step(e, "checkpoint_waiting", 0) != 1) {
        if (ftc_deadline_expired(d))
            fail_msg("no checkpoint_waiting event for rank 0 step 1");
        ftc_sleep_ms(50);
    }
    assert_int_equal(atomic_load(&b.done), 0);
    ftc_ctx_t *c1 = open_ctx(e, 1, 1, 2, w1, 4096);
    assert_int_equal(ftc_checkpoint(c1, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c1), 0);
    assert_int_equal(ftc_wait_committed(c1, 0), 0);
    pthread_join(tid, NULL);
    assert_int_equal(b.rc, 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    assert_int_equal(ftc_checkpoint(c1, 1, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c1), 0);
    assert_int_equal(ftc_wait_committed(c0, 1), 0);
    assert_int_equal(stream_event_step(e, "checkpoint_skipped", 0), -1);
    /* more versions, each committed before the next: two slots take turns,
     * the third's memory is never reserved (a sized, empty tmpfs file) */
    for (int64_t st = 2; st < 6; st++) {
        assert_int_equal(ftc_checkpoint(c0, st, NULL, 0), 0);
        assert_int_equal(ftc_checkpoint(c1, st, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c0), 0);
        assert_int_equal(ftc_wait_snapshot(c1), 0);
        assert_int_equal(ftc_wait_committed(c0, st), 0);
    }
    for (int idx = 0; idx < 3; idx++) {
        char path[PATH_MAX];
        struct stat sb;
        snprintf(path, sizeof path, "/dev/shm/ftc.%s.n0.r0.s%d", e->job, idx);
        assert_int_equal(stat(path, &sb), 0);
        print_message("%s: %lld bytes, %lld allocated\n", path, (long long)sb.st_size,
                      (long long)sb.st_blocks * 512);
        if (idx == 2)
            assert_true(sb.st_blocks == 0);
        else
            assert_true((long long)sb.st_blocks * 512 >= (long long)sb.st_size);
    }
    ftc_destroy(c0);
    ftc_destroy(c1);
    teardown_env(e);
}

/* Bytes the file of rank 0's slot idx on node 0 holds (st_blocks), and its size. */
static uint64_t slot_held(env_t *e, int idx, uint64_t *size)
{
    char path[PATH_MAX];
    struct stat sb;
    snprintf(path, sizeof path, "/dev/shm/ftc.%s.n0.r0.s%d", e->job, idx);
    assert_int_equal(stat(path, &sb), 0);
    *size = (uint64_t)sb.st_size;
    return (uint64_t)sb.st_blocks * 512;
}

/* The third slot (unreserved at a start) is reserved in the background once
 * replication falls behind a step, before the checkpoint that first needs
 * it: world 2 and only rank 0 checkpoints, so none of its versions commits.
 * Step 1's BEGIN finds step 0 sealed; the third slot's pages then arrive
 * without any request of the rank, and step 2 (slots 0 and 1 sealed) lands
 * there. held: FTC_TEST_SLOT_RESERVE_DELAY_MS holds the agent's thread, and
 * step 2's BEGIN reserves the slot itself (never written unreserved). */
static void third_slot_ahead(void **state, bool held)
{
    if (held)
        setenv("FTC_TEST_SLOT_RESERVE_DELAY_MS", "600000", 1); /* inherited by the agents */
    env_t *e = setup_env(*state, 2, "1", 1000);
    unsetenv("FTC_TEST_SLOT_RESERVE_DELAY_MS");
    static float w0[1 << 18];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 2, w0, 1 << 18);
    uint64_t size = 0;
    assert_int_equal(ftc_checkpoint(c0, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    assert_int_equal(slot_held(e, 2, &size), 0); /* commits in time: never reserved */
    assert_int_equal(ftc_checkpoint(c0, 1, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(held ? 300 : 20000);
    while (slot_held(e, 2, &size) < size && !ftc_deadline_expired(d))
        ftc_sleep_ms(20);
    print_message("before step 2's BEGIN the third slot holds %llu of %llu bytes\n",
                  (unsigned long long)slot_held(e, 2, &size), (unsigned long long)size);
    if (held)
        assert_true(slot_held(e, 2, &size) < size);
    else
        assert_true(slot_held(e, 2, &size) >= size);
    assert_int_equal(ftc_checkpoint(c0, 2, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    assert_true(slot_held(e, 2, &size) >= size);
    ftc_destroy(c0);
    teardown_env(e);
}

static void test_third_slot_reserved_ahead(void **state)
{
    third_slot_ahead(state, false);
}

static void test_third_slot_reserved_ahead_held(void **state)
{
    third_slot_ahead(state, true);
}

/* A BEGIN parked by checkpoint.inflight 1 behind a version whose parity
 * then fails is answered at the failure, not left for the client's
 * timeout: xor:2 on 3 nodes, only rank 0 of 3 checkpoints, so its encode
 * of step 0 waits for the other members' shards until the agent timeout
 * (8 s here) and fails; the parked checkpoint of step 1 then returns 0. */
static void test_inflight_one_parity_failure(void **state)
{
    setenv("FTC_CHECKPOINT_INFLIGHT", "1", 1);
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    unsetenv("FTC_CHECKPOINT_INFLIGHT");
    static float w0[4096];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 3, w0, 4096);
    assert_int_equal(ftc_checkpoint(c0, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_checkpoint(c0, 1, NULL, 0); /* parked until step 0's parity fails */
    print_message("checkpoint of step 1 returned %s after %.1f s (%s)\n", ftc_errname(rc),
                  (double)(ftc_now_ns() - t0) / 1e9, rc ? ftc_last_error(c0) : "");
    assert_int_equal(rc, 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    assert_true(agent_said(e, 0, "parity not stored"));
    ftc_destroy(c0);
    teardown_env(e);
}

/* A libftc context of rank `rank` on node `node`'s agent that registers
 * nothing (it only fetches). */
static ftc_ctx_t *open_fetch_ctx(env_t *e, int node, int rank, int world)
{
    return create_ctx(e, node, rank, world, 30000);
}

typedef struct {
    ftc_ctx_t *c;
    int src;
    int64_t step;
    int rc;
    int64_t got;
    float w7;
    char err[512];
    atomic_int done;
} bg_fetch_t;

static void *bg_fetch(void *arg)
{
    bg_fetch_t *b = arg;
    ftc_shard_ref_t *ref = NULL;
    b->rc = ftc_fetch(b->c, b->src, b->step, &ref);
    if (b->rc) {
        snprintf(b->err, sizeof b->err, "%s", ftc_last_error(b->c));
    } else {
        const void *data = NULL;
        int dtype = 0;
        uint64_t numel = 0;
        b->got = ftc_shard_step(ref);
        if (ftc_shard_tensor(ref, "w", &data, &dtype, &numel) == 0 && numel > 7)
            b->w7 = ((const float *)data)[7];
        ftc_shard_release(ref);
    }
    atomic_store(&b->done, 1);
    return NULL;
}

/* Two fetches of the same shard at once on one node: ranks 0 and 2 on node
 * 0 both ftc_fetch rank 1's step 1, which node 0 does not hold (k = 1: node
 * 2 holds rank 1's replica, node 1 its slots), so both ask the peers in
 * ring order, node 1 first. Node 1's agent is stopped (SIGSTOP) meanwhile,
 * so the first fetch stays in flight: the replication engine runs one fetch
 * per holder and owner, and the second one's start was answered
 * FTC_EINPROGRESS, which failed its round at once (three rounds, then the
 * persist tier, which has nothing: FTC_ENOENT) although the shard was one
 * fetch away. The busy holder is now asked again until agent.timeout_ms;
 * once node 1 runs again, both fetches get step 1, with rank 1's values. */
static void test_fetch_same_shard_twice(void **state)
{
    env_t *e = setup_env(*state, 3, "1", 1000);
    static float w[3][4096];
    ftc_ctx_t *c[3];
    for (int r = 0; r < 3; r++)
        c[r] = open_ctx(e, r, r, 3, w[r], 4096);
    for (int64_t s = 0; s < 2; s++)
        all_commit(c, w, 3, s);
    ftc_destroy(c[0]);
    ftc_destroy(c[2]);
    bg_fetch_t b[2] = {{.c = open_fetch_ctx(e, 0, 0, 3), .src = 1, .step = 1, .rc = 1},
                       {.c = open_fetch_ctx(e, 0, 2, 3), .src = 1, .step = 1, .rc = 1}};
    assert_int_equal(kill(e->agent[1], SIGSTOP), 0);
    pthread_t tid[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&tid[k], NULL, bg_fetch, &b[k]), 0);
    /* until the second fetch found node 1 busy (or, before, failed) */
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (!agent_log_has(e, 0, "is busy fetching rank 1's shard") && !atomic_load(&b[0].done) &&
           !atomic_load(&b[1].done)) {
        if (ftc_deadline_expired(d)) {
            kill(e->agent[1], SIGCONT);
            fail_msg("neither fetch found node 1 busy");
        }
        ftc_sleep_ms(10);
    }
    assert_int_equal(kill(e->agent[1], SIGCONT), 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(tid[k], NULL);
        print_message("fetch %d: %s, step %lld, w[7] = %g %s\n", k, ftc_errname(b[k].rc),
                      (long long)b[k].got, (double)b[k].w7, b[k].err);
        ftc_destroy(b[k].c);
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(b[k].rc, 0);
        assert_int_equal(b[k].got, 1);
        assert_true(b[k].w7 == (float)(1 * 1000000 + 1 * 4096 + 7));
    }
    ftc_destroy(c[1]);
    teardown_env(e);
}

/* Each fetch job's result goes to the request that queued it. Ranks 0 and
 * 2 on node 0 (rank 0 connected first) fetch rank 1's step 1, rank 0 first;
 * its holders in ring order are node 1 (its slots), stopped (SIGSTOP) all
 * along, then node 2 (its replica), agent.timeout_ms 2000. Rank 0's job
 * waits for node 1 until its deadline, then gets node 2's replica; rank 2's
 * finds node 1 busy with rank 0's, then waits for it in turn, then node 2:
 * it ends one deadline later. A result went to the last rank found
 * fetching the same shard, so rank 0's job answered rank 2 and rank 0 was
 * answered only by rank 2's job, a deadline later. Now rank 0 is answered
 * first, each by its own job, both with rank 1's step 1. */
static void test_fetch_result_to_its_request(void **state)
{
    env_t *e = prepare_env(*state, 3, "1", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "2000");
    for (int i = 0; i < 3; i++)
        start_agent(e, i);
    /* every agent knows the others first: rank 1's replica on its ring
     * successor, node 2 (not node 0, the next one known) */
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            char alive[64];
            snprintf(alive, sizeof alive, "node %d (node%d) is alive", j, j);
            while (i != j && !agent_log_has(e, i, alive)) {
                if (ftc_deadline_expired(d))
                    fail_msg("node %d never saw node %d alive", i, j);
                ftc_sleep_ms(20);
            }
        }
    static float w[3][4096];
    ftc_ctx_t *c[3];
    for (int r = 0; r < 3; r++)
        c[r] = open_ctx(e, r, r, 3, w[r], 4096);
    all_commit(c, w, 3, 1);
    ftc_destroy(c[0]);
    ftc_destroy(c[2]);
    bg_fetch_t b[2] = {{.c = open_fetch_ctx(e, 0, 0, 3), .src = 1, .step = 1, .rc = 1},
                       {.c = open_fetch_ctx(e, 0, 2, 3), .src = 1, .step = 1, .rc = 1}};
    assert_int_equal(kill(e->agent[1], SIGSTOP), 0);
    pthread_t tid[2];
    assert_int_equal(pthread_create(&tid[0], NULL, bg_fetch, &b[0]), 0);
    ftc_sleep_ms(300); /* rank 0's fetch first (not an assertion: the log says below) */
    assert_int_equal(pthread_create(&tid[1], NULL, bg_fetch, &b[1]), 0);
    int first = -1;
    d = ftc_deadline_in_ms(30000);
    while (first < 0 && !ftc_deadline_expired(d)) {
        for (int k = 0; k < 2 && first < 0; k++)
            if (atomic_load(&b[k].done))
                first = k;
        ftc_sleep_ms(5);
    }
    assert_int_equal(kill(e->agent[1], SIGCONT), 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(tid[k], NULL);
        print_message("fetch of rank %d: %s, step %lld, w[7] = %g %s\n", k ? 2 : 0,
                      ftc_errname(b[k].rc), (long long)b[k].got, (double)b[k].w7, b[k].err);
        ftc_destroy(b[k].c);
    }
    print_message("answered first: rank %d's fetch\n", first == 1 ? 2 : first);
    assert_true(agent_said(e, 0, "is busy fetching rank 1's shard")); /* rank 2's, behind 0's */
    assert_int_equal(first, 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(b[k].rc, 0);
        assert_int_equal(b[k].got, 1);
        assert_true(b[k].w7 == (float)(1 * 1000000 + 1 * 4096 + 7));
    }
    ftc_destroy(c[1]);
    teardown_env(e);
}

/* Makes node `node` look alive to the other agents (its heartbeat key, for
 * two minutes) with an address the replication engine cannot add (two
 * bytes, no socket address family): a holder that cannot be asked. */
static void unreachable_holder(env_t *e, int node)
{
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    char key[160], field[16], nid[16];
    snprintf(field, sizeof field, "%d", node);
    snprintf(nid, sizeof nid, "node%d", node);
    ftc_ctl_key(c, "fabric", key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "HGET", key, field, NULL), 0);
    assert_non_null(rep->str);
    const char *rest = strchr(rep->str, ' '); /* "hexaddr node_id domain gen" */
    assert_non_null(rest);
    char val[256];
    snprintf(val, sizeof val, "0000%s", rest);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET", key, field, val, NULL),
                     0);
    uint64_t gen = job_generation(c);
    ftc_ctl_heartbeat_t hb = {.generation = gen, .step = -1, .wall_ms = ftc_wall_ms()};
    assert_int_equal(ftc_ctl_heartbeat(c, nid, &hb, 120000), 0);
    ftc_ctl_destroy(c);
}

/* k = 2 on 3 nodes: rank 0's replicas are on nodes 1 and 2. Node 1's agent
 * is dead (SIGKILL) but still looks alive, and its address cannot be added
 * to the replication engine; node 0 loses its memory. The fetch of rank 0's
 * shard asks node 1 first (ring order), and that start failed: the round
 * ended there (three rounds, then the persist tier, which has nothing:
 * the restore failed) although node 2 holds the shard. Node 1 is now
 * passed over (logged, in the replica_refused event) and node 2's replica
 * restored. */
static void test_restore_first_holder_unreachable(void **state)
{
    env_t *e = setup_env(*state, 3, "2", 1000);
    run_all(e, "3");
    kill_agent(e, 1);
    unreachable_holder(e, 1);
    lose_and_replace(e, (int[]){0}, 1);
    restore_rank(e, 0, "RESTORED 2 OK");
    assert_true(agent_said(e, 0, "peer 1 not asked"));
    assert_true(agent_said(e, 0, "came from another holder after"));
    teardown_env(e);
}

/* A restarted agent finds its rank's three slots in /dev/shm: steps 4
 * (committed), 2 (committed, superseded) and 3, which rank 0 checkpointed
 * but rank 1 skipped, so the job committed 4 without it and the agent freed
 * its slot (the bytes stay). Every surviving step at or before the
 * committed one was taken for committed, 3 too; with the commit set in
 * Redis not readable (Redis stopped) ftc_fetch_at_most(3) then returned the
 * never committed step 3 from that slot (I1). A survivor older than the
 * committed step now counts only when the commit set has it (its record's
 * checksum this version's) or a persist tier holds it committed: at most 3
 * is step 2. */
/* A restarted agent that finds a committed version it had persisted
 * before it died (its rank's slot survives) must not report the persist
 * tier as failing: writing that step again is refused (FTC_EEXIST, it is
 * committed there and verifies), which is the step being durable, not a
 * persist_failed event. */
static void test_restart_persisted_step_not_failed(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1);
    static float w[4096];
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    for (int64_t s = 0; s < 2; s++) {
        commit_step(c, w, 0, s);
        wait_persisted(e, 0, (int)s);
    }
    ftc_destroy(c);
    kill_agent(e, 0);
    start_agent(e, 0);
    c = open_ctx(e, 0, 0, 1, w, 4096);
    int64_t got = -1;
    if (ftc_restore(c, &got, NULL, NULL))
        fail_msg("restore: %s", ftc_last_error(c));
    assert_int_equal(got, 1);
    commit_step(c, w, 0, 2);
    wait_persisted(e, 0, 2);
    ftc_destroy(c);
    kill_agent(e, 0); /* its log is complete */
    assert_false(agent_said(e, 0, "persisting step"));
    teardown_env(e);
}

static void test_restart_never_committed_slot(void **state)
{
    env_t *e = setup_env(*state, 2, "0", 1000);
    static float w0[4096], w1[4096];
    ftc_ctx_t *c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    ftc_ctx_t *c1 = open_ctx(e, 1, 1, 2, w1, 4096);
    for (int64_t s = 1; s <= 4; s++) {
        fill(w0, 0, s);
        fill(w1, 1, s);
        assert_int_equal(ftc_checkpoint(c0, s, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c0), 0);
        if (s == 3)
            continue; /* rank 1 skips it */
        assert_int_equal(ftc_checkpoint(c1, s, NULL, 0), 0);
        if (ftc_wait_committed(c0, s) || ftc_wait_committed(c1, s))
            fail_msg("step %lld: %s / %s", (long long)s, ftc_last_error(c0),
                     ftc_last_error(c1));
    }
    assert_true(agent_said(e, 0, "rank 0: step 3 was never committed"));
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.r0.", e->job);
    for (int64_t s = 2; s <= 4; s++) { /* the three slots: 4, 2 and the freed 3 */
        uint64_t size = 0;
        uint8_t *copy = copy_shm_shard(prefix, (uint64_t)s, &size);
        assert_non_null(copy);
        free(copy);
    }
    ftc_destroy(c0);
    kill_agent(e, 0);
    start_agent(e, 0);
    c0 = open_ctx(e, 0, 0, 2, w0, 4096);
    int64_t got = -1;
    if (ftc_restore(c0, &got, NULL, NULL))
        fail_msg("restore: %s", ftc_last_error(c0));
    assert_int_equal(got, 4);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGSTOP), 0);
    int64_t at_most = fetch_at_most(c0, 3);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGCONT), 0);
    assert_int_equal(at_most, 2);
    assert_true(agent_said(e, 0, "holds step 3 (head"));
    ftc_destroy(c0);
    ftc_destroy(c1);
    teardown_env(e);
}

/* Whether the job's event stream has an entry of kind for rank and step. */
static bool stream_has(env_t *e, const char *kind, int rank, int64_t step)
{
    bool found = false;
    ftc_redis_reply_t *rep = redis_fixture_events(e->f, e->job);
    for (size_t i = 0; i < rep->elements && !found; i++) {
        const char *k = redis_fixture_event_field(rep, i, "kind");
        const char *s = redis_fixture_event_field(rep, i, "step");
        const char *r = redis_fixture_event_field(rep, i, "rank");
        found = k && !strcmp(k, kind) && atoi(r ? r : "-1") == rank &&
                strtoll(s ? s : "-1", NULL, 10) == step;
    }
    ftc_redis_reply_free(rep);
    return found;
}

/* Rank `rank` of `world` on node's agent, timeout_ms 10 s, tensor "w" of n
 * floats on the stand-in device (fd_reset first) when dev, else on the host. */
static ftc_ctx_t *open_ctx_dev(env_t *e, int node, int rank, int world, float *w, int n,
                               bool dev)
{
    ftc_ctx_t *c = create_ctx(e, node, rank, world, 10000);
    if (dev)
        assert_int_equal(ftc__set_device_ops(c, fake_dev_ops()), 0);
    int64_t shape[1] = {n};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, shape, w, dev ? 0 : FTC_HOST), 0);
    return c;
}

/* Waits until c's SEALED of its last checkpoint was sent (in_flight -1). */
static void wait_sealed_sent(ftc_ctx_t *c)
{
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (ftc_ckpt_status(c, &st) == 0 && st.in_flight >= 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_int_equal(st.in_flight, -1);
}

/* The committed step of e's job. */
static int64_t committed_step(env_t *e)
{
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    int64_t cstep = -1;
    uint64_t cgen = 0;
    assert_int_equal(ftc_ctl_committed(ctl, &cstep, &cgen), 0);
    ftc_ctl_destroy(ctl);
    return cstep;
}

/* ftc_wait_committed of rank r's (c's) step, its answer logged. */
static int wait_committed_logged(ftc_ctx_t *c, int r, int64_t step)
{
    int rc = ftc_wait_committed(c, step);
    print_message("rank %d, step %lld: %s: %s\n", r, (long long)step, ftc_errname(rc),
                  ftc_last_error(c));
    return rc;
}

/* Rank 1 checkpoints step, its device sync failing: FTC_EIO from
 * ftc_wait_snapshot (its notifier has told the agent by then). */
static void failed_step(ftc_ctx_t *c1, float *w1, int64_t step)
{
    fill(w1, 1, step);
    fake_set(&FD.fail_sync_at, fake_get(&FD.syncs) + 1);
    assert_int_equal(ftc_checkpoint(c1, step, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c1), FTC_EIO);
    print_message("rank 1, step %lld: %s\n", (long long)step, ftc_last_error(c1));
}

/* Ranks 0 and 1 (c[r] over w[r], rank 1 on the stand-in device), step 1
 * committed: rank 1's snapshot of step 2 fails, then rank 0 seals step 2;
 * rank 0 seals step 3 (its SEALED sent), then rank 1's snapshot of it
 * fails. Rank 0's ftc_wait_committed of each ends FTC_EIO, step 2's naming
 * rank 1's failure. */
static void rank1_fails_steps_2_and_3(ftc_ctx_t *const *c, float (*w)[4096])
{
    /* step 2: rank 1 fails first, rank 0 seals after it */
    failed_step(c[1], w[1], 2);
    seal_step(c[0], w[0], 0, 2);
    assert_int_equal(wait_committed_logged(c[0], 0, 2), FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c[0]), "rank 1's snapshot of it failed"));
    /* step 3: rank 0 seals first (its SEALED sent), then rank 1 fails */
    seal_step(c[0], w[0], 0, 3);
    wait_sealed_sent(c[0]);
    failed_step(c[1], w[1], 3);
    assert_int_equal(wait_committed_logged(c[0], 0, 3), FTC_EIO);
}

/* The stream has checkpoint_failed (rank 1) and checkpoint_abandoned (rank
 * 0) for each step from..to. */
static void assert_failed_and_abandoned(env_t *e, int64_t from, int64_t to)
{
    for (int64_t s = from; s <= to; s++) {
        assert_true(stream_has(e, "checkpoint_failed", 1, s));
        assert_true(stream_has(e, "checkpoint_abandoned", 0, s));
    }
}

/* The two tests below: rank 0 on node 0, rank 1 (whose snapshots of
 * steps 2 and 3 fail) on node `nodes` - 1, agent.timeout_ms 60 s. */
static void failed_snapshot_of_rank1(void **state, int nodes)
{
    env_t *e = prepare_env(*state, nodes, "0", 1000, NULL);
    if (nodes == 1)
        e->ranks_per_node = 2;
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "60000");
    for (int i = 0; i < nodes; i++)
        start_agent(e, i);
    static float w[2][4096];
    fd_reset();
    ftc_ctx_t *c[2] = {open_ctx_dev(e, 0, 0, 2, w[0], 4096, false),
                       open_ctx_dev(e, nodes - 1, 1, 2, w[1], 4096, true)};
    all_commit(c, w, 2, 1);
    rank1_fails_steps_2_and_3(c, w);
    if (nodes > 1) /* step 3's FTC_EIO names rank 1's failure too */
        assert_non_null(strstr(ftc_last_error(c[0]), "rank 1's snapshot of it failed"));
    assert_failed_and_abandoned(e, 2, 3);
    /* I3: the committed step is still 1, and a later step commits for both */
    assert_int_equal(committed_step(e), 1);
    all_commit(c, w, 2, 4);
    ftc_destroy(c[0]);
    ftc_destroy(c[1]);
    fd_done();
    teardown_env(e);
}

/* One node, ranks 0 and 1 on it (--ranks-per-node 2), no replicas (each
 * sealed version is reported at once), agent.timeout_ms 60 s. Rank 1's
 * snapshot of step 2 fails (its device sync), then rank 0 checkpoints
 * step 2; for step 3 rank 0 seals first, then rank 1 fails. Each time the
 * step can never commit. Rank 0's copy waited in the agent, reported and
 * its slot taken, until a BEGIN of rank 0 had been parked for
 * agent.timeout_ms: ftc_wait_committed of it ended FTC_ETIMEDOUT (the
 * rank's own timeout_ms). libftc now tells the agent (ABORT), which
 * abandons the step at once: rank 0 is told NOT_COMMITTED (FTC_EIO naming
 * rank 1's failure), the stream says checkpoint_failed (rank 1) and
 * checkpoint_abandoned (rank 0), the committed step stays 1 (I3) and step
 * 4 commits for both. */
static void test_failed_snapshot_abandons_step(void **state)
{
    failed_snapshot_of_rank1(state, 1);
}

/* Two nodes, rank 0 on node 0 and rank 1 on node 1, no replicas (each
 * sealed version is reported at once), agent.timeout_ms 60 s, the ranks'
 * timeout_ms 10 s. Rank 1's snapshot of step 2 fails, then rank 0 seals
 * step 2; for step 3 rank 0 seals first, then rank 1 fails. Node 1's agent
 * abandoned the step at once (ABORT), but node 0's never heard of it: rank
 * 0's copy waited there for agent.timeout_ms, and its ftc_wait_committed
 * ended FTC_ETIMEDOUT (its own timeout). Node 1's agent now writes the abort
 * marker into the step's commit record; node 0's commit poll (or its commit
 * report, which the record then refuses) sees it and abandons rank 0's copy
 * at once: FTC_EIO naming rank 1's failure, checkpoint_abandoned (rank 0)
 * beside checkpoint_failed (rank 1), the committed step stays 1 (I3), and
 * step 4 commits for both. */
static void test_failed_snapshot_other_node(void **state)
{
    failed_snapshot_of_rank1(state, 2);
}

/* Parity xor:2 on three nodes (one group, node 0 the encoder of the stripe),
 * rank r on node r, agent.timeout_ms 60 s, the ranks' timeout_ms 10 s.
 * Ranks 0 and 2 seal step 2, then rank 1's snapshot of it fails. The
 * encoder's gather of rank 1's shard kept asking node 1 every 20 ms until
 * agent.timeout_ms, its slot pushed and never abandoned meanwhile: rank 0's
 * ftc_wait_committed ended FTC_ETIMEDOUT. Once node 0 knows the step
 * aborted (the commit record's marker), the gather ends at once and the
 * encode is abandoned: rank 0 and rank 2 both get FTC_EIO naming rank 1's
 * failure, the committed step stays 1, and step 3 commits for all three. */
static void test_failed_snapshot_stops_parity_gather(void **state)
{
    env_t *e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "60000");
    for (int i = 0; i < 3; i++)
        start_agent(e, i);
    static float w[3][4096];
    fd_reset();
    ftc_ctx_t *c[3];
    for (int r = 0; r < 3; r++)
        c[r] = open_ctx_dev(e, r, r, 3, w[r], 4096, r == 1);
    all_commit(c, w, 3, 1);
    for (int r = 0; r < 3; r += 2) {
        seal_step(c[r], w[r], r, 2);
        wait_sealed_sent(c[r]);
    }
    failed_step(c[1], w[1], 2);
    for (int r = 0; r < 3; r += 2) {
        assert_int_equal(wait_committed_logged(c[r], r, 2), FTC_EIO);
        assert_non_null(strstr(ftc_last_error(c[r]), "rank 1's snapshot of it failed"));
    }
    assert_int_equal(committed_step(e), 1); /* I3 */
    all_commit(c, w, 3, 3);
    for (int r = 0; r < 3; r++)
        ftc_destroy(c[r]);
    fd_done();
    teardown_env(e);
}

/* Redis stopped (SIGSTOP) under one node, one rank, k = 0, checkpoint.busy
 * skip, step 0 committed. Steps 1 and 2 are sealed (each reported to the
 * commit record at once), step 3 finds no free slot and is skipped (a
 * checkpoint_skipped event). Once one Redis call had failed the agent took
 * Redis for down, but the commit reports (each SEALED's, and the poll's
 * retries of every unreported version on each pass) and the event writes
 * still cost a command timeout (2 s) each, in which no rank was answered:
 * step 2's BEGIN waited past the rank's timeout (6 s), FTC_ETIMEDOUT. They
 * are now skipped while Redis is known down — the
 * event queued on the detector, the reports left to the commit poll — so
 * the skip comes within the rank's timeout; and nothing is lost: once Redis
 * answers, steps 1 and 2 commit and the event is in the stream. */
static void test_redis_down_reports_wait(void **state)
{
    setenv("FTC_CHECKPOINT_BUSY", "skip", 1); /* inherited by the agent */
    env_t *e = setup_env(*state, 1, "0", 1000);
    unsetenv("FTC_CHECKPOINT_BUSY");
    static float w[4096];
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 6000);
    register_w(c, w, 4096);
    commit_step(c, w, 0, 0);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGSTOP), 0);
    int rc[4] = {0};
    for (int64_t s = 1; s <= 3; s++) {
        fill(w, 0, s);
        rc[s] = ftc_checkpoint(c, s, NULL, 0);
        print_message("checkpoint of step %lld with Redis stopped: %s %s\n", (long long)s,
                      ftc_errname(rc[s]), rc[s] ? ftc_last_error(c) : "");
        if (rc[s] == 0)
            assert_int_equal(ftc_wait_snapshot(c), 0);
    }
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGCONT), 0);
    assert_int_equal(rc[1], 0);
    assert_int_equal(rc[2], 0);
    assert_int_equal(rc[3], FTC_EAGAIN); /* the skip policy's answer, not FTC_ETIMEDOUT */
    /* nothing lost: the reports skipped meanwhile are made once Redis answers */
    if (ftc_wait_committed(c, 2))
        fail_msg("step 2 after Redis answered again: %s", ftc_last_error(c));
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (!stream_has(e, "checkpoint_skipped", 0, 3)) {
        if (ftc_deadline_expired(d))
            fail_msg("no checkpoint_skipped event for step 3 once Redis answered");
        ftc_sleep_ms(50);
    }
    ftc_destroy(c);
    teardown_env(e);
}

/* One node, one rank on the stand-in device, agent.timeout_ms 60 s; step 0
 * committed, then Redis is stopped (SIGSTOP) and the rank's snapshots of
 * steps 1 to 10 fail (ABORT each): their abort markers cannot be written
 * then. The agent remembered the last 8 failed steps, the marker still to
 * be written a flag of each entry, so steps 1 and 2's entries were
 * overwritten by 9 and 10 and their markers never written. Once Redis
 * answers (SIGCONT), every one of the 10 commit records has its marker. */
static void test_abort_markers_redis_down(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "60000");
    start_agent(e, 0);
    static float w1[4096];
    fd_reset();
    ftc_ctx_t *c1 = open_ctx_dev(e, 0, 0, 1, w1, 4096, true);
    commit_step(c1, w1, 0, 0);
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    int64_t cstep = -1;
    uint64_t gen = 0;
    assert_int_equal(ftc_ctl_committed(ctl, &cstep, &gen), 0);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGSTOP), 0);
    enum { NFAIL = 10 };
    for (int64_t s = 1; s <= NFAIL; s++)
        failed_step(c1, w1, s);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGCONT), 0);
    for (int64_t s = 1; s <= NFAIL; s++) {
        char suffix[64], key[200];
        snprintf(suffix, sizeof suffix, "commit:%llu:%lld", (unsigned long long)gen,
                 (long long)s);
        ftc_ctl_key(ctl, suffix, key, sizeof key);
        ftc_deadline_t d = ftc_deadline_in_ms(20000);
        for (;;) {
            ftc_redis_reply_t *rep = NULL;
            assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(ctl), true, &rep, "HGET", key,
                                            "abort", NULL), 0);
            bool has = rep->type == REDIS_REPLY_STRING;
            ftc_redis_reply_free(rep);
            if (has)
                break;
            if (ftc_deadline_expired(d))
                fail_msg("step %lld: no abort marker in %s once Redis answered", (long long)s,
                         key);
            ftc_sleep_ms(50);
        }
    }
    ftc_ctl_destroy(ctl);
    ftc_destroy(c1);
    fd_done();
    teardown_env(e);
}

/* One node; step 0 committed, then the job's fabric hash (which the agent's
 * peer refresh reads with HGETALL every 500 ms) is replaced by a string.
 * Redis answers WRONGTYPE: an error reply, a data problem, not an outage,
 * yet it came back as FTC_EREDIS like a broken connection and the agent
 * took Redis for down (`Redis does not answer (HGETALL ...: WRONGTYPE`),
 * then skipping or throttling its Redis calls. Now the agent logs the
 * refusal naming the key and the reply, and does not take Redis for down;
 * step 1 commits. */
static void test_redis_error_reply_not_down(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    static float w[4096];
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 0);
    register_w(c, w, 4096);
    commit_step(c, w, 0, 0);
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    char key[200];
    ftc_ctl_key(ctl, "fabric", key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(ctl), true, NULL, "DEL", key, NULL), 0);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(ctl), true, NULL, "SET", key, "x", NULL), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (!agent_log_has(e, 0, "WRONGTYPE")) {
        if (ftc_deadline_expired(d))
            fail_msg("the agent's log never names the WRONGTYPE reply for %s", key);
        ftc_sleep_ms(50);
    }
    if (agent_log_has(e, 0, "Redis does not answer"))
        fail_msg("a WRONGTYPE reply for %s made the agent take Redis for down", key);
    commit_step(c, w, 0, 1);
    assert_false(agent_log_has(e, 0, "Redis does not answer"));
    ftc_ctl_destroy(ctl);
    ftc_destroy(c);
    teardown_env(e);
}

/* A stand-in for a Redis that has stopped answering, on the real one's port:
 * it accepts connections and answers a connection's setup (AUTH, PING), so
 * that clients send their commands, but never a command; it counts the
 * HGETs of a plan key (ftc:{J}:plan:GEN) it received. */
typedef struct {
    int lfd;
    atomic_int stop, plan_reads;
    pthread_t tid;
} mute_redis_t;

static void *mute_redis_run(void *arg)
{
    mute_redis_t *m = arg;
    struct pollfd pfd[64];
    int n = 1;
    pfd[0] = (struct pollfd){.fd = m->lfd, .events = POLLIN};
    static const char *const cmds[] = {"$4\r\nAUTH\r\n", "$4\r\nPING\r\n", "$4\r\nHGET\r\n"};
    while (!atomic_load(&m->stop)) {
        if (poll(pfd, (nfds_t)n, 50) <= 0)
            continue;
        if ((pfd[0].revents & POLLIN) && n < 64) {
            int fd = accept(m->lfd, NULL, NULL);
            if (fd >= 0)
                pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        for (int i = 1; i < n; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[16384];
            ssize_t got = read(pfd[i].fd, buf, sizeof buf - 1);
            if (got <= 0) {
                close(pfd[i].fd);
                pfd[i--] = pfd[--n];
                continue;
            }
            buf[got] = 0;
            /* the commands in the order they came (one read holds whole ones) */
            for (const char *p = buf;;) {
                const char *at = NULL;
                int which = -1;
                for (int k = 0; k < 3; k++) {
                    const char *q = strstr(p, cmds[k]);
                    if (q && (!at || q < at))
                        at = q, which = k;
                }
                if (!at)
                    break;
                p = at + strlen(cmds[which]);
                if (which == 0 && write(pfd[i].fd, "+OK\r\n", 5) != 5)
                    break;
                if (which == 1 && write(pfd[i].fd, "+PONG\r\n", 7) != 7)
                    break;
                if (which == 2 && strstr(p, ":plan:") && strstr(p, ":plan:") < p + 100)
                    atomic_fetch_add(&m->plan_reads, 1);
            }
        }
    }
    for (int i = 0; i < n; i++)
        close(pfd[i].fd);
    return NULL;
}

static void mute_redis_start(mute_redis_t *m, int port)
{
    memset(m, 0, sizeof *m);
    m->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(m->lfd >= 0);
    int one = 1;
    setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (bind(m->lfd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (ftc_deadline_expired(d))
            fail_msg("bind 127.0.0.1:%d: %s", port, strerror(errno));
        ftc_sleep_ms(50);
    }
    assert_int_equal(listen(m->lfd, 128), 0);
    assert_int_equal(pthread_create(&m->tid, NULL, mute_redis_run, m), 0);
}

static void mute_redis_stop(mute_redis_t *m)
{
    atomic_store(&m->stop, 1);
    pthread_join(m->tid, NULL); /* it closes the listener */
}

/* Redis gone under two nodes, k = 1, no plan published (agents started by
 * hand), step 0 committed; a stand-in that never answers a command takes its
 * port. Once each agent found Redis down (its peer refresh failed), both
 * ranks seal step 1, which is pushed. The push read the generation's plan
 * members (ftc__gen_members: an HGET of ftc:{J}:plan:GEN, asked again each
 * second without a plan) although Redis was known down: a command timeout
 * on the control loop, in which no rank is answered, per push; the
 * stand-in counted those HGETs. They are now not asked while Redis is known
 * down (the job's node count, as when the read fails): none is counted.
 * Redis then comes back (restarted, empty), and step 1 commits. */
static void test_redis_down_no_plan_read(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    static float w0[4096], w1[4096];
    ftc_ctx_t *c[2] = {open_ctx(e, 0, 0, 2, w0, 4096), open_ctx(e, 1, 1, 2, w1, 4096)};
    mute_redis_t mute;
    for (int64_t s = 0; s <= 1; s++) {
        if (s == 1) {
            assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGKILL), 0);
            mute_redis_start(&mute, ftc_redis_server_url(e->f->srv)->port);
            ftc_deadline_t d = ftc_deadline_in_ms(30000);
            while (!agent_said(e, 0, "Redis does not answer") ||
                   !agent_said(e, 1, "Redis does not answer")) {
                if (ftc_deadline_expired(d))
                    fail_msg("the agents did not find Redis down");
                ftc_sleep_ms(50);
            }
        }
        for (int r = 0; r < 2; r++) {
            fill(r ? w1 : w0, r, s);
            assert_int_equal(ftc_checkpoint(c[r], s, NULL, 0), 0);
            assert_int_equal(ftc_wait_snapshot(c[r]), 0);
        }
        if (s == 1) {
            /* the pushes (each, before, read the plan at once) */
            ftc_deadline_t d = ftc_deadline_in_ms(6000);
            while (!atomic_load(&mute.plan_reads) && !ftc_deadline_expired(d))
                ftc_sleep_ms(50);
            int reads = atomic_load(&mute.plan_reads);
            mute_redis_stop(&mute);
            print_message("plan reads while Redis was known down: %d\n", reads);
            assert_int_equal(reads, 0);
            ftc_err_t err = {0};
            if (ftc_redis_server_restart(e->f->srv, &err))
                fail_msg("redis restart: %s", err.msg);
        }
        for (int r = 0; r < 2; r++)
            if (ftc_wait_committed(c[r], s))
                fail_msg("step %lld: %s", (long long)s, ftc_last_error(c[r]));
    }
    for (int r = 0; r < 2; r++)
        ftc_destroy(c[r]);
    teardown_env(e);
}

/* This node's replica store holds a corrupt copy (a flipped byte: its head
 * and the commit record's checksum still match) of the shard a rank fetches
 * or continues: that copy fails verification, the shard comes from the
 * live peer that wrote it, for ftc_fetch and for ftc_restore_from alike. */
static void test_corrupt_local_replica_peer(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    run_all(e, "3");
    /* rank 1's replicas live on node 0 (ring order): this node's store */
    char prefix[128], out[PATH_MAX + 32];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.p1.", e->job);
    assert_true(corrupt_shm(prefix) >= 1);
    snprintf(out, sizeof out, "%s/rank0.fetch1.out", e->jobdir);
    pid_t p = start_rank(e, 0, 2, out, "--steps", "0", "--fetch", "1");
    wait_rank(p, 60000);
    assert_true(said(out, "FETCHED 1 2 OK"));
    assert_true(agent_said(e, 0, "this node's replica store: rank 1's shard of step 2 fails "
                                 "verification"));
    setenv("FTC_RESTORE_RANK", "1", 1);
    snprintf(out, sizeof out, "%s/rank0.from1.out", e->jobdir);
    p = start_rank(e, 0, 2, out, "--restore", "--steps", "0", NULL);
    unsetenv("FTC_RESTORE_RANK");
    wait_rank(p, 60000);
    assert_true(said(out, "RESTORED 2 OK"));
    teardown_env(e);
}

/* One node, k = 0, every commit persisted: starts its agent with the
 * persist writer's test hold (FTC_TEST_PERSIST_HOLD=hold, a path in the job
 * directory, cap bytes), commits steps 0 .. held - 1 (the last one
 * persisted), creates the hold file and commits step held, whose write the
 * writer then holds (a slow or hung file system). Returns rank 0's context
 * (tensor w of 4096 floats). */
static ftc_ctx_t *held_persist_writer(env_t *e, float *w, int64_t held, char *hold, size_t cap)
{
    snprintf(hold, cap, "%s/persist.hold", e->jobdir);
    setenv("FTC_TEST_PERSIST_HOLD", hold, 1);
    start_agent(e, 0);
    unsetenv("FTC_TEST_PERSIST_HOLD");
    ftc_ctx_t *c = open_ctx(e, 0, 0, 1, w, 4096);
    for (int64_t s = 0; s < held; s++)
        commit_step(c, w, 0, s);
    wait_persisted(e, 0, held - 1);
    FILE *h = fopen(hold, "w");
    assert_non_null(h);
    fclose(h);
    commit_step(c, w, 0, held);
    char line[64];
    snprintf(line, sizeof line, "holding step %lld", (long long)held);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (!agent_log_has(e, 0, line)) {
        if (ftc_deadline_expired(d))
            fail_msg("the persist writer never held step %lld", (long long)held);
        ftc_sleep_ms(20);
    }
    return c;
}

/* One node, k = 0, every commit persisted. The persist writer is held
 * busy on step 2 (FTC_TEST_PERSIST_HOLD: a write to a slow or hung file
 * system) and the rank's slots fail verification: its RESTORE must come
 * from the steps the node's persist tier already holds (step 1) while the
 * write runs. The control loop used to take the writer's handle for the
 * load, so it waited for the whole write, answering no rank meanwhile,
 * and the restore failed at the rank's deadline. */
static void test_restore_persist_writer_busy(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1, NULL);
    char hold[PATH_MAX + 32];
    static float w[4096];
    ftc_ctx_t *c = held_persist_writer(e, w, 2, hold, sizeof hold);
    ftc_destroy(c);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.r0.", e->job);
    assert_true(corrupt_shm(prefix) >= 3);
    c = create_ctx(e, 0, 0, 1, 5000);
    register_w(c, w, 4096);
    memset(w, 0, sizeof w);
    int64_t got = -1;
    if (ftc_restore(c, &got, NULL, NULL))
        fail_msg("restore while the persist writer is busy: %s", ftc_last_error(c));
    assert_int_equal(got, 1);
    static float want[4096];
    fill(want, 0, 1);
    assert_memory_equal(w, want, sizeof w);
    assert_true(agent_said(e, 0, "rank 0 restored step 1 from the persist tier"));
    assert_true(agent_log_has(e, 0, "holding step 2")); /* still: not finished */
    assert_false(agent_log_has(e, 0, "persisted step 2"));
    unlink(hold);
    ftc_destroy(c);
    teardown_env(e);
}

/* The same held writer (step 2, one node, k = 0) and a new layout: the
 * rank comes back with another tensor size while the write reads its
 * previous layout's slot. The agent used to wait for that write inside the
 * SLOTS handler (the control loop blocked for as long as the file system
 * took: the rank's call reached its deadline with "agent did not answer");
 * it answers FTC_EAGAIN naming the write, which the rank retries until its
 * deadline, and once the write is done the new slots are made. */
static void test_slots_persist_writer_busy(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1, NULL);
    char hold[PATH_MAX + 32];
    static float w[4096];
    ftc_ctx_t *c = held_persist_writer(e, w, 1, hold, sizeof hold);
    ftc_destroy(c);
    c = create_ctx(e, 0, 0, 1, 1000);
    register_w(c, w, 2048); /* a new layout */
    assert_int_not_equal(ftc_checkpoint(c, 2, NULL, 0), 0);
    if (!strstr(ftc_last_error(c), "being written to this node's persist tier"))
        fail_msg("SLOTS while the persist writer reads the old slots: %s", ftc_last_error(c));
    ftc_destroy(c);
    unlink(hold);
    wait_persisted(e, 0, 1);
    c = open_ctx(e, 0, 0, 1, w, 2048);
    assert_int_equal(ftc_checkpoint(c, 2, NULL, 0), 0);
    if (ftc_wait_committed(c, 2))
        fail_msg("step 2 in the new layout: %s", ftc_last_error(c));
    ftc_destroy(c);
    teardown_env(e);
}

/* k = 1 on 2 nodes, every commit persisted, agent.timeout_ms 1500. Node 1's
 * agent hangs (SIGSTOP) while it still looks alive (its heartbeat kept),
 * and node 0 loses its memory. The fetch of rank 0's shard from node 1
 * reaches its deadline; the agent asked node 1 again, two more rounds of a
 * full agent.timeout_ms each (with the default 30 s, past the rank's own
 * 60 s call deadline: the restore failed although the persist tier has
 * the step). A holder that timed out is not asked again: the persist tier
 * at once. */
static void test_restore_hung_peer_persist(void **state)
{
    env_t *e = prepare_env(*state, 2, "1", 1, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "1500");
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    run_all(e, "3");
    wait_persisted(e, 0, 2);
    assert_int_equal(kill(e->agent[1], SIGSTOP), 0);
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    uint64_t gen = 0;
    uint32_t world = 0;
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    ftc_ctl_heartbeat_t hb = {.generation = gen, .step = -1, .wall_ms = ftc_wall_ms()};
    assert_int_equal(ftc_ctl_heartbeat(c, "node1", &hb, 120000), 0);
    ftc_ctl_destroy(c);
    lose_and_replace(e, (int[]){0}, 1);
    restore_rank(e, 0, "RESTORED 2 OK");
    assert_true(agent_said(e, 0, "restored step 2 from the persist tier"));
    assert_false(agent_said(e, 0, "trying the peers again"));
    assert_true(agent_said(e, 0, "or did not answer by the deadline (1)"));
    teardown_env(e); /* (SIGKILL ends the stopped agent too) */
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_nothing_committed),
        T(test_replicate_kill_rank_lose_node),
        T(test_three_slots_before_skip),
        T(test_fetch_and_restore_from),
        T(test_two_concurrent_losses_k2),
        T(test_corrupt_replica_other_source),
        T(test_corrupt_own_slots_peer_replica),
        T(test_persist_tier_last_resort),
        T(test_failure_domain_placement),
        T(test_persist_every_third_commit),
        T(test_persist_fetch_never_newer),
        T(test_fetch_at_most),
        T(test_fetch_at_most_redis_down),
        T(test_fetch_never_committed),
        T(test_busy_wait_policy),
        T(test_inflight_one),
        T(test_inflight_one_parity_failure),
        T(test_third_slot_reserved_ahead),
        T(test_third_slot_reserved_ahead_held),
        T(test_fetch_same_shard_twice),
        T(test_fetch_result_to_its_request),
        T(test_restore_first_holder_unreachable),
        T(test_restart_never_committed_slot),
        T(test_restart_persisted_step_not_failed),
        T(test_failed_snapshot_abandons_step),
        T(test_failed_snapshot_other_node),
        T(test_failed_snapshot_stops_parity_gather),
        T(test_redis_down_reports_wait),
        T(test_redis_down_no_plan_read),
        T(test_abort_markers_redis_down),
        T(test_redis_error_reply_not_down),
        T(test_corrupt_local_replica_peer),
        T(test_restore_hung_peer_persist),
        T(test_restore_persist_writer_busy),
        T(test_slots_persist_writer_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
