/*
 * gpu.cu — the CUDA side of gpu.h: counts devices through the runtime API.
 * Compiled only when the build has CUDA (FTC_WITH_CUDA).
 */
#include "core/gpu.h"

#include <cuda_runtime.h>

extern "C" bool ftc_gpu_built(void) { return true; }

extern "C" int ftc_gpu_count(ftc_err_t *why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        ftc_err_set(why, FTC_ECUDA, "cudaGetDeviceCount: %s (error %d)", cudaGetErrorString(e),
                    (int)e);
        (void)cudaGetLastError(); /* clear the sticky error for later callers */
        return 0;
    }
    return n;
}
