/*
 * agent_stripe.c — the agent's parity groups (redundancy xor:G / rs:G+M;
 * agent_internal.h): the layout of a generation, the encoder's gather and
 * encode, the parity pushes, and a rebuild of a lost member's shard. The
 * pure parts (geometry, code, wrappers) are in agent_parity.c.
 */
#include "ckpt/agent_internal.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parity groups (redundancy xor:G / rs:G+M; agent_parity.h, docs/agent.md) -------------- */


void ftc__job_free(ftc__job_t *j)
{
    ftc__gather_free(j->gather);
    if (j->buf != j->dst)
        free(j->buf);
    free(j);
}

static void ftc__where_free(ftc__where_t *w)
{
    free(w->node);
    free(w->local);
    free(w->members);
    memset(w, 0, sizeof *w);
}

/* The agent index of node id nid, or UINT32_MAX while unknown. */
static uint32_t ftc__node_of_id(const ftc_agent_t *a, const char *nid)
{
    if (!strcmp(nid, a->node_id))
        return a->o.index;
    for (uint32_t i = 0; i < a->o.nodes; i++)
        if (a->peers[i].known && !strcmp(a->peers[i].node_id, nid))
            return i;
    return UINT32_MAX;
}

static int ftc__cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

bool ftc__plan_ranks_parse(const char *ranks, uint32_t nm, uint32_t **member, uint32_t **local,
                           uint32_t *n)
{
    uint32_t cap = 64, k = 0;
    uint32_t *mv = malloc(cap * sizeof *mv), *lv = malloc(cap * sizeof *lv);
    char *copy = strdup(ranks);
    bool ok = mv && lv && copy;
    for (char *sv = NULL, *t = ok ? strtok_r(copy, " ", &sv) : NULL; t && ok;
         t = strtok_r(NULL, " ", &sv)) {
        /* digits:digits, nothing else: sscanf("%u:%u") took "0:-1" as local
         * index 2^32-1 and "1:2x" as 1:2 */
        char *colon = strchr(t, ':');
        uint64_t m = 0, l = 0;
        if (colon)
            *colon = 0;
        if (!colon || ftc_parse_u64(t, &m) || ftc_parse_u64(colon + 1, &l) || m >= nm ||
            l > UINT32_MAX) {
            ok = false;
            break;
        }
        if (k == cap) {
            cap *= 2;
            uint32_t *nn = realloc(mv, cap * sizeof *nn);
            if (nn)
                mv = nn;
            uint32_t *nl = realloc(lv, cap * sizeof *nl);
            if (nl)
                lv = nl;
            if (!nn || !nl) {
                ok = false;
                break;
            }
        }
        mv[k] = (uint32_t)m;
        lv[k++] = (uint32_t)l;
    }
    free(copy);
    if (!ok) {
        free(mv);
        free(lv);
        return false;
    }
    *member = mv;
    *local = lv;
    *n = k;
    return true;
}

/* The locations of generation gen's ranks (cached); NULL while a member of
 * its plan has no known agent yet, or while Redis does not answer (the
 * caller retries; a->par->where_why says which). */
static const ftc__where_t *ftc__where(ftc_agent_t *a, uint64_t gen)
{
    for (int i = 0; i < 2; i++)
        if (a->par->where[i].gen == gen && gen)
            return &a->par->where[i];
    char key[200], suffix[48];
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, gen);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL, **el = NULL;
    size_t n = 0;
    const char *mv = NULL, *rv = NULL;
    size_t ml = 0, rl = 0;
    if (ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HMGET", key, "members", "ranks",
                       NULL) != 0) {
        ftc_redis_reply_free(rep);
        snprintf(a->par->where_why, sizeof a->par->where_why,
                 "Redis did not answer the read of generation %" PRIu64 "'s plan (%s): is the "
                 "job's Redis up?",
                 gen, ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
        return NULL; /* not cached as "no plan" (retried) */
    }
    bool planned = ftc_redis_want_array(rep, "HMGET plan", 2, &el, &n, NULL) == 0 &&
                   ftc_redis_want_str(el[0], "plan", &mv, &ml, NULL) == 0 &&
                   ftc_redis_want_str(el[1], "plan", &rv, &rl, NULL) == 0 && ml && rl;
    ftc__where_t w = {.gen = gen, .planned = planned};
    char *members = planned ? strndup(mv, ml) : NULL, *ranks = planned ? strndup(rv, rl) : NULL;
    ftc_redis_reply_free(rep);
    bool ok = true, said = false; /* said: where_why is set */
    if (planned && members && ranks) {
        uint32_t *idx = calloc((size_t)a->o.nodes + 1, sizeof *idx);
        uint32_t nm = 0;
        ok = idx != NULL;
        for (char *sv = NULL, *t = strtok_r(members, " ", &sv); t && ok;
             t = strtok_r(NULL, " ", &sv)) {
            ok = nm < a->o.nodes;
            if (ok && (idx[nm++] = ftc__node_of_id(a, t)) == UINT32_MAX) {
                ok = false; /* not known yet */
                said = true;
                snprintf(a->par->where_why, sizeof a->par->where_why,
                         "the layout of generation %" PRIu64 " (ftc run's plan) names node %.64s, "
                         "whose agent is not known (it never published its address)",
                         gen, t);
            }
        }
        ok = ok && ftc__plan_ranks_parse(ranks, nm, &w.node, &w.local, &w.n);
        for (uint32_t r = 0; ok && r < w.n; r++)
            w.node[r] = idx[w.node[r]]; /* member -> agent node index */
        if (ok) { /* the members in ascending node index, each once */
            qsort(idx, nm, sizeof *idx, ftc__cmp_u32);
            for (uint32_t i = 1; i < nm && ok; i++)
                ok = idx[i] != idx[i - 1];
            w.members = idx;
            w.nm = nm;
            idx = NULL;
        }
        free(idx);
    } else if (planned) {
        ok = false;
        said = true;
        snprintf(a->par->where_why, sizeof a->par->where_why, "out of memory reading a plan");
    }
    free(members);
    free(ranks);
    if (!ok) {
        if (!said)
            snprintf(a->par->where_why, sizeof a->par->where_why,
                     "the layout of generation %" PRIu64 " (ftc run's plan) in Redis is not "
                     "valid (members or ranks)",
                     gen);
        ftc__where_free(&w);
        return NULL;
    }
    /* replace the older entry */
    int slot = a->par->where[0].gen <= a->par->where[1].gen ? 0 : 1;
    ftc__where_free(&a->par->where[slot]);
    a->par->where[slot] = w;
    return &a->par->where[slot];
}

/* The nodes of generation gen: *members (ascending node indices, valid
 * until the next ftc__where) or NULL for all of 0..nodes-1 (no plan: agents
 * started by hand); false while a member of its plan is not known yet. */
static bool ftc__gen_nodes(ftc_agent_t *a, uint64_t gen, const uint32_t **members, uint32_t *nm)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w)
        return false;
    *members = w->planned ? w->members : NULL;
    *nm = w->planned ? w->nm : a->o.nodes;
    return true;
}

/* Rank -> (agent node index, local index) in generation gen; false while
 * unknown (a plan member not known yet, or a rank outside the plan). */
static bool ftc__par_locate(ftc_agent_t *a, uint64_t gen, uint32_t rank, uint32_t *node,
                            uint32_t *local)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w)
        return false;
    if (!w->planned) {
        *node = rank / a->o.ranks_per_node;
        *local = rank % a->o.ranks_per_node;
        return true;
    }
    if (rank >= w->n)
        return false;
    *node = w->node[rank];
    *local = w->local[rank];
    return true;
}

/* The rank on (node, local) in generation gen; UINT32_MAX if none (an idle
 * slot). Callers have located a rank of gen first (ftc__par_locate), so its
 * plan is cached; without a plan (agents started by hand) rank = node x
 * ranks_per_node + local. */
static uint32_t ftc__par_rank_on(ftc_agent_t *a, uint64_t gen, uint32_t node, uint32_t local)
{
    const ftc__where_t *w = ftc__where(a, gen);
    if (!w || !w->planned)
        return node * a->o.ranks_per_node + local;
    for (uint32_t r = 0; r < w->n; r++)
        if (w->node[r] == node && w->local[r] == local)
            return r;
    return UINT32_MAX;
}

/* The rank on (this node's group's member, local) in generation gen. */
static uint32_t ftc__par_rank_at(ftc_agent_t *a, uint64_t gen, int member, uint32_t local)
{
    return ftc__par_rank_on(a, gen, a->par->geo.node[member], local);
}

static uint32_t ftc__par_local(ftc_agent_t *a, const ftc__rank_t *r)
{
    uint32_t node, local;
    return ftc__par_locate(a, a->generation, r->rank, &node, &local)
               ? local
               : r->rank % a->o.ranks_per_node;
}

static uint32_t ftc__par_rank(ftc_agent_t *a, int member, uint32_t local)
{
    return ftc__par_rank_at(a, a->generation, member, local);
}

/* The published groups of generation gen (`ftc:{J}:pargroups:GEN`): 0 with
 * *text (malloc'd) or NULL when none, else a Redis error. */
static int ftc__par_groups_get_gen(ftc_agent_t *a, uint64_t gen, char **text)
{
    char key[200], suffix[48];
    *text = NULL;
    snprintf(suffix, sizeof suffix, "pargroups:%" PRIu64, gen);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    const char *v;
    size_t vl;
    int rc = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "GET", key, NULL);
    if (rc == 0 && ftc_redis_want_str(rep, "GET pargroups", &v, &vl, NULL) == 0 &&
        !(*text = strndup(v, vl)))
        rc = FTC_ENOMEM;
    ftc_redis_reply_free(rep);
    return rc;
}

/* ... of this generation */
static int ftc__par_groups_get(ftc_agent_t *a, char **text)
{
    return ftc__par_groups_get_gen(a, a->generation, text);
}

/* Node `node`'s parity group in generation gen, geo->member being node's
 * index in it: from that generation's published groups; when they are not
 * published (Redis did not answer the agents of this generation) and gen is
 * this one, from this agent's own groups. -1 with why otherwise (not
 * published, or for another redundancy or node count). */
static int ftc__par_group_of(ftc_agent_t *a, uint64_t gen, uint32_t node, ftc__par_geo_t *geo,
                             char *why, size_t cap)
{
    char *text = NULL;
    int rc = ftc__par_groups_get_gen(a, gen, &text);
    ftc_err_t err = {0};
    const uint32_t *mem = NULL;
    uint32_t nm = 0;
    if (rc == 0 && text && !ftc__gen_nodes(a, gen, &mem, &nm)) {
        snprintf(why, cap, "the plan of generation %" PRIu64 " names a node whose agent is not "
                 "known (ftc:{%s}:plan:%" PRIu64 ")", gen, a->job, gen);
        free(text);
        return -1;
    }
    if (rc == 0 && text) {
        rc = ftc__par_groups_parse_in(text, &a->o.redundancy, a->o.nodes, mem, nm, node, geo,
                                      &err);
        if (rc)
            snprintf(why, cap, "the parity groups of generation %" PRIu64 " (ftc:{%s}:"
                     "pargroups:%" PRIu64 "): %s", gen, a->job, gen, err.msg);
        free(text);
        return rc ? -1 : 0;
    }
    free(text);
    if (gen == a->generation && a->par->resolved && !a->par->few) {
        const ftc__par_geo_t *g = &a->par->geo;
        for (int i = 0; i < g->n; i++)
            if (g->node[i] == node) {
                *geo = *g;
                geo->member = i;
                return 0;
            }
        if (!g->by_domain && ftc__gen_nodes(a, gen, &mem, &nm) &&
            ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, NULL, node, geo,
                                 &err) == 0)
            return 0; /* another group of index order (this agent's are unpublished) */
    }
    snprintf(why, cap, "the parity groups of generation %" PRIu64 " are not in Redis "
             "(ftc:{%s}:pargroups:%" PRIu64 ": %s)", gen, a->job, gen,
             rc ? ftc_redis_errstr(ftc_ctl_redis(a->ctl)) : "no such key");
    return -1;
}

/* Adopts published groups: 1, or -1 (a conflict: p->why) when they do not
 * fit this agent's redundancy and node count. */
static int ftc__par_adopt(ftc_agent_t *a, const char *text, const uint32_t *mem, uint32_t nm,
                          bool ours)
{
    struct ftc__agent_par *p = a->par;
    ftc__par_geo_t g;
    ftc_err_t err = {0};
    if (ftc__par_groups_parse_in(text, &a->o.redundancy, a->o.nodes, mem, nm, a->o.index, &g,
                                 &err)) {
        snprintf(p->why, sizeof p->why, "ftc:{%s}:pargroups:%" PRIu64 ": %s", a->job,
                 a->generation, err.msg);
        p->conflict = true;
        FTC_ERROR("agent", "parity groups: %s", p->why);
        return -1;
    }
    bool same = g.n == p->geo.n && !memcmp(g.node, p->geo.node, sizeof(uint32_t) * (size_t)g.n);
    if (same) { /* the domain count this agent computed still applies */
        g.dom_max = p->geo.dom_max;
        g.dom_node = p->geo.dom_node;
    }
    p->geo = g;
    p->resolved = true;
    char gs[200];
    FTC_INFO("agent", "parity group of %s (%s; %d data + %d parity chunks per row, memory x%.2f)",
             ftc__par_geo_str(&p->geo, gs, sizeof gs),
             p->geo.by_domain ? "striped over failure domains" : "node index order", p->geo.d,
             p->geo.m, (double)p->geo.n / p->geo.d);
    if (ours)
        FTC_INFO("agent", "parity groups published for generation %" PRIu64 ": %s",
                 a->generation, text);
    else
        FTC_INFO("agent", "parity groups adopted from ftc:{%s}:pargroups:%" PRIu64 " (formed by "
                 "the first agent; every agent of the generation uses them): %s%s", a->job,
                 a->generation, text, same ? "" : " (not the ones this agent would form)");
    return 1;
}

/* Forms the parity groups, once: they never change in the agent's life, and
 * every agent of a generation uses the same ones. The first agent to form
 * them publishes them (SET NX `ftc:{J}:pargroups:GEN`, docs/redis-keys.md);
 * an agent that finds them published adopts them (validated: same
 * redundancy and node count, else a conflict, FTC_ECONFIG). Forming: without
 * a failure domain of its own the agent uses index order at once. With one
 * it needs every node's domain, which each agent publishes in Redis with its
 * fabric address (ftc__refresh_peers); it waits for them until
 * agent.timeout_ms after its start, then falls back to index order with a
 * warning (unless groups were published meanwhile). Returns 1 when formed,
 * 0 while it waits (callers retry from the poll), -1 on a conflict (p->why).
 */
int ftc__par_resolve(ftc_agent_t *a)
{
    struct ftc__agent_par *p = a->par;
    if (p->resolved)
        return 1;
    if (p->conflict)
        return -1;
    uint64_t now = ftc_now_ns();
    bool late = now >= p->resolve_by_ns;
    if (!late && now < p->next_look_ns)
        return 0; /* looked less than 100 ms ago (callers retry from the poll) */
    p->next_look_ns = now + 100000000ull;
    /* the generation's nodes: its plan's members (ftc run), else all */
    const uint32_t *wm = NULL;
    uint32_t nm = a->o.nodes;
    if (!ftc__gen_nodes(a, a->generation, &wm, &nm)) {
        /* a member's agent is not known yet (or Redis did not answer):
         * retried. Never formed over other nodes than the plan's: agents
         * that know the plan would refuse such groups. A version waiting
         * for the groups fails after its deadline (ftc__par_try_push). */
        if (late && !p->late_warned) {
            p->late_warned = true;
            FTC_WARN("agent", "parity groups of generation %" PRIu64 " (ftc:{%s}:plan:%" PRIu64
                     ") not formed after %d ms: %s; no parity groups until then",
                     a->generation, a->job, a->generation, a->o.timeout_ms, p->where_why);
        }
        return 0;
    }
    int m = a->o.redundancy.kind == FTC_RED_XOR ? 1 : a->o.redundancy.m;
    if (nm <= (uint32_t)m) {
        /* a generation shrunk below a group (the job's own node count was
         * checked at the start): commit without parity rather than never */
        p->few = p->resolved = true;
        FTC_WARN("agent", "generation %" PRIu64 " has %u node(s), a parity group needs more "
                 "than %d: checkpoints commit with %s until more nodes join", a->generation, nm,
                 m, nm > 1 ? "one replica on the next node" : "this node's memory alone");
        return 1;
    }
    uint32_t *mem = wm ? malloc(nm * sizeof *mem) : NULL; /* wm lives until the next where */
    if (wm && !mem)
        return 0; /* out of memory: retried */
    if (mem)
        memcpy(mem, wm, nm * sizeof *mem);
    /* index order over the generation's nodes, unless domains say otherwise
     * (and what an adopted text is compared with) */
    ftc__par_geo_t g;
    ftc_err_t err = {0};
    int grc_geo = ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, NULL, a->o.index,
                                       &g, &err);
    if (grc_geo == 0)
        p->geo = g;
    char *pub = NULL;
    int grc = ftc__par_groups_get(a, &pub);
    if (grc == 0 && pub) {
        int rc = ftc__par_adopt(a, pub, mem, nm, false);
        free(pub);
        free(mem);
        return rc;
    }
    if (grc && !late) {
        free(mem);
        return 0; /* Redis unreachable: retried */
    }
    uint32_t missing = 0, first_missing = 0, no_domain = 0;
    for (uint32_t k = 0; k < nm && a->domain[0]; k++) {
        uint32_t i = mem ? mem[k] : k;
        if (i == a->o.index)
            continue;
        if (!a->peers[i].known && !missing++)
            first_missing = i;
        if (a->peers[i].known && !a->peers[i].domain[0])
            no_domain++;
    }
    if (missing && !late) {
        free(mem);
        return 0;
    }
    char gs[200];
    const char **doms = missing || !a->domain[0] ? NULL : calloc(a->o.nodes, sizeof *doms);
    if (grc_geo) {
        snprintf(p->why, sizeof p->why, "generation %" PRIu64 ": %s", a->generation, err.msg);
        p->conflict = true;
        FTC_ERROR("agent", "parity groups: %s", p->why);
        free(doms);
        free(mem);
        return -1;
    }
    if (missing) {
        FTC_WARN("agent", "failure domains: %u node(s) (node %u first) did not publish a domain "
                 "within %d ms and no agent published parity groups: parity groups follow node "
                 "indices (%s)", missing, first_missing, a->o.timeout_ms,
                 ftc__par_geo_str(&p->geo, gs, sizeof gs));
    } else if (a->domain[0] && !doms) {
        free(mem);
        return 0; /* out of memory: retried */
    } else if (doms) {
        for (uint32_t i = 0; i < a->o.nodes; i++)
            doms[i] = i == a->o.index ? a->domain : a->peers[i].domain;
        if (no_domain)
            FTC_WARN("agent", "failure domains: %u node(s) have none (each counts as a domain of "
                     "its own); set --domain on every node or on none", no_domain);
        if (ftc__par_geometry_in(&a->o.redundancy, a->o.nodes, mem, nm, doms, a->o.index, &g,
                                 &err) == 0) {
            p->geo = g;
        } else {
            FTC_WARN("agent", "parity groups by failure domain: %s; using node index order",
                     err.msg);
            free(doms);
            doms = NULL;
        }
    }
    /* publish them; another agent may have been first */
    char *mine = NULL;
    int rc = 1;
    if (grc == 0 &&
        ftc__par_groups_str_in(&a->o.redundancy, a->o.nodes, mem, nm, doms, &mine, &err) == 0) {
        char key[200], suffix[48];
        snprintf(suffix, sizeof suffix, "pargroups:%" PRIu64, a->generation);
        ftc_ctl_key(a->ctl, suffix, key, sizeof key);
        ftc_redis_reply_t *rep = NULL;
        int src = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), false, &rep, "SET", key, mine, "NX",
                                 "PX", "86400000", NULL);
        bool won = src == 0 && ftc_redis_want_status(rep, "SET pargroups", "OK", NULL) == 0;
        ftc_redis_reply_free(rep);
        if (won) {
            rc = ftc__par_adopt(a, mine, mem, nm, true);
        } else if (src == 0 && ftc__par_groups_get(a, &pub) == 0 && pub) {
            rc = ftc__par_adopt(a, pub, mem, nm, false); /* another agent was first */
            free(pub);
        } else {
            FTC_WARN("agent", "parity groups: could not publish them (%s): using this agent's",
                     src ? ftc_redis_errstr(ftc_ctl_redis(a->ctl)) : "no value after SET NX");
        }
    } else if (grc == 0) {
        FTC_WARN("agent", "parity groups: %s", err.msg);
    } else {
        FTC_WARN("agent", "parity groups: Redis did not answer within %d ms (%s): using this "
                 "agent's, unpublished", a->o.timeout_ms,
                 ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
    }
    free(mine);
    free(mem);
    if (rc < 0) {
        free(doms);
        return rc;
    }
    if (!p->resolved) { /* not published: this agent's own */
        p->resolved = true;
        FTC_INFO("agent", "parity group of %s (%s; %d data + %d parity chunks per row, memory "
                 "x%.2f)", ftc__par_geo_str(&p->geo, gs, sizeof gs),
                 p->geo.by_domain ? "striped over failure domains" : "node index order",
                 p->geo.d, p->geo.m, (double)p->geo.n / p->geo.d);
    }
    ftc__par_geo_str(&p->geo, gs, sizeof gs);
    if (doms && p->geo.dom_max > p->geo.m)
        FTC_WARN("agent", "parity group of %s holds %d members of failure domain '%s' but "
                 "tolerates %d lost members: losing that domain loses the group's checkpoints "
                 "(too few domains: use more domains, fewer nodes per group or rs:G+M with a "
                 "larger M)",
                 gs, p->geo.dom_max, doms[p->geo.dom_node], p->geo.m);
    free(doms);
    return 1;
}

/* The encoder of local index l's stripe in this generation: the first
 * member from l % n on (cyclically) that has a rank at local index l
 * (ftc__par_encoder); an idle member never encodes. */
static bool ftc__par_is_encoder(ftc_agent_t *a, uint32_t local)
{
    bool idle[FTC_PARITY_MAX];
    for (int i = 0; i < a->par->geo.n; i++)
        idle[i] = ftc__par_rank(a, i, local) == FTC_PAR_IDLE;
    return ftc__par_encoder(&a->par->geo, local, idle) == a->par->geo.member;
}

static void ftc__par_fail(ftc_agent_t *a, ftc__rank_t *r, int s, int code, const char *why)
{
    FTC_WARN("agent", "rank %u step %" PRIu64 ": parity not stored: %s", r->rank, r->step[s], why);
    r->st[s] = SL_EMPTY; /* not committed; the previous version stays */
    ftc__not_committed(r->fd, code, r->step[s], "step %" PRIu64 " not committed: parity: %s",
                       r->step[s], why);
    for (int o = 0; o < NS; o++)
        if (o != s)
            ftc__try_push(a, r, o);
    ftc__answer_begin(a, r); /* a BEGIN parked for this slot (checkpoint.inflight 1) */
}

/* Parity mode's part of ftc__try_push: false when the replica path should
 * run instead (never, today). A member that is not its stripe's encoder
 * has nothing to send: the encoder fetches its shard, and reports it to the
 * commit record once every member holds its parity. The encoder gathers the
 * other members' shards of the step (retrying until they are sealed). */
bool ftc__par_try_push(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    ftc__par_geo_t *g = &a->par->geo;
    uint32_t at_node = 0, at_local = 0;
    if (!ftc__par_locate(a, a->generation, r->rank, &at_node, &at_local)) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* a plan member's agent not known yet: retried by the poll */
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ETIMEDOUT, a->par->where_why);
        return true;
    }
    if (at_node != a->o.index) {
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ECONFIG,
                      "parity groups need every rank on the node the layout says (without "
                      "`ftc run`: rank = node index x ranks_per_node + local index)");
        return true;
    }
    int resolved = ftc__par_resolve(a);
    if (resolved < 0) {
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ECONFIG, a->par->why);
        return true;
    }
    if (!resolved) {
        if (ftc_now_ns() - r->sealed_ns[s] < 2ull * (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* retried by the poll */
        r->pushed[s] = true;
        ftc__par_fail(a, r, s, FTC_ETIMEDOUT, "the parity groups are not formed (waiting for "
                      "a plan member's agent or every node's failure domain)");
        return true;
    }
    if (a->par->few)
        return false; /* too few nodes for a group: the replica path (ftc__try_push) */
    uint32_t local = ftc__par_local(a, r);
    if (a->par->enc[r - a->ranks].active)
        return true; /* the previous encode's pushes still read its parity: retried at its end */
    if (!ftc__par_is_encoder(a, local)) {
        r->pushed[s] = r->acked[s] = r->reported[s] = true; /* the encoder reports it */
        return true;
    }
    for (int o = 0; o < NS; o++) {
        if (o == s)
            continue;
        if (r->st[o] == SL_SEALED && r->pushed[o] && !r->acked[o])
            return true; /* one encode per stripe at a time, in step order */
        /* and only once the older step has committed, as replicas do: a
         * member keeps two parity versions per stripe, so encoding N while
         * N-1 is acknowledged but not committed (another group may fail it)
         * could make members drop the parity of the newest committed N-2 */
        if (r->st[o] == SL_SEALED && r->step[o] < r->step[s])
            return true;
    }
    int missing = 0;
    for (int i = 0; i < g->n; i++) {
        uint32_t node = g->node[i];
        if (i != g->member && (!a->peers[node].known || !a->peers[node].alive))
            missing++;
    }
    if (missing) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return true; /* retried by the poll */
        r->pushed[s] = true;
        char why[360], gs[200];
        snprintf(why, sizeof why, "%d of the %d other members of the group of %s are "
                 "not known or alive after %d ms", missing, g->n - 1,
                 ftc__par_geo_str(g, gs, sizeof gs), a->o.timeout_ms);
        ftc__par_fail(a, r, s, FTC_ENOENT, why);
        return true;
    }
    ftc__job_t *j = calloc(1, sizeof *j);
    ftc__gather_t *ga = calloc(1, sizeof *ga);
    if (!j || !ga) {
        free(j);
        free(ga);
        return true; /* retried by the poll */
    }
    ga->step = r->step[s];
    ga->max_attempts = 1 << 20; /* bounded by the deadline: members seal at their own pace */
    ga->retry_ms = 20;
    ga->d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
    /* a member whose rank failed to snapshot the step never seals it: the
     * gather ends once the step is known aborted, not at the deadline */
    ga->stop = a->aborted_stop;
    ga->nstop = FTC__ABORTED_KEEP;
    ga->gen = a->generation; /* never a slot an earlier generation left with this step */
    for (int i = 0; i < g->n; i++) {
        uint32_t owner = ftc__par_rank(a, i, local);
        if (i == g->member || owner == FTC_PAR_IDLE)
            continue; /* an idle member's shard is the virtual zero shard: never fetched */
        ftc__gitem_t *it = &ga->it[ga->n++];
        it->peer = g->node[i];
        it->owner = owner;
        it->member = i;
    }
    j->kind = JOB_GATHER;
    j->par = PAR_ENCODE;
    j->rix = (int)(r - a->ranks);
    j->owner = r->rank;
    j->step = r->step[s];
    j->gather = ga;
    r->pushed[s] = true;
    ftc__queue(a, j);
    return true;
}

/* The gather of an encode ended: hands the encode to the parity worker
 * (ftc__par_on_encoded takes it back). The slot stays SEALED and pushed
 * meanwhile, so no other encode of the stripe starts and no BEGIN reuses it. */
static void ftc__par_encode_done(ftc_agent_t *a, ftc__rank_t *r, int s, ftc__job_t *j)
{
    if (r->aborted[s] || ftc__step_aborted(a, r->step[s])) {
        /* a rank failed to snapshot the step (its gather was stopped): it
         * can never commit, so it is not encoded but abandoned now, the rank
         * told which rank failed it */
        r->aborted[s] = true;
        r->pushed[s] = false; /* nothing reported: no withdraw */
        ftc__abandon_aborted(a);
        return;
    }
    ftc__par_geo_t *g = &a->par->geo;
    uint32_t local = ftc__par_local(a, r);
    char why[700] = "";
    for (int i = 0; i < j->gather->n; i++) {
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, "%sshard of rank %u from node %u: %s", l ? "; " : "",
                     it->owner, it->peer, it->detail[0] ? it->detail : ftc_strerror(it->rc));
        }
    }
    if (why[0]) {
        ftc__par_fail(a, r, s, FTC_EIO, why);
        return;
    }
    ftc__par_task_t *t = calloc(1, sizeof *t);
    if (!t) {
        ftc__par_fail(a, r, s, FTC_ENOMEM, "out of memory");
        return;
    }
    t->rix = j->rix;
    t->slot = s;
    t->rank = r->rank;
    t->local = local;
    t->step = r->step[s];
    t->gen = a->generation;
    /* the wrapper to keep: the newest committed step's, or the previous
     * encode's when every member acknowledged it and its slot still waits
     * for the commit record (the commit may complete at any time, before
     * a->committed knows: keeping only a->committed's would overwrite it).
     * A version whose encode failed never commits: its wrapper is the one
     * overwritten. */
    int64_t ok = a->par->enc[j->rix].ok_step;
    t->keep = a->committed;
    for (int o = 0; o < NS && ok > t->keep && (uint64_t)ok < r->step[s]; o++)
        if (o != s && r->st[o] == SL_SEALED && r->acked[o] && r->step[o] == (uint64_t)ok)
            t->keep = ok; /* still sealed, reported, its commit pending */
    snprintf(t->job, sizeof t->job, "%s", a->job);
    snprintf(t->ns, sizeof t->ns, "%s", a->ns);
    snprintf(t->slot_name, sizeof t->slot_name, "%s", r->slot[s].name);
    t->slot_size = r->size;
    t->geo = *g;
    for (int i = 0; i < j->gather->n; i++) { /* the worker takes the fetched shards */
        ftc__gitem_t *it = &j->gather->it[i];
        t->bufs[it->member] = it->buf;
        t->sizes[it->member] = it->size;
        it->buf = NULL;
    }
    for (int i = 0; i < g->n; i++) {
        t->ranks[i] = ftc__par_rank(a, i, local);
        if (i != g->member && t->ranks[i] != FTC_PAR_IDLE && !t->bufs[i]) {
            ftc__par_task_free(t); /* the layout changed under the gather */
            ftc__par_fail(a, r, s, FTC_ESTALE, "the layout changed during the parity gather");
            return;
        }
        if (t->ranks[i] == FTC_PAR_IDLE && i != g->member) { /* the virtual zero shard */
            free(t->bufs[i]);
            t->bufs[i] = NULL;
            t->sizes[i] = 0;
        }
    }
    ftc__par_worker_submit(a->par->worker, t);
}

/* The worker encoded a version (or failed): store the wrappers for the
 * pushes and push every other member its parity. A task whose slot moved on
 * meanwhile (a new layout, a failure) is dropped. */
static void ftc__par_on_encoded(ftc_agent_t *a, ftc__par_task_t *t)
{
    if (t->rix < 0 || t->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[t->rix];
    int s = t->slot;
    if (!r->used || r->rank != t->rank || r->st[s] != SL_SEALED || r->step[s] != t->step ||
        !r->pushed[s] || r->acked[s])
        return;
    if (t->rc) {
        ftc__par_fail(a, r, s, t->rc, t->detail);
        return;
    }
    ftc__par_geo_t *g = &a->par->geo;
    ftc__enc_t *e = &a->par->enc[t->rix];
    for (int i = 0; i < FTC_PARITY_MAX; i++) {
        free(e->wraps[i]);
        e->wraps[i] = t->wraps[i]; /* kept until the next encode: the pushes read them */
        t->wraps[i] = NULL;
    }
    memcpy(e->ranks, t->ranks, sizeof e->ranks);
    memcpy(e->heads, t->heads, sizeof e->heads);
    FTC_INFO("agent", "rank %u step %" PRIu64 ": parity of %d shards encoded in %.1f ms (parity "
             "worker)", r->rank, t->step, g->n, t->ms);
    e->active = true;
    e->step = t->step;
    e->slot = s;
    e->pending = e->acked = 0;
    e->detail[0] = 0;
    for (int i = 0; i < g->n; i++) {
        if (i == g->member)
            continue;
        ftc__job_t *p = calloc(1, sizeof *p);
        if (!p) {
            snprintf(e->detail, sizeof e->detail, "out of memory");
            continue;
        }
        p->kind = JOB_PUSH;
        p->par = PAR_ENCODE;
        /* the member keeps the block this encode's own store keeps (the newest
         * committed step's): written over the older, that block was lost on
         * every member once the version after it was abandoned (I2) */
        p->keep = t->keep;
        p->rix = t->rix;
        p->owner = FTC_PAR_OWNER(t->local);
        p->step = t->step;
        p->shard = e->wraps[i];
        p->size = t->wsizes[i];
        p->peers[0] = g->node[i];
        p->npeers = 1;
        e->pending++;
        ftc__queue(a, p);
    }
    if (e->pending == 0) /* a group of one other member failed to allocate, or none */
        ftc__par_on_push_done(a, NULL);
}

/* Takes the parity worker's finished encodes (the eventfd woke the loop). */
void ftc__par_collect(ftc_agent_t *a)
{
    if (!a->par || !a->par->worker)
        return;
    ftc__par_task_t *t = ftc__par_worker_take(a->par->worker);
    while (t) {
        ftc__par_task_t *next = t->next;
        if (t->rebuild)
            ftc__par_on_rebuilt(a, t);
        else
            ftc__par_on_encoded(a, t);
        ftc__par_task_free(t);
        t = next;
    }
}

/* Reports to the commit record the other members' shards of the version in
 * r's slot s that this node encoded and every member acknowledged
 * (enc.unreported); true when none is left. A report that fails (Redis
 * away) stays for the commit poll, which calls this before r's own report,
 * as for r's own: dropped, that member's rank was never reported and the
 * version never committed. */
bool ftc__par_report_members(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    ftc__enc_t *e = &a->par->enc[r - a->ranks];
    if (!e->unreported || (int64_t)r->step[s] != e->ok_step)
        return true;
    if (a->redis_down)
        return false; /* the commit poll reports once Redis answers */
    for (int m = 0; m < a->par->geo.n && m < FTC_PARITY_MAX; m++) {
        if (!(e->unreported & (1u << m)))
            continue;
        int64_t committed;
        bool now;
        int rc = ftc_ctl_commit_report(a->ctl, a->generation, (int64_t)r->step[s], e->ranks[m],
                                       e->heads[m], &committed, &now);
        if (rc == FTC_ECANCELED) { /* aborted: r's own report learns it */
            e->unreported = 0;
            return true;
        }
        if (rc) {
            if (ftc__redis_outage(a, rc))
                ftc__redis_seen(a, rc);
            FTC_WARN("agent", "commit report of rank %u step %" PRIu64 " (parity): %s; made "
                     "again by the commit poll", e->ranks[m], r->step[s],
                     ftc_ctl_errstr(a->ctl));
            return false;
        }
        e->unreported &= ~(1u << m);
        if (committed > a->committed)
            a->committed = committed;
    }
    return true;
}

/* A parity push finished (j NULL: check the encode of every rank). Once every
 * member holds its parity the encoder reports each member's shard. */
void ftc__par_on_push_done(ftc_agent_t *a, ftc__job_t *j)
{
    if (j) {
        ftc__enc_t *e = &a->par->enc[j->rix];
        if (!e->active || e->step != j->step)
            return;
        e->pending--;
        if (j->rc == 0 && j->acked >= 1) {
            e->acked++;
        } else {
            size_t l = strlen(e->detail);
            snprintf(e->detail + l, sizeof e->detail - l, "%snode %u: %s", l ? "; " : "",
                     j->peers[0], j->detail[0] ? j->detail : ftc_strerror(j->rc));
        }
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__enc_t *e = &a->par->enc[i];
        if (!e->active || e->pending > 0)
            continue;
        e->active = false;
        ftc__rank_t *r = &a->ranks[i];
        int s = e->slot;
        if (!r->used || r->st[s] != SL_SEALED || r->step[s] != e->step)
            continue;
        if (e->acked < a->par->geo.n - 1) {
            char why[700];
            snprintf(why, sizeof why, "%d of %d members acknowledged their parity: %s", e->acked,
                     a->par->geo.n - 1, e->detail);
            ftc__par_fail(a, r, s, FTC_EIO, why);
            continue;
        }
        e->ok_step = (int64_t)e->step;
        e->unreported = 0;
        for (int m = 0; m < a->par->geo.n; m++)
            if (m != a->par->geo.member && e->ranks[m] != FTC_PAR_IDLE)
                e->unreported |= 1u << m; /* an idle member has no rank to report */
        r->acked[s] = true;
        /* the other members' shards first: our own report may complete the step */
        if (ftc__par_report_members(a, r, s))
            ftc__report_commit(a, r, s);
        for (int o = 0; o < NS; o++) /* the next step may have waited for this encode */
            if (o != s)
                ftc__try_push(a, r, o);
    }
}

/* Queues the gather of a lost shard's pieces: every surviving member's data
 * shard and parity of the restore step, in the subject's group of the
 * committed version's layout. That is this node's group at the lost
 * member's position (a replacement node), or another group when the rank
 * moved (a shrink, a layout change): then this node may be a member itself
 * (its own pieces are read from its slots) or not in the group at all.
 * False when there is nothing to gather here (the caller tries a fetch,
 * then the persist tier); true when queued, or when it failed and the
 * restore already went on to the persist tier naming what was missing. */
bool ftc__par_queue_rebuild(ftc_agent_t *a, ftc__rank_t *r, bool force)
{
    r->rebuild_later = false;
    /* the subject's stripe position in the layout of the committed version */
    int64_t cstep = -1;
    uint64_t cgen = a->generation;
    /* Redis known down: not asked (a command timeout for nothing), the
     * current generation's layout as when the read fails */
    int crc = a->redis_down ? FTC_EREDIS : ftc_ctl_committed(a->ctl, &cstep, &cgen);
    if (crc && ftc__redis_outage(a, crc) && !a->redis_down)
        ftc__redis_seen(a, crc);
    if (crc || cgen == 0)
        cgen = a->generation;
    uint32_t at_node = 0, local = 0;
    if (!ftc__par_locate(a, cgen, r->src, &at_node, &local) || at_node >= a->o.nodes) {
        FTC_WARN("agent", "rank %u: no parity rebuild of rank %u: the layout of generation "
                 "%" PRIu64 " does not place it (%s)", r->rank, r->src, cgen,
                 ftc__where(a, cgen) ? "the rank is not in its plan" : a->par->where_why);
        return false;
    }
    bool moved = at_node != a->o.index;
    if (moved && !force && a->peers[at_node].known && a->peers[at_node].alive) {
        FTC_INFO("agent", "rank %u: rank %u was on node %u in generation %" PRIu64 ", which is "
                 "alive: fetching its shard from there (rebuilt only if that fails)", r->rank,
                 r->src, at_node, cgen);
        r->rebuild_later = true;
        return false; /* ftc__queue_fetch: the subject's node serves its slot */
    }
    ftc__par_geo_t geo;
    char why[400];
    if (ftc__par_group_of(a, cgen, at_node, &geo, why, sizeof why) != 0) {
        if (moved) {
            ftc__par_rebuild_failed(a, r, why, "");
            return true;
        }
        /* at this node's position: this agent's groups, as they are */
        int resolved = ftc__par_resolve(a);
        if (resolved <= 0 || a->par->few) {
            FTC_WARN("agent", "rank %u: no parity rebuild: %s", r->rank,
                     resolved < 0   ? a->par->why
                     : resolved > 0 ? "this generation has too few nodes for a parity group"
                                    : "the parity groups are not formed yet (waiting for every "
                                      "node's failure domain in Redis)");
            return false;
        }
        FTC_WARN("agent", "rank %u: %s; rebuilding with this agent's group", r->rank, why);
        geo = a->par->geo;
    }
    char gs[200], gone[200] = "";
    ftc__par_geo_str(&geo, gs, sizeof gs);
    ftc__gather_t *ga = calloc(1, sizeof *ga);
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!ga || !j) {
        free(ga);
        free(j);
        return false;
    }
    ga->step = r->restore_step;
    ga->max_attempts = 4; /* peers learn a restarted agent's address within ~0.5 s */
    ga->retry_ms = 500;
    ga->d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
    snprintf(ga->ns, sizeof ga->ns, "%s", a->ns);
    int fetched = 0;
    for (int i = 0; i < geo.n; i++) {
        uint32_t node = geo.node[i];
        if (i == geo.member)
            continue;
        bool self = node == a->o.index;
        if (!self && (node >= a->o.nodes || !a->peers[node].known || !a->peers[node].alive)) {
            size_t l = strlen(gone);
            snprintf(gone + l, sizeof gone - l, "%snode%u gone", l ? ", " : "", node);
            continue;
        }
        uint32_t owner = ftc__par_rank_on(a, cgen, node, local);
        for (int w = owner == FTC_PAR_IDLE; w < 2; w++) { /* an idle member: parity only */
            ftc__gitem_t *it = &ga->it[ga->n++];
            it->peer = node;
            it->owner = w ? FTC_PAR_OWNER(local) : owner;
            it->member = i;
            it->wrapper = w;
            /* this node's own piece (a moved rank's rebuild in a group this
             * node is a member of): nothing to fetch; the replication thread
             * takes it from its replica store or this node's slots */
            it->local = self;
            fetched += !self;
        }
    }
    if (!ga->n) {
        free(ga);
        free(j);
        char w[600];
        snprintf(w, sizeof w, "no member of the group of %s (generation %" PRIu64 ") is alive "
                 "(%s)", gs, cgen, gone);
        if (moved) {
            ftc__par_rebuild_failed(a, r, w, "");
            return true;
        }
        FTC_WARN("agent", "rank %u: no parity rebuild: %s", r->rank, w);
        return false;
    }
    r->rebuild_gen = cgen;
    r->rebuild_local = local;
    r->rebuild_geo = geo;
    snprintf(j->detail, sizeof j->detail, "%s", gone); /* named when the decode fails */
    if (moved)
        FTC_INFO("agent", "rank %u: rebuilding rank %u's step %" PRIu64 " from parity of the "
                 "group of %s (generation %" PRIu64 ": it was member %d, node %u, local index "
                 "%u; %d piece(s) to fetch)", r->rank, r->src, r->restore_step, gs, cgen,
                 geo.member, at_node, local, fetched);
    j->kind = JOB_GATHER;
    j->par = PAR_REBUILD;
    j->rix = (int)(r - a->ranks);
    j->req = r->req; /* its result answers this request only (ftc__par_on_gather_done) */
    j->owner = r->rank;
    j->step = r->restore_step;
    j->gather = ga;
    ftc__queue(a, j);
    return true;
}

/* A rebuild failed: the restore goes on to the persist tier. */
void ftc__par_rebuild_failed(ftc_agent_t *a, ftc__rank_t *r, const char *why,
                             const char *looked)
{
    char tried[600];
    snprintf(tried, sizeof tried, "not in this node's slots; parity rebuild: %s%s%s", why,
             looked[0] ? " (failed fetches: " : "", looked[0] ? looked : "");
    if (looked[0])
        strncat(tried, ")", sizeof tried - strlen(tried) - 1);
    FTC_WARN("agent", "rank %u: %s", r->rank, tried);
    ftc__restore_from_persist(a, r, tried);
}

static void ftc__par_rebuild_done(ftc_agent_t *a, ftc__rank_t *r, ftc__job_t *j)
{
    ftc__par_geo_t *g = &r->rebuild_geo;
    char looked[200] = ""; /* short: the rank's error text is bounded; the log has it all */
    snprintf(looked, sizeof looked, "%s", j->detail); /* the members not asked: gone */
    for (int i = 0; i < j->gather->n; i++) {
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf) {
            FTC_WARN("agent", "rank %u: rebuild of step %" PRIu64 ": %s of node %u: %s", r->rank,
                     j->step, it->wrapper ? "parity" : "shard", it->peer,
                     it->detail[0] ? it->detail : ftc_strerror(it->rc));
            size_t l = strlen(looked);
            snprintf(looked + l, sizeof looked - l, "%s%s@node%u %s", l ? ", " : "",
                     it->wrapper ? "parity" : "shard", it->peer, ftc_errname(it->rc));
        }
    }
    /* the decode and its verification run on the parity worker (a large
     * shard would hold the control loop): ftc__par_on_rebuilt takes it back */
    ftc__par_task_t *t = calloc(1, sizeof *t);
    if (!t) {
        ftc__par_rebuild_failed(a, r, "out of memory", looked);
        return;
    }
    t->rebuild = true;
    t->rix = j->rix;
    t->req = j->req;
    t->rank = r->rank;
    t->local = r->rebuild_local;
    t->step = j->step;
    t->geo = *g;
    snprintf(t->looked, sizeof t->looked, "%s", looked);
    for (int i = 0; i < j->gather->n; i++) { /* the worker takes the fetched pieces */
        ftc__gitem_t *it = &j->gather->it[i];
        if (it->rc || !it->buf)
            continue;
        if (it->wrapper) {
            t->wraps[it->member] = it->buf;
            t->wsizes[it->member] = it->size;
        } else {
            t->bufs[it->member] = it->buf;
            t->sizes[it->member] = it->size;
        }
        it->buf = NULL;
    }
    ftc__par_worker_submit(a->par->worker, t);
}

/* The worker rebuilt a shard (or failed): install it, else the persist tier.
 * A result for a rank that is no longer restoring that step is dropped. */
void ftc__par_on_rebuilt(ftc_agent_t *a, ftc__par_task_t *t)
{
    if (t->rix < 0 || t->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[t->rix];
    if (!r->used || r->rank != t->rank || !r->restoring || r->fd < 0 || r->req != t->req ||
        r->restore_step != t->step) {
        FTC_DEBUG("agent", "parity rebuild of rank %u step %" PRIu64 " for request %" PRIu64
                  " done (rc %d), but that request is over: dropped", t->rank, t->step, t->req,
                  t->rc);
        return;
    }
    ftc_shard_view_t v;
    ftc_err_t verr = {0};
    char why[400];
    if (t->rc == 0 && ftc_shard_open(&v, t->out, t->out_size, 0, &verr) == 0 && /* verified */
        !ftc__copy_is_recorded(r, &v, "the parity rebuild", why, sizeof why)) {
        /* the group's parity encoded another version of the step */
        ftc__par_rebuild_failed(a, r, why, t->looked);
        return;
    }
    if (t->rc == 0) {
        ftc_err_t err = {0};
        int s = ftc__install(r, t->out, t->out_size, t->step, &err);
        if (s >= 0) {
            char gs[200], code[32];
            /* the code the group's parity.meta recorded, which decoded it:
             * not necessarily this agent's (xor:G and rs:G+1 share geo) */
            if (t->out_xor)
                snprintf(code, sizeof code, "xor:%d", t->geo.d);
            else
                snprintf(code, sizeof code, "rs:%d+%d", t->geo.d, t->geo.m);
            FTC_INFO("agent", "rank %u restored step %" PRIu64 " rebuilt from parity (%s, group of "
                     "%s) in %.1f ms (decode and verify on the parity worker; request %" PRIu64
                     ")", r->rank, t->step, code, ftc__par_geo_str(&t->geo, gs, sizeof gs), t->ms,
                     t->req);
            ftc__restore_done(a, r, s, false);
            return;
        }
        ftc__par_rebuild_failed(a, r,
                                err.code ? err.msg
                                         : "the rebuilt shard's size differs from the slots'",
                                t->looked);
        return;
    }
    ftc__par_rebuild_failed(a, r, t->detail, t->looked);
}

void ftc__par_on_gather_done(ftc_agent_t *a, ftc__job_t *j)
{
    if (j->rix < 0 || j->rix >= FTC_AGENT_MAX_RANKS)
        return;
    ftc__rank_t *r = &a->ranks[j->rix];
    if (!r->used || r->rank != j->owner)
        return;
    if (j->par == PAR_REBUILD) {
        /* matched by request id, as fetch results are (ftc__on_fetch_done):
         * by rank and step, a rank that reconnected and asked again got its
         * earlier request's rebuild, its own one dropped */
        if (r->restoring && r->fd >= 0 && r->req == j->req && r->restore_step == j->step)
            ftc__par_rebuild_done(a, r, j);
        else
            FTC_DEBUG("agent", "parity rebuild gather of rank %u step %" PRIu64 " for request "
                      "%" PRIu64 " done, but that request is over: dropped", j->owner, j->step,
                      j->req);
        return;
    }
    for (int s = 0; s < NS; s++)
        if (r->st[s] == SL_SEALED && r->step[s] == j->step && r->pushed[s] && !r->acked[s]) {
            ftc__par_encode_done(a, r, s, j);
            return;
        }
}

void ftc__par_free(ftc_agent_t *a)
{
    if (!a->par)
        return;
    ftc__par_worker_stop(a->par->worker);
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int k = 0; k < FTC_PARITY_MAX; k++)
            free(a->par->enc[i].wraps[k]);
    ftc__where_free(&a->par->where[0]);
    ftc__where_free(&a->par->where[1]);
    free(a->par);
    a->par = NULL;
}
