/*
 * coll_nccl_boot.c — the NCCL id rendezvous of trainer/coll_nccl.h, through
 * a shared directory or Redis. Needs no GPU and no NCCL: compiled in every
 * build, so its stale-generation, size and timeout paths are tested on CPU
 * machines.
 *
 * The id record (160 bytes): "FTCNCID1", generation (u64 LE), size (u32 LE),
 * 4 zero bytes, the 128-byte id, xxh3 of the 152 bytes before (u64 LE). In a
 * file it is raw; in Redis it is hex (ftc_redis_eval's arguments are C
 * strings).
 */
#include "trainer/coll_nccl.h"

#include "core/hash.h"
#include "core/le.h"
#include "detect/redis.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REC_BYTES 160
#define REC_MAGIC "FTCNCID1"
#define POLL_MS 5

static void rec_make(uint8_t *rec, uint64_t gen, int size, const uint8_t *id)
{
    memset(rec, 0, REC_BYTES);
    memcpy(rec, REC_MAGIC, 8);
    ftc_le_wr64(rec + 8, gen);
    ftc_le_wr32(rec + 16, (uint32_t)size);
    memcpy(rec + 24, id, FTC_COLL_NCCL_ID_BYTES);
    ftc_le_wr64(rec + 152, ftc_xxh3(rec, 152));
}

/* Checks a record against this rank's view; copies the id out. */
static int rec_check(const uint8_t *rec, size_t len, uint64_t gen, int size, const char *where,
                     uint8_t *id, ftc_err_t *err)
{
    if (len != REC_BYTES || memcmp(rec, REC_MAGIC, 8) != 0 ||
        ftc_le_rd64(rec + 152) != ftc_xxh3(rec, 152))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "nccl rendezvous: the id record in %s is corrupt (%zu bytes, bad magic "
                           "or checksum); remove it and restart the group",
                           where, len);
    uint64_t g = ftc_le_rd64(rec + 8);
    uint32_t n = ftc_le_rd32(rec + 16);
    if (g != gen)
        return ftc_err_set(err, FTC_ESTALE,
                           "nccl rendezvous: %s holds generation %" PRIu64
                           ", this rank is at %" PRIu64,
                           where, g, gen);
    if (n != (uint32_t)size)
        return ftc_err_set(err, FTC_EPROTO,
                           "nccl rendezvous: rank 0 published a group of %u ranks in %s, this rank "
                           "was told %d (ranks started with different sizes?)",
                           n, where, size);
    memcpy(id, rec + 24, FTC_COLL_NCCL_ID_BYTES);
    return 0;
}

/* "ranks 2, 5, 7" (at most 16 named) into buf. */
static void list_missing(const unsigned char *have, int size, char *buf, size_t cap)
{
    size_t o = 0;
    int named = 0, missing = 0;
    buf[0] = 0;
    for (int r = 0; r < size; r++) {
        if (have[r])
            continue;
        missing++;
        if (named < 16 && o < cap) {
            o += (size_t)snprintf(buf + o, cap - o, "%s%d", named ? ", " : "", r);
            named++;
        }
    }
    if (missing > named && o < cap)
        snprintf(buf + o, cap - o, ", ... (%d in all)", missing);
}

static int timed_out(const ftc_coll_nccl_boot_t *b, int rank, int size, int have_id,
                     const unsigned char *have, const char *where, ftc_err_t *err)
{
    int missing = 0;
    for (int r = 0; r < size; r++)
        missing += !have[r];
    char list[256], ranks[320] = "";
    list_missing(have, size, list, sizeof list);
    if (missing)
        snprintf(ranks, sizeof ranks, "%d of %d ranks (ranks %s)", missing, size, list);
    return ftc_err_set(err, FTC_ETIMEDOUT,
                       "nccl rendezvous in %s, generation %" PRIu64
                       ", rank %d/%d: deadline passed, "
                       "still missing: %s%s%s (dead, slow, or started with another generation or "
                       "carrier?)",
                       where, b->generation, rank, size, have_id ? "" : "the id from rank 0",
                       !have_id && missing ? " and " : "", ranks);
}

static int cancelled(const ftc_coll_nccl_boot_t *b)
{
    return b->abort && atomic_load(b->abort);
}

/* ---- directory carrier ------------------------------------------------- */

static int write_atomic(const char *dir, const char *name, const void *p, size_t n, ftc_err_t *err)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
    return ftc__coll_publish_file(path, tmp, p, n, "nccl rendezvous", err);
}

/* The newest generation with an id file in dir (0 and *found = 0 if none). */
static int newest_gen(const char *dir, uint64_t *newest, int *found, ftc_err_t *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return ftc_err_errno(err, errno, "nccl rendezvous: open directory %s", dir);
    *newest = 0, *found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long g;
        char tail[8];
        if (sscanf(e->d_name, "nccl.%llu.%3s", &g, tail) == 2 && !strcmp(tail, "id")) {
            if (!*found || g > *newest)
                *newest = g;
            *found = 1;
        }
    }
    closedir(d);
    return 0;
}

static int check_stale_dir(const ftc_coll_nccl_boot_t *b, ftc_err_t *err)
{
    uint64_t newest = 0;
    int found = 0;
    int rc = newest_gen(b->dir, &newest, &found, err);
    if (rc < 0)
        return rc;
    if (found && newest > b->generation)
        return ftc_err_set(err, FTC_ESTALE,
                           "nccl rendezvous in %s: generation %" PRIu64
                           " is stale (generation %" PRIu64
                           " was already published); rejoin with the current generation",
                           b->dir, b->generation, newest);
    return 0;
}

static int rdv_dir(const ftc_coll_nccl_boot_t *b, int rank, int size, uint8_t *id,
                   ftc_deadline_t dl, ftc_err_t *err)
{
    char name[96], path[4096];
    int rc = check_stale_dir(b, err);
    if (rc < 0)
        return rc;
    if (rank == 0) {
        uint8_t rec[REC_BYTES];
        rec_make(rec, b->generation, size, id);
        snprintf(name, sizeof name, "nccl.%" PRIu64 ".id", b->generation);
        if ((rc = write_atomic(b->dir, name, rec, sizeof rec, err)) < 0)
            return rc;
    }
    char pid[32];
    int pl = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    snprintf(name, sizeof name, "nccl.%" PRIu64 ".rank%d", b->generation, rank);
    if ((rc = write_atomic(b->dir, name, pid, (size_t)pl, err)) < 0)
        return rc;
    unsigned char *have = calloc((size_t)size, 1);
    if (!have)
        return ftc_err_set(err, FTC_ENOMEM, "nccl rendezvous: out of memory");
    int have_id = rank == 0;
    for (unsigned it = 0;; it++) {
        if (!have_id) {
            snprintf(path, sizeof path, "%s/nccl.%" PRIu64 ".id", b->dir, b->generation);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                uint8_t rec[REC_BYTES + 1];
                ssize_t got = 0, r;
                while ((r = read(fd, rec + got, sizeof rec - (size_t)got)) > 0 ||
                       (r < 0 && errno == EINTR))
                    got += r > 0 ? r : 0;
                close(fd);
                if ((rc = rec_check(rec, (size_t)got, b->generation, size, path, id, err)) < 0)
                    break;
                have_id = 1;
            } else if (errno != ENOENT) {
                rc = ftc_err_errno(err, errno, "nccl rendezvous: open %s", path);
                break;
            }
        }
        int all = 1;
        for (int r = 0; r < size; r++) {
            if (have[r])
                continue;
            snprintf(path, sizeof path, "%s/nccl.%" PRIu64 ".rank%d", b->dir, b->generation, r);
            if (access(path, F_OK) == 0)
                have[r] = 1;
            else
                all = 0;
        }
        if (have_id && all) {
            rc = 0;
            break;
        }
        if (it % 20 == 19 && (rc = check_stale_dir(b, err)) < 0)
            break;
        if (cancelled(b)) {
            rc = ftc_err_set(err, FTC_ECANCELED, "nccl rendezvous in %s, rank %d/%d: aborted",
                             b->dir, rank, size);
            break;
        }
        if (ftc_deadline_expired(dl)) {
            rc = timed_out(b, rank, size, have_id, have, b->dir, err);
            break;
        }
        ftc_sleep_ms(POLL_MS);
    }
    free(have);
    return rc;
}

/* ---- Redis carrier ----------------------------------------------------- */

/* KEYS: gen, id. ARGV: generation, record (hex), ttl ms. Returns -1 when
 * published, else the newer generation already there (nothing written). */
static const char LUA_PUBLISH[] =
    "local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')\n"
    "local g = tonumber(ARGV[1])\n"
    "if cur > g then return cur end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "return -1\n";

static int redis_fail(const ftc_coll_nccl_boot_t *b, int rc, const char *what, ftc_err_t *err)
{
    return ftc_err_set(err, rc, "nccl rendezvous (redis, job %s, generation %" PRIu64 "): %s: %s",
                       b->job, b->generation, what, ftc_redis_errstr(b->redis));
}

static int rdv_redis(const ftc_coll_nccl_boot_t *b, int rank, int size, uint8_t *id,
                     ftc_deadline_t dl, ftc_err_t *err)
{
    char kgen[256], kid[256], kranks[256], where[300], gen[32], ttl[32], field[16], pid[32];
    snprintf(kgen, sizeof kgen, "ftc:{%s}:nccl:gen", b->job);
    snprintf(kid, sizeof kid, "ftc:{%s}:nccl:%" PRIu64 ":id", b->job, b->generation);
    snprintf(kranks, sizeof kranks, "ftc:{%s}:nccl:%" PRIu64 ":ranks", b->job, b->generation);
    snprintf(where, sizeof where, "redis %s", kid);
    snprintf(gen, sizeof gen, "%" PRIu64, b->generation);
    snprintf(ttl, sizeof ttl, "%d", b->ttl_ms > 0 ? b->ttl_ms : 600000);
    snprintf(field, sizeof field, "%d", rank);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    ftc_redis_reply_t *rep = NULL;
    int rc;
    long long v;
    if (rank == 0) {
        uint8_t rec[REC_BYTES];
        char hex[2 * REC_BYTES + 1];
        rec_make(rec, b->generation, size, id);
        for (int i = 0; i < REC_BYTES; i++)
            snprintf(hex + 2 * i, 3, "%02x", rec[i]);
        ftc_redis_script_t s;
        ftc_redis_script_init(&s, "nccl_id_publish", LUA_PUBLISH);
        const char *keys[2] = {kgen, kid}, *args[3] = {gen, hex, ttl};
        if ((rc = ftc_redis_eval(b->redis, &s, 2, keys, 3, args, &rep)) < 0)
            return redis_fail(b, rc, "publish the id", err);
        rc = ftc_redis_want_int(rep, "nccl_id_publish", &v, err);
        ftc_redis_reply_free(rep);
        if (rc < 0)
            return rc;
        if (v >= 0)
            return ftc_err_set(err, FTC_ESTALE,
                               "nccl rendezvous (redis, job %s): generation %" PRIu64
                               " is stale (generation %lld was already published); rejoin with the "
                               "current generation",
                               b->job, b->generation, v);
    }
    if ((rc = ftc_redis_cmdv(b->redis, true, NULL, "HSET", kranks, field, pid, NULL)) < 0 ||
        (rc = ftc_redis_cmdv(b->redis, true, NULL, "PEXPIRE", kranks, ttl, NULL)) < 0)
        return redis_fail(b, rc, "announce this rank", err);
    unsigned char *have = calloc((size_t)size, 1);
    if (!have)
        return ftc_err_set(err, FTC_ENOMEM, "nccl rendezvous: out of memory");
    int have_id = rank == 0;
    for (;;) {
        const char *a_gen[] = {"GET", kgen}, *a_id[] = {"GET", kid}, *a_ranks[] = {"HKEYS", kranks};
        const char **argvs[3] = {a_gen, a_id, a_ranks};
        int argcs[3] = {2, 2, 2};
        ftc_redis_reply_t *reps[3] = {NULL, NULL, NULL};
        rc = ftc_redis_pipeline(b->redis, true, 3, argcs, argvs, NULL, reps);
        if (rc < 0) {
            for (int i = 0; i < 3; i++)
                ftc_redis_reply_free(reps[i]);
            rc = redis_fail(b, rc, "poll", err);
            break;
        }
        const char *s;
        size_t len;
        ftc_err_t we = {0}; /* nil replies are expected: keep err clean */
        /* a newer generation published: refuse at once (I4) */
        int grc = ftc_redis_want_str(reps[0], "GET nccl:gen", &s, &len, &we);
        if (grc == 0) {
            char tmp[32];
            size_t n = len < sizeof tmp - 1 ? len : sizeof tmp - 1;
            memcpy(tmp, s, n);
            tmp[n] = 0;
            unsigned long long g = strtoull(tmp, NULL, 10);
            if (g > b->generation)
                rc = ftc_err_set(err, FTC_ESTALE,
                                 "nccl rendezvous (redis, job %s): generation %" PRIu64
                                 " is stale (generation %llu was already published); rejoin "
                                 "with the current generation",
                                 b->job, b->generation, g);
        } else if (grc != FTC_ENOENT) {
            rc = ftc_err_set(err, grc, "nccl rendezvous: %s", we.msg);
        }
        if (!rc && !have_id) {
            int irc = ftc_redis_want_str(reps[1], "GET nccl id", &s, &len, &we);
            if (irc == 0) {
                uint8_t rec[REC_BYTES];
                size_t n = len / 2;
                if (len != 2 * REC_BYTES)
                    n = 0;
                for (size_t i = 0; i < n; i++) {
                    unsigned x;
                    if (sscanf(s + 2 * i, "%2x", &x) != 1) {
                        n = 0;
                        break;
                    }
                    rec[i] = (uint8_t)x;
                }
                rc = rec_check(rec, n, b->generation, size, where, id, err);
                have_id = rc == 0;
            } else if (irc != FTC_ENOENT) {
                rc = ftc_err_set(err, irc, "nccl rendezvous: %s", we.msg);
            }
        }
        if (!rc) {
            ftc_redis_reply_t **el;
            size_t cnt;
            rc = ftc_redis_want_array(reps[2], "HKEYS nccl ranks", -1, &el, &cnt, err);
            for (size_t i = 0; !rc && i < cnt; i++) {
                if (ftc_redis_want_str(el[i], "HKEYS nccl ranks", &s, &len, err) < 0)
                    continue;
                char tmp[16];
                size_t n = len < sizeof tmp - 1 ? len : sizeof tmp - 1;
                memcpy(tmp, s, n);
                tmp[n] = 0;
                long r = strtol(tmp, NULL, 10);
                if (r >= 0 && r < size)
                    have[r] = 1;
            }
        }
        for (int i = 0; i < 3; i++)
            ftc_redis_reply_free(reps[i]);
        if (rc < 0)
            break;
        int all = 1;
        for (int r = 0; r < size; r++)
            all &= have[r];
        if (have_id && all)
            break;
        if (cancelled(b)) {
            rc = ftc_err_set(err, FTC_ECANCELED, "nccl rendezvous in %s, rank %d/%d: aborted",
                             where, rank, size);
            break;
        }
        if (ftc_deadline_expired(dl)) {
            rc = timed_out(b, rank, size, have_id, have, where, err);
            break;
        }
        ftc_sleep_ms(POLL_MS);
    }
    free(have);
    return rc;
}

int ftc_coll_nccl_rendezvous(const ftc_coll_nccl_boot_t *b, int rank, int size,
                             uint8_t id[FTC_COLL_NCCL_ID_BYTES], ftc_deadline_t dl, ftc_err_t *err)
{
    if (!b || b->struct_size < sizeof *b || size < 1 || rank < 0 || rank >= size || !id)
        return ftc_err_set(
            err, FTC_EINVAL,
            "nccl rendezvous: bad arguments (boot %p of %u bytes, rank %d, size %d): "
            "initialise the boot options with FTC_COLL_NCCL_BOOT_INIT",
            (const void *)b, b ? b->struct_size : 0, rank, size);
    if (!b->dir == !b->redis)
        return ftc_err_set(err, FTC_EINVAL,
                           "nccl rendezvous: set exactly one of boot.dir and boot.redis");
    if (b->redis && (!b->job || !*b->job || strlen(b->job) > 128))
        return ftc_err_set(err, FTC_EINVAL,
                           "nccl rendezvous: the Redis carrier needs boot.job (1-128 characters)");
    return b->dir ? rdv_dir(b, rank, size, id, dl, err) : rdv_redis(b, rank, size, id, dl, err);
}
