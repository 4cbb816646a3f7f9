/*
 * control.h — the job's state in Redis: keys, generations, leader lease,
 * heartbeats, membership, failure reports, events and commit records.
 *
 * Every key lives under "ftc:{JOB}:" (the braces are a Redis Cluster hash tag:
 * all of a job's keys share one slot, so multi-key Lua scripts work there
 * too). docs/redis-keys.md lists them. Multi-key updates are Lua scripts;
 * writes that depend on membership carry the generation and are refused when
 * it is stale (I4), and leader actions carry the lease epoch and are refused
 * when the caller no longer holds the lease.
 *
 * A control handle wraps one Redis connection: one per thread.
 */
#ifndef FTC_DETECT_CONTROL_H
#define FTC_DETECT_CONTROL_H

#include "detect/redis.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_CTL_NODE_MAX 64     /* bytes of a node id */
#define FTC_CTL_EVENTS_CAP 10000 /* approximate length the event stream is trimmed to */
#define FTC_CTL_COMMITTED_CAP 1024 /* committed steps kept in ftc:{job}:committed (newest) */

typedef struct ftc_ctl ftc_ctl_t;

/* Whether id is a valid node id: 1..FTC_CTL_NODE_MAX of [A-Za-z0-9._:/-]
 * (a word of the job's records and a part of its Redis keys). */
bool ftc_ctl_node_id_valid(const char *id);

/* Binds a connection to a job (job ids: 1..63 of [A-Za-z0-9._-]). The handle
 * takes ownership of r. NULL with err on a bad job id. */
ftc_ctl_t *ftc_ctl_create(ftc_redis_t *r, const char *job, ftc_err_t *err);
void ftc_ctl_destroy(ftc_ctl_t *c); /* closes the connection; NULL is a no-op */
ftc_redis_t *ftc_ctl_redis(ftc_ctl_t *c);
const char *ftc_ctl_errstr(const ftc_ctl_t *c);
/* Writes the full name of a key ("ftc:{job}:" + suffix) into buf. */
const char *ftc_ctl_key(const ftc_ctl_t *c, const char *suffix, char *buf, size_t cap);

/* ---- membership and heartbeats ------------------------------------------------ */

typedef struct ftc_ctl_member {
    char node[FTC_CTL_NODE_MAX + 1]; /* node id */
    char host[128];                  /* host name or address */
    char domain[64];                 /* failure-domain label ("" = own domain) */
    int64_t pid;                     /* agent process id */
    uint64_t joined_ms;              /* wall clock at join */
} ftc_ctl_member_t;

/* Registers (or refreshes) a member. */
int ftc_ctl_join(ftc_ctl_t *c, const ftc_ctl_member_t *m);
/* Removes a member (a clean leave). */
int ftc_ctl_leave(ftc_ctl_t *c, const char *node);

typedef struct ftc_ctl_heartbeat {
    uint64_t generation;   /* the generation the agent is in */
    int64_t step;          /* last step its ranks finished (-1 before the first) */
    uint64_t step_time_us; /* duration of that step */
    uint64_t wall_ms;      /* when it was sent */
} ftc_ctl_heartbeat_t;

/* SET ftc:{job}:hb:NODE "gen step step_time_us wall_ms" PX ttl_ms, and
 * ZADD ftc:{job}:deadlines (wall_ms + ttl_ms) NODE, pipelined. */
int ftc_ctl_heartbeat(ftc_ctl_t *c, const char *node, const ftc_ctl_heartbeat_t *hb, int ttl_ms);
/* Members whose heartbeat deadline (wall ms of the last heartbeat + TTL, in
 * the sorted set ftc:{job}:deadlines) is at or before now_ms: candidates for
 * a lost node, to be confirmed by their heartbeat key being gone (clocks of
 * different hosts may disagree; the key's TTL in Redis does not). One page:
 * at most max of them, skipping the first `offset` in deadline order (a
 * caller pages through them: live nodes whose clocks run behind sort first
 * and stay in the set). */
int ftc_ctl_overdue(ftc_ctl_t *c, uint64_t now_ms, int offset,
                    char (*names)[FTC_CTL_NODE_MAX + 1], int max, int *n);
/* Drops a member from the deadline set (after its loss was reported). */
int ftc_ctl_forget_deadline(ftc_ctl_t *c, const char *node);
/* Parses a heartbeat value; FTC_EPROTO naming the key on garbage. */
int ftc_ctl_heartbeat_parse(const char *s, size_t len, ftc_ctl_heartbeat_t *hb, ftc_err_t *err);

/* A member record as ftc_ctl_join writes it, "HOST DOMAIN PID JOINED_MS",
 * fields as written ("-" for an empty host or domain). */
typedef struct ftc_ctl_member_rec {
    char host[128];
    char domain[64];
    long long pid;
    char joined[24];              /* the JOINED_MS word: the member's incarnation */
    unsigned long long joined_ms; /* valid when joined_ok */
    bool joined_ok;               /* the JOINED_MS word is a number */
} ftc_ctl_member_rec_t;
/* Parses a member record (pure: the detector and `ftc status` read it);
 * FTC_EPROTO on fewer than four words. Words after the fourth are ignored. */
int ftc_ctl_member_parse(const char *text, ftc_ctl_member_rec_t *m, ftc_err_t *err);

/* ---- generations --------------------------------------------------------------- */

/* Current generation and world size (0, 0 before any). FTC_EPROTO when the
 * key holds garbage. */
int ftc_ctl_generation(ftc_ctl_t *c, uint64_t *gen, uint32_t *world);
/* Leader only: moves from generation `seen` to seen+1 with the given world
 * size. FTC_ESTALE when the generation moved meanwhile; FTC_EAUTH ("fenced")
 * when (holder, epoch) no longer holds the lease. *out = the new generation. */
int ftc_ctl_generation_bump(ftc_ctl_t *c, const char *holder, uint64_t epoch, uint64_t seen,
                            uint32_t world, const char *reason, uint64_t *out);
/* After Redis lost its data (a restart without persistence): puts back what
 * this agent knows, never moving a value backwards. */
int ftc_ctl_reseed(ftc_ctl_t *c, uint64_t gen, uint32_t world, int64_t committed_step);

/* ---- leader lease ---------------------------------------------------------------- */

/* Tries to take the lease (SET NX PX + a new epoch). *held tells whether
 * holder has it now; *epoch is the fencing token of the current holder. */
int ftc_ctl_lease_acquire(ftc_ctl_t *c, const char *holder, int ttl_ms, bool *held,
                          uint64_t *epoch);
/* Extends the lease only if (holder, epoch) still holds it; *held = false
 * means it was lost (expired while paused, or taken over). */
int ftc_ctl_lease_renew(ftc_ctl_t *c, const char *holder, uint64_t epoch, int ttl_ms, bool *held);
int ftc_ctl_lease_release(ftc_ctl_t *c, const char *holder, uint64_t epoch);
/* Who holds the lease: holder ("" when none), epoch and milliseconds left. */
int ftc_ctl_leader(ftc_ctl_t *c, char *holder, size_t cap, uint64_t *epoch, int64_t *ttl_ms);
/* Parses the lease value "HOLDER EPOCH" (len bytes, pure); FTC_EPROTO naming
 * key on garbage. The holder is cut to cap - 1 bytes. */
int ftc_ctl_leader_parse(const char *s, size_t len, const char *key, char *holder, size_t cap,
                         uint64_t *epoch, ftc_err_t *err);

/* ---- events and failure reports ---------------------------------------------- */

typedef struct ftc_ctl_event {
    const char *kind;   /* node_lost, rank_exit, hang, straggler, nan, loss_spike, redis_gap,
                           generation, commit, ... */
    const char *node;   /* "" when not about one node */
    int rank;           /* -1 when not about one rank */
    uint64_t generation;
    int64_t step;       /* -1 when unknown */
    const char *detail; /* free text with the numbers */
    uint64_t t_fault_ms;  /* when the fault happened (best estimate), 0 = unknown */
    uint64_t t_detect_ms; /* when it was detected */
} ftc_ctl_event_t;

/* XADD to ftc:{job}:events, trimmed to about FTC_CTL_EVENTS_CAP. Not
 * idempotent: after a lost reply the event may or may not be there; a caller
 * that retries uses ftc_ctl_event_once. */
int ftc_ctl_event(ftc_ctl_t *c, const ftc_ctl_event_t *e);
/* The same, at most once per id (unique to the caller, e.g. node, incarnation
 * and a counter), remembered for an hour in the hash ftc:{job}:published: a
 * retry after a lost reply (the XADD ran, the answer did not arrive) adds
 * nothing. *first (may be NULL) tells whether this call added it. */
int ftc_ctl_event_once(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first);
/* Reports a failure exactly once per id within a generation: the first
 * reporter's call adds the event (*first = true), later ones do nothing. */
int ftc_ctl_report(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first);
/* The same, once per id for the whole job (hash ftc:{job}:failures:job, no
 * expiry), for ids unique across generations: node_lost names the node's
 * incarnation, and an agent of a later generation that scans the members
 * finds a node lost earlier missing too (its record stays). */
int ftc_ctl_report_job(ftc_ctl_t *c, const char *id, const ftc_ctl_event_t *e, bool *first);

/* The job's 16-byte secret (HMAC key of the wire protocol), shared through
 * Redis: the first caller stores a random one (SET NX), every caller reads
 * the one that won. FTC_EREDIS / FTC_EPROTO naming the key otherwise. */
int ftc_ctl_job_secret(ftc_ctl_t *c, uint8_t out[16], ftc_err_t *err);

/* Whether the job's ranks link libftc (ftc:{J}:linked): set by the agent of
 * the first rank that connects, read by the detectors of ranks still in
 * their start-up (ftc_detector_linked). *linked false while the key is
 * missing; FTC_EPROTO for anything but "1" in it. */
int ftc_ctl_linked_set(ftc_ctl_t *c);
int ftc_ctl_linked(ftc_ctl_t *c, bool *linked);

/* ---- commit records --------------------------------------------------------------- */

/* A rank reports its shard of (generation, step). When every rank of that
 * generation has reported, the step becomes the committed step — atomically,
 * never backwards, never for a stale generation (FTC_ESTALE), never for a
 * step whose record holds the abort marker (FTC_ECANCELED, the report not
 * recorded: ftc_ctl_commit_abort). *committed is the committed step after
 * the call (-1 if none); *now_committed is true when this call committed it. */
int ftc_ctl_commit_report(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                          uint64_t checksum, int64_t *committed, bool *now_committed);
/* The committed step and the generation that committed it (-1, 0 when none). */
int ftc_ctl_committed(ftc_ctl_t *c, int64_t *step, uint64_t *gen);
/* Parses a member of the committed set, "STEP:GEN" (len bytes, pure):
 * false unless both are decimal numbers in range. */
bool ftc_ctl_committed_member_parse(const char *v, size_t len, int64_t *step, uint64_t *gen);
/* The head checksum rank reported for (gen, step) (ftc:{job}:commit:GEN:STEP,
 * kept an hour after the step's last report): *found false when the record
 * has none (never reported, withdrawn, or expired). FTC_EREDIS, or
 * FTC_EPROTO naming the key when the field is not a hex checksum. */
int ftc_ctl_commit_checksum(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                            uint64_t *checksum, bool *found);
/* Parses a reported checksum, 1..16 hex digits (len bytes, pure). */
bool ftc_ctl_checksum_parse(const char *v, size_t len, uint64_t *checksum);
/* The committed steps at or below max_step, newest first, and the generation
 * that committed each: up to cap of them into steps[] and gens[] (cap entries
 * each), *n how many. They come from ftc:{job}:committed, a sorted set the
 * commit adds each committed step to (trimmed to its newest
 * FTC_CTL_COMMITTED_CAP): steps committed before it existed, or before Redis
 * lost its data, are not in it. *oldest (may be NULL): the oldest step the
 * set holds, -1 when it is empty. FTC_EINVAL for max_step < 0 or cap < 1;
 * FTC_EREDIS; FTC_EPROTO naming the key when a member is not STEP:GEN. */
int ftc_ctl_committed_at_most(ftc_ctl_t *c, int64_t max_step, int cap, int64_t *steps,
                              uint64_t *gens, int *n, int64_t *oldest);
/* Takes rank's report of (gen, step) back, atomically, unless the committed
 * step is at or past step already: after it the step cannot commit without
 * a new report of that rank. *withdrawn (may be NULL): true when the report
 * is gone (or there was none), false when the record is at or past step
 * (*committed, may be NULL, is the committed step either way). */
int ftc_ctl_commit_withdraw(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                            int64_t *committed, bool *withdrawn);
/* The longest reason ftc_ctl_commit_abort keeps (a longer one is cut). */
#define FTC_CTL_ABORT_WHY_MAX 200
/* Rank's snapshot of (gen, step) failed: marks the step's commit record
 * (field "abort" of ftc:{job}:commit:GEN:STEP, "RANK why", the first marker
 * kept), atomically unless the committed step is at or past step already.
 * From then on ftc_ctl_commit_report of that step is refused with
 * FTC_ECANCELED (the step never commits, I3). *marked (may be NULL): true
 * when the record holds the marker, false when it was at or past step
 * (*committed, may be NULL, is the committed step either way). */
int ftc_ctl_commit_abort(ftc_ctl_t *c, uint64_t gen, int64_t step, uint32_t rank,
                         const char *why, int64_t *committed, bool *marked);
/* Whether (gen, step)'s commit record holds the abort marker: *aborted, and
 * the rank that failed (*rank, may be NULL) and why (into why, cap bytes;
 * may be NULL). FTC_EREDIS, or FTC_EPROTO naming the key when the field is
 * not "RANK why". */
int ftc_ctl_commit_aborted(ftc_ctl_t *c, uint64_t gen, int64_t step, bool *aborted,
                           uint32_t *rank, char *why, size_t cap);
/* Parses an abort marker "RANK why" (len bytes, pure): the rank, and the
 * reason into why (cap bytes; may be NULL). False when it is not one. */
bool ftc_ctl_abort_marker_parse(const char *v, size_t len, uint32_t *rank, char *why, size_t cap);

/* ---- removing a job's state --------------------------------------------------------- */

/* What ftc_ctl_clean found and did. */
typedef struct ftc_ctl_clean {
    uint64_t removed; /* keys removed */
    int n_hb;         /* heartbeat keys (hb:NODE) found */
    int n_sup;        /* supervisor leases (sup:NODE) found */
    bool leader;      /* the leader lease was held */
    /* the signs of life in words, "" when none: "heartbeat of A, B; supervisor
     * lease of S; leader lease held by A:12:1700000000000" (the first 8 nodes of
     * each kind named, then "and N more") */
    char live[640];
} ftc_ctl_clean_t;

/* Removes every key of the job (all of ftc:{job}:*, docs/redis-keys.md): a
 * SCAN MATCH of the job's prefix (its job id glob-escaped) COUNT 1000, each
 * page's keys removed with one UNLINK (DEL on a server without it). Unless
 * force, it first looks for signs that the job is alive — a heartbeat key, a
 * supervisor lease, the leader lease — and when it finds any removes nothing
 * and returns FTC_EINPROGRESS, the error (and out->live) naming them (with
 * force nothing is looked for). Keys of other jobs are never touched, not
 * even those of a job whose id begins with this one's (the prefix ends in "}:").
 * The check and the removal are not atomic: a job started meanwhile loses
 * what it wrote (stop the job first). FTC_EREDIS / FTC_ETIMEDOUT when Redis
 * fails (out->removed says how many went before). out may be NULL. */
int ftc_ctl_clean(ftc_ctl_t *c, bool force, ftc_ctl_clean_t *out);
/* Writes s into buf (cap bytes) with Redis's glob specials (* ? [ ] \)
 * escaped by a backslash, for a literal part of a SCAN MATCH pattern (pure).
 * Returns the length written, or -1 when it does not fit (buf then ""). */
int ftc_ctl_glob_escape(const char *s, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
