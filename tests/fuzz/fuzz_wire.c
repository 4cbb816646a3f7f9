/*
 * fuzz_wire.c — libFuzzer target for the small parsers of the control and
 * data paths: the agent wire header (ckpt/wire.c), the rank<->agent message
 * check (ckpt/agent_proto.c), heartbeat values and Redis URLs (detect/), and
 * the redundancy setting (ckpt/parity.c).
 *
 * Wire headers are HMAC'd, so random bytes never get past the MAC. The input
 * is therefore used twice: as raw bytes (must be refused cleanly), and as
 * header fields that are encoded (signed) with the test key and decoded again
 * — every accepted header must decode to the same fields, and every refusal
 * must follow the error contract.
 */
#include "fuzz_common.h"

#include "ckpt/agent_proto.h"
#include "ckpt/parity.h"
#include "ckpt/wire.h"
#include "detect/control.h"
#include "detect/redis.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t secret[32] = "fuzz-secret-fuzz-secret-fuzz-123";
    ftc_wire_key_t k;
    ftc_err_t err = {0};
    if (ftc_wire_key_init(&k, "fuzzjob", secret, sizeof secret, &err))
        abort();
    /* raw bytes as a message */
    ftc_wire_hdr_t h;
    int rc = ftc_wire_decode(&k, data, size, &h, &err);
    fuzz_check_err(rc, &err, "wire_decode(raw)");
    /* bytes as fields: sign, then decode */
    ftc_wire_hdr_t f;
    memset(&f, 0, sizeof f);
    memcpy(&f, data, size < sizeof f ? size : sizeof f);
    uint8_t hdr[FTC_WIRE_HDR];
    memset(&err, 0, sizeof err);
    rc = ftc_wire_encode(&k, &f, hdr, &err);
    fuzz_check_err(rc, &err, "wire_encode");
    if (rc == 0) {
        memset(&err, 0, sizeof err);
        rc = ftc_wire_decode(&k, hdr, sizeof hdr, &h, &err);
        fuzz_check_err(rc, &err, "wire_decode(signed)");
        if (rc == 0)
            FUZZ_CHECK(h.type == f.type && h.generation == f.generation && h.owner == f.owner &&
                           h.step == f.step && h.offset == f.offset && h.total == f.total &&
                           h.seq == f.seq && h.flags == f.flags && h.sender == f.sender &&
                           h.req == f.req,
                       "signed header did not round-trip");
        if (rc == 0 && h.length == 0) {
            memset(&err, 0, sizeof err);
            int prc = ftc_wire_check_payload(&h, data, 0, &err);
            fuzz_check_err(prc, &err, "wire_check_payload");
        }
    }
    /* a local-protocol message */
    ftc_ap_msg_t m;
    memset(&m, 0, sizeof m);
    memcpy(&m, data, size < sizeof m ? size : sizeof m);
    memset(&err, 0, sizeof err);
    rc = ftc_ap_check(&m, size, &err);
    fuzz_check_err(rc, &err, "ap_check");
    if (rc == 0) {
        fuzz_touch(m.job, strlen(m.job));
        fuzz_touch(m.text, strlen(m.text));
    }
    /* text parsers on the input cut at its first NUL */
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    ftc_ctl_heartbeat_t hb;
    memset(&err, 0, sizeof err);
    fuzz_check_err(ftc_ctl_heartbeat_parse(s, strlen(s), &hb, &err), &err, "heartbeat_parse");
    ftc_redis_url_t u;
    memset(&err, 0, sizeof err);
    rc = ftc_redis_url_parse(s, &u, &err);
    fuzz_check_err(rc, &err, "redis_url_parse");
    if (rc == 0) {
        FUZZ_CHECK(u.port >= 1 && u.port <= 65535 && u.db >= 0, "url fields out of range");
        char shown[1024];
        ftc_redis_url_str(&u, shown, sizeof shown);
    }
    ftc_redundancy_t red;
    memset(&err, 0, sizeof err);
    rc = ftc_redundancy_parse(s, &red, &err);
    fuzz_check_err(rc, &err, "redundancy_parse");
    if (rc == 0)
        FUZZ_CHECK(red.kind == FTC_RED_REPLICA ? red.copies >= 0 && red.copies <= 16
                                               : red.g >= 1 && red.m >= 1 &&
                                                     red.g + red.m <= FTC_PARITY_MAX,
                   "redundancy fields out of range");
    free(s);
    return 0;
}
