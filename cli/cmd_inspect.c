/*
 * cmd_inspect.c — `ftc inspect PATH [--json]`: shows what a shard file, a
 * compressed .ftcz file, a version directory or a persist directory holds.
 * Reading and validation are ckpt/shard.c's and ckpt/persist.c's; this file
 * prints their results as a table or (with --json) as JSON.
 */
#include "cli/cli.h"

#include "core/hash.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char ftc__inspect_help[] =
    "usage: ftc inspect PATH [--json]\n"
    "\n"
    "Shows what PATH holds. PATH may be:\n"
    "  a raw shard file      identity (job, step, generation, layout and coordinates),\n"
    "                        the tensor table (name, dtype, shape, bytes, offset, xxh3,\n"
    "                        checksum status), metadata records and sizes\n"
    "  a .ftcz file          its compression header; a full (non-delta) file is also\n"
    "                        decoded and shown as a shard\n"
    "  a version directory   DIR/vNNN...: the version's state and each shard file\n"
    "  a persist directory   every version: step, state, shards, raw and file bytes,\n"
    "                        compression ratio and delta base\n"
    "\n"
    "Options:\n"
    "  --json                 print JSON instead of tables\n"
    "\n"
    "Exits 1 when PATH is unreadable or a checksum does not match (the reason goes\n"
    "to stderr).\n";

/* ---- JSON helpers ----------------------------------------------------------------- */

static json_t *ftc__js_name(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    return j ? j : json_string("<not UTF-8>");
}

static json_t *ftc__js_hex(uint64_t h)
{
    char buf[17];
    ftc_hash_hex(h, buf);
    return json_string(buf);
}

static void ftc__meta_preview(const uint8_t *val, uint32_t len, char *buf, size_t cap)
{
    size_t pos = 0;
    for (uint32_t i = 0; i < len && pos + 3 < cap && i < 24; i++)
        pos += (size_t)snprintf(buf + pos, cap - pos, "%02x", val[i]);
    if (len > 24 && pos + 4 < cap)
        snprintf(buf + pos, cap - pos, "...");
    if (len == 0)
        snprintf(buf, cap, "(empty)");
}

/* ---- one shard --------------------------------------------------------------------- */

/* Prints (or adds to *js) an open view; returns the number of bad tensors and
 * leaves the first failure in err. */
static int ftc__show_shard(const ftc_shard_view_t *v, bool json, json_t *js, ftc_err_t *err)
{
    const ftc_shard_info_t *in = &v->info;
    int bad = 0, nw = 4;
    char b1[32], b2[32];
    json_t *tensors = NULL, *metas = NULL;
    if (json) {
        json_object_set_new(js, "job", json_string(in->job_id));
        json_object_set_new(js, "step", json_integer((json_int_t)in->step));
        json_object_set_new(js, "generation", json_integer((json_int_t)in->generation));
        json_object_set_new(js, "created_ms", json_integer((json_int_t)in->created_ms));
        json_object_set_new(js, "layout",
                            json_pack("{s:I,s:I,s:I}", "dp", (json_int_t)in->dp, "tp",
                                      (json_int_t)in->tp, "pp", (json_int_t)in->pp));
        json_object_set_new(js, "coordinates",
                            json_pack("{s:I,s:I,s:I}", "dp_rank", (json_int_t)in->dp_rank,
                                      "tp_rank", (json_int_t)in->tp_rank, "pp_rank",
                                      (json_int_t)in->pp_rank));
        json_object_set_new(
            js, "sizes",
            json_pack("{s:I,s:I,s:I,s:I}", "total", (json_int_t)v->size, "head",
                      (json_int_t)v->payload_offset, "payload", (json_int_t)v->payload_size,
                      "metadata", (json_int_t)v->meta_size));
        json_object_set_new(js, "head_xxh3", ftc__js_hex(v->head_xxh3));
        tensors = json_array();
        metas = json_array();
        json_object_set_new(js, "tensors", tensors);
        json_object_set_new(js, "metadata", metas);
    } else {
        printf("  job          %s\n", in->job_id);
        printf("  step         %llu   generation %llu   created_ms %llu\n",
               (unsigned long long)in->step, (unsigned long long)in->generation,
               (unsigned long long)in->created_ms);
        printf("  layout       dp=%u tp=%u pp=%u   coordinates d%u.t%u.p%u\n", in->dp, in->tp,
               in->pp, in->dp_rank, in->tp_rank, in->pp_rank);
        printf("  size         %llu bytes (%s): head %llu, payload %s at offset %llu\n",
               (unsigned long long)v->size, ftc_cli_bytes(v->size, b1),
               (unsigned long long)v->payload_offset, ftc_cli_bytes(v->payload_size, b2),
               (unsigned long long)v->payload_offset);
        printf("  tensors      %u\n", v->n_tensors);
        for (uint32_t i = 0; i < v->n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(v, i, &t);
            if ((int)t.name_len > nw)
                nw = t.name_len > 64 ? 64 : (int)t.name_len;
        }
        printf("    %4s  %-*s %-5s %-16s %12s %12s  %-16s  %s\n", "#", nw, "name", "dtype", "shape",
               "bytes", "offset", "xxh3", "check");
    }
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        ftc_err_t terr = {0};
        bool ok = ftc_shard_verify_tensor(v, i, &terr) == 0;
        if (!ok && bad++ == 0 && err)
            *err = terr;
        char shape[160] = "[";
        size_t pos = 1;
        for (uint32_t d = 0; d < t.ndim && pos < sizeof shape - 24; d++)
            pos += (size_t)snprintf(shape + pos, sizeof shape - pos, "%s%llu", d ? "," : "",
                                    (unsigned long long)t.shape[d]);
        snprintf(shape + pos, sizeof shape - pos, "]");
        char hex[17];
        ftc_hash_hex(t.xxh3, hex);
        if (json) {
            json_t *sh = json_array();
            for (uint32_t d = 0; d < t.ndim; d++)
                json_array_append_new(sh, json_integer((json_int_t)t.shape[d]));
            json_array_append_new(
                tensors, json_pack("{s:o,s:s,s:o,s:I,s:I,s:s,s:b}", "name",
                                   ftc__js_name(t.name, t.name_len), "dtype",
                                   ftc_dtype_name(t.dtype), "shape", sh, "bytes",
                                   (json_int_t)t.length, "offset", (json_int_t)t.offset, "xxh3",
                                   hex, "ok", ok));
        } else {
            printf("    %4u  %-*.*s %-5s %-16s %12llu %12llu  %s  %s\n", i, nw, (int)t.name_len,
                   t.name, ftc_dtype_name(t.dtype), shape, (unsigned long long)t.length,
                   (unsigned long long)t.offset, hex, ok ? "ok" : "BAD");
        }
    }
    uint64_t pos = 0;
    const char *k;
    uint32_t kl, vl;
    const uint8_t *val;
    int nmeta = 0;
    while (ftc_shard_meta_next(v, &pos, &k, &kl, &val, &vl))
        nmeta++;
    if (!json)
        printf("  metadata     %d record(s), %llu bytes\n", nmeta,
               (unsigned long long)v->meta_size);
    pos = 0;
    while (ftc_shard_meta_next(v, &pos, &k, &kl, &val, &vl)) {
        char prev[64];
        ftc__meta_preview(val, vl, prev, sizeof prev);
        uint64_t u = 0;
        if (vl == 8)
            memcpy(&u, val, 8);
        if (json) {
            json_t *m = json_pack("{s:o,s:I,s:s}", "key", ftc__js_name(k, kl), "length",
                                  (json_int_t)vl, "hex", prev);
            if (vl == 8)
                json_object_set_new(m, "u64", json_integer((json_int_t)u));
            json_array_append_new(metas, m);
        } else if (vl == 8) {
            printf("    %-32.*s %6u bytes  u64 %llu\n", (int)kl, k, vl, (unsigned long long)u);
        } else {
            printf("    %-32.*s %6u bytes  %s\n", (int)kl, k, vl, prev);
        }
    }
    if (!json)
        printf("  checksums    %s\n", bad ? "MISMATCH (see below)" : "all tensors ok");
    return bad;
}

/* Opens buf as a shard and shows it; returns the exit code. */
static int ftc__inspect_raw(const ftc_cli_cmd_t *cmd, const char *what, const uint8_t *buf,
                            size_t len, bool json, json_t *js)
{
    ftc_shard_view_t v;
    ftc_err_t err = {0};
    if (ftc_shard_open(&v, buf, len, 0, &err) != 0)
        return ftc_cli_fail(cmd, "%s: %s", what, ftc_err_str(&err));
    if (!json)
        printf("shard %s\n", what);
    int bad = ftc__show_shard(&v, json, js, &err);
    if (bad)
        return ftc_cli_fail(cmd, "%s: %d tensor(s) fail their checksum; first: %s", what, bad,
                            ftc_err_str(&err));
    return FTC_EXIT_OK;
}

static int ftc__inspect_zshard(const ftc_cli_cmd_t *cmd, const char *path, bool json, json_t *js)
{
    uint8_t *file = NULL, *raw = NULL;
    size_t len = 0;
    uint64_t raw_size = 0;
    ftc_err_t err = {0};
    int ec;
    if (ftc_cli_read_file(path, &file, &len, &err) != 0)
        return ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    ftc_zshard_info_t zi;
    if (ftc_zshard_info(file, len, &zi, &err) != 0) {
        ec = ftc_cli_fail(cmd, "%s: not a raw shard (no FTCSHARD magic at offset 0), and not a "
                               "valid .ftcz file: %s",
                          path, ftc_err_str(&err));
        goto out;
    }
    bool delta = zi.base_step != UINT64_MAX;
    char b1[32], b2[32];
    if (json) {
        json_t *z = json_pack("{s:I,s:I,s:I,s:s,s:I,s:I,s:i,s:b,s:f}", "step", (json_int_t)zi.step,
                              "raw_size", (json_int_t)zi.raw_size, "file_size", (json_int_t)len,
                              "raw_xxh3", "", "chunk_bytes", (json_int_t)zi.chunk_bytes,
                              "chunks", (json_int_t)zi.n_chunks, "level", zi.level, "shuffle",
                              zi.shuffle, "ratio", len ? (double)zi.raw_size / (double)len : 0.0);
        json_object_set_new(z, "raw_xxh3", ftc__js_hex(zi.raw_xxh3));
        json_object_set_new(z, "base_step",
                            delta ? json_integer((json_int_t)zi.base_step) : json_null());
        json_object_set_new(js, "kind", json_string("ftcz"));
        json_object_set_new(js, "ftcz", z);
    } else {
        char hex[17];
        ftc_hash_hex(zi.raw_xxh3, hex);
        printf("compressed shard %s\n", path);
        printf("  step         %llu\n", (unsigned long long)zi.step);
        printf("  raw          %llu bytes (%s), xxh3 %s\n", (unsigned long long)zi.raw_size,
               ftc_cli_bytes(zi.raw_size, b1), hex);
        printf("  file         %zu bytes (%s), ratio %.2fx\n", len, ftc_cli_bytes(len, b2),
               len ? (double)zi.raw_size / (double)len : 0.0);
        printf("  chunks       %u of %llu bytes, zstd level %d, shuffle %s\n", zi.n_chunks,
               (unsigned long long)zi.chunk_bytes, zi.level, zi.shuffle ? "on" : "off");
        if (delta)
            printf("  delta        XOR against step %llu; its tensors need that base: inspect the "
                   "version directory instead\n",
                   (unsigned long long)zi.base_step);
        else
            printf("  delta        none (a full version)\n");
    }
    ec = FTC_EXIT_OK;
    if (delta)
        goto out;
    if (ftc_zshard_decode(file, len, NULL, 0, &raw, &raw_size, &err) != 0) {
        ec = ftc_cli_fail(cmd, "%s: %s", path, ftc_err_str(&err));
        goto out;
    }
    json_t *sj = json ? json_object() : NULL;
    if (json)
        json_object_set_new(js, "shard", sj);
    ec = ftc__inspect_raw(cmd, path, raw, raw_size, json, sj);
out:
    free(raw);
    free(file);
    return ec;
}

static const char *ftc__state_name(int state)
{
    switch (state) {
    case FTC_PV_COMMITTED:
        return "committed";
    case FTC_PV_INCOMPLETE:
        return "incomplete";
    default:
        return "bad-marker";
    }
}

static json_t *ftc__version_json(const ftc_persist_version_t *pv)
{
    json_t *j = json_pack("{s:I,s:I,s:s,s:i,s:I,s:I,s:f}", "step", (json_int_t)pv->step,
                          "generation", (json_int_t)pv->generation, "state",
                          ftc__state_name(pv->state), "shards", pv->n_shards, "raw_bytes",
                          (json_int_t)pv->raw_bytes, "file_bytes", (json_int_t)pv->file_bytes,
                          "ratio",
                          pv->file_bytes ? (double)pv->raw_bytes / (double)pv->file_bytes : 0.0);
    json_object_set_new(j, "base_step", pv->base_step == UINT64_MAX
                                            ? json_null()
                                            : json_integer((json_int_t)pv->base_step));
    return j;
}

static void ftc__version_line(const ftc_persist_version_t *pv)
{
    char b1[32], b2[32], base[32] = "full";
    if (pv->base_step != UINT64_MAX)
        snprintf(base, sizeof base, "delta<-v%llu", (unsigned long long)pv->base_step);
    printf("  v%-8llu %-11s %5llu %6d %12s %12s %7.2fx  %s\n", (unsigned long long)pv->step,
           ftc__state_name(pv->state), (unsigned long long)pv->generation, pv->n_shards,
           ftc_cli_bytes(pv->raw_bytes, b1), ftc_cli_bytes(pv->file_bytes, b2),
           pv->file_bytes ? (double)pv->raw_bytes / (double)pv->file_bytes : 0.0, base);
}

static void ftc__version_header(void)
{
    printf("  %-9s %-11s %5s %6s %12s %12s %8s  %s\n", "version", "state", "gen", "shards", "raw",
           "file", "ratio", "delta base");
}

static int ftc__cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .ftcz files of a version directory, with their headers. */
static int ftc__version_files(const ftc_cli_cmd_t *cmd, const char *dir, bool json, json_t *js)
{
    DIR *d = opendir(dir);
    if (!d)
        return ftc_cli_fail(cmd, "cannot open %s", dir);
    char **names = NULL;
    int n = 0, cap = 0, ec = FTC_EXIT_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l < 5 || strcmp(de->d_name + l - 5, ".ftcz"))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        names[n] = strdup(de->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, (size_t)n, sizeof *names, ftc__cmp_str);
    json_t *arr = json ? json_array() : NULL;
    if (json)
        json_object_set_new(js, "files", arr);
    else
        printf("  %-28s %12s %12s %8s %7s  %s\n", "file", "raw", "file bytes", "ratio", "chunks",
               "delta base");
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        uint8_t *buf = NULL;
        size_t len = 0;
        ftc_err_t err = {0};
        ftc_zshard_info_t zi;
        if (ftc_fs_read_file(path, SIZE_MAX / 2, &buf, &len, &err) != 0 ||
            ftc_zshard_info(buf, len, &zi, &err) != 0) {
            ec = ftc_cli_fail(cmd, "%s: %s", path, ftc_err_str(&err));
            free(buf);
            continue;
        }
        free(buf);
        double ratio = len ? (double)zi.raw_size / (double)len : 0.0;
        if (json) {
            json_t *f = json_pack("{s:s,s:I,s:I,s:f,s:I}", "file", names[i], "raw_size",
                                  (json_int_t)zi.raw_size, "file_size", (json_int_t)len, "ratio",
                                  ratio, "chunks", (json_int_t)zi.n_chunks);
            json_object_set_new(f, "base_step", zi.base_step == UINT64_MAX
                                                    ? json_null()
                                                    : json_integer((json_int_t)zi.base_step));
            json_array_append_new(arr, f);
        } else {
            char b1[32], b2[32], base[32] = "full";
            if (zi.base_step != UINT64_MAX)
                snprintf(base, sizeof base, "delta<-v%llu", (unsigned long long)zi.base_step);
            printf("  %-28s %12s %12s %7.2fx %7u  %s\n", names[i], ftc_cli_bytes(zi.raw_size, b1),
                   ftc_cli_bytes(len, b2), ratio, zi.n_chunks, base);
        }
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ec;
}

static int ftc__inspect_persist(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a,
                                const char *path, const ftc_cli_path_t *cp, bool json, json_t *js)
{
    ftc_err_t err = {0};
    ftc_persist_t *p = ftc_cli_persist_open(cp->persist_dir, a, &err);
    if (!p)
        return ftc_cli_fail(cmd, "%s: %s", cp->persist_dir, ftc_err_str(&err));
    ftc_persist_version_t *vs = NULL;
    int n = 0, ec = FTC_EXIT_OK;
    if (ftc_persist_list(p, &vs, &n) != 0) {
        ec = ftc_cli_fail(cmd, "%s: %s", cp->persist_dir, ftc_persist_errstr(p));
        goto out;
    }
    if (cp->kind == FTC_KIND_PERSIST) {
        json_t *arr = json ? json_array() : NULL;
        if (json) {
            json_object_set_new(js, "kind", json_string("persist"));
            json_object_set_new(js, "versions", arr);
        } else {
            printf("persist directory %s: %d version(s), newest first\n", path, n);
            ftc__version_header();
        }
        for (int i = 0; i < n; i++) {
            if (json)
                json_array_append_new(arr, ftc__version_json(&vs[i]));
            else
                ftc__version_line(&vs[i]);
        }
        goto out;
    }
    /* a version directory */
    const ftc_persist_version_t *pv = NULL;
    for (int i = 0; i < n; i++)
        if (vs[i].step == cp->step)
            pv = &vs[i];
    if (json) {
        json_object_set_new(js, "kind", json_string("version"));
        json_object_set_new(js, "version", pv ? ftc__version_json(pv) : json_null());
    } else {
        printf("version directory %s\n", path);
        ftc__version_header();
        if (pv)
            ftc__version_line(pv);
        else
            printf("  v%llu: not listed by the persist tier\n", (unsigned long long)cp->step);
    }
    ec = ftc__version_files(cmd, path, json, js);
out:
    free(vs);
    ftc_persist_close(p);
    return ec;
}

static int ftc__inspect_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    bool json = false;
    const ftc_cli_opt_t opts[] = {{"--json", FTC_OPT_FLAG, &json, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 1, 1, 1, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    ftc_cli_warn_ignored(cmd, &a, NULL, 0); /* it reads no setting */
    const char *path = a.pos[0];
    ftc_err_t err = {0};
    ftc_cli_path_t cp;
    json_t *js = json ? json_object() : NULL;
    if (json)
        json_object_set_new(js, "path", json_string(path));
    if (ftc_cli_classify(path, &cp, &err) != 0) {
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    if (cp.kind == FTC_KIND_SHARD) {
        uint8_t *buf = NULL;
        size_t len = 0;
        if (ftc_fs_read_file(path, SIZE_MAX / 2, &buf, &len, &err) != 0) {
            ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        if (json)
            json_object_set_new(js, "kind", json_string("shard"));
        ec = ftc__inspect_raw(cmd, path, buf, len, json, js);
        free(buf);
    } else if (cp.kind == FTC_KIND_ZSHARD) {
        ec = ftc__inspect_zshard(cmd, path, json, js);
    } else {
        ec = ftc__inspect_persist(cmd, &a, path, &cp, json, js);
    }
    if (json) {
        json_object_set_new(js, "ok", json_boolean(ec == FTC_EXIT_OK));
        json_dumpf(js, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
    }
out:
    json_decref(js);
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_inspect = {
    "inspect", "show what a shard, .ftcz file, version or persist directory holds",
    ftc__inspect_help, ftc__inspect_run};
