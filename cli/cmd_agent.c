/*
 * cmd_agent.c — `ftc agent`: runs one node's agent (ckpt/agent.c) until
 * SIGINT/SIGTERM. It prints the socket its ranks connect to as
 * FTC_AGENT_SOCKET=PATH. Without --redis, node 0 starts the job's embedded
 * Redis and the other nodes find it through the job directory.
 */
#include "ckpt/agent.h"
#include "cli/cli.h"
#include "core/log.h"
#include "detect/control.h"
#include "detect/redis_server.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char ftc__agent_help[] =
    "usage: ftc agent --nodes N [--index I] [--ranks-per-node R] [--redundancy K|xor:G|rs:G+M]\n"
    "                 [--persist-dir DIR] [--persist-every M] [--node-id ID] [--domain LABEL]\n"
    "                 [--redis URL] [--job ID] [--job-dir DIR]\n"
    "\n"
    "Runs this node's agent: it keeps its ranks' checkpoints in shared memory (slots\n"
    "that outlive a crashed rank), replicates each one to K peer agents over\n"
    "libfabric, records commits in Redis, persists every M commits, and serves\n"
    "restores from local memory, a peer's replica or the persist tier.\n"
    "Ranks find it through FTC_AGENT_SOCKET, printed at start.\n"
    "\n"
    "Options:\n"
    "  --nodes N              agents in the job (1..4096)\n"
    "  --index I              this node's index (default: FTC_NODE_RANK, NODE_RANK, 0)\n"
    "  --ranks-per-node R     local ranks (default 1, 1..64); world = N x R\n"
    "  --node-id ID           name in status and events (default node<I>)\n"
    "  --domain LABEL         failure domain: replicas avoid nodes with the same label,\n"
    "                         parity groups spread over the labels (set it on every node)\n"
    "  --persist-every M      persist every M commits (the persist.every setting: 1..1000000,\n"
    "                         default 10)\n"
    "Settings used: redundancy, checkpoint.busy, checkpoint.inflight, fabric.provider,\n"
    "agent.timeout_ms, detect.hang_ms, detect.start_ms, detect.ttl_ms, persist.* (persist.dir\n"
    "enables the persist tier), redis.url, job.id, job.dir.\n";

static volatile sig_atomic_t ftc__agent_stop;

static void ftc__agent_sig(int sig)
{
    (void)sig;
    ftc__agent_stop = 1;
}

/* *out = the first of a, b set in the environment, as a non-negative
 * integer (def when neither is set); -1 with its name in *which when it is
 * something else. */
static int ftc__env_u64(const char *a, const char *b, uint64_t def, uint64_t *out,
                        const char **which)
{
    const char *v = getenv(a);
    *which = a;
    if ((!v || !*v) && b)
        v = getenv(b), *which = b;
    *out = def;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] < '0' || v[0] > '9')
        return -1;
    *out = x;
    return 0;
}

static int ftc__agent_run(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    uint64_t nodes = 0, index = 0, rpn = 1;
    bool nodes_seen = false;
    const char *index_var = NULL;
    bool index_bad = ftc__env_u64("FTC_NODE_RANK", "NODE_RANK", 0, &index, &index_var) != 0;
    const char *node_id = "", *domain = "";
    bool index_seen = false;
    /* --persist-every is the setting's own flag (persist.every, 1..1000000,
     * checked by the parser): an option of this command took any number, and
     * 0 (or 2^32, cast to 0) left a persist.dir silently never written */
    const ftc_cli_opt_t opts[] = {{"--nodes", FTC_OPT_U64, &nodes, &nodes_seen},
                                  {"--index", FTC_OPT_U64, &index, &index_seen},
                                  {"--ranks-per-node", FTC_OPT_U64, &rpn, NULL},
                                  {"--node-id", FTC_OPT_STR, &node_id, NULL},
                                  {"--domain", FTC_OPT_STR, &domain, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, 5, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    /* all but ckptdir.* (ftc run's --ckpt-dir, which an agent alone has not) */
    FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CLI_KEYS_AGENT, FTC_CLI_KEYS_REDIS);
    ftc_err_t err = {0};
    ftc_agent_options_t o;
    memset(&o, 0, sizeof o);
    if (index_bad && !index_seen) {
        ec = ftc_cli_usage_error(cmd, "%s='%s' is not a node index: set it to this node's "
                                      "index below --nodes, or give --index I",
                                 index_var, getenv(index_var));
        goto out;
    }
    /* each names itself and its value; an index from the environment, its variable */
    if (!nodes_seen) { /* it said "--nodes 0: must be 1..4096", of a flag not given */
        ec = ftc_cli_usage_error(cmd, "--nodes N (the agents in the job, 1..4096) is required");
        goto out;
    }
    if (*node_id && !ftc_ctl_node_id_valid(node_id)) {
        ec = ftc_cli_usage_error(cmd, FTC_CLI_NODE_ID_BAD, node_id);
        goto out;
    }
    if (!ftc_agent_domain_valid(domain)) {
        ec = ftc_cli_usage_error(cmd, FTC_CLI_DOMAIN_BAD, domain);
        goto out;
    }
    if (nodes < 1 || nodes > 4096) {
        ec = ftc_cli_usage_error(cmd, "--nodes %llu: must be 1..4096 (give --nodes N)",
                                 (unsigned long long)nodes);
        goto out;
    }
    if (index >= nodes) {
        if (index_seen || !getenv(index_var) || !*getenv(index_var))
            ec = ftc_cli_usage_error(cmd, "--index %llu: must be below --nodes %llu",
                                     (unsigned long long)index, (unsigned long long)nodes);
        else
            ec = ftc_cli_usage_error(cmd, "%s=%s: this node's index must be below --nodes %llu: "
                                          "fix it, or give --index I",
                                     index_var, getenv(index_var), (unsigned long long)nodes);
        goto out;
    }
    if (rpn < 1 || rpn > 64) {
        ec = ftc_cli_usage_error(cmd, "--ranks-per-node %llu: must be 1..64",
                                 (unsigned long long)rpn);
        goto out;
    }
    /* the settings `ftc run` gives its agents too (redundancy, busy policy, ...) */
    if (ftc_cli_agent_options(&a, &o, &err)) {
        ec = ftc_cli_usage_error(cmd, "%s", err.msg);
        goto out;
    }
    char dir[4096];
    ftc_job_dir(a.cfg, dir, sizeof dir);
    ftc_redis_server_t *srv = NULL;
    ec = FTC_EXIT_FAIL;
    /* node 0 may start the embedded Redis; the others wait for its address */
    int rc = ftc_redis_resolve(a.cfg, index == 0, &o.redis, &srv, &err);
    for (int i = 0; rc == FTC_ENOENT && index > 0 && i < 200; i++) {
        ftc_sleep_ms(50);
        rc = ftc_redis_resolve(a.cfg, false, &o.redis, &srv, &err);
    }
    if (rc) { /* a redis.url that is no URL is a bad setting: exit 2 */
        ec = ftc_cli_redis_error(cmd, &a, rc, &err);
        goto out;
    }
    o.job = ftc_config_str(a.cfg, FTC_CFG_JOB_ID);
    o.dir = dir;
    o.index = (uint32_t)index;
    o.nodes = (uint32_t)nodes;
    o.ranks_per_node = (uint32_t)rpn;
    o.node_id = node_id;
    o.domain = domain;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "agent%llu", (unsigned long long)index);
    ftc_log_configure(-1, prefix); /* keeps the level --log-level set */
    signal(SIGINT, ftc__agent_sig);
    signal(SIGTERM, ftc__agent_sig);
    signal(SIGPIPE, SIG_IGN);
    ftc_agent_t *ag = ftc_agent_start(&o, &err);
    if (!ag) {
        ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        ftc_redis_server_stop(srv);
        goto out;
    }
    printf("FTC_AGENT_SOCKET=%s\n", ftc_agent_socket(ag));
    fflush(stdout);
    rc = ftc_agent_run(ag, &ftc__agent_stop);
    ftc_agent_stop(ag);
    ftc_redis_server_stop(srv);
    ec = rc ? FTC_EXIT_FAIL : FTC_EXIT_OK;
out:
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_agent = {"agent", "run this node's checkpoint agent",
                                         ftc__agent_help, ftc__agent_run};
