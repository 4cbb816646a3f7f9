/*
 * test_redis.c — the Redis client against a real redis-server started by the
 * embedded-server code: URLs, AUTH (right, wrong, missing), unreachable
 * servers, command deadlines against a SIGSTOPped server and a reply that
 * trickles in through a proxy (one byte at a time), reconnection after
 * a kill and restart, checked reply types, scripts by SHA with EVAL fallback,
 * pipelined batches.
 */
#include "redis_fixture.h"

#include "detect/redis.h"
#include "detect/redis_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <limits.h>
#include <stdatomic.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A client of the fixture's server whose commands each have ms to answer. */
static ftc_redis_t *connect_with_timeout(redis_fixture_t *f, int ms)
{
    ftc_err_t err = {0};
    ftc_redis_options_t o = FTC_REDIS_OPTIONS_INIT;
    o.command_timeout_ms = ms;
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), &o, &err);
    assert_non_null(r);
    return r;
}

static void test_url_parsing(void **state)
{
    (void)state;
    ftc_redis_url_t u;
    ftc_err_t err = {0};
    unsetenv("FTC_REDIS_PASSWORD");
    unsetenv("FTC_REDIS_PASSWORD_FILE");
    assert_int_equal(ftc_redis_url_parse("redis://alice:s%40cret@db.example:6390/3", &u, &err), 0);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.password, "s@cret");
    assert_string_equal(u.host, "db.example");
    assert_int_equal(u.port, 6390);
    assert_int_equal(u.db, 3);
    char shown[300];
    ftc_redis_url_str(&u, shown, sizeof shown);
    assert_null(strstr(shown, "cret"));
    assert_non_null(strstr(shown, "***"));
    assert_int_equal(ftc_redis_url_parse("redis://localhost", &u, &err), 0);
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_int_equal(ftc_redis_url_parse("redis://:pw@h:1/", &u, &err), 0);
    assert_string_equal(u.password, "pw");
    const char *bad[] = {"http://x", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x",
                         "redis://h/abc", "redis://u:%zz@h", "redis://h:12junk"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(err.msg, 0, sizeof err.msg);
        if (ftc_redis_url_parse(bad[i], &u, &err) != FTC_ECONFIG)
            fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(err.msg) > 0);
    }
    setenv("FTC_REDIS_PASSWORD", "from-env", 1);
    assert_int_equal(ftc_redis_url_parse("redis://h:1", &u, &err), 0);
    assert_string_equal(u.password, "from-env");
    unsetenv("FTC_REDIS_PASSWORD");
    /* FTC_REDIS_PASSWORD_FILE: a password longer than the buffer is an error,
     * not silently cut (AUTH would then fail as "refused the password") */
    char *dir = ftc_test_tmpdir("pwfile");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/pw", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < 300; i++)
        fputc('a' + i % 26, fp);
    fputc('\n', fp);
    fclose(fp);
    setenv("FTC_REDIS_PASSWORD_FILE", path, 1);
    assert_int_equal(ftc_redis_url_parse("redis://h:1", &u, &err), FTC_ECONFIG);
    assert_non_null(strstr(err.msg, "FTC_REDIS_PASSWORD_FILE"));
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("secret\r\n", fp);
    fclose(fp);
    assert_int_equal(ftc_redis_url_parse("redis://h:1", &u, &err), 0);
    assert_string_equal(u.password, "secret");
    /* a directory (fopen takes it, fread fails) and an empty file were read as
     * no password at all: the server's NOAUTH then said to put one in the URL */
    setenv("FTC_REDIS_PASSWORD_FILE", dir, 1);
    assert_int_not_equal(ftc_redis_url_parse("redis://h:1", &u, &err), 0);
    assert_non_null(strstr(err.msg, "FTC_REDIS_PASSWORD_FILE"));
    assert_non_null(strstr(err.msg, "directory"));
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("\nsecret\n", fp);
    fclose(fp);
    setenv("FTC_REDIS_PASSWORD_FILE", path, 1);
    assert_int_not_equal(ftc_redis_url_parse("redis://h:1", &u, &err), 0);
    assert_non_null(strstr(err.msg, "first line is empty"));
    unsetenv("FTC_REDIS_PASSWORD_FILE");
    ftc_test_rmrf(dir);
    free(dir);
}

/* Options out of range are refused by name before any connection (a zero
 * backoff spun reconnects without a pause; a huge one overflowed its
 * doubling), and so is a command without a name. */
static void test_bad_options_and_empty_command(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    struct {
        int field, value;
        const char *name;
    } bad[] = {{0, 0, "connect_timeout_ms"},    {1, -5, "command_timeout_ms"},
               {2, 0, "backoff_min_ms"},        {3, 10, "backoff_max_ms"},
               {3, INT_MAX, "backoff_max_ms"}, {2, 700000, "backoff_min_ms"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ftc_redis_options_t o = FTC_REDIS_OPTIONS_INIT;
        int *fld[] = {&o.connect_timeout_ms, &o.command_timeout_ms, &o.backoff_min_ms,
                      &o.backoff_max_ms};
        *fld[bad[i].field] = bad[i].value;
        err = (ftc_err_t){0};
        assert_null(ftc_redis_connect(ftc_redis_server_url(f->srv), &o, &err));
        assert_int_equal(err.code, FTC_EINVAL);
        if (!strstr(err.msg, bad[i].name))
            fail_msg("case %zu: '%s' does not name %s", i, err.msg, bad[i].name);
    }
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(r);
    ftc_redis_reply_t *rep = (ftc_redis_reply_t *)1;
    assert_int_equal(ftc_redis_cmd(r, true, &rep, 0, NULL, NULL), FTC_EINVAL);
    assert_null(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, NULL), FTC_EINVAL);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "PING", NULL), 0); /* still usable */
    ftc_redis_reply_free(rep);
    ftc_redis_close(r);
}

static void test_commands_and_reply_types(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(r);
    ftc_redis_reply_t *rep;
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "SET", "k", "42", NULL), 0);
    assert_int_equal(ftc_redis_want_status(rep, "SET", "OK", &err), 0);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "GET", "k", NULL), 0);
    long long v;
    assert_int_equal(ftc_redis_str_to_ll(rep, "GET k", &v, &err), 0);
    assert_int_equal(v, 42);
    ftc_redis_reply_free(rep);
    /* a whole number only: strtoll took a leading space or '+' (a field the scripts
     * call corrupt read as a number) */
    const char *loose[] = {" 42", "+42", "\t42", "42 ", "4 2", "-", "--4", "0x2a"};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "k2", loose[i], NULL), 0);
        assert_int_equal(ftc_redis_cmdv(r, true, &rep, "GET", "k2", NULL), 0);
        if (ftc_redis_str_to_ll(rep, "GET k2", &v, &err) != FTC_EPROTO)
            fail_msg("'%s' read as %lld", loose[i], v);
        ftc_redis_reply_free(rep);
    }
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "k2", "-42", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "GET", "k2", NULL), 0);
    assert_int_equal(ftc_redis_str_to_ll(rep, "GET k2", &v, &err), 0);
    assert_int_equal(v, -42);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "GET", "k", NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "GET k", &v, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "expected an integer reply, got string"));
    ftc_redis_reply_t **el;
    size_t n;
    assert_int_equal(ftc_redis_want_array(rep, "GET k", 2, &el, &n, &err), FTC_EPROTO);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "GET", "missing", NULL), 0);
    const char *s;
    assert_int_equal(ftc_redis_want_str(rep, "GET missing", &s, NULL, &err), FTC_ENOENT);
    ftc_redis_reply_free(rep);
    /* a server error reply names the command */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", "k", "f", "v", NULL), FTC_EREDIS);
    assert_non_null(strstr(ftc_redis_errstr(r), "HSET"));
    assert_non_null(strstr(ftc_redis_errstr(r), "WRONGTYPE"));
    /* binary-safe arguments */
    const char *argv[] = {"SET", "bin", "a\0b"};
    size_t lens[] = {3, 3, 3};
    assert_int_equal(ftc_redis_cmd(r, true, NULL, 3, argv, lens), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "STRLEN", "bin", NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "STRLEN", &v, &err), 0);
    assert_int_equal(v, 3);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "garbage-number", NULL), FTC_EREDIS);
    assert_null(rep);
    ftc_redis_close(r);
    ftc_redis_close(NULL);
}

static void test_auth_errors(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    snprintf(u.password, sizeof u.password, "wrong");
    assert_null(ftc_redis_connect(&u, NULL, &err));
    assert_int_equal(err.code, FTC_EAUTH);
    assert_non_null(strstr(err.msg, "refused the password"));
    assert_null(strstr(err.msg, "wrong")); /* never echo a password */
    u.password[0] = '\0';
    unsetenv("FTC_REDIS_PASSWORD");
    assert_null(ftc_redis_connect(&u, NULL, &err));
    assert_int_equal(err.code, FTC_EAUTH);
    assert_non_null(strstr(err.msg, "needs a password"));
}

static void test_unreachable(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_redis_url_t u;
    assert_int_equal(ftc_redis_url_parse("redis://127.0.0.1:1/0", &u, &err), 0);
    assert_null(ftc_redis_connect(&u, NULL, &err));
    assert_int_equal(err.code, FTC_EREDIS);
    assert_non_null(strstr(err.msg, "unreachable"));
}

/* A stopped server: the command ends at its deadline with FTC_ETIMEDOUT. */
static void test_deadline_on_stopped_server(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_t *r = connect_with_timeout(f, 300);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGSTOP), 0);
    int rc = ftc_redis_cmdv(r, true, NULL, "PING", NULL);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGCONT), 0);
    assert_true(rc == FTC_ETIMEDOUT || rc == FTC_EREDIS);
    assert_false(ftc_redis_is_up(r));
    /* the message says what happened, not errno's EAGAIN text */
    print_message("%s\n", ftc_redis_errstr(r));
    assert_null(strstr(ftc_redis_errstr(r), "temporarily unavailable"));
    if (rc == FTC_ETIMEDOUT)
        assert_non_null(strstr(ftc_redis_errstr(r), "did not answer in time"));
    /* and it recovers by itself */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "PING", NULL), 0);
    assert_true(ftc_redis_reconnects(r) >= 1);
    ftc_redis_close(r);
}

/* Killed and restarted: commands fail cleanly meanwhile, then work again. */
static void test_reconnect_after_restart(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = connect_with_timeout(f, 200);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGKILL), 0);
    assert_true(ftc_redis_cmdv(r, true, NULL, "PING", NULL) < 0);
    /* a reconnect that runs out of time names why the attempts failed: it said
     * "deadline passed before connecting" (ftc status --watch, every redraw) */
    for (int ms = 100; ms <= 400; ms += 150) {
        assert_true(ftc_redis_reconnect(r, ftc_deadline_in_ms((uint64_t)ms)) != 0);
        print_message("%s\n", ftc_redis_errstr(r));
        assert_non_null(strstr(ftc_redis_errstr(r), "unreachable"));
    }
    assert_int_equal(ftc_redis_server_restart(f->srv, &err), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "PING", NULL), 0);
    ftc_redis_close(r);
}

/* SIGTERM to a stopped server (a test that paused it, then stops it): the
 * stopped process does not act on SIGTERM, and the reap waited for it with
 * no deadline, forever. Now it is resumed to take the SIGTERM (SIGKILL after
 * 10 s) and the server is gone when the call returns. */
static void test_sigterm_stopped_server(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    pid_t pid = ftc_redis_server_pid(f->srv);
    assert_true(pid > 0);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGSTOP), 0);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGTERM), 0);
    assert_int_equal(ftc_redis_server_pid(f->srv), -1);
    assert_int_equal(kill(pid, 0), -1); /* reaped: no such process */
    assert_int_equal(ftc_redis_server_restart(f->srv, &err), 0);
}

static void test_scripts_sha_and_fallback(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    ftc_redis_script_t s;
    ftc_redis_script_init(&s, "incr2", "return redis.call('INCRBY', KEYS[1], ARGV[1])");
    assert_int_equal(strlen(s.sha), 40);
    const char *keys[] = {"cnt"};
    const char *args[] = {"2"};
    ftc_redis_reply_t *rep;
    /* first call: NOSCRIPT, so EVAL */
    assert_int_equal(ftc_redis_eval(r, &s, 1, keys, 1, args, &rep), 0);
    long long v;
    assert_int_equal(ftc_redis_want_int(rep, "incr2", &v, &err), 0);
    assert_int_equal(v, 2);
    ftc_redis_reply_free(rep);
    /* the server cached it under the same SHA we computed */
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "SCRIPT", "EXISTS", s.sha, NULL), 0);
    ftc_redis_reply_t **el;
    size_t n;
    assert_int_equal(ftc_redis_want_array(rep, "SCRIPT EXISTS", 1, &el, &n, &err), 0);
    assert_int_equal(el[0]->integer, 1);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SCRIPT", "FLUSH", NULL), 0);
    assert_int_equal(ftc_redis_eval(r, &s, 1, keys, 1, args, &rep), 0);
    assert_int_equal(ftc_redis_want_int(rep, "incr2", &v, &err), 0);
    assert_int_equal(v, 4);
    ftc_redis_reply_free(rep);
    ftc_redis_script_t bad;
    ftc_redis_script_init(&bad, "broken", "return redis.call('NOPE')");
    assert_int_equal(ftc_redis_eval(r, &bad, 0, NULL, 0, NULL, &rep), FTC_EREDIS);
    assert_non_null(strstr(ftc_redis_errstr(r), "script broken"));
    /* too many keys and arguments: refused, naming the counts */
    const char *many[70];
    for (int i = 0; i < 70; i++)
        many[i] = "x";
    assert_int_equal(ftc_redis_eval(r, &s, 1, keys, 70, many, &rep), FTC_EINVAL);
    assert_non_null(strstr(ftc_redis_errstr(r), "1 keys and 70 arguments"));
    ftc_redis_close(r);
}

static void test_url_file(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_url_t u;
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_url_file_read(ftc_redis_server_url_file(f->srv), &u, &err), 0);
    assert_int_equal(u.port, ftc_redis_server_url(f->srv)->port);
    assert_string_equal(u.password, ftc_redis_server_url(f->srv)->password);
    struct stat st;
    assert_int_equal(stat(ftc_redis_server_url_file(f->srv), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

/* Pipelining: many commands, one round trip; replies in order; an error reply
 * in the middle names its command and leaves the others run; a stopped server
 * ends the batch at its deadline with nothing leaked. */
static void test_pipeline(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = connect_with_timeout(f, 300);
    enum { N = 200 };
    static char keys[N][16], vals[N][16];
    static const char *argv[N][5];
    const char **argvs[N];
    int argcs[N];
    ftc_redis_reply_t *rep[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "p%d", i);
        snprintf(vals[i], sizeof vals[i], "%d", i * 7);
        argv[i][0] = "SET";
        argv[i][1] = keys[i];
        argv[i][2] = vals[i];
        argv[i][3] = "PX";
        argv[i][4] = "60000";
        argvs[i] = argv[i];
        argcs[i] = 5;
    }
    assert_int_equal(ftc_redis_pipeline(r, true, N, argcs, argvs, NULL, NULL), 0);
    /* read them back with GETs, binary-safe lengths on one of them */
    for (int i = 0; i < N; i++) {
        argv[i][0] = "GET";
        argcs[i] = 2;
    }
    size_t l0[2] = {3, strlen(keys[0])};
    const size_t *lens[N] = {l0};
    assert_int_equal(ftc_redis_pipeline(r, true, N, argcs, argvs, lens, rep), 0);
    for (int i = 0; i < N; i++) {
        long long v;
        assert_int_equal(ftc_redis_str_to_ll(rep[i], "GET", &v, &err), 0);
        assert_int_equal(v, i * 7);
        ftc_redis_reply_free(rep[i]);
    }
    /* an error reply in the middle: the others ran, the error names command 1 */
    const char *c0[] = {"SET", "s", "text"}, *c1[] = {"INCR", "s"}, *c2[] = {"INCR", "cnt"};
    const char **mix[3] = {c0, c1, c2};
    int mixc[3] = {3, 2, 2};
    assert_int_equal(ftc_redis_pipeline(r, true, 3, mixc, mix, NULL, rep), FTC_EREDIS);
    assert_non_null(strstr(ftc_redis_errstr(r), "command 1 of 3 (INCR)"));
    assert_int_equal(rep[0]->type, REDIS_REPLY_STATUS);
    assert_int_equal(rep[1]->type, REDIS_REPLY_ERROR);
    long long v;
    assert_int_equal(ftc_redis_want_int(rep[2], "INCR", &v, &err), 0);
    assert_int_equal(v, 1);
    for (int i = 0; i < 3; i++)
        ftc_redis_reply_free(rep[i]);
    /* the connection is still in step after the error */
    assert_int_equal(ftc_redis_cmdv(r, true, &rep[0], "GET", "cnt", NULL), 0);
    assert_int_equal(ftc_redis_str_to_ll(rep[0], "GET cnt", &v, &err), 0);
    assert_int_equal(v, 1);
    ftc_redis_reply_free(rep[0]);
    /* bad arguments and the empty batch */
    assert_int_equal(ftc_redis_pipeline(r, true, 0, NULL, NULL, NULL, NULL), 0);
    int zero = 0;
    assert_int_equal(ftc_redis_pipeline(r, true, 1, &zero, mix, NULL, rep), FTC_EINVAL);
    assert_null(rep[0]);
    /* a stopped server: the batch ends at its deadline, replies all NULL */
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGSTOP), 0);
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_redis_pipeline(r, true, N, argcs, argvs, NULL, rep);
    uint64_t took_ms = (ftc_now_ns() - t0) / 1000000u;
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGCONT), 0);
    assert_true(rc == FTC_ETIMEDOUT || rc == FTC_EREDIS);
    assert_true(took_ms < 2000);
    for (int i = 0; i < N; i++)
        assert_null(rep[i]);
    assert_false(ftc_redis_is_up(r));
    /* and the next batch reconnects by itself */
    assert_int_equal(ftc_redis_pipeline(r, true, 1, mixc + 2, mix + 2, NULL, NULL), 0);
    assert_true(ftc_redis_reconnects(r) >= 1);
    ftc_redis_close(r);
}

/* ---- a link that trickles: a proxy passes the server's bytes one at a time ------------- */

typedef struct trickle {
    int lfd, port, up_port, gap_ms;
    atomic_bool stop;
    pthread_t tid;
} trickle_t;

static void *trickle_main(void *arg)
{
    trickle_t *t = arg;
    while (!atomic_load(&t->stop)) {
        struct pollfd lp = {t->lfd, POLLIN, 0};
        if (poll(&lp, 1, 50) <= 0)
            continue;
        int cfd = accept(t->lfd, NULL, NULL);
        if (cfd < 0)
            continue;
        int ufd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->up_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(ufd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(cfd);
            close(ufd);
            continue;
        }
        char pend[65536];
        size_t np = 0, at = 0;
        bool open = true;
        while (open && !atomic_load(&t->stop)) {
            struct pollfd p[2] = {{cfd, POLLIN, 0}, {ufd, np == at ? POLLIN : 0, 0}};
            int n = poll(p, 2, np > at ? t->gap_ms : 50);
            if (n < 0)
                break;
            char buf[4096];
            if (p[0].revents) { /* client -> server at once */
                ssize_t k = read(cfd, buf, sizeof buf);
                if (k <= 0 || write(ufd, buf, (size_t)k) != k)
                    open = false;
            }
            if (p[1].revents) {
                ssize_t k = read(ufd, pend, sizeof pend);
                if (k <= 0)
                    open = false;
                np = k > 0 ? (size_t)k : 0;
                at = 0;
            }
            if (open && np > at && n == 0) /* server -> client: one byte per gap */
                if (write(cfd, pend + at++, 1) != 1)
                    open = false;
        }
        close(cfd);
        close(ufd);
    }
    return NULL;
}

static void trickle_start(trickle_t *t, int up_port, int gap_ms)
{
    memset(t, 0, sizeof *t);
    t->up_port = up_port;
    t->gap_ms = gap_ms;
    t->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(t->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(t->lfd, 8), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(t->lfd, (struct sockaddr *)&sa, &sl), 0);
    t->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&t->tid, NULL, trickle_main, t), 0);
}

static void trickle_stop(trickle_t *t)
{
    atomic_store(&t->stop, true);
    pthread_join(t->tid, NULL);
    close(t->lfd);
}

/* A reply that trickles in (here one byte every 5 ms: 2 KiB take 10 s) ends
 * at the command's deadline with FTC_ETIMEDOUT: hiredis bounds each read by
 * the socket timeout only, and every byte came well within it, so the
 * command took as long as the reply (10 s for a 300 ms deadline). Pipelines
 * the same. The setup (AUTH, PING: a few bytes) gets through. */
static void test_deadline_on_trickling_reply(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    const ftc_redis_url_t *su = ftc_redis_server_url(f->srv);
    ftc_redis_t *direct = ftc_redis_connect(su, NULL, &err);
    assert_non_null(direct);
    char big[2049];
    memset(big, 'x', 2048);
    big[2048] = 0;
    assert_int_equal(ftc_redis_cmdv(direct, true, NULL, "SET", "big", big, NULL), 0);
    trickle_t t;
    trickle_start(&t, su->port, 5);
    ftc_redis_url_t u = *su;
    u.port = t.port;
    ftc_redis_options_t o = FTC_REDIS_OPTIONS_INIT;
    o.connect_timeout_ms = 2000;
    o.command_timeout_ms = 300;
    ftc_redis_t *r = ftc_redis_connect(&u, &o, &err);
    if (!r)
        fail_msg("connect through the proxy: %s", err.msg);
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_redis_cmdv(r, false, NULL, "GET", "big", NULL);
    double took = (double)(ftc_now_ns() - t0) / 1e6;
    print_message("GET of 2 KiB trickling at 1 byte / 5 ms, deadline 300 ms: rc %d after %.0f ms "
                  "(%s)\n", rc, took, ftc_redis_errstr(r));
    assert_int_equal(rc, FTC_ETIMEDOUT);
    const char *av[] = {"GET", "big"};
    const char **const avs[] = {av};
    int ac[] = {2};
    ftc_redis_t *r2 = ftc_redis_connect(&u, &o, &err);
    assert_non_null(r2);
    t0 = ftc_now_ns();
    rc = ftc_redis_pipeline(r2, false, 1, ac, avs, NULL, NULL);
    print_message("pipeline of the same: rc %d after %.0f ms\n", rc,
                  (double)(ftc_now_ns() - t0) / 1e6);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    ftc_redis_close(r);
    ftc_redis_close(r2);
    trickle_stop(&t);
    ftc_redis_close(direct);
}

/* ftc_redis_cmdv with more than 64 arguments: all of them are sent (it used
 * to keep the first 64 silently and send a truncated command). */
static void test_cmdv_many_args(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(r);
    ftc_redis_reply_t *rep;
#define V10(p) p "0", p "1", p "2", p "3", p "4", p "5", p "6", p "7", p "8", p "9"
    /* RPUSH key + 100 values: 102 arguments */
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "RPUSH", "many", V10("a"), V10("b"), V10("c"),
                                    V10("d"), V10("e"), V10("f"), V10("g"), V10("h"), V10("i"),
                                    V10("j"), NULL),
                     0);
#undef V10
    long long v;
    assert_int_equal(ftc_redis_want_int(rep, "RPUSH", &v, &err), 0);
    assert_int_equal(v, 100);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "LINDEX", "many", "-1", NULL), 0);
    const char *s;
    assert_int_equal(ftc_redis_want_str(rep, "LINDEX", &s, NULL, &err), 0);
    assert_string_equal(s, "j9");
    ftc_redis_reply_free(rep);
    /* exactly 64 and 65 arguments (the old limit's edge) */
    const char *a65[65];
    char buf[65][8];
    a65[0] = "SADD";
    a65[1] = "edge";
    for (int i = 2; i < 65; i++) {
        snprintf(buf[i], sizeof buf[i], "m%d", i);
        a65[i] = buf[i];
    }
    assert_int_equal(ftc_redis_cmd(r, true, &rep, 65, a65, NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "SADD", &v, &err), 0);
    assert_int_equal(v, 63);
    ftc_redis_reply_free(rep);
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "SADD", "edge2", a65[2], a65[3], a65[4], a65[5],
                                    a65[6], a65[7], a65[8], a65[9], a65[10], a65[11], a65[12],
                                    a65[13], a65[14], a65[15], a65[16], a65[17], a65[18], a65[19],
                                    a65[20], a65[21], a65[22], a65[23], a65[24], a65[25], a65[26],
                                    a65[27], a65[28], a65[29], a65[30], a65[31], a65[32], a65[33],
                                    a65[34], a65[35], a65[36], a65[37], a65[38], a65[39], a65[40],
                                    a65[41], a65[42], a65[43], a65[44], a65[45], a65[46], a65[47],
                                    a65[48], a65[49], a65[50], a65[51], a65[52], a65[53], a65[54],
                                    a65[55], a65[56], a65[57], a65[58], a65[59], a65[60], a65[61],
                                    a65[62], a65[63], a65[64], NULL),
                     0);
    assert_int_equal(ftc_redis_want_int(rep, "SADD", &v, &err), 0);
    assert_int_equal(v, 63); /* 65 arguments: SADD, the key, 63 members */
    ftc_redis_reply_free(rep);
    ftc_redis_close(r);
}

/* A script whose EVALSHA answers late (NOSCRIPT after a CLIENT PAUSE of 700
 * ms) and whose EVAL fallback runs 700 ms: the call has one deadline (1000
 * ms) for both, so it times out. The fallback got a fresh full deadline, and
 * the call succeeded after 1.4 s. No timing is asserted: the server enforces
 * both lower bounds (the pause, the script's busy loop). */
static void test_script_fallback_shares_deadline(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    ftc_redis_t *r = connect_with_timeout(f, 1000);
    ftc_redis_t *pauser = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(pauser);
    ftc_redis_script_t busy;
    ftc_redis_script_init(&busy, "busy",
                          "local t = redis.call('TIME')\n"
                          "local t0 = t[1] * 1000000 + t[2]\n"
                          "repeat t = redis.call('TIME')\n"
                          "until t[1] * 1000000 + t[2] - t0 >= tonumber(ARGV[1]) * 1000\n"
                          "return 1");
    const char *args[] = {"700"};
    /* the pause is in force once its OK came back: the EVALSHA below waits it out */
    assert_int_equal(ftc_redis_cmdv(pauser, true, NULL, "CLIENT", "PAUSE", "700", "ALL", NULL), 0);
    uint64_t t0 = ftc_now_ns();
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc_redis_eval(r, &busy, 0, NULL, 1, args, &rep);
    printf("EVALSHA late by a 700 ms pause, EVAL 700 ms, deadline 1000 ms: rc %d after %llu ms "
           "(%s)\n",
           rc, (unsigned long long)((ftc_now_ns() - t0) / 1000000), ftc_redis_errstr(r));
    ftc_redis_reply_free(rep);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(ftc_redis_errstr(r), "script busy"));
    /* the server is fine afterwards (once the script has run out) */
    ftc_redis_t *after = connect_with_timeout(f, 5000);
    assert_int_equal(ftc_redis_cmdv(after, true, NULL, "PING", NULL), 0);
    ftc_redis_close(after);
    ftc_redis_close(pauser);
    ftc_redis_close(r);
}

/* The reconnect pauses' jitter (pure logic, fixed seeds): every pause lies in
 * backoff +-25% (b/4 rounded down) and under the cap, the pauses differ, some
 * below and some above the backoff; the same seed draws the same pauses. No
 * wall-clock time is measured. */
static void test_backoff_jitter_bounds(void **state)
{
    (void)state;
    const int backoffs[] = {1, 3, 4, 20, 40, 80, 160, 320, 640, 999, 1000, 1200};
    const int max_ms = 1000;
    for (size_t k = 0; k < sizeof backoffs / sizeof backoffs[0]; k++) {
        int b = backoffs[k];
        int lo = b - b / 4, hi = b + b / 4 > max_ms ? max_ms : b + b / 4;
        if (lo > max_ms)
            lo = max_ms;
        uint64_t rng = 42 + k, again = 42 + k;
        int min = INT32_MAX, max = -1, below = 0, above = 0, at_cap = 0;
        for (int i = 0; i < 2000; i++) {
            int ms = ftc__redis_jitter_ms(&rng, b, max_ms);
            if (ms < lo || ms > hi)
                fail_msg("backoff %d: pause %d outside [%d, %d]", b, ms, lo, hi);
            assert_int_equal(ftc__redis_jitter_ms(&again, b, max_ms), ms);
            min = ms < min ? ms : min;
            max = ms > max ? ms : max;
            below += ms < b;
            above += ms > b;
            at_cap += ms == max_ms;
        }
        /* cut at the cap, not piled up on it: uniform over lo..hi */
        assert_true(at_cap < 2000 / 10);
        printf("backoff %4d ms (cap %d): pauses %d..%d, %d below, %d above\n", b, max_ms, min,
               max, below, above);
        if (b >= 4 && b <= max_ms) {
            assert_true(min < max); /* not all equal */
            assert_true(below > 0);
        }
        if (b >= 4 && b < max_ms)
            assert_true(above > 0);
    }
    uint64_t rng = 7;
    assert_int_equal(ftc__redis_jitter_ms(&rng, 0, max_ms), 0);
    assert_int_equal(ftc__redis_jitter_ms(&rng, -5, max_ms), 0);
}

/* Connections draw different pauses: two of one process, and one of a
 * process forked after them (its seed is made again); a connection given a
 * seed draws what the pure function draws from it. */
static void test_backoff_jitter_per_connection(void **state)
{
    redis_fixture_t *f = *state;
    ftc_err_t err = {0};
    enum { N = 16 };
    int a[N], b[N], c[N], p[N];
    ftc_redis_t *r1 = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    ftc_redis_t *r2 = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(r1);
    assert_non_null(r2);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        ftc_redis_t *rc = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
        int out[N];
        for (int i = 0; i < N; i++)
            out[i] = rc ? ftc__redis_jitter_next(rc, 1000) : -1;
        ssize_t w = write(fds[1], out, sizeof out);
        _exit(w == (ssize_t)sizeof out ? 0 : 1);
    }
    close(fds[1]);
    for (int i = 0; i < N; i++) {
        a[i] = ftc__redis_jitter_next(r1, 1000);
        b[i] = ftc__redis_jitter_next(r2, 1000);
    }
    size_t got = 0;
    while (got < sizeof c) {
        ssize_t n = read(fds[0], (char *)c + got, sizeof c - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(got, sizeof c);
    for (int i = 0; i < N; i++) {
        if (a[i] < 750 || a[i] > 1000 || b[i] < 750 || b[i] > 1000 || c[i] < 750 || c[i] > 1000)
            fail_msg("pause %d: %d %d %d outside [750, 1000] (cap 1000)", i, a[i], b[i], c[i]);
    }
    assert_memory_not_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(b, c, sizeof a);
    /* a seeded connection is deterministic */
    ftc__redis_jitter_seed(r1, 1234);
    uint64_t rng = 1234;
    for (int i = 0; i < N; i++) {
        p[i] = ftc__redis_jitter_ms(&rng, 100, 1000);
        assert_int_equal(ftc__redis_jitter_next(r1, 100), p[i]);
    }
    ftc_redis_close(r2);
    ftc_redis_close(r1);
}

/* ---- host names: resolved within the connection's deadline ------------------------------ */

/* A name that resolves (localhost, from /etc/hosts) still connects. */
static void test_host_name_resolves(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    snprintf(u.host, sizeof u.host, "localhost");
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(&u, NULL, &err);
    if (!r)
        fail_msg("localhost: %s", err.msg);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "PING", NULL), 0);
    assert_int_equal(ftc_redis_want_status(rep, "PING", "PONG", &err), 0);
    ftc_redis_reply_free(rep);
    ftc_redis_close(r);
}

/* In a child of its own: new mount and network namespaces (and a user
 * namespace when not root) where /etc/resolv.conf names a DNS server on
 * 127.0.0.1:53 of the child's loopback, a real UDP socket that this process
 * holds: it answers every query NXDOMAIN (nx) or never answers (the resolver
 * waits `timeout:20`, one attempt). Returns through a pipe the code and
 * message of ftc_redis_connect to redis://HOST:6379 with connect_timeout_ms
 * 500; DNS_NO_NS when the namespaces cannot be made here. */
#define DNS_NO_NS 77 /* dns_child: the namespaces cannot be made here */

typedef struct dns_result {
    int code;                   /* of the first attempt */
    char msg[FTC_ERR_MSG_MAX];
    int last_code;              /* of the last of `tries` attempts */
    char last_msg[FTC_ERR_MSG_MAX];
    int threads;                /* the child's threads after the last attempt */
} dns_result_t;

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void *dns_nx_main(void *arg)
{
    int fd = *(int *)arg;
    for (;;) {
        unsigned char q[512];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n < 12)
            continue;
        q[2] = (unsigned char)(q[2] | 0x80); /* a response (QR), opcode and RD kept */
        q[3] = 0x83;                         /* RA, NXDOMAIN */
        sendto(fd, q, (size_t)n, 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

static int dns_child(bool nx, const char *host, const char *dir, int tries, dns_result_t *out)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    int flags = CLONE_NEWNS | CLONE_NEWNET | (uid ? CLONE_NEWUSER : 0);
    if (unshare(flags) != 0)
        return DNS_NO_NS;
    if (uid) {
        char m[64];
        int fd = open("/proc/self/setgroups", O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, "deny", 4);
            close(fd);
        }
        snprintf(m, sizeof m, "0 %u 1", (unsigned)uid);
        fd = open("/proc/self/uid_map", O_WRONLY);
        if (fd < 0 || write(fd, m, strlen(m)) < 0)
            return DNS_NO_NS;
        close(fd);
        snprintf(m, sizeof m, "0 %u 1", (unsigned)gid);
        fd = open("/proc/self/gid_map", O_WRONLY);
        if (fd < 0 || write(fd, m, strlen(m)) < 0)
            return DNS_NO_NS;
        close(fd);
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return DNS_NO_NS;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        return DNS_NO_NS;
    ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP);
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
        return DNS_NO_NS;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0)
        return DNS_NO_NS;
    char conf[512];
    snprintf(conf, sizeof conf, "%s/resolv.conf", dir);
    FILE *fp = fopen(conf, "w");
    if (!fp)
        return DNS_NO_NS;
    fprintf(fp, "nameserver 127.0.0.1\noptions timeout:20 attempts:1\n");
    fclose(fp);
    if (mount(conf, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0)
        return DNS_NO_NS;
    pthread_t t;
    if (nx && pthread_create(&t, NULL, dns_nx_main, &s) != 0)
        return DNS_NO_NS;
    ftc_redis_url_t u;
    ftc_err_t err = {0};
    char url[300];
    snprintf(url, sizeof url, "redis://%s:6379/0", host);
    if (ftc_redis_url_parse(url, &u, &err) != 0)
        return FTC_EINVAL;
    ftc_redis_options_t o = FTC_REDIS_OPTIONS_INIT;
    o.connect_timeout_ms = 500;
    for (int i = 0; i < tries; i++) {
        ftc_redis_t *r = ftc_redis_connect(&u, &o, &err);
        out->last_code = r ? 0 : err.code;
        snprintf(out->last_msg, sizeof out->last_msg, "%s", r ? "connected" : err.msg);
        ftc_redis_close(r);
        if (i == 0)
            out->code = out->last_code, memcpy(out->msg, out->last_msg, sizeof out->msg);
    }
    out->threads = count_threads();
    return 0;
}

/* Runs dns_child in a forked process; skips the test when the namespaces
 * cannot be made (no user namespaces and not root). */
static void dns_case(bool nx, const char *host, int tries, dns_result_t *res)
{
    char *dir = ftc_test_tmpdir("dns");
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dns_result_t r = {0};
        int rc = dns_child(nx, host, dir, tries, &r);
        int e = errno;
        if (rc)
            r.code = rc, snprintf(r.msg, sizeof r.msg, "setup: %s", strerror(e));
        (void)!write(p[1], &r, sizeof r);
        _exit(rc == DNS_NO_NS ? 77 : rc ? 1 : 0);
    }
    close(p[1]);
    memset(res, 0, sizeof *res);
    ssize_t n = read(p[0], res, sizeof *res);
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ftc_test_rmrf(dir);
    free(dir);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        print_message("SKIPPED: cannot make mount and network namespaces here (%s)\n", res->msg);
        skip();
    }
    assert_int_equal(n, (ssize_t)sizeof *res);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    print_message("%s: %s\n", host, res->msg);
}

/* A name the DNS server says does not exist: a clear error naming it. */
static void test_host_name_unknown(void **state)
{
    (void)state;
    dns_result_t res;
    dns_case(true, "no-such-redis.ftc-test", 1, &res);
    assert_int_equal(res.code, FTC_EREDIS);
    assert_non_null(strstr(res.msg, "no-such-redis.ftc-test"));
    assert_non_null(strstr(res.msg, "cannot resolve the host name"));
}

/* A DNS server that never answers: the connection attempt ends at its
 * deadline (connect_timeout_ms 500) with FTC_ETIMEDOUT naming the host. The
 * resolver itself would wait 20 s (resolv.conf's timeout) and then fail
 * with "Temporary failure in name resolution" (FTC_EREDIS): that was the
 * result before the lookup had a deadline. The lookups given up on run on
 * in their threads; a process reconnecting through a DNS outage keeps at
 * most 4 of them (8 attempts here would have left 8 threads): past that an
 * attempt fails at once, saying why. */
static void test_host_name_lookup_deadline(void **state)
{
    (void)state;
    dns_result_t res;
    dns_case(false, "slow-redis.ftc-test", 8, &res);
    assert_int_equal(res.code, FTC_ETIMEDOUT);
    assert_non_null(strstr(res.msg, "slow-redis.ftc-test"));
    assert_non_null(strstr(res.msg, "did not finish in time"));
    assert_int_equal(res.last_code, FTC_ETIMEDOUT);
    assert_non_null(strstr(res.last_msg, "slow-redis.ftc-test"));
    assert_non_null(strstr(res.last_msg, "earlier lookups of host names have not finished"));
    print_message("threads after 8 attempts: %d\n", res.threads);
    assert_true(res.threads <= 1 + 4); /* the main thread and 4 lookups */
}

/* A case with a redis-server of its own. */
#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, redis_fixture_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_parsing),
        cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_host_name_unknown),
        cmocka_unit_test(test_host_name_lookup_deadline),
        T(test_host_name_resolves),
        cmocka_unit_test(test_backoff_jitter_bounds),
        T(test_commands_and_reply_types),
        T(test_bad_options_and_empty_command),
        T(test_cmdv_many_args),
        T(test_auth_errors),
        T(test_deadline_on_stopped_server),
        T(test_reconnect_after_restart),
        T(test_sigterm_stopped_server),
        T(test_backoff_jitter_per_connection),
        T(test_scripts_sha_and_fallback),
        T(test_script_fallback_shares_deadline),
        T(test_url_file),
        T(test_pipeline),
        T(test_deadline_on_trickling_reply),
    };
    const char *only = getenv("FTC_TEST_FILTER"); /* e.g. "test_sigterm*" */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
