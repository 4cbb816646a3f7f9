/* gpu_none.c — gpu.h for builds without CUDA: no devices, ever. */
#include "core/gpu.h"

bool ftc_gpu_built(void) { return false; }

int ftc_gpu_count(ftc_err_t *why)
{
    ftc_err_set(why, FTC_EUNSUPPORTED, "this ftc was built without CUDA");
    return 0;
}
