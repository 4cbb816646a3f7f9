/*
 * layout.c — see layout.h. The plan is built in three passes over the new
 * ranks (carried replicas, other survivors' slots, free slots), each in rank
 * order with ties broken by index, so the output is a pure function of the
 * request.
 */
#include "recover/layout.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void ftc_layout_chunk(uint64_t count, int n, int d, uint64_t *off, uint64_t *len)
{
    uint64_t q = count / (uint64_t)n, rem = count % (uint64_t)n, ud = (uint64_t)d;
    *off = ud * q + (ud < rem ? ud : rem);
    *len = q + (ud < rem ? 1 : 0);
}

void ftc_layout_micro_range(const ftc_layout_t *l, int d, int *first, int *count)
{
    long long m = l->micro_batches;
    long long a = (long long)d * m / l->dp, b = (long long)(d + 1) * m / l->dp;
    *first = (int)a;
    *count = (int)(b - a);
}

int ftc_layout_zero_ranges(uint64_t count, int prev_dp, int new_dp, ftc_layout_range_t *out,
                           size_t cap, size_t *n, ftc_err_t *err)
{
    *n = 0;
    if (prev_dp < 1 || new_dp < 1)
        return ftc_err_set(err, FTC_EINVAL,
                           "zero re-partition: DP degrees must be >= 1 (previous %d, new %d)",
                           prev_dp, new_dp);
    size_t k = 0;
    uint64_t pos = 0;
    int i = 0, j = 0;
    while (pos < count) {
        uint64_t a, la, b, lb;
        ftc_layout_chunk(count, new_dp, i, &a, &la);
        ftc_layout_chunk(count, prev_dp, j, &b, &lb);
        if (a + la <= pos) {
            i++;
            continue;
        }
        if (b + lb <= pos) {
            j++;
            continue;
        }
        uint64_t end = a + la < b + lb ? a + la : b + lb;
        if (k == cap)
            return ftc_err_set(err, FTC_ERANGE,
                               "zero re-partition of %" PRIu64 " elements from DP %d to %d needs "
                               "more than %zu ranges (ftc_layout_zero_ranges_max gives %zu)",
                               count, prev_dp, new_dp, cap,
                               ftc_layout_zero_ranges_max(prev_dp, new_dp));
        out[k++] = (ftc_layout_range_t){.new_dp = i, .offset = pos, .len = end - pos,
                                        .new_offset = pos - a, .prev_dp = j,
                                        .prev_offset = pos - b};
        pos = end;
    }
    *n = k;
    return 0;
}

int ftc_layout_zero_moves(const ftc_layout_t *l, int t, int p, uint64_t count,
                          ftc_layout_zmove_t *out, size_t cap, size_t *n, ftc_err_t *err)
{
    *n = 0;
    if (t < 0 || t >= l->tp || p < 0 || p >= l->pp)
        return ftc_err_set(err, FTC_EINVAL, "zero moves: (t %d, p %d) is outside tp %d x pp %d",
                           t, p, l->tp, l->pp);
    if (l->prev_world == 0)
        return 0;
    ftc_layout_range_t *rg = malloc(ftc_layout_zero_ranges_max(l->prev_dp, l->dp) * sizeof *rg);
    if (!rg)
        return ftc_err_set(err, FTC_ENOMEM, "zero moves: out of memory");
    size_t k;
    int rc = ftc_layout_zero_ranges(count, l->prev_dp, l->dp, rg,
                                    ftc_layout_zero_ranges_max(l->prev_dp, l->dp), &k, err);
    if (!rc && k > cap)
        rc = ftc_err_set(err, FTC_ERANGE, "zero moves of (t %d, p %d): %zu moves, room for %zu",
                         t, p, k, cap);
    for (size_t i = 0; !rc && i < k; i++) {
        int nr = ftc_layout_rank(l->dp, l->tp, rg[i].new_dp, t, p);
        int pr = ftc_layout_rank(l->prev_dp, l->tp, rg[i].prev_dp, t, p);
        int from = l->prev_node[pr];
        out[i] = (ftc_layout_zmove_t){.r = rg[i], .new_rank = nr, .prev_rank = pr,
                                      .from_node = from, .local = from == l->rank_node[nr]};
    }
    if (!rc)
        *n = k;
    free(rg);
    return rc;
}

void ftc_layout_free(ftc_layout_t *l)
{
    if (!l)
        return;
    free(l->rank_node);
    free(l->rank_local);
    free(l->rank_dp);
    free(l->rank_tp);
    free(l->rank_pp);
    free(l->param_src);
    free(l->prev_rank_of);
    free(l->slot_rank);
    free(l->prev_node);
    memset(l, 0, sizeof *l);
}

/* ---- choosing DP ---------------------------------------------------------------------------- */

static int choose_dp(const ftc_layout_req_t *q, int *dp, ftc_err_t *err)
{
    long long slots = (long long)q->nodes * q->gpus_per_node;
    long long per = (long long)q->tp * q->pp;
    long long fit = slots / per;
    if (fit < 1)
        return ftc_err_set(err, FTC_EINVAL,
                           "too few slots: one replica needs tp %d x pp %d = %lld ranks, but "
                           "%d nodes x %d GPUs give %lld; add nodes or lower tp/pp",
                           q->tp, q->pp, per, q->nodes, q->gpus_per_node, slots);
    int m = q->global_batch / q->micro_batch;
    long long hi = fit < m ? fit : m;
    if (q->max_dp > 0 && q->max_dp < hi)
        hi = q->max_dp;
    int best = 0;
    for (long long d = hi; d >= 1 && !best; d--)
        if (q->uneven || m % d == 0)
            best = (int)d;
    int lo = q->min_dp > 0 ? q->min_dp : 1;
    if (best < lo)
        return ftc_err_set(err, FTC_EINVAL,
                           "no DP degree fits: min_dp %d, but %lld replicas of tp %d x pp %d fit "
                           "on %d nodes x %d GPUs, the step has %d micro-batches (global batch %d "
                           "/ micro batch %d)%s, max_dp %d; the largest DP allowed is %d",
                           lo, fit, q->tp, q->pp, q->nodes, q->gpus_per_node, m,
                           q->global_batch, q->micro_batch,
                           q->uneven ? "" : " which DP must divide", q->max_dp, best);
    if ((long long)best * per > FTC_LAYOUT_MAX_WORLD)
        return ftc_err_set(err, FTC_EINVAL, "world %lld exceeds %d ranks; set max_dp",
                           (long long)best * per, FTC_LAYOUT_MAX_WORLD);
    *dp = best;
    return 0;
}

static int check_req(const ftc_layout_req_t *q, ftc_err_t *err)
{
    if (q->nodes < 1 || q->nodes > FTC_LAYOUT_MAX_NODES)
        return ftc_err_set(err, FTC_EINVAL, "layout: nodes %d is not in 1..%d", q->nodes,
                           FTC_LAYOUT_MAX_NODES);
    if (q->gpus_per_node < 1 || q->gpus_per_node > FTC_LAYOUT_MAX_GPUS_PER_NODE)
        return ftc_err_set(err, FTC_EINVAL, "layout: gpus_per_node %d is not in 1..%d",
                           q->gpus_per_node, FTC_LAYOUT_MAX_GPUS_PER_NODE);
    if (q->tp < 1 || q->pp < 1 || (long long)q->tp * q->pp > FTC_LAYOUT_MAX_WORLD)
        return ftc_err_set(err, FTC_EINVAL, "layout: tp %d x pp %d must be in 1..%d", q->tp,
                           q->pp, FTC_LAYOUT_MAX_WORLD);
    if (q->global_batch < 1 || q->micro_batch < 1)
        return ftc_err_set(err, FTC_EINVAL,
                           "layout: global batch %d and micro batch %d must be >= 1",
                           q->global_batch, q->micro_batch);
    if (q->global_batch % q->micro_batch)
        return ftc_err_set(err, FTC_EINVAL,
                           "layout: global batch %d is not a multiple of micro batch %d; the "
                           "global batch must stay exact, so choose B dividing G",
                           q->global_batch, q->micro_batch);
    if (q->min_dp < 0 || q->max_dp < 0 || (q->max_dp > 0 && q->min_dp > q->max_dp))
        return ftc_err_set(err, FTC_EINVAL, "layout: min_dp %d / max_dp %d (0 = no bound)",
                           q->min_dp, q->max_dp);
    if (!q->prev_node_of_rank)
        return 0;
    if (q->prev_dp < 1 || (long long)q->prev_dp * q->tp * q->pp != q->prev_world)
        return ftc_err_set(err, FTC_EINVAL,
                           "layout: previous world %d is not previous dp %d x tp %d x pp %d (tp "
                           "and pp never change)",
                           q->prev_world, q->prev_dp, q->tp, q->pp);
    for (int r = 0; r < q->prev_world; r++) {
        int nd = q->prev_node_of_rank[r];
        if (nd < -1 || nd >= q->nodes)
            return ftc_err_set(err, FTC_EINVAL,
                               "layout: previous rank %d is on node %d, not -1 (lost) or 0..%d",
                               r, nd, q->nodes - 1);
        if (q->prev_local_of_rank && q->prev_local_of_rank[r] < -1)
            return ftc_err_set(err, FTC_EINVAL, "layout: previous rank %d has slot %d", r,
                               q->prev_local_of_rank[r]);
    }
    return 0;
}

/* ---- placement ---------------------------------------------------------------------------- */

typedef struct plan {
    const ftc_layout_req_t *q;
    ftc_layout_t *l;
    int gpn;
    int *free_cnt;  /* [nodes] free slots */
    int *prev_slot; /* [prev_world] node*gpn+slot of a survivor with a known slot in range,
                       else -1 */
    bool *used;     /* [prev_world] survivor already given to a new rank */
} plan_t;

static void put(plan_t *P, int r, int node, int slot)
{
    ftc_layout_t *l = P->l;
    l->rank_node[r] = node;
    l->rank_local[r] = slot;
    l->slot_rank[node * P->gpn + slot] = r;
    P->free_cnt[node]--;
}

static int lowest_free(const plan_t *P, int node)
{
    for (int s = 0; s < P->gpn; s++)
        if (P->l->slot_rank[node * P->gpn + s] < 0)
            return s;
    return -1;
}

/* Gives new rank r the place of survivor pr when possible. */
static bool take_survivor(plan_t *P, int r, int pr)
{
    int node = P->q->prev_node_of_rank[pr], slot;
    if (P->prev_slot[pr] >= 0) {
        if (P->l->slot_rank[P->prev_slot[pr]] >= 0)
            return false;
        slot = P->prev_slot[pr] % P->gpn;
    } else if ((slot = lowest_free(P, node)) < 0) {
        return false;
    }
    put(P, r, node, slot);
    P->used[pr] = true;
    P->l->prev_rank_of[r] = pr;
    return true;
}

/* The node of the lowest-t placed member of r's TP group, or -1. */
static int group_anchor(const plan_t *P, int r)
{
    const ftc_layout_t *l = P->l;
    int base = r - l->rank_tp[r];
    for (int t = 0; t < l->tp; t++)
        if (l->rank_node[base + t] >= 0)
            return l->rank_node[base + t];
    return -1;
}

/* Places the unplaced members of the TP group starting at rank `base`. */
static void place_group(plan_t *P, int base)
{
    ftc_layout_t *l = P->l;
    for (;;) {
        int k = 0;
        for (int t = 0; t < l->tp; t++)
            k += l->rank_node[base + t] < 0;
        if (k == 0)
            return;
        int node = group_anchor(P, base);
        if (node < 0 || P->free_cnt[node] == 0) {
            node = -1;
            for (int n = 0; n < l->nodes; n++) /* best fit for the whole group */
                if (P->free_cnt[n] >= k && (node < 0 || P->free_cnt[n] < P->free_cnt[node]))
                    node = n;
            if (node < 0) /* no node holds it: the roomiest first */
                for (int n = 0; n < l->nodes; n++)
                    if (P->free_cnt[n] > 0 && (node < 0 || P->free_cnt[n] > P->free_cnt[node]))
                        node = n;
        }
        assert(node >= 0); /* nodes * gpus_per_node >= world */
        for (int t = 0; t < l->tp && P->free_cnt[node] > 0; t++)
            if (l->rank_node[base + t] < 0)
                put(P, base + t, node, lowest_free(P, node));
    }
}

typedef struct rep_order {
    int d, survivors;
} rep_order_t;

static int by_survivors(const void *a, const void *b)
{
    const rep_order_t *x = a, *y = b;
    if (x->survivors != y->survivors)
        return y->survivors - x->survivors;
    return x->d - y->d;
}

static int by_prev_d(const void *a, const void *b)
{
    return ((const rep_order_t *)a)->d - ((const rep_order_t *)b)->d;
}

static int place_survivors(plan_t *P, ftc_err_t *err)
{
    const ftc_layout_req_t *q = P->q;
    ftc_layout_t *l = P->l;
    int tp = l->tp, pp = l->pp, pdp = q->prev_dp, gpn = P->gpn;
    const int *pn = q->prev_node_of_rank;
    /* survivors' slots, checked for duplicates (slot_rank is still all -1: borrowed) */
    for (int r = 0; r < q->prev_world; r++) {
        P->prev_slot[r] = -1;
        int s = q->prev_local_of_rank ? q->prev_local_of_rank[r] : -1;
        if (pn[r] < 0 || s < 0 || s >= gpn)
            continue;
        int at = pn[r] * gpn + s;
        if (l->slot_rank[at] >= 0) {
            int o = l->slot_rank[at];
            for (int i = 0; i <= r; i++)
                if (P->prev_slot[i] >= 0)
                    l->slot_rank[P->prev_slot[i]] = -1;
            return ftc_err_set(err, FTC_EINVAL,
                               "layout: previous ranks %d and %d both on node %d slot %d", o, r,
                               pn[r], s);
        }
        l->slot_rank[at] = r;
        P->prev_slot[r] = at;
    }
    for (int r = 0; r < q->prev_world; r++)
        if (P->prev_slot[r] >= 0)
            l->slot_rank[P->prev_slot[r]] = -1;
    /* 1. carried replicas */
    rep_order_t *ord = calloc((size_t)pdp, sizeof *ord);
    if (!ord)
        return ftc_err_set(err, FTC_ENOMEM, "layout: out of memory");
    for (int d = 0; d < pdp; d++) {
        ord[d].d = d;
        for (int p = 0; p < pp; p++)
            for (int t = 0; t < tp; t++)
                ord[d].survivors += pn[ftc_layout_rank(pdp, tp, d, t, p)] >= 0;
    }
    qsort(ord, (size_t)pdp, sizeof *ord, by_survivors);
    int carried = 0;
    while (carried < pdp && carried < l->dp && ord[carried].survivors > 0)
        carried++;
    qsort(ord, (size_t)carried, sizeof *ord, by_prev_d);
    for (int pass = 0; pass < 2; pass++) /* known slots first, then the others */
        for (int nd = 0; nd < carried; nd++)
            for (int p = 0; p < pp; p++)
                for (int t = 0; t < tp; t++) {
                    int pr = ftc_layout_rank(pdp, tp, ord[nd].d, t, p);
                    int r = ftc_layout_rank(l->dp, tp, nd, t, p);
                    if (pn[pr] >= 0 && (P->prev_slot[pr] >= 0) == (pass == 0))
                        take_survivor(P, r, pr);
                }
    free(ord);
    /* 2. other survivors' slots, for every rank still without one */
    for (int r = 0; r < l->world; r++) {
        if (l->rank_node[r] >= 0)
            continue;
        int t = l->rank_tp[r], p = l->rank_pp[r], anchor = group_anchor(P, r), pick = -1;
        for (int d = 0; d < pdp; d++) {
            int pr = ftc_layout_rank(pdp, tp, d, t, p);
            if (pn[pr] < 0 || P->used[pr])
                continue;
            if (P->prev_slot[pr] >= 0 ? l->slot_rank[P->prev_slot[pr]] >= 0
                                      : P->free_cnt[pn[pr]] == 0)
                continue;
            if (pick < 0 || (anchor >= 0 && pn[pr] == anchor && pn[pick] != anchor))
                pick = pr;
        }
        if (pick >= 0)
            take_survivor(P, r, pick);
    }
    return 0;
}

/* Where the parameters of new rank r come from. */
static ftc_layout_src_t param_source(const plan_t *P, int r)
{
    const ftc_layout_req_t *q = P->q;
    const ftc_layout_t *l = P->l;
    if (!q->prev_node_of_rank)
        return (ftc_layout_src_t){-1, -1, false};
    if (l->prev_rank_of[r] >= 0)
        return (ftc_layout_src_t){l->prev_rank_of[r], l->rank_node[r], true};
    int t = l->rank_tp[r], p = l->rank_pp[r], any = -1, lost = -1;
    for (int d = 0; d < q->prev_dp; d++) {
        int pr = ftc_layout_rank(q->prev_dp, l->tp, d, t, p);
        int nd = q->prev_node_of_rank[pr];
        if (nd == l->rank_node[r])
            return (ftc_layout_src_t){pr, nd, true};
        if (nd >= 0 && any < 0)
            any = pr;
        if (lost < 0)
            lost = pr;
    }
    if (any >= 0)
        return (ftc_layout_src_t){any, q->prev_node_of_rank[any], false};
    return (ftc_layout_src_t){lost, -1, false};
}

int ftc_layout_plan(const ftc_layout_req_t *req, ftc_layout_t *out, ftc_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (!req)
        return ftc_err_set(err, FTC_EINVAL, "layout: no request");
    int rc = check_req(req, err);
    int dp = 0;
    if (!rc)
        rc = choose_dp(req, &dp, err);
    if (rc)
        return rc;
    ftc_layout_t *l = out;
    l->dp = dp;
    l->tp = req->tp;
    l->pp = req->pp;
    l->world = dp * req->tp * req->pp;
    l->nodes = req->nodes;
    l->gpus_per_node = req->gpus_per_node;
    l->micro_batch = req->micro_batch;
    l->micro_batches = req->global_batch / req->micro_batch;
    l->grad_accum = (l->micro_batches + dp - 1) / dp;
    size_t w = (size_t)l->world, slots = (size_t)req->nodes * (size_t)req->gpus_per_node;
    size_t pw = req->prev_node_of_rank ? (size_t)req->prev_world : 0;
    plan_t P = {.q = req, .l = l, .gpn = req->gpus_per_node};
    l->rank_node = malloc(w * sizeof(int));
    l->rank_local = malloc(w * sizeof(int));
    l->rank_dp = malloc(w * sizeof(int));
    l->rank_tp = malloc(w * sizeof(int));
    l->rank_pp = malloc(w * sizeof(int));
    l->param_src = malloc(w * sizeof(ftc_layout_src_t));
    l->prev_rank_of = malloc(w * sizeof(int));
    l->slot_rank = malloc(slots * sizeof(int));
    l->prev_node = malloc((pw ? pw : 1) * sizeof(int));
    P.free_cnt = malloc((size_t)req->nodes * sizeof(int));
    P.prev_slot = malloc((pw ? pw : 1) * sizeof(int));
    P.used = calloc(pw ? pw : 1, sizeof(bool));
    if (!l->rank_node || !l->rank_local || !l->rank_dp || !l->rank_tp || !l->rank_pp ||
        !l->param_src || !l->prev_rank_of || !l->slot_rank || !l->prev_node || !P.free_cnt ||
        !P.prev_slot || !P.used) {
        rc = ftc_err_set(err, FTC_ENOMEM, "layout: out of memory for %zu ranks", w);
        goto out_free;
    }
    for (int r = 0; r < l->world; r++) {
        l->rank_tp[r] = r % l->tp;
        l->rank_dp[r] = (r / l->tp) % dp;
        l->rank_pp[r] = r / (l->tp * dp);
        l->rank_node[r] = l->rank_local[r] = l->prev_rank_of[r] = -1;
    }
    for (size_t s = 0; s < slots; s++)
        l->slot_rank[s] = -1;
    for (int n = 0; n < req->nodes; n++)
        P.free_cnt[n] = req->gpus_per_node;
    if (pw) {
        l->prev_dp = req->prev_dp;
        l->prev_world = req->prev_world;
        memcpy(l->prev_node, req->prev_node_of_rank, pw * sizeof(int));
        if ((rc = place_survivors(&P, err)) != 0)
            goto out_free;
    }
    /* 3. the rest, a TP group at a time in rank order */
    for (int base = 0; base < l->world; base += l->tp)
        place_group(&P, base);
    for (int r = 0; r < l->world; r++) {
        l->param_src[r] = param_source(&P, r);
        l->kept += l->prev_rank_of[r] >= 0;
        l->moved += pw && !l->param_src[r].local;
    }
    for (int base = 0; base < l->world; base += l->tp)
        for (int t = 1; t < l->tp; t++)
            if (l->rank_node[base + t] != l->rank_node[base]) {
                l->split_tp_groups++;
                break;
            }
out_free:
    free(P.free_cnt);
    free(P.prev_slot);
    free(P.used);
    if (rc)
        ftc_layout_free(l);
    return rc;
}
