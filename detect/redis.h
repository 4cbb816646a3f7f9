/*
 * redis.h — ftc's Redis client: a hiredis connection with deadlines,
 * reconnection, checked replies and Lua scripts.
 *
 * - URLs: redis://[user:password@]host:port/db. The password may instead come
 *   from FTC_REDIS_PASSWORD or the file named by FTC_REDIS_PASSWORD_FILE. It is
 *   never logged: ftc_redis_url_str() prints it as "***".
 * - Every command has a deadline (command_timeout_ms). On an I/O error or a
 *   timeout the connection is dropped and re-made with exponential backoff
 *   (jittered: see the options) until the command's deadline; the command is
 *   then retried once if it is marked idempotent. Callers get FTC_EREDIS /
 *   FTC_ETIMEDOUT with the command's name, never a hang. The deadline
 *   bounds the whole exchange, not each read: a reply that trickles in (a
 *   slow link, a huge reply) ends at the deadline too. A connection attempt (host name
 *   lookup, TCP connect, AUTH, SELECT) gets connect_timeout_ms in all, and never more than
 *   what is left: a DNS server that does not answer ends the attempt with FTC_ETIMEDOUT
 *   naming the host (the lookup runs in a detached thread that ends on its own; while 4
 *   such threads of the process run, a new attempt fails at once instead of adding one), a name
 *   that does not resolve is FTC_EREDIS naming it; each address of the name is tried in
 *   turn, IPv4 first.
 * - Replies are checked against the type the caller expects: an unexpected
 *   type is an error naming the command and what came back, never a crash.
 * - Scripts are called by SHA1 (EVALSHA) and re-sent with EVAL when the server
 *   answers NOSCRIPT (after a restart or SCRIPT FLUSH). Both share one
 *   deadline: the EVAL gets what the EVALSHA left of command_timeout_ms.
 *
 * One connection per thread (hiredis contexts are not thread-safe).
 */
#ifndef FTC_DETECT_REDIS_H
#define FTC_DETECT_REDIS_H

#include "core/clock.h"
#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftc_redis_url {
    char host[256];
    int port;           /* default 6379 */
    int db;             /* default 0 */
    char user[128];     /* "" = default user (AUTH password) */
    char password[256]; /* "" = no AUTH */
} ftc_redis_url_t;

/* Parses a redis:// URL; fills the password from FTC_REDIS_PASSWORD or
 * FTC_REDIS_PASSWORD_FILE when the URL has none. Errors name the part that is
 * wrong (the password is never echoed). */
int ftc_redis_url_parse(const char *url, ftc_redis_url_t *out, ftc_err_t *err);
/* The URL with the password masked, for logs. Returns buf. */
const char *ftc_redis_url_str(const ftc_redis_url_t *u, char *buf, size_t cap);

typedef struct ftc_redis_options {
    uint32_t struct_size;
    uint32_t version;
    int connect_timeout_ms; /* per connection attempt (default 1000) */
    int command_timeout_ms; /* whole command incl. reconnects (default 2000) */
    int backoff_min_ms;     /* first reconnect pause (default 20), doubled per failure */
    int backoff_max_ms;     /* cap (default 1000) */
} ftc_redis_options_t; /* timeouts 1..3600000, backoffs 1..600000 with min <= max:
                          else ftc_redis_connect fails with FTC_EINVAL naming the field */
/* Reconnect pauses are jittered: each is drawn uniformly from the backoff b
 * +-25% (b - b/4 .. b + b/4, b/4 rounded down; the top cut at backoff_max_ms),
 * and never goes past the deadline, so that clients that lost one server do
 * not retry in lockstep. The draws come from a PRNG per connection, seeded
 * from a seed per process (pid, clocks; made again after fork) and the
 * connection's sequence number. */

#define FTC_REDIS_OPTIONS_INIT {sizeof(ftc_redis_options_t), 1, 1000, 2000, 20, 1000}

typedef struct ftc_redis ftc_redis_t;

/* Connects (AUTH, SELECT) within the connect deadline. NULL on failure with
 * err saying whether the server was unreachable or refused the password. */
ftc_redis_t *ftc_redis_connect(const ftc_redis_url_t *url, const ftc_redis_options_t *o,
                               ftc_err_t *err);
void ftc_redis_close(ftc_redis_t *r); /* NULL is a no-op */
/* The last error of this connection (never NULL). */
const char *ftc_redis_errstr(const ftc_redis_t *r);
/* Number of times this connection was re-made after a failure. */
uint64_t ftc_redis_reconnects(const ftc_redis_t *r);
/* Number of round trips this connection made: each command attempt and each
 * pipeline attempt (however many commands it holds) counts one. */
uint64_t ftc_redis_round_trips(const ftc_redis_t *r);
/* True while the last command reached the server. */
bool ftc_redis_is_up(const ftc_redis_t *r);
/* Whether the last failure of r may pass by itself, so that a caller with a deadline
 * should retry it: true when no error reply came (the connection failed or timed out,
 * FTC_EREDIS / FTC_ETIMEDOUT) or when the server answered with a state it leaves on its
 * own: LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, NOREPLICAS. False for every other
 * error reply — WRONGTYPE, NOAUTH, WRONGPASS, NOPERM, READONLY, OOM, MISCONF, NOSCRIPT (after
 * the EVAL fallback), a script's error (ERR ..., or a script's own code) — and for the
 * other codes (FTC_EAUTH: a password refused; FTC_EINVAL...): the same command gets the
 * same answer until someone changes the server or its data. Meaningful after a failed
 * call. Not thread-safe (the connection's thread). */
bool ftc_redis_transient(const ftc_redis_t *r);
/* The code of the error reply the last command (or pipeline) got: the reply's first word
 * ("READONLY", "WRONGTYPE", a script's "FTC_STALE"), at most 23 bytes; "" when the last
 * command got no error reply. Never NULL. */
const char *ftc_redis_reply_error(const ftc_redis_t *r);
/* What to do about the last error reply, one sentence for an error message (READONLY:
 * "point the URL at the primary", OOM, MISCONF, WRONGTYPE, NOPERM, NOAUTH, WRONGPASS,
 * NOSCRIPT, ERR); "" when there is none to give. Static; never NULL. */
const char *ftc_redis_hint(const ftc_redis_t *r);

/* A reply, owned by the caller: free with ftc_redis_reply_free. It is
 * hiredis's redisReply; use the accessors below rather than its fields. */
typedef struct redisReply ftc_redis_reply_t;
void ftc_redis_reply_free(ftc_redis_reply_t *r); /* NULL is a no-op */

/* Runs one command given as argv (binary-safe when lens is non-NULL).
 * idempotent: retried once after a reconnect. A Redis error reply is returned
 * as FTC_EREDIS with the server's text (the reply is freed), the connection
 * kept: ftc_redis_is_up() tells it from a failed connection (also FTC_EREDIS,
 * the connection dropped). */
int ftc_redis_cmd(ftc_redis_t *r, bool idempotent, ftc_redis_reply_t **reply, int argc,
                  const char **argv, const size_t *lens);
/* printf-less convenience: NULL-terminated list of strings, any number of
 * them (more than 64 are allocated; FTC_ENOMEM when that fails). The command
 * is sent whole or not at all. */
int ftc_redis_cmdv(ftc_redis_t *r, bool idempotent, ftc_redis_reply_t **reply, ...);

/* Pipelining: sends n commands in one write and reads their n replies, all
 * within one command deadline (command_timeout_ms), so a batch costs one
 * round trip instead of n. Command i has argcs[i] arguments argvs[i]
 * (binary-safe when lens and lens[i] are non-NULL). Redis runs the commands
 * in order but not atomically (use a script for that).
 *
 * replies: NULL to discard the replies, else an array of n that receives them
 * in order (the caller frees each with ftc_redis_reply_free; error replies are
 * kept too, so the caller can see which command failed).
 *
 * Returns 0 when every command got a non-error reply. When some got an error
 * reply, the others still ran: FTC_EREDIS (FTC_EAUTH for NOAUTH) with "command
 * I of N (NAME): redis error: ..." for the first one. When the connection
 * fails or the deadline passes (FTC_EREDIS / FTC_ETIMEDOUT), it is dropped,
 * every replies[i] is NULL, and an idempotent batch is re-sent as a whole
 * after a reconnect while the deadline allows (so some commands may have run
 * twice); a non-idempotent one is not. n == 0 is a no-op. Not thread-safe:
 * one connection per thread. */
int ftc_redis_pipeline(ftc_redis_t *r, bool idempotent, int n, const int *argcs,
                       const char **const *argvs, const size_t *const *lens,
                       ftc_redis_reply_t **replies);

/* Typed expectations. Each returns 0 or FTC_EPROTO with "CMD: expected X,
 * got Y" in err. what names the command. */
int ftc_redis_want_int(const ftc_redis_reply_t *rep, const char *what, long long *v,
                       ftc_err_t *err);
int ftc_redis_want_status(const ftc_redis_reply_t *rep, const char *what, const char *status,
                          ftc_err_t *err);
/* A bulk string (or status); nil gives FTC_ENOENT. *s points into rep. */
int ftc_redis_want_str(const ftc_redis_reply_t *rep, const char *what, const char **s,
                       size_t *len, ftc_err_t *err);
/* An array of exactly n elements (n < 0: any); *elems points into rep. */
int ftc_redis_want_array(const ftc_redis_reply_t *rep, const char *what, long n,
                         ftc_redis_reply_t ***elems, size_t *count, ftc_err_t *err);
/* Parses a bulk string holding a decimal integer (HGET results...): an optional '-' and
 * digits only, in range (no leading space or '+'), else FTC_EPROTO. */
int ftc_redis_str_to_ll(const ftc_redis_reply_t *rep, const char *what, long long *v,
                        ftc_err_t *err);

/* A Lua script; sha is computed locally (OpenSSL SHA1) at init. */
typedef struct ftc_redis_script {
    const char *name; /* for errors */
    const char *src;
    char sha[41];
} ftc_redis_script_t;

void ftc_redis_script_init(ftc_redis_script_t *s, const char *name, const char *src);
/* EVALSHA, falling back to EVAL on NOSCRIPT, both (and their reconnects)
 * within one command_timeout_ms: FTC_ETIMEDOUT when a late NOSCRIPT left the
 * EVAL too little. Scripts must be idempotent or
 * fenced: after a lost reply the call may be retried. At most 64 keys and
 * arguments in all (more, or a negative count: FTC_EINVAL naming the counts). */
int ftc_redis_eval(ftc_redis_t *r, const ftc_redis_script_t *s, int nkeys, const char **keys,
                   int nargs, const char **args, ftc_redis_reply_t **reply);

/* The raw socket, for callers that poll (subscriptions). -1 when down. */
int ftc_redis_fd(const ftc_redis_t *r);
/* Reads one pushed reply (pub/sub) waiting at most until d; FTC_ETIMEDOUT
 * when none came; FTC_EREDIS when the connection broke (reconnect and
 * re-subscribe is the caller's job: ftc_redis_reconnect). */
int ftc_redis_read_push(ftc_redis_t *r, ftc_deadline_t d, ftc_redis_reply_t **reply);
/* Drops and re-makes the connection (AUTH, SELECT) within d, pausing a
 * jittered backoff between attempts. */
int ftc_redis_reconnect(ftc_redis_t *r, ftc_deadline_t d);

/* Internal, for tests of the reconnect jitter. ftc__redis_jitter_ms: the pause
 * for backoff_ms (+-25%, at most max_ms when max_ms > 0; 0 for backoff_ms <= 0)
 * drawn from the splitmix64 state *rng, which it advances (pure: same state,
 * same pauses). ftc__redis_jitter_seed sets a connection's state (deterministic
 * runs); ftc__redis_jitter_next draws the connection's next pause, as its
 * reconnects do (capped at its backoff_max_ms). */
int ftc__redis_jitter_ms(uint64_t *rng, int backoff_ms, int max_ms);
void ftc__redis_jitter_seed(ftc_redis_t *r, uint64_t seed);
int ftc__redis_jitter_next(ftc_redis_t *r, int backoff_ms);

#ifdef __cplusplus
}
#endif
#endif
