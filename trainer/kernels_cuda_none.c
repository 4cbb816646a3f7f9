/* kernels_cuda_none.c — kernels.h's CUDA entry for builds without CUDA. */
#include "trainer/kernels.h"

const ftc_kernels_t *ftc_kernels_cuda_probe(bool bf16, ftc_err_t *why)
{
    (void)bf16;
    ftc_err_set(why, FTC_EUNSUPPORTED, "this ftc was built without CUDA (FTC_WITH_CUDA=OFF)");
    return NULL;
}

int ftc_kernels_cuda_use_device(int local_rank, int *device, ftc_err_t *err)
{
    (void)local_rank;
    if (device)
        *device = -1;
    return ftc_err_set(err, FTC_EUNSUPPORTED,
                       "this ftc was built without CUDA (FTC_WITH_CUDA=OFF)");
}
