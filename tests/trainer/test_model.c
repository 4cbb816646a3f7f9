/*
 * test_model.c — the GPT as a whole: parameter counts of every preset
 * (gpt2-small has GPT-2's 124,439,808), the named tensor views tile the
 * buffer, bad configs are refused, the gradient of every parameter tensor of
 * a small model against central finite differences of the loss, and the same
 * gradient bits with 1 and 2 threads.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_accumulate_and_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
