/*
 * fuzz_rdzv.c — libFuzzer target for the hello of the trainer's TCP
 * rendezvous (trainer/dist.c), the bytes rank 0 reads from anyone who
 * connects to MASTER_ADDR:port: ftc__dist_hello_parse on the input and on
 * every prefix of it (rank 0 parses what has arrived so far, so a prefix of a
 * hello must read "more to come", and a refusal must stay one as bytes
 * arrive), the re-encoding of an accepted hello (the same bytes), and rank
 * 0's check of it against its own job, generation and world size.
 */
#include "fuzz_common.h"

#include "trainer/dist.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[512] = "";
    ftc__dist_hello_t h;
    memset(&h, 0, sizeof h);
    int rc = ftc__dist_hello_parse(data, size, &h, why, sizeof why);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == FTC_EPROTO, "parse returned %d", rc);
    if (rc < 0)
        FUZZ_CHECK(why[0] && memchr(why, 0, sizeof why), "a refusal without a reason");
    /* prefixes, as rank 0 sees the bytes arrive */
    size_t lim = size < FTC__DIST_HELLO_MAX + 1 ? size : FTC__DIST_HELLO_MAX + 1;
    int seen_err = 0;
    for (size_t k = 0; k < lim; k++) {
        ftc__dist_hello_t p;
        char pw[512] = "";
        int pr = ftc__dist_hello_parse(data, k, &p, pw, sizeof pw);
        if (rc == 1)
            FUZZ_CHECK(k < h.size ? pr == 0 : pr == 1 && p.size == h.size,
                       "prefix %zu of a %zu-byte hello: parse returned %d", k, h.size, pr);
        else if (rc == 0)
            FUZZ_CHECK(pr == 0, "prefix %zu of a good beginning: parse returned %d", k, pr);
        else
            FUZZ_CHECK(pr == 0 || pr == FTC_EPROTO, "prefix %zu: parse returned %d", k, pr);
        FUZZ_CHECK(!seen_err || pr == FTC_EPROTO, "prefix %zu: a refused beginning became %d", k,
                   pr);
        seen_err |= pr < 0;
    }
    if (rc != 1)
        return 0;
    FUZZ_CHECK(h.size >= FTC__DIST_HELLO_HDR && h.size <= size && h.size <= FTC__DIST_HELLO_MAX,
               "a hello of %zu bytes in %zu", h.size, size);
    FUZZ_CHECK(h.blob >= data && h.bloblen >= 1 && h.bloblen <= FTC_DIST_BLOB_MAX &&
                   h.blob + h.bloblen == data + h.size,
               "the blob is not the hello's last %zu bytes", h.bloblen);
    fuzz_touch(h.blob, h.bloblen);
    FUZZ_CHECK(strlen(h.job) <= FTC_DIST_JOB_MAX, "a job id of %zu bytes", strlen(h.job));
    uint8_t out[FTC__DIST_HELLO_MAX];
    size_t n = ftc__dist_hello_encode(&h, out, sizeof out);
    FUZZ_CHECK(n == h.size && !memcmp(out, data, n), "the hello did not re-encode to its bytes");
    /* rank 0 of job "fuzzjob", generation 3, 4 ranks */
    char cw[512] = "";
    int cr = ftc__dist_hello_check(&h, "fuzzjob", 3, 4, cw, sizeof cw);
    FUZZ_CHECK(cr == 0 || cr == FTC_ECONFIG || cr == FTC_ESTALE, "check returned %d", cr);
    if (cr < 0)
        FUZZ_CHECK(cw[0] && memchr(cw, 0, sizeof cw), "a refusal without a reason");
    else
        FUZZ_CHECK(!strcmp(h.job, "fuzzjob") && h.generation == 3 && h.world == 4 &&
                       h.rank >= 1 && h.rank <= 3,
                   "accepted rank %u of %u, job '%s', generation %llu", (unsigned)h.rank,
                   (unsigned)h.world, h.job, (unsigned long long)h.generation);
    return 0;
}
