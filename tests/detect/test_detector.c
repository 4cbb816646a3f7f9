/*
 * test_detector.c — failure detection against a real redis-server with real
 * processes and real signals: a node killed with SIGKILL is reported exactly
 * once; the leader lease fails over when the leader is killed and when it is
 * SIGSTOPped (and the paused leader steps down once resumed); Redis killed
 * and restarted mid-run crashes nothing and the gap becomes an event; rank
 * exit, hangs, stragglers, NaN and loss spikes become events. Latencies are
 * printed, never asserted (the machines are shared).
 */
#include "redis_fixture.h"

#include "core/fsio.h"
#include "core/proc.h"
#include "detect/detector.h"
#include "detect/detector_internal.h"

#include <hiredis/hiredis.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

/* ---- event collection -------------------------------------------------------------- */

typedef struct seen {
    pthread_mutex_t mu;
    int n;
    struct {
        char kind[24], node[72], detail[256];
        int rank;
        uint64_t at_ns, gen, t_fault_ms, t_detect_ms;
    } ev[512];
} seen_t;

/* Empties s for a test (the seen_t of a test is static: too big for its stack). */
static void seen_init(seen_t *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

static void on_event(void *arg, const ftc_ctl_event_t *e)
{
    seen_t *s = arg;
    pthread_mutex_lock(&s->mu);
    if (s->n < 512) {
        snprintf(s->ev[s->n].kind, sizeof s->ev[0].kind, "%s", e->kind);
        snprintf(s->ev[s->n].node, sizeof s->ev[0].node, "%s", e->node);
        s->ev[s->n].rank = e->rank;
        snprintf(s->ev[s->n].detail, sizeof s->ev[0].detail, "%s", e->detail ? e->detail : "");
        s->ev[s->n].at_ns = ftc_now_ns();
        s->ev[s->n].gen = e->generation;
        s->ev[s->n].t_fault_ms = e->t_fault_ms;
        s->ev[s->n].t_detect_ms = e->t_detect_ms;
        s->n++;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Number of events of kind about node (NULL = any); *first_ns = time of the first. */
static int seen_count(seen_t *s, const char *kind, const char *node, uint64_t *first_ns)
{
    int c = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->ev[i].kind, kind) && (!node || !strcmp(s->ev[i].node, node))) {
            if (!c && first_ns)
                *first_ns = s->ev[i].at_ns;
            c++;
        }
    pthread_mutex_unlock(&s->mu);
    return c;
}

static bool wait_seen(seen_t *s, const char *kind, const char *node, int ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    while (!ftc_deadline_expired(d)) {
        if (seen_count(s, kind, node, NULL) > 0)
            return true;
        ftc_sleep_ms(5);
    }
    return false;
}

/* Detector `node` of job on the Redis at url (opt: other options, or NULL); its
 * events go to s unless s is NULL. */
static ftc_detector_t *start_detector_at(const ftc_redis_url_t *url, const char *job,
                                         const char *node, bool campaign, seen_t *s,
                                         ftc_detector_options_t *opt)
{
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    if (opt)
        o = *opt;
    o.job = job;
    o.node = node;
    o.campaign = campaign;
    o.on_event = s ? on_event : NULL;
    o.arg = s;
    ftc_err_t err = {0};
    ftc_detector_t *d = ftc_detector_start(url, &o, &err);
    if (!d)
        fail_msg("detector %s: %s", node, err.msg);
    return d;
}

static ftc_detector_t *start_detector(redis_fixture_t *f, const char *job, const char *node,
                                      bool campaign, seen_t *s, ftc_detector_options_t *opt)
{
    return start_detector_at(ftc_redis_server_url(f->srv), job, node, campaign, s, opt);
}

/* Detector B of job, a follower watching ranks, its events in s (emptied here), no
 * hang check in the way (hang_min_ms 100 s). */
static ftc_detector_t *start_rank_watcher(redis_fixture_t *f, const char *job, seen_t *s)
{
    seen_init(s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    return start_detector(f, job, "B", false, s, &o);
}

/* ---- agent processes ---------------------------------------------------------------- */

typedef struct agent {
    pid_t pid;
    char out[PATH_MAX];
} agent_t;

/* extra: up to 6 more arguments, NULL-terminated. */
static void spawn_agent_v(redis_fixture_t *f, agent_t *a, const char *job, const char *node,
                          const char *const *extra)
{
    char bin[PATH_MAX];
    const char *bd = getenv("FTC_BINARY_DIR");
    snprintf(bin, sizeof bin, "%s/tests/detect/det_agent", bd ? bd : ".");
    snprintf(a->out, sizeof a->out, "%s/%s.out", f->dir, node);
    a->pid = fork();
    assert_true(a->pid >= 0);
    if (a->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        FILE *o = freopen(a->out, "w", stdout);
        (void)o;
        const char *av[16] = {bin, ftc_redis_server_url_file(f->srv), job, node, "--lease-ms",
                              "600"};
        for (int i = 0; i < 6 && extra[i]; i++)
            av[6 + i] = extra[i];
        execv(bin, (char *const *)av);
        _exit(127);
    }
    /* wait for READY */
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    for (;;) {
        uint8_t *buf;
        size_t len;
        ftc_err_t err = {0};
        if (ftc_fs_read_file(a->out, 1 << 20, &buf, &len, &err) == 0) {
            bool ready = strstr((char *)buf, "READY") != NULL;
            free(buf);
            if (ready)
                return;
        }
        int st;
        if (waitpid(a->pid, &st, WNOHANG) == a->pid)
            fail_msg("agent %s exited before READY", node);
        if (ftc_deadline_expired(d))
            fail_msg("agent %s not ready", node);
        ftc_sleep_ms(10);
    }
}

static void spawn_agent(redis_fixture_t *f, agent_t *a, const char *job, const char *node,
                        const char *extra1, const char *extra2)
{
    const char *extra[] = {extra1, extra1 ? extra2 : NULL, NULL};
    spawn_agent_v(f, a, job, node, extra);
}

static bool agent_said(agent_t *a, const char *what)
{
    uint8_t *buf;
    size_t len;
    ftc_err_t err = {0};
    if (ftc_fs_read_file(a->out, 1 << 20, &buf, &len, &err) != 0)
        return false;
    bool yes = strstr((char *)buf, what) != NULL;
    free(buf);
    return yes;
}

static void kill_agent(agent_t *a, int sig)
{
    kill(a->pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        int st;
        waitpid(a->pid, &st, 0);
        a->pid = 0;
    }
}

/* Stream entries of a kind about a node. */
static int stream_count(redis_fixture_t *f, const char *job, const char *kind, const char *node)
{
    ftc_redis_reply_t *rep = redis_fixture_events(f, job);
    int n = 0;
    for (size_t i = 0; i < rep->elements; i++) {
        const char *k = redis_fixture_event_field(rep, i, "kind");
        const char *nd = redis_fixture_event_field(rep, i, "node");
        if (k && !strcmp(k, kind) && (!node || (nd && !strcmp(nd, node))))
            n++;
    }
    ftc_redis_reply_free(rep);
    return n;
}

static bool wait_leader_prefix(redis_fixture_t *f, const char *job, const char *prefix, int ms)
{
    ftc_ctl_t *c = redis_fixture_ctl(f, job);
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    bool ok = false;
    while (!ok && !ftc_deadline_expired(d)) {
        char holder[192];
        uint64_t ep;
        int64_t ttl;
        if (ftc_ctl_leader(c, holder, sizeof holder, &ep, &ttl) == 0 &&
            !strncmp(holder, prefix, strlen(prefix)))
            ok = true;
        else
            ftc_sleep_ms(10);
    }
    ftc_ctl_destroy(c);
    return ok;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_node_loss_reported_exactly_once(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t sb, sc;
    seen_init(&sb);
    seen_init(&sc);
    agent_t a;
    spawn_agent(f, &a, "jl", "A", "--no-campaign", NULL);
    ftc_detector_t *b = start_detector(f, "jl", "B", true, &sb, NULL);
    ftc_detector_t *c = start_detector(f, "jl", "C", false, &sc, NULL);
    ftc_sleep_ms(700); /* both have scanned A at least once */
    uint64_t t0 = ftc_now_ns();
    kill_agent(&a, SIGKILL);
    assert_true(wait_seen(&sb, "node_lost", "A", 5000));
    assert_true(wait_seen(&sc, "node_lost", "A", 5000));
    uint64_t tb = 0;
    seen_count(&sb, "node_lost", "A", &tb);
    print_message("node loss seen %.0f ms after SIGKILL (heartbeat TTL 1000 ms)\n",
                  (double)(tb - t0) / 1e6);
    ftc_sleep_ms(1200); /* more scans: still one event */
    assert_int_equal(seen_count(&sb, "node_lost", "A", NULL), 1);
    assert_int_equal(seen_count(&sc, "node_lost", "A", NULL), 1);
    assert_int_equal(stream_count(f, "jl", "node_lost", "A"), 1);
    assert_int_equal(stream_count(f, "jl", "node_lost", "B"), 0);
    ftc_detector_stop(b, true);
    ftc_detector_stop(c, true);
}

/* An expiry notification for a member this agent has not scanned yet: the dedupe id of
 * its node_lost names the incarnation, read from the member record. When that read
 * failed (Redis did not answer it, or refused it), the agent reported the loss under
 * "node_lost:X:" anyway, an id no other agent uses, and the stream had the loss twice.
 * Now it leaves the loss to its scan, which reads the incarnation. Here the read is
 * refused (the member hash replaced by a string) while the leader, which scanned X,
 * reports it under its incarnation. */
static void test_node_lost_not_reported_without_incarnation(void **state)
{
    redis_fixture_t *f = *state;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    o.scan_ms = 100;
    o.follower_scan_factor = 1000; /* A scans once, at its start: before X joins */
    ftc_detector_t *a = start_detector(f, "jx", "A", false, NULL, &o);
    ftc_sleep_ms(300);
    o.follower_scan_factor = 1;
    ftc_detector_t *b = start_detector(f, "jx", "B", true, NULL, &o);
    ftc_detector_t *x = start_detector(f, "jx", "X", false, NULL, &o);
    ftc_sleep_ms(500); /* B has scanned X */
    ftc_detector_stop(x, false); /* no leave: its heartbeat expires */
    ftc_ctl_t *c = redis_fixture_ctl(f, "jx");
    char mk[128];
    ftc_ctl_key(c, "members", mk, sizeof mk);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "DEL", mk, NULL), 0);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "SET", mk, "x", NULL), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while (stream_count(f, "jx", "node_lost", "X") == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(20);
    ftc_sleep_ms(1000); /* a second report would be there by now */
    int n = stream_count(f, "jx", "node_lost", "X");
    print_message("node_lost events for X: %d\n", n);
    assert_int_equal(n, 1);
    ftc_detector_stop(a, false);
    ftc_detector_stop(b, false);
    ftc_ctl_destroy(c);
}

/* Agent A of job, the leader (heartbeats every 100 ms), then detector B, which
 * campaigns for a lease of 600 ms. */
static ftc_detector_t *start_after_agent_leader(redis_fixture_t *f, agent_t *a, const char *job)
{
    spawn_agent(f, a, job, "A", "--hb-ms", "100");
    assert_true(wait_leader_prefix(f, job, "A:", 3000));
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.lease_ttl_ms = 600;
    return start_detector(f, job, "B", true, NULL, &o);
}

static void test_leader_failover_on_kill(void **state)
{
    redis_fixture_t *f = *state;
    agent_t a;
    ftc_detector_t *b = start_after_agent_leader(f, &a, "jk");
    ftc_sleep_ms(300);
    assert_false(ftc_detector_is_leader(b));
    uint64_t t0 = ftc_now_ns();
    kill_agent(&a, SIGKILL);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while (!ftc_detector_is_leader(b) && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_true(ftc_detector_is_leader(b));
    print_message("leader failover %.0f ms after SIGKILL (lease 600 ms)\n",
                  (double)(ftc_now_ns() - t0) / 1e6);
    ftc_detector_stop(b, true);
}

static void test_paused_leader_steps_down(void **state)
{
    redis_fixture_t *f = *state;
    agent_t a;
    ftc_detector_t *b = start_after_agent_leader(f, &a, "jp");
    kill_agent(&a, SIGSTOP);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while (!ftc_detector_is_leader(b) && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_true(ftc_detector_is_leader(b));
    ftc_detector_stats_t st;
    ftc_detector_stats(b, &st);
    kill_agent(&a, SIGCONT);
    /* once resumed, A notices and steps down; the lease stays with B */
    d = ftc_deadline_in_ms(3000);
    while (!agent_said(&a, "EVENT leader_lost A") && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_true(agent_said(&a, "EVENT leader_lost A"));
    ftc_sleep_ms(500);
    assert_true(wait_leader_prefix(f, "jp", "B:", 100));
    assert_true(ftc_detector_is_leader(b));
    ftc_ctl_t *c = redis_fixture_ctl(f, "jp");
    char holder[192];
    uint64_t ep;
    int64_t ttl;
    assert_int_equal(ftc_ctl_leader(c, holder, sizeof holder, &ep, &ttl), 0);
    assert_true(ep == st.epoch);
    ftc_ctl_destroy(c);
    kill_agent(&a, SIGTERM);
    ftc_detector_stop(b, true);
}

static void test_redis_restart_survived(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.redis_timeout_ms = 200;
    o.hang_min_ms = 100000;
    ftc_detector_t *b = start_detector(f, "jr", "B", true, &s, &o);
    ftc_sleep_ms(300);
    assert_int_equal(ftc_redis_server_signal(f->srv, SIGKILL), 0);
    /* meanwhile a rank dies: detected locally at once, published later */
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    assert_int_equal(ftc_detector_watch_pid(b, 3, child), 0);
    ftc_sleep_ms(800);
    kill(child, SIGKILL);
    assert_true(wait_seen(&s, "rank_exit", "B", 2000));
    int st;
    waitpid(child, &st, 0);
    ftc_detector_stats_t ds;
    ftc_detector_stats(b, &ds);
    assert_false(ds.redis_up);
    /* the wall clock steps an hour back during the outage (NTP): the gap's
     * length counts on the monotonic clock (it was now - then on the wall
     * clock: 2^64 - 3.6e6 ms) */
    ftc_wall_skew_for_test(-3600000);
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_server_restart(f->srv, &err), 0);
    assert_true(wait_seen(&s, "redis_gap", "B", 10000));
    ftc_wall_skew_for_test(0);
    unsigned long long gap_ms = ULLONG_MAX;
    pthread_mutex_lock(&s.mu);
    for (int i = 0; i < s.n; i++)
        if (!strcmp(s.ev[i].kind, "redis_gap"))
            sscanf(s.ev[i].detail, "redis was unreachable for %llu ms", &gap_ms);
    pthread_mutex_unlock(&s.mu);
    print_message("redis_gap: %llu ms\n", gap_ms);
    assert_true(gap_ms > 0 && gap_ms < 600000);
    /* both queued events reach the stream, in the order they happened: the
     * rank's exit (during the outage), then the gap; wait for both, not for
     * the first only (the gap may land a moment after it) */
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while ((stream_count(f, "jr", "rank_exit", "B") < 1 ||
            stream_count(f, "jr", "redis_gap", "B") < 1) &&
           !ftc_deadline_expired(d))
        ftc_sleep_ms(20);
    assert_int_equal(stream_count(f, "jr", "rank_exit", "B"), 1);
    assert_int_equal(stream_count(f, "jr", "redis_gap", "B"), 1);
    /* the member record that the restart lost is back */
    ftc_ctl_t *c = redis_fixture_ctl(f, "jr");
    char key[128];
    ftc_redis_reply_t *rep;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "HEXISTS",
                                    ftc_ctl_key(c, "members", key, sizeof key), "B", NULL), 0);
    assert_int_equal(rep->integer, 1);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
    ftc_detector_stats(b, &ds);
    assert_true(ds.gaps >= 1);
    assert_true(ds.redis_up);
    ftc_detector_stop(b, true);
}

static void test_rank_exit_and_hang(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 300;
    ftc_detector_t *b = start_detector(f, "jh", "B", false, &s, &o);
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    assert_int_equal(ftc_detector_watch_pid(b, 0, child), 0);
    ftc_sleep_ms(50);
    uint64_t t0 = ftc_now_ns();
    kill(child, SIGKILL);
    assert_true(wait_seen(&s, "rank_exit", "B", 2000));
    uint64_t t1 = 0;
    seen_count(&s, "rank_exit", "B", &t1);
    print_message("rank exit seen %.2f ms after SIGKILL\n", (double)(t1 - t0) / 1e6);
    int st;
    waitpid(child, &st, 0);
    for (int i = 0; i < 5; i++) {
        ftc_detector_progress(b, 1, i, 10000);
        ftc_sleep_ms(10);
    }
    assert_true(wait_seen(&s, "hang", "B", 3000));
    ftc_sleep_ms(500);
    assert_int_equal(seen_count(&s, "hang", "B", NULL), 1);
    /* progress resumes, then stops again: a new hang is a new event */
    ftc_detector_progress(b, 1, 5, 10000);
    ftc_sleep_ms(900);
    assert_int_equal(seen_count(&s, "hang", "B", NULL), 2);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jh", "hang", "B"), 2);
    assert_int_equal(stream_count(f, "jh", "rank_exit", "B"), 1);
}

/* The fd of this process's pidfd of pid (from /proc/self/fdinfo), or -1. */
static int pidfd_of(pid_t pid)
{
    DIR *dir = opendir("/proc/self/fdinfo");
    if (!dir)
        return -1;
    int found = -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(dir))) {
        char path[300], line[128];
        snprintf(path, sizeof path, "/proc/self/fdinfo/%s", de->d_name);
        FILE *fi = fopen(path, "r");
        if (!fi)
            continue;
        while (fgets(line, sizeof line, fi))
            if (!strncmp(line, "Pid:", 4) && atoi(line + 4) == (int)pid)
                found = atoi(de->d_name);
        fclose(fi);
    }
    closedir(dir);
    return found;
}

typedef struct reuse {
    ftc_detector_t *d;
    int old_fd;         /* rank 0's pidfd */
    pid_t new_pid;      /* the process of the rank that connects meanwhile (rank 1) */
    int new_fd;         /* its pidfd */
    atomic_int calls;   /* polls that returned */
    atomic_int done_at; /* the poll after which rank 0 went and rank 1 came (0: none yet) */
} reuse_t;

/* After the poll that saw rank 0's process exit, before the watch reads the
 * result: rank 0 goes (its BYE: unwatched, its pidfd closed) and a new rank
 * connects, whose pidfd gets the number just freed. */
static void reuse_hook(void *arg, const struct pollfd *pfd, int npfd)
{
    reuse_t *r = arg;
    int call = atomic_fetch_add(&r->calls, 1) + 1;
    if (atomic_load(&r->done_at))
        return;
    for (int k = 1; k < npfd; k++)
        if (pfd[k].fd == r->old_fd && pfd[k].revents) {
            ftc_detector_unwatch(r->d, 0);
            if (ftc_detector_watch_pid(r->d, 1, r->new_pid) == 0)
                r->new_fd = pidfd_of(r->new_pid);
            atomic_store(&r->done_at, call);
            return;
        }
}

/* A rank that waits for ever (killed with the test at the latest). */
static pid_t fork_paused(void)
{
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        pause();
        _exit(0);
    }
    return p;
}

/* A rank that spins for ever, busy on a CPU (a rank waiting in a collective). */
static pid_t fork_spinning(void)
{
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (volatile unsigned long x = 0;; x++) {
        }
    }
    return p;
}

/* A rank's exit seen by the poll is matched to the rank whose watch it was,
 * not to whichever rank holds that fd number when the result is read: here a
 * new rank's pidfd took the number in between. Before, the new (live) rank 1
 * got a rank_exit (failed: 1 rank_exit, not 0). */
static void test_stale_pidfd_event_not_charged_to_new_rank(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "js", &s);
    pid_t a = fork_paused(), c = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, a), 0);
    static reuse_t r;
    memset(&r, 0, sizeof r);
    r.d = b;
    r.new_pid = c;
    r.new_fd = -1;
    r.old_fd = pidfd_of(a);
    assert_true(r.old_fd >= 0);
    ftc__detector_set_poll_hook(b, reuse_hook, &r);
    ftc_deadline_t dl = ftc_deadline_in_ms(5000);
    /* a poll with the hook returned: every later one runs it */
    while (!atomic_load(&r.calls) && !ftc_deadline_expired(dl))
        ftc_sleep_ms(1);
    assert_true(atomic_load(&r.calls) > 0);
    kill(a, SIGKILL);
    while (!atomic_load(&r.done_at) && !ftc_deadline_expired(dl))
        ftc_sleep_ms(1);
    int done_at = atomic_load(&r.done_at);
    assert_true(done_at > 0);
    /* the case this test is about took place: the number was reused */
    assert_int_equal(r.new_fd, r.old_fd);
    /* the watch read that poll's result (and delivered its events) before its next poll */
    while (atomic_load(&r.calls) <= done_at && !ftc_deadline_expired(dl))
        ftc_sleep_ms(1);
    assert_true(atomic_load(&r.calls) > done_at);
    assert_int_equal(seen_count(&s, "rank_exit", NULL, NULL), 0);
    ftc__detector_set_poll_hook(b, NULL, NULL);
    /* rank 1's own exit is reported, as rank 1's */
    kill(c, SIGKILL);
    assert_true(wait_seen(&s, "rank_exit", "B", 5000));
    assert_int_equal(seen_count(&s, "rank_exit", NULL, NULL), 1);
    pthread_mutex_lock(&s.mu);
    int rank = -1;
    for (int i = 0; i < s.n; i++)
        if (!strcmp(s.ev[i].kind, "rank_exit"))
            rank = s.ev[i].rank;
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(rank, 1);
    waitpid(a, NULL, 0);
    waitpid(c, NULL, 0);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "js", "rank_exit", "B"), 1);
}

static void test_numerical_warnings(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_t *b = start_detector(f, "jn", "B", false, &s, NULL);
    for (int i = 0; i < 60; i++)
        ftc_detector_loss(b, 0, i, 2.0 + 0.01 * ((i * 7) % 5));
    assert_int_equal(seen_count(&s, "loss_spike", NULL, NULL), 0);
    ftc_detector_loss(b, 0, 60, 9.0);
    ftc_detector_loss(b, 0, 61, 0.0 / 0.0);
    assert_true(wait_seen(&s, "loss_spike", "B", 2000));
    assert_true(wait_seen(&s, "nan", "B", 2000));
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jn", "nan", "B"), 1);
    assert_int_equal(stream_count(f, "jn", "loss_spike", "B"), 1);
}

static void test_straggler_warning(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.scan_ms = 100;
    o.straggler_window = 3;
    o.heartbeat_ms = 50;
    o.ttl_ms = 1000;
    ftc_detector_t *d[4];
    const char *names[4] = {"N0", "N1", "N2", "N3"};
    for (int i = 0; i < 4; i++)
        d[i] = start_detector(f, "js", names[i], i == 0, i == 0 ? &s : NULL, &o);
    for (int step = 0; step < 60 && !seen_count(&s, "straggler", "N3", NULL); step++) {
        for (int i = 0; i < 4; i++)
            ftc_detector_progress(d[i], 0, step, i == 3 ? 30000 : 10000);
        ftc_sleep_ms(50);
    }
    assert_true(seen_count(&s, "straggler", "N3", NULL) >= 1);
    assert_int_equal(seen_count(&s, "straggler", "N1", NULL), 0);
    for (int i = 0; i < 4; i++)
        ftc_detector_stop(d[i], true);
    assert_true(stream_count(f, "js", "straggler", "N3") >= 1);
}

typedef struct flood {
    ftc_detector_t *d;
    atomic_bool stop;
    int64_t n;
} flood_t;

/* Reports an event of a new step as fast as it can (a rank's guard reporting a NaN at
 * every step of a fast job). */
static void *flood_main(void *arg)
{
    flood_t *fl = arg;
    while (!atomic_load(&fl->stop)) {
        ftc_detector_report(fl->d, "nan", 0, fl->n++, "loss is NaN");
        if (fl->n % 64 == 0)
            sched_yield();
    }
    return NULL;
}

/* Events reported faster than Redis takes them must not hold back the heartbeats: the
 * publication drained the queue while it was non-empty, so a steady flood kept the
 * Redis thread publishing, its heartbeat key expired and the others reported the node
 * lost (it was alive and working). */
static void test_event_flood_does_not_stop_heartbeats(void **state)
{
    redis_fixture_t *f = *state;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    ftc_detector_t *a = start_detector(f, "jf", "A", false, NULL, &o);
    flood_t fl = {.d = a};
    ftc_detector_stats_t st0, st1;
    ftc_sleep_ms(300);
    ftc_detector_stats(a, &st0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flood_main, &fl), 0);
    ftc_sleep_ms(2500); /* 2.5 TTLs: ten heartbeats are due */
    ftc_detector_stats(a, &st1);
    atomic_store(&fl.stop, true);
    pthread_join(t, NULL);
    print_message("flood of %" PRId64 " events: %" PRIu64 " heartbeats, %" PRIu64
                  " published, %" PRIu64 " dropped\n", fl.n, st1.heartbeats - st0.heartbeats,
                  st1.published - st0.published, st1.dropped - st0.dropped);
    assert_true(st1.published > st0.published); /* the flood reached Redis */
    assert_true(st1.heartbeats - st0.heartbeats >= 3);
    ftc_detector_stop(a, true);
}

static void test_bad_redis_at_start(void **state)
{
    redis_fixture_t *f = *state;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.job = "jb";
    o.node = "B";
    ftc_err_t err = {0};
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    snprintf(u.password, sizeof u.password, "nope");
    assert_null(ftc_detector_start(&u, &o, &err));
    assert_int_equal(err.code, FTC_EAUTH);
    u.port = 1;
    assert_null(ftc_detector_start(&u, &o, &err));
    assert_non_null(strstr(err.msg, "unreachable"));
    o.ttl_ms = 100; /* not above the heartbeat interval */
    assert_null(ftc_detector_start(ftc_redis_server_url(f->srv), &o, &err));
    assert_int_equal(err.code, FTC_EINVAL);
}

/* Job `job` at generation 3 (world 2) with step 10 committed (through c), and its
 * leader B (scans every 100 ms) once it has read both. */
static ftc_detector_t *start_leader_of_gen3(redis_fixture_t *f, ftc_ctl_t *c, const char *job)
{
    ftc_redis_t *r = ftc_ctl_redis(c);
    char gk[128], ck[128];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    ftc_ctl_key(c, "commit", ck, sizeof ck);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ck, "step", "10", "gen", "3", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "3", "world", "2", NULL), 0);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.scan_ms = 100;
    o.hang_min_ms = 100000;
    ftc_detector_t *b = start_detector(f, job, "B", true, NULL, &o);
    ftc_detector_stats_t ds;
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    do {
        ftc_sleep_ms(20);
        ftc_detector_stats(b, &ds);
    } while (!(ds.generation == 3 && ds.leader) && !ftc_deadline_expired(d));
    assert_int_equal(ds.generation, 3);
    ftc_sleep_ms(300); /* a few more scans: the committed step is read too */
    return b;
}

/* Polls (up to ms) until the job's generation is 3 and its committed step 10 again, then
 * asserts generation 3 of world 2 and committed step 10 (what it read last, printed after
 * `what`). */
static void assert_gen3_put_back(ftc_ctl_t *c, int ms, const char *what)
{
    uint64_t gen = 0, cgen = 0;
    uint32_t world = 0;
    int64_t step = -1;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    while (!ftc_deadline_expired(d)) {
        assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
        assert_int_equal(ftc_ctl_committed(c, &step, &cgen), 0);
        if (gen == 3 && step == 10)
            break;
        ftc_sleep_ms(20);
    }
    print_message("after %s: gen %" PRIu64 " world %u committed %" PRId64 "\n", what, gen, world,
                  step);
    assert_int_equal(gen, 3);
    assert_int_equal(world, 2);
    assert_int_equal(step, 10);
}

/* A commit of generation 3 is accepted again; stops leader b and destroys c. */
static void assert_commits_then_stop(ftc_ctl_t *c, ftc_detector_t *b)
{
    int64_t committed = -1;
    bool now = false;
    assert_int_equal(ftc_ctl_commit_report(c, 3, 11, 0, 1, &committed, &now), 0);
    ftc_detector_stop(b, true);
    ftc_ctl_destroy(c);
}

/* Redis loses its data without any command failing (FLUSHALL here; a restart
 * between two heartbeats looks the same: the next command reconnects inside
 * its deadline). The agent must put back the generation and the committed
 * step, else every commit_report is refused ("no generation is set"). */
static void test_data_loss_without_outage_reseeded(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jd");
    ftc_redis_t *r = ftc_ctl_redis(c);
    ftc_detector_t *b = start_leader_of_gen3(f, c, "jd");
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "FLUSHALL", NULL), 0);
    assert_gen3_put_back(c, 5000, "FLUSHALL");
    assert_commits_then_stop(c, b); /* and a commit of the generation is accepted again */
}

/* Redis comes back with an older copy of the job's state (a restart from a stale RDB or
 * AOF, a failover to a lagging replica) without any command failing: the generation and
 * the committed step went back. The agent must put back what it knows, as after a flush
 * (and as a rendezvous does), not take the older generation for the current one: its
 * heartbeats carried the old generation and every commit_report of the current one was
 * refused as stale. */
static void test_older_state_without_outage_put_back(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jo");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char gk[128], ck[128];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    ftc_ctl_key(c, "commit", ck, sizeof ck);
    ftc_detector_t *b = start_leader_of_gen3(f, c, "jo");
    /* the older copy: generation 2 (world 3), committed step 7 */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "2", "world", "3", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ck, "step", "7", "gen", "2", NULL), 0);
    assert_gen3_put_back(c, 3000, "the older copy");
    ftc_detector_stats_t ds;
    ftc_detector_stats(b, &ds);
    print_message("detector's generation %" PRIu64 "\n", ds.generation);
    assert_int_equal(ds.generation, 3);
    assert_commits_then_stop(c, b);
}

/* A key of the job holding another type (a foreign or corrupt value) is an
 * error naming it, not an outage: the detector keeps detecting, and does not
 * log a redis_gap for every heartbeat. */
static void test_wrong_type_key_is_not_an_outage(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jw");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char gk[128];
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", ftc_ctl_key(c, "gen", gk, sizeof gk),
                                    "not-a-hash", NULL), 0);
    uint64_t gen;
    uint32_t world;
    int grc = ftc_ctl_generation(c, &gen, &world);
    char gmsg[FTC_ERR_MSG_MAX];
    snprintf(gmsg, sizeof gmsg, "%s", ftc_ctl_errstr(c));
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.scan_ms = 50;
    o.heartbeat_ms = 50;
    o.hang_min_ms = 100000;
    ftc_detector_t *b = start_detector(f, "jw", "B", true, NULL, &o);
    ftc_detector_stats_t ds;
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    do {
        ftc_sleep_ms(20);
        ftc_detector_stats(b, &ds);
    } while (ds.heartbeats < 20 && !ftc_deadline_expired(d));
    print_message("%" PRIu64 " heartbeats, %" PRIu64 " gaps\n", ds.heartbeats, ds.gaps);
    assert_true(ds.heartbeats >= 20);
    assert_int_equal(ds.gaps, 0);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jw", "redis_gap", NULL), 0);
    /* the error names the key and the reason, and is FTC_EPROTO (garbage), not FTC_EREDIS */
    print_message("%s\n", gmsg);
    assert_non_null(strstr(gmsg, "WRONGTYPE"));
    assert_non_null(strstr(gmsg, gk));
    assert_int_equal(grc, FTC_EPROTO);
    ftc_ctl_destroy(c);
}

/* A node lost in one generation is one event in the stream, even when an
 * agent that first sees it missing is already in the next generation (a
 * replacement's agent scans the members: the lost node's record is never
 * removed). The id names the incarnation, so the dedupe is job-wide. */
static void test_node_lost_once_across_generations(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jg");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char gk[128], mk[128];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    ftc_ctl_key(c, "members", mk, sizeof mk);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "5", "world", "2", NULL), 0);
    /* X joined once and died: its record stays, its heartbeat is gone */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", mk, "X", "hx - 4242 1700000000000",
                                    NULL), 0);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.scan_ms = 100;
    o.hang_min_ms = 100000;
    static seen_t sa, sb;
    seen_init(&sa);
    seen_init(&sb);
    ftc_detector_t *a = start_detector(f, "jg", "A", true, &sa, &o);
    assert_true(wait_seen(&sa, "node_lost", "X", 5000));
    ftc_detector_stop(a, true);
    assert_int_equal(stream_count(f, "jg", "node_lost", "X"), 1);
    /* the job moves on; a new agent (generation 6) scans the members */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "6", NULL), 0);
    ftc_detector_t *b = start_detector(f, "jg", "B", true, &sb, &o);
    assert_true(wait_seen(&sb, "node_lost", "X", 5000));
    ftc_detector_stop(b, true); /* publishes what it queued */
    assert_int_equal(stream_count(f, "jg", "node_lost", "X"), 1);
    ftc_ctl_destroy(c);
}

/* An expiry notification for a key whose name is longer than any node id
 * (ftc:{J}:hb: + 65 characters: not an agent's) must not be cut down to the
 * live node whose id is its first 64 characters and reported as lost. */
static void test_long_expired_key_not_cut_to_a_node(void **state)
{
    redis_fixture_t *f = *state;
    char nid[FTC_CTL_NODE_MAX + 1];
    memset(nid, 'n', FTC_CTL_NODE_MAX);
    nid[FTC_CTL_NODE_MAX] = '\0';
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    ftc_detector_t *live = start_detector(f, "jt", nid, false, NULL, &o);
    ftc_detector_t *b = start_detector(f, "jt", "B", true, &s, &o);
    ftc_sleep_ms(500); /* B subscribed to expiry notifications */
    ftc_ctl_t *c = redis_fixture_ctl(f, "jt");
    char suffix[FTC_CTL_NODE_MAX + 8], key[256];
    snprintf(suffix, sizeof suffix, "hb:%sX", nid);
    ftc_ctl_key(c, suffix, key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "SET", key, "1 0 0 0", "PX",
                                    "20", NULL), 0);
    ftc_sleep_ms(300);
    /* a short foreign key expires after it: its notification comes later */
    ftc_ctl_key(c, "hb:ghost", key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "SET", key, "1 0 0 0", "PX",
                                    "20", NULL), 0);
    assert_true(wait_seen(&s, "node_lost", "ghost", 5000));
    assert_int_equal(seen_count(&s, "node_lost", nid, NULL), 0);
    ftc_detector_stop(b, true);
    ftc_detector_stop(live, true);
    ftc_ctl_destroy(c);
}

/* ---- a TCP proxy that loses one reply ------------------------------------------------ */

/* Forwards connections to Redis. Armed, it lets the next request holding
 * "XADD" through, waits for Redis's reply (the command ran) and closes that
 * client connection instead of forwarding it: a reply lost after the command
 * executed, as when a link drops or Redis is paused right after reading. */
typedef struct proxy {
    int lfd, port, up_port;
    atomic_int stop, armed, swallowed;
    /* hold_renew armed: the reply to the next lease renewal (EVALSHA on the
     * leader key alone) is held hold_ms, then forwarded, and from then on
     * nothing passes (a link gone dark): held = 1 */
    atomic_int hold_renew, held, dark;
    int hold_ms;
    pthread_t tid;
} proxy_t;

static void *proxy_main(void *arg)
{
    proxy_t *p = arg;
    enum { NP = 16 };
    int cfd[NP], sfd[NP];
    bool drop[NP], hold[NP];
    for (int i = 0; i < NP; i++)
        cfd[i] = sfd[i] = -1, drop[i] = hold[i] = false;
    char buf[65536];
    while (!atomic_load(&p->stop)) {
        struct pollfd pf[1 + 2 * NP];
        int who[1 + 2 * NP];
        int n = 0;
        pf[n] = (struct pollfd){p->lfd, POLLIN, 0};
        who[n++] = -1;
        for (int i = 0; i < NP; i++)
            if (cfd[i] >= 0) {
                pf[n] = (struct pollfd){cfd[i], POLLIN, 0};
                who[n++] = i;
                pf[n] = (struct pollfd){sfd[i], POLLIN, 0};
                who[n++] = NP + i;
            }
        if (poll(pf, (nfds_t)n, 20) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (who[k] < 0) {
                int c = accept(p->lfd, NULL, NULL);
                if (c < 0)
                    continue;
                int sv = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in a = {.sin_family = AF_INET,
                                        .sin_port = htons((uint16_t)p->up_port)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                int i = 0;
                while (i < NP && cfd[i] >= 0)
                    i++;
                if (i == NP || connect(sv, (struct sockaddr *)&a, sizeof a) != 0) {
                    close(c);
                    close(sv);
                    continue;
                }
                cfd[i] = c, sfd[i] = sv, drop[i] = hold[i] = false;
                continue;
            }
            int i = who[k] % NP;
            bool from_client = who[k] < NP;
            if (cfd[i] < 0)
                continue;
            ssize_t r = read(from_client ? cfd[i] : sfd[i], buf, sizeof buf);
            bool gone = r <= 0;
            if (!gone && atomic_load(&p->dark))
                continue; /* nothing passes, nothing is closed */
            if (!gone && from_client && atomic_load(&p->hold_renew) &&
                memmem(buf, (size_t)r, "EVALSHA", 7) && memmem(buf, (size_t)r, ":leader\r\n", 9) &&
                !memmem(buf, (size_t)r, "leader:epoch", 12)) {
                atomic_store(&p->hold_renew, 0);
                hold[i] = true;
            }
            if (!gone && !from_client && hold[i]) {
                ftc_sleep_ms((uint64_t)p->hold_ms); /* the renewal ran; its answer is late */
                gone = write(cfd[i], buf, (size_t)r) != r;
                atomic_store(&p->dark, 1);
                atomic_store(&p->held, 1);
            } else if (!gone && from_client) {
                if (atomic_load(&p->armed) && memmem(buf, (size_t)r, "XADD", 4)) {
                    atomic_store(&p->armed, 0);
                    drop[i] = true;
                }
                gone = write(sfd[i], buf, (size_t)r) != r;
            } else if (!gone && drop[i]) {
                atomic_store(&p->swallowed, 1); /* the reply came: the XADD ran */
                gone = true;
            } else if (!gone) {
                gone = write(cfd[i], buf, (size_t)r) != r;
            }
            if (gone) {
                close(cfd[i]);
                close(sfd[i]);
                cfd[i] = sfd[i] = -1;
            }
        }
    }
    for (int i = 0; i < NP; i++)
        if (cfd[i] >= 0) {
            close(cfd[i]);
            close(sfd[i]);
        }
    return NULL;
}

static void proxy_start(proxy_t *p, int up_port)
{
    memset(p, 0, sizeof *p);
    p->up_port = up_port;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(p->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(p->lfd, 16), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&a, &al), 0);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->tid, NULL, proxy_main, p), 0);
}

static void proxy_stop(proxy_t *p)
{
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    close(p->lfd);
}

/* A plain event (here the `leader` event) whose XADD ran but whose reply was
 * lost is in the stream once: the detector publishes it again after the
 * reconnect, so the publication must be idempotent. */
static void test_event_once_after_lost_reply(void **state)
{
    redis_fixture_t *f = *state;
    proxy_t px;
    proxy_start(&px, ftc_redis_server_url(f->srv)->port);
    atomic_store(&px.armed, 1);
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    u.port = px.port;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    ftc_detector_t *b = start_detector_at(&u, "je", "B", true, NULL, &o);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    ftc_detector_stats_t ds;
    do {
        ftc_sleep_ms(20);
        ftc_detector_stats(b, &ds);
    } while (!(atomic_load(&px.swallowed) && ds.published >= 1) && !ftc_deadline_expired(d));
    print_message("reply swallowed %d, gaps %" PRIu64 ", published %" PRIu64 "\n",
                  atomic_load(&px.swallowed), ds.gaps, ds.published);
    assert_true(atomic_load(&px.swallowed));
    ftc_detector_stop(b, true);
    proxy_stop(&px);
    assert_int_equal(stream_count(f, "je", "leader", "B"), 1);
}

/* The local lease runs from when a renewal was sent, not from when its reply
 * came: a reply that arrives late (here 450 ms, under the 500 ms command
 * timeout) must not let the detector call itself leader after the lease
 * expired in Redis (where the renewal ran before the delay). */
static void test_late_renewal_reply_does_not_extend_lease(void **state)
{
    redis_fixture_t *f = *state;
    proxy_t px;
    proxy_start(&px, ftc_redis_server_url(f->srv)->port);
    px.hold_ms = 450;
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    u.port = px.port;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    ftc_detector_t *b = start_detector_at(&u, "jy", "B", true, NULL, &o);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (!ftc_detector_is_leader(b) && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_true(ftc_detector_is_leader(b));
    ftc_sleep_ms(1200); /* renewals every 500 ms: the renew script is loaded (no NOSCRIPT) */
    atomic_store(&px.hold_renew, 1);
    while (!atomic_load(&px.held) && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_true(atomic_load(&px.held));
    /* straight to Redis: wait for the lease key to expire there */
    ftc_ctl_t *c = redis_fixture_ctl(f, "jy");
    char key[128];
    ftc_ctl_key(c, "leader", key, sizeof key);
    bool gone = false;
    d = ftc_deadline_in_ms(10000);
    while (!gone && !ftc_deadline_expired(d)) {
        ftc_redis_reply_t *rep = NULL;
        assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "EXISTS", key, NULL), 0);
        gone = rep->integer == 0;
        ftc_redis_reply_free(rep);
        if (!gone)
            ftc_sleep_ms(2);
    }
    bool still = ftc_detector_is_leader(b);
    assert_true(gone);
    print_message("lease key expired in redis; detector still leader: %d\n", still);
    assert_false(still);
    ftc_ctl_destroy(c);
    ftc_detector_stop(b, true);
    proxy_stop(&px);
}

/* The leader's own outage is no evidence against the others: while it was
 * cut off (here its link went dark for 1.5 s, longer than the heartbeat TTL)
 * B was paused too, as every agent is when Redis itself is away, and B's
 * heartbeat expired. Back, the leader must give the others a heartbeat TTL
 * to come back before it reports them lost. */
static void test_no_loss_reported_right_after_own_outage(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    agent_t b;
    spawn_agent(f, &b, "jo", "B", "--no-campaign", NULL);
    proxy_t px;
    proxy_start(&px, ftc_redis_server_url(f->srv)->port);
    ftc_redis_url_t u = *ftc_redis_server_url(f->srv);
    u.port = px.port;
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    ftc_detector_t *a = start_detector_at(&u, "jo", "A", true, &s, &o);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (!ftc_detector_is_leader(a) && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_true(ftc_detector_is_leader(a));
    ftc_sleep_ms(700); /* A has scanned B */
    atomic_store(&px.dark, 1);
    kill(b.pid, SIGSTOP);
    ftc_sleep_ms(1500); /* B's heartbeat (TTL 1000 ms) expires in Redis */
    ftc_detector_stats_t ds;
    ftc_detector_stats(a, &ds);
    uint64_t gaps0 = ds.gaps;
    atomic_store(&px.dark, 0);
    d = ftc_deadline_in_ms(10000);
    do {
        ftc_sleep_ms(2);
        ftc_detector_stats(a, &ds);
    } while (ds.gaps == gaps0 && !ftc_deadline_expired(d));
    kill(b.pid, SIGCONT); /* back as soon as A is: B was only cut off like A */
    assert_true(ds.gaps > gaps0);
    ftc_sleep_ms(2500); /* more than the grace: scans and polls found B alive */
    int lost = seen_count(&s, "node_lost", "B", NULL);
    print_message("node_lost of B after A's outage: %d\n", lost);
    assert_int_equal(lost, 0);
    /* the grace ends: a node that really dies is reported as usual */
    kill_agent(&b, SIGKILL);
    assert_true(wait_seen(&s, "node_lost", "B", 5000));
    ftc_detector_stop(a, true);
    proxy_stop(&px);
    assert_int_equal(stream_count(f, "jo", "node_lost", "B"), 1);
}

/* ---- the deadline poll pages past nodes with skewed clocks ---------------------------- */

typedef struct lost_detail {
    pthread_mutex_t mu;
    char detail[256]; /* of the first node_lost about "victim" */
} lost_detail_t;

static void on_victim_lost(void *arg, const ftc_ctl_event_t *e)
{
    lost_detail_t *l = arg;
    pthread_mutex_lock(&l->mu);
    if (!strcmp(e->kind, "node_lost") && !strcmp(e->node, "victim") && !l->detail[0])
        snprintf(l->detail, sizeof l->detail, "%s", e->detail ? e->detail : "?");
    pthread_mutex_unlock(&l->mu);
}

/* 300 live nodes whose deadlines lie in the past (their clocks run 60 s
 * behind: their heartbeat keys are there) sort before a node really lost
 * (deadline passed, key gone; deleted, so no expiry notification, and the
 * member scan runs once a minute): the leader's deadline poll pages past the
 * 300 and reports it ("heartbeat deadline passed", the poll's own words). */
static void test_deadline_poll_pages_past_skewed_clocks(void **state)
{
    redis_fixture_t *f = *state;
    static lost_detail_t l;
    memset(&l, 0, sizeof l);
    pthread_mutex_init(&l.mu, NULL);
    ftc_ctl_t *c = redis_fixture_ctl(f, "jsk");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char key[256], dl[256], name[32], score[32];
    ftc_ctl_key(c, "deadlines", dl, sizeof dl);
    uint64_t now = ftc_wall_ms();
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "skew%03d", i);
        char suffix[48];
        snprintf(suffix, sizeof suffix, "hb:%s", name);
        ftc_ctl_key(c, suffix, key, sizeof key);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", key, "1 0 0 0", "PX", "120000",
                                        NULL), 0);
        snprintf(score, sizeof score, "%" PRIu64, now - 60000 + (uint64_t)i);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "ZADD", dl, score, name, NULL), 0);
    }
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    o.scan_ms = 60000;
    o.job = "jsk";
    o.node = "B";
    o.campaign = true;
    o.on_event = on_victim_lost;
    o.arg = &l;
    ftc_err_t err = {0};
    ftc_detector_t *b = ftc_detector_start(ftc_redis_server_url(f->srv), &o, &err);
    if (!b)
        fail_msg("detector B: %s", err.msg);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (!ftc_detector_is_leader(b) && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_true(ftc_detector_is_leader(b));
    ftc_sleep_ms(300); /* its first scan is done: the victim appears after it */
    ftc_ctl_key(c, "members", key, sizeof key);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", key, "victim", "h - 1 777", NULL), 0);
    snprintf(score, sizeof score, "%" PRIu64, ftc_wall_ms() - 1000);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "ZADD", dl, score, "victim", NULL), 0);
    uint64_t t0 = ftc_now_ns();
    bool got = false;
    d = ftc_deadline_in_ms(8000); /* well below the scan's minute */
    while (!got && !ftc_deadline_expired(d)) {
        pthread_mutex_lock(&l.mu);
        got = l.detail[0] != 0;
        pthread_mutex_unlock(&l.mu);
        if (!got)
            ftc_sleep_ms(10);
    }
    print_message("victim behind 300 skewed deadlines: %s after %.0f ms (%s)\n",
                  got ? "reported" : "NOT reported", (double)(ftc_now_ns() - t0) / 1e6, l.detail);
    assert_true(got);
    assert_non_null(strstr(l.detail, "heartbeat deadline passed"));
    /* the skewed nodes are alive: none reported, their deadlines stay */
    long long left = 0;
    ftc_redis_reply_t *rep = NULL;
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "ZCARD", dl, NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "ZCARD", &left, NULL), 0);
    ftc_redis_reply_free(rep);
    assert_true(left >= 300);
    /* each poll confirms a page of candidates in one pipeline: two pages of
     * overdue entries (300 skewed + the victim) cost a ZRANGEBYSCORE and a
     * pipeline each, plus a ZREM when one is lost; one EXISTS round trip per
     * candidate made ~300 */
    ftc_sleep_ms(300);
    ftc_detector_stats_t st;
    ftc_detector_stats(b, &st);
    print_message("%" PRIu64 " deadline polls, %" PRIu64 " round trips (%.1f per poll)\n",
                  st.deadline_polls, st.deadline_poll_trips,
                  st.deadline_polls ? (double)st.deadline_poll_trips / (double)st.deadline_polls
                                    : 0.0);
    assert_true(st.deadline_polls > 0);
    assert_true(st.deadline_poll_trips <= st.deadline_polls * 6);
    /* and the server ran the EXISTS (the poll did confirm candidates) */
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "INFO", "commandstats", NULL), 0);
    const char *info = NULL;
    assert_int_equal(ftc_redis_want_str(rep, "INFO", &info, NULL, NULL), 0);
    assert_non_null(strstr(info, "cmdstat_exists:calls="));
    ftc_redis_reply_free(rep);
    ftc_detector_stop(b, true);
    ftc_ctl_destroy(c);
}

/* An agent paused (SIGSTOP, a VM or swap stall) longer than a rank's hang
 * limit: the ranks ran on, their progress waits to be read, yet on resume the
 * local watch measured the pause as the ranks' idle time and reported the
 * rank hung (ftc run then kills it: a full recovery for nothing) whenever it
 * looked before the first progress after the resume was read (a race, so
 * eight pauses). The pause does not count as idle time now. det_agent
 * reports a step every 50 ms (limit max(10 x 50 ms, 300 ms) = 500 ms); each
 * pause is 900 ms. */
static void test_agent_pause_is_not_a_hang(void **state)
{
    redis_fixture_t *f = *state;
    agent_t a;
    const char *extra[] = {"--no-campaign", "--step-ms", "50", "--hang-min-ms", "300", NULL};
    spawn_agent_v(f, &a, "jg", "A", extra);
    ftc_sleep_ms(500); /* a few steps: the median is known */
    int pauses = 0;
    for (; pauses < 8 && !agent_said(&a, "EVENT hang"); pauses++) {
        kill_agent(&a, SIGSTOP);
        ftc_sleep_ms(900);
        kill_agent(&a, SIGCONT);
        ftc_sleep_ms(300); /* progress flows again */
    }
    bool hang = agent_said(&a, "EVENT hang");
    kill_agent(&a, SIGTERM);
    if (hang)
        print_message("a hang was reported after pause %d\n", pauses);
    assert_false(hang);
    assert_int_equal(stream_count(f, "jg", "hang", "A"), 0);
}

/* A node paused past its heartbeat TTL (SIGSTOP: GC, swap) is reported lost,
 * resumes and heartbeats again (ftc run ignores a loss whose heartbeat is
 * back). Its loss was recorded for its incarnation, so when it really died
 * later nobody reported it: the others still had it as lost, and the id
 * node_lost:NODE:joined_ms was taken in failures:job. A node that finds its
 * own heartbeat expired now comes back as a new incarnation, whose loss is a
 * new event. */
static void test_loss_after_pause_reported_again(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t sb;
    seen_init(&sb);
    agent_t a;
    spawn_agent(f, &a, "jr", "A", "--no-campaign", NULL);
    ftc_detector_t *b = start_detector(f, "jr", "B", true, &sb, NULL);
    ftc_sleep_ms(700); /* B has scanned A */
    kill_agent(&a, SIGSTOP);
    assert_true(wait_seen(&sb, "node_lost", "A", 5000));
    kill_agent(&a, SIGCONT);
    /* A heartbeats again */
    ftc_ctl_t *c = redis_fixture_ctl(f, "jr");
    char key[128];
    ftc_ctl_key(c, "hb:A", key, sizeof key);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    long long exists = 0;
    while (!exists && !ftc_deadline_expired(d)) {
        ftc_redis_reply_t *rep = NULL;
        if (ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "EXISTS", key, NULL) == 0)
            exists = rep->integer;
        ftc_redis_reply_free(rep);
        if (!exists)
            ftc_sleep_ms(10);
    }
    ftc_ctl_destroy(c);
    assert_true(exists);
    ftc_sleep_ms(1500); /* B scans A alive a few times */
    assert_int_equal(seen_count(&sb, "node_lost", "A", NULL), 1);
    kill_agent(&a, SIGKILL);
    d = ftc_deadline_in_ms(5000);
    while (seen_count(&sb, "node_lost", "A", NULL) < 2 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_int_equal(seen_count(&sb, "node_lost", "A", NULL), 2);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jr", "node_lost", "A"), 2);
}

/* Events of kind about (node, rank). */
static int seen_rank(seen_t *s, const char *kind, const char *node, int rank)
{
    int c = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        c += !strcmp(s->ev[i].kind, kind) && !strcmp(s->ev[i].node, node) &&
             s->ev[i].rank == rank;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* Waits (ms at most) until s has an event of kind about (node, rank); the caller asserts. */
static void wait_seen_rank(seen_t *s, const char *kind, const char *node, int rank, int ms)
{
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    while (seen_rank(s, kind, node, rank) == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
}

/* The start-up limit. A rank's process that has finished no step had no
 * hang check at all (no step time: the soak found ranks SIGSTOPped before
 * their HELLO never detected, the others waiting 60 s in their group
 * set-up). Now such a rank is hung start_ms after its watch began, once the
 * job is known to link libftc: its own HELLO (ftc_detector_linked), another
 * rank's here, or ftc:{J}:linked in Redis set by another node's detector.
 * Before that, a rank that never connects may be a binary without libftc,
 * and is no hang. */
static void test_start_up_limit(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t sb, sc;
    seen_init(&sb);
    seen_init(&sc);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    o.start_ms = 500;
    ftc_detector_t *b = start_detector(f, "jsu", "B", false, &sb, &o);
    pid_t p0 = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, p0), 0);
    /* nothing says the job links libftc: no hang, however long */
    ftc_sleep_ms(1500);
    assert_int_equal(seen_count(&sb, "hang", "B", NULL), 0);
    /* node C: rank 1 connects (linked) and finishes no step; rank 2 does one
     * at once; both watched from now */
    ftc_detector_t *c = start_detector(f, "jsu", "C", false, &sc, &o);
    pid_t p1 = fork_paused(), p2 = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(c, 1, p1), 0);
    assert_int_equal(ftc_detector_watch_pid(c, 2, p2), 0);
    ftc_detector_linked(c, 1);
    ftc_detector_progress(c, 2, 0, 1000);
    assert_true(wait_seen(&sc, "hang", "C", 3000));
    assert_int_equal(seen_rank(&sc, "hang", "C", 1), 1);
    /* B learns from Redis that the job links libftc: its rank 0, which
     * never connected, has been starting for longer than 500 ms */
    assert_true(wait_seen(&sb, "hang", "B", 4000));
    assert_int_equal(seen_rank(&sb, "hang", "B", 0), 1);
    ftc_sleep_ms(700);
    assert_int_equal(seen_rank(&sb, "hang", "B", 0), 1); /* once per process */
    assert_int_equal(seen_rank(&sc, "hang", "C", 1), 1);
    assert_int_equal(seen_rank(&sc, "hang", "C", 2), 0); /* past its start-up */
    /* rank 2's next process (a restart) starts up again: the steps of its
     * predecessor do not count, and its own first step, though lower than
     * theirs, ends its start-up */
    ftc_detector_progress(c, 2, 7, 1000);
    pid_t p3 = fork_paused(), p4 = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(c, 2, p3), 0);
    ftc_sleep_ms(100);
    ftc_detector_progress(c, 2, 3, 1000);
    assert_int_equal(ftc_detector_watch_pid(c, 3, p4), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(3000);
    while (seen_rank(&sc, "hang", "C", 3) == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_int_equal(seen_rank(&sc, "hang", "C", 3), 1); /* linked job: never connected */
    assert_int_equal(seen_rank(&sc, "hang", "C", 2), 0);
    ftc_detector_stop(b, true);
    ftc_detector_stop(c, true);
    pid_t all[] = {p0, p1, p2, p3, p4};
    for (int i = 0; i < 5; i++) {
        kill(all[i], SIGKILL);
        waitpid(all[i], NULL, 0);
    }
    assert_int_equal(stream_count(f, "jsu", "hang", "B"), 1);
    assert_int_equal(stream_count(f, "jsu", "hang", "C"), 2);
}

/* Which rank hung: every rank of a job stops progressing when one hangs
 * (the others wait for it in a collective), and they used to reach their
 * limits together, in a race: the soak (seed 37) saw two waiting ranks
 * reported and killed, never the stopped one. A rank whose process is busy
 * (the collectives spin) is now reported only after a grace; one that is
 * stopped, or uses no CPU, at its limit. Rank 0 spins, rank 1 is stopped:
 * both stop progressing at once, rank 1 is reported first and says why. */
static void test_hang_names_the_stuck_rank(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 600;
    ftc_detector_t *b = start_detector(f, "jhs", "B", false, &s, &o);
    pid_t spin = fork_spinning();
    pid_t stuck = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, spin), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, stuck), 0);
    /* progress for 1.5 s (the CPU use is sampled every second), then none */
    for (int i = 0; i < 75; i++) {
        ftc_detector_progress(b, 0, i, 10000);
        ftc_detector_progress(b, 1, i, 10000);
        ftc_sleep_ms(20);
    }
    kill(stuck, SIGSTOP);
    wait_seen_rank(&s, "hang", "B", 0, 8000);
    assert_int_equal(seen_rank(&s, "hang", "B", 1), 1);
    assert_int_equal(seen_rank(&s, "hang", "B", 0), 1);
    pthread_mutex_lock(&s.mu);
    int first = -1, i1 = -1, i0 = -1;
    for (int i = 0; i < s.n; i++)
        if (!strcmp(s.ev[i].kind, "hang")) {
            if (first < 0)
                first = s.ev[i].rank;
            if (s.ev[i].rank == 1)
                i1 = i;
            else
                i0 = i;
        }
    print_message("stuck: %s\nspinning: %s\n", s.ev[i1].detail, s.ev[i0].detail);
    assert_int_equal(first, 1);
    assert_non_null(strstr(s.ev[i1].detail, "its process is stopped (state T)"));
    assert_non_null(strstr(s.ev[i0].detail, "busy, perhaps waiting for a hung peer"));
    pthread_mutex_unlock(&s.mu);
    ftc_detector_stop(b, true);
    kill(spin, SIGKILL);
    kill(stuck, SIGKILL);
    waitpid(spin, NULL, 0);
    waitpid(stuck, NULL, 0);
}

/* The detail of the first event of kind about (node, rank) into out ("" if none). */
static void seen_detail(seen_t *s, const char *kind, const char *node, int rank, char *out,
                        size_t cap)
{
    out[0] = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->ev[i].kind, kind) && !strcmp(s->ev[i].node, node) &&
            s->ev[i].rank == rank) {
            snprintf(out, cap, "%s", s->ev[i].detail);
            break;
        }
    pthread_mutex_unlock(&s->mu);
}

/* A child that exits with code after ms (the test process is its parent,
 * as the supervisor is a rank's: the detector reads its status itself). */
static pid_t fork_exit(int ms, int code)
{
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        ftc_sleep_ms(ms);
        _exit(code);
    }
    return p;
}

/* A process that is not our child (its parent exits at once: init or a
 * subreaper adopts it), exiting with code after ms; its pid. */
/* An orphan whose ms count from the close of gate[1] (-1: from now): it
 * blocks on gate[0] until then, so a loaded machine cannot let it exit
 * before the test has set up what its exit is checked against. */
static pid_t spawn_orphan_gated(int ms, int code, const int gate[2])
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        pid_t g = fork();
        if (g == 0) {
            close(fd[0]);
            close(fd[1]);
            if (gate) {
                char c;
                close(gate[1]);
                while (read(gate[0], &c, 1) < 0 && errno == EINTR)
                    ;
            }
            ftc_sleep_ms(ms);
            _exit(code);
        }
        ssize_t w = write(fd[1], &g, sizeof g);
        _exit(w == (ssize_t)sizeof g ? 0 : 1);
    }
    close(fd[1]);
    pid_t g = 0;
    assert_int_equal(read(fd[0], &g, sizeof g), (ssize_t)sizeof g);
    close(fd[0]);
    waitpid(p, NULL, 0);
    return g;
}

static pid_t spawn_orphan(int ms, int code) { return spawn_orphan_gated(ms, code, NULL); }

/* rank_exit events carry the exit status, and a rank that never connected
 * (a binary without libftc) and ended with 0 has none: every job of such a
 * binary ended with a rank_exit "failure" per rank. The status is the
 * detector's own reading (its process is the rank's parent, as the agent
 * in `ftc run`'s supervisor is), or the one the parent tells after it
 * reaped the rank (ftc_detector_exit_status): waited for 500 ms. */
static void test_exit_status(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jxs", &s);
    pid_t clean = fork_exit(300, 0), failed = fork_exit(300, 3), killed = fork_exit(60000, 0);
    pid_t linked = fork_exit(300, 0);
    assert_int_equal(ftc_detector_watch_pid(b, 0, clean), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, failed), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 2, killed), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 3, linked), 0);
    ftc_detector_linked(b, 3);
    kill(killed, SIGKILL);
    /* not our children: the status comes from their parent, or never */
    pid_t told0 = spawn_orphan(300, 0), told7 = spawn_orphan(300, 7), untold = spawn_orphan(300, 0);
    assert_int_equal(ftc_detector_watch_child(b, 4, told0), 0); /* as a supervisor's WATCH */
    assert_int_equal(ftc_detector_watch_child(b, 5, told7), 0);
    assert_int_equal(ftc_detector_watch_child(b, 6, untold), 0);
    ftc_sleep_ms(400);
    ftc_detector_exit_status(b, 4, told0, 0);
    ftc_detector_exit_status(b, 5, told7, 7 << 8);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while (seen_count(&s, "rank_exit", "B", NULL) < 5 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    ftc_sleep_ms(1200); /* past the wait for a status (1 s): no more come */
    char det[256];
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0); /* clean end, never connected */
    seen_detail(&s, "rank_exit", "B", 1, det, sizeof det);
    assert_non_null(strstr(det, "exited (status 3) after step"));
    seen_detail(&s, "rank_exit", "B", 2, det, sizeof det);
    assert_non_null(strstr(det, "exited (killed by signal 9) after step"));
    seen_detail(&s, "rank_exit", "B", 3, det, sizeof det); /* connected: no BYE, status 0 */
    assert_non_null(strstr(det, "exited (status 0) after step"));
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 4), 0);
    seen_detail(&s, "rank_exit", "B", 5, det, sizeof det);
    assert_non_null(strstr(det, "exited (status 7) after step"));
    seen_detail(&s, "rank_exit", "B", 6, det, sizeof det); /* unknown after 1 s */
    assert_non_null(strstr(det, "exited after step"));
    assert_int_equal(seen_count(&s, "rank_exit", "B", NULL), 5);
    ftc_detector_stop(b, true);
    pid_t mine[] = {clean, failed, killed, linked};
    for (int i = 0; i < 4; i++)
        waitpid(mine[i], NULL, 0);
    assert_int_equal(stream_count(f, "jxs", "rank_exit", "B"), 5);
}

/* Reaps *(pid_t *)arg once a poll held a rank's pidfd (the supervisor, the
 * rank's parent, reaping it before the watch looked at it). */
static void reap_hook(void *arg, const struct pollfd *pfd, int npfd)
{
    (void)pfd;
    pid_t *pid = arg;
    if (npfd > 1 && *pid > 0 && waitpid(*pid, NULL, WNOHANG) == *pid)
        *pid = 0;
}

/* The supervisor may reap a rank and tell its status before the detector
 * holds the rank at all: the agent reads the WATCH of a rank that exited at
 * once (a zombie), and the supervisor reaps it and tells between the
 * WATCH's pidfd_open and its registration. The status told then is the
 * rank's all the same. Before, a tell for a rank the detector did not hold
 * yet was dropped: the clean end (status 0) of a rank that never connected
 * was a rank_exit event, without status, 500 ms later. Rank 1 (status 5),
 * watched after that wait, is the marker. */
static void test_status_told_before_the_watch(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jtb", &s);
    pid_t clean = fork_exit(0, 0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)clean, &si, WEXITED | WNOWAIT), 0); /* a zombie */
    static pid_t reap;
    reap = clean;
    ftc__detector_set_poll_hook(b, reap_hook, &reap);
    ftc_detector_exit_status(b, 0, clean, 0);
    assert_int_equal(ftc_detector_watch_child(b, 0, clean), 0);
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    while (reap && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_int_equal(reap, 0);
    ftc_sleep_ms(1200); /* past the wait for a status (1 s) */
    ftc__detector_set_poll_hook(b, NULL, NULL);
    pid_t failed = fork_exit(0, 5);
    assert_int_equal(ftc_detector_watch_pid(b, 1, failed), 0);
    wait_seen_rank(&s, "rank_exit", "B", 1, 5000);
    char det[256];
    seen_detail(&s, "rank_exit", "B", 1, det, sizeof det);
    assert_non_null(strstr(det, "exited (status 5) after step"));
    print_message("rank_exit events of the rank told before its watch: %d\n",
                  seen_rank(&s, "rank_exit", "B", 0));
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0);
    ftc_detector_stop(b, true);
    waitpid(failed, NULL, 0);
}

/* A rank whose watch ended, by its BYE (ftc_detector_unwatch: a clean end)
 * or by its process's exit (a rank_exit event), is no hang: nothing of it is
 * left to progress. Before, its hang check went on, and it was reported hung
 * its limit after its last step: a second event for a rank that exited, and
 * one for a rank that said BYE, which `ftc run` answered with SIGKILL while
 * its process was still there (writing its outputs after ftc_close). Rank 2,
 * which reports steps for a while longer and then stops, is the marker: its
 * hang comes after theirs would have. */
static void test_no_hang_after_the_watch_ended(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 300;
    ftc_detector_t *b = start_detector(f, "jne", "B", false, &s, &o);
    pid_t bye = fork_paused(), dies = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, bye), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, dies), 0);
    for (int i = 0; i < 10; i++) {
        for (int r = 0; r < 3; r++)
            ftc_detector_progress(b, r, i, 10000);
        ftc_sleep_ms(10);
    }
    ftc_detector_unwatch(b, 0); /* its BYE; its process runs on */
    kill(dies, SIGKILL);
    assert_true(wait_seen(&s, "rank_exit", "B", 5000));
    for (int i = 10; i < 60; i++) {
        ftc_detector_progress(b, 2, i, 10000);
        ftc_sleep_ms(10);
    }
    wait_seen_rank(&s, "hang", "B", 2, 5000);
    assert_int_equal(seen_rank(&s, "hang", "B", 2), 1);
    print_message("hangs of the rank that said BYE: %d, of the one that exited: %d\n",
                  seen_rank(&s, "hang", "B", 0), seen_rank(&s, "hang", "B", 1));
    assert_int_equal(seen_rank(&s, "hang", "B", 0), 0);
    assert_int_equal(seen_rank(&s, "hang", "B", 1), 0);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 1), 1);
    ftc_detector_stop(b, true);
    kill(bye, SIGKILL);
    waitpid(bye, NULL, 0);
    waitpid(dies, NULL, 0);
}

/* A rank stopped in its start-up, after its peers' first step: they wait for
 * it, past their own start-up, and reach their hang limit (plus the grace of
 * busy ranks); the stopped rank had only the start-up limit, much longer, so
 * its peers were reported hung and killed, not it (the soak, seed 41: a rank
 * SIGSTOPped after its restore, before its first step's checkpoint, and the
 * two others reported "busy, perhaps waiting for a hung peer"). A process
 * stopped for the hang limit is now hung, in its start-up or not. Rank 0
 * spins (past its start-up), rank 1 connected but finished no step; rank 1
 * is stopped when rank 0 stops progressing: rank 1 is reported first. */
static void test_stopped_in_start_up_named(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    /* limit 3 s: the busy rank's grace (1.5 s) outlasts the stop's sampling (every 1 s) */
    o.hang_min_ms = 3000;
    o.start_ms = 100000;
    ftc_detector_t *b = start_detector(f, "jss", "B", false, &s, &o);
    pid_t spin = fork_spinning();
    pid_t stuck = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, spin), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, stuck), 0);
    ftc_detector_linked(b, 0);
    ftc_detector_linked(b, 1);
    for (int i = 0; i < 75; i++) {
        ftc_detector_progress(b, 0, i, 10000);
        ftc_sleep_ms(20);
    }
    kill(stuck, SIGSTOP);
    wait_seen_rank(&s, "hang", "B", 0, 12000);
    pthread_mutex_lock(&s.mu);
    int first = -1, i1 = -1;
    for (int i = 0; i < s.n; i++)
        if (!strcmp(s.ev[i].kind, "hang")) {
            if (first < 0)
                first = s.ev[i].rank;
            if (s.ev[i].rank == 1)
                i1 = i;
        }
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(first, 1);
    assert_true(i1 >= 0);
    print_message("stuck: %s\n", s.ev[i1].detail);
    assert_non_null(strstr(s.ev[i1].detail, "its process has been stopped (state T)"));
    assert_int_equal(seen_rank(&s, "hang", "B", 1), 1);
    ftc_detector_stop(b, true);
    kill(spin, SIGKILL);
    kill(stuck, SIGKILL);
    waitpid(spin, NULL, 0);
    waitpid(stuck, NULL, 0);
}

/* Events of kind about rank on node B whose detail holds what. */
static int seen_with(seen_t *s, const char *kind, int rank, const char *what)
{
    int c = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->ev[i].kind, kind) && !strcmp(s->ev[i].node, "B") &&
            s->ev[i].rank == rank && strstr(s->ev[i].detail, what))
            c++;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* Waits until pid has exited (gone, or a zombie: of a process that is not
 * ours, whoever reaps it). */
static void wait_gone(pid_t pid)
{
    ftc_deadline_t d = ftc_deadline_in_ms(5000);
    ftc_proc_stat_t ps;
    while (ftc_proc_stat_read(pid, &ps) == 0 && ps.state != 'Z' && ps.state != 'X') {
        if (ftc_deadline_expired(d))
            fail_msg("pid %d did not exit", (int)pid);
        ftc_sleep_ms(5);
    }
}

/* Linux 5.3 has pidfd_open but not waitid(P_PIDFD) (5.4): EINVAL. The
 * status was then never read, and every rank_exit came without one; it is
 * now read by pid (P_PID) after the first EINVAL, and from then on.
 * FTC_TEST_DETECT_NO_WAITID_PIDFD=1 makes every waitid(P_PIDFD) fail so;
 * it is read once, at the detector's start, strictly (0 or 1). */
static void test_status_read_without_waitid_pidfd(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    o.job = "jnw";
    o.node = "B";
    setenv("FTC_TEST_DETECT_NO_WAITID_PIDFD", "yes", 1);
    ftc_err_t err = {0};
    ftc_detector_t *bad = ftc_detector_start(ftc_redis_server_url(f->srv), &o, &err);
    ftc_detector_stop(bad, true);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "FTC_TEST_DETECT_NO_WAITID_PIDFD"));
    setenv("FTC_TEST_DETECT_NO_WAITID_PIDFD", "1", 1);
    ftc_detector_t *b = start_detector(f, "jnw", "B", false, &s, &o);
    unsetenv("FTC_TEST_DETECT_NO_WAITID_PIDFD"); /* read at the start: still on */
    pid_t failed = fork_exit(100, 3);
    assert_int_equal(ftc_detector_watch_pid(b, 0, failed), 0);
    ftc_detector_linked(b, 0); /* connected: reported, with a status or without */
    wait_seen_rank(&s, "rank_exit", "B", 0, 5000);
    pid_t killed = fork_exit(60000, 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, killed), 0);
    ftc_detector_linked(b, 1);
    kill(killed, SIGKILL);
    wait_seen_rank(&s, "rank_exit", "B", 1, 5000);
    char det[256];
    seen_detail(&s, "rank_exit", "B", 0, det, sizeof det);
    print_message("without waitid(P_PIDFD): %s\n", det);
    assert_non_null(strstr(det, "exited (status 3) after step"));
    seen_detail(&s, "rank_exit", "B", 1, det, sizeof det);
    assert_non_null(strstr(det, "exited (killed by signal 9) after step"));
    ftc_detector_stop(b, true);
    waitpid(failed, NULL, 0);
    waitpid(killed, NULL, 0);
}

/* A rank's BYE ends its hang check, and its process stays watched for its
 * status: a clean end (0) is no event, whether the agent read the BYE
 * before the exit or after it (its loop was behind: the exit of a connected
 * rank with status 0 waits for that BYE), and any other status is a failure
 * (`ftc run` fails the generation on it), BYE or not. Before, a BYE read
 * after the exit was a rank_exit "exited (status 0)", and a rank killed
 * after its BYE had no event. Rank 0 exits with 0, its BYE read after; rank
 * 1 says BYE and is killed; rank 2 is killed, its BYE read after; rank 3
 * says BYE and exits with 0; rank 4, connected, exits with 0 without a BYE
 * (a failure, reported at the end of the wait). */
static void test_bye_and_the_exit_status(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jby", &s);
    ftc__detector_set_exit_wait_ms(b, 3000); /* the BYEs below come well within it */
    pid_t p[5] = {fork_exit(100, 0), fork_paused(), fork_paused(), fork_exit(300, 0),
                  fork_exit(100, 0)};
    for (int r = 0; r < 5; r++) {
        assert_int_equal(ftc_detector_watch_pid(b, r, p[r]), 0);
        ftc_detector_linked(b, r);
    }
    ftc_detector_bye(b, 1, p[1]);
    ftc_detector_bye(b, 3, p[3]);
    kill(p[1], SIGKILL);
    kill(p[2], SIGKILL);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)p[0], &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(waitid(P_PID, (id_t)p[2], &si, WEXITED | WNOWAIT), 0);
    ftc_sleep_ms(300); /* the detector saw both exits: their BYEs are read after */
    ftc_detector_bye(b, 0, p[0]);
    ftc_detector_bye(b, 2, p[2]);
    wait_seen_rank(&s, "rank_exit", "B", 4, 10000);
    print_message("rank_exit events: BYE read after a clean end %d, killed after its BYE %d, "
                  "BYE read after a kill %d, BYE then a clean end %d, no BYE %d\n",
                  seen_rank(&s, "rank_exit", "B", 0), seen_rank(&s, "rank_exit", "B", 1),
                  seen_rank(&s, "rank_exit", "B", 2), seen_rank(&s, "rank_exit", "B", 3),
                  seen_rank(&s, "rank_exit", "B", 4));
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0);
    assert_int_equal(seen_with(&s, "rank_exit", 1, "exited (killed by signal 9)"), 1);
    assert_int_equal(seen_with(&s, "rank_exit", 2, "exited (killed by signal 9)"), 1);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 3), 0);
    assert_int_equal(seen_with(&s, "rank_exit", 4, "exited (status 0)"), 1);
    assert_int_equal(seen_count(&s, "rank_exit", "B", NULL), 3);
    assert_int_equal(seen_count(&s, "hang", "B", NULL), 0);
    ftc_detector_stop(b, true);
    for (int r = 0; r < 5; r++)
        waitpid(p[r], NULL, 0);
}

/* A rank whose watch ended (its process exited) and whose next process's
 * watch fails (FTC_ENOENT: its HELLO names a pid that is not there, gone or
 * of another pid namespace) is checked for hangs from that process's
 * progress, as a rank never watched is. Before, the ended watch left its
 * hang check off for good. */
static void test_hang_checked_after_a_failed_watch(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 300;
    ftc_detector_t *b = start_detector(f, "jfw", "B", false, &s, &o);
    pid_t first = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, first), 0);
    for (int i = 0; i < 5; i++) {
        ftc_detector_progress(b, 0, i, 10000);
        ftc_sleep_ms(10);
    }
    kill(first, SIGKILL);
    assert_true(wait_seen(&s, "rank_exit", "B", 5000));
    waitpid(first, NULL, 0);
    pid_t gone = fork_exit(0, 0);
    waitpid(gone, NULL, 0);
    assert_int_equal(ftc_detector_watch_pid(b, 0, gone), FTC_ENOENT);
    for (int i = 0; i < 10; i++) { /* the new process's steps; then it stops */
        ftc_detector_progress(b, 0, i, 10000);
        ftc_sleep_ms(10);
    }
    wait_seen_rank(&s, "hang", "B", 0, 5000);
    print_message("hangs of the process whose watch failed: %d\n", seen_rank(&s, "hang", "B", 0));
    assert_int_equal(seen_rank(&s, "hang", "B", 0), 1);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 1);
    ftc_detector_stop(b, true);
}

/* A rank whose status the detector cannot read (it is not the parent: the
 * supervisor reaped it) waits for the one its parent tells, connected or
 * not, up to the wait's end, and is then reported without one; one that
 * said BYE and was never told is no failure. Before, a connected rank was
 * reported at once without a status, and only one exit per rank waited: the
 * exit of its next process replaced the first, whose event was lost. Rank 0
 * (connected) is told 7 after its exit was seen; rank 1 has two processes
 * that never connected, both exited before either is told (5, then 0: one
 * event); rank 2 two connected ones (3, then signal 9: two events); rank 3
 * said BYE and is never told; rank 4, connected, is never told. */
static void test_status_waited_for_when_not_the_parent(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jwt", &s);
    ftc__detector_set_exit_wait_ms(b, 3000); /* the statuses below come well within it */
    pid_t p0 = spawn_orphan(100, 7), p3 = spawn_orphan(100, 0);
    assert_int_equal(ftc_detector_watch_child(b, 0, p0), 0);
    assert_int_equal(ftc_detector_watch_child(b, 3, p3), 0);
    ftc_detector_linked(b, 0);
    ftc_detector_linked(b, 3);
    ftc_detector_bye(b, 3, p3);
    pid_t q[2] = {0, 0}, r[2] = {0, 0};
    for (int i = 0; i < 2; i++) { /* the second process of each exits while the first waits */
        q[i] = spawn_orphan(100, i ? 0 : 5);
        r[i] = spawn_orphan(100, i ? 0 : 3);
        assert_int_equal(ftc_detector_watch_child(b, 1, q[i]), 0);
        assert_int_equal(ftc_detector_watch_child(b, 2, r[i]), 0);
        ftc_detector_linked(b, 2);
        wait_gone(q[i]);
        wait_gone(r[i]);
        ftc_sleep_ms(100); /* their exits are seen */
    }
    wait_gone(p0);
    wait_gone(p3);
    ftc_sleep_ms(100);
    ftc_detector_exit_status(b, 0, p0, 7 << 8);
    ftc_detector_exit_status(b, 1, q[1], 0);
    ftc_detector_exit_status(b, 1, q[0], 5 << 8);
    ftc_detector_exit_status(b, 2, r[1], SIGKILL);
    ftc_detector_exit_status(b, 2, r[0], 3 << 8);
    pid_t p4 = spawn_orphan(100, 0);
    assert_int_equal(ftc_detector_watch_child(b, 4, p4), 0);
    ftc_detector_linked(b, 4);
    wait_seen_rank(&s, "rank_exit", "B", 4, 10000);
    char want[64];
    print_message("rank_exit events: connected, told late: %d with its status; two processes "
                  "never connected: %d (%d of the first); two connected ones: %d with their "
                  "status; said BYE, never told: %d\n",
                  seen_with(&s, "rank_exit", 0, "(status 7)"), seen_rank(&s, "rank_exit", "B", 1),
                  seen_with(&s, "rank_exit", 1, "(status 5)"),
                  seen_with(&s, "rank_exit", 2, "(status 3)") +
                      seen_with(&s, "rank_exit", 2, "(killed by signal 9)"),
                  seen_rank(&s, "rank_exit", "B", 3));
    snprintf(want, sizeof want, "(pid %d) exited (status 7)", (int)p0);
    assert_int_equal(seen_with(&s, "rank_exit", 0, want), 1);
    snprintf(want, sizeof want, "(pid %d) exited (status 5)", (int)q[0]);
    assert_int_equal(seen_with(&s, "rank_exit", 1, want), 1);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 1), 1);
    snprintf(want, sizeof want, "(pid %d) exited (status 3)", (int)r[0]);
    assert_int_equal(seen_with(&s, "rank_exit", 2, want), 1);
    snprintf(want, sizeof want, "(pid %d) exited (killed by signal 9)", (int)r[1]);
    assert_int_equal(seen_with(&s, "rank_exit", 2, want), 1);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 3), 0);
    snprintf(want, sizeof want, "(pid %d) exited after step", (int)p4);
    assert_int_equal(seen_with(&s, "rank_exit", 4, want), 1);
    assert_int_equal(seen_count(&s, "rank_exit", "B", NULL), 5);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jwt", "rank_exit", "B"), 5);
}

/* A standalone agent's ranks (`ftc agent` with `ftc train --nproc`, torchrun)
 * are not children of the agent's process: nobody tells their exit status,
 * so their exit waits for none. A connected one's exit waits only for a BYE
 * the agent may read after the exit, and no longer once the agent saw its
 * connection close (before or after the exit). Before, every such exit
 * waited the whole wait for a status that never came: a rank's death was
 * reported 1 s late. The wait here is 60 s: the events come long before. */
static void test_standalone_exit_not_held(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jsa", &s);
    ftc__detector_set_exit_wait_ms(b, 60000);
    int gate[2]; /* the exits count from here on: all is linked, closed and said by then */
    assert_int_equal(pipe(gate), 0);
    pid_t early = spawn_orphan_gated(300, 0, gate), late = spawn_orphan_gated(100, 0, gate);
    pid_t bye = spawn_orphan_gated(100, 0, gate), never = spawn_orphan_gated(100, 0, gate);
    assert_int_equal(ftc_detector_watch_pid(b, 0, early), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, late), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 2, bye), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 3, never), 0);
    for (int i = 0; i < 3; i++)
        ftc_detector_linked(b, i);
    ftc_detector_closed(b, 0, early); /* the agent read its close before its exit */
    ftc_detector_bye(b, 2, bye);
    ftc_detector_closed(b, 2, bye);
    close(gate[1]);
    close(gate[0]);
    wait_gone(late);
    wait_gone(bye);
    wait_gone(never);
    ftc_sleep_ms(200); /* their exits are seen */
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 1), 0); /* its BYE may yet be read */
    ftc_detector_closed(b, 1, late); /* no BYE came before the close */
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (seen_count(&s, "rank_exit", "B", NULL) < 3 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    char want[64];
    print_message("rank_exit events: closed before the exit %d, after it %d, after a BYE %d, "
                  "never connected %d\n", seen_rank(&s, "rank_exit", "B", 0),
                  seen_rank(&s, "rank_exit", "B", 1), seen_rank(&s, "rank_exit", "B", 2),
                  seen_rank(&s, "rank_exit", "B", 3));
    snprintf(want, sizeof want, "(pid %d) exited after step", (int)early);
    assert_int_equal(seen_with(&s, "rank_exit", 0, want), 1);
    snprintf(want, sizeof want, "(pid %d) exited after step", (int)late);
    assert_int_equal(seen_with(&s, "rank_exit", 1, want), 1);
    snprintf(want, sizeof want, "(pid %d) exited after step", (int)never);
    assert_int_equal(seen_with(&s, "rank_exit", 3, want), 1);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 2), 0);
    ftc_detector_stop(b, true);
    assert_int_equal(stream_count(f, "jsa", "rank_exit", "B"), 3);
}

/* Holds the local watch for ms once armed (the agent's process paused:
 * SIGSTOP, a VM or swap stall), then says it is over. */
typedef struct pauser {
    atomic_int armed, done;
    int ms;
} pauser_t;

static void pause_hook(void *arg, const struct pollfd *pfd, int npfd)
{
    (void)pfd;
    (void)npfd;
    pauser_t *p = arg;
    if (atomic_exchange(&p->armed, 0)) {
        ftc_sleep_ms((uint64_t)p->ms);
        atomic_store(&p->done, 1);
    }
}

/* The time the agent was paused (the local watch did not run) is not
 * counted in an exit's wait for its BYE: the agent's loop, paused too,
 * reads the BYE once it runs again. Rank 0, connected, says BYE and exits
 * with 0; its exit is seen, then the agent is paused for longer than the
 * wait, and its BYE is read after the pause. Before, the wait was over on
 * resume: a rank_exit "exited (status 0)" for a clean end. Rank 1, killed
 * after the BYE was read, is the marker. */
static void test_exit_wait_not_counted_while_paused(void **state)
{
    redis_fixture_t *f = *state;
    static seen_t s;
    ftc_detector_t *b = start_rank_watcher(f, "jpw", &s);
    ftc__detector_set_exit_wait_ms(b, 1000);
    pid_t clean = fork_exit(100, 0), marker = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, clean), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, marker), 0);
    ftc_detector_linked(b, 0);
    ftc_detector_linked(b, 1);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)clean, &si, WEXITED | WNOWAIT), 0);
    ftc_sleep_ms(100); /* its exit is seen: it waits for a BYE */
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0);
    static pauser_t p;
    p.ms = 2500;
    atomic_store(&p.done, 0);
    atomic_store(&p.armed, 1);
    ftc__detector_set_poll_hook(b, pause_hook, &p);
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (!atomic_load(&p.done) && !ftc_deadline_expired(d))
        ftc_sleep_ms(1);
    assert_int_equal(atomic_load(&p.done), 1);
    ftc_detector_bye(b, 0, clean); /* the agent's loop runs again */
    kill(marker, SIGKILL);
    wait_seen_rank(&s, "rank_exit", "B", 1, 10000);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 1), 1);
    print_message("rank_exit events of a clean end whose BYE was read after a pause: %d\n",
                  seen_rank(&s, "rank_exit", "B", 0));
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0);
    ftc__detector_set_poll_hook(b, NULL, NULL);
    ftc_detector_stop(b, true);
    waitpid(clean, NULL, 0);
    waitpid(marker, NULL, 0);
}

/* The first event of kind about rank of node B; false when none. */
static bool seen_first(seen_t *s, const char *kind, int rank, uint64_t *gen, uint64_t *t_fault_ms,
                       uint64_t *t_detect_ms)
{
    bool found = false;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n && !found; i++)
        if (!strcmp(s->ev[i].kind, kind) && !strcmp(s->ev[i].node, "B") &&
            s->ev[i].rank == rank) {
            *gen = s->ev[i].gen;
            *t_fault_ms = s->ev[i].t_fault_ms;
            *t_detect_ms = s->ev[i].t_detect_ms;
            found = true;
        }
    pthread_mutex_unlock(&s->mu);
    return found;
}

/* An exit decided late (its wait for a BYE ended after the generation moved
 * on) is a failure of the generation it was seen in, with t_fault_ms when
 * it was seen. Before, its event took the generation current when it was
 * decided (reported into the next generation's failures, not its own) and
 * no t_fault_ms. Rank 0, connected, exits with 0 in generation 5 and waits
 * for its BYE; the generation becomes 6; then its connection closes, with
 * no BYE: its rank_exit. Rank 1, killed after rank 0's exit, is the marker:
 * its event means rank 0's exit was seen (a poll that finds it finds both). */
static void test_late_exit_keeps_its_generation(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jlg");
    ftc_redis_t *rc = ftc_ctl_redis(c);
    char gk[128], fk[128];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    assert_int_equal(ftc_redis_cmdv(rc, true, NULL, "HSET", gk, "gen", "5", "world", "2", NULL),
                     0);
    static seen_t s;
    seen_init(&s);
    ftc_detector_options_t o = FTC_DETECTOR_OPTIONS_INIT;
    o.hang_min_ms = 100000;
    o.scan_ms = 100;
    o.follower_scan_factor = 1;
    ftc_detector_t *b = start_detector(f, "jlg", "B", false, &s, &o);
    ftc__detector_set_exit_wait_ms(b, 60000); /* decided by its close, long before */
    pid_t p = fork_exit(100, 0), marker = fork_paused();
    assert_int_equal(ftc_detector_watch_pid(b, 0, p), 0);
    assert_int_equal(ftc_detector_watch_pid(b, 1, marker), 0);
    ftc_detector_linked(b, 0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)p, &si, WEXITED | WNOWAIT), 0);
    kill(marker, SIGKILL);
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (seen_rank(&s, "rank_exit", "B", 1) == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 1), 1);
    uint64_t seen_by_ms = ftc_wall_ms(); /* rank 0's exit was seen before this */
    assert_int_equal(seen_rank(&s, "rank_exit", "B", 0), 0); /* it waits for its BYE */
    assert_int_equal(ftc_redis_cmdv(rc, true, NULL, "HSET", gk, "gen", "6", NULL), 0);
    d = ftc_deadline_in_ms(10000);
    while (seen_with(&s, "generation", -1, "generation 6") == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    assert_int_equal(seen_with(&s, "generation", -1, "generation 6"), 1);
    ftc_detector_closed(b, 0, p); /* no BYE came: a failure */
    d = ftc_deadline_in_ms(10000);
    while (seen_rank(&s, "rank_exit", "B", 0) == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(5);
    uint64_t gen = 0, t_fault = 0, t_detect = 0;
    assert_true(seen_first(&s, "rank_exit", 0, &gen, &t_fault, &t_detect));
    print_message("late rank_exit: generation %" PRIu64 " (seen in 5, decided in 6), t_fault_ms "
                  "%" PRIu64 " ms before its t_detect_ms\n", gen, t_detect - t_fault);
    assert_int_equal(gen, 5);
    assert_true(t_fault > 0 && t_fault <= seen_by_ms && t_fault <= t_detect);
    assert_true(seen_first(&s, "rank_exit", 1, &gen, &t_fault, &t_detect));
    assert_int_equal(gen, 5);
    ftc_detector_stop(b, true); /* publishes what it queued */
    /* reported as a failure of generation 5, not 6 */
    char id[64];
    snprintf(id, sizeof id, "rank_exit:B:0:%d", (int)p);
    ftc_redis_reply_t *rep;
    ftc_ctl_key(c, "failures:5", fk, sizeof fk);
    assert_int_equal(ftc_redis_cmdv(rc, true, &rep, "HEXISTS", fk, id, NULL), 0);
    assert_int_equal(rep->integer, 1);
    ftc_redis_reply_free(rep);
    ftc_ctl_key(c, "failures:6", fk, sizeof fk);
    assert_int_equal(ftc_redis_cmdv(rc, true, &rep, "HLEN", fk, NULL), 0);
    assert_int_equal(rep->integer, 0);
    ftc_redis_reply_free(rep);
    waitpid(p, NULL, 0);
    waitpid(marker, NULL, 0);
    ftc_ctl_destroy(c);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, redis_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("FTC_TEST_FILTER")) /* e.g. FTC_TEST_FILTER='test_data_loss*' */
        cmocka_set_test_filter(getenv("FTC_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        T(test_node_loss_reported_exactly_once), T(test_leader_failover_on_kill),
        T(test_paused_leader_steps_down),        T(test_redis_restart_survived),
        T(test_rank_exit_and_hang),              T(test_numerical_warnings),
        T(test_straggler_warning),               T(test_bad_redis_at_start),
        T(test_data_loss_without_outage_reseeded), T(test_older_state_without_outage_put_back),
        T(test_event_flood_does_not_stop_heartbeats),
        T(test_node_lost_not_reported_without_incarnation),
        T(test_wrong_type_key_is_not_an_outage),
        T(test_node_lost_once_across_generations), T(test_long_expired_key_not_cut_to_a_node),
        T(test_event_once_after_lost_reply), T(test_late_renewal_reply_does_not_extend_lease),
        T(test_no_loss_reported_right_after_own_outage),
        T(test_deadline_poll_pages_past_skewed_clocks), T(test_agent_pause_is_not_a_hang),
        T(test_loss_after_pause_reported_again), T(test_stale_pidfd_event_not_charged_to_new_rank),
        T(test_start_up_limit), T(test_hang_names_the_stuck_rank), T(test_exit_status),
        T(test_no_hang_after_the_watch_ended), T(test_status_told_before_the_watch),
        T(test_stopped_in_start_up_named), T(test_status_read_without_waitid_pidfd),
        T(test_bye_and_the_exit_status), T(test_hang_checked_after_a_failed_watch),
        T(test_status_waited_for_when_not_the_parent), T(test_standalone_exit_not_held),
        T(test_exit_wait_not_counted_while_paused), T(test_late_exit_keeps_its_generation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
