/* test_config.c — precedence (flag > env > file > default), typing, ranges,
 * unknown keys, bad JSON. */
#include "ftc_test.h"

#include "core/config.h"

static void test_defaults(void **state)
{
    (void)state;
    ftc_config_t *c = ftc_config_create();
    assert_non_null(c);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 1);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_CHUNK), 4 << 20);
    assert_true(ftc_config_bool(c, FTC_CFG_PERSIST_SHUFFLE));
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "ftc");
    assert_int_equal(ftc_config_source(c, FTC_CFG_PERSIST_LEVEL), FTC_SRC_DEFAULT);
    ftc_config_destroy(c);
    ftc_config_destroy(NULL);
}

static void test_precedence_any_order(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    const char *json = "{\"persist\": {\"level\": 5, \"keep\": 7, \"shuffle\": false},"
                       " \"job.id\": \"from-file\"}";
    char *envp[] = {"FTC_PERSIST_LEVEL=6", "FTC_JOB_ID=from-env", "OTHER=1", NULL};
    char *argv[] = {"ftc", "--persist-level", "9", "--persist-chunk-bytes=1MiB"};
    /* flags first, then env, then file: the higher source must still win */
    ftc_config_t *c = ftc_config_create();
    int i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 4, argv, &i, &err), 1);
    assert_int_equal(i, 3);
    assert_int_equal(ftc_config_parse_flag(c, 4, argv, &i, &err), 1);
    assert_int_equal(ftc_config_load_env(c, envp, &err), 0);
    assert_int_equal(ftc_config_load_json(c, json, strlen(json), "test.json", &err), 0);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 9);
    assert_int_equal(ftc_config_source(c, FTC_CFG_PERSIST_LEVEL), FTC_SRC_FLAG);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_CHUNK), 1 << 20);
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "from-env");
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_KEEP), 7);
    assert_false(ftc_config_bool(c, FTC_CFG_PERSIST_SHUFFLE));
    assert_int_equal(ftc_config_source(c, FTC_CFG_PERSIST_KEEP), FTC_SRC_FILE);
    ftc_config_destroy(c);
}

/* A bare boolean flag means true and leaves a next argument that is not a
 * boolean alone (`ftc run --persist-delta train.py`); one that spells a
 * boolean is its value. */
static void test_bare_boolean(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *c = ftc_config_create();
    char *argv[] = {"ftc", "--persist-delta", "false", "--persist-shuffle", "bit",
                    "--persist-delta", "train.py", "--persist-shuffle", "--persist-level", "4"};
    int i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 10, argv, &i, &err), 1);
    assert_int_equal(i, 3); /* took "false" */
    assert_false(ftc_config_bool(c, FTC_CFG_PERSIST_DELTA));
    assert_int_equal(ftc_config_parse_flag(c, 10, argv, &i, &err), 1);
    assert_int_equal(i, 5); /* took the filter name */
    assert_string_equal(ftc_config_str(c, FTC_CFG_PERSIST_SHUFFLE), "bit");
    assert_int_equal(ftc_config_parse_flag(c, 10, argv, &i, &err), 1);
    assert_int_equal(i, 6); /* bare: "train.py" is left for the caller */
    assert_string_equal(argv[i], "train.py");
    assert_true(ftc_config_bool(c, FTC_CFG_PERSIST_DELTA));
    i = 7;
    assert_int_equal(ftc_config_parse_flag(c, 10, argv, &i, &err), 1);
    assert_int_equal(i, 8); /* bare before another flag */
    assert_string_equal(ftc_config_str(c, FTC_CFG_PERSIST_SHUFFLE), "byte");
    assert_int_equal(ftc_config_parse_flag(c, 10, argv, &i, &err), 1);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 4);
    char *last[] = {"ftc", "--persist-delta"};
    i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 2, last, &i, &err), 1);
    assert_int_equal(i, 2);
    char *bad[] = {"ftc", "--persist-delta=maybe"};
    i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 2, bad, &i, &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.delta"));
    ftc_config_destroy(c);
}

static void test_errors_name_the_key(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *c = ftc_config_create();
    const char *unknown = "{\"persist\": {\"levle\": 3}}";
    assert_int_equal(ftc_config_load_json(c, unknown, strlen(unknown), "a.json", &err),
                     FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.levle"));
    const char *range = "{\"persist.level\": 99}";
    assert_int_equal(ftc_config_load_json(c, range, strlen(range), "b.json", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "out of range"));
    const char *type = "{\"persist.keep\": \"many\"}";
    assert_int_equal(ftc_config_load_json(c, type, strlen(type), "c.json", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.keep"));
    const char *syntax = "{\"persist\": {\"level\": 3,}";
    assert_int_equal(ftc_config_load_json(c, syntax, strlen(syntax), "d.json", &err),
                     FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "d.json:1:"));
    const char *arr = "[1,2]";
    assert_int_equal(ftc_config_load_json(c, arr, strlen(arr), "e.json", &err), FTC_ECONFIG);
    const char *dup = "{\"fault\": \"\", \"fault\": \"x\"}";
    assert_int_equal(ftc_config_load_json(c, dup, strlen(dup), "f.json", &err), FTC_ECONFIG);
    char *envp[] = {"FTC_PERSIST_SHUFFLE=maybe", NULL};
    assert_int_equal(ftc_config_load_env(c, envp, &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "FTC_PERSIST_SHUFFLE"));
    char *argv[] = {"ftc", "--persist-level"};
    int i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 2, argv, &i, &err), FTC_ECONFIG);
    char *argv2[] = {"ftc", "--not-a-config-flag"};
    i = 1;
    assert_int_equal(ftc_config_parse_flag(c, 2, argv2, &i, &err), 0);
    assert_int_equal(ftc_config_load_file(c, "/nonexistent/ftc.json", &err), FTC_ENOENT);
    ftc_config_destroy(c);
}

/* job.id names files, shm slots and Redis keys: one that ftc_ctl_create and
 * the rendezvous refuse was taken, and `ftc run --job a/b` failed late (exit 1,
 * "cannot create the job directory /tmp/ftc-a/b") or in the node, after it had
 * started the job's Redis; now it is an error naming the key and source */
static void test_job_id_checked(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *c = ftc_config_create();
    const char *bad[] = {"a/b", "", "a b", "x:y", "job{1}",
                         "a234567890123456789012345678901234567890123456789012345678901234"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ftc_config_set(c, "job.id", bad[i], FTC_SRC_FLAG, &err), FTC_ECONFIG);
        assert_non_null(strstr(err.msg, "job.id"));
        assert_non_null(strstr(err.msg, "1..63 characters"));
    }
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "ftc");
    char *envp[] = {"FTC_JOB_ID=my job", NULL};
    assert_int_equal(ftc_config_load_env(c, envp, &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "FTC_JOB_ID"));
    assert_non_null(strstr(err.msg, "'my job'"));
    const char *ok = "a23456789012345678901234567890123456789012345678901234567890123";
    assert_int_equal(ftc_config_set(c, "job.id", ok, FTC_SRC_FLAG, &err), 0);
    assert_int_equal(ftc_config_set(c, "job.id", "run-7.b_x", FTC_SRC_FLAG, &err), 0);
    ftc_config_destroy(c);
}

static void test_sizes(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(ftc_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(ftc_parse_size("4MiB", &v), 0);
    assert_int_equal(v, 4 << 20);
    assert_int_equal(ftc_parse_size("1G", &v), 0);
    assert_int_equal(v, 1 << 30);
    assert_int_equal(ftc_parse_size("1Q", &v), FTC_EINVAL);
    assert_int_equal(ftc_parse_size("", &v), FTC_EINVAL);
    assert_int_equal(ftc_parse_size("-1", &v), FTC_EINVAL);
    assert_int_equal(ftc_parse_size("99999999999T", &v), FTC_ERANGE);
}

static void test_ints(void **state)
{
    (void)state;
    int64_t v = 42;
    assert_int_equal(ftc_parse_int("29500", 1, 65535, &v), 0);
    assert_int_equal(v, 29500);
    assert_int_equal(ftc_parse_int("0", 0, 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(ftc_parse_int("-7", -10, 10, &v), 0);
    assert_int_equal(v, -7);
    assert_int_equal(ftc_parse_int("+7", 0, 10, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(ftc_parse_int("9223372036854775807", 0, INT64_MAX, &v), 0);
    assert_true(v == INT64_MAX);
    /* garbage: not silently 0 or the leading digits, and *out untouched */
    v = 42;
    const char *bad[] = {"", "12abc", "abc", " 3", "3 ", "0x10", "-", "+", "1e3", "3.0", "1,000",
                         "--1", "5\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ftc_parse_int(bad[i], INT64_MIN, INT64_MAX, &v) != FTC_EINVAL)
            fail_msg("'%s' was not refused FTC_EINVAL", bad[i]);
        assert_int_equal(v, 42);
    }
    assert_int_equal(ftc_parse_int(NULL, 0, 1, &v), FTC_EINVAL);
    /* out of range, negative where it cannot be, past int64 */
    assert_int_equal(ftc_parse_int("-1", 0, 65535, &v), FTC_ERANGE);
    assert_int_equal(ftc_parse_int("65536", 1, 65535, &v), FTC_ERANGE);
    assert_int_equal(ftc_parse_int("0", 1, 65535, &v), FTC_ERANGE);
    assert_int_equal(ftc_parse_int("99999999999999999999", 0, INT64_MAX, &v), FTC_ERANGE);
    assert_int_equal(ftc_parse_int("-99999999999999999999", INT64_MIN, 0, &v), FTC_ERANGE);
    assert_int_equal(v, 42);
}

/* INT and SIZE keys, in every spelling, parse as strictly as ftc_parse_int:
 * strtoll skipped leading blanks, so FTC_PERSIST_LEVEL=" 3" (a quoting slip
 * in a launcher script) was level 3, and sizes took a sign. */
static void test_int_keys_strict(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *c = ftc_config_create();
    assert_non_null(c);
    const char *bad[] = {" 3", "\t3", "\n3", "3 ", "3\n", "0x3", "3.0", "", "+", "- 3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (ftc_config_set(c, "persist.level", bad[i], FTC_SRC_FLAG, &err) != FTC_ECONFIG)
            fail_msg("flag persist.level '%s' was not refused", bad[i]);
        assert_non_null(strstr(err.msg, "persist.level"));
        char env[64];
        snprintf(env, sizeof env, "FTC_PERSIST_LEVEL=%s", bad[i]);
        char *envp[] = {env, NULL};
        if (ftc_config_load_env(c, envp, &err) != FTC_ECONFIG)
            fail_msg("FTC_PERSIST_LEVEL='%s' was not refused", bad[i]);
        assert_non_null(strstr(err.msg, "FTC_PERSIST_LEVEL"));
        char js[64] = "{\"persist.level\": \"";
        for (const char *p = bad[i]; *p; p++) /* JSON escapes of the blanks */
            strcat(js, *p == '\t' ? "\\t" : *p == '\n' ? "\\n" : (char[2]){*p, 0});
        strcat(js, "\"}");
        if (ftc_config_load_json(c, js, strlen(js), "g.json", &err) != FTC_ECONFIG)
            fail_msg("file %s was not refused", js);
    }
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 1); /* the default, untouched */
    /* what the docs promise still parses: a sign, digits, a JSON integer */
    assert_int_equal(ftc_config_set(c, "persist.level", "-3", FTC_SRC_FILE, &err), 0);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), -3);
    assert_int_equal(ftc_config_set(c, "persist.level", "+4", FTC_SRC_ENV, &err), 0);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 4);
    const char *js = "{\"persist.level\": 5}";
    ftc_config_t *c2 = ftc_config_create();
    assert_int_equal(ftc_config_load_json(c2, js, strlen(js), "h.json", &err), 0);
    assert_int_equal(ftc_config_int(c2, FTC_CFG_PERSIST_LEVEL), 5);
    /* past int64: out of range, naming the range */
    assert_int_equal(ftc_config_set(c2, "persist.level", "99999999999999999999", FTC_SRC_FLAG,
                                    &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "out of range"));
    /* sizes: digits first too; the units the docs list still work */
    const char *bad_size[] = {" 4MiB", "+4MiB", "\t4096", "4MiB ", "4 MiB"};
    for (size_t i = 0; i < sizeof bad_size / sizeof bad_size[0]; i++)
        if (ftc_config_set(c2, "persist.chunk_bytes", bad_size[i], FTC_SRC_FLAG, &err) !=
            FTC_ECONFIG)
            fail_msg("persist.chunk_bytes '%s' was not refused", bad_size[i]);
    int64_t v = 0;
    assert_int_equal(ftc_parse_size(" 4096", &v), FTC_EINVAL);
    assert_int_equal(ftc_config_set(c2, "persist.chunk_bytes", "64KiB", FTC_SRC_FLAG, &err), 0);
    assert_int_equal(ftc_config_int(c2, FTC_CFG_PERSIST_CHUNK), 64 << 10);
    assert_int_equal(ftc_config_set(c2, "persist.chunk_bytes", "1m", FTC_SRC_FLAG, &err), 0);
    assert_int_equal(ftc_config_int(c2, FTC_CFG_PERSIST_CHUNK), 1 << 20);
    ftc_config_destroy(c2);
    ftc_config_destroy(c);
}

static void test_file_and_print(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("config");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ftc.json", dir);
    const char *json = "{\"persist\": {\"dir\": \"/data/ckpt\", \"delta\": true}}";
    ftc_test_write_file(path, json, strlen(json));
    ftc_config_t *c = ftc_config_create();
    ftc_err_t err = {0};
    assert_int_equal(ftc_config_load_file(c, path, &err), 0);
    assert_string_equal(ftc_config_str(c, FTC_CFG_PERSIST_DIR), "/data/ckpt");
    FILE *out = tmpfile();
    ftc_config_print(c, out, false);
    ftc_config_print(c, out, true);
    fclose(out);
    ftc_config_destroy(c);
    ftc_test_rmrf(dir);
    free(dir);
}

/* One key given twice in one file (flat and nested spelling) is an error, not
 * "the last one wins"; so is an object that names no group of keys. */
static void test_file_key_twice(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *c = ftc_config_create();
    const char *twice = "{\"persist.level\": 3, \"persist\": {\"level\": 5}}";
    assert_int_equal(ftc_config_load_json(c, twice, strlen(twice), "t.json", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.level"));
    assert_non_null(strstr(err.msg, "t.json"));
    const char *twice2 = "{\"persist\": {\"level\": 5}, \"persist\": {\"keep\": 2}}";
    assert_int_equal(ftc_config_load_json(c, twice2, strlen(twice2), "u.json", &err),
                     FTC_ECONFIG);
    const char *empty = "{\"persit\": {}}";
    assert_int_equal(ftc_config_load_json(c, empty, strlen(empty), "v.json", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persit"));
    /* a boolean for a text key is a mistake (a directory named "true"); an
     * integer is fine there (redundancy 2, a numeric job id) */
    const char *bdir = "{\"persist\": {\"dir\": true}}";
    assert_int_equal(ftc_config_load_json(c, bdir, strlen(bdir), "w.json", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.dir"));
    ftc_config_t *c4 = ftc_config_create();
    const char *nums = "{\"redundancy\": 2, \"job\": {\"id\": 7}, \"persist\": {\"delta\": 0}}";
    assert_int_equal(ftc_config_load_json(c4, nums, strlen(nums), "x.json", &err), 0);
    assert_string_equal(ftc_config_str(c4, FTC_CFG_REDUNDANCY), "2");
    assert_string_equal(ftc_config_str(c4, FTC_CFG_JOB_ID), "7");
    assert_false(ftc_config_bool(c4, FTC_CFG_PERSIST_DELTA));
    ftc_config_destroy(c4);
    /* ftc_config_set with a source that is none, or no value: an error, and
     * the config (its print) is unharmed */
    ftc_config_t *c3 = ftc_config_create();
    assert_int_equal(ftc_config_set(c3, "persist.level", "4", 7, &err), FTC_EINVAL);
    assert_int_equal(ftc_config_set(c3, "persist.level", "4", -1, &err), FTC_EINVAL);
    assert_int_equal(ftc_config_set(c3, "persist.level", NULL, FTC_SRC_FLAG, &err), FTC_EINVAL);
    assert_int_equal(ftc_config_source(c3, FTC_CFG_PERSIST_LEVEL), FTC_SRC_DEFAULT);
    FILE *out = tmpfile();
    ftc_config_print(c3, out, false);
    fclose(out);
    ftc_config_destroy(c3);
    /* the same key in two files: the later file wins (both are "file") */
    const char *a = "{\"persist\": {\"level\": 5}}", *b = "{\"persist.level\": 7}";
    ftc_config_t *c2 = ftc_config_create();
    assert_int_equal(ftc_config_load_json(c2, a, strlen(a), "a.json", &err), 0);
    assert_int_equal(ftc_config_load_json(c2, b, strlen(b), "b.json", &err), 0);
    assert_int_equal(ftc_config_int(c2, FTC_CFG_PERSIST_LEVEL), 7);
    ftc_config_destroy(c2);
    ftc_config_destroy(c);
}

/* Loading a file is all or nothing: a file whose third key is bad leaves
 * every key (value and source) as the previous config had it, and the error
 * names the bad key. */
static void test_file_all_or_nothing(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    char *dir = ftc_test_tmpdir("config_aon");
    char good[PATH_MAX], bad[PATH_MAX];
    snprintf(good, sizeof good, "%s/good.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    const char *g = "{\"persist\": {\"level\": 5, \"dir\": \"/data/a\", \"shuffle\": \"bit\"},"
                    " \"job.id\": \"first\"}";
    /* two good keys (a string and an int, changing values the first set),
     * then a bad third */
    const char *b = "{\"job\": {\"id\": \"second\"}, \"persist.level\": 2,"
                    " \"persist.shuffle\": \"zstd\", \"persist.keep\": 4}";
    ftc_test_write_file(good, g, strlen(g));
    ftc_test_write_file(bad, b, strlen(b));
    ftc_config_t *c = ftc_config_create(), *want = ftc_config_create();
    assert_int_equal(ftc_config_load_file(c, good, &err), 0);
    assert_int_equal(ftc_config_load_file(want, good, &err), 0);
    assert_int_equal(ftc_config_load_file(c, bad, &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.shuffle"));
    assert_non_null(strstr(err.msg, "bad.json"));
    for (int k = 0; k < FTC_CFG__COUNT; k++) {
        ftc_config_key_t key = (ftc_config_key_t)k;
        assert_string_equal(ftc_config_str(c, key), ftc_config_str(want, key));
        assert_int_equal(ftc_config_int(c, key), ftc_config_int(want, key));
        assert_int_equal(ftc_config_source(c, key), ftc_config_source(want, key));
    }
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "first");
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 5);
    /* the same from a string, and a good file still applies afterwards */
    assert_int_equal(ftc_config_load_json(c, b, strlen(b), "s.json", &err), FTC_ECONFIG);
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "first");
    const char *ok = "{\"persist.keep\": 4, \"job.id\": \"third\"}";
    assert_int_equal(ftc_config_load_json(c, ok, strlen(ok), "ok.json", &err), 0);
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_KEEP), 4);
    assert_string_equal(ftc_config_str(c, FTC_CFG_JOB_ID), "third");
    assert_int_equal(ftc_config_int(c, FTC_CFG_PERSIST_LEVEL), 5);
    ftc_config_destroy(want);
    ftc_config_destroy(c);
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_precedence_any_order),
        cmocka_unit_test(test_errors_name_the_key), cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_file_and_print), cmocka_unit_test(test_bare_boolean),
        cmocka_unit_test(test_file_key_twice), cmocka_unit_test(test_file_all_or_nothing),
        cmocka_unit_test(test_ints), cmocka_unit_test(test_int_keys_strict),
        cmocka_unit_test(test_job_id_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
