/*
 * fake_device.h — a stand-in device for the snapshot engine's device path
 * (ckpt/snapshot.h ftc_snap_device_ops_t) on any machine: "device memory"
 * is host memory, and each copy lands 2 ms after copy_async, on the
 * device's own thread, as a DMA would after cudaMemcpyAsync returned.
 * Faults on request: the N-th copy_async fails (fail_at), every sync or the
 * N-th one fails (fail_sync, fail_sync_at: after the copies landed, as a
 * CUDA stream error surfaces at cudaStreamSynchronize), open fails
 * (fail_open), sync is held back until cleared (fake_set_hold), and the
 * longest deadline a sync was given is recorded (sync_ms).
 *
 * Contract: include after "ftc_test.h" (cmocka asserts). One device per
 * test binary (the global FD), set up with fd_reset() before the engine
 * opens it and torn down with fd_done() after it closed it; the ops come
 * from fake_dev_ops(). Used by tests/ckpt/test_snapshot.c (the engine),
 * tests/ckpt/test_client.c (libftc, through ftc__set_device_ops) and
 * tests/trainer/test_snapshot_fail.c (the trainer's ckpt_device_ops).
 */
#ifndef FTC_TEST_CKPT_FAKE_DEVICE_H
#define FTC_TEST_CKPT_FAKE_DEVICE_H

#include "ftc_test.h"

#include "ckpt/snapshot.h"

#include <pthread.h>
#include <unistd.h>

typedef struct fake_dev {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool stop;
    struct {
        void *dst;
        const void *src;
        uint64_t len;
    } q[64];
    int head, tail, busy;
    int opened, closed, copies, fail_at, syncs;
    bool fail_sync;   /* every sync returns FTC_EIO */
    int fail_sync_at; /* the sync with this number (1-based) returns FTC_EIO; 0: none */
    bool fail_open;   /* open returns FTC_EUNSUPPORTED */
    bool hold;        /* sync waits until the test clears it (its deadline too: a hung
                         device, whose sync does not end) */
    int sync_ms;      /* the longest deadline a sync was given, in ms from its call */
    void *pinned[8];
    int npinned, unpinned;
} fake_dev_t;

static fake_dev_t FD;

static inline void *fake_worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&FD.mu);
    for (;;) {
        while (!FD.stop && FD.head == FD.tail)
            pthread_cond_wait(&FD.cv, &FD.mu);
        if (FD.head == FD.tail)
            break;
        FD.busy = 1;
        int i = FD.head % 64;
        pthread_mutex_unlock(&FD.mu);
        usleep(2000);
        memcpy(FD.q[i].dst, FD.q[i].src, FD.q[i].len);
        pthread_mutex_lock(&FD.mu);
        FD.head++;
        FD.busy = 0;
        pthread_cond_broadcast(&FD.cv);
    }
    pthread_mutex_unlock(&FD.mu);
    return NULL;
}

static inline int fake_open(void **state, ftc_err_t *err)
{
    if (FD.fail_open)
        return ftc_err_set(err, FTC_EUNSUPPORTED, "fake device: no device usable");
    FD.opened++;
    FD.stop = false;
    pthread_create(&FD.th, NULL, fake_worker, NULL);
    *state = &FD;
    return 0;
}

static inline void fake_close(void *state)
{
    assert_ptr_equal(state, &FD);
    pthread_mutex_lock(&FD.mu);
    FD.stop = true;
    pthread_cond_broadcast(&FD.cv);
    pthread_mutex_unlock(&FD.mu);
    pthread_join(FD.th, NULL);
    pthread_mutex_lock(&FD.mu);
    FD.closed++; /* (fake_get reads it: the engine may close from its own thread) */
    pthread_mutex_unlock(&FD.mu);
}

static inline int fake_register(void *state, void *base, uint64_t len, ftc_err_t *err)
{
    (void)state, (void)len, (void)err;
    assert_true(FD.npinned < 8);
    FD.pinned[FD.npinned++] = base;
    return 0;
}

static inline void fake_unregister(void *state, void *base)
{
    (void)state;
    bool known = false;
    for (int i = 0; i < FD.npinned; i++)
        known |= FD.pinned[i] == base;
    assert_true(known);
    FD.unpinned++;
}

static inline int fake_copy(void *state, void *dst, const void *src, uint64_t len, int device,
                            bool to_host, ftc_err_t *err)
{
    (void)state, (void)to_host;
    assert_true(device >= 0 && device < 2);
    pthread_mutex_lock(&FD.mu);
    bool fail = ++FD.copies == FD.fail_at;
    int n = FD.copies;
    if (!fail) {
        assert_true(FD.tail - FD.head < 64);
        int i = FD.tail % 64;
        FD.q[i].dst = dst;
        FD.q[i].src = src;
        FD.q[i].len = len;
        FD.tail++;
        pthread_cond_broadcast(&FD.cv);
    }
    pthread_mutex_unlock(&FD.mu);
    return fail ? ftc_err_set(err, FTC_EIO, "fake device: copy %d failed", n) : 0;
}

static inline int fake_pending(void)
{
    pthread_mutex_lock(&FD.mu);
    int n = FD.tail - FD.head;
    pthread_mutex_unlock(&FD.mu);
    return n;
}

static inline int fake_sync(void *state, int device, ftc_deadline_t d, ftc_err_t *err)
{
    (void)state, (void)device;
    int ms = ftc_deadline_remaining_ms(d);
    pthread_mutex_lock(&FD.mu);
    int n = ++FD.syncs;
    if (ms > FD.sync_ms)
        FD.sync_ms = ms;
    while (FD.head != FD.tail || FD.hold)
        pthread_cond_wait(&FD.cv, &FD.mu);
    bool fail = FD.fail_sync || n == FD.fail_sync_at;
    pthread_mutex_unlock(&FD.mu);
    return fail ? ftc_err_set(err, FTC_EIO, "fake device: sync failed (sync %d)", n) : 0;
}

static inline void fake_set_hold(bool hold)
{
    pthread_mutex_lock(&FD.mu);
    FD.hold = hold;
    pthread_cond_broadcast(&FD.cv);
    pthread_mutex_unlock(&FD.mu);
}

/* The counters a test reads or sets while the engine runs (under FD.mu). */
static inline int fake_get(const int *field)
{
    pthread_mutex_lock(&FD.mu);
    int v = *field;
    pthread_mutex_unlock(&FD.mu);
    return v;
}

static inline void fake_set(int *field, int v)
{
    pthread_mutex_lock(&FD.mu);
    *field = v;
    pthread_mutex_unlock(&FD.mu);
}

static inline const ftc_snap_device_ops_t *fake_dev_ops(void)
{
    static const ftc_snap_device_ops_t ops = {
        sizeof(ftc_snap_device_ops_t), "fake", fake_open, fake_close, fake_register,
        fake_unregister, fake_copy, fake_sync};
    return &ops;
}

/* The stand-in device, fresh for a test (fd_reset) and torn down after it. */
static inline void fd_reset(void)
{
    memset(&FD, 0, sizeof FD);
    pthread_mutex_init(&FD.mu, NULL);
    pthread_cond_init(&FD.cv, NULL);
}

static inline void fd_done(void)
{
    pthread_mutex_destroy(&FD.mu);
    pthread_cond_destroy(&FD.cv);
}

#endif
