/*
 * bench_train.c — the reference trainer on the CPU backend, one process:
 * tokens/s per model size (tiny, small, medium), and the ratio of step time
 * with a checkpoint every step (snapshot of params + AdamW moments into a
 * shard region via ckpt/snapshot.h, then a persist-tier write: zstd, fsync,
 * rename) to step time without. Both are measured in the same run on the
 * generated corpus. The 2- and 4-rank numbers come with the collectives.
 *
 *   bench_train [--quick] [--dir DIR]    (DIR: where checkpoints go; default
 *                                         $TMPDIR or /tmp)
 */
#include "core/clock.h"
#include "core/log.h"
#include "trainer/kernels.h"
#include "trainer/train.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int B, T, steps, ckpt_steps; /* ckpt_steps 0: no checkpoint comparison */
} bench_size_t;

static void rmrf_versions(const char *dir)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_train: could not remove %s\n", dir);
}

/* Mean seconds per step over `steps` steps after one warm-up step. */
static double time_steps(ftc_train_options_t *o, int steps, double *ckpt_s, size_t *params)
{
    ftc_err_t err = {0};
    o->steps = (uint64_t)steps + 1;
    ftc_trainer_t *t = ftc_trainer_create(o, &err);
    if (!t) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        exit(1);
    }
    *params = ftc_model_num_params(ftc_trainer_model(t));
    ftc_train_stats_t st;
    double total = 0.0, ck = 0.0;
    for (int s = 0; s <= steps; s++) {
        if (ftc_trainer_step(t, &st, &err) < 0) {
            fprintf(stderr, "bench_train: %s\n", err.msg);
            exit(1);
        }
        if (s > 0) {
            total += st.seconds;
            ck += st.ckpt_seconds;
        }
    }
    ftc_trainer_destroy(t);
    if (ckpt_s)
        *ckpt_s = ck / steps;
    return total / steps;
}

int main(int argc, char **argv)
{
    bool quick = false;
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            base = argv[++i];
        else {
            fprintf(stderr, "usage: bench_train [--quick] [--dir DIR]\n");
            return 2;
        }
    }
    ftc_log_configure(FTC_LOG_WARN, NULL);
    const bench_size_t sizes[] = {
        {"tiny", 8, 64, quick ? 5 : 20, quick ? 5 : 20},
        {"small", 4, 128, quick ? 2 : 5, quick ? 2 : 5},
        {"medium", 1, 256, quick ? 1 : 2, quick ? 0 : 2},
    };
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/bench_train.%d", base, (int)getpid());
    printf("bench_train: CPU backend, %d OpenMP thread(s), 1 process, generated corpus\n",
           ftc_kernels_cpu_threads());
    printf("%-7s %11s %9s %10s %12s | %12s %12s %7s\n", "model", "params", "B x T", "step ms",
           "tokens/s", "ckpt step ms", "ckpt part ms", "ratio");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const bench_size_t *b = &sizes[i];
        ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
        ftc_err_t err = {0};
        if (ftc_model_preset(b->name, &o.model, &err) < 0)
            return 1;
        o.micro_batch = b->B;
        o.seq_len = b->T;
        o.corpus_bytes = 1u << 20;
        o.job_id = "bench-train";
        size_t params = 0;
        double plain = time_steps(&o, b->steps, NULL, &params);
        double tok_s = (double)b->B * b->T / plain;
        printf("%-7s %11zu %4d x %-4d %10.1f %12.0f |", b->name, params, b->B, b->T, plain * 1e3,
               tok_s);
        if (b->ckpt_steps) {
            o.ckpt_dir = dir;
            o.ckpt_every = 1;
            double ck_part = 0.0;
            double with = time_steps(&o, b->ckpt_steps, &ck_part, &params);
            rmrf_versions(dir);
            printf(" %12.1f %12.1f %6.2fx\n", with * 1e3, ck_part * 1e3, with / plain);
        } else {
            printf(" %12s %12s %7s\n", "-", "-", "-");
        }
        fflush(stdout);
    }
    printf("ratio = step time with a checkpoint (snapshot + persist, fsync'd) every step / "
           "without.\n");
    return 0;
}
