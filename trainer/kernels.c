/*
 * kernels.c — choosing the compute backend at run time (kernels.h): "cpu",
 * "cpu-bf16", "cuda", "cuda-bf16", "auto" or "auto-bf16". The CUDA tables
 * come from kernels_cuda.cu (kernels_cuda_none.c in a build without CUDA).
 */
#include "trainer/kernels.h"

#include "core/log.h"

#include <string.h>

const ftc_kernels_t *ftc_kernels_cuda(void)
{
    return ftc_kernels_cuda_probe(false, NULL);
}

const ftc_kernels_t *ftc_kernels_cuda_bf16(void)
{
    return ftc_kernels_cuda_probe(true, NULL);
}

static const ftc_kernels_t *ftc__chosen(const ftc_kernels_t *k, const char *asked, const char *why)
{
    if (k->device >= 0)
        FTC_INFO("kernels", "backend %s (asked: %s): CUDA device %d, %s; matmuls %s", k->name,
                 asked, k->device, k->device_desc,
                 k->matmul_bf16 ? "bf16 x bf16 -> fp32" : "fp32 (cuBLAS)");
    else
        FTC_INFO("kernels", "backend %s (asked: %s): %d CPU threads; matmuls %s%s%s", k->name,
                 asked, ftc_kernels_cpu_threads(),
                 k->matmul_bf16 ? "bf16-rounded operands, fp32 accumulation" : "fp32",
                 why ? "; not CUDA: " : "", why ? why : "");
    return k;
}

const ftc_kernels_t *ftc_kernels_select(const char *name, ftc_err_t *err)
{
    const char *asked = name && *name ? name : "auto";
    bool bf16 = !strcmp(asked, "auto-bf16") || !strcmp(asked, "cpu-bf16") ||
                !strcmp(asked, "cuda-bf16");
    if (!strcmp(asked, "auto") || !strcmp(asked, "auto-bf16")) {
        ftc_err_t why = {0};
        const ftc_kernels_t *k = ftc_kernels_cuda_probe(bf16, &why);
        if (k)
            return ftc__chosen(k, asked, NULL);
        return ftc__chosen(bf16 ? ftc_kernels_cpu_bf16() : ftc_kernels_cpu(), asked,
                           ftc_err_str(&why));
    }
    if (!strcmp(asked, "cpu") || !strcmp(asked, "cpu-bf16"))
        return ftc__chosen(bf16 ? ftc_kernels_cpu_bf16() : ftc_kernels_cpu(), asked, NULL);
    if (!strcmp(asked, "cuda") || !strcmp(asked, "cuda-bf16")) {
        ftc_err_t why = {0};
        const ftc_kernels_t *k = ftc_kernels_cuda_probe(bf16, &why);
        if (!k) {
            ftc_err_set(err, FTC_EUNSUPPORTED, "backend '%s': %s (use --backend cpu%s)", asked,
                        ftc_err_str(&why), bf16 ? "-bf16" : "");
            return NULL;
        }
        return ftc__chosen(k, asked, NULL);
    }
    ftc_err_set(err, FTC_EINVAL,
                "unknown backend '%s' (cpu, cpu-bf16, cuda, cuda-bf16, auto or auto-bf16)", name);
    return NULL;
}
