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
 *   - nothing committed: a clear "nothing committed" error.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"

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
    kill(p0, SIGKILL); /* rank 0 dies while it is still checkpointing */
    wait_rank(p0, 10000);
    restore_rank(e, 0, "RESTORED 6 OK");
    /* node loss: agent 0 killed and its shared memory gone */
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
    restore_rank(e, 0, "RESTORED 6 OK");
    /* lost again, and this time its rank goes on: restored from a peer into
     * fresh slots (the landing one reserved by prefaulting it, the two others
     * only after RESTORE_OK), then checkpoints into all three */
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
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
    kill_agent(e, 0);
    kill_agent(e, 1);
    wipe_node_shm(e, 0);
    wipe_node_shm(e, 1);
    start_agent(e, 0);
    start_agent(e, 1);
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
    kill_agent(e, 0);
    wipe_node_shm(e, 0);
    start_agent(e, 0);
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

/* Waits until node's persist directory has step committed. */
static void wait_persisted(env_t *e, int node, int step)
{
    char marker[PATH_MAX + 64];
    snprintf(marker, sizeof marker, "%s/node%d/v%020d/COMMITTED", e->persist, node, step);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(marker, &st) != 0) {
        if (ftc_deadline_expired(d))
            fail_msg("%s never appeared", marker);
        ftc_sleep_ms(20);
    }
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

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, redis_fixture_teardown)

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
