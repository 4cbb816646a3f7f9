/*
 * agent.c — see agent.h; the agent's state and its other files:
 * agent_internal.h.
 *
 * Control loop (one thread): poll over the listening socket, the ranks'
 * sockets and an eventfd the replication thread signals. Each rank has two
 * slots whose states move EMPTY -> WRITING (BEGIN) -> SEALED (replicating)
 * -> COMMITTED; the slot holding the newest committed version is never
 * handed out for writing. Commit: once a slot is replicated to its k peers
 * the agent reports (generation, step, rank, head checksum) to Redis; the
 * step commits when every rank of the generation has reported, which the
 * agent learns by polling the commit record while anything is pending.
 *
 * Replication thread: owns the fabric endpoint and the replication engine;
 * takes jobs (add peer, push, fetch) from a queue, drives
 * ftc_repl_progress, and hands finished jobs back through the eventfd. It
 * also serves peers' pushes and fetches all the time.
 *
 * Parity worker (redundancy xor / rs, agent_parity.h): encodes a gathered
 * version, or decodes and verifies a rebuild, off the control loop and hands
 * it back through the same eventfd.
 */
#include "ckpt/agent_internal.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/proc.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------------------- */


void ftc_agent_socket_path(const char *dir, uint32_t index, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/agent.%u.sock", dir, index);
}

const char *ftc_agent_socket(const ftc_agent_t *a) { return a->sock; }

/* Whether rc is a Redis outage (no answer, connection broken), not an
 * answer that refused (a stale generation, a bad key). An error reply of
 * the server (WRONGTYPE, a script's error) comes back as FTC_EREDIS too,
 * like a broken connection, but leaves the connection up: Redis answered. */
bool ftc__redis_outage(const ftc_agent_t *a, int rc)
{
    return rc == FTC_ETIMEDOUT || (rc == FTC_EREDIS && !ftc_redis_is_up(ftc_ctl_redis(a->ctl)));
}

/* Records the outcome rc of a Redis call of the control loop in
 * a->redis_down (a change is logged once); returns rc. A call Redis
 * answered with a refusal (an error reply such as WRONGTYPE: a key of
 * another type where the agent reads, a data problem) is no outage: Redis
 * is not taken for down (which would skip or throttle the calls that can
 * do without it); the refusal is logged, naming the command, the key and
 * the reply (the same one again at most every 10 s). */
int ftc__redis_seen(ftc_agent_t *a, int rc)
{
    bool down = rc && ftc__redis_outage(a, rc);
    if (rc && !down) {
        const char *why = rc == FTC_EREDIS ? ftc_redis_errstr(ftc_ctl_redis(a->ctl))
                                           : ftc_ctl_errstr(a->ctl);
        uint64_t now = ftc_now_ns();
        if (strncmp(why, a->redis_refused, sizeof a->redis_refused - 1) ||
            now - a->redis_refused_ns > 10000000000ull) {
            FTC_WARN("agent", "Redis refused a request (%s): it answers, so it is not taken "
                     "for down; the data it holds there is not what the agent expects", why);
            snprintf(a->redis_refused, sizeof a->redis_refused, "%s", why);
            a->redis_refused_ns = now;
        }
    }
    if (down && !a->redis_down)
        FTC_WARN("agent", "Redis does not answer (%s): a fetch round uses the peer addresses "
                 "already known and a restore checks copies by their content until it does",
                 ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
    else if (!down && a->redis_down)
        FTC_INFO("agent", "Redis answers again");
    a->redis_down = down;
    if (down)
        a->redis_fail_ns = ftc_now_ns();
    return rc;
}

/* Records e in the job's event stream. With Redis known down (a->redis_down)
 * the XADD would cost the control loop a command timeout, in which no rank
 * is answered: the event goes to the detector's queue instead, which
 * publishes it once Redis answers (without a detector it is logged and
 * dropped). An XADD that fails for want of Redis is recorded
 * (ftc__redis_seen) and its event queued the same way. */
void ftc__event(ftc_agent_t *a, const ftc_ctl_event_t *e)
{
    int rc = a->redis_down ? FTC_EREDIS : ftc_ctl_event(a->ctl, e);
    if (rc && !a->redis_down && !ftc__redis_outage(a, rc))
        FTC_WARN("agent", "event %s (rank %d, step %" PRId64 ") refused by Redis: %s", e->kind,
                 e->rank, e->step, ftc_ctl_errstr(a->ctl));
    if (!rc || (!a->redis_down && !ftc__redis_outage(a, rc)))
        return;
    if (!a->redis_down)
        ftc__redis_seen(a, rc);
    if (a->det)
        ftc_detector_report(a->det, e->kind, e->rank, e->step, e->detail);
    else
        FTC_WARN("agent", "event %s (rank %d, step %" PRId64 ") not recorded: Redis does not "
                 "answer", e->kind, e->rank, e->step);
}

void ftc__queue(ftc_agent_t *a, ftc__job_t *j)
{
    pthread_mutex_lock(&a->mu);
    j->next = NULL;
    ftc__job_t **p = &a->todo;
    while (*p)
        p = &(*p)->next;
    *p = j;
    pthread_mutex_unlock(&a->mu);
}

/* Every message the agent sends a local connection (a rank, the
 * supervisor, a connection that said no HELLO yet) goes out without
 * waiting: the loop serves every rank of the node, and a message it waited
 * for (up to a second, for the socket to poll writable) was then dropped.
 * The socket's buffer is the connection's outbound queue. It never fills:
 * the loop reads none of a connection's requests once a quarter of it is
 * unread (ftc__reads_answers), and what is owed beyond that is a few
 * messages (a request's answers, one notice per slot, a parked BEGIN's
 * answer), where the buffer takes three times as many more (about 70 on
 * Linux's defaults). Should it fill all the same (a net.core.wmem_default
 * far below Linux's default), the connection is shut down with a WARN: its
 * rank then gets FTC_EIO from its next call instead of a silent loss (a lost
 * COMMITTED left ftc_wait_committed waiting out its timeout), and the loop
 * reads its end and closes it. A peer that is gone is the loop's too. */
void ftc__send(int fd, const ftc_ap_msg_t *m)
{
    ftc_err_t err = {0};
    if (fd < 0 || ftc_ap_send_now(fd, m, &err) != FTC_EAGAIN)
        return;
    struct ucred cr = {0};
    socklen_t cl = sizeof cr;
    (void)getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl);
    FTC_WARN("agent", "closing the local connection of pid %d: its socket is full (it has read "
             "none of as many messages as the socket holds) and the agent does not wait for it; "
             "a message of type %u (step %" PRIu64 ") could not be sent (is net.core.wmem_default "
             "far below Linux's default of 212992?)", (int)cr.pid, m->type, m->step);
    shutdown(fd, SHUT_RDWR);
}

/* An ERROR answer to the request whose id is seq (agent_proto.h). */
void ftc__reply_error(int fd, uint64_t seq, int code, const char *fmt, ...)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_ERROR);
    m.seq = seq;
    m.status = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    ftc__send(fd, &m);
}

/* Tells a rank, asynchronously, that a sealed step will not be committed. */
void ftc__not_committed(int fd, int code, uint64_t step, const char *fmt, ...)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_NOT_COMMITTED);
    m.status = code;
    m.step = step;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    if (fd >= 0)
        ftc__send(fd, &m);
}

static ftc__rank_t *ftc__rank_of_fd(ftc_agent_t *a, int fd)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].fd == fd)
            return &a->ranks[i];
    return NULL;
}

/* The peers that hold this node's replicas: the next nodes in ring order,
 * skipping nodes of our failure domain (when domains are set). */
static int ftc__placement(ftc_agent_t *a, uint32_t *out, int want)
{
    int n = 0;
    for (uint32_t step = 1; step < a->o.nodes && n < want; step++) {
        uint32_t node = (a->o.index + step) % a->o.nodes;
        ftc__peer_t *p = &a->peers[node];
        if (!p->known || !p->alive)
            continue;
        if (a->domain[0] && !strcmp(p->domain, a->domain))
            continue;
        if (p->stale)
            return 0; /* its agent of this generation publishes soon: wait for it */
        out[n++] = node;
    }
    return n;
}

/* ---- Redis: peers, secret, generation ------------------------------------------------- */

static int ftc__publish_address(ftc_agent_t *a, ftc_err_t *err)
{
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    pthread_mutex_lock(&a->mu);
    size_t len = a->my_addr_len;
    memcpy(addr, a->my_addr, len);
    a->republish = false;
    pthread_mutex_unlock(&a->mu);
    char hex[2 * FTC_FABRIC_ADDR_MAX + 1], val[2 * FTC_FABRIC_ADDR_MAX + 200], field[16], key[160];
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", addr[i]);
    /* the generation lets a supervisor tell this incarnation's address from
     * the one a previous agent of the node left (plugins/run.c) */
    snprintf(val, sizeof val, "%s %s %s %" PRIu64, hex, a->node_id,
             a->domain[0] ? a->domain : "-", a->generation);
    snprintf(field, sizeof field, "%u", a->o.index);
    int rc = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, NULL, "HSET",
                            ftc_ctl_key(a->ctl, "fabric", key, sizeof key), field, val, NULL);
    if (rc)
        return ftc_err_set(err, rc, "publishing the fabric address: %s", ftc_ctl_errstr(a->ctl));
    return 0;
}

/* Opens the endpoint and the engine on it; records our address. */
static int ftc__open_transport(ftc_agent_t *a, ftc_err_t *err)
{
    int rc = ftc_fabric_open(&a->fopt, &a->fab, err);
    if (rc)
        return rc;
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof addr;
    rc = ftc_fabric_getname(a->fab, addr, &len);
    if (rc)
        return ftc_err_set(err, rc, "fabric getname failed");
    a->ropt.fab = a->fab;
    a->repl = ftc_repl_create(&a->ropt, err);
    if (!a->repl)
        return err ? err->code : FTC_EFABRIC;
    /* peers fetch our ranks' shards from our slots: parity members, and ranks
     * that re-partition after a layout change */
    ftc_repl_serve_local(a->repl, a->ns);
    pthread_mutex_lock(&a->mu);
    memcpy(a->my_addr, addr, len);
    a->my_addr_len = len;
    a->republish = true;
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* The endpoint broke (a send to a peer that died could not be cancelled):
 * throw it away with the engine, open new ones, re-add every peer and have
 * the control loop publish our new address. The replica slots stay. */
static void ftc__rebuild_transport(ftc_agent_t *a)
{
    a->rebuilds++;
    FTC_WARN("agent", "rebuilding the fabric endpoint (%" PRIu64 " so far): %s", a->rebuilds,
             a->repl ? ftc_repl_errstr(a->repl) : "");
    ftc_repl_destroy(a->repl);
    a->repl = NULL;
    ftc_fabric_close(a->fab);
    a->fab = NULL;
    ftc_err_t err = {0};
    for (int attempt = 0; !atomic_load(&a->stop); attempt++) {
        if (ftc__open_transport(a, &err) == 0)
            break;
        FTC_ERROR("agent", "reopening the fabric endpoint: %s", err.msg);
        ftc_repl_destroy(a->repl);
        a->repl = NULL;
        ftc_fabric_close(a->fab);
        a->fab = NULL;
        ftc_sleep_ms(attempt < 10 ? 100 : 1000);
    }
    if (!a->repl)
        return;
    ftc_repl_set_generation(a->repl, a->generation);
    for (uint32_t i = 0; i < a->o.nodes; i++)
        if (a->rpeers[i].known)
            ftc_repl_peer_add(a->repl, i, a->raddr[i], a->raddr_len[i]);
}

static int ftc__hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Marks each known peer alive when its heartbeat key exists (one MGET). */
static void ftc__refresh_liveness(ftc_agent_t *a)
{
    const char **argv = calloc((size_t)a->o.nodes + 1, sizeof *argv);
    char (*keys)[200] = calloc(a->o.nodes, sizeof *keys);
    uint32_t *idx = calloc(a->o.nodes, sizeof *idx);
    int n = 0;
    if (!argv || !keys || !idx)
        goto out;
    argv[0] = "MGET";
    for (uint32_t i = 0; i < a->o.nodes; i++) {
        if (!a->peers[i].known)
            continue;
        char suffix[FTC_CTL_NODE_MAX + 8];
        snprintf(suffix, sizeof suffix, "hb:%s", a->peers[i].node_id);
        ftc_ctl_key(a->ctl, suffix, keys[n], sizeof keys[n]);
        argv[n + 1] = keys[n];
        idx[n++] = i;
    }
    if (!n)
        goto out;
    ftc_redis_reply_t *rep = NULL;
    /* recorded like the HGETALL before it: failed, the next refresh waits for
     * the probe interval instead of costing a command timeout every 500 ms */
    if (ftc__redis_seen(a, ftc_redis_cmd(ftc_ctl_redis(a->ctl), true, &rep, n + 1, argv,
                                         NULL)) == 0) {
        ftc_redis_reply_t **el;
        size_t cnt;
        ftc_err_t err = {0};
        if (ftc_redis_want_array(rep, "MGET heartbeats", n, &el, &cnt, &err) == 0)
            for (int i = 0; i < n; i++) {
                const char *v;
                size_t vl;
                bool alive = ftc_redis_want_str(el[i], "heartbeat", &v, &vl, &err) == 0;
                if (a->peers[idx[i]].alive != alive)
                    FTC_INFO("agent", "node %u (%s) is %s", idx[i], a->peers[idx[i]].node_id,
                             alive ? "alive" : "gone (no heartbeat)");
                a->peers[idx[i]].alive = alive;
            }
    }
    ftc_redis_reply_free(rep);
out:
    free(argv);
    free(keys);
    free(idx);
}

int ftc__fabric_parse(const char *field, const char *value, ftc__fabric_rec_t *r, ftc_err_t *err)
{
    memset(r, 0, sizeof *r);
    /* whole words and numbers: strtoul took field "1x" for node 1, and
     * sscanf("%512s %64s %63s %llu") a longer node id's rest for the
     * domain, "3abc" for generation 3 */
    uint64_t node = 0;
    if (ftc_parse_u64(field, &node) || node >= ULONG_MAX) {
        r->node = ULONG_MAX;
        return ftc_err_set(err, FTC_EPROTO, "fabric field '%.40s' is not a node index", field);
    }
    r->node = (unsigned long)node;
    const char *p = value;
    char dom[64], gw[24];
    bool ok = ftc_next_word(&p, r->hex, sizeof r->hex) &&
              ftc_next_word(&p, r->node_id, sizeof r->node_id) &&
              ftc_next_word(&p, dom, sizeof dom) && strlen(r->hex) % 2 == 0;
    if (ok) { /* GEN, which older agents did not publish; later words are ignored */
        while (isspace((unsigned char)*p))
            p++;
        r->has_gen = *p != 0;
        ok = !r->has_gen || (ftc_next_word(&p, gw, sizeof gw) && !ftc_parse_u64(gw, &r->gen));
    }
    if (!ok)
        return ftc_err_set(err, FTC_EPROTO, "fabric entry '%.80s' is not \"HEXADDR NODE_ID "
                           "DOMAIN GEN\"", value);
    r->addr_len = strlen(r->hex) / 2;
    for (size_t k = 0; k < r->addr_len; k++) {
        int hi = ftc__hexval(r->hex[2 * k]), lo = ftc__hexval(r->hex[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return ftc_err_set(err, FTC_EPROTO, "fabric entry '%.80s' holds a malformed address",
                               value);
        r->addr[k] = (uint8_t)(hi << 4 | lo);
    }
    snprintf(r->domain, sizeof r->domain, "%s", strcmp(dom, "-") ? dom : "");
    return 0;
}

/* Reads ftc:{job}:fabric and queues newly seen peers for the engine. */
void ftc__refresh_peers(ftc_agent_t *a)
{
    char key[160];
    ftc_redis_reply_t *rep = NULL;
    if (ftc__redis_seen(a, ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HGETALL",
                                          ftc_ctl_key(a->ctl, "fabric", key, sizeof key),
                                          NULL)) != 0)
        return;
    ftc_redis_reply_t **el;
    size_t n;
    ftc_err_t err = {0};
    if (ftc_redis_want_array(rep, key, -1, &el, &n, &err) == 0) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            const char *f, *v;
            size_t fl, vl;
            if (ftc_redis_want_str(el[i], key, &f, &fl, &err) ||
                ftc_redis_want_str(el[i + 1], key, &v, &vl, &err))
                continue;
            ftc__fabric_rec_t rec;
            int rc = ftc__fabric_parse(f, v, &rec, &err);
            if (rec.node >= a->o.nodes || rec.node == a->o.index)
                continue;
            if (rc) {
                FTC_WARN("agent", "%s: field %lu: %s", key, rec.node, err.msg);
                continue;
            }
            unsigned long node = rec.node;
            ftc__peer_t *p = &a->peers[node];
            /* an address an earlier generation's agent published: that
             * agent is stopping or gone (ftc run restarts every agent per
             * generation) and the new one publishes soon. No push goes to
             * it (ftc__placement waits, refreshing every 100 ms): a push to
             * a stale address can spin in rxm's connect until its deadline,
             * holding the replication thread, so that even the new address
             * could not be applied (test_run.sh scenario 1 hung so, one run
             * in two). Fetches and gathers may still try it: they retry. */
            p->stale = rec.has_gen && rec.gen < a->generation;
            if (p->known && !strcmp(p->addr_hex, rec.hex))
                continue;
            if (p->known)
                FTC_INFO("agent", "node %lu (%s) has a new address: a restarted agent", node,
                         rec.node_id);
            ftc__job_t *j = calloc(1, sizeof *j);
            if (!j)
                continue;
            j->kind = JOB_PEER;
            j->node = (uint32_t)node;
            j->addr_len = rec.addr_len;
            memcpy(j->addr, rec.addr, rec.addr_len);
            j->replace = p->known;
            p->known = true;
            snprintf(p->addr_hex, sizeof p->addr_hex, "%s", rec.hex);
            snprintf(p->node_id, sizeof p->node_id, "%s", rec.node_id);
            snprintf(p->domain, sizeof p->domain, "%s", rec.domain);
            ftc__queue(a, j);
        }
    }
    ftc_redis_reply_free(rep);
    ftc__refresh_liveness(a);
}

/* The job secret: given, or shared through Redis (first agent sets it). */
static int ftc__secret(ftc_agent_t *a, uint8_t out[32], size_t *len, ftc_err_t *err)
{
    if (a->o.secret) {
        if (a->o.secret_len < 16 || a->o.secret_len > 32)
            return ftc_err_set(err, FTC_ECONFIG, "the job secret must be 16..32 bytes");
        memcpy(out, a->o.secret, a->o.secret_len);
        *len = a->o.secret_len;
        return 0;
    }
    *len = 16;
    return ftc_ctl_job_secret(a->ctl, out, err);
}

/* Generation 1 is set by whichever agent gets the lease first; the others
 * wait for it (bounded). */
static int ftc__generation(ftc_agent_t *a, ftc_err_t *err)
{
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    char holder[160];
    snprintf(holder, sizeof holder, "%s:%d:agent-start", a->node_id, (int)getpid());
    for (;;) {
        uint64_t gen;
        uint32_t world;
        int rc = ftc_ctl_generation(a->ctl, &gen, &world);
        if (rc)
            return ftc_err_set(err, rc, "reading the generation: %s", ftc_ctl_errstr(a->ctl));
        if (gen > 0) {
            a->generation = gen;
            a->world = world;
            return 0;
        }
        bool held = false;
        uint64_t ep;
        if (ftc_ctl_lease_acquire(a->ctl, holder, 2000, &held, &ep) == 0 && held) {
            uint64_t out;
            ftc_ctl_generation_bump(a->ctl, holder, ep, 0, a->o.nodes * a->o.ranks_per_node,
                                    "job start", &out);
            ftc_ctl_lease_release(a->ctl, holder, ep);
            continue;
        }
        if (ftc_deadline_expired(d))
            return ftc_err_set(err, FTC_ETIMEDOUT, "no generation was set within 30 s");
        ftc_sleep_ms(20);
    }
}

/* ---- replication thread ------------------------------------------------------------------- */

/* FETCH (replication thread): j's copy at hand is refused for j->refusal
 * (already written): warned, marked (j->refused) and added to passed_over.
 * False, for the caller to return. */
static bool ftc__job_refuse(ftc__job_t *j)
{
    FTC_WARN("agent", "fetch: %s", j->refusal);
    j->refused = true;
    size_t pl = strlen(j->passed_over);
    if (pl + 3 < sizeof j->passed_over)
        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%s%s", pl ? "; " : "",
                 j->refusal);
    return false;
}

/* FETCH (replication thread): whether buf, a shard that verified by its
 * content (as it landed, or in this node's replica store), is the version
 * the commit record holds (j->rec_head, when known). Another version of the
 * step (a replica left from an earlier generation before a rollback re-ran
 * the step, a stale copy) is refused like a corrupt one, the holder (where)
 * named: j->refused, j->refusal, passed_over and a warning. A shard whose
 * structure or step is not the one asked for passes here: the control loop
 * refuses it, naming why. */
static bool ftc__job_is_recorded(ftc__job_t *j, const uint8_t *buf, uint64_t size,
                                 const char *where)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (!j->rec_known || ftc_shard_open(&v, buf, size, 0, &err) != 0 || v.info.step != j->step ||
        v.head_xxh3 == j->rec_head)
        return true;
    snprintf(j->refusal, sizeof j->refusal, "%s: rank %u's shard of step %" PRIu64 " has head "
             "checksum %016" PRIx64 ", not the committed version's %016" PRIx64 " (another "
             "version of that step): refused", where, j->owner, j->step, v.head_xxh3,
             j->rec_head);
    return ftc__job_refuse(j);
}

/* FETCH (replication thread): whether the copy of j's shard in this node's
 * replica store verifies (every tensor checksum). A store copy is not
 * checked as it is handed out (a peer's bytes are, as they land): one
 * corrupted since it landed (a flipped bit, an agent's restart adopting
 * what an earlier one left) would go to the rank, whose own check then
 * fails the restore or fetch although a live peer holds a good copy. If
 * not: refused like another version (j->refused, j->refusal, passed_over),
 * and the peers are asked. */
static bool ftc__job_held_verifies(ftc__job_t *j, const uint8_t *buf, uint64_t size)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, buf, size, 0, &err) == 0 &&
        ftc_shard_verify(&v, FTC__VERIFY_THREADS, &err) == 0)
        return true;
    snprintf(j->refusal, sizeof j->refusal, "this node's replica store: rank %u's shard of step "
             "%" PRIu64 " fails verification (%.200s): refused", j->owner, j->step, err.msg);
    return ftc__job_refuse(j);
}

/* FETCH (replication thread): appends why candidate peer could not be
 * asked (its fetch did not start) to j's detail and passed_over. */
static void ftc__fetch_not_started(ftc__job_t *j, uint32_t peer, const char *why)
{
    size_t dl = strlen(j->detail);
    snprintf(j->detail + dl, sizeof j->detail - dl, "%speer %u: not asked: %s", dl ? "; " : "",
             peer, why);
    size_t pl = strlen(j->passed_over);
    if (pl + 3 < sizeof j->passed_over)
        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%speer %u: not asked: %s",
                 pl ? "; " : "", peer, why);
}

/* FETCH (replication thread): starts j's fetch from its next candidate
 * holder that can be asked. A start that fails (the holder is not a peer of
 * the engine: its address could not be added; the GET could not be sent)
 * passes over that holder, its reason kept (the job's detail, passed_over),
 * and tries the next one at once: one unreachable holder used to end the
 * whole round although the next one held the shard. A holder that is
 * already being asked for the same owner (FTC_EINPROGRESS: another job's
 * fetch of that shard, e.g. two ranks restoring it at once; the engine runs
 * one fetch per holder and owner) is asked again at the next turn of the
 * loop (j stays not started), until agent.timeout_ms after it was first
 * found busy, then passed over too. A broken endpoint ends the job
 * (FTC_EFABRIC): the control loop asks again on the new one. With no
 * candidate left the job ends with the last start's error (j->x < 0). */
static void ftc__fetch_start(ftc_agent_t *a, ftc__job_t *j)
{
    int rc = FTC_ENOENT;
    while (j->next_peer < j->npeers) {
        uint32_t peer = j->peers[j->next_peer];
        ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
        rc = ftc_repl_fetch_into(a->repl, peer, j->owner, j->step, j->dst, j->dst_cap, d, &j->x);
        if (rc == 0) {
            j->next_peer++;
            j->busy_since_ns = 0;
            j->started = true;
            return;
        }
        if (rc == FTC_EFABRIC)
            break;
        char why[300];
        snprintf(why, sizeof why, "%s", ftc_repl_errstr(a->repl));
        if (rc == FTC_EINPROGRESS) {
            uint64_t now = ftc_now_ns();
            if (!j->busy_since_ns) {
                j->busy_since_ns = now;
                FTC_INFO("agent", "fetch of rank %u's step %" PRIu64 ": peer %u is busy fetching "
                         "rank %u's shard for another request: asked again (at most %d ms)",
                         j->owner, j->step, peer, j->owner, a->o.timeout_ms);
            }
            if (now - j->busy_since_ns < (uint64_t)a->o.timeout_ms * 1000000ull) {
                j->x = -1; /* not started: asked again at the next turn */
                return;
            }
            snprintf(why, sizeof why, "still busy fetching rank %u's shard for another request "
                     "after %d ms", j->owner, a->o.timeout_ms);
        }
        j->busy_since_ns = 0;
        j->next_peer++;
        FTC_WARN("agent", "fetch of rank %u's step %" PRIu64 ": peer %u not asked (%s)%s",
                 j->owner, j->step, peer, why,
                 j->next_peer < j->npeers ? "; the next holder" : "");
        ftc__fetch_not_started(j, peer, why);
    }
    j->rc = rc;
    j->x = -1;
    j->started = true;
    if (rc == FTC_EFABRIC)
        snprintf(j->detail, sizeof j->detail, "%s", ftc_repl_errstr(a->repl));
}

static void *ftc__repl_main(void *arg)
{
    ftc_agent_t *a = arg;
    ftc__job_t *active = NULL;
    uint64_t adopted = UINT64_MAX; /* the a->rebuilds of the engine that adopted them */
    while (!atomic_load(&a->stop)) {
        if (!a->repl) { /* a rebuild that has not succeeded yet */
            ftc__rebuild_transport(a);
            continue;
        }
        if (adopted != a->rebuilds) { /* the replicas an earlier agent left: before any GET */
            ftc_repl_adopt_all(a->repl, &a->stop);
            adopted = a->rebuilds;
        }
        pthread_mutex_lock(&a->mu);
        ftc__job_t *fresh = a->todo;
        a->todo = NULL;
        pthread_mutex_unlock(&a->mu);
        while (fresh) {
            ftc__job_t *j = fresh;
            fresh = j->next;
            j->next = NULL;
            if (j->kind == JOB_PEER) {
                a->rpeers[j->node].known = true;
                memcpy(a->raddr[j->node], j->addr, j->addr_len);
                a->raddr_len[j->node] = j->addr_len;
                if (j->replace)
                    ftc_repl_peer_remove(a->repl, j->node);
                int rc = ftc_repl_peer_add(a->repl, j->node, j->addr, j->addr_len);
                if (rc)
                    FTC_WARN("agent", "adding peer node %u: %s", j->node,
                             ftc_repl_errstr(a->repl));
                free(j);
                continue;
            }
            j->next = active;
            active = j;
        }
        for (ftc__job_t *j = active; j; j = j->next) {
            if (j->started || j->kind == JOB_GATHER) /* a gather starts its own fetches */
                continue;
            if (j->kind == JOB_FETCH && !j->local_tried) {
                /* this node may hold the replica itself (its ring predecessor's) */
                j->local_tried = true;
                uint64_t hsize = 0;
                const uint8_t *held = NULL;
                int hrc = ftc_repl_held_step(a->repl, j->owner, j->step, &held, &hsize);
                if (hrc == 0 &&
                    !ftc__job_is_recorded(j, held, hsize, "this node's replica store")) {
                    hrc = FTC_ECORRUPT; /* another version of the step: the peers next */
                    snprintf(j->detail, sizeof j->detail, "%s", j->refusal);
                }
                if (hrc == 0 && !ftc__job_held_verifies(j, held, hsize)) {
                    hrc = FTC_ECORRUPT; /* a corrupt copy: the peers next */
                    snprintf(j->detail, sizeof j->detail, "%s", j->refusal);
                }
                if (hrc == 0 &&
                    (j->buf = j->dst && hsize <= j->dst_cap ? j->dst
                                                            : malloc(hsize ? hsize : 1)) != NULL) {
                    ftc_mem_prefault(j->buf, hsize);
                    memcpy(j->buf, held, hsize); /* verified above; the rank verifies its slot */
                    j->buf_size = hsize;
                    j->rc = 0;
                    j->x = -1;
                    j->started = true;
                    snprintf(j->detail, sizeof j->detail, "this node's replica store");
                    continue;
                }
            }
            if (j->kind == JOB_FETCH && j->next_peer >= j->npeers) {
                j->x = -1;
                j->started = true;
                if (j->refused && !j->npeers) { /* the store's copy was refused: why */
                    j->rc = FTC_ECORRUPT;
                    size_t dl = strlen(j->detail);
                    snprintf(j->detail + dl, sizeof j->detail - dl, "; no live peer");
                    continue;
                }
                j->rc = FTC_ENOENT; /* not held here, no live peer to ask */
                snprintf(j->detail, sizeof j->detail, "not in this node's replica store, no "
                         "live peer");
                continue;
            }
            if (j->kind == JOB_FETCH) {
                ftc__fetch_start(a, j);
                continue;
            }
            ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)a->o.timeout_ms);
            int rc = ftc_repl_push_keep(a->repl, j->owner, j->step, j->shard, j->size, j->peers,
                                        j->npeers, j->keep, d, &j->x);
            j->started = true;
            if (rc) {
                j->rc = rc;
                j->x = -1;
                snprintf(j->detail, sizeof j->detail, "%s", ftc_repl_errstr(a->repl));
            }
        }
        bool broken = ftc_repl_progress(a->repl, ftc_deadline_in_ms(active ? 5 : 2), true) ==
                          FTC_EFABRIC ||
                      ftc_fabric_health(a->fab) != 0;
        ftc__job_t **pp = &active;
        while (*pp) {
            ftc__job_t *j = *pp;
            ftc_repl_status_t st;
            bool gather = j->kind == JOB_GATHER;
            if (!gather && !j->started) { /* a FETCH whose holder is busy (ftc__fetch_start) */
                pp = &j->next;
                continue;
            }
            bool finished = gather ? ftc__gather_poll(a->repl, j->gather, broken) : j->x < 0;
            if (!finished && !gather && ftc_repl_status(a->repl, j->x, &st) == 0 && st.done) {
                j->rc = st.rc;
                j->acked = st.acked;
                j->failed = st.failed;
                const char *reason = st.detail;
                if (j->kind == JOB_FETCH && st.rc == 0 &&
                    ftc_repl_take(a->repl, j->x, &j->buf, &j->buf_size) == 0) {
                    j->landed = j->dst && j->buf == j->dst;
                    /* verified by its content as it landed; the version too (I1) */
                    char where[32];
                    snprintf(where, sizeof where, "peer %u", j->peers[j->next_peer - 1]);
                    if (!ftc__job_is_recorded(j, j->buf, j->buf_size, where)) {
                        if (j->buf != j->dst)
                            free(j->buf);
                        j->buf = NULL; /* never delivered: refused like a corrupt copy */
                        j->buf_size = 0;
                        j->landed = false;
                        j->rc = FTC_ECORRUPT;
                        reason = j->refusal;
                    }
                }
                if (j->kind == JOB_FETCH && (j->rc == FTC_ENOENT || reason == j->refusal))
                    j->lacking++;
                else if (j->kind == JOB_FETCH && j->rc == FTC_ETIMEDOUT)
                    j->timedout++;
                if (j->kind == JOB_FETCH && j->detail[0] && j->rc) { /* every candidate's reason */
                    size_t dl = strlen(j->detail);
                    snprintf(j->detail + dl, sizeof j->detail - dl, "; %s", reason);
                } else {
                    snprintf(j->detail, sizeof j->detail, "%s", reason);
                }
                ftc_repl_release(a->repl, j->x);
                finished = true;
                if (j->kind == JOB_FETCH && j->rc && j->next_peer < j->npeers) {
                    size_t pl = strlen(j->passed_over);
                    /* a peer that does not hold it (FTC_ENOENT) is no news; a
                     * refusal is in passed_over already */
                    if (j->rc != FTC_ENOENT && reason == st.detail &&
                        pl + 3 < sizeof j->passed_over)
                        snprintf(j->passed_over + pl, sizeof j->passed_over - pl, "%s%s",
                                 pl ? "; " : "", st.detail);
                    j->started = false; /* try the next candidate */
                    j->rc = 0;
                    finished = false;
                }
            }
            if (!finished && broken && !gather) { /* the endpoint goes away with its transfers */
                if (j->kind == JOB_FETCH && j->next_peer < j->npeers) {
                    j->started = false; /* the next candidate, on the new endpoint */
                    pp = &j->next;
                    continue;
                }
                j->rc = FTC_EFABRIC;
                if (!j->detail[0])
                    snprintf(j->detail, sizeof j->detail, "the fabric endpoint broke");
                finished = true;
            }
            if (!finished) {
                pp = &j->next;
                continue;
            }
            *pp = j->next;
            pthread_mutex_lock(&a->mu);
            j->next = a->done;
            a->done = j;
            pthread_mutex_unlock(&a->mu);
            uint64_t one = 1;
            ssize_t w = write(a->evfd, &one, sizeof one);
            (void)w;
        }
        if (broken && !atomic_load(&a->stop)) { /* a stop aborts the endpoint: no rebuild */
            ftc__rebuild_transport(a);
            uint64_t one = 1;
            ssize_t w = write(a->evfd, &one, sizeof one); /* publish the new address */
            (void)w;
        }
    }
    while (active) {
        ftc__job_t *j = active;
        active = j->next;
        ftc__job_free(j);
    }
    return NULL;
}

/* ---- handling rank messages ------------------------------------------------------------------ */

/* This agent's world (a->world) is the generation record's as it read it at
 * its start: the generation's world, which `ftc run` sets before it starts
 * the agent, or 0 when the record had none yet (a generation that moved on
 * meanwhile: the next round sets it). Re-read when a message disagrees with
 * it; taken only for this agent's own generation. */
static void ftc__refresh_world(ftc_agent_t *a)
{
    uint64_t g = 0;
    uint32_t w = 0;
    if (ftc_ctl_generation(a->ctl, &g, &w) == 0 && g == a->generation && w && w != a->world) {
        FTC_INFO("agent", "generation %" PRIu64 " has world %u (this agent read %u)", g, w,
                 a->world);
        a->world = w;
    }
}

static void ftc__on_hello(ftc_agent_t *a, int fd, const ftc_ap_msg_t *m)
{
    if (strcmp(m->job, a->job)) {
        ftc__reply_error(fd, m->seq, FTC_EAUTH, "this agent serves job '%s', not '%s'", a->job,
                         m->job);
        return;
    }
    if (a->world && ((m->world && m->world != a->world) || m->rank >= a->world))
        ftc__refresh_world(a);
    if (a->world && m->rank >= a->world) {
        ftc__reply_error(fd, m->seq, FTC_ERANGE, "rank %u is not below the world size %u", m->rank,
                         a->world);
        return;
    }
    if (a->world && m->world && m->world != a->world) { /* no commit would ever complete */
        ftc__reply_error(fd, m->seq, FTC_ECONFIG,
                         "rank %u says the world has %u rank(s), but generation "
                         "%" PRIu64 " of this job has %u (nodes x ranks per node, or the "
                         "layout of `ftc run`): make FTC_WORLD_SIZE (or WORLD_SIZE) agree with "
                         "the agents' --nodes and --ranks-per-node", m->rank, m->world,
                         a->generation, a->world);
        return;
    }
    /* one connection is one rank: welcomed as a second rank, both shared
     * this fd, and its close left the other "connected" on a closed fd
     * (polled, read and closed again once the number was reused) */
    const ftc__rank_t *mine = ftc__rank_of_fd(a, fd);
    if (mine && mine->rank != m->rank) {
        ftc__reply_error(fd, m->seq, FTC_EPROTO, "HELLO as rank %u on the connection of rank %u "
                         "(pid %d): one connection per rank; another rank needs a context of "
                         "its own (ftc_create)", m->rank, mine->rank, mine->hello.pid);
        return;
    }
    ftc__rank_t *r = NULL, *free_r = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        if (a->ranks[i].used && a->ranks[i].rank == m->rank)
            r = &a->ranks[i];
        else if (!a->ranks[i].used && !free_r)
            free_r = &a->ranks[i];
    }
    if (r && r->fd >= 0 && r->fd != fd) {
        ftc__reply_error(fd, m->seq, FTC_EEXIST, "rank %u is already connected (pid %d, whose "
                         "context is not destroyed yet): one context per rank; check this "
                         "process's FTC_RANK (or RANK), or end pid %d first (a process it "
                         "forked may still hold its connection)", m->rank, r->hello.pid,
                         r->hello.pid);
        return;
    }
    if (!r) {
        if (!free_r) {
            ftc__reply_error(fd, m->seq, FTC_ERANGE, "this agent serves at most %d ranks",
                             FTC_AGENT_MAX_RANKS);
            return;
        }
        r = free_r;
        memset(r, 0, sizeof *r);
        r->used = true;
        for (int s = 0; s < NS; s++)
            r->slot[s].fd = -1;
    }
    r->fd = fd;
    r->full = false;
    r->rank = m->rank;
    r->src = m->rank;
    r->hello = *m;
    /* the first step time the hang watchdog sees runs from the connection
     * (start, restore, first step), not 0: a median of 0 left only the
     * 5 s floor for a second checkpoint that waits for a large first one */
    r->last_sealed_ns = ftc_now_ns();
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] == fd)
            a->clients[i] = -1;
    ftc_ap_msg_t w;
    ftc_ap_init(&w, FTC_AP_WELCOME);
    w.seq = m->seq;
    w.generation = a->generation;
    w.world = a->world;
    ftc__send(fd, &w);
    FTC_INFO("agent", "rank %u (pid %d) connected", m->rank, m->pid);
    if (a->det && m->pid > 0 && /* its exit becomes a rank_exit event at once */
        ftc_detector_watch_pid(a->det, (int)m->rank, (pid_t)m->pid) == 0)
        ftc_detector_linked(a->det, (int)m->rank); /* and its start-up is bounded */
}


/* WATCH from the supervisor that spawned rank m->rank as m->pid: the
 * detector watches the pid from its start, so that a rank that dies before
 * its HELLO (or never says one: a binary without libftc) still has its
 * rank_exit event. A WATCH that comes after the rank's HELLO (the agent was
 * busy, or the supervisor did not wait for its answer) changes nothing but
 * this: the process is the supervisor's child, which tells its status.
 * That HELLO's watch stands, or ended with the rank's BYE (a clean exit,
 * unless its status says otherwise) or with its exit (already seen once).
 * Only the supervisor this agent runs in may say so, for its own child. */
static void ftc__on_watch(ftc_agent_t *a, int fd, const ftc_ap_msg_t *m)
{
    /* tests: an agent whose loop is busy when a WATCH comes (a synchronous
     * Redis call of a HELLO, a commit poll while Redis is slow) */
    if (a->watch_delay_ms > 0)
        ftc_sleep_ms((uint64_t)a->watch_delay_ms);
    if (strcmp(m->job, a->job)) {
        ftc__reply_error(fd, m->seq, FTC_EAUTH, "this agent serves job '%s', not '%s'", a->job,
                         m->job);
        return;
    }
    if (m->pid <= 0 || m->rank > INT32_MAX) {
        ftc__reply_error(fd, m->seq, FTC_ERANGE, "WATCH of rank %u, pid %d: not a rank and pid",
                         m->rank, m->pid);
        return;
    }
    struct ucred cr;
    socklen_t cl = sizeof cr;
    /* the sender is this process (the supervisor whose thread this agent
     * is), and the pid its child: a rank, or a rank's forked child, must
     * not re-point the watch of a connected rank at a decoy (its real death
     * would go unreported, and each WATCH would put off its hang check).
     * Checked first: another process must not make this loop wait for
     * Redis (the world's re-read below), nor learn the world */
    bool ours = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid == getpid();
    if (!ours) {
        ftc__reply_error(fd, m->seq, FTC_EAUTH, "WATCH of pid %d: only the supervisor running "
                         "this agent may send it, for a process it started", m->pid);
        return;
    }
    /* the world of this generation: the one this agent read, re-read when
     * it had none or the supervisor's (m->world, which it set for this
     * generation) or the rank disagree with it (as a HELLO does); else the
     * supervisor's. Unknown to both (a supervisor that does not say it, a
     * record without one): taken unchecked, as a HELLO is. */
    if (!a->redis_down &&
        (!a->world || m->rank >= a->world || (m->world && m->world != a->world)))
        ftc__refresh_world(a);
    uint32_t world = a->world ? a->world : m->world;
    if (world && m->rank >= world) {
        ftc__reply_error(fd, m->seq, FTC_ERANGE, "WATCH of rank %u, pid %d: not below the world "
                         "size %u of generation %" PRIu64, m->rank, m->pid, world,
                         a->generation);
        return;
    }
    if (!world)
        FTC_INFO("agent", "WATCH of rank %u (pid %d): the world of generation %" PRIu64
                 " is not known yet; the rank is not checked against it", m->rank, m->pid,
                 a->generation);
    ftc_proc_stat_t ps;
    int prc = ftc_proc_stat_read((pid_t)m->pid, &ps);
    if (prc == FTC_ENOENT) {
        /* the supervisor does not wait for an answer while this loop is
         * behind: its rank may have exited, and been reaped, before the
         * WATCH was read. No intruder: said so, not as a refused sender */
        ftc__reply_error(fd, m->seq, FTC_ENOENT, "WATCH of rank %u, pid %d: no such process "
                         "(it exited, and its supervisor reaped it, before this agent read the "
                         "WATCH): not watched; its exit is in the supervisor's log", m->rank,
                         m->pid);
        return;
    }
    if (prc != 0 || ps.ppid != cr.pid) {
        ftc__reply_error(fd, m->seq, FTC_EAUTH, "WATCH of pid %d: only the supervisor running "
                         "this agent may send it, for a process it started", m->pid);
        return;
    }
    const ftc__rank_t *r = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS && !r; i++)
        if (a->ranks[i].used && a->ranks[i].rank == m->rank)
            r = &a->ranks[i];
    int rc = 0;
    /* each generation has its own agent, and the supervisor spawns a rank
     * once per generation: a HELLO of the rank that came first is this
     * spawn's (the pid itself, or the trainer a wrapper script started) */
    if (r && r->hello.pid > 0) {
        FTC_DEBUG("agent", "WATCH of rank %u (pid %d) after the HELLO of pid %d: %s", m->rank,
                  m->pid, r->hello.pid, r->fd >= 0 ? "watched since" : "gone since (its BYE is "
                  "no failure, its exit was reported once)");
        /* the same process: the detector learns that it is our child, whose
         * status this supervisor tells when it reaps it first (its watch,
         * BYE and close stand). Before, a rank killed after its BYE and
         * reaped first was no event, its status never waited for */
        if (a->det && r->hello.pid == m->pid)
            (void)ftc_detector_watch_child(a->det, (int)m->rank, (pid_t)m->pid);
    } else {
        rc = a->det ? ftc_detector_watch_child(a->det, (int)m->rank, (pid_t)m->pid) : 0;
        if (rc) {
            ftc__reply_error(fd, m->seq, rc, "WATCH of rank %u, pid %d: %s", m->rank, m->pid,
                             ftc_strerror(rc));
            return;
        }
        FTC_INFO("agent", "rank %u (pid %d) watched from its start", m->rank, m->pid);
    }
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_WATCH_OK);
    ok.seq = m->seq;
    ok.rank = m->rank;
    ok.pid = m->pid;
    ftc__send(fd, &ok);
}

/* SLOTS of a restarted agent: whether the version v that survived in rank
 * r's slot s, of a step at or before the committed one, may be taken for
 * committed. The slot's bytes outlive its state: a version the agent freed
 * (a step the job committed without it: another rank skipped it, or it was
 * abandoned) or superseded is still there, and taking every such step for
 * committed made a never committed one a committed slot again, which
 * FETCH_AT_MOST then returned (I1). So an older step counts only when the
 * job's commit set in Redis has it, its commit record's checksum (when the
 * record still exists) being this version's, or, where the set does not
 * cover the step or Redis does not answer, when a persist tier holds it
 * committed. The committed step counts unless the record names another
 * version of it; with Redis away it is kept (a restore checks the record
 * again), never freed. *redis_down: a Redis call failed (set here; no
 * other call is made then). */
static bool ftc__survivor_committed(ftc_agent_t *a, const ftc__rank_t *r, int s,
                                    const ftc_shard_view_t *v, bool *redis_down)
{
    uint64_t step = v->info.step;
    bool newest = (int64_t)step == a->committed;
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    if (!*redis_down && ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)step, 1,
                                                                      steps, gens, &n,
                                                                      &oldest)) != 0) {
        FTC_WARN("agent", "rank %u: whether the steps of its surviving slots were committed "
                 "cannot be read from Redis (%s): the committed step %" PRId64 "'s slot is "
                 "kept, older ones only where a persist tier holds them", r->rank,
                 ftc_ctl_errstr(a->ctl), a->committed);
        *redis_down = true;
    }
    const char *why = NULL;
    if (!*redis_down && n == 1 && (uint64_t)steps[0] == step) {
        uint64_t rec = 0;
        bool found = false;
        if (ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, gens[0], (int64_t)step, r->rank,
                                                       &rec, &found)) != 0)
            *redis_down = true; /* the set has it: committed */
        else if (found && rec != v->head_xxh3)
            why = "another version of that step is the committed one";
        if (!why)
            return true;
    } else if (!*redis_down && !newest && oldest >= 0 && (int64_t)step > oldest) {
        why = "the job's commit set does not have it";
    } else if (newest) {
        return true; /* the record has it (not in the set: an older build's, or Redis away) */
    } else if (ftc__each_persist(a, ftc__has_visit, &step)) {
        return true;
    } else {
        why = *redis_down ? "Redis does not answer and no persist tier holds it committed"
                          : "older than the job's commit set keeps, and no persist tier holds "
                            "it committed";
    }
    FTC_INFO("agent", "rank %u: slot %d holds step %" PRIu64 " (head %016" PRIx64 "), not taken "
             "for committed: %s; the slot is free", r->rank, s, step, v->head_xxh3, why);
    return false;
}

static void ftc__on_slots(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    if (r->size && r->size != m->size && r->landing) {
        ftc__reply_error(r->fd, m->seq, FTC_EAGAIN, "a restore of rank %u is landing in its slots: "
                         "retry SLOTS once it is done", r->rank);
        return;
    }
    for (int s = 0; r->size && r->size != m->size && s < NS; s++)
        if (r->st[s] == SL_SEALED && r->pushed[s] && !r->acked[s]) {
            /* the replication thread (or the parity encoder) reads that slot
             * through this mapping: unmapped now, it crashed the agent */
            ftc__reply_error(r->fd, m->seq, FTC_EAGAIN, "rank %u's step %" PRIu64 " (the previous "
                             "layout) is still replicating: retry SLOTS once it is done",
                             r->rank, r->step[s]);
            return;
        }
    if (r->size && r->size != m->size) {
        /* a new layout: the old slots hold another layout's state; a persist
         * write reading them must end before they are unmapped. Not waited
         * for here: the write lasts as long as the file system takes (a slow
         * or hung one), and the control loop waiting for it answered no rank
         * and committed nothing meanwhile; the rank asks again (its own
         * deadline bounds that). Slots pinned only for due steps not handed
         * to the writer yet are not being read: unpinned now. */
        bool pinned = false, read = false;
        for (int s = 0; s < NS; s++) {
            pinned = pinned || r->pinned[s];
            read = read || (r->pinned[s] && a->pwriting >= 0 &&
                            (int64_t)r->step[s] == a->pwriting);
        }
        uint64_t ws = 0;
        if (read && ftc__persister_busy(a->pw, &ws)) {
            ftc__reply_error(r->fd, m->seq, FTC_EAGAIN, "rank %u's step %" PRIu64 " (the "
                             "previous layout) is being written to this node's persist tier: "
                             "retry SLOTS once it is done", r->rank, ws);
            return;
        }
        if (pinned) {
            for (int s = 0; s < NS; s++) { /* gone for the persist tier too */
                r->pinned[s] = false;
                r->st[s] = SL_EMPTY;
            }
            ftc__persist_collect(a); /* (the next due step: without this rank's slots) */
        }
        for (int s = 0; s < NS; s++) {
            ftc_slot_close(&r->slot[s]);
            r->st[s] = SL_EMPTY;
            r->unchecked[s] = false;
        }
        /* no slots until the new ones exist: a BEGIN or RESTORE meanwhile
         * (the new size refused: /dev/shm too small) is answered "before
         * SLOTS" instead of writing into the closed ones */
        r->size = 0;
    }
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_SLOTS_OK);
    ok.seq = m->seq;
    uint64_t t0 = ftc_now_ns();
    char names[NS][FTC_SLOT_NAME_MAX];
    const char *mk[NS];
    unsigned mkflags[NS];
    ftc_slot_t made[NS];
    int mkslot[NS], nmk = 0;
    /* a fresh slot while the job has a committed step: this rank restores
     * one it does not have here (a replacement node), and the fetch lands in
     * the first free slot, its first fresh one: reserved by prefaulting it
     * (MADV_POPULATE_WRITE: the pages posix_fallocate would reserve, mapped
     * in the same pass, so the fetch need not prefault it) */
    bool restoring = a->committed >= 0 && !r->size;
    /* ... and the others are sized and mapped (the rank maps all three) but
     * reserved after RESTORE_OK, while the rank copies (ftc__restore_done),
     * or before the first write into them at the latest */
    for (int s = 0; s < NS; s++) {
        ftc_err_t err = {0};
        char prev[FTC_SLOT_NAME_MAX];
        /* a slot of another size holds the previous layout's shard: keep it
         * (under its prev name) for ranks that re-partition from it */
        if (ftc_slot_name(a->ns, r->rank, s, names[s], sizeof names[s], &err) ||
            ftc_slot_name_prev(a->ns, r->rank, s, prev, sizeof prev, &err) ||
            (!r->slot[s].base && ftc_slot_keep_other_size(names[s], prev, m->size, &err))) {
            ftc__reply_error(r->fd, m->seq, err.code ? err.code : FTC_EIO, "%s", err.msg);
            return;
        }
        if (!r->slot[s].base) {
            mk[nmk] = names[s];
            /* the third slot's memory is reserved only once replication
             * falls behind a step, in the background (ftc__slot_reserve_ahead),
             * or at its first use at the latest */
            mkflags[nmk] = !restoring ? (s == NS - 1 ? FTC_SLOT_DEFER : 0)
                           : nmk == 0 ? FTC_SLOT_POPULATE
                                      : FTC_SLOT_DEFER;
            mkslot[nmk++] = s;
        }
        snprintf(ok.name[s], sizeof ok.name[s], "%s", names[s]);
    }
    if (nmk) {
        ftc_err_t err = {0};
        int rc = ftc_slot_create_all(mk, nmk, m->size, mkflags, made, &err);
        for (int i = 0; i < nmk; i++)
            if (made[i].base)
                r->slot[mkslot[i]] = made[i];
        if (rc) {
            ftc__reply_error(r->fd, m->seq, err.code ? err.code : FTC_EIO, "%s", err.msg);
            return;
        }
    }
    /* slots that survived from before (a restarted rank or agent): learn
     * their state. A version newer than the committed step whose report the
     * commit record holds (with this very checksum) was replicated and may
     * still commit: it stays sealed, or a BEGIN would take its slot and the
     * version would commit without this node's copy (I2). */
    if (!r->size) {
        bool redis_down = false; /* a failed Redis call: not asked again for these slots */
        for (int s = 0; s < NS; s++) {
            ftc_shard_view_t v;
            ftc_err_t err = {0};
            if (r->slot[s].unreserved || /* created empty just now: not read (a hole) */
                ftc_shard_open(&v, r->slot[s].base, m->size, 0, &err) != 0)
                continue;
            if ((int64_t)v.info.step <= a->committed) {
                if (ftc__survivor_committed(a, r, s, &v, &redis_down)) {
                    r->st[s] = SL_COMMITTED;
                    r->step[s] = v.info.step;
                }
                continue;
            }
            /* Redis not answering: whether it was reported is not known;
             * freed, it was written over and, when its report was there, the
             * version committed without this node's copy (I2). It is kept
             * sealed instead, never restored (I1: not known committed), and
             * the commit poll asks the record again (ftc__survivor_recheck);
             * Redis is not asked again for this rank's slots meanwhile. */
            uint64_t rec = 0;
            bool found = false;
            if (!redis_down && ftc__redis_seen(a, ftc_ctl_commit_checksum(
                                                      a->ctl, a->generation,
                                                      (int64_t)v.info.step, r->rank, &rec,
                                                      &found)) != 0)
                redis_down = true;
            if (!redis_down && (!found || rec != v.head_xxh3))
                continue;
            if (redis_down)
                FTC_WARN("agent", "rank %u: slot %d holds step %" PRIu64 " (head %016" PRIx64
                         "), newer than the committed step %" PRId64 ", and whether the commit "
                         "record holds its report cannot be read (Redis does not answer): kept "
                         "sealed, never restored, until the record can be read", r->rank, s,
                         v.info.step, v.head_xxh3, a->committed);
            else
                FTC_INFO("agent", "rank %u: slot %d holds step %" PRIu64 ", reported to the "
                         "commit record and not committed yet: kept sealed", r->rank, s,
                         v.info.step);
            r->unchecked[s] = redis_down;
            r->st[s] = SL_SEALED;
            r->step[s] = v.info.step;
            r->checksum[s] = v.head_xxh3;
            r->pushed[s] = r->acked[s] = r->reported[s] = true;
            r->sealed_ns[s] = ftc_now_ns();
            r->retry_ns[s] = 0;
            r->push_tries[s] = 0;
        }
    }
    FTC_DEBUG("agent", "rank %u: %d slots of %" PRIu64 " bytes ready in %.1f ms (%d created%s)",
              r->rank, NS, m->size, (double)(ftc_now_ns() - t0) / 1e6, nmk,
              nmk && r->slot[mkslot[0]].populated ? ", the first one prefaulted" : "");
    r->size = m->size;
    ok.size = m->size;
    ftc__send(r->fd, &ok);
}

static void ftc__on_begin(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    r->begin_seq = m->seq; /* every answer to it, now or once a slot is free */
    if (!r->size) {
        ftc__reply_error(r->fd, r->begin_seq, FTC_EINVAL, "BEGIN before SLOTS");
        return;
    }
    /* a new BEGIN supersedes a parked one (the rank gave up waiting for it):
     * it must not be answered later, into this BEGIN's reply */
    r->begin_waiting = false;
    /* A rank writes one snapshot at a time and announces it (SEALED) before
     * its next BEGIN: a slot still WRITING for it now was handed out for a
     * snapshot that never happened (the checkpoint failed after BEGIN_OK,
     * or the rank had given up waiting for that BEGIN_OK). Free it, or each
     * such BEGIN loses a slot for good and, three of them later, every
     * checkpoint waits for a slot that never comes. Not the slot a
     * restore's fetch is landing in. */
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_WRITING && r->landing != i + 1) {
            FTC_INFO("agent", "rank %u: slot %d (step %" PRIu64 ") was never sealed; reused",
                     r->rank, i, r->step[i]);
            r->st[i] = SL_EMPTY;
        }
    /* A step not after the job's committed step (the ranks went back to an
     * older step: ftc_fetch, a persist tier that lags the commits) can never
     * be recorded (the commit record never goes backwards), and one this
     * rank already sealed is checkpointed: skipped, with the committed step
     * told first so that ftc_wait_committed of it returns. Taken, such a
     * version was marked committed without its report counting, and a
     * restore could return it instead of the version the record holds (I1). */
    bool again = false;
    for (int i = 0; i < NS; i++)
        again = again || ((r->st[i] == SL_SEALED || r->st[i] == SL_COMMITTED) &&
                          r->step[i] == m->step);
    if ((a->committed >= 0 && m->step <= (uint64_t)a->committed) || again) {
        if (a->committed >= 0) {
            ftc_ap_msg_t cm;
            ftc_ap_init(&cm, FTC_AP_COMMITTED);
            cm.step = (uint64_t)a->committed;
            ftc__send(r->fd, &cm);
        }
        ftc_ap_msg_t sk;
        ftc_ap_init(&sk, FTC_AP_SKIP);
        sk.seq = r->begin_seq;
        sk.step = m->step;
        if (a->committed < 0 || m->step > (uint64_t)a->committed)
            snprintf(sk.text, sizeof sk.text, "step %" PRIu64 " skipped: rank %u already "
                     "checkpointed it", m->step, r->rank);
        else
            snprintf(sk.text, sizeof sk.text, "step %" PRIu64 " skipped: it is not after the "
                     "job's committed step %" PRId64 " (a repeated step, or the ranks went back "
                     "to an older one), "
                     "so it could never commit", m->step, a->committed);
        FTC_INFO("agent", "rank %u: %s", r->rank, sk.text);
        ftc__send(r->fd, &sk);
        return;
    }
    int s = ftc__begin_slot(a, r);
    if (s >= 0) {
        ftc__send_begin_ok(r, s, m->step);
        ftc__slot_reserve_ahead(a, r); /* after the answer: not on this checkpoint's path */
        return;
    }
    if (a->o.busy_policy == FTC_BUSY_WAIT) {
        r->begin_waiting = true;
        r->begin_step = m->step;
        r->begin_since_ns = ftc_now_ns();
        /* the policy applied is reported, like a skip */
        ftc_ctl_event_t e = {.kind = "checkpoint_waiting", .node = a->node_id,
                             .rank = (int)r->rank, .generation = a->generation,
                             .step = (int64_t)m->step,
                             .detail = "previous checkpoint still replicating (policy wait): "
                                       "the checkpoint waits for a commit to free a slot"};
        ftc__event(a, &e);
        return; /* answered when the in-flight version commits */
    }
    ftc_ap_msg_t sk;
    ftc_ap_init(&sk, FTC_AP_SKIP);
    sk.seq = r->begin_seq;
    sk.step = m->step;
    snprintf(sk.text, sizeof sk.text,
             "step %" PRIu64 " skipped: the previous checkpoint is still replicating (policy "
             "skip)",
             m->step);
    ftc__send(r->fd, &sk);
    ftc_ctl_event_t e = {.kind = "checkpoint_skipped", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)m->step,
                         .detail = "previous checkpoint still replicating (policy skip)"};
    ftc__event(a, &e);
}

static void ftc__on_sealed(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    int s = (int)m->slot;
    if (r->st[s] != SL_WRITING || r->step[s] != m->step) {
        ftc__not_committed(r->fd, FTC_EPROTO, m->step,
                           "SEALED slot %d step %" PRIu64 " but it is %s (step %" PRIu64 ")", s,
                           m->step, ftc__sl_name(r->st[s]), r->step[s]);
        return;
    }
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, r->slot[s].base, r->size, 0, &err) != 0 || v.info.step != m->step) {
        r->st[s] = SL_EMPTY;
        ftc__not_committed(r->fd, FTC_ECORRUPT, m->step, "slot %d of rank %u: %s", s, r->rank,
                           err.msg[0] ? err.msg : "step differs");
        return;
    }
    r->st[s] = SL_SEALED;
    r->unchecked[s] = false;
    r->checksum[s] = v.head_xxh3;
    r->pushed[s] = r->acked[s] = false;
    r->reported[s] = false;
    uint64_t now = ftc_now_ns();
    /* checkpoints are the node's view of step progress: heartbeats carry it,
     * and the hang watchdog and straggler warnings use it */
    if (a->det)
        ftc_detector_progress(a->det, (int)r->rank, (int64_t)m->step,
                              r->last_sealed_ns ? (now - r->last_sealed_ns) / 1000 : 0);
    r->last_sealed_ns = now;
    r->sealed_ns[s] = now;
    r->retry_ns[s] = 0;
    r->push_tries[s] = 0;
    if (ftc__step_aborted(a, m->step)) { /* another rank's snapshot of it failed already */
        r->aborted[s] = true;
        ftc__abandon_aborted(a);
        return;
    }
    ftc__try_push(a, r, s);
}

/* The nodes of the current generation: the members of the plan `ftc run`
 * publishes (ftc:{J}:plan:GEN, cached once read); the job's node count for
 * agents started by hand (no plan). */
static uint32_t ftc__gen_members(ftc_agent_t *a)
{
    uint64_t now = ftc_now_ns();
    if (a->members_gen == a->generation && a->members_n &&
        (a->members_planned || now - a->members_ns < 1000000000ull))
        return a->members_n;
    if (a->redis_down) {
        /* not asked: a command timeout (in which no rank is answered) on
         * every push once a second; the count known for the generation, or
         * the job's node count as when the read fails, until Redis answers */
        if (a->members_gen != a->generation || !a->members_n) {
            a->members_planned = false;
            a->members_gen = a->generation;
            a->members_n = a->o.nodes;
            a->members_ns = now;
        }
        return a->members_n;
    }
    char key[200], suffix[48];
    snprintf(suffix, sizeof suffix, "plan:%" PRIu64, a->generation);
    ftc_ctl_key(a->ctl, suffix, key, sizeof key);
    ftc_redis_reply_t *rep = NULL;
    uint32_t n = 0;
    const char *v = NULL;
    size_t len = 0;
    /* recorded like the peer refresh: failed, the next pushes do not ask */
    if (ftc__redis_seen(a, ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "HGET", key,
                                          "members", NULL)) == 0 &&
        ftc_redis_want_str(rep, "plan members", &v, &len, NULL) == 0) {
        bool in = false;
        for (size_t i = 0; i < len; i++) {
            bool sp = v[i] == ' ';
            if (!sp && !in)
                n++;
            in = !sp;
        }
    }
    ftc_redis_reply_free(rep);
    a->members_planned = n && n <= a->o.nodes;
    a->members_gen = a->generation;
    a->members_n = a->members_planned ? n : a->o.nodes;
    a->members_ns = now;
    return a->members_n;
}

/* Hands a sealed slot to the replication thread once its k peers are known
 * (agents that are still starting publish their addresses a little later);
 * gives up when the replication timeout passes. */
void ftc__try_push(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    if (r->pushed[s] || r->st[s] != SL_SEALED)
        return;
    if (r->retry_ns[s] && ftc_now_ns() < r->retry_ns[s])
        return; /* a failed push waits a little: the poll retries it */
    if (a->par && ftc__par_try_push(a, r, s))
        return;
    int k = a->o.redundancy.kind == FTC_RED_REPLICA ? a->o.redundancy.copies : 1;
    if (k > 0 && (a->o.nodes == 1 || (a->world && a->world <= a->o.ranks_per_node))) {
        /* a job of one node (or a generation whose ranks are all this
         * node's: `ftc run` shrunk to it): no peer can hold a replica, so the
         * checkpoint commits from this node's memory alone (and the persist
         * tier, when configured) rather than never */
        if (!a->alone_warned)
            FTC_WARN("agent", "node %u is the job's only node: checkpoints commit without "
                     "replicas (redundancy %d needs %d nodes); losing this node loses them "
                     "unless the persist tier (persist.dir) has them", a->o.index, k, k + 1);
        a->alone_warned = true;
        k = 0;
    }
    uint32_t members = k > 0 ? ftc__gen_members(a) : 0;
    if (k > 0 && members >= 2 && (uint32_t)k > members - 1) {
        /* a generation shrunk below redundancy + 1 nodes: every other member
         * holds a replica, which is all it can do (waiting for k peers
         * would never commit again) */
        if (!a->fewer_warned)
            FTC_WARN("agent", "generation %" PRIu64 " has %u nodes: checkpoints commit with %u "
                     "replica(s) instead of %d until more nodes join", a->generation, members,
                     members - 1, k);
        a->fewer_warned = true;
        k = (int)members - 1;
    }
    if (k == 0) {
        r->pushed[s] = r->acked[s] = true;
        ftc__report_commit(a, r, s);
        return;
    }
    for (int o = 0; o < NS; o++) {
        if (o == s || r->st[o] != SL_SEALED)
            continue;
        /* One push per rank at a time, in step order, and only once the older
         * step has committed (retried by the poll): a peer keeps two versions
         * per owner, the newest it received and the one before, so pushing
         * step N+1 while step N has not committed could make a peer drop the
         * newest committed replica (N-1). */
        if (r->step[o] < r->step[s])
            return;
        if (r->pushed[o] && !r->acked[o])
            return; /* (a newer step already in flight: this older one waits its turn) */
    }
    uint32_t peers[FTC_REPL_MAX_PEERS];
    int np = ftc__placement(a, peers, k);
    if (np < k) {
        if (ftc_now_ns() - r->sealed_ns[s] < (uint64_t)a->o.timeout_ms * 1000000ull)
            return; /* retried by the poll */
        r->st[s] = SL_EMPTY;
        ftc__not_committed(r->fd, FTC_ENOENT, r->step[s],
                           "step %" PRIu64
                           ": only %d of the %d replica peers are known after %d ms",
                           r->step[s], np, k, a->o.timeout_ms);
        ftc__answer_begin(a, r);
        return;
    }
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!j)
        return; /* retried by the poll */
    j->kind = JOB_PUSH;
    j->owner = r->rank;
    j->step = r->step[s];
    j->shard = r->slot[s].base;
    j->size = r->size;
    memcpy(j->peers, peers, (size_t)np * sizeof peers[0]);
    j->npeers = np;
    j->keep = a->committed;
    r->pushed[s] = true;
    ftc__queue(a, j);
}

/* Tries to push r's other sealed slots (a push of slot s ended); try_push
 * keeps them in step order. */
void ftc__push_others(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    for (int o = 0; o < NS; o++)
        if (o != s)
            ftc__try_push(a, r, o);
}

static void ftc__on_push_done(ftc_agent_t *a, ftc__job_t *j)
{
    ftc__rank_t *r = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].rank == j->owner)
            r = &a->ranks[i];
    if (!r)
        return;
    int s = -1;
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_SEALED && r->step[i] == j->step)
            s = i;
    if (s < 0)
        return;
    if (r->aborted[s]) { /* nothing to report or retry: abandoned now the push is over */
        r->acked[s] = true;
        ftc__abandon_aborted(a);
        return;
    }
    int k = a->o.redundancy.kind == FTC_RED_REPLICA ? a->o.redundancy.copies : 1;
    if (j->rc == 0 && j->acked >= (k < j->npeers ? k : j->npeers)) {
        r->acked[s] = true;
        ftc__report_commit(a, r, s);
        ftc__push_others(a, r, s); /* the next step may have waited for this push */
        return;
    }
    uint64_t now = ftc_now_ns(), limit = (uint64_t)a->o.timeout_ms * 1000000ull;
    if (now - r->sealed_ns[s] + 200000000ull < limit) {
        /* A peer that restarted (a new address: the transfer was cancelled),
         * a connection refused while its agent was still starting, a peer
         * that died since placement: the version is still good, so it goes
         * again, to the peers known then, until the replication timeout.
         * Failing it at once would leave the other ranks' copies of this
         * step waiting for a commit that never comes. */
        r->push_tries[s]++;
        FTC_WARN("agent", "rank %u step %" PRIu64 ": replicated to %d of %d peers (%s); trying "
                 "again (%d failed so far)", r->rank, j->step, j->acked, j->npeers, j->detail,
                 r->push_tries[s]);
        r->pushed[s] = false;
        r->retry_ns[s] = now + 100000000ull;
        a->last_peers_ns = 0; /* re-read the peers' addresses and liveness before the retry */
        return;
    }
    FTC_WARN("agent", "rank %u step %" PRIu64 ": replicated to %d of %d peers: %s", r->rank,
             j->step, j->acked, j->npeers, j->detail);
    r->st[s] = SL_EMPTY; /* not committed; the previous version stays */
    ftc__not_committed(r->fd, j->rc ? j->rc : FTC_EIO, j->step,
                       "step %" PRIu64 " not committed: replicated to %d of %d peers: %s", j->step,
                       j->acked, j->npeers, j->detail);
    ftc__push_others(a, r, s);
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
}

static void ftc__drain_done(ftc_agent_t *a)
{
    uint64_t v;
    ssize_t rd = read(a->evfd, &v, sizeof v);
    (void)rd;
    pthread_mutex_lock(&a->mu);
    ftc__job_t *done = a->done;
    a->done = NULL;
    pthread_mutex_unlock(&a->mu);
    while (done) {
        ftc__job_t *j = done;
        done = j->next;
        if (j->kind == JOB_PUSH && j->par)
            ftc__par_on_push_done(a, j);
        else if (j->kind == JOB_PUSH)
            ftc__on_push_done(a, j);
        else if (j->kind == JOB_FETCH)
            ftc__on_fetch_done(a, j);
        else if (j->kind == JOB_GATHER)
            ftc__par_on_gather_done(a, j);
        ftc__job_free(j);
    }
    ftc__par_collect(a); /* the parity worker signals the same eventfd */
}

static void ftc__disconnect(ftc_agent_t *a, int fd)
{
    ftc__rank_t *r = ftc__rank_of_fd(a, fd);
    if (r) {
        FTC_INFO("agent", "rank %u disconnected (its slots stay)", r->rank);
        if (a->det && r->hello.pid > 0) /* a BYE of it can no longer come */
            ftc_detector_closed(a->det, (int)r->rank, (pid_t)r->hello.pid);
        if (r->fetch_name[0]) { /* a FETCH copy it did not unlink (it died first) */
            ftc_err_t e = {0};
            ftc_slot_unlink(r->fetch_name, &e);
            r->fetch_name[0] = 0;
        }
        r->fd = -1;
        r->full = false;
        r->begin_waiting = false;
        r->restoring = false;
        for (int s = 0; s < NS; s++)
            if (r->st[s] == SL_WRITING)
                r->st[s] = SL_EMPTY; /* a half-written snapshot is never used */
    }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] == fd)
            a->clients[i] = -1;
    close(fd);
}

/* REPORT: an event the rank detected (its numerical guard): into the
 * stream through the detector's queue (survives a Redis outage), deduped per
 * (kind, node, rank, step). */
static void ftc__on_report(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    const char *kind = m->name[0];
    size_t kl = strlen(kind);
    bool ok = kl >= 1 && kl <= 23;
    for (size_t i = 0; ok && i < kl; i++)
        ok = (kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') ||
             kind[i] == '_';
    if (!ok) {
        ftc__reply_error(r->fd, m->seq, FTC_EINVAL,
                         "REPORT: event kind '%.40s': need 1..23 of [a-z0-9_]", kind);
        return;
    }
    double value;
    memcpy(&value, &m->size, sizeof value);
    char detail[256];
    snprintf(detail, sizeof detail, "loss %.6g; %s", value, m->text);
    FTC_WARN("agent", "rank %u reports %s at step %" PRIu64 ": %s", r->rank, kind, m->step, detail);
    if (a->det) {
        ftc_detector_report(a->det, kind, (int)r->rank, (int64_t)m->step, detail);
    } else {
        ftc_ctl_event_t e = {.kind = kind, .node = a->node_id, .rank = (int)r->rank,
                             .generation = a->generation, .step = (int64_t)m->step,
                             .detail = detail, .t_detect_ms = ftc_wall_ms()};
        ftc__event(a, &e);
    }
    ftc_ap_msg_t ok_msg;
    ftc_ap_init(&ok_msg, FTC_AP_REPORT_OK);
    ok_msg.seq = m->seq;
    ok_msg.step = m->step;
    ftc__send(r->fd, &ok_msg);
}

/* The flag of fd's connection whose socket is full (ftc__rank_t.full);
 * NULL for no connection of this loop's. */
static bool *ftc__full_flag(ftc_agent_t *a, int fd)
{
    ftc__rank_t *r = ftc__rank_of_fd(a, fd);
    if (r)
        return &r->full;
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] == fd)
            return &a->clients_full[i];
    return NULL;
}

/* Whether fd's peer reads its answers: false when the socket no longer
 * polls writable, a quarter of its buffer unread (a peer that sends
 * requests and reads no answer; libftc reads each before its next request,
 * its notices are a few per step). Its requests are then left unread until
 * it reads (the loop polls it for POLLOUT), so that what it is owed stays
 * well within the buffer (ftc__send): each answer that could not be sent
 * blocked this loop, which serves every rank of the node, for a second, and
 * was lost. A peer that hung up is read (its answers fail at once). */
static bool ftc__reads_answers(ftc_agent_t *a, int fd)
{
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 0) != 0)
        return true;
    bool *full = ftc__full_flag(a, fd);
    if (full && !*full) {
        const ftc__rank_t *r = ftc__rank_of_fd(a, fd);
        FTC_WARN("agent", "%s %u (pid %d) reads none of the answers to its requests: its "
                 "socket is full, and its next requests are read once it reads them",
                 r ? "rank" : "unidentified connection", r ? r->rank : (unsigned)fd,
                 r ? r->hello.pid : 0);
    }
    if (full)
        *full = true;
    return !full; /* (no flag: a connection of no one's, read as before) */
}

static void ftc__on_message(ftc_agent_t *a, int fd)
{
    if (!ftc__reads_answers(a, fd))
        return;
    ftc_ap_msg_t m;
    memset(&m, 0, sizeof m); /* (a short message leaves the rest as it was) */
    ftc_err_t err = {0};
    if (ftc_ap_recv(fd, &m, 1000, &err) != 0) {
        if (err.code != FTC_EIO)
            FTC_WARN("agent", "bad message from a local client: %s", err.msg);
        /* a rank of another ftc build: told so before the connection closes
         * (the message keeps its size and magic, version and type their
         * offsets in every version, so its libftc reads the version of this
         * answer and names both versions) */
        if (err.code == FTC_EPROTO && m.magic == FTC_AP_MAGIC && m.version != FTC_AP_VERSION &&
            m.version != 0)
            ftc__reply_error(fd, 0, FTC_EPROTO, "%s", err.msg);
        ftc__disconnect(a, fd);
        return;
    }
    ftc__rank_t *r = ftc__rank_of_fd(a, fd);
    if (m.type == FTC_AP_HELLO) {
        ftc__on_hello(a, fd, &m);
        return;
    }
    if (m.type == FTC_AP_WATCH && !r) { /* the supervisor's, never a rank's */
        ftc__on_watch(a, fd, &m);
        return;
    }
    if (!r) {
        ftc__reply_error(fd, m.seq, FTC_EPROTO, "say HELLO first");
        ftc__disconnect(a, fd);
        return;
    }
    switch (m.type) {
    case FTC_AP_SLOTS:
        ftc__on_slots(a, r, &m);
        break;
    case FTC_AP_BEGIN:
        ftc__on_begin(a, r, &m);
        break;
    case FTC_AP_SEALED:
        ftc__on_sealed(a, r, &m);
        break;
    case FTC_AP_ABORT:
        ftc__on_abort(a, r, &m);
        break;
    case FTC_AP_RESTORE:
    case FTC_AP_FETCH:
    case FTC_AP_FETCH_AT_MOST:
        ftc__on_restore(a, r, &m);
        break;
    case FTC_AP_REPORT:
        ftc__on_report(a, r, &m);
        break;
    case FTC_AP_BYE:
        if (a->det) /* a clean end: its exit is no failure unless its status says so */
            ftc_detector_bye(a->det, (int)r->rank, (pid_t)r->hello.pid);
        ftc__disconnect(a, fd);
        break;
    default:
        ftc__reply_error(fd, m.seq, FTC_EPROTO, "unexpected message type %u", m.type);
    }
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static _Atomic(const char *) ftc__phase; /* ftc_agent_phase */
#define FTC__PHASE(p) atomic_store(&ftc__phase, (const char *)(p))

const char *ftc_agent_phase(void)
{
    return atomic_load(&ftc__phase);
}

bool ftc_agent_domain_valid(const char *domain)
{
    /* published as one word of "hexaddr node_id domain gen" in
     * ftc:{J}:fabric, where "-" means none: anything else would be read
     * back as another domain (other parity groups) by the peers, and as
     * a stale entry by `ftc run` */
    size_t dl = strlen(domain);
    bool ok = dl < 64 && strcmp(domain, "-") != 0;
    for (size_t i = 0; ok && i < dl; i++)
        ok = (unsigned char)domain[i] > ' ' && (unsigned char)domain[i] < 0x7f;
    return ok;
}

ftc_agent_t *ftc_agent_start(const ftc_agent_options_t *o, ftc_err_t *err)
{
    if (!o->job || !o->dir || o->nodes < 1 || o->index >= o->nodes || o->ranks_per_node < 1 ||
        o->persist_every < 0 || o->timeout_ms < 1) {
        ftc_err_set(err, FTC_EINVAL, "agent: job, dir, nodes >= 1, index < nodes and "
                                     "ranks_per_node >= 1 are required");
        return NULL;
    }
    if (o->domain && !ftc_agent_domain_valid(o->domain)) {
        ftc_err_set(err, FTC_EINVAL, "agent: failure domain '%.80s' is not 1..63 printable "
                    "characters without spaces (and not \"-\"): use a label like rack-a",
                    o->domain);
        return NULL;
    }
    if (o->node_id && *o->node_id && !ftc_ctl_node_id_valid(o->node_id)) {
        /* the detector's join refuses it: the agent used to wait for a
         * generation that never came and fail 30 s later, naming that */
        ftc_err_set(err, FTC_EINVAL, "agent: node id '%.80s' is not 1..%d characters of "
                    "A-Za-z0-9 . _ : / - (a name like node3 or host-a:0)", o->node_id,
                    FTC_CTL_NODE_MAX);
        return NULL;
    }
    ftc_agent_t *a = calloc(1, sizeof *a);
    if (!a) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
        return NULL;
    }
    a->o = *o;
    a->listen_fd = a->evfd = -1;
    a->committed = -1;
    a->newest_local = -1;
    a->persisted = -1;
    a->pwriting = -1;
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        a->clients[i] = -1;
    pthread_mutex_init(&a->mu, NULL);
    snprintf(a->job, sizeof a->job, "%s", o->job);
    snprintf(a->dir, sizeof a->dir, "%s", o->dir);
    if (o->node_id && *o->node_id)
        snprintf(a->node_id, sizeof a->node_id, "%s", o->node_id);
    else
        snprintf(a->node_id, sizeof a->node_id, "node%u", o->index);
    snprintf(a->domain, sizeof a->domain, "%s", o->domain ? o->domain : "");
    snprintf(a->ns, sizeof a->ns, "%s.n%u", o->job, o->index);
    a->o.job = a->job;
    a->o.dir = a->dir;
    a->peers = calloc(o->nodes, sizeof *a->peers);
    a->rpeers = calloc(o->nodes, sizeof *a->rpeers);
    a->raddr = calloc(o->nodes, sizeof *a->raddr);
    a->raddr_len = calloc(o->nodes, sizeof *a->raddr_len);
    if (!a->peers || !a->rpeers || !a->raddr || !a->raddr_len) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
        goto fail;
    }
    /* parity groups: refused before anything starts when they cannot be formed */
    if (o->redundancy.kind == FTC_RED_XOR || o->redundancy.kind == FTC_RED_RS) {
        a->par = calloc(1, sizeof *a->par);
        if (!a->par) {
            ftc_err_set(err, FTC_ENOMEM, "agent: out of memory");
            goto fail;
        }
        for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
            a->par->enc[i].ok_step = -1;
        /* index order; with a failure domain the groups are formed once every
         * node's domain is known (ftc__par_resolve) */
        if (ftc__par_geometry(&o->redundancy, o->nodes, NULL, o->index, &a->par->geo, err))
            goto fail;
        a->par->resolve_by_ns = ftc_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
        if ((uint64_t)o->nodes * o->ranks_per_node >= FTC_PAR_OWNER_BIT) {
            ftc_err_set(err, FTC_ECONFIG, "parity groups support worlds below 2^31 ranks");
            goto fail;
        }
    }
    const char *wd = getenv("FTC_TEST_AGENT_WATCH_DELAY_MS"); /* tests only */
    int64_t wdv = 0;
    if (wd && *wd && ftc_parse_int(wd, 0, 60000, &wdv) != 0) {
        ftc_err_set(err, FTC_EINVAL, "FTC_TEST_AGENT_WATCH_DELAY_MS is '%.40s': a whole number "
                    "of ms in 0..60000 (a test knob; unset it)", wd);
        goto fail;
    }
    a->watch_delay_ms = (int)wdv;
    if (ftc_fs_mkdirs(a->dir, err))
        goto fail;
    /* Redis */
    FTC__PHASE("start: connecting to Redis");
    ftc_redis_t *r = ftc_redis_connect(&o->redis, NULL, err);
    if (!r)
        goto fail;
    a->ctl = ftc_ctl_create(r, a->job, err);
    if (!a->ctl) {
        ftc_redis_close(r);
        goto fail;
    }
    FTC__PHASE("start: reading the generation");
    if (ftc__generation(a, err))
        goto fail;
    int64_t cstep;
    uint64_t cgen;
    if (ftc_ctl_committed(a->ctl, &cstep, &cgen) == 0)
        a->committed = cstep;
    /* fabric + replication engine; the address goes to Redis before our
     * heartbeat does, so peers never see us alive with a stale address */
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = o->provider;
    fo.abort_flag = &a->stop; /* a stop ends a post or wait the replication thread is in */
    a->fopt = fo;
    uint8_t secret[32];
    size_t slen = 0;
    if (ftc__secret(a, secret, &slen, err) || ftc_wire_key_init(&a->key, a->job, secret, slen, err))
        goto fail;
    ftc_repl_options_t ro = FTC_REPL_OPTIONS_INIT;
    ro.key = a->key;
    ro.job = a->job; /* the engine adds .n<self> itself */
    ro.self = o->index;
    ro.generation = a->generation;
    a->ropt = ro;
    FTC__PHASE("start: opening the fabric endpoint");
    if (ftc__open_transport(a, err) || ftc__publish_address(a, err))
        goto fail;
    /* detector: heartbeats, leases, events for this node */
    ftc_detector_options_t dopt = FTC_DETECTOR_OPTIONS_INIT;
    dopt.job = a->job;
    dopt.node = a->node_id;
    dopt.domain = a->domain;
    if (o->hang_min_ms > 0)
        dopt.hang_min_ms = o->hang_min_ms;
    if (o->start_ms)
        dopt.start_ms = o->start_ms > 0 ? o->start_ms : 0;
    if (o->ttl_ms > 0) {
        dopt.ttl_ms = o->ttl_ms;
        if (dopt.heartbeat_ms > o->ttl_ms / 4)
            dopt.heartbeat_ms = o->ttl_ms / 4;
    }
    FTC__PHASE("start: the detector");
    a->det = ftc_detector_start(&o->redis, &dopt, err);
    if (!a->det)
        goto fail;
    /* persist tier */
    if (o->persist_dir && *o->persist_dir) {
        /* one writer per version directory: each node persists under its own */
        char pdir[4200];
        snprintf(pdir, sizeof pdir, "%s/node%u", o->persist_dir, o->index);
        a->persist = ftc_persist_open(pdir, &o->persist, err);
        if (!a->persist)
            goto fail;
        a->pw = ftc__persister_start(a->persist, err);
        if (!a->pw)
            goto fail;
    }
    /* the ranks' socket */
    FTC__PHASE("start: the ranks' socket and threads");
    ftc_agent_socket_path(a->dir, o->index, a->sock, sizeof a->sock);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(a->sock) >= sizeof sa.sun_path) {
        ftc_err_set(err, FTC_EINVAL, "agent socket path %s is too long (use a shorter --job-dir)",
                    a->sock);
        goto fail;
    }
    /* bound and listening under a temporary name, then renamed into place:
     * a rank that sees the path never finds it refusing connections */
    char tmp[sizeof sa.sun_path];
    int tl = snprintf(tmp, sizeof tmp, "%s.%d", a->sock, (int)getpid());
    if (tl < 0 || (size_t)tl >= sizeof tmp) {
        ftc_err_set(err, FTC_EINVAL, "agent socket path %s is too long (use a shorter --job-dir)",
                    a->sock);
        goto fail;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", tmp);
    unlink(tmp);
    a->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a->listen_fd < 0 || bind(a->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(a->listen_fd, 64) != 0 || rename(tmp, a->sock) != 0) {
        ftc_err_errno(err, errno, "agent socket %s", a->sock);
        unlink(tmp);
        goto fail;
    }
    a->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->evfd < 0) {
        ftc_err_errno(err, errno, "eventfd");
        goto fail;
    }
    if (a->par) {
        /* one parity thread per local index (each encodes its own stripe),
         * at most one per core but one: the ranks compute on the cores */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int pt = (int)o->ranks_per_node;
        if (cores > 1 && pt > cores - 1)
            pt = (int)cores - 1;
        if (!(a->par->worker = ftc__par_worker_start(a->evfd, pt, err)))
            goto fail;
        FTC_DEBUG("agent", "parity worker: %d thread(s)", ftc__par_worker_threads(a->par->worker));
    }
    if (pthread_create(&a->repl_tid, NULL, ftc__repl_main, a) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "agent: cannot start the replication thread");
        goto fail;
    }
    a->repl_started = true;
    FTC__PHASE("start: reading the peers");
    ftc__refresh_peers(a);
    /* the groups: published ones adopted, index order formed (and
     * published) at once; with a failure domain, every node's may be in
     * Redis already (a restart), else they are formed from the poll */
    if (a->par && ftc__par_resolve(a) < 0) {
        ftc_err_set(err, FTC_ECONFIG, "agent: parity groups: %s", a->par->why);
        goto fail;
    }
    FTC_INFO("agent", "node %u (%s) of job %s: generation %" PRIu64 ", world %u, socket %s",
             o->index, a->node_id, a->job, a->generation, a->world, a->sock);
    FTC__PHASE(NULL);
    return a;
fail:
    ftc_agent_stop(a);
    return NULL;
}

/* The loop has ended (its supervisor stops the agent: the job's end): the
 * BYEs and closes it did not read yet, read now for the detector only (the
 * rest is dropped, as it was: nothing answers any more). A rank that said
 * BYE and exited with 0 while the loop was behind has its exit waiting in
 * the detector for that BYE, and the detector's stop decides what still
 * waits with what it knows: without this, a rank_exit "exited (status 0)"
 * for a clean end. A few messages per rank at most, none waited for. */
static void ftc__read_last_byes(ftc_agent_t *a)
{
    for (int i = 0; a->det && i < FTC_AGENT_MAX_RANKS; i++) {
        const ftc__rank_t *r = &a->ranks[i];
        if (!r->used || r->fd < 0 || r->hello.pid <= 0)
            continue;
        for (int k = 0; k < 16; k++) {
            ftc_ap_msg_t m;
            memset(&m, 0, sizeof m);
            ftc_err_t err = {0};
            int rc = ftc_ap_recv(r->fd, &m, 0, &err);
            if (rc == FTC_ETIMEDOUT)
                break; /* nothing more there: its connection is open */
            if (!rc && m.type == FTC_AP_BYE)
                ftc_detector_bye(a->det, (int)r->rank, (pid_t)r->hello.pid);
            if (rc == FTC_EIO || (!rc && m.type == FTC_AP_BYE)) {
                ftc_detector_closed(a->det, (int)r->rank, (pid_t)r->hello.pid);
                break;
            }
        }
    }
}

/* Connections that said no HELLO within agent.timeout_ms of their accept
 * are closed, with an ERROR (request id 0, which ftc_create reads) and a
 * WARN naming the peer's pid: each holds one of the FTC_AGENT_MAX_CLIENTS
 * places, and a process that connects and says nothing held its place for
 * ever (that many of them locked every rank out). libftc says HELLO right
 * after its connect. Not this process's own connections: the supervisor
 * (`ftc run`, whose thread this agent is) sends WATCHes on one connection
 * that says no HELLO, at its own pace. Runs after the pass that read what
 * was ready, so a HELLO that arrived in time (the agent was busy, or
 * stopped) is read first. */
static void ftc__expire_silent(ftc_agent_t *a)
{
    uint64_t now = ftc_now_ns();
    uint64_t limit = (uint64_t)a->o.timeout_ms * 1000000ull;
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++) {
        if (a->clients[i] < 0 || a->clients_pid[i] == getpid() ||
            now - a->clients_since_ns[i] <= limit)
            continue;
        int fd = a->clients[i];
        FTC_WARN("agent", "closed a connection (pid %d) that said no HELLO within %d ms "
                 "(agent.timeout_ms) of connecting: its place is free for a rank",
                 a->clients_pid[i], a->o.timeout_ms);
        ftc_ap_msg_t m;
        ftc_ap_init(&m, FTC_AP_ERROR);
        m.status = FTC_ETIMEDOUT;
        snprintf(m.text, sizeof m.text, "this agent closed the connection: it said no HELLO "
                 "within %d ms (agent.timeout_ms) of connecting", a->o.timeout_ms);
        ftc_err_t err = {0};
        ftc_ap_send_now(fd, &m, &err); /* (no room: closed all the same) */
        ftc__disconnect(a, fd);
    }
}

int ftc_agent_run(ftc_agent_t *a, volatile sig_atomic_t *stop)
{
    struct pollfd pfd[2 + FTC_AGENT_MAX_RANKS + FTC_AGENT_MAX_CLIENTS];
    while (!*stop) {
        int n = 0;
        pfd[n++] = (struct pollfd){a->listen_fd, POLLIN, 0};
        pfd[n++] = (struct pollfd){a->evfd, POLLIN, 0};
        /* a connection whose socket is full is read again once it is not */
        for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
            if (a->ranks[i].used && a->ranks[i].fd >= 0)
                pfd[n++] = (struct pollfd){a->ranks[i].fd,
                                           a->ranks[i].full ? POLLOUT : POLLIN, 0};
        for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
            if (a->clients[i] >= 0)
                pfd[n++] = (struct pollfd){a->clients[i],
                                           a->clients_full[i] ? POLLOUT : POLLIN, 0};
        int pr = poll(pfd, (nfds_t)n, 20);
        if (pr < 0 && errno != EINTR)
            return ftc_err_errno(&a->err, errno, "agent poll");
        if (pr > 0) {
            if (pfd[0].revents & POLLIN) {
                int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0) {
                    int slot = -1;
                    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS && slot < 0; i++)
                        if (a->clients[i] < 0)
                            slot = i;
                    if (slot < 0) {
                        /* said, to it and in the log: it was closed silently,
                         * and its libftc blamed another ftc build */
                        FTC_WARN("agent", "a connection refused: %d connections that said no "
                                 "HELLO are open (at most %d; a process that connects and "
                                 "says nothing holds one until it is closed, %d ms after "
                                 "its connect)", FTC_AGENT_MAX_CLIENTS, FTC_AGENT_MAX_CLIENTS,
                                 a->o.timeout_ms);
                        ftc__reply_error(fd, 0, FTC_EAGAIN, "this agent has %d connections "
                                         "open that said no HELLO (at most %d): a process "
                                         "that connects to its socket and says nothing holds "
                                         "one, until the agent closes it %d ms "
                                         "(agent.timeout_ms) after its connect; retry then",
                                         FTC_AGENT_MAX_CLIENTS, FTC_AGENT_MAX_CLIENTS,
                                         a->o.timeout_ms);
                        close(fd);
                    } else {
                        struct ucred cr;
                        socklen_t cl = sizeof cr;
                        a->clients[slot] = fd;
                        a->clients_full[slot] = false;
                        a->clients_since_ns[slot] = ftc_now_ns();
                        a->clients_pid[slot] =
                            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 ? cr.pid : 0;
                    }
                }
            }
            if (pfd[1].revents & POLLIN) {
                ftc__drain_done(a);
                pthread_mutex_lock(&a->mu);
                bool rp = a->republish;
                pthread_mutex_unlock(&a->mu);
                ftc_err_t perr = {0};
                if (rp && ftc__publish_address(a, &perr))
                    FTC_WARN("agent", "%s", perr.msg);
            }
            for (int i = 2; i < n; i++) {
                bool *full = pfd[i].events == POLLOUT ? ftc__full_flag(a, pfd[i].fd) : NULL;
                if (full && (pfd[i].revents & POLLOUT))
                    *full = false; /* it read: its requests are read again */
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                    ftc__on_message(a, pfd[i].fd);
            }
        }
        ftc__persist_collect(a);
        ftc__expire_silent(a);
        uint64_t now = ftc_now_ns();
        /* Redis not answering: nothing can commit, and no peer address can
         * be learned; asked once per FTC__REDIS_PROBE_NS, not every pass */
        bool ask = !a->redis_down || now - a->redis_fail_ns > FTC__REDIS_PROBE_NS;
        if (ask && now - a->last_poll_ns > 10000000ull) { /* every 10 ms while commits pend */
            a->last_poll_ns = now;
            ftc__poll_commits(a);
        }
        now = ftc_now_ns();
        ask = !a->redis_down || now - a->redis_fail_ns > FTC__REDIS_PROBE_NS;
        if (ask && now - a->last_peers_ns > 500000000ull) {
            a->last_peers_ns = now;
            ftc__refresh_peers(a);
        }
    }
    ftc__read_last_byes(a);
    return 0;
}

/* Agents whose replication thread did not stop in time (ftc__abandon):
 * kept reachable, never freed — the thread may still touch them. */
static ftc_agent_t *ftc__abandoned[64];
static pthread_mutex_t ftc__abandoned_mu = PTHREAD_MUTEX_INITIALIZER;

/* The replication thread is blocked inside libfabric (the tcp provider's
 * connect() is blocking: a SYN nobody answers holds it for the kernel's
 * retries, tens of seconds) and will see `stop` only when that returns. The
 * agent goes away without it: its detector stops (no more heartbeats), its
 * sockets close (a new agent can take the socket path), and everything the
 * thread may still use — the engine, the endpoint, the slots it pushes
 * from, the eventfd, the job lists — stays allocated, for good. A bounded
 * leak per stuck stop, instead of a stop as long as the kernel's SYN
 * retries. */
static void ftc__abandon(ftc_agent_t *a)
{
    FTC_WARN("agent", "the replication thread did not stop within %d ms (blocked in "
             "libfabric, likely a connect to a peer that does not answer): the agent leaves "
             "without it, and its engine, endpoint and slot mappings stay allocated for it",
             FTC__STOP_JOIN_MS);
    if (a->par) {
        ftc__par_worker_stop(a->par->worker);
        a->par->worker = NULL;
    }
    ftc__persister_stop(a->pw);
    a->pw = NULL;
    ftc_detector_stop(a->det, true);
    a->det = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used && a->ranks[i].fd >= 0) {
            close(a->ranks[i].fd);
            a->ranks[i].fd = -1;
        }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] >= 0) {
            close(a->clients[i]);
            a->clients[i] = -1;
        }
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        unlink(a->sock);
        a->listen_fd = -1;
    }
    ftc_fabric_shutdown_sockets(a->fab); /* peers that still have our address: refused */
    pthread_detach(a->repl_tid);
    pthread_mutex_lock(&ftc__abandoned_mu);
    for (size_t i = 0; i < sizeof ftc__abandoned / sizeof ftc__abandoned[0]; i++)
        if (!ftc__abandoned[i]) {
            ftc__abandoned[i] = a;
            break;
        }
    pthread_mutex_unlock(&ftc__abandoned_mu);
}

void ftc_agent_exit_status(ftc_agent_t *a, uint32_t rank, pid_t pid, int status)
{
    if (a && a->det && rank <= INT32_MAX)
        ftc_detector_exit_status(a->det, (int)rank, pid, status);
}

void ftc_agent_unwatch(ftc_agent_t *a, uint32_t rank)
{
    if (a && a->det && rank <= INT32_MAX)
        ftc_detector_unwatch(a->det, (int)rank);
}

int ftc_agent_flush(ftc_agent_t *a, ftc_err_t *err)
{
    if (!a || !a->pw)
        return 0;
    ftc__poll_commits(a); /* the last commit may have landed after the run loop's last poll */
    /* the running write, then every due step it left (each collect starts the next) */
    for (int round = 0; round <= NS + 1 && (a->pwriting >= 0 || a->pqn > 0); round++) {
        ftc__persister_wait(a->pw);
        ftc__persist_collect(a);
        ftc__persist_kick(a);
    }
    if (a->newest_local < 0 || a->persisted >= a->newest_local) {
        if (a->newest_local >= 0)
            FTC_INFO("agent", "flush: step %" PRId64 " is already in the persist tier",
                     a->persisted);
        return 0;
    }
    uint64_t step = (uint64_t)a->newest_local;
    a->persist_rc = 0;
    if (!ftc__persist(a, step))
        return ftc_err_set(err, FTC_EAGAIN, "flush: the persist writer is still busy");
    ftc__persister_wait(a->pw);
    ftc__persist_collect(a);
    if (a->persisted >= (int64_t)step) {
        FTC_INFO("agent", "flush: step %" PRIu64 " written to the persist tier", step);
        return 0;
    }
    if (a->persist_rc)
        return ftc_err_set(err, a->persist_rc, "flush of step %" PRIu64 " to the persist tier: %s",
                           step, a->persist_detail);
    return 0; /* no slot of this node holds that step any more (nothing to write) */
}

void ftc_agent_stop(ftc_agent_t *a)
{
    if (!a)
        return;
    atomic_store(&a->stop, true);
    uint64_t t[5];
    t[0] = ftc_now_ns();
    FTC__PHASE("stop: joining the replication thread");
    if (a->repl_started) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += FTC__STOP_JOIN_MS / 1000;
        if (pthread_timedjoin_np(a->repl_tid, NULL, &ts) != 0) {
            FTC__PHASE("stop: abandoning the replication thread");
            ftc__abandon(a);
            FTC__PHASE(NULL);
            return;
        }
    }
    if (a->par) { /* it writes to the eventfd closed below */
        ftc__par_worker_stop(a->par->worker);
        a->par->worker = NULL;
    }
    t[1] = ftc_now_ns();
    FTC__PHASE("stop: the persist thread");
    ftc__persister_stop(a->pw); /* waits for a running write: it reads the slots closed below */
    a->pw = NULL;
    t[2] = ftc_now_ns();
    pthread_mutex_lock(&a->mu);
    ftc__job_t *lists[2] = {a->todo, a->done};
    a->todo = a->done = NULL;
    pthread_mutex_unlock(&a->mu);
    for (int l = 0; l < 2; l++)
        while (lists[l]) {
            ftc__job_t *j = lists[l];
            lists[l] = j->next;
            ftc__job_free(j);
        }
    /* the engine first: its transfers read (pushes) and write (fetches
     * landing in a slot) the ranks' slots until it is gone */
    FTC__PHASE("stop: the replication engine");
    ftc_repl_destroy(a->repl);
    a->repl = NULL;
    FTC__PHASE("stop: closing the fabric endpoint");
    ftc_fabric_close(a->fab);
    a->fab = NULL;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        if (!a->ranks[i].used)
            continue;
        if (a->ranks[i].fd >= 0)
            close(a->ranks[i].fd);
        for (int s = 0; s < NS; s++)
            ftc_slot_close(&a->ranks[i].slot[s]);
    }
    for (int i = 0; i < FTC_AGENT_MAX_CLIENTS; i++)
        if (a->clients[i] >= 0)
            close(a->clients[i]);
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        unlink(a->sock);
    }
    if (a->evfd >= 0)
        close(a->evfd);
    t[3] = ftc_now_ns();
    ftc_persist_close(a->persist);
    ftc__par_free(a);
    FTC__PHASE("stop: the detector");
    ftc_detector_stop(a->det, true);
    t[4] = ftc_now_ns();
    FTC__PHASE(NULL);
    if (t[4] - t[0] > 2000000000ull) /* where a slow stop spent its time */
        FTC_WARN("agent", "stopping took %" PRIu64 " ms: replication (and parity) threads %" PRIu64
                 " ms, persist thread %" PRIu64 " ms, endpoint %" PRIu64 " ms, detector %"
                 PRIu64 " ms", (t[4] - t[0]) / 1000000, (t[1] - t[0]) / 1000000,
                 (t[2] - t[1]) / 1000000, (t[3] - t[2]) / 1000000, (t[4] - t[3]) / 1000000);
    ftc_ctl_destroy(a->ctl);
    free(a->peers);
    free(a->marks);
    free(a->rpeers);
    free(a->raddr);
    free(a->raddr_len);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
