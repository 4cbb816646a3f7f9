/*
 * test_dist.c — the failure paths of trainer/dist.c's join, with real
 * libfabric endpoints and real loopback sockets:
 *   - a join whose address exchange times out closes the endpoint it opened
 *     (counted as open file descriptors, before and after);
 *   - a rank whose rendezvous connect cannot complete (rank 0's accept
 *     queue full: the kernel drops its SYNs) returns FTC_ETIMEDOUT at its
 *     deadline instead of hanging in connect(). The rank runs in a child
 *     with a backstop, so a hang fails the test instead of stalling it;
 *   - a rendezvous table whose address blob is malformed (a length running
 *     past the blob) is FTC_EPROTO naming the rank, read within the blob
 *     (the ASan build catches a read past it);
 *   - and the good path it guards: four ranks of DP 2 x TP 2 join through
 *     the TCP rendezvous (two addresses per blob) and run a barrier and an
 *     all-reduce in both of their groups;
 *   - connections to rank 0's rendezvous that are not ranks (one silent for
 *     the whole deadline, one sending another protocol, one closing after
 *     half a header), a rank that registers and dies, and an earlier try of
 *     a rank that registers and stays open do not stop the job from forming:
 *     rank 0 serves every connection at once, drops the bad ones with a
 *     warning naming their address, forgets a registered rank whose
 *     connection closes, and of two connections claiming a rank keeps the
 *     one accepted later;
 *   - a --coll nccl join over the TCP rendezvous (the NCCL ids' exchange)
 *     ends FTC_ECANCELED when its abort flag is raised, not at its deadline;
 *   - rank 0 refuses the hello of another job (FTC_ECONFIG), of another
 *     generation (FTC_ESTALE), of another world size or with a rank out of
 *     range, telling the refused rank both values at once; a refused hello
 *     takes no rank's place: the real ranks still form the job. A rank of an
 *     older generation fails at once; one of a newer generation than rank
 *     0's tries again until its deadline, and joins when a rank 0 of its
 *     generation takes the port (rank 0 lagging a generation);
 *   - rank 0 sends the table to every rank at once: one that does not read
 *     it (its buffers shrunk, FTC_TEST_RDZV_SNDBUF) holds up no other, and
 *     rank 0 fails at the deadline naming it.
 */
#include "ftc_test.h"

#include "core/clock.h"
#include "core/fabric.h"
#include "core/log.h"
#include "trainer/dist.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_exchange_timeout_closes_endpoint(void **state)
{
    (void)state;
    /* warm up: libfabric keeps some process-wide state after its first use */
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    ftc_fabric_t *fab = NULL;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&fo, &fab, &err) < 0)
        fail_msg("fabric: %s", err.msg);
    ftc_fabric_close(fab);
    char *dir = ftc_test_tmpdir("dist");
    int before = count_fds();
    for (int rep = 0; rep < 3; rep++) {
        /* rank 0 of 2; rank 1 never comes */
        ftc_dist_opts_t o = {.world = 2, .tp = 1, .rank = 0, .dir = dir, .timeout_ms = 200};
        ftc_dist_t *d = NULL;
        memset(&err, 0, sizeof err);
        int rc = ftc_dist_join(&o, &d, &err);
        assert_int_equal(rc, FTC_ETIMEDOUT);
        assert_null(d);
        assert_non_null(strstr(err.msg, "missing"));
    }
    int after = count_fds();
    if (after != before)
        fail_msg("%d file descriptors open before three timed-out joins, %d after: the "
                 "endpoints leaked",
                 before, after);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_rendezvous_connect_deadline(void **state)
{
    (void)state;
    /* "rank 0": listens with the smallest backlog and never accepts */
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ls >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 0), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    int port = ntohs(sa.sin_port);
    /* fill its accept queue: the kernel then drops further SYNs, so a
     * blocking connect() would wait for the SYN retries (minutes) */
    int fill[8], nfill = 0;
    for (; nfill < 8; nfill++) {
        fill[nfill] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        assert_true(fill[nfill] >= 0);
        int r = connect(fill[nfill], (struct sockaddr *)&sa, sizeof sa);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd p = {fill[nfill], POLLOUT, 0};
            if (poll(&p, 1, 300) == 0) { /* this one hangs: the queue is full */
                nfill++;
                break;
            }
        }
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint8_t table[2 * FTC_DIST_BLOB_MAX];
        size_t lens[2];
        ftc_err_t e = {0};
        ftc_dist_rdzv_opts_t ro = FTC_DIST_RDZV_OPTS_INIT;
        ro.host = "127.0.0.1", ro.port = port, ro.rank = 1, ro.world = 2;
        int rc = ftc_dist_rendezvous_tcp(&ro, "x", 1, table, lens, ftc_deadline_in_ms(500), &e);
        fprintf(stderr, "rank 1: rc %d: %s\n", rc, e.msg);
        _exit(rc == FTC_ETIMEDOUT ? 0 : 1);
    }
    int st = 0;
    uint64_t t0 = ftc_now_ns();
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (ftc_now_ns() - t0 > 20ull * 1000000000ull) { /* backstop, far past 500 ms */
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        ftc_sleep_ms(10);
    }
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    close(ls);
    if (WIFSIGNALED(st))
        fail_msg("the rendezvous client was still in connect() 20 s after its 500 ms deadline");
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Waits for a child with a backstop; returns its status (SIGKILLed when the
 * backstop passed). */
static int wait_child(pid_t pid, int secs)
{
    int st = 0;
    uint64_t t0 = ftc_now_ns();
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        if (ftc_now_ns() - t0 > (uint64_t)secs * 1000000000ull) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return st;
        }
        ftc_sleep_ms(10);
    }
}

static void io_exact(int fd, void *buf, size_t n, int wr)
{
    uint8_t *b = buf;
    while (n) {
        ssize_t k = wr ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        assert_true(k > 0);
        b += k, n -= (size_t)k;
    }
}

static void test_rendezvous_malformed_blob(void **state)
{
    (void)state;
    /* the test is rank 0 of a DP 2 x TP 2 job; rank 3 joins for real */
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ls >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 4), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ls);
        ftc_dist_opts_t o = {.world = 4, .tp = 2, .rank = 3, .host = "127.0.0.1",
                             .port = ntohs(sa.sin_port), .timeout_ms = 10000};
        ftc_dist_t *d = NULL;
        ftc_err_t e = {0};
        int rc = ftc_dist_join(&o, &d, &e);
        fprintf(stderr, "rank 3: rc %d: %s\n", rc, e.msg);
        ftc_dist_destroy(d);
        _exit(rc == FTC_EPROTO && strstr(e.msg, "rank 2") && strstr(e.msg, "malformed") ? 0 : 1);
    }
    int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    assert_true(fd >= 0);
    uint8_t hb[FTC__DIST_HELLO_MAX];
    ftc__dist_hello_t h;
    char why[256];
    size_t got = 0;
    int st = 0;
    while (st == 0) {
        io_exact(fd, hb + got, 1, 0);
        st = ftc__dist_hello_parse(hb, ++got, &h, why, sizeof why);
    }
    assert_int_equal(st, 1);
    assert_int_equal(h.rank, 3);
    /* ranks 1 and 3 (rank 3's DP group) get rank 3's own blob; rank 2 (its
     * TP group) a blob of 4 bytes whose first address claims 65535 bytes */
    uint8_t bad[4] = {0xff, 0xff, 0, 0}, zero[4] = {0};
    io_exact(fd, zero, 4, 1); /* status: the table follows */
    for (int q = 0; q < 4; q++) {
        const uint8_t *b = q == 2 ? bad : h.blob;
        uint32_t l = q == 2 ? (uint32_t)sizeof bad : (uint32_t)h.bloblen;
        uint8_t l4[4] = {(uint8_t)l, (uint8_t)(l >> 8), 0, 0};
        io_exact(fd, l4, 4, 1);
        io_exact(fd, (void *)(uintptr_t)b, l, 1);
    }
    st = wait_child(pid, 60);
    close(fd);
    close(ls);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A free loopback port: bind to 0, read it, close (rank 0 binds it again). */
static int free_port(void)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ls >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    close(ls);
    return ntohs(sa.sin_port);
}

/* A connection to 127.0.0.1:port, retried while nobody listens yet; *local
 * gets its own "127.0.0.1:P" (what rank 0's warnings call it). */
static int connect_retry(int port, char *local, size_t cap)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    for (int i = 0; i < 3000; i++) { /* 30 s */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            struct sockaddr_in me;
            socklen_t sl = sizeof me;
            assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &sl), 0);
            snprintf(local, cap, "127.0.0.1:%d", ntohs(me.sin_port));
            return fd;
        }
        close(fd);
        ftc_sleep_ms(10);
    }
    fail_msg("nobody listened on 127.0.0.1:%d within 30 s", port);
    return -1;
}

#define STRAY_DL_MS 20000

/* job_rank's deadline (ms): set before fork_rank, the child inherits it */
static int g_rank_dl_ms = STRAY_DL_MS;

/* One rank of job `job`, generation gen: joins with blob "blob of rank R".
 * want_rc 0: exit 0 when every rank's blob is right in the table; else exit
 * 0 when the join failed want_rc with a message naming want1 and want2. */
static void job_rank(int port, int rank, int world, const char *job, uint64_t gen, int want_rc,
                     const char *want1, const char *want2)
{
    char blob[32];
    uint8_t *table = calloc((size_t)world, FTC_DIST_BLOB_MAX);
    size_t *lens = calloc((size_t)world, sizeof *lens);
    if (!table || !lens)
        _exit(2);
    snprintf(blob, sizeof blob, "blob of rank %d", rank);
    ftc_err_t e = {0};
    ftc_dist_rdzv_opts_t ro = FTC_DIST_RDZV_OPTS_INIT;
    ro.host = "127.0.0.1", ro.port = port, ro.rank = rank, ro.world = world;
    ro.job = job, ro.generation = gen;
    int rc = ftc_dist_rendezvous_tcp(&ro, blob, strlen(blob), table, lens,
                                     ftc_deadline_in_ms((uint64_t)g_rank_dl_ms), &e);
    fprintf(stderr, "rank %d (job '%s', generation %llu): rc %d: %s\n", rank, job ? job : "",
            (unsigned long long)gen, rc, e.msg);
    if (want_rc)
        _exit(rc == want_rc && strstr(e.msg, want1) && strstr(e.msg, want2) ? 0 : 1);
    if (rc < 0)
        _exit(1);
    for (int q = 0; q < world; q++) {
        snprintf(blob, sizeof blob, "blob of rank %d", q);
        if (lens[q] != strlen(blob) || memcmp(table + (size_t)q * FTC_DIST_BLOB_MAX, blob,
                                               lens[q])) {
            fprintf(stderr, "rank %d: the table's entry for rank %d is %zu bytes '%.*s'\n", rank,
                    q, lens[q], (int)lens[q], table + (size_t)q * FTC_DIST_BLOB_MAX);
            _exit(1);
        }
    }
    _exit(0);
}

static void stray_rank(int port, int rank, int world)
{
    job_rank(port, rank, world, NULL, 0, 0, NULL, NULL);
}

/* A hello (trainer/dist.h) of rank of world, job, gen with blob. */
static size_t hello(uint8_t *out, int rank, int world, const char *job, uint64_t gen,
                    const char *blob)
{
    ftc__dist_hello_t h = {.rank = (uint32_t)rank, .world = (uint32_t)world, .generation = gen,
                           .blob = (const uint8_t *)blob, .bloblen = strlen(blob)};
    snprintf(h.job, sizeof h.job, "%s", job);
    size_t n = ftc__dist_hello_encode(&h, out, FTC__DIST_HELLO_MAX);
    assert_true(n > 0);
    return n;
}

static void test_rendezvous_stray_connections(void **state)
{
    (void)state;
    /* rank 0 of 3 in a child whose log goes to a file; the strays below are
     * all opened before the real ranks 1 and 2 */
    char *dir = ftc_test_tmpdir("dist");
    char logpath[PATH_MAX];
    snprintf(logpath, sizeof logpath, "%s/rank0.log", dir);
    int port = free_port();
    fflush(stdout), fflush(stderr);
    pid_t pids[3];
    pids[0] = fork();
    assert_true(pids[0] >= 0);
    if (pids[0] == 0) {
        int lf = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (lf < 0 || dup2(lf, 2) < 0)
            _exit(2);
        ftc_log_configure(FTC_LOG_WARN, NULL);
        stray_rank(port, 0, 3);
    }
    /* before any real rank: a connection that never says anything (held open
     * until every rank has finished, so past the deadline if they wait for
     * it), one that sends a header of another protocol, one that sends half
     * a header and closes, and a rank 1 that registers and dies */
    char silent_at[64], garbage_at[64], half_at[64], dead_at[64], early_at[64];
    int silent = connect_retry(port, silent_at, sizeof silent_at);
    int garbage = connect_retry(port, garbage_at, sizeof garbage_at);
    uint32_t junk[3] = {0x20544547u /* "GET " */, 1, 1};
    io_exact(garbage, junk, sizeof junk, 1);
    int half = connect_retry(port, half_at, sizeof half_at);
    io_exact(half, "FTC2", 4, 1);
    close(half);
    uint8_t hb[FTC__DIST_HELLO_MAX];
    int dead = connect_retry(port, dead_at, sizeof dead_at);
    io_exact(dead, hb, hello(hb, 1, 3, "", 0, "dead blob of rank 1"), 1);
    close(dead);
    /* rank 2's first try: registers and stays open; then the real rank 2
     * connects again and must win over it */
    int early = connect_retry(port, early_at, sizeof early_at);
    io_exact(early, hb, hello(hb, 2, 3, "", 0, "early blob of rank 2"), 1);
    pids[2] = fork();
    assert_true(pids[2] >= 0);
    if (pids[2] == 0)
        stray_rank(port, 2, 3);
    /* rank 0 closes the first try once it has the second (not before: then
     * rank 1 could complete the job with the first try's blob) */
    struct pollfd p = {early, POLLIN, 0};
    int pr = poll(&p, 1, 2 * STRAY_DL_MS);
    uint8_t c;
    ssize_t k = pr == 1 ? recv(early, &c, 1, 0) : 1;
    close(early);
    pids[1] = fork();
    assert_true(pids[1] >= 0);
    if (pids[1] == 0)
        stray_rank(port, 1, 3);
    int st[3];
    for (int r = 0; r < 3; r++)
        st[r] = wait_child(pids[r], 60);
    close(garbage);
    close(silent);
    char log[16384] = "";
    FILE *f = fopen(logpath, "r");
    if (f) {
        size_t n = fread(log, 1, sizeof log - 1, f);
        log[n] = 0;
        fclose(f);
    }
    printf("%s", log);
    ftc_test_rmrf(dir);
    free(dir);
    for (int r = 0; r < 3; r++)
        if (!WIFEXITED(st[r]) || WEXITSTATUS(st[r]) != 0)
            fail_msg("rank %d: status 0x%x (a silent connection opened first held up the "
                     "rendezvous until its deadline?)", r, st[r]);
    /* rank 0 closed rank 2's first try without sending it the table */
    if (k > 0)
        fail_msg("rank 2's first connection was %s", pr == 1 ? "sent the table" : "never closed");
    /* each stray named by its address in rank 0's warnings */
    const char *at[] = {silent_at, garbage_at, half_at, dead_at, early_at};
    for (int i = 0; i < 5; i++)
        if (!strstr(log, at[i]))
            fail_msg("rank 0's warnings do not name the connection from %s", at[i]);
    assert_non_null(strstr(log, "not an ftc rendezvous hello"));
    assert_non_null(strstr(log, "two connections claim rank 2"));
}

/* Forks job_rank(port, rank, world, job, gen, want_rc, want1, want2). */
static pid_t fork_rank(int port, int rank, int world, const char *job, uint64_t gen, int want_rc,
                       const char *want1, const char *want2)
{
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        job_rank(port, rank, world, job, gen, want_rc, want1, want2);
    return pid;
}

static void expect_exit0(pid_t pid, const char *what)
{
    int st = wait_child(pid, 60);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s: status 0x%x", what, st);
}

static void test_rendezvous_foreign_job(void **state)
{
    (void)state;
    /* rank 0 of job "jobA" (2 ranks); a rank 1 of job "jobB" is refused at
     * once (FTC_ECONFIG naming both ids), and the real rank 1 still joins */
    int port = free_port();
    pid_t r0 = fork_rank(port, 0, 2, "jobA", 0, 0, NULL, NULL);
    expect_exit0(fork_rank(port, 1, 2, "jobB", 0, FTC_ECONFIG, "'jobA'", "'jobB'"),
                 "rank 1 of job jobB: not refused FTC_ECONFIG naming both job ids");
    expect_exit0(fork_rank(port, 1, 2, "jobA", 0, 0, NULL, NULL), "the real rank 1");
    expect_exit0(r0, "rank 0");
}

static void test_rendezvous_stale_generation(void **state)
{
    (void)state;
    /* rank 0 of generation 3: a rank of generation 2 is refused at once
     * (FTC_ESTALE naming both generations: it is the stale one); one of
     * generation 4 tries again until its deadline (rank 0 is the stale one
     * and may yet move on), then fails FTC_ESTALE naming both; the real
     * rank 1 of generation 3 still joins */
    int port = free_port();
    pid_t r0 = fork_rank(port, 0, 2, "job", 3, 0, NULL, NULL);
    g_rank_dl_ms = 1500;
    uint64_t t0 = ftc_now_ns();
    expect_exit0(fork_rank(port, 1, 2, "job", 2, FTC_ESTALE, "generation is 2", "is 3"),
                 "rank 1 of generation 2: not refused FTC_ESTALE naming both generations");
    uint64_t older_ms = (ftc_now_ns() - t0) / 1000000;
    t0 = ftc_now_ns();
    expect_exit0(fork_rank(port, 1, 2, "job", 4, FTC_ESTALE, "generation 4",
                           "still of generation 3"),
                 "rank 1 of generation 4: did not fail FTC_ESTALE naming both generations");
    uint64_t newer_ms = (ftc_now_ns() - t0) / 1000000;
    g_rank_dl_ms = STRAY_DL_MS;
    if (older_ms >= 1000)
        fail_msg("rank 1 of generation 2 took %llu ms: not refused at once",
                 (unsigned long long)older_ms);
    if (newer_ms < 1400)
        fail_msg("rank 1 of generation 4 failed after %llu ms, before its 1500 ms deadline",
                 (unsigned long long)newer_ms);
    expect_exit0(fork_rank(port, 1, 2, "job", 3, 0, NULL, NULL), "the real rank 1");
    expect_exit0(r0, "rank 0");
}

static void test_rendezvous_rank0_catches_up(void **state)
{
    (void)state;
    /* rank 0 lags a generation: rank 0 of generation 3 (an earlier
     * incarnation still listening on the port) refuses rank 1 of generation
     * 4, which tries again; rank 0 of 3 ends at its deadline, rank 0 of 4
     * listens on the same port, and rank 1 joins it */
    int port = free_port();
    g_rank_dl_ms = 1500;
    pid_t old0 = fork_rank(port, 0, 2, "job", 3, FTC_ETIMEDOUT, "heard from 1 of 2", "rank 1");
    g_rank_dl_ms = STRAY_DL_MS;
    ftc_sleep_ms(200); /* old rank 0 listening: rank 1 meets it, not the closed port */
    pid_t r1 = fork_rank(port, 1, 2, "job", 4, 0, NULL, NULL);
    expect_exit0(old0, "rank 0 of generation 3: not FTC_ETIMEDOUT without its rank 1");
    pid_t r0 = fork_rank(port, 0, 2, "job", 4, 0, NULL, NULL);
    expect_exit0(r1, "rank 1 of generation 4: did not join the new rank 0");
    expect_exit0(r0, "rank 0 of generation 4");
}

/* Reads rank 0's refusal from fd: returns its code, why gets its message;
 * 0 when rank 0 sent a table (status 0) instead; 1 when it sent nothing. */
static int read_refusal(int fd, char *why, size_t cap)
{
    struct pollfd p = {fd, POLLIN, 0};
    uint8_t b[4 + 2 + 512];
    size_t got = 0;
    while (poll(&p, 1, 2 * STRAY_DL_MS) == 1) {
        ssize_t k = recv(fd, b + got, sizeof b - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got < 4)
        return 1;
    uint32_t code = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (code == 0)
        return 0;
    size_t wl = got >= 6 ? (size_t)(b[4] | b[5] << 8) : 0;
    snprintf(why, cap, "%.*s", (int)(wl <= got - 6 ? wl : got - 6), (const char *)b + 6);
    return -(int)code;
}

static void test_rendezvous_refused_rank_takes_no_slot(void **state)
{
    (void)state;
    /* rank 0 of 3 of job "jobA", generation 1, and the real rank 1; then
     * four well-formed hellos that rank 0 must refuse, each held open: rank 1
     * of job "jobB", rank 2 of generation 0, rank 1 of a world of 4 and rank
     * 3 (outside 1..2). None may displace rank 1 (of two connections of one
     * rank the later is kept) nor fill rank 2's place: each gets its refusal,
     * and the real rank 2 completes the job with the real blobs */
    int port = free_port();
    pid_t r0 = fork_rank(port, 0, 3, "jobA", 1, 0, NULL, NULL);
    pid_t r1 = fork_rank(port, 1, 3, "jobA", 1, 0, NULL, NULL);
    struct {
        int rank, world;
        const char *job;
        uint64_t gen;
        int code;
        const char *names1, *names2;
    } bad[] = {
        {1, 3, "jobB", 1, FTC_ECONFIG, "'jobB'", "'jobA'"},
        {2, 3, "jobA", 0, FTC_ESTALE, "generation is 0", "is 1"},
        {1, 4, "jobA", 1, FTC_ECONFIG, "world size is 4", "is 3"},
        {3, 3, "jobA", 1, FTC_ECONFIG, "rank 3", "1..2"},
    };
    int fds[4];
    uint8_t hb[FTC__DIST_HELLO_MAX];
    char at[64];
    for (int i = 0; i < 4; i++) {
        fds[i] = connect_retry(port, at, sizeof at);
        io_exact(fds[i], hb, hello(hb, bad[i].rank, bad[i].world, bad[i].job, bad[i].gen,
                                   "impostor's blob"), 1);
    }
    char why[600];
    for (int i = 0; i < 4; i++) {
        int code = read_refusal(fds[i], why, sizeof why);
        if (code != bad[i].code || !strstr(why, bad[i].names1) || !strstr(why, bad[i].names2))
            fail_msg("hello %d (rank %d of %d, job %s, generation %llu): answered %d '%s', not "
                     "%s naming %s and %s", i, bad[i].rank, bad[i].world, bad[i].job,
                     (unsigned long long)bad[i].gen, code, code < 0 ? why : "",
                     ftc_errname(bad[i].code), bad[i].names1, bad[i].names2);
    }
    pid_t r2 = fork_rank(port, 2, 3, "jobA", 1, 0, NULL, NULL);
    expect_exit0(r2, "the real rank 2");
    expect_exit0(r1, "the real rank 1 (displaced by a refused hello?)");
    expect_exit0(r0, "rank 0");
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

#define SLOW_WORLD 20

/* rank q's blob in test_rendezvous_slow_rank_stalls_no_other: 1024 bytes */
static void slow_blob(int q, uint8_t *b)
{
    for (int i = 0; i < FTC_DIST_BLOB_MAX; i++)
        b[i] = (uint8_t)(q * 31 + i);
}

static void test_rendezvous_slow_rank_stalls_no_other(void **state)
{
    (void)state;
    /* rank 0 of 20 (in a child, its sockets' send buffers shrunk with
     * FTC_TEST_RDZV_SNDBUF) and ranks 1..19 as raw connections with 1024-byte
     * blobs: the answer (~20 KiB) does not fit rank 1's buffers, and rank 1
     * never reads it. Ranks 2..19 must still get the whole table (sent one
     * rank after another, they waited behind rank 1 until rank 0's deadline
     * and got nothing); rank 0 then fails naming rank 1. */
    int port = free_port();
    fflush(stdout), fflush(stderr);
    pid_t r0 = fork();
    assert_true(r0 >= 0);
    if (r0 == 0) {
        setenv("FTC_TEST_RDZV_SNDBUF", "2048", 1);
        uint8_t *table = calloc(SLOW_WORLD, FTC_DIST_BLOB_MAX), blob[FTC_DIST_BLOB_MAX];
        size_t lens[SLOW_WORLD];
        slow_blob(0, blob);
        ftc_dist_rdzv_opts_t ro = FTC_DIST_RDZV_OPTS_INIT;
        ro.host = "127.0.0.1", ro.port = port, ro.rank = 0, ro.world = SLOW_WORLD;
        ftc_err_t e = {0};
        int rc = ftc_dist_rendezvous_tcp(&ro, blob, sizeof blob, table, lens,
                                         ftc_deadline_in_ms(5000), &e);
        fprintf(stderr, "rank 0: rc %d: %s\n", rc, e.msg);
        _exit(rc == FTC_ETIMEDOUT && strstr(e.msg, "rank 1 ") ? 0 : 1);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    int fds[SLOW_WORLD];
    uint8_t hb[FTC__DIST_HELLO_MAX], blob[FTC_DIST_BLOB_MAX + 1];
    for (int r = 1; r < SLOW_WORLD; r++) {
        for (int i = 0;; i++) { /* until rank 0 listens */
            fds[r] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            assert_true(fds[r] >= 0);
            int small = 1024; /* rank 1: a small window, set before the handshake */
            if (r == 1)
                assert_int_equal(setsockopt(fds[r], SOL_SOCKET, SO_RCVBUF, &small, sizeof small),
                                 0);
            if (connect(fds[r], (struct sockaddr *)&sa, sizeof sa) == 0)
                break;
            close(fds[r]);
            if (i == 3000)
                fail_msg("nobody listened on 127.0.0.1:%d within 30 s", port);
            ftc_sleep_ms(10);
        }
        slow_blob(r, blob);
        blob[FTC_DIST_BLOB_MAX] = 0;
        ftc__dist_hello_t h = {.rank = (uint32_t)r, .world = SLOW_WORLD, .blob = blob,
                               .bloblen = FTC_DIST_BLOB_MAX};
        size_t n = ftc__dist_hello_encode(&h, hb, sizeof hb);
        assert_true(n > 0);
        io_exact(fds[r], hb, n, 1);
    }
    /* read ranks 2..19's answers side by side; rank 1's is never read */
    const size_t alen = 4 + SLOW_WORLD * (4 + FTC_DIST_BLOB_MAX);
    uint8_t *got[SLOW_WORLD] = {0};
    size_t have[SLOW_WORLD] = {0};
    int open_ = SLOW_WORLD - 2;
    for (int r = 2; r < SLOW_WORLD; r++) {
        got[r] = malloc(alen);
        assert_non_null(got[r]);
    }
    uint64_t t0 = ftc_now_ns();
    while (open_ > 0 && ftc_now_ns() - t0 < 30ull * 1000000000ull) { /* backstop */
        struct pollfd pf[SLOW_WORLD];
        int pr[SLOW_WORLD], np = 0;
        for (int r = 2; r < SLOW_WORLD; r++)
            if (have[r] < alen && fds[r] >= 0)
                pr[np] = r, pf[np++] = (struct pollfd){fds[r], POLLIN, 0};
        if (poll(pf, (nfds_t)np, 100) <= 0)
            continue;
        for (int j = 0; j < np; j++) {
            if (!pf[j].revents)
                continue;
            int r = pr[j];
            ssize_t k = recv(fds[r], got[r] + have[r], alen - have[r], 0);
            if (k <= 0) { /* closed before the whole answer */
                close(fds[r]);
                fds[r] = -1;
                open_--;
                continue;
            }
            have[r] += (size_t)k;
            open_ -= have[r] == alen;
        }
    }
    int st = wait_child(r0, 60);
    for (int r = 1; r < SLOW_WORLD; r++)
        if (fds[r] >= 0)
            close(fds[r]);
    for (int r = 2; r < SLOW_WORLD; r++) {
        if (have[r] != alen)
            fail_msg("rank %d got %zu of the %zu bytes of its answer (held up behind rank 1, "
                     "which does not read?)", r, have[r], alen);
        const uint8_t *a = got[r];
        assert_int_equal(a[0] | a[1] | a[2] | a[3], 0); /* status: the table follows */
        for (int q = 0; q < SLOW_WORLD; q++) {
            const uint8_t *e = a + 4 + (size_t)q * (4 + FTC_DIST_BLOB_MAX);
            slow_blob(q, blob);
            if (e[0] != (FTC_DIST_BLOB_MAX & 0xff) || e[1] != FTC_DIST_BLOB_MAX >> 8 || e[2] ||
                e[3] || memcmp(e + 4, blob, FTC_DIST_BLOB_MAX))
                fail_msg("rank %d: the table's entry for rank %d is wrong", r, q);
        }
        free(got[r]);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("rank 0: status 0x%x (not FTC_ETIMEDOUT naming rank 1?)", st);
}

static atomic_int nccl_abort;

static void *set_abort_later(void *arg)
{
    (void)arg;
    ftc_sleep_ms(200);
    atomic_store(&nccl_abort, 1);
    return NULL;
}

static void test_nccl_tcp_join_honours_abort(void **state)
{
    (void)state;
    /* rank 1 of a --coll nccl job over the TCP rendezvous (it makes no NCCL
     * id, so this runs without NCCL); rank 0 never comes, and the abort is
     * raised while rank 1 waits for it: the join must end FTC_ECANCELED, not
     * run on to its deadline (FTC_ETIMEDOUT) */
    int port = free_port();
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pthread_t th;
        if (pthread_create(&th, NULL, set_abort_later, NULL))
            _exit(2);
        ftc_dist_opts_t o = {.world = 2, .tp = 1, .rank = 1, .host = "127.0.0.1", .port = port,
                             .timeout_ms = 5000, .abort = &nccl_abort,
                             .coll = FTC_DIST_COLL_NCCL};
        ftc_dist_t *d = NULL;
        ftc_err_t e = {0};
        int rc = ftc_dist_join(&o, &d, &e);
        fprintf(stderr, "rank 1: rc %d: %s\n", rc, e.msg);
        pthread_join(th, NULL);
        ftc_dist_destroy(d);
        _exit(rc == FTC_ECANCELED ? 0 : 1);
    }
    int st = wait_child(pid, 60);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) != 0)
        fail_msg("the aborted --coll nccl join did not end FTC_ECANCELED (status %d)",
                 WEXITSTATUS(st));
}

static void test_rendezvous_dp2_tp2(void **state)
{
    (void)state;
    /* a free port: bind to 0, read it, close (rank 0 binds it again) */
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ls >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    close(ls);
    pid_t pids[4];
    for (int r = 0; r < 4; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            ftc_dist_opts_t o = {.world = 4, .tp = 2, .rank = r, .host = "127.0.0.1",
                                 .port = ntohs(sa.sin_port), .timeout_ms = 30000};
            ftc_dist_t *d = NULL;
            ftc_err_t e = {0};
            if (ftc_dist_join(&o, &d, &e) < 0) {
                fprintf(stderr, "rank %d: %s\n", r, e.msg);
                _exit(1);
            }
            int bad = !d->dp || !d->tp || ftc_coll_size(d->dp) != 2 || ftc_coll_size(d->tp) != 2;
            for (int g = 0; g < 2 && !bad; g++) {
                ftc_coll_t *c = g ? d->tp : d->dp;
                /* each rank adds its global rank: DP groups {0,2} {1,3}, TP {0,1} {2,3} */
                float v = (float)r;
                ftc_deadline_t dl = ftc_deadline_in_ms(30000);
                if (ftc_coll_barrier(c, dl) < 0 || ftc_coll_all_reduce(c, &v, 1, FTC_COLL_F32,
                                                                       dl) < 0) {
                    fprintf(stderr, "rank %d: %s\n", r, ftc_coll_errmsg(c));
                    bad = 1;
                    break;
                }
                float want = g ? (float)(r / 2 * 4 + 1) : (float)(r % 2 * 2 + 2);
                if (v != want) {
                    fprintf(stderr, "rank %d group %d: sum %g, want %g\n", r, g, (double)v,
                            (double)want);
                    bad = 1;
                }
            }
            ftc_dist_destroy(d);
            _exit(bad);
        }
    }
    for (int r = 0; r < 4; r++) {
        int st = wait_child(pids[r], 120);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("rank %d: status 0x%x", r, st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchange_timeout_closes_endpoint),
        cmocka_unit_test(test_rendezvous_connect_deadline),
        cmocka_unit_test(test_rendezvous_malformed_blob),
        cmocka_unit_test(test_rendezvous_dp2_tp2),
        cmocka_unit_test(test_rendezvous_stray_connections),
        cmocka_unit_test(test_nccl_tcp_join_honours_abort),
        cmocka_unit_test(test_rendezvous_foreign_job),
        cmocka_unit_test(test_rendezvous_stale_generation),
        cmocka_unit_test(test_rendezvous_rank0_catches_up),
        cmocka_unit_test(test_rendezvous_refused_rank_takes_no_slot),
        cmocka_unit_test(test_rendezvous_slow_rank_stalls_no_other),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
