/*
 * kernels.c — choosing the compute backend at run time (kernels.h): "cpu",
 * "cuda" or "auto". The CUDA table comes from kernels_cuda.cu once the CUDA
 * kernels land; until then this build has none, and "auto" means CPU.
 */
#include "trainer/kernels.h"

#include <string.h>

const ftc_kernels_t *ftc_kernels_cuda(void)
{
    return NULL; /* no CUDA kernels in this build yet */
}

const ftc_kernels_t *ftc_kernels_select(const char *name, ftc_err_t *err)
{
    if (!name || !*name || !strcmp(name, "auto")) {
        const ftc_kernels_t *k = ftc_kernels_cuda();
        return k ? k : ftc_kernels_cpu();
    }
    if (!strcmp(name, "cpu"))
        return ftc_kernels_cpu();
    if (!strcmp(name, "cuda")) {
        const ftc_kernels_t *k = ftc_kernels_cuda();
        if (!k)
            ftc_err_set(err, FTC_EUNSUPPORTED,
                        "backend 'cuda': this build has no CUDA kernels (use --backend cpu)");
        return k;
    }
    ftc_err_set(err, FTC_EINVAL, "unknown backend '%s' (cpu, cuda or auto)", name);
    return NULL;
}
