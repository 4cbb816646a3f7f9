/*
 * redis.c — see redis.h. hiredis 0.14 (Debian 12): blocking contexts with
 * socket timeouts; a timed-out or broken context is thrown away and re-made,
 * since hiredis leaves it unusable after an I/O error. A host name is
 * resolved here, within the connection attempt's deadline, and hiredis gets
 * numeric addresses only (its own getaddrinfo has no deadline).
 */
#include "detect/redis.h"

#include "core/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct ftc_redis {
    ftc_redis_url_t url;    /* where to (re)connect */
    ftc_redis_options_t o;  /* timeouts and backoff */
    redisContext *c;        /* NULL while down */
    bool up;                /* last command reached the server */
    uint64_t reconnects;    /* successful re-connections after a failure */
    uint64_t round_trips;   /* requests sent that waited for their replies */
    int backoff_ms;         /* next pause before a reconnect attempt (before jitter) */
    uint64_t rng;           /* this connection's jitter PRNG (splitmix64 state) */
    ftc_err_t err;          /* last error */
    char reply_err[24];     /* first word of the error reply the last command got ("READONLY");
                               "" when it got none (success, or no reply: connection failed) */
};

/* ---- URLs ------------------------------------------------------------------- */

static int ftc__hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) into out (NUL-terminated); -1 when malformed or too long. */
static int ftc__pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = ftc__hexval(s[i + 1]), lo = ftc__hexval(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

int ftc_redis_url_parse(const char *url, ftc_redis_url_t *out, ftc_err_t *err)
{
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (!url || strncmp(url, "redis://", 8) != 0)
        return ftc_err_set(
            err, FTC_ECONFIG,
            "redis URL must start with redis:// (redis://[user:password@]host:port/db)");
    const char *p = url + 8;
    const char *at = strrchr(p, '@');
    const char *slash = strchr(at ? at : p, '/');
    if (at && (!slash || at < slash)) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *user_end = colon ? colon : at;
        if (ftc__pct_decode(p, (size_t)(user_end - p), out->user, sizeof out->user) != 0)
            return ftc_err_set(err, FTC_ECONFIG, "redis URL: bad or too long user name");
        if (colon && ftc__pct_decode(colon + 1, (size_t)(at - colon - 1), out->password,
                                     sizeof out->password) != 0)
            return ftc_err_set(err, FTC_ECONFIG, "redis URL: bad or too long password");
        p = at + 1;
    }
    const char *hend = p + strcspn(p, ":/");
    size_t hl = (size_t)(hend - p);
    if (hl == 0 || hl >= sizeof out->host)
        return ftc_err_set(err, FTC_ECONFIG, "redis URL: missing or too long host");
    memcpy(out->host, p, hl);
    p = hend;
    if (*p == ':') {
        char *end;
        errno = 0;
        long port = strtol(p + 1, &end, 10);
        if (errno || end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
            return ftc_err_set(err, FTC_ECONFIG, "redis URL: port must be 1..65535");
        out->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        errno = 0;
        long db = strtol(p + 1, &end, 10);
        if (errno || *end || db < 0 || db > 65535)
            return ftc_err_set(err, FTC_ECONFIG, "redis URL: database must be a number 0..65535");
        out->db = (int)db;
    } else if (*p && strcmp(p, "/")) {
        return ftc_err_set(err, FTC_ECONFIG, "redis URL: unexpected text after the host");
    }
    if (!out->password[0]) {
        const char *pw = getenv("FTC_REDIS_PASSWORD");
        const char *file = getenv("FTC_REDIS_PASSWORD_FILE");
        if (pw && *pw) {
            if (strlen(pw) >= sizeof out->password)
                return ftc_err_set(err, FTC_ECONFIG, "FTC_REDIS_PASSWORD is too long");
            snprintf(out->password, sizeof out->password, "%s", pw);
        } else if (file && *file) {
            struct stat st; /* a FIFO's fopen waits for a writer, for ever */
            if (stat(file, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
                return ftc_err_set(err, FTC_EINVAL, "FTC_REDIS_PASSWORD_FILE %s: not a regular "
                                   "file", file);
            FILE *f = fopen(file, "r");
            if (!f)
                return ftc_err_errno(err, errno, "FTC_REDIS_PASSWORD_FILE %s", file);
            /* one byte more than fits: a longer password is an error, not cut */
            char buf[sizeof out->password + 1];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            int rerr = ferror(f) ? errno : 0; /* a directory opens, and reads EISDIR */
            fclose(f);
            if (rerr)
                return ftc_err_errno(err, rerr, "FTC_REDIS_PASSWORD_FILE %s: read", file);
            buf[n] = '\0';
            buf[strcspn(buf, "\r\n")] = '\0';
            if (!buf[0]) /* was no password at all, and the server's NOAUTH blamed the URL */
                return ftc_err_set(err, FTC_EINVAL,
                                   "FTC_REDIS_PASSWORD_FILE %s: its first line is empty; write "
                                   "the password there, or unset the variable",
                                   file);
            if (strlen(buf) >= sizeof out->password)
                return ftc_err_set(err, FTC_ECONFIG,
                                   "FTC_REDIS_PASSWORD_FILE %s: the password is longer than %zu "
                                   "bytes",
                                   file, sizeof out->password - 1);
            memcpy(out->password, buf, strlen(buf) + 1);
            memset(buf, 0, sizeof buf);
        }
    }
    return 0;
}

const char *ftc_redis_url_str(const ftc_redis_url_t *u, char *buf, size_t cap)
{
    snprintf(buf, cap, "redis://%s%s%s@%s:%d/%d", u->user, u->password[0] ? ":" : "",
             u->password[0] ? "***" : "", u->host, u->port, u->db);
    if (!u->user[0] && !u->password[0])
        snprintf(buf, cap, "redis://%s:%d/%d", u->host, u->port, u->db);
    return buf;
}

/* ---- connection ----------------------------------------------------------------- */

static struct timeval ftc__tv(int ms)
{
    if (ms < 1)
        ms = 1;
    return (struct timeval){ms / 1000, (ms % 1000) * 1000};
}

static void ftc__drop(ftc_redis_t *r)
{
    if (r->c)
        redisFree(r->c);
    r->c = NULL;
    r->up = false;
}

static const char *ftc__type_name(int t)
{
    switch (t) {
    case REDIS_REPLY_STRING:
        return "string";
    case REDIS_REPLY_ARRAY:
        return "array";
    case REDIS_REPLY_INTEGER:
        return "integer";
    case REDIS_REPLY_NIL:
        return "nil";
    case REDIS_REPLY_STATUS:
        return "status";
    case REDIS_REPLY_ERROR:
        return "error";
    }
    return "unknown";
}

/* Whether an I/O error of c was the deadline's (the socket timeout fired, or
 * d passed meanwhile) rather than a broken connection. */
static bool ftc__io_timeout(const redisContext *c, ftc_deadline_t d)
{
    return (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) ||
           ftc_deadline_expired(d);
}

/* Sends what c has queued (when send) and reads one reply, all by d.
 * hiredis's blocking calls bound each read and write by the socket timeout
 * only, so a reply that trickles in (a slow or lossy link, a huge reply) took
 * as long as it came, however far past the command's deadline; here every
 * read and write gets only what is left of d. 0 with *reply set; else
 * FTC_ETIMEDOUT (d passed), FTC_EREDIS (connection broken) or FTC_EPROTO (not
 * the Redis protocol), with c->errstr saying what when it was I/O. */
static int ftc__roundtrip_io(redisContext *c, ftc_deadline_t d, bool send, void **reply);

static int ftc__roundtrip(redisContext *c, ftc_deadline_t d, bool send, void **reply)
{
    int rc = ftc__roundtrip_io(c, d, send, reply);
    if (rc == FTC_ETIMEDOUT) /* say so, not errno's "Resource temporarily unavailable" */
        snprintf(c->errstr, sizeof c->errstr, "the deadline passed");
    return rc;
}

static int ftc__roundtrip_io(redisContext *c, ftc_deadline_t d, bool send, void **reply)
{
    *reply = NULL;
    int done = !send;
    while (!done) {
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return FTC_ETIMEDOUT;
        redisSetTimeout(c, ftc__tv(ms));
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return ftc__io_timeout(c, d) ? FTC_ETIMEDOUT : FTC_EREDIS;
    }
    for (;;) {
        if (redisGetReplyFromReader(c, reply) != REDIS_OK)
            return FTC_EPROTO;
        if (*reply)
            return 0;
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return FTC_ETIMEDOUT;
        redisSetTimeout(c, ftc__tv(ms));
        if (redisBufferRead(c) != REDIS_OK)
            return ftc__io_timeout(c, d) ? FTC_ETIMEDOUT : FTC_EREDIS;
    }
}

/* One command of the connection's setup (AUTH, SELECT, PING) by d; NULL on
 * failure (c->errstr, or "did not answer in time"). */
static redisReply *ftc__setup_cmd(redisContext *c, ftc_deadline_t d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int ok = redisvAppendCommand(c, fmt, ap);
    va_end(ap);
    void *rep = NULL;
    if (ok != REDIS_OK)
        return NULL;
    int rc = ftc__roundtrip(c, d, true, &rep);
    if (rc == FTC_ETIMEDOUT) /* not errno's "Resource temporarily unavailable" */
        snprintf(c->errstr, sizeof c->errstr,
                 "did not answer in time (is redis-server stopped or overloaded?)");
    return rc ? NULL : rep;
}

/* What to add to a setup command's failure when what answered is no Redis
 * (an HTTP server, another service on the port): hiredis says only
 * "Protocol error, got "H" as reply type byte". */
static const char *ftc__not_redis_hint(const redisContext *c)
{
    return c->err == REDIS_ERR_PROTOCOL ? " (what answers there does not speak Redis's protocol: "
                                          "check the host and port of --redis / FTC_REDIS_URL)"
                                        : "";
}

/* ---- name resolution with a deadline ---------------------------------------------- */

#define FTC__ADDRS 8   /* addresses of one name tried in turn */
#define FTC__LOOKUPS 4 /* lookup threads of this process at most (see ftc__resolve) */

/* lookup threads still running, including those whose callers gave up */
static atomic_int ftc__lookups_running;

/* One lookup, shared by the caller and a detached thread that runs the
 * blocking getaddrinfo: whichever lets go last frees it, so a caller whose
 * deadline passed returns at once and the thread ends on its own when the
 * resolver gives up (glibc's getaddrinfo cannot be interrupted, and
 * getaddrinfo_a's gai_cancel cannot cancel a lookup already running). */
typedef struct ftc__lookup {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled when done */
    int refs;               /* 2: caller and thread; under mu */
    bool done;              /* under mu */
    int gai;                /* getaddrinfo's result (0, EAI_*) */
    int gai_errno;          /* errno when gai is EAI_SYSTEM */
    int n;                  /* addresses found (IPv4 first, as hiredis tries them) */
    char addr[FTC__ADDRS][INET6_ADDRSTRLEN];
    char host[256];
} ftc__lookup_t;

static void ftc__lookup_unref(ftc__lookup_t *l)
{
    pthread_mutex_lock(&l->mu);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (last) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
    }
}

static void *ftc__lookup_main(void *arg)
{
    ftc__lookup_t *l = arg;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(l->host, NULL, &hints, &res);
    int e = errno;
    int n = 0;
    char addr[FTC__ADDRS][INET6_ADDRSTRLEN];
    for (int fam = 0; g == 0 && fam < 2; fam++)
        for (struct addrinfo *a = res; a && n < FTC__ADDRS; a = a->ai_next) {
            const void *p = NULL;
            if (fam == 0 && a->ai_family == AF_INET)
                p = &((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr;
            else if (fam == 1 && a->ai_family == AF_INET6)
                p = &((const struct sockaddr_in6 *)(const void *)a->ai_addr)->sin6_addr;
            if (p && inet_ntop(a->ai_family, p, addr[n], sizeof addr[n]))
                n++;
        }
    if (res)
        freeaddrinfo(res);
    pthread_mutex_lock(&l->mu);
    l->gai = g == 0 && n == 0 ? EAI_NODATA : g;
    l->gai_errno = e;
    l->n = n;
    memcpy(l->addr, addr, sizeof addr);
    l->done = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    ftc__lookup_unref(l);
    atomic_fetch_sub(&ftc__lookups_running, 1);
    return NULL;
}

/* The numeric addresses of r's host (up to FTC__ADDRS in out, *n of them),
 * found by d: a numeric host is taken as it is; a name is looked up in a
 * detached thread that the caller stops waiting for at d (a DNS server that
 * does not answer held the caller for the resolver's own timeouts, 10 s
 * and more, past every deadline). A thread whose caller gave up runs on
 * until the resolver gives up: while FTC__LOOKUPS of them run (reconnects
 * during a DNS outage), no new one is started and the attempt fails at once
 * with FTC_ETIMEDOUT, so threads do not pile up. FTC_ETIMEDOUT / FTC_EREDIS
 * naming the host. */
static int ftc__resolve(ftc_redis_t *r, ftc_deadline_t d, char (*out)[INET6_ADDRSTRLEN], int *n)
{
    unsigned char bin[sizeof(struct in6_addr)];
    *n = 0;
    if (inet_pton(AF_INET, r->url.host, bin) == 1 || inet_pton(AF_INET6, r->url.host, bin) == 1) {
        snprintf(out[0], INET6_ADDRSTRLEN, "%s", r->url.host);
        *n = 1;
        return 0;
    }
    int running = atomic_fetch_add(&ftc__lookups_running, 1);
    if (running >= FTC__LOOKUPS) {
        atomic_fetch_sub(&ftc__lookups_running, 1);
        return ftc_err_set(&r->err, FTC_ETIMEDOUT,
                           "redis %s:%d: %d earlier lookups of host names have not finished "
                           "(is the DNS server reachable? a numeric address in --redis / "
                           "FTC_REDIS_URL needs no lookup)",
                           r->url.host, r->url.port, running);
    }
    ftc__lookup_t *l = calloc(1, sizeof *l);
    if (!l) {
        atomic_fetch_sub(&ftc__lookups_running, 1);
        return ftc_err_set(&r->err, FTC_ENOMEM, "redis: out of memory resolving %s", r->url.host);
    }
    snprintf(l->host, sizeof l->host, "%s", r->url.host);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the deadline's clock */
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    l->refs = 2;
    pthread_attr_t ta;
    pthread_t tid;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    /* every signal blocked in the lookup thread: a signal meant for the
     * caller's threads (SIGTERM to a supervisor) is not taken by it */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int pe = pthread_create(&tid, &ta, ftc__lookup_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&ta);
    if (pe) {
        atomic_fetch_sub(&ftc__lookups_running, 1);
        l->refs = 1;
        ftc__lookup_unref(l);
        return ftc_err_set(&r->err, FTC_EREDIS, "redis %s:%d: cannot start the lookup of the "
                           "host name: %s", r->url.host, r->url.port, strerror(pe));
    }
    pthread_mutex_lock(&l->mu);
    while (!l->done && !ftc_deadline_expired(d)) {
        struct timespec ts = {(time_t)(d.at_ns / 1000000000u), (long)(d.at_ns % 1000000000u)};
        if (d.at_ns == UINT64_MAX) {
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    bool done = l->done;
    int gai = l->gai, ge = l->gai_errno;
    if (done) {
        *n = l->n;
        memcpy(out, l->addr, sizeof l->addr);
    }
    pthread_mutex_unlock(&l->mu);
    ftc__lookup_unref(l);
    if (!done)
        return ftc_err_set(&r->err, FTC_ETIMEDOUT,
                           "redis %s:%d: the lookup of the host name did not finish in time "
                           "(is the DNS server reachable? a numeric address in --redis / "
                           "FTC_REDIS_URL needs no lookup)",
                           r->url.host, r->url.port);
    if (gai)
        return ftc_err_set(&r->err, FTC_EREDIS,
                           "redis %s:%d: cannot resolve the host name: %s (check --redis / "
                           "FTC_REDIS_URL)",
                           r->url.host, r->url.port,
                           gai == EAI_SYSTEM ? strerror(ge) : gai_strerror(gai));
    return 0;
}

/* One connection attempt with AUTH and SELECT, bounded by d. */
static int ftc__connect_once(ftc_redis_t *r, ftc_deadline_t d)
{
    int ms = ftc_deadline_remaining_ms(d);
    if (ms > r->o.connect_timeout_ms)
        ms = r->o.connect_timeout_ms;
    if (ms <= 0)
        return ftc_err_set(&r->err, FTC_ETIMEDOUT, "redis %s:%d: deadline passed before connecting",
                           r->url.host, r->url.port);
    /* the connect and the setup's commands share the attempt's time (ms, at
     * most what is left of d), read by read */
    ftc_deadline_t dc = ftc_deadline_in_ms((uint64_t)ms);
    char addr[FTC__ADDRS][INET6_ADDRSTRLEN];
    int naddr = 0;
    int rc = ftc__resolve(r, dc, addr, &naddr);
    if (rc)
        return rc;
    /* each address in turn (hiredis's order: IPv4 first), with what is left */
    redisContext *c = NULL;
    for (int i = 0; i < naddr; i++) {
        int left = ftc_deadline_remaining_ms(dc);
        if (left <= 0 && c)
            break; /* report the last address's error */
        if (left <= 0)
            return ftc_err_set(&r->err, FTC_ETIMEDOUT, "redis %s:%d: deadline passed while "
                               "resolving the host name", r->url.host, r->url.port);
        if (c)
            redisFree(c);
        c = redisConnectWithTimeout(addr[i], r->url.port, ftc__tv(left));
        if (!c)
            return ftc_err_set(&r->err, FTC_ENOMEM, "redis: cannot allocate a context");
        if (!c->err)
            break;
    }
    if (c->err) {
        bool named = strcmp(addr[naddr - 1], r->url.host) != 0;
        ftc_err_set(&r->err, FTC_EREDIS,
                    "redis %s:%d unreachable%s%s%s: %s (is redis-server running? check --redis / "
                    "FTC_REDIS_URL)",
                    r->url.host, r->url.port, named ? " (at " : "", named ? addr[naddr - 1] : "",
                    named ? ")" : "", c->errstr);
        redisFree(c);
        return FTC_EREDIS;
    }
    redisSetTimeout(c, ftc__tv(ms));
    redisEnableKeepAlive(c);
    r->c = c;
    if (r->url.password[0]) {
        redisReply *rep;
        if (r->url.user[0])
            rep = ftc__setup_cmd(c, dc, "AUTH %s %s", r->url.user, r->url.password);
        else
            rep = ftc__setup_cmd(c, dc, "AUTH %s", r->url.password);
        if (!rep) {
            ftc_err_set(&r->err, FTC_EREDIS, "redis %s:%d: AUTH: %s%s", r->url.host,
                        r->url.port, c->errstr, ftc__not_redis_hint(c));
            ftc__drop(r);
            return FTC_EREDIS;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            ftc_err_set(&r->err, FTC_EAUTH,
                        "redis %s:%d refused the password (%.80s): check the URL, "
                        "FTC_REDIS_PASSWORD or FTC_REDIS_PASSWORD_FILE",
                        r->url.host, r->url.port, rep->str);
            freeReplyObject(rep);
            ftc__drop(r);
            return FTC_EAUTH;
        }
        freeReplyObject(rep);
    }
    redisReply *rep = r->url.db ? ftc__setup_cmd(c, dc, "SELECT %d", r->url.db)
                                : ftc__setup_cmd(c, dc, "PING");
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        int code = rep && rep->str && strstr(rep->str, "NOAUTH") ? FTC_EAUTH : FTC_EREDIS;
        ftc_err_set(&r->err, code, "redis %s:%d: %s: %s%s", r->url.host, r->url.port,
                    r->url.db ? "SELECT" : "PING", rep ? rep->str : c->errstr,
                    code == FTC_EAUTH ? " (the server needs a password: put it in the URL, "
                                        "FTC_REDIS_PASSWORD or FTC_REDIS_PASSWORD_FILE)"
                    : rep             ? ""
                                      : ftc__not_redis_hint(c));
        if (rep)
            freeReplyObject(rep);
        ftc__drop(r);
        return code;
    }
    freeReplyObject(rep);
    r->up = true;
    return 0;
}

/* ---- reconnect jitter ------------------------------------------------------------ */

static uint64_t ftc__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int ftc__redis_jitter_ms(uint64_t *rng, int backoff_ms, int max_ms)
{
    if (backoff_ms <= 0)
        return 0;
    /* uniform in backoff +-25%, cut at the cap (which stays a cap: the
     * detector's grace after an outage counts on it), not piled up on it */
    int64_t lo = (int64_t)backoff_ms - backoff_ms / 4, hi = (int64_t)backoff_ms + backoff_ms / 4;
    if (max_ms > 0 && hi > max_ms)
        hi = max_ms;
    if (lo > hi)
        return (int)hi;
    return (int)(lo + (int64_t)(ftc__splitmix64(rng) % (uint64_t)(hi - lo + 1)));
}

/* A seed per process (pid and both clocks, made again in a forked child) and
 * a sequence number per connection: connections of one process, and
 * processes started together, draw different pauses. */
static uint64_t ftc__jitter_seed(void)
{
    static _Atomic uint64_t seq;
    static _Atomic uint64_t seed;
    static _Atomic long seed_pid;
    long pid = (long)getpid();
    if (atomic_load(&seed_pid) != pid) {
        struct timespec rt, mt;
        clock_gettime(CLOCK_REALTIME, &rt);
        clock_gettime(CLOCK_MONOTONIC, &mt);
        uint64_t st = (uint64_t)pid * 0x100000001b3ull ^ (uint64_t)rt.tv_sec * 1000000000ull ^
                      (uint64_t)rt.tv_nsec ^ ((uint64_t)mt.tv_nsec << 32) ^ (uint64_t)mt.tv_sec;
        atomic_store(&seed, ftc__splitmix64(&st));
        atomic_store(&seed_pid, pid);
    }
    uint64_t st = atomic_load(&seed) + atomic_fetch_add(&seq, 1) * 0xd1b54a32d192ed03ull;
    return ftc__splitmix64(&st);
}

void ftc__redis_jitter_seed(ftc_redis_t *r, uint64_t seed) { r->rng = seed; }

int ftc__redis_jitter_next(ftc_redis_t *r, int backoff_ms)
{
    return ftc__redis_jitter_ms(&r->rng, backoff_ms, r->o.backoff_max_ms);
}

int ftc_redis_reconnect(ftc_redis_t *r, ftc_deadline_t d)
{
    ftc__drop(r);
    for (;;) {
        int rc = ftc__connect_once(r, d);
        if (rc == 0) {
            r->reconnects++;
            r->backoff_ms = r->o.backoff_min_ms;
            return 0;
        }
        if (rc == FTC_EAUTH)
            return rc; /* retrying a wrong password does not help */
        int left = ftc_deadline_remaining_ms(d);
        if (left <= 0)
            return rc;
        /* jittered: clients that lost one server do not all retry in lockstep */
        int pause = ftc__redis_jitter_next(r, r->backoff_ms);
        ftc_sleep_ms((uint64_t)(pause < left ? pause : left));
        r->backoff_ms = r->backoff_ms * 2 > r->o.backoff_max_ms ? r->o.backoff_max_ms
                                                               : r->backoff_ms * 2;
        /* out of time: FTC_ETIMEDOUT as before (callers stop at it), with the
         * last attempt's reason ("unreachable: Connection refused"), not the
         * "deadline passed before connecting" of one more attempt */
        if (ftc_deadline_remaining_ms(d) <= 0)
            return r->err.code = FTC_ETIMEDOUT;
    }
}

ftc_redis_t *ftc_redis_connect(const ftc_redis_url_t *url, const ftc_redis_options_t *o,
                               ftc_err_t *err)
{
    ftc_redis_t *r = calloc(1, sizeof *r);
    if (!r) {
        ftc_err_set(err, FTC_ENOMEM, "redis: out of memory");
        return NULL;
    }
    ftc_redis_options_t def = FTC_REDIS_OPTIONS_INIT;
    r->url = *url;
    r->o = o ? *o : def;
    /* bounded, so that a pause is never 0 (a reconnect spin) and the
     * doubling of the backoff cannot overflow */
    const char *bad = r->o.connect_timeout_ms < 1 || r->o.connect_timeout_ms > 3600000
                          ? "connect_timeout_ms (1..3600000)"
                      : r->o.command_timeout_ms < 1 || r->o.command_timeout_ms > 3600000
                          ? "command_timeout_ms (1..3600000)"
                      : r->o.backoff_min_ms < 1 || r->o.backoff_min_ms > 600000
                          ? "backoff_min_ms (1..600000)"
                      : r->o.backoff_max_ms < r->o.backoff_min_ms || r->o.backoff_max_ms > 600000
                          ? "backoff_max_ms (backoff_min_ms..600000)"
                          : NULL;
    if (bad) {
        ftc_err_set(err, FTC_EINVAL, "redis options: %s out of range: connect %d, command %d, "
                    "backoff %d..%d ms", bad, r->o.connect_timeout_ms, r->o.command_timeout_ms,
                    r->o.backoff_min_ms, r->o.backoff_max_ms);
        free(r);
        return NULL;
    }
    r->backoff_ms = r->o.backoff_min_ms;
    r->rng = ftc__jitter_seed();
    int rc = ftc__connect_once(r, ftc_deadline_in_ms((uint64_t)r->o.connect_timeout_ms));
    if (rc) {
        if (err)
            *err = r->err;
        ftc_redis_close(r);
        return NULL;
    }
    return r;
}

void ftc_redis_close(ftc_redis_t *r)
{
    if (!r)
        return;
    ftc__drop(r);
    memset(r->url.password, 0, sizeof r->url.password);
    free(r);
}

const char *ftc_redis_errstr(const ftc_redis_t *r) { return ftc_err_str(&r->err); }
uint64_t ftc_redis_reconnects(const ftc_redis_t *r) { return r->reconnects; }
uint64_t ftc_redis_round_trips(const ftc_redis_t *r) { return r->round_trips; }
bool ftc_redis_is_up(const ftc_redis_t *r) { return r->up; }
int ftc_redis_fd(const ftc_redis_t *r) { return r->c ? r->c->fd : -1; }

void ftc_redis_reply_free(ftc_redis_reply_t *r)
{
    if (r)
        freeReplyObject(r);
}

/* ---- error replies ---------------------------------------------------------------- */

/* Keeps the first word of an error reply (its code: "READONLY", "WRONGTYPE", or a script's
 * own "FTC_STALE"), what ftc_redis_transient and ftc_redis_hint go by. */
static void ftc__reply_err_word(ftc_redis_t *r, const char *str)
{
    size_t n = strcspn(str ? str : "", " \r\n");
    if (n >= sizeof r->reply_err)
        n = sizeof r->reply_err - 1;
    memcpy(r->reply_err, str ? str : "", n);
    r->reply_err[n] = '\0';
}

const char *ftc_redis_reply_error(const ftc_redis_t *r) { return r->reply_err; }

/* Error replies that name a state the server leaves by itself: retrying later succeeds. */
static const char *const ftc__transient_words[] = {
    "LOADING",     /* loading its data set after a restart */
    "BUSY",        /* a script or module command runs past busy-reply-threshold */
    "TRYAGAIN",    /* cluster: keys of one slot moving */
    "CLUSTERDOWN", /* cluster: slots not served (a failover) */
    "MASTERDOWN",  /* a replica that lost its primary (replica-serve-stale-data no) */
    "NOREPLICAS",  /* min-replicas-to-write not met: replicas reconnecting */
};

bool ftc_redis_transient(const ftc_redis_t *r)
{
    if (r->err.code != FTC_EREDIS && r->err.code != FTC_ETIMEDOUT)
        return false; /* FTC_EAUTH (a password refused, NOAUTH), FTC_EINVAL, FTC_ENOMEM... */
    if (!r->reply_err[0])
        return true; /* no reply: the connection failed or timed out */
    for (size_t i = 0; i < sizeof ftc__transient_words / sizeof ftc__transient_words[0]; i++)
        if (!strcmp(r->reply_err, ftc__transient_words[i]))
            return true;
    return false;
}

const char *ftc_redis_hint(const ftc_redis_t *r)
{
    static const struct {
        const char *word, *hint;
    } hints[] = {
        {"READONLY", "the URL names a read-only replica: point --redis / FTC_REDIS_URL at the "
                     "primary"},
        {"OOM", "Redis is at its maxmemory: raise maxmemory or free memory on it"},
        {"MISCONF", "Redis refuses writes because it cannot save its snapshot: fix its disk "
                    "or persistence settings (see its log)"},
        {"WRONGTYPE", "delete that key or use another job id"},
        {"NOPERM", "the ACL user may not run a command ftc needs (EVALSHA, EVAL) or use the "
                   "job's keys (ftc:{JOB}:*): grant them"},
        {"NOAUTH", "the server needs a password: put it in the URL, FTC_REDIS_PASSWORD or "
                   "FTC_REDIS_PASSWORD_FILE"},
        {"WRONGPASS", "check the user and password in the URL, FTC_REDIS_PASSWORD or "
                      "FTC_REDIS_PASSWORD_FILE"},
        {"NOSCRIPT", "the server does not keep scripts loaded with EVAL (a proxy in front of "
                     "Redis?): point the URL at Redis itself"},
        {"ERR", "the server refused the command (a Lua error in a script: a Redis version "
                "ftc does not support, or a bug): see Redis's message"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
        if (!strcmp(r->reply_err, hints[i].word))
            return hints[i].hint;
    return "";
}

/* ---- commands ------------------------------------------------------------------- */

/* ftc_redis_cmd by the deadline d (a script's EVALSHA and its EVAL fallback
 * share one). */
static int ftc__cmd_by(ftc_redis_t *r, ftc_deadline_t d, bool idempotent,
                       ftc_redis_reply_t **reply, int argc, const char **argv,
                       const size_t *lens)
{
    if (reply)
        *reply = NULL;
    if (argc < 1 || !argv || !argv[0])
        return ftc_err_set(&r->err, FTC_EINVAL, "redis: a command needs its name (%d arguments)",
                           argc);
    const char *name = argv[0];
    char cmdname[32];
    snprintf(cmdname, sizeof cmdname, "%.*s", (int)(lens ? (lens[0] < 31 ? lens[0] : 31) : 31),
             name);
    r->reply_err[0] = '\0';
    for (int attempt = 0;; attempt++) {
        if (!r->c) {
            int rc = ftc_redis_reconnect(r, d);
            if (rc)
                return ftc_err_wrap(&r->err, "%s", cmdname);
        }
        if (redisAppendCommandArgv(r->c, argc, argv, lens) != REDIS_OK) {
            ftc_err_set(&r->err, FTC_ENOMEM, "%s: cannot queue the command: %s", cmdname,
                        r->c->errstr);
            ftc__drop(r);
            return FTC_ENOMEM;
        }
        r->round_trips++;
        void *vrep = NULL;
        int io = ftc__roundtrip(r->c, d, true, &vrep);
        redisReply *rep = vrep;
        if (io) {
            bool timeout = io == FTC_ETIMEDOUT;
            ftc_err_set(&r->err, timeout ? FTC_ETIMEDOUT : FTC_EREDIS,
                        "%s: redis %s:%d %s: %s", cmdname, r->url.host, r->url.port,
                        timeout ? "did not answer in time" : "connection failed",
                        r->c->errstr[0] ? r->c->errstr : "deadline passed");
            ftc__drop(r);
            if (!idempotent || ftc_deadline_expired(d) || attempt > 16)
                return r->err.code;
            continue;
        }
        r->up = true;
        if (rep->type == REDIS_REPLY_ERROR) {
            int code = strncmp(rep->str, "NOAUTH", 6) == 0 ? FTC_EAUTH : FTC_EREDIS;
            ftc__reply_err_word(r, rep->str);
            if (strstr(rep->str, "WRONGTYPE") && argc > 1 && strncasecmp(cmdname, "EVAL", 4))
                /* a key holding another type: say which one (scripts: ftc_redis_eval) */
                ftc_err_set(&r->err, code, "%s %.*s: redis error: %.300s", cmdname,
                            (int)(lens ? (lens[1] < 200 ? lens[1] : 200) : 200), argv[1],
                            rep->str);
            else
                ftc_err_set(&r->err, code, "%s: redis error: %.300s", cmdname, rep->str);
            if (reply && strncmp(rep->str, "NOSCRIPT", 8) == 0) {
                *reply = rep; /* the script caller needs to see it */
                return code;
            }
            freeReplyObject(rep);
            return code;
        }
        if (reply)
            *reply = rep;
        else
            freeReplyObject(rep);
        return 0;
    }
}

int ftc_redis_cmd(ftc_redis_t *r, bool idempotent, ftc_redis_reply_t **reply, int argc,
                  const char **argv, const size_t *lens)
{
    return ftc__cmd_by(r, ftc_deadline_in_ms((uint64_t)r->o.command_timeout_ms), idempotent,
                       reply, argc, argv, lens);
}

int ftc_redis_cmdv(ftc_redis_t *r, bool idempotent, ftc_redis_reply_t **reply, ...)
{
    /* count first: a command is sent whole or not at all (64 on the stack,
     * more allocated), never cut to what fits */
    enum { ON_STACK = 64 };
    const char *stack_argv[ON_STACK];
    va_list ap;
    va_start(ap, reply);
    size_t argc = 0;
    while (va_arg(ap, const char *))
        argc++;
    va_end(ap);
    if (reply)
        *reply = NULL;
    if (argc > INT_MAX)
        return ftc_err_set(&r->err, FTC_EINVAL, "command of %zu arguments: at most %d", argc,
                           INT_MAX);
    const char **argv = stack_argv;
    if (argc > ON_STACK) {
        argv = malloc(argc * sizeof *argv);
        if (!argv)
            return ftc_err_set(&r->err, FTC_ENOMEM, "command of %zu arguments: out of memory",
                               argc);
    }
    va_start(ap, reply);
    for (size_t i = 0; i < argc; i++)
        argv[i] = va_arg(ap, const char *);
    va_end(ap);
    int rc = ftc_redis_cmd(r, idempotent, reply, (int)argc, argv, NULL);
    if (argv != stack_argv)
        free(argv);
    return rc;
}

/* Frees the replies of a pipeline read so far and NULLs them. */
static void ftc__replies_free(ftc_redis_reply_t **replies, int n)
{
    for (int i = 0; replies && i < n; i++) {
        ftc_redis_reply_free(replies[i]);
        replies[i] = NULL;
    }
}

int ftc_redis_pipeline(ftc_redis_t *r, bool idempotent, int n, const int *argcs,
                       const char **const *argvs, const size_t *const *lens,
                       ftc_redis_reply_t **replies)
{
    for (int i = 0; replies && i < n; i++)
        replies[i] = NULL;
    if (n < 0 || (n > 0 && (!argcs || !argvs)))
        return ftc_err_set(&r->err, FTC_EINVAL, "pipeline: %d commands without arguments", n);
    for (int i = 0; i < n; i++)
        if (argcs[i] < 1 || !argvs[i])
            return ftc_err_set(&r->err, FTC_EINVAL, "pipeline: command %d of %d is empty", i, n);
    if (n == 0)
        return 0;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)r->o.command_timeout_ms);
    r->reply_err[0] = '\0';
    for (int attempt = 0;; attempt++) {
        if (!r->c) {
            int rc = ftc_redis_reconnect(r, d);
            if (rc)
                return ftc_err_wrap(&r->err, "pipeline of %d commands", n);
        }
        for (int i = 0; i < n; i++) {
            if (redisAppendCommandArgv(r->c, argcs[i], argvs[i], lens ? lens[i] : NULL) !=
                REDIS_OK) {
                /* only out of memory; the output buffer holds a partial batch */
                ftc_err_set(&r->err, FTC_ENOMEM, "pipeline: cannot queue command %d of %d: %s", i,
                            n, r->c->errstr);
                ftc__drop(r);
                return FTC_ENOMEM;
            }
        }
        r->round_trips++;
        int failed = 0; /* an I/O error or timeout while reading replies */
        int first_err = -1, err_code = 0;
        for (int i = 0; i < n && !failed; i++) {
            void *rep = NULL;
            /* the batch is sent with the first; every read is bounded by d */
            int io = ftc__roundtrip(r->c, d, i == 0, &rep);
            if (io == FTC_EPROTO) {
                ftc_err_set(&r->err, FTC_EPROTO, "pipeline: protocol error from redis %s:%d",
                            r->url.host, r->url.port);
                failed = FTC_EPROTO;
                break;
            }
            if (io) {
                bool timeout = io == FTC_ETIMEDOUT;
                ftc_err_set(&r->err, io,
                            "pipeline: redis %s:%d %s after %d of %d replies: %s", r->url.host,
                            r->url.port, timeout ? "did not answer in time" : "connection failed",
                            i, n, r->c->errstr[0] ? r->c->errstr : "deadline passed");
                failed = io;
                break;
            }
            redisReply *rp = rep;
            r->up = true;
            if (rp->type == REDIS_REPLY_ERROR && first_err < 0) {
                first_err = i;
                ftc__reply_err_word(r, rp->str);
                err_code = strncmp(rp->str, "NOAUTH", 6) == 0 ? FTC_EAUTH : FTC_EREDIS;
                ftc_err_set(&r->err, err_code, "command %d of %d (%.*s): redis error: %.300s", i,
                            n, (int)(lens && lens[i] ? (lens[i][0] < 31 ? lens[i][0] : 31) : 31),
                            argvs[i][0], rp->str);
            }
            if (replies)
                replies[i] = rp;
            else
                freeReplyObject(rp);
        }
        if (!failed)
            return first_err < 0 ? 0 : err_code;
        /* the connection's state is unknown: throw it away with what was read */
        r->reply_err[0] = '\0';
        ftc__replies_free(replies, n);
        ftc__drop(r);
        if (!idempotent || ftc_deadline_expired(d) || attempt > 16)
            return failed;
    }
}

int ftc_redis_want_int(const ftc_redis_reply_t *rep, const char *what, long long *v, ftc_err_t *err)
{
    if (!rep || rep->type != REDIS_REPLY_INTEGER)
        return ftc_err_set(err, FTC_EPROTO, "%s: expected an integer reply, got %s", what,
                           rep ? ftc__type_name(rep->type) : "nothing");
    *v = rep->integer;
    return 0;
}

int ftc_redis_want_status(const ftc_redis_reply_t *rep, const char *what, const char *status,
                          ftc_err_t *err)
{
    if (!rep || rep->type != REDIS_REPLY_STATUS || (status && strcmp(rep->str, status)))
        return ftc_err_set(err, FTC_EPROTO, "%s: expected status %s, got %s%s%.60s", what,
                           status ? status : "", rep ? ftc__type_name(rep->type) : "nothing",
                           rep && rep->str ? " " : "", rep && rep->str ? rep->str : "");
    return 0;
}

int ftc_redis_want_str(const ftc_redis_reply_t *rep, const char *what, const char **s, size_t *len,
                       ftc_err_t *err)
{
    if (rep && rep->type == REDIS_REPLY_NIL)
        return ftc_err_set(err, FTC_ENOENT, "%s: no such key", what);
    if (!rep || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS))
        return ftc_err_set(err, FTC_EPROTO, "%s: expected a string reply, got %s", what,
                           rep ? ftc__type_name(rep->type) : "nothing");
    *s = rep->str;
    if (len)
        *len = rep->len;
    return 0;
}

int ftc_redis_want_array(const ftc_redis_reply_t *rep, const char *what, long n,
                         ftc_redis_reply_t ***elems, size_t *count, ftc_err_t *err)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        return ftc_err_set(err, FTC_EPROTO, "%s: expected an array reply, got %s", what,
                           rep ? ftc__type_name(rep->type) : "nothing");
    if (n >= 0 && rep->elements != (size_t)n)
        return ftc_err_set(err, FTC_EPROTO, "%s: expected %ld elements, got %zu", what, n,
                           rep->elements);
    *elems = rep->element;
    *count = rep->elements;
    return 0;
}

int ftc_redis_str_to_ll(const ftc_redis_reply_t *rep, const char *what, long long *v,
                        ftc_err_t *err)
{
    if (rep && rep->type == REDIS_REPLY_INTEGER) {
        *v = rep->integer;
        return 0;
    }
    const char *s;
    size_t len;
    int rc = ftc_redis_want_str(rep, what, &s, &len, err);
    if (rc)
        return rc;
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return ftc_err_set(err, FTC_EPROTO, "%s: expected a number, got %zu bytes", what, len);
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    /* a whole number: strtoll alone took a leading space or '+' */
    bool digit = isdigit((unsigned char)buf[buf[0] == '-']);
    long long x = strtoll(buf, &end, 10);
    if (!digit || errno || *end)
        return ftc_err_set(err, FTC_EPROTO, "%s: expected a number, got '%.20s'", what, buf);
    *v = x;
    return 0;
}

/* ---- scripts ------------------------------------------------------------------- */

void ftc_redis_script_init(ftc_redis_script_t *s, const char *name, const char *src)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    s->name = name;
    s->src = src;
    EVP_Digest(src, strlen(src), md, &mdlen, EVP_sha1(), NULL);
    for (unsigned i = 0; i < mdlen && i < 20; i++)
        snprintf(s->sha + 2 * i, 3, "%02x", md[i]);
    s->sha[40] = '\0';
}

int ftc_redis_eval(ftc_redis_t *r, const ftc_redis_script_t *s, int nkeys, const char **keys,
                   int nargs, const char **args, ftc_redis_reply_t **reply)
{
    enum { MAX_ARGS = 64 };
    const char *argv[MAX_ARGS + 3];
    char nk[16];
    if (nkeys < 0 || nargs < 0 || nkeys > MAX_ARGS || nargs > MAX_ARGS - nkeys)
        return ftc_err_set(&r->err, FTC_EINVAL,
                           "script %s: %d keys and %d arguments: at most %d in all", s->name,
                           nkeys, nargs, MAX_ARGS);
    snprintf(nk, sizeof nk, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVALSHA";
    argv[argc++] = s->sha;
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    /* one deadline for the whole call: a late NOSCRIPT leaves the EVAL only
     * what is left of it, not a fresh command_timeout_ms */
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)r->o.command_timeout_ms);
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc__cmd_by(r, d, true, &rep, argc, argv, NULL);
    if (rc && rep && rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "NOSCRIPT", 8)) {
        ftc_redis_reply_free(rep);
        rep = NULL;
        argv[0] = "EVAL";
        argv[1] = s->src;
        rc = ftc__cmd_by(r, d, true, &rep, argc, argv, NULL);
    }
    if (rc) {
        ftc_redis_reply_free(rep);
        if (strstr(ftc_err_str(&r->err), "WRONGTYPE") && nkeys > 0) {
            /* the server does not say which key: name the candidates */
            char ks[400];
            size_t at = 0;
            ks[0] = '\0';
            for (int i = 0; i < nkeys && at < sizeof ks; i++)
                at += (size_t)snprintf(ks + at, sizeof ks - at, "%s%s", i ? ", " : "", keys[i]);
            return ftc_err_wrap(&r->err, "script %s (one of its keys holds another type: %s)",
                                s->name, ks);
        }
        return ftc_err_wrap(&r->err, "script %s", s->name);
    }
    if (reply)
        *reply = rep;
    else
        ftc_redis_reply_free(rep);
    return 0;
}

/* ---- pushed replies (pub/sub) ---------------------------------------------------- */

int ftc_redis_read_push(ftc_redis_t *r, ftc_deadline_t d, ftc_redis_reply_t **reply)
{
    *reply = NULL;
    if (!r->c)
        return ftc_err_set(&r->err, FTC_EREDIS, "subscription: not connected");
    for (;;) {
        void *rep = NULL;
        if (redisReaderGetReply(r->c->reader, &rep) != REDIS_OK) {
            ftc_err_set(&r->err, FTC_EPROTO, "subscription: protocol error from redis");
            ftc__drop(r);
            return FTC_EPROTO;
        }
        if (rep) {
            *reply = rep;
            return 0;
        }
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0)
            return FTC_ETIMEDOUT;
        struct pollfd pfd = {r->c->fd, POLLIN, 0};
        int n = poll(&pfd, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            return FTC_ETIMEDOUT;
        if (n < 0 || redisBufferRead(r->c) != REDIS_OK) {
            ftc_err_set(&r->err, FTC_EREDIS, "subscription: connection to redis %s:%d lost: %s",
                        r->url.host, r->url.port, r->c->errstr[0] ? r->c->errstr : "poll");
            ftc__drop(r);
            return FTC_EREDIS;
        }
    }
}
