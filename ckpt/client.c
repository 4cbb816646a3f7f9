/*
 * client.c — the checkpoint context of include/ftc.h: a rank's side of the
 * agent protocol (ckpt/agent_proto.h) plus the snapshot engine
 * (ckpt/snapshot.h) writing into the slots the agent hands out.
 *
 * One helper thread (the notifier) waits for each snapshot to be sealed and
 * sends SEALED right away, so replication overlaps the next training step.
 * A snapshot that fails (its copy, its seal, or its SEALED) is latched by
 * the notifier and reported to the caller once, by whichever of
 * ftc_wait_snapshot, ftc_checkpoint or ftc_wait_committed comes first; its
 * step is then remembered as one that will not commit. Every wait of the
 * caller's thread for the notifier has a deadline.
 * Only the caller's thread reads the socket: answers to its requests, and
 * COMMITTED / NOT_COMMITTED notices, which are recorded as they pass.
 */
#include "ftc.h"

#include "ckpt/agent_proto.h"
#include "ckpt/client_internal.h"
#include "ckpt/slot.h"
#include "ckpt/snapshot.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FTC__FAILED_KEEP 8 /* NOT_COMMITTED steps remembered */

struct ftc_ctx {
    ftc_options_t o;
    char job[64];
    char sock[4096];
    int fd;                /* the agent connection */
    uint64_t seq;          /* the last request id sent (agent_proto.h; caller's thread) */
    uint32_t rank, world, dp, tp, pp, dp_rank, tp_rank, pp_rank;
    uint64_t generation;
    ftc_snap_t *snap;
    bool slots_ready;
    ftc_slot_t slot[FTC_AP_SLOTS_PER_RANK];
    uint64_t size;
    int64_t committed;     /* newest COMMITTED seen */
    int64_t failed_step;   /* newest step known not to commit (NOT_COMMITTED, or its
                              snapshot failed here) */
    /* the last FTC__FAILED_KEEP steps known not to commit and why, for
     * ftc_wait_committed of any of them (not only the newest) */
    int64_t failed[FTC__FAILED_KEEP];
    char failed_why[FTC__FAILED_KEEP][384];
    unsigned nfailed;
    /* the notifier */
    pthread_t tid;
    bool tid_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending;          /* a begun snapshot not yet announced as SEALED */
    int pending_slot;
    uint64_t pending_step;
    uint64_t pending_id;   /* counts the snapshots begun */
    ftc_deadline_t pending_dl; /* the notifier's whole budget for it (seal + SEALED) */
    uint64_t gave_up_id;   /* the snapshot a caller stopped waiting for (an error returned) */
    /* the snapshot begun last failed (its copy, its seal or its SEALED) and
     * the caller was not told yet: ftc__wait_announced reports it once */
    int snap_rc;
    ftc_err_t snap_err;    /* ... what it was */
    uint64_t snap_step;    /* ... and its step (all four under mu) */
    uint64_t snap_id;      /* ... and its pending_id */
    bool stop;
    bool hold_notify;      /* test hook (ftc__hold_notify), under mu */
    atomic_int interrupted; /* ftc_interrupt: waits for the agent end with FTC_ECANCELED */
    int64_t checkpoints, skipped; /* ftc_ckpt_status counters */
    ftc_err_t err;
};

void ftc_interrupt(ftc_ctx_t *c)
{
    if (c)
        atomic_store(&c->interrupted, 1);
}

/* rc of a send or a receive on the agent connection of a connected context
 * (not its HELLO, which ftc_create words): when the connection broke
 * (FTC_EIO: the agent exited or was killed), e says so, naming the socket
 * and what to do, not only "Broken pipe" or "connection closed". */
static int ftc__gone(const ftc_ctx_t *c, ftc_err_t *e, int rc)
{
    if (rc == FTC_EIO && c->snap)
        ftc_err_wrap(e, "the agent at %s is gone (it exited or was killed: see its log); this "
                     "context is of no further use: ftc_destroy it, and ftc_create another once "
                     "`ftc agent` runs again", c->sock);
    return rc;
}

/* Waits until the agent connection is ready for ev (POLLIN, POLLOUT), in
 * 50 ms slices so that ftc_interrupt (from a signal handler or another
 * thread) ends the wait. FTC_ETIMEDOUT (no message) at d. */
static int ftc__wait_ready(ftc_ctx_t *c, ftc_deadline_t d, short ev)
{
    for (;;) {
        if (atomic_load(&c->interrupted))
            return ftc_err_set(&c->err, FTC_ECANCELED, "interrupted (ftc_interrupt) while "
                               "waiting for the agent: destroy this context");
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return FTC_ETIMEDOUT;
        struct pollfd p = {c->fd, ev, 0};
        int r = poll(&p, 1, ms < 50 ? ms : 50);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return ftc__gone(c, &c->err, ftc_err_errno(&c->err, errno, "poll on the agent "
                                                       "socket"));
    }
}

static int ftc__wait_readable(ftc_ctx_t *c, ftc_deadline_t d)
{
    return ftc__wait_ready(c, d, POLLIN);
}

/* Records a step that will not commit (a NOT_COMMITTED notice, a snapshot
 * that failed). */
static void ftc__note_failed(ftc_ctx_t *c, uint64_t step, const char *why)
{
    c->failed_step = (int64_t)step;
    unsigned i = c->nfailed++ % FTC__FAILED_KEEP;
    c->failed[i] = (int64_t)step;
    snprintf(c->failed_why[i], sizeof c->failed_why[i], "%s", why);
}

/* Why step will not commit, if the agent said so recently; else NULL. */
static const char *ftc__failed_why(const ftc_ctx_t *c, int64_t step)
{
    unsigned n = c->nfailed < FTC__FAILED_KEEP ? c->nfailed : FTC__FAILED_KEEP;
    for (unsigned k = 1; k <= n; k++) { /* newest first */
        unsigned i = (c->nfailed - k) % FTC__FAILED_KEEP;
        if (c->failed[i] == step)
            return c->failed_why[i];
    }
    return NULL;
}

/* Ranks a context takes: rank 0..FTC__MAX_WORLD-1, world and each degree
 * up to FTC__MAX_WORLD. */
#define FTC__MAX_WORLD (1 << 24)

/* Variable a, else b (NULL: none), unset or empty: *out = def. Else a whole
 * decimal number in lo..hi, strictly (ftc_parse_int): garbage (" 2", "1x",
 * "-1", out of range) is FTC_ECONFIG naming the variable, its value and the
 * range, never the default (a rank that took rank 0 for "1x" checkpointed
 * another rank's shard). */
static int ftc__env_int(ftc_ctx_t *c, const char *a, const char *b, int lo, int hi, int def,
                        int *out)
{
    const char *name = a, *v = getenv(a);
    if ((!v || !*v) && b) {
        name = b;
        v = getenv(b);
    }
    *out = def;
    if (!v || !*v)
        return 0;
    int64_t x;
    int rc = ftc_parse_int(v, lo, hi, &x);
    if (rc < 0)
        return ftc_err_set(&c->err, FTC_ECONFIG, "%s='%s' is %s: it must be a whole "
                           "number in %d..%d", name, v,
                           rc == FTC_ERANGE ? "out of range" : "not a whole decimal number", lo,
                           hi);
    *out = (int)x;
    return 0;
}

/* What a message read from the agent outside the reply awaited is: an
 * asynchronous notice (COMMITTED, NOT_COMMITTED), recorded; or a late reply,
 * to a request this rank gave up waiting for (its id is not the one
 * awaited, `want_seq`; 0: none awaited), dropped. True when m was one of
 * these and has been dealt with. A late FETCH_OK's shm copy is unlinked:
 * nobody else maps it (the agent unlinks it too at its next FETCH_OK or when
 * the rank disconnects, but not before). */
static bool ftc__by_the_way(ftc_ctx_t *c, const ftc_ap_msg_t *m, uint64_t want_seq, bool warn)
{
    if (m->type == FTC_AP_COMMITTED) {
        if ((int64_t)m->step > c->committed)
            c->committed = (int64_t)m->step;
        return true;
    }
    if (m->type == FTC_AP_NOT_COMMITTED) {
        ftc__note_failed(c, m->step, m->text);
        if (warn)
            FTC_WARN("ftc", "rank %u: %s", c->rank, m->text);
        return true;
    }
    if (m->seq == want_seq && want_seq)
        return false;
    if (m->seq == 0 || m->seq > c->seq)
        return false; /* no request of this rank's: a protocol error for the caller */
    FTC_WARN("ftc", "rank %u: dropped the agent's late answer (type %u, step %llu) to request "
             "%llu, which had given up waiting for it%s%s", c->rank, m->type,
             (unsigned long long)m->step, (unsigned long long)m->seq,
             m->type == FTC_AP_ERROR ? ": " : "", m->type == FTC_AP_ERROR ? m->text : "");
    if (m->type == FTC_AP_FETCH_OK && m->name[0][0]) {
        ftc_err_t e = {0};
        ftc_slot_unlink(m->name[0], &e);
    }
    return true;
}

/* Sends req (with the next request id) and waits for the reply to it, of
 * type want (or ERROR), recording the asynchronous notices that arrive in
 * between and dropping late replies to earlier requests. */
static int ftc__call(ftc_ctx_t *c, ftc_ap_msg_t *req, int want, ftc_ap_msg_t *rep)
{
    /* an interrupted context asks for nothing more (it would be handed a
     * slot, or a restore, that it never takes) */
    if (atomic_load(&c->interrupted))
        return ftc_err_set(&c->err, FTC_ECANCELED, "interrupted (ftc_interrupt): this context "
                           "asks the agent for nothing more; destroy it");
    req->seq = ++c->seq;
    /* a socket the agent reads nothing from (stopped, overloaded) is full:
     * the send waits, interruptibly like the answer's wait */
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    int rc = ftc__wait_ready(c, d, POLLOUT);
    if (rc == FTC_ETIMEDOUT)
        return ftc_err_set(&c->err, rc, "the agent at %s has read none of this rank's requests "
                           "for %d ms (is it stopped or overloaded?)", c->sock,
                           c->o.timeout_ms);
    if (rc)
        return rc;
    rc = ftc_ap_send(c->fd, req, 0, &c->err); /* (writable: no wait) */
    if (rc)
        return ftc__gone(c, &c->err, rc);
    d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    for (;;) {
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return ftc_err_set(&c->err, FTC_ETIMEDOUT, "agent did not answer within %d ms",
                               c->o.timeout_ms);
        rc = ftc__wait_readable(c, d);
        if (rc == FTC_ETIMEDOUT)
            continue;
        if (rc)
            return rc;
        rc = ftc_ap_recv(c->fd, rep,
                         ftc_deadline_remaining_ms(d) > 0 ? ftc_deadline_remaining_ms(d) : 1,
                         &c->err);
        if (rc)
            return ftc__gone(c, &c->err, rc);
        if (rep->type == FTC_AP_ERROR && rep->seq == 0) /* the connection's, not a request's */
            return ftc_err_set(&c->err, rep->status < 0 ? rep->status : FTC_EIO, "agent at %s: "
                               "%s", c->sock, rep->text);
        if (ftc__by_the_way(c, rep, req->seq, true))
            continue;
        if (rep->seq != req->seq)
            return ftc_err_set(&c->err, FTC_EPROTO, "agent answered type %u with request id "
                               "%llu, not this request's %llu", rep->type,
                               (unsigned long long)rep->seq, (unsigned long long)req->seq);
        if (rep->type == FTC_AP_ERROR)
            return ftc_err_set(&c->err, rep->status < 0 ? rep->status : FTC_EIO, "agent: %s",
                               rep->text);
        if (rep->type == want || (want == FTC_AP_BEGIN_OK && rep->type == FTC_AP_SKIP))
            return 0;
        return ftc_err_set(&c->err, FTC_EPROTO, "agent answered type %u, expected %d",
                           rep->type, want);
    }
}

/* Tells the agent that the snapshot of step, begun in slot after BEGIN_OK,
 * failed (ABORT, no answer): it abandons the step at once, where the other
 * ranks' copies of it used to wait agent.timeout_ms for a commit that cannot
 * come. Best effort: unsent, the agent frees the slot at the next BEGIN. */
static void ftc__send_abort(ftc_ctx_t *c, int slot, uint64_t step, const char *why, int ms)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_ABORT);
    m.slot = (uint32_t)slot;
    m.step = step;
    snprintf(m.text, sizeof m.text, "%.300s", why);
    ftc_err_t e = {0};
    if (ftc_ap_send(c->fd, &m, ms > 0 ? ms : 0, &e)) /* spent: one try, no wait */
        FTC_DEBUG("ftc", "rank %u: step %llu: ABORT not sent: %s", c->rank,
                  (unsigned long long)step, e.msg);
}

static void *ftc__notifier(void *arg)
{
    ftc_ctx_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && !c->pending)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop && !c->pending)
            break;
        int slot = c->pending_slot;
        uint64_t step = c->pending_step, id = c->pending_id;
        /* one budget for the seal and the SEALED, timeout_ms from the
         * checkpoint: a caller waiting for the notifier waits it out */
        ftc_deadline_t sd = c->pending_dl;
        pthread_mutex_unlock(&c->mu);
        ftc_err_t err = {0};
        int rc = ftc_snap_wait_sealed(c->snap, sd, &err);
        const char *what = "the snapshot of step %llu failed: %s";
        if (!rc) {
            what = "step %llu: telling the agent of its seal failed: %s";
            pthread_mutex_lock(&c->mu);
            while (c->hold_notify && !c->stop && !ftc_deadline_expired(sd)) {
                struct timespec ts = ftc_cond_abstime(sd);
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            }
            if (c->hold_notify)
                rc = ftc_err_set(&err, FTC_ETIMEDOUT, "the send was held (test hook)");
            pthread_mutex_unlock(&c->mu);
        }
        if (!rc) {
            ftc_ap_msg_t m;
            ftc_ap_init(&m, FTC_AP_SEALED);
            m.slot = (uint32_t)slot;
            m.step = step;
            int ms = ftc_deadline_remaining_ms(sd);
            rc = ftc_ap_send(c->fd, &m, ms > 0 ? ms : 0, &err); /* spent: one try */
            ftc__gone(c, &err, rc);
        }
        pthread_mutex_lock(&c->mu);
        if (rc) {
            /* this version never commits: the agent is told (ABORT) and
             * frees its slot and abandons the step at once (else the slot
             * is free again at the rank's next BEGIN); the caller is told
             * once */
            c->snap_rc = rc;
            c->snap_step = step;
            c->snap_id = id;
            ftc_err_set(&c->snap_err, rc, what, (unsigned long long)step, err.msg);
            FTC_WARN("ftc", "rank %u: %s", c->rank, c->snap_err.msg);
            ftc__send_abort(c, slot, step, c->snap_err.msg, ftc_deadline_remaining_ms(sd));
        }
        c->pending = false;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* What a caller waits for the notifier beyond the end of its budget: its
 * send's last poll slice and a thread switch. */
#define FTC__NOTIFIER_GRACE_MS 1000

/* Waits until the notifier is done with the snapshot begun last (sealed
 * and announced, or failed), in 50 ms slices so that ftc_interrupt ends the
 * wait: FTC_ETIMEDOUT, FTC_ECANCELED. It waits the context's timeout_ms, and
 * at least until the notifier's whole budget for the snapshot (its seal and
 * its SEALED together: timeout_ms from the checkpoint) has passed, so that
 * the notifier, still within its limits, is not given up on. A snapshot
 * given up on all the same (ftc_interrupt, a clock that jumped) is
 * remembered: the notifier's late result is not reported to a later call. */
static int ftc__wait_notifier(ftc_ctx_t *c)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->pending) {
        ftc_deadline_t nd = c->pending_dl;
        nd.at_ns += (uint64_t)FTC__NOTIFIER_GRACE_MS * 1000000u;
        if (nd.at_ns > d.at_ns)
            d = nd;
    }
    while (c->pending && !rc) {
        if (atomic_load(&c->interrupted)) {
            rc = FTC_ECANCELED;
        } else if (ftc_deadline_expired(d)) {
            rc = FTC_ETIMEDOUT;
        } else {
            ftc_deadline_t slice = ftc_deadline_in_ms(50);
            struct timespec ts = ftc_cond_abstime(slice.at_ns < d.at_ns ? slice : d);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        }
    }
    unsigned long long step = (unsigned long long)c->pending_step;
    if (rc)
        c->gave_up_id = c->pending_id; /* its error is this call's */
    pthread_mutex_unlock(&c->mu);
    if (rc == FTC_ECANCELED)
        return ftc_err_set(&c->err, rc, "interrupted (ftc_interrupt) while the snapshot of step "
                           "%llu was being handed to the agent: destroy this context", step);
    if (rc)
        return ftc_err_set(&c->err, rc, "the snapshot of step %llu was neither sealed and handed "
                           "to the agent nor failed within %d ms", step, c->o.timeout_ms);
    return 0;
}

/* Waits for the notifier (ftc__wait_notifier), then reports the failure of
 * the snapshot begun last if there is one the caller was not told of and
 * its step is at most upto: returned once (its message in c->err, its step
 * in *failed, else -1), its step remembered as one that will not commit. */
static int ftc__wait_announced(ftc_ctx_t *c, int64_t upto, int64_t *failed)
{
    *failed = -1;
    int rc = ftc__wait_notifier(c);
    if (rc)
        return rc;
    ftc_err_t late = {0};
    uint64_t late_step = 0;
    pthread_mutex_lock(&c->mu);
    if (c->snap_rc && c->snap_id == c->gave_up_id) {
        /* a caller gave up waiting for it and returned an error then: its
         * late failure is recorded, not reported again as a later call's */
        late = c->snap_err;
        late_step = c->snap_step;
        c->snap_rc = 0;
    } else if (c->snap_rc && (int64_t)c->snap_step <= upto) {
        rc = c->snap_rc;
        c->err = c->snap_err;
        *failed = (int64_t)c->snap_step;
        c->snap_rc = 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (late.code)
        ftc__note_failed(c, late_step, late.msg);
    if (rc)
        ftc__note_failed(c, (uint64_t)*failed, c->err.msg);
    return rc;
}

int ftc_create(const ftc_options_t *opts, ftc_ctx_t **out)
{
    *out = NULL;
    ftc_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return FTC_ENOMEM;
    ftc_options_t def = FTC_OPTIONS_INIT;
    c->o = opts ? *opts : def;
    if (c->o.timeout_ms <= 0)
        c->o.timeout_ms = 60000;
    c->fd = -1;
    for (int s = 0; s < FTC_AP_SLOTS_PER_RANK; s++)
        c->slot[s].fd = -1; /* closed: ftc_slot_close of a zeroed slot closed fd 0 */
    c->committed = -1;
    c->failed_step = -1;
    pthread_mutex_init(&c->mu, NULL);
    ftc_cond_init(&c->cv); /* its timed waits count on the monotonic clock */
    *out = c; /* even on failure, so ftc_last_error works; ftc_destroy frees it */
    const char *job = c->o.job ? c->o.job : getenv("FTC_JOB_ID");
    snprintf(c->job, sizeof c->job, "%s", job && *job ? job : "ftc");
    /* the options' values, else the environment's (strictly: garbage is an error) */
    int rank = c->o.rank, world = c->o.world, tp = c->o.tp, pp = c->o.pp, dp = c->o.dp;
    const int mx = FTC__MAX_WORLD;
    int erc = rank >= 0 ? 0 : ftc__env_int(c, "FTC_RANK", "RANK", 0, mx - 1, 0, &rank);
    if (erc == 0 && world <= 0)
        erc = ftc__env_int(c, "FTC_WORLD_SIZE", "WORLD_SIZE", 1, mx, 1, &world);
    if (erc == 0 && tp <= 0)
        erc = ftc__env_int(c, "FTC_TP", NULL, 1, mx, 1, &tp);
    if (erc == 0 && pp <= 0)
        erc = ftc__env_int(c, "FTC_PP", NULL, 1, mx, 1, &pp);
    if (erc == 0 && dp <= 0)
        erc = ftc__env_int(c, "FTC_DP", NULL, 0, mx, 0, &dp);
    if (erc)
        return erc;
    c->rank = (uint32_t)rank;
    c->world = (uint32_t)world;
    c->tp = (uint32_t)tp;
    c->pp = (uint32_t)pp;
    c->dp = (uint32_t)dp;
    /* tp * pp in 64 bits: 2^16 x 2^16 wrapped round to 0 (a division by zero) */
    if (!c->tp || !c->pp || (uint64_t)c->tp * c->pp > c->world ||
        c->world % (c->tp * c->pp) || c->rank >= c->world)
        return ftc_err_set(&c->err, FTC_ECONFIG,
                           "rank %u of world %u does not fit tp=%u x pp=%u (check FTC_RANK, "
                           "FTC_WORLD_SIZE, FTC_TP, FTC_PP)",
                           c->rank, c->world, c->tp, c->pp);
    /* a dp given (the option, FTC_DP) must be the layout's: it is recorded in
     * every shard header (info.dp) and sent to the agent, and dp_rank below is
     * derived from world, tp and pp alone; a wrong one made shards that say
     * dp=3 in a world of 4 ranks */
    uint32_t ldp = c->world / (c->tp * c->pp);
    if (c->dp && c->dp != ldp)
        return ftc_err_set(&c->err, FTC_ECONFIG,
                           "dp=%u does not fit world %u / (tp=%u x pp=%u) = %u (check FTC_DP, "
                           "FTC_WORLD_SIZE, FTC_TP, FTC_PP; 0 derives it)",
                           c->dp, c->world, c->tp, c->pp, ldp);
    c->dp = ldp;
    /* rank = ((dp_rank * pp) + pp_rank) * tp + tp_rank (Megatron's order) */
    c->tp_rank = c->rank % c->tp;
    c->pp_rank = (c->rank / c->tp) % c->pp;
    c->dp_rank = c->rank / (c->tp * c->pp);
    const char *sock = c->o.agent ? c->o.agent : getenv("FTC_AGENT_SOCKET");
    if (!sock || !*sock)
        return ftc_err_set(&c->err, FTC_ENOENT,
                           "no agent socket: set FTC_AGENT_SOCKET (ftc run and ftc agent print "
                           "it) or pass options.agent");
    snprintf(c->sock, sizeof c->sock, "%s", sock);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", c->sock);
    /* non-blocking: a connect to an agent whose listen backlog is full (a
     * frozen agent that accepts nothing) blocks for ever otherwise */
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        return ftc_err_errno(&c->err, errno, "socket");
    ftc_deadline_t cd = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    int crc;
    while ((crc = connect(c->fd, (struct sockaddr *)&sa, sizeof sa)) != 0 &&
           (errno == EAGAIN || errno == EINTR) && !ftc_deadline_expired(cd) &&
           !atomic_load(&c->interrupted))
        ftc_sleep_ms(10);
    if (crc != 0) {
        int e = errno;
        close(c->fd); /* not connected: no call may use it */
        c->fd = -1;
        if (e == EAGAIN || e == EINTR)
            return ftc_err_set(&c->err, FTC_ETIMEDOUT,
                               "the agent at %s accepted no connection within %d ms (is it "
                               "stopped or overloaded?)",
                               c->sock, c->o.timeout_ms);
        return ftc_err_set(&c->err, FTC_ENOENT,
                           "no agent answers at %s (%s): start `ftc agent` on this node first",
                           c->sock, strerror(e));
    }
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        return ftc_err_errno(&c->err, errno, "fcntl on the agent socket");
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_HELLO);
    snprintf(m.job, sizeof m.job, "%s", c->job);
    m.rank = c->rank;
    m.world = c->world;
    m.dp = c->dp, m.tp = c->tp, m.pp = c->pp;
    m.dp_rank = c->dp_rank, m.tp_rank = c->tp_rank, m.pp_rank = c->pp_rank;
    m.pid = (int32_t)getpid();
    int rc = ftc__call(c, &m, FTC_AP_WELCOME, &rep);
    /* an agent that refuses the connection itself (seq 0: full, another
     * protocol version) says why before it closes it: read after the reset
     * that its close leaves (it did not read the HELLO) */
    for (int k = 0; rc == FTC_EIO && k < 4; k++) {
        ftc_err_t e = {0};
        int qrc = ftc_ap_recv(c->fd, &rep, 0, &e);
        if (qrc == 0 && rep.type == FTC_AP_ERROR && rep.seq == 0)
            return ftc_err_set(&c->err, rep.status < 0 ? rep.status : FTC_EIO, "agent at %s: "
                               "%s", c->sock, rep.text);
        if (qrc != FTC_EIO)
            break;
    }
    if (rc == FTC_EIO)
        /* an agent of another protocol version closes the connection at
         * once, its log naming both versions (a newer one answers ERROR) */
        return ftc_err_wrap(&c->err, "the agent at %s closed the connection at HELLO (this "
                            "rank speaks agent protocol version %d; an agent of another ftc "
                            "build does so, its log names its version: run ranks and agents "
                            "from the same build)", c->sock, FTC_AP_VERSION);
    if (rc)
        return rc;
    c->generation = rep.generation;
    ftc_shard_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.job_id, sizeof info.job_id, "%s", c->job);
    info.generation = c->generation;
    info.dp = c->dp, info.tp = c->tp, info.pp = c->pp;
    info.dp_rank = c->dp_rank, info.tp_rank = c->tp_rank, info.pp_rank = c->pp_rank;
    c->snap = ftc_snap_create(&info, c->o.threads, c->o.meta_capacity, &c->err);
    if (!c->snap)
        return c->err.code;
    ftc_snap_set_timeout(c->snap, c->o.timeout_ms); /* its device syncs, its destroy */
    if (pthread_create(&c->tid, NULL, ftc__notifier, c) != 0)
        return ftc_err_set(&c->err, FTC_ENOMEM, "cannot start the notifier thread");
    c->tid_started = true;
    return 0;
}

/* How long ftc_destroy gives the BYE at most, of its deadline's remainder. */
#define FTC__BYE_MS 1000

/* One deadline, timeout_ms from the call, for all of ftc_destroy's waits
 * (include/ftc.h), in turn:
 *   1. the notifier's snapshot in flight: its budget (seal and SEALED) ends
 *      timeout_ms from that ftc_checkpoint, which came before this call, so
 *      never after d; it is not cut short at stop (a last checkpoint that
 *      seals within it is still handed to the agent), and a send whose
 *      budget is spent is one try, no wait (the ABORT of a failed one);
 *   2. the BYE: at most FTC__BYE_MS of what is left, one try if nothing is;
 *   3. the copy in flight (ftc_snap_destroy_by): until d, then left behind.
 * They used to be waited in turn, each with its own: a hung copy took the
 * notifier's timeout_ms, then the engine's timeout_ms again. */
void ftc_destroy(ftc_ctx_t *c)
{
    if (!c)
        return;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    if (c->tid_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->tid, NULL);
    }
    if (c->fd >= 0) {
        ftc_ap_msg_t m;
        ftc_ap_init(&m, FTC_AP_BYE);
        ftc_err_t err = {0};
        int ms = ftc_deadline_remaining_ms(d);
        ftc_ap_send(c->fd, &m, ms > FTC__BYE_MS ? FTC__BYE_MS : ms, &err); /* 0: one try */
        close(c->fd);
    }
    if (ftc_snap_destroy_by(c->snap, d) == 0) {
        for (int s = 0; s < FTC_AP_SLOTS_PER_RANK; s++)
            ftc_slot_close(&c->slot[s]);
    } else {
        /* a copy still running after timeout_ms (a device that does not
         * finish), left behind: the slots stay mapped, as it may still
         * write one; that version is never sealed nor sent, so it never
         * commits (the agent frees its slot at the rank's next BEGIN) */
        FTC_WARN("ftc", "rank %u: ftc_destroy: a snapshot copy still running %d ms after "
                 "ftc_destroy began is left behind, never sealed: the slots stay mapped, and it "
                 "may still read the registered tensors", c->rank, c->o.timeout_ms);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

const char *ftc_last_error(const ftc_ctx_t *c)
{
    return c ? ftc_err_str(&c->err) : "no context";
}

int ftc_register(ftc_ctx_t *c, const char *name, int dtype, int ndim, const int64_t *shape,
                 void *data, int device)
{
    if (!c)
        return FTC_EINVAL;
    if (!c->snap)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_register: the context is not connected");
    if (c->slots_ready)
        return ftc_err_set(&c->err, FTC_EINVAL,
                           "tensor '%s': register every tensor before the first checkpoint or "
                           "restore",
                           name ? name : "");
    if (ndim < 0 || ndim > FTC_SHARD_MAX_DIMS)
        return ftc_err_set(&c->err, FTC_EINVAL, "tensor '%s': ndim %d (0..%d)", name ? name : "",
                           ndim, FTC_SHARD_MAX_DIMS);
    if (ndim > 0 && !shape)
        return ftc_err_set(&c->err, FTC_EINVAL, "tensor '%s': shape is NULL for ndim %d",
                           name ? name : "", ndim);
    uint64_t sh[FTC_SHARD_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ftc_err_set(&c->err, FTC_EINVAL, "tensor '%s': dimension %d is negative",
                               name ? name : "", i);
        sh[i] = (uint64_t)shape[i];
    }
    return ftc_snap_add(c->snap, name, dtype, (uint32_t)ndim, sh, data,
                        device == FTC_HOST ? FTC_SNAP_HOST : device, &c->err);
}

/* Asks the agent for the rank's slots (once) and maps them. */
static int ftc__slots(ftc_ctx_t *c)
{
    if (c->slots_ready)
        return 0;
    if (!c->snap)
        return ftc_err_set(&c->err, FTC_EINVAL, "the context is not connected");
    uint64_t size = ftc_snap_size(c->snap);
    if (!size)
        return ftc_err_set(&c->err, FTC_EINVAL, "no tensors registered");
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_SLOTS);
    m.size = size;
    /* FTC_EAGAIN: the agent cannot replace this rank's slots yet (a version
     * of the previous layout still replicating, a restore landing in them):
     * asked again until the context's deadline */
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    int rc;
    while ((rc = ftc__call(c, &m, FTC_AP_SLOTS_OK, &rep)) == FTC_EAGAIN &&
           !ftc_deadline_expired(d) && !atomic_load(&c->interrupted))
        ftc_sleep_ms(50);
    if (rc)
        return rc;
    /* all or none: a slot that cannot be mapped (or has another size) left
     * the ones mapped before it mapped, and the next call mapped them again
     * over the same ftc_slot_t, leaking a mapping and an fd per slot */
    const char *names[FTC_AP_SLOTS_PER_RANK];
    for (int s = 0; s < FTC_AP_SLOTS_PER_RANK; s++) {
        ftc_slot_close(&c->slot[s]);
        names[s] = rep.name[s];
    }
    rc = ftc_slot_open_all(names, FTC_AP_SLOTS_PER_RANK, true, size, c->slot, &c->err);
    if (rc)
        return rc;
    c->size = size;
    c->slots_ready = true;
    return 0;
}

int ftc_checkpoint(ftc_ctx_t *c, int64_t step, const void *meta, size_t meta_len)
{
    if (!c)
        return FTC_EINVAL;
    if (step < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_checkpoint: step %lld < 0", (long long)step);
    /* before the agent hands out a slot for it */
    if (meta_len > c->o.meta_capacity)
        return ftc_err_set(&c->err, FTC_ERANGE, "ftc_checkpoint: metadata of %zu bytes exceeds "
                           "the context's meta_capacity (%u bytes, ftc_options_t)",
                           meta_len, c->o.meta_capacity);
    if (meta_len && !meta)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_checkpoint: meta is NULL, meta_len %zu",
                           meta_len);
    int rc = ftc__slots(c);
    if (rc)
        return rc;
    /* the previous snapshot's copy ends first; one that failed is no
     * longer running, and whether it was reported is the notifier's record */
    ftc_err_t werr = {0};
    rc = ftc_snap_wait_copy(c->snap, ftc_deadline_in_ms((uint64_t)c->o.timeout_ms), &werr);
    if (rc == FTC_ETIMEDOUT) {
        c->err = werr;
        return rc;
    }
    int64_t failed;
    rc = ftc__wait_announced(c, INT64_MAX, &failed);
    if (rc && failed >= 0)
        /* reported here, once: the next ftc_checkpoint starts a snapshot */
        return ftc_err_wrap(&c->err, "step %lld was not checkpointed", (long long)step);
    if (rc)
        return rc;
    /* the previous snapshot may still be sealing after the notifier gave
     * up on it (that failure was reported, above or earlier); the engine
     * begins no other until it ends. Waited for before the agent hands
     * out a slot; still sealing: FTC_ETIMEDOUT, never FTC_EAGAIN, which is
     * the agent's policy's (a skip that a trainer takes in stride) */
    if (ftc_snap_busy(c->snap) &&
        ftc_snap_wait_sealed(c->snap, ftc_deadline_in_ms((uint64_t)c->o.timeout_ms), &werr) ==
            FTC_ETIMEDOUT) {
        pthread_mutex_lock(&c->mu);
        unsigned long long prev = (unsigned long long)c->pending_step;
        pthread_mutex_unlock(&c->mu);
        ftc_err_set(&c->err, FTC_ETIMEDOUT, "step %lld was not checkpointed: the snapshot of "
                    "step %llu is still not sealed %d ms after the notifier gave up on it (a "
                    "device copy or a seal that does not end)", (long long)step, prev,
                    c->o.timeout_ms);
        ftc__note_failed(c, (uint64_t)step, c->err.msg);
        return FTC_ETIMEDOUT;
    }
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_BEGIN);
    m.step = (uint64_t)step;
    rc = ftc__call(c, &m, FTC_AP_BEGIN_OK, &rep);
    if (rc)
        return rc;
    if (rep.type == FTC_AP_SKIP) {
        c->skipped++;
        return ftc_err_set(&c->err, FTC_EAGAIN, "%s", rep.text);
    }
    int s = (int)rep.slot;
    /* a fresh slot (or one holding another layout): write the head once */
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    /* ... or a shard of another rank (restored with ftc_restore_from after a
     * layout change): its head must name this rank's coordinates */
    if (ftc_shard_peek_size(c->slot[s].base, c->slot[s].size, &v.size, &e) != 0 ||
        v.size != c->size || ftc_shard_open(&v, c->slot[s].base, c->size, 0, &e) != 0 ||
        v.info.dp != c->dp || v.info.tp != c->tp || v.info.pp != c->pp ||
        v.info.dp_rank != c->dp_rank || v.info.tp_rank != c->tp_rank ||
        v.info.pp_rank != c->pp_rank) {
        rc = ftc_snap_format(c->snap, c->slot[s].base, &c->err);
        if (rc) {
            ftc__note_failed(c, (uint64_t)step, c->err.msg);
            ftc__send_abort(c, s, (uint64_t)step, c->err.msg, 1000);
            return rc;
        }
    }
    rc = ftc_snap_begin(c->snap, c->slot[s].base, (uint64_t)step, c->generation, meta,
                        (uint32_t)meta_len, &c->err);
    if (rc == FTC_EAGAIN) /* the engine still busy: not the policy's FTC_EAGAIN */
        rc = ftc_err_set(&c->err, FTC_ETIMEDOUT, "the previous snapshot is still not sealed");
    if (rc) {
        /* a device copy that could not start: reported here, and the step
         * will not commit (the agent frees its slot at the next BEGIN) */
        ftc_err_wrap(&c->err, "the snapshot of step %lld could not start", (long long)step);
        ftc__note_failed(c, (uint64_t)step, c->err.msg);
        ftc__send_abort(c, s, (uint64_t)step, c->err.msg, 1000);
        return rc;
    }
    c->checkpoints++;
    pthread_mutex_lock(&c->mu);
    c->pending = true;
    c->pending_slot = s;
    c->pending_step = (uint64_t)step;
    c->pending_id++;
    c->pending_dl = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int ftc_ckpt_status(ftc_ctx_t *c, ftc_ckpt_status_t *st)
{
    if (!c || !st || st->struct_size < sizeof(ftc_ckpt_status_t))
        return FTC_EINVAL;
    int rc = 0;
    /* the notices already queued: commits and failed versions */
    for (int n = 0; c->fd >= 0 && n < 1024; n++) {
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0)
            break;
        if (p.revents & (POLLHUP | POLLERR) && !(p.revents & POLLIN)) {
            rc = ftc__gone(c, &c->err, ftc_err_set(&c->err, FTC_EIO, "the agent closed the "
                                                   "connection"));
            break;
        }
        ftc_ap_msg_t m;
        if ((rc = ftc__gone(c, &c->err, ftc_ap_recv(c->fd, &m, 1000, &c->err))) != 0)
            break;
        if (!ftc__by_the_way(c, &m, 0, false)) {
            rc = ftc_err_set(&c->err, FTC_EPROTO, "the agent sent type %u unasked", m.type);
            break;
        }
    }
    uint32_t size = st->struct_size;
    memset(st, 0, sizeof *st);
    st->struct_size = size;
    st->rank = (int)c->rank;
    st->world = (int)c->world;
    st->dp_rank = (int)c->dp_rank;
    st->tp_rank = (int)c->tp_rank;
    st->pp_rank = (int)c->pp_rank;
    st->generation = c->generation;
    st->committed = c->committed;
    st->failed = c->failed_step;
    st->checkpoints = c->checkpoints;
    st->skipped = c->skipped;
    st->last_error = c->err.code;
    pthread_mutex_lock(&c->mu);
    st->in_flight = c->pending ? (int64_t)c->pending_step : -1;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int ftc_wait_snapshot(ftc_ctx_t *c)
{
    if (!c)
        return FTC_EINVAL;
    if (!c->snap)
        return ftc_err_set(&c->err, FTC_EINVAL, "the context is not connected");
    ftc_err_t werr = {0};
    int rc = ftc_snap_wait_copy(c->snap, ftc_deadline_in_ms((uint64_t)c->o.timeout_ms), &werr);
    if (rc == 0)
        return 0;
    if (rc == FTC_ETIMEDOUT) {
        c->err = werr;
        return rc;
    }
    /* the copy failed (the engine says so until its next snapshot): the
     * notifier has the failure, or is about to; it is reported here unless
     * an earlier call reported it already */
    int64_t failed;
    return ftc__wait_announced(c, INT64_MAX, &failed);
}

int ftc__set_device_ops(ftc_ctx_t *c, const ftc_snap_device_ops_t *ops)
{
    if (!c)
        return FTC_EINVAL;
    if (!c->snap)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc__set_device_ops: the context is not "
                           "connected");
    return ftc_snap_set_device_ops(c->snap, ops, &c->err);
}

int ftc__hold_seal(ftc_ctx_t *c, bool hold)
{
    if (!c || !c->snap)
        return FTC_EINVAL;
    ftc__snap_hold_seal(c->snap, hold);
    return 0;
}

int ftc__hold_notify(ftc_ctx_t *c, bool hold)
{
    if (!c || !c->snap)
        return FTC_EINVAL;
    pthread_mutex_lock(&c->mu);
    c->hold_notify = hold;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int ftc_wait_committed(ftc_ctx_t *c, int64_t step)
{
    if (!c)
        return FTC_EINVAL;
    if (!c->snap)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_wait_committed: the context is not connected");
    /* a failed snapshot of this step or an earlier one, not reported yet:
     * reported here; of this very step it is FTC_EIO at once, below, like
     * a NOT_COMMITTED */
    int64_t failed;
    int rc = ftc__wait_announced(c, step, &failed);
    if (rc && failed < 0)
        return rc;
    if (rc && failed != step)
        return ftc_err_wrap(&c->err, "waiting for step %lld: the checkpoint of step %lld failed",
                            (long long)step, (long long)failed);
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)c->o.timeout_ms);
    while (c->committed < step) {
        const char *why = ftc__failed_why(c, step);
        if (why)
            return ftc_err_set(&c->err, FTC_EIO, "%s", why);
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return ftc_err_set(&c->err, FTC_ETIMEDOUT, "step %lld not committed within %d ms",
                               (long long)step, c->o.timeout_ms);
        ftc_ap_msg_t rep;
        rc = ftc__wait_readable(c, d);
        if (rc == 0)
            rc = ftc__gone(c, &c->err, ftc_ap_recv(c->fd, &rep, ms, &c->err));
        if (rc == FTC_ETIMEDOUT)
            continue;
        if (rc)
            return rc;
        if (!ftc__by_the_way(c, &rep, 0, false))
            FTC_WARN("ftc", "rank %u: the agent sent type %u unasked (ignored)", c->rank,
                     rep.type);
    }
    return 0;
}

int ftc_report(ftc_ctx_t *c, const char *kind, int64_t step, double value, const char *detail)
{
    if (!c || c->fd < 0 || !c->snap)
        return c ? ftc_err_set(&c->err, FTC_EINVAL, "ftc_report: not connected to an agent")
                 : FTC_EINVAL;
    size_t kl = kind ? strlen(kind) : 0;
    bool ok = kl >= 1 && kl <= 23;
    for (size_t i = 0; ok && i < kl; i++)
        ok = (kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') ||
             kind[i] == '_';
    if (!ok)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_report: event kind '%s': need 1..23 of "
                           "[a-z0-9_] (e.g. nan, loss_spike)", kind ? kind : "(null)");
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_REPORT);
    snprintf(m.name[0], sizeof m.name[0], "%s", kind);
    m.step = (uint64_t)step;
    memcpy(&m.size, &value, sizeof value);
    snprintf(m.text, 301, "%s", detail ? detail : "");
    return ftc__call(c, &m, FTC_AP_REPORT_OK, &rep);
}

int ftc_restore_from(ftc_ctx_t *c, int src_rank, int64_t *step, void *meta, size_t *meta_len)
{
    if (!c)
        return FTC_EINVAL;
    if (!step)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_restore: step is NULL");
    if (meta_len && *meta_len && !meta)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_restore: meta is NULL, *meta_len %zu",
                           *meta_len);
    if (src_rank < -1)
        return ftc_err_set(&c->err, FTC_EINVAL, "ftc_restore_from: rank %d", src_rank);
    int rc = ftc__slots(c);
    if (rc)
        return rc;
    /* a snapshot in flight reads the tensors the restore is about to write:
     * it would seal (and commit) a mix of both states, with checksums that
     * verify. It ends, and is handed to the agent, first. */
    ftc_err_t werr = {0};
    rc = ftc_snap_wait_copy(c->snap, ftc_deadline_in_ms((uint64_t)c->o.timeout_ms), &werr);
    if (rc == FTC_ETIMEDOUT) {
        c->err = werr;
        return ftc_err_wrap(&c->err, "ftc_restore: the snapshot in flight");
    }
    /* (a copy that failed is not running: no matter here; a failure the
     * notifier latched stays for the next ftc_wait_snapshot, ftc_checkpoint
     * or ftc_wait_committed) */
    rc = ftc__wait_notifier(c);
    if (rc)
        return ftc_err_wrap(&c->err, "ftc_restore");
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_RESTORE);
    m.src = src_rank;
    uint64_t t0 = ftc_now_ns();
    rc = ftc__call(c, &m, FTC_AP_RESTORE_OK, &rep);
    if (rc)
        return rc;
    uint64_t t1 = ftc_now_ns();
    uint64_t st;
    uint32_t ml = meta_len ? (uint32_t)(*meta_len > UINT32_MAX ? UINT32_MAX : *meta_len) : 0;
    /* the agent verified that very slot after its last write: once is enough */
    unsigned flags = (rep.status & FTC_AP_OK_VERIFIED) ? FTC_SNAP_RESTORE_VERIFIED : 0;
    rc = ftc_snap_restore_ex(c->snap, c->slot[rep.slot].base, c->size, flags, &st, meta,
                             meta_len ? &ml : NULL, &c->err);
    if (rc)
        return rc;
    FTC_DEBUG("client", "rank %u: restore of step %llu: agent %.1f ms, verify + copy %.1f ms",
              c->rank, (unsigned long long)st, (double)(t1 - t0) / 1e6,
              (double)(ftc_now_ns() - t1) / 1e6);
    if (meta_len)
        *meta_len = ml;
    *step = (int64_t)st;
    if ((int64_t)st > c->committed)
        c->committed = (int64_t)st;
    return 0;
}

int ftc_restore(ftc_ctx_t *c, int64_t *step, void *meta, size_t *meta_len)
{
    if (!c)
        return FTC_EINVAL;
    /* `ftc run` names the previous rank this one continues after a layout change */
    int src;
    int rc = ftc__env_int(c, "FTC_RESTORE_RANK", NULL, 0, FTC__MAX_WORLD - 1, -1, &src);
    if (rc)
        return rc;
    return ftc_restore_from(c, src >= 0 && (uint32_t)src != c->rank ? src : -1, step, meta,
                            meta_len);
}

struct ftc_shard_ref {
    ftc_slot_t sl;         /* the mapped copy (its name already unlinked) */
    ftc_shard_view_t v;    /* verified */
};

/* FETCH (the step asked for) or FETCH_AT_MOST (the newest committed step at
 * or before it): the agent's verified copy, mapped, verified again here. */
static int ftc__fetch(ftc_ctx_t *c, int src_rank, int64_t step, bool at_most,
                      ftc_shard_ref_t **out)
{
    const char *fn = at_most ? "ftc_fetch_at_most" : "ftc_fetch";
    if (out)
        *out = NULL;
    if (!c)
        return FTC_EINVAL;
    if (!out)
        return ftc_err_set(&c->err, FTC_EINVAL, "%s: out is NULL", fn);
    if (!c->snap || c->fd < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "%s: the context is not connected", fn);
    if (src_rank < 0)
        return ftc_err_set(&c->err, FTC_EINVAL, "%s: rank %d (need 0 .. the previous world "
                           "size - 1)", fn, src_rank);
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, at_most ? FTC_AP_FETCH_AT_MOST : FTC_AP_FETCH);
    m.src = src_rank;
    m.step = step < 0 ? UINT64_MAX : (uint64_t)step;
    int rc = ftc__call(c, &m, FTC_AP_FETCH_OK, &rep);
    if (rc)
        return rc;
    if (at_most && rep.step > m.step) { /* never a later state than asked for */
        ftc_err_t e = {0};
        ftc_slot_unlink(rep.name[0], &e);
        return ftc_err_set(&c->err, FTC_EPROTO, "%s: the agent answered step %llu for at most "
                           "%llu", fn, (unsigned long long)rep.step, (unsigned long long)m.step);
    }
    ftc_shard_ref_t *r = calloc(1, sizeof *r);
    if (!r)
        return ftc_err_set(&c->err, FTC_ENOMEM, "%s: out of memory", fn);
    rc = ftc_slot_open(rep.name[0], false, &r->sl, &c->err);
    ftc_err_t e = {0};
    ftc_slot_unlink(rep.name[0], &e); /* the mapping stays; nothing is left behind */
    if (rc) {
        free(r);
        return rc;
    }
    if (rep.size > r->sl.size ||
        (rc = ftc_shard_open(&r->v, r->sl.base, rep.size, FTC_SHARD_VERIFY, &c->err)) != 0 ||
        r->v.info.step != rep.step) {
        if (!rc)
            rc = ftc_err_set(&c->err, FTC_ECORRUPT, "%s: rank %d's shard is of step %llu, "
                             "not %llu", fn, src_rank, (unsigned long long)r->v.info.step,
                             (unsigned long long)rep.step);
        ftc_slot_close(&r->sl);
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int ftc_fetch(ftc_ctx_t *c, int src_rank, int64_t step, ftc_shard_ref_t **out)
{
    return ftc__fetch(c, src_rank, step, false, out);
}

int ftc_fetch_at_most(ftc_ctx_t *c, int src_rank, int64_t max_step, ftc_shard_ref_t **out)
{
    return ftc__fetch(c, src_rank, max_step, true, out);
}

int64_t ftc_shard_step(const ftc_shard_ref_t *s) { return (int64_t)s->v.info.step; }

const void *ftc_shard_meta(const ftc_shard_ref_t *s, size_t *len)
{
    /* the snapshot engine's "user" record: an 8-byte length, then the bytes */
    const uint8_t *val;
    uint32_t vl;
    uint64_t n = 0;
    *len = 0;
    if (ftc_shard_meta_get(&s->v, "user", &val, &vl) != 0 || vl < 8)
        return NULL;
    memcpy(&n, val, 8);
    if (n > vl - 8)
        return NULL;
    *len = (size_t)n;
    return val + 8;
}

int ftc_shard_tensor(const ftc_shard_ref_t *s, const char *name, const void **data, int *dtype,
                     uint64_t *numel)
{
    int i = ftc_shard_find(&s->v, name);
    if (i < 0)
        return FTC_ENOENT;
    ftc_shard_tensor_t t;
    ftc_shard_get(&s->v, (uint32_t)i, &t);
    *data = t.data;
    if (dtype)
        *dtype = t.dtype;
    if (numel)
        *numel = ftc_dtype_size(t.dtype) ? t.length / ftc_dtype_size(t.dtype) : 0;
    return 0;
}

void ftc_shard_release(ftc_shard_ref_t *s)
{
    if (!s)
        return;
    ftc_slot_close(&s->sl);
    free(s);
}
