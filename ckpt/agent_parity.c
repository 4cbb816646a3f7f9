/*
 * agent_parity.c — parity groups of the agent; see agent_parity.h.
 */
#include "ckpt/agent_parity.h"

#include "ckpt/agent_proto.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/hash.h"
#include "core/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAR_MAGIC 0x3152415043544646ull /* "FFTCPAR1" */
#define META_FIXED 10
#define META_LEN(n) (META_FIXED + 3 * (uint64_t)(n))

/* Most members of one domain among the n nodes of list (0 without domains;
 * "" is a domain of its own); *who gets a member of it. */
static int dom_count(const char *const *domains, const uint32_t *list, int n, uint32_t *who)
{
    int best = 0;
    *who = list[0];
    if (!domains)
        return 0;
    for (int i = 0; i < n; i++) {
        const char *di = domains[list[i]] ? domains[list[i]] : "";
        int c = 1;
        for (int k = 0; k < n && di[0]; k++)
            if (k != i && domains[list[k]] && !strcmp(di, domains[list[k]]))
                c++;
        if (c > best)
            best = c, *who = list[i];
    }
    return best;
}

typedef struct dnode {
    const char *dom;
    uint32_t idx;
} dnode_t;

static int by_domain(const void *x, const void *y)
{
    const dnode_t *a = x, *b = y;
    int c = strcmp(a->dom, b->dom);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int by_index(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* members (ascending, distinct, < nodes) or NULL: 0..nodes-1 (*nm = nodes),
 * as a malloc'd list; NULL with err set when it is not such a list. */
static uint32_t *member_list(uint32_t nodes, const uint32_t *members, uint32_t *nm, ftc_err_t *err)
{
    uint32_t n = members ? *nm : nodes;
    uint32_t *list = malloc((n ? n : 1) * sizeof *list);
    if (!list) {
        ftc_err_set(err, FTC_ENOMEM, "parity groups: out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        list[i] = members ? members[i] : i;
        if (list[i] >= nodes || (i && list[i] <= list[i - 1])) {
            ftc_err_set(err, FTC_EINVAL, "parity groups: the member list is not ascending "
                        "distinct node indices below %u (member %u is node %u)", nodes, i,
                        list[i]);
            free(list);
            return NULL;
        }
    }
    *nm = n;
    return list;
}

int ftc__par_geometry(const ftc_redundancy_t *red, uint32_t nodes, const char *const *domains,
                      uint32_t index, ftc__par_geo_t *geo, ftc_err_t *err)
{
    return ftc__par_geometry_in(red, nodes, NULL, 0, domains, index, geo, err);
}

int ftc__par_geometry_in(const ftc_redundancy_t *red, uint32_t nodes, const uint32_t *members,
                         uint32_t nm, const char *const *domains, uint32_t index,
                         ftc__par_geo_t *geo, ftc_err_t *err)
{
    memset(geo, 0, sizeof *geo);
    if (red->kind != FTC_RED_XOR && red->kind != FTC_RED_RS)
        return ftc_err_set(err, FTC_EINVAL, "parity geometry of a replica redundancy");
    int m = red->kind == FTC_RED_XOR ? 1 : red->m;
    int size = red->g + m;
    if (red->g < 1 || m < 1 || size > FTC_PARITY_MAX)
        return ftc_err_set(err, FTC_ECONFIG, "redundancy %s:%d+%d: groups of 2..%d nodes",
                           red->kind == FTC_RED_XOR ? "xor" : "rs", red->g, m, FTC_PARITY_MAX);
    uint32_t *list = member_list(nodes, members, &nm, err);
    if (!list)
        return err->code;
    uint32_t pos = 0;
    while (pos < nm && list[pos] != index)
        pos++;
    if (pos == nm) {
        free(list);
        return ftc_err_set(err, FTC_EINVAL, "parity geometry: node %u is not one of the %u "
                           "node(s) of the generation", index, nm);
    }
    uint32_t groups = nm / (uint32_t)size;
    if (groups == 0)
        groups = 1; /* fewer nodes than one group: one group of all of them */
    /* index order: the sizes of every group are checked here (domain order
     * spreads the leftover, so its groups are never larger); positions in
     * the member list */
    uint32_t gi = pos / (uint32_t)size;
    if (gi >= groups)
        gi = groups - 1; /* leftover nodes join the last group */
    uint32_t first = gi * (uint32_t)size;
    uint32_t n = gi == groups - 1 ? nm - first : (uint32_t)size;
    uint32_t last_n = nm - (groups - 1) * (uint32_t)size;
    int rc = 0;
    if (n <= (uint32_t)m)
        rc = ftc_err_set(err, FTC_ECONFIG,
                         "redundancy %s needs more than %d nodes per parity group, the %s has "
                         "%u node(s): use more nodes or replicas (--redundancy K)",
                         red->kind == FTC_RED_XOR ? "xor" : "rs", m,
                         members ? "generation" : "job", nm);
    else if (last_n > FTC_PARITY_MAX)
        rc = ftc_err_set(err, FTC_ECONFIG,
                         "parity group of nodes %u..%u has %u members (the leftover of %u nodes "
                         "joined it), above the %d a code supports: choose G+M dividing the "
                         "node count",
                         list[(groups - 1) * (uint32_t)size], list[nm - 1], last_n, nm,
                         FTC_PARITY_MAX);
    if (rc) {
        free(list);
        return rc;
    }
    geo->n = (int)n;
    for (uint32_t i = 0; i < n; i++)
        geo->node[i] = list[first + i];
    /* domain order when index order puts more than m members of one domain
     * in some group */
    bool stripe = false;
    if (domains)
        for (uint32_t g = 0; g < groups && !stripe; g++) {
            uint32_t f = g * (uint32_t)size, who;
            uint32_t gn = g == groups - 1 ? nm - f : (uint32_t)size;
            stripe = dom_count(domains, list + f, (int)gn, &who) > m;
        }
    if (stripe) {
        dnode_t *order = malloc(nm * sizeof *order);
        if (!order) {
            free(list);
            return ftc_err_set(err, FTC_ENOMEM, "parity geometry: out of memory");
        }
        for (uint32_t i = 0; i < nm; i++)
            order[i] = (dnode_t){domains[list[i]] ? domains[list[i]] : "", list[i]};
        qsort(order, nm, sizeof *order, by_domain);
        uint32_t at = 0;
        while (order[at].idx != index)
            at++;
        gi = at % groups;
        n = 0;
        for (uint32_t q = gi; q < nm; q += groups)
            geo->node[n++] = order[q].idx;
        free(order);
        qsort(geo->node, n, sizeof geo->node[0], by_index);
        geo->n = (int)n;
        geo->by_domain = true;
    }
    free(list);
    geo->first = geo->node[0];
    geo->m = m;
    geo->d = geo->n - m;
    for (int i = 0; i < geo->n; i++)
        if (geo->node[i] == index)
            geo->member = i;
    geo->xor_code = red->kind == FTC_RED_XOR;
    geo->dom_max = dom_count(domains, geo->node, geo->n, &geo->dom_node);
    return 0;
}

int ftc__par_groups_str_in(const ftc_redundancy_t *red, uint32_t nodes, const uint32_t *members,
                           uint32_t nm, const char *const *domains, char **out, ftc_err_t *err)
{
    *out = NULL;
    uint32_t *list = member_list(nodes, members, &nm, err);
    if (!list)
        return err->code;
    size_t cap = 96 + (size_t)nm * 12, l;
    char *buf = malloc(cap), rs[32];
    if (!buf) {
        free(list);
        return ftc_err_set(err, FTC_ENOMEM, "parity groups: out of memory");
    }
    ftc__par_geo_t g;
    bool by_domain = false;
    l = 0;
    for (uint32_t i = 0; i < nm; i++) { /* one group per lowest member */
        if (ftc__par_geometry_in(red, nodes, list, nm, domains, list[i], &g, err)) {
            free(buf);
            free(list);
            return err->code;
        }
        by_domain = by_domain || g.by_domain;
        if (g.node[0] != list[i])
            continue;
        for (int k = 0; k < g.n; k++)
            l += (size_t)snprintf(buf + l, cap - l, "%s%u", k ? "," : " ", g.node[k]);
    }
    free(list);
    char *text = malloc(cap + 64);
    if (!text) {
        free(buf);
        return ftc_err_set(err, FTC_ENOMEM, "parity groups: out of memory");
    }
    snprintf(text, cap + 64, "%s %u %s%s", ftc_redundancy_str(red, rs, sizeof rs), nodes,
             by_domain ? "domain" : "index", buf);
    free(buf);
    *out = text;
    return 0;
}

int ftc__par_groups_parse_in(const char *text, const ftc_redundancy_t *red, uint32_t nodes,
                             const uint32_t *members, uint32_t nm, uint32_t index,
                             ftc__par_geo_t *geo, ftc_err_t *err)
{
    memset(geo, 0, sizeof *geo);
    char rs[32], prs[32], order[16];
    unsigned pn = 0;
    int off = 0;
    ftc_redundancy_str(red, rs, sizeof rs);
    if (sscanf(text, "%31s %u %15s %n", prs, &pn, order, &off) != 3 || !off ||
        (strcmp(order, "index") && strcmp(order, "domain")))
        return ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': expected "
                           "\"REDUNDANCY NODES index|domain GROUP...\"", text);
    if (strcmp(prs, rs) || pn != nodes)
        return ftc_err_set(err, FTC_ECONFIG, "the parity groups published for this generation "
                           "are for redundancy %s on %u nodes, this agent has redundancy %s on "
                           "%u nodes: start every agent of a generation with the same --nodes "
                           "and --redundancy", prs, pn, rs, nodes);
    if (index >= nodes)
        return ftc_err_set(err, FTC_EINVAL, "parity groups: node %u of %u", index, nodes);
    int m = red->kind == FTC_RED_XOR ? 1 : red->m;
    uint32_t *list = member_list(nodes, members, &nm, err);
    if (!list)
        return err->code;
    /* seen[v]: 0 not a member, 1 a member not in a group yet, 2 in a group */
    uint8_t *seen = calloc(nodes ? nodes : 1, 1);
    if (!seen) {
        free(list);
        return ftc_err_set(err, FTC_ENOMEM, "parity groups: out of memory");
    }
    for (uint32_t i = 0; i < nm; i++)
        seen[list[i]] = 1;
    free(list);
    int rc = 0;
    bool found = false;
    const char *p = text + off;
    while (*p && !rc) {
        uint32_t glist[FTC_PARITY_MAX];
        int n = 0;
        for (;;) { /* one group: a,b,c */
            char *end;
            unsigned long v = strtoul(p, &end, 10);
            if (end == p || v >= nodes || seen[v] != 1 || n == FTC_PARITY_MAX) {
                if (end != p && v < nodes && seen[v] == 0)
                    rc = ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': node "
                                     "%lu is not one of the generation's %u node(s)", text, v,
                                     nm);
                else
                    rc = ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': not "
                                     "a partition of the generation's %u node(s) (of 0..%u) "
                                     "into groups of at most %d", text, nm, nodes - 1,
                                     FTC_PARITY_MAX);
                break;
            }
            seen[v] = 2;
            glist[n++] = (uint32_t)v;
            p = end;
            if (*p != ',')
                break;
            p++;
        }
        if (rc)
            break;
        if (*p && *p != ' ') {
            rc = ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': unexpected "
                             "'%c'", text, *p);
            break;
        }
        while (*p == ' ')
            p++;
        if (n <= m) {
            rc = ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': a group of %d "
                             "member(s) cannot tolerate %d lost", text, n, m);
            break;
        }
        qsort(glist, (size_t)n, sizeof glist[0], by_index);
        for (int k = 0; k < n; k++)
            if (glist[k] == index) {
                found = true;
                geo->n = n;
                geo->member = k;
                memcpy(geo->node, glist, (size_t)n * sizeof glist[0]);
            }
    }
    for (uint32_t i = 0; i < nodes && !rc; i++)
        if (seen[i] == 1)
            rc = ftc_err_set(err, FTC_EPROTO, "published parity groups '%.120s': node %u is in "
                             "no group", text, i);
    free(seen);
    if (!rc && !found)
        rc = ftc_err_set(err, FTC_EINVAL, "published parity groups '%.120s': node %u is not "
                         "one of the generation's nodes", text, index);
    if (rc) {
        memset(geo, 0, sizeof *geo);
        return rc;
    }
    geo->first = geo->node[0];
    geo->m = m;
    geo->d = geo->n - m;
    geo->xor_code = red->kind == FTC_RED_XOR;
    geo->by_domain = !strcmp(order, "domain");
    geo->dom_node = geo->node[0];
    return 0;
}

const char *ftc__par_geo_str(const ftc__par_geo_t *geo, char *buf, size_t cap)
{
    bool run = true;
    for (int i = 1; i < geo->n; i++)
        run = run && geo->node[i] == geo->node[0] + (uint32_t)i;
    if (run) {
        snprintf(buf, cap, "nodes %u..%u", geo->node[0], geo->node[0] + (uint32_t)geo->n - 1);
        return buf;
    }
    size_t l = (size_t)snprintf(buf, cap, "nodes ");
    for (int i = 0; i < geo->n && l < cap; i++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%u", i ? "," : "", geo->node[i]);
    return buf;
}

int ftc__par_encoder(const ftc__par_geo_t *geo, uint32_t local, const bool *idle)
{
    int first = (int)(local % (uint32_t)geo->n);
    for (int k = 0; k < geo->n; k++) {
        int i = (first + k) % geo->n;
        if (!idle || !idle[i])
            return i;
    }
    return -1;
}

/* Identifies the group's node list in parity.meta. */
static uint64_t group_id(const ftc__par_geo_t *g)
{
    return ftc_xxh3(g->node, (size_t)g->n * sizeof g->node[0]);
}

/* Row of member i's chunk t; the member at data position t of row r. */
static int row_of(const ftc__par_geo_t *g, int i, int t)
{
    return ((i - g->m - t) % g->n + 2 * g->n) % g->n;
}
static int data_member(const ftc__par_geo_t *g, int r, int t) { return (r + g->m + t) % g->n; }
static int holder(const ftc__par_geo_t *g, int r, int j) { return (r + j) % g->n; }

/* Copies chunk t of a shard zero-padded to d*C bytes into out (C bytes). */
static void chunk_of(const uint8_t *shard, uint64_t size, int t, uint64_t C, uint8_t *out)
{
    uint64_t off = (uint64_t)t * C, n = off < size ? size - off : 0;
    if (n > C)
        n = C;
    if (n)
        memcpy(out, shard + off, n);
    memset(out + n, 0, C - n);
}

int ftc__par_encode(const ftc__par_geo_t *geo, const char *job, uint64_t step, uint64_t gen,
                    uint32_t local, const uint8_t *const *shards, const uint64_t *sizes,
                    const uint32_t *ranks, uint8_t **wraps, uint64_t *wrap_sizes, ftc_err_t *err)
{
    int n = geo->n, m = geo->m, d = geo->d;
    uint64_t mx = 0, heads[FTC_PARITY_MAX];
    for (int i = 0; i < n; i++)
        wraps[i] = NULL; /* every one, before an early return */
    int real = 0;
    for (int i = 0; i < n; i++) {
        ftc_shard_view_t v;
        if (ranks[i] == FTC_PAR_IDLE) { /* the virtual zero shard */
            if (shards[i] || sizes[i])
                return ftc_err_set(err, FTC_EINVAL, "parity encode: idle member %d has a shard "
                                   "(%" PRIu64 " bytes)", i, sizes[i]);
            heads[i] = 0;
            continue;
        }
        real++;
        if (ftc_shard_open(&v, shards[i], sizes[i], 0, err) != 0)
            return err->code;
        if (v.info.step != step)
            return ftc_err_set(err, FTC_ECORRUPT,
                               "parity encode: member %d's shard is of step %" PRIu64
                               ", not %" PRIu64,
                               i, v.info.step, step);
        if (v.info.generation != gen) /* a slot an earlier generation left */
            return ftc_err_set(err, FTC_ESTALE,
                               "parity encode: member %d's shard of step %" PRIu64
                               " is of generation %" PRIu64 ", not %" PRIu64,
                               i, step, v.info.generation, gen);
        heads[i] = v.head_xxh3;
        mx = sizes[i] > mx ? sizes[i] : mx;
    }
    if (!real)
        return ftc_err_set(err, FTC_EINVAL, "parity encode: every member of the stripe is idle");
    uint64_t C = ftc_parity_block_len((mx + (uint64_t)d - 1) / (uint64_t)d);
    ftc_parity_t *code = ftc_parity_create(d, m, geo->xor_code, err);
    if (!code)
        return err->code;
    int rc = 0;
    uint8_t *tmp = calloc((size_t)d, C);
    uint8_t *par[FTC_PARITY_MAX], *parp[FTC_PARITY_MAX][FTC_PARITY_MAX];
    uint64_t meta[META_FIXED + 3 * FTC_PARITY_MAX];
    if (!tmp) {
        rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory (%d x %" PRIu64 " bytes)",
                         d, C);
        goto out;
    }
    /* one wrapper per member: meta + its m parity chunks */
    for (int h = 0; h < n && !rc; h++) {
        ftc_shard_info_t in;
        memset(&in, 0, sizeof in);
        snprintf(in.job_id, sizeof in.job_id, "%s", job);
        in.step = step;
        in.generation = gen;
        in.dp = in.tp = in.pp = 1;
        ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
        if (!l) {
            rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory");
            break;
        }
        uint64_t ml = META_LEN(n);
        rc = ftc_shard_layout_add_tensor(l, "parity.meta", FTC_DTYPE_I64, 1, &ml, err) < 0;
        for (int j = 0; j < m && !rc; j++) {
            char name[32];
            snprintf(name, sizeof name, "parity.%d", j);
            rc = ftc_shard_layout_add_tensor(l, name, FTC_DTYPE_U8, 1, &C, err) < 0;
        }
        if (!rc) {
            wrap_sizes[h] = ftc_shard_layout_size(l);
            wraps[h] = calloc(1, wrap_sizes[h]);
            if (!wraps[h])
                rc = ftc_err_set(err, FTC_ENOMEM, "parity encode: out of memory");
            else if (ftc_shard_layout_write(l, wraps[h], wrap_sizes[h], err))
                rc = 1;
        }
        if (!rc) {
            meta[0] = PAR_MAGIC, meta[1] = (uint64_t)n, meta[2] = (uint64_t)m;
            meta[3] = (uint64_t)d, meta[4] = C, meta[5] = (uint64_t)h, meta[6] = group_id(geo);
            meta[7] = local, meta[8] = step, meta[9] = geo->xor_code;
            for (int i = 0; i < n; i++) {
                meta[META_FIXED + 3 * i] = ranks[i];
                meta[META_FIXED + 3 * i + 1] = sizes[i];
                meta[META_FIXED + 3 * i + 2] = heads[i];
            }
            memcpy(ftc_shard_payload_ptr(l, wraps[h], 0), meta, ml * 8); /* little-endian hosts */
            for (int j = 0; j < m; j++)
                parp[h][j] = ftc_shard_payload_ptr(l, wraps[h], (uint32_t)(1 + j));
        }
        ftc_shard_layout_destroy(l);
        if (rc && !err->code)
            rc = ftc_err_set(err, FTC_EINVAL, "parity encode: layout failed");
        else if (rc)
            rc = err->code;
    }
    /* row r: data chunks -> parity j into holder (r+j)'s tensor parity.j */
    for (int r = 0; r < n && !rc; r++) {
        const uint8_t *dp[FTC_PARITY_MAX];
        for (int t = 0; t < d; t++) {
            int i = data_member(geo, r, t);
            chunk_of(shards[i], sizes[i], t, C, tmp + (uint64_t)t * C);
            dp[t] = tmp + (uint64_t)t * C;
        }
        for (int j = 0; j < m; j++)
            par[j] = parp[holder(geo, r, j)][j];
        if (!rc && ftc_parity_encode(code, dp, par, C, err))
            rc = err->code;
    }
    for (int h = 0; h < n && !rc; h++)
        if (ftc_shard_seal(wraps[h], wrap_sizes[h], 1, err))
            rc = err->code;
out:
    free(tmp);
    ftc_parity_destroy(code);
    if (rc)
        for (int i = 0; i < n; i++) {
            free(wraps[i]);
            wraps[i] = NULL;
        }
    return rc;
}

/* Reads a wrapper's meta (verifying the whole wrapper). false when unusable. */
static bool wrap_meta(const uint8_t *w, uint64_t size, uint64_t step, const uint64_t **meta,
                      uint64_t *mlen, ftc_shard_view_t *v)
{
    ftc_err_t e = {0};
    if (!w || ftc_shard_open(v, w, size, FTC_SHARD_VERIFY, &e) || v->info.step != step ||
        v->n_tensors < 2)
        return false;
    ftc_shard_tensor_t t;
    ftc_shard_get(v, 0, &t);
    if (t.dtype != FTC_DTYPE_I64 || t.length < META_FIXED * 8)
        return false;
    *meta = (const uint64_t *)(const void *)t.data; /* payloads are 64-byte aligned */
    *mlen = t.length / 8;
    return (*meta)[0] == PAR_MAGIC && *mlen == META_LEN((*meta)[1]);
}

int ftc__par_rebuild(const ftc__par_geo_t *geo, uint64_t step, uint32_t local, int lost,
                     const uint8_t *const *data, const uint64_t *dsizes,
                     const uint8_t *const *wraps, const uint64_t *wsizes, uint8_t **out,
                     uint64_t *out_size, bool *xor_code, ftc_err_t *err)
{
    int n = geo->n, m = geo->m, d = geo->d;
    *out = NULL;
    /* the reference version: the wrapper whose member table agrees with the
     * most surviving data shards (all wrappers of one encode agree) */
    const uint64_t *ref = NULL;
    uint64_t ref_len = 0;
    int ref_score = -1;
    char notes[400] = "", gs[200];
    for (int h = 0; h < n; h++) {
        const uint64_t *mt;
        uint64_t ml;
        ftc_shard_view_t v;
        if (!wrap_meta(wraps[h], wsizes[h], step, &mt, &ml, &v))
            continue;
        if (mt[1] != (uint64_t)n || mt[2] != (uint64_t)m || mt[3] != (uint64_t)d ||
            mt[5] != (uint64_t)h || mt[6] != group_id(geo) || mt[7] != local || mt[8] != step)
            continue;
        int score = 0;
        for (int i = 0; i < n; i++) {
            ftc_shard_view_t dv;
            ftc_err_t e = {0};
            if (data[i] && dsizes[i] == mt[META_FIXED + 3 * i + 1] &&
                ftc_shard_open(&dv, data[i], dsizes[i], 0, &e) == 0 &&
                dv.head_xxh3 == mt[META_FIXED + 3 * i + 2])
                score++;
        }
        if (score > ref_score)
            ref = mt, ref_len = ml, ref_score = score;
    }
    if (!ref)
        return ftc_err_set(err, FTC_ENOENT,
                           "no verified parity of step %" PRIu64 " (%s, local %u)", step,
                           ftc__par_geo_str(geo, gs, sizeof gs), local);
    uint64_t C = ref[4];
    uint64_t want = ref[META_FIXED + 3 * lost + 1], want_head = ref[META_FIXED + 3 * lost + 2];
    bool idle[FTC_PARITY_MAX];
    for (int i = 0; i < n; i++)
        idle[i] = ref[META_FIXED + 3 * i] == FTC_PAR_IDLE;
    if (idle[lost])
        return ftc_err_set(err, FTC_EINVAL, "member %d (node %u) is idle in step %" PRIu64
                           " (no rank at local index %u): nothing to rebuild",
                           lost, geo->node[lost], step, local);
    if (C == 0 || C % 64 || C > (1ull << 40) || want > C * (uint64_t)d || ref[9] > 1 ||
        (ref[9] && m != 1))
        return ftc_err_set(err, FTC_ECORRUPT, "parity meta of step %" PRIu64 " is inconsistent",
                           step);
    /* usable pieces: data shards of exactly the recorded version, wrappers
     * whose meta equals the reference */
    bool have_data[FTC_PARITY_MAX], have_wrap[FTC_PARITY_MAX];
    const uint8_t *pchunk[FTC_PARITY_MAX][FTC_PARITY_MAX];
    for (int i = 0; i < n; i++) {
        ftc_shard_view_t dv;
        ftc_err_t e = {0};
        have_data[i] = i != lost &&
                       (idle[i] || /* the virtual zero shard */
                        (data[i] && dsizes[i] == ref[META_FIXED + 3 * i + 1] &&
                         ftc_shard_open(&dv, data[i], dsizes[i], 0, &e) == 0 &&
                         dv.head_xxh3 == ref[META_FIXED + 3 * i + 2]));
        if (i != lost && data[i] && !have_data[i]) {
            size_t nl = strlen(notes);
            snprintf(notes + nl, sizeof notes - nl, "; member %d's shard is another version", i);
        }
        const uint64_t *mt;
        uint64_t ml;
        ftc_shard_view_t v;
        have_wrap[i] = wrap_meta(wraps[i], wsizes[i], step, &mt, &ml, &v) && ml == ref_len &&
                       !memcmp(mt + 1, ref + 1, 4 * 8) && !memcmp(mt + 6, ref + 6, (ml - 6) * 8) &&
                       v.n_tensors == (uint32_t)(1 + m);
        for (int j = 0; have_wrap[i] && j < m; j++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&v, (uint32_t)(1 + j), &t);
            if (t.length != C)
                have_wrap[i] = false;
            pchunk[i][j] = t.data;
        }
    }
    /* the code the parity was encoded with, as recorded: xor:G and rs:G+1
     * share the geometry, so a job restarted with the other one still
     * decodes (its configured code would rebuild garbage) */
    ftc_parity_t *code = ftc_parity_create(d, m, ref[9] != 0, err);
    if (!code)
        return err->code;
    uint64_t full = C * (uint64_t)d;
    uint8_t *res = calloc(1, full);
    uint8_t *blk = calloc((size_t)(d + m), C);
    int rc = 0;
    if (!res || !blk) {
        rc = ftc_err_set(err, FTC_ENOMEM, "parity rebuild: out of memory");
        goto out;
    }
    for (int t = 0; t < d && !rc; t++) {
        int r = row_of(geo, lost, t);
        uint8_t *b[FTC_PARITY_MAX];
        bool gone[FTC_PARITY_MAX];
        int ngone = 0;
        char missing[160] = "";
        for (int k = 0; k < d + m; k++) {
            b[k] = blk + (uint64_t)k * C;
            int who = k < d ? data_member(geo, r, k) : holder(geo, r, k - d);
            bool ok = k < d ? have_data[who] : have_wrap[who];
            if (ok && k < d && idle[who])
                memset(b[k], 0, C); /* the virtual zero shard */
            else if (ok && k < d)
                chunk_of(data[who], dsizes[who], k, C, b[k]);
            else if (ok)
                memcpy(b[k], pchunk[who][k - d], C);
            gone[k] = !ok;
            if (!ok) {
                ngone++;
                if (who != lost) {
                    size_t ml = strlen(missing);
                    snprintf(missing + ml, sizeof missing - ml, "%s%s of node %u",
                             ml ? ", " : "", k < d ? "data" : "parity", geo->node[who]);
                }
            }
        }
        if (ngone > m) {
            rc = ftc_err_set(err, FTC_ERANGE,
                             "parity row %d of step %" PRIu64 " lost %d of %d pieces (code "
                             "tolerates %d): missing %s%s",
                             r, step, ngone, d + m, m, missing, notes);
            break;
        }
        if (ftc_parity_decode(code, b, gone, C, err)) {
            rc = err->code;
            break;
        }
        memcpy(res + (uint64_t)t * C, b[t], C);
    }
    if (!rc) {
        ftc_shard_view_t v;
        ftc_err_t e = {0};
        if (ftc_shard_open(&v, res, want, FTC_SHARD_VERIFY, &e) || v.head_xxh3 != want_head ||
            v.info.step != step)
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "the shard of node %u rebuilt from parity does not verify against "
                             "its recorded checksum: %s",
                             geo->node[lost],
                             e.msg[0] ? e.msg : "head checksum or step differs");
    }
out:
    free(blk);
    ftc_parity_destroy(code);
    if (rc) {
        free(res);
        return rc;
    }
    *out = res;
    *out_size = want;
    if (xor_code)
        *xor_code = ref[9] != 0;
    return 0;
}

int ftc__par_store_local(const char *ns, uint32_t local, const uint8_t *wrap, uint64_t size,
                         int64_t keep, ftc_err_t *err)
{
    /* write the slot that does not hold the newest wrapper (I3), and never
     * the one holding step `keep` (the committed version: when the version
     * after it was encoded but not committed, the newest wrapper is that
     * one's and the committed one's is the older) */
    int target = 0;
    uint64_t newest = 0;
    bool any = false;
    int64_t held[2] = {-1, -1};
    uint64_t have[2] = {0, 0};
    char name[2][FTC_SLOT_NAME_MAX];
    for (int i = 0; i < 2; i++) {
        if (ftc_slot_name(ns, FTC_PAR_OWNER(local), i, name[i], sizeof name[i], err))
            return err->code;
        ftc_slot_t s;
        ftc_err_t e = {0};
        if (ftc_slot_open(name[i], false, &s, &e))
            continue;
        have[i] = s.size;
        ftc_shard_view_t v;
        uint64_t total;
        if (ftc_shard_peek_size(s.base, s.size, &total, &e) == 0 && total <= s.size &&
            ftc_shard_open(&v, s.base, total, 0, &e) == 0) {
            held[i] = (int64_t)v.info.step;
            if (!any || v.info.step > newest) {
                any = true;
                newest = v.info.step;
                target = 1 - i;
            }
        }
        ftc_slot_close(&s);
    }
    if (keep >= 0 && held[target] == keep && held[1 - target] != keep)
        target = 1 - target;
    /* another size (a layout change): a new file, not the old one resized
     * in place, which would SIGBUS a thread that has it mapped (a read or
     * a rebuild copying it) past its new end; the mapping keeps the old */
    ftc_err_t ue = {0};
    if (have[target] && have[target] != size)
        ftc_slot_unlink(name[target], &ue);
    ftc_slot_t s;
    if (ftc_slot_create(name[target], size, &s, err))
        return err->code;
    memcpy(s.base, wrap, size);
    ftc_slot_close(&s);
    return 0;
}

int ftc__par_read_local(const char *ns, uint32_t owner, uint64_t step, uint8_t **buf,
                        uint64_t *size, ftc_err_t *err)
{
    *buf = NULL;
    *size = 0;
    char why[160] = "no slot";
    /* a rank's slots (FTC_AP_SLOTS_PER_RANK: its committed shard may be in
     * the third), then the previous layout's; a wrapper uses 0 and 1 */
    for (int i = 0; i < 2 * FTC_AP_SLOTS_PER_RANK; i++) {
        char name[FTC_SLOT_NAME_MAX];
        ftc_err_t e = {0};
        ftc_slot_t s;
        int k = i % FTC_AP_SLOTS_PER_RANK;
        if ((i < FTC_AP_SLOTS_PER_RANK ? ftc_slot_name(ns, owner, k, name, sizeof name, &e)
                                       : ftc_slot_name_prev(ns, owner, k, name, sizeof name, &e)) ||
            ftc_slot_open(name, false, &s, &e))
            continue;
        ftc_shard_view_t v;
        uint64_t total = 0;
        bool ok = ftc_shard_peek_size(s.base, s.size, &total, &e) == 0 && total <= s.size &&
                  ftc_shard_open(&v, s.base, total, 0, &e) == 0 && v.info.step == step;
        uint8_t *copy = ok ? malloc(total ? total : 1) : NULL;
        if (copy)
            memcpy(copy, s.base, total); /* copied first: the slot may be rewritten */
        ftc_slot_close(&s);
        if (ok && !copy)
            return ftc_err_set(err, FTC_ENOMEM, "out of memory copying %s", name);
        if (!ok)
            continue;
        /* the copy, verified: a torn or corrupted slot counts as missing */
        if (ftc_shard_open(&v, copy, total, FTC_SHARD_VERIFY, &e) == 0 && v.info.step == step) {
            *buf = copy;
            *size = total;
            return 0;
        }
        snprintf(why, sizeof why, "%s fails verification: %s", name, e.msg);
        free(copy);
    }
    return ftc_err_set(err, FTC_ENOENT, "step %" PRIu64 " of owner %" PRIu32 " not in this "
                       "node's slots (%s)", step, owner, why);
}

/* ---- the parity worker ------------------------------------------------------ */

struct ftc__par_worker {
    pthread_t tid[FTC_PAR_WORKERS_MAX];
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ftc__par_task_t *todo, *done; /* todo FIFO; done newest first */
    bool stop;
    int evfd;
};

void ftc__par_task_free(ftc__par_task_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < FTC_PARITY_MAX; i++) {
        free(t->bufs[i]);
        free(t->wraps[i]);
    }
    free(t->out);
    free(t);
}

static void rebuild_run(ftc__par_task_t *t)
{
    ftc_err_t err = {0};
    const uint8_t *data[FTC_PARITY_MAX], *wraps[FTC_PARITY_MAX];
    for (int i = 0; i < FTC_PARITY_MAX; i++)
        data[i] = t->bufs[i], wraps[i] = t->wraps[i];
    t->rc = ftc__par_rebuild(&t->geo, t->step, t->local, t->geo.member, data, t->sizes, wraps,
                             t->wsizes, &t->out, &t->out_size, &t->out_xor, &err);
    if (t->rc)
        snprintf(t->detail, sizeof t->detail, "%s", err.msg[0] ? err.msg : ftc_strerror(t->rc));
    for (int i = 0; i < FTC_PARITY_MAX; i++) { /* the pieces are not needed any more */
        free(t->bufs[i]);
        free(t->wraps[i]);
        t->bufs[i] = t->wraps[i] = NULL;
    }
}

void ftc__par_task_run(ftc__par_task_t *t)
{
    uint64_t t0 = ftc_now_ns();
    if (t->rebuild) {
        t->detail[0] = 0;
        rebuild_run(t);
        t->ms = (double)(ftc_now_ns() - t0) / 1e6;
        return;
    }
    ftc__par_geo_t *g = &t->geo;
    ftc_err_t err = {0};
    ftc_slot_t sl;
    memset(&sl, 0, sizeof sl);
    sl.fd = -1;
    t->rc = 0;
    t->detail[0] = 0;
    if (ftc_slot_open(t->slot_name, false, &sl, &err) == 0 && sl.size < t->slot_size)
        ftc_err_set(&err, FTC_ECORRUPT, "slot %s holds %" PRIu64 " bytes, not %" PRIu64,
                    t->slot_name, sl.size, t->slot_size);
    ftc_shard_view_t v;
    if (!err.code && (ftc_shard_open(&v, sl.base, t->slot_size, FTC_SHARD_VERIFY, &err) == 0) &&
        v.info.step != t->step) /* never encode a shard that does not verify (I1) */
        ftc_err_set(&err, FTC_ECORRUPT, "the slot holds step %" PRIu64 ", not %" PRIu64,
                    v.info.step, t->step);
    if (!err.code) {
        const uint8_t *shards[FTC_PARITY_MAX];
        for (int i = 0; i < g->n; i++)
            shards[i] = i == g->member ? sl.base : t->bufs[i];
        uint64_t sizes[FTC_PARITY_MAX];
        memcpy(sizes, t->sizes, sizeof sizes);
        sizes[g->member] = t->slot_size;
        if (ftc__par_encode(g, t->job, t->step, t->gen, t->local, shards, sizes, t->ranks,
                            t->wraps, t->wsizes, &err) == 0 &&
            ftc__par_store_local(t->ns, t->local, t->wraps[g->member], t->wsizes[g->member],
                                 t->keep, &err) == 0) {
            for (int i = 0; i < g->n; i++) {
                ftc_shard_view_t hv;
                ftc_err_t e = {0};
                t->heads[i] = 0; /* an idle member's virtual zero shard */
                if (t->ranks[i] != FTC_PAR_IDLE &&
                    ftc_shard_open(&hv, shards[i], sizes[i], 0, &e) == 0) /* opened by the encode */
                    t->heads[i] = hv.head_xxh3;
            }
        }
    }
    ftc_slot_close(&sl);
    if (err.code) {
        t->rc = err.code;
        snprintf(t->detail, sizeof t->detail, "%s", err.msg[0] ? err.msg : ftc_strerror(err.code));
        for (int i = 0; i < FTC_PARITY_MAX; i++) {
            free(t->wraps[i]);
            t->wraps[i] = NULL;
        }
    }
    for (int i = 0; i < FTC_PARITY_MAX; i++) { /* the gathered shards are not needed any more */
        free(t->bufs[i]);
        t->bufs[i] = NULL;
    }
    t->ms = (double)(ftc_now_ns() - t0) / 1e6;
}

static void *worker_main(void *arg)
{
    ftc__par_worker_t *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        ftc__par_task_t *t = w->todo;
        if (!t) {
            /* woken by submit or stop; the timeout only bounds a lost wakeup */
            struct timespec ts = ftc_cond_abstime(ftc_deadline_in_ms(200));
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
            continue;
        }
        w->todo = t->next;
        pthread_mutex_unlock(&w->mu);
        ftc__par_task_run(t);
        pthread_mutex_lock(&w->mu);
        t->next = w->done;
        w->done = t;
        uint64_t one = 1;
        ssize_t wr = write(w->evfd, &one, sizeof one);
        (void)wr;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ftc__par_worker_t *ftc__par_worker_start(int evfd, int threads, ftc_err_t *err)
{
    ftc__par_worker_t *w = calloc(1, sizeof *w);
    if (!w) {
        ftc_err_set(err, FTC_ENOMEM, "parity worker: out of memory");
        return NULL;
    }
    w->evfd = evfd;
    pthread_mutex_init(&w->mu, NULL);
    ftc_cond_init(&w->cv); /* (monotonic timed waits) */
    if (threads < 1)
        threads = 1;
    if (threads > FTC_PAR_WORKERS_MAX)
        threads = FTC_PAR_WORKERS_MAX;
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&w->tid[i], NULL, worker_main, w) != 0) {
            if (i > 0)
                break; /* fewer threads than asked: still a pool */
            pthread_cond_destroy(&w->cv);
            pthread_mutex_destroy(&w->mu);
            free(w);
            ftc_err_set(err, FTC_ENOMEM, "agent: cannot start the parity worker thread");
            return NULL;
        }
        w->nthreads = i + 1;
    }
    return w;
}

int ftc__par_worker_threads(const ftc__par_worker_t *w)
{
    return w ? w->nthreads : 0;
}

void ftc__par_worker_submit(ftc__par_worker_t *w, ftc__par_task_t *t)
{
    pthread_mutex_lock(&w->mu);
    t->next = NULL;
    ftc__par_task_t **p = &w->todo;
    while (*p)
        p = &(*p)->next;
    *p = t;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

ftc__par_task_t *ftc__par_worker_take(ftc__par_worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    ftc__par_task_t *d = w->done, *out = NULL;
    w->done = NULL;
    pthread_mutex_unlock(&w->mu);
    while (d) { /* reverse: oldest first */
        ftc__par_task_t *t = d;
        d = t->next;
        t->next = out;
        out = t;
    }
    return out;
}

void ftc__par_worker_stop(ftc__par_worker_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->tid[i], NULL);
    ftc__par_task_t *lists[2] = {w->todo, w->done};
    for (int l = 0; l < 2; l++)
        while (lists[l]) {
            ftc__par_task_t *t = lists[l];
            lists[l] = t->next;
            ftc__par_task_free(t);
        }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- gather ------------------------------------------------------------------ */

/* A local item: a verified copy of this node's own piece. */
static void gather_local(ftc_repl_t *r, const ftc__gather_t *g, ftc__gitem_t *it)
{
    const uint8_t *held = NULL;
    uint64_t hs = 0;
    ftc_err_t e = {0};
    it->done = true;
    if (r && ftc_repl_held_step(r, it->owner, g->step, &held, &hs) == 0) {
        ftc_shard_view_t v;
        uint8_t *copy = malloc(hs ? hs : 1);
        if (copy) {
            memcpy(copy, held, hs);
            if (ftc_shard_open(&v, copy, hs, FTC_SHARD_VERIFY, &e) == 0 &&
                v.info.step == g->step) {
                it->buf = copy;
                it->size = hs;
                it->rc = 0;
                return;
            }
            free(copy);
        }
    }
    it->rc = ftc__par_read_local(g->ns, it->owner, g->step, &it->buf, &it->size, &e);
    if (it->rc)
        snprintf(it->detail, sizeof it->detail, "%s", e.msg);
}

/* A fetched data shard of another generation than g->gen (when set): freed,
 * it->rc FTC_ESTALE (asked again, like a shard not held yet). */
static void gather_check_gen(const ftc__gather_t *g, ftc__gitem_t *it)
{
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    if (!g->gen || it->wrapper || !it->buf ||
        (ftc_shard_open(&v, it->buf, it->size, 0, &e) == 0 && v.info.generation == g->gen))
        return;
    it->rc = FTC_ESTALE;
    if (e.code)
        snprintf(it->detail, sizeof it->detail, "%s", e.msg);
    else
        snprintf(it->detail, sizeof it->detail, "node %u served its slot of step %" PRIu64
                 " of generation %" PRIu64 ", not %" PRIu64 " (left by an earlier "
                 "generation)", it->peer, g->step, v.info.generation, g->gen);
    free(it->buf);
    it->buf = NULL;
    it->size = 0;
}

/* Whether g's step is one the agent knows aborted (g->stop). */
static bool gather_stopped(const ftc__gather_t *g)
{
    for (int i = 0; g->stop && i < g->nstop; i++)
        if (atomic_load(&g->stop[i]) == g->step + 1)
            return true;
    return false;
}

bool ftc__gather_poll(ftc_repl_t *r, ftc__gather_t *g, bool broken)
{
    bool all = true;
    uint64_t now = ftc_now_ns();
    bool stopped = gather_stopped(g);
    for (int i = 0; i < g->n; i++) {
        ftc__gitem_t *it = &g->it[i];
        if (it->done)
            continue;
        if (it->local) {
            gather_local(r, g, it);
            continue;
        }
        if (it->started) {
            ftc_repl_status_t st = {0};
            int sr = broken ? 0 : ftc_repl_status(r, it->x, &st);
            if (sr) { /* an unknown transfer would never finish: count it failed */
                memset(&st, 0, sizeof st);
                st.done = true;
                st.rc = sr;
                snprintf(st.detail, sizeof st.detail, "the transfer's status is unavailable");
            }
            if (!broken && st.done) {
                it->rc = st.rc;
                snprintf(it->detail, sizeof it->detail, "%s", st.detail);
                if (st.rc == 0) {
                    ftc_repl_take(r, it->x, &it->buf, &it->size);
                    gather_check_gen(g, it);
                }
                ftc_repl_release(r, it->x);
                it->started = false;
                if (it->rc == 0) {
                    it->done = true;
                    continue;
                }
            } else if (broken) {
                it->started = false; /* the engine goes away with it */
                it->rc = FTC_EFABRIC;
                snprintf(it->detail, sizeof it->detail, "the fabric endpoint broke");
            } else {
                all = false;
                continue;
            }
            if (it->attempts >= g->max_attempts || ftc_deadline_expired(g->d) || stopped) {
                it->done = true;
                continue;
            }
            it->retry_ns = now + (uint64_t)g->retry_ms * 1000000ull;
        }
        all = false;
        if (stopped) {
            it->done = true;
            it->rc = FTC_ECANCELED;
            snprintf(it->detail, sizeof it->detail, "step %" PRIu64 " was aborted (a rank's "
                     "snapshot of it failed)", g->step);
            continue;
        }
        if (broken || now < it->retry_ns)
            continue;
        if (ftc_deadline_expired(g->d)) {
            it->done = true;
            if (!it->rc) {
                it->rc = FTC_ETIMEDOUT;
                snprintf(it->detail, sizeof it->detail, "not started before the deadline");
            }
            continue;
        }
        it->attempts++;
        int rc = ftc_repl_fetch(r, it->peer, it->owner, g->step, g->d, &it->x);
        if (rc) {
            it->rc = rc;
            snprintf(it->detail, sizeof it->detail, "%s", ftc_repl_errstr(r));
            if (it->attempts >= g->max_attempts)
                it->done = true;
            else
                it->retry_ns = now + (uint64_t)g->retry_ms * 1000000ull;
            continue;
        }
        it->started = true;
    }
    if (all)
        for (int i = 0; i < g->n; i++)
            if (!g->it[i].done)
                all = false;
    return all;
}

void ftc__gather_free(ftc__gather_t *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->it[i].buf);
    free(g);
}
