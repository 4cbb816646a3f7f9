/*
 * run.h — `ftc run`: the per-node supervisor that wraps a training binary,
 * torchrun-style, and keeps it going through failures (restart mode).
 *
 * One supervisor per node. It runs the node's agent (ckpt/agent.h) on a
 * thread of its own, joins a rendezvous round (recover/rendezvous.h), starts
 * nproc local ranks of BINARY with the round's environment, and watches:
 *   - its ranks (a rank that exits non-zero, or is killed, fails the round:
 *     its own waitpid; the rank_exit event is for the stream's readers);
 *   - the job's event stream (a node_lost of another member of the current
 *     generation fails the round; a hang of one of its own ranks gets that
 *     rank SIGKILLed, whose exit fails it);
 *   - the rendezvous state (another supervisor opened a new round).
 * A failed round: the supervisor asks for a new one (fenced by the generation
 * it saw, so N supervisors noticing the same failure open one round), stops
 * its ranks (SIGTERM, then SIGKILL after grace_ms: a SIGSTOPped rank dies
 * too), restarts its agent for the new generation (the shm slots stay), joins,
 * and starts its ranks again with the new layout. Ranks linked with libftc
 * restore from the node's shm or from peers (ftc_restore); ranks that are
 * not can use FTC_CKPT_DIR (plugins/filestore.h). After max_restarts failed
 * rounds the supervisor gives up (exit 1). When every member's ranks exited
 * 0 the job is done (exit 0). A supervisor that finds itself a hot spare
 * waits for the next round.
 *
 * Environment of each rank (torchrun's names, then ftc's):
 *   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE
 *   ROLE_RANK ROLE_NAME ROLE_WORLD_SIZE
 *   MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT
 *   TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID
 *   FTC_RANK FTC_WORLD_SIZE FTC_JOB_ID FTC_GENERATION FTC_NODE_RANK
 *   FTC_AGENT_SOCKET FTC_REDIS_URL (no password: FTC_REDIS_PASSWORD_FILE)
 *   FTC_CKPT_DIR (when enabled)
 * MASTER_ADDR is the host of the member that runs rank 0 (it serves torch's
 * store there; not always the round's first member: a survivor kept in place
 * can come first while a node that was idle takes rank 0), and MASTER_PORT a
 * free port it picks and publishes in
 * Redis (ftc:{job}:master:GEN), so each generation gets a fresh one; with
 * master_port every generation uses that one (a port that node cannot bind
 * fails the round, which counts against max_restarts).
 *
 * Output of the ranks (log_dir, redirect, tee, quiet; torchrun's --log-dir,
 * --redirects, --tee, --local-ranks-filter): a redirected stream is opened
 * on its file before exec; a tee'd one goes through a pipe to a relay
 * process (a child of the rank that ignores SIGINT/SIGTERM and exits when the
 * rank's end of the pipe closes) that writes to the file and the console.
 *
 * In-process mode (in_process, `ftc run --in-process`; plugins/inproc.h has
 * the contract): a failed generation does not stop the ranks that survive.
 * Each rank also gets FTC_ASSIGN_FILE (JOB_DIR/assign.NODE.LOCAL) and
 * FTC_ASSIGN_TIMEOUT_MS. A rank that writes its state file (libftc-aware:
 * `ftc train`) is asked to leave the generation with SIGUSR1 (queued with
 * the generation), and after the rendezvous and the agent's restart gets its
 * new environment in its assignment file instead of a new process; a rank
 * that left on its own (its collective failed: state phase=waiting) fails
 * the generation like an exit. A rank that does not report having left
 * within grace_ms (hung, stopped, or still joining a group that will never
 * form) is killed and started fresh; a rank without a state file (a binary
 * that does not know the mode) is stopped and restarted, as in restart mode.
 *
 * Thread-safety: one supervisor per process; ftc_run_node is called once.
 */
#ifndef FTC_PLUGINS_RUN_H
#define FTC_PLUGINS_RUN_H

#include "ckpt/agent.h"
#include "core/err.h"
#include "detect/redis.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftc_run_options {
    uint32_t struct_size;      /* sizeof(ftc_run_options_t) */
    const char *job;           /* job id */
    const char *dir;           /* job directory (sockets, pids, url file) */
    ftc_redis_url_t redis;     /* the job's Redis */
    uint32_t node_index;       /* this node's stable index, 0..max_nodes-1 */
    const char *node_id;       /* "" = "node<index>" */
    const char *host;          /* MASTER_ADDR when this node runs rank 0 */
    int min_nodes, max_nodes;  /* --nnodes MIN:MAX */
    int nproc;                 /* ranks per node */
    int max_restarts;          /* failed rounds before giving up */
    int settle_ms;             /* rendezvous: wait for late nodes after MIN arrived (never
                                  closing without a live member still stopping its ranks) */
    int join_timeout_ms;       /* rendezvous deadline */
    int grace_ms;              /* SIGTERM -> SIGKILL when stopping ranks */
    int grow_wait_ms;          /* a node joining a running job asks for the grow round
                                  at the next checkpoint boundary: once the committed
                                  step moves, waiting at most this long (0: at once) */
    bool ckpt_dir;             /* give ranks FTC_CKPT_DIR (replicated files) */
    uint64_t ckpt_dir_max_bytes; /* its limits (plugins/filestore.h; 0 = the default) */
    int ckpt_dir_quiet_ms;       /* (-1 = the default) */
    int ckpt_dir_busy_max_ms;    /* (-1 = the default) */
    bool keep_shm;             /* --keep-shm: leave this node's /dev/shm state at the job's
                                  end (default: removed once every rank finished, after
                                  the last committed version went to the persist tier) */
    ftc_agent_options_t agent; /* the agent's settings (index, nodes, ranks, job filled in) */
    char *const *argv;         /* BINARY ARGS..., NULL-terminated */
    bool in_process;           /* --in-process: surviving ranks continue in their process
                                  (plugins/inproc.h); default: restart mode */
    bool hosts_redis;          /* this process runs the job's embedded Redis (node 0 of a
                                  real multi-node job, or the nodes of --simulate-nodes,
                                  which a node from outside may join): at the job's end
                                  it returns only
                                  once every node saw the job done (at most 15 s), so the
                                  Redis it then stops outlives their last read */
    int tp, pp;                /* --tp / --pp: the job's fixed tensor / pipeline degrees for
                                  the layout planner (0 = 1): WORLD_SIZE is dp x tp x pp, slots
                                  beyond it stay idle, TP groups are placed whole on a node
                                  where they fit (recover/layout.h) */
    int master_port;           /* --master-port: every generation's MASTER_PORT; rank 0's node
                                  checks it can bind it (SO_REUSEADDR, any address) before
                                  the ranks start, and fails the round with an error that
                                  names it otherwise (0: a free port per generation) */
    const char *role;          /* ROLE_NAME of the ranks (NULL or "": "default") */
    const char *log_dir;       /* --log-dir: the ranks' output files, torchrun's layout
                                  LOG_DIR/JOB/attempt_GEN/RANK/stdout.log|stderr.log,
                                  appended to (a job launched again keeps the last
                                  launch's logs; NULL: none; the directories are made
                                  only for ranks that redirect or tee a stream) */
    uint8_t redirect[64];      /* per local rank: bit 1 stdout, bit 2 stderr go to the file
                                  only (torchrun's --redirects) */
    uint8_t tee[64];           /* per local rank: bit 1 stdout, bit 2 stderr go to the file
                                  and the console (--tee; wins over redirect) */
    uint64_t quiet;            /* local ranks (bit l) whose console output is dropped
                                  (--local-ranks-filter names the others); their files
                                  are still written */
} ftc_run_options_t;

#define FTC_RUN_OPTIONS_INIT                                                                       \
    {.struct_size = sizeof(ftc_run_options_t), .min_nodes = 1, .max_nodes = 1, .nproc = 1,       \
     .max_restarts = 3, .settle_ms = 1000, .join_timeout_ms = 120000, .grace_ms = 3000,       \
     .grow_wait_ms = 10000, .ckpt_dir_quiet_ms = -1, .ckpt_dir_busy_max_ms = -1}

/* A supervisor that lost the job's Redis (no answer for join_timeout_ms
 * while it watched a generation: ranks keep training through shorter
 * outages; or none when its rendezvous failed) gives up with this exit code:
 * its node is cut off, its heartbeat expired, the other nodes went on
 * without it. */
#define FTC_RUN_EXIT_CUT 3

/* Runs this node until the job is done, fails for good, or *stop is set
 * (SIGINT/SIGTERM: ranks are stopped, the agent leaves). Returns the exit
 * code of `ftc run`: 0 done, 1 failed (err says why), FTC_RUN_EXIT_CUT
 * cut off from Redis (err says since when). */
int ftc_run_node(const ftc_run_options_t *o, volatile sig_atomic_t *stop, ftc_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
