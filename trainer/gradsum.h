/*
 * gradsum.h — exact, order-independent gradient accumulation (the
 * deterministic mode; ARCHITECTURE.md "Determinism (what I5 needs)").
 *
 * Floating-point addition is not associative, so summing micro-batch
 * gradients in an order that depends on the data-parallel layout changes the
 * weights. Here each fp32 gradient element is converted to a 128-bit two's
 * complement fixed-point integer with FTC_GRADSUM_FRAC_BITS fraction bits;
 * integers add exactly and associatively, so any grouping and any order of
 * the micro-batches — one rank summing twelve, four ranks summing three each
 * and a ring adding the four partial sums in any order — gives the same
 * integers, which are converted back to fp32 once.
 *
 * Range and precision (FRAC_BITS = 96):
 *   - a gradient element must be finite with |g| < 2^30 (~1.07e9); others
 *     are refused with FTC_ERANGE naming the element (a blow-up, not data);
 *   - conversion is exact for |g| >= 2^-73 (~1.06e-22): every fp32 of that
 *     size is a multiple of 2^-96; smaller ones round to the nearest multiple
 *     of 2^-96 (~1.3e-29), an absolute error of at most 6.3e-30;
 *   - a running sum must stay below 2^31 (~2.1e9) in magnitude: every
 *     addition is checked and an overflow is FTC_ERANGE, never a wrap;
 *   - the sum is therefore the exact real sum of the fp32 inputs (up to the
 *     rounding of elements below 2^-73), and converting back rounds once
 *     (to double, then after the 1/M scale to fp32): the result is a pure
 *     function of the multiset of micro-batch gradients.
 *
 * On the wire (the collectives, later) an element is two little-endian
 * 64-bit words, low word first; adding two elements is a 128-bit add with
 * carry, which the CPU and NCCL reductions can both do in any order.
 * Memory: 16 bytes per parameter per accumulator.
 *
 * Thread-safety: an accumulator is driven by one thread at a time.
 */
#ifndef FTC_TRAINER_GRADSUM_H
#define FTC_TRAINER_GRADSUM_H

#include "core/err.h"

#include <stddef.h>
#include <stdint.h>

#define FTC_GRADSUM_FRAC_BITS 96
#define FTC_GRADSUM_MAX_ELEM 0x1p30 /* |g| must be below this */

typedef struct ftc_gradsum ftc_gradsum_t;

/* An accumulator of n elements, all zero. NULL with err on out of memory. */
ftc_gradsum_t *ftc_gradsum_create(size_t n, ftc_err_t *err);
void ftc_gradsum_destroy(ftc_gradsum_t *g); /* NULL is a no-op */
size_t ftc_gradsum_len(const ftc_gradsum_t *g);
void ftc_gradsum_zero(ftc_gradsum_t *g);

/* acc += fixed(grad[0..n)); n must equal the accumulator's length. On
 * FTC_ERANGE (non-finite or too large element, or an overflowing sum) the
 * accumulator is left partly updated: the step must be abandoned. */
int ftc_gradsum_add_f32(ftc_gradsum_t *acc, const float *grad, size_t n, ftc_err_t *err);
/* acc += other (the all-reduce's operation). FTC_ERANGE on overflow. */
int ftc_gradsum_add(ftc_gradsum_t *acc, const ftc_gradsum_t *other, ftc_err_t *err);
/* out[i] = (float)(acc[i] * 2^-FRAC_BITS * scale), rounding to nearest. */
void ftc_gradsum_to_f32(const ftc_gradsum_t *acc, float *out, double scale);

/* The same for elements [off, off+len) only: out[i] = element off+i (the
 * own chunk after a reduce-scatter). off+len must not pass the length. */
void ftc_gradsum_to_f32_range(const ftc_gradsum_t *acc, size_t off, size_t len, float *out,
                              double scale);

/* The raw words (2 per element, low then high), for the collectives. */
uint64_t *ftc_gradsum_words(ftc_gradsum_t *g);

#endif
