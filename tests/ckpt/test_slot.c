/*
 * test_slot.c — shm slots: created, reserved and mapped; seen by another
 * process; survive the process that wrote them (a crashed rank); reused at
 * the same size; and a slot larger than /dev/shm's free space is refused up
 * front with the sizes named (no SIGBUS later); ftc_slot_create_all makes
 * a rank's slots at once (one reserved by prefaulting it), all reserved, and
 * refuses up front when together they do not fit; a deferred reservation
 * (FTC_SLOT_DEFER) is taken by ftc_slot_reserve, or by the next create of a
 * slot found at its size with pages missing; a background reservation
 * (ftc_slot_reserve_background) reserves every page on its own thread and
 * ftc_slot_reserve then only marks it, or, the thread not done (held by
 * FTC_TEST_SLOT_RESERVE_DELAY_MS), reserves it without waiting for it, and
 * a slot closed and unlinked meanwhile stops it; a large reservation or
 * prefault (several threads) leaves every page mapped; in a small tmpfs of
 * the test's own (a child in its own mount namespace, as root), the space
 * check counts whole pages and what an existing slot's file holds already;
 * a space check that cannot be made (statvfs failing, a seccomp filter in a
 * child) is a warning and leaves err clear; a refused slot whose empty file
 * existed before the call keeps it; a file by a slot's name that is not this
 * user's own private file (another owner, group or other access) is refused
 * by create and open.
 */
#include "ftc_test.h"

#include "ckpt/slot.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/clock.h"

static void test_create_share_survive(void **state)
{
    (void)state;
    char name[FTC_SLOT_NAME_MAX];
    ftc_err_t err = {0};
    char job[64];
    snprintf(job, sizeof job, "slot-test-%d", (int)getpid());
    assert_int_equal(ftc_slot_name(job, 3, 1, name, sizeof name, &err), 0);
    assert_non_null(strstr(name, ".r3.s1"));
    /* a child (the rank) writes and dies without cleaning up */
    pid_t pid = fork();
    if (pid == 0) {
        ftc_slot_t s;
        if (ftc_slot_create(name, 1 << 20, &s, &err) != 0)
            _exit(1);
        ftc_test_fill(s.base, s.size, 77);
        _exit(0); /* no close, no unlink */
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 0);
    ftc_slot_t s;
    assert_int_equal(ftc_slot_open(name, false, &s, &err), 0);
    assert_int_equal(s.size, 1 << 20);
    uint8_t *want = malloc(s.size);
    ftc_test_fill(want, s.size, 77);
    assert_memory_equal(s.base, want, s.size);
    ftc_slot_close(&s);
    ftc_slot_close(&s); /* twice is fine */
    /* re-created at the same size: the contents stay (an agent restart) */
    assert_int_equal(ftc_slot_create(name, 1 << 20, &s, &err), 0);
    assert_memory_equal(s.base, want, s.size);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    assert_int_equal(ftc_slot_open(name, false, &s, &err), FTC_ENOENT);
    free(want);
}

static void test_too_big_refused_up_front(void **state)
{
    (void)state;
    uint64_t free_b;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shm_free(&free_b, &err), 0);
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.big-test-%d.r0.s0", (int)getpid());
    ftc_slot_t s;
    uint64_t want = free_b + (1ull << 30);
    assert_int_equal(ftc_slot_create(name, want, &s, &err), FTC_ENOSPC);
    assert_non_null(strstr(err.msg, "needs"));
    assert_non_null(strstr(err.msg, "/dev/shm"));
    /* nothing left behind */
    assert_int_equal(ftc_slot_open(name, false, &s, &err), FTC_ENOENT);
}

static void test_bad_names(void **state)
{
    (void)state;
    char name[FTC_SLOT_NAME_MAX];
    ftc_err_t err = {0};
    assert_int_equal(ftc_slot_name("a/b", 0, 0, name, sizeof name, &err), FTC_EINVAL);
    assert_int_equal(ftc_slot_name("", 0, 0, name, sizeof name, &err), FTC_EINVAL);
    ftc_slot_t s;
    assert_int_equal(ftc_slot_create("ftc.zero", 0, &s, &err), FTC_EINVAL);
}

/* every byte of the slot has memory behind it (no SIGBUS on a write) */
static void assert_reserved(const char *name, uint64_t size)
{
    char path[FTC_SLOT_NAME_MAX + 16];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, size);
    assert_true((uint64_t)st.st_blocks * 512 >= size);
}

static void test_create_all(void **state)
{
    (void)state;
    enum { N = 3 };
    const uint64_t size = 3u << 20;
    char job[64], names[N][FTC_SLOT_NAME_MAX];
    const char *np[N];
    snprintf(job, sizeof job, "slot-all-%d", (int)getpid());
    ftc_err_t err = {0};
    for (int i = 0; i < N; i++) {
        assert_int_equal(ftc_slot_name(job, 0, i, names[i], sizeof names[i], &err), 0);
        np[i] = names[i];
    }
    unsigned flags[N] = {FTC_SLOT_POPULATE, 0, 0};
    ftc_slot_t sl[N];
    assert_int_equal(ftc_slot_create_all(np, N, size, flags, sl, &err), 0);
    for (int i = 0; i < N; i++) {
        assert_non_null(sl[i].base);
        assert_int_equal(sl[i].size, size);
        assert_reserved(names[i], size);
        /* only the prefaulted one says so (where the kernel has it at all) */
        if (i > 0)
            assert_false(sl[i].populated);
        ftc_test_fill(sl[i].base, size, 10 + i);
        ftc_slot_close(&sl[i]);
    }
    /* again, at the same size (a restarted agent): reused, contents kept */
    assert_int_equal(ftc_slot_create_all(np, N, size, flags, sl, &err), 0);
    uint8_t *want = malloc(size);
    for (int i = 0; i < N; i++) {
        ftc_test_fill(want, size, 10 + i);
        assert_memory_equal(sl[i].base, want, size);
        assert_false(sl[i].populated); /* nothing reserved this time */
        ftc_slot_close(&sl[i]);
        assert_int_equal(ftc_slot_unlink(names[i], &err), 0);
    }
    free(want);
    /* together larger than /dev/shm's free space, each one smaller: refused
     * before any is made, the total named */
    uint64_t free_b;
    assert_int_equal(ftc_shm_free(&free_b, &err), 0);
    uint64_t each = free_b / 2 + (1u << 20);
    assert_int_equal(ftc_slot_create_all(np, N, each, flags, sl, &err), FTC_ENOSPC);
    assert_non_null(strstr(err.msg, "need"));
    assert_non_null(strstr(err.msg, "/dev/shm"));
    for (int i = 0; i < N; i++) {
        assert_null(sl[i].base);
        assert_int_equal(ftc_slot_open(names[i], false, &sl[i], &err), FTC_ENOENT);
    }
    assert_int_equal(ftc_slot_create_all(np, 0, size, NULL, sl, &err), FTC_EINVAL);
}

static void test_deferred_reservation(void **state)
{
    (void)state;
    const uint64_t size = 4u << 20;
    char name[FTC_SLOT_NAME_MAX], path[FTC_SLOT_NAME_MAX + 16];
    ftc_err_t err = {0};
    snprintf(name, sizeof name, "ftc.slot-defer-%d.r0.s1", (int)getpid());
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    ftc_slot_t s;
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    assert_true(s.unreserved);
    assert_int_equal(s.size, size);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, size);
    assert_true((uint64_t)st.st_blocks * 512 < size); /* sized, not reserved */
    assert_int_equal(ftc_slot_reserve(&s, &err), 0);
    assert_false(s.unreserved);
    assert_reserved(name, size);
    assert_int_equal(ftc_slot_reserve(&s, &err), 0); /* twice is fine */
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_reserve(&s, &err), 0); /* reserved: nothing to do */
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    /* deferred, written in its first page only, abandoned (an agent gone
     * before reserving it): the next create reserves it, contents kept */
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    memset(s.base, 0x5a, 4096);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_create(name, size, &s, &err), 0);
    assert_false(s.unreserved);
    assert_reserved(name, size);
    assert_int_equal(s.base[0], 0x5a);
    assert_int_equal(s.base[4095], 0x5a);
    assert_int_equal(s.base[size - 1], 0);
    ftc_slot_close(&s);
    /* a closed, still unreserved slot is refused, not written */
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    ftc_slot_t closed = s;
    closed.fd = -1;
    assert_int_equal(ftc_slot_reserve(&closed, &err), FTC_EINVAL);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
}

static void test_background_reservation(void **state)
{
    (void)state;
    const uint64_t size = 16u << 20;
    char name[FTC_SLOT_NAME_MAX], path[FTC_SLOT_NAME_MAX + 16];
    ftc_err_t err = {0};
    snprintf(name, sizeof name, "ftc.slot-bg-%d.r0.s1", (int)getpid());
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    ftc_slot_t s;
    struct stat st;
    /* the thread reserves every page; the slot stays unreserved until
     * ftc_slot_reserve, which then has nothing left to do */
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    ftc_slot_reserve_background(&s);
    assert_non_null(s.bg);
    ftc_slot_reserve_background(&s); /* once is enough: a no-op */
    for (int i = 0; i < 1000 && !ftc_slot_reserved_background(&s); i++)
        usleep(10000);
    assert_true(ftc_slot_reserved_background(&s));
    assert_true(s.unreserved);
    assert_int_equal(stat(path, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 >= size);
    assert_int_equal(ftc_slot_reserve(&s, &err), 0);
    assert_false(s.unreserved);
    assert_null(s.bg);
    memset(s.base, 0x33, size);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    /* the thread held before it starts: ftc_slot_reserve does not wait for
     * it (the test's own deadline would end a wait of 60 s) */
    assert_int_equal(setenv("FTC_TEST_SLOT_RESERVE_DELAY_MS", "60000", 1), 0);
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    ftc_slot_reserve_background(&s);
    assert_false(ftc_slot_reserved_background(&s));
    /* the thread's descriptor of the slot, like the slot's own, is not
     * inherited by a process this one forks and execs meanwhile (a rank
     * forked by `ftc run`'s supervisor, which runs the agent) */
    int fds = 0;
    for (int fd = 0; fd < 1024; fd++) {
        char lp[64], target[PATH_MAX];
        snprintf(lp, sizeof lp, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(lp, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (!strstr(target, name))
            continue;
        fds++;
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    }
    assert_int_equal(fds, 2); /* the slot's and the thread's */
    assert_int_equal(stat(path, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 < size);
    assert_int_equal(ftc_slot_reserve(&s, &err), 0);
    assert_false(s.unreserved);
    assert_reserved(name, size);
    memset(s.base, 0x44, size);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    /* closed and unlinked while the thread waits: it stops, nothing left */
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_DEFER, &s, &err), 0);
    ftc_slot_reserve_background(&s);
    ftc_slot_close(&s);
    assert_null(s.bg);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    assert_int_equal(unsetenv("FTC_TEST_SLOT_RESERVE_DELAY_MS"), 0);
    usleep(50000); /* the stopped thread sees it within 10 ms and ends */
    assert_int_equal(stat(path, &st), -1);
    /* a reserved slot, or a closed one: nothing to start */
    assert_int_equal(ftc_slot_create(name, size, &s, &err), 0);
    ftc_slot_reserve_background(&s);
    assert_null(s.bg);
    ftc_slot_close(&s);
    ftc_slot_reserve_background(&s);
    assert_null(s.bg);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
}

/* A large reservation is prefaulted on several threads (pieces of 64 MiB or
 * more, one per core): every page of a 192 MiB slot is there and mapped
 * afterwards, and so is every page of an anonymous range ftc_mem_prefault
 * was given (mincore), its contents zero. */
static void test_populate_large(void **state)
{
    (void)state;
    const uint64_t size = 192u << 20;
    char name[FTC_SLOT_NAME_MAX];
    ftc_err_t err = {0};
    snprintf(name, sizeof name, "ftc.slot-big-%d.r0.s0", (int)getpid());
    ftc_slot_t s;
    uint64_t free_b = 0;
    assert_int_equal(ftc_shm_free(&free_b, &err), 0);
    if (free_b < 2 * size) {
        print_message("skipped: /dev/shm has %llu bytes free\n", (unsigned long long)free_b);
        return;
    }
    assert_int_equal(ftc_slot_create_ex(name, size, FTC_SLOT_POPULATE, &s, &err), 0);
    assert_reserved(name, size);
    long pg = sysconf(_SC_PAGESIZE);
    size_t pages = (size_t)(size / (uint64_t)pg);
    unsigned char *vec = malloc(pages);
    if (s.populated) { /* the kernel has MADV_POPULATE_WRITE: mapped here too */
        assert_int_equal(mincore(s.base, size, vec), 0);
        for (size_t i = 0; i < pages; i++)
            assert_true(vec[i] & 1);
    }
    for (uint64_t off = 0; off < size; off += 64u << 20)
        assert_int_equal(s.base[off], 0);
    ftc_slot_close(&s);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    uint8_t *anon = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(anon != MAP_FAILED);
    ftc_mem_prefault(anon + 100, size - 200); /* whole pages inside it only */
    assert_int_equal(mincore(anon, size, vec), 0);
#ifdef MADV_POPULATE_WRITE
    for (size_t i = 1; i + 1 < pages; i++)
        assert_true(vec[i] & 1);
#endif
    assert_int_equal(anon[size / 2], 0);
    munmap(anon, size);
    free(vec);
}

/* ---- a small /dev/shm of its own --------------------------------------------- */

static uint64_t page_size(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (uint64_t)pg : 4096u;
}

static uint64_t held_bytes(const char *name)
{
    char path[FTC_SLOT_NAME_MAX + 16];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    struct stat st;
    CHILD_CHECK(stat(path, &st) == 0);
    return (uint64_t)st.st_blocks * 512;
}

/* Fills what is left of /dev/shm but keep bytes with slot name (reserved). */
static void fill_shm(const char *name, uint64_t keep)
{
    uint64_t free_b = 0;
    ftc_err_t err = {0};
    ftc_slot_t s;
    CHILD_CHECK(ftc_shm_free(&free_b, &err) == 0 && free_b > keep);
    if (ftc_slot_create(name, free_b - keep, &s, &err) != 0)
        fprintf(stderr, "filler: %s\n", err.msg);
    CHILD_CHECK(err.code == 0);
    ftc_slot_close(&s);
    CHILD_CHECK(ftc_shm_free(&free_b, &err) == 0 && free_b == keep);
}

/* Waits (60 s at most) for the child pid, which passes (exit 0) or is
 * skipped (exit 77: `skip` says why); `what` names it when it does not end. */
static void wait_child(pid_t pid, const char *what, const char *skip)
{
    ftc_deadline_t d = ftc_deadline_in_ms(60000);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("%s did not end within 60 s", what);
        }
        ftc_sleep_ms(10);
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        print_message("skipped: %s\n", skip);
        return;
    }
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Runs fn in a child of its own mount namespace whose /dev/shm is a fresh
 * tmpfs of `pages` pages (shm_open finds its slots there); the child's
 * checks end it with status 1. Needs root (CAP_SYS_ADMIN): skipped
 * otherwise, with a message. */
static void in_small_shm(void (*fn)(void), uint64_t pages)
{
    if (geteuid() != 0) {
        print_message("skipped: a private tmpfs on /dev/shm needs root\n");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char opt[64];
        snprintf(opt, sizeof opt, "size=%llu", (unsigned long long)(pages * page_size()));
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("ftc-test-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opt) != 0) {
            fprintf(stderr, "a private /dev/shm: %s\n", strerror(errno));
            _exit(77);
        }
        fn();
        _exit(0); /* the tmpfs goes with the namespace */
    }
    wait_child(pid, "the child in a small /dev/shm", "no private tmpfs on /dev/shm here");
}

/* Re-creating a slot counts the pages its file holds already, not its
 * size in bytes: one of 8 pages + 1 byte (9 pages held) grows to 9 pages
 * in a full /dev/shm; and a deferred one (sized, no page held) of 16 pages
 * with 8 free is refused up front, by ftc_slot_create and
 * ftc_slot_create_all, naming the 16 pages it needs (not failing in its
 * reservation, nor handed out unreserved), and it stays. */
static void need_counts_held_pages(void)
{
    uint64_t pg = page_size(), free_b = 0;
    ftc_err_t err = {0};
    ftc_slot_t s;
    const char *a = "ftc.small.r0.s0", *b = "ftc.small.r0.s1", *fill = "ftc.small.fill";
    CHILD_CHECK(ftc_slot_create(a, 8 * pg + 1, &s, &err) == 0);
    ftc_slot_close(&s);
    CHILD_CHECK(held_bytes(a) == 9 * pg);
    fill_shm(fill, 0);
    int rc = ftc_slot_create(a, 9 * pg, &s, &err);
    if (rc)
        fprintf(stderr, "grown within its pages: %s\n", err.msg);
    CHILD_CHECK(rc == 0 && s.size == 9 * pg);
    ftc_slot_close(&s);
    CHILD_CHECK(ftc_slot_create_all(&a, 1, 9 * pg, NULL, &s, &err) == 0);
    ftc_slot_close(&s);
    CHILD_CHECK(ftc_slot_unlink(fill, &err) == 0 && ftc_slot_unlink(a, &err) == 0);
    CHILD_CHECK(ftc_slot_create_ex(b, 16 * pg, FTC_SLOT_DEFER, &s, &err) == 0);
    ftc_slot_close(&s);
    CHILD_CHECK(held_bytes(b) == 0);
    fill_shm(fill, 8 * pg);
    char want[64];
    snprintf(want, sizeof want, "needs %llu bytes", (unsigned long long)(16 * pg));
    rc = ftc_slot_create(b, 16 * pg, &s, &err);
    fprintf(stderr, "deferred slot, reserved: %s\n", err.msg);
    CHILD_CHECK(rc == FTC_ENOSPC && strstr(err.msg, want) && strstr(err.msg, "/dev/shm"));
    memset(&err, 0, sizeof err);
    unsigned defer = FTC_SLOT_DEFER;
    rc = ftc_slot_create_all(&b, 1, 16 * pg, &defer, &s, &err);
    fprintf(stderr, "deferred slot, deferred again: %s\n", err.msg);
    snprintf(want, sizeof want, "need %llu bytes", (unsigned long long)(16 * pg));
    CHILD_CHECK(rc == FTC_ENOSPC && strstr(err.msg, want) && s.base == NULL);
    CHILD_CHECK(ftc_shm_free(&free_b, &err) == 0 && free_b == 8 * pg);
    CHILD_CHECK(ftc_slot_open(b, false, &s, &err) == 0 && s.size == 16 * pg); /* still there */
    ftc_slot_close(&s);
}

static void test_need_counts_held_pages(void **state)
{
    (void)state;
    in_small_shm(need_counts_held_pages, 64);
}

/* tmpfs allocates whole pages: three slots of k pages + 1 byte each (the
 * agent's: two reserved, one deferred) fit /dev/shm in bytes but not in
 * pages, and are refused up front naming the 3 (k + 1) pages they need,
 * none of them made. */
static void refused_by_page_rounding(void)
{
    uint64_t pg = page_size(), free_b = 0;
    ftc_err_t err = {0};
    CHILD_CHECK(ftc_shm_free(&free_b, &err) == 0);
    uint64_t pages = free_b / pg, k = pages / 3, size = k * pg + 1;
    CHILD_CHECK(pages % 3 != 0 && 3 * size <= free_b && 3 * (k + 1) * pg > free_b);
    const char *names[3] = {"ftc.round.r0.s0", "ftc.round.r0.s1", "ftc.round.r0.s2"};
    unsigned flags[3] = {FTC_SLOT_POPULATE, 0, FTC_SLOT_DEFER};
    ftc_slot_t sl[3];
    int rc = ftc_slot_create_all(names, 3, size, flags, sl, &err);
    fprintf(stderr, "3 slots of %llu bytes in %llu: %s\n", (unsigned long long)size,
            (unsigned long long)free_b, rc ? err.msg : "made");
    char want[64];
    snprintf(want, sizeof want, "need %llu bytes", (unsigned long long)(3 * (k + 1) * pg));
    CHILD_CHECK(rc == FTC_ENOSPC && strstr(err.msg, want) && strstr(err.msg, "/dev/shm"));
    for (int i = 0; i < 3; i++) {
        ftc_slot_t s;
        CHILD_CHECK(sl[i].base == NULL && ftc_slot_open(names[i], false, &s, &err) == FTC_ENOENT);
    }
    /* two of them fit */
    CHILD_CHECK(ftc_slot_create_all(names, 2, size, flags, sl, &err) == 0);
    for (int i = 0; i < 2; i++)
        ftc_slot_close(&sl[i]);
}

static void test_refused_by_page_rounding(void **state)
{
    (void)state;
    in_small_shm(refused_by_page_rounding, 256);
}

/* A slot refused for space (FTC_ENOSPC) whose file existed before the call,
 * empty (another process's, just created: shm_open then ftruncate): the
 * refusal unlinked every file of size 0, so that one too. It stays; a file
 * the call created itself is still removed. */
static void test_refused_keeps_existing_empty(void **state)
{
    (void)state;
    char name[FTC_SLOT_NAME_MAX], path[FTC_SLOT_NAME_MAX + 16];
    snprintf(name, sizeof name, "ftc.empty-test-%d.r0.s0", (int)getpid());
    snprintf(path, sizeof path, "/%s", name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    uint64_t free_b = 0;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shm_free(&free_b, &err), 0);
    ftc_slot_t s;
    assert_int_equal(ftc_slot_create(name, free_b + (1ull << 30), &s, &err), FTC_ENOSPC);
    fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
    print_message("the empty file after the refusal: %s\n", fd >= 0 ? "kept" : "unlinked");
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ftc_slot_unlink(name, &err), 0);
    /* a file of its own: removed */
    assert_int_equal(ftc_slot_create(name, free_b + (1ull << 30), &s, &err), FTC_ENOSPC);
    assert_true(shm_open(path, O_RDONLY | O_CLOEXEC, 0) < 0 && errno == ENOENT);
}

/* A file by a slot's name that ftc did not make for this user (/dev/shm is
 * writable by all): one of mode 0666 of this user, and, as root, one of
 * mode 0600 of another user (uid 65534) made first under the name. Both
 * were adopted by ftc_slot_create (its contents, readable and writable by
 * others, trusted as this rank's slot) and mapped by ftc_slot_open, and
 * ftc_slot_keep_other_size renamed it away (its stat followed links too).
 * Now all three refuse it, naming owner and mode, and leave it alone. */
static void test_foreign_file_refused(void **state)
{
    (void)state;
    char name[FTC_SLOT_NAME_MAX], path[FTC_SLOT_NAME_MAX + 16];
    snprintf(name, sizeof name, "ftc.foreign-test-%d.r0.s0", (int)getpid());
    snprintf(path, sizeof path, "/%s", name);
    const uint64_t size = 1 << 16;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && geteuid() != 0) {
            print_message("not root: the other user's file is not tried\n");
            break;
        }
        int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)size), 0);
        assert_int_equal(posix_fallocate(fd, 0, (off_t)size), 0);
        if (pass == 0)
            assert_int_equal(fchmod(fd, 0666), 0);
        else
            assert_int_equal(fchown(fd, 65534, 65534), 0);
        close(fd);
        ftc_slot_t s;
        ftc_err_t err = {0};
        int rc = ftc_slot_create(name, size, &s, &err);
        print_message("pass %d: create %s '%s'\n", pass, ftc_errname(rc), err.msg);
        if (rc == 0)
            ftc_slot_close(&s);
        assert_int_equal(rc, FTC_EEXIST);
        assert_non_null(strstr(err.msg, name));
        assert_non_null(strstr(err.msg, pass == 0 ? "mode 0666" : "owner uid 65534"));
        ftc_err_t e2 = {0};
        rc = ftc_slot_open(name, true, &s, &e2);
        print_message("pass %d: open %s '%s'\n", pass, ftc_errname(rc), e2.msg);
        if (rc == 0)
            ftc_slot_close(&s);
        assert_int_equal(rc, FTC_EAUTH);
        /* nor kept (renamed) as the previous layout's slot: another size */
        char prev[FTC_SLOT_NAME_MAX];
        snprintf(prev, sizeof prev, "ftc.foreign-test-%d.r0.p0", (int)getpid());
        rc = ftc_slot_keep_other_size(name, prev, 2 * size, &e2);
        print_message("pass %d: keep %s '%s'\n", pass, ftc_errname(rc), e2.msg);
        ftc_slot_unlink(prev, &err);
        assert_int_equal(rc, FTC_EEXIST);
        struct stat st;
        char full[FTC_SLOT_NAME_MAX + 16];
        snprintf(full, sizeof full, "/dev/shm/%s", name);
        assert_int_equal(stat(full, &st), 0); /* left alone */
        assert_int_equal((uint64_t)st.st_size, size);
        assert_int_equal(ftc_slot_unlink(name, &err), 0);
    }
}

/* From now on every statfs of this process fails with EIO (a seccomp
 * filter; statvfs is statfs): false if the filter cannot be installed. */
static bool fail_statfs(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_statfs, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EIO),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* The child of test_statvfs_fails: slots made while statvfs fails. */
static void statvfs_fails(void)
{
    char job[64], names[2][FTC_SLOT_NAME_MAX], log[] = "/tmp/ftc-slot-log-XXXXXX";
    snprintf(job, sizeof job, "slot-statvfs-%d", (int)getpid());
    const char *np[2] = {names[0], names[1]};
    ftc_err_t err = {0};
    for (int i = 0; i < 2; i++)
        CHILD_CHECK(ftc_slot_name(job, 0, i, names[i], sizeof names[i], &err) == 0);
    int lfd = mkstemp(log), saved = dup(STDERR_FILENO);
    CHILD_CHECK(lfd >= 0 && saved >= 0 && unlink(log) == 0);
    if (!fail_statfs()) {
        fprintf(stderr, "no seccomp filter here: %s\n", strerror(errno));
        _exit(77);
    }
    uint64_t free_b = 0;
    CHILD_CHECK(ftc_shm_free(&free_b, &err) != 0); /* the filter works */
    /* the slots' log lines into the file */
    CHILD_CHECK(dup2(lfd, STDERR_FILENO) == STDERR_FILENO);
    ftc_slot_t s, sl[2];
    ftc_err_t e1 = {0}, e2 = {0};
    int rc1 = ftc_slot_create(names[0], 1 << 20, &s, &e1);
    if (!rc1)
        ftc_slot_close(&s);
    CHILD_CHECK(ftc_slot_unlink(names[0], &err) == 0);
    int rc2 = ftc_slot_create_all(np, 2, 1 << 20, NULL, sl, &e2);
    for (int i = 0; i < 2; i++) {
        ftc_slot_close(&sl[i]);
        CHILD_CHECK(ftc_slot_unlink(names[i], &err) == 0);
    }
    CHILD_CHECK(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
    char text[4096] = "";
    ssize_t n = pread(lfd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    fprintf(stderr, "create: %d '%s'; create_all: %d '%s'; log:\n%s", rc1, e1.msg, rc2,
            e2.msg, text);
    CHILD_CHECK(rc1 == 0 && e1.code == 0 && e1.msg[0] == 0);
    CHILD_CHECK(rc2 == 0 && e2.code == 0 && e2.msg[0] == 0);
    CHILD_CHECK(strstr(text, "WARN slot") && strstr(text, "cannot be read"));
}

/* A space check that cannot be made (statvfs of /dev/shm fails): the slot
 * was made without the check, but err kept the statvfs message though the
 * call returned 0, and nothing said the check was skipped. Now a warning
 * says so and err is clear (ftc_slot_create and ftc_slot_create_all). */
static void test_statvfs_fails(void **state)
{
    (void)state;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        statvfs_fails();
        _exit(0);
    }
    wait_child(pid, "the child", "no seccomp filter here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_share_survive),
        cmocka_unit_test(test_too_big_refused_up_front),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_create_all),
        cmocka_unit_test(test_deferred_reservation),
        cmocka_unit_test(test_background_reservation),
        cmocka_unit_test(test_populate_large),
        cmocka_unit_test(test_need_counts_held_pages),
        cmocka_unit_test(test_refused_by_page_rounding),
        cmocka_unit_test(test_refused_keeps_existing_empty),
        cmocka_unit_test(test_statvfs_fails),
        cmocka_unit_test(test_foreign_file_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
