/* test_persist.c — the persist tier: full and delta versions round trip,
 * several shards per version, retention with delta chains, fallback when a
 * marker, manifest or shard is bad, list states, hostile manifests, options,
 * dropping the versions newer than a restored step, a version that cannot
 * be read now kept, a corrupt (or cut short, or grown) committed one written
 * again, a FIFO in a version not waited for, a linked version removed as the
 * link, a delta base gone from the disk, a stray file named like a version. */
#include "ftc_test.h"

#include "ckpt/persist.h"
#include "ckpt/persist_internal.h"
#include "trainer/synth.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define NSH 3

/* NSH synthetic ranks; versions are snapshots of them. */
typedef struct world {
    ftc_synth_t *s[NSH];
} world_t;

static void world_init(world_t *w, uint64_t bytes)
{
    ftc_err_t err = {0};
    for (int i = 0; i < NSH; i++) {
        ftc_synth_options_t o = FTC_SYNTH_OPTIONS_INIT;
        o.bytes = bytes;
        o.seed = 100 + (uint64_t)i;
        o.dtype = i == 1 ? FTC_DTYPE_BF16 : FTC_DTYPE_F32;
        ftc_shard_info_t in = ftc_test_info(0, (uint32_t)i);
        w->s[i] = ftc_synth_create(&o, &in, &err);
        assert_non_null(w->s[i]);
    }
}

static void world_free(world_t *w)
{
    for (int i = 0; i < NSH; i++)
        ftc_synth_destroy(w->s[i]);
}

/* Advances every rank to step and writes the version; returns 0 or the error
 * of the write. copies (NSH entries) get malloc'd copies when not NULL. */
static int world_write(world_t *w, ftc_persist_t *p, uint64_t step, uint8_t **copies)
{
    ftc_err_t err = {0};
    const void *sh[NSH];
    uint64_t sz[NSH];
    for (int i = 0; i < NSH; i++) {
        assert_int_equal(ftc_synth_step(w->s[i], step, &err), 0);
        sh[i] = ftc_synth_region(w->s[i]);
        sz[i] = ftc_synth_size(w->s[i]);
        if (copies) {
            copies[i] = malloc(sz[i]);
            memcpy(copies[i], sh[i], sz[i]);
        }
    }
    return ftc_persist_write(p, step, sh, sz, NSH);
}

static void check_loaded(const ftc_persist_loaded_t *l, uint64_t step, uint8_t *const *copies,
                         world_t *w)
{
    assert_int_equal(l->step, step);
    assert_int_equal(l->n_shards, NSH);
    for (int i = 0; i < NSH; i++) {
        assert_int_equal(l->sizes[i], ftc_synth_size(w->s[i]));
        assert_memory_equal(l->shards[i], copies[i], l->sizes[i]);
    }
}

static void free_copies(uint8_t **c)
{
    for (int i = 0; i < NSH; i++)
        free(c[i]);
}

static bool version_exists(const char *dir, uint64_t step)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/v%020llu", dir, (unsigned long long)step);
    return stat(path, &st) == 0;
}

static void vfile(char *path, size_t n, const char *dir, uint64_t step, const char *name)
{
    snprintf(path, n, "%s/v%020llu/%s", dir, (unsigned long long)step, name);
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (off < 0) {
        fseek(f, 0, SEEK_END);
        off = ftell(f) + off;
    }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

/* Opens the persist tier in dir (to write) with options o. */
static ftc_persist_t *open_tier(const char *dir, const ftc_persist_options_t *o)
{
    ftc_err_t err = {0};
    ftc_persist_t *p = ftc_persist_open(dir, o, &err);
    assert_non_null(p);
    return p;
}

/* Loads `which` (a step or FTC_PERSIST_NEWEST), which must succeed, and
 * checks that it is version step with the shards copies of world w; its
 * fallbacks. */
static int load_check(ftc_persist_t *p, uint64_t which, uint64_t step, uint8_t *const *copies,
                      world_t *w)
{
    ftc_persist_loaded_t *l;
    int rc = ftc_persist_load(p, which, &l);
    if (rc && which == FTC_PERSIST_NEWEST)
        fail_msg("load newest: %s", ftc_persist_errstr(p));
    if (rc)
        fail_msg("load %llu: %s", (unsigned long long)which, ftc_persist_errstr(p));
    check_loaded(l, step, copies, w);
    int fallbacks = l->fallbacks;
    ftc_persist_loaded_free(l);
    return fallbacks;
}

/* The end of a test: its world, its handle and its directory. */
static void finish(world_t *w, ftc_persist_t *p, char *dir)
{
    world_free(w);
    ftc_persist_close(p);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_roundtrip_full_and_delta(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-rt");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 4096;
    o.threads = 2;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 64u << 10);
    uint8_t *c1[NSH], *c2[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0);
    ftc_persist_stats_t st;
    ftc_persist_last_stats(p, &st);
    assert_false(st.delta);
    assert_true(st.raw_bytes > 3 * (60u << 10));
    assert_true(st.file_bytes > 0);
    assert_int_equal(world_write(&w, p, 2, c2), 0);
    ftc_persist_last_stats(p, &st);
    assert_true(st.delta);

    ftc_persist_loaded_t *l;
    assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
    check_loaded(l, 2, c2, &w);
    assert_int_equal(l->fallbacks, 0);
    assert_int_equal(l->generation, 1);
    ftc_persist_loaded_free(l);
    load_check(p, 1, 1, c1, &w);
    assert_int_equal(ftc_persist_load(p, 77, &l), FTC_ENOENT);
    assert_null(l);
    assert_int_equal(ftc_persist_verify(p, 2), 0);

    ftc_persist_version_t *v;
    int n;
    assert_int_equal(ftc_persist_list(p, &v, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].step, 2);
    assert_int_equal(v[0].state, FTC_PV_COMMITTED);
    assert_int_equal(v[0].n_shards, NSH);
    assert_int_equal(v[0].base_step, 1);
    assert_int_equal(v[1].base_step, UINT64_MAX);
    assert_true(v[0].raw_bytes > v[0].file_bytes / 2);
    free(v);

    /* a fresh handle (no delta memory) reads the same and writes a full version */
    ftc_persist_close(p);
    p = open_tier(dir, &o);
    load_check(p, FTC_PERSIST_NEWEST, 2, c2, &w);
    uint8_t *c3[NSH];
    assert_int_equal(world_write(&w, p, 3, c3), 0);
    ftc_persist_last_stats(p, &st);
    assert_false(st.delta);
    load_check(p, 3, 3, c3, &w);

    /* a committed step is never overwritten */
    const void *sh[1] = {c3[0]};
    uint64_t sz[1] = {ftc_synth_size(w.s[0])};
    assert_int_equal(ftc_persist_write(p, 3, sh, sz, 1), FTC_EEXIST);
    /* wrong step, duplicate coordinates */
    assert_int_equal(ftc_persist_write(p, 4, sh, sz, 1), FTC_EINVAL);
    assert_non_null(strstr(ftc_persist_errstr(p), "step"));

    free_copies(c1);
    free_copies(c2);
    free_copies(c3);
    finish(&w, p, dir);
}

/* make_shard-built shards (tiny tensors, a 0-d scalar) with each filter
 * (byte, none, bit, and `true` as old callers wrote it), level 3, no delta,
 * plus duplicate coordinates refused. */
static void test_options_variants(void **state)
{
    (void)state;
    for (int variant = 0; variant < 4; variant++) {
        char *dir = ftc_test_tmpdir("persist-var");
        ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
        o.chunk_bytes = variant == 0 ? 4096 : variant == 1 ? 5000 : (1u << 20);
        o.shuffle = variant == 3 ? true : variant == 1 ? FTC_ZSHARD_FILTER_NONE
                                    : variant == 2 ? FTC_ZSHARD_FILTER_BIT
                                                   : FTC_ZSHARD_FILTER_BYTE;
        o.level = variant == 2 ? 3 : 1;
        o.delta = variant != 2;
        o.threads = variant % 3;
        ftc_persist_t *p = open_tier(dir, &o);
        for (uint64_t step = 1; step <= 3; step++) {
            uint64_t s0, s1;
            uint8_t *a = ftc_test_make_shard(step, 0, 200, step, &s0);
            uint8_t *b = ftc_test_make_shard(step, 1, 3, step + 50, &s1);
            const void *sh[2] = {a, b};
            uint64_t sz[2] = {s0, s1};
            assert_int_equal(ftc_persist_write(p, step, sh, sz, 2), 0);
            ftc_persist_stats_t st;
            ftc_persist_last_stats(p, &st);
            assert_int_equal(st.delta, o.delta && step > 1);
            ftc_persist_loaded_t *l;
            assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
            assert_int_equal(l->n_shards, 2);
            assert_memory_equal(l->shards[0], a, s0);
            assert_memory_equal(l->shards[1], b, s1);
            ftc_persist_loaded_free(l);
            sh[1] = a;
            sz[1] = s0;
            assert_int_equal(ftc_persist_write(p, step + 100, sh, sz, 2), FTC_EINVAL);
            free(a);
            free(b);
        }
        ftc_persist_close(p);
        ftc_test_rmrf(dir);
        free(dir);
    }
}

/* full_every 4, keep 3: ten versions; the newest three and the chain back to
 * their full base remain, and each loads byte-identical. */
static void test_retention_and_chains(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-ret");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.full_every = 4;
    o.keep = 3;
    o.chunk_bytes = 16384;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    uint8_t *copies[11][NSH];
    bool was_delta[11];
    for (uint64_t s = 1; s <= 10; s++) {
        assert_int_equal(world_write(&w, p, s, copies[s]), 0);
        ftc_persist_stats_t st;
        ftc_persist_last_stats(p, &st);
        was_delta[s] = st.delta;
    }
    /* full at 1, 5, 9; deltas in between */
    for (uint64_t s = 1; s <= 10; s++)
        assert_int_equal(was_delta[s], !(s == 1 || s == 5 || s == 9));
    /* kept: 8, 9, 10 and the chain of 8 (7, 6, 5); gone: 1..4 */
    for (uint64_t s = 1; s <= 10; s++)
        assert_int_equal(version_exists(dir, s), s >= 5);
    for (uint64_t s = 5; s <= 10; s++)
        load_check(p, s, s, copies[s], &w);
    /* keep 1 after another write (a delta on 10): 11 and its chain 10, 9 */
    ftc_persist_close(p);
    o.keep = 1;
    p = open_tier(dir, &o);
    uint8_t *c11[NSH];
    assert_int_equal(world_write(&w, p, 11, c11), 0); /* fresh handle: full */
    for (uint64_t s = 1; s <= 10; s++)
        assert_false(version_exists(dir, s));
    load_check(p, FTC_PERSIST_NEWEST, 11, c11, &w);
    free_copies(c11);
    for (int s = 1; s <= 10; s++)
        free_copies(copies[s]);
    finish(&w, p, dir);
}

/* A reader that loads the newest version races another writer (another
 * node's agent on a shared persist directory) whose retention removes what
 * the reader's scan found: step 2 commits and keep = 1 removes step 1
 * between the scan and the load. The load used to fail ("no version
 * verifies") with step 2 there; it scans again and returns step 2. */
typedef struct race {
    world_t *w;
    ftc_persist_t *writer;
    uint8_t *copies[NSH];
    int calls;
} race_t;

static void race_write_between(void *arg)
{
    race_t *r = arg;
    if (r->calls++ == 0)
        assert_int_equal(world_write(r->w, r->writer, 2, r->copies), 0);
}

static void test_newest_rescans_after_retention(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-race");
    ftc_err_t err = {0};
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.keep = 1;
    o.full_every = 1;
    ftc_persist_t *writer = ftc_persist_open(dir, &o, &err);
    ftc_persist_t *reader = ftc_persist_open(dir, &o, &err);
    assert_non_null(writer);
    assert_non_null(reader);
    world_t w;
    world_init(&w, 16u << 10);
    assert_int_equal(world_write(&w, writer, 1, NULL), 0);
    race_t r = {.w = &w, .writer = writer};
    ftc__persist_scan_hook_arg = &r;
    ftc__persist_scan_hook = race_write_between;
    ftc_persist_loaded_t *l = NULL;
    int rc = ftc_persist_load(reader, FTC_PERSIST_NEWEST, &l);
    ftc__persist_scan_hook = NULL;
    assert_int_equal(r.calls, 1);
    assert_false(version_exists(dir, 1)); /* removed under the reader */
    if (rc)
        fail_msg("load newest: %s", ftc_persist_errstr(reader));
    check_loaded(l, 2, r.copies, &w);
    ftc_persist_loaded_free(l);
    free_copies(r.copies);
    world_free(&w);
    ftc_persist_close(reader);
    ftc_persist_close(writer);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ftc_persist_drop_newer: a restore to step 2 abandons 3 and 4 (committed or
 * not); those steps can then be written again, the handle's next write is not
 * a delta on a dropped version, and everything loads. */
static void test_drop_newer(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-drop");
    ftc_err_t err = {0};
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 16384;
    o.keep = 10; /* no retention here */
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    uint8_t *copies[6][NSH];
    for (uint64_t s = 1; s <= 4; s++)
        assert_int_equal(world_write(&w, p, s, copies[s]), 0);
    /* a committed version is never overwritten */
    uint8_t *again[NSH];
    assert_int_equal(world_write(&w, p, 3, again), FTC_EEXIST);
    free_copies(again);
    char mk[PATH_MAX];
    vfile(mk, sizeof mk, dir, 4, "COMMITTED");
    assert_int_equal(unlink(mk), 0); /* and one not committed */
    int dropped = -1;
    assert_int_equal(ftc_persist_drop_newer(p, 2, &dropped), 0);
    assert_int_equal(dropped, 2);
    for (uint64_t s = 1; s <= 4; s++)
        assert_int_equal(version_exists(dir, s), s <= 2);
    free_copies(copies[3]), free_copies(copies[4]);
    for (uint64_t s = 3; s <= 5; s++) { /* written again, then one more */
        assert_int_equal(world_write(&w, p, s, copies[s]), 0);
        if (s == 3) {
            ftc_persist_stats_t st;
            ftc_persist_last_stats(p, &st);
            assert_false(st.delta); /* its previous write (4) is gone */
        }
    }
    for (uint64_t s = 1; s <= 5; s++)
        load_check(p, s, s, copies[s], &w);
    assert_int_equal(ftc_persist_drop_newer(p, 5, &dropped), 0);
    assert_int_equal(dropped, 0);
    ftc_persist_t *r = ftc_persist_open_reader(dir, &err);
    assert_non_null(r);
    assert_int_equal(ftc_persist_drop_newer(r, 0, NULL), FTC_EINVAL);
    assert_true(version_exists(dir, 1));
    ftc_persist_close(r);
    for (int s = 1; s <= 5; s++)
        free_copies(copies[s]);
    finish(&w, p, dir);
}

/* A committed version that is corrupt (a shard fails its checksum) can be
 * written again: no reader can use it, and a job that went back past it
 * (it did not load) writes that step anew. It used to fail with "already
 * committed" every time, until the job passed that step. A good committed
 * version is still never overwritten. */
static void test_corrupt_committed_rewritten(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-rewrite");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.keep = 10;
    o.chunk_bytes = 16384;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    uint8_t *c1[NSH], *c2[NSH], *again[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0);
    assert_int_equal(world_write(&w, p, 2, c2), 0);
    assert_int_equal(world_write(&w, p, 2, NULL), FTC_EEXIST); /* good: kept */
    char shard[PATH_MAX];
    vfile(shard, sizeof shard, dir, 2, "shard-d0-t0-p0.ftcz");
    flip_byte(shard, -100);
    ftc_persist_loaded_t *l;
    assert_int_not_equal(ftc_persist_load(p, 2, &l), 0);
    int rc = world_write(&w, p, 2, again);
    if (rc)
        fail_msg("write of step 2 over a corrupt v2: %s", ftc_persist_errstr(p));
    load_check(p, 2, 2, again, &w);
    load_check(p, 1, 1, c1, &w);
    /* a shard file cut short (a lost tail) or grown (garbage appended) is as
     * broken as a flipped byte: the step is written again, not refused as
     * "already committed" (the load fails with FTC_ETRUNC / FTC_ERANGE) */
    for (int k = 0; k < 2; k++) {
        vfile(shard, sizeof shard, dir, 2, "shard-d1-t0-p0.ftcz");
        struct stat st;
        assert_int_equal(stat(shard, &st), 0);
        if (k == 0) {
            assert_int_equal(truncate(shard, st.st_size / 2), 0);
        } else {
            FILE *f = fopen(shard, "ab");
            assert_non_null(f);
            fputs("garbage", f);
            fclose(f);
        }
        assert_int_not_equal(ftc_persist_load(p, 2, &l), 0);
        free_copies(again);
        rc = world_write(&w, p, 2, again);
        if (rc)
            fail_msg("write of step 2 over a %s v2: %s", k ? "grown" : "truncated",
                     ftc_persist_errstr(p));
        load_check(p, 2, 2, again, &w);
    }
    free_copies(c1);
    free_copies(c2);
    free_copies(again);
    finish(&w, p, dir);
}

/* A name in a version directory that is a FIFO (no writer) is no file: a
 * load, a list or a write next to it used to block forever opening it for
 * reading. The version is not usable (the load falls back); nothing waits.
 * alarm: a hang fails the test, never blocks it. */
static void test_fifo_not_waited_for(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-fifo");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 16384;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    uint8_t *c1[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0);
    assert_int_equal(world_write(&w, p, 2, NULL), 0);
    assert_int_equal(world_write(&w, p, 3, NULL), 0);
    const char *names[2] = {"shard-d1-t0-p0.ftcz", "COMMITTED"};
    for (int k = 0; k < 2; k++) { /* v3's shard, then v2's marker */
        char path[PATH_MAX];
        vfile(path, sizeof path, dir, 3 - (uint64_t)k, names[k]);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mkfifo(path, 0600), 0);
    }
    alarm(120);
    assert_int_equal(load_check(p, FTC_PERSIST_NEWEST, 1, c1, &w), 2);
    assert_int_not_equal(ftc_persist_verify(p, 3), 0);
    assert_non_null(strstr(ftc_persist_errstr(p), "not a regular file"));
    ftc_persist_version_t *vs;
    int n;
    assert_int_equal(ftc_persist_list(p, &vs, &n), 0);
    assert_int_equal(n, 3);
    free(vs);
    assert_int_equal(world_write(&w, p, 4, NULL), 0); /* its retention reads them too */
    alarm(0);
    free_copies(c1);
    finish(&w, p, dir);
}

/* Counts the plain files in dir. */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A version name that is a symbolic link (a version kept elsewhere and
 * linked in): retention and drop_newer remove the link, never the files it
 * points to. They used to unlink COMMITTED and every file through the link,
 * emptying a directory outside the persist directory. */
static void test_linked_version_removed_not_followed(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-link");
    char *ext = ftc_test_tmpdir("persist-link-ext");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 16384;
    o.keep = 1;
    o.delta = false;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    char vd[PATH_MAX], away[PATH_MAX];
    /* v1 moved out and linked back in; retention after v2 removes v1 */
    assert_int_equal(world_write(&w, p, 1, NULL), 0);
    vfile(vd, sizeof vd, dir, 1, "");
    vd[strlen(vd) - 1] = '\0';
    snprintf(away, sizeof away, "%s/v1", ext);
    assert_int_equal(rename(vd, away), 0);
    assert_int_equal(symlink(away, vd), 0);
    assert_int_equal(world_write(&w, p, 2, NULL), 0);
    struct stat st;
    if (count_files(away) != NSH + 2) /* what the link pointed to is intact */
        fail_msg("retention deleted %d of the %d files of %s, through the link %s",
                 NSH + 2 - count_files(away), NSH + 2, away, vd);
    assert_int_not_equal(lstat(vd, &st), 0); /* the link is gone */
    /* v3 linked in the same way; drop_newer(2) drops it */
    assert_int_equal(world_write(&w, p, 3, NULL), 0);
    vfile(vd, sizeof vd, dir, 3, "");
    vd[strlen(vd) - 1] = '\0';
    snprintf(away, sizeof away, "%s/v3", ext);
    assert_int_equal(rename(vd, away), 0);
    assert_int_equal(symlink(away, vd), 0);
    int dropped = 0;
    if (ftc_persist_drop_newer(p, 2, &dropped))
        fail_msg("drop: %s", ftc_persist_errstr(p));
    assert_int_equal(dropped, 1);
    if (count_files(away) != NSH + 2)
        fail_msg("drop_newer deleted %d of the %d files of %s, through the link %s",
                 NSH + 2 - count_files(away), NSH + 2, away, vd);
    assert_int_not_equal(lstat(vd, &st), 0);
    world_free(&w);
    ftc_persist_close(p);
    ftc_test_rmrf(dir);
    ftc_test_rmrf(ext);
    free(dir);
    free(ext);
}

/* A version that exists but cannot be read right now (here its MANIFEST.json
 * is a directory: open succeeds, the read fails; the same path as EIO,
 * ENOMEM or EMFILE) may be committed and the base of others. A write of the
 * same step used to take it for a leftover and delete it, and retention took
 * it for not committed and removed its delta base: neither may happen. */
static void test_unreadable_version_kept(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-unread");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.full_every = 100;
    o.keep = 1;
    o.chunk_bytes = 16384;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 32u << 10);
    uint8_t *c1[NSH], *c2[NSH], *c3[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0); /* full */
    assert_int_equal(world_write(&w, p, 2, c2), 0); /* delta on 1 */
    char man[PATH_MAX], saved[PATH_MAX];
    vfile(man, sizeof man, dir, 2, "MANIFEST.json");
    vfile(saved, sizeof saved, dir, 2, "MANIFEST.saved");
    assert_int_equal(rename(man, saved), 0);
    assert_int_equal(mkdir(man, 0700), 0);
    /* the same step again: refused, v2 untouched */
    int rc = world_write(&w, p, 2, NULL);
    print_message("write of step 2 over an unreadable v2: %s\n", ftc_persist_errstr(p));
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(ftc_persist_errstr(p), "not overwritten"));
    char mk[PATH_MAX];
    vfile(mk, sizeof mk, dir, 2, "COMMITTED");
    struct stat st;
    assert_int_equal(stat(mk, &st), 0);
    /* a newer version (a delta on 2): retention must not remove 1, the base of 2 */
    assert_int_equal(world_write(&w, p, 3, c3), 0);
    assert_true(version_exists(dir, 1));
    assert_true(version_exists(dir, 2));
    /* the manifest readable again: 3 -> 2 -> 1 loads, and so does 2 */
    assert_int_equal(rmdir(man), 0);
    assert_int_equal(rename(saved, man), 0);
    load_check(p, 3, 3, c3, &w);
    load_check(p, 2, 2, c2, &w);
    free_copies(c1);
    free_copies(c2);
    free_copies(c3);
    finish(&w, p, dir);
}

/* A job that went back to an older step (its newer versions do not load, or
 * it was restored to --step) writes below them: retention keeps the version
 * just written. It used to keep only the newest persist.keep by step, so
 * with keep 1 the new version was removed the moment it was committed and
 * a restore found only the old one. */
static void test_retention_rollback(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-back");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.keep = 1;
    o.chunk_bytes = 4096;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 16u << 10);
    uint8_t *c10[NSH], *c20[NSH], *c15[NSH];
    assert_int_equal(world_write(&w, p, 10, c10), 0);
    assert_int_equal(world_write(&w, p, 20, c20), 0); /* a delta on 10: both kept */
    ftc_persist_close(p);
    char path[PATH_MAX];
    vfile(path, sizeof path, dir, 20, "shard-d1-t0-p0.ftcz");
    flip_byte(path, 300);
    p = open_tier(dir, &o);
    ftc_persist_loaded_t *l;
    load_check(p, FTC_PERSIST_NEWEST, 10, c10, &w);
    /* the job goes on from 10 and persists 15 */
    world_t w2;
    world_init(&w2, 16u << 10);
    assert_int_equal(world_write(&w2, p, 15, c15), 0);
    assert_true(version_exists(dir, 15));
    assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
    check_loaded(l, 15, c15, &w2);
    assert_int_equal(l->fallbacks, 1); /* the bad 20 */
    ftc_persist_loaded_free(l);
    /* and once it passes 20 the usual rule applies again: 25 (a delta on
     * 15) and its base are kept, 20 and 10 go */
    uint8_t *c25[NSH];
    assert_int_equal(world_write(&w2, p, 25, c25), 0);
    assert_true(version_exists(dir, 15));
    assert_false(version_exists(dir, 10));
    assert_false(version_exists(dir, 20));
    assert_true(version_exists(dir, 25));
    free_copies(c10);
    free_copies(c20);
    free_copies(c15);
    free_copies(c25);
    world_free(&w);
    world_free(&w2);
    ftc_persist_close(p);
    ftc_test_rmrf(dir);
    free(dir);
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("half a file", f);
    fclose(f);
}

/* Opening a directory to write removes the temp files of writers that died,
 * not those of a writer still at work (another process's handle there): it
 * used to remove every one, and that writer's rename then failed. */
static void test_live_temps(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-live");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 4096;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 16u << 10);
    uint8_t *c1[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0);
    ftc_persist_close(p);
    fflush(NULL);
    pid_t writer = fork(); /* a writer at work: alive until killed */
    assert_true(writer >= 0);
    if (writer == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        pause();
        _exit(0);
    }
    char v2[PATH_MAX], t1[PATH_MAX + 64], t2[PATH_MAX + 64], t3[PATH_MAX + 64];
    snprintf(v2, sizeof v2, "%s/v%020d", dir, 2);
    assert_int_equal(mkdir(v2, 0700), 0);
    snprintf(t1, sizeof t1, "%s/.shard-d0-t0-p0.ftcz.tmp.%d", v2, (int)writer);
    snprintf(t2, sizeof t2, "%s/.x.tmp.%d", dir, (int)writer);
    snprintf(t3, sizeof t3, "%s/.shard-d1-t0-p0.ftcz.tmp.999999999", v2); /* no such pid */
    touch(t1);
    touch(t2);
    touch(t3);
    p = open_tier(dir, &o);
    struct stat st;
    assert_int_equal(stat(t1, &st), 0);
    assert_int_equal(stat(t2, &st), 0);
    assert_int_not_equal(stat(t3, &st), 0); /* a dead writer's: removed */
    ftc_persist_close(p);
    kill(writer, SIGKILL);
    assert_int_equal(waitpid(writer, NULL, 0), writer);
    p = open_tier(dir, &o);
    assert_int_not_equal(stat(t1, &st), 0); /* its writer died: stale now */
    assert_int_not_equal(stat(t2, &st), 0);
    ftc_persist_close(p);
    free_copies(c1);
    world_free(&w);
    ftc_test_rmrf(dir);
    free(dir);
}

/* One bad thing in the newest version: load takes the previous one with
 * fallbacks == 1. */
static void test_fallback(void **state)
{
    (void)state;
    const char *cases[] = {"manifest-flip", "manifest-missing", "marker-missing", "marker-garbage",
                           "shard-flip",    "shard-missing",    "shard-truncated"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *dir = ftc_test_tmpdir("persist-fb");
        ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
        o.delta = false;
        ftc_persist_t *p = open_tier(dir, &o);
        world_t w;
        world_init(&w, 16u << 10);
        uint8_t *c1[NSH], *c2[NSH];
        assert_int_equal(world_write(&w, p, 1, c1), 0);
        assert_int_equal(world_write(&w, p, 2, c2), 0);
        char path[PATH_MAX];
        const char *what = cases[c];
        if (!strcmp(what, "manifest-flip")) {
            vfile(path, sizeof path, dir, 2, "MANIFEST.json");
            flip_byte(path, 40);
        } else if (!strcmp(what, "manifest-missing")) {
            vfile(path, sizeof path, dir, 2, "MANIFEST.json");
            assert_int_equal(unlink(path), 0);
        } else if (!strcmp(what, "marker-missing")) {
            vfile(path, sizeof path, dir, 2, "COMMITTED");
            assert_int_equal(unlink(path), 0);
        } else if (!strcmp(what, "marker-garbage")) {
            vfile(path, sizeof path, dir, 2, "COMMITTED");
            flip_byte(path, -3);
        } else if (!strcmp(what, "shard-flip")) {
            vfile(path, sizeof path, dir, 2, "shard-d1-t0-p0.ftcz");
            flip_byte(path, 300);
        } else if (!strcmp(what, "shard-missing")) {
            vfile(path, sizeof path, dir, 2, "shard-d2-t0-p0.ftcz");
            assert_int_equal(unlink(path), 0);
        } else {
            vfile(path, sizeof path, dir, 2, "shard-d0-t0-p0.ftcz");
            assert_int_equal(truncate(path, 100), 0);
        }
        int fallbacks = load_check(p, FTC_PERSIST_NEWEST, 1, c1, &w);
        /* no marker: an unfinished (or crashed) write, no version at all */
        bool unfinished = !strcmp(what, "marker-missing");
        assert_int_equal(fallbacks, unfinished ? 0 : 1);
        ftc_persist_loaded_t *l;
        /* asking for the bad version by step is an error naming it */
        assert_true(ftc_persist_load(p, 2, &l) < 0);
        assert_non_null(strstr(ftc_persist_errstr(p), "v00000000000000000002"));
        assert_true(ftc_persist_verify(p, 2) < 0);
        assert_int_equal(ftc_persist_verify(p, 1), 0);

        ftc_persist_version_t *v;
        int n;
        assert_int_equal(ftc_persist_list(p, &v, &n), 0);
        assert_int_equal(n, 2);
        if (!strcmp(what, "marker-missing"))
            assert_int_equal(v[0].state, FTC_PV_INCOMPLETE);
        else if (!strncmp(what, "manifest", 8) || !strcmp(what, "marker-garbage"))
            assert_int_equal(v[0].state, FTC_PV_BAD_MARKER);
        else
            assert_int_equal(v[0].state, FTC_PV_COMMITTED); /* the cheap check passes */
        assert_int_equal(v[1].state, FTC_PV_COMMITTED);
        free(v);

        /* then the older one breaks too: ENOENT listing both */
        vfile(path, sizeof path, dir, 1, "MANIFEST.json");
        assert_int_equal(unlink(path), 0);
        assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), FTC_ENOENT);
        assert_non_null(strstr(ftc_persist_errstr(p), "v00000000000000000001"));
        if (!unfinished)
            assert_non_null(strstr(ftc_persist_errstr(p), "v00000000000000000002"));
        free_copies(c1);
        free_copies(c2);
        finish(&w, p, dir);
    }
}

/* A broken delta base makes its deltas unloadable: load falls back past
 * them to an older full version. */
static void test_broken_base(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-base");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.full_every = 3;
    o.keep = 10;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 16u << 10);
    uint8_t *c[6][NSH];
    for (uint64_t s = 1; s <= 5; s++) /* full 1, delta 2, 3; full 4, delta 5 */
        assert_int_equal(world_write(&w, p, s, c[s]), 0);
    char path[PATH_MAX];
    vfile(path, sizeof path, dir, 4, "shard-d0-t0-p0.ftcz");
    flip_byte(path, -40);
    ftc_persist_loaded_t *l;
    assert_int_equal(load_check(p, FTC_PERSIST_NEWEST, 3, c[3], &w), 2);
    assert_true(ftc_persist_load(p, 5, &l) < 0);
    assert_non_null(strstr(ftc_persist_errstr(p), "v00000000000000000004"));
    for (int s = 1; s <= 5; s++)
        free_copies(c[s]);
    finish(&w, p, dir);
}

/* The handle's delta base is no longer on disk as it wrote it (another
 * writer's retention, an operator): the next version is written in full.
 * It used to be a delta on the missing base, committed but never loadable,
 * and with keep 1 its retention then removed version 1, the last one that
 * loaded: nothing loaded at all. Both the base itself gone (2) and a base
 * further down its chain gone (1) are caught. */
static void test_delta_base_gone(void **state)
{
    (void)state;
    for (int gone = 2; gone >= 1; gone--) {
        char *dir = ftc_test_tmpdir("persist-gone");
        ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
        o.keep = 1;
        o.chunk_bytes = 16384;
        ftc_persist_t *p = open_tier(dir, &o);
        world_t w;
        world_init(&w, 16u << 10);
        uint8_t *c1[NSH], *c2[NSH], *c3[NSH];
        assert_int_equal(world_write(&w, p, 1, c1), 0); /* full */
        assert_int_equal(world_write(&w, p, 2, c2), 0); /* delta on 1: both kept */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/v%020d", dir, gone);
        ftc_test_rmrf(path);
        assert_int_equal(world_write(&w, p, 3, c3), 0);
        ftc_persist_stats_t st;
        ftc_persist_last_stats(p, &st);
        ftc_persist_loaded_t *l;
        int rc = ftc_persist_load(p, FTC_PERSIST_NEWEST, &l);
        if (rc)
            fail_msg("v%d removed, 3 written (%s): nothing loads: %s", gone,
                     st.delta ? "a delta" : "full", ftc_persist_errstr(p));
        check_loaded(l, 3, c3, &w);
        ftc_persist_loaded_free(l);
        assert_false(st.delta);
        free_copies(c1);
        free_copies(c2);
        free_copies(c3);
        finish(&w, p, dir);
    }
}

/* A file that is not a directory under a version's name (a stray copy, an
 * operator's note "v00000000000000000000") is no version. Reading its
 * COMMITTED failed with ENOTDIR, taken for "cannot be read now, may be
 * committed", so every retention pass was skipped for good and the disk
 * filled; it was also listed as a version with a bad marker. */
static void test_stray_file_not_a_version(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-stray");
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.keep = 1;
    o.full_every = 1;
    o.chunk_bytes = 16384;
    ftc_persist_t *p = open_tier(dir, &o);
    world_t w;
    world_init(&w, 16u << 10);
    char stray[PATH_MAX];
    snprintf(stray, sizeof stray, "%s/v%020d", dir, 0);
    FILE *f = fopen(stray, "w");
    assert_non_null(f);
    fputs("not a version\n", f);
    fclose(f);
    uint8_t *c1[NSH], *c2[NSH];
    assert_int_equal(world_write(&w, p, 1, c1), 0);
    assert_int_equal(world_write(&w, p, 2, c2), 0);
    if (version_exists(dir, 1))
        fail_msg("retention kept v1 (keep 1) beside the file %s", stray);
    ftc_persist_version_t *v;
    int n;
    assert_int_equal(ftc_persist_list(p, &v, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].step, 2);
    free(v);
    load_check(p, FTC_PERSIST_NEWEST, 2, c2, &w);
    struct stat st;
    assert_int_equal(stat(stray, &st), 0); /* not ours: left alone */
    /* one named after a newer step: drop_newer failed on it ("removing
     * .../COMMITTED: Not a directory"), so no restore could drop anything */
    char stray9[PATH_MAX];
    snprintf(stray9, sizeof stray9, "%s/v%020d", dir, 9);
    assert_int_equal(rename(stray, stray9), 0);
    int dropped = -1;
    if (ftc_persist_drop_newer(p, 1, &dropped) != 0)
        fail_msg("drop_newer beside the file %s: %s", stray9, ftc_persist_errstr(p));
    assert_int_equal(dropped, 1); /* v2 */
    assert_int_equal(stat(stray9, &st), 0);
    free_copies(c1);
    free_copies(c2);
    finish(&w, p, dir);
}

static void test_manifest_hostile(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    const char *good_shard =
        "{\"file\":\"shard-d0-t0-p0.ftcz\",\"dp\":1,\"tp\":1,\"pp\":1,\"dp_rank\":0,"
        "\"tp_rank\":0,\"pp_rank\":0,\"raw_size\":100,\"raw_xxh3\":\"0123456789abcdef\","
        "\"file_size\":50,\"file_xxh3\":\"0123456789abcdef\",\"base_step\":null}";
    char good[2048];
    snprintf(good, sizeof good,
             "{\"format\":\"ftc-persist-manifest\",\"version\":1,\"job\":\"j\",\"step\":5,"
             "\"generation\":1,\"created_ms\":0,\"shards\":[%s]}",
             good_shard);
    assert_int_equal(ftc__persist_manifest_check(good, strlen(good), &err), 0);
    struct {
        const char *from, *to;
    } edits[] = {
        {"shard-d0-t0-p0.ftcz", "../../etc/passwd"},
        {"shard-d0-t0-p0.ftcz", "shard-d1-t0-p0.ftcz"},
        {"shard-d0-t0-p0.ftcz", "shard-d0-t0-p0.ftcz/x"},
        {"\"version\":1", "\"version\":2"},
        {"\"version\":1", "\"version\":\"1\""},
        {"\"step\":5", "\"step\":-5"},
        {"\"step\":5", "\"step\":5.5"},
        {"\"step\":5", "\"step\":99999999999999999999999"},
        {"\"step\":5,", ""},
        {"\"raw_size\":100", "\"raw_size\":0"},
        {"\"raw_size\":100", "\"raw_size\":9223372036854775807"},
        {"\"raw_xxh3\":\"0123456789abcdef\"", "\"raw_xxh3\":\"0123\""},
        {"\"raw_xxh3\":\"0123456789abcdef\"", "\"raw_xxh3\":81985529216486895"},
        {"\"dp_rank\":0", "\"dp_rank\":1"},
        {"\"dp\":1", "\"dp\":0"},
        {"\"base_step\":null", "\"base_step\":5,\"base_raw_xxh3\":\"0123456789abcdef\""},
        {"\"base_step\":null", "\"base_step\":4"},
        {"\"base_step\":null", "\"base_step\":null,\"base_raw_xxh3\":\"0123456789abcdef\""},
        {"\"job\":\"j\"", "\"job\":7"},
        {"\"job\":\"j\"", "\"job\":\"j\\u0000k\""},
        {"\"format\":\"ftc-persist-manifest\"", "\"format\":\"x\""},
        {"\"shards\":[", "\"shards\":{\"a\":["},
        {"\"generation\":1", "\"generation\":1,\"generation\":2"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        char bad[2048];
        const char *at = strstr(good, edits[i].from);
        assert_non_null(at);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - good), good, edits[i].to,
                 at + strlen(edits[i].from));
        if (ftc__persist_manifest_check(bad, strlen(bad), &err) == 0)
            fail_msg("edit %zu accepted: %s", i, bad);
    }
    /* two shards with the same coordinates; an empty list; not JSON at all */
    char dup[4096];
    snprintf(dup, sizeof dup,
             "{\"format\":\"ftc-persist-manifest\",\"version\":1,\"job\":\"j\",\"step\":5,"
             "\"generation\":1,\"created_ms\":0,\"shards\":[%s,%s]}",
             good_shard, good_shard);
    assert_int_equal(ftc__persist_manifest_check(dup, strlen(dup), &err), FTC_ECORRUPT);
    const char *empty = "{\"format\":\"ftc-persist-manifest\",\"version\":1,\"job\":\"j\","
                        "\"step\":5,\"generation\":1,\"created_ms\":0,\"shards\":[]}";
    assert_int_equal(ftc__persist_manifest_check(empty, strlen(empty), &err), FTC_ECORRUPT);
    assert_int_equal(ftc__persist_manifest_check("[1,2", 4, &err), FTC_ECORRUPT);
    assert_int_equal(ftc__persist_manifest_check("", 0, &err), FTC_ECORRUPT);
}

/* Another node's tier, opened to read: nothing created, nothing removed (a
 * temp file of its live writer stays), versions load, writes are refused. */
static void test_reader(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("persist-reader");
    ftc_err_t err = {0};
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/nonesuch", dir);
    assert_null(ftc_persist_open_reader(missing, &err));
    assert_int_equal(err.code, FTC_ENOENT);
    struct stat st;
    assert_int_not_equal(stat(missing, &st), 0); /* not created */
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 4096;
    ftc_persist_t *w = ftc_persist_open(dir, &o, &err);
    assert_non_null(w);
    world_t wd;
    world_init(&wd, 16u << 10);
    uint8_t *c1[NSH];
    assert_int_equal(world_write(&wd, w, 1, c1), 0);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp.writer-in-progress", dir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fclose(f);
    ftc_persist_t *r = ftc_persist_open_reader(dir, &err);
    assert_non_null(r);
    assert_int_equal(stat(tmp, &st), 0); /* the writer's temp file is still there */
    ftc_persist_loaded_t *l = NULL;
    assert_int_equal(ftc_persist_load(r, FTC_PERSIST_NEWEST, &l), 0);
    check_loaded(l, 1, c1, &wd);
    ftc_persist_loaded_free(l);
    const void *sh[1] = {c1[0]};
    uint64_t sz[1] = {ftc_synth_size(wd.s[0])};
    assert_int_equal(ftc_persist_write(r, 2, sh, sz, 1), FTC_EINVAL);
    print_message("%s\n", ftc_persist_errstr(r));
    assert_false(version_exists(dir, 2));
    ftc_persist_close(r);
    ftc_persist_close(w);
    free_copies(c1);
    world_free(&wd);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_options_from_config(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_config_t *cfg = ftc_config_create();
    assert_non_null(cfg);
    const char *json = "{\"persist\":{\"level\":5,\"threads\":3,\"chunk_bytes\":\"64KiB\","
                       "\"shuffle\":false,\"delta\":false,\"full_every\":2,\"keep\":7}}";
    assert_int_equal(ftc_config_load_json(cfg, json, strlen(json), "test", &err), 0);
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    ftc_fault_t f;
    o.fault = &f;
    ftc_persist_options_from_config(&o, cfg);
    assert_int_equal(o.level, 5);
    assert_int_equal(o.threads, 3);
    assert_int_equal(o.chunk_bytes, 64u << 10);
    assert_false(o.shuffle);
    assert_false(o.delta);
    assert_int_equal(o.full_every, 2);
    assert_int_equal(o.keep, 7);
    assert_ptr_equal(o.fault, &f);
    ftc_config_destroy(cfg);

    /* persist.shuffle: a filter name, or a boolean as before (true = the
     * default filter, byte); the default is the byte shuffle */
    const struct {
        const char *json;
        int want;
    } filt[] = {{"{}", FTC_ZSHARD_FILTER_DEFAULT},
                {"{\"persist\":{\"shuffle\":true}}", FTC_ZSHARD_FILTER_BYTE},
                {"{\"persist\":{\"shuffle\":false}}", FTC_ZSHARD_FILTER_NONE},
                {"{\"persist\":{\"shuffle\":\"bit\"}}", FTC_ZSHARD_FILTER_BIT},
                {"{\"persist.shuffle\":\"byte\"}", FTC_ZSHARD_FILTER_BYTE},
                {"{\"persist\":{\"shuffle\":\"none\"}}", FTC_ZSHARD_FILTER_NONE}};
    assert_int_equal(FTC_ZSHARD_FILTER_DEFAULT, FTC_ZSHARD_FILTER_BYTE);
    for (size_t i = 0; i < sizeof filt / sizeof *filt; i++) {
        cfg = ftc_config_create();
        assert_int_equal(ftc_config_load_json(cfg, filt[i].json, strlen(filt[i].json), "t", &err),
                         0);
        ftc_persist_options_t fo = FTC_PERSIST_OPTIONS_INIT;
        fo.shuffle = -1;
        ftc_persist_options_from_config(&fo, cfg);
        assert_int_equal(fo.shuffle, filt[i].want);
        assert_int_equal(ftc_config_bool(cfg, FTC_CFG_PERSIST_SHUFFLE),
                         filt[i].want != FTC_ZSHARD_FILTER_NONE);
        ftc_config_destroy(cfg);
    }
    cfg = ftc_config_create();
    const char *bad = "{\"persist\":{\"shuffle\":\"bits\"}}";
    assert_int_equal(ftc_config_load_json(cfg, bad, strlen(bad), "t", &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "persist.shuffle"));
    char *argv[] = {"x", "--persist-shuffle=bit", "--persist-delta"};
    int ai = 1;
    assert_int_equal(ftc_config_parse_flag(cfg, 3, argv, &ai, &err), 1);
    assert_string_equal(ftc_config_str(cfg, FTC_CFG_PERSIST_SHUFFLE), "bit");
    ftc_config_destroy(cfg);

    /* bad options are refused at open */
    char *dir = ftc_test_tmpdir("persist-opt");
    ftc_persist_options_t b = FTC_PERSIST_OPTIONS_INIT;
    b.chunk_bytes = 100;
    assert_null(ftc_persist_open(dir, &b, &err));
    assert_int_equal(err.code, FTC_EINVAL);
    b = (ftc_persist_options_t)FTC_PERSIST_OPTIONS_INIT;
    b.shuffle = 3; /* no such filter */
    assert_null(ftc_persist_open(dir, &b, &err));
    assert_int_equal(err.code, FTC_EINVAL);
    b = (ftc_persist_options_t)FTC_PERSIST_OPTIONS_INIT;
    b.struct_size = 8;
    assert_null(ftc_persist_open(dir, &b, &err));
    ftc_persist_t *p = ftc_persist_open(dir, NULL, &err);
    assert_non_null(p);
    ftc_persist_loaded_t *l;
    assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), FTC_ENOENT);
    ftc_persist_close(p);
    ftc_persist_close(NULL);
    ftc_persist_loaded_free(NULL);
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_full_and_delta),
        cmocka_unit_test(test_options_variants),
        cmocka_unit_test(test_retention_and_chains),
        cmocka_unit_test(test_newest_rescans_after_retention),
        cmocka_unit_test(test_retention_rollback),
        cmocka_unit_test(test_unreadable_version_kept),
        cmocka_unit_test(test_corrupt_committed_rewritten),
        cmocka_unit_test(test_fifo_not_waited_for),
        cmocka_unit_test(test_linked_version_removed_not_followed),
        cmocka_unit_test(test_drop_newer),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_broken_base),
        cmocka_unit_test(test_delta_base_gone),
        cmocka_unit_test(test_stray_file_not_a_version),
        cmocka_unit_test(test_manifest_hostile),
        cmocka_unit_test(test_options_from_config),
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_live_temps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
