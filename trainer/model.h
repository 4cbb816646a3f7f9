/*
 * model.h — the reference trainer's model: a decoder-only GPT (GPT-2 shape)
 * with forward and backward written by hand, as llm.c does.
 *
 *   tokens -> wte + wpe -> L x [ x += attn(ln1(x)); x += mlp(ln2(x)) ] -> lnf
 *          -> logits = lnf @ wte^T (tied head) -> softmax cross-entropy
 *
 * attn is causal multi-head self-attention (qkv projection, softmax, output
 * projection); mlp is C -> 4C, GELU, 4C -> C. Every operation goes through a
 * kernels table (kernels.h), so the model runs on any backend.
 *
 * Parameters live in one contiguous fp32 buffer (and their gradients in a
 * second one of the same layout) in the backend's memory, seen through 16
 * named tensor views (tokens are uploaded and the loss read back through
 * the table's mem_copy):
 * registration with the checkpoint library walks ftc_model_t.tensors.
 *
 * Tensor parallelism (Megatron-style, ftc_model_create_tp): a model can be
 * one rank of a TP group of tp_size ranks. Attention is split by heads (each
 * rank owns NH/tp heads: their q, k and v rows of the qkv projection, and the
 * matching input columns of the output projection) and the MLP by its hidden
 * units (4C/tp rows of fc, the matching columns of proj). The column-parallel
 * layers (qkv, fc) need no communication in the forward and an all-reduce of
 * their input gradient in the backward; the row-parallel ones (attn.proj,
 * mlp.proj) an all-reduce of their output in the forward: two all-reduces of
 * B*T*C floats per block each way, through a callback, so the model does not
 * know the communicator. Embeddings, layernorms, the row-parallel biases and
 * the tied LM head are replicated: every TP rank computes them from identical
 * inputs with deterministic kernels, so their gradients (and, with the same
 * optimizer step, their values) stay bit-identical across the TP ranks
 * without communication. ftc_model_tensors() then describes the local
 * slices; ftc_model_tp_split() maps them to the full tensors.
 *
 * A model is not thread-safe; one thread drives it (the kernels use the
 * backend's own parallelism).
 *
 * Errors: only the TP all-reduce can fail at run time. Its failure is
 * sticky: ftc_model_fwd/ftc_model_bwd return it (and every later call
 * returns it at once), ftc_model_forward returns NaN, ftc_model_status()
 * reads it with a message naming the layer and direction.
 */
#ifndef FTC_TRAINER_MODEL_H
#define FTC_TRAINER_MODEL_H

#include "core/err.h"
#include "trainer/kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftc_model_config {
    int vocab;    /* V: tokens are 0..V-1 (<= 65536: token files hold uint16) */
    int max_seq;  /* maxT: rows of the position embedding */
    int layers;   /* L */
    int heads;    /* NH; channels must be a multiple */
    int channels; /* C */
} ftc_model_config_t;

/* Named sizes: "tiny" (V 256, T 64, L 2, NH 4, C 64: trains in seconds on
 * 2 cores), "small" (256/128/4/4/256), "medium" (256/256/6/8/512) and
 * "gpt2-small" (50257/1024/12/12/768, 124M parameters). 0, or FTC_EINVAL
 * naming the choices. */
int ftc_model_preset(const char *name, ftc_model_config_t *cfg, ftc_err_t *err);
/* Checks a config (ranges, heads divide channels). 0 or FTC_EINVAL. */
int ftc_model_config_check(const ftc_model_config_t *cfg, ftc_err_t *err);
/* Number of parameters of a config (no allocation). */
size_t ftc_model_param_count(const ftc_model_config_t *cfg);

#define FTC_MODEL_NTENSORS 16

/* The tensor-parallel all-reduce: buf[i] = sum over the TP group of buf[i],
 * in place, n floats, the same bits on every rank (trainer/coll.h's F32
 * all-reduce). 0 or a negative FTC_E* code (a dead peer: FTC_ETIMEDOUT...).
 * buf is ALWAYS in the kernels backend's memory (device memory on CUDA: the
 * activations, and a backend copy of the gradient norm's shares), so an
 * all-reduce over host collectives must stage it (trainer/stage.h; the
 * trainer's does) and one over NCCL can take it as is. ftc_model_coll_allreduce
 * below passes buf straight to the communicator: right for the CPU backend. */
typedef int (*ftc_model_allreduce_fn)(void *ctx, float *buf, size_t n);

/* One named view into the parameter buffer (the same offsets index the
 * gradient and optimizer buffers). */
typedef struct ftc_model_tensor {
    const char *name;   /* "wte", "h.qkv.w", ...; static */
    size_t offset;      /* in floats, from the start of the buffer */
    size_t numel;
    uint32_t ndim;
    uint64_t shape[3];
    bool decay;         /* weight decay applies (matrices and embeddings) */
} ftc_model_tensor_t;

typedef struct ftc_model ftc_model_t;

/* Builds a model for micro-batches of B sequences of T tokens (T <=
 * max_seq), with GPT-2's initialization from seed: weights N(0, 0.02),
 * residual projections N(0, 0.02/sqrt(2L)), biases 0, layernorm gains 1.
 * NULL with err set (FTC_EINVAL, FTC_ENOMEM naming the bytes). */
ftc_model_t *ftc_model_create(const ftc_model_config_t *cfg, const ftc_kernels_t *k, int B, int T,
                              uint64_t seed, ftc_err_t *err);
/* Rank tp_rank of a tensor-parallel group of tp_size (tp_size 1 is
 * ftc_model_create: allreduce may then be NULL and is never called). The
 * weights are the slices of the tp_size = 1 model of the same seed (the full
 * tensors are drawn in the same RNG order; each rank keeps its slice), so
 * TP = t and TP = 1 differ only in the fp32 summation order of the
 * row-parallel layers. FTC_EINVAL when tp_size does not divide heads (and so
 * C and 4C), tp_rank is out of range, or allreduce is NULL with tp_size > 1.
 * allreduce(ctx, ...) is called from forward and backward, by the thread
 * driving the model; every rank of the group must run the same calls. */
ftc_model_t *ftc_model_create_tp(const ftc_model_config_t *cfg, const ftc_kernels_t *k, int B,
                                 int T, uint64_t seed, int tp_rank, int tp_size,
                                 ftc_model_allreduce_fn allreduce, void *ctx, ftc_err_t *err);
void ftc_model_destroy(ftc_model_t *m); /* NULL is a no-op */

const ftc_model_config_t *ftc_model_config(const ftc_model_t *m);
const ftc_kernels_t *ftc_model_kernels(const ftc_model_t *m);
const ftc_model_tensor_t *ftc_model_tensors(const ftc_model_t *m); /* FTC_MODEL_NTENSORS */
size_t ftc_model_num_params(const ftc_model_t *m);
/* The parameter and gradient buffers live in the backend's memory (device
 * memory for CUDA, kernels.h): read or write them from the host only
 * through the kernels' mem_copy. */
float *ftc_model_params(ftc_model_t *m);
float *ftc_model_grads(ftc_model_t *m);
/* Bytes of activations held for B x T (both directions). */
size_t ftc_model_act_bytes(const ftc_model_t *m);
int ftc_model_batch(const ftc_model_t *m, int *T);

/* The tensor-parallel degree (1 for ftc_model_create); *tp_rank when not NULL. */
int ftc_model_tp(const ftc_model_t *m, int *tp_rank);
/* The tensor views of a config for a TP degree, without allocating (what
 * ftc_model_tensors() of such a model returns); tp_size 1 gives the full
 * tensors. 0, or FTC_EINVAL when tp_size does not divide the heads. */
int ftc_model_tensors_of(const ftc_model_config_t *cfg, int tp_size,
                         ftc_model_tensor_t t[FTC_MODEL_NTENSORS], ftc_err_t *err);
/* Parameters per TP rank (ftc_model_param_count for tp_size 1; 0 when
 * tp_size does not divide the heads). */
size_t ftc_model_param_count_tp(const ftc_model_config_t *cfg, int tp_size);

/* Where a rank's slice sits in the full tensor. Every slice is a range of
 * one dimension: seen as [outer, full, inner] (row-major), the full tensor's
 * elements (o, start + i, j), i < local, are the slice's elements (o, i, j):
 *
 *   local flat index (o * local + i) * inner + j
 *   full  flat index (o * full + start + i) * inner + j
 *
 * with start = tp_rank * local and local = full / tp_size:
 *
 *   h.attn.qkv.w  [L, 3C, C] as [3L, C, C]  rows of q, k and v each split:
 *                 outer 3L, full C, inner C  (the heads h*NH/tp.. of each)
 *   h.attn.qkv.b  [L, 3C]    outer 3L, full C, inner 1
 *   h.attn.proj.w [L, C, C]  columns: outer L*C, full C, inner 1
 *   h.mlp.fc.w    [L, 4C, C] rows: outer L, full 4C, inner C
 *   h.mlp.fc.b    [L, 4C]    outer L, full 4C, inner 1
 *   h.mlp.proj.w  [L, C, 4C] columns: outer L*C, full 4C, inner 1
 *   every other tensor: replicated (outer 1, full = local = numel, start 0,
 *                 inner 1: the identity)
 *
 * Same layout applies to the gradient and optimizer buffers. */
typedef struct ftc_model_tp_split {
    bool replicated;      /* the whole tensor on every TP rank */
    uint64_t outer;       /* blocks */
    uint64_t full;        /* extent of the split dimension in the full tensor */
    uint64_t local;       /* its extent in the slice (full / tp_size) */
    uint64_t start;       /* the slice's first index in it (tp_rank * local) */
    uint64_t inner;       /* contiguous elements per index of that dimension */
    uint32_t full_ndim;   /* the full tensor: rank, shape and size */
    uint64_t full_shape[3];
    size_t full_numel;
} ftc_model_tp_split_t;

/* The split of tensor i (0..FTC_MODEL_NTENSORS-1) for tp_rank of tp_size.
 * 0, or FTC_EINVAL (bad index, rank or degree). Pure; thread-safe. */
int ftc_model_tp_split(const ftc_model_config_t *cfg, int tp_rank, int tp_size, int i,
                       ftc_model_tp_split_t *s, ftc_err_t *err);
/* This model's splits (FTC_MODEL_NTENSORS, in tensor order). */
const ftc_model_tp_split_t *ftc_model_tp_splits(const ftc_model_t *m);
/* Copies a slice (s->outer * s->local * s->inner floats) into its place in
 * a full tensor (s->full_numel floats; the rest untouched), and back. */
void ftc_model_tp_to_full(const ftc_model_tp_split_t *s, const float *local, float *full);
void ftc_model_tp_from_full(const ftc_model_tp_split_t *s, const float *full, float *local);

/* The global L2 norm of the gradient of the whole (unsplit) model: each
 * rank sums its split tensors' squares in double (tensor order, with the
 * backend's sumsq: where the gradients are), the TP
 * ranks exchange these shares exactly (one all-reduce of 2 x tp_size floats:
 * each share as hi + lo in its own slots, zeros elsewhere) and add them in
 * rank order, then the replicated tensors' squares are added once: the same
 * bits on every TP rank, deterministic for a fixed TP degree, and a function
 * of the gradient buffer only (so identical across DP degrees). For tp_size
 * 1 it is ftc_grad_norm() of the gradient buffer. Gradient clipping
 * under TP must use this norm, not a rank's local one (or the replicated
 * tensors would be scaled differently on different ranks). 0 or the
 * all-reduce's error (sticky, as for forward). */
int ftc_model_grad_norm(ftc_model_t *m, double *norm);

/* Replaces the all-reduce (e.g. a new TP communicator after recovery, with
 * the same TP degree) and clears a sticky error. The parameters are intact
 * after a failure; the gradient buffer may hold part of a backward: zero it.
 * Destroy the failed communicator first (it may still reference the
 * model's activation buffers, trainer/coll.h). */
void ftc_model_tp_rebind(ftc_model_t *m, ftc_model_allreduce_fn allreduce, void *ctx);
/* 0, or the sticky all-reduce failure (its message in *err when not NULL). */
int ftc_model_status(const ftc_model_t *m, ftc_err_t *err);

/* A ready-made allreduce over a trainer/coll.h communicator: ctx is an
 * ftc_model_coll_ctx_t; each call is an FTC_COLL_F32 all-reduce with a
 * deadline of timeout_ms from its start. */
struct ftc_coll;
typedef struct ftc_model_coll_ctx {
    struct ftc_coll *coll; /* the TP group's communicator */
    int timeout_ms;        /* per all-reduce */
} ftc_model_coll_ctx_t;
int ftc_model_coll_allreduce(void *ctx, float *buf, size_t n);

/* Forward over tokens [B*T] (each < V). With targets (NULL for none) it
 * returns the mean cross-entropy loss over the B*T positions; without, 0.
 * Tokens out of range are the caller's bug (checked with assert). */
float ftc_model_forward(ftc_model_t *m, const int32_t *tokens, const int32_t *targets);
/* Backward of the last forward (which had targets): ACCUMULATES d(mean
 * loss)/d(params) into the gradient buffer, so calling it after several
 * forwards sums micro-batch gradients. */
void ftc_model_backward(ftc_model_t *m);
/* The same, returning 0 or the all-reduce's error (sticky, see the top);
 * *loss (may be NULL) gets the loss, NaN on error. ftc_model_forward
 * returns NaN and ftc_model_backward returns having set the sticky error. */
int ftc_model_fwd(ftc_model_t *m, const int32_t *tokens, const int32_t *targets, float *loss);
int ftc_model_bwd(ftc_model_t *m);
void ftc_model_zero_grad(ftc_model_t *m);
/* Logits of the last forward, [B*T, V] (backend memory). */
const float *ftc_model_logits(const ftc_model_t *m);

#ifdef __cplusplus
}
#endif
#endif
