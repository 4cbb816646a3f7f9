/*
 * bench_coll.c — all-reduce bandwidth of the trainer's CPU collectives
 * (trainer/coll.h over libfabric) between two local processes, over
 * tcp;ofi_rxm and shm, at 1, 16 and 64 MiB of floats, next to memcpy of the
 * same size in the same run.
 *
 * Reported: algorithm bandwidth (bytes / time) and bus bandwidth
 * (2 (n-1)/n x bytes / time, NCCL's convention; equal for n = 2), best of
 * --reps, each all-reduce preceded by a barrier; memcpy GB/s and the ratio of
 * bus bandwidth to memcpy.
 *
 * Usage: bench_coll [--reps N] [--providers "tcp;ofi_rxm,shm"]
 */
#include "core/clock.h"
#include "core/fabric.h"
#include "trainer/coll.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static const size_t SIZES[] = {1 * MiB, 16 * MiB, 64 * MiB};
#define NSIZES (sizeof SIZES / sizeof *SIZES)

static double memcpy_gbs(size_t bytes, int reps)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        return 0;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        uint64_t t0 = ftc_now_ns();
        memcpy(b, a, bytes);
        double s = (double)(ftc_now_ns() - t0) / 1e9;
        if (r && s < best)
            best = s;
        a[r % bytes] = b[(r * 7) % bytes];
    }
    free(a);
    free(b);
    return (double)bytes / best / 1e9;
}

/* One rank: returns 0 and, on rank 0, fills best[] with seconds. */
static int rank_main(const char *prov, const char *dir, int rank, int reps, double *best)
{
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    fo.provider = prov;
    ftc_fabric_t *fab = NULL;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&fo, &fab, &err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 1;
    }
    uint8_t me[FTC_FABRIC_ADDR_MAX], addrs[2 * FTC_FABRIC_ADDR_MAX];
    size_t melen = sizeof me, lens[2];
    ftc_fabric_getname(fab, me, &melen);
    if (ftc_coll_exchange_dir(dir, rank, 2, me, melen, addrs, lens, ftc_deadline_in_ms(30000),
                              &err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        ftc_fabric_close(fab);
        return 1;
    }
    ftc_coll_t *c = NULL;
    if (ftc_coll_cpu_create(fab, rank, 2, addrs, lens, NULL, &c, &err) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 1;
    }
    int rc = 0;
    for (size_t k = 0; k < NSIZES && !rc; k++) {
        size_t n = SIZES[k] / sizeof(float);
        float *f = malloc(SIZES[k]);
        if (!f) {
            rc = 1;
            break;
        }
        for (size_t i = 0; i < n; i++)
            f[i] = (float)(i % 1000) * 1e-3f;
        best[k] = 1e30;
        for (int r = 0; r < reps + 1 && !rc; r++) { /* the first is a warm-up */
            ftc_deadline_t dl = ftc_deadline_in_ms(60000);
            if (ftc_coll_barrier(c, dl) < 0) {
                rc = 1;
                break;
            }
            uint64_t t0 = ftc_now_ns();
            if (ftc_coll_all_reduce(c, f, n, FTC_COLL_F32, dl) < 0) {
                rc = 1;
                break;
            }
            double s = (double)(ftc_now_ns() - t0) / 1e9;
            if (r && s < best[k])
                best[k] = s;
        }
        if (rc)
            fprintf(stderr, "rank %d: %s\n", rank, ftc_coll_errmsg(c));
        free(f);
    }
    ftc_coll_destroy(c);
    return rc;
}

int main(int argc, char **argv)
{
    int reps = 5;
    const char *provs = "tcp;ofi_rxm,shm";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--providers") && i + 1 < argc)
            provs = argv[++i];
        else {
            fprintf(stderr, "usage: bench_coll [--reps N] [--providers \"tcp;ofi_rxm,shm\"]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    unsetenv("FI_PROVIDER");
    double mc[NSIZES];
    for (size_t k = 0; k < NSIZES; k++)
        mc[k] = memcpy_gbs(SIZES[k], reps);
    printf("all-reduce (float, rank-order sum), 2 ranks on this machine, best of %d\n", reps);
    printf("%-13s %8s %10s %12s %12s %10s\n", "provider", "MiB", "ms", "algbw GB/s",
           "busbw GB/s", "/ memcpy");
    for (size_t k = 0; k < NSIZES; k++)
        printf("%-13s %8zu %10s %12s %12.2f %10s\n", "memcpy", SIZES[k] >> 20, "-", "-", mc[k],
               "1.00");
    char list[256];
    snprintf(list, sizeof list, "%s", provs);
    int status = 0;
    for (char *save = NULL, *prov = strtok_r(list, ",", &save); prov;
         prov = strtok_r(NULL, ",", &save)) {
        char dir[] = "/tmp/bench_coll-XXXXXX";
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        int pfd[2];
        if (pipe(pfd) < 0)
            return 1;
        fflush(stdout);
        pid_t kids[2];
        for (int r = 0; r < 2; r++) {
            kids[r] = fork();
            if (kids[r] == 0) {
                double best[NSIZES] = {0};
                int rc = rank_main(prov, dir, r, reps, best);
                if (r == 0 && !rc)
                    (void)!write(pfd[1], best, sizeof best);
                _exit(rc);
            }
        }
        close(pfd[1]);
        double best[NSIZES];
        ssize_t got = read(pfd[0], best, sizeof best);
        close(pfd[0]);
        int ok = 1;
        for (int r = 0; r < 2; r++) {
            int st = 0;
            waitpid(kids[r], &st, 0);
            ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        for (int r = 0; r < 2; r++) {
            char p[512];
            snprintf(p, sizeof p, "%s/%d.addr", dir, r);
            unlink(p);
        }
        rmdir(dir);
        if (!ok || got != (ssize_t)sizeof best) {
            printf("%-13s failed (see stderr)\n", prov);
            status = 1;
            continue;
        }
        for (size_t k = 0; k < NSIZES; k++) {
            double alg = (double)SIZES[k] / best[k] / 1e9, bus = alg * 2.0 * (2 - 1) / 2;
            printf("%-13s %8zu %10.2f %12.2f %12.2f %10.2f\n", prov, SIZES[k] >> 20,
                   best[k] * 1e3, alg, bus, bus / mc[k]);
        }
    }
    return status;
}
