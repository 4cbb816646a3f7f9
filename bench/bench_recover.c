/*
 * bench_recover.c — time to recover a job from a lost node, phase by phase,
 * with the in-memory tier against a restart from the persist tier measured
 * in the same run.
 *
 * For each state size per rank: a real `ftc run --simulate-nodes 3` job (3
 * node supervisors, 1 rank each, embedded Redis, real agents), the training
 * binary tests/ckpt/rank_main checkpointing every step (fixed --step-ms) and
 * printing its TIMING lines. After --kill-at committed steps the bench kills
 * node 1's supervisor with SIGKILL (its agent and rank die with it) and wipes
 * its /dev/shm; when the job's event stream has the node_lost event it starts
 * a replacement node 1 (`ftc run --node-rank 1`, an empty node from a spare
 * pool). The supervisors' `recovery` phases (plugins/run.c) and the ranks'
 * TIMING lines give the timeline, from the kill:
 *   detect      kill -> the failure's first notice: node_lost (the event's
 *                  t_detect_ms), or a supervisor's "detected" phase if earlier
 *   stop        -> the survivors' ranks stopped (latest node)
 *   rendezvous  -> the new round closed (latest node; includes the spare's start)
 *   rebuild     -> agents of the new generation up, ranks forked (latest node)
 *   restore     -> ftc_restore returned in every rank (the lost rank's shard is
 *                  fetched from a peer's replica, or read from the persist tier)
 *   first step  -> every rank finished its first step after the restore (the
 *                  rank's own byte-for-byte check of the restored state is not
 *                  counted)
 * Three modes per size: "memory" (redundancy 1: one replica per shard, no
 * persist tier), "persist" (redundancy 0, persist tier every step: the lost
 * rank's state can only come back from disk, through the agent's fallback;
 * the survivors restore from their own slots) and "restart" (the classical
 * baseline: as persist, but once node_lost is seen the whole job is killed,
 * every node's /dev/shm wiped and the persist tier's page cache dropped, and
 * the job started again with the same job id and Redis (`ftc redis`, started
 * by the bench, outlives it): every rank reads its state from disk).
 * Lost steps: per rank, its last step done before the kill minus the step it
 * restored (recomputed: its last step done in the failed generation minus the
 * restored one; survivors keep stepping until they are stopped).
 *
 * Reports, never judges: a missed target is printed, the exit status is
 * nonzero only when a run could not be measured.
 *
 * usage: bench_recover [--sizes 64MiB,256MiB[,1GiB]] [--ftc PATH] [--rank PATH]
 *                      [--dir DIR] [--step-ms MS] [--kill-at STEP] [--after N]
 *                      [--modes memory,persist,restart] [--timeout S] [--opt FLAG=VALUE]...
 * --opt passes --FLAG=VALUE to `ftc run` (e.g. --opt agent-timeout-ms=5000).
 */
#include "ckpt/persist.h"
#include "core/clock.h"
#include "detect/control.h"
#include "detect/redis.h"
#include "detect/status.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES 3
#define MAXR 8
#define MAXGEN 64

enum { M_MEMORY, M_PERSIST, M_RESTART, M_INPROC, NMODES };
static const char *const MODE_NAME[NMODES] = {"memory", "persist", "restart", "inproc"};

typedef struct cfg {
    char ftc[PATH_MAX], rank[PATH_MAX], dir[PATH_MAX];
    const char *trainer; /* --trainer MODEL: the ranks are `ftc train --model MODEL` */
    int step_ms, kill_at, after, timeout_s;
    const char *opts[16];
    int nopts;
} cfg_t;

typedef struct result {
    bool ok;
    char why[256];
    long long t_kill, t_detect;
    long long t_stop, t_rdzv, t_rebuild, t_restore, t_first; /* wall ms, latest node/rank */
    long long restore_ms[NODES]; /* ftc_restore time per rank */
    long long groups_ms;         /* --trainer: the slowest rank's communicator rebuild */
    long long step_ms;           /* median step time before the kill */
    int lost, recomputed, rounds;
    long long restored[NODES];
} result_t;

static void die(const char *what)
{
    fprintf(stderr, "bench_recover: %s\n", what);
    exit(1);
}

static long long wall_ms(void)
{
    return (long long)ftc_wall_ms();
}

static size_t size_arg(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t m = 1;
    if (!strcasecmp(end, "KiB"))
        m = 1024;
    else if (!strcasecmp(end, "MiB"))
        m = (size_t)1 << 20;
    else if (!strcasecmp(end, "GiB"))
        m = (size_t)1 << 30;
    else if (*end)
        die("sizes: use N, NKiB, NMiB or NGiB");
    if (v <= 0)
        die("sizes must be positive");
    return (size_t)(v * (double)m);
}

static void wipe_shm(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    size_t n = strlen(prefix);
    char p[600];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, n)) {
            snprintf(p, sizeof p, "/dev/shm/%s", e->d_name);
            unlink(p);
        }
    closedir(d);
}

/* Drops a file's pages from the page cache (after writing back dirty ones):
 * the lost node's persist files are then read from storage by the restart, as
 * a replacement node would, not from this host's memory. */
static int evict_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type != FTW_F)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return 0;
}

static void evict_cache(const char *dir)
{
    nftw(dir, evict_one, 16, FTW_PHYS);
}

static void rm_rf(const char *path)
{
    pid_t p = fork();
    if (p == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (p > 0)
        waitpid(p, NULL, 0);
}

/* fork + exec in a process group of its own, stdout and stderr to out */
static pid_t spawn(char **argv, const char *out)
{
    fflush(NULL);
    pid_t p = fork();
    if (p < 0)
        die("fork failed");
    if (p == 0) {
        setpgid(0, 0);
        FILE *f = freopen(out, "w", stdout);
        if (!f || dup2(1, 2) < 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(p, p);
    return p;
}

static int wait_until(pid_t p, long long deadline)
{
    for (;;) {
        int st;
        pid_t r = waitpid(p, &st, WNOHANG);
        if (r == p)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -1;
        if (wall_ms() > deadline) {
            kill(-p, SIGKILL);
            waitpid(p, &st, 0);
            return -2;
        }
        ftc_sleep_ms(50);
    }
}

/* ---- the timeline, from the output files --------------------------------------------- */

typedef struct tl {
    /* ranks: per generation */
    long long restored_at[MAXGEN][NODES], restored_step[MAXGEN][NODES], restore_ms[MAXGEN][NODES];
    long long verify_ms[MAXGEN][NODES], first_step_at[MAXGEN][NODES], groups_ms[MAXGEN][NODES];
    long long last_before_kill[NODES], last_in_gen[MAXGEN][NODES];
    long long steps_t[4096];
    int nsteps_t;
    /* supervisors: per generation, latest t of each phase over nodes */
    long long phase[MAXGEN][5]; /* detected stopped rendezvous agent started */
    long long first_detected[MAXGEN]; /* earliest "detected" over nodes */
    int bad;
} tl_t;

static const char *const PHASES[5] = {"detected", "stopped", "rendezvous", "agent", "started"};

static void parse(const char *path, tl_t *t, long long t_kill)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[2048];
    long long prev_step_t[NODES] = {0};
    while (fgets(line, sizeof line, f)) {
        int r, g;
        long long a, b, c;
        char *p;
        if (strstr(line, "RESTORED") && strstr(line, "BAD"))
            t->bad++;
        if (sscanf(line, "TIMING rank %d gen %d restored %lld ms %lld at %lld", &r, &g, &a, &b,
                   &c) == 5 &&
            r >= 0 && r < NODES && g >= 0 && g < MAXGEN) {
            t->restored_step[g][r] = a, t->restore_ms[g][r] = b, t->restored_at[g][r] = c;
        } else if (sscanf(line, "TIMING rank %d gen %d groups ms %lld at %lld", &r, &g, &a, &b) ==
                       4 &&
                   r >= 0 && r < NODES && g >= 0 && g < MAXGEN) {
            t->groups_ms[g][r] = a;
        } else if (sscanf(line, "TIMING rank %d gen %d verified ms %lld at %lld", &r, &g, &a,
                          &b) == 4 &&
                   r >= 0 && r < NODES && g >= 0 && g < MAXGEN) {
            t->verify_ms[g][r] = a;
        } else if (sscanf(line, "TIMING rank %d gen %d step %lld at %lld", &r, &g, &a, &b) == 4 &&
                   r >= 0 && r < NODES && g >= 0 && g < MAXGEN) {
            if (!t->first_step_at[g][r])
                t->first_step_at[g][r] = b;
            t->last_in_gen[g][r] = a;
            if (b <= t_kill) {
                t->last_before_kill[r] = a;
                if (prev_step_t[r] && t->nsteps_t < 4096)
                    t->steps_t[t->nsteps_t++] = b - prev_step_t[r];
                prev_step_t[r] = b;
            }
        } else if ((p = strstr(line, "recovery, generation ")) &&
                   sscanf(p, "recovery, generation %d: phase=", &g) == 1 && g >= 0 && g < MAXGEN) {
            char *ph = strstr(p, "phase=");
            char *tm = strstr(p, "t_ms=");
            if (!ph || !tm)
                continue;
            ph += 6;
            long long when = atoll(tm + 5);
            for (int k = 0; k < 5; k++) {
                if (strncmp(ph, PHASES[k], strlen(PHASES[k])) || when < t_kill)
                    continue;
                if (when > t->phase[g][k])
                    t->phase[g][k] = when;
                if (k == 0 && (!t->first_detected[g] || when < t->first_detected[g]))
                    t->first_detected[g] = when;
            }
        }
    }
    fclose(f);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void on_event(void *arg, const ftc_status_event_t *e)
{
    long long *t = arg;
    if (!*t && !strcmp(e->kind, "node_lost") && !strcmp(e->node, "node1"))
        *t = e->t_detect_ms ? (long long)e->t_detect_ms : wall_ms();
}

/* The generation that failed (the last with a step before the kill) and the
 * one that recovered (the first later one where every rank stepped). */
static void timeline(result_t *R, const char *out1, const char *out2, int mode)
{
    tl_t *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory");
    parse(out1, t, R->t_kill);
    parse(out2, t, R->t_kill);
    int failed = -1, fin = -1;
    for (int g = 0; g < MAXGEN; g++)
        for (int r = 0; r < NODES; r++)
            if (t->first_step_at[g][r] && t->first_step_at[g][r] <= R->t_kill)
                failed = g;
    for (int g = failed + 1; g < MAXGEN && failed >= 0 && fin < 0; g++) {
        int n = 0;
        for (int r = 0; r < NODES; r++)
            n += t->first_step_at[g][r] > 0 && t->restored_at[g][r] > 0;
        if (n == NODES)
            fin = g;
    }
    if (failed < 0 || fin < 0) {
        snprintf(R->why, sizeof R->why, "no generation recovered with every rank (see %s)", out1);
        free(t);
        return;
    }
    if (t->bad) {
        snprintf(R->why, sizeof R->why, "a rank restored BAD state (see %s)", out1);
        free(t);
        return;
    }
    R->rounds = fin - failed;
    /* stop: the failed generation's survivors; the rest: the generation that recovered */
    if (mode != M_RESTART) { /* restart: the bench's kill of the whole job, set by run_one */
        R->t_stop = t->phase[failed][1];
        /* detection: the failure's first notice, the node_lost event or a
         * supervisor that saw it first (a survivor's rank failing against
         * the dead one): stop then counts from it, never below 0 */
        if (t->first_detected[failed] && t->first_detected[failed] < R->t_detect)
            R->t_detect = t->first_detected[failed];
    }
    R->t_rdzv = t->phase[fin][2];
    R->t_rebuild = t->phase[fin][4];
    R->lost = R->recomputed = -1000000;
    for (int r = 0; r < NODES; r++) {
        long long first = t->first_step_at[fin][r] - t->verify_ms[fin][r];
        if (t->restored_at[fin][r] > R->t_restore)
            R->t_restore = t->restored_at[fin][r];
        if (first > R->t_first)
            R->t_first = first;
        R->restore_ms[r] = t->restore_ms[fin][r];
        if (t->groups_ms[fin][r] > R->groups_ms)
            R->groups_ms = t->groups_ms[fin][r];
        R->restored[r] = t->restored_step[fin][r];
        long long lost = t->last_before_kill[r] - t->restored_step[fin][r];
        long long redo = lost;
        for (int g = failed; g < fin; g++)
            if (t->last_in_gen[g][r] - t->restored_step[fin][r] > redo)
                redo = t->last_in_gen[g][r] - t->restored_step[fin][r];
        if (lost > R->lost)
            R->lost = (int)lost;
        if (redo > R->recomputed)
            R->recomputed = (int)redo;
    }
    if (t->nsteps_t) {
        qsort(t->steps_t, (size_t)t->nsteps_t, sizeof t->steps_t[0], cmp_ll);
        R->step_ms = t->steps_t[t->nsteps_t / 2];
    }
    R->ok = true;
    free(t);
}

/* ---- one run ------------------------------------------------------------------------ */

/* Whether a process of group pg is still running (a zombie has exited: its
 * memory and mappings are released; the orphans of a killed job are reaped
 * by PID 1, which may take seconds in a container). */
static bool group_alive(pid_t pg)
{
    DIR *d = opendir("/proc");
    if (!d)
        return kill(-pg, 0) == 0;
    struct dirent *e;
    bool alive = false;
    while (!alive && (e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char p[300], buf[512];
        snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *rp = strrchr(buf, ')'), st;
        int ppid, pgrp;
        if (rp && sscanf(rp + 1, " %c %d %d", &st, &ppid, &pgrp) == 3 && pgrp == pg &&
            st != 'Z' && st != 'X')
            alive = true;
    }
    closedir(d);
    return alive;
}

/* Waits until no process of group pg runs any more (a killed job's
 * supervisors, agents and ranks); false at the deadline. */
static bool group_gone(pid_t pg, long long deadline)
{
    while (group_alive(pg)) {
        if (wall_ms() > deadline)
            return false;
        ftc_sleep_ms(5);
    }
    return true;
}

/* The newest committed step in the persist tier of every node (the minimum
 * over nodes), -1 while some node's tier has none. */
static long long persisted_all(const char *pdir)
{
    long long low = LLONG_MAX;
    for (int n = 0; n < NODES; n++) {
        char d[PATH_MAX + 120];
        snprintf(d, sizeof d, "%s/node%d", pdir, n);
        ftc_persist_t *p = ftc_persist_open_reader(d, NULL);
        ftc_persist_version_t *v = NULL;
        int nv = 0;
        long long newest = -1;
        if (p && ftc_persist_list(p, &v, &nv) == 0)
            for (int i = 0; i < nv && newest < 0; i++)
                if (v[i].state == FTC_PV_COMMITTED)
                    newest = (long long)v[i].step;
        free(v);
        ftc_persist_close(p);
        if (newest < low)
            low = newest;
    }
    return low;
}

static void run_one(const cfg_t *C, size_t bytes, int mode, result_t *R)
{
    memset(R, 0, sizeof *R);
    bool persist = mode == M_PERSIST || mode == M_RESTART;
    char job[64], jd[PATH_MAX + 80], out1[PATH_MAX + 100], out2[PATH_MAX + 100],
        pdir[PATH_MAX + 100];
    snprintf(job, sizeof job, "brec%d%zu%c", (int)getpid(), bytes >> 20, MODE_NAME[mode][0]);
    snprintf(jd, sizeof jd, "%s/%s", C->dir, job);
    snprintf(out1, sizeof out1, "%s/run.out", jd);
    snprintf(out2, sizeof out2, mode == M_RESTART ? "%s/restart.out" : "%s/spare.out", jd);
    snprintf(pdir, sizeof pdir, "%s/persist", jd);
    rm_rf(jd);
    if (mkdir(jd, 0700))
        die("cannot create the job directory under --dir");
    char floats[32], steps[32], stepms[32], red[32], pd[PATH_MAX + 120];
    snprintf(floats, sizeof floats, "%zu", bytes / 8);
    snprintf(steps, sizeof steps, "%d", C->kill_at + C->after + 4);
    snprintf(stepms, sizeof stepms, "%d", C->step_ms);
    snprintf(red, sizeof red, "--redundancy=%d", persist ? 0 : 1);
    snprintf(pd, sizeof pd, "--persist-dir=%s", pdir);
    char jdir_opt[PATH_MAX + 100];
    snprintf(jdir_opt, sizeof jdir_opt, "%s", jd);

    /* argv: ftc run [node opts] common... -- rank ... */
    char *av[64];
    int n = 0;
    av[n++] = (char *)C->ftc;
    av[n++] = "run";
    int node_opt = n; /* two slots: --simulate-nodes 3 | --node-rank 1 */
    av[n++] = "--simulate-nodes";
    av[n++] = "3";
    int redis_opt = n; /* two slots: --settle-ms 300 | --redis URL */
    av[n++] = "--settle-ms";
    av[n++] = "300";
    char *common[] = {"--nnodes", "3:3", "--job", job, "--job-dir", jdir_opt, "--max-restarts",
                      "4", red};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        av[n++] = common[i];
    if (persist) {
        av[n++] = pd;
        av[n++] = "--persist-every=1";
    }
    if (mode == M_INPROC)
        av[n++] = "--in-process";
    for (int i = 0; i < C->nopts; i++)
        av[n++] = (char *)C->opts[i];
    char *tail[] = {"--", (char *)C->rank, "--steps", steps, "--step-ms", stepms, "--floats",
                    floats, "--restore", "--strict", "--timing", NULL};
    /* the reference trainer: a global batch of 12 sequences whatever the DP
     * degree (3 ranks, 4 each); FTC_TRAIN_TIMING (set in main) for its lines */
    char *train[] = {"--", (char *)C->ftc, "train", "--model", (char *)C->trainer,
                     "--micro-batch", "1", "--global-batch", "12", "--seq-len", "16",
                     "--corpus-bytes", "60000", "--eval-batches", "1", "--threads", "1",
                     "--log-every", "1000", "--steps", steps, NULL};
    char **tl = C->trainer ? train : tail;
    for (size_t i = 0; tl[i]; i++)
        av[n++] = tl[i];
    av[n] = NULL;

    long long deadline = wall_ms() + (long long)C->timeout_s * 1000;
    pid_t redis_pid = 0;
    if (mode == M_RESTART) {
        /* the job's Redis, outliving the job: `ftc run` finds it through
         * JOB_DIR/redis.url, the restarted job too */
        char rout[PATH_MAX + 100], ujob[96], udir[PATH_MAX + 16];
        snprintf(rout, sizeof rout, "%s/redis.out", jd);
        snprintf(ujob, sizeof ujob, "--job=%s", job);
        snprintf(udir, sizeof udir, "--job-dir=%s", jd);
        char *rv[] = {(char *)C->ftc, "redis", ujob, udir, NULL};
        redis_pid = spawn(rv, rout);
        char uf[PATH_MAX + 100];
        snprintf(uf, sizeof uf, "%s/redis.url", jd);
        while (access(uf, R_OK) && wall_ms() < deadline &&
               waitpid(redis_pid, NULL, WNOHANG) == 0)
            ftc_sleep_ms(20);
        if (access(uf, R_OK)) { /* the job would start a Redis of its own, gone with it */
            snprintf(R->why, sizeof R->why, "`ftc redis` did not start (see %s)", rout);
            kill(redis_pid, SIGKILL);
            waitpid(redis_pid, NULL, 0);
            return;
        }
    }
    pid_t job_pid = spawn(av, out1), spare_pid = 0;
    /* the job's Redis */
    char urlf[PATH_MAX + 100], url[512] = "";
    snprintf(urlf, sizeof urlf, "%s/redis.url", jd);
    ftc_ctl_t *ctl = NULL;
    while (!ctl && wall_ms() < deadline) {
        FILE *f = fopen(urlf, "r");
        if (f) {
            if (fgets(url, sizeof url, f))
                url[strcspn(url, "\r\n")] = 0;
            fclose(f);
            ftc_redis_url_t u;
            ftc_err_t err = {0};
            ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
            ftc_redis_t *r = NULL;
            if (url[0] && ftc_redis_url_parse(url, &u, &err) == 0 &&
                (r = ftc_redis_connect(&u, &ro, &err)))
                ctl = ftc_ctl_create(r, job, &err);
        }
        if (!ctl && waitpid(job_pid, NULL, WNOHANG) == job_pid) {
            job_pid = 0;
            break;
        }
        if (!ctl)
            ftc_sleep_ms(50);
    }
    if (!ctl) {
        snprintf(R->why, sizeof R->why, "the job's Redis never came up (see %s)", out1);
        goto done;
    }
    /* wait for kill_at committed */
    int64_t committed = -1;
    uint64_t g = 0;
    while (wall_ms() < deadline) {
        if (ftc_ctl_committed(ctl, &committed, &g) == 0 && committed >= C->kill_at)
            break;
        if (waitpid(job_pid, NULL, WNOHANG) == job_pid) {
            job_pid = 0;
            break;
        }
        ftc_sleep_ms(10);
    }
    if (committed < C->kill_at) {
        snprintf(R->why, sizeof R->why, "step %d never committed (see %s)", C->kill_at, out1);
        goto done;
    }
    /* persist modes: every node's tier must hold a version before the kill
     * (a 256 MiB write takes seconds here and lags the commits), or the lost
     * rank would have nothing to restore and start over */
    while (persist && persisted_all(pdir) < 0 && wall_ms() < deadline) {
        if (waitpid(job_pid, NULL, WNOHANG) == job_pid) {
            job_pid = 0;
            break;
        }
        ftc_sleep_ms(20);
    }
    if (persist && persisted_all(pdir) < 0) {
        snprintf(R->why, sizeof R->why, "the persist tier of some node held no version before "
                 "the job ended (see %s)", out1);
        goto done;
    }
    char pidf[PATH_MAX + 100];
    snprintf(pidf, sizeof pidf, "%s/node1.pid", jd);
    FILE *f = fopen(pidf, "r");
    int victim = 0;
    if (!f || fscanf(f, "%d", &victim) != 1 || victim <= 0) {
        if (f)
            fclose(f);
        snprintf(R->why, sizeof R->why, "no pid in %s", pidf);
        goto done;
    }
    fclose(f);
    char after[32] = "0";
    /* skip the events so far */
    ftc_events_read(ctl, after, sizeof after, 100000, 0, NULL, NULL);
    R->t_kill = wall_ms();
    kill(victim, SIGKILL);
    char shm[96];
    snprintf(shm, sizeof shm, "ftc.%s.n1.", job); /* node 1's slots and replicas */
    wipe_shm(shm);
    if (persist && mode != M_RESTART) {
        char lost[1200];
        snprintf(lost, sizeof lost, "%s/node1", pdir);
        evict_cache(lost);
    }
    /* node_lost -> start the spare as node 1 */
    long long t_lost = 0;
    while (!t_lost && wall_ms() < deadline) {
        ftc_events_read(ctl, after, sizeof after, 64, 20, on_event, &t_lost);
        if (!t_lost)
            ftc_sleep_ms(5);
    }
    if (!t_lost) {
        snprintf(R->why, sizeof R->why, "no node_lost event for node1 (see %s)", out1);
        goto done;
    }
    R->t_detect = t_lost;
    if (mode == M_RESTART) {
        /* a classical restart: the whole job goes (every supervisor, agent and
         * rank), comes back on clean nodes (no slot, no replica in /dev/shm, no
         * persist file in the page cache) with the same job id and Redis */
        kill(-job_pid, SIGKILL);
        waitpid(job_pid, NULL, 0);
        bool gone = group_gone(job_pid, deadline);
        job_pid = 0;
        R->t_stop = wall_ms();
        if (!gone) {
            snprintf(R->why, sizeof R->why, "the killed job's processes did not go away");
            goto done;
        }
        snprintf(shm, sizeof shm, "ftc.%s.", job);
        wipe_shm(shm);
        evict_cache(pdir);
        job_pid = spawn(av, out2);
        goto done;
    }
    av[node_opt] = "--node-rank";
    av[node_opt + 1] = "1";
    av[redis_opt] = "--redis";
    av[redis_opt + 1] = url;
    spare_pid = spawn(av, out2);
done:
    if (job_pid > 0 && wait_until(job_pid, deadline) != 0 && !R->why[0])
        snprintf(R->why, sizeof R->why, "the job did not finish cleanly (see %s)", out1);
    if (spare_pid > 0 && wait_until(spare_pid, deadline) != 0 && !R->why[0])
        snprintf(R->why, sizeof R->why, "the spare node did not finish cleanly (see %s)", out2);
    ftc_ctl_destroy(ctl);
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        if (wait_until(redis_pid, wall_ms() + 5000) == -2 && !R->why[0])
            snprintf(R->why, sizeof R->why, "`ftc redis` did not stop on SIGTERM");
    }
    snprintf(shm, sizeof shm, "ftc.%s.", job);
    wipe_shm(shm);
    rm_rf(pdir);
    if (R->why[0])
        return;
    timeline(R, out1, out2, mode);
}

/* ---- sizing, report, main ---------------------------------------------------------------- */

static unsigned long long mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb << 10;
}

static unsigned long long fs_free(const char *path)
{
    struct statvfs v;
    return statvfs(path, &v) ? 0 : (unsigned long long)v.f_bavail * v.f_frsize;
}

static void load_avg(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = 0;
    if (f) {
        if (fgets(buf, (int)cap, f))
            buf[strcspn(buf, "\n")] = 0;
        fclose(f);
    }
}

static void print_row(const char *size, const char *mode, const result_t *R)
{
    if (!R->ok) {
        printf("  %-9s %-8s not measured: %s\n", size, mode, R->why);
        return;
    }
    long long k = R->t_kill;
    char groups[24] = "-";
    if (R->groups_ms > 0)
        snprintf(groups, sizeof groups, "%lld", R->groups_ms);
    printf("  %-9s %-8s %7lld %7lld %6lld %10lld %8lld %8lld %7s %10lld %8lld %5d %10d %6d   "
           "%lld/%lld/%lld\n",
           size, mode, R->step_ms, R->t_detect - k, R->t_stop - R->t_detect, R->t_rdzv - R->t_stop,
           R->t_rebuild - R->t_rdzv, R->t_restore - R->t_rebuild, groups,
           R->t_first - R->t_restore, R->t_first - k, R->lost, R->recomputed, R->rounds,
           R->restore_ms[0], R->restore_ms[1], R->restore_ms[2]);
}

static void self_dir(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0)
        die("cannot read /proc/self/exe");
    buf[n] = 0;
    char *s = strrchr(buf, '/');
    if (s)
        *s = 0;
}

int main(int argc, char **argv)
{
    cfg_t C = {.step_ms = 100, .kill_at = 4, .after = 4, .timeout_s = 300};
    size_t sizes[8];
    int nsizes = 0;
    bool modes[NMODES] = {true, true, true, false}; /* memory, persist, restart, inproc */
    bool modes_given = false;
    char here[PATH_MAX];
    self_dir(here, sizeof here);
    snprintf(C.ftc, sizeof C.ftc, "%s/../cli/ftc", here);
    snprintf(C.rank, sizeof C.rank, "%s/../tests/ckpt/rank_main", here);
    snprintf(C.dir, sizeof C.dir, "%s/../bench-tmp", here);
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--sizes") && v) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            for (char *t = strtok(list, ","); t && nsizes < 8; t = strtok(NULL, ","))
                sizes[nsizes++] = size_arg(t);
        } else if (!strcmp(a, "--modes") && v) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            memset(modes, 0, sizeof modes);
            modes_given = true;
            for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
                int m = 0;
                while (m < NMODES && strcmp(t, MODE_NAME[m]))
                    m++;
                if (m == NMODES)
                    die("--modes: a list of memory, persist, restart, inproc");
                modes[m] = true;
            }
        } else if (!strcmp(a, "--trainer") && v) {
            C.trainer = v;
        } else if (!strcmp(a, "--ftc") && v) {
            snprintf(C.ftc, sizeof C.ftc, "%s", v);
        } else if (!strcmp(a, "--rank") && v) {
            snprintf(C.rank, sizeof C.rank, "%s", v);
        } else if (!strcmp(a, "--dir") && v) {
            snprintf(C.dir, sizeof C.dir, "%s", v);
        } else if (!strcmp(a, "--step-ms") && v) {
            C.step_ms = atoi(v);
        } else if (!strcmp(a, "--kill-at") && v) {
            C.kill_at = atoi(v);
        } else if (!strcmp(a, "--after") && v) {
            C.after = atoi(v);
        } else if (!strcmp(a, "--timeout") && v) {
            C.timeout_s = atoi(v);
        } else if (!strcmp(a, "--opt") && v && C.nopts < 16) {
            char *o = malloc(strlen(v) + 3);
            if (!o)
                die("out of memory");
            sprintf(o, "--%s", v);
            C.opts[C.nopts++] = o;
        } else {
            fprintf(stderr,
                    "usage: bench_recover [--sizes 64MiB,256MiB[,1GiB]]\n"
                    "         [--modes memory,persist,restart,inproc] [--trainer MODEL]\n"
                    "         [--step-ms 100] [--kill-at 4] [--after 4] [--timeout 300]\n"
                    "         [--ftc PATH] [--rank PATH] [--dir DIR] [--opt KEY=VALUE]...\n");
            return 2;
        }
    }
    bool inflight_one = false;
    for (int i = 0; i < C.nopts; i++)
        inflight_one = inflight_one || !strcmp(C.opts[i], "--checkpoint-inflight=1") ||
                       !strcmp(C.opts[i], "--checkpoint.inflight=1");
    if (C.step_ms < 0 || C.kill_at < 1 || C.after < 1 || C.timeout_s < 10)
        die("--step-ms >= 0, --kill-at >= 1, --after >= 1, --timeout >= 10");
    if (C.trainer && !modes_given)
        modes[M_INPROC] = true; /* the reference trainer knows the in-process mode */
    if (!modes[M_MEMORY] && !modes[M_PERSIST] && !modes[M_RESTART] && !modes[M_INPROC])
        die("--modes: a list of memory, persist, restart, inproc");
    if (C.trainer) { /* the model sets the state: one row per mode */
        nsizes = 1;
        sizes[0] = 0;
        setenv("FTC_TRAIN_TIMING", "1", 1);
    }
    if (nsizes == 0) {
        sizes[nsizes++] = (size_t)64 << 20;
        sizes[nsizes++] = (size_t)256 << 20;
    }
    if (access(C.ftc, X_OK) || (!C.trainer && access(C.rank, X_OK))) {
        fprintf(stderr, "bench_recover: %s or %s is not there: build the ftc and rank_main "
                        "targets (or pass --ftc / --rank)\n", C.ftc, C.rank);
        return 1;
    }
    mkdir(C.dir, 0700);
    signal(SIGPIPE, SIG_IGN);
    char la[128];
    load_avg(la, sizeof la);
    if (C.trainer)
        printf("bench_recover: %d simulated nodes x 1 rank of the reference trainer (ftc train "
               "--model %s, DP=3, ZeRO-1,\n  a checkpoint every step), node 1 killed (SIGKILL, "
               "its /dev/shm wiped) once step %d is committed,\n  a spare node 1 started on "
               "node_lost\n  load average at start: %s\n",
               NODES, C.trainer, C.kill_at, la);
    else
        printf("bench_recover: %d simulated nodes x 1 rank (tests/ckpt/rank_main), a checkpoint "
               "every step (--step-ms %d),\n  node 1 killed (SIGKILL, its /dev/shm wiped) once "
               "step %d is committed, a spare node 1 started on node_lost\n  load average at "
               "start: %s\n",
               NODES, C.step_ms, C.kill_at, la);
    printf(
        "  modes: memory = redundancy 1 (a replica in a peer's memory), no persist tier;"
        " persist = redundancy 0,\n  persist tier every step in %s (the lost rank restores "
        "from disk;\n  the lost node's persist files are evicted from the page cache at the kill, "
        "as a replacement node\n  would not have them in memory); restart = as persist, but on "
        "node_lost the whole job is killed\n  (stop = until its processes are gone), every "
        "node's /dev/shm wiped and the persist tier evicted\n  from the page cache, and the job "
        "started again (same job id and Redis): every rank restores from disk; inproc = as\n"
        "  memory, with `ftc run --in-process`: surviving ranks continue in their processes\n"
        "  (only for binaries that know the mode, such as ftc train)\n",
        C.dir);
    printf("  phases, ms from the end of the previous one (latest node or rank): detect = kill "
           "-> node_lost;\n  stop = survivors' ranks stopped; rendezvous = round closed; rebuild "
           "= agents up + ranks forked;\n  restore = every rank's ftc_restore returned (ftc "
           "train: its init, groups included); groups = of that, the slowest\n  rank's "
           "communicator rebuild (ftc train only); first step = every rank's first step done "
           "(its own check not counted)\n\n");
    printf("  %-9s %-8s %7s %7s %6s %10s %8s %8s %7s %10s %8s %5s %10s %6s   %s\n", "state",
           "mode", "step", "detect", "stop", "rendezvous", "rebuild", "restore", "groups",
           "first step", "total", "lost", "recomputed", "rounds", "restore ms rank 0/1/2");
    int errors = 0;
    for (int i = 0; i < nsizes; i++) {
        size_t b = sizes[i];
        char name[32];
        if (C.trainer)
            snprintf(name, sizeof name, "%.31s", C.trainer);
        else if (b >= (size_t)1 << 30 && b % ((size_t)1 << 30) == 0)
            snprintf(name, sizeof name, "%zu GiB", b >> 30);
        else
            snprintf(name, sizeof name, "%zu MiB", b >> 20);
        /* memory mode: 3 slots per rank (2 with checkpoint.inflight 1: the
         * third is never written, so never allocated) + 2 replica slots in a
         * peer, per rank; RAM: those + the rank's state (rank_main checks a
         * restore element by element, without a copy) + one more for the
         * spare's slots while the lost node's are not yet freed */
        int slots = inflight_one ? 2 : 3;
        unsigned long long shm_need = (unsigned long long)NODES * (unsigned)(slots + 2) * b,
                           mem_need = shm_need + (unsigned long long)(NODES + 1) * b,
                           disk_need = (unsigned long long)NODES * 4 * b;
        unsigned long long shm_free = fs_free("/dev/shm"), mem_free = mem_available(),
                           disk_free = fs_free(C.dir);
        if (!C.trainer && (shm_need > shm_free || mem_need > mem_free)) {
            printf("  %-9s skipped: needs about %.1f GiB of /dev/shm (%.1f free) and %.1f GiB "
                   "of memory (%.1f available)\n",
                   name, shm_need / 1073741824.0, shm_free / 1073741824.0,
                   mem_need / 1073741824.0, mem_free / 1073741824.0);
            continue;
        }
        result_t R[NMODES];
        memset(R, 0, sizeof R);
        for (int m = 0; m < NMODES; m++) {
            if (!modes[m])
                continue;
            if (m != M_MEMORY && disk_need > disk_free) {
                snprintf(R[m].why, sizeof R[m].why, "needs about %.1f GiB free in %s",
                         disk_need / 1073741824.0, C.dir);
            } else {
                run_one(&C, b, m, &R[m]);
            }
            errors += !R[m].ok;
            print_row(name, MODE_NAME[m], &R[m]);
            fflush(stdout);
        }
        for (int m = M_PERSIST; m < NMODES; m++) {
            if (!R[0].ok || !R[m].ok)
                continue;
            if (m == M_INPROC) { /* against restart mode with the same in-memory tier */
                printf("  %s: total (kill -> every rank's first step) inproc / memory (restart "
                       "mode) = %.2fx; restore %lld vs %lld ms, communicators %lld vs %lld ms\n",
                       name,
                       (double)(R[m].t_first - R[m].t_kill) / (double)(R[0].t_first - R[0].t_kill),
                       R[m].t_restore - R[m].t_rebuild, R[0].t_restore - R[0].t_rebuild,
                       R[m].groups_ms, R[0].groups_ms);
                continue;
            }
            long long mem = R[0].t_restore - R[0].t_rebuild;
            double rr = (double)(R[m].t_restore - R[m].t_rebuild) / (double)(mem > 0 ? mem : 1);
            double rt = (double)(R[m].t_first - R[m].t_kill) / (double)(R[0].t_first - R[0].t_kill);
            printf("  %s: restore (ranks forked -> every rank restored) %s / memory = %.1fx "
                   "(target >= 10x): %s\n",
                   name, MODE_NAME[m], rr, rr >= 10 ? "met" : "MISSED");
            printf("  %s: total (kill -> every rank's first step) %s / memory = %.2fx\n", name,
                   MODE_NAME[m], rt);
        }
        if (R[0].ok)
            printf("  %s: lost steps in memory mode = %d (target <= 1 with a checkpoint every "
                   "step): %s; recomputed %d\n",
                   name, R[0].lost, R[0].lost <= 1 ? "met" : "MISSED", R[0].recomputed);
    }
    load_avg(la, sizeof la);
    printf("\n  load average at the end: %s\n", la);
    return errors ? 1 : 0;
}
