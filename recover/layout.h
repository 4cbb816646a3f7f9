/*
 * layout.h — the layout planner: given the nodes that are there now (and,
 * after a failure, where the previous layout's ranks lived), chooses the
 * data-parallel degree, places every rank on a node slot, and says where
 * each rank's state comes from. Pure logic: no I/O, no clock, no randomness.
 *
 * Ranks. A layout has dp x tp x pp ranks. Rank r has coordinates
 * (d, t, p) with r = (p * dp + d) * tp + t: TP is the fastest-varying, so
 * a TP group (fixed d, p) is tp consecutive ranks, and a fresh layout puts
 * rank r on node r / gpus_per_node, slot r % gpus_per_node (TP groups inside
 * one node whenever tp divides gpus_per_node). ftc_layout_rank() computes it.
 *
 * Batch. global_batch G is the number of sequences per optimizer step and
 * never changes; micro_batch B is the sequences of one micro-batch (the same
 * on every rank and in every layout). G must be a multiple of B: the step has
 * M = G / B micro-batches, numbered 0..M-1, each a pure function of the step.
 * DP rank d runs micro-batches [d*M/dp, (d+1)*M/dp) (integer division;
 * ftc_layout_micro_range()). By default dp must divide M, so every rank runs
 * exactly grad_accum = M / dp micro-batches and G = dp * grad_accum * B
 * exactly; with `uneven` any dp <= M is allowed (ranks differ by at most one
 * micro-batch, grad_accum is the larger count) — only valid for trainers that
 * sum micro-batch gradients exactly (trainer/gradsum.h), since a plain mean
 * of rank means would then weight micro-batches unequally. Either way the
 * global batch is exact, never rounded.
 *
 * DP. The largest dp with dp * tp * pp <= nodes * gpus_per_node, dp <= M (and
 * dp | M unless uneven), and dp <= max_dp (when max_dp > 0); FTC_EINVAL
 * naming each bound when that dp is below min_dp (or below 1: too few slots
 * for one tp x pp replica). TP and PP never change.
 *
 * Placement (after a failure, prev_node_of_rank given). A previous rank is a
 * survivor when its node is still there. A new rank is "in place" when it
 * sits on the very node slot of a survivor with the same (tp, pp)
 * coordinates: its parameters (replicated across DP) are already there. The
 * planner maximises the ranks in place — it reaches the upper bound
 * sum over (t, p) of min(dp, survivors with (t, p)) — as follows:
 *   1. carried replicas: the previous DP replicas with the most survivors
 *      (ties: lower previous d), at most dp of them, keep their survivors in
 *      place; they become new DP ranks 0.. in their previous order (so
 *      nothing moves when nothing was lost);
 *   2. every other new rank takes the slot of a not-yet-used survivor with
 *      its (t, p) if there is one (preferring the node of its TP group's
 *      other members, then the lowest previous d);
 *   3. what is left (ranks whose (t, p) has no survivor left, or a grow)
 *      goes to free slots, a TP group at a time: on the node of its already
 *      placed members, else on the node with the fewest free slots that
 *      holds the whole group (best fit), else split over the nodes with the
 *      most free slots. Ties go to the lower node index.
 * Optimizer state (ZeRO-1): within each (t, p), the flat optimizer state of
 * `count` elements is split over the DP ranks by the collectives' chunk rule
 * (trainer/coll.h ftc_coll_chunk: chunk r of n starts at r*(count/n) +
 * min(r, count%n)); ftc_layout_zero_ranges() says which previous DP rank
 * holds each piece of each new DP rank's chunk, ftc_layout_zero_moves() adds
 * the previous global rank and its node.
 *
 * Thread-safety: every function is pure; a layout may be read from any
 * number of threads. Errors: FTC_EINVAL (bad request, no layout fits: the
 * message names the bound), FTC_ENOMEM, FTC_ERANGE (an output array too
 * small: the message gives the size needed).
 */
#ifndef FTC_RECOVER_LAYOUT_H
#define FTC_RECOVER_LAYOUT_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_LAYOUT_MAX_NODES 1024
#define FTC_LAYOUT_MAX_GPUS_PER_NODE 256
#define FTC_LAYOUT_MAX_WORLD 65536

typedef struct ftc_layout_req {
    int nodes;         /* nodes active in the new generation, 1..FTC_LAYOUT_MAX_NODES */
    int gpus_per_node; /* rank slots per node, 1..FTC_LAYOUT_MAX_GPUS_PER_NODE */
    int tp, pp;        /* fixed degrees (>= 1) */
    int global_batch;  /* G: sequences per optimizer step, the same in every layout */
    int micro_batch;   /* B: sequences per micro-batch; G % B == 0 */
    int min_dp, max_dp; /* 0 = no bound */
    /* previous layout, NULL for a fresh start: the node (in the NEW node
     * numbering, -1 = lost) of each previous rank 0..prev_world-1 */
    const int *prev_node_of_rank;
    int prev_world, prev_dp; /* prev_world == prev_dp * tp * pp */
    /* optional: the slot of each previous rank on its node (-1 = unknown).
     * NULL: unknown for all; survivors then stay on their node, in the lowest
     * free slots, in previous-rank order. */
    const int *prev_local_of_rank;
    bool uneven; /* allow dp that does not divide M (see the top) */
} ftc_layout_req_t;

/* Where a new rank's replicated state (the parameters of its (t, p) shard)
 * comes from. */
typedef struct ftc_layout_src {
    int prev_rank; /* a previous rank with the same (t, p); -1 on a fresh start */
    int node;      /* the node (new numbering) that held prev_rank; -1 = lost: fetch its
                      replicas from peers or the persist tier */
    bool local;    /* node is the new rank's own node: nothing crosses the network */
} ftc_layout_src_t;

typedef struct ftc_layout {
    int dp, tp, pp, world;
    int nodes, gpus_per_node;
    int micro_batch;   /* B */
    int micro_batches; /* M = global_batch / micro_batch per step */
    int grad_accum;    /* micro-batches per rank per step (uneven: the most any rank runs) */
    /* [world] arrays, indexed by new rank */
    int *rank_node;   /* node index (0..nodes-1) */
    int *rank_local;  /* slot on that node (0..gpus_per_node-1) */
    int *rank_dp, *rank_tp, *rank_pp; /* coordinates */
    ftc_layout_src_t *param_src;       /* parameter source of each rank */
    int *prev_rank_of;                 /* the survivor whose slot it took (in place), else -1 */
    int *slot_rank;   /* [nodes * gpus_per_node]: rank at node*gpus_per_node + slot, -1 = idle */
    int kept;         /* ranks in place */
    int moved;        /* ranks whose parameters come from another node (or are lost) */
    int split_tp_groups; /* TP groups spread over more than one node */
    /* the previous layout, for ftc_layout_zero_moves (prev_world 0 = fresh start) */
    int prev_dp, prev_world;
    int *prev_node; /* [prev_world] */
} ftc_layout_t;

/* Plans a layout. On success *out holds allocated arrays (ftc_layout_free);
 * on failure *out is zeroed and needs no free. Same input, same output. */
int ftc_layout_plan(const ftc_layout_req_t *req, ftc_layout_t *out, ftc_err_t *err);
void ftc_layout_free(ftc_layout_t *l); /* frees the arrays, zeroes *l; NULL is a no-op */

/* Rank of coordinates (d, t, p) in a dp x tp x pp layout (the rule at the top). */
static inline int ftc_layout_rank(int dp, int tp, int d, int t, int p)
{
    return (p * dp + d) * tp + t;
}

/* Micro-batches of DP rank d in a step: [*first, *first + *count). */
void ftc_layout_micro_range(const ftc_layout_t *l, int d, int *first, int *count);

/* One piece of the ZeRO-1 re-partition of a flat state of `count` elements. */
typedef struct ftc_layout_range {
    int new_dp;           /* new DP rank whose chunk holds the piece */
    uint64_t offset, len; /* the piece, in elements of the whole flat state */
    uint64_t new_offset;  /* offset - start of new_dp's chunk */
    int prev_dp;          /* previous DP rank whose chunk held it */
    uint64_t prev_offset; /* offset - start of prev_dp's chunk */
} ftc_layout_range_t;

/* Chunk d of n of `count` elements (the ftc_coll_chunk rule). */
void ftc_layout_chunk(uint64_t count, int n, int d, uint64_t *off, uint64_t *len);
/* Upper bound of the pieces of ftc_layout_zero_ranges: prev_dp + new_dp. */
static inline size_t ftc_layout_zero_ranges_max(int prev_dp, int new_dp)
{
    return (size_t)prev_dp + (size_t)new_dp;
}
/* The pieces, in increasing offset (so also grouped by new_dp): they cover
 * [0, count) exactly once, none empty. FTC_ERANGE when cap is too small,
 * FTC_EINVAL for a DP degree < 1. */
int ftc_layout_zero_ranges(uint64_t count, int prev_dp, int new_dp, ftc_layout_range_t *out,
                           size_t cap, size_t *n, ftc_err_t *err);

/* A piece with the ranks and the node it moves from. */
typedef struct ftc_layout_zmove {
    ftc_layout_range_t r;
    int new_rank;  /* (r.new_dp, t, p) in the new layout */
    int prev_rank; /* (r.prev_dp, t, p) in the previous one */
    int from_node; /* node of prev_rank (new numbering), -1 = lost (replicas / persist tier) */
    bool local;    /* from_node is new_rank's node */
} ftc_layout_zmove_t;

/* The ZeRO-1 moves of the (t, p) shard whose flat optimizer state has
 * `count` elements. A fresh start has none (*n = 0). Same errors as
 * ftc_layout_zero_ranges, plus FTC_EINVAL for t, p out of range. */
int ftc_layout_zero_moves(const ftc_layout_t *l, int t, int p, uint64_t count,
                          ftc_layout_zmove_t *out, size_t cap, size_t *n, ftc_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
