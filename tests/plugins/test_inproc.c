/*
 * test_inproc.c — the in-process recovery contract (plugins/inproc.h): the
 * assignment and state files (round trip, unset lines, malformed input, a
 * newer assignment written by another process while a rank waits, the
 * deadline), the SIGUSR1 leave request (queued with a generation: only that
 * generation is left; a plain kill is no request), and what the
 * request does to a rank: the handler aborts a real collective in flight
 * (two ranks over tcp;ofi_rxm, one of which never joins the all-reduce) and
 * the TCP rendezvous of a group that will never form (ftc_dist_opts_t.abort).
 */
#include "plugins/inproc.h"
#include "trainer/dist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("FTC_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/inproc-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

static void test_assign_round_trip(void **state)
{
    (void)state;
    char p[4200];
    path_of("assign.node0.0", p, sizeof p);
    char *vars[] = {"RANK=2", "WORLD_SIZE=3", "FTC_GENERATION=7", "MASTER_ADDR=127.0.0.1",
                    "-FTC_RESTORE_RANK"};
    ftc_err_t err = {0};
    assert_int_equal(ftc_inproc_assign_write(p, vars, 5, &err), 0);
    ftc_inproc_assign_t *a = malloc(sizeof *a);
    assert_non_null(a);
    assert_int_equal(ftc_inproc_assign_read(p, a, &err), 0);
    assert_int_equal(a->gen, 7);
    assert_int_equal(a->n, 5);
    assert_string_equal(a->line[4], "-FTC_RESTORE_RANK");
    setenv("FTC_RESTORE_RANK", "1", 1);
    assert_int_equal(ftc_inproc_apply(a, &err), 0);
    assert_string_equal(getenv("RANK"), "2");
    assert_string_equal(getenv("WORLD_SIZE"), "3");
    assert_string_equal(getenv("MASTER_ADDR"), "127.0.0.1");
    assert_null(getenv("FTC_RESTORE_RANK"));
    /* no temp file left behind */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_int_not_equal(access(tmp, F_OK), 0);
    free(a);
}

static void test_assign_bad_input(void **state)
{
    (void)state;
    char p[4200];
    path_of("assign.bad", p, sizeof p);
    ftc_err_t err = {0};
    char *nogen[] = {"RANK=1"};
    assert_int_equal(ftc_inproc_assign_write(p, nogen, 1, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "FTC_GENERATION"));
    char *bad[] = {"FTC_GENERATION=1", "NOT A VAR"};
    assert_int_equal(ftc_inproc_assign_write(p, bad, 2, &err), FTC_EINVAL);
    char *nl[] = {"FTC_GENERATION=1", "A=b\nC=d"};
    assert_int_equal(ftc_inproc_assign_write(p, nl, 2, &err), FTC_EINVAL);
    assert_int_equal(ftc_inproc_assign_write(NULL, nogen, 1, &err), FTC_EINVAL);
    ftc_inproc_assign_t *a = malloc(sizeof *a);
    assert_non_null(a);
    assert_int_equal(ftc_inproc_assign_read(p, a, &err), FTC_ENOENT);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("RANK=1\nFTC_GENERATION=x\n", f);
    fclose(f);
    assert_int_equal(ftc_inproc_assign_read(p, a, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "not a number"));
    f = fopen(p, "w");
    fputs("RANK=1\n= no key\n", f);
    fclose(f);
    assert_int_equal(ftc_inproc_assign_read(p, a, &err), FTC_EPROTO);
    f = fopen(p, "w");
    fputs("RANK=1\n", f);
    fclose(f);
    assert_int_equal(ftc_inproc_assign_read(p, a, &err), FTC_EPROTO);
    assert_non_null(strstr(err.msg, "no FTC_GENERATION"));
    /* the longest line (FTC_INPROC_LINE_MAX - 1 bytes) fits; one byte more
     * is refused: the line it was read into had no room for its NUL (a
     * line of exactly FTC_INPROC_LINE_MAX bytes wrote one byte past it) */
    size_t cap = 2 * FTC_INPROC_LINE_MAX + 64;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int extra = 0; extra < 2; extra++) {
        size_t k = (size_t)snprintf(text, cap, "FTC_GENERATION=7\nX=");
        size_t want = FTC_INPROC_LINE_MAX - 1 + (size_t)extra; /* the line's length */
        memset(text + k, 'v', want - 2);
        k += want - 2;
        text[k++] = '\n';
        assert_int_equal(ftc_inproc_assign_parse(text, k, "long", a, &err), extra ? FTC_EPROTO : 0);
        if (extra)
            assert_non_null(strstr(err.msg, "longer than"));
        else
            assert_int_equal(strlen(a->line[1]), FTC_INPROC_LINE_MAX - 1);
    }
    /* a NUL inside a line, and more lines than fit */
#define NUL_LINE "FTC_GENERATION=1\nA=b\0c\n"
#define LAST "\n\nFTC_GENERATION=5" /* no newline at the end */
#define NEG "FTC_GENERATION=-1\n"
    assert_int_equal(ftc_inproc_assign_parse(NUL_LINE, sizeof NUL_LINE - 1, "nul", a, &err),
                     FTC_EPROTO);
    size_t k = 0;
    for (int i = 0; i <= FTC_INPROC_MAX_VARS; i++)
        k += (size_t)snprintf(text + k, cap - k, "%s\n", i ? "A=1" : "FTC_GENERATION=2");
    assert_int_equal(ftc_inproc_assign_parse(text, k, "many", a, &err), FTC_EPROTO);
    assert_int_equal(ftc_inproc_assign_parse(LAST, sizeof LAST - 1, "last", a, &err), 0);
    assert_int_equal(a->gen, 5);
    assert_int_equal(a->n, 1);
    assert_int_equal(ftc_inproc_assign_parse(NEG, sizeof NEG - 1, "neg", a, &err), FTC_EPROTO);
    free(text);
    free(a);
}

/* A rank waits; another process (the supervisor) writes generation 3 after
 * an older one. */
static void test_assign_wait(void **state)
{
    (void)state;
    char p[4200];
    path_of("assign.wait", p, sizeof p);
    char *old[] = {"FTC_GENERATION=2", "RANK=0"};
    ftc_err_t err = {0};
    assert_int_equal(ftc_inproc_assign_write(p, old, 2, &err), 0);
    ftc_inproc_assign_t *a = malloc(sizeof *a);
    assert_non_null(a);
    /* nothing newer than 2: the deadline, with a message naming the file */
    assert_int_equal(ftc_inproc_assign_wait(p, 2, ftc_deadline_in_ms(100), NULL, a, &err),
                     FTC_ETIMEDOUT);
    assert_non_null(strstr(err.msg, "generation 2"));
    assert_non_null(strstr(err.msg, p));
    volatile sig_atomic_t cancel = 1;
    assert_int_equal(ftc_inproc_assign_wait(p, 2, ftc_deadline_in_ms(10000), &cancel, a, &err),
                     FTC_ECANCELED);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ftc_sleep_ms(150);
        char *nw[] = {"FTC_GENERATION=3", "RANK=1", "WORLD_SIZE=2"};
        ftc_err_t e2 = {0};
        _exit(ftc_inproc_assign_write(p, nw, 3, &e2) ? 1 : 0);
    }
    assert_int_equal(ftc_inproc_assign_wait(p, 2, ftc_deadline_in_ms(30000), NULL, a, &err), 0);
    assert_int_equal(a->gen, 3);
    assert_string_equal(a->line[1], "RANK=1");
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(a);
}

static void test_state_round_trip(void **state)
{
    (void)state;
    char a[4200], sp[4300];
    path_of("assign.st", a, sizeof a);
    ftc_inproc_state_path(a, sp, sizeof sp);
    assert_non_null(strstr(sp, "assign.st.state"));
    ftc_err_t err = {0};
    ftc_inproc_state_t st = {.pid = 1234, .gen = 9, .phase = FTC_INPROC_WAITING};
    snprintf(st.why, sizeof st.why, "coll all_gather: peer rank 2\nbroke");
    ftc_inproc_state_t back;
    assert_int_equal(ftc_inproc_state_read(sp, &back, &err), FTC_ENOENT);
    assert_int_equal(ftc_inproc_state_write(sp, &st, &err), 0);
    assert_int_equal(ftc_inproc_state_read(sp, &back, &err), 0);
    assert_int_equal(back.pid, 1234);
    assert_int_equal(back.gen, 9);
    assert_int_equal(back.phase, FTC_INPROC_WAITING);
    assert_string_equal(back.why, "coll all_gather: peer rank 2 broke");
    st.phase = FTC_INPROC_RUNNING;
    st.why[0] = 0;
    assert_int_equal(ftc_inproc_state_write(sp, &st, &err), 0);
    assert_int_equal(ftc_inproc_state_read(sp, &back, &err), 0);
    assert_int_equal(back.phase, FTC_INPROC_RUNNING);
    FILE *f = fopen(sp, "w");
    fputs("pid=1 gen=2 phase=dancing why=\n", f);
    fclose(f);
    assert_int_equal(ftc_inproc_state_read(sp, &back, &err), FTC_EPROTO);
    /* numbers are whole and in range, fields apart (fuzz_records found
     * sscanf's %llu taking gen=-1 as 2^64-1, and "pid=8gen=3phase=..."):
     * a supervisor would have taken the rank for one of generation 2^64-1 */
    const char *bad[] = {"pid=1 gen=-1 phase=waiting why=x\n", "pid=8gen=3phase=waiting why=\n",
                         "pid=99999999999 gen=3 phase=waiting why=\n",
                         "pid=1 gen=99999999999999999999 phase=waiting why=\n",
                         "pid=1 gen=+3 phase=waiting why=\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(sp, "w");
        fputs(bad[i], f);
        fclose(f);
        if (ftc_inproc_state_read(sp, &back, &err) != FTC_EPROTO)
            fail_msg("'%s' was read: gen %" PRIu64 ", pid %d", bad[i], back.gen, (int)back.pid);
    }
}

/* ---- the leave request ------------------------------------------------------------------ */

static atomic_int leaves;
static _Atomic(ftc_coll_t *) victim;
static atomic_int join_abort;

static void on_leave(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1); /* arg is &leaves */
    atomic_store(&join_abort, 1);
    ftc_coll_t *c = atomic_load(&victim);
    if (c)
        ftc_coll_abort(c);
}

/* Signals are delivered before sigqueue/kill to our own process returns when
 * this thread does not block them; a short bounded wait covers the others. */
static void settle(int want_leaves)
{
    for (int i = 0; i < 200 && atomic_load(&leaves) < want_leaves; i++)
        ftc_sleep_ms(5);
}

static void test_leave_generations(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    atomic_store(&leaves, 0);
    assert_int_equal(ftc_inproc_install(on_leave, &leaves, &err), 0);
    ftc_inproc_set_generation(5);
    assert_false(ftc_inproc_leave_requested());
    /* a late request for an older generation: ignored */
    assert_int_equal(ftc_inproc_signal(getpid(), 4), 0);
    settle(1);
    assert_false(ftc_inproc_leave_requested());
    assert_int_equal(atomic_load(&leaves), 0);
    /* for this generation: requested, and the collectives aborted */
    assert_int_equal(ftc_inproc_signal(getpid(), 5), 0);
    settle(1);
    assert_true(ftc_inproc_leave_requested());
    assert_int_equal(atomic_load(&leaves), 1);
    /* the next generation does not inherit it */
    ftc_inproc_set_generation(6);
    assert_false(ftc_inproc_leave_requested());
    /* asked to leave 7 while still in 6 (behind): it leaves 6, and 7 once it takes it up */
    assert_int_equal(ftc_inproc_signal(getpid(), 7), 0);
    settle(2);
    assert_true(ftc_inproc_leave_requested());
    assert_int_equal(atomic_load(&leaves), 2);
    ftc_inproc_set_generation(7);
    assert_true(ftc_inproc_leave_requested());
    /* a plain kill -USR1 (Slurm's --signal=USR1@N warning reaches every
     * process of the step): not a request, only recorded; it made every
     * rank leave its generation */
    ftc_inproc_set_generation(8);
    assert_false(ftc_inproc_leave_requested());
    assert_int_equal(ftc_inproc_ignored_signal(), 0);
    assert_int_equal(kill(getpid(), SIGUSR1), 0);
    int from = 0;
    for (int i = 0; i < 200 && (from = ftc_inproc_ignored_signal()) == 0; i++)
        ftc_sleep_ms(5);
    assert_int_equal(from, getpid());
    assert_false(ftc_inproc_leave_requested());
    assert_int_equal(atomic_load(&leaves), 2);
    assert_int_equal(ftc_inproc_ignored_signal(), 0);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

typedef struct joiner {
    ftc_dist_opts_t o;
    ftc_dist_t *d;
    int rc;
    ftc_err_t err;
} joiner_t;

static void *join_main(void *arg)
{
    joiner_t *j = arg;
    j->rc = ftc_dist_join(&j->o, &j->d, &j->err);
    return NULL;
}

/* The supervisor's SIGUSR1 aborts an all-reduce that a dead peer will never
 * join (well before its 60 s deadline). */
static void test_leave_aborts_collective(void **state)
{
    (void)state;
    int port = free_port();
    assert_true(port > 0);
    joiner_t j[2];
    memset(j, 0, sizeof j);
    pthread_t tid[2];
    for (int r = 0; r < 2; r++) {
        j[r].o = (ftc_dist_opts_t){.world = 2, .tp = 1, .rank = r, .host = "127.0.0.1",
                                   .port = port, .timeout_ms = 30000};
        assert_int_equal(pthread_create(&tid[r], NULL, join_main, &j[r]), 0);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(tid[r], NULL);
    if (j[0].rc || j[1].rc)
        fail_msg("joining: %s / %s", j[0].err.msg, j[1].err.msg);
    ftc_err_t err = {0};
    assert_int_equal(ftc_inproc_install(on_leave, &leaves, &err), 0);
    ftc_inproc_set_generation(11);
    atomic_store(&victim, j[0].d->dp);
    pid_t me = getpid();
    pid_t pid = fork(); /* the "supervisor": asks generation 11 to leave, 300 ms from now */
    assert_true(pid >= 0);
    if (pid == 0) {
        ftc_sleep_ms(300);
        _exit(ftc_inproc_signal(me, 11) ? 1 : 0);
    }
    float buf[64] = {1.0f};
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_coll_all_reduce(j[0].d->dp, buf, 64, FTC_COLL_F32, ftc_deadline_in_ms(60000));
    printf("# the all-reduce returned %d after %.0f ms\n", rc,
           (double)(ftc_now_ns() - t0) / 1e6);
    assert_int_equal(rc, FTC_ECANCELED);
    assert_true(ftc_inproc_leave_requested());
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    atomic_store(&victim, NULL);
    ftc_dist_destroy(j[0].d);
    ftc_dist_destroy(j[1].d);
}

static void *raise_later(void *arg)
{
    (void)arg;
    ftc_sleep_ms(300);
    atomic_store(&join_abort, 1);
    return NULL;
}

/* The TCP rendezvous of a group whose other rank never comes: aborted. */
static void test_join_abort(void **state)
{
    (void)state;
    int port = free_port();
    atomic_store(&join_abort, 0);
    for (int r = 0; r < 2; r++) {
        ftc_dist_opts_t o = {.world = 2, .tp = 1, .rank = r, .host = "127.0.0.1", .port = port,
                             .timeout_ms = 60000, .abort = &join_abort};
        pthread_t tid;
        assert_int_equal(pthread_create(&tid, NULL, raise_later, NULL), 0);
        ftc_dist_t *d = NULL;
        ftc_err_t err = {0};
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_dist_join(&o, &d, &err);
        pthread_join(tid, NULL);
        printf("# rank %d: the rendezvous returned %d after %.0f ms: %s\n", r, rc,
               (double)(ftc_now_ns() - t0) / 1e6, err.msg);
        assert_int_equal(rc, FTC_ECANCELED);
        assert_null(d);
        assert_non_null(strstr(err.msg, "aborted"));
        atomic_store(&join_abort, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign_round_trip),
        cmocka_unit_test(test_assign_bad_input),
        cmocka_unit_test(test_assign_wait),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_leave_generations),
        cmocka_unit_test(test_leave_aborts_collective),
        cmocka_unit_test(test_join_abort),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
