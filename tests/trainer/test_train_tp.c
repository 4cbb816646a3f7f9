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
 *   - refused: that checkpoint at TP = 1 and at TP = 4 (FTC_ECONFIG, naming
 *     the saved layout); --tp not dividing the ranks or the heads (usage
 *     errors before any rank starts);
 *   - with agents (a real redis-server, two `ftc agent`s): DP = 1 x TP = 2
 *     checkpointing every step through include/ftc.h (shard coordinates
 *     tp_rank 0 and 1), TP rank 1 SIGKILLed mid-run, the job restarted: it
 *     restores the committed step and ends with the uninterrupted bits.
 */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/fsio.h"
#include "detect/redis_fixture.h"
#include "trainer/dist.h"
#include "trainer/train.h"

#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

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

static const char *bindir(void)
{
    const char *b = getenv("FTC_BINARY_DIR");
    return b ? b : ".";
}

typedef struct proc {
    pid_t pid;
    char out[PATH_MAX];
} proc_t;

/* Starts `ftc train args...` with extra environment (NAME=VALUE strings,
 * NULL-terminated) and stdout + stderr into p->out. */
static void start(proc_t *p, const char *dir, const char *tag, const char *const *env,
                  const char *const *args)
{
    snprintf(p->out, sizeof p->out, "%s/%s.out", dir, tag);
    fflush(stdout);
    fflush(stderr);
    p->pid = fork();
    assert_true(p->pid >= 0);
    if (p->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *o = freopen(p->out, "w", stdout);
        (void)o;
        dup2(STDOUT_FILENO, STDERR_FILENO);
        unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("FTC_AGENT_SOCKET");
        setenv("OMP_WAIT_POLICY", "passive", 1);
        setenv("FI_PROVIDER", "tcp;ofi_rxm", 1);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *av[64];
        int k = 0;
        static char bin[PATH_MAX];
        snprintf(bin, sizeof bin, "%s/cli/ftc", bindir());
        av[k++] = bin;
        av[k++] = "train";
        for (int i = 0; args[i] && k < 63; i++)
            av[k++] = args[i];
        av[k] = NULL;
        execv(bin, (char *const *)av);
        _exit(127);
    }
}

/* The exit status; kills and fails after timeout_ms (a hang). */
static int finish(proc_t *p, int timeout_ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)timeout_ms);
    int st;
    while (waitpid(p->pid, &st, WNOHANG) != p->pid) {
        if (ftc_deadline_expired(d)) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            fail_msg("%s: did not finish in %d ms", p->out, timeout_ms);
        }
        ftc_sleep_ms(10);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *file)
{
    uint8_t *buf = NULL;
    size_t len;
    ftc_err_t err = {0};
    if (ftc_fs_read_file(file, 1 << 22, &buf, &len, &err))
        return strdup("");
    return (char *)buf;
}

/* The file says `what`; prints the file when it does not. */
static bool expect_said(const char *file, const char *what)
{
    char *s = slurp(file);
    bool y = strstr(s, what) != NULL;
    if (!y)
        print_error("%s does not say '%s':\n%s\n", file, what, s);
    free(s);
    return y;
}

/* "params xxh3 HEX after N steps" of a finished run. */
static uint64_t params_hash(const char *file, int steps)
{
    char *s = slurp(file), want[64];
    snprintf(want, sizeof want, "after %d steps", steps);
    char *l = strstr(s, "params xxh3 ");
    uint64_t h = 0;
    if (!l || !strstr(l, want))
        print_error("%s has no final hash after %d steps:\n%s\n", file, steps, s);
    else
        h = strtoull(l + 12, NULL, 16);
    free(s);
    assert_true(h != 0);
    return h;
}

/* Runs to the end; the exit status must be want_rc. */
static void run_rc(const char *dir, const char *tag, const char *const *env,
                   const char *const *args, int want_rc, proc_t *p)
{
    start(p, dir, tag, env, args);
    int rc = finish(p, 120000);
    if (rc != want_rc) {
        char *s = slurp(p->out);
        print_error("%s exited %d (want %d):\n%s\n", tag, rc, want_rc, s);
        free(s);
    }
    assert_int_equal(rc, want_rc);
}

static uint64_t run_ok(const char *dir, const char *tag, const char *const *env,
                       const char *const *args, int steps)
{
    proc_t p;
    run_rc(dir, tag, env, args, 0, &p);
    return params_hash(p.out, steps);
}

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
            o.coll_timeout_ms = 30000;
            ftc_trainer_t *t = ftc_trainer_create(&o, &err);
            if (!t) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            int rc = ftc_trainer_full_params(t, NULL, r == 0 ? sh + P : NULL, &err);
            for (uint64_t s = 0; rc == 0 && s < o.steps; s++)
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
    run_rc(dir, "tp1", NULL, c1, 1, &p);
    assert_true(expect_said(p.out, "saved with tensor parallelism; this run has TP 1"));
    const char *c4[] = {COMMON, "--steps", "4", "--nproc", "4", "--tp", "4", "--ckpt-dir", ck,
                        NULL};
    run_rc(dir, "tp4", NULL, c4, 1, &p);
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

static pid_t g_agents[2]; /* killed by agent_teardown, also after a failure */

static pid_t start_agent(const char *jobdir, const char *persist, const char *job,
                         const char *url, int i)
{
    char sock[PATH_MAX + 32], out[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/agent.%d.sock", jobdir, i);
    snprintf(out, sizeof out, "%s/agent%d.log", jobdir, i);
    unlink(sock);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *o = freopen(out, "a", stdout);
        FILE *er = freopen(out, "a", stderr);
        (void)o, (void)er;
        char bin[PATH_MAX], idx[16];
        snprintf(bin, sizeof bin, "%s/cli/ftc", bindir());
        snprintf(idx, sizeof idx, "%d", i);
        setenv("FTC_REDIS_URL", url, 1);
        setenv("FI_PROVIDER", "tcp;ofi_rxm", 1);
        execl(bin, bin, "agent", "--nodes", "2", "--index", idx, "--job", job, "--job-dir",
              jobdir, "--redundancy", "1", "--persist-dir", persist, "--persist-every", "1000",
              "--agent-timeout-ms", "8000", (char *)NULL);
        _exit(127);
    }
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(sock, &st) != 0) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid)
            fail_msg("agent %d exited at start (see %s)", i, out);
        if (ftc_deadline_expired(d))
            fail_msg("agent %d did not open its socket", i);
        ftc_sleep_ms(20);
    }
    return pid;
}

/* The two TP ranks of the DP = 1 x TP = 2 job (one per node), `steps` steps. */
static void start_job(proc_t *p, const char *jobdir, const char *job, const char *tag,
                      const char *steps)
{
    static int incarnation;
    char rdzv[PATH_MAX];
    snprintf(rdzv, sizeof rdzv, "%s/rdzv.%d", jobdir, ++incarnation);
    assert_int_equal(mkdir(rdzv, 0700), 0);
    for (int r = 0; r < 2; r++) {
        static char envs[2][5][PATH_MAX + 64];
        snprintf(envs[r][0], sizeof envs[r][0], "RANK=%d", r);
        snprintf(envs[r][1], sizeof envs[r][1], "WORLD_SIZE=2");
        snprintf(envs[r][2], sizeof envs[r][2], "FTC_TRAIN_RDZV_DIR=%s", rdzv);
        snprintf(envs[r][3], sizeof envs[r][3], "FTC_AGENT_SOCKET=%s/agent.%d.sock", jobdir, r);
        snprintf(envs[r][4], sizeof envs[r][4], "FTC_JOB_ID=%s", job);
        const char *env[] = {envs[r][0], envs[r][1], envs[r][2], envs[r][3], envs[r][4], NULL};
        const char *a[] = {COMMON, "--steps", steps, "--tp", "2", "--coll-timeout-ms", "10000",
                           NULL};
        char t[64];
        snprintf(t, sizeof t, "%s-r%d", tag, r);
        start(&p[r], jobdir, t, env, a);
    }
}

/* Waits until p's output says `what`; fails at once if p exits first. */
static void wait_said(proc_t *p, const char *what, int timeout_ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)timeout_ms);
    for (;;) {
        char *s = slurp(p->out);
        bool y = strstr(s, what) != NULL;
        free(s);
        if (y)
            return;
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            p->pid = -1;
            expect_said(p->out, what);
            fail_msg("%s: the process exited (status 0x%x) before saying '%s'", p->out, st, what);
        }
        if (ftc_deadline_expired(d)) {
            expect_said(p->out, what);
            fail_msg("%s never said '%s'", p->out, what);
        }
        ftc_sleep_ms(20);
    }
}

static void test_agent_tp_kill_restart(void **state)
{
    redis_fixture_t *f = *state;
    char jobdir[PATH_MAX], persist[PATH_MAX], url[512], job[64];
    snprintf(jobdir, sizeof jobdir, "%s/job", f->dir);
    snprintf(persist, sizeof persist, "%s/persist", f->dir);
    snprintf(job, sizeof job, "ttp%d", (int)getpid() % 100000);
    mkdir(jobdir, 0700);
    char *u = slurp(ftc_redis_server_url_file(f->srv));
    u[strcspn(u, "\n")] = 0;
    snprintf(url, sizeof url, "%s", u);
    free(u);
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

/* Also after a failed assertion: the agents and their shared memory go. */
static int agent_teardown(void **state)
{
    for (int i = 0; i < 2; i++) {
        if (g_agents[i] > 0) {
            kill(g_agents[i], SIGKILL);
            waitpid(g_agents[i], NULL, 0);
        }
        g_agents[i] = 0;
    }
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "ftc.ttp%d.", (int)getpid() % 100000);
    while (d && (de = readdir(d))) {
        if (!strncmp(de->d_name, prefix, strlen(prefix))) {
            char pth[PATH_MAX];
            snprintf(pth, sizeof pth, "/dev/shm/%s", de->d_name);
            unlink(pth);
        }
    }
    if (d)
        closedir(d);
    return redis_fixture_teardown(state);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_tp_refused),
        cmocka_unit_test(test_dp_x_tp_bit_identical),
        cmocka_unit_test(test_tp2_vs_tp1_tolerance),
        cmocka_unit_test(test_stop_resume_and_repartition),
        cmocka_unit_test_setup_teardown(test_agent_tp_kill_restart, redis_fixture_setup,
                                        agent_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
