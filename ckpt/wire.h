/*
 * wire.h — the agent-to-agent wire protocol: one fixed 128-byte header in
 * front of every message (docs/wire-protocol.md).
 *
 *   magic "FTCW", version, type, flags
 *   job      xxh3 of the job id (messages of another job are refused)
 *   gen      the sender's generation (stale ones are refused, I4)
 *   sender   the sender's node index; seq, a per-sender counter (replays and
 *            reordering of control messages are refused by the receiver)
 *   owner rank, step, offset, length, total: which bytes of which shard
 *   req      request id: a GET and a push's PUTs and PUT_END carry the
 *            requester's; every answer (ACK, NACK, a fetch answer's PUTs and
 *            PUT_END) echoes it, so a late answer to an earlier request is
 *            told apart from the answer to the current one (version 2)
 *   payload_xxh3: checksum of the payload that follows (length bytes); the
 *            replication engine leaves it 0 on PUT chunks, whose bytes are
 *            verified through the shard's own checksums (each tensor's xxh3,
 *            checked by the receiver as soon as the tensor's bytes have all
 *            landed, and the head checked at PUT_END) before the ACK, and
 *            puts the shard's head checksum in PUT_END's
 *   mac:     HMAC-SHA256 (OpenSSL) over the header's first 96 bytes with the
 *            job secret, truncated to 16 bytes
 *
 * Threat model: the HMAC authenticates every header, so a message from
 * another job, a peer without the secret, a stale generation or a corrupted
 * header is refused; the payload is tied to its authenticated header by its
 * xxh3. That protects against misrouted traffic, stale peers and corruption,
 * not against an active on-path attacker who can rewrite payloads to collide
 * xxh3 (a fabric with encryption is the answer to that one).
 *
 * Decoding never trusts a field before checking it; errors name the field.
 * Stateless and thread-safe.
 */
#ifndef FTC_CKPT_WIRE_H
#define FTC_CKPT_WIRE_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_WIRE_VERSION 2 /* 2: req at offset 36 (reserved in 1) */
#define FTC_WIRE_HDR 128
#define FTC_WIRE_MAC 16
#define FTC_WIRE_MAX_PAYLOAD (64u << 20)

enum ftc_wire_type {
    FTC_MSG_HELLO = 1,    /* sender introduces itself (no payload) */
    FTC_MSG_PUT = 2,      /* bytes [offset, offset+length) of owner's shard of step */
    FTC_MSG_PUT_END = 3,  /* all total bytes sent; payload_xxh3 = xxh3 of the shard head */
    FTC_MSG_ACK = 4,      /* replica of (owner, step) stored and verified (flags: status) */
    FTC_MSG_GET = 5,      /* please send owner's shard of step (UINT64_MAX = newest held) */
    FTC_MSG_NACK = 6,     /* refused or missing; the payload is a short reason text */
    FTC_MSG__MAX = 7,
};

typedef struct ftc_wire_hdr {
    uint16_t type;
    uint16_t flags;
    uint64_t job;        /* xxh3 of the job id */
    uint64_t generation;
    uint32_t sender;     /* node index */
    uint32_t owner;      /* rank whose shard this is */
    uint32_t req;        /* request id (GET, push PUT/PUT_END) or the one answered; 0: none */
    uint64_t seq;
    uint64_t step;
    uint64_t offset;
    uint64_t length;     /* payload bytes after the header */
    uint64_t total;      /* size of the whole shard */
    uint64_t payload_xxh3;
    uint64_t keep;       /* PUT: 1 + the owner's newest committed step as the sender knows
                            it (0 = not said): the holder keeps its replica of that step */
} ftc_wire_hdr_t;

/* The secret and identity a side checks messages against. */
typedef struct ftc_wire_key {
    uint8_t secret[32]; /* the job secret (the agent option, or generated and shared via Redis) */
    size_t secret_len;
    uint64_t job;       /* xxh3 of the job id */
} ftc_wire_key_t;

/* Derives the key from the job id and the secret bytes. */
int ftc_wire_key_init(ftc_wire_key_t *k, const char *job, const void *secret, size_t len,
                      ftc_err_t *err);

/* Writes h (job taken from k) and its MAC into out[FTC_WIRE_HDR]. */
int ftc_wire_encode(const ftc_wire_key_t *k, const ftc_wire_hdr_t *h, uint8_t out[FTC_WIRE_HDR],
                    ftc_err_t *err);
/* Validates and decodes a header: magic, version, type, reserved bytes, MAC,
 * job, bounds (length <= FTC_WIRE_MAX_PAYLOAD, offset + length <= total).
 * FTC_EAUTH for a bad MAC or another job; FTC_EPROTO otherwise. */
int ftc_wire_decode(const ftc_wire_key_t *k, const uint8_t *buf, size_t len, ftc_wire_hdr_t *h,
                    ftc_err_t *err);
/* Checks that payload matches h->length and h->payload_xxh3. */
int ftc_wire_check_payload(const ftc_wire_hdr_t *h, const void *payload, size_t len,
                           ftc_err_t *err);
const char *ftc_wire_type_name(int type);

#ifdef __cplusplus
}
#endif
#endif
