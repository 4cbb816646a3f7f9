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
 *     sends its hello (below) with its address blob; once rank 0 has all
 *     `world` blobs it sends the whole table back to everyone and closes.
 *     The hello is versioned ("FTC2") and carries the rank, the world size,
 *     the job id and the generation; rank 0 refuses one of another job or
 *     world size (FTC_ECONFIG), of another generation (FTC_ESTALE) or with a
 *     rank outside 1..world-1 (FTC_ECONFIG): it answers with the code and a
 *     message naming both values, which the refused rank returns at once,
 *     warns naming the connection's address, and closes it; a refused
 *     connection takes no rank's place. Rank 0 sends the table to all
 *     ranks at once (non-blocking, one poll loop), so a rank that does not
 *     read it holds up no other; it is named at the deadline. Rank 0 reads all
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
    const char *job;       /* TCP rendezvous: the job id every rank shares (FTC_JOB_ID, else
                              TORCHELASTIC_RUN_ID; NULL: ""), <= FTC_DIST_JOB_MAX bytes */
    uint64_t generation;   /* TCP rendezvous: the incarnation every rank shares
                              (FTC_GENERATION) */
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

#define FTC_DIST_BLOB_MAX 1024 /* bytes of one rank's blob in the TCP rendezvous */
#define FTC_DIST_JOB_MAX 128   /* bytes of a job id in the TCP rendezvous */

/* The TCP rendezvous alone (the protocol above): who this rank is and which
 * job and generation it belongs to. Initialise with FTC_DIST_RDZV_OPTS_INIT. */
typedef struct ftc_dist_rdzv_opts {
    size_t size;             /* sizeof(ftc_dist_rdzv_opts_t); another size is FTC_EINVAL */
    const char *host;        /* rank 0's address (MASTER_ADDR) */
    int port;                /* and port, 1..65535 */
    int rank, world;         /* this rank, of world */
    const char *job;         /* the job id every rank must share (NULL: ""); printable
                                ASCII, <= FTC_DIST_JOB_MAX bytes */
    uint64_t generation;     /* the incarnation every rank must share */
    const atomic_int *abort; /* non-zero aborts (FTC_ECANCELED) within ~100 ms; NULL: none */
} ftc_dist_rdzv_opts_t;

#define FTC_DIST_RDZV_OPTS_INIT {sizeof(ftc_dist_rdzv_opts_t), NULL, 0, 0, 1, NULL, 0, NULL}

/* Every rank's blob (1..FTC_DIST_BLOB_MAX bytes) to every rank: table holds
 * world x FTC_DIST_BLOB_MAX bytes, lens world entries. 0, or FTC_EINVAL (bad
 * options), FTC_ETIMEDOUT (a rank missing at dl, named), FTC_ECANCELED,
 * FTC_ECONFIG / FTC_ESTALE (rank 0 refused this rank: another job, world
 * size or generation; the message names both values), FTC_EPROTO, FTC_EIO.
 * Thread-safe for distinct arguments; blocks until done, dl or the abort. */
int ftc_dist_rendezvous_tcp(const ftc_dist_rdzv_opts_t *o, const void *blob, size_t len,
                            uint8_t *table, size_t *lens, ftc_deadline_t dl, ftc_err_t *err);

/* ---- internal: the hello, for the tests and tests/fuzz/fuzz_rdzv ----------
 * Little-endian: "FTC2", rank u32, world u32, generation u64, job length
 * u16, blob length u16 (the 24-byte header), then the job id and the blob. */
#define FTC__DIST_HELLO_HDR 24
#define FTC__DIST_HELLO_MAX (FTC__DIST_HELLO_HDR + FTC_DIST_JOB_MAX + FTC_DIST_BLOB_MAX)

typedef struct ftc__dist_hello {
    uint32_t rank, world;
    uint64_t generation;
    char job[FTC_DIST_JOB_MAX + 1]; /* NUL-terminated */
    const uint8_t *blob;            /* parse: points into the parsed bytes */
    size_t bloblen;
    size_t size; /* parse: the bytes of the whole hello */
} ftc__dist_hello_t;

/* Encodes h into out (cap bytes); returns its size, or 0 when h does not fit
 * the format (a job id over FTC_DIST_JOB_MAX, a blob of 0 or over
 * FTC_DIST_BLOB_MAX bytes) or out is too small. */
size_t ftc__dist_hello_encode(const ftc__dist_hello_t *h, uint8_t *out, size_t cap);

/* Parses the first n bytes a connection sent: 1 when they hold a whole
 * hello (h filled, h->size bytes of it; bytes after it are not looked at),
 * 0 when they are a good beginning of one (h untouched), FTC_EPROTO when
 * they cannot begin a hello (why says what is wrong). */
int ftc__dist_hello_parse(const uint8_t *b, size_t n, ftc__dist_hello_t *h, char *why,
                          size_t cap);

/* Rank 0's verdict on a parsed hello: 0, or FTC_ECONFIG (another job, world
 * size, a rank outside 1..world-1) / FTC_ESTALE (another generation) with
 * why naming both values. */
int ftc__dist_hello_check(const ftc__dist_hello_t *h, const char *job, uint64_t generation,
                          int world, char *why, size_t cap);

#endif
