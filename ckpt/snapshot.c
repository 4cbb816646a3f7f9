/*
 * snapshot.c — see snapshot.h.
 *
 * A persistent pool of copy threads seals while it copies: the host tensors
 * are cut into 4 MiB pieces, ordered tensor by tensor (largest first), and
 *
 *   1. every thread copies the next piece (an atomic counter) until none is
 *      left; the last piece copied publishes "copied" (with the device
 *      copies synchronised), so the trainer waits for the copy alone;
 *   2. then each thread takes the next tensor (another counter), waits for
 *      its last pieces (being copied by the others, at most one piece per
 *      thread) and hashes it from the slot. The first threads out of the
 *      copy start hashing the first tensors while the others finish theirs.
 *
 * Hashing each piece right after copying it, while it is in cache, was
 * measured too (docs/benchmarks-snapshot.md): where xxh3 costs as much CPU
 * as memcpy (these 2-core VMs) it made the copy the trainer waits for about
 * twice as long, for no gain in begin..sealed.
 *
 * With host tensors only, the thread that copies the last piece publishes
 * "copied" and the last thread out of the job writes the footer and
 * publishes "sealed" (no hop through another thread). With device tensors a
 * coordinator thread syncs the device copies, publishes "copied", waits for
 * the host hashes, hashes the device tensors, writes the footer and
 * publishes "sealed". Waits are condition waits with deadlines.
 */
#include "ckpt/snapshot.h"
#include "ckpt/slot.h"

#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FTC_SNAP_PIECE (4u << 20)
#define FTC_SNAP_MAX_PIECES (1u << 30) /* 4 PiB of host tensors: far from wrapping 32 bits */
#define FTC_SNAP_MAX_THREADS 16
#define FTC_SNAP_MAX_DEVICES 16
#define FTC_SNAP_MAX_PINNED 4 /* regions registered with the device (a rank's slots: 3) */

typedef struct ftc__snap_tensor {
    const void *ptr;
    int device;
    uint64_t length;
    uint32_t index; /* in the layout */
    char *name;     /* what a restore checks the checkpoint's tensor against: */
    int dtype;      /* name, dtype and shape */
    uint32_t ndim;
    uint64_t shape[FTC_SHARD_MAX_DIMS];
} ftc__snap_tensor_t;

typedef struct ftc__piece {
    uint32_t t;      /* tensor */
    uint32_t u;      /* its unit */
    uint64_t off, n; /* byte range inside it */
} ftc__piece_t;

typedef struct ftc__unit { /* a host tensor: pieces [first, first+count) */
    uint32_t t;
    uint32_t first, count;
} ftc__unit_t;

enum { PH_IDLE = 0, PH_COPYING = 1, PH_COPIED = 2, PH_SEALED = 3, PH_FAILED = 4 };

struct ftc_snap {
    ftc_shard_info_t info;
    ftc_shard_layout_t *layout;
    ftc__snap_tensor_t *t;
    uint32_t nt, capt;
    uint32_t meta_cap;
    int threads;
    bool frozen;       /* layout fixed */
    bool has_dev;      /* a device tensor is registered: the coordinator syncs and seals */
    uint64_t host_pieces; /* FTC_SNAP_PIECE pieces of the host tensors registered */
    uint64_t size;
    const ftc_snap_device_ops_t *dev; /* NULL in a build without CUDA */
    void *dev_state;                  /* dev's state, opened on the first device tensor */
    bool dev_used[FTC_SNAP_MAX_DEVICES];
    uint8_t *pinned[FTC_SNAP_MAX_PINNED]; /* regions registered with the device */
    int npinned;
    /* current snapshot */
    uint8_t *region;
    ftc__piece_t *pieces;       /* unit by unit */
    uint32_t npieces;
    ftc__unit_t *units;         /* host tensors, largest first */
    atomic_uint *unit_left;     /* pieces of each unit not copied yet */
    uint32_t nunits;
    atomic_uint next_piece;     /* next piece to copy */
    atomic_uint next_unit;      /* next unit to hash */
    atomic_uint copied;   /* pieces copied */
    int left;             /* workers done with the current job (their tensors hashed), under mu */
    uint64_t job;         /* incremented per begin: wakes the workers */
    int phase;            /* PH_*, under mu */
    ftc_err_t job_err;    /* why PH_FAILED */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    pthread_t *tid;
    int nthreads;
    int rthreads; /* threads of a restore's copy */
    pthread_t coord;
    bool coord_started;
    bool stop;
    int timeout_ms;       /* deadline of the device syncs and of destroy's wait (set_timeout) */
    atomic_bool quit;     /* destroy gave up on a running copy: its threads stop and never seal */
    int alive;            /* threads not returned yet, under mu */
    bool orphaned;        /* destroy gave up on it: the last thread out frees it, under mu */
    bool hold_seal;       /* test hook (ftc__snap_hold_seal): the seal waits, under mu */
};

/* Test hook: the thread that seals waits (mu held) while hold_seal is set. */
static void ftc__snap_seal_gate(ftc_snap_t *s)
{
    while (s->hold_seal && !s->stop)
        pthread_cond_wait(&s->cv_done, &s->mu);
}

void ftc__snap_hold_seal(ftc_snap_t *s, bool hold)
{
    pthread_mutex_lock(&s->mu);
    s->hold_seal = hold;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
}

/* The last piece is copied: without device tensors that is "copied" (no
 * hop through the coordinator); with them the coordinator syncs first. */
static void ftc__snap_copied(ftc_snap_t *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->has_dev && s->phase == PH_COPYING)
        s->phase = PH_COPIED;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
}

/* Frees an engine whose threads have all returned. */
static void ftc__snap_free(ftc_snap_t *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    if (s->dev && s->dev_state) {
        for (int i = 0; i < s->npinned; i++) /* before the caller unmaps or frees them */
            s->dev->host_unregister(s->dev_state, s->pinned[i]);
        s->dev->close(s->dev_state);
    }
    ftc_shard_layout_destroy(s->layout);
    free(s->tid);
    for (uint32_t i = 0; i < s->nt; i++)
        free(s->t[i].name);
    free(s->t);
    free(s->pieces);
    free((void *)s->unit_left);
    free(s->units);
    free(s);
}

/* A thread's way out, mu held: the last one out of an engine that
 * ftc_snap_destroy gave up on (a copy that outlived its deadline) frees it,
 * once nothing can touch it any more. */
static void ftc__snap_thread_exit(ftc_snap_t *s)
{
    bool last = --s->alive == 0 && s->orphaned;
    pthread_mutex_unlock(&s->mu);
    if (last)
        ftc__snap_free(s);
}

/* mu held: waits for a job newer than *seen and takes it; false when the
 * engine is told to stop. */
static bool ftc__snap_next_job(ftc_snap_t *s, uint64_t *seen)
{
    while (!s->stop && s->job == *seen)
        pthread_cond_wait(&s->cv_work, &s->mu);
    if (s->stop)
        return false;
    *seen = s->job;
    return true;
}

static void *ftc__snap_worker(void *arg)
{
    ftc_snap_t *s = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->mu);
    while (ftc__snap_next_job(s, &seen)) {
        pthread_mutex_unlock(&s->mu);
        for (;;) { /* 1. copy */
            uint32_t k = atomic_fetch_add(&s->next_piece, 1);
            if (k >= s->npieces || atomic_load_explicit(&s->quit, memory_order_relaxed))
                break;
            const ftc__piece_t *p = &s->pieces[k];
            const ftc__snap_tensor_t *t = &s->t[p->t];
            uint8_t *dst = ftc_shard_payload_ptr(s->layout, s->region, t->index);
            memcpy(dst + p->off, (const uint8_t *)t->ptr + p->off, p->n);
            atomic_fetch_sub_explicit(&s->unit_left[p->u], 1, memory_order_release);
            if (atomic_fetch_add(&s->copied, 1) + 1 == s->npieces)
                ftc__snap_copied(s);
        }
        for (;;) { /* 2. hash, tensor by tensor, as their copies end */
            uint32_t u = atomic_fetch_add(&s->next_unit, 1);
            if (u >= s->nunits)
                break;
            /* its remaining pieces are being copied by the other threads */
            while (atomic_load_explicit(&s->unit_left[u], memory_order_acquire) > 0 &&
                   !atomic_load_explicit(&s->quit, memory_order_relaxed))
                sched_yield();
            if (atomic_load_explicit(&s->quit, memory_order_relaxed))
                break; /* abandoned (ftc_snap_destroy): its pieces may never come */
            const ftc__snap_tensor_t *t = &s->t[s->units[u].t];
            ftc_shard_set_tensor_xxh3(
                s->region, t->index,
                ftc_xxh3(ftc_shard_payload_ptr(s->layout, s->region, t->index), t->length));
        }
        pthread_mutex_lock(&s->mu);
        if (++s->left == s->nthreads && !s->has_dev) {
            /* the last thread out seals a host-only snapshot itself; nothing
             * else moves the phase meanwhile (begin refuses until sealed) */
            s->phase = PH_COPIED; /* (already, unless it had no piece) */
            pthread_cond_broadcast(&s->cv_done);
            ftc__snap_seal_gate(s);
            bool quit = s->stop; /* abandoned: never sealed */
            pthread_mutex_unlock(&s->mu);
            ftc_err_t err = {0};
            int rc = quit ? ftc_err_set(&err, FTC_ECANCELED, "snapshot abandoned (destroyed)")
                          : ftc_shard_seal_head(s->region, s->size, &err);
            pthread_mutex_lock(&s->mu);
            s->phase = rc ? PH_FAILED : PH_SEALED;
            if (rc)
                s->job_err = err;
        }
        pthread_cond_broadcast(&s->cv_done);
    }
    ftc__snap_thread_exit(s);
    return NULL;
}

/* Waits for the copy of one snapshot (publishes "copied"), then for its
 * hashes (publishes "sealed"). */
static void *ftc__snap_coord(void *arg)
{
    ftc_snap_t *s = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->mu);
    while (ftc__snap_next_job(s, &seen)) {
        if (!s->has_dev)
            continue; /* host tensors only: the copy threads publish and seal */
        while (atomic_load(&s->copied) < s->npieces && !s->stop)
            pthread_cond_wait(&s->cv_done, &s->mu);
        /* the snapshot's device copies: the deadline its owner configured */
        ftc_deadline_t dl = ftc_deadline_in_ms((uint64_t)s->timeout_ms);
        pthread_mutex_unlock(&s->mu);
        ftc_err_t err = {0};
        int rc = 0;
        for (int d = 0; d < FTC_SNAP_MAX_DEVICES && !rc; d++)
            if (s->dev_used[d])
                rc = s->dev->sync(s->dev_state, d, dl, &err);
        pthread_mutex_lock(&s->mu);
        if (!rc) {
            s->phase = PH_COPIED;
            pthread_cond_broadcast(&s->cv_done);
        }
        /* the workers leave the job only once every tensor they took is
         * hashed; a failed sync is published only then: until they are out
         * they still write the region, and a caller that has the error may
         * begin the next snapshot into it (busy() is false once failed) */
        while (s->left < s->nthreads)
            pthread_cond_wait(&s->cv_done, &s->mu);
        if (!rc)
            ftc__snap_seal_gate(s);
        if (!rc && s->stop) /* abandoned (ftc_snap_destroy): never sealed */
            rc = ftc_err_set(&err, FTC_ECANCELED, "snapshot abandoned (destroyed)");
        pthread_mutex_unlock(&s->mu);
        if (!rc) {
            for (uint32_t i = 0; i < s->nt; i++) /* device tensors: hashed from the slot */
                if (s->t[i].device != FTC_SNAP_HOST)
                    ftc_shard_set_tensor_xxh3(
                        s->region, s->t[i].index,
                        ftc_xxh3(ftc_shard_payload_ptr(s->layout, s->region, s->t[i].index),
                                 s->t[i].length));
            rc = ftc_shard_seal_head(s->region, s->size, &err);
        }
        pthread_mutex_lock(&s->mu);
        s->phase = rc ? PH_FAILED : PH_SEALED;
        if (rc)
            s->job_err = err;
        pthread_cond_broadcast(&s->cv_done);
    }
    ftc__snap_thread_exit(s);
    return NULL;
}

ftc_snap_t *ftc_snap_create(const ftc_shard_info_t *info, int threads, uint32_t meta_capacity,
                            ftc_err_t *err)
{
    ftc_snap_t *s = calloc(1, sizeof *s);
    if (!s) {
        ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
        return NULL;
    }
    s->info = *info;
    s->meta_cap = meta_capacity;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = online > 0 ? (int)online : 1;
    /* the copy runs while the trainer computes: by default it leaves one
     * core to the trainer's thread (on 2 cores, two copy threads made the
     * compute loop of bench_snapshot 1.13-1.46x slower, one 0.90-1.02x);
     * a restore has the cores to itself */
    s->rthreads = threads > 0 ? threads : cores;
    if (threads <= 0)
        threads = cores > 1 ? cores - 1 : 1;
    s->threads = threads > FTC_SNAP_MAX_THREADS ? FTC_SNAP_MAX_THREADS : threads;
    s->dev = ftc_snap_cuda_ops();
    s->timeout_ms = 600000;
    atomic_init(&s->quit, false);
    pthread_mutex_init(&s->mu, NULL);
    ftc_cond_init(&s->cv_work);
    ftc_cond_init(&s->cv_done); /* its timed waits count on the monotonic clock */
    s->layout = ftc_shard_layout_create(info);
    s->tid = calloc((size_t)s->threads, sizeof *s->tid);
    if (!s->layout || !s->tid) {
        ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
        ftc_snap_destroy(s);
        return NULL;
    }
    /* (no thread returns before ftc_snap_destroy stops them) */
    for (int i = 0; i < s->threads; i++) {
        if (pthread_create(&s->tid[i], NULL, ftc__snap_worker, s) != 0)
            break;
        s->nthreads++;
        s->alive++;
    }
    if (s->nthreads == 0 || pthread_create(&s->coord, NULL, ftc__snap_coord, s) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "snapshot: cannot start threads");
        ftc_snap_destroy(s);
        return NULL;
    }
    s->coord_started = true;
    s->alive++;
    return s;
}

void ftc_snap_set_timeout(ftc_snap_t *s, int timeout_ms)
{
    pthread_mutex_lock(&s->mu);
    s->timeout_ms = timeout_ms > 0 ? timeout_ms : 600000;
    pthread_mutex_unlock(&s->mu);
}

int ftc_snap_destroy(ftc_snap_t *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->mu);
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)s->timeout_ms);
    pthread_mutex_unlock(&s->mu);
    return ftc_snap_destroy_by(s, d);
}

int ftc_snap_destroy_by(ftc_snap_t *s, ftc_deadline_t d)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->mu);
    while ((s->phase == PH_COPYING || s->phase == PH_COPIED) && !ftc_deadline_expired(d)) {
        struct timespec ts = ftc_cond_abstime(d);
        pthread_cond_timedwait(&s->cv_done, &s->mu, &ts);
    }
    bool running = s->phase == PH_COPYING || s->phase == PH_COPIED;
    s->stop = true;
    atomic_store(&s->quit, true);
    /* the threads' ids, copied while none can have returned (mu held): once
     * it is orphaned, the last thread out frees s */
    int nt = s->nthreads;
    bool coord = s->coord_started;
    pthread_t tid[FTC_SNAP_MAX_THREADS + 1];
    for (int i = 0; i < nt; i++)
        tid[i] = s->tid[i];
    if (coord)
        tid[nt] = s->coord;
    bool orphan = s->orphaned = running && s->alive > 0;
    pthread_cond_broadcast(&s->cv_work);
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
    if (orphan) {
        /* a copy that outlived the deadline (a device sync that does not
         * end): its threads may still write the region, read the tensors
         * and use the device state; they stop at their next piece and never
         * seal (the region stays an invalid shard), and the last one out
         * frees the engine and its device state. Until then, left behind. */
        FTC_WARN("snapshot", "a snapshot still copying at its destroy's deadline: left behind, "
                 "never sealed; its threads free it when the copy ends, and its region must "
                 "stay mapped");
        for (int i = 0; i < nt + coord; i++)
            pthread_detach(tid[i]);
        return FTC_ETIMEDOUT;
    }
    for (int i = 0; i < nt + coord; i++)
        pthread_join(tid[i], NULL);
    ftc__snap_free(s);
    return 0;
}

int ftc_snap_set_device_ops(ftc_snap_t *s, const ftc_snap_device_ops_t *ops, ftc_err_t *err)
{
    if (s->has_dev || s->dev_state)
        return ftc_err_set(err, FTC_EINVAL, "snapshot: device ops are set before the first device "
                                            "tensor is registered");
    if (ops && ops->struct_size < sizeof *ops)
        return ftc_err_set(err, FTC_EINVAL, "snapshot: device ops '%s' of %u bytes, this build "
                                            "needs %zu",
                           ops->name ? ops->name : "?", ops->struct_size, sizeof *ops);
    s->dev = ops;
    return 0;
}

int ftc_snap_add(ftc_snap_t *s, const char *name, int dtype, uint32_t ndim, const uint64_t *shape,
                 const void *ptr, int device, ftc_err_t *err)
{
    if (s->frozen)
        return ftc_err_set(err, FTC_EINVAL, "tensor '%s': register every tensor before the first "
                                            "checkpoint", name ? name : "");
    if (device != FTC_SNAP_HOST && (!s->dev || device < 0 || device >= FTC_SNAP_MAX_DEVICES))
        return ftc_err_set(err, FTC_EUNSUPPORTED,
                           "tensor '%s' is on CUDA device %d, but this ftc was built without "
                           "CUDA (rebuild with nvcc on PATH, -DFTC_WITH_CUDA=ON)",
                           name ? name : "", device);
    /* everything that can fail is done before the layout records the name,
     * so a refused tensor leaves nothing behind and the caller may register
     * it again (with its data, or as a host tensor when the device ops could
     * not open) */
    if (!ptr && ftc_dtype_size(dtype)) {
        uint64_t n = 1;
        for (uint32_t k = 0; k < ndim && k < FTC_SHARD_MAX_DIMS && shape; k++)
            n *= shape[k];
        if (n)
            return ftc_err_set(err, FTC_EINVAL, "tensor '%s': NULL data pointer", name ? name : "");
    }
    /* the host tensors' pieces are counted and indexed in 32 bits (their
     * counters run a little past the count): a tensor of 2^61 bytes, within
     * the shard's limits, made 2^39 pieces whose count wrapped to 0 and
     * overran the piece table. The layout refuses an overflowing shape. */
    uint64_t bytes = ftc_dtype_size(dtype);
    bool ovf = false;
    for (uint32_t k = 0; k < ndim && k < FTC_SHARD_MAX_DIMS && shape && !ovf; k++) {
        ovf = shape[k] && bytes > UINT64_MAX / shape[k];
        bytes *= shape[k];
    }
    uint64_t pieces = bytes / FTC_SNAP_PIECE + 1;
    if (!ovf && device == FTC_SNAP_HOST && pieces > FTC_SNAP_MAX_PIECES - s->host_pieces)
        return ftc_err_set(err, FTC_ERANGE,
                           "tensor '%s' of %llu bytes: the host tensors together would make more "
                           "than %u copy pieces of %u MiB (a shape gone wrong?)",
                           name ? name : "", (unsigned long long)bytes, FTC_SNAP_MAX_PIECES,
                           FTC_SNAP_PIECE >> 20);
    if (s->nt == s->capt) {
        uint32_t cap = s->capt ? s->capt * 2 : 16;
        ftc__snap_tensor_t *t = realloc(s->t, cap * sizeof *t);
        if (!t)
            return ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
        s->t = t;
        s->capt = cap;
    }
    if (device != FTC_SNAP_HOST && !s->dev_state) {
        int rc = s->dev->open(&s->dev_state, err);
        if (rc)
            return rc;
    }
    char *copy = name ? strdup(name) : NULL; /* the layout refuses a NULL name */
    if (name && !copy)
        return ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
    int idx = ftc_shard_layout_add_tensor(s->layout, name, dtype, ndim, shape, err);
    if (idx < 0) {
        free(copy);
        return idx;
    }
    uint64_t len = ftc_dtype_size(dtype); /* no overflow: the layout checked it */
    for (uint32_t k = 0; k < ndim; k++)
        len *= shape[k];
    ftc__snap_tensor_t *t = &s->t[s->nt++];
    *t = (ftc__snap_tensor_t){ptr, device, len, (uint32_t)idx, copy, dtype, ndim, {0}};
    for (uint32_t k = 0; k < ndim; k++)
        t->shape[k] = shape[k];
    if (device != FTC_SNAP_HOST)
        s->dev_used[device] = s->has_dev = true;
    else
        s->host_pieces += pieces;
    return 0;
}

static int ftc__snap_freeze(ftc_snap_t *s, ftc_err_t *err)
{
    if (s->frozen)
        return 0;
    if (s->meta_cap) {
        uint8_t *zero = calloc(1, 8 + (size_t)s->meta_cap);
        if (!zero)
            return ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
        int rc = ftc_shard_layout_add_meta(s->layout, "user", zero, 8 + (size_t)s->meta_cap, err);
        free(zero);
        if (rc)
            return rc;
    }
    uint32_t n = 0, nu = 0;
    for (uint32_t i = 0; i < s->nt; i++)
        if (s->t[i].device == FTC_SNAP_HOST) {
            n += (uint32_t)((s->t[i].length + FTC_SNAP_PIECE - 1) / FTC_SNAP_PIECE);
            nu++;
        }
    s->pieces = calloc(n ? n : 1, sizeof *s->pieces);
    s->units = calloc(nu ? nu : 1, sizeof *s->units);
    s->unit_left = calloc(nu ? nu : 1, sizeof *s->unit_left);
    if (!s->pieces || !s->units || !s->unit_left)
        return ftc_err_set(err, FTC_ENOMEM, "snapshot: out of memory");
    /* units largest first (insertion sort: registration is small), so the
     * last tensors claimed are the short ones */
    nu = 0;
    for (uint32_t i = 0; i < s->nt; i++) {
        if (s->t[i].device != FTC_SNAP_HOST)
            continue;
        uint32_t j = nu++;
        while (j > 0 && s->t[s->units[j - 1].t].length < s->t[i].length) {
            s->units[j] = s->units[j - 1];
            j--;
        }
        s->units[j].t = i;
    }
    s->nunits = nu;
    n = 0;
    for (uint32_t ui = 0; ui < nu; ui++) {
        uint32_t i = s->units[ui].t;
        s->units[ui].first = n;
        for (uint64_t off = 0; off < s->t[i].length; off += FTC_SNAP_PIECE) {
            uint64_t len = s->t[i].length - off;
            s->pieces[n++] =
                (ftc__piece_t){i, ui, off, len < FTC_SNAP_PIECE ? len : FTC_SNAP_PIECE};
        }
        s->units[ui].count = n - s->units[ui].first;
    }
    s->npieces = n;
    s->size = ftc_shard_layout_size(s->layout);
    s->frozen = true;
    return 0;
}

uint64_t ftc_snap_size(ftc_snap_t *s)
{
    ftc_err_t err = {0};
    return ftc__snap_freeze(s, &err) == 0 ? s->size : 0;
}

int ftc_snap_format(ftc_snap_t *s, uint8_t *region, ftc_err_t *err)
{
    int rc = ftc__snap_freeze(s, err);
    if (rc)
        return rc;
    rc = ftc_shard_layout_write(s->layout, region, s->size, err);
    /* each distinct region once (a rank's slots take turns: an unpinned one
     * makes a device->host cudaMemcpyAsync return only once it is done) */
    bool pinned = false;
    for (int i = 0; i < s->npinned; i++)
        pinned |= s->pinned[i] == region;
    if (!rc && s->dev_state && !pinned && s->npinned < FTC_SNAP_MAX_PINNED) {
        ftc_err_t e = {0};
        if (s->dev->host_register(s->dev_state, region, s->size, &e) == 0)
            s->pinned[s->npinned++] = region;
        else
            FTC_WARN("snapshot", "pinning the slot failed (%s): device copies will be slower",
                     e.msg);
    }
    return rc;
}

bool ftc_snap_busy(ftc_snap_t *s)
{
    pthread_mutex_lock(&s->mu);
    bool b = s->phase == PH_COPYING || s->phase == PH_COPIED;
    pthread_mutex_unlock(&s->mu);
    return b;
}

/* After a failed copy_async: waits (bounded) for the copies already started,
 * so that none still writes the region or reads it once the caller has the
 * error (and may unregister, unmap or rewrite it). */
static void ftc__snap_drain(ftc_snap_t *s)
{
    for (int d = 0; d < FTC_SNAP_MAX_DEVICES; d++)
        if (s->dev_used[d]) {
            ftc_err_t ignored = {0};
            (void)s->dev->sync(s->dev_state, d, ftc_deadline_in_ms((uint64_t)s->timeout_ms),
                               &ignored);
        }
}

int ftc_snap_begin(ftc_snap_t *s, uint8_t *region, uint64_t step, uint64_t generation,
                   const void *meta, uint32_t meta_len, ftc_err_t *err)
{
    int rc = ftc__snap_freeze(s, err);
    if (rc)
        return rc;
    if (ftc_snap_busy(s))
        return ftc_err_set(err, FTC_EAGAIN, "snapshot of step %llu requested while the previous "
                                            "one is still in progress: wait for it first",
                           (unsigned long long)step);
    if (meta_len > s->meta_cap)
        return ftc_err_set(err, FTC_ERANGE, "checkpoint metadata of %u bytes exceeds the %u "
                                            "registered", meta_len, s->meta_cap);
    /* the footer goes first and comes back last (the seal): a region being
     * written is never a valid shard, even when it is restamped with the
     * step and generation it held (a retried checkpoint), whose header, head
     * checksum and footer would otherwise all still match over tensors half
     * old, half new. The fence orders it before the copy for readers in
     * other processes. */
    memset(region + s->size - FTC_SHARD_FOOTER_SIZE, 0, FTC_SHARD_FOOTER_SIZE);
    atomic_thread_fence(memory_order_release);
    ftc_shard_restamp(region, step, generation);
    if (s->meta_cap) {
        uint8_t *val = region + ftc_shard_layout_meta_offset(s->layout, "user");
        uint64_t len = meta_len;
        memcpy(val, &len, 8);
        if (meta_len)
            memcpy(val + 8, meta, meta_len);
        memset(val + 8 + meta_len, 0, s->meta_cap - meta_len);
    }
    for (uint32_t i = 0; i < s->nt; i++) {
        const ftc__snap_tensor_t *t = &s->t[i];
        if (t->device == FTC_SNAP_HOST || !t->length)
            continue;
        rc = s->dev->copy_async(s->dev_state, ftc_shard_payload_ptr(s->layout, region, t->index),
                                t->ptr, t->length, t->device, true, err);
        if (rc) {
            ftc__snap_drain(s);
            return rc;
        }
    }
    pthread_mutex_lock(&s->mu);
    s->region = region;
    for (uint32_t u = 0; u < s->nunits; u++)
        atomic_store_explicit(&s->unit_left[u], s->units[u].count, memory_order_relaxed);
    atomic_store(&s->next_piece, 0);
    atomic_store(&s->next_unit, 0);
    atomic_store(&s->copied, 0);
    s->left = 0;
    s->phase = PH_COPYING;
    ftc_err_clear(&s->job_err);
    s->job++;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Waits until phase reaches at least want (or failed), with a deadline. */
static int ftc__snap_wait(ftc_snap_t *s, int want, ftc_deadline_t d, ftc_err_t *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (s->phase != PH_IDLE && s->phase < want && s->phase != PH_FAILED) {
        if (d.at_ns == UINT64_MAX) {
            pthread_cond_wait(&s->cv_done, &s->mu);
            continue;
        }
        int ms = ftc_deadline_remaining_ms(d);
        if (ms <= 0) {
            rc = ftc_err_set(err, FTC_ETIMEDOUT, "snapshot still %s at its deadline",
                             s->phase == PH_COPYING ? "copying" : "being sealed");
            break;
        }
        struct timespec ts = ftc_cond_abstime(d);
        pthread_cond_timedwait(&s->cv_done, &s->mu, &ts);
    }
    if (!rc && s->phase == PH_FAILED) {
        if (err)
            *err = s->job_err;
        rc = s->job_err.code ? s->job_err.code : FTC_EIO;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ftc_snap_wait_copy(ftc_snap_t *s, ftc_deadline_t d, ftc_err_t *err)
{
    return ftc__snap_wait(s, PH_COPIED, d, err);
}

int ftc_snap_wait_sealed(ftc_snap_t *s, ftc_deadline_t d, ftc_err_t *err)
{
    return ftc__snap_wait(s, PH_SEALED, d, err);
}

/* ---- restore: the host copies on up to the snapshot's thread count ---- */

typedef struct ftc__rcopy {
    const ftc_snap_t *s;
    const ftc_shard_view_t *v;
    uint64_t piece;        /* bytes per piece */
    uint64_t npieces;      /* over all host tensors, tensor by tensor */
    atomic_uint_fast64_t next;
} ftc__rcopy_t;

static void *ftc__rcopy_worker(void *arg)
{
    ftc__rcopy_t *j = arg;
    for (;;) {
        uint64_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->npieces)
            return NULL;
        /* piece k: find its tensor (few tensors; a linear walk is fine) */
        for (uint32_t i = 0; i < j->s->nt; i++) {
            if (j->s->t[i].device != FTC_SNAP_HOST || !j->s->t[i].length)
                continue;
            uint64_t len = j->s->t[i].length, np = (len + j->piece - 1) / j->piece;
            if (k >= np) {
                k -= np;
                continue;
            }
            ftc_shard_tensor_t t;
            ftc_shard_get(j->v, j->s->t[i].index, &t);
            uint64_t off = k * j->piece, n = len - off < j->piece ? len - off : j->piece;
            /* freshly allocated tensors: their pages in one call, not one fault each */
            ftc_mem_prefault((uint8_t *)j->s->t[i].ptr + off, n);
            memcpy((uint8_t *)j->s->t[i].ptr + off, t.data + off, n);
            break;
        }
    }
}

static void ftc__rcopy_run(const ftc_snap_t *s, const ftc_shard_view_t *v)
{
    enum { PIECE = 8u << 20, MAX_THREADS = 64 };
    ftc__rcopy_t j = {.s = s, .v = v, .piece = PIECE};
    for (uint32_t i = 0; i < s->nt; i++)
        if (s->t[i].device == FTC_SNAP_HOST)
            j.npieces += (s->t[i].length + PIECE - 1) / PIECE;
    atomic_init(&j.next, 0);
    int n = s->rthreads < 1 ? 1 : s->rthreads > MAX_THREADS ? MAX_THREADS : s->rthreads;
    if ((uint64_t)n > j.npieces)
        n = j.npieces ? (int)j.npieces : 1;
    pthread_t tid[MAX_THREADS];
    int started = 0;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tid[started], NULL, ftc__rcopy_worker, &j) != 0)
            break; /* fewer threads is fine; the caller does the rest */
        started++;
    }
    ftc__rcopy_worker(&j);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

int ftc_snap_restore(ftc_snap_t *s, const uint8_t *region, uint64_t size, uint64_t *step,
                     void *meta, uint32_t *meta_len, ftc_err_t *err)
{
    return ftc_snap_restore_ex(s, region, size, 0, step, meta, meta_len, err);
}

int ftc_snap_restore_ex(ftc_snap_t *s, const uint8_t *region, uint64_t size, unsigned flags,
                        uint64_t *step, void *meta, uint32_t *meta_len, ftc_err_t *err)
{
    /* a snapshot still copying reads the very tensors a restore writes: its
     * seal would hash a mix of both states into checksums that verify. Its
     * copy ends first (the owner's deadline); one that does not is this
     * restore's FTC_ETIMEDOUT, every tensor left as it was. A failed one is
     * not running any more: its error is its waiter's, not the restore's */
    pthread_mutex_lock(&s->mu);
    ftc_deadline_t cd = ftc_deadline_in_ms((uint64_t)s->timeout_ms);
    pthread_mutex_unlock(&s->mu);
    ftc_err_t cerr = {0};
    if (ftc__snap_wait(s, PH_COPIED, cd, &cerr) == FTC_ETIMEDOUT)
        return ftc_err_set(err, FTC_ETIMEDOUT,
                           "restore: the snapshot in flight still reads the tensors (%s): "
                           "nothing restored",
                           cerr.msg);
    ftc_shard_view_t v;
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_shard_open(&v, region, size, 0, err);
    if (rc == 0 && !(flags & FTC_SNAP_RESTORE_VERIFIED))
        rc = ftc_shard_verify(&v, s->rthreads, err);
    if (rc)
        return rc;
    uint64_t t1 = ftc_now_ns();
    if (v.n_tensors != s->nt)
        return ftc_err_set(err, FTC_EINVAL, "checkpoint has %u tensors, %u are registered",
                           v.n_tensors, s->nt);
    for (uint32_t i = 0; i < s->nt; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, s->t[i].index, &t);
        const ftc__snap_tensor_t *r = &s->t[i];
        bool same = t.name_len == strlen(r->name) && !memcmp(t.name, r->name, t.name_len) &&
                    t.dtype == r->dtype && t.ndim == r->ndim;
        for (uint32_t k = 0; same && k < r->ndim; k++)
            same = t.shape[k] == r->shape[k];
        if (!same)
            return ftc_err_set(err, FTC_EINVAL,
                               "tensor '%s' (registered #%u): the checkpoint's tensor #%u is "
                               "'%.*s' of dtype %d and %u dims (%llu bytes), the registered one "
                               "has dtype %d and %u dims: register the tensors as the checkpoint "
                               "was written (names, order, dtypes, shapes)",
                               r->name, i, r->index, (int)(t.name_len > 200 ? 200 : t.name_len),
                               t.name, t.dtype, t.ndim, (unsigned long long)t.length, r->dtype,
                               r->ndim);
        uint64_t want_len = s->t[i].length;
        if (t.length != want_len)
            return ftc_err_set(err, FTC_EINVAL,
                               "tensor '%.*s': checkpoint holds %llu bytes, the registered tensor "
                               "has %llu (shape or dtype changed?)",
                               (int)t.name_len, t.name, (unsigned long long)t.length,
                               (unsigned long long)want_len);
    }
    /* the metadata fits the caller's buffer before a tensor is written: a
     * refused restore leaves them as they were */
    const uint8_t *mval = NULL;
    uint64_t mlen = 0;
    if (meta_len) {
        uint32_t vl;
        if (ftc_shard_meta_get(&v, "user", &mval, &vl) == 0 && vl >= 8) {
            memcpy(&mlen, mval, 8);
            if (mlen > vl - 8 || mlen > *meta_len)
                return ftc_err_set(err, FTC_ERANGE, "checkpoint metadata is %llu bytes; buffer "
                                                    "holds %u", (unsigned long long)mlen,
                                   *meta_len);
        } else {
            mval = NULL;
        }
    }
    ftc__rcopy_run(s, &v); /* the host tensors */
    for (uint32_t i = 0; i < s->nt; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, s->t[i].index, &t);
        if (!t.length || s->t[i].device == FTC_SNAP_HOST)
            continue;
        rc = s->dev->copy_async(s->dev_state, (void *)s->t[i].ptr, t.data, t.length,
                                s->t[i].device, false, err);
        if (rc) {
            ftc__snap_drain(s);
            return rc;
        }
    }
    for (int d = 0; d < FTC_SNAP_MAX_DEVICES; d++)
        if (s->dev_used[d] &&
            (rc = s->dev->sync(s->dev_state, d, ftc_deadline_in_ms((uint64_t)s->timeout_ms), err)))
            return rc;
    FTC_DEBUG("snap", "restore: %s %.1f ms, copy %.1f ms (%llu bytes, %d threads)",
              flags & FTC_SNAP_RESTORE_VERIFIED ? "open (verified by the agent)" : "verify",
              (double)(t1 - t0) / 1e6, (double)(ftc_now_ns() - t1) / 1e6,
              (unsigned long long)size, s->rthreads);
    *step = v.info.step;
    if (meta_len) {
        if (mval && mlen)
            memcpy(meta, mval + 8, mlen);
        *meta_len = mval ? (uint32_t)mlen : 0;
    }
    return 0;
}
