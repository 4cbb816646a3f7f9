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
#include "core/fabric.h"
#include "core/gpu.h"
#include "core/log.h"
#include "detect/control.h"
#include "detect/redis_server.h"
#include "plugins/netns.h"
#include "plugins/run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char ftc__run_help[] =
    "usage: ftc run [--nnodes MIN:MAX] [--nproc-per-node N|gpu|cpu|auto] [--tp T] [--pp P]\n"
    "               [--node-rank I] [--max-restarts R] [--redundancy K|xor:G|rs:G+M]\n"
    "               [--redis URL | --rdzv-endpoint HOST[:PORT]] [--standalone] [--ckpt-dir]\n"
    "               [--in-process] [--keep-shm] [--simulate-nodes N [--netns]]\n"
    "               [-m | --no-python] [--log-dir DIR [-r N] [-t N]] [OPTIONS...]\n"
    "               BINARY|SCRIPT.py|MODULE [ARGS...]   (or: [OPTIONS] -- BINARY [ARGS...])\n"
    "\n"
    "Runs BINARY as N ranks on this node, torchrun-style, with an ftc agent that keeps\n"
    "their checkpoints in memory replicated across nodes, and restarts them when a\n"
    "rank or a node fails: the surviving nodes agree on a new generation (between MIN\n"
    "and MAX nodes; more become hot spares), and the ranks start again with the new\n"
    "layout. Ranks linked with libftc (include/ftc.h) restore from the node's memory\n"
    "or a peer's; other binaries can save and load their files in FTC_CKPT_DIR\n"
    "(--ckpt-dir), which ftc replicates to peers and puts back before a restart.\n"
    "\n"
    "The command line is torchrun's: options end at the first argument that is not\n"
    "one (or at --); it and everything after it go to the ranks untouched. Options\n"
    "may be spelled with underscores (--nproc_per_node) and as --name=VALUE. A\n"
    "SCRIPT.py runs as `$PYTHON -u SCRIPT.py ARGS` (PYTHON, else python3 on PATH),\n"
    "-m MODULE as `python3 -u -m MODULE ARGS`; any other BINARY is executed.\n"
    "\n"
    "Each rank gets RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK\n"
    "GROUP_WORLD_SIZE ROLE_RANK ROLE_NAME ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT\n"
    "TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID and\n"
    "FTC_RANK FTC_WORLD_SIZE FTC_JOB_ID FTC_GENERATION FTC_NODE_RANK FTC_AGENT_SOCKET\n"
    "FTC_REDIS_URL [FTC_CKPT_DIR]; OMP_NUM_THREADS=1 when N > 1 and it is not set\n"
    "(as torchrun).\n"
    "Exit 3 (besides the codes below): this node was cut off from the job's Redis and\n"
    "gave up; the other nodes went on without it.\n"
    "\n"
    "Options:\n"
    "  --nnodes MIN:MAX       nodes of the job (or N = N:N); default 1, or SLURM_NNODES\n"
    "  --nproc-per-node N     ranks per node (default 1): 1..64, gpu (the node's CUDA\n"
    "                         devices), cpu (its online cores), auto (gpu, else cpu)\n"
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
    "                         at once; more than 3600000 waits 3600000)\n"
    "  --ckpt-dir             give ranks FTC_CKPT_DIR, a replicated directory on tmpfs\n"
    "  --in-process           surviving ranks are not restarted: they leave the failed\n"
    "                         generation and continue in their process with the new\n"
    "                         layout (FTC_ASSIGN_FILE; libftc-aware binaries such as\n"
    "                         ftc train; others are restarted; docs/recovery.md)\n"
    "  --keep-shm             keep this node's checkpoints in /dev/shm when the job is\n"
    "                         done (default: the last committed version goes to the\n"
    "                         persist tier if there is one, then they are removed)\n"
    "  --simulate-nodes N     run N nodes on this machine (embedded Redis unless --redis;\n"
    "                         N 1..4096, at most --nnodes MAX, which defaults to N)\n"
    "  --netns                with --simulate-nodes, as root: each node in a network\n"
    "                         namespace of its own on a private bridge (JOB_DIR/netns\n"
    "                         names them; `ip link set VETH down` cuts a node off)\n"
    "torchrun's options (docs/cli.md has the details):\n"
    "  --standalone           one node with the job's embedded Redis\n"
    "  --rdzv-endpoint H[:P]  the job's Redis (= --redis redis://H:P, port 6379 by\n"
    "                         default; or a redis:// URL); password: FTC_REDIS_PASSWORD\n"
    "                         or FTC_REDIS_PASSWORD_FILE\n"
    "  --rdzv-backend B       redis (or ftc); c10d, etcd, static: refused (use Redis)\n"
    "  --rdzv-id ID           the job id (= --job)\n"
    "  --rdzv-conf K=V,...    torchrun's: join_timeout/timeout -> --join-timeout-ms,\n"
    "                         last_call_timeout -> --settle-ms, keep_alive_interval x\n"
    "                         keep_alive_max_attempt -> --detect-ttl-ms (seconds)\n"
    "  --master-addr ADDR     this node's MASTER_ADDR (= --host) when ADDR is one of its\n"
    "                         addresses; ignored (INFO) on the other nodes\n"
    "  --local-addr ADDR      = --host\n"
    "  --master-port P        every generation's MASTER_PORT (default: a free port per\n"
    "                         generation); a port node 0 cannot bind fails the round\n"
    "  -m, --module           BINARY is a Python module: python3 -u -m MODULE ARGS\n"
    "  --no-python            execute BINARY (even a .py) instead of running it in Python\n"
    "  --log-dir DIR          where -r / -t write: DIR/JOB/attempt_GEN/RANK/stdout.log and\n"
    "                         stderr.log (default JOB_DIR/logs)\n"
    "  -r, --redirects N      the ranks' streams to their files only: 0 none, 1 stdout,\n"
    "                         2 stderr, 3 both; or per local rank: 0:1,1:2\n"
    "  -t, --tee N            to the files and the console (same values)\n"
    "  --local-ranks-filter L the local ranks (0,1,...) whose output reaches the console\n"
    "  --role NAME            ROLE_NAME of the ranks (default: default)\n"
    "  --monitor-interval S, --start-method M   accepted, not used (an INFO says why)\n"
    "Settings used: redundancy, checkpoint.busy, checkpoint.inflight, fabric.provider,\n"
    "agent.timeout_ms, detect.hang_ms, detect.start_ms, detect.ttl_ms, persist.* (persist.dir\n"
    "enables the persist tier), redis.url, job.id, job.dir.\n";

static volatile sig_atomic_t ftc__run_stop;

static void ftc__run_sig(int sig)
{
    (void)sig;
    ftc__run_stop = 1;
}

static void ftc__run_sig_none(int sig) { (void)sig; }

/* The first of names set (non-empty) in the environment; its name in *which. */
static const char *ftc__env_first(const char *const *names, const char **which)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            if (which)
                *which = names[i];
            return v;
        }
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
static int ftc__simulate(const ftc_cli_cmd_t *cmd, ftc_run_options_t *o, int n, ftc_netns_t *net,
                         ftc_redis_server_t *srv)
{
    pid_t pids[4096];
    o->host = "127.0.0.1";
    pid_t parent = getpid();
    /* a child subreaper: a node supervisor SIGKILLed (a drill) takes its
     * ranks with it (PR_SET_PDEATHSIG), and they, orphaned, become ours, so
     * the reap below removes their shm regions too (init's would not) */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        FTC_WARN("run", "PR_SET_CHILD_SUBREAPER: %s: the ranks of a killed node are not reaped "
                 "here, and their shm regions stay", strerror(errno));
    for (int i = 0; i < n; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p < 0) {
            for (int j = 0; j < i; j++)
                kill(pids[j], SIGTERM);
            return ftc_cli_fail(cmd, "fork: %s", strerror(errno));
        }
        if (p == 0) {
            /* the nodes end with this process, however it ends (a SIGKILL
             * too): SIGTERM stops the node as `ftc run` stops, its ranks
             * first (they trained on until their Redis, gone with this
             * process, had been silent for --join-timeout-ms) */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(FTC_EXIT_FAIL);
            ftc_run_options_t mine = *o;
            mine.node_index = (uint32_t)i;
            char prefix[32];
            snprintf(prefix, sizeof prefix, "node%d", i);
            ftc_log_configure(-1, prefix);
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
    bool passed_on = false;
    while (left > 0) {
        /* a stop is looked for before each wait, which polls: a signal taken
         * while this loop was not blocked (reaping, printing) interrupted no
         * wait, and the stop was never passed on (the nodes ran on) */
        if (ftc__run_stop && !passed_on) {
            for (int i = 0; i < n; i++)
                if (pids[i] > 0) /* (0: reaped, its pid free for another process) */
                    kill(pids[i], SIGTERM);
            passed_on = true;
        }
        int st;
        pid_t p = ftc_fabric_reap(-1, &st, WNOHANG); /* (and its shm regions) */
        if (p == 0) {
            ftc_sleep_ms(20);
            continue;
        }
        if (p < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int i = 0;
        while (i < n && pids[i] != p)
            i++;
        if (i == n) { /* not a node: an orphan of a killed node's (its rank), or a helper */
            /* the job's embedded Redis (this process's child) is reaped here when it
             * dies: it is forgotten, so that its stop never signals the pid, free now */
            if (ftc_redis_server_reaped(srv, p))
                FTC_WARN("run", "the job's embedded redis-server (pid %d) exited (%s %d)",
                         (int)p, WIFSIGNALED(st) ? "killed by signal" : "exit status",
                         WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            continue;
        }
        left--;
        pids[i] = 0; /* reaped: never signalled again */
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
    /* the orphans of killed nodes that have exited by now (PR_SET_PDEATHSIG
     * ends them at once); one still alive goes to init when we exit */
    for (pid_t p; (p = ftc_fabric_reap(-1, NULL, WNOHANG)) > 0;)
        (void)ftc_redis_server_reaped(srv, p);
    printf("ftc run: %d nodes finished, %d failed, %d killed, %d cut off\n", ok, failed, killed,
           cut);
    return ok > 0 && failed == 0 ? FTC_EXIT_OK : FTC_EXIT_FAIL;
}

/* --nproc-per-node N | gpu | cpu | auto (torchrun's values). */
/* torchrun's --rdzv-conf "k=v,k2=v2" (seconds): join_timeout (or timeout)
 * -> the rendezvous deadline, last_call_timeout -> the settle time,
 * keep_alive_interval (or heartbeat) x keep_alive_max_attempt (3) -> the
 * heartbeat TTL; keys of c10d's store with no equivalent here are ignored
 * with a warning; an unknown key or a bad value is a usage error. join and
 * settle are NULL where the ftc flag was given (it wins), and so is the
 * TTL when --detect-ttl-ms was. */
static int ftc__rdzv_conf(const ftc_cli_cmd_t *cmd, const char *conf, uint64_t *join,
                          uint64_t *settle, ftc_config_t *cfg)
{
    char buf[1024];
    if (strlen(conf) >= sizeof buf)
        return ftc_cli_usage_error(cmd, "--rdzv-conf is longer than %zu bytes", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", conf);
    double join_s = -1, timeout_s = -1, keep_s = -1, attempts = 3;
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return ftc_cli_usage_error(cmd, "--rdzv-conf: '%s' is not KEY=VALUE", kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        static const char *const ignored[] = {"read_timeout", "close_timeout", "is_host",
                                              "use_agent_store", "use_libuv", "store_type"};
        bool skip = false;
        for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
            skip |= !strcmp(k, ignored[i]);
        if (skip) {
            FTC_WARN("run", "--rdzv-conf %s=%s ignored: ftc's rendezvous runs on Redis and has "
                     "no such setting", k, v);
            continue;
        }
        char *end = NULL;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= 0) || x > 86400 * 30)
            return ftc_cli_usage_error(cmd, "--rdzv-conf %s='%s': expected seconds (a number "
                                            ">= 0)", k, v);
        if (!strcmp(k, "join_timeout"))
            join_s = x;
        else if (!strcmp(k, "timeout"))
            timeout_s = x;
        else if (!strcmp(k, "last_call_timeout"))
        {
            if (settle)
                *settle = (uint64_t)(x * 1000);
        }
        else if (!strcmp(k, "keep_alive_interval") || !strcmp(k, "heartbeat"))
            keep_s = x;
        else if (!strcmp(k, "keep_alive_max_attempt"))
            attempts = x < 1 ? 1 : x;
        else
            return ftc_cli_usage_error(cmd, "--rdzv-conf: unknown key '%s' (ftc takes "
                                            "join_timeout, timeout, last_call_timeout, "
                                            "keep_alive_interval (or heartbeat), "
                                            "keep_alive_max_attempt; and ignores read_timeout, "
                                            "close_timeout, is_host, use_agent_store, use_libuv, "
                                            "store_type)", k);
    }
    if (join && (join_s >= 0 || timeout_s >= 0))
        *join = (uint64_t)((join_s >= 0 ? join_s : timeout_s) * 1000);
    if (keep_s > 0 && ftc_config_source(cfg, FTC_CFG_DETECT_TTL_MS) != FTC_SRC_FLAG) {
        char ttl[32];
        double ms = keep_s * attempts * 1000;
        snprintf(ttl, sizeof ttl, "%.0f", ms < 200 ? 200 : ms > 600000 ? 600000 : ms);
        ftc_err_t err = {0};
        if (ftc_config_set(cfg, "detect.ttl_ms", ttl, FTC_SRC_FLAG, &err) != 0)
            return ftc_cli_usage_error(cmd, "--rdzv-conf: %s", ftc_err_str(&err));
    }
    return 0;
}

static int ftc__parse_nproc(const ftc_cli_cmd_t *cmd, const char *v, uint64_t *out)
{
    char *end;
    if (v[0] >= '0' && v[0] <= '9') {
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || *end || n < 1 || n > 64)
            return ftc_cli_usage_error(cmd, "--nproc-per-node '%s': give 1..64, gpu, cpu or auto",
                                       v);
        *out = n;
        return 0;
    }
    bool gpu = !strcmp(v, "gpu"), cpu = !strcmp(v, "cpu"), aut = !strcmp(v, "auto");
    if (!gpu && !cpu && !aut)
        return ftc_cli_usage_error(cmd, "--nproc-per-node '%s': give 1..64, gpu, cpu or auto", v);
    ftc_err_t why = {0};
    int g = gpu || aut ? ftc_gpu_count(&why) : 0;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    if (gpu && g < 1)
        return ftc_cli_usage_error(cmd, "--nproc-per-node gpu: no CUDA device on this node (%s); "
                                        "give a number, or cpu",
                                   !ftc_gpu_built() ? "this ftc was built without CUDA"
                                   : why.msg[0]     ? why.msg
                                                    : "none found");
    long n = g > 0 ? g : c;
    if (n < 1)
        n = 1;
    if (n > 64)
        return ftc_cli_usage_error(cmd, "--nproc-per-node %s: %ld %s, more than the 64 ranks a "
                                        "node runs; give a number",
                                   v, n, g > 0 ? "GPUs" : "online cores");
    FTC_INFO("run", "--nproc-per-node %s: %ld rank(s) (%s)", v, n,
             g > 0 ? "CUDA devices" : "online cores");
    *out = (uint64_t)n;
    return 0;
}

/* --redirects / --tee: "N" for every local rank or "L:N,L:N" (N 0..3). */
static int ftc__parse_streams(const char *v, uint8_t out[64])
{
    memset(out, 0, 64);
    char *end;
    if (!strchr(v, ':')) {
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 0 || n > 3)
            return -1;
        memset(out, (int)n, 64);
        return 0;
    }
    const char *p = v;
    for (;;) {
        long l = strtol(p, &end, 10);
        if (end == p || *end != ':' || l < 0 || l > 63)
            return -1;
        p = end + 1;
        long n = strtol(p, &end, 10);
        if (end == p || n < 0 || n > 3)
            return -1;
        out[l] = (uint8_t)n;
        if (!*end)
            return 0;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

/* --local-ranks-filter 0,1: the local ranks shown on the console. */
static int ftc__parse_ranks(const char *v, uint64_t *mask)
{
    *mask = 0;
    const char *p = v;
    char *end;
    for (;;) {
        long l = strtol(p, &end, 10);
        if (end == p || l < 0 || l > 63)
            return -1;
        *mask |= 1ull << l;
        if (!*end)
            return 0;
        if (*end != ',')
            return -1;
        p = end + 1;
    }
}

/* "host:port" or "[v6]:port" (a bare "::1" has no port). */
static bool ftc__has_port(const char *ep)
{
    const char *colon = strrchr(ep, ':'), *br = strrchr(ep, ']');
    if (!colon)
        return false;
    if (br)
        return br < colon;
    return colon == strchr(ep, ':');
}

/* Whether host names an address of this machine (a bind to it works). */
static bool ftc__is_local_addr(const char *host)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    bool local = false;
    for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0; /* port 0 */
        close(fd);
    }
    freeaddrinfo(res);
    return local;
}

/* NULL when BINARY (or the Python interpreter) can be executed as the ranks
 * exec it (execvpe: a path, else the first regular executable file of that
 * name on PATH), else why not. */
static const char *ftc__not_executable(const char *prog)
{
    struct stat st;
    if (!*prog)
        return "is empty: give the training program";
    if (strchr(prog, '/')) {
        if (stat(prog, &st) != 0)
            return errno == ENOENT ? "does not exist" : strerror(errno);
        if (S_ISDIR(st.st_mode))
            return "is a directory, not a program";
        if (!S_ISREG(st.st_mode) || access(prog, X_OK) != 0)
            return "is not executable: chmod +x it, or run it through its interpreter "
                   "(a SCRIPT.py runs in python3)";
        return NULL;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[4200];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", prog);
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
            return NULL;
        p += n;
        if (*p == ':')
            p++;
    }
    return "is not an executable on PATH: give its path (./NAME for one here)";
}

/* fds 0..2 open, on /dev/null where closed (`ftc run <&- 2>&-`, a daemon
 * that closed them): a closed one was taken by this process's next socket
 * (Redis, its agent) or file, and the ranks, which get 0..2 as they are,
 * read from it and wrote their error output into it. */
static void ftc__std_fds(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

static int ftc__run_main(const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    ftc__std_fds();
    static const char *const nn_env[] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES", NULL};
    static const char *const nr_env[] = {"FTC_NODE_RANK", "NODE_RANK", "SLURM_NODEID", NULL};
    const char *nnodes_var = NULL, *nnodes = ftc__env_first(nn_env, &nnodes_var);
    const char *nrank_var = NULL, *nrank = ftc__env_first(nr_env, &nrank_var);
    char *nrank_end = NULL;
    errno = 0;
    uint64_t nrank_v = nrank ? strtoull(nrank, &nrank_end, 10) : 0;
    /* a variable that is no index is refused below, unless --node-rank is given */
    bool nrank_bad = nrank && (errno || *nrank_end || nrank[0] < '0' || nrank[0] > '9');
    uint64_t nproc = 1, node_rank = nrank_bad ? 0 : nrank_v, restarts = 3,
             simulate = 0, settle = 1000, join_to = 120000, grace = 3000, tp = 1, pp = 1,
             grow_wait = 10000, master_port = 0;
    const char *node_id = "", *domain = "", *host = NULL, *nproc_s = NULL, *master_addr = NULL,
               *local_addr = NULL, *rdzv_endpoint = NULL, *rdzv_backend = NULL, *rdzv_id = NULL,
               *rdzv_conf = NULL, *log_dir = NULL, *redirects = NULL, *tee = NULL,
               *ranks_filter = NULL, *monitor = NULL, *start_method = NULL, *role = NULL;
    bool ckpt_dir = false, use_netns = false, in_process = false, keep_shm = false,
         standalone = false, module = false, no_python = false, nnodes_seen = false,
         node_rank_seen = false, settle_seen = false, join_seen = false;
    const ftc_cli_opt_t opts[] = {{"--nnodes", FTC_OPT_STR, &nnodes, &nnodes_seen},
                                  {"--nproc-per-node", FTC_OPT_STR, &nproc_s, NULL},
                                  {"--tp", FTC_OPT_U64, &tp, NULL},
                                  {"--pp", FTC_OPT_U64, &pp, NULL},
                                  {"--node-rank", FTC_OPT_U64, &node_rank, &node_rank_seen},
                                  {"--node-id", FTC_OPT_STR, &node_id, NULL},
                                  {"--domain", FTC_OPT_STR, &domain, NULL},
                                  {"--host", FTC_OPT_STR, &host, NULL},
                                  {"--max-restarts", FTC_OPT_U64, &restarts, NULL},
                                  {"--settle-ms", FTC_OPT_U64, &settle, &settle_seen},
                                  {"--join-timeout-ms", FTC_OPT_U64, &join_to, &join_seen},
                                  {"--grace-ms", FTC_OPT_U64, &grace, NULL},
                                  {"--grow-wait-ms", FTC_OPT_U64, &grow_wait, NULL},
                                  {"--ckpt-dir", FTC_OPT_FLAG, &ckpt_dir, NULL},
                                  {"--in-process", FTC_OPT_FLAG, &in_process, NULL},
                                  {"--keep-shm", FTC_OPT_FLAG, &keep_shm, NULL},
                                  {"--simulate-nodes", FTC_OPT_U64, &simulate, NULL},
                                  {"--netns", FTC_OPT_FLAG, &use_netns, NULL},
                                  /* torchrun's */
                                  {"--standalone", FTC_OPT_FLAG, &standalone, NULL},
                                  {"--rdzv-endpoint", FTC_OPT_STR, &rdzv_endpoint, NULL},
                                  {"--rdzv-backend", FTC_OPT_STR, &rdzv_backend, NULL},
                                  {"--rdzv-id", FTC_OPT_STR, &rdzv_id, NULL},
                                  {"--rdzv-conf", FTC_OPT_STR, &rdzv_conf, NULL},
                                  {"--master-addr", FTC_OPT_STR, &master_addr, NULL},
                                  {"--master-port", FTC_OPT_U64, &master_port, NULL},
                                  {"--local-addr", FTC_OPT_STR, &local_addr, NULL},
                                  {"-m", FTC_OPT_FLAG, &module, NULL},
                                  {"--module", FTC_OPT_FLAG, &module, NULL},
                                  {"--no-python", FTC_OPT_FLAG, &no_python, NULL},
                                  {"--log-dir", FTC_OPT_STR, &log_dir, NULL},
                                  {"-r", FTC_OPT_STR, &redirects, NULL},
                                  {"--redirects", FTC_OPT_STR, &redirects, NULL},
                                  {"-t", FTC_OPT_STR, &tee, NULL},
                                  {"--tee", FTC_OPT_STR, &tee, NULL},
                                  {"--local-ranks-filter", FTC_OPT_STR, &ranks_filter, NULL},
                                  {"--role", FTC_OPT_STR, &role, NULL},
                                  {"--monitor-interval", FTC_OPT_STR, &monitor, NULL},
                                  {"--start-method", FTC_OPT_STR, &start_method, NULL}};
    ftc_cli_args_t a;
    int rest = argc;
    int ec = ftc_cli_parse_until(cmd, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
                                 &rest, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    if (rest >= argc) {
        ftc_cli_args_free(&a);
        return ftc_cli_usage_error(cmd, "no training binary: give it after the options "
                                        "(ftc run [OPTIONS] BINARY [ARGS...], or -- BINARY)");
    }
    ftc_err_t err = {0};
    ftc_netns_t *net = NULL;
    char **pyargv = NULL, **bin_argv = NULL;
    ftc_run_options_t o = FTC_RUN_OPTIONS_INIT;
    int mn = 1, mx = 1;
    if (simulate > 4096) {
        ec = ftc_cli_usage_error(cmd, "--simulate-nodes must be 1..4096");
        goto out;
    }
    if (simulate)
        mn = mx = (int)simulate;
    if (nnodes && ftc__parse_nnodes(nnodes, &mn, &mx)) {
        ec = nnodes_seen ? ftc_cli_usage_error(cmd, "--nnodes '%s': use N or MIN:MAX with 1 <= "
                                                    "MIN <= MAX",
                                               nnodes)
                         : ftc_cli_usage_error(cmd, "%s='%s' is not a node count: fix it, or "
                                                    "give --nnodes N or MIN:MAX",
                                               nnodes_var, nnodes);
        goto out;
    }
    /* ---- torchrun's options ---- */
    if (nproc_s && (ec = ftc__parse_nproc(cmd, nproc_s, &nproc)) != 0)
        goto out;
    ec = FTC_EXIT_USAGE;
    if (rdzv_backend && strcmp(rdzv_backend, "redis") && strcmp(rdzv_backend, "ftc")) {
        bool known = !strcmp(rdzv_backend, "c10d") || !strcmp(rdzv_backend, "etcd") ||
                     !strcmp(rdzv_backend, "etcd-v2") || !strcmp(rdzv_backend, "static");
        ftc_cli_usage_error(cmd, "--rdzv-backend %s %s: ftc's rendezvous runs on Redis: start one "
                            "with `ftc redis` (it writes its URL to JOB_DIR/redis.url) and give "
                            "--rdzv-endpoint HOST:PORT or --redis URL (--rdzv-backend redis, or "
                            "none); on one host (--standalone, --simulate-nodes) omit both for "
                            "the job's embedded Redis",
                            rdzv_backend, known ? "is not supported" : "is unknown");
        goto out;
    }
    if (rdzv_conf && rdzv_conf[0] &&
        ftc__rdzv_conf(cmd, rdzv_conf, join_seen ? NULL : &join_to, settle_seen ? NULL : &settle,
                       a.cfg) != 0)
        goto out;
    bool redis_flag = ftc_config_source(a.cfg, FTC_CFG_REDIS_URL) == FTC_SRC_FLAG;
    if (standalone && !nnodes_seen && !simulate)
        mn = mx = 1; /* not SLURM_NNODES: one node */
    if (standalone && (mx > 1 || simulate > 1 || rdzv_endpoint || redis_flag ||
                       (node_rank_seen && node_rank != 0))) {
        ftc_cli_usage_error(cmd, "--standalone is one node with the job's embedded Redis: "
                            "drop --nnodes > 1, --simulate-nodes > 1, --node-rank, "
                            "--rdzv-endpoint and --redis, or drop --standalone");
        goto out;
    }
    if (standalone)
        node_rank = 0;
    if (rdzv_endpoint) {
        if (redis_flag) {
            ftc_cli_usage_error(cmd, "--rdzv-endpoint and --redis both name the job's Redis: "
                                "give one");
            goto out;
        }
        char url[1200];
        if (!strncmp(rdzv_endpoint, "redis://", 8) || !strncmp(rdzv_endpoint, "rediss://", 9))
            snprintf(url, sizeof url, "%s", rdzv_endpoint);
        else if (ftc__has_port(rdzv_endpoint))
            snprintf(url, sizeof url, "redis://%s", rdzv_endpoint);
        else
            snprintf(url, sizeof url, "redis://%s:6379", rdzv_endpoint);
        if (!rdzv_endpoint[0] ||
            ftc_config_set(a.cfg, "redis.url", url, FTC_SRC_FLAG, &err)) {
            ftc_cli_usage_error(cmd, "--rdzv-endpoint '%s': %s", rdzv_endpoint,
                                err.msg[0] ? err.msg : "give HOST[:PORT] or a redis:// URL");
            goto out;
        }
        ftc_redis_url_t check;
        if (ftc_redis_url_parse(url, &check, &err)) {
            ftc_cli_usage_error(cmd, "--rdzv-endpoint '%s': %s", rdzv_endpoint, err.msg);
            goto out;
        }
    }
    if (rdzv_id) {
        if (ftc_config_source(a.cfg, FTC_CFG_JOB_ID) == FTC_SRC_FLAG &&
            strcmp(ftc_config_str(a.cfg, FTC_CFG_JOB_ID), rdzv_id)) {
            ftc_cli_usage_error(cmd, "--rdzv-id %s and --job %s differ: give one", rdzv_id,
                                ftc_config_str(a.cfg, FTC_CFG_JOB_ID));
            goto out;
        }
        if (!rdzv_id[0] || ftc_config_set(a.cfg, "job.id", rdzv_id, FTC_SRC_FLAG, &err)) {
            ftc_cli_usage_error(cmd, "--rdzv-id '%s': %s", rdzv_id,
                                err.msg[0] ? err.msg : "give a job id");
            goto out;
        }
    }
    /* MASTER_ADDR is published by whichever node is node 0 of a generation:
     * --master-addr / --local-addr name this node's address when they are its */
    const char *addr_opt = local_addr ? "--local-addr" : "--master-addr";
    const char *addr = local_addr ? local_addr : master_addr;
    if (local_addr && master_addr && strcmp(local_addr, master_addr) &&
        ftc__is_local_addr(master_addr)) {
        ftc_cli_usage_error(cmd, "--local-addr %s and --master-addr %s are both this node's: "
                            "give one", local_addr, master_addr);
        goto out;
    }
    if (addr && host && strcmp(addr, host)) {
        ftc_cli_usage_error(cmd, "%s %s and --host %s differ: give one", addr_opt, addr, host);
        goto out;
    }
    if (addr && !host) {
        if (local_addr || ftc__is_local_addr(addr))
            host = addr;
        else
            FTC_INFO("run", "--master-addr %s is not an address of this node: MASTER_ADDR is "
                     "the address of each generation's node 0 (its --host, default its "
                     "hostname)", addr);
    }
    if (master_port > 65535) {
        ftc_cli_usage_error(cmd, "--master-port %llu: give 1..65535 (or omit it for a free "
                            "port per generation)", (unsigned long long)master_port);
        goto out;
    }
    if (module && no_python) {
        ftc_cli_usage_error(cmd, "-m/--module and --no-python exclude each other");
        goto out;
    }
    uint8_t red_v[64] = {0}, tee_v[64] = {0};
    uint64_t shown = 0;
    if (redirects && ftc__parse_streams(redirects, red_v)) {
        ftc_cli_usage_error(cmd, "--redirects '%s': give 0..3 (1 stdout, 2 stderr, 3 both) or "
                            "LOCAL:N,LOCAL:N", redirects);
        goto out;
    }
    if (tee && ftc__parse_streams(tee, tee_v)) {
        ftc_cli_usage_error(cmd, "--tee '%s': give 0..3 (1 stdout, 2 stderr, 3 both) or "
                            "LOCAL:N,LOCAL:N", tee);
        goto out;
    }
    if (ranks_filter && ftc__parse_ranks(ranks_filter, &shown)) {
        ftc_cli_usage_error(cmd, "--local-ranks-filter '%s': give local ranks such as 0 or 0,1",
                            ranks_filter);
        goto out;
    }
    if (start_method && strcmp(start_method, "spawn") && strcmp(start_method, "fork") &&
        strcmp(start_method, "forkserver")) {
        ftc_cli_usage_error(cmd, "--start-method '%s': give spawn, fork or forkserver",
                            start_method);
        goto out;
    }
    if (monitor)
        FTC_INFO("run", "--monitor-interval %s: not used; ftc learns of a rank's exit at once "
                 "(waitpid) and of other nodes' failures from the job's event stream", monitor);
    if (start_method)
        FTC_INFO("run", "--start-method %s: not used; ftc forks and execs every rank (a fresh "
                 "process, as spawn)", start_method);
    /* BINARY ARGS: a Python script or module runs in $PYTHON (python3) -u */
    char **bin = argv + rest;
    size_t len = strlen(bin[0]);
    bool py = !no_python && (module || (len > 3 && !strcmp(bin[0] + len - 3, ".py")));
    if (py) {
        const char *python = getenv("PYTHON");
        if (!python || !*python)
            python = "python3";
        if (ftc__not_executable(python)) {
            ftc_cli_usage_error(cmd, "%s %s needs Python: %s is not %s; set PYTHON to "
                                     "the interpreter%s",
                                     module ? "module" : "script", bin[0], python,
                                     strchr(python, '/') ? "executable" : "on PATH",
                                     module ? "" : ", or give --no-python to exec it directly");
            goto out;
        }
        pyargv = calloc((size_t)(argc - rest) + 4, sizeof *pyargv);
        if (!pyargv) {
            ec = ftc_cli_fail(cmd, "out of memory");
            goto out;
        }
        int k = 0;
        pyargv[k++] = (char *)python;
        pyargv[k++] = (char *)"-u";
        if (module)
            pyargv[k++] = (char *)"-m";
        for (int i = rest; i < argc; i++)
            pyargv[k++] = argv[i];
        bin_argv = pyargv;
    } else {
        const char *why = ftc__not_executable(bin[0]);
        if (why) { /* before anything starts: the ranks failed max-restarts times */
            ftc_cli_usage_error(cmd, "BINARY '%s' %s", bin[0], why);
            goto out;
        }
        bin_argv = bin;
    }
    ec = FTC_EXIT_OK;
    if (simulate && (uint64_t)mx < simulate) {
        ec = ftc_cli_usage_error(cmd, "--simulate-nodes %llu is more than --nnodes MAX %d",
                                 (unsigned long long)simulate, mx);
        goto out;
    }
    if (*node_id && !ftc_ctl_node_id_valid(node_id)) { /* its rendezvous failed on it */
        ec = ftc_cli_usage_error(cmd, FTC_CLI_NODE_ID_BAD, node_id);
        goto out;
    }
    if (!ftc_agent_domain_valid(domain)) { /* the node's agent failed on it, after the start */
        ec = ftc_cli_usage_error(cmd, FTC_CLI_DOMAIN_BAD, domain);
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
    if (nrank_bad && !node_rank_seen && !standalone && !simulate) { /* (those ignore it) */
        ec = ftc_cli_usage_error(cmd, "%s='%s' is not a node index: set it to 0..%d (this "
                                      "node's index below --nnodes MAX), or give --node-rank I",
                                 nrank_var, nrank, mx - 1);
        goto out;
    }
    /* the supervisor keeps these in an int: a bigger value wrapped (a
     * negative grace or timeout read as no deadline at all) */
    const struct {
        const char *name;
        uint64_t v, max;
    } ints[] = {{"--max-restarts", restarts, 1000000},
                {settle_seen || !rdzv_conf ? "--settle-ms" : "--rdzv-conf last_call_timeout (ms)",
                 settle, INT_MAX},
                {join_seen || !rdzv_conf ? "--join-timeout-ms" : "--rdzv-conf join_timeout (ms)",
                 join_to, INT_MAX},
                {"--grace-ms", grace, INT_MAX}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (ints[k].v > ints[k].max) {
            ec = ftc_cli_usage_error(cmd, "%s %llu is too large: give at most %llu%s",
                                     ints[k].name, (unsigned long long)ints[k].v,
                                     (unsigned long long)ints[k].max,
                                     ints[k].max == INT_MAX ? " (about 24 days)" : "");
            goto out;
        }
    if (nproc < 1 || nproc > 64) { /* (ftc__parse_nproc keeps it so) */
        ec = ftc_cli_usage_error(cmd, "--nproc-per-node %llu: must be 1..64",
                                 (unsigned long long)nproc);
        goto out;
    }
    /* named as given: a node rank from SLURM_NODEID was reported as --node-rank */
    if (node_rank >= (uint64_t)mx) {
        if (node_rank_seen || !nrank)
            ec = ftc_cli_usage_error(cmd, "--node-rank %llu: must be below --nnodes MAX (%d)",
                                     (unsigned long long)node_rank, mx);
        else
            ec = ftc_cli_usage_error(cmd, "%s=%s: this node's index must be below --nnodes MAX "
                                          "(%d): fix it, raise --nnodes, or give --node-rank I",
                                     nrank_var, nrank, mx);
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
    if (rc) { /* a redis.url that is no URL is a bad setting: exit 2 */
        ec = ftc_cli_redis_error(cmd, &a, rc, &err);
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
    o.ckpt_dir_max_bytes = (uint64_t)ftc_config_int(a.cfg, FTC_CFG_CKPTDIR_MAX_BYTES);
    o.ckpt_dir_quiet_ms = (int)ftc_config_int(a.cfg, FTC_CFG_CKPTDIR_QUIET_MS);
    o.ckpt_dir_busy_max_ms = (int)ftc_config_int(a.cfg, FTC_CFG_CKPTDIR_BUSY_MAX_MS);
    o.in_process = in_process;
    o.keep_shm = keep_shm;
    o.tp = (int)tp;
    o.pp = (int)pp;
    o.agent.domain = domain;
    /* the Redis this process runs stops when it exits: its node(s) wait
     * (bounded) until every member of the last generation saw the job done,
     * a node outside the simulation (a replacement, a returning node) too */
    o.hosts_redis = srv != NULL;
    o.argv = bin_argv;
    o.master_port = (int)master_port;
    o.role = role;
    memcpy(o.redirect, red_v, sizeof o.redirect);
    memcpy(o.tee, tee_v, sizeof o.tee);
    o.quiet = ranks_filter ? ~shown : 0;
    static char logbuf[4200];
    bool any_file = false;
    for (int l = 0; l < 64; l++)
        any_file |= (red_v[l] | tee_v[l]) != 0;
    if (log_dir && log_dir[0]) {
        o.log_dir = log_dir;
    } else if (any_file) { /* torchrun makes a temporary directory; ours is the job's */
        snprintf(logbuf, sizeof logbuf, "%s/logs", dir);
        o.log_dir = logbuf;
    }
    if (o.log_dir && any_file)
        FTC_INFO("run", "the ranks' redirected output goes to %s/%s/attempt_GEN/RANK/"
                 "stdout.log|stderr.log", o.log_dir, o.job);
    else if (o.log_dir)
        FTC_INFO("run", "--log-dir %s without --redirects or --tee: the ranks' output stays on "
                 "the console (as torchrun)", o.log_dir);
    /* torchrun's default: one OpenMP thread per rank when a node runs several */
    if (nproc > 1 && !getenv("OMP_NUM_THREADS")) {
        setenv("OMP_NUM_THREADS", "1", 1);
        FTC_INFO("run", "OMP_NUM_THREADS=1 for each rank (as torchrun; set it to change this)");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = ftc__run_sig; /* no SA_RESTART: waitpid returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* SIGHUP (the terminal went away) and SIGQUIT stop the job as SIGTERM
     * does, as torchrun's handlers do (SIGHUP killed this process at once:
     * its ranks died of PR_SET_PDEATHSIG, what they started was left
     * running); ignored when inherited ignored (nohup, a shell's
     * background job) */
    int more[] = {SIGHUP, SIGQUIT};
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) {
        struct sigaction old;
        if (sigaction(more[k], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(more[k], &sa, NULL);
    }
    /* SIGUSR1/SIGUSR2 (Slurm's warning before the time limit or a preemption,
     * `--signal=USR1@90`, sent to every process of the step) are the ranks'
     * to act on: `ftc run` died of them (their default action), and its ranks,
     * SIGKILLed by PR_SET_PDEATHSIG, never finished what they started on it.
     * A handler, not SIG_IGN: the ranks get the default back at exec. */
    struct sigaction none;
    memset(&none, 0, sizeof none);
    none.sa_handler = ftc__run_sig_none;
    none.sa_flags = SA_RESTART;
    int usr[] = {SIGUSR1, SIGUSR2};
    for (size_t k = 0; k < sizeof usr / sizeof usr[0]; k++) {
        struct sigaction old;
        if (sigaction(usr[k], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(usr[k], &none, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    if (simulate) {
        ec = ftc__simulate(cmd, &o, (int)simulate, net, srv);
    } else {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "node%llu", (unsigned long long)node_rank);
        ftc_log_configure(-1, prefix);
        ec = ftc_run_node(&o, &ftc__run_stop, &err);
        if (ec)
            ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
    }
    ftc_netns_destroy(net); /* nodes reaped: remove the namespaces, veths, bridge */
    net = NULL;
    ftc_redis_server_stop(srv);
out:
    ftc_netns_destroy(net);
    free(pyargv);
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_run = {"run", "run a training binary, restarted through failures",
                                       ftc__run_help, ftc__run_main};
