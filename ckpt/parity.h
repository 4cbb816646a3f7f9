/*
 * parity.h — erasure codes over equal-length blocks, for checkpoints that
 * survive node loss at (g+m)/g of the memory instead of k+1 full copies.
 *
 *   xor:g     one parity block over g data blocks: survives one loss per group
 *   rs:g+m    Reed-Solomon (ISA-L, a Cauchy generator matrix): m parity
 *             blocks; any g of the g+m blocks rebuild the rest
 *
 * XOR is the Reed-Solomon code whose parity row is all ones (in GF(2^8),
 * 1*x summed is x XORed), so both go through ISA-L's ec_encode_data, which
 * picks SSE/AVX2/AVX-512 at run time and needs no alignment.
 *
 * Shards differ in size: callers pad each to the group's block length (the
 * largest shard) with zeros; ftc_parity_block_len() rounds it up to 64.
 *
 * A code is immutable after create and may be shared by threads.
 */
#ifndef FTC_CKPT_PARITY_H
#define FTC_CKPT_PARITY_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FTC_PARITY_MAX 32 /* data + parity blocks in one group */

/* Redundancy of the in-memory tier, as configured (`redundancy`). */
typedef struct ftc_redundancy {
    enum { FTC_RED_REPLICA = 0, FTC_RED_XOR = 1, FTC_RED_RS = 2 } kind;
    int copies; /* REPLICA: peers that hold a copy (k >= 0) */
    int g, m;   /* XOR / RS: data blocks and parity blocks per group */
} ftc_redundancy_t;

/* Parses "2" (two replicas), "xor:4", "rs:4+2". Errors name the text and
 * the accepted forms. */
int ftc_redundancy_parse(const char *s, ftc_redundancy_t *r, ftc_err_t *err);
/* Text form into buf. */
const char *ftc_redundancy_str(const ftc_redundancy_t *r, char *buf, size_t cap);

typedef struct ftc_parity ftc_parity_t;

/* A code with g data and m parity blocks (g + m <= FTC_PARITY_MAX, m >= 1);
 * xor requires m == 1. NULL with err on bad sizes. */
ftc_parity_t *ftc_parity_create(int g, int m, bool xor_code, ftc_err_t *err);
void ftc_parity_destroy(ftc_parity_t *p); /* NULL is a no-op */

/* Block length for shards of at most max_shard bytes. */
uint64_t ftc_parity_block_len(uint64_t max_shard);

/* Computes the m parity blocks from the g data blocks, each len bytes. */
int ftc_parity_encode(const ftc_parity_t *p, const uint8_t *const *data, uint8_t *const *parity,
                      uint64_t len, ftc_err_t *err);

/* Rebuilds lost blocks in place. blocks has g + m entries (data first);
 * lost[i] marks the ones to rebuild, whose buffers must still be provided
 * (len bytes each). At most m may be lost; FTC_ERANGE otherwise, with a
 * message naming how many were lost and how many the code tolerates. */
int ftc_parity_decode(const ftc_parity_t *p, uint8_t *const *blocks, const bool *lost,
                      uint64_t len, ftc_err_t *err);

#endif
