/* test_persist_faults.c — I3 for the persist tier: fail (EIO, ENOSPC) or
 * crash at every write, fsync and rename a version write performs; the
 * previous version (or, only once COMMITTED is durable, the new one) loads
 * byte-identical, and a fresh handle writes again with no temp files left.
 * Also: a real full disk (a tmpfs) at the version's mkdir, and a durable
 * drop_newer, and room made on a full disk. */
#include "ftc_test.h"

#include "ckpt/persist.h"

#include <errno.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define NSH 2

/* Version step's shards: deterministic, same layout every step (so the
 * second version is a delta). */
static void make_version(uint64_t step, uint8_t **sh, uint64_t *sz)
{
    for (int i = 0; i < NSH; i++)
        sh[i] = ftc_test_make_shard(step, (uint32_t)i, 150, step * 10 + (uint64_t)i, &sz[i]);
}

static void free_version(uint8_t **sh)
{
    for (int i = 0; i < NSH; i++)
        free(sh[i]);
}

static int write_version(ftc_persist_t *p, uint64_t step)
{
    uint8_t *sh[NSH];
    uint64_t sz[NSH];
    make_version(step, sh, sz);
    int rc = ftc_persist_write(p, step, (const void *const *)sh, sz, NSH);
    free_version(sh);
    return rc;
}

static ftc_persist_options_t opts_with(ftc_fault_t *f)
{
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.chunk_bytes = 4096;
    o.threads = 2;
    o.fault = f;
    return o;
}

/* A persist tier in dir (opts_with(f)) whose fault f injects nothing yet. */
static ftc_persist_t *open_with_faults(const char *dir, ftc_fault_t *f)
{
    ftc_err_t err = {0};
    assert_int_equal(ftc_fault_parse(f, "", &err), 0);
    ftc_persist_options_t o = opts_with(f);
    ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
    assert_non_null(p);
    return p;
}

/* Counts temp files in dir and its version directories. */
static int count_temps(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp."))
            n++;
        if (de->d_name[0] == 'v') {
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            n += count_temps(sub);
        }
    }
    closedir(d);
    return n;
}

static void expect_version(ftc_persist_loaded_t *l, uint64_t step)
{
    uint8_t *sh[NSH];
    uint64_t sz[NSH];
    make_version(step, sh, sz);
    assert_int_equal(l->step, step);
    assert_int_equal(l->n_shards, NSH);
    for (int i = 0; i < NSH; i++) {
        assert_int_equal(l->sizes[i], sz[i]);
        assert_memory_equal(l->shards[i], sh[i], sz[i]);
    }
    free_version(sh);
}

/* How many operations of each kind writing version 2 (a delta after 1) takes. */
static void count_ops(int64_t counts[3])
{
    for (int op = 0; op < 3; op++) {
        char *dir = ftc_test_tmpdir("pf-count");
        ftc_fault_t f;
        ftc_persist_t *p = open_with_faults(dir, &f);
        assert_int_equal(write_version(p, 1), 0);
        f.op = op;
        f.at = INT64_MAX; /* counts without ever failing */
        assert_int_equal(write_version(p, 2), 0);
        ftc_persist_stats_t st;
        ftc_persist_last_stats(p, &st);
        assert_true(st.delta);
        counts[op] = atomic_load(&f.count[op]);
        ftc_persist_close(p);
        ftc_test_rmrf(dir);
        free(dir);
    }
    /* NSH shards + manifest + marker, each one write, two fsyncs, one rename;
     * plus the fsync of the new version directory's parent */
    assert_int_equal(counts[FTC_FAULT_WRITE], NSH + 2);
    assert_int_equal(counts[FTC_FAULT_FSYNC], 2 * (NSH + 2) + 1);
    assert_int_equal(counts[FTC_FAULT_RENAME], NSH + 2);
}

/* After a failed or crashed write of version 2: what loads, and recovery. */
static void check_after(const char *dir, bool write_ok)
{
    ftc_err_t err = {0};
    ftc_persist_options_t o = opts_with(NULL);
    ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
    assert_non_null(p);
    assert_int_equal(count_temps(dir), 0); /* open cleaned them */
    ftc_persist_loaded_t *l;
    assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
    char marker[PATH_MAX];
    snprintf(marker, sizeof marker, "%s/v%020d/COMMITTED", dir, 2);
    struct stat st;
    if (l->step == 2) {
        assert_int_equal(stat(marker, &st), 0); /* only once COMMITTED exists */
        expect_version(l, 2);
    } else {
        assert_false(write_ok);
        expect_version(l, 1);
    }
    /* an unfinished version 2 (no COMMITTED) is no version: not a failed one */
    if (l->fallbacks != 0)
        fail_msg("loaded v%llu after %d fallback(s): an unfinished write counted as a failed "
                 "version", (unsigned long long)l->step, l->fallbacks);
    ftc_persist_loaded_free(l);
    /* a new write succeeds, loads, and retention removes any leftover */
    assert_int_equal(write_version(p, 3), 0);
    assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
    expect_version(l, 3);
    assert_int_equal(l->fallbacks, 0);
    ftc_persist_loaded_free(l);
    assert_int_equal(count_temps(dir), 0);
    ftc_persist_close(p);
}

static const char *op_name(int op)
{
    return op == FTC_FAULT_WRITE ? "write" : op == FTC_FAULT_FSYNC ? "fsync" : "rename";
}

static void test_fail_every_operation(void **state)
{
    (void)state;
    int64_t counts[3];
    count_ops(counts);
    int runs = 0;
    for (int op = 0; op < 3; op++)
        for (int enospc = 0; enospc < 2; enospc++)
            for (int64_t n = 1; n <= counts[op]; n++) {
                char spec[64];
                snprintf(spec, sizeof spec, "%s:%lld%s", op_name(op), (long long)n,
                         enospc ? ",enospc" : "");
                char *dir = ftc_test_tmpdir("pf-fail");
                ftc_fault_t f;
                ftc_persist_t *p = open_with_faults(dir, &f);
                ftc_err_t err = {0};
                assert_int_equal(write_version(p, 1), 0);
                assert_int_equal(ftc_fault_parse(&f, spec, &err), 0);
                int rc = write_version(p, 2);
                if (rc >= 0)
                    fail_msg("%s: the write did not report the failure", spec);
                assert_int_equal(rc, enospc ? FTC_ENOSPC : FTC_EIO);
                assert_non_null(strstr(ftc_persist_errstr(p), "injected"));
                /* the same handle still loads version 1 and can write again */
                ftc_persist_loaded_t *l;
                assert_int_equal(ftc_persist_load(p, FTC_PERSIST_NEWEST, &l), 0);
                expect_version(l, 1);
                assert_int_equal(l->fallbacks, 0); /* the failed version was discarded */
                ftc_persist_loaded_free(l);
                ftc_persist_close(p);
                check_after(dir, false);
                ftc_test_rmrf(dir);
                free(dir);
                runs++;
            }
    assert_int_equal(runs, 2 * (counts[0] + counts[1] + counts[2]));
}

static void test_crash_every_operation(void **state)
{
    (void)state;
    int64_t counts[3];
    count_ops(counts);
    for (int op = 0; op < 3; op++)
        for (int64_t n = 1; n <= counts[op]; n++) {
            char spec[64];
            snprintf(spec, sizeof spec, "%s:%lld,crash", op_name(op), (long long)n);
            char *dir = ftc_test_tmpdir("pf-crash");
            fflush(NULL);
            pid_t pid = fork();
            assert_true(pid >= 0);
            if (pid == 0) {
                /* the child writes 1 cleanly, then dies inside the write of 2 */
                ftc_fault_t f;
                ftc_err_t err = {0};
                ftc_fault_parse(&f, "", &err);
                ftc_persist_options_t o = opts_with(&f);
                ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
                if (!p || write_version(p, 1) != 0)
                    _exit(1);
                if (ftc_fault_parse(&f, spec, &err) != 0)
                    _exit(2);
                write_version(p, 2);
                _exit(0); /* not reached when the fault fires */
            }
            int st;
            assert_int_equal(waitpid(pid, &st, 0), pid);
            assert_true(WIFEXITED(st));
            if (WEXITSTATUS(st) != FTC_FAULT_CRASH_STATUS)
                fail_msg("%s: child exited %d", spec, WEXITSTATUS(st));
            check_after(dir, false);
            ftc_test_rmrf(dir);
            free(dir);
        }
}

/* Opening a persist directory that does not exist yet makes it durably:
 * each directory made is fsync'd in its parent (it was not: a power cut
 * soon after the first versions could lose the whole directory, COMMITTED
 * markers and all); a failing fsync fails the open. */
static void test_new_dir_durable(void **state)
{
    (void)state;
    char *base = ftc_test_tmpdir("pf-newdir");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/a/b", base);
    ftc_fault_t f;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fault_parse(&f, "", &err), 0);
    f.op = FTC_FAULT_FSYNC;
    f.at = INT64_MAX; /* counts without failing */
    ftc_persist_options_t o = opts_with(&f);
    ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
    assert_non_null(p);
    ftc_persist_close(p);
    assert_int_equal(atomic_load(&f.count[FTC_FAULT_FSYNC]), 2); /* b in a, a in base */
    atomic_store(&f.count[FTC_FAULT_FSYNC], 0);
    p = ftc_persist_open(dir, &o, &err); /* there already: nothing made */
    assert_non_null(p);
    ftc_persist_close(p);
    assert_int_equal(atomic_load(&f.count[FTC_FAULT_FSYNC]), 0);
    snprintf(dir, sizeof dir, "%s/c", base);
    assert_int_equal(ftc_fault_parse(&f, "fsync:1", &err), 0);
    assert_null(ftc_persist_open(dir, &o, &err));
    assert_int_equal(err.code, FTC_EIO);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "injected"));
    ftc_test_rmrf(base);
    free(base);
}

/* ftc_persist_drop_newer makes its removals durable: the persist directory
 * is fsync'd once versions are gone (it was not: after a power cut a dropped
 * version, one the trainer abandoned, could come back committed), and a
 * failing fsync fails the drop. Nothing dropped, nothing synced. */
static void test_drop_durable(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("pf-drop");
    ftc_fault_t f;
    ftc_persist_t *p = open_with_faults(dir, &f);
    ftc_err_t err = {0};
    for (uint64_t s = 1; s <= 3; s++)
        assert_int_equal(write_version(p, s), 0);
    f.op = FTC_FAULT_FSYNC;
    f.at = INT64_MAX; /* counts without failing */
    int dropped = 0;
    assert_int_equal(ftc_persist_drop_newer(p, 3, &dropped), 0);
    assert_int_equal(dropped, 0);
    assert_int_equal(atomic_load(&f.count[FTC_FAULT_FSYNC]), 0);
    assert_int_equal(ftc_persist_drop_newer(p, 2, &dropped), 0);
    assert_int_equal(dropped, 1);
    assert_int_equal(atomic_load(&f.count[FTC_FAULT_FSYNC]), 1);
    assert_int_equal(ftc_fault_parse(&f, "fsync:1", &err), 0);
    int rc = ftc_persist_drop_newer(p, 1, &dropped);
    print_message("%s\n", ftc_persist_errstr(p));
    assert_int_equal(rc, FTC_EIO);
    assert_non_null(strstr(ftc_persist_errstr(p), "injected"));
    ftc_persist_close(p);
    ftc_test_rmrf(dir);
    free(dir);
}

/* A real full file system, not an injected error: a tmpfs whose inodes run
 * out, mounted in a private mount namespace of a child (so nothing outlives
 * it). The first thing a version write does on a full disk is mkdir its
 * directory; that ENOSPC said only "mkdir ...: No space left on device",
 * without the "disk is full ... free space there, keep fewer versions or move
 * persist.dir" that a failed write, fsync or rename gets. Skipped where a
 * mount namespace or tmpfs cannot be had (no privilege). */
static void test_full_disk_at_mkdir(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("pf-full");
    char msg[FTC_ERR_MSG_MAX] = "";
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            _exit(77);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", dir, "tmpfs", 0, "size=8m,nr_inodes=64") != 0)
            _exit(77);
        ftc_err_t err = {0};
        ftc_persist_options_t o = opts_with(NULL);
        char pd[PATH_MAX], junk[PATH_MAX];
        snprintf(pd, sizeof pd, "%s/p", dir);
        ftc_persist_t *p = ftc_persist_open(pd, &o, &err);
        if (!p || write_version(p, 1) != 0)
            _exit(1);
        for (int i = 0; i < 1000; i++) { /* use up the inodes */
            snprintf(junk, sizeof junk, "%s/junk%d", dir, i);
            int fd = open(junk, O_CREAT | O_WRONLY, 0600);
            if (fd < 0)
                break;
            close(fd);
        }
        int rc = write_version(p, 2);
        if (write(pfd[1], ftc_persist_errstr(p), strlen(ftc_persist_errstr(p))) < 0)
            _exit(3);
        ftc_persist_loaded_t *l = NULL;
        int lrc = ftc_persist_load(p, FTC_PERSIST_NEWEST, &l);
        bool v1 = lrc == 0 && l->step == 1;
        ftc_persist_loaded_free(l);
        _exit(rc == FTC_ENOSPC && v1 ? 0 : 2);
    }
    close(pfd[1]);
    ssize_t got = read(pfd[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = '\0';
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    ftc_test_rmrf(dir);
    free(dir);
    if (WEXITSTATUS(st) == 77) {
        skip();
        return;
    }
    print_message("%s\n", msg);
    if (WEXITSTATUS(st) != 0)
        fail_msg("child exited %d (want FTC_ENOSPC and version 1 loading): %s",
                 WEXITSTATUS(st), msg);
    if (!strstr(msg, "the disk is full") || !strstr(msg, "persist.keep") ||
        !strstr(msg, "v00000000000000000002"))
        fail_msg("no 'the disk is full ... what to do' in: %s", msg);
}

/* Writes version step of two shards of about 70 scale bytes each. */
static int write_scaled(ftc_persist_t *p, uint64_t step, uint64_t scale)
{
    uint8_t *sh[NSH];
    uint64_t sz[NSH];
    for (int i = 0; i < NSH; i++)
        sh[i] = ftc_test_make_shard(step, (uint32_t)i, scale, step * 10 + (uint64_t)i, &sz[i]);
    int rc = ftc_persist_write(p, step, (const void *const *)sh, sz, NSH);
    free_version(sh);
    return rc;
}

/* Two shards of about 70 KiB each. */
static int write_big(ftc_persist_t *p, uint64_t step)
{
    return write_scaled(p, step, 1000);
}

/* Fills the file system of dir to the last page, then frees slack bytes. */
static int fill_disk(const char *dir, int idx, long slack)
{
    char junk[PATH_MAX];
    snprintf(junk, sizeof junk, "%s/junk%d", dir, idx);
    int fd = open(junk, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    static char buf[4096];
    memset(buf, 0x5a, sizeof buf);
    long n = 0;
    for (ssize_t w; (w = write(fd, buf, sizeof buf)) > 0;)
        n += w;
    int rc = n > slack && ftruncate(fd, n - slack) == 0 ? 0 : -1;
    close(fd);
    return rc;
}

/* The child of test_full_disk_makes_room, in its own tmpfs: 0 or the check
 * that failed; msg gets the last persist error. */
static int full_disk_child(const char *dir, char *msg, size_t cap)
{
    ftc_err_t err = {0};
    char pd[PATH_MAX], v2m[PATH_MAX + 64];
    snprintf(pd, sizeof pd, "%s/p", dir);
    ftc_persist_options_t o = opts_with(NULL);
    o.delta = false;
    o.keep = 2;
    ftc_persist_t *p = ftc_persist_open(pd, &o, &err);
    if (!p || write_big(p, 1) != 0 || write_big(p, 2) != 0)
        return 10;
    /* a write of 2 that crashed before its COMMITTED: an unfinished version
     * newer than the newest committed one */
    snprintf(v2m, sizeof v2m, "%s/v%020d/COMMITTED", pd, 2);
    if (unlink(v2m) != 0 || fill_disk(dir, 0, 16384) != 0)
        return 11;
    int rc = write_big(p, 3);
    snprintf(msg, cap, "%s", ftc_persist_errstr(p));
    if (rc != 0)
        return 12; /* v2's files took the room v3 needs, for good */
    /* full again, keep 2 (1 and 3): nothing to remove, a clear error */
    if (fill_disk(dir, 1, 0) != 0)
        return 13;
    rc = write_big(p, 4);
    snprintf(msg, cap, "%s", ftc_persist_errstr(p));
    if (rc != FTC_ENOSPC || !strstr(msg, "the disk is full"))
        return 14;
    /* persist.keep lowered to 1 (the advice of that error): room for 4 */
    ftc_persist_close(p);
    o.keep = 1;
    p = ftc_persist_open(pd, &o, &err);
    if (!p)
        return 15;
    rc = write_big(p, 4);
    snprintf(msg, cap, "%s", ftc_persist_errstr(p));
    if (rc != 0)
        return 16;
    ftc_persist_loaded_t *l = NULL;
    rc = ftc_persist_load(p, FTC_PERSIST_NEWEST, &l);
    bool v4 = rc == 0 && l->step == 4;
    ftc_persist_loaded_free(l);
    ftc_persist_close(p);
    return v4 ? 0 : 17;
}

/* The child of test_full_disk_keeps_loadable: v1 (small) loads, v2 is
 * committed but corrupt; keep lowered to 1, the disk full, a fresh handle
 * writes a bigger v3. */
static int keeps_loadable_child(const char *dir, char *msg, size_t cap)
{
    ftc_err_t err = {0};
    char pd[PATH_MAX], shard[PATH_MAX + 64];
    snprintf(pd, sizeof pd, "%s/p", dir);
    ftc_persist_options_t o = opts_with(NULL);
    o.delta = false;
    ftc_persist_t *p = ftc_persist_open(pd, &o, &err);
    if (!p || write_scaled(p, 1, 100) != 0 || write_big(p, 2) != 0)
        return 10;
    ftc_persist_close(p);
    snprintf(shard, sizeof shard, "%s/v%020d/shard-d0-t0-p0.ftcz", pd, 2);
    int fd = open(shard, O_RDWR);
    if (fd < 0 || pwrite(fd, "\xff\xff\xff\xff", 4, 1000) != 4 || close(fd) != 0)
        return 11;
    if (fill_disk(dir, 0, 16384) != 0)
        return 12;
    o.keep = 1;
    p = ftc_persist_open(pd, &o, &err);
    if (!p)
        return 13;
    int rc = write_big(p, 3); /* removing v1 would not make room enough */
    snprintf(msg, cap, "%s", ftc_persist_errstr(p));
    if (rc != FTC_ENOSPC)
        return 14;
    ftc_persist_loaded_t *l = NULL;
    rc = ftc_persist_load(p, FTC_PERSIST_NEWEST, &l);
    if (rc != 0)
        snprintf(msg, cap, "%s", ftc_persist_errstr(p));
    bool v1 = rc == 0 && l->step == 1;
    ftc_persist_loaded_free(l);
    ftc_persist_close(p);
    return v1 ? 0 : 15;
}

/* Runs child(dir) in a private mount namespace with a tmpfs of `size` on
 * dir; 77 when that cannot be had. */
static void run_on_tmpfs(const char *name, const char *size,
                         int (*child)(const char *dir, char *msg, size_t cap))
{
    char *dir = ftc_test_tmpdir(name);
    char msg[FTC_ERR_MSG_MAX] = "";
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        if (unshare(CLONE_NEWNS) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            _exit(77);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", dir, "tmpfs", 0, size) != 0)
            _exit(77);
        int rc = child(dir, msg, sizeof msg);
        if (write(pfd[1], msg, strlen(msg)) < 0)
            _exit(3);
        _exit(rc);
    }
    close(pfd[1]);
    ssize_t got = read(pfd[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = '\0';
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    ftc_test_rmrf(dir);
    free(dir);
    if (WEXITSTATUS(st) == 77) {
        skip();
        return;
    }
    if (WEXITSTATUS(st) != 0)
        fail_msg("check %d failed: %s", WEXITSTATUS(st), msg);
}

/* A full disk (a real tmpfs, as in test_full_disk_at_mkdir) is made room on:
 * retention ran only after a commit, and no commit came while the disk was
 * full, so an unfinished version a crash left (newer than the newest
 * committed: only a later commit would remove it) or the versions beyond a
 * lowered persist.keep stayed, and every later write failed with ENOSPC. The
 * write now removes what retention would (and unfinished versions older
 * than its step) and tries once more. */
static void test_full_disk_makes_room(void **state)
{
    (void)state;
    run_on_tmpfs("pf-room", "size=2m", full_disk_child);
}

/* Making room before a commit removes no committed version unless one that
 * stays loads: with the newest (kept) version committed but corrupt, the
 * older one that would go is the last that loads, and the write may fail
 * all the same (here it does: that version is too small to make room). */
static void test_full_disk_keeps_loadable(void **state)
{
    (void)state;
    run_on_tmpfs("pf-keep", "size=2m", keeps_loadable_child);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_every_operation),
        cmocka_unit_test(test_crash_every_operation),
        cmocka_unit_test(test_new_dir_durable),
        cmocka_unit_test(test_full_disk_at_mkdir),
        cmocka_unit_test(test_full_disk_makes_room),
        cmocka_unit_test(test_full_disk_keeps_loadable),
        cmocka_unit_test(test_drop_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
