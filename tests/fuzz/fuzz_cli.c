/*
 * fuzz_cli.c — libFuzzer target for the command-line parser every `ftc`
 * subcommand uses (cli/cli_common.c): ftc_cli_parse and ftc_cli_parse_until
 * (torchrun's `ftc run [OPTIONS] BINARY ARGS...`), with their underscore and
 * --name=VALUE spellings and the config flags (--<setting> VALUE).
 *
 * The input is split at NUL bytes into at most 32 arguments after the
 * command name. Inputs naming a config file are skipped (--config would read
 * any path, a FIFO included). Checked besides memory safety:
 *   - the result is FTC_CLI_CONTINUE, 0 (after --help) or 2 (usage error);
 *   - on FTC_CLI_CONTINUE: parse_until's *rest lies in 1..argc and names the
 *     argument after "--" or the first positional; every option the parser
 *     marked seen was given; the config prints;
 *   - the same argument vector parses the same way twice (no state kept).
 * Its stdout and stderr are closed by -close_fd_mask (fuzz_cli.options).
 */
#include "fuzz_common.h"

#include "cli/cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAXARG = 32 };

static const ftc_cli_cmd_t cmd = {"run", "fuzzed", "usage: ftc run [OPTIONS] BINARY ARGS...\n",
                                  NULL};

static int parse(int argc, char **argv, bool until, int *rest, bool seen[4])
{
    bool flag = false;
    const char *str = NULL;
    uint64_t num = 0, sz = 0;
    memset(seen, 0, 4 * sizeof *seen);
    const ftc_cli_opt_t opts[] = {{"--nproc-per-node", FTC_OPT_U64, &num, &seen[0]},
                                  {"--node-id", FTC_OPT_STR, &str, &seen[1]},
                                  {"--keep-shm", FTC_OPT_FLAG, &flag, &seen[2]},
                                  {"--max-bytes", FTC_OPT_SIZE, &sz, &seen[3]}};
    ftc_cli_args_t a;
    int rc = until ? ftc_cli_parse_until(&cmd, argc, argv, opts, 4, rest, &a)
                   : ftc_cli_parse(&cmd, argc, argv, opts, 4, 0, 8, &a);
    FUZZ_CHECK(rc == FTC_CLI_CONTINUE || rc == FTC_EXIT_OK || rc == FTC_EXIT_USAGE,
               "parse returned %d", rc);
    if (rc != FTC_CLI_CONTINUE)
        return rc;
    if (seen[1])
        FUZZ_CHECK(str != NULL, "--node-id seen without a value");
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        ftc_config_print(a.cfg, null, false);
        fclose(null);
    }
    ftc_cli_args_free(&a);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[MAXARG + 2];
    int argc = 0;
    argv[argc++] = "run";
    for (size_t i = 0; i < size + 1 && argc < MAXARG + 1;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++)
        if (strstr(argv[i], "config")) { /* --config FILE would read any path */
            free(buf);
            return 0;
        }
    bool seen[4], seen2[4];
    int rest = -1, rest2 = -1;
    int rc = parse(argc, argv, true, &rest, seen);
    if (rc == FTC_CLI_CONTINUE) {
        FUZZ_CHECK(rest >= 1 && rest <= argc, "rest %d outside 1..%d", rest, argc);
        /* BINARY is the argument after "--", or a positional (never an option) */
        bool after_dd = rest > 1 && !strcmp(argv[rest - 1], "--");
        if (rest < argc && !after_dd)
            FUZZ_CHECK(argv[rest][0] != '-' || !argv[rest][1],
                       "rest %d names an option '%s'", rest, argv[rest]);
    }
    int rc2 = parse(argc, argv, true, &rest2, seen2);
    FUZZ_CHECK(rc2 == rc && (rc != FTC_CLI_CONTINUE || (rest2 == rest && !memcmp(seen, seen2,
                                                                                  sizeof seen))),
               "a second parse differs: %d/%d rest %d/%d", rc, rc2, rest, rest2);
    (void)parse(argc, argv, false, NULL, seen);
    free(buf);
    return 0;
}
