/*
 * gpu.h — is there a GPU, and was this build made with CUDA?
 *
 * The CUDA backend is chosen at run time: a build with CUDA runs on machines
 * without a GPU (cudaGetDeviceCount then fails cleanly, error 35 or 100) and
 * picks the CPU path. Everything CUDA stays behind this header and the .cu
 * files of each module; no public header includes cuda_runtime.h.
 */
#ifndef FTC_CORE_GPU_H
#define FTC_CORE_GPU_H

#include "core/err.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when this build contains the CUDA code. */
bool ftc_gpu_built(void);
/* Number of usable CUDA devices (0 when none, or when not built with CUDA).
 * Never fails hard: a driver or runtime error becomes 0 devices, and its text
 * goes to why (may be NULL). Thread-safe. */
int ftc_gpu_count(ftc_err_t *why);

#ifdef __cplusplus
}
#endif
#endif
