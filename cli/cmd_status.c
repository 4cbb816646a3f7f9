/*
 * cmd_status.c — the commands on the job's Redis. `ftc status [--json]
 * [--watch [--interval MS]]`: the job's control plane at a glance
 * (detect/status.c does the reading): members and heartbeat ages, the
 * leader, the generation, the committed step and recent events. --watch
 * redraws in place like top until interrupted. `ftc events`: the event
 * stream. `ftc redis`: the embedded Redis in the foreground. `ftc clean`:
 * removes a finished job's keys (detect/control.c, ftc_ctl_clean).
 */
#include "cli/cli.h"
#include "detect/redis_server.h"
#include "detect/status.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static const char ftc__status_help[] =
    "usage: ftc status [--json] [--watch] [--interval MS] [--events N] [--redis URL] [--job ID]\n"
    "\n"
    "Shows the job's members with their heartbeat age, generation and last step,\n"
    "the leader and its lease, the generation, the committed step and the newest\n"
    "events. Redis comes from --redis / FTC_REDIS_URL, else from the job's embedded\n"
    "Redis (its address file in the job directory).\n"
    "\n"
    "Options:\n"
    "  --json                 one JSON document instead of the table\n"
    "  --watch                redraw every --interval ms until Ctrl-C\n"
    "  --interval MS          --watch's period (default 1000, 50..3600000)\n"
    "  --events N             how many recent events to show (default 10, 0..1000)\n";

static volatile sig_atomic_t ftc__status_stop;

static void ftc__status_sig(int sig)
{
    (void)sig;
    ftc__status_stop = 1;
}

/* Connects to the job's Redis and binds a control handle; NULL with *ec the
 * exit code otherwise: 2 for a redis.url that is no URL (FTC_ECONFIG, a bad
 * setting like any other), 1 when Redis cannot be had. */
static ftc_ctl_t *ftc__ctl_open(const ftc_cli_cmd_t *cmd, const ftc_cli_args_t *a, int timeout_ms,
                                int *ec)
{
    ftc_err_t err = {0};
    ftc_redis_url_t url;
    *ec = FTC_EXIT_FAIL;
    int rc = ftc_redis_resolve(a->cfg, false, &url, NULL, &err);
    if (rc != 0) {
        *ec = ftc_cli_redis_error(cmd, a, rc, &err);
        return NULL;
    }
    ftc_redis_options_t ro = FTC_REDIS_OPTIONS_INIT;
    ro.command_timeout_ms = timeout_ms;
    ftc_redis_t *r = ftc_redis_connect(&url, &ro, &err);
    if (!r) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        return NULL;
    }
    ftc_ctl_t *c = ftc_ctl_create(r, ftc_config_str(a->cfg, FTC_CFG_JOB_ID), &err);
    if (!c) {
        ftc_redis_close(r);
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    }
    return c;
}

static int ftc__status_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    bool json = false, watch = false;
    uint64_t interval = 1000, nev = 10;
    const ftc_cli_opt_t opts[] = {{"--json", FTC_OPT_FLAG, &json, NULL},
                                  {"--watch", FTC_OPT_FLAG, &watch, NULL},
                                  {"--interval", FTC_OPT_U64, &interval, NULL},
                                  {"--events", FTC_OPT_U64, &nev, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 4, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_REDIS); /* the job's Redis: all it reads */
    if (interval < 50 || interval > 3600000) { /* each names itself and its value */
        ec = ftc_cli_usage_error(cmd, "--interval %llu: must be 50..3600000 ms",
                                 (unsigned long long)interval);
        goto out;
    }
    if (nev > 1000) {
        ec = ftc_cli_usage_error(cmd, "--events %llu: must be at most 1000",
                                 (unsigned long long)nev);
        goto out;
    }
    ftc_ctl_t *c = ftc__ctl_open(cmd, &a, 2000, &ec);
    if (!c)
        goto out;
    signal(SIGINT, ftc__status_sig);
    signal(SIGTERM, ftc__status_sig);
    ec = FTC_EXIT_OK;
    bool tty = isatty(STDOUT_FILENO);
    do {
        ftc_status_t *s;
        int rc = ftc_status_collect(c, ftc_config_str(a.cfg, FTC_CFG_JOB_ID), (int)nev, &s);
        if (rc) {
            ftc_cli_fail(cmd, "%s", ftc_ctl_errstr(c));
            ec = FTC_EXIT_FAIL;
            if (!watch)
                break;
        } else {
            if (watch && tty && !json)
                printf("\033[H\033[2J"); /* home + clear: redraw in place */
            if (json) {
                char *text = ftc_status_json(s);
                printf("%s\n", text ? text : "{}");
                free(text);
            } else {
                ftc_status_print(s, stdout);
            }
            fflush(stdout);
            ftc_status_free(s);
        }
        for (uint64_t w = 0; watch && w < interval && !ftc__status_stop; w += 50)
            ftc_sleep_ms(50);
    } while (watch && !ftc__status_stop);
    ftc_ctl_destroy(c);
out:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_status = {"status", "members, leader, generation, commits, events",
                                          ftc__status_help, ftc__status_run};

/* ---- ftc events -------------------------------------------------------------------- */

static const char ftc__events_help[] =
    "usage: ftc events [--follow] [--count N] [--json] [--redis URL] [--job ID]\n"
    "\n"
    "Prints the job's event stream (node_lost, rank_exit, hang, straggler, nan,\n"
    "loss_spike, redis_gap, leader, generation, commit, ...), oldest first.\n"
    "\n"
    "Options:\n"
    "  --follow               keep printing new events until Ctrl-C\n"
    "  --count N              the last N events (default 100, 1..100000); with --follow,\n"
    "                         then each new one\n"
    "  --json                 one JSON object per line (id, kind, node, rank, generation,\n"
    "                         step, t_detect_ms, detail)\n";

static void ftc__print_event(void *arg, const ftc_status_event_t *e)
{
    if (arg)
        ftc_event_print_json(e, stdout);
    else
        ftc_event_print(e, stdout);
    fflush(stdout);
}

static int ftc__events_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    bool follow = false, json = false;
    uint64_t count = 100;
    const ftc_cli_opt_t opts[] = {{"--follow", FTC_OPT_FLAG, &follow, NULL},
                                  {"--count", FTC_OPT_U64, &count, NULL},
                                  {"--json", FTC_OPT_FLAG, &json, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 3, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_REDIS); /* the job's Redis: all it reads */
    if (count < 1 || count > 100000) {
        ec = ftc_cli_usage_error(cmd, "--count %llu: must be 1..100000",
                                 (unsigned long long)count);
        goto out;
    }
    /* XREAD BLOCK waits 500 ms at most; the connection allows 2 s */
    ftc_ctl_t *c = ftc__ctl_open(cmd, &a, 2000, &ec);
    if (!c)
        goto out;
    signal(SIGINT, ftc__status_sig);
    signal(SIGTERM, ftc__status_sig);
    ec = FTC_EXIT_OK;
    ftc_status_t *s;
    if (ftc_status_collect(c, ftc_config_str(a.cfg, FTC_CFG_JOB_ID), (int)count, &s) != 0) {
        ftc_cli_fail(cmd, "%s", ftc_ctl_errstr(c));
        ec = FTC_EXIT_FAIL;
        goto out_ctl;
    }
    if (s->events_problem[0]) { /* not an empty listing with exit 0 */
        ftc_cli_fail(cmd, "cannot read the event stream: %s", s->events_problem);
        ftc_status_free(s);
        ec = FTC_EXIT_FAIL;
        goto out_ctl;
    }
    char after[32] = "0";
    for (int i = 0; i < s->n_events; i++) {
        ftc__print_event(json ? &json : NULL, &s->events[i]);
        snprintf(after, sizeof after, "%s", s->events[i].id);
    }
    if (!s->n_events)
        snprintf(after, sizeof after, "$");
    ftc_status_free(s);
    fflush(stdout);
    bool away = false;
    while (follow && !ftc__status_stop) {
        int n = ftc_events_read(c, after, sizeof after, 100, 500, ftc__print_event,
                                json ? &json : NULL);
        if (n < 0) { /* Redis away: say so once (not every retry), keep trying */
            if (!away)
                fprintf(stderr, "ftc events: %s (retrying)\n", ftc_ctl_errstr(c));
            away = true;
            for (int w = 0; w < 20 && !ftc__status_stop; w++)
                ftc_sleep_ms(50);
        } else if (away) {
            fprintf(stderr, "ftc events: redis answers again\n");
            away = false;
        }
    }
out_ctl:
    ftc_ctl_destroy(c);
out:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_events = {"events", "print (or --follow) the job's event stream",
                                          ftc__events_help, ftc__events_run};

/* ---- ftc redis --------------------------------------------------------------------- */

static const char ftc__redis_help[] =
    "usage: ftc redis [--job ID] [--job-dir DIR]\n"
    "\n"
    "Runs the job's embedded Redis in the foreground until Ctrl-C: Debian's\n"
    "redis-server on a free loopback port, hz 100, no persistence, a generated\n"
    "password. Its address is written to JOB_DIR/redis.url (mode 0600), where the\n"
    "other ftc commands of the job find it. Fails if the job already has one.\n";

static int ftc__redis_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, NULL, 0, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_REDIS); /* the job's Redis: all it reads */
    ftc_err_t err = {0};
    ftc_redis_url_t url;
    ftc_redis_server_t *srv = NULL;
    char dir[4096];
    ftc_job_dir(a.cfg, dir, sizeof dir);
    ec = FTC_EXIT_FAIL;
    if (ftc_config_str(a.cfg, FTC_CFG_REDIS_URL)[0]) {
        ec = ftc_cli_usage_error(cmd, "--redis / FTC_REDIS_URL names an external Redis; "
                                      "`ftc redis` starts the embedded one");
        goto out;
    }
    char file[4200];
    snprintf(file, sizeof file, "%s/redis.url", dir);
    if (access(file, F_OK) == 0) {
        ftc_cli_fail(cmd, "%s exists: the job already has a Redis (remove the file if it is "
                          "stale)", file);
        goto out;
    }
    signal(SIGINT, ftc__status_sig);
    signal(SIGTERM, ftc__status_sig);
    if (ftc_redis_resolve(a.cfg, true, &url, &srv, &err) != 0) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    char shown[400];
    printf("redis for job %s at %s\naddress file %s\n", ftc_config_str(a.cfg, FTC_CFG_JOB_ID),
           ftc_redis_url_str(&url, shown, sizeof shown), ftc_redis_server_url_file(srv));
    fflush(stdout);
    while (!ftc__status_stop)
        ftc_sleep_ms(100);
    ftc_redis_server_stop(srv);
    ec = FTC_EXIT_OK;
out:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_redis = {"redis", "run the job's embedded Redis in the foreground",
                                         ftc__redis_help, ftc__redis_run};

/* ---- ftc clean --------------------------------------------------------------------- */

static const char ftc__clean_help[] =
    "usage: ftc clean [--force] [--redis URL] [--job ID]\n"
    "\n"
    "Removes every Redis key of the job (ftc:{ID}:*: members, generation, commit\n"
    "records, failure reports, events, the linked flag, ...), so that the job id\n"
    "starts afresh when used again. Files are not touched (the persist directory,\n"
    "the job directory and its redis.url stay). Prints how many keys it removed.\n"
    "Refuses (exit 1, nothing removed) while the job looks alive: a node's\n"
    "heartbeat, an `ftc run` supervisor's lease or the leader lease exists; they\n"
    "expire within seconds of the job's end.\n"
    "\n"
    "Options:\n"
    "  --force                remove the keys even while the job looks alive\n";

static int ftc__clean_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    bool force = false;
    const ftc_cli_opt_t opts[] = {{"--force", FTC_OPT_FLAG, &force, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 1, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_REDIS); /* the job's Redis: all it reads */
    ftc_ctl_t *c = ftc__ctl_open(cmd, &a, 2000, &ec);
    if (!c)
        goto out;
    const char *job = ftc_config_str(a.cfg, FTC_CFG_JOB_ID);
    ftc_ctl_clean_t res;
    int rc = ftc_ctl_clean(c, force, &res);
    if (rc == FTC_EINPROGRESS) {
        ec = ftc_cli_fail(cmd, "%s; stop the job first (or use --force to remove its keys "
                               "anyway)", ftc_ctl_errstr(c));
    } else if (rc) {
        ec = ftc_cli_fail(cmd, "%s (%llu keys of job %s removed before)", ftc_ctl_errstr(c),
                          (unsigned long long)res.removed, job);
    } else {
        printf("removed %llu key%s of job %s\n", (unsigned long long)res.removed,
               res.removed == 1 ? "" : "s", job);
        ec = FTC_EXIT_OK;
    }
    ftc_ctl_destroy(c);
out:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_clean = {"clean", "remove a finished job's keys from Redis",
                                         ftc__clean_help, ftc__clean_run};
