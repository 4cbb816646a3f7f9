/*
 * fuzz_text.c — libFuzzer target for the small text parsers that read what
 * a user or the job's Redis hands over: a redis:// URL (ftc_redis_url_parse,
 * detect/redis.h), a heartbeat value (ftc_ctl_heartbeat_parse,
 * detect/control.h) and a redundancy ("2", "xor:4", "rs:4+2",
 * ftc_redundancy_parse, ckpt/parity.h). The input, cut at its first NUL, is
 * given to each; then an in-process assignment file (ftc_inproc_assign_parse,
 * plugins/inproc.h: what a rank of `ftc run --in-process` reads), an
 * FTC_FAULT spec (ftc_fault_parse, core/fsio.h) and a skip list of the
 * numerical guard (ftc_guard_parse_steps, trainer/train.h) get the whole
 * input, NULs included where the parser takes a length, and so does a
 * /proc/PID/stat text (ftc_proc_stat_parse, core/proc.h) and a
 * /proc/PID/fdinfo/FD text (ftc_proc_fdinfo_flags_parse). Checked besides
 * memory safety (ASan/UBSan, leaks):
 *   - the error contract: every failure has its code and a message;
 *   - a URL that parses has a host, a port in 1..65535, a database >= 0,
 *     and its printable form never shows a password;
 *   - a heartbeat or a redundancy that parses prints back to a text that
 *     parses to the same values (the round trip);
 *   - an assignment that parses has 1..FTC_INPROC_MAX_VARS NUL-terminated
 *     lines shorter than FTC_INPROC_LINE_MAX, one of them its
 *     FTC_GENERATION, and written back one per line it parses the same;
 *   - a skip list gives at most max steps.
 */
#include "fuzz_common.h"

#include "ckpt/parity.h"
#include "core/fsio.h"
#include "core/proc.h"
#include "detect/control.h"
#include "detect/redis.h"
#include "plugins/inproc.h"
#include "trainer/train.h"

#include <ctype.h>
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

static void assignment(const char *data, size_t size)
{
    static ftc_inproc_assign_t a, back; /* 200 KiB each: not on the stack */
    ftc_err_t err = {0};
    int rc = ftc_inproc_assign_parse(data, size, "fuzz", &a, &err);
    if (rc) {
        check_error(rc, &err, "assignment");
        return;
    }
    FUZZ_CHECK(a.n >= 1 && a.n <= FTC_INPROC_MAX_VARS, "%d lines", a.n);
    bool gen = false;
    size_t cap = (size_t)a.n * FTC_INPROC_LINE_MAX + 1, k = 0;
    char *text = malloc(cap);
    if (!text) return;
    for (int i = 0; i < a.n; i++) {
        size_t l = strnlen(a.line[i], FTC_INPROC_LINE_MAX);
        FUZZ_CHECK(l > 0 && l < FTC_INPROC_LINE_MAX, "line %d: %zu bytes", i, l);
        gen |= !strncmp(a.line[i], "FTC_GENERATION=", 15);
        memcpy(text + k, a.line[i], l);
        k += l;
        text[k++] = '\n';
    }
    FUZZ_CHECK(gen, "no FTC_GENERATION line among %d", a.n);
    FUZZ_CHECK(ftc_inproc_assign_parse(text, k, "again", &back, &err) == 0,
               "written back, it does not parse: %s", err.msg);
    FUZZ_CHECK(back.n == a.n && back.gen == a.gen, "written back, it parses differently");
    free(text);
}

static void fault(const char *text)
{
    ftc_fault_t f;
    ftc_err_t err = {0};
    int rc = ftc_fault_parse(&f, text, &err);
    if (rc) {
        check_error(rc, &err, "fault");
        return;
    }
    FUZZ_CHECK(f.op >= -1 && f.op <= FTC_FAULT_RENAME && f.at >= 0, "op %d at %lld", f.op,
               (long long)f.at);
}

static void skips(const char *text)
{
    uint64_t steps[8];
    int n = -1;
    ftc_err_t err = {0};
    int rc = ftc_guard_parse_steps(text, steps, 8, &n, &err);
    if (rc) {
        check_error(rc, &err, "skip list");
        return;
    }
    FUZZ_CHECK(n >= 0 && n <= 8, "%d steps", n);
    /* accepted: "" or digits separated by single commas, one step per entry
     * (no empty entry: not a leading, doubled or trailing comma) */
    size_t len = strlen(text), commas = 0;
    for (size_t i = 0; i < len; i++)
        commas += text[i] == ',';
    FUZZ_CHECK(len == 0 ? n == 0 : (size_t)n == commas + 1, "'%s': %d steps, %zu commas", text,
               n, commas);
    FUZZ_CHECK(len == 0 || (text[0] != ',' && text[len - 1] != ',' && !strstr(text, ",,")),
               "'%s' accepted with an empty entry", text);
}

/* A /proc/PID/stat text (core/proc.h), the raw bytes (not NUL-terminated:
 * a read past size is ASan's): accepted, it has a state letter and a
 * NUL-terminated command name found between '(' and a ')'. */
static void proc_stat(const uint8_t *data, size_t size)
{
    ftc_proc_stat_t ps;
    uint8_t *copy = malloc(size ? size : 1); /* exactly size bytes: an over-read is caught */
    if (!copy)
        return;
    memcpy(copy, data, size);
    int rc = ftc_proc_stat_parse((const char *)copy, size, &ps);
    FUZZ_CHECK(rc == 0 || rc == FTC_EPROTO, "proc stat: %s", ftc_errname(rc));
    if (rc == 0) {
        FUZZ_CHECK(isalpha((unsigned char)ps.state), "proc stat: state %d", ps.state);
        FUZZ_CHECK(memchr(ps.comm, 0, sizeof ps.comm) != NULL, "proc stat: comm unterminated");
        FUZZ_CHECK(memchr(copy, '(', size) && memchr(copy, ')', size), "proc stat: no parens");
        FUZZ_CHECK(ps.ppid >= 0 && ps.pgid >= 0, "proc stat: ppid %d pgid %d", (int)ps.ppid,
                   (int)ps.pgid);
    }
    free(copy);
}

/* A /proc/PID/fdinfo/FD text (core/proc.h), the raw bytes: accepted, its
 * "flags:" line holds only blanks and octal digits, and the value written
 * back in octal is those digits without their leading zeros. */
static void fdinfo(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* exactly size bytes: an over-read is caught */
    if (!copy)
        return;
    memcpy(copy, data, size);
    unsigned fl = 0;
    int rc = ftc_proc_fdinfo_flags_parse((const char *)copy, size, &fl);
    FUZZ_CHECK(rc == 0 || rc == FTC_EPROTO, "fdinfo: %s", ftc_errname(rc));
    if (rc == 0) {
        const char *s = (const char *)copy, *end = s + size, *l = NULL;
        for (const char *q = s; q < end && !l; q++)
            if ((q == s || q[-1] == '\n') && end - q >= 6 && !memcmp(q, "flags:", 6))
                l = q;
        FUZZ_CHECK(l != NULL, "fdinfo: accepted without a flags line");
        const char *p = l + 6;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        while (p < end - 1 && *p == '0' && p[1] >= '0' && p[1] <= '7')
            p++;
        const char *e = p;
        while (e < end && *e >= '0' && *e <= '7')
            e++;
        char oct[16];
        int n = snprintf(oct, sizeof oct, "%o", fl);
        FUZZ_CHECK(n == e - p && !memcmp(oct, p, (size_t)n), "fdinfo: %o is not '%.*s'", fl,
                   (int)(e - p), p);
        FUZZ_CHECK(e == end || *e == '\n', "fdinfo: accepted with '%c' after the digits", *e);
    }
    free(copy);
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
    fault(text);
    skips(text);
    assignment((const char *)data, size);
    proc_stat(data, size);
    fdinfo(data, size);
    free(text);
    return 0;
}
