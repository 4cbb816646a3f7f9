/*
 * model.c — the GPT of model.h: parameter layout and initialization, the
 * activation buffers, and forward and backward written out by hand (the
 * structure of llm.c's train_gpt2.c, calling a kernels table).
 *
 * Tensor parallelism is the same code with local widths: Cl = C/tp channels
 * of attention (NH/tp heads) and 4Cl hidden units of the MLP per rank, plus
 * the four all-reduces of a block (ftc__tp_allreduce). With tp = 1 the
 * widths are the full ones and no all-reduce runs: the same bits as before.
 * The slicing rule and the other TP helpers are in model_tp.c.
 */
#include "trainer/model.h"

#include "trainer/rng.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activations of one micro-batch, as views into one buffer. The gradient
 * buffer (dacts) has the same layout; its att region is the attention
 * backward's scratch. */
#define FTC__NACTS 21
/* With TP, qkv, atty, att, fch and fch_gelu hold this rank's heads and hidden
 * units only (3C/tp, C/tp, NH/tp, 4C/tp); the rest is full size. */
typedef struct ftc__acts {
    float *encoded;   /* (B, T, C) */
    float *ln1;       /* (L, B, T, C) */
    float *ln1_mean;  /* (L, B, T) */
    float *ln1_rstd;  /* (L, B, T) */
    float *qkv;       /* (L, B, T, 3C) */
    float *atty;      /* (L, B, T, C) */
    float *att;       /* (L, B, NH, T, T) */
    float *attproj;   /* (L, B, T, C) */
    float *residual2; /* (L, B, T, C) */
    float *ln2;       /* (L, B, T, C) */
    float *ln2_mean;  /* (L, B, T) */
    float *ln2_rstd;  /* (L, B, T) */
    float *fch;       /* (L, B, T, 4C) */
    float *fch_gelu;  /* (L, B, T, 4C) */
    float *fcproj;    /* (L, B, T, C) */
    float *residual3; /* (L, B, T, C) */
    float *lnf;       /* (B, T, C) */
    float *lnf_mean;  /* (B, T) */
    float *lnf_rstd;  /* (B, T) */
    float *logits;    /* (B, T, V) */
    float *probs;     /* (B, T, V); losses follow in the same slot */
} ftc__acts_t;

struct ftc_model {
    ftc_model_config_t cfg;
    const ftc_kernels_t *k;
    int B, T;                                      /* micro-batch shape */
    size_t n_params;
    float *params;                                 /* n_params, contiguous */
    float *grads;                                  /* same layout */
    ftc_model_tensor_t tensors[FTC_MODEL_NTENSORS];
    size_t act_floats;                             /* floats in acts (and in dacts) */
    float *acts_mem, *dacts_mem;
    ftc__acts_t a, d;                              /* views into acts_mem / dacts_mem */
    float *losses;                                 /* (B, T), after probs */
    int32_t *tokens, *targets;                     /* copies of the last forward's input */
    float *losses_host;                            /* host copy of losses (B*T) */
    bool have_targets;                             /* the last forward had targets */
    int tp_rank, tp_size;                          /* tensor parallelism: this rank of tp_size */
    ftc_model_allreduce_fn allreduce;              /* the TP group's sum (tp_size > 1) */
    void *allreduce_ctx;
    ftc_model_tp_split_t splits[FTC_MODEL_NTENSORS]; /* where each view sits in the full tensor */
    ftc_err_t tp_err;                              /* sticky: code 0, or the all-reduce's failure */
    float *norm_parts;                             /* 2 x tp_size: the TP norm's shares (host) */
    float *norm_dev;                               /* and their exchange (backend memory) */
};

/* Parameter tensors in buffer order: name, shape as (layers?, rows, cols)
 * in units resolved by ftc__param_shapes, decay. */
enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

static const char *const ftc__pnames[FTC_MODEL_NTENSORS] = {
    "wte",          "wpe",          "h.ln1.w",     "h.ln1.b",     "h.attn.qkv.w", "h.attn.qkv.b",
    "h.attn.proj.w", "h.attn.proj.b", "h.ln2.w",   "h.ln2.b",     "h.mlp.fc.w",   "h.mlp.fc.b",
    "h.mlp.proj.w", "h.mlp.proj.b", "lnf.w",       "lnf.b",
};

/* The views of one TP rank (tp = 1: the whole model); Cl = C/tp is this
 * rank's share of the attention channels, 4Cl of the MLP's hidden units. */
static void ftc__param_shapes(const ftc_model_config_t *c, int tp,
                              ftc_model_tensor_t t[FTC_MODEL_NTENSORS])
{
    uint64_t V = (uint64_t)c->vocab, maxT = (uint64_t)c->max_seq, L = (uint64_t)c->layers,
             C = (uint64_t)c->channels, Cl = C / (uint64_t)tp;
    const uint64_t s[FTC_MODEL_NTENSORS][4] = {
        /* ndim, d0, d1, d2 */
        {2, V, C, 0},      {2, maxT, C, 0},    {2, L, C, 0},      {2, L, C, 0},
        {3, L, 3 * Cl, C}, {2, L, 3 * Cl, 0},  {3, L, C, Cl},     {2, L, C, 0},
        {2, L, C, 0},      {2, L, C, 0},       {3, L, 4 * Cl, C}, {2, L, 4 * Cl, 0},
        {3, L, C, 4 * Cl}, {2, L, C, 0},       {1, C, 0, 0},      {1, C, 0, 0},
    };
    size_t off = 0;
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        t[i].name = ftc__pnames[i];
        t[i].ndim = (uint32_t)s[i][0];
        size_t n = 1;
        for (uint32_t d = 0; d < 3; d++) {
            t[i].shape[d] = d < t[i].ndim ? s[i][1 + d] : 0;
            if (d < t[i].ndim)
                n *= (size_t)s[i][1 + d];
        }
        t[i].offset = off;
        t[i].numel = n;
        /* decay the matrices and embeddings, not biases or layernorm gains */
        t[i].decay = i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW ||
                     i == P_FCPROJW;
        off += n;
    }
}

int ftc_model_preset(const char *name, ftc_model_config_t *cfg, ftc_err_t *err)
{
    static const struct {
        const char *name;
        ftc_model_config_t c;
    } presets[] = {
        {"tiny", {256, 64, 2, 4, 64}},
        {"small", {256, 128, 4, 4, 256}},
        {"medium", {256, 256, 6, 8, 512}},
        {"gpt2-small", {50257, 1024, 12, 12, 768}},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (name && !strcmp(name, presets[i].name)) {
            *cfg = presets[i].c;
            return 0;
        }
    }
    return ftc_err_set(err, FTC_EINVAL,
                       "unknown model size '%s' (tiny, small, medium or gpt2-small)",
                       name ? name : "(null)");
}

int ftc_model_config_check(const ftc_model_config_t *c, ftc_err_t *err)
{
    if (c->vocab < 2 || c->vocab > 65536)
        return ftc_err_set(err, FTC_EINVAL, "model vocab %d: must be 2..65536 (uint16 tokens)",
                           c->vocab);
    if (c->max_seq < 1 || c->max_seq > 65536)
        return ftc_err_set(err, FTC_EINVAL, "model max_seq %d: must be 1..65536", c->max_seq);
    if (c->layers < 1 || c->layers > 1024)
        return ftc_err_set(err, FTC_EINVAL, "model layers %d: must be 1..1024", c->layers);
    if (c->channels < 1 || c->channels > 65536 || c->heads < 1 || c->channels % c->heads)
        return ftc_err_set(err, FTC_EINVAL,
                           "model channels %d / heads %d: heads must divide channels (1..65536)",
                           c->channels, c->heads);
    return 0;
}

size_t ftc_model_param_count(const ftc_model_config_t *cfg)
{
    return ftc_model_param_count_tp(cfg, 1);
}

size_t ftc_model_param_count_tp(const ftc_model_config_t *cfg, int tp_size)
{
    ftc_model_tensor_t t[FTC_MODEL_NTENSORS];
    if (ftc_model_tensors_of(cfg, tp_size, t, NULL) < 0)
        return 0;
    return t[FTC_MODEL_NTENSORS - 1].offset + t[FTC_MODEL_NTENSORS - 1].numel;
}

int ftc_model_tensors_of(const ftc_model_config_t *cfg, int tp_size,
                         ftc_model_tensor_t t[FTC_MODEL_NTENSORS], ftc_err_t *err)
{
    if (tp_size < 1 || cfg->heads < 1 || cfg->heads % tp_size)
        return ftc_err_set(err, FTC_EINVAL,
                           "tensor parallelism of degree %d: must divide the %d heads", tp_size,
                           cfg->heads);
    ftc__param_shapes(cfg, tp_size, t);
    return 0;
}

/* Lays the activation views out in one buffer; returns the floats needed
 * (base NULL: only count). */
static size_t ftc__acts_layout(ftc__acts_t *a, float *base, const ftc_model_config_t *c, int Bi,
                               int Ti, int tp)
{
    size_t B = (size_t)Bi, T = (size_t)Ti, C = (size_t)c->channels, L = (size_t)c->layers,
           NH = (size_t)c->heads, V = (size_t)c->vocab, Cl = C / (size_t)tp, NHl = NH / (size_t)tp;
    const size_t sizes[FTC__NACTS] = {
        B * T * C,      L * B * T * C,  L * B * T,     L * B * T,     L * B * T * 3 * Cl,
        L * B * T * Cl, L * B * NHl * T * T, L * B * T * C, L * B * T * C, L * B * T * C,
        L * B * T,      L * B * T,      L * B * T * 4 * Cl, L * B * T * 4 * Cl, L * B * T * C,
        L * B * T * C,  B * T * C,      B * T,         B * T,         B * T * V,
        B * T * V + B * T, /* probs, then losses */
    };
    float **views[FTC__NACTS] = {
        &a->encoded, &a->ln1,      &a->ln1_mean, &a->ln1_rstd,  &a->qkv,      &a->atty,
        &a->att,     &a->attproj,  &a->residual2, &a->ln2,      &a->ln2_mean, &a->ln2_rstd,
        &a->fch,     &a->fch_gelu, &a->fcproj,   &a->residual3, &a->lnf,      &a->lnf_mean,
        &a->lnf_rstd, &a->logits,  &a->probs,
    };
    size_t off = 0;
    for (int i = 0; i < FTC__NACTS; i++) {
        *views[i] = base ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}

/* Every buffer of the model, in the backend's memory (kernels.h mem_alloc),
 * except losses_host; false when one is missing. The one place the model
 * allocates: ftc__free_buffers undoes it. */
static bool ftc__alloc_buffers(ftc_model_t *m)
{
    const ftc_kernels_t *k = m->k;
    size_t BT = (size_t)m->B * (size_t)m->T;
    m->params = k->mem_alloc(m->n_params * sizeof(float));
    m->grads = k->mem_alloc(m->n_params * sizeof(float));
    m->acts_mem = k->mem_alloc(m->act_floats * sizeof(float));
    m->dacts_mem = k->mem_alloc(m->act_floats * sizeof(float));
    m->tokens = k->mem_alloc(BT * sizeof(int32_t));
    m->targets = k->mem_alloc(BT * sizeof(int32_t));
    m->losses_host = malloc(BT * sizeof(float));
    m->norm_parts = malloc(2 * (size_t)m->tp_size * sizeof(float));
    m->norm_dev = k->mem_alloc(2 * (size_t)m->tp_size * sizeof(float));
    if (m->grads)
        k->mem_zero(m->grads, m->n_params * sizeof(float));
    return m->params && m->grads && m->acts_mem && m->dacts_mem && m->tokens && m->targets &&
           m->losses_host && m->norm_parts && m->norm_dev;
}

static void ftc__free_buffers(ftc_model_t *m)
{
    const ftc_kernels_t *k = m->k;
    k->mem_free(m->params);
    k->mem_free(m->grads);
    k->mem_free(m->acts_mem);
    k->mem_free(m->dacts_mem);
    k->mem_free(m->tokens);
    k->mem_free(m->targets);
    free(m->losses_host);
    free(m->norm_parts);
    k->mem_free(m->norm_dev);
}

/* Initializes the parameters on the host (params: n_params floats), to be
 * copied into the backend's buffer. */
static void ftc__init_params(ftc_model_t *m, float *params, uint64_t seed)
{
    ftc_rng_t rng;
    ftc_rng_seed(&rng, seed);
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)m->cfg.layers);
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        const ftc_model_tensor_t *t = &m->tensors[i];
        float *p = params + t->offset;
        if (i == P_LN1W || i == P_LN2W || i == P_LNFW) {
            for (size_t j = 0; j < t->numel; j++)
                p[j] = 1.0f;
        } else if (i == P_LN1B || i == P_LN2B || i == P_LNFB || i == P_QKVB || i == P_ATTPROJB ||
                   i == P_FCB || i == P_FCPROJB) {
            memset(p, 0, t->numel * sizeof(float));
        } else {
            /* draw the full tensor in order (the RNG sequence of TP = 1),
             * keep this rank's slice */
            float s = (i == P_ATTPROJW || i == P_FCPROJW) ? proj_std : std;
            const ftc_model_tp_split_t *sp = &m->splits[i];
            for (uint64_t o = 0; o < sp->outer; o++)
                for (uint64_t r = 0; r < sp->full; r++)
                    for (uint64_t j = 0; j < sp->inner; j++) {
                        float v = s * (float)ftc_rng_normal(&rng);
                        if (r >= sp->start && r - sp->start < sp->local)
                            p[(o * sp->local + r - sp->start) * sp->inner + j] = v;
                    }
        }
    }
}

ftc_model_t *ftc_model_create(const ftc_model_config_t *cfg, const ftc_kernels_t *k, int B, int T,
                              uint64_t seed, ftc_err_t *err)
{
    return ftc_model_create_tp(cfg, k, B, T, seed, 0, 1, NULL, NULL, err);
}

ftc_model_t *ftc_model_create_tp(const ftc_model_config_t *cfg, const ftc_kernels_t *k, int B,
                                 int T, uint64_t seed, int tp_rank, int tp_size,
                                 ftc_model_allreduce_fn allreduce, void *ctx, ftc_err_t *err)
{
    if (ftc_model_config_check(cfg, err) < 0)
        return NULL;
    if (tp_size < 1 || cfg->heads % tp_size || tp_rank < 0 || tp_rank >= tp_size) {
        ftc_err_set(err, FTC_EINVAL,
                    "tensor parallelism rank %d of %d: the degree must divide the %d heads (and "
                    "so the %d channels and the MLP's %d hidden units) and the rank be 0..%d",
                    tp_rank, tp_size, cfg->heads, cfg->channels, 4 * cfg->channels, tp_size - 1);
        return NULL;
    }
    if (tp_size > 1 && !allreduce) {
        ftc_err_set(err, FTC_EINVAL, "tensor parallelism of degree %d needs an all-reduce callback",
                    tp_size);
        return NULL;
    }
    if (!k || k->struct_size < sizeof(ftc_kernels_t) || k->version != FTC_KERNELS_VERSION) {
        ftc_err_set(err, FTC_EINVAL, "kernels table missing or of another version");
        return NULL;
    }
    if (B < 1 || T < 1 || T > cfg->max_seq || B > 65536) {
        ftc_err_set(err, FTC_EINVAL, "micro-batch %d x %d: need B >= 1 and 1 <= T <= max_seq %d",
                    B, T, cfg->max_seq);
        return NULL;
    }
    ftc_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        ftc_err_set(err, FTC_ENOMEM, "model: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->k = k;
    m->B = B;
    m->T = T;
    m->tp_rank = tp_rank;
    m->tp_size = tp_size;
    m->allreduce = allreduce;
    m->allreduce_ctx = ctx;
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++)
        ftc_model_tp_split(cfg, tp_rank, tp_size, i, &m->splits[i], NULL); /* checked above */
    ftc__param_shapes(cfg, tp_size, m->tensors);
    m->n_params = ftc_model_param_count_tp(cfg, tp_size);
    m->act_floats = ftc__acts_layout(&m->a, NULL, cfg, B, T, tp_size);
    float *init = malloc(m->n_params * sizeof(float)); /* host staging of the initial weights */
    if (!ftc__alloc_buffers(m) || !init) {
        free(init);
        ftc_err_set(err, FTC_ENOMEM,
                    "model: out of %s memory for %zu parameters (%zu MiB with gradients) and %zu "
                    "MiB of activations for a %d x %d micro-batch",
                    k->name, m->n_params, m->n_params * 8 >> 20, m->act_floats * 8 >> 20, B, T);
        ftc_model_destroy(m);
        return NULL;
    }
    ftc__acts_layout(&m->a, m->acts_mem, cfg, B, T, tp_size);
    ftc__acts_layout(&m->d, m->dacts_mem, cfg, B, T, tp_size);
    m->losses = m->a.probs + (size_t)B * T * (size_t)cfg->vocab;
    ftc__init_params(m, init, seed);
    k->mem_copy(m->params, init, m->n_params * sizeof(float), FTC_COPY_H2D);
    free(init);
    return m;
}

void ftc_model_destroy(ftc_model_t *m)
{
    if (!m)
        return;
    ftc__free_buffers(m);
    free(m);
}

const ftc_model_config_t *ftc_model_config(const ftc_model_t *m) { return &m->cfg; }
const ftc_kernels_t *ftc_model_kernels(const ftc_model_t *m) { return m->k; }
const ftc_model_tensor_t *ftc_model_tensors(const ftc_model_t *m) { return m->tensors; }
size_t ftc_model_num_params(const ftc_model_t *m) { return m->n_params; }
float *ftc_model_params(ftc_model_t *m) { return m->params; }
float *ftc_model_grads(ftc_model_t *m) { return m->grads; }
size_t ftc_model_act_bytes(const ftc_model_t *m) { return 2 * m->act_floats * sizeof(float); }
const float *ftc_model_logits(const ftc_model_t *m) { return m->a.logits; }
const ftc_model_tp_split_t *ftc_model_tp_splits(const ftc_model_t *m) { return m->splits; }

int ftc_model_tp(const ftc_model_t *m, int *tp_rank)
{
    if (tp_rank)
        *tp_rank = m->tp_rank;
    return m->tp_size;
}

void ftc_model_tp_rebind(ftc_model_t *m, ftc_model_allreduce_fn allreduce, void *ctx)
{
    m->allreduce = allreduce;
    m->allreduce_ctx = ctx;
    ftc_err_clear(&m->tp_err);
}

int ftc_model_status(const ftc_model_t *m, ftc_err_t *err)
{
    if (err)
        *err = m->tp_err;
    return m->tp_err.code;
}

/* The TP group's sum of buf (n floats); a no-op without TP. A failure is
 * sticky (model.h). */
static int ftc__tp_allreduce(ftc_model_t *m, float *buf, size_t n, const char *what, int layer)
{
    if (m->tp_size == 1)
        return 0;
    if (m->tp_err.code)
        return m->tp_err.code;
    int rc = m->allreduce(m->allreduce_ctx, buf, n);
    if (rc == 0)
        return 0;
    if (rc > 0)
        rc = FTC_EIO; /* a callback breaking the 0 / -FTC_E* contract */
    if (layer >= 0)
        return ftc_err_set(&m->tp_err, rc,
                           "tensor-parallel all-reduce of %s of layer %d (%zu floats, rank %d of "
                           "%d) failed: %s; the TP group is broken: rebuild it, "
                           "ftc_model_tp_rebind(), zero the gradients",
                           what, layer, n, m->tp_rank, m->tp_size, ftc_strerror(rc));
    return ftc_err_set(&m->tp_err, rc,
                       "tensor-parallel all-reduce of %s (%zu floats, rank %d of %d) failed: %s; "
                       "the TP group is broken: rebuild it, ftc_model_tp_rebind()",
                       what, n, m->tp_rank, m->tp_size, ftc_strerror(rc));
}

int ftc_model_grad_norm(ftc_model_t *m, double *norm)
{
    /* the squares are summed where the gradients are (kernels.h sumsq: on the
     * CPU the sequential double sum of ftc_grad_norm, in the same order) */
    if (m->tp_size == 1) {
        *norm = sqrt(m->k->sumsq(m->grads, m->n_params));
        return 0;
    }
    double split = 0.0, repl = 0.0; /* the sliced tensors' share; the replicated ones' */
    for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
        double s = m->k->sumsq(m->grads + m->tensors[i].offset, m->tensors[i].numel);
        *(m->splits[i].replicated ? &repl : &split) += s;
    }
    /* Every rank's share to every rank, exactly: rank r writes its double
     * as hi + lo (two floats, ~48 bits) into slots 2r, 2r+1, the others
     * zero; the F32 all-reduce then adds only zeros to each value, which is
     * exact whatever its order. The shares are summed in rank order in
     * double: the same bits on every TP rank, for a fixed TP degree. */
    float *parts = m->norm_parts;
    memset(parts, 0, 2 * (size_t)m->tp_size * sizeof(float));
    float hi = (float)split;
    parts[2 * m->tp_rank] = hi;
    parts[2 * m->tp_rank + 1] = isinf(hi) ? 0.0f : (float)(split - (double)hi);
    /* the all-reduce runs on backend memory, like the model's others */
    size_t pb = 2 * (size_t)m->tp_size * sizeof(float);
    m->k->mem_copy(m->norm_dev, parts, pb, FTC_COPY_H2D);
    int rc = ftc__tp_allreduce(m, m->norm_dev, 2 * (size_t)m->tp_size, "the gradient norm", -1);
    if (rc < 0)
        return rc;
    m->k->mem_copy(parts, m->norm_dev, pb, FTC_COPY_D2H);
    double s = 0.0;
    for (int r = 0; r < m->tp_size; r++)
        s += (double)parts[2 * r] + (double)parts[2 * r + 1];
    *norm = sqrt(s + repl);
    return 0;
}

int ftc_model_batch(const ftc_model_t *m, int *T)
{
    if (T)
        *T = m->T;
    return m->B;
}

void ftc_model_zero_grad(ftc_model_t *m)
{
    m->k->mem_zero(m->grads, m->n_params * sizeof(float));
}

/* Pointer to layer l's slice of a per-layer parameter tensor. */
static float *ftc__lp(float *base, const ftc_model_t *m, int which, int l)
{
    const ftc_model_tensor_t *t = &m->tensors[which];
    return base + t->offset + (size_t)l * (t->numel / (size_t)m->cfg.layers);
}

float ftc_model_forward(ftc_model_t *m, const int32_t *tokens, const int32_t *targets)
{
    float loss;
    ftc_model_fwd(m, tokens, targets, &loss);
    return loss;
}

void ftc_model_backward(ftc_model_t *m)
{
    (void)ftc_model_bwd(m); /* the error stays readable: ftc_model_status */
}

int ftc_model_fwd(ftc_model_t *m, const int32_t *tokens, const int32_t *targets, float *loss)
{
    const ftc_kernels_t *k = m->k;
    /* Cl, NHl, 4Cl: this TP rank's attention channels, heads, MLP units */
    int B = m->B, T = m->T, C = m->cfg.channels, L = m->cfg.layers, NH = m->cfg.heads,
        V = m->cfg.vocab, N = B * T, Cl = C / m->tp_size, NHl = NH / m->tp_size;
    size_t BTC = (size_t)N * C, BT = (size_t)N, BTCl = (size_t)N * Cl;
    float *P = m->params;
    ftc__acts_t *a = &m->a;
    if (loss)
        *loss = NAN;
    if (m->tp_err.code)
        return m->tp_err.code;
    /* the row-parallel biases are added once: by TP rank 0, before the sum */
    bool bias_here = m->tp_rank == 0;
    int rc;
    for (int i = 0; i < N; i++) {
        assert(tokens[i] >= 0 && tokens[i] < V);
        assert(!targets || (targets[i] >= 0 && targets[i] < V));
    }
    k->mem_copy(m->tokens, tokens, BT * sizeof(int32_t), FTC_COPY_H2D);
    m->have_targets = targets != NULL;
    if (targets)
        k->mem_copy(m->targets, targets, BT * sizeof(int32_t), FTC_COPY_H2D);

    k->embed_fwd(a->encoded, m->tokens, P + m->tensors[P_WTE].offset, P + m->tensors[P_WPE].offset,
                 B, T, C);
    for (int l = 0; l < L; l++) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BTC;
        float *ln1 = a->ln1 + l * BTC, *ln1_mean = a->ln1_mean + l * BT,
              *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BTCl * 3,
              *atty = a->atty + l * BTCl, *att = a->att + (size_t)l * B * NHl * T * T,
              *attproj = a->attproj + l * BTC, *residual2 = a->residual2 + l * BTC,
              *ln2 = a->ln2 + l * BTC, *ln2_mean = a->ln2_mean + l * BT,
              *ln2_rstd = a->ln2_rstd + l * BT, *fch = a->fch + l * BTCl * 4,
              *fch_gelu = a->fch_gelu + l * BTCl * 4, *fcproj = a->fcproj + l * BTC,
              *residual3 = a->residual3 + l * BTC;
        k->layernorm_fwd(ln1, ln1_mean, ln1_rstd, residual, ftc__lp(P, m, P_LN1W, l),
                         ftc__lp(P, m, P_LN1B, l), N, C);
        /* column-parallel: this rank's heads' q, k, v */
        k->matmul_fwd(qkv, ln1, ftc__lp(P, m, P_QKVW, l), ftc__lp(P, m, P_QKVB, l), N, C, 3 * Cl);
        k->attention_fwd(atty, att, qkv, B, T, Cl, NHl);
        /* row-parallel: a partial sum over this rank's heads, then the TP sum */
        k->matmul_fwd(attproj, atty, ftc__lp(P, m, P_ATTPROJW, l),
                      bias_here ? ftc__lp(P, m, P_ATTPROJB, l) : NULL, N, Cl, C);
        if ((rc = ftc__tp_allreduce(m, attproj, BTC, "the attention output (forward)", l)) < 0)
            return rc;
        k->residual_fwd(residual2, residual, attproj, BTC);
        k->layernorm_fwd(ln2, ln2_mean, ln2_rstd, residual2, ftc__lp(P, m, P_LN2W, l),
                         ftc__lp(P, m, P_LN2B, l), N, C);
        k->matmul_fwd(fch, ln2, ftc__lp(P, m, P_FCW, l), ftc__lp(P, m, P_FCB, l), N, C, 4 * Cl);
        k->gelu_fwd(fch_gelu, fch, BTCl * 4);
        k->matmul_fwd(fcproj, fch_gelu, ftc__lp(P, m, P_FCPROJW, l),
                      bias_here ? ftc__lp(P, m, P_FCPROJB, l) : NULL, N, 4 * Cl, C);
        if ((rc = ftc__tp_allreduce(m, fcproj, BTC, "the MLP output (forward)", l)) < 0)
            return rc;
        k->residual_fwd(residual3, residual2, fcproj, BTC);
    }
    k->layernorm_fwd(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (size_t)(L - 1) * BTC,
                     P + m->tensors[P_LNFW].offset, P + m->tensors[P_LNFB].offset, N, C);
    /* the LM head is replicated: full logits on every TP rank */
    k->matmul_fwd(a->logits, a->lnf, P + m->tensors[P_WTE].offset, NULL, N, C, V);
    if (!targets) {
        if (loss)
            *loss = 0.0f;
        return 0;
    }
    k->crossentropy_fwd(m->losses, a->probs, a->logits, m->targets, N, V);
    k->mem_copy(m->losses_host, m->losses, BT * sizeof(float), FTC_COPY_D2H);
    double sum = 0.0; /* in order: the mean is part of the deterministic result */
    for (int i = 0; i < N; i++)
        sum += m->losses_host[i];
    if (loss)
        *loss = (float)(sum / N);
    return 0;
}

int ftc_model_bwd(ftc_model_t *m)
{
    assert(m->have_targets);
    if (m->tp_err.code)
        return m->tp_err.code;
    const ftc_kernels_t *k = m->k;
    int B = m->B, T = m->T, C = m->cfg.channels, L = m->cfg.layers, NH = m->cfg.heads,
        V = m->cfg.vocab, N = B * T, Cl = C / m->tp_size, NHl = NH / m->tp_size;
    size_t BTC = (size_t)N * C, BT = (size_t)N, BTCl = (size_t)N * Cl;
    float *P = m->params, *G = m->grads;
    ftc__acts_t *a = &m->a, *d = &m->d;
    int rc;
    k->mem_zero(m->dacts_mem, m->act_floats * sizeof(float));

    k->crossentropy_bwd(d->logits, a->probs, m->targets, 1.0f / (float)N, N, V);
    k->matmul_bwd(d->lnf, G + m->tensors[P_WTE].offset, NULL, d->logits, a->lnf,
                  P + m->tensors[P_WTE].offset, N, C, V);
    k->layernorm_bwd(d->residual3 + (size_t)(L - 1) * BTC, G + m->tensors[P_LNFW].offset,
                     G + m->tensors[P_LNFB].offset, d->lnf, a->residual3 + (size_t)(L - 1) * BTC,
                     P + m->tensors[P_LNFW].offset, a->lnf_mean, a->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BTC;
        float *dresidual = l == 0 ? d->encoded : d->residual3 + (size_t)(l - 1) * BTC;
        const float *ln1 = a->ln1 + l * BTC, *ln1_mean = a->ln1_mean + l * BT,
                    *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BTCl * 3,
                    *atty = a->atty + l * BTCl, *att = a->att + (size_t)l * B * NHl * T * T,
                    *residual2 = a->residual2 + l * BTC, *ln2 = a->ln2 + l * BTC,
                    *ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT,
                    *fch = a->fch + l * BTCl * 4, *fch_gelu = a->fch_gelu + l * BTCl * 4;
        float *dln1 = d->ln1 + l * BTC, *dqkv = d->qkv + l * BTCl * 3,
              *datty = d->atty + l * BTCl, *scratch = d->att + (size_t)l * B * NHl * T * T,
              *dresidual2 = d->residual2 + l * BTC, *dln2 = d->ln2 + l * BTC,
              *dfch = d->fch + l * BTCl * 4, *dfch_gelu = d->fch_gelu + l * BTCl * 4,
              *dresidual3 = d->residual3 + l * BTC;
        /* residual3 = residual2 + fcproj: both get dresidual3 (replicated, so
         * every TP rank computes the same replicated bias gradient) */
        k->matmul_bwd(dfch_gelu, ftc__lp(G, m, P_FCPROJW, l), ftc__lp(G, m, P_FCPROJB, l),
                      dresidual3, fch_gelu, ftc__lp(P, m, P_FCPROJW, l), N, 4 * Cl, C);
        k->gelu_bwd(dfch, fch, dfch_gelu, BTCl * 4);
        k->matmul_bwd(dln2, ftc__lp(G, m, P_FCW, l), ftc__lp(G, m, P_FCB, l), dfch, ln2,
                      ftc__lp(P, m, P_FCW, l), N, C, 4 * Cl);
        /* the column-parallel input's gradient: a partial sum, then the TP sum */
        if ((rc = ftc__tp_allreduce(m, dln2, BTC, "the MLP input gradient (backward)", l)) < 0)
            return rc;
        k->residual_fwd(dresidual2, dresidual2, dresidual3, BTC);
        k->layernorm_bwd(dresidual2, ftc__lp(G, m, P_LN2W, l), ftc__lp(G, m, P_LN2B, l), dln2,
                         residual2, ftc__lp(P, m, P_LN2W, l), ln2_mean, ln2_rstd, N, C);
        /* residual2 = residual + attproj */
        k->matmul_bwd(datty, ftc__lp(G, m, P_ATTPROJW, l), ftc__lp(G, m, P_ATTPROJB, l),
                      dresidual2, atty, ftc__lp(P, m, P_ATTPROJW, l), N, Cl, C);
        k->attention_bwd(dqkv, scratch, datty, qkv, att, B, T, Cl, NHl);
        k->matmul_bwd(dln1, ftc__lp(G, m, P_QKVW, l), ftc__lp(G, m, P_QKVB, l), dqkv, ln1,
                      ftc__lp(P, m, P_QKVW, l), N, C, 3 * Cl);
        if ((rc = ftc__tp_allreduce(m, dln1, BTC, "the attention input gradient (backward)", l)) <
            0)
            return rc;
        k->residual_fwd(dresidual, dresidual, dresidual2, BTC);
        k->layernorm_bwd(dresidual, ftc__lp(G, m, P_LN1W, l), ftc__lp(G, m, P_LN1B, l), dln1,
                         residual, ftc__lp(P, m, P_LN1W, l), ln1_mean, ln1_rstd, N, C);
    }
    k->embed_bwd(G + m->tensors[P_WTE].offset, G + m->tensors[P_WPE].offset, d->encoded,
                 m->tokens, B, T, C);
    return 0;
}
