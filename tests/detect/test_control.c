/*
 * test_control.c — the Redis keyspace against a real server: generations
 * fenced by the lease epoch, lease expiry and takeover, commit atomicity
 * under many concurrent reporters (never backwards, never stale), failure
 * reports exactly once, reseeding after data loss, the set of committed
 * steps (at or before a step, newest first), garbage planted in every
 * key kind getting a clear error, and ftc_ctl_clean removing a job's keys
 * (only its own, and only once it looks dead, unless forced).
 */
#include "redis_fixture.h"

#include <inttypes.h>

#include "detect/status.h"

#include <pthread.h>

/* Asserts that `want` ("": nobody) holds the lease of c's job; returns its TTL in ms. */
static int64_t leader_ttl(ftc_ctl_t *c, const char *want)
{
    char holder[64];
    int64_t ttl;
    uint64_t ep;
    assert_int_equal(ftc_ctl_leader(c, holder, sizeof holder, &ep, &ttl), 0);
    assert_string_equal(holder, want);
    return ttl;
}

static void test_lease_and_fenced_generations(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *a = redis_fixture_ctl(f, "job1"), *b = redis_fixture_ctl(f, "job1");
    uint64_t gen, ep_a, ep_b, out;
    uint32_t world;
    bool held;
    assert_int_equal(ftc_ctl_generation(a, &gen, &world), 0);
    assert_int_equal(gen, 0);
    assert_int_equal(ftc_ctl_lease_acquire(a, "node-a:1", 300, &held, &ep_a), 0);
    assert_true(held);
    assert_int_equal(ftc_ctl_lease_acquire(b, "node-b:1", 300, &held, &ep_b), 0);
    assert_false(held);
    assert_true(ep_b == ep_a);
    int64_t ttl = leader_ttl(b, "node-a:1");
    assert_true(ttl > 0 && ttl <= 300);
    /* only the holder can bump, and only from the generation it saw */
    assert_int_equal(ftc_ctl_generation_bump(b, "node-b:1", ep_a, 0, 4, "test", &out), FTC_EAUTH);
    assert_int_equal(ftc_ctl_generation_bump(a, "node-a:1", ep_a, 0, 4, "start", &out), 0);
    assert_int_equal(out, 1);
    assert_int_equal(ftc_ctl_generation_bump(a, "node-a:1", ep_a, 0, 4, "again", &out), FTC_ESTALE);
    assert_non_null(strstr(ftc_ctl_errstr(a), "generation is 1"));
    assert_int_equal(ftc_ctl_lease_renew(a, "node-a:1", ep_a, 300, &held), 0);
    assert_true(held);
    /* a's lease runs out (as if it were SIGSTOPped); b takes over with a new epoch */
    ftc_sleep_ms(400);
    assert_int_equal(ftc_ctl_lease_acquire(b, "node-b:1", 300, &held, &ep_b), 0);
    assert_true(held);
    assert_true(ep_b > ep_a);
    /* a resumes: renewal tells it the lease is gone, and its old epoch is fenced */
    assert_int_equal(ftc_ctl_lease_renew(a, "node-a:1", ep_a, 300, &held), 0);
    assert_false(held);
    assert_int_equal(ftc_ctl_generation_bump(a, "node-a:1", ep_a, 1, 3, "stale", &out), FTC_EAUTH);
    assert_int_equal(ftc_ctl_generation_bump(b, "node-b:1", ep_b, 1, 3, "shrink", &out), 0);
    assert_int_equal(out, 2);
    assert_int_equal(ftc_ctl_generation(a, &gen, &world), 0);
    assert_int_equal(gen, 2);
    assert_int_equal(world, 3);
    assert_int_equal(ftc_ctl_lease_release(b, "node-b:1", ep_b), 0);
    leader_ttl(a, ""); /* nobody's */
    ftc_ctl_destroy(a);
    ftc_ctl_destroy(b);
}

/* Sets generation `gen` with world size `world` through a lease. */
static void set_generation(ftc_ctl_t *c, uint32_t world, uint64_t *gen)
{
    bool held;
    uint64_t ep, g;
    uint32_t w;
    assert_int_equal(ftc_ctl_lease_acquire(c, "setter:1", 5000, &held, &ep), 0);
    assert_true(held);
    assert_int_equal(ftc_ctl_generation(c, &g, &w), 0);
    assert_int_equal(ftc_ctl_generation_bump(c, "setter:1", ep, g, world, "test", gen), 0);
    assert_int_equal(ftc_ctl_lease_release(c, "setter:1", ep), 0);
}

typedef struct reporter {
    redis_fixture_t *f;
    uint64_t gen;
    uint32_t ranks[2]; /* this thread reports these two ranks */
    int steps;
    int commits;       /* calls that committed a step */
    int64_t max_seen;  /* committed step never moves backwards across calls */
    int backwards;
    int errors;
} reporter_t;

static void *reporter_main(void *arg)
{
    reporter_t *r = arg;
    ftc_ctl_t *c = redis_fixture_ctl(r->f, "job2");
    r->max_seen = -1;
    for (int s = 0; s < r->steps; s++) {
        for (int k = 0; k < 2; k++) {
            int64_t committed;
            bool now;
            if (ftc_ctl_commit_report(c, r->gen, s, r->ranks[k], 0xabcull + (uint64_t)s,
                                      &committed, &now) != 0) {
                r->errors++;
                continue;
            }
            r->commits += now;
            if (committed < r->max_seen)
                r->backwards++;
            if (committed > r->max_seen)
                r->max_seen = committed;
        }
    }
    ftc_ctl_destroy(c);
    return NULL;
}

static void test_commit_atomic_under_concurrency(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job2");
    uint64_t gen;
    set_generation(c, 8, &gen);
    enum { THREADS = 4, STEPS = 60 };
    reporter_t rep[THREADS];
    pthread_t tid[THREADS];
    for (int t = 0; t < THREADS; t++) {
        rep[t] = (reporter_t){.f = f, .gen = gen, .ranks = {2u * t, 2u * t + 1}, .steps = STEPS};
        pthread_create(&tid[t], NULL, reporter_main, &rep[t]);
    }
    int commits = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        commits += rep[t].commits;
        assert_int_equal(rep[t].errors, 0);
        assert_int_equal(rep[t].backwards, 0);
    }
    /* every step committed exactly once, by whichever report completed it */
    assert_int_equal(commits, STEPS);
    int64_t step;
    uint64_t g;
    assert_int_equal(ftc_ctl_committed(c, &step, &g), 0);
    assert_int_equal(step, STEPS - 1);
    assert_int_equal(g, gen);
    /* an old step after a newer commit: no effect, never backwards */
    int64_t committed;
    bool now;
    assert_int_equal(ftc_ctl_commit_report(c, gen, 3, 0, 1, &committed, &now), 0);
    assert_false(now);
    assert_int_equal(committed, STEPS - 1);
    /* a stale generation is refused; so is a rank outside the world */
    assert_int_equal(ftc_ctl_commit_report(c, gen - 1, STEPS, 0, 1, &committed, &now), FTC_ESTALE);
    assert_int_equal(ftc_ctl_commit_report(c, gen, STEPS, 8, 1, &committed, &now), FTC_ERANGE);
    ftc_ctl_destroy(c);
}

typedef struct racer {
    redis_fixture_t *f;
    int first;
} racer_t;

static void *racer_main(void *arg)
{
    racer_t *r = arg;
    ftc_ctl_t *c = redis_fixture_ctl(r->f, "job3");
    ftc_ctl_event_t e = {.kind = "node_lost", .node = "n7", .rank = -1, .generation = 4,
                         .step = 10, .detail = "heartbeat expired"};
    bool first = false;
    assert_int_equal(ftc_ctl_report(c, "node_lost:n7", &e, &first), 0);
    r->first = first;
    ftc_ctl_destroy(c);
    return NULL;
}

static void test_failure_reported_exactly_once(void **state)
{
    redis_fixture_t *f = *state;
    enum { N = 6 };
    racer_t r[N];
    pthread_t tid[N];
    for (int i = 0; i < N; i++) {
        r[i] = (racer_t){.f = f};
        pthread_create(&tid[i], NULL, racer_main, &r[i]);
    }
    int firsts = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(tid[i], NULL);
        firsts += r[i].first;
    }
    assert_int_equal(firsts, 1);
    ftc_ctl_t *c = redis_fixture_ctl(f, "job3");
    char key[128];
    ftc_redis_reply_t *rep;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "XLEN",
                                    ftc_ctl_key(c, "events", key, sizeof key), NULL), 0);
    long long n;
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_want_int(rep, "XLEN", &n, &err), 0);
    assert_int_equal(n, 1);
    ftc_redis_reply_free(rep);
    ftc_ctl_destroy(c);
}

static void test_reseed_after_data_loss(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job4");
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "FLUSHALL", NULL), 0);
    assert_int_equal(ftc_ctl_reseed(c, 5, 4, 10), 0);
    assert_int_equal(ftc_ctl_reseed(c, 3, 2, 7), 0); /* lower values never win */
    uint64_t gen;
    uint32_t world;
    int64_t step;
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_int_equal(gen, 5);
    assert_int_equal(world, 4);
    assert_int_equal(ftc_ctl_committed(c, &step, &gen), 0);
    assert_int_equal(step, 10);
    /* a rendezvous that put the generation back (world unknown: 0) gets its
     * world from an agent of that generation, and only from one */
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "FLUSHALL", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET", "ftc:{job4}:gen", "gen",
                                    "6", "world", "0", NULL), 0);
    assert_int_equal(ftc_ctl_reseed(c, 5, 4, -1), 0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 6 && world == 0);
    assert_int_equal(ftc_ctl_reseed(c, 6, 3, -1), 0);
    assert_int_equal(ftc_ctl_reseed(c, 6, 5, -1), 0); /* set once: no second opinion */
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 6 && world == 3);
    ftc_ctl_destroy(c);
}

static void test_garbage_in_every_key_kind(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job5");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char k[128];
    uint64_t gen, ep;
    uint32_t world;
    int64_t step;
    bool held;
    /* generation hash with a non-number */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ftc_ctl_key(c, "gen", k, sizeof k),
                                    "gen", "seven", "world", "4", NULL), 0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), FTC_EPROTO);
    assert_non_null(strstr(ftc_ctl_errstr(c), "ftc:{job5}:gen"));
    int64_t committed;
    bool now;
    assert_int_equal(ftc_ctl_commit_report(c, 1, 1, 0, 1, &committed, &now), FTC_EPROTO);
    /* generation key of the wrong type */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", k, NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", k, "x", NULL), 0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), FTC_EPROTO);
    assert_non_null(strstr(ftc_ctl_errstr(c), "WRONGTYPE"));
    assert_non_null(strstr(ftc_ctl_errstr(c), "ftc:{job5}:gen"));
    /* leader key holding garbage */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", ftc_ctl_key(c, "leader", k, sizeof k),
                                    "garbage", NULL), 0);
    assert_int_equal(ftc_ctl_lease_acquire(c, "n:1", 1000, &held, &ep), FTC_EPROTO);
    assert_non_null(strstr(ftc_ctl_errstr(c), "holds \"garbage\""));
    char holder[64];
    int64_t ttl;
    assert_int_equal(ftc_ctl_leader(c, holder, sizeof holder, &ep, &ttl), FTC_EPROTO);
    /* commit record with a non-number step */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ftc_ctl_key(c, "commit", k, sizeof k),
                                    "step", "many", NULL), 0);
    assert_int_equal(ftc_ctl_committed(c, &step, &gen), FTC_EPROTO);
    assert_non_null(strstr(ftc_ctl_errstr(c), "ftc:{job5}:commit"));
    /* heartbeat values */
    ftc_ctl_heartbeat_t hb;
    ftc_err_t err = {0};
    assert_int_equal(ftc_ctl_heartbeat_parse("1 2 3 4", 7, &hb, &err), 0);
    assert_int_equal(hb.step, 2);
    const char *bad[] = {"", "1 2 3", "a b c d", "1 2 3 4 5", "1 -5 3 4",
                         /* negative unsigned fields wrapped around (sscanf %llu) */
                         "-1 2 3 4", "1 2 -3 4", "1 2 3 -4",
                         /* out of range: clamped silently */
                         "18446744073709551616 2 3 4", "1 9223372036854775808 3 4",
                         "1 2 3 99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ftc_ctl_heartbeat_parse(bad[i], strlen(bad[i]), &hb, &err) != FTC_EPROTO)
            fail_msg("heartbeat '%s' parsed: gen %" PRIu64 " step %" PRId64 " step_time %" PRIu64
                     " wall %" PRIu64, bad[i], hb.generation, hb.step, hb.step_time_us,
                     hb.wall_ms);
    assert_int_equal(ftc_ctl_heartbeat_parse("18446744073709551615 -1 0 9223372036854775807",
                                             46, &hb, &err), 0);
    assert_true(hb.generation == UINT64_MAX && hb.step == -1);
    /* leader values and member records: whole words and whole numbers
     * (fuzz_records found sscanf taking "n:1 -1" for epoch 2^64-1, and a
     * host of 128 characters for a host and a domain) */
    char h[160], longhost[200];
    memset(longhost, 'h', 128);
    snprintf(longhost + 128, sizeof longhost - 128, " 7 8");
    assert_int_equal(ftc_ctl_leader_parse("n:1:5 7", 7, "k", h, sizeof h, &ep, &err), 0);
    assert_true(!strcmp(h, "n:1:5") && ep == 7);
    const char *bad_leader[] = {"n:1 -1", "n:1 7x", "n:1 18446744073709551616", "n:1"};
    for (size_t i = 0; i < sizeof bad_leader / sizeof bad_leader[0]; i++)
        if (ftc_ctl_leader_parse(bad_leader[i], strlen(bad_leader[i]), "k", h, sizeof h, &ep,
                                 &err) != FTC_EPROTO)
            fail_msg("leader '%s' parsed: '%s' %" PRIu64, bad_leader[i], h, ep);
    ftc_ctl_member_rec_t mr;
    assert_int_equal(ftc_ctl_member_parse("h0 - -3 5", &mr, &err), 0);
    assert_true(!strcmp(mr.host, "h0") && !strcmp(mr.domain, "-") && mr.pid == -3 &&
                mr.joined_ok && mr.joined_ms == 5 && !strcmp(mr.joined, "5"));
    assert_int_equal(ftc_ctl_member_parse("h0 d 3 -5", &mr, &err), 0); /* an incarnation... */
    assert_false(mr.joined_ok);                                          /* ...not a time */
    const char *bad_member[] = {longhost, "h d 4x 5", "t - 4\xff", "h d 99999999999999999999 5",
                                "h d 1"};
    for (size_t i = 0; i < sizeof bad_member / sizeof bad_member[0]; i++)
        if (ftc_ctl_member_parse(bad_member[i], &mr, &err) != FTC_EPROTO)
            fail_msg("member '%.60s' parsed: '%s' '%s' %lld '%s'", bad_member[i], mr.host,
                     mr.domain, mr.pid, mr.joined);
    /* ftc:{J}:linked: missing is "not known", "1" is linked, anything else garbage */
    bool linked = true;
    assert_int_equal(ftc_ctl_linked(c, &linked), 0);
    assert_false(linked);
    assert_int_equal(ftc_ctl_linked_set(c), 0);
    assert_int_equal(ftc_ctl_linked(c, &linked), 0);
    assert_true(linked);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", ftc_ctl_key(c, "linked", k, sizeof k),
                                    "yes", NULL), 0);
    assert_int_equal(ftc_ctl_linked(c, &linked), FTC_EPROTO);
    assert_false(linked);
    assert_non_null(strstr(ftc_ctl_errstr(c), "ftc:{job5}:linked holds 'yes'"));
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", k, NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", k, "a", "b", NULL), 0);
    assert_int_equal(ftc_ctl_linked(c, &linked), FTC_EPROTO); /* WRONGTYPE */
    /* bad ids are refused before they reach Redis */
    ftc_ctl_member_t m = {.node = "bad node"};
    assert_int_equal(ftc_ctl_join(c, &m), FTC_EINVAL);
    assert_null(ftc_ctl_create(NULL, "bad job", &err));
    assert_null(ftc_ctl_create(NULL, "", &err));
    ftc_ctl_destroy(c);
}


/* Asserts that the last call's error is FTC_CORRUPT-like: names key and the value. */
static void assert_names(ftc_ctl_t *c, const char *key, const char *val, const char *what)
{
    const char *m = ftc_ctl_errstr(c);
    if (!strstr(m, key) || !strstr(m, val))
        fail_msg("%s: error '%s' does not name %s and '%s'", what, m, key, val);
}

/* Reads field of hash key back, to check that nothing overwrote it. */
static void assert_field(ftc_redis_t *r, const char *key, const char *field, const char *want)
{
    ftc_redis_reply_t *rep;
    assert_int_equal(ftc_redis_cmdv(r, true, &rep, "HGET", key, field, NULL), 0);
    const char *s = "";
    size_t len = 0;
    ftc_err_t err = {0};
    assert_int_equal(ftc_redis_want_str(rep, key, &s, &len, &err), 0);
    if (len != strlen(want) || memcmp(s, want, len))
        fail_msg("%s field %s is '%.*s', not '%s' (overwritten)", key, field, (int)len, s, want);
    ftc_redis_reply_free(rep);
}

/* The generation (and the world, committed step and commit generation) are
 * read as strictly as the rendezvous reads gen: decimal digits only, below
 * 2^53. Anything else is FTC_EPROTO naming the key and its content, in the C
 * readers and in every script, and no script overwrites it (reseed took
 * garbage for 0 and wrote over it; tonumber and strtoll read " 1" or "+1" as 1
 * where the rendezvous reports the key corrupt). */
static void test_integer_fields_read_strictly(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job9");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char gk[64], ck[64];
    ftc_ctl_key(c, "gen", gk, sizeof gk);
    ftc_ctl_key(c, "commit", ck, sizeof ck);
    const char *bad[] = {" 1", "+1", "1 ", "1.5", "0x1", "1e0", "-1", "seven", "",
                         "9007199254740992", "99999999999999999999"};
    uint64_t gen, ep, out;
    uint32_t world;
    int64_t step, committed;
    bool held, now, flag;
    assert_int_equal(ftc_ctl_lease_acquire(c, "n:1", 60000, &held, &ep), 0);
    assert_true(held);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *v = bad[i];
        print_message("gen '%s'\n", v);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", gk, ck, NULL), 0);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", v, "world", "4", NULL),
                         0);
        assert_int_equal(ftc_ctl_generation(c, &gen, &world), FTC_EPROTO);
        assert_names(c, gk, v, "generation");
        assert_int_equal(ftc_ctl_generation_bump(c, "n:1", ep, 1, 4, "t", &out), FTC_EPROTO);
        assert_names(c, gk, v, "generation_bump");
        assert_int_equal(ftc_ctl_commit_report(c, 1, 1, 0, 1, &committed, &now), FTC_EPROTO);
        assert_names(c, gk, v, "commit_report");
        assert_int_equal(ftc_ctl_reseed(c, 5, 4, 3), FTC_EPROTO);
        assert_names(c, gk, v, "reseed");
        assert_field(r, gk, "gen", v);
        assert_int_equal(ftc_ctl_committed(c, &step, &gen), 0); /* reseed wrote nothing */
        assert_int_equal(step, -1);
        /* the world beside a valid generation */
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "1", "world", v, NULL),
                         0);
        assert_int_equal(ftc_ctl_generation(c, &gen, &world), FTC_EPROTO);
        assert_names(c, gk, v, "generation world");
        assert_int_equal(ftc_ctl_commit_report(c, 1, 1, 0, 1, &committed, &now), FTC_EPROTO);
        assert_names(c, gk, v, "commit_report world");
        assert_int_equal(ftc_ctl_reseed(c, 1, 4, -1), FTC_EPROTO);
        assert_names(c, gk, v, "reseed world");
        assert_field(r, gk, "world", v);
        /* the commit record's step and generation */
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "1", "world", "1", NULL),
                         0);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ck, "step", v, "gen", "1", NULL),
                         0);
        assert_int_equal(ftc_ctl_committed(c, &step, &gen), FTC_EPROTO);
        assert_names(c, ck, v, "committed step");
        assert_int_equal(ftc_ctl_commit_report(c, 1, 9, 0, 1, &committed, &now), FTC_EPROTO);
        assert_names(c, ck, v, "commit_report step");
        assert_int_equal(ftc_ctl_commit_withdraw(c, 1, 9, 0, &committed, &flag), FTC_EPROTO);
        assert_names(c, ck, v, "commit_withdraw step");
        assert_int_equal(ftc_ctl_commit_abort(c, 1, 9, 0, "x", &committed, &flag), FTC_EPROTO);
        assert_names(c, ck, v, "commit_abort step");
        assert_int_equal(ftc_ctl_reseed(c, 1, 1, 7), FTC_EPROTO);
        assert_names(c, ck, v, "reseed step");
        assert_field(r, ck, "step", v);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", ck, "step", "3", "gen", v, NULL),
                         0);
        assert_int_equal(ftc_ctl_committed(c, &step, &gen), FTC_EPROTO);
        assert_names(c, ck, v, "committed gen");
    }
    /* leading zeros are still the number (as the rendezvous reads them), 2^53 - 1 the top */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", ck, NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "007", "world", "02", NULL),
                     0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 7 && world == 2);
    assert_int_equal(ftc_ctl_generation_bump(c, "n:1", ep, 7, 2, "t", &out), 0);
    assert_int_equal(out, 8);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "9007199254740991", NULL),
                     0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 9007199254740991ull);
    /* a world above 2^24 is no world, in the commit script as in ftc_ctl_generation */
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", gk, "gen", "1", "world", "16777217",
                                    NULL), 0);
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), FTC_EPROTO);
    assert_int_equal(ftc_ctl_commit_report(c, 1, 1, 0, 1, &committed, &now), FTC_EPROTO);
    assert_names(c, gk, "16777217", "commit_report world 2^24 + 1");
    /* a lease epoch the script cannot hold exactly */
    char lk[64];
    ftc_ctl_key(c, "leader", lk, sizeof lk);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", lk, "n:2 9007199254740993", NULL), 0);
    assert_int_equal(ftc_ctl_lease_acquire(c, "n:1", 1000, &held, &ep), FTC_EPROTO);
    assert_names(c, lk, "9007199254740993", "lease_acquire epoch");
    ftc_ctl_destroy(c);
}


static void count_event(void *arg, const ftc_status_event_t *e)
{
    int *n = arg;
    assert_true(strlen(e->kind) > 0);
    (*n)++;
}

/* A rank's reported checksum is read back; a withdrawn report no longer
 * counts (the step cannot commit without it), and a report of a step the
 * record has reached is not withdrawn. */
static void test_commit_checksum_and_withdraw(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job7");
    uint64_t gen;
    set_generation(c, 2, &gen);
    int64_t committed;
    bool now, found, gone;
    uint64_t ck;
    assert_int_equal(ftc_ctl_commit_checksum(c, gen, 4, 0, &ck, &found), 0);
    assert_false(found);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 4, 0, 0xfedcba9876543210ull, &committed, &now),
                     0);
    assert_int_equal(ftc_ctl_commit_checksum(c, gen, 4, 0, &ck, &found), 0);
    assert_true(found);
    assert_true(ck == 0xfedcba9876543210ull);
    assert_int_equal(ftc_ctl_commit_withdraw(c, gen, 4, 0, &committed, &gone), 0);
    assert_true(gone);
    assert_int_equal(committed, -1);
    assert_int_equal(ftc_ctl_commit_checksum(c, gen, 4, 0, &ck, &found), 0);
    assert_false(found);
    /* rank 1's report alone does not commit step 4 now */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 4, 1, 1, &committed, &now), 0);
    assert_false(now);
    assert_int_equal(committed, -1);
    /* both report step 5: committed; its reports are not withdrawn */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 5, 0, 2, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 5, 1, 3, &committed, &now), 0);
    assert_true(now);
    assert_int_equal(ftc_ctl_commit_withdraw(c, gen, 5, 0, &committed, &gone), 0);
    assert_false(gone);
    assert_int_equal(committed, 5);
    assert_int_equal(ftc_ctl_commit_checksum(c, gen, 5, 1, &ck, &found), 0);
    assert_true(found && ck == 3);
    /* garbage in the record: FTC_EPROTO naming the key */
    char k[128];
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET",
                                    ftc_ctl_key(c, "commit:2:9", k, sizeof k), "0", "xyz", NULL),
                     0);
    assert_int_equal(ftc_ctl_commit_checksum(c, 2, 9, 0, &ck, &found), FTC_EPROTO);
    assert_false(found);
    assert_non_null(strstr(ftc_ctl_errstr(c), "commit:2:9"));
    ftc_ctl_destroy(c);
}

/* The abort marker (a rank's snapshot of the step failed): the step never
 * commits, whatever reports come after it (FTC_ECANCELED naming the record,
 * the report not recorded), the committed step stays; the marker says which
 * rank and why (the first marker kept); a step the record has reached is not
 * marked; garbage in the field is FTC_EPROTO naming the key. */
static void test_commit_abort_marker(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job9");
    uint64_t gen;
    set_generation(c, 2, &gen);
    int64_t committed = -7;
    bool now = true, marked = false, ab = true, found = true;
    uint32_t by = 0;
    uint64_t ck;
    char why[64];
    /* step 3 commits */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 3, 0, 1, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 3, 1, 1, &committed, &now), 0);
    assert_true(now);
    assert_int_equal(ftc_ctl_commit_aborted(c, gen, 4, &ab, &by, why, sizeof why), 0);
    assert_false(ab);
    /* step 4: rank 0 reported, rank 1 failed */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 4, 0, 2, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_abort(c, gen, 4, 1, "device sync failed", &committed,
                                          &marked), 0);
    assert_true(marked);
    assert_int_equal(committed, 3);
    assert_int_equal(ftc_ctl_commit_abort(c, gen, 4, 0, "a second marker", NULL, &marked), 0);
    assert_true(marked);
    assert_int_equal(ftc_ctl_commit_aborted(c, gen, 4, &ab, &by, why, sizeof why), 0);
    assert_true(ab);
    assert_int_equal(by, 1);
    assert_string_equal(why, "device sync failed");
    assert_int_equal(ftc_ctl_commit_report(c, gen, 4, 1, 2, &committed, &now), FTC_ECANCELED);
    assert_non_null(strstr(ftc_ctl_errstr(c), "commit:"));
    assert_non_null(strstr(ftc_ctl_errstr(c), "aborted"));
    assert_int_equal(ftc_ctl_commit_checksum(c, gen, 4, 1, &ck, &found), 0);
    assert_false(found);
    int64_t cstep = -1;
    uint64_t cgen = 0;
    assert_int_equal(ftc_ctl_committed(c, &cstep, &cgen), 0);
    assert_int_equal(cstep, 3);
    /* a step marked before any report: refused from the first */
    assert_int_equal(ftc_ctl_commit_abort(c, gen, 5, 0, "", NULL, &marked), 0);
    assert_true(marked);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 5, 0, 1, &committed, &now), FTC_ECANCELED);
    assert_int_equal(ftc_ctl_commit_aborted(c, gen, 5, &ab, &by, why, sizeof why), 0);
    assert_true(ab && by == 0 && !why[0]);
    /* step 6 commits; marking it then changes nothing */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 6, 0, 1, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 6, 1, 1, &committed, &now), 0);
    assert_true(now);
    assert_int_equal(ftc_ctl_commit_abort(c, gen, 6, 1, "late", &committed, &marked), 0);
    assert_false(marked);
    assert_int_equal(committed, 6);
    assert_int_equal(ftc_ctl_commit_aborted(c, gen, 6, &ab, NULL, NULL, 0), 0);
    assert_false(ab);
    /* garbage in the field: FTC_EPROTO naming the key */
    char k[128], suffix[48];
    snprintf(suffix, sizeof suffix, "commit:%llu:8", (unsigned long long)gen);
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET",
                                    ftc_ctl_key(c, suffix, k, sizeof k), "abort", "xyz", NULL),
                     0);
    assert_int_equal(ftc_ctl_commit_aborted(c, gen, 8, &ab, &by, why, sizeof why), FTC_EPROTO);
    assert_false(ab);
    assert_non_null(strstr(ftc_ctl_errstr(c), suffix));
    ftc_ctl_destroy(c);
}

/* The committed set: each committed step with its generation, newest first,
 * at or below the step asked for; a step reported but not committed is not
 * in it; below the oldest, none (and the oldest is said); garbage in the set
 * is FTC_EPROTO naming the key. */
static void test_committed_at_most(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job8");
    uint64_t gen;
    set_generation(c, 2, &gen);
    int64_t committed, steps[8], oldest;
    uint64_t gens[8];
    int n;
    bool now;
    assert_int_equal(ftc_ctl_committed_at_most(c, 100, 8, steps, gens, &n, &oldest), 0);
    assert_int_equal(n, 0);
    assert_int_equal(oldest, -1);
    const int64_t done[] = {2, 3, 5, 8};
    for (int k = 0; k < 4; k++)
        for (uint32_t r = 0; r < 2; r++)
            assert_int_equal(ftc_ctl_commit_report(c, gen, done[k], r, 1, &committed, &now), 0);
    /* step 9: rank 0 only, never committed */
    assert_int_equal(ftc_ctl_commit_report(c, gen, 9, 0, 1, &committed, &now), 0);
    assert_int_equal(committed, 8);
    assert_int_equal(ftc_ctl_committed_at_most(c, 100, 8, steps, gens, &n, &oldest), 0);
    assert_int_equal(n, 4);
    assert_int_equal(oldest, 2);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(steps[k], done[3 - k]);
        assert_true(gens[k] == gen);
    }
    assert_int_equal(ftc_ctl_committed_at_most(c, 7, 2, steps, gens, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 5);
    assert_int_equal(steps[1], 3);
    assert_int_equal(ftc_ctl_committed_at_most(c, 1, 8, steps, gens, &n, &oldest), 0);
    assert_int_equal(n, 0);
    assert_int_equal(oldest, 2);
    assert_int_equal(ftc_ctl_committed_at_most(c, -1, 8, steps, gens, &n, &oldest), FTC_EINVAL);
    char k[128];
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "ZADD",
                                    ftc_ctl_key(c, "committed", k, sizeof k), "4", "four", NULL),
                     0);
    assert_int_equal(ftc_ctl_committed_at_most(c, 4, 8, steps, gens, &n, &oldest), FTC_EPROTO);
    assert_non_null(strstr(ftc_ctl_errstr(c), "committed"));
    assert_non_null(strstr(ftc_ctl_errstr(c), "not STEP:GEN"));
    ftc_ctl_destroy(c);
}

static void test_status_snapshot_and_events(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "job6");
    uint64_t gen;
    set_generation(c, 2, &gen);
    ftc_ctl_member_t m = {.node = "n0", .host = "h0", .domain = "rack1", .pid = 11, .joined_ms = 5};
    assert_int_equal(ftc_ctl_join(c, &m), 0);
    ftc_ctl_heartbeat_t hb = {gen, 7, 1500, ftc_wall_ms()};
    assert_int_equal(ftc_ctl_heartbeat(c, "n0", &hb, 5000), 0);
    ftc_ctl_member_t m1 = {.node = "n1", .host = "h1", .pid = 12, .joined_ms = 6};
    assert_int_equal(ftc_ctl_join(c, &m1), 0); /* no heartbeat: shown as such */
    char k[128];
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, NULL, "HSET",
                                    ftc_ctl_key(c, "members", k, sizeof k), "n2", "garbage", NULL),
                     0);
    ftc_ctl_event_t e = {.kind = "hang", .node = "n0", .rank = 1, .generation = gen, .step = 7,
                         .detail = "no progress"};
    assert_int_equal(ftc_ctl_event(c, &e), 0);
    int64_t committed;
    bool now;
    assert_int_equal(ftc_ctl_commit_report(c, gen, 7, 0, 1, &committed, &now), 0);
    assert_int_equal(ftc_ctl_commit_report(c, gen, 7, 1, 1, &committed, &now), 0);
    assert_true(now);
    ftc_status_t *s;
    assert_int_equal(ftc_status_collect(c, "job6", 10, &s), 0);
    assert_int_equal(s->generation, gen);
    assert_int_equal(s->committed_step, 7);
    assert_int_equal(s->n_members, 3);
    int alive = 0, problems = 0;
    for (int i = 0; i < s->n_members; i++) {
        alive += s->members[i].alive;
        problems += s->members[i].problem[0] != 0;
        if (!strcmp(s->members[i].node, "n0")) {
            assert_int_equal(s->members[i].hb.step, 7);
            assert_string_equal(s->members[i].domain, "rack1");
            assert_true(s->members[i].hb_ttl_ms > 0);
        }
    }
    assert_int_equal(alive, 1);
    assert_int_equal(problems, 1);
    assert_true(s->n_events >= 3); /* generation, hang, commit */
    assert_string_equal(s->events[s->n_events - 1].kind, "commit");
    char *json = ftc_status_json(s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"committed_step\": 7"));
    free(json);
    FILE *out = tmpfile();
    ftc_status_print(s, out);
    fclose(out);
    ftc_status_free(s);
    char after[32] = "0";
    int n = 0;
    int got = ftc_events_read(c, after, sizeof after, 100, 0, count_event, &n);
    assert_true(got >= 3);
    assert_int_equal(got, n);
    assert_int_equal(ftc_events_read(c, after, sizeof after, 100, 100, count_event, &n), 0);
    ftc_ctl_destroy(c);
}

/* A snapshot of 600 members reads their heartbeats a page per pipeline: a
 * few round trips, not one or two per member (805 here; a Redis that
 * stalled mid-way then cost `ftc status` a command deadline per member). Garbage and a
 * heartbeat key of another type are still shown per member. */
static void test_status_snapshot_round_trips(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jst");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char key[256], mkey[256], name[32], suffix[48];
    ftc_ctl_key(c, "members", mkey, sizeof mkey);
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "m%03d", i);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", mkey, name, "h - 1 2", NULL), 0);
        snprintf(suffix, sizeof suffix, "hb:%s", name);
        ftc_ctl_key(c, suffix, key, sizeof key);
        if (i % 3 == 0)
            assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", key, "1 5 100 1", "PX", "60000",
                                            NULL), 0);
        else if (i == 1)
            assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", key, "x", "y", NULL), 0);
    }
    uint64_t t0 = ftc_redis_round_trips(r);
    ftc_status_t *s = NULL;
    assert_int_equal(ftc_status_collect(c, "jst", 5, &s), 0);
    uint64_t trips = ftc_redis_round_trips(r) - t0;
    print_message("snapshot of %d members: %" PRIu64 " round trips\n", s->n_members, trips);
    assert_int_equal(s->n_members, 600);
    assert_true(trips <= 12);
    int alive = 0, wrong = 0;
    for (int i = 0; i < s->n_members; i++) {
        alive += s->members[i].alive;
        if (!strcmp(s->members[i].node, "m001")) {
            wrong = 1;
            assert_false(s->members[i].alive);
            assert_non_null(strstr(s->members[i].problem, "WRONGTYPE"));
        }
        if (s->members[i].alive) {
            assert_int_equal(s->members[i].hb.step, 5);
            assert_true(s->members[i].hb_ttl_ms > 0);
        }
    }
    assert_int_equal(alive, 200);
    assert_int_equal(wrong, 1);
    ftc_status_free(s);
    ftc_ctl_destroy(c);
}

static void count_kind(void *arg, const ftc_status_event_t *e)
{
    (void)e;
    (*(int *)arg)++;
}

/* "$" (only new events) is pinned to the stream's newest entry by the first
 * read even when it reads nothing: an event added between two reads is read
 * by the second (with "$" kept, each XREAD waited for what came after it
 * started, and `ftc events --follow` lost it). */
static void test_events_dollar_misses_nothing(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jev");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char key[256];
    ftc_ctl_key(c, "events", key, sizeof key);
    for (int round = 0; round < 2; round++) { /* an empty stream, then one with entries */
        char after[32] = "$";
        int n = 0;
        assert_int_equal(ftc_events_read(c, after, sizeof after, 100, 50, count_kind, &n), 0);
        assert_string_not_equal(after, "$");
        /* between two reads */
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "XADD", key, "*", "kind", "commit", "node",
                                        "-", "detail", "between", NULL), 0);
        assert_int_equal(ftc_events_read(c, after, sizeof after, 100, 50, count_kind, &n), 1);
        assert_int_equal(n, 1);
    }
    ftc_ctl_destroy(c);
}

/* Bytes that are not UTF-8 in a member record or an event (garbage, or a
 * foreign value quoted in a detail) are shown replaced by '?': jansson
 * refuses such strings, and `ftc status --json` silently left the member
 * (or event) out, `ftc events --json` printed nothing for it. */
static void test_status_json_keeps_non_utf8(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "jutf");
    ftc_redis_t *r = ftc_ctl_redis(c);
    char mkey[256], ekey[256];
    ftc_ctl_key(c, "members", mkey, sizeof mkey);
    ftc_ctl_key(c, "events", ekey, sizeof ekey);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", mkey, "good", "h - 1 2", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "HSET", mkey, "bad", "h\xff\xfe - 1 2", NULL),
                     0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "XADD", ekey, "*", "kind", "commit", "node", "-",
                                    "detail", "value 'a\xc3(b' refused", NULL),
                     0);
    ftc_status_t *s = NULL;
    assert_int_equal(ftc_status_collect(c, "jutf", 10, &s), 0);
    assert_int_equal(s->n_members, 2);
    assert_int_equal(s->n_events, 1);
    char *json = ftc_status_json(s);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"node\": \"good\""));
    assert_non_null(strstr(json, "\"node\": \"bad\""));
    assert_non_null(strstr(json, "\"host\": \"h??\""));
    assert_non_null(strstr(json, "value 'a?(b' refused"));
    free(json);
    FILE *out = tmpfile();
    ftc_event_print_json(&s->events[0], out);
    assert_true(ftell(out) > 0);
    fclose(out);
    ftc_status_free(s);
    ftc_ctl_destroy(c);
}

/* A holder that stepped down locally (it was paused, or cut off, for 0.9 x the
 * lease TTL) campaigns again while its key is still in Redis: the acquire says
 * it holds the lease, and the detector then counts a whole lease from that
 * call. The key must get a whole TTL too, else it expires on its old one and
 * another node takes the lease while this one still calls itself leader. The
 * time the holder lost is played by cutting the key's TTL to 50 ms. */
static void test_lease_reacquire_by_holder_renews_ttl(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *a = redis_fixture_ctl(f, "jra"), *b = redis_fixture_ctl(f, "jra");
    bool held;
    uint64_t ep, ep2, ep_b;
    assert_int_equal(ftc_ctl_lease_acquire(a, "node-a:1", 60000, &held, &ep), 0);
    assert_true(held);
    char key[128];
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(a), true, NULL, "PEXPIRE",
                                    ftc_ctl_key(a, "leader", key, sizeof key), "50", NULL),
                     0);
    assert_int_equal(ftc_ctl_lease_acquire(a, "node-a:1", 60000, &held, &ep2), 0);
    assert_true(held);
    assert_true(ep2 == ep);
    assert_true(leader_ttl(b, "node-a:1") > 50); /* before: at most the 50 ms left */
    ftc_sleep_ms(200);     /* past the old TTL: the lease is still a's, b cannot take it */
    assert_int_equal(ftc_ctl_lease_acquire(b, "node-b:1", 60000, &held, &ep_b), 0);
    assert_false(held);
    assert_true(ep_b == ep);
    ftc_ctl_destroy(a);
    ftc_ctl_destroy(b);
}

/* ---- ftc_ctl_clean ------------------------------------------------------------------- */

static long long dbsize(ftc_ctl_t *c)
{
    ftc_redis_reply_t *rep;
    long long n = -1;
    assert_int_equal(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "DBSIZE", NULL), 0);
    assert_int_equal(ftc_redis_want_int(rep, "DBSIZE", &n, NULL), 0);
    ftc_redis_reply_free(rep);
    return n;
}

static bool key_exists(ftc_ctl_t *c, const char *key, size_t len)
{
    const char *argv[] = {"EXISTS", key};
    const size_t lens[] = {6, len};
    ftc_redis_reply_t *rep;
    long long n = -1;
    assert_int_equal(ftc_redis_cmd(ftc_ctl_redis(c), true, &rep, 2, argv, lens), 0);
    assert_int_equal(ftc_redis_want_int(rep, "EXISTS", &n, NULL), 0);
    ftc_redis_reply_free(rep);
    return n == 1;
}

/* A job with a record of every kind the job writes most (members, generation, lease epoch,
 * commit records, failures, events, linked, secret), 2500 more keys (several SCAN pages and
 * UNLINK batches) and one whose name holds glob specials and a NUL byte. Returns the count. */
static long long fill_job(ftc_ctl_t *c)
{
    ftc_redis_t *r = ftc_ctl_redis(c);
    long long before = dbsize(c);
    ftc_ctl_member_t m = {.node = "A", .host = "h", .pid = 1, .joined_ms = 2};
    assert_int_equal(ftc_ctl_join(c, &m), 0);
    uint64_t gen;
    set_generation(c, 1, &gen); /* leader lease taken and released: gen, leader:epoch, events */
    int64_t committed;
    bool now;
    assert_int_equal(ftc_ctl_commit_report(c, gen, 5, 0, 0xabc, &committed, &now), 0);
    assert_true(now);
    ftc_ctl_event_t e = {.kind = "node_lost", .node = "B", .rank = -1, .step = -1, .detail = ""};
    assert_int_equal(ftc_ctl_report_job(c, "node_lost:B:1", &e, NULL), 0);
    assert_int_equal(ftc_ctl_linked_set(c), 0);
    uint8_t secret[16];
    assert_int_equal(ftc_ctl_job_secret(c, secret, NULL), 0);
    char key[128];
    for (int i = 0; i < 2500; i++) {
        char suffix[32];
        snprintf(suffix, sizeof suffix, "junk:%d", i);
        assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", ftc_ctl_key(c, suffix, key,
                                                                             sizeof key),
                                        "x", NULL),
                         0);
    }
    ftc_ctl_key(c, "we*?[ird]\\", key, sizeof key);
    size_t klen = strlen(key);
    memcpy(key + klen, "\0nul", 5);
    klen += 4;
    const char *argv[] = {"SET", key, "x"};
    const size_t lens[] = {3, klen, 1};
    assert_int_equal(ftc_redis_cmd(r, true, NULL, 3, argv, lens), 0);
    assert_true(key_exists(c, key, klen));
    return dbsize(c) - before;
}

static void test_clean_removes_the_jobs_keys_only(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "cj"), *x = redis_fixture_ctl(f, "cj.x"),
              *y = redis_fixture_ctl(f, "cjx");
    ftc_redis_t *r = ftc_ctl_redis(c);
    ftc_ctl_member_t m = {.node = "X", .host = "h", .pid = 1, .joined_ms = 2};
    assert_int_equal(ftc_ctl_join(x, &m), 0); /* other jobs, one whose id begins with cj */
    assert_int_equal(ftc_ctl_join(y, &m), 0);
    assert_int_equal(ftc_ctl_linked_set(y), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "ftc:{cj}", "x", NULL), 0);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "ftc:{cj}x:y", "x", NULL), 0);
    long long others = dbsize(c);
    long long n = fill_job(c);
    assert_true(n > 2500);

    ftc_ctl_clean_t res;
    assert_int_equal(ftc_ctl_clean(c, false, &res), 0); /* nothing alive */
    assert_int_equal((long long)res.removed, n);
    assert_string_equal(res.live, "");
    assert_int_equal(dbsize(c), others);
    uint64_t gen;
    uint32_t world;
    int64_t step;
    bool linked;
    assert_int_equal(ftc_ctl_generation(c, &gen, &world), 0);
    assert_true(gen == 0 && world == 0);
    assert_int_equal(ftc_ctl_committed(c, &step, &gen), 0);
    assert_int_equal(step, -1);
    assert_int_equal(ftc_ctl_linked(c, &linked), 0);
    assert_false(linked);
    assert_int_equal(ftc_ctl_linked(y, &linked), 0); /* the other jobs' keys stay */
    assert_true(linked);
    assert_true(key_exists(c, "ftc:{cj}", 8) && key_exists(c, "ftc:{cj}x:y", 11));
    assert_true(key_exists(c, "ftc:{cj.x}:members", 18));

    assert_int_equal(ftc_ctl_clean(c, false, &res), 0); /* again: nothing left */
    assert_int_equal((long long)res.removed, 0);
    assert_int_equal(ftc_ctl_clean(c, false, NULL), 0);
    assert_int_equal(dbsize(c), others);
    ftc_ctl_destroy(c);
    ftc_ctl_destroy(x);
    ftc_ctl_destroy(y);
}

/* A heartbeat, a supervisor lease or the leader lease: refused (FTC_EINPROGRESS naming
 * them), nothing removed; with force, everything goes. */
/* A server without UNLINK (older than Redis 4; here renamed away): the
 * first page's "unknown command" switches the removal to DEL. */
static int redis_no_unlink_setup(void **state)
{
    redis_fixture_t *f = calloc(1, sizeof *f);
    f->dir = ftc_test_tmpdir("redis-nounlink");
    char wrap[PATH_MAX];
    snprintf(wrap, sizeof wrap, "%s/redis-no-unlink", f->dir);
    FILE *w = fopen(wrap, "w");
    assert_non_null(w);
    fprintf(w, "#!/bin/sh\nexec redis-server \"$@\" --rename-command UNLINK \"\"\n");
    fclose(w);
    assert_int_equal(chmod(wrap, 0700), 0);
    ftc_redis_server_options_t o = FTC_REDIS_SERVER_OPTIONS_INIT;
    o.dir = f->dir;
    o.binary = wrap;
    ftc_err_t err = {0};
    f->srv = ftc_redis_server_start(&o, &err);
    if (!f->srv)
        fail_msg("redis-server without UNLINK did not start: %s", err.msg);
    *state = f;
    return 0;
}

static void test_clean_without_unlink_uses_del(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "cd");
    ftc_redis_reply_t *rep = NULL;
    assert_true(ftc_redis_cmdv(ftc_ctl_redis(c), true, &rep, "UNLINK", "k", NULL) != 0);
    assert_non_null(strstr(ftc_redis_errstr(ftc_ctl_redis(c)), "unknown command"));
    long long others = dbsize(c);
    long long n = fill_job(c);
    ftc_ctl_clean_t res;
    assert_int_equal(ftc_ctl_clean(c, false, &res), 0);
    assert_int_equal((long long)res.removed, n);
    assert_int_equal(dbsize(c), others);
    ftc_ctl_destroy(c);
}

static void test_clean_refuses_a_live_job(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "cl");
    ftc_redis_t *r = ftc_ctl_redis(c);
    long long n = fill_job(c);
    ftc_ctl_heartbeat_t hb = {.generation = 1, .step = 3, .wall_ms = ftc_wall_ms()};
    ftc_ctl_clean_t res;

    assert_int_equal(ftc_ctl_heartbeat(c, "A", &hb, 60000), 0); /* hb:A, and a deadline */
    n += 2;
    assert_int_equal(ftc_ctl_clean(c, false, &res), FTC_EINPROGRESS);
    assert_int_equal(res.n_hb, 1);
    assert_string_equal(res.live, "heartbeat of A");
    assert_non_null(strstr(ftc_ctl_errstr(c), "job cl looks alive: heartbeat of A"));
    assert_int_equal((long long)res.removed, 0);
    assert_int_equal(dbsize(c), n);

    assert_int_equal(ftc_ctl_leave(c, "A"), 0); /* hb, member record (the only one) and
                                                    deadline gone */
    n -= 3;
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "ftc:{cl}:sup:S", "h 1 2", "PX",
                                    "60000", NULL),
                     0);
    n++;
    assert_int_equal(ftc_ctl_clean(c, false, &res), FTC_EINPROGRESS);
    assert_string_equal(res.live, "supervisor lease of S");
    assert_int_equal(dbsize(c), n);
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "DEL", "ftc:{cl}:sup:S", NULL), 0);
    n--;

    bool held;
    uint64_t ep;
    assert_int_equal(ftc_ctl_lease_acquire(c, "A:1:2", 60000, &held, &ep), 0);
    assert_true(held);
    n++;
    assert_int_equal(ftc_ctl_clean(c, false, &res), FTC_EINPROGRESS);
    assert_true(res.leader);
    assert_string_equal(res.live, "leader lease held by A:1:2");
    assert_int_equal(dbsize(c), n);

    /* ten nodes' heartbeats: eight named, and how many more */
    for (int i = 0; i < 10; i++) {
        char node[8];
        snprintf(node, sizeof node, "n%d", i);
        assert_int_equal(ftc_ctl_heartbeat(c, node, &hb, 60000), 0);
    }
    assert_int_equal(ftc_redis_cmdv(r, true, NULL, "SET", "ftc:{cl}:sup:S", "h 1 2", "PX",
                                    "60000", NULL),
                     0);
    n += 12; /* ten hb:, the deadline set again, sup:S */
    assert_int_equal(ftc_ctl_clean(c, false, &res), FTC_EINPROGRESS);
    assert_true(res.n_hb == 10 && res.n_sup == 1 && res.leader);
    assert_non_null(strstr(res.live, " and 2 more; supervisor lease of S; leader lease held "
                                     "by A:1:2"));
    assert_non_null(strstr(res.live, "heartbeats of n"));
    assert_int_equal(dbsize(c), n);

    assert_int_equal(ftc_ctl_clean(c, true, &res), 0); /* --force */
    assert_int_equal((long long)res.removed, n);
    assert_int_equal(dbsize(c), 0);
    ftc_ctl_destroy(c);
}

/* Redis gone: an error within the command deadline, never a hang. */
static void test_clean_without_redis_fails(void **state)
{
    redis_fixture_t *f = *state;
    ftc_ctl_t *c = redis_fixture_ctl(f, "cd");
    ftc_redis_server_stop(f->srv);
    f->srv = NULL;
    ftc_ctl_clean_t res;
    int rc = ftc_ctl_clean(c, false, &res);
    assert_true(rc == FTC_EREDIS || rc == FTC_ETIMEDOUT);
    assert_non_null(strstr(ftc_ctl_errstr(c), "SCAN"));
    assert_true(ftc_ctl_clean(c, true, &res) < 0);
    ftc_ctl_destroy(c);
}

static void test_glob_escape(void **state)
{
    (void)state;
    char buf[32];
    assert_int_equal(ftc_ctl_glob_escape("job-1.a_b", buf, sizeof buf), 9);
    assert_string_equal(buf, "job-1.a_b");
    assert_int_equal(ftc_ctl_glob_escape("a*b?c[d]e\\f{g}", buf, sizeof buf), 19);
    assert_string_equal(buf, "a\\*b\\?c\\[d\\]e\\\\f{g}");
    assert_int_equal(ftc_ctl_glob_escape("", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(ftc_ctl_glob_escape("ab*", buf, 6), 4); /* exactly fits */
    assert_string_equal(buf, "ab\\*");
    assert_int_equal(ftc_ctl_glob_escape("ab*", buf, 4), -1); /* the escape does not fit */
    assert_string_equal(buf, "");
    assert_int_equal(ftc_ctl_glob_escape("abc", buf, 3), -1);
    assert_int_equal(ftc_ctl_glob_escape("x", buf, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_and_fenced_generations, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_lease_reacquire_by_holder_renews_ttl,
                                        redis_fixture_setup, redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_commit_atomic_under_concurrency, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_failure_reported_exactly_once, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_reseed_after_data_loss, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_garbage_in_every_key_kind, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_integer_fields_read_strictly, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_commit_checksum_and_withdraw, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_commit_abort_marker, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_committed_at_most, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_status_snapshot_and_events, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_status_snapshot_round_trips, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_events_dollar_misses_nothing, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_status_json_keeps_non_utf8, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_clean_removes_the_jobs_keys_only,
                                        redis_fixture_setup, redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_clean_without_unlink_uses_del,
                                        redis_no_unlink_setup, redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_clean_refuses_a_live_job, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_clean_without_redis_fails, redis_fixture_setup,
                                        redis_fixture_teardown),
        cmocka_unit_test(test_glob_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
