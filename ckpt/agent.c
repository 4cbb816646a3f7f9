/*
 * agent.c — see agent.h.
 *
 * Control loop (one thread): poll over the listening socket, the ranks'
 * sockets and an eventfd the replication thread signals. Each rank has two
 * slots whose states move EMPTY -> WRITING (BEGIN) -> SEALED (replicating)
 * -> COMMITTED; the slot holding the newest committed version is never
 * handed out for writing. Commit: once a slot is replicated to its k peers
 * the agent reports (generation, step, rank, head checksum) to Redis; the
 * step commits when every rank of the generation has reported, which the
 * agent learns by polling the commit record while anything is pending.
 *
 * Replication thread: owns the fabric endpoint and the replication engine;
 * takes jobs (add peer, push, fetch) from a queue, drives
 * ftc_repl_progress, and hands finished jobs back through the eventfd. It
 * also serves peers' pushes and fetches all the time.
 *
 * Parity worker (redundancy xor / rs, agent_parity.h): encodes a gathered
 * version, or decodes and verifies a rebuild, off the control loop and hands
 * it back through the same eventfd.
 */
#include "ckpt/agent.h"

#include "ckpt/agent_parity.h"
#include "ckpt/agent_persist.h"

#include "ckpt/agent_proto.h"
#include "ckpt/replica.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/clock.h"
#include "core/fabric.h"
#include "core/fsio.h"
#include "core/hash.h"
#include "core/log.h"
#include "detect/control.h"
#include "detect/detector.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <time.h>

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

static const char *ftc__sl_name[] = {"empty", "writing", "sealed", "committed"};

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
    int64_t keep;           /* PUSH of a replica: the committed step when queued (peers keep
                               its replica; -1 = not said, always for parity pushes) */
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
    char job[64], node_id[FTC_CTL_NODE_MAX + 1], domain[64], dir[4096], sock[4200];
    char ns[96];             /* slot namespace: JOB.n<index> */
    int listen_fd, evfd;
    int clients[FTC_AGENT_MAX_CLIENTS]; /* connected fds not yet identified, -1 */
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

/* ---- helpers ----------------------------------------------------------------------- */

static void ftc__try_push(ftc_agent_t *a, struct ftc__rank *r, int s);
static void ftc__job_free(ftc__job_t *j);
static bool ftc__par_try_push(ftc_agent_t *a, ftc__rank_t *r, int s);
static bool ftc__par_queue_rebuild(ftc_agent_t *a, ftc__rank_t *r);
static void ftc__par_rebuild_failed(ftc_agent_t *a, ftc__rank_t *r, const char *why,
                                    const char *looked);
static void ftc__par_on_gather_done(ftc_agent_t *a, ftc__job_t *j);
static void ftc__par_on_push_done(ftc_agent_t *a, ftc__job_t *j);
static void ftc__par_collect(ftc_agent_t *a);
static void ftc__par_on_rebuilt(ftc_agent_t *a, ftc__par_task_t *t);
static void ftc__push_others(ftc_agent_t *a, struct ftc__rank *r, int s);
static void ftc__note_abort(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why,
                            bool local);

void ftc_agent_socket_path(const char *dir, uint32_t index, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/agent.%u.sock", dir, index);
}

const char *ftc_agent_socket(const ftc_agent_t *a) { return a->sock; }

/* Whether rc is a Redis outage (no answer, connection broken), not an
 * answer that refused (a stale generation, a bad key). An error reply of
 * the server (WRONGTYPE, a script's error) comes back as FTC_EREDIS too,
 * like a broken connection, but leaves the connection up: Redis answered. */
static bool ftc__redis_outage(const ftc_agent_t *a, int rc)
{
    return rc == FTC_ETIMEDOUT || (rc == FTC_EREDIS && !ftc_redis_is_up(ftc_ctl_redis(a->ctl)));
}

/* Records the outcome rc of a Redis call of the control loop in
 * a->redis_down (a change is logged once); returns rc. A call Redis
 * answered with a refusal (an error reply such as WRONGTYPE: a key of
 * another type where the agent reads, a data problem) is no outage: Redis
 * is not taken for down (which would skip or throttle the calls that can
 * do without it); the refusal is logged, naming the command, the key and
 * the reply (the same one again at most every 10 s). */
static int ftc__redis_seen(ftc_agent_t *a, int rc)
{
    bool down = rc && ftc__redis_outage(a, rc);
    if (rc && !down) {
        const char *why = rc == FTC_EREDIS ? ftc_redis_errstr(ftc_ctl_redis(a->ctl))
                                           : ftc_ctl_errstr(a->ctl);
        uint64_t now = ftc_now_ns();
        if (strncmp(why, a->redis_refused, sizeof a->redis_refused - 1) ||
            now - a->redis_refused_ns > 10000000000ull) {
            FTC_WARN("agent", "Redis refused a request (%s): it answers, so it is not taken "
                     "for down; the data it holds there is not what the agent expects", why);
            snprintf(a->redis_refused, sizeof a->redis_refused, "%s", why);
            a->redis_refused_ns = now;
        }
    }
    if (down && !a->redis_down)
        FTC_WARN("agent", "Redis does not answer (%s): a fetch round uses the peer addresses "
                 "already known and a restore checks copies by their content until it does",
                 ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
    else if (!down && a->redis_down)
        FTC_INFO("agent", "Redis answers again");
    a->redis_down = down;
    if (down)
        a->redis_fail_ns = ftc_now_ns();
    return rc;
}

/* Records e in the job's event stream. With Redis known down (a->redis_down)
 * the XADD would cost the control loop a command timeout, in which no rank
 * is answered: the event goes to the detector's queue instead, which
 * publishes it once Redis answers (without a detector it is logged and
 * dropped). An XADD that fails for want of Redis is recorded
 * (ftc__redis_seen) and its event queued the same way. */
static void ftc__event(ftc_agent_t *a, const ftc_ctl_event_t *e)
{
    int rc = a->redis_down ? FTC_EREDIS : ftc_ctl_event(a->ctl, e);
    if (rc && !a->redis_down && !ftc__redis_outage(a, rc))
        FTC_WARN("agent", "event %s (rank %d, step %" PRId64 ") refused by Redis: %s", e->kind,
                 e->rank, e->step, ftc_ctl_errstr(a->ctl));
    if (!rc || (!a->redis_down && !ftc__redis_outage(a, rc)))
        return;
    if (!a->redis_down)
        ftc__redis_seen(a, rc);
    if (a->det)
        ftc_detector_report(a->det, e->kind, e->rank, e->step, e->detail);
    else
        FTC_WARN("agent", "event %s (rank %d, step %" PRId64 ") not recorded: Redis does not "
                 "answer", e->kind, e->rank, e->step);
}

static void ftc__queue(ftc_agent_t *a, ftc__job_t *j)
{
    pthread_mutex_lock(&a->mu);
    j->next = NULL;
    ftc__job_t **p = &a->todo;
    while (*p)
        p = &(*p)->next;
    *p = j;
    pthread_mutex_unlock(&a->mu);
}

/* An ERROR answer to the request whose id is seq (agent_proto.h). */
static void ftc__reply_error(int fd, uint64_t seq, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void ftc__reply_error(int fd, uint64_t seq, int code, const char *fmt, ...)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_ERROR);
    m.seq = seq;
    m.status = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    ftc_err_t err = {0};
    ftc_ap_send(fd, &m, 1000, &err);
}

/* Tells a rank, asynchronously, that a sealed step will not be committed. */
static void ftc__not_committed(int fd, int code, uint64_t step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void ftc__not_committed(int fd, int code, uint64_t step, const char *fmt, ...)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_NOT_COMMITTED);
    m.status = code;
    m.step = step;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    ftc_err_t err = {0};
    if (fd >= 0)
        ftc_ap_send(fd, &m, 1000, &err);
}

static ftc__rank_t *ftc__rank_of_fd(ftc_agent_t *a, int fd)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].fd == fd)
            return &a->ranks[i];
    return NULL;
}

/* The peers that hold this node's replicas: the next nodes in ring order,
 * skipping nodes of our failure domain (when domains are set). */
static int ftc__placement(ftc_agent_t *a, uint32_t *out, int want)
{
    int n = 0;
    for (uint32_t step = 1; step < a->o.nodes && n < want; step++) {
        uint32_t node = (a->o.index + step) % a->o.nodes;
        ftc__peer_t *p = &a->peers[node];
        if (!p->known || !p->alive)
            continue;
        if (a->domain[0] && !strcmp(p->domain, a->domain))
            continue;
        if (p->stale)
            return 0; /* its agent of this generation publishes soon: wait for it */
        out[n++] = node;
    }
    return n;
}

/* ---- Redis: peers, secret, generation ------------------------------------------------- */

static int ftc__publish_address(ftc_agent_t *a, ftc_err_t *err)
{
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    pthread_mutex_lock(&a->mu);
    size_t len = a->my_addr_len;
    memcpy(addr, a->my_addr, len);
    a->republish = false;
    pthread_mutex_unlock(&a->mu);
    char hex[2 * FTC_FABRIC_ADDR_MAX + 1], val[2 * FTC_FABRIC_ADDR_MAX + 200], field[16], key[160];
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", addr[i]);
    /* the generation lets a supervisor tell this incarnation's address from
     * the one a previous agent of the node left (plugins/run.c) */
    snprintf(val, sizeof val, "%s %s %s %" PRIu64, hex, a->node_id,
             a->domain[0] ? a->domain : "-", a->generation);
    snprintf(field, sizeof field, "%u", a->o.index);
    int rc = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, NULL, "HSET",
                            ftc_ctl_key(a->ctl, "fabric", key, sizeof key), field, val, NULL);
    if (rc)
        return ftc_err_set(err, rc, "publishing the fabric address: %s", ftc_ctl_errstr(a->ctl));
    return 0;
}

/* Opens the endpoint and the engine on it; records our address. */
static int ftc__open_transport(ftc_agent_t *a, ftc_err_t *err)
{
    int rc = ftc_fabric_open(&a->fopt, &a->fab, err);
    if (rc)
        return rc;
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof addr;
    rc = ftc_fabric_getname(a->fab, addr, &len);
    if (rc)
        return ftc_err_set(err, rc, "fabric getname failed");
    a->ropt.fab = a->fab;
    a->repl = ftc_repl_create(&a->ropt, err);
    if (!a->repl)
        return err ? err->code : FTC_EFABRIC;
    /* peers fetch our ranks' shards from our slots: parity members, and ranks
     * that re-partition after a layout change */
    ftc_repl_serve_local(a->repl, a->ns);
    pthread_mutex_lock(&a->mu);
    memcpy(a->my_addr, addr, len);
    a->my_addr_len = len;
    a->republish = true;
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* The endpoint broke (a send to a peer that died could not be cancelled):
 * throw it away with the engine, open new ones, re-add every peer and have
 * the control loop publish our new address. The replica slots stay. */
static void ftc__rebuild_transport(ftc_agent_t *a)
{
    a->rebuilds++;
    FTC_WARN("agent", "rebuilding the fabric endpoint (%" PRIu64 " so far): %s", a->rebuilds,
             a->repl ? ftc_repl_errstr(a->repl) : "");
    ftc_repl_destroy(a->repl);
    a->repl = NULL;
    ftc_fabric_close(a->fab);
    a->fab = NULL;
    ftc_err_t err = {0};
    for (int attempt = 0; !atomic_load(&a->stop); attempt++) {
        if (ftc__open_transport(a, &err) == 0)
            break;
        FTC_ERROR("agent", "reopening the fabric endpoint: %s", err.msg);
        ftc_repl_destroy(a->repl);
        a->repl = NULL;
        ftc_fabric_close(a->fab);
        a->fab = NULL;
        ftc_sleep_ms(attempt < 10 ? 100 : 1000);
    }
    if (!a->repl)
        return;
    ftc_repl_set_generation(a->repl, a->generation);
    for (uint32_t i = 0; i < a->o.nodes; i++)
        if (a->rpeers[i].known)
            ftc_repl_peer_add(a->repl, i, a->raddr[i], a->raddr_len[i]);
}

static int ftc__hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Marks each known peer alive when its heartbeat key exists (one MGET). */
static void ftc__refresh_liveness(ftc_agent_t *a)
{
    const char **argv = calloc((size_t)a->o.nodes + 1, sizeof *argv);
    char (*keys)[200] = calloc(a->o.nodes, sizeof *keys);
    uint32_t *idx = calloc(a->o.nodes, sizeof *idx);
    int n = 0;
    if (!argv || !keys || !idx)
        goto out;
    argv[0] = "MGET";
    for (uint32_t i = 0; i < a->o.nodes; i++) {
        if (!a->peers[i].known)
            continue;
        char suffix[FTC_CTL_NODE_MAX + 8];
        snprintf(suffix, sizeof suffix, "hb:%s", a->peers[i].node_id);
        ftc_ctl_key(a->ctl, suffix, keys[n], sizeof keys[n]);
        argv[n + 1] = keys[n];
        idx[n++] = i;
    }
    if (!n)
        goto out;
    ftc_redis_reply_t *rep = NULL;
    /* recorded like the HGETALL before it: failed, the next refresh waits for
     * the probe interval instead of costing a command timeout every 500 ms */
    if (ftc__redis_seen(a, ftc_redis_cmd(ftc_ctl_redis(a->ctl), true, &rep, n + 1, argv,
                                         NULL)) == 0) {
        ftc_redis_reply_t **el;
        size_t cnt;
        ftc_err_t err = {0};
        if (ftc_redis_want_array(rep, "MGET heartbeats", n, &el, &cnt, &err) == 0)
            for (int i = 0; i < n; i++) {
                const char *v;
                size_t vl;
                bool alive = ftc_redis_want_str(el[i], "heartbeat", &v, &vl, &err) == 0;
                if (a->peers[idx[i]].alive != alive)
                    FTC_INFO("agent", "node %u (%s) is %s", idx[i], a->peers[idx[i]].node_id,
                             alive ? "alive" : "gone (no heartbeat)");
                a->peers[idx[i]].alive = alive;
            }
    }
    ftc_redis_reply_free(rep);
out:
    free(argv);
    free(keys);
    free(idx);
}

/* Reads ftc:{job}:fabric and queues newly seen peers for the engine. */
static void ftc__refresh_peers(ftc_agent_t *a)
{
    char key[160];
    ftc_redis_reply_t *rep = NULL;
    if (ftc__redis_seen(a, ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HGETALL",
                                          ftc_ctl_key(a->ctl, "fabric", key, sizeof key),
                                          NULL)) != 0)
        return;
    ftc_redis_reply_t **el;
    size_t n;
    ftc_err_t err = {0};
    if (ftc_redis_want_array(rep, key, -1, &el, &n, &err) == 0) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            const char *f, *v;
            size_t fl, vl;
            if (ftc_redis_want_str(el[i], key, &f, &fl, &err) ||
                ftc_redis_want_str(el[i + 1], key, &v, &vl, &err))
                continue;
            char *end;
            unsigned long node = strtoul(f, &end, 10);
            if (end == f || node >= a->o.nodes || node == a->o.index)
                continue;
            char hex[2 * FTC_FABRIC_ADDR_MAX + 1], nid[FTC_CTL_NODE_MAX + 1], dom[64];
            unsigned long long egen = 0;
            int nf = sscanf(v, "%512s %64s %63s %llu", hex, nid, dom, &egen);
            if (nf < 3 || strlen(hex) % 2)
                continue;
            ftc__peer_t *p = &a->peers[node];
            /* an address an earlier generation's agent published: that
             * agent is stopping or gone (ftc run restarts every agent per
             * generation) and the new one publishes soon. No push goes to
             * it (ftc__placement waits, refreshing every 100 ms): a push to
             * a stale address can spin in rxm's connect until its deadline,
             * holding the replication thread, so that even the new address
             * could not be applied (test_run.sh scenario 1 hung so, one run
             * in two). Fetches and gathers may still try it: they retry. */
            p->stale = nf == 4 && egen < a->generation;
            if (p->known && !strcmp(p->addr_hex, hex))
                continue;
            if (p->known)
                FTC_INFO("agent", "node %lu (%s) has a new address: a restarted agent", node, nid);
            ftc__job_t *j = calloc(1, sizeof *j);
            if (!j)
                continue;
            j->kind = JOB_PEER;
            j->node = (uint32_t)node;
            j->addr_len = strlen(hex) / 2;
            bool ok = j->addr_len <= sizeof j->addr;
            for (size_t k = 0; ok && k < j->addr_len; k++) {
                int hi = ftc__hexval(hex[2 * k]), lo = ftc__hexval(hex[2 * k + 1]);
                ok = hi >= 0 && lo >= 0;
                j->addr[k] = (uint8_t)(hi << 4 | lo);
            }
            if (!ok) {
                FTC_WARN("agent", "%s: field %lu holds a malformed address", key, node);
                free(j);
                continue;
            }
            j->replace = p->known;
            p->known = true;
            snprintf(p->addr_hex, sizeof p->addr_hex, "%s", hex);
            snprintf(p->node_id, sizeof p->node_id, "%s", nid);
            snprintf(p->domain, sizeof p->domain, "%s", strcmp(dom, "-") ? dom : "");
            ftc__queue(a, j);
        }
    }
    ftc_redis_reply_free(rep);
    ftc__refresh_liveness(a);
}

/* The job secret: given, or shared through Redis (first agent sets it). */
static int ftc__secret(ftc_agent_t *a, uint8_t out[32], size_t *len, ftc_err_t *err)
{
    if (a->o.secret) {
        if (a->o.secret_len < 16 || a->o.secret_len > 32)
            return ftc_err_set(err, FTC_ECONFIG, "the job secret must be 16..32 bytes");
        memcpy(out, a->o.secret, a->o.secret_len);
        *len = a->o.secret_len;
        return 0;
    }
    *len = 16;
    return ftc_ctl_job_secret(a->ctl, out, err);
}

/* Generation 1 is set by whichever agent gets the lease first; the others
 * wait for it (bounded). */
static int ftc__generation(ftc_agent_t *a, ftc_err_t *err)
{
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    char holder[160];
    snprintf(holder, sizeof holder, "%s:%d:agent-start", a->node_id, (int)getpid());
    for (;;) {
        uint64_t gen;
        uint32_t world;
        int rc = ftc_ctl_generation(a->ctl, &gen, &world);
        if (rc)
            return ftc_err_set(err, rc, "reading the generation: %s", ftc_ctl_errstr(a->ctl));
        if (gen > 0) {
            a->generation = gen;
            a->world = world;
            return 0;
        }
        bool held = false;
        uint64_t ep;
        if (ftc_ctl_lease_acquire(a->ctl, holder, 2000, &held, &ep) == 0 && held) {
            uint64_t out;
            ftc_ctl_generation_bump(a->ctl, holder, ep, 0, a->o.nodes * a->o.ranks_per_node,
                                    "job start", &out);
            ftc_ctl_lease_release(a->ctl, holder, ep);
            continue;
        }
        if (ftc_deadline_expired(d))
            return ftc_err_set(err, FTC_ETIMEDOUT, "no generation was set within 30 s");
        ftc_sleep_ms(20);
    }
}

/* ---- replication thread ------------------------------------------------------------------- */

/* FETCH (replication thread): whether buf, a shard that verified by its
 * content (as it landed, or in this node's replica store), is the version
 * the commit record holds (j->rec_head, when known). Another version of the
 * step (a replica left from an earlier generation before a rollback re-ran
 * the step, a stale copy) is refused like a corrupt one, the holder (where)
 * named: j->refused, j->refusal, passed_over and a warning. A shard whose
 * structure or step is not the one asked for passes here: the control loop
 * refuses it, naming why. */
static bool ftc__job_is_recorded(ftc__job_t *j, const uint8_t *buf, uint64_t size,
                                 const char *where)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (!j->rec_known || ftc_shard_open(&v, buf, size, 0, &err) != 0 || v.info.step != j->step ||
        v.head_xxh3 == j->rec_head)
        return true;
    snprintf(j->refusal, sizeof j->refusal, "%s: rank %u's shard of step %" PRIu64 " has head "
             "checksum %016" PRIx64 ", not the committed version's %016" PRIx64 " (another "
             "version of that step): refused", where, j->owner, j->step, v.head_xxh3,
             j->rec_head);
    FTC_WARN("agent", "fetch: %s", j->refusal);
    j->refused = true;
    size_t pl = strlen(j->passed_over);
    if (pl + 3 < sizeof j->passed_over)
        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%s%s", pl ? "; " : "",
                 j->refusal);
    return false;
}

/* FETCH (replication thread): appends why candidate peer could not be
 * asked (its fetch did not start) to j's detail and passed_over. */
static void ftc__fetch_not_started(ftc__job_t *j, uint32_t peer, const char *why)
{
    size_t dl = strlen(j->detail);
    snprintf(j->detail + dl, sizeof j->detail - dl, "%speer %u: not asked: %s", dl ? "; " : "",
             peer, why);
    size_t pl = strlen(j->passed_over);
    if (pl + 3 < sizeof j->passed_over)
        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%speer %u: not asked: %s",
                 pl ? "; " : "", peer, why);
}

/* FETCH (replication thread): starts j's fetch from its next candidate
 * holder that can be asked. A start that fails (the holder is not a peer of
 * the engine: its address could not be added; the GET could not be sent)
 * passes over that holder, its reason kept (the job's detail, passed_over),
 * and tries the next one at once: one unreachable holder used to end the
 * whole round although the next one held the shard. A holder that is
 * already being asked for the same owner (FTC_EINPROGRESS: another job's
 * fetch of that shard, e.g. two ranks restoring it at once; the engine runs
 * one fetch per holder and owner) is asked again at the next turn of the
 * loop (j stays not started), until agent.timeout_ms after it was first
 * found busy, then passed over too. A broken endpoint ends the job
 * (FTC_EFABRIC): the control loop asks again on the new one. With no
 * candidate left the job ends with the last start's error (j->x < 0). */
static void ftc__fetch_start(ftc_agent_t *a, ftc__job_t *j)
{
    int rc = FTC_ENOENT;
    while (j->next_peer < j->npeers) {
        uint32_t peer = j->peers[j->next_peer];
        ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
        rc = ftc_repl_fetch_into(a->repl, peer, j->owner, j->step, j->dst, j->dst_cap, d, &j->x);
        if (rc == 0) {
            j->next_peer++;
            j->busy_since_ns = 0;
            j->started = true;
            return;
        }
        if (rc == FTC_EFABRIC)
            break;
        char why[300];
        snprintf(why, sizeof why, "%s", ftc_repl_errstr(a->repl));
        if (rc == FTC_EINPROGRESS) {
            uint64_t now = ftc_now_ns();
            if (!j->busy_since_ns) {
                j->busy_since_ns = now;
                FTC_INFO("agent", "fetch of rank %u's step %" PRIu64 ": peer %u is busy fetching "
                         "rank %u's shard for another request: asked again (at most %d ms)",
                         j->owner, j->step, peer, j->owner, a->o.timeout_ms);
            }
            if (now - j->busy_since_ns < (uint64_t)a->o.timeout_ms * 1000000ull) {
                j->x = -1; /* not started: asked again at the next turn */
                return;
            }
            snprintf(why, sizeof why, "still busy fetching rank %u's shard for another request "
                     "after %d ms", j->owner, a->o.timeout_ms);
        }
        j->busy_since_ns = 0;
        j->next_peer++;
        FTC_WARN("agent", "fetch of rank %u's step %" PRIu64 ": peer %u not asked (%s)%s",
                 j->owner, j->step, peer, why,
                 j->next_peer < j->npeers ? "; the next holder" : "");
        ftc__fetch_not_started(j, peer, why);
    }
    j->rc = rc;
    j->x = -1;
    j->started = true;
    if (rc == FTC_EFABRIC)
        snprintf(j->detail, sizeof j->detail, "%s", ftc_repl_errstr(a->repl));
}

static void *ftc__repl_main(void *arg)
{
    ftc_agent_t *a = arg;
    ftc__job_t *active = NULL;
    while (!atomic_load(&a->stop)) {
        if (!a->repl) { /* a rebuild that has not succeeded yet */
            ftc__rebuild_transport(a);
            continue;
        }
        pthread_mutex_lock(&a->mu);
        ftc__job_t *fresh = a->todo;
        a->todo = NULL;
        pthread_mutex_unlock(&a->mu);
        while (fresh) {
            ftc__job_t *j = fresh;
            fresh = j->next;
            j->next = NULL;
            if (j->kind == JOB_PEER) {
                a->rpeers[j->node].known = true;
                memcpy(a->raddr[j->node], j->addr, j->addr_len);
                a->raddr_len[j->node] = j->addr_len;
                if (j->replace)
                    ftc_repl_peer_remove(a->repl, j->node);
                int rc = ftc_repl_peer_add(a->repl, j->node, j->addr, j->addr_len);
                if (rc)
                    FTC_WARN("agent", "adding peer node %u: %s", j->node,
                             ftc_repl_errstr(a->repl));
                free(j);
                continue;
            }
            j->next = active;
            active = j;
        }
        for (ftc__job_t *j = active; j; j = j->next) {
            if (j->started || j->kind == JOB_GATHER) /* a gather starts its own fetches */
                continue;
            if (j->kind == JOB_FETCH && !j->local_tried) {
                /* this node may hold the replica itself (its ring predecessor's) */
                j->local_tried = true;
                uint64_t hsize = 0;
                const uint8_t *held = NULL;
                int hrc = ftc_repl_held_step(a->repl, j->owner, j->step, &held, &hsize);
                if (hrc == 0 &&
                    !ftc__job_is_recorded(j, held, hsize, "this node's replica store")) {
                    hrc = FTC_ECORRUPT; /* another version of the step: the peers next */
                    snprintf(j->detail, sizeof j->detail, "%s", j->refusal);
                }
                if (hrc == 0 &&
                    (j->buf = j->dst && hsize <= j->dst_cap ? j->dst
                                                            : malloc(hsize ? hsize : 1)) != NULL) {
                    ftc_mem_prefault(j->buf, hsize);
                    memcpy(j->buf, held, hsize); /* moved: the rank verifies its slot */
                    j->buf_size = hsize;
                    j->rc = 0;
                    j->x = -1;
                    j->started = true;
                    snprintf(j->detail, sizeof j->detail, "this node's replica store");
                    continue;
                }
            }
            if (j->kind == JOB_FETCH && j->next_peer >= j->npeers) {
                j->x = -1;
                j->started = true;
                if (j->refused && !j->npeers) { /* the store's copy was refused: why */
                    j->rc = FTC_ECORRUPT;
                    size_t dl = strlen(j->detail);
                    snprintf(j->detail + dl, sizeof j->detail - dl, "; no live peer");
                    continue;
                }
                j->rc = FTC_ENOENT; /* not held here, no live peer to ask */
                snprintf(j->detail, sizeof j->detail, "not in this node's replica store, no "
                         "live peer");
                continue;
            }
            if (j->kind == JOB_FETCH) {
                ftc__fetch_start(a, j);
                continue;
            }
            ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
            int rc = ftc_repl_push_keep(a->repl, j->owner, j->step, j->shard, j->size, j->peers,
                                        j->npeers, j->par ? -1 : j->keep, d, &j->x);
            j->started = true;
            if (rc) {
                j->rc = rc;
                j->x = -1;
                snprintf(j->detail, sizeof j->detail, "%s", ftc_repl_errstr(a->repl));
            }
        }
        bool broken = ftc_repl_progress(a->repl, ftc_deadline_in_ms(active ? 5 : 2), true) ==
                          FTC_EFABRIC ||
                      ftc_fabric_health(a->fab) != 0;
        ftc__job_t **pp = &active;
        while (*pp) {
            ftc__job_t *j = *pp;
            ftc_repl_status_t st;
            bool gather = j->kind == JOB_GATHER;
            if (!gather && !j->started) { /* a FETCH whose holder is busy (ftc__fetch_start) */
                pp = &j->next;
                continue;
            }
            bool finished = gather ? ftc__gather_poll(a->repl, j->gather, broken) : j->x < 0;
            if (!finished && !gather && ftc_repl_status(a->repl, j->x, &st) == 0 && st.done) {
                j->rc = st.rc;
                j->acked = st.acked;
                j->failed = st.failed;
                const char *reason = st.detail;
                if (j->kind == JOB_FETCH && st.rc == 0 &&
                    ftc_repl_take(a->repl, j->x, &j->buf, &j->buf_size) == 0) {
                    j->landed = j->dst && j->buf == j->dst;
                    /* verified by its content as it landed; the version too (I1) */
                    char where[32];
                    snprintf(where, sizeof where, "peer %u", j->peers[j->next_peer - 1]);
                    if (!ftc__job_is_recorded(j, j->buf, j->buf_size, where)) {
                        if (j->buf != j->dst)
                            free(j->buf);
                        j->buf = NULL; /* never delivered: refused like a corrupt copy */
                        j->buf_size = 0;
                        j->landed = false;
                        j->rc = FTC_ECORRUPT;
                        reason = j->refusal;
                    }
                }
                if (j->kind == JOB_FETCH && (j->rc == FTC_ENOENT || reason == j->refusal))
                    j->lacking++;
                if (j->kind == JOB_FETCH && j->detail[0] && j->rc) { /* every candidate's reason */
                    size_t dl = strlen(j->detail);
                    snprintf(j->detail + dl, sizeof j->detail - dl, "; %s", reason);
                } else {
                    snprintf(j->detail, sizeof j->detail, "%s", reason);
                }
                ftc_repl_release(a->repl, j->x);
                finished = true;
                if (j->kind == JOB_FETCH && j->rc && j->next_peer < j->npeers) {
                    size_t pl = strlen(j->passed_over);
                    /* a peer that does not hold it (FTC_ENOENT) is no news; a
                     * refusal is in passed_over already */
                    if (j->rc != FTC_ENOENT && reason == st.detail &&
                        pl + 3 < sizeof j->passed_over)
                        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%s%s",
                                 pl ? "; " : "", st.detail);
                    j->started = false; /* try the next candidate */
                    j->rc = 0;
                    finished = false;
                }
            }
            if (!finished && broken && !gather) { /* the endpoint goes away with its transfers */
                if (j->kind == JOB_FETCH && j->next_peer < j->npeers) {
                    j->started = false; /* the next candidate, on the new endpoint */
                    pp = &j->next;
                    continue;
                }
                j->rc = FTC_EFABRIC;
                if (!j->detail[0])
                    snprintf(j->detail, sizeof j->detail, "the fabric endpoint broke");
                finished = true;
            }
            if (!finished) {
                pp = &j->next;
                continue;
            }
            *pp = j->next;
            pthread_mutex_lock(&a->mu);
            j->next = a->done;
            a->done = j;
            pthread_mutex_unlock(&a->mu);
            uint64_t one = 1;
            ssize_t w = write(a->evfd, &one, sizeof one);
            (void)w;
        }
        if (broken && !atomic_load(&a->stop)) { /* a stop aborts the endpoint: no rebuild */
            ftc__rebuild_transport(a);
            uint64_t one = 1;
            ssize_t w = write(a->evfd, &one, sizeof one); /* publish the new address */
            (void)w;
        }
    }
    while (active) {
        ftc__job_t *j = active;
        active = j->next;
        ftc__job_free(j);
    }
    return NULL;
}

/* ---- slots and commits ---------------------------------------------------------------------- */

/* Index of the slot holding the newest committed version, or -1. */
static int ftc__newest_committed(const ftc__rank_t *r)
{
    int best = -1;
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_COMMITTED && (best < 0 || r->step[i] > r->step[best]))
            best = i;
    return best;
}

/* A slot the rank may write, or -1 when all are busy: never the newest
 * committed version (I1/I3), a sealed one (replicating or waiting for its
 * commit), one being written, or one the persist thread is reading. A slot
 * whose memory is reserved first (an empty one, else the oldest superseded
 * version), else one not reserved yet: a rank whose versions commit before
 * its next checkpoint then never touches its third slot's memory. */
static int ftc__free_slot(const ftc__rank_t *r)
{
    int keep = ftc__newest_committed(r), best = -1, best_rank = 0;
    for (int i = 0; i < NS; i++) {
        if (i == keep || r->pinned[i] || r->st[i] == SL_SEALED || r->st[i] == SL_WRITING ||
            r->landing == i + 1)
            continue;
        int rank = r->slot[i].unreserved ? 2 : r->st[i] == SL_EMPTY ? 0 : 1;
        if (best < 0 || rank < best_rank ||
            (rank == best_rank && rank == 1 && r->step[i] < r->step[best]))
            best = i, best_rank = rank;
    }
    return best;
}

/* The slot for a rank's BEGIN: ftc__free_slot's, unless checkpoint.inflight
 * is 1 and a version of the rank is sealed and not committed (a checkpoint
 * then waits for the previous one's commit, so a kill never loses more than
 * one step); 2, the default, is what the three slots allow. -1 when the
 * busy policy applies. */
static int ftc__begin_slot(const ftc_agent_t *a, const ftc__rank_t *r)
{
    for (int i = 0; i < NS && a->o.max_inflight == 1; i++)
        if (r->st[i] == SL_SEALED)
            return -1;
    return ftc__free_slot(r);
}

/* Reserves slot s of r if its creation deferred that (FTC_SLOT_DEFER): before
 * anything writes it. 0, or the error (the slot stays unwritable). */
static int ftc__slot_reserve(ftc__rank_t *r, int s, ftc_err_t *err)
{
    if (!r->slot[s].unreserved)
        return 0;
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_slot_reserve(&r->slot[s], err);
    FTC_DEBUG("agent", "rank %u: slot %d reserved in %.1f ms%s%s", r->rank, s,
              (double)(ftc_now_ns() - t0) / 1e6, rc ? ": " : "", rc ? err->msg : "");
    return rc;
}

static void ftc__send_begin_ok(ftc__rank_t *r, int slot, uint64_t step)
{
    ftc_err_t rerr = {0};
    if (ftc__slot_reserve(r, slot, &rerr)) {
        ftc__reply_error(r->fd, r->begin_seq, rerr.code, "checkpoint of step %" PRIu64 ": %s",
                         step, rerr.msg);
        return;
    }
    r->st[slot] = SL_WRITING;
    r->step[slot] = step;
    r->reported[slot] = false;
    r->aborted[slot] = false;
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_BEGIN_OK);
    m.seq = r->begin_seq;
    m.slot = (uint32_t)slot;
    m.step = step;
    ftc_err_t err = {0};
    ftc_ap_send(r->fd, &m, 1000, &err);
}

/* Answers r's parked BEGIN when a slot has become free (a commit superseded
 * a version, a push failed, a persist write ended). */
static void ftc__answer_begin(const ftc_agent_t *a, ftc__rank_t *r)
{
    if (!r->begin_waiting || r->fd < 0)
        return;
    int fs = ftc__begin_slot(a, r);
    if (fs >= 0) {
        r->begin_waiting = false;
        ftc__send_begin_ok(r, fs, r->begin_step);
    }
}

/* Reports r's slot s to the commit record. Not made while Redis is known
 * down (a->redis_down: it would cost a command timeout, in which no rank is
 * answered), and a report that fails for want of Redis is recorded so: the
 * version stays acked and unreported, and the commit poll, whose first call
 * finds out when Redis answers again, makes the report then. */
static void ftc__report_commit(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    if (a->redis_down) {
        FTC_DEBUG("agent", "commit report of rank %u step %" PRIu64 ": Redis does not answer; "
                  "made by the commit poll once it does", r->rank, r->step[s]);
        return;
    }
    int64_t committed;
    bool now;
    int rc = ftc_ctl_commit_report(a->ctl, a->generation, (int64_t)r->step[s], r->rank,
                                   r->checksum[s], &committed, &now);
    if (rc == FTC_ECANCELED) { /* the record's abort marker: another rank failed it */
        bool ab = false;
        uint32_t by = UINT32_MAX;
        char why[FTC_CTL_ABORT_WHY_MAX + 1] = "";
        FTC_INFO("agent", "commit report of rank %u step %" PRIu64 " refused: %s", r->rank,
                 r->step[s], ftc_ctl_errstr(a->ctl));
        int arc = ftc_ctl_commit_aborted(a->ctl, a->generation, (int64_t)r->step[s], &ab, &by,
                                         why, sizeof why);
        if (arc && ftc__redis_outage(a, arc))
            ftc__redis_seen(a, arc);
        if (!arc && ab) { /* else the next poll reads the marker, or reports again */
            r->reported[s] = true; /* nothing to report again: abandoned by the next poll */
            ftc__note_abort(a, r->step[s], by, why, false);
        }
        return;
    }
    if (rc) {
        if (ftc__redis_outage(a, rc))
            ftc__redis_seen(a, rc);
        FTC_WARN("agent", "commit report of rank %u step %" PRIu64 ": %s", r->rank, r->step[s],
                 ftc_ctl_errstr(a->ctl));
        return; /* retried by the poll */
    }
    r->reported[s] = true;
    if (committed > a->committed)
        a->committed = committed;
}

/* Hands this node's ranks' shards of step to the persist thread, pinning
 * their slots until it is done (ftc__persist_collect); false when the writer
 * is still busy with an earlier version (the caller retries at the next
 * commit). */
/* Whether slot s of r holds committed step `step`: the newest committed
 * version, or a superseded one kept (pinned) for the persist tier. */
static bool ftc__holds_committed(const ftc__rank_t *r, int s, uint64_t step)
{
    return r->step[s] == step &&
           (r->st[s] == SL_COMMITTED || (r->st[s] == SL_EMPTY && r->pinned[s]));
}

static bool ftc__persist(ftc_agent_t *a, uint64_t step)
{
    if (!a->pw)
        return true;
    const void *shards[FTC_AGENT_MAX_RANKS];
    uint64_t sizes[FTC_AGENT_MAX_RANKS];
    int where[FTC_AGENT_MAX_RANKS][2];
    int n = 0;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used)
            continue;
        for (int s = 0; s < NS; s++)
            if (ftc__holds_committed(r, s, step)) {
                where[n][0] = i, where[n][1] = s;
                shards[n] = r->slot[s].base;
                sizes[n++] = r->size;
                break;
            }
    }
    if (!n)
        return true;
    if (!ftc__persister_submit(a->pw, step, shards, sizes, n))
        return false;
    for (int k = 0; k < n; k++)
        a->ranks[where[k][0]].pinned[where[k][1]] = true;
    a->pwriting = (int64_t)step;
    return true;
}

/* Pins what the persist tier still needs (the step being written, the due
 * ones), unpins the rest. */
static void ftc__persist_pins(ftc_agent_t *a)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; s < NS; s++) {
            bool need = r->used && (int64_t)r->step[s] == a->pwriting && a->pwriting >= 0 &&
                        r->pinned[s];
            for (int q = 0; q < a->pqn && r->used && !need; q++)
                need = a->pq[q] >= 0 && ftc__holds_committed(r, s, (uint64_t)a->pq[q]);
            r->pinned[s] = need;
        }
    }
}

/* A committed step: queued for the persist tier when it is due (its slots
 * pinned at once, before a newer commit supersedes them). */
static void ftc__persist_due(ftc_agent_t *a, uint64_t step)
{
    if (!a->pw || a->o.persist_every <= 0 || (step + 1) % (uint64_t)a->o.persist_every != 0)
        return;
    bool queued = a->pwriting == (int64_t)step;
    for (int q = 0; q < a->pqn && !queued; q++)
        queued = a->pq[q] == (int64_t)step;
    if (!queued && a->pqn == (int)(sizeof a->pq / sizeof a->pq[0])) { /* pins bound it */
        FTC_WARN("agent", "persist tier: step %" PRIu64 " is due but %d older ones still wait; "
                 "skipping it on this node", step, a->pqn);
        return;
    }
    if (!queued)
        a->pq[a->pqn++] = (int64_t)step;
    /* every rank's slot of it (each rank's commit is seen in turn) */
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int s = 0; s < NS; s++)
            if (a->ranks[i].used && a->ranks[i].st[s] == SL_COMMITTED &&
                a->ranks[i].step[s] == step)
                a->ranks[i].pinned[s] = true;
}

/* Hands the oldest due step to the writer when it is idle. */
static void ftc__persist_kick(ftc_agent_t *a)
{
    while (a->pw && a->pqn > 0 && a->pwriting < 0) {
        uint64_t step = (uint64_t)a->pq[0];
        if (!ftc__persist(a, step))
            return; /* busy after all: the next collect kicks again */
        memmove(a->pq, a->pq + 1, (size_t)(a->pqn - 1) * sizeof a->pq[0]);
        a->pqn--;
        if (a->pwriting < 0)
            FTC_DEBUG("agent", "persist tier: step %" PRIu64 " is due but no slot of this node "
                      "holds it any more", step);
    }
}

/* Collects a finished persist write: unpins its slots, logs it, reports a
 * failure as an event, and answers BEGINs that waited for a pinned slot. */
static void ftc__persist_collect(ftc_agent_t *a)
{
    ftc__persist_result_t res;
    if (!a->pw || !ftc__persister_poll(a->pw, &res))
        return;
    a->pwriting = -1;
    ftc__persist_pins(a); /* the written step's slots are free again, due ones stay */
    ftc__persist_kick(a); /* the next due step */
    a->persist_rc = res.rc;
    snprintf(a->persist_detail, sizeof a->persist_detail, "%s", res.detail);
    if (!res.rc && (int64_t)res.step > a->persisted)
        a->persisted = (int64_t)res.step;
    if (res.rc) {
        FTC_WARN("agent", "persisting step %" PRIu64 ": %s", res.step, res.detail);
        ftc_ctl_event_t e = {.kind = "persist_failed", .node = a->node_id, .rank = -1,
                             .generation = a->generation, .step = (int64_t)res.step,
                             .detail = res.detail};
        ftc__event(a, &e);
    } else {
        FTC_INFO("agent", "persisted step %" PRIu64 " (%d shard(s)) in %.0f ms", res.step,
                 res.n_shards, res.ms);
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used)
            ftc__answer_begin(a, &a->ranks[i]);
}

/* Moves SEALED+reported slots to COMMITTED once the commit record says so. */
/* A sealed version this node reported, of a step older than the job's
 * committed step: committed only if the job's commit set has it. The
 * commit record never goes back, so a step it passed without every rank's
 * report (another rank skipped it, or abandoned it) never commits; it was
 * marked committed all the same (and the rank told COMMITTED, and the
 * persist tier given it as committed), which ftc_fetch_at_most and the
 * persist tier then returned (I1). Such a version is freed and the rank
 * told NOT_COMMITTED. False too while Redis does not answer (asked again at
 * the next poll); true for a step older than the set keeps (as before). */
static bool ftc__older_sealed_committed(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    if (a->redis_down) /* a command timeout for nothing: asked at a poll that reached Redis */
        return false;
    int rc = ftc_ctl_committed_at_most(a->ctl, (int64_t)r->step[s], 1, steps, gens, &n, &oldest);
    if (rc && ftc__redis_outage(a, rc))
        ftc__redis_seen(a, rc);
    if (rc)
        return false;
    if ((n == 1 && (uint64_t)steps[0] == r->step[s]) || oldest < 0 ||
        r->step[s] < (uint64_t)oldest)
        return true;
    FTC_WARN("agent", "rank %u: step %" PRIu64 " was never committed (the job committed step "
             "%" PRId64 " without it: another rank skipped or abandoned it); slot %d is free "
             "again", r->rank, r->step[s], a->committed, s);
    r->st[s] = SL_EMPTY;
    ftc__not_committed(r->fd, FTC_EIO, r->step[s], "step %" PRIu64 " not committed: the job "
                       "committed step %" PRId64 " without it (another rank skipped or "
                       "abandoned it)", r->step[s], a->committed);
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
    return false;
}

/* A slot a restarted agent kept sealed without knowing whether the commit
 * record holds its report (Redis did not answer at SLOTS): asked now, unless
 * Redis failed already in this poll (*down; set here when it fails). True
 * once the record holds this very version's report: it then commits like
 * any sealed version; false while that cannot be read, or when the record
 * does not hold it: the slot is then free, as at SLOTS (it cannot commit
 * without its report). */
static bool ftc__survivor_recheck(ftc_agent_t *a, ftc__rank_t *r, int s, bool *down)
{
    uint64_t rec = 0;
    bool found = false;
    if (*down || ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, a->generation,
                                                            (int64_t)r->step[s], r->rank, &rec,
                                                            &found)) != 0) {
        *down = true;
        return false;
    }
    r->unchecked[s] = false;
    if (found && rec == r->checksum[s]) {
        FTC_INFO("agent", "rank %u: slot %d's step %" PRIu64 " is reported to the commit record "
                 "(Redis answers again): kept sealed until it commits", r->rank, s, r->step[s]);
        return true;
    }
    FTC_INFO("agent", "rank %u: slot %d's step %" PRIu64 " (head %016" PRIx64 ") is not reported "
             "to the commit record%s: it cannot commit, the slot is free", r->rank, s, r->step[s],
             r->checksum[s], found ? " (another version of that step is)" : "");
    r->st[s] = SL_EMPTY;
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
    return false;
}

/* Abandons the sealed versions marked aborted: their step is one a rank of
 * this node failed to snapshot (ABORT), so it can never commit, and these
 * copies used to wait agent.timeout_ms, their slots taken, for a parked
 * BEGIN to abandon them. A version still being pushed or encoded waits for
 * that to end (the replication thread reads its slot; called again from its
 * end and from every poll). A reported one has its report withdrawn first,
 * as the timeout's abandon does (atomically unless the record reached the
 * step: then it is committed and kept); Redis away, tried again at the next
 * poll. The rank is told NOT_COMMITTED; its next version may then be pushed. */
static void ftc__abandon_aborted(ftc_agent_t *a)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; r->used && s < NS; s++) {
            if (r->st[s] != SL_SEALED || !r->aborted[s] || (r->pushed[s] && !r->acked[s]))
                continue;
            uint32_t by = UINT32_MAX;
            for (unsigned k = 0; k < a->naborted && k < FTC__ABORTED_KEEP; k++)
                if (a->aborted_step[k] == r->step[s])
                    by = a->aborted_rank[k];
            if (r->pushed[s]) { /* its report may be in the record */
                int64_t rec = -1;
                bool gone = false;
                int rc = a->redis_down ? FTC_EREDIS
                                       : ftc_ctl_commit_withdraw(a->ctl, a->generation,
                                                                 (int64_t)r->step[s], r->rank,
                                                                 &rec, &gone);
                if (rc && ftc__redis_outage(a, rc) && !a->redis_down)
                    ftc__redis_seen(a, rc);
                if (rc)
                    continue;
                if (!gone) {
                    r->aborted[s] = false; /* committed after all: the commit pass marks it */
                    if (rec > a->committed)
                        a->committed = rec;
                    continue;
                }
            }
            FTC_WARN("agent", "rank %u: step %" PRIu64 " abandoned at once: rank %u's snapshot "
                     "of it failed, so it can never commit; slot %d is free again", r->rank,
                     r->step[s], by, s);
            char detail[160];
            snprintf(detail, sizeof detail, "rank %u's snapshot of this step failed (ABORT): "
                     "abandoned at once, its report withdrawn", by);
            ftc_ctl_event_t e = {.kind = "checkpoint_abandoned", .node = a->node_id,
                                 .rank = (int)r->rank, .generation = a->generation,
                                 .step = (int64_t)r->step[s], .detail = detail};
            ftc__event(a, &e);
            r->st[s] = SL_EMPTY;
            r->aborted[s] = false;
            ftc__not_committed(r->fd, FTC_EIO, r->step[s], "step %" PRIu64 " not committed: "
                               "rank %u's snapshot of it failed", r->step[s], by);
            ftc__push_others(a, r, s); /* its next version waited for this one */
            ftc__answer_begin(a, r);   /* a BEGIN may have waited for this slot */
        }
    }
}

/* Whether a rank failed to snapshot step (ABORT here, or the commit
 * record's abort marker; remembered). */
static bool ftc__step_aborted(const ftc_agent_t *a, uint64_t step)
{
    for (unsigned k = 0; k < a->naborted && k < FTC__ABORTED_KEEP; k++)
        if (a->aborted_step[k] == step)
            return true;
    return false;
}

/* Queues the abort marker of step (rank's snapshot of it failed here) for
 * ftc__mark_aborts. The queue grows: with Redis down, any number of ABORTs
 * may come before it answers, and each marker is written then (the list of
 * remembered steps keeps the last FTC__ABORTED_KEEP only). Only if memory
 * runs out is a marker dropped, said in a warning (the other nodes then
 * abandon their copies of the step after agent.timeout_ms, as before
 * markers). */
static void ftc__queue_mark(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why)
{
    if (a->nmarks == a->marks_cap) {
        size_t cap = a->marks_cap ? 2 * a->marks_cap : FTC__ABORTED_KEEP;
        struct ftc__abort_mark *m = realloc(a->marks, cap * sizeof *m);
        if (!m) {
            FTC_WARN("agent", "abort marker of step %" PRIu64 " (rank %u) dropped: out of "
                     "memory for the %zu markers Redis has not taken yet; the other nodes "
                     "abandon the step after agent.timeout_ms", step, rank, a->nmarks);
            return;
        }
        a->marks = m;
        a->marks_cap = cap;
    }
    struct ftc__abort_mark *m = &a->marks[a->nmarks++];
    m->step = step;
    m->gen = a->generation;
    m->rank = rank;
    snprintf(m->why, sizeof m->why, "%s", why ? why : "");
}

/* Remembers that rank's snapshot of step failed — an ABORT of this node's
 * rank (local: its abort marker still to be written to the commit record),
 * or another node's, read from the record's marker — and marks this node's
 * sealed copies of the step aborted (the caller abandons them). A step
 * remembered already is left as it is (its first failure names it). */
static void ftc__note_abort(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why,
                            bool local)
{
    if (!ftc__step_aborted(a, step)) {
        unsigned k = a->naborted++ % FTC__ABORTED_KEEP;
        a->aborted_step[k] = step;
        a->aborted_rank[k] = rank;
        snprintf(a->aborted_why[k], sizeof a->aborted_why[k], "%s", why ? why : "");
        atomic_store(&a->aborted_stop[k], step + 1);
        if (local)
            ftc__queue_mark(a, step, rank, why);
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int o = 0; a->ranks[i].used && o < NS; o++)
            if (a->ranks[i].st[o] == SL_SEALED && a->ranks[i].step[o] == step)
                a->ranks[i].aborted[o] = true;
}

/* Writes the abort marker of each step a rank of this node failed to
 * snapshot into the step's commit record (ftc_ctl_commit_abort): the
 * commit script refuses the step from then on (I3), and the other nodes'
 * commit polls abandon their copies of it at once (ftc__poll_abort_markers)
 * instead of after agent.timeout_ms. Not while Redis is known down (a
 * command timeout in which no rank is answered): the commit poll writes it
 * once Redis answers. A marker of an earlier generation is moot (the step
 * can no longer commit in that generation's record from this node's
 * report), as is one the record is past. */
static void ftc__mark_aborts(ftc_agent_t *a)
{
    size_t done = 0; /* the queue's first done markers are written (or moot) */
    for (; done < a->nmarks && !a->redis_down; done++) {
        const struct ftc__abort_mark *m = &a->marks[done];
        if (m->gen != a->generation)
            continue;
        int64_t rec = -1;
        bool marked = false;
        int rc = ftc_ctl_commit_abort(a->ctl, a->generation, (int64_t)m->step, m->rank, m->why,
                                      &rec, &marked);
        if (rc && ftc__redis_outage(a, rc)) {
            ftc__redis_seen(a, rc);
            break;
        }
        /* written, or refused: not asked again */
        if (rc)
            FTC_WARN("agent", "abort marker of step %" PRIu64 " (rank %u): %s", m->step,
                     m->rank, ftc_ctl_errstr(a->ctl));
        else if (!marked)
            FTC_DEBUG("agent", "abort marker of step %" PRIu64 ": the commit record is at "
                      "step %" PRId64 " already", m->step, rec);
        else
            FTC_INFO("agent", "step %" PRIu64 ": abort marker written to its commit record "
                     "(rank %u failed; the other nodes abandon the step)", m->step, m->rank);
    }
    if (done) {
        memmove(a->marks, a->marks + done, (a->nmarks - done) * sizeof *a->marks);
        a->nmarks -= done;
    }
}

/* ABORT: r's snapshot of m->step, begun in slot m->slot, failed (its copy,
 * its seal or its SEALED). The step can never commit without r's report:
 * r's slot is free again, this node's other ranks' copies of the step are
 * abandoned now (and any sealed later), and a checkpoint_failed event
 * records it. No answer. */
static void ftc__on_abort(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    for (int i = 0; i < NS; i++)
        if ((r->st[i] == SL_SEALED || r->st[i] == SL_COMMITTED) && r->step[i] == m->step) {
            FTC_WARN("agent", "rank %u: ABORT of step %" PRIu64 ", which it sealed already "
                     "(slot %d, %s): ignored", r->rank, m->step, i, ftc__sl_name[r->st[i]]);
            return;
        }
    int s = (int)m->slot;
    if (r->st[s] == SL_WRITING && r->step[s] == m->step && r->landing != s + 1)
        r->st[s] = SL_EMPTY; /* never sealed: nothing to withdraw */
    FTC_WARN("agent", "rank %u: its snapshot of step %" PRIu64 " failed (%s): the step is "
             "abandoned on this node", r->rank, m->step, m->text);
    char detail[320];
    snprintf(detail, sizeof detail, "the rank's snapshot failed: %.280s", m->text);
    ftc_ctl_event_t e = {.kind = "checkpoint_failed", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)m->step,
                         .detail = detail};
    ftc__event(a, &e);
    ftc__note_abort(a, m->step, r->rank, m->text, true);
    ftc__mark_aborts(a); /* the other nodes' agents learn it from the commit record */
    ftc__abandon_aborted(a);
    ftc__answer_begin(a, r);
}

/* Asks the commit record of each step this node holds sealed, above the
 * committed step and not known aborted, whether a rank of another node
 * failed to snapshot it (the abort marker its agent wrote, ftc__mark_aborts):
 * such a step is noted aborted, and its copies here are abandoned at once
 * (ftc__abandon_aborted) instead of waiting for agent.timeout_ms. Not asked
 * when Redis failed already in this poll (*down; set here when it fails). */
/* How often the commit poll looks for other nodes' abort markers: one HGET
 * per sealed step above the committed one, so not on every 10 ms pass (a
 * job checkpointing every step always has one); an abort still saves all
 * but this of agent.timeout_ms, and a refused commit report reads the
 * marker at once. */
#define FTC__ABORT_POLL_MS 100

static void ftc__poll_abort_markers(ftc_agent_t *a, bool *down)
{
    uint64_t now = ftc_now_ns();
    if (now - a->last_abort_poll_ns < (uint64_t)FTC__ABORT_POLL_MS * 1000000)
        return;
    a->last_abort_poll_ns = now;
    uint64_t asked[16];
    int nasked = 0;
    bool noted = false;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS && !*down; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; r->used && s < NS && !*down; s++) {
            if (r->st[s] != SL_SEALED || r->aborted[s] || (int64_t)r->step[s] <= a->committed ||
                ftc__step_aborted(a, r->step[s]))
                continue;
            bool seen = false;
            for (int k = 0; k < nasked && !seen; k++)
                seen = asked[k] == r->step[s];
            if (seen || nasked == (int)(sizeof asked / sizeof asked[0]))
                continue; /* asked in this poll; beyond 16 steps, at the next one */
            asked[nasked++] = r->step[s];
            bool ab = false;
            uint32_t by = 0;
            char why[FTC_CTL_ABORT_WHY_MAX + 1];
            int rc = ftc_ctl_commit_aborted(a->ctl, a->generation, (int64_t)r->step[s], &ab, &by,
                                            why, sizeof why);
            if (rc && ftc__redis_outage(a, rc)) {
                ftc__redis_seen(a, rc);
                *down = true;
            } else if (rc) {
                FTC_DEBUG("agent", "abort marker of step %" PRIu64 ": %s", r->step[s],
                          ftc_ctl_errstr(a->ctl));
            } else if (ab) {
                FTC_WARN("agent", "step %" PRIu64 ": rank %u's snapshot of it failed (%s; the "
                         "commit record's abort marker): the step is abandoned on this node",
                         r->step[s], by, why);
                ftc__note_abort(a, r->step[s], by, why, false);
                noted = true;
            }
        }
    }
    if (noted)
        ftc__abandon_aborted(a);
}

static void ftc__poll_commits(ftc_agent_t *a)
{
    ftc__mark_aborts(a);     /* markers Redis did not take when the ABORT came */
    ftc__abandon_aborted(a); /* those whose push or encode has ended */
    bool pending = false, waiting_peers = false;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int s = 0; s < NS; s++)
            if (a->ranks[i].used && a->ranks[i].st[s] == SL_SEALED) {
                pending = true;
                if (!a->ranks[i].pushed[s]) {
                    waiting_peers = true;
                    ftc__try_push(a, &a->ranks[i], s);
                }
            }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used || !r->begin_waiting || r->fd < 0 ||
            ftc_now_ns() - r->begin_since_ns < (uint64_t)a->o.timeout_ms * 1000000ull)
            continue;
        int keep = ftc__newest_committed(r), victim = -1;
        for (int s = 0; s < NS; s++)
            if (s != keep && r->st[s] == SL_SEALED && r->acked[s] &&
                (victim < 0 || r->step[s] < r->step[victim]))
                victim = s;
        if (victim < 0)
            continue;
        /* The version was reported: the commit record could still commit it
         * (another rank's copy was only slow), and it would then be committed
         * without this node's copy (k copies instead of k + 1, I2). Its report
         * is taken back first, atomically unless the record has reached the
         * step already: then it is committed (the commit pass below marks it)
         * and is not abandoned. Redis away: tried again at the next poll. */
        int64_t rec = -1;
        bool gone = false;
        int wrc = a->redis_down ? FTC_EREDIS
                                : ftc_ctl_commit_withdraw(a->ctl, a->generation,
                                                          (int64_t)r->step[victim], r->rank,
                                                          &rec, &gone);
        if (wrc && ftc__redis_outage(a, wrc) && !a->redis_down)
            ftc__redis_seen(a, wrc);
        if (wrc) {
            FTC_DEBUG("agent", "rank %u: step %" PRIu64 " is not committed after %d ms, but its "
                      "report could not be taken back (%s): its slot is kept for now",
                      r->rank, r->step[victim], a->o.timeout_ms, ftc_ctl_errstr(a->ctl));
            continue;
        }
        if (!gone) {
            if (rec > a->committed)
                a->committed = rec;
            continue;
        }
        FTC_WARN("agent", "rank %u: step %" PRIu64 " was not committed within %d ms (another "
                          "rank's copy of it failed?); its report is withdrawn and its slot "
                          "reused for step %" PRIu64,
                 r->rank, r->step[victim], a->o.timeout_ms, r->begin_step);
        ftc_ctl_event_t e = {.kind = "checkpoint_abandoned", .node = a->node_id,
                             .rank = (int)r->rank, .generation = a->generation,
                             .step = (int64_t)r->step[victim],
                             .detail = "not committed within the agent timeout"};
        ftc__event(a, &e);
        r->st[victim] = SL_EMPTY;
        r->begin_waiting = false;
        ftc__send_begin_ok(r, victim, r->begin_step);
    }
    if (waiting_peers && ftc_now_ns() - a->last_peers_ns > 100000000ull) {
        a->last_peers_ns = ftc_now_ns();
        ftc__refresh_peers(a);
    }
    if (!pending)
        return;
    int64_t step;
    uint64_t gen;
    bool down = ftc__redis_seen(a, ftc_ctl_committed(a->ctl, &step, &gen)) != 0;
    if (!down && step > a->committed)
        a->committed = step;
    ftc__poll_abort_markers(a, &down); /* another node's rank failed one of them */
    uint64_t newly = UINT64_MAX;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used)
            continue;
        for (int s = 0; s < NS; s++) {
            if (r->st[s] != SL_SEALED)
                continue;
            if (r->unchecked[s] && !ftc__survivor_recheck(a, r, s, &down))
                continue;
            if (r->acked[s] && !r->reported[s])
                ftc__report_commit(a, r, s); /* a report that failed earlier (Redis away) */
            if (!r->reported[s] || (int64_t)r->step[s] > a->committed)
                continue;
            if ((int64_t)r->step[s] < a->committed && !ftc__older_sealed_committed(a, r, s))
                continue;
            r->st[s] = SL_COMMITTED;
            newly = r->step[s];
            ftc__persist_due(a, r->step[s]);
            for (int o = 0; o < NS; o++)
                if (o != s && r->st[o] == SL_COMMITTED && r->step[o] < r->step[s])
                    r->st[o] = SL_EMPTY; /* superseded (a pinned one stays unused until the
                                            persist thread is done with it) */
            if (r->fd >= 0) {
                ftc_ap_msg_t m;
                ftc_ap_init(&m, FTC_AP_COMMITTED);
                m.step = r->step[s];
                m.slot = (uint32_t)s;
                ftc_err_t err = {0};
                ftc_ap_send(r->fd, &m, 1000, &err);
            }
            ftc__answer_begin(a, r);
        }
    }
    if (newly != UINT64_MAX) {
        a->commits++;
        if ((int64_t)newly > a->newest_local)
            a->newest_local = (int64_t)newly;
        ftc__persist_kick(a); /* else the writer is busy: ftc__persist_collect kicks */
    }
}

/* ---- handling rank messages ------------------------------------------------------------------ */

static void ftc__on_hello(ftc_agent_t *a, int fd, const ftc_ap_msg_t *m)
{
    if (strcmp(m->job, a->job)) {
        ftc__reply_error(fd, m->seq, FTC_EAUTH, "this agent serves job '%s', not '%s'", a->job,
                         m->job);
        return;
    }
    if (a->world && ((m->world && m->world != a->world) || m->rank >= a->world)) {
        /* this agent's copy may be older than the generation record */
        uint64_t g = 0;
        uint32_t w = 0;
        if (ftc_ctl_generation(a->ctl, &g, &w) == 0 && g == a->generation && w &&
            w != a->world) {
            FTC_INFO("agent", "generation %" PRIu64 " has world %u (this agent read %u)", g, w,
                     a->world);
            a->world = w;
        }
    }
    if (a->world && m->rank >= a->world) {
        ftc__reply_error(fd, m->seq, FTC_ERANGE, "rank %u is not below the world size %u", m->rank,
                         a->world);
        return;
    }
    if (a->world && m->world && m->world != a->world) { /* no commit would ever complete */
        ftc__reply_error(fd, m->seq, FTC_ECONFIG,
                         "rank %u says the world has %u rank(s), but generation "
                         "%" PRIu64 " of this job has %u (nodes x ranks per node, or the "
                         "layout of `ftc run`): make FTC_WORLD_SIZE (or WORLD_SIZE) agree with "
                         "the agents' --nodes and --ranks-per-node", m->rank, m->world,
                         a->generation, a->world);
        return;
    }
    ftc__rank_t *r = NULL, *free_r = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        if (a->ranks[i].used && a->ranks[i].rank == m->rank)
            r = &a->ranks[i];
        else if (!a->ranks[i].used && !free_r)
            free_r = &a->ranks[i];
    }
    if (r && r->fd >= 0 && r->fd != fd) {
        ftc__reply_error(fd, m->seq, FTC_EEXIST, "rank %u is already connected (pid %d)", m->rank,
                         r->hello.pid);
        return;
    }
    if (!r) {
        if (!free_r) {
            ftc__reply_error(fd, m->seq, FTC_ERANGE, "this agent serves at most %d ranks",
                             FTC_AGENT_MAX_RANKS);
            return;
        }
        r = free_r;
        memset(r, 0, sizeof *r);
        r->used = true;
        for (int s = 0; s < NS; s++)
            r->slot[s].fd = -1;
    }
    r->fd = fd;
    r->rank = m->rank;
    r->src = m->rank;
    r->hello = *m;
    /* the first step time the hang watchdog sees runs from the connection
     * (start, restore, first step), not 0: a median of 0 left only the
     * 5 s floor for a second checkpoint that waits for a large first one */
    r->last_sealed_ns = ftc_now_ns();
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] == fd)
            a->clients[i] = -1;
    ftc_ap_msg_t w;
    ftc_ap_init(&w, FTC_AP_WELCOME);
    w.seq = m->seq;
    w.generation = a->generation;
    w.world = a->world;
    ftc_err_t err = {0};
    ftc_ap_send(fd, &w, 1000, &err);
    FTC_INFO("agent", "rank %u (pid %d) connected", m->rank, m->pid);
    if (a->det && m->pid > 0) /* its exit becomes a rank_exit event at once */
        ftc_detector_watch_pid(a->det, (int)m->rank, (pid_t)m->pid);
}

static bool ftc__has_visit(ftc_persist_t *p, void *arg);
static bool ftc__each_persist(ftc_agent_t *a, bool (*visit)(ftc_persist_t *, void *),
                              void *arg);

/* SLOTS of a restarted agent: whether the version v that survived in rank
 * r's slot s, of a step at or before the committed one, may be taken for
 * committed. The slot's bytes outlive its state: a version the agent freed
 * (a step the job committed without it: another rank skipped it, or it was
 * abandoned) or superseded is still there, and taking every such step for
 * committed made a never committed one a committed slot again, which
 * FETCH_AT_MOST then returned (I1). So an older step counts only when the
 * job's commit set in Redis has it, its commit record's checksum (when the
 * record still exists) being this version's, or, where the set does not
 * cover the step or Redis does not answer, when a persist tier holds it
 * committed. The committed step counts unless the record names another
 * version of it; with Redis away it is kept (a restore checks the record
 * again), never freed. *redis_down: a Redis call failed (set here; no
 * other call is made then). */
static bool ftc__survivor_committed(ftc_agent_t *a, const ftc__rank_t *r, int s,
                                    const ftc_shard_view_t *v, bool *redis_down)
{
    uint64_t step = v->info.step;
    bool newest = (int64_t)step == a->committed;
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    if (!*redis_down && ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)step, 1,
                                                                      steps, gens, &n,
                                                                      &oldest)) != 0) {
        FTC_WARN("agent", "rank %u: whether the steps of its surviving slots were committed "
                 "cannot be read from Redis (%s): the committed step %" PRId64 "'s slot is "
                 "kept, older ones only where a persist tier holds them", r->rank,
                 ftc_ctl_errstr(a->ctl), a->committed);
        *redis_down = true;
    }
    const char *why = NULL;
    if (!*redis_down && n == 1 && (uint64_t)steps[0] == step) {
        uint64_t rec = 0;
        bool found = false;
        if (ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, gens[0], (int64_t)step, r->rank,
                                                       &rec, &found)) != 0)
            *redis_down = true; /* the set has it: committed */
        else if (found && rec != v->head_xxh3)
            why = "another version of that step is the committed one";
        if (!why)
            return true;
    } else if (!*redis_down && !newest && oldest >= 0 && (int64_t)step > oldest) {
        why = "the job's commit set does not have it";
    } else if (newest) {
        return true; /* the record has it (not in the set: an older build's, or Redis away) */
    } else if (ftc__each_persist(a, ftc__has_visit, &step)) {
        return true;
    } else {
        why = *redis_down ? "Redis does not answer and no persist tier holds it committed"
                          : "older than the job's commit set keeps, and no persist tier holds "
                            "it committed";
    }
    FTC_INFO("agent", "rank %u: slot %d holds step %" PRIu64 " (head %016" PRIx64 "), not taken "
             "for committed: %s; the slot is free", r->rank, s, step, v->head_xxh3, why);
    return false;
}

static void ftc__on_slots(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    if (r->size && r->size != m->size && r->landing) {
        ftc__reply_error(r->fd, m->seq, FTC_EAGAIN, "a restore of rank %u is landing in its slots: "
                         "retry SLOTS once it is done", r->rank);
        return;
    }
    for (int s = 0; r->size && r->size != m->size && s < NS; s++)
        if (r->st[s] == SL_SEALED && r->pushed[s] && !r->acked[s]) {
            /* the replication thread (or the parity encoder) reads that slot
             * through this mapping: unmapped now, it crashed the agent */
            ftc__reply_error(r->fd, m->seq, FTC_EAGAIN, "rank %u's step %" PRIu64 " (the previous "
                             "layout) is still replicating: retry SLOTS once it is done",
                             r->rank, r->step[s]);
            return;
        }
    if (r->size && r->size != m->size) {
        /* a new layout: the old slots hold another layout's state; a persist
         * write reading them must end before they are unmapped */
        bool pinned = false;
        for (int s = 0; s < NS; s++)
            pinned = pinned || r->pinned[s];
        if (pinned) {
            ftc__persister_wait(a->pw);
            for (int s = 0; s < NS; s++) { /* gone for the persist tier too */
                r->pinned[s] = false;
                r->st[s] = SL_EMPTY;
            }
            ftc__persist_collect(a); /* (the next due step: without this rank's slots) */
        }
        for (int s = 0; s < NS; s++) {
            ftc_slot_close(&r->slot[s]);
            r->st[s] = SL_EMPTY;
            r->unchecked[s] = false;
        }
        /* no slots until the new ones exist: a BEGIN or RESTORE meanwhile
         * (the new size refused: /dev/shm too small) is answered "before
         * SLOTS" instead of writing into the closed ones */
        r->size = 0;
    }
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_SLOTS_OK);
    ok.seq = m->seq;
    uint64_t t0 = ftc_now_ns();
    char names[NS][FTC_SLOT_NAME_MAX];
    const char *mk[NS];
    unsigned mkflags[NS];
    ftc_slot_t made[NS];
    int mkslot[NS], nmk = 0;
    /* a fresh slot while the job has a committed step: this rank restores
     * one it does not have here (a replacement node), and the fetch lands in
     * the first free slot, its first fresh one: reserved by prefaulting it
     * (MADV_POPULATE_WRITE: the pages posix_fallocate would reserve, mapped
     * in the same pass, so the fetch need not prefault it) */
    bool restoring = a->committed >= 0 && !r->size;
    /* ... and the others are sized and mapped (the rank maps all three) but
     * reserved after RESTORE_OK, while the rank copies (ftc__restore_done),
     * or before the first write into them at the latest */
    for (int s = 0; s < NS; s++) {
        ftc_err_t err = {0};
        char prev[FTC_SLOT_NAME_MAX];
        /* a slot of another size holds the previous layout's shard: keep it
         * (under its prev name) for ranks that re-partition from it */
        if (ftc_slot_name(a->ns, r->rank, s, names[s], sizeof names[s], &err) ||
            ftc_slot_name_prev(a->ns, r->rank, s, prev, sizeof prev, &err) ||
            (!r->slot[s].base && ftc_slot_keep_other_size(names[s], prev, m->size, &err))) {
            ftc__reply_error(r->fd, m->seq, err.code ? err.code : FTC_EIO, "%s", err.msg);
            return;
        }
        if (!r->slot[s].base) {
            mk[nmk] = names[s];
            /* the third slot's memory is reserved at its first use: only
             * when a version is still replicating at the next checkpoint */
            mkflags[nmk] = !restoring ? (s == NS - 1 ? FTC_SLOT_DEFER : 0)
                           : nmk == 0 ? FTC_SLOT_POPULATE
                                      : FTC_SLOT_DEFER;
            mkslot[nmk++] = s;
        }
        snprintf(ok.name[s], sizeof ok.name[s], "%s", names[s]);
    }
    if (nmk) {
        ftc_err_t err = {0};
        int rc = ftc_slot_create_all(mk, nmk, m->size, mkflags, made, &err);
        for (int i = 0; i < nmk; i++)
            if (made[i].base)
                r->slot[mkslot[i]] = made[i];
        if (rc) {
            ftc__reply_error(r->fd, m->seq, err.code ? err.code : FTC_EIO, "%s", err.msg);
            return;
        }
    }
    /* slots that survived from before (a restarted rank or agent): learn
     * their state. A version newer than the committed step whose report the
     * commit record holds (with this very checksum) was replicated and may
     * still commit: it stays sealed, or a BEGIN would take its slot and the
     * version would commit without this node's copy (I2). */
    if (!r->size) {
        bool redis_down = false; /* a failed Redis call: not asked again for these slots */
        for (int s = 0; s < NS; s++) {
            ftc_shard_view_t v;
            ftc_err_t err = {0};
            if (r->slot[s].unreserved || /* created empty just now: not read (a hole) */
                ftc_shard_open(&v, r->slot[s].base, m->size, 0, &err) != 0)
                continue;
            if ((int64_t)v.info.step <= a->committed) {
                if (ftc__survivor_committed(a, r, s, &v, &redis_down)) {
                    r->st[s] = SL_COMMITTED;
                    r->step[s] = v.info.step;
                }
                continue;
            }
            /* Redis not answering: whether it was reported is not known;
             * freed, it was written over and, when its report was there, the
             * version committed without this node's copy (I2). It is kept
             * sealed instead, never restored (I1: not known committed), and
             * the commit poll asks the record again (ftc__survivor_recheck);
             * Redis is not asked again for this rank's slots meanwhile. */
            uint64_t rec = 0;
            bool found = false;
            if (!redis_down && ftc__redis_seen(a, ftc_ctl_commit_checksum(
                                                      a->ctl, a->generation,
                                                      (int64_t)v.info.step, r->rank, &rec,
                                                      &found)) != 0)
                redis_down = true;
            if (!redis_down && (!found || rec != v.head_xxh3))
                continue;
            if (redis_down)
                FTC_WARN("agent", "rank %u: slot %d holds step %" PRIu64 " (head %016" PRIx64
                         "), newer than the committed step %" PRId64 ", and whether the commit "
                         "record holds its report cannot be read (Redis does not answer): kept "
                         "sealed, never restored, until the record can be read", r->rank, s,
                         v.info.step, v.head_xxh3, a->committed);
            else
                FTC_INFO("agent", "rank %u: slot %d holds step %" PRIu64 ", reported to the "
                         "commit record and not committed yet: kept sealed", r->rank, s,
                         v.info.step);
            r->unchecked[s] = redis_down;
            r->st[s] = SL_SEALED;
            r->step[s] = v.info.step;
            r->checksum[s] = v.head_xxh3;
            r->pushed[s] = r->acked[s] = r->reported[s] = true;
            r->sealed_ns[s] = ftc_now_ns();
            r->retry_ns[s] = 0;
            r->push_tries[s] = 0;
        }
    }
    FTC_DEBUG("agent", "rank %u: %d slots of %" PRIu64 " bytes ready in %.1f ms (%d created%s)",
              r->rank, NS, m->size, (double)(ftc_now_ns() - t0) / 1e6, nmk,
              nmk && r->slot[mkslot[0]].populated ? ", the first one prefaulted" : "");
    r->size = m->size;
    ok.size = m->size;
    ftc_err_t err = {0};
    ftc_ap_send(r->fd, &ok, 1000, &err);
}

static void ftc__on_begin(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    r->begin_seq = m->seq; /* every answer to it, now or once a slot is free */
    if (!r->size) {
        ftc__reply_error(r->fd, r->begin_seq, FTC_EINVAL, "BEGIN before SLOTS");
        return;
    }
    /* a new BEGIN supersedes a parked one (the rank gave up waiting for it):
     * it must not be answered later, into this BEGIN's reply */
    r->begin_waiting = false;
    /* A rank writes one snapshot at a time and announces it (SEALED) before
     * its next BEGIN: a slot still WRITING for it now was handed out for a
     * snapshot that never happened (the checkpoint failed after BEGIN_OK,
     * or the rank had given up waiting for that BEGIN_OK). Free it, or each
     * such BEGIN loses a slot for good and, three of them later, every
     * checkpoint waits for a slot that never comes. Not the slot a
     * restore's fetch is landing in. */
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_WRITING && r->landing != i + 1) {
            FTC_INFO("agent", "rank %u: slot %d (step %" PRIu64 ") was never sealed; reused",
                     r->rank, i, r->step[i]);
            r->st[i] = SL_EMPTY;
        }
    /* A step not after the job's committed step (the ranks went back to an
     * older step: ftc_fetch, a persist tier that lags the commits) can never
     * be recorded (the commit record never goes backwards), and one this
     * rank already sealed is checkpointed: skipped, with the committed step
     * told first so that ftc_wait_committed of it returns. Taken, such a
     * version was marked committed without its report counting, and a
     * restore could return it instead of the version the record holds (I1). */
    bool again = false;
    for (int i = 0; i < NS; i++)
        again = again || ((r->st[i] == SL_SEALED || r->st[i] == SL_COMMITTED) &&
                          r->step[i] == m->step);
    if ((a->committed >= 0 && m->step <= (uint64_t)a->committed) || again) {
        ftc_err_t err = {0};
        if (a->committed >= 0) {
            ftc_ap_msg_t cm;
            ftc_ap_init(&cm, FTC_AP_COMMITTED);
            cm.step = (uint64_t)a->committed;
            ftc_ap_send(r->fd, &cm, 1000, &err);
        }
        ftc_ap_msg_t sk;
        ftc_ap_init(&sk, FTC_AP_SKIP);
        sk.seq = r->begin_seq;
        sk.step = m->step;
        if (a->committed < 0 || m->step > (uint64_t)a->committed)
            snprintf(sk.text, sizeof sk.text, "step %" PRIu64 " skipped: rank %u already "
                     "checkpointed it", m->step, r->rank);
        else
            snprintf(sk.text, sizeof sk.text, "step %" PRIu64 " skipped: it is not after the "
                     "job's committed step %" PRId64 " (a repeated step, or the ranks went back "
                     "to an older one), "
                     "so it could never commit", m->step, a->committed);
        FTC_INFO("agent", "rank %u: %s", r->rank, sk.text);
        ftc_ap_send(r->fd, &sk, 1000, &err);
        return;
    }
    int s = ftc__begin_slot(a, r);
    if (s >= 0) {
        ftc__send_begin_ok(r, s, m->step);
        return;
    }
    if (a->o.busy_policy == FTC_BUSY_WAIT) {
        r->begin_waiting = true;
        r->begin_step = m->step;
        r->begin_since_ns = ftc_now_ns();
        /* the policy applied is reported, like a skip */
        ftc_ctl_event_t e = {.kind = "checkpoint_waiting", .node = a->node_id,
                             .rank = (int)r->rank, .generation = a->generation,
                             .step = (int64_t)m->step,
                             .detail = "previous checkpoint still replicating (policy wait): "
                                       "the checkpoint waits for a commit to free a slot"};
        ftc__event(a, &e);
        return; /* answered when the in-flight version commits */
    }
    ftc_ap_msg_t sk;
    ftc_ap_init(&sk, FTC_AP_SKIP);
    sk.seq = r->begin_seq;
    sk.step = m->step;
    snprintf(sk.text, sizeof sk.text,
             "step %" PRIu64 " skipped: the previous checkpoint is still replicating (policy "
             "skip)",
             m->step);
    ftc_err_t err = {0};
    ftc_ap_send(r->fd, &sk, 1000, &err);
    ftc_ctl_event_t e = {.kind = "checkpoint_skipped", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)m->step,
                         .detail = "previous checkpoint still replicating (policy skip)"};
    ftc__event(a, &e);
}

static void ftc__on_sealed(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    int s = (int)m->slot;
    if (r->st[s] != SL_WRITING || r->step[s] != m->step) {
        ftc__not_committed(r->fd, FTC_EPROTO, m->step,
                           "SEALED slot %d step %" PRIu64 " but it is %s (step %" PRIu64 ")", s,
                           m->step, ftc__sl_name[r->st[s]], r->step[s]);
        return;
    }
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, r->slot[s].base, r->size, 0, &err) != 0 || v.info.step != m->step) {
        r->st[s] = SL_EMPTY;
        ftc__not_committed(r->fd, FTC_ECORRUPT, m->step, "slot %d of rank %u: %s", s, r->rank,
                           err.msg[0] ? err.msg : "step differs");
        return;
    }
    r->st[s] = SL_SEALED;
    r->unchecked[s] = false;
    r->checksum[s] = v.head_xxh3;
    r->pushed[s] = r->acked[s] = false;
    r->reported[s] = false;
    uint64_t now = ftc_now_ns();
    /* checkpoints are the node's view of step progress: heartbeats carry it,
     * and the hang watchdog and straggler warnings use it */
    if (a->det)
        ftc_detector_progress(a->det, (int)r->rank, (int64_t)m->step,
                              r->last_sealed_ns ? (now - r->last_sealed_ns) / 1000 : 0);
    r->last_sealed_ns = now;
    r->sealed_ns[s] = now;
    r->retry_ns[s] = 0;
    r->push_tries[s] = 0;
    if (ftc__step_aborted(a, m->step)) { /* another rank's snapshot of it failed already */
        r->aborted[s] = true;
        ftc__abandon_aborted(a);
        return;
    }
    ftc__try_push(a, r, s);
}

/* The nodes of the current generation: the members of the plan `ftc run`
 * publishes (ftc:{J}:plan:GEN, cached once read); the job's node count for
 * agents started by hand (no plan). */
static uint32_t ftc__gen_members(ftc_agent_t *a)
{
    uint64_t now = ftc_now_ns();
    if (a->members_gen == a->generation && a->members_n &&
        (a->members_planned || now - a->members_ns < 1000000000ull))
        return a->members_n;
    if (a->redis_down) {
        /* not asked: a command timeout (in which no rank is answered) on
         * every push once a second; the count known for the generation, or
         * the job's node count as when the read fails, until Redis answers */
        if (a->members_gen != a->generation || !a->members_n) {
            a->members_planned = false;
            a->members_gen = a->generation;
            a->members_n = a->o.nodes;
            a->members_ns = now;
        }
        return a->members_n;
    }
    char key[200], suffix[48];
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, a->generation);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    uint32_t n = 0;
    const char *v = NULL;
    size_t len = 0;
    /* recorded like the peer refresh: failed, the next pushes do not ask */
    if (ftc__redis_seen(a, ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HGET", key,
                                          "members", NULL)) == 0 &&
        ftc_redis_want_str(rep, "plan members", &v, &len, NULL) == 0) {
        bool in = false;
        for (size_t i = 0; i < len; i++) {
            bool sp = v[i] == ' ';
            if (!sp && !in)
                n++;
            in = !sp;
        }
    }
    ftc_redis_reply_free(rep);
    a->members_planned = n && n <= a->o.nodes;
    a->members_gen = a->generation;
    a->members_n = a->members_planned ? n : a->o.nodes;
    a->members_ns = now;
    return a->members_n;
}

/* Hands a sealed slot to the replication thread once its k peers are known
 * (agents that are still starting publish their addresses a little later);
 * gives up when the replication timeout passes. */
static void ftc__try_push(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    if (r->pushed[s] || r->st[s] != SL_SEALED)
        return;
    if (r->retry_ns[s] && ftc_now_ns() < r->retry_ns[s])
        return; /* a failed push waits a little: the poll retries it */
    if (a->par && ftc__par_try_push(a, r, s))
        return;
    int k = a->o.redundancy.kind == FTC_RED_REPLICA ? a->o.redundancy.copies : 1;
    if (k > 0 && (a->o.nodes == 1 || (a->world && a->world <= a->o.ranks_per_node))) {
        /* a job of one node (or a generation whose ranks are all this
         * node's: `ftc run` shrunk to it): no peer can hold a replica, so the
         * checkpoint commits from this node's memory alone (and the persist
         * tier, when configured) rather than never */
        if (!a->alone_warned)
            FTC_WARN("agent", "node %u is the job's only node: checkpoints commit without "
                     "replicas (redundancy %d needs %d nodes); losing this node loses them "
                     "unless the persist tier (persist.dir) has them", a->o.index, k, k + 1);
        a->alone_warned = true;
        k = 0;
    }
    uint32_t members = k > 0 ? ftc__gen_members(a) : 0;
    if (k > 0 && members >= 2 && (uint32_t)k > members - 1) {
        /* a generation shrunk below redundancy + 1 nodes: every other member
         * holds a replica, which is all it can do (waiting for k peers
         * would never commit again) */
        if (!a->fewer_warned)
            FTC_WARN("agent", "generation %" PRIu64 " has %u nodes: checkpoints commit with %u "
                     "replica(s) instead of %d until more nodes join", a->generation, members,
                     members - 1, k);
        a->fewer_warned = true;
        k = (int)members - 1;
    }
    if (k == 0) {
        r->pushed[s] = r->acked[s] = true;
        ftc__report_commit(a, r, s);
        return;
    }
    for (int o = 0; o < NS; o++) {
        if (o == s || r->st[o] != SL_SEALED)
            continue;
        /* One push per rank at a time, in step order, and only once the older
         * step has committed (retried by the poll): a peer keeps two versions
         * per owner, the newest it received and the one before, so pushing
         * step N+1 while step N has not committed could make a peer drop the
         * newest committed replica (N-1). */
        if (r->step[o] < r->step[s])
            return;
        if (r->pushed[o] && !r->acked[o])
            return; /* (a newer step already in flight: this older one waits its turn) */
    }
    uint32_t peers[FTC_REPL_MAX_PEERS];
    int np = ftc__placement(a, peers, k);
    if (np < k) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return; /* retried by the poll */
        r->st[s] = SL_EMPTY;
        ftc__not_committed(r->fd, FTC_ENOENT, r->step[s],
                           "step %" PRIu64
                           ": only %d of the %d replica peers are known after %d ms",
                           r->step[s], np, k, a->o.timeout_ms);
        ftc__answer_begin(a, r);
        return;
    }
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!j)
        return; /* retried by the poll */
    j->kind = JOB_PUSH;
    j->owner = r->rank;
    j->step = r->step[s];
    j->shard = r->slot[s].base;
    j->size = r->size;
    memcpy(j->peers, peers, (size_t)np * sizeof peers[0]);
    j->npeers = np;
    j->keep = a->committed;
    r->pushed[s] = true;
    ftc__queue(a, j);
}

/* Tries to push r's other sealed slots (a push of slot s ended); try_push
 * keeps them in step order. */
static void ftc__push_others(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    for (int o = 0; o < NS; o++)
        if (o != s)
            ftc__try_push(a, r, o);
}

/* Restore: local slot, else peers, else the persist tier. */
/* verified: every checksum of slot s was verified here after its last write */
static void ftc__restore_done(ftc_agent_t *a, ftc__rank_t *r, int s, bool verified)
{
    (void)a;
    r->restoring = false;
    FTC_DEBUG("agent", "rank %u: RESTORE answered (slot %d, step %" PRIu64 ") %.1f ms after it "
              "arrived", r->rank, s, r->step[s], (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_RESTORE_OK);
    ok.seq = r->restore_seq;
    ok.slot = (uint32_t)s;
    ok.step = r->step[s];
    ok.status = verified ? FTC_AP_OK_VERIFIED : 0;
    ftc_err_t err = {0};
    ftc_ap_send(r->fd, &ok, 1000, &err);
    /* a second slot that deferred its reservation, while the rank copies
     * (the third waits for its first use, as at a start) */
    int reserved = 0;
    for (int i = 0; i < NS; i++)
        reserved += r->slot[i].base && !r->slot[i].unreserved;
    for (int i = 0; i < NS && reserved < NS - 1; i++) {
        ftc_err_t rerr = {0};
        if (!r->slot[i].unreserved)
            continue;
        reserved++;
        if (ftc__slot_reserve(r, i, &rerr))
            FTC_WARN("agent", "rank %u: %s (its next checkpoint in that slot fails with it)",
                     r->rank, rerr.msg);
    }
}

/* Copies a verified shard into a slot that may be overwritten; -1 if none
 * fits (a size other than the slots', err.code 0) or the slot could not be
 * reserved (err says why). */
static int ftc__install(ftc__rank_t *r, const uint8_t *buf, uint64_t size, uint64_t step,
                        ftc_err_t *err)
{
    if (size != r->size)
        return -1;
    int s = ftc__free_slot(r);
    /* none free: the slot of the newest committed version this node holds
     * (the restore found it missing or corrupt, or an older step), never a
     * sealed one (replicating, its commit reported: the node's copy of a
     * version that may commit) nor one the persist thread reads */
    int keep = ftc__newest_committed(r);
    if (s < 0 && keep >= 0 && !r->pinned[keep] && r->landing != keep + 1)
        s = keep;
    if (s < 0) {
        ftc_err_set(err, FTC_EAGAIN, "every slot of rank %u is in use (versions replicating or "
                    "waiting for their commit, a persist write): retry the restore once one "
                    "commits", r->rank);
        return -1;
    }
    if (ftc__slot_reserve(r, s, err))
        return -1;
    uint64_t t0 = ftc_now_ns();
    ftc_mem_prefault(r->slot[s].base, size); /* a fresh slot: no fault per page */
    memcpy(r->slot[s].base, buf, size);
    FTC_DEBUG("agent", "rank %u: %" PRIu64 " bytes copied into slot %d in %.1f ms", r->rank, size,
              s, (double)(ftc_now_ns() - t0) / 1e6);
    r->st[s] = SL_COMMITTED;
    r->step[s] = step;
    return s;
}

static bool ftc__same_coords(const ftc_shard_view_t *v, const ftc__rank_t *r)
{
    return v->info.dp_rank == r->hello.dp_rank && v->info.tp_rank == r->hello.tp_rank &&
           v->info.pp_rank == r->hello.pp_rank;
}

/* The global rank a shard belongs to (Megatron's order, as ckpt/client.c). */
static uint32_t ftc__info_rank(const ftc_shard_info_t *i)
{
    return (i->dp_rank * i->pp + i->pp_rank) * i->tp + i->tp_rank;
}

/* Is v the shard r's RESTORE / FETCH asks for? Its own: same coordinates;
 * another rank's (after a layout change): that rank's coordinates. */
static bool ftc__is_subject(const ftc_shard_view_t *v, const ftc__rank_t *r)
{
    return r->src == r->rank && !r->fetch ? ftc__same_coords(v, r)
                                          : ftc__info_rank(&v->info) == r->src;
}

/* Whether v (in slot s of r, -1: another shm object) is the version the commit
 * record holds: its head checksum is the recorded one (want, when known). */
static bool ftc__is_recorded(const ftc__rank_t *r, const ftc_shard_view_t *v, int s,
                             uint64_t want, bool known)
{
    if (!known || v->head_xxh3 == want)
        return true;
    char where[48];
    if (s >= 0)
        snprintf(where, sizeof where, "slot %d", s);
    else
        snprintf(where, sizeof where, "a slot of another layout");
    FTC_WARN("agent", "rank %u: %s holds step %" PRIu64 " with head checksum %016" PRIx64
             ", not the committed version's %016" PRIx64 " (a snapshot of that step that was "
             "never committed): not restored from it", r->rank, where, v->info.step,
             v->head_xxh3, want);
    return false;
}

/* Whether v, a verified shard of r's subject from `from` (a parity rebuild,
 * a persist tier), is the version the commit record holds for r's restore
 * step (r->rec_head, when known; another step, an older one a persist tier
 * has: the content alone). If not: a warning, and why (cap bytes) says so. */
static bool ftc__copy_is_recorded(const ftc__rank_t *r, const ftc_shard_view_t *v,
                                  const char *from, char *why, size_t cap)
{
    if (!r->rec_known || v->info.step != r->restore_step || v->head_xxh3 == r->rec_head)
        return true;
    snprintf(why, cap, "%s: rank %u's shard of step %" PRIu64 " has head checksum %016" PRIx64
             ", not the committed version's %016" PRIx64 " (another version of that step): "
             "refused", from, r->src, v->info.step, v->head_xxh3, r->rec_head);
    FTC_WARN("agent", "rank %u: %s", r->rank, why);
    return false;
}

/* FETCH: the verified shard goes into a fresh shm object the rank maps and
 * unlinks (the previous one is unlinked here, in case the rank died first). */
static void ftc__fetch_reply(ftc_agent_t *a, ftc__rank_t *r, const uint8_t *buf, uint64_t size,
                             uint64_t step, const char *from)
{
    ftc_err_t err = {0};
    if (r->fetch_name[0])
        ftc_slot_unlink(r->fetch_name, &err);
    r->fetch_name[0] = 0;
    r->restoring = false;
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.%s.f%u.%" PRIu64, a->ns, r->rank, r->fetches++);
    ftc_slot_t sl;
    if (ftc_slot_create(name, size, &sl, &err)) {
        ftc__reply_error(r->fd, r->restore_seq, err.code ? err.code : FTC_EIO,
                         "fetch of rank %u step %" PRIu64 ": %s", r->src, step, err.msg);
        return;
    }
    memcpy(sl.base, buf, size);
    ftc_slot_close(&sl);
    snprintf(r->fetch_name, sizeof r->fetch_name, "%s", name);
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_FETCH_OK);
    ok.seq = r->restore_seq;
    ok.step = step;
    ok.size = size;
    ok.src = (int32_t)r->src;
    snprintf(ok.name[0], sizeof ok.name[0], "%s", name);
    FTC_INFO("agent", "rank %u fetched rank %u's shard of step %" PRIu64 " (%" PRIu64
             " bytes) from %s", r->rank, r->src, step, size, from);
    ftc_ap_send(r->fd, &ok, 1000, &err);
}

/* Hands a verified shard of r's subject to r: into one of its slots
 * (RESTORE) or a shm copy (FETCH). */
static void ftc__deliver(ftc_agent_t *a, ftc__rank_t *r, const uint8_t *buf, uint64_t size,
                         uint64_t step, const char *from)
{
    if (r->fetch) {
        ftc__fetch_reply(a, r, buf, size, step, from);
        return;
    }
    ftc_err_t ierr = {0};
    int s = ftc__install(r, buf, size, step, &ierr);
    if (s < 0 && ierr.code) {
        r->restoring = false;
        ftc__reply_error(r->fd, r->restore_seq, ierr.code,
                         "restoring rank %u's shard of step %" PRIu64 ": %s", r->src, step,
                         ierr.msg);
        return;
    }
    if (s < 0) {
        r->restoring = false;
        ftc__reply_error(r->fd, r->restore_seq, FTC_ERANGE,
                         "rank %u's shard of step %" PRIu64 " has %" PRIu64 " bytes, the slots of "
                         "rank %u %" PRIu64 ": a rank whose layout changed reads it with ftc_fetch",
                         r->src, step, size, r->rank, r->size);
        return;
    }
    FTC_INFO("agent", "rank %u restored step %" PRIu64 "%s from %s", r->rank, step,
             r->src == r->rank ? "" : " (the shard of a previous rank)", from);
    ftc__restore_done(a, r, s, false); /* copied: the rank verifies the slot */
}

static bool ftc__at_most_next(ftc_agent_t *a, ftc__rank_t *r, const char *tried, const char *why);

/* The persist tiers of the other nodes (persist.dir/node<I>, read-only: a
 * shared file system in a real job). A lost node's shards exist only there
 * once its memory is gone (a shrink gave its ranks to survivors); a live
 * node's hold its ranks' older steps, which a re-partition at an older
 * step needs once they left that node's slots. Nodes that are not alive
 * first, the restore step first in every tier, then the newest version of
 * each (older: the trainer brings every rank back to one step). True once
 * delivered. */
static bool ftc__restore_from_other_tiers(ftc_agent_t *a, ftc__rank_t *r)
{
    if (!a->o.persist_dir || !*a->o.persist_dir)
        return false;
    for (int pass = 0; pass < 4; pass++) /* lost nodes, live ones; each: step, newest */
        for (uint32_t i = 0; i < a->o.nodes; i++) {
            bool alive = a->peers[i].known && a->peers[i].alive;
            if (i == a->o.index || alive != (pass >= 2) || (r->at_most && pass % 2))
                continue; /* (FETCH_AT_MOST: the exact step; older ones are candidates) */
            char dir[4200];
            snprintf(dir, sizeof dir, "%s/node%u", a->o.persist_dir, i);
            ftc_err_t err = {0};
            ftc_persist_t *p = ftc_persist_open_reader(dir, &err);
            if (!p)
                continue;
            ftc_persist_loaded_t *l = NULL;
            if (ftc_persist_load(p, pass % 2 ? FTC_PERSIST_NEWEST : (uint64_t)r->restore_step,
                                 &l) ==
                0) {
                for (int k = 0; k < l->n_shards; k++) {
                    ftc_shard_view_t v;
                    char from[64], why[400];
                    snprintf(from, sizeof from, "the persist tier of node %u", i);
                    if (ftc_shard_open(&v, l->shards[k], l->sizes[k], FTC_SHARD_VERIFY, &err) ==
                            0 &&
                        ftc__is_subject(&v, r) && l->step <= (uint64_t)r->restore_step &&
                        ftc__copy_is_recorded(r, &v, from, why, sizeof why)) {
                        ftc__deliver(a, r, l->shards[k], l->sizes[k], l->step, from);
                        ftc_persist_loaded_free(l);
                        ftc_persist_close(p);
                        return true;
                    }
                }
                ftc_persist_loaded_free(l);
            }
            ftc_persist_close(p);
        }
    return false;
}

/* Loads the newest committed version of p whose step is below want (the
 * persist tier lags the commits: every persist.every-th one), trying older
 * ones when a version fails to load. Never a newer step: a FETCH of an older
 * agreed step, or a restore after a rollback, must not get a later state.
 * 0, or -1 with why (cap bytes) saying what was tried. */
static int ftc__persist_load_at_most(ftc_persist_t *p, uint64_t want, ftc_persist_loaded_t **out,
                                     char *why, size_t cap)
{
    ftc_persist_version_t *v = NULL;
    int n = 0, tried = 0;
    if (ftc_persist_list(p, &v, &n) != 0) {
        snprintf(why, cap, "%s", ftc_persist_errstr(p));
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < n && rc; i++) { /* newest first */
        if (v[i].step >= want || v[i].state != FTC_PV_COMMITTED)
            continue;
        tried++;
        rc = ftc_persist_load(p, v[i].step, out);
        if (rc)
            snprintf(why, cap, "%s", ftc_persist_errstr(p));
    }
    if (rc && !tried)
        snprintf(why, cap, "no persisted version at or before step %" PRIu64 " (%d version(s), "
                 "all newer or unfinished)", want, n);
    free(v);
    return rc;
}

static void ftc__restore_from_persist(ftc_agent_t *a, ftc__rank_t *r, const char *tried)
{
    char why[700] = "no persist tier configured";
    if (a->pw) {
        uint64_t want = (uint64_t)r->restore_step;
        /* pass 0: the restore step, else the newest older one; pass 1 (the
         * restore step's version was not the committed one): the older */
        for (int pass = 0; pass < 2; pass++) {
            ftc_persist_loaded_t *l = NULL;
            char older[256] = "";
            ftc_persist_t *p = ftc__persister_lock(a->pw); /* waits for a running write */
            int rc = pass ? -1 : ftc_persist_load(p, want, &l);
            if (rc && !pass)
                snprintf(why, sizeof why, "%s", ftc_persist_errstr(p));
            if (rc && r->at_most) { /* the older committed steps are candidates of their own */
                ftc__persister_unlock(a->pw);
                break;
            }
            if (rc) /* the newest older one: never a newer step than asked for */
                rc = ftc__persist_load_at_most(p, want, &l, pass ? older : why,
                                               pass ? sizeof older : sizeof why);
            ftc__persister_unlock(a->pw);
            if (rc) {
                if (pass) {
                    size_t wl = strlen(why);
                    snprintf(why + wl, sizeof why - wl, "; older: %s", older);
                }
                break;
            }
            int k = -1;
            ftc_shard_view_t v;
            for (int i = 0; i < l->n_shards && k < 0; i++) {
                ftc_err_t err = {0};
                if (ftc_shard_open(&v, l->shards[i], l->sizes[i], FTC_SHARD_VERIFY, &err) == 0 &&
                    ftc__is_subject(&v, r))
                    k = i;
            }
            if (k < 0) {
                snprintf(why, sizeof why, "persisted step %" PRIu64 " has no shard for rank %u",
                         l->step, r->src);
                ftc_persist_loaded_free(l);
                break;
            }
            if (!ftc__copy_is_recorded(r, &v, "the persist tier", why, sizeof why)) {
                ftc_persist_loaded_free(l);
                if (r->at_most)
                    break; /* the older committed steps are candidates of their own */
                continue; /* never restored: an older version, the other tiers */
            }
            ftc__deliver(a, r, l->shards[k], l->sizes[k], l->step, "the persist tier");
            ftc_persist_loaded_free(l);
            return;
        }
        if (ftc__restore_from_other_tiers(a, r))
            return;
    }
    if (r->at_most && ftc__at_most_next(a, r, tried, why))
        return;
    r->restoring = false;
    ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                     "no verified copy of rank %u step %" PRIu64 ": %s; persist tier: %s", r->src,
                     r->restore_step, tried, why);
}

/* Queues a fetch of r's restore step: first from this node's own replica
 * store (the replicas it holds for its ring predecessors: after a shrink to
 * this node alone, the only copy of a lost node's shards), then from every
 * live peer in ring order; false when no peer is known and (parity mode)
 * there is no replica store to look at. */
static bool ftc__queue_fetch(ftc_agent_t *a, ftc__rank_t *r)
{
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!j)
        return false;
    j->kind = JOB_FETCH;
    j->owner = r->src;
    j->step = r->restore_step;
    j->req_rix = (int)(r - a->ranks);
    j->req = r->req;
    j->rec_head = r->rec_head;
    j->rec_known = r->rec_known;
    j->dst_slot = -1;
    /* a RESTORE: straight into a slot the rank may have overwritten anyway
     * (no buffer, no copy; the replication thread writes it, so it is marked
     * WRITING, and its mapping stays until the fetch is done) */
    int s = !r->fetch && r->size && !r->landing ? ftc__free_slot(r) : -1;
    ftc_err_t rerr = {0};
    if (s >= 0 && r->slot[s].base && ftc__slot_reserve(r, s, &rerr) == 0) {
        r->st[s] = SL_WRITING;
        r->step[s] = r->restore_step;
        r->landing = s + 1;
        j->dst = r->slot[s].base;
        j->dst_cap = r->size;
        /* a fresh slot's pages in one call (about half the cost of one fault
         * per page as the DATA lands), unless its creation did */
        if (!r->slot[s].populated)
            ftc_mem_prefault(j->dst, j->dst_cap);
        j->dst_rix = (int)(r - a->ranks);
        j->dst_slot = s;
    }
    for (uint32_t d = 1; d < a->o.nodes; d++) {
        uint32_t node = (a->o.index + d) % a->o.nodes;
        if (a->peers[node].known && a->peers[node].alive)
            j->peers[j->npeers++] = node;
    }
    if (!j->npeers && a->par) {
        free(j);
        return false;
    }
    r->restore_attempts++;
    FTC_DEBUG("agent", "rank %u: fetch of rank %u step %" PRIu64 " queued (request %" PRIu64 "), "
              "%d candidate peer(s), %.1f ms after the request", r->rank, r->src,
              r->restore_step, r->req, j->npeers, (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    ftc__queue(a, j);
    return true;
}

/* Looks for r's restore_step (set by the caller, with at_most, fetch, src)
 * in every source, in order: this node's slots, else a peer's replica (or a
 * parity rebuild), else the persist tier; the answer goes to the rank, or
 * (FETCH_AT_MOST) a step that has no copy moves on to the next candidate.
 * gen: the generation that committed it, looked up for the commit record's
 * checksum; nogen: why it is not known (NULL when gen is). */
static void ftc__search(ftc_agent_t *a, ftc__rank_t *r, uint64_t gen, const char *nogen)
{
    bool fetch = r->fetch;
    uint32_t src = r->src;
    int64_t step = (int64_t)r->restore_step;
    /* The checksum the commit record holds for the subject's shard of the
     * committed step: a copy whose content verifies but is another version
     * of that step (a snapshot that was never committed, a stale one, a
     * replica or persisted version left from before a rollback re-ran the
     * step) is not it (I1): every source below checks it. Unknown for an
     * older step a FETCH asks for (its generation is not known here; a
     * FETCH_AT_MOST knows it from the commit set), when the record expired
     * (an hour after the step's last report) or Redis is away: then the
     * content alone. Redis known away (a call failed, this request's or
     * an earlier one, and none answered since): not asked, so a
     * FETCH_AT_MOST of up to FTC__AT_MOST_CANDS steps costs one command
     * timeout, not one per step, and stays within the rank's own deadline. */
    uint64_t want = 0;
    bool want_known = false;
    if (!nogen && a->redis_down) {
        ftc_log(r->at_most && r->icand > 0 ? FTC_LOG_DEBUG : FTC_LOG_INFO, "agent",
                "rank %u: Redis does not answer: the commit record's checksum of rank %u step "
                "%" PRId64 " is not asked for; copies are checked by their content only",
                r->rank, src, step);
    } else if (!nogen && ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, gen, step, src,
                                                                    &want, &want_known)) != 0) {
        FTC_WARN("agent", "rank %u: the commit record's checksum of rank %u step %" PRId64
                 " could not be read (%s): copies are checked by their content only, and Redis "
                 "is not asked again for this request until it answers", r->rank, src, step,
                 ftc_ctl_errstr(a->ctl));
        want_known = false;
    } else if (!want_known) {
        FTC_DEBUG("agent", "rank %u: no commit record checksum for rank %u step %" PRIu64 " (%s): "
                  "copies are checked by their content only", r->rank, src, r->restore_step,
                  nogen ? nogen : "the record has none: expired or withdrawn");
    }
    r->rec_head = want;
    r->rec_known = want_known;
    /* 1. this node's slots: the rank's own, or those the subject left here
     * (a node keeps its previous ranks' slots across a layout change) */
    for (int s = 0; s < NS; s++) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        /* structure and step first: only the right step's slot is hashed */
        if (!(src == r->rank && r->slot[s].base && !r->slot[s].unreserved &&
              !(r->unchecked[s] && r->st[s] == SL_SEALED && !want_known) &&
              ftc_shard_open(&v, r->slot[s].base, r->size, 0, &err) == 0 &&
              v.info.step == (uint64_t)step && ftc__is_subject(&v, r)))
            continue;
        if (!ftc__is_recorded(r, &v, s, want, want_known)) {
            if (r->st[s] == SL_COMMITTED)
                r->st[s] = SL_EMPTY; /* not the committed version: free (the fetch may land here) */
            continue;
        }
        if (ftc_shard_verify(&v, FTC__VERIFY_THREADS, &err) == 0) {
            if (!fetch) {
                r->st[s] = SL_COMMITTED;
                r->step[s] = (uint64_t)step;
                ftc__restore_done(a, r, s, true); /* verified here: the rank need not */
            } else {
                ftc__deliver(a, r, r->slot[s].base, r->size, (uint64_t)step, "this node's slot");
            }
            return;
        }
    }
    /* ... and the slots a rank left here under another layout (prev names) */
    for (int k = 0; k < 2 * NS; k++) {
        if (src == r->rank && k < NS && r->slot[k].base)
            continue; /* its current slots, mapped: looked at above */
        {
            int s = k % NS;
            char name[FTC_SLOT_NAME_MAX];
            ftc_slot_t sl;
            ftc_err_t err = {0};
            if ((k < NS ? ftc_slot_name(a->ns, src, s, name, sizeof name, &err)
                        : ftc_slot_name_prev(a->ns, src, s, name, sizeof name, &err)) ||
                ftc_slot_open(name, false, &sl, &err))
                continue;
            ftc_shard_view_t v;
            uint64_t total = 0;
            bool ok = ftc_shard_peek_size(sl.base, sl.size, &total, &err) == 0 &&
                      total <= sl.size &&
                      ftc_shard_open(&v, sl.base, total, FTC_SHARD_VERIFY, &err) == 0 &&
                      v.info.step == (uint64_t)step && ftc__is_subject(&v, r) &&
                      ftc__is_recorded(r, &v, -1, want, want_known);
            if (ok)
                ftc__deliver(a, r, sl.base, total, (uint64_t)step, "this node's memory");
            ftc_slot_close(&sl);
            if (ok)
                return;
        }
    }
    /* 2. a peer's replica (every live peer, ring order); a freshly started
     * agent's peer table may be older than the peers' restarts (it refreshes
     * every 500 ms): one refresh now is cheaper than a failed round; not
     * while Redis does not answer (a command timeout for nothing): the
     * addresses already known */
    if (!a->redis_down)
        ftc__refresh_peers(a);
    r->restore_attempts = 0;
    if (!a->par && ftc__queue_fetch(a, r))
        return;
    /* 2'. parity groups: rebuilt from the surviving members' shards and parity
     * (a rank's own shard only) */
    if (a->par && src == r->rank && !fetch && ftc__par_queue_rebuild(a, r))
        return;
    if (a->par && ftc__queue_fetch(a, r)) /* serve_local: the subject's node may answer */
        return;
    /* 3. the persist tier */
    ftc__restore_from_persist(a, r, "not in this node's slots, no peer known");
}

/* FETCH_AT_MOST: adds a committed step to r's candidates (newest first, no
 * twice, the newest FTC__AT_MOST_CANDS kept); a generation fills in an
 * unknown one. */
static void ftc__cand_add(ftc__rank_t *r, uint64_t step, uint64_t gen)
{
    int k = 0;
    while (k < r->ncand && r->cand[k] > step)
        k++;
    if (k < r->ncand && r->cand[k] == step) {
        if (!r->cand_gen[k])
            r->cand_gen[k] = gen;
        return;
    }
    if (!gen && r->cand_cover >= 0 && (int64_t)step >= r->cand_cover) {
        /* a slot or persisted version of a step the commit set would have
         * (I1: marked committed once, by an agent of an older build, or a
         * slot read back after a restart) */
        FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST: step %" PRIu64 " is not in the commit set: "
                  "never committed, not looked for", r->rank, step);
        return;
    }
    if (k == FTC__AT_MOST_CANDS)
        return; /* older than every kept one */
    int n = r->ncand < FTC__AT_MOST_CANDS ? r->ncand : FTC__AT_MOST_CANDS - 1;
    memmove(&r->cand[k + 1], &r->cand[k], (size_t)(n - k) * sizeof r->cand[0]);
    memmove(&r->cand_gen[k + 1], &r->cand_gen[k], (size_t)(n - k) * sizeof r->cand_gen[0]);
    r->cand[k] = step;
    r->cand_gen[k] = gen;
    r->ncand = n + 1;
}

/* Calls visit on each persist tier: this node's (locked: waits for a
 * running write), then the other nodes' (read-only), until it returns true;
 * whether one did. */
static bool ftc__each_persist(ftc_agent_t *a, bool (*visit)(ftc_persist_t *, void *), void *arg)
{
    bool done = false;
    if (a->pw) {
        ftc_persist_t *p = ftc__persister_lock(a->pw);
        done = visit(p, arg);
        ftc__persister_unlock(a->pw);
    }
    for (uint32_t i = 0; !done && a->o.persist_dir && *a->o.persist_dir && i < a->o.nodes; i++) {
        if (i == a->o.index)
            continue;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/node%u", a->o.persist_dir, i);
        ftc_err_t err = {0};
        ftc_persist_t *p = ftc_persist_open_reader(dir, &err);
        if (!p)
            continue;
        done = visit(p, arg);
        ftc_persist_close(p);
    }
    return done;
}

/* FETCH_AT_MOST: the committed versions of a persist directory (p, or the
 * directory dir read-only) into r's candidates when at or before r's
 * at_most_step; *oldest: the oldest committed step seen. */
static void ftc__cand_persist(ftc__rank_t *r, ftc_persist_t *p, int64_t *oldest)
{
    ftc_persist_version_t *v = NULL;
    int n = 0;
    if (ftc_persist_list(p, &v, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        if (v[i].state != FTC_PV_COMMITTED)
            continue;
        if (*oldest < 0 || (int64_t)v[i].step < *oldest)
            *oldest = (int64_t)v[i].step;
        if (v[i].step <= r->at_most_step)
            ftc__cand_add(r, v[i].step, 0);
    }
    free(v);
}

typedef struct ftc__cand_ctx {
    ftc__rank_t *r;
    int64_t *oldest;
} ftc__cand_ctx_t;

static bool ftc__cand_visit(ftc_persist_t *p, void *arg)
{
    ftc__cand_ctx_t *c = arg;
    ftc__cand_persist(c->r, p, c->oldest);
    return false; /* every tier */
}

/* FETCH_AT_MOST: the committed steps at or before r's at_most_step that may
 * have a copy, newest first: the job's commit set in Redis (each with the
 * generation that committed it: the commit record's checksum is checked),
 * the committed step, the committed versions of this rank's slots and of
 * every persist tier (older than the commit set keeps, or Redis away). A
 * step that was never committed (skipped, abandoned) is none of these, so
 * it is never looked for (I1). False, with the rank answered FTC_ENOENT,
 * when there is none. */
static bool ftc__at_most_candidates(ftc_agent_t *a, ftc__rank_t *r, int64_t committed,
                                    uint64_t gen, bool gen_known)
{
    r->ncand = r->icand = 0;
    r->cand_tried[0] = 0;
    r->cand_cover = -1;
    int64_t steps[FTC__AT_MOST_CANDS], oldest = -1, o2 = -1;
    uint64_t gens[FTC__AT_MOST_CANDS];
    int n = 0;
    char redis[200] = "";
    /* the request's read of the committed step failed just now: not asked
     * again (another command timeout), what is known here is used */
    bool down = a->redis_down;
    if (down || ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)r->at_most_step,
                                                             FTC__AT_MOST_CANDS, steps, gens, &n,
                                                             &oldest)) != 0) {
        snprintf(redis, sizeof redis, "; the commit set in Redis could not be read: %.150s",
                 down ? "Redis does not answer" : ftc_ctl_errstr(a->ctl));
        FTC_WARN("agent", "rank %u: FETCH_AT_MOST %" PRIu64 "%s: the committed steps are "
                 "those of the persist tiers and this node's slots", r->rank, r->at_most_step,
                 redis);
        n = 0, oldest = -1;
    }
    for (int i = 0; i < n; i++)
        ftc__cand_add(r, (uint64_t)steps[i], gens[i]);
    /* the set holds every committed step from its oldest on: the steps
     * read, all of them at or before at_most_step from the oldest, or from
     * the oldest one read when there are more */
    r->cand_cover = n == FTC__AT_MOST_CANDS ? steps[n - 1] : oldest;
    if (committed >= 0 && (uint64_t)committed <= r->at_most_step)
        ftc__cand_add(r, (uint64_t)committed, gen_known ? gen : 0);
    if (committed >= 0 && (oldest < 0 || committed < oldest))
        oldest = committed;
    for (int s = 0; r->src == r->rank && s < NS; s++)
        if (r->st[s] == SL_COMMITTED && r->step[s] <= r->at_most_step)
            ftc__cand_add(r, r->step[s], 0);
    ftc__cand_ctx_t cc = {r, &o2};
    ftc__each_persist(a, ftc__cand_visit, &cc);
    if (o2 >= 0 && (oldest < 0 || o2 < oldest))
        oldest = o2;
    if (r->ncand > 0)
        return true;
    if (oldest >= 0)
        ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                         "no committed step at or before step %" PRIu64
                         " for job %s: the oldest committed step known is %" PRId64 " (the commit "
                         "records in Redis, the persist tiers)%s", r->at_most_step, a->job,
                         oldest, redis);
    else
        ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                         "no committed step at or before step %" PRIu64
                         " for job %s known (the commit records in Redis, the persist tiers)%s",
                         r->at_most_step, a->job, redis);
    return false;
}

/* FETCH_AT_MOST: the candidate being looked for has no copy (where the
 * sources looked: tried, why): the next one is looked for and true; false
 * after the last one, with the rank answered FTC_ENOENT naming every step
 * tried. (Called from the end of a search, which a new search may end again:
 * at most FTC__AT_MOST_CANDS deep.) */
static bool ftc__at_most_next(ftc_agent_t *a, ftc__rank_t *r, const char *tried, const char *why)
{
    size_t l = strlen(r->cand_tried);
    snprintf(r->cand_tried + l, sizeof r->cand_tried - l, "%s%" PRIu64, l ? ", " : "",
             r->restore_step);
    FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST %" PRIu64 ": no verified copy of rank %u step "
              "%" PRIu64 " (%s; persist tier: %s)", r->rank, r->at_most_step, r->src,
              r->restore_step, tried, why);
    if (++r->icand < r->ncand) {
        r->restore_step = r->cand[r->icand];
        ftc__search(a, r, r->cand_gen[r->icand],
                    r->cand_gen[r->icand] ? NULL : "not in the commit set: its generation is "
                                                   "not known");
        return true;
    }
    r->restoring = false;
    ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                     "no verified copy of rank %u's shard of any committed step "
                     "at or before step %" PRIu64 " (tried %s, newest first); the last: %.120s; "
                     "persist tier: %.80s", r->src, r->at_most_step, r->cand_tried, tried, why);
    return false;
}

/* Whether the persist directory p holds a committed version of step. */
static bool ftc__persist_has_committed(ftc_persist_t *p, uint64_t step)
{
    ftc_persist_version_t *v = NULL;
    int n = 0;
    bool has = false;
    if (ftc_persist_list(p, &v, &n) != 0)
        return false;
    for (int i = 0; i < n && !has; i++)
        has = v[i].state == FTC_PV_COMMITTED && v[i].step == step;
    free(v);
    return has;
}

static bool ftc__has_visit(ftc_persist_t *p, void *arg)
{
    return ftc__persist_has_committed(p, *(const uint64_t *)arg);
}

/* FETCH of a step older than the committed one: whether it was ever
 * committed (I1: only committed versions are restored). A slot, a replica
 * or a persisted version of a step that never committed (skipped by the
 * checkpoint.busy=skip policy while another rank checkpointed it, abandoned
 * before every rank's copy was in) verifies by its content all the same, so
 * the search must not even start for it. The job's commit set in Redis
 * answers, with the generation that committed it (*gen: the commit
 * record's checksum is then checked too); for a step older than the set
 * keeps (or Redis away), a persist tier that holds it committed. 0 when
 * committed (*gen 0 when not known), else the code and why (cap bytes). */
static int ftc__older_committed(ftc_agent_t *a, uint64_t step, uint64_t *gen, char *why,
                                size_t cap)
{
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    *gen = 0;
    char redis[240] = "";
    bool down = a->redis_down; /* the request's first call failed: not asked again */
    bool read = !down && ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)step, 1,
                                                                      steps, gens, &n,
                                                                      &oldest)) == 0;
    if (read && n == 1 && (uint64_t)steps[0] == step) {
        *gen = gens[0];
        return 0;
    }
    if (read && oldest >= 0 && step > (uint64_t)oldest) {
        /* the set holds every committed step from its oldest on */
        snprintf(why, cap, "step %" PRIu64 " of job %s was never committed (skipped, or "
                 "abandoned before every rank's copy was in): only committed steps are "
                 "restored; the newest committed step before it is %" PRId64 " "
                 "(ftc_fetch_at_most finds it)", step, a->job, steps[0]);
        return FTC_ENOENT;
    }
    if (!read)
        snprintf(redis, sizeof redis, "the job's commit set in Redis could not be read (%.150s)",
                 down ? "Redis does not answer" : ftc_ctl_errstr(a->ctl));
    else if (oldest >= 0)
        snprintf(redis, sizeof redis, "it is older than the job's commit set in Redis keeps (from "
                 "step %" PRId64 " on)", oldest);
    else
        snprintf(redis, sizeof redis, "the job's commit set in Redis is empty");
    /* the persist tiers: this node's, then the other nodes' (read-only) */
    if (ftc__each_persist(a, ftc__has_visit, &step))
        return 0;
    snprintf(why, cap, "step %" PRIu64 " of job %s cannot be shown to have been committed: %s, "
             "and no persist tier holds it committed; only committed steps are restored%s", step,
             a->job, redis, read ? "" : " (retry once Redis answers)");
    return read ? FTC_ENOENT : FTC_EREDIS;
}

/* RESTORE, FETCH and FETCH_AT_MOST: the newest committed step (FETCH: the
 * step asked for, if committed; FETCH_AT_MOST: the newest committed step at
 * or before it that has a copy) of the subject rank's shard, from this
 * node's slots, else a peer's replica (or a parity rebuild), else the
 * persist tier (ftc__search). */
static void ftc__on_restore(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    bool at_most = m->type == FTC_AP_FETCH_AT_MOST;
    bool fetch = m->type == FTC_AP_FETCH || at_most;
    if (!fetch && !r->size) {
        ftc__reply_error(r->fd, m->seq, FTC_EINVAL, "RESTORE before SLOTS");
        return;
    }
    if (r->restoring) {
        ftc__reply_error(r->fd, m->seq, FTC_EINPROGRESS, "a restore or fetch of rank %u is in "
                         "progress", r->rank);
        return;
    }
    r->restore_seq = m->seq; /* every answer to it, now or later */
    uint32_t src = m->src >= 0 ? (uint32_t)m->src : r->rank;
    int64_t step = a->committed;
    uint64_t gen = 0;
    bool gen_known = true;
    if (ftc__redis_seen(a, ftc_ctl_committed(a->ctl, &step, &gen)) != 0) {
        step = a->committed; /* Redis away: what this agent knows */
        gen_known = false;
    }
    int64_t committed_step = step;
    if (step < 0) {
        ftc__reply_error(r->fd, m->seq, FTC_ENOENT, "nothing committed yet for job %s", a->job);
        return;
    }
    if (step > a->committed)
        a->committed = step;
    if (fetch && !at_most && m->step != UINT64_MAX) {
        if (m->step > (uint64_t)step) {
            ftc__reply_error(r->fd, m->seq, FTC_ENOENT,
                             "step %" PRIu64 " is not committed (the newest committed is %" PRId64
                             ")", m->step, step);
            return;
        }
        step = (int64_t)m->step;
        if (step != committed_step) {
            char why[600];
            int rc = ftc__older_committed(a, (uint64_t)step, &gen, why, sizeof why);
            if (rc) {
                FTC_WARN("agent", "rank %u: FETCH of rank %u: %s", r->rank, src, why);
                ftc__reply_error(r->fd, m->seq, rc, "%s", why);
                return;
            }
            gen_known = gen != 0;
        }
    }
    r->fetch = fetch;
    r->at_most = at_most;
    r->src = src;
    if (at_most) {
        r->at_most_step = m->step < (uint64_t)committed_step ? m->step : (uint64_t)committed_step;
        if (!ftc__at_most_candidates(a, r, committed_step, gen, gen_known))
            return;
        step = (int64_t)r->cand[0];
        gen = r->cand_gen[0];
        gen_known = gen != 0;
        committed_step = step; /* (its generation is known from the commit set, or not) */
        FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST %" PRIu64 " of rank %u: %d committed step(s) "
                  "to try, from %" PRIu64, r->rank, r->at_most_step, src, r->ncand, r->cand[0]);
    }
    r->restoring = true;
    r->req = ++a->requests;
    r->restore_t0 = ftc_now_ns();
    r->restore_step = (uint64_t)step;
    const char *nogen = NULL;
    if (at_most && !gen_known)
        nogen = "not in the commit set: its generation is not known";
    else if (!gen_known && step != committed_step)
        nogen = "an older step, committed in a persist tier but not in the commit set: its "
                "generation is not known";
    else if (!gen_known)
        nogen = "Redis did not answer";
    ftc__search(a, r, gen, nogen);
}

/* A fetch that succeeded after other holders failed (a replica refused by
 * its checksum, a holder that did not answer; not a peer that simply does
 * not hold it): said in the log and the event stream (replica_refused), so
 * that a bad copy is not silent. */
static void ftc__report_passed_over(ftc_agent_t *a, const ftc__rank_t *r, const ftc__job_t *j)
{
    if (!j->passed_over[0])
        return;
    FTC_WARN("agent", "rank %u: step %" PRIu64 " of rank %u came from another holder after: %s",
             r->rank, j->step, r->src, j->passed_over);
    ftc_ctl_event_t e = {.kind = "replica_refused", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)j->step,
                         .detail = j->passed_over};
    ftc__event(a, &e);
}

/* A fetch job is done: its result goes to the request that queued it (the
 * rank j->req_rix, request j->req), if that request still waits for this
 * step. It went to the last rank found fetching the same (owner, step): with
 * two ranks fetching one shard, the first job's shard or error answered the
 * other rank's request, which the second job's result then answered in
 * turn; and a rank that reconnected and asked again got its earlier
 * request's result. A result no request waits for is dropped. */
static void ftc__on_fetch_done(ftc_agent_t *a, ftc__job_t *j)
{
    ftc__rank_t *r = &a->ranks[j->req_rix];
    if (!r->used || !r->restoring || r->req != j->req || r->src != j->owner ||
        r->restore_step != j->step) {
        FTC_DEBUG("agent", "fetch of rank %u step %" PRIu64 " for request %" PRIu64 " of rank "
                  "%u done (rc %d), but that request is over: dropped", j->owner, j->step,
                  j->req, r->rank, j->rc);
        r = NULL;
    }
    /* the slot the fetch landed in is the main thread's again */
    ftc__rank_t *lr = j->dst_slot >= 0 ? &a->ranks[j->dst_rix] : NULL;
    if (lr && lr->landing == j->dst_slot + 1)
        lr->landing = 0;
    bool in_slot = lr && lr == r && j->buf && j->buf == j->dst;
    if (lr && !in_slot && lr->st[j->dst_slot] == SL_WRITING)
        lr->st[j->dst_slot] = SL_EMPTY; /* never used half written (still mapped) */
    if (!r || r->fd < 0)
        return;
    FTC_DEBUG("agent", "rank %u: fetch of rank %u step %" PRIu64 " done (request %" PRIu64
              ", rc %d, %s%s), %.1f ms after the request", r->rank, r->src, j->step, j->req, j->rc,
              j->detail, in_slot ? ", in its slot" : "",
              (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    if (j->rc == 0 && j->buf) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        /* the replication engine verified the bytes as they landed in
         * j->buf (a fetch: every tensor checksum and the zero padding), or
         * they come from this node's verified replica store: the structure
         * here. Landed in the rank's slot: the rank need not verify that slot
         * again; copied (into the slot, or by ftc__deliver): the rank
         * verifies its slot. */
        if (ftc_shard_open(&v, j->buf, j->buf_size, 0, &err) == 0 &&
            v.info.step == j->step && ftc__is_subject(&v, r) &&
            (!r->rec_known || v.head_xxh3 == r->rec_head)) { /* (the replication thread checked) */
            if (!in_slot || j->buf_size != r->size) {
                ftc__report_passed_over(a, r, j);
                if (in_slot)
                    r->st[j->dst_slot] = SL_EMPTY; /* ftc__deliver refuses the size */
                ftc__deliver(a, r, j->buf, j->buf_size, j->step, "a peer's replica");
                return;
            }
            ftc__report_passed_over(a, r, j);
            r->st[j->dst_slot] = SL_COMMITTED;
            r->step[j->dst_slot] = j->step;
            FTC_INFO("agent", "rank %u restored step %" PRIu64 "%s from %s", r->rank, j->step,
                     r->src == r->rank ? "" : " (the shard of a previous rank)",
                     j->landed ? "a peer's replica" : "this node's replica store");
            ftc__restore_done(a, r, j->dst_slot, j->landed);
            return;
        }
    }
    if (in_slot)
        r->st[j->dst_slot] = SL_EMPTY; /* never used half written */
    /* Peers that were restarting (a stale address, a connection not yet
     * accepted) may answer a moment later: a few rounds, with fresh
     * addresses, before the persist tier. Not when every candidate answered
     * that it lacks the version (not held, or another version of the step):
     * a holder's replicas only change with a new push, so another round
     * would get the same answers. */
    bool all_lack = j->npeers > 0 && j->lacking == j->npeers;
    if (all_lack)
        FTC_INFO("agent", "rank %u: every peer (%d) lacks rank %u's step %" PRIu64 " (%s): "
                 "not asking them again", r->rank, j->npeers, r->src, j->step, j->detail);
    if (r->restore_attempts < 3 && !all_lack) {
        FTC_WARN("agent", "rank %u: fetching rank %u's step %" PRIu64 " failed (%s); trying the "
                 "peers again%s", r->rank, r->src, j->step, j->detail,
                 a->redis_down ? " at the addresses already known (Redis does not answer)" : "");
        /* fresh addresses (a restarted peer's); while Redis does not answer
         * each refresh costs a command timeout (HGETALL) per round */
        if (!a->redis_down)
            ftc__refresh_peers(a);
        if (ftc__queue_fetch(a, r))
            return;
    }
    if (j->refused) { /* no holder had the committed version: not silent either */
        FTC_WARN("agent", "rank %u: no holder served the committed version of rank %u's step "
                 "%" PRIu64 ": %s", r->rank, r->src, j->step, j->passed_over);
        ftc_ctl_event_t e = {.kind = "replica_refused", .node = a->node_id, .rank = (int)r->rank,
                             .generation = a->generation, .step = (int64_t)j->step,
                             .detail = j->passed_over};
        ftc__event(a, &e);
    }
    char tried[900];
    snprintf(tried, sizeof tried, "not in this node's slots; peers (%d round%s): %s",
             r->restore_attempts, r->restore_attempts == 1 ? "" : "s",
             j->detail[0] ? j->detail : "no replica");
    ftc__restore_from_persist(a, r, tried);
}

static void ftc__on_push_done(ftc_agent_t *a, ftc__job_t *j)
{
    ftc__rank_t *r = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].rank == j->owner)
            r = &a->ranks[i];
    if (!r)
        return;
    int s = -1;
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_SEALED && r->step[i] == j->step)
            s = i;
    if (s < 0)
        return;
    if (r->aborted[s]) { /* nothing to report or retry: abandoned now the push is over */
        r->acked[s] = true;
        ftc__abandon_aborted(a);
        return;
    }
    int k = a->o.redundancy.kind == FTC_RED_REPLICA ? a->o.redundancy.copies : 1;
    if (j->rc == 0 && j->acked >= (k < j->npeers ? k : j->npeers)) {
        r->acked[s] = true;
        ftc__report_commit(a, r, s);
        ftc__push_others(a, r, s); /* the next step may have waited for this push */
        return;
    }
    uint64_t now = ftc_now_ns(), limit = (uint64_t)a->o.timeout_ms * 1000000ull;
    if (now - r->sealed_ns[s] + 200000000ull < limit) {
        /* A peer that restarted (a new address: the transfer was cancelled),
         * a connection refused while its agent was still starting, a peer
         * that died since placement: the version is still good, so it goes
         * again, to the peers known then, until the replication timeout.
         * Failing it at once would leave the other ranks' copies of this
         * step waiting for a commit that never comes. */
        r->push_tries[s]++;
        FTC_WARN("agent", "rank %u step %" PRIu64 ": replicated to %d of %d peers (%s); trying "
                 "again (%d failed so far)", r->rank, j->step, j->acked, j->npeers, j->detail,
                 r->push_tries[s]);
        r->pushed[s] = false;
        r->retry_ns[s] = now + 100000000ull;
        a->last_peers_ns = 0; /* re-read the peers' addresses and liveness before the retry */
        return;
    }
    FTC_WARN("agent", "rank %u step %" PRIu64 ": replicated to %d of %d peers: %s", r->rank,
             j->step, j->acked, j->npeers, j->detail);
    r->st[s] = SL_EMPTY; /* not committed; the previous version stays */
    ftc__not_committed(r->fd, j->rc ? j->rc : FTC_EIO, j->step,
                       "step %" PRIu64 " not committed: replicated to %d of %d peers: %s", j->step,
                       j->acked, j->npeers, j->detail);
    ftc__push_others(a, r, s);
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
}

static void ftc__drain_done(ftc_agent_t *a)
{
    uint64_t v;
    ssize_t rd = read(a->evfd, &v, sizeof v);
    (void)rd;
    pthread_mutex_lock(&a->mu);
    ftc__job_t *done = a->done;
    a->done = NULL;
    pthread_mutex_unlock(&a->mu);
    while (done) {
        ftc__job_t *j = done;
        done = j->next;
        if (j->kind == JOB_PUSH && j->par)
            ftc__par_on_push_done(a, j);
        else if (j->kind == JOB_PUSH)
            ftc__on_push_done(a, j);
        else if (j->kind == JOB_FETCH)
            ftc__on_fetch_done(a, j);
        else if (j->kind == JOB_GATHER)
            ftc__par_on_gather_done(a, j);
        ftc__job_free(j);
    }
    ftc__par_collect(a); /* the parity worker signals the same eventfd */
}

static void ftc__disconnect(ftc_agent_t *a, int fd)
{
    ftc__rank_t *r = ftc__rank_of_fd(a, fd);
    if (r) {
        FTC_INFO("agent", "rank %u disconnected (its slots stay)", r->rank);
        if (r->fetch_name[0]) { /* a FETCH copy it did not unlink (it died first) */
            ftc_err_t e = {0};
            ftc_slot_unlink(r->fetch_name, &e);
            r->fetch_name[0] = 0;
        }
        r->fd = -1;
        r->begin_waiting = false;
        r->restoring = false;
        for (int s = 0; s < NS; s++)
            if (r->st[s] == SL_WRITING)
                r->st[s] = SL_EMPTY; /* a half-written snapshot is never used */
    }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] == fd)
            a->clients[i] = -1;
    close(fd);
}

/* REPORT: an event the rank detected (its numerical guard): into the
 * stream through the detector's queue (survives a Redis outage), deduped per
 * (kind, node, rank, step). */
static void ftc__on_report(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    const char *kind = m->name[0];
    size_t kl = strlen(kind);
    bool ok = kl >= 1 && kl <= 23;
    for (size_t i = 0; ok && i < kl; i++)
        ok = (kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') ||
             kind[i] == '_';
    if (!ok) {
        ftc__reply_error(r->fd, m->seq, FTC_EINVAL,
                         "REPORT: event kind '%.40s': need 1..23 of [a-z0-9_]", kind);
        return;
    }
    double value;
    memcpy(&value, &m->size, sizeof value);
    char detail[256];
    snprintf(detail, sizeof detail, "loss %.6g; %s", value, m->text);
    FTC_WARN("agent", "rank %u reports %s at step %" PRIu64 ": %s", r->rank, kind, m->step, detail);
    if (a->det) {
        ftc_detector_report(a->det, kind, (int)r->rank, (int64_t)m->step, detail);
    } else {
        ftc_ctl_event_t e = {.kind = kind, .node = a->node_id, .rank = (int)r->rank,
                             .generation = a->generation, .step = (int64_t)m->step,
                             .detail = detail, .t_detect_ms = ftc_wall_ms()};
        ftc__event(a, &e);
    }
    ftc_ap_msg_t ok_msg;
    ftc_ap_init(&ok_msg, FTC_AP_REPORT_OK);
    ok_msg.seq = m->seq;
    ok_msg.step = m->step;
    ftc_err_t err = {0};
    ftc_ap_send(r->fd, &ok_msg, 1000, &err);
}

static void ftc__on_message(ftc_agent_t *a, int fd)
{
    ftc_ap_msg_t m;
    memset(&m, 0, sizeof m); /* (a short message leaves the rest as it was) */
    ftc_err_t err = {0};
    if (ftc_ap_recv(fd, &m, 1000, &err) != 0) {
        if (err.code != FTC_EIO)
            FTC_WARN("agent", "bad message from a local client: %s", err.msg);
        /* a rank of another ftc build: told so before the connection closes
         * (the message keeps its size and magic, version and type their
         * offsets in every version, so its libftc reads the version of this
         * answer and names both versions) */
        if (err.code == FTC_EPROTO && m.magic == FTC_AP_MAGIC && m.version != FTC_AP_VERSION &&
            m.version != 0)
            ftc__reply_error(fd, 0, FTC_EPROTO, "%s", err.msg);
        ftc__disconnect(a, fd);
        return;
    }
    ftc__rank_t *r = ftc__rank_of_fd(a, fd);
    if (m.type == FTC_AP_HELLO) {
        ftc__on_hello(a, fd, &m);
        return;
    }
    if (!r) {
        ftc__reply_error(fd, m.seq, FTC_EPROTO, "say HELLO first");
        ftc__disconnect(a, fd);
        return;
    }
    switch (m.type) {
    case FTC_AP_SLOTS:
        ftc__on_slots(a, r, &m);
        break;
    case FTC_AP_BEGIN:
        ftc__on_begin(a, r, &m);
        break;
    case FTC_AP_SEALED:
        ftc__on_sealed(a, r, &m);
        break;
    case FTC_AP_ABORT:
        ftc__on_abort(a, r, &m);
        break;
    case FTC_AP_RESTORE:
    case FTC_AP_FETCH:
    case FTC_AP_FETCH_AT_MOST:
        ftc__on_restore(a, r, &m);
        break;
    case FTC_AP_REPORT:
        ftc__on_report(a, r, &m);
        break;
    case FTC_AP_BYE:
        if (a->det) /* a clean exit: not a rank failure */
            ftc_detector_unwatch(a->det, (int)r->rank);
        ftc__disconnect(a, fd);
        break;
    default:
        ftc__reply_error(fd, m.seq, FTC_EPROTO, "unexpected message type %u", m.type);
    }
}

/* ---- parity groups (redundancy xor:G / rs:G+M; agent_parity.h, docs/agent.md) -------------- */

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

static void ftc__job_free(ftc__job_t *j)
{
    ftc__gather_free(j->gather);
    if (j->buf != j->dst)
        free(j->buf);
    free(j);
}

static void ftc__where_free(ftc__where_t *w)
{
    free(w->node);
    free(w->local);
    free(w->members);
    memset(w, 0, sizeof *w);
}

/* The agent index of node id nid, or UINT32_MAX while unknown. */
static uint32_t ftc__node_of_id(const ftc_agent_t *a, const char *nid)
{
    if (!strcmp(nid, a->node_id))
        return a->o.index;
    for (uint32_t i = 0; i < a->o.nodes; i++)
        if (a->peers[i].known && !strcmp(a->peers[i].node_id, nid))
            return i;
    return UINT32_MAX;
}

static int ftc__cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* The locations of generation gen's ranks (cached); NULL while a member of
 * its plan has no known agent yet, or while Redis does not answer (the
 * caller retries; a->par->where_why says which). */
static const ftc__where_t *ftc__where(ftc_agent_t *a, uint64_t gen)
{
    for (int i = 0; i < 2; i++)
        if (a->par->where[i].gen == gen && gen)
            return &a->par->where[i];
    char key[200], suffix[48];
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, gen);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    size_t n = 0;
    const char *mv = NULL, *rv = NULL;
    size_t ml = 0, rl = 0;
    if (ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HMGET", key, "members", "ranks",
                       NULL) != 0) {
        ftc_redis_reply_free(rep);
        snprintf(a->par->where_why, sizeof a->par->where_why,
                 "Redis did not answer the read of generation %" PRIu64 "'s plan (%s): is the "
                 "job's Redis up?",
                 gen, ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
        return NULL; /* not cached as "no plan" (retried) */
    }
    bool planned = ftc_redis_want_array(rep, "HMGET plan", 2, &el, &n, NULL) == 0 &&
                   ftc_redis_want_str(el[0], "plan", &mv, &ml, NULL) == 0 &&
                   ftc_redis_want_str(el[1], "plan", &rv, &rl, NULL) == 0 && ml && rl;
    ftc__where_t w = {.gen = gen, .planned = planned};
    char *members = planned ? strndup(mv, ml) : NULL, *ranks = planned ? strndup(rv, rl) : NULL;
    ftc_redis_reply_free(rep);
    bool ok = true, said = false; /* said: where_why is set */
    if (planned && members && ranks) {
        uint32_t *idx = calloc((size_t)a->o.nodes + 1, sizeof *idx);
        uint32_t nm = 0;
        ok = idx != NULL;
        for (char *sv = NULL, *t = strtok_r(members, " ", &sv); t && ok;
             t = strtok_r(NULL, " ", &sv)) {
            ok = nm < a->o.nodes;
            if (ok && (idx[nm++] = ftc__node_of_id(a, t)) == UINT32_MAX) {
                ok = false; /* not known yet */
                said = true;
                snprintf(a->par->where_why, sizeof a->par->where_why,
                         "the layout of generation %" PRIu64 " (ftc run's plan) names node %.64s, "
                         "whose agent is not known (it never published its address)",
                         gen, t);
            }
        }
        uint32_t cap = 64;
        w.node = malloc(cap * sizeof *w.node);
        w.local = malloc(cap * sizeof *w.local);
        for (char *sv = NULL, *t = strtok_r(ranks, " ", &sv); t && ok;
             t = strtok_r(NULL, " ", &sv)) {
            unsigned m = 0, l = 0;
            if (!w.node || !w.local || sscanf(t, "%u:%u", &m, &l) != 2 || m >= nm) {
                ok = false;
                break;
            }
            if (w.n == cap) {
                cap *= 2;
                uint32_t *nn = realloc(w.node, cap * sizeof *nn);
                if (nn)
                    w.node = nn;
                uint32_t *nl = realloc(w.local, cap * sizeof *nl);
                if (nl)
                    w.local = nl;
                if (!nn || !nl) {
                    ok = false;
                    break;
                }
            }
            w.node[w.n] = idx[m];
            w.local[w.n++] = l;
        }
        if (ok) { /* the members in ascending node index, each once */
            qsort(idx, nm, sizeof *idx, ftc__cmp_u32);
            for (uint32_t i = 1; i < nm && ok; i++)
                ok = idx[i] != idx[i - 1];
            w.members = idx;
            w.nm = nm;
            idx = NULL;
        }
        free(idx);
    } else if (planned) {
        ok = false;
        said = true;
        snprintf(a->par->where_why, sizeof a->par->where_why, "out of memory reading a plan");
    }
    free(members);
    free(ranks);
    if (!ok) {
        if (!said)
            snprintf(a->par->where_why, sizeof a->par->where_why,
                     "the layout of generation %" PRIu64 " (ftc run's plan) in Redis is not "
                     "valid (members or ranks)",
                     gen);
        ftc__where_free(&w);
        return NULL;
    }
    /* replace the older entry */
    int slot = a->par->where[0].gen <= a->par->where[1].gen ? 0 : 1;
    ftc__where_free(&a->par->where[slot]);
    a->par->where[slot] = w;
    return &a->par->where[slot];
}

/* The nodes of generation gen: *members (ascending node indices, valid
 * until the next ftc__where) or NULL for all of 0..nodes-1 (no plan: agents
 * started by hand); false while a member of its plan is not known yet. */
static bool ftc__gen_nodes(ftc_agent_t *a, uint64_t gen, const uint32_t **members, uint32_t *nm)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w)
        return false;
    *members = w->planned ? w->members : NULL;
    *nm = w->planned ? w->nm : a->o.nodes;
    return true;
}

/* Rank -> (agent node index, local index) in generation gen; false while
 * unknown (a plan member not known yet, or a rank outside the plan). */
static bool ftc__par_locate(ftc_agent_t *a, uint64_t gen, uint32_t rank, uint32_t *node,
                            uint32_t *local)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w)
        return false;
    if (!w->planned) {
        *node = rank / a->o.ranks_per_node;
        *local = rank % a->o.ranks_per_node;
        return true;
    }
    if (rank >= w->n)
        return false;
    *node = w->node[rank];
    *local = w->local[rank];
    return true;
}

/* The rank on (node, local) in generation gen; UINT32_MAX if none (an idle
 * slot). Callers have located a rank of gen first (ftc__par_locate), so its
 * plan is cached; without a plan (agents started by hand) rank = node x
 * ranks_per_node + local. */
static uint32_t ftc__par_rank_on(ftc_agent_t *a, uint64_t gen, uint32_t node, uint32_t local)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w || !w->planned)
        return node * a->o.ranks_per_node + local;
    for (uint32_t r = 0; r < w->n; r++)
        if (w->node[r] == node && w->local[r] == local)
            return r;
    return UINT32_MAX;
}

/* The rank on (this node's group's member, local) in generation gen. */
static uint32_t ftc__par_rank_at(ftc_agent_t *a, uint64_t gen, int member, uint32_t local)
{
    return ftc__par_rank_on(a, gen, a->par->geo.node[member], local);
}

static uint32_t ftc__par_local(ftc_agent_t *a, const ftc__rank_t *r)
{
    uint32_t node, local;
    return ftc__par_locate(a, a->generation, r->rank, &node, &local)
               ? local
               : r->rank % a->o.ranks_per_node;
}

static uint32_t ftc__par_rank(ftc_agent_t *a, int member, uint32_t local)
{
    return ftc__par_rank_at(a, a->generation, member, local);
}

/* The published groups of generation gen (`ftc:{J}:pargroups:GEN`): 0 with
 * *text (malloc'd) or NULL when none, else a Redis error. */
static int ftc__par_groups_get_gen(ftc_agent_t *a, uint64_t gen, char **text)
{
    char key[200], suffix[48];
    *text = NULL;
    snprintf(suffix, sizeof suffix, "pargroups:%" PRIu64, gen);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    const char *v;
    size_t vl;
    int rc = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "GET", key, NULL);
    if (rc == 0 && ftc_redis_want_str(rep, "GET pargroups", &v, &vl, NULL) == 0 &&
        !(*text = strndup(v, vl)))
        rc = FTC_ENOMEM;
    ftc_redis_reply_free(rep);
    return rc;
}

/* ... of this generation */
static int ftc__par_groups_get(ftc_agent_t *a, char **text)
{
    return ftc__par_groups_get_gen(a, a->generation, text);
}

/* Node `node`'s parity group in generation gen, geo->member being node's
 * index in it: from that generation's published groups; when they are not
 * published (Redis did not answer the agents of this generation) and gen is
 * this one, from this agent's own groups. -1 with why otherwise (not
 * published, or for another redundancy or node count). */
static int ftc__par_group_of(ftc_agent_t *a, uint64_t gen, uint32_t node, ftc__par_geo_t *geo,
                             char *why, size_t cap)
{
    char *text = NULL;
    int rc = ftc__par_groups_get_gen(a, gen, &text);
    ftc_err_t err = {0};
    const uint32_t *mem = NULL;
    uint32_t nm = 0;
    if (rc == 0 && text && !ftc__gen_nodes(a, gen, &mem, &nm)) {
        snprintf(why, cap, "the plan of generation %" PRIu64 " names a node whose agent is not "
                 "known (ftc:{%s}:plan:%" PRIu64 ")", gen, a->job, gen);
        free(text);
        return -1;
    }
    if (rc == 0 && text) {
        rc = ftc__par_groups_parse_in(text, &a->o.redundancy, a->o.nodes, mem, nm, node, geo,
                                      &err);
        if (rc)
            snprintf(why, cap, "the parity groups of generation %" PRIu64 " (ftc:{%s}:"
                     "pargroups:%" PRIu64 "): %s", gen, a->job, gen, err.msg);
        free(text);
        return rc ? -1 : 0;
    }
    free(text);
    if (gen == a->generation && a->par->resolved && !a->par->few) {
        const ftc__par_geo_t *g = &a->par->geo;
        for (int i = 0; i < g->n; i++)
            if (g->node[i] == node) {
                *geo = *g;
                geo->member = i;
                return 0;
            }
        if (!g->by_domain && ftc__gen_nodes(a, gen, &mem, &nm) &&
            ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, NULL, node, geo,
                                 &err) == 0)
            return 0; /* another group of index order (this agent's are unpublished) */
    }
    snprintf(why, cap, "the parity groups of generation %" PRIu64 " are not in Redis "
             "(ftc:{%s}:pargroups:%" PRIu64 ": %s)", gen, a->job, gen,
             rc ? ftc_redis_errstr(ftc_ctl_redis(a->ctl)) : "no such key");
    return -1;
}

/* Adopts published groups: 1, or -1 (a conflict: p->why) when they do not
 * fit this agent's redundancy and node count. */
static int ftc__par_adopt(ftc_agent_t *a, const char *text, const uint32_t *mem, uint32_t nm,
                          bool ours)
{
    struct ftc__agent_par *p = a->par;
    ftc__par_geo_t g;
    ftc_err_t err = {0};
    if (ftc__par_groups_parse_in(text, &a->o.redundancy, a->o.nodes, mem, nm, a->o.index, &g,
                                 &err)) {
        snprintf(p->why, sizeof p->why, "ftc:{%s}:pargroups:%" PRIu64 ": %s", a->job,
                 a->generation, err.msg);
        p->conflict = true;
        FTC_ERROR("agent", "parity groups: %s", p->why);
        return -1;
    }
    bool same = g.n == p->geo.n && !memcmp(g.node, p->geo.node, sizeof(uint32_t) * (size_t)g.n);
    if (same) { /* the domain count this agent computed still applies */
        g.dom_max = p->geo.dom_max;
        g.dom_node = p->geo.dom_node;
    }
    p->geo = g;
    p->resolved = true;
    char gs[200];
    FTC_INFO("agent", "parity group of %s (%s; %d data + %d parity chunks per row, memory x%.2f)",
             ftc__par_geo_str(&p->geo, gs, sizeof gs),
             p->geo.by_domain ? "striped over failure domains" : "node index order", p->geo.d,
             p->geo.m, (double)p->geo.n / p->geo.d);
    if (ours)
        FTC_INFO("agent", "parity groups published for generation %" PRIu64 ": %s",
                 a->generation, text);
    else
        FTC_INFO("agent", "parity groups adopted from ftc:{%s}:pargroups:%" PRIu64 " (formed by "
                 "the first agent; every agent of the generation uses them): %s%s", a->job,
                 a->generation, text, same ? "" : " (not the ones this agent would form)");
    return 1;
}

/* Forms the parity groups, once: they never change in the agent's life, and
 * every agent of a generation uses the same ones. The first agent to form
 * them publishes them (SET NX `ftc:{J}:pargroups:GEN`, docs/redis-keys.md);
 * an agent that finds them published adopts them (validated: same
 * redundancy and node count, else a conflict, FTC_ECONFIG). Forming: without
 * a failure domain of its own the agent uses index order at once. With one
 * it needs every node's domain, which each agent publishes in Redis with its
 * fabric address (ftc__refresh_peers); it waits for them until
 * agent.timeout_ms after its start, then falls back to index order with a
 * warning (unless groups were published meanwhile). Returns 1 when formed,
 * 0 while it waits (callers retry from the poll), -1 on a conflict (p->why).
 */
static int ftc__par_resolve(ftc_agent_t *a)
{
    struct ftc__agent_par *p = a->par;
    if (p->resolved)
        return 1;
    if (p->conflict)
        return -1;
    uint64_t now = ftc_now_ns();
    bool late = now >= p->resolve_by_ns;
    if (!late && now < p->next_look_ns)
        return 0; /* looked less than 100 ms ago (callers retry from the poll) */
    p->next_look_ns = now + 100000000ull;
    /* the generation's nodes: its plan's members (ftc run), else all */
    const uint32_t *wm = NULL;
    uint32_t nm = a->o.nodes;
    if (!ftc__gen_nodes(a, a->generation, &wm, &nm)) {
        /* a member's agent is not known yet (or Redis did not answer):
         * retried. Never formed over other nodes than the plan's: agents
         * that know the plan would refuse such groups. A version waiting
         * for the groups fails after its deadline (ftc__par_try_push). */
        if (late && !p->late_warned) {
            p->late_warned = true;
            FTC_WARN("agent", "parity groups of generation %" PRIu64 " (ftc:{%s}:plan:%" PRIu64
                     ") not formed after %d ms: %s; no parity groups until then",
                     a->generation, a->job, a->generation, a->o.timeout_ms, p->where_why);
        }
        return 0;
    }
    int m = a->o.redundancy.kind == FTC_RED_XOR ? 1 : a->o.redundancy.m;
    if (nm <= (uint32_t)m) {
        /* a generation shrunk below a group (the job's own node count was
         * checked at the start): commit without parity rather than never */
        p->few = p->resolved = true;
        FTC_WARN("agent", "generation %" PRIu64 " has %u node(s), a parity group needs more "
                 "than %d: checkpoints commit with %s until more nodes join", a->generation, nm,
                 m, nm > 1 ? "one replica on the next node" : "this node's memory alone");
        return 1;
    }
    uint32_t *mem = wm ? malloc(nm * sizeof *mem) : NULL; /* wm lives until the next where */
    if (wm && !mem)
        return 0; /* out of memory: retried */
    if (mem)
        memcpy(mem, wm, nm * sizeof *mem);
    /* index order over the generation's nodes, unless domains say otherwise
     * (and what an adopted text is compared with) */
    ftc__par_geo_t g;
    ftc_err_t err = {0};
    int grc_geo = ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, NULL, a->o.index,
                                       &g, &err);
    if (grc_geo == 0)
        p->geo = g;
    char *pub = NULL;
    int grc = ftc__par_groups_get(a, &pub);
    if (grc == 0 && pub) {
        int rc = ftc__par_adopt(a, pub, mem, nm, false);
        free(pub);
        free(mem);
        return rc;
    }
    if (grc && !late) {
        free(mem);
        return 0; /* Redis unreachable: retried */
    }
    uint32_t missing = 0, first_missing = 0, no_domain = 0;
    for (uint32_t k = 0; k < nm && a->domain[0]; k++) {
        uint32_t i = mem ? mem[k] : k;
        if (i == a->o.index)
            continue;
        if (!a->peers[i].known && !missing++)
            first_missing = i;
        if (a->peers[i].known && !a->peers[i].domain[0])
            no_domain++;
    }
    if (missing && !late) {
        free(mem);
        return 0;
    }
    char gs[200];
    const char **doms = missing || !a->domain[0] ? NULL : calloc(a->o.nodes, sizeof *doms);
    if (grc_geo) {
        snprintf(p->why, sizeof p->why, "generation %" PRIu64 ": %s", a->generation, err.msg);
        p->conflict = true;
        FTC_ERROR("agent", "parity groups: %s", p->why);
        free(doms);
        free(mem);
        return -1;
    }
    if (missing) {
        FTC_WARN("agent", "failure domains: %u node(s) (node %u first) did not publish a domain "
                 "within %d ms and no agent published parity groups: parity groups follow node "
                 "indices (%s)", missing, first_missing, a->o.timeout_ms,
                 ftc__par_geo_str(&p->geo, gs, sizeof gs));
    } else if (a->domain[0] && !doms) {
        free(mem);
        return 0; /* out of memory: retried */
    } else if (doms) {
        for (uint32_t i = 0; i < a->o.nodes; i++)
            doms[i] = i == a->o.index ? a->domain : a->peers[i].domain;
        if (no_domain)
            FTC_WARN("agent", "failure domains: %u node(s) have none (each counts as a domain of "
                     "its own); set --domain on every node or on none", no_domain);
        if (ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, doms, a->o.index, &g,
                                 &err) == 0) {
            p->geo = g;
        } else {
            FTC_WARN("agent", "parity groups by failure domain: %s; using node index order",
                     err.msg);
            free(doms);
            doms = NULL;
        }
    }
    /* publish them; another agent may have been first */
    char *mine = NULL;
    int rc = 1;
    if (grc == 0 &&
        ftc__par_groups_str_in(&a->o.redundancy, a->o.nodes, mem, nm, doms, &mine, &err) == 0) {
        char key[200], suffix[48];
        snprintf(suffix, sizeof suffix, "pargroups:%" PRIu64, a->generation);
        ftc_ctl_key(a->ctl, suffix, key, sizeof key);
        ftc_redis_reply_t *rep = NULL;
        int src = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), false, &rep, "SET", key, mine, "NX",
                                 "PX", "86400000", NULL);
        bool won = src == 0 && ftc_redis_want_status(rep, "SET pargroups", "OK", NULL) == 0;
        ftc_redis_reply_free(rep);
        if (won) {
            rc = ftc__par_adopt(a, mine, mem, nm, true);
        } else if (src == 0 && ftc__par_groups_get(a, &pub) == 0 && pub) {
            rc = ftc__par_adopt(a, pub, mem, nm, false); /* another agent was first */
            free(pub);
        } else {
            FTC_WARN("agent", "parity groups: could not publish them (%s): using this agent's",
                     src ? ftc_redis_errstr(ftc_ctl_redis(a->ctl)) : "no value after SET NX");
        }
    } else if (grc == 0) {
        FTC_WARN("agent", "parity groups: %s", err.msg);
    } else {
        FTC_WARN("agent", "parity groups: Redis did not answer within %d ms (%s): using this "
                 "agent's, unpublished", a->o.timeout_ms,
                 ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
    }
    free(mine);
    free(mem);
    if (rc < 0) {
        free(doms);
        return rc;
    }
    if (!p->resolved) { /* not published: this agent's own */
        p->resolved = true;
        FTC_INFO("agent", "parity group of %s (%s; %d data + %d parity chunks per row, memory "
                 "x%.2f)", ftc__par_geo_str(&p->geo, gs, sizeof gs),
                 p->geo.by_domain ? "striped over failure domains" : "node index order",
                 p->geo.d, p->geo.m, (double)p->geo.n / p->geo.d);
    }
    ftc__par_geo_str(&p->geo, gs, sizeof gs);
    if (doms && p->geo.dom_max > p->geo.m)
        FTC_WARN("agent", "parity group of %s holds %d members of failure domain '%s' but "
                 "tolerates %d lost members: losing that domain loses the group's checkpoints "
                 "(too few domains: use more domains, fewer nodes per group or rs:G+M with a "
                 "larger M)",
                 gs, p->geo.dom_max, doms[p->geo.dom_node], p->geo.m);
    free(doms);
    return 1;
}

/* The encoder of local index l's stripe in this generation: the first
 * member from l % n on (cyclically) that has a rank at local index l
 * (ftc__par_encoder); an idle member never encodes. */
static bool ftc__par_is_encoder(ftc_agent_t *a, uint32_t local)
{
    bool idle[FTC_PARITY_MAX];
    for (int i = 0; i < a->par->geo.n; i++)
        idle[i] = ftc__par_rank(a, i, local) == FTC_PAR_IDLE;
    return ftc__par_encoder(&a->par->geo, local, idle) == a->par->geo.member;
}

static void ftc__par_fail(ftc_agent_t *a, ftc__rank_t *r, int s, int code, const char *why)
{
    FTC_WARN("agent", "rank %u step %" PRIu64 ": parity not stored: %s", r->rank, r->step[s], why);
    r->st[s] = SL_EMPTY; /* not committed; the previous version stays */
    ftc__not_committed(r->fd, code, r->step[s], "step %" PRIu64 " not committed: parity: %s",
                       r->step[s], why);
    for (int o = 0; o < NS; o++)
        if (o != s)
            ftc__try_push(a, r, o);
    ftc__answer_begin(a, r); /* a BEGIN parked for this slot (checkpoint.inflight 1) */
}

/* Parity mode's part of ftc__try_push: false when the replica path should
 * run instead (never, today). A member that is not its stripe's encoder
 * has nothing to send: the encoder fetches its shard, and reports it to the
 * commit record once every member holds its parity. The encoder gathers the
 * other members' shards of the step (retrying until they are sealed). */
static bool ftc__par_try_push(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    ftc__par_geo_t *g = &a->par->geo;
    uint32_t at_node = 0, at_local = 0;
    if (!ftc__par_locate(a, a->generation, r->rank, &at_node, &at_local)) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* a plan member's agent not known yet: retried by the poll */
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ETIMEDOUT, a->par->where_why);
        return true;
    }
    if (at_node != a->o.index) {
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ECONFIG,
                      "parity groups need every rank on the node the layout says (without "
                      "`ftc run`: rank = node index x ranks_per_node + local index)");
        return true;
    }
    int resolved = ftc__par_resolve(a);
    if (resolved < 0) {
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ECONFIG, a->par->why);
        return true;
    }
    if (!resolved) {
        if (ftc_now_ns() - r->sealed_ns[s] < 2ull * (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* retried by the poll */
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ETIMEDOUT, "the parity groups are not formed (waiting for "
                      "a plan member's agent or every node's failure domain)");
        return true;
    }
    if (a->par->few)
        return false; /* too few nodes for a group: the replica path (ftc__try_push) */
    uint32_t local = ftc__par_local(a, r);
    if (a->par->enc[r - a->ranks].active)
        return true; /* the previous encode's pushes still read its parity: retried at its end */
    if (!ftc__par_is_encoder(a, local)) {
        r->pushed[s] = r->acked[s] = r->reported[s] = true; /* the encoder reports it */
        return true;
    }
    for (int o = 0; o < NS; o++) {
        if (o == s)
            continue;
        if (r->st[o] == SL_SEALED && r->pushed[o] && !r->acked[o])
            return true; /* one encode per stripe at a time, in step order */
        /* and only once the older step has committed, as replicas do: a
         * member keeps two parity versions per stripe, so encoding N while
         * N-1 is acknowledged but not committed (another group may fail it)
         * could make members drop the parity of the newest committed N-2 */
        if (r->st[o] == SL_SEALED && r->step[o] < r->step[s])
            return true;
    }
    int missing = 0;
    for (int i = 0; i < g->n; i++) {
        uint32_t node = g->node[i];
        if (i != g->member && (!a->peers[node].known || !a->peers[node].alive))
            missing++;
    }
    if (missing) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* retried by the poll */
        r->pushed[s] = true;
        char why[360], gs[200];
        snprintf(why, sizeof why, "%d of the %d other members of the group of %s are "
                 "not known or alive after %d ms", missing, g->n - 1,
                 ftc__par_geo_str(g, gs, sizeof gs), a->o.timeout_ms);
        ftc__par_fail(a, r, s, FTC_ENOENT, why);
        return true;
    }
    ftc__job_t *j = calloc(1, sizeof *j);
    ftc__gather_t *ga = calloc(1, sizeof *ga);
    if (!j || !ga) {
        free(j);
        free(ga);
        return true; /* retried by the poll */
    }
    ga->step = r->step[s];
    ga->max_attempts = 1 << 20; /* bounded by the deadline: members seal at their own pace */
    ga->retry_ms = 20;
    ga->d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
    /* a member whose rank failed to snapshot the step never seals it: the
     * gather ends once the step is known aborted, not at the deadline */
    ga->stop = a->aborted_stop;
    ga->nstop = FTC__ABORTED_KEEP;
    for (int i = 0; i < g->n; i++) {
        uint32_t owner = ftc__par_rank(a, i, local);
        if (i == g->member || owner == FTC_PAR_IDLE)
            continue; /* an idle member's shard is the virtual zero shard: never fetched */
        ftc__gitem_t *it = &ga->it[ga->n++];
        it->peer = g->node[i];
        it->owner = owner;
        it->member = i;
    }
    j->kind = JOB_GATHER;
    j->par = PAR_ENCODE;
    j->rix = (int)(r - a->ranks);
    j->owner = r->rank;
    j->step = r->step[s];
    j->gather = ga;
    r->pushed[s] = true;
    ftc__queue(a, j);
    return true;
}

/* The gather of an encode ended: hands the encode to the parity worker
 * (ftc__par_on_encoded takes it back). The slot stays SEALED and pushed
 * meanwhile, so no other encode of the stripe starts and no BEGIN reuses it. */
static void ftc__par_encode_done(ftc_agent_t *a, ftc__rank_t *r, int s, ftc__job_t *j)
{
    if (r->aborted[s] || ftc__step_aborted(a, r->step[s])) {
        /* a rank failed to snapshot the step (its gather was stopped): it
         * can never commit, so it is not encoded but abandoned now, the rank
         * told which rank failed it */
        r->aborted[s] = true;
        r->pushed[s] = false; /* nothing reported: no withdraw */
        ftc__abandon_aborted(a);
        return;
    }
    ftc__par_geo_t *g = &a->par->geo;
    uint32_t local = ftc__par_local(a, r);
    char why[700] = "";
    for (int i = 0; i < j->gather->n; i++) {
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, "%sshard of rank %u from node %u: %s", l ? "; " : "",
                     it->owner, it->peer, it->detail[0] ? it->detail : ftc_strerror(it->rc));
        }
    }
    if (why[0]) {
        ftc__par_fail(a, r, s, FTC_EIO, why);
        return;
    }
    ftc__par_task_t *t = calloc(1, sizeof *t);
    if (!t) {
        ftc__par_fail(a, r, s, FTC_ENOMEM, "out of memory");
        return;
    }
    t->rix = j->rix;
    t->slot = s;
    t->rank = r->rank;
    t->local = local;
    t->step = r->step[s];
    t->gen = a->generation;
    /* the wrapper to keep: the newest committed step's, or the previous
     * encode's when every member acknowledged it and its slot still waits
     * for the commit record (the commit may complete at any time, before
     * a->committed knows: keeping only a->committed's would overwrite it).
     * A version whose encode failed never commits: its wrapper is the one
     * overwritten. */
    int64_t ok = a->par->enc[j->rix].ok_step;
    t->keep = a->committed;
    for (int o = 0; o < NS && ok > t->keep && (uint64_t)ok < r->step[s]; o++)
        if (o != s && r->st[o] == SL_SEALED && r->acked[o] && r->step[o] == (uint64_t)ok)
            t->keep = ok; /* still sealed, reported, its commit pending */
    snprintf(t->job, sizeof t->job, "%s", a->job);
    snprintf(t->ns, sizeof t->ns, "%s", a->ns);
    snprintf(t->slot_name, sizeof t->slot_name, "%s", r->slot[s].name);
    t->slot_size = r->size;
    t->geo = *g;
    for (int i = 0; i < j->gather->n; i++) { /* the worker takes the fetched shards */
        ftc__gitem_t *it = &j->gather->it[i];
        t->bufs[it->member] = it->buf;
        t->sizes[it->member] = it->size;
        it->buf = NULL;
    }
    for (int i = 0; i < g->n; i++) {
        t->ranks[i] = ftc__par_rank(a, i, local);
        if (i != g->member && t->ranks[i] != FTC_PAR_IDLE && !t->bufs[i]) {
            ftc__par_task_free(t); /* the layout changed under the gather */
            ftc__par_fail(a, r, s, FTC_ESTALE, "the layout changed during the parity gather");
            return;
        }
        if (t->ranks[i] == FTC_PAR_IDLE && i != g->member) { /* the virtual zero shard */
            free(t->bufs[i]);
            t->bufs[i] = NULL;
            t->sizes[i] = 0;
        }
    }
    ftc__par_worker_submit(a->par->worker, t);
}

/* The worker encoded a version (or failed): store the wrappers for the
 * pushes and push every other member its parity. A task whose slot moved on
 * meanwhile (a new layout, a failure) is dropped. */
static void ftc__par_on_encoded(ftc_agent_t *a, ftc__par_task_t *t)
{
    if (t->rix < 0 || t->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[t->rix];
    int s = t->slot;
    if (!r->used || r->rank != t->rank || r->st[s] != SL_SEALED || r->step[s] != t->step ||
        !r->pushed[s] || r->acked[s])
        return;
    if (t->rc) {
        ftc__par_fail(a, r, s, t->rc, t->detail);
        return;
    }
    ftc__par_geo_t *g = &a->par->geo;
    ftc__enc_t *e = &a->par->enc[t->rix];
    for (int i = 0; i < FTC_PARITY_MAX; i++) {
        free(e->wraps[i]);
        e->wraps[i] = t->wraps[i]; /* kept until the next encode: the pushes read them */
        t->wraps[i] = NULL;
    }
    memcpy(e->ranks, t->ranks, sizeof e->ranks);
    memcpy(e->heads, t->heads, sizeof e->heads);
    FTC_INFO("agent", "rank %u step %" PRIu64 ": parity of %d shards encoded in %.1f ms (parity "
             "worker)", r->rank, t->step, g->n, t->ms);
    e->active = true;
    e->step = t->step;
    e->slot = s;
    e->pending = e->acked = 0;
    e->detail[0] = 0;
    for (int i = 0; i < g->n; i++) {
        if (i == g->member)
            continue;
        ftc__job_t *p = calloc(1, sizeof *p);
        if (!p) {
            snprintf(e->detail, sizeof e->detail, "out of memory");
            continue;
        }
        p->kind = JOB_PUSH;
        p->par = PAR_ENCODE;
        p->keep = -1; /* parity blocks: their own double-buffering rule (not keep) */
        p->rix = t->rix;
        p->owner = FTC_PAR_OWNER(t->local);
        p->step = t->step;
        p->shard = e->wraps[i];
        p->size = t->wsizes[i];
        p->peers[0] = g->node[i];
        p->npeers = 1;
        e->pending++;
        ftc__queue(a, p);
    }
    if (e->pending == 0) /* a group of one other member failed to allocate, or none */
        ftc__par_on_push_done(a, NULL);
}

/* Takes the parity worker's finished encodes (the eventfd woke the loop). */
static void ftc__par_collect(ftc_agent_t *a)
{
    if (!a->par || !a->par->worker)
        return;
    ftc__par_task_t *t = ftc__par_worker_take(a->par->worker);
    while (t) {
        ftc__par_task_t *next = t->next;
        if (t->rebuild)
            ftc__par_on_rebuilt(a, t);
        else
            ftc__par_on_encoded(a, t);
        ftc__par_task_free(t);
        t = next;
    }
}

/* A parity push finished (j NULL: check the encode of every rank). Once every
 * member holds its parity the encoder reports each member's shard. */
static void ftc__par_on_push_done(ftc_agent_t *a, ftc__job_t *j)
{
    if (j) {
        ftc__enc_t *e = &a->par->enc[j->rix];
        if (!e->active || e->step != j->step)
            return;
        e->pending--;
        if (j->rc == 0 && j->acked >= 1) {
            e->acked++;
        } else {
            size_t l = strlen(e->detail);
            snprintf(e->detail + l, sizeof e->detail - l, "%snode %u: %s", l ? "; " : "",
                     j->peers[0], j->detail[0] ? j->detail : ftc_strerror(j->rc));
        }
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__enc_t *e = &a->par->enc[i];
        if (!e->active || e->pending > 0)
            continue;
        e->active = false;
        ftc__rank_t *r = &a->ranks[i];
        int s = e->slot;
        if (!r->used || r->st[s] != SL_SEALED || r->step[s] != e->step)
            continue;
        if (e->acked < a->par->geo.n - 1) {
            char why[700];
            snprintf(why, sizeof why, "%d of %d members acknowledged their parity: %s", e->acked,
                     a->par->geo.n - 1, e->detail);
            ftc__par_fail(a, r, s, FTC_EIO, why);
            continue;
        }
        e->ok_step = (int64_t)e->step;
        /* the other members' shards first: our own report may complete the step */
        for (int m = 0; m < a->par->geo.n; m++) {
            if (m == a->par->geo.member || e->ranks[m] == FTC_PAR_IDLE)
                continue; /* an idle member has no rank to report */
            int64_t committed;
            bool now;
            int rc = FTC_EIO;
            for (int t = 0; t < 3 && rc && rc != FTC_ECANCELED; t++) /* not: aborted */
                rc = ftc_ctl_commit_report(a->ctl, a->generation, (int64_t)e->step, e->ranks[m],
                                           e->heads[m], &committed, &now);
            if (rc)
                FTC_WARN("agent", "commit report of rank %u step %" PRIu64 " (parity): %s",
                         e->ranks[m], e->step, ftc_ctl_errstr(a->ctl));
            else if (committed > a->committed)
                a->committed = committed;
        }
        r->acked[s] = true;
        ftc__report_commit(a, r, s);
        for (int o = 0; o < NS; o++) /* the next step may have waited for this encode */
            if (o != s)
                ftc__try_push(a, r, o);
    }
}

/* Queues the gather of a lost shard's pieces: every surviving member's data
 * shard and parity of the restore step, in the subject's group of the
 * committed version's layout. That is this node's group at the lost
 * member's position (a replacement node), or another group when the rank
 * moved (a shrink, a layout change): then this node may be a member itself
 * (its own pieces are read from its slots) or not in the group at all.
 * False when there is nothing to gather here (the caller tries a fetch,
 * then the persist tier); true when queued, or when it failed and the
 * restore already went on to the persist tier naming what was missing. */
static bool ftc__par_queue_rebuild(ftc_agent_t *a, ftc__rank_t *r)
{
    /* the subject's stripe position in the layout of the committed version */
    int64_t cstep = -1;
    uint64_t cgen = a->generation;
    /* Redis known down: not asked (a command timeout for nothing), the
     * current generation's layout as when the read fails */
    int crc = a->redis_down ? FTC_EREDIS : ftc_ctl_committed(a->ctl, &cstep, &cgen);
    if (crc && ftc__redis_outage(a, crc) && !a->redis_down)
        ftc__redis_seen(a, crc);
    if (crc || cgen == 0)
        cgen = a->generation;
    uint32_t at_node = 0, local = 0;
    if (!ftc__par_locate(a, cgen, r->src, &at_node, &local) || at_node >= a->o.nodes) {
        FTC_WARN("agent", "rank %u: no parity rebuild of rank %u: the layout of generation "
                 "%" PRIu64 " does not place it (%s)", r->rank, r->src, cgen,
                 ftc__where(a, cgen) ? "the rank is not in its plan" : a->par->where_why);
        return false;
    }
    bool moved = at_node != a->o.index;
    if (moved && a->peers[at_node].known && a->peers[at_node].alive) {
        FTC_INFO("agent", "rank %u: rank %u was on node %u in generation %" PRIu64 ", which is "
                 "alive: fetching its shard from there (no rebuild)", r->rank, r->src, at_node,
                 cgen);
        return false; /* ftc__queue_fetch: the subject's node serves its slot */
    }
    ftc__par_geo_t geo;
    char why[400];
    if (ftc__par_group_of(a, cgen, at_node, &geo, why, sizeof why) != 0) {
        if (moved) {
            ftc__par_rebuild_failed(a, r, why, "");
            return true;
        }
        /* at this node's position: this agent's groups, as they are */
        int resolved = ftc__par_resolve(a);
        if (resolved <= 0 || a->par->few) {
            FTC_WARN("agent", "rank %u: no parity rebuild: %s", r->rank,
                     resolved < 0   ? a->par->why
                     : resolved > 0 ? "this generation has too few nodes for a parity group"
                                    : "the parity groups are not formed yet (waiting for every "
                                      "node's failure domain in Redis)");
            return false;
        }
        FTC_WARN("agent", "rank %u: %s; rebuilding with this agent's group", r->rank, why);
        geo = a->par->geo;
    }
    char gs[200], gone[200] = "";
    ftc__par_geo_str(&geo, gs, sizeof gs);
    ftc__gather_t *ga = calloc(1, sizeof *ga);
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!ga || !j) {
        free(ga);
        free(j);
        return false;
    }
    ga->step = r->restore_step;
    ga->max_attempts = 4; /* peers learn a restarted agent's address within ~0.5 s */
    ga->retry_ms = 500;
    ga->d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
    snprintf(ga->ns, sizeof ga->ns, "%s", a->ns);
    int fetched = 0;
    for (int i = 0; i < geo.n; i++) {
        uint32_t node = geo.node[i];
        if (i == geo.member)
            continue;
        bool self = node == a->o.index;
        if (!self && (node >= a->o.nodes || !a->peers[node].known || !a->peers[node].alive)) {
            size_t l = strlen(gone);
            snprintf(gone + l, sizeof gone - l, "%snode%u gone", l ? ", " : "", node);
            continue;
        }
        uint32_t owner = ftc__par_rank_on(a, cgen, node, local);
        for (int w = owner == FTC_PAR_IDLE; w < 2; w++) { /* an idle member: parity only */
            ftc__gitem_t *it = &ga->it[ga->n++];
            it->peer = node;
            it->owner = w ? FTC_PAR_OWNER(local) : owner;
            it->member = i;
            it->wrapper = w;
            /* this node's own piece (a moved rank's rebuild in a group this
             * node is a member of): nothing to fetch; the replication thread
             * takes it from its replica store or this node's slots */
            it->local = self;
            fetched += !self;
        }
    }
    if (!ga->n) {
        free(ga);
        free(j);
        char w[600];
        snprintf(w, sizeof w, "no member of the group of %s (generation %" PRIu64 ") is alive "
                 "(%s)", gs, cgen, gone);
        if (moved) {
            ftc__par_rebuild_failed(a, r, w, "");
            return true;
        }
        FTC_WARN("agent", "rank %u: no parity rebuild: %s", r->rank, w);
        return false;
    }
    r->rebuild_gen = cgen;
    r->rebuild_local = local;
    r->rebuild_geo = geo;
    snprintf(j->detail, sizeof j->detail, "%s", gone); /* named when the decode fails */
    if (moved)
        FTC_INFO("agent", "rank %u: rebuilding rank %u's step %" PRIu64 " from parity of the "
                 "group of %s (generation %" PRIu64 ": it was member %d, node %u, local index "
                 "%u; %d piece(s) to fetch)", r->rank, r->src, r->restore_step, gs, cgen,
                 geo.member, at_node, local, fetched);
    j->kind = JOB_GATHER;
    j->par = PAR_REBUILD;
    j->rix = (int)(r - a->ranks);
    j->req = r->req; /* its result answers this request only (ftc__par_on_gather_done) */
    j->owner = r->rank;
    j->step = r->restore_step;
    j->gather = ga;
    ftc__queue(a, j);
    return true;
}

/* A rebuild failed: the restore goes on to the persist tier. */
static void ftc__par_rebuild_failed(ftc_agent_t *a, ftc__rank_t *r, const char *why,
                                    const char *looked)
{
    char tried[600];
    snprintf(tried, sizeof tried, "not in this node's slots; parity rebuild: %s%s%s", why,
             looked[0] ? " (failed fetches: " : "", looked[0] ? looked : "");
    if (looked[0])
        strncat(tried, ")", sizeof tried - strlen(tried) - 1);
    FTC_WARN("agent", "rank %u: %s", r->rank, tried);
    ftc__restore_from_persist(a, r, tried);
}

static void ftc__par_rebuild_done(ftc_agent_t *a, ftc__rank_t *r, ftc__job_t *j)
{
    ftc__par_geo_t *g = &r->rebuild_geo;
    char looked[200] = ""; /* short: the rank's error text is bounded; the log has it all */
    snprintf(looked, sizeof looked, "%s", j->detail); /* the members not asked: gone */
    for (int i = 0; i < j->gather->n; i++) {
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf) {
            FTC_WARN("agent", "rank %u: rebuild of step %" PRIu64 ": %s of node %u: %s", r->rank,
                     j->step, it->wrapper ? "parity" : "shard", it->peer,
                     it->detail[0] ? it->detail : ftc_strerror(it->rc));
            size_t l = strlen(looked);
            snprintf(looked + l, sizeof looked - l, "%s%s@node%u %s", l ? ", " : "",
                     it->wrapper ? "parity" : "shard", it->peer, ftc_errname(it->rc));
        }
    }
    /* the decode and its verification run on the parity worker (a large
     * shard would hold the control loop): ftc__par_on_rebuilt takes it back */
    ftc__par_task_t *t = calloc(1, sizeof *t);
    if (!t) {
        ftc__par_rebuild_failed(a, r, "out of memory", looked);
        return;
    }
    t->rebuild = true;
    t->rix = j->rix;
    t->req = j->req;
    t->rank = r->rank;
    t->local = r->rebuild_local;
    t->step = j->step;
    t->geo = *g;
    snprintf(t->looked, sizeof t->looked, "%s", looked);
    for (int i = 0; i < j->gather->n; i++) { /* the worker takes the fetched pieces */
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf)
            continue;
        if (it->wrapper) {
            t->wraps[it->member] = it->buf;
            t->wsizes[it->member] = it->size;
        } else {
            t->bufs[it->member] = it->buf;
            t->sizes[it->member] = it->size;
        }
        it->buf = NULL;
    }
    ftc__par_worker_submit(a->par->worker, t);
}

/* The worker rebuilt a shard (or failed): install it, else the persist tier.
 * A result for a rank that is no longer restoring that step is dropped. */
static void ftc__par_on_rebuilt(ftc_agent_t *a, ftc__par_task_t *t)
{
    if (t->rix < 0 || t->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[t->rix];
    if (!r->used || r->rank != t->rank || !r->restoring || r->fd < 0 || r->req != t->req ||
        r->restore_step != t->step) {
        FTC_DEBUG("agent", "parity rebuild of rank %u step %" PRIu64 " for request %" PRIu64
                  " done (rc %d), but that request is over: dropped", t->rank, t->step, t->req,
                  t->rc);
        return;
    }
    ftc_shard_view_t v;
    ftc_err_t verr = {0};
    char why[400];
    if (t->rc == 0 && ftc_shard_open(&v, t->out, t->out_size, 0, &verr) == 0 && /* verified */
        !ftc__copy_is_recorded(r, &v, "the parity rebuild", why, sizeof why)) {
        /* the group's parity encoded another version of the step */
        ftc__par_rebuild_failed(a, r, why, t->looked);
        return;
    }
    if (t->rc == 0) {
        ftc_err_t err = {0};
        int s = ftc__install(r, t->out, t->out_size, t->step, &err);
        if (s >= 0) {
            char gs[200], code[32];
            /* the code the group's parity.meta recorded, which decoded it:
             * not necessarily this agent's (xor:G and rs:G+1 share geo) */
            if (t->out_xor)
                snprintf(code, sizeof code, "xor:%d", t->geo.d);
            else
                snprintf(code, sizeof code, "rs:%d+%d", t->geo.d, t->geo.m);
            FTC_INFO("agent", "rank %u restored step %" PRIu64 " rebuilt from parity (%s, group of "
                     "%s) in %.1f ms (decode and verify on the parity worker; request %" PRIu64
                     ")", r->rank, t->step, code, ftc__par_geo_str(&t->geo, gs, sizeof gs), t->ms,
                     t->req);
            ftc__restore_done(a, r, s, false);
            return;
        }
        ftc__par_rebuild_failed(a, r,
                                err.code ? err.msg
                                         : "the rebuilt shard's size differs from the slots'",
                                t->looked);
        return;
    }
    ftc__par_rebuild_failed(a, r, t->detail, t->looked);
}

static void ftc__par_on_gather_done(ftc_agent_t *a, ftc__job_t *j)
{
    if (j->rix < 0 || j->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[j->rix];
    if (!r->used || r->rank != j->owner)
        return;
    if (j->par == PAR_REBUILD) {
        /* matched by request id, as fetch results are (ftc__on_fetch_done):
         * by rank and step, a rank that reconnected and asked again got its
         * earlier request's rebuild, its own one dropped */
        if (r->restoring && r->fd >= 0 && r->req == j->req && r->restore_step == j->step)
            ftc__par_rebuild_done(a, r, j);
        else
            FTC_DEBUG("agent", "parity rebuild gather of rank %u step %" PRIu64 " for request "
                      "%" PRIu64 " done, but that request is over: dropped", j->owner, j->step,
                      j->req);
        return;
    }
    for (int s = 0; s < NS; s++)
        if (r->st[s] == SL_SEALED && r->step[s] == j->step && r->pushed[s] && !r->acked[s]) {
            ftc__par_encode_done(a, r, s, j);
            return;
        }
}

static void ftc__par_free(ftc_agent_t *a)
{
    if (!a->par)
        return;
    ftc__par_worker_stop(a->par->worker);
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int k = 0; k < FTC_PARITY_MAX; k++)
            free(a->par->enc[i].wraps[k]);
    ftc__where_free(&a->par->where[0]);
    ftc__where_free(&a->par->where[1]);
    free(a->par);
    a->par = NULL;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static _Atomic(const char *) ftc__phase; /* ftc_agent_phase */
#define FTC__PHASE(p) atomic_store(&ftc__phase, (const char *)(p))

const char *ftc_agent_phase(void)
{
    return atomic_load(&ftc__phase);
}

ftc_agent_t *ftc_agent_start(const ftc_agent_options_t *o, ftc_err_t *err)
{
    if (!o->job || !o->dir || o->nodes < 1 || o->index >= o->nodes || o->ranks_per_node < 1 ||
        o->persist_every < 0 || o->timeout_ms < 1) {
        ftc_err_set(err, FTC_EINVAL, "agent: job, dir, nodes >= 1, index < nodes and "
                                     "ranks_per_node >= 1 are required");
        return NULL;
    }
    if (o->domain && *o->domain) {
        /* published as one word of "hexaddr node_id domain gen" in
         * ftc:{J}:fabric, where "-" means none: anything else would be read
         * back as another domain (other parity groups) by the peers, and as
         * a stale entry by `ftc run` */
        size_t dl = strlen(o->domain);
        bool ok = dl < 64 && strcmp(o->domain, "-") != 0;
        for (size_t i = 0; ok && i < dl; i++)
            ok = (unsigned char)o->domain[i] > ' ' && (unsigned char)o->domain[i] < 0x7f;
        if (!ok) {
            ftc_err_set(err, FTC_EINVAL, "agent: failure domain '%.80s' is not 1..63 printable "
                        "characters without spaces (and not \"-\"): use a label like rack-a",
                        o->domain);
            return NULL;
        }
    }
    ftc_agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
        return NULL;
    }
    a->o = *o;
    a->listen_fd = a->evfd = -1;
    a->committed = -1;
    a->newest_local = -1;
    a->persisted = -1;
    a->pwriting = -1;
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        a->clients[i] = -1;
    pthread_mutex_init(&a->mu, NULL);
    snprintf(a->job, sizeof a->job, "%s", o->job);
    snprintf(a->dir, sizeof a->dir, "%s", o->dir);
    if (o->node_id && *o->node_id)
        snprintf(a->node_id, sizeof a->node_id, "%s", o->node_id);
    else
        snprintf(a->node_id, sizeof a->node_id, "node%u", o->index);
    snprintf(a->domain, sizeof a->domain, "%s", o->domain ? o->domain : "");
    snprintf(a->ns, sizeof a->ns, "%s.n%u", o->job, o->index);
    a->o.job = a->job;
    a->o.dir = a->dir;
    a->peers = calloc(o->nodes, sizeof *a->peers);
    a->rpeers = calloc(o->nodes, sizeof *a->rpeers);
    a->raddr = calloc(o->nodes, sizeof *a->raddr);
    a->raddr_len = calloc(o->nodes, sizeof *a->raddr_len);
    if (!a->peers || !a->rpeers || !a->raddr || !a->raddr_len) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
        goto fail;
    }
    /* parity groups: refused before anything starts when they cannot be formed */
    if (o->redundancy.kind == FTC_RED_XOR || o->redundancy.kind == FTC_RED_RS) {
        a->par = calloc(1, sizeof *a->par);
        if (!a->par) {
            ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
            goto fail;
        }
        for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
            a->par->enc[i].ok_step = -1;
        /* index order; with a failure domain the groups are formed once every
         * node's domain is known (ftc__par_resolve) */
        if (ftc__par_geometry(&o->redundancy, o->nodes, NULL, o->index, &a->par->geo, err))
            goto fail;
        a->par->resolve_by_ns = ftc_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
        if ((uint64_t)o->nodes * o->ranks_per_node >= FTC_PAR_OWNER_BIT) {
            ftc_err_set(err, FTC_ECONFIG, "parity groups support worlds below 2^31 ranks");
            goto fail;
        }
    }
    if (ftc_fs_mkdirs(a->dir, err))
        goto fail;
    /* Redis */
    FTC__PHASE("start: connecting to Redis");
    ftc_redis_t *r = ftc_redis_connect(&o->redis, NULL, err);
    if (!r)
        goto fail;
    a->ctl = ftc_ctl_create(r, a->job, err);
    if (!a->ctl) {
        ftc_redis_close(r);
        goto fail;
    }
    FTC__PHASE("start: reading the generation");
    if (ftc__generation(a, err))
        goto fail;
    int64_t cstep;
    uint64_t cgen;
    if (ftc_ctl_committed(a->ctl, &cstep, &cgen) == 0)
        a->committed = cstep;
    /* fabric + replication engine; the address goes to Redis before our
     * heartbeat does, so peers never see us alive with a stale address */
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = o->provider;
    fo.abort_flag = &a->stop; /* a stop ends a post or wait the replication thread is in */
    a->fopt = fo;
    uint8_t secret[32];
    size_t slen = 0;
    if (ftc__secret(a, secret, &slen, err) || ftc_wire_key_init(&a->key, a->job, secret, slen, err))
        goto fail;
    ftc_repl_options_t ro = FTC_REPL_OPTIONS_INIT;
    ro.key = a->key;
    ro.job = a->job; /* the engine adds .n<self> itself */
    ro.self = o->index;
    ro.generation = a->generation;
    a->ropt = ro;
    FTC__PHASE("start: opening the fabric endpoint");
    if (ftc__open_transport(a, err) || ftc__publish_address(a, err))
        goto fail;
    /* detector: heartbeats, leases, events for this node */
    ftc_detector_options_t dopt = FTC_DETECTOR_OPTIONS_INIT;
    dopt.job = a->job;
    dopt.node = a->node_id;
    dopt.domain = a->domain;
    if (o->hang_min_ms > 0)
        dopt.hang_min_ms = o->hang_min_ms;
    if (o->ttl_ms > 0) {
        dopt.ttl_ms = o->ttl_ms;
        if (dopt.heartbeat_ms > o->ttl_ms / 4)
            dopt.heartbeat_ms = o->ttl_ms / 4;
    }
    FTC__PHASE("start: the detector");
    a->det = ftc_detector_start(&o->redis, &dopt, err);
    if (!a->det)
        goto fail;
    /* persist tier */
    if (o->persist_dir && *o->persist_dir) {
        /* one writer per version directory: each node persists under its own */
        char pdir[4200];
        snprintf(pdir, sizeof pdir, "%s/node%u", o->persist_dir, o->index);
        a->persist = ftc_persist_open(pdir, &o->persist, err);
        if (!a->persist)
            goto fail;
        a->pw = ftc__persister_start(a->persist, err);
        if (!a->pw)
            goto fail;
    }
    /* the ranks' socket */
    FTC__PHASE("start: the ranks' socket and threads");
    ftc_agent_socket_path(a->dir, o->index, a->sock, sizeof a->sock);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(a->sock) >= sizeof sa.sun_path) {
        ftc_err_set(err, FTC_EINVAL, "agent socket path %s is too long (use a shorter --job-dir)",
                    a->sock);
        goto fail;
    }
    /* bound and listening under a temporary name, then renamed into place:
     * a rank that sees the path never finds it refusing connections */
    char tmp[sizeof sa.sun_path];
    int tl = snprintf(tmp, sizeof tmp, "%s.%d", a->sock, (int)getpid());
    if (tl < 0 || (size_t)tl >= sizeof tmp) {
        ftc_err_set(err, FTC_EINVAL, "agent socket path %s is too long (use a shorter --job-dir)",
                    a->sock);
        goto fail;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tmp);
    unlink(tmp);
    a->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a->listen_fd < 0 || bind(a->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(a->listen_fd, 64) != 0 || rename(tmp, a->sock) != 0) {
        ftc_err_errno(err, errno, "agent socket %s", a->sock);
        unlink(tmp);
        goto fail;
    }
    a->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->evfd < 0) {
        ftc_err_errno(err, errno, "eventfd");
        goto fail;
    }
    if (a->par) {
        /* one parity thread per local index (each encodes its own stripe),
         * at most one per core but one: the ranks compute on the cores */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int pt = (int)o->ranks_per_node;
        if (cores > 1 && pt > cores - 1)
            pt = (int)cores - 1;
        if (!(a->par->worker = ftc__par_worker_start(a->evfd, pt, err)))
            goto fail;
        FTC_DEBUG("agent", "parity worker: %d thread(s)", ftc__par_worker_threads(a->par->worker));
    }
    if (pthread_create(&a->repl_tid, NULL, ftc__repl_main, a) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "agent: cannot start the replication thread");
        goto fail;
    }
    a->repl_started = true;
    FTC__PHASE("start: reading the peers");
    ftc__refresh_peers(a);
    /* the groups: published ones adopted, index order formed (and
     * published) at once; with a failure domain, every node's may be in
     * Redis already (a restart), else they are formed from the poll */
    if (a->par && ftc__par_resolve(a) < 0) {
        ftc_err_set(err, FTC_ECONFIG, "agent: parity groups: %s", a->par->why);
        goto fail;
    }
    FTC_INFO("agent", "node %u (%s) of job %s: generation %" PRIu64 ", world %u, socket %s",
             o->index, a->node_id, a->job, a->generation, a->world, a->sock);
    FTC__PHASE(NULL);
    return a;
fail:
    ftc_agent_stop(a);
    return NULL;
}

int ftc_agent_run(ftc_agent_t *a, volatile sig_atomic_t *stop)
{
    struct pollfd pfd[2 + FTC_AGENT_MAX_RANKS + FTC_AGENT_MAX_CLIENTS];
    while (!*stop) {
        int n = 0;
        pfd[n++] = (struct pollfd){a->listen_fd, POLLIN, 0};
        pfd[n++] = (struct pollfd){a->evfd, POLLIN, 0};
        for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
            if (a->ranks[i].used && a->ranks[i].fd >= 0)
                pfd[n++] = (struct pollfd){a->ranks[i].fd, POLLIN, 0};
        for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
            if (a->clients[i] >= 0)
                pfd[n++] = (struct pollfd){a->clients[i], POLLIN, 0};
        int pr = poll(pfd, (nfds_t)n, 20);
        if (pr < 0 && errno != EINTR)
            return ftc_err_errno(&a->err, errno, "agent poll");
        if (pr > 0) {
            if (pfd[0].revents & POLLIN) {
                int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0) {
                    int slot = -1;
                    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS && slot < 0; i++)
                        if (a->clients[i] < 0)
                            slot = i;
                    if (slot < 0)
                        close(fd);
                    else
                        a->clients[slot] = fd;
                }
            }
            if (pfd[1].revents & POLLIN) {
                ftc__drain_done(a);
                pthread_mutex_lock(&a->mu);
                bool rp = a->republish;
                pthread_mutex_unlock(&a->mu);
                ftc_err_t perr = {0};
                if (rp && ftc__publish_address(a, &perr))
                    FTC_WARN("agent", "%s", perr.msg);
            }
            for (int i = 2; i < n; i++)
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                    ftc__on_message(a, pfd[i].fd);
        }
        ftc__persist_collect(a);
        uint64_t now = ftc_now_ns();
        /* Redis not answering: nothing can commit, and no peer address can
         * be learned; asked once per FTC__REDIS_PROBE_NS, not every pass */
        bool ask = !a->redis_down || now - a->redis_fail_ns > FTC__REDIS_PROBE_NS;
        if (ask && now - a->last_poll_ns > 10000000ull) { /* every 10 ms while commits pend */
            a->last_poll_ns = now;
            ftc__poll_commits(a);
        }
        now = ftc_now_ns();
        ask = !a->redis_down || now - a->redis_fail_ns > FTC__REDIS_PROBE_NS;
        if (ask && now - a->last_peers_ns > 500000000ull) {
            a->last_peers_ns = now;
            ftc__refresh_peers(a);
        }
    }
    return 0;
}

/* Agents whose replication thread did not stop in time (ftc__abandon):
 * kept reachable, never freed — the thread may still touch them. */
static ftc_agent_t *ftc__abandoned[64];
static pthread_mutex_t ftc__abandoned_mu = PTHREAD_MUTEX_INITIALIZER;

/* The replication thread is blocked inside libfabric (the tcp provider's
 * connect() is blocking: a SYN nobody answers holds it for the kernel's
 * retries, tens of seconds) and will see `stop` only when that returns. The
 * agent goes away without it: its detector stops (no more heartbeats), its
 * sockets close (a new agent can take the socket path), and everything the
 * thread may still use — the engine, the endpoint, the slots it pushes
 * from, the eventfd, the job lists — stays allocated, for good. A bounded
 * leak per stuck stop, instead of a stop as long as the kernel's SYN
 * retries. */
static void ftc__abandon(ftc_agent_t *a)
{
    FTC_WARN("agent", "the replication thread did not stop within %d ms (blocked in "
             "libfabric, likely a connect to a peer that does not answer): the agent leaves "
             "without it, and its engine, endpoint and slot mappings stay allocated for it",
             FTC__STOP_JOIN_MS);
    if (a->par) {
        ftc__par_worker_stop(a->par->worker);
        a->par->worker = NULL;
    }
    ftc__persister_stop(a->pw);
    a->pw = NULL;
    ftc_detector_stop(a->det, true);
    a->det = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].fd >= 0) {
            close(a->ranks[i].fd);
            a->ranks[i].fd = -1;
        }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] >= 0) {
            close(a->clients[i]);
            a->clients[i] = -1;
        }
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        unlink(a->sock);
        a->listen_fd = -1;
    }
    ftc_fabric_shutdown_sockets(a->fab); /* peers that still have our address: refused */
    pthread_detach(a->repl_tid);
    pthread_mutex_lock(&ftc__abandoned_mu);
    for (size_t i = 0; i < sizeof ftc__abandoned / sizeof ftc__abandoned[0]; i++)
        if (!ftc__abandoned[i]) {
            ftc__abandoned[i] = a;
            break;
        }
    pthread_mutex_unlock(&ftc__abandoned_mu);
}

int ftc_agent_flush(ftc_agent_t *a, ftc_err_t *err)
{
    if (!a || !a->pw)
        return 0;
    ftc__poll_commits(a); /* the last commit may have landed after the run loop's last poll */
    /* the running write, then every due step it left (each collect starts the next) */
    for (int round = 0; round <= NS + 1 && (a->pwriting >= 0 || a->pqn > 0); round++) {
        ftc__persister_wait(a->pw);
        ftc__persist_collect(a);
        ftc__persist_kick(a);
    }
    if (a->newest_local < 0 || a->persisted >= a->newest_local) {
        if (a->newest_local >= 0)
            FTC_INFO("agent", "flush: step %" PRId64 " is already in the persist tier",
                     a->persisted);
        return 0;
    }
    uint64_t step = (uint64_t)a->newest_local;
    a->persist_rc = 0;
    if (!ftc__persist(a, step))
        return ftc_err_set(err, FTC_EAGAIN, "flush: the persist writer is still busy");
    ftc__persister_wait(a->pw);
    ftc__persist_collect(a);
    if (a->persisted >= (int64_t)step) {
        FTC_INFO("agent", "flush: step %" PRIu64 " written to the persist tier", step);
        return 0;
    }
    if (a->persist_rc)
        return ftc_err_set(err, a->persist_rc, "flush of step %" PRIu64 " to the persist tier: %s",
                           step, a->persist_detail);
    return 0; /* no slot of this node holds that step any more (nothing to write) */
}

void ftc_agent_stop(ftc_agent_t *a)
{
    if (!a)
        return;
    atomic_store(&a->stop, true);
    uint64_t t[5];
    t[0] = ftc_now_ns();
    FTC__PHASE("stop: joining the replication thread");
    if (a->repl_started) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += FTC__STOP_JOIN_MS / 1000;
        if (pthread_timedjoin_np(a->repl_tid, NULL, &ts) != 0) {
            FTC__PHASE("stop: abandoning the replication thread");
            ftc__abandon(a);
            FTC__PHASE(NULL);
            return;
        }
    }
    if (a->par) { /* it writes to the eventfd closed below */
        ftc__par_worker_stop(a->par->worker);
        a->par->worker = NULL;
    }
    t[1] = ftc_now_ns();
    FTC__PHASE("stop: the persist thread");
    ftc__persister_stop(a->pw); /* waits for a running write: it reads the slots closed below */
    a->pw = NULL;
    t[2] = ftc_now_ns();
    pthread_mutex_lock(&a->mu);
    ftc__job_t *lists[2] = {a->todo, a->done};
    a->todo = a->done = NULL;
    pthread_mutex_unlock(&a->mu);
    for (int l = 0; l < 2; l++)
        while (lists[l]) {
            ftc__job_t *j = lists[l];
            lists[l] = j->next;
            ftc__job_free(j);
        }
    /* the engine first: its transfers read (pushes) and write (fetches
     * landing in a slot) the ranks' slots until it is gone */
    FTC__PHASE("stop: the replication engine");
    ftc_repl_destroy(a->repl);
    a->repl = NULL;
    FTC__PHASE("stop: closing the fabric endpoint");
    ftc_fabric_close(a->fab);
    a->fab = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        if (!a->ranks[i].used)
            continue;
        if (a->ranks[i].fd >= 0)
            close(a->ranks[i].fd);
        for (int s = 0; s < NS; s++)
            ftc_slot_close(&a->ranks[i].slot[s]);
    }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] >= 0)
            close(a->clients[i]);
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        unlink(a->sock);
    }
    if (a->evfd >= 0)
        close(a->evfd);
    t[3] = ftc_now_ns();
    ftc_persist_close(a->persist);
    ftc__par_free(a);
    FTC__PHASE("stop: the detector");
    ftc_detector_stop(a->det, true);
    t[4] = ftc_now_ns();
    FTC__PHASE(NULL);
    if (t[4] - t[0] > 2000000000ull) /* where a slow stop spent its time */
        FTC_WARN("agent", "stopping took %" PRIu64 " ms: replication (and parity) threads %" PRIu64
                 " ms, persist thread %" PRIu64 " ms, endpoint %" PRIu64 " ms, detector %"
                 PRIu64 " ms", (t[4] - t[0]) / 1000000, (t[1] - t[0]) / 1000000,
                 (t[2] - t[1]) / 1000000, (t[3] - t[2]) / 1000000, (t[4] - t[3]) / 1000000);
    ftc_ctl_destroy(a->ctl);
    free(a->peers);
    free(a->marks);
    free(a->rpeers);
    free(a->raddr);
    free(a->raddr_len);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
