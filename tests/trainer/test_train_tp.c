/*
 * test_train_tp.c — data parallelism x tensor parallelism end to end, with
 * real `ftc train` processes (the launcher and torchrun-style ranks) over
 * real libfabric (tcp;ofi_rxm) and in-process ranks (ftc_dist_join +
 * ftc_trainer_create with dp_coll and tp_coll) in forked processes. Each CLI
 * run prints the xxh3 of its FULL parameters (the TP slices gathered into
 * the full tensors, train.h):
 *   - DP = 1 x TP = 2 (launcher), DP = 2 x TP = 2 (launcher) and DP = 1 x
 *     TP = 2 as two torchrun-style ranks (MASTER_ADDR/PORT) end with the same
 *     bits (bit identity across DP degrees at a fixed TP);
 *   - TP = 2 against TP = 1 (in-process ranks, the gathered parameters
 *     compared element by element): within TOL_ABS absolute and TOL_REL of
 *     the update's norm after STEPS steps (only the fp32 summation order of
 *     the row-parallel layers differs); the replicated tensors bit-identical
 *     across the TP ranks (ftc_trainer_full_params checks it);
 *   - DP = 2 x TP = 2 stopped at step 2 (persist tier: one shard per (dp,
 *     tp) rank, shard-dD-tT) and resumed: the uninterrupted bits; the same
 *     checkpoint resumed at DP = 1 x TP = 2 (ZeRO-1 chunks of each TP rank
 *     re-partitioned): the uninterrupted bits;
 *   - the guard: a NaN in one TP rank's gradient slice only is dropped by
 *     both TP ranks (the bits of a run given that step to skip);
 *   - a checkpoint cut short between the TP ranks (DP = 1 x TP = 2 in-process
 *     ranks, TP rank 0's newest version missing): both resume at the step
 *     every TP rank committed, the uninterrupted bits;
 *   - refused: that checkpoint at TP = 1 and at TP = 4 (FTC_ECONFIG, naming
 *     the saved layout); --tp not dividing the ranks or the heads (usage
 *     errors before any rank starts);
 *   - with agents (a real redis-server, two `ftc agent`s): DP = 1 x TP = 2
 *     checkpointing every step through include/ftc.h (shard coordinates
 *     tp_rank 0 and 1), TP rank 1 SIGKILLed mid-run, the job restarted: it
 *     restores the committed step and ends with the uninterrupted bits.
 */
#include "ftc_test.h"

#include "trainer/dist.h"
#include "trainer/train.h"

#include <math.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define TRAIN_FIXTURE_JOB_PREFIX "ttp"
#define TRAIN_FIXTURE_FI_PROVIDER "tcp;ofi_rxm"
#include "trainer/train_fixture.h"

/* tiny (4 heads: TP 1, 2, 4), 6 micro-batches per step; a generous
 * collective deadline (synchronous persist writes on a loaded machine) */
#define COMMON "--model", "tiny", "--micro-batch", "2", "--global-batch", "12", "--seq-len", "16", \
               "--corpus-bytes", "60000", "--eval-batches", "1", "--threads", "1",                \
               "--log-every", "1", "--coll-timeout-ms", "30000"

/* TP = 2 vs TP = 1 after STEPS steps at lr 3e-3 (warmup 2): absolute, and
 * relative to the norm of the update (||p - p0||) */
#define STEPS 4
#define TOL_ABS 2e-4
#define TOL_REL 1e-3

static uint64_t g_tp2; /* DP = 1 x TP = 2, 4 steps */

static void test_dp_x_tp_bit_identical(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traintp");
    const char *a12[] = {COMMON, "--steps", "4", "--nproc", "2", "--tp", "2", NULL};
    g_tp2 = run_ok(dir, "dp1tp2", NULL, a12, 4);
    print_message("DP=1 x TP=2: %016llx\n", (unsigned long long)g_tp2);
    const char *a22[] = {COMMON, "--steps", "4", "--nproc", "4", "--tp", "2", NULL};
    uint64_t h = run_ok(dir, "dp2tp2", NULL, a22, 4);
    print_message("DP=2 x TP=2: %016llx\n", (unsigned long long)h);
    assert_true(h == g_tp2);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/dp2tp2.out", dir);
    assert_true(expect_said(out, "2 DP x 2 TP ranks"));
    /* torchrun style: DP = 1 x TP = 2 as two ranks meeting at MASTER_ADDR:PORT */
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
                             port, NULL};
        const char *a[] = {COMMON, "--steps", "4", "--tp", "2", NULL};
        start(&p[r], dir, r ? "tr1" : "tr0", env, a);
    }
    assert_int_equal(finish(&p[1], 120000), 0);
    assert_int_equal(finish(&p[0], 120000), 0);
    h = params_hash(p[0].out, 4);
    print_message("DP=1 x TP=2, torchrun-style ranks: %016llx\n", (unsigned long long)h);
    assert_true(h == g_tp2);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- TP = 2 against TP = 1, in-process ranks ------------------------------ */

static ftc_train_options_t tol_opts(void)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    o.model = (ftc_model_config_t){256, 16, 2, 4, 32};
    o.micro_batch = 2;
    o.seq_len = 16;
    o.micro_steps = 4;
    o.steps = STEPS;
    o.optim.lr = 3e-3f;
    o.optim.warmup = 2;
    o.corpus_bytes = 40000;
    o.deterministic = true;
    o.job_id = "test-tp";
    return o;
}

/* tp_run's guard settings (the forked ranks inherit them): a NaN injected in
 * the gradient of TP rank g_nan_tp only at step g_nan_step, or step g_skip
 * skipped from the list (-1: none). */
static int64_t g_nan_step = -1, g_nan_tp = -1;
static int64_t g_skip = -1;
/* tp_run's checkpoints (every step into g_ckpt when set), its last step
 * (g_until; 0: STEPS) and collective deadline (g_coll_ms; 0: 30 s) */
static const char *g_ckpt;
static uint64_t g_until;
static int g_coll_ms;

/* `world` ranks of DP x tp (tp 1 and world 1: one process, no communicator)
 * run STEPS steps; rank 0 writes the full parameters to out (P floats), and
 * (before training) the initial ones to init when not NULL. */
static void tp_run(int world, int tp, const char *dir, float *out, float *init)
{
    ftc_train_options_t o0 = tol_opts();
    size_t P = ftc_model_param_count(&o0.model);
    float *sh = mmap(NULL, 2 * P * sizeof(float), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    pid_t pids[4];
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_err_t err = {0};
            ftc_dist_t *d = NULL;
            ftc_dist_opts_t dop = {.world = world, .tp = tp, .rank = r, .dir = dir,
                                   .timeout_ms = 60000, .provider = "tcp;ofi_rxm"};
            if (world > 1 && ftc_dist_join(&dop, &d, &err) < 0) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            ftc_train_options_t o = tol_opts();
            o.dp_coll = d ? d->dp : NULL;
            o.tp_coll = d ? d->tp : NULL;
            o.tp = tp;
            o.coll_timeout_ms = g_coll_ms ? g_coll_ms : 30000;
            o.ckpt_dir = g_ckpt, o.ckpt_every = 1;
            uint64_t skip = (uint64_t)g_skip;
            o.inject_nan_step = g_nan_step;
            o.inject_tp_rank = (int)g_nan_tp;
            if (g_skip >= 0)
                o.skip_steps = &skip, o.n_skip_steps = 1;
            ftc_trainer_t *t = ftc_trainer_create(&o, &err);
            if (!t) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            int rc = ftc_trainer_full_params(t, NULL, r == 0 ? sh + P : NULL, &err);
            while (rc == 0 && ftc_trainer_steps_done(t) < (g_until ? g_until : o.steps))
                rc = ftc_trainer_step(t, NULL, &err);
            /* every rank of a TP group gathers; rank 0 keeps the result */
            if (rc == 0)
                rc = ftc_trainer_full_params(t, NULL, r == 0 ? sh : NULL, &err);
            if (rc < 0) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            ftc_trainer_destroy(t);
            ftc_dist_destroy(d);
            exit(0);
        }
    }
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("world %d, TP %d: rank %d: status 0x%x", world, tp, r, st);
    }
    memcpy(out, sh, P * sizeof(float));
    if (init)
        memcpy(init, sh + P, P * sizeof(float));
    munmap(sh, 2 * P * sizeof(float));
}

/* The guard under TP: a gradient that is not finite on ONE TP rank only
 * (the loss, replicated, is finite everywhere). That rank dropped the step,
 * the other applied it, and the replicated tensors parted (the run ended in
 * FTC_ECORRUPT, "replicated tensor ... differs between TP ranks"). Now the
 * verdicts are exchanged over TP: both drop it, the bits of a run given the
 * step in its skip list. */
static void test_tp_guard_one_slice(void **state)
{
    (void)state;
    ftc_train_options_t o0 = tol_opts();
    size_t P = ftc_model_param_count(&o0.model);
    float *a = malloc(P * sizeof(float)), *b = malloc(P * sizeof(float));
    char *dir = ftc_test_tmpdir("tpguard");
    char d1[PATH_MAX + 8], d2[PATH_MAX + 8];
    snprintf(d1, sizeof d1, "%s/a", dir);
    snprintf(d2, sizeof d2, "%s/b", dir);
    assert_int_equal(mkdir(d1, 0700), 0);
    assert_int_equal(mkdir(d2, 0700), 0);
    g_nan_step = 2, g_nan_tp = 1;
    tp_run(2, 2, d1, a, NULL);
    g_nan_step = -1, g_nan_tp = -1, g_skip = 2;
    tp_run(2, 2, d2, b, NULL);
    g_skip = -1;
    assert_memory_equal(a, b, P * sizeof(float));
    free(a), free(b);
    ftc_test_rmrf(dir);
    free(dir);
}

/* A checkpoint cut short between the TP ranks: DP = 1 x TP = 2 through the
 * persist tier, stopped after step 2, with TP rank 0's version of step 2
 * gone (killed before it committed; TP rank 1's is committed). Each TP rank
 * chose its own series' newest step (TP rank 0 step 1, TP rank 1 step 2):
 * they trained on at different steps, their all-reduces pairing up across
 * steps, and nothing noticed until the end (the replicated tensors differed,
 * FTC_ECORRUPT). Now the ranks agree on step 1, which every series
 * committed: the uninterrupted bits. */
static void test_tp_cut_short_checkpoint(void **state)
{
    (void)state;
    ftc_train_options_t o0 = tol_opts();
    size_t P = ftc_model_param_count(&o0.model);
    float *a = malloc(P * sizeof(float)), *b = malloc(P * sizeof(float));
    char *dir = ftc_test_tmpdir("tpcut");
    char d[3][PATH_MAX + 8], ck[PATH_MAX + 8], v2[2 * PATH_MAX];
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s/x%d", dir, i);
        assert_int_equal(mkdir(d[i], 0700), 0);
    }
    snprintf(ck, sizeof ck, "%s/ck", dir);
    tp_run(2, 2, d[0], a, NULL); /* uninterrupted */
    g_ckpt = ck, g_until = 2, g_coll_ms = 5000;
    tp_run(2, 2, d[1], b, NULL);
    snprintf(v2, sizeof v2, "%s/rank-d0-t0/v%020d", ck, 2);
    assert_int_equal(access(v2, F_OK), 0);
    ftc_test_rmrf(v2);
    g_until = 0;
    tp_run(2, 2, d[2], b, NULL);
    g_ckpt = NULL, g_coll_ms = 0;
    assert_memory_equal(a, b, P * sizeof(float));
    free(a), free(b);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_tp2_vs_tp1_tolerance(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traintp");
    ftc_train_options_t o = tol_opts();
    size_t P = ftc_model_param_count(&o.model);
    float *ref = malloc(P * sizeof(float)), *init = malloc(P * sizeof(float));
    float *got = malloc(P * sizeof(float)), *got4 = malloc(P * sizeof(float));
    float *init2 = malloc(P * sizeof(float));
    assert_true(ref && init && got && got4 && init2);
    /* forked too: OpenMP threads and fork do not mix, so the test process
     * itself never runs a kernel */
    tp_run(1, 1, dir, ref, init);
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/tp2", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    tp_run(2, 2, sub, got, init2);
    /* the TP = 2 model starts from the TP = 1 weights, bit for bit */
    assert_memory_equal(init, init2, P * sizeof(float));
    double dmax = 0.0, d2 = 0.0, u2 = 0.0;
    for (size_t i = 0; i < P; i++) {
        double d = fabs((double)got[i] - (double)ref[i]), u = (double)ref[i] - (double)init[i];
        dmax = d > dmax ? d : dmax;
        d2 += d * d;
        u2 += u * u;
    }
    double rel = sqrt(d2) / sqrt(u2);
    print_message("TP=2 vs TP=1 after %d steps, %zu parameters: max |diff| %.3g (tol %.0e), "
                  "||diff|| / ||update|| %.3g (tol %.0e)\n", STEPS, P, dmax, TOL_ABS, rel,
                  TOL_REL);
    assert_true(u2 > 0.0);
    assert_true(dmax <= TOL_ABS);
    assert_true(rel <= TOL_REL);
    /* and DP = 2 x TP = 2 in-process: the DP = 1 x TP = 2 bits */
    snprintf(sub, sizeof sub, "%s/tp2dp2", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    tp_run(4, 2, sub, got4, NULL);
    assert_memory_equal(got, got4, P * sizeof(float));
    print_message("DP=2 x TP=2 in-process ranks: the DP=1 x TP=2 bits\n");
    free(ref), free(init), free(got), free(got4), free(init2);
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- checkpoints ------------------------------------------------------------ */

static void copy_tree(const char *from, const char *to)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execlp("cp", "cp", "-a", from, to, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_stop_resume_and_repartition(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traintp");
    char ck[PATH_MAX], ck1[PATH_MAX + 8], out[PATH_MAX + 32];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    snprintf(ck1, sizeof ck1, "%s/ckpt1", dir);
    if (!g_tp2) {
        const char *a12[] = {COMMON, "--steps", "4", "--nproc", "2", "--tp", "2", NULL};
        g_tp2 = run_ok(dir, "dp1tp2", NULL, a12, 4);
    }
    /* DP = 2 x TP = 2, stopped after step 2 */
    const char *a1[] = {COMMON, "--steps", "4", "--nproc", "4", "--tp", "2", "--ckpt-dir", ck,
                        "--ckpt-every", "1", "--stop-at", "2", NULL};
    run_ok(dir, "first", NULL, a1, 2);
    char f[PATH_MAX + 64];
    snprintf(f, sizeof f, "%s/rank-d1-t1/v%020d/shard-d1-t1-p0.ftcz", ck, 2);
    assert_true(access(f, R_OK) == 0); /* each (dp, tp) rank its own chunk of its slice */
    copy_tree(ck, ck1);
    /* resumed at the same layout: each rank its own chunk, the uninterrupted bits */
    const char *a2[] = {COMMON, "--steps", "4", "--nproc", "4", "--tp", "2", "--ckpt-dir", ck,
                        "--ckpt-every", "1", NULL};
    uint64_t h = run_ok(dir, "resumed", NULL, a2, 4);
    snprintf(out, sizeof out, "%s/resumed.out", dir);
    assert_true(expect_said(out, "restored step 2 from"));
    assert_true(expect_said(out, "rank-d1-t1"));
    print_message("DP=2 x TP=2 stopped at 2, resumed: %016llx\n", (unsigned long long)h);
    assert_true(h == g_tp2);
    /* the copy resumed at DP = 1 x TP = 2: re-partitioned, the same bits */
    const char *b2[] = {COMMON, "--steps", "4", "--nproc", "2", "--tp", "2", "--ckpt-dir", ck1,
                        "--ckpt-every", "1", NULL};
    h = run_ok(dir, "resumed-dp1", NULL, b2, 4);
    snprintf(out, sizeof out, "%s/resumed-dp1.out", dir);
    assert_true(expect_said(out, "re-partitioned from 2 DP ranks"));
    print_message("DP=2 x TP=2 stopped at 2, resumed at DP=1 x TP=2: %016llx\n",
                  (unsigned long long)h);
    assert_true(h == g_tp2);
    /* another TP degree is refused, naming the saved layout */
    proc_t p;
    const char *c1[] = {COMMON, "--steps", "4", "--nproc", "2", "--ckpt-dir", ck, NULL};
    run_rc(dir, "tp1", NULL, c1, 2, &p); /* FTC_ECONFIG: exit 2 */
    assert_true(expect_said(p.out, "saved with tensor parallelism; this run has TP 1"));
    const char *c4[] = {COMMON, "--steps", "4", "--nproc", "4", "--tp", "4", "--ckpt-dir", ck,
                        NULL};
    run_rc(dir, "tp4", NULL, c4, 2, &p);
    assert_true(expect_said(p.out, "saved with TP 2; this run has TP 4"));
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_bad_tp_refused(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("traintp");
    proc_t p;
    const char *a[] = {COMMON, "--steps", "2", "--nproc", "3", "--tp", "2", NULL};
    run_rc(dir, "tp2of3", NULL, a, 2, &p);
    assert_true(expect_said(p.out, "--tp 2: must be 1..64 and divide the 3 ranks"));
    const char *b[] = {COMMON, "--steps", "2", "--nproc", "8", "--tp", "8", NULL};
    run_rc(dir, "tp8", NULL, b, 2, &p);
    assert_true(expect_said(p.out, "--tp 8 must divide the 4 attention heads"));
    const char *c[] = {COMMON, "--steps", "2", "--tp", "2", NULL};
    run_rc(dir, "tp-alone", NULL, c, 2, &p);
    assert_true(expect_said(p.out, "--tp 2 needs a multiple of 2 ranks"));
    ftc_test_rmrf(dir);
    free(dir);
}

/* ---- with agents ---------------------------------------------------------- */

/* The two TP ranks of the DP = 1 x TP = 2 job (one per node), `steps` steps. */
static void start_job(proc_t *p, const char *jobdir, const char *job, const char *tag,
                      const char *steps)
{
    const char *a[] = {COMMON, "--steps", steps, "--tp", "2", "--coll-timeout-ms", "10000",
                       NULL};
    start_ranks(p, jobdir, job, tag, a);
}

static void test_agent_tp_kill_restart(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    agent_job_init(f, jobdir, persist, url, job);
    /* the uninterrupted DP = 1 x TP = 2 run of 8 steps */
    const char *base[] = {COMMON, "--steps", "8", "--nproc", "2", "--tp", "2", NULL};
    uint64_t want = run_ok(jobdir, "base8", NULL, base, 8);
    for (int i = 0; i < 2; i++)
        g_agents[i] = start_agent(jobdir, persist, job, url, i);
    /* kill TP rank 1 once step 4 is reported */
    proc_t p[2];
    start_job(p, jobdir, job, "run1", "8");
    wait_said(&p[0], "step 4/", 90000);
    kill(p[1].pid, SIGKILL);
    finish(&p[1], 10000);
    int rc = finish(&p[0], 90000);
    if (rc == 0) /* rank 0 may have finished first; then nothing to resume */
        print_message("rank 0 finished before the kill took effect\n");
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
    assert_true(expect_said(p[1].out, "restored step"));
    char *s = slurp(p[0].out);
    char *r = strstr(s, "restored step ");
    print_message("DP=1 x TP=2 through the agents, restart: %.*s\n",
                  r ? (int)strcspn(r, "\n") : 0, r ? r : "");
    free(s);
    assert_true(params_hash(p[0].out, 8) == want);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_tp_refused),
        cmocka_unit_test(test_dp_x_tp_bit_identical),
        cmocka_unit_test(test_tp2_vs_tp1_tolerance),
        cmocka_unit_test(test_tp_guard_one_slice),
        cmocka_unit_test(test_tp_cut_short_checkpoint),
        cmocka_unit_test(test_stop_resume_and_repartition),
        cmocka_unit_test_setup_teardown(test_agent_tp_kill_restart, redis_fixture_setup,
                                        agent_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
