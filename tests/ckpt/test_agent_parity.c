/*
 * test_agent_parity.c — parity groups of `ftc agent` (redundancy xor:G and
 * rs:G+M, docs/agent.md):
 *   - the pure part (agent_parity.h): geometry with leftover nodes, encode,
 *     and rebuild of every member and every pair of members of an rs:2+2
 *     group from shards of different sizes, bit-exact; a corrupted or stale
 *     parity block or data shard is never used; a rebuild decodes with the
 *     code parity.meta records (xor:2 parity rebuilt under rs:2+1 and back);
 *   - end to end with a real Redis, real agents over tcp;ofi_rxm on loopback,
 *     real rank processes and SIGKILL: xor:2 on 3 nodes, one node lost (agent
 *     killed, its /dev/shm wiped), its rank restores bit-exact rebuilt from
 *     parity; rs:2+2 on 4 nodes, two nodes of the group lost at once, both
 *     restore; corrupted parity blocks are detected and the restore falls
 *     back to the persist tier, and without one fails naming what it tried;
 *     a rebuild that verifies against forged parity (another version of
 *     the committed step) is refused by the commit record's checksum; a
 *     rebuild's log names the code parity.meta recorded (xor:2 parity under
 *     agents configured rs:2+1);
 *   - failure domains: the grouping rule, exhaustively over small node and
 *     domain counts (no group holds more than M members of one domain when
 *     any grouping can avoid it, every node agrees on its group); end to end,
 *     6 nodes xor:2 in 3 domains of 2 consecutive nodes (index order would
 *     put both nodes of domain A in one group): both nodes of A lost at once,
 *     every rank restores;
 *   - encoding and a rebuild's decode run on the parity worker (the agents
 *     log their time);
 *   - idle slots (a layout with fewer ranks than nodes x ranks_per_node):
 *     the encoder choice, the virtual zero shard in encode and rebuild; end
 *     to end with a published plan whose node 0 is idle: commits under xor:2
 *     and a lost node's shard rebuilt;
 *   - published parity groups (ftc:{J}:pargroups:GEN): the text form, every
 *     agent adopts the published groups, a mismatch is refused at start;
 *   - a moved rank (a shrink): nodes lost without replacement, their ranks
 *     restored on survivors outside their groups from the committed
 *     generation's parity groups, with nothing in the persist tier; a group
 *     that lost more than it tolerates fails over to the persist tier
 *     naming what was gone;
 *   - a shrunk generation's groups (the plan's members only): the rule over
 *     member lists; its checkpoints commit, and a later rebuild uses its
 *     groups; shrunk below a group, it commits without parity;
 *   - a rebuild's result answers only the request that queued it (a rank
 *     that gave up and asked again is answered by its own rebuild).
 *   - an encode takes only shards of the current generation (a slot an
 *     earlier generation left with the step is asked again, never encoded);
 *   - the encoder's reports of the other members' shards that Redis did
 *     not take (stopped) are made again once it answers: the step commits;
 *   - a rebuild reads this node's own pieces from every one of a rank's
 *     slots (its committed shard may be in the third): a moved rank is
 *     rebuilt on a member whose own rank's shard is there;
 *   - a generation's plan and parity groups (24 h TTL) are renewed as it
 *     commits: a rebuild in the next generation finds them after the TTL;
 *   - a member keeps the parity block of the newest committed version when
 *     the version after it is abandoned (the next block goes over the
 *     abandoned one), and a lost node's committed shard is rebuilt from it;
 *   - a restore with no member alive and no live peer (the persist tier)
 *     leaves the rank all three of its slots;
 *   - a rank continuing a lost rank's state (FTC_RESTORE_RANK) gets that
 *     rank's shard rebuilt from parity.
 * FTC_TEST_FILTER=NAME (cmocka pattern) runs only the matching tests.
 */
#include "ftc_test.h"

#include "ckpt/agent.h"
#include "ckpt/agent_internal.h"
#include "ckpt/agent_parity.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "detect/control.h"

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>

#define MAXN 6
#define AGENT_FIXTURE_JOB_PREFIX "apar"
/* an encoder gathers every member's shard of a step as each seals it: on a
 * loaded 2-core machine a member can be seconds late (one CI run missed 8 s) */
#define AGENT_FIXTURE_TIMEOUT_MS "30000"
#include "ckpt/agent_fixture.h"

/* ---- the pure part ------------------------------------------------------------ */

static void test_geometry(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    ftc__par_geo_t g;
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &e), 0);
    /* 7 nodes, groups of 3: [0,3) and [3,7) (the leftover node joins the last) */
    assert_int_equal(ftc__par_geometry(&red, 7, NULL, 1, &g, &e), 0);
    assert_true(g.first == 0 && g.n == 3 && g.d == 2 && g.m == 1 && g.member == 1);
    assert_int_equal(ftc__par_geometry(&red, 7, NULL, 6, &g, &e), 0);
    assert_true(g.first == 3 && g.n == 4 && g.d == 3 && g.member == 3);
    /* fewer nodes than a group: one group of all; too few to tolerate a loss */
    assert_int_equal(ftc__par_geometry(&red, 2, NULL, 1, &g, &e), 0);
    assert_true(g.n == 2 && g.d == 1);
    assert_int_equal(ftc__par_geometry(&red, 1, NULL, 0, &g, &e), FTC_ECONFIG);
    assert_non_null(strstr(e.msg, "more than 1 nodes per parity group"));
    assert_int_equal(ftc_redundancy_parse("rs:2+2", &red, &e), 0);
    assert_int_equal(ftc__par_geometry(&red, 4, NULL, 3, &g, &e), 0);
    assert_true(g.n == 4 && g.d == 2 && g.m == 2 && !g.xor_code);
    assert_int_equal(ftc__par_geometry(&red, 2, NULL, 0, &g, &e), FTC_ECONFIG);
}

/* A rebuilt member (out, on bytes: freed here) is bit-exact its shard. */
static void assert_rebuilt(uint8_t *out, uint64_t on, const uint8_t *shard, uint64_t size)
{
    assert_int_equal(on, size);
    assert_memory_equal(out, shard, on);
    free(out);
}

/* Frees the n members' shards and parity wrappers. */
static void free_members(uint8_t **sh, uint8_t **w, int n)
{
    for (int i = 0; i < n; i++) {
        free(sh[i]);
        free(w[i]);
    }
}

static void test_encode_rebuild(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("rs:2+2", &red, &e), 0);
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_geometry(&red, 4, NULL, 0, &g, &e), 0);
    uint8_t *sh[4];
    uint64_t sz[4];
    uint32_t ranks[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        sh[i] = ftc_test_make_shard(5, (uint32_t)i, 1000 + 777 * (uint64_t)i, 90 + (uint64_t)i,
                                    &sz[i]);
    uint8_t *w[4];
    uint64_t ws[4];
    assert_int_equal(ftc__par_encode(&g, "test-job", 5, 1, 0, (const uint8_t *const *)sh, sz,
                                     ranks, w, ws, &e), 0);
    /* parity memory: (d+m)/d of the largest shard, spread over the members */
    printf("# rs:2+2 shards %llu..%llu bytes, parity wrapper %llu bytes per member\n",
           (unsigned long long)sz[0], (unsigned long long)sz[3], (unsigned long long)ws[0]);
    int rebuilt = 0;
    for (int a = 0; a < 4; a++)
        for (int b = a; b < 4; b++) { /* every single and double loss */
            const uint8_t *d[4], *wr[4];
            for (int i = 0; i < 4; i++) {
                bool gone = i == a || i == b;
                d[i] = gone ? NULL : sh[i];
                wr[i] = gone ? NULL : w[i];
            }
            for (int x = 0; x < 2; x++) {
                int lost = x ? b : a;
                uint8_t *out;
                uint64_t on;
                assert_int_equal(
                    ftc__par_rebuild(&g, 5, 0, lost, d, sz, wr, ws, &out, &on, NULL, &e), 0);
                assert_rebuilt(out, on, sh[lost], sz[lost]);
                rebuilt++;
            }
        }
    printf("# %d rebuilds from every 1- and 2-member loss: bit-exact\n", rebuilt);
    /* three losses: too many, and the error names the missing pieces */
    const uint8_t *d3[4] = {sh[0], NULL, NULL, NULL}, *w3[4] = {w[0], NULL, NULL, NULL};
    uint8_t *out;
    uint64_t on;
    assert_int_equal(ftc__par_rebuild(&g, 5, 0, 1, d3, sz, w3, ws, &out, &on, NULL, &e),
                     FTC_ERANGE);
    assert_non_null(strstr(e.msg, "code tolerates 2"));
    /* a corrupted parity block is not used: with members 1 and 2 gone and
     * member 3's parity flipped, member 1 cannot be rebuilt */
    uint8_t *bad = malloc(ws[3]);
    memcpy(bad, w[3], ws[3]);
    bad[ws[3] - 200] ^= 1;
    const uint8_t *dc[4] = {sh[0], NULL, NULL, sh[3]}, *wc[4] = {w[0], NULL, NULL, bad};
    int rc = ftc__par_rebuild(&g, 5, 0, 1, dc, sz, wc, ws, &out, &on, NULL, &e);
    assert_int_not_equal(rc, 0);
    print_message("corrupt parity: %s\n", e.msg);
    /* a data shard of another version (same step and size, other bytes) is
     * not used: member 1's row 3 needs member 2's data, parity of 3 and 0 */
    uint64_t osz;
    uint8_t *other = ftc_test_make_shard(5, 2, 1000 + 777 * 2, 12345, &osz);
    assert_int_equal(osz, sz[2]);
    const uint8_t *ds[4] = {NULL, NULL, other, sh[3]}, *wsv[4] = {w[0], NULL, NULL, NULL};
    rc = ftc__par_rebuild(&g, 5, 0, 1, ds, sz, wsv, ws, &out, &on, NULL, &e);
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(e.msg, "another version"));
    ds[2] = sh[2]; /* the right version: row 3 rebuilds, row 2 still lacks pieces */
    rc = ftc__par_rebuild(&g, 5, 0, 1, ds, sz, wsv, ws, &out, &on, NULL, &e);
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(e.msg, "row 2"));
    /* the wrong step: no parity block of it */
    assert_int_equal(ftc__par_rebuild(&g, 6, 0, 1, d3, sz, w3, ws, &out, &on, NULL, &e),
                     FTC_ENOENT);
    /* a member's shard of another generation (a slot an earlier one left
     * with this step) is never encoded */
    uint64_t gsz;
    uint8_t *oldgen = ftc_test_make_shard(5, 2, 1000 + 777 * 2, 92, &gsz);
    ftc_shard_restamp(oldgen, 5, 7);
    assert_int_equal(ftc_shard_seal(oldgen, gsz, 1, &e), 0);
    const uint8_t *dg[4] = {sh[0], sh[1], oldgen, sh[3]};
    uint8_t *wg[4];
    uint64_t wgs[4];
    assert_int_equal(ftc__par_encode(&g, "test-job", 5, 1, 0, dg, sz, ranks, wg, wgs, &e),
                     FTC_ESTALE);
    assert_non_null(strstr(e.msg, "member 2's shard of step 5 is of generation 7, not 1"));
    for (int i = 0; i < 4; i++)
        assert_null(wg[i]);
    free(oldgen);
    free(other);
    free(bad);
    free_members(sh, w, 4);
}

/* Idle members (no rank at that node and local index): the encoder is the
 * first member from l % n on with a rank; an idle member's shard is the
 * virtual zero shard (never given, zeros in the code, recorded as rank
 * FTC_PAR_IDLE / size 0 / head 0); every other member rebuilds bit-exact,
 * an idle one is never rebuilt. */
static void test_idle_members(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    ftc__par_geo_t g;
    assert_int_equal(ftc_redundancy_parse("rs:2+2", &red, &e), 0);
    assert_int_equal(ftc__par_geometry(&red, 4, NULL, 0, &g, &e), 0);
    bool idle[4] = {true, false, true, false};
    assert_int_equal(ftc__par_encoder(&g, 0, idle), 1); /* member 0 idle: the next */
    assert_int_equal(ftc__par_encoder(&g, 1, idle), 1);
    assert_int_equal(ftc__par_encoder(&g, 2, idle), 3); /* 2 idle: 3 */
    assert_int_equal(ftc__par_encoder(&g, 7, idle), 3);
    assert_int_equal(ftc__par_encoder(&g, 5, NULL), 1); /* none idle: l % n */
    bool all[4] = {true, true, true, true};
    assert_int_equal(ftc__par_encoder(&g, 0, all), -1); /* a stripe without ranks */
    /* member 0 idle; members 1..3 hold ranks 4, 7, 9 */
    uint8_t *sh[4] = {NULL};
    uint64_t sz[4] = {0};
    uint32_t ranks[4] = {FTC_PAR_IDLE, 4, 7, 9};
    for (int i = 1; i < 4; i++)
        sh[i] = ftc_test_make_shard(3, (uint32_t)i, 2000 + 333 * (uint64_t)i, 70 + (uint64_t)i,
                                    &sz[i]);
    uint8_t *w[4];
    uint64_t ws[4];
    assert_int_equal(ftc__par_encode(&g, "test-job", 3, 1, 2, (const uint8_t *const *)sh, sz,
                                     ranks, w, ws, &e), 0);
    for (int i = 0; i < 4; i++)
        assert_non_null(w[i]); /* the idle member holds parity too */
    /* an idle member with bytes is refused */
    uint8_t junk[64] = {1};
    const uint8_t *bad[4] = {junk, sh[1], sh[2], sh[3]};
    uint64_t bsz[4] = {64, sz[1], sz[2], sz[3]};
    uint8_t *w2[4];
    uint64_t ws2[4];
    assert_int_equal(ftc__par_encode(&g, "test-job", 3, 1, 2, bad, bsz, ranks, w2, ws2, &e),
                     FTC_EINVAL);
    /* every pair of lost members among 1..3: the zero shard stands in for member 0's data,
     * whatever is passed for it (never fetched) */
    int rebuilt = 0;
    for (int a = 1; a < 4; a++)
        for (int b = a; b < 4; b++) {
            const uint8_t *d[4], *wr[4];
            uint64_t dsz[4];
            for (int i = 0; i < 4; i++) {
                bool gone = i == a || i == b;
                d[i] = gone || i == 0 ? NULL : sh[i];
                dsz[i] = i == 0 ? 12345 : sz[i];
                wr[i] = gone ? NULL : w[i];
            }
            for (int x = 0; x < 2; x++) {
                int lost = x ? b : a;
                uint8_t *out;
                uint64_t on;
                assert_int_equal(
                    ftc__par_rebuild(&g, 3, 2, lost, d, dsz, wr, ws, &out, &on, NULL, &e), 0);
                assert_rebuilt(out, on, sh[lost], sz[lost]);
                rebuilt++;
            }
        }
    /* the idle member and member 3 lost: 3 rebuilds (the zero shard is not lost) */
    const uint8_t *d1[4] = {NULL, sh[1], sh[2], NULL}, *w1[4] = {NULL, w[1], w[2], NULL};
    uint8_t *out;
    uint64_t on;
    assert_int_equal(ftc__par_rebuild(&g, 3, 2, 3, d1, sz, w1, ws, &out, &on, NULL, &e), 0);
    assert_memory_equal(out, sh[3], on);
    free(out);
    rebuilt++;
    assert_int_equal(ftc__par_rebuild(&g, 3, 2, 0, d1, sz, w1, ws, &out, &on, NULL, &e),
                     FTC_EINVAL);
    assert_non_null(strstr(e.msg, "idle"));
    /* the same rebuild as a parity worker task (what the agent hands its worker) */
    ftc__par_task_t *t = calloc(1, sizeof *t);
    t->rebuild = true;
    t->step = 3;
    t->local = 2;
    t->geo = g;
    t->geo.member = 3;
    for (int i = 1; i < 3; i++) {
        t->bufs[i] = malloc(sz[i]);
        memcpy(t->bufs[i], sh[i], sz[i]);
        t->sizes[i] = sz[i];
        t->wraps[i] = malloc(ws[i]);
        memcpy(t->wraps[i], w[i], ws[i]);
        t->wsizes[i] = ws[i];
    }
    ftc__par_task_run(t);
    assert_int_equal(t->rc, 0);
    assert_int_equal(t->out_size, sz[3]);
    assert_memory_equal(t->out, sh[3], sz[3]);
    assert_null(t->bufs[1]); /* the pieces are freed once used */
    printf("# rebuild task on the worker's code path: %.2f ms\n", t->ms);
    ftc__par_task_free(t);
    printf("# rs:2+2 with an idle member: %d rebuilds bit-exact; %s\n", rebuilt, e.msg);
    free_members(sh, w, 4);
}

/* xor:2 and rs:2+1 have the same geometry (3 members, one parity chunk per
 * row) but not the same code (all ones vs a Cauchy row). Parity encoded
 * under one is rebuilt with the code its parity.meta records, not the code
 * the rebuilding agent is configured with now (a job restarted with the
 * other redundancy): bit-exact both ways. */
static void test_rebuild_recorded_code(void **state)
{
    (void)state;
    const char *reds[2] = {"xor:2", "rs:2+1"};
    for (int k = 0; k < 2; k++) {
        ftc_redundancy_t enc_red, dec_red;
        ftc_err_t e = {0};
        ftc__par_geo_t ge, gd;
        assert_int_equal(ftc_redundancy_parse(reds[k], &enc_red, &e), 0);
        assert_int_equal(ftc_redundancy_parse(reds[1 - k], &dec_red, &e), 0);
        assert_int_equal(ftc__par_geometry(&enc_red, 3, NULL, 0, &ge, &e), 0);
        assert_int_equal(ftc__par_geometry(&dec_red, 3, NULL, 0, &gd, &e), 0);
        assert_true(ge.n == gd.n && ge.m == gd.m && ge.xor_code != gd.xor_code);
        uint8_t *sh[3], *w[3];
        uint64_t sz[3], ws[3];
        uint32_t ranks[3] = {0, 1, 2};
        for (int i = 0; i < 3; i++)
            sh[i] = ftc_test_make_shard(4, (uint32_t)i, 1500 + 500 * (uint64_t)i,
                                        40 + (uint64_t)i, &sz[i]);
        assert_int_equal(ftc__par_encode(&ge, "test-job", 4, 1, 0, (const uint8_t *const *)sh,
                                         sz, ranks, w, ws, &e), 0);
        for (int lost = 0; lost < 3; lost++) {
            const uint8_t *d[3], *wr[3];
            for (int i = 0; i < 3; i++) {
                d[i] = i == lost ? NULL : sh[i];
                wr[i] = i == lost ? NULL : w[i];
            }
            uint8_t *out = NULL;
            uint64_t on = 0;
            bool xc = !ge.xor_code;
            int rc = ftc__par_rebuild(&gd, 4, 0, lost, d, sz, wr, ws, &out, &on, &xc, &e);
            if (rc)
                print_message("%s parity rebuilt as %s: %s\n", reds[k], reds[1 - k], e.msg);
            assert_int_equal(rc, 0);
            assert_true(xc == ge.xor_code); /* it says so: the recorded code */
            assert_rebuilt(out, on, sh[lost], sz[lost]);
        }
        free_members(sh, w, 3);
    }
}

/* The published form of every group of a job (ftc:{J}:pargroups:GEN): it
 * gives every node the group ftc__par_geometry does, and another redundancy,
 * node count or a text that is not a partition is refused, naming both. */
/* A plan's ranks and a peer's fabric entry, as the agent reads them: whole
 * words and whole numbers (fuzz_records found sscanf("%u:%u") taking
 * "0:-1" as local index 2^32-1, strtoul a field "1x" as node 1, and a
 * generation "3abc" as 3). */
static void test_records_text(void **state)
{
    (void)state;
    uint32_t *m = NULL, *l = NULL, n = 0;
    assert_true(ftc__plan_ranks_parse("0:0 1:0  0:1 ", 2, &m, &l, &n));
    assert_int_equal(n, 3);
    assert_true(m[0] == 0 && m[1] == 1 && m[2] == 0 && l[2] == 1);
    free(m);
    free(l);
    const char *bad_plan[] = {"0:-1", "1:2x", "0:4294967296", "2:0", "0:", ":0", "0"};
    for (size_t i = 0; i < sizeof bad_plan / sizeof bad_plan[0]; i++)
        if (ftc__plan_ranks_parse(bad_plan[i], 2, &m, &l, &n))
            fail_msg("plan ranks '%s' parsed", bad_plan[i]);
    ftc__fabric_rec_t r;
    ftc_err_t e = {0};
    assert_int_equal(ftc__fabric_parse("2", "0aff node2 - 7", &r, &e), 0);
    assert_true(r.node == 2 && r.addr_len == 2 && r.addr[1] == 0xff && !r.domain[0] &&
                r.has_gen && r.gen == 7 && !strcmp(r.node_id, "node2"));
    assert_int_equal(ftc__fabric_parse("3", "0a n3 rack-a", &r, &e), 0); /* an older agent's */
    assert_true(!r.has_gen && !strcmp(r.domain, "rack-a"));
    char longid[100];
    snprintf(longid, sizeof longid, "0a %070d - 3", 0);
    const char *bad[][2] = {{"1x", "0a n1 - 3"}, {"-1", "0a n1 - 3"}, {"1", "0a n1 - 3abc"},
                            {"1", "0a n1 - -3"},  {"1", longid},       {"1", "0g n1 - 3"},
                            {"1", "0a0 n1 - 3"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ftc__fabric_parse(bad[i][0], bad[i][1], &r, &e) != FTC_EPROTO)
            fail_msg("fabric '%s' '%.40s' parsed: node %lu '%s' gen %" PRIu64, bad[i][0],
                     bad[i][1], r.node, r.node_id, r.gen);
}

static void test_groups_text(void **state)
{
    (void)state;
    ftc_redundancy_t red, other;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &e), 0);
    const char *d6[] = {"A", "A", "B", "B", "C", "C"};
    const char *const *doms[] = {NULL, d6};
    const char *want[] = {"xor:2 6 index 0,1,2 3,4,5", "xor:2 6 domain 0,2,4 1,3,5"};
    for (int k = 0; k < 2; k++) {
        char *text;
        assert_int_equal(ftc__par_groups_str_in(&red, 6, NULL, 0, doms[k], &text, &e), 0);
        assert_string_equal(text, want[k]);
        for (uint32_t i = 0; i < 6; i++) {
            ftc__par_geo_t a, b;
            assert_int_equal(ftc__par_geometry(&red, 6, doms[k], i, &a, &e), 0);
            assert_int_equal(ftc__par_groups_parse_in(text, &red, 6, NULL, 0, i, &b, &e), 0);
            assert_true(a.n == b.n && a.m == b.m && a.d == b.d && a.member == b.member &&
                        a.first == b.first && a.xor_code == b.xor_code &&
                        a.by_domain == b.by_domain);
            assert_memory_equal(a.node, b.node, sizeof(uint32_t) * (size_t)a.n);
        }
        free(text);
    }
    char *text;
    /* leftover joins */
    assert_int_equal(ftc__par_groups_str_in(&red, 7, NULL, 0, NULL, &text, &e), 0);
    assert_string_equal(text, "xor:2 7 index 0,1,2 3,4,5,6");
    free(text);
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_groups_parse_in("xor:2 6 index 0,1,2 3,4,5", &red, 7, NULL, 0, 0, &g,
                                              &e),
                     FTC_ECONFIG);
    assert_non_null(strstr(e.msg, "xor:2 on 6 nodes"));
    assert_non_null(strstr(e.msg, "xor:2 on 7 nodes"));
    print_message("%s\n", e.msg);
    assert_int_equal(ftc_redundancy_parse("rs:2+1", &other, &e), 0);
    assert_int_equal(ftc__par_groups_parse_in("xor:2 6 index 0,1,2 3,4,5", &other, 6, NULL, 0,
                                              0, &g, &e),
                     FTC_ECONFIG);
    assert_non_null(strstr(e.msg, "rs:2+1 on 6 nodes"));
    const char *bad[] = {"xor:2 6 index 0,1,2 3,4",     "xor:2 6 index 0,1,2 2,3,4,5",
                         "xor:2 6 index 0,1,2,3,4 5",   "xor:2 6 index 0,1,2 3,4,9",
                         "xor:2 6 sideways 0,1,2 3,4,5", "xor:2 6 index 0;1;2 3,4,5", "junk"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ftc__par_groups_parse_in(bad[i], &red, 6, NULL, 0, 0, &g, &e),
                         FTC_EPROTO);
        printf("# '%s': %s\n", bad[i], e.msg);
    }
}

/* A generation's groups over its members only (a shrunk `ftc run`
 * generation): the member list takes the place of 0..nodes-1 (positions
 * for indices, domains by node index); the text names the job's node count
 * and covers the members only; parsing it with the members gives every
 * member the group the geometry does, and a text naming a non-member,
 * missing a member, or a node outside the generation is refused. */
static void test_member_groups(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &e), 0);
    static const uint32_t m4[] = {0, 2, 3, 5}, m6[] = {0, 1, 3, 4, 5, 7};
    const char *d8[] = {"A", "A", "x", "B", "B", "C", "x", "C"};
    struct {
        const uint32_t *mem;
        uint32_t nm, nodes;
        const char *const *doms;
        const char *want;
    } cases[] = {
        {m4, 4, 6, NULL, "xor:2 6 index 0,2,3,5"},      /* one group (leftover joins) */
        {m6, 6, 8, NULL, "xor:2 8 index 0,1,3 4,5,7"},  /* positions 0..2, 3..5 */
        {m6, 6, 8, d8, "xor:2 8 domain 0,3,5 1,4,7"},   /* A={0,1} B={3,4} C={5,7} striped */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *text;
        assert_int_equal(ftc__par_groups_str_in(&red, cases[c].nodes, cases[c].mem, cases[c].nm,
                                                cases[c].doms, &text, &e), 0);
        assert_string_equal(text, cases[c].want);
        for (uint32_t k = 0; k < cases[c].nm; k++) {
            uint32_t i = cases[c].mem[k];
            ftc__par_geo_t a, b;
            assert_int_equal(ftc__par_geometry_in(&red, cases[c].nodes, cases[c].mem,
                                                  cases[c].nm, cases[c].doms, i, &a, &e), 0);
            assert_int_equal(ftc__par_groups_parse_in(text, &red, cases[c].nodes, cases[c].mem,
                                                      cases[c].nm, i, &b, &e), 0);
            assert_true(a.n == b.n && a.member == b.member && a.first == b.first &&
                        a.by_domain == b.by_domain && a.node[a.member] == i);
            assert_memory_equal(a.node, b.node, sizeof(uint32_t) * (size_t)a.n);
            if (cases[c].doms)
                assert_true(a.dom_max <= a.m);
        }
        /* the same text read as all nodes' groups: members are missing */
        ftc__par_geo_t g;
        assert_int_equal(ftc__par_groups_parse_in(text, &red, cases[c].nodes, NULL, 0, 0, &g, &e),
                         FTC_EPROTO);
        assert_non_null(strstr(e.msg, "in no group"));
        free(text);
    }
    ftc__par_geo_t g;
    /* a node that is not a member: in the geometry, and in a text */
    assert_int_equal(ftc__par_geometry_in(&red, 6, m4, 4, NULL, 1, &g, &e), FTC_EINVAL);
    assert_non_null(strstr(e.msg, "node 1 is not one of the 4 node(s)"));
    assert_int_equal(ftc__par_groups_parse_in("xor:2 6 index 0,2,3,5", &red, 6, m4, 4, 1, &g, &e),
                     FTC_EINVAL);
    assert_int_equal(ftc__par_groups_parse_in("xor:2 6 index 0,1,2,3,5", &red, 6, m4, 4, 0, &g,
                                              &e), FTC_EPROTO);
    assert_non_null(strstr(e.msg, "node 1 is not one of the generation's 4 node(s)"));
    print_message("%s\n", e.msg);
    assert_int_equal(ftc__par_groups_parse_in("xor:2 6 index 0,2,3", &red, 6, m4, 4, 0, &g, &e),
                     FTC_EPROTO);
    assert_non_null(strstr(e.msg, "node 5 is in no group"));
    /* a member list that is not ascending, or names a node beyond the job */
    static const uint32_t unsorted[] = {2, 0, 3}, beyond[] = {0, 2, 6};
    assert_int_equal(ftc__par_geometry_in(&red, 6, unsorted, 3, NULL, 0, &g, &e), FTC_EINVAL);
    assert_int_equal(ftc__par_geometry_in(&red, 6, beyond, 3, NULL, 0, &g, &e), FTC_EINVAL);
    /* too few members for a group: named, with the generation's count */
    static const uint32_t one[] = {4};
    assert_int_equal(ftc__par_geometry_in(&red, 6, one, 1, NULL, 4, &g, &e), FTC_ECONFIG);
    assert_non_null(strstr(e.msg, "the generation has 1 node(s)"));
}

/* An encode task as the agent hands it to the worker: member `self` (its
 * rank in ranks[self]) encodes local index `local` of `step` from its slot
 * `sname` (namespace ns) and copies of the other members' shards. */
static ftc__par_task_t *encode_task(const char *ns, const char *sname, uint64_t step,
                                    uint32_t local, const ftc__par_geo_t *g, int self,
                                    uint8_t *const *sh, const uint64_t *sz, const uint32_t *ranks)
{
    ftc__par_task_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->rank = ranks[self];
    t->local = local;
    t->step = step;
    t->gen = 1;
    t->keep = -1;
    snprintf(t->job, sizeof t->job, "test-job");
    snprintf(t->ns, sizeof t->ns, "%s", ns);
    snprintf(t->slot_name, sizeof t->slot_name, "%s", sname);
    t->slot_size = sz[self];
    t->geo = *g;
    for (int i = 0; i < g->n; i++) {
        if (i == self)
            continue;
        t->bufs[i] = malloc(sz[i]);
        memcpy(t->bufs[i], sh[i], sz[i]);
        t->sizes[i] = sz[i];
    }
    memcpy(t->ranks, ranks, sizeof(uint32_t) * (size_t)g->n);
    return t;
}

/* Asserts that task t's three wrappers are what ftc__par_encode gives for
 * step (generation 1) and t's local index from shards sh. */
static void assert_wraps_encoded(const ftc__par_task_t *t, const ftc__par_geo_t *g,
                                 uint64_t step, uint8_t *const *sh, const uint64_t *sz,
                                 const uint32_t *ranks)
{
    ftc_err_t e = {0};
    uint8_t *ref[3];
    uint64_t rs[3];
    assert_int_equal(ftc__par_encode(g, "test-job", step, 1, t->local, (const uint8_t *const *)sh,
                                     sz, ranks, ref, rs, &e),
                     0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t->wsizes[i], rs[i]);
        assert_memory_equal(t->wraps[i], ref[i], rs[i]);
        free(ref[i]);
    }
}

/* The parity worker is a pool: 3 threads, the stripes of 4 local indices
 * (4 tasks over one encoder slot) queued at once; every task comes back
 * exactly once with the parity ftc__par_encode gives for its local index,
 * and each local index's own wrapper is in its parity slot. */
static void test_worker_pool(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("rs:2+1", &red, &e), 0);
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_geometry(&red, 3, NULL, 0, &g, &e), 0);
    char ns[64], sname[FTC_SLOT_NAME_MAX];
    snprintf(ns, sizeof ns, "aparp%d.n0", (int)getpid());
    uint8_t *sh[3];
    uint64_t sz[3];
    uint32_t ranks[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++)
        sh[i] = ftc_test_make_shard(9, (uint32_t)i, 200000 + 999 * (uint64_t)i, 5, &sz[i]);
    assert_int_equal(ftc_slot_name(ns, 0, 0, sname, sizeof sname, &e), 0);
    ftc_slot_t sl;
    assert_int_equal(ftc_slot_create(sname, sz[0], &sl, &e), 0);
    memcpy(sl.base, sh[0], sz[0]);
    int evfd = eventfd(0, EFD_CLOEXEC);
    assert_true(evfd >= 0);
    ftc__par_worker_t *w = ftc__par_worker_start(evfd, 3, &e);
    assert_non_null(w);
    assert_int_equal(ftc__par_worker_threads(w), 3);
    enum { NT = 4 };
    for (uint32_t l = 0; l < NT; l++)
        ftc__par_worker_submit(w, encode_task(ns, sname, 9, l, &g, 0, sh, sz, ranks));
    bool seen[NT] = {false};
    int got = 0;
    ftc_deadline_t d = ftc_deadline_in_ms(60000);
    while (got < NT) {
        struct pollfd pfd = {evfd, POLLIN, 0};
        if (ftc_deadline_expired(d))
            fail_msg("only %d of %d parity tasks came back within 60 s", got, NT);
        if (poll(&pfd, 1, 1000) != 1)
            continue;
        uint64_t v;
        assert_int_equal(read(evfd, &v, sizeof v), (ssize_t)sizeof v);
        for (ftc__par_task_t *t = ftc__par_worker_take(w), *next; t; t = next) {
            next = t->next;
            assert_int_equal(t->rc, 0);
            assert_true(t->local < NT && !seen[t->local]);
            seen[t->local] = true;
            got++;
            assert_wraps_encoded(t, &g, 9, sh, sz, ranks);
            ftc__par_task_free(t);
        }
    }
    ftc__par_worker_stop(w);
    close(evfd);
    for (uint32_t l = 0; l < NT; l++) { /* each local index's wrapper in its own slot */
        uint8_t *buf = NULL;
        uint64_t n = 0;
        assert_int_equal(ftc__par_read_local(ns, FTC_PAR_OWNER(l), 9, &buf, &n, &e), 0);
        free(buf);
        for (int i = 0; i < 2; i++) {
            char pn[FTC_SLOT_NAME_MAX];
            assert_int_equal(ftc_slot_name(ns, FTC_PAR_OWNER(l), i, pn, sizeof pn, &e), 0);
            ftc_slot_unlink(pn, &e);
        }
    }
    ftc_slot_close(&sl);
    ftc_slot_unlink(sname, &e);
    for (int i = 0; i < 3; i++)
        free(sh[i]);
}

/* A rebuild takes this node's own data shard of the step from its slots
 * (ftc__par_read_local): a rank has FTC_AP_SLOTS_PER_RANK (3) slots, and
 * its committed shard is in the third whenever a checkpoint went out while
 * the one before was still sealed (checkpoint.inflight 2). Only slots 0 and
 * 1 (and the previous layout's 0 and 1) were read: the piece counted as
 * missing. Each of the 3 slots and the 3 previous-layout slots is found. */
static void test_read_local_every_slot(void **state)
{
    (void)state;
    ftc_err_t e = {0};
    char ns[64];
    snprintf(ns, sizeof ns, "aparl%d.n0", (int)getpid());
    uint64_t sz;
    uint8_t *sh = ftc_test_make_shard(9, 1, 3000, 17, &sz);
    for (int k = 0; k < 2 * FTC_AP_SLOTS_PER_RANK; k++) {
        char name[FTC_SLOT_NAME_MAX];
        int idx = k % FTC_AP_SLOTS_PER_RANK;
        assert_int_equal(k < FTC_AP_SLOTS_PER_RANK
                             ? ftc_slot_name(ns, 5, idx, name, sizeof name, &e)
                             : ftc_slot_name_prev(ns, 5, idx, name, sizeof name, &e),
                         0);
        ftc_slot_t sl;
        assert_int_equal(ftc_slot_create(name, sz, &sl, &e), 0);
        memcpy(sl.base, sh, sz);
        ftc_slot_close(&sl);
        uint8_t *buf = NULL;
        uint64_t n = 0;
        int rc = ftc__par_read_local(ns, 5, 9, &buf, &n, &e);
        print_message("%s: %s\n", name, rc ? e.msg : "found");
        ftc_slot_unlink(name, &e);
        assert_int_equal(rc, 0);
        assert_int_equal(n, sz);
        assert_memory_equal(buf, sh, sz);
        free(buf);
    }
    free(sh);
}

/* A wrapper of another size (a layout change: new shard sizes) is stored in
 * a new slot file: the old one was ftruncated smaller in place, and a thread
 * that had it mapped (ftc__par_read_local peeking it, a rebuild copying it)
 * died of SIGBUS touching its old end. The mapping keeps the old bytes. */
static void test_store_other_size_keeps_mappings(void **state)
{
    (void)state;
    ftc_err_t e = {0};
    char ns[64], pn[2][FTC_SLOT_NAME_MAX];
    snprintf(ns, sizeof ns, "aparz%d.n0", (int)getpid());
    uint64_t big, small;
    uint8_t *w1 = ftc_test_make_shard(1, 0, 20000, 1, &big);
    uint8_t *w2 = ftc_test_make_shard(2, 0, 20000, 2, &big);
    uint8_t *w3 = ftc_test_make_shard(3, 0, 100, 3, &small);
    assert_true(small < big / 4);
    assert_int_equal(ftc__par_store_local(ns, 0, w1, big, -1, &e), 0);
    assert_int_equal(ftc__par_store_local(ns, 0, w2, big, -1, &e), 0);
    /* a reader maps the slot holding step 1: the one step 3 goes to */
    ftc_slot_t rd = {0};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ftc_slot_name(ns, FTC_PAR_OWNER(0), i, pn[i], sizeof pn[i], &e), 0);
        ftc_slot_t s;
        assert_int_equal(ftc_slot_open(pn[i], false, &s, &e), 0);
        if (!memcmp(s.base, w1, big))
            rd = s;
        else
            ftc_slot_close(&s);
    }
    assert_non_null(rd.base);
    assert_int_equal(ftc__par_store_local(ns, 0, w3, small, -1, &e), 0);
    /* without the fix: SIGBUS here (the pages past the new size are gone) */
    assert_memory_equal(rd.base, w1, big);
    ftc_slot_close(&rd);
    uint8_t *buf = NULL;
    uint64_t n = 0;
    assert_int_equal(ftc__par_read_local(ns, FTC_PAR_OWNER(0), 3, &buf, &n, &e), 0);
    assert_int_equal(n, small);
    assert_memory_equal(buf, w3, small);
    free(buf);
    for (int i = 0; i < 2; i++)
        ftc_slot_unlink(pn[i], &e);
    free(w1);
    free(w2);
    free(w3);
}

/* The parity worker encodes what ftc__par_encode does, from the encoder's
 * slot mapped by name; a slot that does not verify (or holds another step)
 * gives an error and no parity (I1). Its own wrapper lands in its slot, and
 * a later store never overwrites the wrapper of the committed step (I3). */
static void test_worker(void **state)
{
    (void)state;
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &e), 0);
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_geometry(&red, 3, NULL, 1, &g, &e), 0);
    char ns[64], sname[FTC_SLOT_NAME_MAX];
    snprintf(ns, sizeof ns, "aparw%d.n1", (int)getpid());
    uint8_t *sh[3];
    uint64_t sz[3];
    uint32_t ranks[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++)
        sh[i] = ftc_test_make_shard(7, (uint32_t)i, 3000 + 500 * (uint64_t)i, 40 + (uint64_t)i,
                                    &sz[i]);
    assert_int_equal(ftc_slot_name(ns, 1, 0, sname, sizeof sname, &e), 0);
    ftc_slot_t sl;
    assert_int_equal(ftc_slot_create(sname, sz[1], &sl, &e), 0);
    memcpy(sl.base, sh[1], sz[1]);
    int evfd = eventfd(0, EFD_CLOEXEC);
    assert_true(evfd >= 0);
    ftc__par_worker_t *w = ftc__par_worker_start(evfd, 1, &e);
    assert_non_null(w);
    for (int round = 0; round < 2; round++) { /* 0: good slot; 1: corrupted */
        if (round == 1)
            sl.base[sz[1] / 2] ^= 1;
        ftc__par_task_t *t = encode_task(ns, sname, 7, 0, &g, 1, sh, sz, ranks);
        ftc__par_worker_submit(w, t);
        struct pollfd pfd = {evfd, POLLIN, 0};
        assert_int_equal(poll(&pfd, 1, 30000), 1); /* a deadline, not a timing assertion */
        uint64_t v;
        assert_int_equal(read(evfd, &v, sizeof v), (ssize_t)sizeof v);
        t = ftc__par_worker_take(w);
        assert_non_null(t);
        assert_null(t->next);
        if (round == 0) {
            assert_int_equal(t->rc, 0);
            assert_wraps_encoded(t, &g, 7, sh, sz, ranks); /* local index 0 */
            printf("# parity worker: xor:2 of %llu-byte shards in %.2f ms\n",
                   (unsigned long long)sz[2], t->ms);
        } else {
            assert_int_equal(t->rc, FTC_ECORRUPT);
            for (int i = 0; i < 3; i++)
                assert_null(t->wraps[i]);
            print_message("corrupted slot: %s\n", t->detail);
        }
        ftc__par_task_free(t);
    }
    ftc__par_worker_stop(w);
    close(evfd);
    ftc_slot_close(&sl);
    ftc_slot_unlink(sname, &e);
    /* the double buffer: steps 1, 2 (never committed) then 3 with 1 the
     * committed one: 3 replaces 2, not 1 */
    char pn[2][FTC_SLOT_NAME_MAX];
    for (int st = 1; st <= 3; st++) {
        uint64_t n;
        uint8_t *wr = ftc_test_make_shard((uint64_t)st, 0, 100, (uint64_t)st, &n);
        assert_int_equal(ftc__par_store_local(ns, 0, wr, n, 1, &e), 0);
        free(wr);
    }
    uint64_t held[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ftc_slot_name(ns, FTC_PAR_OWNER(0), i, pn[i], sizeof pn[i], &e), 0);
        ftc_slot_t ps;
        assert_int_equal(ftc_slot_open(pn[i], false, &ps, &e), 0);
        ftc_shard_view_t v;
        assert_int_equal(ftc_shard_open(&v, ps.base, ps.size, FTC_SHARD_VERIFY, &e), 0);
        held[i] = v.info.step;
        ftc_slot_close(&ps);
        ftc_slot_unlink(pn[i], &e);
    }
    assert_true((held[0] == 1 && held[1] == 3) || (held[0] == 3 && held[1] == 1));
    for (int i = 0; i < 3; i++)
        free(sh[i]);
}

/* Checks the groups of every node of one domain assignment (doms NULL: none). */
static void check_groups(const ftc_redundancy_t *red, uint32_t n, const char *const *doms,
                         int *violations, int *striped)
{
    ftc__par_geo_t g[12], idx[12];
    ftc_err_t e = {0};
    int m = red->kind == FTC_RED_XOR ? 1 : red->m, N = red->g + m;
    uint32_t groups = n / (uint32_t)N ? n / (uint32_t)N : 1;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(ftc__par_geometry(red, n, doms, i, &g[i], &e), 0);
        assert_int_equal(ftc__par_geometry(red, n, NULL, i, &idx[i], &e), 0);
    }
    /* a partition every member agrees on: node i's group, seen from each of
     * its members, is the same list, and i is in it at its member index */
    uint32_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(g[i].node[g[i].member] == i);
        assert_true(g[i].n >= (n < (uint32_t)N ? (int)n : N) && g[i].n > m);
        assert_int_equal(g[i].d, g[i].n - m);
        for (int k = 0; k < g[i].n; k++) {
            const ftc__par_geo_t *o = &g[g[i].node[k]];
            assert_int_equal(o->n, g[i].n);
            assert_memory_equal(o->node, g[i].node, sizeof(uint32_t) * (size_t)o->n);
            assert_int_equal(o->member, k);
            if (k)
                assert_true(g[i].node[k] > g[i].node[k - 1]);
        }
        seen += g[i].member == 0; /* one per group */
    }
    assert_int_equal(seen, groups);
    /* possible = every domain fits M per group over the groups */
    bool possible = true, index_ok = true;
    for (uint32_t i = 0; doms && i < n; i++) {
        uint32_t c = 0;
        for (uint32_t k = 0; k < n && doms[i][0]; k++)
            c += !strcmp(doms[i], doms[k]);
        possible = possible && c <= (uint32_t)m * groups;
    }
    for (uint32_t i = 0; doms && i < n; i++) { /* index order's own count */
        for (int k = 0; k < idx[i].n; k++) {
            int c = 0;
            const char *dk = doms[idx[i].node[k]];
            for (int q = 0; q < idx[i].n && dk[0]; q++)
                c += !strcmp(dk, doms[idx[i].node[q]]);
            index_ok = index_ok && c <= m;
        }
    }
    bool over = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!doms || index_ok) { /* no domains, or index order respects them: unchanged */
            assert_false(g[i].by_domain);
            assert_int_equal(g[i].n, idx[i].n);
            assert_memory_equal(g[i].node, idx[i].node, sizeof(uint32_t) * (size_t)g[i].n);
        }
        over = over || g[i].dom_max > m;
        if (g[i].dom_max > m) { /* it names a member of the crowded domain */
            int c = 0;
            for (int q = 0; q < g[i].n; q++)
                c += !strcmp(doms[g[i].dom_node], doms[g[i].node[q]]);
            assert_int_equal(c, g[i].dom_max);
        }
    }
    if (doms)
        assert_true(over == !possible);
    *violations += over;
    *striped += g[0].by_domain;
}

static void test_domain_groups(void **state)
{
    (void)state;
    const char *reds[] = {"xor:2", "rs:2+2", "rs:1+1", "rs:3+1"};
    static const char *labels[] = {"rackA", "rackB", "rackC", "rackD", "rackE",
                                   "rackF", "rackG", "rackH", "rackI", "rackJ"};
    long cases = 0;
    int violations = 0, striped = 0;
    for (size_t ri = 0; ri < sizeof reds / sizeof reds[0]; ri++) {
        ftc_redundancy_t red;
        ftc_err_t e = {0};
        assert_int_equal(ftc_redundancy_parse(reds[ri], &red, &e), 0);
        int m = red.kind == FTC_RED_XOR ? 1 : red.m;
        for (uint32_t n = (uint32_t)m + 1; n <= 8; n++) {
            /* every assignment of n nodes to domains up to renaming
             * (restricted growth strings), and each with domain 0 unset */
            int a[12] = {0}, mx[12] = {0};
            for (;;) {
                const char *d[12];
                for (int unset = 0; unset < 2; unset++) {
                    for (uint32_t i = 0; i < n; i++)
                        d[i] = unset && a[i] == 0 ? "" : labels[a[i]];
                    check_groups(&red, n, d, &violations, &striped);
                    cases++;
                }
                int i = (int)n - 1;
                while (i > 0 && a[i] == mx[i - 1] + 1)
                    i--;
                if (i == 0)
                    break;
                a[i]++;
                mx[i] = a[i] > mx[i - 1] ? a[i] : mx[i - 1];
                for (uint32_t k = (uint32_t)i + 1; k < n; k++) {
                    a[k] = 0;
                    mx[k] = mx[k - 1];
                }
            }
            check_groups(&red, n, NULL, &violations, &striped);
        }
    }
    printf("# %ld domain assignments: %d striped over domains, %d with too few domains "
           "(warned)\n", cases, striped, violations);
    assert_true(striped > 0 && violations > 0);
    /* the end-to-end case below: index order would group nodes 0,1 (both
     * rackA); the stripes are {0,2,4} and {1,3,5} */
    ftc_redundancy_t red;
    ftc_err_t e = {0};
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &e), 0);
    const char *d6[] = {"A", "A", "B", "B", "C", "C"};
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_geometry(&red, 6, NULL, 0, &g, &e), 0);
    assert_true(g.node[0] == 0 && g.node[1] == 1 && g.node[2] == 2);
    assert_int_equal(ftc__par_geometry(&red, 6, d6, 1, &g, &e), 0);
    assert_true(g.by_domain && g.n == 3 && g.node[0] == 1 && g.node[1] == 3 && g.node[2] == 5);
    assert_int_equal(g.member, 0);
    assert_int_equal(g.dom_max, 1);
    char gs[64];
    assert_string_equal(ftc__par_geo_str(&g, gs, sizeof gs), "nodes 1,3,5");
    /* two domains for groups of three: one of them must hold two of a group */
    const char *d2[] = {"A", "A", "A", "B", "B", "B"};
    assert_int_equal(ftc__par_geometry(&red, 6, d2, 0, &g, &e), 0);
    assert_int_equal(g.dom_max, 2);
}

/* ---- end to end ---------------------------------------------------------------- */

/* Prints the encode times the agents logged (the parity worker's). */
static void print_encode_times(env_t *e)
{
    for (int i = 0; i < e->nodes; i++) {
        char log[PATH_MAX + 32];
        snprintf(log, sizeof log, "%s/agent%d.log", e->jobdir, i);
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "encoded in ");
            if (p)
                printf("# agent %d: %s", i, line);
        }
        if (f)
            fclose(f);
    }
    fflush(stdout); /* before the next fork: a child would print the buffer again */
}

static void lose_node(env_t *e, int i)
{
    kill_agent(e, i);
    wipe_node_shm(e, i);
}

static void test_xor_one_node_lost(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    run_all(e, "3");
    lose_node(e, 1);
    start_agent(e, 1);
    restore_rank(e, 1, "RESTORED 2 OK");
    assert_true(agent_said(e, 1, "rebuilt from parity"));
    print_encode_times(e);
    /* the job goes on: the restarted node's rank and the others checkpoint
     * and commit again (the group re-encodes with the rebuilt node) */
    pid_t p[3];
    char out[3][PATH_MAX + 32];
    for (int r = 0; r < 3; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.more.out", e->jobdir, r);
        p[r] = start_rank(e, r, 3, out[r], "--restore", "--steps", "5", NULL);
    }
    for (int r = 0; r < 3; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], "RESTORED 2 OK"));
        assert_true(said(out[r], "COMMITTED 4"));
    }
    teardown_env(e);
}

typedef struct bg_restore {
    ftc_ctx_t *c;
    int rc;
    int64_t step;
    atomic_int done;
} bg_restore_t;

static void *bg_restore(void *arg)
{
    bg_restore_t *b = arg;
    b->rc = ftc_restore(b->c, &b->step, NULL, NULL);
    atomic_store(&b->done, 1);
    return NULL;
}

/* Rank 1 of 3 on node 1's agent with rank_main's tensors (--floats 65536:
 * "w", "optim.m", the scalar "step" = step x 1000 + rank), timeout_ms. */
static float bg_w[65536], bg_m[65536];
static int64_t bg_sc;
static ftc_ctx_t *rank1_ctx(env_t *e, int timeout_ms)
{
    ftc_ctx_t *c = create_ctx(e, 1, 1, 3, timeout_ms);
    register_w(c, bg_w, 65536);
    int64_t shape[1] = {65536};
    assert_int_equal(ftc_register(c, "optim.m", FTC_DTYPE_F32, 1, shape, bg_m, FTC_HOST), 0);
    assert_int_equal(ftc_register(c, "step", FTC_DTYPE_I64, 0, NULL, &bg_sc, FTC_HOST), 0);
    return c;
}

/* A parity rebuild's result answers the request that queued it, never a
 * later one. xor:2 on 3 nodes, step 2 committed, node 1 lost and started
 * again empty (its agent logging at debug); rank 1 restores (request 1,
 * rebuilt from parity: node 1 now talks to nodes 0 and 2). Its slots are
 * corrupted, so that each later restore rebuilds again, and node 2's agent
 * is stopped (SIGSTOP; its heartbeat kept alive), so that a rebuild's fetch
 * from it waits. Rank 1 restores with a 1.5 s timeout (request 2), gives
 * up, reconnects and restores again (request 3), whose fetch from node 2
 * is refused while request 2's is in flight and retried 0.5 s later; node
 * 2 resumes. Request 2's rebuild ends first, and was matched by rank and
 * step only: it answered request 3, whose own rebuild was then dropped.
 * Now it is dropped (the debug line names request 2) and request 3 is
 * answered by its own rebuild (its "rebuilt from parity" line names it),
 * step 2 restored either way. */
static void test_rebuild_result_to_its_request(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    run_all(e, "3");
    lose_node(e, 1);
    setenv("FTC_LOG_LEVEL", "debug", 1); /* inherited by node 1's new agent only */
    start_agent(e, 1);
    unsetenv("FTC_LOG_LEVEL");
    ftc_ctx_t *c = rank1_ctx(e, 20000);
    int64_t step = -1;
    if (ftc_restore(c, &step, NULL, NULL))
        fail_msg("restore, request 1: %s", ftc_last_error(c));
    assert_int_equal(step, 2);
    ftc_destroy(c);
    assert_true(agent_said(e, 1, "parity worker; request 1)"));
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n1.r1.", e->job);
    assert_true(corrupt_shm(prefix) > 0);
    /* node 2 looks alive to node 1 while it is stopped */
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    uint64_t gen = job_generation(ctl);
    ftc_ctl_heartbeat_t hb = {.generation = gen, .step = -1, .wall_ms = ftc_wall_ms()};
    assert_int_equal(kill(e->agent[2], SIGSTOP), 0);
    assert_int_equal(ftc_ctl_heartbeat(ctl, "node2", &hb, 120000), 0);
    ftc_ctl_destroy(ctl);
    c = rank1_ctx(e, 1500);
    int rc = ftc_restore(c, &step, NULL, NULL);
    print_message("restore, request 2: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_ETIMEDOUT);
    ftc_destroy(c);
    bg_restore_t b = {.c = rank1_ctx(e, 20000), .rc = 1, .step = -1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, bg_restore, &b), 0);
    ftc_sleep_ms(300); /* request 3 queued first (not an assertion: the log says below) */
    assert_int_equal(kill(e->agent[2], SIGCONT), 0);
    pthread_join(tid, NULL);
    print_message("restore, request 3: %s, step %lld %s\n", ftc_errname(b.rc),
                  (long long)b.step, b.rc ? ftc_last_error(b.c) : "");
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.step, 2);
    assert_int_equal(bg_sc, 2 * 1000 + 1);
    ftc_destroy(b.c);
    assert_true(agent_said(e, 1, "parity worker; request 3)"));
    assert_true(agent_said(e, 1, "for request 2 done, but that request is over: dropped"));
    teardown_env(e);
}

static void test_rs_two_nodes_lost(void **state)
{
    env_t *e = setup_env(*state, 4, "rs:2+2", 1000);
    run_all(e, "3");
    lose_node(e, 0); /* node 0 is the encoder of the stripe */
    lose_node(e, 2);
    start_agent(e, 0);
    start_agent(e, 2);
    restore_rank(e, 0, "RESTORED 2 OK");
    restore_rank(e, 2, "RESTORED 2 OK");
    assert_true(agent_said(e, 0, "rebuilt from parity"));
    assert_true(agent_said(e, 2, "rebuilt from parity"));
    teardown_env(e);
}

/* Flips a byte of every parity block the surviving nodes hold. */
static void corrupt_parity(env_t *e, int lost)
{
    int n = 0;
    for (int i = 0; i < e->nodes; i++) {
        if (i == lost)
            continue;
        char prefix[128];
        snprintf(prefix, sizeof prefix, "ftc.%s.n%d.p%u.", e->job, i, FTC_PAR_OWNER(0));
        n += corrupt_shm(prefix);
        snprintf(prefix, sizeof prefix, "ftc.%s.n%d.r%u.", e->job, i, FTC_PAR_OWNER(0));
        n += corrupt_shm(prefix);
    }
    assert_true(n >= e->nodes - 1);
}

static void test_corrupt_parity_falls_back(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1);
    run_all(e, "3");
    wait_persisted(e, 0, 2);
    lose_node(e, 0);
    corrupt_parity(e, 0);
    start_agent(e, 0);
    restore_rank(e, 0, "RESTORED 2 OK");
    assert_true(agent_said(e, 0, "parity rebuild:"));
    assert_true(agent_said(e, 0, "from the persist tier"));
    teardown_env(e);
}

static void test_corrupt_parity_no_persist(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    run_all(e, "3");
    lose_node(e, 2);
    corrupt_parity(e, 2);
    start_agent(e, 2);
    restore_rank(e, 2, "RESTORE NONE:");
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank2.restore.out", e->jobdir);
    assert_true(said(out, "parity rebuild:"));
    assert_true(said(out, "persist tier:"));
    teardown_env(e);
}

/* Every shm object of node `node` holding a parity wrapper that is byte for
 * byte one of orig[0..n) is rewritten with forged[that member]. Returns how
 * many. */
static int replace_wrappers(env_t *e, int node, uint8_t *const *orig, uint8_t *const *forged,
                            const uint64_t *sizes, int n)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ftc.%s.n%d.", e->job, node);
    char owner[32];
    snprintf(owner, sizeof owner, "%u.s", FTC_PAR_OWNER(0));
    int hits = 0;
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) || !strstr(de->d_name, owner))
            continue;
        ftc_slot_t sl;
        ftc_err_t err = {0};
        if (ftc_slot_open(de->d_name, true, &sl, &err))
            continue;
        for (int i = 0; i < n; i++)
            if (sl.size >= sizes[i] && !memcmp(sl.base, orig[i], sizes[i])) {
                memcpy(sl.base, forged[i], sizes[i]);
                hits++;
                break;
            }
        ftc_slot_close(&sl);
    }
    closedir(d);
    return hits;
}

/* Rank i's shard of step from node i's own slots (rank i on node i), for
 * each of the n nodes: malloc'd copies in sh[i], their sizes in sz[i]. */
static void copy_own_slots(env_t *e, uint64_t step, uint8_t **sh, uint64_t *sz, int n)
{
    for (int i = 0; i < n; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "ftc.%s.n%d.r%d.s", e->job, i, i);
        sh[i] = copy_shm_shard(prefix, step, &sz[i]);
        assert_non_null(sh[i]);
    }
}

/* A rebuild that verifies against its parity but is another version of the
 * committed step than the commit record's (the group's parity encoded
 * another version of rank 1's step 2: what parity left from an earlier
 * generation, before a rollback re-ran the step, would give): node 1 lost,
 * the survivors' parity wrappers re-encoded from a forged rank 1 shard
 * (content self-consistent, its head checksum not the recorded one). The
 * rebuild is refused and, with no persist tier version, the restore fails
 * naming it: never the forged shard (I1). */
static void test_rebuild_checks_record(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    run_all(e, "3");
    uint8_t *sh[3], *fsh;
    uint64_t sz[3];
    copy_own_slots(e, 2, sh, sz, 3);
    fsh = malloc(sz[1]);
    assert_non_null(fsh);
    memcpy(fsh, sh[1], sz[1]);
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_open(&v, fsh, sz[1], 0, &err), 0);
    forge_tensor0(fsh, sz[1], &v, 99.0f);
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    uint64_t gen = job_generation(c);
    ftc_ctl_destroy(c);
    ftc_redundancy_t red;
    assert_int_equal(ftc_redundancy_parse("xor:2", &red, &err), 0);
    ftc__par_geo_t g;
    assert_int_equal(ftc__par_geometry(&red, 3, NULL, 0, &g, &err), 0);
    uint32_t ranks[3] = {0, 1, 2};
    uint8_t *ow[3], *fw[3];
    uint64_t ows[3], fws[3];
    assert_int_equal(ftc__par_encode(&g, e->job, 2, gen, 0, (const uint8_t *const *)sh, sz, ranks,
                                     ow, ows, &err), 0);
    const uint8_t *fsh3[3] = {sh[0], fsh, sh[2]};
    assert_int_equal(ftc__par_encode(&g, e->job, 2, gen, 0, fsh3, sz, ranks, fw, fws, &err), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ows[i], fws[i]);
    lose_node(e, 1);
    int n0 = replace_wrappers(e, 0, ow, fw, ows, 3), n2 = replace_wrappers(e, 2, ow, fw, ows, 3);
    print_message("forged parity wrappers: %d on node 0, %d on node 2\n", n0, n2);
    assert_true(n0 >= 1 && n2 >= 1);
    start_agent(e, 1);
    restore_rank(e, 1, "RESTORE NONE:");
    assert_true(agent_said(e, 1, "the parity rebuild: rank 1's shard of step 2 has head checksum"));
    for (int i = 0; i < 3; i++) {
        free(sh[i]);
        free(ow[i]);
        free(fw[i]);
    }
    free(fsh);
    teardown_env(e);
}

/* The rebuild's log names the code the group's parity.meta recorded, which
 * decoded it, not this agent's: agents configured rs:2+1 on 3 nodes, the
 * survivors' parity of step 2 re-encoded under xor:2 (the same geometry:
 * what a job restarted with the other redundancy finds); node 1 lost. Its
 * rank restores bit-exact (the rebuild decodes with xor) and the agent says
 * "xor:2", where it used to say "rs" (its own configuration). */
static void test_rebuild_names_recorded_code(void **state)
{
    env_t *e = setup_env(*state, 3, "rs:2+1", 1000);
    run_all(e, "3");
    uint8_t *sh[3];
    uint64_t sz[3];
    copy_own_slots(e, 2, sh, sz, 3);
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    uint64_t gen = job_generation(c);
    ftc_ctl_destroy(c);
    ftc_err_t err = {0};
    ftc_redundancy_t rs, xr;
    ftc__par_geo_t grs, gxr;
    assert_int_equal(ftc_redundancy_parse("rs:2+1", &rs, &err), 0);
    assert_int_equal(ftc_redundancy_parse("xor:2", &xr, &err), 0);
    assert_int_equal(ftc__par_geometry(&rs, 3, NULL, 0, &grs, &err), 0);
    assert_int_equal(ftc__par_geometry(&xr, 3, NULL, 0, &gxr, &err), 0);
    uint32_t ranks[3] = {0, 1, 2};
    uint8_t *ow[3], *xw[3];
    uint64_t ows[3], xws[3];
    const uint8_t *const *shc = (const uint8_t *const *)sh;
    assert_int_equal(ftc__par_encode(&grs, e->job, 2, gen, 0, shc, sz, ranks, ow, ows, &err), 0);
    assert_int_equal(ftc__par_encode(&gxr, e->job, 2, gen, 0, shc, sz, ranks, xw, xws, &err), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ows[i], xws[i]);
    lose_node(e, 1);
    int n0 = replace_wrappers(e, 0, ow, xw, ows, 3), n2 = replace_wrappers(e, 2, ow, xw, ows, 3);
    print_message("rs:2+1 parity wrappers re-encoded as xor:2: %d on node 0, %d on node 2\n", n0,
                  n2);
    assert_true(n0 >= 1 && n2 >= 1);
    start_agent(e, 1);
    restore_rank(e, 1, "RESTORED 2 OK");
    char log[PATH_MAX + 32], line[1024];
    snprintf(log, sizeof log, "%s/agent1.log", e->jobdir);
    FILE *f = fopen(log, "r");
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "rebuilt from parity"))
            printf("# agent 1: %s", line);
    if (f)
        fclose(f);
    fflush(stdout);
    assert_true(agent_said(e, 1, "rebuilt from parity (xor:2, group of nodes 0..2)"));
    assert_false(agent_said(e, 1, "rebuilt from parity (rs"));
    for (int i = 0; i < 3; i++) {
        free(sh[i]);
        free(ow[i]);
        free(xw[i]);
    }
    teardown_env(e);
}

/* Both nodes of one failure domain lost at once: with groups striped over the
 * domains each group loses one member (xor tolerates one), so every rank
 * restores; index-order groups ({0,1,2}, {3,4,5}) would lose two of one
 * group and its shards. */
static void test_domain_lost(void **state)
{
    const char *doms[] = {"rackA", "rackA", "rackB", "rackB", "rackC", "rackC"};
    env_t *e = setup_env_domains(*state, 6, "xor:2", 1000, doms);
    run_all(e, "3");
    assert_true(agent_said(e, 0, "parity group of nodes 0,2,4 (striped over failure domains"));
    assert_true(agent_said(e, 5, "parity group of nodes 1,3,5 (striped over failure domains"));
    lose_node(e, 0);
    lose_node(e, 1);
    start_agent(e, 0);
    start_agent(e, 1);
    for (int r = 0; r < 6; r++)
        restore_rank(e, r, "RESTORED 2 OK");
    assert_true(agent_said(e, 0, "rebuilt from parity"));
    assert_true(agent_said(e, 1, "rebuilt from parity"));
    print_encode_times(e);
    teardown_env(e);
}

/* HSET/SET in the job's Redis (NULL-terminated arguments after the key suffix). */
static void seed(env_t *e, const char *cmd, const char *suffix, const char *a1, const char *a2,
                 const char *a3, const char *a4, const char *a5, const char *a6)
{
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    char key[200];
    ftc_ctl_key(c, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), false, &rep, cmd, key, a1, a2, a3, a4, a5,
                                    a6, NULL), 0);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
}

/* A layout with an idle slot (as `ftc run --tp/--pp` publishes when the world
 * is smaller than nodes x ranks_per_node): xor:2 on 3 nodes, one rank per
 * node, world 2, node 0 idle — the stripe's l % n encoder. Node 1 encodes
 * instead (node 0's shard is the virtual zero shard, node 0 still holds
 * parity), checkpoints commit, and after node 2 (rank 1) is lost its shard
 * is rebuilt from node 1's shard, the zero shard and the parity of nodes 0
 * and 1, and verified. */
static void test_idle_slot(void **state)
{
    env_t *e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    seed(e, "HSET", "gen", "gen", "1", "world", "2", "epoch", "0");
    seed(e, "HSET", "plan:1", "members", "node0 node1 node2", "ranks", "1:0 2:0", "world", "2");
    for (int i = 0; i < 3; i++)
        start_agent(e, i);
    pid_t p[2];
    char out[2][PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank_on(e, r, r + 1, 2, out[r], "--steps", "3", "--floats", "65536");
    }
    for (int r = 0; r < 2; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], "COMMITTED 2"));
    }
    assert_true(agent_said(e, 1, "parity of 3 shards encoded"));
    print_encode_times(e);
    lose_node(e, 2);
    start_agent(e, 2);
    char rout[PATH_MAX + 32];
    snprintf(rout, sizeof rout, "%s/rank1.restore.out", e->jobdir);
    pid_t q = start_rank_on(e, 1, 2, 2, rout, "--restore", "--steps", "0", NULL);
    wait_rank(q, 60000);
    assert_true(said(rout, "RESTORED 2 OK"));
    assert_true(agent_said(e, 2, "rebuilt from parity"));
    teardown_env(e);
}

/* True while node's heartbeat key exists in the job's Redis. */
static bool heartbeat_alive(env_t *e, const char *node)
{
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    char key[200], suffix[64];
    snprintf(suffix, sizeof suffix, "hb:%s", node);
    ftc_ctl_key(c, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "EXISTS", key, NULL), 0);
    long long n = 0;
    assert_int_equal(ftc_redis_want_int(rep, "EXISTS", &n, NULL), 0);
    bool alive = n == 1;
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
    return alive;
}

/* A shrink: ranks restored on other nodes than the committed layout's, from
 * parity groups this node is not a member of. xor:2 on 6 nodes (groups
 * {0,1,2} and {3,4,5}), generation 1 of world 4 with nodes 2 and 5 idle
 * (rank 0 on node 0, 1 on 1, 2 on 3, 3 on 4). Checkpoints commit, then
 * nodes 1 and 4 are lost (one per group) and generation 2 runs without them:
 * rank 1 on node 5 and rank 3 on node 2. Node 5 rebuilds rank 1's shard
 * from group {0,1,2} (node 0's data shard and the parity of nodes 0 and 2),
 * node 2 rank 3's from group {3,4,5}; the persist tier has nothing (every
 * 1000 steps), and every rank restores bit-exact. */
/* The output of rank r's restore in generation gen (next_gen). */
static void restore_out(env_t *e, int r, int gen, char *out, size_t cap)
{
    if (gen == 2)
        snprintf(out, cap, "%s/rank%d.restore.out", e->jobdir, r);
    else
        snprintf(out, cap, "%s/rank%d.restore%d.out", e->jobdir, r, gen);
}

/* True when the restore of every rank 0..world-1 in generation gen said what. */
static bool restores_said(env_t *e, int world, int gen, const char *what)
{
    bool all = true;
    for (int r = 0; r < world; r++) {
        char out[PATH_MAX + 48];
        restore_out(e, r, gen, out, sizeof out);
        all = all && said(out, what);
    }
    return all;
}

/* Generation gen of world `world` after generation gen-1 (as `ftc run` does
 * it): loses nodes lost[0..nlost) (agents killed, memory wiped), kills every
 * other agent (their memory kept), waits until the lost nodes' heartbeats
 * expired, publishes gen and plan:gen (members / ranks), restarts the agents
 * of every node not in gone[] (the lost ones are added) and starts every
 * rank with `--restore --steps steps` on node on[r]; the outputs are
 * jobdir/rank<r>.restore<gen>.out (gen 2: rank<r>.restore.out). */
static void next_gen(env_t *e, int gen, int world, bool *gone, const int *lost, int nlost,
                     const char *members, const char *ranks, const int *on, const char *steps)
{
    char w[16], g[16], key[32];
    snprintf(w, sizeof w, "%d", world);
    snprintf(g, sizeof g, "%d", gen);
    snprintf(key, sizeof key, "plan:%d", gen);
    for (int i = 0; i < nlost; i++)
        lose_node(e, lost[i]);
    for (int i = 0; i < nlost; i++)
        gone[lost[i]] = true;
    for (int i = 0; i < e->nodes; i++)
        kill_agent(e, i);
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    for (int i = 0; i < nlost; i++) {
        char nid[16];
        snprintf(nid, sizeof nid, "node%d", lost[i]);
        while (heartbeat_alive(e, nid)) {
            if (ftc_deadline_expired(d))
                fail_msg("the heartbeat of lost %s did not expire within 30 s", nid);
            ftc_sleep_ms(100);
        }
    }
    seed(e, "HSET", "gen", "gen", g, "world", w, "epoch", "0");
    seed(e, "HSET", key, "members", members, "ranks", ranks, "world", w);
    for (int i = 0; i < e->nodes; i++)
        if (!gone[i])
            start_agent(e, i);
    pid_t p[MAXN];
    for (int r = 0; r < world; r++) {
        char out[PATH_MAX + 48];
        restore_out(e, r, gen, out, sizeof out);
        p[r] = start_rank_on(e, r, on[r], world, out, "--restore", "--steps", steps, NULL);
    }
    for (int r = 0; r < world; r++)
        wait_rank(p[r], 60000);
}

/* Runs generation 1 (plan:1 = members1 / ranks1, rank r on node on1[r]) to
 * a commit of step 2, then generation 2 of world2 ranks without the lost
 * nodes (next_gen, the ranks restoring and running to step steps2 - 1). */
static void shrink(env_t *e, int world, const char *members1, const char *ranks1,
                   const int *on1, const int *lost, int nlost, int world2, const char *members2,
                   const char *ranks2, const int *on2, const char *steps2, bool *gone)
{
    char w[16];
    snprintf(w, sizeof w, "%d", world);
    seed(e, "HSET", "gen", "gen", "1", "world", w, "epoch", "0");
    seed(e, "HSET", "plan:1", "members", members1, "ranks", ranks1, "world", w);
    for (int i = 0; i < e->nodes; i++)
        start_agent(e, i);
    pid_t p[MAXN];
    char out[MAXN][PATH_MAX + 32];
    for (int r = 0; r < world; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank_on(e, r, on1[r], world, out[r], "--steps", "3", "--floats", "65536");
    }
    for (int r = 0; r < world; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], "COMMITTED 2"));
    }
    next_gen(e, 2, world2, gone, lost, nlost, members2, ranks2, on2, steps2);
}

/* A shrink: ranks restored on other nodes than the committed layout's, from
 * parity groups this node is not a member of. xor:2 on 6 nodes (groups
 * {0,1,2} and {3,4,5}), generation 1 of world 4 with nodes 2 and 5 idle
 * (rank 0 on node 0, 1 on 1, 2 on 3, 3 on 4). Checkpoints commit, then
 * nodes 1 and 4 are lost (one per group) and generation 2 runs without them:
 * rank 1 on node 5 and rank 3 on node 2. Node 5 rebuilds rank 1's shard
 * from group {0,1,2} (node 0's data shard and the parity of nodes 0 and 2),
 * node 2 rank 3's from group {3,4,5}; the persist tier has nothing (every
 * 1000 steps), and every rank restores bit-exact. */
static void test_moved_rank(void **state)
{
    env_t *e = prepare_env(*state, 6, "xor:2", 1000, NULL);
    static const int on1[4] = {0, 1, 3, 4}, on2[4] = {0, 5, 3, 2}, lost[2] = {1, 4};
    bool gone[MAXN] = {false};
    shrink(e, 4, "node0 node1 node2 node3 node4 node5", "0:0 1:0 3:0 4:0", on1, lost, 2, 4,
           "node0 node2 node3 node5", "0:0 3:0 2:0 1:0", on2, "0", gone);
    assert_true(restores_said(e, 4, 2, "RESTORED 2 OK"));
    assert_true(agent_said(e, 5, "rebuilding rank 1's step 2 from parity of the group of "
                                 "nodes 0..2"));
    assert_true(agent_said(e, 5, "rank 1 restored step 2 rebuilt from parity"));
    assert_true(agent_said(e, 2, "rebuilding rank 3's step 2 from parity of the group of "
                                 "nodes 3..5"));
    assert_true(agent_said(e, 2, "rank 3 restored step 2 rebuilt from parity"));
    teardown_env(e);
}

/* A moved rank whose group lost more members than its code tolerates: xor:2
 * on 4 nodes (one group of 4), world 2 (nodes 2 and 3 idle: they hold
 * parity); nodes 1 and 2 lost, rank 1 moves to node 3. The rebuild cannot
 * decode; the restore goes on to the persist tier, which has nothing, and
 * fails naming the parity rebuild and the members that were gone. */
static void test_moved_rank_too_many_lost(void **state)
{
    env_t *e = prepare_env(*state, 4, "xor:2", 1000, NULL);
    static const int on1[2] = {0, 1}, on2[2] = {0, 3}, lost[2] = {1, 2};
    bool gone[MAXN] = {false};
    shrink(e, 2, "node0 node1 node2 node3", "0:0 1:0", on1, lost, 2, 2, "node0 node3", "0:0 1:0",
           on2, "0", gone);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank0.restore.out", e->jobdir);
    assert_true(said(out, "RESTORED 2 OK"));
    snprintf(out, sizeof out, "%s/rank1.restore.out", e->jobdir);
    assert_true(said(out, "RESTORE NONE:"));
    assert_true(said(out, "parity rebuild:"));
    assert_true(said(out, "node2 gone"));
    assert_true(said(out, "persist tier"));
    assert_true(agent_said(e, 3, "rebuilding rank 1's step 2 from parity of the group of "
                                 "nodes 0..3"));
    teardown_env(e);
}

/* A shrunk generation forms its parity groups over its own members and
 * commits. xor:2 on 3 nodes (one group {0,1,2}), world 2 on nodes 0 and 1
 * (node 2 idle). Node 1 is lost without replacement: generation 2 has
 * members {0,2} (rank 1 moves to node 2, rebuilt from parity), its group is
 * {0,2} (published as such) and its checkpoints commit (steps 3..5). Then
 * node 2 is lost too and node 1 comes back empty (generation 3, members
 * {0,1}, rank 1 on node 1): rank 1's step 5 is rebuilt from generation 2's
 * group {0,2}, i.e. from node 0's parity alone, and every rank restores
 * bit-exact. */
static void test_shrunk_generation_commits(void **state)
{
    env_t *e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    static const int on1[2] = {0, 1}, on2[2] = {0, 2}, on3[2] = {0, 1}, lost1[1] = {1},
                     lost2[1] = {2};
    bool gone[MAXN] = {false};
    shrink(e, 2, "node0 node1 node2", "0:0 1:0", on1, lost1, 1, 2, "node0 node2", "0:0 1:0", on2,
           "6", gone);
    assert_true(restores_said(e, 2, 2, "RESTORED 2 OK"));
    assert_true(restores_said(e, 2, 2, "COMMITTED 5"));
    assert_true(agent_said(e, 0, "parity groups published for generation 2: xor:2 3 index 0,2") ||
                agent_said(e, 2, "parity groups published for generation 2: xor:2 3 index 0,2"));
    assert_true(agent_said(e, 2, "parity group of nodes 0,2"));
    assert_true(agent_said(e, 2, "rank 1 restored step 2 rebuilt from parity"));
    gone[1] = false; /* node 1 returns, its memory empty */
    next_gen(e, 3, 2, gone, lost2, 1, "node0 node1", "0:0 1:0", on3, "0");
    assert_true(restores_said(e, 2, 3, "RESTORED 5 OK"));
    assert_true(agent_said(e, 1, "rebuilding rank 1's step 5 from parity of the group of "
                                 "nodes 0,2"));
    teardown_env(e);
}

/* A generation shrunk below a parity group: xor:2 on 2 nodes (one group),
 * world 2; node 1 is lost and generation 2 is node 0 alone (world 1). The
 * agent says the generation has too few nodes for a group, and rank 0's
 * checkpoints commit from node 0's memory instead of never. */
static void test_shrunk_below_a_group(void **state)
{
    env_t *e = prepare_env(*state, 2, "xor:2", 1000, NULL);
    static const int on1[2] = {0, 1}, on2[1] = {0}, lost[1] = {1};
    bool gone[MAXN] = {false};
    shrink(e, 2, "node0 node1", "0:0 1:0", on1, lost, 1, 1, "node0", "0:0", on2, "5", gone);
    assert_true(restores_said(e, 1, 2, "RESTORED 2 OK"));
    assert_true(restores_said(e, 1, 2, "COMMITTED 4"));
    assert_true(agent_said(e, 0, "generation 2 has 1 node(s), a parity group needs more than 1: "
                                 "checkpoints commit with this node's memory alone"));
    teardown_env(e);
}

/* A plan that names a node no agent ever announced ("node9"): the versions
 * of generation 1 wait for its agent until agent.timeout_ms (3 s here), are
 * not committed, and the agents say which node is missing (not a vague "agents
 * are not known", nor a Redis outage). */
static void test_unknown_plan_member(void **state)
{
    env_t *e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "3000"); /* the wait for node9 */
    seed(e, "HSET", "gen", "gen", "1", "world", "3", "epoch", "0");
    seed(e, "HSET", "plan:1", "members", "node0 node1 node9", "ranks", "0:0 1:0 2:0", "world",
         "3");
    for (int i = 0; i < e->nodes; i++)
        start_agent(e, i);
    pid_t p[2];
    char out[2][PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank_on(e, r, r, 3, out[r], "--steps", "1", "--floats", "4096");
    }
    for (int r = 0; r < 2; r++) {
        wait_rank(p[r], 60000);
        assert_false(said(out[r], "COMMITTED 0"));
        assert_true(said(out[r], "ERROR: commit:"));
    }
    for (int i = 0; i < 2; i++)
        assert_true(agent_said(e, i, "parity not stored: the layout of generation 1 (ftc run's "
                                     "plan) names node node9, whose agent is not known"));
    teardown_env(e);
}

/* Published parity groups win: with `ftc:{J}:pargroups:1` set before the
 * agents start ({0,2} and {1,3} instead of index order's {0,1}, {2,3}) every
 * agent adopts them and says so; checkpoints commit and node 2's lost shard
 * is rebuilt from node 0, its published partner. Groups for another node
 * count are refused at start with FTC_ECONFIG naming both. */
static void test_published_groups(void **state)
{
    env_t *e = prepare_env(*state, 4, "rs:1+1", 1000, NULL);
    seed(e, "SET", "pargroups:1", "rs:1+1 4 index 0,2 1,3", NULL, NULL, NULL, NULL, NULL);
    for (int i = 0; i < 4; i++)
        start_agent(e, i);
    run_all(e, "3");
    for (int i = 0; i < 4; i++)
        assert_true(agent_said(e, i, "parity groups adopted from"));
    assert_true(agent_said(e, 0, "parity group of nodes 0,2"));
    assert_true(agent_said(e, 3, "parity group of nodes 1,3"));
    lose_node(e, 2);
    start_agent(e, 2);
    restore_rank(e, 2, "RESTORED 2 OK");
    assert_true(agent_said(e, 2, "rebuilt from parity (rs:1+1, group of nodes 0,2)"));
    teardown_env(e);
    /* a mismatch: published for 5 nodes, this agent has 3 */
    e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    snprintf(e->job + strlen(e->job), sizeof e->job - strlen(e->job), "m");
    seed(e, "SET", "pargroups:1", "xor:2 5 index 0,1,2,3,4", NULL, NULL, NULL, NULL, NULL);
    pid_t pid = spawn_agent(e, 0);
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("the agent did not refuse mismatching published parity groups");
        }
        ftc_sleep_ms(20);
    }
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    assert_true(agent_said(e, 0, "xor:2 on 5 nodes, this agent has redundancy xor:2 on 3 nodes"));
    assert_true(agent_said(e, 0, "pargroups:1"));
    teardown_env(e);
}

/* A failure domain is one word of the fabric hash entry ("hexaddr node_id
 * domain gen", "-" = none): a label with a space or "-" would be read back as
 * another domain by the peers (other parity groups) and as a stale entry by
 * `ftc run`. Refused at start, before Redis is touched. */
static void test_bad_domain(void **state)
{
    (void)state;
    const char *bad[] = {"rack A", "-", "tab\there", "x\ny",
                         "a-label-of-sixty-four-characters-is-one-too-long-for-the-entry-x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ftc_agent_options_t o;
        memset(&o, 0, sizeof o);
        o.struct_size = sizeof o;
        o.version = 1;
        o.job = "apardom";
        o.dir = "/nonexistent-ftc-dir";
        o.nodes = 2;
        o.ranks_per_node = 1;
        o.timeout_ms = 1000;
        o.persist_every = 1;
        o.domain = bad[i];
        ftc_err_t e = {0};
        ftc_agent_t *a = ftc_agent_start(&o, &e);
        assert_null(a);
        assert_int_equal(e.code, FTC_EINVAL);
        assert_non_null(strstr(e.msg, "failure domain"));
        printf("# --domain '%s': %s\n", bad[i], e.msg);
    }
}

/* Rank r of 4 (2 nodes x 2 local indices) in this process, for
 * test_parity_keeps_committed. */
static float kc_w[4][4096];

static ftc_ctx_t *kc_ctx_on(env_t *e, int r, int node, int world, char *sock, size_t cap)
{
    ftc_ctx_t *c = create_ctx_at(e, node, r, world, 30000, sock, cap);
    register_w(c, kc_w[r], 4096);
    return c;
}

static ftc_ctx_t *kc_ctx(env_t *e, int r, char *sock, size_t cap)
{
    return kc_ctx_on(e, r, r / 2, 4, sock, cap);
}

typedef struct kc_ckpt {
    ftc_ctx_t *c;
    int64_t step;
    int rc;
} kc_ckpt_t;

static void *kc_ckpt_main(void *arg)
{
    kc_ckpt_t *k = arg;
    k->rc = ftc_checkpoint(k->c, k->step, NULL, 0);
    if (!k->rc)
        k->rc = ftc_wait_snapshot(k->c);
    return NULL;
}

/* Checkpoints step of the ranks in rs[0..n) at once (a BEGIN may park). */
static void kc_ckpt_all(ftc_ctx_t **c, const int *rs, int n, int64_t step)
{
    pthread_t tid[4];
    kc_ckpt_t k[4];
    for (int i = 0; i < n; i++) {
        for (int x = 0; x < 4096; x++)
            kc_w[rs[i]][x] = (float)(100 * rs[i]) + (float)step;
        k[i] = (kc_ckpt_t){.c = c[rs[i]], .step = step, .rc = -1};
        assert_int_equal(pthread_create(&tid[i], NULL, kc_ckpt_main, &k[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
        if (k[i].rc)
            fail_msg("rank %d step %lld: %s", rs[i], (long long)step, ftc_last_error(k[i].c));
    }
}

/* A member's parity block of the newest committed version survives the
 * next encode (I2), as a replica does. xor:2 on 2 nodes (a mirror group),
 * 2 ranks per node: stripe 0 is ranks 0 (node 0, its encoder) and 2 (node
 * 1). Step 0 commits. Ranks 1 and 3 stop there, so no later step commits.
 * Stripe 0's step 1 is encoded, pushed and reported; its step 2 waits for
 * step 1's commit; step 3 parks for a slot until agent.timeout_ms abandons
 * step 1; then step 2 is encoded and pushed. Node 1's store held stripe
 * 0's blocks of steps 0 (committed) and 1 (newest, abandoned);
 * the parity push went over the older one, the committed step 0's (pushed
 * without the committed step, unlike a replica): node 0 lost, rank 0's
 * step 0 could not be rebuilt. Now it goes over the abandoned step 1, and
 * node 0's replacement rebuilds rank 0's step 0 from node 1's block. */
static void test_parity_keeps_committed(void **state)
{
    env_t *e = prepare_env(*state, 2, "xor:2", 1000, NULL);
    e->ranks_per_node = 2;
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "3000");
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    char sock[4][PATH_MAX + 32];
    ftc_ctx_t *c[4];
    for (int r = 0; r < 4; r++)
        c[r] = kc_ctx(e, r, sock[r], sizeof sock[r]);
    const int all[4] = {0, 1, 2, 3}, stripe0[2] = {0, 2};
    kc_ckpt_all(c, all, 4, 0);
    for (int r = 0; r < 4; r++)
        assert_int_equal(ftc_wait_committed(c[r], 0), 0);
    kc_ckpt_all(c, stripe0, 2, 1);
    kc_ckpt_all(c, stripe0, 2, 2); /* its encode waits for step 1's commit */
    wait_commit_report(ctl, 1, 0, 20000); /* node 1 acknowledged stripe 0's parity of step 1 */
    kc_ckpt_all(c, stripe0, 2, 3); /* parked until step 1 is abandoned */
    assert_true(agent_said(e, 0, "was not committed within"));
    wait_commit_report(ctl, 2, 0, 20000); /* node 1 acknowledged stripe 0's parity of step 2 */
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n1.p%u.s", e->job, FTC_PAR_OWNER(0));
    uint64_t size = 0;
    uint8_t *held[3];
    for (int s = 0; s < 3; s++)
        held[s] = copy_shm_shard(prefix, (uint64_t)s, &size);
    print_message("node 1 holds stripe 0's parity of steps:%s%s%s\n", held[0] ? " 0" : "",
                  held[1] ? " 1" : "", held[2] ? " 2" : "");
    assert_non_null(held[0]); /* the committed version's */
    assert_non_null(held[2]);
    for (int s = 0; s < 3; s++)
        free(held[s]);
    int64_t cstep = -1;
    uint64_t cgen = 0;
    assert_int_equal(ftc_ctl_committed(ctl, &cstep, &cgen), 0);
    assert_int_equal(cstep, 0);
    /* node 0 lost: rank 0's step 0 rebuilt from node 1's parity alone */
    for (int r = 0; r < 4; r++)
        ftc_destroy(c[r]);
    lose_node(e, 0);
    start_agent(e, 0);
    c[0] = kc_ctx(e, 0, sock[0], sizeof sock[0]);
    for (int x = 0; x < 4096; x++)
        kc_w[0][x] = -1.0f;
    int64_t step = -1;
    if (ftc_restore(c[0], &step, NULL, NULL))
        fail_msg("restore of rank 0: %s", ftc_last_error(c[0]));
    assert_int_equal(step, 0);
    assert_true(kc_w[0][0] == 0.0f && kc_w[0][4095] == 0.0f);
    assert_true(agent_said(e, 0, "rebuilt from parity"));
    ftc_destroy(c[0]);
    ftc_ctl_destroy(ctl);
    teardown_env(e);
}

/* The head checksum of the shard of (step, generation) in an shm object
 * whose name starts with prefix; false when none. */
static bool shm_head_of(const char *prefix, uint64_t step, uint64_t gen, uint64_t *head)
{
    ftc_slot_t sl;
    ftc_shard_view_t v;
    if (!open_shm_shard(prefix, step, gen, 0, &sl, &v))
        return false;
    *head = v.head_xxh3;
    ftc_slot_close(&sl);
    return true;
}

/* An encode never takes a member's shard of an earlier generation. xor:2
 * on 2 nodes, one rank each (node 0 encodes). Generation 1 commits step 0;
 * rank 1 alone checkpoints step 1 (sealed on node 1, never encoded). The
 * job moves to generation 2 (agents restarted, shared memory kept), both
 * ranks restore step 0, rank 0 checkpoints step 1. Node 0's gather asked
 * node 1 for rank 1's step 1 and node 1 served the slot generation 1 left:
 * it verified, was encoded and its head reported for generation 2, so step
 * 1 committed with the record naming a version rank 1 never wrote in
 * generation 2 (its own step 1, written later, is refused at a restore, a
 * rebuild gives the old one). Now the gather waits for generation 2's
 * shard: once rank 1 checkpoints step 1 the record holds that one. */
static void test_encode_skips_older_generation(void **state)
{
    env_t *e = prepare_env(*state, 2, "xor:2", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "8000");
    seed(e, "HSET", "gen", "gen", "1", "world", "2", "epoch", "0");
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    char sock[2][PATH_MAX + 32];
    ftc_ctx_t *c[2];
    for (int r = 0; r < 2; r++)
        c[r] = kc_ctx_on(e, r, r, 2, sock[r], sizeof sock[r]);
    const int both[2] = {0, 1}, one[1] = {1}, zero[1] = {0};
    kc_ckpt_all(c, both, 2, 0);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ftc_wait_committed(c[r], 0), 0);
    kc_ckpt_all(c, one, 1, 1); /* generation 1's step 1 of rank 1: never committed */
    for (int r = 0; r < 2; r++)
        ftc_destroy(c[r]);
    for (int i = 0; i < 2; i++)
        kill_agent(e, i);
    seed(e, "HSET", "gen", "gen", "2", "world", "2", "epoch", "0");
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    for (int r = 0; r < 2; r++) {
        c[r] = kc_ctx_on(e, r, r, 2, sock[r], sizeof sock[r]);
        int64_t step = -1;
        if (ftc_restore(c[r], &step, NULL, NULL))
            fail_msg("restore of rank %d: %s", r, ftc_last_error(c[r]));
        assert_int_equal(step, 0);
    }
    kc_ckpt_all(c, zero, 1, 1);
    /* the encode of a stale shard needs no more than this (not asserted) */
    ftc_deadline_t d = ftc_deadline_in_ms(3000);
    while (!agent_said(e, 0, "rank 0 step 1: parity") && !ftc_deadline_expired(d))
        ftc_sleep_ms(50);
    bool found = false;
    uint64_t ck = 0, want = 0;
    assert_int_equal(ftc_ctl_commit_checksum(ctl, 2, 1, 1, &ck, &found), 0);
    print_message("before rank 1's step 1 of generation 2: its report %s\n",
                  found ? "is in the record (a stale shard was encoded)" : "is not there");
    assert_false(found);
    kc_ckpt_all(c, one, 1, 1);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ftc_wait_committed(c[r], 1), 0);
    assert_int_equal(ftc_ctl_commit_checksum(ctl, 2, 1, 1, &ck, &found), 0);
    assert_true(found);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n1.r1.s", e->job);
    assert_true(shm_head_of(prefix, 1, 2, &want));
    assert_true(ck == want);
    for (int r = 0; r < 2; r++)
        ftc_destroy(c[r]);
    ftc_ctl_destroy(ctl);
    teardown_env(e);
}

/* The PTTL of the job's key `suffix` (ms; -2: no key, -1: no TTL). */
static long long key_pttl(env_t *e, const char *suffix)
{
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    char key[200];
    ftc_ctl_key(c, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    long long ttl = -3;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "PTTL", key, NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "PTTL", &ttl, NULL), 0);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
    print_message("%s PTTL %lld ms\n", suffix, ttl);
    return ttl;
}

/* A generation's layout and parity groups outlive it by their TTL, however
 * long it ran: a rebuild of its newest version after the next failure reads
 * them. plan:1 and pargroups:1 are published with a 24 h TTL and were never
 * renewed, so after a generation of more than a day they were gone when
 * generation 2 needed them: the moved rank's rebuild failed (the layout read
 * as "no plan", node-major, and no groups) and with nothing in the persist
 * tier its restore failed. Here they are seeded with a 120 s TTL (a day,
 * shortened; 12 s ran out under load before the first commit); generation 1
 * commits, and both keys' TTL is back to ~24 h (the agents renewed them as it
 * committed: the test used to wait the TTL out instead); node 1 is lost and generation 2 (xor:2 on
 * 4 nodes, one group, world 2: nodes 2 and 3 idle) moves rank 1 to node 3,
 * which rebuilds it from the group's parity. */
static void test_generation_keys_renewed(void **state)
{
    env_t *e = prepare_env(*state, 4, "xor:2", 1000, NULL);
    seed(e, "HSET", "gen", "gen", "1", "world", "2", "epoch", "0");
    seed(e, "HSET", "plan:1", "members", "node0 node1 node2 node3", "ranks", "0:0 1:0",
         "world", "2");
    seed(e, "PEXPIRE", "plan:1", "120000", NULL, NULL, NULL, NULL, NULL);
    seed(e, "SET", "pargroups:1", "xor:2 4 index 0,1,2,3", "PX", "120000", NULL, NULL, NULL);
    for (int i = 0; i < e->nodes; i++)
        start_agent(e, i);
    static const int on1[2] = {0, 1}, on2[2] = {0, 3}, lost[1] = {1};
    pid_t p[2];
    char out[2][PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank_on(e, r, on1[r], 2, out[r], "--steps", "3", "--floats", "65536");
    }
    for (int r = 0; r < 2; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], "COMMITTED 2"));
    }
    assert_true(agent_said(e, 0, "parity groups adopted from"));
    assert_true(key_pttl(e, "plan:1") > 120000);
    assert_true(key_pttl(e, "pargroups:1") > 120000);
    bool gone[MAXN] = {false};
    next_gen(e, 2, 2, gone, lost, 1, "node0 node2 node3", "0:0 2:0", on2, "0");
    char rout[PATH_MAX + 48];
    restore_out(e, 1, 2, rout, sizeof rout);
    assert_true(said(rout, "RESTORED 2 OK"));
    assert_true(agent_said(e, 3, "rank 1 restored step 2 rebuilt from parity"));
    teardown_env(e);
}

/* The plan's TTL is renewed without parity too: `ftc run` plans the next
 * generation from the committed generation's plan (ranks stay where their
 * shards are; the trainer learns the previous world), and a generation that
 * ran past a day left none (replica mode renewed nothing). Generation 1's
 * plan seeded with a 120 s TTL; after a commit it is back to ~24 h. */
static void test_plan_renewed_replicas(void **state)
{
    env_t *e = prepare_env(*state, 2, "1", 1000, NULL);
    seed(e, "HSET", "gen", "gen", "1", "world", "2", "epoch", "0");
    seed(e, "HSET", "plan:1", "members", "node0 node1", "ranks", "0:0 1:0", "world", "2");
    seed(e, "PEXPIRE", "plan:1", "120000", NULL, NULL, NULL, NULL, NULL);
    for (int i = 0; i < e->nodes; i++)
        start_agent(e, i);
    pid_t p[2];
    char out[2][PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%d.run.out", e->jobdir, r);
        p[r] = start_rank_on(e, r, r, 2, out[r], "--steps", "2", "--floats", "4096");
    }
    for (int r = 0; r < 2; r++) {
        wait_rank(p[r], 60000);
        assert_true(said(out[r], "COMMITTED 1"));
    }
    assert_true(key_pttl(e, "plan:1") > 120000);
    teardown_env(e);
}

/* The same end to end: a moved rank rebuilt on a node of its group whose own
 * rank's committed shard is in that rank's third slot. xor:2 on 3 nodes, 2
 * local indices per node, generation 1's plan puts ranks 0, 1, 2 on nodes
 * 0, 1, 2 (local 0). Rank 0 checkpoints steps 1 and 2 before ranks 1 and
 * 2 do (step 2 then goes to its third slot); both commit. Node 1 is lost
 * and generation 2 (nodes 0 and 2) moves rank 1 to node 0, local 1: node 0
 * rebuilds rank 1's step 2 from its group of generation 1, with its own
 * rank 0's shard (a row's data) read from its slots: that read skipped the
 * third slot, the row lacked two pieces and, with nothing in the persist
 * tier, rank 1's restore failed. Node 1's heartbeat has not expired yet
 * (it lasts a TTL after the loss): node 0 first asks node 1, which looks
 * alive, and when that fetch fails it rebuilds; it went straight to the
 * persist tier, and the restore failed (most runs under load). */
static void test_moved_rank_own_third_slot(void **state)
{
    env_t *e = prepare_env(*state, 3, "xor:2", 1000, NULL);
    e->ranks_per_node = 2;
    seed(e, "HSET", "gen", "gen", "1", "world", "3", "epoch", "0");
    seed(e, "HSET", "plan:1", "members", "node0 node1 node2", "ranks", "0:0 1:0 2:0", "world",
         "3");
    for (int i = 0; i < 3; i++)
        start_agent(e, i);
    char sock[3][PATH_MAX + 32];
    ftc_ctx_t *c[3];
    for (int r = 0; r < 3; r++)
        c[r] = kc_ctx_on(e, r, r, 3, sock[r], sizeof sock[r]);
    const int all[3] = {0, 1, 2}, zero[1] = {0}, rest[2] = {1, 2};
    kc_ckpt_all(c, all, 3, 0);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ftc_wait_committed(c[r], 0), 0);
    kc_ckpt_all(c, zero, 1, 1); /* sealed: its encode waits for ranks 1 and 2 */
    kc_ckpt_all(c, zero, 1, 2); /* the third slot */
    kc_ckpt_all(c, rest, 2, 1);
    kc_ckpt_all(c, rest, 2, 2);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ftc_wait_committed(c[r], 2), 0);
    char name[FTC_SLOT_NAME_MAX], prefix[160];
    ftc_err_t err = {0};
    char ns[96];
    snprintf(ns, sizeof ns, "%s.n0", e->job);
    assert_int_equal(ftc_slot_name(ns, 0, 2, name, sizeof name, &err), 0);
    snprintf(prefix, sizeof prefix, "%s", name);
    uint64_t size = 0;
    uint8_t *third = copy_shm_shard(prefix, 2, &size);
    print_message("rank 0's step 2 in its third slot (%s): %s\n", name, third ? "yes" : "no");
    assert_non_null(third);
    free(third);
    for (int r = 0; r < 3; r++)
        ftc_destroy(c[r]);
    lose_node(e, 1);
    /* its heartbeat has not expired yet (up to a TTL after the loss; here
     * for the whole test) */
    ftc_ctl_t *ctl = redis_fixture_ctl(e->f, e->job);
    ftc_ctl_heartbeat_t hb = {.generation = 1, .step = 2, .wall_ms = ftc_wall_ms()};
    assert_int_equal(ftc_ctl_heartbeat(ctl, "node1", &hb, 120000), 0);
    ftc_ctl_destroy(ctl);
    kill_agent(e, 0);
    kill_agent(e, 2);
    seed(e, "HSET", "gen", "gen", "2", "world", "3", "epoch", "0");
    seed(e, "HSET", "plan:2", "members", "node0 node2", "ranks", "0:0 0:1 1:0", "world", "3");
    start_agent(e, 0);
    start_agent(e, 2);
    c[1] = kc_ctx_on(e, 1, 0, 3, sock[1], sizeof sock[1]);
    for (int x = 0; x < 4096; x++)
        kc_w[1][x] = -1.0f;
    int64_t step = -1;
    if (ftc_restore(c[1], &step, NULL, NULL))
        fail_msg("restore of rank 1 on node 0: %s", ftc_last_error(c[1]));
    assert_int_equal(step, 2);
    assert_true(kc_w[1][0] == 102.0f && kc_w[1][4095] == 102.0f);
    assert_true(agent_said(e, 0, "rank 1 restored step 2 rebuilt from parity"));
    assert_true(agent_said(e, 0, "rank 1's node did not serve its step 2"));
    ftc_destroy(c[1]);
    teardown_env(e);
}

/* The encoder reports every member's shard once the parity is acknowledged;
 * a report that Redis did not take is made again when Redis answers, as
 * the rank's own is. xor:2 on 2 nodes (node 0 encodes), step 0 committed,
 * rank 1 seals step 1, then Redis stops (SIGSTOP) and rank 0 seals step 1:
 * the parity is encoded and acknowledged, and the reports fail. Rank 1's
 * report was tried three times in a row (2 s each) and dropped, so step 1
 * never committed once Redis was back (only rank 0's own was made again). */
static void test_member_reports_retried(void **state)
{
    env_t *e = prepare_env(*state, 2, "xor:2", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "3000");
    for (int i = 0; i < 2; i++)
        start_agent(e, i);
    char sock[2][PATH_MAX + 32];
    ftc_ctx_t *c[2];
    for (int r = 0; r < 2; r++)
        c[r] = kc_ctx_on(e, r, r, 2, sock[r], sizeof sock[r]);
    const int both[2] = {0, 1}, one[1] = {1}, zero[1] = {0};
    kc_ckpt_all(c, both, 2, 0);
    for (int r = 0; r < 2; r++)
        assert_int_equal(ftc_wait_committed(c[r], 0), 0);
    kc_ckpt_all(c, one, 1, 1);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGSTOP), 0);
    kc_ckpt_all(c, zero, 1, 1);
    /* encoded and pushed while Redis is stopped; then the reports fail: a
     * pause (not asserted) longer than the three tries of 2 s each (the
     * Redis command timeout) that dropped rank 1's report */
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    while (!agent_said(e, 0, "rank 0 step 1: parity of") && !ftc_deadline_expired(d))
        ftc_sleep_ms(100);
    ftc_sleep_ms(9000);
    assert_int_equal(ftc_redis_server_signal(e->f->srv, SIGCONT), 0);
    assert_true(agent_said(e, 0, "rank 0 step 1: parity of"));
    for (int r = 0; r < 2; r++) {
        int rc = ftc_wait_committed(c[r], 1);
        if (rc)
            print_message("rank %d waits for step 1: %s (%s)\n", r, ftc_errname(rc),
                          ftc_last_error(c[r]));
        assert_int_equal(rc, 0);
    }
    for (int r = 0; r < 2; r++)
        ftc_destroy(c[r]);
    teardown_env(e);
}

/* xor:2 on 3 nodes, every commit persisted, checkpoint.busy=skip. Nodes 1
 * and 2 are lost (agents killed, heartbeats gone) and node 0 loses its
 * memory: rank 0's shard cannot be rebuilt (no member alive) nor fetched
 * (no live peer), and comes from the persist tier. The fetch that found no
 * peer had already marked one of the rank's slots as being written into
 * (the landing slot) and returned without its job: that slot stayed taken
 * for good, and the rank, whose versions cannot commit now, skipped its
 * second checkpoint after the restore instead of its third. */
static void test_restore_no_peer_keeps_slots(void **state)
{
    setenv("FTC_CHECKPOINT_BUSY", "skip", 1); /* inherited by the agents */
    env_t *e = setup_env(*state, 3, "xor:2", 1);
    run_all(e, "3");
    char marker[PATH_MAX + 80];
    snprintf(marker, sizeof marker, "%s/node0/v%020d/COMMITTED", e->persist, 2);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    struct stat st;
    while (stat(marker, &st) != 0) {
        if (ftc_deadline_expired(d))
            fail_msg("%s never appeared", marker);
        ftc_sleep_ms(20);
    }
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    for (int i = 1; i < 3; i++) {
        lose_node(e, i);
        char key[200], suffix[32];
        snprintf(suffix, sizeof suffix, "hb:node%d", i);
        ftc_ctl_key(c, suffix, key, sizeof key);
        assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "DEL", key, NULL), 0);
    }
    ftc_ctl_destroy(c);
    lose_and_replace(e, (int[]){0}, 1);
    unsetenv("FTC_CHECKPOINT_BUSY");
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank0.alone.out", e->jobdir);
    pid_t p = start_rank(e, 0, 3, out, "--restore", "--steps", "6", "--no-commit");
    wait_rank(p, 60000);
    assert_true(said(out, "RESTORED 2 OK"));
    assert_true(agent_said(e, 0, "restored step 2 from the persist tier"));
    /* slots: the restored step 2, steps 3 and 4 (not committed); 5 skipped */
    assert_true(said(out, "CHECKPOINTED 3\nCHECKPOINTED 4\nSKIPPED 5\n"));
    teardown_env(e);
}

/* xor:2 on 3 nodes, nothing persisted: node 2 is lost (agent killed,
 * memory wiped, heartbeat gone) and rank 0 continues rank 2's state
 * (FTC_RESTORE_RANK=2, as after a layout change): rank 2's shard is
 * rebuilt from the group's survivors. A RESTORE of another rank's shard
 * skipped the rebuild and, with nothing persisted, failed. */
static void test_restore_from_lost_rank_rebuilt(void **state)
{
    env_t *e = setup_env(*state, 3, "xor:2", 1000);
    run_all(e, "3");
    lose_node(e, 2);
    ftc_ctl_t *c = redis_fixture_ctl(e->f, e->job);
    char key[200];
    ftc_ctl_key(c, "hb:node2", key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "DEL", key, NULL), 0);
    ftc_ctl_destroy(c);
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank0.from2.out", e->jobdir);
    setenv("FTC_RESTORE_RANK", "2", 1);
    pid_t p = start_rank(e, 0, 3, out, "--restore", "--steps", "0", NULL);
    unsetenv("FTC_RESTORE_RANK");
    wait_rank(p, 60000);
    assert_true(said(out, "RESTORED 2 OK"));
    assert_true(agent_said(e, 0, "rebuilt from parity"));
    teardown_env(e);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_encode_rebuild),
        cmocka_unit_test(test_domain_groups),
        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_worker_pool),
        cmocka_unit_test(test_read_local_every_slot),
        cmocka_unit_test(test_store_other_size_keeps_mappings),
        cmocka_unit_test(test_idle_members),
        cmocka_unit_test(test_rebuild_recorded_code),
        cmocka_unit_test(test_groups_text),
        cmocka_unit_test(test_records_text),
        cmocka_unit_test(test_member_groups),
        cmocka_unit_test(test_bad_domain),
        T(test_xor_one_node_lost),
        T(test_rs_two_nodes_lost),
        T(test_corrupt_parity_falls_back),
        T(test_corrupt_parity_no_persist),
        T(test_rebuild_checks_record),
        T(test_rebuild_names_recorded_code),
        T(test_domain_lost),
        T(test_idle_slot),
        T(test_published_groups),
        T(test_moved_rank),
        T(test_moved_rank_too_many_lost),
        T(test_shrunk_generation_commits),
        T(test_shrunk_below_a_group),
        T(test_unknown_plan_member),
        T(test_rebuild_result_to_its_request),
        T(test_parity_keeps_committed),
        T(test_encode_skips_older_generation),
        T(test_generation_keys_renewed),
        T(test_plan_renewed_replicas),
        T(test_moved_rank_own_third_slot),
        T(test_member_reports_retried),
        T(test_restore_no_peer_keeps_slots),
        T(test_restore_from_lost_rank_rebuilt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
