/*
 * agent_fixture.h — shared fixture of the `ftc agent` end-to-end tests
 * (test_agent.c, test_agent_parity.c): a real Redis (redis_fixture.h), real
 * `ftc agent` processes over tcp;ofi_rxm on loopback, one per node, and real
 * rank processes (tests/ckpt/rank_main), one per node, killed with SIGKILL.
 *
 * Contract: include after "ftc_test.h", optionally after defining MAXN (most
 * nodes, default 4) and AGENT_FIXTURE_JOB_PREFIX (default "agt"; the job id is
 * the prefix and the test's pid). setup_env() starts the agents of a test and
 * teardown_env() kills them and removes the job's /dev/shm objects. Every
 * wait has a deadline and fails the test (cmocka) when it passes; children
 * die with the test (PR_SET_PDEATHSIG). Single-threaded tests only.
 */
#ifndef FTC_TEST_CKPT_AGENT_FIXTURE_H
#define FTC_TEST_CKPT_AGENT_FIXTURE_H

#include "ftc_test.h"

#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/fsio.h"
#include "ftc.h"
#include "detect/redis_fixture.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

/* The agents' --agent-timeout-ms (deadline of one replication, fetch or
 * parity gather); a test may define another first. */
#ifndef AGENT_FIXTURE_TIMEOUT_MS
#define AGENT_FIXTURE_TIMEOUT_MS "8000"
#endif
/* Most nodes (agents) a test may start; a test may define a larger MAXN first. */
#ifndef MAXN
#define MAXN 4
#endif

/* Job ids are "<prefix><pid>": unique per test process, and per test binary. */
#ifndef AGENT_FIXTURE_JOB_PREFIX
#define AGENT_FIXTURE_JOB_PREFIX "agt"
#endif

typedef struct env {
    redis_fixture_t *f;
    char job[64];
    char jobdir[PATH_MAX];
    char persist[PATH_MAX];
    char url[512];
    pid_t agent[MAXN];
    int nodes;
    char redundancy[16];
    int persist_every;
    char domain[MAXN][16];  /* --domain of each agent ("" = none); set before start_agent */
    char timeout_ms[16];    /* --agent-timeout-ms ("" = AGENT_FIXTURE_TIMEOUT_MS) */
    int ranks_per_node;     /* --ranks-per-node (0: not given, the agent's default 1) */
} env_t;

/* The envs a test has not torn down yet: a test that fails (cmocka jumps out
 * of it) leaves its agents running and its segments in /dev/shm, under the
 * job id the binary's next test uses too; agent_fixture_teardown ends them. */
static env_t *agent_fixture_live[4];

static inline const char *bindir(void)
{
    const char *b = getenv("FTC_BINARY_DIR");
    return b ? b : ".";
}

static inline void read_url(env_t *e)
{
    uint8_t *buf;
    size_t len;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fs_read_file(ftc_redis_server_url_file(e->f->srv), 4096, &buf, &len, &err),
                     0);
    buf[strcspn((char *)buf, "\n")] = 0;
    snprintf(e->url, sizeof e->url, "%s", (char *)buf);
    free(buf);
}

/* Forks `ftc agent` for node i (log in jobdir/agent<i>.log); does not wait. */
static inline pid_t spawn_agent(env_t *e, int i)
{
    char sock[PATH_MAX + 32], out[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/agent.%d.sock", e->jobdir, i);
    snprintf(out, sizeof out, "%s/agent%d.log", e->jobdir, i);
    unlink(sock);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        FILE *o = freopen(out, "a", stdout);
        FILE *er = freopen(out, "a", stderr);
        (void)o, (void)er;
        char bin[PATH_MAX], nodes[16], idx[16], every[16], rpn[16];
        snprintf(bin, sizeof bin, "%s/cli/ftc", bindir());
        snprintf(nodes, sizeof nodes, "%d", e->nodes);
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(every, sizeof every, "%d", e->persist_every);
        setenv("FTC_REDIS_URL", e->url, 1);
        setenv("FI_PROVIDER", "tcp;ofi_rxm", 1);
        char *argv[32] = {bin, "agent", "--nodes", nodes, "--index", idx, "--job", e->job,
                          "--job-dir", e->jobdir, "--redundancy", e->redundancy,
                          "--persist-dir", e->persist, "--persist-every", every,
                          "--agent-timeout-ms",
                          e->timeout_ms[0] ? e->timeout_ms : AGENT_FIXTURE_TIMEOUT_MS};
        int argc = 18;
        if (e->domain[i][0]) {
            argv[argc++] = "--domain";
            argv[argc++] = e->domain[i];
        }
        if (e->ranks_per_node > 0) {
            snprintf(rpn, sizeof rpn, "%d", e->ranks_per_node);
            argv[argc++] = "--ranks-per-node";
            argv[argc++] = rpn;
        }
        argv[argc] = NULL;
        execv(bin, argv);
        _exit(127);
    }
    return pid;
}

/* Starts node i's agent and waits for its socket. */
static inline void start_agent(env_t *e, int i)
{
    char sock[PATH_MAX + 32], out[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/agent.%d.sock", e->jobdir, i);
    snprintf(out, sizeof out, "%s/agent%d.log", e->jobdir, i);
    pid_t pid = spawn_agent(e, i);
    e->agent[i] = pid;
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(sock, &st) != 0) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid) {
            uint8_t *buf;
            size_t len;
            ftc_err_t err = {0};
            if (ftc_fs_read_file(out, 1 << 20, &buf, &len, &err) == 0) { /* gone with the tmp dir */
                print_message("%s:\n%.*s\n", out, (int)len, (char *)buf);
                free(buf);
            }
            fail_msg("agent %d exited at start (status 0x%x, log above)", i, s);
        }
        if (ftc_deadline_expired(d)) fail_msg("agent %d did not open its socket", i);
        ftc_sleep_ms(20);
    }
}

static inline void kill_agent(env_t *e, int i)
{
    if (e->agent[i] <= 0) return;
    kill(e->agent[i], SIGKILL);
    int st;
    waitpid(e->agent[i], &st, 0);
    e->agent[i] = 0;
}

/* A node's memory is gone: its rank slots and the replicas it held. */
static inline void wipe_node_shm(env_t *e, int i)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n%d.", e->job, i);
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strncmp(de->d_name, prefix, strlen(prefix))) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

/* Flips a byte in the middle of every shm object whose name starts with prefix. */
static inline int corrupt_shm(const char *prefix)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix))) continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
        int fd = open(p, O_RDWR);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
            off_t off = st.st_size / 2;
            uint8_t b;
            if (pread(fd, &b, 1, off) == 1) {
                b ^= 0x40;
                if (pwrite(fd, &b, 1, off) == 1) n++;
            }
        }
        if (fd >= 0) close(fd);
    }
    closedir(d);
    return n;
}

/* Starts rank `rank` on node `node`'s agent. */
static inline pid_t start_rank_on(env_t *e, int rank, int node, int world, const char *out,
                                  const char *a1, const char *a2, const char *a3, const char *a4)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        FILE *o = freopen(out, "w", stdout);
        (void)o;
        char bin[PATH_MAX], sock[PATH_MAX + 32], r[16], w[16];
        snprintf(bin, sizeof bin, "%s/tests/ckpt/rank_main", bindir());
        snprintf(sock, sizeof sock, "%s/agent.%d.sock", e->jobdir, node);
        snprintf(r, sizeof r, "%d", rank);
        snprintf(w, sizeof w, "%d", world);
        setenv("FTC_AGENT_SOCKET", sock, 1);
        setenv("FTC_RANK", r, 1);
        setenv("FTC_WORLD_SIZE", w, 1);
        setenv("FTC_JOB_ID", e->job, 1);
        execl(bin, bin, a1, a2, a3, a4, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Starts rank `rank` on node `rank` (one rank per node). */
static inline pid_t start_rank(env_t *e, int rank, int world, const char *out, const char *a1,
                               const char *a2, const char *a3, const char *a4)
{
    return start_rank_on(e, rank, rank, world, out, a1, a2, a3, a4);
}

static inline void wait_rank(pid_t pid, int timeout_ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)timeout_ms);
    int st;
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("rank pid %d did not finish in %d ms", (int)pid, timeout_ms);
        }
        ftc_sleep_ms(10);
    }
}

static inline bool said(const char *file, const char *what)
{
    uint8_t *buf;
    size_t len;
    ftc_err_t err = {0};
    if (ftc_fs_read_file(file, 1 << 20, &buf, &len, &err)) return false;
    bool y = strstr((char *)buf, what) != NULL;
    if (!y) print_message("%s says:\n%s\n", file, (char *)buf);
    free(buf);
    return y;
}

/* True when node i's agent log (all its incarnations) has what. */
static inline bool agent_said(env_t *e, int i, const char *what)
{
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/agent%d.log", e->jobdir, i);
    return said(log, what);
}

/* Runs all `nodes` ranks for `steps` steps (each on its own node). */
static inline void run_all(env_t *e, const char *steps)
{
    pid_t p[MAXN];
    char out[MAXN][PATH_MAX + 32];
    for (int r = 0; r < e->nodes; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank(e, r, e->nodes, out[r], "--steps", steps, "--floats", "65536");
    }
    char want[32];
    snprintf(want, sizeof want, "COMMITTED %d", atoi(steps) - 1);
    for (int r = 0; r < e->nodes; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], want));
    }
}

static inline void restore_rank(env_t *e, int r, const char *expect)
{
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank%d.restore.out", e->jobdir, r);
    /* steps 0: restore only */
    pid_t p = start_rank(e, r, e->nodes, out, "--restore", "--steps", "0", NULL);
    wait_rank(p, 60000);
    assert_true(said(out, expect));
}

/* Like setup_env, with agent i in failure domain domains[i] (NULL: none). */
static inline env_t *setup_env_domains(redis_fixture_t *f, int nodes, const char *red,
                                       int persist_every, const char *const *domains);

static inline env_t *setup_env(redis_fixture_t *f, int nodes, const char *red, int persist_every)
{
    return setup_env_domains(f, nodes, red, persist_every, NULL);
}

/* The env of a test without starting its agents (start_agent each): the test
 * may seed Redis first (job id and URL are set). */
static inline env_t *prepare_env(redis_fixture_t *f, int nodes, const char *red,
                                 int persist_every, const char *const *domains)
{
    env_t *e = calloc(1, sizeof *e);
    e->f = f;
    e->nodes = nodes;
    snprintf(e->job, sizeof e->job, AGENT_FIXTURE_JOB_PREFIX "%d", (int)getpid() % 100000);
    snprintf(e->jobdir, sizeof e->jobdir, "%s/job", f->dir);
    snprintf(e->persist, sizeof e->persist, "%s/persist", f->dir);
    snprintf(e->redundancy, sizeof e->redundancy, "%s", red);
    e->persist_every = persist_every;
    for (int i = 0; domains && i < nodes; i++)
        snprintf(e->domain[i], sizeof e->domain[i], "%s", domains[i] ? domains[i] : "");
    mkdir(e->jobdir, 0700);
    read_url(e);
    for (int i = 0; i < 4; i++)
        if (!agent_fixture_live[i]) {
            agent_fixture_live[i] = e;
            break;
        }
    return e;
}

static inline env_t *setup_env_domains(redis_fixture_t *f, int nodes, const char *red,
                                       int persist_every, const char *const *domains)
{
    env_t *e = prepare_env(f, nodes, red, persist_every, domains);
    for (int i = 0; i < nodes; i++)
        start_agent(e, i);
    return e;
}

/* Node loss and replacement: the agents of nodes[0..n) killed together
 * (SIGKILL), their shared memory wiped, then fresh agents started on them. */
static inline void lose_and_replace(env_t *e, const int *nodes, int n)
{
    for (int i = 0; i < n; i++)
        kill_agent(e, nodes[i]);
    for (int i = 0; i < n; i++)
        wipe_node_shm(e, nodes[i]);
    for (int i = 0; i < n; i++)
        start_agent(e, nodes[i]);
}

/* The options of a libftc context in this process: rank `rank` of `world`
 * on node `node`'s agent, whose socket path is written to sock (cap bytes,
 * PATH_MAX + 32 fits). */
static inline ftc_options_t ctx_options(env_t *e, int node, int rank, int world, char *sock,
                                        size_t cap)
{
    snprintf(sock, cap, "%s/agent.%d.sock", e->jobdir, node);
    ftc_options_t o = FTC_OPTIONS_INIT;
    o.job = e->job;
    o.agent = sock;
    o.rank = rank;
    o.world = world;
    return o;
}

/* A libftc context in this process (ctx_options; the socket path in sock, cap
 * bytes), its timeout_ms (0: libftc's default), no tensor registered yet;
 * fails the test when ftc_create does. */
static inline ftc_ctx_t *create_ctx_at(env_t *e, int node, int rank, int world, int timeout_ms,
                                       char *sock, size_t cap)
{
    ftc_options_t o = ctx_options(e, node, rank, world, sock, cap);
    if (timeout_ms)
        o.timeout_ms = timeout_ms;
    ftc_ctx_t *c = NULL;
    if (ftc_create(&o, &c))
        fail_msg("ftc_create: %s", ftc_last_error(c));
    return c;
}

/* create_ctx_at when the test needs no socket path. */
static inline ftc_ctx_t *create_ctx(env_t *e, int node, int rank, int world, int timeout_ms)
{
    char sock[PATH_MAX + 32];
    return create_ctx_at(e, node, rank, world, timeout_ms, sock, sizeof sock);
}

/* Registers tensor "w" of c: n floats on the host. */
static inline void register_w(ftc_ctx_t *c, float *w, int64_t n)
{
    int64_t shape[1] = {n};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, shape, w, FTC_HOST), 0);
}

static inline void teardown_env(env_t *e)
{
    for (int i = 0; i < e->nodes; i++) {
        kill_agent(e, i);
        wipe_node_shm(e, i);
    }
    for (int i = 0; i < 4; i++)
        if (agent_fixture_live[i] == e)
            agent_fixture_live[i] = NULL;
    free(e);
}

/* The first shm object whose name starts with prefix and that holds a
 * shard of step that verifies, of generation gen and with head checksum
 * head (0: any); true with the object mapped in *sl (the caller closes it)
 * and the shard's view in *v, false when none. */
static inline bool open_shm_shard(const char *prefix, uint64_t step, uint64_t gen,
                                  uint64_t head, ftc_slot_t *sl, ftc_shard_view_t *v)
{
    bool found = false;
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        ftc_err_t err = {0};
        if (ftc_slot_open(de->d_name, false, sl, &err))
            continue;
        uint64_t total = 0;
        found = ftc_shard_peek_size(sl->base, sl->size, &total, &err) == 0 &&
                total <= sl->size &&
                ftc_shard_open(v, sl->base, total, FTC_SHARD_VERIFY, &err) == 0 &&
                v->info.step == step && (!gen || v->info.generation == gen) &&
                (!head || v->head_xxh3 == head);
        if (!found)
            ftc_slot_close(sl);
    }
    closedir(d);
    return found;
}

/* A malloc'd copy of the first shm object starting with prefix that holds a
 * shard of step (*size: its bytes); NULL when none. */
static inline uint8_t *copy_shm_shard(const char *prefix, uint64_t step, uint64_t *size)
{
    ftc_slot_t sl;
    ftc_shard_view_t v;
    if (!open_shm_shard(prefix, step, 0, 0, &sl, &v))
        return NULL;
    uint8_t *out = malloc(v.size);
    assert_non_null(out);
    memcpy(out, sl.base, v.size);
    *size = v.size;
    ftc_slot_close(&sl);
    return out;
}

/* Waits (20 s at most) until node's persist directory has step committed. */
static inline void wait_persisted(env_t *e, int node, int step)
{
    char marker[PATH_MAX + 64];
    snprintf(marker, sizeof marker, "%s/node%d/v%020d/COMMITTED", e->persist, node, step);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(marker, &st) != 0) {
        if (ftc_deadline_expired(d))
            fail_msg("%s never appeared", marker);
        ftc_sleep_ms(20);
    }
}

/* Opens (writable) rank 0's slot on node 0 that holds a shard of step, its
 * checksums not checked: the slot in *sl (the caller closes it), the shard's
 * view in *v; the slot's index, -1 when none holds it. */
static inline int open_rank0_slot_of_step(env_t *e, uint64_t step, ftc_slot_t *sl,
                                          ftc_shard_view_t *v)
{
    for (int k = 0; k < 3; k++) {
        char name[FTC_SLOT_NAME_MAX];
        snprintf(name, sizeof name, "ftc.%s.n0.r0.s%d", e->job, k);
        ftc_err_t err = {0};
        if (ftc_slot_open(name, true, sl, &err))
            continue;
        if (ftc_shard_open(v, sl->base, sl->size, 0, &err) == 0 && v->info.step == step)
            return k;
        ftc_slot_close(sl);
    }
    return -1;
}

/* Overwrites tensor 0 (floats) of the shard at base (size bytes, opened in
 * v) with val and seals it again (generation 1): its content verifies, and
 * it is another version of its step. */
static inline void forge_tensor0(uint8_t *base, uint64_t size, const ftc_shard_view_t *v,
                                 float val)
{
    ftc_shard_tensor_t tt;
    ftc_shard_get(v, 0, &tt);
    float *p = (float *)(uintptr_t)tt.data;
    for (uint64_t i = 0; i < tt.length / sizeof(float); i++)
        p[i] = val;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_seal(base, size, 1, &err), 0);
}

/* The current generation of ctl's job. */
static inline uint64_t job_generation(ftc_ctl_t *ctl)
{
    uint64_t gen = 0;
    uint32_t world = 0;
    assert_int_equal(ftc_ctl_generation(ctl, &gen, &world), 0);
    return gen;
}

/* Waits (timeout_ms at most) until the commit record of ctl's job has
 * rank's report of step; returns its checksum. */
static inline uint64_t wait_commit_report(ftc_ctl_t *ctl, int64_t step, uint32_t rank,
                                          int timeout_ms)
{
    uint64_t gen = job_generation(ctl), ck = 0;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)timeout_ms);
    for (;;) {
        bool found = false;
        assert_int_equal(ftc_ctl_commit_checksum(ctl, gen, step, rank, &ck, &found), 0);
        if (found)
            return ck;
        if (ftc_deadline_expired(d))
            fail_msg("rank %u's report of step %lld never reached the commit record", rank,
                     (long long)step);
        ftc_sleep_ms(10);
    }
}

/* cmocka teardown of a test that uses envs: the envs it left (it failed
 * before its teardown_env), then the Redis fixture. */
static inline int agent_fixture_teardown(void **state)
{
    for (int i = 0; i < 4; i++)
        if (agent_fixture_live[i])
            teardown_env(agent_fixture_live[i]);
    return redis_fixture_teardown(state);
}

#endif
