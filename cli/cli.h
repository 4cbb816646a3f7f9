/*
 * cli.h — the pieces shared by the `ftc` subcommands: the command table
 * entry, one option parser (command flags, config flags, --config FILE,
 * FTC_* environment, --help), exit codes, and small helpers that classify a
 * path and load shards through the ckpt modules. The subcommands themselves
 * parse arguments and print; the work happens in the modules they call.
 *
 * Not thread-safe; used from main() only.
 */
#ifndef FTC_CLI_H
#define FTC_CLI_H

#include "ckpt/agent.h"
#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "core/config.h"
#include "core/err.h"
#include "core/fsio.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of every subcommand. */
enum {
    FTC_EXIT_OK = 0,      /* done; for verify: everything checked is good */
    FTC_EXIT_FAIL = 1,    /* a failure, or corrupt data was found */
    FTC_EXIT_USAGE = 2,   /* bad command line or configuration */
    FTC_CLI_CONTINUE = -1 /* from ftc_cli_parse: arguments fine, run the command */
};

typedef struct ftc_cli_cmd {
    const char *name;    /* "inspect" */
    const char *summary; /* one line for `ftc --help` */
    const char *help;    /* the full text of `ftc help NAME`, usage line first */
    int (*run)(const struct ftc_cli_cmd *cmd, int argc, char **argv); /* argv[0] is NAME */
} ftc_cli_cmd_t;

extern const ftc_cli_cmd_t ftc_cli_cmd_inspect;
extern const ftc_cli_cmd_t ftc_cli_cmd_verify;
extern const ftc_cli_cmd_t ftc_cli_cmd_export;
extern const ftc_cli_cmd_t ftc_cli_cmd_synth;
extern const ftc_cli_cmd_t ftc_cli_cmd_restore;
extern const ftc_cli_cmd_t ftc_cli_cmd_status;
extern const ftc_cli_cmd_t ftc_cli_cmd_events;
extern const ftc_cli_cmd_t ftc_cli_cmd_redis;
extern const ftc_cli_cmd_t ftc_cli_cmd_clean;
extern const ftc_cli_cmd_t ftc_cli_cmd_agent;
extern const ftc_cli_cmd_t ftc_cli_cmd_train;
extern const ftc_cli_cmd_t ftc_cli_cmd_run;

/* ---- option parsing --------------------------------------------------------- */

enum ftc_cli_opt_kind {
    FTC_OPT_FLAG = 0, /* bool, no value */
    FTC_OPT_STR = 1,  /* const char * (points into argv) */
    FTC_OPT_U64 = 2,  /* uint64_t, decimal */
    FTC_OPT_SIZE = 3, /* uint64_t, "64MiB" / "1G" / "4096" */
};

typedef struct ftc_cli_opt {
    const char *name; /* "--json" */
    int kind;         /* ftc_cli_opt_kind */
    void *dest;       /* bool *, const char **, uint64_t * */
    bool *seen;       /* set true when given; may be NULL */
} ftc_cli_opt_t;

/* What a parsed command line gives a subcommand. */
typedef struct ftc_cli_args {
    ftc_config_t *cfg;     /* flags > FTC_* env > --config file > defaults; owned */
    ftc_fault_t fault;     /* parsed from the `fault` config key (none by default) */
    char *pos[8];          /* positional arguments (point into argv) */
    int npos;
} ftc_cli_args_t;

/* Parses argv[1..] of a subcommand against opts (n of them), then the config
 * flags, --config FILE, --help; a long option may be spelled with
 * underscores (--node_rank, --persist_keep: torchrun's spelling) and as
 * --name=VALUE; loads FTC_* environment and the file; applies
 * log.level. Positionals (at most maxpos) go to a->pos. Returns
 * FTC_CLI_CONTINUE, or the exit code to return at once (0 after --help, 2
 * after a usage error, which is printed to stderr with the usage). On
 * FTC_CLI_CONTINUE the caller releases a with ftc_cli_args_free. */
int ftc_cli_parse(const ftc_cli_cmd_t *cmd, int argc, char **argv, const ftc_cli_opt_t *opts,
                  int n, int minpos, int maxpos, ftc_cli_args_t *a);
/* Same for a command whose options end at its first positional (torchrun's
 * `ftc run [OPTIONS] BINARY ARGS...`) or after "--": *rest is the index of
 * BINARY in argv (argc when none); what follows is not parsed. */
int ftc_cli_parse_until(const ftc_cli_cmd_t *cmd, int argc, char **argv,
                        const ftc_cli_opt_t *opts, int n, int *rest, ftc_cli_args_t *a);
void ftc_cli_args_free(ftc_cli_args_t *a);
/* For a command that declares the config keys it reads (used, n of them,
 * NULL and 0 for none; log.level, which the parser applies, always counts as
 * read; every command but run, which reads them all, declares its own): prints
 * "ftc CMD: warning: --agent-timeout-ms (agent.timeout_ms) is ignored by ftc
 * CMD" to stderr for each key set by a flag that is not among them. A
 * warning, not an error (scripts pass a job's shared flags to every
 * command); keys from FTC_* environment or --config FILE, shared by a job's
 * commands, are not warned about. */
void ftc_cli_warn_ignored(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a,
                          const ftc_config_key_t *used, int n);
/* ftc_cli_warn_ignored with the keys listed in place:
 * FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_REDIS, FTC_CFG_PERSIST_DIR). */
#define FTC_CLI_WARN_IGNORED(cmd, a, ...)                                                          \
    do {                                                                                           \
        static const ftc_config_key_t ftc__used_[] = {__VA_ARGS__};                                \
        ftc_cli_warn_ignored((cmd), (a), ftc__used_,                                               \
                             (int)(sizeof ftc__used_ / sizeof *ftc__used_));                       \
    } while (0)
/* The keys read through a shared helper, for the lists given to
 * ftc_cli_warn_ignored; each must follow what its helper reads.
 * FTC_CLI_KEYS_REDIS: ftc_redis_resolve and ftc_job_dir (the job's Redis and
 * directory). FTC_CLI_KEYS_PERSIST_WRITER: ftc_cli_persist_open_writer
 * (ftc_persist_options_from_config, and the parser's a->fault). */
#define FTC_CLI_KEYS_REDIS FTC_CFG_JOB_ID, FTC_CFG_JOB_DIR, FTC_CFG_REDIS_URL
#define FTC_CLI_KEYS_PERSIST_WRITER                                                                \
    FTC_CFG_PERSIST_LEVEL, FTC_CFG_PERSIST_THREADS, FTC_CFG_PERSIST_CHUNK,                         \
        FTC_CFG_PERSIST_SHUFFLE, FTC_CFG_PERSIST_DELTA, FTC_CFG_PERSIST_FULL_EVERY,                \
        FTC_CFG_PERSIST_KEEP, FTC_CFG_FAULT

/* Prints "ftc CMD: message" and the command's usage to stderr; returns 2. */
int ftc_cli_usage_error(const ftc_cli_cmd_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Reports a failed ftc_redis_resolve (rc, err) and returns the exit code: a
 * redis.url that is no URL (FTC_ECONFIG) is a bad setting, a usage error (2)
 * naming where it came from (--redis, FTC_REDIS_URL, the --config file);
 * anything else (unreachable, no Redis known for the job) a failure (1). */
int ftc_cli_redis_error(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, int rc,
                        const ftc_err_t *err);
/* Prints "ftc CMD: message" to stderr; returns 1. */
int ftc_cli_fail(const ftc_cli_cmd_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints the full help of cmd to out. */
void ftc_cli_print_help(const ftc_cli_cmd_t *cmd, FILE *out);

/* The agent's settings from the configuration (redundancy, checkpoint.busy,
 * fabric.provider, persist.*, agent.timeout_ms); job, dir, index, nodes and
 * ranks are the caller's. FTC_EINVAL with err naming the bad setting. */
int ftc_cli_agent_options(ftc_cli_args_t *a, ftc_agent_options_t *o, ftc_err_t *err);
/* The keys ftc_cli_agent_options reads (keep the two in step). */
#define FTC_CLI_KEYS_AGENT                                                                         \
    FTC_CLI_KEYS_PERSIST_WRITER, FTC_CFG_REDUNDANCY, FTC_CFG_CKPT_BUSY, FTC_CFG_CKPT_INFLIGHT,     \
        FTC_CFG_DETECT_HANG_MS, FTC_CFG_DETECT_START_MS, FTC_CFG_DETECT_TTL_MS,                    \
        FTC_CFG_FABRIC_PROVIDER,                                                                   \
        FTC_CFG_PERSIST_DIR, FTC_CFG_PERSIST_EVERY, FTC_CFG_AGENT_TIMEOUT

/* ---- paths -------------------------------------------------------------------- */

enum ftc_cli_kind {
    FTC_KIND_SHARD = 1,   /* a raw shard file (magic FTCSHARD) */
    FTC_KIND_ZSHARD = 2,  /* a compressed shard file (.ftcz) */
    FTC_KIND_VERSION = 3, /* a version directory DIR/vNNN... of a persist directory */
    FTC_KIND_PERSIST = 4, /* a persist directory */
};

typedef struct ftc_cli_path {
    int kind;             /* ftc_cli_kind */
    char persist_dir[4096]; /* VERSION: its parent; PERSIST: the path */
    uint64_t step;        /* VERSION: the step its name carries */
} ftc_cli_path_t;

/* Tells what path is; FTC_ENOENT / FTC_EINVAL with err naming it otherwise. */
int ftc_cli_classify(const char *path, ftc_cli_path_t *out, ftc_err_t *err);

/* Opens the persist directory dir to read it only (ftc_persist_open_reader):
 * nothing is created or removed there, so a writer at work in it (an
 * agent's or trainer's persist tier) keeps its temp files. */
ftc_persist_t *ftc_cli_persist_open(const char *dir, const ftc_cli_args_t *a, ftc_err_t *err);
/* Opens (creates) dir to write versions, with the persist options of cfg
 * and the fault injection of a. */
ftc_persist_t *ftc_cli_persist_open_writer(const char *dir, const ftc_cli_args_t *a,
                                           ftc_err_t *err);

/* Shards read from a path for export / restore: raw regions (malloc'd). */
typedef struct ftc_cli_shards {
    int n;
    uint8_t **buf;
    uint64_t *size;
    uint64_t step;        /* the version's step (persist paths) */
    int fallbacks;        /* newer versions skipped (persist paths) */
    ftc_persist_loaded_t *loaded; /* when loaded from a persist directory */
} ftc_cli_shards_t;

/* Loads the shards that path holds: a raw shard (verified), a full .ftcz
 * (decoded and verified), a version directory, or a persist directory
 * (`step`, or FTC_PERSIST_NEWEST for the newest that verifies). A single
 * file or a version directory whose step is not `step` (when given) is
 * FTC_EINVAL naming both steps. */
int ftc_cli_load_shards(const char *path, uint64_t step, const ftc_cli_args_t *a,
                        ftc_cli_shards_t *out, ftc_err_t *err);
void ftc_cli_shards_free(ftc_cli_shards_t *s);

/* Splits "a/b/c" into "a/b" and "c" ("." when there is no slash). */
int ftc_cli_split_path(const char *path, char *dir, size_t dlen, const char **base,
                       ftc_err_t *err);

/* The usage error of a --domain that ftc_agent_domain_valid refuses (%s: it). */
#define FTC_CLI_DOMAIN_BAD                                                                         \
    "--domain '%.80s': give 1..63 printable characters without spaces, not \"-\" (a label "    \
    "like rack-a)"

/* The usage error of a --node-id that ftc_ctl_node_id_valid refuses (%s: it). */
#define FTC_CLI_NODE_ID_BAD                                                                        \
    "--node-id '%.80s': give 1..64 characters of A-Za-z0-9 . _ : / - (a name like node3)"

/* Reads the file path whole (ftc_fs_read_file), unless its first 8 bytes
 * are neither shard magic (FTCSHARD, FTCZSHRD): then only its first 128
 * bytes, which the readers reject by their magic. A junk file of many GiB
 * was read whole first, or failed as "cannot allocate N bytes". */
int ftc_cli_read_file(const char *path, uint8_t **out, size_t *len, ftc_err_t *err);

/* Checks OUT, the file export or restore writes (what names it: "--out" or
 * "OUT"), before anything is read: FTC_CLI_CONTINUE, or the exit code after
 * the message. A usage error when OUT is a directory, the input path itself,
 * or lies in a version directory (a committed version's file replaced, or a
 * foreign file among them); a failure when its directory does not exist. */
int ftc_cli_check_out(const ftc_cli_cmd_t *cmd, const char *what, const char *out,
                      const char *in);

/* "64.0 MiB" style text for a byte count; buf of 32 bytes. */
const char *ftc_cli_bytes(uint64_t n, char buf[32]);

/* Help text every subcommand shares (config flags). */
#define FTC_CLI_COMMON_HELP                                                                        \
    "\nCommon options:\n"                                                                          \
    "  --config FILE          read settings from a JSON file (flags > FTC_* env > file)\n"         \
    "  --<setting> VALUE      any setting as a flag, e.g. --persist-keep 5 (ftc help config)\n"   \
    "  -h, --help             this help\n"                                                         \
    "\nExit codes: 0 ok, 1 failure or corrupt data, 2 usage error.\n"

#endif
