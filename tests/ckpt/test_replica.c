/*
 * test_replica.c — the replication engine (ckpt/replica.h) between real
 * agent processes on loopback: a 64 MiB shard pushed to two peers and
 * fetched back; two agents pushing to each other at once; a receiver killed
 * with SIGKILL mid-push (the sender ends by its deadline, the receiver's
 * previous replica survives for a restarted process: I3); a bit flipped after
 * sealing (NACK, previous replica kept; the refused bytes left in the slot
 * are not served as a replica of their step); a restarted agent's torn slot
 * (not adopted, not kept over a verified one by a push that says its step
 * committed); a raw peer that starts a push of the same step anew (ACKed);
 * 32 refused PUTs whose DATA never comes, then one whose DATA does (drained);
 * a holder's DATA sent after the fetcher gave up, and an older push's DATA
 * sent after a newer generation superseded it (both drained); a late NACK of
 * an earlier fetch, and the rest of an earlier fetch's answer (refused: the
 * next fetch from that holder succeeds);
 * a nonzero padding byte (a push
 * NACKed, a fetch of a holder's replica whose padding changed refused);
 * senders with another secret or another job (refused, the receiver keeps
 * serving); a stale generation (refused, then accepted after the sender
 * catches up); GET of an owner not held; and XOR parity pushed like a shard,
 * one data shard lost and rebuilt.
 *
 * Usage: test_ckpt_replica tcp|shm [filter]. Each agent is a forked child that
 * opens its own endpoint after the fork; the parent only builds shards,
 * relays addresses over socketpairs and referees. Exits 77 only when the
 * provider is absent. ctest's TIMEOUT is the backstop for a hang; every wait
 * here has its own deadline.
 */
#include "ftc_test.h"

#include "ckpt/parity.h"
#include "ckpt/replica.h"
#include "ckpt/slot.h"
#include "core/clock.h"
#include "core/fabric.h"
#include "core/hash.h"
#include "core/le.h"

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define MiB ((uint64_t)1 << 20)
#define MAX_AGENTS 5

static const char *g_prov;
static char g_job[64];     /* slot-name prefix, unique per test and process */
static int g_test_no;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "agent %d (pid %d): %s:%d: check failed: %s\n", g_self, (int)getpid(), \
                    __FILE__, __LINE__, #cond);                                                    \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static int g_self = -1; /* in a child: its node index */

/* Children leave by _exit (no atexit handlers of the cmocka parent), which
 * also skips LeakSanitizer's check: run it explicitly in sanitizer builds. */
extern void __lsan_do_leak_check(void) __attribute__((weak));
static void child_exit(int rc)
{
    if (__lsan_do_leak_check)
        __lsan_do_leak_check(); /* exits with LSan's error code on a leak */
    _exit(rc);
}

typedef struct agent {
    ftc_fabric_t *fab;
    ftc_repl_t *r;                  /* NULL for a raw peer */
    uint32_t self;
    int ctl;
    ftc_fabric_peer_t fa[MAX_AGENTS]; /* raw peer: the others' addresses */
    ftc_wire_key_t key;               /* raw peer: the job's key */
    uint64_t seq;                     /* raw peer: next header seq */
    uint32_t req;                     /* raw peer: the request id raw_hdr answers (0: none) */
} agent_t;

typedef int (*agent_fn)(agent_t *a);

typedef struct agent_cfg {
    const char *secret; /* NULL: the job's */
    const char *jobid;  /* NULL: the job's */
    uint64_t gen;       /* 0: 1 */
    agent_fn script;    /* runs first; its result byte goes to the parent */
    agent_fn final;     /* runs after the parent says quit */
    bool dies;          /* expected to die by SIGKILL */
    bool raw;           /* no engine: the script speaks the wire protocol itself */
    int serve_ms;       /* 0: 20000 */
} agent_cfg_t;

static const char *k_secret = "0123456789abcdef0123456789abcdef";

/* ---- plumbing ---------------------------------------------------------------- */

static void write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        b += w, n -= (size_t)w;
    }
}

static int read_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r, n -= (size_t)r;
    }
    return 0;
}

static ftc_fabric_t *open_fab(ftc_err_t *err)
{
    ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
    o.provider = g_prov;
    ftc_fabric_t *f = NULL;
    if (ftc_fabric_open(&o, &f, err) < 0)
        return NULL;
    return f;
}

static ftc_repl_t *open_repl(ftc_fabric_t *f, uint32_t self, const agent_cfg_t *c)
{
    ftc_repl_options_t o = FTC_REPL_OPTIONS_INIT;
    ftc_err_t err = {0};
    const char *sec = c && c->secret ? c->secret : k_secret;
    CHECK(ftc_wire_key_init(&o.key, c && c->jobid ? c->jobid : "test-job", sec, strlen(sec),
                            &err) == 0);
    o.fab = f;
    o.job = g_job;
    o.self = self;
    o.generation = c && c->gen ? c->gen : 1;
    o.serve_timeout_ms = c && c->serve_ms ? c->serve_ms : 20000;
    ftc_repl_t *r = ftc_repl_create(&o, &err);
    if (!r)
        fprintf(stderr, "agent %u: %s\n", self, err.msg);
    CHECK(r);
    return r;
}

/* Progresses until transfer x is done (or max_s, a backstop). */
static void run_xfer(agent_t *a, ftc_repl_xfer_t x, ftc_repl_status_t *st, int max_s)
{
    ftc_deadline_t until = ftc_deadline_in_ms((uint64_t)max_s * 1000);
    for (;;) {
        CHECK(ftc_repl_status(a->r, x, st) == 0);
        if (st->done)
            return;
        CHECK(!ftc_deadline_expired(until));
        (void)ftc_repl_progress(a->r, ftc_deadline_in_ms(100), true);
    }
}

static int push_wait(agent_t *a, uint32_t owner, const uint8_t *s, uint64_t size,
                     const uint32_t *peers, int n, int deadline_s, ftc_repl_status_t *st)
{
    ftc_repl_xfer_t x;
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    CHECK(ftc_shard_open(&v, s, size, 0, &e) == 0);
    int rc = ftc_repl_push(a->r, owner, v.info.step, s, size, peers, n,
                           ftc_deadline_in_ms((uint64_t)deadline_s * 1000), &x);
    if (rc < 0)
        fprintf(stderr, "agent %u: push: %s\n", a->self, ftc_repl_errstr(a->r));
    CHECK(rc == 0);
    run_xfer(a, x, st, deadline_s + 30);
    if (st->rc)
        printf("# agent %u: push of owner %u: %s (%s)\n", a->self, owner, ftc_errname(st->rc),
               st->detail);
    ftc_repl_release(a->r, x);
    return st->rc;
}

/* Fetches (owner, step) from peer; returns rc and the shard (caller frees). */
static int fetch_step_wait(agent_t *a, uint32_t peer, uint32_t owner, uint64_t step,
                           uint8_t **out, uint64_t *size, ftc_repl_status_t *st)
{
    ftc_repl_xfer_t x;
    CHECK(ftc_repl_fetch(a->r, peer, owner, step, ftc_deadline_in_ms(30000), &x) == 0);
    run_xfer(a, x, st, 60);
    int rc = st->rc;
    if (rc == 0)
        CHECK(ftc_repl_take(a->r, x, out, size) == 0);
    ftc_repl_release(a->r, x);
    return rc;
}

/* Fetches (owner, newest) from peer. */
static int fetch_wait(agent_t *a, uint32_t peer, uint32_t owner, uint8_t **out, uint64_t *size,
                      ftc_repl_status_t *st)
{
    return fetch_step_wait(a, peer, owner, UINT64_MAX, out, size, st);
}

static void serve_until_quit(agent_t *a)
{
    for (;;) {
        struct pollfd pf = {.fd = a->ctl, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            char c = 0;
            if (read(a->ctl, &c, 1) <= 0 || c == 'q')
                return;
        }
        if (!a->r)
            ftc_sleep_ms(20); /* a raw peer: nothing to serve */
        else if (ftc_repl_progress(a->r, ftc_deadline_in_ms(20), false) < 0)
            ftc_sleep_ms(20); /* broken endpoint: only wait for the parent */
    }
}

static bool held_equals(agent_t *a, uint32_t owner, const uint8_t *want, uint64_t size)
{
    uint64_t step, hs;
    const uint8_t *h;
    if (ftc_repl_held(a->r, owner, &step, &h, &hs) < 0)
        return false;
    return hs == size && memcmp(h, want, size) == 0;
}

typedef struct run {
    int n;
    pid_t pid[MAX_AGENTS];
    int ctl[MAX_AGENTS];
    uint8_t addr[MAX_AGENTS][FTC_FABRIC_ADDR_MAX];
    uint32_t alen[MAX_AGENTS];
    const agent_cfg_t *cfg;
} run_t;

static void child_main(int i, int n, int ctl, const agent_cfg_t *c)
{
    g_self = i;
    ftc_err_t err = {0};
    agent_t a = {.self = (uint32_t)i, .ctl = ctl};
    a.fab = open_fab(&err);
    if (!a.fab)
        fprintf(stderr, "agent %d: %s\n", i, err.msg);
    CHECK(a.fab);
    if (c->raw)
        CHECK(ftc_wire_key_init(&a.key, "test-job", k_secret, strlen(k_secret), &err) == 0);
    else
        a.r = open_repl(a.fab, (uint32_t)i, c);
    uint8_t me[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof me;
    CHECK(ftc_fabric_getname(a.fab, me, &len) == 0);
    uint32_t l32 = (uint32_t)len;
    write_all(ctl, &l32, 4);
    write_all(ctl, me, len);
    for (int j = 0; j < n; j++) {
        uint8_t other[FTC_FABRIC_ADDR_MAX];
        uint32_t ol;
        CHECK(read_all(ctl, &ol, 4) == 0 && ol <= sizeof other);
        CHECK(read_all(ctl, other, ol) == 0);
        if (j != i && c->raw)
            CHECK(ftc_fabric_peer_add(a.fab, other, ol, &a.fa[j]) == 0);
        else if (j != i)
            CHECK(ftc_repl_peer_add(a.r, (uint32_t)j, other, ol) == 0);
    }
    uint8_t res = 0;
    if (c->script)
        res = (uint8_t)c->script(&a);
    write_all(ctl, &res, 1);
    serve_until_quit(&a);
    int rc = c->final ? c->final(&a) : 0;
    ftc_repl_destroy(a.r);
    ftc_fabric_close(a.fab);
    child_exit(rc);
}

static void run_start(run_t *R, int n, const agent_cfg_t *cfg)
{
    memset(R, 0, sizeof *R);
    R->n = n;
    R->cfg = cfg;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        R->pid[i] = fork();
        assert_true(R->pid[i] >= 0);
        if (R->pid[i] == 0) {
            close(sv[0]);
            for (int j = 0; j < i; j++)
                close(R->ctl[j]);
            child_main(i, n, sv[1], &cfg[i]);
        }
        close(sv[1]);
        R->ctl[i] = sv[0];
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(read_all(R->ctl[i], &R->alen[i], 4), 0);
        assert_true(R->alen[i] <= FTC_FABRIC_ADDR_MAX);
        assert_int_equal(read_all(R->ctl[i], R->addr[i], R->alen[i]), 0);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            write_all(R->ctl[i], &R->alen[j], 4);
            write_all(R->ctl[i], R->addr[j], R->alen[j]);
        }
}

/* Reads agent i's script result (0 = passed), waiting at most max_s. */
static int run_result(run_t *R, int i, int max_s)
{
    struct pollfd pf = {.fd = R->ctl[i], .events = POLLIN};
    if (poll(&pf, 1, max_s * 1000) <= 0)
        return -1;
    uint8_t res;
    return read_all(R->ctl[i], &res, 1) == 0 ? res : -2;
}

static int reap(pid_t pid, int max_s)
{
    int st = 0;
    for (int i = 0; i < max_s * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        ftc_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return st;
}

static void unlink_shm_addr(const uint8_t *addr, uint32_t len)
{
    if (strncmp(g_prov, "shm", 3) || len == 0 || len >= FTC_FABRIC_ADDR_MAX)
        return;
    char a[FTC_FABRIC_ADDR_MAX + 1], name[FTC_FABRIC_ADDR_MAX + 16];
    memcpy(a, addr, len);
    a[len] = 0;
    const char *n = strstr(a, "://");
    snprintf(name, sizeof name, "/dev/shm/%s", n ? n + 3 : a);
    unlink(name);
}

/* Every script must pass; then every agent quits and its final check must
 * pass (agents marked `dies` must have been killed). */
static void run_end(run_t *R)
{
    for (int i = 0; i < R->n; i++) {
        if (R->cfg[i].dies)
            continue;
        int res = run_result(R, i, 200);
        if (res != 0)
            print_error("agent %d's script failed (%d)\n", i, res);
        assert_int_equal(res, 0);
    }
    for (int i = 0; i < R->n; i++)
        write_all(R->ctl[i], "q", 1);
    for (int i = 0; i < R->n; i++) {
        int st = reap(R->pid[i], 60);
        close(R->ctl[i]);
        unlink_shm_addr(R->addr[i], R->alen[i]);
        if (R->cfg[i].dies) {
            assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        } else {
            if (!WIFEXITED(st) || WEXITSTATUS(st))
                print_error("agent %d ended with status 0x%x\n", i, st);
            assert_true(WIFEXITED(st));
            assert_int_equal(WEXITSTATUS(st), 0);
        }
    }
}

static void new_job(void)
{
    snprintf(g_job, sizeof g_job, "rt%d-%s-%d", (int)getpid(),
             strncmp(g_prov, "shm", 3) ? "tcp" : "shm", ++g_test_no);
}

static void unlink_slots(void)
{
    static const uint32_t owners[] = {0, 1, 2, 3, 7, 100};
    for (uint32_t n = 0; n < MAX_AGENTS; n++)
        for (size_t o = 0; o < sizeof owners / sizeof owners[0]; o++)
            for (int k = 0; k < 2; k++) {
                char name[FTC_SLOT_NAME_MAX];
                snprintf(name, sizeof name, "ftc.%s.n%u.p%u.s%d", g_job, n, owners[o], k);
                ftc_slot_unlink(name, NULL);
            }
}

/* ~64 MiB shards (see ftc_test_make_shard: about 70 bytes per unit of scale). */
#define SCALE_64M (64 * MiB / 70)

static uint8_t *g_s[4];        /* shards shared with the children (copy on write) */
static uint64_t g_n[4];

static void shards_free(void)
{
    for (int i = 0; i < 4; i++) {
        free(g_s[i]);
        g_s[i] = NULL;
        g_n[i] = 0;
    }
}

/* Starts agents 0..n-1 as cfg says, and ends them once each passed its
 * script (run_end). */
static void run_agents(int n, const agent_cfg_t *cfg)
{
    run_t R;
    run_start(&R, n, cfg);
    run_end(&R);
}

/* The end of each test's job: its replica slots and its shards. */
static void end_job(void)
{
    unlink_slots();
    shards_free();
}

/* Flips bits `mask` of payload byte `at` of shard g_s[i]: after sealing,
 * so that only a verifying reader sees it. */
static void flip_payload(int i, uint64_t at, uint8_t mask)
{
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    assert_int_equal(ftc_shard_open(&v, g_s[i], g_n[i], 0, &e), 0);
    g_s[i][v.payload_offset + at] ^= mask;
}

/* ---- 64 MiB to two peers, fetch back, GET of an owner not held ------------ */

static int s1_push_fetch(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peers[2] = {1, 2};
    uint64_t t0 = ftc_now_ns();
    CHECK(push_wait(a, 0, g_s[0], g_n[0], peers, 2, 60, &st) == 0);
    CHECK(st.acked == 2 && st.failed == 0);
    printf("# %s: 64 MiB pushed to 2 peers, both ACKed, in %.1f ms\n", g_prov,
           (double)(ftc_now_ns() - t0) / 1e6);
    uint8_t *back = NULL;
    uint64_t n = 0;
    CHECK(fetch_wait(a, 1, 0, &back, &n, &st) == 0);
    CHECK(n == g_n[0] && memcmp(back, g_s[0], n) == 0);
    free(back);
    back = NULL;
    CHECK(fetch_wait(a, 2, 7, &back, &n, &st) == FTC_ENOENT);
    CHECK(strstr(st.detail, "not held") != NULL);
    printf("# %s: GET of owner 7: %s\n", g_prov, st.detail);
    return 0;
}

static int f1_holds_s0(agent_t *a)
{
    CHECK(held_equals(a, 0, g_s[0], g_n[0]));
    ftc_repl_counters_t c;
    ftc_repl_counters(a->r, &c);
    CHECK(c.bytes_received == g_n[0]);
    return 0;
}

static void test_push_fetch(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, SCALE_64M, 11, &g_n[0]);
    agent_cfg_t cfg[3] = {{.script = s1_push_fetch}, {.final = f1_holds_s0},
                          {.final = f1_holds_s0}};
    run_agents(3, cfg);
    end_job();
}

/* ---- two agents pushing to each other at once -------------------------------- */

static int s2_cross(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t other = 1 - a->self;
    CHECK(push_wait(a, a->self, g_s[a->self], g_n[a->self], &other, 1, 60, &st) == 0);
    CHECK(st.acked == 1);
    return 0;
}

static int f2_cross(agent_t *a)
{
    uint32_t other = 1 - a->self;
    CHECK(held_equals(a, other, g_s[other], g_n[other]));
    return 0;
}

static void test_cross_push(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(5, 0, SCALE_64M, 21, &g_n[0]);
    g_s[1] = ftc_test_make_shard(5, 1, SCALE_64M, 22, &g_n[1]);
    agent_cfg_t cfg[2] = {{.script = s2_cross, .final = f2_cross},
                          {.script = s2_cross, .final = f2_cross}};
    run_agents(2, cfg);
    end_job();
}

/* ---- receiver killed mid-push: deadline, and its previous replica survives --- */

#define KILL_DEADLINE_S 6

static int s3_sender(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 60, &st) == 0);
    uint64_t t0 = ftc_now_ns();
    int rc = push_wait(a, 0, g_s[1], g_n[1], &peer, 1, KILL_DEADLINE_S, &st);
    double s = (double)(ftc_now_ns() - t0) / 1e9;
    printf("# %s: push to a receiver killed mid-transfer ended after %.2f s: %s\n", g_prov, s,
           ftc_errname(rc));
    CHECK(rc == FTC_ETIMEDOUT || rc == FTC_EFABRIC);
    /* the deadline, plus the fabric's 1 s cancel bound, plus slack */
    CHECK(s < KILL_DEADLINE_S + 4);
    return 0;
}

static int s3_victim(agent_t *a)
{
    /* receive step 1 in full, then die 16 MiB into step 2 */
    ftc_deadline_t until = ftc_deadline_in_ms(120000);
    while (!ftc_deadline_expired(until)) {
        (void)ftc_repl_progress(a->r, ftc_deadline_in_ms(2), false);
        ftc_repl_counters_t c;
        ftc_repl_counters(a->r, &c);
        if (c.bytes_received >= g_n[0] + 16 * MiB)
            kill(getpid(), SIGKILL);
    }
    return 1;
}

static void test_peer_killed(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, SCALE_64M, 31, &g_n[0]);
    g_s[1] = ftc_test_make_shard(2, 0, SCALE_64M, 32, &g_n[1]);
    agent_cfg_t cfg[2] = {{.script = s3_sender}, {.script = s3_victim, .dies = true}};
    run_t R;
    run_start(&R, 2, cfg);
    run_end(&R);
    /* a restarted agent 1 maps its replica slots: step 1, intact (I3) */
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        g_self = 1;
        ftc_err_t err = {0};
        ftc_fabric_t *f = open_fab(&err);
        CHECK(f);
        agent_cfg_t c = {0};
        ftc_repl_t *r = open_repl(f, 1, &c);
        /* adopted at start (ftc_repl_adopt_all), unless the agent stops
         * first: then at its first use; once only */
        atomic_bool stop = true;
        CHECK(ftc_repl_adopt_all(r, &stop) == 0);
        CHECK(ftc_repl_adopt_all(r, NULL) == 1);
        CHECK(ftc_repl_adopt_all(r, NULL) == 0);
        uint64_t step = 0, size = 0;
        const uint8_t *h = NULL;
        CHECK(ftc_repl_held(r, 0, &step, &h, &size) == 0);
        CHECK(step == 1 && size == g_n[0] && memcmp(h, g_s[0], size) == 0);
        ftc_repl_destroy(r);
        ftc_fabric_close(f);
        child_exit(0);
    }
    int st = reap(pid, 60);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    printf("# %s: restarted agent holds the intact step-1 replica\n", g_prov);
    end_job();
}

/* ---- a bit flipped after sealing ------------------------------------------------ */

static int s4_corrupt(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 60, &st) == 0);
    CHECK(push_wait(a, 0, g_s[1], g_n[1], &peer, 1, 60, &st) == FTC_ECORRUPT);
    CHECK(st.failed == 1 && strstr(st.detail, "checksum") != NULL);
    printf("# %s: flipped bit refused: %s\n", g_prov, st.detail);
    return 0;
}

static int f4_kept(agent_t *a)
{
    CHECK(held_equals(a, 0, g_s[0], g_n[0]));
    ftc_repl_counters_t c;
    ftc_repl_counters(a->r, &c);
    CHECK(c.refused >= 1);
    return 0;
}

static void test_bit_flip(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 18, 41, &g_n[0]);
    g_s[1] = ftc_test_make_shard(2, 0, 1 << 18, 42, &g_n[1]);
    flip_payload(1, 12345, 0x10);
    agent_cfg_t cfg[2] = {{.script = s4_corrupt}, {.final = f4_kept}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a push refused after all its bytes landed is not a held replica ------------ */

static int s9_refused(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 60, &st) == 0);
    CHECK(push_wait(a, 0, g_s[1], g_n[1], &peer, 1, 60, &st) == 0);
    /* step 3, a bit flipped after sealing: every byte lands over the step-1
     * replica, its head and footer intact, and the receiver refuses it */
    CHECK(push_wait(a, 0, g_s[2], g_n[2], &peer, 1, 60, &st) == FTC_ECORRUPT);
    uint8_t *back = NULL;
    uint64_t n = 0;
    int rc = fetch_step_wait(a, 1, 0, 3, &back, &n, &st);
    printf("# %s: GET of the refused step 3: %s (%s)\n", g_prov, ftc_errname(rc), st.detail);
    free(back);
    CHECK(rc == FTC_ENOENT && strstr(st.detail, "not held") != NULL);
    CHECK(fetch_wait(a, 1, 0, &back, &n, &st) == 0);
    CHECK(n == g_n[1] && memcmp(back, g_s[1], n) == 0);
    free(back);
    return 0;
}

static int f9_refused(agent_t *a)
{
    const uint8_t *h = NULL;
    uint64_t size = 0;
    CHECK(ftc_repl_held_step(a->r, 0, 3, &h, &size) == FTC_ENOENT);
    CHECK(ftc_repl_held_step(a->r, 0, 1, &h, &size) == FTC_ENOENT); /* written over */
    CHECK(ftc_repl_held_step(a->r, 0, 2, &h, &size) == 0);
    CHECK(size == g_n[1] && memcmp(h, g_s[1], size) == 0);
    CHECK(held_equals(a, 0, g_s[1], g_n[1]));
    return 0;
}

static void test_refused_not_held(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 91, &g_n[0]);
    g_s[1] = ftc_test_make_shard(2, 0, 1 << 14, 92, &g_n[1]);
    g_s[2] = ftc_test_make_shard(3, 0, 1 << 14, 93, &g_n[2]);
    flip_payload(2, 123, 0x10);
    agent_cfg_t cfg[2] = {{.script = s9_refused}, {.final = f9_refused}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a raw peer: the wire protocol by hand (docs/wire-protocol.md) ------------- */

static uint64_t raw_tag_hdr(uint32_t node)
{
    return (1ull << 62) | node;
}

static uint64_t raw_tag_data(uint32_t node, uint64_t seq)
{
    return (2ull << 62) | ((uint64_t)(node & 0xfffffu) << 40) | (seq & ((1ull << 40) - 1));
}

/* The request id (offset 36) of a received header, and a header sent with
 * one: written into the encoded header and the MAC made again, so this test
 * peer speaks whichever wire version the engine does (0: as encoded). */
static int raw_recv_req(agent_t *a, uint32_t from, ftc_wire_hdr_t *h, uint32_t *req, int ms)
{
    uint8_t buf[256];
    size_t got = 0;
    ftc_err_t e = {0};
    int rc = ftc_fabric_recv(a->fab, a->fa[from], raw_tag_hdr(from), 0, buf, sizeof buf, &got,
                             NULL, ftc_deadline_in_ms((uint64_t)ms));
    if (rc == 0 && got >= FTC_WIRE_HDR)
        *req = ftc_le_rd32(buf + 36);
    return rc ? rc : ftc_wire_decode(&a->key, buf, got, h, &e);
}

static uint64_t raw_hdr_req(agent_t *a, uint32_t to, ftc_wire_hdr_t *h, uint32_t req,
                            const char *reason)
{
    uint8_t buf[FTC_WIRE_HDR + 64];
    size_t rl = reason ? strlen(reason) : 0;
    ftc_err_t e = {0};
    CHECK(rl <= 64);
    if (!a->seq)
        a->seq = 1;
    h->sender = a->self;
    h->seq = a->seq++;
    h->length = rl ? rl : h->length;
    h->payload_xxh3 = rl ? ftc_xxh3(reason, rl) : h->payload_xxh3;
    CHECK(ftc_wire_encode(&a->key, h, buf, &e) == 0);
    if (req) {
        uint8_t mac[32];
        size_t n = 0;
        ftc_le_wr32(buf + 36, req);
        CHECK(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, a->key.secret, a->key.secret_len,
                        buf, 96, mac, sizeof mac, &n) && n >= 16);
        memcpy(buf + 96, mac, 16);
    }
    memcpy(buf + FTC_WIRE_HDR, reason ? reason : "", rl);
    CHECK(ftc_fabric_send(a->fab, a->fa[to], raw_tag_hdr(a->self), buf, FTC_WIRE_HDR + rl,
                          ftc_deadline_in_ms(5000)) == 0);
    return h->seq;
}

/* Sends header h (sender and seq filled in here) to node `to`, answering
 * request a->req; its seq. */
static uint64_t raw_hdr(agent_t *a, uint32_t to, ftc_wire_hdr_t *h)
{
    return raw_hdr_req(a, to, h, a->req, NULL);
}

#define RAW_F_FETCH 0x100 /* FTC__F_FETCH of replica.c: a PUT answering a GET */

/* A PUT of bytes [off, off+len) of shard s (owner 0) at generation gen:
 * its header, then (with_data) its DATA. */
static int raw_put_f(agent_t *a, uint32_t to, uint64_t gen, const uint8_t *s, uint64_t total,
                     uint64_t step, uint64_t off, uint64_t len, bool with_data, uint16_t flags)
{
    ftc_wire_hdr_t h = {.type = FTC_MSG_PUT, .flags = flags, .generation = gen, .owner = 0,
                        .step = step, .offset = off, .length = len, .total = total};
    uint64_t seq = raw_hdr(a, to, &h);
    if (!with_data)
        return 0;
    return ftc_fabric_send(a->fab, a->fa[to], raw_tag_data(a->self, seq), s + off, len,
                           ftc_deadline_in_ms(5000));
}

static int raw_put(agent_t *a, uint32_t to, uint64_t gen, const uint8_t *s, uint64_t total,
                   uint64_t step, uint64_t off, uint64_t len, bool with_data)
{
    return raw_put_f(a, to, gen, s, total, step, off, len, with_data, 0);
}

/* Pushes all of shard s (step) in chunks of `chunk` bytes, then its PUT_END. */
static void raw_push(agent_t *a, uint32_t to, uint64_t gen, const uint8_t *s, uint64_t n,
                     uint64_t step, uint64_t chunk)
{
    for (uint64_t off = 0; off < n; off += chunk)
        CHECK(raw_put(a, to, gen, s, n, step, off, n - off < chunk ? n - off : chunk, true) == 0);
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    CHECK(ftc_shard_open(&v, s, n, 0, &e) == 0);
    ftc_wire_hdr_t h = {.type = FTC_MSG_PUT_END, .generation = gen, .owner = 0, .step = step,
                        .total = n, .payload_xxh3 = v.head_xxh3};
    raw_hdr(a, to, &h);
}

/* Receives the next header from node `from` within ms: 0, or the error. */
static int raw_recv(agent_t *a, uint32_t from, ftc_wire_hdr_t *h, int ms)
{
    uint8_t buf[256];
    size_t got = 0;
    ftc_err_t e = {0};
    int rc = ftc_fabric_recv(a->fab, a->fa[from], raw_tag_hdr(from), 0, buf, sizeof buf, &got,
                             NULL, ftc_deadline_in_ms((uint64_t)ms));
    return rc ? rc : ftc_wire_decode(&a->key, buf, got, h, &e);
}

/* ---- a sender that starts a push of the same step anew ------------------------- */

static int s11_repush(agent_t *a)
{
    /* the first attempt: one chunk in, the header of the next one out, and
     * then nothing (its sender restarted, or gave up on a lost connection) */
    uint64_t chunk = 256 << 10;
    CHECK(raw_put(a, 1, 1, g_s[0], g_n[0], 1, 0, chunk, true) == 0);
    CHECK(raw_put(a, 1, 1, g_s[0], g_n[0], 1, chunk, chunk, false) == 0);
    /* the same step again, whole: the receiver must start over, not wait for
     * the first attempt's chunk that never comes */
    raw_push(a, 1, 1, g_s[0], g_n[0], 1, chunk);
    ftc_wire_hdr_t h;
    int rc = raw_recv(a, 1, &h, 10000);
    printf("# %s: the push started anew: %s %s\n", g_prov, ftc_errname(rc),
           rc ? "" : ftc_wire_type_name(h.type));
    CHECK(rc == 0 && h.type == FTC_MSG_ACK && h.step == 1 && h.total == g_n[0]);
    return 0;
}

static int f11_repush(agent_t *a)
{
    CHECK(held_equals(a, 0, g_s[0], g_n[0]));
    return 0;
}

static void test_repush_same_step(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 111, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s11_repush, .raw = true}, {.final = f11_repush}};
    run_agents(2, cfg);
    end_job();
}

/* ---- refused PUTs whose DATA never comes do not use up the drains -------------- */

#define DRAIN_MAX 32 /* FTC__MAX_DRAINS of replica.c */

static int s12_drains(agent_t *a)
{
    /* stale PUTs (generation 3, the receiver is at 5): each one's DATA is
     * to be drained, but its sender is gone before sending it */
    uint64_t len = 1 << 20;
    for (int i = 0; i < DRAIN_MAX; i++)
        CHECK(raw_put(a, 1, 3, g_s[0], g_n[0], 1, 0, len, false) == 0);
    ftc_sleep_ms(2500); /* the receiver's serve_timeout_ms, and then some */
    /* a refused PUT whose sender is alive sends its DATA: it must be
     * drained, else the rendezvous send never completes (and cannot be
     * cancelled: the sender's endpoint breaks) */
    int rc = raw_put(a, 1, 3, g_s[0], g_n[0], 1, 0, len, true);
    printf("# %s: DATA of a refused PUT after %d undelivered ones: %s\n", g_prov, DRAIN_MAX,
           ftc_errname(rc));
    CHECK(rc == 0);
    return 0;
}

static int f12_drains(agent_t *a)
{
    ftc_repl_counters_t c;
    ftc_repl_counters(a->r, &c);
    CHECK(c.refused >= DRAIN_MAX + 1);
    /* the undelivered drains kept the engine busy for serve_timeout_ms with
     * nothing moving: it napped (it spun a core the whole time) */
    printf("# %s: %llu quiet naps\n", g_prov, (unsigned long long)c.quiet_naps);
    CHECK(c.quiet_naps > 0);
    return 0;
}

static void test_drain_expires(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 15, 121, &g_n[0]); /* > 1 MiB */
    agent_cfg_t cfg[2] = {{.script = s12_drains, .raw = true},
                          {.final = f12_drains, .gen = 5, .serve_ms = 1500}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a fetch that gives up drains the DATA its holder still sends ------------- */

/* A fetch of (owner 0, step) from node 1 that gets no answer within its
 * 1 s deadline. */
static void fetch_times_out(agent_t *a, uint64_t step)
{
    ftc_repl_xfer_t x;
    ftc_repl_status_t st;
    CHECK(ftc_repl_fetch(a->r, 1, 0, step, ftc_deadline_in_ms(1000), &x) == 0);
    run_xfer(a, x, &st, 30);
    ftc_repl_release(a->r, x);
    CHECK(st.rc == FTC_ETIMEDOUT);
}

/* A fetch of (owner 0, step 1) from node 1 that must bring back g_s[0]
 * whole; `what` names it in the log. */
static void fetch_s0_ok(agent_t *a, const char *what)
{
    uint8_t *got = NULL;
    uint64_t n = 0;
    ftc_repl_status_t st;
    int rc = fetch_step_wait(a, 1, 0, 1, &got, &n, &st);
    printf("# %s: %s: %s (%s)\n", g_prov, what, ftc_errname(rc), st.detail);
    CHECK(rc == 0 && n == g_n[0] && memcmp(got, g_s[0], n) == 0);
    free(got);
}

/* Receives node 0's next header, a GET of (owner 0) step; its request id. */
static uint32_t raw_take_get(agent_t *a, uint64_t step)
{
    ftc_wire_hdr_t h;
    uint32_t q = 0;
    CHECK(raw_recv_req(a, 0, &h, &q, 10000) == 0 && h.type == FTC_MSG_GET && h.step == step);
    return q;
}

/* Answers node 0's GET `req` of (owner 0, step) with a NACK "not held". */
static void raw_nack_get(agent_t *a, uint32_t req, uint64_t step)
{
    char reason[64];
    snprintf(reason, sizeof reason, "not held: owner 0 step %llu", (unsigned long long)step);
    ftc_wire_hdr_t nk = {.type = FTC_MSG_NACK, .flags = RAW_F_FETCH | (uint16_t)-FTC_ENOENT,
                         .generation = 1, .owner = 0, .step = step};
    raw_hdr_req(a, 0, &nk, req, reason);
}

/* Serves g_s[0] (owner 0, step 1) from offset `from` on, in chunks of
 * `chunk` bytes, as the answer to request a->req. */
static void raw_serve(agent_t *a, uint64_t from, uint64_t chunk)
{
    for (uint64_t off = from; off < g_n[0]; off += chunk)
        CHECK(raw_put_f(a, 0, 1, g_s[0], g_n[0], 1, off,
                        g_n[0] - off < chunk ? g_n[0] - off : chunk, true, RAW_F_FETCH) == 0);
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    CHECK(ftc_shard_open(&v, g_s[0], g_n[0], 0, &e) == 0);
    ftc_wire_hdr_t end = {.type = FTC_MSG_PUT_END, .flags = RAW_F_FETCH, .generation = 1,
                          .owner = 0, .step = 1, .total = g_n[0], .payload_xxh3 = v.head_xxh3};
    raw_hdr(a, 0, &end);
}

static int s13_fetcher(agent_t *a)
{
    fetch_times_out(a, 1);
    return 0; /* and serves on: the holder's DATA comes after this */
}

static int s13_holder(agent_t *a)
{
    ftc_wire_hdr_t h;
    CHECK(raw_recv_req(a, 0, &h, &a->req, 10000) == 0 && h.type == FTC_MSG_GET &&
          h.owner == 0);
    /* the answer's first PUT: its header now, its DATA (1 MiB: a rendezvous
     * send on rxm) after the fetcher gave up */
    uint64_t len = 1 << 20;
    CHECK(raw_put_f(a, 0, 1, g_s[0], g_n[0], 1, 0, len, false, RAW_F_FETCH) == 0);
    ftc_sleep_ms(2500);
    int rc = ftc_fabric_send(a->fab, a->fa[0], raw_tag_data(a->self, a->seq - 1), g_s[0], len,
                             ftc_deadline_in_ms(5000));
    printf("# %s: DATA sent after the fetcher gave up: %s\n", g_prov, ftc_errname(rc));
    CHECK(rc == 0);
    return 0;
}

static void test_fetch_abort_drains(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 15, 131, &g_n[0]); /* > 1 MiB */
    agent_cfg_t cfg[2] = {{.script = s13_fetcher}, {.script = s13_holder, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a push superseded by a newer generation: its DATA still drained ----------- */

static int s14_old(agent_t *a)
{
    /* generation 1: the first PUT's header, its DATA held back */
    uint64_t len = 1 << 20;
    CHECK(raw_put(a, 2, 1, g_s[0], g_n[0], 1, 0, len, false) == 0);
    ftc_wire_hdr_t h;
    CHECK(raw_recv(a, 2, &h, 20000) == 0);
    printf("# %s: the older push: %s code %d\n", g_prov, ftc_wire_type_name(h.type),
           -(int)(h.flags & 0xff));
    CHECK(h.type == FTC_MSG_NACK && -(int)(h.flags & 0xff) == FTC_ECANCELED);
    int rc = ftc_fabric_send(a->fab, a->fa[2], raw_tag_data(a->self, a->seq - 1), g_s[0], len,
                             ftc_deadline_in_ms(5000));
    printf("# %s: its DATA sent after it was superseded: %s\n", g_prov, ftc_errname(rc));
    CHECK(rc == 0);
    return 0;
}

static int s14_new(agent_t *a)
{
    ftc_sleep_ms(1500); /* after the older push's header (s14_old checks the order) */
    ftc_repl_status_t st;
    uint32_t peer = 2;
    CHECK(push_wait(a, 0, g_s[1], g_n[1], &peer, 1, 60, &st) == 0);
    return 0;
}

static int f14_holder(agent_t *a)
{
    CHECK(held_equals(a, 0, g_s[1], g_n[1]));
    return 0;
}

static void test_superseded_drains(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 15, 141, &g_n[0]); /* > 1 MiB */
    g_s[1] = ftc_test_make_shard(2, 0, 1 << 14, 142, &g_n[1]);
    agent_cfg_t cfg[3] = {{.script = s14_old, .raw = true},
                          {.script = s14_new, .gen = 2},
                          {.final = f14_holder}};
    run_agents(3, cfg);
    end_job();
}

/* ---- a late NACK of an earlier fetch does not fail the next one ------------------ */

static int s15_fetcher(agent_t *a)
{
    /* step 5: no answer by the deadline */
    fetch_times_out(a, 5);
    /* then the step before it, from the same holder (as a restore that
     * falls back to an older committed step does) */
    fetch_s0_ok(a, "fetch of step 1 after the late NACK of step 5");
    return 0;
}

static int s15_holder(agent_t *a)
{
    uint32_t q1 = raw_take_get(a, 5);
    a->req = raw_take_get(a, 1);
    /* the answer to the first GET comes late: after the second one */
    raw_nack_get(a, q1, 5);
    /* the answer to the second one: step 1, whole */
    raw_serve(a, 0, 256 << 10);
    return 0;
}

static void test_late_fetch_nack(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 151, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s15_fetcher}, {.script = s15_holder, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

/* ---- the rest of an earlier fetch's answer is not taken for the next one -------- */

static int s16_fetcher(agent_t *a)
{
    fetch_times_out(a, 1);
    fetch_s0_ok(a, "fetch after an earlier answer's tail");
    return 0;
}

static int s16_holder(agent_t *a)
{
    uint32_t q1 = raw_take_get(a, 1);
    uint32_t q2 = raw_take_get(a, 1);
    /* the answer to the first GET, from its second chunk on (its first one
     * went before the fetcher gave up), then the answer to the second */
    uint64_t chunk = 256 << 10;
    a->req = q1;
    raw_serve(a, chunk, chunk);
    ftc_sleep_ms(1000); /* the fetcher is done with the first before the second starts
                           (else their chunks happen to add up to a whole shard) */
    a->req = q2;
    raw_serve(a, 0, chunk);
    return 0;
}

static void test_stale_answer_tail(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 161, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s16_fetcher}, {.script = s16_holder, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a fetch answer claiming a huge shard is refused before allocating --------- */

static int s17_fetcher(agent_t *a)
{
    uint8_t *got = NULL;
    uint64_t n = 0;
    ftc_repl_status_t st;
    int rc = fetch_step_wait(a, 1, 0, 1, &got, &n, &st);
    printf("# %s: fetch answered with a PUT claiming 1 PiB: %s (%s)\n", g_prov,
           ftc_errname(rc), st.detail);
    CHECK(rc == FTC_ERANGE && strstr(st.detail, "1125899906842624 bytes"));
    return 0;
}

static int s17_holder(agent_t *a)
{
    a->req = raw_take_get(a, 1);
    /* an authenticated holder's answer whose total no node could hold: the
     * fetcher must refuse it, not allocate (and touch) that much; its DATA
     * is still drained */
    CHECK(raw_put_f(a, 0, 1, g_s[0], 1ull << 50, 1, 0, 4096, true, RAW_F_FETCH) == 0);
    return 0;
}

static void test_fetch_huge_total(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 171, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s17_fetcher}, {.script = s17_holder, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

/* ---- answers tied to their request: a late answer of an earlier one refused ----- */

static int s18_fetcher(agent_t *a)
{
    fetch_times_out(a, 1);
    fetch_s0_ok(a, "fetch of step 1 after a late NACK of the same step");
    return 0;
}

static int s18_holder(agent_t *a)
{
    uint32_t q1 = raw_take_get(a, 1);
    uint32_t q2 = raw_take_get(a, 1);
    /* the answer to the first GET comes late, after the second one: the
     * same step, so only its request id tells it apart */
    raw_nack_get(a, q1, 1);
    a->req = q2;
    raw_serve(a, 0, 256 << 10);
    return 0;
}

static void test_late_nack_same_step(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 181, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s18_fetcher}, {.script = s18_holder, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

static int s19_pusher(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    /* the first attempt: no answer by its deadline */
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 1, &st) == FTC_ETIMEDOUT);
    /* the retry of the same (owner, step, size) */
    int rc = push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 30, &st);
    printf("# %s: retried push after a late NACK of the first attempt: %s (%s)\n", g_prov,
           ftc_errname(rc), st.detail);
    CHECK(rc == 0 && st.acked == 1);
    return 0;
}

/* Receives one push of node 0 (its PUTs, their DATA, the PUT_END); its
 * request id. */
static uint32_t raw_take_push(agent_t *a)
{
    uint32_t q = 0;
    ftc_wire_hdr_t h;
    for (;;) {
        CHECK(raw_recv_req(a, 0, &h, &q, 10000) == 0);
        if (h.type == FTC_MSG_PUT_END)
            break;
        CHECK(h.type == FTC_MSG_PUT);
        uint8_t *buf = malloc(h.length);
        CHECK(buf);
        CHECK(ftc_fabric_recv(a->fab, a->fa[0], raw_tag_data(0, h.seq), 0, buf, h.length, NULL,
                              NULL, ftc_deadline_in_ms(10000)) == 0);
        free(buf);
    }
    return q;
}

static int s19_receiver(agent_t *a)
{
    uint32_t q1 = raw_take_push(a);
    uint32_t q2 = raw_take_push(a);
    /* the first attempt's answer comes late: a NACK for the same (owner,
     * step, size), then the retry's ACK */
    ftc_wire_hdr_t nk = {.type = FTC_MSG_NACK, .flags = (uint16_t)-FTC_ECORRUPT, .generation = 1,
                         .owner = 0, .step = 1, .total = g_n[0]};
    raw_hdr_req(a, 0, &nk, q1, "a late NACK of the first attempt");
    ftc_wire_hdr_t ack = {.type = FTC_MSG_ACK, .generation = 1, .owner = 0, .step = 1,
                          .total = g_n[0]};
    raw_hdr_req(a, 0, &ack, q2, NULL);
    return 0;
}

static void test_late_push_answer(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 191, &g_n[0]);
    agent_cfg_t cfg[2] = {{.script = s19_pusher}, {.script = s19_receiver, .raw = true}};
    run_agents(2, cfg);
    end_job();
}

/* ---- a restarted agent adopts only the replicas that verify ---------------------- */

/* Writes shard s (n bytes) into node 1's replica slot k of owner 0, as an
 * earlier process of that agent left it. */
static void plant_slot(int k, const uint8_t *s, uint64_t n)
{
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.%s.n1.p0.s%d", g_job, k);
    ftc_slot_t sl;
    ftc_err_t e = {0};
    assert_int_equal(ftc_slot_create(name, n, &sl, &e), 0);
    memcpy(sl.base, s, n);
    ftc_slot_close(&sl);
}

static int s10_keep(agent_t *a)
{
    /* the owner's step 2 committed; step 3 is pushed saying so */
    ftc_repl_status_t st;
    uint32_t peer = 1;
    ftc_repl_xfer_t x;
    CHECK(ftc_repl_push_keep(a->r, 0, 3, g_s[2], g_n[2], &peer, 1, 2,
                             ftc_deadline_in_ms(60000), &x) == 0);
    run_xfer(a, x, &st, 90);
    ftc_repl_release(a->r, x);
    CHECK(st.rc == 0 && st.acked == 1);
    return 0;
}

static int f10_keep(agent_t *a)
{
    const uint8_t *h = NULL;
    uint64_t size = 0;
    CHECK(held_equals(a, 0, g_s[2], g_n[2]));
    /* the torn step-2 slot was never a replica: neither kept nor served */
    CHECK(ftc_repl_held_step(a->r, 0, 2, &h, &size) == FTC_ENOENT);
    /* and the verified step 1 was not written over for it */
    CHECK(ftc_repl_held_step(a->r, 0, 1, &h, &size) == 0);
    CHECK(size == g_n[0] && memcmp(h, g_s[0], size) == 0);
    return 0;
}

static void test_adopt_torn(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 14, 101, &g_n[0]);
    g_s[1] = ftc_test_make_shard(2, 0, 1 << 14, 102, &g_n[1]);
    g_s[2] = ftc_test_make_shard(3, 0, 1 << 14, 103, &g_n[2]);
    flip_payload(1, 77, 0x01); /* torn: head and footer fine, a tensor not */
    plant_slot(0, g_s[0], g_n[0]);
    plant_slot(1, g_s[1], g_n[1]);
    agent_cfg_t cfg[2] = {{.script = s10_keep}, {.final = f10_keep}};
    run_agents(2, cfg);
    end_job();
}

/* ---- nonzero padding: refused by the receiver (push) and the fetcher ------- */

/* The offset of a padding byte of shard s: one between two tensors, or
 * after the last one, that no checksum covers (the head checksum stops at
 * the payload, a tensor's at its length). */
static uint64_t gap_offset(const uint8_t *s, uint64_t n)
{
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    CHECK(ftc_shard_open(&v, s, n, 0, &e) == 0);
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        uint64_t next = v.size - FTC_SHARD_FOOTER_SIZE;
        if (i + 1 < v.n_tensors) {
            ftc_shard_tensor_t u;
            ftc_shard_get(&v, i + 1, &u);
            next = u.offset;
        }
        if (t.offset + t.length < next)
            return t.offset + t.length;
    }
    CHECK(!"the shard has no padding");
    return 0;
}

/* Flips the padding byte at off of node 1's replica slot of owner 0 that
 * holds shard want (its store, as the parent of a fetch would find it). */
static void flip_held_gap(const uint8_t *want, uint64_t n, uint64_t off)
{
    int hits = 0;
    for (int k = 0; k < 2; k++) {
        char name[FTC_SLOT_NAME_MAX];
        snprintf(name, sizeof name, "ftc.%s.n1.p0.s%d", g_job, k);
        ftc_slot_t sl;
        ftc_err_t e = {0};
        if (ftc_slot_open(name, true, &sl, &e))
            continue;
        if (sl.size >= n && !memcmp(sl.base, want, off)) { /* its head and tensors before it */
            sl.base[off] ^= 0x40;
            hits++;
        }
        ftc_slot_close(&sl);
    }
    CHECK(hits == 1);
}

static int s8_gaps(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 60, &st) == 0);
    /* a holder's replica whose padding changed in its memory: the fetch
     * verifies every tensor as it lands, and the padding too */
    uint64_t off = gap_offset(g_s[0], g_n[0]);
    flip_held_gap(g_s[0], g_n[0], off);
    uint8_t *back = NULL;
    uint64_t n = 0;
    CHECK(fetch_wait(a, 1, 0, &back, &n, &st) == FTC_ECORRUPT);
    CHECK(back == NULL && strstr(st.detail, "padding") != NULL);
    printf("# %s: fetched replica with nonzero padding refused: %s\n", g_prov, st.detail);
    flip_held_gap(g_s[0], g_n[0], off); /* back as it was */
    CHECK(fetch_wait(a, 1, 0, &back, &n, &st) == 0);
    CHECK(n == g_n[0] && memcmp(back, g_s[0], n) == 0);
    free(back);
    /* a sealed shard whose padding changed after sealing: NACKed */
    CHECK(push_wait(a, 0, g_s[1], g_n[1], &peer, 1, 60, &st) == FTC_ECORRUPT);
    CHECK(st.failed == 1 && strstr(st.detail, "padding") != NULL);
    printf("# %s: pushed replica with nonzero padding refused: %s\n", g_prov, st.detail);
    return 0;
}

static void test_nonzero_gap(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 18, 81, &g_n[0]);
    g_s[1] = ftc_test_make_shard(2, 0, 1 << 18, 82, &g_n[1]);
    g_s[1][gap_offset(g_s[1], g_n[1])] = 0x01; /* after sealing: no checksum sees it */
    agent_cfg_t cfg[2] = {{.script = s8_gaps}, {.final = f4_kept}};
    run_agents(2, cfg);
    end_job();
}

/* ---- another secret, another job: refused; the receiver keeps serving ------ */

static int s5_intruder(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    int rc = push_wait(a, a->self, g_s[0], g_n[0], &peer, 1, 3, &st);
    CHECK(rc != 0 && st.acked == 0);
    return 0;
}

static int s5_legit(agent_t *a)
{
    char go;
    CHECK(read_all(a->ctl, &go, 1) == 0 && go == 'g'); /* after the intruders */
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 2, g_s[1], g_n[1], &peer, 1, 60, &st) == 0);
    uint8_t *back = NULL;
    uint64_t n = 0;
    CHECK(fetch_wait(a, 1, 2, &back, &n, &st) == 0);
    CHECK(n == g_n[1] && memcmp(back, g_s[1], n) == 0);
    free(back);
    return 0;
}

static int f5_receiver(agent_t *a)
{
    ftc_repl_counters_t c;
    ftc_repl_counters(a->r, &c);
    printf("# %s: receiver refused %llu messages from the intruders\n", g_prov,
           (unsigned long long)c.refused);
    CHECK(c.refused > 0);
    CHECK(held_equals(a, 2, g_s[1], g_n[1]));
    uint64_t step, size;
    const uint8_t *h;
    CHECK(ftc_repl_held(a->r, 0, &step, &h, &size) == FTC_ENOENT);
    CHECK(ftc_repl_held(a->r, 3, &step, &h, &size) == FTC_ENOENT);
    return 0;
}

static void test_wrong_key(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 18, 51, &g_n[0]);
    g_s[1] = ftc_test_make_shard(1, 2, 1 << 18, 52, &g_n[1]);
    agent_cfg_t cfg[4] = {
        {.script = s5_intruder, .secret = "another secret, 32 bytes long!!!"},
        {.final = f5_receiver},
        {.script = s5_legit},
        {.script = s5_intruder, .jobid = "another-job"},
    };
    run_t R;
    run_start(&R, 4, cfg);
    assert_int_equal(run_result(&R, 0, 60), 0);
    assert_int_equal(run_result(&R, 3, 60), 0);
    write_all(R.ctl[2], "g", 1);
    cfg[0].dies = cfg[3].dies = true; /* results already read: skip them in run_end */
    assert_int_equal(run_result(&R, 2, 120), 0);
    cfg[2].dies = true;
    int res1 = run_result(&R, 1, 60);
    assert_int_equal(res1, 0);
    cfg[1].dies = true;
    for (int i = 0; i < 4; i++)
        write_all(R.ctl[i], "q", 1);
    for (int i = 0; i < 4; i++) {
        int st = reap(R.pid[i], 60);
        close(R.ctl[i]);
        unlink_shm_addr(R.addr[i], R.alen[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    end_job();
}

/* ---- stale generation ---------------------------------------------------------- */

static int s6_stale(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t peer = 1;
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 30, &st) == FTC_ESTALE);
    CHECK(strstr(st.detail, "stale") != NULL);
    ftc_repl_set_generation(a->r, 5);
    CHECK(push_wait(a, 0, g_s[0], g_n[0], &peer, 1, 30, &st) == 0);
    return 0;
}

static int f6_fenced(agent_t *a)
{
    ftc_repl_counters_t c;
    ftc_repl_counters(a->r, &c);
    CHECK(c.refused >= 1);
    CHECK(held_equals(a, 0, g_s[0], g_n[0]));
    return 0;
}

static void test_stale_generation(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(1, 0, 1 << 20, 61, &g_n[0]); /* ~70 MiB: many chunks */
    agent_cfg_t cfg[2] = {{.script = s6_stale, .gen = 3}, {.final = f6_fenced, .gen = 5}};
    run_agents(2, cfg);
    end_job();
}

/* ---- XOR parity pushed like a shard; one data shard lost and rebuilt --------- */

/* Wraps a parity block in a sealed shard (one uint8 tensor "parity"). */
static uint8_t *wrap_block(const uint8_t *blk, uint64_t len, uint64_t *size)
{
    ftc_shard_info_t in = ftc_test_info(9, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    assert_non_null(l);
    ftc_err_t e = {0};
    assert_int_equal(ftc_shard_layout_add_tensor(l, "parity", FTC_DTYPE_U8, 1, &len, &e), 0);
    *size = ftc_shard_layout_size(l);
    uint8_t *s = calloc(1, *size);
    assert_non_null(s);
    assert_int_equal(ftc_shard_layout_write(l, s, *size, &e), 0);
    memcpy(ftc_shard_payload_ptr(l, s, 0), blk, len);
    assert_int_equal(ftc_shard_seal(s, *size, 1, &e), 0);
    ftc_shard_layout_destroy(l);
    return s;
}

static int s7_parity(agent_t *a)
{
    ftc_repl_status_t st;
    uint32_t p1 = 1, p2 = 2;
    for (uint32_t i = 0; i < 3; i++)
        CHECK(push_wait(a, i, g_s[i], g_n[i], &p1, 1, 60, &st) == 0);
    CHECK(push_wait(a, 100, g_s[3], g_n[3], &p2, 1, 60, &st) == 0);
    /* data shard 1 is lost: fetch 0 and 2 from node 1, the parity from node 2 */
    uint8_t *got[4] = {0};
    uint64_t gn[4] = {0};
    CHECK(fetch_wait(a, 1, 0, &got[0], &gn[0], &st) == 0);
    CHECK(fetch_wait(a, 1, 2, &got[2], &gn[2], &st) == 0);
    CHECK(fetch_wait(a, 2, 100, &got[3], &gn[3], &st) == 0);
    ftc_shard_view_t v;
    ftc_err_t e = {0};
    CHECK(ftc_shard_open(&v, got[3], gn[3], FTC_SHARD_VERIFY, &e) == 0);
    ftc_shard_tensor_t t;
    ftc_shard_get(&v, 0, &t);
    uint64_t blen = t.length;
    uint8_t *blocks[4];
    for (int i = 0; i < 4; i++) {
        blocks[i] = calloc(1, blen);
        CHECK(blocks[i]);
    }
    memcpy(blocks[0], got[0], gn[0]);
    memcpy(blocks[2], got[2], gn[2]);
    memcpy(blocks[3], t.data, blen);
    bool lost[4] = {false, true, false, false};
    ftc_parity_t *p = ftc_parity_create(3, 1, true, &e);
    CHECK(p);
    CHECK(ftc_parity_decode(p, blocks, lost, blen, &e) == 0);
    uint64_t n1;
    CHECK(ftc_shard_peek_size(blocks[1], blen, &n1, &e) == 0 && n1 == g_n[1]);
    CHECK(ftc_shard_open(&v, blocks[1], n1, FTC_SHARD_VERIFY, &e) == 0);
    CHECK(memcmp(blocks[1], g_s[1], n1) == 0);
    printf("# %s: shard 1 rebuilt from 2 fetched shards + fetched XOR parity, verified\n",
           g_prov);
    ftc_parity_destroy(p);
    for (int i = 0; i < 4; i++) {
        free(blocks[i]);
        free(got[i]);
    }
    return 0;
}

static void test_parity(void **state)
{
    (void)state;
    new_job();
    g_s[0] = ftc_test_make_shard(9, 0, 50000, 71, &g_n[0]);
    g_s[1] = ftc_test_make_shard(9, 1, 80000, 72, &g_n[1]);
    g_s[2] = ftc_test_make_shard(9, 2, 30000, 73, &g_n[2]);
    uint64_t mx = g_n[0] > g_n[1] ? g_n[0] : g_n[1];
    mx = mx > g_n[2] ? mx : g_n[2];
    uint64_t blen = ftc_parity_block_len(mx);
    uint8_t *d[3], *par = calloc(1, blen);
    assert_non_null(par);
    for (int i = 0; i < 3; i++) {
        d[i] = calloc(1, blen);
        assert_non_null(d[i]);
        memcpy(d[i], g_s[i], g_n[i]);
    }
    ftc_err_t e = {0};
    ftc_parity_t *p = ftc_parity_create(3, 1, true, &e);
    assert_non_null(p);
    assert_int_equal(ftc_parity_encode(p, (const uint8_t *const *)d, &par, blen, &e), 0);
    ftc_parity_destroy(p);
    g_s[3] = wrap_block(par, blen, &g_n[3]);
    for (int i = 0; i < 3; i++)
        free(d[i]);
    free(par);
    agent_cfg_t cfg[3] = {{.script = s7_parity}, {0}, {0}};
    run_agents(3, cfg);
    end_job();
}

/* ---- options ------------------------------------------------------------------- */

static void test_bad_options(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_repl_options_t o = FTC_REPL_OPTIONS_INIT;
    assert_null(ftc_repl_create(&o, &err)); /* no fabric, no job */
    assert_int_equal(err.code, FTC_EINVAL);
    ftc_repl_destroy(NULL);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "tcp";
    g_prov = !strcmp(which, "tcp") ? "tcp;ofi_rxm" : which;
    unsetenv("FI_PROVIDER");
    signal(SIGPIPE, SIG_IGN); /* control sockets of killed agents */
    ftc_err_t err = {0};
    ftc_fabric_t *f = open_fab(&err);
    if (!f && err.code == FTC_EUNSUPPORTED) {
        printf("SKIPPED: libfabric provider '%s' is absent: %s\n", g_prov, err.msg);
        return 77;
    }
    ftc_fabric_close(f);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2)
        cmocka_set_test_filter(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_push_fetch),
        cmocka_unit_test(test_cross_push),
        cmocka_unit_test(test_peer_killed),
        cmocka_unit_test(test_bit_flip),
        cmocka_unit_test(test_nonzero_gap),
        cmocka_unit_test(test_refused_not_held),
        cmocka_unit_test(test_adopt_torn),
        cmocka_unit_test(test_repush_same_step),
        cmocka_unit_test(test_drain_expires),
        cmocka_unit_test(test_fetch_abort_drains),
        cmocka_unit_test(test_superseded_drains),
        cmocka_unit_test(test_late_fetch_nack),
        cmocka_unit_test(test_stale_answer_tail),
        cmocka_unit_test(test_fetch_huge_total),
        cmocka_unit_test(test_late_nack_same_step),
        cmocka_unit_test(test_late_push_answer),
        cmocka_unit_test(test_wrong_key),
        cmocka_unit_test(test_stale_generation),
        cmocka_unit_test(test_parity),
    };
    return cmocka_run_group_tests_name(g_prov, tests, NULL, NULL);
}
