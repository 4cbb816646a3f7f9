/*
 * cmd_run.c — `ftc run`: torchrun-style launcher that keeps a training
 * binary going through failures (plugins/run.h does the work).
 *
 * One `ftc run` per node, or `--simulate-nodes N` to run N node supervisors
 * on this machine (tests, drills, the demo): the command then starts the
 * job's embedded Redis (unless --redis is given), forks one supervisor per
 * node, writes JOB_DIR/node<I>.pid for drills, and waits for them. With
 * --netns (root) each node runs in a network namespace of its own, joined to
 * a bridge (plugins/netns.h; JOB_DIR/netns names them for drills).
 */
#include "cli/cli.h"
#include "core/log.h"
#include "detect/redis_server.h"
#include "plugins/netns.h"
#include "plugins/run.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char ftc__run_help[] =
    "usage: ftc run [--nnodes MIN:MAX] [--nproc-per-node N] [--tp T] [--pp P] [--node-rank I]\n"
    "               [--max-restarts R]\n"
    "               [--redundancy K|xor:G|rs:G+M] [--redis URL] [--ckpt-dir]\n"
    "               [--in-process] [--keep-shm] [--simulate-nodes N [--netns]]\n"
    "               -- BINARY [ARGS...]\n"
    "\n"
    "Runs BINARY as N ranks on this node, torchrun-style, with an ftc agent that keeps\n"
    "their checkpoints in memory replicated across nodes, and restarts them when a\n"
    "rank or a node fails: the surviving nodes agree on a new generation (between MIN\n"
    "and MAX nodes; more become hot spares), and the ranks start again with the new\n"
    "layout. Ranks linked with libftc (include/ftc.h) restore from the node's memory\n"
    "or a peer's; other binaries can save and load their files in FTC_CKPT_DIR\n"
    "(--ckpt-dir), which ftc replicates to peers and puts back before a restart.\n"
    "\n"
    "Each rank gets RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR\n"
    "MASTER_PORT TORCHELASTIC_RESTART_COUNT and FTC_RANK FTC_WORLD_SIZE FTC_JOB_ID\n"
    "FTC_GENERATION FTC_AGENT_SOCKET FTC_REDIS_URL [FTC_CKPT_DIR].\n"
    "\n"
    "Options:\n"
    "  --nnodes MIN:MAX       nodes of the job (or N = N:N); default 1, or SLURM_NNODES\n"
    "  --nproc-per-node N     ranks per node (default 1)\n"
    "  --tp T, --pp P         the job's tensor / pipeline parallel degrees (default 1):\n"
    "                         the layout planner makes WORLD_SIZE dp x T x P (slots\n"
    "                         beyond it stay idle), keeps survivors on their slots and\n"
    "                         TP groups on one node (docs/recovery.md)\n"
    "  --node-rank I          this node's index (default FTC_NODE_RANK, NODE_RANK,\n"
    "                         SLURM_NODEID, 0)\n"
    "  --node-id ID           name in status and events (default node<I>)\n"
    "  --domain LABEL         failure domain: replicas avoid nodes with the same label\n"
    "  --host ADDR            MASTER_ADDR when this node is node 0 (default: hostname)\n"
    "  --max-restarts R       failed generations before giving up (default 3)\n"
    "  --settle-ms MS         after MIN nodes arrived, wait this long for more (1000)\n"
    "  --join-timeout-ms MS   rendezvous deadline (120000)\n"
    "  --grace-ms MS          SIGTERM to SIGKILL when stopping ranks (3000)\n"
    "  --grow-wait-ms MS      a node joining a running job asks for the grow at the\n"
    "                         next checkpoint boundary, waiting at most MS (10000; 0:\n"
    "                         at once)\n"
    "  --ckpt-dir             give ranks FTC_CKPT_DIR, a replicated directory on tmpfs\n"
    "  --in-process           surviving ranks are not restarted: they leave the failed\n"
    "                         generation and continue in their process with the new\n"
    "                         layout (FTC_ASSIGN_FILE; libftc-aware binaries such as\n"
    "                         ftc train; others are restarted; docs/recovery.md)\n"
    "  --keep-shm             keep this node's checkpoints in /dev/shm when the job is\n"
    "                         done (default: the last committed version goes to the\n"
    "                         persist tier if there is one, then they are removed)\n"
    "  --simulate-nodes N     run N nodes on this machine (embedded Redis unless --redis)\n"
    "  --netns                with --simulate-nodes, as root: each node in a network\n"
    "                         namespace of its own on a private bridge (JOB_DIR/netns\n"
    "                         names them; `ip link set VETH down` cuts a node off)\n"
    "Settings used: redundancy, checkpoint.busy, checkpoint.inflight, fabric.provider,\n"
    "agent.timeout_ms, detect.hang_ms, persist.* (persist.dir enables the persist tier), redis.url, job.id, job.dir.\n";

static volatile sig_atomic_t ftc__run_stop;

static void ftc__run_sig(int sig)
{
    (void)sig;
    ftc__run_stop = 1;
}

static const char *ftc__env_first(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

static int ftc__parse_nnodes(const char *s, int *min, int *max)
{
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s)
        return -1;
    if (*end == ':') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t)
            return -1;
    }
    if (*end || a < 1 || b < a || b > 4096)
        return -1;
    *min = (int)a;
    *max = (int)b;
    return 0;
}

/* --simulate-nodes: one supervisor process per node, this process waits. */
static int ftc__simulate(const ftc_cli_cmd_t *cmd, ftc_run_options_t *o, int n, ftc_netns_t *net)
{
    pid_t pids[4096];
    o->host = "127.0.0.1";
    for (int i = 0; i < n; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p < 0) {
            for (int j = 0; j < i; j++)
                kill(pids[j], SIGTERM);
            return ftc_cli_fail(cmd, "fork: %s", strerror(errno));
        }
        if (p == 0) {
            ftc_run_options_t mine = *o;
            mine.node_index = (uint32_t)i;
            char prefix[32];
            snprintf(prefix, sizeof prefix, "node%d", i);
            ftc_log_configure(ftc_log_level(), prefix);
            ftc_err_t err = {0};
            if (net) { /* its own network: MASTER_ADDR and endpoints on its address */
                if (ftc_netns_enter(net, i, &err)) {
                    fprintf(stderr, "ftc run: node %d: %s\n", i, ftc_err_str(&err));
                    fflush(NULL);
                    _exit(FTC_EXIT_FAIL);
                }
                mine.host = ftc_netns_addr(net, i);
            }
            int ec = ftc_run_node(&mine, &ftc__run_stop, &err);
            if (ec)
                fprintf(stderr, "ftc run: node %d: %s\n", i, ftc_err_str(&err));
            fflush(NULL);
            _exit(ec);
        }
        pids[i] = p;
        char path[4200];
        snprintf(path, sizeof path, "%s/node%d.pid", o->dir, i);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%d\n", (int)p);
            fclose(f);
        }
        printf("ftc run: node %d is pid %d\n", i, (int)p);
        if (net)
            printf("ftc run: node %d: network namespace %s, address %s, veth %s (bridge %s)\n",
                   i, ftc_netns_name(net, i), ftc_netns_addr(net, i), ftc_netns_veth(net, i),
                   ftc_netns_bridge(net));
    }
    fflush(stdout);
    int ok = 0, failed = 0, killed = 0, cut = 0, left = n;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) {
            if (errno == EINTR) {
                if (ftc__run_stop)
                    for (int i = 0; i < n; i++)
                        kill(pids[i], SIGTERM);
                continue;
            }
            break;
        }
        int i = 0;
        while (i < n && pids[i] != p)
            i++;
        if (i == n)
            continue; /* not a node (the embedded Redis is not our child's child) */
        left--;
        if (WIFSIGNALED(st)) {
            killed++;
            printf("ftc run: node %d was killed by signal %d\n", i, WTERMSIG(st));
        } else if (WEXITSTATUS(st) == 0) {
            ok++;
        } else if (WEXITSTATUS(st) == FTC_RUN_EXIT_CUT) {
            cut++; /* like a killed node: the others went on without it */
            printf("ftc run: node %d was cut off from the job's Redis and gave up\n", i);
        } else {
            failed++;
            printf("ftc run: node %d failed (exit %d)\n", i, WEXITSTATUS(st));
        }
        fflush(stdout);
    }
    printf("ftc run: %d nodes finished, %d failed, %d killed, %d cut off\n", ok, failed, killed,
           cut);
    return ok > 0 && failed == 0 ? FTC_EXIT_OK : FTC_EXIT_FAIL;
}

static int ftc__run_main(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    /* BINARY ARGS start after "--" */
    int dd = 1;
    while (dd < argc && strcmp(argv[dd], "--"))
        dd++;
    if (dd >= argc - 1) {
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                ftc_cli_print_help(cmd, stdout);
                return FTC_EXIT_OK;
            }
        return ftc_cli_usage_error(cmd, "no training binary: put it after --");
    }
    static const char *const nn_env[] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES", NULL};
    static const char *const nr_env[] = {"FTC_NODE_RANK", "NODE_RANK", "SLURM_NODEID", NULL};
    const char *nnodes = ftc__env_first(nn_env);
    const char *nrank = ftc__env_first(nr_env);
    uint64_t nproc = 1, node_rank = nrank ? strtoull(nrank, NULL, 10) : 0, restarts = 3,
             simulate = 0, settle = 1000, join_to = 120000, grace = 3000, tp = 1, pp = 1,
             grow_wait = 10000;
    const char *node_id = "", *domain = "", *host = NULL;
    bool ckpt_dir = false, use_netns = false, in_process = false, keep_shm = false;
    const ftc_cli_opt_t opts[] = {{"--nnodes", FTC_OPT_STR, &nnodes, NULL},
                                  {"--nproc-per-node", FTC_OPT_U64, &nproc, NULL},
                                  {"--tp", FTC_OPT_U64, &tp, NULL},
                                  {"--pp", FTC_OPT_U64, &pp, NULL},
                                  {"--node-rank", FTC_OPT_U64, &node_rank, NULL},
                                  {"--node-id", FTC_OPT_STR, &node_id, NULL},
                                  {"--domain", FTC_OPT_STR, &domain, NULL},
                                  {"--host", FTC_OPT_STR, &host, NULL},
                                  {"--max-restarts", FTC_OPT_U64, &restarts, NULL},
                                  {"--settle-ms", FTC_OPT_U64, &settle, NULL},
                                  {"--join-timeout-ms", FTC_OPT_U64, &join_to, NULL},
                                  {"--grace-ms", FTC_OPT_U64, &grace, NULL},
                                  {"--grow-wait-ms", FTC_OPT_U64, &grow_wait, NULL},
                                  {"--ckpt-dir", FTC_OPT_FLAG, &ckpt_dir, NULL},
                                  {"--in-process", FTC_OPT_FLAG, &in_process, NULL},
                                  {"--keep-shm", FTC_OPT_FLAG, &keep_shm, NULL},
                                  {"--simulate-nodes", FTC_OPT_U64, &simulate, NULL},
                                  {"--netns", FTC_OPT_FLAG, &use_netns, NULL}};
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, dd, argv, opts, (int)(sizeof opts / sizeof opts[0]), 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    ftc_err_t err = {0};
    ftc_netns_t *net = NULL;
    ftc_run_options_t o = FTC_RUN_OPTIONS_INIT;
    int mn = 1, mx = 1;
    if (simulate > 4096) {
        ec = ftc_cli_usage_error(cmd, "--simulate-nodes must be 1..4096");
        goto out;
    }
    if (simulate)
        mn = mx = (int)simulate;
    if (nnodes && ftc__parse_nnodes(nnodes, &mn, &mx)) {
        ec = ftc_cli_usage_error(cmd, "--nnodes '%s': use N or MIN:MAX with 1 <= MIN <= MAX",
                                 nnodes);
        goto out;
    }
    if (simulate && (uint64_t)mx < simulate) {
        ec = ftc_cli_usage_error(cmd, "--simulate-nodes %llu is more than --nnodes MAX %d",
                                 (unsigned long long)simulate, mx);
        goto out;
    }
    if (use_netns && (!simulate || simulate > FTC_NETNS_MAX_NODES)) {
        ec = ftc_cli_usage_error(cmd, "--netns needs --simulate-nodes N with N in 1..%d",
                                 FTC_NETNS_MAX_NODES);
        goto out;
    }
    if (use_netns && ftc_netns_check(&err)) { /* before anything is started */
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    if (nproc < 1 || nproc > 64 || node_rank >= (uint64_t)mx) {
        ec = ftc_cli_usage_error(cmd, "--nproc-per-node must be 1..64 and --node-rank below "
                                      "--nnodes MAX (%d)",
                                 mx);
        goto out;
    }
    if (tp < 1 || pp < 1 || tp * pp > nproc * (uint64_t)mx) {
        ec = ftc_cli_usage_error(cmd, "--tp %llu x --pp %llu must be >= 1 and fit the job's "
                                      "slots (--nnodes MAX %d x --nproc-per-node %llu)",
                                 (unsigned long long)tp, (unsigned long long)pp, mx,
                                 (unsigned long long)nproc);
        goto out;
    }
    if (ftc_cli_agent_options(&a, &o.agent, &err)) {
        ec = ftc_cli_usage_error(cmd, "%s", err.msg);
        goto out;
    }
    const ftc_redundancy_t *red = &o.agent.redundancy;
    int par_m = red->kind == FTC_RED_XOR ? 1 : red->kind == FTC_RED_RS ? red->m : 0;
    if (par_m && mn <= par_m) {
        char rs[32];
        FTC_WARN("run", "--nnodes MIN %d: a generation of %d node(s) has too few for a parity "
                 "group of redundancy %s (more than %d): its checkpoints would commit without "
                 "parity until more nodes join; use MIN >= %d", mn, mn,
                 ftc_redundancy_str(red, rs, sizeof rs), par_m, par_m + 1);
    }
    static char dir[4096];
    ftc_job_dir(a.cfg, dir, sizeof dir);
    if (mkdir(dir, 0700) && errno != EEXIST) {
        ec = ftc_cli_fail(cmd, "cannot create the job directory %s: %s", dir, strerror(errno));
        goto out;
    }
    if (use_netns && !(net = ftc_netns_create(dir, (int)simulate, &err))) {
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    ftc_redis_server_t *srv = NULL;
    /* simulated: this process owns the embedded Redis; one node per host:
     * node 0 starts it, the others find it through the job directory */
    bool start = simulate ? true : node_rank == 0;
    int rc = ftc_redis_resolve(a.cfg, start, &o.redis, &srv, &err);
    for (int i = 0; rc == FTC_ENOENT && !start && i < 400; i++) {
        ftc_sleep_ms(50);
        rc = ftc_redis_resolve(a.cfg, false, &o.redis, &srv, &err);
    }
    if (rc) {
        ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    if (net) { /* the nodes reach Redis through the bridge */
        ftc_redis_url_t node_url;
        if (ftc_netns_expose_redis(net, &o.redis, srv != NULL, &node_url, &err)) {
            ftc_redis_server_stop(srv);
            ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        o.redis = node_url;
    }
    static char hostbuf[256];
    if (!host) {
        if (gethostname(hostbuf, sizeof hostbuf))
            snprintf(hostbuf, sizeof hostbuf, "127.0.0.1");
        host = hostbuf;
    }
    o.job = ftc_config_str(a.cfg, FTC_CFG_JOB_ID);
    o.dir = dir;
    o.node_index = (uint32_t)node_rank;
    o.node_id = node_id;
    o.host = host;
    o.min_nodes = mn;
    o.max_nodes = mx;
    o.nproc = (int)nproc;
    o.max_restarts = (int)restarts;
    o.settle_ms = (int)settle;
    o.join_timeout_ms = (int)join_to;
    o.grace_ms = (int)grace;
    o.grow_wait_ms = grow_wait > 3600000 ? 3600000 : (int)grow_wait;
    o.ckpt_dir = ckpt_dir;
    o.in_process = in_process;
    o.keep_shm = keep_shm;
    o.tp = (int)tp;
    o.pp = (int)pp;
    o.agent.domain = domain;
    /* the Redis this process runs stops when it exits: its node(s) wait
     * (bounded) until every member of the last generation saw the job done,
     * a node outside the simulation (a replacement, a returning node) too */
    o.hosts_redis = srv != NULL;
    o.argv = argv + dd + 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ftc__run_sig; /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (simulate) {
        ec = ftc__simulate(cmd, &o, (int)simulate, net);
    } else {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "node%llu", (unsigned long long)node_rank);
        ftc_log_configure(ftc_log_level(), prefix);
        ec = ftc_run_node(&o, &ftc__run_stop, &err);
        if (ec)
            ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    }
    ftc_netns_destroy(net); /* nodes reaped: remove the namespaces, veths, bridge */
    net = NULL;
    ftc_redis_server_stop(srv);
out:
    ftc_netns_destroy(net);
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_run = {"run", "run a training binary, restarted through failures",
                                       ftc__run_help, ftc__run_main};
