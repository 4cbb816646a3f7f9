/*
 * test_kernels_cuda.c — every operation of the CUDA backend ("cuda", and the
 * matmuls of "cuda-bf16") against the CPU backend on the same random inputs,
 * then the model and a short training run on both.
 *
 * Tolerances (|gpu - cpu| <= tol * (1 + |cpu|), per element):
 *   1e-5  layernorm forward, GELU, cross-entropy forward;
 *   1e-4  matmuls (fp32, cuBLAS without TF32), layernorm backward,
 *         attention forward and backward;
 *   1e-3  bf16 matmuls ("cuda-bf16" against "cpu-bf16": the same rounded
 *         operands, products exact in fp32, only the summation order
 *         differs);
 *   bitwise: embedding forward and backward, residual, scale, cross-entropy
 *         backward, AdamW, the bf16 casts (kernels.h lists them);
 *   1e-12 relative: sumsq (double sums in another order);
 *   model: mean loss within 1e-4 relative, gradients within 1e-3 of the
 *         largest; 30 training steps: final loss within 1e-2 relative (fp32)
 *         and the bf16 run's loss falls.
 * And run-to-run: the reductions (layernorm, matmul and attention backward,
 * cross-entropy, sumsq) give the same bits twice.
 *
 * Without a CUDA device it prints "SKIPPED: no CUDA device" and exits 77
 * (ctest's skip), unless FTC_REQUIRE_GPU=1, when that is a failure.
 * FTC_TEST_GPU_BACKEND=cpu runs the same comparisons with the CPU table in
 * the GPU's place (the harness checking itself, on any machine).
 */
#include "ftc_test.h"

#include "ckpt/slot.h"
#include "ckpt/snapshot.h"
#include "trainer/kernels.h"
#include "trainer/model.h"
#include "trainer/train.h"

#include <math.h>

static const ftc_kernels_t *D, *DB; /* the device backend, fp32 and bf16 */
static const ftc_kernels_t *H, *HB; /* the CPU backend, fp32 and bf16 */

/* ---- helpers ---------------------------------------------------------------------------- */

static void rnd(float *x, size_t n, uint64_t seed, float scale)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = scale * (float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
}

static float *hbuf(size_t n, uint64_t seed, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    rnd(x, n, seed, scale);
    return x;
}

/* a device copy of host floats (n may be 0) */
static void *up(const ftc_kernels_t *k, const void *h, size_t bytes)
{
    void *d = k->mem_alloc(bytes);
    assert_non_null(d);
    k->mem_copy(d, h, bytes, FTC_COPY_H2D);
    return d;
}

static float *down(const ftc_kernels_t *k, const void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    k->mem_copy(h, d, n * sizeof *h, FTC_COPY_D2H);
    return h;
}

/* |got - want| <= tol * (1 + |want|); tol 0: bitwise. Prints the worst. */
static void cmp(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        if (tol == 0.0) {
            if (memcmp(&got[i], &want[i], 4) && !(isnan(got[i]) && isnan(want[i])))
                fail_msg("%s: element %zu: %.9g, CPU %.9g (must be bitwise equal)", what, i,
                         (double)got[i], (double)want[i]);
            continue;
        }
        double e = fabs((double)got[i] - (double)want[i]) / (1.0 + fabs((double)want[i]));
        if (!(e <= worst))
            worst = e, wi = i;
    }
    printf("  %-28s %8zu elements, max rel. error %.3g (tolerance %.0e)\n", what, n, worst, tol);
    if (tol > 0.0 && !(worst <= tol))
        fail_msg("%s: element %zu: %.9g, CPU %.9g (error %.3g > %.0e)", what, wi, (double)got[wi],
                 (double)want[wi], worst, tol);
}

/* device result of d (n floats) against host result h */
static void cmpd(const char *what, const float *d, const float *h, size_t n, double tol)
{
    float *g = down(D, d, n);
    cmp(what, g, h, n, tol);
    free(g);
}

enum { B_ = 2, T_ = 33, C_ = 96, NH_ = 4, V_ = 517, N_ = B_ * T_ };

/* ---- ops ----------------------------------------------------------------------------------- */

static void test_memory(void **state)
{
    (void)state;
    size_t n = 1000;
    float *h = hbuf(n, 1, 1.0f);
    float *a = up(D, h, n * 4), *b = D->mem_alloc(n * 4);
    assert_non_null(b);
    D->mem_copy(b, a, n * 4, FTC_COPY_D2D);
    float *back = down(D, b, n);
    cmp("mem_copy D2D", back, h, n, 0.0);
    D->mem_zero(b, n * 4);
    free(back);
    back = down(D, b, n);
    for (size_t i = 0; i < n; i++)
        assert_true(back[i] == 0.0f);
    void *z = D->mem_alloc(0);
    assert_non_null(z);
    D->mem_free(z);
    D->mem_free(NULL);
    D->sync();
    D->mem_free(a), D->mem_free(b);
    free(h), free(back);
}

static void test_embedding(void **state)
{
    (void)state;
    int32_t tok[N_];
    for (int i = 0; i < N_; i++)
        tok[i] = (i * 7919) % 13; /* many repeats: the scatter-add's order matters */
    size_t nwte = (size_t)V_ * C_, nwpe = (size_t)T_ * C_, nout = (size_t)N_ * C_;
    float *wte = hbuf(nwte, 2, 1.0f), *wpe = hbuf(nwpe, 3, 1.0f), *out = hbuf(nout, 0, 0.0f);
    float *dout = hbuf(nout, 4, 1.0f), *dwte = hbuf(nwte, 5, 1.0f), *dwpe = hbuf(nwpe, 6, 1.0f);
    int32_t *dtok = up(D, tok, sizeof tok);
    float *d_wte = up(D, wte, nwte * 4), *d_wpe = up(D, wpe, nwpe * 4),
          *d_out = up(D, out, nout * 4);
    float *d_dout = up(D, dout, nout * 4), *d_dwte = up(D, dwte, nwte * 4),
          *d_dwpe = up(D, dwpe, nwpe * 4);
    H->embed_fwd(out, tok, wte, wpe, B_, T_, C_);
    D->embed_fwd(d_out, dtok, d_wte, d_wpe, B_, T_, C_);
    cmpd("embed_fwd", d_out, out, nout, 0.0);
    H->embed_bwd(dwte, dwpe, dout, tok, B_, T_, C_);
    D->embed_bwd(d_dwte, d_dwpe, d_dout, dtok, B_, T_, C_);
    cmpd("embed_bwd dwte", d_dwte, dwte, nwte, 0.0);
    cmpd("embed_bwd dwpe", d_dwpe, dwpe, nwpe, 0.0);
    D->mem_free(dtok), D->mem_free(d_wte), D->mem_free(d_wpe), D->mem_free(d_out);
    D->mem_free(d_dout), D->mem_free(d_dwte), D->mem_free(d_dwpe);
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
}

static void test_layernorm(void **state)
{
    (void)state;
    size_t n = (size_t)N_ * C_;
    float *x = hbuf(n, 10, 2.0f), *w = hbuf(C_, 11, 1.0f), *b = hbuf(C_, 12, 1.0f);
    float *out = hbuf(n, 0, 0.0f), *mean = hbuf(N_, 0, 0.0f), *rstd = hbuf(N_, 0, 0.0f);
    float *dout = hbuf(n, 13, 1.0f), *dinp = hbuf(n, 14, 1.0f), *dw = hbuf(C_, 15, 1.0f),
          *db = hbuf(C_, 16, 1.0f);
    float *d_x = up(D, x, n * 4), *d_w = up(D, w, C_ * 4), *d_b = up(D, b, C_ * 4);
    float *d_out = up(D, out, n * 4), *d_mean = up(D, mean, N_ * 4), *d_rstd = up(D, rstd, N_ * 4);
    float *d_dout = up(D, dout, n * 4), *d_dinp = up(D, dinp, n * 4), *d_dw = up(D, dw, C_ * 4),
          *d_db = up(D, db, C_ * 4);
    H->layernorm_fwd(out, mean, rstd, x, w, b, N_, C_);
    D->layernorm_fwd(d_out, d_mean, d_rstd, d_x, d_w, d_b, N_, C_);
    cmpd("layernorm_fwd out", d_out, out, n, 1e-5);
    cmpd("layernorm_fwd mean", d_mean, mean, N_, 1e-5);
    cmpd("layernorm_fwd rstd", d_rstd, rstd, N_, 1e-5);
    H->layernorm_bwd(dinp, dw, db, dout, x, w, mean, rstd, N_, C_);
    D->layernorm_bwd(d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N_, C_);
    cmpd("layernorm_bwd dinp", d_dinp, dinp, n, 1e-4);
    cmpd("layernorm_bwd dw", d_dw, dw, C_, 1e-4);
    cmpd("layernorm_bwd db", d_db, db, C_, 1e-4);
    float *ptrs[] = {d_x, d_w, d_b, d_out, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < 10; i++)
        D->mem_free(ptrs[i]);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp), free(dw);
    free(db);
}

static void matmul_case(const ftc_kernels_t *hk, const ftc_kernels_t *dk, const char *tag,
                        double tol, bool with_bias)
{
    const int N = N_, IC = C_, OC = 3 * C_;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = hbuf(ni, 20, 1.0f), *w = hbuf(nw, 21, 0.5f), *bias = hbuf(OC, 22, 1.0f);
    float *out = hbuf(no, 0, 0.0f), *dout = hbuf(no, 23, 1.0f), *dinp = hbuf(ni, 24, 1.0f),
          *dw = hbuf(nw, 25, 1.0f), *dbias = hbuf(OC, 26, 1.0f);
    float *d_inp = up(D, inp, ni * 4), *d_w = up(D, w, nw * 4), *d_bias = up(D, bias, OC * 4);
    float *d_out = up(D, out, no * 4), *d_dout = up(D, dout, no * 4),
          *d_dinp = up(D, dinp, ni * 4), *d_dw = up(D, dw, nw * 4),
          *d_dbias = up(D, dbias, OC * 4);
    char name[64];
    hk->matmul_fwd(out, inp, w, with_bias ? bias : NULL, N, IC, OC);
    dk->matmul_fwd(d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, IC, OC);
    snprintf(name, sizeof name, "%s fwd%s", tag, with_bias ? "" : " (no bias)");
    cmpd(name, d_out, out, no, tol);
    hk->matmul_bwd(dinp, dw, with_bias ? dbias : NULL, dout, inp, w, N, IC, OC);
    dk->matmul_bwd(d_dinp, d_dw, with_bias ? d_dbias : NULL, d_dout, d_inp, d_w, N, IC, OC);
    snprintf(name, sizeof name, "%s bwd dinp", tag);
    cmpd(name, d_dinp, dinp, ni, tol);
    snprintf(name, sizeof name, "%s bwd dw", tag);
    cmpd(name, d_dw, dw, nw, tol);
    snprintf(name, sizeof name, "%s bwd dbias", tag);
    cmpd(name, d_dbias, dbias, OC, 1e-4);
    float *ptrs[] = {d_inp, d_w, d_bias, d_out, d_dout, d_dinp, d_dw, d_dbias};
    for (size_t i = 0; i < 8; i++)
        D->mem_free(ptrs[i]);
    free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(dbias);
}

static void test_matmul(void **state)
{
    (void)state;
    matmul_case(H, D, "matmul", 1e-4, true);
    matmul_case(H, D, "matmul", 1e-4, false);
    matmul_case(HB, DB, "matmul bf16", 1e-3, true);
}

static void test_attention(void **state)
{
    (void)state;
    size_t nq = (size_t)N_ * 3 * C_, no = (size_t)N_ * C_, na = (size_t)B_ * NH_ * T_ * T_;
    float *qkv = hbuf(nq, 30, 1.0f), *out = hbuf(no, 0, 0.0f), *att = hbuf(na, 0, 0.0f);
    float *dout = hbuf(no, 31, 1.0f), *dqkv = hbuf(nq, 32, 1.0f),
          *scratch = hbuf((size_t)B_ * NH_ * T_, 0, 0.0f);
    float *d_qkv = up(D, qkv, nq * 4), *d_out = up(D, out, no * 4), *d_att = up(D, att, na * 4);
    float *d_dout = up(D, dout, no * 4), *d_dqkv = up(D, dqkv, nq * 4),
          *d_scratch = up(D, scratch, (size_t)B_ * NH_ * T_ * 4);
    H->attention_fwd(out, att, qkv, B_, T_, C_, NH_);
    D->attention_fwd(d_out, d_att, d_qkv, B_, T_, C_, NH_);
    cmpd("attention_fwd out", d_out, out, no, 1e-4);
    cmpd("attention_fwd att", d_att, att, na, 1e-4);
    H->attention_bwd(dqkv, scratch, dout, qkv, att, B_, T_, C_, NH_);
    D->attention_bwd(d_dqkv, d_scratch, d_dout, d_qkv, d_att, B_, T_, C_, NH_);
    cmpd("attention_bwd dqkv", d_dqkv, dqkv, nq, 1e-4);
    float *ptrs[] = {d_qkv, d_out, d_att, d_dout, d_dqkv, d_scratch};
    for (size_t i = 0; i < 6; i++)
        D->mem_free(ptrs[i]);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
}

static void test_pointwise(void **state)
{
    (void)state;
    size_t n = 100003;
    float *x = hbuf(n, 40, 4.0f), *y = hbuf(n, 41, 1.0f), *out = hbuf(n, 0, 0.0f),
          *dinp = hbuf(n, 42, 1.0f);
    float *d_x = up(D, x, n * 4), *d_y = up(D, y, n * 4), *d_out = up(D, out, n * 4),
          *d_dinp = up(D, dinp, n * 4);
    H->gelu_fwd(out, x, n);
    D->gelu_fwd(d_out, d_x, n);
    cmpd("gelu_fwd", d_out, out, n, 1e-5);
    H->gelu_bwd(dinp, x, y, n);
    D->gelu_bwd(d_dinp, d_x, d_y, n);
    cmpd("gelu_bwd", d_dinp, dinp, n, 1e-5);
    H->residual_fwd(out, x, y, n);
    D->residual_fwd(d_out, d_x, d_y, n);
    cmpd("residual_fwd", d_out, out, n, 0.0);
    H->scale(out, 0.37f, n);
    D->scale(d_out, 0.37f, n);
    cmpd("scale", d_out, out, n, 0.0);
    double hs = H->sumsq(x, n), ds = D->sumsq(d_x, n);
    printf("  sumsq: %.17g vs CPU %.17g\n", ds, hs);
    assert_true(fabs(ds - hs) <= 1e-12 * hs);
    assert_true(D->sumsq(d_x, 0) == 0.0);
    D->mem_free(d_x), D->mem_free(d_y), D->mem_free(d_out), D->mem_free(d_dinp);
    free(x), free(y), free(out), free(dinp);
}

static void test_crossentropy(void **state)
{
    (void)state;
    size_t n = (size_t)N_ * V_;
    int32_t tg[N_];
    for (int i = 0; i < N_; i++)
        tg[i] = (i * 31 + 7) % V_;
    float *logits = hbuf(n, 50, 8.0f), *probs = hbuf(n, 0, 0.0f), *losses = hbuf(N_, 0, 0.0f),
          *dlogits = hbuf(n, 51, 1.0f);
    int32_t *d_tg = up(D, tg, sizeof tg);
    float *d_logits = up(D, logits, n * 4), *d_probs = up(D, probs, n * 4),
          *d_losses = up(D, losses, N_ * 4), *d_dlogits = up(D, dlogits, n * 4);
    H->crossentropy_fwd(losses, probs, logits, tg, N_, V_);
    D->crossentropy_fwd(d_losses, d_probs, d_logits, d_tg, N_, V_);
    cmpd("crossentropy_fwd losses", d_losses, losses, N_, 1e-5);
    cmpd("crossentropy_fwd probs", d_probs, probs, n, 1e-5);
    D->mem_copy(d_probs, probs, n * 4, FTC_COPY_H2D); /* the same probs: bitwise backward */
    H->crossentropy_bwd(dlogits, probs, tg, 1.0f / N_, N_, V_);
    D->crossentropy_bwd(d_dlogits, d_probs, d_tg, 1.0f / N_, N_, V_);
    cmpd("crossentropy_bwd", d_dlogits, dlogits, n, 0.0);
    D->mem_free(d_tg), D->mem_free(d_logits), D->mem_free(d_probs), D->mem_free(d_losses);
    D->mem_free(d_dlogits);
    free(logits), free(probs), free(losses), free(dlogits);
}

static void test_adamw_casts(void **state)
{
    (void)state;
    size_t n = 4099;
    float *p = hbuf(n, 60, 1.0f), *m = hbuf(n, 61, 0.01f), *v = hbuf(n, 0, 0.0f),
          *g = hbuf(n, 62, 1.0f);
    for (size_t i = 0; i < n; i++)
        v[i] = m[i] * m[i];
    float *d_p = up(D, p, n * 4), *d_m = up(D, m, n * 4), *d_v = up(D, v, n * 4),
          *d_g = up(D, g, n * 4);
    for (int t = 1; t <= 3; t++) {
        H->adamw(p, m, v, g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t, 0.5f);
        D->adamw(d_p, d_m, d_v, d_g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t, 0.5f);
    }
    cmpd("adamw p", d_p, p, n, 0.0);
    cmpd("adamw m", d_m, m, n, 0.0);
    cmpd("adamw v", d_v, v, n, 0.0);
    /* casts: ordinary values, ties, NaN, infinities, subnormals */
    float x[12] = {1.0f, -2.5f, 1.00390625f, 1.01171875f, NAN, INFINITY, -INFINITY, 1e-40f,
                   -3e-39f, 65504.0f, 3.4e38f, 0.0f};
    uint16_t hb[12], db[12];
    float *d_x = up(D, x, sizeof x);
    uint16_t *d_b = D->mem_alloc(sizeof db);
    assert_non_null(d_b);
    H->f32_to_bf16(hb, x, 12);
    D->f32_to_bf16(d_b, d_x, 12);
    D->mem_copy(db, d_b, sizeof db, FTC_COPY_D2H);
    assert_memory_equal(hb, db, sizeof hb);
    float hf[12], *df;
    H->bf16_to_f32(hf, hb, 12);
    D->bf16_to_f32(d_x, d_b, 12);
    df = down(D, d_x, 12);
    cmp("bf16 round trip", df, hf, 12, 0.0);
    printf("  f32_to_bf16 / bf16_to_f32   bitwise equal\n");
    D->mem_free(d_p), D->mem_free(d_m), D->mem_free(d_v), D->mem_free(d_g), D->mem_free(d_x);
    D->mem_free(d_b);
    free(p), free(m), free(v), free(g), free(df);
}

/* The reductions twice on the same inputs: the same bits. */
static void test_run_to_run(void **state)
{
    (void)state;
    size_t nq = (size_t)N_ * 3 * C_, no = (size_t)N_ * C_, na = (size_t)B_ * NH_ * T_ * T_;
    float *qkv = hbuf(nq, 70, 1.0f), *dout = hbuf(no, 71, 1.0f);
    float *d_qkv = up(D, qkv, nq * 4), *d_dout = up(D, dout, no * 4);
    float *d_att = D->mem_alloc(na * 4), *d_out = D->mem_alloc(no * 4),
          *d_dqkv = D->mem_alloc(nq * 4);
    float *d_dw = D->mem_alloc((size_t)C_ * 3 * C_ * 4), *d_db = D->mem_alloc((size_t)3 * C_ * 4);
    float *w = hbuf((size_t)C_ * 3 * C_, 72, 0.5f), *d_w = up(D, w, (size_t)C_ * 3 * C_ * 4);
    float *d_scratch = D->mem_alloc((size_t)B_ * NH_ * T_ * 4);
    assert_non_null(d_scratch);
    float *res[2][4];
    double ss[2];
    for (int r = 0; r < 2; r++) {
        D->mem_zero(d_dqkv, nq * 4);
        D->mem_zero(d_dw, (size_t)C_ * 3 * C_ * 4);
        D->mem_zero(d_db, (size_t)3 * C_ * 4);
        D->attention_fwd(d_out, d_att, d_qkv, B_, T_, C_, NH_);
        D->attention_bwd(d_dqkv, d_scratch, d_dout, d_qkv, d_att, B_, T_, C_, NH_);
        D->matmul_bwd(d_out, d_dw, d_db, d_dqkv, d_dout, d_w, N_, C_, 3 * C_);
        ss[r] = D->sumsq(d_dqkv, nq);
        res[r][0] = down(D, d_out, no);
        res[r][1] = down(D, d_dqkv, nq);
        res[r][2] = down(D, d_dw, (size_t)C_ * 3 * C_);
        res[r][3] = down(D, d_db, (size_t)3 * C_);
    }
    cmp("run-to-run attention+matmul", res[1][0], res[0][0], no, 0.0);
    cmp("run-to-run dqkv", res[1][1], res[0][1], nq, 0.0);
    cmp("run-to-run dw", res[1][2], res[0][2], (size_t)C_ * 3 * C_, 0.0);
    cmp("run-to-run dbias", res[1][3], res[0][3], (size_t)3 * C_, 0.0);
    assert_true(memcmp(&ss[0], &ss[1], sizeof ss[0]) == 0);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 4; i++)
            free(res[r][i]);
    D->mem_free(d_qkv), D->mem_free(d_dout), D->mem_free(d_att), D->mem_free(d_out);
    D->mem_free(d_dqkv), D->mem_free(d_dw), D->mem_free(d_db), D->mem_free(d_w);
    D->mem_free(d_scratch);
    free(qkv), free(dout), free(w);
}

/* ---- the model and training ------------------------------------------------------------------ */

static void test_model(void **state)
{
    (void)state;
    ftc_model_config_t cfg;
    ftc_err_t err = {0};
    assert_int_equal(ftc_model_preset("tiny", &cfg, &err), 0);
    int B = 2, T = 32;
    ftc_model_t *mh = ftc_model_create(&cfg, H, B, T, 42, &err);
    ftc_model_t *md = ftc_model_create(&cfg, D, B, T, 42, &err);
    assert_non_null(mh);
    assert_non_null(md);
    int32_t tok[64], tg[64];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37) % cfg.vocab, tg[i] = (i * 53 + 1) % cfg.vocab;
    float lh = ftc_model_forward(mh, tok, tg), ld = ftc_model_forward(md, tok, tg);
    printf("  model loss: %.7f, CPU %.7f\n", (double)ld, (double)lh);
    assert_true(fabs((double)ld - lh) <= 1e-4 * fabs((double)lh));
    ftc_model_zero_grad(mh), ftc_model_zero_grad(md);
    ftc_model_backward(mh), ftc_model_backward(md);
    size_t n = ftc_model_num_params(mh);
    float *gd = down(D, ftc_model_grads(md), n);
    const float *gh = ftc_model_grads(mh);
    double gmax = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs((double)gh[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)gd[i] - gh[i]));
    printf("  model gradients: max |gpu - cpu| %.3g, max |cpu| %.3g\n", worst, gmax);
    assert_true(worst <= 1e-3 * gmax);
    free(gd);
    ftc_model_destroy(mh);
    ftc_model_destroy(md);
}

static float train(const char *backend, int steps, float *first)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.backend = backend;
    o.steps = (uint64_t)steps;
    o.corpus_bytes = 1u << 18;
    ftc_err_t err = {0};
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t)
        fail_msg("trainer on %s: %s", backend, ftc_err_str(&err));
    ftc_train_stats_t st;
    float last = 0.0f;
    for (int i = 0; i < steps; i++) {
        assert_int_equal(ftc_trainer_step(t, &st, &err), 0);
        if (i == 0)
            *first = st.loss;
        last = st.loss;
    }
    ftc_trainer_destroy(t);
    return last;
}

static void test_training(void **state)
{
    (void)state;
    if (D == H) {
        printf("  selfcheck: the training comparison runs only against a device (test_trainer_bf16 "
               "trains the CPU flavours)\n");
        skip();
    }
    const int steps = 30;
    float f0, f1, f2;
    float lh = train(H->name, steps, &f0), ld = train(D->name, steps, &f1),
          lb = train(DB->name, steps, &f2);
    printf("  %d steps: %s loss %.4f -> %.4f, %s %.4f -> %.4f, %s %.4f -> %.4f\n", steps, H->name,
           (double)f0, (double)lh, D->name, (double)f1, (double)ld, DB->name, (double)f2,
           (double)lb);
    assert_true(fabs((double)ld - lh) <= 1e-2 * fabs((double)lh));
    assert_true(lb < f2 - 0.5f);
}

/* Device tensors through the snapshot engine (issue #4, point 2): each
 * registered with its device id, copied by cudaMemcpyAsync on the
 * snapshot's side stream into a host region (cudaHostRegister'd), sealed;
 * the tensors are zeroed right after ftc_snap_wait_copy and the sealed
 * region still holds the bytes of the snapshot; ftc_snap_restore verifies
 * it and copies them back to the device. The selfcheck runs the same with
 * host tensors. */
static void test_snapshot_device(void **state)
{
    (void)state;
    enum { NT = 3 };
    const size_t n[NT] = {(5u << 20) / 4 + 7, 1000, 1}; /* one spans two 4 MiB pieces */
    float *dev[NT], *host[NT];
    ftc_err_t err = {0};
    ftc_shard_info_t info = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&info, 2, 64, &err);
    assert_non_null(s);
    for (int i = 0; i < NT; i++) {
        host[i] = malloc(n[i] * 4);
        assert_non_null(host[i]);
        ftc_test_fill(host[i], n[i] * 4, 40 + (uint64_t)i);
        dev[i] = D->mem_alloc(n[i] * 4);
        assert_non_null(dev[i]);
        D->mem_copy(dev[i], host[i], n[i] * 4, FTC_COPY_H2D);
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        uint64_t shape[1] = {n[i]};
        if (ftc_snap_add(s, name, FTC_DTYPE_F32, 1, shape, dev[i], D->device, &err) != 0)
            fail_msg("ftc_snap_add on device %d: %s", D->device, ftc_err_str(&err));
    }
    D->sync(); /* the snapshot's stream does not wait for the default stream */
    uint64_t size = ftc_snap_size(s), cap = (size + 4095) / 4096 * 4096;
    uint8_t *region = aligned_alloc(4096, cap);
    assert_non_null(region);
    memset(region, 0, cap);
    assert_int_equal(ftc_snap_format(s, region, &err), 0);
    assert_int_equal(ftc_snap_begin(s, region, 5, 1, "m", 1, &err), 0);
    assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(60000), &err), 0);
    for (int i = 0; i < NT; i++) /* the optimizer writes again */
        D->mem_zero(dev[i], n[i] * 4);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(60000), &err), 0);
    uint64_t step = 0;
    char meta[8];
    uint32_t ml = sizeof meta;
    if (ftc_snap_restore(s, region, size, &step, meta, &ml, &err) != 0)
        fail_msg("ftc_snap_restore: %s", ftc_err_str(&err));
    assert_int_equal(step, 5);
    assert_int_equal(ml, 1);
    for (int i = 0; i < NT; i++) {
        float *back = malloc(n[i] * 4);
        assert_non_null(back);
        D->mem_copy(back, dev[i], n[i] * 4, FTC_COPY_D2H);
        assert_memory_equal(back, host[i], n[i] * 4);
        free(back);
        D->mem_free(dev[i]);
        free(host[i]);
    }
    ftc_snap_destroy(s);
    free(region);
    print_message("snapshot of %d tensors on %s: copied, sealed and restored\n", NT,
                  D->device_desc);
}

/* The production path of device tensors (ckpt/client.c): the snapshot goes
 * into shm slots (MAP_SHARED mappings of /dev/shm, each cudaHostRegister'd
 * by ftc_snap_format) and a rank's slots take turns. Two slots, two rounds
 * each with other bytes on the device: every round restores exactly what the
 * device held at begin. The snapshot is destroyed (the slots unregistered)
 * before the slots are unmapped. On the GPU a "pinning the slot failed"
 * warning in the output means the slots stayed pageable (copies correct,
 * but begin then blocks for the whole device->host copy). */
static void test_snapshot_device_slots(void **state)
{
    (void)state;
    enum { NT = 2, NSLOT = 2 };
    const size_t n[NT] = {(3u << 20) / 4 + 5, 257};
    float *dev[NT], *host[NT];
    ftc_err_t err = {0};
    ftc_shard_info_t info = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&info, 2, 16, &err);
    assert_non_null(s);
    for (int i = 0; i < NT; i++) {
        host[i] = malloc(n[i] * 4);
        dev[i] = D->mem_alloc(n[i] * 4);
        assert_non_null(host[i]);
        assert_non_null(dev[i]);
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        uint64_t shape[1] = {n[i]};
        if (ftc_snap_add(s, name, FTC_DTYPE_F32, 1, shape, dev[i], D->device, &err) != 0)
            fail_msg("ftc_snap_add on device %d: %s", D->device, ftc_err_str(&err));
    }
    uint64_t size = ftc_snap_size(s);
    ftc_slot_t slot[NSLOT];
    char sname[NSLOT][FTC_SLOT_NAME_MAX];
    for (int k = 0; k < NSLOT; k++) {
        snprintf(sname[k], sizeof sname[k], "ftc.kcuda-%d.r0.s%d", (int)getpid(), k);
        if (ftc_slot_create(sname[k], size, &slot[k], &err) != 0)
            fail_msg("slot %s: %s", sname[k], ftc_err_str(&err));
        assert_int_equal(ftc_snap_format(s, slot[k].base, &err), 0);
    }
    for (int round = 0; round < 2 * NSLOT; round++) {
        int k = round % NSLOT;
        for (int i = 0; i < NT; i++) {
            ftc_test_fill(host[i], n[i] * 4, 100 + (uint64_t)(round * NT + i));
            D->mem_copy(dev[i], host[i], n[i] * 4, FTC_COPY_H2D);
        }
        D->sync(); /* the snapshot's stream does not wait for the default stream */
        assert_int_equal(ftc_snap_begin(s, slot[k].base, (uint64_t)round + 1, 1, "r", 1, &err), 0);
        assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(60000), &err), 0);
        for (int i = 0; i < NT; i++) /* the optimizer writes again */
            D->mem_zero(dev[i], n[i] * 4);
        assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(60000), &err), 0);
        uint64_t step = 0;
        char meta[16];
        uint32_t ml = sizeof meta;
        if (ftc_snap_restore(s, slot[k].base, size, &step, meta, &ml, &err) != 0)
            fail_msg("ftc_snap_restore from slot %d: %s", k, ftc_err_str(&err));
        assert_int_equal(step, (uint64_t)round + 1);
        for (int i = 0; i < NT; i++) {
            float *back = malloc(n[i] * 4);
            assert_non_null(back);
            D->mem_copy(back, dev[i], n[i] * 4, FTC_COPY_D2H);
            assert_memory_equal(back, host[i], n[i] * 4);
            free(back);
        }
    }
    ftc_snap_destroy(s); /* unregisters the slots: before they are unmapped */
    for (int k = 0; k < NSLOT; k++) {
        ftc_slot_close(&slot[k]);
        ftc_slot_unlink(sname[k], NULL);
    }
    for (int i = 0; i < NT; i++) {
        D->mem_free(dev[i]);
        free(host[i]);
    }
    print_message("snapshot into %d shm slots on %s, %d rounds: restored exactly\n", NSLOT,
                  D->device_desc, 2 * NSLOT);
}

int main(void)
{
    const char *as = getenv("FTC_TEST_GPU_BACKEND");
    H = ftc_kernels_cpu();
    HB = ftc_kernels_cpu_bf16();
    if (as && !strcmp(as, "cpu")) {
        D = H, DB = HB; /* the harness against itself */
    } else {
        ftc_err_t why = {0};
        D = ftc_kernels_cuda_probe(false, &why);
        DB = ftc_kernels_cuda_probe(true, NULL);
        if (!D || !DB) {
            const char *req = getenv("FTC_REQUIRE_GPU");
            if (req && !strcmp(req, "1")) {
                fprintf(stderr, "FAILED: FTC_REQUIRE_GPU=1 but no CUDA backend: %s\n",
                        ftc_err_str(&why));
                return 1;
            }
            printf("SKIPPED: no CUDA device (%s)\n", ftc_err_str(&why));
            return 77;
        }
    }
    printf("device backend %s on %s\n", D->name, D->device_desc);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),      cmocka_unit_test(test_snapshot_device),
        cmocka_unit_test(test_snapshot_device_slots),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_layernorm),   cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),   cmocka_unit_test(test_pointwise),
        cmocka_unit_test(test_crossentropy), cmocka_unit_test(test_adamw_casts),
        cmocka_unit_test(test_run_to_run),  cmocka_unit_test(test_model),
        cmocka_unit_test(test_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
