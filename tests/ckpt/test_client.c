/*
 * test_client.c — the error contract of include/ftc.h, with a real Redis and
 * a real `ftc agent` process where a call needs one:
 *   - ftc_create with no agent at the socket: FTC_ENOENT naming the socket;
 *     with no socket given at all: FTC_ENOENT naming FTC_AGENT_SOCKET; a
 *     rank outside the world, or a world other than the agents': FTC_ECONFIG;
 *     calls on such a context (ftc_restore, ftc_fetch included) and on a
 *     NULL one: FTC_EINVAL ("not connected"), never a crash or a wait;
 *   - ftc_create's FTC_RANK/RANK, FTC_WORLD_SIZE/WORLD_SIZE, FTC_TP, FTC_PP,
 *     FTC_DP and ftc_restore's FTC_RESTORE_RANK that are no whole number in
 *     range (" 2", "1x", "-1"): FTC_ECONFIG naming the variable, its value
 *     and the range, never the default;
 *   - ftc_register: duplicate name FTC_EEXIST, unknown dtype, bad ndim,
 *     negative dimension, empty or NULL name, NULL shape, NULL data
 *     FTC_EINVAL (and the name is
 *     still free afterwards), after the first checkpoint FTC_EINVAL;
 *   - ftc_checkpoint of a negative step FTC_EINVAL; ftc_wait_snapshot with
 *     nothing in flight returns 0; ftc_wait_committed of a step nobody
 *     checkpoints: FTC_ETIMEDOUT after the context's timeout_ms;
 *   - a slot the agent names that cannot be mapped at its size: the
 *     checkpoint fails naming it, and the slots mapped before it are not
 *     left mapped (a retry mapped them again over the same handles: a
 *     mapping and an fd leaked per slot and try); a context that never
 *     mapped its slots closes no fd of others (fd 0) in ftc_destroy;
 *   - a snapshot whose device copy fails (a stand-in device,
 *     tests/ckpt/fake_device.h, through ftc__set_device_ops) is reported
 *     once — by ftc_wait_snapshot, else by the next ftc_checkpoint (which
 *     then starts nothing), else by ftc_wait_committed — and its
 *     ftc_wait_committed is FTC_EIO at once; the checkpoints after it
 *     commit (the failure is not sticky);
 *   - the device syncs of a snapshot and of a restore have the context's
 *     timeout_ms as their deadline; ftc_destroy with a copy that never ends
 *     (a hung device) returns after timeout_ms, leaving it behind: one
 *     deadline for all its waits (the notifier's last snapshot, the BYE,
 *     the copy), not one each;
 *   - a caller waiting for the notifier waits out its whole budget (seal and
 *     SEALED, timeout_ms from the checkpoint) and gets its result; a seal
 *     still running after it is FTC_ETIMEDOUT for ftc_checkpoint, never
 *     FTC_EAGAIN (the test hooks ftc__hold_seal, ftc__hold_notify); a
 *     snapshot a caller gave up on (ftc_interrupt) has its late failure
 *     recorded, not returned again by a later call;
 *   - an answer that comes after the context's timeout_ms (the agent frozen
 *     with SIGSTOP for longer, then SIGCONT) is dropped, not taken as the
 *     answer to the next request: the next ftc_fetch gets its own step's
 *     shard, a checkpoint after it its BEGIN_OK, and the dropped FETCH_OK's
 *     shm copy is not left in /dev/shm;
 *   - the agent killed under a connected context: each call that talks to
 *     it says that the agent at its socket is gone and what to do.
 *   - a second context of a connected rank: FTC_EEXIST naming the pid that
 *     holds the rank and what to check; the first one goes on.
 *   - an agent full of connections that said no HELLO: ftc_create is told
 *     so (FTC_EAGAIN), not left to guess at another ftc build; the agent
 *     closes each such connection agent.timeout_ms after its connect (they
 *     held their places for ever), and a rank connects then.
 */
#include "ftc_test.h"

#include "ckpt/agent_fixture.h"
#include "ckpt/agent_proto.h"
#include "ckpt/client_internal.h"
#include "ckpt/fake_device.h"
#include "ftc.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

static void test_create_without_agent(void **state)
{
    redis_fixture_t *f = *state;
    char sock[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/nobody-listens.sock", f->dir);
    ftc_options_t o = FTC_OPTIONS_INIT;
    o.job = "cli";
    o.agent = sock;
    o.rank = 0;
    o.world = 1;
    ftc_ctx_t *c = NULL;
    assert_int_equal(ftc_create(&o, &c), FTC_ENOENT);
    assert_non_null(c); /* for ftc_last_error */
    print_message("%s\n", ftc_last_error(c));
    assert_non_null(strstr(ftc_last_error(c), sock));
    assert_non_null(strstr(ftc_last_error(c), "ftc agent"));
    /* a context that never connected refuses, at once */
    static float w[16];
    int64_t shape[1] = {16};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, shape, w, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "not connected"));
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), FTC_EINVAL);
    assert_int_equal(ftc_wait_snapshot(c), FTC_EINVAL);
    assert_int_equal(ftc_wait_committed(c, 0), FTC_EINVAL);
    /* ... every other call too: a fetch waited out timeout_ms on no socket
     * (FTC_ETIMEDOUT), a restore or fetch without a shard ref crashed */
    int64_t step = -1;
    ftc_shard_ref_t *ref = (ftc_shard_ref_t *)1;
    assert_int_equal(ftc_restore(c, &step, NULL, NULL), FTC_EINVAL);
    assert_int_equal(ftc_restore_from(c, 0, &step, NULL, NULL), FTC_EINVAL);
    assert_int_equal(ftc_fetch(c, 0, -1, &ref), FTC_EINVAL);
    assert_null(ref);
    assert_non_null(strstr(ftc_last_error(c), "not connected"));
    assert_int_equal(ftc_report(c, "nan", 0, 0.0, "x"), FTC_EINVAL);
    ftc_destroy(c);
    /* no socket at all */
    o.agent = NULL;
    unsetenv("FTC_AGENT_SOCKET");
    assert_int_equal(ftc_create(&o, &c), FTC_ENOENT);
    assert_non_null(strstr(ftc_last_error(c), "FTC_AGENT_SOCKET"));
    ftc_destroy(c);
    /* a rank outside its world */
    o.agent = sock;
    o.rank = 2;
    o.world = 2;
    assert_int_equal(ftc_create(&o, &c), FTC_ECONFIG);
    assert_non_null(strstr(ftc_last_error(c), "FTC_WORLD_SIZE"));
    ftc_destroy(c);
    /* NULL contexts */
    assert_int_equal(ftc_register(NULL, "w", FTC_DTYPE_F32, 1, shape, w, FTC_HOST), FTC_EINVAL);
    assert_int_equal(ftc_wait_snapshot(NULL), FTC_EINVAL);
    assert_int_equal(ftc_wait_committed(NULL, 0), FTC_EINVAL);
    assert_int_equal(ftc_checkpoint(NULL, 0, NULL, 0), FTC_EINVAL);
    assert_int_equal(ftc_checkpoint(NULL, -1, NULL, 0), FTC_EINVAL);
    assert_int_equal(ftc_restore(NULL, &step, NULL, NULL), FTC_EINVAL);
    assert_int_equal(ftc_restore_from(NULL, 0, &step, NULL, NULL), FTC_EINVAL);
    ref = (ftc_shard_ref_t *)1;
    assert_int_equal(ftc_fetch(NULL, 0, -1, &ref), FTC_EINVAL);
    assert_null(ref);
    assert_int_equal(ftc_fetch(NULL, 0, -1, NULL), FTC_EINVAL);
    assert_int_equal(ftc_report(NULL, "nan", 0, 0.0, NULL), FTC_EINVAL);
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    assert_int_equal(ftc_ckpt_status(NULL, &st), FTC_EINVAL);
    ftc_interrupt(NULL);
    ftc_destroy(NULL);
}

/* ftc_create's FTC_RANK / RANK, FTC_WORLD_SIZE / WORLD_SIZE, FTC_TP, FTC_PP,
 * FTC_DP: garbage fell back to the default (RANK="1x" made rank 0, which
 * then checkpointed rank 0's shard as well); now FTC_ECONFIG naming the
 * variable, its value and the range, before any agent is asked. No agent
 * listens at the socket: a value taken would give FTC_ENOENT instead. */
static void test_create_env_strict(void **state)
{
    redis_fixture_t *f = *state;
    char sock[PATH_MAX + 32];
    snprintf(sock, sizeof sock, "%s/nobody-listens.sock", f->dir);
    static const char *vars[] = {"FTC_RANK", "RANK", "FTC_WORLD_SIZE", "WORLD_SIZE",
                                 "FTC_TP", "FTC_PP", "FTC_DP"};
    static const struct {
        const char *var, *value, *named, *range;
    } bad[] = {
        {"FTC_RANK", "1x", "FTC_RANK='1x'", "0..16777215"},
        {"RANK", " 2", "RANK=' 2'", "0..16777215"},
        {"FTC_RANK", "-1", "FTC_RANK='-1'", "0..16777215"},
        {"RANK", "16777216", "RANK='16777216'", "0..16777215"},
        {"FTC_WORLD_SIZE", "0", "FTC_WORLD_SIZE='0'", "1..16777216"},
        {"WORLD_SIZE", "2x", "WORLD_SIZE='2x'", "1..16777216"},
        {"FTC_TP", "abc", "FTC_TP='abc'", "1..16777216"},
        {"FTC_PP", "99999999999999999999", "FTC_PP='99999999999999999999'", "1..16777216"},
        {"FTC_DP", "-3", "FTC_DP='-3'", "0..16777216"},
    };
    ftc_options_t o = FTC_OPTIONS_INIT; /* everything from the environment */
    o.job = "cli";
    o.agent = sock;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
            unsetenv(vars[k]);
        setenv(bad[i].var, bad[i].value, 1);
        ftc_ctx_t *c = NULL;
        int rc = ftc_create(&o, &c);
        print_message("%s='%s': %s: %s\n", bad[i].var, bad[i].value, ftc_errname(rc),
                      ftc_last_error(c));
        assert_int_equal(rc, FTC_ECONFIG);
        assert_non_null(strstr(ftc_last_error(c), bad[i].named));
        assert_non_null(strstr(ftc_last_error(c), bad[i].range));
        ftc_destroy(c);
    }
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
        unsetenv(vars[k]);
    /* empty is unset; FTC_RANK before RANK; a good value is taken (no agent: FTC_ENOENT) */
    setenv("FTC_RANK", "", 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    ftc_ctx_t *c = NULL;
    assert_int_equal(ftc_create(&o, &c), FTC_ENOENT);
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    ftc_ckpt_status(c, &st);
    assert_int_equal(st.rank, 1);
    assert_int_equal(st.world, 2);
    ftc_destroy(c);
    /* degrees whose product wraps round in 32 bits (2^16 x 2^16): a
     * layout that does not fit, not a division by zero */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("FTC_TP", "65536", 1);
    setenv("FTC_PP", "65536", 1);
    assert_int_equal(ftc_create(&o, &c), FTC_ECONFIG);
    assert_non_null(strstr(ftc_last_error(c), "tp=65536 x pp=65536"));
    ftc_destroy(c);
    unsetenv("FTC_TP");
    unsetenv("FTC_PP");
    /* a dp given, by FTC_DP or the option, is checked against world / (tp x
     * pp): it was taken as given and written into every shard header (the
     * agent was then asked: FTC_ENOENT); 0 derives it, the right one is taken */
    setenv("WORLD_SIZE", "4", 1);
    setenv("FTC_TP", "2", 1);
    setenv("FTC_DP", "3", 1);
    int rc = ftc_create(&o, &c);
    print_message("FTC_DP=3, world 4, tp 2: %s: %s\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_ECONFIG);
    assert_non_null(strstr(ftc_last_error(c), "dp=3 does not fit world 4 / (tp=2 x pp=1) = 2"));
    ftc_destroy(c);
    unsetenv("FTC_DP");
    ftc_options_t od = o;
    od.dp = 4;
    assert_int_equal(ftc_create(&od, &c), FTC_ECONFIG);
    assert_non_null(strstr(ftc_last_error(c), "dp=4 does not fit"));
    ftc_destroy(c);
    od.dp = 2;
    assert_int_equal(ftc_create(&od, &c), FTC_ENOENT);
    ftc_destroy(c);
    setenv("FTC_DP", "0", 1); /* 0: derived */
    assert_int_equal(ftc_create(&o, &c), FTC_ENOENT);
    ftc_ckpt_status(c, &st);
    assert_int_equal(st.world, 4);
    ftc_destroy(c);
    unsetenv("FTC_DP");
    unsetenv("WORLD_SIZE");
    unsetenv("FTC_TP");
    /* the options win over the environment, garbage or not */
    setenv("FTC_RANK", "zz", 1);
    o.rank = 0;
    o.world = 1;
    assert_int_equal(ftc_create(&o, &c), FTC_ENOENT);
    ftc_destroy(c);
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
        unsetenv(vars[k]);
}

/* ftc_restore's FTC_RESTORE_RANK (from `ftc run` after a layout change):
 * garbage fell back to this rank's own shard; now FTC_ECONFIG naming it,
 * before the agent is asked, and the context stays usable. */
static void test_restore_rank_strict(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 0);
    static float w[16];
    register_w(c, w, 16);
    static const char *bad[] = {"1x", " 1", "-1", "16777216", "+"};
    int64_t step = -1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FTC_RESTORE_RANK", bad[i], 1);
        int rc = ftc_restore(c, &step, NULL, NULL);
        print_message("FTC_RESTORE_RANK='%s': %s: %s\n", bad[i], ftc_errname(rc),
                      ftc_last_error(c));
        assert_int_equal(rc, FTC_ECONFIG);
        char named[64];
        snprintf(named, sizeof named, "FTC_RESTORE_RANK='%s'", bad[i]);
        assert_non_null(strstr(ftc_last_error(c), named));
        assert_non_null(strstr(ftc_last_error(c), "0..16777215"));
    }
    /* unset, empty or this rank: its own shard; nothing committed yet */
    unsetenv("FTC_RESTORE_RANK");
    assert_int_equal(ftc_restore(c, &step, NULL, NULL), FTC_ENOENT);
    setenv("FTC_RESTORE_RANK", "", 1);
    assert_int_equal(ftc_restore(c, &step, NULL, NULL), FTC_ENOENT);
    setenv("FTC_RESTORE_RANK", "0", 1);
    assert_int_equal(ftc_restore(c, &step, NULL, NULL), FTC_ENOENT);
    unsetenv("FTC_RESTORE_RANK");
    ftc_destroy(c);
    teardown_env(e);
}

static void test_register_errors(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    /* a rank whose world is not the agents' (1 node x 1 rank): refused at
     * once, instead of checkpoints that never commit */
    ftc_options_t o = ctx_options(e, 0, 0, 2, sock, sizeof sock);
    o.timeout_ms = 1500;
    ftc_ctx_t *c = NULL;
    assert_int_equal(ftc_create(&o, &c), FTC_ECONFIG);
    print_message("%s\n", ftc_last_error(c));
    assert_non_null(strstr(ftc_last_error(c), "world has 2 rank(s)"));
    assert_non_null(strstr(ftc_last_error(c), "FTC_WORLD_SIZE"));
    ftc_destroy(c);
    c = NULL;
    o.world = 1;
    assert_int_equal(ftc_create(&o, &c), 0);
    static float w[64], m[64];
    static int64_t step;
    int64_t shape[2] = {8, 8}, neg[2] = {8, -1};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 2, shape, w, FTC_HOST), 0);
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 2, shape, m, FTC_HOST), FTC_EEXIST);
    assert_non_null(strstr(ftc_last_error(c), "'w'"));
    assert_int_equal(ftc_register(c, "m", 99, 2, shape, m, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "dtype"));
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_INVALID, 2, shape, m, FTC_HOST), FTC_EINVAL);
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, -1, shape, m, FTC_HOST), FTC_EINVAL);
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, 9, shape, m, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "ndim"));
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, 2, neg, m, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "negative"));
    assert_int_equal(ftc_register(c, "", FTC_DTYPE_F32, 2, shape, m, FTC_HOST), FTC_EINVAL);
    assert_int_equal(ftc_register(c, NULL, FTC_DTYPE_F32, 2, shape, m, FTC_HOST), FTC_EINVAL);
    /* no shape for a tensor of 2 dimensions (it crashed) */
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, 2, NULL, m, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "shape"));
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, 2, shape, NULL, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "NULL"));
    /* the refused registrations left the name free */
    assert_int_equal(ftc_register(c, "m", FTC_DTYPE_F32, 2, shape, m, FTC_HOST), 0);
    assert_int_equal(ftc_register(c, "step", FTC_DTYPE_I64, 0, NULL, &step, FTC_HOST), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0); /* nothing in flight */
    assert_int_equal(ftc_checkpoint(c, -1, NULL, 0), FTC_EINVAL);
    w[3] = 3.0f;
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    /* after the first checkpoint the set of tensors is fixed */
    static float late[4];
    int64_t four[1] = {4};
    assert_int_equal(ftc_register(c, "late", FTC_DTYPE_F32, 1, four, late, FTC_HOST), FTC_EINVAL);
    assert_non_null(strstr(ftc_last_error(c), "before the first checkpoint"));
    /* a step nobody checkpoints: the context's deadline */
    assert_int_equal(ftc_wait_committed(c, 7), FTC_ETIMEDOUT);
    assert_non_null(strstr(ftc_last_error(c), "step 7"));
    ftc_destroy(c);
    teardown_env(e);
}

/* Mappings and fds of this process on shm objects whose name contains what. */
static int count_maps(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

static int count_fds(const char *what)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        char p[PATH_MAX], t[PATH_MAX];
        snprintf(p, sizeof p, "/proc/self/fd/%s", de->d_name);
        ssize_t k = readlink(p, t, sizeof t - 1);
        if (k > 0) {
            t[k] = 0;
            n += strstr(t, what) != NULL;
        }
    }
    closedir(d);
    return n;
}

static void test_slots_all_or_none(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32], prefix[128], s2[PATH_MAX];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.r0.s", e->job);
    snprintf(s2, sizeof s2, "/dev/shm/%s2", prefix);
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 5000;
    /* a context that never maps slots: its destroy leaves fd 0 alone */
    int probe = dup(0);
    assert_true(probe >= 0);
    ftc_ctx_t *c = NULL;
    assert_int_equal(ftc_create(&o, &c), 0);
    ftc_destroy(c);
    assert_true(fcntl(0, F_GETFD) >= 0);
    close(probe);
    static float w[4096];
    c = NULL;
    assert_int_equal(ftc_create(&o, &c), 0);
    register_w(c, w, 4096);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    ftc_destroy(c);
    assert_int_equal(count_maps(prefix), 0);
    /* the third slot shrunk behind the agent's back: a new context of the
     * rank gets the same names and cannot map it at the rank's size */
    struct stat st;
    assert_int_equal(stat(s2, &st), 0);
    int fd = open(s2, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    c = NULL;
    assert_int_equal(ftc_create(&o, &c), 0);
    register_w(c, w, 4096);
    for (int i = 0; i < 2; i++) {
        int rc = ftc_checkpoint(c, 1, NULL, 0);
        print_message("checkpoint with a shrunk slot: %s (%s)\n", ftc_errname(rc),
                      ftc_last_error(c));
        assert_int_equal(rc, FTC_EPROTO);
        assert_non_null(strstr(ftc_last_error(c), "s2 has 4096 bytes"));
        print_message("after try %d: %d mapping(s), %d fd(s) of the rank's slots\n", i + 1,
                      count_maps(prefix), count_fds(prefix));
        assert_int_equal(count_maps(prefix), 0);
        assert_int_equal(count_fds(prefix), 1); /* this test's own, on s2 */
    }
    /* its size back: the next checkpoint maps the three slots once */
    assert_int_equal(ftruncate(fd, st.st_size), 0);
    close(fd);
    assert_int_equal(ftc_checkpoint(c, 1, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 1), 0);
    assert_int_equal(count_maps(prefix), 3);
    assert_int_equal(count_fds(prefix), 3);
    ftc_destroy(c);
    assert_int_equal(count_maps(prefix), 0);
    assert_int_equal(count_fds(prefix), 0);
    teardown_env(e);
}

/* The shm copies of FETCH_OK answers of job's node-0 agent left in /dev/shm. */
static int count_fetch_copies(env_t *e)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "ftc.%s.n0.f", e->job);
    DIR *d = opendir("/dev/shm");
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* ftc_fetch of rank 0's step: 0 and the step it got, whose w[7] must be
 * that step's; or the error. */
static int fetch_step(ftc_ctx_t *c, int64_t step, int64_t *got)
{
    ftc_shard_ref_t *ref = NULL;
    int rc = ftc_fetch(c, 0, step, &ref);
    if (rc) {
        assert_null(ref);
        print_message("fetch of step %lld: %s: %s\n", (long long)step, ftc_errname(rc),
                      ftc_last_error(c));
        return rc;
    }
    *got = ftc_shard_step(ref);
    const void *data = NULL;
    int dtype = 0;
    uint64_t numel = 0;
    assert_int_equal(ftc_shard_tensor(ref, "w", &data, &dtype, &numel), 0);
    print_message("fetch of step %lld: step %lld, w[7] = %g\n", (long long)step,
                  (long long)*got, (double)((const float *)data)[7]);
    assert_true(((const float *)data)[7] == (float)(*got * 4096 + 7));
    ftc_shard_release(ref);
    return 0;
}

/* A late answer: the agent frozen (SIGSTOP) past the context's timeout_ms
 * while a FETCH of step 3 waits, then thawed. The agent still answers that
 * FETCH, before the next request; the answer used to be taken as the next
 * request's: the FETCH of step 2 got step 3's shard (right checksums, wrong
 * step), and a BEGIN got a FETCH_OK (FTC_EPROTO). Now both get their own
 * answers and the late one is dropped, its shm copy unlinked. */
static void test_late_answer_dropped(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 3000);
    static float w[4096];
    register_w(c, w, 4096);
    for (int64_t s = 1; s <= 3; s++) {
        for (int i = 0; i < 4096; i++)
            w[i] = (float)(s * 4096 + i);
        assert_int_equal(ftc_checkpoint(c, s, NULL, 0), 0);
        if (ftc_wait_committed(c, s))
            fail_msg("step %lld: %s", (long long)s, ftc_last_error(c));
    }
    int64_t got = -1;
    for (int round = 0; round < 2; round++) {
        kill(e->agent[0], SIGSTOP);
        assert_int_equal(fetch_step(c, 3, &got), FTC_ETIMEDOUT);
        kill(e->agent[0], SIGCONT);
        if (round == 0) {
            /* the next FETCH: step 2's shard, not the late step 3 */
            assert_int_equal(fetch_step(c, 2, &got), 0);
            assert_int_equal(got, 2);
        } else {
            /* a checkpoint: its BEGIN's answer, past the late FETCH_OK */
            for (int i = 0; i < 4096; i++)
                w[i] = (float)(4 * 4096 + i);
            if (ftc_checkpoint(c, 4, NULL, 0))
                fail_msg("checkpoint after a late answer: %s", ftc_last_error(c));
            if (ftc_wait_committed(c, 4))
                fail_msg("step 4: %s", ftc_last_error(c));
            /* the late answer's shm copy is gone (the rank unlinked it) */
            assert_int_equal(count_fetch_copies(e), 0);
        }
    }
    assert_int_equal(fetch_step(c, 4, &got), 0);
    assert_int_equal(got, 4);
    assert_int_equal(count_fetch_copies(e), 0);
    ftc_destroy(c);
    teardown_env(e);
}

/* Fills w with step's values and checkpoints step. */
static int ckpt_step(ftc_ctx_t *c, float *w, int n, int64_t step)
{
    for (int i = 0; i < n; i++)
        w[i] = (float)(step * 4096 + i);
    int rc = ftc_checkpoint(c, step, NULL, 0);
    print_message("checkpoint of step %lld: %s%s%s\n", (long long)step, ftc_errname(rc),
                  rc ? ": " : "", rc ? ftc_last_error(c) : "");
    return rc;
}

static void commits(ftc_ctx_t *c, int64_t step)
{
    if (ftc_wait_committed(c, step))
        fail_msg("step %lld: %s", (long long)step, ftc_last_error(c));
}

/* The next device sync of the stand-in device fails (after its copies
 * landed, as a CUDA stream error surfaces at cudaStreamSynchronize). */
static void next_sync_fails(void)
{
    fake_set(&FD.fail_sync_at, fake_get(&FD.syncs) + 1);
}

/* A snapshot whose device copy fails, against a real agent: the failure is
 * reported exactly once — by ftc_wait_snapshot; else by the next
 * ftc_checkpoint, which starts nothing; else by ftc_wait_committed — and
 * ftc_wait_committed of the failed step is FTC_EIO at once, not a wait for
 * a commit that never comes. The failure used to stay: the engine's failed
 * phase lasts until its next snapshot, and ftc_checkpoint, which waited for
 * the copy first, returned the old error before beginning one, so every
 * later checkpoint failed. A copy that cannot even start (copy_async fails
 * at begin) is ftc_checkpoint's own error. Each time, the next checkpoint
 * commits, and the last one holds its own values. */
static void test_failed_snapshot_not_sticky(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, 8000);
    assert_int_equal(ftc__set_device_ops(c, fake_dev_ops()), 0);
    static float w[4096], h[256];
    int64_t sw[1] = {4096}, sh[1] = {256};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, sw, w, 0), 0); /* on the device */
    assert_int_equal(ftc_register(c, "h", FTC_DTYPE_F32, 1, sh, h, FTC_HOST), 0);
    assert_int_equal(ftc__set_device_ops(c, NULL), FTC_EINVAL); /* after a device tensor */
    assert_int_equal(ckpt_step(c, w, 4096, 1), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
    commits(c, 1);
    /* 1. reported by ftc_wait_snapshot, once */
    next_sync_fails();
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    assert_int_equal(ftc_wait_snapshot(c), FTC_EIO);
    print_message("ftc_wait_snapshot: %s\n", ftc_last_error(c));
    assert_non_null(strstr(ftc_last_error(c), "fake device: sync failed"));
    assert_non_null(strstr(ftc_last_error(c), "step 2"));
    assert_int_equal(ftc_wait_snapshot(c), 0); /* reported already */
    assert_int_equal(ftc_wait_committed(c, 2), FTC_EIO);
    print_message("ftc_wait_committed(2): %s\n", ftc_last_error(c));
    assert_non_null(strstr(ftc_last_error(c), "fake device: sync failed"));
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.failed, 2);
    assert_int_equal(st.committed, 1);
    /* not sticky */
    assert_int_equal(ckpt_step(c, w, 4096, 3), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
    commits(c, 3);
    /* 2. nobody waits for the snapshot: the next ftc_checkpoint reports it
     * and starts nothing; the one after it commits */
    next_sync_fails();
    assert_int_equal(ckpt_step(c, w, 4096, 4), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 5), FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c), "step 4"));
    assert_non_null(strstr(ftc_last_error(c), "fake device: sync failed"));
    assert_int_equal(ftc_wait_snapshot(c), 0);
    assert_int_equal(ftc_wait_committed(c, 4), FTC_EIO);
    assert_int_equal(ckpt_step(c, w, 4096, 6), 0);
    commits(c, 6);
    /* 3. reported by ftc_wait_committed of that step: FTC_EIO, not its
     * deadline (FTC_ETIMEDOUT) */
    next_sync_fails();
    assert_int_equal(ckpt_step(c, w, 4096, 7), 0);
    assert_int_equal(ftc_wait_committed(c, 7), FTC_EIO);
    print_message("ftc_wait_committed(7): %s\n", ftc_last_error(c));
    assert_int_equal(ftc_wait_snapshot(c), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 8), 0);
    commits(c, 8);
    /* 4. a copy that cannot start: ftc_checkpoint's own error, once */
    fake_set(&FD.fail_at, fake_get(&FD.copies) + 1);
    assert_int_equal(ckpt_step(c, w, 4096, 9), FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c), "fake device: copy"));
    assert_int_equal(ftc_wait_snapshot(c), 0);
    assert_int_equal(ftc_wait_committed(c, 9), FTC_EIO);
    assert_int_equal(ckpt_step(c, w, 4096, 10), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
    commits(c, 10);
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.committed, 10);
    assert_int_equal(st.failed, 9);
    int64_t got = -1;
    assert_int_equal(fetch_step(c, 10, &got), 0);
    assert_int_equal(got, 10);
    ftc_destroy(c);
    assert_int_equal(FD.closed, 1);
    fd_done();
    teardown_env(e);
}

/* A context for the tests below: timeout_ms, tensor "w" on the stand-in
 * device (fd_reset first) and "h" on the host, step 1 committed. */
static ftc_ctx_t *device_ctx(env_t *e, int timeout_ms, float *w, float *h)
{
    ftc_ctx_t *c = create_ctx(e, 0, 0, 1, timeout_ms);
    assert_int_equal(ftc__set_device_ops(c, fake_dev_ops()), 0);
    int64_t sw[1] = {4096}, sh[1] = {256};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, sw, w, 0), 0);
    assert_int_equal(ftc_register(c, "h", FTC_DTYPE_F32, 1, sh, h, FTC_HOST), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 1), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0);
    commits(c, 1);
    return c;
}

/* The device syncs of a context's snapshot and of its restore are given
 * the context's timeout_ms as their deadline. They had a fixed 600 s: a
 * device that does not finish held the snapshot (and every call waiting
 * for it) ten minutes whatever the user configured. */
static void test_sync_deadline_is_the_contexts(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 4000, w, h);
    int ms = fake_get(&FD.sync_ms);
    print_message("snapshot: the device sync's deadline was %d ms away\n", ms);
    assert_true(ms > 0 && ms <= 4000);
    fake_set(&FD.sync_ms, 0);
    int64_t step = -1;
    if (ftc_restore(c, &step, NULL, NULL))
        fail_msg("ftc_restore: %s", ftc_last_error(c));
    assert_int_equal(step, 1);
    ms = fake_get(&FD.sync_ms);
    print_message("restore: the device sync's deadline was %d ms away\n", ms);
    assert_true(ms > 0 && ms <= 4000);
    ftc_destroy(c);
    assert_int_equal(FD.closed, 1);
    fd_done();
    teardown_env(e);
}

/* A snapshot still being sealed after the notifier gave up on it (its seal
 * held): the next ftc_checkpoint reports that failure once (FTC_ETIMEDOUT),
 * and the one after it, while the seal still runs, is FTC_ETIMEDOUT naming
 * it, not FTC_EAGAIN, which include/ftc.h keeps for the agent's busy policy
 * (a trainer takes it for a skip and goes on). It was FTC_EAGAIN: the
 * engine refused to begin, after the agent had handed out a slot. Once the
 * seal ends, checkpoints commit again. */
static void test_still_sealing_is_not_a_skip(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 1500, w, h);
    assert_int_equal(ftc__hold_seal(c, true), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    assert_int_equal(ftc_wait_snapshot(c), 0); /* copied; not sealed */
    assert_int_equal(ckpt_step(c, w, 4096, 3), FTC_ETIMEDOUT); /* step 2's failure */
    assert_non_null(strstr(ftc_last_error(c), "step 2"));
    int rc = ckpt_step(c, w, 4096, 4);
    assert_int_not_equal(rc, FTC_EAGAIN);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(ftc_last_error(c), "step 2"));
    assert_non_null(strstr(ftc_last_error(c), "sealed"));
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.skipped, 0);
    assert_int_equal(ftc_wait_committed(c, 4), FTC_EIO);
    assert_int_equal(ftc__hold_seal(c, false), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 5), 0);
    commits(c, 5);
    ftc_destroy(c);
    assert_int_equal(FD.closed, 1);
    fd_done();
    teardown_env(e);
}

static void *release_sync_later(void *arg)
{
    (void)arg;
    ftc_sleep_ms(1000);
    fake_set_hold(false);
    return NULL;
}

/* The notifier's seal wait and its SEALED share one budget, timeout_ms from
 * the checkpoint, and a caller waiting for it waits out that budget: the
 * snapshot of step 1 seals a second after its checkpoint (its device sync
 * held), then its SEALED cannot be sent (held: an agent that reads
 * nothing). ftc_wait_committed(1) gets that failure (FTC_EIO naming it)
 * and the next checkpoint commits. Before, each step had timeout_ms of its
 * own: the caller gave up (FTC_ETIMEDOUT) while the send was still within
 * its limits, and the notifier's late failure was then reported by the
 * next ftc_checkpoint, as its own, for a snapshot that had nothing wrong. */
static void test_notifier_within_the_callers_wait(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 2000, w, h);
    assert_int_equal(ftc__hold_notify(c, true), 0);
    fake_set_hold(true);
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_sync_later, NULL), 0);
    int rc = ftc_wait_committed(c, 2);
    print_message("ftc_wait_committed(2): %s: %s\n", ftc_errname(rc), ftc_last_error(c));
    pthread_join(th, NULL);
    assert_int_equal(rc, FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c), "telling the agent"));
    assert_int_equal(ftc__hold_notify(c, false), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 3), 0);
    commits(c, 3);
    ftc_destroy(c);
    assert_int_equal(FD.closed, 1);
    fd_done();
    teardown_env(e);
}

/* A caller that gave up waiting for the notifier (ftc_interrupt: FTC_ECANCELED, naming step 2)
 * was told of that snapshot then (ckpt/client.c, gave_up_id): the notifier's late failure of it
 * (its SEALED held past its budget, timeout_ms from the checkpoint) is recorded, not returned
 * again as a later call's error. The next ftc_checkpoint gets the interrupted context's
 * FTC_ECANCELED, not "step 3 was not checkpointed: ... telling the agent of its seal failed";
 * the failure is still known: ftc_ckpt_status's failed is 2 and ftc_wait_committed(2) is
 * FTC_EIO naming it; ftc_wait_snapshot has nothing to report. */
static void test_given_up_snapshot_not_reported_again(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 4000, w, h);
    assert_int_equal(ftc__hold_notify(c, true), 0);
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    ftc_interrupt(c);
    int rc = ftc_wait_committed(c, 2); /* the notifier holds step 2's SEALED: given up */
    print_message("ftc_wait_committed(2): %s: %s\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_ECANCELED);
    assert_non_null(strstr(ftc_last_error(c), "snapshot of step 2 was being handed"));
    /* the notifier fails step 2 at the end of its budget */
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    do {
        ftc_sleep_ms(20);
        ftc_ckpt_status(c, &st);
    } while (st.in_flight >= 0 && !ftc_deadline_expired(d));
    assert_int_equal(st.in_flight, -1);
    rc = ckpt_step(c, w, 4096, 3);
    assert_int_equal(rc, FTC_ECANCELED);
    assert_null(strstr(ftc_last_error(c), "telling the agent"));
    assert_int_equal(ftc_ckpt_status(c, &st), 0);
    assert_int_equal(st.failed, 2);
    rc = ftc_wait_committed(c, 2);
    print_message("ftc_wait_committed(2) again: %s: %s\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_EIO);
    assert_non_null(strstr(ftc_last_error(c), "telling the agent"));
    assert_int_equal(ftc_wait_snapshot(c), 0);
    assert_int_equal(ftc__hold_notify(c, false), 0);
    ftc_destroy(c);
    assert_int_equal(FD.closed, 1);
    fd_done();
    teardown_env(e);
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool returned, released;
    int ms;
} WD = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, 0};

/* Lets the held device sync go after WD.ms unless ftc_destroy returned. */
static void *watchdog(void *arg)
{
    (void)arg;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)WD.ms);
    pthread_mutex_lock(&WD.mu);
    while (!WD.returned && !ftc_deadline_expired(d)) {
        struct timespec ts = ftc_cond_abstime(d);
        pthread_cond_timedwait(&WD.cv, &WD.mu, &ts);
    }
    WD.released = !WD.returned;
    pthread_mutex_unlock(&WD.mu);
    if (WD.released)
        fake_set_hold(false);
    return NULL;
}

/* ftc_destroy(c) under the watchdog, which lets the held device go after
 * ms unless ftc_destroy returned first: whether it had to. */
static bool destroy_watched(ftc_ctx_t *c, int ms)
{
    ftc_cond_init(&WD.cv);
    WD.returned = WD.released = false;
    WD.ms = ms;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watchdog, NULL), 0);
    ftc_destroy(c);
    pthread_mutex_lock(&WD.mu);
    WD.returned = true;
    pthread_cond_broadcast(&WD.cv);
    pthread_mutex_unlock(&WD.mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&WD.cv);
    return WD.released;
}

/* Once the held device lets a copy left behind by ftc_destroy end, the
 * engine's last thread frees it, closing the device. */
static void left_behind_copy_ends(void)
{
    assert_int_equal(fake_get(&FD.closed), 0); /* left behind: not freed under the copy */
    fake_set_hold(false); /* the copy left behind ends; it is never sealed */
    ftc_deadline_t d = ftc_deadline_in_ms(20000);
    while (fake_get(&FD.closed) == 0 && !ftc_deadline_expired(d))
        ftc_sleep_ms(10);
    assert_int_equal(fake_get(&FD.closed), 1);
}

/* ftc_destroy waits timeout_ms in all, from its call, not per step: a
 * snapshot whose device copy hangs (and whose seal and SEALED are held
 * too) kept the notifier its whole budget (timeout_ms from the checkpoint,
 * just before), then the copy engine's destroy waited timeout_ms again
 * (and the BYE had 1 s of its own): about 2 x 2000 ms. The watchdog lets
 * the device go 3500 ms after the call, past the one deadline but before
 * the old sum: ftc_destroy must have returned first. It left the copy
 * behind; the device let go, the engine's last thread frees it. */
static void test_destroy_has_one_deadline(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 2000, w, h);
    assert_int_equal(ftc__hold_seal(c, true), 0);
    assert_int_equal(ftc__hold_notify(c, true), 0);
    fake_set_hold(true);
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    bool released = destroy_watched(c, 3500);
    print_message("the watchdog %s the device\n", released ? "had to let go" : "never let go");
    assert_false(released);
    left_behind_copy_ends();
    teardown_env(e);
}

/* ftc_destroy with a snapshot whose device copy never ends (a hung device:
 * its sync ignores its deadline) returns after the context's timeout_ms,
 * leaving the copy engine behind, instead of waiting for it without end.
 * Before, it returned only when the watchdog let the device go (20 s).
 * Once the device lets the copy end, the engine's last thread frees it and
 * closes the device: before, nothing did (LeakSanitizer: 13 allocations of
 * the engine). Last of this binary. */
static void test_destroy_leaves_a_hung_copy(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    fd_reset();
    static float w[4096], h[256];
    ftc_ctx_t *c = device_ctx(e, 1500, w, h);
    fake_set_hold(true);
    assert_int_equal(ckpt_step(c, w, 4096, 2), 0);
    assert_false(destroy_watched(c, 20000));
    /* and its last thread frees the engine, closing the device (it leaked) */
    left_behind_copy_ends();
    teardown_env(e);
}

/* Whether the last error says the agent at sock is gone and what to do. */
static void says_agent_gone(ftc_ctx_t *c, const char *call, int rc, const char *sock)
{
    print_message("%s: %s (%s)\n", call, ftc_errname(rc), ftc_last_error(c));
    assert_true(rc < 0);
    assert_non_null(strstr(ftc_last_error(c), sock));
    assert_non_null(strstr(ftc_last_error(c), "is gone"));
    assert_non_null(strstr(ftc_last_error(c), "ftc_destroy"));
}

/* The agent killed under a connected context: each call that talks to it
 * says that the agent at its socket is gone and what to do (destroy the
 * context, create another once the agent runs again), not only "agent
 * socket send: Broken pipe" or "connection closed by the other side". */
static void test_agent_gone_says_so(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_ctx_t *c = create_ctx_at(e, 0, 0, 1, 5000, sock, sizeof sock);
    static float w[4096];
    register_w(c, w, 4096);
    assert_int_equal(ckpt_step(c, w, 4096, 0), 0);
    commits(c, 0);
    kill_agent(e, 0);
    says_agent_gone(c, "ftc_wait_committed", ftc_wait_committed(c, 1), sock);
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    says_agent_gone(c, "ftc_ckpt_status", ftc_ckpt_status(c, &st), sock);
    says_agent_gone(c, "ftc_checkpoint", ftc_checkpoint(c, 1, NULL, 0), sock);
    int64_t step = -1;
    says_agent_gone(c, "ftc_restore", ftc_restore(c, &step, NULL, NULL), sock);
    ftc_destroy(c);
    teardown_env(e);
}

/* A second context of a rank whose first is connected: FTC_EEXIST, the
 * message naming the pid that holds the rank and what to do (it said only
 * "rank 0 is already connected"); the first context is not disturbed, and
 * once it is destroyed the rank connects again. */
static void test_rank_connected_twice(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 5000;
    ftc_ctx_t *c = NULL, *c2 = NULL;
    assert_int_equal(ftc_create(&o, &c), 0);
    assert_int_equal(ftc_create(&o, &c2), FTC_EEXIST);
    print_message("%s\n", ftc_last_error(c2));
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)getpid());
    assert_non_null(strstr(ftc_last_error(c2), pid));
    assert_non_null(strstr(ftc_last_error(c2), "FTC_RANK"));
    ftc_destroy(c2);
    static float w[4096];
    register_w(c, w, 4096);
    assert_int_equal(ckpt_step(c, w, 4096, 0), 0);
    commits(c, 0);
    ftc_destroy(c);
    c = NULL;
    assert_int_equal(ftc_create(&o, &c), 0);
    ftc_destroy(c);
    teardown_env(e);
}

/* An agent with as many connections that said no HELLO as it keeps (a
 * process that connects and says nothing): the next rank's ftc_create is
 * told so by the agent (FTC_EAGAIN, the message naming the limit), which
 * logs it; it was closed without a word, and the rank's error blamed
 * another ftc build. Once they close, the rank connects. */
static void test_agent_full_says_so(void **state)
{
    env_t *e = setup_env(*state, 1, "0", 1000);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 5000;
    enum { N = 128 }; /* FTC_AGENT_MAX_CLIENTS */
    static int fds[N];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof sa), 0);
    }
    ftc_ctx_t *c = NULL;
    int rc = ftc_create(&o, &c);
    print_message("ftc_create: %s (%s)\n", ftc_errname(rc), ftc_last_error(c));
    assert_int_equal(rc, FTC_EAGAIN);
    assert_non_null(strstr(ftc_last_error(c), "said no HELLO"));
    ftc_destroy(c);
    assert_true(agent_said(e, 0, "said no HELLO"));
    for (int i = 0; i < N; i++)
        close(fds[i]);
    /* the agent has seen them close once it answers a rank */
    c = NULL;
    for (int tries = 0; tries < 100; tries++) {
        rc = ftc_create(&o, &c);
        if (rc != FTC_EAGAIN)
            break;
        ftc_destroy(c);
        c = NULL;
        ftc_sleep_ms(20);
    }
    assert_int_equal(rc, 0);
    ftc_destroy(c);
    teardown_env(e);
}

/* Connections that say nothing (no HELLO) are closed by the agent
 * agent.timeout_ms after their connect (500 ms here), with an ERROR saying
 * why and a WARN: FTC_AGENT_MAX_CLIENTS of them held every place for ever,
 * and no rank could connect again. The bound waited for is generous. */
static void test_silent_connections_closed(void **state)
{
    env_t *e = prepare_env(*state, 1, "0", 1000, NULL);
    snprintf(e->timeout_ms, sizeof e->timeout_ms, "500");
    start_agent(e, 0);
    char sock[PATH_MAX + 32];
    ftc_options_t o = ctx_options(e, 0, 0, 1, sock, sizeof sock);
    o.timeout_ms = 5000;
    enum { N = 128 }; /* FTC_AGENT_MAX_CLIENTS: the agent's table is full */
    static struct pollfd p[N + 1];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    for (int i = 0; i < N + 1; i++) {
        p[i] = (struct pollfd){socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), POLLIN, 0};
        assert_true(p[i].fd >= 0);
        assert_int_equal(connect(p[i].fd, (struct sockaddr *)&sa, sizeof sa), 0);
    }
    /* the one past the table: refused (FTC_EAGAIN), or, on a machine slow
     * enough that the first ones were closed meanwhile, closed in its turn */
    ftc_ap_msg_t m;
    ftc_err_t err = {0};
    assert_int_equal(ftc_ap_recv(p[N].fd, &m, 10000, &err), 0);
    print_message("connection %d: %s (%s)\n", N + 1, m.text, ftc_errname(m.status));
    assert_int_equal(m.type, FTC_AP_ERROR);
    assert_true(m.status == FTC_EAGAIN || m.status == FTC_ETIMEDOUT);
    assert_non_null(strstr(m.text, "said no HELLO"));
    /* the agent closes all of them, each with an ERROR saying why */
    int closed = 0;
    ftc_deadline_t d = ftc_deadline_in_ms(10000);
    while (closed < N && !ftc_deadline_expired(d)) {
        assert_true(poll(p, N, 100) >= 0);
        closed = 0;
        for (int i = 0; i < N; i++)
            closed += (p[i].revents & POLLHUP) != 0;
    }
    print_message("%d of %d silent connections closed by the agent\n", closed, N);
    assert_int_equal(closed, N);
    assert_int_equal(ftc_ap_recv(p[0].fd, &m, 0, &err), 0);
    assert_int_equal(m.type, FTC_AP_ERROR);
    assert_int_equal(m.status, FTC_ETIMEDOUT);
    assert_non_null(strstr(m.text, "said no HELLO within 500 ms"));
    assert_true(agent_said(e, 0, "said no HELLO within 500 ms"));
    /* a rank connects at once, and works */
    ftc_ctx_t *c = NULL;
    int rc = ftc_create(&o, &c);
    print_message("ftc_create: %s (%s)\n", ftc_errname(rc), rc ? ftc_last_error(c) : "");
    assert_int_equal(rc, 0);
    static float w[1024];
    int64_t shape[1] = {1024};
    assert_int_equal(ftc_register(c, "w", FTC_DTYPE_F32, 1, shape, w, FTC_HOST), 0);
    assert_int_equal(ftc_checkpoint(c, 0, NULL, 0), 0);
    assert_int_equal(ftc_wait_committed(c, 0), 0);
    ftc_destroy(c);
    for (int i = 0; i < N + 1; i++)
        close(p[i].fd);
    teardown_env(e);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, redis_fixture_setup, agent_fixture_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(test_create_without_agent),
        T(test_create_env_strict),
        T(test_restore_rank_strict),
        T(test_register_errors),
        T(test_slots_all_or_none),
        T(test_late_answer_dropped),
        T(test_failed_snapshot_not_sticky),
        T(test_sync_deadline_is_the_contexts),
        T(test_still_sealing_is_not_a_skip),
        T(test_notifier_within_the_callers_wait),
        T(test_given_up_snapshot_not_reported_again),
        T(test_destroy_has_one_deadline),
        T(test_destroy_leaves_a_hung_copy), /* each waits for its left-behind copy to end */
        T(test_agent_gone_says_so),
        T(test_rank_connected_twice),
        T(test_agent_full_says_so),
        T(test_silent_connections_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
