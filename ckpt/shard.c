/*
 * shard.c — the shard format (see shard.h and docs/shard-format.md).
 *
 * Fields are read and written with memcpy through fixed offsets, never by
 * casting the buffer to a struct: a buffer from a file or the wire may be
 * unaligned or hostile, and the layout must not depend on the compiler.
 */
#include "ckpt/shard.h"
#include "core/le.h"

#include "core/hash.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>


static const char ftc__shard_magic[8] = {'F', 'T', 'C', 'S', 'H', 'A', 'R', 'D'};
static const char ftc__shard_endmagic[8] = {'F', 'T', 'C', 'S', 'H', 'E', 'N', 'D'};

/* Header field offsets (docs/shard-format.md). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_TOTAL_SIZE = 16,
    H_STEP = 24,
    H_GENERATION = 32,
    H_JOB_ID = 40, /* 64 bytes, NUL-padded */
    H_DP = 104,
    H_TP = 108,
    H_PP = 112,
    H_DP_RANK = 116,
    H_TP_RANK = 120,
    H_PP_RANK = 124,
    H_N_TENSORS = 128,
    H_FLAGS = 132,
    H_TABLE_OFFSET = 136,
    H_NAMES_OFFSET = 144,
    H_NAMES_SIZE = 152,
    H_META_OFFSET = 160,
    H_META_SIZE = 168,
    H_PAYLOAD_OFFSET = 176,
    H_PAYLOAD_SIZE = 184,
    H_CREATED_MS = 192,
    H_RESERVED = 200, /* 56 zero bytes */
};
/* Tensor entry field offsets. */
enum {
    E_OFFSET = 0,
    E_LENGTH = 8,
    E_XXH3 = 16,
    E_NAME_OFFSET = 24,
    E_NAME_LEN = 28,
    E_DTYPE = 32,
    E_NDIM = 33,
    E_FLAGS = 34,
    E_RESERVED1 = 36,
    E_SHAPE = 40, /* 8 x u64 */
    E_RESERVED2 = 104, /* 24 zero bytes */
};
/* Footer field offsets, from the footer start. */
enum {
    F_MAGIC = 0,
    F_TOTAL_SIZE = 8,
    F_STEP = 16,
    F_HEAD_XXH3 = 24,
    F_RESERVED = 32, /* 24 zero bytes */
    F_SELF_XXH3 = 56,
};


static inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* ---- layout ---------------------------------------------------------------- */

typedef struct ftc__tensor_desc {
    char *name;
    uint32_t name_len;
    int dtype;
    uint32_t ndim;
    uint64_t shape[FTC_SHARD_MAX_DIMS];
    uint64_t length;
    uint64_t offset; /* from shard start; set by ftc__layout_plan */
} ftc__tensor_desc_t;

struct ftc_shard_layout {
    ftc_shard_info_t info;
    ftc__tensor_desc_t *t;
    uint32_t n, cap;
    uint8_t *meta; /* encoded records */
    uint64_t meta_len, meta_cap;
    uint64_t names_size;
    uint64_t payload_max; /* the tensors' bytes, each aligned: at most FTC__SHARD_MAX_PAYLOAD */
    /* planned offsets (valid when planned) */
    bool planned;
    uint64_t meta_offset, payload_offset, payload_size, total;
};

ftc_shard_layout_t *ftc_shard_layout_create(const ftc_shard_info_t *info)
{
    ftc_shard_layout_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->info = *info;
    l->info.job_id[FTC_SHARD_JOB_MAX] = '\0';
    return l;
}

void ftc_shard_layout_destroy(ftc_shard_layout_t *l)
{
    if (!l)
        return;
    for (uint32_t i = 0; i < l->n; i++)
        free(l->t[i].name);
    free(l->t);
    free(l->meta);
    free(l);
}

/* The most payload a layout plans (2^62 bytes, the limit of one tensor):
 * the tensors' lengths, each up to 2^62 bytes, are summed into 64-bit
 * offsets, and four of them wrapped the shard's size to a few KiB. With the
 * head (at most FTC_SHARD_MAX_TENSORS entries and names, FTC_SHARD_META_MAX
 * of metadata) and the footer the total stays far below 2^64. */
#define FTC__SHARD_MAX_PAYLOAD (UINT64_MAX >> 2)

/* Bytes of a tensor of this dtype and shape, or an error on overflow. */
static int ftc__tensor_bytes(int dtype, uint32_t ndim, const uint64_t *shape, uint64_t *out)
{
    uint64_t n = ftc_dtype_size(dtype);
    if (!n)
        return FTC_EINVAL;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] && n > UINT64_MAX / shape[d])
            return FTC_ERANGE;
        n *= shape[d];
    }
    if (n > (UINT64_MAX >> 2))
        return FTC_ERANGE;
    *out = n;
    return 0;
}

int ftc_shard_layout_add_tensor(ftc_shard_layout_t *l, const char *name, int dtype, uint32_t ndim,
                                const uint64_t *shape, ftc_err_t *err)
{
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > FTC_SHARD_NAME_MAX)
        return ftc_err_set(err, FTC_EINVAL, "tensor name must be 1..%d bytes (got %zu)",
                           FTC_SHARD_NAME_MAX, nlen);
    if (!ftc_dtype_size(dtype))
        return ftc_err_set(err, FTC_EINVAL, "tensor '%s': unknown dtype %d", name, dtype);
    if (ndim > FTC_SHARD_MAX_DIMS || (ndim && !shape))
        return ftc_err_set(err, FTC_EINVAL, "tensor '%s': ndim %u (at most %d, shape required)",
                           name, ndim, FTC_SHARD_MAX_DIMS);
    if (l->n >= FTC_SHARD_MAX_TENSORS)
        return ftc_err_set(err, FTC_ERANGE, "more than %u tensors", FTC_SHARD_MAX_TENSORS);
    for (uint32_t i = 0; i < l->n; i++)
        if (l->t[i].name_len == nlen && !memcmp(l->t[i].name, name, nlen))
            return ftc_err_set(err, FTC_EEXIST, "tensor '%s' registered twice", name);
    uint64_t bytes;
    if (ftc__tensor_bytes(dtype, ndim, shape, &bytes) != 0)
        return ftc_err_set(err, FTC_ERANGE, "tensor '%s': shape overflows 64-bit size", name);
    uint64_t aligned = align_up(bytes, FTC_SHARD_ALIGN); /* bytes < 2^62: no wrap */
    if (aligned > FTC__SHARD_MAX_PAYLOAD - l->payload_max)
        return ftc_err_set(err, FTC_ERANGE,
                           "tensor '%s' of %llu bytes: the shard's tensors together would exceed "
                           "%llu bytes (a shape gone wrong?)",
                           name, (unsigned long long)bytes,
                           (unsigned long long)FTC__SHARD_MAX_PAYLOAD);
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 16;
        ftc__tensor_desc_t *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return ftc_err_set(err, FTC_ENOMEM, "tensor table: out of memory");
        l->t = t;
        l->cap = cap;
    }
    ftc__tensor_desc_t *d = &l->t[l->n];
    memset(d, 0, sizeof *d);
    d->name = strdup(name);
    if (!d->name)
        return ftc_err_set(err, FTC_ENOMEM, "tensor table: out of memory");
    d->name_len = (uint32_t)nlen;
    d->dtype = dtype;
    d->ndim = ndim;
    for (uint32_t k = 0; k < ndim; k++)
        d->shape[k] = shape[k];
    d->length = bytes;
    l->payload_max += aligned;
    l->names_size += nlen;
    l->planned = false;
    return (int)l->n++;
}

int ftc_shard_layout_add_meta(ftc_shard_layout_t *l, const char *key, const void *val, size_t len,
                              ftc_err_t *err)
{
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0 || klen > FTC_SHARD_META_KEY_MAX)
        return ftc_err_set(err, FTC_EINVAL, "metadata key must be 1..%d bytes",
                           FTC_SHARD_META_KEY_MAX);
    uint64_t rec = align_up(8 + klen + len, 8);
    if (len > FTC_SHARD_META_MAX || l->meta_len + rec > FTC_SHARD_META_MAX)
        return ftc_err_set(err, FTC_ERANGE, "metadata '%s': all records together exceed %u bytes",
                           key, FTC_SHARD_META_MAX);
    for (uint64_t pos = 0; pos < l->meta_len;) {
        uint32_t kl = ftc_le_rd32(l->meta + pos), vl = ftc_le_rd32(l->meta + pos + 4);
        if (kl == klen && !memcmp(l->meta + pos + 8, key, klen))
            return ftc_err_set(err, FTC_EEXIST, "metadata key '%s' set twice", key);
        pos += align_up(8ull + kl + vl, 8);
    }
    if (l->meta_len + rec > l->meta_cap) {
        uint64_t cap = l->meta_cap ? l->meta_cap : 256;
        while (cap < l->meta_len + rec)
            cap *= 2;
        uint8_t *m = realloc(l->meta, cap);
        if (!m)
            return ftc_err_set(err, FTC_ENOMEM, "metadata: out of memory");
        l->meta = m;
        l->meta_cap = cap;
    }
    uint8_t *p = l->meta + l->meta_len;
    memset(p, 0, rec);
    ftc_le_wr32(p, (uint32_t)klen);
    ftc_le_wr32(p + 4, (uint32_t)len);
    memcpy(p + 8, key, klen);
    if (len)
        memcpy(p + 8 + klen, val, len);
    l->meta_len += rec;
    l->planned = false;
    return 0;
}

static void ftc__layout_plan(ftc_shard_layout_t *l)
{
    if (l->planned)
        return;
    uint64_t names_offset = FTC_SHARD_HEADER_SIZE + (uint64_t)l->n * FTC_SHARD_ENTRY_SIZE;
    l->meta_offset = align_up(names_offset + l->names_size, 8);
    l->payload_offset = align_up(l->meta_offset + l->meta_len, FTC_SHARD_ALIGN);
    uint64_t off = l->payload_offset;
    for (uint32_t i = 0; i < l->n; i++) {
        off = align_up(off, FTC_SHARD_ALIGN);
        l->t[i].offset = off;
        off += l->t[i].length;
    }
    off = align_up(off, FTC_SHARD_ALIGN);
    l->payload_size = off - l->payload_offset;
    l->total = off + FTC_SHARD_FOOTER_SIZE;
    l->planned = true;
}

uint64_t ftc_shard_layout_size(const ftc_shard_layout_t *l)
{
    ftc__layout_plan((ftc_shard_layout_t *)l);
    return l->total;
}

uint64_t ftc_shard_layout_offset(const ftc_shard_layout_t *l, uint32_t i)
{
    ftc__layout_plan((ftc_shard_layout_t *)l);
    return i < l->n ? l->t[i].offset : 0;
}

uint32_t ftc_shard_layout_count(const ftc_shard_layout_t *l) { return l->n; }

uint64_t ftc_shard_layout_meta_offset(const ftc_shard_layout_t *l, const char *key)
{
    ftc__layout_plan((ftc_shard_layout_t *)l);
    size_t klen = strlen(key);
    for (uint64_t pos = 0; pos < l->meta_len;) {
        uint32_t kl = ftc_le_rd32(l->meta + pos), vl = ftc_le_rd32(l->meta + pos + 4);
        if (kl == klen && !memcmp(l->meta + pos + 8, key, klen))
            return l->meta_offset + pos + 8 + kl;
        pos += align_up(8ull + kl + vl, 8);
    }
    return 0;
}

int ftc_shard_layout_write(const ftc_shard_layout_t *l, void *region, uint64_t size, ftc_err_t *err)
{
    ftc__layout_plan((ftc_shard_layout_t *)l);
    if (size != l->total)
        return ftc_err_set(err, FTC_EINVAL, "region is %llu bytes, layout needs %llu",
                           (unsigned long long)size, (unsigned long long)l->total);
    const ftc_shard_info_t *in = &l->info;
    if (!in->dp || !in->tp || !in->pp || in->dp_rank >= in->dp || in->tp_rank >= in->tp ||
        in->pp_rank >= in->pp)
        return ftc_err_set(err, FTC_EINVAL,
                           "layout dp=%u tp=%u pp=%u with coordinates (%u,%u,%u): degrees must "
                           "be >= 1 and coordinates below them",
                           in->dp, in->tp, in->pp, in->dp_rank, in->tp_rank, in->pp_rank);
    uint8_t *p = region;
    uint64_t names_offset = FTC_SHARD_HEADER_SIZE + (uint64_t)l->n * FTC_SHARD_ENTRY_SIZE;
    memset(p, 0, l->payload_offset); /* header, table, names, meta, padding */
    memcpy(p + H_MAGIC, ftc__shard_magic, 8);
    ftc_le_wr32(p + H_VERSION, FTC_SHARD_VERSION);
    ftc_le_wr32(p + H_HEADER_SIZE, FTC_SHARD_HEADER_SIZE);
    ftc_le_wr64(p + H_TOTAL_SIZE, l->total);
    ftc_le_wr64(p + H_STEP, in->step);
    ftc_le_wr64(p + H_GENERATION, in->generation);
    memcpy(p + H_JOB_ID, in->job_id, strnlen(in->job_id, FTC_SHARD_JOB_MAX));
    ftc_le_wr32(p + H_DP, in->dp);
    ftc_le_wr32(p + H_TP, in->tp);
    ftc_le_wr32(p + H_PP, in->pp);
    ftc_le_wr32(p + H_DP_RANK, in->dp_rank);
    ftc_le_wr32(p + H_TP_RANK, in->tp_rank);
    ftc_le_wr32(p + H_PP_RANK, in->pp_rank);
    ftc_le_wr32(p + H_N_TENSORS, l->n);
    ftc_le_wr64(p + H_TABLE_OFFSET, FTC_SHARD_HEADER_SIZE);
    ftc_le_wr64(p + H_NAMES_OFFSET, names_offset);
    ftc_le_wr64(p + H_NAMES_SIZE, l->names_size);
    ftc_le_wr64(p + H_META_OFFSET, l->meta_offset);
    ftc_le_wr64(p + H_META_SIZE, l->meta_len);
    ftc_le_wr64(p + H_PAYLOAD_OFFSET, l->payload_offset);
    ftc_le_wr64(p + H_PAYLOAD_SIZE, l->payload_size);
    ftc_le_wr64(p + H_CREATED_MS, in->created_ms);
    uint64_t name_pos = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        const ftc__tensor_desc_t *d = &l->t[i];
        uint8_t *e = p + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
        ftc_le_wr64(e + E_OFFSET, d->offset);
        ftc_le_wr64(e + E_LENGTH, d->length);
        ftc_le_wr32(e + E_NAME_OFFSET, (uint32_t)name_pos);
        ftc_le_wr32(e + E_NAME_LEN, d->name_len);
        e[E_DTYPE] = (uint8_t)d->dtype;
        e[E_NDIM] = (uint8_t)d->ndim;
        for (uint32_t k = 0; k < d->ndim; k++)
            ftc_le_wr64(e + E_SHAPE + 8 * k, d->shape[k]);
        memcpy(p + names_offset + name_pos, d->name, d->name_len);
        name_pos += d->name_len;
    }
    if (l->meta_len)
        memcpy(p + l->meta_offset, l->meta, l->meta_len);
    /* zero the alignment gaps between tensors and the footer, so that equal
     * states give equal bytes (and deltas of them compress to nothing) */
    uint64_t off = l->payload_offset;
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->t[i].offset > off)
            memset(p + off, 0, l->t[i].offset - off);
        off = l->t[i].offset + l->t[i].length;
    }
    memset(p + off, 0, l->total - off);
    return 0;
}

void ftc_shard_restamp(void *region, uint64_t step, uint64_t generation)
{
    uint8_t *p = region;
    ftc_le_wr64(p + H_STEP, step);
    ftc_le_wr64(p + H_GENERATION, generation);
}

/* ---- parallel hashing -------------------------------------------------------- */

typedef struct ftc__hash_job {
    const ftc_shard_view_t *v;
    uint8_t *region; /* non-NULL: write the hashes (seal); NULL: compare (verify) */
    atomic_uint next;
    atomic_int bad; /* first failing index + 1, 0 when none */
} ftc__hash_job_t;

static void *ftc__hash_worker(void *arg)
{
    ftc__hash_job_t *job = arg;
    const ftc_shard_view_t *v = job->v;
    for (;;) {
        uint32_t i = atomic_fetch_add(&job->next, 1);
        if (i >= v->n_tensors)
            break;
        const uint8_t *e = v->base + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
        uint64_t h = ftc_xxh3(v->base + ftc_le_rd64(e + E_OFFSET), ftc_le_rd64(e + E_LENGTH));
        if (job->region) {
            ftc_le_wr64(job->region + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE +
                            E_XXH3,
                        h);
        } else if (h != ftc_le_rd64(e + E_XXH3)) {
            int expect = 0;
            atomic_compare_exchange_strong(&job->bad, &expect, (int)i + 1);
        }
    }
    return NULL;
}

/* Runs the hash job on up to threads threads (the caller is one of them). */
static void ftc__hash_run(ftc__hash_job_t *job, int threads)
{
    enum { MAX_THREADS = 64 };
    pthread_t tid[MAX_THREADS];
    int n = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if ((uint32_t)n > job->v->n_tensors)
        n = job->v->n_tensors ? (int)job->v->n_tensors : 1;
    int started = 0;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tid[started], NULL, ftc__hash_worker, job) != 0)
            break; /* fewer threads is fine; the caller does the rest */
        started++;
    }
    ftc__hash_worker(job);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

static void ftc__footer_write(uint8_t *p, uint64_t total)
{
    uint64_t payload_offset = ftc_le_rd64(p + H_PAYLOAD_OFFSET);
    uint8_t *f = p + total - FTC_SHARD_FOOTER_SIZE;
    memset(f, 0, FTC_SHARD_FOOTER_SIZE);
    memcpy(f + F_MAGIC, ftc__shard_endmagic, 8);
    ftc_le_wr64(f + F_TOTAL_SIZE, total);
    ftc_le_wr64(f + F_STEP, ftc_le_rd64(p + H_STEP));
    ftc_le_wr64(f + F_HEAD_XXH3, ftc_xxh3(p, payload_offset));
    ftc_le_wr64(f + F_SELF_XXH3, ftc_xxh3(f, F_SELF_XXH3));
}

int ftc_shard_seal(void *region, uint64_t size, int threads, ftc_err_t *err)
{
    uint8_t *p = region;
    ftc_shard_view_t v;
    /* The head was written by us; open it without checksums (they are what
     * we are about to compute) through a view built from trusted fields. */
    if (size < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE || memcmp(p, ftc__shard_magic, 8) ||
        ftc_le_rd64(p + H_TOTAL_SIZE) != size)
        return ftc_err_set(err, FTC_EINVAL, "seal: region is not a shard of %llu bytes",
                           (unsigned long long)size);
    memset(&v, 0, sizeof v);
    v.base = p;
    v.size = size;
    v.n_tensors = ftc_le_rd32(p + H_N_TENSORS);
    ftc__hash_job_t job = {.v = &v, .region = p};
    atomic_init(&job.next, 0);
    atomic_init(&job.bad, 0);
    ftc__hash_run(&job, threads);
    ftc__footer_write(p, size);
    return 0;
}

void ftc_shard_set_tensor_xxh3(void *region, uint32_t i, uint64_t xxh3)
{
    ftc_le_wr64((uint8_t *)region + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE +
                    E_XXH3,
                xxh3);
}

int ftc_shard_seal_head(void *region, uint64_t size, ftc_err_t *err)
{
    uint8_t *p = region;
    if (size < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE || memcmp(p, ftc__shard_magic, 8) ||
        ftc_le_rd64(p + H_TOTAL_SIZE) != size)
        return ftc_err_set(err, FTC_EINVAL, "seal: region is not a shard of %llu bytes",
                           (unsigned long long)size);
    ftc__footer_write(p, size);
    return 0;
}

/* ---- reading ------------------------------------------------------------------ */

typedef struct ftc__name_ref {
    const uint8_t *s;
    uint32_t len;
} ftc__name_ref_t;

static int ftc__name_cmp(const void *a, const void *b)
{
    const ftc__name_ref_t *x = a, *y = b;
    uint32_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, m);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Sorts the names (already bounds-checked) and reports the first duplicate. */
static int ftc__check_unique_names(const uint8_t *p, uint64_t names_off, uint32_t n, ftc_err_t *err)
{
    ftc__name_ref_t *r = malloc((size_t)n * sizeof *r);
    if (!r)
        return ftc_err_set(err, FTC_ENOMEM, "checking %u tensor names: out of memory", n);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = p + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
        r[i].s = p + names_off + ftc_le_rd32(e + E_NAME_OFFSET);
        r[i].len = ftc_le_rd32(e + E_NAME_LEN);
    }
    qsort(r, n, sizeof *r, ftc__name_cmp);
    int rc = 0;
    for (uint32_t i = 1; i < n && !rc; i++)
        if (!ftc__name_cmp(&r[i - 1], &r[i]))
            rc = ftc_err_set(err, FTC_ECORRUPT, "tensor name '%.*s' appears twice in the table",
                             (int)(r[i].len > 200 ? 200 : r[i].len), (const char *)r[i].s);
    free(r);
    return rc;
}

int ftc_shard_peek_count(const void *buf, uint64_t have, uint64_t total, uint32_t *n)
{
    const uint8_t *p = buf;
    if (have < FTC_SHARD_HEADER_SIZE)
        return FTC_EAGAIN;
    if (total < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE || memcmp(p, ftc__shard_magic, 8) ||
        ftc_le_rd64(p + H_TOTAL_SIZE) != total)
        return FTC_ECORRUPT;
    uint32_t k = ftc_le_rd32(p + H_N_TENSORS);
    uint64_t end = FTC_SHARD_HEADER_SIZE + (uint64_t)k * FTC_SHARD_ENTRY_SIZE;
    if (k > FTC_SHARD_MAX_TENSORS || end > total - FTC_SHARD_FOOTER_SIZE)
        return FTC_ECORRUPT;
    if (have < end)
        return FTC_EAGAIN;
    *n = k;
    return 0;
}

int ftc_shard_peek_tensor(const void *buf, uint64_t total, uint32_t i, uint64_t *offset,
                          uint64_t *length, uint64_t *xxh3)
{
    const uint8_t *e =
        (const uint8_t *)buf + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
    uint64_t off = ftc_le_rd64(e + E_OFFSET), len = ftc_le_rd64(e + E_LENGTH);
    uint64_t limit = total - FTC_SHARD_FOOTER_SIZE;
    if (off < FTC_SHARD_HEADER_SIZE || off > limit || len > limit - off)
        return FTC_ECORRUPT;
    *offset = off;
    *length = len;
    *xxh3 = ftc_le_rd64(e + E_XXH3);
    return 0;
}

int ftc_shard_peek_size(const void *buf, size_t len, uint64_t *size, ftc_err_t *err)
{
    const uint8_t *p = buf;
    if (len < FTC_SHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ETRUNC,
                           "shard header truncated: %zu bytes present, the header has %d", len,
                           FTC_SHARD_HEADER_SIZE);
    if (memcmp(p + H_MAGIC, ftc__shard_magic, 8))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "bad magic at offset 0: not an ftc shard (expected \"FTCSHARD\")");
    uint32_t ver = ftc_le_rd32(p + H_VERSION);
    if (ver != FTC_SHARD_VERSION)
        return ftc_err_set(err, FTC_EVERSION,
                           "format version %u at offset %d; this build reads version %d", ver,
                           H_VERSION, FTC_SHARD_VERSION);
    *size = ftc_le_rd64(p + H_TOTAL_SIZE);
    return 0;
}

int ftc_shard_open(ftc_shard_view_t *v, const void *buf, size_t len, unsigned flags, ftc_err_t *err)
{
    const uint8_t *p = buf;
    uint64_t total;
    memset(v, 0, sizeof *v);
    int rc = ftc_shard_peek_size(buf, len, &total, err);
    if (rc)
        return rc;
    uint32_t hsize = ftc_le_rd32(p + H_HEADER_SIZE);
    if (hsize != FTC_SHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "header_size at offset %d is %u, must be %d",
                           H_HEADER_SIZE, hsize, FTC_SHARD_HEADER_SIZE);
    if (total < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE)
        return ftc_err_set(
            err, FTC_ECORRUPT, "total_size at offset %d is %llu, below the minimum %d",
            H_TOTAL_SIZE, (unsigned long long)total, FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE);
    if (total > len)
        return ftc_err_set(err, FTC_ETRUNC,
                           "shard truncated: total_size at offset %d says %llu bytes, only %zu "
                           "present",
                           H_TOTAL_SIZE, (unsigned long long)total, len);
    if (total < len && !(flags & FTC_SHARD_ALLOW_TRAILING))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%zu bytes present but total_size at offset %d says %llu: trailing "
                           "data",
                           len, H_TOTAL_SIZE, (unsigned long long)total);
    /* footer */
    const uint8_t *f = p + total - FTC_SHARD_FOOTER_SIZE;
    uint64_t foff = total - FTC_SHARD_FOOTER_SIZE;
    if (memcmp(f + F_MAGIC, ftc__shard_endmagic, 8))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "footer magic at offset %llu is wrong (expected \"FTCSHEND\"): the "
                           "shard is truncated or overwritten",
                           (unsigned long long)foff);
    if (ftc_xxh3(f, F_SELF_XXH3) != ftc_le_rd64(f + F_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT, "footer checksum at offset %llu does not match",
                           (unsigned long long)(foff + F_SELF_XXH3));
    if (ftc_le_rd64(f + F_TOTAL_SIZE) != total)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "footer total_size at offset %llu (%llu) differs from the header's "
                           "(%llu)",
                           (unsigned long long)(foff + F_TOTAL_SIZE),
                           (unsigned long long)ftc_le_rd64(f + F_TOTAL_SIZE),
                           (unsigned long long)total);
    if (!all_zero(f + F_RESERVED, 24))
        return ftc_err_set(err, FTC_ECORRUPT, "footer reserved bytes at offset %llu are not zero",
                           (unsigned long long)(foff + F_RESERVED));
    /* header fields */
    ftc_shard_info_t *in = &v->info;
    in->step = ftc_le_rd64(p + H_STEP);
    if (ftc_le_rd64(f + F_STEP) != in->step)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "step at offset %d is %llu but the footer (offset %llu) says %llu",
                           H_STEP, (unsigned long long)in->step,
                           (unsigned long long)(foff + F_STEP),
                           (unsigned long long)ftc_le_rd64(f + F_STEP));
    in->generation = ftc_le_rd64(p + H_GENERATION);
    in->created_ms = ftc_le_rd64(p + H_CREATED_MS);
    const uint8_t *job = p + H_JOB_ID;
    size_t jl = strnlen((const char *)job, 64);
    if (jl > FTC_SHARD_JOB_MAX || !all_zero(job + jl, 64 - jl))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "job_id at offset %d is not a NUL-terminated string of at most %d bytes",
                           H_JOB_ID, FTC_SHARD_JOB_MAX);
    memcpy(in->job_id, job, jl);
    in->job_id[jl] = '\0';
    static const struct {
        int off;
        const char *name;
    } deg[3] = {{H_DP, "dp"}, {H_TP, "tp"}, {H_PP, "pp"}};
    uint32_t d[3], r[3];
    for (int k = 0; k < 3; k++) {
        d[k] = ftc_le_rd32(p + deg[k].off);
        r[k] = ftc_le_rd32(p + deg[k].off + 12);
        if (d[k] == 0 || d[k] > (1u << 24))
            return ftc_err_set(err, FTC_ECORRUPT, "%s degree at offset %d is %u (must be 1..2^24)",
                               deg[k].name, deg[k].off, d[k]);
        if (r[k] >= d[k])
            return ftc_err_set(err, FTC_ECORRUPT,
                               "%s_rank at offset %d is %u, not below the %s degree %u",
                               deg[k].name, deg[k].off + 12, r[k], deg[k].name, d[k]);
    }
    in->dp = d[0], in->tp = d[1], in->pp = d[2];
    in->dp_rank = r[0], in->tp_rank = r[1], in->pp_rank = r[2];
    uint32_t n = ftc_le_rd32(p + H_N_TENSORS);
    if (n > FTC_SHARD_MAX_TENSORS)
        return ftc_err_set(err, FTC_ECORRUPT, "n_tensors at offset %d is %u (at most %u)",
                           H_N_TENSORS, n, FTC_SHARD_MAX_TENSORS);
    if (ftc_le_rd32(p + H_FLAGS) != 0)
        return ftc_err_set(err, FTC_ECORRUPT, "flags at offset %d are %#x; version 1 defines none",
                           H_FLAGS, ftc_le_rd32(p + H_FLAGS));
    if (!all_zero(p + H_RESERVED, FTC_SHARD_HEADER_SIZE - H_RESERVED))
        return ftc_err_set(err, FTC_ECORRUPT, "reserved header bytes at offset %d are not zero",
                           H_RESERVED);
    /* sections: each offset must be the canonical one */
    uint64_t table_off = ftc_le_rd64(p + H_TABLE_OFFSET);
    if (table_off != FTC_SHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "table_offset at offset %d is %llu, must be %d",
                           H_TABLE_OFFSET, (unsigned long long)table_off, FTC_SHARD_HEADER_SIZE);
    uint64_t names_off = FTC_SHARD_HEADER_SIZE + (uint64_t)n * FTC_SHARD_ENTRY_SIZE;
    uint64_t limit = total - FTC_SHARD_FOOTER_SIZE;
    if (names_off > limit)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "tensor table (%u entries) runs past the footer at offset %llu", n,
                           (unsigned long long)limit);
    if (ftc_le_rd64(p + H_NAMES_OFFSET) != names_off)
        return ftc_err_set(err, FTC_ECORRUPT, "names_offset at offset %d is %llu, must be %llu",
                           H_NAMES_OFFSET, (unsigned long long)ftc_le_rd64(p + H_NAMES_OFFSET),
                           (unsigned long long)names_off);
    uint64_t names_size = ftc_le_rd64(p + H_NAMES_SIZE);
    if (names_size > limit - names_off)
        return ftc_err_set(err, FTC_ECORRUPT, "names_size at offset %d (%llu) runs past the footer",
                           H_NAMES_SIZE, (unsigned long long)names_size);
    uint64_t meta_off = align_up(names_off + names_size, 8);
    if (ftc_le_rd64(p + H_META_OFFSET) != meta_off)
        return ftc_err_set(err, FTC_ECORRUPT, "meta_offset at offset %d is %llu, must be %llu",
                           H_META_OFFSET, (unsigned long long)ftc_le_rd64(p + H_META_OFFSET),
                           (unsigned long long)meta_off);
    uint64_t meta_size = ftc_le_rd64(p + H_META_SIZE);
    if (meta_off > limit || meta_size > limit - meta_off || meta_size > FTC_SHARD_META_MAX ||
        meta_size % 8)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "meta_size at offset %d (%llu) is not a multiple of 8 within the shard "
                           "and the %u-byte limit",
                           H_META_SIZE, (unsigned long long)meta_size, FTC_SHARD_META_MAX);
    uint64_t pay_off = align_up(meta_off + meta_size, FTC_SHARD_ALIGN);
    if (ftc_le_rd64(p + H_PAYLOAD_OFFSET) != pay_off)
        return ftc_err_set(err, FTC_ECORRUPT, "payload_offset at offset %d is %llu, must be %llu",
                           H_PAYLOAD_OFFSET, (unsigned long long)ftc_le_rd64(p + H_PAYLOAD_OFFSET),
                           (unsigned long long)pay_off);
    uint64_t pay_size = ftc_le_rd64(p + H_PAYLOAD_SIZE);
    if (pay_off > limit || pay_size != limit - pay_off)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "payload_size at offset %d is %llu; payload_offset %llu plus it must "
                           "reach the footer at %llu",
                           H_PAYLOAD_SIZE, (unsigned long long)pay_size,
                           (unsigned long long)pay_off, (unsigned long long)limit);
    /* head checksum: covers header, table, names and metadata */
    uint64_t head = ftc_xxh3(p, pay_off);
    if (head != ftc_le_rd64(f + F_HEAD_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "checksum of header, tensor table and metadata (bytes 0..%llu) does "
                           "not match the footer at offset %llu",
                           (unsigned long long)pay_off, (unsigned long long)(foff + F_HEAD_XXH3));
    /* tensor entries: canonical offsets, consistent shapes, names in range */
    uint64_t expect = pay_off;
    uint64_t name_pos = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t eo = FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
        const uint8_t *e = p + eo;
        int dt = e[E_DTYPE];
        uint32_t nd = e[E_NDIM];
        if (!ftc_dtype_size(dt))
            return ftc_err_set(err, FTC_ECORRUPT, "tensor %u: dtype at offset %llu is %d (unknown)",
                               i, (unsigned long long)(eo + E_DTYPE), dt);
        if (nd > FTC_SHARD_MAX_DIMS)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "tensor %u: ndim at offset %llu is %u (at most %d)", i,
                               (unsigned long long)(eo + E_NDIM), nd, FTC_SHARD_MAX_DIMS);
        if (ftc_le_rd16(e + E_FLAGS) || ftc_le_rd32(e + E_RESERVED1) ||
            !all_zero(e + E_RESERVED2, 24))
            return ftc_err_set(err, FTC_ECORRUPT,
                               "tensor %u: flags or reserved bytes in the entry at offset %llu "
                               "are not zero",
                               i, (unsigned long long)eo);
        uint64_t shape[FTC_SHARD_MAX_DIMS];
        for (uint32_t k = 0; k < FTC_SHARD_MAX_DIMS; k++) {
            shape[k] = ftc_le_rd64(e + E_SHAPE + 8 * k);
            if (k >= nd && shape[k])
                return ftc_err_set(err, FTC_ECORRUPT,
                                   "tensor %u: shape[%u] at offset %llu is set beyond ndim %u", i,
                                   k, (unsigned long long)(eo + E_SHAPE + 8 * k), nd);
        }
        uint64_t bytes, length = ftc_le_rd64(e + E_LENGTH);
        if (ftc__tensor_bytes(dt, nd, shape, &bytes) != 0 || bytes != length)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "tensor %u: length at offset %llu is %llu, but its shape and dtype "
                               "make it %s",
                               i, (unsigned long long)(eo + E_LENGTH), (unsigned long long)length,
                               ftc__tensor_bytes(dt, nd, shape, &bytes) ? "overflow" : "differ");
        expect = align_up(expect, FTC_SHARD_ALIGN);
        uint64_t off = ftc_le_rd64(e + E_OFFSET);
        if (off != expect)
            return ftc_err_set(err, FTC_ECORRUPT, "tensor %u: offset at %llu is %llu, must be %llu",
                               i, (unsigned long long)(eo + E_OFFSET), (unsigned long long)off,
                               (unsigned long long)expect);
        if (length > limit - off)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "tensor %u: offset %llu + length %llu (entry at %llu) runs past the "
                               "payload end at %llu",
                               i, (unsigned long long)off, (unsigned long long)length,
                               (unsigned long long)eo, (unsigned long long)limit);
        expect = off + length;
        uint32_t no = ftc_le_rd32(e + E_NAME_OFFSET), nl = ftc_le_rd32(e + E_NAME_LEN);
        if (no != name_pos || nl == 0 || nl > FTC_SHARD_NAME_MAX || nl > names_size - name_pos)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "tensor %u: name (offset %u, length %u) in the entry at %llu is "
                               "outside the names section or out of order",
                               i, no, nl, (unsigned long long)(eo + E_NAME_OFFSET));
        if (memchr(p + names_off + no, '\0', nl))
            return ftc_err_set(err, FTC_ECORRUPT, "tensor %u: name at offset %llu contains a NUL",
                               i, (unsigned long long)(names_off + no));
        name_pos += nl;
    }
    if (name_pos != names_size)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "names_size at offset %d is %llu but the tensors use %llu bytes",
                           H_NAMES_SIZE, (unsigned long long)names_size,
                           (unsigned long long)name_pos);
    if (align_up(expect, FTC_SHARD_ALIGN) != limit)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "payload ends at %llu but the tensors end at %llu: unaccounted bytes",
                           (unsigned long long)limit, (unsigned long long)expect);
    /* names must be unique: a lookup by name has to be unambiguous */
    if (n > 1) {
        int drc = ftc__check_unique_names(p, names_off, n, err);
        if (drc)
            return drc;
    }
    /* padding inside the head is zero, so a head has exactly one encoding */
    if (!all_zero(p + names_off + names_size, meta_off - (names_off + names_size)) ||
        !all_zero(p + meta_off + meta_size, pay_off - (meta_off + meta_size)))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "padding before the metadata (at %llu) or before the payload (at "
                           "%llu) is not zero",
                           (unsigned long long)(names_off + names_size),
                           (unsigned long long)(meta_off + meta_size));
    /* metadata records */
    uint32_t nmeta = 0;
    for (uint64_t pos = 0; pos < meta_size;) {
        if (meta_size - pos < 8)
            return ftc_err_set(err, FTC_ECORRUPT, "metadata record at offset %llu is truncated",
                               (unsigned long long)(meta_off + pos));
        uint32_t kl = ftc_le_rd32(p + meta_off + pos), vl = ftc_le_rd32(p + meta_off + pos + 4);
        uint64_t rec = align_up(8ull + kl + vl, 8);
        if (kl == 0 || kl > FTC_SHARD_META_KEY_MAX || rec > meta_size - pos)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "metadata record at offset %llu: key length %u, value length %u do "
                               "not fit",
                               (unsigned long long)(meta_off + pos), kl, vl);
        if (memchr(p + meta_off + pos + 8, '\0', kl))
            return ftc_err_set(err, FTC_ECORRUPT, "metadata key at offset %llu contains a NUL",
                               (unsigned long long)(meta_off + pos + 8));
        uint64_t used = 8ull + kl + vl;
        if (!all_zero(p + meta_off + pos + used, rec - used))
            return ftc_err_set(err, FTC_ECORRUPT,
                               "padding of the metadata record at offset %llu is not zero",
                               (unsigned long long)(meta_off + pos));
        pos += rec;
        nmeta++;
    }
    if (nmeta > 1) { /* keys are unique, like tensor names */
        ftc__name_ref_t *keys = malloc((size_t)nmeta * sizeof *keys);
        if (!keys)
            return ftc_err_set(err, FTC_ENOMEM, "checking %u metadata keys: out of memory", nmeta);
        uint32_t k = 0;
        for (uint64_t pos = 0; pos < meta_size; k++) {
            uint32_t kl = ftc_le_rd32(p + meta_off + pos), vl = ftc_le_rd32(p + meta_off + pos + 4);
            keys[k].s = p + meta_off + pos + 8;
            keys[k].len = kl;
            pos += align_up(8ull + kl + vl, 8);
        }
        qsort(keys, nmeta, sizeof *keys, ftc__name_cmp);
        int dup = -1;
        for (uint32_t i = 1; i < nmeta && dup < 0; i++)
            if (!ftc__name_cmp(&keys[i - 1], &keys[i]))
                dup = (int)i;
        if (dup >= 0) {
            int rc2 = ftc_err_set(err, FTC_ECORRUPT, "metadata key '%.*s' appears twice",
                                  (int)(keys[dup].len > 200 ? 200 : keys[dup].len),
                                  (const char *)keys[dup].s);
            free(keys);
            return rc2;
        }
        free(keys);
    }
    v->base = p;
    v->size = total;
    v->n_tensors = n;
    v->names_offset = names_off;
    v->names_size = names_size;
    v->meta_offset = meta_off;
    v->meta_size = meta_size;
    v->payload_offset = pay_off;
    v->payload_size = pay_size;
    v->head_xxh3 = head;
    if (flags & FTC_SHARD_VERIFY)
        return ftc_shard_verify(v, 1, err);
    return 0;
}

void ftc_shard_get(const ftc_shard_view_t *v, uint32_t i, ftc_shard_tensor_t *t)
{
    const uint8_t *e = v->base + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
    memset(t, 0, sizeof *t);
    t->name = (const char *)v->base + v->names_offset + ftc_le_rd32(e + E_NAME_OFFSET);
    t->name_len = ftc_le_rd32(e + E_NAME_LEN);
    t->dtype = e[E_DTYPE];
    t->ndim = e[E_NDIM];
    for (uint32_t k = 0; k < t->ndim; k++)
        t->shape[k] = ftc_le_rd64(e + E_SHAPE + 8 * k);
    t->offset = ftc_le_rd64(e + E_OFFSET);
    t->length = ftc_le_rd64(e + E_LENGTH);
    t->xxh3 = ftc_le_rd64(e + E_XXH3);
    t->data = v->base + t->offset;
}

int ftc_shard_find(const ftc_shard_view_t *v, const char *name)
{
    size_t nl = strlen(name);
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        const uint8_t *e = v->base + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
        if (ftc_le_rd32(e + E_NAME_LEN) == nl &&
            !memcmp(v->base + v->names_offset + ftc_le_rd32(e + E_NAME_OFFSET), name, nl))
            return (int)i;
    }
    return FTC_ENOENT;
}

int ftc_shard_verify_tensor(const ftc_shard_view_t *v, uint32_t i, ftc_err_t *err)
{
    ftc_shard_tensor_t t;
    ftc_shard_get(v, i, &t);
    if (ftc_xxh3(t.data, t.length) != t.xxh3)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "tensor %u '%.*s': checksum mismatch over bytes %llu..%llu", i,
                           (int)(t.name_len > 200 ? 200 : t.name_len), t.name,
                           (unsigned long long)t.offset,
                           (unsigned long long)(t.offset + t.length));
    return 0;
}

/* The alignment gaps in the payload carry no data but must be zero, so that
 * no byte of a shard can change without detection. */
static int ftc__verify_gaps(const ftc_shard_view_t *v, ftc_err_t *err)
{
    uint64_t pos = v->payload_offset;
    for (uint32_t i = 0; i <= v->n_tensors; i++) {
        uint64_t next = v->size - FTC_SHARD_FOOTER_SIZE, end = next;
        if (i < v->n_tensors) {
            const uint8_t *e = v->base + FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE;
            next = ftc_le_rd64(e + E_OFFSET);
            end = next + ftc_le_rd64(e + E_LENGTH);
        }
        if (!all_zero(v->base + pos, next - pos))
            return ftc_err_set(err, FTC_ECORRUPT,
                               "padding bytes %llu..%llu before %s are not zero",
                               (unsigned long long)pos, (unsigned long long)next,
                               i < v->n_tensors ? "a tensor" : "the footer");
        pos = end;
    }
    return 0;
}

int ftc_shard_verify_gaps(const ftc_shard_view_t *v, ftc_err_t *err)
{
    return ftc__verify_gaps(v, err);
}

int ftc_shard_verify(const ftc_shard_view_t *v, int threads, ftc_err_t *err)
{
    int grc = ftc__verify_gaps(v, err);
    if (grc)
        return grc;
    ftc__hash_job_t job = {.v = v, .region = NULL};
    atomic_init(&job.next, 0);
    atomic_init(&job.bad, 0);
    ftc__hash_run(&job, threads);
    int bad = atomic_load(&job.bad);
    if (bad)
        return ftc_shard_verify_tensor(v, (uint32_t)bad - 1, err);
    return 0;
}

int ftc_shard_meta_next(const ftc_shard_view_t *v, uint64_t *pos, const char **key,
                        uint32_t *key_len, const uint8_t **val, uint32_t *val_len)
{
    if (*pos >= v->meta_size)
        return 0;
    const uint8_t *r = v->base + v->meta_offset + *pos;
    uint32_t kl = ftc_le_rd32(r), vl = ftc_le_rd32(r + 4);
    *key = (const char *)r + 8;
    *key_len = kl;
    *val = r + 8 + kl;
    *val_len = vl;
    *pos += align_up(8ull + kl + vl, 8);
    return 1;
}

int ftc_shard_meta_get(const ftc_shard_view_t *v, const char *key, const uint8_t **val,
                       uint32_t *val_len)
{
    uint64_t pos = 0;
    const char *k;
    uint32_t kl;
    size_t want = strlen(key);
    while (ftc_shard_meta_next(v, &pos, &k, &kl, val, val_len))
        if (kl == want && !memcmp(k, key, kl))
            return 0;
    return FTC_ENOENT;
}
