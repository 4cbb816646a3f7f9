/*
 * agent_restore.c — the agent's RESTORE, FETCH and FETCH_AT_MOST
 * (agent_internal.h): a committed version from the local slot if it
 * verifies, else from a peer's replica, else rebuilt from parity
 * (agent_stripe.c), else from the persist tier; every copy checked against
 * the head checksum the commit record holds (I1).
 */
#include "ckpt/agent_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Restore: local slot, else peers, else the persist tier. */
/* verified: every checksum of slot s was verified here after its last write */
void ftc__restore_done(ftc_agent_t *a, ftc__rank_t *r, int s, bool verified)
{
    (void)a;
    r->restoring = false;
    FTC_DEBUG("agent", "rank %u: RESTORE answered (slot %d, step %" PRIu64 ") %.1f ms after it "
              "arrived", r->rank, s, r->step[s], (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_RESTORE_OK);
    ok.seq = r->restore_seq;
    ok.slot = (uint32_t)s;
    ok.step = r->step[s];
    ok.status = verified ? FTC_AP_OK_VERIFIED : 0;
    ftc__send(r->fd, &ok);
    /* a second slot that deferred its reservation, while the rank copies:
     * on a thread at the lowest priority, so that it takes neither the
     * cores the rank's copy (and the other ranks' restores) need nor this
     * thread, which serves the node's other ranks meanwhile; the rank's
     * first BEGIN into it reserves what is left (ftc__slot_reserve). The
     * third waits for replication to fall behind a step, as at a start
     * (ftc__slot_reserve_ahead). */
    int reserved = 0;
    for (int i = 0; i < NS; i++)
        reserved += r->slot[i].base && !r->slot[i].unreserved;
    for (int i = 0; i < NS && reserved < NS - 1; i++) {
        if (!r->slot[i].base || !r->slot[i].unreserved)
            continue;
        reserved++;
        ftc_slot_reserve_background(&r->slot[i]);
        FTC_DEBUG("agent", "rank %u: slot %d being reserved in the background", r->rank, i);
    }
}

/* Copies a verified shard into a slot that may be overwritten; -1 if none
 * fits (a size other than the slots', err.code 0) or the slot could not be
 * reserved (err says why). */
int ftc__install(ftc__rank_t *r, const uint8_t *buf, uint64_t size, uint64_t step,
                 ftc_err_t *err)
{
    if (size != r->size)
        return -1;
    int s = ftc__free_slot(r);
    /* none free: the slot of the newest committed version this node holds
     * (the restore found it missing or corrupt, or an older step), never a
     * sealed one (replicating, its commit reported: the node's copy of a
     * version that may commit) nor one the persist thread reads */
    int keep = ftc__newest_committed(r);
    if (s < 0 && keep >= 0 && !r->pinned[keep] && r->landing != keep + 1)
        s = keep;
    if (s < 0) {
        ftc_err_set(err, FTC_EAGAIN, "every slot of rank %u is in use (versions replicating or "
                    "waiting for their commit, a persist write): retry the restore once one "
                    "commits", r->rank);
        return -1;
    }
    if (ftc__slot_reserve(r, s, err))
        return -1;
    uint64_t t0 = ftc_now_ns();
    ftc_mem_prefault(r->slot[s].base, size); /* a fresh slot: no fault per page */
    memcpy(r->slot[s].base, buf, size);
    FTC_DEBUG("agent", "rank %u: %" PRIu64 " bytes copied into slot %d in %.1f ms", r->rank, size,
              s, (double)(ftc_now_ns() - t0) / 1e6);
    r->st[s] = SL_COMMITTED;
    r->step[s] = step;
    return s;
}

static bool ftc__same_coords(const ftc_shard_view_t *v, const ftc__rank_t *r)
{
    return v->info.dp_rank == r->hello.dp_rank && v->info.tp_rank == r->hello.tp_rank &&
           v->info.pp_rank == r->hello.pp_rank;
}

/* The global rank a shard belongs to (Megatron's order, as ckpt/client.c). */
static uint32_t ftc__info_rank(const ftc_shard_info_t *i)
{
    return (i->dp_rank * i->pp + i->pp_rank) * i->tp + i->tp_rank;
}

/* Is v the shard r's RESTORE / FETCH asks for? Its own: same coordinates;
 * another rank's (after a layout change): that rank's coordinates. */
static bool ftc__is_subject(const ftc_shard_view_t *v, const ftc__rank_t *r)
{
    return r->src == r->rank && !r->fetch ? ftc__same_coords(v, r)
                                          : ftc__info_rank(&v->info) == r->src;
}

/* Whether v (in slot s of r, -1: another shm object) is the version the commit
 * record holds: its head checksum is the recorded one (want, when known). */
static bool ftc__is_recorded(const ftc__rank_t *r, const ftc_shard_view_t *v, int s,
                             uint64_t want, bool known)
{
    if (!known || v->head_xxh3 == want)
        return true;
    char where[48];
    if (s >= 0)
        snprintf(where, sizeof where, "slot %d", s);
    else
        snprintf(where, sizeof where, "a slot of another layout");
    FTC_WARN("agent", "rank %u: %s holds step %" PRIu64 " with head checksum %016" PRIx64
             ", not the committed version's %016" PRIx64 " (a snapshot of that step that was "
             "never committed): not restored from it", r->rank, where, v->info.step,
             v->head_xxh3, want);
    return false;
}

/* Whether v, a verified shard of r's subject from `from` (a parity rebuild,
 * a persist tier), is the version the commit record holds for r's restore
 * step (r->rec_head, when known; another step, an older one a persist tier
 * has: the content alone). If not: a warning, and why (cap bytes) says so. */
bool ftc__copy_is_recorded(const ftc__rank_t *r, const ftc_shard_view_t *v,
                           const char *from, char *why, size_t cap)
{
    if (!r->rec_known || v->info.step != r->restore_step || v->head_xxh3 == r->rec_head)
        return true;
    snprintf(why, cap, "%s: rank %u's shard of step %" PRIu64 " has head checksum %016" PRIx64
             ", not the committed version's %016" PRIx64 " (another version of that step): "
             "refused", from, r->src, v->info.step, v->head_xxh3, r->rec_head);
    FTC_WARN("agent", "rank %u: %s", r->rank, why);
    return false;
}

/* FETCH: the verified shard goes into a fresh shm object the rank maps and
 * unlinks (the previous one is unlinked here, in case the rank died first). */
static void ftc__fetch_reply(ftc_agent_t *a, ftc__rank_t *r, const uint8_t *buf, uint64_t size,
                             uint64_t step, const char *from)
{
    ftc_err_t err = {0};
    if (r->fetch_name[0])
        ftc_slot_unlink(r->fetch_name, &err);
    r->fetch_name[0] = 0;
    r->restoring = false;
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.%s.f%u.%" PRIu64, a->ns, r->rank, r->fetches++);
    ftc_slot_t sl;
    if (ftc_slot_create(name, size, &sl, &err)) {
        ftc__reply_error(r->fd, r->restore_seq, err.code ? err.code : FTC_EIO,
                         "fetch of rank %u step %" PRIu64 ": %s", r->src, step, err.msg);
        return;
    }
    memcpy(sl.base, buf, size);
    ftc_slot_close(&sl);
    snprintf(r->fetch_name, sizeof r->fetch_name, "%s", name);
    ftc_ap_msg_t ok;
    ftc_ap_init(&ok, FTC_AP_FETCH_OK);
    ok.seq = r->restore_seq;
    ok.step = step;
    ok.size = size;
    ok.src = (int32_t)r->src;
    snprintf(ok.name[0], sizeof ok.name[0], "%s", name);
    FTC_INFO("agent", "rank %u fetched rank %u's shard of step %" PRIu64 " (%" PRIu64
             " bytes) from %s", r->rank, r->src, step, size, from);
    ftc__send(r->fd, &ok);
}

/* Hands a verified shard of r's subject to r: into one of its slots
 * (RESTORE) or a shm copy (FETCH). */
static void ftc__deliver(ftc_agent_t *a, ftc__rank_t *r, const uint8_t *buf, uint64_t size,
                         uint64_t step, const char *from)
{
    if (r->fetch) {
        ftc__fetch_reply(a, r, buf, size, step, from);
        return;
    }
    ftc_err_t ierr = {0};
    int s = ftc__install(r, buf, size, step, &ierr);
    if (s < 0 && ierr.code) {
        r->restoring = false;
        ftc__reply_error(r->fd, r->restore_seq, ierr.code,
                         "restoring rank %u's shard of step %" PRIu64 ": %s", r->src, step,
                         ierr.msg);
        return;
    }
    if (s < 0) {
        r->restoring = false;
        ftc__reply_error(r->fd, r->restore_seq, FTC_ERANGE,
                         "rank %u's shard of step %" PRIu64 " has %" PRIu64 " bytes, the slots of "
                         "rank %u %" PRIu64 ": a rank whose layout changed reads it with ftc_fetch",
                         r->src, step, size, r->rank, r->size);
        return;
    }
    FTC_INFO("agent", "rank %u restored step %" PRIu64 "%s from %s", r->rank, step,
             r->src == r->rank ? "" : " (the shard of a previous rank)", from);
    ftc__restore_done(a, r, s, false); /* copied: the rank verifies the slot */
}

static bool ftc__at_most_next(ftc_agent_t *a, ftc__rank_t *r, const char *tried, const char *why);

/* Node i's persist tier (persist_dir/nodeI), opened read-only; NULL when it
 * cannot be. */
static ftc_persist_t *ftc__node_persist(const ftc_agent_t *a, uint32_t i)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/node%u", a->o.persist_dir, i);
    ftc_err_t err = {0};
    return ftc_persist_open_reader(dir, &err);
}

/* Loads the newest committed version of p whose step is below want (the
 * persist tier lags the commits: every persist.every-th one), trying older
 * ones when a version fails to load. Never a newer step: a FETCH of an older
 * agreed step, or a restore after a rollback, must not get a later state.
 * 0, or -1 with why (cap bytes) saying what was tried. */
static int ftc__persist_load_at_most(ftc_persist_t *p, uint64_t want, ftc_persist_loaded_t **out,
                                     char *why, size_t cap)
{
    ftc_persist_version_t *v = NULL;
    int n = 0, tried = 0;
    if (ftc_persist_list(p, &v, &n) != 0) {
        snprintf(why, cap, "%s", ftc_persist_errstr(p));
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < n && rc; i++) { /* newest first */
        if (v[i].step >= want || v[i].state != FTC_PV_COMMITTED)
            continue;
        tried++;
        rc = ftc_persist_load(p, v[i].step, out);
        if (rc)
            snprintf(why, cap, "%s", ftc_persist_errstr(p));
    }
    if (rc && !tried)
        snprintf(why, cap, "no persisted version before step %" PRIu64 " (%d version(s), "
                 "none older and committed)", want, n);
    free(v);
    return rc;
}

/* Delivers r's subject from persisted version l of `from` when l has its
 * shard and it is the recorded version (ftc__copy_is_recorded); else false
 * with why (cap bytes). l is freed either way. Its shards were verified by
 * ftc_persist_load (every tensor's xxh3, ftc_shard_open FTC_SHARD_VERIFY,
 * after the file, chunk and raw-shard checksums), and these are the same
 * bytes in this process's memory: opened here without verifying them again
 * (a second full pass over every shard of the version until the subject's,
 * which caught nothing the first did not). The rank still verifies what
 * lands in its slot (the copy into shared memory). */
static bool ftc__deliver_persisted(ftc_agent_t *a, ftc__rank_t *r, ftc_persist_loaded_t *l,
                                   const char *from, char *why, size_t cap)
{
    bool done = false, found = false;
    for (int k = 0; k < l->n_shards && !found; k++) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        if (ftc_shard_open(&v, l->shards[k], l->sizes[k], 0, &err) != 0 ||
            !ftc__is_subject(&v, r))
            continue;
        found = true;
        if (l->step <= r->restore_step && ftc__copy_is_recorded(r, &v, from, why, cap)) {
            ftc__deliver(a, r, l->shards[k], l->sizes[k], l->step, from);
            done = true;
        }
    }
    if (!found)
        snprintf(why, cap, "persisted step %" PRIu64 " has no shard for rank %u", l->step,
                 r->src);
    ftc_persist_loaded_free(l);
    return done;
}

/* This node's persist tier (a->pw's directory), opened read-only as the
 * other nodes' tiers are: a load never waits for the persist thread, whose
 * write of a whole version (zstd, fsync) lasts as long as a slow or hung
 * file system makes it. The control loop used to take the writer's handle
 * and so waited for the write, answering no rank and committing nothing,
 * and the restore failed at the rank's deadline although the tier held an
 * older step. The version being written has no COMMITTED marker yet, so it
 * is not seen; one the writer's retention removes while it is read fails to
 * load like any bad version. NULL with why (cap bytes) when it cannot be
 * opened. */
static ftc_persist_t *ftc__own_persist(const ftc_agent_t *a, char *why, size_t cap)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/node%u", a->o.persist_dir, a->o.index);
    ftc_err_t err = {0};
    ftc_persist_t *p = ftc_persist_open_reader(dir, &err);
    if (!p && why)
        snprintf(why, cap, "this node's persist tier cannot be read: %s", err.msg);
    return p;
}

/* This node's persist tier (ftc__own_persist): the restore step (older
 * false), else the newest committed version older than it (older true;
 * never a newer one). True once delivered; else why (cap bytes) says what
 * was found. */
static bool ftc__restore_from_own_tier(ftc_agent_t *a, ftc__rank_t *r, bool older, char *why,
                                       size_t cap)
{
    ftc_persist_loaded_t *l = NULL;
    ftc_persist_t *p = ftc__own_persist(a, why, cap);
    if (!p)
        return false;
    int rc = older ? ftc__persist_load_at_most(p, r->restore_step, &l, why, cap)
                   : ftc_persist_load(p, r->restore_step, &l);
    if (rc && !older)
        snprintf(why, cap, "%s", ftc_persist_errstr(p));
    ftc_persist_close(p);
    return rc == 0 && ftc__deliver_persisted(a, r, l, "the persist tier", why, cap);
}

/* The persist tiers of the other nodes (persist.dir/node<I>, read-only: a
 * shared file system in a real job). A lost node's shards exist only there
 * once its memory is gone (a shrink gave its ranks to survivors); a live
 * node's hold its ranks' older steps, which a re-partition at an older
 * step needs once they left that node's slots. Nodes that are not alive
 * first; the restore step (older false), else the newest committed version
 * of each that is older (older true: the trainer brings every rank back to
 * one step). True once delivered. */
static bool ftc__restore_from_other_tiers(ftc_agent_t *a, ftc__rank_t *r, bool older,
                                          char *looked, size_t cap)
{
    if (!a->o.persist_dir || !*a->o.persist_dir)
        return false;
    for (int pass = 0; pass < 2; pass++) /* lost nodes, then live ones */
        for (uint32_t i = 0; i < a->o.nodes; i++) {
            bool alive = a->peers[i].known && a->peers[i].alive;
            if (i == a->o.index || alive != (pass == 1))
                continue;
            ftc_persist_t *p = ftc__node_persist(a, i);
            if (!p)
                continue;
            size_t ll = strlen(looked);
            if (!older) /* (the older pass opens the same ones) */
                snprintf(looked + ll, cap - ll, "%s%u", ll ? ", " : "", i);
            ftc_persist_loaded_t *l = NULL;
            char from[64], why[400];
            snprintf(from, sizeof from, "the persist tier of node %u", i);
            int rc = older ? ftc__persist_load_at_most(p, r->restore_step, &l, why, sizeof why)
                           : ftc_persist_load(p, r->restore_step, &l);
            ftc_persist_close(p);
            if (rc == 0 && ftc__deliver_persisted(a, r, l, from, why, sizeof why))
                return true;
        }
    return false;
}

/* The persist tiers, last: the restore step in this node's, then in the
 * other nodes'; only then (not for FETCH_AT_MOST, whose older committed
 * steps are candidates of their own) the newest older version in this
 * node's, then in the other nodes'. An older version in one tier used to
 * be taken before the exact step in another (this node's older one before
 * the other tiers, a lost node's before a live node's exact step). */
void ftc__restore_from_persist(ftc_agent_t *a, ftc__rank_t *r, const char *tried)
{
    char why[700] = "no persist tier configured", looked[120] = "";
    if (a->pw && ftc__restore_from_own_tier(a, r, false, why, sizeof why))
        return;
    if (ftc__restore_from_other_tiers(a, r, false, looked, sizeof looked))
        return;
    if (!r->at_most) {
        char older[256] = "";
        if (a->pw && ftc__restore_from_own_tier(a, r, true, older, sizeof older))
            return;
        if (ftc__restore_from_other_tiers(a, r, true, looked, sizeof looked))
            return;
        if (a->pw) {
            size_t wl = strlen(why);
            snprintf(why + wl, sizeof why - wl, "; older: %s", older);
        }
    }
    if (looked[0]) { /* where else it looked: first, the rank's error text is bounded */
        char mine[700];
        snprintf(mine, sizeof mine, "%s", why);
        snprintf(why, sizeof why, "none in the tiers of node(s) %s; this node's: %s", looked,
                 mine);
    }
    if (r->at_most && ftc__at_most_next(a, r, tried, why))
        return;
    r->restoring = false;
    ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                     "no verified copy of rank %u step %" PRIu64 ": %s; persist tier: %s", r->src,
                     r->restore_step, tried, why);
}

/* Queues a fetch of r's restore step: first from this node's own replica
 * store (the replicas it holds for its ring predecessors: after a shrink to
 * this node alone, the only copy of a lost node's shards), then from every
 * live peer in ring order; false when no peer is known and (parity mode)
 * there is no replica store to look at. */
bool ftc__queue_fetch(ftc_agent_t *a, ftc__rank_t *r)
{
    ftc__job_t *j = calloc(1, sizeof *j);
    if (!j)
        return false;
    j->kind = JOB_FETCH;
    j->owner = r->src;
    j->step = r->restore_step;
    j->req_rix = (int)(r - a->ranks);
    j->req = r->req;
    j->rec_head = r->rec_head;
    j->rec_known = r->rec_known;
    j->dst_slot = -1;
    for (uint32_t d = 1; d < a->o.nodes; d++) {
        uint32_t node = (a->o.index + d) % a->o.nodes;
        if (a->peers[node].known && a->peers[node].alive)
            j->peers[j->npeers++] = node;
    }
    /* (before a slot is taken for it: a job never queued left its landing
     * slot marked being written, one slot fewer for the rank for good) */
    if (!j->npeers && a->par) {
        free(j);
        return false;
    }
    /* a RESTORE: straight into a slot the rank may have overwritten anyway
     * (no buffer, no copy; the replication thread writes it, so it is marked
     * WRITING, and its mapping stays until the fetch is done) */
    int s = !r->fetch && r->size && !r->landing ? ftc__free_slot(r) : -1;
    ftc_err_t rerr = {0};
    if (s >= 0 && r->slot[s].base && ftc__slot_reserve(r, s, &rerr) == 0) {
        r->st[s] = SL_WRITING;
        r->step[s] = r->restore_step;
        r->landing = s + 1;
        j->dst = r->slot[s].base;
        j->dst_cap = r->size;
        /* a fresh slot's pages in one call (about half the cost of one fault
         * per page as the DATA lands), unless its creation did */
        if (!r->slot[s].populated)
            ftc_mem_prefault(j->dst, j->dst_cap);
        j->dst_rix = (int)(r - a->ranks);
        j->dst_slot = s;
    }
    r->restore_attempts++;
    FTC_DEBUG("agent", "rank %u: fetch of rank %u step %" PRIu64 " queued (request %" PRIu64 "), "
              "%d candidate peer(s), %.1f ms after the request", r->rank, r->src,
              r->restore_step, r->req, j->npeers, (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    ftc__queue(a, j);
    return true;
}

/* Looks for r's restore_step (set by the caller, with at_most, fetch, src)
 * in every source, in order: this node's slots, else a peer's replica (or a
 * parity rebuild), else the persist tier; the answer goes to the rank, or
 * (FETCH_AT_MOST) a step that has no copy moves on to the next candidate.
 * gen: the generation that committed it, looked up for the commit record's
 * checksum; nogen: why it is not known (NULL when gen is). */
static void ftc__search(ftc_agent_t *a, ftc__rank_t *r, uint64_t gen, const char *nogen)
{
    bool fetch = r->fetch;
    uint32_t src = r->src;
    int64_t step = (int64_t)r->restore_step;
    r->rebuild_later = false;
    /* The checksum the commit record holds for the subject's shard of the
     * committed step: a copy whose content verifies but is another version
     * of that step (a snapshot that was never committed, a stale one, a
     * replica or persisted version left from before a rollback re-ran the
     * step) is not it (I1): every source below checks it. Unknown for an
     * older step a FETCH asks for (its generation is not known here; a
     * FETCH_AT_MOST knows it from the commit set), when the record expired
     * (an hour after the step's last report) or Redis is away: then the
     * content alone. Redis known away (a call failed, this request's or
     * an earlier one, and none answered since): not asked, so a
     * FETCH_AT_MOST of up to FTC__AT_MOST_CANDS steps costs one command
     * timeout, not one per step, and stays within the rank's own deadline. */
    uint64_t want = 0;
    bool want_known = false;
    if (!nogen && a->redis_down) {
        ftc_log(r->at_most && r->icand > 0 ? FTC_LOG_DEBUG : FTC_LOG_INFO, "agent",
                "rank %u: Redis does not answer: the commit record's checksum of rank %u step "
                "%" PRId64 " is not asked for; copies are checked by their content only",
                r->rank, src, step);
    } else if (!nogen && ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, gen, step, src,
                                                                    &want, &want_known)) != 0) {
        FTC_WARN("agent", "rank %u: the commit record's checksum of rank %u step %" PRId64
                 " could not be read (%s): copies are checked by their content only, and Redis "
                 "is not asked again for this request until it answers", r->rank, src, step,
                 ftc_ctl_errstr(a->ctl));
        want_known = false;
    } else if (!want_known) {
        FTC_DEBUG("agent", "rank %u: no commit record checksum for rank %u step %" PRIu64 " (%s): "
                  "copies are checked by their content only", r->rank, src, r->restore_step,
                  nogen ? nogen : "the record has none: expired or withdrawn");
    }
    r->rec_head = want;
    r->rec_known = want_known;
    /* 1. this node's slots: the rank's own, or those the subject left here
     * (a node keeps its previous ranks' slots across a layout change) */
    for (int s = 0; s < NS; s++) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        /* structure and step first: only the right step's slot is hashed */
        if (!(src == r->rank && r->slot[s].base && !r->slot[s].unreserved &&
              !(r->unchecked[s] && r->st[s] == SL_SEALED && !want_known) &&
              ftc_shard_open(&v, r->slot[s].base, r->size, 0, &err) == 0 &&
              v.info.step == (uint64_t)step && ftc__is_subject(&v, r)))
            continue;
        if (!ftc__is_recorded(r, &v, s, want, want_known)) {
            if (r->st[s] == SL_COMMITTED)
                r->st[s] = SL_EMPTY; /* not the committed version: free (the fetch may land here) */
            continue;
        }
        if (ftc_shard_verify(&v, FTC__VERIFY_THREADS, &err) == 0) {
            if (!fetch) {
                r->st[s] = SL_COMMITTED;
                r->step[s] = (uint64_t)step;
                ftc__restore_done(a, r, s, true); /* verified here: the rank need not */
            } else {
                ftc__deliver(a, r, r->slot[s].base, r->size, (uint64_t)step, "this node's slot");
            }
            return;
        }
    }
    /* ... and the slots a rank left here under another layout (prev names) */
    for (int k = 0; k < 2 * NS; k++) {
        if (src == r->rank && k < NS && r->slot[k].base)
            continue; /* its current slots, mapped: looked at above */
        {
            int s = k % NS;
            char name[FTC_SLOT_NAME_MAX];
            ftc_slot_t sl;
            ftc_err_t err = {0};
            if ((k < NS ? ftc_slot_name(a->ns, src, s, name, sizeof name, &err)
                        : ftc_slot_name_prev(a->ns, src, s, name, sizeof name, &err)) ||
                ftc_slot_open(name, false, &sl, &err))
                continue;
            ftc_shard_view_t v;
            uint64_t total = 0;
            bool ok = ftc_shard_peek_size(sl.base, sl.size, &total, &err) == 0 &&
                      total <= sl.size &&
                      ftc_shard_open(&v, sl.base, total, FTC_SHARD_VERIFY, &err) == 0 &&
                      v.info.step == (uint64_t)step && ftc__is_subject(&v, r) &&
                      ftc__is_recorded(r, &v, -1, want, want_known);
            if (ok)
                ftc__deliver(a, r, sl.base, total, (uint64_t)step, "this node's memory");
            ftc_slot_close(&sl);
            if (ok)
                return;
        }
    }
    /* 2. a peer's replica (every live peer, ring order); a freshly started
     * agent's peer table may be older than the peers' restarts (it refreshes
     * every 500 ms): one refresh now is cheaper than a failed round; not
     * while Redis does not answer (a command timeout for nothing): the
     * addresses already known */
    if (!a->redis_down)
        ftc__refresh_peers(a);
    r->restore_attempts = 0;
    if (!a->par && ftc__queue_fetch(a, r))
        return;
    /* 2'. parity groups: rebuilt from the surviving members' shards and parity
     * (a RESTORE: the rank's own shard, or the previous rank's it continues
     * after a layout change, which used to go straight to the persist tier;
     * a FETCH is not rebuilt) */
    if (a->par && !fetch && ftc__par_queue_rebuild(a, r, false))
        return;
    if (a->par && ftc__queue_fetch(a, r)) /* serve_local: the subject's node may answer */
        return;
    /* 3. the persist tier */
    ftc__restore_from_persist(a, r, "not in this node's slots, no peer known");
}

/* FETCH_AT_MOST: adds a committed step to r's candidates (newest first, no
 * twice, the newest FTC__AT_MOST_CANDS kept); a generation fills in an
 * unknown one. */
static void ftc__cand_add(ftc__rank_t *r, uint64_t step, uint64_t gen)
{
    int k = 0;
    while (k < r->ncand && r->cand[k] > step)
        k++;
    if (k < r->ncand && r->cand[k] == step) {
        if (!r->cand_gen[k])
            r->cand_gen[k] = gen;
        return;
    }
    if (!gen && r->cand_cover >= 0 && (int64_t)step >= r->cand_cover) {
        /* a slot or persisted version of a step the commit set would have
         * (I1: marked committed once, by an agent of an older build, or a
         * slot read back after a restart) */
        FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST: step %" PRIu64 " is not in the commit set: "
                  "never committed, not looked for", r->rank, step);
        return;
    }
    if (k == FTC__AT_MOST_CANDS)
        return; /* older than every kept one */
    int n = r->ncand < FTC__AT_MOST_CANDS ? r->ncand : FTC__AT_MOST_CANDS - 1;
    memmove(&r->cand[k + 1], &r->cand[k], (size_t)(n - k) * sizeof r->cand[0]);
    memmove(&r->cand_gen[k + 1], &r->cand_gen[k], (size_t)(n - k) * sizeof r->cand_gen[0]);
    r->cand[k] = step;
    r->cand_gen[k] = gen;
    r->ncand = n + 1;
}

/* Calls visit on each persist tier, read-only: this node's (never waiting
 * for a running write, ftc__own_persist), then the other nodes', until it
 * returns true; whether one did. */
bool ftc__each_persist(ftc_agent_t *a, bool (*visit)(ftc_persist_t *, void *), void *arg)
{
    bool done = false;
    ftc_persist_t *own = a->pw ? ftc__own_persist(a, NULL, 0) : NULL;
    if (own) {
        done = visit(own, arg);
        ftc_persist_close(own);
    }
    for (uint32_t i = 0; !done && a->o.persist_dir && *a->o.persist_dir && i < a->o.nodes; i++) {
        if (i == a->o.index)
            continue;
        ftc_persist_t *p = ftc__node_persist(a, i);
        if (!p)
            continue;
        done = visit(p, arg);
        ftc_persist_close(p);
    }
    return done;
}

/* FETCH_AT_MOST: the committed versions of a persist directory (p, or the
 * directory dir read-only) into r's candidates when at or before r's
 * at_most_step; *oldest: the oldest committed step seen. */
static void ftc__cand_persist(ftc__rank_t *r, ftc_persist_t *p, int64_t *oldest)
{
    ftc_persist_version_t *v = NULL;
    int n = 0;
    if (ftc_persist_list(p, &v, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        if (v[i].state != FTC_PV_COMMITTED)
            continue;
        if (*oldest < 0 || (int64_t)v[i].step < *oldest)
            *oldest = (int64_t)v[i].step;
        if (v[i].step <= r->at_most_step)
            ftc__cand_add(r, v[i].step, 0);
    }
    free(v);
}

typedef struct ftc__cand_ctx {
    ftc__rank_t *r;
    int64_t *oldest;
} ftc__cand_ctx_t;

static bool ftc__cand_visit(ftc_persist_t *p, void *arg)
{
    ftc__cand_ctx_t *c = arg;
    ftc__cand_persist(c->r, p, c->oldest);
    return false; /* every tier */
}

/* FETCH_AT_MOST: the committed steps at or before r's at_most_step that may
 * have a copy, newest first: the job's commit set in Redis (each with the
 * generation that committed it: the commit record's checksum is checked),
 * the committed step, the committed versions of this rank's slots and of
 * every persist tier (older than the commit set keeps, or Redis away). A
 * step that was never committed (skipped, abandoned) is none of these, so
 * it is never looked for (I1). False, with the rank answered FTC_ENOENT,
 * when there is none. */
static bool ftc__at_most_candidates(ftc_agent_t *a, ftc__rank_t *r, int64_t committed,
                                    uint64_t gen, bool gen_known)
{
    r->ncand = r->icand = 0;
    r->cand_tried[0] = 0;
    r->cand_cover = -1;
    int64_t steps[FTC__AT_MOST_CANDS], oldest = -1, o2 = -1;
    uint64_t gens[FTC__AT_MOST_CANDS];
    int n = 0;
    char redis[200] = "";
    /* the request's read of the committed step failed just now: not asked
     * again (another command timeout), what is known here is used */
    bool down = a->redis_down;
    if (down || ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)r->at_most_step,
                                                             FTC__AT_MOST_CANDS, steps, gens, &n,
                                                             &oldest)) != 0) {
        snprintf(redis, sizeof redis, "; the commit set in Redis could not be read: %.150s",
                 down ? "Redis does not answer" : ftc_ctl_errstr(a->ctl));
        FTC_WARN("agent", "rank %u: FETCH_AT_MOST %" PRIu64 "%s: the committed steps are "
                 "those of the persist tiers and this node's slots", r->rank, r->at_most_step,
                 redis);
        n = 0, oldest = -1;
    }
    for (int i = 0; i < n; i++)
        ftc__cand_add(r, (uint64_t)steps[i], gens[i]);
    /* the set holds every committed step from its oldest on: the steps
     * read, all of them at or before at_most_step from the oldest, or from
     * the oldest one read when there are more */
    r->cand_cover = n == FTC__AT_MOST_CANDS ? steps[n - 1] : oldest;
    if (committed >= 0 && (uint64_t)committed <= r->at_most_step)
        ftc__cand_add(r, (uint64_t)committed, gen_known ? gen : 0);
    if (committed >= 0 && (oldest < 0 || committed < oldest))
        oldest = committed;
    for (int s = 0; r->src == r->rank && s < NS; s++)
        if (r->st[s] == SL_COMMITTED && r->step[s] <= r->at_most_step)
            ftc__cand_add(r, r->step[s], 0);
    ftc__cand_ctx_t cc = {r, &o2};
    ftc__each_persist(a, ftc__cand_visit, &cc);
    if (o2 >= 0 && (oldest < 0 || o2 < oldest))
        oldest = o2;
    if (r->ncand > 0)
        return true;
    if (oldest >= 0)
        ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                         "no committed step at or before step %" PRIu64
                         " for job %s: the oldest committed step known is %" PRId64 " (the commit "
                         "records in Redis, the persist tiers)%s", r->at_most_step, a->job,
                         oldest, redis);
    else
        ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                         "no committed step at or before step %" PRIu64
                         " for job %s known (the commit records in Redis, the persist tiers)%s",
                         r->at_most_step, a->job, redis);
    return false;
}

/* FETCH_AT_MOST: the candidate being looked for has no copy (where the
 * sources looked: tried, why): the next one is looked for and true; false
 * after the last one, with the rank answered FTC_ENOENT naming every step
 * tried. (Called from the end of a search, which a new search may end again:
 * at most FTC__AT_MOST_CANDS deep.) */
static bool ftc__at_most_next(ftc_agent_t *a, ftc__rank_t *r, const char *tried, const char *why)
{
    size_t l = strlen(r->cand_tried);
    snprintf(r->cand_tried + l, sizeof r->cand_tried - l, "%s%" PRIu64, l ? ", " : "",
             r->restore_step);
    FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST %" PRIu64 ": no verified copy of rank %u step "
              "%" PRIu64 " (%s; persist tier: %s)", r->rank, r->at_most_step, r->src,
              r->restore_step, tried, why);
    if (++r->icand < r->ncand) {
        r->restore_step = r->cand[r->icand];
        ftc__search(a, r, r->cand_gen[r->icand],
                    r->cand_gen[r->icand] ? NULL : "not in the commit set: its generation is "
                                                   "not known");
        return true;
    }
    r->restoring = false;
    ftc__reply_error(r->fd, r->restore_seq, FTC_ENOENT,
                     "no verified copy of rank %u's shard of any committed step "
                     "at or before step %" PRIu64 " (tried %s, newest first); the last: %.120s; "
                     "persist tier: %.80s", r->src, r->at_most_step, r->cand_tried, tried, why);
    return false;
}

/* Whether the persist directory p holds a committed version of step. */
static bool ftc__persist_has_committed(ftc_persist_t *p, uint64_t step)
{
    ftc_persist_version_t *v = NULL;
    int n = 0;
    bool has = false;
    if (ftc_persist_list(p, &v, &n) != 0)
        return false;
    for (int i = 0; i < n && !has; i++)
        has = v[i].state == FTC_PV_COMMITTED && v[i].step == step;
    free(v);
    return has;
}

bool ftc__has_visit(ftc_persist_t *p, void *arg)
{
    return ftc__persist_has_committed(p, *(const uint64_t *)arg);
}

/* FETCH of a step older than the committed one: whether it was ever
 * committed (I1: only committed versions are restored). A slot, a replica
 * or a persisted version of a step that never committed (skipped by the
 * checkpoint.busy=skip policy while another rank checkpointed it, abandoned
 * before every rank's copy was in) verifies by its content all the same, so
 * the search must not even start for it. The job's commit set in Redis
 * answers, with the generation that committed it (*gen: the commit
 * record's checksum is then checked too); for a step older than the set
 * keeps (or Redis away), a persist tier that holds it committed. 0 when
 * committed (*gen 0 when not known), else the code and why (cap bytes). */
static int ftc__older_committed(ftc_agent_t *a, uint64_t step, uint64_t *gen, char *why,
                                size_t cap)
{
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    *gen = 0;
    char redis[240] = "";
    bool down = a->redis_down; /* the request's first call failed: not asked again */
    bool read = !down && ftc__redis_seen(a, ftc_ctl_committed_at_most(a->ctl, (int64_t)step, 1,
                                                                      steps, gens, &n,
                                                                      &oldest)) == 0;
    if (read && n == 1 && (uint64_t)steps[0] == step) {
        *gen = gens[0];
        return 0;
    }
    if (read && oldest >= 0 && step > (uint64_t)oldest) {
        /* the set holds every committed step from its oldest on */
        snprintf(why, cap, "step %" PRIu64 " of job %s was never committed (skipped, or "
                 "abandoned before every rank's copy was in): only committed steps are "
                 "restored; the newest committed step before it is %" PRId64 " "
                 "(ftc_fetch_at_most finds it)", step, a->job, steps[0]);
        return FTC_ENOENT;
    }
    if (!read)
        snprintf(redis, sizeof redis, "the job's commit set in Redis could not be read (%.150s)",
                 down ? "Redis does not answer" : ftc_ctl_errstr(a->ctl));
    else if (oldest >= 0)
        snprintf(redis, sizeof redis, "it is older than the job's commit set in Redis keeps (from "
                 "step %" PRId64 " on)", oldest);
    else
        snprintf(redis, sizeof redis, "the job's commit set in Redis is empty");
    /* the persist tiers: this node's, then the other nodes' (read-only) */
    if (ftc__each_persist(a, ftc__has_visit, &step))
        return 0;
    snprintf(why, cap, "step %" PRIu64 " of job %s cannot be shown to have been committed: %s, "
             "and no persist tier holds it committed; only committed steps are restored%s", step,
             a->job, redis, read ? "" : " (retry once Redis answers)");
    return read ? FTC_ENOENT : FTC_EREDIS;
}

/* RESTORE, FETCH and FETCH_AT_MOST: the newest committed step (FETCH: the
 * step asked for, if committed; FETCH_AT_MOST: the newest committed step at
 * or before it that has a copy) of the subject rank's shard, from this
 * node's slots, else a peer's replica (or a parity rebuild), else the
 * persist tier (ftc__search). */
void ftc__on_restore(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    bool at_most = m->type == FTC_AP_FETCH_AT_MOST;
    bool fetch = m->type == FTC_AP_FETCH || at_most;
    if (!fetch && !r->size) {
        ftc__reply_error(r->fd, m->seq, FTC_EINVAL, "RESTORE before SLOTS");
        return;
    }
    if (r->restoring) {
        ftc__reply_error(r->fd, m->seq, FTC_EINPROGRESS, "a restore or fetch of rank %u is in "
                         "progress", r->rank);
        return;
    }
    r->restore_seq = m->seq; /* every answer to it, now or later */
    uint32_t src = m->src >= 0 ? (uint32_t)m->src : r->rank;
    int64_t step = a->committed;
    uint64_t gen = 0;
    bool gen_known = true;
    if (ftc__redis_seen(a, ftc_ctl_committed(a->ctl, &step, &gen)) != 0) {
        step = a->committed; /* Redis away: what this agent knows */
        gen_known = false;
    }
    int64_t committed_step = step;
    if (step < 0) {
        ftc__reply_error(r->fd, m->seq, FTC_ENOENT, "nothing committed yet for job %s", a->job);
        return;
    }
    if (step > a->committed)
        a->committed = step;
    if (fetch && !at_most && m->step != UINT64_MAX) {
        if (m->step > (uint64_t)step) {
            ftc__reply_error(r->fd, m->seq, FTC_ENOENT,
                             "step %" PRIu64 " is not committed (the newest committed is %" PRId64
                             ")", m->step, step);
            return;
        }
        step = (int64_t)m->step;
        if (step != committed_step) {
            char why[600];
            int rc = ftc__older_committed(a, (uint64_t)step, &gen, why, sizeof why);
            if (rc) {
                FTC_WARN("agent", "rank %u: FETCH of rank %u: %s", r->rank, src, why);
                ftc__reply_error(r->fd, m->seq, rc, "%s", why);
                return;
            }
            gen_known = gen != 0;
        }
    }
    r->fetch = fetch;
    r->at_most = at_most;
    r->src = src;
    if (at_most) {
        r->at_most_step = m->step < (uint64_t)committed_step ? m->step : (uint64_t)committed_step;
        if (!ftc__at_most_candidates(a, r, committed_step, gen, gen_known))
            return;
        step = (int64_t)r->cand[0];
        gen = r->cand_gen[0];
        gen_known = gen != 0;
        committed_step = step; /* (its generation is known from the commit set, or not) */
        FTC_DEBUG("agent", "rank %u: FETCH_AT_MOST %" PRIu64 " of rank %u: %d committed step(s) "
                  "to try, from %" PRIu64, r->rank, r->at_most_step, src, r->ncand, r->cand[0]);
    }
    r->restoring = true;
    r->req = ++a->requests;
    r->restore_t0 = ftc_now_ns();
    r->restore_step = (uint64_t)step;
    const char *nogen = NULL;
    if (at_most && !gen_known)
        nogen = "not in the commit set: its generation is not known";
    else if (!gen_known && step != committed_step)
        nogen = "an older step, committed in a persist tier but not in the commit set: its "
                "generation is not known";
    else if (!gen_known)
        nogen = "Redis did not answer";
    ftc__search(a, r, gen, nogen);
}

/* A fetch that succeeded after other holders failed (a replica refused by
 * its checksum, a holder that did not answer; not a peer that simply does
 * not hold it): said in the log and the event stream (replica_refused), so
 * that a bad copy is not silent. */
static void ftc__report_passed_over(ftc_agent_t *a, const ftc__rank_t *r, const ftc__job_t *j)
{
    if (!j->passed_over[0])
        return;
    FTC_WARN("agent", "rank %u: step %" PRIu64 " of rank %u came from another holder after: %s",
             r->rank, j->step, r->src, j->passed_over);
    ftc_ctl_event_t e = {.kind = "replica_refused", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)j->step,
                         .detail = j->passed_over};
    ftc__event(a, &e);
}

/* A fetch job is done: its result goes to the request that queued it (the
 * rank j->req_rix, request j->req), if that request still waits for this
 * step. It went to the last rank found fetching the same (owner, step): with
 * two ranks fetching one shard, the first job's shard or error answered the
 * other rank's request, which the second job's result then answered in
 * turn; and a rank that reconnected and asked again got its earlier
 * request's result. A result no request waits for is dropped. */
void ftc__on_fetch_done(ftc_agent_t *a, ftc__job_t *j)
{
    ftc__rank_t *r = &a->ranks[j->req_rix];
    if (!r->used || !r->restoring || r->req != j->req || r->src != j->owner ||
        r->restore_step != j->step) {
        FTC_DEBUG("agent", "fetch of rank %u step %" PRIu64 " for request %" PRIu64 " of rank "
                  "%u done (rc %d), but that request is over: dropped", j->owner, j->step,
                  j->req, r->rank, j->rc);
        r = NULL;
    }
    /* the slot the fetch landed in is the main thread's again */
    ftc__rank_t *lr = j->dst_slot >= 0 ? &a->ranks[j->dst_rix] : NULL;
    if (lr && lr->landing == j->dst_slot + 1)
        lr->landing = 0;
    bool in_slot = lr && lr == r && j->buf && j->buf == j->dst;
    if (lr && !in_slot && lr->st[j->dst_slot] == SL_WRITING)
        lr->st[j->dst_slot] = SL_EMPTY; /* never used half written (still mapped) */
    if (!r || r->fd < 0)
        return;
    FTC_DEBUG("agent", "rank %u: fetch of rank %u step %" PRIu64 " done (request %" PRIu64
              ", rc %d, %s%s), %.1f ms after the request", r->rank, r->src, j->step, j->req, j->rc,
              j->detail, in_slot ? ", in its slot" : "",
              (double)(ftc_now_ns() - r->restore_t0) / 1e6);
    if (j->rc == 0 && j->buf) {
        ftc_shard_view_t v;
        ftc_err_t err = {0};
        /* the replication engine verified the bytes as they landed in
         * j->buf (a fetch: every tensor checksum and the zero padding), or
         * they come from this node's verified replica store: the structure
         * here. Landed in the rank's slot: the rank need not verify that slot
         * again; copied (into the slot, or by ftc__deliver): the rank
         * verifies its slot. */
        if (ftc_shard_open(&v, j->buf, j->buf_size, 0, &err) == 0 &&
            v.info.step == j->step && ftc__is_subject(&v, r) &&
            (!r->rec_known || v.head_xxh3 == r->rec_head)) { /* (the replication thread checked) */
            if (!in_slot || j->buf_size != r->size) {
                ftc__report_passed_over(a, r, j);
                if (in_slot)
                    r->st[j->dst_slot] = SL_EMPTY; /* ftc__deliver refuses the size */
                ftc__deliver(a, r, j->buf, j->buf_size, j->step, "a peer's replica");
                return;
            }
            ftc__report_passed_over(a, r, j);
            r->st[j->dst_slot] = SL_COMMITTED;
            r->step[j->dst_slot] = j->step;
            FTC_INFO("agent", "rank %u restored step %" PRIu64 "%s from %s", r->rank, j->step,
                     r->src == r->rank ? "" : " (the shard of a previous rank)",
                     j->landed ? "a peer's replica" : "this node's replica store");
            ftc__restore_done(a, r, j->dst_slot, j->landed);
            return;
        }
    }
    if (in_slot)
        r->st[j->dst_slot] = SL_EMPTY; /* never used half written */
    /* Peers that were restarting (a stale address, a connection not yet
     * accepted) may answer a moment later: a few rounds, with fresh
     * addresses, before the persist tier. Not when every candidate answered
     * that it lacks the version (not held, or another version of the step):
     * a holder's replicas only change with a new push, so another round
     * would get the same answers; nor when the others reached their
     * deadline (a hung holder): each round cost a full agent.timeout_ms per
     * such holder, three of them more than the rank's call deadline (30 s
     * and 60 s by default), so the restore failed before the persist tier
     * was looked at. */
    bool all_lack = j->npeers > 0 && j->lacking + j->timedout == j->npeers;
    if (all_lack && j->timedout)
        FTC_INFO("agent", "rank %u: every peer (%d) lacks rank %u's step %" PRIu64 " or did "
                 "not answer by the deadline (%d) (%s): not asking them again", r->rank,
                 j->npeers, r->src, j->step, j->timedout, j->detail);
    else if (all_lack)
        FTC_INFO("agent", "rank %u: every peer (%d) lacks rank %u's step %" PRIu64 " (%s): "
                 "not asking them again", r->rank, j->npeers, r->src, j->step, j->detail);
    if (r->restore_attempts < 3 && !all_lack) {
        FTC_WARN("agent", "rank %u: fetching rank %u's step %" PRIu64 " failed (%s); trying the "
                 "peers again%s", r->rank, r->src, j->step, j->detail,
                 a->redis_down ? " at the addresses already known (Redis does not answer)" : "");
        /* fresh addresses (a restarted peer's); while Redis does not answer
         * each refresh costs a command timeout (HGETALL) per round */
        if (!a->redis_down)
            ftc__refresh_peers(a);
        if (ftc__queue_fetch(a, r))
            return;
    }
    if (j->refused) { /* no holder had the committed version: not silent either */
        FTC_WARN("agent", "rank %u: no holder served the committed version of rank %u's step "
                 "%" PRIu64 ": %s", r->rank, r->src, j->step, j->passed_over);
        ftc_ctl_event_t e = {.kind = "replica_refused", .node = a->node_id, .rank = (int)r->rank,
                             .generation = a->generation, .step = (int64_t)j->step,
                             .detail = j->passed_over};
        ftc__event(a, &e);
    }
    /* the subject's node looked alive, so no rebuild was tried: its fetch
     * failed (a node lost whose heartbeat had not expired yet, or one cut
     * off from this node), so the surviving members' pieces are gathered
     * now, before the persist tier */
    if (r->rebuild_later && !r->fetch) {
        FTC_INFO("agent", "rank %u: rank %u's node did not serve its step %" PRIu64 " (%s): "
                 "rebuilding it from parity", r->rank, r->src, j->step,
                 j->detail[0] ? j->detail : "no replica");
        if (ftc__par_queue_rebuild(a, r, true))
            return;
    }
    char tried[900];
    snprintf(tried, sizeof tried, "not in this node's slots; peers (%d round%s): %s",
             r->restore_attempts, r->restore_attempts == 1 ? "" : "s",
             j->detail[0] ? j->detail : "no replica");
    ftc__restore_from_persist(a, r, tried);
}
