/*
 * coll.h — the trainer's collectives behind one ops table: all-reduce,
 * reduce-scatter, all-gather, broadcast and barrier over a group of `size`
 * ranks (a DP or a TP group), each with a deadline and an abort. The CPU
 * backend (coll_cpu.c) runs over the libfabric transport (core/fabric.h); the
 * NCCL backend (coll_nccl.h) fills the same ftc_coll_ops_t for device
 * buffers, with the differences it lists (F32 order, no I128 sums).
 *
 * Buffers are contiguous arrays of `count` elements of one dtype, in place.
 * Chunks: for reduce-scatter and all-gather the buffer is split into `size`
 * chunks; chunk r starts at element r*(count/size) + min(r, count%size) and
 * holds count/size elements, plus one when r < count%size
 * (ftc_coll_chunk()). Any count works, including 0 and counts below size.
 *
 *   all_reduce      buf[i] = sum over ranks of buf[i], identical on every rank
 *   reduce_scatter  this rank's chunk = the sum of every rank's chunk; the
 *                   other chunks of buf are left unspecified (scratch)
 *   all_gather      rank r contributes its chunk r; afterwards every rank has
 *                   every chunk
 *   broadcast       buf of `root` copied to every rank
 *   barrier         returns once every rank has entered it
 *
 * Reduction order (FTC_COLL_F32): every element is summed in rank order,
 * ((x_0 + x_1) + x_2) + ... + x_{size-1}, in fp32 — the same order for every
 * element, every count, every chunking and every run, so the result is the
 * left-to-right fp32 sum in rank order, bit-identical on every rank and
 * across runs (for a fixed group size; a different size is a different sum).
 * FTC_COLL_I128 sums the 128-bit fixed-point integers of trainer/gradsum.h
 * (two little-endian 64-bit words per element, low first): exact, so the
 * result does not depend on the group size or on how the data was split —
 * this is what deterministic training uses. An i128 sum that overflows is
 * FTC_ERANGE (all_reduce returns it on every rank; reduce_scatter on the rank
 * owning the chunk); the communicator stays usable.
 *
 * Faults. Every call takes a deadline and watches the abort flag
 * (ftc_coll_abort(), callable from any thread, e.g. a failure detector). A
 * dead or stalled peer makes the call return FTC_ETIMEDOUT at its deadline
 * (plus at most the fabric's cancel_timeout_ms to take back outstanding
 * operations), an abort FTC_ECANCELED promptly, a transport error
 * FTC_EFABRIC; the message (ftc_coll_errmsg) names the operation and the
 * peer rank. After any such failure the communicator is broken: every later
 * call fails at once with the same code, and the only thing left to do is
 * ftc_coll_destroy() (then build a new group, with new addresses). After a
 * failure the buffer's contents are unspecified (partly reduced, partly
 * received), and the backend may still hold a reference to it until
 * ftc_coll_destroy() returns (a send to a dead peer cannot be cancelled):
 * do not free or reuse the buffer before destroying the communicator.
 *
 * Contract: every rank of the group calls the same collectives in the same
 * order with the same count, dtype and root (a mismatch is FTC_EPROTO or a
 * timeout, never a truncated message). One thread at a time per
 * communicator, except ftc_coll_abort(). No global state.
 */
#ifndef FTC_TRAINER_COLL_H
#define FTC_TRAINER_COLL_H

#include "core/clock.h"
#include "core/err.h"
#include "core/fabric.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ftc_coll_dtype {
    FTC_COLL_U8 = 0,   /* bytes: all_gather and broadcast only */
    FTC_COLL_F32 = 1,  /* float, summed in rank order */
    FTC_COLL_I128 = 2, /* gradsum fixed point: 2 x uint64 (low, high), exact sum */
} ftc_coll_dtype_t;

/* Bytes per element of dt (1, 4, 16); 0 for an unknown dtype. */
size_t ftc_coll_dtype_size(ftc_coll_dtype_t dt);

/* The chunk of rank r among `size` for a buffer of `count` elements
 * (see the top): *off and *len in elements. */
void ftc_coll_chunk(size_t count, int size, int r, size_t *off, size_t *len);

typedef struct ftc_coll ftc_coll_t;

/* A backend. Every op is called only on a healthy communicator with
 * validated arguments; it returns 0 or a negative FTC_E* code and sets
 * c->err. abort must be thread-safe and async-signal-safe. */
typedef struct ftc_coll_ops {
    const char *name; /* "cpu-fabric", "nccl" */
    int (*all_reduce)(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                      ftc_deadline_t dl);
    int (*reduce_scatter)(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                          ftc_deadline_t dl);
    int (*all_gather)(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                      ftc_deadline_t dl);
    int (*broadcast)(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, int root,
                     ftc_deadline_t dl);
    int (*barrier)(ftc_coll_t *c, ftc_deadline_t dl);
    void (*abort)(ftc_coll_t *c);
    void (*destroy)(ftc_coll_t *c); /* frees impl (not c) */
} ftc_coll_ops_t;

/* The communicator. Backends allocate it with ftc_coll_new(); callers use
 * the functions below, never the fields. */
struct ftc_coll {
    const ftc_coll_ops_t *ops;
    int rank, size;
    atomic_int aborted; /* set by ftc_coll_abort */
    int broken;         /* 0, or the code of the failure that broke it (sticky) */
    ftc_err_t err;      /* the last error */
    void *impl;         /* the backend's state */
};

/* For backends: a zeroed communicator with ops, rank, size set. */
ftc_coll_t *ftc_coll_new(const ftc_coll_ops_t *ops, int rank, int size, void *impl);

int ftc_coll_rank(const ftc_coll_t *c);
int ftc_coll_size(const ftc_coll_t *c);
const char *ftc_coll_backend(const ftc_coll_t *c);
/* The last error's text ("" if none). Not thread-safe. */
const char *ftc_coll_errmsg(const ftc_coll_t *c);
/* 0 while usable; FTC_ECANCELED after an abort; the breaking code otherwise. */
int ftc_coll_health(const ftc_coll_t *c);

int ftc_coll_all_reduce(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl);
int ftc_coll_reduce_scatter(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                            ftc_deadline_t dl);
int ftc_coll_all_gather(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl);
int ftc_coll_broadcast(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, int root,
                       ftc_deadline_t dl);
int ftc_coll_barrier(ftc_coll_t *c, ftc_deadline_t dl);

/* Makes the running call (if any) and every later call return FTC_ECANCELED.
 * Sticky; thread-safe and async-signal-safe. */
void ftc_coll_abort(ftc_coll_t *c);
/* Releases everything, whatever state it is in. NULL is a no-op. */
void ftc_coll_destroy(ftc_coll_t *c);

/* ---- CPU backend over libfabric ---------------------------------------- */

typedef struct ftc_coll_cpu_opts {
    size_t seg_bytes; /* bytes per fabric message (1 MiB); at most the fabric's max_msg
                         (ftc_fabric_max_msg, 4 MiB by default): create refuses more */
    int window;       /* messages in flight per peer and direction (8) */
} ftc_coll_cpu_opts_t;
#define FTC_COLL_CPU_OPTS_INIT {(size_t)1 << 20, 8}

/* A communicator over `fab` (an open endpoint; ownership passes to the
 * communicator, which closes it on destroy — also when this fails). addrs
 * holds `size` fabric addresses of FTC_FABRIC_ADDR_MAX bytes each, in rank
 * order (this rank's own included), lens their lengths. opts may be NULL. */
int ftc_coll_cpu_create(ftc_fabric_t *fab, int rank, int size, const uint8_t *addrs,
                        const size_t *lens, const ftc_coll_cpu_opts_t *opts, ftc_coll_t **out,
                        ftc_err_t *err);

/* For tests: the bytes of reduce-scatter scratch a CPU communicator holds
 * (the most any call so far needed: (size - 1) x the largest piece it
 * received from one peer); 0 for another backend. */
size_t ftc__coll_cpu_scratch_bytes(const ftc_coll_t *c);

/* Internal (the directory exchanges of coll.c and coll_nccl_boot.c): writes
 * n bytes to tmp, then renames it to path (no fsync). On failure tmp is
 * removed; error messages start with "<who>: ". */
int ftc__coll_publish_file(const char *path, const char *tmp, const void *p, size_t n,
                           const char *who, ftc_err_t *err);

/* Exchanges fabric addresses through a shared directory: writes
 * dir/<rank>.addr atomically (temp file + rename), then waits (polling every
 * 5 ms) until all `size` files exist, and reads them into addrs (size x
 * FTC_FABRIC_ADDR_MAX bytes) and lens. FTC_ETIMEDOUT names the missing ranks.
 * Use a fresh directory per group incarnation (stale files would be read). */
int ftc_coll_exchange_dir(const char *dir, int rank, int size, const void *addr, size_t len,
                          uint8_t *addrs, size_t *lens, ftc_deadline_t dl, ftc_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
