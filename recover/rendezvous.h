/*
 * rendezvous.h — rounds of membership on Redis: who is in the next
 * generation, in which order, and who waits as a hot spare.
 *
 * A round is identified by the generation it follows (after_gen) and, when it
 * closes, creates generation after_gen + 1 in the job's one generation
 * counter (ftc:{J}:gen, the hash that detect/control.h reads and fences
 * with). The protocol is a handful of Lua scripts (docs/redis-keys.md), so
 * every step is atomic and no node is special:
 *
 *  - open: generation 0 (a fresh job) has an open round; after that a round
 *    opens when someone calls ftc_rdzv_request(seen_gen) with the current
 *    generation — after a failure, or to grow at a checkpoint boundary.
 *    Concurrent requests open it once; a request with a stale seen_gen is
 *    refused (FTC_ESTALE).
 *  - register: ftc_rdzv_join(after_gen) adds the node to the round's
 *    registrants (arrival order kept), keeps a liveness entry that expires
 *    ttl_ms after its last refresh (the joiner refreshes it while it waits),
 *    and polls. A registrant whose entry expired (the process died or hung)
 *    is dropped before any count and is never a member. A node that
 *    registers again for the same round (withdrawn at its deadline, or
 *    expired) keeps its first arrival number and is not a new arrival.
 *  - close: any registrant's poll closes the round when it is open and
 *    either max_nodes live registrants are there, or at least min_nodes and
 *    settle_ms (Redis server clock) have passed since the last arrival (or
 *    since the round opened, whichever is later). Neither closes it while a
 *    survivor is missing: a member of generation after_gen not registered
 *    yet whose heartbeat key (ftc:{J}:hb:NODE, detect/control.h) exists
 *    keeps its place against spares and newcomers that registered earlier
 *    (max_nodes), and the settle time does not close a grow round with the
 *    newcomer alone while it stops its ranks: the round waits for it until
 *    survivor_wait_ms after the round opened, then closes without it (a
 *    node that hangs with its agent alive must not hold the others); one
 *    whose heartbeat is gone is lost and leaves its place. The close is one script,
 *    fenced by the generation (it runs only while the current generation is
 *    after_gen), so it happens exactly once. It orders the members —
 *    the members of generation after_gen first, in their previous order
 *    (ranks stay where their shards are), then newcomers in arrival order —
 *    takes the first max_nodes, makes the rest hot spares, writes
 *    gen = after_gen + 1 with world = 0 (the layout is not yet planned:
 *    ftc_rdzv_set_world publishes it, and commit records of the generation are
 *    refused until it is set), records the result and adds a `generation`
 *    event.
 *  - result: every registrant (members and spares) returns the same member
 *    list. A spare joins again with after_gen = the new generation and waits
 *    there for the next round.
 *
 * min_nodes, max_nodes and settle_ms are the caller's; every node of a job
 * should pass the same values (the first poll that finds the condition true
 * closes the round with its own values).
 *
 * Thread-safety: the functions use the connection they are given; a
 * connection is one thread's (detect/redis.h). Errors: FTC_EINVAL (bad
 * options, a generation above FTC_RDZV_GEN_MAX), FTC_ESTALE (the generation
 * moved past the caller), FTC_ETIMEDOUT (the deadline passed: the message
 * names how many registered and who), FTC_ECANCELED (abort), FTC_EREDIS /
 * FTC_EPROTO (Redis down or a key holding garbage, named), FTC_EAUTH (a
 * password refused, or NOPERM: the ACL user may not run EVALSHA/EVAL or use
 * the job's keys; a join returns it at once). A join retries until its
 * deadline only what passes by itself (ftc_redis_transient: Redis away,
 * LOADING, BUSY...); any other refusal returns at the first poll (WRONGTYPE:
 * FTC_EPROTO; READONLY, OOM, MISCONF, a script error: FTC_EREDIS), the
 * message naming the round's key, Redis's words and what to do.
 */
#ifndef FTC_RECOVER_RENDEZVOUS_H
#define FTC_RECOVER_RENDEZVOUS_H

#include "core/clock.h"
#include "core/err.h"
#include "detect/redis.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_RDZV_NODE_MAX 64 /* bytes of a node id: [A-Za-z0-9._:/-] */
/* The largest generation after_gen / seen_gen may name (FTC_EINVAL above it): the scripts
 * hold generations in Lua numbers, exact below 2^53, and the round makes after_gen + 1. */
#define FTC_RDZV_GEN_MAX ((UINT64_C(1) << 53) - 2)

typedef struct ftc_rdzv_options {
    uint32_t struct_size;
    const char *job;     /* job id (1..63 of [A-Za-z0-9._-]) */
    const char *node_id; /* stable id of this agent (e.g. host:index) */
    int min_nodes;       /* >= 1 */
    int max_nodes;       /* >= min_nodes; 0 = no bound */
    int settle_ms;       /* once min_nodes are there, close after this long without a new
                            arrival (default 1000; 0 = default) */
    int ttl_ms;          /* registration lifetime without a refresh (default 3000; 0 =
                            default); the joiner refreshes it every ttl_ms/4 or more often */
    int survivor_wait_ms; /* how long after the round opened a round (at max_nodes or on
                             settle) waits for a survivor whose heartbeat is there (the time
                             it takes to stop its work and register; 0 = settle_ms) */
} ftc_rdzv_options_t;

#define FTC_RDZV_OPTIONS_INIT {sizeof(ftc_rdzv_options_t), NULL, NULL, 1, 0, 1000, 3000, 0}

typedef struct ftc_rdzv_round {
    uint64_t generation; /* the generation this round created */
    int nodes;           /* active members */
    int index;           /* this node's index 0..nodes-1, or -1 = hot spare */
    char (*members)[FTC_RDZV_NODE_MAX + 1]; /* nodes entries in index order (allocated) */
    int spares;
    char (*spare_ids)[FTC_RDZV_NODE_MAX + 1]; /* spares entries, in order (allocated) */
    int prev_nodes;      /* members of generation - 1 that are members again (they come
                            first: members[0..prev_nodes-1] keep their previous order) */
} ftc_rdzv_round_t;

/* Splits a round's space-separated id list (members or spares, len bytes;
 * pure) into *out (allocated, *n entries; the caller frees it, also on
 * failure). FTC_EPROTO naming what when an id is not 1..FTC_RDZV_NODE_MAX
 * of [A-Za-z0-9._:/-] (what a node joins with). */
int ftc_rdzv_split_ids(const char *s, size_t len, char (**out)[FTC_RDZV_NODE_MAX + 1], int *n,
                       const char *what, ftc_err_t *err);

/* Registers for the round after `after_gen` and waits until it closes, the
 * deadline passes, or *abort becomes non-zero (abort may be NULL). On success
 * *out describes the round (free with ftc_rdzv_round_free), this node either
 * a member or a spare. A join for a round that already closed returns that
 * round when this node was in it and its generation is still the current one
 * (a retry), else FTC_ESTALE naming the current generation (the job moved on
 * without this node). On timeout or abort the registration is withdrawn (an
 * abort while Redis does not answer returns at once, leaving it to expire). */
int ftc_rdzv_join(ftc_redis_t *r, const ftc_rdzv_options_t *o, uint64_t after_gen,
                  ftc_rdzv_round_t *out, ftc_deadline_t dl, const atomic_int *abort,
                  ftc_err_t *err);

/* Opens the round after seen_gen. *opened is true for the call that opened
 * it, false when it was already open (idempotent). FTC_ESTALE when the
 * current generation is not seen_gen. reason goes into the round_open event. */
int ftc_rdzv_request(ftc_redis_t *r, const char *job, uint64_t seen_gen, const char *reason,
                     bool *opened, ftc_err_t *err);

/* The current generation and whether the round after it is open (one atomic
 * read; cheap enough to poll). */
int ftc_rdzv_state(ftc_redis_t *r, const char *job, uint64_t *gen, bool *round_open,
                   ftc_err_t *err);

/* Live registrants waiting for the round after gen (spares, early joiners):
 * what a supervisor checks before requesting a grow. */
int ftc_rdzv_waiting(ftc_redis_t *r, const char *job, uint64_t gen, int *n, ftc_err_t *err);

/* Publishes the world size (ranks) of generation gen, once planned. Fenced:
 * FTC_ESTALE when gen is not current; FTC_EEXIST when a different world was
 * already set for it (planners disagree); setting the same value again is a
 * no-op, so every member may call it. */
int ftc_rdzv_set_world(ftc_redis_t *r, const char *job, uint64_t gen, uint32_t world,
                       ftc_err_t *err);

void ftc_rdzv_round_free(ftc_rdzv_round_t *r); /* frees the lists, zeroes *r; NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif
