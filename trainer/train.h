/*
 * train.h — one training process of the reference trainer: the model, the
 * data, the optimizer, the global batch, the deterministic gradient
 * reduction and the checkpoints, behind one handle that `ftc train`, the
 * tests and the benchmark drive step by step.
 *
 * A step consumes one GLOBAL batch: micro_steps micro-batches of
 * micro_batch sequences, global sample indices step*G .. step*G+G-1 (G =
 * micro_steps * micro_batch), whatever the data-parallel degree. In
 * deterministic mode the micro-batches are split over `dp` virtual ranks (in
 * this process; the real collectives come later and sum the same integers):
 * each rank sums its micro-batches' gradients exactly (gradsum.h), the rank
 * sums are reduced in a ring-like order that changes every step, and the
 * result is converted back once — the weights do not depend on dp.
 *
 * Real data parallelism (dp_coll set): this process is ONE rank of a DP
 * group of ftc_coll_size(dp_coll) processes, each with a full model replica.
 * Rank r runs the micro-batches ftc_coll_chunk(M, dp, r) of the step (the
 * first M mod dp ranks take one more; virtual ranks split [r*M/dp,
 * (r+1)*M/dp) instead: the exact sums make the bits equal, but
 * inject_rank R's micro-batch may differ), sums their gradients exactly,
 * and then, as ZeRO-1: reduce-scatter of the 128-bit sums (FTC_COLL_I128,
 * exact), its own chunk (ftc_coll_chunk over the parameter count) converted
 * to fp32 once, an all-gather of the fp32 gradient so that the clipping
 * norm is the same in-order double sum as in one process (bit-identical for
 * every dp), AdamW on its own chunk of the fp32 master weights with its own
 * chunk of m and v, and an all-gather of the updated parameters. The final weights equal the
 * single-process (virtual) run bit for bit, for any dp (I5). Collective
 * failures (a dead peer: FTC_ETIMEDOUT / FTC_EFABRIC at coll_timeout_ms)
 * are returned by ftc_trainer_step with the communicator's message.
 *
 * Checkpoints: the parameters, both AdamW moments (named tensors
 * "param/wte", "adamw.m/wte", ...) and a metadata record (step, data cursor,
 * RNG state, seed, configuration hash) are snapshotted into a shard region
 * (ckpt/snapshot.h) and written through the persist tier (ckpt/persist.h)
 * every ckpt_every steps. At creation the newest committed version in
 * ckpt_dir is restored, if there is one; a checkpoint of a different
 * configuration is refused (FTC_ECONFIG) rather than silently mixed.
 *
 * With real DP each rank checkpoints only its own ZeRO-1 chunk: tensors
 * "param.shard", "adamw.m.shard", "adamw.v.shard" (1-D, the chunk) plus the
 * metadata record (which also holds dp, the chunk offset and length). Without
 * an agent it is persisted in ckpt_dir/rank-dD (one persist series per DP
 * rank, file shard-dD-t0-p0.ftcz); at start the ranks agree on the newest
 * step every rank has committed (none, when the only versions are a first
 * checkpoint some ranks did not commit: those are dropped, a fresh start).
 * With `agent` set (a socket path) the state
 * goes through include/ftc.h instead: registered once, ftc_checkpoint every
 * ckpt_every steps, ftc_wait_snapshot before the optimizer writes the
 * registered chunk, ftc_restore at start. A snapshot that failed (its copy:
 * a device copy error), reported by ftc_wait_snapshot or ftc_checkpoint, is
 * a warning: that step is not checkpointed, the previous committed version
 * stays and training goes on; FTC_ETIMEDOUT, FTC_ECANCELED, FTC_EINVAL and
 * a broken agent connection end the step. From the persist tier a run may
 * resume at another dp: the saved chunks are gathered and re-split (every
 * rank reads the saved chunks its own overlaps); through the agent a
 * different dp is refused (FTC_ECONFIG).
 *
 * Tensor parallelism (tp_coll set, ftc_coll_size(tp_coll) = tp > 1): this
 * process is also rank ftc_coll_rank(tp_coll) of a TP group; the model is
 * built with ftc_model_create_tp over it (model.h: Megatron splits, the
 * replicated tensors identical on every TP rank), so the parameter buffer
 * is this rank's slice (P_local floats). Everything above then applies to
 * the slice: the DP group (dp_coll, one per TP rank: the ranks of the same
 * tp_rank) reduce-scatters and all-gathers P_local, ZeRO-1 chunks are
 * ftc_coll_chunk(P_local, dp, dp_rank). The clipping norm is
 * ftc_model_grad_norm (the split tensors' shares exchanged exactly over the
 * TP group and added in rank order, the replicated tensors counted once):
 * identical on every rank, for every DP degree at a fixed TP. TP needs
 * deterministic mode (the sharded path is used even with one DP rank).
 * Checkpoints: each (dp_rank, tp_rank) rank saves its ZeRO-1 chunk of its
 * slice, shard coordinates (dp_rank, tp_rank) of (dp, tp); the persist tier
 * in ckpt_dir/rank-dD-tT (rank-dD without TP, as before); re-partitioning
 * at another DP reads the chunks of the same tp_rank only. The TP degree is
 * fixed for a checkpoint (ARCHITECTURE.md, Determinism): another one is
 * refused (FTC_ECONFIG). A TP all-reduce failure is returned by
 * ftc_trainer_step like a DP one.
 *
 * Device memory: the parameters, gradients and moments live in the kernels
 * backend's memory (device memory on CUDA). Every collective and host-side
 * read or write of them goes through trainer/stage.h: host collectives on a
 * device backend are staged through host memory, NCCL communicators get
 * device pointers (host data staged to the device), the exact 128-bit sums
 * travel as fp32 limbs where the collective has no i128 sum (NCCL), and the
 * checkpoint tensors are registered on the backend's device. dp_coll and
 * tp_coll may be NCCL communicators only with a CUDA backend (FTC_EINVAL).
 * FTC_TRAIN_FORCE_STAGING=1 in the environment makes the CPU backend take
 * the staged path too (the bits do not change: it is how CI tests it).
 *
 * Numerical guard (docs/trainer.md "Numerical guard"): after forward and
 * backward and before the optimizer writes anything, a step whose loss or
 * gradient is not finite (every micro-batch is checked, so one poisoned
 * micro-batch on one DP rank suffices; in deterministic mode a micro-batch
 * gradient of L2 norm min(2^30, 2^31/M) or more too: the exact sums' range),
 * or — when guard_spike_sigma > 0 — a
 * loss above the mean of the last guard_window accepted losses by more than
 * guard_spike_sigma standard deviations, is not applied. FTC_GUARD_SKIP moves
 * on to the next batch; FTC_GUARD_ROLLBACK restores the newest committed
 * version (the agent's, else the persist tier's) and then skips the batch
 * when it comes round again. The decision is global without an extra
 * collective: a poisoned micro-batch is reported as a NaN micro-batch loss,
 * and the micro-batch losses are all-gathered with the gradient, so every DP
 * rank decides on the same values. Skipped step indices are training state:
 * the checkpoint's metadata record keeps them (sorted, at most
 * FTC_GUARD_MAX_SKIPS; more is FTC_ERANGE: the run is diverging) with the
 * spike window, so a restore at any DP degree replays the same schedule (a
 * listed step before the restored one that the record does not skip was
 * applied: ignored with a warning). The
 * data position stays a function of the step (a skipped batch is consumed
 * and not used); the learning rate and AdamW's bias correction count applied
 * updates only (step minus the skips before it), as Megatron-LM and DeepSpeed
 * leave their schedulers alone on a skipped iteration. With an agent the
 * event (kind nan or loss_spike, step, loss, action) is reported through
 * ftc_report by world rank 0 and recorded in the job's event stream.
 *
 * Thread-safety: a trainer is driven by one thread.
 */
#ifndef FTC_TRAINER_TRAIN_H
#define FTC_TRAINER_TRAIN_H

#include "core/err.h"
#include "trainer/coll.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#include <stdbool.h>
#include <stdint.h>

/* The guard's action on a non-finite loss or gradient, or a loss spike. */
enum ftc_guard_mode {
    FTC_GUARD_OFF = 0,      /* no check (the spike window is still kept): a non-finite
                               gradient fails the step (FTC_ERANGE) in deterministic mode,
                               or reaches the weights in fp32 mode */
    FTC_GUARD_SKIP = 1,     /* do not apply the update; the next step takes the next batch */
    FTC_GUARD_ROLLBACK = 2, /* restore the newest committed version, then skip the batch */
};
#define FTC_GUARD_WINDOW_MAX 256 /* losses in the spike window */
#define FTC_GUARD_MAX_SKIPS 64   /* skipped steps a run may accumulate (in the checkpoint) */

typedef struct ftc_train_options {
    uint32_t struct_size;       /* sizeof(ftc_train_options_t) */
    ftc_model_config_t model;   /* sizes (ftc_model_preset) */
    const char *backend;        /* "auto", "cpu", "cuda" */
    int micro_batch;            /* B: sequences per micro-batch */
    int seq_len;                /* T: tokens per sequence (<= model.max_seq) */
    int micro_steps;            /* micro-batches per step (global batch = micro_steps * B) */
    uint64_t steps;             /* length of the run (and of the lr schedule) */
    ftc_optim_config_t optim;   /* optim.total is set from steps */
    uint64_t seed;              /* initialization and data order */
    bool deterministic;         /* exact gradient sums (needed for dp > 1) */
    int dp;                     /* virtual data-parallel ranks, 1..64 (deterministic) */
    const char *data_path;      /* token file; NULL or "" = the generated corpus */
    uint64_t corpus_bytes;      /* size of the generated corpus */
    uint64_t corpus_seed;       /* its seed */
    double eval_fraction;       /* held-out part of the tokens */
    const char *ckpt_dir;       /* persist directory; NULL or "" = no checkpoints */
    uint64_t ckpt_every;        /* checkpoint every N steps (>= 1) */
    const char *job_id;         /* names the shards */
    /* real data parallelism (see the top); NULL = one process, `dp` virtual ranks */
    ftc_coll_t *dp_coll;        /* the DP group of this process (not owned); needs
                                   deterministic mode and dp == 1; at most 64 ranks */
    int coll_timeout_ms;        /* deadline of each collective (default 60000); without an
                                   agent also of each checkpoint's snapshot (its device
                                   copy and seal, which the peers wait out in the next
                                   collective) and of its device syncs */
    int world_rank, world_size; /* this process in the job (for the agent); 0, 1 */
    int tp;                     /* tensor-parallel degree of the layout (1; see dist.h) */
    const char *agent;          /* ftc agent socket: checkpoints through include/ftc.h */
    int agent_call_timeout_ms;  /* with agent: the libftc context's timeout_ms (default
                                   60000): the deadline of each call to the agent (a
                                   checkpoint, its snapshot wait, a restore, a fetch, a
                                   rollback's wait for a commit) and of the device syncs of
                                   its snapshots and restores; a wait past it ends the step
                                   or the creation with FTC_ETIMEDOUT naming it. Not the
                                   agent's own agent.timeout_ms (its replications and
                                   fetches, 30 s), which it should exceed */
    /* tensor parallelism (see the top); NULL = none. tp must be 0, 1 or its size */
    ftc_coll_t *tp_coll;        /* the TP group of this process (not owned) */
    /* the numerical guard (see "Numerical guard" below) */
    int guard;                  /* FTC_GUARD_SKIP (default), FTC_GUARD_ROLLBACK, FTC_GUARD_OFF */
    double guard_spike_sigma; /* a loss this many sd above the window's mean is a spike; 0 = off */
    int guard_window;           /* accepted losses in the spike window, 2..FTC_GUARD_WINDOW_MAX */
    const uint64_t *skip_steps; /* step indices whose batches are skipped up front (not owned) */
    int n_skip_steps;
    int64_t inject_nan_step;    /* tests: poison one micro-batch of this step (-1 = none) */
    int64_t inject_spike_step;  /* tests: multiply one micro-batch's loss by 100 (-1 = none) */
    int inject_rank;            /* the DP rank (or virtual rank) whose micro-batch is poisoned */
    int inject_tp_rank;         /* tests: -1 = every TP rank; else only this TP rank's gradient
                                   slice gets the NaN (its loss, replicated, stays finite) */
    /* tests: the snapshot engine's device copy ops of the agent path (ckpt/snapshot.h,
       through ftc__set_device_ops) and of the persist path, e.g. tests/ckpt/fake_device.h,
       whose copies fail on request; on a host backend the checkpoint tensors are then
       registered on device 0, the ops taking host memory for it. NULL: the build's own
       (CUDA or none) */
    const struct ftc_snap_device_ops *ckpt_device_ops;
} ftc_train_options_t;

#define FTC_TRAIN_OPTIONS_INIT                                                                     \
    {.struct_size = sizeof(ftc_train_options_t), .model = {256, 64, 2, 4, 64},                     \
     .backend = "auto", .micro_batch = 4, .seq_len = 64, .micro_steps = 1, .steps = 100,           \
     .optim = FTC_OPTIM_CONFIG_INIT, .seed = 1337, .deterministic = false, .dp = 1,               \
     .data_path = NULL, .corpus_bytes = 1u << 20, .corpus_seed = 7, .eval_fraction = 0.1,          \
     .ckpt_dir = NULL, .ckpt_every = 10, .job_id = "ftc-train", .dp_coll = NULL,                   \
     .coll_timeout_ms = 60000, .world_rank = 0, .world_size = 1, .tp = 1, .agent = NULL,        \
     .agent_call_timeout_ms = 60000, .tp_coll = NULL,                                            \
     .guard = FTC_GUARD_SKIP, .guard_spike_sigma = 0.0, .guard_window = 50,                      \
     .skip_steps = NULL, .n_skip_steps = 0, .inject_nan_step = -1, .inject_spike_step = -1,      \
     .inject_rank = 0, .inject_tp_rank = -1, .ckpt_device_ops = NULL}

/* What one step did. */
typedef struct ftc_train_stats {
    uint64_t step;        /* 0-based index of the step just taken */
    float loss;           /* mean training loss over the global batch */
    float grad_norm;      /* global L2 norm before clipping */
    float lr;
    uint64_t tokens;      /* tokens in the global batch */
    double seconds;       /* wall time of the step, checkpoint included */
    bool checkpointed;    /* a checkpoint was taken after this step: persisted, or its
                             snapshot started through the agent; false when the agent's
                             policy skipped it or it failed (a warning) */
    double ckpt_seconds;  /* its wall time (snapshot + persist) */
    /* the guard: a skipped step applied no update (loss is then the offending
     * value, or 0 for a step skipped from the list; grad_norm is 0 and lr the
     * rate of the next applied update) */
    bool skipped;
    const char *guard;        /* NULL; "nan", "loss_spike" (detected) or "listed" */
    uint64_t rolled_back_to;  /* the step restored by a rollback, else UINT64_MAX */
} ftc_train_stats_t;

typedef struct ftc_trainer ftc_trainer_t;

/* Builds everything (the strings in o must outlive the trainer) and restores
 * the newest committed checkpoint of o->ckpt_dir when there is one. NULL with
 * err set: FTC_EINVAL (options), FTC_ECONFIG (checkpoint of another
 * configuration), data and I/O errors from the modules. */
ftc_trainer_t *ftc_trainer_create(const ftc_train_options_t *o, ftc_err_t *err);
void ftc_trainer_destroy(ftc_trainer_t *t); /* NULL is a no-op */
/* Ends the trainer's waits for its agent (a checkpoint waiting for a free
 * slot, a restore) with FTC_ECANCELED, now and from then on (ftc_interrupt):
 * the trainer is then only fit for ftc_trainer_destroy. Async-signal-safe;
 * no-op without an agent. For in-process recovery (cli/cmd_train.c). */
void ftc_trainer_interrupt(ftc_trainer_t *t);

/* One optimizer step over the next global batch; checkpoints when due.
 * FTC_ERANGE when a deterministic gradient sum is out of range. */
int ftc_trainer_step(ftc_trainer_t *t, ftc_train_stats_t *st, ftc_err_t *err);
/* Mean loss over `batches` held-out micro-batches (deterministic). */
float ftc_trainer_eval(ftc_trainer_t *t, int batches);
/* Snapshots and persists the current state now (needs ckpt_dir, or an
 * agent: then it is ftc_checkpoint of the current step). 0 also when the
 * checkpoint was not taken: the agent skipped the step (its busy policy,
 * or this rank already checkpointed it) or its snapshot failed (a
 * warning); *taken (may be NULL) says whether it was taken, as the step
 * stats' checkpointed does. */
int ftc_trainer_checkpoint(ftc_trainer_t *t, bool *taken, ftc_err_t *err);

uint64_t ftc_trainer_steps_done(const ftc_trainer_t *t);
/* The step the run was restored at, or UINT64_MAX for a fresh start. */
uint64_t ftc_trainer_resumed_from(const ftc_trainer_t *t);
ftc_model_t *ftc_trainer_model(ftc_trainer_t *t);
const ftc_adamw_t *ftc_trainer_adamw(const ftc_trainer_t *t);
const ftc_loader_t *ftc_trainer_loader(const ftc_trainer_t *t);
const char *ftc_trainer_backend(const ftc_trainer_t *t);
/* xxh3 of this rank's fp32 parameter buffer (identical on every DP rank;
 * with TP, this TP rank's slice). */
uint64_t ftc_trainer_params_hash(ftc_trainer_t *t);
/* xxh3 of the FULL fp32 parameter vector, in the layout of the TP = 1 model
 * (ftc_model_tensors_of(cfg, 1)): without TP, ftc_trainer_params_hash; with
 * TP a collective over the TP group (every TP rank must call it): the slices
 * are all-gathered and placed into the full tensors in rank order
 * (ftc_model_tp_to_full), the replicated tensors checked bit-identical
 * across the TP ranks (FTC_ECORRUPT naming the tensor otherwise). So the
 * same value on every rank, comparable across DP degrees at a fixed TP. 0,
 * a collective's error, FTC_ENOMEM. With full (not NULL, P floats of the
 * full model) the gathered parameters are copied there too. */
int ftc_trainer_full_params(ftc_trainer_t *t, uint64_t *hash, float *full, ftc_err_t *err);
/* The skipped steps so far (sorted; the up-front list, the restored one and
 * the guard's decisions); *steps valid until the next step. */
int ftc_trainer_skips(const ftc_trainer_t *t, const uint64_t **steps);
/* Parses "5,9,12" into at most max step indices ("" is the empty list);
 * FTC_EINVAL naming the bad entry, also for an empty entry (",5", "5,,9",
 * "5,"). */
int ftc_guard_parse_steps(const char *s, uint64_t *out, int max, int *n, ftc_err_t *err);
/* "skip" / "rollback" / "off" -> FTC_GUARD_*; -1 when unknown. */
int ftc_guard_parse_mode(const char *s);

#endif
