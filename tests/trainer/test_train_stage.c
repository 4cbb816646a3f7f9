/*
 * test_train_stage.c — the device-memory path of the multi-process trainer
 * (trainer/stage.h), run on the CPU: real `ftc train` processes over real
 * libfabric (tcp;ofi_rxm) with FTC_TRAIN_FORCE_STAGING=1, which makes the
 * trainer treat the CPU backend's memory as a device's — every collective on
 * model or optimizer memory goes through a host staging buffer with the
 * table's memory ops, host reads (exact sums, hashes, restores) copy through
 * them, and the exact 128-bit gradient sums go over fp32 limbs as they do on
 * NCCL. The staged runs must end with the bits of the unstaged ones:
 *   - DP = 2 against one process (deterministic), and the staging line with
 *     a nonzero count of limb sums;
 *   - DP = 2 stopped at step 2 (persist tier) and resumed at DP = 3 (the
 *     chunks re-partitioned into backend memory): the same bits;
 *   - DP = 2 x TP = 2 against unstaged DP = 1 x TP = 2;
 *   - the numerical guard: a NaN injected on DP rank 1, staged and unstaged;
 *   - `--coll`: an unknown name is a usage error, nccl on this machine
 *     (no GPU, or no NCCL in the build) fails at once naming why, auto logs
 *     which collectives it chose.
 */
#include "ftc_test.h"

#define TRAIN_FIXTURE_JOB_PREFIX "tst"
#define TRAIN_FIXTURE_FI_PROVIDER "tcp;ofi_rxm"
#include "trainer/train_fixture.h"

#define COMMON "--model", "tiny", "--micro-batch", "2", "--global-batch", "12", "--seq-len", "16", \
               "--corpus-bytes", "60000", "--eval-batches", "1", "--threads", "1",                \
               "--log-every", "1", "--coll-timeout-ms", "30000"

static const char *const g_staged[] = {"FTC_TRAIN_FORCE_STAGING=1", NULL};

/* The staging line of a run: the limb sums it counted. */
static unsigned long long limb_sums(const char *file)
{
    char *s = slurp(file);
    const char *l = strstr(s, "copies through the 'cpu' backend's memory ops, ");
    unsigned long long n = 0;
    if (l)
        n = strtoull(l + strlen("copies through the 'cpu' backend's memory ops, "), NULL, 10);
    else
        print_error("%s has no staging line:\n%s\n", file, s);
    free(s);
    return n;
}

static void test_staged_dp(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("trainstage");
    const char *one[] = {COMMON, "--steps", "4", "--deterministic", NULL};
    uint64_t base = run_ok(dir, "dp1", NULL, one, 4);
    const char *a2[] = {COMMON, "--steps", "4", "--nproc", "2", NULL};
    uint64_t h = run_ok(dir, "dp2-staged", g_staged, a2, 4);
    print_message("one process %016llx, DP=2 staged %016llx\n", (unsigned long long)base,
                  (unsigned long long)h);
    assert_true(h == base);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/dp2-staged.out", dir);
    assert_true(expect_said(out, "FTC_TRAIN_FORCE_STAGING set"));
    assert_true(limb_sums(out) >= 4); /* one reduce-scatter per step at least */
    /* stopped at 2 (each rank's chunk persisted from backend memory), resumed
     * at DP = 3: the saved chunks re-split into backend memory */
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    const char *s1[] = {COMMON, "--steps", "4", "--nproc", "2", "--ckpt-dir", ck,
                        "--ckpt-every", "1", "--stop-at", "2", NULL};
    run_ok(dir, "first", g_staged, s1, 2);
    const char *s2[] = {COMMON, "--steps", "4", "--nproc", "3", "--ckpt-dir", ck,
                        "--ckpt-every", "1", NULL};
    h = run_ok(dir, "resumed3", g_staged, s2, 4);
    snprintf(out, sizeof out, "%s/resumed3.out", dir);
    assert_true(expect_said(out, "re-partitioned from 2 DP ranks"));
    assert_true(h == base);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_staged_dp_x_tp(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("trainstage");
    const char *a12[] = {COMMON, "--steps", "3", "--nproc", "2", "--tp", "2", NULL};
    uint64_t tp2 = run_ok(dir, "dp1tp2", NULL, a12, 3);
    const char *a22[] = {COMMON, "--steps", "3", "--nproc", "4", "--tp", "2", NULL};
    uint64_t h = run_ok(dir, "dp2tp2-staged", g_staged, a22, 3);
    print_message("DP=1 x TP=2 %016llx, DP=2 x TP=2 staged %016llx\n", (unsigned long long)tp2,
                  (unsigned long long)h);
    assert_true(h == tp2);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/dp2tp2-staged.out", dir);
    assert_true(limb_sums(out) >= 3);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_staged_guard(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("trainstage");
    const char *a[] = {COMMON, "--steps", "4", "--nproc", "2", "--inject-nan", "1",
                       "--inject-rank", "1", NULL};
    uint64_t plain = run_ok(dir, "nan", NULL, a, 4);
    uint64_t h = run_ok(dir, "nan-staged", g_staged, a, 4);
    assert_true(h == plain);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/nan-staged.out", dir);
    assert_true(expect_said(out, "micro-batch")); /* the guard's line names the micro-batch */
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_coll_option(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("trainstage");
    proc_t p;
    const char *bad[] = {COMMON, "--steps", "1", "--coll", "mpi", NULL};
    run_rc(dir, "bad", NULL, bad, 2, &p);
    assert_true(expect_said(p.out, "--coll 'mpi': cpu, nccl or auto"));
    /* no GPU here: nccl is refused at once, with the reason (no NCCL in the
     * build, or no CUDA device), also when launched as two ranks */
    const char *nccl[] = {COMMON, "--steps", "1", "--coll", "nccl", NULL};
    run_rc(dir, "nccl", NULL, nccl, 1, &p);
    assert_true(expect_said(p.out, "--coll nccl: "));
    const char *nccl2[] = {COMMON, "--steps", "1", "--coll", "nccl", "--nproc", "2", NULL};
    run_rc(dir, "nccl2", NULL, nccl2, 1, &p);
    assert_true(expect_said(p.out, "--coll nccl: "));
    assert_false(said(p.out, "step 1/1"));
    const char *cpu_nccl[] = {COMMON, "--steps", "1", "--coll", "nccl", "--backend", "cpu", NULL};
    run_rc(dir, "cpunccl", NULL, cpu_nccl, 2, &p);
    assert_true(expect_said(p.out, "needs the CUDA kernels backend"));
    const char *aut[] = {COMMON, "--steps", "1", "--nproc", "2", NULL};
    run_rc(dir, "auto", NULL, aut, 0, &p);
    assert_true(expect_said(p.out, "collectives: cpu-fabric (auto: "));
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staged_dp),
        cmocka_unit_test(test_staged_dp_x_tp),
        cmocka_unit_test(test_staged_guard),
        cmocka_unit_test(test_coll_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
