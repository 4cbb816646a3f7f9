/*
 * cmd_verify.c — `ftc verify PATH`: checks every checksum of a shard file, a
 * .ftcz file, a version directory or every committed version of a persist
 * directory. The checks are ckpt's (ftc_shard_open with FTC_SHARD_VERIFY,
 * ftc_zshard_decode, ftc_persist_verify); this file reports them.
 */
#include "cli/cli.h"

#include "core/hash.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char ftc__verify_help[] =
    "usage: ftc verify PATH\n"
    "\n"
    "Checks every checksum PATH carries and says what is wrong, with the byte offset\n"
    "or file, when something is:\n"
    "  a raw shard file      header, table, metadata and every tensor's xxh3\n"
    "  a .ftcz file          every compressed chunk and the decoded shard; a delta file\n"
    "                        in a version directory is decoded against its base (its\n"
    "                        delta chain verified too); alone, only its header and\n"
    "                        chunk table, and it says so\n"
    "  a version directory   that version, fully (marker, manifest, chunks, delta chain,\n"
    "                        reconstructed shards)\n"
    "  a persist directory   every committed version, one line each:\n"
    "                          v<step>: ok\n"
    "                          v<step>: CORRUPT: <reason>\n"
    "                        incomplete versions (no COMMITTED marker) are listed but are\n"
    "                        not failures: readers never see them\n"
    "\n"
    "Exits 0 when everything checked is good, 1 when anything is corrupt (the reason\n"
    "goes to stderr) or when a persist directory holds no committed version.\n";

/* Decodes the delta file itself against its base: the shard of version
 * base_step (loaded and verified with its own chain) whose raw xxh3 the file
 * names. The version's verify reads the files its manifest lists, not this
 * one: a stray or copied file beside them was called verified unread. 0, or
 * -1 with why. */
static int ftc__verify_delta_file(ftc_persist_t *p, const uint8_t *file, size_t len,
                                  const ftc_zshard_info_t *zi, char *why, size_t cap)
{
    ftc_persist_loaded_t *l = NULL;
    if (ftc_persist_load(p, zi->base_step, &l) != 0) {
        snprintf(why, cap, "its delta base, step %llu: %s", (unsigned long long)zi->base_step,
                 ftc_persist_errstr(p));
        return -1;
    }
    int rc = -1;
    snprintf(why, cap, "no shard of its delta base, step %llu, has the raw xxh3 it names",
             (unsigned long long)zi->base_step);
    for (int i = 0; i < l->n_shards; i++) {
        if (l->sizes[i] != zi->raw_size ||
            ftc_xxh3(l->shards[i], l->sizes[i]) != zi->base_raw_xxh3)
            continue;
        uint8_t *raw = NULL;
        uint64_t raw_size = 0;
        ftc_err_t err = {0};
        ftc_shard_view_t v;
        if (ftc_zshard_decode(file, len, l->shards[i], l->sizes[i], &raw, &raw_size, &err) != 0)
            snprintf(why, cap, "%s", ftc_err_str(&err));
        else if (ftc_shard_open(&v, raw, raw_size, FTC_SHARD_VERIFY, &err) != 0)
            snprintf(why, cap, "decoded shard: %s", ftc_err_str(&err));
        else
            rc = 0;
        free(raw);
        break;
    }
    ftc_persist_loaded_free(l);
    return rc;
}

/* A delta .ftcz decodes only with its base. Inside a version directory it is
 * decoded against its base, and the persist tier verifies the version with
 * its whole delta chain; alone, only the header and chunk table can be
 * checked (ftc_zshard_info), and the output says so. */
static int ftc__verify_delta(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, const char *path,
                             const uint8_t *file, size_t len, const ftc_zshard_info_t *zi)
{
    char dir[4096];
    const char *base = NULL;
    ftc_err_t err = {0};
    ftc_cli_path_t cp;
    char manifest[4200];
    if (ftc_cli_split_path(path, dir, sizeof dir, &base, &err) == 0 &&
        ftc_cli_classify(dir, &cp, &err) == 0 && cp.kind == FTC_KIND_VERSION &&
        snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", dir) > 0 &&
        access(manifest, F_OK) == 0) {
        ftc_persist_t *p = ftc_cli_persist_open(cp.persist_dir, a, &err);
        if (!p)
            return ftc_cli_fail(cmd, "%s: %s", cp.persist_dir, ftc_err_str(&err));
        char why[FTC_ERR_MSG_MAX + 128];
        int rc = ftc_persist_verify(p, cp.step);
        if (rc)
            ftc_cli_fail(cmd, "%s: CORRUPT: %s", path, ftc_persist_errstr(p));
        else if ((rc = ftc__verify_delta_file(p, file, len, zi, why, sizeof why)) != 0)
            ftc_cli_fail(cmd, "%s: CORRUPT: %s", path, why);
        else
            printf("%s: ok (a delta against step %llu, verified with its version v%llu and its "
                   "delta chain)\n",
                   path, (unsigned long long)zi->base_step, (unsigned long long)cp.step);
        ftc_persist_close(p);
        return rc ? FTC_EXIT_FAIL : FTC_EXIT_OK;
    }
    printf("%s: header and chunk table ok; chunk contents NOT verified: a delta against step "
           "%llu decodes only with that base, which is not beside it (verify its version or "
           "persist directory to check everything)\n",
           path, (unsigned long long)zi->base_step);
    return FTC_EXIT_OK;
}

static int ftc__verify_file(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, const char *path,
                            int kind)
{
    uint8_t *file = NULL, *raw = NULL;
    size_t len = 0;
    uint64_t raw_size = 0;
    ftc_err_t err = {0};
    ftc_shard_view_t v;
    int ec = FTC_EXIT_FAIL;
    if (ftc_cli_read_file(path, &file, &len, &err) != 0)
        return ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    if (kind == FTC_KIND_SHARD) {
        if (ftc_shard_open(&v, file, len, FTC_SHARD_VERIFY, &err) != 0) {
            ftc_cli_fail(cmd, "%s: CORRUPT: %s", path, ftc_err_str(&err));
            goto out;
        }
        printf("%s: ok (shard step %llu, d%u.t%u.p%u, %u tensors, %zu bytes)\n", path,
               (unsigned long long)v.info.step, v.info.dp_rank, v.info.tp_rank, v.info.pp_rank,
               v.n_tensors, len);
        ec = FTC_EXIT_OK;
        goto out;
    }
    ftc_zshard_info_t zi;
    if (ftc_zshard_info(file, len, &zi, &err) != 0) {
        ftc_cli_fail(cmd, "%s: CORRUPT: not a raw shard (no FTCSHARD magic at offset 0) and not a "
                          "valid .ftcz file: %s",
                     path, ftc_err_str(&err));
        goto out;
    }
    if (zi.base_step != UINT64_MAX) {
        ec = ftc__verify_delta(cmd, a, path, file, len, &zi);
        goto out;
    }
    if (ftc_zshard_decode(file, len, NULL, 0, &raw, &raw_size, &err) != 0) {
        ftc_cli_fail(cmd, "%s: CORRUPT: %s", path, ftc_err_str(&err));
        goto out;
    }
    if (ftc_shard_open(&v, raw, raw_size, FTC_SHARD_VERIFY, &err) != 0) {
        ftc_cli_fail(cmd, "%s: CORRUPT: decoded shard: %s", path, ftc_err_str(&err));
        goto out;
    }
    printf("%s: ok (compressed shard step %llu, %u chunks, %llu raw bytes)\n", path,
           (unsigned long long)zi.step, zi.n_chunks, (unsigned long long)raw_size);
    ec = FTC_EXIT_OK;
out:
    free(raw);
    free(file);
    return ec;
}

static int ftc__verify_persist(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, const char *path,
                               const ftc_cli_path_t *cp)
{
    ftc_err_t err = {0};
    ftc_persist_t *p = ftc_cli_persist_open(cp->persist_dir, a, &err);
    if (!p)
        return ftc_cli_fail(cmd, "%s: %s", cp->persist_dir, ftc_err_str(&err));
    ftc_persist_version_t *vs = NULL;
    int n = 0, ec = FTC_EXIT_OK, committed = 0, corrupt = 0, unreadable = 0;
    char first[FTC_ERR_MSG_MAX + 64] = "";
    if (ftc_persist_list(p, &vs, &n) != 0) {
        ec = ftc_cli_fail(cmd, "%s: %s", cp->persist_dir, ftc_persist_errstr(p));
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const ftc_persist_version_t *pv = &vs[i];
        if (cp->kind == FTC_KIND_VERSION && pv->step != cp->step)
            continue;
        unsigned long long st = (unsigned long long)pv->step;
        if (pv->state == FTC_PV_INCOMPLETE) {
            printf("v%llu: incomplete (no COMMITTED marker; never restored, not a failure)\n", st);
            continue;
        }
        committed++;
        /* a bad marker is verified too, for the reason: "unreadable or not
         * matching" called a directory without read permission CORRUPT */
        const char *why = NULL;
        int vrc = ftc_persist_verify(p, pv->step);
        if (vrc != 0)
            why = ftc_persist_errstr(p);
        else if (pv->state == FTC_PV_BAD_MARKER)
            why = "COMMITTED marker unreadable or not matching MANIFEST.json";
        if (!why) {
            printf("v%llu: ok\n", st);
            continue;
        }
        /* FTC_EIO: the system refused a read (permissions, a failing disk),
         * which says nothing about the bytes */
        const char *label = vrc == FTC_EIO ? "UNREADABLE" : "CORRUPT";
        unreadable += vrc == FTC_EIO;
        printf("v%llu: %s: %s\n", st, label, why);
        if (corrupt++ == 0)
            snprintf(first, sizeof first, "v%llu: %s", st, why);
    }
    fflush(stdout);
    if (corrupt) {
        ec = ftc_cli_fail(cmd, "%s: %d of %d committed version(s) %s; first: %s", path, corrupt,
                          committed, unreadable ? "corrupt or unreadable" : "corrupt", first);
    } else if (committed == 0) {
        ec = ftc_cli_fail(cmd, "%s: no committed version%s found", path,
                          cp->kind == FTC_KIND_VERSION ? " with that step" : "");
    } else {
        printf("%s: %d committed version(s) verified\n", path, committed);
    }
out:
    free(vs);
    ftc_persist_close(p);
    return ec;
}

static int ftc__verify_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, NULL, 0, 1, 1, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    ftc_cli_warn_ignored(cmd, &a, NULL, 0); /* it reads no setting */
    const char *path = a.pos[0];
    ftc_err_t err = {0};
    ftc_cli_path_t cp;
    if (ftc_cli_classify(path, &cp, &err) != 0)
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    else if (cp.kind == FTC_KIND_SHARD || cp.kind == FTC_KIND_ZSHARD)
        ec = ftc__verify_file(cmd, &a, path, cp.kind);
    else
        ec = ftc__verify_persist(cmd, &a, path, &cp);
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_verify = {"verify", "check every checksum of a checkpoint",
                                          ftc__verify_help, ftc__verify_run};
