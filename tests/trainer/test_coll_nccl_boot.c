/*
 * test_coll_nccl_boot.c — the NCCL id rendezvous (trainer/coll_nccl.h) on a
 * CPU machine: through a shared directory and through a real redis-server,
 * ranks as threads (each with its own Redis connection). The id reaches every
 * rank intact; a missing rank is named at the deadline; a rank of an older
 * generation is refused (FTC_ESTALE) by both carriers; a rank told another
 * group size gets FTC_EPROTO; a corrupt record FTC_ECORRUPT; the abort flag
 * ends a wait; the Redis keys carry a TTL. Also what create says in a build
 * without NCCL or on a machine without a GPU.
 */
#include "detect/redis_fixture.h"

#include "core/gpu.h"
#include "trainer/coll_nccl.h"

#include <pthread.h>
#include <sys/wait.h>

typedef struct rk {
    ftc_coll_nccl_boot_t boot;
    const ftc_redis_url_t *url; /* Redis carrier: connect in the thread */
    int rank, size, dl_ms;
    uint8_t id[FTC_COLL_NCCL_ID_BYTES];
    int rc;
    ftc_err_t err;
} rk_t;

static void *rank_main(void *arg)
{
    rk_t *k = arg;
    ftc_redis_t *r = NULL;
    if (k->url) {
        r = ftc_redis_connect(k->url, NULL, &k->err);
        if (!r) {
            k->rc = k->err.code;
            return NULL;
        }
        k->boot.redis = r;
    }
    k->rc = ftc_coll_nccl_rendezvous(&k->boot, k->rank, k->size, k->id,
                                     ftc_deadline_in_ms((uint64_t)k->dl_ms), &k->err);
    ftc_redis_close(r);
    k->boot.redis = NULL;
    return NULL;
}

static void fill_id(uint8_t *id, uint8_t seed)
{
    for (int i = 0; i < FTC_COLL_NCCL_ID_BYTES; i++)
        id[i] = (uint8_t)(seed * 31 + i * 7);
}

/* Runs ranks[0..n) concurrently. */
static void run(rk_t *ks, int n)
{
    pthread_t t[8];
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, rank_main, &ks[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static rk_t mk(const char *dir, const ftc_redis_url_t *url, const char *job, uint64_t gen,
               int rank, int size, int dl_ms)
{
    rk_t k;
    memset(&k, 0, sizeof k);
    ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
    b.dir = dir;
    b.job = job;
    b.generation = gen;
    b.ttl_ms = 60000;
    k.boot = b;
    k.url = url;
    k.rank = rank, k.size = size, k.dl_ms = dl_ms;
    if (rank == 0)
        fill_id(k.id, (uint8_t)gen);
    return k;
}

/* For the Redis carrier: each rank thread connects on its own. */
static rk_t mkr(redis_fixture_t *f, const char *job, uint64_t gen, int rank, int size, int dl_ms)
{
    rk_t k = mk(NULL, ftc_redis_server_url(f->srv), job, gen, rank, size, dl_ms);
    k.boot.redis = (ftc_redis_t *)1; /* never used: rank_main connects */
    return k;
}

/* ---- the common checks, per carrier --------------------------------------- */

static void check_group(rk_t *ks, int n, uint64_t gen)
{
    run(ks, n);
    uint8_t want[FTC_COLL_NCCL_ID_BYTES];
    fill_id(want, (uint8_t)gen);
    for (int i = 0; i < n; i++) {
        if (ks[i].rc)
            print_error("rank %d: %s\n", ks[i].rank, ks[i].err.msg);
        assert_int_equal(ks[i].rc, 0);
        assert_memory_equal(ks[i].id, want, sizeof want);
    }
}

static void test_dir(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("ncclboot");
    rk_t ks[4];
    /* four ranks, generation 3: everyone gets rank 0's id */
    for (int r = 0; r < 4; r++)
        ks[r] = mk(dir, NULL, NULL, 3, r, 4, 20000);
    check_group(ks, 4, 3);

    /* ranks 0 and 2 of 3 at generation 4: rank 1 is named at the deadline */
    ks[0] = mk(dir, NULL, NULL, 4, 0, 3, 300);
    ks[1] = mk(dir, NULL, NULL, 4, 2, 3, 300);
    run(ks, 2);
    for (int i = 0; i < 2; i++) {
        printf("  %s\n", ks[i].err.msg);
        assert_int_equal(ks[i].rc, FTC_ETIMEDOUT);
        assert_non_null(strstr(ks[i].err.msg, "(ranks 1)"));
    }
    /* rank 1 alone at generation 6: the id from rank 0 and rank 0 are missing */
    ks[0] = mk(dir, NULL, NULL, 6, 1, 2, 200);
    run(ks, 1);
    assert_int_equal(ks[0].rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(ks[0].err.msg, "missing: the id from rank 0 and"));
    assert_non_null(strstr(ks[0].err.msg, "(ranks 0)"));

    /* generation 5 published (a group of one); ranks at 4 are refused, at once */
    ks[0] = mk(dir, NULL, NULL, 5, 0, 1, 5000);
    check_group(ks, 1, 5);
    ks[0] = mk(dir, NULL, NULL, 4, 0, 2, 5000);
    ks[1] = mk(dir, NULL, NULL, 4, 1, 2, 5000);
    uint64_t t0 = ftc_now_ns();
    run(ks, 2);
    printf("  stale refusal after %.0f ms: %s\n", (double)(ftc_now_ns() - t0) / 1e6,
           ks[1].err.msg);
    assert_int_equal(ks[0].rc, FTC_ESTALE);
    assert_int_equal(ks[1].rc, FTC_ESTALE);
    assert_non_null(strstr(ks[1].err.msg, "generation 5"));

    /* a rank told another size: FTC_EPROTO, naming both sizes */
    ks[0] = mk(dir, NULL, NULL, 7, 0, 2, 3000);
    ks[1] = mk(dir, NULL, NULL, 7, 1, 3, 3000);
    run(ks, 2);
    assert_int_equal(ks[1].rc, FTC_EPROTO);
    assert_non_null(strstr(ks[1].err.msg, "group of 2 ranks"));

    /* a corrupt record */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/nccl.8.id", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("not an id record", f);
    fclose(f);
    ks[0] = mk(dir, NULL, NULL, 8, 1, 2, 3000);
    run(ks, 1);
    assert_int_equal(ks[0].rc, FTC_ECORRUPT);

    ftc_test_rmrf(dir);
    free(dir);
}

static atomic_int g_abort;

static void *set_abort(void *arg)
{
    (void)arg;
    ftc_sleep_ms(150);
    atomic_store(&g_abort, 1);
    return NULL;
}

static void test_abort_and_args(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("ncclboot");
    rk_t k = mk(dir, NULL, NULL, 1, 1, 2, 30000);
    atomic_store(&g_abort, 0);
    k.boot.abort = &g_abort;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, set_abort, NULL), 0);
    uint64_t t0 = ftc_now_ns();
    run(&k, 1);
    pthread_join(t, NULL);
    printf("  abort flag: returned %d after %.0f ms: %s\n", k.rc,
           (double)(ftc_now_ns() - t0) / 1e6, k.err.msg);
    assert_int_equal(k.rc, FTC_ECANCELED);

    ftc_err_t err = {0};
    uint8_t id[FTC_COLL_NCCL_ID_BYTES] = {0};
    ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
    assert_int_equal(ftc_coll_nccl_rendezvous(&b, 0, 1, id, ftc_deadline_in_ms(100), &err),
                     FTC_EINVAL); /* neither dir nor redis */
    assert_non_null(strstr(err.msg, "exactly one"));
    b.dir = dir;
    assert_int_equal(ftc_coll_nccl_rendezvous(&b, 2, 2, id, ftc_deadline_in_ms(100), &err),
                     FTC_EINVAL);
    b.struct_size = 0;
    assert_int_equal(ftc_coll_nccl_rendezvous(&b, 0, 1, id, ftc_deadline_in_ms(100), &err),
                     FTC_EINVAL);
    assert_int_equal(ftc_coll_nccl_rendezvous(NULL, 0, 1, id, ftc_deadline_in_ms(100), &err),
                     FTC_EINVAL);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_redis(void **state)
{
    redis_fixture_t *f = *state;
    char job[64];
    snprintf(job, sizeof job, "ncclboot-%ld", (long)getpid());
    rk_t ks[4];
    for (int r = 0; r < 3; r++)
        ks[r] = mkr(f, job, 3, r, 3, 20000);
    check_group(ks, 3, 3);

    /* the keys expire */
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    assert_non_null(r);
    char key[160];
    const char *names[] = {"nccl:gen", "nccl:3:id", "nccl:3:ranks"};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "ftc:{%s}:%s", job, names[i]);
        ftc_redis_reply_t *rep = NULL;
        long long ttl = -5;
        assert_int_equal(ftc_redis_cmdv(r, true, &rep, "PTTL", key, NULL), 0);
        assert_int_equal(ftc_redis_want_int(rep, "PTTL", &ttl, &err), 0);
        ftc_redis_reply_free(rep);
        printf("  %s: ttl %lld ms\n", key, ttl);
        assert_true(ttl > 0 && ttl <= 60000);
    }
    ftc_redis_close(r);

    /* rank 1 of 3 alone at generation 4: the id and ranks 0, 2 are named */
    ks[0] = mkr(f, job, 4, 1, 3, 300);
    run(ks, 1);
    printf("  %s\n", ks[0].err.msg);
    assert_int_equal(ks[0].rc, FTC_ETIMEDOUT);
    assert_non_null(strstr(ks[0].err.msg, "missing: the id from rank 0 and"));
    assert_non_null(strstr(ks[0].err.msg, "(ranks 0, 2)"));

    /* generation 5 published; rank 0 and rank 1 at generation 4 are refused */
    ks[0] = mkr(f, job, 5, 0, 1, 5000);
    check_group(ks, 1, 5);
    ks[0] = mkr(f, job, 4, 0, 2, 5000);
    ks[1] = mkr(f, job, 4, 1, 2, 5000);
    run(ks, 2);
    printf("  %s\n", ks[0].err.msg);
    assert_int_equal(ks[0].rc, FTC_ESTALE);
    assert_int_equal(ks[1].rc, FTC_ESTALE);
    assert_non_null(strstr(ks[1].err.msg, "generation 5"));

    /* another size */
    ks[0] = mkr(f, job, 9, 0, 2, 3000);
    ks[1] = mkr(f, job, 9, 1, 4, 3000);
    run(ks, 2);
    assert_int_equal(ks[1].rc, FTC_EPROTO);

    /* no job name */
    uint8_t id[FTC_COLL_NCCL_ID_BYTES] = {0};
    ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
    b.redis = (ftc_redis_t *)1;
    assert_int_equal(ftc_coll_nccl_rendezvous(&b, 0, 1, id, ftc_deadline_in_ms(100), &err),
                     FTC_EINVAL);
}

/* create in a build without NCCL, or on a machine without a GPU: a clear
 * error, never a crash. (Forked: CUDA is initialised in the child only.) */
static void test_create_without_gpu(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (ftc_gpu_count(NULL) > 0)
            _exit(77); /* a GPU here: test_coll_nccl covers create */
        char *dir = ftc_test_tmpdir("ncclboot");
        ftc_coll_nccl_boot_t b = FTC_COLL_NCCL_BOOT_INIT;
        b.dir = dir;
        ftc_coll_t *c = (ftc_coll_t *)1;
        ftc_err_t err = {0};
        int rc = ftc_coll_nccl_create(0, 1, 0, &b, ftc_deadline_in_ms(5000), &c, &err);
        printf("  create without %s: %d: %s\n", ftc_coll_nccl_built() ? "a GPU" : "NCCL", rc,
               err.msg);
        ftc_test_rmrf(dir);
        free(dir);
        int want = ftc_coll_nccl_built() ? FTC_ECUDA : FTC_EUNSUPPORTED;
        if (rc != want || c != NULL)
            _exit(1);
        if (!ftc_coll_nccl_built() && !strstr(err.msg, "no NCCL"))
            _exit(2);
        ftc_coll_t *nc = (ftc_coll_t *)1;
        if (!ftc_coll_nccl_built() &&
            (ftc_coll_nccl_shrink(NULL, NULL, 0, ftc_deadline_in_ms(10), &nc, &err) !=
                 FTC_EUNSUPPORTED ||
             nc))
            _exit(3);
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        printf("  (a GPU is present: create is covered by test_trainer_coll_nccl)\n");
        return;
    }
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dir),
        cmocka_unit_test(test_abort_and_args),
        cmocka_unit_test_setup_teardown(test_redis, redis_fixture_setup, redis_fixture_teardown),
        cmocka_unit_test(test_create_without_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
