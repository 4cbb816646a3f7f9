/*
 * cmd_synth.c — `ftc synth`: a synthetic trainer. R ranks of synthetic state
 * (trainer/synth.c) take N optimizer-like steps; each step's shards are
 * written and committed as one version through the persist tier
 * (ckpt/persist.c). Used by the demo, and to make test data.
 */
#include "cli/cli.h"

#include "trainer/synth.h"

#include <stdlib.h>
#include <string.h>

static const char ftc__synth_help[] =
    "usage: ftc synth --out DIR --steps N [--bytes SIZE] [--dtype fp32|bf16] [--ranks R]\n"
    "                 [--seed S]\n"
    "\n"
    "Runs a synthetic trainer: R data-parallel ranks (dp=R) whose state has the\n"
    "statistics of a transformer's (weights, AdamW moments, RNG state, data cursor)\n"
    "take N steps; after each step the R shards are persisted to DIR as one version\n"
    "(compressed, delta'd against the previous one, crash-safe; persist.* settings\n"
    "apply, e.g. --persist-keep 3). Prints one line per version: raw bytes, file\n"
    "bytes, ratio, delta or full.\n"
    "\n"
    "Options:\n"
    "  --out DIR              the persist directory (default: persist.dir)\n"
    "  --steps N              steps to run, each persisted (required, 1..1000000)\n"
    "  --bytes SIZE           approximate shard size per rank (default 1MiB, >= 4KiB)\n"
    "  --dtype fp32|bf16      dtype of weights and moments (default fp32)\n"
    "  --ranks R              data-parallel ranks (default 1, 1..4096)\n"
    "  --seed S               RNG seed (default 1); equal seeds give equal states\n";

static int ftc__synth_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    const char *out = NULL, *dtype_s = "fp32";
    uint64_t steps = 0, bytes = 1u << 20, ranks = 1, seed = 1;
    bool have_steps = false;
    const ftc_cli_opt_t opts[] = {
        {"--out", FTC_OPT_STR, &out, NULL},         {"--steps", FTC_OPT_U64, &steps, &have_steps},
        {"--bytes", FTC_OPT_SIZE, &bytes, NULL},    {"--dtype", FTC_OPT_STR, &dtype_s, NULL},
        {"--ranks", FTC_OPT_U64, &ranks, NULL},     {"--seed", FTC_OPT_U64, &seed, NULL},
    };
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    /* the persist writer's settings, persist.dir (without --out) and job.id (in the shards) */
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_PERSIST_WRITER, FTC_CFG_PERSIST_DIR, FTC_CFG_JOB_ID);
    ftc_synth_t **ranks_s = NULL;
    const void **regions = NULL;
    uint64_t *sizes = NULL;
    ftc_persist_t *p = NULL;
    ftc_err_t err = {0};
    int dtype = ftc_dtype_parse(dtype_s);
    if (!out || !*out)
        out = ftc_config_str(a.cfg, FTC_CFG_PERSIST_DIR);
    if (!out || !*out) {
        ec = ftc_cli_usage_error(cmd, "--out DIR (or persist.dir) is required");
        goto out_args;
    }
    if (!have_steps || steps < 1 || steps > 1000000) {
        ec = ftc_cli_usage_error(cmd, "--steps N is required, 1..1000000");
        goto out_args;
    }
    if (dtype != FTC_DTYPE_F32 && dtype != FTC_DTYPE_BF16) {
        ec = ftc_cli_usage_error(cmd, "--dtype must be fp32 or bf16, not '%s'", dtype_s);
        goto out_args;
    }
    if (ranks < 1 || ranks > 4096) {
        ec = ftc_cli_usage_error(cmd, "--ranks must be 1..4096");
        goto out_args;
    }
    if (bytes < 4096) {
        ec = ftc_cli_usage_error(cmd, "--bytes must be at least 4KiB");
        goto out_args;
    }
    int r = (int)ranks;
    ec = FTC_EXIT_FAIL;
    ranks_s = calloc((size_t)r, sizeof *ranks_s);
    regions = calloc((size_t)r, sizeof *regions);
    sizes = calloc((size_t)r, sizeof *sizes);
    if (!ranks_s || !regions || !sizes) {
        ftc_cli_fail(cmd, "out of memory");
        goto out_mem;
    }
    ftc_synth_options_t so = FTC_SYNTH_OPTIONS_INIT;
    so.bytes = bytes;
    so.dtype = dtype;
    for (int i = 0; i < r; i++) {
        ftc_shard_info_t in;
        memset(&in, 0, sizeof in);
        snprintf(in.job_id, sizeof in.job_id, "%s", ftc_config_str(a.cfg, FTC_CFG_JOB_ID));
        in.generation = 1;
        in.dp = (uint32_t)r, in.tp = 1, in.pp = 1;
        in.dp_rank = (uint32_t)i;
        so.seed = seed + (uint64_t)i * 1000003u;
        ranks_s[i] = ftc_synth_create(&so, &in, &err);
        if (!ranks_s[i]) {
            ftc_cli_fail(cmd, "rank %d: %s", i, ftc_err_str(&err));
            goto out_mem;
        }
    }
    p = ftc_cli_persist_open_writer(out, &a, &err);
    if (!p) {
        ftc_cli_fail(cmd, "%s: %s", out, ftc_err_str(&err));
        goto out_mem;
    }
    char b1[32], b2[32];
    printf("synth: %d rank(s) x %s (%s), %llu step(s) -> %s\n", r,
           ftc_cli_bytes(ftc_synth_size(ranks_s[0]), b1), ftc_dtype_name(dtype),
           (unsigned long long)steps, out);
    for (uint64_t s = 1; s <= steps; s++) {
        for (int i = 0; i < r; i++) {
            if (ftc_synth_step(ranks_s[i], s, &err) != 0) {
                ftc_cli_fail(cmd, "rank %d step %llu: %s", i, (unsigned long long)s,
                             ftc_err_str(&err));
                goto out_mem;
            }
            regions[i] = ftc_synth_region(ranks_s[i]);
            sizes[i] = ftc_synth_size(ranks_s[i]);
        }
        if (ftc_persist_write(p, s, regions, sizes, r) != 0) {
            ftc_cli_fail(cmd, "persist step %llu: %s", (unsigned long long)s,
                         ftc_persist_errstr(p));
            goto out_mem;
        }
        ftc_persist_stats_t stv;
        ftc_persist_last_stats(p, &stv);
        printf("v%llu: raw %s, file %s, ratio %.2fx, %s (compress %.3f s, write %.3f s)\n",
               (unsigned long long)s, ftc_cli_bytes(stv.raw_bytes, b1),
               ftc_cli_bytes(stv.file_bytes, b2),
               stv.file_bytes ? (double)stv.raw_bytes / (double)stv.file_bytes : 0.0,
               stv.delta ? "delta" : "full", stv.compress_s, stv.write_s);
        fflush(stdout);
    }
    ec = FTC_EXIT_OK;
out_mem:
    ftc_persist_close(p);
    for (int i = 0; ranks_s && i < r; i++)
        ftc_synth_destroy(ranks_s[i]);
    free(ranks_s);
    free(regions);
    free(sizes);
out_args:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_synth = {"synth",
                                         "run a synthetic trainer that persists every step",
                                         ftc__synth_help, ftc__synth_run};
