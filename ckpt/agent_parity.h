/*
 * agent_parity.h — internal to the agent (ckpt/agent.c): parity groups for
 * `redundancy = xor:G` and `rs:G+M` (docs/agent.md, "Parity groups").
 *
 * Geometry. Nodes form groups of N = G+M consecutive node indices
 * ([0, N), [N, 2N), ...); when nodes % N != 0 the leftover nodes join the
 * last group (so every group has at least N members and tolerates M
 * losses); a job with fewer than N nodes is one group of all of them, which
 * must still have more than M members. The ranks of one local index l
 * (rank = node * ranks_per_node + l) on the n members of a group form one
 * stripe set; local indices are independent.
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
 * FTC_PAR_OWNER(l). Its parity.meta records the geometry and, for every
 * member, its rank, real shard size and head checksum: a rebuild uses only
 * wrappers and data shards of exactly that version, and verifies every
 * rebuilt shard against its recorded checksum before it is used (I1).
 *
 * Pure functions (geometry, encode, rebuild) are thread-safe; a gather is
 * driven by the replication thread only.
 */
#ifndef FTC_CKPT_AGENT_PARITY_H
#define FTC_CKPT_AGENT_PARITY_H

#include "ckpt/parity.h"
#include "ckpt/replica.h"
#include "core/clock.h"
#include "core/err.h"

#include <stdbool.h>
#include <stdint.h>

#define FTC_PAR_OWNER_BIT 0x80000000u
#define FTC_PAR_OWNER(l) (FTC_PAR_OWNER_BIT | (uint32_t)(l))

typedef struct ftc__par_geo {
    uint32_t first;  /* first node of the group */
    int n;           /* members */
    int m, d;        /* parity and data chunks per row (d = n - m) */
    int member;      /* this node's index in the group */
    bool xor_code;
} ftc__par_geo_t;

/* The group of node `index`. FTC_ECONFIG when the redundancy cannot be
 * honoured with `nodes` nodes (too few, or a group above FTC_PARITY_MAX). */
int ftc__par_geometry(const ftc_redundancy_t *red, uint32_t nodes, uint32_t index,
                      ftc__par_geo_t *geo, ftc_err_t *err);

/* Encodes one version: shards[i] (sizes[i] bytes, sealed, verified by the
 * caller) is member i's shard of `step`; ranks[i] its rank. On success
 * wraps[i] (malloc'd, wrap_sizes[i] bytes) is the wrapper member i holds. */
int ftc__par_encode(const ftc__par_geo_t *geo, const char *job, uint64_t step, uint64_t gen,
                    uint32_t local, const uint8_t *const *shards, const uint64_t *sizes,
                    const uint32_t *ranks, uint8_t **wraps, uint64_t *wrap_sizes, ftc_err_t *err);

/* Rebuilds member `lost`'s shard of `step`. data[i]/wraps[i] are member
 * i's data shard and wrapper as fetched (NULL when missing); wrappers or
 * shards of another version are ignored. On success *out (malloc'd) is the
 * rebuilt shard, verified with every tensor checksum and against the
 * recorded head checksum. Errors name what was missing. */
int ftc__par_rebuild(const ftc__par_geo_t *geo, uint64_t step, uint32_t local, int lost,
                     const uint8_t *const *data, const uint64_t *dsizes,
                     const uint8_t *const *wraps, const uint64_t *wsizes, uint8_t **out,
                     uint64_t *out_size, ftc_err_t *err);

/* Stores this node's own wrapper in its shm slot
 * ftc_slot_name(ns, FTC_PAR_OWNER(l), 0|1), double-buffered (the slot not
 * holding the newest wrapper is written), where ftc_repl_serve_local finds
 * it. */
int ftc__par_store_local(const char *ns, uint32_t local, const uint8_t *wrap, uint64_t size,
                         ftc_err_t *err);

/* ---- gathering shards over the replication engine (replication thread) ---- */

#define FTC_PAR_GATHER_MAX (2 * FTC_PARITY_MAX)

typedef struct ftc__gitem {
    uint32_t peer, owner;   /* fetch owner's shard of the gather's step from peer */
    int member;             /* group member it belongs to */
    bool wrapper;           /* a wrapper (else a data shard) */
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
    int n;
    ftc__gitem_t it[FTC_PAR_GATHER_MAX];
} ftc__gather_t;

/* Moves a gather forward on engine r (starts, polls, retries). broken: the
 * endpoint is going away: transfers in flight are abandoned (and retried
 * on the next engine when attempts remain). True when every item is done. */
bool ftc__gather_poll(ftc_repl_t *r, ftc__gather_t *g, bool broken);
void ftc__gather_free(ftc__gather_t *g); /* frees the items' buffers and g */

#endif
