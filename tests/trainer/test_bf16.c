/*
 * test_bf16.c — the CPU's mixed-precision flavour ("cpu-bf16", kernels.h):
 *   - its matmuls equal the fp32 matmuls of operands rounded to bf16 first,
 *     bit for bit (forward and both backward products; dbias from the
 *     unrounded dout), and differ from fp32 by about bf16's rounding;
 *   - the selection names (cpu-bf16, auto-bf16, cuda-bf16 without a device);
 *   - the tiny model trains with it: 30 steps, the loss falls by > 1 nat,
 *     and every step's loss stays within 2% of the fp32 run's.
 */
#include "ftc_test.h"

#include "trainer/kernels.h"
#include "trainer/train.h"

#include <math.h>

static void rnd(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
}

static void round_bf16(float *x, size_t n)
{
    const ftc_kernels_t *k = ftc_kernels_cpu();
    uint16_t *b = malloc(n * sizeof *b);
    assert_non_null(b);
    k->f32_to_bf16(b, x, n);
    k->bf16_to_f32(x, b, n);
    free(b);
}

static void test_matmul_emulation(void **state)
{
    (void)state;
    const ftc_kernels_t *f = ftc_kernels_cpu(), *h = ftc_kernels_cpu_bf16();
    assert_int_equal(h->matmul_bf16, 1);
    assert_int_equal(f->matmul_bf16, 0);
    enum { N = 37, IC = 70, OC = 45 };
    static float inp[N * IC], w[OC * IC], bias[OC], dout[N * OC], ri[N * IC], rw[OC * IC],
        rd[N * OC];
    static float o1[N * OC], o2[N * OC], o3[N * OC], di1[N * IC], di2[N * IC], dw1[OC * IC],
        dw2[OC * IC], db1[OC];
    rnd(inp, N * IC, 1), rnd(w, OC * IC, 2), rnd(bias, OC, 3), rnd(dout, N * OC, 4);
    memcpy(ri, inp, sizeof ri), memcpy(rw, w, sizeof rw), memcpy(rd, dout, sizeof rd);
    round_bf16(ri, N * IC), round_bf16(rw, OC * IC), round_bf16(rd, N * OC);
    h->matmul_fwd(o1, inp, w, bias, N, IC, OC);
    f->matmul_fwd(o2, ri, rw, bias, N, IC, OC);
    f->matmul_fwd(o3, inp, w, bias, N, IC, OC);
    assert_memory_equal(o1, o2, sizeof o1);
    double worst = 0.0;
    for (int i = 0; i < N * OC; i++)
        worst = fmax(worst, fabs((double)o1[i] - o3[i]));
    /* |x - rbf(x)| <= 2^-9 |x|: a dot of IC terms of |x w| <= 1 moves <= IC * 2 * 2^-9 */
    printf("cpu-bf16 vs fp32 forward: max |diff| %.3g (bound %.3g)\n", worst, IC * 2.0 / 512);
    assert_true(worst > 0.0 && worst <= IC * 2.0 / 512);
    memset(di1, 0, sizeof di1), memset(di2, 0, sizeof di2), memset(dw1, 0, sizeof dw1);
    memset(dw2, 0, sizeof dw2), memset(db1, 0, sizeof db1);
    h->matmul_bwd(di1, dw1, db1, dout, inp, w, N, IC, OC);
    f->matmul_bwd(di2, dw2, NULL, rd, ri, rw, N, IC, OC);
    assert_memory_equal(di1, di2, sizeof di1);
    assert_memory_equal(dw1, dw2, sizeof dw1);
    /* dbias: column sums of the unrounded dout */
    for (int o = 0; o < OC; o++) {
        float s = 0.0f;
        for (int n = 0; n < N; n++)
            s += dout[n * OC + o];
        assert_true(db1[o] == s);
    }
}

static void test_select(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    assert_ptr_equal(ftc_kernels_select("cpu-bf16", &err), ftc_kernels_cpu_bf16());
    const ftc_kernels_t *a = ftc_kernels_select("auto-bf16", &err);
    assert_non_null(a);
    assert_int_equal(a->matmul_bf16, 1);
    assert_string_equal(ftc_kernels_cpu_bf16()->name, "cpu-bf16");
    if (!ftc_kernels_cuda_bf16()) {
        assert_null(ftc_kernels_select("cuda-bf16", &err));
        assert_int_equal(err.code, FTC_EUNSUPPORTED);
        assert_ptr_equal(a, ftc_kernels_cpu_bf16());
    }
}

static void run(const char *backend, int steps, float *loss)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.backend = backend;
    o.steps = (uint64_t)steps;
    o.seq_len = 32; /* half the default: short under the sanitizers too */
    o.corpus_bytes = 1u << 18;
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("trainer on %s: %s", backend, ftc_err_str(&err));
    ftc_train_stats_t st;
    for (int i = 0; i < steps; i++) {
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        loss[i] = st.loss;
    }
    ftc_trainer_destroy(t);
}

static void test_trains(void **state)
{
    (void)state;
    enum { S = 30 };
    float lf[S], lb[S];
    run("cpu", S, lf);
    run("cpu-bf16", S, lb);
    double worst = 0.0;
    bool differ = false;
    for (int i = 0; i < S; i++) {
        worst = fmax(worst, fabs((double)lb[i] - lf[i]) / lf[i]);
        differ = differ || lb[i] != lf[i];
    }
    printf("%d steps: fp32 %.4f -> %.4f, bf16 %.4f -> %.4f; max relative loss gap %.3g\n", S,
           (double)lf[0], (double)lf[S - 1], (double)lb[0], (double)lb[S - 1], worst);
    assert_true(differ);          /* the flavour really rounds */
    assert_true(lb[S - 1] < lb[0] - 1.0f);
    assert_true(worst <= 0.02);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_emulation),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
