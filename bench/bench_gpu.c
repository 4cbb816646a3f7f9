/*
 * bench_gpu.c — the reference trainer and the snapshot engine on a CUDA
 * device, in one short run (scripts/gpu-check runs it on the lent H200):
 *
 *   1. Training throughput per backend (default "cuda" and "cuda-bf16"):
 *      --warmup steps, then --steps timed optimizer steps of the GPT
 *      (--model, default gpt2-small; --micro-batch, --seq-len) on the
 *      generated corpus. Prints tokens/s, the model FLOP rate counted as
 *      6 * N_params * tokens / s (forward + backward, attention's T^2 term
 *      and the optimizer not counted, as is usual for MFU), and the MFU
 *      against the H200's dense peaks of kernels.h: bf16 for "cuda-bf16",
 *      TF32 for "cuda" (its fp32 SGEMMs run without TF32, so its MFU is
 *      also given against the plain fp32 peak).
 *   2. Snapshot copy from device memory: --snap-bytes (default 1 GiB) in 8
 *      tensors allocated with the backend's mem_alloc, registered with
 *      ftc_snap_add on the device, copied into a formatted host region by
 *      ftc_snap_begin .. ftc_snap_wait_copy (cudaMemcpyAsync on the snapshot
 *      side stream); GB/s best of --reps, next to a plain synchronous
 *      device-to-host mem_copy of the same bytes into the same region.
 *
 *   bench_gpu [--model NAME] [--backends cuda,cuda-bf16] [--micro-batch B]
 *             [--seq-len T] [--steps N] [--warmup N] [--snap-bytes SIZE]
 *             [--reps N]
 *
 * Without a CUDA device: prints "SKIPPED: no CUDA device" and exits 77 (1
 * with FTC_REQUIRE_GPU=1). Exits 1 when something fails to run; never for a
 * slow figure.
 */
#include "ckpt/snapshot.h"
#include "core/clock.h"
#include "core/log.h"
#include "trainer/kernels.h"
#include "trainer/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int train_bench(const char *backend, const char *model, int B, int T, int steps, int warmup)
{
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    ftc_err_t err = {0};
    if (ftc_model_preset(model, &o.model, &err) < 0) {
        fprintf(stderr, "bench_gpu: %s\n", ftc_err_str(&err));
        return -1;
    }
    o.backend = backend;
    o.micro_batch = B;
    o.seq_len = T;
    o.steps = (uint64_t)(steps + warmup);
    o.corpus_bytes = (uint64_t)B * (uint64_t)(T + 1) * (uint64_t)(steps + warmup + 2) + (1u << 20);
    ftc_trainer_t *t = ftc_trainer_create(&o, &err);
    if (!t) {
        fprintf(stderr, "bench_gpu: %s: %s\n", backend, ftc_err_str(&err));
        return -1;
    }
    const ftc_kernels_t *k = ftc_model_kernels(ftc_trainer_model(t));
    double nparams = (double)ftc_model_num_params(ftc_trainer_model(t));
    ftc_train_stats_t st;
    uint64_t tokens = 0;
    double t0 = 0.0;
    float first = 0.0f, last = 0.0f;
    for (int i = 0; i < steps + warmup; i++) {
        if (i == warmup) {
            k->sync();
            t0 = (double)ftc_now_ns() * 1e-9;
        }
        if (ftc_trainer_step(t, &st, &err) < 0) {
            fprintf(stderr, "bench_gpu: %s step %d: %s\n", backend, i, ftc_err_str(&err));
            ftc_trainer_destroy(t);
            return -1;
        }
        if (i == 0)
            first = st.loss;
        last = st.loss;
        if (i >= warmup)
            tokens += st.tokens;
    }
    k->sync();
    double secs = (double)ftc_now_ns() * 1e-9 - t0;
    double tps = (double)tokens / secs, flops = 6.0 * nparams * tps;
    printf(
        "train %-10s %s B=%d T=%d: %d steps in %.3f s, %.0f tokens/s, %.1f TFLOP/s (6*N*tokens), "
        "loss %.4f -> %.4f\n",
        backend, model, B, T, steps, secs, tps, flops * 1e-12, (double)first, (double)last);
    if (k->matmul_bf16)
        printf("  MFU %.1f%% of the H200 dense bf16 peak (%.0f TFLOP/s)\n",
               100.0 * flops * 1e-12 / FTC_H200_PEAK_BF16_TFLOPS, FTC_H200_PEAK_BF16_TFLOPS);
    else
        printf("  MFU %.1f%% of the H200 dense TF32 peak (%.0f TFLOP/s); %.1f%% of the fp32 "
               "(non-tensor) peak (%.0f TFLOP/s)\n",
               100.0 * flops * 1e-12 / FTC_H200_PEAK_TF32_TFLOPS, FTC_H200_PEAK_TF32_TFLOPS,
               100.0 * flops * 1e-12 / FTC_H200_PEAK_FP32_TFLOPS, FTC_H200_PEAK_FP32_TFLOPS);
    ftc_trainer_destroy(t);
    return 0;
}

static int snap_bench(const ftc_kernels_t *k, uint64_t bytes, int reps)
{
    enum { NT = 8 };
    ftc_err_t err = {0};
    uint64_t per = (bytes / NT) & ~(uint64_t)63;
    void *dev[NT] = {0};
    int rc = -1;
    uint8_t *region = NULL;
    ftc_shard_info_t info;
    memset(&info, 0, sizeof info);
    snprintf(info.job_id, sizeof info.job_id, "bench-gpu");
    info.generation = 1;
    info.dp = info.tp = info.pp = 1;
    ftc_snap_t *s = ftc_snap_create(&info, 0, 64, &err);
    if (!s)
        goto out;
    for (int i = 0; i < NT; i++) {
        if (!(dev[i] = k->mem_alloc(per))) {
            ftc_err_set(&err, FTC_ENOMEM, "device memory for %llu bytes",
                        (unsigned long long)per);
            goto out;
        }
        k->mem_zero(dev[i], per);
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        uint64_t shape[1] = {per / 4};
        if (ftc_snap_add(s, name, FTC_DTYPE_F32, 1, shape, dev[i], k->device, &err) < 0)
            goto out;
    }
    k->sync(); /* the snapshot's side stream does not wait for the default stream */
    uint64_t size = ftc_snap_size(s);
    region = aligned_alloc(4096, (size + 4095) & ~(uint64_t)4095);
    if (!region) {
        ftc_err_set(&err, FTC_ENOMEM, "host region of %llu bytes", (unsigned long long)size);
        goto out;
    }
    if (ftc_snap_format(s, region, &err) < 0)
        goto out;
    double best_snap = 0.0, best_copy = 0.0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = ftc_now_ns();
        if (ftc_snap_begin(s, region, (uint64_t)r + 1, 1, "x", 1, &err) < 0 ||
            ftc_snap_wait_copy(s, ftc_deadline_in_ms(120000), &err) < 0)
            goto out;
        double gbs = (double)(per * NT) / (double)(ftc_now_ns() - t0);
        if (ftc_snap_wait_sealed(s, ftc_deadline_in_ms(120000), &err) < 0)
            goto out;
        best_snap = gbs > best_snap ? gbs : best_snap;
        t0 = ftc_now_ns();
        for (int i = 0; i < NT; i++)
            k->mem_copy(region + (size - per * NT) + (uint64_t)i * per, dev[i], per, FTC_COPY_D2H);
        gbs = (double)(per * NT) / (double)(ftc_now_ns() - t0);
        best_copy = gbs > best_copy ? gbs : best_copy;
    }
    printf("snapshot from device memory: %.2f GiB in %d tensors: %.2f GB/s (snapshot engine), "
           "%.2f GB/s (mem_copy D2H into the same region), best of %d\n",
           (double)(per * NT) / (double)(1u << 30), NT, best_snap, best_copy, reps);
    rc = 0;
out:
    if (rc < 0)
        fprintf(stderr, "bench_gpu: snapshot: %s\n", ftc_err_str(&err));
    ftc_snap_destroy(s);
    free(region);
    for (int i = 0; i < NT; i++)
        k->mem_free(dev[i]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = "gpt2-small";
    char backends[128] = "cuda,cuda-bf16";
    int B = 8, T = 1024, steps = 10, warmup = 2, reps = 3;
    uint64_t snap_bytes = 1ull << 30;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--backends") && i + 1 < argc)
            snprintf(backends, sizeof backends, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--micro-batch") && i + 1 < argc)
            B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq-len") && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--snap-bytes") && i + 1 < argc)
            snap_bytes = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: bench_gpu [--model NAME] [--backends cuda,cuda-bf16] "
                            "[--micro-batch B] [--seq-len T] [--steps N] [--warmup N] "
                            "[--snap-bytes BYTES] [--reps N]\n");
            return 2;
        }
    }
    if (B < 1 || T < 1 || steps < 1 || warmup < 0 || reps < 1 || snap_bytes < 4096) {
        fprintf(stderr, "bench_gpu: B, T, steps, reps >= 1, warmup >= 0, snap-bytes >= 4096\n");
        return 2;
    }
    ftc_err_t why = {0};
    const ftc_kernels_t *k = ftc_kernels_cuda_probe(false, &why);
    if (!k) {
        const char *req = getenv("FTC_REQUIRE_GPU");
        if (req && !strcmp(req, "1")) {
            fprintf(stderr, "bench_gpu: FTC_REQUIRE_GPU=1 but %s\n", ftc_err_str(&why));
            return 1;
        }
        printf("SKIPPED: no CUDA device (%s)\n", ftc_err_str(&why));
        return 77;
    }
    printf("bench_gpu on %s\n", k->device_desc);
    int failed = 0;
    for (char *save = NULL, *b = strtok_r(backends, ",", &save); b; b = strtok_r(NULL, ",", &save))
        failed |= train_bench(b, model, B, T, steps, warmup) < 0;
    failed |= snap_bench(k, snap_bytes, reps) < 0;
    return failed ? 1 : 0;
}
