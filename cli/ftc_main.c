/*
 * ftc_main.c — the `ftc` command: a table of subcommands and the dispatch
 * to them, plus `ftc --help`, `ftc --version` and `ftc help [CMD|config]`.
 * Each subcommand lives in its own cli/cmd_*.c and parses its own flags.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const ftc_cli_cmd_t *const ftc__cmds[] = {
    &ftc_cli_cmd_inspect, &ftc_cli_cmd_verify, &ftc_cli_cmd_export,
    &ftc_cli_cmd_synth,   &ftc_cli_cmd_restore, &ftc_cli_cmd_status,
    &ftc_cli_cmd_events,  &ftc_cli_cmd_redis,   &ftc_cli_cmd_clean,
    &ftc_cli_cmd_agent,   &ftc_cli_cmd_train,   &ftc_cli_cmd_run,
};
#define FTC__NCMDS ((int)(sizeof ftc__cmds / sizeof ftc__cmds[0]))

static void ftc__usage(FILE *out)
{
    fprintf(out, "usage: ftc COMMAND [ARGS...]\n"
                 "       ftc help COMMAND | ftc COMMAND --help | ftc help config | ftc --version\n"
                 "\nftc keeps distributed training making progress through failures: it\n"
                 "checkpoints into peer memory and a crash-safe persist directory.\n"
                 "\nCommands:\n");
    for (int i = 0; i < FTC__NCMDS; i++)
        fprintf(out, "  %-10s %s\n", ftc__cmds[i]->name, ftc__cmds[i]->summary);
    fprintf(out, "  %-10s %s\n", "help", "show help for a command, or `ftc help config`");
    fprintf(out, "\nSettings come from flags, then FTC_* environment, then --config FILE;\n"
                 "`ftc help config` lists them. Exit codes: 0 ok, 1 failure or corrupt data,\n"
                 "2 usage error.\n");
}

static const ftc_cli_cmd_t *ftc__find(const char *name)
{
    for (int i = 0; i < FTC__NCMDS; i++)
        if (!strcmp(ftc__cmds[i]->name, name))
            return ftc__cmds[i];
    return NULL;
}

static int ftc__help(int argc, char **argv)
{
    if (argc < 3) {
        ftc__usage(stdout);
        return FTC_EXIT_OK;
    }
    if (argc > 3) {
        fprintf(stderr, "ftc help: one topic at a time\n");
        ftc__usage(stderr);
        return FTC_EXIT_USAGE;
    }
    if (!strcmp(argv[2], "config")) {
        ftc_config_t *cfg = ftc_config_create();
        if (!cfg) {
            fprintf(stderr, "ftc help: out of memory\n");
            return FTC_EXIT_FAIL;
        }
        printf("Settings: each one as a flag, an FTC_* environment variable, or a key of the\n"
               "--config JSON file ({\"persist\": {\"keep\": 5}} or {\"persist.keep\": 5}).\n"
               "Flags win over the environment, which wins over the file.\n\n");
        ftc_config_print(cfg, stdout, true);
        ftc_config_destroy(cfg);
        return FTC_EXIT_OK;
    }
    const ftc_cli_cmd_t *cmd = ftc__find(argv[2]);
    if (!cmd) {
        fprintf(stderr, "ftc help: unknown command '%s'\n", argv[2]);
        ftc__usage(stderr);
        return FTC_EXIT_USAGE;
    }
    ftc_cli_print_help(cmd, stdout);
    return FTC_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "ftc: no command given\n");
        ftc__usage(stderr);
        return FTC_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help"))
        return ftc__help(argc > 2 ? 2 : argc, argv);
    if (!strcmp(name, "help"))
        return ftc__help(argc, argv);
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("ftc %d.%d.%d\n", FTC_VERSION_MAJOR, FTC_VERSION_MINOR, FTC_VERSION_PATCH);
        return FTC_EXIT_OK;
    }
    const ftc_cli_cmd_t *cmd = ftc__find(name);
    if (!cmd) {
        if (name[0] == '-')
            fprintf(stderr, "ftc: unknown option '%s' (options go after the command)\n", name);
        else
            fprintf(stderr, "ftc: unknown command '%s'\n", name);
        ftc__usage(stderr);
        return FTC_EXIT_USAGE;
    }
    return cmd->run(cmd, argc - 1, argv + 1);
}
