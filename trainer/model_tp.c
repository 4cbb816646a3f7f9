/*
 * model_tp.c — the tensor-parallel slicing rule of model.h (which rows or
 * columns of which full tensor a TP rank holds), the copies between a slice
 * and its full tensor, and the all-reduce adapter over trainer/coll.h. The
 * forward and backward with TP are model.c's (the same code at local widths).
 *
 * The rule (model.h): a slice is a range [start, start + local) of one
 * dimension of the full tensor seen as [outer, full, inner]. Attention is
 * split by heads: head h owns channels h*hs.. of each of q, k and v, so a
 * rank's qkv rows are three ranges (outer 3L: one per layer and q/k/v), and
 * the output projection's input columns the matching range. The MLP's
 * hidden units are split: fc rows and proj columns.
 */
#include "trainer/model.h"

#include "trainer/coll.h"

#include <string.h>

enum { /* tensor indices, as in model.c */
    T_QKVW = 4, T_QKVB = 5, T_ATTPROJW = 6, T_FCW = 10, T_FCB = 11, T_FCPROJW = 12
};

int ftc_model_tp_split(const ftc_model_config_t *cfg, int tp_rank, int tp_size, int i,
                       ftc_model_tp_split_t *s, ftc_err_t *err)
{
    if (i < 0 || i >= FTC_MODEL_NTENSORS)
        return ftc_err_set(err, FTC_EINVAL, "model tensor index %d: must be 0..%d", i,
                           FTC_MODEL_NTENSORS - 1);
    if (tp_size < 1 || cfg->heads < 1 || cfg->heads % tp_size || tp_rank < 0 ||
        tp_rank >= tp_size)
        return ftc_err_set(err, FTC_EINVAL,
                           "tensor parallelism rank %d of %d: the degree must divide the %d heads "
                           "and the rank be 0..%d",
                           tp_rank, tp_size, cfg->heads, tp_size - 1);
    ftc_model_tensor_t full[FTC_MODEL_NTENSORS];
    ftc_model_tensors_of(cfg, 1, full, NULL);
    uint64_t L = (uint64_t)cfg->layers, C = (uint64_t)cfg->channels, tp = (uint64_t)tp_size;
    memset(s, 0, sizeof *s);
    s->full_ndim = full[i].ndim;
    memcpy(s->full_shape, full[i].shape, sizeof s->full_shape);
    s->full_numel = full[i].numel;
    switch (i) {
    case T_QKVW: /* [L, 3C, C] as [3L, C, C] */
        s->outer = 3 * L, s->full = C, s->inner = C;
        break;
    case T_QKVB: /* [L, 3C] as [3L, C, 1] */
        s->outer = 3 * L, s->full = C, s->inner = 1;
        break;
    case T_ATTPROJW: /* [L, C, C]: input columns */
        s->outer = L * C, s->full = C, s->inner = 1;
        break;
    case T_FCW: /* [L, 4C, C]: output rows */
        s->outer = L, s->full = 4 * C, s->inner = C;
        break;
    case T_FCB:
        s->outer = L, s->full = 4 * C, s->inner = 1;
        break;
    case T_FCPROJW: /* [L, C, 4C]: input columns */
        s->outer = L * C, s->full = 4 * C, s->inner = 1;
        break;
    default:
        s->replicated = true;
        s->outer = 1, s->full = (uint64_t)full[i].numel, s->inner = 1;
        s->local = s->full;
        s->start = 0;
        return 0;
    }
    s->local = s->full / tp;
    s->start = (uint64_t)tp_rank * s->local;
    return 0;
}

void ftc_model_tp_to_full(const ftc_model_tp_split_t *s, const float *local, float *full)
{
    size_t run = (size_t)(s->local * s->inner); /* one block's slice is contiguous */
    for (uint64_t o = 0; o < s->outer; o++)
        memcpy(full + (o * s->full + s->start) * s->inner, local + o * run, run * sizeof(float));
}

void ftc_model_tp_from_full(const ftc_model_tp_split_t *s, const float *full, float *local)
{
    size_t run = (size_t)(s->local * s->inner);
    for (uint64_t o = 0; o < s->outer; o++)
        memcpy(local + o * run, full + (o * s->full + s->start) * s->inner, run * sizeof(float));
}

int ftc_model_coll_allreduce(void *ctx, float *buf, size_t n)
{
    const ftc_model_coll_ctx_t *c = ctx;
    return ftc_coll_all_reduce(c->coll, buf, n, FTC_COLL_F32,
                               ftc_deadline_in_ms(c->timeout_ms > 0 ? (uint64_t)c->timeout_ms : 0));
}
