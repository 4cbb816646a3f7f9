/*
 * fuzz_config.c — libFuzzer target for the JSON config loader (core/config.c).
 *
 * Each input is loaded with ftc_config_load_json into a fresh config and into
 * one where a flag already set persist.level; then every key is read back and
 * the config printed. Checked besides memory safety (ASan/UBSan, leaks):
 *   - the error contract (FTC_ECONFIG or FTC_ENOMEM, with a message);
 *   - every INT and SIZE value lies in its key's range, whatever the input;
 *   - a value from a higher source is never replaced by one from the file;
 *   - a config that failed to load is still whole (readable and printable).
 * The input, cut at its first NUL, is also fed to ftc_parse_size and as the
 * text of one key of each type through ftc_config_set.
 */
#include "fuzz_common.h"

#include "core/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { T_STR, T_INT, T_SIZE, T_BOOL };
static const struct {
    int type;
    long long lo, hi;
} schema[FTC_CFG__COUNT] = {
#define FUZZ_CFG(id, name, type, def, lo, hi, doc) {T_##type, lo, hi},
    FTC_CONFIG_KEYS(FUZZ_CFG)
#undef FUZZ_CFG
};

static FILE *devnull;

/* Every key reads back in range; the config prints. */
static void check_whole(const ftc_config_t *cfg)
{
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        const char *name = ftc_config_name((ftc_config_key_t)k);
        int src = ftc_config_source(cfg, (ftc_config_key_t)k);
        FUZZ_CHECK(name && src >= FTC_SRC_DEFAULT && src <= FTC_SRC_FLAG, "key %d source %d", k,
                   src);
        if (schema[k].type == T_STR) {
            const char *s = ftc_config_str(cfg, (ftc_config_key_t)k);
            FUZZ_CHECK(s != NULL, "%s: NULL string", name);
            fuzz_touch(s, strlen(s));
        } else if (schema[k].type == T_BOOL) {
            int64_t b = ftc_config_int(cfg, (ftc_config_key_t)k);
            FUZZ_CHECK(b == 0 || b == 1, "%s: boolean holds %lld", name, (long long)b);
        } else {
            int64_t v = ftc_config_int(cfg, (ftc_config_key_t)k);
            FUZZ_CHECK(v >= schema[k].lo && v <= schema[k].hi, "%s = %lld outside [%lld, %lld]",
                       name, (long long)v, schema[k].lo, schema[k].hi);
        }
    }
    if (devnull)
        ftc_config_print(cfg, devnull, false);
}

static int load(ftc_config_t *cfg, const uint8_t *data, size_t size)
{
    ftc_err_t err = {0};
    int rc = ftc_config_load_json(cfg, (const char *)data, size, "fuzz.json", &err);
    fuzz_check_err(rc, &err, "ftc_config_load_json");
    FUZZ_CHECK(rc == 0 || rc == FTC_ECONFIG || rc == FTC_ENOMEM, "load returned %s: %s",
               ftc_errname(rc), err.msg);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!devnull)
        devnull = fopen("/dev/null", "w");

    /* 1: a fresh config */
    ftc_config_t *cfg = ftc_config_create();
    if (!cfg)
        return 0;
    load(cfg, data, size);
    check_whole(cfg);
    ftc_config_destroy(cfg);

    /* 2: flags win over the file, whatever the file holds */
    cfg = ftc_config_create();
    if (!cfg)
        return 0;
    ftc_err_t err = {0};
    FUZZ_CHECK(ftc_config_set(cfg, "persist.level", "7", FTC_SRC_FLAG, &err) == 0, "set: %s",
               err.msg);
    FUZZ_CHECK(ftc_config_set(cfg, "job.id", "flagged", FTC_SRC_ENV, &err) == 0, "set: %s",
               err.msg);
    load(cfg, data, size);
    FUZZ_CHECK(ftc_config_int(cfg, FTC_CFG_PERSIST_LEVEL) == 7 &&
                   ftc_config_source(cfg, FTC_CFG_PERSIST_LEVEL) == FTC_SRC_FLAG,
               "the file replaced a flag");
    FUZZ_CHECK(!strcmp(ftc_config_str(cfg, FTC_CFG_JOB_ID), "flagged") &&
                   ftc_config_source(cfg, FTC_CFG_JOB_ID) == FTC_SRC_ENV,
               "the file replaced an environment value");
    check_whole(cfg);

    /* 3: the input as text (up to its first NUL, at most 256 bytes) */
    size_t n = size;
    const uint8_t *nul = memchr(data, '\0', size);
    if (nul)
        n = (size_t)(nul - data);
    if (n > 256)
        n = 256;
    char text[257];
    memcpy(text, data, n);
    text[n] = '\0';
    int64_t bytes = -1;
    int rc = ftc_parse_size(text, &bytes);
    FUZZ_CHECK(rc == 0 || rc == FTC_EINVAL || rc == FTC_ERANGE, "parse_size returned %d", rc);
    FUZZ_CHECK(rc != 0 || bytes >= 0, "parse_size('%s') = %lld", text, (long long)bytes);
    static const char *const keys[] = {"persist.level", "persist.chunk_bytes", "persist.shuffle",
                                       "log.level"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        ftc_err_clear(&err);
        rc = ftc_config_set(cfg, keys[i], text, FTC_SRC_FLAG, &err);
        fuzz_check_err(rc, &err, "ftc_config_set");
    }
    check_whole(cfg);
    ftc_config_destroy(cfg);
    return 0;
}
