/*
 * coll_nccl.h — the NCCL backend of trainer/coll.h (backend name "nccl"):
 * the same ftc_coll_* calls on CUDA device buffers, over one non-blocking
 * NCCL communicator per group, plus the bootstrap that hands NCCL's unique id
 * to every rank and an in-process shrink for recovery when ranks are only
 * removed.
 *
 * Bootstrap (ftc_coll_nccl_rendezvous, used by ftc_coll_nccl_create). Rank 0
 * publishes the 128-byte id, every rank announces itself, and every rank
 * waits until the id and all `size` ranks are there — so a rank that never
 * comes is named at the deadline (NCCL's own init would just hang without
 * saying who is missing). Two carriers:
 *   - a shared directory: dir/nccl.<gen>.id and dir/nccl.<gen>.rank<r>,
 *     written atomically (temp file + rename, as ftc_coll_exchange_dir);
 *   - Redis: ftc:{job}:nccl:<gen>:id (SET PX ttl), ftc:{job}:nccl:<gen>:ranks
 *     (a hash, field = rank) and ftc:{job}:nccl:gen (the newest generation
 *     published), all with a TTL.
 * A caller with its own rendezvous (trainer/dist.c's TCP one) skips this:
 * rank 0 makes the id with ftc_coll_nccl_unique_id, the caller carries it,
 * and every rank passes it as boot.id.
 * The generation is in every name (invariant I4): an id of another
 * incarnation is never read, and a rank whose generation is older than one
 * already published is refused with FTC_ESTALE at once (rank 0 refuses to
 * publish it too). The id record also carries the group size: a rank told a
 * different size gets FTC_EPROTO. The rendezvous works in every build (it
 * needs no GPU), so it is tested on machines without one.
 *
 * Collectives (see coll.h for the semantics). Buffers are device memory on
 * the communicator's CUDA device. Every call makes its private stream wait
 * for the caller's stream (boot->stream, default the legacy default stream),
 * enqueues the NCCL operation(s), then polls ncclCommGetAsyncError and the
 * stream until done, the deadline, or the abort flag: the call returns with
 * the data complete. Differences from the CPU backend:
 *   - FTC_COLL_F32 sums are NCCL's: bit-identical to the rank-order sum for
 *     1 or 2 ranks (fp addition commutes), otherwise in NCCL's order (ring or
 *     tree, by size and topology) — deterministic run to run only on the same
 *     topology with NCCL_ALGO / NCCL_PROTO fixed. Deterministic training uses
 *     FTC_COLL_I128, which this backend does not sum yet (below).
 *   - FTC_COLL_I128 all_reduce / reduce_scatter: FTC_EUNSUPPORTED (NCCL has
 *     no 128-bit integer sum; an exact limb split needs a device kernel).
 *     all_gather and broadcast move any dtype (they are byte copies).
 *   - reduce_scatter / all_gather with count % size != 0: NCCL wants equal
 *     chunks, so the coll.h chunks are padded to ceil(count/size) elements in
 *     a device scratch buffer (zeros in the padding), one NCCL call runs on
 *     the scratch, and the chunks are copied back (cudaMemcpy2DAsync). When
 *     count % size == 0 the call runs in place on buf.
 *   - barrier: an all-reduce of one float.
 *
 * Faults. On the deadline, the abort flag (ftc_coll_abort from any thread:
 * it only sets the flag; the calling thread, which polls every ~50 us,
 * reacts) or an NCCL async error, the call calls ncclCommAbort (which stops
 * the kernels) and returns FTC_ETIMEDOUT / FTC_ECANCELED / FTC_EFABRIC
 * (FTC_ECUDA for a CUDA error, FTC_EINVAL for ncclInvalidArgument/Usage),
 * with ncclGetErrorString and ncclGetLastError in the message; the
 * communicator is then broken (coll.h). With boot->keep_on_failure = 1 the
 * NCCL communicator is left alive instead (its kernel may still spin on the
 * private stream) so that ftc_coll_nccl_shrink can rebuild from it; destroy
 * aborts it in any case.
 *
 * Limits: one rank per GPU (NCCL >= 2.5 refuses two ranks of one
 * communicator on the same device: "Duplicate GPU detected", returned here as
 * FTC_EINVAL). Thread-safety as coll.h: one thread at a time per
 * communicator, ftc_coll_abort from anywhere.
 */
#ifndef FTC_TRAINER_COLL_NCCL_H
#define FTC_TRAINER_COLL_NCCL_H

#include "trainer/coll.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_COLL_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct ftc_redis ftc_redis_t;

typedef struct ftc_coll_nccl_boot {
    uint32_t struct_size;
    uint32_t version;
    const char *dir;          /* shared directory carrying the id, or NULL */
    ftc_redis_t *redis;       /* or Redis (used only by the calling thread, only during
                                 the call); exactly one of dir / redis */
    const char *job;          /* job id for the Redis keys (required with redis) */
    uint64_t generation;      /* group incarnation: in every key and file name (I4) */
    int ttl_ms;               /* TTL of the Redis keys (default 600000) */
    const atomic_int *abort;  /* optional: when it becomes nonzero, create / rendezvous /
                                 shrink return FTC_ECANCELED promptly */
    int keep_on_failure;      /* 1: a failed collective leaves the NCCL communicator alive
                                 for ftc_coll_nccl_shrink (default 0: ncclCommAbort at once) */
    void *stream;             /* cudaStream_t whose work each call waits for (NULL: the
                                 legacy default stream) */
    const uint8_t *id;        /* optional: the unique id (FTC_COLL_NCCL_ID_BYTES) the group
                                 already agreed on through the caller's own rendezvous
                                 (rank 0 made it with ftc_coll_nccl_unique_id); create then
                                 skips its rendezvous and dir / redis are not used */
} ftc_coll_nccl_boot_t;

#define FTC_COLL_NCCL_BOOT_INIT                                                                   \
    {sizeof(ftc_coll_nccl_boot_t), 1, NULL, NULL, NULL, 0, 600000, NULL, 0, NULL, NULL}

/* A fresh NCCL unique id (ncclGetUniqueId: it also starts NCCL's bootstrap
 * listener in this process), for a group whose rank 0 is this process and
 * whose members get it by another channel (boot.id). FTC_EUNSUPPORTED in a
 * build without NCCL; NCCL's error otherwise. */
int ftc_coll_nccl_unique_id(uint8_t id[FTC_COLL_NCCL_ID_BYTES], ftc_err_t *err);

/* True when this build has the NCCL backend (FTC_WITH_NCCL). */
bool ftc_coll_nccl_built(void);

/* The id exchange, without NCCL: rank 0 publishes id (128 bytes, read), the
 * others receive it into id (written); then every rank waits until all
 * `size` ranks announced themselves. Polls every 5 ms until dl or *b->abort.
 * Returns 0; FTC_ETIMEDOUT naming the missing ranks and/or "the id from
 * rank 0"; FTC_ESTALE when a newer generation was already published;
 * FTC_EPROTO when the published size differs; FTC_ECANCELED;
 * FTC_EREDIS / FTC_EIO from the carrier; FTC_EINVAL for bad arguments.
 * Thread-safe for distinct b->redis connections. */
int ftc_coll_nccl_rendezvous(const ftc_coll_nccl_boot_t *b, int rank, int size,
                             uint8_t id[FTC_COLL_NCCL_ID_BYTES], ftc_deadline_t dl,
                             ftc_err_t *err);

/* Builds the NCCL communicator of `rank` among `size` on CUDA device
 * cuda_device: rank 0 calls ncclGetUniqueId, the rendezvous spreads it, then
 * ncclCommInitRankConfig (config.blocking = 0) is polled until ready, dl, or
 * *boot->abort (then ncclCommAbort). Every rank calls it with the same size,
 * generation and carrier. *out is NULL on failure. FTC_EUNSUPPORTED in a
 * build without NCCL; FTC_ECUDA when the device is absent or unusable;
 * FTC_EINVAL for two ranks on one GPU; the rendezvous' codes. */
int ftc_coll_nccl_create(int rank, int size, int cuda_device, const ftc_coll_nccl_boot_t *boot,
                         ftc_deadline_t dl, ftc_coll_t **out, ftc_err_t *err);

/* In-process recovery when ranks are only removed: a new communicator of the
 * ranks of c not in excluded[0..nexcluded) (renumbered in order), built by
 * ncclCommShrink (NCCL >= 2.27) with NCCL_SHRINK_ABORT when c is broken
 * (which terminates what is still running on it) and NCCL_SHRINK_DEFAULT
 * otherwise. Every surviving rank calls it with the same list. c stays
 * valid (broken or not) and must still be destroyed; the new communicator
 * inherits c's options. Fails with FTC_EUNSUPPORTED when NCCL has no shrink,
 * when c is not an NCCL communicator, or when c's NCCL communicator was
 * already aborted (a failure without keep_on_failure, or an abort);
 * FTC_EINVAL when this rank is excluded or the list is bad; FTC_ETIMEDOUT /
 * FTC_ECANCELED (dl, or c's boot.abort flag: c's own abort flag is sticky
 * and is what a detector sets to get a hung call back before shrinking) /
 * FTC_EFABRIC as the collectives. */
int ftc_coll_nccl_shrink(ftc_coll_t *c, const int *excluded, int nexcluded, ftc_deadline_t dl,
                         ftc_coll_t **out, ftc_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
