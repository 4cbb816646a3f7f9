/* test_fsio.c — atomic writes and the fault injector. */
#include "ftc_test.h"

#include "core/fsio.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_atomic_write_and_read(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("fsio");
    ftc_err_t err = {0};
    assert_int_equal(ftc_fs_write_file_atomic(dir, "a.txt", "hello", 5, NULL, &err), 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    uint8_t *buf;
    size_t len;
    assert_int_equal(ftc_fs_read_file(path, 100, &buf, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "hello", 5);
    free(buf);
    assert_int_equal(ftc_fs_read_file(path, 4, &buf, &len, &err), FTC_ERANGE);
    assert_int_equal(ftc_fs_read_file(dir, 100, &buf, &len, &err), FTC_EINVAL);
    /* a FIFO (no writer) is refused at once: opening it for reading used to
     * wait for a writer forever (alarm: a hang fails the test, never blocks it) */
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(60);
    assert_int_equal(ftc_fs_read_file(path, 100, &buf, &len, &err), FTC_EINVAL);
    alarm(0);
    assert_non_null(strstr(ftc_err_str(&err), "not a regular file"));
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_fault_spec(void **state)
{
    (void)state;
    ftc_fault_t f;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fault_parse(&f, "fsync:2,enospc", &err), 0);
    assert_int_equal(f.op, FTC_FAULT_FSYNC);
    assert_int_equal(f.at, 2);
    assert_int_equal(f.errnum, ENOSPC);
    assert_int_equal(ftc_fault_parse(&f, "write:0", &err), FTC_EINVAL);
    assert_int_equal(ftc_fault_parse(&f, "chmod:1", &err), FTC_EINVAL);
    assert_int_equal(ftc_fault_parse(&f, "crash", &err), FTC_EINVAL);
    /* one operation per spec: a second one used to replace the first silently */
    assert_int_equal(ftc_fault_parse(&f, "write:1,fsync:2", &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "one of"));
    assert_int_equal(ftc_fault_parse(&f, "", &err), 0);
    assert_int_equal(f.op, -1);
}

/* Each failing operation leaves the old file intact and no temp file behind. */
static void test_injected_failures_keep_old_file(void **state)
{
    (void)state;
    const char *specs[] = {"write:1", "fsync:1", "rename:1", "fsync:2", "write:1,enospc"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        char *dir = ftc_test_tmpdir("fsio-fault");
        ftc_err_t err = {0};
        assert_int_equal(ftc_fs_write_file_atomic(dir, "f", "old", 3, NULL, &err), 0);
        ftc_fault_t f;
        assert_int_equal(ftc_fault_parse(&f, specs[s], &err), 0);
        int rc = ftc_fs_write_file_atomic(dir, "f", "new!", 4, &f, &err);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/f", dir);
        uint8_t *buf;
        size_t len;
        assert_int_equal(ftc_fs_read_file(path, 100, &buf, &len, &err), 0);
        if (!strcmp(specs[s], "fsync:2")) {
            /* the directory fsync failed after the rename: new data, error reported */
            assert_int_equal(rc, FTC_EIO);
            assert_memory_equal(buf, "new!", 4);
        } else {
            assert_true(rc < 0);
            assert_memory_equal(buf, "old", 3);
            if (strstr(specs[s], "enospc"))
                assert_int_equal(rc, FTC_ENOSPC);
        }
        free(buf);
        /* only "f" remains */
        DIR *d = opendir(dir);
        struct dirent *de;
        int files = 0;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")))
                files++;
        closedir(d);
        assert_int_equal(files, 1);
        ftc_test_rmrf(dir);
        free(dir);
    }
}

static void test_crash_mode_exits(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("fsio-crash");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ftc_fault_t f;
        ftc_err_t err = {0};
        ftc_fault_parse(&f, "rename:1,crash", &err);
        ftc_fs_write_file_atomic(dir, "f", "x", 1, &f, &err);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), FTC_FAULT_CRASH_STATUS);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_mkdirs_and_remove(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("fsio-mk");
    char deep[PATH_MAX];
    ftc_err_t err = {0};
    snprintf(deep, sizeof deep, "%s/a/b/c", dir);
    assert_int_equal(ftc_fs_mkdirs(deep, &err), 0);
    assert_int_equal(ftc_fs_mkdirs(deep, &err), 0);
    assert_int_equal(ftc_fs_write_file_atomic(deep, "x", "1", 1, NULL, &err), 0);
    assert_int_equal(ftc_fs_remove_dir(deep, &err), 0);
    struct stat st;
    assert_int_not_equal(stat(deep, &st), 0);
    assert_int_equal(ftc_fs_remove_dir(deep, &err), 0);
    ftc_test_rmrf(dir);
    free(dir);
}

/* Threads of one process that write the same file at once: each write must
 * succeed on its own temp file, and the file must end up equal to one
 * writer's whole content (never a mix, never a missing temp file). */
#define RACE_THREADS 4
#define RACE_ROUNDS 200
typedef struct {
    const char *dir;
    int id;
    int failures;
    char msg[FTC_ERR_MSG_MAX];
} race_arg_t;

static void *race_writer(void *p)
{
    race_arg_t *a = p;
    size_t len = 4096 + (size_t)a->id * 1024; /* each writer its own length */
    char *buf = malloc(len);
    memset(buf, 'a' + a->id, len);
    for (int r = 0; r < RACE_ROUNDS; r++) {
        ftc_err_t err = {0};
        if (ftc_fs_write_file_atomic(a->dir, "shared", buf, len, NULL, &err) != 0 &&
            a->failures++ == 0)
            snprintf(a->msg, sizeof a->msg, "%s", err.msg);
    }
    free(buf);
    return NULL;
}

static void test_threads_same_file(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("fsio-race");
    pthread_t t[RACE_THREADS];
    race_arg_t a[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        a[i] = (race_arg_t){.dir = dir, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, race_writer, &a[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < RACE_THREADS; i++) {
        pthread_join(t[i], NULL);
        if (a[i].failures)
            print_message("writer %d: %d failed writes, first: %s\n", i, a[i].failures,
                          a[i].msg);
        failures += a[i].failures;
    }
    assert_int_equal(failures, 0);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/shared", dir);
    uint8_t *buf;
    size_t len;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fs_read_file(path, 1 << 20, &buf, &len, &err), 0);
    assert_true(len >= 4096 && (len - 4096) % 1024 == 0 && (len - 4096) / 1024 < RACE_THREADS);
    char c = (char)('a' + (len - 4096) / 1024);
    for (size_t i = 0; i < len; i++)
        if (buf[i] != (uint8_t)c)
            fail_msg("byte %zu of %zu is '%c', the writer of this length wrote '%c'", i, len,
                     buf[i], c);
    free(buf);
    /* no temp file left behind */
    DIR *d = opendir(dir);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            files++;
    closedir(d);
    assert_int_equal(files, 1);
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_atomic_write_and_read),
        cmocka_unit_test(test_fault_spec),
        cmocka_unit_test(test_injected_failures_keep_old_file),
        cmocka_unit_test(test_crash_mode_exits),
        cmocka_unit_test(test_mkdirs_and_remove),
        cmocka_unit_test(test_threads_same_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
