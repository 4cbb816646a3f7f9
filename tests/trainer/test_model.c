/*
 * test_model.c — the GPT as a whole: parameter counts of every preset
 * (gpt2-small has GPT-2's 124,439,808), the named tensor views tile the
 * buffer, bad configs are refused, the gradient of every parameter tensor of
 * a small model against central finite differences of the loss, and the same
 * gradient bits with 1 and 2 threads; the optimizer's learning-rate
 * schedule (linear warmup, cosine decay to min_lr_ratio x lr, flat after)
 * and its clipping by the global L2 norm (seen in AdamW's first moment after
 * one step: m = (1 - beta1) x the clipped gradient).
 *
 * Gradient check: fp32 model, parameters drawn from U(-0.3, 0.3) so that
 * gradients are well above fp32 noise, h = 1e-3, loss accumulated in double;
 * per tensor, |analytic - numeric| <= 0.05 |numeric| + 0.02 max|numeric|
 * over 24 spread elements. (Each kernel is checked tightly against a double
 * reference in test_kernels.c; this test catches wiring mistakes, which give
 * errors of order 100%.)
 */
#include "ftc_test.h"

#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/rng.h"

#include <math.h>

static void test_sizes(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_model_config_t c;
    assert_int_equal(ftc_model_preset("gpt2-small", &c, &err), 0);
    assert_int_equal(ftc_model_param_count(&c), 124439808);
    const char *names[] = {"tiny", "small", "medium"};
    size_t prev = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ftc_model_preset(names[i], &c, &err), 0);
        assert_int_equal(ftc_model_config_check(&c, &err), 0);
        size_t n = ftc_model_param_count(&c);
        assert_true(n > prev);
        prev = n;
    }
    assert_int_equal(ftc_model_preset("huge", &c, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "tiny, small, medium"));
    ftc_model_config_t bad = {256, 64, 2, 3, 64}; /* 3 heads do not divide 64 */
    assert_int_equal(ftc_model_config_check(&bad, &err), FTC_EINVAL);
    assert_null(ftc_model_create(&bad, ftc_kernels_cpu(), 1, 8, 1, &err));
    ftc_model_config_t ok = {256, 16, 1, 2, 8};
    assert_null(ftc_model_create(&ok, ftc_kernels_cpu(), 1, 17, 1, &err)); /* T > max_seq */
    assert_int_equal(err.code, FTC_EINVAL);
    /* the views tile the buffer in order */
    ftc_model_t *m = ftc_model_create(&ok, ftc_kernels_cpu(), 2, 16, 1, &err);
    assert_non_null(m);
    const ftc_model_tensor_t *t = ftc_model_tensors(m);
    size_t off = 0;
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        assert_int_equal(t[i].offset, off);
        size_t n = 1;
        for (uint32_t d = 0; d < t[i].ndim; d++)
            n *= t[i].shape[d];
        assert_int_equal(n, t[i].numel);
        off += n;
    }
    assert_int_equal(off, ftc_model_num_params(m));
    assert_string_equal(t[0].name, "wte");
    ftc_model_destroy(m);
}

static ftc_model_t *make_check_model(int B, int T, int32_t *tok, int32_t *tg)
{
    ftc_err_t err = {0};
    ftc_model_config_t c = {23, 8, 2, 2, 8};
    ftc_model_t *m = ftc_model_create(&c, ftc_kernels_cpu(), B, T, 5, &err);
    assert_non_null(m);
    float *p = ftc_model_params(m);
    ftc_rng_t r;
    ftc_rng_seed(&r, 99);
    for (size_t i = 0; i < ftc_model_num_params(m); i++)
        p[i] = (float)(ftc_rng_uniform(&r) * 0.6 - 0.3);
    /* layernorm gains around 1 */
    const ftc_model_tensor_t *t = ftc_model_tensors(m);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        if (strstr(t[i].name, "ln") && t[i].name[strlen(t[i].name) - 1] == 'w')
            for (size_t j = 0; j < t[i].numel; j++)
                p[t[i].offset + j] += 1.0f;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)ftc_rng_below(&r, 23);
        tg[i] = (int32_t)ftc_rng_below(&r, 23);
    }
    return m;
}

static void test_gradcheck(void **state)
{
    (void)state;
    enum { B = 2, T = 6 };
    int32_t tok[B * T], tg[B * T];
    ftc_model_t *m = make_check_model(B, T, tok, tg);
    ftc_model_zero_grad(m);
    float loss = ftc_model_forward(m, tok, tg);
    assert_true(isfinite(loss) && loss > 0);
    ftc_model_backward(m);
    size_t n = ftc_model_num_params(m);
    float *g = malloc(n * sizeof *g);
    memcpy(g, ftc_model_grads(m), n * sizeof *g);
    float *p = ftc_model_params(m);
    const ftc_model_tensor_t *t = ftc_model_tensors(m);
    const float h = 1e-3f;
    for (int ti = 0; ti < FTC_MODEL_NTENSORS; ti++) {
        int nck = t[ti].numel < 24 ? (int)t[ti].numel : 24;
        double num[24], ana[24], maxabs = 0;
        for (int k = 0; k < nck; k++) {
            size_t idx = t[ti].offset + (size_t)k * t[ti].numel / (size_t)nck;
            float keep = p[idx];
            p[idx] = keep + h;
            double fp = ftc_model_forward(m, tok, tg);
            p[idx] = keep - h;
            double fm = ftc_model_forward(m, tok, tg);
            p[idx] = keep;
            num[k] = (fp - fm) / (2.0 * h);
            ana[k] = g[idx];
            maxabs = fmax(maxabs, fabs(num[k]));
        }
        for (int k = 0; k < nck; k++) {
            double e = fabs(ana[k] - num[k]);
            if (e > 0.05 * fabs(num[k]) + 0.02 * maxabs)
                fail_msg("%s element %d: analytic %.6g, numeric %.6g (max |numeric| %.3g)",
                         t[ti].name, k, ana[k], num[k], maxabs);
        }
        assert_true(maxabs > 1e-4); /* every tensor gets a gradient */
    }
    free(g);
    ftc_model_destroy(m);
}

/* Backward accumulates: two backward passes of the same batch double the
 * gradient (up to rounding: each pass adds into the running sums). */
static void test_accumulate_and_threads(void **state)
{
    (void)state;
    enum { B = 3, T = 8 };
    int32_t tok[B * T], tg[B * T];
    ftc_model_t *m = make_check_model(B, T, tok, tg);
    size_t n = ftc_model_num_params(m);
    float *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    ftc_kernels_cpu_set_threads(1);
    ftc_model_zero_grad(m);
    ftc_model_forward(m, tok, tg);
    ftc_model_backward(m);
    memcpy(g1, ftc_model_grads(m), n * 4);
    ftc_kernels_cpu_set_threads(2);
    ftc_model_zero_grad(m);
    ftc_model_forward(m, tok, tg);
    ftc_model_backward(m);
    memcpy(g2, ftc_model_grads(m), n * 4);
    assert_memory_equal(g1, g2, n * 4); /* same bits on 1 and 2 threads */
    ftc_model_forward(m, tok, tg);
    ftc_model_backward(m);
    const float *g = ftc_model_grads(m);
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(g[i] - g1[i] * 2.0f) <= 1e-5f * (fabsf(g1[i]) + 1e-3f));
    free(g1);
    free(g2);
    ftc_model_destroy(m);
}

/* lr(step): warmup lr*(step+1)/warmup, then cosine from lr at step warmup to
 * lr*min_lr_ratio at step total-1, flat after (optim.h). */
static void test_lr_schedule(void **state)
{
    (void)state;
    ftc_optim_config_t c = FTC_OPTIM_CONFIG_INIT;
    c.lr = 1e-3f;
    c.min_lr_ratio = 0.1f;
    c.warmup = 10;
    c.total = 111; /* cosine over steps 10..110: its middle is step 60 */
    assert_float_equal(ftc_optim_lr(&c, 0), 1e-4, 1e-9);           /* lr * 1/10 */
    assert_float_equal(ftc_optim_lr(&c, 4), 5e-4, 1e-9);           /* lr * 5/10 */
    assert_float_equal(ftc_optim_lr(&c, 9), 1e-3, 1e-9);           /* end of warmup: peak */
    assert_float_equal(ftc_optim_lr(&c, 10), 1e-3, 1e-9);          /* cosine starts at the peak */
    assert_float_equal(ftc_optim_lr(&c, 60), 1e-3 * 0.55, 1e-9);   /* middle: (1 + 0.1) / 2 */
    assert_float_equal(ftc_optim_lr(&c, 110), 1e-4, 1e-9);         /* end: lr * min_lr_ratio */
    assert_float_equal(ftc_optim_lr(&c, 500), 1e-4, 1e-9);         /* flat after */
    /* monotone: up during warmup, down after */
    for (uint64_t s = 1; s < 111; s++) {
        if (s < 10)
            assert_true(ftc_optim_lr(&c, s) > ftc_optim_lr(&c, s - 1));
        else if (s > 10)
            assert_true(ftc_optim_lr(&c, s) < ftc_optim_lr(&c, s - 1));
    }
    ftc_err_t err = {0};
    assert_int_equal(ftc_optim_config_check(&c, &err), 0);
    c.total = 0;
    assert_int_equal(ftc_optim_config_check(&c, &err), FTC_EINVAL);
    c.total = 111;
    c.grad_clip = -1.0f;
    assert_int_equal(ftc_optim_config_check(&c, &err), FTC_EINVAL);
}

/* One AdamW step from zero moments: m = (1 - beta1) * scale * g, so the
 * clipped gradient is m / (1 - beta1). A gradient whose global norm is above
 * grad_clip comes out with exactly that norm (same direction); one below it
 * is unchanged, element for element. */
static void clip_case(double want_norm, float clip)
{
    ftc_err_t err = {0};
    ftc_model_config_t mc = {23, 8, 2, 2, 8};
    ftc_model_t *m = ftc_model_create(&mc, ftc_kernels_cpu(), 1, 4, 1, &err);
    assert_non_null(m);
    size_t n = ftc_model_num_params(m);
    float *g = ftc_model_grads(m);
    ftc_rng_t r;
    ftc_rng_seed(&r, 5);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(ftc_rng_uniform(&r) - 0.5);
    double n0 = ftc_grad_norm(g, n);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(g[i] * (want_norm / n0));
    double gn = ftc_grad_norm(g, n);
    float *g0 = malloc(n * sizeof *g0);
    memcpy(g0, g, n * sizeof *g0);
    ftc_adamw_t *a = ftc_adamw_create(n, &err);
    assert_non_null(a);
    ftc_optim_config_t c = FTC_OPTIM_CONFIG_INIT;
    c.grad_clip = clip;
    float norm = 0, lr = 0;
    ftc_adamw_step(a, m, &c, 0, &norm, &lr);
    assert_float_equal(norm, gn, gn * 1e-6); /* the norm before clipping */
    assert_float_equal(lr, ftc_optim_lr(&c, 0), 0);
    bool clipped = clip > 0.0f && gn > clip;
    double sq = 0;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)a->m[i] / (1.0 - (double)c.beta1);
        sq += gi * gi;
        if (!clipped)
            assert_true(a->m[i] == (1.0f - c.beta1) * g0[i]); /* unchanged, bit for bit */
        else /* same direction */
            assert_true((a->m[i] > 0) == (g0[i] > 0) || g0[i] == 0);
    }
    double out = sqrt(sq);
    print_message("gradient norm %.6f, clip %.3f: clipped norm %.6f\n", gn, (double)clip, out);
    assert_float_equal(out, clipped ? (double)clip : gn, 1e-5 * (clipped ? clip : gn));
    ftc_adamw_destroy(a);
    free(g0);
    ftc_model_destroy(m);
}

static void test_grad_clip(void **state)
{
    (void)state;
    clip_case(7.5, 1.0f);  /* above: scaled to exactly 1.0 */
    clip_case(0.25, 1.0f); /* below: unchanged */
    clip_case(7.5, 0.0f);  /* clipping off: unchanged */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_accumulate_and_threads),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_grad_clip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
