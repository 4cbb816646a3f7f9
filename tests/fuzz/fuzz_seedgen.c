/*
 * fuzz_seedgen.c — writes the generated seed corpora of the fuzz targets:
 *
 *   OUT/fuzz_shard/gen-*      valid shards from the layout API (empty, one
 *                             scalar, every dtype and rank, zero-size tensors,
 *                             metadata, a synthetic training state, a slot
 *                             with trailing bytes)
 *   OUT/fuzz_config/gen-*     configs naming every key, flat and nested
 *   OUT/fuzz_zshard/gen-*     .ftcz files of the fuzz base shard and of a
 *                             "next step", full and as a delta on the base
 *                             (when ckpt/zshard.c is in the build)
 *   OUT/fuzz_manifest/gen-*   MANIFEST.json files written by ftc_persist_write
 *                             (when ckpt/persist.c is in the build)
 *   OUT/fuzz_rdzv/gen-*       rendezvous hellos (trainer/dist.h): one rank 0
 *                             of the target accepts, and ones it refuses
 *                             (another job, generation, world, rank), the
 *                             longest job id and blob, a truncated one
 *   OUT/fuzz_records/gen-*    in-process state files ftc_inproc_state_write
 *                             wrote (the longest why, one with a newline)
 *
 * Generated rather than committed so that the seeds follow the formats; the
 * committed seeds under tests/fuzz/seeds/ add hand-written inputs and the
 * regression inputs of fixed crashes. Every seed is under 64 KiB.
 *
 * Usage: fuzz_seedgen OUT_DIR
 */
#include "fuzz_common.h"

#include "ckpt/shard.h"
#include "core/config.h"
#include "core/fsio.h"
#include "plugins/inproc.h"
#include "trainer/dist.h"
#include "trainer/synth.h"

#if defined(FTC_FUZZ_HAVE_ZSHARD)
#include "ckpt/zshard.h"
#endif
#if defined(FTC_FUZZ_HAVE_PERSIST)
#include "ckpt/persist.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEED_MAX (64u << 10)

static const char *out_dir;
static int failures;

static void put(const char *target, const char *name, const void *buf, size_t len)
{
    char dir[PATH_MAX], path[PATH_MAX];
    ftc_err_t err = {0};
    if (len > SEED_MAX) {
        fprintf(stderr, "seedgen: %s/%s is %zu bytes, over the %u-byte seed limit\n", target,
                name, len, SEED_MAX);
        failures++;
        return;
    }
    snprintf(dir, sizeof dir, "%s/%s", out_dir, target);
    snprintf(path, sizeof path, "%s/gen-%s", dir, name);
    FILE *f = NULL;
    if (ftc_fs_mkdirs(dir, &err) || !(f = fopen(path, "wb")) || fwrite(buf, 1, len, f) != len) {
        fprintf(stderr, "seedgen: cannot write %s: %s\n", path,
                err.code ? err.msg : strerror(errno));
        failures++;
    }
    if (f && fclose(f) != 0)
        failures++;
}

static ftc_shard_info_t info(uint64_t step)
{
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "seed");
    in.step = step;
    in.generation = 1;
    in.dp = 2, in.tp = 2, in.pp = 1;
    in.dp_rank = 1, in.tp_rank = 0;
    return in;
}

/* Seals a layout into a malloc'd region, filling tensors with a pattern. */
static uint8_t *build(ftc_shard_layout_t *l, uint64_t *size)
{
    ftc_err_t err = {0};
    *size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, *size);
    if (!r || ftc_shard_layout_write(l, r, *size, &err)) {
        fprintf(stderr, "seedgen: layout: %s\n", err.msg);
        free(r);
        return NULL;
    }
    for (uint32_t i = 0; i < ftc_shard_layout_count(l); i++) {
        uint64_t off = ftc_shard_layout_offset(l, i);
        uint64_t end = i + 1 < ftc_shard_layout_count(l) ? ftc_shard_layout_offset(l, i + 1)
                                                         : *size - FTC_SHARD_FOOTER_SIZE;
        /* tensors stay zero except their first byte. A zero-size tensor owns
         * no byte (the next one may start at the same offset): skip it. */
        if (end > off && r[off] == 0)
            r[off] = (uint8_t)(i + 1);
    }
    if (ftc_shard_seal(r, *size, 1, &err)) {
        fprintf(stderr, "seedgen: seal: %s\n", err.msg);
        free(r);
        return NULL;
    }
    return r;
}

static void shard_seeds(void)
{
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *r;

    /* the fuzz base shard (also the delta base of fuzz_zshard) */
    if ((r = fuzz_base_shard(0, &size))) {
        put("fuzz_shard", "base.shard", r, size);
        /* a slot: the same shard followed by stale bytes */
        uint8_t *slot = calloc(1, size + 200);
        if (slot) {
            memcpy(slot, r, size);
            memset(slot + size, 0xA5, 200);
            put("fuzz_shard", "slot-trailing.shard", slot, size + 200);
            free(slot);
        }
        free(r);
    }

    /* empty: no tensors, no metadata */
    ftc_shard_info_t in = info(0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    if (l && (r = build(l, &size))) {
        put("fuzz_shard", "empty.shard", r, size);
        free(r);
    }
    ftc_shard_layout_destroy(l);

    /* one scalar and one metadata record */
    in = info(7);
    l = ftc_shard_layout_create(&in);
    if (l && ftc_shard_layout_add_tensor(l, "loss_scale", FTC_DTYPE_F32, 0, NULL, &err) >= 0 &&
        ftc_shard_layout_add_meta(l, "rng.state", "0123456789abcdef", 16, &err) == 0 &&
        (r = build(l, &size))) {
        put("fuzz_shard", "scalar-meta.shard", r, size);
        free(r);
    }
    ftc_shard_layout_destroy(l);

    /* every dtype, every rank 0..8, a zero-size tensor, several records */
    in = info(12345);
    l = ftc_shard_layout_create(&in);
    if (l) {
        static const int dts[] = {FTC_DTYPE_F32, FTC_DTYPE_BF16, FTC_DTYPE_F16, FTC_DTYPE_I8,
                                  FTC_DTYPE_U8,  FTC_DTYPE_I32,  FTC_DTYPE_I64};
        uint64_t shape[FTC_SHARD_MAX_DIMS] = {2, 1, 3, 1, 2, 1, 1, 2};
        char name[64];
        int ok = 1;
        for (uint32_t nd = 0; nd <= FTC_SHARD_MAX_DIMS && ok; nd++) {
            snprintf(name, sizeof name, "t.rank%u", nd);
            ok = ftc_shard_layout_add_tensor(l, name, dts[nd % 7], nd, shape, &err) >= 0;
        }
        uint64_t zero[2] = {4, 0};
        ok = ok && ftc_shard_layout_add_tensor(l, "t.empty", FTC_DTYPE_I64, 2, zero, &err) >= 0;
        ok = ok && ftc_shard_layout_add_meta(l, "a", "x", 1, &err) == 0;
        ok = ok && ftc_shard_layout_add_meta(l, "empty", NULL, 0, &err) == 0;
        ok = ok && ftc_shard_layout_add_meta(l, "seven.bytes", "1234567", 7, &err) == 0;
        if (ok && (r = build(l, &size))) {
            put("fuzz_shard", "all-dtypes.shard", r, size);
            free(r);
        } else if (!ok) {
            fprintf(stderr, "seedgen: all-dtypes: %s\n", err.msg);
            failures++;
        }
    }
    ftc_shard_layout_destroy(l);

    /* a synthetic training state (weights and moments, fp32 and bf16) */
    static const int sdt[2] = {FTC_DTYPE_F32, FTC_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        ftc_synth_options_t so = FTC_SYNTH_OPTIONS_INIT;
        so.bytes = 24u << 10;
        so.layers = 1;
        so.dtype = sdt[d];
        in = info(0);
        ftc_synth_t *s = ftc_synth_create(&so, &in, &err);
        if (!s) {
            fprintf(stderr, "seedgen: synth: %s\n", err.msg);
            failures++;
            continue;
        }
        put("fuzz_shard", d ? "synth-bf16.shard" : "synth-fp32.shard", ftc_synth_region(s),
            ftc_synth_size(s));
        ftc_synth_destroy(s);
    }
}

static void config_seeds(void)
{
    static const struct {
        const char *name, *type, *def;
    } keys[] = {
#define SEED_CFG(id, name, type, def, lo, hi, doc) {name, #type, def},
        FTC_CONFIG_KEYS(SEED_CFG)
#undef SEED_CFG
    };
    char flat[4096], nested[4096];
    size_t fo = 0, no = 0;
    fo += (size_t)snprintf(flat + fo, sizeof flat - fo, "{");
    no += (size_t)snprintf(nested + no, sizeof nested - no, "{");
    const char *open_section = NULL;
    size_t open_len = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char val[128];
        if (!strcmp(keys[k].type, "STR"))
            snprintf(val, sizeof val, "\"%s\"", keys[k].def);
        else if (!strcmp(keys[k].type, "SIZE"))
            snprintf(val, sizeof val, "\"%s\"", keys[k].def);
        else
            snprintf(val, sizeof val, "%s", keys[k].def);
        fo += (size_t)snprintf(flat + fo, sizeof flat - fo, "%s\"%s\": %s", k ? ", " : "",
                               keys[k].name, val);
        const char *dot = strchr(keys[k].name, '.');
        size_t sl = dot ? (size_t)(dot - keys[k].name) : 0;
        if (open_section && (!dot || sl != open_len || strncmp(open_section, keys[k].name, sl))) {
            no += (size_t)snprintf(nested + no, sizeof nested - no, "}");
            open_section = NULL;
        }
        const char *sep = no > 1 ? ", " : "";
        if (dot && !open_section) {
            no += (size_t)snprintf(nested + no, sizeof nested - no, "%s\"%.*s\": {", sep,
                                   (int)sl, keys[k].name);
            open_section = keys[k].name;
            open_len = sl;
            sep = "";
        } else if (open_section) {
            sep = ", ";
        }
        no += (size_t)snprintf(nested + no, sizeof nested - no, "%s\"%s\": %s", sep,
                               dot ? dot + 1 : keys[k].name, val);
    }
    if (open_section)
        no += (size_t)snprintf(nested + no, sizeof nested - no, "}");
    fo += (size_t)snprintf(flat + fo, sizeof flat - fo, "}\n");
    no += (size_t)snprintf(nested + no, sizeof nested - no, "}\n");
    /* both must load: they are the defaults */
    const char *docs[2] = {flat, nested};
    for (int i = 0; i < 2; i++) {
        ftc_config_t *cfg = ftc_config_create();
        ftc_err_t err = {0};
        if (!cfg || ftc_config_load_json(cfg, docs[i], strlen(docs[i]), "seed", &err)) {
            fprintf(stderr, "seedgen: generated config does not load: %s\n%s", err.msg, docs[i]);
            failures++;
        }
        ftc_config_destroy(cfg);
    }
    put("fuzz_config", "all-keys-flat.json", flat, strlen(flat));
    put("fuzz_config", "all-keys-nested.json", nested, strlen(nested));
}

#if defined(FTC_FUZZ_HAVE_ZSHARD)
static void zshard_seeds(void)
{
    uint64_t bsize = 0, nsize = 0;
    uint8_t *b = fuzz_base_shard(0, &bsize), *n = fuzz_base_shard(1, &nsize);
    static const struct {
        const char *name;
        int next, delta, level, filter; /* filter: ftc_zshard_filter_t */
        uint64_t chunk;
    } v[] = {
        {"base-l1-shuffle.ftcz", 0, 0, 1, FTC_ZSHARD_FILTER_BYTE, 4096},
        {"base-l3-plain.ftcz", 0, 0, 3, FTC_ZSHARD_FILTER_NONE, 1u << 20},
        {"next-l1-shuffle.ftcz", 1, 0, 1, FTC_ZSHARD_FILTER_BYTE, 4096},
        {"next-delta-l1-shuffle.ftcz", 1, 1, 1, FTC_ZSHARD_FILTER_BYTE, 4096},
        {"next-delta-lneg-plain.ftcz", 1, 1, -1, FTC_ZSHARD_FILTER_NONE, 8192},
        /* format version 2: bit planes, and plain chunks stored without zstd */
        {"base-l1-bitshuffle.ftcz", 0, 0, 1, FTC_ZSHARD_FILTER_BIT, 4096},
        {"next-delta-l1-bitshuffle.ftcz", 1, 1, 1, FTC_ZSHARD_FILTER_BIT, 4096},
        {"next-delta-l3-bitshuffle-4100.ftcz", 1, 1, 3, FTC_ZSHARD_FILTER_BIT, 4100},
        {"next-l1-plain-4096.ftcz", 1, 0, 1, FTC_ZSHARD_FILTER_NONE, 4096},
    };
    if (!b || !n) {
        fprintf(stderr, "seedgen: cannot build the base shard\n");
        failures++;
        goto out;
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t *file = NULL;
        size_t len = 0;
        ftc_err_t err = {0};
        const uint8_t *raw = v[i].next ? n : b;
        uint64_t raw_size = v[i].next ? nsize : bsize;
        if (ftc_zshard_encode(raw, raw_size, v[i].delta ? b : NULL, v[i].delta ? bsize : 0, 100,
                              v[i].level, v[i].filter, v[i].chunk, 1, &file, &len, &err)) {
            fprintf(stderr, "seedgen: encode %s: %s\n", v[i].name, err.msg);
            failures++;
            continue;
        }
        put("fuzz_zshard", v[i].name, file, len);
        free(file);
    }
out:
    free(b);
    free(n);
}
#else
static void zshard_seeds(void) {}
#endif

#if defined(FTC_FUZZ_HAVE_PERSIST)
/* A small sealed shard of one rank (dp 2 x tp 2), built with the layout API. */
static uint8_t *rank_shard(uint64_t step, uint32_t dp_rank, uint32_t tp_rank, uint64_t *size)
{
    ftc_shard_info_t in = info(step);
    in.dp_rank = dp_rank, in.tp_rank = tp_rank;
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    uint64_t shape[1] = {64};
    uint8_t *r = NULL;
    if (l && ftc_shard_layout_add_tensor(l, "w", FTC_DTYPE_F32, 1, shape, &err) >= 0)
        r = build(l, size);
    ftc_shard_layout_destroy(l);
    return r;
}

/* Removes DIR/<version>/<files> and DIR (two levels, as persist lays out). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char sub[PATH_MAX];
            if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
                continue;
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            ftc_fs_remove_dir(sub, NULL);
            unlink(sub);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Persists three versions of a two-rank job (a full one, then deltas) and
 * keeps each MANIFEST.json as a seed. */
static void manifest_seeds(void)
{
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tmp-persist", out_dir);
    remove_tree(dir);
    ftc_err_t err = {0};
    ftc_persist_options_t o = FTC_PERSIST_OPTIONS_INIT;
    o.threads = 1;
    o.chunk_bytes = 4096;
    ftc_persist_t *p = ftc_persist_open(dir, &o, &err);
    if (!p) {
        fprintf(stderr, "seedgen: persist_open %s: %s\n", dir, err.msg);
        failures++;
        return;
    }
    for (uint64_t step = 10; step <= 30; step += 10) {
        uint64_t sz[2] = {0, 0};
        uint8_t *r[2] = {rank_shard(step, 0, 1, &sz[0]), rank_shard(step, 1, 1, &sz[1])};
        const void *shards[2] = {r[0], r[1]};
        if (!r[0] || !r[1] || ftc_persist_write(p, step, shards, sz, 2) != 0) {
            fprintf(stderr, "seedgen: persist_write step %llu: %s\n", (unsigned long long)step,
                    ftc_persist_errstr(p));
            failures++;
        } else {
            uint8_t *m = NULL;
            size_t len = 0;
            char name[64];
            snprintf(path, sizeof path, "%s/v%020llu/MANIFEST.json", dir,
                     (unsigned long long)step);
            snprintf(name, sizeof name, "step%llu.json", (unsigned long long)step);
            if (ftc_fs_read_file(path, SEED_MAX, &m, &len, &err) == 0)
                put("fuzz_manifest", name, m, len);
            else {
                fprintf(stderr, "seedgen: %s\n", err.msg);
                failures++;
            }
            free(m);
        }
        free(r[0]);
        free(r[1]);
    }
    ftc_persist_close(p);
    remove_tree(dir);
}
#else
static void manifest_seeds(void) {}
#endif

static void rdzv_seed(const char *name, uint32_t rank, uint32_t world, const char *job,
                      uint64_t gen, size_t bloblen, size_t cut)
{
    static uint8_t blob[FTC_DIST_BLOB_MAX];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)(i * 7 + 1);
    ftc__dist_hello_t h = {.rank = rank, .world = world, .generation = gen, .blob = blob,
                           .bloblen = bloblen};
    snprintf(h.job, sizeof h.job, "%s", job);
    uint8_t out[FTC__DIST_HELLO_MAX];
    size_t n = ftc__dist_hello_encode(&h, out, sizeof out);
    if (!n) {
        fprintf(stderr, "seedgen: fuzz_rdzv/%s does not encode\n", name);
        failures++;
        return;
    }
    put("fuzz_rdzv", name, out, cut && cut < n ? cut : n);
}

/* fuzz_rdzv's rank 0 is of job "fuzzjob", generation 3, 4 ranks. */
static void rdzv_seeds(void)
{
    char longjob[FTC_DIST_JOB_MAX + 1];
    memset(longjob, 'j', FTC_DIST_JOB_MAX);
    longjob[FTC_DIST_JOB_MAX] = 0;
    rdzv_seed("ok", 1, 4, "fuzzjob", 3, 40, 0);
    rdzv_seed("ok-rank3", 3, 4, "fuzzjob", 3, 1, 0);
    rdzv_seed("other-job", 1, 4, "otherjob", 3, 40, 0);
    rdzv_seed("no-job", 2, 4, "", 3, 40, 0);
    rdzv_seed("stale", 1, 4, "fuzzjob", 2, 40, 0);
    rdzv_seed("newer", 1, 4, "fuzzjob", 4, 40, 0);
    rdzv_seed("world", 1, 8, "fuzzjob", 3, 40, 0);
    rdzv_seed("rank0", 0, 4, "fuzzjob", 3, 40, 0);
    rdzv_seed("rank-out", 4, 4, "fuzzjob", 3, 40, 0);
    rdzv_seed("longest", 1, 4, longjob, 3, FTC_DIST_BLOB_MAX, 0);
    rdzv_seed("cut", 1, 4, "fuzzjob", 3, 40, 30);
}

/* fuzz_records: the state file of an in-process rank, as its writer
 * writes it (read back from a temporary file). */
static void records_seeds(void)
{
    char dir[] = "/tmp/ftc-seedgen-XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        failures++;
        return;
    }
    snprintf(path, sizeof path, "%s/state", dir);
    ftc_inproc_state_t st = {.pid = 2147483647, .gen = UINT64_MAX, .phase = FTC_INPROC_WAITING};
    memset(st.why, 'w', sizeof st.why - 1);
    for (int i = 0; i < 2; i++) {
        if (i) {
            snprintf(st.why, sizeof st.why, "left: node3\nlost");
            st.phase = FTC_INPROC_RUNNING;
        }
        ftc_err_t err = {0};
        char buf[1024];
        FILE *f = NULL;
        size_t n = 0;
        if (ftc_inproc_state_write(path, &st, &err) || !(f = fopen(path, "rb")) ||
            !(n = fread(buf, 1, sizeof buf, f))) {
            fprintf(stderr, "seedgen: state file: %s\n", err.code ? err.msg : strerror(errno));
            failures++;
        } else {
            put("fuzz_records", i ? "state-newline" : "state-longest", buf, n);
        }
        if (f)
            fclose(f);
    }
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    shard_seeds();
    config_seeds();
    zshard_seeds();
    manifest_seeds();
    rdzv_seeds();
    records_seeds();
    if (failures) {
        fprintf(stderr, "seedgen: %d seed(s) failed\n", failures);
        return 1;
    }
    return 0;
}
