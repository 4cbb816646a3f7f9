/*
 * kernels.h — the operations of the reference trainer, as one ops table that
 * every compute backend implements with the same semantics.
 *
 * The model (trainer/model.c) calls only these functions, through a table
 * chosen at run time, so the CUDA backend (.cu kernels, later) plugs in
 * without an #ifdef in the model. The CPU table is always present.
 *
 * Conventions, shared by every backend:
 *   - all tensors are fp32, row-major, contiguous; B batch, T time, C
 *     channels, NH heads, V vocabulary, N = B*T rows;
 *   - linear layers hold their weight as [OC, IC] (out x in, as nn.Linear
 *     and llm.c) and compute out = inp @ W^T + bias;
 *   - backward functions ACCUMULATE (+=) into parameter gradients and into
 *     the gradient of their inputs, so residual branches and gradient
 *     accumulation need no extra adds; callers zero what must start at 0;
 *   - every reduction runs in a fixed order that depends only on the shapes,
 *     never on the number of threads: the same inputs give the same bits on
 *     1 or 16 cores (the deterministic mode, docs/trainer.md, relies on it).
 *
 * Kernels cannot fail: shapes are checked by the model when it is built.
 * Thread-safety: a table is immutable; kernels may run concurrently on
 * disjoint outputs.
 */
#ifndef FTC_TRAINER_KERNELS_H
#define FTC_TRAINER_KERNELS_H

#include "core/err.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_KERNELS_VERSION 1

typedef struct ftc_kernels {
    uint32_t struct_size; /* sizeof(ftc_kernels_t) of the backend's build */
    uint32_t version;     /* FTC_KERNELS_VERSION */
    const char *name;     /* "cpu", "cuda" */

    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] */
    void (*embed_fwd)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                      int T, int C);
    /* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (in b,t order) */
    void (*embed_bwd)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
                      int T, int C);

    /* Per row of C: out = (x - mean) * rstd * w + b; keeps mean and rstd (N each). */
    void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
    void (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C);

    /* out[N,OC] = inp[N,IC] @ w[OC,IC]^T (+ bias[OC] when bias is not NULL). */
    void (*matmul_fwd)(float *out, const float *inp, const float *w, const float *bias, int N,
                       int IC, int OC);
    /* dinp += dout @ w; dw += dout^T @ inp; dbias += column sums of dout (when
     * dbias is not NULL). */
    void (*matmul_bwd)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, int N, int IC, int OC);

    /* Causal multi-head self-attention with softmax. qkv is [B,T,3C] (q, k, v
     * side by side, head h at channels h*C/NH); out is [B,T,C]; att
     * [B,NH,T,T] keeps the softmax weights for the backward pass (the upper
     * triangle is left 0). */
    void (*attention_fwd)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    /* dqkv += d(qkv); scratch holds B*NH*T floats. */
    void (*attention_bwd)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                          const float *att, int B, int T, int C, int NH);

    /* GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) */
    void (*gelu_fwd)(float *out, const float *inp, size_t n);
    void (*gelu_bwd)(float *dinp, const float *inp, const float *dout, size_t n); /* dinp += */

    /* out = a + b (the residual add; its backward is the identity). */
    void (*residual_fwd)(float *out, const float *a, const float *b, size_t n);

    /* Fused softmax + cross-entropy over rows of V: probs = softmax(logits),
     * losses[n] = -log(probs[n, targets[n]]). Targets must be in [0, V). */
    void (*crossentropy_fwd)(float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V);
    /* dlogits += (probs - onehot(targets)) * dloss (dloss: d mean-loss / d loss[n]). */
    void (*crossentropy_bwd)(float *dlogits, const float *probs, const int32_t *targets,
                             float dloss, int N, int V);

    /* AdamW on n elements, step t >= 1 (bias correction), gradient scaled by
     * grad_scale first (clipping), decoupled weight decay wd:
     *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
     *   p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p) */
    void (*adamw)(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                  float b2, float eps, float wd, int t, float grad_scale);

    /* Casts; fp32 -> bf16 rounds to nearest even, NaN stays NaN. */
    void (*f32_to_bf16)(uint16_t *out, const float *inp, size_t n);
    void (*bf16_to_f32)(float *out, const uint16_t *inp, size_t n);
} ftc_kernels_t;

/* The CPU backend (C, OpenMP when the build found it). Never NULL. */
const ftc_kernels_t *ftc_kernels_cpu(void);
/* The CUDA backend of this build, or NULL (no CUDA kernels yet / no GPU). */
const ftc_kernels_t *ftc_kernels_cuda(void);

/* Picks a backend by name: "cpu", "cuda", or "auto" (CUDA when available,
 * else CPU). NULL with FTC_EUNSUPPORTED in err when the named one is absent,
 * FTC_EINVAL for an unknown name. Thread-safe. */
const ftc_kernels_t *ftc_kernels_select(const char *name, ftc_err_t *err);

/* Threads the CPU kernels use (OpenMP's count, or 1 without OpenMP). */
int ftc_kernels_cpu_threads(void);
/* Sets that count (OpenMP's process-wide setting: call it from main() or a
 * test, not from library code; n < 1 is ignored). */
void ftc_kernels_cpu_set_threads(int n);

#ifdef __cplusplus
}
#endif
#endif
