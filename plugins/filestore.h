/*
 * filestore.h — the replicated checkpoint directory of `ftc run`
 * (FTC_CKPT_DIR): in-memory replicated checkpoints for a training binary
 * that is not linked with libftc and saves and loads its own files.
 *
 * Each node's supervisor owns one directory on tmpfs,
 * /dev/shm/ftc.<job>.ckptdir.n<index>/, which its ranks get as FTC_CKPT_DIR.
 * The store watches it (inotify: IN_CLOSE_WRITE, IN_MOVED_TO — a file the
 * binary finished writing, or renamed into place; IN_DELETE, IN_MOVED_FROM —
 * a file removed); once the directory has
 * been quiet for a moment (or, when writes never pause, busy_max_ms after
 * the change: see "A busy directory" below) it packs every regular file of it (top level and
 * subdirectories, relative names) into one shard (ckpt/shard.h: one uint8
 * tensor per file, the version = a wall-clock millisecond stamp, strictly
 * increasing per node) and pushes it to the next k live nodes in ring order
 * over libfabric (ckpt/replica.h, an engine and endpoint of its own; wire
 * job "<job>.files", so its replica slots and HMAC key never mix with the
 * agent's). A push counts when acknowledged (the peer verified it); the
 * newest acknowledged version of each node and the nodes holding it are
 * recorded in Redis (ftc:{job}:files, field = node index); a version counts
 * once recorded (a failed record is retried before any newer pack).
 *
 * Restore (before the supervisor starts its ranks): the directory is made
 * to hold the union of the newest recorded version of EVERY node that ever
 * pushed (members and lost nodes alike); when two nodes hold a file of the
 * same name, the newer version wins. A version is taken from this node's
 * own memory when it has it (its own directory, or a replica it holds),
 * else fetched from a live holder; every version is checksum-verified before
 * a byte is written (I1), and files are written atomically (temp + rename).
 * A version that no live node holds is reported (the error names the node
 * and the holders it tried) and the others are still restored.
 *
 * Per-file stamps: each file in a version carries its mtime (ns) and mode
 * (metadata record "ftc.files"); on a name clash the file with the later
 * mtime wins (then the newer version, then the higher node index), and a
 * restore sets the mtime it wrote, so a restored file re-packed by its new
 * node keeps its stamp. A local file newer than every recorded copy is kept.
 * Files of the directory that are in no version are left alone.
 *
 * Deletions, last writer wins: a file the binary deleted since the node's
 * previous pack or restore is a tombstone (its name, the mtime of the
 * deleted copy and when the deletion was seen) in the node's later versions
 * (metadata record "ftc.gone.v2"; "ftc.gone" of an older ftc is read too).
 * A restore merges the tombstones of the recorded versions (the newest per
 * name): the deleted copy (its mtime; its size and xxh3 when this node
 * packed it before the deletion) is not written, and is removed from
 * the directory (another node's, put there by an earlier restore); a copy
 * written again since wins. The tombstones no newer copy undid become the
 * restoring node's own, so a deletion outlives the node that made it. At
 * most 4096 (in 512 KiB) are kept, the oldest deletions dropped first: a
 * deletion older than that may come back where a stale copy survives.
 *
 * A busy directory: a file a rank keeps appending to (a log, TensorBoard's
 * event file) sends writes all the time, so the directory is never quiet.
 * Once a change has waited busy_max_ms (default 30 s) for a quiet period, the
 * version is packed anyway, and so is one a flush asks for before the quiet
 * period: then a file that changes while it is read is still being written.
 * Such a file, and in every pack (quiet or not) a file some process holds
 * open for writing (/proc/PID/fdinfo) or maps shared and writable
 * (/proc/PID/maps: written through a mapping; looked for before the files are read
 * and again after: one opened meanwhile postpones the pack), goes into the
 * version as the previous own version held it, or is left out when no
 * version had it (a warning names such files). A half-written file is never packed, even when its
 * writer pauses past the quiet period; an append-only file is packed once it
 * is closed. A file held open for writing busy_max_ms or longer is named in
 * a warning (again each time that time doubles), even when nothing else
 * changes: one never closed is never replicated as it stands, however long
 * it stands still (by design: a writer paused halfway looks the same, and a
 * snapshot would replace the last whole copy; docs/recovery.md). Keep files
 * that stay open (logs) outside the directory.
 *
 * Limits: the files together must fit max_bytes (default 4 GiB; 2^61 at
 * most, whatever the cap; sizes added without wrapping) or the
 * version is refused (FTC_ERANGE, a log line and a ckptdir_too_big event);
 * symbolic links and special files are skipped with a warning; names are
 * relative paths of at most 1024 bytes without "." or ".." components
 * (checked again on restore). Names starting with ".ftc-tmp." are the
 * store's own temporaries and are never packed nor restored; the ones a
 * killed store process left (".ftc-tmp.PID.N", ".ftc-tmp.gone.PID.N", PID
 * ended) are removed by the next scan and by a store at its create.
 *
 * Errors: FTC_EINVAL (bad arguments), FTC_ERANGE (over the cap), FTC_ENOENT
 * (a version no live node holds), FTC_ECORRUPT (every copy failed its
 * checksum), FTC_ETIMEDOUT (a push or a restore passed its deadline),
 * FTC_EFABRIC, FTC_EREDIS, FTC_EIO; err names the node and what was tried.
 *
 * Threads: one thread of its own drives the watch, the fabric engine
 * (pushes, serving peers' fetches) and restore requests; the functions below
 * may be called from one other thread (the supervisor's).
 */
#ifndef FTC_PLUGINS_FILESTORE_H
#define FTC_PLUGINS_FILESTORE_H

#include "core/err.h"
#include "detect/redis.h"

#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftc_filestore ftc_filestore_t;

/* Creates the directory (mode 0700; an existing one is kept: a restarted
 * supervisor finds its files), opens the endpoint on `provider` (NULL =
 * FI_PROVIDER or "tcp;ofi_rxm"), publishes its address in Redis
 * (ftc:{job}:filefab) and starts the thread. k >= 1 replicas. NULL with err
 * set. */
ftc_filestore_t *ftc_filestore_create(const char *job, uint32_t index, const char *node_id,
                                      const ftc_redis_url_t *redis, int k, const char *provider,
                                      ftc_err_t *err);
/* Stops the thread and frees; the directory and replica slots stay. */
void ftc_filestore_destroy(ftc_filestore_t *fs); /* NULL is a no-op */
/* The directory (FTC_CKPT_DIR). */
const char *ftc_filestore_dir(const ftc_filestore_t *fs);
/* Tells the store which nodes are live members now (ring order = index
 * order of members[]); pushes go to the next k of them. Generation gen
 * stamps its wire messages (older ones are refused, I4). */
int ftc_filestore_set_members(ftc_filestore_t *fs, uint64_t gen, const char (*members)[65], int n,
                              ftc_err_t *err);
/* The pids of this node's ranks, each time they are started (n = 0: none),
 * and each rank the caller reaped (status from waitpid; -1 when unknown, e.g.
 * killed by the caller). Before it packs, and before a restore of a
 * directory that changed since the last version, the store checks that no watched
 * rank died other than by exiting 0 (waitid with WNOWAIT for those not
 * reaped yet): a rank killed while it rewrote a file in place has that file
 * closed by the kernel, half-written. After such a death the changes are not
 * packed (the next flush says so, FTC_ECANCELED), and the next restore puts
 * the recorded copies back over newer local files and renames files that are
 * in no recorded version aside (".ftc-tmp.crashed.NAME", NAME cut when too
 * long; one that cannot be moved fails the restore). watch_ranks
 * clears the state for the new ranks. The ranks must be children of this
 * process. A store that finds its predecessor's mark ".ftc-tmp.open" (a
 * supervisor that died, its ranks with it, without destroying its store
 * cleanly) starts in that state too. */
int ftc_filestore_watch_ranks(ftc_filestore_t *fs, const pid_t *pids, int n, ftc_err_t *err);
void ftc_filestore_rank_exited(ftc_filestore_t *fs, pid_t pid, int status);
/* Cheap: lets the supervisor's loop log what happened since the last call
 * (pushes done or failed). Never blocks. */
void ftc_filestore_poll(ftc_filestore_t *fs);
/* Waits (bounded by the store's deadline) until every version written so
 * far has been pushed or has failed; 0 or the first push error (since the
 * previous flush; an error is forgotten once a newer version reached all
 * its peers). timeout_ms <= 0: push deadline + quiet period + 10 s. */
int ftc_filestore_flush(ftc_filestore_t *fs, int timeout_ms, ftc_err_t *err);
/* Sets the members (as ftc_filestore_set_members), then refills the
 * directory as described at the top. 0 when every recorded version was
 * restored; otherwise the first error, with the rest restored anyway. */
int ftc_filestore_restore(ftc_filestore_t *fs, uint64_t gen, const char (*members)[65], int n,
                          ftc_err_t *err);

/* ---- added with the implementation ------------------------------------------ */

/* Limits and deadlines; start from FTC_FILESTORE_LIMITS_INIT. */
typedef struct ftc_filestore_limits {
    uint32_t struct_size;
    uint32_t version;
    uint64_t max_bytes;     /* the directory's files together (default 4 GiB): a bigger
                               directory is not pushed (error, log line and a
                               ckptdir_too_big event) */
    int quiet_ms;           /* the directory must be quiet this long before a pack (200) */
    int push_timeout_ms;    /* deadline of one push (60000) */
    int restore_timeout_ms; /* deadline of a restore's fetches, from its request (120000);
                               its file writes end min(half of it, 10 s) later */
    int busy_max_ms;        /* a change waits at most this long for a quiet period,
                               then is packed without the files being written (30000;
                               0: wait for quiet as long as it takes) */
} ftc_filestore_limits_t;

#define FTC_FILESTORE_LIMITS_INIT                                                                  \
    {                                                                                              \
        sizeof(ftc_filestore_limits_t), 2, (uint64_t)4 << 30, 200, 60000, 120000, 30000            \
    }

/* Applies new limits (taken by the thread at its next pack / push / restore).
 * FTC_EINVAL for a zero cap, a deadline < 1 ms, a negative quiet_ms or
 * busy_max_ms, any time above 86400000 ms (a day), or a struct not from
 * FTC_FILESTORE_LIMITS_INIT (version 2). Thread-safe. */
int ftc_filestore_set_limits(ftc_filestore_t *fs, const ftc_filestore_limits_t *l, ftc_err_t *err);

typedef struct ftc_filestore_stats {
    uint64_t versions_pushed; /* versions acknowledged by at least one peer and recorded */
    uint64_t push_failures;   /* versions no peer (or fewer than k) acknowledged, refused packs */
    uint64_t last_version;    /* newest acknowledged version of this node (0: none) */
    uint64_t last_bytes;      /* its shard size */
    uint64_t files_restored;  /* files written by restores */
    uint64_t rebuilds;        /* fabric endpoints rebuilt after breaking */
} ftc_filestore_stats_t;

/* Counters so far. Thread-safe, never blocks for long. */
void ftc_filestore_stats(ftc_filestore_t *fs, ftc_filestore_stats_t *st);

#ifdef __cplusplus
}
#endif
#endif
