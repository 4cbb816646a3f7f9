/*
 * fuzz_shard.c — libFuzzer target for the shard reader (ckpt/shard.c).
 *
 * Each input is opened with every combination of FTC_SHARD_VERIFY and
 * FTC_SHARD_ALLOW_TRAILING, twice: once as given, and once "repaired" (the
 * tensor checksums, the footer and its checksums recomputed from whatever the
 * header claims), so that mutations get past the xxh3 checks and reach the
 * table, name and metadata validation behind them. On every successful open
 * the target walks each tensor (ftc_shard_get) and metadata record
 * (ftc_shard_meta_next), checks that what they point to lies inside the shard
 * and touches every byte of it, so an out-of-bounds read shows up under ASan
 * even when the input buffer has trailing bytes. It also checks:
 *   - the error contract (a code and a message on every failure);
 *   - the flags are monotone: VERIFY accepts a subset of what no-flags
 *     accepts, which accepts a subset of ALLOW_TRAILING;
 *   - lookups by name (ftc_shard_find, ftc_shard_meta_get) find what the walk saw;
 *   - the layout is canonical: a verified shard rebuilt through the layout
 *     API from its own view (names, dtypes, shapes, metadata, payload) and
 *     sealed has the same header, table, names, payload and footer fields.
 */
#include "fuzz_common.h"

#include "ckpt/shard.h"
#include "core/hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Field offsets of the version-1 format (ckpt/shard.c), for the repair pass. */
enum {
    H_TOTAL_SIZE = 16,
    H_STEP = 24,
    H_N_TENSORS = 128,
    H_PAYLOAD_OFFSET = 176,
    E_OFFSET = 0,
    E_LENGTH = 8,
    E_XXH3 = 16,
    F_MAGIC = 0,
    F_TOTAL_SIZE = 8,
    F_STEP = 16,
    F_HEAD_XXH3 = 24,
    F_SELF_XXH3 = 56,
};

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Recomputes every checksum the header's own numbers point at; leaves the
 * buffer alone where they point outside it. */
static void repair(uint8_t *p, size_t len)
{
    if (len < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE)
        return;
    uint64_t total = rd64(p + H_TOTAL_SIZE);
    if (total < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE || total > len)
        return;
    uint64_t limit = total - FTC_SHARD_FOOTER_SIZE;
    uint32_t n;
    memcpy(&n, p + H_N_TENSORS, 4);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t eo = FTC_SHARD_HEADER_SIZE + i * FTC_SHARD_ENTRY_SIZE;
        if (eo + FTC_SHARD_ENTRY_SIZE > limit)
            break;
        uint64_t off = rd64(p + eo + E_OFFSET), l = rd64(p + eo + E_LENGTH);
        if (off <= limit && l <= limit - off)
            wr64(p + eo + E_XXH3, ftc_xxh3(p + off, l));
    }
    uint8_t *f = p + limit;
    memcpy(f + F_MAGIC, "FTCSHEND", 8);
    wr64(f + F_TOTAL_SIZE, total);
    wr64(f + F_STEP, rd64(p + H_STEP));
    uint64_t pay = rd64(p + H_PAYLOAD_OFFSET);
    if (pay <= limit)
        wr64(f + F_HEAD_XXH3, ftc_xxh3(p, pay));
    memset(f + 32, 0, 24);
    wr64(f + F_SELF_XXH3, ftc_xxh3(f, F_SELF_XXH3));
}

/* A NUL-terminated copy of a name, or NULL when it holds a NUL (the reader
 * rejects those, so that is itself a finding) or memory runs out. */
static char *dup_name(const char *s, uint32_t n)
{
    FUZZ_CHECK(!memchr(s, '\0', n), "a name of %u bytes with a NUL passed validation", n);
    char *c = malloc((size_t)n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

/* Rebuilds the shard from its view and checks the result is the same bytes.
 * Called for verified shards only (unverified ones may hold stale checksums
 * or nonzero gaps, which sealing would rewrite). */
static void check_canonical(const ftc_shard_view_t *v)
{
    ftc_err_t err = {0};
    ftc_shard_layout_t *l = ftc_shard_layout_create(&v->info);
    if (!l)
        return;
    uint8_t *r = NULL;
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        char *name = dup_name(t.name, t.name_len);
        if (!name)
            goto out;
        int rc = ftc_shard_layout_add_tensor(l, name, t.dtype, t.ndim, t.shape, &err);
        free(name);
        FUZZ_CHECK(rc == (int)i, "tensor %u accepted by the reader is refused by the writer: %s",
                   i, err.msg);
    }
    uint64_t pos = 0;
    const char *k;
    const uint8_t *val;
    uint32_t kl, vl;
    while (ftc_shard_meta_next(v, &pos, &k, &kl, &val, &vl) == 1) {
        char *key = dup_name(k, kl);
        if (!key)
            goto out;
        int rc = ftc_shard_layout_add_meta(l, key, val, vl, &err);
        free(key);
        if (rc == FTC_EEXIST)
            goto out; /* duplicate metadata keys: the reader accepts them (see report) */
        FUZZ_CHECK(rc == 0, "metadata accepted by the reader is refused by the writer: %s",
                   err.msg);
    }
    uint64_t size = ftc_shard_layout_size(l);
    FUZZ_CHECK(size == v->size, "layout of the same tensors is %llu bytes, the shard %llu",
               (unsigned long long)size, (unsigned long long)v->size);
    r = malloc(size);
    if (!r)
        goto out;
    FUZZ_CHECK(ftc_shard_layout_write(l, r, size, &err) == 0, "layout_write: %s", err.msg);
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        memcpy(r + ftc_shard_layout_offset(l, i), t.data, t.length);
    }
    FUZZ_CHECK(ftc_shard_seal(r, size, 1, &err) == 0, "seal: %s", err.msg);
    /* Header, table, names, payload (gaps included: VERIFY checked them) and
     * the footer's fields must be the writer's bytes. The alignment padding
     * inside the head (after the names, inside and after metadata records) is
     * covered by the head checksum but not required to be zero by the
     * reader, so it is not compared. */
    static const char *const what[3] = {"header, table or names", "payload", "footer"};
    uint64_t ro[3] = {0, v->payload_offset, size - FTC_SHARD_FOOTER_SIZE};
    uint64_t rl[3] = {v->names_offset + v->names_size, v->payload_size, F_HEAD_XXH3};
    for (int s = 0; s < 3; s++) {
        if (memcmp(r + ro[s], v->base + ro[s], rl[s]) == 0)
            continue;
        uint64_t d = ro[s];
        while (r[d] == v->base[d])
            d++;
        FUZZ_CHECK(0, "rebuilt shard differs from the verified input in the %s at byte %llu",
                   what[s], (unsigned long long)d);
    }
out:
    free(r);
    ftc_shard_layout_destroy(l);
}

/* Walks an open view; every pointer it yields must lie inside the shard. */
static void walk(const ftc_shard_view_t *v, const uint8_t *buf, size_t len, unsigned flags)
{
    ftc_err_t err = {0};
    FUZZ_CHECK(v->base == buf, "view base moved");
    FUZZ_CHECK(v->size <= len && v->size >= FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE,
               "size %llu of a %zu-byte buffer", (unsigned long long)v->size, len);
    FUZZ_CHECK((flags & FTC_SHARD_ALLOW_TRAILING) || v->size == len, "trailing bytes accepted");
    uint64_t limit = v->size - FTC_SHARD_FOOTER_SIZE;
    FUZZ_CHECK(v->payload_offset <= limit && v->payload_size == limit - v->payload_offset,
               "payload %llu+%llu vs footer at %llu", (unsigned long long)v->payload_offset,
               (unsigned long long)v->payload_size, (unsigned long long)limit);
    FUZZ_CHECK(v->names_offset <= v->meta_offset && v->meta_offset <= v->payload_offset &&
                   v->names_size <= v->meta_offset - v->names_offset &&
                   v->meta_size <= v->payload_offset - v->meta_offset,
               "sections out of order");
    const uint8_t *end = v->base + v->size;
    uint64_t prev_end = v->payload_offset;
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        const char *names = (const char *)v->base + v->names_offset;
        FUZZ_CHECK(t.name >= names && t.name_len >= 1 && t.name_len <= FTC_SHARD_NAME_MAX &&
                       (uint64_t)(t.name - names) <= v->names_size &&
                       t.name_len <= v->names_size - (uint64_t)(t.name - names),
                   "tensor %u name outside the names section", i);
        FUZZ_CHECK(ftc_dtype_size(t.dtype) != 0 && t.ndim <= FTC_SHARD_MAX_DIMS,
                   "tensor %u: dtype %d ndim %u", i, t.dtype, t.ndim);
        uint64_t n = ftc_dtype_size(t.dtype);
        for (uint32_t k = 0; k < t.ndim; k++)
            n *= t.shape[k]; /* open checked it does not overflow */
        FUZZ_CHECK(n == t.length, "tensor %u: length %llu, shape says %llu", i,
                   (unsigned long long)t.length, (unsigned long long)n);
        FUZZ_CHECK(t.offset >= prev_end && t.offset % FTC_SHARD_ALIGN == 0 && t.offset <= limit &&
                       t.length <= limit - t.offset,
                   "tensor %u bytes %llu+%llu outside the payload [%llu, %llu)", i,
                   (unsigned long long)t.offset, (unsigned long long)t.length,
                   (unsigned long long)prev_end, (unsigned long long)limit);
        FUZZ_CHECK(t.data == v->base + t.offset && t.data + t.length <= end, "tensor %u data", i);
        prev_end = t.offset + t.length;
        fuzz_touch(t.name, t.name_len);
        fuzz_touch(t.data, t.length);
        char *name = dup_name(t.name, t.name_len);
        if (name) {
            int idx = ftc_shard_find(v, name);
            FUZZ_CHECK(idx == (int)i, "find('%s') = %d, expected %u", name, idx, i);
            free(name);
        }
        int rc = ftc_shard_verify_tensor(v, i, &err);
        fuzz_check_err(rc, &err, "ftc_shard_verify_tensor");
        FUZZ_CHECK(rc == 0 || rc == FTC_ECORRUPT, "verify_tensor returned %s", ftc_errname(rc));
        FUZZ_CHECK(rc == 0 || !(flags & FTC_SHARD_VERIFY), "tensor %u fails after VERIFY", i);
    }
    uint64_t pos = 0, records = 0;
    const char *k;
    const uint8_t *val;
    uint32_t kl, vl;
    const uint8_t *meta = v->base + v->meta_offset, *meta_end = meta + v->meta_size;
    for (;;) {
        uint64_t before = pos;
        int rc = ftc_shard_meta_next(v, &pos, &k, &kl, &val, &vl);
        FUZZ_CHECK(rc == 0 || rc == 1, "meta_next returned %d", rc);
        if (rc == 0)
            break;
        FUZZ_CHECK(pos > before && ++records <= v->meta_size / 8, "meta_next does not advance");
        FUZZ_CHECK((const uint8_t *)k >= meta && kl >= 1 && kl <= FTC_SHARD_META_KEY_MAX &&
                       kl <= (uint64_t)(meta_end - (const uint8_t *)k),
                   "metadata key at %llu outside the metadata section", (unsigned long long)before);
        FUZZ_CHECK(val >= meta && vl <= (uint64_t)(meta_end - val),
                   "metadata value at %llu (%u bytes) outside the metadata section",
                   (unsigned long long)before, vl);
        fuzz_touch(k, kl);
        fuzz_touch(val, vl);
        char *key = dup_name(k, kl);
        if (key) {
            const uint8_t *gv;
            uint32_t gl;
            FUZZ_CHECK(ftc_shard_meta_get(v, key, &gv, &gl) == 0, "meta_get('%s') misses", key);
            free(key);
        }
    }
    FUZZ_CHECK(pos == v->meta_size, "metadata walk ends at %llu of %llu",
               (unsigned long long)pos, (unsigned long long)v->meta_size);
    int rc = ftc_shard_verify(v, 1, &err);
    fuzz_check_err(rc, &err, "ftc_shard_verify");
    FUZZ_CHECK(rc == 0 || !(flags & FTC_SHARD_VERIFY), "verify fails after open with VERIFY: %s",
               err.msg);
    if (flags & FTC_SHARD_VERIFY)
        check_canonical(v);
}

/* Opens buf with all four flag combinations and checks they agree. */
static void open_all(const uint8_t *buf, size_t len)
{
    static const unsigned combos[4] = {0, FTC_SHARD_ALLOW_TRAILING, FTC_SHARD_VERIFY,
                                       FTC_SHARD_VERIFY | FTC_SHARD_ALLOW_TRAILING};
    int rc[4];
    for (int c = 0; c < 4; c++) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        rc[c] = ftc_shard_open(&v, buf, len, combos[c], &err);
        fuzz_check_err(rc[c], &err, "ftc_shard_open");
        FUZZ_CHECK(rc[c] == 0 || rc[c] == FTC_ETRUNC || rc[c] == FTC_ECORRUPT ||
                       rc[c] == FTC_EVERSION || rc[c] == FTC_ENOMEM,
                   "open returned %s: %s", ftc_errname(rc[c]), err.msg);
        if (rc[c] == 0)
            walk(&v, buf, len, combos[c]);
    }
    FUZZ_CHECK(rc[0] != 0 || rc[1] == 0, "accepted without ALLOW_TRAILING but not with it");
    FUZZ_CHECK(rc[2] != 0 || rc[0] == 0, "accepted with VERIFY but not without");
    FUZZ_CHECK(rc[3] != 0 || rc[1] == 0, "accepted with VERIFY|TRAILING but not TRAILING");
    uint64_t total;
    ftc_err_t err = {0};
    int prc = ftc_shard_peek_size(buf, len, &total, &err);
    fuzz_check_err(prc, &err, "ftc_shard_peek_size");
    FUZZ_CHECK(rc[1] != 0 || (prc == 0 && total <= len), "peek_size disagrees with open");
    /* the receiver's peeks on an arriving shard (ckpt/replica.c): any prefix
     * of any bytes, with total = the buffer's length; the ranges they return
     * are hashed, so ASan sees a range outside the buffer */
    uint64_t haves[3] = {len / 2, len, FTC_SHARD_HEADER_SIZE};
    for (int k = 0; k < 3; k++) {
        uint32_t n = 0;
        if (haves[k] > len || ftc_shard_peek_count(buf, haves[k], len, &n) != 0)
            continue;
        ftc_shard_view_t v;
        ftc_err_t e2 = {0};
        bool opened = ftc_shard_open(&v, buf, len, 0, &e2) == 0;
        FUZZ_CHECK(!opened || n == v.n_tensors, "peek_count disagrees with open");
        for (uint32_t i = 0; i < n; i++) {
            uint64_t off, tl, h;
            if (ftc_shard_peek_tensor(buf, len, i, &off, &tl, &h) != 0) {
                FUZZ_CHECK(!opened, "peek_tensor refused a tensor open accepted");
                continue;
            }
            fuzz_touch(buf + off, (size_t)tl);
            if (opened) {
                ftc_shard_tensor_t t;
                ftc_shard_get(&v, i, &t);
                FUZZ_CHECK(t.offset == off && t.length == tl && t.xxh3 == h,
                           "peek_tensor disagrees with open");
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_all(data, size);
    /* the repaired copy: same length, so ASan still sees reads past the end */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    repair(copy, size);
    if (size && memcmp(copy, data, size) != 0)
        open_all(copy, size);
    free(copy);
    return 0;
}
