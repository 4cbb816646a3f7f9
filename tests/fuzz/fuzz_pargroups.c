/*
 * fuzz_pargroups.c — libFuzzer target for the published parity groups
 * (`ftc:{J}:pargroups:GEN`, ckpt/agent_parity.h): the text every agent of a
 * generation reads from Redis and adopts.
 *
 * Input: byte 0 picks the redundancy, byte 1 the job's node count (1..40),
 * bytes 2..6 a member mask (the generation's plan; all zero: no plan, every
 * node, and so does a mask with no node below the count), byte 7 the node
 * asking; the rest is the published text. Checked
 * besides memory safety (ASan/UBSan, leaks):
 *   - the error contract: every failure has its code and a message;
 *   - a text that parses gives a group the geometry could have formed: more
 *     than M and at most FTC_PARITY_MAX members, ascending, every one a
 *     member of the generation, the asking node at geo->member;
 *   - the round trip: the groups this generation forms (ftc__par_groups_str_in)
 *     parse back, for every member, to exactly its ftc__par_geometry_in
 *     group, and two members agree on each other's groups (a partition).
 */
#include "fuzz_common.h"

#include "ckpt/agent_parity.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const reds[] = {"xor:2", "xor:3", "rs:2+1", "rs:2+2", "rs:4+2", "rs:1+1"};

static void check_geo(const ftc__par_geo_t *g, uint32_t nodes, const bool *member,
                      uint32_t index)
{
    FUZZ_CHECK(g->n > g->m && g->n <= FTC_PARITY_MAX && g->d == g->n - g->m, "n %d m %d d %d",
               g->n, g->m, g->d);
    FUZZ_CHECK(g->member >= 0 && g->member < g->n && g->node[g->member] == index,
               "member %d is node %u, not %u", g->member, g->node[g->member], index);
    FUZZ_CHECK(g->first == g->node[0], "first %u", g->first);
    for (int i = 0; i < g->n; i++) {
        FUZZ_CHECK(g->node[i] < nodes && member[g->node[i]], "node %u is not a member",
                   g->node[i]);
        FUZZ_CHECK(i == 0 || g->node[i] > g->node[i - 1], "not ascending at %d", i);
    }
}

static bool same_geo(const ftc__par_geo_t *a, const ftc__par_geo_t *b)
{
    return a->n == b->n && a->m == b->m && a->d == b->d && a->member == b->member &&
           a->first == b->first && a->xor_code == b->xor_code && a->by_domain == b->by_domain &&
           !memcmp(a->node, b->node, sizeof(uint32_t) * (size_t)a->n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    ftc_redundancy_t red;
    ftc_err_t err = {0};
    if (ftc_redundancy_parse(reds[data[0] % (sizeof reds / sizeof reds[0])], &red, &err))
        abort();
    uint32_t nodes = 1 + data[1] % 40;
    uint64_t mask = 0;
    for (int i = 0; i < 5; i++)
        mask |= (uint64_t)data[2 + i] << (8 * i);
    bool member[40] = {false};
    uint32_t list[40], nm = 0;
    for (uint32_t i = 0; i < nodes; i++)
        if (!mask || (mask >> i & 1))
            member[i] = true, list[nm++] = i;
    if (nm == 0) /* no member in range: no plan */
        for (uint32_t i = 0; i < nodes; i++)
            member[i] = true, list[nm++] = i, mask = 0;
    const uint32_t *mem = mask ? list : NULL;
    uint32_t index = data[7] % nodes;
    char *text = malloc(size - 8 + 1);
    if (!text)
        return 0;
    memcpy(text, data + 8, size - 8);
    text[size - 8] = 0;

    /* the fuzzed text */
    ftc__par_geo_t g;
    int rc = ftc__par_groups_parse_in(text, &red, nodes, mem, nm, index, &g, &err);
    if (rc == 0) {
        check_geo(&g, nodes, member, index);
    } else {
        FUZZ_CHECK(rc == FTC_EPROTO || rc == FTC_ECONFIG || rc == FTC_EINVAL || rc == FTC_ENOMEM,
                   "code %d", rc);
        FUZZ_CHECK(err.code == rc && err.msg[0], "no message for %d", rc);
    }
    free(text);
    if (!member[index])
        return 0;

    /* the round trip of this generation's own groups */
    ftc__par_geo_t mine;
    if (ftc__par_geometry_in(&red, nodes, mem, nm, NULL, index, &mine, &err)) {
        FUZZ_CHECK(err.code == FTC_ECONFIG && err.msg[0], "geometry: code %d", err.code);
        return 0;
    }
    check_geo(&mine, nodes, member, index);
    char *pub = NULL;
    FUZZ_CHECK(ftc__par_groups_str_in(&red, nodes, mem, nm, NULL, &pub, &err) == 0,
               "groups_str_in: %s", err.msg);
    for (uint32_t k = 0; k < nm; k++) {
        ftc__par_geo_t a, b;
        FUZZ_CHECK(ftc__par_geometry_in(&red, nodes, mem, nm, NULL, list[k], &a, &err) == 0,
                   "geometry of member %u: %s", list[k], err.msg);
        FUZZ_CHECK(ftc__par_groups_parse_in(pub, &red, nodes, mem, nm, list[k], &b, &err) == 0,
                   "'%s' for node %u: %s", pub, list[k], err.msg);
        FUZZ_CHECK(same_geo(&a, &b), "'%s': node %u's group differs", pub, list[k]);
        for (int i = 0; i < a.n; i++) { /* every member of its group has the same group */
            ftc__par_geo_t c;
            FUZZ_CHECK(ftc__par_geometry_in(&red, nodes, mem, nm, NULL, a.node[i], &c, &err) == 0,
                       "geometry of %u", a.node[i]);
            FUZZ_CHECK(c.n == a.n && !memcmp(c.node, a.node, sizeof(uint32_t) * (size_t)a.n),
                       "nodes %u and %u disagree", list[k], a.node[i]);
        }
    }
    free(pub);
    return 0;
}
