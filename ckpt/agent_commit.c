/*
 * agent_commit.c — the agent's slots and commits (agent_internal.h): which
 * slot a BEGIN gets, commit reports to Redis and the poll that learns a step
 * committed, the persist schedule, and a rank's ABORT (the step abandoned
 * here, its abort marker in the commit record for the other nodes).
 */
#include "ckpt/agent_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- slots and commits ---------------------------------------------------------------------- */

/* Index of the slot holding the newest committed version, or -1. */
int ftc__newest_committed(const ftc__rank_t *r)
{
    int best = -1;
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_COMMITTED && (best < 0 || r->step[i] > r->step[best]))
            best = i;
    return best;
}

/* A slot the rank may write, or -1 when all are busy: never the newest
 * committed version (I1/I3), a sealed one (replicating or waiting for its
 * commit), one being written, or one the persist thread is reading. A slot
 * whose memory is reserved first (an empty one, else the oldest superseded
 * version), else one not reserved yet: a rank whose versions commit before
 * its next checkpoint then never touches its third slot's memory. */
int ftc__free_slot(const ftc__rank_t *r)
{
    int keep = ftc__newest_committed(r), best = -1, best_rank = 0;
    for (int i = 0; i < NS; i++) {
        if (i == keep || r->pinned[i] || r->st[i] == SL_SEALED || r->st[i] == SL_WRITING ||
            r->landing == i + 1)
            continue;
        int rank = r->slot[i].unreserved ? 2 : r->st[i] == SL_EMPTY ? 0 : 1;
        if (best < 0 || rank < best_rank ||
            (rank == best_rank && rank == 1 && r->step[i] < r->step[best]))
            best = i, best_rank = rank;
    }
    return best;
}

/* The slot for a rank's BEGIN: ftc__free_slot's, unless checkpoint.inflight
 * is 1 and a version of the rank is sealed and not committed (a checkpoint
 * then waits for the previous one's commit, so a kill never loses more than
 * one step); 2, the default, is what the three slots allow. -1 when the
 * busy policy applies. */
int ftc__begin_slot(const ftc_agent_t *a, const ftc__rank_t *r)
{
    for (int i = 0; i < NS && a->o.max_inflight == 1; i++)
        if (r->st[i] == SL_SEALED)
            return -1;
    return ftc__free_slot(r);
}

/* Reserves slot s of r if its creation deferred that (FTC_SLOT_DEFER): before
 * anything writes it. 0, or the error (the slot stays unwritable). */
int ftc__slot_reserve(ftc__rank_t *r, int s, ftc_err_t *err)
{
    if (!r->slot[s].unreserved)
        return 0;
    uint64_t t0 = ftc_now_ns();
    bool bg = ftc_slot_reserved_background(&r->slot[s]);
    int rc = ftc_slot_reserve(&r->slot[s], err);
    FTC_DEBUG("agent", "rank %u: slot %d reserved in %.1f ms%s%s%s", r->rank, s,
              (double)(ftc_now_ns() - t0) / 1e6, bg ? " (in the background before)" : "",
              rc ? ": " : "", rc ? err->msg : "");
    return rc;
}

/* Replication fell behind a step: a BEGIN of r was answered while another
 * version of r is still sealed (not committed; checkpoint.inflight 2). The
 * rank's next BEGIN, unless a commit frees a slot first, gets a slot whose
 * memory is not reserved yet (its third): reserved from now on a thread at
 * nice 19 (ftc_slot_reserve_background), so that this BEGIN finds its pages
 * there instead of reserving them on this thread (90-550 ms per 256 MiB here,
 * a stall of that checkpoint and of every other rank of the node). The slot
 * stays unreserved, never written, until that BEGIN's ftc__slot_reserve,
 * which reserves whatever the thread has not (never waiting for it). A rank
 * whose versions commit before its next checkpoint never gets here: its
 * third slot still costs no memory (nor with checkpoint.inflight 1). */
void ftc__slot_reserve_ahead(const ftc_agent_t *a, ftc__rank_t *r)
{
    int sealed = -1;
    for (int i = 0; i < NS; i++)
        if (r->st[i] == SL_SEALED && (sealed < 0 || r->step[i] < r->step[sealed]))
            sealed = i;
    for (int i = 0; i < NS && sealed >= 0 && a->o.max_inflight != 1; i++) {
        if (!r->slot[i].base || !r->slot[i].unreserved || r->slot[i].bg)
            continue;
        ftc_slot_reserve_background(&r->slot[i]);
        FTC_DEBUG("agent", "rank %u: a checkpoint began while step %" PRIu64 " is not committed: "
                  "slot %d being reserved in the background for the next one", r->rank,
                  r->step[sealed], i);
    }
}

void ftc__send_begin_ok(ftc__rank_t *r, int slot, uint64_t step)
{
    ftc_err_t rerr = {0};
    if (ftc__slot_reserve(r, slot, &rerr)) {
        ftc__reply_error(r->fd, r->begin_seq, rerr.code, "checkpoint of step %" PRIu64 ": %s",
                         step, rerr.msg);
        return;
    }
    r->st[slot] = SL_WRITING;
    r->step[slot] = step;
    r->reported[slot] = false;
    r->aborted[slot] = false;
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_BEGIN_OK);
    m.seq = r->begin_seq;
    m.slot = (uint32_t)slot;
    m.step = step;
    ftc__send(r->fd, &m);
}

/* Answers r's parked BEGIN when a slot has become free (a commit superseded
 * a version, a push failed, a persist write ended). */
void ftc__answer_begin(const ftc_agent_t *a, ftc__rank_t *r)
{
    if (!r->begin_waiting || r->fd < 0)
        return;
    int fs = ftc__begin_slot(a, r);
    if (fs >= 0) {
        r->begin_waiting = false;
        ftc__send_begin_ok(r, fs, r->begin_step);
    }
}

/* Reports r's slot s to the commit record. Not made while Redis is known
 * down (a->redis_down: it would cost a command timeout, in which no rank is
 * answered), and a report that fails for want of Redis is recorded so: the
 * version stays acked and unreported, and the commit poll, whose first call
 * finds out when Redis answers again, makes the report then. */
void ftc__report_commit(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    if (a->redis_down) {
        FTC_DEBUG("agent", "commit report of rank %u step %" PRIu64 ": Redis does not answer; "
                  "made by the commit poll once it does", r->rank, r->step[s]);
        return;
    }
    int64_t committed;
    bool now;
    int rc = ftc_ctl_commit_report(a->ctl, a->generation, (int64_t)r->step[s], r->rank,
                                   r->checksum[s], &committed, &now);
    if (rc == FTC_ECANCELED) { /* the record's abort marker: another rank failed it */
        bool ab = false;
        uint32_t by = UINT32_MAX;
        char why[FTC_CTL_ABORT_WHY_MAX + 1] = "";
        FTC_INFO("agent", "commit report of rank %u step %" PRIu64 " refused: %s", r->rank,
                 r->step[s], ftc_ctl_errstr(a->ctl));
        int arc = ftc_ctl_commit_aborted(a->ctl, a->generation, (int64_t)r->step[s], &ab, &by,
                                         why, sizeof why);
        if (arc && ftc__redis_outage(a, arc))
            ftc__redis_seen(a, arc);
        if (!arc && ab) { /* else the next poll reads the marker, or reports again */
            r->reported[s] = true; /* nothing to report again: abandoned by the next poll */
            ftc__note_abort(a, r->step[s], by, why, false);
        }
        return;
    }
    if (rc) {
        if (ftc__redis_outage(a, rc))
            ftc__redis_seen(a, rc);
        FTC_WARN("agent", "commit report of rank %u step %" PRIu64 ": %s", r->rank, r->step[s],
                 ftc_ctl_errstr(a->ctl));
        return; /* retried by the poll */
    }
    r->reported[s] = true;
    if (committed > a->committed)
        a->committed = committed;
}

/* Hands this node's ranks' shards of step to the persist thread, pinning
 * their slots until it is done (ftc__persist_collect); false when the writer
 * is still busy with an earlier version (the caller retries at the next
 * commit). */
/* Whether slot s of r holds committed step `step`: the newest committed
 * version, or a superseded one kept (pinned) for the persist tier. */
static bool ftc__holds_committed(const ftc__rank_t *r, int s, uint64_t step)
{
    return r->step[s] == step &&
           (r->st[s] == SL_COMMITTED || (r->st[s] == SL_EMPTY && r->pinned[s]));
}

bool ftc__persist(ftc_agent_t *a, uint64_t step)
{
    if (!a->pw)
        return true;
    const void *shards[FTC_AGENT_MAX_RANKS];
    uint64_t sizes[FTC_AGENT_MAX_RANKS];
    int where[FTC_AGENT_MAX_RANKS][2];
    int n = 0;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used)
            continue;
        for (int s = 0; s < NS; s++)
            if (ftc__holds_committed(r, s, step)) {
                where[n][0] = i, where[n][1] = s;
                shards[n] = r->slot[s].base;
                sizes[n++] = r->size;
                break;
            }
    }
    if (!n)
        return true;
    if (!ftc__persister_submit(a->pw, step, shards, sizes, n))
        return false;
    for (int k = 0; k < n; k++)
        a->ranks[where[k][0]].pinned[where[k][1]] = true;
    a->pwriting = (int64_t)step;
    return true;
}

/* Pins what the persist tier still needs (the step being written, the due
 * ones), unpins the rest. */
static void ftc__persist_pins(ftc_agent_t *a)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; s < NS; s++) {
            bool need = r->used && (int64_t)r->step[s] == a->pwriting && a->pwriting >= 0 &&
                        r->pinned[s];
            for (int q = 0; q < a->pqn && r->used && !need; q++)
                need = a->pq[q] >= 0 && ftc__holds_committed(r, s, (uint64_t)a->pq[q]);
            r->pinned[s] = need;
        }
    }
}

/* A committed step: queued for the persist tier when it is due (its slots
 * pinned at once, before a newer commit supersedes them). */
static void ftc__persist_due(ftc_agent_t *a, uint64_t step)
{
    if (!a->pw || a->o.persist_every <= 0 || (step + 1) % (uint64_t)a->o.persist_every != 0)
        return;
    bool queued = a->pwriting == (int64_t)step;
    for (int q = 0; q < a->pqn && !queued; q++)
        queued = a->pq[q] == (int64_t)step;
    if (!queued && a->pqn == (int)(sizeof a->pq / sizeof a->pq[0])) { /* pins bound it */
        FTC_WARN("agent", "persist tier: step %" PRIu64 " is due but %d older ones still wait; "
                 "skipping it on this node", step, a->pqn);
        return;
    }
    if (!queued)
        a->pq[a->pqn++] = (int64_t)step;
    /* every rank's slot of it (each rank's commit is seen in turn) */
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int s = 0; s < NS; s++)
            if (a->ranks[i].used && a->ranks[i].st[s] == SL_COMMITTED &&
                a->ranks[i].step[s] == step)
                a->ranks[i].pinned[s] = true;
}

/* Hands the oldest due step to the writer when it is idle. */
void ftc__persist_kick(ftc_agent_t *a)
{
    while (a->pw && a->pqn > 0 && a->pwriting < 0) {
        uint64_t step = (uint64_t)a->pq[0];
        if (!ftc__persist(a, step))
            return; /* busy after all: the next collect kicks again */
        memmove(a->pq, a->pq + 1, (size_t)(a->pqn - 1) * sizeof a->pq[0]);
        a->pqn--;
        if (a->pwriting < 0)
            FTC_DEBUG("agent", "persist tier: step %" PRIu64 " is due but no slot of this node "
                      "holds it any more", step);
    }
}

/* Collects a finished persist write: unpins its slots, logs it, reports a
 * failure as an event, and answers BEGINs that waited for a pinned slot. */
void ftc__persist_collect(ftc_agent_t *a)
{
    ftc__persist_result_t res;
    if (!a->pw || !ftc__persister_poll(a->pw, &res))
        return;
    a->pwriting = -1;
    ftc__persist_pins(a); /* the written step's slots are free again, due ones stay */
    ftc__persist_kick(a); /* the next due step */
    a->persist_rc = res.rc;
    snprintf(a->persist_detail, sizeof a->persist_detail, "%s", res.detail);
    if (!res.rc && (int64_t)res.step > a->persisted)
        a->persisted = (int64_t)res.step;
    if (res.rc) {
        FTC_WARN("agent", "persisting step %" PRIu64 ": %s", res.step, res.detail);
        ftc_ctl_event_t e = {.kind = "persist_failed", .node = a->node_id, .rank = -1,
                             .generation = a->generation, .step = (int64_t)res.step,
                             .detail = res.detail};
        ftc__event(a, &e);
    } else {
        FTC_INFO("agent", "persisted step %" PRIu64 " (%d shard(s)) in %.0f ms", res.step,
                 res.n_shards, res.ms);
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        if (a->ranks[i].used)
            ftc__answer_begin(a, &a->ranks[i]);
}

/* A version of this generation committed here: the generation's layout
 * (`plan:GEN`, from `ftc run`) and, with parity, its groups (`pargroups:GEN`)
 * are published with a 24 h TTL, and the next generation reads both after a
 * failure (`ftc run` plans from the committed generation's layout, which
 * keeps ranks where their shards are and tells the trainer the previous
 * world; a parity rebuild finds its pieces by them). A generation may last
 * longer than a day, so their TTL is renewed from its commits, at most once
 * a minute. A key that is not there (agents started by hand have no plan)
 * stays absent; Redis away: tried at the next commit. */
static void ftc__keep_generation_keys(ftc_agent_t *a)
{
    uint64_t now = ftc_now_ns();
    if (a->redis_down || (a->gen_keys_ns && now - a->gen_keys_ns < 60000000000ull))
        return;
    static const char *const what[2] = {"plan", "pargroups"};
    int rc = 0;
    for (int i = 0; i < (a->par ? 2 : 1) && !rc; i++) {
        char key[200], suffix[48];
        snprintf(suffix, sizeof suffix, "%s:%" PRIu64, what[i], a->generation);
        ftc_ctl_key(a->ctl, suffix, key, sizeof key);
        ftc_redis_reply_t *rep = NULL;
        rc = ftc_redis_cmdv(ftc_ctl_redis(a->ctl), true, &rep, "PEXPIRE", key, "86400000",
                            NULL);
        ftc_redis_reply_free(rep);
    }
    if (rc) {
        FTC_DEBUG("agent", "renewing the TTL of generation %" PRIu64 "'s plan%s: %s (tried "
                  "at the next commit)", a->generation, a->par ? " and parity groups" : "",
                  ftc_redis_errstr(ftc_ctl_redis(a->ctl)));
        return;
    }
    a->gen_keys_ns = now;
}

/* Moves SEALED+reported slots to COMMITTED once the commit record says so. */
/* A sealed version this node reported, of a step older than the job's
 * committed step: committed only if the job's commit set has it. The
 * commit record never goes back, so a step it passed without every rank's
 * report (another rank skipped it, or abandoned it) never commits; it was
 * marked committed all the same (and the rank told COMMITTED, and the
 * persist tier given it as committed), which ftc_fetch_at_most and the
 * persist tier then returned (I1). Such a version is freed and the rank
 * told NOT_COMMITTED. False too while Redis does not answer (asked again at
 * the next poll); true for a step older than the set keeps (as before). */
static bool ftc__older_sealed_committed(ftc_agent_t *a, ftc__rank_t *r, int s)
{
    int64_t steps[1] = {-1}, oldest = -1;
    uint64_t gens[1] = {0};
    int n = 0;
    if (a->redis_down) /* a command timeout for nothing: asked at a poll that reached Redis */
        return false;
    int rc = ftc_ctl_committed_at_most(a->ctl, (int64_t)r->step[s], 1, steps, gens, &n, &oldest);
    if (rc && ftc__redis_outage(a, rc))
        ftc__redis_seen(a, rc);
    if (rc)
        return false;
    if ((n == 1 && (uint64_t)steps[0] == r->step[s]) || oldest < 0 ||
        r->step[s] < (uint64_t)oldest)
        return true;
    FTC_WARN("agent", "rank %u: step %" PRIu64 " was never committed (the job committed step "
             "%" PRId64 " without it: another rank skipped or abandoned it); slot %d is free "
             "again", r->rank, r->step[s], a->committed, s);
    r->st[s] = SL_EMPTY;
    ftc__not_committed(r->fd, FTC_EIO, r->step[s], "step %" PRIu64 " not committed: the job "
                       "committed step %" PRId64 " without it (another rank skipped or "
                       "abandoned it)", r->step[s], a->committed);
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
    return false;
}

/* A slot a restarted agent kept sealed without knowing whether the commit
 * record holds its report (Redis did not answer at SLOTS): asked now, unless
 * Redis failed already in this poll (*down; set here when it fails). True
 * once the record holds this very version's report: it then commits like
 * any sealed version; false while that cannot be read, or when the record
 * does not hold it: the slot is then free, as at SLOTS (it cannot commit
 * without its report). */
bool ftc__survivor_recheck(ftc_agent_t *a, ftc__rank_t *r, int s, bool *down)
{
    uint64_t rec = 0;
    bool found = false;
    if (*down || ftc__redis_seen(a, ftc_ctl_commit_checksum(a->ctl, a->generation,
                                                            (int64_t)r->step[s], r->rank, &rec,
                                                            &found)) != 0) {
        *down = true;
        return false;
    }
    r->unchecked[s] = false;
    if (found && rec == r->checksum[s]) {
        FTC_INFO("agent", "rank %u: slot %d's step %" PRIu64 " is reported to the commit record "
                 "(Redis answers again): kept sealed until it commits", r->rank, s, r->step[s]);
        return true;
    }
    FTC_INFO("agent", "rank %u: slot %d's step %" PRIu64 " (head %016" PRIx64 ") is not reported "
             "to the commit record%s: it cannot commit, the slot is free", r->rank, s, r->step[s],
             r->checksum[s], found ? " (another version of that step is)" : "");
    r->st[s] = SL_EMPTY;
    ftc__answer_begin(a, r); /* a BEGIN may have waited for this slot */
    return false;
}

/* Abandons the sealed versions marked aborted: their step is one a rank of
 * this node failed to snapshot (ABORT), so it can never commit, and these
 * copies used to wait agent.timeout_ms, their slots taken, for a parked
 * BEGIN to abandon them. A version still being pushed or encoded waits for
 * that to end (the replication thread reads its slot; called again from its
 * end and from every poll). A reported one has its report withdrawn first,
 * as the timeout's abandon does (atomically unless the record reached the
 * step: then it is committed and kept); Redis away, tried again at the next
 * poll. The rank is told NOT_COMMITTED; its next version may then be pushed. */
void ftc__abandon_aborted(ftc_agent_t *a)
{
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; r->used && s < NS; s++) {
            if (r->st[s] != SL_SEALED || !r->aborted[s] || (r->pushed[s] && !r->acked[s]))
                continue;
            uint32_t by = UINT32_MAX;
            for (unsigned k = 0; k < a->naborted && k < FTC__ABORTED_KEEP; k++)
                if (a->aborted_step[k] == r->step[s])
                    by = a->aborted_rank[k];
            if (r->pushed[s]) { /* its report may be in the record */
                int64_t rec = -1;
                bool gone = false;
                int rc = a->redis_down ? FTC_EREDIS
                                       : ftc_ctl_commit_withdraw(a->ctl, a->generation,
                                                                 (int64_t)r->step[s], r->rank,
                                                                 &rec, &gone);
                if (rc && ftc__redis_outage(a, rc) && !a->redis_down)
                    ftc__redis_seen(a, rc);
                if (rc)
                    continue;
                if (!gone) {
                    r->aborted[s] = false; /* committed after all: the commit pass marks it */
                    if (rec > a->committed)
                        a->committed = rec;
                    continue;
                }
            }
            FTC_WARN("agent", "rank %u: step %" PRIu64 " abandoned at once: rank %u's snapshot "
                     "of it failed, so it can never commit; slot %d is free again", r->rank,
                     r->step[s], by, s);
            char detail[160];
            snprintf(detail, sizeof detail, "rank %u's snapshot of this step failed (ABORT): "
                     "abandoned at once, its report withdrawn", by);
            ftc_ctl_event_t e = {.kind = "checkpoint_abandoned", .node = a->node_id,
                                 .rank = (int)r->rank, .generation = a->generation,
                                 .step = (int64_t)r->step[s], .detail = detail};
            ftc__event(a, &e);
            r->st[s] = SL_EMPTY;
            r->aborted[s] = false;
            ftc__not_committed(r->fd, FTC_EIO, r->step[s], "step %" PRIu64 " not committed: "
                               "rank %u's snapshot of it failed", r->step[s], by);
            ftc__push_others(a, r, s); /* its next version waited for this one */
            ftc__answer_begin(a, r);   /* a BEGIN may have waited for this slot */
        }
    }
}

/* Whether a rank failed to snapshot step (ABORT here, or the commit
 * record's abort marker; remembered). */
bool ftc__step_aborted(const ftc_agent_t *a, uint64_t step)
{
    for (unsigned k = 0; k < a->naborted && k < FTC__ABORTED_KEEP; k++)
        if (a->aborted_step[k] == step)
            return true;
    return false;
}

/* Queues the abort marker of step (rank's snapshot of it failed here) for
 * ftc__mark_aborts. The queue grows: with Redis down, any number of ABORTs
 * may come before it answers, and each marker is written then (the list of
 * remembered steps keeps the last FTC__ABORTED_KEEP only). Only if memory
 * runs out is a marker dropped, said in a warning (the other nodes then
 * abandon their copies of the step after agent.timeout_ms, as before
 * markers). */
static void ftc__queue_mark(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why)
{
    if (a->nmarks == a->marks_cap) {
        size_t cap = a->marks_cap ? 2 * a->marks_cap : FTC__ABORTED_KEEP;
        struct ftc__abort_mark *m = realloc(a->marks, cap * sizeof *m);
        if (!m) {
            FTC_WARN("agent", "abort marker of step %" PRIu64 " (rank %u) dropped: out of "
                     "memory for the %zu markers Redis has not taken yet; the other nodes "
                     "abandon the step after agent.timeout_ms", step, rank, a->nmarks);
            return;
        }
        a->marks = m;
        a->marks_cap = cap;
    }
    struct ftc__abort_mark *m = &a->marks[a->nmarks++];
    m->step = step;
    m->gen = a->generation;
    m->rank = rank;
    snprintf(m->why, sizeof m->why, "%s", why ? why : "");
}

/* Remembers that rank's snapshot of step failed — an ABORT of this node's
 * rank (local: its abort marker still to be written to the commit record),
 * or another node's, read from the record's marker — and marks this node's
 * sealed copies of the step aborted (the caller abandons them). A step
 * remembered already is left as it is (its first failure names it). */
void ftc__note_abort(ftc_agent_t *a, uint64_t step, uint32_t rank, const char *why,
                     bool local)
{
    if (!ftc__step_aborted(a, step)) {
        unsigned k = a->naborted++ % FTC__ABORTED_KEEP;
        a->aborted_step[k] = step;
        a->aborted_rank[k] = rank;
        snprintf(a->aborted_why[k], sizeof a->aborted_why[k], "%s", why ? why : "");
        atomic_store(&a->aborted_stop[k], step + 1);
        if (local)
            ftc__queue_mark(a, step, rank, why);
    }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int o = 0; a->ranks[i].used && o < NS; o++)
            if (a->ranks[i].st[o] == SL_SEALED && a->ranks[i].step[o] == step)
                a->ranks[i].aborted[o] = true;
}

/* Writes the abort marker of each step a rank of this node failed to
 * snapshot into the step's commit record (ftc_ctl_commit_abort): the
 * commit script refuses the step from then on (I3), and the other nodes'
 * commit polls abandon their copies of it at once (ftc__poll_abort_markers)
 * instead of after agent.timeout_ms. Not while Redis is known down (a
 * command timeout in which no rank is answered): the commit poll writes it
 * once Redis answers. A marker of an earlier generation is moot (the step
 * can no longer commit in that generation's record from this node's
 * report), as is one the record is past. */
static void ftc__mark_aborts(ftc_agent_t *a)
{
    size_t done = 0; /* the queue's first done markers are written (or moot) */
    for (; done < a->nmarks && !a->redis_down; done++) {
        const struct ftc__abort_mark *m = &a->marks[done];
        if (m->gen != a->generation)
            continue;
        int64_t rec = -1;
        bool marked = false;
        int rc = ftc_ctl_commit_abort(a->ctl, a->generation, (int64_t)m->step, m->rank, m->why,
                                      &rec, &marked);
        if (rc && ftc__redis_outage(a, rc)) {
            ftc__redis_seen(a, rc);
            break;
        }
        /* written, or refused: not asked again */
        if (rc)
            FTC_WARN("agent", "abort marker of step %" PRIu64 " (rank %u): %s", m->step,
                     m->rank, ftc_ctl_errstr(a->ctl));
        else if (!marked)
            FTC_DEBUG("agent", "abort marker of step %" PRIu64 ": the commit record is at "
                      "step %" PRId64 " already", m->step, rec);
        else
            FTC_INFO("agent", "step %" PRIu64 ": abort marker written to its commit record "
                     "(rank %u failed; the other nodes abandon the step)", m->step, m->rank);
    }
    if (done) {
        memmove(a->marks, a->marks + done, (a->nmarks - done) * sizeof *a->marks);
        a->nmarks -= done;
    }
}

/* ABORT: r's snapshot of m->step, begun in slot m->slot, failed (its copy,
 * its seal or its SEALED). The step can never commit without r's report:
 * r's slot is free again, this node's other ranks' copies of the step are
 * abandoned now (and any sealed later), and a checkpoint_failed event
 * records it. No answer. */
void ftc__on_abort(ftc_agent_t *a, ftc__rank_t *r, const ftc_ap_msg_t *m)
{
    for (int i = 0; i < NS; i++)
        if ((r->st[i] == SL_SEALED || r->st[i] == SL_COMMITTED) && r->step[i] == m->step) {
            FTC_WARN("agent", "rank %u: ABORT of step %" PRIu64 ", which it sealed already "
                     "(slot %d, %s): ignored", r->rank, m->step, i, ftc__sl_name(r->st[i]));
            return;
        }
    int s = (int)m->slot;
    if (r->st[s] == SL_WRITING && r->step[s] == m->step && r->landing != s + 1)
        r->st[s] = SL_EMPTY; /* never sealed: nothing to withdraw */
    FTC_WARN("agent", "rank %u: its snapshot of step %" PRIu64 " failed (%s): the step is "
             "abandoned on this node", r->rank, m->step, m->text);
    char detail[320];
    snprintf(detail, sizeof detail, "the rank's snapshot failed: %.280s", m->text);
    ftc_ctl_event_t e = {.kind = "checkpoint_failed", .node = a->node_id, .rank = (int)r->rank,
                         .generation = a->generation, .step = (int64_t)m->step,
                         .detail = detail};
    ftc__event(a, &e);
    ftc__note_abort(a, m->step, r->rank, m->text, true);
    ftc__mark_aborts(a); /* the other nodes' agents learn it from the commit record */
    ftc__abandon_aborted(a);
    ftc__answer_begin(a, r);
}

/* Asks the commit record of each step this node holds sealed, above the
 * committed step and not known aborted, whether a rank of another node
 * failed to snapshot it (the abort marker its agent wrote, ftc__mark_aborts):
 * such a step is noted aborted, and its copies here are abandoned at once
 * (ftc__abandon_aborted) instead of waiting for agent.timeout_ms. Not asked
 * when Redis failed already in this poll (*down; set here when it fails). */
/* How often the commit poll looks for other nodes' abort markers: one HGET
 * per sealed step above the committed one, so not on every 10 ms pass (a
 * job checkpointing every step always has one); an abort still saves all
 * but this of agent.timeout_ms, and a refused commit report reads the
 * marker at once. */
#define FTC__ABORT_POLL_MS 100

static void ftc__poll_abort_markers(ftc_agent_t *a, bool *down)
{
    uint64_t now = ftc_now_ns();
    if (now - a->last_abort_poll_ns < (uint64_t)FTC__ABORT_POLL_MS * 1000000)
        return;
    a->last_abort_poll_ns = now;
    uint64_t asked[16];
    int nasked = 0;
    bool noted = false;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS && !*down; i++) {
        ftc__rank_t *r = &a->ranks[i];
        for (int s = 0; r->used && s < NS && !*down; s++) {
            if (r->st[s] != SL_SEALED || r->aborted[s] || (int64_t)r->step[s] <= a->committed ||
                ftc__step_aborted(a, r->step[s]))
                continue;
            bool seen = false;
            for (int k = 0; k < nasked && !seen; k++)
                seen = asked[k] == r->step[s];
            if (seen || nasked == (int)(sizeof asked / sizeof asked[0]))
                continue; /* asked in this poll; beyond 16 steps, at the next one */
            asked[nasked++] = r->step[s];
            bool ab = false;
            uint32_t by = 0;
            char why[FTC_CTL_ABORT_WHY_MAX + 1];
            int rc = ftc_ctl_commit_aborted(a->ctl, a->generation, (int64_t)r->step[s], &ab, &by,
                                            why, sizeof why);
            if (rc && ftc__redis_outage(a, rc)) {
                ftc__redis_seen(a, rc);
                *down = true;
            } else if (rc) {
                FTC_DEBUG("agent", "abort marker of step %" PRIu64 ": %s", r->step[s],
                          ftc_ctl_errstr(a->ctl));
            } else if (ab) {
                FTC_WARN("agent", "step %" PRIu64 ": rank %u's snapshot of it failed (%s; the "
                         "commit record's abort marker): the step is abandoned on this node",
                         r->step[s], by, why);
                ftc__note_abort(a, r->step[s], by, why, false);
                noted = true;
            }
        }
    }
    if (noted)
        ftc__abandon_aborted(a);
}

void ftc__poll_commits(ftc_agent_t *a)
{
    ftc__mark_aborts(a);     /* markers Redis did not take when the ABORT came */
    ftc__abandon_aborted(a); /* those whose push or encode has ended */
    bool pending = false, waiting_peers = false;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++)
        for (int s = 0; s < NS; s++)
            if (a->ranks[i].used && a->ranks[i].st[s] == SL_SEALED) {
                pending = true;
                if (!a->ranks[i].pushed[s]) {
                    waiting_peers = true;
                    ftc__try_push(a, &a->ranks[i], s);
                }
            }
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used || !r->begin_waiting || r->fd < 0 ||
            ftc_now_ns() - r->begin_since_ns < (uint64_t)a->o.timeout_ms * 1000000ull)
            continue;
        int keep = ftc__newest_committed(r), victim = -1;
        for (int s = 0; s < NS; s++)
            if (s != keep && r->st[s] == SL_SEALED && r->acked[s] &&
                (victim < 0 || r->step[s] < r->step[victim]))
                victim = s;
        if (victim < 0)
            continue;
        /* The version was reported: the commit record could still commit it
         * (another rank's copy was only slow), and it would then be committed
         * without this node's copy (k copies instead of k + 1, I2). Its report
         * is taken back first, atomically unless the record has reached the
         * step already: then it is committed (the commit pass below marks it)
         * and is not abandoned. Redis away: tried again at the next poll. */
        int64_t rec = -1;
        bool gone = false;
        int wrc = a->redis_down ? FTC_EREDIS
                                : ftc_ctl_commit_withdraw(a->ctl, a->generation,
                                                          (int64_t)r->step[victim], r->rank,
                                                          &rec, &gone);
        if (wrc && ftc__redis_outage(a, wrc) && !a->redis_down)
            ftc__redis_seen(a, wrc);
        if (wrc) {
            FTC_DEBUG("agent", "rank %u: step %" PRIu64 " is not committed after %d ms, but its "
                      "report could not be taken back (%s): its slot is kept for now",
                      r->rank, r->step[victim], a->o.timeout_ms, ftc_ctl_errstr(a->ctl));
            continue;
        }
        if (!gone) {
            if (rec > a->committed)
                a->committed = rec;
            continue;
        }
        FTC_WARN("agent", "rank %u: step %" PRIu64 " was not committed within %d ms (another "
                          "rank's copy of it failed?); its report is withdrawn and its slot "
                          "reused for step %" PRIu64,
                 r->rank, r->step[victim], a->o.timeout_ms, r->begin_step);
        ftc_ctl_event_t e = {.kind = "checkpoint_abandoned", .node = a->node_id,
                             .rank = (int)r->rank, .generation = a->generation,
                             .step = (int64_t)r->step[victim],
                             .detail = "not committed within the agent timeout"};
        ftc__event(a, &e);
        r->st[victim] = SL_EMPTY;
        r->begin_waiting = false;
        ftc__send_begin_ok(r, victim, r->begin_step);
    }
    if (waiting_peers && ftc_now_ns() - a->last_peers_ns > 100000000ull) {
        a->last_peers_ns = ftc_now_ns();
        ftc__refresh_peers(a);
    }
    if (!pending)
        return;
    int64_t step;
    uint64_t gen;
    bool down = ftc__redis_seen(a, ftc_ctl_committed(a->ctl, &step, &gen)) != 0;
    if (!down && step > a->committed)
        a->committed = step;
    ftc__poll_abort_markers(a, &down); /* another node's rank failed one of them */
    uint64_t newly = UINT64_MAX;
    for (int i = 0; i < FTC_AGENT_MAX_RANKS; i++) {
        ftc__rank_t *r = &a->ranks[i];
        if (!r->used)
            continue;
        for (int s = 0; s < NS; s++) {
            if (r->st[s] != SL_SEALED)
                continue;
            if (r->unchecked[s] && !ftc__survivor_recheck(a, r, s, &down))
                continue;
            if (r->acked[s] && !r->reported[s] && (!a->par || ftc__par_report_members(a, r, s)))
                ftc__report_commit(a, r, s); /* a report that failed earlier (Redis away) */
            if (!r->reported[s] || (int64_t)r->step[s] > a->committed)
                continue;
            if ((int64_t)r->step[s] < a->committed && !ftc__older_sealed_committed(a, r, s))
                continue;
            r->st[s] = SL_COMMITTED;
            newly = r->step[s];
            ftc__persist_due(a, r->step[s]);
            for (int o = 0; o < NS; o++)
                if (o != s && r->st[o] == SL_COMMITTED && r->step[o] < r->step[s])
                    r->st[o] = SL_EMPTY; /* superseded (a pinned one stays unused until the
                                            persist thread is done with it) */
            if (r->fd >= 0) {
                ftc_ap_msg_t m;
                ftc_ap_init(&m, FTC_AP_COMMITTED);
                m.step = r->step[s];
                m.slot = (uint32_t)s;
                ftc__send(r->fd, &m);
            }
            ftc__answer_begin(a, r);
        }
    }
    if (newly != UINT64_MAX) {
        a->commits++;
        if ((int64_t)newly > a->newest_local)
            a->newest_local = (int64_t)newly;
        ftc__persist_kick(a); /* else the writer is busy: ftc__persist_collect kicks */
        ftc__keep_generation_keys(a); /* its layout (and groups) outlive it */
    }
}
