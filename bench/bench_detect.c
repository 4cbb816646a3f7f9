/*
 * bench_detect.c — the failure-detection benchmark: how fast ftc's detector
 * (detect/detector.c) sees a failure, and what heartbeating costs Redis at
 * scale. Everything runs against a real embedded redis-server on loopback.
 *
 * (a) A small real job: one observer detector in this process, agent
 *     processes that are this binary re-executed in agent mode (a detector
 *     each), and real signals. Node loss: SIGKILL of an agent process, timed
 *     from kill() and from the moment its last heartbeat's TTL ran out (PTTL
 *     read right after the kill). Rank exit: SIGKILL of a child process the
 *     observer watches, timed from kill() to on_event. Hang: a rank stops
 *     reporting progress; timed from its last report, printed as the excess
 *     over the configured limit.
 * (b) Scale: N members in ONE redis = N-1 simulated agents + the observer (a
 *     real detector with default options). The simulated agents heartbeat
 *     (SET hb PX 1000 every 250 ms) several per connection with pipelining
 *     and are registered with ftc_ctl_join. After a warm-up, Redis ops/s and
 *     CPU and the simulator's CPU are measured over a steady window; then 1%
 *     of the agents stop heartbeating at one instant and each one's detection
 *     is timed (on_event node_lost) from its last heartbeat's send time.
 *
 * Every figure is printed with the target or baseline it is compared to. The
 * exit status is nonzero only on errors, never because a target was missed.
 *
 * usage: bench_detect [--quick] [--reps R] [--nodes 256,1024,4096]
 *                     [--per-conn G] [--fail-pct P] [--threads T] [--seed S]
 *                     [--hang-ms MS] [--scan-ms MS] [--hz HZ] [--expire-effort E]
 */
#include "core/clock.h"
#include "core/log.h"
#include "detect/control.h"
#include "detect/detector.h"
#include "detect/redis.h"
#include "detect/redis_server.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HB_MS 250     /* heartbeat period of every agent (detector default) */
#define TTL_MS 1000   /* heartbeat TTL (detector default) */
#define MAX_NODES 16  /* entries of --nodes */
#define MAX_EVENTS 4096
#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- options -------------------------------------------------------------------- */

typedef struct opts {
    int reps;              /* repetitions of each failure in (a) */
    int nodes[MAX_NODES];  /* N of each scale run */
    int nnodes;
    int per_conn;          /* simulated agents per connection (one pipeline) */
    double fail_pct;       /* percent of the simulated agents stopped */
    int threads;           /* simulator threads */
    uint64_t seed;
    int hang_ms;           /* hang_min_ms of the observer in (a) */
    int warm_ms, window_ms; /* scale run: warm-up and steady measurement */
    int scan_ms;           /* observer's member scan in (b) (detector default 500) */
    int hz;                /* redis hz (embedded default 100) */
    int expire_effort;     /* redis active-expire-effort, 0 = leave the default (1) */
    bool quick;
} opts_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_detect [--quick] [--reps R] [--nodes N1,N2,...] [--per-conn G]\n"
               "                    [--fail-pct P] [--threads T] [--seed S] [--hang-ms MS]\n"
               "  --quick      about 20 s: --reps 5 --nodes 256,4096, shorter windows\n"
               "  --reps       repetitions of each failure of the small job (default 20)\n"
               "  --nodes      members of each scale run (default 256,1024,4096)\n"
               "  --per-conn   simulated agents per connection and pipeline (default 16)\n"
               "  --fail-pct   percent of simulated agents that stop heartbeating (default 1)\n"
               "  --threads    simulator threads (default 2)\n"
               "  --hang-ms    hang limit of the small job's observer (default 300)\n"
               "  --scan-ms    member scan period of the scale runs' observer (default 500)\n"
               "  --hz         redis hz (default 100, as the embedded server)\n"
               "  --expire-effort  redis active-expire-effort 1..10 (default: redis's, 1)\n");
}

static int parse_nodes(const char *s, opts_t *o)
{
    o->nnodes = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 2 || v > 1000000 || o->nnodes == MAX_NODES)
            return -1;
        o->nodes[o->nnodes++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return o->nnodes ? 0 : -1;
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.reps = 20, .per_conn = 16, .fail_pct = 1.0, .threads = 2, .seed = 1,
                  .hang_ms = 300, .warm_ms = 2000, .window_ms = 4000,
                  .scan_ms = 500, .hz = 100};
    parse_nodes("256,1024,4096", o);
    bool reps_set = false, nodes_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (v && !strcmp(a, "--reps")) {
            o->reps = atoi(v), reps_set = true, i++;
        } else if (v && !strcmp(a, "--nodes")) {
            if (parse_nodes(v, o))
                return -1;
            nodes_set = true, i++;
        } else if (v && !strcmp(a, "--per-conn")) {
            o->per_conn = atoi(v), i++;
        } else if (v && !strcmp(a, "--fail-pct")) {
            o->fail_pct = atof(v), i++;
        } else if (v && !strcmp(a, "--threads")) {
            o->threads = atoi(v), i++;
        } else if (v && !strcmp(a, "--seed")) {
            o->seed = strtoull(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--hang-ms")) {
            o->hang_ms = atoi(v), i++;
        } else if (v && !strcmp(a, "--scan-ms")) {
            o->scan_ms = atoi(v), i++;
        } else if (v && !strcmp(a, "--hz")) {
            o->hz = atoi(v), i++;
        } else if (v && !strcmp(a, "--expire-effort")) {
            o->expire_effort = atoi(v), i++;
        } else {
            return -1;
        }
    }
    if (o->quick) {
        if (!reps_set)
            o->reps = 5;
        if (!nodes_set)
            parse_nodes("256,4096", o);
        o->warm_ms = 1000;
        o->window_ms = 2000;
    }
    if (o->reps < 1 || o->per_conn < 1 || o->per_conn > 4096 || o->threads < 1 ||
        o->threads > 64 || o->fail_pct <= 0 || o->fail_pct > 100 || o->hang_ms < 50 ||
        o->scan_ms < 10 || o->hz < 1 || o->hz > 500 || o->expire_effort < 0 ||
        o->expire_effort > 10)
        return -1;
    return 0;
}

/* ---- small helpers ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) /* xorshift64* */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of v[0..n) (sorts v); NAN when n == 0. */
static double pct(double *v, int n, double p)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static double ms_between(uint64_t from_ns, uint64_t to_ns)
{
    return ((double)to_ns - (double)from_ns) / 1e6;
}

/* CPU seconds (user + system) of a process, from /proc/PID/stat; -1 on error. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut, st;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double thread_cpu_s(pthread_t t)
{
    clockid_t cid;
    struct timespec ts;
    if (pthread_getcpuclockid(t, &cid) || clock_gettime(cid, &ts))
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double self_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A field of INFO SECTION as a number or a string. */
static int redis_info(ftc_redis_t *r, const char *section, const char *field, char *out,
                      size_t cap)
{
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc_redis_cmdv(r, true, &rep, "INFO", section, NULL);
    if (rc)
        return rc;
    const char *s;
    size_t len;
    ftc_err_t err = {0};
    rc = ftc_redis_want_str(rep, "INFO", &s, &len, &err);
    if (rc == 0) {
        rc = FTC_ENOENT;
        size_t fl = strlen(field);
        for (const char *p = s; p && p < s + len; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            if (!strncmp(p, field, fl) && p[fl] == ':') {
                size_t n = strcspn(p + fl + 1, "\r\n");
                snprintf(out, cap, "%.*s", (int)n, p + fl + 1);
                rc = 0;
                break;
            }
        }
    }
    ftc_redis_reply_free(rep);
    return rc;
}

static int redis_commands(ftc_redis_t *r, unsigned long long *v)
{
    char buf[64];
    int rc = redis_info(r, "stats", "total_commands_processed", buf, sizeof buf);
    if (rc == 0)
        *v = strtoull(buf, NULL, 10);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static ftc_redis_server_t *server_start(const opts_t *o, const char *dir, ftc_err_t *err)
{
    ftc_redis_server_options_t so = FTC_REDIS_SERVER_OPTIONS_INIT;
    so.dir = dir;
    so.hz = o->hz;
    ftc_redis_server_t *srv = ftc_redis_server_start(&so, err);
    if (srv && o->expire_effort) {
        ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(srv), NULL, err);
        char e[8];
        snprintf(e, sizeof e, "%d", o->expire_effort);
        if (!r || ftc_redis_cmdv(r, true, NULL, "CONFIG", "SET", "active-expire-effort", e,
                                 NULL) != 0) {
            if (r)
                ftc_err_set(err, FTC_EREDIS, "%s", ftc_redis_errstr(r));
            ftc_redis_close(r);
            ftc_redis_server_stop(srv);
            return NULL;
        }
        ftc_redis_close(r);
    }
    return srv;
}

static ftc_ctl_t *ctl_open(const ftc_redis_url_t *url, const char *job, ftc_err_t *err)
{
    ftc_redis_t *r = ftc_redis_connect(url, NULL, err);
    if (!r)
        return NULL;
    ftc_ctl_t *c = ftc_ctl_create(r, job, err);
    if (!c)
        ftc_redis_close(r);
    return c;
}

/* ---- agent mode: one detector in its own process -------------------------------------- */

static volatile sig_atomic_t agent_stop;

static void agent_on_term(int sig)
{
    (void)sig;
    agent_stop = 1;
}

/* bench_detect --agent URLFILE JOB NODE READYFD: writes one byte to READYFD
 * once its detector runs, then runs until SIGTERM (or, in the benchmark, until
 * it is killed with SIGKILL). */
static int agent_main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    ftc_log_configure(FTC_LOG_ERROR, argv[4]);
    ftc_redis_url_t url;
    ftc_err_t err = {0};
    if (ftc_redis_url_file_read(argv[2], &url, &err)) {
        fprintf(stderr, "bench_detect agent: %s\n", err.msg);
        return 1;
    }
    signal(SIGTERM, agent_on_term);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.job = argv[3];
    o.node = argv[4];
    o.campaign = false;
    ftc_detector_t *d = ftc_detector_start(&url, &o, &err);
    if (!d) {
        fprintf(stderr, "bench_detect agent %s: %s\n", argv[4], err.msg);
        return 1;
    }
    int fd = atoi(argv[5]);
    char b = 'R';
    ssize_t w = write(fd, &b, 1);
    close(fd);
    while (!agent_stop && w == 1)
        ftc_sleep_ms(20);
    ftc_detector_stop(d, true);
    return w == 1 ? 0 : 1;
}

/* Starts an agent process; waits for it to be ready. pid 0 on failure. */
static pid_t agent_spawn(const char *self, const char *urlfile, const char *job, const char *node)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return 0;
    char *argv[] = {(char *)self, "--agent", (char *)urlfile, (char *)job, (char *)node, "3",
                    NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* only async-signal-safe calls until exec: fd 3 = the ready pipe, no other fds */
        if (p[1] == 3)
            fcntl(3, F_SETFD, 0);
        else if (dup2(p[1], 3) != 3)
            _exit(127);
        close_range(4, ~0u, 0);
        execv(self, argv);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return 0;
    }
    struct pollfd pfd = {p[0], POLLIN, 0};
    char b = 0;
    int n = poll(&pfd, 1, 15000);
    bool ok = n == 1 && read(p[0], &b, 1) == 1 && b == 'R';
    close(p[0]);
    if (!ok) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 0;
    }
    return pid;
}

/* ---- (a) the small real job ------------------------------------------------------------ */

typedef struct evlog {
    pthread_mutex_t mu;
    int n;
    struct {
        char kind[24], node[72];
        int rank;
        int64_t step;
        uint64_t at_ns;
    } ev[MAX_EVENTS];
} evlog_t;

static void evlog_cb(void *arg, const ftc_ctl_event_t *e)
{
    uint64_t now = ftc_now_ns();
    evlog_t *l = arg;
    pthread_mutex_lock(&l->mu);
    if (l->n < MAX_EVENTS) {
        snprintf(l->ev[l->n].kind, sizeof l->ev[0].kind, "%s", e->kind);
        snprintf(l->ev[l->n].node, sizeof l->ev[0].node, "%s", e->node);
        l->ev[l->n].rank = e->rank;
        l->ev[l->n].step = e->step;
        l->ev[l->n].at_ns = now;
        l->n++;
    }
    pthread_mutex_unlock(&l->mu);
}

/* Waits for the first event of kind (about node, or rank when node is NULL,
 * and step when step >= 0) at or after index from; its time, or 0. */
static uint64_t evlog_wait(evlog_t *l, int from, const char *kind, const char *node, int rank,
                           int64_t step, int ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    for (;;) {
        pthread_mutex_lock(&l->mu);
        for (int i = from; i < l->n; i++)
            if (!strcmp(l->ev[i].kind, kind) && (node ? !strcmp(l->ev[i].node, node)
                                                      : l->ev[i].rank == rank) &&
                (step < 0 || l->ev[i].step == step)) {
                uint64_t t = l->ev[i].at_ns;
                pthread_mutex_unlock(&l->mu);
                return t;
            }
        pthread_mutex_unlock(&l->mu);
        if (ftc_deadline_expired(d))
            return 0;
        ftc_sleep_ms(1);
    }
}

static int evlog_len(evlog_t *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->n;
    pthread_mutex_unlock(&l->mu);
    return n;
}

typedef struct small_result {
    double *kill_ms, *ttl_ms;   /* node loss: from kill(), past the last TTL expiry */
    int nnode, nttl, nnode_missed;
    double *exit_ms;            /* rank exit from kill() */
    int nexit, nexit_missed;
    double *hang_ms;            /* hang: excess over the limit */
    int nhang, nhang_missed;
    int hang_limit_ms;
    char redis_version[32];
} small_result_t;

static int run_small(const opts_t *o, const char *self, const char *dir, uint64_t *rng,
                     small_result_t *res)
{
    int ret = 1;
    ftc_err_t err = {0};
    ftc_redis_server_t *srv = server_start(o, dir, &err);
    ftc_ctl_t *ctl = NULL;
    ftc_detector_t *obs = NULL;
    evlog_t *log = calloc(1, sizeof *log);
    if (!srv || !log) {
        fprintf(stderr, "bench_detect: embedded redis: %s\n", err.msg);
        goto out_srv;
    }
    pthread_mutex_init(&log->mu, NULL);
    const ftc_redis_url_t *url = ftc_redis_server_url(srv);
    ctl = ctl_open(url, "ja", &err);
    if (!ctl) {
        fprintf(stderr, "bench_detect: %s\n", err.msg);
        goto out_log;
    }
    redis_info(ftc_ctl_redis(ctl), "server", "redis_version", res->redis_version,
               sizeof res->redis_version);
    ftc_detector_options_t d = FTC_DETECTOR_OPTIONS_INIT;
    d.job = "ja";
    d.node = "obs";
    d.hang_min_ms = o->hang_ms;
    d.on_event = evlog_cb;
    d.arg = log;
    obs = ftc_detector_start(url, &d, &err);
    if (!obs) {
        fprintf(stderr, "bench_detect: observer: %s\n", err.msg);
        goto out_ctl;
    }
    /* rank exit: a child the observer watches, killed with SIGKILL */
    for (int i = 0; i < o->reps; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("bench_detect: fork");
            goto out_obs;
        }
        if (child == 0) {
            for (;;)
                pause();
        }
        int from = evlog_len(log);
        if (ftc_detector_watch_pid(obs, 0, child) != 0) {
            fprintf(stderr, "bench_detect: watch_pid failed\n");
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            goto out_obs;
        }
        ftc_sleep_ms(30); /* the local watch polls the pidfd by now */
        uint64_t t0 = ftc_now_ns();
        kill(child, SIGKILL);
        uint64_t t1 = evlog_wait(log, from, "rank_exit", NULL, 0, -1, 2000);
        waitpid(child, NULL, 0);
        if (t1)
            res->exit_ms[res->nexit++] = ms_between(t0, t1);
        else
            res->nexit_missed++;
    }
    /* hang: rank 1 reports 5 steps of 10 ms, then stops; the limit is
     * max(hang_factor x median step, hang_min_ms) = hang_min_ms here */
    res->hang_limit_ms = (int)fmax(d.hang_factor * 10.0, o->hang_ms);
    int64_t step = 0;
    for (int i = 0; i < o->reps; i++) {
        int from = evlog_len(log);
        uint64_t last = 0;
        for (int k = 0; k < 5; k++) {
            last = ftc_now_ns();
            ftc_detector_progress(obs, 1, step++, 10000);
            if (k < 4)
                ftc_sleep_ms(10);
        }
        uint64_t t1 = evlog_wait(log, from, "hang", NULL, 1, step - 1, res->hang_limit_ms + 2000);
        if (t1)
            res->hang_ms[res->nhang++] = ms_between(last, t1) - res->hang_limit_ms;
        else
            res->nhang_missed++;
    }
    /* node loss: an agent process killed with SIGKILL at a random phase of its heartbeat */
    for (int i = 0; i < o->reps; i++) {
        char node[32], suffix[48], key[128];
        snprintf(node, sizeof node, "a%d", i);
        pid_t pid = agent_spawn(self, ftc_redis_server_url_file(srv), "ja", node);
        if (!pid) {
            fprintf(stderr, "bench_detect: agent %s did not start\n", node);
            goto out_obs;
        }
        ftc_sleep_ms(300 + rng_next(rng) % HB_MS);
        int from = evlog_len(log);
        uint64_t t0 = ftc_now_ns();
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(suffix, sizeof suffix, "hb:%s", node);
        ftc_ctl_key(ctl, suffix, key, sizeof key);
        ftc_redis_reply_t *rep = NULL;
        long long pttl = -3;
        uint64_t tq = 0;
        if (ftc_redis_cmdv(ftc_ctl_redis(ctl), true, &rep, "PTTL", key, NULL) == 0) {
            tq = ftc_now_ns();
            ftc_redis_want_int(rep, "PTTL", &pttl, &err);
        }
        ftc_redis_reply_free(rep);
        uint64_t t1 = evlog_wait(log, from, "node_lost", node, -1, -1, TTL_MS + 3000);
        if (t1) {
            res->kill_ms[res->nnode++] = ms_between(t0, t1);
            if (pttl >= 0)
                res->ttl_ms[res->nttl++] = ms_between(tq + (uint64_t)pttl * 1000000u, t1);
        } else {
            res->nnode_missed++;
        }
        ftc_ctl_leave(ctl, node); /* what recovery does with a lost member */
    }
    ret = 0;
out_obs:
    ftc_detector_stop(obs, true);
out_ctl:
    ftc_ctl_destroy(ctl);
out_log:
    if (log)
        pthread_mutex_destroy(&log->mu);
out_srv:
    free(log);
    ftc_redis_server_stop(srv);
    return ret;
}

/* ---- (b) the scale simulation -------------------------------------------------------- */

typedef struct sim sim_t;

typedef struct sim_thread {
    sim_t *sim;
    int index;
    pthread_t tid;
    bool started;
    uint64_t batches, cmds, errors;
    uint64_t rtt_sum_ns, rtt_max_ns, lag_max_ns;
    char errmsg[256];
} sim_thread_t;

struct sim {
    int nagents, per_conn, nconn, nthreads;
    char (*keys)[96];              /* heartbeat key of each agent */
    char (*names)[16];             /* node id of each agent ("s<index>") */
    char dkey[96];                 /* the deadline set, as ftc_ctl_heartbeat writes it */
    atomic_bool *stopped;          /* agent no longer heartbeats */
    _Atomic uint64_t *last_send_ns; /* when its last heartbeat was sent */
    ftc_redis_t **conns;           /* conn c serves agents [c*per_conn, ...) */
    uint64_t t0_ns;                /* schedule origin */
    atomic_bool quit;
    sim_thread_t *th;
};

static void *sim_main(void *arg)
{
    sim_thread_t *t = arg;
    sim_t *s = t->sim;
    const uint64_t period = (uint64_t)HB_MS * 1000000u;
    int g = s->per_conn;
    const char **argv = calloc((size_t)g * 9, sizeof *argv);
    const char ***argvs = calloc((size_t)g * 2, sizeof *argvs);
    int *argcs = calloc((size_t)g * 2, sizeof *argcs);
    char (*vals)[64] = calloc((size_t)g, sizeof *vals);
    char (*dues)[24] = calloc((size_t)g, sizeof *dues);
    int *sent_to = calloc((size_t)g, sizeof *sent_to); /* agents in this batch */
    if (!argv || !argvs || !argcs || !vals || !dues || !sent_to) {
        snprintf(t->errmsg, sizeof t->errmsg, "simulator: out of memory");
        t->errors++;
        goto out;
    }
    /* connections c = index, index + nthreads, ...: phases c * period / nconn */
    for (uint64_t k = 0; !atomic_load(&s->quit); k++) {
        for (int c = t->index; c < s->nconn && !atomic_load(&s->quit); c += s->nthreads) {
            uint64_t due = s->t0_ns + k * period + (uint64_t)c * period / (uint64_t)s->nconn;
            uint64_t now = ftc_now_ns();
            if (due > now) {
                struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
                }
                now = ftc_now_ns();
            }
            if (now > due && now - due > t->lag_max_ns)
                t->lag_max_ns = now - due;
            int n = 0, first = c * g, last = first + g < s->nagents ? first + g : s->nagents;
            uint64_t wall = ftc_wall_ms();
            for (int a = first; a < last; a++) {
                if (atomic_load(&s->stopped[a]))
                    continue;
                /* "gen step step_time_us wall_ms", as ftc_ctl_heartbeat writes it */
                snprintf(vals[n], sizeof vals[n], "0 %" PRIu64 " 100000 %" PRIu64, k, wall);
                const char **v = argv + 9 * n;
                v[0] = "SET";
                v[1] = s->keys[a];
                v[2] = vals[n];
                v[3] = "PX";
                v[4] = STR(TTL_MS);
                /* and its deadline, as ftc_ctl_heartbeat pipelines it */
                snprintf(dues[n], sizeof dues[n], "%" PRIu64, wall + TTL_MS);
                v[5] = "ZADD";
                v[6] = s->dkey;
                v[7] = dues[n];
                v[8] = s->names[a];
                argvs[2 * n] = v;
                argcs[2 * n] = 5;
                argvs[2 * n + 1] = v + 5;
                argcs[2 * n + 1] = 4;
                sent_to[n] = a;
                n++;
            }
            if (!n)
                continue;
            uint64_t sent = ftc_now_ns();
            for (int i = 0; i < n; i++)
                atomic_store(&s->last_send_ns[sent_to[i]], sent);
            int rc = ftc_redis_pipeline(s->conns[c], true, 2 * n, argcs, argvs, NULL, NULL);
            uint64_t rtt = ftc_now_ns() - sent;
            t->batches++;
            t->cmds += (uint64_t)n;
            t->rtt_sum_ns += rtt;
            if (rtt > t->rtt_max_ns)
                t->rtt_max_ns = rtt;
            if (rc) {
                t->errors++;
                snprintf(t->errmsg, sizeof t->errmsg, "%s", ftc_redis_errstr(s->conns[c]));
            }
        }
    }
out:
    free(argv);
    free(argvs);
    free(argcs);
    free(vals);
    free(dues);
    free(sent_to);
    return NULL;
}

typedef struct scale_obs {
    sim_t *sim;
    _Atomic uint64_t *lost_ns; /* first node_lost of each agent */
    atomic_int false_pos;      /* node_lost of an agent that still heartbeats */
    atomic_int dups;           /* a second node_lost of one agent */
    atomic_int via_scan;       /* first detections made by the member scan ... */
    atomic_int via_notify;     /* ... by a keyspace expiry notification ... */
    atomic_int via_deadline;   /* ... and by the leader's poll of the deadline set */
} scale_obs_t;

static void scale_cb(void *arg, const ftc_ctl_event_t *e)
{
    uint64_t now = ftc_now_ns();
    scale_obs_t *so = arg;
    if (strcmp(e->kind, "node_lost") || e->node[0] != 's')
        return;
    char *end;
    long i = strtol(e->node + 1, &end, 10);
    if (*end || i < 0 || i >= so->sim->nagents)
        return;
    if (!atomic_load(&so->sim->stopped[i])) {
        atomic_fetch_add(&so->false_pos, 1);
        return;
    }
    uint64_t zero = 0;
    if (!atomic_compare_exchange_strong(&so->lost_ns[i], &zero, now))
        atomic_fetch_add(&so->dups, 1);
    else if (strstr(e->detail, "(scan)"))
        atomic_fetch_add(&so->via_scan, 1);
    else if (strstr(e->detail, "deadline"))
        atomic_fetch_add(&so->via_deadline, 1);
    else
        atomic_fetch_add(&so->via_notify, 1);
}

typedef struct scale_result {
    int members, agents, conns, failed, detected, false_pos, dups, via_scan, via_notify,
        via_deadline;
    double hb_p50, hb_p99, hb_max;  /* since the last heartbeat was sent */
    double ttl_p50, ttl_p99;        /* past its TTL expiry */
    double ops, redis_cpu, sim_cpu, obs_cpu; /* ops/s, % of one core */
    double rtt_mean_ms, rtt_max_ms, lag_max_ms;
    double join_s;
    uint64_t sim_errors;
} scale_result_t;

static int run_scale(const opts_t *o, int members, const char *dir, uint64_t *rng,
                     scale_result_t *res)
{
    int ret = 1;
    ftc_err_t err = {0};
    sim_t s;
    memset(&s, 0, sizeof s);
    memset(res, 0, sizeof *res);
    scale_obs_t so;
    memset(&so, 0, sizeof so);
    so.sim = &s;
    double *lat = NULL;
    int *victims = NULL;
    ftc_ctl_t *ctl = NULL;
    ftc_detector_t *obs = NULL;
    ftc_redis_server_t *srv = server_start(o, dir, &err);
    if (!srv) {
        fprintf(stderr, "bench_detect: embedded redis: %s\n", err.msg);
        return 1;
    }
    const ftc_redis_url_t *url = ftc_redis_server_url(srv);
    char job[32];
    snprintf(job, sizeof job, "jn%d", members);
    ctl = ctl_open(url, job, &err);
    if (!ctl) {
        fprintf(stderr, "bench_detect: %s\n", err.msg);
        goto out;
    }
    s.nagents = members - 1; /* the observer is the N-th member */
    s.per_conn = o->per_conn;
    s.nconn = (s.nagents + s.per_conn - 1) / s.per_conn;
    s.nthreads = o->threads < s.nconn ? o->threads : s.nconn;
    s.keys = calloc((size_t)s.nagents, sizeof *s.keys);
    s.names = calloc((size_t)s.nagents, sizeof *s.names);
    ftc_ctl_key(ctl, "deadlines", s.dkey, sizeof s.dkey);
    s.stopped = calloc((size_t)s.nagents, sizeof *s.stopped);
    s.last_send_ns = calloc((size_t)s.nagents, sizeof *s.last_send_ns);
    s.conns = calloc((size_t)s.nconn, sizeof *s.conns);
    s.th = calloc((size_t)s.nthreads, sizeof *s.th);
    so.lost_ns = calloc((size_t)s.nagents, sizeof *so.lost_ns);
    if (!s.keys || !s.names || !s.stopped || !s.last_send_ns || !s.conns || !s.th || !so.lost_ns) {
        fprintf(stderr, "bench_detect: out of memory\n");
        goto out;
    }
    for (int a = 0; a < s.nagents; a++) {
        char suffix[32];
        snprintf(suffix, sizeof suffix, "hb:s%d", a);
        ftc_ctl_key(ctl, suffix, s.keys[a], sizeof s.keys[a]);
        snprintf(s.names[a], sizeof s.names[a], "s%d", a);
        atomic_init(&s.stopped[a], false);
        atomic_init(&s.last_send_ns[a], 0);
        atomic_init(&so.lost_ns[a], 0);
    }
    for (int c = 0; c < s.nconn; c++) {
        s.conns[c] = ftc_redis_connect(url, NULL, &err);
        if (!s.conns[c]) {
            fprintf(stderr, "bench_detect: simulator connection %d: %s\n", c, err.msg);
            goto out;
        }
    }
    /* heartbeats first, then membership (as an agent joins), then the observer */
    s.t0_ns = ftc_now_ns();
    atomic_init(&s.quit, false);
    for (int t = 0; t < s.nthreads; t++) {
        s.th[t].sim = &s;
        s.th[t].index = t;
        if (pthread_create(&s.th[t].tid, NULL, sim_main, &s.th[t]) != 0) {
            fprintf(stderr, "bench_detect: cannot start a simulator thread\n");
            goto out;
        }
        s.th[t].started = true;
    }
    ftc_sleep_ms(HB_MS + 20);
    uint64_t tj = ftc_now_ns();
    for (int a = 0; a < s.nagents; a++) {
        ftc_ctl_member_t m;
        memset(&m, 0, sizeof m);
        snprintf(m.node, sizeof m.node, "s%d", a);
        snprintf(m.host, sizeof m.host, "sim%d", a / s.per_conn);
        m.pid = a;
        m.joined_ms = ftc_wall_ms();
        if (ftc_ctl_join(ctl, &m) != 0) {
            fprintf(stderr, "bench_detect: join s%d: %s\n", a, ftc_ctl_errstr(ctl));
            goto out;
        }
    }
    res->join_s = ms_between(tj, ftc_now_ns()) / 1000.0;
    ftc_detector_options_t d = FTC_DETECTOR_OPTIONS_INIT;
    d.job = job;
    d.node = "obs";
    d.scan_ms = o->scan_ms;
    d.on_event = scale_cb;
    d.arg = &so;
    obs = ftc_detector_start(url, &d, &err);
    if (!obs) {
        fprintf(stderr, "bench_detect: observer: %s\n", err.msg);
        goto out;
    }
    ftc_sleep_ms((uint64_t)o->warm_ms);

    /* steady state: Redis ops/s and CPU, simulator and observer CPU */
    ftc_redis_t *r = ftc_ctl_redis(ctl);
    pid_t rpid = ftc_redis_server_pid(srv);
    unsigned long long c0, c1;
    double sim0 = 0, sim1 = 0;
    uint64_t w0 = ftc_now_ns();
    double rc0 = proc_cpu_s(rpid), me0 = self_cpu_s();
    for (int t = 0; t < s.nthreads; t++)
        sim0 += thread_cpu_s(s.th[t].tid);
    if (redis_commands(r, &c0)) {
        fprintf(stderr, "bench_detect: INFO stats: %s\n", ftc_redis_errstr(r));
        goto out;
    }
    ftc_sleep_ms((uint64_t)o->window_ms);
    if (redis_commands(r, &c1)) {
        fprintf(stderr, "bench_detect: INFO stats: %s\n", ftc_redis_errstr(r));
        goto out;
    }
    double rc1 = proc_cpu_s(rpid), me1 = self_cpu_s();
    for (int t = 0; t < s.nthreads; t++)
        sim1 += thread_cpu_s(s.th[t].tid);
    double wall = ms_between(w0, ftc_now_ns()) / 1000.0;
    res->ops = (double)(c1 - c0) / wall;
    res->redis_cpu = rc0 < 0 || rc1 < 0 ? NAN : 100.0 * (rc1 - rc0) / wall;
    res->sim_cpu = 100.0 * (sim1 - sim0) / wall;
    res->obs_cpu = 100.0 * ((me1 - me0) - (sim1 - sim0)) / wall;

    /* failure: a random fail_pct of the agents stop heartbeating at one instant */
    int nfail = (int)lround(s.nagents * o->fail_pct / 100.0);
    if (nfail < 1)
        nfail = 1;
    victims = calloc((size_t)s.nagents, sizeof *victims);
    lat = calloc((size_t)nfail * 2, sizeof *lat);
    if (!victims || !lat)
        goto out;
    for (int a = 0; a < s.nagents; a++)
        victims[a] = a;
    for (int i = 0; i < nfail; i++) { /* partial Fisher-Yates */
        int j = i + (int)(rng_next(rng) % (uint64_t)(s.nagents - i));
        int t = victims[i];
        victims[i] = victims[j];
        victims[j] = t;
    }
    for (int i = 0; i < nfail; i++)
        atomic_store(&s.stopped[victims[i]], true);
    ftc_deadline_t dl = ftc_deadline_in_ms(TTL_MS + 4000);
    int detected = 0;
    while (!ftc_deadline_expired(dl)) {
        detected = 0;
        for (int i = 0; i < nfail; i++)
            detected += atomic_load(&so.lost_ns[victims[i]]) != 0;
        if (detected == nfail)
            break;
        ftc_sleep_ms(5);
    }
    ftc_sleep_ms(300); /* late duplicates and false positives */
    double *hb = lat, *pt = lat + nfail;
    int nd = 0;
    for (int i = 0; i < nfail; i++) {
        uint64_t tl = atomic_load(&so.lost_ns[victims[i]]);
        uint64_t ts = atomic_load(&s.last_send_ns[victims[i]]);
        if (!tl || !ts)
            continue;
        hb[nd] = ms_between(ts, tl);
        pt[nd] = hb[nd] - TTL_MS;
        nd++;
    }
    res->members = members;
    res->agents = s.nagents;
    res->conns = s.nconn;
    res->failed = nfail;
    res->detected = nd;
    res->false_pos = atomic_load(&so.false_pos);
    res->dups = atomic_load(&so.dups);
    res->via_scan = atomic_load(&so.via_scan);
    res->via_notify = atomic_load(&so.via_notify);
    res->via_deadline = atomic_load(&so.via_deadline);
    res->hb_p50 = pct(hb, nd, 50);
    res->hb_p99 = pct(hb, nd, 99);
    res->hb_max = pct(hb, nd, 100);
    res->ttl_p50 = pct(pt, nd, 50);
    res->ttl_p99 = pct(pt, nd, 99);
    ret = 0;
out:
    ftc_detector_stop(obs, true);
    atomic_store(&s.quit, true);
    uint64_t batches = 0, rtt_sum = 0;
    for (int t = 0; s.th && t < s.nthreads; t++) {
        if (!s.th[t].started)
            continue;
        pthread_join(s.th[t].tid, NULL);
        batches += s.th[t].batches;
        rtt_sum += s.th[t].rtt_sum_ns;
        res->sim_errors += s.th[t].errors;
        if (s.th[t].rtt_max_ns / 1e6 > res->rtt_max_ms)
            res->rtt_max_ms = (double)s.th[t].rtt_max_ns / 1e6;
        if (s.th[t].lag_max_ns / 1e6 > res->lag_max_ms)
            res->lag_max_ms = (double)s.th[t].lag_max_ns / 1e6;
        if (s.th[t].errors)
            fprintf(stderr, "bench_detect: simulator thread %d: %" PRIu64 " failed batches: %s\n",
                    t, s.th[t].errors, s.th[t].errmsg);
    }
    res->rtt_mean_ms = batches ? (double)rtt_sum / (double)batches / 1e6 : 0;
    if (res->sim_errors)
        ret = 1;
    for (int c = 0; s.conns && c < s.nconn; c++)
        ftc_redis_close(s.conns[c]);
    free(s.conns);
    free(s.keys);
    free(s.names);
    free(s.stopped);
    free(s.last_send_ns);
    free(s.th);
    free(so.lost_ns);
    free(victims);
    free(lat);
    ftc_ctl_destroy(ctl);
    ftc_redis_server_stop(srv);
    return ret;
}

/* ---- main ------------------------------------------------------------------------------ */

static const char *verdict(double v, double target)
{
    return isnan(v) ? "no data" : v <= target ? "met" : "NOT met";
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--agent"))
        return agent_main(argc, argv);
    opts_t o;
    if (parse_opts(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    ftc_log_configure(FTC_LOG_ERROR, "bench");
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        perror("bench_detect: /proc/self/exe");
        return 1;
    }
    self[sl] = '\0';
    const char *tmp = getenv("TMPDIR");
    char base[PATH_MAX], dir[PATH_MAX + 32];
    snprintf(base, sizeof base, "%s/ftc-bench-detect-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base)) {
        perror("bench_detect: mkdtemp");
        return 1;
    }
    uint64_t rng = o.seed * 0x9E3779B97F4A7C15ull + 1;
    int ret = 1;
    uint64_t t_start = ftc_now_ns();

    struct utsname un;
    uname(&un);
    printf("# bench_detect: failure detection (detect/detector.c) on an embedded redis\n\n");
    printf("machine: %s %s, %ld online cores; heartbeat %d ms, TTL %d ms, member scan %d ms "
           "(scale runs; 500 ms in the small job), redis hz %d, active-expire-effort %d\n",
           un.sysname, un.release, sysconf(_SC_NPROCESSORS_ONLN), HB_MS, TTL_MS, o.scan_ms, o.hz,
           o.expire_effort ? o.expire_effort : 1);
    printf("run: --reps %d --nodes", o.reps);
    for (int i = 0; i < o.nnodes; i++)
        printf("%s%d", i ? "," : " ", o.nodes[i]);
    printf(" --per-conn %d --fail-pct %g --threads %d --seed %" PRIu64 " --hang-ms %d%s\n\n",
           o.per_conn, o.fail_pct, o.threads, o.seed, o.hang_ms, o.quick ? " (--quick)" : "");
    fflush(stdout);

    /* (a) */
    small_result_t sr;
    memset(&sr, 0, sizeof sr);
    double *buf = calloc((size_t)o.reps * 4, sizeof *buf);
    scale_result_t *sc = calloc((size_t)o.nnodes, sizeof *sc);
    if (!buf || !sc)
        goto out;
    sr.kill_ms = buf;
    sr.ttl_ms = buf + o.reps;
    sr.exit_ms = buf + 2 * o.reps;
    sr.hang_ms = buf + 3 * o.reps;
    snprintf(dir, sizeof dir, "%s/small", base);
    if (run_small(&o, self, dir, &rng, &sr))
        goto out;
    double nk50 = pct(sr.kill_ms, sr.nnode, 50), nk99 = pct(sr.kill_ms, sr.nnode, 99);
    double nt50 = pct(sr.ttl_ms, sr.nttl, 50), nt99 = pct(sr.ttl_ms, sr.nttl, 99);
    double re50 = pct(sr.exit_ms, sr.nexit, 50), re99 = pct(sr.exit_ms, sr.nexit, 99);
    double hg50 = pct(sr.hang_ms, sr.nhang, 50), hg99 = pct(sr.hang_ms, sr.nhang, 99);
    printf("## (a) detection latency, small real job (redis %s; observer + agent processes; "
           "%d reps each)\n\n",
           sr.redis_version, o.reps);
    printf("| failure | timed from | n | missed | p50 ms | p99 ms | target | p99 / target |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    printf("| node loss (SIGKILL agent process) | kill() | %d | %d | %.1f | %.1f | <= TTL + 100 = "
           "%d ms | %.2f |\n",
           sr.nnode, sr.nnode_missed, nk50, nk99, TTL_MS + 100, nk99 / (TTL_MS + 100));
    printf("| node loss | TTL expiry of its last heartbeat | %d | %d | %.1f | %.1f | <= 100 ms "
           "| %.2f |\n",
           sr.nttl, sr.nnode_missed, nt50, nt99, nt99 / 100.0);
    printf("| rank exit (SIGKILL watched child) | kill() | %d | %d | %.3f | %.3f | <= 50 ms | "
           "%.4f |\n",
           sr.nexit, sr.nexit_missed, re50, re99, re99 / 50.0);
    printf("| hang (rank stops progress) | last progress + limit %d ms (excess) | %d | %d | %.1f "
           "| %.1f | none (local watch polls every 20 ms) | - |\n\n",
           sr.hang_limit_ms, sr.nhang, sr.nhang_missed, hg50, hg99);
    printf("hang excess p99 is %.1f%% of the %d ms limit. Node loss from kill() includes up to "
           "one heartbeat period (%d ms) of TTL left at the kill: expected TTL - U(0, %d) + "
           "notification delay.\n\n",
           100.0 * hg99 / sr.hang_limit_ms, sr.hang_limit_ms, HB_MS, HB_MS);
    fflush(stdout);

    /* (b) */
    for (int i = 0; i < o.nnodes; i++) {
        snprintf(dir, sizeof dir, "%s/n%d", base, o.nodes[i]);
        if (run_scale(&o, o.nodes[i], dir, &rng, &sc[i]))
            goto out;
        fprintf(stderr, "bench_detect: N=%d done (%.0f s so far)\n", o.nodes[i],
                ms_between(t_start, ftc_now_ns()) / 1000.0);
    }
    printf("## (b) scale: N members in one redis (N-1 simulated agents, %d per connection, "
           "pipelined; + 1 observer detector with default options)\n\n",
           o.per_conn);
    printf("Node loss: %g%% of the simulated agents stop heartbeating at one instant. \"since "
           "last hb\" = on_event(node_lost) - send time of the agent's last heartbeat; \"past "
           "TTL\" = that - %d ms (the earliest its key could expire).\n\n",
           o.fail_pct, TTL_MS);
    printf("| N | stopped | detected | by notification / deadline poll / scan | false | dup | "
           "since last hb p50 / p99 / max ms | past TTL "
           "p50 / p99 ms | target p99 <= %d ms | p99 / target |\n",
           TTL_MS + 100);
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < o.nnodes; i++) {
        scale_result_t *r = &sc[i];
        printf("| %d | %d | %d | %d / %d / %d | %d | %d | %.0f / %.0f / %.0f | %.0f / %.0f | %s | "
               "%.2f |\n",
               r->members, r->failed, r->detected, r->via_notify, r->via_deadline, r->via_scan,
               r->false_pos,
               r->dups, r->hb_p50, r->hb_p99,
               r->hb_max, r->ttl_p50, r->ttl_p99, verdict(r->hb_p99, TTL_MS + 100),
               r->hb_p99 / (TTL_MS + 100));
    }
    printf("\nLoad over a %.1f s steady window (after a %.1f s warm-up). Baseline: the "
           "heartbeats alone are (N-1) x %d SET/s.\n\n",
           o.window_ms / 1000.0, o.warm_ms / 1000.0, 1000 / HB_MS);
    printf("| N | conns | redis ops/s | heartbeat SET/s | ops / heartbeats | redis CPU %% of a "
           "core | target < 50%% | CPU / target | simulator CPU %% | observer CPU %% | batch RTT "
           "mean / max ms | max send lag ms | join s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < o.nnodes; i++) {
        scale_result_t *r = &sc[i];
        double hbs = (double)r->agents * 1000.0 / HB_MS;
        printf("| %d | %d | %.0f | %.0f | %.2f | %.1f | %s | %.2f | %.1f | %.1f | %.2f / %.1f | "
               "%.1f | %.2f |\n",
               r->members, r->conns, r->ops, hbs, r->ops / hbs, r->redis_cpu,
               isnan(r->redis_cpu) ? "no data" : r->redis_cpu < 50 ? "met" : "NOT met",
               r->redis_cpu / 50.0, r->sim_cpu, r->obs_cpu, r->rtt_mean_ms, r->rtt_max_ms,
               r->lag_max_ms, r->join_s);
    }
    printf("\n## targets\n\n");
    printf("- rank exit <= 50 ms p99: %.3f ms (%.4f of target) -> %s\n", re99, re99 / 50.0,
           verdict(re99, 50));
    printf("- node loss <= TTL + 100 ms p99, small job, from kill(): %.1f ms (%.2f of %d) -> "
           "%s\n",
           nk99, nk99 / (TTL_MS + 100), TTL_MS + 100, verdict(nk99, TTL_MS + 100));
    printf("- hang: no target in the issue; detected %.1f ms (p99) past its limit, the local "
           "watch polling every 20 ms\n",
           hg99);
    for (int i = 0; i < o.nnodes; i++) {
        if (sc[i].members != 4096)
            continue;
        printf("- node loss <= TTL + 100 ms p99 at N=4096: %.0f ms since last heartbeat (%.2f of "
               "%d) -> %s\n",
               sc[i].hb_p99, sc[i].hb_p99 / (TTL_MS + 100), TTL_MS + 100,
               verdict(sc[i].hb_p99, TTL_MS + 100));
        printf("- redis CPU < 50%% of one core at N=4096: %.1f%% (%.2f of target) -> %s\n",
               sc[i].redis_cpu, sc[i].redis_cpu / 50.0,
               isnan(sc[i].redis_cpu) ? "no data" : sc[i].redis_cpu < 50 ? "met" : "NOT met");
    }
    printf("\ntotal %.0f s\n", ms_between(t_start, ftc_now_ns()) / 1000.0);
    ret = 0;
out:
    free(buf);
    free(sc);
    nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return ret;
}
