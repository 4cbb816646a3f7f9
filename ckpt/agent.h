/*
 * agent.h — `ftc agent`, one per node: the node's shard store.
 *
 * It owns the shm slots of its local ranks (three per rank, so a checkpoint
 * in progress never overwrites the last committed version, I3, nor waits for
 * the previous step's replication; they outlive a crashed rank), serves the ranks over a Unix
 * socket (ckpt/agent_proto.h), replicates each sealed slot to k peer agents over libfabric
 * (placement: the next nodes in ring order, skipping nodes of the same failure domain) or, with
 * redundancy xor:G / rs:G+M, takes part in its parity group (ckpt/agent_parity.h: parity
 * distributed over groups of G+M nodes), reports each replicated (or parity-protected) shard to the
 * commit record in Redis (detect/control.h) and tells the rank when its step is committed; every M
 * commits it writes its ranks' shards through the persist tier. On RESTORE it finds the newest
 * committed step and serves it from a local slot, else fetches a peer's replica (K replicas:
 * holders in ring order) or rebuilds it from the surviving group members' shards and parity (xor /
 * rs), else reads the persist tier — each verified before use (I1), and, for the committed step,
 * only the version whose head checksum the commit record holds: a copy that verifies by its content
 * but is another version of the step (a replica or persisted version from before a rollback) is
 * refused like a corrupt one and the next source tried (a refused replica: a warning and a
 * `replica_refused` event). Without the record's checksum (expired, Redis away, an older step a
 * FETCH names) the content alone is checked. ftc_agent_start fails with FTC_ECONFIG when the parity
 * groups cannot be formed (too few nodes).
 *
 * It publishes its fabric address in Redis (ftc:{job}:fabric, field = node
 * index) and runs a failure detector (detect/detector.h) for its node.
 *
 * Threads: the control loop (ftc_agent_run's caller), the replication
 * thread (owns the fabric endpoint), the persist thread, the parity worker
 * (parity encodes, xor / rs only), the detector's two.
 */
#ifndef FTC_CKPT_AGENT_H
#define FTC_CKPT_AGENT_H

#include "ckpt/parity.h"
#include "ckpt/persist.h"
#include "core/err.h"
#include "detect/redis.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

enum ftc_agent_busy_policy {
    FTC_BUSY_WAIT = 0, /* with no free slot, a checkpoint waits for an older one to commit */
    FTC_BUSY_SKIP = 1, /* it is skipped (the rank gets FTC_EAGAIN) and reported */
};

typedef struct ftc_agent_options {
    uint32_t struct_size;
    uint32_t version;
    const char *job;            /* job id */
    const char *dir;            /* job directory: agent.<index>.sock lives here */
    uint32_t index;             /* this node's index, 0..nodes-1 */
    uint32_t nodes;             /* agents in the job */
    uint32_t ranks_per_node;    /* local ranks; world = nodes x ranks_per_node */
    const char *node_id;        /* "" = "node<index>" */
    const char *domain;         /* failure-domain label ("" = own domain): replicas and
                                   parity groups avoid sharing one (docs/agent.md) */
    ftc_redis_url_t redis;      /* the job's Redis */
    ftc_redundancy_t redundancy; /* k replicas, xor:g or rs:g+m */
    const char *provider;       /* libfabric provider; NULL = FI_PROVIDER or tcp;ofi_rxm */
    int busy_policy;            /* ftc_agent_busy_policy */
    int max_inflight;           /* 1: a BEGIN finding a version of its rank sealed and not
                                   committed gets the busy policy; else (0, 2) only when no
                                   slot is free (checkpoint.inflight, docs/agent.md) */
    int hang_min_ms;            /* the hang watchdog's floor (detect.hang_ms; 0 = 5000) */
    int start_ms;               /* a rank's start-up limit (detect.start_ms; 0 = 600000,
                                   < 0 = none): ftc_detector_linked */
    int ttl_ms;                 /* heartbeat TTL (detect.ttl_ms; 0 = 1000); heartbeats
                                   every min(250, ttl_ms / 4) ms */
    const char *persist_dir;    /* "" = no persist tier */
    int persist_every;          /* persist every M commits (>= 1) */
    ftc_persist_options_t persist;
    int timeout_ms;             /* deadline of one replication or fetch (default 30000); a
                                   local connection that says no HELLO within it is closed */
    const void *secret;         /* job secret (16..32 bytes); NULL = shared through Redis */
    size_t secret_len;
} ftc_agent_options_t;

typedef struct ftc_agent ftc_agent_t;

/* Starts everything (slots are created when ranks ask). NULL with err when
 * Redis, the fabric or the socket cannot be set up; FTC_ECONFIG when the
 * parity groups cannot be formed with these options or the ones published
 * for this generation (ftc:{J}:pargroups:GEN) are for another redundancy or
 * node count. */
ftc_agent_t *ftc_agent_start(const ftc_agent_options_t *o, ftc_err_t *err);
/* Whether a failure domain label is one ftc_agent_start takes: empty (its
 * own), or 1..63 printable characters without spaces, not "-". For the
 * command line to refuse it before anything starts. */
bool ftc_agent_domain_valid(const char *domain);
/* Serves until *stop becomes nonzero (a signal handler sets it). */
int ftc_agent_run(ftc_agent_t *a, volatile sig_atomic_t *stop);
/* Once ftc_agent_run has returned (the same thread, before ftc_agent_stop):
 * writes the newest committed version this node holds to the persist tier,
 * unless the tier already has it (or a newer one), and waits for the write
 * (as long as the persist tier's own I/O takes: a write cannot be abandoned
 * halfway). The end of a job (`ftc run`) calls it so the last committed
 * state outlives the in-memory tier, as SCR's flush at finalize does.
 * 0 also without a persist tier or without any committed version here;
 * else the write's error (FTC_EIO, FTC_ENOSPC, ... with the persist tier's
 * detail). Not thread-safe with ftc_agent_run. */
int ftc_agent_flush(ftc_agent_t *a, ftc_err_t *err);
/* From the process that started rank `rank` as pid (the supervisor of
 * `ftc run`, which this agent runs in): it reaped it, with wait status
 * `status`, which the rank's rank_exit event then carries (a rank that
 * never connected and ended with status 0 has none: ftc_detector_exit_status);
 * or (ftc_agent_unwatch) it is about to stop the rank itself, so that exit
 * is no event either. Thread-safe, while the agent runs. */
void ftc_agent_exit_status(ftc_agent_t *a, uint32_t rank, pid_t pid, int status);
void ftc_agent_unwatch(ftc_agent_t *a, uint32_t rank);
/* Stops threads and frees; slots stay in /dev/shm for a restarted agent. */
void ftc_agent_stop(ftc_agent_t *a);
/* What ftc_agent_start or ftc_agent_stop of this process is doing now
 * ("start: fabric endpoint", "stop: detector", ...), NULL when neither
 * runs: for a supervisor's watchdog to name where a slow start or stop
 * is. Thread-safe (one atomic pointer per process). */
const char *ftc_agent_phase(void);
/* The socket path ranks connect to (FTC_AGENT_SOCKET). */
const char *ftc_agent_socket(const ftc_agent_t *a);
/* Builds the socket path of (dir, index) into buf. */
void ftc_agent_socket_path(const char *dir, uint32_t index, char *buf, size_t cap);

#endif
