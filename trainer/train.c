/*
 * train.c — one training process (train.h): building the pieces, the step
 * (micro-batches over virtual ranks, exact reduction, AdamW), evaluation,
 * and checkpoints through the snapshot + persist tier, restored at start.
 */
#include "trainer/train.h"

#include "ckpt/client_internal.h"
#include "ckpt/persist.h"
#include "ckpt/snapshot.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/hash.h"
#include "core/log.h"
#include "ftc.h"
#include "recover/layout.h"
#include "trainer/gradsum.h"
#include "trainer/rng.h"
#include "trainer/stage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FTC__META_MAGIC "FTCTRST1"
#define FTC__META_VERSION 2 /* 2: the guard's skipped steps and spike window */
#define FTC__MAX_DP 64

/* The checkpoint's metadata record (little-endian, docs/trainer.md). */
typedef struct ftc__train_meta {
    char magic[8];        /* "FTCTRST1" */
    uint32_t version;     /* 1 */
    uint32_t size;        /* sizeof this record */
    uint64_t step;        /* steps done */
    uint64_t samples;     /* data cursor: global samples consumed */
    uint64_t rng;         /* the trainer's RNG state */
    uint64_t seed;        /* the run's seed */
    uint64_t config_hash; /* xxh3 of everything that must match to resume */
    uint64_t reserved;    /* 0: whole state (one process); else a ZeRO-1 chunk: the DP
                           * degree in the low 32 bits, the TP degree in the high 32
                           * (0 in records written before the TP degree was recorded) */
    /* version 2: the numerical guard's state (train.h "Numerical guard") */
    uint32_t n_skips;                    /* entries of skips */
    uint32_t n_loss;                     /* entries of loss */
    uint64_t skips[FTC_GUARD_MAX_SKIPS]; /* skipped step indices, sorted, distinct */
    float loss[FTC_GUARD_WINDOW_MAX];    /* the spike window: accepted losses, oldest first */
} ftc__train_meta_t;

/* docs/trainer.md's table of the record */
_Static_assert(sizeof(ftc__train_meta_t) == 1608, "the metadata record is 1608 bytes");

struct ftc_trainer {
    ftc_train_options_t o;
    const ftc_kernels_t *k;
    ftc_tokens_t tokens;      /* the token stream (file or generated) */
    ftc_loader_t loader;
    ftc_model_t *model;
    ftc_adamw_t *adam;
    ftc_gradsum_t **acc;      /* one exact accumulator per virtual rank (deterministic) */
    int32_t *inputs, *targets;/* one micro-batch */
    float *micro_loss;        /* per micro-batch losses of a step */
    float *tp_flags;          /* [micro_steps]: the guard's verdicts exchanged over TP */
    float *gstage;            /* host copy of the gradients (deterministic mode, staged) */
    ftc_stage_t stage;        /* backend memory <-> host code and collectives (stage.h) */
    ftc_rng_t rng;            /* after initialization; checkpointed */
    uint64_t step;            /* steps done */
    uint64_t resumed_from;    /* UINT64_MAX: fresh */
    uint64_t config_hash;
    /* checkpointing */
    ftc_snap_t *snap;
    uint8_t *region;
    uint64_t region_size;
    ftc_persist_t *persist;
    /* real DP / ZeRO-1 (sharded: dp_coll or agent set) */
    bool sharded;
    ftc_coll_t *coll;         /* the DP group, NULL with one rank */
    int dpr, dpn;             /* DP rank and size */
    size_t shard_off, shard_len; /* this rank's chunk of the parameters */
    ftc_ctx_t *ftc;           /* the agent's context (include/ftc.h), or NULL */
    char rank_dir[4096];      /* persist directory of this DP rank */
    /* tensor parallelism (tp_coll set) */
    int tpr, tpn;             /* TP rank and size (0, 1 without) */
    ftc_model_coll_ctx_t tp_ctx; /* the model's all-reduce over tp_coll */
    /* the numerical guard (train.h) */
    uint64_t skips[FTC_GUARD_MAX_SKIPS]; /* skipped step indices, sorted, distinct */
    int nskips;
    float win[FTC_GUARD_WINDOW_MAX]; /* accepted losses, oldest first */
    int nwin;
    int64_t guard_last_ck;    /* last step ftc_checkpoint accepted (agent), -1: none */
};

static uint64_t ftc__config_hash(const ftc_trainer_t *t)
{
    const ftc_train_options_t *o = &t->o;
    const ftc_optim_config_t *c = &o->optim;
    uint64_t h[24];
    int n = 0;
    h[n++] = (uint64_t)o->model.vocab, h[n++] = (uint64_t)o->model.max_seq;
    h[n++] = (uint64_t)o->model.layers, h[n++] = (uint64_t)o->model.heads;
    h[n++] = (uint64_t)o->model.channels, h[n++] = (uint64_t)o->micro_batch;
    h[n++] = (uint64_t)o->seq_len, h[n++] = (uint64_t)o->micro_steps, h[n++] = o->steps;
    h[n++] = o->seed, h[n++] = o->deterministic;
    uint32_t f[8] = {0};
    memcpy(&f[0], &c->lr, 4), memcpy(&f[1], &c->min_lr_ratio, 4), memcpy(&f[2], &c->beta1, 4);
    memcpy(&f[3], &c->beta2, 4), memcpy(&f[4], &c->eps, 4), memcpy(&f[5], &c->weight_decay, 4);
    memcpy(&f[6], &c->grad_clip, 4);
    for (int i = 0; i < 7; i++)
        h[n++] = f[i];
    h[n++] = c->warmup;
    h[n++] = t->tokens.vocab, h[n++] = t->tokens.n;
    h[n++] = ftc_xxh3(t->tokens.tok, (size_t)t->tokens.n * 2);
    double ef = o->eval_fraction;
    memcpy(&h[n++], &ef, 8);
    return ftc_xxh3(h, (size_t)n * sizeof h[0]);
}

static int ftc__newest(const char *dir, uint64_t *step, ftc_err_t *err);
static int ftc__shard_persist_restore_in(ftc_trainer_t *t, uint64_t *all, uint64_t *oks,
                                         int world, ftc_err_t *err);
static int ftc__guard_check_options(const ftc_train_options_t *o, ftc_err_t *err);
static bool ftc__guard_add_skip(ftc_trainer_t *t, uint64_t step);
static int ftc__guard_from_meta(ftc_trainer_t *t, const ftc__train_meta_t *meta,
                                const char *where, ftc_err_t *err);
static void ftc__guard_micro(ftc_trainer_t *t, int i);
static bool ftc__guard_listed(const ftc_trainer_t *t, uint64_t step);
static uint64_t ftc__guard_upd(const ftc_trainer_t *t);
static int ftc__checkpoint(ftc_trainer_t *t, bool *taken, ftc_err_t *err);
static int ftc__guard_check(ftc_trainer_t *t, double loss, const float *grads, size_t n);
static int ftc__guard_act(ftc_trainer_t *t, int kind, double loss, ftc_train_stats_t *st,
                          uint64_t t0, ftc_err_t *err);

static int ftc__check_options(const ftc_train_options_t *o, ftc_err_t *err)
{
    if (o->struct_size != sizeof(ftc_train_options_t))
        return ftc_err_set(err, FTC_EINVAL, "train options of size %u (this build: %zu)",
                           o->struct_size, sizeof(ftc_train_options_t));
    if (o->micro_batch < 1 || o->micro_batch > 4096)
        return ftc_err_set(err, FTC_EINVAL, "micro-batch %d: must be 1..4096", o->micro_batch);
    if (o->seq_len < 1 || o->seq_len > o->model.max_seq)
        return ftc_err_set(err, FTC_EINVAL, "sequence length %d: must be 1..%d (the model's "
                           "max_seq)", o->seq_len, o->model.max_seq);
    if (o->micro_steps < 1 || o->micro_steps > 65536)
        return ftc_err_set(err, FTC_EINVAL, "micro-batches per step %d: must be 1..65536",
                           o->micro_steps);
    if (o->steps < 1 || o->steps > INT32_MAX - 1) /* AdamW's bias correction takes an int */
        return ftc_err_set(err, FTC_EINVAL, "steps %llu: must be 1..%d",
                           (unsigned long long)o->steps, INT32_MAX - 1);
    if (o->dp < 1 || o->dp > FTC__MAX_DP)
        return ftc_err_set(err, FTC_EINVAL, "dp %d: must be 1..%d", o->dp, FTC__MAX_DP);
    if (o->dp > 1 && !o->deterministic)
        return ftc_err_set(err, FTC_EINVAL, "dp %d > 1 virtual ranks need deterministic mode "
                           "(--deterministic)", o->dp);
    if (o->dp > o->micro_steps)
        return ftc_err_set(err, FTC_EINVAL, "dp %d: more ranks than micro-batches per step (%d)",
                           o->dp, o->micro_steps);
    if (o->dp_coll && (!o->deterministic || o->dp != 1))
        return ftc_err_set(err, FTC_EINVAL, "real data parallelism (%d ranks) needs deterministic "
                           "mode and no virtual ranks (dp 1)", ftc_coll_size(o->dp_coll));
    if (o->dp_coll && ftc_coll_size(o->dp_coll) > FTC__MAX_DP)
        return ftc_err_set(err, FTC_EINVAL, "a DP group of %d ranks: the trainer takes at most %d "
                           "DP ranks (per TP rank)", ftc_coll_size(o->dp_coll), FTC__MAX_DP);
    if (o->dp_coll && ftc_coll_size(o->dp_coll) > o->micro_steps)
        return ftc_err_set(err, FTC_EINVAL, "%d DP ranks but only %d micro-batches per step: the "
                           "global batch must have at least one micro-batch per rank",
                           ftc_coll_size(o->dp_coll), o->micro_steps);
    if (o->coll_timeout_ms < 1)
        return ftc_err_set(err, FTC_EINVAL, "collective timeout must be >= 1 ms");
    int tp = o->tp_coll ? ftc_coll_size(o->tp_coll) : 1;
    if (o->tp < 0 || (o->tp > 1 && o->tp != tp))
        return ftc_err_set(err, FTC_EINVAL, "tp %d: %s", o->tp,
                           o->tp_coll ? "must be 1 or the size of the TP communicator"
                                      : "tensor parallelism needs a TP communicator (tp_coll)");
    if (tp > 1 && (!o->deterministic || o->dp != 1))
        return ftc_err_set(err, FTC_EINVAL, "tensor parallelism (%d ranks) needs deterministic "
                           "mode and no virtual ranks (dp 1)", tp);
    if (tp > 1 && (o->model.heads < 1 || o->model.heads % tp))
        return ftc_err_set(err, FTC_EINVAL, "tensor parallelism of degree %d must divide the "
                           "model's %d attention heads", tp, o->model.heads);
    if (o->agent && *o->agent && o->agent_call_timeout_ms < 1)
        return ftc_err_set(err, FTC_EINVAL, "agent call timeout %d ms: must be >= 1 ms",
                           o->agent_call_timeout_ms);
    if (o->ckpt_every < 1 && ((o->ckpt_dir && *o->ckpt_dir) || o->agent))
        return ftc_err_set(err, FTC_EINVAL, "checkpoint interval must be >= 1 step");
    return ftc__guard_check_options(o, err);
}

/* The persist path's snapshot handle, t->snap: its device syncs and its
 * destroy's wait bounded by coll_timeout_ms, as the trainer's wait for it is
 * (ftc__checkpoint), and on the tests' ckpt_device_ops when given (host
 * buffers taken for device 0's memory, as on the agent path). *dev: the
 * device to register the tensors on. */
static int ftc__persist_snap(ftc_trainer_t *t, const ftc_shard_info_t *info, int *dev,
                             ftc_err_t *err)
{
    *dev = t->k->device; /* device tensors as device tensors (FTC_SNAP_HOST = -1) */
    t->snap = ftc_snap_create(info, 1, sizeof(ftc__train_meta_t), err);
    if (!t->snap)
        return err ? err->code : FTC_ENOMEM;
    ftc_snap_set_timeout(t->snap, t->o.coll_timeout_ms);
    if (t->o.ckpt_device_ops) {
        int rc = ftc_snap_set_device_ops(t->snap, t->o.ckpt_device_ops, err);
        if (rc < 0)
            return rc;
        if (*dev < 0)
            *dev = 0;
    }
    return 0;
}

/* Once the tensors are registered with t->snap: allocates and formats the
 * checkpoint region, t->region, and opens the persist path in dir. */
static int ftc__persist_region(ftc_trainer_t *t, const char *dir, ftc_err_t *err)
{
    t->region_size = ftc_snap_size(t->snap);
    t->region = aligned_alloc(64, (t->region_size + 63) & ~(uint64_t)63);
    if (!t->region)
        return ftc_err_set(err, FTC_ENOMEM, "checkpoint region of %llu bytes: out of memory",
                           (unsigned long long)t->region_size);
    int rc = ftc_snap_format(t->snap, t->region, err);
    if (rc < 0)
        return rc;
    ftc_persist_options_t po = FTC_PERSIST_OPTIONS_INIT;
    t->persist = ftc_persist_open(dir, &po, err);
    if (!t->persist)
        return err ? err->code : FTC_EIO;
    return 0;
}

/* Registers params and moments with a snapshot handle and formats a region. */
static int ftc__ckpt_setup(ftc_trainer_t *t, ftc_err_t *err)
{
    ftc_shard_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.job_id, sizeof info.job_id, "%s", t->o.job_id ? t->o.job_id : "ftc-train");
    info.generation = 1;
    info.dp = info.tp = info.pp = 1;
    int dev = t->k->device;
    int rc = ftc__persist_snap(t, &info, &dev, err);
    if (rc < 0)
        return rc;
    const ftc_model_tensor_t *mt = ftc_model_tensors(t->model);
    float *bufs[3] = {ftc_model_params(t->model), t->adam->m, t->adam->v};
    const char *prefix[3] = {"param/", "adamw.m/", "adamw.v/"};
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < FTC_MODEL_NTENSORS; i++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefix[b], mt[i].name);
            rc = ftc_snap_add(t->snap, name, FTC_DTYPE_F32, mt[i].ndim, mt[i].shape,
                              bufs[b] + mt[i].offset, dev, err);
            if (rc < 0)
                return rc;
        }
    }
    return ftc__persist_region(t, t->o.ckpt_dir, err);
}

/* Restores the newest committed version, if any. */
static int ftc__ckpt_restore(ftc_trainer_t *t, ftc_err_t *err)
{
    ftc_persist_version_t *v = NULL;
    int nv = 0, rc = ftc_persist_list(t->persist, &v, &nv);
    if (rc < 0)
        return ftc_err_set(err, rc, "%s: %s", t->o.ckpt_dir, ftc_persist_errstr(t->persist));
    bool any = false;
    for (int i = 0; i < nv; i++)
        any = any || v[i].state == FTC_PV_COMMITTED;
    free(v);
    if (!any) {
        /* ZeRO-1 chunks of real DP ranks (ftc train --nproc) in the same
         * directory: starting over at step 0 would silently drop them */
        static const char *const kinds[2] = {"rank-d0", "rank-d0-t0"};
        for (int k = 0; k < 2; k++) {
            char d[4200];
            uint64_t s = 0;
            snprintf(d, sizeof d, "%s/%s", t->o.ckpt_dir, kinds[k]);
            if ((rc = ftc__newest(d, &s, err)) < 0)
                return rc;
            if (s)
                return ftc_err_set(err, FTC_ECONFIG,
                                   "%s holds ZeRO-1 chunks of real DP ranks (%s: step %llu), not "
                                   "a single-process state: this run would start over at step 0; "
                                   "resume with --nproc N (any DP degree: the chunks are "
                                   "re-partitioned%s), or use another --ckpt-dir",
                                   t->o.ckpt_dir, kinds[k], (unsigned long long)s,
                                   k ? "; the saved --tp" : "");
        }
        return 0;
    }
    ftc_persist_loaded_t *l = NULL;
    rc = ftc_persist_load(t->persist, FTC_PERSIST_NEWEST, &l);
    if (rc < 0)
        return ftc_err_set(err, rc, "restoring from %s: %s", t->o.ckpt_dir,
                           ftc_persist_errstr(t->persist));
    ftc__train_meta_t meta;
    uint32_t mlen = sizeof meta;
    uint64_t step = 0;
    memset(&meta, 0, sizeof meta);
    rc = l->n_shards == 1 ? ftc_snap_restore(t->snap, l->shards[0], l->sizes[0], &step, &meta,
                                             &mlen, err)
                          : ftc_err_set(err, FTC_ECONFIG, "version has %d shards; this trainer "
                                        "writes 1", l->n_shards);
    ftc_persist_loaded_free(l);
    if (rc < 0)
        return ftc_err_wrap(err, "restoring from %s", t->o.ckpt_dir);
    if (mlen != sizeof meta || memcmp(meta.magic, FTC__META_MAGIC, 8) ||
        meta.version != FTC__META_VERSION || meta.size != sizeof meta)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: step %llu: the trainer metadata record is "
                           "missing or of another version",
                           t->o.ckpt_dir, (unsigned long long)step);
    if (meta.config_hash != t->config_hash)
        return ftc_err_set(err, FTC_ECONFIG,
                           "%s: step %llu was written by a different configuration (model, batch, "
                           "schedule, seed or data differ); use another --ckpt-dir or the same "
                           "settings", t->o.ckpt_dir, (unsigned long long)step);
    uint64_t G = (uint64_t)t->o.micro_steps * (uint64_t)t->o.micro_batch;
    if (meta.step != step || meta.samples != step * G)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: step %llu: metadata says step %llu, cursor %llu",
                           t->o.ckpt_dir, (unsigned long long)step,
                           (unsigned long long)meta.step, (unsigned long long)meta.samples);
    if ((rc = ftc__guard_from_meta(t, &meta, t->o.ckpt_dir, err)) < 0)
        return rc;
    t->step = step;
    t->rng.state = meta.rng;
    t->resumed_from = step;
    FTC_INFO("train", "restored step %llu from %s", (unsigned long long)step, t->o.ckpt_dir);
    return 0;
}

/* The trainer's host buffers (the model and the optimizer allocate theirs
 * in the backend's memory). */
static int ftc__alloc_buffers(ftc_trainer_t *t, ftc_err_t *err)
{
    size_t BT = (size_t)t->o.micro_batch * (size_t)t->o.seq_len;
    t->inputs = malloc(BT * sizeof(int32_t));
    t->targets = malloc(BT * sizeof(int32_t));
    t->micro_loss = malloc((size_t)t->o.micro_steps * sizeof(float));
    t->tp_flags = malloc((size_t)t->o.micro_steps * sizeof(float));
    if (t->o.deterministic && t->stage.staged)
        t->gstage = malloc(ftc_model_num_params(t->model) * sizeof(float));
    if (!t->inputs || !t->targets || !t->micro_loss || !t->tp_flags ||
        (t->o.deterministic && t->stage.staged && !t->gstage))
        return ftc_err_set(err, FTC_ENOMEM, "trainer: out of memory");
    return 0;
}

/* ---- real DP (ZeRO-1) --------------------------------------------------- */

static ftc_deadline_t ftc__coll_dl(const ftc_trainer_t *t)
{
    return ftc_deadline_in_ms((uint64_t)t->o.coll_timeout_ms);
}

static int ftc__coll_fail(ftc_trainer_t *t, int rc, const char *what, ftc_err_t *err)
{
    return ftc_err_set(err, rc, "step %llu: %s (DP rank %d of %d): %s%s",
                       (unsigned long long)t->step, what, t->dpr, t->dpn, ftc_coll_errmsg(t->coll),
                       rc != FTC_EINVAL && rc != FTC_ERANGE && rc != FTC_ENOMEM
                           ? "; a peer rank probably died: restart the job (it resumes from the "
                             "last checkpoint)"
                           : "");
}

/* A failed TP all-reduce (sticky in the model, model.h). */
static int ftc__tp_fail(ftc_trainer_t *t, const char *what, ftc_err_t *err)
{
    ftc_err_t e = {0};
    int rc = ftc_model_status(t->model, &e);
    return ftc_err_set(err, rc, "step %llu: %s (TP rank %d of %d, DP rank %d): %s%s",
                       (unsigned long long)t->step, what, t->tpr, t->tpn, t->dpr, e.msg,
                       rc != FTC_EINVAL && rc != FTC_ERANGE && rc != FTC_ENOMEM
                           ? "; a peer rank probably died: restart the job (it resumes from the "
                             "last checkpoint)"
                           : "");
}

/* The model's TP all-reduce: its buffers are backend memory (model.h), staged
 * for a host collective on a device backend (stage.h). Reads tp_ctx, so a
 * rebind that replaces tp_ctx.coll keeps the staging. */
static int ftc__tp_allreduce(void *ctx, float *buf, size_t n)
{
    ftc_trainer_t *t = ctx;
    int ms = t->tp_ctx.timeout_ms > 0 ? t->tp_ctx.timeout_ms : t->o.coll_timeout_ms;
    return ftc_stage_coll(&t->stage, t->tp_ctx.coll, FTC_STAGE_ALL_REDUCE, buf, n, FTC_COLL_F32,
                          0, FTC_STAGE_MEM_BACKEND, ftc_deadline_in_ms((uint64_t)ms));
}

/* Refuses collectives that cannot carry this run: NCCL needs a CUDA backend.
 * (The DP group's exact 128-bit sums, which NCCL lacks, go through fp32 limbs:
 * stage.h.) */
static int ftc__check_colls(const ftc_trainer_t *t, ftc_err_t *err)
{
    const ftc_coll_t *cs[2] = {t->o.dp_coll, t->o.tp_coll};
    for (int i = 0; i < 2; i++)
        if (ftc_coll_device_memory(cs[i]) && t->k->device < 0)
            return ftc_err_set(err, FTC_EINVAL, "the %s group runs over NCCL, which needs the "
                               "CUDA kernels backend, not '%s': use --backend cuda, or --coll cpu",
                               i ? "TP" : "DP", t->k->name);
    return 0;
}

/* Every rank gets every rank's 8-byte value (U8 all-gather). */
static int ftc__gather_u64(ftc_trainer_t *t, uint64_t mine, uint64_t *all, ftc_err_t *err)
{
    all[t->dpr] = mine;
    if (!t->coll)
        return 0;
    int rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_ALL_GATHER, all, (size_t)t->dpn * 8,
                            FTC_COLL_U8, 0, FTC_STAGE_MEM_HOST, ftc__coll_dl(t));
    return rc < 0 ? ftc__coll_fail(t, rc, "exchanging restart steps", err) : 0;
}

/* Every rank of the job gets every rank's 8-byte value: all[tp_rank * dp +
 * dp_rank] (dp x tp entries), the DP group's gather, then the TP group's of
 * those blocks. The persist path's restore decides with it: the TP ranks
 * must resume the same step as the DP ranks must (each TP rank's series is
 * written on its own, and a checkpoint cut short leaves them apart). */
static int ftc__gather_u64_world(ftc_trainer_t *t, uint64_t mine, uint64_t *all, ftc_err_t *err)
{
    int rc = ftc__gather_u64(t, mine, all + (size_t)t->tpr * (size_t)t->dpn, err);
    if (rc < 0 || t->tpn == 1)
        return rc;
    rc = ftc_stage_coll(&t->stage, t->o.tp_coll, FTC_STAGE_ALL_GATHER, all,
                        (size_t)t->tpn * (size_t)t->dpn * 8, FTC_COLL_U8, 0, FTC_STAGE_MEM_HOST,
                        ftc__coll_dl(t));
    return rc < 0 ? ftc_err_set(err, rc, "exchanging restart steps over TP (TP rank %d of %d, "
                                "DP rank %d): %s; a peer rank probably died: restart the job",
                                t->tpr, t->tpn, t->dpr, ftc_coll_errmsg(t->o.tp_coll))
                  : 0;
}

/* The parameter chunks of every rank to every rank (after an update or a restore). */
static int ftc__gather_params(ftc_trainer_t *t, ftc_err_t *err)
{
    if (!t->coll)
        return 0;
    int rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_ALL_GATHER, ftc_model_params(t->model),
                            ftc_model_num_params(t->model), FTC_COLL_F32, 0,
                            FTC_STAGE_MEM_BACKEND, ftc__coll_dl(t));
    return rc < 0 ? ftc__coll_fail(t, rc, "all-gather of the parameters", err) : 0;
}

static void ftc__meta_fill(const ftc_trainer_t *t, ftc__train_meta_t *meta)
{
    memset(meta, 0, sizeof *meta);
    memcpy(meta->magic, FTC__META_MAGIC, 8);
    meta->version = FTC__META_VERSION;
    meta->size = sizeof *meta;
    meta->step = t->step;
    meta->samples = t->step * (uint64_t)t->o.micro_steps * (uint64_t)t->o.micro_batch;
    meta->rng = t->rng.state;
    meta->seed = t->o.seed;
    meta->config_hash = t->config_hash;
    meta->reserved = t->sharded ? (uint64_t)t->dpn | (uint64_t)t->tpn << 32 : 0;
    meta->n_skips = (uint32_t)t->nskips;
    memcpy(meta->skips, t->skips, (size_t)t->nskips * sizeof t->skips[0]);
    meta->n_loss = (uint32_t)t->nwin;
    memcpy(meta->loss, t->win, (size_t)t->nwin * sizeof t->win[0]);
}

/* The DP degree of a record's ZeRO-1 chunks (0: a whole state) and its TP
 * degree (0: not recorded, a record older than the field). */
static uint64_t ftc__meta_dp(const ftc__train_meta_t *meta)
{
    return meta->reserved & 0xffffffffu;
}

static uint64_t ftc__meta_tp(const ftc__train_meta_t *meta)
{
    return meta->reserved >> 32;
}

/* Checks a restored record against this run (want: the DP degree of its
 * chunks; the TP degree must be this run's); sets step and RNG. */
static int ftc__meta_apply(ftc_trainer_t *t, const ftc__train_meta_t *meta, uint32_t mlen,
                           uint64_t step, uint64_t want, const char *where, ftc_err_t *err)
{
    if (mlen != sizeof *meta || memcmp(meta->magic, FTC__META_MAGIC, 8) ||
        meta->version != FTC__META_VERSION || meta->size != sizeof *meta)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: step %llu: the trainer metadata record is "
                           "missing or of another version", where, (unsigned long long)step);
    if (meta->config_hash != t->config_hash)
        return ftc_err_set(err, FTC_ECONFIG,
                           "%s: step %llu was written by a different configuration (model, batch, "
                           "schedule, seed or data differ); use another checkpoint location or "
                           "the same settings", where, (unsigned long long)step);
    if (meta->reserved && ftc__meta_tp(meta) && ftc__meta_tp(meta) != (uint64_t)t->tpn)
        return ftc_err_set(err, FTC_ECONFIG,
                           "%s: step %llu was saved with TP %llu, this run has TP %d: the TP "
                           "degree of a checkpoint cannot change (each TP rank holds a slice of "
                           "the parameters); restart with --tp %llu, or use another checkpoint "
                           "location", where, (unsigned long long)step,
                           (unsigned long long)ftc__meta_tp(meta), t->tpn,
                           (unsigned long long)ftc__meta_tp(meta));
    if (ftc__meta_dp(meta) != want)
        return ftc_err_set(
            err, FTC_ECONFIG,
            "%s: step %llu holds %s, this run has %d DP ranks: restart with the "
            "saved DP degree (ZeRO-1 chunks are re-partitioned, a whole state is not)",
            where, (unsigned long long)step,
            ftc__meta_dp(meta) ? "ZeRO-1 chunks of another DP degree"
                               : "a whole single-process state",
            t->dpn);
    uint64_t G = (uint64_t)t->o.micro_steps * (uint64_t)t->o.micro_batch;
    if (meta->step != step || meta->samples != step * G)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: step %llu: metadata says step %llu, cursor %llu",
                           where, (unsigned long long)step, (unsigned long long)meta->step,
                           (unsigned long long)meta->samples);
    int rc = ftc__guard_from_meta(t, meta, where, err);
    if (rc < 0)
        return rc;
    t->step = step;
    t->rng.state = meta->rng;
    t->resumed_from = step;
    return 0;
}

/* The three chunk tensors: name, data. */
static void ftc__shard_tensors(ftc_trainer_t *t, const char **names, float **bufs)
{
    names[0] = "param.shard", names[1] = "adamw.m.shard", names[2] = "adamw.v.shard";
    bufs[0] = ftc_model_params(t->model) + t->shard_off;
    bufs[1] = t->adam->m, bufs[2] = t->adam->v;
}

/* An integer `ftc run` puts in the environment of a restarted rank: dflt
 * when unset or empty; anything but a whole number in lo..hi (ftc_parse_int)
 * is FTC_ECONFIG naming the variable, never silently dflt (with a garbled
 * FTC_RESTORE_RANK a renumbered rank took its own number's chunk in place). */
static int ftc__env_int(const char *name, int lo, int hi, int dflt, int *out, ftc_err_t *err)
{
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s)
        return 0;
    int64_t v = 0;
    int rc = ftc_parse_int(s, lo, hi, &v);
    if (rc < 0)
        return ftc_err_set(err, FTC_ECONFIG, "%s='%s' (from ftc run, for a restarted rank) is "
                           "%s: it must be a whole number in %d..%d", name, s,
                           rc == FTC_ERANGE ? "out of range" : "not a whole decimal number", lo,
                           hi);
    *out = (int)v;
    return 0;
}

/* After an FTC_ENOENT from the agent: is it "nothing committed yet" (a
 * fresh start) rather than "the committed version has no verified copy left"
 * (a lost checkpoint: never a silent restart from step 0)? The agent answers
 * both with FTC_ENOENT; its message tells them apart. */
static bool ftc__nothing_committed(const ftc_trainer_t *t)
{
    return strstr(ftc_last_error(t->ftc), "nothing committed") != NULL;
}

/* Every rank gets every rank's k 8-byte values (all[r * k + i]). */
static int ftc__gather_words(ftc_trainer_t *t, const uint64_t *mine, int k, uint64_t *all,
                             ftc_err_t *err)
{
    memcpy(all + (size_t)t->dpr * (size_t)k, mine, (size_t)k * 8);
    if (!t->coll)
        return 0;
    int rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_ALL_GATHER, all,
                            (size_t)t->dpn * (size_t)k * 8, FTC_COLL_U8, 0, FTC_STAGE_MEM_HOST,
                            ftc__coll_dl(t));
    return rc < 0 ? ftc__coll_fail(t, rc, "exchanging restore steps", err) : 0;
}

/* The previous world rank that held ZeRO-1 chunk q of S of this rank's TP
 * slice: previous DP rank q with this rank's tp_rank (the TP degree never
 * changes; TP innermost, the layout rule of recover/layout.h). */
static int ftc__prev_rank_of(const ftc_trainer_t *t, int S, int q)
{
    return ftc_layout_rank(S, t->tpn, q, t->tpr, 0);
}

/* What a restored record changes: the step, the RNG, where the run resumed
 * from and the guard's state (the skip list and the spike window). */
typedef struct ftc__resume_state {
    uint64_t step, rng, resumed_from;
    uint64_t skips[FTC_GUARD_MAX_SKIPS];
    int nskips;
    float win[FTC_GUARD_WINDOW_MAX];
    int nwin;
} ftc__resume_state_t;

static void ftc__state_save(const ftc_trainer_t *t, ftc__resume_state_t *g)
{
    g->step = t->step, g->rng = t->rng.state, g->resumed_from = t->resumed_from;
    memcpy(g->skips, t->skips, sizeof g->skips);
    g->nskips = t->nskips;
    memcpy(g->win, t->win, sizeof g->win);
    g->nwin = t->nwin;
}

static void ftc__state_restore(ftc_trainer_t *t, const ftc__resume_state_t *g)
{
    t->step = g->step, t->rng.state = g->rng, t->resumed_from = g->resumed_from;
    memcpy(t->skips, g->skips, sizeof t->skips);
    t->nskips = g->nskips;
    memcpy(t->win, g->win, sizeof t->win);
    t->nwin = g->nwin;
}

/* Checks a fetched shard: its step, its metadata record (config hash,
 * step, cursor, DP degree S, the run's RNG) and its three chunk tensors
 * (fp32, chunk q of S elements). Returns the tensors' data in src. */
static int ftc__check_fetched(ftc_trainer_t *t, const ftc_shard_ref_t *ref, int q, int S,
                              uint64_t step, const ftc__train_meta_t *first,
                              ftc__train_meta_t *meta, const float **src, ftc_err_t *err)
{
    int rank = ftc__prev_rank_of(t, S, q);
    if (ftc_shard_step(ref) != (int64_t)step)
        return ftc_err_set(err, FTC_ECORRUPT, "the shard of previous rank %d is step %lld, not "
                           "the agreed committed step %llu", rank,
                           (long long)ftc_shard_step(ref), (unsigned long long)step);
    size_t mlen = 0;
    const void *m = ftc_shard_meta(ref, &mlen);
    memset(meta, 0, sizeof *meta);
    if (m && mlen == sizeof *meta)
        memcpy(meta, m, sizeof *meta);
    char where[64];
    snprintf(where, sizeof where, "agent (previous rank %d)", rank);
    /* a check only: the record may still be rejected below (or the step
     * given up by another rank), so nothing of it stays in the state, its
     * skip list and spike window neither; the caller applies the accepted
     * record */
    ftc__resume_state_t saved;
    ftc__state_save(t, &saved);
    int rc = ftc__meta_apply(t, meta, (uint32_t)mlen, step, (uint64_t)S, where, err);
    ftc__state_restore(t, &saved);
    if (rc < 0)
        return rc;
    if (first && meta->rng != first->rng)
        return ftc_err_set(err, FTC_ECORRUPT, "step %llu: previous ranks %d and %d saved "
                           "different RNG states", (unsigned long long)step,
                           ftc__prev_rank_of(t, S, 0), rank);
    uint64_t qoff, qlen;
    ftc_layout_chunk(ftc_model_num_params(t->model), S, q, &qoff, &qlen);
    const char *names[3];
    float *bufs[3];
    ftc__shard_tensors(t, names, bufs);
    for (int b = 0; b < 3; b++) {
        const void *d = NULL;
        int dt = 0;
        uint64_t numel = 0;
        rc = ftc_shard_tensor(ref, names[b], &d, &dt, &numel);
        if (rc < 0)
            return ftc_err_set(err, rc == FTC_ENOENT ? FTC_ECORRUPT : rc, "step %llu: the shard "
                               "of previous rank %d has no tensor %s", (unsigned long long)step,
                               rank, names[b]);
        if (dt != FTC_DTYPE_F32 || numel != qlen)
            return ftc_err_set(err, FTC_ECORRUPT, "step %llu: tensor %s of previous rank %d is "
                               "%s x %llu, not fp32 x %llu (chunk %d of %d)",
                               (unsigned long long)step, names[b], rank,
                               ftc_dtype_name(dt) ? ftc_dtype_name(dt) : "?",
                               (unsigned long long)numel, (unsigned long long)qlen, q, S);
        src[b] = d;
    }
    return 0;
}

/* The agent's last error for a failed call; a deadline's names the
 * trainer's agent_call_timeout_ms (--agent-call-timeout-ms), which
 * not every libftc message states ("the previous snapshot is still not
 * sealed"); else ftc_last_error. buf: n bytes. */
static const char *ftc__agent_errstr(const ftc_trainer_t *t, int rc, char *buf, size_t n)
{
    const char *m = t->ftc ? ftc_last_error(t->ftc) : ftc_strerror(rc);
    if (rc != FTC_ETIMEDOUT)
        return m;
    snprintf(buf, n, "%s (agent call timeout %d ms, --agent-call-timeout-ms)", m,
             t->o.agent_call_timeout_ms);
    return buf;
}

/* Re-partition through the agent: DP rank 0 reads the step (the newest
 * committed step at or before want whose shard of previous rank 0 has a copy,
 * ftc_fetch_at_most: one request, however many steps were never checkpointed
 * or lost below want; the newest committed version's when want < 0) and DP
 * degree S from previous rank 0's shard and every rank agrees on them; each
 * rank then fetches, at that step, the shard of every previous DP rank whose
 * chunk overlaps its own (ftc_fetch: verified, committed), checks each one's
 * metadata and copies the overlapping ranges of the parameters and both
 * moments. *fresh: nothing committed. *missing (want >= 0 only): previous
 * rank 0's shard has no copy at any committed step at or before want, every
 * rank says so with FTC_ENOENT and *used = want. */
static int ftc__agent_repartition(ftc_trainer_t *t, int64_t want, bool *fresh, bool *missing,
                                  uint64_t *used, ftc_err_t *err)
{
    *fresh = false, *missing = false;
    size_t P = ftc_model_num_params(t->model);
    ftc_shard_ref_t *ref0 = NULL;
    ftc__train_meta_t m0;
    memset(&m0, 0, sizeof m0);
    /* [step, S, status]: status 0 ok, 1 nothing committed, 2 failed, 3 no
     * copy of step `want` (never committed, or lost) */
    uint64_t mine[3] = {0, 0, 0}, all[3 * FTC__MAX_DP];
    ftc_err_t e0 = {0};
    if (t->dpr == 0) {
        int rc = want >= 0 ? ftc_fetch_at_most(t->ftc, ftc__prev_rank_of(t, 1, 0), want, &ref0)
                           : ftc_fetch(t->ftc, ftc__prev_rank_of(t, 1, 0), -1, &ref0);
        if (rc == FTC_ENOENT && want >= 0) {
            mine[2] = 3;
            ftc_err_set(&e0, rc, "step %lld or before: %s", (long long)want,
                        ftc_last_error(t->ftc));
        } else if (rc == FTC_ENOENT && ftc__nothing_committed(t)) {
            mine[2] = 1;
            FTC_WARN("train", "no committed checkpoint through the agent (%s): starting at step 0",
                     ftc_last_error(t->ftc));
        } else if (rc < 0) {
            mine[2] = 2;
            char why[512];
            ftc_err_set(&e0, rc, "fetching the newest committed shard of previous rank %d: %s",
                        ftc__prev_rank_of(t, 1, 0), ftc__agent_errstr(t, rc, why, sizeof why));
        } else {
            size_t ml = 0;
            const void *m = ftc_shard_meta(ref0, &ml);
            if (m && ml == sizeof m0)
                memcpy(&m0, m, sizeof m0);
            mine[0] = (uint64_t)ftc_shard_step(ref0);
            mine[1] = ftc__meta_dp(&m0);
            if (ftc__meta_tp(&m0) && ftc__meta_tp(&m0) != (uint64_t)t->tpn) {
                mine[2] = 2;
                ftc_err_set(&e0, FTC_ECONFIG, "step %lld of previous rank %d was saved with TP "
                            "%llu, this run has TP %d: the TP degree of a checkpoint cannot "
                            "change (each TP rank holds a slice of the parameters); restart with "
                            "--tp %llu, or use another job", (long long)ftc_shard_step(ref0),
                            ftc__prev_rank_of(t, 1, 0), (unsigned long long)ftc__meta_tp(&m0),
                            t->tpn, (unsigned long long)ftc__meta_tp(&m0));
            } else if (ftc_shard_step(ref0) < 0 || mine[1] < 1 || mine[1] > FTC__MAX_DP) {
                mine[2] = 2;
                ftc_err_set(&e0, FTC_ECORRUPT, "step %lld of previous rank %d: the metadata "
                            "record says %llu DP ranks (need 1..%d)",
                            (long long)ftc_shard_step(ref0), ftc__prev_rank_of(t, 1, 0),
                            (unsigned long long)mine[1], FTC__MAX_DP);
            }
        }
    }
    int rc = ftc__gather_words(t, mine, 3, all, err);
    if (rc < 0) {
        ftc_shard_release(ref0);
        return rc;
    }
    if (all[2] != 0) {
        ftc_shard_release(ref0);
        if (all[2] == 1) {
            *fresh = true;
            return 0;
        }
        if (all[2] == 3) { /* nothing at or before want: the caller gives up */
            *used = (uint64_t)want, *missing = true;
            return t->dpr == 0 ? ftc_err_set(err, FTC_ENOENT, "%s", e0.msg)
                               : ftc_err_set(err, FTC_ENOENT, "step %lld or before: DP rank 0 "
                                             "found no copy through its agent", (long long)want);
        }
        return t->dpr == 0 ? ftc_err_set(err, e0.code, "%s", e0.msg)
                           : ftc_err_set(err, FTC_EIO, "DP rank 0 could not read the committed "
                                         "checkpoint through its agent (its log says why)");
    }
    uint64_t step = all[0];
    *used = step;
    int S = (int)all[1];
    ftc_layout_range_t pieces[2 * FTC__MAX_DP];
    size_t np = 0;
    if ((rc = ftc_layout_zero_ranges(P, S, t->dpn, pieces, 2 * FTC__MAX_DP, &np, err)) < 0) {
        ftc_shard_release(ref0);
        return rc;
    }
    float *p = ftc_model_params(t->model);
    ftc__train_meta_t first, mq;
    bool have = false;
    int fetched = 0;
    rc = 0;
    for (size_t i = 0; i < np && rc == 0; i++) {
        const ftc_layout_range_t *pc = &pieces[i];
        if (pc->new_dp != t->dpr)
            continue;
        ftc_shard_ref_t *ref = pc->prev_dp == 0 ? ref0 : NULL;
        if (!ref) {
            rc = ftc_fetch(t->ftc, ftc__prev_rank_of(t, S, pc->prev_dp), (int64_t)step, &ref);
            if (rc < 0) {
                char why[512];
                rc = ftc_err_set(err, rc, "step %llu: fetching the shard of previous rank %d "
                                 "(chunk %d of %d): %s", (unsigned long long)step,
                                 ftc__prev_rank_of(t, S, pc->prev_dp), pc->prev_dp, S,
                                 ftc__agent_errstr(t, rc, why, sizeof why));
                break;
            }
        }
        const float *src[3];
        rc = ftc__check_fetched(t, ref, pc->prev_dp, S, step, have ? &first : NULL, &mq, src,
                                err);
        if (rc == 0) { /* host data into backend memory */
            size_t b = (size_t)pc->len * sizeof(float);
            ftc_stage_to_backend(&t->stage, p + pc->offset, src[0] + pc->prev_offset, b);
            ftc_stage_to_backend(&t->stage, t->adam->m + pc->new_offset, src[1] + pc->prev_offset,
                                 b);
            ftc_stage_to_backend(&t->stage, t->adam->v + pc->new_offset, src[2] + pc->prev_offset,
                                 b);
            if (!have)
                first = mq, have = true;
            fetched++;
        }
        if (ref != ref0)
            ftc_shard_release(ref);
    }
    ftc_shard_release(ref0);
    if (rc == 0 && !have)
        rc = ftc_err_set(err, FTC_EINVAL, "DP rank %d of %d: no piece of the re-partition",
                         t->dpr, t->dpn);
    /* the accepted record into the state; undone below when the step is
     * given up (the caller may try an older one: none of this one's skip
     * list may stay) */
    ftc__resume_state_t before;
    ftc__state_save(t, &before);
    if (rc == 0)
        rc = ftc__meta_apply(t, &first, sizeof first, step, (uint64_t)S, "agent", err);
    /* everyone restored, or everyone fails (no rank waits in a collective) */
    uint64_t ok = rc == 0, oks[FTC__MAX_DP];
    int rc2 = ftc__gather_u64(t, ok, oks, rc < 0 ? NULL : err);
    if (rc2 < 0 || rc < 0)
        ftc__state_restore(t, &before);
    if (rc2 < 0) /* the group itself failed: no common answer */
        return rc < 0 ? rc : rc2;
    if (rc < 0) /* every rank answers FTC_EAGAIN below; this one's reason goes to the log */
        FTC_WARN("train", "DP rank %d: %s", t->dpr, err->msg);
    /* FTC_EAGAIN: every rank agrees that this step cannot be put together
     * (the caller may try an older committed one) */
    for (int r = 0; r < t->dpn; r++)
        if (!oks[r]) {
            ftc__state_restore(t, &before);
            return ftc_err_set(err, FTC_EAGAIN, "step %llu: DP rank %d could not re-partition "
                               "the checkpoint (its log says why)", (unsigned long long)step, r);
        }
    char tps[48] = "";
    if (t->tpn > 1)
        snprintf(tps, sizeof tps, " (TP rank %d of %d)", t->tpr, t->tpn);
    FTC_INFO("train", "DP rank %d of %d%s: restored step %llu through the agent, re-partitioned "
             "from %d DP ranks (%d shards fetched)", t->dpr, t->dpn, tps, (unsigned long long)step,
             S, fetched);
    return 0;
}

/* Restore through the agent. When this rank continues its own state
 * (FTC_RESTORE_RANK unset or its own rank, the same world), ftc_restore
 * fills the registered chunk from the newest committed version; if every
 * rank restored the same step at this DP degree, that is it. Otherwise (a
 * layout change: another DP degree, ranks renumbered, or a failed in-place
 * restore) every rank re-partitions with ftc_fetch. Then the parameters are
 * all-gathered. Every rank agrees on the step, or every rank fails. */
static int ftc__agent_restore(ftc_trainer_t *t, int prev, int rr, ftc_err_t *err)
{
    bool in_place = (prev == 0 || prev == t->o.world_size) && (rr < 0 || rr == t->o.world_rank);
    ftc__train_meta_t meta;
    memset(&meta, 0, sizeof meta);
    size_t mlen = sizeof meta;
    /* [kind, step]: kind 0 restored at this DP degree, 1 nothing committed, 2 re-partition */
    uint64_t mine[2] = {2, 0}, all[2 * FTC__MAX_DP];
    if (in_place) {
        int64_t step = -1;
        int rc = ftc_restore(t->ftc, &step, &meta, &mlen);
        if (rc == 0 && mlen == sizeof meta && ftc__meta_dp(&meta) == (uint64_t)t->dpn && step >= 0)
            mine[0] = 0, mine[1] = (uint64_t)step;
        else if (rc == FTC_ENOENT && ftc__nothing_committed(t))
            mine[0] = 1;
        else if (rc < 0) { /* a failure (a deadline, a bad copy, FTC_ENOENT though something
                              * is committed: its copies are lost): said as one */
            char why[512];
            FTC_WARN("train", "DP rank %d: in-place restore failed (%s: %s): re-partitioning",
                     t->dpr, ftc_errname(rc), ftc__agent_errstr(t, rc, why, sizeof why));
        } else if (mlen != sizeof meta) { /* not this trainer's record: the re-partition
                                           * checks every fetched one and names it */
            FTC_WARN("train", "DP rank %d: in-place restore of step %lld: its metadata record is "
                     "%zu bytes, not the %zu this trainer writes (written by another program "
                     "or version?): re-partitioning", t->dpr, (long long)step, mlen,
                     sizeof meta);
        } else if (step < 0) { /* libftc's contract says it cannot: said, never taken */
            FTC_WARN("train", "DP rank %d: in-place restore returned no step (%lld): "
                     "re-partitioning", t->dpr, (long long)step);
        } else { /* the expected layout change */
            char held[64];
            if (ftc__meta_dp(&meta))
                snprintf(held, sizeof held, "ZeRO-1 chunks of %llu DP ranks",
                         (unsigned long long)ftc__meta_dp(&meta));
            else
                snprintf(held, sizeof held, "a whole single-process state");
            FTC_INFO("train", "DP rank %d: no in-place restore: step %lld holds %s, this run has "
                     "%d DP ranks: re-partitioning", t->dpr, (long long)step, held, t->dpn);
        }
    }
    int rc = ftc__gather_words(t, mine, 2, all, err);
    if (rc < 0)
        return rc;
    bool same = true, none = true, every = true;
    uint64_t oldest = UINT64_MAX;
    for (int r = 0; r < t->dpn; r++) {
        same = same && all[2 * r] == 0 && all[2 * r + 1] == all[1];
        none = none && all[2 * r] == 1;
        every = every && all[2 * r] == 0;
        if (all[2 * r] == 0 && all[2 * r + 1] < oldest)
            oldest = all[2 * r + 1];
    }
    if (none) {
        if (prev > 0)
            FTC_WARN("train", "DP rank %d: restarted (previous world %d) but nothing is "
                     "committed: starting at step 0", t->dpr, prev);
        return 0;
    }
    if (same) {
        if ((rc = ftc__meta_apply(t, &meta, (uint32_t)mlen, all[1], (uint64_t)t->dpn, "agent",
                                  err)) < 0)
            return rc;
        FTC_INFO("train", "DP rank %d: restored step %llu through the agent", t->dpr,
                 (unsigned long long)all[1]);
        return ftc__gather_params(t, err);
    }
    /* every rank restored, but not the same step: one shard of the newest
     * version was gone from memory and came from the persist tier, which
     * lags (it holds an older committed step): every rank goes back to the
     * oldest of them, so that the whole job continues one consistent step */
    int64_t want = -1;
    if (every && !same) {
        want = (int64_t)oldest;
        FTC_WARN("train", "DP rank %d: the ranks restored different committed steps (this one "
                 "%llu, the oldest %llu: a shard of the newer ones is lost): every rank goes "
                 "back to step %llu", t->dpr, (unsigned long long)mine[1],
                 (unsigned long long)oldest, (unsigned long long)oldest);
    }
    /* a step whose shards cannot all be fetched (one existed only in a lost
     * node's memory, and the persist tier lags or skipped it): every rank
     * tries the committed checkpoint before it, a few times (each try is
     * collective, so every rank takes the same one). The step one interval
     * back may not exist (the agent's checkpoint.busy=skip policy skipped
     * it, or the interval changed between runs): each try asks for the
     * newest committed step at or before it that has a copy of previous
     * rank 0's shard (ftc_fetch_at_most: one request to the agent, which
     * walks over the missing steps itself), and the ranks agree on the step
     * it found */
    bool fresh = false, missing = false;
    uint64_t used = 0;
    uint64_t every_n = t->o.ckpt_every > 0 ? t->o.ckpt_every : 1;
    for (int tries = 0;;) {
        int64_t asked = want;
        rc = ftc__agent_repartition(t, want, &fresh, &missing, &used, err);
        if (missing) { /* no copy of any committed step at or before want (every rank agrees) */
            rc = ftc_err_set(err, FTC_EAGAIN, "no copy of any committed step at or before %llu "
                             "(%s)", (unsigned long long)used, err->msg);
            break;
        }
        if (rc == 0 && asked >= 0 && used < (uint64_t)asked)
            FTC_WARN("train", "DP rank %d: no copy of steps %llu down to %llu (checkpoints "
                     "skipped or lost): took step %llu", t->dpr, (unsigned long long)asked,
                     (unsigned long long)(used + 1), (unsigned long long)used);
        if (rc != FTC_EAGAIN || ++tries == 8 || used < every_n + 1)
            break;
        FTC_WARN("train", "DP rank %d: %s: trying the checkpoint of step %llu", t->dpr, err->msg,
                 (unsigned long long)(used - every_n));
        want = (int64_t)(used - every_n);
    }
    if (rc == FTC_EAGAIN)
        rc = ftc_err_set(err, FTC_EIO, "%s; no older committed checkpoint could be put together "
                         "either", err->msg);
    if (rc < 0)
        return rc;
    return fresh ? 0 : ftc__gather_params(t, err);
}

/* After a failed call of the agent path (rc < 0): does it end the run? A
 * deadline (FTC_ETIMEDOUT), ftc_interrupt (FTC_ECANCELED), a misuse
 * (FTC_EINVAL) and a connection to the agent that is gone do. Anything
 * else is a snapshot that failed (its copy into the slot: a device copy
 * error, ...), reported once by include/ftc.h: that step is not
 * checkpointed, the previous committed version stays (I3), and training
 * goes on with a warning; the next checkpoint is taken as usual.
 * FTC_ETIMEDOUT stays fatal even when it is a snapshot's reported failure
 * (its seal or hand-off past timeout_ms): the device or the agent is stuck,
 * the seal still holds its slot so the next checkpoints would fail too, and
 * training on uncheckpointed would only grow what the next failure loses;
 * ending the rank lets the launcher recover at the committed step. */
static bool ftc__agent_fatal(ftc_trainer_t *t, int rc)
{
    if (rc == FTC_ETIMEDOUT || rc == FTC_ECANCELED || rc == FTC_EINVAL)
        return true;
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    return ftc_ckpt_status(t->ftc, &st) < 0; /* the agent connection is broken */
}

/* Agent path: register the chunk, restore the newest committed step. */
static int ftc__agent_setup(ftc_trainer_t *t, ftc_err_t *err)
{
    /* the restart's environment first: an error in it before the agent is asked anything */
    int prev = 0, rr = -1;
    int rc = ftc__env_int("FTC_PREV_WORLD_SIZE", 0, FTC_LAYOUT_MAX_WORLD, 0, &prev, err);
    if (rc == 0)
        rc = ftc__env_int("FTC_RESTORE_RANK", 0, FTC_LAYOUT_MAX_WORLD - 1, -1, &rr, err);
    if (rc < 0)
        return rc;
    ftc_options_t fo = FTC_OPTIONS_INIT;
    fo.job = t->o.job_id;
    fo.agent = t->o.agent;
    fo.rank = t->o.world_rank;
    fo.world = t->o.world_size;
    fo.dp = t->dpn;
    fo.tp = t->o.tp > 0 ? t->o.tp : 1;
    fo.pp = 1;
    fo.meta_capacity = 4096;
    /* every call to the agent and the device syncs of its snapshots: the
     * trainer's own deadline, not libftc's default whatever it was given */
    fo.timeout_ms = t->o.agent_call_timeout_ms;
    rc = ftc_create(&fo, &t->ftc);
    char why[512];
    if (rc < 0)
        return ftc_err_set(err, rc, "agent %s: %s", t->o.agent,
                           ftc__agent_errstr(t, rc, why, sizeof why));
    const char *names[3];
    float *bufs[3];
    ftc__shard_tensors(t, names, bufs);
    int64_t shape[1] = {(int64_t)t->shard_len};
    /* device tensors are registered as device tensors (include/ftc.h copies
     * them itself); -1 is FTC_HOST. Tests' device ops (ckpt_device_ops)
     * take the host buffers as device 0's memory. */
    int dev = t->k->device >= 0 ? t->k->device : FTC_HOST;
    if (t->o.ckpt_device_ops) {
        if ((rc = ftc__set_device_ops(t->ftc, t->o.ckpt_device_ops)) < 0)
            return ftc_err_set(err, rc, "agent: ckpt_device_ops: %s", ftc_last_error(t->ftc));
        if (dev == FTC_HOST)
            dev = 0;
    }
    for (int b = 0; b < 3; b++)
        if ((rc = ftc_register(t->ftc, names[b], FTC_DTYPE_F32, 1, shape, bufs[b], dev)) < 0)
            return ftc_err_set(err, rc, "agent: registering %s: %s", names[b],
                               ftc_last_error(t->ftc));
    return ftc__agent_restore(t, prev, rr, err);
}

/* The committed steps of dir, newest first (*steps malloc'd, NULL when none). */
static int ftc__committed_steps(const char *dir, uint64_t **steps, int *n, ftc_err_t *err)
{
    *steps = NULL, *n = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 && errno == ENOENT)
        return 0; /* no such directory: no step (the writer's open created it) */
    ftc_persist_t *p = ftc_persist_open_reader(dir, err);
    if (!p)
        return err ? err->code : FTC_EIO;
    ftc_persist_version_t *v = NULL;
    int nv = 0, rc = ftc_persist_list(p, &v, &nv);
    if (rc < 0)
        rc = ftc_err_set(err, rc, "%s: %s", dir, ftc_persist_errstr(p));
    if (rc == 0 && nv > 0 && !(*steps = malloc((size_t)nv * sizeof **steps)))
        rc = ftc_err_set(err, FTC_ENOMEM, "%s: out of memory", dir);
    for (int i = 0; rc == 0 && i < nv; i++)
        if (v[i].state == FTC_PV_COMMITTED) {
            int k = (*n)++; /* kept newest first, whatever the listing's order */
            while (k > 0 && (*steps)[k - 1] < v[i].step) {
                (*steps)[k] = (*steps)[k - 1];
                k--;
            }
            (*steps)[k] = v[i].step;
        }
    free(v);
    ftc_persist_close(p);
    if (rc < 0)
        free(*steps), *steps = NULL, *n = 0;
    return rc;
}

/* The newest committed step in a persist directory (0: none, or no such
 * directory). Read-only (ftc_persist_open_reader): the directory may be
 * another rank's, whose writer may be at work; nothing is created there and
 * no temp file removed. */
static int ftc__newest(const char *dir, uint64_t *step, ftc_err_t *err)
{
    uint64_t *steps;
    int n;
    *step = 0;
    int rc = ftc__committed_steps(dir, &steps, &n, err);
    if (rc == 0 && n > 0)
        *step = steps[0];
    free(steps);
    return rc;
}

/* The persist directory of DP rank q in this TP rank's series: DIR/rank-dQ,
 * DIR/rank-dQ-tT with tensor parallelism. */
static void ftc__rank_dir(const ftc_trainer_t *t, int q, char *buf, size_t size)
{
    if (t->tpn > 1)
        snprintf(buf, size, "%s/rank-d%d-t%d", t->o.ckpt_dir, q, t->tpr);
    else
        snprintf(buf, size, "%s/rank-d%d", t->o.ckpt_dir, q);
}

/* The persist directory of DP rank q in TP rank tr's series. */
static void ftc__rank_dir_tp(const ftc_trainer_t *t, int q, int tr, char *buf, size_t size)
{
    if (t->tpn > 1)
        snprintf(buf, size, "%s/rank-d%d-t%d", t->o.ckpt_dir, q, tr);
    else
        snprintf(buf, size, "%s/rank-d%d", t->o.ckpt_dir, q);
}

/* The shard header of version `step` in the persist directory dir. */
static int ftc__saved_info(const char *dir, uint64_t step, ftc_shard_info_t *info, ftc_err_t *err)
{
    ftc_persist_t *p = ftc_persist_open_reader(dir, err);
    if (!p)
        return err ? err->code : FTC_EIO;
    ftc_persist_loaded_t *l = NULL;
    ftc_shard_view_t view;
    int rc = ftc_persist_load(p, step, &l);
    if (rc < 0)
        rc = ftc_err_set(err, rc, "%s: %s", dir, ftc_persist_errstr(p));
    else if (l->n_shards != 1 ||
             (rc = ftc_shard_open(&view, l->shards[0], l->sizes[0], 0, err)) < 0)
        rc = rc < 0 ? rc : ftc_err_set(err, FTC_ECORRUPT, "%s: not one chunk per version", dir);
    else
        *info = view.info;
    ftc_persist_loaded_free(l);
    ftc_persist_close(p);
    return rc;
}

/* The TP degree is fixed for a checkpoint (ARCHITECTURE.md, Determinism):
 * one saved with another degree is refused. Without TP the series are
 * rank-dD, with TP rank-dD-tT and the degree is in the shard header of
 * rank-d0-t0's newest version. Every rank reads the same files, so all
 * refuse together. */
static int ftc__tp_layout_check(ftc_trainer_t *t, ftc_err_t *err)
{
    char d[4200];
    struct stat sb;
    uint64_t s = 0;
    int rc;
    snprintf(d, sizeof d, "%s/rank-d0%s", t->o.ckpt_dir, t->tpn > 1 ? "" : "-t0");
    if (stat(d, &sb) == 0 && (rc = ftc__newest(d, &s, err)) < 0)
        return rc;
    if (s)
        return ftc_err_set(err, FTC_ECONFIG, "%s: step %llu was saved %s tensor parallelism; "
                           "this run has TP %d: restart with the saved TP degree (--tp), or use "
                           "another checkpoint directory", d, (unsigned long long)s,
                           t->tpn > 1 ? "without" : "with", t->tpn);
    if (t->tpn == 1)
        return 0;
    snprintf(d, sizeof d, "%s/rank-d0-t0", t->o.ckpt_dir);
    if (stat(d, &sb) != 0)
        return 0;
    if ((rc = ftc__newest(d, &s, err)) < 0 || s == 0)
        return rc;
    ftc_shard_info_t info;
    if ((rc = ftc__saved_info(d, s, &info, err)) < 0)
        return rc;
    if ((int)info.tp != t->tpn)
        return ftc_err_set(err, FTC_ECONFIG, "%s: step %llu was saved with TP %u; this run has "
                           "TP %d: restart with the saved TP degree (--tp), or use another "
                           "checkpoint directory", d, (unsigned long long)s, info.tp, t->tpn);
    return 0;
}

/* Loads version `step` of saved DP rank q of S (chunk qoff, qlen of P) from
 * its persist directory (ftc__rank_dir) into fresh buffers (params, m, v of
 * the chunk) and the metadata record. */
static int ftc__load_chunk(ftc_trainer_t *t, int q, int S, uint64_t step, float **bufs,
                           size_t *qoff, size_t *qlen, ftc__train_meta_t *meta, uint32_t *mlen,
                           ftc_err_t *err)
{
    char dir[4200];
    ftc__rank_dir(t, q, dir, sizeof dir);
    ftc_coll_chunk(ftc_model_num_params(t->model), S, q, qoff, qlen);
    ftc_shard_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.job_id, sizeof info.job_id, "%s", t->o.job_id ? t->o.job_id : "ftc-train");
    info.generation = 1;
    info.dp = (uint32_t)S, info.tp = (uint32_t)t->tpn, info.pp = 1, info.dp_rank = (uint32_t)q;
    info.tp_rank = (uint32_t)t->tpr;
    ftc_snap_t *sn = ftc_snap_create(&info, 1, sizeof(ftc__train_meta_t), err);
    if (!sn)
        return err ? err->code : FTC_ENOMEM;
    static const char *const names[3] = {"param.shard", "adamw.m.shard", "adamw.v.shard"};
    uint64_t shape[1] = {*qlen};
    int rc = 0;
    for (int b = 0; b < 3 && rc == 0; b++) {
        bufs[b] = malloc((*qlen ? *qlen : 1) * sizeof(float));
        rc = bufs[b] ? ftc_snap_add(sn, names[b], FTC_DTYPE_F32, 1, shape, bufs[b],
                                    FTC_SNAP_HOST, err)
                     : ftc_err_set(err, FTC_ENOMEM, "re-partitioning: out of memory");
    }
    ftc_persist_t *p = rc == 0 ? ftc_persist_open_reader(dir, err) : NULL;
    ftc_persist_loaded_t *l = NULL;
    if (rc == 0 && !p)
        rc = err ? err->code : FTC_EIO;
    if (rc == 0 && (rc = ftc_persist_load(p, step, &l)) < 0)
        rc = ftc_err_set(err, rc, "re-partitioning: step %llu of %s: %s",
                         (unsigned long long)step, dir, ftc_persist_errstr(p));
    uint64_t got = 0;
    if (rc == 0)
        rc = l->n_shards == 1 && l->step == step
                 ? ftc_snap_restore(sn, l->shards[0], l->sizes[0], &got, meta, mlen, err)
                 : ftc_err_set(err, FTC_ECORRUPT, "%s: step %llu is not one chunk of step %llu",
                               dir, (unsigned long long)l->step, (unsigned long long)step);
    if (rc < 0 && err)
        ftc_err_wrap(err, "re-partitioning from %s", dir);
    ftc_persist_loaded_free(l);
    ftc_persist_close(p);
    ftc_snap_destroy(sn);
    return rc;
}

/* Whether the persist directory dir holds a committed version `step`
 * (false when the directory does not exist). */
static int ftc__has_committed(const char *dir, uint64_t step, bool *has, ftc_err_t *err)
{
    uint64_t *steps;
    int n;
    *has = false;
    int rc = ftc__committed_steps(dir, &steps, &n, err);
    for (int i = 0; rc == 0 && i < n; i++)
        *has = *has || steps[i] == step;
    free(steps);
    return rc;
}

/* A first checkpoint cut short: no step was committed by every rank of this
 * degree, and the only committed versions are this run's first checkpoint
 * (step ckpt_every, of this DP degree and this configuration) on the ranks
 * that got to commit it (rank 0 killed before its marker, say). Nothing can
 * be restored, and a fresh start is consistent: each rank drops its lone
 * version (a committed version is never overwritten) with a warning naming
 * it. Every rank decides from the same files and the verdicts are exchanged
 * before anything is dropped. Only at creation (step 0, the same on every
 * rank): a guard rollback mid-run keeps its state and never drops. 1: start
 * fresh (dropped); 0: not that case (the caller refuses as before);
 * FTC_ECONFIG when a lone version was written by another configuration. */
static int ftc__lone_first(ftc_trainer_t *t, ftc_err_t *err)
{
    if (t->step != 0)
        return 0;
    uint64_t first = (uint64_t)t->o.ckpt_every, lone = 0, verdict = 1;
    char who[512] = "";
    size_t wl = 0;
    for (int q = 0; q < t->dpn && verdict == 1; q++) {
        char dq[4200];
        uint64_t *steps = NULL;
        int n = 0;
        ftc_err_t e = {0};
        ftc__rank_dir(t, q, dq, sizeof dq);
        if (ftc__committed_steps(dq, &steps, &n, &e) < 0 || n > 1 ||
            (n == 1 && steps[0] != first))
            verdict = 0;
        else if (n == 1) {
            ftc_shard_info_t saved;
            float *bufs[3] = {NULL, NULL, NULL};
            size_t qoff, qlen;
            ftc__train_meta_t mq;
            uint32_t ml = sizeof mq;
            memset(&mq, 0, sizeof mq);
            lone = first;
            if (ftc__saved_info(dq, first, &saved, &e) < 0 || (int)saved.dp != t->dpn ||
                ftc__load_chunk(t, q, t->dpn, first, bufs, &qoff, &qlen, &mq, &ml, &e) < 0 ||
                ml != sizeof mq || memcmp(mq.magic, FTC__META_MAGIC, 8))
                verdict = 0;
            else if (mq.config_hash != t->config_hash)
                verdict = 2;
            for (int b = 0; b < 3; b++)
                free(bufs[b]);
            int w = snprintf(who + wl, sizeof who - wl, "%srank-d%d", wl ? ", " : "", q);
            if (w > 0 && (size_t)w < sizeof who - wl)
                wl += (size_t)w;
        }
        free(steps);
    }
    uint64_t all[FTC__MAX_DP];
    int rc = ftc__gather_u64(t, verdict, all, err);
    if (rc < 0)
        return rc;
    for (int r = 0; r < t->dpn; r++)
        if (all[r] != 1)
            verdict = all[r] == 2 || verdict == 2 ? 2 : 0;
    if (verdict == 2)
        return ftc_err_set(err, FTC_ECONFIG,
                           "%s: step %llu (the only version, committed by some DP ranks only) "
                           "was written by a different configuration (model, batch, schedule, "
                           "seed or data differ); use another --ckpt-dir or the same settings",
                           t->o.ckpt_dir, (unsigned long long)first);
    if (verdict != 1)
        return 0;
    int dropped = 0;
    if (ftc_persist_drop_newer(t->persist, 0, &dropped) < 0)
        return ftc_err_set(err, FTC_EIO, "dropping a lone first checkpoint: %s",
                           ftc_persist_errstr(t->persist));
    if (t->dpr == 0 && lone)
        FTC_WARN("train", "%s: step %llu, the first checkpoint, was committed by %s only, not "
                 "by every one of the %d DP ranks: no step can be restored; dropping those "
                 "lone versions and starting at step 0", t->o.ckpt_dir,
                 (unsigned long long)lone, who, t->dpn);
    if (dropped)
        FTC_WARN("train", "DP rank %d: dropped %d version(s) of %s (step %llu: a first "
                 "checkpoint not committed by every rank)", t->dpr, dropped, t->rank_dir,
                 (unsigned long long)first);
    return 1;
}

/* The general restore: the newest step of rank-d0 that every rank of the DP
 * degree S it was saved with (its shard header) committed too, re-split into
 * this run's chunk. S is the degree of that version, not of rank-d0's newest
 * one: after a restart at another degree that was cut short before every
 * rank committed, rank-d0's newest version is of the new degree but the step
 * to restore is an older one, of the old degree. Every rank reads the files
 * it overlaps (and rank-d0's). */
static int ftc__repartition(ftc_trainer_t *t, ftc_err_t *err)
{
    char d0[4200];
    ftc__rank_dir(t, 0, d0, sizeof d0);
    uint64_t *steps = NULL;
    int nsteps = 0;
    int rc = ftc__committed_steps(d0, &steps, &nsteps, err);
    if (rc < 0)
        return rc;
    if (nsteps == 0) {
        free(steps); /* allocated when there are versions, none committed */
        if ((rc = ftc__lone_first(t, err)) != 0)
            return rc < 0 ? rc : 0; /* 1: a fresh start */
        return ftc_err_set(err, FTC_ECORRUPT, "%s: other ranks have checkpoints but %s has "
                           "none: use another --ckpt-dir", t->o.ckpt_dir, d0);
    }
    float *bufs[3] = {NULL, NULL, NULL};
    size_t qoff, qlen;
    uint64_t step = 0;
    int S = 0;
    for (int i = 0; i < nsteps && S == 0; i++) {
        /* the saved DP degree: the shard header of rank-d0's version */
        ftc_shard_info_t saved;
        ftc_err_t e = {0};
        /* unreadable (or removed meanwhile by its rank, which found it
         * incomplete: see the end): not a candidate, like an incomplete one */
        if (ftc__saved_info(d0, steps[i], &saved, &e) < 0) {
            FTC_WARN("train", "DP rank %d: step %llu of %s: %s: trying an older one", t->dpr,
                     (unsigned long long)steps[i], d0, e.msg);
            continue;
        }
        int s = (int)saved.dp;
        if (s < 1 || s > FTC__MAX_DP) {
            FTC_WARN("train", "DP rank %d: step %llu of %s: DP degree %d in the shard header: "
                     "trying an older one", t->dpr, (unsigned long long)steps[i], d0, s);
            continue;
        }
        /* committed by every DP rank of that degree in every TP rank's
         * series: the TP ranks resume the same step (each reads the same
         * files, so all choose alike) */
        bool all = true;
        for (int tr = 0; tr < t->tpn && all; tr++)
            for (int q = 0; q < s && all; q++) {
                char dq[4200];
                if (q == 0 && tr == t->tpr)
                    continue; /* rank-d0 itself */
                ftc__rank_dir_tp(t, q, tr, dq, sizeof dq);
                if (ftc__has_committed(dq, steps[i], &all, &e) < 0)
                    all = false;
            }
        if (all)
            S = s, step = steps[i];
        else
            FTC_INFO("train", "DP rank %d: step %llu of %s (saved by %d DP ranks) was not "
                     "committed by all of them: trying an older one", t->dpr,
                     (unsigned long long)steps[i], d0, s);
    }
    free(steps);
    if (S == 0 && (rc = ftc__lone_first(t, err)) != 0)
        return rc < 0 ? rc : 0; /* 1: a fresh start */
    if (S == 0)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: no checkpoint step of %s was committed by "
                           "every DP rank that saved it: use another --ckpt-dir", t->o.ckpt_dir,
                           d0);
    float *p = ftc_model_params(t->model);
    size_t lo = t->shard_off, hi = t->shard_off + t->shard_len;
    bool have_meta = false;
    for (int q = 0; q < S; q++) {
        size_t o0, l0;
        ftc_coll_chunk(ftc_model_num_params(t->model), S, q, &o0, &l0);
        if ((o0 + l0 <= lo || o0 >= hi) && have_meta)
            continue; /* no overlap */
        ftc__train_meta_t mq;
        uint32_t ml = sizeof mq;
        memset(&mq, 0, sizeof mq);
        rc = ftc__load_chunk(t, q, S, step, bufs, &qoff, &qlen, &mq, &ml, err);
        if (rc == 0) {
            size_t a = qoff > lo ? qoff : lo, b = qoff + qlen < hi ? qoff + qlen : hi;
            if (a < b) { /* host data into backend memory */
                size_t nb = (b - a) * sizeof(float);
                ftc_stage_to_backend(&t->stage, p + a, bufs[0] + (a - qoff), nb);
                ftc_stage_to_backend(&t->stage, t->adam->m + (a - lo), bufs[1] + (a - qoff), nb);
                ftc_stage_to_backend(&t->stage, t->adam->v + (a - lo), bufs[2] + (a - qoff), nb);
            }
            if (!have_meta)
                rc = ftc__meta_apply(t, &mq, ml, step, (uint64_t)S, t->o.ckpt_dir, err);
            have_meta = true;
        }
        for (int b = 0; b < 3; b++)
            free(bufs[b]), bufs[b] = NULL;
        if (rc < 0)
            return rc;
    }
    /* this rank's own versions after the step (committed before the other
     * ranks' were: the checkpoint that was cut short) are abandoned: the run
     * writes those steps again, and a committed version is never overwritten */
    int dropped = 0;
    if (ftc_persist_drop_newer(t->persist, step, &dropped) < 0)
        return ftc_err_set(err, FTC_EIO, "re-partitioning: %s",
                           ftc_persist_errstr(t->persist));
    if (dropped)
        FTC_INFO("train", "DP rank %d: dropped %d version(s) of %s newer than step %llu (not "
                 "committed by every rank)", t->dpr, dropped, t->rank_dir,
                 (unsigned long long)step);
    FTC_INFO("train", "DP rank %d of %d: restored step %llu from %s, re-partitioned from %d DP "
             "ranks", t->dpr, t->dpn, (unsigned long long)step, t->o.ckpt_dir, S);
    return 0;
}

/* Persist-tier restore of a DP rank: when every rank's newest committed step
 * — every rank of the job, DP x TP: the TP ranks' series are written
 * independently too — is the same and of this DP degree, each loads its own
 * chunk; otherwise (a different saved DP degree, or a checkpoint cut short on
 * some rank) every rank re-partitions from the saved chunks, from the newest
 * step every rank of every TP series committed. Then the parameters are
 * all-gathered. */
static int ftc__shard_persist_restore(ftc_trainer_t *t, ftc_err_t *err)
{
    int rc = ftc__tp_layout_check(t, err);
    if (rc < 0)
        return rc;
    /* every rank's newest step and fast-path verdict, DP x TP of them */
    int world = t->dpn * t->tpn;
    uint64_t *all = calloc(2 * (size_t)world, sizeof *all);
    if (!all)
        return ftc_err_set(err, FTC_ENOMEM, "restore: out of memory");
    rc = ftc__shard_persist_restore_in(t, all, all + world, world, err);
    free(all);
    return rc;
}

/* ftc__shard_persist_restore with all and oks of world (DP x TP) entries. */
static int ftc__shard_persist_restore_in(ftc_trainer_t *t, uint64_t *all, uint64_t *oks,
                                         int world, ftc_err_t *err)
{
    uint64_t mine = 0;
    int rc;
    if ((rc = ftc__newest(t->rank_dir, &mine, err)) < 0)
        return rc;
    if ((rc = ftc__gather_u64_world(t, mine, all, err)) < 0)
        return rc;
    bool same = true, any = false;
    for (int r = 0; r < world; r++)
        same = same && all[r] == mine, any = any || all[r];
    if (!any) {
        /* nothing committed by this degree's ranks: rank-d0 (a rank of every
         * degree) has no version, so no step was committed by every rank of
         * any degree (the restore starts from rank-d0's steps). Directories
         * of ranks beyond this degree (rank-dD, D >= the DP degree: an earlier
         * larger run, one that never committed, a checkpoint cut short) hold
         * nothing restorable: a fresh start, unless the directory holds a
         * whole single-process state (every rank reads the same files: all
         * refuse together) */
        for (int q = t->dpn; q < FTC__MAX_DP && t->dpr == 0; q++) {
            char more[4200];
            uint64_t s = 0;
            ftc_err_t e = {0};
            ftc__rank_dir(t, q, more, sizeof more);
            if (ftc__newest(more, &s, &e) == 0 && s)
                FTC_WARN("train", "%s holds committed versions (newest step %llu) but no rank "
                         "of this run of %d DP ranks has any, rank-d0 neither: no step of it "
                         "can be restored; starting at step 0", more, (unsigned long long)s,
                         t->dpn);
        }
        uint64_t whole = 0;
        if ((rc = ftc__newest(t->o.ckpt_dir, &whole, err)) < 0)
            return rc;
        if (whole)
            return ftc_err_set(err, FTC_ECONFIG,
                               "%s holds a single-process state (step %llu), not ZeRO-1 chunks "
                               "of real DP ranks: this run of %d DP x %d TP ranks would start "
                               "over at step 0; resume it in one process (without --nproc; any "
                               "--dp), or use another --ckpt-dir", t->o.ckpt_dir,
                               (unsigned long long)whole, t->dpn, t->tpn);
        return 0;
    }
    uint64_t ok = 0;
    ftc_err_t e_fast = {0};
    if (same && mine) {
        ftc_persist_loaded_t *l = NULL;
        ftc__train_meta_t meta;
        uint32_t mlen = sizeof meta;
        uint64_t got = 0;
        memset(&meta, 0, sizeof meta);
        if (ftc_persist_load(t->persist, mine, &l) == 0 && l->n_shards == 1 &&
            ftc_snap_restore(t->snap, l->shards[0], l->sizes[0], &got, &meta, &mlen, &e_fast) ==
                0 &&
            mlen == sizeof meta && ftc__meta_dp(&meta) == (uint64_t)t->dpn && got == mine)
            ok = 1;
        ftc_persist_loaded_free(l);
        if ((rc = ftc__gather_u64_world(t, ok, oks, err)) < 0)
            return rc;
        for (int r = 0; r < world; r++)
            ok = ok && oks[r];
        if (ok) {
            if ((rc = ftc__meta_apply(t, &meta, mlen, got, (uint64_t)t->dpn, t->rank_dir, err)) < 0)
                return rc;
            FTC_INFO("train", "DP rank %d: restored step %llu from %s", t->dpr,
                     (unsigned long long)got, t->rank_dir);
            return ftc__gather_params(t, err);
        }
    }
    if ((rc = ftc__repartition(t, err)) < 0)
        return rc;
    return ftc__gather_params(t, err);
}

/* Persist path of a DP rank: ckpt_dir/rank-dD, one chunk per version. */
static int ftc__shard_persist_setup(ftc_trainer_t *t, ftc_err_t *err)
{
    ftc__rank_dir(t, t->dpr, t->rank_dir, sizeof t->rank_dir);
    ftc_shard_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.job_id, sizeof info.job_id, "%s", t->o.job_id ? t->o.job_id : "ftc-train");
    info.generation = 1;
    info.dp = (uint32_t)t->dpn, info.tp = (uint32_t)t->tpn, info.pp = 1;
    info.dp_rank = (uint32_t)t->dpr, info.tp_rank = (uint32_t)t->tpr;
    int dev = t->k->device;
    int rc = ftc__persist_snap(t, &info, &dev, err);
    if (rc < 0)
        return rc;
    const char *names[3];
    float *bufs[3];
    ftc__shard_tensors(t, names, bufs);
    uint64_t shape[1] = {t->shard_len};
    for (int b = 0; b < 3; b++) {
        rc = ftc_snap_add(t->snap, names[b], FTC_DTYPE_F32, 1, shape, bufs[b], dev, err);
        if (rc < 0)
            return rc;
    }
    if ((rc = ftc__persist_region(t, t->rank_dir, err)) < 0)
        return rc;
    return ftc__shard_persist_restore(t, err);
}

ftc_trainer_t *ftc_trainer_create(const ftc_train_options_t *o, ftc_err_t *err)
{
    if (ftc__check_options(o, err) < 0)
        return NULL;
    ftc_trainer_t *t = calloc(1, sizeof *t);
    if (!t) {
        ftc_err_set(err, FTC_ENOMEM, "trainer: out of memory");
        return NULL;
    }
    t->o = *o;
    t->o.optim.total = o->steps;
    t->resumed_from = UINT64_MAX;
    t->guard_last_ck = -1;
    for (int i = 0; i < o->n_skip_steps; i++) /* kept sorted, duplicates dropped */
        ftc__guard_add_skip(t, o->skip_steps[i]);
    int rc = ftc_optim_config_check(&t->o.optim, err);
    if (rc < 0)
        goto fail;
    t->k = ftc_kernels_select(o->backend, err);
    if (!t->k)
        goto fail;
    ftc_stage_init(&t->stage, t->k, ftc_stage_force_env());
    if (t->stage.staged && t->k->device < 0)
        FTC_INFO("train", "%s set: host code and host collectives reach the '%s' backend's "
                 "memory through staging copies, as on a device", FTC_STAGE_FORCE_ENV, t->k->name);
    if ((rc = ftc__check_colls(t, err)) < 0)
        goto fail;
    /* data */
    if (o->data_path && *o->data_path)
        rc = ftc_tokens_load(o->data_path, &t->tokens, err);
    else
        rc = ftc_corpus_generate(o->corpus_seed, (size_t)o->corpus_bytes, &t->tokens, err);
    if (rc < 0)
        goto fail;
    rc = ftc_loader_init(&t->loader, &t->tokens, o->seq_len, o->eval_fraction, o->seed,
                         o->model.vocab, err);
    if (rc < 0)
        goto fail;
    /* model and optimizer */
    t->tpn = o->tp_coll ? ftc_coll_size(o->tp_coll) : 1;
    t->tpr = o->tp_coll ? ftc_coll_rank(o->tp_coll) : 0;
    t->o.tp = t->tpn; /* the layout the agent is told (ftc_create) */
    t->tp_ctx.coll = o->tp_coll;
    t->tp_ctx.timeout_ms = o->coll_timeout_ms;
    t->model = ftc_model_create_tp(&o->model, t->k, o->micro_batch, o->seq_len, o->seed, t->tpr,
                                   t->tpn, t->tpn > 1 ? ftc__tp_allreduce : NULL, t, err);
    if (!t->model)
        goto fail;
    ftc_rng_seed(&t->rng, o->seed);
    t->sharded = o->dp_coll || (o->agent && *o->agent) || t->tpn > 1;
    t->coll = o->dp_coll;
    t->dpn = t->coll ? ftc_coll_size(t->coll) : 1;
    t->dpr = t->coll ? ftc_coll_rank(t->coll) : 0;
    if (t->sharded)
        ftc_coll_chunk(ftc_model_num_params(t->model), t->dpn, t->dpr, &t->shard_off,
                       &t->shard_len);
    else
        t->shard_len = ftc_model_num_params(t->model);
    t->adam = ftc_adamw_create_on(t->k, t->shard_len, err);
    if (!t->adam || ftc__alloc_buffers(t, err) < 0)
        goto fail;
    if (o->deterministic) {
        /* one exact accumulator per virtual rank; one in a real DP rank */
        t->acc = calloc((size_t)o->dp, sizeof *t->acc);
        if (!t->acc) {
            ftc_err_set(err, FTC_ENOMEM, "trainer: out of memory");
            goto fail;
        }
        for (int r = 0; r < o->dp; r++)
            if (!(t->acc[r] = ftc_gradsum_create(ftc_model_num_params(t->model), err)))
                goto fail;
    }
    t->config_hash = ftc__config_hash(t);
    if (t->sharded && o->agent && *o->agent) {
        if (ftc__agent_setup(t, err) < 0)
            goto fail;
    } else if (t->sharded && o->ckpt_dir && *o->ckpt_dir) {
        if (ftc__shard_persist_setup(t, err) < 0)
            goto fail;
    } else if (o->ckpt_dir && *o->ckpt_dir) {
        if (ftc__ckpt_setup(t, err) < 0 || ftc__ckpt_restore(t, err) < 0)
            goto fail;
    }
    return t;
fail:
    ftc_trainer_destroy(t);
    return NULL;
}

void ftc_trainer_interrupt(ftc_trainer_t *t)
{
    if (t && t->ftc)
        ftc_interrupt(t->ftc);
}

void ftc_trainer_destroy(ftc_trainer_t *t)
{
    if (!t)
        return;
    ftc_destroy(t->ftc);
    ftc_persist_close(t->persist);
    ftc_snap_destroy(t->snap);
    free(t->region);
    for (int r = 0; t->acc && r < t->o.dp; r++)
        ftc_gradsum_destroy(t->acc[r]);
    free(t->acc);
    free(t->inputs);
    free(t->targets);
    free(t->micro_loss);
    free(t->tp_flags);
    free(t->gstage);
    if (t->stage.staged && t->k)
        FTC_INFO("train", "DP rank %d: staging: %llu copies through the '%s' backend's memory "
                 "ops, %llu exact sums over fp32 limbs", t->dpr,
                 (unsigned long long)t->stage.copies, t->k->name,
                 (unsigned long long)t->stage.limb_sums);
    ftc_stage_fini(&t->stage);
    ftc_adamw_destroy(t->adam);
    ftc_model_destroy(t->model);
    ftc_tokens_free(&t->tokens);
    free(t);
}

/* Forward and backward of micro-batch i of the current step. */
static void ftc__micro(ftc_trainer_t *t, int i)
{
    uint64_t G = (uint64_t)t->o.micro_steps * (uint64_t)t->o.micro_batch;
    uint64_t first = t->step * G + (uint64_t)i * (uint64_t)t->o.micro_batch;
    ftc_loader_batch(&t->loader, first, t->o.micro_batch, t->inputs, t->targets);
    t->micro_loss[i] = ftc_model_forward(t->model, t->inputs, t->targets);
    ftc_model_backward(t->model);
    ftc__guard_micro(t, i);
}

/* A real DP rank's gradient: its micro-batches (chunk dpr of the M of the
 * step) summed exactly, the reduce-scatter of the i128 sums, its chunk
 * converted once, the fp32 chunks all-gathered; the micro-batch losses too. */
static int ftc__sharded_grads(ftc_trainer_t *t, ftc_err_t *err)
{
    int M = t->o.micro_steps;
    float *grads = ftc_model_grads(t->model);
    float *gh = t->gstage ? t->gstage : grads; /* the host view of the gradients */
    size_t n = ftc_model_num_params(t->model), lo, cnt;
    ftc_coll_chunk((size_t)M, t->dpn, t->dpr, &lo, &cnt);
    ftc_gradsum_zero(t->acc[0]);
    for (size_t i = lo; i < lo + cnt; i++) {
        ftc_model_zero_grad(t->model);
        ftc__micro(t, (int)i);
        if (t->tpn > 1 && ftc_model_status(t->model, NULL) < 0)
            return ftc__tp_fail(t, "forward/backward", err);
        if (t->gstage)
            ftc_stage_to_host(&t->stage, gh, grads, n * sizeof(float));
        int rc = ftc_gradsum_add_f32(t->acc[0], gh, n, err);
        if (rc < 0)
            return ftc_err_wrap(err, "step %llu, micro-batch %zu (DP rank %d)",
                                (unsigned long long)t->step, i, t->dpr);
    }
    if (t->tpn > 1 && t->o.guard != FTC_GUARD_OFF) {
        /* a micro-batch is poisoned when its gradient is not finite on ANY
         * TP rank (the loss is replicated, the gradient slices are not): the
         * guard must decide the same on every TP rank, or one applies the
         * step and the other drops it and the replicated tensors part */
        float *fl = t->tp_flags;
        for (int i = 0; i < M; i++) /* NaN, or -inf for a blow-up (its sum stays -inf) */
            fl[i] = (size_t)i >= lo && (size_t)i < lo + cnt && !isfinite(t->micro_loss[i])
                        ? (t->micro_loss[i] == -INFINITY ? -INFINITY : NAN) : 0.0f;
        int rc = ftc_stage_coll(&t->stage, t->tp_ctx.coll, FTC_STAGE_ALL_REDUCE, fl, (size_t)M,
                                FTC_COLL_F32, 0, FTC_STAGE_MEM_HOST, ftc__coll_dl(t));
        if (rc < 0)
            return ftc_err_set(err, rc, "step %llu: exchanging the guard's verdicts (TP rank %d "
                               "of %d): %s; a peer rank probably died: restart the job",
                               (unsigned long long)t->step, t->tpr, t->tpn,
                               ftc_coll_errmsg(t->tp_ctx.coll));
        for (size_t i = lo; i < lo + cnt; i++)
            if (!isfinite(fl[i]))
                t->micro_loss[i] = fl[i];
    }
    if (t->coll) { /* the exact sums are host memory */
        int rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_REDUCE_SCATTER,
                                ftc_gradsum_words(t->acc[0]), n, FTC_COLL_I128, 0,
                                FTC_STAGE_MEM_HOST, ftc__coll_dl(t));
        if (rc < 0)
            return ftc__coll_fail(t, rc, "reduce-scatter of the exact gradient sums", err);
    }
    ftc_gradsum_to_f32_range(t->acc[0], t->shard_off, t->shard_len, gh + t->shard_off,
                             1.0 / (double)M);
    if (t->gstage) /* this rank's chunk into the backend's gradient buffer */
        ftc_stage_to_backend(&t->stage, grads + t->shard_off, gh + t->shard_off,
                             t->shard_len * sizeof(float));
    if (t->coll) {
        int rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_ALL_GATHER, grads, n, FTC_COLL_F32,
                                0, FTC_STAGE_MEM_BACKEND, ftc__coll_dl(t));
        if (rc == 0) /* every rank's micro-batch losses (host), in micro-batch order */
            rc = ftc_stage_coll(&t->stage, t->coll, FTC_STAGE_ALL_GATHER, t->micro_loss,
                                (size_t)M, FTC_COLL_F32, 0, FTC_STAGE_MEM_HOST, ftc__coll_dl(t));
        if (rc < 0)
            return ftc__coll_fail(t, rc, "all-gather of the gradient", err);
    }
    return 0;
}

/* Once t->step has moved on: the checkpoint of every ckpt_every-th step when
 * checkpoints are on. *ck: whether one was taken; *ck_s: the seconds it took
 * (0 when none was due). */
static int ftc__checkpoint_due(ftc_trainer_t *t, bool *ck, double *ck_s, ftc_err_t *err)
{
    *ck = false;
    *ck_s = 0.0;
    if (!(t->persist || t->ftc) || t->step % t->o.ckpt_every != 0)
        return 0;
    uint64_t c0 = ftc_now_ns();
    int rc = ftc__checkpoint(t, ck, err);
    if (rc < 0)
        return rc;
    *ck_s = (double)(ftc_now_ns() - c0) * 1e-9;
    return 0;
}

int ftc_trainer_step(ftc_trainer_t *t, ftc_train_stats_t *st, ftc_err_t *err)
{
    uint64_t t0 = ftc_now_ns();
    int M = t->o.micro_steps, dp = t->o.dp;
    float *grads = ftc_model_grads(t->model);
    size_t n = ftc_model_num_params(t->model);
    if (ftc__guard_listed(t, t->step)) /* a batch skipped by the list: nothing to compute */
        return ftc__guard_act(t, 0, 0.0, st, t0, err);
    if (!t->o.deterministic) {
        /* fp32: backward accumulates the micro-batches in order */
        ftc_model_zero_grad(t->model);
        for (int i = 0; i < M; i++)
            ftc__micro(t, i);
        if (M > 1)
            t->k->scale(grads, 1.0f / (float)M, n);
    } else if (t->sharded) {
        /* a real DP rank: its micro-batches (chunk dpr of M), summed exactly */
        int rc = ftc__sharded_grads(t, err);
        if (rc < 0)
            return rc;
    } else {
        /* gradient sums on the host: a device backend's gradients go through gstage */
        float *gh = t->gstage ? t->gstage : grads;
        /* virtual rank r owns micro-batches [r*M/dp, (r+1)*M/dp) and sums them exactly */
        for (int r = 0; r < dp; r++) {
            ftc_gradsum_zero(t->acc[r]);
            int lo = (int)((int64_t)r * M / dp), hi = (int)((int64_t)(r + 1) * M / dp);
            for (int i = lo; i < hi; i++) {
                ftc_model_zero_grad(t->model);
                ftc__micro(t, i);
                if (t->gstage)
                    ftc_stage_to_host(&t->stage, gh, grads, n * sizeof(float));
                int rc = ftc_gradsum_add_f32(t->acc[r], gh, n, err);
                if (rc < 0)
                    return ftc_err_wrap(err, "step %llu, micro-batch %d (virtual rank %d)",
                                        (unsigned long long)t->step, i, r);
            }
        }
        /* the all-reduce: rank sums added in a ring order that starts at a
         * different rank each step — any order gives the same integers */
        int root = (int)(t->step % (uint64_t)dp);
        for (int j = 1; j < dp; j++) {
            int rc = ftc_gradsum_add(t->acc[root], t->acc[(root + dp - j) % dp], err);
            if (rc < 0)
                return ftc_err_wrap(err, "step %llu: reducing", (unsigned long long)t->step);
        }
        ftc_gradsum_to_f32(t->acc[root], gh, 1.0 / (double)M);
        if (t->gstage)
            ftc_stage_to_backend(&t->stage, grads, gh, n * sizeof(float));
    }
    double loss = 0.0; /* in micro-batch order, whatever dp */
    for (int i = 0; i < M; i++)
        loss += t->micro_loss[i];
    int bad = ftc__guard_check(t, loss / M, grads, n); /* before anything is written */
    if (bad)
        return ftc__guard_act(t, bad, loss / M, st, t0, err);
    float norm, lr;
    if (!t->sharded) {
        ftc_adamw_step(t->adam, t->model, &t->o.optim, ftc__guard_upd(t), &norm, &lr);
    } else {
        /* ZeRO-1: the norm over the whole (gathered) gradient, as one process
         * sums it (with TP: the TP-global norm, model.h); the update of this
         * rank's chunk; the chunks to everyone */
        double gn = 0.0;
        if (ftc_model_grad_norm(t->model, &gn) < 0)
            return ftc__tp_fail(t, "the gradient norm", err);
        norm = (float)gn;
        if (t->ftc) {
            int rc = ftc_wait_snapshot(t->ftc); /* the chunk is registered */
            char why[512];
            if (rc < 0 && ftc__agent_fatal(t, rc))
                return ftc_err_set(err, rc, "step %llu: waiting for the snapshot: %s",
                                   (unsigned long long)t->step,
                                   ftc__agent_errstr(t, rc, why, sizeof why));
            if (rc < 0) /* the copy is over: the chunk may be written */
                FTC_WARN("train", "step %llu: %s: training goes on, the previous committed "
                         "checkpoint stays", (unsigned long long)t->step,
                         ftc_last_error(t->ftc));
        }
        ftc_adamw_step_shard(t->adam, t->model, &t->o.optim, ftc__guard_upd(t), gn, t->shard_off,
                             &lr);
        int rc = ftc__gather_params(t, err);
        if (rc < 0)
            return rc;
    }
    uint64_t done = t->step;
    t->step++;
    bool ck;
    double ck_s;
    int rc = ftc__checkpoint_due(t, &ck, &ck_s, err);
    if (rc < 0)
        return rc;
    if (st) {
        st->step = done;
        st->loss = (float)(loss / M);
        st->grad_norm = norm;
        st->lr = lr;
        st->tokens = (uint64_t)M * (uint64_t)t->o.micro_batch * (uint64_t)t->o.seq_len;
        st->seconds = (double)(ftc_now_ns() - t0) * 1e-9;
        st->checkpointed = ck;
        st->ckpt_seconds = ck_s;
        st->skipped = false;
        st->guard = NULL;
        st->rolled_back_to = UINT64_MAX;
    }
    return 0;
}

float ftc_trainer_eval(ftc_trainer_t *t, int batches)
{
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        ftc_loader_eval_batch(&t->loader, (uint64_t)i * (uint64_t)t->o.micro_batch,
                              t->o.micro_batch, t->inputs, t->targets);
        sum += ftc_model_forward(t->model, t->inputs, t->targets);
    }
    return batches > 0 ? (float)(sum / batches) : 0.0f;
}

int ftc_trainer_checkpoint(ftc_trainer_t *t, bool *taken, ftc_err_t *err)
{
    bool tk;
    int rc = ftc__checkpoint(t, &tk, err);
    if (taken)
        *taken = tk;
    return rc;
}

/* ftc_trainer_checkpoint; *taken: false when the agent's policy skipped the
 * step or its snapshot failed (a warning), true when it was persisted or
 * its snapshot started through the agent */
static int ftc__checkpoint(ftc_trainer_t *t, bool *taken, ftc_err_t *err)
{
    *taken = false;
    ftc__train_meta_t meta;
    ftc__meta_fill(t, &meta);
    if (t->ftc) {
        /* device tensors: the agent's copy stream does not wait for the kernels */
        t->k->sync();
        /* returns once the copy has started; the next update waits for it */
        int rc = ftc_checkpoint(t->ftc, (int64_t)t->step, &meta, sizeof meta);
        if (rc == FTC_EAGAIN)
            return 0; /* the agent's policy skipped this step */
        char why[512];
        if (rc < 0 && ftc__agent_fatal(t, rc))
            return ftc_err_set(err, rc, "checkpoint of step %llu through the agent: %s",
                               (unsigned long long)t->step,
                               ftc__agent_errstr(t, rc, why, sizeof why));
        if (rc < 0) { /* a failed snapshot (this one's or the previous one's) */
            FTC_WARN("train", "checkpoint of step %llu through the agent: %s: training goes "
                     "on, the previous committed checkpoint stays",
                     (unsigned long long)t->step, ftc_last_error(t->ftc));
            return 0;
        }
        t->guard_last_ck = (int64_t)t->step; /* a rollback waits for its commit */
        *taken = true;
        return 0;
    }
    if (!t->persist)
        return ftc_err_set(err, FTC_EINVAL, "checkpoint: no checkpoint directory configured");
    t->k->sync(); /* device tensors: the snapshot's side stream does not wait for the kernels */
    int rc = ftc_snap_begin(t->snap, t->region, t->step, 1, &meta, sizeof meta, err);
    if (rc < 0)
        return rc;
    /* the next optimizer update may write the tensors after wait_copy; the
     * persist tier needs the sealed region. Both within coll_timeout_ms:
     * the peers wait for this rank in the next collective no longer (it was
     * a fixed 10 min each, and a hung device copy held the rank that long) */
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)t->o.coll_timeout_ms);
    rc = ftc_snap_wait_copy(t->snap, d, err);
    if (rc == 0)
        rc = ftc_snap_wait_sealed(t->snap, d, err);
    if (rc < 0)
        return ftc_err_wrap(err, "checkpoint of step %llu (its snapshot within the collective "
                            "timeout, %d ms)", (unsigned long long)t->step,
                            t->o.coll_timeout_ms);
    const void *shards[1] = {t->region};
    uint64_t sizes[1] = {t->region_size};
    rc = ftc_persist_write(t->persist, t->step, shards, sizes, 1);
    if (rc < 0)
        return ftc_err_set(err, rc, "checkpoint of step %llu: %s", (unsigned long long)t->step,
                           ftc_persist_errstr(t->persist));
    *taken = true;
    return 0;
}

uint64_t ftc_trainer_steps_done(const ftc_trainer_t *t) { return t->step; }
uint64_t ftc_trainer_resumed_from(const ftc_trainer_t *t) { return t->resumed_from; }
ftc_model_t *ftc_trainer_model(ftc_trainer_t *t) { return t->model; }
const ftc_adamw_t *ftc_trainer_adamw(const ftc_trainer_t *t) { return t->adam; }
const ftc_loader_t *ftc_trainer_loader(const ftc_trainer_t *t) { return &t->loader; }
const char *ftc_trainer_backend(const ftc_trainer_t *t) { return t->k->name; }

uint64_t ftc_trainer_params_hash(ftc_trainer_t *t)
{
    size_t bytes = ftc_model_num_params(t->model) * sizeof(float);
    const void *h = ftc_stage_host(&t->stage, ftc_model_params(t->model), bytes);
    return h ? ftc_xxh3(h, bytes) : 0; /* 0: no host memory for the copy */
}

int ftc_trainer_full_params(ftc_trainer_t *t, uint64_t *hash, float *full, ftc_err_t *err)
{
    ftc_model_t *m = t->model;
    size_t n = ftc_model_num_params(m), P = ftc_model_param_count(&t->o.model);
    size_t nt = (size_t)t->tpn;
    /* every TP rank's slice, rank r's at r*n (equal slices: ftc_coll_chunk's
     * chunks of n*tp over tp ranks), then the full tensors in rank order */
    float *all = malloc(n * nt * sizeof(float));
    float *whole = nt > 1 ? malloc(P * sizeof(float)) : all;
    int rc = 0;
    if (!all || !whole) {
        rc = ftc_err_set(err, FTC_ENOMEM, "gathering the %zu parameters: out of memory", P);
        goto out;
    }
    ftc_stage_to_host(&t->stage, all + (size_t)t->tpr * n, ftc_model_params(m), n * sizeof(float));
    if (nt > 1) { /* a host buffer (staged into device memory for NCCL) */
        rc = ftc_stage_coll(&t->stage, t->o.tp_coll, FTC_STAGE_ALL_GATHER, all, n * nt,
                            FTC_COLL_F32, 0, FTC_STAGE_MEM_HOST, ftc__coll_dl(t));
        if (rc < 0) {
            rc = ftc_err_set(err, rc, "all-gather of the TP slices (TP rank %d of %d): %s", t->tpr,
                             t->tpn, ftc_coll_errmsg(t->o.tp_coll));
            goto out;
        }
        ftc_model_tensor_t ft[FTC_MODEL_NTENSORS];
        ftc_model_tensors_of(&t->o.model, 1, ft, NULL);
        const ftc_model_tensor_t *lt = ftc_model_tensors(m);
        for (int r = 0; r < t->tpn && rc == 0; r++) {
            const float *slice = all + (size_t)r * n;
            for (int i = 0; i < FTC_MODEL_NTENSORS && rc == 0; i++) {
                ftc_model_tp_split_t sp;
                ftc_model_tp_split(&t->o.model, r, t->tpn, i, &sp, NULL); /* valid at create */
                if (sp.replicated && r > 0 &&
                    memcmp(whole + ft[i].offset, slice + lt[i].offset, ft[i].numel * 4))
                    rc = ftc_err_set(err, FTC_ECORRUPT, "replicated tensor %s differs between "
                                     "TP ranks 0 and %d (it must stay bit-identical)", lt[i].name,
                                     r);
                else
                    ftc_model_tp_to_full(&sp, slice + lt[i].offset, whole + ft[i].offset);
            }
        }
        if (rc < 0)
            goto out;
    }
    if (hash)
        *hash = ftc_xxh3(whole, P * sizeof(float));
    if (full)
        memcpy(full, whole, P * sizeof(float));
out:
    if (whole != all)
        free(whole);
    free(all);
    return rc;
}

/* ---- the numerical guard (train.h "Numerical guard") ------------------------ */

static int ftc__guard_check_options(const ftc_train_options_t *o, ftc_err_t *err)
{
    if (o->guard != FTC_GUARD_OFF && o->guard != FTC_GUARD_SKIP && o->guard != FTC_GUARD_ROLLBACK)
        return ftc_err_set(err, FTC_EINVAL, "guard mode %d: must be skip, rollback or off",
                           o->guard);
    if (!(o->guard_spike_sigma >= 0.0) || !isfinite(o->guard_spike_sigma))
        return ftc_err_set(err, FTC_EINVAL, "guard spike sigma %g: must be >= 0 (0 = off)",
                           o->guard_spike_sigma);
    if (o->guard_window < 2 || o->guard_window > FTC_GUARD_WINDOW_MAX)
        return ftc_err_set(err, FTC_EINVAL, "guard window %d: must be 2..%d losses",
                           o->guard_window, FTC_GUARD_WINDOW_MAX);
    if (o->n_skip_steps < 0 || o->n_skip_steps > FTC_GUARD_MAX_SKIPS ||
        (o->n_skip_steps > 0 && !o->skip_steps))
        return ftc_err_set(err, FTC_EINVAL, "%d skipped steps: at most %d", o->n_skip_steps,
                           FTC_GUARD_MAX_SKIPS);
    int tps = o->tp_coll ? ftc_coll_size(o->tp_coll) : 1;
    if (o->inject_tp_rank < -1 || o->inject_tp_rank >= tps)
        return ftc_err_set(err, FTC_EINVAL, "inject TP rank %d: must be -1 (all) or 0..%d",
                           o->inject_tp_rank, tps - 1);
    int ranks = o->dp_coll ? ftc_coll_size(o->dp_coll) : o->dp;
    if ((o->inject_nan_step >= 0 || o->inject_spike_step >= 0) &&
        (o->inject_rank < 0 || o->inject_rank >= ranks))
        return ftc_err_set(err, FTC_EINVAL, "inject rank %d: must be 0..%d (the DP ranks)",
                           o->inject_rank, ranks - 1);
    return 0;
}

/* Inserts step into the sorted list; false when it is full. */
static bool ftc__guard_add_skip(ftc_trainer_t *t, uint64_t step)
{
    int i = 0;
    while (i < t->nskips && t->skips[i] < step)
        i++;
    if (i < t->nskips && t->skips[i] == step)
        return true;
    if (t->nskips == FTC_GUARD_MAX_SKIPS)
        return false;
    memmove(&t->skips[i + 1], &t->skips[i], (size_t)(t->nskips - i) * sizeof t->skips[0]);
    t->skips[i] = step;
    t->nskips++;
    return true;
}

/* Whether a restored record lists step s as skipped. */
static bool ftc__meta_skipped(const ftc__train_meta_t *meta, uint64_t s)
{
    for (uint32_t i = 0; i < meta->n_skips; i++)
        if (meta->skips[i] == s)
            return true;
    return false;
}

/* A restored record's guard state: its skips joined with the ones this run
 * knows (the up-front list; a rollback's too), and its spike window (the
 * newest guard_window losses of it). A known skip before the record's step
 * that the record does not list (the up-front list changed between runs)
 * was applied: it is dropped with a warning, as counting it would move the
 * learning rate and the bias correction of every later step. */
static int ftc__guard_from_meta(ftc_trainer_t *t, const ftc__train_meta_t *meta,
                                const char *where, ftc_err_t *err)
{
    if (meta->n_skips > FTC_GUARD_MAX_SKIPS || meta->n_loss > FTC_GUARD_WINDOW_MAX)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: step %llu: guard record with %u skipped steps "
                           "and %u losses (at most %d and %d)", where,
                           (unsigned long long)meta->step, meta->n_skips, meta->n_loss,
                           FTC_GUARD_MAX_SKIPS, FTC_GUARD_WINDOW_MAX);
    int kept = 0;
    for (int i = 0; i < t->nskips; i++) {
        uint64_t s = t->skips[i];
        if (s < meta->step && !ftc__meta_skipped(meta, s)) {
            FTC_WARN("train", "%s: step %llu: the skip list names step %llu, which this "
                     "checkpoint applied (its update is in the weights): not skipped; restore "
                     "a checkpoint before it to skip that batch", where,
                     (unsigned long long)meta->step, (unsigned long long)s);
            continue;
        }
        t->skips[kept++] = s;
    }
    t->nskips = kept;
    for (uint32_t i = 0; i < meta->n_skips; i++)
        if (!ftc__guard_add_skip(t, meta->skips[i]))
            return ftc_err_set(err, FTC_ERANGE, "%s: step %llu: more than %d skipped steps in "
                               "the checkpoint and the --skip-steps list together", where,
                               (unsigned long long)meta->step, FTC_GUARD_MAX_SKIPS);
    int keep = (int)meta->n_loss < t->o.guard_window ? (int)meta->n_loss : t->o.guard_window;
    memcpy(t->win, meta->loss + (meta->n_loss - (uint32_t)keep), (size_t)keep * sizeof t->win[0]);
    t->nwin = keep;
    return 0;
}

static bool ftc__guard_listed(const ftc_trainer_t *t, uint64_t step)
{
    for (int i = 0; i < t->nskips && t->skips[i] <= step; i++)
        if (t->skips[i] == step)
            return true;
    return false;
}

/* The update index of the current step: the learning rate and AdamW's bias
 * correction count applied updates only (steps minus the skips before it). */
static uint64_t ftc__guard_upd(const ftc_trainer_t *t)
{
    uint64_t u = t->step;
    for (int i = 0; i < t->nskips && t->skips[i] < t->step; i++)
        u--;
    return u;
}

/* The first micro-batch of (virtual or real) DP rank r in the step. */
static int ftc__guard_first_micro(const ftc_trainer_t *t, int r)
{
    int M = t->o.micro_steps;
    if (t->sharded) {
        size_t lo, cnt;
        ftc_coll_chunk((size_t)M, t->dpn, r, &lo, &cnt);
        return (int)lo;
    }
    return (int)((int64_t)r * M / t->o.dp);
}

/* The DP rank that computes micro-batch i. */
static int ftc__guard_owner(const ftc_trainer_t *t, int i)
{
    int ranks = t->sharded ? t->dpn : t->o.dp, r = 0;
    while (r + 1 < ranks && ftc__guard_first_micro(t, r + 1) <= i)
        r++;
    return r;
}

/* The squared L2 norm a micro-batch gradient must stay below: in
 * deterministic mode the exact sums' range (gradsum.h: every element below
 * 2^30, every sum below 2^31), as a norm below min(2^30, 2^31/M) keeps every
 * element of each of the M micro-batches below that, so their sums stay in
 * range in any grouping and order (every DP layout decides the same); a
 * gradient that reaches it is a blow-up, poisoned like a NaN (it was
 * FTC_ERANGE, the end of the run). Otherwise only a finite one is needed. */
static double ftc__guard_limit2(const ftc_trainer_t *t)
{
    if (!t->o.deterministic)
        return INFINITY;
    double lim = 0x1p31 / (double)(t->o.micro_steps > 1 ? t->o.micro_steps : 2);
    return lim * lim;
}

/* After the backward of micro-batch i: the test faults, then the check. A
 * poisoned micro-batch keeps a NaN loss (which travels to every DP rank with
 * the all-gathered micro-batch losses) and a zero gradient (so the exact sums
 * and the collectives run as usual; the step is dropped anyway). */
static void ftc__guard_micro(ftc_trainer_t *t, int i)
{
    int64_t s = (int64_t)t->step;
    bool mine = i == ftc__guard_first_micro(t, t->o.inject_rank);
    float *g = ftc_model_grads(t->model);
    if (mine && s == t->o.inject_nan_step &&
        (t->o.inject_tp_rank < 0 || t->o.inject_tp_rank == t->tpr)) {
        if (t->o.inject_tp_rank < 0)
            t->micro_loss[i] = NAN;
        t->k->scale(g, NAN, 1); /* one element of the gradient: g[0] = NaN */
    }
    if (mine && s == t->o.inject_spike_step)
        t->micro_loss[i] *= 100.0f;
    if (t->o.guard == FTC_GUARD_OFF)
        return;
    double ss = t->k->sumsq(g, ftc_model_num_params(t->model)), lim2 = ftc__guard_limit2(t);
    if (isfinite(ss) && !(ss < lim2)) /* the owner says why; every rank sees a NaN */
        FTC_WARN("train", "DP rank %d: step %llu: the gradient of micro-batch %d has norm %.6g, "
                 "beyond the exact sums' range (%.6g for %d micro-batches per step): a "
                 "blow-up, dropped like a NaN", t->dpr, (unsigned long long)s, i, sqrt(ss),
                 sqrt(lim2), t->o.micro_steps);
    if (!isfinite(t->micro_loss[i]) || !(ss < lim2)) {
        /* -inf marks a blow-up of a finite loss (a cross-entropy is never
         * below 0): it reaches every DP rank with the micro-batch losses,
         * so that the event names what happened */
        t->micro_loss[i] = isfinite(t->micro_loss[i]) && isfinite(ss) ? -INFINITY : NAN;
        ftc_model_zero_grad(t->model);
    }
}

/* An applied step's loss into the spike window (the oldest leaves a full one). */
static void ftc__guard_window_push(ftc_trainer_t *t, double loss)
{
    int w = t->o.guard_window;
    if (t->nwin == w) {
        memmove(t->win, t->win + 1, (size_t)(w - 1) * sizeof t->win[0]);
        t->nwin--;
    }
    t->win[t->nwin++] = (float)loss;
}

/* 0 (fine: the loss joins the spike window), 1 (not finite) or 2 (spike).
 * Every input is identical on every DP rank, so is the answer. */
static int ftc__guard_check(ftc_trainer_t *t, double loss, const float *grads, size_t n)
{
    int w = t->o.guard_window;
    if (t->o.guard == FTC_GUARD_OFF) {
        /* no check, but the window stays the last applied losses: it is
         * training state, and a run resumed with the guard on judges by it */
        if (isfinite(loss))
            ftc__guard_window_push(t, loss);
        return 0;
    }
    if (!isfinite(loss))
        return 1;
    /* fp32 accumulation may overflow in the sum; exact sums are range-checked */
    if (!t->o.deterministic && !isfinite(t->k->sumsq(grads, n)))
        return 1;
    if (t->o.guard_spike_sigma > 0 && t->nwin == w) {
        double mean = 0, var = 0; /* in window order: the same on every rank and restart */
        for (int i = 0; i < w; i++)
            mean += t->win[i];
        mean /= w;
        for (int i = 0; i < w; i++)
            var += (t->win[i] - mean) * (t->win[i] - mean);
        double sd = sqrt(var / (w - 1));
        if (sd > 0 && loss > mean + t->o.guard_spike_sigma * sd)
            return 2;
    }
    ftc__guard_window_push(t, loss);
    return 0;
}

/* Restores the newest committed version for a rollback; *back is its step,
 * or UINT64_MAX when there is none (the batch is then skipped in place). */
static int ftc__guard_rollback(ftc_trainer_t *t, uint64_t *back, ftc_err_t *err)
{
    *back = UINT64_MAX;
    uint64_t was = t->resumed_from;
    t->resumed_from = UINT64_MAX;
    int rc = 0;
    if (t->ftc) {
        char why[512];
        if ((rc = ftc_wait_snapshot(t->ftc)) < 0 && ftc__agent_fatal(t, rc))
            return ftc_err_set(err, rc, "rollback: waiting for the snapshot: %s",
                               ftc__agent_errstr(t, rc, why, sizeof why));
        if (rc < 0) /* a failed snapshot: the rollback restores a committed one anyway */
            FTC_WARN("train", "rollback: %s", ftc_last_error(t->ftc));
        rc = 0;
        /* the last checkpoint committed first, so that every rank restores the same step */
        if (t->guard_last_ck >= 0 && ftc_wait_committed(t->ftc, t->guard_last_ck) < 0)
            FTC_WARN("train", "rollback: step %lld not committed (%s); restoring the newest "
                     "committed one", (long long)t->guard_last_ck, ftc_last_error(t->ftc));
        /* the newest committed version's chunks, fetched by the ranks of ITS
         * layout (DP rank 0 reads the step and the degree, every rank
         * agrees): not ftc_restore, which follows FTC_RESTORE_RANK, the
         * previous rank this one continued at its start, and so after a
         * renumbering would hand this rank another rank's chunk of this
         * generation's checkpoints */
        bool fresh = false, missing = false;
        uint64_t used = 0;
        rc = ftc__agent_repartition(t, -1, &fresh, &missing, &used, err);
        if (rc == 0 && !fresh)
            rc = ftc__gather_params(t, err);
    } else if (t->persist && t->sharded) {
        rc = ftc__shard_persist_restore(t, err);
    } else if (t->persist) {
        rc = ftc__ckpt_restore(t, err);
    }
    if (rc < 0)
        return ftc_err_wrap(err, "rollback at step %llu", (unsigned long long)t->step);
    *back = t->resumed_from;
    t->resumed_from = was;
    return 0;
}

/* A skipped step: kind 0 = on the list, 1 = not finite, 2 = spike (1 is
 * reported as 3 = grad_blowup when the micro-batch that made the step's
 * loss not finite had a finite gradient beyond the exact sums' range). Records
 * the skip (after a rollback when asked), reports the event, moves on and
 * checkpoints when due, as a step does. */
static int ftc__guard_act(ftc_trainer_t *t, int kind, double loss, ftc_train_stats_t *st,
                          uint64_t t0, ftc_err_t *err)
{
    static const char *const kinds[4] = {"listed", "nan", "loss_spike", "grad_blowup"};
    uint64_t k = t->step, back = UINT64_MAX;
    if (kind && !ftc__guard_listed(t, k) && t->nskips == FTC_GUARD_MAX_SKIPS)
        return ftc_err_set(err, FTC_ERANGE, "step %llu: %s, but %d steps were skipped already: "
                           "the run is diverging (lower --lr, raise --warmup, check the data) or "
                           "use --guard off", (unsigned long long)k,
                           kind == 2 ? "loss spike" : "loss or gradient not finite",
                           FTC_GUARD_MAX_SKIPS);
    char what[200] = "", action[160];
    if (kind == 1) {
        int i = 0;
        while (i < t->o.micro_steps && isfinite(t->micro_loss[i]))
            i++;
        if (i < t->o.micro_steps && t->micro_loss[i] == -INFINITY) {
            kind = 3;
            snprintf(what, sizeof what, "the gradient of micro-batch %d (DP rank %d) at step "
                     "%llu blew up (finite, beyond the exact sums' range)", i,
                     ftc__guard_owner(t, i), (unsigned long long)k);
        } else if (i < t->o.micro_steps)
            snprintf(what, sizeof what, "loss or gradient not finite in micro-batch %d (DP rank "
                     "%d) at step %llu", i, ftc__guard_owner(t, i), (unsigned long long)k);
        else
            snprintf(what, sizeof what, "gradient not finite at step %llu (loss %.6g)",
                     (unsigned long long)k, loss);
    } else if (kind == 2) {
        double mean = 0;
        for (int i = 0; i < t->nwin; i++)
            mean += t->win[i];
        snprintf(what, sizeof what, "loss %.6g at step %llu is more than %g sd above the mean "
                 "%.6g of the last %d", loss, (unsigned long long)k, t->o.guard_spike_sigma,
                 t->nwin ? mean / t->nwin : 0.0, t->nwin);
    }
    if (kind && t->o.guard == FTC_GUARD_ROLLBACK) {
        uint64_t keep[FTC_GUARD_MAX_SKIPS];
        int nkeep = t->nskips;
        memcpy(keep, t->skips, sizeof keep);
        int rc = ftc__guard_rollback(t, &back, err);
        if (rc < 0)
            return rc;
        for (int i = 0; i < nkeep; i++) /* the restored list is a prefix of what we knew */
            ftc__guard_add_skip(t, keep[i]);
    }
    ftc__guard_add_skip(t, k); /* room was checked above */
    if (back != UINT64_MAX)
        snprintf(action, sizeof action, "rollback to step %llu, batch %llu skipped",
                 (unsigned long long)back, (unsigned long long)k);
    else
        snprintf(action, sizeof action, "batch %llu skipped%s", (unsigned long long)k,
                 kind && t->o.guard == FTC_GUARD_ROLLBACK
                     ? " (no committed version to roll back to)" : "");
    if (kind) {
        FTC_WARN("train", "DP rank %d: guard: %s: %s", t->dpr, what, action);
        if (t->ftc && t->o.world_rank == 0) { /* one report per event, from world rank 0 */
            char detail[380];
            snprintf(detail, sizeof detail, "%s: %s", what, action);
            int rc = ftc_report(t->ftc, kinds[kind], (int64_t)k, loss, detail);
            if (rc < 0)
                FTC_WARN("train", "guard: reporting the event to the agent: %s",
                         ftc_last_error(t->ftc));
        }
    }
    bool ck = false;
    double ck_s = 0.0;
    if (back == UINT64_MAX) {
        t->step++;
        int rc = ftc__checkpoint_due(t, &ck, &ck_s, err);
        if (rc < 0)
            return rc;
    }
    if (st) {
        st->step = k;
        st->loss = (float)loss;
        st->grad_norm = 0.0f;
        st->lr = ftc_optim_lr(&t->o.optim, ftc__guard_upd(t));
        st->tokens = 0;
        st->seconds = (double)(ftc_now_ns() - t0) * 1e-9;
        st->checkpointed = ck;
        st->ckpt_seconds = ck_s;
        st->skipped = true;
        st->guard = kinds[kind];
        st->rolled_back_to = back;
    }
    return 0;
}

int ftc_trainer_skips(const ftc_trainer_t *t, const uint64_t **steps)
{
    *steps = t->skips;
    return t->nskips;
}

int ftc_guard_parse_mode(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "skip"))
        return FTC_GUARD_SKIP;
    if (!strcmp(s, "rollback"))
        return FTC_GUARD_ROLLBACK;
    if (!strcmp(s, "off"))
        return FTC_GUARD_OFF;
    return -1;
}

int ftc_guard_parse_steps(const char *s, uint64_t *out, int max, int *n, ftc_err_t *err)
{
    *n = 0;
    const char *p = s ? s : "";
    while (*p) {
        char *end = NULL;
        if (*p < '0' || *p > '9')
            return ftc_err_set(err, FTC_EINVAL, "skip list '%s': '%s' is not a step index", s, p);
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno == ERANGE)
            return ftc_err_set(err, FTC_EINVAL, "skip list '%s': '%.*s' is out of range", s,
                               (int)(end - p), p);
        if (end == p || (*end && *end != ','))
            return ftc_err_set(err, FTC_EINVAL, "skip list '%s': expected step indices separated "
                               "by commas", s);
        if (*n == max)
            return ftc_err_set(err, FTC_EINVAL, "skip list '%s': more than %d steps", s, max);
        out[(*n)++] = (uint64_t)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return ftc_err_set(err, FTC_EINVAL, "skip list '%s': it ends with a comma (an empty "
                               "entry); give step indices separated by commas, e.g. 5,9", s);
    }
    return 0;
}
