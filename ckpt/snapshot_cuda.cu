/*
 * snapshot_cuda.cu — the device copy ops of ckpt/snapshot.h: slots pinned
 * with cudaHostRegister, device->host copies with cudaMemcpyAsync on one
 * non-blocking side stream per device (so they overlap the next forward and
 * backward pass on the default stream), and a sync that polls the stream
 * against a deadline instead of blocking in cudaStreamSynchronize.
 */
#include "ckpt/snapshot.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FTC_CUDA_MAX_DEVICES 16

struct ftc__cuda_state {
    cudaStream_t stream[FTC_CUDA_MAX_DEVICES]; /* created on first use */
};

static int ftc__cuda_err(ftc_err_t *err, cudaError_t e, const char *what)
{
    return ftc_err_set(err, FTC_ECUDA, "%s: %s (CUDA error %d)", what, cudaGetErrorString(e),
                       (int)e);
}

static int ftc__cuda_open(void **state, ftc_err_t *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return ftc_err_set(err, FTC_EUNSUPPORTED,
                           "a device tensor was registered but no CUDA device is usable (%s)",
                           e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    }
    struct ftc__cuda_state *s = (struct ftc__cuda_state *)calloc(1, sizeof *s);
    if (!s)
        return ftc_err_set(err, FTC_ENOMEM, "cuda snapshot state: out of memory");
    *state = s;
    return 0;
}

/* cudaSetDevice changes the calling host thread's current device: the ops
 * run on the trainer's thread (begin, restore), so each one puts back the
 * device it found. */
static int ftc__cuda_current(void)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return d;
}

static void ftc__cuda_back(int prev, int device)
{
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
}

static void ftc__cuda_close(void *state)
{
    struct ftc__cuda_state *s = (struct ftc__cuda_state *)state;
    if (!s)
        return;
    int prev = ftc__cuda_current();
    for (int d = 0; d < FTC_CUDA_MAX_DEVICES; d++)
        if (s->stream[d]) {
            cudaSetDevice(d);
            cudaStreamDestroy(s->stream[d]);
        }
    if (prev >= 0)
        cudaSetDevice(prev);
    (void)cudaGetLastError();
    free(s);
}

/* Makes device current (the previous one in *prev, for ftc__cuda_back) and
 * returns its snapshot stream, created on first use. */
static int ftc__cuda_stream(struct ftc__cuda_state *s, int device, cudaStream_t *out, int *prev,
                            ftc_err_t *err)
{
    *prev = -1;
    if (device < 0 || device >= FTC_CUDA_MAX_DEVICES)
        return ftc_err_set(err, FTC_EINVAL, "CUDA device %d out of range", device);
    *prev = ftc__cuda_current();
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return ftc__cuda_err(err, e, "cudaSetDevice");
    if (!s->stream[device]) {
        e = cudaStreamCreateWithFlags(&s->stream[device], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            s->stream[device] = NULL;
            ftc__cuda_back(*prev, device);
            return ftc__cuda_err(err, e, "cudaStreamCreateWithFlags");
        }
    }
    *out = s->stream[device];
    return 0;
}

static int ftc__cuda_register(void *state, void *base, uint64_t len, ftc_err_t *err)
{
    (void)state;
    cudaError_t e = cudaHostRegister(base, len, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ftc__cuda_err(err, e, "cudaHostRegister of the slot");
    }
    return 0;
}

static void ftc__cuda_unregister(void *state, void *base)
{
    (void)state;
    cudaHostUnregister(base);
}

static int ftc__cuda_copy(void *state, void *dst, const void *src, uint64_t len, int device,
                          bool to_host, ftc_err_t *err)
{
    cudaStream_t st = NULL;
    int prev = -1;
    int rc = ftc__cuda_stream((struct ftc__cuda_state *)state, device, &st, &prev, err);
    if (rc)
        return rc;
    cudaError_t e = cudaMemcpyAsync(dst, src, len,
                                    to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        rc = ftc__cuda_err(err, e, "cudaMemcpyAsync");
    ftc__cuda_back(prev, device);
    return rc;
}

static int ftc__cuda_sync(void *state, int device, ftc_deadline_t d, ftc_err_t *err)
{
    cudaStream_t st = NULL;
    int prev = -1;
    int rc = ftc__cuda_stream((struct ftc__cuda_state *)state, device, &st, &prev, err);
    if (rc)
        return rc;
    for (;;) {
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady) {
            rc = ftc__cuda_err(err, e, "snapshot stream");
            break;
        }
        if (ftc_deadline_expired(d)) {
            rc = ftc_err_set(err, FTC_ETIMEDOUT, "device %d: snapshot copies still running at "
                                                 "the deadline", device);
            break;
        }
        usleep(50);
    }
    ftc__cuda_back(prev, device);
    return rc;
}

static const ftc_snap_device_ops_t ftc__cuda_ops = {
    sizeof(ftc_snap_device_ops_t), "cuda",       ftc__cuda_open, ftc__cuda_close,
    ftc__cuda_register,            ftc__cuda_unregister, ftc__cuda_copy, ftc__cuda_sync,
};

extern "C" const ftc_snap_device_ops_t *ftc_snap_cuda_ops(void) { return &ftc__cuda_ops; }
