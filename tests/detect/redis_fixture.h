/* redis_fixture.h — a real redis-server per test (embedded-server code). */
#ifndef FTC_TEST_REDIS_FIXTURE_H
#define FTC_TEST_REDIS_FIXTURE_H

#include "ftc_test.h"

#include "detect/control.h"
#include "detect/redis.h"
#include "detect/redis_server.h"

#include <hiredis/hiredis.h>

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

/* The job's event stream, oldest first (XRANGE; the caller frees the reply
 * with ftc_redis_reply_free); entry i's fields by redis_fixture_event_field. */
static inline ftc_redis_reply_t *redis_fixture_events(redis_fixture_t *f, const char *job)
{
    ftc_ctl_t *c = redis_fixture_ctl(f, job);
    char key[128];
    ftc_redis_reply_t *rep;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "XRANGE",
                                    ftc_ctl_key(c, "events", key, sizeof key), "-", "+", NULL), 0);
    ftc_ctl_destroy(c);
    return rep;
}

/* Field `name` of entry i of redis_fixture_events' reply; NULL when it has none. */
static inline const char *redis_fixture_event_field(const ftc_redis_reply_t *rep, size_t i,
                                                    const char *name)
{
    const ftc_redis_reply_t *fields = rep->element[i]->element[1];
    const char *v = NULL;
    for (size_t j = 0; j + 1 < fields->elements; j += 2)
        if (!strcmp(fields->element[j]->str, name))
            v = fields->element[j + 1]->str;
    return v;
}

#endif
