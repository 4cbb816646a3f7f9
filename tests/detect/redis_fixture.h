/* redis_fixture.h — a real redis-server per test (embedded-server code). */
#ifndef FTC_TEST_REDIS_FIXTURE_H
#define FTC_TEST_REDIS_FIXTURE_H

#include "ftc_test.h"

#include "detect/control.h"
#include "detect/redis.h"
#include "detect/redis_server.h"

typedef struct redis_fixture {
    char *dir;
    ftc_redis_server_t *srv;
} redis_fixture_t;

static inline int redis_fixture_setup(void **state)
{
    redis_fixture_t *f = calloc(1, sizeof *f);
    f->dir = ftc_test_tmpdir("redis");
    ftc_redis_server_options_t o = FTC_REDIS_SERVER_OPTIONS_INIT;
    o.dir = f->dir;
    ftc_err_t err = {0};
    f->srv = ftc_redis_server_start(&o, &err);
    if (!f->srv)
        fail_msg("embedded redis did not start: %s", err.msg);
    *state = f;
    return 0;
}

static inline int redis_fixture_teardown(void **state)
{
    redis_fixture_t *f = *state;
    ftc_redis_server_stop(f->srv);
    ftc_test_rmrf(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static inline ftc_ctl_t *redis_fixture_ctl(redis_fixture_t *f, const char *job)
{
    ftc_err_t err = {0};
    ftc_redis_t *r = ftc_redis_connect(ftc_redis_server_url(f->srv), NULL, &err);
    if (!r)
        fail_msg("connect: %s", err.msg);
    ftc_ctl_t *c = ftc_ctl_create(r, job, &err);
    if (!c)
        fail_msg("ctl: %s", err.msg);
    return c;
}

#endif
