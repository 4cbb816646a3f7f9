/*
 * fuzz_tokens.c — libFuzzer target for the token file reader
 * (ftc_tokens_parse, trainer/data.h): the training data ftc train reads
 * from a path the user names. The first input byte picks a mode: odd, the
 * rest of the input is parsed as it is; even, the rest gets the magic and
 * both checksums (tokens, header) set right first, so the fuzzer gets past
 * them to the version, sizes, reserved bytes and token values. Checked
 * besides memory safety (ASan/UBSan, leaks):
 *   - the error contract: every failure has its code and a message;
 *   - a file that parses holds exactly 64 + 2 n bytes, its vocab is
 *     1..65536, every token is < vocab, and ftc_tokens_encode of what was
 *     read gives back the same bytes (the round trip).
 */
#include "fuzz_common.h"

#include "core/hash.h"
#include "trainer/data.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void wr64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    bool fix = !(data[0] & 1);
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1); /* exactly len: ASan sees a read past it */
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
    if (fix && len >= FTC_TOKENS_HEADER_SIZE) {
        memcpy(buf, FTC_TOKENS_MAGIC, 8);
        wr64(buf + 32, ftc_xxh3(buf + FTC_TOKENS_HEADER_SIZE, len - FTC_TOKENS_HEADER_SIZE));
        wr64(buf + 56, ftc_xxh3(buf, 56));
    }
    ftc_tokens_t t;
    ftc_err_t err = {0};
    int rc = ftc_tokens_parse(buf, len, "fuzz", &t, &err);
    if (rc) {
        FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0], "code %d, message '%s'", rc, err.msg);
        free(buf);
        return 0;
    }
    FUZZ_CHECK(len == FTC_TOKENS_HEADER_SIZE + 2 * t.n, "%zu bytes hold %llu tokens", len,
               (unsigned long long)t.n);
    FUZZ_CHECK(t.vocab >= 1 && t.vocab <= 65536, "vocab %u", t.vocab);
    for (uint64_t i = 0; i < t.n; i++)
        FUZZ_CHECK(t.tok[i] < t.vocab, "token %u at %llu >= vocab %u", t.tok[i],
                   (unsigned long long)i, t.vocab);
    uint8_t *again = NULL;
    size_t alen = 0;
    FUZZ_CHECK(ftc_tokens_encode(t.tok, t.n, t.vocab, &again, &alen, &err) == 0,
               "what was read does not encode: %s", err.msg);
    FUZZ_CHECK(alen == len && !memcmp(again, buf, len), "the round trip differs (%zu vs %zu bytes)",
               alen, len);
    free(again);
    ftc_tokens_free(&t);
    free(buf);
    return 0;
}
