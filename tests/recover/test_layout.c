/*
 * test_layout.c — the layout planner (pure logic, so exhaustive): every
 * fresh layout, single and double node loss, grow, and a second loss after a
 * recovery, over nodes 1..16, gpus_per_node 1..4, tp {1,2,4}, pp {1,2} and
 * several batch shapes; each plan is checked against invariants computed
 * independently here (DP choice, placement, exact global batch, survivors in
 * place up to the bound, parameter sources, ZeRO-1 ranges against the
 * collectives' chunk rule, determinism). Plus hand-written plans and errors.
 */
#include "ftc_test.h"

#include "recover/layout.h"
#include "trainer/coll.h"

static long long g_plans, g_kept, g_ranks_prev_alive, g_split, g_groups;

/* The DP the planner must choose, or 0 when none fits. */
static int expected_dp(const ftc_layout_req_t *q)
{
    int fit = q->nodes * q->gpus_per_node / (q->tp * q->pp);
    int m = q->global_batch / q->micro_batch;
    int hi = fit < m ? fit : m;
    if (q->max_dp > 0 && q->max_dp < hi)
        hi = q->max_dp;
    for (int d = hi; d >= 1; d--)
        if ((q->uneven || m % d == 0))
            return d >= (q->min_dp > 0 ? q->min_dp : 1) ? d : 0;
    return 0;
}

static void check_zero(const ftc_layout_t *l, uint64_t count)
{
    if (l->prev_world == 0)
        return;
    size_t cap = ftc_layout_zero_ranges_max(l->prev_dp, l->dp), n;
    ftc_layout_zmove_t mv[64];
    assert_true(cap <= 64);
    ftc_err_t err = {0};
    for (int p = 0; p < l->pp; p++)
        for (int t = 0; t < l->tp; t++) {
            assert_int_equal(ftc_layout_zero_moves(l, t, p, count, mv, cap, &n, &err), 0);
            uint64_t pos = 0;
            for (size_t i = 0; i < n; i++) {
                const ftc_layout_range_t *r = &mv[i].r;
                assert_true(r->offset == pos && r->len > 0);
                size_t no, nl, po, pl;
                ftc_coll_chunk(count, l->dp, r->new_dp, &no, &nl);
                ftc_coll_chunk(count, l->prev_dp, r->prev_dp, &po, &pl);
                assert_true(r->offset >= no && r->offset + r->len <= no + nl);
                assert_true(r->offset >= po && r->offset + r->len <= po + pl);
                assert_true(r->new_offset == r->offset - no && r->prev_offset == r->offset - po);
                assert_int_equal(mv[i].new_rank, ftc_layout_rank(l->dp, l->tp, r->new_dp, t, p));
                assert_int_equal(mv[i].prev_rank,
                                 ftc_layout_rank(l->prev_dp, l->tp, r->prev_dp, t, p));
                assert_int_equal(mv[i].from_node, l->prev_node[mv[i].prev_rank]);
                assert_int_equal(mv[i].local, mv[i].from_node == l->rank_node[mv[i].new_rank]);
                pos += r->len;
            }
            assert_true(pos == count);
        }
}

/* Every invariant of one plan. */
static void check_plan(const ftc_layout_req_t *q, const ftc_layout_t *l)
{
    g_plans++;
    int gpn = q->gpus_per_node, tp = q->tp, pp = q->pp;
    assert_int_equal(l->dp, expected_dp(q));
    assert_int_equal(l->tp, tp);
    assert_int_equal(l->pp, pp);
    assert_int_equal(l->world, l->dp * tp * pp);
    /* every rank placed once, coordinates by the rule */
    int used = 0;
    for (int s = 0; s < q->nodes * gpn; s++)
        used += l->slot_rank[s] >= 0;
    assert_int_equal(used, l->world);
    for (int r = 0; r < l->world; r++) {
        assert_true(l->rank_node[r] >= 0 && l->rank_node[r] < q->nodes);
        assert_true(l->rank_local[r] >= 0 && l->rank_local[r] < gpn);
        assert_int_equal(l->slot_rank[l->rank_node[r] * gpn + l->rank_local[r]], r);
        assert_int_equal(ftc_layout_rank(l->dp, tp, l->rank_dp[r], l->rank_tp[r], l->rank_pp[r]),
                         r);
        assert_true(l->rank_dp[r] < l->dp && l->rank_tp[r] < tp && l->rank_pp[r] < pp);
    }
    /* the global batch is exact */
    int m = q->global_batch / q->micro_batch, next = 0, most = 0;
    assert_int_equal(l->micro_batches, m);
    for (int d = 0; d < l->dp; d++) {
        int first, cnt;
        ftc_layout_micro_range(l, d, &first, &cnt);
        assert_int_equal(first, next);
        assert_true(cnt >= 1);
        if (!q->uneven)
            assert_int_equal(cnt, l->grad_accum);
        most = cnt > most ? cnt : most;
        next += cnt;
    }
    assert_int_equal(next, m);
    assert_int_equal(most, l->grad_accum);
    if (!q->uneven)
        assert_int_equal(l->dp * l->grad_accum * q->micro_batch, q->global_batch);
    int split = 0;
    for (int b = 0; b < l->world; b += tp)
        for (int t = 1; t < tp; t++)
            if (l->rank_node[b + t] != l->rank_node[b]) {
                split++;
                break;
            }
    assert_int_equal(split, l->split_tp_groups);
    g_split += split;
    if (gpn % tp == 0) /* TP groups inside one node whenever tp divides gpus_per_node */
        assert_int_equal(split, 0);
    g_groups += l->world / tp;
    if (!q->prev_node_of_rank) {
        assert_int_equal(l->kept, 0);
        assert_int_equal(l->moved, 0);
        for (int r = 0; r < l->world; r++)
            assert_int_equal(l->param_src[r].prev_rank, -1);
        if (gpn % tp == 0) { /* contiguous, TP groups inside nodes */
            assert_int_equal(split, 0);
            for (int r = 0; r < l->world; r++) {
                assert_int_equal(l->rank_node[r], r / gpn);
                assert_int_equal(l->rank_local[r], r % gpn);
            }
        }
        return;
    }
    /* survivors: kept reaches the bound sum over (t,p) of min(dp, survivors) */
    const int *pn = q->prev_node_of_rank, *pl = q->prev_local_of_rank;
    int pdp = q->prev_dp, bound = 0, alive_all = 0;
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++) {
            int s = 0;
            for (int d = 0; d < pdp; d++) {
                int pr = ftc_layout_rank(pdp, tp, d, t, p);
                s += pn[pr] >= 0 && (!pl || (pl[pr] >= 0 && pl[pr] < gpn));
                alive_all += pn[pr] >= 0;
            }
            bound += s < l->dp ? s : l->dp;
        }
    g_ranks_prev_alive += alive_all;
    g_kept += l->kept;
    if (pl)
        assert_int_equal(l->kept, bound);
    int kept = 0;
    bool *taken = calloc((size_t)q->prev_world, sizeof(bool));
    for (int r = 0; r < l->world; r++) {
        int pr = l->prev_rank_of[r];
        const ftc_layout_src_t *src = &l->param_src[r];
        if (pr >= 0) {
            kept++;
            assert_false(taken[pr]);
            taken[pr] = true;
            assert_true(pn[pr] == l->rank_node[r]);
            if (pl)
                assert_int_equal(pl[pr], l->rank_local[r]);
            assert_int_equal(pr % tp, l->rank_tp[r]);
            assert_int_equal(pr / (tp * pdp), l->rank_pp[r]);
            assert_int_equal(src->prev_rank, pr);
            assert_true(src->local);
        }
        /* parameter source: same (t,p); local iff on this node; never "lost" when a
         * survivor holds it; local whenever a survivor on this node holds it */
        assert_true(src->prev_rank >= 0 && src->prev_rank < q->prev_world);
        assert_int_equal(src->prev_rank % tp, l->rank_tp[r]);
        assert_int_equal(src->prev_rank / (tp * pdp), l->rank_pp[r]);
        assert_int_equal(src->local, src->node == l->rank_node[r]);
        if (src->node >= 0)
            assert_int_equal(pn[src->prev_rank], src->node);
        bool any = false, here = false;
        for (int d = 0; d < pdp; d++) {
            int pr2 = ftc_layout_rank(pdp, tp, d, l->rank_tp[r], l->rank_pp[r]);
            any |= pn[pr2] >= 0;
            here |= pn[pr2] == l->rank_node[r];
        }
        assert_int_equal(src->node >= 0, any);
        assert_int_equal(src->local, here);
    }
    free(taken);
    assert_int_equal(kept, l->kept);
    /* whole surviving replicas stay whole and in place, in their previous order */
    int whole = 0, last_new = -1;
    for (int d = 0; d < pdp; d++) {
        bool all = true;
        for (int i = 0; i < tp * pp; i++)
            all &= pn[ftc_layout_rank(pdp, tp, d, i % tp, i / tp)] >= 0;
        whole += all;
    }
    if (pl && whole <= l->dp)
        for (int d = 0; d < pdp; d++) {
            int nd = -1;
            bool all = true;
            for (int i = 0; i < tp * pp && all; i++)
                all &= pn[ftc_layout_rank(pdp, tp, d, i % tp, i / tp)] >= 0;
            if (!all)
                continue;
            for (int r = 0; r < l->world; r++)
                if (l->prev_rank_of[r] >= 0 && (l->prev_rank_of[r] / tp) % pdp == d) {
                    assert_true(nd < 0 || nd == l->rank_dp[r]);
                    nd = l->rank_dp[r];
                }
            int cnt = 0;
            for (int r = 0; r < l->world; r++)
                cnt += l->prev_rank_of[r] >= 0 && (l->prev_rank_of[r] / tp) % pdp == d;
            assert_int_equal(cnt, tp * pp);
            assert_true(nd > last_new);
            last_new = nd;
        }
    check_zero(l, 0);
    check_zero(l, 1);
    check_zero(l, 13);
    check_zero(l, 1000);
}

/* Plans, checks, and checks determinism by planning again. Returns the rc. */
static int plan_checked(const ftc_layout_req_t *q, ftc_layout_t *l)
{
    ftc_err_t err = {0};
    int rc = ftc_layout_plan(q, l, &err);
    if (expected_dp(q) == 0) {
        assert_int_equal(rc, FTC_EINVAL);
        assert_true(strlen(err.msg) > 20);
        return rc;
    }
    if (rc)
        fail_msg("plan failed: %s", err.msg);
    check_plan(q, l);
    ftc_layout_t again;
    assert_int_equal(ftc_layout_plan(q, &again, &err), 0);
    assert_int_equal(again.dp, l->dp);
    size_t w = (size_t)l->world * sizeof(int);
    assert_memory_equal(again.rank_node, l->rank_node, w);
    assert_memory_equal(again.rank_local, l->rank_local, w);
    assert_memory_equal(again.prev_rank_of, l->prev_rank_of, w);
    for (int r = 0; r < l->world; r++) {
        assert_int_equal(again.param_src[r].prev_rank, l->param_src[r].prev_rank);
        assert_int_equal(again.param_src[r].node, l->param_src[r].node);
    }
    ftc_layout_free(&again);
    return 0;
}

/* Recovers from `prev` (on prev->nodes nodes) after losing the nodes in lost[]
 * (old numbering), survivors renumbered in order; extra nodes join at the end. */
static int recover(const ftc_layout_req_t *base, const ftc_layout_t *prev, const int *lost,
                   int nlost, int extra, bool with_local, ftc_layout_t *out)
{
    int map[64], nn = 0;
    for (int n = 0; n < prev->nodes; n++) {
        bool gone = false;
        for (int i = 0; i < nlost; i++)
            gone |= lost[i] == n;
        map[n] = gone ? -1 : nn++;
    }
    if (nn + extra < 1)
        return -1;
    int *pn = malloc((size_t)prev->world * sizeof(int));
    for (int r = 0; r < prev->world; r++)
        pn[r] = map[prev->rank_node[r]];
    ftc_layout_req_t q = *base;
    q.nodes = nn + extra;
    q.prev_node_of_rank = pn;
    q.prev_local_of_rank = with_local ? prev->rank_local : NULL;
    q.prev_world = prev->world;
    q.prev_dp = prev->dp;
    int rc = plan_checked(&q, out);
    free(pn);
    return rc;
}

static void test_exhaustive(void **state)
{
    (void)state;
    static const int tps[] = {1, 2, 4}, pps[] = {1, 2};
    static const int batches[][2] = {{12, 1}, {7, 1}, {16, 2}, {6, 3}};
    long long fails = 0;
    for (int nodes = 1; nodes <= 16; nodes++)
        for (int gpn = 1; gpn <= 4; gpn++)
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 2; b++)
                    for (int bs = 0; bs < 4; bs++)
                        for (int uneven = 0; uneven < 2; uneven++) {
                            if (uneven && bs != 1)
                                continue;
                            ftc_layout_req_t q = {.nodes = nodes, .gpus_per_node = gpn,
                                                  .tp = tps[a], .pp = pps[b],
                                                  .global_batch = batches[bs][0],
                                                  .micro_batch = batches[bs][1],
                                                  .uneven = uneven};
                            ftc_layout_t fresh, l;
                            if (plan_checked(&q, &fresh)) {
                                fails++;
                                continue;
                            }
                            /* grow by one node */
                            if (recover(&q, &fresh, NULL, 0, 1, true, &l) == 0)
                                ftc_layout_free(&l);
                            for (int x = 0; x < nodes; x++) {
                                int lost1[1] = {x};
                                if (recover(&q, &fresh, lost1, 1, 0, true, &l) == 0) {
                                    /* and a second loss after the recovery */
                                    if (nodes <= 8)
                                        for (int y = 0; y < l.nodes; y++) {
                                            ftc_layout_t l2;
                                            int lost2[1] = {y};
                                            if (recover(&q, &l, lost2, 1, 0, true, &l2) == 0)
                                                ftc_layout_free(&l2);
                                        }
                                    ftc_layout_free(&l);
                                }
                                if (recover(&q, &fresh, lost1, 1, 0, false, &l) == 0)
                                    ftc_layout_free(&l);
                                for (int y = x + 1; y < nodes; y++) {
                                    int lost[2] = {x, y};
                                    if (recover(&q, &fresh, lost, 2, 0, true, &l) == 0)
                                        ftc_layout_free(&l);
                                }
                            }
                            /* nothing lost, same nodes: the identity */
                            assert_int_equal(recover(&q, &fresh, NULL, 0, 0, true, &l), 0);
                            assert_int_equal(l.dp, fresh.dp);
                            assert_int_equal(l.kept, l.world);
                            assert_int_equal(l.moved, 0);
                            assert_memory_equal(l.rank_node, fresh.rank_node,
                                                (size_t)l.world * sizeof(int));
                            assert_memory_equal(l.rank_local, fresh.rank_local,
                                                (size_t)l.world * sizeof(int));
                            ftc_layout_free(&l);
                            ftc_layout_free(&fresh);
                        }
    print_message(
        "%lld plans checked (%lld fresh requests had no layout); survivors in place "
        "%lld of %lld; TP groups split %lld of %lld (none where tp divides gpus_per_node)\n",
        g_plans, fails, g_kept, g_ranks_prev_alive, g_split, g_groups);
}

static void test_expected_plans(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_layout_t l, r;
    /* 4 nodes x 2 GPUs, tp 2: dp 4, contiguous */
    ftc_layout_req_t q = {.nodes = 4, .gpus_per_node = 2, .tp = 2, .pp = 1, .global_batch = 8,
                          .micro_batch = 1};
    assert_int_equal(ftc_layout_plan(&q, &l, &err), 0);
    assert_int_equal(l.dp, 4);
    assert_int_equal(l.grad_accum, 2);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(l.rank_node[i], i / 2);
        assert_int_equal(l.rank_local[i], i % 2);
    }
    /* node 1 lost (old 2 -> 1, 3 -> 2): dp 3 does not divide 8 micro-batches, so dp 2:
     * previous replicas 0 and 2 stay in place as DP 0 and 1, node 2 idles */
    int pn[8] = {0, 0, -1, -1, 1, 1, 2, 2};
    q.nodes = 3;
    q.prev_node_of_rank = pn;
    q.prev_local_of_rank = l.rank_local;
    q.prev_world = 8;
    q.prev_dp = 4;
    assert_int_equal(ftc_layout_plan(&q, &r, &err), 0);
    assert_int_equal(r.dp, 2);
    assert_int_equal(r.grad_accum, 4);
    int want_node[4] = {0, 0, 1, 1}, want_prev[4] = {0, 1, 4, 5};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r.rank_node[i], want_node[i]);
        assert_int_equal(r.rank_local[i], i % 2);
        assert_int_equal(r.prev_rank_of[i], want_prev[i]);
    }
    assert_int_equal(r.kept, 4);
    assert_int_equal(r.moved, 0);
    ftc_layout_free(&r);
    /* uneven: dp 3 with 3, 3, 2 micro-batches... [0,2) [2,5) [5,8) */
    q.uneven = true;
    assert_int_equal(ftc_layout_plan(&q, &r, &err), 0);
    assert_int_equal(r.dp, 3);
    assert_int_equal(r.grad_accum, 3);
    int first, cnt;
    ftc_layout_micro_range(&r, 0, &first, &cnt);
    assert_true(first == 0 && cnt == 2);
    ftc_layout_micro_range(&r, 2, &first, &cnt);
    assert_true(first == 5 && cnt == 3);
    assert_int_equal(r.rank_node[4], 2);
    assert_int_equal(r.prev_rank_of[4], 6);
    ftc_layout_free(&r);
    ftc_layout_free(&l);

    /* pp 2 on 4 single-GPU nodes: dp 2; node 2 (rank 2 = d0 p1) lost: dp 1 from replica 1 */
    ftc_layout_req_t p = {.nodes = 4, .gpus_per_node = 1, .tp = 1, .pp = 2, .global_batch = 4,
                          .micro_batch = 1};
    assert_int_equal(ftc_layout_plan(&p, &l, &err), 0);
    assert_int_equal(l.dp, 2);
    int pn2[4] = {0, 1, -1, 2};
    p.nodes = 3;
    p.prev_node_of_rank = pn2;
    p.prev_world = 4;
    p.prev_dp = 2;
    assert_int_equal(ftc_layout_plan(&p, &r, &err), 0);
    assert_int_equal(r.dp, 1);
    assert_int_equal(r.grad_accum, 4);
    assert_int_equal(r.rank_node[0], 1); /* (d0, p0) where previous rank 1 was */
    assert_int_equal(r.rank_node[1], 2); /* (d0, p1) where previous rank 3 was */
    assert_int_equal(r.kept, 2);
    /* ZeRO of stage 0, 10 elements, DP 2 -> 1: [0,5) from rank 0 (node 0), [5,10) local */
    ftc_layout_zmove_t mv[4];
    size_t n;
    assert_int_equal(ftc_layout_zero_moves(&r, 0, 0, 10, mv, 4, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_true(mv[0].r.offset == 0 && mv[0].r.len == 5 && mv[0].prev_rank == 0);
    assert_true(mv[0].from_node == 0 && !mv[0].local);
    assert_true(mv[1].r.offset == 5 && mv[1].r.len == 5 && mv[1].prev_rank == 1);
    assert_true(mv[1].r.prev_offset == 0 && mv[1].r.new_offset == 5 && mv[1].local);
    /* stage 1: previous rank 2 (d0) was lost: its half comes from replicas */
    assert_int_equal(ftc_layout_zero_moves(&r, 0, 1, 10, mv, 4, &n, &err), 0);
    assert_true(n == 2 && mv[0].prev_rank == 2 && mv[0].from_node == -1);
    assert_int_equal(ftc_layout_zero_moves(&r, 0, 1, 10, mv, 1, &n, &err), FTC_ERANGE);
    assert_int_equal(ftc_layout_zero_moves(&r, 1, 0, 10, mv, 4, &n, &err), FTC_EINVAL);
    ftc_layout_free(&r);
    ftc_layout_free(&l);

    /* recombination: tp 2 over single-GPU nodes, dp 2; nodes 1 and 2 lost leave (d0,t0)
     * and (d1,t1): one new replica made of both, no parameter moves */
    ftc_layout_req_t c = {.nodes = 2, .gpus_per_node = 1, .tp = 2, .pp = 1, .global_batch = 2,
                          .micro_batch = 1};
    int pn3[4] = {0, -1, -1, 1}, pl3[4] = {0, 0, 0, 0};
    c.prev_node_of_rank = pn3;
    c.prev_local_of_rank = pl3;
    c.prev_world = 4;
    c.prev_dp = 2;
    assert_int_equal(ftc_layout_plan(&c, &r, &err), 0);
    assert_int_equal(r.dp, 1);
    assert_int_equal(r.prev_rank_of[0], 0);
    assert_int_equal(r.prev_rank_of[1], 3);
    assert_int_equal(r.kept, 2);
    assert_int_equal(r.moved, 0);
    ftc_layout_free(&r);
}

static void test_zero_ranges(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_layout_range_t rg[8];
    size_t n;
    assert_int_equal(ftc_layout_zero_ranges(10, 3, 2, rg, 8, &n, &err), 0);
    /* previous chunks [0,4) [4,7) [7,10); new [0,5) [5,10) */
    const ftc_layout_range_t want[] = {{0, 0, 4, 0, 0, 0}, {0, 4, 1, 4, 1, 0},
                                       {1, 5, 2, 0, 1, 1}, {1, 7, 3, 2, 2, 0}};
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rg[i].new_dp, want[i].new_dp);
        assert_int_equal(rg[i].offset, want[i].offset);
        assert_int_equal(rg[i].len, want[i].len);
        assert_int_equal(rg[i].new_offset, want[i].new_offset);
        assert_int_equal(rg[i].prev_dp, want[i].prev_dp);
        assert_int_equal(rg[i].prev_offset, want[i].prev_offset);
    }
    /* exhaustive small: cover [0,count) exactly once, owners by the chunk rule */
    for (uint64_t count = 0; count < 40; count++)
        for (int a = 1; a <= 7; a++)
            for (int b = 1; b <= 7; b++) {
                ftc_layout_range_t big[16];
                assert_int_equal(ftc_layout_zero_ranges(count, a, b, big, 16, &n, &err), 0);
                assert_true(n <= ftc_layout_zero_ranges_max(a, b));
                uint64_t pos = 0;
                for (size_t i = 0; i < n; i++) {
                    size_t po, pl, no, nl;
                    ftc_coll_chunk(count, a, big[i].prev_dp, &po, &pl);
                    ftc_coll_chunk(count, b, big[i].new_dp, &no, &nl);
                    assert_true(big[i].offset == pos && big[i].len > 0);
                    assert_true(pos >= po && pos + big[i].len <= po + pl);
                    assert_true(pos >= no && pos + big[i].len <= no + nl);
                    pos += big[i].len;
                }
                assert_true(pos == count);
                if (n > 1)
                    assert_int_equal(ftc_layout_zero_ranges(count, a, b, big, n - 1, &n, &err),
                                     FTC_ERANGE);
            }
    assert_int_equal(ftc_layout_zero_ranges(10, 0, 2, rg, 8, &n, &err), FTC_EINVAL);
}

static void test_errors(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_layout_t l;
    ftc_layout_req_t q = {.nodes = 1, .gpus_per_node = 4, .tp = 4, .pp = 2, .global_batch = 8,
                          .micro_batch = 1};
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "too few slots"));
    print_message("%s\n", err.msg);
    q.pp = 1;
    q.global_batch = 10;
    q.micro_batch = 3;
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "not a multiple"));
    q = (ftc_layout_req_t){.nodes = 2, .gpus_per_node = 2, .tp = 2, .pp = 1, .global_batch = 8,
                           .micro_batch = 1, .min_dp = 3};
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "no DP degree fits"));
    print_message("%s\n", err.msg);
    q.min_dp = 0;
    q.global_batch = 7; /* prime: only dp 1 divides 7 micro-batches */
    assert_int_equal(ftc_layout_plan(&q, &l, &err), 0);
    assert_int_equal(l.dp, 1);
    ftc_layout_free(&l);
    int pn[4] = {0, 1, 0, 5};
    q.prev_node_of_rank = pn;
    q.prev_world = 4;
    q.prev_dp = 1; /* 1 x 2 x 1 != 4 */
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "previous world"));
    q.prev_dp = 2;
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "node 5"));
    pn[3] = 1;
    int pl[4] = {0, 0, 0, 1};
    q.prev_local_of_rank = pl;
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "both on node 0 slot 0"));
    assert_int_equal(ftc_layout_plan(NULL, &l, &err), FTC_EINVAL);
    q = (ftc_layout_req_t){.nodes = 0, .gpus_per_node = 2, .tp = 1, .pp = 1, .global_batch = 1,
                           .micro_batch = 1};
    assert_int_equal(ftc_layout_plan(&q, &l, &err), FTC_EINVAL);
    ftc_layout_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expected_plans),
        cmocka_unit_test(test_zero_ranges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
