/*
 * synth.c — see synth.h. Tensors per block: attention qkv and projection,
 * MLP up and down, two layernorm weights; plus embeddings. Each parameter
 * tensor has ".m" and ".v" optimizer twins. Sizes are scaled so that the
 * whole shard is about the requested size.
 */
#include "trainer/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ftc__synth_param {
    uint32_t w, m, v; /* tensor indices of weight and its two moments */
    uint64_t n;       /* elements */
} ftc__synth_param_t;

struct ftc_synth {
    ftc_synth_options_t o;
    ftc_shard_layout_t *layout;
    uint8_t *region;
    uint64_t size;
    ftc__synth_param_t *p;
    uint32_t np;
    uint64_t rng; /* splitmix64 state */
};

static uint64_t ftc__splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Two standard normals per call (Box-Muller). */
static void ftc__normal2(uint64_t *s, float *a, float *b)
{
    uint64_t r = ftc__splitmix(s);
    double u1 = ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(ftc__splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
    double rad = sqrt(-2.0 * log(u1));
    *a = (float)(rad * cos(6.283185307179586 * u2));
    *b = (float)(rad * sin(6.283185307179586 * u2));
}

static inline uint16_t ftc__f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7FFF + ((x >> 16) & 1); /* round to nearest even */
    return (uint16_t)(x >> 16);
}
static inline float ftc__bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline float ftc__get(const uint8_t *base, int dtype, uint64_t i)
{
    if (dtype == FTC_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, base + 2 * i, 2);
        return ftc__bf16_to_f32(h);
    }
    float f;
    memcpy(&f, base + 4 * i, 4);
    return f;
}
static inline void ftc__put(uint8_t *base, int dtype, uint64_t i, float f)
{
    if (dtype == FTC_DTYPE_BF16) {
        uint16_t h = ftc__f32_to_bf16(f);
        memcpy(base + 2 * i, &h, 2);
    } else {
        memcpy(base + 4 * i, &f, 4);
    }
}

static int ftc__synth_add(ftc_synth_t *s, const char *name, uint32_t ndim, const uint64_t *shape,
                          ftc_err_t *err)
{
    char buf[256];
    uint64_t n = 1;
    for (uint32_t k = 0; k < ndim; k++)
        n *= shape[k];
    ftc__synth_param_t *p = &s->p[s->np];
    int rc = ftc_shard_layout_add_tensor(s->layout, name, s->o.dtype, ndim, shape, err);
    if (rc < 0)
        return rc;
    p->w = (uint32_t)rc;
    snprintf(buf, sizeof buf, "optim.%s.exp_avg", name);
    if ((rc = ftc_shard_layout_add_tensor(s->layout, buf, s->o.dtype, ndim, shape, err)) < 0)
        return rc;
    p->m = (uint32_t)rc;
    snprintf(buf, sizeof buf, "optim.%s.exp_avg_sq", name);
    if ((rc = ftc_shard_layout_add_tensor(s->layout, buf, s->o.dtype, ndim, shape, err)) < 0)
        return rc;
    p->v = (uint32_t)rc;
    p->n = n;
    s->np++;
    return 0;
}

ftc_synth_t *ftc_synth_create(const ftc_synth_options_t *o, const ftc_shard_info_t *info,
                              ftc_err_t *err)
{
    if (o->dtype != FTC_DTYPE_F32 && o->dtype != FTC_DTYPE_BF16) {
        ftc_err_set(err, FTC_EINVAL, "synthetic state: dtype must be fp32 or bf16");
        return NULL;
    }
    if (o->bytes < 4096 || o->layers < 1 || o->layers > 1000) {
        ftc_err_set(err, FTC_EINVAL, "synthetic state: bytes >= 4096 and 1..1000 layers");
        return NULL;
    }
    ftc_synth_t *s = calloc(1, sizeof *s);
    if (!s) {
        ftc_err_set(err, FTC_ENOMEM, "synthetic state: out of memory");
        return NULL;
    }
    s->o = *o;
    s->rng = o->seed * 0x2545F4914F6CDD1Dull + 1;
    s->layout = ftc_shard_layout_create(info);
    s->p = calloc((size_t)o->layers * 6 + 2, sizeof *s->p);
    if (!s->layout || !s->p) {
        ftc_err_set(err, FTC_ENOMEM, "synthetic state: out of memory");
        goto fail;
    }
    /* Pick the model width d so that 3 copies (w, m, v) of
     * vocab*d + ctx*d + layers*(12 d^2 + 2 d) elements fill the budget. */
    uint64_t esz = ftc_dtype_size(o->dtype);
    uint64_t elems = o->bytes / (3 * esz);
    uint64_t d = 8;
    while (1) {
        uint64_t nd = d + 8;
        uint64_t e = 64 * nd + 16 * nd + (uint64_t)o->layers * (12 * nd * nd + 2 * nd);
        if (e > elems)
            break;
        d = nd;
    }
    uint64_t vocab = 64, ctx = 16;
    uint64_t used = vocab * d + ctx * d + (uint64_t)o->layers * (12 * d * d + 2 * d);
    if (elems > used) /* give the remainder to the embedding, like a big vocabulary */
        vocab += (elems - used) / d;
    char name[128];
    uint64_t sh[2];
    sh[0] = vocab, sh[1] = d;
    if (ftc__synth_add(s, "wte", 2, sh, err))
        goto fail;
    sh[0] = ctx;
    if (ftc__synth_add(s, "wpe", 2, sh, err))
        goto fail;
    for (int l = 0; l < o->layers; l++) {
        struct {
            const char *n;
            uint64_t r, c;
        } t[] = {{"attn.qkv.weight", 3 * d, d}, {"attn.proj.weight", d, d},
                 {"mlp.fc.weight", 4 * d, d},   {"mlp.proj.weight", d, 4 * d},
                 {"ln1.weight", d, 0},          {"ln2.weight", d, 0}};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, t[k].n);
            sh[0] = t[k].r, sh[1] = t[k].c;
            if (ftc__synth_add(s, name, t[k].c ? 2 : 1, sh, err))
                goto fail;
        }
    }
    uint64_t cursor = 0;
    if (ftc_shard_layout_add_meta(s->layout, "data.cursor", &cursor, sizeof cursor, err) ||
        ftc_shard_layout_add_meta(s->layout, "rng.state", &s->rng, sizeof s->rng, err))
        goto fail;
    s->size = ftc_shard_layout_size(s->layout);
    s->region = aligned_alloc(FTC_SHARD_ALIGN, (s->size + 4095) / 4096 * 4096);
    if (!s->region) {
        ftc_err_set(err, FTC_ENOMEM, "synthetic state: cannot allocate %llu bytes",
                    (unsigned long long)s->size);
        goto fail;
    }
    if (ftc_shard_layout_write(s->layout, s->region, s->size, err))
        goto fail;
    for (uint32_t i = 0; i < s->np; i++) {
        ftc__synth_param_t *p = &s->p[i];
        uint8_t *w = ftc_shard_payload_ptr(s->layout, s->region, p->w);
        uint8_t *m = ftc_shard_payload_ptr(s->layout, s->region, p->m);
        uint8_t *v = ftc_shard_payload_ptr(s->layout, s->region, p->v);
        for (uint64_t j = 0; j < p->n; j += 2) {
            float a, b, c, e, g, h;
            ftc__normal2(&s->rng, &a, &b);
            ftc__normal2(&s->rng, &c, &e);
            ftc__normal2(&s->rng, &g, &h);
            ftc__put(w, o->dtype, j, 0.02f * a);
            ftc__put(m, o->dtype, j, 1e-3f * c);
            ftc__put(v, o->dtype, j, 1e-6f * g * g);
            if (j + 1 < p->n) {
                ftc__put(w, o->dtype, j + 1, 0.02f * b);
                ftc__put(m, o->dtype, j + 1, 1e-3f * e);
                ftc__put(v, o->dtype, j + 1, 1e-6f * h * h);
            }
        }
    }
    ftc_shard_restamp(s->region, 0, info->generation);
    if (ftc_shard_seal(s->region, s->size, 2, err))
        goto fail;
    return s;
fail:
    ftc_synth_destroy(s);
    return NULL;
}

void ftc_synth_destroy(ftc_synth_t *s)
{
    if (!s)
        return;
    ftc_shard_layout_destroy(s->layout);
    free(s->region);
    free(s->p);
    free(s);
}

int ftc_synth_step(ftc_synth_t *s, uint64_t step, ftc_err_t *err)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = (float)s->o.lr;
    for (uint32_t i = 0; i < s->np; i++) {
        ftc__synth_param_t *p = &s->p[i];
        uint8_t *w = ftc_shard_payload_ptr(s->layout, s->region, p->w);
        uint8_t *m = ftc_shard_payload_ptr(s->layout, s->region, p->m);
        uint8_t *v = ftc_shard_payload_ptr(s->layout, s->region, p->v);
        for (uint64_t j = 0; j < p->n; j += 2) {
            float g[2];
            ftc__normal2(&s->rng, &g[0], &g[1]);
            for (uint64_t k = 0; k < 2 && j + k < p->n; k++) {
                float gk = 1e-3f * g[k];
                float mk = b1 * ftc__get(m, s->o.dtype, j + k) + (1 - b1) * gk;
                float vk = b2 * ftc__get(v, s->o.dtype, j + k) + (1 - b2) * gk * gk;
                float wk = ftc__get(w, s->o.dtype, j + k);
                wk -= lr * (mk / (sqrtf(vk) + eps) + 0.01f * wk);
                ftc__put(m, s->o.dtype, j + k, mk);
                ftc__put(v, s->o.dtype, j + k, vk);
                ftc__put(w, s->o.dtype, j + k, wk);
            }
        }
    }
    /* metadata: the cursor advances, the RNG state moves on (same layout) */
    ftc_shard_view_t view;
    int rc = ftc_shard_open(&view, s->region, s->size, 0, err);
    if (rc)
        return rc;
    const uint8_t *val;
    uint32_t len;
    if (ftc_shard_meta_get(&view, "data.cursor", &val, &len) == 0 && len == 8)
        memcpy((uint8_t *)val, &step, 8);
    if (ftc_shard_meta_get(&view, "rng.state", &val, &len) == 0 && len == 8)
        memcpy((uint8_t *)val, &s->rng, 8);
    ftc_shard_restamp(s->region, step, view.info.generation);
    return ftc_shard_seal(s->region, s->size, 2, err);
}

const uint8_t *ftc_synth_region(const ftc_synth_t *s) { return s->region; }
uint64_t ftc_synth_size(const ftc_synth_t *s) { return s->size; }
uint8_t *ftc_synth_region_mut(ftc_synth_t *s) { return s->region; }
