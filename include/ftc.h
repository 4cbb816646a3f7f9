/*
 * ftc.h — the public API of ftc, the fault-tolerant checkpoint library.
 *
 * This is the one header a trainer includes. It compiles as C99 and as C++,
 * and includes no CUDA, NCCL, libfabric or hiredis header.
 *
 * In order of use:
 *   - errors: every function returns 0 on success or a negative FTC_E*
 *     code; ftc_strerror() / ftc_errname() turn a code into text, and a
 *     context keeps a sentence about its last error (ftc_last_error);
 *   - dtypes of tensors;
 *   - the checkpoint context: ftc_create (job and rank from FTC_* variables,
 *     as `ftc run` / `ftc agent` set them, or from options), ftc_register each
 *     tensor once, then every step ftc_checkpoint (returns once the snapshot
 *     has started) and ftc_wait_snapshot before the tensors are written
 *     again; at start, ftc_restore fills the tensors from the newest
 *     committed version.
 *
 *     ftc_ctx_t *ctx;
 *     if (ftc_create(NULL, &ctx)) ...                     // FTC_* environment
 *     ftc_register(ctx, "wte", FTC_DTYPE_F32, 2, (int64_t[]){V, C}, wte, FTC_HOST);
 *     int64_t step;
 *     if (ftc_restore(ctx, &step, &cursor, &n) == 0) start = step + 1;
 *     for (step = start; ...; step++) {
 *         forward_backward();
 *         ftc_wait_snapshot(ctx);                         // before the optimizer writes
 *         optimizer_step();
 *         ftc_checkpoint(ctx, step, &cursor, sizeof cursor);
 *     }
 *     ftc_destroy(ctx);
 */
#ifndef FTC_H
#define FTC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_VERSION_MAJOR 0
#define FTC_VERSION_MINOR 1
#define FTC_VERSION_PATCH 0

/* ---- errors ---------------------------------------------------------------
 * One table yields the codes, their names and their messages. Codes are
 * negative so that functions returning a count can share the convention. */
#define FTC_ERRNO_MAP(X)                                                                           \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ECORRUPT, -4, "data is corrupt")                                                             \
    X(ETRUNC, -5, "data is truncated")                                                             \
    X(ENOENT, -6, "not found")                                                                     \
    X(EEXIST, -7, "already exists")                                                                \
    X(ETIMEDOUT, -8, "deadline passed")                                                            \
    X(EAGAIN, -9, "try again")                                                                     \
    X(EINPROGRESS, -10, "operation in progress")                                                   \
    X(ECANCELED, -11, "operation aborted")                                                         \
    X(ESTALE, -12, "stale generation")                                                             \
    X(EVERSION, -13, "unsupported format version")                                                 \
    X(ENOSPC, -14, "no space left")                                                                \
    X(EAUTH, -15, "authentication failed")                                                         \
    X(EPROTO, -16, "protocol error")                                                               \
    X(EUNSUPPORTED, -17, "not supported")                                                          \
    X(ECONFIG, -18, "bad configuration")                                                           \
    X(EREDIS, -19, "redis error")                                                                  \
    X(EFABRIC, -20, "fabric error")                                                                \
    X(ECUDA, -21, "CUDA error")                                                                    \
    X(ERANGE, -22, "value out of range")

typedef enum ftc_errno {
    FTC_OK = 0,
#define FTC__ERR_ENUM(name, code, msg) FTC_##name = (code),
    FTC_ERRNO_MAP(FTC__ERR_ENUM)
#undef FTC__ERR_ENUM
} ftc_errno_t;

/* "data is corrupt" for FTC_ECORRUPT; "unknown error" for a code not in the
 * table. Returns a static string; thread-safe. */
const char *ftc_strerror(int err);
/* "FTC_ECORRUPT" for FTC_ECORRUPT, "FTC_OK" for 0; static; thread-safe. */
const char *ftc_errname(int err);

/* ---- dtypes ---------------------------------------------------------------
 * The element types a tensor may have. Values are part of the shard format
 * (docs/shard-format.md): never renumber. */
#define FTC_DTYPE_MAP(X)                                                                           \
    X(F32, 1, 4, "fp32", "F32")                                                                    \
    X(BF16, 2, 2, "bf16", "BF16")                                                                  \
    X(F16, 3, 2, "fp16", "F16")                                                                    \
    X(I8, 4, 1, "int8", "I8")                                                                      \
    X(U8, 5, 1, "uint8", "U8")                                                                     \
    X(I32, 6, 4, "int32", "I32")                                                                   \
    X(I64, 7, 8, "int64", "I64")

typedef enum ftc_dtype {
    FTC_DTYPE_INVALID = 0,
#define FTC__DT_ENUM(name, code, size, str, st) FTC_DTYPE_##name = (code),
    FTC_DTYPE_MAP(FTC__DT_ENUM)
#undef FTC__DT_ENUM
} ftc_dtype_t;

/* Size of one element in bytes; 0 for an unknown dtype. Thread-safe. */
size_t ftc_dtype_size(int dtype);
/* "fp32", "bf16", ...; NULL for an unknown dtype. Thread-safe. */
const char *ftc_dtype_name(int dtype);
/* Parses "fp32"/"float32"/"F32"... into a dtype; FTC_DTYPE_INVALID if unknown. */
ftc_dtype_t ftc_dtype_parse(const char *s);

/* ---- the checkpoint context ----------------------------------------------------
 * A rank's handle on its node's agent: the agent owns the shared-memory slots
 * (so they survive this process), replicates them to peers, commits and
 * persists them. One context per rank process. A context is used by one
 * thread at a time (the trainer's); it runs one helper thread of its own.
 * A call that finds its agent gone (the agent exited or was killed: the
 * connection broke) returns FTC_EIO, its message naming the agent's socket:
 * the context is then only fit for ftc_destroy (a restarted agent is a new
 * connection: ftc_create another). */

#define FTC_HOST (-1) /* device of a host tensor; CUDA device ids are >= 0 */

typedef struct ftc_options {
    uint32_t struct_size; /* sizeof(ftc_options_t), set by FTC_OPTIONS_INIT */
    uint32_t version;     /* 1 */
    const char *job;      /* job id; NULL: FTC_JOB_ID, else "ftc" */
    const char *agent;    /* agent socket path; NULL: FTC_AGENT_SOCKET */
    int rank;             /* -1: FTC_RANK, else RANK (torchrun), else 0 */
    int world;            /* -1: FTC_WORLD_SIZE, else WORLD_SIZE, else 1 */
    int dp, tp, pp;       /* 0: tp = pp = 1, dp = world / (tp x pp) (FTC_DP/FTC_TP/FTC_PP
                             override); a dp given must be world / (tp x pp) */
    int threads;          /* snapshot copy threads; 0 = one per online core but one
                             (left to the trainer), at least 1; a restore then
                             copies with every online core */
    uint32_t meta_capacity; /* bytes of user metadata per checkpoint (default 64 KiB) */
    int timeout_ms;       /* deadline of each call that talks to the agent (default 60000),
                             of each device sync of a snapshot or restore, and of
                             all ftc_destroy's waits together */
} ftc_options_t;

#define FTC_OPTIONS_INIT {sizeof(ftc_options_t), 1, NULL, NULL, -1, -1, 0, 0, 0, 0, 65536, 60000}

typedef struct ftc_ctx ftc_ctx_t;

/* Connects to the node's agent. opts may be NULL (everything from FTC_*).
 * FTC_ENOENT when no socket is given (the message names FTC_AGENT_SOCKET)
 * or no agent answers at it (the message names the socket); FTC_ETIMEDOUT
 * when the agent neither accepts the connection nor answers the HELLO within
 * timeout_ms (a stopped agent: never a wait without end); FTC_ECONFIG when
 * rank/world/tp/pp do not fit, when a dp given (the option, else FTC_DP) is
 * not world / (tp x pp) (the message names the values), or when a variable read for an option left
 * at its default (FTC_RANK, else RANK: 0..2^24-1; FTC_WORLD_SIZE, else
 * WORLD_SIZE, FTC_TP, FTC_PP: 1..2^24; FTC_DP: 0..2^24, 0 derived) is set
 * but is no whole decimal number in its range (" 2", "1x", "-1"): the
 * message names the variable, its value and the range, and no agent is
 * asked (unset or empty: the default); FTC_ENOMEM; an agent that refuses
 * the HELLO: its code (FTC_EEXIST: another context of this rank is connected,
 * the message naming its pid; FTC_EAGAIN: the agent holds as many
 * connections that said no HELLO as it keeps, retry once they close).
 * *ctx is set even on failure (for ftc_last_error) and must be
 * freed with ftc_destroy; every other call on it returns FTC_EINVAL ("not
 * connected"). Thread-safe (each call makes its own context). */
int ftc_create(const ftc_options_t *opts, ftc_ctx_t **ctx);
/* Waits for a snapshot in flight (its seal and hand-off to the agent, within
 * what is left of that checkpoint's timeout_ms), says goodbye to the agent
 * (at most 1 s), waits for a copy still in flight, frees. These waits share
 * one deadline, timeout_ms from the call: ftc_destroy returns within
 * timeout_ms (plus the CPU time of its steps), not one wait's worth each; a
 * goodbye with no time left is one try without waiting. The agent keeps
 * the slots. A copy still running at the deadline (a device that does not
 * finish) is left behind with a warning: it is never sealed (that step does
 * not commit), and what it may still touch is not freed (the slot mappings;
 * the copy engine frees itself when the copy ends), but it may still read
 * the registered tensors: keep them allocated, or end the process. NULL is
 * a no-op. Not concurrently with any other call on ctx. */
void ftc_destroy(ftc_ctx_t *ctx);
/* The last error's sentence (never NULL). The context's thread only. */
const char *ftc_last_error(const ftc_ctx_t *ctx);

/* Registers a tensor before the first checkpoint or restore. shape has ndim
 * entries (ndim 0: a scalar). data stays owned by the caller and must stay
 * valid until ftc_destroy. device: FTC_HOST or a CUDA device id.
 * Errors: FTC_EEXIST a name registered twice; FTC_EINVAL a NULL or
 * unconnected context, a NULL name or one of 0 or more than 1024 bytes, a
 * NULL shape for ndim > 0,
 * an unknown dtype, ndim outside 0..8, a negative dimension, NULL data for a
 * non-empty tensor, or a call after the first ftc_checkpoint / ftc_restore
 * (the set of tensors is then fixed); FTC_ERANGE too many tensors or a size
 * that overflows; FTC_EUNSUPPORTED a CUDA device in a build without CUDA;
 * FTC_ENOMEM. A refused registration registers nothing (the name stays
 * free). The context's thread only. */
int ftc_register(ftc_ctx_t *ctx, const char *name, int dtype, int ndim, const int64_t *shape,
                 void *data, int device);

/* Starts a checkpoint of every registered tensor as step and returns once
 * the copy has started (it runs on other threads). meta (up to
 * meta_capacity bytes: data cursor, RNG state) is stored with it. Returns
 * FTC_EAGAIN when the agent's policy skipped this step (no free slot: the
 * two previous versions are still replicating or waiting for their commit,
 * and policy is "skip"; or step is not after the job's committed step, or
 * was checkpointed already: such a version could never be committed, since
 * the commit record never goes backwards, and ftc_wait_committed of it
 * returns 0 as the committed step is later); the step is then not
 * checkpointed and training may go on. FTC_ERANGE when meta_len exceeds
 * meta_capacity (nothing is asked of the agent); FTC_EINVAL on a NULL or
 * unconnected context, a negative step, or NULL meta with a nonzero
 * meta_len. A snapshot that failed (its copy: a device copy error, ...) is
 * reported once, by the first of ftc_wait_snapshot, the next ftc_checkpoint
 * and ftc_wait_committed: when ftc_wait_snapshot did not report the
 * previous one's failure, this call returns it (the message names its step)
 * and checkpoints nothing; the call after it starts a snapshot as usual. A
 * copy that cannot even start is this call's own error (FTC_EIO,
 * FTC_ECUDA, ...), reported here only. Either way the failed step never
 * commits (the previous committed version stays) and its
 * ftc_wait_committed is FTC_EIO. FTC_ETIMEDOUT when the previous snapshot is
 * still copying, or not yet sealed and handed to the agent, after
 * timeout_ms (its seal and that hand-off share timeout_ms from its
 * ftc_checkpoint; one that outlasts it is that snapshot's failure, reported
 * once as above, and while its seal still runs this call returns
 * FTC_ETIMEDOUT naming it and asks the agent for nothing: never FTC_EAGAIN,
 * which is the agent's policy's alone); FTC_ECANCELED after ftc_interrupt. It waits only while the
 * previous snapshot is not sealed yet,
 * or, with policy "wait", while the agent has no free slot. CUDA tensors are
 * copied on ftc's own non-blocking stream, which does not wait for the
 * caller's streams: finish the writes to them first (cudaStreamSynchronize
 * of the streams that wrote them, or cudaDeviceSynchronize). */
int ftc_checkpoint(ftc_ctx_t *ctx, int64_t step, const void *meta, size_t meta_len);
/* Waits until the snapshot's copy is done (the tensors may be written
 * again). Returns 0 at once when none is in flight. FTC_ETIMEDOUT when the
 * copy is still running after the context's timeout_ms; the copy's own
 * error (FTC_EIO, FTC_ECUDA, ...) when it failed, once: the copy is over
 * (the tensors may be written), a second call returns 0, the failure is
 * not reported again by ftc_checkpoint, whose next call starts a snapshot
 * as usual, and the step will not commit (ftc_wait_committed of it:
 * FTC_EIO). FTC_EINVAL on a NULL or unconnected context. The context's
 * thread only. */
int ftc_wait_snapshot(ftc_ctx_t *ctx);
/* Waits until step is committed (every rank's shard replicated and
 * recorded); for tests and for trainers that want it. Returns 0 once the
 * agent said step (or a later one) committed; FTC_EIO when the agent said
 * step will not commit (the message says why: a replication that failed,
 * a corrupt slot), and at once when step's own snapshot failed here (its
 * copy, its seal, or telling the agent of it: it never reaches the agent),
 * whether an earlier call reported that failure or this one does;
 * FTC_ETIMEDOUT after the context's timeout_ms (no rank checkpointed it, or
 * its replication is still going); FTC_ECANCELED after ftc_interrupt; a
 * socket error (FTC_EIO, its message naming the agent's socket: see above;
 * FTC_EPROTO) when the agent is gone; the error of a
 * failed snapshot of an earlier step that no call reported yet (reported
 * here, once); FTC_EINVAL on a NULL or unconnected context. The context's
 * thread only. */
int ftc_wait_committed(ftc_ctx_t *ctx, int64_t step);
/* Makes every wait of ctx for its agent (ftc_checkpoint waiting for a free
 * slot, ftc_restore, ftc_fetch, ftc_wait_committed, a request waiting for
 * room on the agent's socket) end within ~50 ms with
 * FTC_ECANCELED, now and from then on: the context is then only fit for
 * ftc_destroy (a call after it, ftc_report included, returns FTC_ECANCELED
 * without sending the agent anything). Async-signal-safe (an atomic store) and callable from any
 * thread: for a trainer told to leave its generation (`ftc run --in-process`,
 * docs/recovery.md) while blocked on the agent. */
void ftc_interrupt(ftc_ctx_t *ctx);
/* Fills the registered tensors from the newest committed version (from this
 * node's memory, else a peer's, else the persist tier; every shard checksum-
 * verified first) and returns its step and metadata (meta_len: capacity in,
 * bytes out). A snapshot still in flight (ftc_checkpoint without
 * ftc_wait_snapshot) is finished and handed to the agent first: the restore
 * writes the tensors it copies. FTC_ENOENT when nothing committed exists (a
 * fresh start); the message names where it looked. When this rank's shard
 * of the newest committed version survives only in the persist tier, which
 * lags the commits, *step is an older committed step than the other ranks
 * may get:
 * ranks that must agree compare their steps and, if they differ, take the
 * oldest with ftc_fetch (as the reference trainer does). FTC_ERANGE when
 * the stored metadata exceeds *meta_len (the tensors are left untouched);
 * FTC_EINVAL on a NULL or unconnected context, a NULL step, or NULL meta
 * with a nonzero *meta_len; FTC_ECONFIG, before the agent is asked, when
 * FTC_RESTORE_RANK (below) is set but is no whole decimal number in
 * 0..2^24-1 (the message names it, its value and the range). */
int ftc_restore(ftc_ctx_t *ctx, int64_t *step, void *meta, size_t *meta_len);

/* What the context knows, without waiting: for logs, progress lines and
 * health checks. Reads the agent's notices already queued on the socket
 * (commits, failed versions) first, never blocks. */
typedef struct ftc_ckpt_status {
    uint32_t struct_size;  /* set by the caller: sizeof(ftc_ckpt_status_t) */
    int rank, world;       /* this rank of the world (FTC_RANK / RANK, ...) */
    int dp_rank, tp_rank, pp_rank;
    uint64_t generation;   /* the job generation the agent serves (0 before any) */
    int64_t committed;     /* newest step this rank saw committed; -1: none yet */
    int64_t in_flight;     /* step whose snapshot was started and not yet handed to the
                              agent sealed; -1: none */
    int64_t failed;        /* newest step known not to commit: the agent reported it, or
                              its snapshot failed here; -1: none */
    int64_t checkpoints;   /* ftc_checkpoint calls that started a snapshot */
    int64_t skipped;       /* ftc_checkpoint calls the agent's "skip" policy refused */
    int last_error;        /* FTC_E* of the last failed call, 0 if none (ftc_last_error) */
} ftc_ckpt_status_t;

/* Fills *st. 0; FTC_EINVAL for a NULL argument or a struct_size smaller than
 * the first version's; FTC_EPROTO / FTC_EIO when the agent connection is
 * broken (st is filled anyway). Same thread as the other calls. */
int ftc_ckpt_status(ftc_ctx_t *ctx, ftc_ckpt_status_t *st);

/* ---- events ------------------------------------------------------------------
 * A rank reports what it detected and did about it; the agent records it in
 * the job's event stream (Redis, docs/redis-keys.md), once per (kind, rank,
 * step), with this context's rank. The reference trainer's numerical guard
 * reports kind "nan" (a non-finite loss or gradient) and "loss_spike", value
 * the loss, and a detail that names the action ("rollback to step 40, batch
 * 42 skipped"). kind: 1..23 characters of [a-z0-9_]; detail: the event's
 * detail is "loss VALUE; " then detail, 255 bytes in all (about 240 of
 * detail; longer is cut). Returns once the agent has queued the event (it reaches
 * Redis shortly after, or when Redis is back). FTC_EINVAL on a bad kind;
 * FTC_ECANCELED after ftc_interrupt (nothing recorded). */
int ftc_report(ftc_ctx_t *ctx, const char *kind, int64_t step, double value, const char *detail);

/* ---- after a layout change (elastic shrink or grow) ----------------------------
 * `ftc run` sets FTC_RESTORE_RANK when the world changed: the rank of the
 * previous generation whose state this rank continues (a node that survived
 * keeps its own; a newcomer takes a lost node's). ftc_restore honours it: it
 * restores that rank's shard (tensors matched by name, dtype and shape) from
 * this node's memory, a peer's replica, parity or the persist tier. A
 * trainer whose state is sharded by the world size (ZeRO-1) reads the pieces
 * it needs with ftc_fetch instead. */

/* ftc_restore from rank src_rank's shard of the newest committed version. */
int ftc_restore_from(ftc_ctx_t *ctx, int src_rank, int64_t *step, void *meta,
                     size_t *meta_len);

/* A read-only, verified copy of one rank's shard of a committed version. */
typedef struct ftc_shard_ref ftc_shard_ref_t;

/* Fetches rank src_rank's shard of committed step `step` (-1: the newest
 * committed) wherever it is (this node, a peer, the persist tier), every
 * byte checksum-verified (I1). Under parity redundancy a lost node's shard
 * is not rebuilt for a fetch (ftc_restore_from rebuilds it). FTC_ENOENT when no copy exists (the message
 * names where the agent looked) or when the step was never committed
 * (skipped or abandoned: the message names the newest committed step before
 * it), FTC_EREDIS when whether an older step was committed cannot be read
 * (Redis away; retry); FTC_EINVAL on a NULL or unconnected context
 * or a NULL out (*out is NULL on every failure). Release with
 * ftc_shard_release. */
int ftc_fetch(ftc_ctx_t *ctx, int src_rank, int64_t step, ftc_shard_ref_t **out);
/* Fetches rank src_rank's shard of the newest committed step at or before
 * max_step (-1: the newest committed) that has a verified copy anywhere, in
 * one request to the agent: for ranks walking back past steps that were
 * never checkpointed (the agent's checkpoint.busy=skip policy, another
 * interval) or whose copies are lost. The agent tries the committed steps
 * it knows (the job's commit records in Redis, the versions of the persist
 * tiers) newest first, each from the same sources and with the same checks
 * as ftc_fetch (I1: only committed versions, every byte checksum-verified);
 * a step that was never committed is never tried, nor returned. The step
 * found is ftc_shard_step(*out), never above max_step. Returns 0; FTC_ENOENT
 * when no committed step at or before max_step has a copy, the message
 * naming the oldest committed step known when max_step is below it, else the
 * steps tried and where the agent looked; FTC_EINVAL on a NULL or
 * unconnected context, a negative src_rank or a NULL out; FTC_EPROTO from an
 * agent of an older build (it does not know the request) or one that
 * answered a later step; FTC_ETIMEDOUT after the context's timeout_ms;
 * FTC_ECANCELED after ftc_interrupt. *out is NULL on every failure; on
 * success it is the caller's, released with ftc_shard_release. Not
 * thread-safe: the context's thread only, like ftc_fetch. */
int ftc_fetch_at_most(ftc_ctx_t *ctx, int src_rank, int64_t max_step, ftc_shard_ref_t **out);
/* The step of a fetched shard and its metadata (as given to ftc_checkpoint). */
int64_t ftc_shard_step(const ftc_shard_ref_t *s);
const void *ftc_shard_meta(const ftc_shard_ref_t *s, size_t *len);
/* Tensor `name` of a fetched shard: its bytes (valid until release), dtype
 * and element count. FTC_ENOENT when the shard has no such tensor. */
int ftc_shard_tensor(const ftc_shard_ref_t *s, const char *name, const void **data, int *dtype,
                     uint64_t *numel);
void ftc_shard_release(ftc_shard_ref_t *s); /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif /* FTC_H */
