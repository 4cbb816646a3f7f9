/*
 * kernels_cpu.c — the CPU backend of the trainer's operations (kernels.h):
 * plain C11 loops, cache-blocked where it pays (the matmuls), parallel with
 * OpenMP over disjoint outputs.
 *
 * Determinism: every output element is produced by one thread, and every sum
 * runs in an order fixed by the shapes alone (sequential, or 8 fixed lanes
 * folded by a fixed tree in the dot products), so results do not depend on the
 * thread count. The build uses ISO C mode, where GCC does not contract a*b+c
 * into FMAs, so the bits do not depend on -march either.
 */
#include "trainer/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Blocking of the matmuls: rows of the input, and rows of the weight, per
 * tile. A weight tile of 64 rows x 768 floats is 192 KiB (fits L2). */
#define FTC__MM_NB 16
#define FTC__MM_OB 64

/* Below this much work a parallel region costs more than it saves (and on
 * a loaded machine, much more): the loop runs on the calling thread. */
#define FTC__PAR_MIN ((size_t)1 << 18)
#define FTC__PAR(work) if ((size_t)(work) >= FTC__PAR_MIN)

static inline int ftc__min(int a, int b)
{
    return a < b ? a : b;
}

/* ---- embeddings ------------------------------------------------------------ */

static void ftc__embed_fwd(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                           int B, int T, int C)
{
#pragma omp parallel for schedule(static) FTC__PAR((size_t)B * T * C)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        float *o = out + (size_t)bt * C;
        const float *e = wte + (size_t)tokens[bt] * C, *p = wpe + (size_t)t * C;
        for (int i = 0; i < C; i++)
            o[i] = e[i] + p[i];
    }
}

static void ftc__embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                           int B, int T, int C)
{
    /* A scatter-add: two rows may share a token, so one thread, in (b, t) order. */
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *d = dout + (size_t)bt * C;
        float *e = dwte + (size_t)tokens[bt] * C, *p = dwpe + (size_t)t * C;
        for (int i = 0; i < C; i++) {
            e[i] += d[i];
            p[i] += d[i];
        }
    }
}

/* ---- layernorm --------------------------------------------------------------- */

static void ftc__layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C)
{
    const float eps = 1e-5f;
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * C)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++)
            m += x[i];
        m /= (float)C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++)
            o[i] = (s * (x[i] - m)) * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

static void ftc__layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * C)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dn = w[i] * d[i];
            dnorm_mean += dn;
            dnorm_norm_mean += dn * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        float *di = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dn = w[i] * d[i];
            di[i] += (dn - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    /* Parameter gradients sum over rows: columns in parallel, rows in order. */
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * C)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = ftc__min(c0 + 64, C);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int i = c0; i < c1; i++) {
                db[i] += d[i];
                dw[i] += ((x[i] - m) * s) * d[i];
            }
        }
    }
}

/* ---- matmul ------------------------------------------------------------------ */

/* x rounded to the nearest bf16 (even on ties; NaN stays NaN), as a float:
 * the "cpu-bf16" matmuls round every operand with it, then multiply and
 * accumulate in fp32 as a tensor core does with bf16 inputs. */
static inline float ftc__rbf(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u = (u | 0x00400000u) & 0xffff0000u;
    else
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
/* Rounds only in the bf16 flavour (bf is a constant at each inlined call). */
#define FTC__OP(bf, x) ((bf) ? ftc__rbf(x) : (x))

/* Dot products in 8 fixed lanes folded by a fixed tree: vectorizable, and
 * the same bits whatever the caller's blocking (attention uses them). */
static inline float ftc__fold8(const float a[8])
{
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

static inline float ftc__dot(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += a[i] * b[i];
    return ftc__fold8(acc);
}

/* Forward: each thread takes blocks of FTC__MM_OT outputs, transposes that
 * slice of the weight into a scratch [IC][OT] once, and then, for every row,
 * accumulates OT outputs at once over IC in order (a vectorizable axpy). Each
 * output is sum_i x[i]*w[o,i] for i = 0..IC-1, sequentially from 0 — the
 * fallback without scratch computes exactly the same sums. */
#define FTC__MM_OT 32

static inline void ftc__matmul_fwd_impl(float *out, const float *inp, const float *w,
                                        const float *bias, int N, int IC, int OC, const int bf)
{
    int nob = (OC + FTC__MM_OT - 1) / FTC__MM_OT;
#pragma omp parallel FTC__PAR((size_t)N * IC * OC / 4)
    {
        float *wt = malloc((size_t)IC * FTC__MM_OT * sizeof(float));
#pragma omp for schedule(static)
        for (int ob = 0; ob < nob; ob++) {
            int o0 = ob * FTC__MM_OT, no = ftc__min(FTC__MM_OT, OC - o0);
            if (!wt) { /* out of memory for the scratch: the same sums, slower */
                for (int n = 0; n < N; n++)
                    for (int j = 0; j < no; j++) {
                        const float *x = inp + (size_t)n * IC, *wr = w + (size_t)(o0 + j) * IC;
                        float s = 0.0f;
                        for (int i = 0; i < IC; i++)
                            s += FTC__OP(bf, x[i]) * FTC__OP(bf, wr[i]);
                        out[(size_t)n * OC + o0 + j] = bias ? s + bias[o0 + j] : s;
                    }
                continue;
            }
            for (int i = 0; i < IC; i++)
                for (int j = 0; j < FTC__MM_OT; j++)
                    wt[(size_t)i * FTC__MM_OT + j] =
                        j < no ? FTC__OP(bf, w[(size_t)(o0 + j) * IC + i]) : 0.0f;
            for (int n = 0; n < N; n++) {
                float acc[FTC__MM_OT];
                for (int j = 0; j < FTC__MM_OT; j++)
                    acc[j] = 0.0f;
                const float *x = inp + (size_t)n * IC;
                for (int i = 0; i < IC; i++) {
                    float xv = FTC__OP(bf, x[i]);
                    const float *wr = wt + (size_t)i * FTC__MM_OT;
                    for (int j = 0; j < FTC__MM_OT; j++)
                        acc[j] += xv * wr[j];
                }
                float *y = out + (size_t)n * OC + o0;
                for (int j = 0; j < no; j++)
                    y[j] = bias ? acc[j] + bias[o0 + j] : acc[j];
            }
        }
        free(wt);
    }
}

static void ftc__matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                            int IC, int OC)
{
    ftc__matmul_fwd_impl(out, inp, w, bias, N, IC, OC, 0);
}

static void ftc__matmul_fwd_bf16(float *out, const float *inp, const float *w, const float *bias,
                                 int N, int IC, int OC)
{
    ftc__matmul_fwd_impl(out, inp, w, bias, N, IC, OC, 1);
}

/* dbias sums dout unrounded in both flavours (as the CUDA bf16 flavour does). */
static inline void ftc__matmul_bwd_impl(float *dinp, float *dw, float *dbias, const float *dout,
                                        const float *inp, const float *w, int N, int IC, int OC,
                                        const int bf)
{
    /* dinp[n,:] += sum over o (in order) of dout[n,o] * w[o,:] */
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * IC * OC / 4)
    for (int nb = 0; nb < N; nb += FTC__MM_NB) {
        int n1 = ftc__min(nb + FTC__MM_NB, N);
        for (int ob = 0; ob < OC; ob += FTC__MM_OB) {
            int o1 = ftc__min(ob + FTC__MM_OB, OC);
            for (int n = nb; n < n1; n++) {
                float *dx = dinp + (size_t)n * IC;
                const float *dy = dout + (size_t)n * OC;
                for (int o = ob; o < o1; o++) {
                    float d = FTC__OP(bf, dy[o]);
                    const float *wr = w + (size_t)o * IC;
                    for (int i = 0; i < IC; i++)
                        dx[i] += d * FTC__OP(bf, wr[i]);
                }
            }
        }
    }
    /* dw[o,:] += sum over n (in order) of dout[n,o] * inp[n,:]; dbias likewise */
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * IC * OC / 4)
    for (int ob = 0; ob < OC; ob += 8) {
        int o1 = ftc__min(ob + 8, OC);
        for (int nb = 0; nb < N; nb += 64) {
            int n1 = ftc__min(nb + 64, N);
            for (int o = ob; o < o1; o++) {
                float *dwr = dw + (size_t)o * IC;
                for (int n = nb; n < n1; n++) {
                    float d = FTC__OP(bf, dout[(size_t)n * OC + o]);
                    const float *x = inp + (size_t)n * IC;
                    for (int i = 0; i < IC; i++)
                        dwr[i] += d * FTC__OP(bf, x[i]);
                }
                if (dbias) {
                    float s = dbias[o];
                    for (int n = nb; n < n1; n++)
                        s += dout[(size_t)n * OC + o];
                    dbias[o] = s;
                }
            }
        }
    }
}

static void ftc__matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC)
{
    ftc__matmul_bwd_impl(dinp, dw, dbias, dout, inp, w, N, IC, OC, 0);
}

static void ftc__matmul_bwd_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int IC, int OC)
{
    ftc__matmul_bwd_impl(dinp, dw, dbias, dout, inp, w, N, IC, OC, 1);
}

/* ---- attention --------------------------------------------------------------- */

static void ftc__attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
#pragma omp parallel for collapse(2) schedule(static) FTC__PAR((size_t)B * NH * T * T * hs / 8)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float s = ftc__dot(q, k, hs) * scale;
                    a[t2] = s;
                    if (s > maxv)
                        maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(a[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++)
                    a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v =
                        qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++)
                        o[i] += w * v[i];
                }
            }
        }
    }
}

static void ftc__attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t C3 = (size_t)C * 3;
    /* One (b, h) per thread: it owns that head's slices of dqkv. */
#pragma omp parallel for collapse(2) schedule(static) FTC__PAR((size_t)B * NH * T * T * hs / 8)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *da = scratch + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                /* through out = sum att * v */
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t row = ((size_t)b * T + t2) * C3 + (size_t)h * hs;
                    const float *v = qkv + row + 2 * (size_t)C;
                    float *dv = dqkv + row + 2 * (size_t)C;
                    da[t2] = ftc__dot(dy, v, hs);
                    for (int i = 0; i < hs; i++)
                        dv[i] += a[t2] * dy[i];
                }
                /* through the softmax, in place: d preatt = att (datt - sum att datt) */
                float s = 0.0f;
                for (int t2 = 0; t2 <= t; t2++)
                    s += a[t2] * da[t2];
                for (int t2 = 0; t2 <= t; t2++)
                    da[t2] = a[t2] * (da[t2] - s) * scale;
                /* through preatt = q . k * scale */
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t row = ((size_t)b * T + t2) * C3 + (size_t)h * hs;
                    const float *k = qkv + row + C;
                    float *dk = dqkv + row + C;
                    float d = da[t2];
                    for (int i = 0; i < hs; i++) {
                        dq[i] += d * k[i];
                        dk[i] += d * q[i];
                    }
                }
            }
        }
    }
}

/* ---- pointwise ----------------------------------------------------------------- */

#define FTC__GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static void ftc__gelu_fwd(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = FTC__GELU_K * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

static void ftc__gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = FTC__GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float g =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * FTC__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

static void ftc__residual_fwd(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* ---- loss ------------------------------------------------------------------------ */

static void ftc__crossentropy_fwd(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V)
{
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * V)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++)
            if (z[i] > maxv)
                maxv = z[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            float e = expf(z[i] - maxv);
            p[i] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++)
            p[i] *= inv;
        /* from the logits, not log(p): p may underflow to 0 */
        losses[n] = (float)(log(sum) - (double)(z[targets[n]] - maxv));
    }
}

static void ftc__crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V)
{
#pragma omp parallel for schedule(static) FTC__PAR((size_t)N * V)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        int t = targets[n];
        for (int i = 0; i < V; i++)
            d[i] += (p[i] - (i == t ? 1.0f : 0.0f)) * dloss;
    }
}

/* ---- optimizer ------------------------------------------------------------------- */

static void ftc__adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                       float b2, float eps, float wd, int t, float grad_scale)
{
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1, vh = vi / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

/* ---- casts ------------------------------------------------------------------------- */

static void ftc__f32_to_bf16(uint16_t *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &inp[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
            out[i] = (uint16_t)((u >> 16) | 0x40u);
        else
            out[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

static void ftc__bf16_to_f32(float *out, const uint16_t *inp, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)inp[i] << 16;
        memcpy(&out[i], &u, 4);
    }
}

/* ---- memory: host memory, malloc and memcpy ----------------------------------------- */

static void *ftc__mem_alloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

static void ftc__mem_free(void *p)
{
    free(p);
}

static void ftc__mem_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
}

static void ftc__mem_copy(void *dst, const void *src, size_t bytes, int kind)
{
    (void)kind;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void ftc__sync(void) {}

static void ftc__scale(float *x, float s, size_t n)
{
#pragma omp parallel for schedule(static) FTC__PAR(n)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static double ftc__sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

#define FTC__CPU_TABLE(nm, bf, mmf, mmb)                                                           \
    {                                                                                              \
        .struct_size = sizeof(ftc_kernels_t), .version = FTC_KERNELS_VERSION, .name = nm,          \
        .device = -1, .matmul_bf16 = bf, .device_desc = "host memory",                             \
        .mem_alloc = ftc__mem_alloc, .mem_free = ftc__mem_free, .mem_zero = ftc__mem_zero,         \
        .mem_copy = ftc__mem_copy, .sync = ftc__sync, .scale = ftc__scale, .sumsq = ftc__sumsq,    \
        .embed_fwd = ftc__embed_fwd, .embed_bwd = ftc__embed_bwd,                                  \
        .layernorm_fwd = ftc__layernorm_fwd, .layernorm_bwd = ftc__layernorm_bwd,                  \
        .matmul_fwd = mmf, .matmul_bwd = mmb, .attention_fwd = ftc__attention_fwd,                 \
        .attention_bwd = ftc__attention_bwd, .gelu_fwd = ftc__gelu_fwd, .gelu_bwd = ftc__gelu_bwd, \
        .residual_fwd = ftc__residual_fwd, .crossentropy_fwd = ftc__crossentropy_fwd,              \
        .crossentropy_bwd = ftc__crossentropy_bwd, .adamw = ftc__adamw,                            \
        .f32_to_bf16 = ftc__f32_to_bf16, .bf16_to_f32 = ftc__bf16_to_f32,                          \
    }

static const ftc_kernels_t ftc__cpu_bf16 =
    FTC__CPU_TABLE("cpu-bf16", 1, ftc__matmul_fwd_bf16, ftc__matmul_bwd_bf16);

const ftc_kernels_t *ftc_kernels_cpu_bf16(void)
{
    return &ftc__cpu_bf16;
}

static const ftc_kernels_t ftc__cpu = FTC__CPU_TABLE("cpu", 0, ftc__matmul_fwd, ftc__matmul_bwd);

const ftc_kernels_t *ftc_kernels_cpu(void)
{
    return &ftc__cpu;
}

int ftc_kernels_cpu_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void ftc_kernels_cpu_set_threads(int n)
{
#ifdef _OPENMP
    if (n >= 1)
        omp_set_num_threads(n);
#else
    (void)n;
#endif
}
