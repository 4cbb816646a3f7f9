/*
 * snapshot.h — copying a rank's registered tensors into a shard region
 * (a shm slot) while training goes on.
 *
 * The rank registers its tensors once; each checkpoint then
 *
 *   1. ftc_snap_begin(step, slot): restamps the region and hands the copy to
 *      a pool of threads (host tensors: memcpy in parallel; device tensors:
 *      the device copy ops, cudaMemcpyAsync on a side stream, when built
 *      with CUDA) and returns at once;
 *   2. ftc_snap_wait_copy(): returns when every byte has been copied, so the
 *      trainer may write its tensors again (the optimizer hook calls it);
 *   3. ftc_snap_wait_sealed(): returns when the region is also checksummed
 *      (each tensor's xxh3, computed from the slot, not from the live
 *      tensors) and sealed: only then may it be replicated. The copy threads
 *      hash each tensor as soon as its copy has ended (no other thread is
 *      involved), so the seal follows the copy by the hashing time of the
 *      tensors still unhashed when the last piece is copied.
 *
 * Every wait takes a deadline. The user metadata of a checkpoint (data
 * cursor, RNG state) goes into a fixed-capacity record "user" (u64 length
 * then the bytes), sized at registration.
 *
 * Thread-safety: one thread drives a snapshot handle; the pool threads are
 * internal.
 */
#ifndef FTC_CKPT_SNAPSHOT_H
#define FTC_CKPT_SNAPSHOT_H

#include "ckpt/shard.h"
#include "core/clock.h"
#include "core/err.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_SNAP_HOST (-1) /* device id of a host tensor */

/* Copies between device memory and host memory, provided by the CUDA
 * backend (ckpt/snapshot_cuda.cu) when built; NULL otherwise. */
typedef struct ftc_snap_device_ops {
    uint32_t struct_size;
    const char *name;
    /* Creates the backend's state (one side stream per device, lazily). */
    int (*open)(void **state, ftc_err_t *err);
    void (*close)(void *state);
    /* Prepares host memory [base, base+len) for fast async copies
     * (cudaHostRegister). May fail; copies then still work, slower. */
    int (*host_register)(void *state, void *base, uint64_t len, ftc_err_t *err);
    void (*host_unregister)(void *state, void *base);
    /* Starts an async device->host (to_host) or host->device copy on the
     * snapshot stream of device. */
    int (*copy_async)(void *state, void *dst, const void *src, uint64_t len, int device,
                      bool to_host, ftc_err_t *err);
    /* Waits for all copies started on device's snapshot stream. */
    int (*sync)(void *state, int device, ftc_deadline_t d, ftc_err_t *err);
} ftc_snap_device_ops_t;

/* The CUDA ops of this build, or NULL when built without CUDA. */
const ftc_snap_device_ops_t *ftc_snap_cuda_ops(void);

typedef struct ftc_snap ftc_snap_t;

/* threads: copy threads (0 = one per online core but one, which the trainer
 * computes on, at least 1; at most 16). A restore copies with `threads`
 * threads when given, else with one per online core. */
ftc_snap_t *ftc_snap_create(const ftc_shard_info_t *info, int threads, uint32_t meta_capacity,
                            ftc_err_t *err);
/* Waits for a running copy, for at most the snapshot's timeout
 * (ftc_snap_set_timeout), then frees everything: 0. A copy still running
 * then (a device sync that does not end) is left behind, FTC_ETIMEDOUT: its
 * threads stop at their next piece and never seal, so the region stays an
 * invalid shard, and the last of them to return frees the engine and the
 * device state (pinned regions included) once the copy ends (never, if it
 * never does); until then the caller must leave the region mapped (a late
 * write lands there) and the registered tensors allocated (a piece in hand,
 * a device copy in flight still reads them), or end the process. NULL is a
 * no-op (0). */
int ftc_snap_destroy(ftc_snap_t *s);
/* ftc_snap_destroy with the wait for a running copy ending at d instead
 * (already past: no wait, a running copy is left behind at once): for an
 * owner whose own teardown has one deadline for all its steps
 * (ftc_destroy). */
int ftc_snap_destroy_by(ftc_snap_t *s, ftc_deadline_t d);
/* The deadline, in ms from its start, of each device sync (of a snapshot,
 * of a restore, after a failed copy) and of ftc_snap_destroy's wait; <= 0:
 * the default, 600000 (10 min). The owner's configured timeout: libftc
 * sets its context's timeout_ms. Before the first begin or restore. */
void ftc_snap_set_timeout(ftc_snap_t *s, int timeout_ms);

/* Replaces the device copy ops (default: ftc_snap_cuda_ops(); NULL: host
 * tensors only), before any device tensor is registered: another backend,
 * or a test's stand-in device. FTC_EINVAL after a device tensor, or when
 * ops->struct_size is smaller than this build's. */
int ftc_snap_set_device_ops(ftc_snap_t *s, const ftc_snap_device_ops_t *ops, ftc_err_t *err);

/* Registers a tensor (before the first begin). device FTC_SNAP_HOST or a
 * CUDA device id (FTC_EUNSUPPORTED without device ops: a build without
 * CUDA). FTC_ERANGE when the host tensors together would pass 2^30 copy
 * pieces of 4 MiB (4 PiB), or the shard its limits; a refused tensor
 * leaves nothing behind. */
int ftc_snap_add(ftc_snap_t *s, const char *name, int dtype, uint32_t ndim, const uint64_t *shape,
                 const void *ptr, int device, ftc_err_t *err);
/* Shard bytes the registered tensors need (fixes the layout). */
uint64_t ftc_snap_size(ftc_snap_t *s);
/* Formats a region of ftc_snap_size() bytes (writes the head once). */
int ftc_snap_format(ftc_snap_t *s, uint8_t *region, ftc_err_t *err);

/* Starts a snapshot of step into region (formatted). Fails with FTC_EAGAIN
 * when the previous one has not been waited for. */
int ftc_snap_begin(ftc_snap_t *s, uint8_t *region, uint64_t step, uint64_t generation,
                   const void *meta, uint32_t meta_len, ftc_err_t *err);
/* Waits until the tensors have been copied (they may be written again). */
int ftc_snap_wait_copy(ftc_snap_t *s, ftc_deadline_t d, ftc_err_t *err);
/* Waits until the region is sealed (checksummed). */
int ftc_snap_wait_sealed(ftc_snap_t *s, ftc_deadline_t d, ftc_err_t *err);
/* True while a snapshot is between begin and sealed. */
bool ftc_snap_busy(ftc_snap_t *s);

/* Restores: copies each registered tensor back from a verified region of the
 * same layout (names, dtypes and shapes must match; the error names the
 * first that does not). Fills meta (capacity *meta_len) and *step;
 * FTC_ERANGE, before any tensor is written, when the metadata does not fit.
 * The
 * region is verified (every checksum, on the snapshot's threads) before a
 * byte is copied; the host copies run on the snapshot's threads too. A
 * snapshot still copying the tensors is waited for first (the timeout of
 * ftc_snap_set_timeout): FTC_ETIMEDOUT, nothing written, when it does not
 * end. */
int ftc_snap_restore(ftc_snap_t *s, const uint8_t *region, uint64_t size, uint64_t *step,
                     void *meta, uint32_t *meta_len, ftc_err_t *err);

/* ftc_snap_restore's flags. */
enum {
    /* the caller knows every checksum of region was verified after its last
     * write (the agent verified that very slot): only the structure (head,
     * footer, head checksum) is checked again, not the payload */
    FTC_SNAP_RESTORE_VERIFIED = 1
};
/* ftc_snap_restore with flags (FTC_SNAP_RESTORE_*). */
int ftc_snap_restore_ex(ftc_snap_t *s, const uint8_t *region, uint64_t size, unsigned flags,
                        uint64_t *step, void *meta, uint32_t *meta_len, ftc_err_t *err);

/* Test hook (tests only, through ckpt/client_internal.h): while hold is
 * set, a snapshot whose copy is done is not sealed (it stays "copied", as a
 * seal slower than its deadlines would). */
void ftc__snap_hold_seal(ftc_snap_t *s, bool hold);

#ifdef __cplusplus
}
#endif
#endif
