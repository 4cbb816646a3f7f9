/*
 * agent_persist.c — see agent_persist.h.
 *
 * One thread, one job at a time: IDLE -> (submit) QUEUED -> (thread)
 * WRITING -> DONE -> (poll) IDLE. The persist handle is this thread's
 * alone: loads open the directory read-only (ftc_persist_open_reader), so
 * none waits for a write.
 */
#include "ckpt/agent_persist.h"

#include "core/clock.h"
#include "core/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PW_IDLE = 0, PW_QUEUED = 1, PW_WRITING = 2, PW_DONE = 3 };

struct ftc__persister {
    ftc_persist_t *p;
    pthread_t tid;
    pthread_mutex_t mu;  /* state and the job below */
    pthread_cond_t cv;
    int state;           /* PW_* */
    bool stop;
    uint64_t step;
    const void *shards[FTC__PERSIST_MAX_SHARDS];
    uint64_t sizes[FTC__PERSIST_MAX_SHARDS];
    int n;
    ftc__persist_result_t res;
    char *hold; /* FTC_TEST_PERSIST_HOLD (tests only): NULL when unset */
};

/* Tests only (FTC_TEST_PERSIST_HOLD=PATH, read at start): before each write
 * the writer waits while PATH exists (60 s at most, and not past a stop),
 * as a write to a slow or hung file system would: a test holds the writer
 * busy at a known point without a slow disk. */
static void ftc__persister_hold(ftc__persister_t *w, uint64_t step)
{
    struct stat st;
    if (!w->hold || stat(w->hold, &st) != 0)
        return;
    FTC_INFO("agent", "persist writer: holding step %" PRIu64 " while %s exists "
             "(FTC_TEST_PERSIST_HOLD, a test knob)", step, w->hold);
    ftc_deadline_t d = ftc_deadline_in_ms(60000);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop || stat(w->hold, &st) != 0 || ftc_deadline_expired(d))
            break;
        ftc_sleep_ms(10);
    }
}

static void *ftc__persister_main(void *arg)
{
    ftc__persister_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->state != PW_QUEUED)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->state != PW_QUEUED) /* stop with nothing queued */
            break;
        w->state = PW_WRITING;
        pthread_mutex_unlock(&w->mu);
        ftc__persist_result_t res = {.step = w->step, .n_shards = w->n};
        uint64_t t0 = ftc_now_ns();
        ftc__persister_hold(w, w->step);
        res.rc = ftc_persist_write(w->p, w->step, w->shards, w->sizes, w->n);
        if (res.rc)
            snprintf(res.detail, sizeof res.detail, "%s", ftc_persist_errstr(w->p));
        res.ms = (double)(ftc_now_ns() - t0) / 1e6;
        pthread_mutex_lock(&w->mu);
        w->res = res;
        w->state = PW_DONE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ftc__persister_t *ftc__persister_start(ftc_persist_t *p, ftc_err_t *err)
{
    ftc__persister_t *w = calloc(1, sizeof *w);
    if (!w) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory (persist writer)");
        return NULL;
    }
    w->p = p;
    const char *hold = getenv("FTC_TEST_PERSIST_HOLD"); /* tests only */
    if (hold && *hold && !(w->hold = strdup(hold))) {
        ftc_err_set(err, FTC_ENOMEM, "agent: out of memory (persist writer)");
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->tid, NULL, ftc__persister_main, w) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "agent: cannot start the persist thread");
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w->hold);
        free(w);
        return NULL;
    }
    return w;
}

void ftc__persister_stop(ftc__persister_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    if (w->state == PW_QUEUED) /* not started: dropped */
        w->state = PW_IDLE;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->tid, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->hold);
    free(w);
}

bool ftc__persister_submit(ftc__persister_t *w, uint64_t step, const void *const *shards,
                           const uint64_t *sizes, int n)
{
    if (n < 1 || n > FTC__PERSIST_MAX_SHARDS)
        return false;
    pthread_mutex_lock(&w->mu);
    bool ok = w->state == PW_IDLE && !w->stop;
    if (ok) {
        w->step = step;
        w->n = n;
        memcpy(w->shards, shards, (size_t)n * sizeof *shards);
        memcpy(w->sizes, sizes, (size_t)n * sizeof *sizes);
        w->state = PW_QUEUED;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return ok;
}

void ftc__persister_wait(ftc__persister_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->state == PW_QUEUED || w->state == PW_WRITING)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

bool ftc__persister_busy(ftc__persister_t *w, uint64_t *step)
{
    pthread_mutex_lock(&w->mu);
    bool busy = w->state == PW_QUEUED || w->state == PW_WRITING;
    if (busy && step)
        *step = w->step;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

bool ftc__persister_poll(ftc__persister_t *w, ftc__persist_result_t *res)
{
    pthread_mutex_lock(&w->mu);
    bool done = w->state == PW_DONE;
    if (done) {
        *res = w->res;
        w->state = PW_IDLE;
    }
    pthread_mutex_unlock(&w->mu);
    return done;
}
