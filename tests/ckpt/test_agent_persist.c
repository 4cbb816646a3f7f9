/* test_agent_persist.c — the agent's persist thread (ckpt/agent_persist.h)
 * against a real persist directory: a submitted version is written off the
 * caller's thread and loads back; a second submission while one is pending
 * is refused; an injected I/O failure comes back as a result with the
 * reason (the agent turns it into a persist_failed event) and the writer
 * keeps working; stop with a queued write neither hangs nor crashes; a
 * held write (FTC_TEST_PERSIST_HOLD) leaves loads through a read-only
 * handle free, and stop ends the hold. */
#include "ftc_test.h"

#include "ckpt/agent_persist.h"
#include "core/clock.h"
#include "core/fsio.h"

#include <string.h>

/* Polls for the result with a deadline (the test never hangs). */
static ftc__persist_result_t result_of(ftc__persister_t *w)
{
    ftc__persist_result_t res;
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    while (!ftc__persister_poll(w, &res)) {
        if (ftc_deadline_expired(d))
            fail_msg("no persist result within 30 s");
        ftc_sleep_ms(2);
    }
    return res;
}

static void test_write_refuse_fail_recover(void **state)
{
    (void)state;
    char *dir = ftc_test_tmpdir("agent-persist");
    ftc_fault_t f;
    ftc_err_t err = {0};
    assert_int_equal(ftc_fault_parse(&f, "", &err), 0);
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.threads = 2;
    o.fault = &f;
    ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
    assert_non_null(p);
    ftc__persister_t *w = ftc__persister_start(p, &err);
    assert_non_null(w);
    uint64_t sz[2];
    uint8_t *sh5[2] = {ftc_test_make_shard(5, 0, 4096, 1, &sz[0]),
                       ftc_test_make_shard(5, 1, 4096, 2, &sz[1])};
    /* 1. written on the writer's thread; a second version meanwhile is refused */
    assert_true(ftc__persister_submit(w, 5, (const void *const *)sh5, sz, 2));
    assert_false(ftc__persister_submit(w, 5, (const void *const *)sh5, sz, 2));
    ftc__persister_wait(w);
    assert_false(ftc__persister_submit(w, 5, (const void *const *)sh5, sz, 2)); /* not polled */
    ftc__persist_result_t r = result_of(w);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.step, 5);
    assert_int_equal(r.n_shards, 2);
    ftc__persist_result_t again;
    assert_false(ftc__persister_poll(w, &again)); /* reported once */
    ftc_persist_loaded_t *l = NULL;
    ftc_persist_t *rd = ftc_persist_open_reader(dir, &err); /* how the agent loads */
    assert_non_null(rd);
    assert_int_equal(ftc_persist_load(rd, 5, &l), 0);
    assert_int_equal(l->n_shards, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(l->sizes[i], sz[i]);
        assert_memory_equal(l->shards[i], sh5[i], sz[i]);
    }
    ftc_persist_loaded_free(l);
    /* 2. an I/O failure is a result with the reason, not a hang */
    uint8_t *sh6[2] = {ftc_test_make_shard(6, 0, 4096, 3, &sz[0]),
                       ftc_test_make_shard(6, 1, 4096, 4, &sz[1])};
    assert_int_equal(ftc_fault_parse(&f, "write:1", &err), 0);
    assert_true(ftc__persister_submit(w, 6, (const void *const *)sh6, sz, 2));
    r = result_of(w);
    assert_int_equal(r.rc, FTC_EIO);
    assert_int_equal(r.step, 6);
    assert_non_null(strstr(r.detail, "injected"));
    /* 3. and the writer goes on: the same version, faults off */
    assert_int_equal(ftc_fault_parse(&f, "", &err), 0);
    assert_true(ftc__persister_submit(w, 6, (const void *const *)sh6, sz, 2));
    r = result_of(w);
    assert_int_equal(r.rc, 0);
    /* 4. stop with a write queued or running */
    uint8_t *sh7[1] = {ftc_test_make_shard(7, 0, 4096, 5, &sz[0])};
    assert_true(ftc__persister_submit(w, 7, (const void *const *)sh7, sz, 1));
    ftc__persister_stop(w);
    ftc__persister_stop(NULL);
    /* bad submissions are refused */
    w = ftc__persister_start(p, &err);
    assert_non_null(w);
    assert_false(ftc__persister_submit(w, 8, (const void *const *)sh7, sz, 0));
    assert_false(ftc__persister_submit(w, 8, (const void *const *)sh7, sz,
                                       FTC__PERSIST_MAX_SHARDS + 1));
    ftc__persister_stop(w);
    /* 5. a write held (FTC_TEST_PERSIST_HOLD: a hung file system) does not
     * hold up loads through a reader, which do not see it; stop ends it */
    char hold[4200];
    snprintf(hold, sizeof hold, "%s/hold", dir);
    FILE *h = fopen(hold, "w");
    assert_non_null(h);
    fclose(h);
    setenv("FTC_TEST_PERSIST_HOLD", hold, 1);
    w = ftc__persister_start(p, &err);
    unsetenv("FTC_TEST_PERSIST_HOLD");
    assert_non_null(w);
    uint8_t *sh9[1] = {ftc_test_make_shard(9, 0, 4096, 6, &sz[0])};
    assert_true(ftc__persister_submit(w, 9, (const void *const *)sh9, sz, 1));
    assert_int_equal(ftc_persist_load(rd, 6, &l), 0);
    ftc_persist_loaded_free(l);
    assert_int_not_equal(ftc_persist_load(rd, 9, &l), 0); /* not committed while held */
    ftc__persister_stop(w);
    ftc_persist_close(rd);
    ftc_persist_close(p);
    free(sh9[0]);
    for (int i = 0; i < 2; i++) {
        free(sh5[i]);
        free(sh6[i]);
    }
    free(sh7[0]);
    ftc_test_rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_refuse_fail_recover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
