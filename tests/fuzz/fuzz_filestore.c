/*
 * fuzz_filestore.c — libFuzzer target for the records the file store of
 * another node (or this node's previous process) wrote, parsed by the pure
 * functions of plugins/filestore_internal.h: a version's record "VERSION
 * SIZE GEN HOLDERS" (ftc__fs_rec_parse), its holder list "INDEX:ID,..."
 * (ftc__fs_holder_next), a node index field (ftc__fs_index_parse), a peer's
 * address "HEXADDR NODE_ID" (ftc__fs_filefab_parse) and a version's
 * tombstones, the binary records ftc.gone (of an older ftc) and ftc.gone.v2
 * (ftc__fs_gone_parse), the tombstone cap (ftc__fs_gone_bound), and the
 * names of the store's own temporaries that a scan removes once their
 * process ended (ftc__fs_tmp_leftover: exactly ".ftc-tmp.[gone.]PID.N").
 *
 * The length-taking parsers get the whole input, NULs included; the others
 * the input cut at its first NUL. Checked besides memory safety (ASan/UBSan,
 * leaks):
 *   - each number is a whole decimal number in range (not "12x" taken as
 *     12, nor "-1" as 2^64-1) and each word a whole word, not cut;
 *   - the holder list: an entry is taken exactly when it is INDEX:ID with
 *     INDEX all digits below FTC__FS_MAX_NODES and ID 1..FTC_CTL_NODE_MAX
 *     bytes; the walk ends;
 *   - the round trip through each writer's format (fs_record, fs_publish,
 *     gone_record): what parses, written back, parses to the same values;
 *     for ftc.gone.v2 a record that parses is exactly the one gone_record
 *     writes for its set (sorted, each name once), byte for byte; one of
 *     ftc.gone invents no deletion time (its mtime), hash nor size.
 */
#include "fuzz_common.h"

#include "plugins/filestore_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* s[0..n) is a whole unsigned decimal number (digits only) below max. */
static bool whole_below(const char *s, size_t n, uint64_t max)
{
    if (n == 0) return false; /* leading zeros allowed: the overflow check bounds the value */
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    return x < max || max == UINT64_MAX;
}

static void index_field(const char *data, size_t size)
{
    uint32_t idx = UINT32_MAX;
    bool ok = ftc__fs_index_parse(data, size, &idx);
    /* what fs_publish and fs_record write: "%u", a few digits */
    bool want = size <= 7 && whole_below(data, size, FTC__FS_MAX_NODES);
    FUZZ_CHECK(ok == want, "'%.*s': %s", (int)(size < 40 ? size : 40), data,
               ok ? "taken" : "refused");
    if (!ok) return;
    char again[16];
    int n = snprintf(again, sizeof again, "%u", idx);
    uint32_t back = UINT32_MAX;
    FUZZ_CHECK(ftc__fs_index_parse(again, (size_t)n, &back) && back == idx, "%u", idx);
}

/* Walks a holder list, checking each entry against the rule; returns the
 * valid entries joined back as fs_acked_holders writes them. */
static char *holders(const char *list, int *valid)
{
    size_t cap = strlen(list) + 2, k = 0;
    char *again = malloc(cap);
    FUZZ_CHECK(again, "out of memory");
    again[0] = 0;
    *valid = 0;
    const char *p = list;
    for (int steps = 0;; steps++) {
        FUZZ_CHECK(steps <= (int)strlen(list) + 1, "the walk of '%.200s' does not end", list);
        const char *before = p;
        uint32_t idx = UINT32_MAX;
        char id[FTC_CTL_NODE_MAX + 1];
        memset(id, 'X', sizeof id);
        int hr = ftc__fs_holder_next(&p, &idx, id, sizeof id);
        FUZZ_CHECK(hr >= -1 && hr <= 1, "returned %d", hr);
        if (hr == 0) {
            FUZZ_CHECK(!*p && strspn(before, ",") == strlen(before), "'%.200s' ends early", list);
            break;
        }
        FUZZ_CHECK(p > before, "no progress at '%.100s'", before);
        /* the entry: from the first non-comma to the next comma */
        const char *b = before + strspn(before, ",");
        size_t el = strcspn(b, ",");
        FUZZ_CHECK(p == b + el, "'%.100s': stops after %td bytes", b, p - b);
        const char *colon = memchr(b, ':', el);
        size_t il = colon ? el - (size_t)(colon - b) - 1 : 0;
        bool want = colon && (size_t)(colon - b) <= 7 &&
                    whole_below(b, (size_t)(colon - b), FTC__FS_MAX_NODES) && il >= 1 &&
                    il <= FTC_CTL_NODE_MAX;
        FUZZ_CHECK((hr == 1) == want, "entry '%.*s' %s", (int)el, b, hr == 1 ? "taken" : "refused");
        if (hr != 1) continue;
        FUZZ_CHECK(idx < FTC__FS_MAX_NODES && strlen(id) == il && !memcmp(id, colon + 1, il),
                   "entry '%.*s' read as %u '%s'", (int)el, b, idx, id);
        k += (size_t)snprintf(again + k, cap - k, "%s%u:%s", *valid ? "," : "", idx, id);
        FUZZ_CHECK(k < cap, "the list written back is longer");
        (*valid)++;
    }
    return again;
}

static void holder_list(const char *list)
{
    int valid = 0, v2 = 0;
    char *again = holders(list, &valid);
    char *twice = holders(again, &v2);
    FUZZ_CHECK(v2 == valid && !strcmp(again, twice), "'%.200s' parses to other holders", again);
    free(again);
    free(twice);
}

static void rec(const char *data, size_t size)
{
    uint64_t v = 0, s = 0, g = 0, v2, s2, g2;
    char *h = NULL, *h2 = NULL;
    int rc = ftc__fs_rec_parse(data, size, &v, &s, &g, &h);
    FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2, "returned %d", rc);
    if (rc) {
        FUZZ_CHECK(!h, "holders set on failure");
        return;
    }
    FUZZ_CHECK(h && !memchr(data, 0, size), "a NUL in the record");
    for (const char *c = h; *c; c++)
        FUZZ_CHECK(!isspace((unsigned char)*c), "holders '%.200s' hold white space", h);
    /* the words of the record: three whole numbers, then the holders, no more */
    char *text = strndup(data, size), *save = NULL;
    FUZZ_CHECK(text, "out of memory");
    const char *w[5] = {NULL};
    int nw = 0;
    for (char *t = strtok_r(text, " \t\n\v\f\r", &save); t;
         t = strtok_r(NULL, " \t\n\v\f\r", &save))
        if (nw < 5)
            w[nw++] = t;
        else
            nw++;
    FUZZ_CHECK(nw == 3 || nw == 4, "'%.200s': %d words", text, nw);
    uint64_t *num[3] = {&v, &s, &g};
    for (int i = 0; i < 3; i++) {
        FUZZ_CHECK(whole_below(w[i], strlen(w[i]), UINT64_MAX), "word %d '%s' taken as %" PRIu64, i,
                   w[i], *num[i]);
        errno = 0;
        FUZZ_CHECK(strtoull(w[i], NULL, 10) == *num[i] && !errno, "word %d '%s' read as %" PRIu64,
                   i, w[i], *num[i]);
    }
    FUZZ_CHECK(!strcmp(nw == 4 ? w[3] : "", h), "holders '%s', word '%s'", h, nw == 4 ? w[3] : "");
    free(text);
    /* as fs_record writes it */
    size_t cap = strlen(h) + 80;
    char *again = malloc(cap);
    FUZZ_CHECK(again, "out of memory");
    int n = snprintf(again, cap, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %s", v, s, g, h);
    FUZZ_CHECK(ftc__fs_rec_parse(again, (size_t)n, &v2, &s2, &g2, &h2) == 0 && v2 == v && s2 == s &&
                   g2 == g && !strcmp(h2, h),
               "'%.200s' parses to other values", again);
    holder_list(h);
    free(again);
    free(h);
    free(h2);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void filefab(const char *v)
{
    char hex[2 * FTC_FABRIC_ADDR_MAX + 1], id[FTC_CTL_NODE_MAX + 1], hex2[sizeof hex],
        id2[sizeof id];
    uint8_t addr[FTC_FABRIC_ADDR_MAX], addr2[FTC_FABRIC_ADDR_MAX];
    size_t len = 0, len2 = 0;
    if (!ftc__fs_filefab_parse(v, hex, sizeof hex, addr, &len, id, sizeof id)) return;
    size_t hl = strnlen(hex, sizeof hex), il = strnlen(id, sizeof id);
    FUZZ_CHECK(hl < sizeof hex && hl > 0 && hl == 2 * len && len <= FTC_FABRIC_ADDR_MAX,
               "%zu hex digits, %zu bytes", hl, len);
    FUZZ_CHECK(il > 0 && il <= FTC_CTL_NODE_MAX, "node id of %zu bytes", il);
    for (size_t i = 0; i < len; i++)
        FUZZ_CHECK(hexval(hex[2 * i]) >= 0 && hexval(hex[2 * i + 1]) >= 0 &&
                       addr[i] == (uint8_t)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1])),
                   "byte %zu", i);
    /* exactly two words of v, whole */
    char *text = strdup(v), *save = NULL;
    FUZZ_CHECK(text, "out of memory");
    char *w0 = strtok_r(text, " \t\n\v\f\r", &save), *w1 = strtok_r(NULL, " \t\n\v\f\r", &save),
         *w2 = strtok_r(NULL, " \t\n\v\f\r", &save);
    FUZZ_CHECK(w0 && w1 && !w2 && !strcmp(w0, hex) && !strcmp(w1, id),
               "'%.300s': read as '%s' '%s'", v, hex, id);
    free(text);
    char again[sizeof hex + sizeof id + 2];
    snprintf(again, sizeof again, "%s %s", hex, id);
    FUZZ_CHECK(ftc__fs_filefab_parse(again, hex2, sizeof hex2, addr2, &len2, id2, sizeof id2) &&
                   !strcmp(hex2, hex) && !strcmp(id2, id) && len2 == len &&
                   !memcmp(addr2, addr, len),
               "'%s' parses to other values", again);
}

/* A name taken for a leftover temporary is exactly ".ftc-tmp." ["gone."]
 * PID "." N, PID 1..INT_MAX and N 0..UINT32_MAX without leading zeros. */
static void tmp_leftover(const char *v)
{
    int pid = 0;
    if (!ftc__fs_tmp_leftover(v, &pid)) return;
    FUZZ_CHECK(pid > 0 && !strncmp(v, ".ftc-tmp.", 9), "'%.100s': pid %d", v, pid);
    const char *p = v + 9;
    if (!strncmp(p, "gone.", 5)) p += 5;
    char head[24];
    int hl = snprintf(head, sizeof head, "%d.", pid);
    FUZZ_CHECK(!strncmp(p, head, (size_t)hl), "'%.100s' taken for pid %d", v, pid);
    p += hl;
    FUZZ_CHECK(whole_below(p, strlen(p), (uint64_t)UINT32_MAX + 1) && (p[0] != '0' || !p[1]),
               "'%.100s': its counter '%.40s'", v, p);
}

static void gone(const uint8_t *data, size_t size, int form)
{
    if (size > UINT32_MAX) return;
    ftc__fs_stamps_t s, back;
    memset(&s, 0, sizeof s);
    memset(&back, 0, sizeof back);
    char why[200] = "", why2[200] = "";
    int rc = ftc__fs_gone_parse(data, (uint32_t)size, form, &s, why, sizeof why);
    FUZZ_CHECK(rc == 0 || rc == FTC_ENOMEM || rc == FTC_ECORRUPT, "returned %d", rc);
    if (rc) {
        FUZZ_CHECK(s.n == 0, "%zu entries kept of a record refused", s.n);
        FUZZ_CHECK(rc != FTC_ECORRUPT || why[0], "refused without a why");
        ftc__fs_stamps_free(&s);
        return;
    }
    for (size_t i = 0; i < s.n; i++) {
        size_t l = strlen(s.e[i].name);
        FUZZ_CHECK(l > 0 && s.e[i].name[0] != '/', "entry %zu '%.100s'", i, s.e[i].name);
        FUZZ_CHECK(!i || strcmp(s.e[i - 1].name, s.e[i].name) < 0,
                   "entries %zu and %zu: '%.100s' "
                   "'%.100s' out of order",
                   i - 1, i, s.e[i - 1].name, s.e[i].name);
        FUZZ_CHECK(form == FTC__FS_GONE_V2 ||
                       (s.e[i].gone_ns == s.e[i].mtime_ns && !s.e[i].hashed &&
                        !s.e[i].sized),
                   "entry %zu of the old form: deletion time or hash invented", i);
    }
    /* what gone_record writes for the set (form 2) is the record itself */
    size_t len = 0;
    uint8_t *again = ftc__fs_gone_record(&s, &len);
    FUZZ_CHECK(again, "out of memory");
    FUZZ_CHECK(form != FTC__FS_GONE_V2 || (len == size && (!size || !memcmp(again, data, size))),
               "the set of %zu entries is written back as %zu bytes, not the %zu read", s.n, len,
               size);
    /* (a record of form 1 written as form 2 may pass the byte cap) */
    rc = ftc__fs_gone_parse(again, (uint32_t)len, FTC__FS_GONE_V2, &back, why2, sizeof why2);
    FUZZ_CHECK(rc == 0 || len > size, "written back, refused: %s", why2);
    FUZZ_CHECK(back.n == s.n || rc, "%zu entries, then %zu", s.n, back.n);
    for (size_t i = 0; i < back.n; i++)
        FUZZ_CHECK(!strcmp(back.e[i].name, s.e[i].name) && back.e[i].mtime_ns == s.e[i].mtime_ns &&
                       back.e[i].gone_ns == s.e[i].gone_ns && back.e[i].hashed == s.e[i].hashed &&
                       back.e[i].sized == s.e[i].sized && !(s.e[i].sized && s.e[i].hashed) &&
                       back.e[i].size == s.e[i].size && back.e[i].xxh3 == s.e[i].xxh3,
                   "entry %zu", i);
    /* the cap keeps a subset, sorted, each name once */
    size_t n0 = s.n, dropped = ftc__fs_gone_bound(&s, s.n / 2, size);
    FUZZ_CHECK(dropped + s.n == n0, "%zu kept and %zu dropped of %zu", s.n, dropped, n0);
    for (size_t i = 1; i < s.n; i++)
        FUZZ_CHECK(strcmp(s.e[i - 1].name, s.e[i].name) < 0, "bounded set out of order at %zu", i);
    free(again);
    ftc__fs_stamps_free(&s);
    ftc__fs_stamps_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    index_field((const char *)data, size);
    rec((const char *)data, size);
    holder_list(text);
    filefab(text);
    tmp_leftover(text);
    gone(data, size, FTC__FS_GONE_V1);
    gone(data, size, FTC__FS_GONE_V2);
    free(text);
    return 0;
}
