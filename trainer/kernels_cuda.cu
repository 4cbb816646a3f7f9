/*
 * kernels_cuda.cu — the CUDA backends of the trainer's operations
 * (kernels.h): "cuda" (fp32 matmuls through cuBLAS, TF32 off unless
 * FTC_CUDA_TF32=1) and "cuda-bf16" (matmul operands cast to bf16 in a
 * scratch, cublasGemmEx with fp32 accumulation and output).
 *
 * Everything runs on the legacy default stream of the current device, so
 * kernels, cuBLAS calls and mem_copy are ordered without events. Attention
 * is llm.c's fp32 layout: q, k, v permuted to [B, NH, T, hs], scores and
 * att @ v through strided-batched SGEMMs, a causal softmax kernel between.
 *
 * Determinism: no atomics anywhere. Row reductions (layernorm, softmax,
 * cross-entropy) are one warp or one block per row with a fixed shuffle /
 * shared-memory tree; column reductions (layernorm and bias gradients) have
 * 32 lanes per column each summing a fixed stride of rows, folded by a fixed
 * tree; the embedding gradient is a scatter-add done in (b, t) order per
 * (channel, token-group) thread — the CPU's order, so the same bits; sumsq
 * uses a fixed grid of partial sums and one block to finish. Every
 * configuration depends on the shapes only, so every op is bitwise
 * deterministic run to run (cuBLAS: same GPU model, toolkit and stream).
 * Pointwise ops that the header lists as matching the CPU use the _rn
 * intrinsics so nvcc does not contract them into FMAs.
 *
 * Errors: a CUDA or cuBLAS error in a kernel is a device fault: it is
 * printed with the call and the process aborts (kernels cannot fail).
 */
#include "trainer/kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FTC__CU(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "ftc kernels_cuda: %s failed at %s:%d: %s\n", #call, __FILE__,         \
                    __LINE__, cudaGetErrorString(e_));                                             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
#define FTC__CUBLAS(call)                                                                          \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "ftc kernels_cuda: %s failed at %s:%d: cuBLAS status %d\n", #call,     \
                    __FILE__, __LINE__, (int)s_);                                                  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
#define FTC__LAUNCHED() FTC__CU(cudaGetLastError())

static inline unsigned ftc__blocks(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

/* ---- state: the cuBLAS handle and grow-only scratch buffers --------------------- */

enum { S_A, S_B, S_QKV, S_ATT, S_PART, S_NSCRATCH };

static struct {
    pthread_once_t once;
    int ok;
    int device;
    char desc[320];
    char why[256];
    cublasHandle_t blas;
    void *scratch[S_NSCRATCH];
    size_t scratch_size[S_NSCRATCH];
} G = {PTHREAD_ONCE_INIT, 0, 0, "", "", NULL, {NULL}, {0}};

static void *ftc__scratch(int which, size_t bytes)
{
    if (G.scratch_size[which] < bytes) {
        if (G.scratch[which])
            FTC__CU(cudaFree(G.scratch[which])); /* synchronizes: no kernel still reads it */
        G.scratch[which] = NULL;
        G.scratch_size[which] = 0;
        FTC__CU(cudaMalloc(&G.scratch[which], bytes));
        G.scratch_size[which] = bytes;
    }
    return G.scratch[which];
}

/* ---- reductions: fixed trees ----------------------------------------------------------- */

__device__ __forceinline__ float ftc__warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float ftc__warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double ftc__warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sums of blockDim.x (a multiple of 32, <= 1024) threads; every
 * thread gets the result. sh holds 32 values. */
template <typename F> __device__ F ftc__block_sum(F v, F *sh)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (sizeof(F) == 8)
        v = (F)ftc__warp_sum_d((double)v);
    else
        v = (F)ftc__warp_sum((float)v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (F)0;
    if (sizeof(F) == 8)
        v = (F)ftc__warp_sum_d((double)v);
    else
        v = (F)ftc__warp_sum((float)v);
    return v;
}

__device__ float ftc__block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ftc__warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return ftc__warp_max(v);
}

/* Column sums: out[c] += sum over rows n of f(n, c), for C columns. A block
 * is 32 columns x 32 row lanes; lane r sums rows r, r+32, ... in order, then
 * a fixed tree folds the 32 lanes. */
template <typename Fn> __global__ void ftc__colsum_kernel(float *out, int N, int C, Fn f)
{
    __shared__ float sh[32][33];
    int c = blockIdx.x * 32 + threadIdx.x, r = threadIdx.y;
    float s = 0.0f;
    if (c < C)
        for (int n = r; n < N; n += 32)
            s += f(n, c);
    sh[r][threadIdx.x] = s;
    __syncthreads();
    for (int w = 16; w > 0; w >>= 1) {
        if (r < w)
            sh[r][threadIdx.x] += sh[r + w][threadIdx.x];
        __syncthreads();
    }
    if (r == 0 && c < C)
        out[c] += sh[0][threadIdx.x];
}

template <typename Fn> static void ftc__colsum(float *out, int N, int C, Fn f)
{
    ftc__colsum_kernel<<<ftc__blocks((size_t)C, 32), dim3(32, 32)>>>(out, N, C, f);
    FTC__LAUNCHED();
}

/* ---- embeddings ------------------------------------------------------------------------ */

__global__ void ftc__embed_fwd_k(float *out, const int32_t *tokens, const float *wte,
                                 const float *wpe, int T, int C, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    size_t bt = i / (size_t)C;
    int c = (int)(i % (size_t)C), t = (int)(bt % (size_t)T);
    out[i] = __fadd_rn(wte[(size_t)tokens[bt] * C + c], wpe[(size_t)t * C + c]);
}

static void ftc__embed_fwd(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                           int B, int T, int C)
{
    size_t total = (size_t)B * T * C;
    ftc__embed_fwd_k<<<ftc__blocks(total, 256), 256>>>(out, tokens, wte, wpe, T, C, total);
    FTC__LAUNCHED();
}

/* dwte: thread (group g, channel c) walks every (b, t) in order and adds the
 * rows whose token falls in its group: per element, the CPU's order. */
__global__ void ftc__embed_bwd_wte_k(float *dwte, const float *dout, const int32_t *tokens,
                                     int N, int C, int groups)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
    if (c >= C)
        return;
    for (int bt = 0; bt < N; bt++) {
        int tok = tokens[bt];
        if (tok % groups == g) {
            float *e = dwte + (size_t)tok * C + c;
            *e = __fadd_rn(*e, dout[(size_t)bt * C + c]);
        }
    }
}

__global__ void ftc__embed_bwd_wpe_k(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C)
        return;
    float s = dwpe[i];
    for (int b = 0; b < B; b++)
        s = __fadd_rn(s, dout[(size_t)b * T * C + i]);
    dwpe[i] = s;
}

static void ftc__embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                           int B, int T, int C)
{
    int groups = 65536 / (C > 0 ? C : 1);
    groups = groups < 1 ? 1 : groups > 256 ? 256 : groups;
    dim3 grid(ftc__blocks((size_t)C, 128), (unsigned)groups);
    ftc__embed_bwd_wte_k<<<grid, 128>>>(dwte, dout, tokens, B * T, C, groups);
    FTC__LAUNCHED();
    ftc__embed_bwd_wpe_k<<<ftc__blocks((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    FTC__LAUNCHED();
}

/* ---- layernorm: one warp per row ---------------------------------------------------------- */

__global__ void ftc__layernorm_fwd_k(float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C)
{
    int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N)
        return;
    const float *x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32)
        s += x[i];
    float m = ftc__warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        v += d * d;
    }
    v = ftc__warp_sum(v) / (float)C;
    float r = 1.0f / sqrtf(v + 1e-5f);
    float *o = out + (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        o[i] = (r * (x[i] - m)) * w[i] + b[i];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

static void ftc__layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C)
{
    ftc__layernorm_fwd_k<<<ftc__blocks((size_t)N, 8), 256>>>(out, mean, rstd, inp, w, b, N, C);
    FTC__LAUNCHED();
}

__global__ void ftc__layernorm_bwd_dinp_k(float *dinp, const float *dout, const float *inp,
                                          const float *w, const float *mean, const float *rstd,
                                          int N, int C)
{
    int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N)
        return;
    const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float a = 0.0f, bb = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = w[i] * d[i];
        a += dn;
        bb += dn * ((x[i] - m) * s);
    }
    a = ftc__warp_sum(a) / (float)C;
    bb = ftc__warp_sum(bb) / (float)C;
    float *di = dinp + (size_t)n * C;
    for (int i = lane; i < C; i += 32) {
        float norm = (x[i] - m) * s;
        di[i] += (w[i] * d[i] - a - norm * bb) * s;
    }
}

struct ftc__ln_dw {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ float operator()(int n, int c) const
    {
        size_t i = (size_t)n * C + c;
        return ((inp[i] - mean[n]) * rstd[n]) * dout[i];
    }
};
struct ftc__col {
    const float *x;
    int C;
    __device__ float operator()(int n, int c) const { return x[(size_t)n * C + c]; }
};

static void ftc__layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C)
{
    ftc__layernorm_bwd_dinp_k<<<ftc__blocks((size_t)N, 8), 256>>>(dinp, dout, inp, w, mean, rstd,
                                                                   N, C);
    FTC__LAUNCHED();
    ftc__colsum(dw, N, C, ftc__ln_dw{dout, inp, mean, rstd, C});
    ftc__colsum(db, N, C, ftc__col{dout, C});
}

/* ---- matmuls: cuBLAS ------------------------------------------------------------------------- */

__global__ void ftc__to_bf16_k(__nv_bfloat16 *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __float2bfloat16_rn(inp[i]);
}

static const __nv_bfloat16 *ftc__bf16_copy(int which, const float *x, size_t n)
{
    __nv_bfloat16 *s = (__nv_bfloat16 *)ftc__scratch(which, (n ? n : 1) * sizeof *s);
    ftc__to_bf16_k<<<ftc__blocks(n, 256), 256>>>(s, x, n);
    FTC__LAUNCHED();
    return s;
}

/* Row-major C[M,N] = op(A)[M,K] @ op(B)[K,N] + beta C, batched with strides
 * (elements); lda/ldb/ldc are the stored row lengths. Column-major cuBLAS
 * computes C^T = op(B)^T op(A)^T, so the operands swap. bf16: A and B (batch
 * 1 only) are cast into scratch first and multiplied with fp32 accumulation. */
static void ftc__gemm(bool ta, bool tb, int M, int N, int K, const float *A, int lda, long long sA,
                      const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                      long long sC, int batch, bool bf16)
{
    const float alpha = 1.0f;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (bf16 && batch == 1) {
        size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
        const __nv_bfloat16 *a16 = ftc__bf16_copy(S_A, A, na), *b16 = ftc__bf16_copy(S_B, B, nb);
        FTC__CUBLAS(cublasGemmEx(G.blas, ob, oa, N, M, K, &alpha, b16, CUDA_R_16BF, ldb, a16,
                                 CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    } else if (batch == 1) {
        FTC__CUBLAS(cublasSgemm(G.blas, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    } else {
        FTC__CUBLAS(cublasSgemmStridedBatched(G.blas, ob, oa, N, M, K, &alpha, B, ldb, sB, A, lda,
                                              sA, &beta, C, ldc, sC, batch));
    }
}

__global__ void ftc__add_bias_k(float *out, const float *bias, int OC, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        out[i] = __fadd_rn(out[i], bias[i % (size_t)OC]);
}

static void ftc__matmul_fwd_x(float *out, const float *inp, const float *w, const float *bias,
                              int N, int IC, int OC, bool bf16)
{
    ftc__gemm(false, true, N, OC, IC, inp, IC, 0, w, IC, 0, 0.0f, out, OC, 0, 1, bf16);
    if (bias) {
        size_t total = (size_t)N * OC;
        ftc__add_bias_k<<<ftc__blocks(total, 256), 256>>>(out, bias, OC, total);
        FTC__LAUNCHED();
    }
}

static void ftc__matmul_bwd_x(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int IC, int OC, bool bf16)
{
    /* dinp[N,IC] += dout[N,OC] @ w[OC,IC]; dw[OC,IC] += dout^T @ inp[N,IC] */
    ftc__gemm(false, false, N, IC, OC, dout, OC, 0, w, IC, 0, 1.0f, dinp, IC, 0, 1, bf16);
    ftc__gemm(true, false, OC, IC, N, dout, OC, 0, inp, IC, 0, 1.0f, dw, IC, 0, 1, bf16);
    if (dbias)
        ftc__colsum(dbias, N, OC, ftc__col{dout, OC});
}

static void ftc__matmul_fwd(float *out, const float *inp, const float *w, const float *bias, int N,
                            int IC, int OC)
{
    ftc__matmul_fwd_x(out, inp, w, bias, N, IC, OC, false);
}
static void ftc__matmul_fwd_bf16(float *out, const float *inp, const float *w, const float *bias,
                                 int N, int IC, int OC)
{
    ftc__matmul_fwd_x(out, inp, w, bias, N, IC, OC, true);
}
static void ftc__matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC)
{
    ftc__matmul_bwd_x(dinp, dw, dbias, dout, inp, w, N, IC, OC, false);
}
static void ftc__matmul_bwd_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int IC, int OC)
{
    ftc__matmul_bwd_x(dinp, dw, dbias, dout, inp, w, N, IC, OC, true);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Element i of a [B,NH,T,hs] tensor: the row b*T+t and the column h*hs+d of
 * the same element in the [B,T,NH*hs] layout. */
__device__ __forceinline__ void ftc__bnth_split(size_t i, int T, int NH, int hs, size_t *row,
                                                size_t *col)
{
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH), b = (int)(r / NH);
    *row = (size_t)b * T + t;
    *col = (size_t)h * hs + d;
}

/* qkv [B,T,3,NH,hs] -> q, k, v [B,NH,T,hs] (each B*T*C floats) */
__global__ void ftc__permute_k(float *q, float *k, float *v, const float *qkv, int B, int T,
                               int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)B * NH * T * hs;
    if (i >= total)
        return;
    size_t row, col;
    ftc__bnth_split(i, T, NH, hs, &row, &col);
    size_t C = (size_t)NH * hs, src = row * 3 * C + col;
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
}

/* y [B,NH,T,hs] -> out [B,T,C] */
__global__ void ftc__unpermute_k(float *out, const float *y, int B, int T, int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)B * NH * T * hs;
    if (i >= total)
        return;
    size_t row, col;
    ftc__bnth_split(i, T, NH, hs, &row, &col);
    out[row * NH * hs + col] = y[i];
}

/* dout [B,T,C] -> dy [B,NH,T,hs] */
__global__ void ftc__permute_dout_k(float *dy, const float *dout, int B, int T, int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)B * NH * T * hs;
    if (i >= total)
        return;
    size_t row, col;
    ftc__bnth_split(i, T, NH, hs, &row, &col);
    dy[i] = dout[row * NH * hs + col];
}

/* dqkv [B,T,3C] += dq, dk, dv [B,NH,T,hs] */
__global__ void ftc__unpermute_add_k(float *dqkv, const float *dq, const float *dk,
                                     const float *dv, int B, int T, int NH, int hs)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)B * NH * T * hs;
    if (i >= total)
        return;
    size_t row, col;
    ftc__bnth_split(i, T, NH, hs, &row, &col);
    size_t C = (size_t)NH * hs, dst = row * 3 * C + col;
    dqkv[dst] = __fadd_rn(dqkv[dst], dq[i]);
    dqkv[dst + C] = __fadd_rn(dqkv[dst + C], dk[i]);
    dqkv[dst + 2 * C] = __fadd_rn(dqkv[dst + 2 * C], dv[i]);
}

/* In place, one warp per row (b, h, t): att = softmax(scale * preatt) over
 * t2 <= t, 0 above the diagonal. */
__global__ void ftc__softmax_causal_k(float *att, int rows, int T, float scale)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    int t = row % T;
    float *a = att + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = fmaxf(mx, a[j] * scale);
    mx = ftc__warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(a[j] * scale - mx);
        a[j] = e;
        s += e;
    }
    float inv = 1.0f / ftc__warp_sum(s);
    for (int j = lane; j < T; j += 32)
        a[j] = j <= t ? a[j] * inv : 0.0f;
}

/* In place over datt, one warp per row: dpre = att (datt - sum att datt) scale. */
__global__ void ftc__softmax_bwd_k(float *datt, const float *att, int rows, int T, float scale)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    int t = row % T;
    const float *a = att + (size_t)row * T;
    float *d = datt + (size_t)row * T;
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32)
        s += a[j] * d[j];
    s = ftc__warp_sum(s);
    for (int j = lane; j < T; j += 32)
        d[j] = j <= t ? a[j] * (d[j] - s) * scale : 0.0f;
}

static void ftc__attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH)
{
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    float *q = (float *)ftc__scratch(S_QKV, 4 * n * sizeof(float)), *k = q + n, *v = k + n,
          *y = v + n;
    ftc__permute_k<<<ftc__blocks(n, 256), 256>>>(q, k, v, qkv, B, T, NH, hs);
    FTC__LAUNCHED();
    long long sq = (long long)T * hs, sa = (long long)T * T;
    int batch = B * NH;
    ftc__gemm(false, true, T, T, hs, q, hs, sq, k, hs, sq, 0.0f, att, T, sa, batch, false);
    ftc__softmax_causal_k<<<ftc__blocks((size_t)batch * T, 8), 256>>>(att, batch * T, T,
                                                                       1.0f / sqrtf((float)hs));
    FTC__LAUNCHED();
    ftc__gemm(false, false, T, hs, T, att, T, sa, v, hs, sq, 0.0f, y, hs, sq, batch, false);
    ftc__unpermute_k<<<ftc__blocks(n, 256), 256>>>(out, y, B, T, NH, hs);
    FTC__LAUNCHED();
}

static void ftc__attention_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    (void)scratch; /* the backend keeps its own [B, NH, T, T] scratch */
    int hs = C / NH, batch = B * NH;
    size_t n = (size_t)B * T * C;
    float *q = (float *)ftc__scratch(S_QKV, 7 * n * sizeof(float)), *k = q + n, *v = k + n,
          *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n;
    float *datt = (float *)ftc__scratch(S_ATT, (size_t)batch * T * T * sizeof(float));
    ftc__permute_k<<<ftc__blocks(n, 256), 256>>>(q, k, v, qkv, B, T, NH, hs);
    FTC__LAUNCHED();
    ftc__permute_dout_k<<<ftc__blocks(n, 256), 256>>>(dy, dout, B, T, NH, hs);
    FTC__LAUNCHED();
    long long sq = (long long)T * hs, sa = (long long)T * T;
    /* datt = dy @ v^T; dv = att^T @ dy */
    ftc__gemm(false, true, T, T, hs, dy, hs, sq, v, hs, sq, 0.0f, datt, T, sa, batch, false);
    ftc__gemm(true, false, T, hs, T, att, T, sa, dy, hs, sq, 0.0f, dv, hs, sq, batch, false);
    ftc__softmax_bwd_k<<<ftc__blocks((size_t)batch * T, 8), 256>>>(datt, att, batch * T, T,
                                                                    1.0f / sqrtf((float)hs));
    FTC__LAUNCHED();
    /* dq = dpre @ k; dk = dpre^T @ q */
    ftc__gemm(false, false, T, hs, T, datt, T, sa, k, hs, sq, 0.0f, dq, hs, sq, batch, false);
    ftc__gemm(true, false, T, hs, T, datt, T, sa, q, hs, sq, 0.0f, dk, hs, sq, batch, false);
    ftc__unpermute_add_k<<<ftc__blocks(n, 256), 256>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    FTC__LAUNCHED();
}

/* ---- pointwise ------------------------------------------------------------------------------ */

#define FTC__GELU_K 0.7978845608028654f /* sqrt(2/pi) */

__global__ void ftc__gelu_fwd_k(float *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = inp[i];
    float u = FTC__GELU_K * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
}

__global__ void ftc__gelu_bwd_k(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = inp[i];
    float u = FTC__GELU_K * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) +
              0.5f * x * sech2 * FTC__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += g * dout[i];
}

__global__ void ftc__residual_k(float *out, const float *a, const float *b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __fadd_rn(a[i], b[i]);
}

__global__ void ftc__scale_k(float *x, float s, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = __fmul_rn(x[i], s);
}

static void ftc__gelu_fwd(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    ftc__gelu_fwd_k<<<ftc__blocks(n, 256), 256>>>(out, inp, n);
    FTC__LAUNCHED();
}
static void ftc__gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    if (!n)
        return;
    ftc__gelu_bwd_k<<<ftc__blocks(n, 256), 256>>>(dinp, inp, dout, n);
    FTC__LAUNCHED();
}
static void ftc__residual_fwd(float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    ftc__residual_k<<<ftc__blocks(n, 256), 256>>>(out, a, b, n);
    FTC__LAUNCHED();
}
static void ftc__scale(float *x, float s, size_t n)
{
    if (!n)
        return;
    ftc__scale_k<<<ftc__blocks(n, 256), 256>>>(x, s, n);
    FTC__LAUNCHED();
}

/* ---- loss: one block per row ------------------------------------------------------------------ */

__global__ void ftc__ce_fwd_k(float *losses, float *probs, const float *logits,
                              const int32_t *targets, int V)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    int n = blockIdx.x;
    const float *z = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        mx = fmaxf(mx, z[i]);
    mx = ftc__block_max(mx, shf);
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(z[i] - mx);
        p[i] = e;
        s += e;
    }
    s = ftc__block_sum<double>(s, shd);
    float inv = (float)(1.0 / s);
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        p[i] *= inv;
    if (threadIdx.x == 0)
        losses[n] = (float)(log(s) - (double)(z[targets[n]] - mx));
}

__global__ void ftc__ce_bwd_k(float *dlogits, const float *probs, const int32_t *targets,
                              float dloss, int V, size_t total)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    int c = (int)(i % (size_t)V);
    float one = c == targets[i / (size_t)V] ? 1.0f : 0.0f;
    dlogits[i] = __fadd_rn(dlogits[i], __fmul_rn(__fsub_rn(probs[i], one), dloss));
}

static void ftc__crossentropy_fwd(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V)
{
    ftc__ce_fwd_k<<<(unsigned)N, 512>>>(losses, probs, logits, targets, V);
    FTC__LAUNCHED();
}

static void ftc__crossentropy_bwd(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V)
{
    size_t total = (size_t)N * V;
    ftc__ce_bwd_k<<<ftc__blocks(total, 256), 256>>>(dlogits, probs, targets, dloss, V, total);
    FTC__LAUNCHED();
}

/* ---- optimizer: the CPU's arithmetic, operation by operation ------------------------------------ */

__global__ void ftc__adamw_k(float *p, float *m, float *v, const float *g, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2,
                             float grad_scale)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = __fmul_rn(g[i], grad_scale);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(__fsub_rn(1.0f, b1), gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gi), gi));
    m[i] = mi;
    v[i] = vi;
    float mh = __fdiv_rn(mi, bc1), vh = __fdiv_rn(vi, bc2);
    float upd = __fadd_rn(__fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), eps)), __fmul_rn(wd, p[i]));
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, upd));
}

static void ftc__adamw(float *p, float *m, float *v, const float *g, size_t n, float lr, float b1,
                       float b2, float eps, float wd, int t, float grad_scale)
{
    if (!n)
        return;
    float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    float bc2 = (float)(1.0 - pow((double)b2, (double)t));
    ftc__adamw_k<<<ftc__blocks(n, 256), 256>>>(p, m, v, g, n, lr, b1, b2, eps, wd, bc1, bc2,
                                               grad_scale);
    FTC__LAUNCHED();
}

/* ---- casts: the CPU's bit operations ------------------------------------------------------------ */

__global__ void ftc__f32_to_bf16_k(uint16_t *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t u = __float_as_uint(inp[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        out[i] = (uint16_t)((u >> 16) | 0x40u);
    else
        out[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void ftc__bf16_to_f32_k(float *out, const uint16_t *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __uint_as_float((uint32_t)inp[i] << 16);
}

static void ftc__f32_to_bf16(uint16_t *out, const float *inp, size_t n)
{
    if (!n)
        return;
    ftc__f32_to_bf16_k<<<ftc__blocks(n, 256), 256>>>(out, inp, n);
    FTC__LAUNCHED();
}

static void ftc__bf16_to_f32(float *out, const uint16_t *inp, size_t n)
{
    if (!n)
        return;
    ftc__bf16_to_f32_k<<<ftc__blocks(n, 256), 256>>>(out, inp, n);
    FTC__LAUNCHED();
}

/* ---- sumsq: a fixed grid of partials, then one block ------------------------------------------- */

#define FTC__SUMSQ_BLOCKS 1024

__global__ void ftc__sumsq_part_k(double *part, const float *x, size_t n)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    s = ftc__block_sum<double>(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

__global__ void ftc__sumsq_final_k(double *part, int nparts)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    s = ftc__block_sum<double>(s, sh);
    if (threadIdx.x == 0)
        part[nparts] = s;
}

static double ftc__sumsq(const float *x, size_t n)
{
    if (!n)
        return 0.0;
    double *part = (double *)ftc__scratch(S_PART, (FTC__SUMSQ_BLOCKS + 1) * sizeof(double));
    ftc__sumsq_part_k<<<FTC__SUMSQ_BLOCKS, 256>>>(part, x, n);
    FTC__LAUNCHED();
    ftc__sumsq_final_k<<<1, 1024>>>(part, FTC__SUMSQ_BLOCKS);
    FTC__LAUNCHED();
    double r = 0.0;
    FTC__CU(cudaMemcpy(&r, part + FTC__SUMSQ_BLOCKS, sizeof r, cudaMemcpyDeviceToHost));
    return r;
}

/* ---- memory --------------------------------------------------------------------------------------- */

static void *ftc__mem_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
        return NULL;
    }
    return p;
}

static void ftc__mem_free(void *p)
{
    if (p)
        FTC__CU(cudaFree(p));
}

static void ftc__mem_zero(void *p, size_t bytes)
{
    if (bytes) {
        FTC__CU(cudaMemset(p, 0, bytes));
        /* synchronous like mem_copy: other streams (the snapshot's) may use p next */
        FTC__CU(cudaStreamSynchronize(0));
    }
}

static void ftc__mem_copy(void *dst, const void *src, size_t bytes, int kind)
{
    if (!bytes)
        return;
    cudaMemcpyKind k = kind == FTC_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == FTC_COPY_D2H ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
    FTC__CU(cudaMemcpy(dst, src, bytes, k));
}

static void ftc__sync(void)
{
    FTC__CU(cudaDeviceSynchronize());
}

/* ---- the tables ---------------------------------------------------------------------------------- */

static ftc_kernels_t ftc__tables[2];

static void ftc__fill(ftc_kernels_t *k, bool bf16)
{
    memset(k, 0, sizeof *k);
    k->struct_size = sizeof(ftc_kernels_t);
    k->version = FTC_KERNELS_VERSION;
    k->name = bf16 ? "cuda-bf16" : "cuda";
    k->device = G.device;
    k->matmul_bf16 = bf16;
    k->device_desc = G.desc;
    k->mem_alloc = ftc__mem_alloc;
    k->mem_free = ftc__mem_free;
    k->mem_zero = ftc__mem_zero;
    k->mem_copy = ftc__mem_copy;
    k->sync = ftc__sync;
    k->scale = ftc__scale;
    k->sumsq = ftc__sumsq;
    k->embed_fwd = ftc__embed_fwd;
    k->embed_bwd = ftc__embed_bwd;
    k->layernorm_fwd = ftc__layernorm_fwd;
    k->layernorm_bwd = ftc__layernorm_bwd;
    k->matmul_fwd = bf16 ? ftc__matmul_fwd_bf16 : ftc__matmul_fwd;
    k->matmul_bwd = bf16 ? ftc__matmul_bwd_bf16 : ftc__matmul_bwd;
    k->attention_fwd = ftc__attention_fwd;
    k->attention_bwd = ftc__attention_bwd;
    k->gelu_fwd = ftc__gelu_fwd;
    k->gelu_bwd = ftc__gelu_bwd;
    k->residual_fwd = ftc__residual_fwd;
    k->crossentropy_fwd = ftc__crossentropy_fwd;
    k->crossentropy_bwd = ftc__crossentropy_bwd;
    k->adamw = ftc__adamw;
    k->f32_to_bf16 = ftc__f32_to_bf16;
    k->bf16_to_f32 = ftc__bf16_to_f32;
}

static void ftc__init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(G.why, sizeof G.why, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError();
        return;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDevice(&G.device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, G.device)) != cudaSuccess) {
        snprintf(G.why, sizeof G.why, "CUDA device query: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return;
    }
    cublasStatus_t s = cublasCreate(&G.blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(G.why, sizeof G.why, "cublasCreate failed (status %d)", (int)s);
        return;
    }
    const char *tf = getenv("FTC_CUDA_TF32");
    bool tf32 = tf && !strcmp(tf, "1");
    /* default math: fp32 SGEMMs without TF32 (CUDA 11+), unless asked for */
    cublasSetMathMode(G.blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    cublasSetAtomicsMode(G.blas, CUBLAS_ATOMICS_NOT_ALLOWED);
    snprintf(G.desc, sizeof G.desc, "%.200s (sm_%d%d, %zu MiB, %d SMs)%s", prop.name, prop.major,
             prop.minor, (size_t)(prop.totalGlobalMem >> 20), prop.multiProcessorCount,
             tf32 ? ", TF32 on" : "");
    ftc__fill(&ftc__tables[0], false);
    ftc__fill(&ftc__tables[1], true);
    G.ok = 1;
}

extern "C" int ftc_kernels_cuda_use_device(int local_rank, int *device, ftc_err_t *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        int rc = ftc_err_set(err, FTC_EUNSUPPORTED, "no CUDA device (%s)",
                             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError();
        return rc;
    }
    int dev = (local_rank < 0 ? 0 : local_rank) % n;
    /* the backend binds to the current device on its first use (G.ok once
     * ftc__init succeeded): after that the choice is made */
    if (G.ok && G.device != dev)
        return ftc_err_set(err, FTC_EINVAL, "the CUDA backend already runs on device %d, not %d "
                           "(select the device before the first CUDA kernel)", G.device, dev);
    if ((e = cudaSetDevice(dev)) != cudaSuccess) {
        int rc = ftc_err_set(err, FTC_ECUDA, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return rc;
    }
    if (device)
        *device = dev;
    return n;
}

extern "C" const ftc_kernels_t *ftc_kernels_cuda_probe(bool bf16, ftc_err_t *why)
{
    pthread_once(&G.once, ftc__init);
    if (!G.ok) {
        ftc_err_set(why, FTC_EUNSUPPORTED, "%s", G.why);
        return NULL;
    }
    return &ftc__tables[bf16 ? 1 : 0];
}
