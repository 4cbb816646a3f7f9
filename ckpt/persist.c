/*
 * persist.c — the persist tier (persist.h): version directories of .ftcz
 * shards with a MANIFEST.json and a COMMITTED marker, written crash-safely
 * through core/fsio.h, XOR deltas against the handle's previous version,
 * retention, and verified loads that fall back to older versions.
 * docs/persist-format.md describes the layout, the write order and why it is
 * crash-safe.
 *
 * Everything read back from the directory (names, markers, manifests, shard
 * files) is treated as hostile: it is validated before it is used.
 */
#include "ckpt/persist.h"

#include "ckpt/persist_internal.h"
#include "ckpt/zshard.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define FTC__MANIFEST "MANIFEST.json"
#define FTC__MARKER "COMMITTED"
#define FTC__MANIFEST_FORMAT "ftc-persist-manifest"
#define FTC__MANIFEST_MAX (64u << 20) /* bytes of MANIFEST.json */
#define FTC__MARKER_MAX 4096u
#define FTC__MAX_SHARDS 65536
#define FTC__MAX_DEGREE (1u << 24)
#define FTC__MAX_CHAIN 1000000       /* delta links followed before giving up */
#define FTC__NUM_MAX (1ull << 62)    /* sizes in a manifest */
#define FTC__STEP_MAX ((uint64_t)INT64_MAX)
#define FTC__TRIED_MAX 2048
#define FTC__RESCANS 3 /* ftc_persist_load(NEWEST): scans again after a version vanished */

/* ---- names -------------------------------------------------------------------- */

static void ftc__vname(char *buf, size_t n, uint64_t step)
{
    snprintf(buf, n, "v%020llu", (unsigned long long)step);
}

/* "v" + exactly 20 digits; 0 and the step, or -1. */
static int ftc__vparse(const char *name, uint64_t *step)
{
    if (name[0] != 'v' || strlen(name) != 21)
        return -1;
    uint64_t v = 0;
    for (int i = 1; i <= 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *step = v;
    return 0;
}

static void ftc__shard_name(char *buf, size_t n, uint32_t d, uint32_t t, uint32_t pp)
{
    snprintf(buf, n, "shard-d%u-t%u-p%u.ftcz", d, t, pp);
}

static bool ftc__is_temp(const char *name)
{
    return name[0] == '.' && strstr(name, ".tmp.") != NULL;
}

/* A temp file "....tmp.<pid>" (ftc_fs_write_file_atomic) of a writer that is
 * still alive: another process's persist tier at work in the directory (a
 * trainer reading a peer rank's directory, an agent restarted beside the old
 * one), or this process's. Its file must stay until that writer renames it. */
static bool ftc__temp_live(const char *name)
{
    const char *t = NULL;
    for (const char *q = strstr(name, ".tmp."); q; q = strstr(q + 1, ".tmp."))
        t = q;
    if (!t)
        return false;
    char *end;
    errno = 0;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || *end || errno || pid <= 0 || pid > INT_MAX)
        return false;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* ---- the manifest -------------------------------------------------------------- */

typedef struct ftc__mshard {
    char file[64];
    uint32_t dp, tp, pp, dp_rank, tp_rank, pp_rank;
    uint64_t raw_size, raw_xxh3, file_size, file_xxh3;
    uint64_t base_step; /* UINT64_MAX = full */
    uint64_t base_raw_xxh3;
} ftc__mshard_t;

typedef struct ftc__manifest {
    char job[FTC_SHARD_JOB_MAX + 1];
    uint64_t step, generation, created_ms;
    int n;
    ftc__mshard_t *s;
} ftc__manifest_t;

static void ftc__manifest_free(ftc__manifest_t *m)
{
    free(m->s);
    m->s = NULL;
    m->n = 0;
}

static int ftc__j_u64(json_t *obj, const char *key, uint64_t max, uint64_t *out, const char *where,
                      ftc_err_t *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: key \"%s\" is missing", where, key);
    if (!json_is_integer(v))
        return ftc_err_set(err, FTC_ECORRUPT, "%s: \"%s\" must be an integer", where, key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: \"%s\" is %lld, outside 0..%llu", where, key,
                           (long long)x, (unsigned long long)max);
    *out = (uint64_t)x;
    return 0;
}

static int ftc__j_hex(json_t *obj, const char *key, uint64_t *out, const char *where,
                      ftc_err_t *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: key \"%s\" is missing", where, key);
    if (!json_is_string(v) || ftc_hash_parse_hex(json_string_value(v), out) != 0)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: \"%s\" must be 16 hex digits", where, key);
    return 0;
}

static int ftc__j_u32(json_t *obj, const char *key, uint32_t max, uint32_t *out, const char *where,
                      ftc_err_t *err)
{
    uint64_t v;
    int rc = ftc__j_u64(obj, key, max, &v, where, err);
    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

static int ftc__manifest_shard(json_t *o, int i, uint64_t step, ftc__mshard_t *s, ftc_err_t *err)
{
    char where[64];
    snprintf(where, sizeof where, "manifest shards[%d]", i);
    if (!json_is_object(o))
        return ftc_err_set(err, FTC_ECORRUPT, "%s: must be an object", where);
    int rc;
    memset(s, 0, sizeof *s);
    if ((rc = ftc__j_u32(o, "dp", FTC__MAX_DEGREE, &s->dp, where, err)) ||
        (rc = ftc__j_u32(o, "tp", FTC__MAX_DEGREE, &s->tp, where, err)) ||
        (rc = ftc__j_u32(o, "pp", FTC__MAX_DEGREE, &s->pp, where, err)) ||
        (rc = ftc__j_u32(o, "dp_rank", FTC__MAX_DEGREE, &s->dp_rank, where, err)) ||
        (rc = ftc__j_u32(o, "tp_rank", FTC__MAX_DEGREE, &s->tp_rank, where, err)) ||
        (rc = ftc__j_u32(o, "pp_rank", FTC__MAX_DEGREE, &s->pp_rank, where, err)) ||
        (rc = ftc__j_u64(o, "raw_size", FTC__NUM_MAX, &s->raw_size, where, err)) ||
        (rc = ftc__j_hex(o, "raw_xxh3", &s->raw_xxh3, where, err)) ||
        (rc = ftc__j_u64(o, "file_size", FTC__NUM_MAX, &s->file_size, where, err)) ||
        (rc = ftc__j_hex(o, "file_xxh3", &s->file_xxh3, where, err)))
        return rc;
    if (!s->dp || !s->tp || !s->pp || s->dp_rank >= s->dp || s->tp_rank >= s->tp ||
        s->pp_rank >= s->pp)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: coordinates (%u,%u,%u) do not fit the degrees (%u,%u,%u)", where,
                           s->dp_rank, s->tp_rank, s->pp_rank, s->dp, s->tp, s->pp);
    if (s->raw_size == 0 || s->file_size == 0)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: raw_size and file_size must be positive",
                           where);
    json_t *f = json_object_get(o, "file");
    char want[64];
    ftc__shard_name(want, sizeof want, s->dp_rank, s->tp_rank, s->pp_rank);
    if (!f || !json_is_string(f) || strcmp(json_string_value(f), want) != 0)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: \"file\" must be the string \"%s\" (the name its coordinates "
                           "give)",
                           where, want);
    snprintf(s->file, sizeof s->file, "%s", want);
    json_t *b = json_object_get(o, "base_step");
    if (!b || json_is_null(b)) {
        s->base_step = UINT64_MAX;
        if (json_object_get(o, "base_raw_xxh3"))
            return ftc_err_set(err, FTC_ECORRUPT,
                               "%s: \"base_raw_xxh3\" given for a full (non-delta) shard", where);
    } else {
        if ((rc = ftc__j_u64(o, "base_step", FTC__STEP_MAX, &s->base_step, where, err)))
            return rc;
        if (s->base_step >= step)
            return ftc_err_set(err, FTC_ECORRUPT, "%s: base_step %llu is not before step %llu",
                               where, (unsigned long long)s->base_step, (unsigned long long)step);
        if ((rc = ftc__j_hex(o, "base_raw_xxh3", &s->base_raw_xxh3, where, err)))
            return rc;
    }
    return 0;
}

typedef struct ftc__coord {
    uint32_t c[3]; /* dp_rank, tp_rank, pp_rank */
} ftc__coord_t;

static int ftc__coord_cmp(const void *a, const void *b)
{
    const ftc__coord_t *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x->c[i] != y->c[i])
            return x->c[i] < y->c[i] ? -1 : 1;
    return 0;
}

static int ftc__manifest_parse(const char *text, size_t len, ftc__manifest_t *m, ftc_err_t *err)
{
    memset(m, 0, sizeof *m);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ftc_err_set(err, FTC_ECORRUPT, "manifest: JSON error at line %d column %d: %s",
                           je.line, je.column, je.text);
    int rc;
    if (!json_is_object(root)) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "manifest: top level must be an object");
        goto undo_root;
    }
    json_t *fmt = json_object_get(root, "format");
    if (!fmt || !json_is_string(fmt) || strcmp(json_string_value(fmt), FTC__MANIFEST_FORMAT)) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "manifest: \"format\" must be \"%s\"",
                         FTC__MANIFEST_FORMAT);
        goto undo_root;
    }
    uint64_t version;
    FTC_CHECK_GOTO(ftc__j_u64(root, "version", UINT32_MAX, &version, "manifest", err), rc,
                   undo_root);
    if (version != 1) {
        rc = ftc_err_set(err, FTC_EVERSION, "manifest: \"version\" is %llu; this build reads 1",
                         (unsigned long long)version);
        goto undo_root;
    }
    json_t *job = json_object_get(root, "job");
    if (!job || !json_is_string(job) || json_string_length(job) > FTC_SHARD_JOB_MAX ||
        strlen(json_string_value(job)) != json_string_length(job)) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "manifest: \"job\" must be a string of at most %d "
                         "bytes", FTC_SHARD_JOB_MAX);
        goto undo_root;
    }
    snprintf(m->job, sizeof m->job, "%s", json_string_value(job));
    FTC_CHECK_GOTO(ftc__j_u64(root, "step", FTC__STEP_MAX, &m->step, "manifest", err), rc,
                   undo_root);
    FTC_CHECK_GOTO(ftc__j_u64(root, "generation", FTC__STEP_MAX, &m->generation, "manifest", err),
                   rc, undo_root);
    FTC_CHECK_GOTO(ftc__j_u64(root, "created_ms", FTC__STEP_MAX, &m->created_ms, "manifest", err),
                   rc, undo_root);
    json_t *arr = json_object_get(root, "shards");
    if (!arr || !json_is_array(arr) || json_array_size(arr) < 1 ||
        json_array_size(arr) > FTC__MAX_SHARDS) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "manifest: \"shards\" must be an array of 1..%d "
                         "entries", FTC__MAX_SHARDS);
        goto undo_root;
    }
    m->n = (int)json_array_size(arr);
    m->s = calloc((size_t)m->n, sizeof *m->s);
    if (!m->s) {
        rc = ftc_err_set(err, FTC_ENOMEM, "manifest: out of memory");
        goto undo_root;
    }
    for (int i = 0; i < m->n; i++)
        FTC_CHECK_GOTO(ftc__manifest_shard(json_array_get(arr, (size_t)i), i, m->step, &m->s[i],
                                           err),
                       rc, undo_shards);
    /* coordinates unique: sort a copy of them (a hostile file may list many) */
    ftc__coord_t *keys = malloc((size_t)m->n * sizeof *keys);
    if (!keys) {
        rc = ftc_err_set(err, FTC_ENOMEM, "manifest: out of memory");
        goto undo_shards;
    }
    for (int i = 0; i < m->n; i++)
        keys[i] = (ftc__coord_t){{m->s[i].dp_rank, m->s[i].tp_rank, m->s[i].pp_rank}};
    qsort(keys, (size_t)m->n, sizeof *keys, ftc__coord_cmp);
    for (int i = 1; i < m->n; i++)
        if (!ftc__coord_cmp(&keys[i], &keys[i - 1])) {
            free(keys);
            rc = ftc_err_set(err, FTC_ECORRUPT, "manifest: two shards have the same coordinates");
            goto undo_shards;
        }
    free(keys);
    json_decref(root);
    return 0;
undo_shards:
    ftc__manifest_free(m);
undo_root:
    json_decref(root);
    return rc;
}

int ftc__persist_manifest_check(const char *json, size_t len, ftc_err_t *err)
{
    ftc__manifest_t m;
    int rc = ftc__manifest_parse(json, len, &m, err);
    if (rc == 0)
        ftc__manifest_free(&m);
    return rc;
}

/* Serialises m; *out is malloc'd text (caller frees). */
static int ftc__manifest_dump(const ftc__manifest_t *m, char **out, ftc_err_t *err)
{
    json_t *root = json_object();
    json_t *arr = json_array();
    char hx[17];
    if (!root || !arr)
        goto nomem;
    json_object_set_new(root, "format", json_string(FTC__MANIFEST_FORMAT));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "job", json_string(m->job));
    json_object_set_new(root, "step", json_integer((json_int_t)m->step));
    json_object_set_new(root, "generation", json_integer((json_int_t)m->generation));
    json_object_set_new(root, "created_ms", json_integer((json_int_t)m->created_ms));
    for (int i = 0; i < m->n; i++) {
        const ftc__mshard_t *s = &m->s[i];
        json_t *o = json_object();
        if (!o || json_array_append_new(arr, o))
            goto nomem;
        json_object_set_new(o, "file", json_string(s->file));
        json_object_set_new(o, "dp", json_integer(s->dp));
        json_object_set_new(o, "tp", json_integer(s->tp));
        json_object_set_new(o, "pp", json_integer(s->pp));
        json_object_set_new(o, "dp_rank", json_integer(s->dp_rank));
        json_object_set_new(o, "tp_rank", json_integer(s->tp_rank));
        json_object_set_new(o, "pp_rank", json_integer(s->pp_rank));
        json_object_set_new(o, "raw_size", json_integer((json_int_t)s->raw_size));
        ftc_hash_hex(s->raw_xxh3, hx);
        json_object_set_new(o, "raw_xxh3", json_string(hx));
        json_object_set_new(o, "file_size", json_integer((json_int_t)s->file_size));
        ftc_hash_hex(s->file_xxh3, hx);
        json_object_set_new(o, "file_xxh3", json_string(hx));
        if (s->base_step == UINT64_MAX) {
            json_object_set_new(o, "base_step", json_null());
        } else {
            json_object_set_new(o, "base_step", json_integer((json_int_t)s->base_step));
            ftc_hash_hex(s->base_raw_xxh3, hx);
            json_object_set_new(o, "base_raw_xxh3", json_string(hx));
        }
    }
    if (json_object_set_new(root, "shards", arr)) {
        arr = NULL;
        goto nomem;
    }
    arr = NULL;
    *out = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (!*out)
        return ftc_err_set(err, FTC_ENOMEM, "manifest: out of memory");
    return 0;
nomem:
    json_decref(arr);
    json_decref(root);
    return ftc_err_set(err, FTC_ENOMEM, "manifest: out of memory");
}

/* The COMMITTED text for a manifest: it names the step and the manifest's
 * xxh3, so a marker cannot vouch for another manifest. */
static void ftc__marker_text(char *buf, size_t n, uint64_t step, uint64_t manifest_xxh3)
{
    char hx[17];
    ftc_hash_hex(manifest_xxh3, hx);
    snprintf(buf, n, "ftc-committed 1\nstep %llu\nmanifest_xxh3 %s\n", (unsigned long long)step,
             hx);
}

/* ---- the handle ------------------------------------------------------------------ */

typedef struct ftc__prev {
    uint32_t dp_rank, tp_rank, pp_rank;
    uint8_t *raw;
    uint64_t size;
} ftc__prev_t;

struct ftc_persist {
    char *dir;
    ftc_persist_options_t opts;
    ftc_err_t err;              /* last error */
    ftc_persist_stats_t stats;  /* of the last successful write */
    ftc__prev_t *prev;          /* raw shards of the last version written (for deltas) */
    int n_prev;
    uint64_t prev_step;
    int chain; /* delta versions written since the last full one */
    bool reader; /* ftc_persist_open_reader: nothing is written or removed */
};

void ftc_persist_options_from_config(ftc_persist_options_t *opts, const ftc_config_t *cfg)
{
    opts->level = (int)ftc_config_int(cfg, FTC_CFG_PERSIST_LEVEL);
    opts->threads = (int)ftc_config_int(cfg, FTC_CFG_PERSIST_THREADS);
    opts->chunk_bytes = (uint64_t)ftc_config_int(cfg, FTC_CFG_PERSIST_CHUNK);
    const char *f = ftc_config_str(cfg, FTC_CFG_PERSIST_SHUFFLE); /* none, byte or bit */
    opts->shuffle = !strcmp(f, "bit")    ? FTC_ZSHARD_FILTER_BIT
                    : !strcmp(f, "byte") ? FTC_ZSHARD_FILTER_BYTE
                                         : FTC_ZSHARD_FILTER_NONE;
    opts->delta = ftc_config_bool(cfg, FTC_CFG_PERSIST_DELTA);
    opts->full_every = (int)ftc_config_int(cfg, FTC_CFG_PERSIST_FULL_EVERY);
    opts->keep = (int)ftc_config_int(cfg, FTC_CFG_PERSIST_KEEP);
}

static void ftc__prev_clear(ftc_persist_t *p)
{
    for (int i = 0; i < p->n_prev; i++)
        free(p->prev[i].raw);
    free(p->prev);
    p->prev = NULL;
    p->n_prev = 0;
}

const char *ftc_persist_errstr(const ftc_persist_t *p)
{
    return p ? ftc_err_str(&p->err) : "no persist handle";
}

void ftc_persist_last_stats(const ftc_persist_t *p, ftc_persist_stats_t *st)
{
    *st = p->stats;
}

/* Removes stale temp files (".NAME.tmp.PID") from one directory. */
static void ftc__clean_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[PATH_MAX];
    while ((de = readdir(d))) {
        if (!ftc__is_temp(de->d_name) || ftc__temp_live(de->d_name))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0)
            FTC_DEBUG("persist", "removed stale temp file %s", path);
    }
    closedir(d);
}

/* Every version directory, newest first. *steps is malloc'd. A name that
 * is there but not a directory (a stray file; stat follows a link, so a
 * version linked in counts, and a dangling link stays listed, to be removed
 * as the link) is no version: reading a COMMITTED inside it fails with
 * ENOTDIR, which says "cannot be read now", and retention would stop for
 * good. */
static int ftc__scan(const ftc_persist_t *p, uint64_t **steps, int *n, ftc_err_t *err)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(p->dir);
    if (!d)
        return ftc_err_errno(err, errno, "open persist directory %s", p->dir);
    uint64_t *v = NULL;
    int cnt = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t s;
        if (ftc__vparse(de->d_name, &s) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, 0) == 0 && !S_ISDIR(st.st_mode)) {
            FTC_DEBUG("persist", "%s/%s is not a directory: not a version", p->dir, de->d_name);
            continue;
        }
        if (cnt == cap) {
            int nc = cap ? cap * 2 : 16;
            uint64_t *nv = realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = ftc_err_set(err, FTC_ENOMEM, "listing %s: out of memory", p->dir);
                goto undo_list;
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = s;
    }
    closedir(d);
    /* newest first (insertion sort: directories are few) */
    for (int i = 1; i < cnt; i++) {
        uint64_t x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] < x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    *steps = v;
    *n = cnt;
    return 0;
undo_list:
    closedir(d);
    free(v);
    return rc;
}

static bool ftc__dir_arg_ok(const char *dir, ftc_err_t *err)
{
    if (!dir || !*dir || strlen(dir) > PATH_MAX - 128) {
        ftc_err_set(err, FTC_EINVAL, "persist: directory path missing or too long");
        return false;
    }
    return true;
}

static ftc_persist_t *ftc__persist_new(const char *dir, const ftc_persist_options_t *opts,
                                       ftc_err_t *err)
{
    ftc_persist_t *p = calloc(1, sizeof *p);
    if (!p || !(p->dir = strdup(dir))) {
        free(p);
        ftc_err_set(err, FTC_ENOMEM, "persist: out of memory");
        return NULL;
    }
    p->opts = *opts;
    return p;
}

/* The parent directory of path ("." or "/" at the top) into out. */
static void ftc__parent(char *out, size_t n, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path), path);
}

/* mkdir -p of dir, durably: the entry of every directory made is fsync'd
 * in its parent (a version's COMMITTED is only durable once every name on
 * its path is: without this, a power cut soon after the first versions of a
 * new directory could lose the whole directory). */
static int ftc__mkdirs_durable(const char *dir, ftc_fault_t *f, ftc_err_t *err)
{
    char path[PATH_MAX], top[PATH_MAX], up[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (size_t l = strlen(path); l > 1 && path[l - 1] == '/'; l--)
        path[l - 1] = '\0';
    struct stat st;
    bool made = stat(path, &st) != 0;
    /* the shallowest missing directory */
    snprintf(top, sizeof top, "%s", path);
    while (made) {
        ftc__parent(up, sizeof up, top);
        if (!strcmp(up, top) || stat(up, &st) == 0)
            break;
        snprintf(top, sizeof top, "%s", up);
    }
    int rc = ftc_fs_mkdirs(path, err);
    if (rc < 0 || !made)
        return rc < 0 ? rc : 0;
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    for (;;) {
        ftc__parent(up, sizeof up, cur);
        if ((rc = ftc_fs_fsync_dir(up, f, err)) < 0)
            return rc;
        if (!strcmp(cur, top) || !strcmp(up, cur))
            return 0;
        snprintf(cur, sizeof cur, "%s", up);
    }
}

ftc_persist_t *ftc_persist_open(const char *dir, const ftc_persist_options_t *opts, ftc_err_t *err)
{
    ftc_persist_options_t def = FTC_PERSIST_OPTIONS_INIT;
    if (!opts)
        opts = &def;
    if (!ftc__dir_arg_ok(dir, err))
        return NULL;
    if (opts->struct_size != sizeof(ftc_persist_options_t) || opts->version != 1) {
        ftc_err_set(err, FTC_EINVAL,
                    "persist options: struct_size %u / version %u; use FTC_PERSIST_OPTIONS_INIT",
                    opts->struct_size, opts->version);
        return NULL;
    }
    if (opts->level < ZSTD_minCLevel() || opts->level > ZSTD_maxCLevel() || opts->threads < 0 ||
        opts->chunk_bytes < FTC_ZSHARD_MIN_CHUNK || opts->chunk_bytes > FTC_ZSHARD_MAX_CHUNK ||
        opts->full_every < 1 || opts->keep < 1 || opts->shuffle < FTC_ZSHARD_FILTER_NONE ||
        opts->shuffle > FTC_ZSHARD_FILTER_BIT) {
        ftc_err_set(err, FTC_EINVAL,
                    "persist options out of range: level %d (%d..%d), threads %d (>= 0), "
                    "chunk_bytes %llu (%llu..%llu), full_every %d (>= 1), keep %d (>= 1), "
                    "shuffle %d (0 none, 1 byte, 2 bit)",
                    opts->level, ZSTD_minCLevel(), ZSTD_maxCLevel(), opts->threads,
                    (unsigned long long)opts->chunk_bytes, FTC_ZSHARD_MIN_CHUNK,
                    FTC_ZSHARD_MAX_CHUNK, opts->full_every, opts->keep, opts->shuffle);
        return NULL;
    }
    if (ftc__mkdirs_durable(dir, opts->fault, err) < 0) {
        ftc_err_wrap(err, "persist: open %s", dir);
        return NULL;
    }
    ftc_persist_t *p = ftc__persist_new(dir, opts, err);
    if (!p)
        return NULL;
    /* stale temp files from a crashed writer, at the top and in each version */
    ftc__clean_temps(p->dir);
    uint64_t *steps;
    int n;
    if (ftc__scan(p, &steps, &n, NULL) == 0) {
        char path[PATH_MAX], vn[32];
        for (int i = 0; i < n; i++) {
            ftc__vname(vn, sizeof vn, steps[i]);
            snprintf(path, sizeof path, "%s/%s", p->dir, vn);
            ftc__clean_temps(path);
        }
        free(steps);
    }
    return p;
}

ftc_persist_t *ftc_persist_open_reader(const char *dir, ftc_err_t *err)
{
    struct stat st;
    if (!ftc__dir_arg_ok(dir, err))
        return NULL;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ftc_err_set(err, FTC_ENOENT, "persist: %s is not a directory", dir);
        return NULL;
    }
    ftc_persist_options_t def = FTC_PERSIST_OPTIONS_INIT;
    ftc_persist_t *p = ftc__persist_new(dir, &def, err);
    if (!p)
        return NULL;
    p->reader = true;
    return p;
}

void ftc_persist_close(ftc_persist_t *p)
{
    if (!p)
        return;
    ftc__prev_clear(p);
    free(p->dir);
    free(p);
}

/* ---- reading a version's marker and manifest --------------------------------------- */

/* Reads and validates version step's COMMITTED and MANIFEST.json. state gets
 * the ftc_persist_state; m is filled whenever the manifest parsed (the caller
 * frees it with ftc__manifest_free; on error it is empty). Returns 0 only for
 * a committed version. */
static int ftc__read_version(const ftc_persist_t *p, uint64_t step, ftc__manifest_t *m,
                             int *state, ftc_err_t *err)
{
    char vn[32], path[PATH_MAX];
    memset(m, 0, sizeof *m);
    *state = FTC_PV_INCOMPLETE;
    ftc__vname(vn, sizeof vn, step);
    uint8_t *mtext = NULL, *ktext = NULL;
    size_t mlen, klen;
    int rc;
    snprintf(path, sizeof path, "%s/%s/%s", p->dir, vn, FTC__MARKER);
    struct stat st;
    bool has_marker = stat(path, &st) == 0;
    if (!has_marker && errno != ENOENT) { /* cannot tell: not "no marker" */
        *state = FTC_PV_BAD_MARKER;
        return ftc_err_errno(err, errno, "stat %s", path);
    }
    if (has_marker)
        *state = FTC_PV_BAD_MARKER;
    snprintf(path, sizeof path, "%s/%s/%s", p->dir, vn, FTC__MANIFEST);
    FTC_CHECK_GOTO(ftc_fs_read_file(path, FTC__MANIFEST_MAX, &mtext, &mlen, err), rc, fail);
    FTC_CHECK_GOTO(ftc__manifest_parse((const char *)mtext, mlen, m, err), rc, fail);
    if (m->step != step) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "manifest step %llu differs from the directory's",
                         (unsigned long long)m->step);
        goto undo_manifest;
    }
    if (!has_marker) {
        rc = ftc_err_set(err, FTC_ENOENT, "no %s marker (an unfinished or crashed write)",
                         FTC__MARKER);
        free(mtext);
        return rc; /* manifest kept for listing */
    }
    snprintf(path, sizeof path, "%s/%s/%s", p->dir, vn, FTC__MARKER);
    FTC_CHECK_GOTO(ftc_fs_read_file(path, FTC__MARKER_MAX, &ktext, &klen, err), rc, undo_manifest);
    char want[256];
    ftc__marker_text(want, sizeof want, step, ftc_xxh3(mtext, mlen));
    if (klen != strlen(want) || memcmp(ktext, want, klen) != 0) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "%s does not name this manifest (step %llu, xxh3 of "
                         "%s)", FTC__MARKER, (unsigned long long)step, FTC__MANIFEST);
        goto undo_manifest;
    }
    free(ktext);
    free(mtext);
    *state = FTC_PV_COMMITTED;
    return 0;
undo_manifest:
    ftc__manifest_free(m);
fail:
    if (!has_marker && rc != FTC_ENOENT)
        ftc_err_wrap(err, "no %s marker, and", FTC__MARKER);
    free(ktext);
    free(mtext);
    return rc;
}

/* Whether a ftc__read_version result says what the version IS: committed,
 * unfinished (no marker), or broken for good (a manifest or marker that is
 * missing, corrupt or oversized). Anything else (EIO, ENOMEM, EMFILE, a
 * manifest that is not a regular file) says only that it could not be read
 * now: such a version may be committed, and the base of others, so nothing
 * may remove or overwrite it on that ground (I3). */
static bool ftc__read_settled(int rc, int state)
{
    return rc == 0 || state == FTC_PV_INCOMPLETE || rc == FTC_ECORRUPT || rc == FTC_ENOENT ||
           rc == FTC_ERANGE;
}

/* ---- writing ---------------------------------------------------------------------- */

static bool ftc__same_layout(const uint8_t *a, uint64_t as, const uint8_t *b, uint64_t bs)
{
    if (as != bs)
        return false;
    ftc_shard_view_t va, vb;
    if (ftc_shard_open(&va, a, as, 0, NULL) || ftc_shard_open(&vb, b, bs, 0, NULL))
        return false;
    if (va.n_tensors != vb.n_tensors || va.payload_offset != vb.payload_offset)
        return false;
    for (uint32_t i = 0; i < va.n_tensors; i++) {
        ftc_shard_tensor_t ta, tb;
        ftc_shard_get(&va, i, &ta);
        ftc_shard_get(&vb, i, &tb);
        if (ta.offset != tb.offset || ta.length != tb.length || ta.dtype != tb.dtype)
            return false;
    }
    return true;
}

/* Removes version directory vdir: the marker first, so that a crash half-way
 * never leaves a marker over missing shards that looks complete. A version
 * name that is a symbolic link (a version kept elsewhere and linked in) loses
 * the link only: removing through it would delete the files it points to,
 * outside the persist directory. */
static int ftc__remove_version(const char *vdir, ftc_err_t *err)
{
    struct stat st;
    if (lstat(vdir, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (unlink(vdir) < 0 && errno != ENOENT)
            return ftc_err_errno(err, errno, "removing the link %s", vdir);
        return 0;
    }
    char mk[PATH_MAX];
    snprintf(mk, sizeof mk, "%s/%s", vdir, FTC__MARKER);
    if (unlink(mk) < 0 && errno != ENOENT)
        return ftc_err_errno(err, errno, "removing %s", mk);
    return ftc_fs_remove_dir(vdir, err);
}

static int ftc__find_shard(const ftc__manifest_t *m, const ftc__mshard_t *like);

/* Whether shard `like` (its coordinates and raw_size) of committed version
 * step, with raw bytes hashing to raw_xxh3, can still be rebuilt from the
 * directory as far as markers and manifests tell: each version down its delta
 * chain is committed and holds that shard with the expected raw xxh3 and
 * size, in a regular file of the manifest's size. No shard file is read
 * (what load checks beyond this costs a decode), so this is cheap enough for
 * every delta write. *why gets the first failure. */
static bool ftc__chain_intact(const ftc_persist_t *p, uint64_t step, const ftc__mshard_t *like,
                              uint64_t raw_xxh3, ftc_err_t *why)
{
    for (int links = 0; links <= FTC__MAX_CHAIN; links++) {
        ftc__manifest_t m;
        int state;
        char vn[32], path[PATH_MAX];
        ftc__vname(vn, sizeof vn, step);
        if (ftc__read_version(p, step, &m, &state, why) != 0) {
            ftc__manifest_free(&m);
            ftc_err_wrap(why, "%s", vn);
            return false;
        }
        int j = ftc__find_shard(&m, like);
        if (j < 0 || m.s[j].raw_xxh3 != raw_xxh3 || m.s[j].raw_size != like->raw_size) {
            ftc__manifest_free(&m);
            ftc_err_set(why, FTC_ECORRUPT, "%s holds no such shard (%s) as was written there", vn,
                        like->file);
            return false;
        }
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/%s", p->dir, vn, m.s[j].file);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            (uint64_t)st.st_size != m.s[j].file_size) {
            ftc__manifest_free(&m);
            ftc_err_set(why, FTC_ECORRUPT, "%s is gone or not the size its manifest says", path);
            return false;
        }
        uint64_t b = m.s[j].base_step;
        raw_xxh3 = m.s[j].base_raw_xxh3;
        ftc__manifest_free(&m);
        if (b == UINT64_MAX)
            return true;
        step = b;
    }
    ftc_err_set(why, FTC_ECORRUPT, "delta chain longer than %d", FTC__MAX_CHAIN);
    return false;
}

/* Removes a failed or leftover version directory (best effort). */
static void ftc__discard_version(const ftc_persist_t *p, const char *vdir)
{
    ftc__remove_version(vdir, NULL);
    (void)p;
}

static int ftc__retain(ftc_persist_t *p, uint64_t written, uint64_t below);
static int ftc__load_version(const ftc_persist_t *p, uint64_t step, ftc_persist_loaded_t **out,
                             ftc_err_t *err);

/* One attempt of ftc_persist_write. */
static int ftc__write(ftc_persist_t *p, uint64_t step, const void *const *shards,
                      const uint64_t *sizes, int n)
{
    ftc_err_t *err = &p->err;
    ftc_err_clear(err);
    if (p->reader)
        return ftc_err_set(err, FTC_EINVAL, "persist write: %s was opened to read only", p->dir);
    if (!shards || !sizes || n < 1 || n > FTC__MAX_SHARDS)
        return ftc_err_set(err, FTC_EINVAL, "persist write: %d shards (must be 1..%d)", n,
                           FTC__MAX_SHARDS);
    if (step > FTC__STEP_MAX)
        return ftc_err_set(err, FTC_ERANGE, "persist write: step %llu above 2^63-1",
                           (unsigned long long)step);
    ftc__manifest_t m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.n = n;
    m.created_ms = ftc_wall_ms();
    m.s = calloc((size_t)n, sizeof *m.s);
    if (!m.s)
        return ftc_err_set(err, FTC_ENOMEM, "persist write: out of memory");
    int rc;
    int *base_of = NULL; /* index into p->prev, or -1 */
    uint8_t *file = NULL;
    char *mtext = NULL;
    char vn[32], vdir[PATH_MAX];
    bool dir_made = false;
    ftc__vname(vn, sizeof vn, step);
    snprintf(vdir, sizeof vdir, "%s/%s", p->dir, vn);

    base_of = malloc((size_t)n * sizeof *base_of);
    if (!base_of) {
        rc = ftc_err_set(err, FTC_ENOMEM, "persist write: out of memory");
        goto undo_manifest;
    }
    bool want_delta = p->opts.delta && p->n_prev > 0 && p->chain < p->opts.full_every - 1 &&
                      p->prev_step < step;
    bool any_delta = false;
    for (int i = 0; i < n; i++) {
        ftc_shard_view_t v;
        if (!shards[i]) {
            rc = ftc_err_set(err, FTC_EINVAL, "persist write: shard %d is NULL", i);
            goto undo_manifest;
        }
        rc = ftc_shard_open(&v, shards[i], sizes[i], FTC_SHARD_VERIFY, err);
        if (rc < 0) {
            ftc_err_wrap(err, "persist write: shard %d", i);
            goto undo_manifest;
        }
        if (v.info.step != step) {
            rc = ftc_err_set(err, FTC_EINVAL, "persist write: shard %d is at step %llu, not %llu",
                             i, (unsigned long long)v.info.step, (unsigned long long)step);
            goto undo_manifest;
        }
        ftc__mshard_t *s = &m.s[i];
        s->dp = v.info.dp, s->tp = v.info.tp, s->pp = v.info.pp;
        s->dp_rank = v.info.dp_rank, s->tp_rank = v.info.tp_rank, s->pp_rank = v.info.pp_rank;
        ftc__shard_name(s->file, sizeof s->file, s->dp_rank, s->tp_rank, s->pp_rank);
        for (int j = 0; j < i; j++)
            if (!strcmp(m.s[j].file, s->file)) {
                rc = ftc_err_set(err, FTC_EINVAL,
                                 "persist write: shards %d and %d have the same coordinates", j,
                                 i);
                goto undo_manifest;
            }
        if (i == 0) {
            snprintf(m.job, sizeof m.job, "%s", v.info.job_id);
            m.generation = v.info.generation;
        }
        s->raw_size = sizes[i];
        s->raw_xxh3 = ftc_xxh3(shards[i], sizes[i]);
        s->base_step = UINT64_MAX;
        base_of[i] = -1;
        for (int j = 0; want_delta && j < p->n_prev; j++) {
            const ftc__prev_t *pv = &p->prev[j];
            if (pv->dp_rank == s->dp_rank && pv->tp_rank == s->tp_rank &&
                pv->pp_rank == s->pp_rank &&
                ftc__same_layout(pv->raw, pv->size, shards[i], sizes[i])) {
                /* the base must still be on disk as this handle wrote it
                 * (another writer's retention, an operator or a failing
                 * disk may have removed or replaced it): a delta on a base
                 * that is gone can never load, and retention would then
                 * remove the older versions that still do */
                uint64_t bx = ftc_xxh3(pv->raw, pv->size);
                ftc_err_t why = {0};
                if (!ftc__chain_intact(p, p->prev_step, s, bx, &why)) {
                    FTC_WARN("persist", "%s/%s: written in full, not as a delta: its base is "
                             "not intact (%s)", vn, s->file, ftc_err_str(&why));
                    break;
                }
                base_of[i] = j;
                s->base_step = p->prev_step;
                s->base_raw_xxh3 = bx;
                any_delta = true;
                break;
            }
        }
    }

    /* a committed version of this step already exists: never overwrite it (it
     * may be the base of others); an uncommitted leftover is replaced */
    {
        ftc__manifest_t old;
        int state;
        ftc_err_t e2 = {0};
        struct stat st;
        if (stat(vdir, &st) == 0) {
            int r2 = ftc__read_version(p, step, &old, &state, &e2);
            ftc__manifest_free(&old);
            if (r2 == 0) {
                /* committed: kept, unless it is broken for good (a shard or a
                 * base that fails its checksum or is gone): then no reader can
                 * use it, and the same step written again repairs it (and the
                 * deltas on it, when the bytes are the same) */
                ftc_persist_loaded_t *l = NULL;
                ftc_err_t e3 = {0};
                int r3 = ftc__load_version(p, step, &l, &e3);
                ftc_persist_loaded_free(l);
                /* broken for good: a checksum that fails, a file that is gone,
                 * cut short (ETRUNC) or longer than its manifest says (ERANGE) */
                if (r3 != FTC_ECORRUPT && r3 != FTC_ENOENT && r3 != FTC_ETRUNC &&
                    r3 != FTC_ERANGE) {
                    if (r3)
                        rc = ftc_err_set(err, FTC_EEXIST, "persist write: version %s is already "
                                         "committed (and could not be verified now: %s)", vn,
                                         e3.msg);
                    else
                        rc = ftc_err_set(err, FTC_EEXIST,
                                         "persist write: version %s is already committed", vn);
                    goto undo_manifest;
                }
                FTC_WARN("persist", "version %s in %s is committed but corrupt (%s): writing it "
                         "again", vn, p->dir, e3.msg);
            }
            if (!ftc__read_settled(r2, state)) {
                rc = ftc_err_set(err, r2, "persist write: version %s exists and cannot be read "
                                 "(%s): it may be committed, so it is not overwritten; check "
                                 "the file system, or remove %s if it is not needed", vn, e2.msg,
                                 vdir);
                goto undo_manifest;
            }
            ftc__discard_version(p, vdir);
        }
    }

    uint64_t t0 = ftc_now_ns(), comp_ns = 0;
    /* (on a full disk this mkdir is what fails first: undo_dir says so) */
    FTC_CHECK_GOTO(ftc_fs_mkdirs(vdir, err), rc, undo_dir);
    dir_made = true;
    FTC_CHECK_GOTO(ftc_fs_fsync_dir(p->dir, p->opts.fault, err), rc, undo_dir);
    uint64_t file_bytes = 0;
    for (int i = 0; i < n; i++) {
        ftc__mshard_t *s = &m.s[i];
        size_t flen;
        uint64_t c0 = ftc_now_ns();
        const ftc__prev_t *pv = base_of[i] >= 0 ? &p->prev[base_of[i]] : NULL;
        rc = ftc_zshard_encode(shards[i], sizes[i], pv ? pv->raw : NULL, pv ? pv->size : 0,
                               pv ? p->prev_step : UINT64_MAX, p->opts.level, p->opts.shuffle,
                               p->opts.chunk_bytes, p->opts.threads, &file, &flen, err);
        comp_ns += ftc_now_ns() - c0;
        if (rc < 0) {
            ftc_err_wrap(err, "persist write: %s/%s", vn, s->file);
            goto undo_dir;
        }
        s->file_size = flen;
        s->file_xxh3 = ftc_xxh3(file, flen);
        file_bytes += flen;
        FTC_CHECK_GOTO(ftc_fs_write_file_atomic(vdir, s->file, file, flen, p->opts.fault, err), rc,
                       undo_dir);
        free(file);
        file = NULL;
    }
    FTC_CHECK_GOTO(ftc__manifest_dump(&m, &mtext, err), rc, undo_dir);
    size_t mlen = strlen(mtext);
    FTC_CHECK_GOTO(ftc_fs_write_file_atomic(vdir, FTC__MANIFEST, mtext, mlen, p->opts.fault, err),
                   rc, undo_dir);
    char marker[256];
    ftc__marker_text(marker, sizeof marker, step, ftc_xxh3(mtext, mlen));
    FTC_CHECK_GOTO(ftc_fs_write_file_atomic(vdir, FTC__MARKER, marker, strlen(marker),
                                            p->opts.fault, err),
                   rc, undo_dir);
    uint64_t t1 = ftc_now_ns();

    /* committed: remember the raw shards for the next delta */
    ftc__prev_clear(p);
    p->chain = any_delta ? p->chain + 1 : 0;
    p->prev_step = step;
    if (p->opts.delta) {
        p->prev = calloc((size_t)n, sizeof *p->prev);
        for (int i = 0; p->prev && i < n; i++) {
            ftc__prev_t *pv = &p->prev[i];
            pv->raw = malloc(sizes[i]);
            if (!pv->raw) { /* no memory for a copy: the next version is full */
                ftc__prev_clear(p);
                break;
            }
            memcpy(pv->raw, shards[i], sizes[i]);
            pv->size = sizes[i];
            pv->dp_rank = m.s[i].dp_rank, pv->tp_rank = m.s[i].tp_rank;
            pv->pp_rank = m.s[i].pp_rank;
            p->n_prev = i + 1;
        }
    }
    p->stats.raw_bytes = 0;
    for (int i = 0; i < n; i++)
        p->stats.raw_bytes += sizes[i];
    p->stats.file_bytes = file_bytes;
    p->stats.compress_s = (double)comp_ns / 1e9;
    p->stats.write_s = (double)(t1 - t0 - comp_ns) / 1e9;
    p->stats.delta = any_delta;
    free(mtext);
    free(base_of);
    ftc__manifest_free(&m);
    ftc__retain(p, step, 0);
    return 0;

undo_dir:
    free(file);
    free(mtext);
    if (dir_made)
        ftc__discard_version(p, vdir);
    if (rc == FTC_ENOSPC && err && !strstr(err->msg, "disk is full")) {
        char was[FTC_ERR_MSG_MAX];
        snprintf(was, sizeof was, "%s", err->msg);
        ftc_err_set(err, FTC_ENOSPC,
                    "the disk is full: version %s not written (its partial files removed, the "
                    "versions committed before it intact); free space there, keep fewer "
                    "versions (persist.keep) or move persist.dir (%.240s)",
                    vn, was);
    }
undo_manifest:
    free(base_of);
    ftc__manifest_free(&m);
    return rc;
}

int ftc_persist_write(ftc_persist_t *p, uint64_t step, const void *const *shards,
                      const uint64_t *sizes, int n)
{
    int rc = ftc__write(p, step, shards, sizes, n);
    if (rc != FTC_ENOSPC)
        return rc;
    /* The disk is full. Retention runs after a commit, and no commit comes
     * while the disk is full: what retention would remove (versions beyond
     * persist.keep, say after keep was lowered) and what a crashed write left
     * (an unfinished version, newer than the newest committed one, that only
     * a later commit would have removed) stayed for good, and every write
     * failed. Remove them now (the newest committed versions, their bases
     * and this handle's delta base stay) and try once more. */
    int removed = ftc__retain(p, p->n_prev > 0 ? p->prev_step : UINT64_MAX, step);
    if (removed <= 0)
        return rc;
    char vn[32];
    ftc__vname(vn, sizeof vn, step);
    FTC_WARN("persist", "the disk of %s was full writing %s: removed %d version(s) beyond "
             "persist.keep %d or left unfinished; writing it again", p->dir, vn, removed,
             p->opts.keep);
    return ftc__write(p, step, shards, sizes, n);
}

/* ---- retention -------------------------------------------------------------------- */

static bool ftc__has(const uint64_t *v, int n, uint64_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* Whether a temp file of a live writer lies in dir. */
static bool ftc__has_live_temp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool live = false;
    struct dirent *de;
    while (!live && (de = readdir(d)))
        live = ftc__is_temp(de->d_name) && ftc__temp_live(de->d_name);
    closedir(d);
    return live;
}

/* Keeps the newest opts.keep committed versions, the version just written
 * (written: a job that went back to an older step, past newer versions that
 * do not load, writes below them) and every base their delta chains need;
 * removes older committed versions, uncommitted ones older than the newest
 * committed, and temp files. below (0 after a commit): uncommitted versions
 * older than below go too, newer than the newest committed or not, unless a
 * live writer's temp file is in them (a write that fails for a full disk
 * makes room so, below its own step: an unfinished write older than the one
 * being written is one that crashed). Failures are logged, not returned: the
 * version is committed already. Returns how many versions were removed. */
static int ftc__retain(ftc_persist_t *p, uint64_t written, uint64_t below)
{
    uint64_t *steps = NULL, *keep = NULL;
    int *states = NULL;
    int n = 0, nkeep = 0, removed = 0;
    if (ftc__scan(p, &steps, &n, NULL) < 0 || n == 0)
        goto out;
    states = calloc((size_t)n, sizeof *states);
    keep = calloc((size_t)n, sizeof *keep);
    if (!states || !keep)
        goto out;
    uint64_t newest_committed = 0;
    bool any_committed = false;
    int committed_kept = 0;
    for (int i = 0; i < n; i++) {
        ftc__manifest_t m;
        ftc_err_t e = {0};
        int r = ftc__read_version(p, steps[i], &m, &states[i], &e);
        ftc__manifest_free(&m);
        if (!ftc__read_settled(r, states[i])) {
            FTC_WARN("persist", "retention skipped: version %llu cannot be read (%s), and it may "
                     "be committed or the base of a kept one", (unsigned long long)steps[i],
                     ftc_err_str(&e));
            goto out;
        }
        if (states[i] != FTC_PV_COMMITTED)
            continue;
        if (!any_committed)
            newest_committed = steps[i];
        any_committed = true;
        if (committed_kept < p->opts.keep) {
            keep[nkeep++] = steps[i];
            committed_kept++;
        } else if (steps[i] == written) {
            keep[nkeep++] = steps[i];
        }
    }
    if (!any_committed && below == 0)
        goto out;
    /* close over delta bases (keep grows while we walk it) */
    for (int k = 0; k < nkeep; k++) {
        ftc__manifest_t m;
        int state;
        ftc_err_t e = {0};
        int r = ftc__read_version(p, keep[k], &m, &state, &e);
        if (r != 0) {
            ftc__manifest_free(&m);
            if (ftc__read_settled(r, state))
                continue;
            FTC_WARN("persist", "retention skipped: the bases of version %llu cannot be read "
                     "(%s)", (unsigned long long)keep[k], ftc_err_str(&e));
            goto out;
        }
        for (int i = 0; i < m.n; i++) {
            uint64_t b = m.s[i].base_step;
            if (b != UINT64_MAX && !ftc__has(keep, nkeep, b) && ftc__has(steps, n, b))
                keep[nkeep++] = b;
        }
        ftc__manifest_free(&m);
    }
    /* Making room before a commit (below > 0): no new version vouches for
     * the data yet, so committed versions go only while a kept one loads.
     * Otherwise (the newest are committed but corrupt, and the handle has
     * written none of its own) the one that would go may be the last that
     * loads, and the write may still fail. */
    bool drop_committed = true;
    for (int i = 0; below > 0 && drop_committed && i < n; i++) {
        if (states[i] != FTC_PV_COMMITTED || ftc__has(keep, nkeep, steps[i]))
            continue;
        drop_committed = false;
        for (int k = 0; k < nkeep && !drop_committed; k++) {
            ftc_persist_loaded_t *l = NULL;
            ftc_err_t e = {0};
            drop_committed = ftc__load_version(p, keep[k], &l, &e) == 0;
            ftc_persist_loaded_free(l);
        }
        if (!drop_committed)
            FTC_WARN("persist", "%s: no version kept by persist.keep %d loads: older "
                     "committed versions are not removed to make room", p->dir, p->opts.keep);
    }
    char vn[32], path[PATH_MAX];
    for (int i = 0; i < n; i++) {
        ftc__vname(vn, sizeof vn, steps[i]);
        snprintf(path, sizeof path, "%s/%s", p->dir, vn);
        if (ftc__has(keep, nkeep, steps[i])) {
            ftc__clean_temps(path);
            continue;
        }
        if (states[i] == FTC_PV_COMMITTED && !drop_committed)
            continue;
        if (states[i] != FTC_PV_COMMITTED && (!any_committed || steps[i] > newest_committed) &&
            (steps[i] >= below || ftc__has_live_temp(path)))
            continue; /* a newer write may still be in progress */
        ftc_err_t e = {0};
        if (ftc__remove_version(path, &e) < 0) {
            FTC_WARN("persist", "retention: cannot remove %s: %s", path, ftc_err_str(&e));
        } else {
            FTC_DEBUG("persist", "retention: removed %s", vn);
            removed++;
        }
    }
    ftc__clean_temps(p->dir);
out:
    free(steps);
    free(states);
    free(keep);
    return removed;
}

int ftc_persist_drop_newer(ftc_persist_t *p, uint64_t step, int *dropped)
{
    ftc_err_t *err = &p->err;
    ftc_err_clear(err);
    if (dropped)
        *dropped = 0;
    if (p->reader)
        return ftc_err_set(err, FTC_EINVAL, "persist drop: %s was opened to read only", p->dir);
    uint64_t *steps = NULL;
    int n = 0, n_dropped = 0, rc = ftc__scan(p, &steps, &n, err);
    if (rc < 0)
        return rc;
    /* the versions this handle wrote after step are gone: no delta against them */
    if (p->n_prev > 0 && p->prev_step > step) {
        ftc__prev_clear(p);
        p->chain = 0;
    }
    char vn[32], path[PATH_MAX];
    for (int i = 0; i < n && rc == 0; i++) {
        if (steps[i] <= step)
            continue;
        ftc__vname(vn, sizeof vn, steps[i]);
        snprintf(path, sizeof path, "%s/%s", p->dir, vn);
        if (ftc__remove_version(path, err) < 0)
            rc = ftc_err_wrap(err, "persist drop: removing version %s of %s", vn, p->dir);
        else
            n_dropped++;
    }
    free(steps);
    if (dropped)
        *dropped = n_dropped;
    /* durable before the caller goes on: after a power cut a dropped version
     * (one the trainer abandoned) must not come back committed */
    if (rc == 0 && n_dropped > 0 && ftc_fs_fsync_dir(p->dir, p->opts.fault, err) < 0)
        rc = ftc_err_wrap(err, "persist drop: %d version(s) of %s removed, but not durably",
                          n_dropped, p->dir);
    return rc;
}

/* ---- loading ---------------------------------------------------------------------- */

static int ftc__find_shard(const ftc__manifest_t *m, const ftc__mshard_t *like)
{
    for (int i = 0; i < m->n; i++)
        if (m->s[i].dp_rank == like->dp_rank && m->s[i].tp_rank == like->tp_rank &&
            m->s[i].pp_rank == like->pp_rank)
            return i;
    return -1;
}

/* Reads, checks and decodes one .ftcz file described by s (of version step),
 * applying base (NULL for a full file). */
static int ftc__decode_file(const ftc_persist_t *p, uint64_t step, const ftc__mshard_t *s,
                            const uint8_t *base, uint64_t base_size, uint8_t **raw,
                            uint64_t *raw_size, ftc_err_t *err)
{
    char vn[32], path[PATH_MAX];
    ftc__vname(vn, sizeof vn, step);
    snprintf(path, sizeof path, "%s/%s/%s", p->dir, vn, s->file);
    uint8_t *buf;
    size_t len;
    int rc = ftc_fs_read_file(path, s->file_size, &buf, &len, err);
    if (rc < 0)
        return rc;
    if (len != s->file_size) {
        rc = ftc_err_set(err, FTC_ETRUNC, "%s: %zu bytes, the manifest says %llu", path, len,
                         (unsigned long long)s->file_size);
        goto undo_buf;
    }
    if (ftc_xxh3(buf, len) != s->file_xxh3) {
        rc = ftc_err_set(err, FTC_ECORRUPT, "%s: file checksum differs from the manifest's", path);
        goto undo_buf;
    }
    ftc_zshard_info_t zi;
    FTC_CHECK_GOTO(ftc_zshard_info(buf, len, &zi, err), rc, undo_wrap);
    if (zi.step != step || zi.raw_size != s->raw_size || zi.raw_xxh3 != s->raw_xxh3 ||
        zi.base_step != s->base_step ||
        (s->base_step != UINT64_MAX && zi.base_raw_xxh3 != s->base_raw_xxh3)) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "%s: header (step %llu, raw %llu bytes, base %lld) disagrees with the "
                         "manifest",
                         path, (unsigned long long)zi.step, (unsigned long long)zi.raw_size,
                         zi.base_step == UINT64_MAX ? -1ll : (long long)zi.base_step);
        goto undo_buf;
    }
    FTC_CHECK_GOTO(ftc_zshard_decode(buf, len, base, base_size, raw, raw_size, err), rc, undo_wrap);
    free(buf);
    return 0;
undo_wrap:
    ftc_err_wrap(err, "%s", path);
undo_buf:
    free(buf);
    return rc;
}

/* Reconstructs shard s of version step: walks its delta chain down to a full
 * file (each base version must be committed), then decodes upward. */
static int ftc__load_shard(const ftc_persist_t *p, uint64_t step, const ftc__mshard_t *s,
                           uint8_t **raw, uint64_t *raw_size, ftc_err_t *err)
{
    typedef struct {
        uint64_t step;
        ftc__mshard_t s;
    } link_t;
    link_t *chain = NULL;
    int n = 0, cap = 0, rc = 0;
    uint8_t *cur = NULL;
    uint64_t cur_size = 0;
    link_t l = {step, *s};
    for (;;) {
        if (n == cap) {
            int nc = cap ? cap * 2 : 8;
            link_t *c = realloc(chain, (size_t)nc * sizeof *c);
            if (!c) {
                rc = ftc_err_set(err, FTC_ENOMEM, "delta chain: out of memory");
                goto undo_chain;
            }
            chain = c;
            cap = nc;
        }
        chain[n++] = l;
        if (l.s.base_step == UINT64_MAX)
            break;
        if (n > FTC__MAX_CHAIN) {
            rc = ftc_err_set(err, FTC_ECORRUPT, "%s: delta chain longer than %d", s->file,
                             FTC__MAX_CHAIN);
            goto undo_chain;
        }
        ftc__manifest_t bm;
        int state;
        uint64_t b = l.s.base_step;
        rc = ftc__read_version(p, b, &bm, &state, err);
        if (rc < 0) {
            ftc__manifest_free(&bm);
            ftc_err_wrap(err, "%s of step %llu: delta base v%020llu", s->file,
                         (unsigned long long)l.step, (unsigned long long)b);
            goto undo_chain;
        }
        int j = ftc__find_shard(&bm, &l.s);
        if (j < 0 || bm.s[j].raw_xxh3 != l.s.base_raw_xxh3 || bm.s[j].raw_size != l.s.raw_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "%s of step %llu: delta base v%020llu has no matching shard", s->file,
                             (unsigned long long)l.step, (unsigned long long)b);
            ftc__manifest_free(&bm);
            goto undo_chain;
        }
        l.step = b;
        l.s = bm.s[j];
        ftc__manifest_free(&bm);
    }
    for (int i = n - 1; i >= 0; i--) {
        uint8_t *next;
        uint64_t next_size;
        rc = ftc__decode_file(p, chain[i].step, &chain[i].s, cur, cur_size, &next, &next_size, err);
        if (rc < 0) {
            if (i != 0)
                ftc_err_wrap(err, "delta base v%020llu", (unsigned long long)chain[i].step);
            goto undo_cur;
        }
        free(cur);
        cur = next;
        cur_size = next_size;
    }
    *raw = cur;
    *raw_size = cur_size;
    free(chain);
    return 0;
undo_cur:
    free(cur);
undo_chain:
    free(chain);
    return rc;
}

void ftc_persist_loaded_free(ftc_persist_loaded_t *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n_shards && l->shards; i++)
        free(l->shards[i]);
    free(l->shards);
    free(l->sizes);
    free(l);
}

/* Loads and fully verifies one committed version. */
static int ftc__load_version(const ftc_persist_t *p, uint64_t step, ftc_persist_loaded_t **out,
                             ftc_err_t *err)
{
    ftc__manifest_t m;
    int state, rc;
    *out = NULL;
    rc = ftc__read_version(p, step, &m, &state, err);
    if (rc < 0) {
        ftc__manifest_free(&m);
        return rc;
    }
    ftc_persist_loaded_t *l = calloc(1, sizeof *l);
    if (!l || !(l->shards = calloc((size_t)m.n, sizeof *l->shards)) ||
        !(l->sizes = calloc((size_t)m.n, sizeof *l->sizes))) {
        rc = ftc_err_set(err, FTC_ENOMEM, "load: out of memory");
        goto undo_loaded;
    }
    l->step = step;
    l->generation = m.generation;
    l->n_shards = m.n;
    for (int i = 0; i < m.n; i++) {
        FTC_CHECK_GOTO(ftc__load_shard(p, step, &m.s[i], &l->shards[i], &l->sizes[i], err), rc,
                       undo_loaded);
        ftc_shard_view_t v;
        rc = ftc_shard_open(&v, l->shards[i], l->sizes[i], FTC_SHARD_VERIFY, err);
        if (rc < 0) {
            ftc_err_wrap(err, "%s", m.s[i].file);
            goto undo_loaded;
        }
        if (v.info.step != step || v.info.dp_rank != m.s[i].dp_rank ||
            v.info.tp_rank != m.s[i].tp_rank || v.info.pp_rank != m.s[i].pp_rank) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "%s: the shard inside is step %llu at (%u,%u,%u), not what the "
                             "manifest says",
                             m.s[i].file, (unsigned long long)v.info.step, v.info.dp_rank,
                             v.info.tp_rank, v.info.pp_rank);
            goto undo_loaded;
        }
    }
    ftc__manifest_free(&m);
    *out = l;
    return 0;
undo_loaded:
    ftc_persist_loaded_free(l);
    ftc__manifest_free(&m);
    return rc;
}

void (*ftc__persist_scan_hook)(void *arg);
void *ftc__persist_scan_hook_arg;

/* One pass of ftc_persist_load(FTC_PERSIST_NEWEST) over the scanned steps,
 * newest first: 0 with *out at the first that loads. Counts the versions
 * skipped (*fallbacks) and those without a marker (*unfinished), appends
 * each failure to tried, and sets *vanished when a version that failed is
 * gone from the directory now (removed while it was read). */
static int ftc__load_newest_pass(const ftc_persist_t *p, const uint64_t *steps, int n,
                                 ftc_persist_loaded_t **out, int *fallbacks, int *unfinished,
                                 bool *vanished, char *tried, size_t *tl)
{
    char vn[32];
    for (int i = 0; i < n; i++) {
        ftc_err_t e = {0};
        ftc__vname(vn, sizeof vn, steps[i]);
        /* no marker at all: a write in progress or one that crashed; such a
         * version does not exist for readers, it is no failed one */
        char mk[PATH_MAX];
        struct stat mst;
        snprintf(mk, sizeof mk, "%s/%s/%s", p->dir, vn, FTC__MARKER);
        if (lstat(mk, &mst) != 0 && errno == ENOENT) {
            char vdir[PATH_MAX];
            snprintf(vdir, sizeof vdir, "%s/%s", p->dir, vn);
            if (lstat(vdir, &mst) != 0 && errno == ENOENT) { /* removed since the scan */
                *vanished = true;
                continue;
            }
            FTC_DEBUG("persist", "%s in %s has no %s marker (unfinished): not a version", vn,
                      p->dir, FTC__MARKER);
            (*unfinished)++;
            continue;
        }
        int rc = ftc__load_version(p, steps[i], out, &e);
        if (rc == 0) {
            (*out)->fallbacks = *fallbacks;
            if (*fallbacks)
                FTC_INFO("persist", "loaded %s after skipping %d newer version(s)", vn,
                         *fallbacks);
            return 0;
        }
        char vdir[PATH_MAX];
        snprintf(vdir, sizeof vdir, "%s/%s", p->dir, vn);
        if (lstat(vdir, &mst) != 0 && errno == ENOENT) {
            FTC_DEBUG("persist", "%s in %s was removed while it was read", vn, p->dir);
            *vanished = true;
            continue;
        }
        FTC_WARN("persist", "version %s in %s not usable, trying an older one: %s", vn, p->dir,
                 ftc_err_str(&e));
        (*fallbacks)++;
        if (*tl < FTC__TRIED_MAX - 1) {
            int w = snprintf(tried + *tl, FTC__TRIED_MAX - *tl, "%s%s (%s)", *tl ? "; " : "", vn,
                             ftc_err_str(&e));
            *tl = w < 0 ? *tl : *tl + (size_t)w;
            if (*tl > FTC__TRIED_MAX - 1)
                *tl = FTC__TRIED_MAX - 1;
        }
    }
    return FTC_ENOENT;
}

int ftc_persist_load(ftc_persist_t *p, uint64_t step, ftc_persist_loaded_t **out)
{
    ftc_err_t *err = &p->err;
    ftc_err_clear(err);
    *out = NULL;
    uint64_t *steps;
    int n;
    int rc = ftc__scan(p, &steps, &n, err);
    if (rc < 0)
        return rc;
    char vn[32];
    if (step != FTC_PERSIST_NEWEST) {
        ftc__vname(vn, sizeof vn, step);
        bool found = ftc__has(steps, n, step);
        free(steps);
        if (!found)
            return ftc_err_set(err, FTC_ENOENT, "persist %s: version %s not found", p->dir, vn);
        rc = ftc__load_version(p, step, out, err);
        if (rc < 0)
            ftc_err_wrap(err, "persist %s/%s", p->dir, vn);
        return rc;
    }
    /* another writer's retention may remove what the scan found (it keeps
     * the newest versions, and a newer one may have committed since): a
     * version that failed because it is gone sends the reader back to a
     * fresh scan, a few times, instead of failing with newer ones there */
    char tried[FTC__TRIED_MAX];
    size_t tl = 0;
    tried[0] = '\0';
    int fallbacks = 0, unfinished = 0;
    if (ftc__persist_scan_hook)
        ftc__persist_scan_hook(ftc__persist_scan_hook_arg);
    for (int pass = 0;; pass++) {
        bool vanished = false;
        unfinished = fallbacks = 0;
        tl = 0;
        tried[0] = '\0';
        rc = ftc__load_newest_pass(p, steps, n, out, &fallbacks, &unfinished, &vanished, tried,
                                   &tl);
        free(steps);
        if (rc == 0)
            return 0;
        if (!vanished || pass == FTC__RESCANS)
            break;
        FTC_INFO("persist", "a version of %s was removed while it was read (another writer's "
                 "retention): scanning again", p->dir);
        if ((rc = ftc__scan(p, &steps, &n, err)) < 0)
            return rc;
    }
    if (n == unfinished)
        return ftc_err_set(err, FTC_ENOENT, "persist %s: no committed version%s", p->dir,
                           unfinished ? " (only unfinished writes without a COMMITTED marker)"
                                      : "");
    if (!tl)
        return ftc_err_set(err, FTC_ENOENT, "persist %s: no committed version left (those "
                           "found were removed while they were read)", p->dir);
    return ftc_err_set(err, FTC_ENOENT, "persist %s: no version verifies; tried %s", p->dir,
                       tried);
}

int ftc_persist_verify(ftc_persist_t *p, uint64_t step)
{
    ftc_persist_loaded_t *l;
    int rc = ftc_persist_load(p, step, &l);
    ftc_persist_loaded_free(l);
    return rc;
}

int ftc_persist_list(ftc_persist_t *p, ftc_persist_version_t **out, int *n_out)
{
    ftc_err_t *err = &p->err;
    ftc_err_clear(err);
    *out = NULL;
    *n_out = 0;
    uint64_t *steps;
    int n;
    int rc = ftc__scan(p, &steps, &n, err);
    if (rc < 0)
        return rc;
    ftc_persist_version_t *v = calloc(n ? (size_t)n : 1, sizeof *v);
    if (!v) {
        free(steps);
        return ftc_err_set(err, FTC_ENOMEM, "persist list: out of memory");
    }
    for (int i = 0; i < n; i++) {
        ftc__manifest_t m;
        ftc_err_t e = {0};
        ftc__read_version(p, steps[i], &m, &v[i].state, &e);
        v[i].step = steps[i];
        v[i].base_step = UINT64_MAX;
        v[i].n_shards = m.n;
        v[i].generation = m.generation;
        for (int j = 0; j < m.n; j++) {
            v[i].raw_bytes += m.s[j].raw_size;
            v[i].file_bytes += m.s[j].file_size;
            if (m.s[j].base_step < v[i].base_step)
                v[i].base_step = m.s[j].base_step;
        }
        ftc__manifest_free(&m);
    }
    free(steps);
    *out = v;
    *n_out = n;
    return 0;
}
