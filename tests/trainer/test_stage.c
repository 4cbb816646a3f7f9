/*
 * test_stage.c — trainer/stage.h between real processes over real libfabric
 * (tcp;ofi_rxm), 3 ranks forked from the test, on the CPU backend with
 * staging forced:
 *   - exact 128-bit sums over fp32 limbs equal the CPU backend's
 *     FTC_COLL_I128 all-reduce bit for bit: random values up to 2^100,
 *     negatives, carry chains (all-ones low words), values near +-2^126, and
 *     more elements than one limb block (2^18);
 *   - a sum overflowing 128 bits is FTC_ERANGE, as the i128 all-reduce;
 *   - staged all-gather / reduce-scatter / broadcast of backend memory equal
 *     the direct calls, and the staging copies are counted (the path ran);
 *   - unforced on the CPU backend nothing is copied (the CPU path unchanged).
 */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/fabric.h"
#include "trainer/coll.h"
#include "trainer/kernels.h"
#include "trainer/stage.h"

#include <signal.h>
#include <sys/wait.h>

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

#define NRANKS 3

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of rank r: a mix of magnitudes and signs whose sum over 3 ranks
 * stays inside 128 bits. */
static i128 gen(int r, size_t i)
{
    uint64_t h = mix(((uint64_t)r << 40) ^ i), l = mix(h);
    i128 v;
    switch (i % 5) {
    case 0: /* up to 2^100 */
        v = (i128)(((u128)(h >> 28) << 64) | l);
        break;
    case 1: /* carry chains: all-ones low word */
        v = (i128)(((u128)(h >> 40) << 64) | ~(uint64_t)0);
        break;
    case 2: /* near +-2^126 (3 of them fit in 2^127 - 1 only below 2^126 * 4/3) */
        v = ((i128)1 << 125) + (i128)(l >> 1);
        break;
    case 3: /* small */
        v = (i128)(h & 0xffff);
        break;
    default:
        v = 0;
    }
    return (h & 1) ? -v : v;
}

static ftc_coll_t *join(const char *dir, int rank)
{
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = "tcp;ofi_rxm";
    ftc_fabric_t *fab = NULL;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&fo, &fab, &err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        _exit(1);
    }
    uint8_t me[FTC_FABRIC_ADDR_MAX], addrs[NRANKS * FTC_FABRIC_ADDR_MAX];
    size_t melen = sizeof me, lens[NRANKS];
    CHILD_CHECK(ftc_fabric_getname(fab, me, &melen) == 0);
    ftc_coll_t *c = NULL;
    if (ftc_coll_exchange_dir(dir, rank, NRANKS, me, melen, addrs, lens,
                              ftc_deadline_in_ms(30000), &err) < 0 ||
        ftc_coll_cpu_create(fab, rank, NRANKS, addrs, lens, NULL, &c, &err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        _exit(1);
    }
    return c;
}

static void rank_main(ftc_coll_t *c)
{
    int me = ftc_coll_rank(c);
    ftc_deadline_t dl = ftc_deadline_in_ms(60000);
    ftc_stage_t st;
    ftc_stage_init(&st, ftc_kernels_cpu(), true);
    CHILD_CHECK(ftc_stage_staged(&st));
    /* exact sums: limbs against the native i128 all-reduce */
    size_t n = ((size_t)1 << 18) + 7; /* two limb blocks */
    i128 *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    CHILD_CHECK(a && b);
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] = gen(me, i);
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_ALL_REDUCE, a, n, FTC_COLL_I128, 0,
                         FTC_STAGE_MEM_HOST, dl) == 0);
    CHILD_CHECK(ftc_coll_all_reduce(c, b, n, FTC_COLL_I128, dl) == 0);
    CHILD_CHECK(memcmp(a, b, n * sizeof *a) == 0);
    for (size_t i = 0; i < n; i += 4099) { /* and against the sum computed here */
        i128 want = 0;
        for (int r = 0; r < NRANKS; r++)
            want += gen(r, i);
        CHILD_CHECK(a[i] == want);
    }
    CHILD_CHECK(st.limb_sums == 1);
    /* reduce-scatter: this rank's chunk as the native one's */
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] = gen(me, i + 11);
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_REDUCE_SCATTER, a, n, FTC_COLL_I128, 0,
                         FTC_STAGE_MEM_HOST, dl) == 0);
    CHILD_CHECK(ftc_coll_reduce_scatter(c, b, n, FTC_COLL_I128, dl) == 0);
    size_t off, len;
    ftc_coll_chunk(n, NRANKS, me, &off, &len);
    CHILD_CHECK(memcmp(a + off, b + off, len * sizeof *a) == 0);
    /* an overflowing sum: 3 x 2^126 > 2^127 - 1, on element 5 only */
    for (size_t i = 0; i < 16; i++)
        a[i] = i == 5 ? (i128)1 << 126 : 1;
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_ALL_REDUCE, a, 16, FTC_COLL_I128, 0,
                         FTC_STAGE_MEM_HOST, dl) == FTC_ERANGE);
    CHILD_CHECK(strstr(ftc_coll_errmsg(c), "element 5") != NULL);
    CHILD_CHECK(ftc_coll_health(c) == 0); /* like the native FTC_ERANGE: still usable */
    free(a);
    free(b);
    /* backend memory through host staging: the same as the direct calls */
    size_t m = 1000;
    float *x = ftc_kernels_cpu()->mem_alloc(m * sizeof(float)), *y = malloc(m * sizeof(float));
    CHILD_CHECK(x && y);
    for (size_t i = 0; i < m; i++)
        x[i] = y[i] = (float)(me + 1) * 0.25f + (float)i;
    uint64_t copies = st.copies;
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_ALL_GATHER, x, m, FTC_COLL_F32, 0,
                         FTC_STAGE_MEM_BACKEND, dl) == 0);
    CHILD_CHECK(ftc_coll_all_gather(c, y, m, FTC_COLL_F32, dl) == 0);
    CHILD_CHECK(memcmp(x, y, m * sizeof(float)) == 0);
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_REDUCE_SCATTER, x, m, FTC_COLL_F32, 0,
                         FTC_STAGE_MEM_BACKEND, dl) == 0);
    CHILD_CHECK(ftc_coll_reduce_scatter(c, y, m, FTC_COLL_F32, dl) == 0);
    ftc_coll_chunk(m, NRANKS, me, &off, &len);
    CHILD_CHECK(memcmp(x + off, y + off, len * sizeof(float)) == 0);
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_BROADCAST, x, m, FTC_COLL_F32, 2,
                         FTC_STAGE_MEM_BACKEND, dl) == 0);
    CHILD_CHECK(ftc_coll_broadcast(c, y, m, FTC_COLL_F32, 2, dl) == 0);
    CHILD_CHECK(memcmp(x, y, m * sizeof(float)) == 0);
    CHILD_CHECK(st.copies == copies + 6); /* D2H and H2D for each of the three */
    const float *h = ftc_stage_host(&st, x, m * sizeof(float));
    CHILD_CHECK(h && h != x && memcmp(h, y, m * sizeof(float)) == 0);
    ftc_stage_fini(&st);
    /* unforced on the CPU: pointers pass through, nothing is copied */
    ftc_stage_init(&st, ftc_kernels_cpu(), false);
    CHILD_CHECK(!ftc_stage_staged(&st));
    CHILD_CHECK(ftc_stage_host(&st, x, m * sizeof(float)) == x);
    CHILD_CHECK(ftc_stage_coll(&st, c, FTC_STAGE_ALL_GATHER, x, m, FTC_COLL_F32, 0,
                         FTC_STAGE_MEM_BACKEND, dl) == 0);
    CHILD_CHECK(st.copies == 0 && st.limb_sums == 0);
    ftc_stage_fini(&st);
    ftc_kernels_cpu()->mem_free(x);
    free(y);
    CHILD_CHECK(!ftc_coll_device_memory(c));
}

static void test_stage_three_ranks(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("stage");
    pid_t pids[NRANKS];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_coll_t *c = join(dir, r);
            rank_main(c);
            ftc_coll_destroy(c);
            exit(0); /* not _exit: lets LeakSanitizer check the rank */
        }
    }
    uint64_t t0 = ftc_now_ns();
    for (int r = 0; r < NRANKS; r++) {
        int st = 0;
        for (;;) {
            if (waitpid(pids[r], &st, WNOHANG) == pids[r])
                break;
            if (ftc_now_ns() - t0 > 120ull * 1000000000ull) { /* backstop */
                for (int q = 0; q < NRANKS; q++)
                    kill(pids[q], SIGKILL);
                waitpid(pids[r], &st, 0);
                break;
            }
            ftc_sleep_ms(5);
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            print_error("rank %d: status 0x%x\n", r, st);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage_three_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
