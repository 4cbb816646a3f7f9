/*
 * test_agent_copies.c — a committed version keeps its k + 1 copies (I2) and
 * only the committed version is restored (I1), against real `ftc agent`
 * processes (tcp;ofi_rxm on loopback), a real Redis and libftc contexts in
 * this process (agent_fixture.h):
 *   - a reported version abandoned after agent.timeout_ms (a BEGIN parked
 *     behind it) reused its slot while its report stayed in the commit
 *     record: the other rank's late report then committed it without this
 *     node's copy. The report is withdrawn first; a version that commits
 *     is on both nodes. The next step's push wrote over the holder's
 *     committed replica (the one before its newest, the abandoned one):
 *     now over the abandoned one;
 *   - a restarted agent marked a slot whose version was reported but not
 *     committed yet as empty: the next BEGIN wrote over it and the version
 *     then committed with one copy fewer. It stays sealed and commits; also
 *     when Redis does not answer as the rank asks for its slots (the
 *     record cannot be read then): kept sealed, checked once Redis answers;
 *   - a restore took a local slot of the committed step whose content
 *     verifies but is not the committed version (another snapshot of that
 *     step): it must be the version whose checksum the record holds;
 *   - the same for a peer's replica (three nodes, two replicas): one that
 *     verifies by its content but is another version of the step is
 *     refused and the next holder asked; with none left, an error;
 *   - and for the persist tier: a persisted version of the committed step
 *     that is not the recorded one is refused (an older one restores);
 *   - the persist tiers: the exact step in any of them (a live node's)
 *     before an older version in another (a lost node's).
 * No wall-clock bound is asserted. FTC_TEST_FILTER=NAME (cmocka pattern) runs
 * only the matching tests.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "detect/control.h"
#include "ftc.h"

static void fill(float *w, int n, float v)
{
    for (int i = 0; i < n; i++)
        w[i] = v;
}

/* Whether an shm object whose name starts with prefix holds a shard of step
 * that verifies (and, want != 0, whose head checksum is want). */
static bool shm_holds(const char *prefix, uint64_t step, uint64_t want)
{
    ftc_slot_t sl;
    ftc_shard_view_t v;
    if (!open_shm_shard(prefix, step, 0, want, &sl, &v))
        return false;
    ftc_slot_close(&sl);
    return true;
}

/* Node `node` holds rank's own slot of step (checksum want, 0 = any). */
static bool node_slot_holds(env_t *e, int node, int rank, uint64_t step, uint64_t want)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n%d.r%d.s", e->job, node, rank);
    return shm_holds(prefix, step, want);
}

/* Node `node` holds a replica of owner's step (checksum want, 0 = any). */
static bool node_replica_holds(env_t *e, int node, int owner, uint64_t step, uint64_t want)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n%d.p%d.s", e->job, node, owner);
    return shm_holds(prefix, step, want);
}

/* Rank r (0..n-1) of an n-node job (two nodes with one replica, unless
 * said), one rank per node: its own context. */
typedef struct two {
    env_t *e;
    ftc_ctl_t *ctl;
    int n;
    char sock[3][PATH_MAX + 32];
    ftc_options_t o[3];
    ftc_ctx_t *c[3];
} two_t;

enum { N = 1 << 14 };
static float w[3][N];

static void open_rank(two_t *t, int r)
{
    t->c[r] = NULL;
    assert_int_equal(ftc_create(&t->o[r], &t->c[r]), 0);
    int64_t shape[1] = {N};
    assert_int_equal(ftc_register(t->c[r], "w", FTC_DTYPE_F32, 1, shape, w[r], FTC_HOST), 0);
}

static void nodes_start(two_t *t, redis_fixture_t *f, int n, const char *red, int persist_every,
                        const char *timeout_ms)
{
    t->n = n;
    t->e = prepare_env(f, n, red, persist_every, NULL);
    snprintf(t->e->timeout_ms, sizeof t->e->timeout_ms, "%s", timeout_ms);
    for (int i = 0; i < n; i++)
        start_agent(t->e, i);
    t->ctl = redis_fixture_ctl(f, t->e->job);
    for (int r = 0; r < n; r++) {
        t->o[r] = ctx_options(t->e, r, r, n, t->sock[r], sizeof t->sock[r]);
        t->o[r].timeout_ms = 20000;
        open_rank(t, r);
    }
}

static void two_start(two_t *t, redis_fixture_t *f, const char *timeout_ms)
{
    nodes_start(t, f, 2, "1", 1000, timeout_ms);
}

static void two_stop(two_t *t)
{
    for (int r = 0; r < t->n; r++)
        ftc_destroy(t->c[r]);
    ftc_ctl_destroy(t->ctl);
    teardown_env(t->e);
}

static void ckpt(two_t *t, int r, int64_t step)
{
    fill(w[r], N, (float)(10 * r) + (float)step);
    int rc = ftc_checkpoint(t->c[r], step, NULL, 0);
    if (rc)
        print_message("rank %d step %lld: %s\n", r, (long long)step, ftc_last_error(t->c[r]));
    assert_int_equal(rc, 0);
    assert_int_equal(ftc_wait_snapshot(t->c[r]), 0);
}

static void both_commit(two_t *t, int64_t step)
{
    for (int r = 0; r < t->n; r++) {
        int rc = ftc_wait_committed(t->c[r], step);
        if (rc)
            print_message("rank %d waits for step %lld: %s (%s)\n", r, (long long)step,
                          ftc_errname(rc), ftc_last_error(t->c[r]));
        assert_int_equal(rc, 0);
    }
}

/* Every rank checkpoints step, and it commits for all. */
static void commit_all(two_t *t, int64_t step)
{
    for (int r = 0; r < t->n; r++)
        ckpt(t, r, step);
    both_commit(t, step);
}

/* Rank 0's context anew (as after its agent's restart). */
static void reopen_rank0(two_t *t)
{
    ftc_destroy(t->c[0]);
    open_rank(t, 0);
}

/* ftc_restore of rank 0, its tensor overwritten first (-1): its answer,
 * the step restored in *got. */
static int restore_rank0(two_t *t, int64_t *got)
{
    *got = -1;
    fill(w[0], N, -1.0f);
    return ftc_restore(t->c[0], got, NULL, NULL);
}

/* The restore of rank 0 that answered rc succeeded. */
static void assert_restored(two_t *t, int rc)
{
    if (rc)
        print_message("%s\n", ftc_last_error(t->c[0]));
    assert_int_equal(rc, 0);
}

/* Waits (10 s at most) until the record committed step or a later one;
 * the committed step. */
static int64_t wait_committed_step(two_t *t, int64_t step)
{
    int64_t cstep = -1;
    uint64_t cgen = 0;
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (ftc_ctl_committed(t->ctl, &cstep, &cgen) == 0 && cstep < step &&
           !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    return cstep;
}

/* Whatever the record committed, node 0 holds rank 0's copy of it, and node
 * 1 its replica: k + 1 = 2 copies (I2). */
static void assert_committed_has_copies(two_t *t)
{
    int64_t cstep = -1;
    uint64_t cgen = 0;
    assert_int_equal(ftc_ctl_committed(t->ctl, &cstep, &cgen), 0);
    uint64_t ck = 0;
    bool found = false;
    assert_int_equal(ftc_ctl_commit_checksum(t->ctl, cgen, cstep, 0, &ck, &found), 0);
    assert_true(found);
    bool local = node_slot_holds(t->e, 0, 0, (uint64_t)cstep, ck);
    bool replica = node_replica_holds(t->e, 1, 0, (uint64_t)cstep, ck);
    print_message("committed step %lld: rank 0's copy on node 0 %s, its replica on node 1 %s\n",
                  (long long)cstep, local ? "yes" : "NO", replica ? "yes" : "NO");
    assert_true(local);
    assert_true(replica);
}

/* (a) The abandon after agent.timeout_ms. Rank 0 runs ahead: step 1 sealed,
 * replicated and reported, step 2 sealed behind it, step 3 parked for a
 * slot; rank 1 is slow. After the timeout the agent abandons step 1 and
 * writes step 3 into its slot; rank 1's report of step 1 arriving then
 * committed it with rank 0's copy gone from node 0 (only node 1's replica
 * left). Now the abandon takes the report back: step 1 cannot commit, and
 * the next step that does (2) has both copies. */
static void test_abandon_withdraws_report(void **state)
{
    two_t t;
    two_start(&t, *state, "2000");
    commit_all(&t, 0);
    ckpt(&t, 0, 1);
    ckpt(&t, 0, 2);
    (void)wait_commit_report(t.ctl, 1, 0, 10000);
    ckpt(&t, 0, 3); /* parked until the abandon (agent.timeout_ms) */
    assert_true(agent_said(t.e, 0, "was not committed within"));
    /* step 2 went out once step 1 was abandoned: replicated (reported) while
     * step 0 is still the committed one, whose replica node 1 kept */
    (void)wait_commit_report(t.ctl, 2, 0, 10000);
    assert_committed_has_copies(&t);
    ckpt(&t, 1, 1);
    (void)wait_commit_report(t.ctl, 1, 1, 10000);
    assert_committed_has_copies(&t);
    /* rank 1 catches up (its step 1 abandoned the same way) and step 2 commits */
    ckpt(&t, 1, 2);
    ckpt(&t, 1, 3);
    both_commit(&t, 2);
    assert_committed_has_copies(&t);
    /* node 1 took rank 0's step 2 over the abandoned step 1, not over step 0 */
    assert_true(
        agent_said(t.e, 1, "replaces the uncommitted step 1 and keeps the committed step 0"));
    two_stop(&t);
}

/* Step 0 committed, rank 0's step 1 reported (its checksum returned), then
 * node 0's agent killed and started again, rank 0 with a new context. */
static uint64_t restart_with_step1_reported(two_t *t)
{
    commit_all(t, 0);
    ckpt(t, 0, 1);
    uint64_t ck1 = wait_commit_report(t->ctl, 1, 0, 10000);
    kill_agent(t->e, 0);
    ftc_destroy(t->c[0]);
    start_agent(t->e, 0);
    open_rank(t, 0);
    return ck1;
}

/* (b) A restarted agent and a version reported, not committed yet: rank
 * 0's step 1 is reported when its agent is killed; the restarted agent
 * marked that slot empty, rank 0's next checkpoint (step 2) wrote over it,
 * and rank 1's report then committed step 1 without node 0's copy. */
static void test_restart_keeps_reported(void **state)
{
    two_t t;
    two_start(&t, *state, "8000");
    uint64_t ck1 = restart_with_step1_reported(&t);
    int64_t got;
    assert_restored(&t, restore_rank0(&t, &got));
    assert_int_equal(got, 0);
    assert_true(w[0][0] == 0.0f && w[0][N - 1] == 0.0f);
    ckpt(&t, 0, 2);
    ckpt(&t, 1, 1);
    /* the report from before the restart counted */
    assert_int_equal(wait_committed_step(&t, 1), 1);
    assert_true(node_slot_holds(t.e, 0, 0, 1, ck1));
    assert_committed_has_copies(&t);
    assert_int_equal(ftc_wait_committed(t.c[0], 1), 0);
    ckpt(&t, 1, 2);
    both_commit(&t, 2);
    assert_committed_has_copies(&t);
    two_stop(&t);
}

/* (b') The same restart while Redis does not answer (SIGSTOP) when rank 0
 * asks for its slots (at its restore): whether the commit record holds the
 * newer slot's report could not be read, and the slot was freed as if it
 * did not, so rank 0's next checkpoint (step 2) wrote over it and rank 1's
 * report then committed step 1 without node 0's copy. It is now kept
 * sealed, not restored, until the record can be read; once Redis answers
 * the commit poll finds the report and the version commits with both
 * copies. */
static void test_restart_redis_down_keeps_newer(void **state)
{
    two_t t;
    two_start(&t, *state, "8000");
    uint64_t ck1 = restart_with_step1_reported(&t);
    assert_int_equal(ftc_redis_server_signal(t.e->f->srv, SIGSTOP), 0);
    int64_t got;
    int rc = restore_rank0(&t, &got); /* SLOTS, then RESTORE: Redis stopped */
    assert_int_equal(ftc_redis_server_signal(t.e->f->srv, SIGCONT), 0);
    assert_restored(&t, rc);
    assert_int_equal(got, 0);
    assert_true(w[0][0] == 0.0f && w[0][N - 1] == 0.0f);
    ckpt(&t, 0, 2);
    ckpt(&t, 1, 1);
    /* the report from before the restart counted */
    assert_int_equal(wait_committed_step(&t, 1), 1);
    bool kept = node_slot_holds(t.e, 0, 0, 1, ck1);
    print_message("node 0 holds rank 0's committed step 1: %s\n", kept ? "yes" : "NO");
    assert_true(kept);
    assert_committed_has_copies(&t);
    assert_int_equal(ftc_wait_committed(t.c[0], 1), 0);
    ckpt(&t, 1, 2);
    both_commit(&t, 2);
    assert_committed_has_copies(&t);
    assert_true(agent_said(t.e, 0, "kept sealed, never restored, until the record can be read"));
    two_stop(&t);
}

/* Rewrites rank 0's slot of step on node 0 with other values (checksums
 * recomputed: the content verifies, the version is not the committed one).
 * Returns the slot index, -1 when none holds it. */
static int forge_slot_of_step(env_t *e, uint64_t step, float v)
{
    ftc_slot_t sl;
    ftc_shard_view_t sv;
    int k = open_rank0_slot_of_step(e, step, &sl, &sv);
    if (k < 0)
        return -1;
    forge_tensor0(sl.base, sl.size, &sv, v);
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&sv, sl.base, sl.size, FTC_SHARD_VERIFY, &err), 0);
    ftc_slot_close(&sl);
    return k;
}

/* (3) The local slot of the committed step verifies by its own checksums
 * but is another version of that step: the restore takes the committed one
 * (node 1's replica), and the agent says why it passed over its slot. */
static void test_restore_checks_record(void **state)
{
    two_t t;
    two_start(&t, *state, "8000");
    for (int64_t step = 0; step < 3; step++)
        commit_all(&t, step);
    assert_true(forge_slot_of_step(t.e, 2, 99.0f) >= 0);
    reopen_rank0(&t);
    int64_t got;
    assert_restored(&t, restore_rank0(&t, &got));
    assert_int_equal(got, 2);
    print_message("restored step 2: w = %g (committed 2, forged 99)\n", w[0][0]);
    assert_true(w[0][0] == 2.0f && w[0][N - 1] == 2.0f);
    assert_true(agent_said(t.e, 0, "not the committed version's"));
    /* and training goes on from it */
    commit_all(&t, 3);
    two_stop(&t);
}

/* Rewrites every shm object whose name starts with prefix and holds a shard
 * of step (a rank slot, a replica slot) with other values, checksums
 * recomputed: the content verifies, the version is not the committed one.
 * Returns how many. */
static int forge_shm(const char *prefix, uint64_t step, float val)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        ftc_slot_t sl;
        ftc_err_t err = {0};
        if (ftc_slot_open(de->d_name, true, &sl, &err))
            continue;
        ftc_shard_view_t sv;
        uint64_t total = 0;
        if (ftc_shard_peek_size(sl.base, sl.size, &total, &err) == 0 && total <= sl.size &&
            ftc_shard_open(&sv, sl.base, total, 0, &err) == 0 && sv.info.step == step) {
            forge_tensor0(sl.base, total, &sv, val);
            assert_int_equal(ftc_shard_open(&sv, sl.base, total, FTC_SHARD_VERIFY, &err), 0);
            n++;
        }
        ftc_slot_close(&sl);
    }
    closedir(d);
    return n;
}

/* (4) The peer replica path: rank 0's shard of the committed step 2 is on
 * node 0 (its slot), node 1 and node 2 (replicas, redundancy 2). Node 0's
 * slot and node 1's replica are forged (another version of step 2 that
 * verifies by its content: what a replica left from an earlier generation,
 * before a rollback re-ran the step, looks like): the fetch refuses node
 * 1's replica and takes node 2's, saying why. Then node 2's is forged too:
 * no holder has the committed version, and the restore fails rather than
 * return another version (I1), after one round over the peers (each
 * answered definitively). */
static void test_fetch_checks_record(void **state)
{
    two_t t;
    nodes_start(&t, *state, 3, "2", 1000, "8000");
    for (int64_t step = 0; step < 3; step++) {
        for (int r = 0; r < 3; r++)
            ckpt(&t, r, step);
        both_commit(&t, step);
    }
    char local[128], rep1[128], rep2[128];
    snprintf(local, sizeof local, "ftc.%s.n0.r0.s", t.e->job);
    snprintf(rep1, sizeof rep1, "ftc.%s.n1.p0.s", t.e->job);
    snprintf(rep2, sizeof rep2, "ftc.%s.n2.p0.s", t.e->job);
    assert_true(forge_shm(local, 2, 99.0f) >= 1);
    assert_int_equal(forge_shm(rep1, 2, 77.0f), 1);
    reopen_rank0(&t);
    int64_t got;
    assert_restored(&t, restore_rank0(&t, &got));
    assert_int_equal(got, 2);
    print_message("restored step 2: w = %g (committed 2, forged 99 here, 77 on node 1)\n",
                  w[0][0]);
    assert_true(w[0][0] == 2.0f && w[0][N - 1] == 2.0f);
    assert_true(agent_said(t.e, 0, "peer 1: rank 0's shard of step 2 has head checksum"));
    assert_true(agent_said(t.e, 0, "came from another holder after"));
    /* no holder has it: an error, never another version */
    assert_true(forge_shm(local, 2, 99.0f) >= 1);
    assert_int_equal(forge_shm(rep2, 2, 55.0f), 1);
    reopen_rank0(&t);
    int rc = restore_rank0(&t, &got);
    print_message("with every replica forged: %s: %s (w = %g)\n", ftc_errname(rc),
                  ftc_last_error(t.c[0]), w[0][0]);
    assert_int_not_equal(rc, 0);
    assert_true(w[0][0] == -1.0f && w[0][N - 1] == -1.0f);
    assert_true(agent_said(t.e, 0, "peer 2: rank 0's shard of step 2 has head checksum"));
    assert_true(agent_said(t.e, 0, "no holder served the committed version"));
    /* both peers answered with another version: one round, not three (asking
     * them again cannot change their answers) */
    assert_true(agent_said(t.e, 0, "every peer (2) lacks rank 0's step 2"));
    assert_false(agent_said(t.e, 0, "trying the peers again"));
    assert_non_null(strstr(ftc_last_error(t.c[0]), "peers (1 round)"));
    /* step 0 is held by no one any more (each store keeps the two newest):
     * every peer answers "not held", once */
    ftc_shard_ref_t *ref = NULL;
    rc = ftc_fetch(t.c[0], 0, 0, &ref);
    print_message("fetch of step 0: %s: %s\n", ftc_errname(rc), ftc_last_error(t.c[0]));
    assert_int_equal(rc, FTC_ENOENT);
    assert_null(ref);
    assert_non_null(strstr(ftc_last_error(t.c[0]), "peers (1 round)"));
    assert_non_null(strstr(ftc_last_error(t.c[0]), "not held"));
    assert_true(agent_said(t.e, 0, "every peer (2) lacks rank 0's step 0"));
    assert_false(agent_said(t.e, 0, "trying the peers again"));
    two_stop(&t);
}

/* Removes directory dir and the files in it (one level). */
static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        assert_int_equal(unlink(p), 0);
    }
    closedir(d);
    assert_int_equal(rmdir(dir), 0);
}

/* (5) The persist tier: no replicas (redundancy 0), every commit persisted.
 * Node 0's persisted step 2 is replaced by another version of step 2 that
 * verifies by its content (a stale persisted step: what a tier written
 * before a rollback re-ran the step holds), and node 0's memory is lost:
 * the restore refuses it and takes the older committed step 1 there, saying
 * why, rather than the forged step 2 (I1). */
static void test_persist_checks_record(void **state)
{
    two_t t;
    nodes_start(&t, *state, 2, "0", 1, "8000");
    for (int64_t step = 0; step < 3; step++)
        commit_all(&t, step);
    char ver[PATH_MAX + 64], forged[PATH_MAX + 64], fdir[PATH_MAX + 32], prefix[128];
    snprintf(ver, sizeof ver, "%s/node0/v%020d", t.e->persist, 2);
    snprintf(fdir, sizeof fdir, "%s/forged", t.e->jobdir);
    snprintf(forged, sizeof forged, "%s/v%020d", fdir, 2);
    wait_persisted(t.e, 0, 2);
    /* rank 0's step 2 with other values, written as step 2 of a persist
     * directory of its own, then put in place of node 0's */
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.r0.s", t.e->job);
    uint64_t size = 0;
    uint8_t *shard = copy_shm_shard(prefix, 2, &size);
    assert_non_null(shard);
    ftc_shard_view_t sv;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&sv, shard, size, 0, &err), 0);
    forge_tensor0(shard, size, &sv, 99.0f);
    ftc_persist_options_t po = FTC_PERSIST_OPTIONS_INIT;
    po.threads = 1;
    ftc_persist_t *pt = ftc_persist_open(fdir, &po, &err);
    if (!pt)
        fail_msg("%s", err.msg);
    const void *shards[1] = {shard};
    if (ftc_persist_write(pt, 2, shards, &size, 1))
        fail_msg("%s", ftc_persist_errstr(pt));
    ftc_persist_close(pt);
    free(shard);
    ftc_destroy(t.c[0]);
    kill_agent(t.e, 0);
    wipe_node_shm(t.e, 0);
    rm_dir(ver);
    assert_int_equal(rename(forged, ver), 0);
    start_agent(t.e, 0);
    open_rank(&t, 0);
    int64_t got;
    assert_restored(&t, restore_rank0(&t, &got));
    print_message("restored step %lld: w = %g (committed 2, forged 99 in the persist tier)\n",
                  (long long)got, w[0][0]);
    assert_int_equal(got, 1);
    assert_true(w[0][0] == 1.0f && w[0][N - 1] == 1.0f);
    assert_true(agent_said(t.e, 0, "the persist tier: rank 0's shard of step 2 has head checksum"));
    two_stop(&t);
}

/* rank 1's shard fetched by rank 0 at step `ask` must be step `want` (its
 * values those ckpt wrote). */
static void fetch_rank1(two_t *t, int64_t ask, int64_t want)
{
    ftc_shard_ref_t *ref = NULL;
    if (ftc_fetch(t->c[0], 1, ask, &ref))
        fail_msg("fetch of rank 1's step %lld: %s", (long long)ask, ftc_last_error(t->c[0]));
    const void *data = NULL;
    assert_int_equal(ftc_shard_tensor(ref, "w", &data, NULL, NULL), 0);
    print_message("fetch of rank 1's step %lld: step %lld, w = %g\n", (long long)ask,
                  (long long)ftc_shard_step(ref), (double)((const float *)data)[0]);
    assert_int_equal(ftc_shard_step(ref), want);
    assert_true(((const float *)data)[0] == (float)(10 + want));
    ftc_shard_release(ref);
}

/* (6) The other nodes' persist tiers: the exact step first in every one.
 * Three nodes, one rank each, every second commit persisted (steps 1, 3,
 * 5, 7), no replicas; then node 2 is lost (its agent killed, its heartbeat
 * gone) and its tier holds only rank 1's step 1 (rank 1 ran there in an
 * earlier generation), while node 1's tier holds rank 1's persisted steps
 * (its slots: only 5, 6, 7). A fetch of rank 1's step 3 (a re-partition at
 * an older step) must get step 3 from node 1's tier; it got the older step
 * 1 of the lost node's tier, taken before the live nodes' exact step. And
 * with node 2's tier gone, a fetch of step 4 (never persisted) gets node
 * 1's step 3; it got nothing, node 1's newest version (7) being newer.
 * With none in any tier (step 0), the error names the other nodes' tiers
 * it looked in (it named this node's alone). */
static void test_other_tiers_exact_step_first(void **state)
{
    two_t t;
    nodes_start(&t, *state, 3, "0", 2, "8000");
    for (int64_t step = 0; step < 8; step++) {
        for (int r = 0; r < 3; r++)
            ckpt(&t, r, step);
        both_commit(&t, step);
    }
    char dir[PATH_MAX + 32], key[200], cmd[PATH_MAX + 64];
    wait_persisted(t.e, 1, 7);
    /* node 2 lost */
    ftc_destroy(t.c[2]);
    t.c[2] = NULL;
    kill_agent(t.e, 2);
    wipe_node_shm(t.e, 2);
    ftc_ctl_key(t.ctl, "hb:node2", key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(t.ctl), true, NULL, "DEL", key, NULL), 0);
    /* its tier: rank 1's step 1, from node 1's tier */
    ftc_err_t err = {0};
    snprintf(dir, sizeof dir, "%s/node1", t.e->persist);
    ftc_persist_t *p1 = ftc_persist_open_reader(dir, &err);
    if (!p1)
        fail_msg("%s", err.msg);
    ftc_persist_loaded_t *l = NULL;
    if (ftc_persist_load(p1, 1, &l))
        fail_msg("%s", ftc_persist_errstr(p1));
    assert_int_equal(l->n_shards, 1);
    snprintf(dir, sizeof dir, "%s/node2", t.e->persist);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    ftc_persist_options_t po = FTC_PERSIST_OPTIONS_INIT;
    po.threads = 1;
    ftc_persist_t *p2 = ftc_persist_open(dir, &po, &err);
    if (!p2)
        fail_msg("%s", err.msg);
    const void *shards[1] = {l->shards[0]};
    if (ftc_persist_write(p2, 1, shards, &l->sizes[0], 1))
        fail_msg("%s", ftc_persist_errstr(p2));
    ftc_persist_close(p2);
    ftc_persist_loaded_free(l);
    ftc_persist_close(p1);
    fetch_rank1(&t, 3, 3);
    /* no tier has step 4: the newest older one of node 1's */
    assert_int_equal(system(cmd), 0);
    fetch_rank1(&t, 4, 3);
    /* step 0 persisted nowhere: the error names the tiers it looked in */
    ftc_shard_ref_t *ref = NULL;
    int rc = ftc_fetch(t.c[0], 1, 0, &ref);
    print_message("fetch of rank 1's step 0: %s: %s\n", ftc_errname(rc), ftc_last_error(t.c[0]));
    assert_int_equal(rc, FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(t.c[0]), "none in the tiers of node(s) 1; this node's:"));
    two_stop(&t);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_abandon_withdraws_report),
        T(test_restart_keeps_reported),
        T(test_restart_redis_down_keeps_newer),
        T(test_restore_checks_record),
        T(test_fetch_checks_record),
        T(test_persist_checks_record),
        T(test_other_tiers_exact_step_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
