/*
 * agent_proto.h — the local protocol between a rank (libftc, ckpt/client.c)
 * and its node's agent (ckpt/agent.c): fixed-size messages on a Unix
 * SOCK_SEQPACKET socket (message boundaries kept, peer credentials known).
 * Data never travels here: it is in the shm slots both sides map.
 *
 *   rank                          agent
 *   HELLO (job, rank, layout) ->  one rank per connection (a HELLO as another
 *                                 rank on it: ERROR, FTC_EPROTO); a connection
 *                                 that says none within agent.timeout_ms of
 *                                 its connect: ERROR (FTC_ETIMEDOUT), closed
 *                             <- WELCOME (generation)
 *   SLOTS (size)              ->  creates / reuses three slots of size bytes
 *                             <- SLOTS_OK (names)
 *   BEGIN (step)              ->  picks a slot that is neither the newest
 *                                 committed version, nor sealed (replicating),
 *                                 nor being written, nor pinned by a persist
 *                                 write; if none is free applies the policy:
 *                                 wait, or skip
 *                             <- BEGIN_OK (slot) | SKIP (reason)
 *   SEALED (slot, step)       ->  verifies, replicates, reports the commit
 *                             <- COMMITTED (step) | NOT_COMMITTED (reason), later
 *   ABORT (slot, step, why in text) -> the rank's snapshot of step failed after
 *                                 BEGIN_OK (copy, seal, or its SEALED): the step
 *                                 can never commit, so the agent frees that slot
 *                                 and abandons this node's other ranks' sealed
 *                                 copies of the step at once (their reports
 *                                 withdrawn, NOT_COMMITTED to them), records a
 *                                 checkpoint_failed event and the step's abort
 *                                 marker in its commit record (the other
 *                                 nodes' agents abandon it from there); no
 *                                 answer
 *   RESTORE (src)             ->  newest committed step of rank src's shard
 *                                 (src -1: the caller's own): local slot, else a
 *                                 peer's replica (or parity), else the persist
 *                                 tier; installed in one of the caller's slots
 *                             <- RESTORE_OK (slot, step, status) | ERROR (where it looked)
 *                                status FTC_AP_OK_VERIFIED: the agent verified every checksum
 *                                of that very slot after its last write (the rank need not)
 *   FETCH (src, step)         ->  the same search for rank src's shard of a
 *                                 committed step (UINT64_MAX: the newest); the
 *                                 verified shard is copied into a fresh shm
 *                                 object that the rank maps and unlinks
 *                             <- FETCH_OK (name[0], size, step) | ERROR
 *   FETCH_AT_MOST (src, step) ->  rank src's shard of the newest committed step
 *                                 at or before step (UINT64_MAX: the newest) that
 *                                 has a verified copy: the committed steps (the
 *                                 commit set in Redis, the persist tiers'
 *                                 versions) newest first, each looked for as a
 *                                 FETCH does; one request for what was one
 *                                 FETCH per step tried
 *                             <- FETCH_OK (name[0], size, step <= the step asked) | ERROR
 *   REPORT (kind in name[0], step,  ->  records an event in the job's stream
 *     value in size, detail in text)     (the trainer's guard: nan, loss_spike)
 *                             <- REPORT_OK | ERROR (bad kind)
 *   BYE                       ->
 *
 *   supervisor (`ftc run`)        agent
 *   WATCH (rank, pid, world)  ->  the failure detector watches pid as rank from
 *                                 now on (its exit: a rank_exit event), before
 *                                 the rank's own HELLO, which a rank that dies
 *                                 or is stopped first, or a binary without
 *                                 libftc, never sends; the HELLO of that pid
 *                                 continues the watch. A WATCH read after the
 *                                 rank's HELLO changes nothing (after its BYE,
 *                                 its exit is no failure). rank below the
 *                                 generation's world (the agent's, re-read when
 *                                 unknown or when world, the supervisor's,
 *                                 differs; world when the record has none).
 *                                 Only from a connection that is no rank's, for
 *                                 a pid that is the sender's child (what the
 *                                 supervisor spawned)
 *                             <- WATCH_OK | ERROR (the supervisor sends its
 *                                 WATCHes on one connection, answered in order,
 *                                 and does not always wait for the answer)
 *
 * Every request the rank sends (all but SEALED, ABORT and BYE, which get no answer)
 * carries a request id (seq, increasing, never 0) that the agent echoes in
 * each reply to it: a reply the rank gave up waiting for (its timeout_ms
 * passed) is still answered later, and without the id it was taken as the
 * answer to the next request of that type (a FETCH_OK of another step). The
 * rank drops a reply whose id is not its request's; the asynchronous notices
 * (COMMITTED, NOT_COMMITTED) carry seq 0 and are recorded as they pass.
 *
 * Both sides check magic, version, type and every string's termination
 * before using a message; an invalid one closes the connection with an error
 * logged, never crashes the agent. A connection that reads none of the
 * agent's answers is not read from while its socket is full (the agent
 * never waits for it: it sends without waiting, the socket's buffer holding
 * what is owed, four times what stops the reads). magic, version and type keep their offsets
 * (0, 4, 6) and the message its size in every version, so that a side of
 * another version is told which one (the agent answers a HELLO of another
 * version with an ERROR naming both; the rank says so) instead of "a message
 * of N bytes".
 */
#ifndef FTC_CKPT_AGENT_PROTO_H
#define FTC_CKPT_AGENT_PROTO_H

#include "core/err.h"

#include <stdint.h>

#define FTC_AP_MAGIC 0x41435446u /* "FTCA" */
/* 2: three slots per rank; 3: RESTORE from another rank, FETCH; 4: request
 * ids (seq), text 376 bytes (the message keeps its size) */
#define FTC_AP_VERSION 4

/* Slots per rank: the newest committed version, the previous step still
 * replicating, and the step being written (docs/agent.md). */
#define FTC_AP_SLOTS_PER_RANK 3

enum ftc_ap_type {
    FTC_AP_HELLO = 1,
    FTC_AP_WELCOME = 2,
    FTC_AP_SLOTS = 3,
    FTC_AP_SLOTS_OK = 4,
    FTC_AP_BEGIN = 5,
    FTC_AP_BEGIN_OK = 6,
    FTC_AP_SKIP = 7,
    FTC_AP_SEALED = 8,
    FTC_AP_COMMITTED = 9,
    FTC_AP_RESTORE = 10,
    FTC_AP_RESTORE_OK = 11,
    FTC_AP_ERROR = 12,
    FTC_AP_BYE = 13,
    FTC_AP_NOT_COMMITTED = 14, /* async: a sealed step could not be committed (text says why) */
    FTC_AP_FETCH = 15,
    FTC_AP_FETCH_OK = 16,
    /* A new type needs no version bump: both sides come from one build, and an
     * older agent answers an unknown type with a clean protocol error. */
    FTC_AP_FETCH_AT_MOST = 17, /* FETCH of the newest committed step <= step; FETCH_OK */
    FTC_AP_ABORT = 18,     /* the rank's snapshot of step (in slot) failed; no answer */
    FTC_AP_WATCH = 19,     /* supervisor: watch pid as rank (rank_exit) before its HELLO */
    FTC_AP_REPORT = 20,    /* an event the rank detected; size holds the bits of a double */
    FTC_AP_REPORT_OK = 21, /* the agent queued it for the event stream */
    FTC_AP_WATCH_OK = 22,  /* the detector watches the pid */
    FTC_AP__MAX = 23,
};

/* RESTORE_OK's status flags (an agent that sets none: the rank verifies). */
enum { FTC_AP_OK_VERIFIED = 1 };

typedef struct ftc_ap_msg {
    uint32_t magic;      /* FTC_AP_MAGIC */
    uint16_t version;    /* FTC_AP_VERSION */
    uint16_t type;       /* ftc_ap_type */
    int32_t status;      /* ERROR: an FTC_E* code; RESTORE_OK: FTC_AP_OK_* flags */
    uint32_t slot;       /* 0 .. FTC_AP_SLOTS_PER_RANK-1 */
    uint64_t seq;        /* request id: set by the rank, echoed in every reply to that
                            request; 0 in COMMITTED / NOT_COMMITTED (version 4) */
    uint64_t step;
    uint64_t size;       /* SLOTS: bytes per slot */
    uint64_t generation;
    uint32_t rank, world;
    uint32_t dp, tp, pp, dp_rank, tp_rank, pp_rank;
    int32_t pid;
    int32_t src;         /* RESTORE / FETCH / FETCH_AT_MOST: the rank whose shard is wanted
                            (-1: the caller's) */
    char job[64];        /* NUL-terminated */
    char name[FTC_AP_SLOTS_PER_RANK][128]; /* SLOTS_OK: the slot names */
    char text[376];      /* ERROR / SKIP / NOT_COMMITTED / ABORT: the reason */
} ftc_ap_msg_t;

/* The message size is the same in every version (see above). */
_Static_assert(sizeof(ftc_ap_msg_t) == 912, "ftc_ap_msg_t must keep its size of 912 bytes");

/* Fills the fixed fields of m for type. */
void ftc_ap_init(ftc_ap_msg_t *m, int type);
/* Checks a received message (magic, version, length, type, strings);
 * FTC_EPROTO with the reason otherwise: a message of another version names
 * both versions (m->version holds the other side's). */
int ftc_ap_check(const ftc_ap_msg_t *m, size_t len, ftc_err_t *err);
/* Sends / receives one message with a deadline (milliseconds). Receive
 * returns FTC_EIO ("connection closed") at end of stream. */
int ftc_ap_send(int fd, const ftc_ap_msg_t *m, int timeout_ms, ftc_err_t *err);
int ftc_ap_recv(int fd, ftc_ap_msg_t *m, int timeout_ms, ftc_err_t *err);
/* Sends one message without waiting (the agent's sends): FTC_EAGAIN when the
 * socket has no room for it. Unlike ftc_ap_send it does not wait for the
 * socket to poll writable, which a Unix socket stops being once a quarter of
 * its buffer is unread (about 24 messages of about 93 on Linux's defaults). */
int ftc_ap_send_now(int fd, const ftc_ap_msg_t *m, ftc_err_t *err);

#endif
