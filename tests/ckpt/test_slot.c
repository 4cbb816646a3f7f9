/*
 * test_slot.c — shm slots: created, reserved and mapped; seen by another
 * process; survive the process that wrote them (a crashed rank); reused at
 * the same size; and a slot larger than /dev/shm's free space is refused up
 * front with the sizes named (no SIGBUS later); ftc_slot_create_all makes
 * a rank's slots at once (one reserved by prefaulting it), all reserved, and
 * refuses up front when together they do not fit; a deferred reservation
 * (FTC_SLOT_DEFER) is taken by ftc_slot_reserve, or by the next create of a
 * slot found at its size with pages missing; a large reservation or
 * prefault (several threads) leaves every page mapped.
 */
#include "ftc_test.h"

#include "ckpt/slot.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_share_survive),
        cmocka_unit_test(test_too_big_refused_up_front),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_create_all),
        cmocka_unit_test(test_deferred_reservation),
        cmocka_unit_test(test_populate_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
