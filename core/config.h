/*
 * config.h — configuration: flags over FTC_* environment over a JSON file
 * over defaults.
 *
 * Every setting is one row of FTC_CONFIG_KEYS below: a dotted name, a type,
 * a default, a range and a sentence. The same row gives its three spellings:
 *
 *   JSON file     {"persist": {"level": 3}}    (or the flat "persist.level": 3)
 *   environment   FTC_PERSIST_LEVEL=3
 *   flag          --persist-level 3  /  --persist-level=3
 *
 * A value from a higher source is never replaced by one from a lower source,
 * whatever the order in which they are loaded. Unknown keys in a file and
 * unknown flags are errors naming the key (a typo must not be ignored), and
 * so are a key given twice in one file (flat and nested) and an object that
 * groups no key;
 * unknown FTC_* environment variables are left alone, since other parts of a
 * job use that prefix too. A value of the wrong type or out of range is an
 * error naming the key, the source and the allowed range.
 *
 * A config is not thread-safe; build it in main() and read it from anywhere
 * afterwards.
 */
#ifndef FTC_CORE_CONFIG_H
#define FTC_CORE_CONFIG_H

#include "core/err.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* X(ID, "dotted.name", TYPE, "default", min, max, "what it does") */
#define FTC_CONFIG_KEYS(X)                                                                         \
    X(JOB_ID, "job.id", STR, "ftc", 0, 0,                                                          \
      "job identifier: names files, shm slots and keys (also --job)")                              \
    X(JOB_DIR, "job.dir", STR, "", 0, 0,                                                           \
      "the job's local directory (embedded Redis address, "                                        \
      "logs); default $TMPDIR/ftc-JOB")                                                            \
    X(LOG_LEVEL, "log.level", STR, "info", 0, 0, "debug, info, warn, error or off")                \
    X(REDIS_URL, "redis.url", STR, "", 0, 0,                                                       \
      "redis://[user:password@]host:port/db (also --redis); "                                      \
      "empty: the job's embedded Redis")                                                           \
    X(PERSIST_DIR, "persist.dir", STR, "", 0, 0, "directory of the persist tier")                  \
    X(PERSIST_LEVEL, "persist.level", INT, "1", -7, 19,                                            \
      "zstd level (1 is fastest; 3+ rarely "                                                       \
      "helps on weights)")                                                                         \
    X(PERSIST_THREADS, "persist.threads", INT, "0", 0, 256,                                        \
      "compression threads; 0 = one per "                                                          \
      "online core")                                                                               \
    X(PERSIST_CHUNK, "persist.chunk_bytes", SIZE, "4MiB", 4096, (1ll << 31),                       \
      "uncompressed bytes per zstd chunk")                                                         \
    X(PERSIST_SHUFFLE, "persist.shuffle", BOOL, "true", 0, 1,                                      \
      "filter before compression: none, byte (shuffle by dtype width) or bit (bit planes); "       \
      "true = byte (the default filter), false = none")                                            \
    X(PERSIST_DELTA, "persist.delta", BOOL, "true", 0, 1,                                          \
      "XOR against the previous persisted version before compression")                             \
    X(PERSIST_FULL_EVERY, "persist.full_every", INT, "8", 1, 1000000,                              \
      "a full (non-delta) version every N persisted versions")                                     \
    X(PERSIST_KEEP, "persist.keep", INT, "3", 1, 1000000,                                          \
      "committed versions kept (plus the bases their deltas need)")                                \
    X(PERSIST_EVERY, "persist.every", INT, "10", 1, 1000000,                                       \
      "persist every M committed checkpoints")                                                     \
    X(REDUNDANCY, "redundancy", STR, "1", 0, 0,                                                    \
      "in-memory redundancy: K replicas, xor:G or "                                                \
      "rs:G+M")                                                                                    \
    X(CKPT_BUSY, "checkpoint.busy", STR, "wait", 0, 0,                                             \
      "a checkpoint while two older ones are "                                                     \
      "still uncommitted: wait or skip")                                                           \
    X(CKPT_INFLIGHT, "checkpoint.inflight", INT, "2", 1, 2,                                        \
      "versions of a rank replicating at once: 2 (a kill may lose 2 steps when a step is "         \
      "shorter than a commit) or 1 (a checkpoint waits for the previous commit: at most 1)")       \
    X(DETECT_HANG_MS, "detect.hang_ms", INT, "5000", 100, 86400000,                                \
      "a rank whose checkpoints stop for max(10 x its median step, this) is hung (ftc run "        \
      "kills it)")                                                                                 \
    X(DETECT_START_MS, "detect.start_ms", INT, "600000", 0, 86400000,                              \
      "a rank whose process finished no checkpoint this long after it started is hung (ftc run "  \
      "kills it), once the job's ranks are known to link libftc; 0: no limit")                     \
    X(DETECT_TTL_MS, "detect.ttl_ms", INT, "1000", 200, 600000,                                    \
      "heartbeat TTL: a node whose heartbeat is not renewed for this long is lost (heartbeats "    \
      "every min(250, ttl/4) ms); raise it where links flap for longer")                           \
    X(FABRIC_PROVIDER, "fabric.provider", STR, "", 0, 0,                                           \
      "libfabric provider (default: "                                                              \
      "FI_PROVIDER, else tcp;ofi_rxm)")                                                            \
    X(AGENT_TIMEOUT, "agent.timeout_ms", INT, "30000", 100, 3600000,                               \
      "deadline of one replication or fetch, and of a local connection's HELLO")                   \
    X(CKPTDIR_MAX_BYTES, "ckptdir.max_bytes", SIZE, "4GiB", 1, (1ll << 50),                        \
      "ftc run --ckpt-dir: the node's files together may be this big (a bigger directory is "      \
      "not replicated: an error and a ckptdir_too_big event)")                                     \
    X(CKPTDIR_QUIET_MS, "ckptdir.quiet_ms", INT, "200", 0, 600000,                                 \
      "ftc run --ckpt-dir: the directory is packed once no write came for this long")              \
    X(CKPTDIR_BUSY_MAX_MS, "ckptdir.busy_max_ms", INT, "30000", 0, 86400000,                       \
      "ftc run --ckpt-dir: a change waits at most this long for a quiet period, then is packed "   \
      "without the files still being written (0: waits as long as it takes)")                      \
    X(FAULT, "fault", STR, "", 0, 0,                                                               \
      "I/O fault injection for tests: write:N, fsync:N or "                                        \
      "rename:N [,crash] [,enospc]")

typedef enum ftc_config_key {
#define FTC__CFG_ENUM(id, name, type, def, lo, hi, doc) FTC_CFG_##id,
    FTC_CONFIG_KEYS(FTC__CFG_ENUM)
#undef FTC__CFG_ENUM
        FTC_CFG__COUNT
} ftc_config_key_t;

enum ftc_config_source {
    FTC_SRC_DEFAULT = 0,
    FTC_SRC_FILE = 1,
    FTC_SRC_ENV = 2,
    FTC_SRC_FLAG = 3,
};

typedef struct ftc_config ftc_config_t;

/* A config holding every default. NULL on out of memory. */
ftc_config_t *ftc_config_create(void);
void ftc_config_destroy(ftc_config_t *cfg); /* NULL is a no-op */

/* Loads a JSON file (objects nest by the dotted name). Errors name the file,
 * the key and, for JSON syntax, the line and column. All or nothing: on any
 * error cfg is exactly as before the call (no key of the file applied). */
int ftc_config_load_file(ftc_config_t *cfg, const char *path, ftc_err_t *err);
/* Same, from a string (for tests and the fuzzer); origin names it in errors. */
int ftc_config_load_json(ftc_config_t *cfg, const char *json, size_t len, const char *origin,
                         ftc_err_t *err);
/* Reads FTC_<NAME> for every key from envp (NULL = the process environment). */
int ftc_config_load_env(ftc_config_t *cfg, char *const *envp, ftc_err_t *err);
/* Sets a key by its dotted name from text, as the given source
 * (FTC_SRC_DEFAULT..FTC_SRC_FLAG; another source, or a NULL name or value,
 * is FTC_EINVAL). */
int ftc_config_set(ftc_config_t *cfg, const char *name, const char *value, int source,
                   ftc_err_t *err);
/* Tries argv[*i] as a config flag ("--persist-level 3" or "--persist-level=3");
 * on a match consumes it (and its value), advances *i and returns 1; returns
 * 0 if the flag is not a config flag; <0 with err set on a bad value. A
 * boolean flag takes the next argument only when it spells a boolean (1/0,
 * true/false, yes/no, on/off; persist.shuffle also a filter name); else the
 * flag is bare, means true, and the next argument is left alone. */
int ftc_config_parse_flag(ftc_config_t *cfg, int argc, char **argv, int *i, ftc_err_t *err);

/* STR keys. persist.shuffle, a boolean that also takes a filter name, reads
 * back here as "none", "byte" or "bit" (true is the default filter, "byte";
 * false "none"), and as a boolean that says whether any filter is on. */
const char *ftc_config_str(const ftc_config_t *cfg, ftc_config_key_t key);
int64_t ftc_config_int(const ftc_config_t *cfg, ftc_config_key_t key);
bool ftc_config_bool(const ftc_config_t *cfg, ftc_config_key_t key);
int ftc_config_source(const ftc_config_t *cfg, ftc_config_key_t key);
const char *ftc_config_name(ftc_config_key_t key);

/* Prints "name = value  (source)" for every key; or the help table of flags
 * when help is true. */
void ftc_config_print(const ftc_config_t *cfg, FILE *out, bool help);

/* "4MiB", "1G", "4096" -> bytes: digits first (no blank or sign before them), then
 * an optional K/M/G/T with or without "iB". 0 or FTC_EINVAL / FTC_ERANGE. */
int ftc_parse_size(const char *s, int64_t *out);

/* A whole decimal number in min..max, strictly: an optional sign and digits,
 * nothing before or after them ("12abc", " 3", "0x10", "" are FTC_EINVAL; a
 * number outside min..max, or past int64, is FTC_ERANGE). *out is written
 * only on success. For environment variables such as MASTER_PORT, where
 * atoi's silent 0 or truncation would be a wrong value instead of an error.
 * Thread-safe. */
int ftc_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);
/* The same for an unsigned 64-bit number: digits only (no sign: strtoull and
 * sscanf's %llu take "-1" as 2^64-1), nothing before or after them. */
int ftc_parse_u64(const char *s, uint64_t *out);
/* Copies the next white-space-separated word at *p into out (cap bytes)
 * and moves *p past it; false when there is none or it does not fit: a
 * word too long for its field is refused, not cut with its rest taken for
 * the next field (as sscanf's "%127s %63s" does). For records of words. */
bool ftc_next_word(const char **p, char *out, size_t cap);

#endif
