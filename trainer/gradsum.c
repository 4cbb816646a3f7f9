/*
 * gradsum.c — the 128-bit fixed-point accumulator of gradsum.h. GCC's
 * __int128 does the arithmetic; __builtin_add_overflow checks every add.
 */
#include "trainer/gradsum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef __int128 ftc__i128;

struct ftc_gradsum {
    size_t n;
    ftc__i128 *acc; /* n elements; as words: low, high (little-endian) */
};

ftc_gradsum_t *ftc_gradsum_create(size_t n, ftc_err_t *err)
{
    ftc_gradsum_t *g = calloc(1, sizeof *g);
    if (g)
        g->acc = calloc(n ? n : 1, sizeof(ftc__i128));
    if (!g || !g->acc) {
        free(g);
        ftc_err_set(err, FTC_ENOMEM, "gradient accumulator: out of memory for %zu elements "
                    "(%zu MiB)", n, n * sizeof(ftc__i128) >> 20);
        return NULL;
    }
    g->n = n;
    return g;
}

void ftc_gradsum_destroy(ftc_gradsum_t *g)
{
    if (!g)
        return;
    free(g->acc);
    free(g);
}

size_t ftc_gradsum_len(const ftc_gradsum_t *g)
{
    return g->n;
}

void ftc_gradsum_zero(ftc_gradsum_t *g)
{
    memset(g->acc, 0, g->n * sizeof(ftc__i128));
}

int ftc_gradsum_add_f32(ftc_gradsum_t *g, const float *grad, size_t n, ftc_err_t *err)
{
    if (n != g->n)
        return ftc_err_set(err, FTC_EINVAL, "gradient of %zu elements into an accumulator of %zu",
                           n, g->n);
    const double scale = 0x1p96; /* FTC_GRADSUM_FRAC_BITS */
    for (size_t i = 0; i < n; i++) {
        double x = (double)grad[i];
        if (!(fabs(x) < FTC_GRADSUM_MAX_ELEM))
            return ftc_err_set(err, FTC_ERANGE,
                               "gradient element %zu is %g: deterministic accumulation takes "
                               "finite values below 2^30 in magnitude (a blow-up; lower the "
                               "learning rate or enable clipping)",
                               i, x);
        /* exact scaling by a power of two, then round to nearest (even) */
        ftc__i128 v = (ftc__i128)nearbyint(x * scale);
        if (__builtin_add_overflow(g->acc[i], v, &g->acc[i]))
            return ftc_err_set(err, FTC_ERANGE,
                               "gradient sum overflow at element %zu: the sum passed 2^31 in "
                               "magnitude (fixed point with %d fraction bits)",
                               i, FTC_GRADSUM_FRAC_BITS);
    }
    return 0;
}

int ftc_gradsum_add(ftc_gradsum_t *g, const ftc_gradsum_t *o, ftc_err_t *err)
{
    if (o->n != g->n)
        return ftc_err_set(err, FTC_EINVAL, "adding accumulators of %zu and %zu elements", o->n,
                           g->n);
    for (size_t i = 0; i < g->n; i++)
        if (__builtin_add_overflow(g->acc[i], o->acc[i], &g->acc[i]))
            return ftc_err_set(err, FTC_ERANGE,
                               "gradient sum overflow at element %zu while reducing: the sum "
                               "passed 2^31 in magnitude",
                               i);
    return 0;
}

void ftc_gradsum_to_f32(const ftc_gradsum_t *g, float *out, double scale)
{
    const double unscale = 0x1p-96;
    for (size_t i = 0; i < g->n; i++)
        out[i] = (float)((double)g->acc[i] * unscale * scale);
}

void ftc_gradsum_to_f32_range(const ftc_gradsum_t *g, size_t off, size_t len, float *out,
                              double scale)
{
    const double unscale = 0x1p-96;
    for (size_t i = 0; i < len && off + i < g->n; i++)
        out[i] = (float)((double)g->acc[off + i] * unscale * scale);
}

uint64_t *ftc_gradsum_words(ftc_gradsum_t *g)
{
    return (uint64_t *)(void *)g->acc;
}
