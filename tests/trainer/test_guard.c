/*
 * test_guard.c — the trainer's numerical guard (train.h "Numerical guard"),
 * on the tiny model:
 *   - a NaN injected at step k with `skip`: the run finishes, every applied
 *     step's loss is finite, and the final weights equal those of a run that
 *     was given k in its skip list up front (bit for bit), also with two
 *     virtual DP ranks and the poison in rank 1's micro-batch;
 *   - the skip list is training state: a run stopped after the skip and
 *     resumed from its checkpoint ends with the same bits (the learning rate
 *     counts applied updates, so a lost list would change them);
 *   - a skip list naming a step the restored checkpoint already applied
 *     (the list changed between runs): ignored, the bits of a run that
 *     never listed it (the later listed step still skipped);
 *   - a finite blow-up beyond the exact sums' range (an element past 2^30,
 *     or a sum past 2^31) is skipped like a NaN, at virtual DP 1 and 2,
 *     the parameters untouched; with the guard off it is FTC_ERANGE;
 *   - `rollback` through the persist tier: the newest committed step is
 *     restored, the batch skipped, same bits again;
 *   - a loss spike (`--guard-spike-sigma`) is skipped, a clean run has none;
 *     the window is kept with the guard off too: a run resumed from a
 *     guard-off checkpoint with spike detection skips the same spike;
 *   - `off`: the NaN reaches the exact sums (FTC_ERANGE); bad options;
 *   - real processes: DP = 2 with one rank's micro-batch poisoned, both
 *     ranks skip (the single-process bits); the same with `rollback` before
 *     the first commit in a --ckpt-dir holding a stale rank-d2 of an earlier
 *     larger run: skipped in place; DP = 2 through two real `ftc
 *     agent`s and a real redis-server with `--guard rollback`: the committed
 *     step is restored, the batch skipped, the same bits, and the job's
 *     event stream holds the `nan` event naming the rollback; the same with
 *     the ranks renumbered (FTC_RESTORE_RANK swapped): the same bits.
 */
#include "ftc_test.h"

#include "trainer/train.h"

#include <hiredis/hiredis.h>
#include <math.h>

#define TRAIN_FIXTURE_JOB_PREFIX "tgd"
#include "trainer/train_fixture.h"

#define STEPS 8

static ftc_train_options_t opts(void)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    ftc_err_t err = {0};
    assert_int_equal(ftc_model_preset("tiny", &o.model, &err), 0);
    o.backend = "cpu";
    o.micro_batch = 2;
    o.seq_len = 16;
    o.micro_steps = 4;
    o.steps = STEPS;
    o.optim.warmup = 2;
    o.deterministic = true;
    o.corpus_bytes = 60000;
    o.job_id = "guard-test";
    return o;
}

/* Runs o to `until` steps (all when 0); *skipped gets the skipped step
 * indices as a bit mask, each applied step's loss must be finite. Returns the
 * parameters' hash; the trainer is kept when out is given. */
static uint64_t run(const ftc_train_options_t *o, uint64_t until, uint32_t *skipped,
                    const char **kinds, ftc_trainer_t **out)
{
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(o, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    uint32_t mask = 0;
    uint64_t stop = until ? until : o->steps;
    int guard = 0;
    while (ftc_trainer_steps_done(t) < stop) {
        ftc_train_stats_t st;
        memset(&st, 0xa5, sizeof st);
        if (ftc_trainer_step(t, &st, &err) < 0)
            fail_msg("step %llu: %s", (unsigned long long)ftc_trainer_steps_done(t), err.msg);
        if (st.skipped) {
            mask |= 1u << st.step;
            if (kinds && guard < 8)
                kinds[guard++] = st.guard;
        } else {
            assert_true(isfinite(st.loss));
            assert_false(st.guard);
            assert_true(st.rolled_back_to == UINT64_MAX);
        }
    }
    if (skipped)
        *skipped = mask;
    uint64_t h = ftc_trainer_params_hash(t);
    if (out)
        *out = t;
    else
        ftc_trainer_destroy(t);
    return h;
}

static uint64_t g_ref3; /* the run that skips batch 3 from the list */

static void test_skip_equals_list(void **state)
{
    (void)state;
    ftc_train_options_t o = opts();
    uint32_t mask;
    const char *kinds[8] = {0};
    uint64_t clean = run(&o, 0, &mask, NULL, NULL);
    assert_int_equal(mask, 0);
    uint64_t list[1] = {3};
    o.skip_steps = list, o.n_skip_steps = 1;
    g_ref3 = run(&o, 0, &mask, kinds, NULL);
    assert_int_equal(mask, 1u << 3);
    assert_string_equal(kinds[0], "listed");
    assert_true(g_ref3 != clean);
    /* the NaN at step 3, guard skip (the default) */
    o = opts();
    o.inject_nan_step = 3;
    ftc_trainer_t *t;
    uint64_t h = run(&o, 0, &mask, kinds, &t);
    assert_int_equal(mask, 1u << 3);
    assert_string_equal(kinds[0], "nan");
    assert_true(h == g_ref3);
    const uint64_t *sk;
    assert_int_equal(ftc_trainer_skips(t, &sk), 1);
    assert_true(sk[0] == 3);
    ftc_trainer_destroy(t);
    /* two virtual ranks, the poison in rank 1's micro-batch: the same decision and bits */
    o.dp = 2, o.inject_rank = 1;
    assert_true(run(&o, 0, &mask, NULL, NULL) == g_ref3);
    assert_int_equal(mask, 1u << 3);
    /* fp32 accumulation: the NaN is caught too (no reference bits: another mode) */
    o = opts();
    o.deterministic = false, o.inject_nan_step = 3;
    ftc_err_t err = {0};
    t = ftc_trainer_create(&o, &err);
    assert_non_null(t);
    while (ftc_trainer_steps_done(t) < STEPS) {
        ftc_train_stats_t st;
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        assert_true(st.skipped == (st.step == 3));
    }
    float *p = ftc_model_params(ftc_trainer_model(t));
    for (size_t i = 0; i < ftc_model_num_params(ftc_trainer_model(t)); i++)
        if (!isfinite(p[i]))
            fail_msg("parameter %zu is not finite", i);
    ftc_trainer_destroy(t);
}

static void test_skip_list_in_checkpoint(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-ck");
    ftc_train_options_t o = opts();
    o.inject_nan_step = 3;
    o.ckpt_dir = dir, o.ckpt_every = 2;
    ftc_trainer_t *t;
    run(&o, 6, NULL, NULL, &t); /* the skip at 3, checkpoints at 4 and 6 */
    ftc_trainer_destroy(t);
    /* resumed without the fault and without a list: the record brings the skip */
    o.inject_nan_step = -1;
    ftc_err_t err = {0};
    t = ftc_trainer_create(&o, &err);
    assert_non_null(t);
    assert_true(ftc_trainer_resumed_from(t) == 6);
    const uint64_t *sk;
    assert_int_equal(ftc_trainer_skips(t, &sk), 1);
    assert_true(sk[0] == 3);
    ftc_trainer_destroy(t);
    uint32_t mask;
    assert_true(run(&o, 0, &mask, NULL, NULL) == g_ref3);
    assert_int_equal(mask, 0);
    ftc_test_rmrf(dir);
    free(dir);
}

/* A skip list that names a step the restored checkpoint already applied
 * (the list changed between runs): that update is in the weights, so it is
 * ignored (a warning), never counted as skipped: counting it moved the
 * learning rate and AdamW's bias correction of every later step and wrote a
 * false skip into the next checkpoint. The listed later step is skipped. */
static void test_list_before_restored_step(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-past");
    ftc_train_options_t o = opts();
    uint64_t l7[1] = {7};
    o.skip_steps = l7, o.n_skip_steps = 1;
    uint64_t ref = run(&o, 0, NULL, NULL, NULL); /* fresh, skips 7 only */
    o = opts();
    o.ckpt_dir = dir, o.ckpt_every = 3;
    ftc_trainer_t *t;
    run(&o, 7, NULL, NULL, &t); /* checkpoints at 3 and 6; step 3 applied */
    ftc_trainer_destroy(t);
    uint64_t l37[2] = {3, 7};
    o.skip_steps = l37, o.n_skip_steps = 2;
    ftc_err_t err = {0};
    t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    assert_true(ftc_trainer_resumed_from(t) == 6);
    const uint64_t *sk;
    assert_int_equal(ftc_trainer_skips(t, &sk), 1);
    assert_true(sk[0] == 7);
    ftc_trainer_destroy(t);
    uint32_t mask;
    assert_true(run(&o, 0, &mask, NULL, NULL) == ref);
    assert_int_equal(mask, 1u << 7);
    ftc_test_rmrf(dir);
    free(dir);
}

/* One step of a trainer whose final layernorm gain is set to `gain`: the
 * gradients blow up but stay finite (1e12: elements past 2^30; 1e9: each
 * below it, their sum past 2^31). Returns the step's code; *same says
 * whether the parameters were left as they were. */
static int blown_step(ftc_train_options_t *o, float gain, ftc_train_stats_t *st, bool *same,
                      ftc_err_t *err)
{
    ftc_trainer_t *t = ftc_trainer_create(o, err);
    if (!t)
        fail_msg("create: %s", err->msg);
    ftc_model_t *m = ftc_trainer_model(t);
    const ftc_model_tensor_t *ts = ftc_model_tensors(m);
    float *p = ftc_model_params(m); /* host memory: the cpu backend */
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        if (!strcmp(ts[i].name, "lnf.w"))
            for (size_t j = 0; j < ts[i].numel; j++)
                p[ts[i].offset + j] = gain;
    uint64_t before = ftc_trainer_params_hash(t);
    int rc = ftc_trainer_step(t, st, err);
    *same = ftc_trainer_params_hash(t) == before;
    ftc_trainer_destroy(t);
    return rc;
}

/* A finite blow-up beyond the exact sums' range (gradsum.h) is a guarded
 * event like a NaN: the step is skipped, the run goes on. It ended the run
 * with FTC_ERANGE, guard or not. With the guard off it still does. */
static void test_blowup_beyond_exact_range(void **state)
{
    (void)state;
    const float gains[2] = {1e12f, 1e9f};
    for (int g = 0; g < 2; g++) {
        for (int dp = 1; dp <= 2; dp++) {
            ftc_train_options_t o = opts();
            o.dp = dp;
            ftc_train_stats_t st;
            ftc_err_t err = {0};
            bool same = false;
            int rc = blown_step(&o, gains[g], &st, &same, &err);
            if (rc < 0)
                fail_msg("gain %g, dp %d: %s", (double)gains[g], dp, err.msg);
            assert_true(st.skipped);
            assert_string_equal(st.guard, "grad_blowup"); /* was reported as "nan" */
            assert_true(same);
        }
    }
    ftc_train_options_t o = opts();
    o.guard = FTC_GUARD_OFF;
    ftc_train_stats_t st;
    ftc_err_t err = {0};
    bool same = false;
    assert_int_equal(blown_step(&o, 1e12f, &st, &same, &err), FTC_ERANGE);
}

static void test_rollback_persist(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-rb");
    ftc_train_options_t o = opts();
    o.inject_nan_step = 3;
    o.guard = FTC_GUARD_ROLLBACK;
    o.ckpt_dir = dir, o.ckpt_every = 2;
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    assert_non_null(t);
    int rollbacks = 0;
    while (ftc_trainer_steps_done(t) < STEPS) {
        ftc_train_stats_t st;
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        if (st.step == 3 && st.skipped && st.rolled_back_to != UINT64_MAX) {
            rollbacks++;
            assert_string_equal(st.guard, "nan");
            assert_true(st.rolled_back_to == 2); /* the newest committed step */
            assert_true(ftc_trainer_steps_done(t) == 2);
        } else if (st.skipped) {
            assert_true(st.step == 3); /* the listed skip on the replay */
            assert_string_equal(st.guard, "listed");
        } else {
            assert_true(isfinite(st.loss));
        }
    }
    assert_int_equal(rollbacks, 1);
    assert_true(ftc_trainer_resumed_from(t) == UINT64_MAX); /* a rollback is not a restart */
    assert_true(ftc_trainer_params_hash(t) == g_ref3);
    ftc_trainer_destroy(t);
    ftc_test_rmrf(dir);
    free(dir);
    /* no checkpoint to go back to: skipped in place */
    o.ckpt_dir = NULL;
    uint32_t mask;
    assert_true(run(&o, 0, &mask, NULL, NULL) == g_ref3);
    assert_int_equal(mask, 1u << 3);
}

static void test_spike(void **state)
{
    (void)state;
    ftc_train_options_t o = opts();
    o.steps = 12;
    o.guard_spike_sigma = 6.0, o.guard_window = 4;
    uint32_t mask;
    const char *kinds[8] = {0};
    run(&o, 0, &mask, NULL, NULL);
    assert_int_equal(mask, 0); /* no false alarm on a clean run */
    o.inject_spike_step = 9;
    uint64_t h = run(&o, 0, &mask, kinds, NULL);
    assert_int_equal(mask, 1u << 9);
    assert_string_equal(kinds[0], "loss_spike");
    uint64_t list[1] = {9};
    o.inject_spike_step = -1, o.skip_steps = list, o.n_skip_steps = 1;
    assert_true(run(&o, 0, &mask, NULL, NULL) == h);
    /* spike detection off (the default): the spike is trained on */
    o = opts();
    o.steps = 12, o.inject_spike_step = 9;
    run(&o, 0, &mask, NULL, NULL);
    assert_int_equal(mask, 0);
}

/* The spike window is training state whatever the mode: a run that ran with
 * the guard off and resumes with spike detection catches the spike the
 * uninterrupted guarded run catches. With the guard off the window was not
 * kept: the checkpoint held an empty one (or the stale one of an earlier
 * guarded run, whose mean and sd then judged today's losses). */
static void test_window_kept_guard_off(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-win");
    ftc_train_options_t o = opts();
    o.steps = 12;
    o.guard_spike_sigma = 6.0, o.guard_window = 4;
    o.inject_spike_step = 9;
    uint32_t mask;
    uint64_t ref = run(&o, 0, &mask, NULL, NULL);
    assert_int_equal(mask, 1u << 9);
    o.ckpt_dir = dir, o.ckpt_every = 8;
    o.guard = FTC_GUARD_OFF;
    ftc_trainer_t *t;
    run(&o, 8, &mask, NULL, &t); /* checkpoint at 8: the window of steps 4..7 */
    ftc_trainer_destroy(t);
    o.guard = FTC_GUARD_SKIP;
    assert_true(run(&o, 0, &mask, NULL, NULL) == ref);
    assert_int_equal(mask, 1u << 9);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_off_and_options(void **state)
{
    (void)state;
    ftc_train_options_t o = opts();
    o.guard = FTC_GUARD_OFF, o.inject_nan_step = 1;
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    assert_non_null(t);
    ftc_train_stats_t st;
    assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
    assert_int_equal(ftc_trainer_step(t, &st, &err), FTC_ERANGE); /* the exact sums refuse it */
    ftc_trainer_destroy(t);
    o = opts();
    o.guard_window = 1;
    assert_null(ftc_trainer_create(&o, &err));
    assert_int_equal(err.code, FTC_EINVAL);
    o = opts();
    o.guard = 7;
    assert_null(ftc_trainer_create(&o, &err));
    o = opts();
    o.inject_nan_step = 1, o.inject_rank = 1; /* one rank only */
    assert_null(ftc_trainer_create(&o, &err));
    assert_non_null(strstr(err.msg, "inject rank"));
    uint64_t s[4];
    int n;
    assert_int_equal(ftc_guard_parse_steps("3,17,5", s, 4, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_true(s[1] == 17);
    assert_int_equal(ftc_guard_parse_steps("3,x", s, 4, &n, &err), FTC_EINVAL);
    /* an empty entry is a usage error, a trailing one too (not silently dropped) */
    assert_int_equal(ftc_guard_parse_steps("5,", s, 4, &n, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "empty entry"));
    assert_int_equal(ftc_guard_parse_steps("5,,9", s, 4, &n, &err), FTC_EINVAL);
    assert_int_equal(ftc_guard_parse_steps(",5", s, 4, &n, &err), FTC_EINVAL);
    assert_int_equal(ftc_guard_parse_steps(",", s, 4, &n, &err), FTC_EINVAL);
    assert_int_equal(ftc_guard_parse_steps("1,2,3,4,5", s, 4, &n, &err), FTC_EINVAL);
    assert_int_equal(ftc_guard_parse_steps("3,99999999999999999999", s, 4, &n, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(ftc_guard_parse_steps("", s, 4, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(ftc_guard_parse_mode("rollback"), FTC_GUARD_ROLLBACK);
    assert_int_equal(ftc_guard_parse_mode("Skip"), -1);
}

/* ---- real processes ---------------------------------------------------------- */

#define COMMON "--model", "tiny", "--micro-batch", "2", "--global-batch", "8", "--seq-len", "16", \
               "--corpus-bytes", "60000", "--eval-batches", "1", "--threads", "1",               \
               "--log-every", "1", "--warmup", "2", "--steps", "8"

/* Waits (bounded) for p; its output when it failed. */
static void finish_ok(proc_t *p, int timeout_ms)
{
    int rc = finish(p, timeout_ms);
    if (rc != 0) {
        char *s = slurp(p->out);
        print_error("%s failed (exit %d):\n%s\n", p->out, rc, s);
        free(s);
        fail();
    }
}

static uint64_t g_ref5; /* one process, --skip-steps 5 */

static void test_dp2_one_rank_poisoned(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-dp");
    proc_t p;
    const char *ref[] = {COMMON, "--deterministic", "--skip-steps", "5", NULL};
    start(&p, dir, "ref", NULL, ref);
    finish_ok(&p, 120000);
    g_ref5 = params_hash(p.out, 8);
    const char *env[] = {"FI_PROVIDER=tcp;ofi_rxm", NULL};
    const char *dp2[] = {COMMON, "--nproc", "2", "--inject-nan", "5", "--inject-rank", "1",
                         "--coll-timeout-ms", "30000", NULL};
    start(&p, dir, "dp2", env, dp2);
    finish_ok(&p, 120000);
    assert_true(expect_said(p.out, "DP rank 0: guard: loss or gradient not finite in micro-batch 2 "
                            "(DP rank 1) at step 5: batch 5 skipped"));
    assert_true(expect_said(p.out, "DP rank 1: guard: loss or gradient not finite"));
    assert_true(expect_said(p.out, "step 6/8 nan: batch skipped"));
    assert_true(params_hash(p.out, 8) == g_ref5);
    ftc_test_rmrf(dir);
    free(dir);
}

/* A rollback before the first commit, in a --ckpt-dir that still has the
 * directory of a rank of an earlier larger run (rank-d2, never committed):
 * nothing to roll back to, the batch is skipped in place. The fresh-start
 * check looked for any rank-dD with D >= the DP degree and went restoring:
 * "rank-d0 has none". */
static void test_dp2_rollback_stale_rank_dir(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("guard-stale");
    proc_t p;
    if (!g_ref5) {
        const char *ref[] = {COMMON, "--deterministic", "--skip-steps", "5", NULL};
        start(&p, dir, "ref", NULL, ref);
        finish_ok(&p, 120000);
        g_ref5 = params_hash(p.out, 8);
    }
    char ck[PATH_MAX], stale[PATH_MAX + 16];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(stale, sizeof stale, "%s/rank-d2", ck);
    assert_int_equal(mkdir(ck, 0700), 0);
    assert_int_equal(mkdir(stale, 0700), 0); /* what a DP = 3 run that never committed leaves */
    const char *env[] = {"FI_PROVIDER=tcp;ofi_rxm", NULL};
    const char *dp2[] = {COMMON, "--nproc", "2", "--inject-nan", "5", "--inject-rank", "1",
                         "--guard", "rollback", "--ckpt-dir", ck, "--ckpt-every", "100",
                         "--coll-timeout-ms", "30000", NULL};
    start(&p, dir, "dp2", env, dp2);
    finish_ok(&p, 120000);
    assert_true(expect_said(p.out, "batch 5 skipped (no committed version to roll back to)"));
    assert_true(params_hash(p.out, 8) == g_ref5);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- with agents ---------------------------------------------------------- */

/* The detail of the first stream entry of kind `kind` (malloc'd), or NULL. */
static char *stream_detail(redis_fixture_t *f, const char *job, const char *kind, int64_t *step)
{
    char *found = NULL;
    ftc_redis_reply_t *rep = redis_fixture_events(f, job);
    for (size_t i = 0; i < rep->elements && !found; i++) {
        const char *k = redis_fixture_event_field(rep, i, "kind");
        const char *d = redis_fixture_event_field(rep, i, "detail");
        const char *s = redis_fixture_event_field(rep, i, "step");
        if (k && d && !strcmp(k, kind)) {
            found = strdup(d);
            *step = s ? strtoll(s, NULL, 10) : -1;
        }
    }
    ftc_redis_reply_free(rep);
    return found;
}

static void test_agent_rollback(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    if (!g_ref5) { /* run alone (ctest -R ... or a filter): the reference first */
        proc_t p;
        const char *ref[] = {COMMON, "--deterministic", "--skip-steps", "5", NULL};
        start(&p, jobdir, "ref", NULL, ref);
        finish_ok(&p, 120000);
        g_ref5 = params_hash(p.out, 8);
    }
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    proc_t p[2];
    /* checkpoints every 2 steps: the rollback from step 5 replays step 4 */
    const char *a[] = {COMMON, "--ckpt-every", "2", "--guard", "rollback", "--inject-nan", "5",
                       "--inject-rank", "1", "--coll-timeout-ms", "20000", NULL};
    start_ranks(p, jobdir, job, "run", a);
    finish_ok(&p[1], 120000);
    finish_ok(&p[0], 120000);
    assert_true(expect_said(p[0].out, "rollback to step 4, batch 5 skipped"));
    assert_true(expect_said(p[1].out, "DP rank 1: guard"));
    assert_true(expect_said(p[0].out, "step 6/8 nan: rolled back to step 4"));
    assert_true(params_hash(p[0].out, 8) == g_ref5);
    /* the event, through rank 0's agent into the stream (published shortly after) */
    ftc_deadline_t d = ftc_deadline_in_ms(15000);
    char *detail = NULL;
    int64_t step = -1;
    while (!(detail = stream_detail(f, job, "nan", &step)) && !ftc_deadline_expired(d))
        ftc_sleep_ms(50);
    if (!detail)
        fail_msg("no nan event in the stream of job %s", job);
    print_message("event: nan step %lld: %s\n", (long long)step, detail ? detail : "");
    assert_true(step == 5);
    assert_non_null(strstr(detail, "rollback to step 4, batch 5 skipped"));
    assert_non_null(strstr(detail, "loss nan"));
    free(detail);
}

/* Rollback through the agent in a generation whose ranks were renumbered:
 * `ftc run` gives each rank FTC_RESTORE_RANK, the previous rank whose place
 * it took, for its start; here rank 0 continues previous rank 1 and rank 1
 * previous rank 0 (and nothing is committed yet: a fresh start). The
 * rollback restored with ftc_restore, which honours FTC_RESTORE_RANK all the
 * generation long: each rank got the OTHER rank's chunk of this generation's
 * step 4 (the same size: no error), so the weights were silently scrambled.
 * It must restore this layout's chunks: the bits of --skip-steps 5. */
static void test_agent_rollback_renumbered(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    if (!g_ref5) {
        proc_t p;
        const char *ref[] = {COMMON, "--deterministic", "--skip-steps", "5", NULL};
        start(&p, jobdir, "ref", NULL, ref);
        finish_ok(&p, 120000);
        g_ref5 = params_hash(p.out, 8);
    }
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    proc_t p[2];
    const char *a[] = {COMMON, "--ckpt-every", "2", "--guard", "rollback", "--inject-nan", "5",
                       "--coll-timeout-ms", "20000", NULL};
    const char *extra[2] = {"FTC_RESTORE_RANK=1", "FTC_RESTORE_RANK=0"};
    start_ranks_env(p, jobdir, job, "renum", a, extra);
    finish_ok(&p[1], 120000);
    finish_ok(&p[0], 120000);
    assert_true(expect_said(p[0].out, "rollback to step 4, batch 5 skipped"));
    assert_true(params_hash(p[0].out, 8) == g_ref5);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skip_equals_list),
        cmocka_unit_test(test_skip_list_in_checkpoint),
        cmocka_unit_test(test_list_before_restored_step),
        cmocka_unit_test(test_blowup_beyond_exact_range),
        cmocka_unit_test(test_rollback_persist),
        cmocka_unit_test(test_spike),
        cmocka_unit_test(test_window_kept_guard_off),
        cmocka_unit_test(test_off_and_options),
        cmocka_unit_test(test_dp2_one_rank_poisoned),
        cmocka_unit_test(test_dp2_rollback_stale_rank_dir),
        cmocka_unit_test_setup_teardown(test_agent_rollback, redis_fixture_setup, agent_teardown),
        cmocka_unit_test_setup_teardown(test_agent_rollback_renumbered, redis_fixture_setup,
                                        agent_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
