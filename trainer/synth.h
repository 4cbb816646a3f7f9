/*
 * synth.h — a synthetic training state with the statistics of a real one.
 *
 * Until the reference trainer lands, the demo, bench/persist and the persist
 * tests need state that compresses like a transformer's: weights ~ N(0, 0.02),
 * AdamW first moments ~ N(0, 1e-3) and second moments ~ (1e-3 x N(0,1))^2,
 * an RNG state and a data cursor as metadata. ftc_synth_step() applies one
 * AdamW-like update with a fresh gradient (lr 1e-4 by default), so that
 * consecutive versions differ the way consecutive training steps do.
 *
 * The state lives directly in a sealed shard region. Deterministic for a
 * given seed. Not thread-safe per handle.
 */
#ifndef FTC_TRAINER_SYNTH_H
#define FTC_TRAINER_SYNTH_H

#include "ckpt/shard.h"
#include "core/err.h"

#include <stdint.h>

typedef struct ftc_synth_options {
    uint64_t bytes;  /* approximate shard size wanted (>= 4 KiB) */
    int dtype;       /* FTC_DTYPE_F32 or FTC_DTYPE_BF16: weights and moments */
    uint64_t seed;   /* RNG seed; equal seeds give equal states */
    double lr;       /* update size of ftc_synth_step (default 1e-4) */
    int layers;      /* transformer blocks to name tensors after (default 4) */
} ftc_synth_options_t;

#define FTC_SYNTH_OPTIONS_INIT {1u << 20, FTC_DTYPE_F32, 1, 1e-4, 4}

typedef struct ftc_synth ftc_synth_t;

/* Builds the layout and the initial state (step 0, sealed). info gives the
 * identity (job, layout); its step is ignored. NULL with err set on failure. */
ftc_synth_t *ftc_synth_create(const ftc_synth_options_t *o, const ftc_shard_info_t *info,
                              ftc_err_t *err);
void ftc_synth_destroy(ftc_synth_t *s); /* NULL is a no-op */
/* One optimizer-like update; the region is restamped with step and sealed. */
int ftc_synth_step(ftc_synth_t *s, uint64_t step, ftc_err_t *err);
/* The sealed shard region and its size (owned by s). */
const uint8_t *ftc_synth_region(const ftc_synth_t *s);
uint64_t ftc_synth_size(const ftc_synth_t *s);
/* Mutable access, for tests that corrupt or compare state. */
uint8_t *ftc_synth_region_mut(ftc_synth_t *s);

#endif
