/*
 * redis_server.c — see redis_server.h.
 */
#include "detect/redis_server.h"

#include "core/fsio.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct ftc_redis_server {
    ftc_redis_server_options_t o;
    char dir[PATH_MAX];      /* job directory */
    char binary[PATH_MAX];   /* redis-server to exec */
    char conf[PATH_MAX];     /* dir/redis.conf */
    char url_file[PATH_MAX]; /* dir/redis.url */
    ftc_redis_url_t url;     /* 127.0.0.1:port, generated password */
    pid_t pid;               /* running server, or -1 */
};

/* A port that was free a moment ago (the server may still lose a race for
 * it; start retries with another). */
static int ftc__free_port(ftc_err_t *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ftc_err_errno(err, errno, "socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int e = errno;
        close(fd);
        return ftc_err_errno(err, e, "finding a free loopback port");
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int ftc__write_conf(ftc_redis_server_t *s, ftc_err_t *err)
{
    char buf[4096];
    int n = snprintf(buf, sizeof buf,
                     "# written by ftc: the embedded redis of one job\n"
                     "bind 127.0.0.1\n"
                     "port %d\n"
                     "protected-mode yes\n"
                     "requirepass %s\n"
                     "hz %d\n"
                     "notify-keyspace-events Ex\n"
                     "save \"\"\n"
                     "appendonly %s\n"
                     "dir %s\n"
                     "logfile %s/redis.log\n"
                     "daemonize no\n"
                     "databases 16\n",
                     s->url.port, s->url.password, s->o.hz, s->o.persist ? "yes" : "no", s->dir,
                     s->dir);
    if (n < 0 || (size_t)n >= sizeof buf)
        return ftc_err_set(err, FTC_EINVAL, "redis.conf: directory path too long");
    return ftc_fs_write_file_atomic(s->dir, "redis.conf", buf, (size_t)n, NULL, err);
}

static int ftc__spawn(ftc_redis_server_t *s, ftc_err_t *err)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return ftc_err_errno(err, errno, "fork redis-server");
    if (pid == 0) {
        /* die with the job, even when it is killed with SIGKILL */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
        }
        ftc_fs_close_from(3);
        execlp(s->binary, s->binary, s->conf, (char *)NULL);
        fprintf(stderr, "ftc: cannot run %s: %s (install redis-server: scripts/setup)\n",
                s->binary, strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    return 0;
}

/* Waits until the server answers or exits or the deadline passes. */
static int ftc__wait_ready(ftc_redis_server_t *s, ftc_deadline_t d, ftc_err_t *err)
{
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ro.connect_timeout_ms = 200;
    for (;;) {
        int st;
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid) {
            s->pid = -1;
            return ftc_err_set(err, FTC_EREDIS,
                               "redis-server exited at start (status %d): see %s/redis.log",
                               WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), s->dir);
        }
        ftc_err_t e = {0};
        ftc_redis_t *r = ftc_redis_connect(&s->url, &ro, &e);
        if (r) {
            ftc_redis_close(r);
            return 0;
        }
        if (ftc_deadline_expired(d))
            return ftc_err_set(err, FTC_ETIMEDOUT, "redis-server did not answer in time: %s",
                               e.msg);
        ftc_sleep_ms(10);
    }
}

/* How long a SIGKILLed server may take to exit before it is left unreaped. */
#define FTC__KILL_WAIT_MS 30000

/* Reaps the server, SIGKILLing it after grace_ms; every wait is bounded. */
static void ftc__reap(ftc_redis_server_t *s, int grace_ms)
{
    if (s->pid <= 0)
        return;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)grace_ms);
    for (;;) {
        int st;
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid || (w < 0 && errno == ECHILD))
            break;
        if (ftc_deadline_expired(d)) {
            kill(s->pid, SIGKILL);
            /* bounded too: a process stuck in the kernel (D state) does not
             * die of SIGKILL until it leaves it */
            ftc_deadline_t k = ftc_deadline_in_ms(FTC__KILL_WAIT_MS);
            while ((w = waitpid(s->pid, &st, WNOHANG)) == 0 && !ftc_deadline_expired(k))
                ftc_sleep_ms(5);
            if (w == 0)
                FTC_WARN("redis", "redis-server pid %d has not exited %d ms after SIGKILL: "
                         "left unreaped", (int)s->pid, FTC__KILL_WAIT_MS);
            break;
        }
        ftc_sleep_ms(5);
    }
    s->pid = -1;
}

static int ftc__start(ftc_redis_server_t *s, bool same_port, ftc_err_t *err)
{
    int rc = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (!same_port) {
            int port = ftc__free_port(err);
            if (port < 0)
                return port;
            s->url.port = port;
        }
        if ((rc = ftc__write_conf(s, err)) != 0)
            return rc;
        if ((rc = ftc__spawn(s, err)) != 0)
            return rc;
        rc = ftc__wait_ready(s, ftc_deadline_in_ms((uint64_t)s->o.start_timeout_ms), err);
        if (rc == 0)
            return 0;
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            ftc__reap(s, 1000);
        }
        if (same_port && attempt >= 2)
            break; /* the port may be held by a dying server: a few tries only */
        if (!same_port && rc == FTC_ETIMEDOUT)
            break;
    }
    return rc;
}

ftc_redis_server_t *ftc_redis_server_start(const ftc_redis_server_options_t *o, ftc_err_t *err)
{
    if (!o || !o->dir || !*o->dir) {
        ftc_err_set(err, FTC_EINVAL, "embedded redis: a job directory is required");
        return NULL;
    }
    ftc_redis_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        ftc_err_set(err, FTC_ENOMEM, "embedded redis: out of memory");
        return NULL;
    }
    s->o = *o;
    s->pid = -1;
    if (s->o.hz <= 0)
        s->o.hz = 100;
    if (s->o.start_timeout_ms <= 0)
        s->o.start_timeout_ms = 5000;
    snprintf(s->dir, sizeof s->dir, "%s", o->dir);
    snprintf(s->binary, sizeof s->binary, "%s",
             o->binary && *o->binary ? o->binary : "redis-server");
    snprintf(s->conf, sizeof s->conf, "%s/redis.conf", s->dir);
    snprintf(s->url_file, sizeof s->url_file, "%s/redis.url", s->dir);
    snprintf(s->url.host, sizeof s->url.host, "127.0.0.1");
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        ftc_err_errno(err, errno, "embedded redis: getrandom for the password");
        goto fail;
    }
    for (int i = 0; i < 16; i++)
        snprintf(s->url.password + 2 * i, 3, "%02x", rnd[i]);
    if (ftc_fs_mkdirs(s->dir, err) != 0 || ftc__start(s, false, err) != 0)
        goto fail;
    char line[600];
    int n = snprintf(line, sizeof line, "redis://:%s@127.0.0.1:%d/0\n", s->url.password,
                     s->url.port);
    if (ftc_fs_write_file_atomic(s->dir, "redis.url", line, (size_t)n, NULL, err) != 0)
        goto fail;
    char shown[400];
    FTC_INFO("redis", "embedded redis-server pid %d at %s (address in %s)", (int)s->pid,
             ftc_redis_url_str(&s->url, shown, sizeof shown), s->url_file);
    return s;
fail:
    ftc_redis_server_stop(s);
    return NULL;
}

void ftc_redis_server_stop(ftc_redis_server_t *s)
{
    if (!s)
        return;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        ftc__reap(s, 2000);
    }
    unlink(s->url_file);
    memset(s->url.password, 0, sizeof s->url.password);
    free(s);
}

const ftc_redis_url_t *ftc_redis_server_url(const ftc_redis_server_t *s) { return &s->url; }
const char *ftc_redis_server_url_file(const ftc_redis_server_t *s) { return s->url_file; }
pid_t ftc_redis_server_pid(const ftc_redis_server_t *s) { return s->pid; }

int ftc_redis_server_signal(ftc_redis_server_t *s, int sig)
{
    if (s->pid <= 0)
        return FTC_ENOENT;
    if (kill(s->pid, sig) != 0)
        return FTC_EIO;
    if (sig == SIGTERM)
        kill(s->pid, SIGCONT); /* a stopped server handles SIGTERM only once resumed */
    if (sig == SIGKILL || sig == SIGTERM)
        ftc__reap(s, sig == SIGTERM ? 10000 : 0); /* SIGKILL after 10 s; bounded */
    return 0;
}

bool ftc_redis_server_reaped(ftc_redis_server_t *s, pid_t pid)
{
    if (!s || pid <= 0 || s->pid != pid)
        return false;
    s->pid = -1;
    return true;
}

int ftc_redis_server_restart(ftc_redis_server_t *s, ftc_err_t *err)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        ftc__reap(s, 2000);
    }
    return ftc__start(s, true, err);
}

int ftc_redis_url_file_read(const char *path, ftc_redis_url_t *out, ftc_err_t *err)
{
    uint8_t *buf;
    size_t len;
    int rc = ftc_fs_read_file(path, 4096, &buf, &len, err);
    if (rc)
        return rc;
    buf[strcspn((char *)buf, "\r\n")] = '\0';
    rc = ftc_redis_url_parse((const char *)buf, out, err);
    memset(buf, 0, len);
    free(buf);
    if (rc)
        return ftc_err_wrap(err, "%s", path);
    return 0;
}

void ftc_job_dir(const ftc_config_t *cfg, char *buf, size_t cap)
{
    const char *dir = ftc_config_str(cfg, FTC_CFG_JOB_DIR);
    const char *tmp = getenv("TMPDIR");
    char rel[PATH_MAX];
    if (dir[0])
        snprintf(rel, sizeof rel, "%s", dir);
    else
        snprintf(rel, sizeof rel, "%s/ftc-%s", tmp && *tmp ? tmp : "/tmp",
                 ftc_config_str(cfg, FTC_CFG_JOB_ID));
    /* absolute: the embedded redis-server runs in it (its log file path
     * would not resolve), and ranks and agents may run elsewhere */
    char cwd[PATH_MAX];
    if (rel[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(buf, cap, "%s/%s", cwd, rel);
    else
        snprintf(buf, cap, "%s", rel);
}

/* True when nothing listens at a loopback url (a connect is refused at
 * once): the embedded Redis of a job that was killed, whose URL file stayed.
 * A Redis that is only slow or stopped still accepts, so it is never
 * mistaken for a dead one. */
static bool ftc__loopback_refused(const ftc_redis_url_t *u)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)u->port);
    if (strcmp(u->host, "localhost") && inet_pton(AF_INET, u->host, &a.sin_addr) != 1)
        return false;
    if (!strcmp(u->host, "localhost"))
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((ntohl(a.sin_addr.s_addr) >> 24) != 127)
        return false;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    /* loopback: a blocking connect is refused or accepted at once */
    bool refused = connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

int ftc_redis_resolve(const ftc_config_t *cfg, bool start, ftc_redis_url_t *url,
                      ftc_redis_server_t **srv, ftc_err_t *err)
{
    if (srv)
        *srv = NULL;
    const char *u = ftc_config_str(cfg, FTC_CFG_REDIS_URL);
    if (u[0])
        return ftc_redis_url_parse(u, url, err);
    char dir[PATH_MAX], file[PATH_MAX + 16];
    ftc_job_dir(cfg, dir, sizeof dir);
    snprintf(file, sizeof file, "%s/redis.url", dir);
    if (access(file, R_OK) == 0) {
        int rc = ftc_redis_url_file_read(file, url, err);
        if (rc || !start || !srv || !ftc__loopback_refused(url))
            return rc;
        FTC_WARN("redis", "%s names a Redis at %s:%d that is not running (left by a job that was "
                 "killed?): starting a new embedded one (the old one's state is gone with it)",
                 file, url->host, url->port);
    }
    if (!start || !srv)
        return ftc_err_set(err, FTC_ENOENT,
                           "no Redis for job '%s': pass --redis URL or set FTC_REDIS_URL, or start "
                           "the job first (its embedded Redis writes its address to %s)",
                           ftc_config_str(cfg, FTC_CFG_JOB_ID), file);
    ftc_redis_server_options_t o = FTC_REDIS_SERVER_OPTIONS_INIT;
    o.dir = dir;
    *srv = ftc_redis_server_start(&o, err);
    if (!*srv)
        return err ? err->code : FTC_EREDIS;
    *url = *ftc_redis_server_url(*srv);
    return 0;
}
