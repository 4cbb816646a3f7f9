/*
 * dist.c — the DP x TP layout, the TCP rendezvous and the building of the
 * communicators (dist.h).
 */
#include "trainer/dist.h"

#include "core/log.h"
#include "trainer/coll_nccl.h"
#include "trainer/kernels.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>


int ftc_dist_layout(int world, int tp, int rank, ftc_dist_layout_t *l, ftc_err_t *err)
{
    if (world < 1 || tp < 1 || world % tp)
        return ftc_err_set(err, FTC_EINVAL, "layout: world %d is not a multiple of tp %d", world,
                           tp);
    if (rank < 0 || rank >= world)
        return ftc_err_set(err, FTC_EINVAL, "layout: rank %d outside 0..%d", rank, world - 1);
    l->world = world, l->tp = tp, l->dp = world / tp;
    l->rank = rank, l->dp_rank = rank / tp, l->tp_rank = rank % tp;
    return 0;
}

/* ---- TCP rendezvous ------------------------------------------------------ */

static int wait_fd(int fd, short ev, ftc_deadline_t dl, const atomic_int *ab)
{
    for (;;) {
        if (ab && atomic_load(ab))
            return FTC_ECANCELED;
        int64_t left = ftc_deadline_remaining_ms(dl);
        if (left <= 0)
            return FTC_ETIMEDOUT;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, left > 100 ? 100 : (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return FTC_EIO;
    }
}

static int io_all(int fd, void *buf, size_t n, int wr, ftc_deadline_t dl, const atomic_int *ab)
{
    uint8_t *b = buf;
    while (n) {
        int rc = wait_fd(fd, wr ? POLLOUT : POLLIN, dl, ab);
        if (rc < 0)
            return rc;
        ssize_t k = wr ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return FTC_EIO;
        b += k, n -= (size_t)k;
    }
    return 0;
}

static int resolve(const char *host, int port, struct sockaddr_storage *sa, socklen_t *salen,
                   ftc_err_t *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g || !ai)
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: cannot resolve %s:%d (%s); check "
                           "MASTER_ADDR", host, port, gai_strerror(g));
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *salen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* ---- the hello ----------------------------------------------------------- */

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v), put32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p) { return get16(p) | get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

size_t ftc__dist_hello_encode(const ftc__dist_hello_t *h, uint8_t *out, size_t cap)
{
    size_t jl = strnlen(h->job, sizeof h->job), n = FTC__DIST_HELLO_HDR + jl + h->bloblen;
    if (jl > FTC_DIST_JOB_MAX || !h->bloblen || h->bloblen > FTC_DIST_BLOB_MAX || n > cap)
        return 0;
    memcpy(out, "FTC2", 4);
    put32(out + 4, h->rank), put32(out + 8, h->world), put64(out + 12, h->generation);
    put16(out + 20, (uint32_t)jl), put16(out + 22, (uint32_t)h->bloblen);
    memcpy(out + FTC__DIST_HELLO_HDR, h->job, jl);
    memcpy(out + FTC__DIST_HELLO_HDR + jl, h->blob, h->bloblen);
    return n;
}

int ftc__dist_hello_parse(const uint8_t *b, size_t n, ftc__dist_hello_t *h, char *why,
                          size_t cap)
{
    if (memcmp(b, "FTC2", n < 4 ? n : 4)) {
        if (n >= 4 && !memcmp(b, "RCTF", 4))
            snprintf(why, cap, "it sent the hello of an older ftc (version 1, \"FTCR\"), not "
                     "version 2 (\"FTC2\"): every rank must run the same ftc");
        else
            snprintf(why, cap, "it sent something that is not an ftc rendezvous hello (it "
                     "begins 0x%02x%02x%02x%02x, not \"FTC2\"; another program, or a port "
                     "scanner?)", b[0], n > 1 ? b[1] : 0, n > 2 ? b[2] : 0, n > 3 ? b[3] : 0);
        return FTC_EPROTO;
    }
    if (n < FTC__DIST_HELLO_HDR)
        return 0;
    size_t jl = get16(b + 20), bl = get16(b + 22);
    if (jl > FTC_DIST_JOB_MAX) {
        snprintf(why, cap, "its hello announces a job id of %zu bytes, over %d", jl,
                 FTC_DIST_JOB_MAX);
        return FTC_EPROTO;
    }
    if (bl == 0 || bl > FTC_DIST_BLOB_MAX) {
        snprintf(why, cap, "its hello announces %zu bytes of addresses, not 1..%d (another ftc "
                 "version?)", bl, FTC_DIST_BLOB_MAX);
        return FTC_EPROTO;
    }
    if (n < FTC__DIST_HELLO_HDR + jl + bl)
        return 0;
    const uint8_t *job = b + FTC__DIST_HELLO_HDR;
    for (size_t i = 0; i < jl; i++)
        if (job[i] < 0x20 || job[i] > 0x7e) {
            snprintf(why, cap, "byte %zu of its job id is 0x%02x, not printable ASCII", i,
                     job[i]);
            return FTC_EPROTO;
        }
    h->rank = get32(b + 4), h->world = get32(b + 8), h->generation = get64(b + 12);
    memcpy(h->job, job, jl);
    h->job[jl] = 0;
    h->blob = job + jl, h->bloblen = bl;
    h->size = FTC__DIST_HELLO_HDR + jl + bl;
    return 1;
}

int ftc__dist_hello_check(const ftc__dist_hello_t *h, const char *job, uint64_t generation,
                          int world, char *why, size_t cap)
{
    if (strcmp(h->job, job ? job : "")) {
        snprintf(why, cap, "its job id is '%s', rank 0's is '%s' (FTC_JOB_ID, else "
                 "TORCHELASTIC_RUN_ID: two jobs on one MASTER_ADDR:port?)", h->job,
                 job ? job : "");
        return FTC_ECONFIG;
    }
    if (h->generation != generation) {
        snprintf(why, cap, "its generation is %llu, rank 0's is %llu (FTC_GENERATION: %s)",
                 (unsigned long long)h->generation, (unsigned long long)generation,
                 h->generation < generation ? "a rank of an earlier incarnation of the job"
                                            : "rank 0 is of an earlier incarnation of the job");
        return FTC_ESTALE;
    }
    if (h->world != (uint32_t)world) {
        snprintf(why, cap, "its world size is %u, rank 0's is %d (WORLD_SIZE differs)",
                 (unsigned)h->world, world);
        return FTC_ECONFIG;
    }
    if (h->rank == 0 || h->rank >= (uint32_t)world) {
        snprintf(why, cap, "it claims rank %u, outside 1..%d (rank 0 is the one listening)",
                 (unsigned)h->rank, world - 1);
        return FTC_ECONFIG;
    }
    return 0;
}

/* Rank 0's answer to a hello, little-endian: status u32 (0: the table
 * follows, as world x [length u32][blob]; else -FTC_E* of a refusal, then a
 * message: length u16, that many bytes). */
#define RDZV_WHY_MAX 512

/* One connection accepted by rank 0's rendezvous. Each is read as its bytes
 * arrive, all of them in one poll loop, so a connection that says nothing (a
 * port scanner, a half-dead rank, a rank of an earlier job still retrying)
 * holds up no other; its blob goes to the table only once the job forms. */
typedef struct rdzv_conn {
    int fd;                         /* -1: free slot */
    int rank;                       /* the rank it registered as; -1 until it is accepted */
    size_t got;                     /* bytes of its hello received */
    ftc__dist_hello_t h;            /* its hello once whole (h.size != 0), blob in buf */
    uint64_t last_ns;               /* accepted or last received at (which to evict) */
    uint64_t seq;                   /* accept order: of two claiming one rank, the later wins */
    char peer[80];                  /* "addr:port" of the other end, for the warnings */
    uint8_t buf[FTC__DIST_HELLO_MAX];
} rdzv_conn_t;

/* Connections beyond one per rank that rank 0 keeps while they have not
 * sent their header; past that it drops the one idle the longest. */
#define RDZV_SPARE_CONNS 32

static void peer_name(int fd, char *s, size_t cap)
{
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char h[64], p[16];
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) < 0 ||
        getnameinfo((struct sockaddr *)&sa, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV)) {
        snprintf(s, cap, "an unknown peer");
        return;
    }
    snprintf(s, cap, sa.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
}

/* Reads what k's peer sent, as much as is there. 1: its hello is in (and
 * nothing after it); 0: more to come; -1: the connection is no good, why
 * says so (also one whose hello is in that closed or sent more: a rank says
 * nothing after its hello until it has read the answer). */
static int conn_read(rdzv_conn_t *k, char *why, size_t whycap)
{
    for (;;) {
        int in = k->h.size && k->got == k->h.size;
        uint8_t c;
        uint8_t *dst = in ? &c : k->buf + k->got;
        size_t want = in ? 1 : sizeof k->buf - k->got;
        ssize_t n = recv(k->fd, dst, want, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return in;
        if (in) {
            snprintf(why, whycap, "it sent its hello as rank %u, then %s", (unsigned)k->h.rank,
                     n == 0 ? "closed the connection before the table was sent"
                     : n > 0 ? "sent bytes after its hello"
                             : strerror(errno));
            return -1;
        }
        if (n <= 0) {
            snprintf(why, whycap, "%s after %zu bytes of its hello",
                     n == 0 ? "it closed the connection" : strerror(errno), k->got);
            return -1;
        }
        k->got += (size_t)n;
        k->last_ns = ftc_now_ns();
        int st = ftc__dist_hello_parse(k->buf, k->got, &k->h, why, whycap);
        if (st < 0)
            return -1;
        if (st > 0 && k->got > k->h.size) {
            snprintf(why, whycap, "it sent %zu bytes after its hello as rank %u",
                     k->got - k->h.size, (unsigned)k->h.rank);
            return -1;
        }
        /* st == 0 leaves room: a whole hello fits buf */
    }
}

/* Tells a refused connection why (best effort: a fresh socket's buffer holds
 * it; the peer has sent its whole hello, so closing sends no reset over it). */
static void conn_refuse(rdzv_conn_t *k, int code, const char *why)
{
    uint8_t m[6 + RDZV_WHY_MAX];
    size_t wl = strnlen(why, RDZV_WHY_MAX);
    put32(m, (uint32_t)-code), put16(m + 4, (uint32_t)wl);
    memcpy(m + 6, why, wl);
    (void)!send(k->fd, m, 6 + wl, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(k->fd, SHUT_WR);
}

static void conn_close(rdzv_conn_t *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1, k->rank = -1, k->got = 0, k->h.size = 0;
}

/* Sends ans (alen bytes) to every rank 1..world-1 (cs[by_rank[r]]) at once:
 * non-blocking sends as each socket has room, all in one poll loop, so a
 * rank that reads slowly or not at all holds up no other (one after another,
 * it kept every rank after it waiting past the deadline). A rank whose
 * connection fails is named and the others still get theirs; so are the
 * ranks not done at the deadline or the abort. pf and pk have world slots. */
static int send_answer(rdzv_conn_t *cs, const int *by_rank, int world, const uint8_t *ans,
                       size_t alen, struct pollfd *pf, int *pk, ftc_deadline_t dl,
                       const atomic_int *ab, ftc_err_t *err)
{
    size_t *sent = calloc((size_t)world, sizeof *sent);
    if (!sent)
        return ftc_err_set(err, FTC_ENOMEM, "rendezvous: out of memory");
    int todo = world - 1, rc = 0, failed = 0;
    while (todo > 0) {
        int stop = ab && atomic_load(ab) ? FTC_ECANCELED : 0;
        int64_t left = ftc_deadline_remaining_ms(dl);
        if (!stop && left <= 0)
            stop = FTC_ETIMEDOUT;
        if (stop) {
            int first = -1;
            for (int r = 1; r < world && first < 0; r++)
                if (sent[r] < alen)
                    first = r;
            rc = ftc_err_set(err, stop, "rendezvous: rank 0 %s before %d rank%s had the table "
                             "(first: rank %d at %s, %zu of %zu bytes sent: it does not read?)",
                             stop == FTC_ECANCELED ? "was aborted" : "reached the deadline",
                             todo, todo == 1 ? "" : "s", first, cs[by_rank[first]].peer,
                             sent[first], alen);
            break;
        }
        int np = 0;
        for (int r = 1; r < world; r++)
            if (sent[r] < alen)
                pk[np] = r, pf[np++] = (struct pollfd){cs[by_rank[r]].fd, POLLOUT, 0};
        int pr = poll(pf, (nfds_t)np, left > 100 ? 100 : (int)left);
        if (pr < 0 && errno != EINTR) {
            rc = ftc_err_errno(err, errno, "rendezvous: rank 0: poll");
            break;
        }
        for (int j = 0; j < np && pr > 0; j++) {
            if (!pf[j].revents)
                continue;
            int r = pk[j];
            ssize_t k = send(pf[j].fd, ans + sent[r], alen - sent[r], MSG_NOSIGNAL);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue;
            if (k <= 0) {
                /* this rank is gone; the others still get the table (and find
                 * out about it when they build their groups) */
                int e = k < 0 ? errno : EPIPE;
                if (!failed++)
                    rc = ftc_err_set(err, FTC_EIO, "rendezvous: sending the table to rank %d "
                                     "at %s failed (%s)", r, cs[by_rank[r]].peer, strerror(e));
                sent[r] = alen;
            } else {
                sent[r] += (size_t)k;
            }
            todo -= sent[r] == alen;
        }
    }
    free(sent);
    return rc;
}

static int rdzv_server(const struct sockaddr_storage *sa, socklen_t salen,
                       const ftc_dist_rdzv_opts_t *o, const void *blob, size_t len,
                       uint8_t *table, size_t *lens, ftc_deadline_t dl, ftc_err_t *err)
{
    int world = o->world;
    const atomic_int *ab = o->abort;
    const char *sb = getenv("FTC_TEST_RDZV_SNDBUF"); /* tests: each connection's SO_SNDBUF */
    int sndbuf = sb && *sb ? atoi(sb) : 0;
    int ls = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (ls < 0)
        return ftc_err_errno(err, errno, "rendezvous: socket");
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* room in the accept queue for every rank and the strays: a SYN dropped
     * on a full queue costs the rank a retransmit (1 s, then 3 s, ...) */
    int cap = world - 1 + RDZV_SPARE_CONNS;
    if (bind(ls, (const struct sockaddr *)sa, salen) < 0 || listen(ls, cap) < 0) {
        int e = errno;
        close(ls);
        return ftc_err_errno(err, e, "rendezvous: rank 0 cannot listen on MASTER_ADDR:port (in "
                             "use? set FTC_RDZV_PORT)");
    }
    rdzv_conn_t *cs = calloc((size_t)cap, sizeof *cs);
    int *by_rank = malloc(sizeof(int) * (size_t)world); /* index into cs, or -1 */
    struct pollfd *pf = malloc(sizeof *pf * (size_t)(cap + 1));
    int *pk = malloc(sizeof(int) * (size_t)(cap + 1)); /* pf[i] polls cs[pk[i]] */
    if (!cs || !by_rank || !pf || !pk) {
        close(ls);
        free(cs), free(by_rank), free(pf), free(pk);
        return ftc_err_set(err, FTC_ENOMEM, "rendezvous: out of memory");
    }
    for (int i = 0; i < cap; i++)
        cs[i].fd = -1, cs[i].rank = -1;
    for (int r = 0; r < world; r++)
        by_rank[r] = -1, lens[r] = 0;
    memcpy(table, blob, len);
    lens[0] = len;
    int have = 1, rc = 0;
    uint64_t accepted = 0;
    char why[RDZV_WHY_MAX];
    /* Until every rank is in, and then once more without waiting: a rank that
     * registered and died since (its close already queued) is dropped before
     * the table goes out, not found dead while sending it. */
    for (int quiet = 0; !quiet;) {
        if (ab && atomic_load(ab)) {
            rc = FTC_ECANCELED;
            break;
        }
        int64_t left = ftc_deadline_remaining_ms(dl);
        if (left <= 0 && have < world) {
            rc = FTC_ETIMEDOUT;
            break;
        }
        int last_look = have == world;
        int np = 0;
        pf[np++] = (struct pollfd){ls, POLLIN, 0};
        for (int i = 0; i < cap; i++)
            if (cs[i].fd >= 0)
                pk[np] = i, pf[np++] = (struct pollfd){cs[i].fd, POLLIN, 0};
        int pr = poll(pf, (nfds_t)np, last_look ? 0 : left > 100 ? 100 : (int)left);
        if (pr < 0 && errno != EINTR) {
            rc = ftc_err_errno(err, errno, "rendezvous: rank 0: poll");
            break;
        }
        for (int j = 1; j < np && pr > 0; j++) {
            if (!pf[j].revents)
                continue;
            rdzv_conn_t *k = &cs[pk[j]];
            if (k->fd != pf[j].fd)
                continue; /* closed above: the earlier of two connections of one rank */
            int was = k->rank;
            int st = conn_read(k, why, sizeof why);
            if (st < 0) {
                if (was >= 0) {
                    by_rank[was] = -1, have--;
                    FTC_WARN("dist", "rendezvous: rank 0: dropped rank %d's connection from %s: "
                             "%s; waiting for rank %d to connect again", was, k->peer, why, was);
                } else {
                    FTC_WARN("dist", "rendezvous: rank 0: dropped the connection from %s: %s; "
                             "it does not count as a rank", k->peer, why);
                }
                conn_close(k);
            } else if (st > 0 && was < 0) {
                int cr = ftc__dist_hello_check(&k->h, o->job, o->generation, world, why,
                                               sizeof why);
                if (cr < 0) { /* told, warned and closed: it takes no rank's place */
                    conn_refuse(k, cr, why);
                    FTC_WARN("dist", "rendezvous: rank 0: refused the connection from %s "
                             "(%s): %s; it does not count as a rank", k->peer,
                             ftc_errname(cr), why);
                    conn_close(k);
                    continue;
                }
                int r = (int)k->h.rank;
                if (by_rank[r] < 0) {
                    have++;
                } else {
                    /* the rank came again (restarted, or retried after its connection broke):
                     * the connection accepted last is its latest try, whichever registered
                     * first; the other is closed (its rank, if alive, fails reading the table) */
                    rdzv_conn_t *old = &cs[by_rank[r]];
                    rdzv_conn_t *keep = old->seq > k->seq ? old : k;
                    rdzv_conn_t *lose = keep == k ? old : k;
                    FTC_WARN("dist", "rendezvous: rank 0: two connections claim rank %d; keeping "
                             "the later one, from %s, and dropping the earlier one, from %s", r,
                             keep->peer, lose->peer);
                    conn_close(lose);
                    if (lose == k)
                        continue;
                }
                k->rank = r;
                by_rank[r] = pk[j];
            }
        }
        quiet = last_look && have == world;
        if (quiet || pr <= 0 || !(pf[0].revents & POLLIN))
            continue;
        for (;;) { /* everything queued */
            int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0)
                break;
            int slot = -1, idle = -1;
            for (int i = 0; i < cap && slot < 0; i++) {
                if (cs[i].fd < 0)
                    slot = i;
                else if (cs[i].rank < 0 && (idle < 0 || cs[i].last_ns < cs[idle].last_ns))
                    idle = i;
            }
            if (slot < 0) { /* cap - (world - 1) >= RDZV_SPARE_CONNS unregistered: idle >= 0 */
                FTC_WARN("dist", "rendezvous: rank 0: dropped the connection from %s: %d "
                         "connections that have not registered a rank are open; this one was "
                         "idle the longest", cs[idle].peer, RDZV_SPARE_CONNS);
                conn_close(&cs[idle]);
                slot = idle;
            }
            if (sndbuf > 0) /* tests: a slow reader fills it quickly */
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
            rdzv_conn_t *k = &cs[slot];
            k->fd = fd, k->rank = -1, k->got = 0, k->last_ns = ftc_now_ns();
            k->seq = ++accepted;
            peer_name(fd, k->peer, sizeof k->peer);
        }
    }
    close(ls);
    int silent = 0, first = -1;
    for (int i = 0; i < cap; i++)
        if (cs[i].fd >= 0 && cs[i].rank < 0 && (silent++, first < 0))
            first = i;
    if (rc == FTC_ECANCELED) {
        ftc_err_set(err, rc, "rendezvous: rank 0: aborted (%d of %d ranks heard from)", have,
                    world);
    } else if (rc == FTC_ETIMEDOUT) {
        int missing = -1, nm = 0;
        for (int r = 1; r < world; r++)
            if (by_rank[r] < 0 && (nm++, missing < 0))
                missing = r;
        char more[160] = "";
        if (silent)
            snprintf(more, sizeof more, "; %d other connection%s sent no complete registration, "
                     "the first from %s", silent, silent == 1 ? "" : "s", cs[first].peer);
        ftc_err_set(err, FTC_ETIMEDOUT, "rendezvous: rank 0 heard from %d of %d ranks by the "
                    "deadline (%d missing, first: rank %d%s)", have, world, nm, missing, more);
    } else if (rc == 0 && silent) {
        FTC_WARN("dist", "rendezvous: rank 0: the job formed; closing %d connection%s that "
                 "registered no rank, the first from %s", silent, silent == 1 ? "" : "s",
                 cs[first].peer);
    }
    /* the answer, the same for every rank: status 0, then the table */
    uint8_t *ans = NULL;
    size_t alen = 4;
    for (int r = 1; r < world && rc == 0; r++) {
        const rdzv_conn_t *k = &cs[by_rank[r]];
        memcpy(table + (size_t)r * FTC_DIST_BLOB_MAX, k->h.blob, k->h.bloblen);
        lens[r] = k->h.bloblen;
    }
    for (int q = 0; q < world && rc == 0; q++)
        alen += 4 + lens[q];
    if (rc == 0 && !(ans = malloc(alen)))
        rc = ftc_err_set(err, FTC_ENOMEM, "rendezvous: out of memory");
    if (rc == 0) {
        size_t at = 4;
        put32(ans, 0);
        for (int q = 0; q < world; q++) {
            put32(ans + at, (uint32_t)lens[q]);
            memcpy(ans + at + 4, table + (size_t)q * FTC_DIST_BLOB_MAX, lens[q]);
            at += 4 + lens[q];
        }
    }
    if (rc == 0)
        rc = send_answer(cs, by_rank, world, ans, alen, pf, pk, dl, ab, err);
    free(ans);
    for (int i = 0; i < cap; i++)
        conn_close(&cs[i]);
    free(cs), free(by_rank), free(pf), free(pk);
    return rc;
}

/* Rank 0's generation from its FTC_ESTALE refusal (ftc__dist_hello_check's
 * "its generation is G, rank 0's is G0"): 0 when the text is not that. */
static int rdzv_refusal_gen(const char *why, uint64_t *g0)
{
    const char *at = strstr(why, "its generation is ");
    at = at ? strstr(at, ", rank 0's is ") : NULL;
    if (!at)
        return 0;
    at += strlen(", rank 0's is ");
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(at, &end, 10);
    if (end == at || errno)
        return 0;
    *g0 = (uint64_t)v;
    return 1;
}

/* A rank of a newer generation than rank 0's, still refused (or rank 0 gone
 * and no new one) at its deadline: FTC_ESTALE naming both generations. */
static int rdzv_stale_fail(const ftc_dist_rdzv_opts_t *o, uint64_t g0, int tries,
                           ftc_err_t *err)
{
    return ftc_err_set(err, FTC_ESTALE, "rendezvous: rank %d of generation %llu: rank 0 was "
                       "still of generation %llu, an earlier one, at the deadline (refused %d "
                       "time%s; is an earlier incarnation's rank 0 still listening on "
                       "MASTER_ADDR:port, or was FTC_GENERATION not raised for every rank?)",
                       o->rank, (unsigned long long)o->generation, (unsigned long long)g0, tries,
                       tries == 1 ? "" : "s");
}

static int rdzv_client(const struct sockaddr_storage *sa, socklen_t salen,
                       const ftc_dist_rdzv_opts_t *o, const void *blob, size_t len,
                       uint8_t *table, size_t *lens, ftc_deadline_t dl, ftc_err_t *err)
{
    int rank = o->rank, world = o->world;
    const atomic_int *ab = o->abort;
    int fd = -1;
    /* Refused as of a newer generation than rank 0's: rank 0 is the stale one
     * (an earlier incarnation's, still listening on a reused MASTER_PORT, or
     * not yet told of the new generation); it leaves, and the new rank 0
     * listens there, so this rank tries again until the deadline, backing
     * off (each refusal is a warning in rank 0's log). A rank of an OLDER
     * generation than rank 0's is the stale one and fails at once. */
    int refused = 0, backoff_ms = 50;
    uint64_t stale_gen = 0;
again:
    for (;;) { /* rank 0 may not listen yet */
        /* non-blocking: a blocking connect() to an address that drops the
         * SYNs (rank 0's accept queue full, a wrong or unreachable
         * MASTER_ADDR) waits minutes for the kernel's SYN retries, past the
         * deadline and deaf to the abort */
        fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return ftc_err_errno(err, errno, "rendezvous: socket");
        int rc = 0;
        if (connect(fd, (const struct sockaddr *)sa, salen) < 0) {
            rc = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, dl, ab) : FTC_EIO;
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr))
                rc = FTC_EIO;
        }
        if (rc == 0)
            break;
        close(fd);
        if (rc == FTC_ECANCELED || (ab && atomic_load(ab)))
            return ftc_err_set(err, FTC_ECANCELED, "rendezvous: rank %d: aborted", rank);
        if ((rc == FTC_ETIMEDOUT || ftc_deadline_expired(dl)) && refused)
            return rdzv_stale_fail(o, stale_gen, refused, err);
        if (rc == FTC_ETIMEDOUT || ftc_deadline_expired(dl))
            return ftc_err_set(err, FTC_ETIMEDOUT, "rendezvous: rank %d could not reach rank 0 "
                               "at MASTER_ADDR:port by the deadline", rank);
        ftc_sleep_ms(50);
    }
    ftc__dist_hello_t h = {.rank = (uint32_t)rank, .world = (uint32_t)world,
                           .generation = o->generation, .blob = blob, .bloblen = len};
    snprintf(h.job, sizeof h.job, "%s", o->job ? o->job : "");
    uint8_t hb[FTC__DIST_HELLO_MAX];
    size_t hl = ftc__dist_hello_encode(&h, hb, sizeof hb);
    assert(hl); /* rdzv_tcp checked the job id and the blob */
    uint8_t st[4];
    int rc = io_all(fd, hb, hl, 1, dl, ab);
    if (rc == 0)
        rc = io_all(fd, st, 4, 0, dl, ab);
    if (rc == 0 && get32(st) != 0) { /* refused: the code, then why */
        uint32_t code = get32(st);
        uint8_t wl[2];
        char why[RDZV_WHY_MAX + 1] = "";
        rc = io_all(fd, wl, 2, 0, dl, ab);
        if (rc == 0 && get16(wl) <= RDZV_WHY_MAX)
            rc = io_all(fd, why, get16(wl), 0, dl, ab);
        close(fd);
        if (rc < 0 || get16(wl) > RDZV_WHY_MAX)
            snprintf(why, sizeof why, "the reason was cut short");
        else
            why[get16(wl)] = 0;
        int e = code == (uint32_t)-FTC_ECONFIG || code == (uint32_t)-FTC_ESTALE
                    ? -(int)code
                    : FTC_EPROTO;
        uint64_t g0 = 0;
        if (e == FTC_ESTALE && rc == 0 && rdzv_refusal_gen(why, &g0) && g0 < o->generation) {
            if (ab && atomic_load(ab))
                return ftc_err_set(err, FTC_ECANCELED, "rendezvous: rank %d: aborted", rank);
            int left = ftc_deadline_remaining_ms(dl);
            if (left > 0) {
                if (!refused++)
                    FTC_WARN("dist", "rendezvous: rank %d of generation %llu: rank 0 is of "
                             "generation %llu, an earlier one: trying again until the "
                             "deadline (%d ms), for the new generation's rank 0", rank,
                             (unsigned long long)o->generation, (unsigned long long)g0, left);
                stale_gen = g0;
                ftc_sleep_ms((uint64_t)(backoff_ms < left ? backoff_ms : left));
                backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
                goto again;
            }
            return rdzv_stale_fail(o, g0, refused + 1, err);
        }
        return ftc_err_set(err, e, "rendezvous: rank 0 refused rank %d (%s): %s", rank,
                           ftc_errname(e), why);
    }
    for (int q = 0; q < world && rc == 0; q++) {
        uint8_t l4[4];
        rc = io_all(fd, l4, 4, 0, dl, ab);
        uint32_t l32 = rc == 0 ? get32(l4) : 0;
        if (rc == 0 && (l32 == 0 || l32 > FTC_DIST_BLOB_MAX))
            rc = FTC_EPROTO;
        if (rc == 0)
            rc = io_all(fd, table + (size_t)q * FTC_DIST_BLOB_MAX, l32, 0, dl, ab);
        lens[q] = l32;
    }
    close(fd);
    if (rc < 0)
        return ftc_err_set(err, rc, "rendezvous: rank %d did not get the address table from "
                           "rank 0 (%s; did another rank not start, or rank 0 die?)", rank,
                           ftc_strerror(rc));
    return 0;
}

int ftc_dist_rendezvous_tcp(const ftc_dist_rdzv_opts_t *o, const void *blob, size_t len,
                            uint8_t *table, size_t *lens, ftc_deadline_t dl, ftc_err_t *err)
{
    if (!o || o->size != sizeof *o)
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: options of %zu bytes, not %zu "
                           "(initialise them with FTC_DIST_RDZV_OPTS_INIT)", o ? o->size : 0,
                           sizeof *o);
    const char *host = o->host;
    int port = o->port, rank = o->rank, world = o->world;
    if (!host || !*host || port < 1 || port > 65535 || world < 1 || rank < 0 || rank >= world ||
        !len || len > FTC_DIST_BLOB_MAX)
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: need MASTER_ADDR and a MASTER_PORT in "
                           "1..65535 (rank %d of %d)", rank, world);
    const char *job = o->job ? o->job : "";
    size_t jl = strlen(job);
    for (size_t i = 0; i < jl; i++)
        if ((unsigned char)job[i] < 0x20 || (unsigned char)job[i] > 0x7e)
            jl = SIZE_MAX;
    if (jl > FTC_DIST_JOB_MAX)
        return ftc_err_set(err, FTC_EINVAL, "rendezvous: the job id '%.40s...' must be printable "
                           "ASCII of at most %d bytes (FTC_JOB_ID, TORCHELASTIC_RUN_ID)", job,
                           FTC_DIST_JOB_MAX);
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    int rc = resolve(host, port, &sa, &salen, err);
    if (rc < 0)
        return rc;
    if (world == 1) {
        memcpy(table, blob, len);
        lens[0] = len;
        return 0;
    }
    return rank == 0 ? rdzv_server(&sa, salen, o, blob, len, table, lens, dl, err)
                     : rdzv_client(&sa, salen, o, blob, len, table, lens, dl, err);
}

/* The rendezvous options of a join. */
static ftc_dist_rdzv_opts_t rdzv_opts(const ftc_dist_opts_t *o)
{
    ftc_dist_rdzv_opts_t r = FTC_DIST_RDZV_OPTS_INIT;
    r.host = o->host, r.port = o->port, r.rank = o->rank, r.world = o->world;
    r.job = o->job, r.generation = o->generation, r.abort = o->abort;
    return r;
}

/* ---- choosing the collectives -------------------------------------------- */

int ftc_dist_coll_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "cpu"))
        return FTC_DIST_COLL_CPU;
    if (!strcmp(s, "nccl"))
        return FTC_DIST_COLL_NCCL;
    if (!strcmp(s, "auto"))
        return FTC_DIST_COLL_AUTO;
    return -1;
}

int ftc_dist_coll_resolve(int want, const char *backend, int local_rank, int local_world,
                          int *kind, int *device, char *why, size_t whylen, ftc_err_t *err)
{
    *kind = FTC_DIST_COLL_CPU;
    *device = -1;
    if (want != FTC_DIST_COLL_CPU && want != FTC_DIST_COLL_NCCL && want != FTC_DIST_COLL_AUTO)
        return ftc_err_set(err, FTC_EINVAL, "--coll: %d is not cpu, nccl or auto", want);
    bool cpu_backend = backend && !strncmp(backend, "cpu", 3);
    if (want == FTC_DIST_COLL_CPU) {
        /* the CUDA kernels (when they run) still take one device per local
         * rank, not device 0 for every rank of the node */
        ftc_err_t e = {0};
        int dev = -1, n = cpu_backend ? -1 : ftc_kernels_cuda_use_device(local_rank, &dev, &e);
        if (n > 0)
            snprintf(why, whylen, "cpu-fabric (--coll cpu; CUDA device %d of %d for local rank "
                     "%d's kernels)", dev, n, local_rank);
        else
            snprintf(why, whylen, "cpu-fabric (--coll cpu)");
        return 0;
    }
    bool nccl = want == FTC_DIST_COLL_NCCL;
    if (nccl && cpu_backend)
        return ftc_err_set(err, FTC_EINVAL, "--coll nccl needs the CUDA kernels backend "
                           "(--backend cuda, cuda-bf16 or auto on a GPU machine), not "
                           "--backend %s: NCCL moves device memory", backend);
    if (!ftc_coll_nccl_built()) {
        if (nccl)
            return ftc_err_set(err, FTC_EUNSUPPORTED, "--coll nccl: this build of ftc has no NCCL "
                               "(configure with -DFTC_WITH_CUDA=ON where NCCL is installed), "
                               "or use --coll cpu");
        snprintf(why, whylen, "cpu-fabric (auto: this build has no NCCL)");
        return 0;
    }
    if (cpu_backend) {
        snprintf(why, whylen, "cpu-fabric (auto: --backend %s)", backend);
        return 0;
    }
    ftc_err_t e = {0};
    int dev = -1, n = ftc_kernels_cuda_use_device(local_rank, &dev, &e);
    if (n < 0) {
        if (nccl)
            return ftc_err_set(err, n, "--coll nccl: %s; NCCL needs a CUDA device (use --coll "
                               "cpu on a machine without one)", e.msg);
        snprintf(why, whylen, "cpu-fabric (auto: %s)", e.msg);
        return 0;
    }
    if (local_world > n) {
        if (nccl)
            return ftc_err_set(err, FTC_EINVAL, "--coll nccl: %d ranks on this node but %d CUDA "
                               "device%s: NCCL needs one GPU per rank (it refuses two ranks of a "
                               "communicator on one device); use --coll cpu, or fewer ranks per "
                               "node", local_world, n, n == 1 ? "" : "s");
        snprintf(why, whylen, "cpu-fabric (auto: %d ranks on this node but %d CUDA device%s; "
                 "NCCL needs one GPU per rank)", local_world, n, n == 1 ? "" : "s");
        return 0;
    }
    *kind = FTC_DIST_COLL_NCCL;
    *device = dev;
    snprintf(why, whylen, "nccl (%s: CUDA device %d of %d for local rank %d, NCCL built)",
             nccl ? "--coll nccl" : "auto", dev, n, local_rank);
    return 0;
}

/* The rendezvous subdirectory of this rank's DP (is_dp) or TP group under
 * o->dir, created if missing: "dp-t<tp_rank>" or "tp-d<dp_rank>". */
static int group_dir(const ftc_dist_opts_t *o, const ftc_dist_layout_t *l, int is_dp, char *sub,
                     size_t cap, ftc_err_t *err)
{
    snprintf(sub, cap, "%s/%s-%c%d", o->dir, is_dp ? "dp" : "tp", is_dp ? 't' : 'd',
             is_dp ? l->tp_rank : l->dp_rank);
    if (mkdir(sub, 0700) < 0 && errno != EEXIST)
        return ftc_err_errno(err, errno, "dist: mkdir %s", sub);
    return 0;
}

/* The NCCL communicator of one group: NCCL's id through the group's
 * directory (coll_nccl.h rendezvous, generation 1), or the id the TCP
 * rendezvous carried (id not NULL), under dl and o->abort. */
static int make_nccl_group(const ftc_dist_opts_t *o, const char *sub, const uint8_t *id, int me,
                           int n, ftc_deadline_t dl, ftc_coll_t **out, ftc_err_t *err)
{
    ftc_coll_nccl_boot_t boot = FTC_COLL_NCCL_BOOT_INIT;
    boot.dir = sub;
    boot.generation = 1;
    boot.id = id;
    boot.abort = o->abort;
    return ftc_coll_nccl_create(me, n, o->cuda_device, &boot, dl, out, err);
}

/* NCCL groups over the TCP rendezvous: each rank's blob holds, per group
 * (g = 0 DP when dp > 1, else TP; g = 1 TP), FTC_COLL_NCCL_ID_BYTES bytes:
 * a fresh unique id when it is the group's rank 0, zeros otherwise; each
 * member then takes the id from its group rank 0's blob. o->abort ends the
 * exchange and the creates as it ends the fabric path's rendezvous. */
static int join_nccl_tcp(const ftc_dist_opts_t *o, ftc_dist_t *d, int ng, const int *is_dp,
                         uint8_t *table, size_t *tlens, ftc_deadline_t dl, ftc_err_t *err)
{
    const ftc_dist_layout_t *l = &d->l;
    uint8_t blob[2 * FTC_COLL_NCCL_ID_BYTES];
    memset(blob, 0, sizeof blob);
    for (int g = 0; g < ng; g++) {
        int gr = is_dp[g] ? l->dp_rank : l->tp_rank;
        int rc = gr == 0 ? ftc_coll_nccl_unique_id(blob + g * FTC_COLL_NCCL_ID_BYTES, err) : 0;
        if (rc < 0)
            return rc;
    }
    size_t bl = (size_t)ng * FTC_COLL_NCCL_ID_BYTES;
    ftc_dist_rdzv_opts_t ro = rdzv_opts(o);
    int rc = ftc_dist_rendezvous_tcp(&ro, blob, bl, table, tlens, dl, err);
    if (rc < 0)
        return rc;
    for (int g = 0; g < ng; g++) {
        int gr = is_dp[g] ? l->dp_rank : l->tp_rank, gn = is_dp[g] ? l->dp : l->tp;
        int r0 = is_dp[g] ? l->tp_rank : l->dp_rank * l->tp; /* the group's rank 0 */
        if (tlens[r0] != bl)
            return ftc_err_set(err, FTC_EPROTO, "rendezvous: rank %d sent %zu bytes, not the %zu "
                               "of its NCCL ids (does every rank run --coll nccl?)", r0,
                               tlens[r0], bl);
        const uint8_t *id =
            table + (size_t)r0 * FTC_DIST_BLOB_MAX + (size_t)g * FTC_COLL_NCCL_ID_BYTES;
        rc = make_nccl_group(o, NULL, id, gr, gn, dl, is_dp[g] ? &d->dp : &d->tp, err);
        if (rc < 0)
            return ftc_err_wrap(err, "the %s group (NCCL, rank %d of %d)",
                                is_dp[g] ? "DP" : "TP", gr, gn);
    }
    return 0;
}

/* ---- joining ------------------------------------------------------------- */

static int open_ep(const ftc_dist_opts_t *o, ftc_fabric_t **fab, uint8_t *addr, size_t *len,
                   ftc_err_t *err)
{
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = o->provider;
    int rc = ftc_fabric_open(&fo, fab, err);
    if (rc < 0)
        return rc;
    *len = FTC_FABRIC_ADDR_MAX;
    rc = ftc_fabric_getname(*fab, addr, len);
    if (rc < 0)
        return ftc_err_set(err, rc, "fabric: cannot read the endpoint's address");
    return 0;
}

/* Builds one group from the addresses of its members (in group order). */
static int make_group(ftc_fabric_t *fab, int me, int n, const uint8_t *addrs, const size_t *lens,
                      ftc_coll_t **out, ftc_err_t *err)
{
    return ftc_coll_cpu_create(fab, me, n, addrs, lens, NULL, out, err);
}

int ftc_dist_join(const ftc_dist_opts_t *o, ftc_dist_t **out, ftc_err_t *err)
{
    *out = NULL;
    ftc_dist_t *d = calloc(1, sizeof *d);
    if (!d)
        return ftc_err_set(err, FTC_ENOMEM, "dist: out of memory");
    int rc = ftc_dist_layout(o->world, o->tp, o->rank, &d->l, err);
    if (rc < 0) {
        free(d);
        return rc;
    }
    ftc_deadline_t dl = ftc_deadline_in_ms((uint64_t)(o->timeout_ms > 0 ? o->timeout_ms : 60000));
    const ftc_dist_layout_t *l = &d->l;
    int ng = (l->dp > 1) + (l->tp > 1);
    ftc_fabric_t *fab[2] = {NULL, NULL};
    uint8_t me[2][FTC_FABRIC_ADDR_MAX];
    size_t melen[2] = {0, 0};
    uint8_t *addrs = calloc((size_t)o->world, FTC_FABRIC_ADDR_MAX);
    size_t *lens = calloc((size_t)o->world, sizeof *lens);
    uint8_t *table = calloc((size_t)o->world, FTC_DIST_BLOB_MAX);
    size_t *tlens = calloc((size_t)o->world, sizeof *tlens);
    if (!addrs || !lens || !table || !tlens) {
        rc = ftc_err_set(err, FTC_ENOMEM, "dist: out of memory");
        goto out;
    }
    bool use_nccl = o->coll == FTC_DIST_COLL_NCCL;
    for (int g = 0; g < ng && !use_nccl; g++)
        if ((rc = open_ep(o, &fab[g], me[g], &melen[g], err)) < 0)
            goto out;
    /* g = 0: the DP group when dp > 1, else the TP group */
    int is_dp[2] = {l->dp > 1, 0};
    if (use_nccl && ng > 0 && (!o->dir || !*o->dir)) {
        if ((rc = join_nccl_tcp(o, d, ng, is_dp, table, tlens, dl, err)) < 0)
            goto out;
    } else if (use_nccl) {
        for (int g = 0; g < ng; g++) {
            char sub[4096];
            int gr = is_dp[g] ? l->dp_rank : l->tp_rank, gn = is_dp[g] ? l->dp : l->tp;
            if ((rc = group_dir(o, l, is_dp[g], sub, sizeof sub, err)) < 0)
                goto out;
            rc = make_nccl_group(o, sub, NULL, gr, gn, dl, is_dp[g] ? &d->dp : &d->tp, err);
            if (rc < 0) {
                ftc_err_wrap(err, "the %s group (NCCL, rank %d of %d)", is_dp[g] ? "DP" : "TP",
                             gr, gn);
                goto out;
            }
        }
    } else if (o->dir && *o->dir) {
        for (int g = 0; g < ng; g++) {
            char sub[4096];
            int gr = is_dp[g] ? l->dp_rank : l->tp_rank, gn = is_dp[g] ? l->dp : l->tp;
            if ((rc = group_dir(o, l, is_dp[g], sub, sizeof sub, err)) < 0)
                goto out;
            rc = ftc_coll_exchange_dir(sub, gr, gn, me[g], melen[g], addrs, lens, dl, err);
            if (rc < 0)
                goto out; /* fab[g] is still ours: closed at out */
            rc = make_group(fab[g], gr, gn, addrs, lens, is_dp[g] ? &d->dp : &d->tp, err);
            fab[g] = NULL; /* owned by the group now, also on failure */
            if (rc < 0)
                goto out;
        }
    } else if (ng > 0) {
        /* one blob per rank: [len0 u16][addr0][len1 u16][addr1] */
        uint8_t blob[FTC_DIST_BLOB_MAX];
        size_t bl = 0;
        for (int g = 0; g < ng; g++) {
            blob[bl] = (uint8_t)(melen[g] & 0xff), blob[bl + 1] = (uint8_t)(melen[g] >> 8);
            memcpy(blob + bl + 2, me[g], melen[g]);
            bl += 2 + melen[g];
        }
        ftc_dist_rdzv_opts_t ro = rdzv_opts(o);
        rc = ftc_dist_rendezvous_tcp(&ro, blob, bl, table, tlens, dl, err);
        if (rc < 0)
            goto out;
        for (int g = 0; g < ng; g++) {
            int gn = is_dp[g] ? l->dp : l->tp, gr = is_dp[g] ? l->dp_rank : l->tp_rank;
            for (int m = 0; m < gn; m++) {
                int r = is_dp[g] ? m * l->tp + l->tp_rank : l->dp_rank * l->tp + m;
                const uint8_t *b = table + (size_t)r * FTC_DIST_BLOB_MAX;
                size_t pos = 0, al = 0;
                bool ok = true;
                for (int k = 0; k <= g; k++) {
                    /* a length is read only from inside the blob (tlens[r]
                     * <= FTC_DIST_BLOB_MAX): a malformed one must not send
                     * the next read past it */
                    if (pos + 2 > tlens[r]) {
                        ok = false;
                        break;
                    }
                    al = (size_t)b[pos] | (size_t)b[pos + 1] << 8;
                    if (k < g)
                        pos += 2 + al;
                }
                if (!ok || pos + 2 + al > tlens[r] || al == 0 || al > FTC_FABRIC_ADDR_MAX) {
                    rc = ftc_err_set(err, FTC_EPROTO, "rendezvous: rank %d's addresses are "
                                     "malformed (a different ftc version?)", r);
                    goto out;
                }
                memcpy(addrs + (size_t)m * FTC_FABRIC_ADDR_MAX, b + pos + 2, al);
                lens[m] = al;
            }
            rc = make_group(fab[g], gr, gn, addrs, lens, is_dp[g] ? &d->dp : &d->tp, err);
            fab[g] = NULL;
            if (rc < 0)
                goto out;
        }
    }
    *out = d;
    d = NULL;
out:
    for (int g = 0; g < 2; g++)
        ftc_fabric_close(fab[g]);
    ftc_dist_destroy(d);
    free(addrs);
    free(lens);
    free(table);
    free(tlens);
    return rc;
}

void ftc_dist_destroy(ftc_dist_t *d)
{
    if (!d)
        return;
    ftc_coll_destroy(d->dp);
    ftc_coll_destroy(d->tp);
    free(d);
}
