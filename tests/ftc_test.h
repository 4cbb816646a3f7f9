/*
 * ftc_test.h — helpers shared by the cmocka tests: temp directories under the
 * build tree (FTC_TEST_TMP), recursive removal, file helpers, and building
 * small shards. Header-only so each test stays one self-contained process.
 */
#ifndef FTC_TEST_H
#define FTC_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/shard.h"

/* FTC_TEST_FILTER=glob runs only the matching tests of a test program
 * (cmocka_set_test_filter: `*` and `?`), e.g.
 * FTC_TEST_FILTER='test_restart_*' build/tests/ckpt/test_ckpt_agent. */
__attribute__((constructor)) static void ftc_test_filter_from_env(void)
{
    const char *f = getenv("FTC_TEST_FILTER");
    if (f && *f)
        cmocka_set_test_filter(f);
}

/* A fresh directory for one test; the caller frees the string and removes it
 * with ftc_test_rmrf. */
static inline char *ftc_test_tmpdir(const char *tag)
{
    const char *base = getenv("FTC_TEST_TMP");
    char path[PATH_MAX];
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0700);
    snprintf(path, sizeof path, "%s/%s-XXXXXX", base, tag);
    char *d = mkdtemp(path);
    assert_non_null(d);
    return strdup(d);
}

static inline void ftc_test_rmrf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                    continue;
                char sub[PATH_MAX];
                snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
                ftc_test_rmrf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void ftc_test_write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Fills buf with deterministic pseudo-random bytes. */
static inline void ftc_test_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

static inline ftc_shard_info_t ftc_test_info(uint64_t step, uint32_t dp_rank)
{
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "test-job");
    in.step = step;
    in.generation = 1;
    in.dp = 4, in.tp = 1, in.pp = 1;
    in.dp_rank = dp_rank;
    return in;
}

/* Builds a sealed shard with a few tensors of mixed dtypes filled from seed.
 * Returns a malloc'd region; *size gets its size. */
static inline uint8_t *ftc_test_make_shard(uint64_t step, uint32_t dp_rank, uint64_t scale,
                                           uint64_t seed, uint64_t *size)
{
    ftc_shard_info_t in = ftc_test_info(step, dp_rank);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    assert_non_null(l);
    ftc_err_t err = {0};
    uint64_t s1[2] = {scale, 16}, s2[1] = {scale * 3 + 1}, s3[3] = {2, 3, 5};
    assert_true(ftc_shard_layout_add_tensor(l, "w.fp32", FTC_DTYPE_F32, 2, s1, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "w.bf16", FTC_DTYPE_BF16, 1, s2, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "counts.i64", FTC_DTYPE_I64, 3, s3, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "scalar", FTC_DTYPE_F32, 0, NULL, &err) >= 0);
    uint64_t cursor = step * 1000;
    assert_int_equal(ftc_shard_layout_add_meta(l, "data.cursor", &cursor, 8, &err), 0);
    *size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, *size); /* zeroed: the payload is filled after a first seal */
    assert_non_null(r);
    assert_int_equal(ftc_shard_layout_write(l, r, *size, &err), 0);
    /* fill the tensors through a view of the (unsealed) head */
    ftc_shard_seal(r, *size, 1, &err);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, *size, 0, &err), 0);
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        ftc_test_fill((uint8_t *)t.data, t.length, seed + i);
    }
    assert_int_equal(ftc_shard_seal(r, *size, 2, &err), 0);
    ftc_shard_layout_destroy(l);
    return r;
}

/* In a forked rank process (no cmocka there): report a failed check with
 * the pid and location and _exit(1); the parent's waitpid sees it. */
#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank pid %d: %s:%d: check failed: %s\n", (int)getpid(), __FILE__,    \
                    __LINE__, #cond);                                                              \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#endif
