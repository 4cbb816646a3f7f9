/*
 * fuzz_text.c — libFuzzer target for the small text parsers that read what
 * a user or the job's Redis hands over: a redis:// URL (ftc_redis_url_parse,
 * detect/redis.h), a heartbeat value (ftc_ctl_heartbeat_parse,
 * detect/control.h) and a redundancy ("2", "xor:4", "rs:4+2",
 * ftc_redundancy_parse, ckpt/parity.h). The input, cut at its first NUL, is
 * given to each. Checked besides memory safety (ASan/UBSan, leaks):
 *   - the error contract: every failure has its code and a message;
 *   - a URL that parses has a host, a port in 1..65535, a database >= 0,
 *     and its printable form never shows a password;
 *   - a heartbeat or a redundancy that parses prints back to a text that
 *     parses to the same values (the round trip).
 */
#include "fuzz_common.h"

#include "ckpt/parity.h"
#include "detect/control.h"
#include "detect/redis.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(int rc, const ftc_err_t *err, const char *what)
{
    FUZZ_CHECK(rc < 0 && err->code == rc && err->msg[0], "%s: code %d, message '%s'", what, rc,
               err->msg);
}

static void url(const char *text)
{
    ftc_redis_url_t u;
    ftc_err_t err = {0};
    int rc = ftc_redis_url_parse(text, &u, &err);
    if (rc) {
        check_error(rc, &err, "url");
        return;
    }
    FUZZ_CHECK(strnlen(u.host, sizeof u.host) < sizeof u.host && u.host[0], "host");
    FUZZ_CHECK(u.port >= 1 && u.port <= 65535, "port %d", u.port);
    FUZZ_CHECK(u.db >= 0, "db %d", u.db);
    FUZZ_CHECK(strnlen(u.user, sizeof u.user) < sizeof u.user, "user");
    FUZZ_CHECK(strnlen(u.password, sizeof u.password) < sizeof u.password, "password");
    /* masking: the printable form does not depend on the password (it
     * only says whether there is one) */
    char shown[1024], other[1024];
    ftc_redis_url_str(&u, shown, sizeof shown);
    if (u.password[0]) {
        snprintf(u.password, sizeof u.password, "%s", u.password[0] == 'x' ? "y" : "x");
        ftc_redis_url_str(&u, other, sizeof other);
        FUZZ_CHECK(!strcmp(shown, other), "the password shows: '%s' vs '%s'", shown, other);
    }
}

static void heartbeat(const char *text, size_t len)
{
    ftc_ctl_heartbeat_t hb, back;
    ftc_err_t err = {0};
    int rc = ftc_ctl_heartbeat_parse(text, len, &hb, &err);
    if (rc) {
        check_error(rc, &err, "heartbeat");
        return;
    }
    char again[128];
    snprintf(again, sizeof again, "%" PRIu64 " %" PRId64 " %" PRIu64 " %" PRIu64, hb.generation,
             hb.step, hb.step_time_us, hb.wall_ms);
    FUZZ_CHECK(ftc_ctl_heartbeat_parse(again, strlen(again), &back, &err) == 0,
               "'%s' does not parse: %s", again, err.msg);
    FUZZ_CHECK(!memcmp(&hb, &back, sizeof hb), "'%s' parses to other values", again);
}

static void redundancy(const char *text)
{
    ftc_redundancy_t r, back;
    ftc_err_t err = {0};
    int rc = ftc_redundancy_parse(text, &r, &err);
    if (rc) {
        check_error(rc, &err, "redundancy");
        return;
    }
    char again[64];
    ftc_redundancy_str(&r, again, sizeof again);
    FUZZ_CHECK(ftc_redundancy_parse(again, &back, &err) == 0, "'%s' does not parse: %s", again,
               err.msg);
    FUZZ_CHECK(r.kind == back.kind && r.copies == back.copies && r.g == back.g && r.m == back.m,
               "'%s' parses to another redundancy", again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) { /* the URL parser reads a password from these when the URL has none */
        unsetenv("FTC_REDIS_PASSWORD");
        unsetenv("FTC_REDIS_PASSWORD_FILE");
        once = true;
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t len = strlen(text);
    url(text);
    heartbeat(text, len);
    redundancy(text);
    free(text);
    return 0;
}
