/*
 * agent_parity.h — internal to the agent (ckpt/agent.c): parity groups for
 * `redundancy = xor:G` and `rs:G+M` (docs/agent.md, "Parity groups").
 *
 * Geometry. A job of `nodes` nodes has max(1, nodes / N) groups, N = G+M.
 * Index order (no failure domains, or domains that index order already
 * respects): groups of N consecutive node indices ([0, N), [N, 2N), ...);
 * when nodes % N != 0 the leftover nodes join the last group (so every
 * group has at least N members and tolerates M losses); a job with fewer
 * than N nodes is one group of all of them, which must still have more than
 * M members. Domain order (failure domains given, and index order would put
 * more than M members of one domain in a group): the nodes sorted by
 * (domain, index) are dealt round-robin into the groups, so each group gets
 * floor or ceil(c / groups) of a domain of c nodes — the least possible, so
 * no group holds more than M members of one domain whenever any grouping
 * with this group count can (every c <= M x groups). A node without a
 * domain ("") is a domain of its own. Members of a group are in ascending
 * node index; the group is a pure function of (redundancy, nodes, domains),
 * so agents that see the same domains form the same groups. A generation
 * of `ftc run` (a plan) forms its groups the same way over its members only
 * (the k-th member in ascending node index in place of node k): after a
 * shrink the lost node is in no group. The ranks of
 * one local index l (rank = node * ranks_per_node + l) on the n members of
 * a group form one stripe set; local indices are independent.
 *
 * Layout (SCR-style distributed parity). Each member's shard, zero-padded
 * to the group's block length L = d * C (d = n - M data chunks per row, C a
 * multiple of 64), is cut into d chunks. There are n rows; row r holds
 * chunk t of member (r + M + t) % n for t < d, and its M parity chunks
 * (the code of parity.h over the d data chunks) are held by members
 * (r + j) % n, j < M, which hold no data of that row. A member therefore
 * holds its own shard and M parity chunks of C bytes: memory (d + M) / d =
 * n / (n - M) of the data, (G+M)/G for full groups, and any M lost members
 * lose at most M pieces of every row.
 *
 * Every parity block a member holds travels and is stored as one sealed
 * shard (the "wrapper": tensors parity.meta and parity.0..M-1, the wrapper
 * step = the version's step) under the synthetic owner id
 * FTC_PAR_OWNER(l). Its parity.meta records the geometry (with a hash of
 * the group's node list) and, for every
 * member, its rank, real shard size and head checksum: a rebuild uses only
 * wrappers and data shards of exactly that version, and verifies every
 * rebuilt shard against its recorded checksum before it is used (I1).
 *
 * Pure functions (geometry, encode, rebuild, the published groups'
 * text) are thread-safe; a gather is driven by the replication thread only;
 * an encode and a rebuild's decode run on the parity worker
 * (ftc__par_worker_*: a pool), off the agent's control loop.
 *
 * Idle members (FTC_PAR_IDLE): the layout may leave a (node, local index)
 * without a rank; that member's data is the virtual zero shard and the
 * stripe's encoder is the first member from local % n on with a rank
 * (ftc__par_encoder).
 */
#ifndef FTC_CKPT_AGENT_PARITY_H
#define FTC_CKPT_AGENT_PARITY_H

#include "ckpt/parity.h"
#include "ckpt/replica.h"
#include "core/clock.h"
#include "core/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FTC_PAR_OWNER_BIT 0x80000000u
#define FTC_PAR_OWNER(l) (FTC_PAR_OWNER_BIT | (uint32_t)(l))
/* The "rank" of an idle member of a stripe (no rank at that node and local
 * index in the layout: a world smaller than nodes x ranks_per_node). Its
 * data shard is the virtual zero shard: never fetched, zeros in the code,
 * recorded in parity.meta as rank FTC_PAR_IDLE, size 0, head checksum 0. */
#define FTC_PAR_IDLE UINT32_MAX

typedef struct ftc__par_geo {
    uint32_t first;  /* lowest node of the group (node[0]) */
    int n;           /* members */
    int m, d;        /* parity and data chunks per row (d = n - m) */
    int member;      /* this node's index in the group */
    bool xor_code;
    uint32_t node[FTC_PARITY_MAX]; /* member -> node index, ascending */
    bool by_domain;  /* domain order (else index order) */
    int dom_max;     /* most members of one domain in this group (0 without domains) */
    uint32_t dom_node; /* a member of that domain */
} ftc__par_geo_t;

/* The group of node `index`. domains: NULL (index order) or `nodes` labels,
 * "" = a domain of its own (see the geometry rule above). FTC_ECONFIG when
 * the redundancy cannot be honoured with `nodes` nodes (too few, or a group
 * above FTC_PARITY_MAX). A group that still holds more than M members of
 * one domain (too few domains) is formed anyway: dom_max > m tells. */
int ftc__par_geometry(const ftc_redundancy_t *red, uint32_t nodes, const char *const *domains,
                      uint32_t index, ftc__par_geo_t *geo, ftc_err_t *err);

/* The same over the nodes of one generation: members (nm ascending,
 * distinct node indices below nodes; NULL: all of 0..nodes-1) take the
 * place of 0..nodes-1 in the rule above, positions in the list for indices
 * (`ftc run`'s generation after a shrink forms its groups over its plan's
 * members, not over --nnodes MAX). FTC_EINVAL when index is not a member or
 * the list is not such a list. domains stays indexed by node index. */
int ftc__par_geometry_in(const ftc_redundancy_t *red, uint32_t nodes, const uint32_t *members,
                         uint32_t nm, const char *const *domains, uint32_t index,
                         ftc__par_geo_t *geo, ftc_err_t *err);

/* Every group of a generation as text, for `ftc:{J}:pargroups:GEN` (docs/
 * redis-keys.md): "RED NODES ORDER G0 G1 ...", RED the redundancy
 * ("xor:2"), NODES the job's node count, ORDER "index" or "domain", each
 * group its node indices in ascending order, comma-separated ("xor:2 6
 * domain 0,2,4 1,3,5"). The groups are ftc__par_geometry_in's for every
 * member (same arguments; members NULL: all nodes), so they cover the
 * members only. *out is malloc'd. */
int ftc__par_groups_str_in(const ftc_redundancy_t *red, uint32_t nodes, const uint32_t *members,
                           uint32_t nm, const char *const *domains, char **out, ftc_err_t *err);

/* Node `index`'s group from a published text (ftc__par_groups_str_in's
 * form). FTC_ECONFIG naming both when it is for another redundancy or node
 * count; FTC_EPROTO when it is not a partition of the generation's members
 * (NULL: all nodes) into groups of more than M and at most FTC_PARITY_MAX
 * members, or names a node that is not a member; FTC_EINVAL when index is
 * not a member. geo->dom_max is 0 (the publisher's domains are not known). */
int ftc__par_groups_parse_in(const char *text, const ftc_redundancy_t *red, uint32_t nodes,
                             const uint32_t *members, uint32_t nm, uint32_t index,
                             ftc__par_geo_t *geo, ftc_err_t *err);

/* "nodes 3..5" or "nodes 0,2,4" into buf; returns buf. */
const char *ftc__par_geo_str(const ftc__par_geo_t *geo, char *buf, size_t cap);

/* The encoder of local index `local`'s stripe: the first member, from
 * local % n on cyclically, that is not idle (idle[i]: member i has no rank
 * at that local index). -1 when every member is idle (nothing to encode).
 * Every agent computes the same from the same layout. */
int ftc__par_encoder(const ftc__par_geo_t *geo, uint32_t local, const bool *idle);

/* Encodes one version: shards[i] (sizes[i] bytes, sealed, verified by the
 * caller) is member i's shard of `step`; ranks[i] its rank. A shard of
 * another step is FTC_ECORRUPT, of another generation than `gen` (a slot an
 * earlier generation left) FTC_ESTALE, naming the member. An idle member
 * (ranks[i] == FTC_PAR_IDLE) contributes the virtual zero shard: shards[i]
 * NULL and sizes[i] 0 (FTC_EINVAL otherwise). On success wraps[i]
 * (malloc'd, wrap_sizes[i] bytes) is the wrapper member i holds (idle
 * members hold parity too). */
int ftc__par_encode(const ftc__par_geo_t *geo, const char *job, uint64_t step, uint64_t gen,
                    uint32_t local, const uint8_t *const *shards, const uint64_t *sizes,
                    const uint32_t *ranks, uint8_t **wraps, uint64_t *wrap_sizes, ftc_err_t *err);

/* Rebuilds member `lost`'s shard of `step`. data[i]/wraps[i] are member
 * i's data shard and wrapper as fetched (NULL when missing); wrappers or
 * shards of another version are ignored. A member the wrapper records as
 * idle (FTC_PAR_IDLE) counts as zeros whatever data[i] is (it is never
 * fetched); rebuilding an idle member is FTC_EINVAL (there is nothing).
 * On success *out (malloc'd) is the rebuilt shard, verified with every
 * tensor checksum and against the recorded head checksum, and *xor_code
 * (unless NULL) says which code it was decoded with: the one parity.meta
 * records (xor, else rs; xor:G and rs:G+1 share the geometry, so it need
 * not be geo's). Errors name what was missing. */
int ftc__par_rebuild(const ftc__par_geo_t *geo, uint64_t step, uint32_t local, int lost,
                     const uint8_t *const *data, const uint64_t *dsizes,
                     const uint8_t *const *wraps, const uint64_t *wsizes, uint8_t **out,
                     uint64_t *out_size, bool *xor_code, ftc_err_t *err);

/* Stores this node's own wrapper in its shm slot
 * ftc_slot_name(ns, FTC_PAR_OWNER(l), 0|1), double-buffered (the slot not
 * holding the newest wrapper is written, unless that one holds step `keep`,
 * the newest committed step, -1 = none: then the other), where
 * ftc_repl_serve_local finds it. */
int ftc__par_store_local(const char *ns, uint32_t local, const uint8_t *wrap, uint64_t size,
                         int64_t keep, ftc_err_t *err);

/* A copy of this node's own piece of (owner, step): the slot
 * ftc_slot_name(ns, owner, 0..FTC_AP_SLOTS_PER_RANK-1) or, after a layout
 * change, ftc_slot_name_prev(ns, owner, same) whose shard has that step — a data
 * shard (owner a rank) or a wrapper (FTC_PAR_OWNER(l)). A rebuild at
 * another position than the lost member's uses it for the pieces this node
 * holds itself (the replication engine fetches only from peers). The copy is
 * verified (structure, step, every tensor checksum: a torn or corrupted slot
 * counts as missing). *buf malloc'd. FTC_ENOENT naming the owner and step
 * when no slot has it, FTC_ENOMEM. */
int ftc__par_read_local(const char *ns, uint32_t owner, uint64_t step, uint8_t **buf,
                        uint64_t *size, ftc_err_t *err);

/* ---- the parity worker: encodes off the control loop ---------------------------- */

/* One encode: the control loop fills the inputs and submits it; the worker
 * maps the encoder's own slot by name (its own mapping: the control loop may
 * unmap or replace its slots meanwhile), verifies it (every tensor checksum,
 * the step: I1), encodes, stores this node's own wrapper
 * (ftc__par_store_local) and hands the task back.
 * One rebuild (rebuild = true): bufs/sizes are the fetched data shards and
 * wraps/wsizes the fetched wrappers (NULL when missing), geo.member the lost
 * member, step and local the version; the worker runs ftc__par_rebuild
 * (decode and verify) and hands back out/out_size, or rc and detail. */
typedef struct ftc__par_task {
    struct ftc__par_task *next;
    /* in */
    bool rebuild;                /* a rebuild (ftc__par_rebuild) instead of an encode */
    int rix, slot;               /* the rank's index in the agent and its slot */
    uint64_t req;                /* rebuild: the request (ftc__rank_t.req) it answers, only */
    uint32_t rank, local;
    uint64_t step, gen;
    char job[64], ns[96];
    char slot_name[128];         /* the encoder's own slot (FTC_SLOT_NAME_MAX) */
    uint64_t slot_size;          /* its shard size */
    int64_t keep;                /* the step whose wrapper stays (ftc__par_store_local): the
                                    newest committed, or a newer one awaiting its commit */
    ftc__par_geo_t geo;
    uint8_t *bufs[FTC_PARITY_MAX]; /* the other members' shards (owned; own member NULL) */
    uint64_t sizes[FTC_PARITY_MAX];
    uint32_t ranks[FTC_PARITY_MAX];
    char looked[200];            /* rebuild: the fetches that failed (for the error text) */
    /* out (a rebuild: wraps/wsizes are its input, the fetched wrappers, owned) */
    int rc;
    char detail[256];
    uint8_t *wraps[FTC_PARITY_MAX]; /* member i's wrapper (owned until taken) */
    uint64_t wsizes[FTC_PARITY_MAX];
    uint64_t heads[FTC_PARITY_MAX]; /* every member's head checksum */
    uint8_t *out;                /* rebuild: this member's shard (owned until taken), verified */
    uint64_t out_size;
    bool out_xor;                /* rebuild: parity.meta recorded xor (else rs), decoded so */
    double ms;                   /* verify + encode + store, or decode + verify */
} ftc__par_task_t;

typedef struct ftc__par_worker ftc__par_worker_t;

#define FTC_PAR_WORKERS_MAX 16

/* Starts the worker: `threads` threads (1..FTC_PAR_WORKERS_MAX) taking
 * tasks from one FIFO, so that the stripes of different local indices
 * encode and rebuild at the same time; each writes 1 to evfd (an eventfd)
 * after each finished task. Tasks must be independent (the agent never
 * queues two of one rank at once). NULL with err (FTC_ENOMEM) when not even
 * one thread starts. */
ftc__par_worker_t *ftc__par_worker_start(int evfd, int threads, ftc_err_t *err);
/* Threads running (0 for NULL). */
int ftc__par_worker_threads(const ftc__par_worker_t *w);
/* Queues t (FIFO); the worker owns it until it is taken back. */
void ftc__par_worker_submit(ftc__par_worker_t *w, ftc__par_task_t *t);
/* The finished tasks (a list through next, oldest first), NULL when none. */
ftc__par_task_t *ftc__par_worker_take(ftc__par_worker_t *w);
/* Finishes the running tasks, drops the queued and finished ones, joins. NULL
 * is a no-op. Call before evfd is closed. */
void ftc__par_worker_stop(ftc__par_worker_t *w);
/* Frees a task with its buffers and wrappers. NULL is a no-op. */
void ftc__par_task_free(ftc__par_task_t *t);
/* Runs one task on the calling thread (what the worker does). */
void ftc__par_task_run(ftc__par_task_t *t);

/* ---- gathering shards over the replication engine (replication thread) ---- */

#define FTC_PAR_GATHER_MAX (2 * FTC_PARITY_MAX)

typedef struct ftc__gitem {
    uint32_t peer, owner;   /* fetch owner's shard of the gather's step from peer */
    int member;             /* group member it belongs to */
    bool wrapper;           /* a wrapper (else a data shard) */
    bool local;             /* this node's own piece: its replica store (a wrapper another
                               member pushed here), else its slots (the gather's ns) */
    int rc;                 /* result: 0 with buf, else the last error */
    uint8_t *buf;
    uint64_t size;
    char detail[200];
    /* private */
    ftc_repl_xfer_t x;
    int attempts;
    bool started, done;
    uint64_t retry_ns;
} ftc__gitem_t;

typedef struct ftc__gather {
    uint64_t step;
    int max_attempts;       /* per item (a NACK "not held yet" is retried) */
    int retry_ms;           /* pause between attempts */
    ftc_deadline_t d;       /* for the whole gather */
    const _Atomic uint64_t *stop; /* nstop steps + 1 (0: none) the agent knows aborted,
                                     written by its control loop (NULL: none): a gather
                                     of one of them ends at once, FTC_ECANCELED */
    int nstop;
    uint64_t gen;           /* data shards must be of this generation (0: any): another
                               one's (a slot an earlier generation left with the step)
                               counts as not held yet and is asked again */
    char ns[96];            /* this node's slot namespace (local items) */
    int n;
    ftc__gitem_t it[FTC_PAR_GATHER_MAX];
} ftc__gather_t;

/* Moves a gather forward on engine r (starts, polls, retries). broken: the
 * endpoint is going away: transfers in flight are abandoned (and retried
 * on the next engine when attempts remain). A local item is taken at once
 * (a verified copy, ftc_repl_held_step then ftc__par_read_local), or fails
 * with FTC_ENOENT. True when every item is done. */
bool ftc__gather_poll(ftc_repl_t *r, ftc__gather_t *g, bool broken);
void ftc__gather_free(ftc__gather_t *g); /* frees the items' buffers and g */

#endif
