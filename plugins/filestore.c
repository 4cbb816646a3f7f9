/*
 * filestore.c — see filestore.h.
 *
 * The store's thread owns everything that talks to the outside: the inotify
 * descriptor, the fabric endpoint and replication engine, and one Redis
 * connection. The supervisor's thread only hands it requests (members,
 * flush, restore, limits) under a mutex and waits on a condition variable,
 * always with a deadline.
 *
 * A version of this node is packed into one of two own shm slots
 * ("ftc.JOB.files.n<I>.self.s<0|1>"): the one not holding the newest
 * acknowledged version, so a push that fails never destroys the previous
 * one (I3), and a restarted supervisor finds its own newest version in
 * memory. It is pushed as one transfer per peer, so each holder's ACK is
 * known and recorded in Redis (ftc:{job}:files).
 */
#include "plugins/filestore.h"
#include "plugins/filestore_internal.h"

#include "ckpt/replica.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "ckpt/wire.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fabric.h"
#include "core/fsio.h"
#include "core/hash.h"
#include "core/le.h"
#include "core/log.h"
#include "core/proc.h"
#include "detect/control.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FS_MOD "filestore"
#define FS_MAX_NODES FTC__FS_MAX_NODES
#define FS_NAME_MAX FTC_SHARD_NAME_MAX
#define FS_META_FILES "ftc.files" /* per tensor: u64 mtime_ns, u32 mode, u32 0 */
#define FS_META_NODE "ftc.node"
/* deleted files (tombstones), sorted by name: filestore_internal.h has both
 * forms; an older ftc wrote the first, this one writes the second (which
 * an older ftc does not read: its restores apply no deletion of ours) */
#define FS_META_GONE "ftc.gone"
#define FS_META_GONE2 "ftc.gone.v2"
#define FS_GONE1_ENTRY 12u /* bytes of an entry besides its name */
#define FS_GONE2_ENTRY 40u
/* tombstones kept (the oldest deletions dropped first): a deletion older
 * than these may come back when a stale copy of the file survives in some
 * version */
#define FS_GONE_MAX 4096
#define FS_GONE_BYTES (512u << 10) /* ... and the bytes of their record */
#define FS_TMP_PREFIX ".ftc-tmp."
#define FS_MAX_DEPTH 32
#define FS_LOG_RING 32
#define FS_FETCH_ROUNDS 3
#define FS_RETRIES 3 /* re-pushes of a version that missed a peer */
/* A version's holder list "idx:id,idx:id,...": at most FTC_REPL_MAX_PEERS
 * peers (a push asks min(k, FTC_REPL_MAX_PEERS)), each an index below
 * FS_MAX_NODES (4 digits), ':' and an id of up to FTC_CTL_NODE_MAX bytes,
 * and ','. Buffers of this size hold any list; a recorded one longer than
 * that is refused as garbage, never cut. */
#define FS_HOLDER_MAX (4 + 1 + FTC_CTL_NODE_MAX + 1)
#define FS_HOLDERS_MAX (FTC_REPL_MAX_PEERS * FS_HOLDER_MAX + 1)
_Static_assert(FS_MAX_NODES <= 10000, "FS_HOLDER_MAX counts 4 digits of a node index");
#define FS_MAX_RANKS 256 /* watched ranks of one node */
#define FS_VERSION_MAX ((uint64_t)1 << 63) /* versions (ms stamps) stay below */
/* the most bytes a version holds, whatever max_bytes says: a tensor of a
 * shard holds less than 2^62 bytes (ckpt/shard.c), and the layout's sum of
 * them and its head must not wrap */
#define FS_BYTES_MAX ((uint64_t)1 << 61)
#define FS_LIMIT_MAX_MS 86400000 /* each time limit: a day */
#define FS_CRASHED_PREFIX FS_TMP_PREFIX "crashed." /* files moved aside after a crash */
/* In the directory while a store runs; removed when it ends with nothing a
 * dead rank may have half-written left unpacked. A store that finds it
 * follows a supervisor that died (SIGKILL, OOM: its ranks with it, perhaps
 * mid-write): the directory is treated as after a rank's death. */
#define FS_OPEN_MARK FS_TMP_PREFIX "open"
/* A restore writes a file as FS_TMP_PREFIX "PID.N" and renames it into
 * place; it removes a deleted copy by renaming it to FS_TMP_PREFIX
 * FS_TMP_GONE "PID.N" and unlinking that. A store process killed between
 * the two leaves the temporary: scans remove those of ended processes
 * (fs_reap_tmp). */
#define FS_TMP_GONE "gone."

typedef struct fs_peer {
    bool known; /* its address is in ftc:{job}:filefab */
    char node_id[FTC_CTL_NODE_MAX + 1];
    char addr_hex[2 * FTC_FABRIC_ADDR_MAX + 1]; /* as published; a change = a new process */
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    size_t addr_len;
} fs_peer_t;

typedef struct fs_file { /* one file found by a scan */
    char *name;          /* relative path */
    uint64_t size, mtime_ns, ctime_ns;
    uint32_t mode;
    bool busy;           /* being written (a busy pack): taken from the previous version */
    const uint8_t *from; /* ... where its bytes are */
} fs_file_t;

typedef ftc__fs_stamp_t fs_stamp_t; /* filestore_internal.h */
typedef ftc__fs_stamps_t fs_stamps_t;

typedef struct fs_held { /* a file some process holds open for writing */
    char *name;
    char pid[16];     /* one process holding it */
    uint64_t since_ns; /* first found so (ftc_now_ns) */
    uint64_t warn_ns;  /* next warning, the wait doubling after each */
    bool mark;         /* found by the current look */
} fs_held_t;

typedef struct fs_logline {
    int level;
    char text[400];
} fs_logline_t;

struct ftc_filestore {
    char job[64], wjob[64]; /* the job, and the wire job "<job>.files" */
    char node_id[FTC_CTL_NODE_MAX + 1];
    char dir[512];
    uint32_t index;
    int k;
    ftc_ctl_t *ctl; /* the thread's Redis connection */
    ftc_fabric_opts_t fopt;
    char provider[64];
    ftc_fabric_t *fab; /* thread-owned once it runs */
    ftc_repl_t *repl;
    ftc_repl_options_t ropt;
    bool republish; /* the address changed: publish it */
    int ino;        /* inotify descriptor */
    int evfd;       /* wakes the thread */
    pthread_t tid;
    bool started;
    atomic_bool stop;

    pthread_mutex_t mu; /* guards the fields down to "thread only" */
    pthread_cond_t cv;
    ftc_filestore_limits_t lim;
    char (*req_members)[65]; /* a set_members not yet applied */
    int req_n;
    uint64_t req_gen;
    bool req_fresh;
    uint64_t flush_req, flush_ack; /* flush request counters */
    int flush_rc;                  /* first push error since the previous flush */
    ftc_err_t flush_err;
    uint64_t restore_req, restore_ack;
    uint64_t restore_req_ns; /* when the newest restore was asked (ftc_now_ns) */
    int restore_rc;
    ftc_err_t restore_err;
    /* the supervisor's ranks (ftc_filestore_watch_ranks) and the exits it
     * reaped; crashed: one died abnormally (killed, or a non-zero exit) */
    pid_t wranks[FS_MAX_RANKS];
    int nwranks;
    pid_t clean[FS_MAX_RANKS]; /* reaped with exit status 0 */
    int nclean;
    bool crashed;
    char crash_why[200];
    fs_logline_t ring[FS_LOG_RING]; /* lines for ftc_filestore_poll */
    int ring_n;
    uint64_t ring_dropped;
    ftc_filestore_stats_t stats;

    /* thread only */
    fs_peer_t peers[FS_MAX_NODES]; /* by node index */
    char (*members)[65];
    int nmembers;
    uint64_t gen;
    bool members_known;
    ftc_slot_t own[2];    /* own versions */
    uint64_t own_step[2]; /* 0: nothing usable */
    uint64_t own_size[2];
    int own_newest;         /* slot of the newest acknowledged version, -1 */
    uint64_t last_version;  /* strictly increasing version stamps */
    bool dirty;             /* the directory changed since the last pack */
    bool retry_on_members;  /* the last version missed a peer */
    int retries;            /* re-pushes since the last change */
    char own_holders[FS_HOLDERS_MAX]; /* "idx:id,..." of the newest acknowledged version */
    uint64_t retry_at_ns;   /* when to re-push (0: none planned) */
    /* the last push was acknowledged but recording it failed (a timed-out
     * HSET may still land): no pack until it is recorded, so neither the
     * slot of the recorded version nor the pushed one is packed over */
    bool rec_pending;
    bool rec_all;           /* ... and it reached every peer */
    char rec_holders[FS_HOLDERS_MAX]; /* its holders */
    uint64_t rec_retry_ns;  /* next try */
    uint64_t last_event_ns;
    uint64_t busy_since_ns; /* dirty since (0: clean): waiting for a quiet period */
    uint64_t pack_after_ns; /* no pack before (a file changed while it was read) */
    char **busy;            /* files being written, kept out of a busy pack (sorted) */
    size_t nbusy, capbusy;
    bool busy_flush;        /* the pack was asked for by a flush */
    /* deletions, last writer wins: seen = the files of the directory at the
     * last pack or restore; one of them gone at a pack is a tombstone (its
     * name and the mtime of the deleted copy), carried in every version
     * (FS_META_GONE) so that a restore does not bring the copy back from
     * another node's version */
    fs_stamps_t seen, gone;
    /* a rank died while the directory may have held its half-written files:
     * changes since the last version are not packed, and the next restore
     * replaces local files with the recorded copies (moves aside files in no
     * version) instead of keeping local files that look newer */
    bool suspect;
    bool restore_missed; /* files the restore placed were deleted before its scan: a change */
    bool crash_logged;
    bool mark_mine;         /* FS_OPEN_MARK was made by this store */
    char down_why[300];     /* why the endpoint could not be reopened */
    uint64_t unreported_ns; /* a watched rank reaped but not reported since */
    int pack_delay_ms;      /* tests: FTC_TEST_FS_PACK_DELAY_MS, read once at create */
    /* tests: FTC_TEST_FS_HOLD=STAGE:PATH, read once at create: at STAGE of a
     * restore ("remove", "rescan") or of a pack ("read": its files scanned,
     * not yet read), when PATH exists, the store renames it to PATH.held and
     * waits (10 s at most) until it is gone, so that a test plays a surviving
     * rank (or a binary changing a file) at that very point */
    char hold_stage[8];
    char hold_path[PATH_MAX];
    bool reap_own; /* the scan at create: this process's temporaries are leftovers too */
    fs_held_t *held;        /* files held open for writing at the last look, by name */
    size_t nheld, capheld;
    uint64_t held_check_ns; /* look again then (0: none held) */
    uint64_t unclosed_ns;   /* a file written (not closed) since the last look: the first
                               such write (0: none); no close, no pack: looked at later */
    uint64_t last_refresh_ns;
    uint64_t hot_until_ns;
    ftc_repl_counters_t last_ctr;
    /* the push in flight */
    bool pushing;
    int push_slot;
    uint64_t push_version, push_size;
    int push_n;
    int push_recorded; /* holders of it recorded so far (0: it does not count yet) */
    uint32_t push_peers[FTC_REPL_MAX_PEERS];
    ftc_repl_xfer_t push_x[FTC_REPL_MAX_PEERS];
    bool push_done[FTC_REPL_MAX_PEERS];
    int push_rc[FTC_REPL_MAX_PEERS];
    char push_detail[600];
};

/* ---- small helpers ------------------------------------------------------------------ */

static void fs_log(ftc_filestore_t *fs, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fs_log(ftc_filestore_t *fs, int level, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (level >= FTC_LOG_ERROR) ftc_log(level, FS_MOD, "%s", text); /* errors are never held back */
    pthread_mutex_lock(&fs->mu);
    if (fs->ring_n < FS_LOG_RING) {
        fs->ring[fs->ring_n].level = level < FTC_LOG_ERROR ? level : -1;
        snprintf(fs->ring[fs->ring_n].text, sizeof fs->ring[0].text, "%s", text);
        fs->ring_n++;
    } else {
        fs->ring_dropped++;
    }
    pthread_mutex_unlock(&fs->mu);
}

static void fs_wake(ftc_filestore_t *fs)
{
    uint64_t one = 1;
    ssize_t w = write(fs->evfd, &one, sizeof one);
    (void)w;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    out[2 * n] = 0;
}

/* a + b, or UINT64_MAX where that wraps: a directory's byte count (each
 * size a file's st_size, which a sparse file makes anything up to 2^63)
 * never wraps to a small number under the cap */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t ts_ns(const struct timespec *t)
{
    return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

/* A stored file name is safe to create under the directory: a relative path
 * of non-empty components, none "." or "..", no NUL, each <= NAME_MAX, and
 * none a name of the store's own (FS_TMP_PREFIX: a scan never packs one, so
 * only a faulty peer's version holds one, and writing it could overwrite a
 * temporary of a restore in progress, or the store's ".ftc-tmp.open"). */
static bool name_ok(const char *s, size_t len)
{
    if (len == 0 || len > FS_NAME_MAX || s[0] == '/' || memchr(s, 0, len)) return false;
    const size_t tl = strlen(FS_TMP_PREFIX);
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != '/')
            j++;
        size_t c = j - i;
        if (c == 0 || c > NAME_MAX || (c == 1 && s[i] == '.') ||
            (c == 2 && s[i] == '.' && s[i + 1] == '.') ||
            (c >= tl && !memcmp(s + i, FS_TMP_PREFIX, tl)))
            return false;
        i = j + 1;
        if (j == len - 1) /* a trailing '/' */
            return false;
    }
    return true;
}

/* The whole decimal number at *p (digits, no leading zero but in "0"), at
 * most max: *out, *p past it. */
static bool tmp_num(const char **p, uint64_t max, uint64_t *out)
{
    const char *s = *p;
    uint64_t x = 0;
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        x = x * 10 + (uint64_t)(s[n] - '0');
        if (++n > 10 || x > max) return false;
    }
    if (n == 0 || (n > 1 && s[0] == '0')) return false;
    *p = s + n;
    *out = x;
    return true;
}

bool ftc__fs_tmp_leftover(const char *name, int *pid)
{
    size_t pl = strlen(FS_TMP_PREFIX);
    if (strncmp(name, FS_TMP_PREFIX, pl)) return false;
    const char *p = name + pl;
    if (!strncmp(p, FS_TMP_GONE, strlen(FS_TMP_GONE))) p += strlen(FS_TMP_GONE);
    uint64_t x, c;
    if (!tmp_num(&p, INT_MAX, &x) || x == 0 || *p++ != '.' || !tmp_num(&p, UINT32_MAX, &c) || *p)
        return false;
    *pid = (int)x;
    return true;
}

/* ---- Redis --------------------------------------------------------------------------- */

static int fs_secret(ftc_filestore_t *fs, uint8_t out[16], ftc_err_t *err)
{
    int rc = ftc_ctl_job_secret(fs->ctl, out, err);
    return rc ? ftc_err_wrap(err, "filestore") : 0;
}

static int fs_publish(ftc_filestore_t *fs, ftc_err_t *err)
{
    uint8_t addr[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof addr;
    int rc = ftc_fabric_getname(fs->fab, addr, &len);
    if (rc) return ftc_err_set(err, rc, "filestore: fabric getname failed");
    char hex[2 * FTC_FABRIC_ADDR_MAX + 1], val[sizeof hex + FTC_CTL_NODE_MAX + 4], field[16],
        key[160];
    to_hex(addr, len, hex);
    snprintf(val, sizeof val, "%s %s", hex, fs->node_id);
    snprintf(field, sizeof field, "%u", fs->index);
    rc = ftc_redis_cmdv(ftc_ctl_redis(fs->ctl), true, NULL, "HSET",
                        ftc_ctl_key(fs->ctl, "filefab", key, sizeof key), field, val, NULL);
    if (rc)
        return ftc_err_set(err, rc, "filestore: publishing the address in %s: %s", key,
                           ftc_redis_errstr(ftc_ctl_redis(fs->ctl)));
    fs->republish = false;
    return 0;
}

/* The parsers below take whole words and whole numbers: strtoul took field
 * "1x" for node 1, sscanf("%512s %64s") a longer node id cut to its first
 * 64 bytes (fuzz_filestore). */
bool ftc__fs_index_parse(const char *f, size_t fl, uint32_t *index)
{
    char buf[8];
    uint64_t x;
    if (fl == 0 || fl >= sizeof buf || memchr(f, 0, fl)) return false;
    memcpy(buf, f, fl);
    buf[fl] = 0;
    if (ftc_parse_u64(buf, &x) || x >= FS_MAX_NODES) return false;
    *index = (uint32_t)x;
    return true;
}

bool ftc__fs_filefab_parse(const char *v, char *hex, size_t hex_cap, uint8_t *addr,
                           size_t *addr_len, char *node_id, size_t id_cap)
{
    const char *p = v;
    if (!ftc_next_word(&p, hex, hex_cap) || !ftc_next_word(&p, node_id, id_cap) ||
        strlen(node_id) > FTC_CTL_NODE_MAX)
        return false;
    while (isspace((unsigned char)*p))
        p++;
    if (*p) return false; /* a third word */
    size_t hl = strlen(hex);
    if (hl == 0 || hl % 2 || hl / 2 > FTC_FABRIC_ADDR_MAX) return false;
    for (size_t b = 0; b < hl / 2; b++) {
        int hi = hexval(hex[2 * b]), lo = hexval(hex[2 * b + 1]);
        if (hi < 0 || lo < 0) return false;
        addr[b] = (uint8_t)(hi << 4 | lo);
    }
    *addr_len = hl / 2;
    return true;
}

/* Reads ftc:{job}:filefab; adds new peers to the engine, replaces changed ones. */
static void fs_refresh_peers(ftc_filestore_t *fs)
{
    fs->last_refresh_ns = ftc_now_ns();
    char key[160];
    ftc_redis_reply_t *rep = NULL;
    if (ftc_redis_cmdv(ftc_ctl_redis(fs->ctl), true, &rep, "HGETALL",
                       ftc_ctl_key(fs->ctl, "filefab", key, sizeof key), NULL) != 0)
        return;
    ftc_redis_reply_t **el;
    size_t n;
    ftc_err_t err = {0};
    if (ftc_redis_want_array(rep, key, -1, &el, &n, &err) == 0) {
        for (size_t i = 0; i + 1 < n; i += 2) {
            const char *f, *v;
            size_t fl, vl;
            if (ftc_redis_want_str(el[i], key, &f, &fl, &err) ||
                ftc_redis_want_str(el[i + 1], key, &v, &vl, &err))
                continue;
            uint32_t node;
            if (!ftc__fs_index_parse(f, fl, &node) || node == fs->index) continue;
            char hex[2 * FTC_FABRIC_ADDR_MAX + 1], nid[FTC_CTL_NODE_MAX + 1];
            uint8_t addr[FTC_FABRIC_ADDR_MAX];
            size_t len = 0;
            if (memchr(v, 0, vl) ||
                !ftc__fs_filefab_parse(v, hex, sizeof hex, addr, &len, nid, sizeof nid)) {
                fs_log(fs, FTC_LOG_WARN, "%s: field %u holds a malformed address", key, node);
                continue;
            }
            fs_peer_t *p = &fs->peers[node];
            if (p->known && !strcmp(p->addr_hex, hex)) {
                snprintf(p->node_id, sizeof p->node_id, "%s", nid);
                continue;
            }
            if (p->known && fs->repl) ftc_repl_peer_remove(fs->repl, (uint32_t)node);
            p->known = true;
            snprintf(p->addr_hex, sizeof p->addr_hex, "%s", hex);
            snprintf(p->node_id, sizeof p->node_id, "%s", nid);
            memcpy(p->addr, addr, len);
            p->addr_len = len;
            if (fs->repl && ftc_repl_peer_add(fs->repl, (uint32_t)node, addr, len) != 0 &&
                ftc_fabric_health(fs->fab) == 0) /* a broken endpoint re-adds all at its rebuild */
                fs_log(fs, FTC_LOG_WARN, "adding node %u: %s", node, ftc_repl_errstr(fs->repl));
        }
    }
    ftc_redis_reply_free(rep);
}

/* The node index whose published node id is id, or -1. */
static int fs_index_of(ftc_filestore_t *fs, const char *id)
{
    if (!strcmp(id, fs->node_id)) return (int)fs->index;
    for (int i = 0; i < FS_MAX_NODES; i++)
        if (fs->peers[i].known && !strcmp(fs->peers[i].node_id, id)) return i;
    return -1;
}

/* Node index i is live: its published id is a member now. */
static bool fs_live(ftc_filestore_t *fs, uint32_t i, const char *want_id)
{
    if (i >= FS_MAX_NODES || i == fs->index || !fs->peers[i].known) return false;
    if (want_id && strcmp(fs->peers[i].node_id, want_id))
        return false; /* another node took that index: it does not hold the replica */
    for (int m = 0; m < fs->nmembers; m++)
        if (!strcmp(fs->members[m], fs->peers[i].node_id)) return true;
    return false;
}

/* ---- transport ------------------------------------------------------------------------ */

static int fs_open_transport(ftc_filestore_t *fs, ftc_err_t *err)
{
    int rc = ftc_fabric_open(&fs->fopt, &fs->fab, err);
    if (rc) return rc;
    fs->ropt.fab = fs->fab;
    fs->ropt.generation = fs->gen;
    fs->repl = ftc_repl_create(&fs->ropt, err);
    if (!fs->repl) return err && err->code ? err->code : FTC_EFABRIC;
    fs->republish = true;
    return 0;
}

/* The endpoint broke (a send to a dead peer could not be cancelled): open a
 * new one and a new engine, re-add the peers, publish the new address. The
 * replica slots stay. */
static void fs_rebuild(ftc_filestore_t *fs)
{
    pthread_mutex_lock(&fs->mu);
    uint64_t n = ++fs->stats.rebuilds;
    pthread_mutex_unlock(&fs->mu);
    fs_log(fs, FTC_LOG_WARN, "rebuilding the fabric endpoint (%" PRIu64 " so far): %s", n,
           fs->repl ? ftc_repl_errstr(fs->repl) : "");
    ftc_repl_destroy(fs->repl);
    fs->repl = NULL;
    ftc_fabric_close(fs->fab);
    fs->fab = NULL;
    /* about 1 s of tries per call: a restore or a flush waiting on this
     * thread must get an answer (fs_main answers them with the error and
     * tries again a second later) */
    for (int attempt = 0; attempt < 10 && !atomic_load(&fs->stop); attempt++) {
        ftc_err_t err = {0};
        if (fs_open_transport(fs, &err) == 0) break;
        if (attempt == 0 || attempt == 9)
            FTC_ERROR(FS_MOD, "reopening the fabric endpoint: %s", err.msg);
        snprintf(fs->down_why, sizeof fs->down_why, "%s", err.msg);
        ftc_repl_destroy(fs->repl);
        fs->repl = NULL;
        ftc_fabric_close(fs->fab);
        fs->fab = NULL;
        ftc_sleep_ms(100);
    }
    if (!fs->repl) return;
    for (uint32_t i = 0; i < FS_MAX_NODES; i++)
        if (fs->peers[i].known)
            ftc_repl_peer_add(fs->repl, i, fs->peers[i].addr, fs->peers[i].addr_len);
    ftc_err_t err = {0};
    if (fs_publish(fs, &err)) fs_log(fs, FTC_LOG_WARN, "%s", err.msg);
}

/* ---- the watch ------------------------------------------------------------------------- */

/* Adds inotify watches on dir/rel and every directory below it. */
static void fs_watch_tree(ftc_filestore_t *fs, const char *rel, int depth)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", fs->dir, *rel ? "/" : "", rel);
    if (inotify_add_watch(fs->ino, path,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |
                              IN_MODIFY | IN_ONLYDIR | IN_DONT_FOLLOW) < 0 ||
        depth >= FS_MAX_DEPTH)
        return;
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        fs_watch_tree(fs, sub, depth + 1);
    }
    closedir(d);
}

/* Reads every queued event. A finished file (closed after writing, or
 * renamed into place) or a removed one makes the directory dirty; any change restarts the
 * quiet period; a new directory gets watched.
 *
 * An overflowed queue (IN_Q_OVERFLOW: the kernel dropped events, max_queued_events)
 * may have dropped the creation of a directory: the whole tree is walked again
 * and every directory not watched yet gets its watch (inotify_add_watch on a
 * watched one changes nothing), else files later written in it made no event
 * and were never replicated; the directory is dirty, so the next pack scans
 * every file. */
static void fs_drain_events(ftc_filestore_t *fs, bool ignore)
{
    _Alignas(struct inotify_event) char buf[16384];
    bool rewatch = false, overflow = false;
    for (;;) {
        ssize_t n = read(fs->ino, buf, sizeof buf);
        if (n <= 0) break;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            p += sizeof *e + e->len;
            if (e->mask & IN_Q_OVERFLOW) overflow = rewatch = true;
            bool ours = e->len && !strncmp(e->name, FS_TMP_PREFIX, strlen(FS_TMP_PREFIX));
            if (ignore || ours) continue;
            if (e->mask & IN_ISDIR) {
                if (e->mask & (IN_CREATE | IN_MOVED_TO)) rewatch = true;
                if (e->mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE))
                    fs->dirty = true;
            }
            /* a deleted or renamed-away file is a change too: a version still
             * holding it would bring it back at the next restore (a binary
             * that keeps its last N checkpoints would grow past the cap) */
            if (e->mask &
                (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_Q_OVERFLOW))
                fs->dirty = true;
            else if (!(e->mask & IN_ISDIR) && (e->mask & (IN_MODIFY | IN_CREATE)) &&
                     !fs->unclosed_ns)
                fs->unclosed_ns = ftc_now_ns();
            fs->last_event_ns = ftc_now_ns();
            fs->retries = 0;
            fs->retry_at_ns = 0;
        }
    }
    if (overflow)
        fs_log(fs, FTC_LOG_WARN,
               "%s: inotify dropped events (its queue overflowed: "
               "/proc/sys/fs/inotify/max_queued_events): watching every subdirectory again "
               "and rescanning every file",
               fs->dir);
    if (rewatch) fs_watch_tree(fs, "", 0);
}

/* ---- packing ----------------------------------------------------------------------------- */

/* The busy set: files a busy pack keeps out (being written), sorted. */
static int busy_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool busy_has(const ftc_filestore_t *fs, const char *name)
{
    return fs->nbusy && bsearch(&name, fs->busy, fs->nbusy, sizeof *fs->busy, busy_cmp);
}

static void busy_add(ftc_filestore_t *fs, const char *name)
{
    if (busy_has(fs, name)) return;
    if (fs->nbusy == fs->capbusy) {
        size_t cap = fs->capbusy ? 2 * fs->capbusy : 8;
        char **nb = realloc(fs->busy, cap * sizeof *nb);
        if (!nb) return; /* then it is read as usual (and may postpone the pack) */
        fs->busy = nb, fs->capbusy = cap;
    }
    char *c = strdup(name);
    if (!c) return;
    fs->busy[fs->nbusy++] = c;
    qsort(fs->busy, fs->nbusy, sizeof *fs->busy, busy_cmp);
}

static void busy_clear(ftc_filestore_t *fs)
{
    for (size_t i = 0; i < fs->nbusy; i++)
        free(fs->busy[i]);
    fs->nbusy = 0;
}

/* Notes that process pid holds file name open for writing (fs_find_writers)
 * since `now` at the latest. */
static void held_mark(ftc_filestore_t *fs, const char *name, const char *pid, uint64_t now,
                      uint64_t first_warn_ns)
{
    for (size_t i = 0; i < fs->nheld; i++)
        if (!strcmp(fs->held[i].name, name)) {
            fs->held[i].mark = true;
            return;
        }
    if (fs->nheld == fs->capheld) {
        size_t cap = fs->capheld ? 2 * fs->capheld : 8;
        fs_held_t *nh = realloc(fs->held, cap * sizeof *nh);
        if (!nh) return; /* (then it goes without a warning) */
        fs->held = nh, fs->capheld = cap;
    }
    char *c = strdup(name);
    if (!c) return;
    fs_held_t *h = &fs->held[fs->nheld++];
    *h = (fs_held_t){.name = c, .since_ns = now, .warn_ns = now + first_warn_ns, .mark = true};
    snprintf(h->pid, sizeof h->pid, "%.15s", pid);
}

/* After a look: forgets the files no longer held open, warns (rate-limited:
 * after busy_max_ms, then each time the time doubled) about those held
 * open so long, and plans the next look. A file held open for writing is
 * never packed as it stands: a process that keeps it open for good (a log,
 * a memory-mapped file) kept it out of every version without a word. */
static void held_sweep(ftc_filestore_t *fs, uint64_t now)
{
    size_t out = 0;
    fs->held_check_ns = 0;
    for (size_t i = 0; i < fs->nheld; i++) {
        fs_held_t *h = &fs->held[i];
        if (!h->mark) {
            free(h->name);
            continue;
        }
        h->mark = false;
        if (now >= h->warn_ns) {
            uint64_t open_ns = now - h->since_ns;
            fs_log(fs, FTC_LOG_WARN,
                   "%s/%s has been held open for writing for about %" PRIu64 " s (process %s, "
                   "among others perhaps): its bytes as they stand are in no version; they are "
                   "replicated once it is closed (keep files that stay open, logs, outside %s)",
                   fs->dir, h->name, open_ns / (uint64_t)1000000000, h->pid, fs->dir);
            h->warn_ns = now + (open_ns ? open_ns : 1);
        }
        if (!fs->held_check_ns || h->warn_ns < fs->held_check_ns) fs->held_check_ns = h->warn_ns;
        fs->held[out++] = *h;
    }
    fs->nheld = out;
}

/* Marks the files of the directory (realpath dir, dl bytes) that process
 * pid maps shared and writable ("rw-s" in /proc/PID/maps): a binary that
 * writes a file through a mapping (open, ftruncate, mmap, close) holds no
 * descriptor of it (the file's IN_CLOSE_WRITE comes when it is unmapped). */
static void fs_find_mappers(ftc_filestore_t *fs, const char *pid, const char *dir, size_t dl,
                            uint64_t since, uint64_t first_warn_ns)
{
    char p[300];
    snprintf(p, sizeof p, "/proc/%s/maps", pid);
    FILE *f = fopen(p, "re");
    if (!f) return;
    char line[PATH_MAX + 128];
    while (fgets(line, sizeof line, f)) {
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\n') line[--ll] = 0;
        char perms[8];
        int at = 0;
        if (sscanf(line, "%*s %7s %*s %*s %*s %n", perms, &at) != 1 || at <= 0 ||
            strlen(perms) < 4 || perms[1] != 'w' || perms[3] != 's')
            continue;
        const char *path = line + at;
        size_t pl = strlen(path);
        if (pl <= dl + 1 || strncmp(path, dir, dl) || path[dl] != '/' ||
            (pl > 10 && !strcmp(path + pl - 10, " (deleted)")))
            continue;
        busy_add(fs, path + dl + 1);
        held_mark(fs, path + dl + 1, pid, since, first_warn_ns);
    }
    fclose(f);
}

/* Adds to the busy set every file of the directory that some process holds
 * open for writing: for each /proc/PID/fd link into the directory, the
 * access mode in /proc/PID/fdinfo/FD; and each file a process maps shared
 * and writable (fs_find_mappers). Processes this one may not look into
 * are passed over. Tracks how long each has been held open (held_sweep). */
static void fs_find_writers(ftc_filestore_t *fs, uint64_t since_hint)
{
    uint64_t now = ftc_now_ns();
    pthread_mutex_lock(&fs->mu);
    int first_ms = fs->lim.busy_max_ms > 0 ? fs->lim.busy_max_ms : 30000;
    uint64_t first_warn_ns = (uint64_t)first_ms * 1000000ull;
    pthread_mutex_unlock(&fs->mu);
    char dir[PATH_MAX];
    if (!realpath(fs->dir, dir)) return;
    size_t dl = strlen(dir);
    DIR *proc = opendir("/proc");
    if (!proc) return;
    struct dirent *pe;
    while ((pe = readdir(proc))) {
        if (pe->d_name[0] < '1' || pe->d_name[0] > '9') continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/%s/fd", pe->d_name);
        DIR *fdd = opendir(p);
        if (!fdd) continue;
        struct dirent *fe;
        while ((fe = readdir(fdd))) {
            if (fe->d_name[0] == '.') continue;
            char target[PATH_MAX];
            ssize_t n = readlinkat(dirfd(fdd), fe->d_name, target, sizeof target - 1);
            if (n <= (ssize_t)dl + 1 || strncmp(target, dir, dl) || target[dl] != '/') continue;
            target[n] = 0;
            snprintf(p, sizeof p, "/proc/%s/fdinfo/%s", pe->d_name, fe->d_name);
            int ifd = open(p, O_RDONLY | O_CLOEXEC);
            if (ifd < 0) continue;
            char info[512];
            ssize_t r = read(ifd, info, sizeof info);
            close(ifd);
            if (r <= 0) continue;
            unsigned flags;
            if (ftc_proc_fdinfo_flags_parse(info, (size_t)r, &flags) != 0) {
                /* unknown: not counted as a writer (reading the file still
                 * notices one whose size or mtime moves) */
                FTC_DEBUG(FS_MOD, "%s: no readable flags line: its access mode is unknown", p);
                continue;
            }
            if ((flags & O_ACCMODE) != O_RDONLY) {
                busy_add(fs, target + dl + 1);
                held_mark(fs, target + dl + 1, pe->d_name, since_hint ? since_hint : now,
                          first_warn_ns);
            }
        }
        closedir(fdd);
        fs_find_mappers(fs, pe->d_name, dir, dl, since_hint ? since_hint : now, first_warn_ns);
    }
    closedir(proc);
    held_sweep(fs, now);
    fs->unclosed_ns = 0;
}

typedef struct fs_scan {
    fs_file_t *f;
    size_t n, cap;
    uint64_t bytes;
} fs_scan_t;

static void scan_free(fs_scan_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->f[i].name);
    free(s->f);
    memset(s, 0, sizeof *s);
}

/* Entry name of directory dfd (rel under the store's directory), a name
 * of the store's own (FS_TMP_PREFIX, never packed): when it is a temporary
 * a store process left (ftc__fs_tmp_leftover: a restore's write or a
 * deleted copy moved aside, the process killed before it renamed or
 * removed it), and that process has ended, and it is a regular file, it is
 * removed; else it stays (".ftc-tmp.open", files moved aside after a
 * crash, a name of the user's; a live process's: this one's are in use
 * by its restore, except at the scan at create). Before, such leftovers
 * stayed for good. */
static void fs_reap_tmp(ftc_filestore_t *fs, int dfd, const char *rel, const char *name)
{
    int pid;
    struct stat st;
    if (!ftc__fs_tmp_leftover(name, &pid)) return;
    if (pid == (int)getpid() ? !fs->reap_own : kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        return; /* (EPERM: a live process of another user) */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return;
    if (unlinkat(dfd, name, 0) == 0)
        fs_log(fs, FTC_LOG_INFO, "%s/%s%s%s: removed, a temporary left by store process %d "
               "(ended before it finished with it)", fs->dir, rel, *rel ? "/" : "", name, pid);
    else
        fs_log(fs, FTC_LOG_WARN, "%s/%s%s%s, a temporary left by store process %d: removing it "
               "failed: %s", fs->dir, rel, *rel ? "/" : "", name, pid, strerror(errno));
}

static int scan_dir(ftc_filestore_t *fs, fs_scan_t *s, const char *rel, int depth, ftc_err_t *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", fs->dir, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT && *rel ? 0
                                       : ftc_err_errno(err, errno, "filestore: opendir %s", path);
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!strncmp(de->d_name, FS_TMP_PREFIX, strlen(FS_TMP_PREFIX))) {
            fs_reap_tmp(fs, dirfd(d), rel, de->d_name);
            continue;
        }
        char sub[PATH_MAX];
        int sl = snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone meanwhile */
        if (S_ISDIR(st.st_mode)) {
            if (depth >= FS_MAX_DEPTH)
                fs_log(fs, FTC_LOG_WARN, "%s/%s: deeper than %d directories, skipped", fs->dir, sub,
                       FS_MAX_DEPTH);
            else
                rc = scan_dir(fs, s, sub, depth + 1, err);
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            fs_log(fs, FTC_LOG_WARN, "%s/%s: %s, not a regular file: not replicated", fs->dir, sub,
                   S_ISLNK(st.st_mode) ? "a symbolic link" : "a special file");
            continue;
        }
        if (sl <= 0 || (size_t)sl >= sizeof sub || !name_ok(sub, (size_t)sl)) {
            fs_log(fs, FTC_LOG_WARN, "%s/%s: name longer than %d bytes: not replicated", fs->dir,
                   sub, FS_NAME_MAX);
            continue;
        }
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 32;
            fs_file_t *nf = realloc(s->f, cap * sizeof *nf);
            if (!nf) {
                rc = ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory scanning %s", fs->dir);
                break;
            }
            s->f = nf, s->cap = cap;
        }
        fs_file_t *f = &s->f[s->n];
        f->name = strdup(sub);
        if (!f->name) {
            rc = ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory scanning %s", fs->dir);
            break;
        }
        f->size = (uint64_t)st.st_size;
        f->mtime_ns = ts_ns(&st.st_mtim);
        f->ctime_ns = ts_ns(&st.st_ctim);
        f->mode = (uint32_t)(st.st_mode & 07777);
        f->busy = busy_has(fs, sub);
        f->from = NULL;
        s->bytes = add_sat(s->bytes, f->size);
        s->n++;
    }
    closedir(d);
    return rc;
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const fs_file_t *)a)->name, ((const fs_file_t *)b)->name);
}

/* ---- tombstones ----------------------------------------------------------------------------- */

static void stamps_free(fs_stamps_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

/* Byte order of names (as strcmp orders the NUL-terminated ones). */
static int bytes_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : al < bl ? -1 : al > bl;
}

static int u64_cmp(uint64_t x, uint64_t y)
{
    return x < y ? -1 : x > y;
}

/* By name, then oldest copy first, then oldest deletion. */
static int stamp_cmp(const void *a, const void *b)
{
    const fs_stamp_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (!c) c = u64_cmp(x->mtime_ns, y->mtime_ns);
    return c ? c : u64_cmp(x->gone_ns, y->gone_ns);
}

/* The newest deletion first: by when the tombstone was made, not by the
 * deleted copy's mtime (a copy that kept an old mtime, cp -p, may be the
 * newest deletion); then by mtime, then by name (a total order). */
static int gone_newest_first(const void *a, const void *b)
{
    const fs_stamp_t *x = a, *y = b;
    int c = u64_cmp(y->gone_ns, x->gone_ns);
    if (!c) c = u64_cmp(y->mtime_ns, x->mtime_ns);
    return c ? c : strcmp(x->name, y->name);
}

/* The entry named name[0..len) of a sorted set, or NULL. */
static fs_stamp_t *stamps_find(const fs_stamps_t *s, const char *name, size_t len)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = bytes_cmp(s->e[mid].name, strlen(s->e[mid].name), name, len);
        if (!c) return &s->e[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* A file's stamp `now` takes the xxh3 its earlier stamp `was` knew (a
 * restore wrote it) while the file is as it was then: same mtime, size and
 * ctime (fs_note_gone, fs_seen_carry). */
static void stamp_keep_hash(fs_stamp_t *now, const fs_stamp_t *was)
{
    if (was->hashed && now->mtime_ns == was->mtime_ns && now->size == was->size &&
        now->ctime_ns == was->ctime_ns)
        now->hashed = true, now->xxh3 = was->xxh3;
}

/* Appends an entry (stamps_norm sorts); 0 or FTC_ENOMEM. */
static int stamps_add(fs_stamps_t *s, const char *name, size_t len, uint64_t mtime_ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        fs_stamp_t *ne = realloc(s->e, cap * sizeof *ne);
        if (!ne) return FTC_ENOMEM;
        s->e = ne, s->cap = cap;
    }
    char *c = strndup(name, len);
    if (!c) return FTC_ENOMEM;
    s->e[s->n++] = (fs_stamp_t){.name = c, .mtime_ns = mtime_ns};
    return 0;
}

/* Sorts by name, keeping the newest entry of each name. */
static void stamps_norm(fs_stamps_t *s)
{
    if (s->n) qsort(s->e, s->n, sizeof *s->e, stamp_cmp);
    size_t out = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i + 1 < s->n && !strcmp(s->e[i].name, s->e[i + 1].name)) {
            free(s->e[i].name); /* a newer one follows */
            continue;
        }
        s->e[out++] = s->e[i];
    }
    s->n = out;
}

size_t ftc__fs_gone_bound(fs_stamps_t *s, size_t max_n, size_t max_bytes)
{
    size_t bytes = 0, keep = 0;
    for (size_t i = 0; i < s->n; i++)
        bytes += FS_GONE2_ENTRY + strlen(s->e[i].name);
    if (s->n <= max_n && bytes <= max_bytes) return 0;
    qsort(s->e, s->n, sizeof *s->e, gone_newest_first);
    bytes = 0;
    while (keep < s->n && keep < max_n &&
           bytes + FS_GONE2_ENTRY + strlen(s->e[keep].name) <= max_bytes)
        bytes += FS_GONE2_ENTRY + strlen(s->e[keep++].name);
    for (size_t i = keep; i < s->n; i++)
        free(s->e[i].name);
    size_t dropped = s->n - keep;
    s->n = keep;
    if (s->n) qsort(s->e, s->n, sizeof *s->e, stamp_cmp);
    return dropped;
}

/* Keeps the newest FS_GONE_MAX deletions whose record fits FS_GONE_BYTES. */
static void gone_bound(ftc_filestore_t *fs, fs_stamps_t *s)
{
    size_t dropped = ftc__fs_gone_bound(s, FS_GONE_MAX, FS_GONE_BYTES);
    if (dropped)
        fs_log(fs, FTC_LOG_WARN,
               "%zu deletion(s) forgotten, the oldest (over %d tombstones or %u bytes): such a "
               "file may come back where a stale copy of it survives",
               dropped, FS_GONE_MAX, FS_GONE_BYTES);
}

/* The record FS_META_GONE2 of s (malloc'd, *len bytes), NULL when out of memory. */
static uint8_t *gone_record(const fs_stamps_t *s, size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += FS_GONE2_ENTRY + strlen(s->e[i].name);
    uint8_t *b = malloc(n ? n : 1), *p = b;
    for (size_t i = 0; b && i < s->n; i++) {
        const fs_stamp_t *g = &s->e[i];
        uint32_t l = (uint32_t)strlen(g->name);
        ftc_le_wr32(p, l);
        memcpy(p + 4, g->name, l);
        ftc_le_wr64(p + 4 + l, g->mtime_ns);
        ftc_le_wr64(p + 12 + l, g->gone_ns);
        ftc_le_wr64(p + 20 + l, g->hashed || g->sized ? g->size : 0);
        ftc_le_wr64(p + 28 + l, g->hashed ? g->xxh3 : 0);
        ftc_le_wr32(p + 36 + l, g->hashed ? 1u : g->sized ? 2u : 0u);
        p += FS_GONE2_ENTRY + l;
    }
    *len = n;
    return b;
}

/* Appends the tombstones of a version's record (form version: 1 is
 * FS_META_GONE, 2 FS_META_GONE2) to out; 0, FTC_ENOMEM, or FTC_ECORRUPT
 * with why (a record this store would not write: nothing of it is kept). */
static int gone_parse(const uint8_t *m, uint32_t ml, int version, fs_stamps_t *out, char *why,
                      size_t cap)
{
    size_t n0 = out->n, off = 0, cnt = 0, prev_len = 0;
    size_t fixed = version == FTC__FS_GONE_V1 ? FS_GONE1_ENTRY : FS_GONE2_ENTRY;
    const char *prev = NULL;
    int rc = 0;
    if (version != FTC__FS_GONE_V1 && version != FTC__FS_GONE_V2) {
        snprintf(why, cap, "form %d of the record is unknown", version);
        rc = FTC_ECORRUPT;
    } else if (ml > FS_GONE_BYTES) {
        snprintf(why, cap, "%u bytes, over %u", ml, FS_GONE_BYTES);
        rc = FTC_ECORRUPT;
    }
    while (!rc && off < ml) {
        uint32_t len = ml - off >= 4 ? ftc_le_rd32(m + off) : 0;
        const char *name = (const char *)m + off + 4;
        const uint8_t *f = m + off + 4 + len; /* the fixed fields after the name */
        rc = FTC_ECORRUPT;
        if (ml - off < 4 || (uint64_t)len + fixed - 4 > ml - off - 4)
            snprintf(why, cap, "entry %zu at byte %zu is cut short", cnt, off);
        else if (!name_ok(name, len))
            snprintf(why, cap, "entry %zu is not a safe relative path, or a .ftc-tmp.* name", cnt);
        else if (prev && bytes_cmp(prev, prev_len, name, len) >= 0)
            snprintf(why, cap, "entry %zu is out of order", cnt);
        else if (++cnt > FS_GONE_MAX)
            snprintf(why, cap, "more than %d entries", FS_GONE_MAX);
        else if (version == FTC__FS_GONE_V2 &&
                 (ftc_le_rd32(f + 32) > 2 ||
                  (!ftc_le_rd32(f + 32) && (ftc_le_rd64(f + 16) || ftc_le_rd64(f + 24))) ||
                  (ftc_le_rd32(f + 32) == 2 && ftc_le_rd64(f + 24))))
            snprintf(why, cap, "entry %zu has flags %u (size %" PRIu64 ", xxh3 %" PRIu64 ")",
                     cnt - 1, ftc_le_rd32(f + 32), ftc_le_rd64(f + 16), ftc_le_rd64(f + 24));
        else if (!(rc = stamps_add(out, name, len, ftc_le_rd64(f)))) {
            fs_stamp_t *g = &out->e[out->n - 1];
            g->gone_ns = version == FTC__FS_GONE_V1 ? g->mtime_ns : ftc_le_rd64(f + 8);
            if (version == FTC__FS_GONE_V2 && ftc_le_rd32(f + 32)) {
                g->hashed = ftc_le_rd32(f + 32) == 1;
                g->sized = ftc_le_rd32(f + 32) == 2;
                g->size = ftc_le_rd64(f + 16);
                g->xxh3 = ftc_le_rd64(f + 24);
            }
        }
        prev = name, prev_len = len;
        off += fixed + (size_t)len;
    }
    if (rc) {
        for (size_t i = n0; i < out->n; i++)
            free(out->e[i].name);
        out->n = n0;
    }
    return rc;
}

int ftc__fs_gone_parse(const uint8_t *m, uint32_t ml, int version, fs_stamps_t *out, char *why,
                       size_t cap)
{
    return gone_parse(m, ml, version, out, why, cap);
}

uint8_t *ftc__fs_gone_record(const fs_stamps_t *s, size_t *len)
{
    return gone_record(s, len);
}

void ftc__fs_stamps_free(fs_stamps_t *s)
{
    stamps_free(s);
}

/* The files of scan sc (sorted by name) as a set; 0 or FTC_ENOMEM. */
static int stamps_from_scan(const fs_scan_t *sc, fs_stamps_t *out)
{
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (size_t i = 0; !rc && i < sc->n; i++) {
        rc = stamps_add(out, sc->f[i].name, strlen(sc->f[i].name), sc->f[i].mtime_ns);
        if (!rc) {
            out->e[out->n - 1].size = sc->f[i].size;
            out->e[out->n - 1].ctime_ns = sc->f[i].ctime_ns;
        }
    }
    if (rc) stamps_free(out);
    return rc;
}

/* The xxh3 of the file open at fd, read from its start (as the shard's
 * checksum of its bytes), in *out: 0, or -1 when it cannot be read or no
 * longer has size bytes (and ctime ctime_ns, when not 0): it changed,
 * nothing can be said. */
static int fs_hash_fd(int fd, uint64_t size, uint64_t ctime_ns, uint64_t *out)
{
    enum { CHUNK = 1 << 20 };
    ftc_hash_t *h = ftc_hash_create();
    uint8_t *buf = malloc(CHUNK);
    int rc = h && buf ? 0 : -1;
    uint64_t got = 0;
    while (!rc) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? -1 : 0;
            break;
        }
        ftc_hash_update(h, buf, (size_t)r);
        got += (uint64_t)r;
    }
    struct stat st;
    if (!rc && (got != size || fstat(fd, &st) != 0 || (uint64_t)st.st_size != size ||
                (ctime_ns && ts_ns(&st.st_ctim) != ctime_ns)))
        rc = -1;
    if (!rc) *out = ftc_hash_digest(h);
    ftc_hash_destroy(h);
    free(buf);
    return rc;
}

/* fs_hash_fd of the file at path (a regular file: O_NONBLOCK, a FIFO put
 * in its place since the scan must not hold the thread in open). */
static int fs_hash_file(const char *path, uint64_t size, uint64_t ctime_ns, uint64_t *out)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    int rc = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fs_hash_fd(fd, size, ctime_ns, out) : -1;
    close(fd);
    return rc;
}

/* Whether a copy of tombstone g's name and mtime, of size bytes and xxh3
 * (known: the copy of a version), is the deleted one: its size and xxh3
 * those g names; a tombstone of unknown content (no own version held the
 * deleted copy) its size alone; one of an older ftc (neither) the mtime
 * alone. */
static bool gone_is(const fs_stamp_t *g, uint64_t size, uint64_t xxh3)
{
    return g->hashed ? size == g->size && xxh3 == g->xxh3 : !g->sized || size == g->size;
}

/* Whether the local file p (same name and mtime as tombstone g) is the
 * deleted copy itself, as gone_is tells (its bytes read when g names an
 * xxh3). A file found to be another copy is not read again while its
 * ctime stays (g->ctime_ns). */
static bool fs_is_deleted_copy(ftc_filestore_t *fs, fs_stamp_t *g, const fs_stamp_t *p)
{
    if (!g->hashed) return gone_is(g, p->size, 0);
    if (p->size != g->size || (g->ctime_ns && g->ctime_ns == p->ctime_ns)) return false;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", fs->dir, p->name);
    uint64_t h;
    if (fs_hash_file(path, p->size, p->ctime_ns, &h) != 0) return false; /* look again later */
    if (h == g->xxh3) return true;
    g->ctime_ns = p->ctime_ns;
    return false;
}

/* Opens this node's own versions, newest first, with their file tables:
 * how many (0..2). */
static int fs_own_views(ftc_filestore_t *fs, ftc_shard_view_t v[2], const uint8_t *meta[2])
{
    int nv = 0;
    for (int k = 0; k < 2; k++) {
        int o = fs->own_step[0] >= fs->own_step[1] ? k : 1 - k;
        uint32_t ml = 0;
        ftc_err_t e = {0};
        if (fs->own_step[o] && fs->own[o].base &&
            ftc_shard_open(&v[nv], fs->own[o].base, fs->own[o].size, FTC_SHARD_ALLOW_TRAILING,
                           &e) == 0 &&
            ftc_shard_meta_get(&v[nv], FS_META_FILES, &meta[nv], &ml) == 0 &&
            ml == (uint64_t)v[nv].n_tensors * 16)
            nv++;
    }
    return nv;
}

/* Names in g the size and xxh3 of its deleted copy when one of this node's
 * own versions holds that copy (same name, mtime and size): the checksum
 * of its tensor. Else g stays of unknown content (a copy restored from
 * another node's version and deleted before this node packed it). */
static void fs_gone_hash(const ftc_shard_view_t *v, const uint8_t *const *meta, int nv,
                         fs_stamp_t *g, uint64_t size)
{
    for (int s = 0; s < nv; s++) {
        int t = ftc_shard_find(&v[s], g->name);
        if (t < 0) continue;
        ftc_shard_tensor_t tt;
        ftc_shard_get(&v[s], (uint32_t)t, &tt);
        if (ftc_le_rd64(meta[s] + 16 * t) != g->mtime_ns || tt.length != size) continue;
        g->hashed = true;
        g->size = size;
        g->xxh3 = tt.xxh3;
        return;
    }
}

/* A file of the last pack or restore (seen) that scan sc (sorted by name)
 * no longer finds was deleted by the binary: a tombstone (the store's own
 * temporaries and files it moved aside are never in seen), naming the
 * deleted copy's size and xxh3 when one of the node's own versions holds
 * it, or when a restore wrote it (seen knows the xxh3 of the version's
 * copy while the file's mtime, size and ctime stay as the restore left
 * them), else its size alone. seen becomes sc (keeping those xxh3s). 0 or
 * FTC_ENOMEM. */
static int fs_note_gone(ftc_filestore_t *fs, const fs_scan_t *sc)
{
    fs_stamps_t now;
    int rc = stamps_from_scan(sc, &now);
    size_t added = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wall_ns = ts_ns(&ts); /* when the deletions were seen: the cap keeps the newest */
    ftc_shard_view_t v[2];
    const uint8_t *meta[2];
    int nv = -1; /* the own versions, opened at the first deletion */
    for (size_t i = 0, j = 0; !rc && i < fs->seen.n; i++) {
        const fs_stamp_t *s = &fs->seen.e[i];
        while (j < now.n && strcmp(now.e[j].name, s->name) < 0)
            j++;
        if (j < now.n && !strcmp(now.e[j].name, s->name)) {
            stamp_keep_hash(&now.e[j], s); /* unchanged since the restore wrote it */
            continue;
        }
        rc = stamps_add(&fs->gone, s->name, strlen(s->name), s->mtime_ns);
        if (!rc) {
            fs_stamp_t *g = &fs->gone.e[fs->gone.n - 1];
            g->gone_ns = wall_ns;
            if (nv < 0) nv = fs_own_views(fs, v, meta);
            fs_gone_hash(v, meta, nv, g, s->size);
            if (!g->hashed && s->hashed) /* a restore wrote it, and it did not change since */
                g->hashed = true, g->size = s->size, g->xxh3 = s->xxh3;
            if (!g->hashed) /* its size at least (the last scan's): another size is another copy */
                g->sized = true, g->size = s->size;
        }
        added += !rc;
    }
    if (added)
        stamps_norm(&fs->gone);
    /* the deleted copy itself in the directory again (same name, mtime and,
     * when the tombstone knows them, size and content) is no longer
     * deleted; a file of that name with another mtime (a rollback copy that
     * kept an older one: cp -p), or with that mtime but other bytes (touch
     * -d to the same time), is another file, and the tombstone still keeps
     * the deleted copy of other nodes out */
    size_t out = 0;
    for (size_t i = 0; !rc && i < fs->gone.n; i++) {
        const fs_stamp_t *p = stamps_find(&now, fs->gone.e[i].name, strlen(fs->gone.e[i].name));
        if (p && p->mtime_ns == fs->gone.e[i].mtime_ns && fs_is_deleted_copy(fs, &fs->gone.e[i], p))
            free(fs->gone.e[i].name);
        else
            fs->gone.e[out++] = fs->gone.e[i];
    }
    if (!rc)
        fs->gone.n = out;
    if (added)
        gone_bound(fs, &fs->gone);
    if (rc) {
        stamps_free(&now);
        return rc;
    }
    stamps_free(&fs->seen);
    fs->seen = now;
    return 0;
}

static void own_slot_name(const ftc_filestore_t *fs, int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "ftc.%s.n%u.self.s%d", fs->wjob, fs->index, i);
}

/* Reads one file into dst (exactly f->size bytes), checking it did not
 * change meanwhile. FTC_EAGAIN when it did (or vanished, or is no longer a
 * regular file): pack later. O_NONBLOCK: a FIFO the binary put in its
 * place since the scan held the thread in open() for good (I6). */
static int read_one(ftc_filestore_t *fs, const fs_file_t *f, uint8_t *dst, ftc_err_t *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", fs->dir, f->name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? ftc_err_set(err, FTC_EAGAIN, "%s vanished while packing", path)
                               : ftc_err_errno(err, errno, "filestore: open %s", path);
    uint64_t got = 0;
    int rc = 0;
    struct stat st0;
    if (fstat(fd, &st0) != 0 || !S_ISREG(st0.st_mode)) {
        close(fd);
        return ftc_err_set(err, FTC_EAGAIN, "%s is no longer a regular file", path);
    }
    while (got < f->size) {
        ssize_t r = read(fd, dst + got, f->size - got > (1u << 30) ? (1u << 30) : f->size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = ftc_err_errno(err, errno, "filestore: read %s", path);
            break;
        }
        if (r == 0) {
            rc = ftc_err_set(err, FTC_EAGAIN, "%s shrank while packing", path);
            break;
        }
        got += (uint64_t)r;
    }
    struct stat st;
    if (!rc && (fstat(fd, &st) != 0 || (uint64_t)st.st_size != f->size ||
                ts_ns(&st.st_mtim) != f->mtime_ns))
        rc = ftc_err_set(err, FTC_EAGAIN, "%s changed while packing", path);
    close(fd);
    return rc;
}

static void fs_note_error(ftc_filestore_t *fs, int rc, const char *msg)
{
    pthread_mutex_lock(&fs->mu);
    if (!fs->flush_rc) {
        fs->flush_rc = rc;
        ftc_err_set(&fs->flush_err, rc, "%s", msg);
    }
    fs->stats.push_failures++;
    pthread_mutex_unlock(&fs->mu);
}

/* The next k live members after this node, ring order = members[] order. */
static int fs_targets(ftc_filestore_t *fs, uint32_t *out, int want)
{
    int me = -1;
    for (int m = 0; m < fs->nmembers; m++)
        if (!strcmp(fs->members[m], fs->node_id)) me = m;
    int n = 0;
    for (int step = 1; step <= fs->nmembers && n < want; step++) {
        int m = ((me < 0 ? -1 : me) + step) % fs->nmembers;
        if (m == me) continue;
        int idx = fs_index_of(fs, fs->members[m]);
        if (idx < 0 || idx == (int)fs->index) continue;
        bool dup = false;
        for (int i = 0; i < n; i++)
            dup |= out[i] == (uint32_t)idx;
        if (!dup) out[n++] = (uint32_t)idx;
    }
    return n;
}

static const char *busy_why(const ftc_filestore_t *fs, bool busy)
{
    if (!busy) return "the directory was quiet but a process held them open for writing";
    return fs->busy_flush ? "a flush came before a quiet period"
                          : "no pause of quiet_ms in the writes for busy_max_ms";
}

/* A busy pack: each file being written takes its size, stamp, mode and
 * bytes from the previous own version (the slot of the newest acknowledged
 * one, which this pack does not write); a file that version lacks is left
 * out. Names what it did in list. The bytes taken are checked against their
 * checksum first (open checks the head, so names, stamps and modes): this
 * pack seals them under fresh checksums, so a byte of the slot changed since
 * (a stray write, a bit flip in /dev/shm) would otherwise go out to the peers
 * as valid. A file whose copy fails is left out too, with a WARN. */
static void fs_take_previous(ftc_filestore_t *fs, fs_scan_t *sc, char *list, size_t cap)
{
    ftc_shard_view_t v;
    const uint8_t *m = NULL;
    uint32_t ml = 0;
    bool have = false;
    int o = fs->own_newest;
    char slot[FTC_SLOT_NAME_MAX] = "";
    if (o >= 0 && fs->own_step[o] && fs->own[o].base) {
        ftc_err_t e = {0};
        own_slot_name(fs, o, slot, sizeof slot);
        have = ftc_shard_open(&v, fs->own[o].base, fs->own[o].size, FTC_SHARD_ALLOW_TRAILING,
                              &e) == 0 &&
               ftc_shard_meta_get(&v, FS_META_FILES, &m, &ml) == 0 &&
               ml == (uint64_t)v.n_tensors * 16;
        if (!have)
            fs_log(fs, FTC_LOG_WARN,
                   "the previous version in slot /dev/shm/%s is unreadable (%s): the files "
                   "being written are left out of this version",
                   slot, e.code ? e.msg : "no file table");
    }
    size_t out = 0, ll = strlen(list);
    for (size_t i = 0; i < sc->n; i++) {
        fs_file_t f = sc->f[i];
        if (f.busy) {
            int t = have ? ftc_shard_find(&v, f.name) : -1;
            const char *why = t >= 0 ? "as in the previous version" : "left out";
            ftc_err_t e = {0};
            if (t >= 0 && ftc_shard_verify_tensor(&v, (uint32_t)t, &e)) {
                fs_log(fs, FTC_LOG_WARN,
                       "%s/%.100s: its copy in the previous version (slot /dev/shm/%s) fails its "
                       "checksum: left out of this version (%.120s)",
                       fs->dir, f.name, slot, e.msg);
                why = "left out, its previous copy corrupt";
                t = -1;
            }
            if (ll + 1 < cap)
                ll +=
                    (size_t)snprintf(list + ll, cap - ll, "%s%s (%s)", ll ? ", " : "", f.name, why);
            if (ll >= cap) ll = cap - 1;
            if (t < 0) {
                free(f.name);
                continue;
            }
            ftc_shard_tensor_t tt;
            ftc_shard_get(&v, (uint32_t)t, &tt);
            f.size = tt.length;
            f.from = tt.data;
            f.mtime_ns = ftc_le_rd64(m + 16 * t);
            f.mode = ftc_le_rd32(m + 16 * t + 8);
        }
        sc->f[out++] = f;
    }
    sc->n = out;
    sc->bytes = 0; /* counted again (add_sat: no -= on a saturated count) */
    for (size_t i = 0; i < sc->n; i++)
        sc->bytes = add_sat(sc->bytes, sc->f[i].size);
}

static void fs_test_hold(ftc_filestore_t *fs, const char *stage);

/* Packs the directory into the free own slot and starts pushing it. Files
 * being written (held open for writing; busy: also those that changed while
 * read) are taken as the previous version held them. busy: the directory
 * was not quiet (a flush, or busy_max_ms passed). */
static void fs_start_push(ftc_filestore_t *fs, bool busy)
{
    ftc_filestore_limits_t lim;
    pthread_mutex_lock(&fs->mu);
    lim = fs->lim;
    pthread_mutex_unlock(&fs->mu);
    fs->dirty = false;
    ftc_err_t err = {0};
    fs_scan_t sc = {0};
    ftc_shard_layout_t *l = NULL;
    uint8_t *meta = NULL, *grec = NULL;
    size_t glen = 0;
    char carried[600] = "";
    if (!busy) /* a quiet pack starts afresh; a busy one keeps the files that changed */
        busy_clear(fs);
    /* a file some process holds open for writing is not finished, quiet or
     * not: a writer that pauses halfway (computing the rest) leaves it torn */
    fs_find_writers(fs, 0);
    if (fs->pack_delay_ms > 0) /* tests: a writer opens meanwhile */
        ftc_sleep_ms((uint64_t)fs->pack_delay_ms);
    int rc = scan_dir(fs, &sc, "", 0, &err);
    if (rc) goto fail;
    if (sc.n) /* (an empty directory is a version too: every file deleted) */
        qsort(sc.f, sc.n, sizeof *sc.f, cmp_file);
    fs_test_hold(fs, "read");
    if ((rc = fs_note_gone(fs, &sc))) {
        ftc_err_set(&err, rc, "filestore: out of memory packing %s", fs->dir);
        goto fail;
    }
    if (fs->nbusy) fs_take_previous(fs, &sc, carried, sizeof carried);
    /* FS_BYTES_MAX too: the shard's layout adds its head and alignment to
     * the bytes, which must not wrap either, whatever the cap */
    if (sc.bytes > lim.max_bytes || sc.bytes > FS_BYTES_MAX) {
        rc = ftc_err_set(&err, FTC_ERANGE,
                         "%s holds %s%" PRIu64 " bytes in %zu files, over the cap of %" PRIu64
                         " bytes: not replicated (write less per node, or raise the cap)",
                         fs->dir, sc.bytes == UINT64_MAX ? "more than " : "", sc.bytes, sc.n,
                         sc.bytes > FS_BYTES_MAX && lim.max_bytes > FS_BYTES_MAX ? FS_BYTES_MAX
                                                                               : lim.max_bytes);
        ftc_ctl_event_t ev = {.kind = "ckptdir_too_big",
                              .node = fs->node_id,
                              .rank = -1,
                              .generation = fs->gen,
                              .step = -1,
                              .detail = err.msg};
        ftc_ctl_event(fs->ctl, &ev);
        goto fail;
    }
    uint32_t peers[FTC_REPL_MAX_PEERS];
    int want = fs->k < FTC_REPL_MAX_PEERS ? fs->k : FTC_REPL_MAX_PEERS;
    int np = fs_targets(fs, peers, want);
    if (np == 0) {
        fs_refresh_peers(fs);
        np = fs_targets(fs, peers, want); /* capped too: peers[] holds no more */
    }
    if (np == 0) {
        rc = ftc_err_set(&err, FTC_ENOENT,
                         "no live peer to push %s to (%d member(s); their addresses are read from "
                         "ftc:{%s}:filefab)",
                         fs->dir, fs->nmembers, fs->job);
        fs->retry_on_members = true;
        goto fail;
    }
    uint64_t version = ftc_wall_ms();
    if (version <= fs->last_version) version = fs->last_version + 1;
    ftc_shard_info_t info = {0};
    snprintf(info.job_id, sizeof info.job_id, "%s", fs->wjob);
    info.step = version;
    info.generation = fs->gen;
    info.created_ms = ftc_wall_ms();
    info.dp = info.tp = info.pp = 1;
    l = ftc_shard_layout_create(&info);
    meta = calloc(sc.n ? sc.n : 1, 16);
    grec = gone_record(&fs->gone, &glen);
    if (!l || !meta || !grec) {
        rc = ftc_err_set(&err, FTC_ENOMEM, "filestore: out of memory packing %s", fs->dir);
        goto fail;
    }
    for (size_t i = 0; i < sc.n; i++) {
        uint64_t shape = sc.f[i].size;
        if ((rc = ftc_shard_layout_add_tensor(l, sc.f[i].name, FTC_DTYPE_U8, 1, &shape, &err)) < 0)
            goto fail;
        ftc_le_wr64(meta + 16 * i, sc.f[i].mtime_ns);
        ftc_le_wr32(meta + 16 * i + 8, sc.f[i].mode);
    }
    rc = 0;
    if ((rc = ftc_shard_layout_add_meta(l, FS_META_FILES, meta, sc.n * 16, &err)) < 0 ||
        (rc = ftc_shard_layout_add_meta(l, FS_META_NODE, fs->node_id, strlen(fs->node_id), &err)) <
            0 ||
        (glen && (rc = ftc_shard_layout_add_meta(l, FS_META_GONE2, grec, glen, &err)) < 0))
        goto fail;
    rc = 0;
    uint64_t size = ftc_shard_layout_size(l);
    int s = fs->own_newest == 0 ? 1 : 0;
    char name[FTC_SLOT_NAME_MAX];
    own_slot_name(fs, s, name, sizeof name);
    ftc_slot_close(&fs->own[s]);
    fs->own_step[s] = 0;
    if ((rc = ftc_slot_create(name, size, &fs->own[s], &err)) ||
        (rc = ftc_shard_layout_write(l, fs->own[s].base, size, &err)))
        goto fail;
    for (size_t i = 0; i < sc.n; i++) {
        uint8_t *dst = ftc_shard_payload_ptr(l, fs->own[s].base, (uint32_t)i);
        if (sc.f[i].from) {
            memcpy(dst, sc.f[i].from, sc.f[i].size);
        } else if ((rc = read_one(fs, &sc.f[i], dst, &err))) {
            if (rc == FTC_EAGAIN && busy) busy_add(fs, sc.f[i].name); /* being written */
            goto fail;
        }
    }
    /* a writer that opened a file after fs_find_writers looked, and paused
     * (its size and mtime stood still while it was read), had it read
     * half-written: look again; such a file is now in the busy set */
    fs_find_writers(fs, 0);
    for (size_t i = 0; i < sc.n; i++)
        if (!sc.f[i].from && busy_has(fs, sc.f[i].name)) {
            rc = ftc_err_set(&err, FTC_EAGAIN, "%s/%s was opened for writing while packing",
                             fs->dir, sc.f[i].name);
            goto fail;
        }
    if ((rc = ftc_shard_seal(fs->own[s].base, size, 1, &err))) goto fail;
    fs->last_version = version;
    fs->push_slot = s;
    fs->push_version = version;
    fs->push_size = size;
    fs->push_n = np;
    fs->push_detail[0] = 0;
    fs->push_recorded = 0;
    fs->rec_retry_ns = 0;
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)lim.push_timeout_ms);
    for (int i = 0; i < np; i++) {
        fs->push_peers[i] = peers[i];
        fs->push_done[i] = false;
        fs->push_rc[i] = ftc_repl_push(fs->repl, fs->index, version, fs->own[s].base, size,
                                       &peers[i], 1, d, &fs->push_x[i]);
        if (fs->push_rc[i]) {
            fs->push_done[i] = true;
            size_t dl = strlen(fs->push_detail);
            snprintf(fs->push_detail + dl, sizeof fs->push_detail - dl, "%snode %u: %s",
                     dl ? "; " : "", peers[i], ftc_repl_errstr(fs->repl));
        }
    }
    fs->pushing = true;
    fs->own_step[s] = version; /* packed (not yet acknowledged) */
    fs->own_size[s] = size;
    if (carried[0])
        fs_log(fs, FTC_LOG_WARN,
               "version %" PRIu64 " of %s made while files were still being written (%s): %s",
               version, fs->dir, busy_why(fs, busy), carried);
    busy_clear(fs);
    ftc_shard_layout_destroy(l);
    free(meta);
    free(grec);
    FTC_DEBUG(FS_MOD, "version %" PRIu64 ": %zu files, %" PRIu64 " bytes, pushing to %d peer(s)",
              version, sc.n, size, np);
    scan_free(&sc);
    return;
fail:
    ftc_shard_layout_destroy(l);
    free(meta);
    free(grec);
    scan_free(&sc);
    if (rc == FTC_EAGAIN) { /* a file is still changing: pack after the next quiet period
                               (busy: at once, that file now counted as being written) */
        fs->dirty = true;
        if (!busy) fs->last_event_ns = ftc_now_ns();
        fs->pack_after_ns = ftc_now_ns() + (busy ? 10 : 20) * 1000000ull; /* a flush never spins */
        FTC_DEBUG(FS_MOD, "pack postponed: %s", err.msg);
        return;
    }
    busy_clear(fs);
    fs_log(fs, FTC_LOG_ERROR, "not replicated: %s", err.msg);
    fs_note_error(fs, rc, err.msg);
}

/* ftc__fs_rec_parse: whole numbers and one holder word, nothing after:
 * sscanf("%" SCNu64) took "5x" for version 5, "-1" for 2^64-1, and the
 * words after the holder list went unseen (fuzz_filestore). */
int ftc__fs_rec_parse(const char *v, size_t vl, uint64_t *version, uint64_t *size, uint64_t *gen,
                      char **holders)
{
    if (memchr(v, 0, vl)) return -1;
    char *text = strndup(v, vl), w[24], *h = NULL;
    if (!text) return -1;
    const char *p = text;
    uint64_t *num[3] = {version, size, gen};
    int rc = 0;
    for (int i = 0; !rc && i < 3; i++)
        rc = ftc_next_word(&p, w, sizeof w) && !ftc_parse_u64(w, num[i]) ? 0 : -1;
    while (!rc && isspace((unsigned char)*p))
        p++;
    size_t hl = rc ? 0 : strcspn(p, " \t\n\v\f\r");
    if (!rc && hl >= FS_HOLDERS_MAX) rc = -2;
    const char *after = p + hl;
    while (!rc && isspace((unsigned char)*after))
        after++;
    if (!rc && *after) rc = -1; /* a word after the holder list */
    if (!rc && holders && !(h = strndup(p, hl))) rc = -1;
    free(text);
    if (!rc && holders) *holders = h;
    return rc;
}

int ftc__fs_holder_next(const char **p, uint32_t *index, char *id, size_t id_cap)
{
    const char *b = *p;
    while (*b == ',')
        b++;
    if (!*b) {
        *p = b;
        return 0;
    }
    size_t l = strcspn(b, ","), il;
    *p = b + l;
    const char *colon = memchr(b, ':', l);
    if (!colon || !ftc__fs_index_parse(b, (size_t)(colon - b), index)) return -1;
    il = l - (size_t)(colon - b) - 1;
    if (il == 0 || il > FTC_CTL_NODE_MAX || il >= id_cap) return -1;
    memcpy(id, colon + 1, il);
    id[il] = 0;
    return 1;
}

/* Records the pushed version and its holders; 0, or the Redis error with
 * its text in why. */
static int fs_record(ftc_filestore_t *fs, const char *holders, char *why, size_t cap)
{
    char key[160], field[16], val[3 * 21 + FS_HOLDERS_MAX];
    snprintf(field, sizeof field, "%u", fs->index);
    snprintf(val, sizeof val, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %s", fs->push_version,
             fs->push_size, fs->gen, holders);
    int rc = ftc_redis_cmdv(ftc_ctl_redis(fs->ctl), true, NULL, "HSET",
                            ftc_ctl_key(fs->ctl, "files", key, sizeof key), field, val, NULL);
    if (rc) snprintf(why, cap, "%s: %s", key, ftc_redis_errstr(ftc_ctl_redis(fs->ctl)));
    return rc;
}

/* The pushed version is recorded (with these holders): it is this node's
 * newest. Counted once, however many records its holders take. */
static void fs_counted(ftc_filestore_t *fs, const char *holders, int n)
{
    bool first = fs->push_recorded == 0;
    fs->push_recorded = n;
    fs->own_newest = fs->push_slot;
    snprintf(fs->own_holders, sizeof fs->own_holders, "%s", holders);
    if (!first) return;
    pthread_mutex_lock(&fs->mu);
    fs->stats.versions_pushed++;
    fs->stats.last_version = fs->push_version;
    fs->stats.last_bytes = fs->push_size;
    pthread_mutex_unlock(&fs->mu);
}

/* "idx:id,..." of the push's peers that acknowledged so far (holders has
 * FS_HOLDERS_MAX bytes, enough for any push: push_n <= FTC_REPL_MAX_PEERS);
 * their count. */
static int fs_acked_holders(ftc_filestore_t *fs, char *holders)
{
    int acked = 0;
    size_t hl = 0;
    holders[0] = 0;
    for (int i = 0; i < fs->push_n; i++) {
        if (!fs->push_done[i] || fs->push_rc[i]) continue;
        int w = snprintf(holders + hl, FS_HOLDERS_MAX - hl, "%s%u:%s", acked ? "," : "",
                         fs->push_peers[i], fs->peers[fs->push_peers[i]].node_id);
        if (w < 0 || (size_t)w >= FS_HOLDERS_MAX - hl) { /* cannot happen: the bound above */
            holders[hl] = 0; /* whole entries only: a shorter list is still true */
            fs_log(fs, FTC_LOG_ERROR,
                   "version %" PRIu64 ": holder list longer than %d bytes; recording the "
                   "first %d holder(s) only",
                   fs->push_version, FS_HOLDERS_MAX - 1, acked);
            break;
        }
        hl += (size_t)w;
        acked++;
    }
    return acked;
}

/* Tries again to record an acknowledged version (rec_pending). */
static void fs_retry_record(ftc_filestore_t *fs)
{
    char why[400] = "";
    if (fs_record(fs, fs->rec_holders, why, sizeof why) != 0) {
        fs->rec_retry_ns = ftc_now_ns() + 1000000000ull;
        FTC_DEBUG(FS_MOD, "recording version %" PRIu64 " again: %s", fs->push_version, why);
        return;
    }
    fs->rec_pending = false;
    int n = 1;
    for (const char *c = fs->rec_holders; *c; c++)
        n += *c == ',';
    fs_counted(fs, fs->rec_holders, n);
    if (fs->rec_all) {
        pthread_mutex_lock(&fs->mu);
        fs->flush_rc = 0;
        ftc_err_clear(&fs->flush_err);
        pthread_mutex_unlock(&fs->mu);
    }
    fs_log(fs, FTC_LOG_INFO,
           "version %" PRIu64 " (%" PRIu64 " bytes) recorded after all, held by %s",
           fs->push_version, fs->push_size, fs->rec_holders);
}

/* Checks the push's transfers; records the version as soon as a peer
 * acknowledged it, and its whole holder list once all are done. */
static void fs_check_push(ftc_filestore_t *fs, bool broken)
{
    bool all = true;
    for (int i = 0; i < fs->push_n; i++) {
        if (fs->push_done[i]) continue;
        ftc_repl_status_t st = {0};
        int qrc = broken || !fs->repl ? FTC_EFABRIC : ftc_repl_status(fs->repl, fs->push_x[i], &st);
        if (qrc == 0 && !st.done) {
            all = false;
            continue;
        }
        if (qrc) { /* the endpoint broke (here or during a restore) with the transfer */
            fs->push_rc[i] = FTC_EFABRIC;
            snprintf(st.detail, sizeof st.detail, "the fabric endpoint broke");
        } else {
            fs->push_rc[i] = st.rc ? st.rc : (st.acked ? 0 : FTC_EIO);
            ftc_repl_release(fs->repl, fs->push_x[i]);
        }
        fs->push_done[i] = true;
        if (fs->push_rc[i]) {
            size_t dl = strlen(fs->push_detail);
            snprintf(fs->push_detail + dl, sizeof fs->push_detail - dl, "%snode %u: %s (%s)",
                     dl ? "; " : "", fs->push_peers[i], ftc_errname(fs->push_rc[i]),
                     st.detail[0] ? st.detail : "no detail");
        }
    }
    char holders[FS_HOLDERS_MAX] = "", why[400] = "";
    int acked = fs_acked_holders(fs, holders);
    if (!all) {
        /* the version counts as soon as a peer acknowledged it: a hung peer
         * must not hold its record back until the push deadline */
        if (acked > fs->push_recorded && ftc_now_ns() >= fs->rec_retry_ns) {
            if (fs_record(fs, holders, why, sizeof why) == 0)
                fs_counted(fs, holders, acked);
            else /* tried again at the next check, or when all are done */
                fs->rec_retry_ns = ftc_now_ns() + 1000000000ull;
        }
        return;
    }
    fs->pushing = false;
    fs->rec_retry_ns = 0;
    int first_rc = 0;
    for (int i = 0; i < fs->push_n && !first_rc; i++)
        first_rc = fs->push_rc[i];
    /* the version counts once recorded: a restore looks only for the
     * recorded one, so until then the slot of the previous one is kept */
    int rec_rc = acked > fs->push_recorded ? fs_record(fs, holders, why, sizeof why) : 0;
    if (rec_rc && fs->push_recorded) {
        /* it counts already, recorded with its first holders: a late (or
         * lost) record of the others changes nothing a restore relies on */
        fs_log(fs, FTC_LOG_WARN,
               "version %" PRIu64 ": its holders %s could not be recorded (%s); %s stay recorded",
               fs->push_version, holders, why, fs->own_holders);
        acked = fs->push_recorded;
    } else if (rec_rc) {
        fs->rec_pending = true;
        fs->rec_all = !first_rc;
        snprintf(fs->rec_holders, sizeof fs->rec_holders, "%s", holders);
        fs->rec_retry_ns = ftc_now_ns() + 1000000000ull;
        if (!first_rc) first_rc = rec_rc;
        size_t dl = strlen(fs->push_detail);
        snprintf(fs->push_detail + dl, sizeof fs->push_detail - dl,
                 "%sacknowledged by %s but not recorded in %s (a restore would not find it; "
                 "recording is retried before the next version)",
                 dl ? "; " : "", holders, why);
        acked = 0;
    } else if (acked) {
        fs_counted(fs, holders, acked);
    } else {
        fs->own_step[fs->push_slot] = 0;
    }
    if (first_rc) {
        /* peers may be restarting or catching up with the generation: a few
         * more tries, and another one whenever the members change */
        fs->retry_on_members = true;
        if (fs->retries < FS_RETRIES)
            fs->retry_at_ns = ftc_now_ns() + (uint64_t)(1000 << fs->retries++) * 1000000ull;
        char msg[900];
        snprintf(msg, sizeof msg, "version %" PRIu64 " of %s replicated to %d of %d peer(s): %s",
                 fs->push_version, fs->dir, acked, fs->push_n, fs->push_detail);
        fs_log(fs, FTC_LOG_WARN, "%s", msg);
        fs_note_error(fs, first_rc, msg);
    } else {
        /* the directory as it is now is replicated: earlier errors are moot */
        pthread_mutex_lock(&fs->mu);
        fs->flush_rc = 0;
        ftc_err_clear(&fs->flush_err);
        pthread_mutex_unlock(&fs->mu);
        fs_log(fs, FTC_LOG_INFO, "version %" PRIu64 " (%" PRIu64 " bytes) replicated to %s",
               fs->push_version, fs->push_size, holders);
    }
}

/* ---- restore ------------------------------------------------------------------------------ */

typedef struct fs_rec { /* one node's recorded version */
    uint32_t owner;
    uint64_t version, size;
    char *holders;        /* "idx:id,idx:id" (malloc'd; "" when none recorded) */
    const uint8_t *shard; /* the verified shard (own slot or buf) */
    uint64_t shard_size;
    uint8_t *buf; /* malloc'd copy / fetched shard */
    ftc_shard_view_t v;
    const uint8_t *meta; /* FS_META_FILES of the view */
    uint32_t meta_len;
} fs_rec_t;

typedef struct fs_cand { /* one file of one version */
    const char *name;
    uint32_t name_len;
    uint64_t mtime_ns, version;
    uint32_t owner, mode;
    fs_rec_t *rec;
    uint32_t tensor;
    bool placed; /* the winner of its name, in the directory after the restore's write */
    bool written;      /* ... and written by the restore (not found there already) */
    uint64_t ctime_ns; /* its ctime once renamed into place (written) */
} fs_cand_t;

static int cmp_cand(const void *a, const void *b)
{
    const fs_cand_t *x = a, *y = b;
    uint32_t m = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, m);
    if (c || x->name_len != y->name_len) return c ? c : (x->name_len < y->name_len ? -1 : 1);
    if (x->mtime_ns != y->mtime_ns) /* newest last */
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    if (x->version != y->version) return x->version < y->version ? -1 : 1;
    return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* Opens and verifies a shard of rec's version; sets rec->v and meta. */
static int rec_accept(ftc_filestore_t *fs, fs_rec_t *rec, const uint8_t *p, uint64_t len,
                      ftc_err_t *err)
{
    int rc = ftc_shard_open(&rec->v, p, len, FTC_SHARD_VERIFY | FTC_SHARD_ALLOW_TRAILING, err);
    if (rc) return rc;
    if (strcmp(rec->v.info.job_id, fs->wjob) || rec->v.info.step != rec->version)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "a shard of %s version %" PRIu64 " was expected, "
                           "got %s version %" PRIu64,
                           fs->wjob, rec->version, rec->v.info.job_id, rec->v.info.step);
    const uint8_t *m = NULL;
    uint32_t ml = 0;
    if (ftc_shard_meta_get(&rec->v, FS_META_FILES, &m, &ml) != 0 ||
        ml != (uint64_t)rec->v.n_tensors * 16)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "version %" PRIu64 " of node %u: metadata record "
                           "%s missing or of the wrong size",
                           rec->version, rec->owner, FS_META_FILES);
    rec->shard = p;
    rec->shard_size = rec->v.size;
    rec->meta = m;
    rec->meta_len = ml;
    return 0;
}

/* Drives the engine until transfer x is done or d passes. */
static void fs_wait_xfer(ftc_filestore_t *fs, ftc_repl_xfer_t x, ftc_deadline_t d,
                         ftc_repl_status_t *st)
{
    for (;;) {
        if (ftc_repl_status(fs->repl, x, st) != 0) {
            st->done = true, st->rc = FTC_EFABRIC;
            snprintf(st->detail, sizeof st->detail, "transfer lost");
            return;
        }
        if (st->done) return;
        if (ftc_deadline_expired(d) || atomic_load(&fs->stop)) {
            st->done = true, st->rc = FTC_ETIMEDOUT;
            snprintf(st->detail, sizeof st->detail, "restore deadline passed");
            return;
        }
        /* a holder that restarted (its endpoint rebuilt) publishes a new
         * address: re-reading them replaces the peer, which cancels a fetch
         * waiting on the old one, and the next round asks the new one */
        if (ftc_now_ns() - fs->last_refresh_ns > 500000000ull) fs_refresh_peers(fs);
        if (ftc_repl_progress(fs->repl, ftc_deadline_in_ms(20), true) == FTC_EFABRIC ||
            ftc_fabric_health(fs->fab) != 0) {
            st->done = true, st->rc = FTC_EFABRIC;
            snprintf(st->detail, sizeof st->detail, "the fabric endpoint broke");
            return;
        }
    }
}

/* Fetches rec from its live holders (a few rounds); 0 or the error naming
 * every holder tried. */
static int fs_fetch_rec(ftc_filestore_t *fs, fs_rec_t *rec, ftc_deadline_t d, int per_ms,
                        ftc_err_t *err)
{
    char tried[1400] = "";
    int last = FTC_ENOENT;
    for (int round = 0; round < FS_FETCH_ROUNDS && !ftc_deadline_expired(d); round++) {
        if (round) {
            ftc_sleep_ms(200);
            fs_refresh_peers(fs);
        }
        int tries = 0;
        const char *lp = rec->holders;
        uint32_t h;
        char hid[FTC_CTL_NODE_MAX + 1];
        for (int hr; (hr = ftc__fs_holder_next(&lp, &h, hid, sizeof hid)) != 0;) {
            if (hr < 0) continue; /* "1x:a" was node 1 (strtoul) */
            size_t tl = strlen(tried);
            if (!fs_live(fs, h, hid)) {
                if (round == 0)
                    snprintf(tried + tl, sizeof tried - tl, "%snode %u (%s): not a live member",
                             tl ? "; " : "", h, hid);
                continue;
            }
            tries++;
            if (!fs->repl) {
                fs_rebuild(fs);
                if (!fs->repl) {
                    last = FTC_EFABRIC;
                    snprintf(tried + tl, sizeof tried - tl, "%sno fabric endpoint (%s)",
                             tl ? "; " : "", fs->down_why);
                    break;
                }
            }
            ftc_repl_xfer_t x;
            ftc_repl_status_t st = {0};
            ftc_deadline_t fd = ftc_deadline_min(d, ftc_deadline_in_ms((uint64_t)per_ms));
            int rc = ftc_repl_fetch(fs->repl, h, rec->owner, rec->version, fd, &x);
            if (rc == 0) {
                fs_wait_xfer(fs, x, fd, &st);
                rc = st.rc;
                if (rc == 0) {
                    uint8_t *buf = NULL;
                    uint64_t len = 0;
                    rc = ftc_repl_take(fs->repl, x, &buf, &len);
                    ftc_err_t e2 = {0};
                    if (rc == 0 && (rc = rec_accept(fs, rec, buf, len, &e2)) != 0)
                        snprintf(st.detail, sizeof st.detail, "%s", e2.msg);
                    if (rc == 0) {
                        rec->buf = buf;
                        ftc_repl_release(fs->repl, x);
                        return 0;
                    }
                    free(buf);
                }
                if (rc != FTC_EFABRIC || ftc_fabric_health(fs->fab) == 0)
                    ftc_repl_release(fs->repl, x);
            } else {
                snprintf(st.detail, sizeof st.detail, "%s", ftc_repl_errstr(fs->repl));
            }
            last = rc;
            tl = strlen(tried);
            snprintf(tried + tl, sizeof tried - tl, "%snode %u (%s) round %d: %s: %s",
                     tl ? "; " : "", h, hid, round + 1, ftc_errname(rc), st.detail);
            if (fs->fab && ftc_fabric_health(fs->fab) != 0) fs_rebuild(fs);
        }
        if (!tries) break; /* nobody to ask */
    }
    return ftc_err_set(err, last == FTC_ENOENT || last == 0 ? FTC_ENOENT : last,
                       "version %" PRIu64 " of node %u (%" PRIu64 " bytes): no verified copy; "
                       "holders tried: %s",
                       rec->version, rec->owner, rec->size, tried[0] ? tried : "none recorded");
}

/* Takes rec from this node's memory: its own slots or a replica it holds. */
static bool fs_local_rec(ftc_filestore_t *fs, fs_rec_t *rec)
{
    ftc_err_t e = {0};
    if (rec->owner == fs->index) {
        for (int s = 0; s < 2; s++) {
            if (!fs->own[s].base) {
                char name[FTC_SLOT_NAME_MAX];
                own_slot_name(fs, s, name, sizeof name);
                if (ftc_slot_open(name, true, &fs->own[s], &e) != 0) continue;
            }
            if (rec_accept(fs, rec, fs->own[s].base, fs->own[s].size, &e) == 0) return true;
        }
        return false;
    }
    uint64_t size;
    const uint8_t *p;
    /* the recorded version may sit in the slot before the newest: a newer
     * one reached this node but was never recorded (its owner died first) */
    if (ftc_repl_held_step(fs->repl, rec->owner, rec->version, &p, &size) != 0) return false;
    /* copy: the slot may be overwritten by the next progress call */
    rec->buf = malloc(size ? size : 1);
    if (!rec->buf) return false;
    memcpy(rec->buf, p, size);
    if (rec_accept(fs, rec, rec->buf, size, &e) != 0) {
        fs_log(fs, FTC_LOG_WARN,
               "the replica of node %u version %" PRIu64 " this node holds "
               "failed its check (%s): fetching another copy",
               rec->owner, rec->version, e.msg);
        free(rec->buf);
        rec->buf = NULL;
        return false;
    }
    return true;
}

/* The store writes only inside its directory: every directory on the way to
 * `rel` that exists must be a real directory, not a symbolic link (a binary
 * may link a subdirectory to a shared file system; a restore must not write
 * through it) nor a file. What does not exist yet, ftc_fs_mkdirs creates. */
static int fs_parent_check(const ftc_filestore_t *fs, const char *rel, ftc_err_t *err)
{
    char path[PATH_MAX];
    int base = snprintf(path, sizeof path, "%s/", fs->dir);
    for (const char *slash = strchr(rel, '/'); slash; slash = strchr(slash + 1, '/')) {
        snprintf(path + base, sizeof path - (size_t)base, "%.*s", (int)(slash - rel), rel);
        struct stat st;
        if (lstat(path, &st) != 0) {
            if (errno == ENOENT)
                return 0; /* nor anything below it */
            return ftc_err_errno(err, errno, "filestore: lstat %s", path);
        }
        if (S_ISLNK(st.st_mode))
            return ftc_err_set(err, FTC_EINVAL, "%s is a symbolic link: %s is not written "
                               "through it (the store writes only inside %s); remove the link "
                               "to have it restored", path, rel, fs->dir);
        if (!S_ISDIR(st.st_mode))
            return ftc_err_set(err, FTC_EINVAL, "%s is not a directory: %s cannot be restored "
                               "below it; remove it to have it restored", path, rel);
    }
    return 0;
}

/* Writes one winning file atomically; keeps a local file that is newer. */
static int fs_write_file(ftc_filestore_t *fs, fs_cand_t *c, bool *written, ftc_err_t *err)
{
    *written = false;
    c->written = false;
    char rel[FS_NAME_MAX + 1], path[PATH_MAX], tmp[PATH_MAX];
    memcpy(rel, c->name, c->name_len);
    rel[c->name_len] = 0;
    snprintf(path, sizeof path, "%s/%s", fs->dir, rel);
    if (fs_parent_check(fs, rel, err)) return err->code;
    ftc_shard_tensor_t t;
    ftc_shard_get(&c->rec->v, c->tensor, &t);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) /* (rename said "Is a directory", after the whole write) */
            return ftc_err_set(err, FTC_EINVAL, "%s is a directory: the recorded file %s is not "
                               "restored over it; remove the directory (or rename it) to have "
                               "the file restored", path, rel);
        if (S_ISREG(st.st_mode) && ts_ns(&st.st_mtim) > c->mtime_ns) {
            if (!fs->suspect) {
                FTC_INFO(FS_MOD, "%s: the local file is newer than every recorded copy: kept",
                         path);
                return 0;
            }
            fs_log(fs, FTC_LOG_WARN, "%s changed after its recorded copy while a rank died "
                   "(perhaps half-written): replaced by the recorded copy", path);
        }
        if (S_ISREG(st.st_mode) && ts_ns(&st.st_mtim) == c->mtime_ns &&
            (uint64_t)st.st_size == t.length)
            return 0; /* already this file */
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    *slash = 0;
    if (ftc_fs_mkdirs(parent, err)) return err->code;
    /* a new file (O_EXCL): a name of ours already there (a hard link to a
     * file outside the directory, planted by the binary) is never written
     * through; the next number is tried */
    static atomic_uint counter;
    int fd = -1;
    for (int i = 0; fd < 0 && i < 16; i++) {
        snprintf(tmp, sizeof tmp, "%s/" FS_TMP_PREFIX "%d.%u", parent, (int)getpid(),
                 atomic_fetch_add(&counter, 1)); /* fs_reap_tmp */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0)
        return ftc_err_errno(err, errno, "filestore: create %s%s", tmp,
                             errno == EEXIST ? " (16 names of the store's temporaries taken: "
                                               "remove the .ftc-tmp.* files of this directory)"
                                             : "");
    int rc = ftc_fs_write_all(fd, t.data, t.length, NULL, err, tmp);
    if (!rc && fchmod(fd, (mode_t)(c->mode & 0777)) != 0) /* no set-id bits from a peer */
        rc = ftc_err_errno(err, errno, "filestore: chmod %s", tmp);
    struct timespec ts[2] = {{.tv_sec = 0, .tv_nsec = UTIME_NOW},
                             {.tv_sec = (time_t)(c->mtime_ns / 1000000000ull),
                              .tv_nsec = (long)(c->mtime_ns % 1000000000ull)}};
    if (!rc && futimens(fd, ts) != 0)
        rc = ftc_err_errno(err, errno, "filestore: setting the mtime of %s", tmp);
    struct stat ws = {0}, placed;
    if (!rc && fstat(fd, &ws) != 0) ws.st_ino = 0;
    close(fd);
    if (!rc && rename(tmp, path) != 0)
        rc = ftc_err_errno(err, errno, "filestore: rename %s to %s", tmp, path);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    *written = true;
    /* the copy's xxh3 is known (the version's checksum) while the file stays
     * as written: its ctime now (the rename changed it) tells (fs_note_gone) */
    if (ws.st_ino && lstat(path, &placed) == 0 && placed.st_ino == ws.st_ino &&
        placed.st_dev == ws.st_dev) {
        c->written = true;
        c->ctime_ns = ts_ns(&placed.st_ctim);
    }
    return 0;
}

/* After a restore while the directory is suspect (a rank died: its last
 * writes were not packed): files that are in no recorded version were
 * written after the last one, perhaps half, by the rank that died; they are
 * renamed aside (FS_CRASHED_PREFIX + name, never packed; a name too long
 * for that is cut after "<n>.") so that the binary does not load them,
 * unless the restore was incomplete (a version it could not get may hold
 * them). A file that cannot be moved aside fails the restore, named. */
static int fs_move_aside(ftc_filestore_t *fs, const fs_cand_t *c, size_t nc, bool incomplete,
                         ftc_err_t *err)
{
    fs_scan_t sc = {0};
    int rc = scan_dir(fs, &sc, "", 0, err);
    if (rc) {
        fs_log(fs, FTC_LOG_ERROR, "restore after a rank died: %s", err->msg);
        scan_free(&sc);
        return rc;
    }
    for (size_t i = 0; i < sc.n; i++) {
        size_t len = strlen(sc.f[i].name);
        bool known = false;
        for (size_t j = 0; j < nc && !known; j++)
            known = c[j].name_len == len && !memcmp(c[j].name, sc.f[i].name, len);
        if (known)
            continue;
        char path[PATH_MAX], aside[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", fs->dir, sc.f[i].name);
        if (incomplete) {
            fs_log(fs, FTC_LOG_WARN, "%s is in no recorded version and a rank died: kept (the "
                   "restore was incomplete)", path);
            continue;
        }
        const char *base = strrchr(sc.f[i].name, '/');
        int dl = base ? (int)(base - sc.f[i].name) + 1 : 0;
        const char *bn = base ? base + 1 : sc.f[i].name;
        size_t pl = strlen(FS_CRASHED_PREFIX);
        if (pl + strlen(bn) <= NAME_MAX)
            snprintf(aside, sizeof aside, "%s/%.*s" FS_CRASHED_PREFIX "%s", fs->dir, dl,
                     sc.f[i].name, bn);
        else /* over NAME_MAX with the prefix: cut, made unique by its place in the scan */
            snprintf(aside, sizeof aside, "%s/%.*s" FS_CRASHED_PREFIX "%zu.%.*s", fs->dir, dl,
                     sc.f[i].name, i, (int)(NAME_MAX - pl - 21), bn);
        if (rename(path, aside) == 0) {
            fs_log(fs, FTC_LOG_WARN, "%s is in no recorded version and a rank died while it may "
                   "have been writing it: moved aside to %s", path, aside);
        } else if (!rc) { /* the binary would load it: the restore fails, naming it */
            rc = ftc_err_errno(err, errno, "filestore: %s is in no recorded version and a rank "
                               "died while it may have been writing it, but moving it aside to "
                               "%s failed (remove it before the binary loads it)", path, aside);
            fs_log(fs, FTC_LOG_ERROR, "restore: %s", err->msg);
        }
    }
    scan_free(&sc);
    return rc;
}

/* tests (FTC_TEST_FS_HOLD): at stage, when the test armed the hold (its
 * file exists), renames it to PATH.held and waits until the test removes
 * that, 10 s at most (a test that never does fails on its own checks). */
static void fs_test_hold(ftc_filestore_t *fs, const char *stage)
{
    if (!fs->hold_path[0] || strcmp(fs->hold_stage, stage)) return;
    char held[PATH_MAX + 8];
    snprintf(held, sizeof held, "%s.held", fs->hold_path);
    if (rename(fs->hold_path, held) != 0) return; /* not armed */
    struct stat st;
    for (int i = 0; i < 1000 && stat(held, &st) == 0; i++)
        ftc_sleep_ms(10);
}

/* Removes this directory's copy of a deleted file when it is that copy (its
 * mtime the tombstone's, to the nanosecond, and its size and xxh3 when the
 * tombstone names them: restored here earlier), and the directories that
 * leaves empty; 1 when removed. A copy of another mtime, older or newer, or
 * of other bytes, is another file the binary wrote: never removed.
 *
 * A surviving rank (ftc run --in-process) may write the file while it is
 * checked: the copy is opened, checked through that descriptor, then its
 * name is moved aside (a temporary name: the binary cannot open it any
 * more) and removed only if the name still held the inode checked with the
 * mtime and size checked; else the rank wrote it meanwhile (in place, or a
 * new file renamed over it) and it is put back. Left: a write through a
 * descriptor the rank opened before the move, landing after the last check. */
static int fs_remove_gone(ftc_filestore_t *fs, const fs_stamp_t *g)
{
    char path[PATH_MAX], aside[PATH_MAX + 64];
    ftc_err_t e = {0};
    struct stat st, now, moved;
    size_t dl = (size_t)snprintf(path, sizeof path, "%s/", fs->dir);
    snprintf(path + dl, sizeof path - dl, "%s", g->name);
    if (fs_parent_check(fs, g->name, &e)) return 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0; /* not there (nor written through a link) */
    uint64_t h;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ts_ns(&st.st_mtim) != g->mtime_ns ||
        (g->sized && (uint64_t)st.st_size != g->size) ||
        (g->hashed && ((uint64_t)st.st_size != g->size ||
                       fs_hash_fd(fd, g->size, 0, &h) != 0 || h != g->xxh3))) {
        close(fd);
        return 0; /* another copy */
    }
    fs_test_hold(fs, "remove");
    static atomic_uint counter;
    const char *slash = strrchr(path + dl, '/');
    size_t pl = slash ? (size_t)(slash + 1 - path) : dl;
    snprintf(aside, sizeof aside, "%.*s" FS_TMP_PREFIX FS_TMP_GONE "%d.%u", (int)pl, path,
             (int)getpid(), atomic_fetch_add(&counter, 1));
    if (rename(path, aside) != 0) {
        if (errno != ENOENT) /* ENOENT: the rank deleted it meanwhile */
            fs_log(fs, FTC_LOG_WARN, "%s was deleted on another node but removing it failed: "
                   "rename to %s: %s", path, aside, strerror(errno));
        close(fd);
        return 0;
    }
    bool same = lstat(aside, &moved) == 0 && moved.st_dev == st.st_dev &&
                moved.st_ino == st.st_ino && fstat(fd, &now) == 0 &&
                ts_ns(&now.st_mtim) == g->mtime_ns && now.st_size == st.st_size;
    close(fd);
    if (!same) { /* written meanwhile: the binary's, put back unless a newer one took the name */
        if (renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) != 0)
            fs_log(fs, FTC_LOG_WARN, "%s was written while it was being removed (deleted on "
                   "another node) and putting it back failed (%s): that copy is kept as %s "
                   "(removed by the store's next process)",
                   path, strerror(errno), aside);
        else
            fs_log(fs, FTC_LOG_INFO, "%s was written while it was being removed (deleted on "
                   "another node): kept", path);
        return 0;
    }
    if (unlink(aside) != 0) {
        fs_log(fs, FTC_LOG_WARN, "%s was deleted on another node but removing it (as %s) "
               "failed: %s", path, aside, strerror(errno));
        return 0;
    }
    for (char *sl; (sl = strrchr(path + dl, '/'));) {
        *sl = 0;
        if (rmdir(path) != 0) break; /* not empty */
    }
    return 1;
}

/* The winning copies the restore placed (candidates c, sorted by name) that
 * scan set seen lacks: a surviving rank (ftc run --in-process) deleted them
 * after the restore wrote them and before its scan, and the store drops the
 * events of the restore's time. They go into seen, as restored, so that the
 * next pack finds them gone and makes their tombstones; how many. Out of
 * memory: those left out are missed, as before. */
static size_t fs_seen_missed(fs_stamps_t *seen, const fs_cand_t *c, size_t nc)
{
    size_t n0 = seen->n, missed = 0; /* seen->e[0..n0) sorted: the scan */
    for (size_t i = 0; i < nc; i++) { /* (one placed copy per name: the winner) */
        fs_stamps_t scan = {.e = seen->e, .n = n0};
        if (!c[i].placed || stamps_find(&scan, c[i].name, c[i].name_len)) continue;
        if (stamps_add(seen, c[i].name, c[i].name_len, c[i].mtime_ns)) break;
        ftc_shard_tensor_t t;
        ftc_shard_get(&c[i].rec->v, c[i].tensor, &t);
        seen->e[seen->n - 1].size = t.length;
        if (c[i].written) /* the restore's copy (deleted: no ctime to compare any more) */
            seen->e[seen->n - 1].hashed = true, seen->e[seen->n - 1].xxh3 = t.xxh3;
        missed++;
    }
    if (missed) stamps_norm(seen);
    return missed;
}

/* The files of scan set seen that the restore wrote (candidates c) and
 * that are still as it left them (same mtime, size and ctime) get the
 * xxh3 of the version's copy: deleted before this node packs them, their
 * tombstone names their bytes (fs_note_gone), not their size alone, which
 * took a copy of the same name, mtime and size but other bytes for the
 * deleted one (test_gonesamesize). */
static void fs_seen_written(fs_stamps_t *seen, const fs_cand_t *c, size_t nc)
{
    for (size_t i = 0; i < nc; i++) {
        fs_stamp_t *p = c[i].written ? stamps_find(seen, c[i].name, c[i].name_len) : NULL;
        ftc_shard_tensor_t t;
        if (!p) continue;
        ftc_shard_get(&c[i].rec->v, c[i].tensor, &t);
        if (p->mtime_ns == c[i].mtime_ns && p->size == t.length && p->ctime_ns == c[i].ctime_ns)
            p->hashed = true, p->xxh3 = t.xxh3;
    }
}

/* The files of scan set seen whose xxh3 the previous scan set old knew (a
 * restore wrote them) and that stayed as they were then (same mtime, size
 * and ctime) keep it: a later restore that finds such a file there already
 * does not write it again, and before, its tombstone then named its size
 * alone (test_gonesamesize, v.bin). */
static void fs_seen_carry(fs_stamps_t *seen, const fs_stamps_t *old)
{
    for (size_t i = 0; i < seen->n; i++) {
        fs_stamp_t *p = &seen->e[i];
        const fs_stamp_t *q = stamps_find(old, p->name, strlen(p->name));
        if (q) stamp_keep_hash(p, q);
    }
}

/* req_ns: when the restore was asked (ftc_now_ns). Its deadlines count
 * from then, not from when this thread took it up (a pack may have held
 * it): the fetches end at restore_timeout_ms, the writes of files
 * min(restore_timeout_ms / 2, 10 s) later, so that the restore has ended
 * before its requester stops waiting (restore_timeout_ms + 15 s) and
 * starts the ranks: before, the writes had no deadline, and a restore
 * still writing then wrote under the new ranks (and, after a rank's death,
 * replaced their new files and moved them aside). */
static int fs_do_restore(ftc_filestore_t *fs, uint64_t req_ns, ftc_err_t *err)
{
    ftc_filestore_limits_t lim;
    pthread_mutex_lock(&fs->mu);
    lim = fs->lim;
    pthread_mutex_unlock(&fs->mu);
    uint64_t tmo_ns = (uint64_t)lim.restore_timeout_ms * 1000000ull;
    uint64_t slack_ns = tmo_ns / 2 < 10000000000ull ? tmo_ns / 2 : 10000000000ull;
    ftc_deadline_t d = {req_ns + tmo_ns}, dw = {req_ns + tmo_ns + slack_ns};
    fs_refresh_peers(fs);
    char key[160];
    ftc_redis_reply_t *rep = NULL;
    int rc = ftc_redis_cmdv(ftc_ctl_redis(fs->ctl), true, &rep, "HGETALL",
                            ftc_ctl_key(fs->ctl, "files", key, sizeof key), NULL);
    if (rc) {
        ftc_redis_reply_free(rep);
        return ftc_err_set(err, rc, "filestore: reading %s: %s", key,
                           ftc_redis_errstr(ftc_ctl_redis(fs->ctl)));
    }
    ftc_redis_reply_t **el;
    size_t n = 0;
    if ((rc = ftc_redis_want_array(rep, key, -1, &el, &n, err))) {
        ftc_redis_reply_free(rep);
        return rc;
    }
    fs_rec_t *recs = calloc(n / 2 + 1, sizeof *recs);
    if (!recs) {
        ftc_redis_reply_free(rep);
        return ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory");
    }
    int first = 0;
    size_t nr = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        const char *f, *v;
        size_t fl, vl;
        ftc_err_t e = {0};
        if (ftc_redis_want_str(el[i], key, &f, &fl, &e) ||
            ftc_redis_want_str(el[i + 1], key, &v, &vl, &e))
            continue;
        fs_rec_t *r = &recs[nr];
        uint32_t owner = 0;
        uint64_t gen;
        r->holders = NULL;
        int prc = !ftc__fs_index_parse(f, fl, &owner) /* strtoul took "1x" for node 1 */
                      ? -1
                      : ftc__fs_rec_parse(v, vl, &r->version, &r->size, &gen, &r->holders);
        if (prc == -2) {
            if (!first)
                first = ftc_err_set(err, FTC_EPROTO,
                                    "%s: field %.*s lists holders in %zu bytes, more than the "
                                    "%d any version can have (%d peers of ids up to %d bytes): "
                                    "not a record of this version of ftc",
                                    key, (int)fl, f, vl, FS_HOLDERS_MAX - 1, FTC_REPL_MAX_PEERS,
                                    FTC_CTL_NODE_MAX);
            continue;
        }
        if (prc) {
            if (!first)
                first = ftc_err_set(err, FTC_EPROTO, "%s: field %.*s holds garbage: %.*s", key,
                                    (int)fl, f, (int)(vl > 80 ? 80 : vl), v);
            continue;
        }
        r->owner = owner;
        nr++;
    }
    ftc_redis_reply_free(rep);
    /* 1. this node's memory first (no progress calls meanwhile), then fetches */
    bool *local = calloc(nr + 1, sizeof *local);
    if (!local) {
        for (size_t i = 0; i < nr; i++)
            free(recs[i].holders);
        free(recs);
        return ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory");
    }
    for (size_t i = 0; i < nr; i++)
        local[i] = fs_local_rec(fs, &recs[i]);
    for (size_t i = 0; i < nr; i++) {
        if (local[i]) continue;
        ftc_err_t e = {0};
        int r = fs_fetch_rec(fs, &recs[i], d, lim.push_timeout_ms, &e);
        if (r) {
            recs[i].shard = NULL;
            fs_log(fs, FTC_LOG_ERROR, "restore: %s", e.msg);
            if (!first) first = ftc_err_set(err, r, "%s", e.msg);
        }
    }
    /* 2. tombstones: those of the recorded versions (this node's own among
     * them), the newest per name. Not this store's in memory: a deletion
     * that no recorded version holds (its pack failed, or came after the
     * last one) is not applied: a restore puts back what the binary lost
     * before its files were packed, and a rank that deleted its last
     * checkpoint and crashed while writing the next keeps the old one */
    fs_stamps_t gone = {0};
    int grc = 0;
    for (size_t i = 0; !grc && i < nr; i++) {
        const uint8_t *m = NULL;
        uint32_t ml = 0;
        char why[120];
        int form = FTC__FS_GONE_V2;
        const char *mname = FS_META_GONE2;
        if (!recs[i].shard) continue;
        if (ftc_shard_meta_get(&recs[i].v, FS_META_GONE2, &m, &ml) != 0) {
            form = FTC__FS_GONE_V1, mname = FS_META_GONE; /* a version of an older ftc */
            if (ftc_shard_meta_get(&recs[i].v, FS_META_GONE, &m, &ml) != 0) continue; /* none */
        }
        grc = gone_parse(m, ml, form, &gone, why, sizeof why);
        if (grc == FTC_ECORRUPT) {
            fs_log(fs, FTC_LOG_WARN,
                   "version %" PRIu64 " of node %u: metadata record %s is malformed (%s): its "
                   "deletions are ignored",
                   recs[i].version, recs[i].owner, mname, why);
            grc = 0;
        }
    }
    if (grc) { /* out of memory: no deletion is applied, this node's tombstones stay */
        stamps_free(&gone);
        if (!first) first = ftc_err_set(err, grc, "filestore: out of memory restoring");
    }
    stamps_norm(&gone);
    /* 3. candidates: every file of every version, newest per name wins; a
     * copy no newer than its name's tombstone was deleted */
    size_t nc = 0, ndel = 0;
    for (size_t i = 0; i < nr; i++)
        if (recs[i].shard) nc += recs[i].v.n_tensors;
    fs_cand_t *c = calloc(nc + 1, sizeof *c);
    if (!c) {
        first = first ? first : ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory");
        nc = 0;
    }
    size_t k = 0;
    for (size_t i = 0; c && i < nr; i++) {
        fs_rec_t *r = &recs[i];
        for (uint32_t t = 0; r->shard && t < r->v.n_tensors; t++) {
            ftc_shard_tensor_t tt;
            ftc_shard_get(&r->v, t, &tt);
            if (!name_ok(tt.name, tt.name_len)) {
                fs_log(fs, FTC_LOG_WARN,
                       "version %" PRIu64 " of node %u: file name '%.*s' is not a safe "
                       "relative path, or is a store's own (.ftc-tmp.*): skipped",
                       r->version, r->owner, (int)(tt.name_len > 200 ? 200 : tt.name_len), tt.name);
                continue;
            }
            uint64_t mt = ftc_le_rd64(r->meta + 16 * t);
            fs_stamp_t *g = stamps_find(&gone, tt.name, tt.name_len);
            if (g && mt == g->mtime_ns && gone_is(g, tt.length, tt.xxh3)) {
                /* the deleted copy itself (a copy of that mtime but other
                 * bytes was written again since: it competes as any copy) */
                ndel++;
                continue;
            }
            if (g && mt > g->mtime_ns) g->newer = true; /* written again since */
            c[k++] = (fs_cand_t){.name = tt.name,
                                 .name_len = tt.name_len,
                                 .mtime_ns = mt,
                                 .mode = ftc_le_rd32(r->meta + 16 * t + 8),
                                 .version = r->version,
                                 .owner = r->owner,
                                 .rec = r,
                                 .tensor = t};
        }
    }
    nc = k;
    if (nc) qsort(c, nc, sizeof *c, cmp_cand);
    /* a deleted copy restored here earlier goes first (before the writes:
     * kept as "newer than every recorded copy", it stood in the way of a
     * copy that kept an older mtime) */
    size_t removed_n = 0;
    for (size_t i = 0; i < gone.n; i++)
        removed_n += fs_remove_gone(fs, &gone.e[i]);
    uint64_t written_n = 0;
    size_t late = 0; /* files not written: the deadline passed */
    for (size_t i = 0; i < nc; i++) {
        if (i + 1 < nc && c[i + 1].name_len == c[i].name_len &&
            !memcmp(c[i + 1].name, c[i].name, c[i].name_len))
            continue; /* a newer copy follows */
        if (ftc_deadline_expired(dw)) {
            late++;
            continue;
        }
        ftc_err_t e = {0};
        bool w = false;
        int r = fs_write_file(fs, &c[i], &w, &e);
        written_n += w;
        c[i].placed = !r;
        if (r) {
            fs_log(fs, FTC_LOG_ERROR, "restore: %s", e.msg);
            if (!first) first = ftc_err_set(err, r, "%s", e.msg);
        }
    }
    if (late) {
        ftc_err_t e = {0};
        ftc_err_set(&e, FTC_ETIMEDOUT, "filestore: restore of %s: its deadline passed "
                    "(restore_timeout_ms %d, and %" PRIu64 " ms more to write) with %zu file(s) "
                    "not written; the ranks start without them (raise restore_timeout_ms, or "
                    "keep less in the directory)", fs->dir, lim.restore_timeout_ms,
                    (uint64_t)(slack_ns / 1000000u), late);
        fs_log(fs, FTC_LOG_ERROR, "restore: %s", e.msg);
        if (!first) first = ftc_err_set(err, FTC_ETIMEDOUT, "%s", e.msg);
    }
    if (fs->suspect) { /* a rank died: what no version holds may be half-written */
        ftc_err_t e = {0};
        int r = fs_move_aside(fs, c, nc, first != 0, &e);
        if (r && !first) first = ftc_err_set(err, r, "%s", e.msg);
    }
    /* the restore's own writes are not a new version of this node */
    fs_drain_events(fs, true);
    fs_watch_tree(fs, "", 0);
    /* 4. the tombstones no newer copy undid are this node's now (its next
     * versions carry them: a deletion outlives the node that made it); the
     * directory as restored is what its next pack compares with */
    if (!grc) {
        size_t out = 0;
        for (size_t i = 0; i < gone.n; i++)
            if (gone.e[i].newer)
                free(gone.e[i].name);
            else
                gone.e[out++] = gone.e[i];
        gone.n = out;
        gone_bound(fs, &gone);
        stamps_free(&fs->gone);
        fs->gone = gone;
        gone = (fs_stamps_t){0};
    }
    fs_test_hold(fs, "rescan");
    fs_scan_t sc = {0};
    fs_stamps_t seen;
    ftc_err_t e = {0};
    if (scan_dir(fs, &sc, "", 0, &e) == 0) {
        if (sc.n) qsort(sc.f, sc.n, sizeof *sc.f, cmp_file);
        if (stamps_from_scan(&sc, &seen) == 0) {
            fs_seen_carry(&seen, &fs->seen);
            fs_seen_written(&seen, c, nc);
            size_t missed = fs_seen_missed(&seen, c, nc);
            if (missed) {
                fs_log(fs, FTC_LOG_INFO, "restore: %zu restored file(s) deleted during the "
                       "restore (by a surviving rank): their deletion is packed", missed);
                fs->restore_missed = true;
            }
            stamps_free(&fs->seen);
            fs->seen = seen;
        }
    }
    scan_free(&sc);
    stamps_free(&gone);
    pthread_mutex_lock(&fs->mu);
    fs->stats.files_restored += written_n;
    pthread_mutex_unlock(&fs->mu);
    fs_log(fs, first ? FTC_LOG_WARN : FTC_LOG_INFO,
           "restore: %zu recorded version(s), %zu file(s) in the union, %" PRIu64
           " written, %zu deleted copies left out, %zu removed%s",
           nr, nc, written_n, ndel, removed_n, first ? " (with errors)" : "");
    for (size_t i = 0; i < nr; i++) {
        free(recs[i].buf);
        free(recs[i].holders);
    }
    free(recs);
    free(local);
    free(c);
    return first;
}

/* ---- the thread ----------------------------------------------------------------------------- */

static void fs_apply_members(ftc_filestore_t *fs)
{
    pthread_mutex_lock(&fs->mu);
    if (!fs->req_fresh) {
        pthread_mutex_unlock(&fs->mu);
        return;
    }
    free(fs->members);
    fs->members = fs->req_members;
    fs->nmembers = fs->req_n;
    fs->gen = fs->req_gen;
    fs->req_members = NULL;
    fs->req_fresh = false;
    pthread_mutex_unlock(&fs->mu);
    fs->members_known = true;
    if (fs->repl) ftc_repl_set_generation(fs->repl, fs->gen);
    fs->ropt.generation = fs->gen;
    fs_refresh_peers(fs);
    /* a push still going to a node that left the members (dead or hung)
     * would hold every newer version back until its deadline: cancel those
     * transfers (the node is re-added by the next refresh, not as a target)
     * and push again to the new ring once this push ends */
    for (int i = 0; fs->pushing && fs->repl && i < fs->push_n; i++) {
        uint32_t p = fs->push_peers[i];
        if (fs->push_done[i] || fs_live(fs, p, NULL)) continue;
        fs_log(fs, FTC_LOG_INFO,
               "node %u left the members: its push of version %" PRIu64 " is cancelled", p,
               fs->push_version);
        ftc_repl_peer_remove(fs->repl, p);
        fs->peers[p].known = false;
        fs->dirty = true;
        fs->last_event_ns = 0;
    }
    if (fs->retry_on_members) {
        fs->retry_on_members = false;
        fs->dirty = true;
    }
    /* holders of this node's newest version that left: replicate it again */
    if (fs->own_holders[0] && !fs->dirty) {
        int live = 0;
        const char *lp = fs->own_holders;
        uint32_t h;
        char hid[FTC_CTL_NODE_MAX + 1];
        for (int hr; (hr = ftc__fs_holder_next(&lp, &h, hid, sizeof hid)) != 0;)
            if (hr > 0 && fs_live(fs, h, hid))
                live++;
        int want = fs->k < fs->nmembers - 1 ? fs->k : fs->nmembers - 1;
        if (live < want) {
            fs_log(fs, FTC_LOG_INFO,
                   "%d of the holders %s of this node's files left: "
                   "replicating them again",
                   want - live, fs->own_holders);
            fs->dirty = true;
            fs->last_event_ns = 0;
        }
    }
}

/* True while pid is exiting but not a zombie yet (PF_EXITING in
 * /proc/PID/stat): the kernel closes its files before its exit status can
 * be waited for, so a file event may be seen before the death. (A rank
 * whose main thread left by pthread_exit while others run reads as exiting
 * too: after 2 s the store then stops packing for it, on the safe side.) */
static bool fs_exiting(pid_t pid)
{
    ftc_proc_stat_t ps;
    if (ftc_proc_stat_read(pid, &ps) != 0)
        return false;
    return ps.state == 'X' || (ps.flags & 0x4ul) != 0; /* PF_EXITING */
}

/* True when a file of the directory was modified at or after t (ns of the
 * real-time clock): the restore writes files with their recorded mtimes, so
 * a newer one was written by someone else meanwhile. */
static bool fs_written_since(ftc_filestore_t *fs, uint64_t t)
{
    fs_scan_t sc = {0};
    ftc_err_t e = {0};
    bool newer = false;
    if (scan_dir(fs, &sc, "", 0, &e) == 0)
        for (size_t i = 0; i < sc.n && !newer; i++)
            newer = sc.f[i].mtime_ns >= t;
    scan_free(&sc);
    return newer;
}

static void fs_crashed(ftc_filestore_t *fs, const char *why)
{
    pthread_mutex_lock(&fs->mu);
    if (!fs->crashed) {
        fs->crashed = true;
        snprintf(fs->crash_why, sizeof fs->crash_why, "%s", why);
    }
    pthread_mutex_unlock(&fs->mu);
}

/* Before a pack: 1 when every watched rank runs or exited with status 0;
 * -1 when one died otherwise (killed, or a non-zero exit: its files closed
 * by the kernel may be half-written); 0 while one was reaped by the
 * supervisor but not reported yet (asked again; after 2 s it counts as
 * dead). waitid(WNOWAIT) leaves the reaping to the supervisor. */
static int fs_ranks_check(ftc_filestore_t *fs)
{
    pid_t w[FS_MAX_RANKS], c[FS_MAX_RANKS];
    pthread_mutex_lock(&fs->mu);
    bool crashed = fs->crashed;
    int nw = fs->nwranks, nc = fs->nclean;
    memcpy(w, fs->wranks, (size_t)nw * sizeof *w);
    memcpy(c, fs->clean, (size_t)nc * sizeof *c);
    pthread_mutex_unlock(&fs->mu);
    if (crashed)
        return -1;
    bool unreported = false;
    for (int i = 0; i < nw; i++) {
        bool clean = false;
        for (int j = 0; j < nc && !clean; j++)
            clean = c[j] == w[i];
        if (clean)
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)w[i], &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
            if (errno == ECHILD)
                unreported = true; /* reaped: its supervisor reports it */
            continue;
        }
        if (si.si_pid == 0 && fs_exiting(w[i])) {
            unreported = true; /* dying (its files closing): its status comes next */
            continue;
        }
        if (si.si_pid == 0 || (si.si_code == CLD_EXITED && si.si_status == 0))
            continue; /* running, or done */
        char why[120];
        snprintf(why, sizeof why,
                 si.si_code == CLD_EXITED ? "rank pid %d exited with status %d"
                                          : "rank pid %d was killed by signal %d",
                 (int)w[i], si.si_status);
        fs_crashed(fs, why);
        return -1;
    }
    if (!unreported) {
        fs->unreported_ns = 0;
        return 1;
    }
    uint64_t now = ftc_now_ns();
    if (!fs->unreported_ns)
        fs->unreported_ns = now;
    if (now - fs->unreported_ns < 2000000000ull)
        return 0;
    fs_crashed(fs, "a rank was reaped but its exit was never reported");
    return -1;
}

/* A rank died: the changes since the last version are not packed (I3: a
 * half-written file must not replace the last good version on the peers);
 * the next restore puts the recorded files back. */
static void fs_crash_discard(ftc_filestore_t *fs)
{
    fs->dirty = false;
    fs->suspect = true;
    pthread_mutex_lock(&fs->mu);
    char why[sizeof fs->crash_why];
    snprintf(why, sizeof why, "%s", fs->crash_why);
    if (!fs->flush_rc) {
        fs->flush_rc = FTC_ECANCELED;
        ftc_err_set(&fs->flush_err, FTC_ECANCELED,
                    "filestore: %s: the changes to %s since version %" PRIu64 " were not packed "
                    "(a file it was writing may be half-written); the next restore puts back the "
                    "recorded files",
                    why, fs->dir, fs->last_version);
    }
    pthread_mutex_unlock(&fs->mu);
    if (!fs->crash_logged) {
        fs->crash_logged = true;
        fs_log(fs, FTC_LOG_WARN,
               "%s: the changes to %s since version %" PRIu64 " are not packed (a file it was "
               "writing may be half-written); the next restore puts back the recorded files",
               why, fs->dir, fs->last_version);
    }
}

/* The endpoint could not be reopened: pending restores and flushes get
 * FTC_EFABRIC now instead of waiting out their deadlines. */
static void fs_answer_down(ftc_filestore_t *fs)
{
    pthread_mutex_lock(&fs->mu);
    if (fs->restore_req > fs->restore_ack) {
        fs->restore_rc = ftc_err_set(&fs->restore_err, FTC_EFABRIC,
                                     "filestore: no fabric endpoint (reopening it failed: %s): "
                                     "nothing restored",
                                     fs->down_why);
        fs->restore_ack = fs->restore_req;
    }
    if (fs->flush_req > fs->flush_ack) {
        if (!fs->flush_rc)
            fs->flush_rc = ftc_err_set(&fs->flush_err, FTC_EFABRIC,
                                       "filestore: no fabric endpoint (reopening it failed: %s): "
                                       "nothing pushed",
                                       fs->down_why);
        fs->flush_ack = fs->flush_req;
    }
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
}

static void *fs_main(void *arg)
{
    ftc_filestore_t *fs = arg;
    while (!atomic_load(&fs->stop)) {
        if (!fs->repl) {
            fs_rebuild(fs);
            if (!fs->repl && !atomic_load(&fs->stop)) {
                fs_answer_down(fs); /* nothing waits for an endpoint that does not open */
                ftc_sleep_ms(1000);
            }
            continue;
        }
        uint64_t v;
        ssize_t rd = read(fs->evfd, &v, sizeof v);
        (void)rd;
        fs_apply_members(fs);
        pthread_mutex_lock(&fs->mu);
        bool restore = fs->restore_req > fs->restore_ack;
        uint64_t restore_no = fs->restore_req, restore_ns = fs->restore_req_ns;
        bool flush = fs->flush_req > fs->flush_ack;
        uint64_t flush_no = fs->flush_req;
        int quiet_ms = fs->lim.quiet_ms;
        int busy_max_ms = fs->lim.busy_max_ms;
        pthread_mutex_unlock(&fs->mu);
        if (restore) {
            ftc_err_t e = {0};
            /* changes made before the restore still count; the restore's own
             * writes do not (fs_do_restore drops their events, and with them
             * those of a rank writing meanwhile: in-process survivors) */
            fs_drain_events(fs, false);
            /* a rank that died since the last version (ftc run restarts its
             * ranks at once, before the quiet period that would have found
             * it): its half-written files are not kept as newer ones */
            if (fs->dirty && !fs->suspect && fs_ranks_check(fs) < 0)
                fs_crash_discard(fs);
            struct timespec t0;
            clock_gettime(CLOCK_REALTIME_COARSE, &t0); /* the clock of mtimes */
            int rc = fs_do_restore(fs, restore_ns, &e);
            if (fs->suspect) /* a rank died: the recorded files are the truth now */
                fs->dirty = false;
            else if (fs_written_since(fs, ts_ns(&t0))) /* by a rank, during the restore */
                fs->dirty = true, fs->last_event_ns = ftc_now_ns();
            if (fs->restore_missed) /* a file deleted by a rank during the restore */
                fs->dirty = true, fs->last_event_ns = ftc_now_ns();
            fs->restore_missed = false;
            fs->suspect = false;
            fs->crash_logged = false;
            pthread_mutex_lock(&fs->mu);
            fs->restore_rc = rc;
            fs->restore_err = e;
            fs->restore_ack = restore_no;
            pthread_cond_broadcast(&fs->cv);
            pthread_mutex_unlock(&fs->mu);
            if (!fs->repl) continue;
        }
        fs_drain_events(fs, false);
        uint64_t now = ftc_now_ns();
        if (fs->republish) {
            ftc_err_t e = {0};
            if (fs_publish(fs, &e)) fs_log(fs, FTC_LOG_WARN, "%s", e.msg);
        }
        if (now - fs->last_refresh_ns > 1000000000ull) fs_refresh_peers(fs);
        if (!fs->pushing && fs->retry_at_ns && now >= fs->retry_at_ns) {
            fs->retry_at_ns = 0;
            fs->dirty = true;
            fs->last_event_ns = 0;
        }
        if (fs->rec_pending && !fs->pushing && (flush || now >= fs->rec_retry_ns))
            fs_retry_record(fs);
        if (!fs->dirty)
            fs->busy_since_ns = 0;
        else if (!fs->busy_since_ns)
            fs->busy_since_ns = now;
        bool quiet = now - fs->last_event_ns >= (uint64_t)quiet_ms * 1000000ull;
        bool overdue =
            busy_max_ms > 0 && now - fs->busy_since_ns >= (uint64_t)busy_max_ms * 1000000ull;
        uint64_t busy_max_ns = (uint64_t)(busy_max_ms > 0 ? busy_max_ms : 30000) * 1000000ull;
        if (!fs->dirty && ((fs->held_check_ns && now >= fs->held_check_ns) ||
                           (fs->unclosed_ns && now - fs->unclosed_ns >= busy_max_ns))) {
            /* a file held open for writing at the last look, or written to
             * and not closed since (no close, no change, no pack): still? */
            fs_find_writers(fs, fs->unclosed_ns);
            busy_clear(fs);
        }
        if (!fs->pushing && !fs->rec_pending && fs->dirty && fs->members_known &&
            now >= fs->pack_after_ns && (flush || quiet || overdue)) {
            int ranks = fs_ranks_check(fs);
            fs->busy_flush = flush;
            if (ranks > 0)
                fs_start_push(fs, !quiet);
            else if (ranks < 0)
                fs_crash_discard(fs);
        }
        if (flush && !fs->pushing && (fs->rec_pending || !fs->dirty || !fs->members_known)) {
            pthread_mutex_lock(&fs->mu);
            if (fs->rec_pending && !fs->flush_rc) {
                fs->flush_rc = FTC_EREDIS;
                ftc_err_set(&fs->flush_err, FTC_EREDIS,
                            "filestore: version %" PRIu64 " of %s is acknowledged by %s but still "
                            "not recorded in Redis (ftc:{%s}:files): no newer version is made "
                            "until it is",
                            fs->push_version, fs->dir, fs->rec_holders, fs->job);
            }
            if (fs->dirty && !fs->members_known && !fs->flush_rc) {
                fs->flush_rc = FTC_EINVAL;
                ftc_err_set(&fs->flush_err, FTC_EINVAL,
                            "filestore: %s changed but no members "
                            "were set (ftc_filestore_set_members first)",
                            fs->dir);
            }
            fs->flush_ack = flush_no;
            pthread_cond_broadcast(&fs->cv);
            pthread_mutex_unlock(&fs->mu);
        }
        bool hot = fs->pushing || fs->dirty || now < fs->hot_until_ns;
        bool broken =
            ftc_repl_progress(fs->repl, ftc_deadline_in_ms(hot ? 5 : 1), true) == FTC_EFABRIC ||
            ftc_fabric_health(fs->fab) != 0;
        if (fs->pushing) fs_check_push(fs, broken);
        if (broken && !atomic_load(&fs->stop)) { /* a stop aborts the endpoint: no rebuild */
            fs_rebuild(fs);
            continue;
        }
        if (broken)
            break;
        ftc_repl_counters_t ctr;
        ftc_repl_counters(fs->repl, &ctr);
        if (ctr.bytes_received != fs->last_ctr.bytes_received ||
            ctr.bytes_sent != fs->last_ctr.bytes_sent || ctr.refused != fs->last_ctr.refused)
            fs->hot_until_ns = ftc_now_ns() + 200000000ull;
        fs->last_ctr = ctr;
        if (!hot) {
            struct pollfd pf[2] = {{fs->ino, POLLIN, 0}, {fs->evfd, POLLIN, 0}};
            poll(pf, 2, 20);
        }
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------- */

static bool id_ok(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max) return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
            !(s[i] >= '0' && s[i] <= '9') && !strchr("._-:/", s[i]))
            return false;
    return true;
}

ftc_filestore_t *ftc_filestore_create(const char *job, uint32_t index, const char *node_id,
                                      const ftc_redis_url_t *redis, int k, const char *provider,
                                      ftc_err_t *err)
{
    if (!job || strlen(job) + strlen(".files") > FTC_SHARD_JOB_MAX || !id_ok(job, 63) ||
        strchr(job, ':') || strchr(job, '/') || !id_ok(node_id, FTC_CTL_NODE_MAX) || !redis ||
        k < 1 || index >= FS_MAX_NODES) {
        ftc_err_set(
            err, FTC_EINVAL,
            "filestore: job (1..%d of A-Z a-z 0-9 . _ -), node id (1..%d of those and : /), "
            "redis, k >= 1 and index < %d are required",
            FTC_SHARD_JOB_MAX - 6, FTC_CTL_NODE_MAX, FS_MAX_NODES);
        return NULL;
    }
    /* read once, strictly: it was getenv + atoi at every pack ("3x" was 3,
     * "x" no delay, both silently) */
    const char *td = getenv("FTC_TEST_FS_PACK_DELAY_MS");
    int64_t delay = 0;
    if (td && ftc_parse_int(td, 0, 10000, &delay) != 0) {
        ftc_err_set(err, FTC_EINVAL,
                    "filestore: FTC_TEST_FS_PACK_DELAY_MS='%.40s' is not a whole number of ms in "
                    "0..10000 (a test hook: unset it)",
                    td);
        return NULL;
    }
    const char *hold = getenv("FTC_TEST_FS_HOLD");
    if (hold) {
        const char *colon = strchr(hold, ':');
        size_t sl = colon ? (size_t)(colon - hold) : 0;
        if (!colon || !((sl == 6 && !strncmp(hold, "remove", 6)) ||
                        (sl == 6 && !strncmp(hold, "rescan", 6)) ||
                        (sl == 4 && !strncmp(hold, "read", 4))) ||
            colon[1] != '/' || strlen(colon + 1) >= PATH_MAX) {
            ftc_err_set(err, FTC_EINVAL,
                        "filestore: FTC_TEST_FS_HOLD='%.60s' is not remove:/PATH, "
                        "rescan:/PATH or read:/PATH (a test hook: unset it)",
                        hold);
            return NULL;
        }
    }
    ftc_filestore_t *fs = calloc(1, sizeof *fs);
    if (!fs) {
        ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory");
        return NULL;
    }
    fs->pack_delay_ms = (int)delay;
    if (hold) {
        const char *colon = strchr(hold, ':');
        size_t sl = colon ? (size_t)(colon - hold) : 0;
        snprintf(fs->hold_stage, sizeof fs->hold_stage, "%.*s", (int)sl, hold);
        snprintf(fs->hold_path, sizeof fs->hold_path, "%s", colon + 1);
    }
    pthread_mutex_init(&fs->mu, NULL);
    ftc_cond_init(&fs->cv); /* fs_wait_ack counts on the monotonic clock */
    fs->ino = fs->evfd = -1;
    fs->own[0].fd = fs->own[1].fd = -1;
    fs->own_newest = -1;
    fs->index = index;
    fs->k = k;
    fs->lim = (ftc_filestore_limits_t)FTC_FILESTORE_LIMITS_INIT;
    snprintf(fs->job, sizeof fs->job, "%s", job);
    snprintf(fs->wjob, sizeof fs->wjob, "%s.files", job);
    snprintf(fs->node_id, sizeof fs->node_id, "%s", node_id);
    snprintf(fs->dir, sizeof fs->dir, "/dev/shm/ftc.%s.ckptdir.n%u", job, index);
    if (mkdir(fs->dir, 0700) != 0 && errno != EEXIST) {
        ftc_err_errno(err, errno, "filestore: mkdir %s", fs->dir);
        goto fail;
    }
    struct stat st;
    if (lstat(fs->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ftc_err_set(err, FTC_EINVAL, "filestore: %s exists and is not a directory", fs->dir);
        goto fail;
    }
    fs->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    fs->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fs->ino < 0 || fs->evfd < 0) {
        ftc_err_errno(err, errno, "filestore: inotify/eventfd");
        goto fail;
    }
    fs_watch_tree(fs, "", 0);
    ftc_redis_t *r = ftc_redis_connect(redis, NULL, err);
    if (!r) goto fail;
    fs->ctl = ftc_ctl_create(r, job, err);
    if (!fs->ctl) {
        ftc_redis_close(r);
        goto fail;
    }
    /* versions only grow, also across a replacement of this node */
    uint64_t recorded = 0; /* the newest acknowledged version of this index */
    char key[160], field[16];
    snprintf(field, sizeof field, "%u", index);
    ftc_redis_reply_t *rep = NULL;
    if (ftc_redis_cmdv(ftc_ctl_redis(fs->ctl), true, &rep, "HGET",
                       ftc_ctl_key(fs->ctl, "files", key, sizeof key), field, NULL) == 0) {
        const char *s;
        size_t sl;
        ftc_err_t e = {0};
        if (ftc_redis_want_str(rep, key, &s, &sl, &e) == 0) {
            /* the version from the whole record (strtoull took "5x" for 5) */
            uint64_t a, b, c;
            char *h = NULL;
            /* a version is a wall-clock ms stamp: one of 2^63 or more is no
             * version to go above (2^64 - 1 + 1 wrapped to 0, "no version") */
            if (ftc__fs_rec_parse(s, sl, &a, &b, &c, &h) == 0 && a < FS_VERSION_MAX) {
                fs->last_version = recorded = a;
                snprintf(fs->own_holders, sizeof fs->own_holders, "%s", h);
            } else {
                FTC_WARN(FS_MOD, "%s: field %s holds garbage (%.*s): not this node's "
                         "recorded version (its next version replaces it)", key, field,
                         (int)(sl > 80 ? 80 : sl), s);
            }
            free(h);
        }
    }
    ftc_redis_reply_free(rep);
    uint8_t secret[16];
    ftc_repl_options_t ro = FTC_REPL_OPTIONS_INIT;
    if (fs_secret(fs, secret, err) || ftc_wire_key_init(&ro.key, fs->wjob, secret, 16, err))
        goto fail;
    ro.job = fs->wjob;
    ro.self = index;
    ro.generation = 0;
    fs->ropt = ro;
    ftc_fabric_opts_t fo = FTC_FABRIC_OPTS_INIT;
    if (provider && *provider) {
        snprintf(fs->provider, sizeof fs->provider, "%s", provider);
        fo.provider = fs->provider;
    }
    fo.abort_flag = &fs->stop; /* a stop ends a post or wait its thread is in */
    fs->fopt = fo;
    if (fs_open_transport(fs, err) || fs_publish(fs, err)) goto fail;
    /* own versions a previous supervisor of this node left. The slot kept
     * from the next pack is the one holding the recorded (acknowledged)
     * version, not merely the newer one: that may be a version no peer ever
     * acknowledged, or a pack cut short (I3). Only verified slots count. */
    for (int s = 0; s < 2; s++) {
        char name[FTC_SLOT_NAME_MAX];
        ftc_err_t e = {0};
        own_slot_name(fs, s, name, sizeof name);
        ftc_shard_view_t v;
        if (ftc_slot_open(name, true, &fs->own[s], &e) == 0 &&
            ftc_shard_open(&v, fs->own[s].base, fs->own[s].size,
                           FTC_SHARD_VERIFY | FTC_SHARD_ALLOW_TRAILING, &e) == 0 &&
            !strcmp(v.info.job_id, fs->wjob)) {
            fs->own_step[s] = v.info.step;
            fs->own_size[s] = v.size;
            if (v.info.step > fs->last_version) fs->last_version = v.info.step;
        }
    }
    for (int s = 0; s < 2; s++) {
        if (!fs->own_step[s]) continue;
        if (fs->own_step[s] == recorded) {
            fs->own_newest = s;
            break;
        }
        if (fs->own_newest < 0 || fs->own_step[s] > fs->own_step[fs->own_newest])
            fs->own_newest = s;
    }
    /* temporaries a killed predecessor left (fs_reap_tmp): those of this
     * process's pid too, nothing of it runs yet */
    fs_scan_t sc0 = {0};
    ftc_err_t e0 = {0};
    fs->reap_own = true;
    scan_dir(fs, &sc0, "", 0, &e0);
    fs->reap_own = false;
    scan_free(&sc0);
    /* files a previous supervisor left: push them once members are known */
    DIR *dd = opendir(fs->dir);
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                strcmp(de->d_name, FS_OPEN_MARK))
                fs->dirty = true;
        closedir(dd);
    }
    /* ... unless it died without ending: its ranks died with it (PDEATHSIG),
     * perhaps halfway through a file, which now looks newer than every
     * recorded copy. As after a rank's death: nothing is packed, and the
     * restore puts the recorded copies back. */
    char mark[sizeof fs->dir + 16];
    snprintf(mark, sizeof mark, "%s/" FS_OPEN_MARK, fs->dir);
    if (access(mark, F_OK) == 0) {
        fs->suspect = fs->crashed = true;
        snprintf(fs->crash_why, sizeof fs->crash_why,
                 "the previous supervisor of this node did not end cleanly (%s is left)", mark);
        FTC_WARN(FS_MOD, "%s: its ranks may have died mid-write: changes since the last "
                 "recorded version are not trusted; the next restore puts back the recorded "
                 "files", fs->crash_why);
    } else {
        int mfd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (mfd < 0) {
            ftc_err_errno(err, errno, "filestore: create %s", mark);
            goto fail;
        }
        close(mfd);
        fs->mark_mine = true;
    }
    fs_refresh_peers(fs);
    if (pthread_create(&fs->tid, NULL, fs_main, fs) != 0) {
        ftc_err_set(err, FTC_ENOMEM, "filestore: cannot start its thread");
        goto fail;
    }
    fs->started = true;
    FTC_INFO(FS_MOD, "node %u (%s) of job %s: %s, k=%d, provider %s", index, node_id, job, fs->dir,
             k, ftc_fabric_provider(fs->fab));
    return fs;
fail:
    ftc_filestore_destroy(fs);
    return NULL;
}

/* True while a watched rank has not exited (not waited for by anyone). */
static bool fs_ranks_alive(ftc_filestore_t *fs)
{
    for (int i = 0; i < fs->nwranks; i++) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)fs->wranks[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == 0)
            return true;
    }
    return false;
}

void ftc_filestore_destroy(ftc_filestore_t *fs)
{
    if (!fs) return;
    atomic_store(&fs->stop, true);
    bool clean = fs->mark_mine; /* a create that failed after making it */
    if (fs->started) {
        fs_wake(fs);
        pthread_join(fs->tid, NULL);
        /* the mark goes only when the directory holds nothing a rank that
         * died (or one still running, which may yet die mid-write) may have
         * half-written since the last version */
        fs_drain_events(fs, false);
        clean = !fs->suspect && !(fs->dirty && fs_ranks_check(fs) != 1) && !fs_ranks_alive(fs);
    }
    if (clean) {
        char mark[sizeof fs->dir + 16];
        snprintf(mark, sizeof mark, "%s/" FS_OPEN_MARK, fs->dir);
        unlink(mark);
    }
    ftc_filestore_poll(fs);
    ftc_repl_destroy(fs->repl);
    ftc_fabric_close(fs->fab);
    for (int s = 0; s < 2; s++)
        ftc_slot_close(&fs->own[s]);
    ftc_ctl_destroy(fs->ctl);
    if (fs->ino >= 0) close(fs->ino);
    if (fs->evfd >= 0) close(fs->evfd);
    free(fs->members);
    free(fs->req_members);
    busy_clear(fs);
    free(fs->busy);
    stamps_free(&fs->seen);
    stamps_free(&fs->gone);
    for (size_t i = 0; i < fs->nheld; i++)
        free(fs->held[i].name);
    free(fs->held);
    pthread_cond_destroy(&fs->cv);
    pthread_mutex_destroy(&fs->mu);
    free(fs);
}

const char *ftc_filestore_dir(const ftc_filestore_t *fs)
{
    return fs->dir;
}

int ftc_filestore_set_members(ftc_filestore_t *fs, uint64_t gen, const char (*members)[65], int n,
                              ftc_err_t *err)
{
    if (!fs || !members || n < 1 || n > FS_MAX_NODES)
        return ftc_err_set(err, FTC_EINVAL, "filestore: 1..%d members required", FS_MAX_NODES);
    for (int i = 0; i < n; i++)
        if (!memchr(members[i], 0, 65) || !id_ok(members[i], FTC_CTL_NODE_MAX))
            return ftc_err_set(err, FTC_EINVAL, "filestore: member %d is not a node id", i);
    char(*copy)[65] = malloc((size_t)n * sizeof *copy);
    if (!copy) return ftc_err_set(err, FTC_ENOMEM, "filestore: out of memory");
    memcpy(copy, members, (size_t)n * sizeof *copy);
    pthread_mutex_lock(&fs->mu);
    free(fs->req_members);
    fs->req_members = copy;
    fs->req_n = n;
    fs->req_gen = gen;
    fs->req_fresh = true;
    pthread_mutex_unlock(&fs->mu);
    fs_wake(fs);
    return 0;
}

int ftc_filestore_watch_ranks(ftc_filestore_t *fs, const pid_t *pids, int n, ftc_err_t *err)
{
    if (!fs || n < 0 || n > FS_MAX_RANKS || (n && !pids))
        return ftc_err_set(err, FTC_EINVAL, "filestore: 0..%d rank pids", FS_MAX_RANKS);
    pthread_mutex_lock(&fs->mu);
    if (n)
        memcpy(fs->wranks, pids, (size_t)n * sizeof *pids);
    fs->nwranks = n;
    fs->nclean = 0;
    fs->crashed = false;
    fs->crash_why[0] = 0;
    pthread_mutex_unlock(&fs->mu);
    fs_wake(fs);
    return 0;
}

void ftc_filestore_rank_exited(ftc_filestore_t *fs, pid_t pid, int status)
{
    if (!fs)
        return;
    pthread_mutex_lock(&fs->mu);
    bool watched = false;
    for (int i = 0; i < fs->nwranks && !watched; i++)
        watched = fs->wranks[i] == pid;
    if (watched && status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (fs->nclean < FS_MAX_RANKS)
            fs->clean[fs->nclean++] = pid;
    } else if (watched && !fs->crashed) {
        fs->crashed = true;
        if (status < 0)
            snprintf(fs->crash_why, sizeof fs->crash_why, "rank pid %d was stopped", (int)pid);
        else if (WIFSIGNALED(status))
            snprintf(fs->crash_why, sizeof fs->crash_why, "rank pid %d was killed by signal %d",
                     (int)pid, WTERMSIG(status));
        else
            snprintf(fs->crash_why, sizeof fs->crash_why, "rank pid %d exited with status %d",
                     (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    pthread_mutex_unlock(&fs->mu);
    fs_wake(fs);
}

void ftc_filestore_poll(ftc_filestore_t *fs)
{
    if (!fs) return;
    fs_logline_t lines[FS_LOG_RING];
    pthread_mutex_lock(&fs->mu);
    int n = fs->ring_n;
    uint64_t dropped = fs->ring_dropped;
    memcpy(lines, fs->ring, (size_t)n * sizeof *lines);
    fs->ring_n = 0;
    fs->ring_dropped = 0;
    pthread_mutex_unlock(&fs->mu);
    for (int i = 0; i < n; i++)
        if (lines[i].level >= 0) /* errors were logged when they happened */
            ftc_log(lines[i].level, FS_MOD, "%s", lines[i].text);
    if (dropped) FTC_WARN(FS_MOD, "%" PRIu64 " more line(s) not shown", dropped);
}

/* Waits for *ack >= no under mu, until deadline; true when reached. */
static bool fs_wait_ack(ftc_filestore_t *fs, const uint64_t *ack, uint64_t no, int timeout_ms)
{
    struct timespec until = ftc_cond_abstime(ftc_deadline_in_ms((uint64_t)timeout_ms));
    while (*ack < no)
        if (pthread_cond_timedwait(&fs->cv, &fs->mu, &until) == ETIMEDOUT) return *ack >= no;
    return true;
}

int ftc_filestore_flush(ftc_filestore_t *fs, int timeout_ms, ftc_err_t *err)
{
    if (!fs) return ftc_err_set(err, FTC_EINVAL, "filestore: NULL");
    pthread_mutex_lock(&fs->mu);
    if (timeout_ms <= 0) timeout_ms = fs->lim.push_timeout_ms + fs->lim.quiet_ms + 10000;
    uint64_t no = ++fs->flush_req;
    pthread_mutex_unlock(&fs->mu);
    fs_wake(fs);
    pthread_mutex_lock(&fs->mu);
    bool ok = fs_wait_ack(fs, &fs->flush_ack, no, timeout_ms);
    int rc = 0;
    if (!ok) {
        rc = ftc_err_set(err, FTC_ETIMEDOUT, "filestore: %s still not pushed after %d ms", fs->dir,
                         timeout_ms);
    } else if (fs->flush_rc) {
        rc = fs->flush_rc;
        if (err) *err = fs->flush_err;
        fs->flush_rc = 0;
        ftc_err_clear(&fs->flush_err);
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int ftc_filestore_restore(ftc_filestore_t *fs, uint64_t gen, const char (*members)[65], int n,
                          ftc_err_t *err)
{
    int rc = ftc_filestore_set_members(fs, gen, members, n, err);
    if (rc) return rc;
    pthread_mutex_lock(&fs->mu);
    uint64_t no = ++fs->restore_req;
    fs->restore_req_ns = ftc_now_ns();
    int timeout_ms = fs->lim.restore_timeout_ms + 15000; /* the thread ends it first */
    pthread_mutex_unlock(&fs->mu);
    fs_wake(fs);
    pthread_mutex_lock(&fs->mu);
    if (!fs_wait_ack(fs, &fs->restore_ack, no, timeout_ms)) {
        rc = ftc_err_set(err, FTC_ETIMEDOUT, "filestore: restore of %s not done after %d ms",
                         fs->dir, timeout_ms);
    } else {
        rc = fs->restore_rc;
        if (rc && err) *err = fs->restore_err;
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int ftc_filestore_set_limits(ftc_filestore_t *fs, const ftc_filestore_limits_t *l, ftc_err_t *err)
{
    /* at most a day each: the flush and restore waits add them up in an int */
    const int day = FS_LIMIT_MAX_MS;
    if (!fs || !l || l->struct_size != sizeof *l || l->version != 2 || l->max_bytes == 0 ||
        l->quiet_ms < 0 || l->quiet_ms > day || l->push_timeout_ms < 1 ||
        l->push_timeout_ms > day || l->restore_timeout_ms < 1 || l->restore_timeout_ms > day ||
        l->busy_max_ms < 0 || l->busy_max_ms > day)
        return ftc_err_set(err, FTC_EINVAL,
                           "filestore: limits need max_bytes > 0, quiet_ms and busy_max_ms in "
                           "0..%d and deadlines in 1..%d ms (start from "
                           "FTC_FILESTORE_LIMITS_INIT)",
                           day, day);
    pthread_mutex_lock(&fs->mu);
    fs->lim = *l;
    pthread_mutex_unlock(&fs->mu);
    return 0;
}

void ftc_filestore_stats(ftc_filestore_t *fs, ftc_filestore_stats_t *st)
{
    pthread_mutex_lock(&fs->mu);
    *st = fs->stats;
    pthread_mutex_unlock(&fs->mu);
}
