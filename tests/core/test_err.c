/* test_err.c — the error table, detail strings, dtypes, clock and hashing. */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/log.h"

#include <errno.h>

static void test_strerror_and_names(void **state)
{
    (void)state;
    assert_string_equal(ftc_strerror(FTC_ECORRUPT), "data is corrupt");
    assert_string_equal(ftc_errname(FTC_ECORRUPT), "FTC_ECORRUPT");
    assert_string_equal(ftc_errname(0), "FTC_OK");
    assert_string_equal(ftc_strerror(12345), "unknown error");
    /* every code in the table has a distinct name and a message */
#define CHECK(name, code, msg)                                                                     \
    assert_true(code < 0);                                                                         \
    assert_string_equal(ftc_errname(code), "FTC_" #name);                                          \
    assert_string_equal(ftc_strerror(code), msg);
    FTC_ERRNO_MAP(CHECK)
#undef CHECK
}

static void test_detail_strings(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    assert_int_equal(ftc_err_set(&err, FTC_EIO, "disk %d", 3), FTC_EIO);
    assert_string_equal(err.msg, "disk 3");
    ftc_err_wrap(&err, "persist step %d", 7);
    assert_string_equal(err.msg, "persist step 7: disk 3");
    assert_int_equal(err.code, FTC_EIO);
    assert_int_equal(ftc_err_errno(&err, ENOSPC, "write x"), FTC_ENOSPC);
    assert_non_null(strstr(err.msg, "write x: "));
    ftc_err_clear(&err);
    assert_string_equal(ftc_err_str(&err), "success");
    assert_int_equal(ftc_err_set(NULL, FTC_EINVAL, "ignored"), FTC_EINVAL);
    /* an over-long message is cut, not overflowed */
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    ftc_err_set(&err, FTC_EINVAL, "%s", big);
    assert_int_equal(strlen(err.msg), FTC_ERR_MSG_MAX - 1);
}

static void test_dtypes(void **state)
{
    (void)state;
    assert_int_equal(ftc_dtype_size(FTC_DTYPE_F32), 4);
    assert_int_equal(ftc_dtype_size(FTC_DTYPE_BF16), 2);
    assert_int_equal(ftc_dtype_size(FTC_DTYPE_I64), 8);
    assert_int_equal(ftc_dtype_size(0), 0);
    assert_int_equal(ftc_dtype_size(99), 0);
    assert_int_equal(ftc_dtype_parse("bf16"), FTC_DTYPE_BF16);
    assert_int_equal(ftc_dtype_parse("BF16"), FTC_DTYPE_BF16);
    assert_int_equal(ftc_dtype_parse("float32"), FTC_DTYPE_F32);
    assert_int_equal(ftc_dtype_parse("complex"), FTC_DTYPE_INVALID);
    assert_null(ftc_dtype_name(42));
}

static void test_clock_and_deadlines(void **state)
{
    (void)state;
    uint64_t a = ftc_now_ns();
    ftc_deadline_t d = ftc_deadline_in_ms(20);
    assert_false(ftc_deadline_expired(d));
    assert_true(ftc_deadline_remaining_ms(d) <= 20);
    ftc_sleep_ms(25);
    assert_true(ftc_deadline_expired(d));
    assert_int_equal(ftc_deadline_remaining_ms(d), 0);
    assert_true(ftc_now_ns() > a);
    assert_false(ftc_deadline_expired(FTC_DEADLINE_NONE));
    ftc_deadline_t m = ftc_deadline_min(FTC_DEADLINE_NONE, d);
    assert_true(m.at_ns == d.at_ns);
    /* a timed wait on an ftc_cond_init condition variable ends at the
     * deadline on the same (monotonic) clock: not at once (a wall-clock
     * condition variable would read the monotonic time as long past), not
     * before the deadline */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    assert_int_equal(ftc_cond_init(&cv), 0);
    ftc_deadline_t w = ftc_deadline_in_ms(30);
    struct timespec ts = ftc_cond_abstime(w);
    pthread_mutex_lock(&mu);
    int rc;
    while ((rc = pthread_cond_timedwait(&cv, &mu, &ts)) == 0) /* spurious wakeups */
        ;
    pthread_mutex_unlock(&mu);
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(ftc_deadline_expired(w));
    struct timespec far = ftc_cond_abstime(FTC_DEADLINE_NONE);
    assert_true((uint64_t)far.tv_sec > ftc_now_ns() / 1000000000ull + 86400);
    pthread_cond_destroy(&cv);
}

static void test_hash(void **state)
{
    (void)state;
    uint8_t buf[1000];
    ftc_test_fill(buf, sizeof buf, 1);
    ftc_hash_t *h = ftc_hash_create();
    assert_non_null(h);
    ftc_hash_update(h, buf, 300);
    ftc_hash_update(h, buf + 300, 700);
    assert_true(ftc_hash_digest(h) == ftc_xxh3(buf, sizeof buf));
    ftc_hash_destroy(h);
    ftc_hash_destroy(NULL);
    char hex[17];
    uint64_t back;
    ftc_hash_hex(0x0123456789abcdefull, hex);
    assert_string_equal(hex, "0123456789abcdef");
    assert_int_equal(ftc_hash_parse_hex(hex, &back), 0);
    assert_true(back == 0x0123456789abcdefull);
    assert_int_equal(ftc_hash_parse_hex("xyz", &back), FTC_EINVAL);
    assert_int_equal(ftc_hash_parse_hex("0123456789abcdeg", &back), FTC_EINVAL);
}

static void test_log_levels(void **state)
{
    (void)state;
    assert_int_equal(ftc_log_level_parse("warn"), FTC_LOG_WARN);
    assert_int_equal(ftc_log_level_parse("nonsense"), -1);
    ftc_log_configure(FTC_LOG_ERROR, "test/r0");
    assert_true(ftc_log_level() == FTC_LOG_ERROR || getenv("FTC_LOG_LEVEL"));
    FTC_INFO("test", "this line is below the level and not printed");
    FTC_ERROR("test", "an error line with prefix (expected in the test log)");
}

/* The CLI's log level (--log-level over FTC_LOG_LEVEL, resolved by the
 * config) is not overridden by FTC_LOG_LEVEL afterwards, neither when it is
 * set nor when a command later sets its prefix. */
static void test_log_flag_over_env(void **state)
{
    (void)state;
    const char *was = getenv("FTC_LOG_LEVEL");
    char *saved = was ? strdup(was) : NULL;
    setenv("FTC_LOG_LEVEL", "debug", 1);
    ftc_log_set_level(FTC_LOG_WARN); /* as cli_common does with log.level */
    assert_int_equal(ftc_log_level(), FTC_LOG_WARN);
    ftc_log_configure(-1, "node0"); /* as ftc run / ftc agent do for their prefix */
    assert_int_equal(ftc_log_level(), FTC_LOG_WARN);
    FTC_INFO("test", "below warn: not printed although FTC_LOG_LEVEL=debug");
    /* a program's default level still yields to FTC_LOG_LEVEL */
    ftc_log_configure(FTC_LOG_ERROR, NULL);
    assert_int_equal(ftc_log_level(), FTC_LOG_DEBUG);
    ftc_log_set_level(99); /* not a level: ignored */
    assert_int_equal(ftc_log_level(), FTC_LOG_DEBUG);
    if (saved)
        setenv("FTC_LOG_LEVEL", saved, 1);
    else
        unsetenv("FTC_LOG_LEVEL");
    free(saved);
    ftc_log_set_level(FTC_LOG_ERROR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror_and_names), cmocka_unit_test(test_detail_strings),
        cmocka_unit_test(test_dtypes),             cmocka_unit_test(test_clock_and_deadlines),
        cmocka_unit_test(test_hash),               cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_log_flag_over_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
