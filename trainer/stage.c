/*
 * stage.c — staging of collectives and host reads between a kernels
 * backend's memory and the memory a collective backend wants (stage.h).
 */
#include "trainer/stage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool ftc_stage_force_env(void)
{
    const char *v = getenv(FTC_STAGE_FORCE_ENV);
    return v && *v && strcmp(v, "0") != 0;
}

void ftc_stage_init(ftc_stage_t *s, const ftc_kernels_t *k, bool force)
{
    memset(s, 0, sizeof *s);
    s->k = k;
    s->staged = k->device >= 0 || force;
    s->forced = force && k->device < 0;
}

void ftc_stage_fini(ftc_stage_t *s)
{
    if (!s->k)
        return;
    free(s->host);
    s->k->mem_free(s->dev);
    memset(s, 0, sizeof *s);
}

bool ftc_stage_staged(const ftc_stage_t *s) { return s->staged; }

bool ftc_coll_device_memory(const ftc_coll_t *c)
{
    return c && strcmp(ftc_coll_backend(c), "nccl") == 0;
}

static void *host_buf(ftc_stage_t *s, size_t bytes)
{
    if (bytes > s->host_cap || !s->host) {
        void *p = realloc(s->host, bytes ? bytes : 1);
        if (!p)
            return NULL;
        s->host = p, s->host_cap = bytes;
    }
    return s->host;
}

static void *dev_buf(ftc_stage_t *s, size_t bytes)
{
    if (bytes > s->dev_cap || !s->dev) {
        void *p = s->k->mem_alloc(bytes ? bytes : 1);
        if (!p)
            return NULL;
        s->k->mem_free(s->dev);
        s->dev = p, s->dev_cap = bytes;
    }
    return s->dev;
}

static int run(ftc_coll_t *c, ftc_stage_op_t op, void *buf, size_t count, ftc_coll_dtype_t dt,
               int root, ftc_deadline_t dl)
{
    switch (op) {
    case FTC_STAGE_ALL_REDUCE:
        return ftc_coll_all_reduce(c, buf, count, dt, dl);
    case FTC_STAGE_REDUCE_SCATTER:
        return ftc_coll_reduce_scatter(c, buf, count, dt, dl);
    case FTC_STAGE_ALL_GATHER:
        return ftc_coll_all_gather(c, buf, count, dt, dl);
    case FTC_STAGE_BROADCAST:
        return ftc_coll_broadcast(c, buf, count, dt, root, dl);
    }
    return FTC_EINVAL;
}

/* The exact 128-bit sum over an fp32 all-reduce (stage.h): each element,
 * sign-extended to 144 bits, as nine 16-bit limbs in floats; every partial
 * sum of up to 256 ranks' limbs is an integer below 2^24, exact in fp32 in
 * any order; the carries are propagated on the host afterwards. Blocks of
 * LIMB_BLOCK elements bound the staging memory (every rank runs the same
 * blocks: the count is the same everywhere). */
#define LIMBS 9
#define LIMB_BLOCK ((size_t)1 << 18)

static int i128_by_limbs(ftc_stage_t *s, ftc_coll_t *c, uint64_t *w, size_t count,
                         ftc_deadline_t dl)
{
    if (ftc_coll_size(c) > 256)
        return ftc_err_set(&c->err, FTC_EINVAL, "exact sums over fp32 limbs: %d ranks (at most "
                           "256)", ftc_coll_size(c));
    bool dev_coll = ftc_coll_device_memory(c);
    for (size_t b0 = 0; b0 < count; b0 += LIMB_BLOCK) {
        size_t nb = count - b0 < LIMB_BLOCK ? count - b0 : LIMB_BLOCK, nf = nb * LIMBS;
        float *h = host_buf(s, nf * sizeof(float));
        float *d = dev_coll ? dev_buf(s, nf * sizeof(float)) : h;
        if (!h || !d)
            return ftc_err_set(&c->err, FTC_ENOMEM, "staging the exact sums of %zu elements: out "
                               "of memory", nb);
        for (size_t i = 0; i < nb; i++) {
            uint64_t lo = w[2 * (b0 + i)], hi = w[2 * (b0 + i) + 1];
            float *l = h + i * LIMBS;
            for (int k = 0; k < 4; k++) {
                l[k] = (float)((lo >> (16 * k)) & 0xffffu);
                l[4 + k] = (float)((hi >> (16 * k)) & 0xffffu);
            }
            l[8] = (hi >> 63) ? 65535.0f : 0.0f;
        }
        int rc;
        if (dev_coll) {
            s->k->mem_copy(d, h, nf * sizeof(float), FTC_COPY_H2D);
            rc = ftc_coll_all_reduce(c, d, nf, FTC_COLL_F32, dl);
            if (rc == 0)
                s->k->mem_copy(h, d, nf * sizeof(float), FTC_COPY_D2H);
            s->copies += 2;
        } else {
            rc = ftc_coll_all_reduce(c, h, nf, FTC_COLL_F32, dl);
        }
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < nb; i++) {
            const float *l = h + i * LIMBS;
            uint64_t carry = 0, lo = 0, hi = 0, top = 0;
            for (int k = 0; k < LIMBS; k++) {
                uint64_t v = (uint64_t)l[k] + carry; /* exact: an integer below 2^24 */
                uint64_t limb = v & 0xffffu;
                carry = v >> 16;
                if (k < 4)
                    lo |= limb << (16 * k);
                else if (k < 8)
                    hi |= limb << (16 * (k - 4));
                else
                    top = limb;
            }
            if (top != ((hi >> 63) ? 0xffffu : 0u))
                return ftc_err_set(&c->err, FTC_ERANGE, "coll %s rank %d/%d: the exact sum of "
                                   "element %zu overflows 128 bits", ftc_coll_backend(c),
                                   ftc_coll_rank(c), ftc_coll_size(c), b0 + i);
            w[2 * (b0 + i)] = lo, w[2 * (b0 + i) + 1] = hi;
        }
    }
    return 0;
}

int ftc_stage_coll(ftc_stage_t *s, ftc_coll_t *c, ftc_stage_op_t op, void *buf, size_t count,
                   ftc_coll_dtype_t dt, int root, int mem, ftc_deadline_t dl)
{
    if (!c)
        return 0;
    bool dev_coll = ftc_coll_device_memory(c);
    size_t bytes = count * ftc_coll_dtype_size(dt);
    if (dt == FTC_COLL_I128 && (op == FTC_STAGE_ALL_REDUCE || op == FTC_STAGE_REDUCE_SCATTER) &&
        (dev_coll || s->forced)) {
        /* NCCL has no 128-bit sum; forced staging takes the same road on the CPU */
        if (mem != FTC_STAGE_MEM_HOST)
            return ftc_err_set(&c->err, FTC_EINVAL, "exact sums must be in host memory");
        if (dev_coll && s->k->device < 0)
            return ftc_err_set(&c->err, FTC_EINVAL, "an NCCL communicator needs a CUDA kernels "
                               "backend, not '%s' (use --backend cuda or --coll cpu)", s->k->name);
        s->limb_sums++;
        return i128_by_limbs(s, c, buf, count, dl);
    }
    if (mem == FTC_STAGE_MEM_BACKEND && !dev_coll && s->staged) {
        /* a host collective on backend memory: through host memory */
        void *h = host_buf(s, bytes);
        if (!h)
            return ftc_err_set(&c->err, FTC_ENOMEM, "staging %zu bytes for a host collective: "
                               "out of memory", bytes);
        s->k->mem_copy(h, buf, bytes, FTC_COPY_D2H);
        int rc = run(c, op, h, count, dt, root, dl);
        if (rc == 0) /* on failure the buffer is unspecified anyway (coll.h) */
            s->k->mem_copy(buf, h, bytes, FTC_COPY_H2D);
        s->copies += rc == 0 ? 2 : 1;
        return rc;
    }
    if (mem == FTC_STAGE_MEM_HOST && dev_coll) {
        /* a device collective on host memory: through the backend's memory */
        if (s->k->device < 0)
            return ftc_err_set(&c->err, FTC_EINVAL, "an NCCL communicator needs a CUDA kernels "
                               "backend, not '%s' (use --backend cuda or --coll cpu)", s->k->name);
        void *d = dev_buf(s, bytes);
        if (!d)
            return ftc_err_set(&c->err, FTC_ENOMEM, "staging %zu bytes of device memory for an "
                               "NCCL collective: out of memory", bytes);
        s->k->mem_copy(d, buf, bytes, FTC_COPY_H2D);
        int rc = run(c, op, d, count, dt, root, dl);
        if (rc == 0)
            s->k->mem_copy(buf, d, bytes, FTC_COPY_D2H);
        s->copies += rc == 0 ? 2 : 1;
        return rc;
    }
    if (mem == FTC_STAGE_MEM_BACKEND && dev_coll && s->k->device < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "an NCCL communicator needs a CUDA kernels "
                           "backend, not '%s' (use --backend cuda or --coll cpu)", s->k->name);
    return run(c, op, buf, count, dt, root, dl);
}

const void *ftc_stage_host(ftc_stage_t *s, const void *src, size_t bytes)
{
    if (!s->staged)
        return src;
    void *h = host_buf(s, bytes);
    if (h) {
        s->k->mem_copy(h, src, bytes, FTC_COPY_D2H);
        s->copies++;
    }
    return h;
}

void ftc_stage_to_backend(ftc_stage_t *s, void *dst, const void *src, size_t bytes)
{
    s->k->mem_copy(dst, src, bytes, FTC_COPY_H2D);
    s->copies += s->staged;
}

void ftc_stage_to_host(ftc_stage_t *s, void *dst, const void *src, size_t bytes)
{
    s->k->mem_copy(dst, src, bytes, FTC_COPY_D2H);
    s->copies += s->staged;
}
