/*
 * safetensors.c — export of open shard views to a safetensors file.
 *
 * Layout written (https://github.com/huggingface/safetensors):
 *
 *   u64 LE   N, the header length
 *   N bytes  JSON: {"__metadata__": {...}, "<name>": {"dtype", "shape",
 *            "data_offsets": [begin, end]}, ...}, padded with spaces so
 *            that the data starts at a multiple of 8
 *   data     every tensor's bytes back to back, in header order, with no
 *            gaps (readers reject gaps and overlaps)
 *
 * The header is small and built in memory with jansson; the tensor bytes are
 * streamed from the views straight into a temp file next to the target, which
 * is then fsync'd, renamed over the target and the directory fsync'd, all
 * through core/fsio so that fault injection reaches every step.
 */
#include "plugins/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* safetensors' own spelling of each dtype, from the table in ftc.h. */
static const char *ftc__st_dtype(int dtype)
{
    switch (dtype) {
#define FTC__ST_CASE(name, code, size, str, st)                                                    \
    case FTC_DTYPE_##name:                                                                         \
        return st;
        FTC_DTYPE_MAP(FTC__ST_CASE)
#undef FTC__ST_CASE
    default:
        return NULL;
    }
}

/* "d0.t1.p0" for a view's coordinates. */
static void ftc__st_coords(const ftc_shard_view_t *v, char *buf, size_t len)
{
    snprintf(buf, len, "d%u.t%u.p%u", v->info.dp_rank, v->info.tp_rank, v->info.pp_rank);
}

static int ftc__st_set_str(json_t *obj, const char *key, const char *val, ftc_err_t *err)
{
    json_t *s = json_string(val);
    if (!s || json_object_set_new(obj, key, s) != 0)
        return ftc_err_set(err, FTC_EINVAL,
                           "safetensors metadata '%s': value is not valid UTF-8 or out of memory",
                           key);
    return 0;
}

static int ftc__st_set_u64(json_t *obj, const char *key, uint64_t val, ftc_err_t *err)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)val);
    return ftc__st_set_str(obj, key, buf, err);
}

/* The "__metadata__" object: identity of the (first) shard, the coordinates
 * of each exported shard, and every user metadata record as hex. */
static int ftc__st_metadata(const ftc_shard_view_t *views, int n, json_t *meta, ftc_err_t *err)
{
    const ftc_shard_info_t *in = &views[0].info;
    int rc;
    FTC_CHECK_GOTO(ftc__st_set_str(meta, "format", "ftc", err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_str(meta, "job", in->job_id, err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_u64(meta, "step", in->step, err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_u64(meta, "generation", in->generation, err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_u64(meta, "dp", in->dp, err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_u64(meta, "tp", in->tp, err), rc, out);
    FTC_CHECK_GOTO(ftc__st_set_u64(meta, "pp", in->pp, err), rc, out);
    if (n == 1) {
        FTC_CHECK_GOTO(ftc__st_set_u64(meta, "dp_rank", in->dp_rank, err), rc, out);
        FTC_CHECK_GOTO(ftc__st_set_u64(meta, "tp_rank", in->tp_rank, err), rc, out);
        FTC_CHECK_GOTO(ftc__st_set_u64(meta, "pp_rank", in->pp_rank, err), rc, out);
    } else {
        /* "d0.t0.p0,d1.t0.p0,...": which shards the prefixes name */
        size_t cap = (size_t)n * 40 + 1, pos = 0;
        char *list = malloc(cap);
        if (!list)
            return ftc_err_set(err, FTC_ENOMEM, "safetensors metadata: out of memory");
        list[0] = '\0';
        for (int s = 0; s < n; s++) {
            char c[40];
            ftc__st_coords(&views[s], c, sizeof c);
            pos += (size_t)snprintf(list + pos, cap - pos, "%s%s", s ? "," : "", c);
        }
        rc = ftc__st_set_str(meta, "shards", list, err);
        free(list);
        if (rc)
            goto out;
    }
    static const char hexd[] = "0123456789abcdef";
    for (int s = 0; s < n; s++) {
        char prefix[48] = "";
        if (n > 1) {
            ftc__st_coords(&views[s], prefix, sizeof prefix - 1);
            strcat(prefix, "/");
        }
        uint64_t pos = 0;
        const char *k;
        uint32_t kl, vl;
        const uint8_t *val;
        while (ftc_shard_meta_next(&views[s], &pos, &k, &kl, &val, &vl)) {
            size_t plen = strlen(prefix);
            size_t keylen = plen + 5 + kl;
            char *key = malloc(keylen + 1);
            char *hex = malloc((size_t)vl * 2 + 1);
            json_t *js;
            if (!key || !hex) {
                free(key);
                free(hex);
                return ftc_err_set(err, FTC_ENOMEM, "safetensors metadata: out of memory");
            }
            memcpy(key, prefix, plen);
            memcpy(key + plen, "meta.", 5);
            memcpy(key + plen + 5, k, kl);
            key[keylen] = '\0';
            for (uint32_t b = 0; b < vl; b++) {
                hex[2 * b] = hexd[val[b] >> 4];
                hex[2 * b + 1] = hexd[val[b] & 15];
            }
            hex[2 * (size_t)vl] = '\0';
            js = json_string(hex);
            rc = js ? json_object_setn_new(meta, key, keylen, js) : -1;
            if (rc != 0)
                rc = ftc_err_set(err, FTC_EINVAL,
                                 "shard %d: metadata key '%.*s' is not valid UTF-8, so it cannot "
                                 "be a safetensors metadata key",
                                 s, (int)(kl > 200 ? 200 : kl), k);
            free(key);
            free(hex);
            if (rc)
                goto out;
        }
    }
    rc = 0;
out:
    return rc;
}

/* Builds the header object: metadata, then every tensor in shard order. */
static int ftc__st_header(const ftc_shard_view_t *views, int n, json_t *root, ftc_err_t *err)
{
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta) != 0)
        return ftc_err_set(err, FTC_ENOMEM, "safetensors header: out of memory");
    int rc = ftc__st_metadata(views, n, meta, err);
    if (rc)
        return rc;
    uint64_t off = 0;
    char *name = NULL;
    for (int s = 0; s < n; s++) {
        char prefix[48] = "";
        if (n > 1) {
            ftc__st_coords(&views[s], prefix, sizeof prefix - 1);
            strcat(prefix, "/");
        }
        size_t plen = strlen(prefix);
        for (uint32_t i = 0; i < views[s].n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&views[s], i, &t);
            const char *dt = ftc__st_dtype(t.dtype);
            if (!dt) {
                rc = ftc_err_set(err, FTC_EUNSUPPORTED,
                                 "shard %d tensor %u: dtype %d has no safetensors name", s, i,
                                 t.dtype);
                goto out;
            }
            size_t nlen = plen + t.name_len;
            free(name);
            name = malloc(nlen + 1);
            if (!name) {
                rc = ftc_err_set(err, FTC_ENOMEM, "safetensors header: out of memory");
                goto out;
            }
            memcpy(name, prefix, plen);
            memcpy(name + plen, t.name, t.name_len);
            name[nlen] = '\0';
            if (!strcmp(name, "__metadata__") || json_object_getn(root, name, nlen)) {
                rc = ftc_err_set(err, FTC_EEXIST,
                                 "tensor '%.200s' appears twice (or is named __metadata__): "
                                 "export shards with distinct coordinates",
                                 name);
                goto out;
            }
            json_t *shape = json_array();
            json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + t.length));
            json_t *ent = json_object();
            int bad = !shape || !offs || !ent;
            for (uint32_t d = 0; !bad && d < t.ndim; d++)
                bad = json_array_append_new(shape, json_integer((json_int_t)t.shape[d])) != 0;
            if (!bad) {
                bad = json_object_set_new(ent, "dtype", json_string(dt)) != 0;
                bad |= json_object_set(ent, "shape", shape) != 0;
                bad |= json_object_set(ent, "data_offsets", offs) != 0;
            }
            json_decref(shape);
            json_decref(offs);
            if (bad) {
                json_decref(ent);
                rc = ftc_err_set(err, FTC_ENOMEM, "safetensors header: out of memory");
                goto out;
            }
            if (json_object_setn_new(root, name, nlen, ent) != 0) {
                rc = ftc_err_set(err, FTC_EINVAL,
                                 "shard %d tensor %u: name '%.200s' is not valid UTF-8, which "
                                 "safetensors requires",
                                 s, i, name);
                goto out;
            }
            off += t.length;
        }
    }
    rc = 0;
out:
    free(name);
    return rc;
}

/* Splits path into its directory (or ".") and final name. */
static int ftc__st_split(const char *path, char *dir, size_t dlen, const char **base,
                         ftc_err_t *err)
{
    int rc = ftc_fs_split_path(path, dir, dlen, base, err);
    if (rc)
        return rc;
    if (!**base)
        return ftc_err_set(err, FTC_EINVAL, "'%s' names a directory; give a file name to export to",
                           path);
    return 0;
}

int ftc_safetensors_export(const ftc_shard_view_t *views, int n, const char *path,
                           ftc_fault_t *fault, ftc_err_t *err)
{
    if (!views || n < 1 || !path || !*path)
        return ftc_err_set(err, FTC_EINVAL,
                           "safetensors export needs at least one shard and a path");
    char dir[PATH_MAX], tmp[PATH_MAX];
    const char *base = NULL;
    int rc = ftc__st_split(path, dir, sizeof dir, &base, err);
    if (rc)
        return rc;
    /* a temp file of this call's own (".NAME.SEQ.tmp.PID", as fsio's): two
     * threads exporting to one path must not write into each other's */
    static atomic_ullong seq;
    unsigned long long sn = atomic_fetch_add(&seq, 1);
    int tn = snprintf(tmp, sizeof tmp, "%s/.%s.%llu.tmp.%d", dir, base, sn, (int)getpid());
    if (tn < 0 || (size_t)tn >= sizeof tmp)
        return ftc_err_set(err, FTC_EINVAL, "path too long: %s", path);

    json_t *root = json_object();
    char *text = NULL;
    uint8_t *head = NULL;
    int fd = -1;
    if (!root)
        return ftc_err_set(err, FTC_ENOMEM, "safetensors header: out of memory");
    FTC_CHECK_GOTO(ftc__st_header(views, n, root, err), rc, undo_json);
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        rc = ftc_err_set(err, FTC_ENOMEM, "safetensors header: cannot serialise (out of memory)");
        goto undo_json;
    }
    /* header length padded with spaces so the data starts 8-aligned */
    size_t tl = strlen(text);
    size_t hl = (tl + 7) / 8 * 8;
    head = malloc(8 + hl);
    if (!head) {
        rc = ftc_err_set(err, FTC_ENOMEM, "safetensors header: out of memory");
        goto undo_text;
    }
    uint64_t hl64 = hl;
    memcpy(head, &hl64, 8); /* little-endian: shard.c refuses big-endian builds too */
    memcpy(head + 8, text, tl);
    memset(head + 8 + tl, ' ', hl - tl);

    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ftc_err_errno(err, errno, "create %s", tmp);
        goto undo_head;
    }
    FTC_CHECK_GOTO(ftc_fs_write_all(fd, head, 8 + hl, fault, err, tmp), rc, undo_tmp);
    for (int s = 0; s < n; s++) {
        for (uint32_t i = 0; i < views[s].n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&views[s], i, &t);
            if (t.length == 0)
                continue;
            FTC_CHECK_GOTO(ftc_fs_write_all(fd, t.data, t.length, fault, err, tmp), rc, undo_tmp);
        }
    }
    FTC_CHECK_GOTO(ftc_fs_fsync(fd, fault, err, tmp), rc, undo_tmp);
    if (close(fd) != 0) {
        fd = -1;
        rc = ftc_err_errno(err, errno, "close %s", tmp);
        goto undo_tmp;
    }
    fd = -1;
    FTC_CHECK_GOTO(ftc_fs_rename(tmp, path, fault, err), rc, undo_tmp);
    rc = ftc_fs_fsync_dir(dir, fault, err);
    goto undo_head;
undo_tmp:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    ftc_err_wrap(err, "safetensors export to %s", path);
undo_head:
    free(head);
undo_text:
    free(text);
undo_json:
    json_decref(root);
    return rc;
}
