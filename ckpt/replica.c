/*
 * replica.c — the replication engine of replica.h: a single-threaded event
 * loop over the agent's libfabric endpoint that pushes sealed shards to peer
 * agents, stores the replicas peers push to it in double-buffered shm slots,
 * and serves them back (GET), every transfer under a deadline.
 *
 * Tags (64 bits; exact tags only, never an ignore mask — libfabric 1.17's shm
 * does not match an unexpected message against a masked receive):
 *
 *   header  01 | 0...0 | sender node (32 bits)                tag (HDR, sender)
 *   data    10 | sender node & 0xfffff (20 bits) | seq (40)   tag (DATA, sender, seq)
 *
 * Every message starts as a 128-byte ckpt/wire.h header (HMAC'd) on the
 * header tag, received into a per-peer ring of posted receives (directed to
 * that peer's address, processed strictly in post order so the per-sender
 * seq check sees messages in send order). A PUT header's payload travels as
 * its own message on the data tag made from the PUT's seq; the receiver
 * posts that receive straight into the receiving replica slot at the PUT's
 * offset (zero copy). NACKs carry a reason text after the header.
 *
 *   push   sender: PUT hdr + DATA, `window` chunks in flight per peer; when
 *          every chunk's sends completed, PUT_END (total, payload_xxh3 = the
 *          shard's head checksum from its footer); then waits for ACK/NACK.
 *          receiver: first PUT of (owner, step) picks the slot that does not
 *          hold the complete replica; PUT_END → wait for the chunks, check
 *          byte count, ftc_shard_open(FTC_SHARD_VERIFY), the head checksum
 *          and the step against the authenticated PUT_END, swap slots, ACK.
 *   fetch  GET (owner, step | UINT64_MAX) → the holder answers with PUTs and
 *          a PUT_END flagged FTC__F_FETCH (no ACK), or NACK "not held".
 *   req    each push and each fetch has a request id (wire req) that its
 *          PUTs/PUT_END or GET carry and every answer echoes: an answer with
 *          another one (to an earlier request that gave up) is refused.
 *   refuse a header that fails decoding (HMAC, job, format) is counted and
 *          dropped: its sender is not known. An authenticated message that is
 *          refused (stale generation, busy, bad size) gets a NACK whose flags
 *          carry the FTC error code, and a refused PUT's payload is received
 *          into a throw-away buffer ("drained") so the sender's rendezvous
 *          send completes instead of being stuck (a stuck send cannot be
 *          cancelled and would break the sender's endpoint).
 *
 * docs/wire-protocol.md has the byte layout, sequences and threat model.
 * Not thread-safe: one thread drives an engine (replica.h).
 */
#include "ckpt/replica.h"

#include "ckpt/agent_proto.h" /* FTC_AP_SLOTS_PER_RANK: the agent's slots served locally */

#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"

#include <ctype.h>
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FTC__TAG_HDR (1ull << 62)
#define FTC__TAG_DATA (2ull << 62)
#define FTC__SEQ_MASK ((1ull << 40) - 1)
#define FTC__ADOPT_THREADS 4  /* threads verifying an adopted replica (per tensor) */
#define FTC__HASH_BUDGET (2u << 20) /* bytes a receiver verifies per progress round */
#define FTC__F_FETCH 0x100u  /* PUT / PUT_END / NACK: part of a fetch (GET answer) */
#define FTC__F_CODE 0xffu    /* NACK: the FTC error code, negated */
#define FTC__MSG_MAX 256     /* header + NACK reason */
#define FTC__REASON_MAX (FTC__MSG_MAX - FTC_WIRE_HDR)
#define FTC__MAX_CHUNKS_IN 512 /* DATA receives outstanding per incoming transfer */
#define FTC__CANCEL_BATCH 512  /* requests cancelled per fabric call (cancel_batch_t) */
#define FTC__MAX_DRAINS 32
#define FTC__CTL_MS 10000      /* lifetime of a control send (ACK/NACK/GET) */
/* How long a control message that the endpoint cannot take (FTC_EAGAIN) is
 * retried before it is dropped; a dropped GET fails its fetch, so the agent
 * asks its next candidate after this long instead of the fetch deadline. */
#define FTC__CTL_POST_MS 1000
#define FTC__STR_(x) #x
#define FTC__STR(x) FTC__STR_(x)
#define FTC__SPINS 256
/* A post the endpoint could not take now (ftc_fabric_isend_try returned
 * FTC_EAGAIN: rxm still connecting to the peer, or a queue full) stays queued
 * and is tried again this long later, by a later pump: the engine never waits
 * on one peer's connection while its other transfers could move. The
 * transfer's own deadline bounds the retries. */
#define FTC__RETRY_US 1000
/* An idle engine (nothing in flight: only its header receives posted)
 * sleeps this long between polls instead of spinning: an idle agent used
 * to take a whole core, which on a node whose cores train is a core taken
 * from the trainer. The cost is at most this much latency at the start of
 * an incoming transfer; a busy engine spins as before. */
#define FTC__IDLE_SLEEP_US 500
/* A busy engine in which nothing has moved for this long (a dead sender's
 * half push or an undelivered drain, waiting out serve_timeout_ms; a fetch
 * from a peer that went mute) naps as an idle one does: it spun a whole
 * core for up to serve_timeout_ms (60 s) after a node died mid-push, on a
 * node whose cores the recovering trainer wants. A live transfer completes
 * something far more often than this. */
#define FTC__QUIET_NAP_NS (100ull * 1000 * 1000)

static uint64_t tag_hdr(uint32_t sender) { return FTC__TAG_HDR | sender; }
static uint64_t tag_data(uint32_t sender, uint64_t seq)
{
    return FTC__TAG_DATA | ((uint64_t)(sender & 0xfffffu) << 40) | (seq & FTC__SEQ_MASK);
}

/* ---- state --------------------------------------------------------------------- */

typedef struct rx_hdr {
    ftc_fabric_req_t req;
    uint8_t buf[FTC__MSG_MAX];
} rx_hdr_t;

typedef struct peer {
    bool used;
    uint32_t node;            /* wire sender index */
    ftc_fabric_peer_t fa;     /* address vector entry */
    rx_hdr_t *rx;             /* ring of rx_per_peer header receives */
    int head;                 /* oldest posted entry: processed first */
    int posted;               /* entries head, head+1, ... posted, in ring order */
    bool seen;                /* last_seq is valid */
    uint64_t last_seq;        /* highest header seq accepted from it */
} peer_t;

typedef struct outmsg { /* a control message queued or in flight (ACK, NACK, GET) */
    ftc_fabric_req_t req;
    uint8_t buf[FTC__MSG_MAX];
    size_t len;             /* header + reason */
    ftc_wire_hdr_t h;       /* re-encoded with a fresh seq at each post attempt */
    uint32_t node;          /* to */
    bool posted;            /* false: the endpoint said FTC_EAGAIN; retried */
    uint64_t id;            /* unique in the engine: a fetch finds its GET by it */
    uint64_t next_try_ns;   /* not posted: when to try again */
    ftc_deadline_t post_d;  /* not posted by then: dropped */
    ftc_deadline_t d;
    struct outmsg *next;
} outmsg_t;

typedef struct drain { /* a refused PUT's payload received to be thrown away */
    ftc_fabric_req_t req;
    uint8_t *buf;
    size_t len;
    uint32_t node;          /* from */
    uint64_t tag;
    bool posted;            /* false: FTC_EAGAIN, retried until d */
    uint64_t next_try_ns;
    ftc_deadline_t d;
    ftc_deadline_t live;    /* posted, its DATA not in by then (the sender died or gave
                               up before sending it): cancelled, like an idle push */
    struct drain *next;
} drain_t;

struct xfer;
struct store;

typedef struct chunk_rx {
    ftc_fabric_req_t req;
    uint64_t off, len;
    uint64_t tag;           /* its DATA tag */
    bool posted;            /* false: FTC_EAGAIN, retried (the idle timeout bounds it) */
    uint64_t next_try_ns;
    struct chunk_rx *next;
} chunk_rx_t;

typedef struct landed { /* a received byte range past the contiguous prefix */
    uint64_t off, len;
    struct landed *next;
} landed_t;

enum { VS_TABLE = 0, VS_RUN = 1, VS_OFF = 2 }; /* in-order verification, see incoming_hash */

typedef struct incoming { /* bytes arriving for a push (into a slot) or a fetch (into a buffer) */
    uint32_t node;          /* sender */
    uint32_t owner;
    uint64_t step, total, gen;
    uint8_t *dst;           /* slot base or fetch buffer */
    struct store *st;       /* push: the store whose receiving slot is dst */
    int slot;               /* push: index of that slot */
    struct xfer *fx;        /* fetch: the transfer waiting for it */
    chunk_rx_t *chunks;
    int outstanding;
    uint64_t got;           /* bytes received */
    int bad;                /* first failed chunk status */
    bool end_seen;
    uint64_t head_xxh3;     /* from PUT_END */
    uint64_t last_ns;       /* last activity, for the idle timeout */
    uint64_t next_off;      /* fetch: the offset of the answer's next PUT (a serve sends its
                               chunks in order, from 0) */
    uint32_t req;           /* request id: the push's (its first PUT's), or the fetch's GET's */
    /* verification while the bytes arrive (incoming_hash) */
    uint64_t contig;        /* bytes [0, contig) have landed */
    landed_t *ahead;        /* landed ranges past contig, by offset */
    bool overlap;           /* two chunks overlapped: verify the whole shard at the end */
    int vstate;             /* VS_* */
    uint32_t nt, vt;        /* tensors; the next one to verify */
    uint64_t hpos;          /* bytes of tensor vt hashed so far */
    ftc_hash_t *h;
    uint32_t bad_tensor;    /* 1 + the first tensor whose checksum differed, 0 = none */
    struct incoming *next;
} incoming_t;

typedef struct store { /* one owner's replica: two slots */
    uint32_t owner;
    ftc_slot_t slot[2];
    int complete;           /* index holding the newest verified replica, -1: none */
    uint64_t step, size;    /* of the complete replica */
    bool held[2];           /* slot i holds a whole replica (the complete one, or the one
                               before it): of step sstep[i], ssize[i] bytes */
    uint64_t sstep[2], ssize[2];
    int serving[2];         /* serve transfers reading each slot */
    incoming_t *in;         /* push being received into slot[!complete] */
} store_t;

enum { XK_PUSH = 1, XK_FETCH = 2, XK_SERVE = 3 };
enum { TP_SEND = 1, TP_END, TP_OK, TP_FAIL };

typedef struct tx_chunk {
    ftc_fabric_req_t hreq, dreq;
    uint8_t hbuf[FTC_WIRE_HDR];
    uint64_t len;
    bool busy;
    bool dwait;             /* header posted, its DATA not yet (FTC_EAGAIN): retried */
    uint64_t doff, dseq;    /* the DATA's offset and the header's seq (its tag) */
} tx_chunk_t;

typedef struct tx_peer {
    uint32_t node;
    int state;
    int rc;                 /* failure of this peer */
    uint64_t next_off;      /* next byte to send */
    int inflight;
    bool blocked;           /* the last post to it got FTC_EAGAIN (none since went through) */
    uint64_t next_try_ns;   /* blocked: when to try again */
    tx_chunk_t *ch;         /* window */
    ftc_fabric_req_t ereq;  /* PUT_END */
    uint8_t ebuf[FTC_WIRE_HDR];
} tx_peer_t;

typedef struct xfer {
    int kind;
    bool done;
    int rc;
    int acked, failed;
    char detail[256];
    uint32_t owner;
    uint64_t step;          /* push/serve: the step; fetch: requested (UINT64_MAX newest) */
    const uint8_t *src;     /* push/serve: the shard */
    uint64_t size;
    uint64_t head_xxh3;
    uint64_t keep;          /* push: 1 + the owner's committed step (PUT's keep), 0 = none */
    uint32_t req;           /* push, fetch: its request id; serve: the GET's it answers */
    ftc_deadline_t d;
    int ntp;
    tx_peer_t *tp;
    store_t *pin;           /* serve: the store and slot it reads */
    int pin_slot;
    uint32_t fpeer;         /* fetch: the peer asked */
    uint64_t get_id;        /* fetch: its GET in the outbox (outmsg_t.id) */
    incoming_t *in;         /* fetch: the answer arriving */
    uint8_t *buf;           /* fetch: the verified result (until take) */
    uint8_t *dst;           /* fetch_into: the caller's memory (never freed here) */
    uint64_t dst_cap;
    uint64_t got_step;
} xfer_t;

struct ftc_repl {
    ftc_fabric_t *fab;
    ftc_wire_key_t key;
    char job[FTC_SHARD_JOB_MAX + 1];
    char local_ns[96];                 /* ftc_repl_serve_local: "" = none */
    uint32_t self;
    uint64_t gen;
    uint64_t chunk;
    int window, rx_per_peer, serve_ms;
    uint64_t seq;                      /* next header seq */
    uint64_t msg_ids;                  /* last outmsg_t.id */
    uint32_t req_ids;                  /* last request id given (wire req; never 0) */
    bool broken;                       /* the endpoint broke: no fabric call any more */
    peer_t peers[FTC_REPL_MAX_PEERS];
    store_t **stores;
    int nstores, capstores;
    incoming_t *ins;
    drain_t *drains;
    int ndrains;
    outmsg_t *outbox;
    xfer_t **xf;                       /* by id; serves too (freed when done) */
    int nxf;
    ftc_repl_counters_t ctr;
    int finished_now;                  /* user transfers finished in this progress call */
    uint64_t moved_ns;                 /* when a progress call last moved something (0: never) */
    ftc_err_t err;
};

/* ---- small helpers ------------------------------------------------------------- */

static peer_t *peer_find(ftc_repl_t *r, uint32_t node)
{
    for (int i = 0; i < FTC_REPL_MAX_PEERS; i++)
        if (r->peers[i].used && r->peers[i].node == node)
            return &r->peers[i];
    return NULL;
}

static void refused(ftc_repl_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refused(ftc_repl_t *r, const char *fmt, ...)
{
    uint64_t n = ++r->ctr.refused;
    if (n > 16 && (n & (n - 1))) /* the first 16, then powers of two */
        return;
    char msg[FTC_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    FTC_WARN("repl", "node %u refused a message (%llu refused so far): %s", r->self,
             (unsigned long long)n, msg);
}

/* Printable copy of an untrusted reason text. */
static void clean_text(char *out, size_t cap, const uint8_t *p, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < cap; i++)
        out[j++] = isprint(p[i]) ? (char)p[i] : '?';
    out[j] = 0;
}

static bool pending(const ftc_fabric_req_t *q)
{
    return q->state == FTC_FABRIC_REQ_PENDING;
}

static void mark_broken(ftc_repl_t *r);

/* Cancels reqs (bounded by the fabric's cancel timeout); latches a broken
 * endpoint. */
static void cancel_reqs(ftc_repl_t *r, ftc_fabric_req_t **reqs, size_t n)
{
    if (r->broken || n == 0)
        return;
    if (ftc_fabric_cancel(r->fab, (ftc_fabric_req_t *const *)reqs, n) < 0 ||
        ftc_fabric_health(r->fab) < 0)
        mark_broken(r);
}

static void cancel_one(ftc_repl_t *r, ftc_fabric_req_t *q)
{
    if (pending(q))
        cancel_reqs(r, &q, 1);
}

/* Requests to cancel, gathered in a fixed array and cancelled a batch at a
 * time: no allocation, so running out of memory cannot skip the cancel of
 * requests whose structures are freed right after (libfabric would complete
 * them into freed memory). A whole incoming transfer fits in one batch. */
typedef struct cancel_batch {
    ftc_fabric_req_t *q[FTC__CANCEL_BATCH];
    size_t n;
} cancel_batch_t;

static void batch_flush(ftc_repl_t *r, cancel_batch_t *b)
{
    cancel_reqs(r, b->q, b->n);
    b->n = 0;
}

static void batch_add(ftc_repl_t *r, cancel_batch_t *b, ftc_fabric_req_t *q)
{
    if (!pending(q))
        return;
    if (b->n == FTC__CANCEL_BATCH)
        batch_flush(r, b);
    b->q[b->n++] = q;
}

/* ---- sending headers ----------------------------------------------------------- */

static void hdr_init(ftc_repl_t *r, ftc_wire_hdr_t *h, int type, uint32_t owner, uint64_t step)
{
    memset(h, 0, sizeof *h);
    h->type = (uint16_t)type;
    h->generation = r->gen;
    h->sender = r->self;
    h->owner = owner;
    h->step = step;
    h->seq = r->seq++;
}

/* A new request id (a push's, a fetch's): every answer echoes it. */
static uint32_t req_new(ftc_repl_t *r)
{
    if (++r->req_ids == 0)
        ++r->req_ids;
    return r->req_ids;
}

static bool retry_due(uint64_t next_ns)
{
    return ftc_now_ns() >= next_ns;
}

static uint64_t retry_later(void)
{
    return ftc_now_ns() + (uint64_t)FTC__RETRY_US * 1000u;
}

/* One attempt at posting a control message: a fresh seq (so that whatever
 * goes out to a peer carries increasing seqs even after a retry), encode,
 * try to post. 0, FTC_EAGAIN (retry later) or an error. */
static int ctl_post(ftc_repl_t *r, outmsg_t *m, peer_t *p)
{
    m->h.seq = r->seq++;
    ftc_err_t e = {0};
    int rc = ftc_wire_encode(&r->key, &m->h, m->buf, &e);
    if (rc < 0)
        return ftc_err_set(&r->err, rc, "repl: encoding a %s to node %u: %s",
                           ftc_wire_type_name(m->h.type), p->node, e.msg);
    rc = ftc_fabric_isend_try(r->fab, &m->req, p->fa, tag_hdr(r->self), m->buf, m->len);
    if (rc == 0)
        m->posted = true;
    else if (rc == FTC_EAGAIN)
        m->next_try_ns = retry_later();
    else
        ftc_err_set(&r->err, rc, "%s", ftc_fabric_errmsg(r->fab));
    return rc;
}

/* Sends a control message (ACK, NACK with reason, GET) to p; *id (may be
 * NULL) names it in the outbox. When the endpoint cannot take it now it is
 * queued and posted by a later pump_outbox, until FTC__CTL_MS. A failure is
 * logged: the other side's deadline covers a lost control message. */
static int send_ctl(ftc_repl_t *r, peer_t *p, ftc_wire_hdr_t *h, const char *reason,
                    uint64_t *id)
{
    if (r->broken)
        return FTC_EFABRIC;
    outmsg_t *m = calloc(1, sizeof *m);
    if (!m)
        return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory for a %s to node %u",
                           ftc_wire_type_name(h->type), p->node);
    size_t rl = reason ? strnlen(reason, FTC__REASON_MAX) : 0;
    h->length = rl;
    h->payload_xxh3 = rl ? ftc_xxh3(reason, rl) : 0;
    if (rl)
        memcpy(m->buf + FTC_WIRE_HDR, reason, rl);
    m->h = *h;
    m->len = FTC_WIRE_HDR + rl;
    m->node = p->node;
    m->id = ++r->msg_ids;
    m->d = ftc_deadline_in_ms(FTC__CTL_MS);
    m->post_d = ftc_deadline_in_ms(FTC__CTL_POST_MS);
    int rc = ctl_post(r, m, p);
    if (rc < 0 && rc != FTC_EAGAIN) {
        free(m);
        FTC_WARN("repl", "node %u: could not send %s to node %u: %s", r->self,
                 ftc_wire_type_name(h->type), p->node, r->err.msg);
        if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
            mark_broken(r);
        return rc;
    }
    m->next = r->outbox;
    r->outbox = m;
    if (id)
        *id = m->id;
    return 0;
}

/* A NACK of (owner, step) answering request id req. */
static void send_nack(ftc_repl_t *r, peer_t *p, uint32_t owner, uint64_t step, uint32_t req,
                      unsigned fetch, int code, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static void send_nack(ftc_repl_t *r, peer_t *p, uint32_t owner, uint64_t step, uint32_t req,
                      unsigned fetch, int code, const char *fmt, ...)
{
    char reason[FTC__REASON_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    ftc_wire_hdr_t h;
    hdr_init(r, &h, FTC_MSG_NACK, owner, step);
    h.req = req;
    int c = -code;
    h.flags = (uint16_t)(fetch | (unsigned)((c > 0 && c <= 0xff) ? c : -FTC_EPROTO));
    FTC_INFO("repl", "node %u: NACK to node %u for owner %u step %llu: %s", r->self, p->node,
             owner, (unsigned long long)step, reason);
    (void)send_ctl(r, p, &h, reason, NULL);
}

static void xfer_abort(ftc_repl_t *r, xfer_t *x, int rc, const char *why);

/* Outbox message id, a GET, was dropped unposted: its fetch fails now. */
static void get_not_posted(ftc_repl_t *r, uint64_t id)
{
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (x && !x->done && x->kind == XK_FETCH && x->get_id == id) {
            xfer_abort(r, x, FTC_ETIMEDOUT, "could not post its GET (connection not "
                       "established?) within " FTC__STR(FTC__CTL_POST_MS) " ms");
            return;
        }
    }
}

static int pump_outbox(ftc_repl_t *r)
{
    int ev = 0;
    for (outmsg_t **pm = &r->outbox; *pm;) {
        outmsg_t *m = *pm;
        if (!m->posted) {
            peer_t *p = r->broken ? NULL : peer_find(r, m->node);
            int rc = FTC_EAGAIN;
            if (p && !ftc_deadline_expired(m->post_d) && retry_due(m->next_try_ns))
                rc = ctl_post(r, m, p);
            if (rc == 0)
                ev++;
            if (rc == 0 || (rc == FTC_EAGAIN && p && !ftc_deadline_expired(m->post_d))) {
                pm = &m->next;
                continue;
            }
            /* given up: nothing of it is posted, the buffer is ours */
            FTC_WARN("repl", "node %u: %s to node %u dropped: %s", r->self,
                     ftc_wire_type_name(m->h.type), m->node,
                     !p ? "peer removed or endpoint broken"
                     : rc == FTC_EAGAIN ? "could not post it (connection not established?)"
                                        : r->err.msg);
            if (rc != FTC_EAGAIN && ftc_fabric_health(r->fab) == FTC_EFABRIC)
                mark_broken(r);
            *pm = m->next;
            uint64_t id = m->id;
            free(m);
            ev++;
            if (rc == FTC_EAGAIN && p)
                get_not_posted(r, id);
            continue;
        }
        if (pending(&m->req) && ftc_deadline_expired(m->d))
            cancel_one(r, &m->req);
        if (pending(&m->req)) {
            pm = &m->next;
            continue;
        }
        *pm = m->next;
        free(m);
        ev++;
    }
    return ev;
}

/* Receives the DATA (tag, len bytes) of a PUT from p into a throw-away
 * buffer so its sender's send completes (see the top of the file). Best
 * effort, bounded. */
static void drain_tag(ftc_repl_t *r, peer_t *p, uint64_t tag, uint64_t len)
{
    if (len == 0 || r->broken || r->ndrains >= FTC__MAX_DRAINS)
        return;
    drain_t *d = calloc(1, sizeof *d);
    uint8_t *buf = d ? malloc(len) : NULL;
    if (!buf) {
        free(d);
        return;
    }
    d->buf = buf;
    d->len = len;
    d->node = p->node;
    d->tag = tag;
    d->d = ftc_deadline_in_ms(1000);
    d->live = ftc_deadline_in_ms((uint64_t)r->serve_ms);
    int rc = ftc_fabric_irecv_try(r->fab, &d->req, p->fa, d->tag, 0, buf, d->len);
    if (rc < 0 && rc != FTC_EAGAIN) {
        free(buf);
        free(d);
        return;
    }
    d->posted = rc == 0;
    d->next_try_ns = retry_later();
    d->next = r->drains;
    r->drains = d;
    r->ndrains++;
}

/* Drains a refused PUT's payload. */
static void drain_put(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    if (h->type == FTC_MSG_PUT)
        drain_tag(r, p, tag_data(p->node, h->seq), h->length);
}

static int pump_drains(ftc_repl_t *r)
{
    int ev = 0;
    for (drain_t **pd = &r->drains; *pd;) {
        drain_t *d = *pd;
        if (pending(&d->req) && ftc_deadline_expired(d->live))
            cancel_one(r, &d->req); /* else it held a drain and its buffer for ever */
        bool keep = pending(&d->req);
        if (!d->posted) {
            /* not posted yet (FTC_EAGAIN): retry until its deadline, then give
             * up (best effort); nothing of it is posted, so it is freed */
            peer_t *p = r->broken ? NULL : peer_find(r, d->node);
            keep = p && !ftc_deadline_expired(d->d);
            if (keep && retry_due(d->next_try_ns)) {
                int rc = ftc_fabric_irecv_try(r->fab, &d->req, p->fa, d->tag, 0, d->buf, d->len);
                d->posted = rc == 0;
                d->next_try_ns = retry_later();
                keep = rc == 0 || rc == FTC_EAGAIN;
            }
        }
        if (keep) {
            pd = &d->next;
            continue;
        }
        *pd = d->next;
        free(d->buf);
        free(d);
        r->ndrains--;
        ev++;
    }
    return ev;
}

/* ---- transfers: finishing ------------------------------------------------------ */

static void xfer_free(ftc_repl_t *r, xfer_t *x);

static void xfer_finish(ftc_repl_t *r, xfer_t *x)
{
    if (x->done)
        return;
    x->done = true;
    if (x->kind == XK_PUSH) {
        x->rc = 0;
        for (int i = 0; i < x->ntp; i++)
            if (x->tp[i].state == TP_FAIL && !x->rc)
                x->rc = x->tp[i].rc;
    }
    if (x->kind != XK_SERVE)
        r->finished_now++;
}

static void xfer_fail(xfer_t *x, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void xfer_fail(xfer_t *x, int rc, const char *fmt, ...)
{
    if (!x->rc)
        x->rc = rc;
    if (!x->detail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->detail, sizeof x->detail, fmt, ap);
        va_end(ap);
    }
}

static void tp_fail(xfer_t *x, tx_peer_t *tp, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void tp_fail(xfer_t *x, tx_peer_t *tp, int rc, const char *fmt, ...)
{
    if (tp->state == TP_FAIL || tp->state == TP_OK)
        return;
    tp->state = TP_FAIL;
    tp->rc = rc;
    x->failed++;
    if (!x->detail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->detail, sizeof x->detail, fmt, ap);
        va_end(ap);
    }
}

static void tp_pending(ftc_repl_t *r, tx_peer_t *tp, cancel_batch_t *b)
{
    for (int c = 0; c < r->window; c++) {
        batch_add(r, b, &tp->ch[c].hreq);
        batch_add(r, b, &tp->ch[c].dreq);
    }
    batch_add(r, b, &tp->ereq);
}

/* How incoming_free treats the DATA receives still outstanding. */
enum { IN_KEEP = 0, IN_CANCEL = 1, IN_DRAIN = 2 };
static void incoming_free(ftc_repl_t *r, incoming_t *in, int how);

/* Drops outbox message `id` if it is still waiting to be posted (nothing of
 * it is in libfabric's hands); true if it was. */
static bool outbox_drop_unposted(ftc_repl_t *r, uint64_t id)
{
    for (outmsg_t **pm = &r->outbox; id && *pm; pm = &(*pm)->next)
        if ((*pm)->id == id) {
            outmsg_t *m = *pm;
            if (m->posted)
                return false;
            *pm = m->next;
            free(m);
            return true;
        }
    return false;
}

/* Deadline or removal: cancel what is outstanding, fail what is unfinished. */
static void xfer_abort(ftc_repl_t *r, xfer_t *x, int rc, const char *why)
{
    if (x->done)
        return;
    /* fail first, so the reason is the deadline even if cancelling breaks
     * the endpoint (then every other transfer gets FTC_EFABRIC) */
    for (int i = 0; i < x->ntp; i++) {
        tx_peer_t *tp = &x->tp[i];
        if (tp->state != TP_OK)
            tp_fail(x, tp, rc, "peer %u, owner %u step %llu: %s (posted %llu of %llu bytes)",
                    tp->node, x->owner, (unsigned long long)x->step,
                    rc == FTC_ETIMEDOUT && tp->blocked
                        ? "could not post (connection not established?) by the deadline"
                        : why,
                    (unsigned long long)tp->next_off, (unsigned long long)x->size);
    }
    if (x->kind == XK_FETCH && outbox_drop_unposted(r, x->get_id))
        xfer_fail(x, rc, "fetch of owner %u from peer %u: could not post its GET (connection "
                  "not established?) by the %s", x->owner, x->fpeer,
                  rc == FTC_ETIMEDOUT ? "deadline" : "time it ended");
    if (x->kind == XK_FETCH)
        xfer_fail(x, rc, "fetch of owner %u from peer %u: %s", x->owner, x->fpeer, why);
    if (x->ntp) {
        cancel_batch_t b;
        b.n = 0;
        for (int i = 0; i < x->ntp; i++)
            tp_pending(r, &x->tp[i], &b);
        batch_flush(r, &b);
        for (int i = 0; i < x->ntp; i++) { /* cancelled: nothing in flight now */
            x->tp[i].inflight = 0;
            for (int c = 0; c < r->window; c++)
                x->tp[i].ch[c].busy = x->tp[i].ch[c].dwait = false;
        }
    }
    if (x->kind == XK_FETCH) {
        if (x->in) {
            incoming_free(r, x->in, IN_DRAIN); /* the holder may still be sending */
            x->in = NULL;
        }
        if (x->buf != x->dst)
            free(x->buf);
        x->buf = NULL;
    }
    xfer_finish(r, x);
}

static void mark_broken(ftc_repl_t *r)
{
    if (r->broken)
        return;
    r->broken = true;
    if (ftc_fabric_health(r->fab) == FTC_ECANCELED) { /* its owner is stopping: expected */
        ftc_err_set(&r->err, FTC_ECANCELED, "repl: the fabric endpoint was aborted (%s)",
                    ftc_fabric_errmsg(r->fab));
        FTC_DEBUG("repl", "node %u: %s", r->self, r->err.msg);
    } else {
        ftc_err_set(&r->err, FTC_EFABRIC, "repl: the fabric endpoint broke (%s); close it, "
                    "open a new one and create a new engine", ftc_fabric_errmsg(r->fab));
        FTC_ERROR("repl", "node %u: %s", r->self, r->err.msg);
    }
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (!x || x->done)
            continue;
        for (int j = 0; j < x->ntp; j++)
            tp_fail(x, &x->tp[j], FTC_EFABRIC, "peer %u, owner %u step %llu: endpoint broken",
                    x->tp[j].node, x->owner, (unsigned long long)x->step);
        if (x->kind == XK_FETCH)
            xfer_fail(x, FTC_EFABRIC, "fetch of owner %u from peer %u: endpoint broken", x->owner,
                      x->fpeer);
        xfer_finish(r, x);
    }
}

/* ---- replica store ------------------------------------------------------------- */

static int replica_slot_name(const ftc_repl_t *r, uint32_t owner, int idx, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "ftc.%s.n%u.p%u.s%d", r->job, r->self, owner, idx);
    return n > 0 && (size_t)n < cap ? 0 : FTC_EINVAL;
}

/* Adopts replica slots left in shm by an earlier process of this agent:
 * the slot that verifies with the highest step becomes the complete one.
 * Only that one is hashed (the newer slot first, on a few threads; the older
 * one only if the newer fails): a restarted agent's first GET waits on it. */
static void store_adopt(ftc_repl_t *r, store_t *s)
{
    ftc_shard_view_t v[2];
    bool ok[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        char name[FTC_SLOT_NAME_MAX];
        ftc_err_t e = {0};
        if (replica_slot_name(r, s->owner, i, name, sizeof name) ||
            ftc_slot_open(name, true, &s->slot[i], &e) < 0)
            continue;
        ok[i] = ftc_shard_open(&v[i], s->slot[i].base, s->slot[i].size,
                               FTC_SHARD_ALLOW_TRAILING, &e) == 0;
    }
    int first = ok[0] && (!ok[1] || v[0].info.step >= v[1].info.step) ? 0 : 1;
    for (int k = 0; k < 2 && s->complete < 0; k++) {
        int i = k == 0 ? first : !first;
        ftc_err_t e = {0};
        if (ok[i] && ftc_shard_verify(&v[i], FTC__ADOPT_THREADS, &e) == 0) {
            s->complete = i;
            s->step = v[i].info.step;
            s->size = v[i].size;
        } else if (ok[i]) {
            FTC_WARN("repl", "node %u: replica slot %d of owner %u (step %llu) does not "
                     "verify: not adopted (%s)", r->self, i, s->owner,
                     (unsigned long long)v[i].info.step, e.msg);
            ok[i] = false; /* torn (a push that failed midway): never held, nor kept */
        }
    }
    /* the other one (older, not hashed yet) is verified when served */
    for (int i = 0; i < 2 && s->complete >= 0; i++)
        if (ok[i]) {
            s->held[i] = true;
            s->sstep[i] = v[i].info.step;
            s->ssize[i] = v[i].size;
        }
    if (s->complete >= 0)
        FTC_INFO("repl", "node %u: adopted the replica of owner %u step %llu from slot %d",
                 r->self, s->owner, (unsigned long long)s->step, s->complete);
}

static store_t *store_get(ftc_repl_t *r, uint32_t owner, bool create)
{
    for (int i = 0; i < r->nstores; i++)
        if (r->stores[i]->owner == owner)
            return r->stores[i];
    if (!create)
        return NULL;
    if (r->nstores == r->capstores) {
        int cap = r->capstores ? r->capstores * 2 : 8;
        store_t **ns = realloc(r->stores, (size_t)cap * sizeof *ns);
        if (!ns)
            return NULL;
        r->stores = ns;
        r->capstores = cap;
    }
    store_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->owner = owner;
    s->complete = -1;
    s->slot[0].fd = s->slot[1].fd = -1;
    store_adopt(r, s);
    r->stores[r->nstores++] = s;
    return s;
}

int ftc_repl_adopt_all(ftc_repl_t *r, atomic_bool *stop)
{
    char prefix[FTC_SLOT_NAME_MAX];
    int pl = snprintf(prefix, sizeof prefix, "ftc.%s.n%u.p", r->job, r->self);
    DIR *d = pl > 0 && (size_t)pl < sizeof prefix ? opendir("/dev/shm") : NULL;
    if (!d)
        return 0;
    uint64_t t0 = ftc_now_ns();
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *p = de->d_name;
        char *end = NULL;
        if (strncmp(p, prefix, (size_t)pl) || !isdigit((unsigned char)p[pl]))
            continue;
        if (stop && atomic_load(stop))
            break; /* the agent stops: the rest are adopted at their first use, if ever */
        unsigned long owner = strtoul(p + pl, &end, 10);
        /* ".s0" or ".s1": a replica slot (replica_slot_name) */
        if (owner > UINT32_MAX || strncmp(end, ".s", 2) || (end[2] != '0' && end[2] != '1') ||
            end[3] || store_get(r, (uint32_t)owner, false))
            continue;
        store_t *s = store_get(r, (uint32_t)owner, true);
        n += s && s->complete >= 0;
    }
    closedir(d);
    if (n)
        FTC_DEBUG("repl", "node %u: %d replica(s) adopted at start in %.1f ms", r->self, n,
                  (double)(ftc_now_ns() - t0) / 1e6);
    return n;
}

/* Maps slot idx of s with exactly size bytes (creating or resizing it). */
static int store_prepare(ftc_repl_t *r, store_t *s, int idx, uint64_t size, ftc_err_t *e)
{
    if (s->slot[idx].base && s->slot[idx].size == size)
        return 0;
    s->held[idx] = false;
    ftc_slot_close(&s->slot[idx]);
    char name[FTC_SLOT_NAME_MAX];
    if (replica_slot_name(r, s->owner, idx, name, sizeof name))
        return ftc_err_set(e, FTC_EINVAL, "replica slot name of owner %u too long", s->owner);
    return ftc_slot_create(name, size, &s->slot[idx], e);
}

/* ---- incoming transfers -------------------------------------------------------- */

/* Frees in. IN_CANCEL: its outstanding DATA receives are cancelled first;
 * IN_DRAIN: also, those whose DATA has not come are drained (drain_tag): a
 * sender still alive (a holder answering a fetch that gave up, a push
 * superseded) then sees its sends complete; an unreceived rendezvous send
 * can never complete or be cancelled and would break its endpoint. */
static void incoming_free(ftc_repl_t *r, incoming_t *in, int how)
{
    if (how != IN_KEEP && in->outstanding && !r->broken) {
        cancel_batch_t b;
        b.n = 0;
        for (chunk_rx_t *c = in->chunks; c; c = c->next)
            batch_add(r, &b, &c->req);
        batch_flush(r, &b);
    }
    /* after a cancel, anything still pending belongs to a broken endpoint
     * that will never progress again (fabric.h), so freeing is safe */
    peer_t *p = how == IN_DRAIN && !r->broken ? peer_find(r, in->node) : NULL;
    while (in->chunks) {
        chunk_rx_t *c = in->chunks;
        in->chunks = c->next;
        if (p && (!c->posted || (c->req.state == FTC_FABRIC_REQ_DONE &&
                                 c->req.status == FTC_ECANCELED)))
            drain_tag(r, p, c->tag, c->len);
        free(c);
    }
    for (incoming_t **pi = &r->ins; *pi; pi = &(*pi)->next)
        if (*pi == in) {
            *pi = in->next;
            break;
        }
    if (in->st && in->st->in == in)
        in->st->in = NULL;
    while (in->ahead) {
        landed_t *l = in->ahead;
        in->ahead = l->next;
        free(l);
    }
    ftc_hash_destroy(in->h);
    free(in);
}

static incoming_t *incoming_new(ftc_repl_t *r, const peer_t *p, const ftc_wire_hdr_t *h)
{
    incoming_t *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->node = p->node;
    in->owner = h->owner;
    in->step = h->step;
    in->total = h->total;
    in->gen = h->generation;
    in->req = h->req;
    in->last_ns = ftc_now_ns();
    in->next = r->ins;
    r->ins = in;
    return in;
}

/* Posts the DATA receive of PUT h into in->dst. */
static int incoming_post(ftc_repl_t *r, peer_t *p, incoming_t *in, const ftc_wire_hdr_t *h,
                         const char **why)
{
    *why = NULL;
    if (h->total != in->total || h->step != in->step) {
        *why = "a PUT whose size or step differs from the transfer's first PUT";
        return FTC_EPROTO;
    }
    if (h->length == 0) {
        *why = "an empty PUT";
        return FTC_EPROTO;
    }
    if (in->outstanding >= FTC__MAX_CHUNKS_IN) {
        *why = "too many PUTs in flight";
        return FTC_EPROTO;
    }
    chunk_rx_t *c = calloc(1, sizeof *c);
    if (!c) {
        *why = "out of memory";
        return FTC_ENOMEM;
    }
    c->off = h->offset;
    c->len = h->length;
    c->tag = tag_data(p->node, h->seq);
    int rc = ftc_fabric_irecv_try(r->fab, &c->req, p->fa, c->tag, 0, in->dst + h->offset,
                                  h->length);
    c->posted = rc == 0;
    if (rc == FTC_EAGAIN) { /* pump_incoming posts it later */
        c->next_try_ns = retry_later();
        rc = 0;
    }
    if (rc < 0) {
        free(c);
        *why = "the endpoint refused the receive (chunk larger than max_msg?)";
        if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
            mark_broken(r);
        return rc;
    }
    c->next = in->chunks;
    in->chunks = c;
    in->outstanding++;
    in->last_ns = ftc_now_ns();
    return 0;
}

/* Records that [off, off+len) has landed: grows the contiguous prefix, keeps
 * later ranges aside; an overlap turns in-order verification off. */
static void incoming_landed(incoming_t *in, uint64_t off, uint64_t len)
{
    if (in->overlap)
        return;
    if (off < in->contig) {
        in->overlap = true;
        return;
    }
    if (off > in->contig) {
        landed_t **pl = &in->ahead;
        while (*pl && (*pl)->off < off)
            pl = &(*pl)->next;
        landed_t *prev = NULL;
        for (landed_t *l = in->ahead; l && l->off < off; l = l->next)
            prev = l;
        if ((prev && prev->off + prev->len > off) || (*pl && off + len > (*pl)->off)) {
            in->overlap = true;
            return;
        }
        landed_t *n = malloc(sizeof *n);
        if (!n) {
            in->overlap = true; /* fall back to the verification at the end */
            return;
        }
        *n = (landed_t){off, len, *pl};
        *pl = n;
        return;
    }
    in->contig += len;
    while (in->ahead && in->ahead->off <= in->contig) {
        landed_t *l = in->ahead;
        if (l->off < in->contig) {
            in->overlap = true;
            return;
        }
        in->contig += l->len;
        in->ahead = l->next;
        free(l);
    }
}

/* Verifies the tensors whose bytes have all landed, in order, hashing at
 * most budget bytes (so the progress loop keeps the transfer moving): the
 * shard is mostly verified when its last byte arrives. The table entries are
 * only bounds-checked here; incoming_verify validates the whole shard
 * (ftc_shard_open) before trusting the result, and the bytes hashed cannot
 * change afterwards because no two chunks overlap. */
static void incoming_hash(incoming_t *in, uint64_t budget)
{
    if (in->overlap || in->vstate == VS_OFF)
        return;
    if (in->vstate == VS_TABLE) {
        int rc = ftc_shard_peek_count(in->dst, in->contig, in->total, &in->nt);
        if (rc == FTC_EAGAIN)
            return;
        if (rc || !(in->h = ftc_hash_create())) {
            in->vstate = VS_OFF; /* the verification at the end reports what is wrong */
            return;
        }
        in->vstate = VS_RUN;
    }
    while (in->vt < in->nt) {
        uint64_t off, len, want;
        if (ftc_shard_peek_tensor(in->dst, in->total, in->vt, &off, &len, &want)) {
            in->vstate = VS_OFF;
            return;
        }
        if (in->hpos == 0)
            ftc_hash_reset(in->h);
        uint64_t avail = in->contig > off ? in->contig - off : 0;
        if (avail > len)
            avail = len;
        uint64_t n = avail - in->hpos;
        if (n > budget)
            n = budget;
        if (n) {
            ftc_hash_update(in->h, in->dst + off + in->hpos, n);
            in->hpos += n;
            budget -= n;
        }
        if (in->hpos < len)
            return; /* more bytes to come, or out of budget */
        if (ftc_hash_digest(in->h) != want && !in->bad_tensor)
            in->bad_tensor = in->vt + 1;
        in->vt++;
        in->hpos = 0;
    }
}

/* Verifies a fully received transfer: byte count, shard format and every
 * checksum, the zero padding between the tensors, head checksum and step
 * against the authenticated PUT_END. The tensors were hashed as they arrived
 * (incoming_hash); what is left is the structure, the padding, the head
 * checksum and the tail of the last tensor. */
static int incoming_verify(incoming_t *in, ftc_err_t *e)
{
    if (in->bad)
        return ftc_err_set(e, in->bad, "a DATA message failed: %s", ftc_strerror(in->bad));
    if (in->got != in->total)
        return ftc_err_set(e, FTC_ETRUNC, "received %llu of %llu bytes",
                           (unsigned long long)in->got, (unsigned long long)in->total);
    incoming_hash(in, UINT64_MAX);
    bool streamed = !in->overlap && in->vstate == VS_RUN && in->contig == in->total &&
                    in->vt == in->nt;
    ftc_shard_view_t v;
    int rc = ftc_shard_open(&v, in->dst, in->total, streamed ? 0 : FTC_SHARD_VERIFY, e);
    if (rc >= 0 && streamed && v.n_tensors != in->nt)
        rc = ftc_shard_verify(&v, 1, e); /* cannot happen once open succeeded; be safe */
    else if (rc >= 0 && streamed && in->bad_tensor)
        rc = ftc_shard_verify_tensor(&v, in->bad_tensor - 1, e); /* names the tensor */
    else if (rc >= 0 && streamed)
        rc = ftc_shard_verify_gaps(&v, e); /* the padding no tensor checksum covers */
    if (rc < 0)
        return ftc_err_wrap(e, "shard verification failed");
    if (v.head_xxh3 != in->head_xxh3)
        return ftc_err_set(e, FTC_ECORRUPT, "head checksum %016llx differs from the PUT_END's "
                           "%016llx", (unsigned long long)v.head_xxh3,
                           (unsigned long long)in->head_xxh3);
    if (v.info.step != in->step)
        return ftc_err_set(e, FTC_EPROTO, "the shard is of step %llu, the PUTs said %llu",
                           (unsigned long long)v.info.step, (unsigned long long)in->step);
    return 0;
}

static void incoming_complete(ftc_repl_t *r, incoming_t *in)
{
    ftc_err_t e = {0};
    int rc = incoming_verify(in, &e);
    peer_t *p = peer_find(r, in->node);
    if (in->fx) { /* a fetch answer */
        xfer_t *x = in->fx;
        x->in = NULL;
        if (rc < 0) {
            if (x->buf != x->dst)
                free(x->buf);
            x->buf = NULL;
            xfer_fail(x, rc, "fetch of owner %u step %llu from peer %u: %s", in->owner,
                      (unsigned long long)in->step, in->node, e.msg);
        } else {
            x->got_step = in->step;
            x->size = in->total;
        }
        xfer_finish(r, x);
        incoming_free(r, in, IN_KEEP);
        return;
    }
    store_t *s = in->st;
    if (rc < 0) {
        refused(r, "replica of owner %u step %llu from node %u: %s", in->owner,
                (unsigned long long)in->step, in->node, e.msg);
        if (p)
            send_nack(r, p, in->owner, in->step, in->req, 0, rc, "%s",
                      e.msg); /* the sender names both */
        incoming_free(r, in, IN_KEEP);
        return;
    }
    s->complete = in->slot;
    s->step = in->step;
    s->size = in->total;
    s->held[in->slot] = true;
    s->sstep[in->slot] = in->step;
    s->ssize[in->slot] = in->total;
    FTC_DEBUG("repl", "node %u: replica of owner %u step %llu from node %u stored (%llu bytes)",
              r->self, in->owner, (unsigned long long)in->step, in->node,
              (unsigned long long)in->total);
    if (p) {
        ftc_wire_hdr_t h;
        hdr_init(r, &h, FTC_MSG_ACK, in->owner, in->step);
        h.req = in->req;
        h.total = in->total;
        (void)send_ctl(r, p, &h, NULL, NULL);
    }
    incoming_free(r, in, IN_KEEP);
}

static int pump_incoming(ftc_repl_t *r)
{
    int ev = 0;
    uint64_t idle_ns = (uint64_t)r->serve_ms * 1000000ull;
    for (incoming_t *in = r->ins, *next; in; in = next) {
        next = in->next;
        for (chunk_rx_t **pc = &in->chunks; *pc;) {
            chunk_rx_t *c = *pc;
            if (!c->posted) { /* FTC_EAGAIN before: try again (idle timeout bounds it) */
                peer_t *p = peer_find(r, in->node);
                if (!p || !retry_due(c->next_try_ns)) {
                    pc = &c->next;
                    continue;
                }
                int rc = ftc_fabric_irecv_try(r->fab, &c->req, p->fa, c->tag, 0,
                                              in->dst + c->off, c->len);
                if (rc == FTC_EAGAIN) {
                    c->next_try_ns = retry_later();
                    pc = &c->next;
                    continue;
                }
                c->posted = true; /* posted, or failed: then a failed chunk below */
                if (rc < 0) {
                    if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
                        mark_broken(r);
                    c->req.status = rc;
                } else {
                    ev++;
                }
            }
            if (pending(&c->req)) {
                pc = &c->next;
                continue;
            }
            if (c->req.status == 0 && c->req.len == c->len) {
                in->got += c->len;
                incoming_landed(in, c->off, c->len);
                r->ctr.bytes_received += c->len;
            } else if (!in->bad) {
                in->bad = c->req.status ? c->req.status : FTC_ETRUNC;
            }
            *pc = c->next;
            free(c);
            in->outstanding--;
            in->last_ns = ftc_now_ns();
            ev++;
        }
        if (!in->bad)
            incoming_hash(in, FTC__HASH_BUDGET);
        if (in->end_seen && in->outstanding == 0) {
            incoming_complete(r, in);
            ev++;
        } else if (!in->fx && ftc_now_ns() - in->last_ns > idle_ns) {
            FTC_WARN("repl", "node %u: push of owner %u step %llu from node %u idle for %d ms: "
                     "abandoned (sender dead?)", r->self, in->owner, (unsigned long long)in->step,
                     in->node, r->serve_ms);
            incoming_free(r, in, IN_CANCEL);
            ev++;
        }
        if (r->broken)
            break;
    }
    return ev;
}

/* ---- handling one header -------------------------------------------------------- */

static void on_push_put(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    store_t *s = store_get(r, h->owner, true);
    const char *why = NULL;
    int code = FTC_EPROTO;
    if (!s) {
        code = FTC_ENOMEM, why = "out of memory";
        goto refuse;
    }
    if (h->total < FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE) {
        why = "a shard smaller than a shard header and footer";
        goto refuse;
    }
    incoming_t *in = s->in;
    if (in && (in->node != p->node || in->step != h->step || in->total != h->total ||
               in->req != h->req || h->offset == 0)) {
        /* Another push of this owner is unfinished. The same sender starting
         * anew means its old push ended (it never overlaps them): also a push
         * of the same step, which starts at offset 0 again (a push sends each
         * offset once, in order) — a sender that restarted, or retries after
         * a lost connection; the old push's receives would wait for DATA
         * that never comes. A newer generation wins; otherwise the first one
         * keeps the slot. */
        if (in->node == p->node || h->generation > in->gen) {
            if (in->node != p->node) {
                peer_t *op = peer_find(r, in->node);
                if (op)
                    send_nack(r, op, in->owner, in->step, in->req, 0, FTC_ECANCELED,
                              "superseded by node %u's push of step %llu (generation %llu)",
                              p->node, (unsigned long long)h->step,
                              (unsigned long long)h->generation);
            }
            incoming_free(r, in, IN_DRAIN); /* its sender may be alive */
            in = NULL;
            if (r->broken)
                return;
        } else {
            code = FTC_EAGAIN, why = "busy: another node's push of this owner is in progress";
            goto refuse;
        }
    }
    if (!in) {
        int idx = s->complete < 0 ? 0 : 1 - s->complete;
        if (s->complete >= 0 && h->keep && s->step != h->keep - 1 && s->held[idx] &&
            s->sstep[idx] == h->keep - 1 && !s->serving[s->complete]) {
            /* The newest replica here is of a version the sender says never
             * committed (it abandoned it after its timeout), and the other
             * slot holds the owner's committed one: the push goes over the
             * uncommitted one. Written over as usual, the committed version
             * lost this copy until the new one committed, for good if that
             * one failed too (I2). */
            FTC_INFO("repl", "node %u: push of owner %u step %llu from node %u replaces the "
                     "uncommitted step %llu and keeps the committed step %llu", r->self,
                     h->owner, (unsigned long long)h->step, p->node,
                     (unsigned long long)s->step, (unsigned long long)s->sstep[idx]);
            int c = idx;
            idx = s->complete;
            s->complete = c;
            s->step = s->sstep[c];
            s->size = s->ssize[c];
        }
        if (s->serving[idx]) {
            code = FTC_EAGAIN, why = "busy: the receiving slot is being served to a fetch";
            goto refuse;
        }
        ftc_err_t e = {0};
        int rc = store_prepare(r, s, idx, h->total, &e);
        if (rc < 0) {
            refused(r, "PUT of owner %u step %llu from node %u: %s", h->owner,
                    (unsigned long long)h->step, p->node, e.msg);
            drain_put(r, p, h);
            send_nack(r, p, h->owner, h->step, h->req, 0, rc, "cannot hold %llu bytes: %s",
                      (unsigned long long)h->total, e.msg);
            return;
        }
        in = incoming_new(r, p, h);
        if (!in) {
            code = FTC_ENOMEM, why = "out of memory";
            goto refuse;
        }
        in->st = s;
        in->slot = idx;
        in->dst = s->slot[idx].base;
        s->in = in;
        s->held[idx] = false; /* written over from now on */
    }
    code = incoming_post(r, p, in, h, &why);
    if (code == 0 || r->broken)
        return;
refuse:
    refused(r, "PUT of owner %u step %llu bytes %llu..+%llu from node %u: %s", h->owner,
            (unsigned long long)h->step, (unsigned long long)h->offset,
            (unsigned long long)h->length, p->node, why);
    drain_put(r, p, h);
    send_nack(r, p, h->owner, h->step, h->req, 0, code, "PUT at offset %llu: %s",
              (unsigned long long)h->offset, why);
}

static xfer_t *fetch_find(ftc_repl_t *r, uint32_t node, uint32_t owner)
{
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (x && !x->done && x->kind == XK_FETCH && x->fpeer == node && x->owner == owner)
            return x;
    }
    return NULL;
}

/* The largest fetch answer taken into a buffer of the engine's own: half of
 * this node's memory (the default size of /dev/shm, where no larger replica
 * could be held either). An answer claiming more (an authenticated but
 * confused holder) is refused before anything is allocated and touched. */
static uint64_t fetch_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || pg <= 0)
        return (uint64_t)1 << 40;
    return (uint64_t)pages * (uint64_t)pg / 2;
}

static void on_fetch_put(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    xfer_t *x = fetch_find(r, p->node, h->owner);
    if (!x || h->req != x->req || (x->step != UINT64_MAX && x->step != h->step)) {
        refused(r, "unsolicited fetch PUT of owner %u step %llu from node %u (request %u%s)",
                h->owner, (unsigned long long)h->step, p->node, h->req,
                x && h->req != x->req ? ": an earlier fetch's" : "");
        drain_put(r, p, h);
        return;
    }
    uint64_t want = x->in ? x->in->next_off : 0;
    if (h->offset != want) {
        /* a serve sends its PUTs in order from offset 0: this one is the
         * rest of the answer to an earlier fetch of the owner that gave up */
        refused(r, "fetch PUT of owner %u step %llu at offset %llu from node %u: the answer "
                "is at offset %llu (the rest of an earlier fetch's answer)", h->owner,
                (unsigned long long)h->step, (unsigned long long)h->offset, p->node,
                (unsigned long long)want);
        drain_put(r, p, h);
        return;
    }
    if (!x->in) {
        /* straight into the caller's memory when it fits (no copy after) */
        bool into = x->dst && h->total <= x->dst_cap && h->total >= FTC_SHARD_HEADER_SIZE;
        if (!into && h->total > fetch_limit()) {
            drain_put(r, p, h);
            xfer_fail(x, FTC_ERANGE, "fetch of owner %u from peer %u: the answer claims %llu "
                      "bytes, more than half this node's memory (%llu bytes); refused",
                      h->owner, p->node, (unsigned long long)h->total,
                      (unsigned long long)fetch_limit());
            xfer_finish(r, x);
            return;
        }
        uint8_t *buf = into ? x->dst
                            : h->total >= FTC_SHARD_HEADER_SIZE ? malloc(h->total) : NULL;
        if (buf && !into)
            ftc_mem_prefault(buf, h->total); /* the DATA lands page by page otherwise */
        incoming_t *in = buf ? incoming_new(r, p, h) : NULL;
        if (!in) {
            if (!into)
                free(buf);
            drain_put(r, p, h);
            xfer_fail(x, FTC_ENOMEM, "fetch of owner %u from peer %u: cannot allocate %llu "
                      "bytes", h->owner, p->node, (unsigned long long)h->total);
            xfer_finish(r, x);
            return;
        }
        x->buf = buf;
        in->dst = buf;
        in->fx = x;
        x->in = in;
    }
    const char *why;
    int rc = incoming_post(r, p, x->in, h, &why);
    if (rc == 0)
        x->in->next_off = h->offset + h->length;
    if (rc < 0 && !r->broken) {
        drain_put(r, p, h);
        xfer_abort(r, x, rc, why);
    }
}

static void on_put_end(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    incoming_t *in = NULL;
    if (h->flags & FTC__F_FETCH) {
        xfer_t *x = fetch_find(r, p->node, h->owner);
        in = x ? x->in : NULL;
    } else {
        store_t *s = store_get(r, h->owner, false);
        in = s ? s->in : NULL;
    }
    /* a fetch's answer ends once all its PUTs came: else it is an earlier
     * fetch's answer ending */
    if (!in || in->node != p->node || in->step != h->step || in->total != h->total ||
        in->req != h->req || (in->fx && in->next_off != in->total)) {
        refused(r, "PUT_END of owner %u step %llu from node %u matches no transfer", h->owner,
                (unsigned long long)h->step, p->node);
        if (!(h->flags & FTC__F_FETCH))
            send_nack(r, p, h->owner, h->step, h->req, 0, FTC_EPROTO,
                      "PUT_END of step %llu without its PUTs (superseded or timed out here)",
                      (unsigned long long)h->step);
        return;
    }
    in->end_seen = true;
    in->head_xxh3 = h->payload_xxh3;
    in->last_ns = ftc_now_ns();
}

static int serve_start(ftc_repl_t *r, peer_t *p, store_t *s, int slot, uint64_t size,
                       uint32_t req);
static int serve_start_buf(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *get, uint8_t *buf,
                           uint64_t size);

/* The slot of s that holds step (UINT64_MAX: the newest), or -1. Besides the
 * newest complete replica, the other slot still holds the one before it
 * until a new push starts writing there: a committed version whose successor
 * completed here but never committed (its other ranks failed first) is still
 * served from it (I2). */
static int held_slot(store_t *s, uint64_t step, uint64_t *size)
{
    if (!s || s->complete < 0)
        return -1;
    if (step == UINT64_MAX || step == s->step) {
        *size = s->size;
        return s->complete;
    }
    /* only a replica this store holds (held[]): a push refused after its
     * bytes landed (a bad checksum) or abandoned midway leaves a shard in
     * the slot whose head and footer may open fine, but it is no replica */
    int o = 1 - s->complete;
    if (!s->slot[o].base || !s->held[o] || s->sstep[o] != step || s->ssize[o] > s->slot[o].size ||
        (s->in && s->in->slot == o))
        return -1;
    *size = s->ssize[o];
    return o;
}

/* ftc_repl_serve_local: the agent's own slot of (owner, step), copied out so
 * the slot may be rewritten or removed while the copy is served (a torn copy
 * fails the fetcher's verification). 0 when a serve started. */
static int serve_local(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    int best = -1;
    uint64_t best_step = 0, best_size = 0;
    ftc_slot_t sl[2 * FTC_AP_SLOTS_PER_RANK]; /* the slots, then those of a previous layout */
    for (int i = 0; i < 2 * FTC_AP_SLOTS_PER_RANK; i++) {
        char name[FTC_SLOT_NAME_MAX];
        ftc_err_t e = {0};
        sl[i].base = NULL;
        int k = i % FTC_AP_SLOTS_PER_RANK;
        if ((i < FTC_AP_SLOTS_PER_RANK
                 ? ftc_slot_name(r->local_ns, h->owner, k, name, sizeof name, &e)
                 : ftc_slot_name_prev(r->local_ns, h->owner, k, name, sizeof name, &e)) ||
            ftc_slot_open(name, false, &sl[i], &e))
            continue;
        ftc_shard_view_t v;
        uint64_t total;
        if (ftc_shard_peek_size(sl[i].base, sl[i].size, &total, &e) < 0 || total > sl[i].size ||
            ftc_shard_open(&v, sl[i].base, total, 0, &e) < 0)
            continue;
        if ((h->step == UINT64_MAX && (best < 0 || v.info.step > best_step)) ||
            v.info.step == h->step) {
            best = i;
            best_step = v.info.step;
            best_size = total;
        }
    }
    int rc = -1;
    if (best >= 0) {
        uint8_t *copy = malloc(best_size ? best_size : 1);
        if (copy) {
            memcpy(copy, sl[best].base, best_size);
            rc = serve_start_buf(r, p, h, copy, best_size);
        }
    }
    for (int i = 0; i < 2 * FTC_AP_SLOTS_PER_RANK; i++)
        if (sl[i].base)
            ftc_slot_close(&sl[i]);
    return rc < 0 ? -1 : 0;
}

static void on_get(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h)
{
    store_t *s = store_get(r, h->owner, true);
    uint64_t size = 0;
    int slot = held_slot(s, h->step, &size);
    if (slot < 0 && r->local_ns[0] && serve_local(r, p, h) == 0)
        return;
    if (slot < 0) {
        char have[64] = "nothing";
        if (s && s->complete >= 0)
            snprintf(have, sizeof have, "step %llu", (unsigned long long)s->step);
        char want[32] = "newest";
        if (h->step != UINT64_MAX)
            snprintf(want, sizeof want, "%llu", (unsigned long long)h->step);
        send_nack(r, p, h->owner, h->step, h->req, FTC__F_FETCH, FTC_ENOENT,
                  "not held: owner %u step %s (node %u holds %s)", h->owner, want, r->self, have);
        return;
    }
    int rc = serve_start(r, p, s, slot, size, h->req);
    if (rc < 0)
        send_nack(r, p, h->owner, h->step, h->req, FTC__F_FETCH, rc, "cannot serve owner %u: %s",
                  h->owner, r->err.msg);
}

static void on_reply(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *h, const uint8_t *payload)
{
    char reason[FTC__REASON_MAX + 1] = "";
    if (h->type == FTC_MSG_NACK)
        clean_text(reason, sizeof reason, payload, h->length);
    int code = -(int)(h->flags & FTC__F_CODE);
    if (code == 0 || code < FTC_ERANGE)
        code = FTC_EPROTO;
    if (h->flags & FTC__F_FETCH) {
        /* a fetch NACK echoes its GET's request id: one with another
         * answers an earlier fetch that gave up (even of the same step) */
        xfer_t *x = fetch_find(r, p->node, h->owner);
        if (!x || h->type != FTC_MSG_NACK || h->req != x->req) {
            refused(r, "unexpected fetch %s of owner %u step %llu from node %u (request %u%s)",
                    ftc_wire_type_name(h->type), h->owner, (unsigned long long)h->step,
                    p->node, h->req, x && h->req != x->req ? ": an earlier fetch's" : "");
            return;
        }
        xfer_fail(x, code, "fetch of owner %u from peer %u: %s", h->owner, p->node, reason);
        xfer_abort(r, x, code, reason);
        return;
    }
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (!x || x->done || x->kind != XK_PUSH || x->owner != h->owner || x->step != h->step ||
            x->req != h->req) /* another request's: an earlier push that gave up */
            continue;
        for (int j = 0; j < x->ntp; j++) {
            tx_peer_t *tp = &x->tp[j];
            if (tp->node != p->node || tp->state == TP_OK || tp->state == TP_FAIL)
                continue;
            if (h->type == FTC_MSG_ACK) {
                if (tp->state != TP_END || h->total != x->size) {
                    refused(r, "ACK of owner %u step %llu from node %u before its PUT_END",
                            h->owner, (unsigned long long)h->step, p->node);
                    return;
                }
                tp->state = TP_OK;
                x->acked++;
            } else {
                /* outstanding chunk sends keep their place: the receiver
                 * drains them, so they complete and the peer settles */
                tp_fail(x, tp, code, "peer %u refused owner %u step %llu: %s", p->node,
                        h->owner, (unsigned long long)h->step, reason);
            }
            return;
        }
    }
    refused(r, "%s of owner %u step %llu from node %u (request %u) matches no push",
            ftc_wire_type_name(h->type), h->owner, (unsigned long long)h->step, p->node, h->req);
}

static void on_message(ftc_repl_t *r, peer_t *p, const uint8_t *buf, size_t len)
{
    ftc_wire_hdr_t h;
    ftc_err_t e = {0};
    int rc = ftc_wire_decode(&r->key, buf, len, &h, &e);
    if (rc < 0) {
        refused(r, "from the address of node %u: %s", p->node, e.msg);
        return;
    }
    if (h.sender != p->node) {
        refused(r, "from the address of node %u: header claims sender %u", p->node, h.sender);
        return;
    }
    if (p->seen && h.seq <= p->last_seq) {
        refused(r, "%s from node %u: seq %llu is not after %llu (replay?)",
                ftc_wire_type_name(h.type), p->node, (unsigned long long)h.seq,
                (unsigned long long)p->last_seq);
        return;
    }
    p->seen = true;
    p->last_seq = h.seq;
    if (h.type == FTC_MSG_NACK &&
        ftc_wire_check_payload(&h, buf + FTC_WIRE_HDR, len - FTC_WIRE_HDR, &e) < 0) {
        refused(r, "NACK from node %u: %s", p->node, e.msg);
        return;
    }
    if (h.generation < r->gen) {
        refused(r, "%s of owner %u from node %u: stale generation %llu (ours is %llu)",
                ftc_wire_type_name(h.type), h.owner, p->node, (unsigned long long)h.generation,
                (unsigned long long)r->gen);
        if (h.type == FTC_MSG_PUT || h.type == FTC_MSG_PUT_END || h.type == FTC_MSG_GET) {
            drain_put(r, p, &h);
            if (h.type != FTC_MSG_PUT || h.offset == 0)
                send_nack(r, p, h.owner, h.step, h.req, h.type == FTC_MSG_GET ? FTC__F_FETCH : 0,
                          FTC_ESTALE, "stale generation %llu: node %u is at generation %llu",
                          (unsigned long long)h.generation, r->self,
                          (unsigned long long)r->gen);
        }
        return;
    }
    /* An authenticated peer is at a newer generation: move to it (as a
     * Lamport clock), so our answers (ACKs) are not refused as stale by it
     * while our own supervisor has not told us yet. Older peers stay fenced. */
    if (h.generation > r->gen)
        r->gen = h.generation;
    switch (h.type) {
    case FTC_MSG_PUT:
        if (len != FTC_WIRE_HDR) {
            refused(r, "PUT from node %u with an inline payload", p->node);
            return;
        }
        if (h.flags & FTC__F_FETCH)
            on_fetch_put(r, p, &h);
        else
            on_push_put(r, p, &h);
        break;
    case FTC_MSG_PUT_END:
        on_put_end(r, p, &h);
        break;
    case FTC_MSG_GET:
        on_get(r, p, &h);
        break;
    case FTC_MSG_ACK:
    case FTC_MSG_NACK:
        on_reply(r, p, &h, buf + FTC_WIRE_HDR);
        break;
    default: /* HELLO: nothing to do */
        break;
    }
}

/* Posts the peer's free header receives in ring order after the posted
 * ones, as many as the endpoint takes now: the rest (FTC_EAGAIN) on a later
 * call. 0 or an error. */
static int rx_fill(ftc_repl_t *r, peer_t *p)
{
    while (p->posted < r->rx_per_peer) {
        int i = (p->head + p->posted) % r->rx_per_peer;
        int rc = ftc_fabric_irecv_try(r->fab, &p->rx[i].req, p->fa, tag_hdr(p->node), 0,
                                      p->rx[i].buf, sizeof p->rx[i].buf);
        if (rc == FTC_EAGAIN)
            return 0;
        if (rc < 0)
            return rc;
        p->posted++;
    }
    return 0;
}

/* Processes the peer's completed header receives in post order, then
 * reposts them. */
static int pump_rx(ftc_repl_t *r, peer_t *p)
{
    int ev = 0;
    while (p->used && !r->broken && p->posted > 0) {
        rx_hdr_t *e = &p->rx[p->head];
        if (e->req.state != FTC_FABRIC_REQ_DONE)
            break;
        int st = e->req.status;
        if (st == 0)
            on_message(r, p, e->buf, e->req.len);
        else
            refused(r, "header receive from node %u failed: %s", p->node, ftc_strerror(st));
        if (!p->used || r->broken) /* the handler cannot remove a peer, but stay safe */
            break;
        p->head = (p->head + 1) % r->rx_per_peer;
        p->posted--;
        ev++;
    }
    if (p->used && !r->broken && p->posted < r->rx_per_peer && rx_fill(r, p) < 0 &&
        ftc_fabric_health(r->fab) == FTC_EFABRIC)
        mark_broken(r);
    return ev;
}

/* ---- outgoing transfers ---------------------------------------------------------- */

/* The endpoint could not take a post to tp's peer now: try again later. */
static void tp_blocked(tx_peer_t *tp)
{
    tp->blocked = true;
    tp->next_try_ns = retry_later();
}

/* Posts chunk c's DATA (its header is out). 0, FTC_EAGAIN (c stays dwait)
 * or an error. */
static int tp_post_data(ftc_repl_t *r, xfer_t *x, tx_peer_t *tp, tx_chunk_t *c, peer_t *p)
{
    int rc = ftc_fabric_isend_try(r->fab, &c->dreq, p->fa, tag_data(r->self, c->dseq),
                                  x->src + c->doff, c->len);
    if (rc == FTC_EAGAIN) {
        tp_blocked(tp);
        return rc;
    }
    c->dwait = false;
    if (rc < 0) {
        c->dreq.status = rc; /* not the previous chunk's DONE: nothing was sent */
        return ftc_err_set(&r->err, rc, "%s", ftc_fabric_errmsg(r->fab));
    }
    tp->blocked = false;
    return 0;
}

/* Posts the next chunk (PUT header, then its DATA) into c. FTC_EAGAIN when
 * the header could not be posted now (nothing changed; the seq it took is
 * skipped, which the receiver allows). Once the header is out the chunk is
 * busy: a DATA that gets FTC_EAGAIN is posted by a later pump_tp (never the
 * header again), and a DATA that fails leaves the chunk busy until its header
 * send completes (its buffer is c->hbuf). */
static int tp_post_chunk(ftc_repl_t *r, xfer_t *x, tx_peer_t *tp, tx_chunk_t *c, peer_t *p)
{
    uint64_t len = x->size - tp->next_off;
    if (len > r->chunk)
        len = r->chunk;
    ftc_wire_hdr_t h;
    hdr_init(r, &h, FTC_MSG_PUT, x->owner, x->step);
    h.flags = x->kind == XK_SERVE ? FTC__F_FETCH : 0;
    h.keep = x->kind == XK_PUSH ? x->keep : 0;
    h.req = x->req;
    h.offset = tp->next_off;
    h.length = len;
    h.total = x->size;
    ftc_err_t e = {0};
    int rc = ftc_wire_encode(&r->key, &h, c->hbuf, &e);
    if (rc < 0)
        return ftc_err_set(&r->err, rc, "%s", e.msg);
    rc = ftc_fabric_isend_try(r->fab, &c->hreq, p->fa, tag_hdr(r->self), c->hbuf, FTC_WIRE_HDR);
    if (rc == FTC_EAGAIN) {
        tp_blocked(tp);
        return rc;
    }
    if (rc < 0)
        return ftc_err_set(&r->err, rc, "%s", ftc_fabric_errmsg(r->fab));
    tp->blocked = false;
    c->len = len;
    c->doff = tp->next_off;
    c->dseq = h.seq;
    c->busy = true;
    c->dwait = true;
    tp->inflight++;
    tp->next_off += len;
    rc = tp_post_data(r, x, tp, c, p);
    return rc == FTC_EAGAIN ? 0 : rc;
}

static int pump_tp(ftc_repl_t *r, xfer_t *x, tx_peer_t *tp)
{
    int ev = 0;
    peer_t *p = peer_find(r, tp->node);
    /* DATA whose header is out, held back by FTC_EAGAIN: post it first, also
     * after the peer failed (a receiver that refused the PUT drains it) */
    for (int i = 0; p && i < r->window && retry_due(tp->next_try_ns); i++) {
        tx_chunk_t *c = &tp->ch[i];
        if (!c->dwait)
            continue;
        int rc = tp_post_data(r, x, tp, c, p);
        if (rc == FTC_EAGAIN)
            break;
        ev++;
        if (rc < 0) {
            if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
                mark_broken(r);
            tp_fail(x, tp, rc, "peer %u, owner %u step %llu at offset %llu: %s", tp->node,
                    x->owner, (unsigned long long)x->step, (unsigned long long)c->doff,
                    r->err.msg);
            if (r->broken)
                return ev;
        }
    }
    for (int i = 0; i < r->window; i++) {
        tx_chunk_t *c = &tp->ch[i];
        if (!c->busy || c->dwait || pending(&c->hreq) || pending(&c->dreq))
            continue;
        c->busy = false;
        tp->inflight--;
        ev++;
        int st = c->hreq.status ? c->hreq.status : c->dreq.status;
        if (st == 0)
            r->ctr.bytes_sent += c->len;
        else if (st == FTC_ECANCELED) /* not by us: rxm flushes sends of a lost connection */
            tp_fail(x, tp, FTC_EFABRIC, "peer %u, owner %u step %llu: the provider cancelled a "
                    "send at offset %llu (connection lost: peer dead?)", tp->node, x->owner,
                    (unsigned long long)x->step, (unsigned long long)c->doff);
        else
            tp_fail(x, tp, st, "peer %u, owner %u step %llu: send failed: %s", tp->node,
                    x->owner, (unsigned long long)x->step, ftc_strerror(st));
    }
    if (tp->state != TP_SEND)
        return ev;
    if (!p) {
        tp_fail(x, tp, FTC_ECANCELED, "peer %u removed", tp->node);
        return ev;
    }
    if (!retry_due(tp->next_try_ns)) /* blocked a moment ago: the others go first */
        return ev;
    for (int i = 0; i < r->window && tp->next_off < x->size; i++) {
        tx_chunk_t *c = &tp->ch[i];
        if (c->busy)
            continue;
        int rc = tp_post_chunk(r, x, tp, c, p);
        if (rc == FTC_EAGAIN)
            return ev;
        if (rc < 0) {
            if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
                mark_broken(r);
            tp_fail(x, tp, rc, "peer %u, owner %u step %llu at offset %llu: %s", tp->node,
                    x->owner, (unsigned long long)x->step, (unsigned long long)tp->next_off,
                    r->err.msg);
            return ev;
        }
        ev++;
    }
    if (tp->next_off == x->size && tp->inflight == 0) {
        ftc_wire_hdr_t h;
        hdr_init(r, &h, FTC_MSG_PUT_END, x->owner, x->step);
        h.flags = x->kind == XK_SERVE ? FTC__F_FETCH : 0;
        h.req = x->req;
        h.total = x->size;
        h.payload_xxh3 = x->head_xxh3;
        ftc_err_t e = {0};
        int rc = ftc_wire_encode(&r->key, &h, tp->ebuf, &e);
        if (rc == 0)
            rc = ftc_fabric_isend_try(r->fab, &tp->ereq, p->fa, tag_hdr(r->self), tp->ebuf,
                                      FTC_WIRE_HDR);
        if (rc == FTC_EAGAIN) { /* again on a later pump, with a fresh seq */
            tp_blocked(tp);
            return ev;
        }
        if (rc < 0) {
            if (ftc_fabric_health(r->fab) == FTC_EFABRIC)
                mark_broken(r);
            tp_fail(x, tp, rc, "peer %u, owner %u step %llu: PUT_END: %s", tp->node, x->owner,
                    (unsigned long long)x->step, e.code ? e.msg : ftc_fabric_errmsg(r->fab));
            return ev;
        }
        tp->blocked = false;
        tp->state = TP_END;
        ev++;
    }
    return ev;
}

static bool tp_settled(const tx_peer_t *tp)
{
    return tp->inflight == 0 && !pending(&tp->ereq);
}

static int pump_xfers(ftc_repl_t *r)
{
    int ev = 0;
    for (int i = 0; i < r->nxf && !r->broken; i++) {
        xfer_t *x = r->xf[i];
        if (!x || x->done)
            continue;
        if (ftc_deadline_expired(x->d)) {
            xfer_abort(r, x, FTC_ETIMEDOUT,
                       x->kind == XK_FETCH ? "deadline passed" : "no ACK by the deadline");
            ev++;
        } else if (x->kind != XK_FETCH) {
            bool all = true;
            for (int j = 0; j < x->ntp; j++) {
                tx_peer_t *tp = &x->tp[j];
                ev += pump_tp(r, x, tp);
                if (x->kind == XK_SERVE && tp->state == TP_END && !pending(&tp->ereq)) {
                    if (tp->ereq.status == 0) {
                        tp->state = TP_OK;
                        x->acked++;
                    } else {
                        tp_fail(x, tp, tp->ereq.status, "serve to %u: PUT_END failed", tp->node);
                    }
                }
                if (!((tp->state == TP_OK || tp->state == TP_FAIL) && tp_settled(tp)))
                    all = false;
            }
            if (all) {
                xfer_finish(r, x);
                ev++;
            }
        }
        if (x->done && x->kind == XK_SERVE) {
            if (x->rc || x->failed)
                FTC_WARN("repl", "node %u: serving owner %u step %llu failed: %s", r->self,
                         x->owner, (unsigned long long)x->step, x->detail);
            xfer_free(r, x);
            r->xf[i] = NULL;
        }
    }
    return ev;
}

static int xfer_new(ftc_repl_t *r, int kind, int ntp, xfer_t **out)
{
    int id = -1;
    for (int i = 0; i < r->nxf; i++)
        if (!r->xf[i]) {
            id = i;
            break;
        }
    if (id < 0) {
        xfer_t **nx = realloc(r->xf, (size_t)(r->nxf + 8) * sizeof *nx);
        if (!nx)
            return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory for a transfer");
        memset(nx + r->nxf, 0, 8 * sizeof *nx);
        r->xf = nx;
        id = r->nxf;
        r->nxf += 8;
    }
    xfer_t *x = calloc(1, sizeof *x);
    if (!x)
        return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory for a transfer");
    x->kind = kind;
    x->ntp = ntp;
    if (ntp) {
        x->tp = calloc((size_t)ntp, sizeof *x->tp);
        for (int i = 0; x->tp && i < ntp; i++) {
            x->tp[i].state = TP_SEND;
            x->tp[i].ch = calloc((size_t)r->window, sizeof(tx_chunk_t));
            if (!x->tp[i].ch) {
                x->ntp = i;
                xfer_free(r, x);
                return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory for a transfer");
            }
        }
        if (!x->tp) {
            free(x);
            return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory for a transfer");
        }
    }
    r->xf[id] = x;
    *out = x;
    return id;
}

static void xfer_free(ftc_repl_t *r, xfer_t *x)
{
    if (!x)
        return;
    if (!x->done)
        xfer_abort(r, x, FTC_ECANCELED, "released before it finished");
    if (x->pin)
        x->pin->serving[x->pin_slot]--;
    for (int i = 0; x->tp && i < x->ntp; i++)
        free(x->tp[i].ch);
    free(x->tp);
    if (x->in)
        incoming_free(r, x->in, IN_CANCEL);
    if (x->buf != x->dst)
        free(x->buf);
    free(x);
}

static int serve_start(ftc_repl_t *r, peer_t *p, store_t *s, int slot, uint64_t size,
                       uint32_t req)
{
    xfer_t *x = NULL;
    int id = xfer_new(r, XK_SERVE, 1, &x);
    if (id < 0)
        return id;
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    const uint8_t *src = s->slot[slot].base;
    if (ftc_shard_open(&v, src, size, 0, &e) < 0) {
        r->xf[id] = NULL;
        x->done = true;
        xfer_free(r, x);
        return ftc_err_set(&r->err, FTC_ECORRUPT, "held replica no longer opens: %s", e.msg);
    }
    x->owner = s->owner;
    x->req = req;
    x->step = v.info.step;
    x->src = src;
    x->size = size;
    x->head_xxh3 = v.head_xxh3;
    x->d = ftc_deadline_in_ms((uint64_t)r->serve_ms);
    x->tp[0].node = p->node;
    x->pin = s;
    x->pin_slot = slot;
    s->serving[slot]++;
    return 0;
}

/* Serves buf (malloc'd; owned by the transfer from here on, even on error)
 * in answer to GET get. */
static int serve_start_buf(ftc_repl_t *r, peer_t *p, const ftc_wire_hdr_t *get, uint8_t *buf,
                           uint64_t size)
{
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    if (ftc_shard_open(&v, buf, size, 0, &e) < 0) {
        free(buf);
        return ftc_err_set(&r->err, FTC_ECORRUPT, "local slot no longer opens: %s", e.msg);
    }
    xfer_t *x = NULL;
    int id = xfer_new(r, XK_SERVE, 1, &x);
    if (id < 0) {
        free(buf);
        return id;
    }
    x->owner = get->owner;
    x->req = get->req;
    x->step = v.info.step;
    x->buf = buf; /* freed with the transfer */
    x->src = buf;
    x->size = size;
    x->head_xxh3 = v.head_xxh3;
    x->d = ftc_deadline_in_ms((uint64_t)r->serve_ms);
    x->tp[0].node = p->node;
    return 0;
}

/* ---- public API ------------------------------------------------------------------ */

void ftc_repl_serve_local(ftc_repl_t *r, const char *ns)
{
    snprintf(r->local_ns, sizeof r->local_ns, "%s", ns ? ns : "");
}

ftc_repl_t *ftc_repl_create(const ftc_repl_options_t *o, ftc_err_t *err)
{
    if (!o || o->struct_size < offsetof(ftc_repl_options_t, rx_per_peer) + sizeof(int) ||
        o->version != 1) {
        ftc_err_set(err, FTC_EINVAL, "repl: options size/version not understood (use "
                    "FTC_REPL_OPTIONS_INIT)");
        return NULL;
    }
    int serve_ms = 60000;
    if (o->struct_size >= offsetof(ftc_repl_options_t, serve_timeout_ms) + sizeof(int))
        serve_ms = o->serve_timeout_ms;
    if (!o->fab || !o->job || !*o->job || strlen(o->job) > FTC_SHARD_JOB_MAX ||
        o->key.secret_len == 0 || o->chunk_bytes == 0 ||
        o->chunk_bytes > FTC_WIRE_MAX_PAYLOAD || o->window < 1 || o->window > 64 ||
        o->rx_per_peer < 1 || o->rx_per_peer > 64 || serve_ms < 1) {
        ftc_err_set(err, FTC_EINVAL,
                    "repl: bad options (fab and job required, job <= %d characters, key "
                    "initialised, chunk_bytes 1..%u, window 1..64, rx_per_peer 1..64, "
                    "serve_timeout_ms > 0)",
                    FTC_SHARD_JOB_MAX, FTC_WIRE_MAX_PAYLOAD);
        return NULL;
    }
    char name[FTC_SLOT_NAME_MAX];
    if (ftc_slot_name(o->job, 0, 0, name, sizeof name, err) < 0)
        return NULL;
    ftc_repl_t *r = calloc(1, sizeof *r);
    if (!r) {
        ftc_err_set(err, FTC_ENOMEM, "repl: out of memory");
        return NULL;
    }
    r->fab = o->fab;
    r->key = o->key;
    snprintf(r->job, sizeof r->job, "%s", o->job);
    r->self = o->self;
    r->gen = o->generation;
    r->chunk = o->chunk_bytes;
    r->window = o->window;
    r->rx_per_peer = o->rx_per_peer;
    r->serve_ms = serve_ms;
    /* a restarted agent must not reuse seqs its peers have seen: start from
     * the wall clock in microseconds */
    r->seq = ftc_wall_ms() * 1000u;
    r->req_ids = (uint32_t)r->seq; /* nor request ids, as far as it can help */
    return r;
}

void ftc_repl_destroy(ftc_repl_t *r)
{
    if (!r)
        return;
    /* Cancel everything still posted, a batch per bounded call (no
     * allocation: nothing is freed below while libfabric may hold it). */
    if (!r->broken) {
        cancel_batch_t b;
        b.n = 0;
        for (int i = 0; i < FTC_REPL_MAX_PEERS; i++)
            for (int j = 0; r->peers[i].used && j < r->rx_per_peer; j++)
                batch_add(r, &b, &r->peers[i].rx[j].req);
        for (outmsg_t *m = r->outbox; m; m = m->next)
            batch_add(r, &b, &m->req);
        for (drain_t *d = r->drains; d; d = d->next)
            batch_add(r, &b, &d->req);
        for (incoming_t *in = r->ins; in; in = in->next)
            for (chunk_rx_t *c = in->chunks; c; c = c->next)
                batch_add(r, &b, &c->req);
        for (int i = 0; i < r->nxf; i++)
            for (int j = 0; r->xf[i] && j < r->xf[i]->ntp; j++)
                tp_pending(r, &r->xf[i]->tp[j], &b);
        batch_flush(r, &b);
    }
    r->broken = true; /* no fabric call from here on */
    for (int i = 0; i < r->nxf; i++)
        if (r->xf[i]) {
            r->xf[i]->done = true;
            xfer_free(r, r->xf[i]);
        }
    free(r->xf);
    while (r->ins)
        incoming_free(r, r->ins, IN_KEEP);
    while (r->outbox) {
        outmsg_t *m = r->outbox;
        r->outbox = m->next;
        free(m);
    }
    while (r->drains) {
        drain_t *d = r->drains;
        r->drains = d->next;
        free(d->buf);
        free(d);
    }
    for (int i = 0; i < FTC_REPL_MAX_PEERS; i++)
        free(r->peers[i].rx);
    for (int i = 0; i < r->nstores; i++) {
        ftc_slot_close(&r->stores[i]->slot[0]);
        ftc_slot_close(&r->stores[i]->slot[1]);
        free(r->stores[i]);
    }
    free(r->stores);
    free(r);
}

const char *ftc_repl_errstr(const ftc_repl_t *r)
{
    return r ? ftc_err_str(&r->err) : "no engine";
}

void ftc_repl_set_generation(ftc_repl_t *r, uint64_t gen)
{
    if (gen > r->gen) /* never backwards: a peer may have told us a newer one */
        r->gen = gen;
}

int ftc_repl_peer_add(ftc_repl_t *r, uint32_t node, const void *addr, size_t len)
{
    if (r->broken)
        return ftc_err_set(&r->err, FTC_EFABRIC, "repl: endpoint broken; cannot add node %u",
                           node);
    if (node == r->self || peer_find(r, node))
        return ftc_err_set(&r->err, FTC_EEXIST, "repl: node %u is %s", node,
                           node == r->self ? "this agent" : "already a peer");
    peer_t *p = NULL;
    for (int i = 0; i < FTC_REPL_MAX_PEERS && !p; i++)
        if (!r->peers[i].used)
            p = &r->peers[i];
    if (!p)
        return ftc_err_set(&r->err, FTC_ERANGE, "repl: more than %d peers (adding node %u)",
                           FTC_REPL_MAX_PEERS, node);
    memset(p, 0, sizeof *p);
    p->rx = calloc((size_t)r->rx_per_peer, sizeof *p->rx);
    if (!p->rx)
        return ftc_err_set(&r->err, FTC_ENOMEM, "repl: out of memory adding node %u", node);
    int rc = ftc_fabric_peer_add(r->fab, addr, len, &p->fa);
    if (rc < 0) {
        free(p->rx);
        p->rx = NULL;
        return ftc_err_set(&r->err, rc, "repl: adding node %u: %s", node,
                           ftc_fabric_errmsg(r->fab));
    }
    p->node = node;
    p->used = true;
    rc = rx_fill(r, p); /* what the endpoint cannot take now, pump_rx posts later */
    if (rc < 0) {
        ftc_err_set(&r->err, rc, "repl: posting receives for node %u: %s", node,
                    ftc_fabric_errmsg(r->fab));
        ftc_repl_peer_remove(r, node);
        return rc;
    }
    return 0;
}

int ftc_repl_peer_remove(ftc_repl_t *r, uint32_t node)
{
    peer_t *p = peer_find(r, node);
    if (!p)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: node %u is not a peer", node);
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (!x || x->done)
            continue;
        bool hit = x->kind == XK_FETCH ? x->fpeer == node : false;
        for (int j = 0; j < x->ntp; j++)
            if (x->tp[j].node == node && x->tp[j].state != TP_OK) {
                /* a failed peer too: a DATA held back (dwait) would only be
                 * retried while the peer exists, keeping the push open */
                cancel_batch_t b;
                b.n = 0;
                tp_pending(r, &x->tp[j], &b);
                batch_flush(r, &b);
                x->tp[j].inflight = 0;
                for (int c = 0; c < r->window; c++)
                    x->tp[j].ch[c].busy = x->tp[j].ch[c].dwait = false;
                if (x->tp[j].state != TP_FAIL)
                    tp_fail(x, &x->tp[j], FTC_ECANCELED, "peer %u removed during the transfer "
                            "of owner %u step %llu", node, x->owner, (unsigned long long)x->step);
            }
        if (hit)
            xfer_abort(r, x, FTC_ECANCELED, "peer removed");
    }
    for (incoming_t *in = r->ins, *next; in; in = next) {
        next = in->next;
        if (in->node == node && !in->fx)
            incoming_free(r, in, IN_CANCEL);
    }
    for (drain_t **pd = &r->drains; *pd;) { /* its drains: nothing more comes from it */
        drain_t *d = *pd;
        if (d->node == node)
            cancel_one(r, &d->req);
        if (d->node != node || pending(&d->req)) { /* pending: broken, freed by destroy */
            pd = &d->next;
            continue;
        }
        *pd = d->next;
        free(d->buf);
        free(d);
        r->ndrains--;
    }
    ftc_fabric_req_t *reqs[64];
    size_t n = 0;
    for (int j = 0; j < r->rx_per_peer; j++)
        if (pending(&p->rx[j].req))
            reqs[n++] = &p->rx[j].req;
    cancel_reqs(r, reqs, n);
    if (!r->broken)
        (void)ftc_fabric_peer_remove(r->fab, p->fa);
    free(p->rx);
    memset(p, 0, sizeof *p);
    return 0;
}

static bool push_active(ftc_repl_t *r, uint32_t owner, uint32_t node)
{
    for (int i = 0; i < r->nxf; i++) {
        xfer_t *x = r->xf[i];
        if (!x || x->done || x->kind != XK_PUSH || x->owner != owner)
            continue;
        for (int j = 0; j < x->ntp; j++)
            if (x->tp[j].node == node)
                return true;
    }
    return false;
}

int ftc_repl_push(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t *shard,
                  uint64_t size, const uint32_t *peers, int npeers, ftc_deadline_t d,
                  ftc_repl_xfer_t *xid)
{
    return ftc_repl_push_keep(r, owner, step, shard, size, peers, npeers, -1, d, xid);
}

int ftc_repl_push_keep(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t *shard,
                       uint64_t size, const uint32_t *peers, int npeers, int64_t committed,
                       ftc_deadline_t d, ftc_repl_xfer_t *xid)
{
    if (r->broken)
        return ftc_err_set(&r->err, FTC_EFABRIC, "repl: endpoint broken; push of owner %u "
                           "refused", owner);
    if (!shard || !peers || npeers < 1 || npeers > FTC_REPL_MAX_PEERS || !xid)
        return ftc_err_set(&r->err, FTC_EINVAL, "repl: push of owner %u step %llu: bad "
                           "arguments (%d peers)", owner, (unsigned long long)step, npeers);
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    if (ftc_shard_open(&v, shard, size, 0, &e) < 0)
        return ftc_err_set(&r->err, e.code, "repl: push of owner %u step %llu: not a sealed "
                           "shard: %s", owner, (unsigned long long)step, e.msg);
    if (v.info.step != step)
        return ftc_err_set(&r->err, FTC_EINVAL, "repl: push of owner %u step %llu: the shard "
                           "is of step %llu", owner, (unsigned long long)step,
                           (unsigned long long)v.info.step);
    for (int i = 0; i < npeers; i++) {
        if (!peer_find(r, peers[i]))
            return ftc_err_set(&r->err, FTC_ENOENT, "repl: push of owner %u: node %u is not a "
                               "peer", owner, peers[i]);
        for (int j = 0; j < i; j++)
            if (peers[j] == peers[i])
                return ftc_err_set(&r->err, FTC_EINVAL, "repl: push of owner %u: node %u "
                                   "listed twice", owner, peers[i]);
        if (push_active(r, owner, peers[i]))
            return ftc_err_set(&r->err, FTC_EINPROGRESS, "repl: owner %u is already being "
                               "pushed to node %u", owner, peers[i]);
    }
    xfer_t *x = NULL;
    int id = xfer_new(r, XK_PUSH, npeers, &x);
    if (id < 0)
        return id;
    x->owner = owner;
    x->step = step;
    x->src = shard;
    x->size = size;
    x->head_xxh3 = v.head_xxh3;
    x->keep = committed >= 0 ? (uint64_t)committed + 1 : 0;
    x->req = req_new(r);
    x->d = d;
    for (int i = 0; i < npeers; i++)
        x->tp[i].node = peers[i];
    *xid = id;
    return 0;
}

int ftc_repl_fetch(ftc_repl_t *r, uint32_t peer, uint32_t owner, uint64_t step,
                   ftc_deadline_t d, ftc_repl_xfer_t *xid)
{
    return ftc_repl_fetch_into(r, peer, owner, step, NULL, 0, d, xid);
}

int ftc_repl_fetch_into(ftc_repl_t *r, uint32_t peer, uint32_t owner, uint64_t step,
                        uint8_t *dst, uint64_t cap, ftc_deadline_t d, ftc_repl_xfer_t *xid)
{
    if (r->broken)
        return ftc_err_set(&r->err, FTC_EFABRIC, "repl: endpoint broken; fetch refused");
    peer_t *p = peer_find(r, peer);
    if (!p || !xid)
        return ftc_err_set(&r->err, p ? FTC_EINVAL : FTC_ENOENT, "repl: fetch of owner %u: "
                           "node %u is not a peer", owner, peer);
    if (fetch_find(r, peer, owner))
        return ftc_err_set(&r->err, FTC_EINPROGRESS, "repl: owner %u is already being fetched "
                           "from node %u", owner, peer);
    xfer_t *x = NULL;
    int id = xfer_new(r, XK_FETCH, 0, &x);
    if (id < 0)
        return id;
    x->owner = owner;
    x->step = step;
    x->fpeer = peer;
    x->d = d;
    x->dst = dst;
    x->dst_cap = dst ? cap : 0;
    ftc_wire_hdr_t h;
    hdr_init(r, &h, FTC_MSG_GET, owner, step);
    x->req = req_new(r);
    h.req = x->req;
    int rc = send_ctl(r, p, &h, NULL, &x->get_id);
    if (rc < 0) {
        r->xf[id] = NULL;
        x->done = true;
        xfer_free(r, x);
        return ftc_err_set(&r->err, rc, "repl: fetch of owner %u from node %u: GET not sent: %s",
                           owner, peer, ftc_fabric_errmsg(r->fab));
    }
    *xid = id;
    return 0;
}

/* One pending request, to drive the completion queue with ftc_fabric_test. */
static ftc_fabric_req_t *any_pending(ftc_repl_t *r)
{
    for (int i = 0; i < FTC_REPL_MAX_PEERS; i++)
        if (r->peers[i].used && pending(&r->peers[i].rx[r->peers[i].head].req))
            return &r->peers[i].rx[r->peers[i].head].req;
    for (int i = 0; i < FTC_REPL_MAX_PEERS; i++)
        for (int j = 0; r->peers[i].used && j < r->rx_per_peer; j++)
            if (pending(&r->peers[i].rx[j].req))
                return &r->peers[i].rx[j].req;
    for (outmsg_t *m = r->outbox; m; m = m->next)
        if (pending(&m->req))
            return &m->req;
    return NULL;
}

/* Nothing in flight: no transfer (push, fetch or serve) unfinished, no
 * incoming shard, no control message or drain pending. */
static bool engine_idle(const ftc_repl_t *r)
{
    if (r->ins || r->outbox || r->drains)
        return false;
    for (int i = 0; i < r->nxf; i++)
        if (r->xf[i] && !r->xf[i]->done)
            return false;
    return true;
}

int ftc_repl_progress(ftc_repl_t *r, ftc_deadline_t d, bool return_early)
{
    r->finished_now = 0;
    int spins = 0;
    if (!r->moved_ns)
        r->moved_ns = ftc_now_ns();
    for (;;) {
        if (r->broken)
            return FTC_EFABRIC;
        ftc_fabric_req_t *q = any_pending(r);
        if (q && ftc_fabric_test(r->fab, q) < 0 && ftc_fabric_health(r->fab) == FTC_EFABRIC) {
            mark_broken(r);
            return FTC_EFABRIC;
        }
        int ev = 0;
        for (int i = 0; i < FTC_REPL_MAX_PEERS && !r->broken; i++)
            if (r->peers[i].used)
                ev += pump_rx(r, &r->peers[i]);
        if (!r->broken)
            ev += pump_incoming(r);
        if (!r->broken)
            ev += pump_xfers(r);
        ev += pump_outbox(r);
        ev += pump_drains(r);
        if (r->broken)
            return FTC_EFABRIC;
        if (return_early && r->finished_now)
            return 0;
        if (ftc_deadline_expired(d))
            return 0;
        if (ev) {
            spins = 0;
            r->moved_ns = ftc_now_ns();
        } else if (engine_idle(r)) {
            r->moved_ns = ftc_now_ns(); /* (quiet counts from the next transfer's start) */
            ftc_sleep_us(FTC__IDLE_SLEEP_US);
        } else if (++spins >= FTC__SPINS) {
            spins = 0;
            if (ftc_now_ns() - r->moved_ns >= FTC__QUIET_NAP_NS) {
                r->ctr.quiet_naps++;
                ftc_sleep_us(FTC__IDLE_SLEEP_US);
            } else {
                sched_yield();
            }
        }
    }
}

int ftc_repl_status(ftc_repl_t *r, ftc_repl_xfer_t x, ftc_repl_status_t *st)
{
    if (x < 0 || x >= r->nxf || !r->xf[x] || r->xf[x]->kind == XK_SERVE)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: no transfer %d", x);
    xfer_t *t = r->xf[x];
    memset(st, 0, sizeof *st);
    st->done = t->done;
    st->rc = t->rc;
    st->acked = t->acked;
    st->failed = t->failed;
    snprintf(st->detail, sizeof st->detail, "%s", t->detail);
    return 0;
}

int ftc_repl_take(ftc_repl_t *r, ftc_repl_xfer_t x, uint8_t **shard, uint64_t *size)
{
    if (x < 0 || x >= r->nxf || !r->xf[x] || r->xf[x]->kind != XK_FETCH)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: no fetch %d", x);
    xfer_t *t = r->xf[x];
    if (!t->done)
        return ftc_err_set(&r->err, FTC_EINPROGRESS, "repl: fetch %d is not finished", x);
    if (t->rc < 0)
        return ftc_err_set(&r->err, t->rc, "repl: fetch %d failed: %s", x, t->detail);
    if (!t->buf)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: fetch %d was already taken", x);
    *shard = t->buf;
    *size = t->size;
    t->buf = NULL;
    return 0;
}

void ftc_repl_release(ftc_repl_t *r, ftc_repl_xfer_t x)
{
    if (!r || x < 0 || x >= r->nxf || !r->xf[x] || r->xf[x]->kind == XK_SERVE)
        return;
    xfer_free(r, r->xf[x]);
    r->xf[x] = NULL;
}

int ftc_repl_held(ftc_repl_t *r, uint32_t owner, uint64_t *step, const uint8_t **shard,
                  uint64_t *size)
{
    store_t *s = store_get(r, owner, true);
    if (!s || s->complete < 0)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: node %u holds no replica of owner %u",
                           r->self, owner);
    *step = s->step;
    *shard = s->slot[s->complete].base;
    *size = s->size;
    return 0;
}

int ftc_repl_held_step(ftc_repl_t *r, uint32_t owner, uint64_t step, const uint8_t **shard,
                       uint64_t *size)
{
    store_t *s = store_get(r, owner, true);
    int slot = held_slot(s, step, size);
    if (slot < 0)
        return ftc_err_set(&r->err, FTC_ENOENT, "repl: node %u holds no replica of owner %u "
                           "step %llu", r->self, owner, (unsigned long long)step);
    *shard = s->slot[slot].base;
    return 0;
}

void ftc_repl_counters(ftc_repl_t *r, ftc_repl_counters_t *c)
{
    *c = r->ctr;
}
