/*
 * test_kernels.c — every CPU kernel against a double-precision reference:
 * forward outputs, and backward gradients against central finite
 * differences of the double reference (h = 1e-6; a loss f = sum(out * R)
 * with random R, so every output element matters). Tolerance: |analytic -
 * numeric| <= 1e-3 * max(1, max |numeric|) per tensor, fp32 kernels against
 * a double truth. Also: AdamW against its formula, bf16 casts (rounding to
 * nearest even, NaN), and the same bits with 1 and 2 threads.
 */
#include "ftc_test.h"

#include "trainer/kernels.h"

#include <math.h>

#define H 1e-6

static const ftc_kernels_t *K;

/* uniform in [-1, 1), as float then widened, so both precisions see the same inputs */
static void fill(double *d, float *f, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float v = (float)((double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        if (f)
            f[i] = v;
        d[i] = v;
    }
}

/* Compares an analytic gradient with finite differences of f over x. */
typedef double (*loss_fn)(void *ctx);
static void check_grad(const char *what, double *x, size_t n, const float *g, loss_fn f, void *ctx)
{
    double maxabs = 1.0, worst = 0.0;
    double *num = malloc(n * sizeof *num);
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        x[i] = xi + H;
        double fp = f(ctx);
        x[i] = xi - H;
        double fm = f(ctx);
        x[i] = xi;
        num[i] = (fp - fm) / (2 * H);
        if (fabs(num[i]) > maxabs)
            maxabs = fabs(num[i]);
    }
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - num[i]);
        if (e > worst)
            worst = e, wi = i;
    }
    if (worst > 1e-3 * maxabs)
        fail_msg("%s: element %zu: analytic %.8g, numeric %.8g (max error %.3g > %.3g)", what, wi,
                 (double)g[wi], num[wi], worst, 1e-3 * maxabs);
    free(num);
}

static void check_close(const char *what, const float *got, const double *want, size_t n,
                        double tol)
{
    for (size_t i = 0; i < n; i++)
        if (fabs((double)got[i] - want[i]) > tol * (1.0 + fabs(want[i])))
            fail_msg("%s: element %zu: %.8g, reference %.8g", what, i, (double)got[i], want[i]);
}

/* ---- layernorm ------------------------------------------------------------------- */

enum { N_ = 10, C_ = 8 };
typedef struct {
    double x[N_ * C_], w[C_], b[C_], r[N_ * C_], out[N_ * C_];
} ln_ctx;

static void ln_ref(ln_ctx *c)
{
    for (int n = 0; n < N_; n++) {
        double m = 0, v = 0;
        for (int i = 0; i < C_; i++)
            m += c->x[n * C_ + i];
        m /= C_;
        for (int i = 0; i < C_; i++)
            v += (c->x[n * C_ + i] - m) * (c->x[n * C_ + i] - m);
        v /= C_;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < C_; i++)
            c->out[n * C_ + i] = (c->x[n * C_ + i] - m) * s * c->w[i] + c->b[i];
    }
}

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    ln_ref(c);
    double s = 0;
    for (int i = 0; i < N_ * C_; i++)
        s += c->out[i] * c->r[i];
    return s;
}

static void test_layernorm(void **state)
{
    (void)state;
    ln_ctx c;
    float x[N_ * C_], w[C_], b[C_], r[N_ * C_], out[N_ * C_], mean[N_], rstd[N_];
    fill(c.x, x, N_ * C_, 1), fill(c.w, w, C_, 2), fill(c.b, b, C_, 3), fill(c.r, r, N_ * C_, 4);
    K->layernorm_fwd(out, mean, rstd, x, w, b, N_, C_);
    ln_ref(&c);
    check_close("layernorm fwd", out, c.out, N_ * C_, 1e-5);
    float dx[N_ * C_] = {0}, dw[C_] = {0}, db[C_] = {0};
    K->layernorm_bwd(dx, dw, db, r, x, w, mean, rstd, N_, C_);
    check_grad("layernorm dinp", c.x, N_ * C_, dx, ln_loss, &c);
    check_grad("layernorm dw", c.w, C_, dw, ln_loss, &c);
    check_grad("layernorm db", c.b, C_, db, ln_loss, &c);
}

/* ---- matmul ----------------------------------------------------------------------- */

enum { MN = 13, MI = 19, MO = 11 }; /* odd sizes: tails of every blocked loop */
typedef struct {
    double x[MN * MI], w[MO * MI], b[MO], r[MN * MO], out[MN * MO];
} mm_ctx;

static void mm_ref(mm_ctx *c)
{
    for (int n = 0; n < MN; n++)
        for (int o = 0; o < MO; o++) {
            double s = c->b[o];
            for (int i = 0; i < MI; i++)
                s += c->x[n * MI + i] * c->w[o * MI + i];
            c->out[n * MO + o] = s;
        }
}

static double mm_loss(void *p)
{
    mm_ctx *c = p;
    mm_ref(c);
    double s = 0;
    for (int i = 0; i < MN * MO; i++)
        s += c->out[i] * c->r[i];
    return s;
}

static void test_matmul(void **state)
{
    (void)state;
    mm_ctx c;
    float x[MN * MI], w[MO * MI], b[MO], r[MN * MO], out[MN * MO];
    fill(c.x, x, MN * MI, 5), fill(c.w, w, MO * MI, 6), fill(c.b, b, MO, 7);
    fill(c.r, r, MN * MO, 8);
    K->matmul_fwd(out, x, w, b, MN, MI, MO);
    mm_ref(&c);
    check_close("matmul fwd", out, c.out, MN * MO, 1e-5);
    float dx[MN * MI] = {0}, dw[MO * MI] = {0}, db[MO] = {0};
    K->matmul_bwd(dx, dw, db, r, x, w, MN, MI, MO);
    check_grad("matmul dinp", c.x, MN * MI, dx, mm_loss, &c);
    check_grad("matmul dw", c.w, MO * MI, dw, mm_loss, &c);
    check_grad("matmul dbias", c.b, MO, db, mm_loss, &c);
    /* without bias */
    K->matmul_fwd(out, x, w, NULL, MN, MI, MO);
    memset(c.b, 0, sizeof c.b);
    mm_ref(&c);
    check_close("matmul fwd (no bias)", out, c.out, MN * MO, 1e-5);
}

/* A larger matmul with 1 and 2 threads: the same bits. */
static void test_matmul_threads(void **state)
{
    (void)state;
    int N = 130, IC = 100, OC = 150; /* enough work to run in parallel */
    size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    double *tmp = malloc((nx + nw + no + OC) * sizeof(double));
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *r = malloc(no * 4), *b = malloc(OC * 4);
    fill(tmp, x, nx, 9), fill(tmp, w, nw, 10), fill(tmp, r, no, 11), fill(tmp, b, OC, 12);
    float *res[2][4];
    for (int th = 0; th < 2; th++) {
        ftc_kernels_cpu_set_threads(th + 1);
        res[th][0] = malloc(no * 4);
        res[th][1] = calloc(nx, 4);
        res[th][2] = calloc(nw, 4);
        res[th][3] = calloc(OC, 4);
        K->matmul_fwd(res[th][0], x, w, b, N, IC, OC);
        K->matmul_bwd(res[th][1], res[th][2], res[th][3], r, x, w, N, IC, OC);
    }
    assert_memory_equal(res[0][0], res[1][0], no * 4);
    assert_memory_equal(res[0][1], res[1][1], nx * 4);
    assert_memory_equal(res[0][2], res[1][2], nw * 4);
    assert_memory_equal(res[0][3], res[1][3], OC * 4);
    for (int th = 0; th < 2; th++)
        for (int i = 0; i < 4; i++)
            free(res[th][i]);
    free(tmp), free(x), free(w), free(r), free(b);
    ftc_kernels_cpu_set_threads(2);
}

/* ---- attention ---------------------------------------------------------------------- */

enum { AB = 2, AT = 5, AC = 8, ANH = 2 };
typedef struct {
    double qkv[AB * AT * 3 * AC], r[AB * AT * AC], out[AB * AT * AC];
} at_ctx;

static void at_ref(at_ctx *c)
{
    int hs = AC / ANH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < AB; b++)
        for (int t = 0; t < AT; t++)
            for (int h = 0; h < ANH; h++) {
                const double *q = c->qkv + (b * AT + t) * 3 * AC + h * hs;
                double pre[AT], m = -1e300, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = c->qkv + (b * AT + t2) * 3 * AC + AC + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    pre[t2] = s * scale;
                    if (pre[t2] > m)
                        m = pre[t2];
                }
                for (int t2 = 0; t2 <= t; t2++)
                    sum += (pre[t2] = exp(pre[t2] - m));
                double *o = c->out + (b * AT + t) * AC + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *v = c->qkv + (b * AT + t2) * 3 * AC + 2 * AC + h * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += pre[t2] / sum * v[i];
                }
            }
}

static double at_loss(void *p)
{
    at_ctx *c = p;
    at_ref(c);
    double s = 0;
    for (int i = 0; i < AB * AT * AC; i++)
        s += c->out[i] * c->r[i];
    return s;
}

static void test_attention(void **state)
{
    (void)state;
    at_ctx c;
    float qkv[AB * AT * 3 * AC], r[AB * AT * AC], out[AB * AT * AC], att[AB * ANH * AT * AT];
    float scratch[AB * ANH * AT], dqkv[AB * AT * 3 * AC] = {0};
    fill(c.qkv, qkv, AB * AT * 3 * AC, 13), fill(c.r, r, AB * AT * AC, 14);
    K->attention_fwd(out, att, qkv, AB, AT, AC, ANH);
    at_ref(&c);
    check_close("attention fwd", out, c.out, AB * AT * AC, 1e-5);
    /* causal: the upper triangle of att is 0, rows sum to 1 */
    for (int r0 = 0; r0 < AB * ANH; r0++)
        for (int t = 0; t < AT; t++) {
            double s = 0;
            for (int t2 = 0; t2 < AT; t2++) {
                float a = att[(r0 * AT + t) * AT + t2];
                if (t2 > t)
                    assert_true(a == 0.0f);
                s += a;
            }
            assert_true(fabs(s - 1.0) < 1e-5);
        }
    K->attention_bwd(dqkv, scratch, r, qkv, att, AB, AT, AC, ANH);
    check_grad("attention dqkv", c.qkv, AB * AT * 3 * AC, dqkv, at_loss, &c);
}

/* ---- gelu, residual ------------------------------------------------------------------ */

enum { GN = 64 };
typedef struct {
    double x[GN], r[GN];
} ge_ctx;

static double gelu_d(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ge_loss(void *p)
{
    ge_ctx *c = p;
    double s = 0;
    for (int i = 0; i < GN; i++)
        s += gelu_d(c->x[i]) * c->r[i];
    return s;
}

static void test_gelu_residual(void **state)
{
    (void)state;
    ge_ctx c;
    float x[GN], r[GN], out[GN], dx[GN] = {0};
    fill(c.x, x, GN, 15), fill(c.r, r, GN, 16);
    for (int i = 0; i < GN; i++)
        x[i] *= 4.0f, c.x[i] = x[i]; /* cover [-4, 4] */
    K->gelu_fwd(out, x, GN);
    double want[GN];
    for (int i = 0; i < GN; i++)
        want[i] = gelu_d(c.x[i]);
    check_close("gelu fwd", out, want, GN, 1e-6);
    K->gelu_bwd(dx, x, r, GN);
    check_grad("gelu dinp", c.x, GN, dx, ge_loss, &c);
    K->residual_fwd(out, x, r, GN);
    for (int i = 0; i < GN; i++)
        assert_true(out[i] == x[i] + r[i]);
}

/* ---- embedding ---------------------------------------------------------------------------- */

enum { EB = 2, ET = 4, EC = 6, EV = 5 };
typedef struct {
    double wte[EV * EC], wpe[ET * EC], r[EB * ET * EC];
    int32_t tok[EB * ET];
} em_ctx;

static double em_loss(void *p)
{
    em_ctx *c = p;
    double s = 0;
    for (int bt = 0; bt < EB * ET; bt++)
        for (int i = 0; i < EC; i++)
            s += (c->wte[c->tok[bt] * EC + i] + c->wpe[(bt % ET) * EC + i]) * c->r[bt * EC + i];
    return s;
}

static void test_embedding(void **state)
{
    (void)state;
    em_ctx c;
    float wte[EV * EC], wpe[ET * EC], r[EB * ET * EC], out[EB * ET * EC];
    float dwte[EV * EC] = {0}, dwpe[ET * EC] = {0};
    fill(c.wte, wte, EV * EC, 17), fill(c.wpe, wpe, ET * EC, 18), fill(c.r, r, EB * ET * EC, 19);
    const int32_t tok[EB * ET] = {0, 3, 3, 1, 4, 0, 2, 3}; /* repeats: the scatter-add */
    memcpy(c.tok, tok, sizeof tok);
    K->embed_fwd(out, tok, wte, wpe, EB, ET, EC);
    for (int bt = 0; bt < EB * ET; bt++)
        for (int i = 0; i < EC; i++)
            assert_true(out[bt * EC + i] == wte[tok[bt] * EC + i] + wpe[(bt % ET) * EC + i]);
    K->embed_bwd(dwte, dwpe, r, tok, EB, ET, EC);
    check_grad("embedding dwte", c.wte, EV * EC, dwte, em_loss, &c);
    check_grad("embedding dwpe", c.wpe, ET * EC, dwpe, em_loss, &c);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

enum { CN = 6, CV = 11 };
typedef struct {
    double z[CN * CV];
    int32_t tg[CN];
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    double s = 0;
    for (int n = 0; n < CN; n++) {
        double m = -1e300, sum = 0;
        for (int i = 0; i < CV; i++)
            m = fmax(m, c->z[n * CV + i]);
        for (int i = 0; i < CV; i++)
            sum += exp(c->z[n * CV + i] - m);
        s += log(sum) - (c->z[n * CV + c->tg[n]] - m);
    }
    return s / CN;
}

static void test_crossentropy(void **state)
{
    (void)state;
    ce_ctx c;
    float z[CN * CV], probs[CN * CV], losses[CN], dz[CN * CV] = {0};
    fill(c.z, z, CN * CV, 20);
    for (int i = 0; i < CN * CV; i++)
        z[i] *= 5.0f, c.z[i] = z[i];
    z[3] = c.z[3] = 80.0f; /* a large logit: no overflow in the softmax */
    const int32_t tg[CN] = {0, 10, 5, 5, 1, 7};
    memcpy(c.tg, tg, sizeof tg);
    K->crossentropy_fwd(losses, probs, z, tg, CN, CV);
    double mean = 0;
    for (int n = 0; n < CN; n++) {
        double ps = 0;
        for (int i = 0; i < CV; i++)
            ps += probs[n * CV + i];
        assert_true(fabs(ps - 1.0) < 1e-5);
        mean += losses[n];
        assert_true(isfinite(losses[n]));
    }
    assert_true(fabs(mean / CN - ce_loss(&c)) < 1e-5 * (1 + ce_loss(&c)));
    K->crossentropy_bwd(dz, probs, tg, 1.0f / CN, CN, CV);
    check_grad("crossentropy dlogits", c.z, CN * CV, dz, ce_loss, &c);
}

/* ---- AdamW, casts ---------------------------------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    enum { AN = 37 };
    double tmp[AN];
    float p[AN], m[AN] = {0}, v[AN] = {0}, g[AN];
    double pd[AN], md[AN] = {0}, vd[AN] = {0};
    fill(pd, p, AN, 21);
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    for (int t = 1; t <= 5; t++) {
        fill(tmp, g, AN, 30 + (uint64_t)t);
        K->adamw(p, m, v, g, AN, lr, b1, b2, eps, wd, t, gs);
        for (int i = 0; i < AN; i++) {
            double gi = (double)g[i] * gs;
            md[i] = b1 * md[i] + (1 - (double)b1) * gi;
            vd[i] = b2 * vd[i] + (1 - (double)b2) * gi * gi;
            double mh = md[i] / (1 - pow(b1, t)), vh = vd[i] / (1 - pow(b2, t));
            pd[i] -= lr * (mh / (sqrt(vh) + eps) + wd * pd[i]);
        }
    }
    check_close("adamw params", p, pd, AN, 1e-5);
    check_close("adamw m", m, md, AN, 1e-5);
    check_close("adamw v", v, vd, AN, 1e-5);
}

static void test_casts(void **state)
{
    (void)state;
    const float in[] = {1.0f, -2.5f, 0.0f, 3.14159265f, 1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f,
                        1e-40f, INFINITY, NAN};
    /* 1+2^-8 is a tie between 1 and 1+2^-7: even -> 1; 1+2^-7+2^-8 rounds up to 1+2^-6 */
    const float want[] = {1.0f, -2.5f, 0.0f, 3.140625f, 1.0f, 1.0f + 0x1p-6f, 0.0f, INFINITY, NAN};
    enum { NC = sizeof in / sizeof in[0] };
    uint16_t h[NC];
    float back[NC];
    K->f32_to_bf16(h, in, NC);
    K->bf16_to_f32(back, h, NC);
    for (int i = 0; i < NC; i++) {
        if (isnan(want[i]))
            assert_true(isnan(back[i]));
        else if (i == 6)
            assert_true(fabsf(back[i]) < 1e-38f); /* a subnormal keeps its top bits */
        else
            assert_true(back[i] == want[i]);
    }
}

static void test_select(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    assert_ptr_equal(ftc_kernels_select("cpu", &err), ftc_kernels_cpu());
    assert_non_null(ftc_kernels_select("auto", &err));
    assert_null(ftc_kernels_select("tpu", &err));
    assert_int_equal(err.code, FTC_EINVAL);
    if (!ftc_kernels_cuda()) {
        assert_null(ftc_kernels_select("cuda", &err));
        assert_int_equal(err.code, FTC_EUNSUPPORTED);
    }
    const ftc_kernels_t *k = ftc_kernels_cpu();
    assert_int_equal(k->struct_size, sizeof(ftc_kernels_t));
    assert_string_equal(k->name, "cpu");
}

int main(void)
{
    K = ftc_kernels_cpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),    cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_threads), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_gelu_residual), cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_crossentropy), cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_casts),        cmocka_unit_test(test_select),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
