/*
 * rng.h — the trainer's random numbers: a small counter-free generator whose
 * whole state is one struct (checkpointed with the model), and a stateless
 * mixer for values that must be pure functions of an index (data positions).
 * Deterministic across machines: integer arithmetic only, and the normal
 * deviates use libm's log/cos/sqrt in double.
 */
#ifndef FTC_TRAINER_RNG_H
#define FTC_TRAINER_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct ftc_rng {
    uint64_t state; /* splitmix64 counter; the whole state */
} ftc_rng_t;

/* splitmix64's finalizer: a bijective mix of 64 bits (stateless). */
static inline uint64_t ftc_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void ftc_rng_seed(ftc_rng_t *r, uint64_t seed)
{
    r->state = ftc_mix64(seed ^ 0x6a09e667f3bcc909ull);
}

static inline uint64_t ftc_rng_u64(ftc_rng_t *r)
{
    r->state += 0x9e3779b97f4a7c15ull;
    return ftc_mix64(r->state);
}

/* Uniform in [0, 1) with 53 bits. */
static inline double ftc_rng_uniform(ftc_rng_t *r)
{
    return (double)(ftc_rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n >= 1 (Lemire's multiply; the tiny bias of
 * skipping the rejection step does not matter here). */
static inline uint64_t ftc_rng_below(ftc_rng_t *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)ftc_rng_u64(r) * n) >> 64);
}

/* A standard normal deviate (Box-Muller, one of the pair). */
static inline double ftc_rng_normal(ftc_rng_t *r)
{
    double u1 = ftc_rng_uniform(r), u2 = ftc_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
