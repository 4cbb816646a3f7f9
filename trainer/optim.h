/*
 * optim.h — the optimizer of the reference trainer: AdamW on fp32 master
 * weights with decoupled weight decay (matrices and embeddings only),
 * gradient clipping by the global L2 norm, and a learning rate that warms up
 * linearly and then decays along a cosine to min_lr_ratio x lr.
 *
 * Everything is a function of the step: lr(step), AdamW's bias correction
 * (t = step + 1) — so a run restored at step k continues exactly as the
 * uninterrupted run would. The gradient norm is summed in double, in a fixed
 * order, so it is deterministic too.
 *
 * Thread-safety: an optimizer is driven by one thread.
 */
#ifndef FTC_TRAINER_OPTIM_H
#define FTC_TRAINER_OPTIM_H

#include "core/err.h"
#include "trainer/kernels.h"
#include "trainer/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ftc_optim_config {
    float lr;           /* peak learning rate (default 1e-3) */
    float min_lr_ratio; /* the cosine ends at lr * min_lr_ratio (default 0.1) */
    uint64_t warmup;    /* linear warmup steps (default 10) */
    uint64_t total;     /* steps of the schedule (the run's length) */
    float beta1, beta2; /* default 0.9, 0.95 */
    float eps;          /* default 1e-8 */
    float weight_decay; /* default 0.1, on tensors with decay set */
    float grad_clip;    /* clip the global norm to this; 0 = off (default 1.0) */
} ftc_optim_config_t;

#define FTC_OPTIM_CONFIG_INIT {1e-3f, 0.1f, 10, 100, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f}

/* Learning rate of 0-based step. Warmup: lr*(step+1)/warmup; then cosine
 * from lr to lr*min_lr_ratio at step total-1 (and flat after). */
float ftc_optim_lr(const ftc_optim_config_t *c, uint64_t step);
/* Checks ranges; 0 or FTC_EINVAL naming the field. */
int ftc_optim_config_check(const ftc_optim_config_t *c, ftc_err_t *err);

/* The global L2 norm of n gradient elements, summed in double in order. */
double ftc_grad_norm(const float *g, size_t n);

typedef struct ftc_adamw {
    const ftc_kernels_t *k; /* whose memory m and v are in */
    size_t n;
    float *m; /* first moments, same layout as the parameters */
    float *v; /* second moments */
} ftc_adamw_t;

/* Moments for n parameters, zeroed, in host memory (the CPU backend's).
 * NULL with err on out of memory. */
ftc_adamw_t *ftc_adamw_create(size_t n, ftc_err_t *err);
/* The same in backend k's memory (device memory for CUDA): the moments must
 * live where the model's parameters do. */
ftc_adamw_t *ftc_adamw_create_on(const ftc_kernels_t *k, size_t n, ftc_err_t *err);
void ftc_adamw_destroy(ftc_adamw_t *a); /* NULL is a no-op */

/* One update of the model's parameters from its gradient buffer at 0-based
 * step: computes the norm (*norm, the backend's sumsq: on the device for
 * CUDA, the same sequential double sum as ftc_grad_norm on the CPU), the
 * clip scale, lr(step) (*lr), and runs
 * the backend's AdamW kernel tensor by tensor (decay where the tensor says). */
void ftc_adamw_step(ftc_adamw_t *a, ftc_model_t *model, const ftc_optim_config_t *c,
                    uint64_t step, float *norm, float *lr);

/* ZeRO-1: the same update restricted to parameters [off, off + a->n) — a
 * holds the moments of that chunk only (a->m[0] is parameter off's) — with
 * the global gradient norm gnorm computed by the caller over the whole
 * gradient (ftc_grad_norm, as ftc_adamw_step does). Element by element the
 * same arithmetic as ftc_adamw_step, so the chunks of every rank together
 * are bit-identical to one full update. */
void ftc_adamw_step_shard(ftc_adamw_t *a, ftc_model_t *model, const ftc_optim_config_t *c,
                          uint64_t step, double gnorm, size_t off, float *lr);

#endif
