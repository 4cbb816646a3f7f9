/*
 * fuzz_records.c — libFuzzer target for the records one process reads that
 * another wrote, in the job's Redis or in a file: a member record
 * (ftc_ctl_member_parse, detect/control.h: what the detector and `ftc
 * status` read), the leader lease value (ftc_ctl_leader_parse), a member of
 * the committed set (ftc_ctl_committed_member_parse), a commit record's
 * abort marker and checksum (ftc_ctl_abort_marker_parse,
 * ftc_ctl_checksum_parse), a rendezvous round's id list
 * (ftc_rdzv_split_ids, recover/rendezvous.h), an event's stream
 * field (ftc_status_event_field, detect/status.h), an agent's fabric entry
 * (ftc__fabric_parse, ckpt/records.h: the agents and `ftc run` read it), the
 * ranks of a plan
 * (ftc__plan_ranks_parse) and the in-process state file's line
 * (ftc_inproc_state_parse, plugins/inproc.h).
 *
 * The input, cut at its first NUL, is given whole to the one-text parsers;
 * the two-text ones (a fabric field and its value, an event field and its
 * value) get it split at the first newline. The length-taking parsers get
 * the whole input, NULs included. Checked besides memory safety
 * (ASan/UBSan, leaks):
 *   - the error contract: every failure has its code and a message;
 *   - the words of a record that parses are NUL-terminated inside their
 *     buffers, non-empty and without white space (they are one word each
 *     where they are written);
 *   - the round trip: a record that parses, written back the way its writer
 *     writes it (ftc_ctl_join, the lease script, ftc__publish_address,
 *     ftc_inproc_state_write, `ftc run`'s plan), parses to the same values;
 *   - each field is a whole word of the text: a word too long for its field
 *     is not cut with its rest taken for the next field, and a number is
 *     all digits (a sign only where the field has one) and in range, not
 *     "12abc" taken as 12 or "-1" as 2^64-1 (sscanf's %llu);
 *   - a fabric address decodes to half as many bytes as its hex digits, and
 *     a plan's every rank names one of its members;
 *   - an event's number field holds the whole number in range or its
 *     "unknown" (-1, or 0 for t_detect_ms), never another number.
 */
#include "fuzz_common.h"

#include "ckpt/records.h"
#include "detect/control.h"
#include "detect/status.h"
#include "plugins/inproc.h"
#include "recover/rendezvous.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A word of a record: terminated inside cap bytes, non-empty, no white
 * space (sscanf's %s stops at it; the writers put one word there). */
static void check_word(const char *w, size_t cap, const char *what)
{
    size_t l = strnlen(w, cap);
    FUZZ_CHECK(l > 0 && l < cap, "%s: %zu bytes in %zu", what, l, cap);
    for (size_t i = 0; i < l; i++)
        FUZZ_CHECK(!isspace((unsigned char)w[i]), "%s '%s' holds white space", what, w);
}

/* Word i (from 0) of text, words split at white space as sscanf's %s
 * splits them; "" when there are fewer. */
static const char *word(const char *text, int i, char *out, size_t cap)
{
    const char *p = text;
    for (int k = 0;; k++) {
        while (*p && isspace((unsigned char)*p))
            p++;
        const char *b = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        if (k == i || b == p) {
            size_t l = (size_t)(p - b) < cap - 1 ? (size_t)(p - b) : cap - 1;
            memcpy(out, b, l);
            out[l] = 0;
            return out;
        }
    }
}

/* The word is a whole decimal number in range: digits only for an unsigned
 * field (no sign: sscanf's %llu takes "-1" as 2^64-1), a sign allowed for a
 * signed one. */
static bool whole_number(const char *w, bool sign)
{
    const char *d = sign && (*w == '-' || *w == '+') ? w + 1 : w;
    if (!*d || strspn(d, "0123456789") != strlen(d))
        return false;
    errno = 0;
    if (sign)
        (void)strtoll(w, NULL, 10);
    else
        (void)strtoull(w, NULL, 10);
    return errno == 0;
}

static void member(const char *text)
{
    ftc_ctl_member_rec_t m, back;
    ftc_err_t err = {0};
    int rc = ftc_ctl_member_parse(text, &m, &err);
    fuzz_check_err(rc, &err, "member");
    if (rc)
        return;
    check_word(m.host, sizeof m.host, "host");
    check_word(m.domain, sizeof m.domain, "domain");
    check_word(m.joined, sizeof m.joined, "joined");
    /* each field is a whole word of the text: a word too long for its
     * field is not cut and its rest taken for the next field */
    char w[4][512];
    for (int i = 0; i < 4; i++)
        word(text, i, w[i], sizeof w[i]);
    FUZZ_CHECK(!strcmp(w[0], m.host) && !strcmp(w[1], m.domain) && !strcmp(w[3], m.joined),
               "'%.300s': fields '%s' '%s' '%s' are not its words", text, m.host, m.domain,
               m.joined);
    FUZZ_CHECK(whole_number(w[2], true), "'%.300s': pid '%s' taken as %lld", text, w[2], m.pid);
    FUZZ_CHECK(m.joined_ok == whole_number(w[3], false), "'%.300s': joined '%s' %s a number",
               text, w[3], m.joined_ok ? "taken as" : "not taken for");
    /* as ftc_ctl_join writes it */
    char again[400];
    snprintf(again, sizeof again, "%s %s %lld %s", m.host, m.domain, m.pid, m.joined);
    FUZZ_CHECK(ftc_ctl_member_parse(again, &back, &err) == 0, "'%s' does not parse: %s", again,
               err.msg);
    FUZZ_CHECK(!memcmp(&m, &back, sizeof m), "'%s' parses to other values", again);
}

static void leader(const char *data, size_t size)
{
    char holder[160], small[6], back[160];
    uint64_t epoch = 0, e2 = 0;
    ftc_err_t err = {0};
    int rc = ftc_ctl_leader_parse(data, size, "leader", holder, sizeof holder, &epoch, &err);
    fuzz_check_err(rc, &err, "leader");
    if (rc)
        return;
    check_word(holder, sizeof holder, "holder");
    char cut[200], w0[512], w1[512];
    snprintf(cut, sizeof cut, "%.*s", (int)(size < 199 ? size : 199), data);
    FUZZ_CHECK(!strcmp(word(cut, 0, w0, sizeof w0), holder) &&
                   whole_number(word(cut, 1, w1, sizeof w1), false),
               "'%s': holder '%s' epoch %" PRIu64 " are not its words", cut, holder, epoch);
    /* a short buffer gets the holder cut, terminated */
    FUZZ_CHECK(ftc_ctl_leader_parse(data, size, "leader", small, sizeof small, &e2, &err) == 0 &&
                   e2 == epoch && strnlen(small, sizeof small) < sizeof small &&
                   !strncmp(small, holder, sizeof small - 1),
               "into %zu bytes: '%s' %" PRIu64, sizeof small, small, e2);
    /* as the lease script writes it */
    char again[200];
    snprintf(again, sizeof again, "%s %" PRIu64, holder, epoch);
    FUZZ_CHECK(ftc_ctl_leader_parse(again, strlen(again), "leader", back, sizeof back, &e2,
                                    &err) == 0,
               "'%s' does not parse: %s", again, err.msg);
    FUZZ_CHECK(!strcmp(back, holder) && e2 == epoch, "'%s' parses to '%s' %" PRIu64, again, back,
               e2);
}

static void committed(const char *data, size_t size)
{
    int64_t step = -5, s2;
    uint64_t gen = 0, g2;
    if (!ftc_ctl_committed_member_parse(data, size, &step, &gen))
        return;
    FUZZ_CHECK(step >= 0, "step %" PRId64, step);
    char again[48];
    snprintf(again, sizeof again, "%" PRId64 ":%" PRIu64, step, gen);
    FUZZ_CHECK(ftc_ctl_committed_member_parse(again, strlen(again), &s2, &g2) && s2 == step &&
                   g2 == gen,
               "'%s' does not parse back", again);
}

static void abort_marker(const char *data, size_t size)
{
    uint32_t rank = 0, r2 = 0;
    char why[FTC_CTL_ABORT_WHY_MAX + 1], w2[FTC_CTL_ABORT_WHY_MAX + 1];
    memset(why, 0, sizeof why);
    if (!ftc_ctl_abort_marker_parse(data, size, &rank, why, sizeof why))
        return;
    size_t wl = strnlen(why, sizeof why);
    FUZZ_CHECK(wl < sizeof why, "why not terminated");
    /* as the abort script writes it ("RANK why", the reason NUL-free) */
    char again[32 + sizeof why];
    int n = snprintf(again, sizeof again, "%" PRIu32 " %s", rank, why);
    FUZZ_CHECK(ftc_ctl_abort_marker_parse(again, (size_t)n, &r2, w2, sizeof w2) && r2 == rank &&
                   !strcmp(w2, why),
               "'%s' parses to %" PRIu32 " '%s'", again, r2, w2);
}

static void checksum(const char *data, size_t size)
{
    uint64_t x = 0, back = 0;
    if (!ftc_ctl_checksum_parse(data, size, &x))
        return;
    FUZZ_CHECK(size >= 1 && size <= 16, "%zu hex digits", size);
    char again[24];
    int n = snprintf(again, sizeof again, "%016" PRIx64, x);
    FUZZ_CHECK(ftc_ctl_checksum_parse(again, (size_t)n, &back) && back == x,
               "'%s' does not parse back", again);
}

/* A round's members or spares: ids as the rendezvous scripts join them. */
static void ids(const char *data, size_t size)
{
    char(*v)[FTC_RDZV_NODE_MAX + 1] = NULL, (*back)[FTC_RDZV_NODE_MAX + 1] = NULL;
    int n = -1, n2 = -1;
    ftc_err_t err = {0};
    int rc = ftc_rdzv_split_ids(data, size, &v, &n, "fuzz", &err);
    fuzz_check_err(rc, &err, "ids");
    if (rc) {
        free(v);
        return;
    }
    size_t cap = (size_t)n * (FTC_RDZV_NODE_MAX + 1) + 1, k = 0;
    char *again = malloc(cap);
    FUZZ_CHECK(n >= 0, "%d ids", n);
    for (int i = 0; again && i < n; i++) {
        size_t l = strnlen(v[i], sizeof v[i]);
        /* an id is one a node can join with: 1..FTC_RDZV_NODE_MAX of
         * [A-Za-z0-9._:/-], so no NUL (it would cut it short, or make it
         * empty) and no space */
        FUZZ_CHECK(l > 0 && l <= FTC_RDZV_NODE_MAX &&
                       strspn(v[i], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                    "0123456789._:/-") == l,
                   "id %d: '%s'", i, v[i]);
        k += (size_t)snprintf(again + k, cap - k, "%s%s", i ? " " : "", v[i]);
    }
    if (again) {
        FUZZ_CHECK(ftc_rdzv_split_ids(again, k, &back, &n2, "again", &err) == 0 && n2 == n &&
                       (!n || !memcmp(v, back, (size_t)n * sizeof *v)),
                   "'%.200s' parses to %d other ids", again, n2);
        free(again);
    }
    free(v);
    free(back);
}

static void event(const char *k, const char *v)
{
    ftc_status_event_t e;
    memset(&e, 0, sizeof e);
    ftc_status_event_field(&e, k, v);
    FUZZ_CHECK(memchr(e.kind, 0, sizeof e.kind) && memchr(e.node, 0, sizeof e.node) &&
                   memchr(e.detail, 0, sizeof e.detail),
               "an event's text field is not terminated");
    /* a number field holds the whole number in range, or its "unknown"
     * (status.h), never another number (atoi took "7x" for 7) */
    bool sign = strcmp(k, "t_detect_ms") != 0;
    bool whole = whole_number(v, sign);
    long long x = whole && sign ? strtoll(v, NULL, 10) : 0;
    unsigned long long u = whole && !sign ? strtoull(v, NULL, 10) : 0;
    if (!strcmp(k, "rank"))
        FUZZ_CHECK(e.rank == (whole && x >= -1 && x <= INT_MAX ? x : -1), "rank '%.40s' read as %d",
                   v, e.rank);
    else if (!strcmp(k, "gen"))
        FUZZ_CHECK(e.gen == (whole && x >= 0 ? x : -1), "gen '%.40s' read as %lld", v, e.gen);
    else if (!strcmp(k, "step"))
        FUZZ_CHECK(e.step == (whole && x >= -1 ? x : -1), "step '%.40s' read as %lld", v, e.step);
    else if (!strcmp(k, "t_detect_ms"))
        FUZZ_CHECK(e.t_detect_ms == u, "t_detect_ms '%.40s' read as %llu", v, e.t_detect_ms);
}

static void fabric(const char *field, const char *value)
{
    ftc__fabric_rec_t r, back;
    ftc_err_t err = {0};
    int rc = ftc__fabric_parse(field, value, &r, &err);
    fuzz_check_err(rc, &err, "fabric");
    if (rc)
        return;
    size_t hl = strnlen(r.hex, sizeof r.hex);
    FUZZ_CHECK(hl < sizeof r.hex && hl == 2 * r.addr_len && r.addr_len <= FTC_FABRIC_ADDR_MAX,
               "%zu hex digits, %zu address bytes", hl, r.addr_len);
    check_word(r.hex, sizeof r.hex, "address");
    check_word(r.node_id, sizeof r.node_id, "node id");
    if (r.domain[0])
        check_word(r.domain, sizeof r.domain, "domain");
    for (size_t i = 0; i < r.addr_len; i++) {
        char two[3];
        snprintf(two, sizeof two, "%02x", r.addr[i]);
        FUZZ_CHECK(!memcmp(two, r.hex + 2 * i, 2), "byte %zu is %s, hex '%.2s'", i, two,
                   r.hex + 2 * i);
    }
    char w[4][1024];
    for (int i = 0; i < 4; i++)
        word(value, i, w[i], sizeof w[i]);
    FUZZ_CHECK(whole_number(field, false), "field '%.40s' taken as node %lu", field, r.node);
    FUZZ_CHECK(!strcmp(w[0], r.hex) && !strcmp(w[1], r.node_id) &&
                   !strcmp(w[2], r.domain[0] ? r.domain : "-"),
               "'%.300s': fields '%s' '%s' '%s' are not its words", value, r.hex, r.node_id,
               r.domain);
    FUZZ_CHECK(r.has_gen == (w[3][0] != 0) && (!r.has_gen || whole_number(w[3], false)),
               "'%.300s': generation '%s' taken as %s%" PRIu64, value, w[3],
               r.has_gen ? "" : "none, ", r.gen);
    /* as ftc__publish_address writes it */
    char f[24], v[2 * FTC_FABRIC_ADDR_MAX + 200];
    snprintf(f, sizeof f, "%lu", r.node);
    int n = snprintf(v, sizeof v, "%s %s %s", r.hex, r.node_id, r.domain[0] ? r.domain : "-");
    if (r.has_gen)
        snprintf(v + n, sizeof v - (size_t)n, " %" PRIu64, r.gen);
    FUZZ_CHECK(ftc__fabric_parse(f, v, &back, &err) == 0, "'%s' '%s' does not parse: %s", f, v,
               err.msg);
    FUZZ_CHECK(!memcmp(&r, &back, sizeof r), "'%s' '%s' parses to other values", f, v);
}

static void plan(const char *text, uint32_t nm)
{
    uint32_t *m = NULL, *l = NULL, n = 0, *m2 = NULL, *l2 = NULL, n2 = 0;
    if (!ftc__plan_ranks_parse(text, nm, &m, &l, &n))
        return;
    for (uint32_t i = 0; i < n; i++)
        FUZZ_CHECK(m[i] < nm, "rank %u on member %u of %u", i, m[i], nm);
    /* each word is MEMBER:LOCAL, digits only (%u takes "-1" as 2^32-1) */
    uint32_t words = 0;
    for (const char *p = text; *p;) {
        size_t wl = strcspn(p, " ");
        if (wl) {
            char *wd = strndup(p, wl);
            if (!wd)
                break;
            char *colon = strchr(wd, ':');
            FUZZ_CHECK(colon, "'%.200s': word '%.100s'", text, wd);
            *colon = 0;
            FUZZ_CHECK(whole_number(wd, false) && whole_number(colon + 1, false) &&
                           strtoull(colon + 1, NULL, 10) <= UINT32_MAX,
                       "'%.200s': word %u is not MEMBER:LOCAL", text, words);
            free(wd);
            words++;
        }
        p += wl;
        p += *p == ' ';
    }
    FUZZ_CHECK(words == n, "'%.200s': %u words, %u ranks", text, words, n);
    /* as `ftc run` writes it */
    size_t cap = (size_t)n * 24 + 1, k = 0;
    char *again = malloc(cap);
    if (!again)
        goto out;
    again[0] = 0;
    for (uint32_t i = 0; i < n; i++)
        k += (size_t)snprintf(again + k, cap - k, "%s%u:%u", i ? " " : "", m[i], l[i]);
    FUZZ_CHECK(ftc__plan_ranks_parse(again, nm, &m2, &l2, &n2), "'%.200s' does not parse", again);
    FUZZ_CHECK(n2 == n && (!n || (!memcmp(m, m2, n * sizeof *m) && !memcmp(l, l2, n * sizeof *l))),
               "'%.200s' parses to other ranks", again);
    free(again);
out:
    free(m);
    free(l);
    free(m2);
    free(l2);
}

static void state(const char *line)
{
    ftc_inproc_state_t st, back;
    if (!ftc_inproc_state_parse(line, &st))
        return;
    FUZZ_CHECK(st.phase == FTC_INPROC_RUNNING || st.phase == FTC_INPROC_WAITING, "phase %d",
               (int)st.phase);
    const char *g = strstr(line, "gen=");
    char gw[64];
    FUZZ_CHECK(g && whole_number(word(g + 4, 0, gw, sizeof gw), false),
               "'%.300s': gen '%s' taken as %" PRIu64, line, g ? gw : "", st.gen);
    size_t wl = strnlen(st.why, sizeof st.why);
    FUZZ_CHECK(wl < sizeof st.why && !memchr(st.why, '\n', wl), "why: %zu bytes", wl);
    /* as ftc_inproc_state_write writes it */
    char again[512];
    snprintf(again, sizeof again, "pid=%d gen=%" PRIu64 " phase=%s why=%s\n", (int)st.pid, st.gen,
             st.phase == FTC_INPROC_WAITING ? "waiting" : "running", st.why);
    FUZZ_CHECK(ftc_inproc_state_parse(again, &back), "'%s' does not parse", again);
    FUZZ_CHECK(back.pid == st.pid && back.gen == st.gen && back.phase == st.phase &&
                   !strcmp(back.why, st.why),
               "'%s' parses to other values ('%s')", again, back.why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    member(text);
    leader((const char *)data, size);
    committed((const char *)data, size);
    abort_marker((const char *)data, size);
    checksum((const char *)data, size);
    ids((const char *)data, size);
    plan(text, 4);
    plan(text, UINT32_MAX);
    state(text);
    /* field and value: the first line and the rest */
    char *nl = strchr(text, '\n');
    const char *value = "";
    if (nl) {
        *nl = 0;
        value = nl + 1;
    }
    fabric(text, value);
    event(text, value);
    free(text);
    return 0;
}
