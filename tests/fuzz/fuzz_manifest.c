/*
 * fuzz_manifest.c — libFuzzer target for the persist tier's MANIFEST.json
 * validation (ftc__persist_manifest_check in ckpt/persist.c, the same parse
 * ftc_persist_load runs on every manifest it reads).
 *
 * Checked besides memory safety (ASan/UBSan, leaks):
 *   - the error contract: FTC_ECORRUPT, FTC_EVERSION or FTC_ENOMEM with a
 *     message, never anything else;
 *   - the verdict depends on the JSON value, not its spelling: the input
 *     re-serialised by jansson (compact, and indented with sorted keys) gets
 *     the same answer;
 *   - a manifest it accepts really has what the format requires (format,
 *     version 1, job, step, a non-empty "shards" array whose entries name
 *     "shard-d<D>-t<T>-p<P>.ftcz" after their own coordinates).
 */
#include "fuzz_common.h"

#include "ckpt/persist_internal.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check(const char *text, size_t len, const char *what)
{
    ftc_err_t err = {0};
    int rc = ftc__persist_manifest_check(text, len, &err);
    fuzz_check_err(rc, &err, what);
    FUZZ_CHECK(rc == 0 || rc == FTC_ECORRUPT || rc == FTC_EVERSION || rc == FTC_ENOMEM,
               "%s returned %s: %s", what, ftc_errname(rc), err.msg);
    return rc;
}

/* What an accepted manifest must hold, checked independently of persist.c. */
static void check_accepted(json_t *root)
{
    FUZZ_CHECK(json_is_object(root), "accepted a non-object");
    json_t *fmt = json_object_get(root, "format");
    FUZZ_CHECK(json_is_string(fmt) && !strcmp(json_string_value(fmt), "ftc-persist-manifest"),
               "accepted without the format string");
    FUZZ_CHECK(json_integer_value(json_object_get(root, "version")) == 1, "accepted version != 1");
    json_int_t step = json_integer_value(json_object_get(root, "step"));
    FUZZ_CHECK(json_is_integer(json_object_get(root, "step")) && step >= 0, "bad step accepted");
    json_t *arr = json_object_get(root, "shards");
    FUZZ_CHECK(json_is_array(arr) && json_array_size(arr) >= 1, "accepted without shards");
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s)
    {
        char want[96];
        snprintf(want, sizeof want, "shard-d%lld-t%lld-p%lld.ftcz",
                 (long long)json_integer_value(json_object_get(s, "dp_rank")),
                 (long long)json_integer_value(json_object_get(s, "tp_rank")),
                 (long long)json_integer_value(json_object_get(s, "pp_rank")));
        json_t *f = json_object_get(s, "file");
        FUZZ_CHECK(json_is_string(f) && !strcmp(json_string_value(f), want),
                   "shards[%zu]: file is not %s", i, want);
        json_t *b = json_object_get(s, "base_step");
        if (b && !json_is_null(b))
            FUZZ_CHECK(json_is_integer(b) && json_integer_value(b) >= 0 &&
                           json_integer_value(b) < step,
                       "shards[%zu]: base_step not before the step", i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int rc = check((const char *)data, size, "manifest_check");

    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        FUZZ_CHECK(rc != 0, "accepted what jansson cannot parse");
        return 0;
    }
    if (rc == 0)
        check_accepted(root);
    static const size_t styles[2] = {JSON_COMPACT, JSON_INDENT(2) | JSON_SORT_KEYS};
    for (int k = 0; k < 2; k++) {
        char *text = json_dumps(root, styles[k] | JSON_ENCODE_ANY);
        if (!text)
            continue;
        int rc2 = check(text, strlen(text), "manifest_check (re-serialised)");
        FUZZ_CHECK((rc == 0) == (rc2 == 0), "verdict changed by re-serialisation: %s vs %s",
                   ftc_errname(rc), ftc_errname(rc2));
        free(text);
    }
    json_decref(root);
    return 0;
}
