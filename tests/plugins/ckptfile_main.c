/*
 * ckptfile_main.c — an "unmodified" training binary for `ftc run --ckpt-dir`:
 * it knows nothing of ftc except the directory it is given, FTC_CKPT_DIR,
 * where rank 0 saves its whole state after every step (write a temp file,
 * rename it over ckpt.bin, the way PyTorch users save) and every rank loads
 * it at start, as a DDP trainer does.
 *
 * The state at step s is a pure function of s (so a load is checked byte for
 * byte) and the file carries an FNV-1a checksum of its contents.
 *
 * usage: ckptfile_main --steps N [--floats F] [--step-ms MS]
 *                      [--die-after S --die-rank R]
 * Prints "LOADED s OK" / "LOADED s BAD" / "LOADED NONE", "SAVED s" every 10
 * steps and "DONE s". Exit 1 on a bad load or an I/O error.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void fill(float *w, uint64_t n, int64_t step)
{
    for (uint64_t i = 0; i < n; i++)
        w[i] = (float)((step * 7919 + (int64_t)i * 31) % 10007) / 17.0f;
}

int main(int argc, char **argv)
{
    int64_t steps = 10, die_after = -1;
    int die_rank = -1, step_ms = 0;
    uint64_t floats = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--floats") && i + 1 < argc)
            floats = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc)
            step_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--die-after") && i + 1 < argc)
            die_after = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--die-rank") && i + 1 < argc)
            die_rank = atoi(argv[++i]);
        else {
            fprintf(stderr, "ckptfile_main: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dir = getenv("FTC_CKPT_DIR");
    int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
    if (rank != die_rank || (restarts && atoi(restarts) > 0))
        die_after = -1;
    if (!dir) {
        printf("ERROR: no FTC_CKPT_DIR\n");
        return 1;
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/ckpt.bin", dir);
    snprintf(tmp, sizeof tmp, "%s/.ckpt.bin.%d", dir, (int)getpid());
    size_t bytes = floats * sizeof(float);
    float *w = malloc(bytes), *e = malloc(bytes);
    int64_t start = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        int64_t s = -1;
        uint64_t n = 0, sum = 0;
        int ok = fread(&s, sizeof s, 1, f) == 1 && fread(&n, sizeof n, 1, f) == 1 &&
                 n == floats && fread(w, 1, bytes, f) == bytes &&
                 fread(&sum, sizeof sum, 1, f) == 1 && sum == fnv(w, bytes);
        fclose(f);
        if (ok) {
            fill(e, floats, s);
            ok = !memcmp(e, w, bytes);
        }
        printf("LOADED %lld %s\n", (long long)s, ok ? "OK" : "BAD");
        if (!ok)
            return 1;
        start = s + 1;
    } else {
        printf("LOADED NONE\n");
    }
    for (int64_t s = start; s < steps; s++) {
        fill(w, floats, s);
        if (step_ms) {
            struct timespec ts = {step_ms / 1000, (long)(step_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (rank == 0) {
            FILE *o = fopen(tmp, "wb");
            uint64_t n = floats, sum = fnv(w, bytes);
            if (!o || fwrite(&s, sizeof s, 1, o) != 1 || fwrite(&n, sizeof n, 1, o) != 1 ||
                fwrite(w, 1, bytes, o) != bytes || fwrite(&sum, sizeof sum, 1, o) != 1 ||
                fclose(o) != 0 || rename(tmp, path) != 0) {
                printf("ERROR: saving step %lld\n", (long long)s);
                return 1;
            }
            if (s % 10 == 0)
                printf("SAVED %lld\n", (long long)s);
        }
        if (s == die_after)
            raise(SIGKILL);
    }
    printf("DONE %lld\n", (long long)(steps - 1));
    free(w);
    free(e);
    return 0;
}
