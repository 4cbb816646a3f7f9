/*
 * bench_persist.c — what the persist tier costs and saves, on synthetic
 * training state (trainer/synth.h) with the statistics of a real one.
 *
 * For fp32 and bf16 state (default 1 GiB each; --bytes to shrink) it builds
 * version 0, applies one optimizer-like step to get version 1 (the UPDATED
 * version), and for each codec mode
 *
 *   raw               plain zstd of the shard bytes
 *   shuffle           byte-shuffle each tensor by its dtype width, then zstd
 *   bitshuffle        bit-plane shuffle each tensor, zero planes dropped,
 *                     noisy planes stored raw, the rest zstd
 *   shuffle+delta     XOR against version 0, byte shuffle, zstd
 *   bitshuffle+delta  XOR against version 0, bitshuffle (the persist default)
 *
 * prints the compression ratio of version 1, compress and decompress speed
 * (the .ftcz codec of ckpt/zshard.h, no disk: on one core, the process pinned
 * to one CPU, and with all threads), and the end-to-end time of
 * ftc_persist_write (verify, compress, write, fsync, rename, manifest) as a
 * multiple of a baseline measured in the same run: a plain write+fsync of the
 * raw bytes to a file in the same directory. A memcpy line gives the memory
 * speed of the machine. It ends with the ratios against the targets (the
 * default filter + delta >= 1.5x the plain zstd ratio, at >= 1 GB/s per core)
 * and, to explain them, the delta ratio of each kind of tensor (read from the
 * codec's own chunk tables) and zstd alone on the same core.
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
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* CPU seconds of the whole process: on a shared machine, wall time on "one
 * core" includes the time other processes held that core; CPU time does not. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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
    int filter; /* ftc_zshard_filter_t */
    bool delta;
} mode_t_;

enum { M_RAW, M_SHUF, M_BITSHUF, M_SHUF_D, M_BITSHUF_D, M__COUNT };
static const mode_t_ modes[M__COUNT] = {
    {"raw", FTC_ZSHARD_FILTER_NONE, false},
    {"shuffle", FTC_ZSHARD_FILTER_BYTE, false},
    {"bitshuffle", FTC_ZSHARD_FILTER_BIT, false},
    {"shuffle+delta", FTC_ZSHARD_FILTER_BYTE, true},
    {"bitshuffle+delta", FTC_ZSHARD_FILTER_BIT, true},
};

typedef struct result {
    double ratio;
    double comp1, compN;     /* GB/s of raw bytes: one core, all threads */
    double decomp1, decompN; /* same */
    double comp1_cpu, decomp1_cpu; /* one core, GB per CPU second */
    double persist_s;        /* ftc_persist_write of version 1, wall */
    double persist_comp_s, persist_write_s;
    bool persist_delta;
} result_t;

/* Encodes (best of reps) and returns the file of the last rep. */
static int time_encode(const bench_opts_t *o, const uint8_t *v1, uint64_t size, const uint8_t *v0,
                       const mode_t_ *m, int threads, double *gbs, double *cpu_gbs, uint8_t **file,
                       size_t *flen)
{
    ftc_err_t err = {0};
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < o->reps; r++) {
        free(*file);
        *file = NULL;
        double c0 = cpu_now();
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_zshard_encode(v1, size, m->delta ? v0 : NULL, m->delta ? size : 0, 0,
                                   o->level, m->filter, o->chunk, threads, file, flen, &err);
        double s = secs_since(t0), cs = cpu_now() - c0;
        if (rc)
            return die("encode", &err);
        if (s < best)
            best = s;
        if (cs < best_cpu)
            best_cpu = cs;
    }
    *gbs = (double)size / best / GB;
    if (cpu_gbs)
        *cpu_gbs = (double)size / best_cpu / GB;
    return 0;
}

static int time_decode(const bench_opts_t *o, const uint8_t *file, size_t flen, const uint8_t *v1,
                       uint64_t size, const uint8_t *v0, const mode_t_ *m, double *gbs,
                       double *cpu_gbs)
{
    ftc_err_t err = {0};
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < o->reps; r++) {
        uint8_t *raw = NULL;
        uint64_t raw_size = 0;
        double c0 = cpu_now();
        uint64_t t0 = ftc_now_ns();
        int rc = ftc_zshard_decode(file, flen, m->delta ? v0 : NULL, m->delta ? size : 0, &raw,
                                   &raw_size, &err);
        double s = secs_since(t0), cs = cpu_now() - c0;
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
        if (cs < best_cpu)
            best_cpu = cs;
    }
    *gbs = (double)size / best / GB;
    if (cpu_gbs)
        *cpu_gbs = (double)size / best_cpu / GB;
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
    po.shuffle = m->filter;
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

/* ---- why: the delta ratio of each kind of tensor -------------------------------------- */

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

/* Adds each chunk's raw and stored bytes to the kind of tensor it belongs to,
 * reading the chunk table of an .ftcz file (docs/persist-format.md: 48-byte
 * entries after the 128-byte header; chunks never straddle tensors). */
static void kinds_of_file(const ftc_shard_view_t *v, const uint8_t *file, size_t flen,
                          uint64_t raw[K__COUNT], uint64_t comp[K__COUNT])
{
    ftc_zshard_info_t zi;
    ftc_err_t err = {0};
    if (ftc_zshard_info(file, flen, &zi, &err))
        return;
    for (uint32_t c = 0; c < zi.n_chunks; c++) {
        const uint8_t *e = file + FTC_ZSHARD_HEADER_SIZE + (size_t)c * FTC_ZSHARD_ENTRY_SIZE;
        uint64_t cs, ro, rs;
        memcpy(&cs, e + 8, 8);
        memcpy(&ro, e + 16, 8);
        memcpy(&rs, e + 24, 8);
        int k = K_OTHER;
        for (uint32_t i = 0; i < v->n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(v, i, &t);
            if (t.length && ro >= t.offset && ro < t.offset + t.length) {
                k = kind_of(t.name, t.name_len);
                break;
            }
        }
        raw[k] += rs;
        comp[k] += cs;
    }
}

/* zstd alone (level o->level, chunk o->chunk) over the raw shard on this core,
 * per CPU second: what the machine gives right now, to read the codec's
 * speeds against. */
static double zstd_alone(const bench_opts_t *o, const uint8_t *v1, uint64_t size)
{
    uint64_t cap = ZSTD_compressBound(o->chunk);
    uint8_t *out = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    double gbs = 0;
    if (out && cc) {
        double c0 = cpu_now();
        for (uint64_t off = 0; off < size; off += o->chunk) {
            uint64_t n = size - off < o->chunk ? size - off : o->chunk;
            if (ZSTD_isError(ZSTD_compressCCtx(cc, out, cap, v1 + off, n, o->level)))
                break;
        }
        gbs = (double)size / (cpu_now() - c0) / GB;
    }
    free(out);
    ZSTD_freeCCtx(cc);
    return gbs;
}

/* Entropy bounds of the XOR delta of each kind of tensor, in bits per
 * element: order 0 over each byte plane (what any byte-plane coder that
 * codes bytes independently can reach), and per element: the entropy of the
 * XOR's leading-zero count plus the bits below its leading one taken as
 * random (about what any element-wise delta coder can reach, since those low
 * bits are noise). */
typedef struct bound {
    uint64_t n;                   /* elements */
    uint32_t width;               /* bytes per element */
    uint64_t bytes[8][256];       /* histogram of each byte plane */
    uint64_t lz[65];              /* histogram of leading zero bits */
    double low_bits;              /* sum of bits below the leading one */
} bound_t;

static double entropy(const uint64_t *h, int n, uint64_t tot)
{
    double e = 0;
    for (int i = 0; i < n; i++)
        if (h[i]) {
            double q = (double)h[i] / (double)tot;
            e -= q * log2(q);
        }
    return e;
}

static void bound_add(bound_t *b, const uint8_t *a, const uint8_t *c, uint64_t len, uint32_t w)
{
    b->width = w;
    for (uint64_t i = 0; i + w <= len; i += w) {
        uint64_t x = 0;
        for (uint32_t j = 0; j < w; j++) {
            uint8_t y = a[i + j] ^ c[i + j];
            b->bytes[j][y]++;
            x |= (uint64_t)y << (8 * j);
        }
        int lz = x ? __builtin_clzll(x) - (64 - 8 * (int)w) : 8 * (int)w;
        b->lz[lz]++;
        if (x)
            b->low_bits += 8.0 * w - lz - 1;
        b->n++;
    }
}

static void bound_bits(const bound_t *b, double *byteplanes, double *element)
{
    *byteplanes = *element = 0;
    if (!b->n)
        return;
    for (uint32_t j = 0; j < b->width; j++)
        *byteplanes += entropy(b->bytes[j], 256, b->n);
    *element = entropy(b->lz, 65, b->n) + b->low_bits / (double)b->n;
}

static int breakdown(const bench_opts_t *o, const uint8_t *v0, const uint8_t *v1, uint64_t size,
                     uint8_t *const files[M__COUNT], const size_t flens[M__COUNT],
                     double plain_ratio)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, v1, size, 0, &err))
        return die("breakdown", &err);
    static const int cols[4] = {M_RAW, M_SHUF_D, M_BITSHUF, M_BITSHUF_D};
    uint64_t raw[4][K__COUNT] = {{0}}, comp[4][K__COUNT] = {{0}};
    for (int c = 0; c < 4; c++)
        kinds_of_file(&v, files[cols[c]], flens[cols[c]], raw[c], comp[c]);
    printf("\n  why: ratio of each kind of tensor on the updated version (zstd %d, chunk %llu; "
           "from the codec's chunk tables)\n",
           o->level, (unsigned long long)o->chunk);
    printf("    %-22s %8s %6s %8s %10s %14s %17s\n", "tensors", "MiB", "share", "raw",
           "bitshuffle", "shuffle+delta", "bitshuffle+delta");
    for (int k = 0; k < K_OTHER; k++)
        printf("    %-22s %8.1f %5.1f%% %7.2fx %9.2fx %13.2fx %16.2fx\n", kind_name[k],
               raw[0][k] / 1048576.0, 100.0 * (double)raw[0][k] / (double)size,
               comp[0][k] ? (double)raw[0][k] / (double)comp[0][k] : 0.0,
               comp[2][k] ? (double)raw[2][k] / (double)comp[2][k] : 0.0,
               comp[1][k] ? (double)raw[1][k] / (double)comp[1][k] : 0.0,
               comp[3][k] ? (double)raw[3][k] / (double)comp[3][k] : 0.0);

    /* what the delta itself allows: entropy bounds */
    bound_t *bd = calloc(K_OTHER, sizeof *bd);
    if (!bd)
        return die("out of memory", NULL);
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        bound_add(&bd[kind_of(t.name, t.name_len)], v1 + t.offset, v0 + t.offset, t.length,
                  (uint32_t)ftc_dtype_size(t.dtype));
    }
    printf("\n  the limit: entropy of the XOR delta, as a ratio (element bits / bits needed)\n");
    printf("    %-22s %26s %34s\n", "tensors", "byte planes, order 0",
           "per element (leading 0s + rest)");
    double tot_raw = 0, tot_b = 0, tot_e = 0;
    for (int k = 0; k < K_OTHER; k++) {
        double eb, ee;
        bound_bits(&bd[k], &eb, &ee);
        double bits = 8.0 * bd[k].width;
        printf("    %-22s %25.2fx %33.2fx\n", kind_name[k], eb ? bits / eb : 0.0,
               ee ? bits / ee : 0.0);
        tot_raw += bits * (double)bd[k].n;
        tot_b += eb * (double)bd[k].n;
        tot_e += ee * (double)bd[k].n;
    }
    free(bd);
    printf("    %-22s %25.2fx %33.2fx\n", "all tensors", tot_b ? tot_raw / tot_b : 0.0,
           tot_e ? tot_raw / tot_e : 0.0);
    printf("    per-element bound / plain zstd ratio = %.2fx (no element-wise delta coder "
           "does better; the target asks 1.5x)\n",
           tot_e ? tot_raw / tot_e / plain_ratio : 0.0);
    if (pin_one_cpu() != 0)
        return die("sched_setaffinity", NULL);
    double z = zstd_alone(o, v1, size);
    unpin();
    printf("    one core, now: zstd level %d alone on the raw shard bytes %.2f GB per CPU second\n",
           o->level, z);
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
    printf("  codec: zstd level %d, chunk %llu bytes; \"1 core\" = process pinned to one CPU "
           "(wall), \"cpu\" = the same run per CPU second, \"%dT\" = %d threads on %d online "
           "cores\n",
           o->level, (unsigned long long)o->chunk, o->threads, o->threads, ncpu);
    printf("\n  %-16s %7s %7s %7s %7s %7s %7s %7s %9s %12s  %s\n", "mode", "ratio", "comp",
           "comp", "comp", "decomp", "decomp", "decomp", "persist", "persist /", "persist =");
    char nt[16];
    snprintf(nt, sizeof nt, "%dT", o->threads);
    printf("  %-16s %7s %7s %7s %7s %7s %7s %7s %9s %12s  %s\n", "", "", "1 core", "cpu", nt,
           "1 core", "cpu", nt, "s", "write+fsync", "comp+io s");
    result_t res[M__COUNT];
    uint8_t *files[M__COUNT] = {NULL};
    size_t flens[M__COUNT] = {0};
    memset(res, 0, sizeof res);
    for (int mi = 0; mi < M__COUNT && !rc; mi++) {
        const mode_t_ *m = &modes[mi];
        result_t *r = &res[mi];
        uint8_t *file = NULL;
        size_t flen = 0;
        if (pin_one_cpu() != 0) {
            rc = die("sched_setaffinity", NULL);
            break;
        }
        rc = time_encode(o, v1, size, v0, m, 1, &r->comp1, &r->comp1_cpu, &file, &flen);
        if (!rc)
            rc = time_decode(o, file, flen, v1, size, v0, m, &r->decomp1, &r->decomp1_cpu);
        unpin();
        if (!rc)
            rc = time_encode(o, v1, size, v0, m, o->threads, &r->compN, NULL, &file, &flen);
        if (!rc)
            rc = time_decode(o, file, flen, v1, size, v0, m, &r->decompN, NULL);
        if (!rc)
            r->ratio = (double)size / (double)flen;
        files[mi] = file;
        flens[mi] = flen;
        if (!rc) {
            char sub[64];
            snprintf(sub, sizeof sub, "persist-%s-%d", ftc_dtype_name(dtype), mi);
            rc = time_persist(o, sub, v0, v1, size, m, r);
            remove_persist_dir(o->dir, sub);
        }
        if (rc)
            break;
        printf("  %-16s %6.2fx %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %9.2f %11.2fx  %.2f+%.2f%s\n",
               m->name, r->ratio, r->comp1, r->comp1_cpu, r->compN, r->decomp1, r->decomp1_cpu,
               r->decompN, r->persist_s,
               r->persist_s / base_s, r->persist_comp_s, r->persist_write_s,
               m->delta && !r->persist_delta ? " (NOT a delta)" : "");
        fflush(stdout);
    }
    if (rc)
        goto out_files;
    printf("  (GB/s of raw shard bytes. %dT / %d per core, compress:", o->threads, o->threads);
    for (int mi = 0; mi < M__COUNT; mi++)
        printf(" %.2f", res[mi].compN / o->threads);
    printf("; decompress:");
    for (int mi = 0; mi < M__COUNT; mi++)
        printf(" %.2f", res[mi].decompN / o->threads);
    printf(")\n");
    /* the targets, on the persist tier's default filter (+ delta) first */
    int def = FTC_ZSHARD_FILTER_DEFAULT == FTC_ZSHARD_FILTER_BIT ? M_BITSHUF_D : M_SHUF_D;
    for (int pass = 0; pass < 2; pass++) {
        int mi = pass == 0 ? def : (def == M_SHUF_D ? M_BITSHUF_D : M_SHUF_D);
        const result_t *d = &res[mi];
        const char *who = pass == 0 ? "default" : "other";
        double gain = d->ratio / res[M_RAW].ratio;
        printf("\n  %s (%s) ratio / plain zstd ratio = %.2fx (target >= 1.5x): %s\n", who,
               modes[mi].name, gain, gain >= 1.5 ? "met" : "MISSED");
        printf("  %s (%s) compress, one core = %.2f GB/s wall, %.2f GB per CPU second (target "
               ">= 1 GB/s per core): %s wall, %s per CPU second\n",
               who, modes[mi].name, d->comp1, d->comp1_cpu, d->comp1 >= 1.0 ? "met" : "MISSED",
               d->comp1_cpu >= 1.0 ? "met" : "MISSED");
        printf("  %s (%s) decompress, one core = %.2f GB/s wall, %.2f GB per CPU second\n", who,
               modes[mi].name, d->decomp1, d->decomp1_cpu);
        printf("  persist (%s) / write+fsync of the raw bytes = %.2fx\n", modes[mi].name,
               d->persist_s / base_s);
    }
    printf("  shuffle / plain = %.2fx; bitshuffle / plain = %.2fx\n",
           res[M_SHUF].ratio / res[M_RAW].ratio, res[M_BITSHUF].ratio / res[M_RAW].ratio);
    rc = breakdown(o, v0, v1, size, files, flens, res[M_RAW].ratio);
out_files:
    for (int mi = 0; mi < M__COUNT; mi++)
        free(files[mi]);
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
