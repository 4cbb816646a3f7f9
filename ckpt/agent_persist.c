/*
 * agent_persist.c — see agent_persist.h.
 *
 * One thread, one job at a time: IDLE -> (submit) QUEUED -> (thread)
 * WRITING -> DONE -> (poll) IDLE. The handle's mutex (hmu) is held by the
 * writer for the whole write, and by lock() for a load.
 */
#include "ckpt/agent_persist.h"

#include "core/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PW_IDLE = 0, PW_QUEUED = 1, PW_WRITING = 2, PW_DONE = 3 };

struct ftc__persister {
    ftc_persist_t *p;
    pthread_t tid;
    pthread_mutex_t mu;  /* state and the job below */
    pthread_cond_t cv;
    pthread_mutex_t hmu; /* the persist handle */
    int state;           /* PW_* */
    bool stop;
    uint64_t step;
    const void *shards[FTC__PERSIST_MAX_SHARDS];
    uint64_t sizes[FTC__PERSIST_MAX_SHARDS];
    int n;
    ftc__persist_result_t res;
};

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
        pthread_mutex_lock(&w->hmu);
        res.rc = ftc_persist_write(w->p, w->step, w->shards, w->sizes, w->n);
        if (res.rc)
            snprintf(res.detail, sizeof res.detail, "%s", ftc_persist_errstr(w->p));
        pthread_mutex_unlock(&w->hmu);
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
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->hmu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->tid, NULL, ftc__persister_main, w) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "agent: cannot start the persist thread");
        pthread_mutex_destroy(&w->mu);
        pthread_mutex_destroy(&w->hmu);
        pthread_cond_destroy(&w->cv);
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
    pthread_mutex_destroy(&w->hmu);
    pthread_cond_destroy(&w->cv);
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

ftc_persist_t *ftc__persister_lock(ftc__persister_t *w)
{
    pthread_mutex_lock(&w->hmu);
    return w->p;
}

void ftc__persister_unlock(ftc__persister_t *w)
{
    pthread_mutex_unlock(&w->hmu);
}
