/*
 * bench_train.c — the reference trainer on the CPU backend: tokens/s per
 * model size (tiny, small, medium) in deterministic mode with 1, 2 and 4
 * real DP rank processes (ZeRO-1 over the CPU collectives, tcp;ofi_rxm or
 * $FI_PROVIDER, one OpenMP thread per rank; the same global batch of 4
 * micro-batches whatever the rank count), and the ratio of step time with a
 * checkpoint every step (one process: snapshot of params + AdamW moments into
 * a shard region via ckpt/snapshot.h, then a persist-tier write: zstd, fsync,
 * rename) to step time without. All on the generated corpus.
 *
 *   bench_train [--quick] [--dir DIR]    (DIR: where checkpoints go; default
 *                                         $TMPDIR or /tmp)
 */
#include "core/clock.h"
#include "core/log.h"
#include "trainer/dist.h"
#include "trainer/kernels.h"
#include "trainer/train.h"

#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* Mean seconds per step of rank 0 among n forked DP rank processes. */
static double time_dp(const ftc_train_options_t *o0, int n, int steps, const char *base,
                      bool ckpt)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/bench_train_rdzv.%d.%d", base, (int)getpid(), n);
    mkdir(dir, 0700);
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(stdout);
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[0]);
            ftc_kernels_cpu_set_threads(1);
            ftc_err_t err = {0};
            ftc_dist_t *d = NULL;
            ftc_dist_opts_t dop = {.world = n, .tp = 1, .rank = r, .dir = dir, .timeout_ms = 60000};
            if (n > 1 && ftc_dist_join(&dop, &d, &err) < 0) {
                fprintf(stderr, "bench_train: rank %d: %s\n", r, err.msg);
                _exit(1);
            }
            ftc_train_options_t o = *o0;
            o.dp_coll = d ? d->dp : NULL;
            char ck[PATH_MAX + 16];
            snprintf(ck, sizeof ck, "%s/ckpt", dir);
            if (ckpt) { /* every rank persists its ZeRO-1 chunk every step */
                o.ckpt_dir = ck;
                o.ckpt_every = 1;
            }
            size_t params;
            double s = time_steps(&o, steps, NULL, &params);
            if (r == 0 && write(fds[1], &s, sizeof s) != (ssize_t)sizeof s)
                _exit(1);
            ftc_dist_destroy(d);
            _exit(0);
        }
    }
    close(fds[1]);
    double s = -1;
    if (read(fds[0], &s, sizeof s) != (ssize_t)sizeof s)
        s = -1;
    close(fds[0]);
    for (int r = 0; r < n; r++)
        waitpid(pids[r], NULL, 0);
    rmrf_versions(dir);
    return s;
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
    printf("bench_train: CPU backend, %d OpenMP thread(s) in the 1-process columns, generated "
           "corpus, %ld online cores\n", ftc_kernels_cpu_threads(), sysconf(_SC_NPROCESSORS_ONLN));
    printf("real DP, deterministic, global batch 4 x B x T, 1 thread per rank (tokens/s):\n");
    printf("%-7s %9s %10s %10s %10s | %s\n", "model", "B x T", "1 rank", "2 ranks", "4 ranks",
           "2 ranks, ckpt every step: ratio");
    for (int i = 0; i < 3; i++) {
        static const char *const names[] = {"tiny", "small", "medium"};
        static const int BT[3][2] = {{8, 64}, {4, 128}, {1, 256}};
        if (quick && i == 2)
            break;
        ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
        ftc_err_t err = {0};
        if (ftc_model_preset(names[i], &o.model, &err) < 0)
            return 1;
        o.micro_batch = BT[i][0];
        o.seq_len = BT[i][1];
        o.micro_steps = 4;
        o.deterministic = true;
        o.corpus_bytes = 1u << 20;
        o.job_id = "bench-train";
        int steps = quick ? 1 : (i == 0 ? 10 : 2);
        printf("%-7s %4d x %-4d", names[i], BT[i][0], BT[i][1]);
        double two = 0;
        for (int n = 1; n <= 4; n *= 2) {
            double s = time_dp(&o, n, steps, base, false);
            printf(" %10.0f", s > 0 ? 4.0 * BT[i][0] * BT[i][1] / s : 0.0);
            fflush(stdout);
            if (n == 2)
                two = s;
        }
        double ck = time_dp(&o, 2, steps, base, true);
        printf(" | %6.2fx\n", two > 0 && ck > 0 ? ck / two : 0.0);
    }
    printf("one process, fp32 accumulation, with and without a checkpoint every step:\n");
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
