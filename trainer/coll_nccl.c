/*
 * coll_nccl.c — the NCCL backend of trainer/coll.h (see trainer/coll_nccl.h
 * for the contract). Compiled only when the build has NCCL (FTC_WITH_NCCL);
 * coll_nccl_none.c stands in otherwise.
 *
 * Each communicator owns a non-blocking NCCL communicator (config.blocking =
 * 0), a private CUDA stream, an event to order that stream after the
 * caller's, a one-float device buffer for the barrier and a scratch buffer
 * for uneven chunks. Every collective: switch to the communicator's device,
 * make the private stream wait for the caller's stream, enqueue (memcpys and
 * one NCCL call; when copies follow the NCCL call, settle() first waits for
 * the communicator state to leave ncclInProgress, so the NCCL kernel is on
 * the stream before them), then wait(): poll ncclCommGetAsyncError (ncclInProgress
 * while a non-blocking enqueue is still under way) and, once it says
 * ncclSuccess, cudaStreamQuery — with the deadline and the abort flag checked
 * between polls. A failure calls ncclCommAbort (unless keep_on_failure),
 * which terminates the kernels that would otherwise spin forever on a dead
 * peer.
 *
 * ftc_coll_abort only sets the flag (coll.c): ncclCommAbort is neither
 * async-signal-safe nor safe to run while another thread is inside an NCCL
 * call on the same communicator, so the polling thread, which sees the flag
 * within one poll (about 50 us), calls it.
 */
#include "trainer/coll_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HAVE_SHRINK (NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0))

typedef struct nccl {
    ncclComm_t comm;            /* NULL once aborted */
    cudaStream_t stream;        /* private: every NCCL call and copy goes here */
    cudaEvent_t ready;          /* recorded on the caller's stream at each call */
    int device;                 /* the CUDA device of this rank */
    float *one;                 /* 1 float on the device: the barrier's all-reduce */
    uint8_t *scratch;           /* padded chunks (uneven reduce_scatter / all_gather) */
    size_t scratch_cap;         /* bytes */
    ftc_coll_nccl_boot_t opts;  /* a copy (dir / redis are not used after create) */
    int aborted_code;           /* why comm was aborted (0 while alive) */
    uint64_t seq;               /* collectives issued, for messages */
} nccl_t;

bool ftc_coll_nccl_built(void) { return true; }

/* ---- errors ------------------------------------------------------------- */

static int code_of(ncclResult_t r)
{
    switch (r) {
    case ncclUnhandledCudaError:
        return FTC_ECUDA;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return FTC_EINVAL;
    default:
        return FTC_EFABRIC; /* system, internal, remote */
    }
}

static void comm_abort(nccl_t *p, int why)
{
    if (p->comm) {
        ncclCommAbort(p->comm);
        p->comm = NULL;
        p->aborted_code = why;
    }
}

/* Records a failure of a running collective and, unless keep_on_failure,
 * aborts the NCCL communicator. detail is appended to the message. */
static int fail(ftc_coll_t *c, const char *op, int code, uint64_t t0, const char *why,
                const char *detail)
{
    nccl_t *p = c->impl;
    const char *last = p->comm ? ncclGetLastError(p->comm) : "";
    ftc_err_set(&c->err, code,
                "coll nccl %s rank %d/%d (op %llu) after %.0f ms: %s%s%s%s%s%s", op, c->rank,
                c->size, (unsigned long long)p->seq, (double)(ftc_now_ns() - t0) / 1e6, why,
                detail && *detail ? ": " : "", detail ? detail : "",
                last && *last ? "; NCCL last error: " : "", last ? last : "",
                p->opts.keep_on_failure ? "; NCCL communicator kept for ftc_coll_nccl_shrink"
                                        : "; NCCL communicator aborted");
    if (!p->opts.keep_on_failure)
        comm_abort(p, code);
    return code;
}

static int fail_nccl(ftc_coll_t *c, const char *op, uint64_t t0, const char *call,
                     ncclResult_t r)
{
    char d[160];
    snprintf(d, sizeof d, "%s (%s, %d)", ncclGetErrorString(r), call, (int)r);
    return fail(c, op, code_of(r), t0, "NCCL error", d);
}

static int fail_cuda(ftc_coll_t *c, const char *op, uint64_t t0, const char *call,
                     cudaError_t e)
{
    char d[200];
    snprintf(d, sizeof d, "%s: %s (error %d)", call, cudaGetErrorString(e), (int)e);
    (void)cudaGetLastError();
    return fail(c, op, FTC_ECUDA, t0, "CUDA error", d);
}

/* ---- waiting ------------------------------------------------------------ */

static void backoff(unsigned *spins)
{
    if (++*spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* Polls comm until it is no longer ncclInProgress (init, shrink): 0, or a
 * code with err set; aborts comm (and sets *comm = NULL) on any failure. */
static int wait_comm(ncclComm_t *comm, const atomic_int *flag, ftc_deadline_t dl,
                     const char *what, ftc_err_t *err)
{
    uint64_t t0 = ftc_now_ns();
    unsigned spins = 0;
    for (;;) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(*comm, &st);
        if (r == ncclSuccess && st == ncclSuccess)
            return 0;
        int rc = 0;
        if (r != ncclSuccess || st != ncclInProgress) {
            ncclResult_t e = r != ncclSuccess ? r : st;
            const char *last = ncclGetLastError(*comm);
            rc = ftc_err_set(err, code_of(e), "%s: %s (%d)%s%s", what, ncclGetErrorString(e),
                             (int)e, last && *last ? "; NCCL last error: " : "",
                             last ? last : "");
        } else if (flag && atomic_load(flag)) {
            rc = ftc_err_set(err, FTC_ECANCELED, "%s: aborted after %.0f ms", what,
                             (double)(ftc_now_ns() - t0) / 1e6);
        } else if (ftc_deadline_expired(dl)) {
            rc = ftc_err_set(err, FTC_ETIMEDOUT,
                             "%s: deadline passed after %.0f ms (a rank dead, slow, or not "
                             "calling?)",
                             what, (double)(ftc_now_ns() - t0) / 1e6);
        }
        if (rc) {
            ncclCommAbort(*comm);
            *comm = NULL;
            return rc;
        }
        backoff(&spins);
    }
}

/* Polls the communicator until its state is ncclSuccess and, with stream,
 * until what was enqueued on p->stream is done (wait_done: see the top).
 * Without stream (settle): after an NCCL call that returned ncclInProgress
 * (a non-blocking communicator enqueues in the background, e.g. while it
 * connects to its peers on first use), so that the NCCL kernel is on
 * p->stream before the caller enqueues more CUDA work there (NCCL's
 * ncclCommGetAsyncError: "Before the states change into ncclSuccess, users
 * are not allowed to issue CUDA kernel to the streams being used by NCCL").
 * The deadline and the abort flag are checked between polls. */
static int poll_comm(ftc_coll_t *c, const char *op, uint64_t t0, ftc_deadline_t dl, bool stream)
{
    nccl_t *p = c->impl;
    unsigned spins = 0;
    for (;;) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(p->comm, &st);
        if (r != ncclSuccess)
            return fail_nccl(c, op, t0, "ncclCommGetAsyncError", r);
        if (st != ncclSuccess && st != ncclInProgress)
            return fail_nccl(c, op, t0, "asynchronous error (peer died, network or NVLink "
                                        "failure?)", st);
        if (st == ncclSuccess) {
            if (!stream)
                return 0;
            cudaError_t e = cudaStreamQuery(p->stream);
            if (e == cudaSuccess)
                return 0;
            if (e != cudaErrorNotReady)
                return fail_cuda(c, op, t0, "cudaStreamQuery", e);
        }
        if (atomic_load(&c->aborted))
            return fail(c, op, FTC_ECANCELED, t0, "aborted (ftc_coll_abort)", NULL);
        if (ftc_deadline_expired(dl))
            return fail(c, op, FTC_ETIMEDOUT, t0,
                        stream ? "deadline passed (a peer dead, slow, or not calling this "
                                 "collective?)"
                               : "deadline passed while NCCL enqueued (a peer dead, slow, or "
                                 "not calling this collective?)",
                        NULL);
        backoff(&spins);
    }
}

static int wait_done(ftc_coll_t *c, const char *op, uint64_t t0, ftc_deadline_t dl)
{
    return poll_comm(c, op, t0, dl, true);
}

static int settle(ftc_coll_t *c, const char *op, uint64_t t0, ftc_deadline_t dl)
{
    return poll_comm(c, op, t0, dl, false);
}

/* ---- the calls ------------------------------------------------------------ */

/* Switches to the device and orders the private stream after the caller's. */
static int begin(ftc_coll_t *c, const char *op, uint64_t t0, int *prev)
{
    nccl_t *p = c->impl;
    *prev = -1;
    if (!p->comm)
        return ftc_err_set(&c->err, p->aborted_code ? p->aborted_code : FTC_ECANCELED,
                           "coll nccl %s rank %d/%d: the NCCL communicator was aborted by an "
                           "earlier failure; destroy it and build a new group",
                           op, c->rank, c->size);
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess)
        *prev = -1;
    else if (*prev != p->device)
        e = cudaSetDevice(p->device);
    if (e == cudaSuccess)
        e = cudaEventRecord(p->ready, (cudaStream_t)p->opts.stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(p->stream, p->ready, 0);
    if (e != cudaSuccess)
        return fail_cuda(c, op, t0, "ordering after the caller's stream", e);
    p->seq++;
    return 0;
}

static int end(ftc_coll_t *c, int prev, int rc)
{
    nccl_t *p = c->impl;
    if (prev >= 0 && prev != p->device)
        cudaSetDevice(prev);
    return rc;
}

/* The NCCL enqueue result: ncclInProgress is fine (non-blocking). */
static int enq(ftc_coll_t *c, const char *op, uint64_t t0, const char *call, ncclResult_t r)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return 0;
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) /* no effect: comm still usable */
        return ftc_err_set(&c->err, FTC_EINVAL, "coll nccl %s rank %d/%d: %s: %s; %s", op,
                           c->rank, c->size, call, ncclGetErrorString(r),
                           ncclGetLastError(((nccl_t *)c->impl)->comm));
    return fail_nccl(c, op, t0, call, r);
}

static int cu(ftc_coll_t *c, const char *op, uint64_t t0, const char *call, cudaError_t e)
{
    return e == cudaSuccess ? 0 : fail_cuda(c, op, t0, call, e);
}

static int ensure_scratch(ftc_coll_t *c, const char *op, uint64_t t0, size_t bytes)
{
    nccl_t *p = c->impl;
    if (bytes <= p->scratch_cap)
        return 0;
    size_t want = bytes < 2 * p->scratch_cap ? 2 * p->scratch_cap : bytes;
    if (p->scratch) {
        /* the private stream is idle between calls (each call waits for it) */
        cudaFree(p->scratch);
        p->scratch = NULL, p->scratch_cap = 0;
    }
    void *q = NULL;
    cudaError_t e = cudaMalloc(&q, want);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ftc_err_set(&c->err, FTC_ENOMEM,
                           "coll nccl %s rank %d/%d: cudaMalloc of %zu scratch bytes for uneven "
                           "chunks: %s (use counts divisible by the group size to avoid scratch)",
                           op, c->rank, c->size, want, cudaGetErrorString(e));
    }
    (void)t0;
    p->scratch = q, p->scratch_cap = want;
    return 0;
}

/* height rows of width bytes, strided: one cudaMemcpy2DAsync while the
 * pitches are within what it takes (cudaDevAttrMaxPitch is 2^31 - 1 bytes
 * on current GPUs; 1 GiB keeps a margin), else one copy per row. */
static cudaError_t copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t width, size_t height, cudaStream_t st)
{
    const size_t lim = (size_t)1 << 30;
    if (!width || !height)
        return cudaSuccess;
    if (dpitch < lim && spitch < lim)
        return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                 cudaMemcpyDeviceToDevice, st);
    for (size_t i = 0; i < height; i++) {
        cudaError_t e = cudaMemcpyAsync((uint8_t *)dst + i * dpitch,
                                        (const uint8_t *)src + i * spitch, width,
                                        cudaMemcpyDeviceToDevice, st);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Zeroes the last element (es bytes) of rows of pitch bytes. */
static cudaError_t zero_rows(void *dst, size_t pitch, size_t es, size_t height, cudaStream_t st)
{
    if (!height)
        return cudaSuccess;
    if (pitch < ((size_t)1 << 30))
        return cudaMemset2DAsync(dst, pitch, 0, es, height, st);
    for (size_t i = 0; i < height; i++) {
        cudaError_t e = cudaMemsetAsync((uint8_t *)dst + i * pitch, 0, es, st);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

static const char *I128_MSG =
    "coll nccl %s rank %d/%d: FTC_COLL_I128 sums are not supported by the NCCL backend (NCCL "
    "has no 128-bit integer sum); reduce the fixed-point gradients with the CPU backend "
    "(ftc_coll_cpu_create) or sum F32";

static int n_all_reduce(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl)
{
    if (dt != FTC_COLL_F32)
        return ftc_err_set(&c->err, FTC_EUNSUPPORTED, I128_MSG, "all_reduce", c->rank, c->size);
    if (!count)
        return 0;
    nccl_t *p = c->impl;
    uint64_t t0 = ftc_now_ns();
    int prev, rc = begin(c, "all_reduce", t0, &prev);
    if (!rc)
        rc = enq(c, "all_reduce", t0, "ncclAllReduce",
                 ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, p->comm, p->stream));
    if (!rc)
        rc = wait_done(c, "all_reduce", t0, dl);
    return end(c, prev, rc);
}

static int n_reduce_scatter(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                            ftc_deadline_t dl)
{
    if (dt != FTC_COLL_F32)
        return ftc_err_set(&c->err, FTC_EUNSUPPORTED, I128_MSG, "reduce_scatter", c->rank,
                           c->size);
    nccl_t *p = c->impl;
    const char *op = "reduce_scatter";
    size_t n = (size_t)c->size, base = count / n, rem = count % n, r = (size_t)c->rank;
    if (!base && !rem)
        return 0;
    uint64_t t0 = ftc_now_ns();
    int prev, rc = begin(c, op, t0, &prev);
    float *f = buf;
    if (!rc && !rem) { /* even chunks: in place */
        rc = enq(c, op, t0, "ncclReduceScatter",
                 ncclReduceScatter(f, f + r * base, base, ncclFloat, ncclSum, p->comm, p->stream));
    } else if (!rc) { /* pad every chunk to m = base + 1 elements in scratch */
        size_t m = base + 1, off, len;
        ftc_coll_chunk(count, c->size, c->rank, &off, &len);
        rc = ensure_scratch(c, op, t0, n * m * sizeof(float));
        float *s = (float *)p->scratch;
        /* chunks 0..rem-1 hold m elements: the layout already matches */
        if (!rc)
            rc = cu(c, op, t0, "cudaMemcpyAsync",
                    cudaMemcpyAsync(s, f, rem * m * sizeof(float), cudaMemcpyDeviceToDevice,
                                    p->stream));
        /* chunks rem..n-1 hold base elements: strided into slots of m, zero padding */
        if (!rc)
            rc = cu(c, op, t0, "cudaMemcpy2DAsync",
                    copy_rows(s + rem * m, m * sizeof(float), f + rem * m, base * sizeof(float),
                              base * sizeof(float), n - rem, p->stream));
        if (!rc)
            rc = cu(c, op, t0, "cudaMemset2DAsync",
                    zero_rows(s + rem * m + base, m * sizeof(float), sizeof(float), n - rem,
                              p->stream));
        if (!rc)
            rc = enq(c, op, t0, "ncclReduceScatter",
                     ncclReduceScatter(s, s + r * m, m, ncclFloat, ncclSum, p->comm, p->stream));
        if (!rc) /* the NCCL kernel on the stream before the copy back */
            rc = settle(c, op, t0, dl);
        if (!rc && len)
            rc = cu(c, op, t0, "cudaMemcpyAsync",
                    cudaMemcpyAsync(f + off, s + r * m, len * sizeof(float),
                                    cudaMemcpyDeviceToDevice, p->stream));
    }
    if (!rc)
        rc = wait_done(c, op, t0, dl);
    return end(c, prev, rc);
}

static int n_all_gather(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl)
{
    nccl_t *p = c->impl;
    const char *op = "all_gather";
    size_t es = ftc_coll_dtype_size(dt);
    size_t n = (size_t)c->size, base = count / n, rem = count % n, r = (size_t)c->rank;
    if (!base && !rem)
        return 0;
    uint64_t t0 = ftc_now_ns();
    int prev, rc = begin(c, op, t0, &prev);
    uint8_t *b = buf;
    if (!rc && !rem) { /* even chunks: in place, as bytes */
        rc = enq(c, op, t0, "ncclAllGather",
                 ncclAllGather(b + r * base * es, b, base * es, ncclUint8, p->comm, p->stream));
    } else if (!rc) {
        size_t m = base + 1, off, len;
        ftc_coll_chunk(count, c->size, c->rank, &off, &len);
        rc = ensure_scratch(c, op, t0, n * m * es);
        uint8_t *s = p->scratch;
        if (!rc)
            rc = cu(c, op, t0, "cudaMemcpyAsync",
                    cudaMemcpyAsync(s + r * m * es, b + off * es, len * es,
                                    cudaMemcpyDeviceToDevice, p->stream));
        if (!rc)
            rc = enq(c, op, t0, "ncclAllGather",
                     ncclAllGather(s + r * m * es, s, m * es, ncclUint8, p->comm, p->stream));
        if (!rc) /* the NCCL kernel on the stream before the copies back */
            rc = settle(c, op, t0, dl);
        if (!rc)
            rc = cu(c, op, t0, "cudaMemcpyAsync",
                    cudaMemcpyAsync(b, s, rem * m * es, cudaMemcpyDeviceToDevice, p->stream));
        if (!rc)
            rc = cu(c, op, t0, "cudaMemcpy2DAsync",
                    copy_rows(b + rem * m * es, base * es, s + rem * m * es, m * es, base * es,
                              n - rem, p->stream));
    }
    if (!rc)
        rc = wait_done(c, op, t0, dl);
    return end(c, prev, rc);
}

static int n_broadcast(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, int root,
                       ftc_deadline_t dl)
{
    nccl_t *p = c->impl;
    size_t bytes = count * ftc_coll_dtype_size(dt);
    if (!bytes)
        return 0;
    uint64_t t0 = ftc_now_ns();
    int prev, rc = begin(c, "broadcast", t0, &prev);
    if (!rc)
        rc = enq(c, "broadcast", t0, "ncclBroadcast",
                 ncclBroadcast(buf, buf, bytes, ncclUint8, root, p->comm, p->stream));
    if (!rc)
        rc = wait_done(c, "broadcast", t0, dl);
    return end(c, prev, rc);
}

static int n_barrier(ftc_coll_t *c, ftc_deadline_t dl)
{
    nccl_t *p = c->impl;
    uint64_t t0 = ftc_now_ns();
    int prev, rc = begin(c, "barrier", t0, &prev);
    if (!rc)
        rc = enq(c, "barrier", t0, "ncclAllReduce",
                 ncclAllReduce(p->one, p->one, 1, ncclFloat, ncclSum, p->comm, p->stream));
    if (!rc)
        rc = wait_done(c, "barrier", t0, dl);
    return end(c, prev, rc);
}

/* Only the flag (set by ftc_coll_abort before this): the polling thread
 * aborts the NCCL communicator. Async-signal-safe. */
static void n_abort(ftc_coll_t *c) { (void)c; }

static void release(nccl_t *p)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    cudaSetDevice(p->device);
    if (p->comm) {
        /* a healthy communicator: finalize (bounded), else abort */
        int done = 0;
        ncclResult_t fr = ncclCommFinalize(p->comm);
        if (fr == ncclSuccess || fr == ncclInProgress) {
            ftc_deadline_t dl = ftc_deadline_in_ms(2000);
            unsigned spins = 0;
            for (;;) {
                ncclResult_t st = ncclSuccess;
                if (ncclCommGetAsyncError(p->comm, &st) != ncclSuccess || st != ncclInProgress) {
                    done = st == ncclSuccess;
                    break;
                }
                if (ftc_deadline_expired(dl))
                    break;
                backoff(&spins);
            }
        }
        if (done)
            ncclCommDestroy(p->comm);
        else
            ncclCommAbort(p->comm);
        p->comm = NULL;
    }
    if (p->stream)
        cudaStreamDestroy(p->stream);
    if (p->ready)
        cudaEventDestroy(p->ready);
    cudaFree(p->one);
    cudaFree(p->scratch);
    (void)cudaGetLastError();
    if (prev >= 0 && prev != p->device)
        cudaSetDevice(prev);
    free(p);
}

static void n_destroy(ftc_coll_t *c)
{
    nccl_t *p = c->impl;
    if (!p)
        return;
    /* a broken or aborted one may still run a kernel on a dead peer */
    if (p->comm && (c->broken || atomic_load(&c->aborted))) {
        cudaSetDevice(p->device);
        comm_abort(p, FTC_ECANCELED);
    }
    release(p);
    c->impl = NULL;
}

static const ftc_coll_ops_t NCCL_OPS = {
    .name = "nccl",
    .all_reduce = n_all_reduce,
    .reduce_scatter = n_reduce_scatter,
    .all_gather = n_all_gather,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .abort = n_abort,
    .destroy = n_destroy,
};

/* ---- create --------------------------------------------------------------- */

/* Wraps a ready NCCL communicator (on the current device). On failure the
 * comm is aborted. */
static int wrap(ncclComm_t comm, int rank, int size, int device, const ftc_coll_nccl_boot_t *o,
                ftc_coll_t **out, ftc_err_t *err)
{
    nccl_t *p = calloc(1, sizeof *p);
    if (!p) {
        ncclCommAbort(comm);
        return ftc_err_set(err, FTC_ENOMEM, "coll nccl: out of memory");
    }
    p->comm = comm, p->device = device, p->opts = *o;
    p->opts.dir = NULL, p->opts.redis = NULL, p->opts.job = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&p->ready, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&p->one, sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemset(p->one, 0, sizeof(float));
    if (e != cudaSuccess) {
        int rc = ftc_err_set(err, FTC_ECUDA, "coll nccl rank %d/%d on device %d: stream, event "
                                             "or buffer: %s (error %d)",
                             rank, size, device, cudaGetErrorString(e), (int)e);
        (void)cudaGetLastError();
        ncclCommAbort(comm);
        p->comm = NULL;
        release(p);
        return rc;
    }
    ftc_coll_t *c = ftc_coll_new(&NCCL_OPS, rank, size, p);
    if (!c) {
        ncclCommAbort(comm);
        p->comm = NULL;
        release(p);
        return ftc_err_set(err, FTC_ENOMEM, "coll nccl: out of memory");
    }
    *out = c;
    return 0;
}

int ftc_coll_nccl_create(int rank, int size, int cuda_device, const ftc_coll_nccl_boot_t *boot,
                         ftc_deadline_t dl, ftc_coll_t **out, ftc_err_t *err)
{
    if (out)
        *out = NULL;
    if (!out || !boot || boot->struct_size < sizeof *boot || size < 1 || rank < 0 ||
        rank >= size || cuda_device < 0)
        return ftc_err_set(err, FTC_EINVAL,
                           "coll nccl create: bad arguments (rank %d, size %d, device %d, boot "
                           "%p): initialise the boot options with FTC_COLL_NCCL_BOOT_INIT",
                           rank, size, cuda_device, (const void *)boot);
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || cuda_device >= ndev) {
        int rc = ftc_err_set(
            err, FTC_ECUDA, "coll nccl create rank %d/%d: CUDA device %d unusable (%d devices%s%s)",
            rank, size, cuda_device, e == cudaSuccess ? ndev : 0,
            e == cudaSuccess ? "" : "; cudaGetDeviceCount: ",
            e == cudaSuccess ? "" : cudaGetErrorString(e));
        (void)cudaGetLastError();
        return rc;
    }
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    if ((e = cudaSetDevice(cuda_device)) != cudaSuccess) {
        int rc = ftc_err_set(err, FTC_ECUDA, "coll nccl create: cudaSetDevice(%d): %s",
                             cuda_device, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return rc;
    }
    ncclUniqueId uid;
    memset(&uid, 0, sizeof uid);
    int rc = 0;
    if (boot->id) { /* agreed on already: no rendezvous */
        memcpy(uid.internal, boot->id, FTC_COLL_NCCL_ID_BYTES);
    } else {
        if (rank == 0) {
            ncclResult_t r = ncclGetUniqueId(&uid);
            if (r != ncclSuccess)
                rc = ftc_err_set(err, code_of(r), "coll nccl create: ncclGetUniqueId: %s; %s",
                                 ncclGetErrorString(r), ncclGetLastError(NULL));
        }
        if (!rc)
            rc = ftc_coll_nccl_rendezvous(boot, rank, size, (uint8_t *)uid.internal, dl, err);
    }
    ncclComm_t comm = NULL;
    if (!rc) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = ncclCommInitRankConfig(&comm, size, uid, rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            rc = ftc_err_set(err, code_of(r),
                             "coll nccl create rank %d/%d on device %d: ncclCommInitRankConfig: "
                             "%s; %s",
                             rank, size, cuda_device, ncclGetErrorString(r),
                             ncclGetLastError(comm));
            if (comm)
                ncclCommAbort(comm);
            comm = NULL;
        }
    }
    if (!rc) {
        char what[160];
        snprintf(what, sizeof what, "coll nccl create rank %d/%d on device %d: NCCL init", rank,
                 size, cuda_device);
        rc = wait_comm(&comm, boot->abort, dl, what, err);
        if (rc == FTC_EINVAL)
            ftc_err_wrap(err, "(one rank per GPU: two ranks on one device are refused)");
    }
    if (!rc)
        rc = wrap(comm, rank, size, cuda_device, boot, out, err);
    if (prev >= 0 && prev != cuda_device)
        cudaSetDevice(prev);
    return rc;
}

int ftc_coll_nccl_unique_id(uint8_t id[FTC_COLL_NCCL_ID_BYTES], ftc_err_t *err)
{
    _Static_assert(sizeof(ncclUniqueId) == FTC_COLL_NCCL_ID_BYTES, "NCCL's id is 128 bytes");
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess)
        return ftc_err_set(err, code_of(r), "coll nccl: ncclGetUniqueId: %s; %s",
                           ncclGetErrorString(r), ncclGetLastError(NULL));
    memcpy(id, uid.internal, FTC_COLL_NCCL_ID_BYTES);
    return 0;
}

/* ---- shrink --------------------------------------------------------------- */

int ftc_coll_nccl_shrink(ftc_coll_t *c, const int *excluded, int nexcluded, ftc_deadline_t dl,
                         ftc_coll_t **out, ftc_err_t *err)
{
    if (out)
        *out = NULL;
    if (!c || !out || c->ops != &NCCL_OPS)
        return ftc_err_set(err, c && out ? FTC_EUNSUPPORTED : FTC_EINVAL,
                           "coll nccl shrink: %s", !c || !out ? "NULL argument"
                                                              : "not an NCCL communicator");
    nccl_t *p = c->impl;
    if (nexcluded < 1 || nexcluded >= c->size || !excluded)
        return ftc_err_set(err, FTC_EINVAL,
                           "coll nccl shrink rank %d/%d: %d ranks to exclude (1..%d allowed)",
                           c->rank, c->size, nexcluded, c->size - 1);
    int below = 0;
    for (int i = 0; i < nexcluded; i++) {
        int x = excluded[i];
        if (x < 0 || x >= c->size || x == c->rank)
            return ftc_err_set(err, FTC_EINVAL,
                               "coll nccl shrink rank %d/%d: excluded rank %d is %s", c->rank,
                               c->size, x, x == c->rank ? "this rank" : "out of range");
        for (int j = 0; j < i; j++)
            if (excluded[j] == x)
                return ftc_err_set(err, FTC_EINVAL,
                                   "coll nccl shrink rank %d/%d: rank %d listed twice", c->rank,
                                   c->size, x);
        below += x < c->rank;
    }
#if HAVE_SHRINK
    if (!p->comm)
        return ftc_err_set(err, FTC_EUNSUPPORTED,
                           "coll nccl shrink rank %d/%d: the NCCL communicator was aborted by a "
                           "failure (%s); shrink needs boot.keep_on_failure = 1 — build a new "
                           "group instead",
                           c->rank, c->size, ftc_strerror(p->aborted_code));
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    cudaSetDevice(p->device);
    int flags = (c->broken || atomic_load(&c->aborted)) ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT;
    int *list = malloc((size_t)nexcluded * sizeof *list);
    if (!list)
        return ftc_err_set(err, FTC_ENOMEM, "coll nccl shrink: out of memory");
    memcpy(list, excluded, (size_t)nexcluded * sizeof *list);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nc = NULL;
    int rc = 0;
    char what[160];
    snprintf(what, sizeof what, "coll nccl shrink rank %d/%d -> %d/%d (%s)", c->rank, c->size,
             c->rank - below, c->size - nexcluded, flags ? "abort parent" : "healthy parent");
    ncclResult_t r = ncclCommShrink(p->comm, list, nexcluded, &nc, &cfg, flags);
    free(list);
    if (r != ncclSuccess && r != ncclInProgress) {
        rc = ftc_err_set(err, code_of(r), "%s: ncclCommShrink: %s; %s", what,
                         ncclGetErrorString(r), ncclGetLastError(p->comm));
        if (nc)
            ncclCommAbort(nc);
        nc = NULL;
    }
    if (!rc && nc)
        rc = wait_comm(&nc, p->opts.abort, dl, what, err);
    if (!rc && !nc)
        rc = ftc_err_set(err, FTC_EFABRIC, "%s: ncclCommShrink gave no communicator", what);
    if (!rc)
        rc = wrap(nc, c->rank - below, c->size - nexcluded, p->device, &p->opts, out, err);
    if (flags && !rc) /* the parent's operations were terminated: it is only good to destroy */
        c->broken = c->broken ? c->broken : FTC_ECANCELED;
    if (prev >= 0 && prev != p->device)
        cudaSetDevice(prev);
    return rc;
#else
    (void)dl, (void)below, (void)p;
    return ftc_err_set(err, FTC_EUNSUPPORTED,
                       "coll nccl shrink: NCCL %d has no ncclCommShrink (2.27 or later needed); "
                       "build a new group",
                       NCCL_VERSION_CODE);
#endif
}
