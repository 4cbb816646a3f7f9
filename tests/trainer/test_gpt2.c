/*
 * test_gpt2.c — the GPT-2 small shape (124,439,808 parameters) allocates and
 * takes one full training step on the CPU: forward, backward, AdamW. The
 * loss starts near ln(50257) = 10.8 and the step leaves finite weights.
 * About 2.5 GB of memory and tens of seconds: LABELS soak.
 */
#include "ftc_test.h"

#include "trainer/model.h"
#include "trainer/optim.h"

#include <math.h>

static void test_gpt2_small_step(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_model_config_t c;
    assert_int_equal(ftc_model_preset("gpt2-small", &c, &err), 0);
    enum { B = 1, T = 32 };
    ftc_model_t *m = ftc_model_create(&c, ftc_kernels_cpu(), B, T, 1, &err);
    if (!m)
        fail_msg("%s", err.msg);
    assert_int_equal(ftc_model_num_params(m), 124439808);
    ftc_adamw_t *a = ftc_adamw_create(ftc_model_num_params(m), &err);
    assert_non_null(a);
    int32_t tok[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7919) % 50257, tg[i] = (i * 104729 + 1) % 50257;
    ftc_model_zero_grad(m);
    float loss = ftc_model_forward(m, tok, tg);
    print_message("gpt2-small: loss %.4f at init (ln V = %.4f)\n", loss, log(50257.0));
    assert_true(fabsf(loss - logf(50257.0f)) < 1.0f);
    ftc_model_backward(m);
    ftc_optim_config_t oc = FTC_OPTIM_CONFIG_INIT;
    float norm, lr;
    ftc_adamw_step(a, m, &oc, 0, &norm, &lr);
    assert_true(isfinite(norm) && norm > 0);
    float loss2 = ftc_model_forward(m, tok, tg);
    assert_true(isfinite(loss2));
    ftc_adamw_destroy(a);
    ftc_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt2_small_step)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
