/*
 * agent_internal.h — internal to the agent (ckpt/agent*.c): its state (the
 * ranks and their slots, the jobs of the replication thread, the peers) and
 * the functions its files share. Everything here runs on the agent's control
 * loop unless a field says otherwise (the job fields "private to the
 * replication thread", the atomics, what `mu` guards).
 *
 *   agent.c          life cycle, Redis (peers, secret, generation), the
 *                    replication thread, rank messages (HELLO, SLOTS, BEGIN,
 *                    SEALED, REPORT), pushes
 *   agent_commit.c   slots and commits: BEGIN's slot, commit reports and the
 *                    commit poll, the persist schedule, ABORT and abort markers
 *   agent_restore.c  RESTORE / FETCH / FETCH_AT_MOST: the local slot, peers'
 *                    replicas, the persist tier; verification against the
 *                    commit record (I1)
 *   agent_stripe.c   parity groups (redundancy xor / rs): layout, encode,
 *                    parity pushes, rebuilds (the pure parts: agent_parity.c)
 */
#ifndef FTC_CKPT_AGENT_INTERNAL_H
#define FTC_CKPT_AGENT_INTERNAL_H

#include "ckpt/agent.h"
#include "ckpt/agent_parity.h"
#include "ckpt/agent_persist.h"
#include "ckpt/agent_proto.h"
#include "ckpt/records.h"
#include "ckpt/replica.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/fabric.h"
#include "detect/control.h"
#include "detect/detector.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* how long stopping waits for the replication thread (ftc__abandon after) */
#define FTC__STOP_JOIN_MS 3000

#define FTC_AGENT_MAX_RANKS 64
#define FTC_AGENT_MAX_CLIENTS 128
#define NS FTC_AP_SLOTS_PER_RANK /* slots per rank */
/* FETCH_AT_MOST: the committed steps looked for, at most (the newest first) */
#define FTC__AT_MOST_CANDS 32
/* While Redis does not answer, the control loop's periodic calls (the peer
 * refresh, the commit poll) ask it once per this interval: each costs a
 * command timeout (2 s) in which no rank is answered */
#define FTC__REDIS_PROBE_NS 1000000000ull
/* steps failed by a rank's ABORT that the agent remembers (ftc_agent.aborted_step) */
#define FTC__ABORTED_KEEP 8

enum { SL_EMPTY = 0, SL_WRITING = 1, SL_SEALED = 2, SL_COMMITTED = 3 };
#define FTC__VERIFY_THREADS 4 /* threads hashing a slot a RESTORE finds here (per tensor) */

/* a slot state's name, for logs */
static inline const char *ftc__sl_name(int st)
{
    static const char *const name[] = {"empty", "writing", "sealed", "committed"};
    return st >= 0 && st <= SL_COMMITTED ? name[st] : "?";
}

enum { JOB_PEER = 1, JOB_PUSH = 2, JOB_FETCH = 3, JOB_GATHER = 4 };
enum { PAR_NONE = 0, PAR_ENCODE = 1, PAR_REBUILD = 2 }; /* ftc__job_t.par */

typedef struct ftc__job {
    struct ftc__job *next;
    int kind;
    uint32_t owner;         /* PUSH/FETCH: the rank */
    uint64_t step;
    const uint8_t *shard;   /* PUSH: the sealed slot */
    uint64_t size;
    uint32_t peers[FTC_REPL_MAX_PEERS];
    int npeers;             /* PUSH: targets; FETCH: candidates, tried in order */
    int64_t keep;           /* PUSH: the committed step when queued (peers keep its replica,
                               or parity block: the encode's keep); -1 = not said */
    int next_peer;          /* FETCH: next candidate */
    int req_rix;            /* FETCH: the rank (index in a->ranks) whose request queued it */
    uint64_t req;           /* FETCH, and a rebuild's GATHER: that request (ftc__rank_t.req):
                               its result goes to that request only, never to another rank's
                               fetch of the same shard, nor to a later request of the rank */
    uint8_t addr[FTC_FABRIC_ADDR_MAX]; /* PEER */
    size_t addr_len;
    uint32_t node;          /* PEER: its index */
    bool replace;           /* PEER: forget the old address first */
    /* results */
    int rc;
    int acked, failed;
    char detail[768];
    char passed_over[512]; /* FETCH: why candidates before the one that answered failed */
    uint64_t rec_head;      /* FETCH: the commit record's head checksum of the shard (I1) */
    bool rec_known;         /* FETCH: rec_head is known (else the content alone is checked) */
    bool refused;           /* FETCH: a candidate held another version of the step (rec_head) */
    char refusal[256];      /* FETCH: the last such refusal, naming the holder */
    int lacking;            /* FETCH: candidates that answered that they lack the version
                               (a NACK "not held", or a copy of another version): asking
                               them again cannot help, unlike one that did not answer */
    int timedout;           /* FETCH: candidates whose fetch reached its deadline (a hung or
                               cut-off holder, asked for a full agent.timeout_ms already) */
    uint8_t *buf;           /* FETCH: the verified shard (malloc'd, or dst) */
    uint64_t buf_size;
    uint8_t *dst;           /* FETCH for a RESTORE: the rank's slot it lands in, if it fits */
    uint64_t dst_cap;
    int dst_rix, dst_slot;  /* that rank (index in a->ranks) and slot */
    bool landed;            /* buf == dst, its checksums verified as the bytes landed there */
    /* parity groups */
    int par;                /* PAR_*: what a GATHER or a parity PUSH is for */
    int rix;                /* GATHER / parity PUSH: index of the rank in a->ranks */
    ftc__gather_t *gather;  /* GATHER: the fetches */
    /* private to the replication thread */
    ftc_repl_xfer_t x;
    bool started;
    bool local_tried;       /* FETCH: this node's own replica store was looked at */
    uint64_t busy_since_ns; /* FETCH: when its next candidate was first found busy fetching
                               the same owner for another job (0: not busy) */
} ftc__job_t;

typedef struct ftc__rank {
    bool used;
    int fd;                 /* its connection, -1 when gone */
    bool full;              /* its socket holds answers it has not read, as many as it
                               takes: its requests are not read until it reads them */
    uint32_t rank;
    ftc_ap_msg_t hello;     /* identity and layout */
    uint64_t size;          /* bytes per slot (0 before SLOTS) */
    ftc_slot_t slot[NS];
    int st[NS];              /* SL_* */
    uint64_t step[NS];
    uint64_t checksum[NS];   /* head xxh3 of a sealed slot (the commit record's checksum) */
    bool reported[NS];       /* commit reported to Redis */
    bool pushed[NS];         /* handed to the replication thread */
    bool acked[NS];          /* replicated to k peers: may be reported */
    bool pinned[NS];         /* being written by the persist thread: never handed out */
    bool unchecked[NS];      /* sealed by a restarted agent that could not read whether the
                                commit record holds its report (Redis away): never restored,
                                asked again by the commit poll (ftc__survivor_recheck) */
    bool aborted[NS];        /* sealed, of a step a rank of this node failed to snapshot
                                (ABORT): it cannot commit, and is abandoned once no push or
                                encode reads it (ftc__abandon_aborted) */
    uint64_t sealed_ns[NS];  /* when SEALED arrived (placement waits for peers until the timeout) */
    uint64_t retry_ns[NS];   /* a failed push is tried again from then on (0: now) */
    int push_tries[NS];      /* pushes of this version that failed so far */
    bool begin_waiting;     /* BUSY_WAIT: a BEGIN is parked */
    uint64_t begin_seq;     /* request id of the last BEGIN (its answer may come later) */
    uint64_t restore_seq;   /* request id of the RESTORE / FETCH being worked on */
    uint64_t req;           /* its agent-wide number (ftc_agent.requests): a fetch job
                               carries it, and a result of an earlier request is dropped */
    uint64_t begin_step;
    uint64_t begin_since_ns; /* when it was parked: after the timeout the oldest
                                uncommitted version is abandoned (another rank's
                                replication of that step failed, it never commits) */
    uint64_t last_sealed_ns; /* previous SEALED: the step time reported to the detector */
    bool restoring;         /* a RESTORE or FETCH is being worked on */
    int restore_attempts;   /* fetch rounds tried for it (peers may be restarting) */
    uint64_t restore_step;
    uint64_t restore_t0;    /* ftc_now_ns() when the RESTORE / FETCH arrived (DEBUG timings) */
    uint64_t rec_head;      /* the head checksum the commit record holds for the subject's
                               shard of restore_step: every copy restored must have it (I1) */
    bool rec_known;         /* rec_head is known (else copies are checked by content only) */
    uint32_t src;           /* its subject: the rank whose shard is wanted (usually rank) */
    bool fetch;             /* a FETCH (answered with a shm copy), not a RESTORE */
    bool at_most;           /* a FETCH_AT_MOST: restore_step is cand[icand] */
    uint64_t at_most_step;  /* FETCH_AT_MOST: the step asked for (capped at the committed) */
    int ncand, icand;       /* FETCH_AT_MOST: the committed steps to try, the one tried */
    uint64_t cand[FTC__AT_MOST_CANDS];     /* newest first, each <= at_most_step */
    uint64_t cand_gen[FTC__AT_MOST_CANDS]; /* the generation that committed it, 0: unknown */
    int64_t cand_cover;     /* the commit set read has every committed step from this one
                               on (-1: not read, empty): a step of another source there that
                               it lacks was never committed */
    char cand_tried[160];   /* FETCH_AT_MOST: the steps tried so far ("6, 5") */
    char fetch_name[FTC_SLOT_NAME_MAX]; /* shm object of the last FETCH_OK ("" = none) */
    uint64_t fetches;       /* FETCH_OKs so far: names the next object */
    uint64_t rebuild_gen;   /* parity rebuild: the layout (generation) of the version */
    bool rebuild_later;     /* no rebuild: the subject's node looked alive, so its shard is
                               fetched from there; rebuilt if that fetch fails (the node may
                               be lost with its heartbeat not expired yet, or cut off) */
    uint32_t rebuild_local; /* parity rebuild: the stripe (local index) it sits in */
    ftc__par_geo_t rebuild_geo; /* parity rebuild: the subject's group in that layout, its
                                   member the lost one (not this node's when the rank moved) */
    int landing;            /* 1 + the slot a RESTORE's fetch is landing in (written by the
                               replication thread: not unmapped meanwhile), 0 = none */
} ftc__rank_t;

typedef struct ftc__peer {
    bool known;
    char node_id[FTC_CTL_NODE_MAX + 1];
    char domain[64];
    char addr_hex[2 * FTC_FABRIC_ADDR_MAX + 1]; /* as published; a change = a restarted agent */
    bool alive;             /* its heartbeat key exists: never send to a dead agent (a send to
                               a dead peer cannot be cancelled and breaks our endpoint) */
    bool stale;             /* the address is an earlier generation's: no push to it */
} ftc__peer_t;

struct ftc_agent {
    ftc_agent_options_t o;
    int watch_delay_ms;      /* tests: FTC_TEST_AGENT_WATCH_DELAY_MS, read at start */
    char job[64], node_id[FTC_CTL_NODE_MAX + 1], domain[64], dir[4096], sock[4200];
    char ns[96];             /* slot namespace: JOB.n<index> */
    int listen_fd, evfd;
    int clients[FTC_AGENT_MAX_CLIENTS]; /* connected fds not yet identified, -1 */
    bool clients_full[FTC_AGENT_MAX_CLIENTS]; /* ... whose socket is full (ftc__rank_t) */
    uint64_t clients_since_ns[FTC_AGENT_MAX_CLIENTS]; /* ... accepted then: one that says no
                               HELLO within agent.timeout_ms is closed (ftc__expire_silent) */
    int clients_pid[FTC_AGENT_MAX_CLIENTS]; /* ... its peer's pid (SO_PEERCRED, 0: unknown);
                               this process's own (the supervisor's WATCHes) never expires */
    ftc__rank_t ranks[FTC_AGENT_MAX_RANKS];
    ftc_ctl_t *ctl;          /* control loop's Redis connection */
    ftc_detector_t *det;
    uint64_t generation;
    uint32_t world;
    int64_t committed;       /* newest committed step known */
    uint64_t requests;       /* RESTORE / FETCH / FETCH_AT_MOST requests so far (their ids) */
    bool redis_down;         /* the last Redis call of the control loop that records it
                                (ftc__redis_seen) failed: calls that can do without Redis (a
                                fetch round's peer refresh, a search's record checksum) are
                                skipped until one succeeds (the 500 ms peer refresh, the
                                commit poll and every RESTORE / FETCH ask again) */
    uint64_t redis_fail_ns;  /* when such a call last failed: meanwhile the peer refresh and
                                the commit poll ask once per FTC__REDIS_PROBE_NS */
    char redis_refused[160]; /* the last error reply logged (ftc__redis_seen), and when */
    uint64_t redis_refused_ns;
    /* the last FTC__ABORTED_KEEP steps a rank failed to snapshot (ABORT on
     * this node, or the abort marker of the step's commit record: another
     * node's), and that rank: a copy of such a step sealed later is abandoned */
    uint64_t aborted_step[FTC__ABORTED_KEEP];
    uint32_t aborted_rank[FTC__ABORTED_KEEP];
    char aborted_why[FTC__ABORTED_KEEP][FTC_CTL_ABORT_WHY_MAX + 1]; /* the failure */
    /* the same steps + 1 (0: none), read by the replication thread: an
     * encoder's gather of an aborted step ends at once (ftc__gather_poll) */
    _Atomic uint64_t aborted_stop[FTC__ABORTED_KEEP];
    unsigned naborted;
    /* abort markers of this node's ABORTs not yet in their commit records
     * (Redis down when the ABORT came), oldest first: written by the commit
     * poll once Redis answers. Apart from the FTC__ABORTED_KEEP steps above,
     * which later ABORTs overwrite: a marker is never dropped unwritten, the
     * queue grows instead (ftc__note_abort) */
    struct ftc__abort_mark {
        uint64_t step, gen;  /* the step, and the generation it was failed in */
        uint32_t rank;
        char why[FTC_CTL_ABORT_WHY_MAX + 1];
    } *marks;
    size_t nmarks, marks_cap;
    uint64_t last_poll_ns, last_peers_ns;
    uint64_t last_abort_poll_ns; /* ftc__poll_abort_markers: at most every FTC__ABORT_POLL_MS */
    ftc__peer_t *peers;      /* by node index, o.nodes entries */
    /* replication thread */
    ftc_fabric_t *fab;       /* owned by the replication thread once it runs */
    ftc_repl_t *repl;
    ftc_repl_options_t ropt; /* to re-create the engine on a new endpoint */
    ftc_fabric_opts_t fopt;
    ftc__peer_t *rpeers;     /* the replication thread's copy of peer addresses */
    uint8_t (*raddr)[FTC_FABRIC_ADDR_MAX];
    size_t *raddr_len;
    uint8_t my_addr[FTC_FABRIC_ADDR_MAX]; /* under mu: our current address, to publish */
    size_t my_addr_len;
    bool republish;          /* under mu: the address changed (endpoint rebuilt) */
    uint64_t rebuilds;
    ftc_wire_key_t key;
    pthread_t repl_tid;
    bool repl_started;
    atomic_bool stop;
    pthread_mutex_t mu;      /* guards the two job lists */
    ftc__job_t *todo, *done;
    /* persist */
    ftc_persist_t *persist;
    ftc__persister_t *pw;    /* the persist thread (agent_persist.h), when persist is on */
    /* the steps due for the persist tier, oldest first: every node writes the
     * same steps (step + 1 a multiple of persist_every), so that a restore
     * from the tier finds one version on every node; a due step waits, its
     * slots pinned, while the writer is busy (the ranks' BEGINs then wait
     * for a free slot: the busy policy) instead of being skipped */
    int64_t pq[NS + 1];
    int pqn;
    int64_t pwriting;        /* the step the writer has, -1 when idle */
    int64_t newest_local;    /* newest step committed in this node's slots, -1 before any */
    int64_t persisted;       /* newest step the persist writer wrote, -1 before any */
    uint64_t gen_keys_ns;    /* the last renewal of this generation's plan (and parity
                                groups) TTL: ftc__keep_generation_keys */
    int persist_rc;          /* the last write's result, its detail below */
    char persist_detail[512];
    uint64_t commits;        /* steps this node saw committed */
    bool alone_warned;       /* the "only node: no replicas" warning was logged */
    bool fewer_warned;       /* the "fewer members than redundancy + 1" warning was logged */
    uint64_t members_gen;    /* the generation members_n was read for (0: not yet) */
    uint32_t members_n;      /* nodes in that generation's plan (ftc run), else o.nodes */
    bool members_planned;    /* members_n came from a plan (final for the generation) */
    uint64_t members_ns;     /* when it was read: without a plan, read again after 1 s */
    struct ftc__agent_par *par; /* parity groups (redundancy xor / rs), NULL for replicas */
    ftc_err_t err;
};


typedef struct ftc__enc { /* one rank's encode in flight (this node is its stripe's encoder) */
    bool active;
    uint64_t step;
    int slot;
    int pending, acked;
    char detail[600];
    uint32_t ranks[FTC_PARITY_MAX];
    uint64_t heads[FTC_PARITY_MAX];
    uint8_t *wraps[FTC_PARITY_MAX]; /* kept until the next encode: pushes read them */
    int64_t ok_step; /* newest step whose parity every member acknowledged (-1: none) */
    uint32_t unreported; /* members of ok_step whose shard is not reported yet (bit i: member
                            i; ftc__par_report_members) */
} ftc__enc_t;

/* Where the ranks of one generation live: from the plan `ftc run` publishes
 * (`ftc:{J}:plan:GEN`, members by node id, "member:slot" per rank), with
 * member ids mapped to agent node indices through the peers' fabric
 * entries. Without a plan (`ftc agent` run by hand) rank = node x
 * ranks_per_node + local. */
typedef struct ftc__where {
    uint64_t gen;           /* 0: empty */
    bool planned;           /* from a plan (else the formula) */
    uint32_t n;             /* ranks */
    uint32_t *node, *local; /* [n] */
    uint32_t nm;            /* planned: the plan's members (node indices, ascending) */
    uint32_t *members;      /* [nm] */
} ftc__where_t;

struct ftc__agent_par {
    ftc__par_geo_t geo;
    bool resolved;          /* geo is final (ftc__par_resolve) */
    bool late_warned;       /* the "plan member not known" warning was logged */
    bool few;               /* resolved: the generation has too few nodes for a group
                             * (M or fewer): its checkpoints use the replica path */
    bool conflict;          /* the published groups do not fit this agent (why) */
    uint64_t next_look_ns;  /* while waiting: the next read of the published groups */
    char why[400];
    uint64_t resolve_by_ns; /* failure domains: wait for every node's until then */
    ftc__par_worker_t *worker; /* encodes off the control loop */
    ftc__enc_t enc[FTC_AGENT_MAX_RANKS];
    ftc__where_t where[2];  /* cache: the current and the committed generation's */
    char where_why[240];    /* why the last ftc__where returned NULL */
};

/* Shared by the agent's files; each is documented where it is defined. */

/* agent.c */
bool ftc__redis_outage(const ftc_agent_t *a, int rc);
int ftc__redis_seen(ftc_agent_t *a, int rc);
void ftc__event(ftc_agent_t *a, const ftc_ctl_event_t *e);
void ftc__queue(ftc_agent_t *a, ftc__job_t *j);
void ftc__send(int fd, const ftc_ap_msg_t *m);
void ftc__reply_error(int fd, uint64_t seq, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ftc__not_committed(int fd, int code, uint64_t step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ftc__refresh_peers(ftc_agent_t *a);
void ftc__try_push(ftc_agent_t *a, ftc__rank_t *r, int s);
void ftc__push_others(ftc_agent_t *a, ftc__rank_t *r, int s);

/* agent_commit.c */
int ftc__newest_committed(const ftc__rank_t *r);
int ftc__free_slot(const ftc__rank_t *r);
int ftc__begin_slot(const ftc_agent_t *a, const ftc__rank_t *r);
int ftc__slot_reserve(ftc__rank_t *r, int s, ftc_err_t *err);
void ftc__send_begin_ok(ftc__rank_t *r, int slot, uint64_t step);
void ftc__slot_reserve_ahead(const ftc_agent_t *a, ftc__rank_t *r);
void ftc__answer_begin(const ftc_agent_t *a, ftc__rank_t *r);
void ftc__report_commit(ftc_agent_t *a, ftc__rank_t *r, int s);
bool ftc__persist(ftc_agent_t *a, uint64_t step);
void ftc__persist_kick(ftc_agent_t *a);
void ftc__persist_collect(ftc_agent_t *a);
bool ftc__survivor_recheck(ftc_agent_t *a, ftc__rank_t *r, int s, bool *down);
void ftc__abandon_aborted(ftc_agent_t *a);
bool ftc__step_aborted(const ftc_agent_t *a, uint64_t step);
void ftc__note_abort(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why,
                     bool local);
void ftc__on_abort(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m);
void ftc__poll_commits(ftc_agent_t *a);

/* agent_restore.c */
void ftc__restore_done(ftc_agent_t *a, ftc__rank_t *r, int s, bool verified);
int ftc__install(ftc__rank_t *r, const uint8_t *buf, uint64_t size, uint64_t step,
                 ftc_err_t *err);
bool ftc__copy_is_recorded(const ftc__rank_t *r, const ftc_shard_view_t *v,
                           const char *from, char *why, size_t cap);
void ftc__restore_from_persist(ftc_agent_t *a, ftc__rank_t *r, const char *tried);
bool ftc__queue_fetch(ftc_agent_t *a, ftc__rank_t *r);
bool ftc__each_persist(ftc_agent_t *a, bool (*visit)(ftc_persist_t *, void *), void *arg);
bool ftc__has_visit(ftc_persist_t *p, void *arg);
void ftc__on_restore(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m);
void ftc__on_fetch_done(ftc_agent_t *a, ftc__job_t *j);

/* agent_stripe.c */
void ftc__job_free(ftc__job_t *j);
int ftc__par_resolve(ftc_agent_t *a);
bool ftc__par_try_push(ftc_agent_t *a, ftc__rank_t *r, int s);
void ftc__par_collect(ftc_agent_t *a);
void ftc__par_on_push_done(ftc_agent_t *a, ftc__job_t *j);
bool ftc__par_queue_rebuild(ftc_agent_t *a, ftc__rank_t *r, bool force);
void ftc__par_rebuild_failed(ftc_agent_t *a, ftc__rank_t *r, const char *why,
                             const char *looked);
void ftc__par_on_rebuilt(ftc_agent_t *a, ftc__par_task_t *t);
void ftc__par_on_gather_done(ftc_agent_t *a, ftc__job_t *j);
void ftc__par_free(ftc_agent_t *a);
bool ftc__par_report_members(ftc_agent_t *a, ftc__rank_t *r, int s);

#endif
