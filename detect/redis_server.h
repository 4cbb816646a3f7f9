/*
 * redis_server.h — the embedded Redis: when a job is given no --redis /
 * FTC_REDIS_URL, ftc starts Debian's redis-server itself.
 *
 * It listens on a free loopback port, runs at `hz 100` (expiry events arrive
 * about 5 ms late instead of about 60 ms at the default hz 10, see
 * ENVIRONMENT.md), keeps nothing on disk unless asked, requires a generated
 * password, has keyspace expiry notifications on (`notify-keyspace-events Ex`)
 * and dies with the process that started it (PR_SET_PDEATHSIG). Its URL,
 * password included, is written to DIR/redis.url (mode 0600) so that the
 * other local processes of the job can find it; the config file with the
 * password is mode 0600 too, so the password never appears in `ps`.
 *
 * Not thread-safe; one owner.
 */
#ifndef FTC_DETECT_REDIS_SERVER_H
#define FTC_DETECT_REDIS_SERVER_H

#include "core/config.h"
#include "detect/redis.h"

#include <stdbool.h>
#include <sys/types.h>

typedef struct ftc_redis_server_options {
    uint32_t struct_size;
    uint32_t version;
    const char *dir;      /* job directory: redis.conf, redis.url, redis.log (created 0700) */
    const char *binary;   /* default "redis-server" (found on PATH) */
    int hz;               /* default 100 */
    bool persist;         /* append-only file in dir (default false) */
    int start_timeout_ms; /* default 5000 */
} ftc_redis_server_options_t;

#define FTC_REDIS_SERVER_OPTIONS_INIT                                                              \
    {                                                                                              \
        sizeof(ftc_redis_server_options_t), 1, NULL, NULL, 100, false, 5000                        \
    }

typedef struct ftc_redis_server ftc_redis_server_t;

/* Starts the server and waits until it answers PING (or the start timeout).
 * NULL with err naming what failed (binary missing, no free port, ...). */
ftc_redis_server_t *ftc_redis_server_start(const ftc_redis_server_options_t *o, ftc_err_t *err);
/* Stops it (SIGTERM, then SIGKILL after 2 s) and frees s. NULL is a no-op. */
void ftc_redis_server_stop(ftc_redis_server_t *s);
const ftc_redis_url_t *ftc_redis_server_url(const ftc_redis_server_t *s);
/* Path of the file that holds the URL. */
const char *ftc_redis_server_url_file(const ftc_redis_server_t *s);
pid_t ftc_redis_server_pid(const ftc_redis_server_t *s);
/* Sends sig to the server (tests: SIGKILL, SIGSTOP) and, for SIGKILL or
 * SIGTERM, reaps it: a stopped server is resumed to take its SIGTERM, and one
 * still alive 10 s later is SIGKILLed; one that has not exited 30 s after
 * SIGKILL (stuck in the kernel) is left unreaped with a warning. */
int ftc_redis_server_signal(ftc_redis_server_t *s, int sig);
/* Starts it again on the same port with the same password (after a kill). */
int ftc_redis_server_restart(ftc_redis_server_t *s, ftc_err_t *err);
/* The owner's wait for any child (waitpid(-1)) took pid: when it is the
 * server's, s forgets it, so that no later call (ftc_redis_server_stop's
 * SIGTERM) signals that pid, another process's once reused. True when it
 * was the server's. NULL s: false. */
bool ftc_redis_server_reaped(ftc_redis_server_t *s, pid_t pid);

/* Where a job's Redis is, in this order: the redis.url setting (--redis,
 * FTC_REDIS_URL, config file); the URL file of the job directory (job.dir,
 * default $TMPDIR/ftc-JOB), written by the process that started the job's
 * embedded Redis; else, when start is true, a new embedded server in the job
 * directory (*srv, to be stopped by the caller). When start is false and
 * nothing is found, the error says what to pass. */
int ftc_redis_resolve(const ftc_config_t *cfg, bool start, ftc_redis_url_t *url,
                      ftc_redis_server_t **srv, ftc_err_t *err);
/* The job directory a config names (job.dir, or $TMPDIR/ftc-JOB), made
 * absolute against the working directory. */
void ftc_job_dir(const ftc_config_t *cfg, char *buf, size_t cap);

/* Reads a URL file written by a server (for processes of the same job). */
int ftc_redis_url_file_read(const char *path, ftc_redis_url_t *out, ftc_err_t *err);

#endif
