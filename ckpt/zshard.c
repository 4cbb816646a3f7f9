/*
 * zshard.c — the compressed shard file (.ftcz) of the persist tier: encoding
 * (zshard.h) and validated decoding (ftc_zshard_info, ftc_zshard_decode in
 * persist.h). docs/persist-format.md is the byte-level spec.
 *
 * A shard is cut into chunks that never straddle a tensor boundary, so each
 * chunk has one element width. Per chunk: XOR against the base shard (delta),
 * byte-shuffle by the width, one zstd frame. Chunks are compressed and
 * decompressed on a small pool of threads, one zstd context per thread, work
 * handed out through an atomic counter.
 *
 * As in shard.c, fields are read through fixed offsets with memcpy; a file is
 * hostile until every field and bound has been checked, and errors name the
 * field and its byte offset.
 */
#include "ckpt/zshard.h"

#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "core/hash.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ftc's formats are little-endian; a big-endian port needs byte swaps in zshard.c"
#endif

static const char ftc__z_magic[8] = {'F', 'T', 'C', 'Z', 'S', 'H', 'R', 'D'};
static const char ftc__z_endmagic[8] = {'F', 'T', 'C', 'Z', 'S', 'E', 'N', 'D'};

/* Header field offsets (128 bytes). */
enum {
    ZH_MAGIC = 0,
    ZH_VERSION = 8,
    ZH_HEADER_SIZE = 12,
    ZH_RAW_SIZE = 16,
    ZH_RAW_XXH3 = 24,
    ZH_STEP = 32,
    ZH_BASE_STEP = 40,
    ZH_BASE_XXH3 = 48,
    ZH_CHUNK_BYTES = 56,
    ZH_N_CHUNKS = 64,
    ZH_LEVEL = 68,
    ZH_FLAGS = 72,
    ZH_ENTRY_SIZE = 76,
    ZH_TABLE_OFFSET = 80,
    ZH_DATA_OFFSET = 88,
    ZH_FILE_SIZE = 96,
    ZH_TABLE_XXH3 = 104,
    ZH_RESERVED = 112, /* 8 zero bytes */
    ZH_SELF_XXH3 = 120,
};
/* Chunk table entry field offsets (48 bytes). */
enum {
    ZE_FILE_OFFSET = 0,
    ZE_COMP_SIZE = 8,
    ZE_RAW_OFFSET = 16,
    ZE_RAW_SIZE = 24,
    ZE_WIDTH = 32,
    ZE_RESERVED = 36,
    ZE_XXH3 = 40,
};
/* Footer field offsets (32 bytes). */
enum {
    ZF_MAGIC = 0,
    ZF_FILE_SIZE = 8,
    ZF_HEADER_XXH3 = 16,
    ZF_SELF_XXH3 = 24,
};

static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* One chunk, as planned by the encoder or read from a validated table. */
typedef struct ftc__zchunk {
    uint64_t raw_offset, raw_size;
    uint32_t width;       /* shuffle width: 1, 2, 4 or 8 */
    uint64_t file_offset; /* where its frame lies in the file */
    uint64_t slot_cap;    /* encoder: room reserved for its frame */
    uint64_t comp_size;
    uint64_t xxh3; /* of the compressed bytes */
} ftc__zchunk_t;

/* A validated header (and, after ftc__z_parse, chunk table). */
typedef struct ftc__zhdr {
    uint64_t raw_size, raw_xxh3, step, base_step, base_xxh3, chunk_bytes, file_size;
    uint64_t data_offset;
    uint32_t n_chunks, flags;
    int level;
    uint64_t max_chunk; /* largest raw chunk */
} ftc__zhdr_t;

/* ---- shuffle ---------------------------------------------------------------- */

/* out[b*n + i] = in[i*w + b]: all byte 0s of the elements, then all byte 1s... */
static void ftc__shuffle(uint8_t *out, const uint8_t *in, uint64_t size, uint32_t w)
{
    uint64_t n = size / w;
    for (uint32_t b = 0; b < w; b++) {
        uint8_t *o = out + (uint64_t)b * n;
        const uint8_t *s = in + b;
        for (uint64_t i = 0; i < n; i++)
            o[i] = s[i * w];
    }
}

static void ftc__unshuffle(uint8_t *out, const uint8_t *in, uint64_t size, uint32_t w)
{
    uint64_t n = size / w;
    for (uint32_t b = 0; b < w; b++) {
        const uint8_t *s = in + (uint64_t)b * n;
        uint8_t *o = out + b;
        for (uint64_t i = 0; i < n; i++)
            o[i * w] = s[i];
    }
}

static void ftc__xor(uint8_t *dst, const uint8_t *a, const uint8_t *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = a[i] ^ b[i];
}

/* ---- thread pool -------------------------------------------------------------- */

typedef struct ftc__zworker {
    struct ftc__zjob *job;
    pthread_t tid;
    int started;
    int rc;            /* 0 or the first error this worker hit */
    ftc_err_t err;     /* its message */
    void *zctx;        /* ZSTD_CCtx or ZSTD_DCtx */
    uint8_t *scratch1; /* max_chunk bytes */
    uint8_t *scratch2; /* max_chunk bytes (encoder only) */
} ftc__zworker_t;

typedef struct ftc__zjob {
    atomic_uint next;   /* next chunk to take */
    atomic_int failed;  /* set when any worker failed: others stop */
    ftc__zchunk_t *chunks;
    uint32_t n_chunks;
    int level;
    bool shuffle;
    const uint8_t *src;  /* encoder: raw shard; decoder: the file */
    const uint8_t *base; /* delta base or NULL */
    uint8_t *dst;        /* encoder: the output file; decoder: the raw shard */
    int (*one)(struct ftc__zjob *job, ftc__zworker_t *w, uint32_t i);
} ftc__zjob_t;

static void *ftc__zworker_main(void *arg)
{
    ftc__zworker_t *w = arg;
    ftc__zjob_t *job = w->job;
    while (!atomic_load(&job->failed)) {
        unsigned i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n_chunks)
            break;
        int rc = job->one(job, w, i);
        if (rc < 0) {
            w->rc = rc;
            atomic_store(&job->failed, 1);
            break;
        }
    }
    return NULL;
}

static int ftc__zthreads(int threads, uint32_t n_chunks)
{
    long t = threads;
    if (t <= 0) {
        t = sysconf(_SC_NPROCESSORS_ONLN);
        if (t < 1)
            t = 1;
    }
    if (t > 256)
        t = 256;
    if ((uint64_t)t > n_chunks)
        t = n_chunks ? (long)n_chunks : 1;
    return (int)t;
}

/* Runs job on nt workers (worker 0 on the calling thread; a thread that
 * cannot be started just leaves more work to the others). Returns the first
 * worker error, copied into err. */
static int ftc__zrun(ftc__zworker_t *w, int nt, ftc_err_t *err)
{
    for (int i = 1; i < nt; i++)
        w[i].started = pthread_create(&w[i].tid, NULL, ftc__zworker_main, &w[i]) == 0;
    ftc__zworker_main(&w[0]);
    for (int i = 1; i < nt; i++)
        if (w[i].started)
            pthread_join(w[i].tid, NULL);
    for (int i = 0; i < nt; i++) {
        if (w[i].rc < 0) {
            if (err)
                *err = w[i].err;
            return w[i].rc;
        }
    }
    return 0;
}

/* ---- encoding ------------------------------------------------------------------ */

static int ftc__zenc_one(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    ftc__zchunk_t *c = &job->chunks[i];
    const uint8_t *in = job->src + c->raw_offset;
    if (job->base) {
        ftc__xor(w->scratch1, in, job->base + c->raw_offset, c->raw_size);
        in = w->scratch1;
    }
    if (c->width > 1) {
        ftc__shuffle(w->scratch2, in, c->raw_size, c->width);
        in = w->scratch2;
    }
    uint8_t *slot = job->dst + c->file_offset;
    size_t r = ZSTD_compressCCtx(w->zctx, slot, c->slot_cap, in, c->raw_size, job->level);
    if (ZSTD_isError(r))
        return ftc_err_set(&w->err, FTC_EIO, "zstd: chunk %u (raw bytes %llu..%llu): %s", i,
                           (unsigned long long)c->raw_offset,
                           (unsigned long long)(c->raw_offset + c->raw_size),
                           ZSTD_getErrorName(r));
    c->comp_size = r;
    c->xxh3 = ftc_xxh3(slot, r);
    return 0;
}

typedef struct ftc__zplan {
    ftc__zchunk_t *chunks;
    uint32_t n, cap;
    uint64_t chunk_bytes;
    uint64_t max_chunk;
} ftc__zplan_t;

/* Cuts [start, end) into chunks of at most chunk_bytes (rounded down to a
 * multiple of width). */
static int ftc__zplan_region(ftc__zplan_t *pl, uint64_t start, uint64_t end, uint32_t width,
                             ftc_err_t *err)
{
    uint64_t step = pl->chunk_bytes - pl->chunk_bytes % width;
    while (start < end) {
        uint64_t n = end - start < step ? end - start : step;
        if (pl->n == pl->cap) {
            if (pl->cap >= UINT32_MAX / 2)
                return ftc_err_set(err, FTC_ERANGE, "encode: more than 2^31 chunks");
            uint32_t nc = pl->cap ? pl->cap * 2 : 64;
            ftc__zchunk_t *c = realloc(pl->chunks, (size_t)nc * sizeof *c);
            if (!c)
                return ftc_err_set(err, FTC_ENOMEM, "encode: chunk table: out of memory");
            pl->chunks = c;
            pl->cap = nc;
        }
        ftc__zchunk_t *c = &pl->chunks[pl->n++];
        memset(c, 0, sizeof *c);
        c->raw_offset = start;
        c->raw_size = n;
        c->width = width;
        if (n > pl->max_chunk)
            pl->max_chunk = n;
        start += n;
    }
    return 0;
}

/* Plans the chunks of a shard: head width 1, each tensor at its dtype width
 * (1 without shuffle), gaps and the footer width 1. */
static int ftc__zplan_shard(ftc__zplan_t *pl, const ftc_shard_view_t *v, bool shuffle,
                            ftc_err_t *err)
{
    int rc;
    uint64_t cur = 0;
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        if (t.length == 0)
            continue;
        if (t.offset > cur)
            FTC_CHECK_GOTO(ftc__zplan_region(pl, cur, t.offset, 1, err), rc, out);
        uint32_t w = shuffle ? (uint32_t)ftc_dtype_size(t.dtype) : 1;
        FTC_CHECK_GOTO(ftc__zplan_region(pl, t.offset, t.offset + t.length, w, err), rc, out);
        cur = t.offset + t.length;
    }
    FTC_CHECK_GOTO(ftc__zplan_region(pl, cur, v->size, 1, err), rc, out);
    return 0;
out:
    return rc;
}

int ftc_zshard_encode(const void *raw, uint64_t raw_size, const void *base, uint64_t base_size,
                      uint64_t base_step, int level, bool shuffle, uint64_t chunk_bytes,
                      int threads, uint8_t **out, size_t *out_len, ftc_err_t *err)
{
    *out = NULL;
    *out_len = 0;
    if (!raw || raw_size == 0)
        return ftc_err_set(err, FTC_EINVAL, "encode: no shard given");
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
        return ftc_err_set(err, FTC_EINVAL, "encode: zstd level %d outside %d..%d", level,
                           ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (chunk_bytes < FTC_ZSHARD_MIN_CHUNK || chunk_bytes > FTC_ZSHARD_MAX_CHUNK)
        return ftc_err_set(err, FTC_EINVAL, "encode: chunk_bytes %llu outside %llu..%llu",
                           (unsigned long long)chunk_bytes, FTC_ZSHARD_MIN_CHUNK,
                           FTC_ZSHARD_MAX_CHUNK);
    if (threads < 0)
        return ftc_err_set(err, FTC_EINVAL, "encode: threads %d is negative", threads);
    if (base && (base_size != raw_size || base_step == UINT64_MAX))
        return ftc_err_set(err, FTC_EINVAL,
                           "encode: delta base of %llu bytes (step %llu) cannot apply to a "
                           "shard of %llu bytes",
                           (unsigned long long)base_size, (unsigned long long)base_step,
                           (unsigned long long)raw_size);
    if (raw_size > SIZE_MAX / 2)
        return ftc_err_set(err, FTC_ERANGE, "encode: shard of %llu bytes is too large",
                           (unsigned long long)raw_size);
    ftc_shard_view_t v;
    int rc = ftc_shard_open(&v, raw, raw_size, 0, err);
    if (rc < 0)
        return ftc_err_wrap(err, "encode: input is not a shard");
    if (base && base_step >= v.info.step)
        return ftc_err_set(err, FTC_EINVAL, "encode: delta base step %llu is not before step %llu",
                           (unsigned long long)base_step, (unsigned long long)v.info.step);

    ftc__zplan_t pl = {.chunk_bytes = chunk_bytes};
    ftc__zworker_t *w = NULL;
    uint8_t *buf = NULL;
    int nt = 0;
    FTC_CHECK_GOTO(ftc__zplan_shard(&pl, &v, shuffle, err), rc, undo_plan);

    /* Reserve ZSTD_compressBound per chunk, compress in place, then compact. */
    uint64_t data_off = FTC_ZSHARD_HEADER_SIZE + (uint64_t)pl.n * FTC_ZSHARD_ENTRY_SIZE;
    uint64_t cursor = data_off;
    for (uint32_t i = 0; i < pl.n; i++) {
        pl.chunks[i].file_offset = cursor;
        pl.chunks[i].slot_cap = ZSTD_compressBound(pl.chunks[i].raw_size);
        cursor += pl.chunks[i].slot_cap;
    }
    uint64_t cap = cursor + FTC_ZSHARD_FOOTER_SIZE;
    buf = malloc(cap);
    if (!buf) {
        rc = ftc_err_set(err, FTC_ENOMEM, "encode: cannot allocate %llu bytes",
                         (unsigned long long)cap);
        goto undo_plan;
    }

    nt = ftc__zthreads(threads, pl.n);
    w = calloc((size_t)nt, sizeof *w);
    if (!w) {
        rc = ftc_err_set(err, FTC_ENOMEM, "encode: out of memory");
        goto undo_buf;
    }
    ftc__zjob_t job = {.chunks = pl.chunks,
                       .n_chunks = pl.n,
                       .level = level,
                       .shuffle = shuffle,
                       .src = raw,
                       .base = base,
                       .dst = buf,
                       .one = ftc__zenc_one};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    for (int i = 0; i < nt; i++) {
        w[i].job = &job;
        w[i].zctx = ZSTD_createCCtx();
        w[i].scratch1 = malloc(pl.max_chunk);
        w[i].scratch2 = malloc(pl.max_chunk);
        if (!w[i].zctx || !w[i].scratch1 || !w[i].scratch2) {
            rc = ftc_err_set(err, FTC_ENOMEM, "encode: out of memory for thread %d", i);
            goto undo_workers;
        }
    }
    FTC_CHECK_GOTO(ftc__zrun(w, nt, err), rc, undo_workers);

    /* compact the frames and fill the table */
    uint8_t *tab = buf + FTC_ZSHARD_HEADER_SIZE;
    cursor = data_off;
    for (uint32_t i = 0; i < pl.n; i++) {
        ftc__zchunk_t *c = &pl.chunks[i];
        if (c->file_offset != cursor)
            memmove(buf + cursor, buf + c->file_offset, c->comp_size);
        c->file_offset = cursor;
        cursor += c->comp_size;
        uint8_t *e = tab + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        memset(e, 0, FTC_ZSHARD_ENTRY_SIZE);
        wr64(e + ZE_FILE_OFFSET, c->file_offset);
        wr64(e + ZE_COMP_SIZE, c->comp_size);
        wr64(e + ZE_RAW_OFFSET, c->raw_offset);
        wr64(e + ZE_RAW_SIZE, c->raw_size);
        wr32(e + ZE_WIDTH, c->width);
        wr64(e + ZE_XXH3, c->xxh3);
    }
    uint64_t file_size = cursor + FTC_ZSHARD_FOOTER_SIZE;

    uint8_t *h = buf;
    memset(h, 0, FTC_ZSHARD_HEADER_SIZE);
    memcpy(h + ZH_MAGIC, ftc__z_magic, 8);
    wr32(h + ZH_VERSION, FTC_ZSHARD_VERSION);
    wr32(h + ZH_HEADER_SIZE, FTC_ZSHARD_HEADER_SIZE);
    wr64(h + ZH_RAW_SIZE, raw_size);
    wr64(h + ZH_RAW_XXH3, ftc_xxh3(raw, raw_size));
    wr64(h + ZH_STEP, v.info.step);
    wr64(h + ZH_BASE_STEP, base ? base_step : UINT64_MAX);
    wr64(h + ZH_BASE_XXH3, base ? ftc_xxh3(base, base_size) : 0);
    wr64(h + ZH_CHUNK_BYTES, chunk_bytes);
    wr32(h + ZH_N_CHUNKS, pl.n);
    wr32(h + ZH_LEVEL, (uint32_t)level);
    wr32(h + ZH_FLAGS, (shuffle ? FTC_ZSHARD_FLAG_SHUFFLE : 0) | (base ? FTC_ZSHARD_FLAG_DELTA : 0));
    wr32(h + ZH_ENTRY_SIZE, FTC_ZSHARD_ENTRY_SIZE);
    wr64(h + ZH_TABLE_OFFSET, FTC_ZSHARD_HEADER_SIZE);
    wr64(h + ZH_DATA_OFFSET, data_off);
    wr64(h + ZH_FILE_SIZE, file_size);
    wr64(h + ZH_TABLE_XXH3, ftc_xxh3(tab, (uint64_t)pl.n * FTC_ZSHARD_ENTRY_SIZE));
    wr64(h + ZH_SELF_XXH3, ftc_xxh3(h, ZH_SELF_XXH3));

    uint8_t *f = buf + cursor;
    memset(f, 0, FTC_ZSHARD_FOOTER_SIZE);
    memcpy(f + ZF_MAGIC, ftc__z_endmagic, 8);
    wr64(f + ZF_FILE_SIZE, file_size);
    wr64(f + ZF_HEADER_XXH3, rd64(h + ZH_SELF_XXH3));
    wr64(f + ZF_SELF_XXH3, ftc_xxh3(f, ZF_SELF_XXH3));

    uint8_t *shrunk = realloc(buf, file_size);
    if (shrunk)
        buf = shrunk;
    *out = buf;
    *out_len = file_size;
    buf = NULL;
    rc = 0;
undo_workers:
    for (int i = 0; i < nt; i++) {
        ZSTD_freeCCtx(w[i].zctx);
        free(w[i].scratch1);
        free(w[i].scratch2);
    }
    free(w);
undo_buf:
    free(buf);
undo_plan:
    free(pl.chunks);
    return rc;
}

/* ---- validation ------------------------------------------------------------------ */

/* Validates the header, footer and chunk table of an .ftcz buffer. When
 * chunks is not NULL, *chunks gets a malloc'd copy of the table. */
static int ftc__z_parse(const uint8_t *p, size_t len, ftc__zhdr_t *h, ftc__zchunk_t **chunks,
                        ftc_err_t *err)
{
    memset(h, 0, sizeof *h);
    if (chunks)
        *chunks = NULL;
    if (!p || len < FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ETRUNC, "file is %zu bytes, shorter than the %d-byte header",
                           p ? len : 0, FTC_ZSHARD_HEADER_SIZE);
    if (memcmp(p + ZH_MAGIC, ftc__z_magic, 8))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "magic at offset 0 is wrong (expected \"FTCZSHRD\"): not an .ftcz file");
    uint32_t version = rd32(p + ZH_VERSION);
    if (version != FTC_ZSHARD_VERSION)
        return ftc_err_set(err, FTC_EVERSION,
                           "format version at offset %d is %u; this build reads version %d",
                           ZH_VERSION, version, FTC_ZSHARD_VERSION);
    if (ftc_xxh3(p, ZH_SELF_XXH3) != rd64(p + ZH_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT, "header checksum at offset %d does not match",
                           ZH_SELF_XXH3);
    if (rd32(p + ZH_HEADER_SIZE) != FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "header_size at offset %d is %u, must be %d",
                           ZH_HEADER_SIZE, rd32(p + ZH_HEADER_SIZE), FTC_ZSHARD_HEADER_SIZE);
    if (rd32(p + ZH_ENTRY_SIZE) != FTC_ZSHARD_ENTRY_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "entry_size at offset %d is %u, must be %d",
                           ZH_ENTRY_SIZE, rd32(p + ZH_ENTRY_SIZE), FTC_ZSHARD_ENTRY_SIZE);
    if (rd64(p + ZH_RESERVED) != 0)
        return ftc_err_set(err, FTC_ECORRUPT, "reserved header bytes at offset %d are not zero",
                           ZH_RESERVED);
    h->flags = rd32(p + ZH_FLAGS);
    if (h->flags & ~(FTC_ZSHARD_FLAG_SHUFFLE | FTC_ZSHARD_FLAG_DELTA))
        return ftc_err_set(err, FTC_ECORRUPT, "flags at offset %d are %#x; version 1 defines 0x3",
                           ZH_FLAGS, h->flags);
    h->level = (int)rd32(p + ZH_LEVEL);
    if (h->level < ZSTD_minCLevel() || h->level > ZSTD_maxCLevel())
        return ftc_err_set(err, FTC_ECORRUPT, "zstd level at offset %d is %d (must be %d..%d)",
                           ZH_LEVEL, h->level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    h->chunk_bytes = rd64(p + ZH_CHUNK_BYTES);
    if (h->chunk_bytes < FTC_ZSHARD_MIN_CHUNK || h->chunk_bytes > FTC_ZSHARD_MAX_CHUNK)
        return ftc_err_set(err, FTC_ECORRUPT, "chunk_bytes at offset %d is %llu (must be %llu..%llu)",
                           ZH_CHUNK_BYTES, (unsigned long long)h->chunk_bytes,
                           FTC_ZSHARD_MIN_CHUNK, FTC_ZSHARD_MAX_CHUNK);
    h->step = rd64(p + ZH_STEP);
    h->base_step = rd64(p + ZH_BASE_STEP);
    h->base_xxh3 = rd64(p + ZH_BASE_XXH3);
    bool delta = h->flags & FTC_ZSHARD_FLAG_DELTA;
    if (delta && h->base_step >= h->step)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "base_step at offset %d is %llu, not before the step %llu of the file",
                           ZH_BASE_STEP, (unsigned long long)h->base_step,
                           (unsigned long long)h->step);
    if (!delta && (h->base_step != UINT64_MAX || h->base_xxh3 != 0))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "base_step/base_xxh3 at offset %d are set but the delta flag is not",
                           ZH_BASE_STEP);
    h->raw_size = rd64(p + ZH_RAW_SIZE);
    h->raw_xxh3 = rd64(p + ZH_RAW_XXH3);
    h->n_chunks = rd32(p + ZH_N_CHUNKS);
    if (h->raw_size == 0 || h->n_chunks == 0)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "raw_size at offset %d (%llu) and n_chunks at offset %d (%u) must be "
                           "positive",
                           ZH_RAW_SIZE, (unsigned long long)h->raw_size, ZH_N_CHUNKS, h->n_chunks);
    if (h->raw_size > SIZE_MAX / 2)
        return ftc_err_set(err, FTC_ECORRUPT, "raw_size at offset %d (%llu) is absurd",
                           ZH_RAW_SIZE, (unsigned long long)h->raw_size);
    if (rd64(p + ZH_TABLE_OFFSET) != FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "table_offset at offset %d is %llu, must be %d",
                           ZH_TABLE_OFFSET, (unsigned long long)rd64(p + ZH_TABLE_OFFSET),
                           FTC_ZSHARD_HEADER_SIZE);
    h->data_offset = FTC_ZSHARD_HEADER_SIZE + (uint64_t)h->n_chunks * FTC_ZSHARD_ENTRY_SIZE;
    if (rd64(p + ZH_DATA_OFFSET) != h->data_offset)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "data_offset at offset %d is %llu, must be %llu for %u chunks",
                           ZH_DATA_OFFSET, (unsigned long long)rd64(p + ZH_DATA_OFFSET),
                           (unsigned long long)h->data_offset, h->n_chunks);
    h->file_size = rd64(p + ZH_FILE_SIZE);
    if (h->file_size < h->data_offset + h->n_chunks + FTC_ZSHARD_FOOTER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "file_size at offset %d is %llu, too small for %u chunks",
                           ZH_FILE_SIZE, (unsigned long long)h->file_size, h->n_chunks);
    if (h->file_size > len)
        return ftc_err_set(err, FTC_ETRUNC,
                           "file truncated: file_size at offset %d says %llu bytes, only %zu "
                           "present",
                           ZH_FILE_SIZE, (unsigned long long)h->file_size, len);
    if (h->file_size < len)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%zu bytes present but file_size at offset %d says %llu: trailing data",
                           len, ZH_FILE_SIZE, (unsigned long long)h->file_size);
    /* footer */
    uint64_t foff = h->file_size - FTC_ZSHARD_FOOTER_SIZE;
    const uint8_t *f = p + foff;
    if (memcmp(f + ZF_MAGIC, ftc__z_endmagic, 8))
        return ftc_err_set(err, FTC_ECORRUPT, "footer magic at offset %llu is wrong",
                           (unsigned long long)foff);
    if (ftc_xxh3(f, ZF_SELF_XXH3) != rd64(f + ZF_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT, "footer checksum at offset %llu does not match",
                           (unsigned long long)(foff + ZF_SELF_XXH3));
    if (rd64(f + ZF_FILE_SIZE) != h->file_size)
        return ftc_err_set(err, FTC_ECORRUPT, "footer file_size at offset %llu differs from the "
                           "header's", (unsigned long long)(foff + ZF_FILE_SIZE));
    if (rd64(f + ZF_HEADER_XXH3) != rd64(p + ZH_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "footer header_xxh3 at offset %llu does not match the header",
                           (unsigned long long)(foff + ZF_HEADER_XXH3));
    /* chunk table */
    const uint8_t *tab = p + FTC_ZSHARD_HEADER_SIZE;
    if (ftc_xxh3(tab, (uint64_t)h->n_chunks * FTC_ZSHARD_ENTRY_SIZE) != rd64(p + ZH_TABLE_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk table checksum (table_xxh3 at offset %d) does not match",
                           ZH_TABLE_XXH3);
    ftc__zchunk_t *cs = NULL;
    if (chunks) {
        cs = calloc(h->n_chunks, sizeof *cs);
        if (!cs)
            return ftc_err_set(err, FTC_ENOMEM, "chunk table of %u entries: out of memory",
                               h->n_chunks);
    }
    bool shuffle = h->flags & FTC_ZSHARD_FLAG_SHUFFLE;
    uint64_t file_cur = h->data_offset, raw_cur = 0;
    int rc = 0;
    for (uint32_t i = 0; i < h->n_chunks; i++) {
        const uint8_t *e = tab + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        uint64_t eoff = FTC_ZSHARD_HEADER_SIZE + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        ftc__zchunk_t c = {.file_offset = rd64(e + ZE_FILE_OFFSET),
                           .comp_size = rd64(e + ZE_COMP_SIZE),
                           .raw_offset = rd64(e + ZE_RAW_OFFSET),
                           .raw_size = rd64(e + ZE_RAW_SIZE),
                           .width = rd32(e + ZE_WIDTH),
                           .xxh3 = rd64(e + ZE_XXH3)};
        if (c.file_offset != file_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: file_offset at offset %llu is %llu, must be %llu", i,
                             (unsigned long long)(eoff + ZE_FILE_OFFSET),
                             (unsigned long long)c.file_offset, (unsigned long long)file_cur);
            goto undo_chunks;
        }
        if (c.comp_size == 0 || c.comp_size > foff - file_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: comp_size at offset %llu is %llu; %llu bytes are left "
                             "before the footer",
                             i, (unsigned long long)(eoff + ZE_COMP_SIZE),
                             (unsigned long long)c.comp_size,
                             (unsigned long long)(foff - file_cur));
            goto undo_chunks;
        }
        if (c.raw_offset != raw_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: raw_offset at offset %llu is %llu, must be %llu", i,
                             (unsigned long long)(eoff + ZE_RAW_OFFSET),
                             (unsigned long long)c.raw_offset, (unsigned long long)raw_cur);
            goto undo_chunks;
        }
        if (c.raw_size == 0 || c.raw_size > h->chunk_bytes ||
            c.raw_size > h->raw_size - raw_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: raw_size at offset %llu is %llu (must be 1..%llu and end "
                             "by raw_size %llu)",
                             i, (unsigned long long)(eoff + ZE_RAW_SIZE),
                             (unsigned long long)c.raw_size, (unsigned long long)h->chunk_bytes,
                             (unsigned long long)h->raw_size);
            goto undo_chunks;
        }
        if ((c.width != 1 && c.width != 2 && c.width != 4 && c.width != 8) ||
            (!shuffle && c.width != 1) || c.raw_size % c.width) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: width at offset %llu is %u (must be 1, 2, 4 or 8, 1 "
                             "without shuffle, and divide raw_size %llu)",
                             i, (unsigned long long)(eoff + ZE_WIDTH), c.width,
                             (unsigned long long)c.raw_size);
            goto undo_chunks;
        }
        if (rd32(e + ZE_RESERVED) != 0) {
            rc = ftc_err_set(err, FTC_ECORRUPT, "chunk %u: reserved bytes at offset %llu not zero",
                             i, (unsigned long long)(eoff + ZE_RESERVED));
            goto undo_chunks;
        }
        if (c.comp_size > ZSTD_compressBound(c.raw_size)) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: comp_size at offset %llu is %llu, more than zstd can "
                             "produce from %llu bytes",
                             i, (unsigned long long)(eoff + ZE_COMP_SIZE),
                             (unsigned long long)c.comp_size, (unsigned long long)c.raw_size);
            goto undo_chunks;
        }
        if (c.raw_size > h->max_chunk)
            h->max_chunk = c.raw_size;
        file_cur += c.comp_size;
        raw_cur += c.raw_size;
        if (cs)
            cs[i] = c;
    }
    if (file_cur != foff) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "chunks end at byte %llu but the footer starts at %llu: unaccounted bytes",
                         (unsigned long long)file_cur, (unsigned long long)foff);
        goto undo_chunks;
    }
    if (raw_cur != h->raw_size) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "chunks cover %llu raw bytes but raw_size at offset %d says %llu",
                         (unsigned long long)raw_cur, ZH_RAW_SIZE,
                         (unsigned long long)h->raw_size);
        goto undo_chunks;
    }
    if (chunks)
        *chunks = cs;
    return 0;
undo_chunks:
    free(cs);
    return rc;
}

int ftc_zshard_info(const void *file, size_t len, ftc_zshard_info_t *info, ftc_err_t *err)
{
    ftc__zhdr_t h;
    memset(info, 0, sizeof *info);
    int rc = ftc__z_parse(file, len, &h, NULL, err);
    if (rc < 0)
        return rc;
    info->step = h.step;
    info->raw_size = h.raw_size;
    info->raw_xxh3 = h.raw_xxh3;
    info->base_step = (h.flags & FTC_ZSHARD_FLAG_DELTA) ? h.base_step : UINT64_MAX;
    info->base_raw_xxh3 = h.base_xxh3;
    info->chunk_bytes = h.chunk_bytes;
    info->n_chunks = h.n_chunks;
    info->level = h.level;
    info->shuffle = h.flags & FTC_ZSHARD_FLAG_SHUFFLE;
    return 0;
}

/* ---- decoding ------------------------------------------------------------------ */

static int ftc__zdec_one(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    const ftc__zchunk_t *c = &job->chunks[i];
    uint8_t *dst = job->dst + c->raw_offset;
    uint8_t *into = c->width > 1 ? w->scratch1 : dst;
    size_t r = ZSTD_decompressDCtx(w->zctx, into, c->raw_size, job->src + c->file_offset,
                                   c->comp_size);
    if (ZSTD_isError(r))
        return ftc_err_set(&w->err, FTC_ECORRUPT, "chunk %u at file offset %llu: zstd: %s", i,
                           (unsigned long long)c->file_offset, ZSTD_getErrorName(r));
    if (r != c->raw_size)
        return ftc_err_set(&w->err, FTC_ECORRUPT,
                           "chunk %u at file offset %llu: decompressed to %zu bytes, the table "
                           "says %llu",
                           i, (unsigned long long)c->file_offset, r,
                           (unsigned long long)c->raw_size);
    if (c->width > 1)
        ftc__unshuffle(dst, into, c->raw_size, c->width);
    if (job->base)
        ftc__xor(dst, dst, job->base + c->raw_offset, c->raw_size);
    return 0;
}

int ftc_zshard_decode(const void *file, size_t len, const void *base, uint64_t base_size,
                      uint8_t **raw, uint64_t *raw_size, ftc_err_t *err)
{
    *raw = NULL;
    *raw_size = 0;
    ftc__zhdr_t h;
    ftc__zchunk_t *cs = NULL;
    int rc = ftc__z_parse(file, len, &h, &cs, err);
    if (rc < 0)
        return rc;
    const uint8_t *p = file;
    bool delta = h.flags & FTC_ZSHARD_FLAG_DELTA;
    if (delta) {
        if (!base) {
            rc = ftc_err_set(err, FTC_EINVAL, "delta against step %llu: no base shard given",
                             (unsigned long long)h.base_step);
            goto undo_chunks;
        }
        if (base_size != h.raw_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "delta against step %llu: base shard is %llu bytes, raw_size is %llu",
                             (unsigned long long)h.base_step, (unsigned long long)base_size,
                             (unsigned long long)h.raw_size);
            goto undo_chunks;
        }
        if (ftc_xxh3(base, base_size) != h.base_xxh3) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "delta against step %llu: base shard checksum differs from "
                             "base_xxh3 at offset %d",
                             (unsigned long long)h.base_step, ZH_BASE_XXH3);
            goto undo_chunks;
        }
    }
    /* every chunk checksum and frame header before anything is allocated for
     * the output, so a hostile table cannot make us allocate for nothing */
    for (uint32_t i = 0; i < h.n_chunks; i++) {
        const uint8_t *src = p + cs[i].file_offset;
        if (ftc_xxh3(src, cs[i].comp_size) != cs[i].xxh3) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: compressed bytes at offset %llu do not match their "
                             "checksum (table offset %llu)",
                             i, (unsigned long long)cs[i].file_offset,
                             (unsigned long long)(FTC_ZSHARD_HEADER_SIZE +
                                                  (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE + ZE_XXH3));
            goto undo_chunks;
        }
        unsigned long long fcs = ZSTD_getFrameContentSize(src, cs[i].comp_size);
        if (fcs != cs[i].raw_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u at offset %llu: zstd frame content size %s%llu differs "
                             "from raw_size %llu",
                             i, (unsigned long long)cs[i].file_offset,
                             fcs >= ZSTD_CONTENTSIZE_ERROR ? "unknown/" : "",
                             fcs >= ZSTD_CONTENTSIZE_ERROR ? 0ull : fcs,
                             (unsigned long long)cs[i].raw_size);
            goto undo_chunks;
        }
        size_t fsz = ZSTD_findFrameCompressedSize(src, cs[i].comp_size);
        if (ZSTD_isError(fsz) || fsz != cs[i].comp_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u at offset %llu: not exactly one zstd frame of %llu bytes",
                             i, (unsigned long long)cs[i].file_offset,
                             (unsigned long long)cs[i].comp_size);
            goto undo_chunks;
        }
    }
    uint8_t *out = malloc(h.raw_size);
    if (!out) {
        rc = ftc_err_set(err, FTC_ENOMEM, "cannot allocate %llu bytes for the shard",
                         (unsigned long long)h.raw_size);
        goto undo_chunks;
    }
    int nt = ftc__zthreads(0, h.n_chunks);
    ftc__zworker_t *w = calloc((size_t)nt, sizeof *w);
    if (!w) {
        rc = ftc_err_set(err, FTC_ENOMEM, "decode: out of memory");
        goto undo_out;
    }
    ftc__zjob_t job = {.chunks = cs,
                       .n_chunks = h.n_chunks,
                       .shuffle = h.flags & FTC_ZSHARD_FLAG_SHUFFLE,
                       .src = p,
                       .base = delta ? base : NULL,
                       .dst = out,
                       .one = ftc__zdec_one};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    for (int i = 0; i < nt; i++) {
        w[i].job = &job;
        w[i].zctx = ZSTD_createDCtx();
        w[i].scratch1 = job.shuffle ? malloc(h.max_chunk) : NULL;
        if (!w[i].zctx || (job.shuffle && !w[i].scratch1)) {
            rc = ftc_err_set(err, FTC_ENOMEM, "decode: out of memory for thread %d", i);
            goto undo_workers;
        }
    }
    FTC_CHECK_GOTO(ftc__zrun(w, nt, err), rc, undo_workers);
    if (ftc_xxh3(out, h.raw_size) != h.raw_xxh3) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "decoded shard does not match raw_xxh3 at offset %d%s", ZH_RAW_XXH3,
                         delta ? " (wrong delta base?)" : "");
        goto undo_workers;
    }
    *raw = out;
    *raw_size = h.raw_size;
    out = NULL;
    rc = 0;
undo_workers:
    for (int i = 0; i < nt; i++) {
        ZSTD_freeDCtx(w[i].zctx);
        free(w[i].scratch1);
    }
    free(w);
undo_out:
    free(out);
undo_chunks:
    free(cs);
    return rc;
}
