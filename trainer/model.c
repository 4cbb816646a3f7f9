/*
 * model.c — the GPT of model.h: parameter layout and initialization, the
 * activation buffers, and forward and backward written out by hand (the
 * structure of llm.c's train_gpt2.c, calling a kernels table).
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

static void ftc__param_shapes(const ftc_model_config_t *c, ftc_model_tensor_t t[FTC_MODEL_NTENSORS])
{
    uint64_t V = (uint64_t)c->vocab, maxT = (uint64_t)c->max_seq, L = (uint64_t)c->layers,
             C = (uint64_t)c->channels;
    const uint64_t s[FTC_MODEL_NTENSORS][4] = {
        /* ndim, d0, d1, d2 */
        {2, V, C, 0},     {2, maxT, C, 0},  {2, L, C, 0},     {2, L, C, 0},
        {3, L, 3 * C, C}, {2, L, 3 * C, 0}, {3, L, C, C},     {2, L, C, 0},
        {2, L, C, 0},     {2, L, C, 0},     {3, L, 4 * C, C}, {2, L, 4 * C, 0},
        {3, L, C, 4 * C}, {2, L, C, 0},     {1, C, 0, 0},     {1, C, 0, 0},
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
    ftc_model_tensor_t t[FTC_MODEL_NTENSORS];
    ftc__param_shapes(cfg, t);
    return t[FTC_MODEL_NTENSORS - 1].offset + t[FTC_MODEL_NTENSORS - 1].numel;
}

/* Lays the activation views out in one buffer; returns the floats needed
 * (base NULL: only count). */
static size_t ftc__acts_layout(ftc__acts_t *a, float *base, const ftc_model_config_t *c, int Bi,
                               int Ti)
{
    size_t B = (size_t)Bi, T = (size_t)Ti, C = (size_t)c->channels, L = (size_t)c->layers,
           NH = (size_t)c->heads, V = (size_t)c->vocab;
    const size_t sizes[FTC__NACTS] = {
        B * T * C,      L * B * T * C,  L * B * T,     L * B * T,     L * B * T * 3 * C,
        L * B * T * C,  L * B * NH * T * T, L * B * T * C, L * B * T * C, L * B * T * C,
        L * B * T,      L * B * T,      L * B * T * 4 * C, L * B * T * 4 * C, L * B * T * C,
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
    if (m->grads)
        k->mem_zero(m->grads, m->n_params * sizeof(float));
    return m->params && m->grads && m->acts_mem && m->dacts_mem && m->tokens && m->targets &&
           m->losses_host;
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
            float s = (i == P_ATTPROJW || i == P_FCPROJW) ? proj_std : std;
            for (size_t j = 0; j < t->numel; j++)
                p[j] = s * (float)ftc_rng_normal(&rng);
        }
    }
}

ftc_model_t *ftc_model_create(const ftc_model_config_t *cfg, const ftc_kernels_t *k, int B, int T,
                              uint64_t seed, ftc_err_t *err)
{
    if (ftc_model_config_check(cfg, err) < 0)
        return NULL;
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
    ftc__param_shapes(cfg, m->tensors);
    m->n_params = ftc_model_param_count(cfg);
    m->act_floats = ftc__acts_layout(&m->a, NULL, cfg, B, T);
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
    ftc__acts_layout(&m->a, m->acts_mem, cfg, B, T);
    ftc__acts_layout(&m->d, m->dacts_mem, cfg, B, T);
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
    const ftc_kernels_t *k = m->k;
    int B = m->B, T = m->T, C = m->cfg.channels, L = m->cfg.layers, NH = m->cfg.heads,
        V = m->cfg.vocab, N = B * T;
    size_t BTC = (size_t)N * C, BT = (size_t)N;
    float *P = m->params;
    ftc__acts_t *a = &m->a;
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
              *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BTC * 3,
              *atty = a->atty + l * BTC, *att = a->att + (size_t)l * B * NH * T * T,
              *attproj = a->attproj + l * BTC, *residual2 = a->residual2 + l * BTC,
              *ln2 = a->ln2 + l * BTC, *ln2_mean = a->ln2_mean + l * BT,
              *ln2_rstd = a->ln2_rstd + l * BT, *fch = a->fch + l * BTC * 4,
              *fch_gelu = a->fch_gelu + l * BTC * 4, *fcproj = a->fcproj + l * BTC,
              *residual3 = a->residual3 + l * BTC;
        k->layernorm_fwd(ln1, ln1_mean, ln1_rstd, residual, ftc__lp(P, m, P_LN1W, l),
                         ftc__lp(P, m, P_LN1B, l), N, C);
        k->matmul_fwd(qkv, ln1, ftc__lp(P, m, P_QKVW, l), ftc__lp(P, m, P_QKVB, l), N, C, 3 * C);
        k->attention_fwd(atty, att, qkv, B, T, C, NH);
        k->matmul_fwd(attproj, atty, ftc__lp(P, m, P_ATTPROJW, l), ftc__lp(P, m, P_ATTPROJB, l),
                      N, C, C);
        k->residual_fwd(residual2, residual, attproj, BTC);
        k->layernorm_fwd(ln2, ln2_mean, ln2_rstd, residual2, ftc__lp(P, m, P_LN2W, l),
                         ftc__lp(P, m, P_LN2B, l), N, C);
        k->matmul_fwd(fch, ln2, ftc__lp(P, m, P_FCW, l), ftc__lp(P, m, P_FCB, l), N, C, 4 * C);
        k->gelu_fwd(fch_gelu, fch, BTC * 4);
        k->matmul_fwd(fcproj, fch_gelu, ftc__lp(P, m, P_FCPROJW, l), ftc__lp(P, m, P_FCPROJB, l),
                      N, 4 * C, C);
        k->residual_fwd(residual3, residual2, fcproj, BTC);
    }
    k->layernorm_fwd(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (size_t)(L - 1) * BTC,
                     P + m->tensors[P_LNFW].offset, P + m->tensors[P_LNFB].offset, N, C);
    k->matmul_fwd(a->logits, a->lnf, P + m->tensors[P_WTE].offset, NULL, N, C, V);
    if (!targets)
        return 0.0f;
    k->crossentropy_fwd(m->losses, a->probs, a->logits, m->targets, N, V);
    k->mem_copy(m->losses_host, m->losses, BT * sizeof(float), FTC_COPY_D2H);
    double sum = 0.0; /* in order: the mean is part of the deterministic result */
    for (int i = 0; i < N; i++)
        sum += m->losses_host[i];
    return (float)(sum / N);
}

void ftc_model_backward(ftc_model_t *m)
{
    assert(m->have_targets);
    const ftc_kernels_t *k = m->k;
    int B = m->B, T = m->T, C = m->cfg.channels, L = m->cfg.layers, NH = m->cfg.heads,
        V = m->cfg.vocab, N = B * T;
    size_t BTC = (size_t)N * C, BT = (size_t)N;
    float *P = m->params, *G = m->grads;
    ftc__acts_t *a = &m->a, *d = &m->d;
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
                    *ln1_rstd = a->ln1_rstd + l * BT, *qkv = a->qkv + l * BTC * 3,
                    *atty = a->atty + l * BTC, *att = a->att + (size_t)l * B * NH * T * T,
                    *residual2 = a->residual2 + l * BTC, *ln2 = a->ln2 + l * BTC,
                    *ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT,
                    *fch = a->fch + l * BTC * 4, *fch_gelu = a->fch_gelu + l * BTC * 4;
        float *dln1 = d->ln1 + l * BTC, *dqkv = d->qkv + l * BTC * 3, *datty = d->atty + l * BTC,
              *scratch = d->att + (size_t)l * B * NH * T * T, *dresidual2 = d->residual2 + l * BTC,
              *dln2 = d->ln2 + l * BTC, *dfch = d->fch + l * BTC * 4,
              *dfch_gelu = d->fch_gelu + l * BTC * 4, *dresidual3 = d->residual3 + l * BTC;
        /* residual3 = residual2 + fcproj: both get dresidual3 */
        k->matmul_bwd(dfch_gelu, ftc__lp(G, m, P_FCPROJW, l), ftc__lp(G, m, P_FCPROJB, l),
                      dresidual3, fch_gelu, ftc__lp(P, m, P_FCPROJW, l), N, 4 * C, C);
        k->gelu_bwd(dfch, fch, dfch_gelu, BTC * 4);
        k->matmul_bwd(dln2, ftc__lp(G, m, P_FCW, l), ftc__lp(G, m, P_FCB, l), dfch, ln2,
                      ftc__lp(P, m, P_FCW, l), N, C, 4 * C);
        k->residual_fwd(dresidual2, dresidual2, dresidual3, BTC);
        k->layernorm_bwd(dresidual2, ftc__lp(G, m, P_LN2W, l), ftc__lp(G, m, P_LN2B, l), dln2,
                         residual2, ftc__lp(P, m, P_LN2W, l), ln2_mean, ln2_rstd, N, C);
        /* residual2 = residual + attproj */
        k->matmul_bwd(datty, ftc__lp(G, m, P_ATTPROJW, l), ftc__lp(G, m, P_ATTPROJB, l),
                      dresidual2, atty, ftc__lp(P, m, P_ATTPROJW, l), N, C, C);
        k->attention_bwd(dqkv, scratch, datty, qkv, att, B, T, C, NH);
        k->matmul_bwd(dln1, ftc__lp(G, m, P_QKVW, l), ftc__lp(G, m, P_QKVB, l), dqkv, ln1,
                      ftc__lp(P, m, P_QKVW, l), N, C, 3 * C);
        k->residual_fwd(dresidual, dresidual, dresidual2, BTC);
        k->layernorm_bwd(dresidual, ftc__lp(G, m, P_LN1W, l), ftc__lp(G, m, P_LN1B, l), dln1,
                         residual, ftc__lp(P, m, P_LN1W, l), ln1_mean, ln1_rstd, N, C);
    }
    k->embed_bwd(G + m->tensors[P_WTE].offset, G + m->tensors[P_WPE].offset, d->encoded,
                 m->tokens, B, T, C);
}
