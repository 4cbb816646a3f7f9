/*
 * test_agent_watch.c — message WATCH (ckpt/agent_proto.h) against a real
 * agent that runs on a thread of this process, as under `ftc run` (WATCH
 * is taken only from the process the agent runs in, for its own child),
 * with a real Redis and real child processes for ranks:
 *   - a WATCH that comes after the rank's HELLO and BYE (the rank ended
 *     cleanly before the agent read its supervisor's WATCH) is no rank_exit
 *     event: it was one (the WATCH watched the exited pid again);
 *   - the rank of a WATCH is checked against the current generation's world:
 *     the one the agent read at its start, re-read when it had none (the
 *     record's world is set after the agent read it) or when the supervisor's
 *     disagrees; the supervisor's when the record has none; accepted
 *     unchecked (and logged) only when neither knows it. Before, a world of 0
 *     took any rank, and a world set later was never read;
 *   - a WATCH of a pid that exited and was reaped before the agent read it
 *     is answered FTC_ENOENT (what happened), not FTC_EAUTH;
 *   - a WATCH read after the rank's HELLO still says the rank is the
 *     supervisor's child, whose exit status it tells: a rank killed after its
 *     BYE and reaped by its supervisor first is a rank_exit with that status;
 *   - a BYE the agent's loop had not read when it ended (the job's end) is
 *     read then: the clean end is no rank_exit at the agent's stop.
 * No wall-clock bound is asserted: the absence of an event is checked after
 * the event of a later exit (rank 1's SIGKILL) is in the stream.
 */
#include "ftc_test.h"

#include "ckpt/agent.h"
#include "ckpt/agent_internal.h"
#include "ckpt/agent_proto.h"
#include "detect/detector_internal.h"
#include "detect/redis_fixture.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

typedef struct agent_thread {
    ftc_agent_t *a;
    pthread_t tid;
    volatile sig_atomic_t stop;
    char *dir;
} agent_thread_t;

static void *agent_main(void *arg)
{
    agent_thread_t *t = arg;
    ftc_agent_run(t->a, &t->stop);
    return NULL;
}

/* Generation 1 of job with world `world` (0: none yet), as the rendezvous
 * writes it before `ftc run` starts its agent. */
static void set_generation(redis_fixture_t *f, const char *job, uint32_t world)
{
    ftc_ctl_t *c = redis_fixture_ctl(f, job);
    char key[128], w[16];
    snprintf(w, sizeof w, "%u", world);
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "HSET",
                                    ftc_ctl_key(c, "gen", key, sizeof key), "gen", "1", "world", w,
                                    NULL), 0);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
}

/* The agent of node 0 in t->dir (made by the caller), on a thread. */
static void start_agent(agent_thread_t *t, redis_fixture_t *f, const char *job)
{
    setenv("FI_PROVIDER", "tcp;ofi_rxm", 1);
    ftc_agent_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.version = 1;
    o.job = job;
    o.dir = t->dir;
    o.nodes = 1;
    o.ranks_per_node = 2;
    o.timeout_ms = 2000;
    o.persist_every = 1;
    o.redis = *ftc_redis_server_url(f->srv);
    ftc_err_t err = {0};
    t->a = ftc_agent_start(&o, &err);
    if (!t->a)
        fail_msg("agent start: %s", err.msg);
    t->stop = 0;
    assert_int_equal(pthread_create(&t->tid, NULL, agent_main, t), 0);
}

static void stop_agent(agent_thread_t *t)
{
    t->stop = 1;
    pthread_join(t->tid, NULL);
    ftc_agent_stop(t->a);
    ftc_test_rmrf(t->dir);
    free(t->dir);
}

static int connect_agent(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Sends WATCH (rank, pid, world) on fd as the supervisor does. */
static void send_watch(int fd, const char *job, uint32_t rank, pid_t pid, uint32_t world)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_WATCH);
    m.seq = 1;
    m.rank = rank;
    m.world = world;
    m.pid = (int32_t)pid;
    snprintf(m.job, sizeof m.job, "%s", job);
    ftc_err_t err = {0};
    assert_int_equal(ftc_ap_send(fd, &m, 2000, &err), 0);
}

/* WATCH (rank, pid, world) as the supervisor sends it; the answer's type,
 * its status in *status. */
static unsigned watch(agent_thread_t *t, const char *job, uint32_t rank, pid_t pid,
                      uint32_t world, int *status)
{
    int fd = connect_agent(ftc_agent_socket(t->a));
    assert_true(fd >= 0);
    send_watch(fd, job, rank, pid, world);
    ftc_ap_msg_t m;
    ftc_err_t err = {0};
    assert_int_equal(ftc_ap_recv(fd, &m, 10000, &err), 0);
    close(fd);
    if (m.type == FTC_AP_ERROR)
        print_message("WATCH of rank %u (pid %d, world %u): %s (%s)\n", rank, (int)pid, world,
                      m.text, ftc_errname(m.status));
    *status = m.status;
    return m.type;
}

/* In a rank's child: connects to the agent at sock as `rank` of 2 and says
 * HELLO; the connection, once welcomed. Exits 2 when it cannot connect, 3
 * when it is not welcomed. */
static int child_hello(const char *sock, const char *job, uint32_t rank)
{
    int fd = connect_agent(sock);
    if (fd < 0)
        _exit(2);
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_HELLO);
    snprintf(m.job, sizeof m.job, "%s", job);
    m.seq = 1;
    m.rank = rank;
    m.world = 2;
    m.dp = 2, m.tp = m.pp = 1;
    m.dp_rank = rank;
    m.pid = (int32_t)getpid();
    ftc_err_t err = {0};
    if (ftc_ap_send(fd, &m, 5000, &err) || ftc_ap_recv(fd, &m, 10000, &err) ||
        m.type != FTC_AP_WELCOME)
        _exit(3);
    return fd;
}

/* Says BYE on fd; 0 or the error of the send. */
static int send_bye(int fd)
{
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_BYE);
    ftc_err_t err = {0};
    return ftc_ap_send(fd, &m, 5000, &err);
}

/* Reads fd until the agent closes it. */
static void wait_closed(int fd)
{
    ftc_ap_msg_t m;
    ftc_err_t err = {0};
    while (ftc_ap_recv(fd, &m, 10000, &err) == 0)
        ;
}

/* A child that waits for a byte on the pipe, then (hello) connects to the
 * agent at sock as `rank`, says HELLO and BYE and exits 0; without hello it
 * only waits to be killed. Forked before the agent's threads exist. */
static pid_t fork_rank(int *go, bool hello, const char *sock, const char *job, uint32_t rank)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[1]);
        char c;
        if (read(p[0], &c, 1) != 1 || !hello)
            for (;;)
                pause();
        int fd = child_hello(sock, job, rank);
        if (send_bye(fd))
            _exit(4);
        /* the agent has read the BYE when it closes the connection */
        wait_closed(fd);
        _exit(0);
    }
    close(p[0]);
    *go = p[1];
    return pid;
}

/* rank_exit events of `rank` in the job's stream. */
static int exits_of(redis_fixture_t *f, const char *job, int rank)
{
    char want[16];
    snprintf(want, sizeof want, "%d", rank);
    ftc_redis_reply_t *rep = redis_fixture_events(f, job);
    int n = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const char *k = redis_fixture_event_field(rep, i, "kind");
        const char *r = redis_fixture_event_field(rep, i, "rank");
        if (k && r && !strcmp(k, "rank_exit") && !strcmp(r, want))
            n++;
    }
    ftc_redis_reply_free(rep);
    return n;
}

/* Waits until the stream has rank's rank_exit event: exactly one. */
static void wait_one_exit(redis_fixture_t *f, const char *job, int rank)
{
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (exits_of(f, job, rank) < 1 && !ftc_deadline_expired(d))
        ftc_sleep_ms(20);
    assert_int_equal(exits_of(f, job, rank), 1);
}

/* pid exited with status 0; not reaped (WNOWAIT). */
static void assert_exited_0(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(si.si_code, CLD_EXITED);
    assert_int_equal(si.si_status, 0);
}

static void kill_rank(pid_t pid, int go)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(go);
}

/* A child that, once go is written, connects to the agent at sock as
 * `rank`, says HELLO and BYE, writes a byte to *said once the agent closed
 * its connection (it read the BYE), and stays (writing its outputs) until
 * killed. Forked before the agent's threads exist. */
static pid_t fork_rank_staying(int *go, int *said, const char *sock, const char *job,
                               uint32_t rank)
{
    int p[2], q[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(q), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[1]);
        close(q[0]);
        char c;
        if (read(p[0], &c, 1) != 1)
            _exit(1);
        int fd = child_hello(sock, job, rank);
        if (send_bye(fd))
            _exit(4);
        wait_closed(fd);
        if (write(q[1], "b", 1) != 1)
            _exit(5);
        for (;;)
            pause();
    }
    close(p[0]);
    close(q[1]);
    *go = p[1];
    *said = q[0];
    return pid;
}

/* Reaps pid as soon as a poll of the detector's local watch returns,
 * before the watch reads its status (the supervisor, the rank's parent,
 * reaping it first); 0 once reaped. calls: the polls that held the hook. */
typedef struct reaper {
    _Atomic pid_t pid;
    atomic_int calls;
} reaper_t;

static void reap_hook(void *arg, const struct pollfd *pfd, int npfd)
{
    (void)pfd;
    reaper_t *rp = arg;
    pid_t pid = atomic_load(&rp->pid);
    if (npfd > 1 && pid > 0 && waitpid(pid, NULL, WNOHANG) == pid)
        atomic_store(&rp->pid, 0);
    atomic_fetch_add(&rp->calls, 1);
}

/* Rank 0 says HELLO and BYE before the agent reads its supervisor's WATCH
 * (the agent's loop was behind; a rank continuing in-process connects to
 * the new generation's agent as its WATCH is sent), stays to write its
 * outputs and is killed there; the supervisor reaps it before the detector
 * reads its status, and tells it (ftc_agent_exit_status). Its exit is a
 * failure (`ftc run` fails the generation on it): a rank_exit "killed by
 * signal 9". Before, the WATCH read after the HELLO was not passed on, the
 * detector did not wait for the status of a process it did not know to be
 * the supervisor's child, and the BYE made the unknown status no event.
 * Rank 1's SIGKILL, after the status was told, is the marker. */
static void test_watch_after_hello_status_told(void **state)
{
    redis_fixture_t *f = *state;
    char job[32], sock[PATH_MAX];
    snprintf(job, sizeof job, "whel%d", (int)getpid());
    set_generation(f, job, 2);
    agent_thread_t t = {.dir = ftc_test_tmpdir("watch")};
    ftc_agent_socket_path(t.dir, 0, sock, sizeof sock);
    int go0, said0, go1;
    pid_t r0 = fork_rank_staying(&go0, &said0, sock, job, 0);
    pid_t r1 = fork_rank(&go1, false, sock, job, 1);
    start_agent(&t, f, job);
    int st;
    assert_int_equal(watch(&t, job, 1, r1, 2, &st), FTC_AP_WATCH_OK);
    assert_int_equal(write(go0, "g", 1), 1);
    char c;
    assert_int_equal(read(said0, &c, 1), 1); /* the agent read its HELLO and its BYE */
    assert_int_equal(watch(&t, job, 0, r0, 2, &st), FTC_AP_WATCH_OK);
    static reaper_t reap;
    atomic_store(&reap.pid, r0);
    atomic_store(&reap.calls, 0);
    ftc__detector_set_poll_hook(t.a->det, reap_hook, &reap);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (atomic_load(&reap.calls) < 1 && !ftc_deadline_expired(d))
        ftc_sleep_ms(1); /* the polls from now on hold the hook */
    kill(r0, SIGKILL);
    while (atomic_load(&reap.pid) && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_int_equal(atomic_load(&reap.pid), 0);
    ftc_agent_exit_status(t.a, 0, r0, SIGKILL); /* as the supervisor tells it */
    kill_rank(r1, go1);
    wait_one_exit(f, job, 1);
    int n0 = exits_of(f, job, 0);
    print_message("rank_exit events of rank 0 (HELLO, BYE, WATCH, killed, reaped first): %d\n",
                  n0);
    assert_int_equal(n0, 1);
    ftc__detector_set_poll_hook(t.a->det, NULL, NULL);
    close(go0);
    close(said0);
    stop_agent(&t);
}

/* A child that, once go is written, connects to the agent at sock as
 * `rank` and says HELLO, writes a byte to *said once welcomed, and, once
 * go2 is written, says BYE and exits 0 at once (as libftc's ftc_destroy
 * does: it does not wait for the agent to read the BYE). Forked before the
 * agent's threads exist. */
static pid_t fork_rank_late_bye(int *go, int *go2, int *said, const char *sock,
                                const char *job, uint32_t rank)
{
    int p[2], p2[2], q[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(p2), 0);
    assert_int_equal(pipe(q), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[1]);
        close(p2[1]);
        close(q[0]);
        char c;
        if (read(p[0], &c, 1) != 1)
            _exit(1);
        int fd = child_hello(sock, job, rank);
        if (write(q[1], "h", 1) != 1 || read(p2[0], &c, 1) != 1)
            _exit(4);
        if (send_bye(fd))
            _exit(5);
        _exit(0);
    }
    close(p[0]);
    close(p2[0]);
    close(q[1]);
    *go = p[1];
    *go2 = p2[1];
    *said = q[0];
    return pid;
}

/* The agent's loop ends (its supervisor stops it: the job's end) before it
 * read a rank's BYE, sent while the loop was busy (a WATCH it takes 3 s
 * over: FTC_TEST_AGENT_WATCH_DELAY_MS; the detector's wait for a BYE is
 * made 60 s here, so that only the loop's end, not that wait, is looked
 * at); the rank exited with 0 meanwhile. That is a clean end: no
 * rank_exit. Before, the BYE was never read, and the detector's stop
 * decided the exit that waited for it without it: a rank_exit "exited
 * (status 0)" in the stream at the job's end. */
static void test_bye_unread_when_the_loop_ends(void **state)
{
    redis_fixture_t *f = *state;
    char job[32], sock[PATH_MAX];
    snprintf(job, sizeof job, "wend%d", (int)getpid());
    set_generation(f, job, 2);
    agent_thread_t t = {.dir = ftc_test_tmpdir("watch")};
    ftc_agent_socket_path(t.dir, 0, sock, sizeof sock);
    int go0, bye0, said0, go1;
    pid_t r0 = fork_rank_late_bye(&go0, &bye0, &said0, sock, job, 0);
    pid_t r1 = fork_rank(&go1, false, sock, job, 1);
    assert_int_equal(setenv("FTC_TEST_AGENT_WATCH_DELAY_MS", "3000", 1), 0);
    start_agent(&t, f, job);
    assert_int_equal(unsetenv("FTC_TEST_AGENT_WATCH_DELAY_MS"), 0);
    ftc__detector_set_exit_wait_ms(t.a->det, 60000);
    assert_int_equal(write(go0, "g", 1), 1);
    char c;
    assert_int_equal(read(said0, &c, 1), 1); /* connected: its exit waits for a BYE */
    /* the loop busy with a WATCH: sent, not waited for; read once the
     * socket's queue is empty */
    int wfd = connect_agent(ftc_agent_socket(t.a));
    assert_true(wfd >= 0);
    send_watch(wfd, job, 1, r1, 2);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    int queued = 1;
    while (ioctl(wfd, SIOCOUTQ, &queued) == 0 && queued > 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(1);
    assert_int_equal(queued, 0);
    assert_int_equal(write(bye0, "b", 1), 1);
    assert_exited_0(r0);
    ftc_sleep_ms(100); /* its exit is seen */
    t.stop = 1; /* the loop ends after that WATCH */
    pthread_join(t.tid, NULL);
    ftc_agent_stop(t.a); /* the detector's stop publishes what it decided */
    int n0 = exits_of(f, job, 0);
    print_message("rank_exit events of a clean end whose BYE the ended loop did not read: %d\n",
                  n0);
    assert_int_equal(n0, 0);
    close(wfd);
    kill_rank(r1, go1);
    waitpid(r0, NULL, 0);
    close(go0);
    close(bye0);
    close(said0);
    ftc_test_rmrf(t.dir);
    free(t.dir);
}

static void test_watch_after_bye(void **state)
{
    redis_fixture_t *f = *state;
    char job[32], sock[PATH_MAX];
    snprintf(job, sizeof job, "wbye%d", (int)getpid());
    set_generation(f, job, 2);
    agent_thread_t t = {.dir = ftc_test_tmpdir("watch")};
    ftc_agent_socket_path(t.dir, 0, sock, sizeof sock);
    int go0, go1;
    pid_t r0 = fork_rank(&go0, true, sock, job, 0);
    pid_t r1 = fork_rank(&go1, false, sock, job, 1);
    start_agent(&t, f, job);
    /* rank 0 says HELLO and BYE and exits before its supervisor's WATCH is
     * read; not reaped (the supervisor waits for the answer first) */
    assert_int_equal(write(go0, "g", 1), 1);
    assert_exited_0(r0);
    int st;
    assert_int_equal(watch(&t, job, 0, r0, 2, &st), FTC_AP_WATCH_OK);
    /* rank 1, watched from its start, is killed: its event is the marker
     * after which rank 0's would be in the stream too */
    assert_int_equal(watch(&t, job, 1, r1, 2, &st), FTC_AP_WATCH_OK);
    kill_rank(r1, go1);
    wait_one_exit(f, job, 1);
    int n0 = exits_of(f, job, 0);
    print_message("rank_exit events of rank 0 (HELLO, BYE, exit 0, then WATCH): %d\n", n0);
    assert_int_equal(n0, 0);
    waitpid(r0, NULL, 0);
    close(go0);
    stop_agent(&t);
}

/* The world of generation 1 is unset when the agent reads it (0), then set
 * (as the rendezvous does): a WATCH is checked against the world it has now,
 * or the supervisor's while the record has none. */
static void test_watch_world(void **state)
{
    redis_fixture_t *f = *state;
    char job[32], sock[PATH_MAX];
    snprintf(job, sizeof job, "wwor%d", (int)getpid());
    set_generation(f, job, 0);
    agent_thread_t t = {.dir = ftc_test_tmpdir("watch")};
    ftc_agent_socket_path(t.dir, 0, sock, sizeof sock);
    int go;
    pid_t r = fork_rank(&go, false, sock, job, 0);
    start_agent(&t, f, job);
    int st;
    /* no world known to anyone: taken (and logged) */
    assert_int_equal(watch(&t, job, 5, r, 0, &st), FTC_AP_WATCH_OK);
    /* the supervisor's world, while the record has none */
    assert_int_equal(watch(&t, job, 5, r, 4, &st), FTC_AP_ERROR);
    assert_int_equal(st, FTC_ERANGE);
    assert_int_equal(watch(&t, job, 3, r, 4, &st), FTC_AP_WATCH_OK);
    /* the record's, set after the agent read it */
    set_generation(f, job, 2);
    assert_int_equal(watch(&t, job, 3, r, 0, &st), FTC_AP_ERROR);
    assert_int_equal(st, FTC_ERANGE);
    assert_int_equal(watch(&t, job, 2, r, 2, &st), FTC_AP_ERROR);
    assert_int_equal(st, FTC_ERANGE);
    assert_int_equal(watch(&t, job, 1, r, 2, &st), FTC_AP_WATCH_OK);
    kill_rank(r, go);
    stop_agent(&t);
}

/* The supervisor does not wait for a WATCH's answer while the agent's loop
 * is behind, so a rank that exits at once may be reaped before the agent
 * reads its WATCH. The answer says so (FTC_ENOENT), and is no refusal of an
 * intruder: before, it was FTC_EAUTH, "only the supervisor running this
 * agent may send it", which the supervisor logged as a WARN. */
static void test_watch_of_reaped_pid(void **state)
{
    redis_fixture_t *f = *state;
    char job[32];
    snprintf(job, sizeof job, "wrea%d", (int)getpid());
    set_generation(f, job, 2);
    agent_thread_t t = {.dir = ftc_test_tmpdir("watch")};
    pid_t gone = fork();
    assert_true(gone >= 0);
    if (gone == 0)
        _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    start_agent(&t, f, job);
    int st = 0;
    assert_int_equal(watch(&t, job, 0, gone, 2, &st), FTC_AP_ERROR);
    assert_int_equal(st, FTC_ENOENT);
    /* a live process that is not this process's child is still refused */
    assert_int_equal(watch(&t, job, 0, getppid(), 2, &st), FTC_AP_ERROR);
    assert_int_equal(st, FTC_EAUTH);
    stop_agent(&t);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_watch_after_bye, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_watch_world, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_watch_of_reaped_pid, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_watch_after_hello_status_told, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bye_unread_when_the_loop_ends, redis_fixture_setup,
                                        redis_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
