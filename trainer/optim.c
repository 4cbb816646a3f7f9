/*
 * optim.c — AdamW, global-norm clipping and the warmup + cosine schedule of
 * optim.h.
 */
#include "trainer/optim.h"

#include <math.h>
#include <stdlib.h>

float ftc_optim_lr(const ftc_optim_config_t *c, uint64_t step)
{
    if (step < c->warmup)
        return c->lr * (float)(step + 1) / (float)c->warmup;
    uint64_t span = c->total > c->warmup + 1 ? c->total - c->warmup - 1 : 1;
    double progress = (double)(step - c->warmup) / (double)span;
    if (progress > 1.0)
        progress = 1.0;
    double cosv = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    double minr = c->min_lr_ratio;
    return (float)(c->lr * (minr + (1.0 - minr) * cosv));
}

int ftc_optim_config_check(const ftc_optim_config_t *c, ftc_err_t *err)
{
    if (!(c->lr > 0.0f && c->lr < 10.0f))
        return ftc_err_set(err, FTC_EINVAL, "lr %g: must be in (0, 10)", (double)c->lr);
    if (!(c->min_lr_ratio >= 0.0f && c->min_lr_ratio <= 1.0f))
        return ftc_err_set(err, FTC_EINVAL, "min lr ratio %g: must be in [0, 1]",
                           (double)c->min_lr_ratio);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return ftc_err_set(err, FTC_EINVAL, "betas %g, %g: must be in [0, 1)", (double)c->beta1,
                           (double)c->beta2);
    if (!(c->eps > 0.0f) || !(c->weight_decay >= 0.0f) || !(c->grad_clip >= 0.0f))
        return ftc_err_set(err, FTC_EINVAL, "eps > 0, weight decay >= 0 and grad clip >= 0 needed");
    if (c->total < 1)
        return ftc_err_set(err, FTC_EINVAL, "schedule of 0 steps");
    return 0;
}

double ftc_grad_norm(const float *g, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * (double)g[i];
    return sqrt(s);
}

ftc_adamw_t *ftc_adamw_create(size_t n, ftc_err_t *err)
{
    return ftc_adamw_create_on(ftc_kernels_cpu(), n, err);
}

ftc_adamw_t *ftc_adamw_create_on(const ftc_kernels_t *k, size_t n, ftc_err_t *err)
{
    ftc_adamw_t *a = calloc(1, sizeof *a);
    if (a) {
        a->k = k;
        a->m = k->mem_alloc(n * sizeof(float));
        a->v = k->mem_alloc(n * sizeof(float));
        if (a->m)
            k->mem_zero(a->m, n * sizeof(float));
        if (a->v)
            k->mem_zero(a->v, n * sizeof(float));
    }
    if (!a || !a->m || !a->v) {
        ftc_adamw_destroy(a);
        ftc_err_set(err, FTC_ENOMEM, "AdamW: out of memory for the moments of %zu parameters", n);
        return NULL;
    }
    a->n = n;
    return a;
}

void ftc_adamw_destroy(ftc_adamw_t *a)
{
    if (!a)
        return;
    a->k->mem_free(a->m);
    a->k->mem_free(a->v);
    free(a);
}

void ftc_adamw_step(ftc_adamw_t *a, ftc_model_t *model, const ftc_optim_config_t *c,
                    uint64_t step, float *norm, float *lr)
{
    float *p = ftc_model_params(model), *g = ftc_model_grads(model);
    const ftc_model_tensor_t *t = ftc_model_tensors(model);
    const ftc_kernels_t *k = ftc_model_kernels(model); /* the model's backend updates */
    double gn = sqrt(k->sumsq(g, a->n)); /* ftc_grad_norm's sum, where the gradients are */
    float scale = 1.0f;
    if (c->grad_clip > 0.0f && gn > c->grad_clip)
        scale = (float)(c->grad_clip / (gn + 1e-6));
    float rate = ftc_optim_lr(c, step);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        k->adamw(p + t[i].offset, a->m + t[i].offset, a->v + t[i].offset, g + t[i].offset,
                 t[i].numel, rate, c->beta1, c->beta2, c->eps, t[i].decay ? c->weight_decay : 0.0f,
                 (int)(step + 1), scale);
    if (norm)
        *norm = (float)gn;
    if (lr)
        *lr = rate;
}

void ftc_adamw_step_shard(ftc_adamw_t *a, ftc_model_t *model, const ftc_optim_config_t *c,
                          uint64_t step, double gn, size_t off, float *lr)
{
    float *p = ftc_model_params(model), *g = ftc_model_grads(model);
    const ftc_model_tensor_t *t = ftc_model_tensors(model);
    const ftc_kernels_t *k = ftc_model_kernels(model);
    float scale = 1.0f;
    if (c->grad_clip > 0.0f && gn > c->grad_clip)
        scale = (float)(c->grad_clip / (gn + 1e-6));
    float rate = ftc_optim_lr(c, step);
    size_t end = off + a->n;
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        size_t lo = t[i].offset > off ? t[i].offset : off;
        size_t hi = t[i].offset + t[i].numel < end ? t[i].offset + t[i].numel : end;
        if (lo >= hi)
            continue;
        k->adamw(p + lo, a->m + (lo - off), a->v + (lo - off), g + lo, hi - lo, rate, c->beta1,
                 c->beta2, c->eps, t[i].decay ? c->weight_decay : 0.0f, (int)(step + 1), scale);
    }
    if (lr)
        *lr = rate;
}
