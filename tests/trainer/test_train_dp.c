/*
 * test_train_dp.c — real data parallelism end to end, with real `ftc train`
 * processes (the launcher, torchrun-style ranks), real libfabric
 * (tcp;ofi_rxm and shm), a real redis-server with two real `ftc agent`s, and
 * real SIGKILLs. Each run prints the xxh3 of its final parameters:
 *   - DP = 2, 3, 4 processes over tcp;ofi_rxm and DP = 3 over shm end with
 *     the bits of the single-process run (non-divisible chunks included);
 *     two ranks meeting through the TCP rendezvous (MASTER_ADDR/PORT) too;
 *   - in-process ranks (ftc_dist_join + ftc_trainer_create with dp_coll) on
 *     a model of 5410 parameters (not divisible by 3 or 4: uneven ZeRO-1
 *     chunks) for DP = 3 and 4: the single-process bits, parameters and
 *     the gathered moments; the same stopped at step 2 at DP = 3 (4) and
 *     resumed at DP = 2 (3): the uneven chunks re-partitioned, same bits;
 *     with a listed skip and a loss spike, stopped at DP = 2 and resumed at
 *     DP = 3: the guard's skip list and spike window cross the re-partition;
 *   - DP = 2 stopped at step 2 (persist tier, one chunk per rank) and
 *     resumed to the end: the same bits; DP = 3 stopped at step 2 and
 *     resumed at DP = 2 (chunks re-partitioned): the same bits, the saved
 *     rank-d2 only read (a temp file there stays); and when
 *     the DP = 2 run's next checkpoint was committed by rank 0 only, the
 *     restart goes back to the DP = 3 step (the abandoned versions dropped):
 *     the same bits; a single-process checkpoint resumed by --nproc, and
 *     chunks resumed by one process, are refused (they started over); DP = 2
 *     whose first checkpoint only rank 1 committed: a fresh start (rank 1's
 *     lone version dropped), the same bits; with another --seed, refused;
 *   - a rank killed with SIGKILL mid-run: the launcher and the surviving
 *     rank exit with an error naming the failure (bounded by the collective
 *     deadline; ctest's TIMEOUT is the backstop, no time is asserted);
 *   - with agents: DP = 2 checkpointing every step through include/ftc.h,
 *     one rank SIGKILLed mid-run, the job restarted: it restores the
 *     committed step and ends with the uninterrupted run's bits; a restart
 *     whose newest step cannot be put together (rank 1's copies corrupted)
 *     and whose step one interval back never existed (the interval changed
 *     from 3 to 2) walks back to step 3: the same bits (rank 1's failed
 *     in-place restore a WARN naming the error); the same with a
 *     batch skipped between steps 3 and 6: the given-up step 6's skip list
 *     does not stay (the clean run's bits).
 */
#include "ftc_test.h"

#include "ckpt/shard.h"
#include "trainer/dist.h"
#include "trainer/train.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define TRAIN_FIXTURE_JOB_PREFIX "tdp"
#include "trainer/train_fixture.h"

/* the model and batch of every run here: tiny, 6 micro-batches per step. The
 * collective deadline is generous: a rank's synchronous persist write
 * (zstd + fsync) can take seconds on a loaded machine while its peers wait;
 * the kill tests use shorter ones. */
#define COMMON "--model", "tiny", "--micro-batch", "2", "--global-batch", "12", "--seq-len", "16", \
               "--corpus-bytes", "60000", "--eval-batches", "1", "--threads", "1",                \
               "--log-every", "1", "--coll-timeout-ms", "30000"

static uint64_t g_base; /* the single-process run of 4 steps */

/* Sets g_base unless test_dp_bit_identical has (a test run alone, FTC_TEST_FILTER). */
static void ensure_base(const char *dir)
{
    if (!g_base) {
        const char *one[] = {COMMON, "--steps", "4", "--deterministic", NULL};
        g_base = run_ok(dir, "dp1", NULL, one, 4);
    }
}

/* Runs nproc DP ranks for 4 steps, checkpointing every step in ck, to a clean
 * end or to --stop-at stop_at (NULL: none); the parameter hash after steps. */
static uint64_t run_dp_ckpt(const char *dir, const char *tag, const char *nproc, const char *ck,
                            const char *stop_at, int steps)
{
    const char *a[] = {COMMON, "--steps", "4", "--nproc", nproc, "--ckpt-dir", ck,
                       "--ckpt-every", "1", stop_at ? "--stop-at" : NULL, stop_at, NULL};
    return run_ok(dir, tag, NULL, a, steps);
}

static void test_dp_bit_identical(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    const char *one[] = {COMMON, "--steps", "4", "--deterministic", NULL};
    g_base = run_ok(dir, "dp1", NULL, one, 4);
    print_message("DP=1 (one process): %016llx\n", (unsigned long long)g_base);
    const char *tcp[] = {"FI_PROVIDER=tcp;ofi_rxm", NULL};
    const char *shm[] = {"FI_PROVIDER=shm", NULL};
    for (int n = 2; n <= 4; n++) {
        char nn[8], tag[32];
        snprintf(nn, sizeof nn, "%d", n);
        snprintf(tag, sizeof tag, "dp%d-tcp", n);
        const char *a[] = {COMMON, "--steps", "4", "--nproc", nn, NULL};
        uint64_t h = run_ok(dir, tag, tcp, a, 4);
        print_message("DP=%d over tcp;ofi_rxm: %016llx\n", n, (unsigned long long)h);
        assert_true(h == g_base);
    }
    const char *a3[] = {COMMON, "--steps", "4", "--nproc", "3", NULL};
    uint64_t h = run_ok(dir, "dp3-shm", shm, a3, 4);
    print_message("DP=3 over shm: %016llx\n", (unsigned long long)h);
    assert_true(h == g_base);
    /* torchrun style: two ranks meeting at MASTER_ADDR:MASTER_PORT */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
    close(s);
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", ntohs(sa.sin_port));
    proc_t p[2];
    for (int r = 0; r < 2; r++) {
        const char *env[] = {r ? "RANK=1" : "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                             port, "FI_PROVIDER=tcp;ofi_rxm", NULL};
        const char *a[] = {COMMON, "--steps", "4", NULL};
        start(&p[r], dir, r ? "tr1" : "tr0", env, a);
    }
    assert_int_equal(finish(&p[1], 120000), 0);
    assert_int_equal(finish(&p[0], 120000), 0);
    assert_true(params_hash(p[0].out, 4) == g_base);
    char *s1 = slurp(p[1].out);
    assert_null(strstr(s1, "step ")); /* only rank 0 prints the progress */
    free(s1);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- uneven chunks, in-process ranks ------------------------------------- */

/* odd_opts' guard case (the forked ranks inherit it): batch 1 skipped from
 * the list and a loss spike injected at step 3 (sigma 1, a window of 2), 5
 * steps; false: neither, 3 steps. */
static bool g_odd_guard;

static ftc_train_options_t odd_opts(void)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){257, 16, 2, 2, 10}; /* 10 x 541 = 5410 parameters */
    o.micro_batch = 2;
    o.seq_len = 16;
    o.micro_steps = 5;
    o.steps = 3;
    o.optim.lr = 3e-3f;
    o.optim.warmup = 2;
    o.corpus_bytes = 40000;
    o.deterministic = true;
    o.job_id = "test-odd";
    if (g_odd_guard) {
        static const uint64_t skip[1] = {1};
        o.steps = 5;
        o.skip_steps = skip, o.n_skip_steps = 1;
        o.inject_spike_step = 3, o.guard_spike_sigma = 1.0, o.guard_window = 2;
    }
    return o;
}

/* Runs the odd model with n ranks (exchange directory dir) to step `until`
 * (all when 0), checkpointing every step into ckpt when given; writes the
 * params and both full moments to `out` (n floats each) by gathering the
 * ranks' chunks. */
static void odd_run_to(int n, const char *dir, const char *ckpt, uint64_t until, float *out,
                       size_t *np)
{
    size_t P = 5410;
    float *sh = mmap(NULL, 3 * P * sizeof(float), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    pid_t pids[4];
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_err_t err = {0};
            ftc_dist_t *d = NULL;
            ftc_dist_opts_t dop = {.world = n, .tp = 1, .rank = r, .dir = dir,
                                   .timeout_ms = 60000, .provider = "tcp;ofi_rxm"};
            if (n > 1 && ftc_dist_join(&dop, &d, &err) < 0) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            ftc_train_options_t o = odd_opts();
            o.dp_coll = d ? d->dp : NULL;
            o.ckpt_dir = ckpt, o.ckpt_every = 1;
            ftc_trainer_t *t = ftc_trainer_create(&o, &err);
            if (!t) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            while (ftc_trainer_steps_done(t) < (until ? until : o.steps))
                if (ftc_trainer_step(t, NULL, &err) < 0) {
                    fprintf(stderr, "rank %d: %s\n", r, err.msg);
                    _exit(1);
                }
            size_t nparam = ftc_model_num_params(ftc_trainer_model(t)), off, len;
            if (nparam != P)
                _exit(3);
            ftc_coll_chunk(P, n, r, &off, &len);
            const ftc_adamw_t *a = ftc_trainer_adamw(t);
            if (a->n != len)
                _exit(4);
            if (r == 0)
                memcpy(sh, ftc_model_params(ftc_trainer_model(t)), P * sizeof(float));
            memcpy(sh + P + off, a->m, len * sizeof(float));
            memcpy(sh + 2 * P + off, a->v, len * sizeof(float));
            ftc_trainer_destroy(t);
            ftc_dist_destroy(d);
            exit(0);
        }
    }
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("DP=%d rank %d: status 0x%x", n, r, st);
    }
    memcpy(out, sh, 3 * P * sizeof(float));
    munmap(sh, 3 * P * sizeof(float));
    *np = P;
}

static void odd_run(int n, const char *dir, float *out, size_t *np)
{
    odd_run_to(n, dir, NULL, 0, out, np);
}

static void test_uneven_chunks_in_process(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    size_t P = 5410, np = 0;
    float *base = malloc(3 * P * sizeof(float)), *got = malloc(3 * P * sizeof(float));
    assert_non_null(base);
    assert_non_null(got);
    /* reference: one process (forked too: OpenMP threads and fork do not
     * mix, so the test process itself never runs a kernel) */
    odd_run(1, dir, base, &np);
    assert_int_equal(np, P);
    for (int n = 3; n <= 4; n++) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/g%d", dir, n);
        assert_int_equal(mkdir(sub, 0700), 0);
        odd_run(n, sub, got, &np);
        assert_int_equal(np, P);
        assert_memory_equal(base, got, P * sizeof(float));                 /* parameters */
        assert_memory_equal(base + P, got + P, 2 * P * sizeof(float));     /* m and v */
        print_message("DP=%d in-process ranks, %zu parameters (uneven chunks): identical\n", n,
                      P);
    }
    free(base);
    free(got);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ZeRO-1 chunks re-partitioned between uneven degrees (5410 parameters:
 * chunks of 1804/1803/1803 -> 2705/2705, 1353/1353/1352/1352 ->
 * 1804/1803/1803): stopped at step 2 of 3 at DP a, resumed at DP b from the
 * persist tier, the parameters and both gathered moments equal the
 * single-process run's. */
static void test_uneven_repartition(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    size_t P = 5410, np = 0;
    float *base = malloc(3 * P * sizeof(float)), *got = malloc(3 * P * sizeof(float));
    assert_non_null(base);
    assert_non_null(got);
    odd_run(1, dir, base, &np);
    static const int deg[2][2] = {{3, 2}, {4, 3}};
    for (int k = 0; k < 2; k++) {
        int a = deg[k][0], b = deg[k][1];
        char x1[PATH_MAX], x2[PATH_MAX], ck[PATH_MAX];
        snprintf(x1, sizeof x1, "%s/r%d-a", dir, k);
        snprintf(x2, sizeof x2, "%s/r%d-b", dir, k);
        snprintf(ck, sizeof ck, "%s/r%d-ck", dir, k);
        assert_int_equal(mkdir(x1, 0700), 0);
        assert_int_equal(mkdir(x2, 0700), 0);
        odd_run_to(a, x1, ck, 2, got, &np);
        odd_run_to(b, x2, ck, 0, got, &np);
        assert_int_equal(np, P);
        assert_memory_equal(base, got, P * sizeof(float));             /* parameters */
        assert_memory_equal(base + P, got + P, 2 * P * sizeof(float)); /* m and v */
        print_message("DP=%d -> %d, %zu parameters (uneven chunks re-partitioned): identical\n",
                      a, b, P);
    }
    free(base);
    free(got);
    ftc_test_rmrf(dir);
    free(dir);
}

/* The guard's state crosses a ZeRO-1 re-partition: a run stopped at step 2
 * at DP = 2 (batch 1 skipped from the list; the spike window holds step 0's
 * loss) and resumed at DP = 3 still counts the skip in its learning rate and
 * bias correction, and judges step 3's spike by the restored window (an
 * empty one would let the spike through): the single-process bits,
 * parameters and both moments. */
static void test_guard_state_repartition(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    size_t P = 5410, np = 0;
    float *base = malloc(3 * P * sizeof(float)), *got = malloc(3 * P * sizeof(float));
    assert_non_null(base);
    assert_non_null(got);
    char x0[PATH_MAX], x1[PATH_MAX], x2[PATH_MAX], ck[PATH_MAX];
    snprintf(x0, sizeof x0, "%s/x0", dir);
    snprintf(x1, sizeof x1, "%s/x1", dir);
    snprintf(x2, sizeof x2, "%s/x2", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    assert_int_equal(mkdir(x0, 0700), 0);
    assert_int_equal(mkdir(x1, 0700), 0);
    assert_int_equal(mkdir(x2, 0700), 0);
    g_odd_guard = true;
    odd_run_to(1, x0, NULL, 0, base, &np);
    odd_run_to(2, x1, ck, 2, got, &np);
    odd_run_to(3, x2, ck, 0, got, &np);
    g_odd_guard = false;
    assert_int_equal(np, P);
    assert_memory_equal(base, got, P * sizeof(float));             /* parameters */
    assert_memory_equal(base + P, got + P, 2 * P * sizeof(float)); /* m and v */
    free(base);
    free(got);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_stop_resume_dp2(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    ensure_base(dir);
    run_dp_ckpt(dir, "first", "2", ck, "2", 2);
    char f[PATH_MAX + 64];
    snprintf(f, sizeof f, "%s/rank-d1/v%020d/shard-d1-t0-p0.ftcz", ck, 2);
    assert_true(access(f, R_OK) == 0); /* each rank persisted its own chunk */
    uint64_t h = run_dp_ckpt(dir, "resumed", "2", ck, NULL, 4);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/resumed.out", dir);
    assert_true(expect_said(out, "restored step 2"));
    assert_true(h == g_base);
    assert_true(expect_said(out, "rank-d0")); /* each rank its own chunk: no re-partitioning */
    /* another DP degree: saved by 3 ranks at step 2, resumed by 2 (the chunks
     * gathered and re-split), the same bits at the end */
    char ck3[PATH_MAX + 8];
    snprintf(ck3, sizeof ck3, "%s/ckpt3", dir);
    run_dp_ckpt(dir, "first3", "3", ck3, "2", 2);
    /* rank-d2 is read by the ranks of the new degree, never written: a temp
     * file there (of a writer they cannot tell from a dead one: another node's,
     * on a shared file system) stays (ftc_persist_open_reader) */
    char tmpf[PATH_MAX + 64];
    snprintf(tmpf, sizeof tmpf, "%s/rank-d2/.probe.tmp.2147483600", ck3);
    FILE *fp = fopen(tmpf, "w");
    assert_non_null(fp);
    fclose(fp);
    uint64_t h2 = run_dp_ckpt(dir, "resumed2", "2", ck3, NULL, 4);
    snprintf(out, sizeof out, "%s/resumed2.out", dir);
    assert_true(expect_said(out, "re-partitioned from 3 DP ranks"));
    assert_true(h2 == g_base);
    assert_true(access(tmpf, F_OK) == 0); /* the writer's open removed it */
    ftc_test_rmrf(dir);
    free(dir);
}

/* A checkpoint cut short after a change of DP degree: saved by 3 ranks at
 * step 1, resumed by 2 (re-partitioned), whose checkpoint of step 2 only
 * rank 0 committed (rank 1 died before its marker). rank-d0's newest version
 * is then of DP 2 but the step all ranks have is 1, of DP 3: the restart
 * took the degree from rank-d0's newest version and failed for good ("checkpoint
 * holds ... bytes"); and restored at step 1, rank 0's step-2 version made its
 * next checkpoint fail ("already committed"). Now: step 1 from 3 chunks,
 * the abandoned step-2 versions dropped, the uninterrupted bits. */
static void test_cut_short_after_degree_change(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    ensure_base(dir);
    run_dp_ckpt(dir, "first3", "3", ck, "1", 1);
    run_dp_ckpt(dir, "then2", "2", ck, "2", 2);
    char f[PATH_MAX + 64];
    snprintf(f, sizeof f, "%s/rank-d1/v%020d/COMMITTED", ck, 2);
    assert_int_equal(unlink(f), 0); /* rank 1 never committed step 2 */
    uint64_t h = run_dp_ckpt(dir, "resumed", "2", ck, NULL, 4);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/resumed.out", dir);
    assert_true(expect_said(out, "restored step 1 from"));
    assert_true(expect_said(out, "re-partitioned from 3 DP ranks"));
    assert_true(expect_said(out, "newer than step 1"));
    assert_true(h == g_base);
    ftc_test_rmrf(dir);
    free(dir);
}

/* A first checkpoint cut short: DP = 2, rank 1 committed step 1 and rank 0
 * was killed before its marker. No step was committed by both, so nothing can
 * be restored: the restart refused ("other ranks have checkpoints but rank-d0
 * has none"). Now it starts fresh, dropping rank 1's lone version with a
 * warning, and ends with the uninterrupted bits; the same directory with
 * another configuration (--seed) is still refused. */
static void test_lone_first_checkpoint(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    char ck[PATH_MAX];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    ensure_base(dir);
    run_dp_ckpt(dir, "first", "2", ck, "1", 1);
    char f[PATH_MAX + 64];
    snprintf(f, sizeof f, "%s/rank-d0/v%020d/COMMITTED", ck, 1);
    assert_int_equal(unlink(f), 0); /* rank 0 never committed its first checkpoint */
    /* another configuration: refused, nothing dropped */
    const char *other[] = {COMMON, "--steps", "4", "--nproc", "2", "--ckpt-dir", ck,
                           "--ckpt-every", "1", "--seed", "7", NULL};
    proc_t p;
    run_rc(dir, "other", NULL, other, 2, &p);
    assert_true(expect_said(p.out, "different configuration"));
    assert_false(said(p.out, "step 1/4"));
    snprintf(f, sizeof f, "%s/rank-d1/v%020d/COMMITTED", ck, 1);
    assert_true(access(f, F_OK) == 0);
    uint64_t h = run_dp_ckpt(dir, "fresh", "2", ck, NULL, 4);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/fresh.out", dir);
    assert_true(expect_said(out, "committed by rank-d1 only"));
    assert_true(expect_said(out, "starting at step 0"));
    assert_false(said(out, "restored step"));
    assert_true(h == g_base);
    assert_true(access(f, F_OK) == 0); /* step 1 written again, by both ranks */
    snprintf(f, sizeof f, "%s/rank-d0/v%020d/COMMITTED", ck, 4);
    assert_true(access(f, F_OK) == 0);
    ftc_test_rmrf(dir);
    free(dir);
}

/* One --ckpt-dir, the other kind of checkpoint: the ZeRO-1 chunks of real DP
 * ranks resumed by one process, a single-process state resumed by --nproc.
 * Each looked only for its own kind and, finding none, started over at step
 * 0 without a word (hours of training redone, and two series that disagree
 * left in the directory). Both refuse now, naming what the directory holds. */
static void test_other_kind_refused(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    char ck[PATH_MAX], ck1[PATH_MAX + 8];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(ck1, sizeof ck1, "%s/ckpt1", dir);
    run_dp_ckpt(dir, "chunks", "2", ck, "2", 2);
    const char *one[] = {COMMON, "--steps", "4", "--deterministic", "--ckpt-dir", ck, NULL};
    proc_t p;
    run_rc(dir, "one-on-chunks", NULL, one, 2, &p); /* FTC_ECONFIG: exit 2 */
    assert_true(expect_said(p.out, "holds ZeRO-1 chunks of real DP ranks (rank-d0: step 2)"));
    assert_false(said(p.out, "step 1/4"));
    const char *whole[] = {COMMON, "--steps", "4", "--deterministic", "--ckpt-dir", ck1,
                           "--ckpt-every", "1", "--stop-at", "2", NULL};
    run_ok(dir, "whole", NULL, whole, 2);
    const char *dp2[] = {COMMON, "--steps", "4", "--nproc", "2", "--ckpt-dir", ck1, NULL};
    run_rc(dir, "dp2-on-whole", NULL, dp2, 2, &p);
    assert_true(expect_said(p.out, "holds a single-process state (step 2)"));
    assert_false(said(p.out, "step 1/4"));
    ftc_test_rmrf(dir);
    free(dir);
}

/* Pid of the launcher's child number `which` (from /proc). */
static pid_t child_of(pid_t parent, int which)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)parent, (int)parent);
    char s[512] = {0}, *p = s; /* a /proc file: size 0 to stat, so read it plainly */
    FILE *fp = fopen(path, "r");
    if (fp) {
        size_t n = fread(s, 1, sizeof s - 1, fp);
        s[n] = 0;
        fclose(fp);
    }
    pid_t got = 0;
    for (int i = 0; i <= which && *p; i++) {
        got = (pid_t)strtol(p, &p, 10);
        while (*p == ' ')
            p++;
    }
    return got;
}

static void test_killed_rank_fails_peers(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traindp");
    const char *a[] = {COMMON, "--steps", "100000", "--nproc", "2", "--coll-timeout-ms", "8000",
                       NULL};
    proc_t p;
    start(&p, dir, "launcher", NULL, a);
    wait_said(&p, "step 2/", 60000);
    pid_t victim = child_of(p.pid, 1);
    assert_true(victim > 0);
    uint64_t t0 = ftc_now_ns();
    kill(victim, SIGKILL);
    int rc = finish(&p, 90000); /* the deadline is 8 s: a hang fails here */
    print_message("launcher exited %d, %.1f s after the kill\n", rc,
                  (double)(ftc_now_ns() - t0) * 1e-9);
    assert_int_not_equal(rc, 0);
    assert_true(expect_said(p.out, "killed by signal 9"));
    assert_true(expect_said(p.out, "a peer rank probably died"));
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- with agents ---------------------------------------------------------- */

/* Starts the two ranks of the DP = 2 job (one per node) for `steps` steps. */
static void start_job(proc_t *p, const char *jobdir, const char *job, const char *tag,
                      const char *steps)
{
    const char *a[] = {COMMON, "--steps", steps, "--coll-timeout-ms", "10000", NULL};
    start_ranks(p, jobdir, job, tag, a);
}

static void test_agent_kill_restart(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    /* the uninterrupted run of 8 steps */
    const char *one[] = {COMMON, "--steps", "8", "--deterministic", NULL};
    uint64_t want = run_ok(jobdir, "base8", NULL, one, 8);
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    /* the job, slowed down by nothing: kill rank 1 once step 4 is reported */
    proc_t p[2];
    start_job(p, jobdir, job, "run1", "8");
    wait_said(&p[0], "step 4/", 90000);
    kill(p[1].pid, SIGKILL);
    finish(&p[1], 10000);
    int rc = finish(&p[0], 90000);
    if (rc == 0) /* rank 0 may have finished first; then nothing to resume */
        print_message("rank 0 finished before the kill took effect\n");
    else
        assert_true(said(p[0].out, "a peer rank probably died") || expect_said(p[0].out, "agent"));
    /* the restarted job restores the committed step and ends with the same bits */
    start_job(p, jobdir, job, "run2", "8");
    assert_int_equal(finish(&p[1], 120000), 0);
    int rc0 = finish(&p[0], 120000);
    if (rc0 != 0) {
        char *s = slurp(p[0].out);
        print_error("restarted rank 0 exited %d:\n%s\n", rc0, s);
        free(s);
    }
    assert_int_equal(rc0, 0);
    assert_true(expect_said(p[0].out, "restored step"));
    char *s = slurp(p[0].out);
    char *r = strstr(s, "restored step ");
    print_message("restart: %.*s\n", r ? (int)strcspn(r, "\n") : 0, r ? r : "");
    free(s);
    assert_true(params_hash(p[0].out, 8) == want);
}

/* Corrupts (one payload byte; flip false: only counts) every shared-memory
 * copy of DP rank `rank`'s shard of step `step` of job `job` (its node's slot,
 * the peer's replica); the number of copies found. */
static int shm_copies(const char *job, uint64_t step, uint32_t rank, bool flip)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "ftc.%s.", job);
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        char path[512];
        snprintf(path, sizeof path, "/dev/shm/%s", de->d_name);
        int fd = open(path, O_RDWR);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size == 0) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        uint8_t *b = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (b == MAP_FAILED)
            continue;
        uint64_t total = 0;
        ftc_shard_view_t v;
        if (ftc_shard_peek_size(b, (size_t)sb.st_size, &total, NULL) == 0 &&
            total <= (uint64_t)sb.st_size && ftc_shard_open(&v, b, total, 0, NULL) == 0 &&
            v.info.step == step && v.info.dp_rank == rank && v.payload_size > 0) {
            if (flip)
                b[v.payload_offset + v.payload_size / 2] ^= 0x5a;
            n++;
        }
        munmap(b, (size_t)sb.st_size);
    }
    closedir(d);
    return n;
}

/* Corrupts both copies of rank `rank`'s shard of `step` (its node's slot and
 * the peer's replica, pushed after the commit or just before it) once both
 * exist, so none is left clean; on a timeout, prints the agents' logs. */
static void corrupt_both_copies(const char *jobdir, const char *job, uint64_t step, uint32_t rank)
{
    ftc_deadline_t d = ftc_deadline_in_ms(60000);
    int n;
    while ((n = shm_copies(job, step, rank, false)) < 2 && !ftc_deadline_expired(d))
        ftc_sleep_ms(50);
    if (n == 2)
        n = shm_copies(job, step, rank, true);
    if (n != 2) {
        for (int i = 0; i < 2; i++) {
            char path[PATH_MAX + 32];
            snprintf(path, sizeof path, "%s/agent%d.log", jobdir, i);
            char *s = slurp(path);
            print_error("%d copies of rank %u's step %llu; agent %d's log:\n%s\n", n, rank,
                        (unsigned long long)step, i, s ? s : "(none)");
            free(s);
        }
    }
    assert_int_equal(n, 2);
}

/* The restart's retry loop walks over a step that was never checkpointed:
 * checkpoints every 3 steps (3, 6) and then a restart with --ckpt-every 2
 * (the interval may change; the agent's checkpoint.busy=skip policy leaves
 * the same gap). Rank 1's shard of step 6 is corrupted in every memory copy
 * (no persist tier): step 6 cannot be put together, and the step one
 * interval back, 4, never existed: the retry gave up ("could not read the
 * committed checkpoint"). It must walk back to step 3: the same bits. */
static void test_agent_retry_walks_back(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    const char *one[] = {COMMON, "--steps", "8", "--deterministic", NULL};
    uint64_t want = run_ok(jobdir, "base8", NULL, one, 8);
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    proc_t p[2];
    const char *a1[] = {COMMON, "--steps", "8", "--ckpt-every", "3", "--stop-at", "6",
                        "--coll-timeout-ms", "20000", NULL};
    start_ranks(p, jobdir, job, "run1", a1);
    assert_int_equal(finish(&p[1], 120000), 0);
    assert_int_equal(finish(&p[0], 120000), 0);
    corrupt_both_copies(jobdir, job, 6, 1);
    const char *a2[] = {COMMON, "--steps", "8", "--ckpt-every", "2", "--coll-timeout-ms", "20000",
                        NULL};
    start_ranks(p, jobdir, job, "run2", a2);
    int rc1 = finish(&p[1], 120000), rc0 = finish(&p[0], 120000);
    if (rc0 || rc1) {
        char *s = slurp(p[0].out);
        print_error("restarted rank 0 exited %d (rank 1 %d):\n%s\n", rc0, rc1, s);
        free(s);
    }
    assert_int_equal(rc0, 0);
    assert_int_equal(rc1, 0);
    assert_true(expect_said(p[0].out, "trying the checkpoint of step 4"));
    assert_true(expect_said(p[0].out, "restored step 3 through the agent"));
    assert_true(params_hash(p[0].out, 8) == want);
    /* rank 1's own in-place restore of step 6 failed: a warning naming the error */
    assert_true(expect_said(p[1].out, "WARN train: DP rank 1: in-place restore failed (FTC_E"));
}

/* A step given up leaves nothing of its records in the state: run 1 skips
 * batch 5 (a NaN injected into rank 1's micro-batch), so step 6's records
 * list step 5 and step 3's do not; step 6 cannot be put together on rank 1
 * (its copies corrupted) and the restart goes back to step 3. Step 6's skip
 * list stayed merged (rank 0 had accepted its record, and a record was
 * merged before its checks), so the replay skipped batch 5 although nothing
 * was wrong with it. Now: the bits of the uninterrupted clean run. */
static void test_agent_retry_no_leaked_skips(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    const char *one[] = {COMMON, "--steps", "8", "--deterministic", NULL};
    uint64_t want = run_ok(jobdir, "base8", NULL, one, 8);
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    proc_t p[2];
    const char *a1[] = {COMMON, "--steps", "8", "--ckpt-every", "3", "--stop-at", "6",
                        "--inject-nan", "5", "--inject-rank", "1", "--coll-timeout-ms", "20000",
                        NULL};
    start_ranks(p, jobdir, job, "run1", a1);
    assert_int_equal(finish(&p[1], 120000), 0);
    assert_int_equal(finish(&p[0], 120000), 0);
    assert_true(expect_said(p[0].out, "batch 5 skipped"));
    corrupt_both_copies(jobdir, job, 6, 1);
    const char *a2[] = {COMMON, "--steps", "8", "--ckpt-every", "3", "--coll-timeout-ms", "20000",
                        NULL};
    start_ranks(p, jobdir, job, "run2", a2);
    int rc1 = finish(&p[1], 120000), rc0 = finish(&p[0], 120000);
    if (rc0 || rc1) { /* with the leak: rank 0 skipped batch 5, rank 1 did not, and they parted */
        for (int r = 0; r < 2; r++) {
            char *s = slurp(p[r].out);
            print_error("restarted rank %d exited %d:\n%s\n", r, r ? rc1 : rc0, s);
            free(s);
        }
    }
    assert_int_equal(rc0, 0);
    assert_int_equal(rc1, 0);
    assert_true(expect_said(p[0].out, "restored step 3 through the agent"));
    assert_false(said(p[0].out, "batch skipped"));
    assert_true(params_hash(p[0].out, 8) == want);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_bit_identical),
        cmocka_unit_test(test_uneven_chunks_in_process),
        cmocka_unit_test(test_uneven_repartition),
        cmocka_unit_test(test_guard_state_repartition),
        cmocka_unit_test(test_stop_resume_dp2),
        cmocka_unit_test(test_cut_short_after_degree_change),
        cmocka_unit_test(test_other_kind_refused),
        cmocka_unit_test(test_lone_first_checkpoint),
        cmocka_unit_test(test_killed_rank_fails_peers),
        cmocka_unit_test_setup_teardown(test_agent_kill_restart, redis_fixture_setup,
                                        agent_teardown),
        cmocka_unit_test_setup_teardown(test_agent_retry_walks_back, redis_fixture_setup,
                                        agent_teardown),
        cmocka_unit_test_setup_teardown(test_agent_retry_no_leaked_skips, redis_fixture_setup,
                                        agent_teardown),
    };
    const char *only = getenv("FTC_TEST_FILTER"); /* e.g. "test_agent_*" */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
