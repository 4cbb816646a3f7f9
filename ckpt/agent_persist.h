/*
 * agent_persist.h — internal to the agent (ckpt/agent.c): the persist
 * writer, a thread that writes committed versions to the persist tier
 * (ckpt/persist.h) so the agent's control loop never blocks on disk.
 *
 * The control loop hands it one version at a time (the shards are the
 * committed shm slots themselves, not copies: the agent pins those slots so
 * no BEGIN hands them out until the write has ended; pinning costs no
 * memory, see docs/agent.md). While a write runs, further submissions are
 * refused (the agent persists the next committed version once the writer is
 * free). The result of a write is collected by the control loop with
 * ftc__persister_poll(), which also tells it to unpin; failures are logged
 * and reported as events there, never waited for by a checkpoint.
 *
 * The persist handle is used by the writer thread alone (persist.h: one
 * thread at a time): loads (restores from the persist tier) open the
 * directory read-only with ftc_persist_open_reader, as the other nodes'
 * tiers are read, so none waits for a running write (which lasts as long as
 * the file system takes: a slow or hung one blocked the control loop).
 *
 * Thread-safety: every function is called by the control loop; the writer
 * thread is internal. Errors: start returns NULL with err set (FTC_ENOMEM).
 */
#ifndef FTC_CKPT_AGENT_PERSIST_H
#define FTC_CKPT_AGENT_PERSIST_H

#include "ckpt/persist.h"
#include "core/err.h"

#include <stdbool.h>
#include <stdint.h>

#define FTC__PERSIST_MAX_SHARDS 64

typedef struct ftc__persister ftc__persister_t;

typedef struct ftc__persist_result {
    uint64_t step;
    int n_shards;
    int rc;             /* 0 or the FTC_E* of ftc_persist_write */
    char detail[512];   /* why it failed */
    double ms;          /* how long the write took */
} ftc__persist_result_t;

/* Starts the writer thread over p (owned by the caller, closed after stop;
 * used by that thread alone meanwhile). FTC_TEST_PERSIST_HOLD=PATH (tests
 * only, read here): each write first waits while PATH exists (60 s at most). */
ftc__persister_t *ftc__persister_start(ftc_persist_t *p, ftc_err_t *err);
/* Waits for a running write to end, then stops the thread. NULL is a no-op. */
void ftc__persister_stop(ftc__persister_t *w);
/* Hands version step (n shards, n <= FTC__PERSIST_MAX_SHARDS) to the writer;
 * the shards must stay unchanged until its result is polled. false when a
 * write is still running or its result has not been polled yet. */
bool ftc__persister_submit(ftc__persister_t *w, uint64_t step, const void *const *shards,
                           const uint64_t *sizes, int n);
/* Waits until no write is queued or running (its result still to be
 * polled): before unmapping slots that may be pinned, at flush and stop
 * (never in the control loop: ftc__persister_busy). A write cannot be
 * abandoned halfway while it reads the slots, so this waits as long as the
 * write takes (bounded by the persist tier's own I/O). */
void ftc__persister_wait(ftc__persister_t *w);
/* Whether a write is queued or running (*step, may be NULL: its step), without
 * waiting: the control loop answers FTC_EAGAIN instead of waiting for it. */
bool ftc__persister_busy(ftc__persister_t *w, uint64_t *step);
/* true (and *res filled) once when a submitted write has ended. */
bool ftc__persister_poll(ftc__persister_t *w, ftc__persist_result_t *res);

#endif
