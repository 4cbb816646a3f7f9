/*
 * detector.h — an agent's failure detector and early warning.
 *
 * Two threads per detector:
 *
 *  - the local watch never touches Redis, so a slow or dead Redis cannot
 *    delay it: rank exits (a pidfd per rank, reported the moment the process
 *    ends, or up to 1 s later when its status or a BYE read late decides
 *    whether it failed: ftc_detector_exit_status), hangs (no step progress
 *    for hang_factor x the median step time, at least hang_min_ms; before
 *    the first step of a rank's process, for start_ms from its start:
 *    ftc_detector_linked, or for that hang limit from when its process was
 *    seen stopped (state T); time the watch itself did not run, the agent
 *    paused, is not counted), and numerical trouble reported by the trainer
 *    (NaN/Inf, or a loss more than spike_sigma standard deviations above its
 *    recent window). It calls on_event at once and queues the event for
 *    publication.
 *  - the Redis session: heartbeats (SET PX every heartbeat_ms, TTL ttl_ms),
 *    the leader lease (campaign, renew, step down), node-loss detection from
 *    three sources: keyspace expiry notifications (every agent), a poll of
 *    the heartbeat deadline set every deadline_poll_ms (the leader: Redis
 *    expires keys lazily and by sampling, so at thousands of members an
 *    expiry event can come a second late; the poll pages through every
 *    overdue entry, so live nodes whose clocks run behind, whose past
 *    deadlines sort first, do not hide a loss, and confirms a page's
 *    candidates in one pipelined round trip), and a periodic scan of the
 *    members (the leader every scan_ms, others follower_scan_factor times
 *    less often; notifications are lost while a subscriber is away), straggler
 *    warnings (leader only: a node's step time above straggler_factor x the
 *    median for straggler_window scans), the generation (one that went back in
 *    Redis, an older copy after a restart or failover, is put back, never
 *    taken), and publication of queued events, each turn only until the next
 *    heartbeat is due (a queue refilled as fast as it drains does not hold
 *    back the heartbeats). Each failure becomes exactly one event in the stream
 *    (ftc_ctl_report dedupes by id across all agents). When Redis goes away
 *    the detector keeps running, queues what it finds, and when Redis is back
 *    re-registers, reseeds what Redis lost and reports the gap as an event;
 *    for ttl_ms + 1 s after that it reports no node lost (the others may have
 *    been cut off too and need a heartbeat to come back). An agent whose own
 *    heartbeat expired (paused or cut off past ttl_ms: the others reported it
 *    lost) re-joins as a new incarnation, so that its next loss is news.
 *
 * The leader holds the lease only while it renews it in time: a leader whose
 * last successful renewal is older than 0.9 x the lease TTL (it was paused,
 * or Redis was unreachable), counted from when the renewal was sent, stops
 * calling itself leader before doing anything else, and its epoch is fenced
 * in Redis anyway.
 *
 * Thread-safety: all functions may be called from any thread.
 */
#ifndef FTC_DETECT_DETECTOR_H
#define FTC_DETECT_DETECTOR_H

#include "detect/control.h"
#include "detect/redis.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*ftc_detector_cb)(void *arg, const ftc_ctl_event_t *e);

typedef struct ftc_detector_options {
    uint32_t struct_size;
    uint32_t version;
    const char *job;          /* job id */
    const char *node;         /* this agent's node id */
    const char *host;         /* shown in status ("" = hostname) */
    const char *domain;       /* failure-domain label */
    int heartbeat_ms;         /* default 250 */
    int ttl_ms;               /* heartbeat TTL, default 1000 */
    int scan_ms;              /* member scan period, default 500 */
    int lease_ttl_ms;         /* leader lease, default 2000 */
    bool campaign;            /* try to become leader (default true) */
    int redis_timeout_ms;     /* per Redis command incl. reconnects, default 500 */
    double hang_factor;       /* default 10 */
    int hang_min_ms;          /* default 5000 */
    double straggler_factor;  /* default 1.5 */
    int straggler_window;     /* consecutive scans, default 8 */
    double spike_sigma;       /* default 6 */
    int spike_window;         /* losses in the window, default 50 */
    ftc_detector_cb on_event; /* may be NULL; runs on the local-watch thread */
    void *arg;
    int deadline_poll_ms;     /* leader: poll of the heartbeat deadline set, default 50 */
    int follower_scan_factor; /* non-leaders scan members this many times less often, default 8 */
    int start_ms;             /* start-up limit (below), default 600000; 0 = none */
} ftc_detector_options_t;

#define FTC_DETECTOR_OPTIONS_INIT                                                                  \
    {sizeof(ftc_detector_options_t), 1, NULL, NULL, NULL, NULL, 250, 1000, 500, 2000, true, 500,   \
     10.0, 5000, 1.5, 8, 6.0, 50, NULL, NULL, 50, 8, 600000}

typedef struct ftc_detector ftc_detector_t;

/* Connects, joins the members, sends the first heartbeat and starts both
 * threads. Fails (NULL, err) only on bad options or when Redis cannot be
 * reached at start; later outages are survived. */
ftc_detector_t *ftc_detector_start(const ftc_redis_url_t *url, const ftc_detector_options_t *o,
                                   ftc_err_t *err);
/* Stops both threads. leave: remove this node from the members and delete
 * its heartbeat (a clean exit, not a failure). NULL is a no-op. */
void ftc_detector_stop(ftc_detector_t *d, bool leave);

/* Watches a rank's process: its exit is reported at once (kind rank_exit).
 * Watching a rank again replaces its watch. An exit is reported only for the
 * watch it was seen under: the exit of a process whose watch ended or was
 * replaced meanwhile is never charged to the rank watched now, even when the
 * new pidfd got the old one's fd number. A pid that is not there (gone, or
 * of another pid namespace) is not watched (FTC_ENOENT); for a rank whose
 * last watch had ended with no process watched now (its process's exit was
 * seen, or it was unwatched), it is a new process all the same, checked for
 * hangs from its progress as a rank never watched is (the same pid as that
 * watch's is not: it ended). A BYE alone does not end the watch that way:
 * the process that said it stays watched for its exit status, and until its
 * exit is seen a failed watch leaves the rank's hang checks off. */
int ftc_detector_watch_pid(ftc_detector_t *d, int rank, pid_t pid);
/* The same, for a child of this process (`ftc run`: the supervisor this
 * agent runs in spawned it): when its parent reaps it before the detector
 * reads its status, the parent tells it (ftc_detector_exit_status), and its
 * event waits for that. The status of a process watched with
 * ftc_detector_watch_pid alone (a standalone agent's rank, the child of
 * someone else) is read if it can be, never waited for. For the process
 * the rank's watch already holds (watched from its HELLO), or whose exit was
 * seen, it says only that: its watch, its BYE, its close and its start
 * stand (the supervisor's WATCH read after the rank's HELLO). */
int ftc_detector_watch_child(ftc_detector_t *d, int rank, pid_t pid);
/* Stops watching a rank's process: its exit is no event (its supervisor
 * stops it: a consequence of a failure already reported). Like its exit
 * (rank_exit) and its BYE, this ends the rank's hang check until a process
 * of it is watched again: nothing of it is left to progress. */
void ftc_detector_unwatch(ftc_detector_t *d, int rank);
/* The rank's process pid said BYE (its clean end). Its hang check ends, and
 * its process stays watched for its exit status only: status 0 is no event,
 * any other (killed by a signal while writing its outputs) a rank_exit with
 * it. Also when its exit was seen before the BYE was read: the exit of a
 * connected process with status 0 waits (below) for that BYE. */
void ftc_detector_bye(ftc_detector_t *d, int rank, pid_t pid);
/* The connection of the rank's process pid to its agent closed, after its
 * BYE or not: a BYE of it can no longer come, so the exit of a connected
 * process waits no longer for one (below). */
void ftc_detector_closed(ftc_detector_t *d, int rank, pid_t pid);
/* The exit status (a wait status) of the rank's process pid, from its
 * parent, which reaped it. A rank's exit is reported with its status: the
 * detector reads it (waitid WNOWAIT, P_PIDFD or, where the kernel has no
 * P_PIDFD, P_PID: only while the process is a zombie of this process), else,
 * for a process watched with ftc_detector_watch_child, its event waits for
 * the parent's, up to 1 s from the exit (each of up to 4 exits of one rank's
 * processes waits on its own), and is reported without one after that. A
 * status 0 is no event for a process that never connected
 * (ftc_detector_linked: a binary without libftc that ended) or that said
 * BYE; for a connected one that ended with 0 or an unknown status, the event
 * waits (up to that 1 s) for a BYE the agent reads late, until its
 * connection closed (ftc_detector_closed). Other statuses are reported at
 * once. Statuses told
 * before the rank is watched at all (reaped while its WATCH was read) are
 * kept for that watch (the last 4 per rank). The wait never holds up the
 * detector: it is checked at each turn of its loop. Time the agent was
 * paused (its loop did not run) is not counted in it. */
void ftc_detector_exit_status(ftc_detector_t *d, int rank, pid_t pid, int status);
/* The rank's process (the one watched) reports its progress: it links
 * libftc and connected to its agent. From then on the start-up limit holds
 * for it, and for every rank of the job, here or on any node (the first
 * call says so in Redis, ftc:{J}:linked, where every detector reads it while
 * it has a rank in its start-up): a rank whose process has finished no step
 * start_ms after its watch began (its spawn under `ftc run`, else its
 * connection) is hung, whether or not it ever connected. Until the job is
 * known to link libftc, a rank that never connects is no hang: it may be a
 * binary without libftc, whose progress nobody sees. */
void ftc_detector_linked(ftc_detector_t *d, int rank);
/* The rank finished `step`, which took step_time_us. */
void ftc_detector_progress(ftc_detector_t *d, int rank, int64_t step, uint64_t step_time_us);
/* The rank's loss at `step`, for NaN/Inf and spike detection. */
void ftc_detector_loss(ftc_detector_t *d, int rank, int64_t step, double loss);
/* An event the rank detected and acted on itself (the trainer's guard: kind
 * nan or loss_spike, detail naming the action): queued for the stream at
 * once, once per (kind, node, rank, step). Kinds longer than 23 characters
 * and details longer than 255 are cut. */
void ftc_detector_report(ftc_detector_t *d, const char *kind, int rank, int64_t step,
                         const char *detail);

typedef struct ftc_detector_stats {
    bool redis_up;          /* last Redis command succeeded */
    bool leader;            /* holds a valid lease now */
    uint64_t epoch;         /* lease epoch while leader */
    uint64_t generation;    /* last generation seen */
    uint64_t heartbeats;    /* sent */
    uint64_t events;        /* detected locally or seen first */
    uint64_t published;     /* events written to the stream */
    uint64_t dropped;       /* events dropped because the queue was full */
    uint64_t gaps;          /* Redis outages survived */
    uint64_t deadline_polls; /* leader's polls of the deadline set */
    uint64_t deadline_poll_trips; /* Redis round trips those polls made (a page of
                                   * candidates is confirmed in one pipeline) */
} ftc_detector_stats_t;

void ftc_detector_stats(ftc_detector_t *d, ftc_detector_stats_t *st);
bool ftc_detector_is_leader(ftc_detector_t *d);

#ifdef __cplusplus
}
#endif
#endif
