/*
 * fuzz_common.h — helpers shared by the libFuzzer targets and the seed
 * generator: a checked-invariant macro that aborts (libFuzzer reports it as a
 * crash with the input saved), a byte toucher that makes AddressSanitizer see
 * every byte a reader hands back, the error-contract check (I7: every failure
 * carries its code and a message), and the deterministic base shard that the
 * .ftcz delta seeds are encoded against. Header-only: each target is one file.
 */
#ifndef FTC_FUZZ_COMMON_H
#define FTC_FUZZ_COMMON_H

#include "ckpt/shard.h"
#include "core/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invariant of the code under test; a violation is a finding. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Reads every byte of [p, p+n) so that ASan reports any that lie outside the
 * input; the result goes to a volatile so the loop is not optimised away. */
static volatile uint8_t fuzz_sink;
static inline void fuzz_touch(const void *p, uint64_t n)
{
    const volatile uint8_t *b = p;
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++)
        x ^= b[i];
    fuzz_sink ^= x;
}

/* The error contract: rc is 0, or a negative FTC_E* code equal to err->code
 * with a non-empty message naming what was wrong. */
static inline void fuzz_check_err(int rc, const ftc_err_t *err, const char *what)
{
    if (rc == 0)
        return;
    FUZZ_CHECK(rc < 0 && rc >= FTC_ERANGE, "%s: returned %d, not an FTC_E* code", what, rc);
    FUZZ_CHECK(err->code == rc, "%s: returned %d (%s) but err.code is %d", what, rc,
               ftc_errname(rc), err->code);
    FUZZ_CHECK(err->msg[0] != '\0', "%s: returned %s with an empty message", what,
               ftc_errname(rc));
    FUZZ_CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL, "%s: message not terminated",
               what);
}

/* A small deterministic shard (about 3 KiB) built with the layout API: the
 * base that the delta seeds of fuzz_zshard are encoded against and that the
 * target passes to ftc_zshard_decode. variant 0 is the base; other variants
 * are the same layout with a few payload bytes changed (a "next step").
 * Returns a malloc'd region or NULL; *size gets its size. */
static inline uint8_t *fuzz_base_shard(int variant, uint64_t *size)
{
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "fuzz");
    in.step = 100 + (uint64_t)variant;
    in.generation = 3;
    in.dp = 2, in.tp = 1, in.pp = 1;
    in.dp_rank = 1;
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    if (!l)
        return NULL;
    ftc_err_t err = {0};
    uint64_t s1[2] = {16, 16}, s2[1] = {300}, s3[3] = {2, 3, 5};
    uint64_t cursor = 1000 + (uint64_t)variant;
    uint8_t *r = NULL;
    if (ftc_shard_layout_add_tensor(l, "w", FTC_DTYPE_F32, 2, s1, &err) < 0 ||
        ftc_shard_layout_add_tensor(l, "optim.w.exp_avg", FTC_DTYPE_BF16, 1, s2, &err) < 0 ||
        ftc_shard_layout_add_tensor(l, "counts", FTC_DTYPE_I64, 3, s3, &err) < 0 ||
        ftc_shard_layout_add_tensor(l, "scalar", FTC_DTYPE_F32, 0, NULL, &err) < 0 ||
        ftc_shard_layout_add_meta(l, "data.cursor", &cursor, sizeof cursor, &err) ||
        ftc_shard_layout_add_meta(l, "empty", NULL, 0, &err))
        goto out;
    *size = ftc_shard_layout_size(l);
    r = malloc(*size);
    if (!r || ftc_shard_layout_write(l, r, *size, &err))
        goto fail;
    /* seal once so the head opens, then fill each tensor through the view
     * (only its own bytes: the alignment gaps stay zero) and seal again */
    ftc_shard_view_t v;
    if (ftc_shard_seal(r, *size, 1, &err) || ftc_shard_open(&v, r, *size, 0, &err))
        goto fail;
    uint64_t x = 0x243F6A8885A308D3ull;
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        uint8_t *p = r + t.offset;
        for (uint64_t j = 0; j < t.length; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* weights-like floats for "w", small counters elsewhere */
            p[j] = (uint8_t)(i == 0 ? (j % 4 == 3 ? 0x3c : x >> 24) : (j % 8 == 0 ? j / 8 : 0));
        }
        if (variant)
            for (uint64_t j = 0; j < t.length; j += 61)
                p[j] ^= (uint8_t)(variant * 7 + 1);
    }
    if (ftc_shard_seal(r, *size, 1, &err))
        goto fail;
    goto out;
fail:
    free(r);
    r = NULL;
out:
    ftc_shard_layout_destroy(l);
    return r;
}

#endif
