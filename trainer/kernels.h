/*
 * kernels.h — the operations of the reference trainer, as one ops table that
 * every compute backend implements with the same semantics.
 *
 * The model (trainer/model.c) calls only these functions, through a table
 * chosen at run time, so the CUDA backend (trainer/kernels_cuda.cu) plugs in
 * without an #ifdef in the model. The CPU table is always present.
 *
 * Backends ("flavours"):
 *   "cpu"        C loops (OpenMP), fp32;
 *   "cpu-bf16"   the same, but the matmuls round both operands to bf16
 *                before multiplying in fp32 (emulates bf16 tensor-core
 *                compute with fp32 accumulation, so mixed precision is
 *                testable without a GPU);
 *   "cuda"       CUDA kernels, matmuls through cuBLAS in fp32 (TF32 off
 *                unless FTC_CUDA_TF32=1 is in the environment);
 *   "cuda-bf16"  the same, matmuls through cublasGemmEx with bf16 operands
 *                (cast into a scratch) and fp32 accumulation and output.
 * In every flavour the parameters, gradients, activations and AdamW state
 * stay fp32 (master weights); only matmul operands are rounded.
 *
 * Memory: every tensor a kernel touches lives in the BACKEND's memory
 * (host memory for the CPU tables, device memory for CUDA), allocated with
 * mem_alloc. Host code reaches it only through mem_copy (and sumsq, which
 * returns its result to the host). Token and target arrays passed to the
 * kernels are backend memory too.
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
 * Run-to-run determinism of the CUDA backend: no kernel uses atomics; every
 * reduction (layernorm rows and columns, bias and embedding gradients,
 * softmax, cross-entropy, sumsq) is a fixed tree or a fixed sequential
 * order chosen by the shapes alone, and cuBLAS gives the same bits on the
 * same GPU model, toolkit and stream (its documented guarantee; atomics
 * mode left off). So EVERY op of "cuda" and "cuda-bf16" is bitwise
 * deterministic from run to run on one GPU model and toolkit version. Across
 * backends the results agree within the tolerances of docs/trainer.md, not
 * bitwise (the GPU contracts a*b+c into FMAs and sums in other orders),
 * except embed_fwd, embed_bwd, residual_fwd, scale, crossentropy_bwd, adamw
 * and the casts, which match the CPU bit for bit (no FMA contraction: the
 * .cu writes them with __fmul_rn / __fadd_rn).
 *
 * Kernels cannot fail: shapes are checked by the model when it is built. A
 * CUDA error inside a kernel (a device fault) prints the call and aborts.
 * mem_alloc is the one operation that can fail (NULL).
 * Thread-safety: a table is immutable; CPU kernels may run concurrently on
 * disjoint outputs; the CUDA backend is driven by one host thread at a time
 * (it shares a cuBLAS handle and scratch buffers).
 */
#ifndef FTC_TRAINER_KERNELS_H
#define FTC_TRAINER_KERNELS_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: device memory operations (mem_*, sync), scale, sumsq, device and
 * matmul_bf16 fields, the bf16 flavours. */
#define FTC_KERNELS_VERSION 2

/* mem_copy directions. */
enum { FTC_COPY_H2D = 1, FTC_COPY_D2H = 2, FTC_COPY_D2D = 3 };

/* Dense peak rates of the H200 SXM (NVIDIA datasheet, without sparsity),
 * the denominators of the MFU that bench_gpu and `ftc train --bench`
 * print: fp32 matmuls count against TF32's peak only when TF32 is on. */
#define FTC_H200_PEAK_BF16_TFLOPS 989.0
#define FTC_H200_PEAK_TF32_TFLOPS 494.0
#define FTC_H200_PEAK_FP32_TFLOPS 67.0

typedef struct ftc_kernels {
    uint32_t struct_size; /* sizeof(ftc_kernels_t) of the backend's build */
    uint32_t version;     /* FTC_KERNELS_VERSION */
    const char *name;     /* "cpu", "cpu-bf16", "cuda", "cuda-bf16" */
    int device;           /* where mem_alloc puts buffers: -1 (FTC_SNAP_HOST) host memory,
                           * else the CUDA device id (for ftc_snap_add) */
    int matmul_bf16;      /* 1: matmul operands are rounded to bf16 (fp32 accumulation) */
    const char *device_desc; /* one line: "host", "NVIDIA H200 (sm_90, 139 GiB)" */

    /* ---- memory (version 2) ---- */
    /* bytes of backend memory (contents undefined), NULL when out of memory;
     * bytes 0 gives a valid pointer. */
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p); /* NULL is a no-op */
    void (*mem_zero)(void *p, size_t bytes); /* done when it returns, like mem_copy */
    /* kind FTC_COPY_*; synchronous for the host: after an D2H copy the bytes
     * are in host memory, after H2D the host buffer may be reused. Host
     * buffers may be ordinary (pageable) memory. */
    void (*mem_copy)(void *dst, const void *src, size_t bytes, int kind);
    /* waits until every kernel issued so far has finished: kernels are
     * asynchronous on CUDA, so call it before another stream (the snapshot's
     * side stream) or the host reads what they wrote, and for timing. */
    void (*sync)(void);

    /* x *= s (n elements). */
    void (*scale)(float *x, float s, size_t n);
    /* sum of x[i]^2 in double (fixed order), returned to the host. The CPU
     * sums sequentially from x[0]. */
    double (*sumsq)(const float *x, size_t n);

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
/* The CPU backend with bf16-rounded matmul operands. Never NULL. */
const ftc_kernels_t *ftc_kernels_cpu_bf16(void);
/* The CUDA backends of this build on the current CUDA device, or NULL (a
 * build without CUDA, no device, or cuBLAS failed to start: why says which;
 * may be NULL). The first call initializes CUDA and cuBLAS. Thread-safe. */
const ftc_kernels_t *ftc_kernels_cuda(void);
const ftc_kernels_t *ftc_kernels_cuda_bf16(void);
const ftc_kernels_t *ftc_kernels_cuda_probe(bool bf16, ftc_err_t *why);

/* Binds this process's CUDA backend (and what else uses the current CUDA
 * device, e.g. NCCL) to device local_rank % (number of devices), the usual
 * one-GPU-per-local-rank rule: call it before the first ftc_kernels_cuda*
 * call, which binds the backend to the current device for good. Returns the
 * number of devices (> 0) and *device; FTC_EUNSUPPORTED without CUDA or
 * without a device (the message says which), FTC_EINVAL when the backend is
 * already bound to another device, FTC_ECUDA when cudaSetDevice fails. Not
 * thread-safe: call it from the main thread at start-up. */
int ftc_kernels_cuda_use_device(int local_rank, int *device, ftc_err_t *err);

/* Picks a backend by name: "cpu", "cpu-bf16", "cuda", "cuda-bf16", "auto"
 * (CUDA when a device is present, else CPU) or "auto-bf16". Logs one INFO
 * line naming the backend chosen (and, for auto, why not CUDA). NULL with
 * FTC_EUNSUPPORTED in err when the named one is absent, FTC_EINVAL for an
 * unknown name. Thread-safe. */
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
