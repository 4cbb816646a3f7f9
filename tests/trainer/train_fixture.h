/*
 * train_fixture.h — shared fixture of the tests that run real `ftc train`
 * processes (test_train_dp.c, test_train_tp.c, test_guard.c): starting and
 * reaping them, reading their output and final parameter hash, and the
 * two-node agent set-up (a real redis-server from redis_fixture.h, two real
 * `ftc agent`s over tcp;ofi_rxm, the two ranks of a job, the teardown that
 * kills the agents and removes the job's /dev/shm objects).
 *
 * Contract: include after "ftc_test.h", after defining
 *   TRAIN_FIXTURE_JOB_PREFIX   the job-id prefix of the agent tests (the job
 *                              id is the prefix and the test's pid);
 *   TRAIN_FIXTURE_FI_PROVIDER  (optional) FI_PROVIDER of every `ftc train`
 *                              started (set before the extra environment).
 * Every wait has a deadline and fails the test (cmocka) when it passes;
 * children die with the test (PR_SET_PDEATHSIG). Single-threaded tests only.
 */
#ifndef FTC_TEST_TRAINER_TRAIN_FIXTURE_H
#define FTC_TEST_TRAINER_TRAIN_FIXTURE_H

#include "ftc_test.h"

#include "core/clock.h"
#include "core/fsio.h"
#include "detect/redis_fixture.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#ifndef TRAIN_FIXTURE_JOB_PREFIX
#error "define TRAIN_FIXTURE_JOB_PREFIX before including train_fixture.h"
#endif

static inline const char *bindir(void)
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
static inline void start(proc_t *p, const char *dir, const char *tag, const char *const *env,
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
#ifdef TRAIN_FIXTURE_FI_PROVIDER
        setenv("FI_PROVIDER", TRAIN_FIXTURE_FI_PROVIDER, 1);
#endif
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
static inline int finish(proc_t *p, int timeout_ms)
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

/* The whole file (malloc'd, NUL-terminated); "" when it cannot be read. */
static inline char *slurp(const char *file)
{
    uint8_t *buf = NULL;
    size_t len;
    ftc_err_t err = {0};
    if (ftc_fs_read_file(file, 1 << 22, &buf, &len, &err)) return strdup("");
    return (char *)buf;
}

/* The file says `what` (silently). */
static inline bool said(const char *file, const char *what)
{
    char *s = slurp(file);
    bool y = strstr(s, what) != NULL;
    free(s);
    return y;
}

/* The file says `what`; prints the file when it does not. */
static inline bool expect_said(const char *file, const char *what)
{
    char *s = slurp(file);
    bool y = strstr(s, what) != NULL;
    if (!y) print_error("%s does not say '%s':\n%s\n", file, what, s);
    free(s);
    return y;
}

/* "params xxh3 HEX after N steps" of a finished run. */
static inline uint64_t params_hash(const char *file, int steps)
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
static inline void run_rc(const char *dir, const char *tag, const char *const *env,
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

/* Runs to a clean end; the final parameter hash after `steps` steps. */
static inline uint64_t run_ok(const char *dir, const char *tag, const char *const *env,
                              const char *const *args, int steps)
{
    proc_t p;
    run_rc(dir, tag, env, args, 0, &p);
    return params_hash(p.out, steps);
}

/* Waits until p's output says `what`; fails at once if p exits first. */
static inline void wait_said(proc_t *p, const char *what, int timeout_ms)
{
    const char *file = p->out;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)timeout_ms);
    while (!said(file, what)) {
        int st;
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            p->pid = -1;
            expect_said(file, what);
            fail_msg("%s: the process exited (status 0x%x) before saying '%s'", file, st, what);
        }
        if (ftc_deadline_expired(d)) {
            expect_said(file, what);
            fail_msg("%s never said '%s'", file, what);
        }
        ftc_sleep_ms(20);
    }
}

/* ---- with agents ---------------------------------------------------------- */

static pid_t g_agents[2]; /* killed by agent_teardown, also after a failure */

/* The paths of an agent test under the redis fixture's directory (jobdir
 * created), the job id and the server's URL. */
static inline void agent_job_init(redis_fixture_t *f, char jobdir[PATH_MAX], char persist[PATH_MAX],
                                  char url[512], char job[64])
{
    snprintf(jobdir, PATH_MAX, "%s/job", f->dir);
    snprintf(persist, PATH_MAX, "%s/persist", f->dir);
    snprintf(job, 64, TRAIN_FIXTURE_JOB_PREFIX "%d", (int)getpid() % 100000);
    mkdir(jobdir, 0700);
    char *u = slurp(ftc_redis_server_url_file(f->srv));
    u[strcspn(u, "\n")] = 0;
    snprintf(url, 512, "%s", u);
    free(u);
}

/* Starts agent i of 2 (redundancy 1, tcp;ofi_rxm) and waits for its socket. */
static inline pid_t start_agent(const char *jobdir, const char *persist, const char *job,
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
        execl(bin, bin, "agent", "--nodes", "2", "--index", idx, "--job", job, "--job-dir", jobdir,
              "--redundancy", "1", "--persist-dir", persist, "--persist-every", "1000",
              "--agent-timeout-ms", "8000", (char *)NULL);
        _exit(127);
    }
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(sock, &st) != 0) {
        int s;
        if (waitpid(pid, &s, WNOHANG) == pid) fail_msg("agent %d exited at start (see %s)", i, out);
        if (ftc_deadline_expired(d)) fail_msg("agent %d did not open its socket", i);
        ftc_sleep_ms(20);
    }
    return pid;
}

/* Starts the two ranks of a job (one per node, torchrun-style, over
 * tcp;ofi_rxm, a fresh rendezvous directory per call) with `ftc train args`;
 * outputs TAG-r0.out and TAG-r1.out in jobdir. */
/* start_ranks with one more environment variable per rank (extra[r], NULL: none). */
static inline void start_ranks_env(proc_t *p, const char *jobdir, const char *job,
                                   const char *tag, const char *const *args,
                                   const char *const *extra)
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
        const char *env[] = {envs[r][0], envs[r][1], envs[r][2],
                             envs[r][3], envs[r][4], "FI_PROVIDER=tcp;ofi_rxm",
                             extra ? extra[r] : NULL, NULL};
        char t[64];
        snprintf(t, sizeof t, "%s-r%d", tag, r);
        start(&p[r], jobdir, t, env, args);
    }
}

static inline void start_ranks(proc_t *p, const char *jobdir, const char *job, const char *tag,
                               const char *const *args)
{
    start_ranks_env(p, jobdir, job, tag, args, NULL);
}

/* Also after a failed assertion: the agents and their shared memory go. */
static inline int agent_teardown(void **state)
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
    snprintf(prefix, sizeof prefix, "ftc." TRAIN_FIXTURE_JOB_PREFIX "%d.", (int)getpid() % 100000);
    while (d && (de = readdir(d))) {
        if (!strncmp(de->d_name, prefix, strlen(prefix))) {
            char pth[PATH_MAX];
            snprintf(pth, sizeof pth, "/dev/shm/%s", de->d_name);
            unlink(pth);
        }
    }
    if (d) closedir(d);
    return redis_fixture_teardown(state);
}

#endif
