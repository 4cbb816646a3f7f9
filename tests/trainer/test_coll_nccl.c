/*
 * test_coll_nccl.c — the NCCL backend (trainer/coll_nccl.h) on real GPUs,
 * ranks as forked processes (CUDA is touched only in the children: the
 * device count is probed in a child too, since a process that initialised
 * CUDA cannot use it after fork).
 *
 * NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
 * detected", NCCL >= 2.5), so with one GPU (the lent H200) this runs:
 *   - every collective with 1 rank against the CPU reference;
 *   - two ranks on one device: create fails with an error, no hang;
 *   - NCCL init waiting for a rank that announced itself but never calls
 *     init: the abort flag ends it promptly, the deadline ends it too;
 *   - the Redis bootstrap (a real redis-server) for a 1-rank group;
 * and with 2+ GPUs also: every collective on 2..4 ranks on random sizes,
 * non-divisible ones included (the padded scratch path), F32 sums bit-exact
 * for 2 ranks and within rounding for more; an abort from another thread
 * interrupting a blocked all-reduce; a SIGKILLed peer making the survivors
 * return an error by their deadline; with 3+ GPUs, shrink after a kill.
 *
 * Exits 77 ("SKIPPED: no CUDA device") without a GPU, 1 under
 * FTC_REQUIRE_GPU=1 then. Timings are printed, not asserted (loose bounds
 * only: ctest's TIMEOUT is the backstop for a hang).
 */
#include "detect/redis_fixture.h"

#include "core/gpu.h"
#include "trainer/coll_nccl.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

static int g_ndev;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "pid %d: %s:%d: check failed: %s\n", (int)getpid(), __FILE__,         \
                    __LINE__, #cond);                                                              \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_RC(expr, c)                                                                          \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "pid %d: %s:%d: %s = %d: %s\n", (int)getpid(), __FILE__, __LINE__,    \
                    #expr, rc_, ftc_coll_errmsg(c));                                               \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CU(expr) CHECK((expr) == cudaSuccess)

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float genf(uint64_t seed, int rank, size_t i)
{
    uint64_t h = mix(seed ^ mix(((uint64_t)rank << 40) ^ i));
    float u = (float)((h >> 40) & 0xffffff) / 16777216.0f - 0.5f;
    int e = (int)((h >> 8) % 11) - 5;
    return ldexpf(u, e);
}

/* ---- spawning ranks -------------------------------------------------------- */

typedef struct grp {
    const char *dir;             /* directory carrier, or */
    const ftc_redis_url_t *url;  /* Redis carrier */
    const char *job;
    uint64_t gen;
    int keep_on_failure;
    int same_device;             /* every rank on device 0 */
} grp_t;

typedef void (*rank_fn)(ftc_coll_t *c, void *arg);

static ftc_coll_t *join(const grp_t *g, int rank, int n, ftc_err_t *err, int *rc)
{
    ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
    ftc_redis_t *r = NULL;
    b.dir = g->dir;
    b.job = g->job;
    b.generation = g->gen;
    b.keep_on_failure = g->keep_on_failure;
    if (g->url) {
        r = ftc_redis_connect(g->url, NULL, err);
        CHECK(r);
        b.redis = r;
    }
    ftc_coll_t *c = NULL;
    *rc = ftc_coll_nccl_create(rank, n, g->same_device ? 0 : rank % g_ndev, &b,
                               ftc_deadline_in_ms(g->same_device ? 20000 : 60000), &c, err);
    ftc_redis_close(r);
    return c;
}

/* Forks n ranks running fn (fn NULL: only create, expecting failure). */
static void spawn(int n, const grp_t *g, rank_fn fn, void *arg, int *st)
{
    pid_t pids[8];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_err_t err = {0};
            int rc;
            ftc_coll_t *c = join(g, r, n, &err, &rc);
            if (!fn) { /* create is expected to fail */
                printf("  rank %d: create returned %d: %s\n", r, rc, err.msg);
                _exit(rc < 0 && !c ? 0 : 1);
            }
            if (rc < 0) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            CHECK(!strcmp(ftc_coll_backend(c), "nccl"));
            fn(c, arg);
            ftc_coll_destroy(c);
            exit(0);
        }
    }
    uint64_t t0 = ftc_now_ns();
    for (int r = 0; r < n; r++) {
        for (;;) {
            pid_t w = waitpid(pids[r], &st[r], WNOHANG);
            if (w == pids[r])
                break;
            if (ftc_now_ns() - t0 > 240ull * 1000000000ull) {
                for (int q = 0; q < n; q++)
                    kill(pids[q], SIGKILL);
                waitpid(pids[r], &st[r], 0);
                break;
            }
            ftc_sleep_ms(5);
        }
    }
}

static void expect_ok(int n, const int *st)
{
    for (int r = 0; r < n; r++) {
        if (!WIFEXITED(st[r]) || WEXITSTATUS(st[r]) != 0)
            print_error("rank %d: status 0x%x\n", r, st[r]);
        assert_true(WIFEXITED(st[r]));
        assert_int_equal(WEXITSTATUS(st[r]), 0);
    }
}

static void need_devices(int k)
{
    if (g_ndev < k) {
        printf("  needs %d GPUs (NCCL allows one rank per GPU), this machine has %d: skipped\n",
               k, g_ndev);
        skip();
    }
}

/* ---- every collective against the CPU reference ------------------------------ */

typedef struct sizes {
    uint64_t seed;
    size_t n;
    size_t v[24];
} sizes_t;

static void check_sizes(ftc_coll_t *c, void *arg)
{
    const sizes_t *sz = arg;
    int me = ftc_coll_rank(c), n = ftc_coll_size(c);
    for (size_t k = 0; k < sz->n; k++) {
        size_t cnt = sz->v[k], nb = cnt * 4 + 16;
        uint64_t seed = sz->seed + k;
        ftc_deadline_t dl = ftc_deadline_in_ms(60000);
        float *h = malloc(nb), *ref = malloc(nb);
        uint8_t *hb = malloc(cnt + 16);
        float *d = NULL;
        uint8_t *db = NULL;
        CHECK(h && ref && hb);
        CU(cudaMalloc((void **)&d, nb));
        CU(cudaMalloc((void **)&db, cnt + 16));
        for (size_t i = 0; i < cnt; i++) {
            float s = genf(seed, 0, i);
            for (int r = 1; r < n; r++)
                s += genf(seed, r, i);
            ref[i] = s;
        }
        /* all_reduce: bit-exact for 1-2 ranks (fp addition commutes), else
         * within the rounding of an n-term sum in another order */
        for (size_t i = 0; i < cnt; i++)
            h[i] = genf(seed, me, i);
        CU(cudaMemcpy(d, h, cnt * 4, cudaMemcpyHostToDevice));
        CHECK_RC(ftc_coll_all_reduce(c, d, cnt, FTC_COLL_F32, dl), c);
        CU(cudaMemcpy(h, d, cnt * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < cnt; i++) {
            if (n <= 2)
                CHECK(h[i] == ref[i]);
            else
                CHECK(fabsf(h[i] - ref[i]) <= 1e-5f * (float)n * 32.0f);
        }
        /* reduce_scatter: own chunk (uneven counts go through the scratch) */
        size_t off, len;
        ftc_coll_chunk(cnt, n, me, &off, &len);
        for (size_t i = 0; i < cnt; i++)
            h[i] = genf(seed, me, i);
        CU(cudaMemcpy(d, h, cnt * 4, cudaMemcpyHostToDevice));
        CHECK_RC(ftc_coll_reduce_scatter(c, d, cnt, FTC_COLL_F32, dl), c);
        CU(cudaMemcpy(h, d, cnt * 4, cudaMemcpyDeviceToHost));
        for (size_t i = off; i < off + len; i++) {
            if (n <= 2)
                CHECK(h[i] == ref[i]);
            else
                CHECK(fabsf(h[i] - ref[i]) <= 1e-5f * (float)n * 32.0f);
        }
        /* all_gather: rank r's chunk r (distinct values) everywhere, exactly */
        for (size_t i = 0; i < cnt; i++)
            h[i] = -1.0f;
        for (size_t i = off; i < off + len; i++)
            h[i] = genf(seed ^ 77, 0, i);
        CU(cudaMemcpy(d, h, cnt * 4, cudaMemcpyHostToDevice));
        CHECK_RC(ftc_coll_all_gather(c, d, cnt, FTC_COLL_F32, dl), c);
        CU(cudaMemcpy(h, d, cnt * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < cnt; i++)
            CHECK(h[i] == genf(seed ^ 77, 0, i));
        /* broadcast bytes from root k mod n */
        int root = (int)(k % (size_t)n);
        for (size_t i = 0; i < cnt; i++)
            hb[i] = me == root ? (uint8_t)mix(seed + i) : 0xEE;
        CU(cudaMemcpy(db, hb, cnt, cudaMemcpyHostToDevice));
        CHECK_RC(ftc_coll_broadcast(c, db, cnt, FTC_COLL_U8, root, dl), c);
        CU(cudaMemcpy(hb, db, cnt, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < cnt; i++)
            CHECK(hb[i] == (uint8_t)mix(seed + i));
        CHECK_RC(ftc_coll_barrier(c, dl), c);
        CU(cudaFree(d));
        CU(cudaFree(db));
        free(h), free(ref), free(hb);
    }
    /* i128 sums are refused with a message (and break the communicator) */
    void *q = NULL;
    CU(cudaMalloc(&q, 64));
    CHECK(ftc_coll_all_reduce(c, q, 4, FTC_COLL_I128, ftc_deadline_in_ms(5000)) ==
          FTC_EUNSUPPORTED);
    CHECK(strstr(ftc_coll_errmsg(c), "I128"));
    CU(cudaFree(q));
}

static void run_sizes(int n, uint64_t seed)
{
    sizes_t sz = {.seed = seed};
    size_t fixed[] = {0, 1, 2, 3, 5, (size_t)n + 1, 1023, 4099, 65537, 1000003};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        sz.v[sz.n++] = fixed[i];
    for (int i = 0; i < 4; i++)
        sz.v[sz.n++] = 1 + mix(seed * 31 + (uint64_t)i) % 3000000;
    char *dir = ftc_test_tmpdir("nccl");
    grp_t g = {.dir = dir, .gen = 1};
    int st[8];
    uint64_t t0 = ftc_now_ns();
    spawn(n, &g, check_sizes, &sz, st);
    printf("  %d rank(s): %zu sizes in %.0f ms\n", n, sz.n, (double)(ftc_now_ns() - t0) / 1e6);
    ftc_test_rmrf(dir);
    free(dir);
    expect_ok(n, st);
}

static void test_sizes_1(void **s) { (void)s; run_sizes(1, 21); }
static void test_sizes_2(void **s) { (void)s; need_devices(2); run_sizes(2, 22); }
static void test_sizes_n(void **s)
{
    (void)s;
    need_devices(3);
    run_sizes(g_ndev < 4 ? g_ndev : 4, 23);
}

/* ---- two ranks on one GPU: refused, no hang -------------------------------- */

static void test_two_ranks_one_gpu(void **s)
{
    (void)s;
    char *dir = ftc_test_tmpdir("nccl");
    grp_t g = {.dir = dir, .gen = 1, .same_device = 1};
    int st[2];
    spawn(2, &g, NULL, NULL, st);
    ftc_test_rmrf(dir);
    free(dir);
    expect_ok(2, st);
}

/* ---- init waiting for a rank that never calls it --------------------------- */

static atomic_int g_flag;

static void *raise_flag(void *arg)
{
    ftc_sleep_ms((uint64_t)(uintptr_t)arg);
    atomic_store(&g_flag, 1);
    return NULL;
}

static void test_init_abort_and_deadline(void **s)
{
    (void)s;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *dir = ftc_test_tmpdir("nccl");
        for (int gen = 1; gen <= 2; gen++) {
            /* rank 1 announces itself (so the rendezvous passes) but never
             * calls NCCL init: rank 0 waits inside ncclCommInitRankConfig */
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/nccl.%d.rank1", dir, gen);
            FILE *f = fopen(p, "w");
            CHECK(f);
            fclose(f);
            ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
            b.dir = dir;
            b.generation = (uint64_t)gen;
            b.abort = &g_flag;
            atomic_store(&g_flag, 0);
            pthread_t t;
            if (gen == 1)
                CHECK(pthread_create(&t, NULL, raise_flag, (void *)(uintptr_t)500) == 0);
            ftc_coll_t *c = NULL;
            ftc_err_t err = {0};
            uint64_t t0 = ftc_now_ns();
            int rc = ftc_coll_nccl_create(0, 2, 0, &b, ftc_deadline_in_ms(gen == 1 ? 60000 : 1500),
                                          &c, &err);
            double ms = (double)(ftc_now_ns() - t0) / 1e6;
            if (gen == 1)
                pthread_join(t, NULL);
            printf("  init %s: %d after %.0f ms: %s\n", gen == 1 ? "aborted at 500 ms"
                                                              : "deadline 1500 ms",
                   rc, ms, err.msg);
            CHECK(!c);
            CHECK(rc == (gen == 1 ? FTC_ECANCELED : FTC_ETIMEDOUT));
            CHECK(ms < 30000); /* far below the 60 s deadline */
        }
        ftc_test_rmrf(dir);
        free(dir);
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- Redis bootstrap ---------------------------------------------------------- */

static void small_ops(ftc_coll_t *c, void *arg)
{
    (void)arg;
    float *d = NULL, h[5] = {1, 2, 3, 4, 5};
    CU(cudaMalloc((void **)&d, sizeof h));
    CU(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    CHECK_RC(ftc_coll_all_reduce(c, d, 5, FTC_COLL_F32, ftc_deadline_in_ms(30000)), c);
    CU(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 5; i++)
        CHECK(h[i] == (float)(i + 1) * (float)ftc_coll_size(c));
    CHECK_RC(ftc_coll_barrier(c, ftc_deadline_in_ms(30000)), c);
    CU(cudaFree(d));
}

/* The GPU machine may have no redis-server (scripts/gpu-check carries it
 * as a .deb, FTC_DEBS): there this case is skipped with a line saying so,
 * not failed; the rendezvous over Redis itself is covered on the CPU by
 * test_trainer_coll_nccl_boot. */
static bool redis_server_on_path(void)
{
    const char *path = getenv("PATH");
    char p[PATH_MAX];
    while (path && *path) {
        const char *e = strchr(path, ':');
        size_t n = e ? (size_t)(e - path) : strlen(path);
        if (n && n < sizeof p - 16) {
            snprintf(p, sizeof p, "%.*s/redis-server", (int)n, path);
            if (access(p, X_OK) == 0)
                return true;
        }
        path = e ? e + 1 : NULL;
    }
    return false;
}

static int redis_setup_or_skip(void **state)
{
    if (!redis_server_on_path()) {
        *state = NULL;
        return 0;
    }
    return redis_fixture_setup(state);
}

static int redis_teardown_if_set(void **state)
{
    return *state ? redis_fixture_teardown(state) : 0;
}

static void test_redis_bootstrap(void **state)
{
    redis_fixture_t *f = *state;
    if (!f) {
        printf("  no redis-server on PATH (scripts/gpu-check: add it to FTC_DEBS): the NCCL "
               "bootstrap over Redis is skipped here\n");
        skip();
    }
    char job[64];
    snprintf(job, sizeof job, "nccl-%ld", (long)getpid());
    int n = g_ndev < 2 ? 1 : 2;
    grp_t g = {.url = ftc_redis_server_url(f->srv), .job = job, .gen = 7};
    int st[2];
    spawn(n, &g, small_ops, NULL, st);
    expect_ok(n, st);
    printf("  redis bootstrap: %d rank(s) ran an all-reduce and a barrier\n", n);
}

/* ---- abort from another thread, a killed peer, shrink (2+ GPUs) --------------- */

static void *aborter(void *arg)
{
    ftc_sleep_ms(300);
    ftc_coll_abort(arg);
    return NULL;
}

static void abort_blocked(ftc_coll_t *c, void *arg)
{
    (void)arg;
    float *d = NULL;
    CU(cudaMalloc((void **)&d, (size_t)4 << 20));
    CHECK_RC(ftc_coll_barrier(c, ftc_deadline_in_ms(30000)), c);
    if (ftc_coll_rank(c) == 1) { /* alive, never joins the all-reduce */
        ftc_sleep_ms(3000);
        CU(cudaFree(d));
        return;
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, aborter, c) == 0);
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_coll_all_reduce(c, d, (size_t)1 << 20, FTC_COLL_F32, ftc_deadline_in_ms(30000));
    double ms = (double)(ftc_now_ns() - t0) / 1e6;
    pthread_join(t, NULL);
    printf("  abort at 300 ms: all-reduce returned %d after %.0f ms: %s\n", rc, ms,
           ftc_coll_errmsg(c));
    CHECK(rc == FTC_ECANCELED);
    CHECK(ms < 20000);
    CHECK(ftc_coll_barrier(c, ftc_deadline_in_ms(5000)) == FTC_ECANCELED);
    CU(cudaFree(d));
}

static void test_abort_from_thread(void **s)
{
    (void)s;
    need_devices(2);
    char *dir = ftc_test_tmpdir("nccl");
    grp_t g = {.dir = dir, .gen = 1};
    int st[2];
    spawn(2, &g, abort_blocked, NULL, st);
    ftc_test_rmrf(dir);
    free(dir);
    expect_ok(2, st);
}

#define KILL_DL_MS 3000
#define KILL_COUNT ((size_t)4 << 20)

static void *suicide(void *arg)
{
    ftc_sleep_ms((uint64_t)(uintptr_t)arg);
    raise(SIGKILL);
    return NULL;
}

static void killed_peer(ftc_coll_t *c, void *arg)
{
    int do_shrink = arg != NULL;
    int me = ftc_coll_rank(c), n = ftc_coll_size(c);
    float *d = NULL;
    CU(cudaMalloc((void **)&d, KILL_COUNT * 4));
    CU(cudaMemset(d, 0, KILL_COUNT * 4));
    CHECK_RC(ftc_coll_barrier(c, ftc_deadline_in_ms(30000)), c);
    if (me == n - 1) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, suicide, (void *)(uintptr_t)200) == 0);
    }
    for (int it = 0; it < 1000000; it++) {
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_coll_all_reduce(c, d, KILL_COUNT, FTC_COLL_F32,
                                     ftc_deadline_in_ms(KILL_DL_MS));
        double ms = (double)(ftc_now_ns() - t0) / 1e6;
        if (rc == 0)
            continue;
        printf("  rank %d: all-reduce %d failed after %.0f ms (deadline %d): %s\n", me, it, ms,
               KILL_DL_MS, ftc_coll_errmsg(c));
        CHECK(rc == FTC_ETIMEDOUT || rc == FTC_EFABRIC || rc == FTC_ECUDA);
        CHECK(ms < KILL_DL_MS + 20000);
        CHECK(ftc_coll_barrier(c, ftc_deadline_in_ms(5000)) == rc); /* broken: sticky */
        if (do_shrink) {
            int ex = n - 1;
            ftc_coll_t *nc = NULL;
            ftc_err_t err = {0};
            t0 = ftc_now_ns();
            int src = ftc_coll_nccl_shrink(c, &ex, 1, ftc_deadline_in_ms(30000), &nc, &err);
            printf("  rank %d: shrink returned %d after %.0f ms: %s\n", me, src,
                   (double)(ftc_now_ns() - t0) / 1e6, err.msg);
            CHECK(src == 0);
            CHECK(ftc_coll_size(nc) == n - 1 && ftc_coll_rank(nc) == me);
            small_ops(nc, NULL);
            ftc_coll_destroy(nc);
        }
        CU(cudaFree(d));
        return;
    }
    CHECK(!"the all-reduces never failed");
}

static void run_kill(int n, int shrink)
{
    char *dir = ftc_test_tmpdir("nccl");
    grp_t g = {.dir = dir, .gen = 1, .keep_on_failure = shrink};
    int st[8];
    spawn(n, &g, killed_peer, shrink ? (void *)1 : NULL, st);
    ftc_test_rmrf(dir);
    free(dir);
    assert_true(WIFSIGNALED(st[n - 1]) && WTERMSIG(st[n - 1]) == SIGKILL);
    expect_ok(n - 1, st);
}

static void test_peer_killed(void **s) { (void)s; need_devices(2); run_kill(2, 0); }
static void test_shrink_after_kill(void **s) { (void)s; need_devices(3); run_kill(3, 1); }

/* The device count, probed in a child: CUDA must stay uninitialised here. */
static int probe_devices(char *why, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ftc_err_t err = {0};
        int n = ftc_gpu_count(&err);
        if (write(fds[1], err.msg, strlen(err.msg)) < 0)
            _exit(0);
        _exit(n > 100 ? 100 : n);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], why, cap - 1);
    why[got > 0 ? got : 0] = 0;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char why[FTC_ERR_MSG_MAX];
    g_ndev = probe_devices(why, sizeof why);
    if (g_ndev < 1) {
        const char *req = getenv("FTC_REQUIRE_GPU");
        if (req && !strcmp(req, "1")) {
            printf("FAILED: no CUDA device and FTC_REQUIRE_GPU=1 (%s)\n", why);
            return 1;
        }
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    printf("  %d CUDA device(s); NCCL backend built: %d\n", g_ndev, ftc_coll_nccl_built());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_1),
        cmocka_unit_test(test_two_ranks_one_gpu),
        cmocka_unit_test(test_init_abort_and_deadline),
        cmocka_unit_test_setup_teardown(test_redis_bootstrap, redis_setup_or_skip,
                                        redis_teardown_if_set),
        cmocka_unit_test(test_sizes_2),
        cmocka_unit_test(test_sizes_n),
        cmocka_unit_test(test_abort_from_thread),
        cmocka_unit_test(test_peer_killed),
        cmocka_unit_test(test_shrink_after_kill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
