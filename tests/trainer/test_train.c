/*
 * test_train.c — training end to end on the generated corpus:
 *   - the loss falls: a small model's held-out loss ends below 0.7 x its
 *     initial value within 200 steps;
 *   - virtual data parallelism: the same global batch (12 micro-batches)
 *     split over DP = 1, 2, 3 and 4 virtual ranks, with the rank sums
 *     reduced in a different order every step, ends with bit-identical
 *     parameters and AdamW moments (memcmp) after N steps;
 *   - stop at step k, restore from the persist tier, continue to N: the
 *     same bits as the uninterrupted run to N — also when the DP degree
 *     changes at the restart (an elastic shrink 3 -> 2); in fp32 mode too, and
 *     from a checkpoint inside the warmup (also across a DP change);
 *   - a checkpoint of another configuration is refused; the exact
 *     accumulator refuses non-finite gradients and reports overflow;
 *   - a DP group larger than the trainer carries (64 ranks) is refused, and
 *     so is a schedule of 2^31 steps or more (AdamW's int step count).
 */
#include "ftc_test.h"

#include "trainer/gradsum.h"
#include "trainer/train.h"

#include <math.h>

static ftc_train_options_t small_opts(void)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 32, 2, 2, 32};
    o.micro_batch = 8;
    o.seq_len = 32;
    o.micro_steps = 1;
    o.steps = 200;
    o.optim.lr = 3e-3f;
    o.optim.warmup = 20;
    o.corpus_bytes = 200000;
    o.job_id = "test-train";
    return o;
}

static void test_loss_falls(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_train_options_t o = small_opts();
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    float e0 = ftc_trainer_eval(t, 8);
    assert_true(fabsf(e0 - logf(256.0f)) < 0.5f); /* starts near uniform */
    ftc_train_stats_t st;
    float first = 0;
    for (uint64_t s = 0; s < o.steps; s++) {
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        if (s == 0)
            first = st.loss;
        assert_true(isfinite(st.loss) && isfinite(st.grad_norm));
    }
    float e1 = ftc_trainer_eval(t, 8);
    print_message("loss: eval %.3f -> %.3f, train %.3f -> %.3f over %llu steps\n", e0, e1, first,
                  st.loss, (unsigned long long)o.steps);
    assert_true(e1 < 0.7f * e0);
    ftc_trainer_destroy(t);
}

/* The deterministic configuration of the DP and resume tests. */
static ftc_train_options_t det_opts(int dp)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 16, 2, 2, 16};
    o.micro_batch = 2;
    o.seq_len = 16;
    o.micro_steps = 12; /* divisible by 1, 2, 3, 4 */
    o.steps = 10;
    o.optim.lr = 3e-3f;
    o.optim.warmup = 3;
    o.corpus_bytes = 60000;
    o.deterministic = true;
    o.dp = dp;
    o.job_id = "test-det";
    return o;
}

typedef struct {
    size_t n;
    float *p, *m, *v;
} state_t;

static state_t grab(ftc_trainer_t *t)
{
    state_t s;
    s.n = ftc_model_num_params(ftc_trainer_model(t));
    s.p = malloc(s.n * 4), s.m = malloc(s.n * 4), s.v = malloc(s.n * 4);
    memcpy(s.p, ftc_model_params(ftc_trainer_model(t)), s.n * 4);
    memcpy(s.m, ftc_trainer_adamw(t)->m, s.n * 4);
    memcpy(s.v, ftc_trainer_adamw(t)->v, s.n * 4);
    return s;
}

static void same(const state_t *a, const state_t *b, const char *what)
{
    assert_int_equal(a->n, b->n);
    if (memcmp(a->p, b->p, a->n * 4) || memcmp(a->m, b->m, a->n * 4) ||
        memcmp(a->v, b->v, a->n * 4)) {
        size_t i = 0;
        while (i < a->n && a->p[i] == b->p[i])
            i++;
        fail_msg("%s: state differs (first parameter difference at %zu)", what, i);
    }
}

static void drop(state_t *s)
{
    free(s->p), free(s->m), free(s->v);
}

static state_t run(const ftc_train_options_t *o, uint64_t steps, float *loss)
{
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(o, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    ftc_train_stats_t st;
    while (ftc_trainer_steps_done(t) < steps)
        if (ftc_trainer_step(t, &st, &err) != 0)
            fail_msg("step: %s", err.msg);
    if (loss)
        *loss = st.loss;
    state_t s = grab(t);
    ftc_trainer_destroy(t);
    return s;
}

static void test_virtual_dp_bit_identical(void **state)
{
    (void)state;
    state_t ref;
    float loss_ref = 0;
    for (int dp = 1; dp <= 4; dp++) {
        ftc_train_options_t o = det_opts(dp);
        float loss;
        state_t s = run(&o, o.steps, &loss);
        if (dp == 1) {
            ref = s;
            loss_ref = loss;
            continue;
        }
        char what[32];
        snprintf(what, sizeof what, "dp=%d vs dp=1", dp);
        same(&ref, &s, what);
        assert_true(loss == loss_ref);
        drop(&s);
    }
    /* the fp32 mode sums in another order: it trains, but its bits are its own */
    ftc_train_options_t o = det_opts(1);
    o.deterministic = false;
    state_t f = run(&o, o.steps, NULL);
    assert_true(memcmp(f.p, ref.p, f.n * 4) != 0);
    drop(&f);
    drop(&ref);
}

static void test_resume_bit_identical(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    char *dir = ftc_test_tmpdir("trresume");
    ftc_train_options_t o = det_opts(3);
    state_t ref = run(&o, o.steps, NULL); /* uninterrupted, no checkpoints */

    /* run to step 7 checkpointing every 3 steps: the newest version is step 6 */
    o.ckpt_dir = dir;
    o.ckpt_every = 3;
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    assert_non_null(t);
    assert_int_equal(ftc_trainer_resumed_from(t), UINT64_MAX);
    ftc_train_stats_t st;
    while (ftc_trainer_steps_done(t) < 7) {
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        assert_int_equal(st.checkpointed, (st.step + 1) % 3 == 0);
    }
    ftc_trainer_destroy(t); /* "crash" after step 7: step 7 is lost */

    /* restart with dp = 2 (an elastic shrink), continue to the end */
    o.dp = 2;
    t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("restore: %s", err.msg);
    assert_int_equal(ftc_trainer_resumed_from(t), 6);
    assert_int_equal(ftc_trainer_steps_done(t), 6);
    while (ftc_trainer_steps_done(t) < o.steps)
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
    state_t s = grab(t);
    ftc_trainer_destroy(t);
    same(&ref, &s, "restored at 6 (dp 3 -> 2) vs uninterrupted");
    drop(&s);

    /* another configuration refuses the checkpoint */
    o.optim.lr = 1e-3f;
    t = ftc_trainer_create(&o, &err);
    assert_null(t);
    assert_int_equal(err.code, FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "different configuration"));
    drop(&ref);
    ftc_test_rmrf(dir);
    free(dir);
}

/* The whole-state restore outside test_resume_bit_identical's case (a
 * deterministic run stopped in the cosine part): the fp32 mode, whose
 * micro-batch gradients accumulate in fp32, and stops inside the warmup
 * (step 1 of 3), where the learning rate and the bias correction move
 * fastest, also across a DP change. Each resumed run ends with the bits of
 * the uninterrupted one: the schedule, the moments and the data position
 * are restored exactly. */
static void test_resume_fp32_and_warmup(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    char *dir = ftc_test_tmpdir("trwarm");
    static const struct { bool det; int dp, dp2; uint64_t stop; } cases[] = {
        {false, 1, 1, 1}, {false, 1, 1, 4}, {true, 3, 2, 1}, {true, 2, 4, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ftc_train_options_t o = det_opts(cases[c].dp);
        o.deterministic = cases[c].det;
        o.steps = 6;
        state_t ref = run(&o, o.steps, NULL);
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/c%zu", dir, c);
        o.ckpt_dir = sub;
        o.ckpt_every = (int)cases[c].stop;
        ftc_trainer_t *t = ftc_trainer_create(&o, &err);
        if (!t)
            fail_msg("create: %s", err.msg);
        ftc_train_stats_t st;
        while (ftc_trainer_steps_done(t) < cases[c].stop)
            assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        ftc_trainer_destroy(t);
        o.dp = cases[c].dp2;
        t = ftc_trainer_create(&o, &err);
        if (!t)
            fail_msg("restore: %s", err.msg);
        assert_int_equal(ftc_trainer_resumed_from(t), cases[c].stop);
        while (ftc_trainer_steps_done(t) < o.steps)
            assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        state_t s = grab(t);
        ftc_trainer_destroy(t);
        char what[96];
        snprintf(what, sizeof what, "%s, dp %d -> %d, resumed at step %llu",
                 cases[c].det ? "deterministic" : "fp32", cases[c].dp, cases[c].dp2,
                 (unsigned long long)cases[c].stop);
        same(&ref, &s, what);
        drop(&s);
        drop(&ref);
    }
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_gradsum_limits(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_gradsum_t *g = ftc_gradsum_create(4, &err);
    assert_non_null(g);
    /* exact: tiny and large values in any order */
    float a[4] = {1e-20f, 3.0f, -7.5e8f, 0.1f}, b[4] = {-1e-20f, 1e-7f, 7.5e8f, 0.2f}, out[4];
    assert_int_equal(ftc_gradsum_add_f32(g, a, 4, &err), 0);
    assert_int_equal(ftc_gradsum_add_f32(g, b, 4, &err), 0);
    ftc_gradsum_to_f32(g, out, 1.0);
    assert_true(out[0] == 0.0f);                             /* cancels exactly */
    assert_true(out[1] == (float)(3.0 + (double)1e-7f));     /* one rounding */
    assert_true(out[2] == 0.0f);
    assert_true(out[3] == (float)((double)0.1f + (double)0.2f));
    float bad[4] = {0, NAN, 0, 0};
    assert_int_equal(ftc_gradsum_add_f32(g, bad, 4, &err), FTC_ERANGE);
    assert_non_null(strstr(err.msg, "element 1"));
    ftc_gradsum_zero(g);
    float big[4] = {1e9f, 0, 0, 0};
    assert_int_equal(ftc_gradsum_add_f32(g, big, 4, &err), 0);
    assert_int_equal(ftc_gradsum_add_f32(g, big, 4, &err), 0);
    assert_int_equal(ftc_gradsum_add_f32(g, big, 4, &err), FTC_ERANGE); /* 3e9 > 2^31 */
    assert_non_null(strstr(err.msg, "overflow"));
    ftc_gradsum_destroy(g);
}

/* A stand-in DP communicator that only has a rank and a size: the options
 * check must refuse a group the trainer cannot carry before any collective
 * (pure validation; the real groups are in test_train_dp.c). */
static int fake_op(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, ftc_deadline_t dl)
{
    (void)c, (void)buf, (void)count, (void)dt, (void)dl;
    return 0;
}
static void fake_destroy(ftc_coll_t *c) { (void)c; }

static void test_dp_group_too_large(void **state)
{
    (void)state;
    static const ftc_coll_ops_t ops = {.name = "fake", .all_reduce = fake_op,
                                       .reduce_scatter = fake_op, .all_gather = fake_op,
                                       .destroy = fake_destroy};
    char *dir = ftc_test_tmpdir("trdp65");
    ftc_err_t err = {0};
    /* 65 ranks (this one the last): the restart-step exchange and the restore
     * keep one word per rank in arrays of 64; it wrote past them */
    ftc_coll_t *c = ftc_coll_new(&ops, 64, 65, NULL);
    assert_non_null(c);
    ftc_train_options_t o = small_opts();
    o.deterministic = true;
    o.micro_steps = 65;
    o.micro_batch = 1;
    o.dp_coll = c;
    o.ckpt_dir = dir;
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    ftc_trainer_destroy(t);
    assert_null(t);
    assert_int_equal(err.code, FTC_EINVAL);
    assert_non_null(strstr(err.msg, "at most 64"));
    ftc_coll_destroy(c);
    ftc_test_rmrf(dir);
    free(dir);
}

/* AdamW's step count is an int (kernels.h): a schedule of 2^31 steps or more
 * wrapped it negative at step 2^31 (bias corrections of pow(beta, -2^31):
 * updates of zero, silently). Refused up front. */
static void test_steps_bound(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_train_options_t o = small_opts();
    o.steps = (uint64_t)1 << 31;
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    ftc_trainer_destroy(t);
    assert_null(t);
    assert_int_equal(err.code, FTC_EINVAL);
    assert_non_null(strstr(err.msg, "steps 2147483648"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradsum_limits),
        cmocka_unit_test(test_dp_group_too_large),
        cmocka_unit_test(test_steps_bound),
        cmocka_unit_test(test_virtual_dp_bit_identical),
        cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_resume_fp32_and_warmup),
        cmocka_unit_test(test_loss_falls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
