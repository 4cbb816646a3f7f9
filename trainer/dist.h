/*
 * dist.h — the process layout of a distributed training job and the building
 * of its communicators: world = DP x TP ranks, global rank -> (dp_rank,
 * tp_rank) with TP innermost (rank = dp_rank * tp + tp_rank, so the ranks of
 * one TP group are neighbours — on one node when tp divides the ranks per
 * node), one DP communicator per TP rank (the ranks with the same tp_rank,
 * ordered by dp_rank) and one TP communicator per DP rank.
 *
 * Joining: each rank opens one libfabric endpoint per communicator (provider
 * from FI_PROVIDER, else "tcp;ofi_rxm"), then the addresses are exchanged
 * either
 *   - through a shared directory (ftc_coll_exchange_dir in dir/dp-tT and
 *     dir/tp-dD; a fresh directory per job incarnation), what the
 *     `ftc train --nproc N` launcher uses, or
 *   - through a tiny TCP rendezvous (MASTER_ADDR:port, torchrun style): rank
 *     0 listens, every other rank connects (retrying until the deadline),
 *     sends its rank and address blob; once rank 0 has all `world` blobs it
 *     sends the whole table back to everyone and closes. Rank 0 reads all
 *     its connections at once (one poll loop), so one that says nothing (a
 *     port scanner, a half-dead rank) holds up no other; a connection that
 *     sends something else or closes is dropped with a warning naming its
 *     address and is no rank; a registered rank whose connection closes
 *     before the table goes out is forgotten (it may connect again); of two
 *     connections claiming one rank the one accepted later is kept. Every
 *     read, write, accept and connect has the deadline; a missing rank is
 *     FTC_ETIMEDOUT naming it. opts.abort, when set, aborts it
 *     (FTC_ECANCELED) within ~100 ms (`ftc run --in-process`: the
 *     supervisor's SIGUSR1).
 *
 * Collectives (--coll, ftc_dist_coll_resolve): "cpu" builds both groups over
 * libfabric (above); "nccl" builds them as NCCL communicators
 * (trainer/coll_nccl.h) on CUDA device LOCAL_RANK % devices, without
 * fabric endpoints: NCCL's unique id goes through the same shared directory
 * (dir/dp-tT, dir/tp-dD: files nccl.1.id and nccl.1.rank<r>, generation 1,
 * a fresh directory per job incarnation as for the addresses), or through
 * the TCP rendezvous (each group's rank 0 puts a fresh id in its blob, the
 * members take it from there: ftc_coll_nccl_unique_id, boot.id), under the
 * same deadline and opts.abort (FTC_ECANCELED, as for the fabric path); a
 * failure, the deadline or the abort aborts the communicator
 * (ncclCommAbort inside ftc_coll_nccl_create). "auto" is NCCL when the
 * kernels backend is CUDA (a device per local rank, the backend not cpu)
 * and the build has NCCL, else cpu. Whatever the collectives, a rank whose
 * kernels backend is not cpu is bound to CUDA device LOCAL_RANK % devices
 * (when there is one), so the ranks of a node spread over its GPUs.
 *
 * Thread-safety: a ftc_dist_t is used by one thread. No global state.
 */
#ifndef FTC_TRAINER_DIST_H
#define FTC_TRAINER_DIST_H

#include "core/clock.h"
#include "core/err.h"
#include "trainer/coll.h"

typedef struct ftc_dist_layout {
    int world, dp, tp;
    int rank, dp_rank, tp_rank;
} ftc_dist_layout_t;

/* Fills l from (world, tp, rank). FTC_EINVAL when tp does not divide world
 * or rank is outside 0..world-1. */
int ftc_dist_layout(int world, int tp, int rank, ftc_dist_layout_t *l, ftc_err_t *err);

typedef struct ftc_dist_opts {
    int world, tp, rank;
    const char *provider;  /* NULL: FI_PROVIDER, else "tcp;ofi_rxm" */
    const char *dir;       /* address exchange directory, or NULL for TCP */
    const char *host;      /* TCP rendezvous: rank 0's address (MASTER_ADDR) */
    int port;              /* and port */
    int timeout_ms;        /* the deadline of the exchange (default 60000 when 0) */
    const atomic_int *abort; /* TCP rendezvous and the NCCL creates: non-zero aborts them
                                (FTC_ECANCELED), e.g. from a signal handler; NULL: none */
    int coll;              /* FTC_DIST_COLL_CPU (0) or FTC_DIST_COLL_NCCL (resolved) */
    int cuda_device;       /* the NCCL communicators' device (ftc_dist_coll_resolve) */
} ftc_dist_opts_t;

/* The collective backends of --coll. */
enum { FTC_DIST_COLL_CPU = 0, FTC_DIST_COLL_NCCL = 1, FTC_DIST_COLL_AUTO = 2 };

/* "cpu", "nccl", "auto" -> FTC_DIST_COLL_*; -1 for anything else. */
int ftc_dist_coll_parse(const char *s);

/* Resolves want (FTC_DIST_COLL_*) for rank local_rank of local_world on
 * this node whose kernels backend is named backend ("auto", "cpu", "cuda",
 * ... as kernels.h). *kind gets FTC_DIST_COLL_CPU or _NCCL and, for NCCL,
 * *device the CUDA device this process is then bound to
 * (ftc_kernels_cuda_use_device: call this before the trainer is created).
 * auto takes NCCL only when it can work: the build has NCCL, the backend is
 * not cpu, and there are at least local_world devices (one GPU per local
 * rank); otherwise cpu. why gets one line for the log ("nccl (auto: CUDA
 * device 0 of 8 for local rank 0, NCCL built)", "cpu-fabric (auto: no CUDA
 * device (...))"). Errors for nccl, at once and saying what to do:
 * FTC_EUNSUPPORTED (a build without NCCL, no usable CUDA device), FTC_EINVAL
 * (a cpu backend, fewer devices than local ranks, an unknown want). */
int ftc_dist_coll_resolve(int want, const char *backend, int local_rank, int local_world,
                          int *kind, int *device, char *why, size_t whylen, ftc_err_t *err);

typedef struct ftc_dist {
    ftc_dist_layout_t l;
    ftc_coll_t *dp; /* NULL when dp == 1 */
    ftc_coll_t *tp; /* NULL when tp == 1 */
} ftc_dist_t;

/* Opens the endpoints, exchanges the addresses and builds the groups. */
int ftc_dist_join(const ftc_dist_opts_t *o, ftc_dist_t **out, ftc_err_t *err);
void ftc_dist_destroy(ftc_dist_t *d); /* NULL is a no-op */

/* The TCP rendezvous alone: every rank's blob (<= 1024 bytes) to every rank;
 * table holds world x 1024 bytes, lens world entries. */
#define FTC_DIST_BLOB_MAX 1024
int ftc_dist_rendezvous_tcp(const char *host, int port, int rank, int world, const void *blob,
                            size_t len, uint8_t *table, size_t *lens, ftc_deadline_t dl,
                            ftc_err_t *err);

#endif
