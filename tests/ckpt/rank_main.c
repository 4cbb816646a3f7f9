/*
 * rank_main.c — a rank process for the agent tests, linked with libftc like
 * a real trainer: it registers two fp32 tensors and an int64 scalar whose
 * values at step s are a pure function of (seed, rank, s), checkpoints every
 * step through include/ftc.h, and can restore at start and check that the
 * restored state is exactly the one of the restored step.
 *
 * usage: rank_main --steps N [--restore] [--floats F] [--step-ms MS]
 *                  [--die-after S [--die-rank R]] [--seed X] [--no-commit] [--strict]
 *                  [--fetch R[:S]] [--timing]
 * --fetch reads rank R's shard of the newest committed step (or of step S)
 * through ftc_fetch at the end and checks it against R's values:
 * "FETCHED R s OK".
 * --die-rank limits --die-after to one rank, and only in the first run of
 * an `ftc run` job (TORCHELASTIC_RESTART_COUNT unset or 0). --strict makes
 * an ERROR or a BAD restore exit with status 1 (for `ftc run`, where a
 * failing rank must fail the generation).
 * Prints "RESTORED s OK" / "RESTORED s BAD" / "RESTORE NONE: why",
 * "CHECKPOINTED s" / "SKIPPED s" (the agent's busy policy skipped it),
 * "COMMITTED s" (not waited for with --no-commit), "STATUS rank R world W
 * committed C checkpoints N skipped K" (ftc_ckpt_status at the end), and "ERROR: why". Identity
 * comes from FTC_* variables.
 * --timing adds lines for bench/bench_recover.c, T = wall-clock ms (CLOCK_REALTIME):
 *   "TIMING rank R gen G exec T"           at the start of main
 *   "TIMING rank R gen G ready T"          libftc connected, tensors registered
 *   "TIMING rank R gen G restored S ms X at T"  ftc_restore returned step S after X ms
 *   "TIMING rank R gen G verified ms X at T"    the byte-for-byte check of it took X ms
 *   "TIMING rank R gen G step S at T"      step S done (state filled, checkpointed, slept)
 */
#include "core/config.h"
#include "ftc.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static float value(uint64_t seed, int rank, int64_t step, uint64_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)rank << 40 ^ (uint64_t)step << 20 ^ i;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
    return (float)(x % 100000) / 1000.0f - 50.0f;
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fill(float *w, float *m, int64_t *sc, uint64_t n, uint64_t seed, int rank, int64_t s)
{
    for (uint64_t i = 0; i < n; i++) {
        w[i] = value(seed, rank, s, i);
        m[i] = value(seed + 1, rank, s, i);
    }
    *sc = s * 1000 + rank;
}

/* True when w and m hold exactly fill's values of (seed, rank, s), bit for
 * bit; checked element by element, without a second copy of the state (a
 * 1 GiB rank would need another GiB). */
static bool filled_with(const float *w, const float *m, uint64_t n, uint64_t seed, int rank,
                        int64_t s)
{
    for (uint64_t i = 0; i < n; i++) {
        float ew = value(seed, rank, s, i), em = value(seed + 1, rank, s, i);
        if (memcmp(&ew, &w[i], 4) || memcmp(&em, &m[i], 4))
            return false;
    }
    return true;
}

/* The number of a flag or variable, strictly (ftc_parse_int): atoi took
 * "5x" as 5 and "x" as 0, so a typo in a test's command line ran another
 * test than the one written. Exits 2 naming it. */
static int64_t num(const char *name, const char *v, int64_t lo, int64_t hi)
{
    int64_t x = 0;
    if (!v || ftc_parse_int(v, lo, hi, &x) < 0) {
        fprintf(stderr, "rank_main: %s \"%s\" is not a whole decimal number in %lld..%lld\n",
                name, v ? v : "", (long long)lo, (long long)hi);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    int64_t steps = 5, die_after = -1;
    uint64_t floats = 1 << 16, seed = 7;
    int step_ms = 0;
    int restore = 0, no_commit = 0, die_rank = -1, strict = 0, fetch = -1, timing = 0;
    int64_t fetch_step = -1;
    long long t_exec = wall_ms();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = num("--steps", argv[++i], 0, INT64_MAX);
        else if (!strcmp(argv[i], "--restore"))
            restore = 1;
        else if (!strcmp(argv[i], "--floats") && i + 1 < argc)
            floats = (uint64_t)num("--floats", argv[++i], 1, INT64_MAX / 4);
        else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc)
            step_ms = (int)num("--step-ms", argv[++i], 0, INT32_MAX);
        else if (!strcmp(argv[i], "--die-after") && i + 1 < argc)
            die_after = num("--die-after", argv[++i], 0, INT64_MAX);
        else if (!strcmp(argv[i], "--die-rank") && i + 1 < argc)
            die_rank = (int)num("--die-rank", argv[++i], 0, (1 << 24) - 1);
        else if (!strcmp(argv[i], "--fetch") && i + 1 < argc) {
            char r[32];
            const char *a = argv[++i], *colon = strchr(a, ':');
            snprintf(r, sizeof r, "%.*s", colon ? (int)(colon - a) : (int)strlen(a), a);
            fetch = (int)num("--fetch's rank", r, 0, (1 << 24) - 1);
            if (colon)
                fetch_step = num("--fetch's step", colon + 1, 0, INT64_MAX);
        }
        else if (!strcmp(argv[i], "--strict"))
            strict = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (uint64_t)num("--seed", argv[++i], 0, INT64_MAX);
        else if (!strcmp(argv[i], "--no-commit"))
            no_commit = 1;
        else if (!strcmp(argv[i], "--timing"))
            timing = 1;
        else {
            fprintf(stderr, "rank_main: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ftc_ctx_t *ctx;
    if (ftc_create(NULL, &ctx) != 0) {
        printf("ERROR: %s\n", ftc_last_error(ctx));
        ftc_destroy(ctx);
        return 1;
    }
    /* strictly (ftc_create read it so already): atoi would take "1x" as 1 */
    const char *rs = getenv("FTC_RANK");
    int64_t rank64 = 0;
    if (rs && *rs && ftc_parse_int(rs, 0, (1 << 24) - 1, &rank64) < 0) {
        printf("ERROR: FTC_RANK=\"%s\" is not a whole decimal number in 0..16777215\n", rs);
        ftc_destroy(ctx);
        return 2;
    }
    int rank = (int)rank64;
    const char *gen = getenv("FTC_GENERATION") ? getenv("FTC_GENERATION") : "0";
    if (timing)
        printf("TIMING rank %d gen %s exec %lld\n", rank, gen, t_exec);
    /* The state's identity: the rank whose values it holds. Under `ftc run`
     * a rank may continue another rank's state after a layout change
     * (FTC_RESTORE_RANK); the identity travels in the "step" scalar
     * (step * 1000 + identity), so a restored shard is checked against the
     * identity it carries, and its bytes against that identity's values. */
    int ident = rank;
    const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
    if (die_rank >= 0 && (rank != die_rank || (restarts && *restarts &&
                          num("TORCHELASTIC_RESTART_COUNT", restarts, 0, INT32_MAX) > 0)))
        die_after = -1;
    int failed = 0;
    float *w = calloc(floats, 4), *m = calloc(floats, 4);
    int64_t sc = 0;
    int64_t shape[1] = {(int64_t)floats};
    if (ftc_register(ctx, "w", FTC_DTYPE_F32, 1, shape, w, FTC_HOST) ||
        ftc_register(ctx, "optim.m", FTC_DTYPE_F32, 1, shape, m, FTC_HOST) ||
        ftc_register(ctx, "step", FTC_DTYPE_I64, 0, NULL, &sc, FTC_HOST)) {
        printf("ERROR: %s\n", ftc_last_error(ctx));
        ftc_destroy(ctx);
        return 1;
    }
    if (timing)
        printf("TIMING rank %d gen %s ready %lld\n", rank, gen, wall_ms());
    int64_t start = 0;
    if (restore) {
        int64_t got;
        uint64_t cursor = 0;
        size_t ml = sizeof cursor;
        long long t0 = wall_ms();
        int rc = ftc_restore(ctx, &got, &cursor, &ml);
        long long t1 = wall_ms();
        if (rc) {
            printf("RESTORE NONE: %s\n", ftc_last_error(ctx));
        } else {
            if (timing)
                printf("TIMING rank %d gen %s restored %lld ms %lld at %lld\n", rank, gen,
                       (long long)got, t1 - t0, t1);
            const char *src = getenv("FTC_RESTORE_RANK");
            int64_t carried = sc - got * 1000;
            /* whose shard was asked for */
            int want = src && *src ? (int)num("FTC_RESTORE_RANK", src, 0, (1 << 24) - 1) : rank;
            if (carried >= 0 && carried < 1000)
                ident = (int)carried;
            int ok = (carried == want || (src && *src)) &&
                     filled_with(w, m, floats, seed, ident, got) &&
                     sc == got * 1000 + ident && ml == sizeof cursor &&
                     cursor == (uint64_t)got * 10;
            printf("RESTORED %lld %s\n", (long long)got, ok ? "OK" : "BAD");
            if (timing)
                printf("TIMING rank %d gen %s verified ms %lld at %lld\n", rank, gen,
                       wall_ms() - t1, wall_ms());
            failed |= !ok;
            start = got + 1;
        }
    }
    for (int64_t s = start; s < steps; s++) {
        fill(w, m, &sc, floats, seed, ident, s);
        uint64_t cursor = (uint64_t)s * 10;
        int rc = ftc_checkpoint(ctx, s, &cursor, sizeof cursor);
        if (rc && rc != FTC_EAGAIN) {
            printf("ERROR: checkpoint %lld: %s\n", (long long)s, ftc_last_error(ctx));
            failed = 1;
            break;
        }
        printf("%s %lld\n", rc ? "SKIPPED" : "CHECKPOINTED", (long long)s);
        if (ftc_wait_snapshot(ctx)) {
            printf("ERROR: wait %lld: %s\n", (long long)s, ftc_last_error(ctx));
            failed = 1;
            break;
        }
        if (step_ms)
            usleep((useconds_t)step_ms * 1000);
        if (timing)
            printf("TIMING rank %d gen %s step %lld at %lld\n", rank, gen, (long long)s, wall_ms());
        if (s == die_after) {
            ftc_wait_committed(ctx, s);
            printf("COMMITTED %lld\n", (long long)s);
            raise(SIGKILL); /* a crash: no cleanup, no BYE */
        }
    }
    if (steps > start && !no_commit) {
        if (ftc_wait_committed(ctx, steps - 1) == 0)
            printf("COMMITTED %lld\n", (long long)(steps - 1));
        else {
            printf("ERROR: commit: %s\n", ftc_last_error(ctx));
            failed = 1;
        }
    }
    if (fetch >= 0) {
        ftc_shard_ref_t *ref = NULL;
        int rc = ftc_fetch(ctx, fetch, fetch_step, &ref);
        if (rc) {
            printf("FETCH NONE: %s\n", ftc_last_error(ctx));
            failed = 1;
        } else {
            int64_t got = ftc_shard_step(ref);
            int64_t es = got * 1000 + fetch;
            const void *pw = NULL, *pm = NULL, *ps = NULL;
            uint64_t nw = 0, nm = 0, ns = 0;
            int dw = 0, dm = 0, ds = 0;
            int ok = ftc_shard_tensor(ref, "w", &pw, &dw, &nw) == 0 &&
                     ftc_shard_tensor(ref, "optim.m", &pm, &dm, &nm) == 0 &&
                     ftc_shard_tensor(ref, "step", &ps, &ds, &ns) == 0 && dw == FTC_DTYPE_F32 &&
                     nw == floats && nm == floats && ns == 1 &&
                     filled_with(pw, pm, floats, seed, fetch, got) && !memcmp(ps, &es, 8) &&
                     ftc_shard_tensor(ref, "nonesuch", &pw, NULL, NULL) == FTC_ENOENT;
            size_t ml = 0;
            const void *mp = ftc_shard_meta(ref, &ml);
            uint64_t cursor = 0;
            if (mp && ml == sizeof cursor)
                memcpy(&cursor, mp, sizeof cursor);
            ok = ok && ml == sizeof cursor && cursor == (uint64_t)got * 10;
            printf("FETCHED %d %lld %s\n", fetch, (long long)got, ok ? "OK" : "BAD");
            failed |= !ok;
            ftc_shard_release(ref);
        }
    }
    ftc_ckpt_status_t st = {.struct_size = sizeof st};
    if (ftc_ckpt_status(ctx, &st) == 0)
        printf("STATUS rank %d world %d committed %lld checkpoints %lld skipped %lld\n", st.rank,
               st.world, (long long)st.committed, (long long)st.checkpoints,
               (long long)st.skipped);
    else
        printf("ERROR: ftc_ckpt_status: %s\n", ftc_last_error(ctx));
    ftc_destroy(ctx);
    free(w);
    free(m);
    return strict && failed ? 1 : 0;
}
