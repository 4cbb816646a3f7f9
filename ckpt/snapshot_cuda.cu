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

static void ftc__cuda_close(void *state)
{
    struct ftc__cuda_state *s = (struct ftc__cuda_state *)state;
    if (!s)
        return;
    for (int d = 0; d < FTC_CUDA_MAX_DEVICES; d++)
        if (s->stream[d]) {
            cudaSetDevice(d);
            cudaStreamDestroy(s->stream[d]);
        }
    free(s);
}

static int ftc__cuda_stream(struct ftc__cuda_state *s, int device, cudaStream_t *out, ftc_err_t *err)
{
    if (device < 0 || device >= FTC_CUDA_MAX_DEVICES)
        return ftc_err_set(err, FTC_EINVAL, "CUDA device %d out of range", device);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return ftc__cuda_err(err, e, "cudaSetDevice");
    if (!s->stream[device]) {
        e = cudaStreamCreateWithFlags(&s->stream[device], cudaStreamNonBlocking);
        if (e != cudaSuccess)
            return ftc__cuda_err(err, e, "cudaStreamCreateWithFlags");
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
    int rc = ftc__cuda_stream((struct ftc__cuda_state *)state, device, &st, err);
    if (rc)
        return rc;
    cudaError_t e = cudaMemcpyAsync(dst, src, len,
                                    to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        return ftc__cuda_err(err, e, "cudaMemcpyAsync");
    return 0;
}

static int ftc__cuda_sync(void *state, int device, ftc_deadline_t d, ftc_err_t *err)
{
    cudaStream_t st = NULL;
    int rc = ftc__cuda_stream((struct ftc__cuda_state *)state, device, &st, err);
    if (rc)
        return rc;
    for (;;) {
        cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return ftc__cuda_err(err, e, "snapshot stream");
        if (ftc_deadline_expired(d))
            return ftc_err_set(err, FTC_ETIMEDOUT, "device %d: snapshot copies still running at "
                                                   "the deadline", device);
        usleep(50);
    }
}

static const ftc_snap_device_ops_t ftc__cuda_ops = {
    sizeof(ftc_snap_device_ops_t), "cuda",       ftc__cuda_open, ftc__cuda_close,
    ftc__cuda_register,            ftc__cuda_unregister, ftc__cuda_copy, ftc__cuda_sync,
};

extern "C" const ftc_snap_device_ops_t *ftc_snap_cuda_ops(void) { return &ftc__cuda_ops; }
