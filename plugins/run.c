/*
 * run.c — `ftc run`'s per-node supervisor (restart mode; in-process mode
 * keeps the surviving ranks: "in-process mode" below). See run.h.
 *
 * The loop, per generation:
 *   join the rendezvous -> (spare: join the next one) -> restart the agent
 *   for the new generation -> agree on MASTER_ADDR:PORT -> start the ranks ->
 *   watch ranks, events and the rendezvous state -> done, or ask for a new
 *   round and stop the ranks.
 */
#include "plugins/run.h"

#include "ckpt/agent_proto.h"
#include "ckpt/records.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fabric.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/proc.h"
#include "detect/control.h"
#include "detect/status.h"
#include "plugins/filestore.h"
#include "plugins/inproc.h"
#include "recover/layout.h"
#include "recover/rendezvous.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/un.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define FTC__MAX_LOCAL 64
#define FTC__OTHERS_MAX 32

typedef struct ftc__agent_thread {
    ftc_agent_t *agent;
    pthread_t tid;
    bool running;
    volatile sig_atomic_t stop;
    int rc;
    /* WATCH (ftc__agent_watch): one connection to this agent for all of
     * them, whose answers are read as they come */
    bool watch_open;           /* watch_fd is connected */
    int watch_fd;
    uint32_t watch_sent;       /* WATCHes sent on watch_fd (seq 1..watch_sent) */
    uint32_t watch_answered;   /* answers read (the agent answers in order) */
    struct {
        int rank;
        pid_t pid;
    } watch_q[FTC__MAX_LOCAL]; /* WATCH seq's rank and pid at [(seq - 1) % FTC__MAX_LOCAL] */
} ftc__agent_thread_t;

/* The supervisor's watchdog: what its main thread is doing that may take
 * long (an agent's stop or start), so that a stall is named in the log while
 * it lasts instead of only after it (every 10 s; with the agent's own phase,
 * ftc_agent_phase). One per process. */
static _Atomic(const char *) ftc__busy_what;
static atomic_uint_fast64_t ftc__busy_since; /* monotonic ms */
static atomic_bool ftc__wd_stop;
/* The stop flag of ftc_run_node (set by SIGINT/SIGTERM), and its copy that
 * the watchdog makes for ftc_rdzv_join's abort (an atomic_int): a node
 * waiting in a rendezvous stops at once, not after --join-timeout-ms. */
static volatile sig_atomic_t *ftc__stop_flag;
static atomic_int ftc__abort;

static void ftc__busy(const char *what)
{
    atomic_store(&ftc__busy_since, ftc_now_ns() / 1000000);
    atomic_store(&ftc__busy_what, what);
}

static void *ftc__watchdog(void *arg)
{
    (void)arg;
    uint64_t warned_at = 0;
    while (!atomic_load(&ftc__wd_stop)) {
        ftc_sleep_ms(200);
        if (ftc__stop_flag && *ftc__stop_flag)
            atomic_store(&ftc__abort, 1);
        const char *what = atomic_load(&ftc__busy_what);
        uint64_t now = ftc_now_ns() / 1000000, since = atomic_load(&ftc__busy_since);
        if (!what) {
            warned_at = 0;
            continue;
        }
        if (now - since >= 10000 && now - warned_at >= 10000) {
            const char *ap = ftc_agent_phase();
            FTC_WARN("run", "still %s after %" PRIu64 " ms%s%s", what, now - since,
                     ap ? "; the agent: " : "", ap ? ap : "");
            warned_at = now;
        }
    }
    return NULL;
}

/* ---- the supervisor's lease: ftc:{J}:sup:NODE -------------------------------------------- */

/* A supervisor's liveness from its start on, before (and without) an agent:
 * a newcomer killed after its round closed has no agent yet, so no heartbeat
 * expires and no detector reports it lost, and the others waited for its
 * agent until --join-timeout-ms (now they stop waiting, and report it:
 * ftc__report_sup_lost). A thread of its own (with its own connection:
 * the main loop blocks in rendezvous and agent starts) sets the key with a
 * TTL every FTC__SUP_REFRESH_MS; a peer counts a member gone only once its
 * key has been missing for FTC__SUP_TTL_MS while the peer's own key is
 * there (a Redis restarted empty loses every key at once, and each
 * supervisor puts its own back within a refresh). */
#define FTC__SUP_TTL_MS 3000
#define FTC__SUP_REFRESH_MS 500

typedef struct ftc__suplease {
    pthread_t tid;
    bool running;
    atomic_bool stop;
    ftc_redis_url_t url;
    char key[256];
    char val[96];
} ftc__suplease_t;

static void *ftc__suplease_main(void *arg)
{
    ftc__suplease_t *l = arg;
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ro.connect_timeout_ms = 500;
    ro.command_timeout_ms = 1000;
    ftc_redis_t *r = NULL;
    char px[16];
    snprintf(px, sizeof px, "%d", FTC__SUP_TTL_MS);
    bool set = false;
    while (!atomic_load(&l->stop)) {
        if (!r) {
            ftc_err_t e = {0};
            r = ftc_redis_connect(&l->url, &ro, &e);
        }
        set = r && ftc_redis_cmdv(r, true, NULL, "SET", l->key, l->val, "PX", px, NULL) == 0;
        for (int i = 0; i < FTC__SUP_REFRESH_MS / 50 && !atomic_load(&l->stop); i++)
            ftc_sleep_ms(50);
    }
    /* gone now: nobody waits for this supervisor (one try, and none when
     * Redis did not answer the last refresh: a node going away does not wait
     * for Redis; the key expires anyway) */
    if (r && set)
        (void)ftc_redis_cmdv(r, false, NULL, "DEL", l->key, NULL);
    ftc_redis_close(r);
    return NULL;
}

static void ftc__suplease_start(ftc__suplease_t *l, const ftc_redis_url_t *url, ftc_ctl_t *ctl,
                                const char *node, const char *host)
{
    char suffix[FTC_CTL_NODE_MAX + 8];
    snprintf(suffix, sizeof suffix, "sup:%s", node);
    ftc_ctl_key(ctl, suffix, l->key, sizeof l->key);
    /* "host pid start_ms": the start (this host's wall clock, as its agent's
     * joined_ms) tells a member record of this process's agent from one a
     * previous incarnation of the same pid left (ftc__report_sup_lost) */
    snprintf(l->val, sizeof l->val, "%.64s %ld %" PRIu64, host && *host ? host : "-",
             (long)getpid(), ftc_wall_ms());
    l->url = *url;
    atomic_store(&l->stop, false);
    l->running = pthread_create(&l->tid, NULL, ftc__suplease_main, l) == 0;
    if (!l->running)
        FTC_WARN("run", "cannot start the thread of %s: the others will not see this "
                 "supervisor's death before its agent runs", l->key);
}

static void ftc__suplease_stop(ftc__suplease_t *l)
{
    if (!l->running)
        return;
    atomic_store(&l->stop, true);
    pthread_join(l->tid, NULL);
    l->running = false;
    memset(l->url.password, 0, sizeof l->url.password);
}

typedef struct ftc__sup {
    const ftc_run_options_t *o;
    char node_id[FTC_CTL_NODE_MAX + 1];
    ftc_ctl_t *ctl;            /* our Redis session (owns the connection) */
    ftc__agent_thread_t ag;
    ftc_filestore_t *files;    /* FTC_CKPT_DIR replication, or NULL */
    pid_t pid[FTC__MAX_LOCAL]; /* local ranks (0 = not running) */
    pid_t pgid[FTC__MAX_LOCAL]; /* each rank's process group (its own session, led by the
                                   rank: what it started, a wrapper script's trainer, is
                                   signalled with it); kept after the rank is reaped while
                                   the group has members (0 = none) */
    volatile sig_atomic_t *stop; /* ftc_run_node's stop flag (may be NULL) */
    int status[FTC__MAX_LOCAL];
    uint64_t gen;              /* current generation (0 before the first round) */
    ftc_rdzv_round_t round;
    int failures;              /* failed rounds so far (grows are not failures) */
    bool done_marked;          /* this generation: every local rank finished (in done:GEN) */
    bool spare;                /* a hot spare: waits in the rendezvous as long as the job runs */
    bool grow_round;           /* the round that ended this generation was opened by a node
                                  joining (reason FTC__GROW_WHY ...): not a failure */
    char events_after[32];     /* event stream position */
    char lost_after[32];       /* stream position from before the round: where a member's
                                  loss is looked for while its generation starts */
    bool cursor_kept;          /* events_after is the last watch's (else marked anew before
                                  the next round) */
    char fail_reason[256];
    pid_t hung_pid[FTC__MAX_LOCAL]; /* the process of local rank l killed for its hang event */
    char hung_why[FTC__MAX_LOCAL][160]; /* that event's detail */
    /* the layout of this generation (ftc__plan, recover/layout.h) */
    int world;                      /* ranks in the generation: dp x tp x pp */
    int master_node;                /* the member (round index) that runs rank 0: its host
                                       is MASTER_ADDR (rank 0 serves torch's store there) */
    int rank_of[FTC__MAX_LOCAL];    /* rank on each local slot, -1 = idle */
    int restore_of[FTC__MAX_LOCAL]; /* FTC_RESTORE_RANK of each slot's rank, -1 = none */
    int prev_world;            /* ranks of the layout of the committed version (0: none) */
    uint64_t rec_t0;           /* wall ms this recovery began (0: none in progress) */
    uint64_t redis_ok_ms;      /* monotonic ms of the last answer from Redis in ftc__watch */
    int continued;             /* in-process: ranks of this generation that continued */
    ftc__suplease_t lease;     /* ftc:{J}:sup:NODE, refreshed by a thread of its own */
    /* adopted orphans ("Orphans of the ranks" below) */
    bool subreaper;            /* PR_SET_CHILD_SUBREAPER is set: the ranks' orphans are ours */
    int subreaper_was;         /* the process's setting before ftc_run_node, put back after */
    pid_t others[FTC__OTHERS_MAX]; /* children this process had before ftc_run_node (the
                                      embedded Redis): their owners wait for them by pid */
    int nothers;
    uint64_t orphan_scan_ms;   /* monotonic ms of the last look through /proc */
    pid_t warned[FTC__MAX_LOCAL]; /* escaped orphans already named in a warning */
    int nwarned;
    uint64_t kill_reap_ms;     /* ftc__kill_rank's wait (FTC_RUN_KILL_REAP_MS, a test knob) */
    /* what ftc__kill_rank stopped waiting for (its ERROR/WARN named them): rank processes
     * not reaped yet (still our children: reaped when they exit) and process groups that
     * still had members; not "escaped" (ftc__warn_escaped); dropped once reaped / empty */
    pid_t gave_up_pid[FTC__MAX_LOCAL];
    int ngave_up_pid;
    pid_t gave_up_pgid[FTC__MAX_LOCAL];
    int ngave_up_pgid;
    int gave_up_max;           /* entries of each given-up set: FTC__MAX_LOCAL, fewer with
                                  FTC_RUN_GAVE_UP_MAX (a test knob: a full set, 2 held ranks) */
    bool gave_up_full_warned;  /* ftc__give_up found a set full of live entries (said once) */
} ftc__sup_t;

static int ftc__inproc_assign(ftc__sup_t *s, int l, char **add, int n, ftc_err_t *err);

/* SIGINT/SIGTERM arrived: every wait of the loop ends at once. */
static bool ftc__stopping(const ftc__sup_t *s)
{
    return s->stop && *s->stop;
}

/* Test knob: a pause of getenv(name) ms (at most 10 min; a signal ends it),
 * so that a test can kill a supervisor at that point of a round. */
static void ftc__test_delay(const ftc__sup_t *s, const char *name)
{
    const char *v = getenv(name);
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0)
        return;
    FTC_INFO("run", "%s: pausing %ld ms", name, ms > 600000 ? 600000L : ms);
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)(ms > 600000 ? 600000 : ms));
    while (!ftc_deadline_expired(d) && !ftc__stopping(s))
        ftc_sleep_ms(20);
}
static void ftc__inproc_fresh(ftc__sup_t *s, int l);

/* True when name (a /dev/shm entry) is rest = one of this node's segments
 * after the "ftc.<job>.n<I>." or "ftc.<job>.files.n<I>." prefix:
 * r<N>.s<D> / p<N>.s<D> (slots, replicas, parity), f<N>.<N> (a fetch),
 * self.s<D> (the file store's own versions). Exact, so another job whose id
 * extends this one's is never touched. */
static bool ftc__own_segment(const char *rest)
{
    const char *p = rest;
    if (!strncmp(p, "self.s", 6)) {
        p += 6;
    } else if (*p == 'r' || *p == 'p' || *p == 'f') {
        char kind = *p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
        if (kind == 'f' ? *p != '.' : strncmp(p, ".s", 2))
            return false;
        p += kind == 'f' ? 1 : 2;
    } else {
        return false;
    }
    if (!(*p >= '0' && *p <= '9'))
        return false;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == 0;
}

/* Removes name (relative to dfd) and, for a directory, all it holds,
 * without following symbolic links. -1 with errno at the first failure. */
static int ftc__rm_tree(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dfd, name, 0);
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = ftc__rm_tree(fd, e->d_name);
    int saved = errno;
    closedir(d);
    if (rc)
        errno = saved;
    return rc ? rc : unlinkat(dfd, name, AT_REMOVEDIR);
}

/* The job finished on this node: its in-memory state (the agent's slots and
 * the replicas and parity it held for peers, the file store's directory and
 * versions) is removed from /dev/shm, as torchrun leaves nothing behind; the
 * last committed version went to the persist tier first when there is one
 * (ftc_agent_flush). --keep-shm keeps it all. Best effort, logged. */
static void ftc__forget_memory(ftc__sup_t *s)
{
    char pre[2][256], dir[300];
    snprintf(pre[0], sizeof pre[0], "ftc.%s.n%u.", s->o->job, s->o->node_index);
    snprintf(pre[1], sizeof pre[1], "ftc.%s.files.n%u.", s->o->job, s->o->node_index);
    snprintf(dir, sizeof dir, "/dev/shm/ftc.%s.ckptdir.n%u", s->o->job, s->o->node_index);
    if (ftc__rm_tree(AT_FDCWD, dir) != 0 && errno != ENOENT)
        FTC_WARN("run", "job done: cannot remove %s: %s", dir, strerror(errno));
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        for (int k = 0; k < 2; k++) {
            size_t pl = strlen(pre[k]);
            if (strncmp(e->d_name, pre[k], pl) || !ftc__own_segment(e->d_name + pl))
                continue;
            char path[512];
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            if (unlink(path) == 0)
                n++;
            else
                FTC_WARN("run", "job done: cannot remove %s: %s", path, strerror(errno));
        }
    }
    closedir(d);
    FTC_INFO("run", "job done: %d shared-memory segment(s) of node %u removed (--keep-shm keeps "
                    "them)", n, s->o->node_index);
}

/* ---- the agent, on a thread of its own ------------------------------------------------- */

static void *ftc__agent_main(void *arg)
{
    ftc__agent_thread_t *t = arg;
    t->rc = ftc_agent_run(t->agent, &t->stop);
    return NULL;
}

/* Reads the answers to WATCH that are there, waiting up to ms (in all) for
 * the one to WATCH number `until` (0: none waited for). An ERROR is a
 * warning; a broken connection is closed (the next WATCH opens another),
 * said as a warning unless the agent was stopped (`stopped`). */
static void ftc__watch_answers(ftc__agent_thread_t *t, uint32_t until, int ms, bool stopped)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    while (t->watch_open && t->watch_answered < t->watch_sent) {
        int wait = until > t->watch_answered ? ftc_deadline_remaining_ms(d) : 0;
        ftc_ap_msg_t m;
        ftc_err_t err = {0};
        int rc = ftc_ap_recv(t->watch_fd, &m, wait, &err);
        if (rc == FTC_ETIMEDOUT)
            return;
        uint32_t seq = t->watch_answered + 1;
        int rank = t->watch_q[(seq - 1) % FTC__MAX_LOCAL].rank;
        pid_t pid = t->watch_q[(seq - 1) % FTC__MAX_LOCAL].pid;
        if (!rc && m.seq != seq)
            rc = ftc_err_set(&err, FTC_EPROTO, "answer %" PRIu64 " to WATCH %u", m.seq, seq);
        if (!rc && m.type == FTC_AP_ERROR)
            ftc_err_set(&err, m.status ? m.status : FTC_EPROTO, "%s", m.text);
        else if (!rc && m.type != FTC_AP_WATCH_OK)
            rc = ftc_err_set(&err, FTC_EPROTO, "answer of type %u", m.type);
        if (rc) { /* this WATCH and the later ones have no answer to come */
            if (stopped)
                FTC_INFO("run", "the agent stopped before it answered %u WATCH(es)",
                         t->watch_sent - t->watch_answered);
            else
                FTC_WARN("run", "the agent at %s does not watch rank %d (pid %d) before it "
                         "connects, nor the %u WATCH(es) after it: %s",
                         ftc_agent_socket(t->agent), rank, (int)pid, t->watch_sent - seq,
                         ftc_err_str(&err));
            close(t->watch_fd);
            t->watch_open = false;
            t->watch_sent = t->watch_answered = 0;
            return;
        }
        t->watch_answered = seq;
        if (m.type == FTC_AP_ERROR && err.code == FTC_ENOENT) /* a rank gone before it */
            FTC_INFO("run", "the agent at %s read the WATCH of rank %d (pid %d) after the rank "
                     "exited: %s", ftc_agent_socket(t->agent), rank, (int)pid,
                     ftc_err_str(&err));
        else if (m.type == FTC_AP_ERROR)
            FTC_WARN("run", "the agent at %s does not watch rank %d (pid %d) before it "
                     "connects: %s", ftc_agent_socket(t->agent), rank, (int)pid,
                     ftc_err_str(&err));
    }
}

/* flush: write the newest committed version to the persist tier first (the
 * job's end; ftc_agent_flush), a no-op without one. */
static void ftc__agent_stop(ftc__agent_thread_t *t, bool flush)
{
    if (!t->agent)
        return;
    t->stop = 1;
    ftc__busy("waiting for the agent's loop to end");
    if (t->running)
        pthread_join(t->tid, NULL);
    /* its loop has ended: what it answered is there, the rest never comes */
    ftc__watch_answers(t, 0, 0, true);
    if (t->watch_open && t->watch_answered < t->watch_sent)
        FTC_INFO("run", "the agent stopped before it answered %u WATCH(es)",
                 t->watch_sent - t->watch_answered);
    if (t->watch_open)
        close(t->watch_fd);
    t->watch_open = false;
    ftc_err_t err = {0};
    ftc__busy("flushing the agent's newest committed version to the persist tier");
    if (flush && t->running && ftc_agent_flush(t->agent, &err) != 0)
        FTC_WARN("run", "the job's last committed state is not in the persist tier: %s",
                 err.msg);
    ftc__busy("stopping the agent");
    ftc_agent_stop(t->agent);
    ftc__busy(NULL);
    memset(t, 0, sizeof *t);
}

static int ftc__agent_start(ftc__sup_t *s, ftc_err_t *err)
{
    uint64_t t0 = ftc_now_ns();
    bool had = s->ag.agent != NULL;
    ftc__agent_stop(&s->ag, false);
    /* (a slow start, as on a loaded node: no agent of this node heartbeats) */
    ftc__test_delay(s, "FTC_TEST_RUN_AGENT_DELAY_MS");
    uint64_t t1 = ftc_now_ns();
    ftc_agent_options_t ao = s->o->agent;
    ao.struct_size = sizeof ao;
    ao.version = 1;
    ao.job = s->o->job;
    ao.dir = s->o->dir;
    ao.redis = s->o->redis;
    ao.index = s->o->node_index;
    ao.nodes = (uint32_t)s->o->max_nodes;
    ao.ranks_per_node = (uint32_t)s->o->nproc;
    ao.node_id = s->node_id;
    ftc__busy("starting the agent");
    s->ag.agent = ftc_agent_start(&ao, err);
    ftc__busy(NULL);
    if (!s->ag.agent)
        return err->code ? err->code : FTC_EINVAL;
    if (pthread_create(&s->ag.tid, NULL, ftc__agent_main, &s->ag)) {
        ftc_agent_stop(s->ag.agent);
        s->ag.agent = NULL;
        return ftc_err_set(err, FTC_ENOMEM, "cannot start the agent's thread");
    }
    s->ag.running = true;
    uint64_t stop_ms = (t1 - t0) / 1000000, start_ms = (ftc_now_ns() - t1) / 1000000;
    if (stop_ms + start_ms > 2000)
        FTC_WARN("run", "the agent took %" PRIu64 " ms to stop and %" PRIu64 " ms to start",
                 stop_ms, start_ms);
    else
        FTC_DEBUG("run", "agent %s in %" PRIu64 " ms, started in %" PRIu64 " ms",
                  had ? "stopped" : "(none)", stop_ms, start_ms);
    return 0;
}

/* Registers rank (process pid, just spawned or continuing in-process) with
 * this node's agent (message WATCH, ckpt/agent_proto.h): its failure
 * detector watches the pid from now on, not from the rank's HELLO only, so
 * that a rank that dies before it connects, or a binary without libftc that
 * never does, has its rank_exit event too. Never a failed spawn: a failure
 * is a warning. All WATCHes go on one connection, in order. While the agent
 * keeps up, the answer is waited for (up to 500 ms: the pid cannot be reaped
 * before the agent holds it); once one is late, later ones are not waited
 * for until it comes (its answers are read as they come, here and in the
 * watch): the agent's loop can be busy for seconds (a HELLO's or a commit
 * poll's Redis call while Redis does not answer: about 4 s measured), a
 * WATCH sent is applied when the agent reads it, and each rank's start must
 * not wait that long. Before, one late answer turned WATCH off for the rest
 * of the generation. */
static void ftc__agent_watch(ftc__sup_t *s, int rank, pid_t pid)
{
    ftc__agent_thread_t *t = &s->ag;
    if (!t->agent)
        return;
    const char *sock = ftc_agent_socket(t->agent);
    ftc_err_t err = {0};
    int rc = 0;
    ftc__watch_answers(t, 0, 0, false); /* (a broken connection is closed: opened anew below) */
    if (!t->watch_open) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
        /* non-blocking: a full listen backlog would block the connect */
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        rc = fd < 0 ? ftc_err_errno(&err, errno, "socket") : 0;
        if (!rc) {
            ftc_deadline_t cd = ftc_deadline_in_ms(200);
            int crc;
            while ((crc = connect(fd, (struct sockaddr *)&sa, sizeof sa)) != 0 &&
                   (errno == EAGAIN || errno == EINTR) && !ftc_deadline_expired(cd))
                ftc_sleep_ms(5);
            if (crc != 0)
                rc = errno == EAGAIN || errno == EINTR
                         ? ftc_err_set(&err, FTC_ETIMEDOUT, "no connection within 200 ms")
                         : ftc_err_errno(&err, errno, "connect");
        }
        if (rc) {
            if (fd >= 0)
                close(fd);
            FTC_WARN("run", "generation %" PRIu64 ": the agent at %s does not watch rank %d "
                     "(pid %d) before it connects: %s", s->gen, sock, rank, (int)pid,
                     ftc_err_str(&err));
            return;
        }
        t->watch_fd = fd;
        t->watch_open = true;
        t->watch_sent = t->watch_answered = 0;
    }
    bool behind = t->watch_answered < t->watch_sent;
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_WATCH);
    m.seq = t->watch_sent + 1;
    m.rank = (uint32_t)rank;
    m.world = (uint32_t)s->world; /* this generation's: what the agent checks the rank against */
    m.pid = (int32_t)pid;
    snprintf(m.job, sizeof m.job, "%s", s->o->job);
    if ((rc = ftc_ap_send(t->watch_fd, &m, 200, &err)) != 0) {
        /* (a full socket: the agent reads nothing; the next WATCH tries again) */
        FTC_WARN("run", "generation %" PRIu64 ": the agent at %s does not watch rank %d "
                 "(pid %d) before it connects: %s", s->gen, sock, rank, (int)pid,
                 ftc_err_str(&err));
        if (rc != FTC_ETIMEDOUT) {
            close(t->watch_fd);
            t->watch_open = false;
        }
        return;
    }
    t->watch_sent++;
    t->watch_q[(t->watch_sent - 1) % FTC__MAX_LOCAL].rank = rank;
    t->watch_q[(t->watch_sent - 1) % FTC__MAX_LOCAL].pid = pid;
    if (behind)
        return;
    ftc__watch_answers(t, t->watch_sent, 500, false);
    if (t->watch_open && t->watch_answered < t->watch_sent)
        FTC_WARN("run", "generation %" PRIu64 ": the agent at %s has not answered the WATCH of "
                 "rank %d (pid %d) within 500 ms (busy): it watches the rank when it reads it; "
                 "the next ranks' WATCHes do not wait until it answers", s->gen, sock, rank,
                 (int)pid);
}

/* The answers to WATCH that came (a late agent's): read without waiting. */
static void ftc__agent_watch_answers(ftc__sup_t *s)
{
    if (s->ag.watch_open && s->ag.watch_answered < s->ag.watch_sent)
        ftc__watch_answers(&s->ag, 0, 0, false);
}

/* ---- ranks --------------------------------------------------------------------------------- */

/* Variables that describe one generation of one rank: set by the
 * supervisor when they apply, and never passed on from its own environment
 * (an `ftc run` started from a restarted rank, or from a shell that once
 * exported them, would otherwise hand a fresh rank another job's restore
 * source, assignment file or rendezvous directory). The Redis password
 * reaches a rank only as the supervisor's FTC_REDIS_PASSWORD_FILE (the job's
 * Redis's: a stale FTC_REDIS_PASSWORD won over that file in the rank's
 * client, and the embedded Redis has a password of its own). FTC_CKPT_DIR
 * is the replicated directory of --ckpt-dir only (a stale one was not
 * replicated), TORCHELASTIC_ERROR_FILE another launch's error file (torchrun
 * gives each rank its own; ftc run none). */
static const char *const ftc__gen_vars[] = {"FTC_RESTORE_RANK", "FTC_PREV_WORLD_SIZE",
                                            "FTC_ASSIGN_FILE", "FTC_ASSIGN_TIMEOUT_MS",
                                            "FTC_TRAIN_RDZV_DIR", "FTC_REDIS_PASSWORD",
                                            "FTC_REDIS_PASSWORD_FILE", "FTC_CKPT_DIR",
                                            "TORCHELASTIC_ERROR_FILE", NULL};

static bool ftc__env_named(const char *entry, const char *name)
{
    size_t len = strlen(name);
    return !strncmp(entry, name, len) && entry[len] == '=';
}

/* environ minus the names we set and the per-generation ones, plus ours
 * (built before fork: the child only calls async-signal-safe functions). */
static char **ftc__env_build(char **add, int nadd)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + (size_t)nadd + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool replaced = false;
        for (int j = 0; j < nadd && !replaced; j++) {
            size_t len = strcspn(add[j], "=");
            replaced = !strncmp(environ[i], add[j], len + 1);
        }
        for (int j = 0; ftc__gen_vars[j] && !replaced; j++)
            replaced = ftc__env_named(environ[i], ftc__gen_vars[j]);
        if (!replaced)
            env[k++] = environ[i];
    }
    for (int j = 0; j < nadd; j++)
        env[k++] = add[j];
    env[k] = NULL;
    return env;
}

/* Where a rank's stdout (s[0]) and stderr (s[1]) go: the console, a file,
 * or both (a relay); quiet drops the console. Paths made before fork. */
enum { FTC__OUT_CONSOLE = 0, FTC__OUT_FILE = 1, FTC__OUT_TEE = 2 };
typedef struct ftc__io {
    int mode[2];
    char path[2][4400];
    bool quiet;
} ftc__io_t;

static void ftc__write_all_raw(int fd, const char *p, ssize_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, (size_t)n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the console or the file is gone: keep draining the pipe */
        p += w, n -= w;
    }
}

/* The tee relay (child of the rank, before its exec): copies the pipe to
 * the file and the console until the rank's end closes. */
static void ftc__relay(int in, int file, int con)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    static char buf[65536];
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            _exit(0);
        ftc__write_all_raw(file, buf, r);
        if (con >= 0)
            ftc__write_all_raw(con, buf, r);
    }
}

/* In the child, before exec: async-signal-safe calls only. */
static void ftc__child_io(const ftc__io_t *io)
{
    for (int k = 0; k < 2; k++) {
        int fd = k + 1;
        if (io->mode[k] == FTC__OUT_CONSOLE) {
            if (io->quiet) {
                int n = open("/dev/null", O_WRONLY);
                if (n >= 0 && n != fd) {
                    dup2(n, fd);
                    close(n);
                }
            }
            continue;
        }
        /* appended: a job launched again (its generations counted anew on a
         * fresh Redis) must not wipe the logs of the launch that failed */
        int f = open(io->path[k], O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (f < 0) {
            static const char msg[] = "ftc run: cannot open the rank's log file\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            _exit(127);
        }
        if (io->mode[k] == FTC__OUT_TEE && !io->quiet) {
            int p[2];
            if (pipe(p) == 0) {
                pid_t r = fork();
                if (r == 0) {
                    close(p[1]);
                    for (int x = 0; x < 3; x++)
                        if (x != fd)
                            close(x);
                    ftc__relay(p[0], f, fd);
                }
                close(p[0]);
                if (r > 0) {
                    dup2(p[1], fd);
                    close(p[1]);
                    close(f);
                    continue;
                }
                close(p[1]); /* no relay: the file alone */
            }
        }
        dup2(f, fd);
        close(f);
    }
}

static pid_t ftc__spawn(char *const *argv, char **env, const ftc__io_t *io, ftc_err_t *err)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        ftc_err_set(err, FTC_EIO, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* a session of its own (torchrun's start_new_session): the rank and
         * what it starts (a wrapper script's trainer, workers) are one
         * process group, signalled together when the rank is stopped */
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a rank never outlives its supervisor */
        if (getppid() != parent) /* it died before the prctl: no signal will come */
            raise(SIGKILL);
        ftc_fs_close_from(3); /* not the agent's sockets, nor Redis connections */
        if (io)
            ftc__child_io(io); /* (its tee relay keeps SIGPIPE ignored: it drains the pipe) */
        /* `ftc run` ignores SIGPIPE, and an ignored signal stays ignored
         * through exec: the rank gets the default, as from a shell or
         * torchrun (a `yes | head` of a wrapper script failed with "Broken
         * pipe", and a writer that ignores write errors never ended) */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, NULL);
        execvpe(argv[0], argv, env);
        /* named (write only: this is a child of a threaded process) */
        static const char msg[] = "ftc run: cannot execute the training binary '";
        ssize_t w = write(2, msg, sizeof msg - 1);
        w = write(2, argv[0], strlen(argv[0]));
        w = write(2, "'\n", 2);
        (void)w;
        _exit(127);
    }
    return pid;
}

/* Sends sig to local rank l's process group (the rank and what it started),
 * or to the rank alone when it has no group. */
static void ftc__signal_rank(const ftc__sup_t *s, int l, int sig)
{
    if (s->pgid[l] > 0 && kill(-s->pgid[l], sig) == 0)
        return;
    if (s->pid[l] > 0)
        kill(s->pid[l], sig);
}

/* Local rank l's process pid was reaped with wait status st: its agent's
 * rank_exit event carries it (and a rank that never connected, a binary
 * without libftc, that ended with 0 gets none). */
static void ftc__tell_exit(const ftc__sup_t *s, int l, pid_t pid, int st)
{
    if (s->ag.agent && s->rank_of[l] >= 0)
        ftc_agent_exit_status(s->ag.agent, (uint32_t)s->rank_of[l], pid, st);
}

/* Local rank l is about to be stopped by this supervisor (the generation
 * ended, or its hang was reported): its exit is a consequence, not a
 * failure, and no event. */
static void ftc__untell_rank(const ftc__sup_t *s, int l)
{
    if (!s->ag.agent || s->rank_of[l] < 0 || s->pid[l] <= 0)
        return;
    /* a rank that has exited already (a second failure, at the same time
     * as the one that ended the generation) keeps its watch: its exit is
     * its own, and its event is the detector's to report */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)s->pid[l], &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid > 0)
        return;
    ftc_agent_unwatch(s->ag.agent, (uint32_t)s->rank_of[l]);
}

/* Local rank l's group is forgotten once its rank was reaped and nothing is
 * left in it (a group id stays reserved while it has members). */
static void ftc__group_check(ftc__sup_t *s, int l)
{
    if (s->pid[l] <= 0 && s->pgid[l] > 0 && kill(-s->pgid[l], 0) != 0 && errno == ESRCH)
        s->pgid[l] = 0;
}

/* ---- orphans of the ranks ------------------------------------------------------------------
 *
 * What a rank starts (a wrapper script's trainer, a launcher's workers, the
 * tee relay) is not the supervisor's child; when its parent dies first it
 * is an orphan, and a SIGKILLed orphan's libfabric shm regions
 * (/dev/shm/<pid>:*) stayed forever when init reaped it. The supervisor is
 * a child subreaper (PR_SET_CHILD_SUBREAPER): orphans of its descendants
 * are reparented to it, and it reaps them through ftc_fabric_reap, which
 * removes their regions first. Never with waitpid(-1): this process has
 * other children whose owners wait for them by pid (`ftc run` without
 * --simulate-nodes runs the job's embedded Redis in the supervisor's
 * process, and detect/redis_server.c reaps it by pid; a -1 reap would take
 * its exit, or a rank's from its loop). So an exited child is looked for
 * with waitid(P_ALL, WNOWAIT), which reaps nothing, and only then are the
 * children found in /proc (ppid == ours) reaped one by one by pid, except
 * the ranks (their own loops reap them, as their exits) and the children
 * this process had before ftc_run_node (s->others). Nothing else in this
 * process forks while the supervisor runs (the agent and the file store do
 * not); something that does must be kept out of the sweep as well. */

/* Calls fn(s, pid, state, pgid, comm) for each child of this process (its
 * pid as their ppid in /proc/PID/stat); state is that file's ('Z': exited,
 * not reaped). Processes that go meanwhile are skipped. */
typedef void ftc__child_fn(ftc__sup_t *s, pid_t pid, char state, pid_t pgid, const char *comm);
static void ftc__each_child(ftc__sup_t *s, ftc__child_fn *fn)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    long me = (long)getpid();
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        ftc_proc_stat_t ps;
        if (ftc_proc_stat_read((pid_t)pid, &ps) != 0 || (long)ps.ppid != me)
            continue;
        fn(s, (pid_t)pid, ps.state, ps.pgid, ps.comm);
    }
    closedir(d);
}

/* A small set of pids (the given-up ones of ftc__sup_t). */
static bool ftc__set_has(const pid_t *set, int n, pid_t pid)
{
    for (int i = 0; i < n; i++)
        if (set[i] == pid)
            return true;
    return false;
}

static void ftc__set_add(pid_t *set, int *n, pid_t pid)
{
    if (pid > 0 && !ftc__set_has(set, *n, pid) && *n < FTC__MAX_LOCAL)
        set[(*n)++] = pid;
}

static void ftc__set_del(pid_t *set, int *n, int i)
{
    set[i] = set[--*n];
}

/* Not an orphan of ours to reap: a rank (in the table), a rank process
 * ftc__kill_rank gave up on (ftc__reap_given_up reaps it), or a child this
 * process had before ftc_run_node. */
static bool ftc__not_orphan(const ftc__sup_t *s, pid_t pid)
{
    for (int l = 0; l < FTC__MAX_LOCAL; l++)
        if (s->pid[l] == pid)
            return true;
    for (int i = 0; i < s->nothers; i++)
        if (s->others[i] == pid)
            return true;
    return ftc__set_has(s->gave_up_pid, s->ngave_up_pid, pid);
}

/* The rank processes ftc__kill_rank stopped waiting for that have exited by
 * now are reaped (their shm regions removed first, ftc_fabric_reap; the file
 * store was told when they were given up on), by pid, so with or without the
 * subreaper's sweep; each stays in the set until then, so its pid, not free
 * while unreaped, never names another process. A given-up group is
 * forgotten once it is empty (its id may be reused from then on). */
static void ftc__reap_given_up(ftc__sup_t *s)
{
    for (int i = 0; i < s->ngave_up_pid;) {
        pid_t pid = s->gave_up_pid[i];
        int st = 0;
        pid_t p = ftc_fabric_reap(pid, &st, WNOHANG);
        if (p == pid)
            FTC_INFO("run", "rank process %d, not waited for after SIGKILL, has exited at last: "
                     "reaped (%s %d)", (int)pid,
                     WIFSIGNALED(st) ? "killed by signal" : "exit status",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        if (p == pid || (p < 0 && errno == ECHILD))
            ftc__set_del(s->gave_up_pid, &s->ngave_up_pid, i);
        else
            i++;
    }
    for (int i = 0; i < s->ngave_up_pgid;) {
        if (kill(-s->gave_up_pgid[i], 0) != 0 && errno == ESRCH)
            ftc__set_del(s->gave_up_pgid, &s->ngave_up_pgid, i);
        else
            i++;
    }
}

static void ftc__reap_one(ftc__sup_t *s, pid_t pid, char state, pid_t pgid, const char *comm)
{
    (void)pgid;
    if (state != 'Z' || ftc__not_orphan(s, pid))
        return;
    int st = 0;
    if (ftc_fabric_reap(pid, &st, WNOHANG) != pid)
        return;
    FTC_DEBUG("run", "reaped pid %d (%s), an orphan of a rank: %s %d", (int)pid, comm,
              WIFSIGNALED(st) ? "killed by signal" : "exit status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    /* the last member of a reaped rank's group: the group is forgotten now,
     * before its id, free from this reap on, can be another group's (a stop
     * sent SIGTERM to -id of a group emptied long before) */
    for (int l = 0; l < s->o->nproc; l++)
        ftc__group_check(s, l);
}

/* Reaps the orphans of the ranks that have exited (and removes their shm
 * regions). Cheap when nothing has exited (one waitid); /proc is read when
 * something has, and at most every 200 ms while the exited child seen is
 * one the sweep leaves alone (a rank its loop reaps next, a child of
 * s->others not reaped yet by its owner). */
static void ftc__reap_orphans(ftc__sup_t *s)
{
    ftc__reap_given_up(s);
    if (!s->subreaper)
        return;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid <= 0)
        return; /* none has exited (ECHILD: no children) */
    uint64_t now = ftc_now_ns() / 1000000u;
    if (ftc__not_orphan(s, si.si_pid) && now - s->orphan_scan_ms < 200)
        return;
    s->orphan_scan_ms = now;
    ftc__each_child(s, ftc__reap_one);
}

static void ftc__warn_escaped(ftc__sup_t *s, pid_t pid, char state, pid_t pgid,
                              const char *comm)
{
    if (state == 'Z' || ftc__not_orphan(s, pid))
        return;
    for (int l = 0; l < FTC__MAX_LOCAL; l++)
        if (s->pgid[l] > 0 && s->pgid[l] == pgid)
            return; /* in a rank's group: signalled with it */
    /* a rank process, or a member of its group, that ftc__kill_rank stopped
     * waiting for after SIGKILL (stuck in the kernel, held at exit): named by
     * its ERROR/WARN, not escaped (its group was SIGKILLed with it) */
    if (ftc__set_has(s->gave_up_pgid, s->ngave_up_pgid, pgid))
        return;
    for (int i = 0; i < s->nwarned; i++)
        if (s->warned[i] == pid)
            return;
    if (s->nwarned < FTC__MAX_LOCAL)
        s->warned[s->nwarned++] = pid;
    FTC_WARN("run", "pid %d (%s), started by a rank, escaped its rank's process group (a "
             "session of its own: setsid, a daemon) and still runs after the ranks were "
             "stopped: not signalled (stopping it is its starter's part); reaped here if it "
             "exits while this supervisor runs, else by init, and then its shm regions stay",
             (int)pid, comm);
}

/* After the ranks were stopped: the orphans of the ranks that are still
 * running are outside every rank's process group (the groups are empty), so
 * no stop reaches them. They are named, not killed: a process that left its
 * session did it on purpose (a daemon, a server its starter shares), and
 * its lifetime is its starter's choice, not ours to guess. */
static void ftc__report_escaped(ftc__sup_t *s)
{
    if (s->subreaper)
        ftc__each_child(s, ftc__warn_escaped);
}

static void ftc__others_add(ftc__sup_t *s, pid_t pid, char state, pid_t pgid, const char *comm)
{
    (void)state, (void)pgid, (void)comm;
    if (s->nothers < FTC__OTHERS_MAX)
        s->others[s->nothers] = pid;
    s->nothers++;
}

/* Makes this process a child subreaper, the children it has now kept out of
 * the sweep. Without /proc, or with more such children than we keep track
 * of, it stays as it was (the ranks' orphans go to init, as before). */
static void ftc__subreaper_begin(ftc__sup_t *s)
{
    if (prctl(PR_GET_CHILD_SUBREAPER, &s->subreaper_was) != 0)
        s->subreaper_was = 0;
    if (access("/proc/self/stat", R_OK) != 0) {
        FTC_WARN("run", "no /proc: the orphans of the ranks are not reaped here (their shm "
                        "regions stay if they are killed)");
        return;
    }
    ftc__each_child(s, ftc__others_add);
    if (s->nothers > FTC__OTHERS_MAX) {
        FTC_WARN("run", "this process has %d children before it supervises ranks (more than "
                 "%d): the orphans of the ranks are not reaped here", s->nothers,
                 FTC__OTHERS_MAX);
        return;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        FTC_WARN("run", "PR_SET_CHILD_SUBREAPER: %s: the orphans of the ranks are not reaped "
                 "here (their shm regions stay if they are killed)", strerror(errno));
        return;
    }
    s->subreaper = true;
}

/* Orphans adopted from now on go to the next subreaper or init; those that
 * exited are reaped first. */
static void ftc__subreaper_end(ftc__sup_t *s)
{
    if (!s->subreaper)
        return;
    s->orphan_scan_ms = 0;
    ftc__reap_orphans(s);
    ftc__report_escaped(s);
    prctl(PR_SET_CHILD_SUBREAPER, s->subreaper_was);
    s->subreaper = false;
}

/* How long a SIGKILLed rank may take to exit (a large address space takes a
 * while to tear down) before ftc__kill_rank stops waiting for it; the
 * environment's FTC_RUN_KILL_REAP_MS (1..FTC__KILL_REAP_MAX_MS) replaces it:
 * a test knob (a rank held at exit need not be held 30 s), and a tuning one. */
#define FTC__KILL_REAP_MS 30000
#define FTC__KILL_REAP_MAX_MS 3600000

/* Remembers id (a rank process, or a process group: what) in a given-up set
 * of s. A full set first drops the entries that are done by now (reaped,
 * empty: ftc__reap_given_up); a set still full
 * holds gave_up_max processes stuck after SIGKILL, none of which may be
 * dropped (a dropped pid would be taken for an escaped orphan, and one not
 * reaped would never be), so id is the one not remembered: said once, with
 * what follows from it, instead of nothing (ftc__set_add drops it silently). */
static void ftc__give_up(ftc__sup_t *s, pid_t *set, int *n, pid_t id, const char *what)
{
    if (id <= 0 || ftc__set_has(set, *n, id))
        return;
    if (*n >= s->gave_up_max)
        ftc__reap_given_up(s);
    if (*n < s->gave_up_max) {
        ftc__set_add(set, n, id);
        return;
    }
    if (s->gave_up_full_warned)
        return;
    s->gave_up_full_warned = true;
    FTC_WARN("run", "%d rank processes or groups stuck after SIGKILL are remembered already, "
             "all still there: %s %d (and any later one) is not: it may be named as escaped "
             "from its rank's group, and is reaped, its shm regions removed, only by the orphan "
             "sweep (or by init after this supervisor); find what holds these processes (ps -o "
             "pid,stat,wchan) and restart this node", s->gave_up_max, what, (int)id);
}

/* SIGKILL to what is left of local rank l (its group), the rank reaped, and
 * so are the members of its group that were orphaned (adopted: reaped here,
 * their shm regions removed, before this supervisor may exit). */
static void ftc__kill_rank(ftc__sup_t *s, int l)
{
    ftc__signal_rank(s, l, SIGKILL);
    ftc_deadline_t d = ftc_deadline_in_ms(s->kill_reap_ms);
    if (s->pid[l] > 0) {
        for (;;) {
            pid_t p = ftc_fabric_reap(s->pid[l], NULL, WNOHANG);
            if (p == s->pid[l] || (p < 0 && errno != EINTR))
                break;
            if (ftc_deadline_expired(d)) {
                FTC_ERROR("run", "rank process %d did not exit within %" PRIu64 " ms of SIGKILL "
                          "(stuck in the kernel?); not waiting for it: its shm regions "
                          "/dev/shm/%d:* stay until it exits while this supervisor runs (then "
                          "it is reaped here)",
                          (int)s->pid[l], s->kill_reap_ms, (int)s->pid[l]);
                ftc__give_up(s, s->gave_up_pid, &s->ngave_up_pid, s->pid[l], "rank process");
                break;
            }
            ftc_sleep_ms(5);
        }
        ftc_filestore_rank_exited(s->files, s->pid[l], -1);
        s->pid[l] = 0;
    }
    while (s->subreaper && s->pgid[l] > 0) {
        ftc__reap_orphans(s);
        ftc__group_check(s, l);
        if (s->pgid[l] <= 0)
            break;
        if (ftc_deadline_expired(d)) {
            FTC_WARN("run", "process group %d of local rank %d still has members %" PRIu64
                     " ms after SIGKILL (stuck in the kernel, or a member's parent outside the "
                     "group does not reap it): not waiting for them", (int)s->pgid[l], l,
                     s->kill_reap_ms);
            ftc__give_up(s, s->gave_up_pgid, &s->ngave_up_pgid, s->pgid[l], "process group");
            break;
        }
        ftc_sleep_ms(5);
    }
    s->pgid[l] = 0;
}

/* The output plan of local rank l, rank `rank`: its log directory made. */
static int ftc__io_plan(const ftc__sup_t *s, int l, int rank, ftc__io_t *io, ftc_err_t *err)
{
    const ftc_run_options_t *o = s->o;
    memset(io, 0, sizeof *io);
    io->quiet = l < 64 && (o->quiet >> l) & 1;
    int red = l < 64 ? o->redirect[l] : 0, tee = l < 64 ? o->tee[l] : 0;
    if (!o->log_dir || !o->log_dir[0] || !(red | tee))
        return 0;
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/%s/attempt_%" PRIu64 "/%d", o->log_dir, o->job, s->gen, rank);
    if (ftc_fs_mkdirs(dir, err))
        return ftc_err_wrap(err, "--log-dir");
    static const char *const names[2] = {"stdout.log", "stderr.log"};
    for (int k = 0; k < 2; k++) {
        int bit = 1 << k;
        io->mode[k] = (tee & bit) ? FTC__OUT_TEE : (red & bit) ? FTC__OUT_FILE : FTC__OUT_CONSOLE;
        snprintf(io->path[k], sizeof io->path[k], "%s/%s", dir, names[k]);
    }
    return 0;
}

static bool ftc__is_member(const ftc__sup_t *s, const char *node)
{
    for (int i = 0; i < s->round.nodes; i++)
        if (!strcmp(s->round.members[i], node))
            return true;
    return false;
}

/* Splits "a b c" into at most cap words (in place). */
static int ftc__words(char *list, char **out, int cap)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, " ", &save); t && n < cap;
         t = strtok_r(NULL, " ", &save))
        out[n++] = t;
    return n;
}

/* The layout of generation gen as its supervisors published it
 * (`ftc:{J}:plan:GEN`: `members` node ids in order, `ranks` "node:slot" per
 * rank, node = index in members). 0 with *n = world, or -1 when absent. */
static int ftc__plan_read(ftc__sup_t *s, uint64_t gen, char **members_buf, char **ranks_buf)
{
    char key[256], suffix[64];
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, gen);
    ftc_ctl_key(s->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    size_t n = 0;
    *members_buf = *ranks_buf = NULL;
    if (ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "HMGET", key, "members", "ranks",
                       NULL) ||
        ftc_redis_want_array(rep, "HMGET plan", 2, &el, &n, NULL)) {
        ftc_redis_reply_free(rep);
        return -1;
    }
    const char *m, *r;
    size_t ml, rl;
    if (ftc_redis_want_str(el[0], "plan members", &m, &ml, NULL) ||
        ftc_redis_want_str(el[1], "plan ranks", &r, &rl, NULL) || !ml || !rl) {
        ftc_redis_reply_free(rep);
        return -1;
    }
    *members_buf = strndup(m, ml);
    *ranks_buf = strndup(r, rl);
    ftc_redis_reply_free(rep);
    if (!*members_buf || !*ranks_buf) {
        free(*members_buf);
        free(*ranks_buf);
        *members_buf = *ranks_buf = NULL;
        return -1;
    }
    return 0;
}

/* This generation's layout, through the layout planner (recover/layout.h),
 * the same on every node (same inputs from Redis, pure planner):
 *  - dp = the most replicas of tp x pp ranks that fit the members' slots
 *    (--tp/--pp; slots beyond dp x tp x pp stay idle);
 *  - the previous layout is the one of the generation that committed the
 *    newest version (its plan in Redis), since that is the state ranks
 *    restore: survivors stay on their node and slot, TP groups whole;
 *  - FTC_RESTORE_RANK of a rank: the previous rank whose slot it took (its
 *    state is on this node); else a previous rank whose state no survivor
 *    carries (a lost node's), with the same (tp, pp) coordinates, lowest
 *    first — a replacement takes over the lost rank's shard; else the
 *    planner's parameter source (a survivor's replica: a pure grow).
 * Ranks restoring the same state restore the same shard: right for
 * data-parallel replicas; sharded state is the binary's to re-partition (the
 * reference trainer does, from FTC_PREV_WORLD_SIZE). Publishes the plan. */
static int ftc__plan(ftc__sup_t *s, ftc_err_t *err)
{
    const ftc_run_options_t *o = s->o;
    int tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    s->prev_world = 0;
    for (int l = 0; l < FTC__MAX_LOCAL; l++)
        s->rank_of[l] = s->restore_of[l] = -1;
    /* the previous layout: the committed version's */
    int64_t cstep = -1;
    uint64_t cgen = 0;
    char *mbuf = NULL, *rbuf = NULL;
    int *prev_node = NULL, *prev_local = NULL, prev_world = 0;
    if (ftc_ctl_committed(s->ctl, &cstep, &cgen) == 0 && cstep >= 0 && cgen > 0 &&
        ftc__plan_read(s, cgen, &mbuf, &rbuf) == 0) {
        char *pm[FTC_LAYOUT_MAX_NODES];
        int npm = ftc__words(mbuf, pm, FTC_LAYOUT_MAX_NODES);
        /* the agents' strict parser (fuzz_records): sscanf("%d:%d") took
         * "1:2x" for 1:2, and ranks past the 4096th were dropped unseen */
        uint32_t *rm = NULL, *rl = NULL, nr = 0;
        bool ok = ftc__plan_ranks_parse(rbuf, (uint32_t)npm, &rm, &rl, &nr) && nr > 0 &&
                  nr <= FTC_LAYOUT_MAX_WORLD && nr % (uint32_t)(tp * pp) == 0;
        int npr = ok ? (int)nr : 0;
        prev_node = calloc((size_t)npr + 1, sizeof *prev_node);
        prev_local = calloc((size_t)npr + 1, sizeof *prev_local);
        ok = ok && prev_node && prev_local;
        for (int q = 0; ok && q < npr; q++) {
            ok = rl[q] <= INT_MAX;
            prev_node[q] = -1;
            prev_local[q] = (int)rl[q];
            for (int i = 0; ok && i < s->round.nodes; i++)
                if (!strcmp(s->round.members[i], pm[rm[q]]))
                    prev_node[q] = i;
        }
        free(rm);
        free(rl);
        if (ok)
            prev_world = npr;
        else
            FTC_WARN("run", "generation %" PRIu64 ": the plan of generation %" PRIu64 " (the "
                     "committed version's) does not fit --tp %d --pp %d: planning afresh",
                     s->gen, cgen, tp, pp);
    }
    ftc_layout_req_t req = {.nodes = s->round.nodes, .gpus_per_node = o->nproc, .tp = tp,
                            .pp = pp, .global_batch = o->max_nodes * o->nproc,
                            .micro_batch = 1, .uneven = true};
    if (prev_world) {
        req.prev_node_of_rank = prev_node;
        req.prev_local_of_rank = prev_local;
        req.prev_world = prev_world;
        req.prev_dp = prev_world / (tp * pp);
    }
    ftc_layout_t l;
    int rc = ftc_layout_plan(&req, &l, err);
    if (rc) {
        free(mbuf), free(rbuf), free(prev_node), free(prev_local);
        return rc;
    }
    s->world = l.world;
    s->prev_world = prev_world;
    s->master_node = l.world > 0 ? l.rank_node[0] : 0;
    int base = s->round.index * o->nproc;
    for (int sl = 0; sl < o->nproc; sl++)
        s->rank_of[sl] = l.slot_rank[base + sl];
    if (prev_world) {
        /* previous ranks whose state no survivor carries */
        bool *carried = calloc((size_t)prev_world, sizeof *carried);
        int *src = calloc((size_t)l.world, sizeof *src);
        if (!carried || !src) {
            free(carried), free(src), free(mbuf), free(rbuf), free(prev_node), free(prev_local);
            ftc_layout_free(&l);
            return ftc_err_set(err, FTC_ENOMEM, "planning generation %" PRIu64, s->gen);
        }
        for (int r = 0; r < l.world; r++)
            if (l.prev_rank_of[r] >= 0)
                carried[l.prev_rank_of[r]] = true;
        for (int r = 0; r < l.world; r++) {
            src[r] = l.prev_rank_of[r];
            for (int q = 0; src[r] < 0 && q < prev_world; q++)
                if (!carried[q] && q % tp == l.rank_tp[r] &&
                    q / (req.prev_dp * tp) == l.rank_pp[r]) {
                    src[r] = q;
                    carried[q] = true;
                }
            if (src[r] < 0)
                src[r] = l.param_src[r].prev_rank >= 0 ? l.param_src[r].prev_rank
                                                       : r % prev_world;
        }
        for (int sl = 0; sl < o->nproc; sl++)
            if (s->rank_of[sl] >= 0)
                s->restore_of[sl] = src[s->rank_of[sl]];
        free(carried);
        free(src);
    }
    FTC_INFO("run", "generation %" PRIu64 ": layout dp %d x tp %d x pp %d = world %d on %d "
             "nodes x %d slots; %d ranks in place, %d moved%s", s->gen, l.dp, tp, pp, l.world,
             s->round.nodes, o->nproc, l.kept, l.moved,
             prev_world ? "" : " (no committed version: a fresh layout)");
    /* publish it (every member writes the same) */
    size_t cap = 64 + (size_t)l.world * 24, mcap = 16;
    for (int i = 0; i < s->round.nodes; i++)
        mcap += strlen(s->round.members[i]) + 1;
    char *ranks = malloc(cap), *members = malloc(mcap);
    if (ranks && members) {
        size_t off = 0;
        ranks[0] = members[0] = 0;
        for (int r = 0; r < l.world; r++)
            off += (size_t)snprintf(ranks + off, cap - off, "%s%d:%d", r ? " " : "",
                                    l.rank_node[r], l.rank_local[r]);
        off = 0;
        for (int i = 0; i < s->round.nodes; i++)
            off += (size_t)snprintf(members + off, mcap - off, "%s%s", i ? " " : "",
                                    s->round.members[i]);
        char key[256], suffix[64], ws[16];
        snprintf(suffix, sizeof suffix, "plan:%" PRIu64, s->gen);
        ftc_ctl_key(s->ctl, suffix, key, sizeof key);
        snprintf(ws, sizeof ws, "%d", l.world);
        /* and this member's supervisor ("sup:NODE": its lease's value, host
         * pid start): ftc__gen_running tells this generation's supervisors
         * from those of a whole job started again under the same names */
        char supf[FTC_CTL_NODE_MAX + 8];
        snprintf(supf, sizeof supf, "sup:%s", s->node_id);
        ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, NULL, "HSET", key, "members", members,
                       "ranks", ranks, "world", ws, supf, s->lease.val, NULL);
        ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, NULL, "EXPIRE", key, "86400", NULL);
    }
    free(ranks), free(members);
    free(mbuf), free(rbuf), free(prev_node), free(prev_local);
    ftc_layout_free(&l);
    return 0;
}

static int ftc__start_ranks(ftc__sup_t *s, const char *master, int master_port, ftc_err_t *err)
{
    const ftc_run_options_t *o = s->o;
    int index = s->round.index;
    int world = s->world;
    char redis_url[512];
    ftc_redis_url_t pub = o->redis;
    pub.password[0] = 0; /* the password travels in a file, never in the environment */
    ftc_redis_url_str(&pub, redis_url, sizeof redis_url);
    char pwfile[4200];
    snprintf(pwfile, sizeof pwfile, "%s/redis.password", o->dir);
    /* the ranks' way to the password (mode 0600, rewritten each generation:
     * a new embedded Redis has a new one); never written before, so a rank
     * opening FTC_REDIS_URL could not authenticate */
    if (o->redis.password[0]) {
        ftc_err_t e2 = {0};
        if (ftc_fs_write_file_atomic(o->dir, "redis.password", o->redis.password,
                                     strlen(o->redis.password), NULL, &e2) != 0)
            FTC_WARN("run", "ranks get no Redis password file: %s", e2.msg);
    }
    for (int l = 0; l < o->nproc; l++) {
        int rank = s->rank_of[l];
        if (rank < 0) { /* an idle slot in this layout: a survivor there stops */
            if (s->pid[l] > 0)
                FTC_INFO("run", "generation %" PRIu64 ": local slot %d is idle in this layout "
                         "(world %d): stopping its rank", s->gen, l, world);
            if (s->pid[l] > 0 || s->pgid[l] > 0)
                ftc__kill_rank(s, l);
            s->status[l] = 0; /* counts as finished */
            continue;
        }
        char v[32][4352];
        int n = 0;
#define FTC__SETENV(...) snprintf(v[n++], sizeof v[0], __VA_ARGS__)
        FTC__SETENV("RANK=%d", rank);
        FTC__SETENV("LOCAL_RANK=%d", l);
        FTC__SETENV("WORLD_SIZE=%d", world);
        FTC__SETENV("LOCAL_WORLD_SIZE=%d", o->nproc);
        FTC__SETENV("GROUP_RANK=%d", index);
        FTC__SETENV("GROUP_WORLD_SIZE=%d", s->round.nodes);
        FTC__SETENV("ROLE_RANK=%d", rank);
        FTC__SETENV("ROLE_NAME=%s", o->role && o->role[0] ? o->role : "default");
        FTC__SETENV("ROLE_WORLD_SIZE=%d", world);
        FTC__SETENV("MASTER_ADDR=%s", master);
        FTC__SETENV("MASTER_PORT=%d", master_port);
        FTC__SETENV("TORCHELASTIC_RESTART_COUNT=%d", s->failures);
        FTC__SETENV("TORCHELASTIC_MAX_RESTARTS=%d", o->max_restarts);
        FTC__SETENV("TORCHELASTIC_RUN_ID=%s", o->job);
        /* no TCPStore is hosted here: with a stale "True" (a shell or a
         * torchrun that started ftc run), PyTorch's env:// rank 0 would not
         * host it either, and every rank would wait for it */
        FTC__SETENV("TORCHELASTIC_USE_AGENT_STORE=False");
        FTC__SETENV("FTC_RANK=%d", rank);
        FTC__SETENV("FTC_WORLD_SIZE=%d", world);
        FTC__SETENV("FTC_JOB_ID=%s", o->job);
        FTC__SETENV("FTC_GENERATION=%" PRIu64, s->gen);
        /* the node's stable index (--node-rank, its agent's --index), as
         * `ftc run` and `ftc agent` read FTC_NODE_RANK; GROUP_RANK is its
         * position in this generation, which follows the rendezvous */
        FTC__SETENV("FTC_NODE_RANK=%u", o->node_index);
        FTC__SETENV("FTC_AGENT_SOCKET=%s", ftc_agent_socket(s->ag.agent));
        FTC__SETENV("FTC_REDIS_URL=%s", redis_url);
        if (o->redis.password[0] && access(pwfile, R_OK) == 0) /* (not a previous launch's) */
            FTC__SETENV("FTC_REDIS_PASSWORD_FILE=%s", pwfile);
        if (s->files)
            FTC__SETENV("FTC_CKPT_DIR=%s", ftc_filestore_dir(s->files));
        if (s->restore_of[l] >= 0) {
            FTC__SETENV("FTC_RESTORE_RANK=%d", s->restore_of[l]);
            FTC__SETENV("FTC_PREV_WORLD_SIZE=%d", s->prev_world);
        }
        if (o->in_process) {
            FTC__SETENV("FTC_ASSIGN_FILE=%s/assign.%s.%d", o->dir, s->node_id, l);
            uint64_t to = (uint64_t)(o->max_restarts + 1) * 3u * (uint64_t)o->join_timeout_ms +
                          (uint64_t)o->grace_ms;
            FTC__SETENV("FTC_ASSIGN_TIMEOUT_MS=%llu", (unsigned long long)to);
        }
#undef FTC__SETENV
        char *add[32];
        for (int i = 0; i < n; i++)
            add[i] = v[i];
        if (o->in_process && s->pid[l] > 0) { /* a survivor: continues in its process */
            int rc = ftc__inproc_assign(s, l, add, n, err);
            if (rc)
                return rc;
            FTC_INFO("run", "generation %" PRIu64 ": rank %d (local %d of %d, world %d) "
                     "continues in-process in pid %d", s->gen, rank, l, o->nproc, world,
                     (int)s->pid[l]);
            ftc__agent_watch(s, rank, s->pid[l]); /* this generation's agent is new */
            continue;
        }
        if (o->in_process)
            ftc__inproc_fresh(s, l);
        char **env = ftc__env_build(add, n);
        if (!env)
            return ftc_err_set(err, FTC_ENOMEM, "environment of rank %d", rank);
        ftc__io_t io;
        if (ftc__io_plan(s, l, rank, &io, err)) {
            free(env);
            return err->code;
        }
        if (s->pgid[l] > 0) /* what the slot's previous rank left behind */
            ftc__kill_rank(s, l);
        s->pid[l] = ftc__spawn(o->argv, env, &io, err);
        free(env);
        if (s->pid[l] < 0) {
            s->pid[l] = 0;
            return err->code;
        }
        s->pgid[l] = s->pid[l];
        s->status[l] = -1;
        FTC_INFO("run", "generation %" PRIu64 ": rank %d (local %d of %d, world %d) is pid %d",
                 s->gen, rank, l, o->nproc, world, (int)s->pid[l]);
        ftc__agent_watch(s, rank, s->pid[l]);
    }
    return 0;
}

/* SIGTERM, then SIGKILL after grace_ms (a stopped process only dies of
 * SIGKILL), to each rank's process group: what a rank started (the trainer
 * of a wrapper script) stops with it; reaps every rank and waits (within
 * the same grace) until its group is empty (its orphans reaped here), then
 * names the orphans that run on outside every group. */
static void ftc__stop_ranks(ftc__sup_t *s)
{
    ftc__reap_orphans(s);
    bool any = false;
    for (int l = 0; l < s->o->nproc; l++)
        if (s->pid[l] > 0 || s->pgid[l] > 0) {
            ftc__untell_rank(s, l);
            ftc__signal_rank(s, l, SIGTERM);
            ftc__signal_rank(s, l, SIGCONT);
            any = true;
        }
    if (!any) {
        ftc__report_escaped(s);
        return;
    }
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)s->o->grace_ms);
    for (;;) {
        bool left = false;
        ftc__reap_orphans(s); /* zombies count as group members until reaped */
        for (int l = 0; l < s->o->nproc; l++) {
            if (s->pid[l] > 0) {
                int st;
                pid_t p = ftc_fabric_reap(s->pid[l], &st, WNOHANG);
                if (p == s->pid[l] || (p < 0 && errno == ECHILD)) {
                    if (p == s->pid[l])
                        ftc__tell_exit(s, l, p, st);
                    ftc_filestore_rank_exited(s->files, s->pid[l], p == s->pid[l] ? st : -1);
                    s->pid[l] = 0;
                } else {
                    left = true;
                }
            }
            ftc__group_check(s, l);
            if (s->pid[l] <= 0 && s->pgid[l] > 0)
                left = true;
        }
        if (!left)
            break;
        if (ftc_deadline_expired(d)) {
            for (int l = 0; l < s->o->nproc; l++)
                if (s->pid[l] > 0 || s->pgid[l] > 0)
                    ftc__kill_rank(s, l);
            break;
        }
        ftc_sleep_ms(10);
    }
    ftc__report_escaped(s);
}

/* ---- in-process mode (plugins/inproc.h) ------------------------------------------------- */

static void ftc__inproc_paths(const ftc__sup_t *s, int l, char *assign, size_t acap, char *state,
                              size_t scap)
{
    snprintf(assign, acap, "%s/assign.%s.%d", s->o->dir, s->node_id, l);
    ftc_inproc_state_path(assign, state, scap);
}

/* Local rank l knows in-process mode: its process wrote its state file. */
static bool ftc__inproc_aware(const ftc__sup_t *s, int l, ftc_inproc_state_t *st)
{
    char a[4200], sp[4300];
    ftc__inproc_paths(s, l, a, sizeof a, sp, sizeof sp);
    ftc_err_t e = {0};
    return s->pid[l] > 0 && ftc_inproc_state_read(sp, st, &e) == 0 && st->pid == s->pid[l];
}

/* A fresh process for local rank l: the files of its predecessor go. */
static void ftc__inproc_fresh(ftc__sup_t *s, int l)
{
    char a[4200], sp[4300];
    ftc__inproc_paths(s, l, a, sizeof a, sp, sizeof sp);
    unlink(a);
    unlink(sp);
}

/* The new generation's environment to a surviving rank: what a fresh process
 * would get, plus "-KEY" for the variables it would not get. */
static int ftc__inproc_assign(ftc__sup_t *s, int l, char **add, int n, ftc_err_t *err)
{
    char *vars[40], unset[2][32] = {"-FTC_RESTORE_RANK", "-FTC_PREV_WORLD_SIZE"};
    int k = 0;
    for (int i = 0; i < n && k < 38; i++)
        vars[k++] = add[i];
    if (s->restore_of[l] < 0) {
        vars[k++] = unset[0];
        vars[k++] = unset[1];
    }
    char a[4200], sp[4300];
    ftc__inproc_paths(s, l, a, sizeof a, sp, sizeof sp);
    s->continued++;
    return ftc_inproc_assign_write(a, vars, k, err);
}

/* In the watch: a rank that left the generation on its own (its collective
 * failed) fails it, as an exit would. */
static bool ftc__inproc_left(ftc__sup_t *s)
{
    for (int l = 0; l < s->o->nproc; l++) {
        ftc_inproc_state_t st;
        if (ftc__inproc_aware(s, l, &st) && st.phase == FTC_INPROC_WAITING && st.gen >= s->gen) {
            snprintf(s->fail_reason, sizeof s->fail_reason,
                     "rank %d (node %s) left generation %" PRIu64 " in-process: %.150s",
                     s->rank_of[l], s->node_id, st.gen, st.why);
            return true;
        }
    }
    return false;
}

/* A failed generation in in-process mode: aware ranks are asked to leave it
 * (SIGUSR1 queued with the generation) and kept; the others are stopped as
 * in restart mode. A rank that neither reports having left (state
 * phase=waiting) nor exits within grace_ms is SIGKILLed (hung, stopped, or
 * blocked joining a group): it will be started fresh. */
static void ftc__inproc_leave(ftc__sup_t *s)
{
    const ftc_run_options_t *o = s->o;
    bool aware[FTC__MAX_LOCAL] = {0};
    for (int l = 0; l < o->nproc; l++) {
        if (s->pid[l] <= 0)
            continue;
        ftc_inproc_state_t st;
        aware[l] = ftc__inproc_aware(s, l, &st);
        ftc__untell_rank(s, l);
        if (aware[l]) {
            ftc_inproc_signal(s->pid[l], s->gen);
        } else {
            ftc__signal_rank(s, l, SIGTERM);
            ftc__signal_rank(s, l, SIGCONT);
        }
    }
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)o->grace_ms);
    int kept = 0, killed = 0;
    for (;;) {
        bool left = false;
        kept = 0;
        ftc__reap_orphans(s);
        for (int l = 0; l < o->nproc; l++) {
            if (s->pid[l] <= 0)
                continue;
            int st;
            pid_t p = ftc_fabric_reap(s->pid[l], &st, WNOHANG);
            if (p == s->pid[l] || (p < 0 && errno == ECHILD)) {
                if (p == s->pid[l])
                    ftc__tell_exit(s, l, p, st);
                ftc_filestore_rank_exited(s->files, s->pid[l], p == s->pid[l] ? st : -1);
                s->pid[l] = 0;
                continue;
            }
            ftc_inproc_state_t is;
            if (aware[l] && ftc__inproc_aware(s, l, &is) && is.phase == FTC_INPROC_WAITING &&
                is.gen >= s->gen) {
                kept++;
                continue;
            }
            left = true;
        }
        if (!left)
            break;
        if (ftc_deadline_expired(d)) {
            for (int l = 0; l < o->nproc; l++) {
                ftc_inproc_state_t is;
                if (s->pid[l] <= 0 || (aware[l] && ftc__inproc_aware(s, l, &is) &&
                                       is.phase == FTC_INPROC_WAITING && is.gen >= s->gen))
                    continue;
                FTC_WARN("run", "rank %d (pid %d) did not leave generation %" PRIu64
                         " within %d ms: killing it (it starts fresh)",
                         s->rank_of[l], (int)s->pid[l], s->gen, o->grace_ms);
                ftc__kill_rank(s, l);
                killed++;
            }
            break;
        }
        ftc_sleep_ms(5);
    }
    FTC_INFO("run", "in-process: %d ranks left generation %" PRIu64 " and wait for the next, "
             "%d killed", kept, s->gen, killed);
}

/* ---- Redis helpers ------------------------------------------------------------------------ */

static int ftc__free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* 0 when a TCP listener could bind port on any address now (as a rank's
 * store would: SO_REUSEADDR, so a previous generation's TIME_WAIT does not
 * count), else the errno. */
static int ftc__port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY),
                             .sin_port = htons((uint16_t)port)};
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

static bool ftc__member_lost(ftc__sup_t *s, uint64_t *next_ms, int *member, char *why,
                             size_t cap);

/* While this generation starts (its agents, MASTER_ADDR): whether the next
 * round was opened meanwhile (a member gave up and said so as it left, or
 * failed otherwise): then the generation cannot start, and waiting for the
 * missing member until --join-timeout-ms only delays the next round.
 * Looked up every 100 ms at most (*next_ms: when next). */
static bool ftc__round_moved(ftc__sup_t *s, uint64_t *next_ms)
{
    uint64_t now = ftc_now_ns() / 1000000u;
    if (now < *next_ms)
        return false;
    *next_ms = now + 100;
    uint64_t g = 0;
    bool open = false;
    ftc_err_t e = {0};
    return ftc_rdzv_state(ftc_ctl_redis(s->ctl), s->o->job, &g, &open, &e) == 0 &&
           (g > s->gen || open);
}

/* The member that runs rank 0 (not always the round's first: a survivor
 * kept in place can come first while a node that was idle takes rank 0)
 * publishes host:port for the generation, since rank 0 serves torch's store
 * there; the others read it (bounded). */
/* A wait while a generation starts (its agents up, rank 0's MASTER_ADDR):
 * bounded by --join-timeout-ms, and cut short by a signal, by the next
 * round, by the loss of a previous member (node_lost with its heartbeat
 * gone) or by the lease of the awaited member's supervisor expiring. */
typedef struct {
    uint64_t gone_since; /* monotonic ms its lease was first seen missing (0 = seen alive) */
    uint64_t gone_wall;  /* the wall ms of that look */
    char seen[96];       /* the lease's value when last seen ("host pid start_ms": its
                            supervisor), or "" when never seen: tells its agent's member
                            record from a stale one (ftc__report_sup_lost) */
} ftc__sup_look_t;

typedef struct {
    ftc_deadline_t d;
    uint64_t next_look, next_lost, next_sup; /* when each check looks again */
    ftc__sup_look_t *sup;                    /* per member: the looks at its lease */
} ftc__gen_wait_t;

static bool ftc__sup_lost(ftc__sup_t *s, int who, ftc__sup_look_t *looks, uint64_t *next_ms);
static void ftc__report_sup_lost(ftc__sup_t *s, int who, const ftc__sup_look_t *look);

static void ftc__gen_wait_init(ftc__sup_t *s, ftc__gen_wait_t *w)
{
    memset(w, 0, sizeof *w);
    w->d = ftc_deadline_in_ms((uint64_t)s->o->join_timeout_ms);
    w->sup = calloc((size_t)(s->round.nodes > 0 ? s->round.nodes : 1), sizeof *w->sup);
}

/* One look of the wait for member `who` (waiting: what for, in words).
 * 0 to wait on, else the error: FTC_ECANCELED (a signal), FTC_EAGAIN (the
 * next round, or a member lost: the round opens), FTC_ETIMEDOUT. */
static int ftc__gen_wait_step(ftc__sup_t *s, ftc__gen_wait_t *w, int who, const char *waiting,
                              ftc_err_t *err)
{
    if (ftc__stopping(s))
        return ftc_err_set(err, FTC_ECANCELED, "stopped by a signal");
    if (ftc__round_moved(s, &w->next_look))
        return ftc_err_set(err, FTC_EAGAIN,
                           "generation %" PRIu64 ": the next round was opened while waiting for "
                           "%s (it left, or failed)", s->gen, waiting);
    int lost;
    char why[256];
    if (ftc__member_lost(s, &w->next_lost, &lost, why, sizeof why))
        return ftc_err_set(err, FTC_EAGAIN,
                           "generation %" PRIu64 ": member %s was lost while waiting for %s "
                           "(%s): not waiting for it, the next round opens",
                           s->gen, s->round.members[lost], waiting, why);
    if (ftc__sup_lost(s, who, w->sup, &w->next_sup)) {
        /* in the event stream before this node opens the next round */
        ftc__report_sup_lost(s, who, &w->sup[who]);
        return ftc_err_set(err, FTC_EAGAIN,
                           "generation %" PRIu64 ": member %s was lost while waiting for %s "
                           "(its supervisor's lease expired): not waiting for it, the next "
                           "round opens", s->gen, s->round.members[who], waiting);
    }
    if (ftc_deadline_expired(w->d))
        return ftc_err_set(err, FTC_ETIMEDOUT,
                           "generation %" PRIu64 ": gave up waiting for %s after "
                           "--join-timeout-ms (%d ms)", s->gen, waiting, s->o->join_timeout_ms);
    return 0;
}

static int ftc__master(ftc__sup_t *s, char *host, size_t cap, int *port, ftc_err_t *err)
{
    char key[256], suffix[64];
    snprintf(suffix, sizeof suffix, "master:%" PRIu64, s->gen);
    ftc_ctl_key(s->ctl, suffix, key, sizeof key);
    ftc_redis_t *r = ftc_ctl_redis(s->ctl);
    ftc_redis_reply_t *rep = NULL;
    if (s->round.index == s->master_node) {
        char val[640];
        int p = s->o->master_port;
        int busy = p > 0 ? ftc__port_bindable(p) : 0;
        if (busy) { /* published too, so that every node fails this round at once */
            snprintf(val, sizeof val,
                     "!MASTER_PORT %d (--master-port) cannot be bound on the node of rank 0 "
                     "in generation %" PRIu64 " (%s, %s): %s; free it, pick another port, or omit "
                     "--master-port for a free port per generation",
                     p, s->gen, s->node_id, s->o->host, strerror(busy));
        } else {
            if (p <= 0)
                p = ftc__free_port();
            if (p < 0)
                return ftc_err_set(err, FTC_EIO, "no free TCP port for MASTER_PORT: %s",
                                   strerror(errno));
            snprintf(val, sizeof val, "%s:%d", s->o->host, p);
        }
        int rc = ftc_redis_cmdv(r, true, &rep, "SET", key, val, "EX", "86400", NULL);
        ftc_redis_reply_free(rep);
        if (rc)
            return ftc_err_set(err, rc, "publishing MASTER_ADDR: %s", ftc_redis_errstr(r));
    }
    char waiting[384];
    snprintf(waiting, sizeof waiting, "the node of rank 0 (%s) to publish MASTER_ADDR (%s)",
             s->round.members[s->master_node], key);
    ftc__gen_wait_t w;
    ftc__gen_wait_init(s, &w);
    int rc = 0;
    for (;;) {
        rep = NULL;
        const char *v = NULL;
        size_t len = 0;
        if (ftc_redis_cmdv(r, true, &rep, "GET", key, NULL) == 0 &&
            ftc_redis_want_str(rep, "master", &v, &len, NULL) == 0 && v && len && len < 640) {
            char buf[640];
            memcpy(buf, v, len);
            buf[len] = 0;
            ftc_redis_reply_free(rep);
            char *colon = strrchr(buf, ':');
            if (buf[0] == '!') { /* node 0 could not take the fixed port: the round fails */
                rc = ftc_err_set(err, FTC_EAGAIN, "%s", buf + 1);
            } else if (!colon) {
                rc = ftc_err_set(err, FTC_EPROTO, "%s holds '%s', not host:port", key, buf);
            } else {
                /* strictly: atoi took "2951x" for 2951 and "70000" as is, and gave the
                 * ranks a port nobody serves (their rendezvous then timed out) */
                int64_t p = 0;
                *colon = 0;
                if (ftc_parse_int(colon + 1, 1, 65535, &p) != 0) {
                    rc = ftc_err_set(err, FTC_EPROTO, "%s holds MASTER_PORT '%s' (of '%s:%s'), "
                                     "not a port in 1..65535: the node of rank 0 (%s) runs "
                                     "another ftc, or something else wrote the key; run the "
                                     "same ftc on every node and start the job again",
                                     key, colon + 1, buf, colon + 1,
                                     s->round.members[s->master_node]);
                } else {
                    snprintf(host, cap, "%s", buf);
                    *port = (int)p;
                }
            }
            break;
        }
        ftc_redis_reply_free(rep);
        if ((rc = ftc__gen_wait_step(s, &w, s->master_node, waiting, err)) != 0)
            break;
        ftc_sleep_ms(20);
    }
    free(w.sup);
    return rc;
}

/* HGETALL of ftc:{J}:fabric: its fields and values in turn in *el, their
 * count returned, 0 when it cannot be read (then *failed, when not NULL, is
 * set; an absent hash is an empty one, no failure). The caller frees *rep
 * (which may be NULL). */
static size_t ftc__fabric_hash(ftc__sup_t *s, ftc_redis_reply_t **rep, ftc_redis_reply_t ***el,
                               bool *failed)
{
    char key[256];
    ftc_ctl_key(s->ctl, "fabric", key, sizeof key);
    size_t n = 0;
    bool bad = ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, rep, "HGETALL", key, NULL) != 0 ||
               ftc_redis_want_array(*rep, "HGETALL fabric", -1, el, &n, NULL) != 0;
    if (bad)
        n = 0;
    if (failed)
        *failed = bad;
    return n;
}

/* Field k and value k + 1 of ftc__fabric_hash's elements as a record; false
 * when they are not one. */
static bool ftc__fabric_entry(ftc_redis_reply_t **el, size_t k, ftc__fabric_rec_t *r)
{
    const char *f, *v;
    size_t fl, vl;
    char fbuf[32], buf[1024];
    if (ftc_redis_want_str(el[k], "fabric", &f, &fl, NULL) || !f || fl >= sizeof fbuf ||
        ftc_redis_want_str(el[k + 1], "fabric", &v, &vl, NULL) || !v || vl >= sizeof buf)
        return false;
    memcpy(fbuf, f, fl);
    fbuf[fl] = 0;
    memcpy(buf, v, vl);
    buf[vl] = 0;
    /* the agents' strict parser (fuzz_records): sscanf("%*s %64s %*s
     * %llu") took "5x" for generation 5 and "-1" for 2^64-1 */
    return ftc__fabric_parse(fbuf, buf, r, NULL) == 0;
}

/* Whether every member's agent of this generation published its fabric
 * address (`ftc:{J}:fabric`: "hexaddr node_id domain generation"): the
 * address a member's previous agent left, with a heartbeat that has not
 * expired yet, would send this generation's first replicas to a closed
 * endpoint. Sets *missing to the first member without one. */
static bool ftc__fabric_current(ftc__sup_t *s, int *missing)
{
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    bool *seen = calloc((size_t)s->round.nodes, sizeof *seen);
    *missing = 0;
    size_t n = seen ? ftc__fabric_hash(s, &rep, &el, NULL) : 0;
    for (size_t k = 0; k + 1 < n; k += 2) {
        ftc__fabric_rec_t r;
        if (!ftc__fabric_entry(el, k, &r) || !r.has_gen || r.gen < s->gen)
            continue;
        for (int i = 0; i < s->round.nodes; i++)
            if (!strcmp(r.node_id, s->round.members[i]))
                seen[i] = true;
    }
    ftc_redis_reply_free(rep);
    bool all = seen != NULL;
    for (int i = 0; all && i < s->round.nodes; i++)
        if (!seen[i]) {
            all = false;
            *missing = i;
        }
    free(seen);
    return all;
}

/* Whether member node of generation gen lives: its heartbeat is there, or
 * its supervisor holds its lease (ftc:{J}:sup:NODE) with the value it
 * recorded in gen's plan (field sup:NODE, ftc__plan). Between a round's close
 * and its agents' start (seconds on a loaded node) no member heartbeats;
 * the lease's value tells the supervisor that ran gen from a new one of a
 * whole job started again on its Redis under the same node names. */
static bool ftc__member_live(ftc__sup_t *s, uint64_t gen, const char *node)
{
    char keys[3][256], suffix[FTC_CTL_NODE_MAX + 8], field[FTC_CTL_NODE_MAX + 8];
    snprintf(suffix, sizeof suffix, "hb:%s", node);
    ftc_ctl_key(s->ctl, suffix, keys[0], sizeof keys[0]);
    snprintf(suffix, sizeof suffix, "sup:%s", node);
    ftc_ctl_key(s->ctl, suffix, keys[1], sizeof keys[1]);
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, gen);
    ftc_ctl_key(s->ctl, suffix, keys[2], sizeof keys[2]);
    snprintf(field, sizeof field, "sup:%s", node);
    const char *av0[] = {"EXISTS", keys[0]}, *av1[] = {"GET", keys[1]},
               *av2[] = {"HGET", keys[2], field};
    const char **const avs[] = {av0, av1, av2};
    const int ac[] = {2, 2, 3};
    ftc_redis_reply_t *reps[3] = {NULL, NULL, NULL};
    long long hb = 0;
    const char *held = NULL, *rec = NULL;
    size_t hl = 0, rl = 0;
    bool live = ftc_redis_pipeline(ftc_ctl_redis(s->ctl), true, 3, ac, avs, NULL, reps) == 0 &&
                ftc_redis_want_int(reps[0], "EXISTS hb", &hb, NULL) == 0 &&
                (hb == 1 || (ftc_redis_want_str(reps[1], "GET sup", &held, &hl, NULL) == 0 &&
                             ftc_redis_want_str(reps[2], "HGET plan", &rec, &rl, NULL) == 0 &&
                             hl == rl && hl > 0 && !memcmp(held, rec, hl)));
    for (int i = 0; i < 3; i++)
        ftc_redis_reply_free(reps[i]);
    return live;
}

/* Whether a member of generation gen's plan lives (ftc__member_live): the
 * job is running (true too when the plan cannot be read: then it may be).
 * False for a job whose every node is gone, e.g. a whole job started again
 * on its Redis. */
static bool ftc__gen_running(ftc__sup_t *s, uint64_t gen)
{
    char *members = NULL, *ranks = NULL;
    if (ftc__plan_read(s, gen, &members, &ranks))
        return true;
    bool alive = false;
    for (char *sv = NULL, *t = strtok_r(members, " ", &sv); t && !alive;
         t = strtok_r(NULL, " ", &sv))
        alive = ftc__member_live(s, gen, t);
    free(members);
    free(ranks);
    return alive;
}

/* A node joining a running job: the grow round it opens interrupts every
 * member, so it waits for the next checkpoint boundary (the committed step
 * moves: what the members computed is then in a committed version), at
 * most grow_wait_ms. True when a round was opened meanwhile. A job of
 * generation gen whose members are all gone (a whole job restarted on its
 * Redis) has no boundary to wait for. */
static bool ftc__grow_boundary(ftc__sup_t *s, const char *job, uint64_t gen)
{
    int64_t c0 = -1, c = -1;
    uint64_t cg;
    if (s->o->grow_wait_ms <= 0)
        return false;
    if (ftc_ctl_committed(s->ctl, &c0, &cg) != 0) {
        FTC_WARN("run", "the committed step could not be read (%s): asking for the grow round "
                 "without waiting for a checkpoint boundary", ftc_ctl_errstr(s->ctl));
        return false;
    }
    uint64_t t0 = ftc_now_ns() / 1000000u, next_look = 0; /* monotonic ms */
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)s->o->grow_wait_ms);
    while (!ftc_deadline_expired(d) && !ftc__stopping(s)) {
        /* every 250 ms: is anybody still running generation gen? (the
         * heartbeats of a job killed just before expire within their TTL) */
        if (ftc_now_ns() / 1000000u >= next_look) {
            next_look = ftc_now_ns() / 1000000u + 250;
            if (!ftc__gen_running(s, gen)) {
                FTC_INFO("run", "generation %" PRIu64 " has no live member: joining at once "
                         "(no checkpoint boundary to wait for)", gen);
                return false;
            }
        }
        ftc_sleep_ms(5);
        uint64_t g;
        bool open = false;
        ftc_err_t e = {0};
        if (ftc_rdzv_state(ftc_ctl_redis(s->ctl), job, &g, &open, &e) == 0 && open) {
            FTC_INFO("run", "a round is open (generation %" PRIu64 " ended while this node "
                     "waited for a checkpoint boundary): joining it", g);
            return true;
        }
        if (ftc_ctl_committed(s->ctl, &c, &cg) == 0 && c > c0) {
            FTC_INFO("run", "joining at the checkpoint boundary: step %" PRId64
                     " committed %" PRIu64 " ms after this node arrived", c,
                     ftc_now_ns() / 1000000u - t0);
            return false;
        }
    }
    FTC_INFO("run", "joining without a checkpoint boundary: no commit in %d ms (newest %" PRId64
             ")", s->o->grow_wait_ms, c0);
    return false;
}

/* HMGET of the job's hash `suffix` in one read (the fields of one moment):
 * field i's value, NUL-terminated, in out[i] ("" when missing; cut to 255
 * bytes). 0, or -1 when Redis gave no array of nf values. */
static int ftc__hmget(ftc__sup_t *s, const char *suffix, int nf, const char *const *fields,
                      char (*out)[256])
{
    char key[256];
    const char *argv[8] = {"HMGET", ftc_ctl_key(s->ctl, suffix, key, sizeof key)};
    for (int i = 0; i < nf && i < 6; i++)
        argv[2 + i] = fields[i];
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    size_t n = 0;
    int rc = -1;
    if (nf <= 6 && ftc_redis_cmd(ftc_ctl_redis(s->ctl), true, &rep, 2 + nf, argv, NULL) == 0 &&
        ftc_redis_want_array(rep, "HMGET", nf, &el, &n, NULL) == 0) {
        for (int i = 0; i < nf; i++) {
            const char *v = NULL;
            size_t vl = 0;
            out[i][0] = 0;
            if (ftc_redis_want_str(el[i], fields[i], &v, &vl, NULL) == 0 && v)
                snprintf(out[i], 256, "%.*s", (int)(vl < 255 ? vl : 255), v);
        }
        rc = 0;
    }
    ftc_redis_reply_free(rep);
    return rc;
}

/* Generation gen's member count (the gen hash's `nodes`, written when its
 * round closed), or -1 when it is not the current one or cannot be read. */
static int ftc__gen_nodes(ftc__sup_t *s, uint64_t gen)
{
    static const char *const f[] = {"gen", "nodes"};
    char v[2][256];
    uint64_t g = 0, nodes = 0;
    /* whole numbers (ftc_parse_u64): strtoull/atoi took "5x" for 5 */
    if (ftc__hmget(s, "gen", 2, f, v) != 0 || ftc_parse_u64(v[0], &g) || g != gen ||
        ftc_parse_u64(v[1], &nodes) || nodes > FTC_LAYOUT_MAX_NODES)
        return -1;
    return (int)nodes;
}

/* Whether every member of generation gen (the current one) finished: the job
 * is done (what a hot spare waits for). */
static bool ftc__gen_done(ftc__sup_t *s, uint64_t gen)
{
    int nodes = ftc__gen_nodes(s, gen);
    if (nodes <= 0)
        return false;
    char key[256], suffix[64];
    snprintf(suffix, sizeof suffix, "done:%" PRIu64, gen);
    ftc_ctl_key(s->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    long long n = 0;
    bool done = ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "SCARD", key, NULL) == 0 &&
                ftc_redis_want_int(rep, "SCARD done", &n, NULL) == 0 && n >= nodes;
    ftc_redis_reply_free(rep);
    return done;
}

/* Whether node's heartbeat key exists now (false on a Redis error too). */
static bool ftc__hb_exists(ftc__sup_t *s, const char *node)
{
    char key[256], suffix[FTC_CTL_NODE_MAX + 8];
    snprintf(suffix, sizeof suffix, "hb:%s", node);
    ftc_ctl_key(s->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    long long n = 0;
    bool yes = ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "EXISTS", key, NULL) == 0 &&
               ftc_redis_want_int(rep, "EXISTS", &n, NULL) == 0 && n == 1;
    ftc_redis_reply_free(rep);
    return yes;
}

/* Whether member `who` (round index) has lost its supervisor: its lease
 * (ftc:{J}:sup:NODE) has been missing for FTC__SUP_TTL_MS on every look,
 * while ours was there (we are in touch with Redis, and Redis did not just
 * lose its keys). Only the member waited for is looked up (a GET of its lease
 * and an EXISTS of ours in one round trip, every 200 ms at most: *next_ms),
 * not every member: each node of a large job does this while it waits.
 * looks (one per member) carries the looks over: since when the lease is
 * missing, and its value while it was there (its supervisor). */
static bool ftc__sup_lost(ftc__sup_t *s, int who, ftc__sup_look_t *looks, uint64_t *next_ms)
{
    uint64_t now = ftc_now_ns() / 1000000u;
    if (now < *next_ms || who < 0 || who >= s->round.nodes || !looks ||
        !strcmp(s->round.members[who], s->node_id))
        return false;
    *next_ms = now + 200;
    ftc__sup_look_t *l = &looks[who];
    char keys[2][256], suffix[FTC_CTL_NODE_MAX + 8];
    snprintf(suffix, sizeof suffix, "sup:%s", s->round.members[who]);
    ftc_ctl_key(s->ctl, suffix, keys[0], sizeof keys[0]);
    snprintf(suffix, sizeof suffix, "sup:%s", s->node_id);
    ftc_ctl_key(s->ctl, suffix, keys[1], sizeof keys[1]);
    const char *av0[] = {"GET", keys[0]}, *av1[] = {"EXISTS", keys[1]};
    const char **const avs[] = {av0, av1};
    const int ac[] = {2, 2};
    ftc_redis_reply_t *reps[2] = {NULL, NULL};
    const char *v = NULL;
    size_t vl = 0;
    long long ours = 0;
    int got = -1; /* theirs: 0 its value, FTC_ENOENT missing */
    bool ok = ftc_redis_pipeline(ftc_ctl_redis(s->ctl), true, 2, ac, avs, NULL, reps) == 0 &&
              ((got = ftc_redis_want_str(reps[0], "GET sup", &v, &vl, NULL)) == 0 ||
               got == FTC_ENOENT) &&
              ftc_redis_want_int(reps[1], "EXISTS", &ours, NULL) == 0 && ours == 1;
    bool theirs = !ok || got == 0;
    if (ok && got == 0 && v && vl < sizeof l->seen) {
        memcpy(l->seen, v, vl);
        l->seen[vl] = 0;
    }
    ftc_redis_reply_free(reps[0]);
    ftc_redis_reply_free(reps[1]);
    if (theirs) { /* alive, or no evidence now (Redis away or restarted empty) */
        l->gone_since = 0;
        return false;
    }
    if (!l->gone_since) {
        l->gone_since = now;
        l->gone_wall = ftc_wall_ms();
    }
    return now - l->gone_since >= FTC__SUP_TTL_MS;
}

/* The newest generation in which node's agent published its fabric address
 * (ftc:{J}:fabric; its agent of a generation does so as it starts, before
 * it joins), 0 when none can be read (*failed set when the hash could not
 * be read: Redis away or an error reply). */
static uint64_t ftc__fabric_gen(ftc__sup_t *s, const char *node, bool *failed)
{
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    size_t n = ftc__fabric_hash(s, &rep, &el, failed);
    uint64_t gen = 0;
    for (size_t k = 0; k + 1 < n; k += 2) {
        ftc__fabric_rec_t r;
        if (ftc__fabric_entry(el, k, &r) && r.has_gen && !strcmp(r.node_id, node) && r.gen > gen)
            gen = r.gen;
    }
    ftc_redis_reply_free(rep);
    return gen;
}

/* Member `who`'s supervisor lease expired (ftc__sup_lost): its node_lost
 * event, once per node incarnation, as the detectors report a heartbeat's
 * expiry (ftc_ctl_report_job, hash failures:job). A node killed before its
 * agent ran never had a heartbeat, so no detector reports it, and without
 * this the event stream would not say why the generation ended. The id:
 *  - when its agent of this supervisor ran (its member record is there, with
 *    the pid of the lease's supervisor, the agent being a thread of it, and
 *    a joined_ms not before that supervisor's start, both of this host's
 *    clock; or,
 *    the lease never seen, with its fabric entry of this generation): the
 *    detectors' id node_lost:NODE:JOINED_MS, so that their report of its
 *    heartbeat's expiry and this one are one event, whichever comes first;
 *  - else (no record, or one a previous incarnation left: its own loss is
 *    reported by the detectors under its own id): node_lost:NODE:sup@GEN.
 *    A supervisor is lost while its generation starts at most once (it is
 *    never a member of a later round), and every survivor that sees it
 *    computes the same id; '@' is in no node id, so no detector's id is it.
 * Best effort: a Redis error loses the event (the round opens anyway). One
 * reading the member record or the fabric hash skips it: taken for "no
 * record", it published a node_lost:NODE:sup@GEN beside the detectors' own
 * event of an agent that had joined (they report its heartbeat's expiry). */
static void ftc__report_sup_lost(ftc__sup_t *s, int who, const ftc__sup_look_t *look)
{
    const char *node = s->round.members[who];
    char key[256];
    ftc_ctl_key(s->ctl, "members", key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    const char *v = NULL;
    size_t vl = 0;
    ftc_ctl_member_rec_t rec;
    bool has_rec = false;
    ftc_err_t err = {0};
    int got = ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "HGET", key, node, NULL);
    if (got != 0)
        ftc_err_set(&err, got, "%s", ftc_redis_errstr(ftc_ctl_redis(s->ctl)));
    else
        got = ftc_redis_want_str(rep, "HGET members", &v, &vl, &err);
    if (got == 0 && v && vl < 512) {
        char buf[512];
        memcpy(buf, v, vl);
        buf[vl] = 0;
        has_rec = ftc_ctl_member_parse(buf, &rec, NULL) == 0 && rec.joined_ok;
    }
    ftc_redis_reply_free(rep);
    if (got != 0 && got != FTC_ENOENT) {
        FTC_WARN("run", "generation %" PRIu64 ": the supervisor lease of %s expired, but its "
                 "member record cannot be read (%s): no node_lost event from this supervisor "
                 "(the detectors report the loss of an agent that joined)", s->gen, node,
                 err.msg);
        return;
    }
    char host[96] = "", pidw[32] = "", startw[32] = "";
    const char *p = look->seen;
    int64_t pid = 0, start = 0;
    bool seen = ftc_next_word(&p, host, sizeof host) && ftc_next_word(&p, pidw, sizeof pidw) &&
                ftc_parse_int(pidw, 1, INT32_MAX, &pid) == 0;
    if (seen && ftc_next_word(&p, startw, sizeof startw) &&
        ftc_parse_int(startw, 0, INT64_MAX, &start) != 0)
        start = 0; /* (a lease "host pid" of an older ftc: the pid alone) */
    /* the pid alone took a previous incarnation's record for this one's when
     * both processes had the same pid (a container restarted: its entry
     * point's pid again): its loss was merged into that one's event */
    bool fabric_failed = false;
    bool agent_ran = has_rec && (seen ? rec.pid == pid && rec.joined_ms >= (uint64_t)start
                                      : ftc__fabric_gen(s, node, &fabric_failed) >= s->gen);
    if (fabric_failed) {
        FTC_WARN("run", "generation %" PRIu64 ": the supervisor lease of %s expired, but the "
                 "fabric hash cannot be read (%s): no node_lost event from this supervisor "
                 "(the detectors report the loss of an agent that joined)", s->gen, node,
                 ftc_redis_errstr(ftc_ctl_redis(s->ctl)));
        return;
    }
    char id[160], detail[384], sup[160];
    if (seen)
        snprintf(sup, sizeof sup, " (supervisor pid %" PRId64 " on %s)", pid, host);
    else
        snprintf(sup, sizeof sup, " (its supervisor never seen alive by %s)", s->node_id);
    if (agent_ran) {
        snprintf(id, sizeof id, "node_lost:%s:%s", node, rec.joined);
        snprintf(detail, sizeof detail, "supervisor lease of %s expired%s while generation "
                 "%" PRIu64 " started; its agent had joined (incarnation %s)", node, sup, s->gen,
                 rec.joined);
    } else {
        snprintf(id, sizeof id, "node_lost:%s:sup@%" PRIu64, node, s->gen);
        snprintf(detail, sizeof detail, "supervisor lease of %s expired before its agent's "
                 "heartbeat began%s, while generation %" PRIu64 " started", node, sup, s->gen);
    }
    uint64_t t_fault = look->gone_wall > FTC__SUP_TTL_MS ? look->gone_wall - FTC__SUP_TTL_MS : 0;
    ftc_ctl_event_t e = {.kind = "node_lost", .node = node, .rank = -1, .generation = s->gen,
                         .step = -1, .detail = detail, .t_fault_ms = t_fault,
                         .t_detect_ms = ftc_wall_ms()};
    bool first = false;
    if (ftc_ctl_report_job(s->ctl, id, &e, &first) != 0)
        FTC_WARN("run", "generation %" PRIu64 ": cannot publish the node_lost event of %s: %s",
                 s->gen, node, ftc_ctl_errstr(s->ctl));
    else if (first)
        FTC_INFO("run", "generation %" PRIu64 ": node_lost %s published: %s", s->gen, node,
                 detail);
    else
        FTC_INFO("run", "generation %" PRIu64 ": node_lost %s (%s) was published already",
                 s->gen, node, id);
}

typedef struct ftc__lost_scan {
    ftc__sup_t *s;
    int member; /* the lost member's round index, -1 = none */
    char *why;
    size_t cap;
} ftc__lost_scan_t;

static void ftc__on_lost(void *arg, const ftc_status_event_t *e)
{
    ftc__lost_scan_t *sc = arg;
    ftc__sup_t *s = sc->s;
    if (sc->member >= 0 || strcmp(e->kind, "node_lost") || !strcmp(e->node, s->node_id))
        return;
    for (int i = 0; i < s->round.prev_nodes && i < s->round.nodes; i++)
        if (!strcmp(s->round.members[i], e->node) && !ftc__hb_exists(s, e->node)) {
            sc->member = i;
            snprintf(sc->why, sc->cap, "node_lost: %s", e->detail);
        }
}

/* While this generation starts: whether a member that was a member of the
 * previous generation too (its agent ran through the round, so it has a
 * member record and a heartbeat) was lost — a node_lost event for it since
 * before the round (s->lost_after), its heartbeat gone now — after it
 * registered: it will never start its agent or publish MASTER_ADDR, and
 * waiting for it until --join-timeout-ms only delays the next round. (A
 * newcomer's node_lost is its previous incarnation's, which a detector may
 * report while the newcomer's agent starts: not counted.) Looked up every
 * 100 ms at most (*next_ms); *member = its round index, why = the event. */
static bool ftc__member_lost(ftc__sup_t *s, uint64_t *next_ms, int *member, char *why,
                             size_t cap)
{
    uint64_t now = ftc_now_ns() / 1000000u;
    *member = -1;
    if (now < *next_ms || !s->lost_after[0])
        return false;
    *next_ms = now + 100;
    ftc__lost_scan_t sc = {s, -1, why, cap};
    for (int k = 0; k < 16 && sc.member < 0; k++) /* 64 events a read, bounded */
        if (ftc_events_read(s->ctl, s->lost_after, sizeof s->lost_after, 64, 0, ftc__on_lost,
                            &sc) < 64)
            break;
    *member = sc.member;
    return sc.member >= 0;
}

/* Waits until every member's agent of this generation heartbeats (its
 * detector is up) and has published its fabric address: ranks then find
 * their peers, and a node_lost that a freshly started detector reports for a
 * member whose agent was still starting (a replacement node) falls before
 * this generation's events. */
static int ftc__wait_agents(ftc__sup_t *s, ftc_err_t *err)
{
    ftc__gen_wait_t w;
    ftc__gen_wait_init(s, &w);
    int rc = 0;
    for (;;) {
        int missing = -1, stale = -1;
        if (!ftc__fabric_current(s, &stale))
            missing = stale;
        for (int i = 0; i < s->round.nodes && missing < 0; i++)
            if (!ftc__hb_exists(s, s->round.members[i]))
                missing = i;
        if (missing < 0)
            break;
        char waiting[256];
        snprintf(waiting, sizeof waiting, "the agent of member %s to come up",
                 s->round.members[missing]);
        if ((rc = ftc__gen_wait_step(s, &w, missing, waiting, err)) != 0)
            break;
        ftc_sleep_ms(20);
    }
    free(w.sup);
    return rc;
}

/* The stream's last id, so this generation reads only newer events. */
static void ftc__events_mark(ftc__sup_t *s)
{
    char key[256];
    ftc_ctl_key(s->ctl, "events", key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    snprintf(s->events_after, sizeof s->events_after, "0");
    if (ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "XREVRANGE", key, "+", "-", "COUNT",
                       "1", NULL) == 0 &&
        rep) {
        ftc_redis_reply_t **e = NULL, **f = NULL;
        size_t ne = 0, nf = 0;
        const char *v;
        size_t len;
        if (ftc_redis_want_array(rep, "XREVRANGE", 1, &e, &ne, NULL) == 0 &&
            ftc_redis_want_array(e[0], "XREVRANGE entry", 2, &f, &nf, NULL) == 0 &&
            ftc_redis_want_str(f[0], "XREVRANGE id", &v, &len, NULL) == 0 && len < 32) {
            memcpy(s->events_after, v, len);
            s->events_after[len] = 0;
        }
    }
    ftc_redis_reply_free(rep);
}

typedef struct ftc__ev_scan {
    ftc__sup_t *s;
    bool failed;
} ftc__ev_scan_t;

/* A node of this generation lost, or a rank of ours hung: the round failed.
 * (Rank exits are seen by their own supervisor through waitpid.) */
static void ftc__on_event(void *arg, const ftc_status_event_t *e)
{
    ftc__ev_scan_t *sc = arg;
    ftc__sup_t *s = sc->s;
    if (!strcmp(e->kind, "node_lost") && ftc__is_member(s, e->node) &&
        strcmp(e->node, s->node_id)) {
        /* A detector started for this generation may report the previous
         * incarnation of a replaced member (its record was never removed:
         * it was killed), and its event may reach the stream after this
         * generation's mark. A loss is a missing heartbeat: a member whose
         * heartbeat is there is the new incarnation, alive. */
        if (ftc__hb_exists(s, e->node)) {
            FTC_INFO("run", "generation %" PRIu64 ": ignoring node_lost of %s (%s): its "
                     "heartbeat is there (the loss of a previous incarnation)", s->gen, e->node,
                     e->detail);
            return;
        }
        snprintf(s->fail_reason, sizeof s->fail_reason, "node %s lost (%s)", e->node, e->detail);
        sc->failed = true;
    } else if (!strcmp(e->kind, "hang") && !strcmp(e->node, s->node_id)) {
        int local = -1;
        for (int l = 0; l < s->o->nproc; l++)
            if (s->rank_of[l] == e->rank)
                local = l;
        if (local >= 0 && s->pid[local] > 0) {
            FTC_WARN("run", "rank %d hangs (%s): killing pid %d", e->rank, e->detail,
                     (int)s->pid[local]);
            /* the hang event is the failure; this SIGKILL's exit is no second
             * one (it was a rank_exit, "killed by signal 9") */
            ftc__untell_rank(s, local);
            s->hung_pid[local] = s->pid[local]; /* the round's reason: the hang, not the kill */
            snprintf(s->hung_why[local], sizeof s->hung_why[local], "%s", e->detail);
            ftc__signal_rank(s, local, SIGKILL); /* its exit fails the round below */
        }
    }
}

/* ---- the recovery timeline ------------------------------------------------------------- */

/* Each phase of a recovery, as a log line and a `recovery` event (detail
 * "phase=P t_ms=WALL ms=SINCE_BEGIN [why=...]"; t_detect_ms = WALL), so an
 * operator (`ftc events`) and bench/bench_recover.c can read where the time
 * went. Phases: detected (the event, rank exit or new round that failed the
 * generation; "joined" for a node joining a running job), stopped (our
 * ranks reaped), rendezvous (the round closed), agent (the new generation's
 * agent started), started (the ranks forked: the recovery ends here for the
 * supervisor; the ranks' restore follows). Best effort: a Redis error only
 * loses the event. */
static void ftc__recovery_phase(ftc__sup_t *s, const char *phase, const char *why)
{
    if (!s->rec_t0)
        return;
    uint64_t now = ftc_wall_ms();
    char detail[256];
    snprintf(detail, sizeof detail, "phase=%s t_ms=%" PRIu64 " ms=%" PRIu64 "%s%.180s", phase, now,
             now - s->rec_t0, why ? " why=" : "", why ? why : "");
    FTC_INFO("run", "recovery, generation %" PRIu64 ": %s", s->gen, detail);
    ftc_ctl_event_t e = {.kind = "recovery", .node = s->node_id, .rank = -1,
                         .generation = s->gen, .step = -1, .detail = detail,
                         .t_detect_ms = now};
    ftc_ctl_event(s->ctl, &e);
    if (!strcmp(phase, "started"))
        s->rec_t0 = 0;
}

static void ftc__recovery_begin(ftc__sup_t *s, const char *phase, const char *why)
{
    s->rec_t0 = ftc_wall_ms();
    ftc__recovery_phase(s, phase, why);
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* The reason a joining node gives the round it opens (ftc:{J}:rdzv reason):
 * a generation ended by it is a grow, not a failure (torchrun does not count
 * membership changes against --max-restarts). */
#define FTC__GROW_WHY "grow: node "

/* Whether the open round after generation gen was opened for a grow (its
 * reason, read while it is open; false when it cannot be read: counted). */
static bool ftc__round_is_grow(ftc__sup_t *s, uint64_t gen)
{
    static const char *const f[] = {"round", "reason"};
    char v[2][256];
    uint64_t round = 0;
    return ftc__hmget(s, "rdzv", 2, f, v) == 0 && !ftc_parse_u64(v[0], &round) && round == gen &&
           strlen(v[1]) > strlen(FTC__GROW_WHY) &&
           !strncmp(v[1], FTC__GROW_WHY, strlen(FTC__GROW_WHY));
}

enum { FTC__DONE = 0, FTC__FAILED = 1, FTC__STOPPED = 2, FTC__NEW_ROUND = 3, FTC__CUT = 4 };

/* Whether the job's Redis answers a PING now (bounded by the connection's
 * command timeout). */
static bool ftc__redis_answers(ftc__sup_t *s)
{
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc_redis_cmdv(ftc_ctl_redis(s->ctl), true, &rep, "PING", NULL);
    ftc_redis_reply_free(rep);
    return rc == 0;
}

/* The job is done (every node of the generation is in done_key): says so in
 * done_key:seen, and when this process runs the job's embedded Redis
 * (o->hosts_redis) waits until every node of the generation has seen it too
 * (bounded: FTC__DONE_SEEN_MS, or a stop signal), so that Redis, stopped
 * when this process exits, outlives the other nodes' last look at done_key:
 * without it a node one poll behind lost Redis and waited out its
 * --join-timeout-ms before giving up as cut off. */
#define FTC__DONE_SEEN_MS 15000
static void ftc__done_seen(ftc__sup_t *s, const char *done_key, volatile sig_atomic_t *stop)
{
    char seen_key[300];
    snprintf(seen_key, sizeof seen_key, "%s:seen", done_key);
    ftc_redis_t *r = ftc_ctl_redis(s->ctl);
    ftc_redis_reply_t *rep = NULL;
    ftc_redis_cmdv(r, true, &rep, "SADD", seen_key, s->node_id, NULL);
    ftc_redis_reply_free(rep);
    rep = NULL;
    ftc_redis_cmdv(r, true, &rep, "EXPIRE", seen_key, "3600", NULL);
    ftc_redis_reply_free(rep);
    if (!s->o->hosts_redis)
        return;
    ftc_deadline_t d = ftc_deadline_in_ms(FTC__DONE_SEEN_MS);
    long long n = 0;
    while (!(stop && *stop) && !ftc_deadline_expired(d)) {
        rep = NULL;
        int rc = ftc_redis_cmdv(r, true, &rep, "SCARD", seen_key, NULL);
        if (rc == 0 && ftc_redis_want_int(rep, "seen", &n, NULL) == 0 && n >= s->round.nodes) {
            ftc_redis_reply_free(rep);
            return;
        }
        ftc_redis_reply_free(rep);
        ftc_sleep_ms(10);
    }
    FTC_WARN("run", "job done, but only %lld of the %d nodes saw it within %d ms: stopping the "
             "job's Redis anyway",
             n, s->round.nodes, FTC__DONE_SEEN_MS);
}

/* Watches one generation until it ends. */
static int ftc__watch(ftc__sup_t *s, volatile sig_atomic_t *stop, ftc_err_t *err)
{
    const ftc_run_options_t *o = s->o;
    bool done_marked = false;
    char done_key[256], suffix[64];
    snprintf(suffix, sizeof suffix, "done:%" PRIu64, s->gen);
    ftc_ctl_key(s->ctl, suffix, done_key, sizeof done_key);
    ftc_redis_t *r = ftc_ctl_redis(s->ctl);
    uint64_t last_poll = 0;
    s->done_marked = false;
    s->redis_ok_ms = ftc_now_ns() / 1000000u;
    for (;;) {
        if (stop && *stop)
            return FTC__STOPPED;
        /* our ranks, then the orphans they left (an orphan's exit is not its rank's) */
        int exited_ok = 0;
        for (int l = 0; l < o->nproc; l++) {
            if (s->pid[l] > 0) {
                int st;
                pid_t p = ftc_fabric_reap(s->pid[l], &st, WNOHANG);
                if (p == s->pid[l]) {
                    ftc__tell_exit(s, l, p, st);
                    ftc_filestore_rank_exited(s->files, s->pid[l], st);
                    s->pid[l] = 0;
                    ftc__group_check(s, l);
                    s->status[l] = st;
                    int rank = s->rank_of[l];
                    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                        FTC_INFO("run", "rank %d finished", rank);
                    } else {
                        if (s->hung_pid[l] == p)
                            snprintf(s->fail_reason, sizeof s->fail_reason,
                                     "rank %d (node %s) hung and was killed: %.160s", rank,
                                     s->node_id, s->hung_why[l]);
                        else if (WIFSIGNALED(st))
                            snprintf(s->fail_reason, sizeof s->fail_reason,
                                     "rank %d (node %s) was killed by signal %d", rank,
                                     s->node_id, WTERMSIG(st));
                        else
                            snprintf(s->fail_reason, sizeof s->fail_reason,
                                     "rank %d (node %s) exited with status %d", rank, s->node_id,
                                     WEXITSTATUS(st));
                        FTC_WARN("run", "%s", s->fail_reason);
                        return FTC__FAILED;
                    }
                }
            }
            if (s->pid[l] == 0 && WIFEXITED(s->status[l]) && WEXITSTATUS(s->status[l]) == 0)
                exited_ok++;
        }
        ftc__reap_orphans(s);
        ftc__agent_watch_answers(s);
        uint64_t now = ftc_now_ns() / 1000000u;
        if (now - last_poll >= 50) {
            last_poll = now;
            if (s->files)
                ftc_filestore_poll(s->files);
            /* another supervisor opened a new round */
            uint64_t g = 0;
            bool open = false;
            ftc_err_t e2 = {0};
            int st_rc = ftc_rdzv_state(r, o->job, &g, &open, &e2);
            if (st_rc == 0 && (g > s->gen || open)) {
                s->grow_round = open && g == s->gen && ftc__round_is_grow(s, s->gen);
                return FTC__NEW_ROUND;
            }
            /* cut off (a link down, a partition): our heartbeat expired long
             * ago and the others went on; after as long as a rendezvous may
             * take (ranks train on through shorter Redis outages), give up */
            uint64_t t = ftc_now_ns() / 1000000u;
            if (st_rc == 0)
                s->redis_ok_ms = t;
            else if (t - s->redis_ok_ms > (uint64_t)o->join_timeout_ms) {
                snprintf(s->fail_reason, sizeof s->fail_reason,
                         "no answer from the job's Redis for %" PRIu64 " ms (%s): this node is "
                         "cut off",
                         t - s->redis_ok_ms, e2.msg);
                FTC_WARN("run", "%s", s->fail_reason);
                return FTC__CUT;
            }
            if (o->in_process && ftc__inproc_left(s)) {
                FTC_WARN("run", "%s", s->fail_reason);
                return FTC__FAILED;
            }
            /* failures elsewhere */
            ftc__ev_scan_t sc = {s, false};
            ftc_events_read(s->ctl, s->events_after, sizeof s->events_after, 64, 0,
                            ftc__on_event, &sc);
            if (sc.failed) {
                FTC_WARN("run", "%s", s->fail_reason);
                return FTC__FAILED;
            }
            /* everyone finished? */
            if (exited_ok == o->nproc) {
                ftc_redis_reply_t *rep = NULL;
                if (!done_marked &&
                    ftc_redis_cmdv(r, true, &rep, "SADD", done_key, s->node_id, NULL) == 0)
                    done_marked = s->done_marked = true;
                ftc_redis_reply_free(rep);
                rep = NULL;
                long long n = 0;
                if (done_marked && ftc_redis_cmdv(r, true, &rep, "SCARD", done_key, NULL) == 0 &&
                    ftc_redis_want_int(rep, "done", &n, NULL) == 0 && n >= s->round.nodes) {
                    ftc_redis_reply_free(rep);
                    ftc__done_seen(s, done_key, stop);
                    return FTC__DONE;
                }
                ftc_redis_reply_free(rep);
            }
        }
        ftc_sleep_ms(10);
    }
    (void)err;
}

/* Opens the round after this generation (fenced: a no-op when it is open
 * already or the generation moved on). Retried while Redis does not answer,
 * for as long as a rendezvous may take (or a stop signal): a request lost
 * to an outage left this node waiting in a round nobody opened, and the
 * others training on (nothing else told them). */
static void ftc__request_round(ftc__sup_t *s, const char *why)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)s->o->join_timeout_ms);
    for (int tries = 1;; tries++) {
        bool opened = false;
        ftc_err_t e2 = {0};
        int rc = ftc_rdzv_request(ftc_ctl_redis(s->ctl), s->o->job, s->gen, why, &opened, &e2);
        if (rc == 0 || rc == FTC_ESTALE || rc == FTC_EPROTO || rc == FTC_EAUTH) {
            if (tries > 1)
                FTC_INFO("run", "generation %" PRIu64 ": the next round %s after %d tries",
                         s->gen, rc ? "was not needed" : opened ? "opened" : "was open", tries);
            return;
        }
        if (tries == 1)
            FTC_WARN("run", "generation %" PRIu64 ": cannot open the next round yet (%s): "
                     "retrying for up to %d ms", s->gen, e2.msg, s->o->join_timeout_ms);
        if (ftc_deadline_expired(d) || ftc__stopping(s))
            return;
        ftc_sleep_ms(100);
    }
}

/* This generation could not start (why in err): asks for the next round,
 * and says whether --max-restarts is used up (true: give up). A round that
 * a node joining opened meanwhile (a grow) is not a failure. */
static bool ftc__round_failed(ftc__sup_t *s, const ftc_err_t *err)
{
    snprintf(s->fail_reason, sizeof s->fail_reason, "%s", err->msg);
    if (err->code == FTC_EAGAIN && ftc__round_is_grow(s, s->gen)) {
        FTC_INFO("run", "generation %" PRIu64 " ended before it started, for a node joining "
                 "(a grow): not counted against --max-restarts", s->gen);
        s->fail_reason[0] = 0;
        return false;
    }
    ftc__request_round(s, s->fail_reason);
    return ++s->failures > s->o->max_restarts;
}

int ftc_run_node(const ftc_run_options_t *o, volatile sig_atomic_t *stop, ftc_err_t *err)
{
    if (!o || !o->job || !o->dir || !o->argv || !o->argv[0] || o->nproc < 1 ||
        o->nproc > FTC__MAX_LOCAL || o->min_nodes < 1 || o->max_nodes < o->min_nodes ||
        o->node_index >= (uint32_t)o->max_nodes) {
        ftc_err_set(err, FTC_EINVAL,
                    "need a job, a binary, 1..%d ranks per node, 1 <= MIN <= MAX nodes "
                    "and a node index below MAX",
                    FTC__MAX_LOCAL);
        return 1;
    }
    int64_t reap_ms = FTC__KILL_REAP_MS;
    const char *rv = getenv("FTC_RUN_KILL_REAP_MS");
    if (rv && *rv && ftc_parse_int(rv, 1, FTC__KILL_REAP_MAX_MS, &reap_ms) != 0) {
        ftc_err_set(err, FTC_EINVAL, "FTC_RUN_KILL_REAP_MS=%s: not a whole number of ms in "
                    "1..%d", rv, FTC__KILL_REAP_MAX_MS);
        return 1;
    }
    int64_t gave_up_max = FTC__MAX_LOCAL;
    const char *gv = getenv("FTC_RUN_GAVE_UP_MAX");
    if (gv && *gv && ftc_parse_int(gv, 1, FTC__MAX_LOCAL, &gave_up_max) != 0) {
        ftc_err_set(err, FTC_EINVAL, "FTC_RUN_GAVE_UP_MAX=%s: not a whole number in 1..%d (a "
                    "test knob: unset it)", gv, FTC__MAX_LOCAL);
        return 1;
    }
    ftc__sup_t *s = calloc(1, sizeof *s);
    if (!s) {
        ftc_err_set(err, FTC_ENOMEM, "out of memory");
        return 1;
    }
    s->o = o;
    s->kill_reap_ms = (uint64_t)reap_ms;
    s->gave_up_max = (int)gave_up_max;
    s->stop = stop;
    ftc__subreaper_begin(s);
    ftc__stop_flag = stop;
    atomic_store(&ftc__abort, 0);
    pthread_t wd;
    atomic_store(&ftc__wd_stop, false);
    bool wd_started = pthread_create(&wd, NULL, ftc__watchdog, NULL) == 0;
    if (o->node_id && *o->node_id)
        snprintf(s->node_id, sizeof s->node_id, "%s", o->node_id);
    else
        snprintf(s->node_id, sizeof s->node_id, "node%u", o->node_index);
    int ec = 1;
    bool spare_done = false; /* a hot spare that the job never needed: nothing of its to clean */
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ftc_redis_t *r = ftc_redis_connect(&o->redis, &ro, err);
    if (!r)
        goto out;
    s->ctl = ftc_ctl_create(r, o->job, err);
    if (!s->ctl) {
        ftc_redis_close(r);
        goto out;
    }
    ftc__suplease_start(&s->lease, &o->redis, s->ctl, s->node_id, o->host);
    if (o->ckpt_dir) {
        s->files = ftc_filestore_create(o->job, o->node_index, s->node_id, &o->redis,
                                        o->agent.redundancy.kind == FTC_RED_REPLICA &&
                                                o->agent.redundancy.copies > 0
                                            ? o->agent.redundancy.copies
                                            : 1,
                                        o->agent.provider, err);
        if (!s->files)
            goto out;
        ftc_filestore_limits_t lim = FTC_FILESTORE_LIMITS_INIT;
        if (o->ckpt_dir_max_bytes > 0)
            lim.max_bytes = o->ckpt_dir_max_bytes;
        if (o->ckpt_dir_quiet_ms >= 0)
            lim.quiet_ms = o->ckpt_dir_quiet_ms;
        if (o->ckpt_dir_busy_max_ms >= 0)
            lim.busy_max_ms = o->ckpt_dir_busy_max_ms;
        if (ftc_filestore_set_limits(s->files, &lim, err) != 0)
            goto out;
    }
    ftc_rdzv_options_t rdo = FTC_RDZV_OPTIONS_INIT;
    rdo.job = o->job;
    rdo.node_id = s->node_id;
    rdo.min_nodes = o->min_nodes;
    rdo.max_nodes = o->max_nodes;
    rdo.settle_ms = o->settle_ms;
    /* a survivor stops its ranks (up to --grace-ms) before it registers: a
     * spare or newcomer does not take its place meanwhile */
    rdo.survivor_wait_ms = o->grace_ms + o->settle_ms;
    for (;;) {
        if (stop && *stop) {
            ec = 1;
            ftc_err_set(err, FTC_ECANCELED, "stopped by a signal");
            break;
        }
        /* 1. rendezvous. A node that arrives while the job runs (a repaired
         * node, a replacement) opens a round itself: in restart mode the job
         * grows at once. */
        ftc_redis_t *rc_r = ftc_ctl_redis(s->ctl);
        ftc_rdzv_round_free(&s->round);
        if (s->gen == 0) {
            uint64_t g = 0;
            bool open = false;
            if (ftc_rdzv_state(rc_r, o->job, &g, &open, err))
                break;
            if (g > 0)
                ftc__recovery_begin(s, "joined", "a running job");
            if (g > 0 && open)
                FTC_INFO("run", "a round is open (generation %" PRIu64 " ended): joining it", g);
            /* (a round opened while it waited, by a failure: join that one) */
            if (g > 0 && !open && !ftc__grow_boundary(s, o->job, g)) {
                if (ftc__stopping(s)) { /* not a grow round for a node going away */
                    ftc_err_set(err, FTC_ECANCELED, "stopped by a signal");
                    break;
                }
                /* a running job that has its MAX nodes: a grow round would
                 * only interrupt it (the members come first), so wait as a
                 * hot spare for the next round (a failure's) */
                int gn = ftc__gen_nodes(s, g);
                if (gn >= o->max_nodes && ftc__gen_running(s, g)) {
                    FTC_INFO("run", "generation %" PRIu64 " runs on %d nodes, --nnodes MAX %d: "
                             "this node waits as a hot spare for the next round", g, gn,
                             o->max_nodes);
                    s->spare = true;
                    s->rec_t0 = 0;
                } else {
                    bool opened = false;
                    char why[128];
                    snprintf(why, sizeof why, FTC__GROW_WHY "%s joins", s->node_id);
                    int rq = ftc_rdzv_request(rc_r, o->job, g, why, &opened, err);
                    if (rq && rq != FTC_ESTALE)
                        break;
                    FTC_INFO("run", "generation %" PRIu64 ": %s; joining it (at most %d ms)", g,
                             rq       ? "it ended meanwhile, a round follows"
                             : opened ? "this node opened the grow round"
                                      : "a round was open already",
                             o->join_timeout_ms);
                }
            }
            s->gen = g;
        }
        /* where a member's loss is looked for until its generation runs: the
         * last watch's position (a loss after it, even during the round), or
         * the stream's end for a node that comes from elsewhere */
        if (!s->cursor_kept)
            ftc__events_mark(s);
        s->cursor_kept = false;
        snprintf(s->lost_after, sizeof s->lost_after, "%s", s->events_after);
        /* a spare looks every 2 s (at most) whether the job is done */
        bool spare = s->spare;
        uint64_t jt = (uint64_t)o->join_timeout_ms;
        ftc_deadline_t d = ftc_deadline_in_ms(spare && jt > 2000 ? 2000 : jt);
        int rc = ftc_rdzv_join(rc_r, &rdo, s->gen, &s->round, d, &ftc__abort, err);
        if (rc && ftc__stopping(s)) {
            ftc_err_set(err, FTC_ECANCELED, "stopped by a signal");
            break;
        }
        if (rc == FTC_ESTALE) { /* the generation moved on while we were away */
            s->gen = 0;
            s->spare = false;
            continue;
        }
        if (rc == FTC_ETIMEDOUT && spare) { /* spares wait as long as the job runs */
            if (ftc__gen_done(s, s->gen)) {
                FTC_INFO("run", "generation %" PRIu64 " finished the job: this hot spare was "
                         "not needed", s->gen);
                spare_done = true;
                ec = 0;
                break;
            }
            if (!ftc__gen_running(s, s->gen)) { /* nobody is left to open the next round */
                char why[160];
                snprintf(why, sizeof why, "generation %" PRIu64 " has no live member: spare %s "
                         "takes over", s->gen, s->node_id);
                FTC_WARN("run", "%s", why);
                bool opened = false;
                ftc_err_t e2 = {0};
                ftc_rdzv_request(rc_r, o->job, s->gen, why, &opened, &e2);
                s->spare = false; /* a joiner now: fewer than MIN nodes end it (a timeout) */
            }
            continue;
        }
        if (rc)
            break;
        s->gen = s->round.generation;
        s->spare = s->round.index < 0;
        if (s->round.index < 0) {
            FTC_INFO("run", "generation %" PRIu64 ": %d nodes, this node is a hot spare",
                     s->gen, s->round.nodes);
            ftc__stop_ranks(s); /* in-process survivors of a node that became a spare */
            continue;
        }
        if (ftc__plan(s, err)) {
            FTC_ERROR("run", "generation %" PRIu64 ": no layout: %s", s->gen, err->msg);
            break;
        }
        FTC_INFO("run", "generation %" PRIu64 ": node %d of %d, world %d", s->gen,
                 s->round.index, s->round.nodes, s->world);
        ftc__recovery_phase(s, "rendezvous", NULL);
        if (ftc_rdzv_set_world(rc_r, o->job, s->gen, (uint32_t)s->world, err) &&
            err->code != FTC_ESTALE)
            break;
        /* 2. the agent of this generation (slots in /dev/shm survive) */
        if (ftc__agent_start(s, err))
            break;
        ftc__recovery_phase(s, "agent", NULL);
        /* 3. the replicated checkpoint directory, refilled before the ranks start */
        if (s->files &&
            ftc_filestore_restore(s->files, s->gen, (const char(*)[65])s->round.members,
                                  s->round.nodes, err))
            FTC_WARN("run", "FTC_CKPT_DIR: %s", ftc_err_str(err));
        /* 4. MASTER_ADDR:PORT and the ranks */
        char host[256];
        int port = 0;
        if (ftc__wait_agents(s, err)) {
            if (err->code == FTC_ECANCELED)
                break;
            FTC_WARN("run", "%s", err->msg);
            if (ftc__round_failed(s, err))
                break;
            continue;
        }
        ftc__events_mark(s);
        s->continued = 0;
        int mrc = ftc__master(s, host, sizeof host, &port, err);
        if (mrc == FTC_ECANCELED)
            break;
        if (mrc == FTC_EAGAIN || mrc == FTC_ETIMEDOUT) { /* the fixed MASTER_PORT is taken,
                                                           or rank 0's node is gone */
            FTC_ERROR("run", "generation %" PRIu64 ": %s", s->gen, err->msg);
            if (ftc__round_failed(s, err))
                break;
            continue;
        }
        if (mrc || ftc__start_ranks(s, host, port, err)) {
            ftc__stop_ranks(s);
            break;
        }
        if (s->files) { /* a rank that dies must not get its half-written files packed */
            pid_t pids[FTC__MAX_LOCAL];
            int np = 0;
            for (int l = 0; l < o->nproc && np < FTC__MAX_LOCAL; l++)
                if (s->pid[l] > 0)
                    pids[np++] = s->pid[l];
            ftc_err_t e2 = {0};
            if (ftc_filestore_watch_ranks(s->files, pids, np, &e2))
                FTC_WARN("run", "FTC_CKPT_DIR: %s", e2.msg);
        }
        if (o->in_process) {
            char why[96];
            snprintf(why, sizeof why, "in-process: %d ranks continued, %d started", s->continued,
                     o->nproc - s->continued);
            ftc__recovery_phase(s, "started", why);
        } else {
            ftc__recovery_phase(s, "started", NULL);
        }
        int how = ftc__watch(s, stop, err);
        s->cursor_kept = true;
        if (how == FTC__CUT) {
            ftc_err_set(err, FTC_EREDIS, "%s", s->fail_reason);
            ec = FTC_RUN_EXIT_CUT;
            break;
        }
        if (how == FTC__FAILED || how == FTC__NEW_ROUND)
            ftc__recovery_begin(s, "detected",
                                s->fail_reason[0] ? s->fail_reason : "a new round was opened");
        if (o->in_process && (how == FTC__FAILED || how == FTC__NEW_ROUND))
            ftc__inproc_leave(s); /* the survivors stay */
        else
            ftc__stop_ranks(s);
        ftc__recovery_phase(s, "stopped", NULL);
        if (how == FTC__DONE) {
            ec = 0;
            FTC_INFO("run", "generation %" PRIu64 ": every rank finished", s->gen);
            break;
        }
        if (how == FTC__STOPPED) {
            ftc_err_set(err, FTC_ECANCELED, "stopped by a signal");
            break;
        }
        if (how == FTC__FAILED || how == FTC__NEW_ROUND) {
            /* NEW_ROUND: usually already open (then a no-op) or the generation
             * moved on (FTC_ESTALE); but a Redis that lost its data reads as
             * generation 0 with its round open, and the request puts s->gen
             * back and opens the round after it, which this node then joins */
            ftc__request_round(s, how == FTC__FAILED ? s->fail_reason
                                                     : "a new round was opened");
        }
        if (how == FTC__NEW_ROUND && s->grow_round) {
            FTC_INFO("run", "generation %" PRIu64 " ended for a node joining the job (a grow): "
                     "not counted against --max-restarts (%d of %d used)", s->gen, s->failures,
                     o->max_restarts);
            s->grow_round = false;
            s->fail_reason[0] = 0;
            continue;
        }
        if (++s->failures > o->max_restarts) {
            ftc_err_set(err, FTC_EAGAIN,
                        "%d failed generations, more than --max-restarts %d; last: %s",
                        s->failures, o->max_restarts,
                        s->fail_reason[0] ? s->fail_reason : "another node failed");
            break;
        }
        FTC_WARN("run", "generation %" PRIu64 " failed (%s): restart %d of %d", s->gen,
                 s->fail_reason[0] ? s->fail_reason : "a new round was opened", s->failures,
                 o->max_restarts);
        s->fail_reason[0] = 0;
    }
out:
    /* a node that failed because Redis went out of its reach is cut off */
    if (ec == 1 && err && s->ctl && err->code != FTC_ECANCELED && !ftc__redis_answers(s)) {
        ftc_err_t e2 = *err;
        ftc_err_set(err, FTC_EREDIS, "the job's Redis does not answer: this node is cut "
                                     "off (%s)",
                    e2.msg);
        ec = FTC_RUN_EXIT_CUT;
    }
    ftc__stop_ranks(s);
    ftc__subreaper_end(s);
    /* A member of a generation that leaves it unfinished (a signal: a
     * preemption; ranks it could not start; --max-restarts used up) says so
     * by opening the next round: its agent leaves cleanly, so no node_lost
     * tells the others, who trained on in that generation and, their ranks
     * done, waited for its done mark forever. One try: a node going away
     * does not wait for Redis (a cut-off node's heartbeat expires anyway). */
    if (ec != 0 && ec != FTC_RUN_EXIT_CUT && s->ctl && s->gen > 0 && s->round.nodes > 0 &&
        s->round.index >= 0 && !s->done_marked) {
        char why[200];
        snprintf(why, sizeof why, "node %s leaves the job (%.150s)", s->node_id,
                 err && err->msg[0] ? err->msg : "it gave up");
        bool opened = false;
        ftc_err_t e2 = {0};
        if (ftc_rdzv_request(ftc_ctl_redis(s->ctl), o->job, s->gen, why, &opened, &e2) == 0 &&
            opened)
            FTC_INFO("run", "generation %" PRIu64 ": %s: opened the next round for the others",
                     s->gen, why);
    }
    /* not for a node cut off from Redis: the flush reads the commit record */
    ftc__agent_stop(&s->ag, ec != FTC_RUN_EXIT_CUT);
    ftc_filestore_destroy(s->files);
    if (ec == 0 && !o->keep_shm && !spare_done)
        ftc__forget_memory(s);
    ftc__suplease_stop(&s->lease);
    ftc_rdzv_round_free(&s->round);
    ftc_ctl_destroy(s->ctl);
    free(s);
    if (wd_started) {
        atomic_store(&ftc__wd_stop, true);
        pthread_join(wd, NULL);
    }
    ftc__stop_flag = NULL;
    return ec;
}
