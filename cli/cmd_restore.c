/*
 * cmd_restore.c — `ftc restore DIR [--step N] [--rank R] --out FILE`: loads
 * the newest committed version of a persist directory that verifies (or
 * version N), falling back past corrupt ones as ckpt/persist.c does, and
 * writes one of its shards, raw, to FILE atomically.
 */
#include "cli/cli.h"

#include <stdlib.h>

static const char ftc__restore_help[] =
    "usage: ftc restore DIR --out FILE [--step N] [--rank R]\n"
    "\n"
    "Loads a version from the persist directory DIR and writes one shard of it, raw\n"
    "(the FTCSHARD format; `ftc inspect FILE` shows it), to FILE. Without --step it\n"
    "takes the newest committed version that fully verifies; each newer version that\n"
    "fails is skipped with a warning saying why, and the count is printed. DIR may\n"
    "also be a version directory (DIR/vNNN...), which implies its step.\n"
    "\n"
    "Options:\n"
    "  --out FILE             where to write the shard (atomically: temp, fsync, rename)\n"
    "  --step N               restore exactly version N (no fallback)\n"
    "  --rank R               which shard of the version, in manifest order (default 0)\n";

static int ftc__restore_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    const char *out = NULL;
    uint64_t step = FTC_PERSIST_NEWEST, rank = 0;
    const ftc_cli_opt_t opts[] = {{"--out", FTC_OPT_STR, &out, NULL},
                                  {"--step", FTC_OPT_U64, &step, NULL},
                                  {"--rank", FTC_OPT_U64, &rank, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 3, 1, 1, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CFG_FAULT); /* the settings it reads */
    const char *dir = a.pos[0];
    ftc_err_t err = {0};
    ftc_cli_path_t cp;
    ftc_cli_shards_t sh = {0};
    char odir[4096];
    const char *oname = NULL;
    if (!out) {
        ec = ftc_cli_usage_error(cmd, "--out FILE is required");
        goto out_args;
    }
    ec = ftc_cli_check_out(cmd, "--out", out, dir);
    if (ec != FTC_CLI_CONTINUE)
        goto out_args;
    if (ftc_cli_split_path(out, odir, sizeof odir, &oname, &err) != 0) {
        ec = ftc_cli_usage_error(cmd, "--out: %s", ftc_err_str(&err));
        goto out_args;
    }
    ec = FTC_EXIT_FAIL;
    if (ftc_cli_classify(dir, &cp, &err) != 0) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out_args;
    }
    if (cp.kind != FTC_KIND_PERSIST && cp.kind != FTC_KIND_VERSION) {
        ec = ftc_cli_usage_error(cmd, "%s is a file; restore reads a persist directory", dir);
        goto out_args;
    }
    if (ftc_cli_load_shards(dir, step, &a, &sh, &err) != 0) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out_args;
    }
    if (rank >= (uint64_t)sh.n) {
        ftc_cli_fail(cmd, "--rank %llu: version %llu has %d shard(s)", (unsigned long long)rank,
                     (unsigned long long)sh.step, sh.n);
        goto out_shards;
    }
    int r = (int)rank;
    ftc_shard_view_t v;
    if (ftc_shard_open(&v, sh.buf[r], sh.size[r], 0, &err) != 0) {
        ftc_cli_fail(cmd, "shard %d: %s", r, ftc_err_str(&err));
        goto out_shards;
    }
    if (ftc_fs_write_file_atomic(odir, oname, sh.buf[r], sh.size[r], &a.fault, &err) != 0) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out_shards;
    }
    char b[32];
    printf("restored step %llu (generation %llu) from %s: shard %d of %d (d%u.t%u.p%u), %s -> "
           "%s\n",
           (unsigned long long)sh.step, (unsigned long long)v.info.generation, dir, r, sh.n,
           v.info.dp_rank, v.info.tp_rank, v.info.pp_rank, ftc_cli_bytes(sh.size[r], b), out);
    printf("skipped %d newer version(s) that failed verification\n", sh.fallbacks);
    ec = FTC_EXIT_OK;
out_shards:
    ftc_cli_shards_free(&sh);
out_args:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_restore = {"restore",
                                           "write a shard of the newest good version to a file",
                                           ftc__restore_help, ftc__restore_run};
