/*
 * fuzz_zshard.c — libFuzzer target for the compressed shard reader
 * (ftc_zshard_info and ftc_zshard_decode in ckpt/zshard.c).
 *
 * Inputs are .ftcz files of format versions 1 and 2 (byte shuffle, bit-plane
 * shuffle with plane masks, stored chunks; the seeds hold each). Each input
 * is read as an .ftcz file twice: as given, and "repaired" (every
 * chunk, table, header and footer checksum recomputed from what the header
 * and table claim), so that mutations reach the chunk table checks and the
 * zstd frames behind the checksums. Each is decoded without a base, with the
 * fuzz base shard (fuzz_common.h; the delta seeds are encoded against it),
 * and with a base one byte short. Bases are malloc'd at exactly their size so
 * that a decoder reading past base_size shows up under ASan. Checked besides
 * memory safety (ASan/UBSan, leaks):
 *   - the error contract (a code and a message on every failure);
 *   - info and decode agree: a file info accepts decodes or fails cleanly, a
 *     file info refuses never decodes; a delta needs its base;
 *   - a decoded shard has the size and xxh3 the header promises;
 *   - round trip: a decoded shard that opens is re-encoded with the file's
 *     own parameters (filter included) and decodes back to the same bytes,
 *     and also with the other two filters.
 * Decoded sizes are capped by -malloc_limit_mb in run_fuzz.sh.
 */
#include "fuzz_common.h"

#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "ckpt/zshard.h"
#include "core/hash.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *base;       /* the fuzz base shard, exactly base_size bytes */
static uint64_t base_size;
static uint8_t *short_base; /* the same minus its last byte, exactly that size */

/* Field offsets of .ftcz versions 1 and 2 (ckpt/zshard.c), for the repair pass. */
enum {
    ZH_N_CHUNKS = 64,
    ZH_TABLE_XXH3 = 104,
    ZH_SELF_XXH3 = 120,
    ZH_FILE_SIZE = 96,
    ZE_FILE_OFFSET = 0,
    ZE_COMP_SIZE = 8,
    ZE_XXH3 = 40,
    ZF_FILE_SIZE = 8,
    ZF_HEADER_XXH3 = 16,
    ZF_SELF_XXH3 = 24,
};

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    base = fuzz_base_shard(0, &base_size);
    FUZZ_CHECK(base != NULL, "cannot build the base shard");
    short_base = malloc(base_size - 1);
    FUZZ_CHECK(short_base != NULL, "out of memory");
    memcpy(short_base, base, base_size - 1);
    return 0;
}

/* Recomputes the checksums the header's and table's own numbers point at;
 * file_size is set to the buffer length so the footer lands at its end. */
static void repair(uint8_t *p, size_t len)
{
    if (len < FTC_ZSHARD_HEADER_SIZE + FTC_ZSHARD_FOOTER_SIZE)
        return;
    uint32_t n;
    memcpy(&n, p + ZH_N_CHUNKS, 4);
    uint64_t tab_end = FTC_ZSHARD_HEADER_SIZE + (uint64_t)n * FTC_ZSHARD_ENTRY_SIZE;
    uint64_t foff = len - FTC_ZSHARD_FOOTER_SIZE;
    if (tab_end > foff)
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = p + FTC_ZSHARD_HEADER_SIZE + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        uint64_t off = rd64(e + ZE_FILE_OFFSET), cs = rd64(e + ZE_COMP_SIZE);
        if (off <= foff && cs <= foff - off)
            wr64(e + ZE_XXH3, ftc_xxh3(p + off, cs));
    }
    wr64(p + ZH_TABLE_XXH3, ftc_xxh3(p + FTC_ZSHARD_HEADER_SIZE, tab_end - FTC_ZSHARD_HEADER_SIZE));
    wr64(p + ZH_FILE_SIZE, len);
    wr64(p + ZH_SELF_XXH3, ftc_xxh3(p, ZH_SELF_XXH3));
    uint8_t *f = p + foff;
    memcpy(f, "FTCZSEND", 8);
    wr64(f + ZF_FILE_SIZE, len);
    wr64(f + ZF_HEADER_XXH3, rd64(p + ZH_SELF_XXH3));
    wr64(f + ZF_SELF_XXH3, ftc_xxh3(f, ZF_SELF_XXH3));
}

/* decode(encode(raw)) == raw with the parameters of the file raw came from. */
static void round_trip(const uint8_t *raw, uint64_t raw_size, const ftc_zshard_info_t *in)
{
    if (raw_size > (1u << 20))
        return;
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, raw, raw_size, 0, &err) != 0)
        return; /* decode does not promise a shard; persist load checks that */
    bool delta = in->base_step != UINT64_MAX;
    if (delta && (raw_size != base_size || in->base_step >= v.info.step))
        return;
    for (int k = 0; k < 3; k++) {
        int filter = (in->filter + k) % 3; /* the file's own first */
        uint8_t *file = NULL, *back = NULL;
        size_t flen = 0;
        uint64_t blen = 0;
        int rc = ftc_zshard_encode(raw, raw_size, delta ? base : NULL, delta ? base_size : 0,
                                   in->base_step, in->level, filter, in->chunk_bytes, 1, &file,
                                   &flen, &err);
        FUZZ_CHECK(rc == 0, "re-encoding a decoded shard (filter %d) failed: %s", filter,
                   err.msg);
        rc = ftc_zshard_decode(file, flen, delta ? base : NULL, delta ? base_size : 0, &back,
                               &blen, &err);
        FUZZ_CHECK(rc == 0, "decoding a fresh encode (filter %d) failed: %s", filter, err.msg);
        FUZZ_CHECK(blen == raw_size && !memcmp(back, raw, raw_size),
                   "round trip (filter %d) changed the shard", filter);
        free(file);
        free(back);
    }
}

static void read_all(const uint8_t *data, size_t size)
{
    ftc_zshard_info_t in;
    ftc_err_t err = {0};
    int irc = ftc_zshard_info(data, size, &in, &err);
    fuzz_check_err(irc, &err, "ftc_zshard_info");
    FUZZ_CHECK(irc == 0 || irc == FTC_ETRUNC || irc == FTC_ECORRUPT || irc == FTC_EVERSION ||
                   irc == FTC_ENOMEM,
               "info returned %s: %s", ftc_errname(irc), err.msg);
    bool delta = false;
    if (irc == 0) {
        delta = in.base_step != UINT64_MAX;
        FUZZ_CHECK(in.filter >= FTC_ZSHARD_FILTER_NONE && in.filter <= FTC_ZSHARD_FILTER_BIT &&
                       (in.version == 1 || in.version == 2) &&
                       in.shuffle == (in.filter != FTC_ZSHARD_FILTER_NONE),
                   "info: filter %d, version %u, shuffle %d", in.filter, in.version, in.shuffle);
        FUZZ_CHECK(in.raw_size > 0 && in.n_chunks > 0 &&
                       in.chunk_bytes >= FTC_ZSHARD_MIN_CHUNK &&
                       in.chunk_bytes <= FTC_ZSHARD_MAX_CHUNK &&
                       (uint64_t)in.n_chunks * FTC_ZSHARD_ENTRY_SIZE < size,
                   "info fields out of range");
        FUZZ_CHECK(!delta || in.base_step < in.step, "delta base step %llu not before %llu",
                   (unsigned long long)in.base_step, (unsigned long long)in.step);
    }
    const struct {
        const uint8_t *b;
        uint64_t n;
        const char *what;
    } bases[3] = {{NULL, 0, "no base"}, {base, base_size, "the base"},
                  {short_base, base_size - 1, "a short base"}};
    for (int b = 0; b < 3; b++) {
        uint8_t *raw = NULL;
        uint64_t raw_size = 0;
        ftc_err_clear(&err);
        int rc = ftc_zshard_decode(data, size, bases[b].b, bases[b].n, &raw, &raw_size, &err);
        fuzz_check_err(rc, &err, "ftc_zshard_decode");
        if (rc != 0) {
            FUZZ_CHECK(raw == NULL, "decode failed (%s) but returned a buffer", err.msg);
            FUZZ_CHECK(irc == 0 || rc == irc, "info says %s, decode (%s) says %s",
                       ftc_errname(irc), bases[b].what, ftc_errname(rc));
            FUZZ_CHECK(!(irc == 0 && delta && !bases[b].b) || rc == FTC_EINVAL,
                       "a delta without a base gives %s, not FTC_EINVAL", ftc_errname(rc));
            continue;
        }
        FUZZ_CHECK(irc == 0, "info refuses (%s) what decode (%s) accepts", ftc_errname(irc),
                   bases[b].what);
        FUZZ_CHECK(!delta || bases[b].b, "a delta decoded without its base");
        FUZZ_CHECK(!delta || (bases[b].n == in.raw_size &&
                              ftc_xxh3(bases[b].b, bases[b].n) == in.base_raw_xxh3),
                   "a delta decoded against a base that does not match base_xxh3");
        FUZZ_CHECK(raw != NULL && raw_size == in.raw_size, "decoded %llu bytes, header says %llu",
                   (unsigned long long)raw_size, (unsigned long long)in.raw_size);
        FUZZ_CHECK(ftc_xxh3(raw, raw_size) == in.raw_xxh3, "decoded bytes miss raw_xxh3");
        if (b == (delta ? 1 : 0))
            round_trip(raw, raw_size, &in);
        free(raw);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_all(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    repair(copy, size);
    if (size && memcmp(copy, data, size) != 0)
        read_all(copy, size);
    free(copy);
    return 0;
}
