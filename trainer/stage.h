/*
 * stage.h — collectives and host reads over buffers that live in a kernels
 * backend's memory (trainer/kernels.h), whatever memory the collective
 * backend wants.
 *
 * The model and the optimizer keep their tensors in the backend's memory
 * (host for "cpu", device for "cuda"). The collectives (trainer/coll.h) come
 * in two kinds: the CPU backend over libfabric ("cpu-fabric") reads and
 * writes HOST memory; NCCL ("nccl") reads and writes DEVICE memory. A stager
 * joins them through the table's memory ops:
 *
 *   buffer in          collective   what ftc_stage_coll does
 *   backend memory     cpu-fabric   direct when the backend is the host;
 *                                   else D2H into a host staging buffer,
 *                                   the collective there, H2D back
 *   backend memory     nccl         direct (device pointers)
 *   host memory        cpu-fabric   direct
 *   host memory        nccl         H2D into a backend staging buffer, the
 *                                   collective there, D2H back
 *
 * Exact 128-bit sums (FTC_COLL_I128 all_reduce / reduce_scatter, the
 * deterministic gradient reduction; always host memory): NCCL has none, so
 * on an NCCL communicator — and on any communicator when staging is forced,
 * so the CPU tests run the same code — each element is sign-extended to 144
 * bits and split into nine 16-bit limbs carried as floats (on a device
 * backend over host collectives the native i128 sum is used: the sums are
 * host memory already); an fp32
 * all-reduce sums them exactly (every partial sum of up to 256 ranks is an
 * integer below 2^24, exact in any order, so NCCL's order does not matter)
 * and the host propagates the carries. The result equals the CPU backend's
 * i128 sum bit for bit (for a reduce-scatter every chunk is reduced, a
 * superset of coll.h's contract); an overflow of 128 bits is FTC_ERANGE as
 * there. It moves 36 bytes per element instead of 16, in blocks of 2^18
 * elements (9 MiB of staging).
 *
 * "Staged" (ftc_stage_staged) means host code may not touch backend memory:
 * true for a device backend (kernels->device >= 0), and also on the CPU
 * backend when forced (FTC_TRAIN_FORCE_STAGING=1 in the environment of
 * ftc_trainer_create, or force = true): then every copy really goes through
 * a separate buffer with the table's mem_copy, which is what the CPU tests
 * use to exercise the device path (the CPU mem_copy is memcpy, so the bits
 * do not change). Unforced on the CPU the stager passes pointers through:
 * the CPU path stays what it was.
 *
 * ftc_stage_host / ftc_stage_to_backend copy a range of backend memory to
 * the host and back (memcpy-free pass-through when not staged) for host-side
 * computations (exact gradient sums, hashes, re-partitioning on restore).
 *
 * Errors: ftc_stage_coll returns the collective's code (0 or negative
 * FTC_E*), or FTC_ENOMEM when a staging buffer cannot grow, FTC_EINVAL for a
 * combination that cannot work (an NCCL communicator with a host backend).
 * Staging buffers only grow; ftc_stage_fini frees them.
 * Thread-safety: a stager is used by one thread at a time (the trainer's).
 */
#ifndef FTC_TRAINER_STAGE_H
#define FTC_TRAINER_STAGE_H

#include "core/err.h"
#include "trainer/coll.h"
#include "trainer/kernels.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ftc_stage_op {
    FTC_STAGE_ALL_REDUCE = 0,
    FTC_STAGE_REDUCE_SCATTER = 1,
    FTC_STAGE_ALL_GATHER = 2,
    FTC_STAGE_BROADCAST = 3,
} ftc_stage_op_t;

/* Where a buffer handed to ftc_stage_coll lives. */
enum { FTC_STAGE_MEM_HOST = 0, FTC_STAGE_MEM_BACKEND = 1 };

typedef struct ftc_stage {
    const ftc_kernels_t *k;
    bool staged;        /* backend memory is not host memory (device, or forced) */
    bool forced;        /* staged on a host backend (the test switch) */
    void *host;         /* host staging buffer */
    size_t host_cap;
    void *dev;          /* backend staging buffer (host data on a device collective) */
    size_t dev_cap;
    uint64_t copies;    /* mem_copy calls made (the tests check the path was taken) */
    uint64_t limb_sums; /* exact sums carried over fp32 limbs */
} ftc_stage_t;

/* The environment switch that forces staging on a host backend. */
#define FTC_STAGE_FORCE_ENV "FTC_TRAIN_FORCE_STAGING"
/* True when FTC_TRAIN_FORCE_STAGING is set to something other than "" or "0". */
bool ftc_stage_force_env(void);

void ftc_stage_init(ftc_stage_t *s, const ftc_kernels_t *k, bool force);
void ftc_stage_fini(ftc_stage_t *s);
bool ftc_stage_staged(const ftc_stage_t *s);

/* True when the communicator reads and writes device memory ("nccl"). */
bool ftc_coll_device_memory(const ftc_coll_t *c);

/* One collective (coll.h semantics) on buf of count elements of dt, which
 * lives in host memory or in the backend's (mem: FTC_STAGE_MEM_*); root for
 * a broadcast only. c NULL: nothing to do (0). */
int ftc_stage_coll(ftc_stage_t *s, ftc_coll_t *c, ftc_stage_op_t op, void *buf, size_t count,
                   ftc_coll_dtype_t dt, int root, int mem, ftc_deadline_t dl);

/* A host pointer holding bytes [0, bytes) of backend memory src: src itself
 * when not staged, else the host staging buffer after a D2H copy (valid
 * until the next call on s). NULL when the buffer cannot grow. */
const void *ftc_stage_host(ftc_stage_t *s, const void *src, size_t bytes);
/* Copies host memory to backend memory: memcpy-equivalent through the
 * table's mem_copy (H2D; on a host backend the CPU table's copy). */
void ftc_stage_to_backend(ftc_stage_t *s, void *dst, const void *src, size_t bytes);
/* Backend memory to host memory (D2H through the table). */
void ftc_stage_to_host(ftc_stage_t *s, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
