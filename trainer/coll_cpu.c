/*
 * coll_cpu.c — the CPU collectives backend of trainer/coll.h over the
 * libfabric transport (core/fabric.h).
 *
 * Algorithms (n ranks, buffer split into chunks as ftc_coll_chunk says):
 *   - reduce_scatter: every rank sends chunk p of its buffer to rank p and
 *     receives its own chunk from every peer (pieces of at most seg_bytes *
 *     window bytes, and at most the largest chunk, per peer at a time, into
 *     scratch of (n-1) x the piece this rank receives: a small call takes
 *     little scratch however many ranks), then sums each element in rank
 *     order x_0 + x_1 + ... + x_{n-1}. Same traffic per rank as a ring
 *     ((n-1)/n of the buffer in and out) but a fixed order for every element;
 *   - all_gather: a ring; at step s rank r sends chunk (r-s) mod n to r+1 and
 *     receives chunk (r-s-1) mod n from r-1;
 *   - all_reduce = reduce_scatter + all_gather;
 *   - broadcast = the root scatters chunk p to rank p, then all_gather;
 *   - barrier: dissemination, ceil(log2 n) rounds of one-byte tokens.
 * Every transfer is cut into messages of at most seg_bytes, `window` in
 * flight per transfer, each with its own tag (marker, op sequence number,
 * step, segment index), received with exact tags from a directed peer.
 *
 * Waiting: one loop progresses the fabric, reposts, and checks the deadline
 * and the abort flag; on failure it cancels what is outstanding (the fabric
 * bounds that by its cancel_timeout_ms) and names the peer and operation.
 */
#include "trainer/coll.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef __int128 coll_i128;
__extension__ typedef unsigned __int128 coll_u128;

#define TAG_MARK ((uint64_t)0xC << 60)
#define TAG_SEQ_BITS 20
#define TAG_STEP_BITS 12
#define TAG_SEG_BITS 28

typedef struct cpu {
    ftc_fabric_t *fab;
    ftc_fabric_peer_t *peers; /* by rank; own slot unused */
    size_t seg;
    int window;
    uint32_t seq;
    uint8_t *scratch;
    size_t scratch_cap;
    uint8_t *bounce; /* whole-segment rooms for receives' short last segments */
    size_t bounce_cap;
} cpu_t;

/* One transfer: a contiguous range to or from one peer, as segments. */
typedef struct xfer {
    int peer;       /* rank */
    int send;       /* 1 send, 0 recv */
    uint8_t *ptr;
    size_t len;
    uint64_t tag;   /* marker | seq | step; segment index added */
    size_t seg0;    /* index of the first segment in the tag */
    size_t nseg, posted, done;
    ftc_fabric_req_t *reqs; /* window requests */
    uint8_t *bounce; /* recv: room for a whole segment for a short last one */
} xfer_t;

static uint64_t mk_tag(uint32_t seq, unsigned step)
{
    return TAG_MARK |
           ((uint64_t)(seq & ((1u << TAG_SEQ_BITS) - 1)) << (TAG_STEP_BITS + TAG_SEG_BITS)) |
           ((uint64_t)(step & ((1u << TAG_STEP_BITS) - 1)) << TAG_SEG_BITS);
}

/* Gives every receive whose last segment is shorter than seg a room of a
 * whole segment for it (x[i].bounce), so that a longer message from a rank
 * that called with another count is received whole and refused by its
 * length, never truncated: libfabric 1.17's shm spins inside fi_cq_read,
 * past any deadline, truncating a message above its inline size. The rooms
 * are kept until destroy: after a failure the endpoint may still hold them. */
static int bounce_rooms(ftc_coll_t *c, xfer_t *x, int nx)
{
    cpu_t *p = c->impl;
    size_t nb = 0;
    for (int i = 0; i < nx; i++)
        nb += !x[i].send && x[i].len % p->seg;
    if (nb > p->bounce_cap / p->seg) {
        uint8_t *b = realloc(p->bounce, nb * p->seg);
        if (!b)
            return ftc_err_set(&c->err, FTC_ENOMEM, "coll rank %d: out of memory for %zu "
                               "receive rooms of %zu bytes", c->rank, nb, p->seg);
        p->bounce = b;
        p->bounce_cap = nb * p->seg;
    }
    nb = 0;
    for (int i = 0; i < nx; i++)
        x[i].bounce = !x[i].send && x[i].len % p->seg ? p->bounce + nb++ * p->seg : NULL;
    return 0;
}

/* Runs the transfers to completion, or fails (after cancelling) with the
 * peer and operation named in c->err. */
static int run(ftc_coll_t *c, xfer_t *x, int nx, const char *op, ftc_deadline_t dl)
{
    cpu_t *p = c->impl;
    const size_t W = (size_t)p->window;
    int total = 0;
    for (int i = 0; i < nx; i++) {
        x[i].nseg = x[i].len ? (x[i].len + p->seg - 1) / p->seg : 0;
        x[i].posted = x[i].done = 0;
        total += x[i].nseg > 0;
    }
    if (!total)
        return 0;
    int brc = bounce_rooms(c, x, nx);
    if (brc < 0)
        return brc;
    ftc_fabric_req_t *reqs = calloc((size_t)nx * W, sizeof *reqs);
    ftc_fabric_req_t **rp = calloc((size_t)nx * W, sizeof *rp);
    if (!reqs || !rp) {
        free(reqs);
        free(rp);
        return ftc_err_set(&c->err, FTC_ENOMEM, "coll %s rank %d: out of memory", op, c->rank);
    }
    for (int i = 0; i < nx; i++)
        x[i].reqs = reqs + (size_t)i * W;
    for (size_t i = 0; i < (size_t)nx * W; i++)
        rp[i] = &reqs[i];
    uint64_t t0 = ftc_now_ns();
    int rc = 0, bad = -1, spins = 0;
    const char *why = "";
    for (;;) {
        /* reap finished requests, then post into free slots */
        int active = 0, moved = 0;
        for (int i = 0; i < nx && !rc; i++) {
            xfer_t *t = &x[i];
            for (size_t s = 0; s < W; s++) {
                ftc_fabric_req_t *r = &t->reqs[s];
                if (r->state != FTC_FABRIC_REQ_DONE)
                    continue;
                if (r->status < 0) {
                    rc = r->status, bad = i, why = "completed with an error";
                    break;
                }
                if (!t->send) {
                    size_t segi = (size_t)(r->tag_out & ((1ull << TAG_SEG_BITS) - 1)) - t->seg0;
                    size_t off = segi * p->seg;
                    size_t want =
                        off < t->len ? (t->len - off < p->seg ? t->len - off : p->seg) : 0;
                    if (r->len != want) {
                        rc = FTC_EPROTO, bad = i;
                        why = "a message had the wrong length (ranks called with different "
                              "counts, dtypes or options?)";
                        break;
                    }
                    if (want < p->seg)
                        memcpy(t->ptr + off, t->bounce, want);
                }
                memset(r, 0, sizeof *r);
                t->done++;
                moved = 1;
            }
            while (!rc && t->posted < t->nseg) {
                ftc_fabric_req_t *r = &t->reqs[t->posted % W];
                if (r->state != FTC_FABRIC_REQ_IDLE)
                    break;
                size_t off = t->posted * p->seg;
                size_t n = t->len - off < p->seg ? t->len - off : p->seg;
                uint64_t tag =
                    t->tag | (uint64_t)((t->seg0 + t->posted) & ((1ull << TAG_SEG_BITS) - 1));
                /* a short last segment is received into a whole segment's room */
                int prc = t->send ? ftc_fabric_isend(p->fab, r, p->peers[t->peer], tag,
                                                     t->ptr + off, n, dl)
                          : n < p->seg ? ftc_fabric_irecv(p->fab, r, p->peers[t->peer], tag, 0,
                                                          t->bounce, p->seg, dl)
                                       : ftc_fabric_irecv(p->fab, r, p->peers[t->peer], tag, 0,
                                                          t->ptr + off, n, dl);
                if (prc < 0) {
                    rc = prc, bad = i, why = "could not be posted";
                    break;
                }
                t->posted++;
                moved = 1;
            }
            if (t->done < t->nseg)
                active = 1;
        }
        if (rc)
            break;
        if (!active)
            break;
        if (atomic_load(&c->aborted)) {
            rc = FTC_ECANCELED, why = "aborted";
            break;
        }
        if (ftc_deadline_expired(dl)) {
            rc = FTC_ETIMEDOUT, why = "deadline passed (peer dead, slow or not calling?)";
            break;
        }
        ftc_fabric_req_t *probe = NULL;
        for (size_t i = 0; i < (size_t)nx * W && !probe; i++)
            if (reqs[i].state == FTC_FABRIC_REQ_PENDING)
                probe = &reqs[i];
        if (probe) {
            int trc = ftc_fabric_test(p->fab, probe);
            if (trc < 0) {
                rc = trc, why = trc == FTC_ECANCELED ? "aborted" : "fabric failed";
                break;
            }
            if (trc > 0)
                moved = 1;
        }
        if (moved) {
            spins = 0;
        } else if (++spins >= 256) {
            spins = 0;
            sched_yield();
        }
    }
    if (rc) {
        /* name a peer: the failed transfer, else the first unfinished recv, else send */
        if (bad < 0)
            for (int i = 0; i < nx && bad < 0; i++)
                if (!x[i].send && x[i].done < x[i].nseg)
                    bad = i;
        if (bad < 0)
            for (int i = 0; i < nx && bad < 0; i++)
                if (x[i].done < x[i].nseg)
                    bad = i;
        int crc = ftc_fabric_cancel(p->fab, rp, (size_t)nx * W);
        const xfer_t *t = bad >= 0 ? &x[bad] : &x[0];
        ftc_err_set(&c->err, rc,
                    "coll %s rank %d/%d: %s %s rank %d (%zu of %zu segments done, op seq %u) "
                    "after %.0f ms: %s%s%s",
                    op, c->rank, c->size, t->send ? "send to" : "recv from",
                    "peer", t->peer, t->done, t->nseg, (unsigned)p->seq,
                    (double)(ftc_now_ns() - t0) / 1e6, why,
                    crc < 0 || ftc_fabric_health(p->fab) == FTC_EFABRIC
                        ? "; endpoint broken: "
                        : (rc == FTC_EFABRIC ? ": " : ""),
                    crc < 0 || rc == FTC_EFABRIC ? ftc_fabric_errmsg(p->fab) : "");
    }
    free(reqs);
    free(rp);
    return rc;
}

static int scratch(ftc_coll_t *c, size_t need)
{
    cpu_t *p = c->impl;
    if (need <= p->scratch_cap)
        return 0;
    uint8_t *s = realloc(p->scratch, need);
    if (!s)
        return ftc_err_set(&c->err, FTC_ENOMEM, "coll rank %d: out of memory for %zu bytes of "
                           "scratch", c->rank, need);
    p->scratch = s;
    p->scratch_cap = need;
    return 0;
}

/* dst[j] = srcs[0][j] + srcs[1][j] + ... in that order. dst may be a src.
 * Returns 1 if an i128 sum overflowed (its element is set to INT128_MIN,
 * a value no in-range sum can take). */
static int sum_ranks(ftc_coll_dtype_t dt, uint8_t *dst, uint8_t *const *srcs, int n, size_t cnt)
{
    if (dt == FTC_COLL_F32) {
        float *d = (float *)dst;
        const size_t B = 1024;
        float acc[1024];
        for (size_t b = 0; b < cnt; b += B) {
            size_t m = cnt - b < B ? cnt - b : B;
            const float *s0 = (const float *)srcs[0] + b;
            for (size_t j = 0; j < m; j++)
                acc[j] = s0[j];
            for (int q = 1; q < n; q++) {
                const float *sq = (const float *)srcs[q] + b;
                for (size_t j = 0; j < m; j++)
                    acc[j] += sq[j];
            }
            memcpy(d + b, acc, m * sizeof(float));
        }
        return 0;
    }
    /* i128: exact; the sentinel propagates */
    const coll_i128 MIN = (coll_i128)((coll_u128)1 << 127);
    int over = 0;
    for (size_t j = 0; j < cnt; j++) {
        coll_i128 s, v;
        memcpy(&s, srcs[0] + j * 16, 16);
        for (int q = 1; q < n; q++) {
            memcpy(&v, srcs[q] + j * 16, 16);
            if (s == MIN || v == MIN || __builtin_add_overflow(s, v, &s)) {
                s = MIN;
            }
        }
        over |= s == MIN;
        memcpy(dst + j * 16, &s, 16);
    }
    return over;
}

static int do_reduce_scatter(ftc_coll_t *c, uint8_t *buf, size_t count, ftc_coll_dtype_t dt,
                             ftc_deadline_t dl, const char *op, int *overflow)
{
    cpu_t *p = c->impl;
    int n = c->size, me = c->rank;
    size_t es = ftc_coll_dtype_size(dt);
    uint32_t seq = ++p->seq;
    *overflow = 0;
    if (n == 1 || !count)
        return 0;
    size_t off0, len0, myoff, mylen;
    ftc_coll_chunk(count, n, 0, &off0, &len0); /* chunk 0 is the largest */
    ftc_coll_chunk(count, n, me, &myoff, &mylen);
    /* elements per peer per round: the same on every rank (it numbers the
     * segments in the tags), never more than the largest chunk */
    size_t piece = p->seg * (size_t)p->window / es;
    if (!piece)
        piece = 1;
    if (piece > len0)
        piece = len0;
    size_t rounds = (len0 + piece - 1) / piece;
    /* what this rank receives from one peer per round: its slot in scratch */
    size_t slot_elems = mylen < piece ? mylen : piece;
    int rc = slot_elems ? scratch(c, (size_t)(n - 1) * slot_elems * es) : 0;
    if (rc < 0)
        return rc;
    xfer_t *x = calloc((size_t)2 * (size_t)n, sizeof *x);
    uint8_t **srcs = calloc((size_t)n, sizeof *srcs);
    if (!x || !srcs) {
        free(x);
        free(srcs);
        return ftc_err_set(&c->err, FTC_ENOMEM, "coll %s: out of memory", op);
    }
    size_t segs_per_piece = (piece * es + p->seg - 1) / p->seg;
    for (size_t k = 0; k < rounds && rc == 0; k++) {
        int nx = 0;
        size_t lo = k * piece;
        size_t mine = lo < mylen ? (mylen - lo < piece ? mylen - lo : piece) : 0;
        for (int q = 0; q < n; q++) {
            if (q == me)
                continue;
            size_t qoff, qlen;
            ftc_coll_chunk(count, n, q, &qoff, &qlen);
            size_t m = lo < qlen ? (qlen - lo < piece ? qlen - lo : piece) : 0;
            int slot = q < me ? q : q - 1;
            x[nx++] = (xfer_t){.peer = q, .send = 1, .ptr = buf + (qoff + lo) * es,
                               .len = m * es, .tag = mk_tag(seq, 0),
                               .seg0 = k * segs_per_piece};
            x[nx++] = (xfer_t){.peer = q, .send = 0,
                               .ptr = mine ? p->scratch + (size_t)slot * slot_elems * es : NULL,
                               .len = mine * es,
                               .tag = mk_tag(seq, 0), .seg0 = k * segs_per_piece};
        }
        rc = run(c, x, nx, op, dl);
        if (rc < 0 || !mine)
            continue;
        for (int q = 0; q < n; q++) {
            int slot = q < me ? q : q - 1;
            srcs[q] = q == me ? buf + (myoff + lo) * es
                              : p->scratch + (size_t)slot * slot_elems * es;
        }
        *overflow |= sum_ranks(dt, buf + (myoff + lo) * es, srcs, n, mine);
    }
    free(x);
    free(srcs);
    return rc;
}

static int do_all_gather(ftc_coll_t *c, uint8_t *buf, size_t count, size_t es, ftc_deadline_t dl,
                         const char *op)
{
    cpu_t *p = c->impl;
    int n = c->size, me = c->rank;
    uint32_t seq = ++p->seq;
    if (n == 1 || !count)
        return 0;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (int s = 0; s < n - 1; s++) {
        int cs = ((me - s) % n + n) % n, cr = ((me - s - 1) % n + n) % n;
        size_t so, sl, ro, rl;
        ftc_coll_chunk(count, n, cs, &so, &sl);
        ftc_coll_chunk(count, n, cr, &ro, &rl);
        xfer_t x[2] = {
            {.peer = next, .send = 1, .ptr = buf + so * es, .len = sl * es,
             .tag = mk_tag(seq, (unsigned)s)},
            {.peer = prev, .send = 0, .ptr = buf + ro * es, .len = rl * es,
             .tag = mk_tag(seq, (unsigned)s)},
        };
        int rc = run(c, x, 2, op, dl);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int cpu_reduce_scatter(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                              ftc_deadline_t dl)
{
    int over = 0;
    int rc = do_reduce_scatter(c, buf, count, dt, dl, "reduce_scatter", &over);
    if (rc == 0 && over)
        rc = ftc_err_set(&c->err, FTC_ERANGE,
                         "coll reduce_scatter rank %d: a 128-bit fixed-point sum overflowed "
                         "(|sum| >= 2^31); the element holds INT128_MIN",
                         c->rank);
    return rc;
}

static int cpu_all_gather(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                          ftc_deadline_t dl)
{
    return do_all_gather(c, buf, count, ftc_coll_dtype_size(dt), dl, "all_gather");
}

static int cpu_all_reduce(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                          ftc_deadline_t dl)
{
    int over = 0;
    int rc = do_reduce_scatter(c, buf, count, dt, dl, "all_reduce (reduce-scatter phase)", &over);
    if (rc < 0)
        return rc;
    rc = do_all_gather(c, buf, count, ftc_coll_dtype_size(dt), dl,
                       "all_reduce (all-gather phase)");
    if (rc < 0 || dt != FTC_COLL_I128)
        return rc;
    /* the overflow sentinel reached every rank: all report it alike */
    const uint8_t *b = buf;
    for (size_t j = 0; j < count; j++) {
        uint64_t w[2];
        memcpy(w, b + j * 16, 16);
        if (w[0] == 0 && w[1] == (uint64_t)1 << 63)
            return ftc_err_set(&c->err, FTC_ERANGE,
                               "coll all_reduce rank %d: the 128-bit fixed-point sum of element "
                               "%zu overflowed (|sum| >= 2^31); the step must be abandoned",
                               c->rank, j);
    }
    return 0;
}

static int cpu_broadcast(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, int root,
                         ftc_deadline_t dl)
{
    cpu_t *p = c->impl;
    int n = c->size, me = c->rank;
    size_t es = ftc_coll_dtype_size(dt);
    uint32_t seq = ++p->seq;
    if (n == 1 || !count)
        return 0;
    uint8_t *b = buf;
    xfer_t *x = calloc((size_t)n, sizeof *x);
    if (!x)
        return ftc_err_set(&c->err, FTC_ENOMEM, "coll broadcast: out of memory");
    int nx = 0;
    for (int q = 0; q < n; q++) {
        size_t o, l;
        ftc_coll_chunk(count, n, q, &o, &l);
        if (me == root && q != root)
            x[nx++] = (xfer_t){.peer = q, .send = 1, .ptr = b + o * es, .len = l * es,
                               .tag = mk_tag(seq, 0)};
        else if (me != root && q == me)
            x[nx++] = (xfer_t){.peer = root, .send = 0, .ptr = b + o * es, .len = l * es,
                               .tag = mk_tag(seq, 0)};
    }
    int rc = run(c, x, nx, "broadcast (scatter phase)", dl);
    free(x);
    if (rc < 0)
        return rc;
    return do_all_gather(c, buf, count, es, dl, "broadcast (all-gather phase)");
}

static int cpu_barrier(ftc_coll_t *c, ftc_deadline_t dl)
{
    cpu_t *p = c->impl;
    int n = c->size, me = c->rank;
    uint32_t seq = ++p->seq;
    uint8_t out = 1, in = 0;
    unsigned round = 0;
    for (int k = 1; k < n; k <<= 1, round++) {
        xfer_t x[2] = {
            {.peer = (me + k) % n, .send = 1, .ptr = &out, .len = 1, .tag = mk_tag(seq, round)},
            {.peer = (me - k % n + n) % n, .send = 0, .ptr = &in, .len = 1,
             .tag = mk_tag(seq, round)},
        };
        int rc = run(c, x, 2, "barrier", dl);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void cpu_abort(ftc_coll_t *c)
{
    cpu_t *p = c->impl;
    if (p && p->fab)
        ftc_fabric_abort(p->fab);
}

static void cpu_destroy(ftc_coll_t *c)
{
    cpu_t *p = c->impl;
    if (!p)
        return;
    ftc_fabric_close(p->fab); /* after this libfabric holds no caller buffer */
    free(p->peers);
    free(p->scratch);
    free(p->bounce);
    free(p);
    c->impl = NULL;
}

static const ftc_coll_ops_t cpu_ops;

size_t ftc__coll_cpu_scratch_bytes(const ftc_coll_t *c)
{
    const cpu_t *p = c && c->ops == &cpu_ops ? c->impl : NULL;
    return p ? p->scratch_cap : 0;
}

static const ftc_coll_ops_t cpu_ops = {
    .name = "cpu-fabric",
    .all_reduce = cpu_all_reduce,
    .reduce_scatter = cpu_reduce_scatter,
    .all_gather = cpu_all_gather,
    .broadcast = cpu_broadcast,
    .barrier = cpu_barrier,
    .abort = cpu_abort,
    .destroy = cpu_destroy,
};

int ftc_coll_cpu_create(ftc_fabric_t *fab, int rank, int size, const uint8_t *addrs,
                        const size_t *lens, const ftc_coll_cpu_opts_t *opts, ftc_coll_t **out,
                        ftc_err_t *err)
{
    *out = NULL;
    ftc_coll_cpu_opts_t o = FTC_COLL_CPU_OPTS_INIT;
    if (opts)
        o = *opts;
    if (!fab || size < 1 || size > (1 << TAG_STEP_BITS) || rank < 0 || rank >= size ||
        !o.seg_bytes || o.window < 1 || o.window > 64) {
        ftc_fabric_close(fab);
        return ftc_err_set(err, FTC_EINVAL,
                           "coll create: bad rank %d / size %d / seg_bytes %zu / window %d", rank,
                           size, o.seg_bytes, o.window);
    }
    /* every message is at most seg_bytes: one above the fabric's limit would
     * fail only at the first collective, on every rank */
    size_t max_msg = ftc_fabric_max_msg(fab);
    if (o.seg_bytes > max_msg) {
        ftc_fabric_close(fab);
        return ftc_err_set(err, FTC_EINVAL,
                           "coll create rank %d: seg_bytes %zu exceeds the fabric's largest "
                           "message, max_msg %zu bytes: use seg_bytes <= %zu, or open the fabric "
                           "with a larger ftc_fabric_opts_t.max_msg",
                           rank, o.seg_bytes, max_msg, max_msg);
    }
    cpu_t *p = calloc(1, sizeof *p);
    if (p)
        p->peers = calloc((size_t)size, sizeof *p->peers);
    if (!p || !p->peers) {
        if (p)
            free(p);
        ftc_fabric_close(fab);
        return ftc_err_set(err, FTC_ENOMEM, "coll create: out of memory");
    }
    p->fab = fab;
    p->seg = o.seg_bytes;
    p->window = o.window;
    for (int r = 0; r < size; r++) {
        if (r == rank)
            continue;
        int rc = ftc_fabric_peer_add(fab, addrs + (size_t)r * FTC_FABRIC_ADDR_MAX, lens[r],
                                     &p->peers[r]);
        if (rc < 0) {
            ftc_err_set(err, rc, "coll create rank %d: adding peer rank %d: %s", rank, r,
                        ftc_fabric_errmsg(fab));
            ftc_fabric_close(fab);
            free(p->peers);
            free(p);
            return rc;
        }
    }
    ftc_coll_t *c = ftc_coll_new(&cpu_ops, rank, size, p);
    if (!c) {
        ftc_fabric_close(fab);
        free(p->peers);
        free(p);
        return ftc_err_set(err, FTC_ENOMEM, "coll create: out of memory");
    }
    *out = c;
    return 0;
}
