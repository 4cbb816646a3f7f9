/*
 * ckpt/records.h — the parsers of the agent's records in the job's Redis
 * that `ftc run` reads too (a peer's fabric entry, a plan's ranks): pure
 * functions, so that both readers parse a record the same strict way and
 * tests/fuzz/fuzz_records.c reaches them. Defined in ckpt/agent.c and
 * ckpt/agent_stripe.c.
 */
#ifndef FTC_CKPT_RECORDS_H
#define FTC_CKPT_RECORDS_H

#include "core/err.h"
#include "core/fabric.h"
#include "detect/control.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A peer's entry in ftc:{J}:fabric: field "INDEX", value "HEXADDR NODE_ID
 * DOMAIN [GEN]" (ftc__publish_address writes it; "-": no domain). */
typedef struct ftc__fabric_rec {
    unsigned long node;                    /* ULONG_MAX when the field is no index */
    char hex[2 * FTC_FABRIC_ADDR_MAX + 1]; /* the address as published */
    uint8_t addr[FTC_FABRIC_ADDR_MAX];     /* ... decoded */
    size_t addr_len;
    char node_id[FTC_CTL_NODE_MAX + 1];
    char domain[64]; /* "" for "-" */
    bool has_gen;    /* the publisher's generation follows (gen) */
    uint64_t gen;
} ftc__fabric_rec_t;

/* Parses a fabric entry (pure): 0, or FTC_EPROTO naming what is wrong. */
int ftc__fabric_parse(const char *field, const char *value, ftc__fabric_rec_t *r, ftc_err_t *err);

/* Parses the ranks of a plan (ftc:{J}:plan:GEN field "ranks"), one
 * "MEMBER:LOCAL" word per rank with MEMBER < nm (pure): *member and *local
 * get malloc'd arrays of *n; false on garbage (or out of memory). */
bool ftc__plan_ranks_parse(const char *ranks, uint32_t nm, uint32_t **member, uint32_t **local,
                           uint32_t *n);

#endif
