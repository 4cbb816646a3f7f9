/*
 * replica.h — the replication engine of an agent: pushes its ranks' sealed
 * shards to peer agents over libfabric, stores the replicas peers push to
 * it, and serves them back for restores.
 *
 * One engine per agent, driven by one thread (the fabric endpoint is
 * FI_THREAD_DOMAIN): every call below is non-blocking except
 * ftc_repl_progress(), which moves every transfer forward — outgoing pushes
 * and fetches, incoming PUT/GET/ACK — until its deadline. A push and an
 * incoming push to us proceed together, so two agents replicating to each
 * other never deadlock.
 *
 * Protocol (docs/wire-protocol.md; headers are ckpt/wire.h, HMAC'd):
 *   - every message is a header message on tag (HDR, sender) — exact tags,
 *     no ignore masks (the shm provider does not match unexpected messages
 *     against masked receives) — with a per-peer pool of posted receives;
 *   - a PUT header announces [offset, offset+length) of (owner, step); its
 *     payload follows as a separate message on tag (DATA, sender, seq), which
 *     the receiver receives directly into the replica slot at offset
 *     (zero copy; rxm uses rendezvous for large messages);
 *   - PUT_END carries the total size; the receiver opens the replica with
 *     ftc_shard_open(FTC_SHARD_VERIFY) and answers ACK (status 0) or NACK
 *     (with the reason). A replica counts only after its ACK: send
 *     completion in libfabric is local only;
 *   - GET asks for (owner, step or newest); the answer is PUT messages and a
 *     PUT_END, or a NACK "not held";
 *   - headers of another job, a wrong HMAC, a stale generation, a bad length
 *     or a bad checksum are refused, logged (rate-limited) and never crash
 *     the engine; refused PUTs are answered with NACK when the sender is
 *     known.
 *
 * Replica store: per owner rank two shm slots ("ftc.JOB.n<SELF>.p<OWNER>.s<0|1>";
 * the agent's own node index keeps two agents on one host apart), one
 * receiving, one holding the newest complete and verified replica, so a
 * push that fails midway never destroys the previous replica (I3). A push
 * that says the owner's committed step (ftc_repl_push_keep) goes over the
 * newest replica instead when that one is of another step and the other
 * slot holds the committed one (the newest was abandoned by its sender). A
 * restarted agent adopts the slots it finds: the one that verifies with the
 * highest step is its held replica; a slot that fails verification (a push
 * torn midway) is neither served nor kept by a push that says its step.
 *
 * Deadlines: each push and fetch has one; when it passes, the transfer ends
 * with FTC_ETIMEDOUT for the peers that had not acknowledged, its fabric
 * operations are cancelled, and if the endpoint reports itself broken
 * (ftc_fabric_health) every transfer fails with FTC_EFABRIC so the agent can
 * rebuild the endpoint. A cut link therefore reaches the deadline instead of
 * hanging (ENVIRONMENT.md: libfabric reports nothing by itself).
 *
 * Unreachable peers: the engine never waits inside a post. It posts with
 * ftc_fabric_isend_try / irecv_try; what the endpoint cannot take now (rxm
 * still connecting, for ever to an address nobody listens at) stays queued
 * in its transfer and is retried 1 ms later by a later progress call, while
 * the other transfers move. A push whose posts to a peer never went through
 * fails at its deadline with FTC_ETIMEDOUT, "peer N ...: could not post
 * (connection not established?)"; a GET (an ACK, a NACK) not posted within
 * 1 s is dropped, and a fetch whose GET is dropped fails then with FTC_ETIMEDOUT.
 */
#ifndef FTC_CKPT_REPLICA_H
#define FTC_CKPT_REPLICA_H

#include "ckpt/wire.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/fabric.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_REPL_MAX_PEERS 256

typedef struct ftc_repl_options {
    uint32_t struct_size;
    uint32_t version;
    ftc_fabric_t *fab;     /* the agent's endpoint (not owned) */
    ftc_wire_key_t key;    /* job id hash and secret */
    const char *job;       /* names the replica slots */
    uint32_t self;         /* this agent's node index (wire sender) */
    uint64_t generation;   /* stamped on every message; older ones are refused */
    uint64_t chunk_bytes;  /* payload per PUT (default 4 MiB, at most FTC_WIRE_MAX_PAYLOAD) */
    int window;            /* PUTs in flight per transfer (default 8) */
    int rx_per_peer;       /* header receives posted per peer (default 4) */
    /* Added compatibly (an older, shorter struct_size gets the default): */
    int serve_timeout_ms;  /* deadline of serving a GET, and idle time after which an
                              unfinished incoming push is abandoned (default 60000) */
} ftc_repl_options_t;

#define FTC_REPL_OPTIONS_INIT                                                                      \
    {sizeof(ftc_repl_options_t), 1, NULL, {{0}, 0, 0}, NULL, 0, 0, 4u << 20, 8, 4, 60000}

typedef struct ftc_repl ftc_repl_t;

ftc_repl_t *ftc_repl_create(const ftc_repl_options_t *o, ftc_err_t *err);
/* Cancels every transfer and frees the engine; the replica slots stay (they
 * are the node's memory of its peers' state). NULL is a no-op. When the
 * endpoint broke (progress returned FTC_EFABRIC), requests that could not be
 * cancelled stay lent to libfabric: the engine no longer touches the fabric
 * (a broken handle never progresses again), but the caller must close the
 * fabric before freeing a pushed shard's buffer. */
void ftc_repl_destroy(ftc_repl_t *r);
const char *ftc_repl_errstr(const ftc_repl_t *r);

/* A new generation: messages stamped with an older one are refused. Never
 * moves backwards; a message from an authenticated peer stamped with a newer
 * generation also moves the engine to it (our answers then carry it). */
void ftc_repl_set_generation(ftc_repl_t *r, uint64_t gen);
/* Makes node `node` (its fabric address) reachable and posts its receives. */
int ftc_repl_peer_add(ftc_repl_t *r, uint32_t node, const void *addr, size_t len);
/* Forgets a (lost) peer: its transfers fail with FTC_ECANCELED. */
int ftc_repl_peer_remove(ftc_repl_t *r, uint32_t node);

/* ---- transfers ------------------------------------------------------------------ */

typedef int ftc_repl_xfer_t; /* >= 0: a transfer id */

/* Starts pushing the sealed shard (owner, step) to each of peers. shard must
 * stay valid and unchanged until the transfer is done. chunk_bytes must not
 * exceed the fabric's max_msg (on both sides). FTC_EINPROGRESS when owner is
 * already being pushed to one of peers; FTC_EINVAL when shard is not a
 * shard of step. */
int ftc_repl_push(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t *shard,
                  uint64_t size, const uint32_t *peers, int npeers, ftc_deadline_t d,
                  ftc_repl_xfer_t *x);
/* ftc_repl_push telling the peers the owner's newest committed step as the
 * caller knows it (-1: none, as ftc_repl_push): a peer whose newest replica
 * of owner is of another step while its other slot holds that committed one
 * (the newest was never committed: its sender abandoned it) receives the
 * push over the newest and keeps the committed replica. */
int ftc_repl_push_keep(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t *shard,
                       uint64_t size, const uint32_t *peers, int npeers, int64_t committed,
                       ftc_deadline_t d, ftc_repl_xfer_t *x);
/* Starts fetching owner's shard of step (UINT64_MAX: the newest the peer
 * holds) from peer. */
int ftc_repl_fetch(ftc_repl_t *r, uint32_t peer, uint32_t owner, uint64_t step, ftc_deadline_t d,
                   ftc_repl_xfer_t *x);

/* Moves everything forward until d (or until some transfer finishes, when
 * return_early). Returns 0, or FTC_EFABRIC when the endpoint broke. */
int ftc_repl_progress(ftc_repl_t *r, ftc_deadline_t d, bool return_early);

typedef struct ftc_repl_status {
    bool done;          /* finished (successfully or not) */
    int rc;             /* 0, or the first error (FTC_ETIMEDOUT, FTC_EAUTH, FTC_ECORRUPT, ...) */
    int acked;          /* push: peers that acknowledged a verified replica */
    int failed;         /* push: peers that refused or timed out */
    char detail[256];   /* what failed, naming the peer */
} ftc_repl_status_t;

int ftc_repl_status(ftc_repl_t *r, ftc_repl_xfer_t x, ftc_repl_status_t *st);
/* ftc_repl_fetch, the answer landing in dst (cap bytes, the caller's,
 * untouched by anything else until the fetch is done) when it fits, else in
 * a malloc'd buffer of at most half this node's memory (a larger answer fails
 * with FTC_ERANGE). A failed fetch may leave partial bytes in dst. */
int ftc_repl_fetch_into(ftc_repl_t *r, uint32_t peer, uint32_t owner, uint64_t step,
                        uint8_t *dst, uint64_t cap, ftc_deadline_t d, ftc_repl_xfer_t *xid);
/* Takes the result of a finished fetch: a verified shard, every checksum
 * checked as its bytes landed: the fetch_into dst when it fit there
 * (*shard == dst), else malloc'd (caller frees). */
int ftc_repl_take(ftc_repl_t *r, ftc_repl_xfer_t x, uint8_t **shard, uint64_t *size);
/* Releases a finished transfer's id. */
void ftc_repl_release(ftc_repl_t *r, ftc_repl_xfer_t x);

/* The newest complete, verified replica this agent holds for owner:
 * FTC_ENOENT when none. The pointer is into a slot; valid until the next
 * progress call. */
int ftc_repl_held(ftc_repl_t *r, uint32_t owner, uint64_t *step, const uint8_t **shard,
                  uint64_t *size);

/* Also serve GETs from this agent's own slots: a GET of (owner, step) that
 * the replica store cannot answer is answered from the slot
 * ftc_slot_name(ns, owner, 0|1) whose shard has that step (the newest for
 * UINT64_MAX), when there is one. The shard is copied out first (one memcpy
 * on the engine's thread), so the slot may be rewritten or removed at any
 * time; a torn copy fails the fetcher's verification like any bad replica.
 * Parity groups fetch the surviving members' data shards and parity this
 * way (docs/agent.md). ns NULL or "" turns it off (the default). */
void ftc_repl_serve_local(ftc_repl_t *r, const char *ns);

/* The replica of (owner, step) this agent holds — the newest, or the one
 * before it while no push has started writing over its slot (one that
 * failed leaves no replica there): FTC_ENOENT otherwise.
 * Same lifetime as ftc_repl_held. */
int ftc_repl_held_step(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t **shard,
                       uint64_t *size);
/* Adopts now every replica this node's earlier agent left in shm (the
 * stores a GET or PUT of their owner would adopt at its first use: each
 * owner's newest replica that verifies, hashed on a few threads), so that a
 * restarted agent's first GET is served at once instead of after hashing
 * the replica it asks for: a replacement node's restore waits for that GET.
 * Call it on the engine's thread, first thing after ftc_repl_create. It
 * looks at *stop (NULL: none) before each replica and ends when it is set,
 * so that a stopping agent is not held for the hashing of every replica
 * (the rest are adopted at their first GET or PUT, as before). The number
 * of owners adopted (a store with a verified replica). */
int ftc_repl_adopt_all(ftc_repl_t *r, atomic_bool *stop);
/* Counters, for logs and the benchmark. */
typedef struct ftc_repl_counters {
    uint64_t bytes_sent, bytes_received;
    uint64_t refused;   /* messages refused (auth, job, generation, bounds, checksum) */
    uint64_t quiet_naps; /* naps of a busy engine in which nothing moved for 100 ms */
} ftc_repl_counters_t;
void ftc_repl_counters(ftc_repl_t *r, ftc_repl_counters_t *c);

#ifdef __cplusplus
}
#endif
#endif
