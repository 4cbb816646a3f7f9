/*
 * test_wire.c — the wire header: round trip of every type; a forged MAC,
 * another job's key, a flipped bit anywhere in the header, bad bounds and a
 * truncated message are all refused with the reason named; payload checksum.
 */
#include "ftc_test.h"

#include "ckpt/wire.h"
#include "core/hash.h"

static ftc_wire_key_t key(const char *job, uint8_t fill)
{
    ftc_wire_key_t k;
    uint8_t secret[32];
    memset(secret, fill, sizeof secret);
    ftc_err_t err = {0};
    assert_int_equal(ftc_wire_key_init(&k, job, secret, sizeof secret, &err), 0);
    return k;
}

static void test_round_trip_and_refusals(void **state)
{
    (void)state;
    ftc_wire_key_t k = key("jobA", 1), other_job = key("jobB", 1), other_secret = key("jobA", 2);
    ftc_err_t err = {0};
    uint8_t payload[100];
    ftc_test_fill(payload, sizeof payload, 5);
    ftc_wire_hdr_t h = {.type = FTC_MSG_PUT, .flags = 0, .generation = 7, .sender = 2, .owner = 5,
                        .seq = 99, .step = 1234, .offset = 4096, .length = sizeof payload,
                        .total = 8192, .payload_xxh3 = ftc_xxh3(payload, sizeof payload)};
    uint8_t msg[FTC_WIRE_HDR + sizeof payload];
    assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), 0);
    memcpy(msg + FTC_WIRE_HDR, payload, sizeof payload);
    ftc_wire_hdr_t d;
    assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), 0);
    assert_int_equal(d.type, FTC_MSG_PUT);
    assert_int_equal(d.generation, 7);
    assert_int_equal(d.owner, 5);
    assert_int_equal(d.seq, 99);
    assert_int_equal(d.offset, 4096);
    assert_int_equal(ftc_wire_check_payload(&d, msg + FTC_WIRE_HDR, sizeof payload, &err), 0);
    msg[FTC_WIRE_HDR + 3] ^= 1;
    assert_int_equal(ftc_wire_check_payload(&d, msg + FTC_WIRE_HDR, sizeof payload, &err),
                     FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "checksum mismatch"));
    msg[FTC_WIRE_HDR + 3] ^= 1;
    /* wrong secret, other job */
    assert_int_equal(ftc_wire_decode(&other_secret, msg, sizeof msg, &d, &err), FTC_EAUTH);
    assert_non_null(strstr(err.msg, "HMAC"));
    assert_int_equal(ftc_wire_decode(&other_job, msg, sizeof msg, &d, &err), FTC_EAUTH);
    /* every single-bit flip of the header is refused */
    for (int byte = 0; byte < FTC_WIRE_HDR; byte++)
        for (int bit = 0; bit < 8; bit++) {
            msg[byte] ^= (uint8_t)(1u << bit);
            int rc = ftc_wire_decode(&k, msg, sizeof msg, &d, &err);
            if (rc == 0)
                fail_msg("flip of byte %d bit %d accepted", byte, bit);
            msg[byte] ^= (uint8_t)(1u << bit);
        }
    /* truncated, and a payload length that disagrees */
    assert_int_equal(ftc_wire_decode(&k, msg, 50, &d, &err), FTC_EPROTO);
    assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg - 1, &d, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "header says"));
    /* a header-only PUT (payload sent separately) is fine */
    assert_int_equal(ftc_wire_decode(&k, msg, FTC_WIRE_HDR, &d, &err), 0);
    /* bounds */
    h.offset = 8100;
    assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), 0);
    assert_int_equal(ftc_wire_decode(&k, msg, FTC_WIRE_HDR, &d, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "runs past"));
    h.type = 42;
    assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), FTC_EINVAL);
    uint8_t s[8] = {0};
    ftc_wire_key_t bad;
    assert_int_equal(ftc_wire_key_init(&bad, "j", s, sizeof s, &err), FTC_EINVAL);
    assert_string_equal(ftc_wire_type_name(FTC_MSG_ACK), "ACK");
}

/* keep (offset 88): carried by a PUT, never by another type (refused there
 * as a reserved field), and covered by the MAC. */
static void test_put_keep(void **state)
{
    (void)state;
    ftc_wire_key_t k = key("jobA", 1);
    ftc_err_t err = {0};
    ftc_wire_hdr_t h = {.type = FTC_MSG_PUT, .generation = 3, .owner = 1, .step = 9,
                        .offset = 0, .length = 0, .total = 4096, .keep = 8};
    uint8_t msg[FTC_WIRE_HDR];
    assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), 0);
    ftc_wire_hdr_t d;
    assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), 0);
    assert_int_equal(d.keep, 8);
    /* another type: keep is not encoded, and one that says it is refused */
    h.type = FTC_MSG_ACK;
    assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), 0);
    assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), 0);
    assert_int_equal(d.keep, 0);
    assert_int_equal(msg[88], 0);
    msg[88] = 1;
    assert_int_not_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), 0);
}

/* Version 2: the request id (offset 36, covered by the MAC) round-trips in
 * every type; a version-1 header is refused naming both versions. */
static void test_request_id(void **state)
{
    (void)state;
    ftc_wire_key_t k = key("jobA", 1);
    ftc_err_t err = {0};
    uint8_t msg[FTC_WIRE_HDR];
    ftc_wire_hdr_t d;
    for (int t = FTC_MSG_HELLO; t < FTC_MSG__MAX; t++) {
        ftc_wire_hdr_t h = {.type = (uint16_t)t, .owner = 3, .req = 0xfedcba98u, .total = 64};
        assert_int_equal(ftc_wire_encode(&k, &h, msg, &err), 0);
        assert_int_equal(msg[4], 2);
        assert_int_equal(msg[36], 0x98);
        assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), 0);
        assert_int_equal(d.req, 0xfedcba98u);
    }
    msg[4] = 1; /* a peer of an older release */
    assert_int_equal(ftc_wire_decode(&k, msg, sizeof msg, &d, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "protocol version 1"));
    assert_non_null(strstr(err.msg, "speaks version 2"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip_and_refusals),
                                       cmocka_unit_test(test_put_keep),
                                       cmocka_unit_test(test_request_id)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
