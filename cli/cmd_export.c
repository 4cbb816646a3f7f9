/*
 * cmd_export.c — `ftc export --safetensors PATH OUT`: loads the shards PATH
 * holds (a raw shard, a full .ftcz, a version directory or a persist
 * directory) and writes them as one safetensors file through
 * plugins/safetensors.c.
 */
#include "cli/cli.h"

#include "plugins/safetensors.h"

#include <stdlib.h>

static const char ftc__export_help[] =
    "usage: ftc export --safetensors PATH OUT [--step N]\n"
    "\n"
    "Writes the tensors of PATH to OUT in the safetensors format, which Python's\n"
    "safetensors and PyTorch load. PATH may be a raw shard file, a full (non-delta)\n"
    ".ftcz file, a version directory, or a persist directory (the newest committed\n"
    "version that verifies, or --step N). Every checksum is verified first. With\n"
    "several shards, tensor names get a \"d<dp>.t<tp>.p<pp>/\" prefix. The metadata\n"
    "carries job, step, generation, layout, coordinates, and each shard metadata\n"
    "record as \"meta.<key>\" (hex). OUT is written atomically (temp, fsync, rename).\n"
    "\n"
    "Options:\n"
    "  --safetensors          the output format (the only one today; required)\n"
    "  --step N               the version to export from a persist directory (for a\n"
    "                         single file or a version directory, it must be its step)\n";

static int ftc__export_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    bool st = false, have_step = false;
    uint64_t step = FTC_PERSIST_NEWEST;
    const ftc_cli_opt_t opts[] = {{"--safetensors", FTC_OPT_FLAG, &st, NULL},
                                  {"--step", FTC_OPT_U64, &step, &have_step}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 2, 2, 2, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CFG_FAULT); /* the settings it reads */
    if (!st) {
        ec = ftc_cli_usage_error(cmd, "choose the output format: --safetensors");
        ftc_cli_args_free(&a);
        return ec;
    }
    const char *path = a.pos[0], *out = a.pos[1];
    ftc_err_t err = {0};
    ftc_cli_shards_t sh;
    ftc_shard_view_t *views = NULL;
    ec = ftc_cli_check_out(cmd, "OUT", out, path);
    if (ec != FTC_CLI_CONTINUE)
        goto out_args;
    if (ftc_cli_load_shards(path, step, &a, &sh, &err) != 0) {
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out_args;
    }
    views = calloc((size_t)sh.n, sizeof *views);
    if (!views) {
        ec = ftc_cli_fail(cmd, "out of memory");
        goto out_shards;
    }
    uint64_t bytes = 0;
    uint32_t tensors = 0;
    for (int i = 0; i < sh.n; i++) {
        /* already verified by the loader; this only builds the views */
        if (ftc_shard_open(&views[i], sh.buf[i], sh.size[i], 0, &err) != 0) {
            ec = ftc_cli_fail(cmd, "%s: shard %d: %s", path, i, ftc_err_str(&err));
            goto out_views;
        }
        bytes += views[i].payload_size;
        tensors += views[i].n_tensors;
    }
    if (ftc_safetensors_export(views, sh.n, out, &a.fault, &err) != 0) {
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out_views;
    }
    char b[32];
    printf("exported step %llu: %d shard(s), %u tensors, %s of tensor data -> %s\n",
           (unsigned long long)sh.step, sh.n, tensors, ftc_cli_bytes(bytes, b), out);
    if (sh.fallbacks)
        printf("note: %d newer version(s) failed verification and were skipped\n", sh.fallbacks);
    ec = FTC_EXIT_OK;
out_views:
    free(views);
out_shards:
    ftc_cli_shards_free(&sh);
out_args:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_export = {"export", "write a checkpoint as a safetensors file",
                                          ftc__export_help, ftc__export_run};
