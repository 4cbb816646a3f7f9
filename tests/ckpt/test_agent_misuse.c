/*
 * test_agent_misuse.c — a rank that misuses the local protocol
 * (ckpt/agent_proto.h) against a real `ftc agent` process and a real Redis;
 * the rank side is either libftc in this process or raw messages on the
 * agent's Unix socket:
 *   - BEGINs the rank never writes (a checkpoint that failed after its
 *     BEGIN_OK, a late BEGIN_OK the rank gave up on) do not keep their slots:
 *     the next BEGIN still gets one; truncated and oversized messages close
 *     that connection only; libftc refuses metadata larger than its capacity
 *     before it asks the agent for a slot;
 *   - SLOTS of a size /dev/shm cannot hold: FTC_ENOSPC naming the size; a
 *     RESTORE after it is refused cleanly (it crashed the agent), and the
 *     rank's committed shard is still restored after a SLOTS that fits;
 *   - a checkpoint of a step not after the committed one (steps that went
 *     back, or repeat) is skipped (FTC_EAGAIN) rather than marked committed
 *     unrecorded, and a restore returns the version the record holds.
 *   - the agent killed mid-checkpoint: no call waits without end, each
 *     fails with a message of its own (not a stale one), and the restarted
 *     agent restores the previous committed step intact;
 *   - ftc_restore while a snapshot is being copied: the snapshot holds the
 *     tensors of its ftc_checkpoint call, not a mix with the restored ones;
 *   - a restore that fetches while the rank's other slots hold sealed
 *     versions: it lands in the corrupt committed slot, the sealed ones
 *     stay (and commit);
 *   - two steps that will not commit: ftc_wait_committed of either says so
 *     (FTC_EIO, the agent's reason), not only of the newest;
 *   - a rank back with another layout while its previous version still
 *     replicates: SLOTS waits for the push (it crashed the agent);
 *   - a replacement node's restore (fresh slots, the shard fetched from a
 *     peer): the second slot is reserved in the background (held here), so
 *     the agent answers the rank's next request before that slot is
 *     reserved (it reserved it first, keeping its thread from the node's
 *     other ranks), and a BEGIN into it reserves it then;
 *   - an agent restarted on a node whose shm holds its replicas adopts them
 *     at its start (the replica a replacement node's restore asks for was
 *     hashed at the first GET, which the restore waited for), and serves
 *     them;
 *   - a restore whose metadata buffer is too small: FTC_ERANGE with the
 *     tensors untouched (they were overwritten first);
 *   - ftc_create against a stopped agent whose listen backlog is full ends
 *     with FTC_ETIMEDOUT (connect blocked for ever);
 *   - a rank of another protocol version (another ftc build): the agent
 *     answers its HELLO with an ERROR naming both versions and what to do,
 *     in a message that rank can read (same size, version where it was),
 *     then closes the connection; a rank reading a message of another
 *     version says the same (it said "a message of N bytes").
 *   - a HELLO as a second rank on a rank's connection: refused, the
 *     connection stays the first rank's (both shared it, fd and all).
 *   - a rank that sends requests and reads none of the answers: its
 *     requests wait until it reads, none is lost (each answer blocked
 *     the agent's loop for a second, then was dropped); the messages it is
 *     owed past the point where the agent stops reading it (a second
 *     answer, a notice) are sent without waiting, none lost, the node's
 *     other rank served meanwhile (such a message held the loop a second
 *     and was dropped); on a socket with no room at all, the agent's send
 *     shuts the connection down (its peer reads what was sent, then the
 *     end), never waits.
 * No wall-clock bound is asserted: a lost slot shows as a BEGIN that gets no
 * answer within the test's receive deadline.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ckpt/agent_internal.h"
#include "ckpt/agent_proto.h"
#include "ckpt/slot.h"
#include "ftc.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

static int raw_connect(env_t *e, int node)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/agent.%d.sock", e->jobdir, node);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* A context of options o with tensor "w": n floats at w, on the host. */
static ftc_ctx_t *ctx_with_w(const ftc_options_t *o, float *w, int64_t n)
{
    ftc_ctx_t *c = NULL;
    assert_int_equal(ftc_create(o, &c), 0);
    register_w(c, w, n);
    return c;
}

/* Sends m and receives the next message into rep (deadline ms): 0 or the
 * receive's error (FTC_ETIMEDOUT: no answer, FTC_EIO: connection closed). */
static int raw_call(int fd, const ftc_ap_msg_t *m, ftc_ap_msg_t *rep, int ms)
{
    ftc_err_t err = {0};
    int rc = ftc_ap_send(fd, m, 2000, &err);
    if (!rc)
        rc = ftc_ap_recv(fd, rep, ms, &err);
    if (rc)
        print_message("raw call type %u: %s\n", m->type, err.msg);
    else if (rep->type == FTC_AP_ERROR)
        print_message("agent: %s (%s)\n", rep->text, ftc_errname(rep->status));
    return rc;
}

static int raw_hello(env_t *e, int rank, int world)
{
    int fd = raw_connect(e, 0);
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_HELLO);
    snprintf(m.job, sizeof m.job, "%s", e->job);
    m.rank = (uint32_t)rank;
    m.world = (uint32_t)world;
    m.dp = (uint32_t)world, m.tp = m.pp = 1;
    m.dp_rank = (uint32_t)rank;
    m.pid = (int32_t)getpid();
    assert_int_equal(raw_call(fd, &m, &rep, 5000), 0);
    assert_int_equal(rep.type, FTC_AP_WELCOME);
    return fd;
}

static ftc_ap_msg_t raw_slots(int fd, uint64_t size)
{
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_SLOTS);
    m.size = size;
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    return rep;
}

static void assert_agent_alive(env_t *e, int i)
{
    int st;
    pid_t w = waitpid(e->agent[i], &st, WNOHANG);
    if (w == e->agent[i]) {
        e->agent[i] = 0;
        char log[PATH_MAX + 32];
        snprintf(log, sizeof log, "%s/agent%d.log", e->jobdir, i);
        uint8_t *buf;
        size_t len;
        ftc_err_t err = {0};
        if (ftc_fs_read_file(log, 1 << 22, &buf, &len, &err) == 0) {
            size_t from = len > 3000 ? len - 3000 : 0;
            print_message("%s (end):\n%.*s\n", log, (int)(len - from), (char *)buf + from);
            free(buf);
        }
        fail_msg("agent %d died (status 0x%x)", i, st);
    }
}

static void test_unused_begins_keep_no_slot(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    int fd = raw_hello(e, 0, 1);
    ftc_ap_msg_t rep = raw_slots(fd, 1 << 16);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    /* three BEGINs whose snapshots never happen (the rank failed after each
     * BEGIN_OK, or had given up waiting for it), then one more: a rank
     * writes one snapshot at a time, so the slot of an earlier BEGIN that
     * was never SEALED is free again */
    for (uint64_t step = 0; step < 6; step++) {
        ftc_ap_msg_t m;
        ftc_ap_init(&m, FTC_AP_BEGIN);
        m.step = step;
        assert_int_equal(raw_call(fd, &m, &rep, 5000), 0);
        assert_int_equal(rep.type, FTC_AP_BEGIN_OK);
        assert_int_equal(rep.step, step);
    }
    /* a truncated and an oversized message: that connection is closed (the
     * agent lives on and serves the next one) */
    char shortmsg[10] = "FTCA";
    assert_int_equal(send(fd, shortmsg, sizeof shortmsg, MSG_NOSIGNAL), (ssize_t)sizeof shortmsg);
    ftc_err_t err = {0};
    assert_int_equal(ftc_ap_recv(fd, &rep, 5000, &err), FTC_EIO);
    close(fd);
    fd = raw_hello(e, 0, 1);
    static uint8_t big[sizeof(ftc_ap_msg_t) + 4096];
    ftc_ap_init((ftc_ap_msg_t *)big, FTC_AP_BEGIN);
    assert_int_equal(send(fd, big, sizeof big, MSG_NOSIGNAL), (ssize_t)sizeof big);
    assert_int_equal(ftc_ap_recv(fd, &rep, 5000, &err), FTC_EIO);
    close(fd);
    assert_agent_alive(e, 0);

    /* libftc: metadata over the context's capacity is refused before the
     * agent hands out a slot, and checkpoints go on */
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.meta_capacity = 64;
    o.timeout_ms = 5000;
    static float w[4096];
    ftc_ctx_t *c = ctx_with_w(&o, w, 4096);
    static char meta[256];
    for (int64_t step = 0; step < 3; step++) {
        assert_int_equal(ftc_checkpoint(c, step, meta, sizeof meta), FTC_ERANGE);
        print_message("%s\n", ftc_last_error(c));
        assert_non_null(strstr(ftc_last_error(c), "256"));
    }
    assert_int_equal(ftc_checkpoint(c, 3, meta, 64), 0);
    assert_int_equal(ftc_wait_committed(c, 3), 0);
    ftc_destroy(c);
    teardown_env(e);
}

static void test_refused_slots_then_restore(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    /* step 0 committed by libftc */
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    static float w[4096];
    for (int i = 0; i < 4096; i++)
        w[i] = (float)i;
    ftc_ctx_t *c = ctx_with_w(&o, w, 4096);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    ftc_destroy(c);
    char slot0[PATH_MAX];
    snprintf(slot0, sizeof slot0, "/dev/shm/ftc.%s.n0.r0.s0", e->job);
    struct stat st;
    assert_int_equal(stat(slot0, &st), 0);
    uint64_t size = (uint64_t)st.st_size;

    int fd = raw_hello(e, 0, 1);
    ftc_ap_msg_t rep = raw_slots(fd, size);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    /* a new layout far beyond /dev/shm: refused up front, naming the size */
    rep = raw_slots(fd, 1ull << 60);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_int_equal(rep.status, FTC_ENOSPC);
    assert_non_null(strstr(rep.text, "1152921504606846976"));
    assert_non_null(strstr(rep.text, "/dev/shm"));
    /* ... as is one whose three slots overflow 64 bits together */
    rep = raw_slots(fd, UINT64_MAX / 3 + 2);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_int_equal(rep.status, FTC_ENOSPC);
    /* the rank has no slots now: a RESTORE is refused (it wrote into the
     * closed slots' NULL mappings and killed the agent) */
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_RESTORE);
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_int_equal(rep.status, FTC_EINVAL);
    assert_non_null(strstr(rep.text, "SLOTS"));
    ftc_ap_init(&m, FTC_AP_BEGIN);
    assert_int_equal(raw_call(fd, &m, &rep, 5000), 0);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_agent_alive(e, 0);
    /* back at the old size: step 0 is still restored (kept under the
     * previous layout's names), verified */
    rep = raw_slots(fd, size);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    ftc_ap_init(&m, FTC_AP_RESTORE);
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    assert_int_equal(rep.type, FTC_AP_RESTORE_OK);
    assert_int_equal(rep.step, 0);
    ftc_slot_t sl;
    ftc_err_t err = {0};
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.%s.n0.r0.s%u", e->job, rep.slot);
    assert_int_equal(ftc_slot_open(name, false, &sl, &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, sl.base, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.info.step, 0);
    ftc_slot_close(&sl);
    close(fd);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

static void fill(float *w, int n, float v)
{
    for (int i = 0; i < n; i++)
        w[i] = v;
}

/* Steps that go back (ranks that took an older committed step with
 * ftc_fetch, a persist tier that lags the commits) or repeat: a checkpoint
 * of a step not after the job's committed one can never be recorded (the
 * commit record never goes backwards), yet the agent marked such versions
 * committed, and a restore could then return one instead of the version
 * the record holds (I1). */
static void test_step_not_after_committed(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 10000;
    enum { N = 4096 };
    static float w[N];
    ftc_ctx_t *c = ctx_with_w(&o, w, N);
    for (int64_t step = 0; step < 4; step++) {
        fill(w, N, (float)step);
        assert_int_equal(ftc_checkpoint(c, step, NULL, 0), 0);
        assert_int_equal(ftc_wait_committed(c, step), 0);
    }
    /* back to step 2 (its state fetched, say): step 3 again, with other
     * values (in the slot after the committed one's: the first a restore
     * looks at) */
    for (int64_t step = 3; step < 4; step++) {
        fill(w, N, 100.0f + (float)step);
        int rc = ftc_checkpoint(c, step, NULL, 0);
        print_message("checkpoint of step %lld again: %s (%s)\n", (long long)step,
                      ftc_errname(rc), ftc_last_error(c));
        assert_int_equal(rc, FTC_EAGAIN);
        assert_non_null(strstr(ftc_last_error(c), "committed step 3"));
        assert_int_equal(ftc_wait_snapshot(c), 0);
        assert_int_equal(ftc_wait_committed(c, step), 0); /* step 3 is */
    }
    /* the restore (a new context: the old one's snapshots all announced)
     * returns what the commit record holds */
    ftc_destroy(c);
    c = ctx_with_w(&o, w, N);
    fill(w, N, -1.0f);
    int64_t got = -1;
    assert_int_equal(ftc_restore(c, &got, NULL, NULL), 0);
    assert_int_equal(got, 3);
    print_message("restored step %lld: w = %g\n", (long long)got, w[0]);
    assert_true(w[0] == 3.0f && w[N - 1] == 3.0f);
    /* the same step twice in a row: the second is not checkpointed */
    fill(w, N, 4.0f);
    assert_int_equal(ftc_checkpoint(c, 4, NULL, 0), 0);
    fill(w, N, 104.0f);
    assert_int_equal(ftc_checkpoint(c, 4, NULL, 0), FTC_EAGAIN);
    print_message("%s\n", ftc_last_error(c));
    assert_int_equal(ftc_wait_committed(c, 4), 0);
    fill(w, N, 5.0f);
    assert_int_equal(ftc_checkpoint(c, 5, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 5), 0);
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.committed, 5);
    assert_int_equal(st.skipped, 1); /* this context's: step 4 again */
    fill(w, N, -1.0f);
    assert_int_equal(ftc_restore(c, &got, NULL, NULL), 0);
    assert_int_equal(got, 5);
    assert_true(w[0] == 5.0f && w[N - 1] == 5.0f);
    ftc_destroy(c);
    teardown_env(e);
}

/* A frozen agent (SIGSTOP) accepts no connection: once its listen backlog
 * (64) is full, connect() on its socket blocked for ever, so ranks that
 * retried ftc_create against it hung in the 65th call (I6). Each call must
 * end with an error after the context's timeout. The calls run in a child
 * that the test waits for with a deadline. */
static void test_create_against_frozen_agent(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 100;
    kill(e->agent[0], SIGSTOP);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 80; i++) {
            ftc_ctx_t *c = NULL;
            int rc = ftc_create(&o, &c);
            if (rc != FTC_ETIMEDOUT) {
                fprintf(stderr, "call %d: %s (%s)\n", i, ftc_errname(rc), ftc_last_error(c));
                _exit(1);
            }
            if (i == 79)
                fprintf(stderr, "call %d: %s\n", i, ftc_last_error(c));
            ftc_destroy(c);
        }
        _exit(0);
    }
    int st = 0;
    ftc_deadline_t d = ftc_deadline_in_ms(40000);
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (ftc_deadline_expired(d)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            kill(e->agent[0], SIGCONT);
            fail_msg("ftc_create against a frozen agent did not return");
        }
        ftc_sleep_ms(20);
    }
    kill(e->agent[0], SIGCONT);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* thawed, it serves again */
    o.timeout_ms = 10000;
    ftc_ctx_t *c = NULL;
    int rc = ftc_create(&o, &c);
    if (rc)
        print_message("%s\n", ftc_last_error(c));
    assert_int_equal(rc, 0);
    ftc_destroy(c);
    teardown_env(e);
}

/* The agent killed (SIGKILL) while a snapshot is being copied: nothing
 * waits without end, the calls that need the agent fail with their own
 * error and a message about it (not a stale one: the failure to hand the
 * sealed snapshot to the agent left ftc_last_error as it was), and the
 * restarted agent restores the previous committed step, intact (I3). */
static void test_agent_killed_mid_checkpoint(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 5000;
    enum { N = 16 << 20 }; /* 64 MiB: the copy and its hashing outlast the kill */
    float *w = malloc((size_t)N * sizeof *w);
    assert_non_null(w);
    ftc_ctx_t *c = ctx_with_w(&o, w, N);
    fill(w, N, 1.0f);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    assert_int_equal(ftc_checkpoint(c, -1, NULL, 0), FTC_EINVAL);
    char stale[512];
    snprintf(stale, sizeof stale, "%s", ftc_last_error(c));
    fill(w, N, 2.0f);
    assert_int_equal(ftc_checkpoint(c, 1, NULL, 0), 0);
    kill_agent(e, 0);
    assert_int_equal(ftc_wait_snapshot(c), 0); /* the copy itself needs no agent */
    int rc = ftc_wait_committed(c, 1);
    print_message("ftc_wait_committed: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_true(rc < 0);
    assert_string_not_equal(ftc_last_error(c), stale);
    assert_true(ftc_last_error(c)[0] != 0);
    rc = ftc_checkpoint(c, 2, NULL, 0);
    print_message("ftc_checkpoint: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_true(rc < 0);
    ftc_destroy(c);
    /* the agent again: step 0 as it was committed */
    start_agent(e, 0);
    c = ctx_with_w(&o, w, N);
    fill(w, N, -1.0f);
    int64_t got = -1;
    rc = ftc_restore(c, &got, NULL, NULL);
    if (rc)
        print_message("%s\n", ftc_last_error(c));
    assert_int_equal(rc, 0);
    assert_int_equal(got, 0);
    assert_true(w[0] == 1.0f && w[N - 1] == 1.0f);
    ftc_destroy(c);
    free(w);
    teardown_env(e);
}

static uint64_t count_not(const float *w, uint64_t n, float v)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += w[i] != v;
    return bad;
}

/* ftc_restore while the previous checkpoint's copy is still running: the
 * restore wrote the tensors under the copy, which then sealed (and
 * committed) a mix of the two states with checksums that verify. The
 * snapshot must hold exactly the tensors of its ftc_checkpoint call. */
static void test_restore_during_snapshot(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.threads = 1; /* a long copy */
    enum { N = 32 << 20 }; /* 128 MiB */
    float *w = malloc((size_t)N * sizeof *w);
    assert_non_null(w);
    ftc_ctx_t *c = ctx_with_w(&o, w, N);
    fill(w, N, 1.0f);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    fill(w, N, 2.0f);
    assert_int_equal(ftc_checkpoint(c, 1, NULL, 0), 0);
    int64_t got = -1;
    assert_int_equal(ftc_restore(c, &got, NULL, NULL), 0); /* 0, or 1 if it committed first */
    print_message("restored step %lld during the snapshot of step 1\n", (long long)got);
    assert_true(got == 0 || got == 1);
    assert_int_equal(count_not(w, N, got == 0 ? 1.0f : 2.0f), 0);
    assert_int_equal(ftc_wait_committed(c, 1), 0);
    ftc_destroy(c);
    /* step 1 as it was checkpointed */
    c = ctx_with_w(&o, w, N);
    fill(w, N, -1.0f);
    assert_int_equal(ftc_restore(c, &got, NULL, NULL), 0);
    assert_int_equal(got, 1);
    uint64_t bad = count_not(w, N, 2.0f);
    print_message("step 1: %llu of %d values are not the checkpointed ones\n",
                  (unsigned long long)bad, N);
    assert_int_equal(bad, 0);
    ftc_destroy(c);
    free(w);
    teardown_env(e);
}

/* Flips one byte in the middle of the payload of rank 0's slot on node 0
 * that holds `step`; returns its index, -1 if none does. */
static int corrupt_slot_of_step(env_t *e, uint64_t step)
{
    ftc_slot_t sl;
    ftc_shard_view_t v;
    int k = open_rank0_slot_of_step(e, step, &sl, &v);
    if (k >= 0) {
        sl.base[sl.size - sl.size / 4] ^= 0x40;
        ftc_slot_close(&sl);
    }
    return k;
}

/* A restore that must fetch (the rank's committed slot is corrupt) while
 * the rank's two other slots hold sealed versions waiting for their commit
 * (the other rank has not checkpointed them yet): the fetched shard went
 * into the first slot that was not pinned, a sealed version the commit
 * record already had the report of, so that version was gone from the node
 * (and its commit never reached the rank). It belongs in the corrupt slot. */
static void test_restore_keeps_sealed_slots(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    char s0[PATH_MAX + 32], s1[PATH_MAX + 32];
    ftc_options_t o0 = ctx_options(e, 0, 0, 2, s0, sizeof s0);
    ftc_options_t o1 = ctx_options(e, 1, 1, 2, s1, sizeof s1);
    o0.timeout_ms = o1.timeout_ms = 8000;
    enum { N = 1 << 16 };
    static float w0[N], w1[N];
    ftc_ctx_t *c0 = ctx_with_w(&o0, w0, N);
    ftc_ctx_t *c1 = ctx_with_w(&o1, w1, N);
    for (int64_t step = 0; step < 4; step++) {
        fill(w0, N, (float)step);
        fill(w1, N, (float)step);
        assert_int_equal(ftc_checkpoint(c0, step, NULL, 0), 0);
        assert_int_equal(ftc_checkpoint(c1, step, NULL, 0), 0);
        assert_int_equal(ftc_wait_committed(c0, step), 0);
        assert_int_equal(ftc_wait_committed(c1, step), 0);
    }
    /* rank 0 runs ahead: steps 4 and 5 sealed, not committed */
    for (int64_t step = 4; step < 6; step++) {
        fill(w0, N, (float)step);
        assert_int_equal(ftc_checkpoint(c0, step, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c0), 0);
    }
    int bad = corrupt_slot_of_step(e, 3);
    assert_true(bad >= 0);
    fill(w0, N, -1.0f);
    int64_t got = -1;
    int rc = ftc_restore(c0, &got, NULL, NULL);
    if (rc)
        print_message("%s\n", ftc_last_error(c0));
    assert_int_equal(rc, 0);
    assert_int_equal(got, 3);
    assert_int_equal(count_not(w0, N, 3.0f), 0);
    /* rank 1 checkpoints step 4: it commits, and rank 0's version of it is
     * still on its node */
    fill(w1, N, 4.0f);
    assert_int_equal(ftc_checkpoint(c1, 4, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c1, 4), 0);
    rc = ftc_wait_committed(c0, 4);
    print_message("rank 0 waits for step 4: %s (%s)\n", ftc_errname(rc),
                  rc ? ftc_last_error(c0) : "");
    assert_int_equal(rc, 0);
    ftc_destroy(c0);
    ftc_destroy(c1);
    teardown_env(e);
}

/* Two steps that will not commit (the only replica peer is gone):
 * ftc_wait_committed of the older one must say so (FTC_EIO with the
 * agent's reason) like the newer one's, not wait out its deadline because
 * the newer failure replaced the older one's record. */
static void test_wait_committed_older_failure(void **state)
{
    env_t *e = prepare_env(*state, 2, "1", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "2000");
    start_agent(e, 0);
    start_agent(e, 1);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 2, sock, sizeof sock);
    o.timeout_ms = 15000;
    enum { N = 1 << 14 };
    static float w[N];
    ftc_ctx_t *c = ctx_with_w(&o, w, N);
    kill_agent(e, 1); /* the replica peer of node 0 */
    for (int64_t step = 0; step < 2; step++) {
        fill(w, N, (float)step);
        assert_int_equal(ftc_checkpoint(c, step, NULL, 0), 0);
        assert_int_equal(ftc_wait_snapshot(c), 0);
    }
    int rc = ftc_wait_committed(c, 1);
    print_message("step 1: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_EIO);
    rc = ftc_wait_committed(c, 0);
    print_message("step 0: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c), "step 0"));
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.failed, 1);
    ftc_destroy(c);
    teardown_env(e);
}

/* A rank that comes back with another layout (a shard of another size)
 * while its previous version is still being replicated: the agent unmapped
 * the old slots under the replication thread, which read the shard there
 * and died (SIGSEGV in ftc_shard_open of the push). */
static void test_layout_change_during_push(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 2, sock, sizeof sock);
    o.timeout_ms = 20000;
    for (int round = 0; round < 4; round++) {
        int64_t n = (round % 2 ? 8 : 16) << 20; /* 32 or 64 MiB: a push that takes a while */
        float *w = calloc((size_t)n, sizeof *w);
        assert_non_null(w);
        ftc_ctx_t *c = ctx_with_w(&o, w, n);
        int rc = ftc_checkpoint(c, round, NULL, 0);
        if (rc)
            print_message("round %d: %s\n", round, ftc_last_error(c));
        assert_int_equal(rc, 0);
        ftc_destroy(c); /* its snapshot handed to the agent: replicating */
        free(w);
        assert_agent_alive(e, 0);
    }
    /* the last push done, and the agent still there */
    static float small[16];
    ftc_ctx_t *c = ctx_with_w(&o, small, 16);
    assert_int_equal(ftc_checkpoint(c, 4, NULL, 0), 0);
    ftc_destroy(c);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

/* A restore whose metadata buffer is too small: FTC_ERANGE, but only after
 * it had overwritten the tensors, so a trainer taking the error for "no
 * checkpoint" went on from the restored weights; and a NULL meta with a
 * capacity crashed. The tensors must be untouched by a refused restore. */
static void test_restore_meta_too_small(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    enum { N = 4096 };
    static float w[N];
    ftc_ctx_t *c = ctx_with_w(&o, w, N);
    fill(w, N, 7.0f);
    char meta[32];
    memset(meta, 'm', sizeof meta);
    assert_int_equal(ftc_checkpoint(c, 0, meta, sizeof meta), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    fill(w, N, -1.0f);
    int64_t got = -1;
    char small[8];
    size_t len = sizeof small;
    assert_int_equal(ftc_restore(c, &got, small, &len), FTC_ERANGE);
    print_message("%s\n", ftc_last_error(c));
    assert_non_null(strstr(ftc_last_error(c), "32"));
    assert_int_equal(count_not(w, N, -1.0f), 0); /* untouched */
    len = 8;
    assert_int_equal(ftc_restore(c, &got, NULL, &len), FTC_EINVAL);
    assert_int_equal(count_not(w, N, -1.0f), 0);
    char big[64];
    len = sizeof big;
    assert_int_equal(ftc_restore(c, &got, big, &len), 0);
    assert_int_equal(got, 0);
    assert_int_equal(len, 32);
    assert_memory_equal(big, meta, 32);
    assert_int_equal(count_not(w, N, 7.0f), 0);
    ftc_destroy(c);
    teardown_env(e);
}

/* A rank of protocol version 3 (the message had the same size and the
 * version at the same offset; no request id): the agent's answer to its
 * HELLO names both versions and what to do, and the connection closes. The
 * rank's side of the check (ftc_ap_check, the same code in libftc) names
 * both versions of a message of another version, newer or older. */
static void test_other_protocol_version(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    int fd = raw_connect(e, 0);
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_HELLO);
    m.version = FTC_AP_VERSION - 1;
    snprintf(m.job, sizeof m.job, "%s", e->job);
    m.world = 1, m.dp = 1, m.tp = m.pp = 1;
    m.pid = (int32_t)getpid();
    assert_int_equal(raw_call(fd, &m, &rep, 5000), 0);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_int_equal(rep.status, FTC_EPROTO);
    char want[96];
    snprintf(want, sizeof want, "agent protocol version %d on the other side, %d on this one",
             FTC_AP_VERSION - 1, FTC_AP_VERSION);
    assert_non_null(strstr(rep.text, want));
    assert_non_null(strstr(rep.text, "same build"));
    ftc_err_t err = {0};
    assert_int_equal(ftc_ap_recv(fd, &rep, 5000, &err), FTC_EIO); /* closed */
    close(fd);
    assert_true(agent_said(e, 0, want));
    assert_agent_alive(e, 0);
    /* the rank's side: a message of version 5 or 3 */
    for (int d = -1; d <= 1; d += 2) {
        ftc_ap_init(&m, FTC_AP_WELCOME);
        m.version = (uint16_t)(FTC_AP_VERSION + d);
        err = (ftc_err_t){0};
        assert_int_equal(ftc_ap_check(&m, sizeof m, &err), FTC_EPROTO);
        print_message("%s\n", err.msg);
        snprintf(want, sizeof want, "agent protocol version %d on the other side, %d on this one",
                 FTC_AP_VERSION + d, FTC_AP_VERSION);
        assert_non_null(strstr(err.msg, want));
    }
    /* and a rank of this version is served as before */
    fd = raw_hello(e, 0, 1);
    close(fd);
    teardown_env(e);
}

/* Commits step 0 of a world of 2 (rank r on node r, N floats of r + 1). */
static uint64_t commit_two(env_t *e, float (*w)[1 << 18])
{
    ftc_ctx_t *c[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        char sock[PATH_MAX + 32];
        ftc_options_t o = ctx_options(e, r, r, 2, sock, sizeof sock);
        fill(w[r], 1 << 18, (float)r + 1);
        c[r] = ctx_with_w(&o, w[r], 1 << 18);
        assert_int_equal(ftc_checkpoint(c[r], 0, NULL, 0), 0);
    }
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ftc_wait_committed(c[r], 0), 0);
        ftc_destroy(c[r]);
    }
    char slot0[PATH_MAX];
    snprintf(slot0, sizeof slot0, "/dev/shm/ftc.%s.n0.r0.s0", e->job);
    struct stat st;
    assert_int_equal(stat(slot0, &st), 0);
    return (uint64_t)st.st_size;
}

/* Bytes the file of rank 0's slot i on node 0 holds (st_blocks). */
static uint64_t slot_held(env_t *e, unsigned i)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/dev/shm/ftc.%s.n0.r0.s%u", e->job, i);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

static void test_restore_reserves_in_background(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    static float w[2][1 << 18];
    uint64_t size = commit_two(e, w);
    /* node 0 lost; its replacement's background reservations held */
    assert_int_equal(setenv("FTC_TEST_SLOT_RESERVE_DELAY_MS", "600000", 1), 0);
    lose_and_replace(e, (int[]){0}, 1);
    assert_int_equal(unsetenv("FTC_TEST_SLOT_RESERVE_DELAY_MS"), 0);
    int fd = raw_hello(e, 0, 2);
    ftc_ap_msg_t m, rep = raw_slots(fd, size);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    ftc_ap_init(&m, FTC_AP_RESTORE);
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    assert_int_equal(rep.type, FTC_AP_RESTORE_OK);
    assert_int_equal(rep.step, 0);
    unsigned landed = rep.slot;
    /* the rank's next request is answered while its other slots are still
     * unreserved: only the slot the fetch landed in holds its pages */
    rep = raw_slots(fd, size);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    for (unsigned i = 0; i < 3; i++) {
        print_message("slot %u holds %llu of %llu bytes\n", i,
                      (unsigned long long)slot_held(e, i), (unsigned long long)size);
        if (i == landed)
            assert_true(slot_held(e, i) >= size);
        else
            assert_true(slot_held(e, i) < size);
    }
    /* the next checkpoint's BEGIN reserves its slot itself (never waits for
     * the held thread) */
    ftc_ap_init(&m, FTC_AP_BEGIN);
    m.step = 1;
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    assert_int_equal(rep.type, FTC_AP_BEGIN_OK);
    assert_int_not_equal(rep.slot, landed);
    assert_true(slot_held(e, rep.slot) >= size);
    close(fd);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

static void test_restart_adopts_replicas_at_start(void **state)
{
    env_t *e = setup_env(*state, 2, "1", 1000);
    static float w[2][1 << 18];
    uint64_t size = commit_two(e, w);
    /* node 1 holds rank 0's replica; its agent restarts, its shm stays */
    kill_agent(e, 1);
    start_agent(e, 1);
    bool adopted = false;
    for (int i = 0; i < 1000 && !adopted; i++) { /* (no request reaches it meanwhile) */
        adopted = agent_said(e, 1, "adopted the replica of owner 0 step 0");
        if (!adopted)
            usleep(10000);
    }
    assert_true(adopted);
    /* node 0 lost: its rank's restore is served from that replica */
    lose_and_replace(e, (int[]){0}, 1);
    int fd = raw_hello(e, 0, 2);
    ftc_ap_msg_t m, rep = raw_slots(fd, size);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    ftc_ap_init(&m, FTC_AP_RESTORE);
    assert_int_equal(raw_call(fd, &m, &rep, 20000), 0);
    assert_int_equal(rep.type, FTC_AP_RESTORE_OK);
    assert_int_equal(rep.step, 0);
    close(fd);
    assert_true(agent_said(e, 0, "rank 0 restored step 0 from a peer's replica"));
    teardown_env(e);
}

/* One connection is one rank: a connection that said HELLO as rank 0 and
 * then says HELLO as rank 1 is refused (FTC_EPROTO naming rank 0) and
 * stays rank 0's. It was welcomed as rank 1 too: two ranks then shared one
 * fd, whose close left rank 1 "connected" on a closed (later reused) fd,
 * polled and read as rank 1's, and closed a second time. After it, rank 1
 * connects as usual and rank 0's connection still works. */
static void test_hello_as_another_rank(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1000, NULL);
    e->ranks_per_node = 2;
    start_agent(e, 0);
    int fd = raw_hello(e, 0, 2);
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_HELLO);
    snprintf(m.job, sizeof m.job, "%s", e->job);
    m.rank = 1, m.world = 2, m.dp = 2, m.tp = m.pp = 1, m.dp_rank = 1;
    m.pid = (int32_t)getpid();
    m.seq = 7;
    assert_int_equal(raw_call(fd, &m, &rep, 5000), 0);
    assert_int_equal(rep.type, FTC_AP_ERROR);
    assert_int_equal(rep.status, FTC_EPROTO);
    assert_int_equal(rep.seq, 7);
    assert_non_null(strstr(rep.text, "rank 0"));
    /* still rank 0's: its SLOTS is answered with rank 0's slot names */
    rep = raw_slots(fd, 1 << 16);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    /* rank 1 on a connection of its own, with rank 0's still open */
    int fd1 = raw_hello(e, 1, 2);
    close(fd1);
    close(fd);
    fd1 = raw_hello(e, 1, 2);
    close(fd1);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

/* A rank that sends requests and reads none of the answers (not libftc,
 * which reads each answer before its next request): once its socket holds
 * as many unread answers as it takes, the agent reads its next requests
 * only when it has read (a warning names it), and none is lost. Each answer
 * the agent could not send used to block its loop, which serves every rank
 * of the node, for a second, and was then dropped: a rank that kept sending
 * kept the agent waiting, and lost answers. */
static void test_rank_reads_no_answers(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    int fd = raw_hello(e, 0, 1);
    ftc_ap_msg_t m, rep;
    ftc_ap_init(&m, FTC_AP_WELCOME); /* no request: each is answered with an ERROR */
    int sent = 0;
    for (int i = 0; i < 2000; i++) { /* ~2 s of tries, a send each time the agent read one */
        ftc_err_t err = {0};
        m.seq = (uint64_t)sent + 1;
        if (ftc_ap_send(fd, &m, 0, &err) == 0)
            sent++;
        else
            ftc_sleep_ms(1); /* the agent reads no more of them */
    }
    /* each request has its answer, in order, once the rank reads */
    int answers = 0;
    ftc_err_t err = {0};
    while (answers < sent && ftc_ap_recv(fd, &rep, 5000, &err) == 0) {
        assert_int_equal(rep.type, FTC_AP_ERROR);
        assert_int_equal(rep.seq, (uint64_t)answers + 1);
        answers++;
    }
    print_message("%d requests sent, %d answered\n", sent, answers);
    assert_int_equal(answers, sent);
    assert_true(agent_said(e, 0, "reads none of the answers"));
    /* and the connection serves as before */
    rep = raw_slots(fd, 1 << 16);
    assert_int_equal(rep.type, FTC_AP_SLOTS_OK);
    close(fd);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

/* Sends rank fd BEGINs of step 0, already committed (each answered with
 * COMMITTED, then SKIP: two messages per request), without reading, as long
 * as the agent reads them (~0.3 s of tries), after `junk` SEALEDs of no slot
 * (a NOT_COMMITTED each). Returns the BEGINs sent; the first has id *seq + 1,
 * *seq is the last's. */
static int begins_unread(int fd, uint64_t *seq, int junk)
{
    ftc_ap_msg_t m;
    ftc_err_t err = {0};
    ftc_ap_init(&m, FTC_AP_SEALED);
    m.step = 1000;
    for (int i = 0; i < junk; i++)
        assert_int_equal(ftc_ap_send(fd, &m, 2000, &err), 0);
    ftc_ap_init(&m, FTC_AP_BEGIN);
    int sent = 0;
    for (int i = 0; i < 300; i++) {
        m.seq = *seq + 1;
        if (ftc_ap_send(fd, &m, 0, &err) == 0) {
            ++*seq;
            sent++;
        } else {
            ftc_sleep_ms(1); /* the agent reads no more of them */
        }
    }
    return sent;
}

/* Reads what begins_unread(fd, ..., junk) that sent `sent` BEGINs, the last
 * with id last, is owed: each BEGIN has both messages, its SKIP with its id,
 * in order, none lost. */
static void read_owed(int fd, int junk, int sent, uint64_t last)
{
    int notices = 0, committed = 0, skips = 0;
    uint64_t first = last + 1 - (uint64_t)sent;
    while (notices < junk || committed < sent || skips < sent) {
        ftc_ap_msg_t rep;
        ftc_err_t err = {0};
        if (ftc_ap_recv(fd, &rep, 3000, &err)) {
            print_message("after %d of %d SKIPs, %d of %d COMMITTED: %s\n", skips, sent,
                          committed, sent, err.msg);
            break;
        }
        if (rep.type == FTC_AP_NOT_COMMITTED) {
            notices++;
        } else if (rep.type == FTC_AP_COMMITTED) {
            committed++;
        } else {
            assert_int_equal(rep.type, FTC_AP_SKIP);
            assert_int_equal(rep.seq, first + (uint64_t)skips); /* in order, none lost */
            skips++;
        }
    }
    print_message("%d junk SEALEDs and %d BEGINs sent unread: %d NOT_COMMITTED, %d COMMITTED, "
                  "%d SKIP\n", junk, sent, notices, committed, skips);
    assert_int_equal(notices, junk);
    assert_int_equal(committed, sent);
    assert_int_equal(skips, sent);
}

/* A rank that reads none of the agent's messages (stopped, stuck in
 * compute, or sending without reading) while they keep coming: the agent
 * never waits on its socket, no message is lost, and the node's other rank
 * is served meanwhile (rank 1 reads only after rank 0's calls returned).
 * The agent sent each message only once the socket polled writable, which
 * it stops being at a quarter of what the socket holds (about 24
 * messages): exactly where the agent stops reading a rank that reads
 * nothing. A message owed past that point (the second answer of a request,
 * a notice that comes later) waited up to a second in the agent's loop,
 * which serves every rank of the node (rank 0's calls waited too), and was
 * then dropped: here a SKIP, the answer to a BEGIN. Both parities of the
 * count of unread messages are tried (a junk SEALED first, then none). */
static void test_rank_reads_no_notices(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1000, NULL);
    e->ranks_per_node = 2;
    start_agent(e, 0);
    char sock[PATH_MAX + 32];
    ftc_options_t o0 = ctx_options(e, 0, 0, 2, sock, sizeof sock);
    ftc_options_t o1 = ctx_options(e, 0, 1, 2, sock, sizeof sock);
    o0.timeout_ms = o1.timeout_ms = 20000;
    static float w[2][1024];
    ftc_ctx_t *c0 = ctx_with_w(&o0, w[0], 1024), *c1 = ctx_with_w(&o1, w[1], 1024);
    assert_int_equal(ftc_checkpoint(c0, 0, NULL, 0), 0);
    assert_int_equal(ftc_checkpoint(c1, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c0, 0), 0);
    assert_int_equal(ftc_wait_committed(c1, 0), 0);
    ftc_destroy(c1);
    /* rank 1 comes back as a raw rank that reads nothing */
    int fd = raw_hello(e, 1, 2);
    assert_int_equal(raw_slots(fd, 1 << 16).type, FTC_AP_SLOTS_OK);
    uint64_t seq = 100;
    for (int junk = 1; junk >= 0; junk--) {
        int sent = begins_unread(fd, &seq, junk);
        /* rank 0 is served while rank 1 has read nothing */
        for (int i = 0; i < 5; i++)
            assert_int_equal(ftc_report(c0, "nan", i, 0.0, "served"), 0);
        read_owed(fd, junk, sent, seq);
    }
    assert_int_equal(ftc_checkpoint(c0, 1, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c0), 0);
    ftc_destroy(c0);
    close(fd);
    assert_agent_alive(e, 0);
    teardown_env(e);
}

/* The agent's send (ftc__send) on a socket that no longer polls writable
 * (a quarter of its buffer unread) sends at once; on one with no room at
 * all it shuts the connection down (its peer reads what was sent, then the
 * end) instead of waiting or dropping the message silently. No agent. */
static void test_agent_send_never_waits(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    ftc_ap_msg_t m;
    ftc_ap_init(&m, FTC_AP_COMMITTED);
    int sent = 0, writable = -1;
    for (;;) {
        struct pollfd p = {sv[0], POLLOUT, 0};
        if (writable < 0 && poll(&p, 1, 0) == 0)
            writable = sent; /* what ftc_ap_send waited on, up to its timeout */
        ftc_err_t err = {0};
        m.step = (uint64_t)sent;
        int rc = ftc_ap_send_now(sv[0], &m, &err);
        if (rc) {
            assert_int_equal(rc, FTC_EAGAIN);
            break;
        }
        sent++;
    }
    print_message("the socket polls writable up to %d unread messages, holds %d\n", writable,
                  sent);
    assert_true(writable >= 0 && sent > writable); /* room past the point reads stop */
    m.step = (uint64_t)sent;
    ftc__send(sv[0], &m); /* no room: shut down, never waited for */
    int got = 0;
    ftc_ap_msg_t rep;
    ftc_err_t err = {0};
    while (ftc_ap_recv(sv[1], &rep, 1000, &err) == 0) {
        assert_int_equal(rep.step, (uint64_t)got);
        got++;
    }
    assert_int_equal(err.code, FTC_EIO); /* the end, not a timeout */
    assert_int_equal(got, sent);
    close(sv[0]);
    close(sv[1]);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_unused_begins_keep_no_slot),
        T(test_refused_slots_then_restore),
        T(test_step_not_after_committed),
        T(test_create_against_frozen_agent),
        T(test_agent_killed_mid_checkpoint),
        T(test_restore_during_snapshot),
        T(test_restore_keeps_sealed_slots),
        T(test_wait_committed_older_failure),
        T(test_layout_change_during_push),
        T(test_restore_meta_too_small),
        T(test_restore_reserves_in_background),
        T(test_restart_adopts_replicas_at_start),
        T(test_other_protocol_version),
        T(test_hello_as_another_rank),
        T(test_rank_reads_no_answers),
        T(test_rank_reads_no_notices),
        cmocka_unit_test(test_agent_send_never_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
