/*
 * bench_persist.c — what the persist tier costs and saves, on synthetic
 * training state (trainer/synth.h) with the statistics of a real one.
 *
 * For fp32 and bf16 state (default 1 GiB each; --bytes to shrink) it builds
 * version 0, applies one optimizer-like step to get version 1 (the UPDATED
 * version), and for each codec mode
 *
 *   raw             plain zstd of the shard bytes
 *   shuffle         byte-shuffle each tensor by its dtype width, then zstd
 *   shuffle+delta   XOR against version 0, shuffle, zstd
 *
 * prints the compression ratio of version 1, compress and decompress speed
 * (the .ftcz codec of ckpt/zshard.h, no disk: on one core, the process pinned
 * to one CPU, and with all threads), and the end-to-end time of
 * ftc_persist_write (verify, compress, write, fsync, rename, manifest) as a
 * multiple of a baseline measured in the same run: a plain write+fsync of the
 * raw bytes to a file in the same directory. A memcpy line gives the memory
 * speed of the machine. It ends with the ratios against the targets
 * (shuffle+delta >= 1.5x the plain zstd ratio, at >= 1 GB/s per core) and,
 * to explain them, the shuffle+delta ratio of each kind of tensor.
 *
 * Benchmarks report; they do not judge: a missed target is printed, not an
 * error. The exit status is nonzero only when something fails.
 *
 *   bench_persist [--bytes SIZE] [--dir DIR] [--threads N] [--level L]
 *                 [--chunk SIZE] [--dtype fp32|bf16|both] [--reps N]
 */
#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "ckpt/zshard.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fsio.h"
#include "trainer/synth.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

typedef struct bench_opts {
    uint64_t bytes;
    const char *dir;
    int threads; /* compression threads for the "all threads" columns */
    int level;
    uint64_t chunk;
    int dtypes[2];
    int n_dtypes;
    int reps; /* codec timings: best of reps */
} bench_opts_t;

#define GB 1e9

static double secs_since(uint64_t t0) { return (double)(ftc_now_ns() - t0) / 1e9; }

static int die(const char *what, const ftc_err_t *err)
{
    fprintf(stderr, "bench_persist: %s: %s\n", what, err ? ftc_err_str(err) : strerror(errno));
    return 1;
}

/* ---- CPU pinning: "one core" numbers run with the process on one CPU, so the
 * codec's worker threads (decode always starts one per online core) share it. */

static cpu_set_t saved_cpus;

static int pin_one_cpu(void)
{
    if (sched_getaffinity(0, sizeof saved_cpus, &saved_cpus) != 0)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &saved_cpus)) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            return sched_setaffinity(0, sizeof one, &one);
        }
    }
    return -1;
}

static void unpin(void) { sched_setaffinity(0, sizeof saved_cpus, &saved_cpus); }

/* ---- baselines ------------------------------------------------------------------ */

static double bench_memcpy(const uint8_t *src, uint64_t n)
{
    uint8_t *dst = malloc(n);
    if (!dst)
        return 0;
    memset(dst, 0, n); /* fault the pages in outside the timing */
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        uint64_t t0 = ftc_now_ns();
        memcpy(dst, src, n);
        __asm__ volatile("" : : "r"(dst) : "memory"); /* the copy must happen */
        double s = secs_since(t0);
        if (s < best)
            best = s;
    }
    free(dst);
    return (double)n / best / GB;
}

/* write(2) all of buf to DIR/name, fsync, close; returns seconds or < 0. */
static double bench_write_fsync(const char *dir, const char *name, const uint8_t *buf, uint64_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint64_t t0 = ftc_now_ns();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    ftc_err_t err = {0};
    int rc = ftc_fs_write_all(fd, buf, n, NULL, &err, path);
    if (rc == 0)
        rc = ftc_fs_fsync(fd, NULL, &err, path);
    close(fd);
    double s = secs_since(t0);
    unlink(path);
    if (rc) {
        fprintf(stderr, "bench_persist: baseline write: %s\n", err.msg);
        return -1;
    }
    return s;
}

/* ---- the codec ------------------------------------------------------------------- */

typedef struct mode {
    const char *name;
    bool shuffle, delta;
} mode_t_;

static const mode_t_ modes[3] = {
    {"raw", false, false},
    {"shuffle", true, false},
    {"shuffle+delta", true, true},
};

typedef struct result {
    double ratio;
    double comp1, compN;     /* GB/s of raw bytes: one core, all threads */
    double decomp1, decompN; /* same */
    double persist_s;        /* ftc_persist_write of version 1, wall */
    double persist_comp_s, persist_write_s;
    bool persist_delta;
} result_t;

/* Encodes (best of reps) and returns the file of the last rep. */
static int time_encode(const bench_opts_t *o, const uint8_t *v1, uint64_t size, const uint8_t *v0,
                       const mode_t_ *m, int threads, double *gbs, uint8_t **file, size_t *flen)
{
    ftc_err_t err = {0};
    double best = 1e30;
    for (int r = 0; r < o->reps; r++) {
        free(*file);
        *file = NULL;
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_zshard_encode(v1, size, m->delta ? v0 : NULL, m->delta ? size : 0, 0,
                                   o->level, m->shuffle, o->chunk, threads, file, flen, &err);
        double s = secs_since(t0);
        if (rc)
            return die("encode", &err);
        if (s < best)
            best = s;
    }
    *gbs = (double)size / best / GB;
    return 0;
}

static int time_decode(const bench_opts_t *o, const uint8_t *file, size_t flen, const uint8_t *v1,
                       uint64_t size, const uint8_t *v0, const mode_t_ *m, double *gbs)
{
    ftc_err_t err = {0};
    double best = 1e30;
    for (int r = 0; r < o->reps; r++) {
        uint8_t *raw = NULL;
        uint64_t raw_size = 0;
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_zshard_decode(file, flen, m->delta ? v0 : NULL, m->delta ? size : 0, &raw,
                                   &raw_size, &err);
        double s = secs_since(t0);
        if (rc)
            return die("decode", &err);
        bool same = raw_size == size && memcmp(raw, v1, size) == 0;
        free(raw);
        if (!same) {
            fprintf(stderr, "bench_persist: %s: decode does not give back the shard\n", m->name);
            return 1;
        }
        if (s < best)
            best = s;
    }
    *gbs = (double)size / best / GB;
    return 0;
}

/* ftc_persist_write of version 0 then version 1 into a fresh DIR/sub;
 * returns the wall time of the version-1 write. */
static int time_persist(const bench_opts_t *o, const char *sub, const uint8_t *v0,
                        const uint8_t *v1, uint64_t size, const mode_t_ *m, result_t *res)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", o->dir, sub);
    ftc_persist_options_t po = FTC_PERSIST_OPTIONS_INIT;
    po.level = o->level;
    po.threads = o->threads;
    po.chunk_bytes = o->chunk;
    po.shuffle = m->shuffle;
    po.delta = m->delta;
    po.keep = 1;
    ftc_err_t err = {0};
    ftc_persist_t *p = ftc_persist_open(dir, &po, &err);
    if (!p)
        return die("persist open", &err);
    ftc_shard_view_t v;
    int rc = ftc_shard_open(&v, v0, size, 0, &err);
    if (rc)
        goto fail;
    const void *s0[1] = {v0}, *s1[1] = {v1};
    uint64_t sz[1] = {size};
    if (ftc_persist_write(p, v.info.step, s0, sz, 1) != 0)
        goto fail_p;
    rc = ftc_shard_open(&v, v1, size, 0, &err);
    if (rc)
        goto fail;
    uint64_t t0 = ftc_now_ns();
    if (ftc_persist_write(p, v.info.step, s1, sz, 1) != 0)
        goto fail_p;
    res->persist_s = secs_since(t0);
    ftc_persist_stats_t st;
    ftc_persist_last_stats(p, &st);
    res->persist_comp_s = st.compress_s;
    res->persist_write_s = st.write_s;
    res->persist_delta = st.delta;
    ftc_persist_close(p);
    return 0;
fail_p:
    fprintf(stderr, "bench_persist: persist write (%s): %s\n", m->name, ftc_persist_errstr(p));
    ftc_persist_close(p);
    return 1;
fail:
    ftc_persist_close(p);
    return die("persist", &err);
}

/* Removes DIR/sub: its version directories hold only plain files. */
static void remove_persist_dir(const char *dir, const char *sub)
{
    char path[PATH_MAX], vpath[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            snprintf(vpath, sizeof vpath, "%s/%s", path, de->d_name);
            ftc_fs_remove_dir(vpath, NULL);
            unlink(vpath);
        }
        closedir(d);
    }
    rmdir(path);
}

/* ---- why: the shuffle+delta ratio of each kind of tensor ---------------------------- */

enum { K_WEIGHT, K_EXP_AVG, K_EXP_AVG_SQ, K_OTHER, K__COUNT };
static const char *const kind_name[K__COUNT] = {"weights", "exp_avg (Adam m)",
                                                "exp_avg_sq (Adam v)", "head, gaps, footer"};

static int kind_of(const char *name, uint32_t len)
{
    static const char sq[] = ".exp_avg_sq", m[] = ".exp_avg";
    if (len >= sizeof sq - 1 && !memcmp(name + len - (sizeof sq - 1), sq, sizeof sq - 1))
        return K_EXP_AVG_SQ;
    if (len >= sizeof m - 1 && !memcmp(name + len - (sizeof m - 1), m, sizeof m - 1))
        return K_EXP_AVG;
    return K_WEIGHT;
}

/* Encodes each tensor of v1 alone (as a one-tensor shard would be: the codec
 * chunks never straddle tensors, so the sums match the whole-shard ratio up to
 * chunk boundaries) with the codec's own transform, through zstd directly. */
static int breakdown(const bench_opts_t *o, const uint8_t *v0, const uint8_t *v1, uint64_t size)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, v1, size, 0, &err))
        return die("breakdown", &err);
    uint64_t raw[K__COUNT] = {0}, comp[2][K__COUNT] = {{0}};
    uint64_t cap = ZSTD_compressBound(o->chunk);
    uint8_t *x = malloc(o->chunk), *sh = malloc(o->chunk), *out = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!x || !sh || !out || !cc) {
        free(x), free(sh), free(out), ZSTD_freeCCtx(cc);
        fprintf(stderr, "bench_persist: breakdown: out of memory\n");
        return 1;
    }
    uint64_t covered = 0, zstd_ns[2] = {0, 0}, xform_ns = 0;
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        int k = kind_of(t.name, t.name_len);
        uint32_t w = (uint32_t)ftc_dtype_size(t.dtype);
        uint64_t step = o->chunk - o->chunk % w;
        for (uint64_t off = 0; off < t.length; off += step) {
            uint64_t n = t.length - off < step ? t.length - off : step;
            const uint8_t *a = v1 + t.offset + off, *b = v0 + t.offset + off;
            for (int d = 0; d < 2; d++) { /* 0: shuffle only, 1: shuffle+delta */
                const uint8_t *src = a;
                uint64_t t0 = ftc_now_ns();
                if (d) {
                    for (uint64_t j = 0; j < n; j++)
                        x[j] = a[j] ^ b[j];
                    src = x;
                }
                uint64_t ne = n / w;
                for (uint32_t byte = 0; byte < w; byte++)
                    for (uint64_t e = 0; e < ne; e++)
                        sh[byte * ne + e] = src[e * w + byte];
                uint64_t t1 = ftc_now_ns();
                size_t r = ZSTD_compressCCtx(cc, out, cap, sh, n, o->level);
                zstd_ns[d] += ftc_now_ns() - t1;
                if (d)
                    xform_ns += t1 - t0;
                if (ZSTD_isError(r)) {
                    fprintf(stderr, "bench_persist: zstd: %s\n", ZSTD_getErrorName(r));
                    free(x), free(sh), free(out), ZSTD_freeCCtx(cc);
                    return 1;
                }
                comp[d][k] += r;
            }
            raw[k] += n;
        }
        covered += t.length;
    }
    raw[K_OTHER] = size - covered;
    comp[0][K_OTHER] = comp[1][K_OTHER] = 0; /* not measured here; a few KiB */
    printf("\n  why: ratio of each kind of tensor on the updated version (zstd %d, chunk %llu)\n",
           o->level, (unsigned long long)o->chunk);
    printf("    %-22s %10s %6s %10s %15s\n", "tensors", "MiB", "share", "shuffle",
           "shuffle+delta");
    for (int k = 0; k < K_OTHER; k++)
        printf("    %-22s %10.1f %5.1f%% %9.2fx %14.2fx\n", kind_name[k], raw[k] / 1048576.0,
               100.0 * (double)raw[k] / (double)size,
               comp[0][k] ? (double)raw[k] / (double)comp[0][k] : 0.0,
               comp[1][k] ? (double)raw[k] / (double)comp[1][k] : 0.0);
    printf("    one core, this loop: zstd alone %.2f GB/s on shuffled data, %.2f GB/s on the "
           "shuffled delta; XOR+shuffle (plain C, as the codec does) %.2f GB/s\n",
           (double)covered / ((double)zstd_ns[0] + 1) , (double)covered / ((double)zstd_ns[1] + 1),
           (double)covered / ((double)xform_ns + 1));
    free(x), free(sh), free(out), ZSTD_freeCCtx(cc);
    return 0;
}

/* ---- one dtype ---------------------------------------------------------------------- */

static int run_dtype(const bench_opts_t *o, int dtype, int ncpu)
{
    ftc_err_t err = {0};
    ftc_synth_options_t so = FTC_SYNTH_OPTIONS_INIT;
    so.bytes = o->bytes;
    so.dtype = dtype;
    so.layers = 8;
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "bench");
    in.dp = in.tp = in.pp = 1;
    in.generation = 1;
    uint64_t t0 = ftc_now_ns();
    ftc_synth_t *s = ftc_synth_create(&so, &in, &err);
    if (!s)
        return die("synthetic state", &err);
    uint64_t size = ftc_synth_size(s);
    uint8_t *v0 = malloc(size);
    if (!v0) {
        ftc_synth_destroy(s);
        return die("out of memory", NULL);
    }
    memcpy(v0, ftc_synth_region(s), size);
    if (ftc_synth_step(s, 1, &err)) {
        free(v0);
        ftc_synth_destroy(s);
        return die("synthetic step", &err);
    }
    const uint8_t *v1 = ftc_synth_region(s);
    double gen_s = secs_since(t0);

    int rc = 0;
    double mem = bench_memcpy(v1, size);
    double base_s = bench_write_fsync(o->dir, "baseline.raw", v1, size);
    if (base_s < 0) {
        rc = die("baseline write+fsync", NULL);
        goto out;
    }
    printf("\n== %s: %.2f GiB shard (%.0f s to generate), version 1 = one AdamW step after "
           "version 0\n",
           ftc_dtype_name(dtype), (double)size / 1073741824.0, gen_s);
    printf("  reference: memcpy %.1f GB/s (1 thread); write+fsync of the raw bytes %.2f s "
           "(%.2f GB/s) in %s\n",
           mem, base_s, (double)size / base_s / GB, o->dir);
    printf("  codec: zstd level %d, chunk %llu bytes; \"1 core\" = process pinned to one CPU, "
           "\"%dT\" = %d threads on %d online cores\n",
           o->level, (unsigned long long)o->chunk, o->threads, o->threads, ncpu);
    printf("\n  %-14s %7s %8s %8s %8s %8s %9s %12s  %s\n", "mode", "ratio", "comp", "comp",
           "decomp", "decomp", "persist", "persist /", "persist =");
    char nt[16];
    snprintf(nt, sizeof nt, "%dT", o->threads);
    printf("  %-14s %7s %8s %8s %8s %8s %9s %12s  %s\n", "", "", "1 core", nt, "1 core", nt, "s",
           "write+fsync", "comp+io s");
    result_t res[3];
    memset(res, 0, sizeof res);
    for (int mi = 0; mi < 3 && !rc; mi++) {
        const mode_t_ *m = &modes[mi];
        result_t *r = &res[mi];
        uint8_t *file = NULL;
        size_t flen = 0;
        if (pin_one_cpu() != 0) {
            rc = die("sched_setaffinity", NULL);
            break;
        }
        rc = time_encode(o, v1, size, v0, m, 1, &r->comp1, &file, &flen);
        if (!rc)
            rc = time_decode(o, file, flen, v1, size, v0, m, &r->decomp1);
        unpin();
        if (!rc)
            rc = time_encode(o, v1, size, v0, m, o->threads, &r->compN, &file, &flen);
        if (!rc)
            rc = time_decode(o, file, flen, v1, size, v0, m, &r->decompN);
        if (!rc)
            r->ratio = (double)size / (double)flen;
        free(file);
        if (!rc) {
            char sub[64];
            snprintf(sub, sizeof sub, "persist-%s-%d", ftc_dtype_name(dtype), mi);
            rc = time_persist(o, sub, v0, v1, size, m, r);
            remove_persist_dir(o->dir, sub);
        }
        if (rc)
            break;
        printf("  %-14s %6.2fx %8.2f %8.2f %8.2f %8.2f %9.2f %11.2fx  %.2f+%.2f%s\n", m->name,
               r->ratio, r->comp1, r->compN, r->decomp1, r->decompN, r->persist_s,
               r->persist_s / base_s, r->persist_comp_s, r->persist_write_s,
               m->delta && !r->persist_delta ? " (NOT a delta)" : "");
        fflush(stdout);
    }
    if (rc)
        goto out;
    printf("  (GB/s of raw shard bytes. %dT / %d per core: compress %.2f / %.2f / %.2f, "
           "decompress %.2f / %.2f / %.2f)\n",
           o->threads, o->threads, res[0].compN / o->threads,
           res[1].compN / o->threads, res[2].compN / o->threads, res[0].decompN / o->threads,
           res[1].decompN / o->threads, res[2].decompN / o->threads);
    double gain = res[2].ratio / res[0].ratio;
    printf("\n  shuffle+delta ratio / plain zstd ratio = %.2fx (target >= 1.5x): %s\n", gain,
           gain >= 1.5 ? "met" : "MISSED");
    printf("  shuffle ratio / plain zstd ratio = %.2fx\n", res[1].ratio / res[0].ratio);
    printf("  shuffle+delta compress, one core = %.2f GB/s (target >= 1 GB/s per core): %s\n",
           res[2].comp1, res[2].comp1 >= 1.0 ? "met" : "MISSED");
    printf("  shuffle+delta decompress, one core = %.2f GB/s\n", res[2].decomp1);
    printf("  persist (shuffle+delta) / write+fsync of the raw bytes = %.2fx\n",
           res[2].persist_s / base_s);
    rc = breakdown(o, v0, v1, size);
out:
    free(v0);
    ftc_synth_destroy(s);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_persist [--bytes SIZE] [--dir DIR] [--threads N] [--level L]\n"
            "                     [--chunk SIZE] [--dtype fp32|bf16|both] [--reps N]\n"
            "  --bytes    synthetic shard size per dtype (default 1GiB; e.g. 64MiB)\n"
            "  --dir      where the baseline and persist files go (default build/bench-tmp)\n"
            "  --threads  threads of the multi-threaded columns (default: online cores)\n"
            "  --level    zstd level (default 1)   --chunk  bytes per chunk (default 4MiB)\n"
            "  --reps     codec timings are the best of N runs (default 2)\n");
}

int main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    bench_opts_t o = {.bytes = 1ull << 30,
                      .dir = "build/bench-tmp",
                      .threads = (int)ncpu,
                      .level = 1,
                      .chunk = 4u << 20,
                      .dtypes = {FTC_DTYPE_F32, FTC_DTYPE_BF16},
                      .n_dtypes = 2,
                      .reps = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!val) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--bytes") && ftc_parse_size(val, &n) == 0 && n >= 4096) {
            o.bytes = (uint64_t)n;
        } else if (!strcmp(a, "--chunk") && ftc_parse_size(val, &n) == 0 && n >= 4096) {
            o.chunk = (uint64_t)n;
        } else if (!strcmp(a, "--dir")) {
            o.dir = val;
        } else if (!strcmp(a, "--threads") && atoi(val) >= 1 && atoi(val) <= 256) {
            o.threads = atoi(val);
        } else if (!strcmp(a, "--level")) {
            o.level = atoi(val);
        } else if (!strcmp(a, "--reps") && atoi(val) >= 1) {
            o.reps = atoi(val);
        } else if (!strcmp(a, "--dtype") && !strcmp(val, "both")) {
            o.n_dtypes = 2;
        } else if (!strcmp(a, "--dtype") && ftc_dtype_parse(val) != FTC_DTYPE_INVALID) {
            o.dtypes[0] = ftc_dtype_parse(val);
            o.n_dtypes = 1;
        } else {
            fprintf(stderr, "bench_persist: bad option %s %s\n", a, val);
            usage(stderr);
            return 2;
        }
    }
    ftc_err_t err = {0};
    if (ftc_fs_mkdirs(o.dir, &err))
        return die("--dir", &err);
    printf("bench_persist: %.2f GiB of synthetic state per dtype, %ld online cores, zstd %s\n",
           (double)o.bytes / 1073741824.0, ncpu, ZSTD_versionString());
    for (int d = 0; d < o.n_dtypes; d++)
        if (run_dtype(&o, o.dtypes[d], (int)ncpu))
            return 1;
    return 0;
}
