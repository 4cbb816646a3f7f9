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
 * Checkpoints: the parameters, both AdamW moments (named tensors
 * "param/wte", "adamw.m/wte", ...) and a metadata record (step, data cursor,
 * RNG state, seed, configuration hash) are snapshotted into a shard region
 * (ckpt/snapshot.h) and written through the persist tier (ckpt/persist.h)
 * every ckpt_every steps. At creation the newest committed version in
 * ckpt_dir is restored, if there is one; a checkpoint of a different
 * configuration is refused (FTC_ECONFIG) rather than silently mixed.
 *
 * Thread-safety: a trainer is driven by one thread.
 */
#ifndef FTC_TRAINER_TRAIN_H
#define FTC_TRAINER_TRAIN_H

#include "core/err.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#include <stdbool.h>
#include <stdint.h>

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
} ftc_train_options_t;

#define FTC_TRAIN_OPTIONS_INIT                                                                     \
    {.struct_size = sizeof(ftc_train_options_t), .model = {256, 64, 2, 4, 64},                     \
     .backend = "auto", .micro_batch = 4, .seq_len = 64, .micro_steps = 1, .steps = 100,           \
     .optim = FTC_OPTIM_CONFIG_INIT, .seed = 1337, .deterministic = false, .dp = 1,               \
     .data_path = NULL, .corpus_bytes = 1u << 20, .corpus_seed = 7, .eval_fraction = 0.1,          \
     .ckpt_dir = NULL, .ckpt_every = 10, .job_id = "ftc-train"}

/* What one step did. */
typedef struct ftc_train_stats {
    uint64_t step;        /* 0-based index of the step just taken */
    float loss;           /* mean training loss over the global batch */
    float grad_norm;      /* global L2 norm before clipping */
    float lr;
    uint64_t tokens;      /* tokens in the global batch */
    double seconds;       /* wall time of the step, checkpoint included */
    bool checkpointed;    /* a checkpoint was persisted after this step */
    double ckpt_seconds;  /* its wall time (snapshot + persist) */
} ftc_train_stats_t;

typedef struct ftc_trainer ftc_trainer_t;

/* Builds everything (the strings in o must outlive the trainer) and restores
 * the newest committed checkpoint of o->ckpt_dir when there is one. NULL with
 * err set: FTC_EINVAL (options), FTC_ECONFIG (checkpoint of another
 * configuration), data and I/O errors from the modules. */
ftc_trainer_t *ftc_trainer_create(const ftc_train_options_t *o, ftc_err_t *err);
void ftc_trainer_destroy(ftc_trainer_t *t); /* NULL is a no-op */

/* One optimizer step over the next global batch; checkpoints when due.
 * FTC_ERANGE when a deterministic gradient sum is out of range. */
int ftc_trainer_step(ftc_trainer_t *t, ftc_train_stats_t *st, ftc_err_t *err);
/* Mean loss over `batches` held-out micro-batches (deterministic). */
float ftc_trainer_eval(ftc_trainer_t *t, int batches);
/* Snapshots and persists the current state now (needs ckpt_dir). */
int ftc_trainer_checkpoint(ftc_trainer_t *t, ftc_err_t *err);

uint64_t ftc_trainer_steps_done(const ftc_trainer_t *t);
/* The step the run was restored at, or UINT64_MAX for a fresh start. */
uint64_t ftc_trainer_resumed_from(const ftc_trainer_t *t);
ftc_model_t *ftc_trainer_model(ftc_trainer_t *t);
const ftc_adamw_t *ftc_trainer_adamw(const ftc_trainer_t *t);
const ftc_loader_t *ftc_trainer_loader(const ftc_trainer_t *t);
const char *ftc_trainer_backend(const ftc_trainer_t *t);

#endif
