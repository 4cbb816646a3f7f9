/*
 * test_parity.c — XOR and Reed-Solomon (ISA-L) codes: every combination of
 * up to m lost blocks is rebuilt byte-exact, for odd lengths and unaligned
 * buffers; one loss too many is refused with a message; the redundancy
 * setting parses and refuses bad text.
 */
#include "ftc_test.h"

#include "ckpt/parity.h"

/* Runs every loss pattern of size <= m over g + m blocks of len bytes. */
static void check_code(int g, int m, bool xor_code, uint64_t len, size_t misalign)
{
    ftc_err_t err = {0};
    ftc_parity_t *p = ftc_parity_create(g, m, xor_code, &err);
    assert_non_null(p);
    int n = g + m;
    uint8_t *orig[FTC_PARITY_MAX], *work[FTC_PARITY_MAX], *raw[FTC_PARITY_MAX];
    for (int i = 0; i < n; i++) {
        raw[i] = malloc(len + 64);
        orig[i] = malloc(len + 1);
        work[i] = raw[i] + misalign; /* deliberately unaligned */
        if (i < g)
            ftc_test_fill(orig[i], len, 1000 + (uint64_t)i * 7 + (uint64_t)g);
    }
    assert_int_equal(ftc_parity_encode(p, (const uint8_t *const *)orig, orig + g, len, &err), 0);
    if (xor_code) { /* the parity is the XOR of the data */
        for (uint64_t b = 0; b < len; b++) {
            uint8_t x = 0;
            for (int i = 0; i < g; i++)
                x ^= orig[i][b];
            if (x != orig[g][b])
                fail_msg("xor parity differs at byte %llu", (unsigned long long)b);
        }
    }
    int patterns = 0;
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        int lost_n = __builtin_popcount(mask);
        bool lost[FTC_PARITY_MAX] = {0};
        for (int i = 0; i < n; i++) {
            lost[i] = (mask >> i) & 1;
            if (lost[i])
                memset(work[i], 0xA5, len); /* garbage where the lost block was */
            else
                memcpy(work[i], orig[i], len);
        }
        int rc = ftc_parity_decode(p, work, lost, len, &err);
        if (lost_n > m) {
            assert_int_equal(rc, FTC_ERANGE);
            assert_non_null(strstr(err.msg, "rebuilds at most"));
            continue;
        }
        assert_int_equal(rc, 0);
        for (int i = 0; i < n; i++)
            if (memcmp(work[i], orig[i], len))
                fail_msg("g=%d m=%d mask %#x: block %d not rebuilt", g, m, mask, i);
        patterns++;
    }
    assert_true(patterns > 0);
    for (int i = 0; i < n; i++) {
        free(raw[i]);
        free(orig[i]);
    }
    ftc_parity_destroy(p);
}

static void test_xor(void **state)
{
    (void)state;
    check_code(2, 1, true, 64, 0);
    check_code(4, 1, true, 4097, 3);
    check_code(7, 1, true, 1, 1);
}

static void test_reed_solomon(void **state)
{
    (void)state;
    check_code(4, 2, false, 4096, 0);
    check_code(4, 2, false, 333, 5);
    check_code(6, 3, false, 1000, 1);
    check_code(1, 1, false, 77, 0);
    check_code(8, 2, false, 65536 + 3, 7);
}

static void test_create_errors(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    assert_null(ftc_parity_create(0, 1, false, &err));
    assert_null(ftc_parity_create(4, 2, true, &err));
    assert_null(ftc_parity_create(30, 3, false, &err));
    assert_int_equal(err.code, FTC_EINVAL);
    ftc_parity_destroy(NULL);
    assert_int_equal(ftc_parity_block_len(1), 64);
    assert_int_equal(ftc_parity_block_len(128), 128);
}

static void test_redundancy_parse(void **state)
{
    (void)state;
    ftc_redundancy_t r;
    ftc_err_t err = {0};
    char buf[32];
    assert_int_equal(ftc_redundancy_parse("2", &r, &err), 0);
    assert_int_equal(r.kind, FTC_RED_REPLICA);
    assert_int_equal(r.copies, 2);
    assert_int_equal(ftc_redundancy_parse("xor:4", &r, &err), 0);
    assert_int_equal(r.kind, FTC_RED_XOR);
    assert_int_equal(r.g, 4);
    assert_string_equal(ftc_redundancy_str(&r, buf, sizeof buf), "xor:4");
    assert_int_equal(ftc_redundancy_parse("rs:6+2", &r, &err), 0);
    assert_int_equal(r.kind, FTC_RED_RS);
    assert_int_equal(r.m, 2);
    assert_string_equal(ftc_redundancy_str(&r, buf, sizeof buf), "rs:6+2");
    const char *bad[] = {"", "x", "xor:", "xor:1", "xor:4x", "rs:4", "rs:4+", "rs:0+2", "rs:30+3",
                         "-1", "17", "rs:4+2junk", "rs:94+99999999999999999999999999",
                         "xor:9223372036854775807", "rs:9223372036854775807+2",
                         /* digits only: strtol took a sign and leading blanks */
                         "xor: 4", "xor:+4", "xor:\t4", "rs: 4+2", "rs:+4+2", "rs:4+ 2",
                         "rs:4++2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ftc_redundancy_parse(bad[i], &r, &err) != FTC_ECONFIG)
            fail_msg("'%s' accepted", bad[i]);
        assert_non_null(strstr(err.msg, "rs:G+M"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xor),
        cmocka_unit_test(test_reed_solomon),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_redundancy_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
