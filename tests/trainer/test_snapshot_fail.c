/*
 * test_snapshot_fail.c — the reference trainer through a real `ftc agent`
 * (one node, a real redis-server) when a checkpoint's snapshot fails: the
 * trainer's chunk tensors sit on a stand-in device (tests/ckpt/
 * fake_device.h, through the ckpt_device_ops option) whose sync fails once
 * (reported by ftc_wait_snapshot in the next step) and whose copy fails
 * once at the start of another checkpoint (reported by ftc_checkpoint).
 * Each is a warning: training goes on (the step whose checkpoint could not
 * start says checkpointed = false), the failed steps never commit, the
 * previous committed version stays (I3) and the later checkpoints commit.
 * ftc_trainer_checkpoint says whether it took a checkpoint: not when the
 * snapshot of step 5, tried again, fails again, nor when the agent skips
 * step 6, which this rank already checkpointed. Without an agent (the
 * persist path) a hung device fails the step with FTC_ETIMEDOUT within
 * coll_timeout_ms, the deadline its syncs are given.
 * An interrupted context (ftc_trainer_interrupt: FTC_ECANCELED) still ends
 * the step with its error. A stopped agent (SIGSTOP) ends the step with
 * FTC_ETIMEDOUT after the trainer's agent_call_timeout_ms, which its message
 * names (it was libftc's default 60 s whatever the trainer was given).
 */
#include "ftc_test.h"

#define AGENT_FIXTURE_JOB_PREFIX "snf"
#include "ckpt/agent_fixture.h"
#include "ckpt/fake_device.h"
#include "trainer/train.h"

/* rank 0's shard of step (-1: the newest committed): its step, or the error */
static int fetch_rank0(ftc_ctx_t *c, int64_t step, int64_t *got)
{
    ftc_shard_ref_t *ref = NULL;
    int rc = ftc_fetch(c, 0, step, &ref);
    if (rc == 0) {
        *got = ftc_shard_step(ref);
        ftc_shard_release(ref);
    }
    return rc;
}

static void test_trainer_snapshot_fail(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/agent.0.sock", e->jobdir);
    fd_reset();
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 16, 2, 2, 16};
    o.micro_batch = 2;
    o.seq_len = 16;
    o.micro_steps = 2;
    o.steps = 10;
    o.corpus_bytes = 60000;
    o.deterministic = true;
    o.ckpt_every = 1;
    o.agent = sock;
    o.job_id = e->job;
    o.ckpt_device_ops = fake_dev_ops();
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("ftc_trainer_create: %s", err.msg);
    assert_int_equal(FD.opened, 1); /* the chunk is on the stand-in device */
    /* the snapshot of step 2 (the second; one sync each) fails at its sync */
    fake_set(&FD.fail_sync_at, 2);
    ftc_train_stats_t st;
    int rc;
    for (int i = 0; i < 8; i++) {
        if (i == 4) /* the snapshot of step 5 cannot start: its first copy fails */
            fake_set(&FD.fail_at, fake_get(&FD.copies) + 1);
        rc = ftc_trainer_step(t, &st, &err);
        if (rc)
            fail_msg("step %d: %s: %s", i, ftc_errname(rc), err.msg);
        /* step 5's checkpoint (index 4) was not taken; step 2's started
         * (its failure shows later) */
        assert_int_equal(st.checkpointed, i != 4);
        bool taken = true;
        if (i == 4) {
            /* ftc_trainer_checkpoint (`ftc train --stop-at`'s last) says
             * whether it took one: its snapshot failing again, not taken
             * (cmd_train printed "ckpt" for it) */
            fake_set(&FD.fail_at, fake_get(&FD.copies) + 1);
            rc = ftc_trainer_checkpoint(t, &taken, &err);
            if (rc)
                fail_msg("checkpoint again: %s: %s", ftc_errname(rc), err.msg);
            assert_false(taken);
        }
        if (i == 5) {
            /* step 6, already checkpointed: the agent skips it, not taken */
            rc = ftc_trainer_checkpoint(t, &taken, &err);
            if (rc)
                fail_msg("checkpoint again: %s: %s", ftc_errname(rc), err.msg);
            assert_false(taken);
        }
    }
    assert_int_equal(ftc_trainer_steps_done(t), 8);
    print_message("8 steps done; %d device copies, %d syncs\n", fake_get(&FD.copies),
                  fake_get(&FD.syncs));
    /* a fatal one stays fatal: an interrupted context ends the step */
    ftc_trainer_interrupt(t);
    rc = ftc_trainer_step(t, &st, &err);
    print_message("after ftc_trainer_interrupt: %s: %s\n", ftc_errname(rc), err.msg);
    assert_int_equal(rc, FTC_ECANCELED);
    ftc_trainer_destroy(t);
    assert_int_equal(FD.closed, 1);
    fd_done();
    /* the agent committed step 8, the last one checkpointed, and never
     * steps 2 and 5 */
    ftc_options_t co = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    co.timeout_ms = 8000;
    ftc_ctx_t *c = NULL;
    if (ftc_create(&co, &c))
        fail_msg("ftc_create: %s", ftc_last_error(c));
    int64_t got = -1;
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    while ((rc = fetch_rank0(c, -1, &got)) != 0 || got < 8) {
        if (ftc_deadline_expired(d))
            fail_msg("step 8 not committed: newest %lld (%s)", (long long)got,
                     rc ? ftc_last_error(c) : "");
        ftc_sleep_ms(50);
    }
    assert_int_equal(got, 8);
    for (int64_t s = 2; s <= 5; s += 3) {
        rc = fetch_rank0(c, s, &got);
        print_message("fetch of step %lld: %s: %s\n", (long long)s, ftc_errname(rc),
                      ftc_last_error(c));
        assert_int_equal(rc, FTC_ENOENT);
        assert_non_null(strstr(ftc_last_error(c), "never committed"));
    }
    ftc_destroy(c);
    teardown_env(e);
}

/* Without an agent (the persist path, the chunk on the stand-in device
 * too): the snapshot's device syncs get coll_timeout_ms as their deadline,
 * and a snapshot whose sync does not end (a hung device: the stand-in's
 * hold) fails its step with FTC_ETIMEDOUT once coll_timeout_ms is out. Both
 * were a fixed 10 minutes, whatever the trainer was configured with. */
static void test_persist_snapshot_deadline(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("snfp");
    fd_reset();
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 16, 2, 2, 16};
    o.backend = "cpu";
    o.micro_batch = 2;
    o.seq_len = 16;
    o.steps = 10;
    o.corpus_bytes = 60000;
    o.ckpt_every = 1;
    o.ckpt_dir = dir;
    o.coll_timeout_ms = 1000;
    o.ckpt_device_ops = fake_dev_ops();
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("ftc_trainer_create: %s", err.msg);
    assert_int_equal(FD.opened, 1); /* the persist path's snapshot is on the stand-in */
    ftc_train_stats_t st;
    int rc = ftc_trainer_step(t, &st, &err);
    if (rc)
        fail_msg("step 1: %s: %s", ftc_errname(rc), err.msg);
    assert_true(st.checkpointed);
    print_message("longest device sync deadline: %d ms\n", fake_get(&FD.sync_ms));
    assert_in_range(fake_get(&FD.sync_ms), 1, 1000);
    fake_set_hold(true); /* step 2's sync does not end */
    rc = ftc_trainer_step(t, &st, &err);
    print_message("step 2 on a hung device: %s: %s\n", ftc_errname(rc), err.msg);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "1000 ms"));
    fake_set_hold(false);
    ftc_trainer_destroy(t);
    assert_int_equal(FD.closed, 1);
    fd_done();
    ftc_test_rmrf(dir);
    free(dir);
}

/* With an agent, the trainer's libftc context takes agent_call_timeout_ms as
 * its timeout_ms: an agent that stops answering (SIGSTOP) after step 1's
 * checkpoint ends step 2 with FTC_ETIMEDOUT naming 1500 ms. It was never
 * set: every agent call waited libftc's default 60 s, whatever the trainer
 * was configured with. */
static void test_agent_timeout(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/agent.0.sock", e->jobdir);
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 16, 2, 2, 16};
    o.backend = "cpu";
    o.micro_batch = 2;
    o.seq_len = 16;
    o.steps = 10;
    o.corpus_bytes = 60000;
    o.ckpt_every = 1;
    o.agent = sock;
    o.job_id = e->job;
    o.agent_call_timeout_ms = 1500;
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("ftc_trainer_create: %s", err.msg);
    ftc_train_stats_t st;
    int rc = ftc_trainer_step(t, &st, &err);
    if (rc)
        fail_msg("step 1: %s: %s", ftc_errname(rc), err.msg);
    assert_true(st.checkpointed);
    kill(e->agent[0], SIGSTOP); /* it answers nothing from now on */
    rc = ftc_trainer_step(t, &st, &err);
    kill(e->agent[0], SIGCONT);
    print_message("step 2 with the agent stopped: %s: %s\n", ftc_errname(rc), err.msg);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "agent call timeout 1500 ms"));
    ftc_trainer_destroy(t);
    teardown_env(e);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_trainer_snapshot_fail, redis_fixture_setup,
                                        agent_fixture_teardown),
        cmocka_unit_test(test_persist_snapshot_deadline),
        cmocka_unit_test_setup_teardown(test_agent_timeout, redis_fixture_setup,
                                        agent_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
