/*
 * detector.c — see detector.h. Two threads: the local watch (pidfds, hangs,
 * numbers; never blocks on Redis) and the Redis session (heartbeats, lease,
 * node loss, stragglers, publication). Events travel local -> callback ->
 * publish queue -> Redis stream.
 */
#include "detect/detector.h"
#include "detect/detector_internal.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3 /* Linux 5.4 */
#endif

#define FTC_DET_MAX_RANKS 256
#define FTC_DET_CPU_MS 1000 /* CPU use sampling period of each watched rank */
#define FTC_DET_BUSY 0.05   /* a share of one CPU above this is busy, not stuck */
/* how long an exit's event waits for its status (ftc_detector_exit_status) or a BYE read late */
#define FTC_DET_EXIT_WAIT_MS 1000
#define FTC_DET_PENDING 4 /* exits of one rank's processes whose events wait at once */
#define FTC_DET_TOLD 4    /* exit statuses told per rank, kept (the newest) */
#define FTC_DET_TIMES 32   /* step times kept per rank for the median */
#define FTC_DET_LOSSES 512 /* upper bound of spike_window */
#define FTC_DET_QUEUE 1024 /* events waiting for callback or publication */

typedef struct ftc__ev {
    char kind[24];
    char node[FTC_CTL_NODE_MAX + 1];
    char detail[256];
    char id[192];   /* dedupe id ("" = plain event) */
    int rank;
    uint64_t gen;
    int64_t step;
    uint64_t t_fault_ms, t_detect_ms;
    bool publish;   /* false: local only (e.g. a generation seen) */
    bool plain;     /* id made up for publication (ftc_ctl_event_once), not a failure id */
} ftc__ev_t;

typedef struct ftc__evq {
    ftc__ev_t *ev;
    int head, len; /* ring of FTC_DET_QUEUE */
    uint64_t dropped;
} ftc__evq_t;

/* An exit whose event waits, up to FTC_DET_EXIT_WAIT_MS from when it was
 * seen, for what decides it: its status, when the detector could not read it
 * (its parent reaped it and tells it: ftc_detector_exit_status), and for a
 * connected rank that ended with status 0, its BYE, which the agent may read
 * after the exit (a clean end, no failure) */
typedef struct ftc__exit {
    pid_t pid;   /* 0 = none */
    uint64_t ns; /* when it was seen */
    /* when it was seen (wall ms: its event's t_fault_ms) and the generation
     * then (its event's, decided later or not: the generation may move on
     * within the wait, and the exit is no failure of the next one) */
    uint64_t wall_ms, gen;
    int64_t step;
    bool linked; /* the process had connected */
    bool bye;    /* it said BYE (ftc_detector_bye) */
    bool closed; /* its connection to the agent closed (ftc_detector_closed) */
    bool told;   /* its parent tells its status (ftc_detector_watch_child) */
    bool known;  /* status is its wait status */
    int status;
} ftc__exit_t;

typedef struct ftc__rank {
    bool used;
    int rank;
    pid_t pid;       /* 0 = not watched */
    int pidfd;       /* -1 = poll /proc instead */
    /* this watch of (pid, pidfd), from d->watch_seq; 0 = none. A poll result
     * counts for the rank only when its pollfd was taken for this same watch:
     * the fd number alone may meanwhile belong to another rank's pidfd */
    uint64_t watch_id;
    int64_t step;    /* last finished step, -1 before the first (of this process) */
    uint64_t last_ns; /* when progress was last reported (or watching began) */
    uint64_t start_ns; /* when the watch of this process began (its start-up) */
    bool started;    /* this process finished a step: past its start-up */
    bool linked;     /* this process connected (ftc_detector_linked) */
    bool start_hung; /* its start-up was reported hung */
    /* its watch ended, by its BYE (ftc_detector_bye), its unwatch or its
     * exit (a rank_exit event): no hang check until a process of it is
     * watched again, or a new process of it connects (even when its watch
     * fails). A rank that never had a pid watched (progress only) has one */
    bool ended;
    /* the watched process said BYE: it is still watched, for its exit
     * status only (status 0 is its clean end, any other a failure) */
    bool bye;
    /* the watched process's connection closed (after its BYE or not): a BYE
     * can no longer come (ftc_detector_closed) */
    bool closed;
    /* the watched process is a child of this process, whose status its
     * parent tells when the detector cannot read it (ftc_detector_watch_child) */
    bool told;
    pid_t proc_pid; /* the process the per-process state is of (kept after its watch) */
    /* the process's CPU use, sampled every FTC_DET_CPU_MS: whether a rank
     * that stopped progressing is stuck itself or spins waiting for a peer */
    uint64_t cpu_ticks; /* utime + stime at cpu_ns */
    uint64_t cpu_ns;    /* 0 = not sampled yet (for this process) */
    double cpu_share;   /* of one CPU between the last two samples; < 0 unknown */
    char pstate;        /* state letter at the last sample, 0 unknown */
    /* exits of its processes whose events wait (oldest first; a new
     * process's exit may come while its predecessor's still waits) */
    ftc__exit_t exits[FTC_DET_PENDING];
    int nexits;
    /* statuses its parent told (ftc_detector_exit_status), a ring by pid */
    pid_t told_pid[FTC_DET_TOLD];
    int told_status[FTC_DET_TOLD];
    int told_pos;
    uint64_t stopped_ns; /* the first of the samples since which it is stopped (T/t); 0 = not */
    uint64_t times[FTC_DET_TIMES];
    int ntimes, tpos;
    int64_t hang_step; /* step already reported as hung */
    double loss[FTC_DET_LOSSES];
    int nloss, lpos;
} ftc__rank_t;

typedef struct ftc__node {
    char name[FTC_CTL_NODE_MAX + 1];
    char incarnation[24]; /* joined_ms from the member record */
    bool lost;            /* reported lost for this incarnation */
    int slow;             /* consecutive slow scans */
} ftc__node_t;

struct ftc_detector {
    ftc_detector_options_t o;
    char job[64], node[FTC_CTL_NODE_MAX + 1], host[128], domain[64], holder[192];
    ftc_redis_url_t url;
    pthread_mutex_t mu;      /* guards ranks, queues, stats, leader fields */
    ftc__rank_t ranks[FTC_DET_MAX_RANKS];
    uint64_t watch_seq;      /* last ftc__rank_t.watch_id given */
    ftc__evq_t local, pub;   /* to the callback; to Redis */
    int wake[2];             /* wakes the local thread */
    atomic_bool stop;
    pthread_t local_tid, redis_tid;
    bool local_started, redis_started;
    /* Redis thread state (only that thread touches these, except under mu) */
    ftc_ctl_t *ctl;
    ftc_redis_t *sub;
    bool subscribed;
    uint64_t joined_ms;
    uint32_t world;
    int64_t committed;
    bool down;               /* Redis unreachable since down_ms (wall, for the event's
                                t_fault_ms) = down_ns (monotonic, for its duration) */
    uint64_t down_ms, down_ns;
    uint64_t lease_ok_ns;    /* last successful acquire/renew */
    uint64_t hb_ok_ns;       /* when the last successful heartbeat was answered */
    bool self_expired;       /* our own heartbeat key expired (its notification came) */
    ftc__node_t **nodes;     /* members seen, each allocated once (pointers stay valid) */
    int nnodes, capnodes;
    int *hidx;               /* open-addressing index name -> nodes[i] + 1 (0 = empty) */
    int hcap;                /* power of two */
    uint64_t next_overdue;   /* leader: next poll of the deadline set (ns) */
    uint64_t warn_ns;        /* last warning about an error reply (rate limit) */
    uint64_t ev_seq;         /* plain events queued for publication (their ids), under mu */
    uint64_t quiet_until_ns; /* no node-loss reports before (just back from an outage) */
    bool linked;             /* the job's ranks link libftc (a HELLO here, or ftc:{J}:linked) */
    bool linked_told;        /* Redis thread: ftc:{J}:linked was set by us (or found set) */
    uint64_t next_linked_ns; /* Redis thread: next read of ftc:{J}:linked */
    ftc_detector_stats_t st; /* under mu */
    ftc__detector_poll_hook_t poll_hook; /* tests only (detector_internal.h), under mu */
    void *poll_hook_arg;
    /* waitid(P_PIDFD) is refused (EINVAL, ENOSYS: Linux 5.3 has pidfd_open
     * but not it): exit statuses are read by pid (P_PID). Under mu */
    bool no_waitid_pidfd;
    /* FTC_TEST_DETECT_NO_WAITID_PIDFD=1 (tests only, read at start): every
     * waitid(P_PIDFD) fails with EINVAL, as on Linux 5.3 */
    bool test_no_waitid_pidfd;
    int exit_wait_ms; /* FTC_DET_EXIT_WAIT_MS; tests may set it, under mu */
};

/* ---- queues ---------------------------------------------------------------------- */

static void ftc__push(ftc__evq_t *q, const ftc__ev_t *e)
{
    if (q->len == FTC_DET_QUEUE) { /* drop the oldest: newest failures matter most */
        q->head = (q->head + 1) % FTC_DET_QUEUE;
        q->len--;
        q->dropped++;
    }
    q->ev[(q->head + q->len) % FTC_DET_QUEUE] = *e;
    q->len++;
}

static bool ftc__pop(ftc__evq_t *q, ftc__ev_t *e)
{
    if (!q->len)
        return false;
    *e = q->ev[q->head];
    q->head = (q->head + 1) % FTC_DET_QUEUE;
    q->len--;
    return true;
}

static void ftc__wake(ftc_detector_t *d)
{
    char b = 1;
    ssize_t w = write(d->wake[1], &b, 1);
    (void)w; /* a full pipe already means "wake up" */
}

/* Queues an event of generation gen, whose fault happened at wall time
 * t_fault_ms (0 = unknown), for the callback (local thread). Caller holds mu. */
static void ftc__emitv_locked(ftc_detector_t *d, uint64_t gen, uint64_t t_fault_ms,
                              const char *kind, const char *node, int rank, int64_t step,
                              const char *id, bool publish, const char *fmt, va_list ap)
    __attribute__((format(printf, 10, 0)));
static void ftc__emitv_locked(ftc_detector_t *d, uint64_t gen, uint64_t t_fault_ms,
                              const char *kind, const char *node, int rank, int64_t step,
                              const char *id, bool publish, const char *fmt, va_list ap)
{
    ftc__ev_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.kind, sizeof e.kind, "%s", kind);
    snprintf(e.node, sizeof e.node, "%s", node ? node : d->node);
    snprintf(e.id, sizeof e.id, "%s", id ? id : "");
    e.rank = rank;
    e.step = step;
    e.gen = gen;
    e.t_fault_ms = t_fault_ms;
    e.t_detect_ms = ftc_wall_ms();
    e.publish = publish;
    vsnprintf(e.detail, sizeof e.detail, fmt, ap);
    ftc__push(&d->local, &e);
    ftc__wake(d);
}

/* Queues an event of the current generation for the callback (local
 * thread). Caller holds mu. */
static void ftc__emit_locked(ftc_detector_t *d, const char *kind, const char *node, int rank,
                             int64_t step, const char *id, bool publish, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static void ftc__emit_locked(ftc_detector_t *d, const char *kind, const char *node, int rank,
                             int64_t step, const char *id, bool publish, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ftc__emitv_locked(d, d->st.generation, 0, kind, node, rank, step, id, publish, fmt, ap);
    va_end(ap);
}

/* As ftc__emit_locked, for a fault seen earlier: of generation gen, at wall
 * time t_fault_ms (an event decided after the generation moved on is still
 * one of the generation its fault was seen in). Caller holds mu. */
static void ftc__emit_at_locked(ftc_detector_t *d, uint64_t gen, uint64_t t_fault_ms,
                                const char *kind, int rank, int64_t step, const char *id,
                                const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void ftc__emit_at_locked(ftc_detector_t *d, uint64_t gen, uint64_t t_fault_ms,
                                const char *kind, int rank, int64_t step, const char *id,
                                const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ftc__emitv_locked(d, gen, t_fault_ms, kind, NULL, rank, step, id, true, fmt, ap);
    va_end(ap);
}

/* ---- local watch ------------------------------------------------------------------- */

static ftc__rank_t *ftc__rank_get(ftc_detector_t *d, int rank, bool create)
{
    ftc__rank_t *free_slot = NULL;
    for (int i = 0; i < FTC_DET_MAX_RANKS; i++) {
        if (d->ranks[i].used && d->ranks[i].rank == rank)
            return &d->ranks[i];
        if (!d->ranks[i].used && !free_slot)
            free_slot = &d->ranks[i];
    }
    if (!create || !free_slot)
        return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->used = true;
    free_slot->rank = rank;
    free_slot->pidfd = -1;
    free_slot->step = -1;
    free_slot->hang_step = -2;
    free_slot->last_ns = free_slot->start_ns = ftc_now_ns();
    free_slot->cpu_share = -1;
    return free_slot;
}

static int ftc__pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    return (int)syscall(434, pid, 0);
#endif
}

/* True when pid is gone or a zombie (for kernels without pidfd). */
static bool ftc__pid_dead(pid_t pid)
{
    ftc_proc_stat_t ps;
    int rc = ftc_proc_stat_read(pid, &ps);
    return rc == FTC_ENOENT || (rc == 0 && (ps.state == 'Z' || ps.state == 'X'));
}

/* Another process of r (the next generation's, a restart): its start-up
 * begins now, and its steps count from its own first one, whatever the step
 * its predecessor reached (a restored rank repeats the uncommitted steps,
 * and those were no progress). The step times stay: they are the job's.
 * Caller holds mu. */
static void ftc__new_process_locked(ftc__rank_t *r, pid_t pid, uint64_t now)
{
    r->proc_pid = pid;
    r->closed = r->told = false;
    r->start_ns = r->last_ns = now;
    r->started = r->linked = r->start_hung = false;
    r->cpu_ns = 0;
    r->cpu_share = -1;
    r->pstate = 0;
    r->stopped_ns = 0;
    r->step = -1;
    r->hang_step = -2;
}

/* The process pid of r, watched already or whose exit was seen, is a child
 * of this process, whose parent tells its status (ftc_detector_watch_child
 * after its HELLO's ftc_detector_watch_pid): its exit, and an exit of it
 * that waits, wait for that status. Caller holds mu. */
static void ftc__child_known_locked(ftc__rank_t *r, pid_t pid)
{
    if (r->pid == pid)
        r->told = true;
    for (int i = 0; i < r->nexits; i++)
        if (r->exits[i].pid == pid)
            r->exits[i].told = true;
}

static int ftc__watch(ftc_detector_t *d, int rank, pid_t pid, bool child)
{
    if (pid <= 0)
        return FTC_EINVAL;
    int fd = ftc__pidfd_open(pid);
    if (fd < 0 && errno == ESRCH) {
        /* No such process here (it is gone, or of another pid namespace):
         * not watched. A rank whose last watch ended (its predecessor's exit
         * seen, or its unwatch: not a BYE alone, whose process is still
         * watched for its status) has a new process all the same, which
         * connected: it is
         * checked for hangs from its progress, as a rank never watched is.
         * Before, the ended watch left hang checks off for it. The same
         * process again (its late HELLO) is still the one that ended. */
        pthread_mutex_lock(&d->mu);
        ftc__rank_t *r = ftc__rank_get(d, rank, false);
        if (r && child && r->proc_pid == pid)
            ftc__child_known_locked(r, pid);
        else if (r && r->ended && r->pid <= 0 && r->proc_pid != pid) {
            ftc__new_process_locked(r, pid, ftc_now_ns());
            r->ended = r->bye = false;
        }
        pthread_mutex_unlock(&d->mu);
        return FTC_ENOENT;
    }
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, true);
    if (!r) {
        pthread_mutex_unlock(&d->mu);
        if (fd >= 0)
            close(fd);
        return FTC_ERANGE;
    }
    if (child && r->proc_pid == pid && (r->pid == pid || r->pid <= 0)) {
        /* the supervisor's WATCH read after the HELLO of the same process
         * (or after its exit was seen): its watch, its BYE, its close and
         * its start stand; what is news is that its parent tells its status */
        ftc__child_known_locked(r, pid);
        pthread_mutex_unlock(&d->mu);
        if (fd >= 0)
            close(fd);
        ftc__wake(d);
        return 0;
    }
    if (r->pidfd >= 0)
        close(r->pidfd);
    uint64_t now = ftc_now_ns();
    /* The same process watched again (the HELLO of a rank its supervisor
     * watched from its spawn) keeps its start */
    if (r->pid != pid)
        ftc__new_process_locked(r, pid, now);
    r->pid = pid;
    r->ended = r->bye = r->closed = false; /* a HELLO: a connection of it is open */
    r->told = r->told || child;
    r->pidfd = fd; /* -1: fall back to /proc polling */
    r->watch_id = ++d->watch_seq;
    r->last_ns = now;
    pthread_mutex_unlock(&d->mu);
    ftc__wake(d);
    return 0;
}

int ftc_detector_watch_pid(ftc_detector_t *d, int rank, pid_t pid)
{
    return ftc__watch(d, rank, pid, false);
}

int ftc_detector_watch_child(ftc_detector_t *d, int rank, pid_t pid)
{
    return ftc__watch(d, rank, pid, true);
}

void ftc_detector_closed(ftc_detector_t *d, int rank, pid_t pid)
{
    if (pid <= 0)
        return;
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, false);
    if (r) {
        for (int i = 0; i < r->nexits; i++)
            if (r->exits[i].pid == pid)
                r->exits[i].closed = true;
        if (r->pid == pid)
            r->closed = true;
    }
    pthread_mutex_unlock(&d->mu);
    ftc__wake(d);
}

void ftc_detector_unwatch(ftc_detector_t *d, int rank)
{
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, false);
    if (r) {
        if (r->pidfd >= 0)
            close(r->pidfd);
        r->pidfd = -1;
        r->pid = 0;
        r->watch_id = 0;
        r->ended = true;
        r->bye = false;
    }
    pthread_mutex_unlock(&d->mu);
    ftc__wake(d);
}

void ftc_detector_bye(ftc_detector_t *d, int rank, pid_t pid)
{
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, false);
    if (r) {
        /* its process's exit may have been seen before this BYE was read
         * (the agent's loop was behind): that exit waits for it */
        bool found = false;
        for (int i = 0; i < r->nexits; i++)
            if (pid > 0 && r->exits[i].pid == pid)
                r->exits[i].bye = found = true;
        if (r->pid > 0 && (!found || r->pid == pid)) {
            r->bye = r->ended = true; /* still watched, for its exit status only */
        } else if (r->pid <= 0) {
            if (!found && pid <= 0 && r->nexits > 0)
                r->exits[r->nexits - 1].bye = true;
            r->ended = true;
        }
        /* else: the BYE of a process before the one watched now, which
         * keeps its hang check */
    }
    pthread_mutex_unlock(&d->mu);
    ftc__wake(d);
}

void ftc_detector_exit_status(ftc_detector_t *d, int rank, pid_t pid, int status)
{
    pthread_mutex_lock(&d->mu);
    /* held even before the rank's watch: the supervisor may reap a rank, and
     * tell, between its WATCH's pidfd_open (of the zombie) and the watch's
     * registration; dropped, a clean end of a rank that never connected was
     * a rank_exit event 500 ms later. One per process: the status of a
     * rank's earlier process, whose event still waits, is not replaced */
    ftc__rank_t *r = ftc__rank_get(d, rank, true);
    if (r) {
        int k = -1;
        for (int i = 0; i < FTC_DET_TOLD; i++)
            if (r->told_pid[i] == pid)
                k = i;
        if (k < 0) { /* the oldest gives way */
            k = r->told_pos;
            r->told_pos = (k + 1) % FTC_DET_TOLD;
        }
        r->told_pid[k] = pid;
        r->told_status[k] = status;
    }
    pthread_mutex_unlock(&d->mu);
    ftc__wake(d);
}

void ftc_detector_linked(ftc_detector_t *d, int rank)
{
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, false);
    if (r && r->pid > 0)
        r->linked = true;
    d->linked = true;
    pthread_mutex_unlock(&d->mu);
}

void ftc__detector_set_poll_hook(ftc_detector_t *d, ftc__detector_poll_hook_t fn, void *arg)
{
    pthread_mutex_lock(&d->mu);
    d->poll_hook = fn;
    d->poll_hook_arg = arg;
    pthread_mutex_unlock(&d->mu);
}

void ftc__detector_set_exit_wait_ms(ftc_detector_t *d, int ms)
{
    pthread_mutex_lock(&d->mu);
    d->exit_wait_ms = ms > 0 ? ms : FTC_DET_EXIT_WAIT_MS;
    pthread_mutex_unlock(&d->mu);
}

static int ftc__cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

void ftc_detector_progress(ftc_detector_t *d, int rank, int64_t step, uint64_t step_time_us)
{
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, true);
    if (r && (step > r->step || !r->started)) {
        r->started = true;
        r->step = step;
        r->last_ns = ftc_now_ns();
        r->times[r->tpos] = step_time_us;
        r->tpos = (r->tpos + 1) % FTC_DET_TIMES;
        if (r->ntimes < FTC_DET_TIMES)
            r->ntimes++;
    }
    pthread_mutex_unlock(&d->mu);
}

void ftc_detector_loss(ftc_detector_t *d, int rank, int64_t step, double loss)
{
    pthread_mutex_lock(&d->mu);
    ftc__rank_t *r = ftc__rank_get(d, rank, true);
    if (!r) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    char id[128];
    if (!isfinite(loss)) {
        snprintf(id, sizeof id, "nan:%s:%d:%" PRId64, d->node, rank, step);
        ftc__emit_locked(d, "nan", NULL, rank, step, id, true, "loss is %s at step %" PRId64,
                         isnan(loss) ? "NaN" : "Inf", step);
        pthread_mutex_unlock(&d->mu);
        return;
    }
    int w = d->o.spike_window;
    if (r->nloss >= w && w >= 2) {
        double mean = 0, var = 0;
        for (int i = 0; i < w; i++)
            mean += r->loss[i];
        mean /= w;
        for (int i = 0; i < w; i++)
            var += (r->loss[i] - mean) * (r->loss[i] - mean);
        double sd = sqrt(var / (w - 1));
        if (sd > 0 && loss > mean + d->o.spike_sigma * sd) {
            snprintf(id, sizeof id, "loss_spike:%s:%d:%" PRId64, d->node, rank, step);
            ftc__emit_locked(d, "loss_spike", NULL, rank, step, id, true,
                             "loss %.6g at step %" PRId64 " is %.1f sigma above the mean %.6g "
                             "(sd %.3g) of the last %d",
                             loss, step, (loss - mean) / sd, mean, sd, w);
            pthread_mutex_unlock(&d->mu);
            return; /* a spike stays out of the window */
        }
    }
    r->loss[r->lpos] = loss;
    r->lpos = (r->lpos + 1) % (w > 0 ? w : 1);
    if (r->nloss < w)
        r->nloss++;
    pthread_mutex_unlock(&d->mu);
}

void ftc_detector_report(ftc_detector_t *d, const char *kind, int rank, int64_t step,
                         const char *detail)
{
    char id[192];
    snprintf(id, sizeof id, "%.23s:%s:%d:%" PRId64, kind, d->node, rank, step);
    pthread_mutex_lock(&d->mu);
    ftc__emit_locked(d, kind, NULL, rank, step, id, true, "%s", detail ? detail : "");
    pthread_mutex_unlock(&d->mu);
}

/* The local watch's poll of the pidfds: pfd[0] is the wake pipe; pfd[k]
 * (k >= 1) was taken for ranks[slot[k]] under its watch watch[k]. */
typedef struct ftc__pollset {
    struct pollfd pfd[FTC_DET_MAX_RANKS + 1];
    int slot[FTC_DET_MAX_RANKS + 1];
    uint64_t watch[FTC_DET_MAX_RANKS + 1];
    int n;
} ftc__pollset_t;

/* Samples the CPU use of r's process every FTC_DET_CPU_MS (caller holds mu). */
static void ftc__sample_cpu_locked(ftc__rank_t *r, uint64_t now)
{
    if (r->pid <= 0 || (r->cpu_ns && now - r->cpu_ns < FTC_DET_CPU_MS * 1000000ull))
        return;
    ftc_proc_stat_t ps;
    if (ftc_proc_stat_read(r->pid, &ps) != 0) {
        r->cpu_share = -1;
        r->pstate = 0;
        r->stopped_ns = 0;
        return;
    }
    uint64_t ticks = ps.utime + ps.stime;
    long tck = sysconf(_SC_CLK_TCK);
    if (tck <= 0)
        tck = 100;
    if (r->cpu_ns && ticks >= r->cpu_ticks)
        r->cpu_share = (double)(ticks - r->cpu_ticks) / (double)tck /
                       ((double)(now - r->cpu_ns) / 1e9);
    r->cpu_ticks = ticks;
    r->cpu_ns = now;
    r->pstate = ps.state;
    if (ps.state != 'T' && ps.state != 't')
        r->stopped_ns = 0;
    else if (!r->stopped_ns)
        r->stopped_ns = now;
}

/* A rank that made no progress: stuck itself, or spinning, waiting for a
 * peer that is (the CPU collectives busy-poll, and so do NCCL's host
 * threads)? Busy ranks are reported only after a grace (max(1 s, half the
 * limit)), so that the stuck rank is reported first: its event fails the
 * generation before the grace of its peers has passed, and the events name
 * the rank that hung, not the ones waiting for it (every rank of a job used
 * to reach its limit at once: the soak, seed 37, found two waiting ranks
 * reported, and killed, and not the stopped one). Sets what[] to a clause
 * saying which (empty when unknown); returns the grace in ms. */
static double ftc__hang_grace(const ftc__rank_t *r, double limit_ms, char *what, size_t cap)
{
    what[0] = 0;
    if (r->pstate == 'T' || r->pstate == 't') {
        snprintf(what, cap, "; its process is stopped (state %c)", r->pstate);
        return 0;
    }
    if (r->cpu_share < 0)
        return 0;
    if (r->cpu_share <= FTC_DET_BUSY) {
        snprintf(what, cap, "; its process used %.0f%% of a CPU (state %c): stuck itself",
                 r->cpu_share * 100.0, r->pstate ? r->pstate : '?');
        return 0;
    }
    double grace = limit_ms / 2 > 1000 ? limit_ms / 2 : 1000;
    snprintf(what, cap, "; its process used %.0f%% of a CPU: busy, perhaps waiting for a hung "
             "peer (reported %.0f ms late for that)", r->cpu_share * 100.0, grace);
    return grace;
}

/* The exit status of r's process, exited and not yet reaped by its parent,
 * read without reaping it (waitid WNOWAIT: only its parent may, and under
 * `ftc run` this process is: the agent runs in the supervisor). False when
 * it is not our child or was reaped already. *status is a wait status. */
static bool ftc__peek_status(ftc_detector_t *d, const ftc__rank_t *r, int *status)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = -1;
    bool by_pid = r->pidfd < 0 || d->no_waitid_pidfd;
    if (!by_pid) {
        if (d->test_no_waitid_pidfd) {
            errno = EINVAL; /* as Linux 5.3 answers */
        } else {
            rc = waitid((idtype_t)P_PIDFD, (id_t)r->pidfd, &si, WEXITED | WNOHANG | WNOWAIT);
        }
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
            /* Linux 5.3: pidfd_open, but no waitid(P_PIDFD) (5.4). By pid
             * instead, from now on: the pid names the rank's process until
             * its parent reaps it, and after that no child of ours, unless
             * reused meanwhile. Before, no status was read there: every
             * rank_exit came without one */
            FTC_INFO("detect", "%s: waitid(P_PIDFD) is not supported (%s): exit statuses are "
                     "read by pid", d->node, strerror(errno));
            d->no_waitid_pidfd = by_pid = true;
        }
    }
    if (by_pid)
        rc = waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if (rc != 0 || si.si_pid != r->pid)
        return false;
    if (si.si_code == CLD_EXITED)
        *status = (si.si_status & 0xff) << 8;
    else if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
        *status = (si.si_status & 0x7f) | (si.si_code == CLD_DUMPED ? 0x80 : 0);
    else
        return false;
    return true;
}

/* The rank_exit event of exit e, with its exit status when known, of the
 * generation and time it was seen in. Caller holds mu. */
static void ftc__exit_event_locked(ftc_detector_t *d, const ftc__rank_t *r, const ftc__exit_t *e)
{
    char how[64] = "", id[160];
    int st = e->status;
    if (e->known && WIFSIGNALED(st))
        snprintf(how, sizeof how, " (killed by signal %d%s)", WTERMSIG(st),
                 WCOREDUMP(st) ? ", core dumped" : "");
    else if (e->known)
        snprintf(how, sizeof how, " (status %d)", WEXITSTATUS(st));
    snprintf(id, sizeof id, "rank_exit:%s:%d:%d", d->node, r->rank, (int)e->pid);
    ftc__emit_at_locked(d, e->gen, e->wall_ms, "rank_exit", r->rank, e->step, id,
                        "rank %d (pid %d) exited%s after step %" PRId64, r->rank, (int)e->pid,
                        how, e->step);
}

/* The status r's parent told for pid (ftc_detector_exit_status). */
static bool ftc__told_locked(const ftc__rank_t *r, pid_t pid, int *status)
{
    for (int i = 0; pid > 0 && i < FTC_DET_TOLD; i++)
        if (r->told_pid[i] == pid) {
            *status = r->told_status[i];
            return true;
        }
    return false;
}

/* Decides the event of exit e of r's process, once what decides it is known
 * or, when final (its wait is over), with what is known then; true when
 * decided. A status other than 0 is a failure, BYE or not (`ftc run` fails
 * the generation on it): an event with that status, at once. Status 0 is no
 * failure for a process that never connected (a binary without libftc at its
 * end: every job of one ended with a rank_exit per rank) nor for one that
 * said BYE. What may still come is waited for:
 *  - the status, when the detector could not read it and the process's
 *    parent tells it (e->told: a child of the supervisor this agent runs
 *    in, which reaped it first). Nobody tells the status of another's
 *    process (a standalone agent's ranks): not waited for;
 *  - its BYE, for a connected process that ended with 0 or an unknown
 *    status, until its connection is closed (the agent reads the BYE
 *    before the close, and the close follows the exit at once: the kernel
 *    closes a process's sockets before its exit is seen), since the agent's
 *    loop may read them after the exit; before, such a clean end was a
 *    rank_exit "exited (status 0)".
 * At the end of the wait it is a failure (without a status when none is
 * known), unless the process said BYE. Caller holds mu. */
static bool ftc__exit_decide_locked(ftc_detector_t *d, const ftc__rank_t *r, ftc__exit_t *e,
                                    bool final)
{
    if (!e->known)
        e->known = ftc__told_locked(r, e->pid, &e->status);
    bool clean = e->known && WIFEXITED(e->status) && WEXITSTATUS(e->status) == 0;
    if (e->known && !clean) {
        ftc__exit_event_locked(d, r, e);
        return true;
    }
    bool waits = !final && ((!e->known && e->told) || (e->linked && !e->bye && !e->closed));
    if ((clean && !e->linked) || (e->bye && (clean || !waits))) {
        FTC_DEBUG("detect", "%s: rank %d (pid %d) ended %s%s: not a failure", d->node, r->rank,
                  (int)e->pid, e->known ? "with status 0" : "(status unknown)",
                  e->bye ? " after its BYE" : ", never connected");
        return true;
    }
    if (waits)
        return false;
    ftc__exit_event_locked(d, r, e);
    return true;
}

/* Settles r's waiting exits: each decided, or over its wait (all of them
 * when final: the detector stops), is removed. Caller holds mu. */
static void ftc__exits_settle_locked(ftc_detector_t *d, ftc__rank_t *r, uint64_t now, bool final)
{
    int k = 0;
    for (int i = 0; i < r->nexits; i++) {
        ftc__exit_t *e = &r->exits[i];
        bool over = final || now - e->ns > (uint64_t)d->exit_wait_ms * 1000000ull;
        if (!ftc__exit_decide_locked(d, r, e, over))
            r->exits[k++] = *e;
    }
    r->nexits = k;
}

/* The exit of r's process pid, just seen: decided now or left to wait (a
 * second sighting of the same process, watched again as a zombie, joins the
 * first). Caller holds mu. */
static void ftc__exit_seen_locked(ftc_detector_t *d, ftc__rank_t *r, pid_t pid, bool known,
                                  int st, uint64_t now)
{
    ftc__exit_t *e = NULL;
    for (int i = 0; i < r->nexits && !e; i++)
        if (r->exits[i].pid == pid)
            e = &r->exits[i];
    if (e) {
        e->linked = e->linked || r->linked;
        e->bye = e->bye || r->bye;
        e->closed = e->closed || r->closed;
        e->told = e->told || r->told;
        if (r->step > e->step)
            e->step = r->step;
        if (!e->known && known) {
            e->known = true;
            e->status = st;
        }
        return; /* settled with the others */
    }
    ftc__exit_t x = {.pid = pid, .ns = now, .wall_ms = ftc_wall_ms(),
                     .gen = d->st.generation, .step = r->step, .linked = r->linked,
                     .bye = r->bye, .closed = r->closed, .told = r->told, .known = known,
                     .status = st};
    if (ftc__exit_decide_locked(d, r, &x, false))
        return;
    if (r->nexits == FTC_DET_PENDING) { /* the oldest is decided now, with what is known */
        ftc__exit_decide_locked(d, r, &r->exits[0], true);
        memmove(&r->exits[0], &r->exits[1], sizeof r->exits[0] * (FTC_DET_PENDING - 1));
        r->nexits--;
    }
    r->exits[r->nexits++] = x;
}

/* Checks every watched rank for exit and hang. Caller holds mu.
 *
 * An exit the poll saw is the rank's only when the rank is still under the
 * watch the pollfd was taken for. The poll runs without mu, so meanwhile the
 * rank may have been unwatched (its pidfd closed) and another rank watched,
 * whose new pidfd the kernel gave the same fd number: matched by number, the
 * old process's exit was charged to the new, live rank (a false rank_exit
 * and a needless recovery). Such a stale result is dropped; a change of
 * watch wakes the thread, whose next poll sees the new pidfd as it is. */
static void ftc__check_ranks_locked(ftc_detector_t *d, const ftc__pollset_t *ps)
{
    uint64_t now = ftc_now_ns();
    char id[160];
    bool exited[FTC_DET_MAX_RANKS] = {false};
    for (int k = 1; k < ps->n; k++) {
        if (!(ps->pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        const ftc__rank_t *r = &d->ranks[ps->slot[k]];
        if (r->used && r->pid > 0 && r->pidfd >= 0 && r->watch_id == ps->watch[k])
            exited[ps->slot[k]] = true;
        else
            FTC_DEBUG("detect", "%s: an exit seen on fd %d of a watch since ended or replaced: "
                      "not the exit of the rank watched now",
                      d->node, ps->pfd[k].fd);
    }
    for (int i = 0; i < FTC_DET_MAX_RANKS; i++) {
        ftc__rank_t *r = &d->ranks[i];
        if (!r->used)
            continue;
        if (r->nexits > 0) /* exits waiting for their status or BYE */
            ftc__exits_settle_locked(d, r, now, false);
        if (r->pid > 0) {
            bool dead = r->pidfd >= 0 ? exited[i] : ftc__pid_dead(r->pid);
            if (dead) {
                int st = 0;
                bool known = ftc__peek_status(d, r, &st);
                pid_t pid = r->pid;
                ftc__exit_seen_locked(d, r, pid, known, st, now);
                if (r->pidfd >= 0)
                    close(r->pidfd);
                r->pidfd = -1;
                r->pid = 0;
                r->watch_id = 0;
                r->ended = true;
                r->bye = r->closed = false;
                continue;
            }
        }
        /* a rank that said BYE, or whose exit was reported, has nothing
         * left to progress: before, it was reported hung at its limit (a
         * second event of an exit; a SIGKILL from `ftc run` for a rank that
         * ended cleanly and was still writing its outputs) */
        if (r->ended)
            continue;
        ftc__sample_cpu_locked(r, now);
        char what[160];
        /* the hang limit: hang_factor x the median step time (the rank's,
         * kept across its processes: the job's), at least hang_min_ms */
        uint64_t median_us = 0;
        if (r->ntimes > 0) {
            uint64_t sorted[FTC_DET_TIMES];
            memcpy(sorted, r->times, sizeof sorted);
            qsort(sorted, (size_t)r->ntimes, sizeof sorted[0], ftc__cmp_u64);
            median_us = sorted[r->ntimes / 2];
        }
        double limit_ms = d->o.hang_factor * (double)median_us / 1000.0;
        if (limit_ms < d->o.hang_min_ms)
            limit_ms = d->o.hang_min_ms;
        if (!r->started) {
            /* its start-up (exec, loading, rendezvous, restore, first step):
             * bounded by start_ms once the rank is known to report its
             * steps; a rank that never connects, in a job that never did,
             * may be a binary without libftc, which says nothing */
            double up_ms = (double)(now - r->start_ns) / 1e6;
            bool watched = d->o.start_ms > 0 && r->pid > 0 && !r->start_hung &&
                           (r->linked || d->linked);
            /* A process stopped (SIGSTOP, state T) is not loading or
             * compiling: stopped for the hang limit, it is hung, start-up or
             * not. Its peers, past their start-up, wait for it and reach
             * their own hang limit: at start_ms it came after them, and
             * they were reported and killed, not the stopped rank (the
             * soak, seed 41: a rank stopped after its restore, before its
             * first step's checkpoint; the two others reported hung,
             * "busy, perhaps waiting for a hung peer", 7.5 s later) */
            double stopped_ms = r->stopped_ns ? (double)(now - r->stopped_ns) / 1e6 : 0;
            if (watched && r->stopped_ns && stopped_ms > limit_ms) {
                r->start_hung = true;
                snprintf(id, sizeof id, "hang:%s:%d:start:%d", d->node, r->rank, (int)r->pid);
                ftc__emit_locked(d, "hang", NULL, r->rank, -1, id, true,
                                 "rank %d (pid %d) has finished no step %.0f ms after its start "
                                 "(%s) and its process has been stopped (state %c) for %.0f ms "
                                 "(hang limit %.0f ms)",
                                 r->rank, (int)r->pid, up_ms,
                                 r->linked ? "connected to its agent" : "never connected",
                                 r->pstate ? r->pstate : 'T', stopped_ms, limit_ms);
            } else if (watched && up_ms > d->o.start_ms &&
                       up_ms > d->o.start_ms + ftc__hang_grace(r, d->o.start_ms, what,
                                                               sizeof what)) {
                r->start_hung = true;
                snprintf(id, sizeof id, "hang:%s:%d:start:%d", d->node, r->rank, (int)r->pid);
                ftc__emit_locked(d, "hang", NULL, r->rank, -1, id, true,
                                 "rank %d (pid %d) has finished no step %.0f ms after its start "
                                 "(%s; start-up limit %d ms, detect.start_ms)%s",
                                 r->rank, (int)r->pid, up_ms,
                                 r->linked ? "connected to its agent" : "never connected",
                                 d->o.start_ms, what);
            }
            continue;
        }
        if (r->ntimes == 0 || r->hang_step == r->step)
            continue;
        double idle_ms = (double)(now - r->last_ns) / 1e6;
        if (idle_ms > limit_ms && idle_ms > limit_ms + ftc__hang_grace(r, limit_ms, what,
                                                                       sizeof what)) {
            r->hang_step = r->step;
            snprintf(id, sizeof id, "hang:%s:%d:%" PRId64, d->node, r->rank, r->step);
            ftc__emit_locked(d, "hang", NULL, r->rank, r->step, id, true,
                             "rank %d made no progress for %.0f ms after step %" PRId64
                             " (median step %.1f ms, limit %.0f ms)%s",
                             r->rank, idle_ms, r->step, (double)median_us / 1000.0, limit_ms,
                             what);
        }
    }
}

/* Hands the queued events to the callback and to publication. Caller
 * holds mu, which the callback runs without. */
static void ftc__deliver_locked(ftc_detector_t *d)
{
    ftc__ev_t e;
    while (ftc__pop(&d->local, &e)) {
        d->st.events++;
        if (e.publish && !e.id[0]) {
            /* an id of its own, so that a retry after a lost reply does
             * not add it twice (ftc__publish re-queues what failed) */
            snprintf(e.id, sizeof e.id, "ev:%s:%" PRIu64 ":%" PRIu64, d->node, d->joined_ms,
                     ++d->ev_seq);
            e.plain = true;
        }
        if (e.publish)
            ftc__push(&d->pub, &e);
        if (d->o.on_event) {
            ftc_ctl_event_t ce = {e.kind, e.node,   e.rank,        e.gen,
                                  e.step, e.detail, e.t_fault_ms, e.t_detect_ms};
            pthread_mutex_unlock(&d->mu);
            d->o.on_event(d->o.arg, &ce);
            pthread_mutex_lock(&d->mu);
        }
    }
}

static void *ftc__local_main(void *arg)
{
    ftc_detector_t *d = arg;
    ftc__pollset_t ps;
    uint64_t last_check_ns = ftc_now_ns();
    while (!atomic_load(&d->stop)) {
        ps.n = 0;
        ps.pfd[ps.n++] = (struct pollfd){d->wake[0], POLLIN, 0};
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < FTC_DET_MAX_RANKS; i++)
            if (d->ranks[i].used && d->ranks[i].pid > 0 && d->ranks[i].pidfd >= 0) {
                ps.slot[ps.n] = i;
                ps.watch[ps.n] = d->ranks[i].watch_id;
                ps.pfd[ps.n++] = (struct pollfd){d->ranks[i].pidfd, POLLIN, 0};
            }
        ftc__detector_poll_hook_t hook = d->poll_hook;
        void *hook_arg = d->poll_hook_arg;
        pthread_mutex_unlock(&d->mu);
        int pr = poll(ps.pfd, (nfds_t)ps.n, 20);
        if (hook)
            hook(hook_arg, ps.pfd, ps.n);
        if (pr > 0 && (ps.pfd[0].revents & POLLIN)) {
            char buf[64];
            while (read(d->wake[0], buf, sizeof buf) > 0) {
            }
        }
        pthread_mutex_lock(&d->mu);
        /* The watch did not run for much longer than its 20 ms poll: the
         * agent was paused (SIGSTOP, a VM or swap stall) or a callback held
         * this thread. The ranks' progress of that time is still waiting to
         * be read (the agent reads it once it runs), so the time nobody
         * looked is no idle time of theirs: without this, every rank was
         * reported hung (and killed) on resume. The same for an exit's wait
         * for its BYE or status: it was over on resume, and the clean end
         * of a rank whose BYE the paused agent had not read yet was a
         * rank_exit "exited (status 0)". */
        uint64_t now = ftc_now_ns(), gap = now - last_check_ns;
        if (gap > 500000000ull) {
            for (int i = 0; i < FTC_DET_MAX_RANKS; i++) {
                ftc__rank_t *r = &d->ranks[i];
                if (!r->used)
                    continue;
                uint64_t skip = gap - 20000000ull;
                if (r->last_ns < now)
                    r->last_ns += skip < now - r->last_ns ? skip : now - r->last_ns;
                if (r->start_ns < now)
                    r->start_ns += skip < now - r->start_ns ? skip : now - r->start_ns;
                if (r->stopped_ns && r->stopped_ns < now)
                    r->stopped_ns += skip < now - r->stopped_ns ? skip : now - r->stopped_ns;
                /* nor is it the wait of an exit for its BYE or status: the
                 * agent's loop, paused too, reads them once it runs */
                for (int k = 0; k < r->nexits; k++) {
                    uint64_t *ns = &r->exits[k].ns;
                    if (*ns < now)
                        *ns += skip < now - *ns ? skip : now - *ns;
                }
            }
        }
        ftc__check_ranks_locked(d, &ps);
        ftc__deliver_locked(d);
        pthread_mutex_unlock(&d->mu);
        last_check_ns = ftc_now_ns();
    }
    /* exits still waiting for a status or a BYE are decided with what is
     * known now, and published on the way out (ftc_detector_stop) */
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < FTC_DET_MAX_RANKS; i++)
        if (d->ranks[i].used && d->ranks[i].nexits > 0)
            ftc__exits_settle_locked(d, &d->ranks[i], ftc_now_ns(), true);
    ftc__deliver_locked(d);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- Redis session ------------------------------------------------------------------ */

static void ftc__set_up(ftc_detector_t *d, bool ok)
{
    pthread_mutex_lock(&d->mu);
    d->st.redis_up = ok;
    pthread_mutex_unlock(&d->mu);
}

static int ftc__join(ftc_detector_t *d)
{
    ftc_ctl_heartbeat_t hb = {d->st.generation, -1, 0, ftc_wall_ms()};
    int rc = ftc_ctl_heartbeat(d->ctl, d->node, &hb, d->o.ttl_ms);
    if (rc)
        return rc;
    ftc_ctl_member_t m;
    memset(&m, 0, sizeof m);
    snprintf(m.node, sizeof m.node, "%s", d->node);
    snprintf(m.host, sizeof m.host, "%s", d->host);
    snprintf(m.domain, sizeof m.domain, "%s", d->domain);
    m.pid = getpid();
    m.joined_ms = d->joined_ms;
    return ftc_ctl_join(d->ctl, &m);
}

/* Called after any Redis failure. */
static void ftc__went_down(ftc_detector_t *d)
{
    if (!d->down) {
        d->down = true;
        d->down_ms = ftc_wall_ms();
        d->down_ns = ftc_now_ns();
        FTC_WARN("detect", "%s: redis unreachable (%s); training continues, events are queued",
                 d->node, ftc_ctl_errstr(d->ctl));
    }
    d->subscribed = false;
    ftc_redis_close(d->sub); /* re-made, and re-subscribed, once Redis answers */
    d->sub = NULL;
    ftc__set_up(d, false);
}

/* Called after any failed Redis call: an outage only when the connection
 * failed. An error reply (a key of the job holding another type, say) says
 * Redis is there: it is logged, at most every 10 s, and detection goes on —
 * calling it an outage would log a redis_gap event at every heartbeat. */
static void ftc__failed(ftc_detector_t *d)
{
    if (!ftc_redis_is_up(ftc_ctl_redis(d->ctl))) {
        ftc__went_down(d);
        return;
    }
    uint64_t now = ftc_now_ns();
    if (!d->warn_ns || now - d->warn_ns > 10000000000ull) {
        d->warn_ns = now;
        FTC_WARN("detect", "%s: redis refused a command: %s (fix or delete that key)", d->node,
                 ftc_ctl_errstr(d->ctl));
    }
}

/* Called after a Redis success: ends an outage by re-registering and
 * putting back what a restarted Redis may have lost. */
static void ftc__came_up(ftc_detector_t *d)
{
    ftc__set_up(d, true);
    if (!d->down)
        return;
    d->down = false;
    /* The outage was ours, maybe everyone's (Redis away): a missing heartbeat
     * is no evidence yet. Give the others a heartbeat TTL plus a reconnect
     * backoff (at most 1 s) to come back before reporting any of them lost;
     * a node still missing then is found by the next scan or deadline poll. */
    d->quiet_until_ns = ftc_now_ns() + ((uint64_t)d->o.ttl_ms + 1000u) * 1000000ull;
    uint64_t now = ftc_wall_ms(), gap_ms = (ftc_now_ns() - d->down_ns) / 1000000u;
    ftc__join(d);
    ftc_ctl_reseed(d->ctl, d->st.generation, d->world, d->committed);
    d->linked_told = false; /* ftc:{J}:linked may be gone with the rest: said again */
    pthread_mutex_lock(&d->mu);
    d->st.gaps++;
    ftc__ev_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.kind, sizeof e.kind, "redis_gap");
    snprintf(e.node, sizeof e.node, "%s", d->node);
    snprintf(e.detail, sizeof e.detail,
             "redis was unreachable for %" PRIu64 " ms (from %" PRIu64 " to %" PRIu64
             " wall ms); detection resumed",
             gap_ms, d->down_ms, now);
    e.rank = -1;
    e.step = -1;
    e.gen = d->st.generation;
    e.t_fault_ms = d->down_ms;
    e.t_detect_ms = now;
    e.publish = true;
    ftc__push(&d->local, &e);
    ftc__wake(d);
    pthread_mutex_unlock(&d->mu);
    FTC_INFO("detect", "%s: redis is back after %" PRIu64 " ms", d->node, gap_ms);
}

/* Our heartbeat expired (we were paused or cut off past the TTL): the others
 * reported this incarnation lost, once per job, and keep it as lost. Coming
 * back under it, a later real loss of this node would never be reported, so
 * the node re-joins as a new incarnation (joined_ms), whose loss is news. */
static void ftc__new_incarnation(ftc_detector_t *d)
{
    d->self_expired = false;
    uint64_t now = ftc_wall_ms();
    pthread_mutex_lock(&d->mu);
    uint64_t old = d->joined_ms;
    d->joined_ms = now > old ? now : old + 1;
    pthread_mutex_unlock(&d->mu);
    FTC_WARN("detect", "%s: our heartbeat expired (paused or cut off past the %d ms TTL): "
             "re-joining as incarnation %" PRIu64 " (was %" PRIu64 ")",
             d->node, d->o.ttl_ms, d->joined_ms, old);
    if (ftc__join(d) != 0)
        d->self_expired = true; /* try again with the next heartbeat */
}

static int ftc__hash_slot(const ftc_detector_t *d, const char *name)
{
    uint64_t h = ftc_xxh3(name, strlen(name));
    int mask = d->hcap - 1;
    for (int i = (int)(h & (uint64_t)mask);; i = (i + 1) & mask) {
        int v = d->hidx[i];
        if (!v || !strcmp(d->nodes[v - 1]->name, name))
            return i;
    }
}

/* The tracked record of a member, created on first sight; NULL on out of
 * memory. Lookups are O(1): a job may have thousands of members. */
static ftc__node_t *ftc__node_get(ftc_detector_t *d, const char *name)
{
    if (d->hcap && d->hidx[ftc__hash_slot(d, name)])
        return d->nodes[d->hidx[ftc__hash_slot(d, name)] - 1];
    if (d->nnodes == d->capnodes) {
        int cap = d->capnodes ? d->capnodes * 2 : 64;
        ftc__node_t **n = realloc(d->nodes, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        d->nodes = n;
        d->capnodes = cap;
    }
    if ((d->nnodes + 1) * 10 > d->hcap * 7) { /* keep the index under 70% full */
        int hcap = d->hcap ? d->hcap * 2 : 128;
        int *h = calloc((size_t)hcap, sizeof *h);
        if (!h)
            return NULL;
        free(d->hidx);
        d->hidx = h;
        d->hcap = hcap;
        for (int i = 0; i < d->nnodes; i++)
            d->hidx[ftc__hash_slot(d, d->nodes[i]->name)] = i + 1;
    }
    ftc__node_t *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    snprintf(n->name, sizeof n->name, "%s", name);
    d->nodes[d->nnodes] = n;
    d->hidx[ftc__hash_slot(d, name)] = d->nnodes + 1;
    d->nnodes++;
    return n;
}

/* A node's heartbeat is gone: report it once per incarnation. */
static void ftc__node_lost(ftc_detector_t *d, const char *name, const char *how)
{
    if (!strcmp(name, d->node)) {
        d->self_expired = true; /* we were paused; others report us: ftc__new_incarnation */
        return;
    }
    if (ftc_now_ns() < d->quiet_until_ns)
        return; /* just back from our own outage: not yet (ftc__came_up) */
    ftc__node_t *n = ftc__node_get(d, name);
    if (!n || n->lost)
        return;
    if (!n->incarnation[0]) {
        /* not scanned yet (a notification came first): the dedupe id needs
         * the incarnation every agent sees, so read it from the member record.
         * A read that failed (no answer, or an error reply) leaves the loss to
         * the next scan or notification: reported under "node_lost:NAME:", an
         * id no other agent uses, it was in the stream twice. No record at all
         * is the same for every agent: reported without an incarnation. */
        char members[128];
        ftc_ctl_key(d->ctl, "members", members, sizeof members);
        ftc_redis_reply_t *rep = NULL;
        if (ftc_redis_cmdv(ftc_ctl_redis(d->ctl), true, &rep, "HGET", members, name, NULL) != 0 ||
            (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)) {
            ftc_redis_reply_free(rep); /* the next command finds an outage (not here: */
            return;                    /* ftc__read_pushes still reads d->sub) */
        }
        if (rep->type == REDIS_REPLY_STRING) {
            ftc_ctl_member_rec_t rec;
            if (ftc_ctl_member_parse(rep->str, &rec, NULL) == 0)
                snprintf(n->incarnation, sizeof n->incarnation, "%s", rec.joined);
        }
        ftc_redis_reply_free(rep);
    }
    n->lost = true;
    char id[160];
    snprintf(id, sizeof id, "node_lost:%s:%s", name, n->incarnation);
    pthread_mutex_lock(&d->mu);
    ftc__emit_locked(d, "node_lost", name, -1, -1, id, true, "heartbeat of %s expired (%s)",
                     name, how);
    pthread_mutex_unlock(&d->mu);
}

static void ftc__subscribe(ftc_detector_t *d)
{
    if (d->subscribed)
        return;
    if (!d->sub) {
        ftc_err_t err = {0};
        ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
        ro.command_timeout_ms = d->o.redis_timeout_ms;
        ro.connect_timeout_ms = d->o.redis_timeout_ms;
        d->sub = ftc_redis_connect(&d->url, &ro, &err);
        if (!d->sub)
            return;
    } else if (ftc_redis_fd(d->sub) < 0) {
        ftc_redis_close(d->sub);
        d->sub = NULL;
        return;
    }
    /* expiry events need notify-keyspace-events Ex; the embedded server has it,
     * an external one may refuse CONFIG: then the scan alone detects */
    ftc_redis_cmdv(ftc_ctl_redis(d->ctl), true, NULL, "CONFIG", "SET", "notify-keyspace-events",
                   "Ex", NULL);
    char chan[64];
    snprintf(chan, sizeof chan, "__keyevent@%d__:expired", d->url.db);
    ftc_redis_reply_t *rep = NULL;
    if (ftc_redis_cmdv(d->sub, true, &rep, "SUBSCRIBE", chan, NULL) == 0)
        d->subscribed = true;
    ftc_redis_reply_free(rep);
}

/* Handles pushed messages until d passes. */
static void ftc__read_pushes(ftc_detector_t *d, ftc_deadline_t until)
{
    char prefix[128];
    ftc_ctl_key(d->ctl, "hb:", prefix, sizeof prefix);
    size_t pl = strlen(prefix);
    for (;;) {
        ftc_redis_reply_t *rep = NULL;
        int rc = ftc_redis_read_push(d->sub, until, &rep);
        if (rc == FTC_ETIMEDOUT)
            return;
        if (rc) {
            d->subscribed = false; /* re-subscribe and let the scan cover the gap */
            return;
        }
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
            rep->element[0]->type == REDIS_REPLY_STRING &&
            !strcmp(rep->element[0]->str, "message") &&
            rep->element[2]->type == REDIS_REPLY_STRING && rep->element[2]->len > pl &&
            rep->element[2]->len - pl <= FTC_CTL_NODE_MAX && /* longer: no agent's key; cut, it
                                                                could name a live node */
            !strncmp(rep->element[2]->str, prefix, pl)) {
            char name[FTC_CTL_NODE_MAX + 1];
            snprintf(name, sizeof name, "%.*s", (int)(rep->element[2]->len - pl),
                     rep->element[2]->str + pl);
            ftc__node_lost(d, name, "expiry notification");
        }
        ftc_redis_reply_free(rep);
    }
}

static uint64_t ftc__median(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], ftc__cmp_u64);
    return v[n / 2];
}

/* Members, their heartbeats, the generation and the commit. */
static int ftc__scan(ftc_detector_t *d)
{
    ftc_redis_t *r = ftc_ctl_redis(d->ctl);
    char members[128];
    ftc_ctl_key(d->ctl, "members", members, sizeof members);
    uint64_t gen;
    uint32_t world;
    /* Redis lost its data (a restart without persistence, FLUSHALL) while no
     * command of ours failed, so ftc__came_up never ran: the generation or the
     * committed step is gone though we know one. Put them back, else every
     * commit_report of this generation is refused. The same when they went
     * back (a restart from a stale RDB or AOF, a failover to a lagging
     * replica): generations and committed steps only grow, so a lower one is
     * an older copy, not news; taking it, the heartbeats carried the old
     * generation and nothing put the current one back. */
    bool lost = false;
    int rc = ftc_ctl_generation(d->ctl, &gen, &world);
    if (rc == 0 && gen < d->st.generation) {
        lost = true; /* keep d->world: it is what reseed puts back */
    } else if (rc == 0) {
        pthread_mutex_lock(&d->mu);
        if (gen != d->st.generation && gen > 0) {
            d->st.generation = gen;
            ftc__emit_locked(d, "generation", NULL, -1, -1, NULL, false, "generation %" PRIu64
                             " (world %u)", gen, world);
        }
        pthread_mutex_unlock(&d->mu);
        d->world = world;
    } else if (rc == FTC_EPROTO) {
        ftc__failed(d); /* garbage in the key: logged (rate-limited); the scan goes on */
    } else {
        return rc;
    }
    int64_t cstep;
    uint64_t cgen;
    if (ftc_ctl_committed(d->ctl, &cstep, &cgen) == 0) {
        if (cstep > d->committed)
            d->committed = cstep;
        else if (cstep < d->committed)
            lost = true; /* gone, or an older copy: put back */
    }
    ftc_redis_reply_t *rep = NULL;
    rc = ftc_redis_cmdv(r, true, &rep, "HGETALL", members, NULL);
    if (rc)
        return rc;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2) {
        FTC_WARN("detect", "%s is not a hash of members", members);
        ftc_redis_reply_free(rep);
        return 0;
    }
    size_t nm = rep->elements / 2;
    bool self_listed = false;
    int nk = 0;
    const char **argv = calloc(nm + 1, sizeof *argv);
    char **keys = calloc(nm + 1, sizeof *keys);
    ftc__node_t **nodes = calloc(nm + 1, sizeof *nodes);
    uint64_t *times = calloc(nm + 1, sizeof *times);
    if (!argv || !keys || !nodes || !times) {
        rc = FTC_ENOMEM;
        goto out;
    }
    argv[0] = "MGET";
    for (size_t i = 0; i < nm; i++) {
        redisReply *k = rep->element[2 * i], *v = rep->element[2 * i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            k->len > FTC_CTL_NODE_MAX)
            continue;
        if (!strcmp(k->str, d->node))
            self_listed = true;
        ftc__node_t *n = ftc__node_get(d, k->str);
        if (!n)
            continue;
        ftc_ctl_member_rec_t rec;
        if (ftc_ctl_member_parse(v->str, &rec, NULL) == 0 && strcmp(rec.joined, n->incarnation)) {
            snprintf(n->incarnation, sizeof n->incarnation, "%s", rec.joined);
            n->lost = false; /* a new incarnation: it may be lost again */
            n->slow = 0;
        }
        keys[nk] = malloc(strlen(members) + FTC_CTL_NODE_MAX + 8);
        if (!keys[nk]) {
            rc = FTC_ENOMEM;
            goto out;
        }
        char suffix[FTC_CTL_NODE_MAX + 8];
        snprintf(suffix, sizeof suffix, "hb:%s", k->str);
        ftc_ctl_key(d->ctl, suffix, keys[nk], strlen(members) + FTC_CTL_NODE_MAX + 8);
        argv[nk + 1] = keys[nk];
        nodes[nk] = n;
        nk++;
    }
    if (!self_listed) /* Redis lost our record (restart without persistence) */
        ftc__join(d);
    if (lost || !self_listed) {
        FTC_WARN("detect",
                 "%s: redis lost the job's state, or holds an older copy of it, without an outage "
                 "(restart, flush or failover): putting back generation %" PRIu64 " (world %u) "
                 "and committed step %" PRId64,
                 d->node, d->st.generation, d->world, d->committed);
        ftc_ctl_reseed(d->ctl, d->st.generation, d->world, d->committed);
        d->linked_told = false;
    }
    if (nk > 0) {
        ftc_redis_reply_t *hbs = NULL;
        rc = ftc_redis_cmd(r, true, &hbs, nk + 1, argv, NULL);
        if (rc)
            goto out;
        int nt = 0;
        for (int i = 0; i < nk && hbs->type == REDIS_REPLY_ARRAY && (size_t)i < hbs->elements;
             i++) {
            redisReply *h = hbs->element[i];
            if (h->type == REDIS_REPLY_NIL) {
                ftc__node_lost(d, nodes[i]->name, "scan");
                continue;
            }
            ftc_ctl_heartbeat_t hb;
            ftc_err_t err = {0};
            if (h->type != REDIS_REPLY_STRING ||
                ftc_ctl_heartbeat_parse(h->str, h->len, &hb, &err) != 0) {
                FTC_WARN("detect", "%s: %s", keys[i], err.msg[0] ? err.msg : "not a string");
                continue;
            }
            times[i] = hb.step >= 0 ? hb.step_time_us : 0;
            if (times[i])
                nt++;
        }
        /* stragglers: the leader compares each node with the median */
        if (ftc_detector_is_leader(d) && nt >= 3) {
            uint64_t *sorted = calloc((size_t)nt, sizeof *sorted);
            int j = 0;
            for (int i = 0; i < nk; i++)
                if (times[i] && sorted)
                    sorted[j++] = times[i];
            uint64_t med = sorted ? ftc__median(sorted, nt) : 0;
            free(sorted);
            for (int i = 0; i < nk && med; i++) {
                if (!times[i])
                    continue;
                if ((double)times[i] > d->o.straggler_factor * (double)med) {
                    if (++nodes[i]->slow == d->o.straggler_window) {
                        pthread_mutex_lock(&d->mu);
                        ftc__emit_locked(d, "straggler", nodes[i]->name, -1, -1, NULL, true,
                                         "%s: step time %.1f ms is %.2fx the median %.1f ms "
                                         "for %d scans",
                                         nodes[i]->name, (double)times[i] / 1000.0,
                                         (double)times[i] / (double)med, (double)med / 1000.0,
                                         d->o.straggler_window);
                        pthread_mutex_unlock(&d->mu);
                    }
                } else {
                    nodes[i]->slow = 0;
                }
            }
        }
        ftc_redis_reply_free(hbs);
    }
    rc = 0;
out:
    for (int i = 0; i < nk; i++)
        free(keys[i]);
    free(keys);
    free(argv);
    free(nodes);
    free(times);
    ftc_redis_reply_free(rep);
    return rc;
}

/* Leader: members whose heartbeat deadline passed, confirmed by their key
 * being gone in Redis (whose TTL clock is the authority, not ours). Pages
 * through every overdue entry: live nodes whose clocks run behind have
 * deadlines in the past that sort first and stay (their keys are there), and
 * a poll that read only the first page never reached a real loss behind
 * them. Bounded: at most PAGES x PAGE candidates per poll, and the EXISTS of
 * a page's candidates go in one pipeline (one round trip, one command
 * deadline), not one round trip each: with hundreds of skewed live nodes a
 * poll every 50 ms made hundreds of round trips. */
static int ftc__poll_overdue(ftc_detector_t *d)
{
    enum { PAGE = 256, PAGES = 64 };
    if (ftc_now_ns() < d->quiet_until_ns)
        return 0; /* just back from our own outage: the deadlines stay for later */
    char(*names)[FTC_CTL_NODE_MAX + 1] = calloc(PAGE, sizeof *names);
    char(*keys)[FTC_CTL_NODE_MAX + 160] = calloc(PAGE, sizeof *keys);
    const char *(*argvs)[2] = calloc(PAGE, sizeof *argvs);
    const char ***argvp = calloc(PAGE, sizeof *argvp);
    int *argcs = calloc(PAGE, sizeof *argcs);
    int *which = calloc(PAGE, sizeof *which);
    ftc_redis_reply_t **reps = calloc(PAGE, sizeof *reps);
    int rc = 0;
    if (!names || !keys || !argvs || !argvp || !argcs || !which || !reps) {
        rc = FTC_ENOMEM;
        goto out;
    }
    ftc_redis_t *r = ftc_ctl_redis(d->ctl);
    uint64_t trips0 = ftc_redis_round_trips(r);
    uint64_t now = ftc_wall_ms();
    int offset = 0;
    for (int page = 0; !rc && page < PAGES; page++) {
        int n = 0, dropped = 0, m = 0;
        rc = ftc_ctl_overdue(d->ctl, now, offset, names, PAGE, &n);
        for (int i = 0; !rc && i < n; i++) {
            if (!strcmp(names[i], d->node))
                continue;
            char suffix[FTC_CTL_NODE_MAX + 8];
            snprintf(suffix, sizeof suffix, "hb:%s", names[i]);
            ftc_ctl_key(d->ctl, suffix, keys[m], sizeof keys[m]);
            argvs[m][0] = "EXISTS";
            argvs[m][1] = keys[m];
            argvp[m] = argvs[m];
            argcs[m] = 2;
            which[m++] = i;
        }
        if (!rc && m > 0) {
            rc = ftc_redis_pipeline(r, true, m, argcs, (const char **const *)argvp, NULL, reps);
            if (rc == FTC_EREDIS || rc == FTC_EAUTH) {
                /* error replies only (the others ran): judge those that answered */
                bool any = false;
                for (int j = 0; j < m; j++)
                    any = any || (reps[j] && reps[j]->type != REDIS_REPLY_ERROR);
                if (any)
                    rc = 0;
            }
            for (int j = 0; !rc && j < m; j++) {
                long long exists = 1;
                ftc_err_t err = {0};
                if (reps[j] && ftc_redis_want_int(reps[j], "EXISTS", &exists, &err) == 0 &&
                    exists == 0) {
                    ftc__node_lost(d, names[which[j]], "heartbeat deadline passed");
                    if (ftc_ctl_forget_deadline(d->ctl, names[which[j]]) == 0)
                        dropped++; /* the entries after it moved up by one */
                }
            }
            for (int j = 0; j < m; j++) {
                ftc_redis_reply_free(reps[j]);
                reps[j] = NULL;
            }
        }
        if (n < PAGE)
            break;
        offset += n - dropped;
    }
    pthread_mutex_lock(&d->mu);
    d->st.deadline_polls++;
    d->st.deadline_poll_trips += ftc_redis_round_trips(r) - trips0;
    pthread_mutex_unlock(&d->mu);
out:
    free(names);
    free(keys);
    free(argvs);
    free(argvp);
    free(argcs);
    free(which);
    free(reps);
    return rc;
}

static void ftc__lease_tick(ftc_detector_t *d)
{
    pthread_mutex_lock(&d->mu);
    bool leader = d->st.leader;
    uint64_t epoch = d->st.epoch;
    pthread_mutex_unlock(&d->mu);
    bool held = false;
    uint64_t ep = epoch;
    int rc;
    /* the lease runs from when Redis ran the script, which is after this
     * moment and maybe long before its reply arrived: count from here, else a
     * late reply stretches the local lease past the one in Redis */
    uint64_t sent_ns = ftc_now_ns();
    if (leader)
        rc = ftc_ctl_lease_renew(d->ctl, d->holder, epoch, d->o.lease_ttl_ms, &held);
    else if (d->o.campaign)
        rc = ftc_ctl_lease_acquire(d->ctl, d->holder, d->o.lease_ttl_ms, &held, &ep);
    else
        return;
    if (rc) {
        if (rc == FTC_EPROTO)
            FTC_WARN("detect", "%s", ftc_ctl_errstr(d->ctl));
        return;
    }
    pthread_mutex_lock(&d->mu);
    if (held) {
        d->lease_ok_ns = sent_ns;
        if (!d->st.leader) {
            d->st.leader = true;
            d->st.epoch = ep;
            ftc__emit_locked(d, "leader", NULL, -1, -1, NULL, true, "%s leads with epoch %" PRIu64,
                             d->node, ep);
        }
    } else if (d->st.leader) {
        d->st.leader = false;
        ftc__emit_locked(d, "leader_lost", NULL, -1, -1, NULL, true,
                         "%s lost the lease of epoch %" PRIu64 " (taken over or expired)", d->node,
                         epoch);
    }
    pthread_mutex_unlock(&d->mu);
}

/* A leader that could not renew within the lease TTL stops being leader
 * before anything else happens (e.g. right after a SIGSTOP ends). */
static void ftc__lease_expire_locally(ftc_detector_t *d)
{
    pthread_mutex_lock(&d->mu);
    if (d->st.leader &&
        ftc_now_ns() - d->lease_ok_ns > (uint64_t)d->o.lease_ttl_ms * 1000000ull * 9 / 10) {
        d->st.leader = false;
        ftc__emit_locked(d, "leader_lost", NULL, -1, -1, NULL, true,
                         "%s stepped down: no lease renewal for %" PRIu64
                         " ms (paused or cut off from redis)",
                         d->node, (uint64_t)((ftc_now_ns() - d->lease_ok_ns) / 1000000u));
    }
    pthread_mutex_unlock(&d->mu);
}

/* Writes queued events to Redis until the queue is empty, or (until_ns > 0) until that
 * moment of ftc_now_ns() has passed, with at least one event written: the heartbeats
 * come from this thread too, and a queue refilled as fast as it drained (a rank
 * reporting an event at every step of a fast job) kept it here, its heartbeat key
 * expired and the others reported the node lost. Returns whether events are left. */
static bool ftc__publish(ftc_detector_t *d, uint64_t until_ns)
{
    for (bool first = true;; first = false) {
        if (!first && until_ns && ftc_now_ns() >= until_ns) {
            pthread_mutex_lock(&d->mu);
            bool left = d->pub.len > 0;
            pthread_mutex_unlock(&d->mu);
            return left;
        }
        ftc__ev_t e;
        pthread_mutex_lock(&d->mu);
        bool have = ftc__pop(&d->pub, &e);
        pthread_mutex_unlock(&d->mu);
        if (!have)
            return false;
        ftc_ctl_event_t ce = {e.kind, e.node, e.rank, e.gen, e.step, e.detail, e.t_fault_ms,
                              e.t_detect_ms};
        /* node_lost ids name the incarnation: once per job, not per generation
         * (an agent already in the next generation may see the loss too) */
        int rc = !e.id[0]                       ? ftc_ctl_event(d->ctl, &ce)
                 : e.plain                      ? ftc_ctl_event_once(d->ctl, e.id, &ce, NULL)
                 : !strcmp(e.kind, "node_lost") ? ftc_ctl_report_job(d->ctl, e.id, &ce, NULL)
                                                : ftc_ctl_report(d->ctl, e.id, &ce, NULL);
        if (rc && ftc_redis_is_up(ftc_ctl_redis(d->ctl))) {
            /* refused (an error reply): retrying cannot help and would hold
             * back every later event */
            ftc__failed(d);
            pthread_mutex_lock(&d->mu);
            d->pub.dropped++;
            pthread_mutex_unlock(&d->mu);
            continue;
        }
        if (rc) {
            pthread_mutex_lock(&d->mu); /* put it back for later */
            ftc__evq_t *q = &d->pub;
            if (q->len < FTC_DET_QUEUE) {
                q->head = (q->head + FTC_DET_QUEUE - 1) % FTC_DET_QUEUE;
                q->ev[q->head] = e;
                q->len++;
            } else {
                q->dropped++;
            }
            pthread_mutex_unlock(&d->mu);
            ftc__went_down(d);
            return true;
        }
        pthread_mutex_lock(&d->mu);
        d->st.published++;
        pthread_mutex_unlock(&d->mu);
    }
}

/* Tells the job that its ranks link libftc, once a rank connected here, and
 * learns it from Redis while a rank here is in its start-up without it
 * (every second: a rank of a returned node stopped before its HELLO, while
 * the others wait for it in their group set-up, is found only this way).
 * A failed command is tried again at the next tick. */
static void ftc__linked_tick(ftc_detector_t *d)
{
    uint64_t now = ftc_now_ns();
    if (d->linked_told || d->o.start_ms <= 0 || now < d->next_linked_ns)
        return;
    d->next_linked_ns = now + 1000000000ull;
    pthread_mutex_lock(&d->mu);
    bool linked = d->linked, waiting = false;
    for (int i = 0; i < FTC_DET_MAX_RANKS && !linked && !waiting; i++)
        waiting = d->ranks[i].used && d->ranks[i].pid > 0 && !d->ranks[i].started;
    pthread_mutex_unlock(&d->mu);
    if (linked) {
        if (ftc_ctl_linked_set(d->ctl) == 0)
            d->linked_told = true;
        else
            ftc__failed(d);
    } else if (waiting) {
        bool yes = false;
        if (ftc_ctl_linked(d->ctl, &yes) != 0) {
            ftc__failed(d);
        } else if (yes) {
            FTC_DEBUG("detect", "%s: the job's ranks link libftc (%s): start-up limit %d ms",
                      d->node, "ftc:{J}:linked", d->o.start_ms);
            pthread_mutex_lock(&d->mu);
            d->linked = true;
            pthread_mutex_unlock(&d->mu);
            d->linked_told = true;
        }
    }
}

static void *ftc__redis_main(void *arg)
{
    ftc_detector_t *d = arg;
    uint64_t next_hb = 0, next_scan = 0, next_lease = 0;
    while (!atomic_load(&d->stop)) {
        ftc__lease_expire_locally(d);
        uint64_t now = ftc_now_ns();
        if (now >= next_hb) {
            next_hb = now + (uint64_t)d->o.heartbeat_ms * 1000000ull;
            int64_t step = -1;
            uint64_t st = 0;
            pthread_mutex_lock(&d->mu);
            for (int i = 0; i < FTC_DET_MAX_RANKS; i++) /* the node's slowest rank */
                if (d->ranks[i].used && d->ranks[i].step >= 0 &&
                    (step < 0 || d->ranks[i].step < step)) {
                    step = d->ranks[i].step;
                    st = d->ranks[i].times[(d->ranks[i].tpos + FTC_DET_TIMES - 1) % FTC_DET_TIMES];
                }
            ftc_ctl_heartbeat_t hb = {d->st.generation, step, st, ftc_wall_ms()};
            pthread_mutex_unlock(&d->mu);
            /* Redis ran the last heartbeat before its answer came: when this
             * one is sent more than a TTL after that, the key has expired */
            if (d->hb_ok_ns && now - d->hb_ok_ns > (uint64_t)d->o.ttl_ms * 1000000ull)
                d->self_expired = true;
            int hrc = ftc_ctl_heartbeat(d->ctl, d->node, &hb, d->o.ttl_ms);
            if (hrc == 0) {
                d->hb_ok_ns = ftc_now_ns();
                ftc__came_up(d);
                if (d->self_expired)
                    ftc__new_incarnation(d);
                pthread_mutex_lock(&d->mu);
                d->st.heartbeats++;
                pthread_mutex_unlock(&d->mu);
            } else if (ftc_redis_is_up(ftc_ctl_redis(d->ctl))) {
                ftc__came_up(d); /* Redis answered, with an error */
                ftc__failed(d);
            } else {
                ftc__went_down(d);
            }
        }
        if (!d->down && now >= next_lease) {
            next_lease = now + (uint64_t)d->o.lease_ttl_ms * 1000000ull / 4;
            ftc__lease_tick(d);
        }
        bool leader = ftc_detector_is_leader(d);
        if (!d->down && leader && now >= d->next_overdue) {
            d->next_overdue = now + (uint64_t)d->o.deadline_poll_ms * 1000000ull;
            if (ftc__poll_overdue(d) != 0)
                ftc__failed(d);
        }
        if (!d->down && now >= next_scan) {
            uint64_t period =
                (uint64_t)d->o.scan_ms * (leader ? 1u : (uint64_t)d->o.follower_scan_factor);
            next_scan = now + period * 1000000ull;
            if (ftc__scan(d) != 0)
                ftc__failed(d);
        }
        /* until the next heartbeat is due: what is left goes at the next turn, at once */
        bool more = !d->down && ftc__publish(d, next_hb);
        if (!d->down)
            ftc__linked_tick(d);
        if (!d->down)
            ftc__subscribe(d);
        uint64_t next = next_hb < next_scan ? next_hb : next_scan;
        if (next_lease < next)
            next = next_lease;
        if (leader && d->next_overdue < next)
            next = d->next_overdue;
        now = ftc_now_ns();
        uint64_t wait_ms = next > now && !more ? (next - now) / 1000000ull : 0;
        if (wait_ms > 50)
            wait_ms = 50;
        if (d->subscribed)
            ftc__read_pushes(d, ftc_deadline_in_ms(wait_ms));
        else if (wait_ms)
            ftc_sleep_ms(wait_ms);
    }
    return NULL;
}

/* ---- life cycle -------------------------------------------------------------------- */

ftc_detector_t *ftc_detector_start(const ftc_redis_url_t *url, const ftc_detector_options_t *o,
                                   ftc_err_t *err)
{
    if (!o || !o->job || !o->node || o->heartbeat_ms < 1 || o->ttl_ms <= o->heartbeat_ms ||
        o->scan_ms < 1 || o->lease_ttl_ms < 10 || o->spike_window > FTC_DET_LOSSES ||
        o->straggler_window < 1 || o->redis_timeout_ms < 1 || o->deadline_poll_ms < 1 ||
        o->follower_scan_factor < 1) {
        ftc_err_set(err, FTC_EINVAL,
                    "detector: job and node are required, ttl_ms must exceed heartbeat_ms, and "
                    "spike_window is at most %d",
                    FTC_DET_LOSSES);
        return NULL;
    }
    ftc_detector_t *d = calloc(1, sizeof *d);
    if (!d) {
        ftc_err_set(err, FTC_ENOMEM, "detector: out of memory");
        return NULL;
    }
    d->o = *o;
    d->wake[0] = d->wake[1] = -1;
    d->committed = -1;
    snprintf(d->job, sizeof d->job, "%s", o->job);
    snprintf(d->node, sizeof d->node, "%s", o->node);
    snprintf(d->domain, sizeof d->domain, "%s", o->domain ? o->domain : "");
    if (o->host && *o->host)
        snprintf(d->host, sizeof d->host, "%s", o->host);
    else if (gethostname(d->host, sizeof d->host) != 0)
        snprintf(d->host, sizeof d->host, "unknown");
    d->joined_ms = ftc_wall_ms();
    snprintf(d->holder, sizeof d->holder, "%s:%d:%" PRIu64, d->node, (int)getpid(), d->joined_ms);
    d->o.job = d->job;
    d->o.node = d->node;
    d->url = *url;
    pthread_mutex_init(&d->mu, NULL);
    const char *nw = getenv("FTC_TEST_DETECT_NO_WAITID_PIDFD"); /* tests only */
    int64_t nwv = 0;
    if (nw && *nw && ftc_parse_int(nw, 0, 1, &nwv) != 0) {
        ftc_err_set(err, FTC_EINVAL, "FTC_TEST_DETECT_NO_WAITID_PIDFD is '%.40s': 0 or 1 (a "
                    "test knob; unset it)", nw);
        goto fail;
    }
    d->test_no_waitid_pidfd = nwv == 1;
    d->exit_wait_ms = FTC_DET_EXIT_WAIT_MS;
    d->local.ev = calloc(FTC_DET_QUEUE, sizeof(ftc__ev_t));
    d->pub.ev = calloc(FTC_DET_QUEUE, sizeof(ftc__ev_t));
    if (!d->local.ev || !d->pub.ev) {
        ftc_err_set(err, FTC_ENOMEM, "detector: out of memory");
        goto fail;
    }
    if (pipe2(d->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        ftc_err_errno(err, errno, "detector: pipe");
        goto fail;
    }
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ro.command_timeout_ms = o->redis_timeout_ms;
    ro.connect_timeout_ms = o->redis_timeout_ms;
    ftc_redis_t *r = ftc_redis_connect(url, &ro, err);
    if (!r)
        goto fail;
    d->ctl = ftc_ctl_create(r, d->job, err);
    if (!d->ctl) {
        ftc_redis_close(r);
        goto fail;
    }
    uint64_t gen;
    uint32_t world;
    if (ftc_ctl_generation(d->ctl, &gen, &world) == 0) {
        d->st.generation = gen;
        d->world = world;
    }
    if (ftc__join(d) != 0) {
        ftc_err_set(err, FTC_EREDIS, "detector: joining %s: %s", d->job, ftc_ctl_errstr(d->ctl));
        goto fail;
    }
    d->st.redis_up = true;
    if (pthread_create(&d->local_tid, NULL, ftc__local_main, d) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "detector: cannot start a thread");
        goto fail;
    }
    d->local_started = true;
    if (pthread_create(&d->redis_tid, NULL, ftc__redis_main, d) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "detector: cannot start a thread");
        goto fail;
    }
    d->redis_started = true;
    return d;
fail:
    ftc_detector_stop(d, false);
    return NULL;
}

void ftc_detector_stop(ftc_detector_t *d, bool leave)
{
    if (!d)
        return;
    atomic_store(&d->stop, true);
    if (d->wake[1] >= 0)
        ftc__wake(d);
    if (d->local_started)
        pthread_join(d->local_tid, NULL);
    if (d->redis_started)
        pthread_join(d->redis_tid, NULL);
    if (d->ctl && d->redis_started) {
        ftc__publish(d, 0);
        if (d->st.leader)
            ftc_ctl_lease_release(d->ctl, d->holder, d->st.epoch);
        if (leave)
            ftc_ctl_leave(d->ctl, d->node);
    }
    for (int i = 0; i < FTC_DET_MAX_RANKS; i++)
        if (d->ranks[i].used && d->ranks[i].pidfd >= 0)
            close(d->ranks[i].pidfd);
    ftc_ctl_destroy(d->ctl);
    ftc_redis_close(d->sub);
    if (d->wake[0] >= 0)
        close(d->wake[0]);
    if (d->wake[1] >= 0)
        close(d->wake[1]);
    free(d->local.ev);
    free(d->pub.ev);
    for (int i = 0; i < d->nnodes; i++)
        free(d->nodes[i]);
    free(d->nodes);
    free(d->hidx);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void ftc_detector_stats(ftc_detector_t *d, ftc_detector_stats_t *st)
{
    pthread_mutex_lock(&d->mu);
    *st = d->st;
    st->dropped = d->local.dropped + d->pub.dropped;
    pthread_mutex_unlock(&d->mu);
}

bool ftc_detector_is_leader(ftc_detector_t *d)
{
    pthread_mutex_lock(&d->mu);
    bool l = d->st.leader &&
             ftc_now_ns() - d->lease_ok_ns <= (uint64_t)d->o.lease_ttl_ms * 1000000ull * 9 / 10;
    pthread_mutex_unlock(&d->mu);
    return l;
}
