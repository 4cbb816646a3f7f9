/*
 * persist.h — the persist tier: committed versions of shards written to a
 * directory (local disk or a shared file system) as chunked, bit- or byte-shuffled,
 * optionally XOR-delta'd zstd; crash-safe; with retention and verified loads.
 * It is the last resort when more nodes are lost than the in-memory replicas
 * cover, and what a restarted job reads first when shm is gone.
 *
 * On disk (docs/persist-format.md):
 *
 *   DIR/
 *     v00000000000000000120/              one directory per version, named by
 *                                         step (20 digits, so names sort)
 *       shard-d0-t0-p0.ftcz               one compressed shard per rank
 *       MANIFEST.json                     job, step, generation, and per shard:
 *                                         file, coordinates, raw size and xxh3,
 *                                         file size and xxh3, delta base step
 *       COMMITTED                         written last; names the manifest's
 *                                         xxh3, so a marker cannot vouch for a
 *                                         different manifest
 *
 * Every file is written temp -> fsync -> rename -> fsync(dir), in the order
 * shards, manifest, COMMITTED. A version without a valid COMMITTED marker does
 * not exist for readers. A crash or an I/O error at any point leaves every
 * earlier committed version loadable (I3); tests prove it by failing the N-th
 * write, fsync and rename through opts.fault. (A write that fails for a full
 * disk first removes what retention would, while a version it keeps loads.)
 *
 * Loading takes the newest committed version whose marker, manifest and every
 * checksum (compressed chunks, the reconstructed shard, its tensors, and each
 * delta base in its chain) verify; when one fails it logs a warning naming the
 * version and the failure and tries the one before.
 *
 * Thread-safety: a persist handle is used by one thread at a time; it runs its
 * own compression threads inside ftc_persist_write.
 */
#ifndef FTC_CKPT_PERSIST_H
#define FTC_CKPT_PERSIST_H

#include "ckpt/shard.h"
#include "core/config.h"
#include "core/err.h"
#include "core/fsio.h"

#include <stdbool.h>
#include <stdint.h>

/* What is done to a tensor's elements before zstd (persist option `shuffle`,
 * .ftcz header flags). BYTE stays the default: on one-step XOR deltas of
 * AdamW state it compresses better than BIT (1.43x vs 1.38x fp32, 2.55x vs
 * 2.28x bf16, docs/benchmarks.md), because the bits of one element are
 * correlated (where its change stops) and a byte plane keeps 8 of them
 * together while a bit plane mixes 8 elements. */
typedef enum ftc_zshard_filter {
    FTC_ZSHARD_FILTER_NONE = 0, /* elements as they are */
    FTC_ZSHARD_FILTER_BYTE = 1, /* byte shuffle by dtype width (what `true` meant before) */
    FTC_ZSHARD_FILTER_BIT = 2,  /* bit-plane shuffle (bitshuffle); format version 2 */
} ftc_zshard_filter_t;
#define FTC_ZSHARD_FILTER_DEFAULT FTC_ZSHARD_FILTER_BYTE

typedef struct ftc_persist_options {
    uint32_t struct_size; /* sizeof(ftc_persist_options_t), set by the INIT macro */
    uint32_t version;     /* 1 */
    int level;            /* zstd level (default 1) */
    int threads;          /* compression threads; 0 = one per online core */
    uint64_t chunk_bytes; /* uncompressed bytes per chunk (default 4 MiB) */
    int shuffle;          /* ftc_zshard_filter_t (default FTC_ZSHARD_FILTER_BYTE); a C
                             `true` is 1, the byte shuffle, as before */
    bool delta;           /* XOR delta against the previous persisted version (default true) */
    int full_every;       /* a full version at least every N versions (default 8) */
    int keep;             /* committed versions kept, plus the delta bases they need (default 3) */
    ftc_fault_t *fault;   /* I/O fault injection; NULL = none. Not owned. */
} ftc_persist_options_t;

#define FTC_PERSIST_OPTIONS_INIT                                                                   \
    {sizeof(ftc_persist_options_t), 1, 1, 0, 4u << 20, FTC_ZSHARD_FILTER_DEFAULT, true, 8, 3, NULL}

/* Fills opts from the persist.* keys of a config (fault is left alone). */
void ftc_persist_options_from_config(ftc_persist_options_t *opts, const ftc_config_t *cfg);

typedef struct ftc_persist ftc_persist_t;

/* Opens (creating when missing, mode 0700) a persist directory. Stale temp
 * files from a crashed writer are removed (those whose writer process, named
 * by the ".tmp.<pid>" suffix, is alive stay). NULL on failure, with err set. */
ftc_persist_t *ftc_persist_open(const char *dir, const ftc_persist_options_t *opts, ftc_err_t *err);
/* Opens an existing persist directory to read it only (another node's tier
 * on a shared file system, whose writer may be alive): nothing is created,
 * no temp file removed, ftc_persist_write refused (FTC_EINVAL). NULL with
 * err (FTC_ENOENT when dir is not a directory). */
ftc_persist_t *ftc_persist_open_reader(const char *dir, ftc_err_t *err);
void ftc_persist_close(ftc_persist_t *p); /* NULL is a no-op */
/* The last error's message (never NULL). */
const char *ftc_persist_errstr(const ftc_persist_t *p);

/* Writes and commits one version made of n sealed shards (each is a whole
 * shard region, e.g. a shm slot; their steps must equal step and their
 * coordinates must differ). Deltas are taken against the previous version
 * this handle wrote when layouts match and that version's chain is still on
 * disk as written (else that shard is full). Returns 0 once COMMITTED is
 * durable; on error nothing committed before is touched, but for what
 * retention removes on a full disk. Applies retention after a successful
 * commit, and on a full disk (FTC_ENOSPC) before one more try: that pass
 * removes committed versions only while one it keeps loads
 * (docs/persist-format.md, Retention). */
int ftc_persist_write(ftc_persist_t *p, uint64_t step, const void *const *shards,
                      const uint64_t *sizes, int n);

/* Figures of the last successful write, for logs and bench/persist. */
typedef struct ftc_persist_stats {
    uint64_t raw_bytes;   /* shard bytes in */
    uint64_t file_bytes;  /* bytes written to files (all shards of the version) */
    double compress_s;    /* wall time compressing */
    double write_s;       /* wall time writing + fsync + rename */
    bool delta;           /* written as a delta */
} ftc_persist_stats_t;
void ftc_persist_last_stats(const ftc_persist_t *p, ftc_persist_stats_t *st);

/* ---- reading ---------------------------------------------------------------- */

enum ftc_persist_state {
    FTC_PV_COMMITTED = 0,  /* marker and manifest agree (contents not yet checked) */
    FTC_PV_INCOMPLETE = 1, /* no marker: an unfinished or crashed write */
    FTC_PV_BAD_MARKER = 2, /* marker present but unreadable or not matching the manifest */
};

typedef struct ftc_persist_version {
    uint64_t step;
    uint64_t generation;
    int state;         /* ftc_persist_state */
    int n_shards;      /* from the manifest (0 when unreadable) */
    uint64_t raw_bytes;  /* sum of the shards' raw sizes */
    uint64_t file_bytes; /* sum of the shard files' sizes */
    uint64_t base_step;  /* UINT64_MAX when no shard is a delta */
} ftc_persist_version_t;

/* Lists every version directory, newest first, with its marker state (a cheap
 * check: no shard is decompressed). *out is malloc'd; the caller frees it. */
int ftc_persist_list(ftc_persist_t *p, ftc_persist_version_t **out, int *n);

/* A loaded version: the shards, decompressed and verified. */
typedef struct ftc_persist_loaded {
    uint64_t step;
    uint64_t generation;
    int n_shards;
    uint8_t **shards;  /* n_shards malloc'd shard regions */
    uint64_t *sizes;   /* their sizes */
    int fallbacks;     /* how many newer versions were skipped because they failed */
} ftc_persist_loaded_t;

#define FTC_PERSIST_NEWEST UINT64_MAX

/* Loads version `step` (or, with FTC_PERSIST_NEWEST, the newest committed one
 * that verifies, falling back with a warning per failure). Each shard is
 * decompressed, its delta chain applied, and verified with ftc_shard_open(...,
 * FTC_SHARD_VERIFY). FTC_ENOENT with a message listing what was tried when no
 * version verifies. Free the result with ftc_persist_loaded_free. */
int ftc_persist_load(ftc_persist_t *p, uint64_t step, ftc_persist_loaded_t **out);
void ftc_persist_loaded_free(ftc_persist_loaded_t *l); /* NULL is a no-op */

/* Removes every version newer than `step`, committed or not (the COMMITTED
 * marker first, so a half-removed version never looks committed): what a
 * restore to `step` abandons, so that the steps after it can be written again
 * (a committed version is never overwritten). Durable on return: the
 * directory is fsync'd once versions are gone (through opts.fault). *dropped
 * (may be NULL): how many. FTC_EINVAL on a read-only handle, FTC_EIO naming
 * the path. */
int ftc_persist_drop_newer(ftc_persist_t *p, uint64_t step, int *dropped);

/* Fully verifies version `step` (as load does, without keeping the data).
 * 0 when good; otherwise the error names the file and what failed. */
int ftc_persist_verify(ftc_persist_t *p, uint64_t step);

/* ---- one compressed shard file (.ftcz), for tools ----------------------------- */

/* Header facts of an .ftcz file without decompressing it. */
typedef struct ftc_zshard_info {
    uint64_t step;
    uint64_t raw_size;
    uint64_t raw_xxh3;
    uint64_t base_step;      /* UINT64_MAX when not a delta */
    uint64_t base_raw_xxh3;  /* xxh3 of the base shard the delta applies to */
    uint64_t chunk_bytes;
    uint32_t n_chunks;
    int level;
    bool shuffle;            /* filter != FTC_ZSHARD_FILTER_NONE */
    int filter;              /* ftc_zshard_filter_t */
    uint32_t version;        /* format version of the file: 1 or 2 */
} ftc_zshard_info_t;

/* Reads and validates an .ftcz file's header and chunk table. */
int ftc_zshard_info(const void *file, size_t len, ftc_zshard_info_t *info, ftc_err_t *err);

/* Decodes an .ftcz buffer into a malloc'd raw shard (caller frees). base is
 * the raw base shard for a delta (NULL for a full file); its xxh3 must match.
 * Every chunk checksum and the final raw xxh3 are verified. */
int ftc_zshard_decode(const void *file, size_t len, const void *base, uint64_t base_size,
                      uint8_t **raw, uint64_t *raw_size, ftc_err_t *err);

#endif
