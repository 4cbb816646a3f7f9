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
 * A model is not thread-safe; one thread drives it (the kernels use the
 * backend's own parallelism).
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

/* Forward over tokens [B*T] (each < V). With targets (NULL for none) it
 * returns the mean cross-entropy loss over the B*T positions; without, 0.
 * Tokens out of range are the caller's bug (checked with assert). */
float ftc_model_forward(ftc_model_t *m, const int32_t *tokens, const int32_t *targets);
/* Backward of the last forward (which had targets): ACCUMULATES d(mean
 * loss)/d(params) into the gradient buffer, so calling it after several
 * forwards sums micro-batch gradients. */
void ftc_model_backward(ftc_model_t *m);
void ftc_model_zero_grad(ftc_model_t *m);
/* Logits of the last forward, [B*T, V] (backend memory). */
const float *ftc_model_logits(const ftc_model_t *m);

#ifdef __cplusplus
}
#endif
#endif
