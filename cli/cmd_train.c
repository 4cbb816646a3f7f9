/*
 * cmd_train.c — `ftc train`: the reference trainer's main. Reads flags (over
 * a JSON file given with --train-config), builds a trainer (trainer/train.h),
 * runs the steps with a progress line on a terminal or periodic log lines
 * otherwise, and ends with a held-out evaluation loss. Also the byte-level
 * tokenizer: `ftc train --tokenize TEXT --data OUT`.
 */
#include "cli/cli.h"

#include "core/clock.h"
#include "core/fabric.h"
#include "core/fsio.h"
#include "core/log.h"
#include "plugins/inproc.h"
#include "trainer/dist.h"
#include "trainer/train.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char ftc__train_help[] =
    "usage: ftc train [--model tiny|small|medium|gpt2-small] [--steps N] [--micro-batch B]\n"
    "                 [--global-batch G] [--seq-len T] [--lr X] [--warmup N] [--seed S]\n"
    "                 [--data FILE | --corpus generated] [--deterministic [--dp R]]\n"
    "                 [--ckpt-dir DIR [--ckpt-every N]] [--train-config FILE.json]\n"
    "                 [--nproc N [--tp T]] [--coll cpu|nccl|auto] [--agent SOCKET]\n"
    "                 [--coll-timeout-ms MS] [--agent-call-timeout-ms MS] [--stop-at K]\n"
    "                 [--guard skip|rollback|off] [--guard-spike-sigma X] [--skip-steps LIST]\n"
    "       ftc train --tokenize TEXT --data OUT\n"
    "\n"
    "Trains the reference GPT (CPU or CUDA kernels, --backend) on one process, on N\n"
    "local rank processes (--nproc N), or as one rank under a launcher (torchrun's\n"
    "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and\n"
    "prints a progress line (step, loss, tokens/s, learning rate, gradient norm),\n"
    "then the loss on held-out samples. A step is one GLOBAL batch of G sequences\n"
    "(G/B micro-batches of B sequences, gradients accumulated), whatever the\n"
    "data-parallel layout. With --ckpt-dir, parameters, AdamW moments, RNG state\n"
    "and data cursor are persisted every N steps, and the newest committed\n"
    "version there is restored at start (a different configuration is refused).\n"
    "\n"
    "Options:\n"
    "  --model NAME           tiny (default), small, medium or gpt2-small\n"
    "  --steps N              optimizer steps (default 200); also the lr schedule length\n"
    "  --micro-batch B        sequences per micro-batch (default 8)\n"
    "  --global-batch G       sequences per step, a multiple of B (default B)\n"
    "  --seq-len T            tokens per sequence (default 64, <= the model's maximum)\n"
    "  --lr X                 peak learning rate, in (0, 10) (default 1e-3)\n"
    "  --min-lr-ratio X       the cosine decays to X * lr, X in [0, 1] (default 0.1)\n"
    "  --warmup N             linear warmup steps (default 10)\n"
    "  --weight-decay X       AdamW decoupled weight decay on matrices, >= 0 (default 0.1)\n"
    "  --grad-clip X          clip the global gradient norm, >= 0 (default 1.0; 0 = off)\n"
    "  --seed S               initialization and data order (default 1337)\n"
    "  --data FILE            a token file (ftc train --tokenize makes one)\n"
    "  --corpus generated     the generated corpus (default when no --data)\n"
    "  --corpus-bytes SIZE    size of the generated corpus (default 1MiB)\n"
    "  --deterministic        exact, order-independent gradient sums (docs/trainer.md)\n"
    "  --dp R                 virtual data-parallel ranks in this process (needs\n"
    "                         --deterministic; the weights do not depend on R)\n"
    "  --ckpt-dir DIR         persist directory for checkpoints (restored at start)\n"
    "  --ckpt-every N         checkpoint every N steps (default 10; 1 with an agent)\n"
    "  --nproc N              launch N local rank processes (real data parallelism,\n"
    "                         ZeRO-1; implies --deterministic); --nproc-per-node N too\n"
    "  --tp T                 tensor parallelism: the N ranks form N/T DP ranks of T TP\n"
    "                         ranks (Megatron splits; T divides N and the heads)\n"
    "  --agent SOCKET         checkpoint through include/ftc.h and this `ftc agent`\n"
    "                         (default: $FTC_AGENT_SOCKET when set)\n"
    "  --coll NAME            collectives of the DP and TP groups: cpu (libfabric, host\n"
    "                         memory), nccl (CUDA backend, one GPU per local rank) or\n"
    "                         auto (default: nccl with the CUDA backend in an NCCL\n"
    "                         build, else cpu); docs/trainer.md\n"
    "  --coll-timeout-ms MS   deadline of each collective and of the rendezvous (60000)\n"
    "  --agent-call-timeout-ms MS\n"
    "                         deadline of each call to the agent (a checkpoint, a restore)\n"
    "                         and of its snapshots' device syncs (60000); not the agent's\n"
    "                         own --agent-timeout-ms (agent.timeout_ms), which it should\n"
    "                         exceed\n"
    "  --stop-at K            stop (with a checkpoint) after K steps of the --steps run\n"
    "  --guard MODE           numerical guard, when a step's loss or gradient is NaN/Inf\n"
    "                         (or spikes): skip (default: the update is not applied),\n"
    "                         rollback (restore the newest committed version, then skip\n"
    "                         the batch) or off (docs/trainer.md \"Numerical guard\")\n"
    "  --guard-spike-sigma X  also a loss more than X sd above the mean of the last\n"
    "                         --guard-window accepted losses (default 0 = off; try 6)\n"
    "  --guard-window N       losses in the spike window (default 50, 2..256)\n"
    "  --skip-steps LIST      step indices (0-based, comma-separated) whose batches are\n"
    "                         skipped, as Megatron's --skip-train-iteration-range\n"
    "  --inject-nan STEP      tests: poison one micro-batch's loss and gradient at STEP\n"
    "  --inject-spike STEP    tests: multiply one micro-batch's loss by 100 at STEP\n"
    "  --inject-rank R        the DP rank whose micro-batch is poisoned (0..63, default 0)\n"
    "  --eval-batches N       held-out micro-batches for the final loss (1..100000, default 16)\n"
    "  --log-every N          a log line every N steps when not on a terminal (N >= 1,\n"
    "                         default 10)\n"
    "  --backend NAME         auto (default: cuda when a GPU is present, else cpu),\n"
    "                         cpu, cuda, or cpu-bf16 / cuda-bf16 / auto-bf16 (bf16\n"
    "                         matmuls, fp32 weights and optimizer; docs/trainer.md)\n"
    "  --threads N            CPU kernel threads (1..256; default, or 0: OpenMP's)\n"
    "  --train-config FILE    JSON object with any of the settings above, keys spelled\n"
    "                         with underscores ({\"model\": \"tiny\", \"lr\": 0.003});\n"
    "                         flags win over the file\n"
    "  --tokenize TEXT        byte-tokenize TEXT into the token file --data and exit\n";

/* Settings: each one a flag (dest written by ftc_cli_parse) and a JSON key. */
typedef struct ftc__train_args {
    const char *model, *data, *corpus, *ckpt_dir, *backend, *tokenize, *config;
    const char *lr, *min_lr_ratio, *weight_decay, *grad_clip;
    uint64_t steps, micro_batch, global_batch, seq_len, warmup, seed, corpus_bytes, dp, ckpt_every,
        eval_batches, log_every, threads;
    bool deterministic;
    const char *agent;
    uint64_t nproc, nproc_per_node, coll_timeout_ms, stop_at, agent_call_timeout_ms;
    uint64_t tp;
    const char *guard, *guard_spike_sigma, *skip_steps;
    uint64_t guard_window, inject_nan, inject_spike, inject_rank;
    const char *coll;
} ftc__train_args_t;

enum { FTC__NOPTS = 39 };

/* Applies JSON values to the settings whose flags were not given. */
static int ftc__apply_json(const ftc_cli_cmd_t *cmd, json_t *root, const ftc_cli_opt_t *opts,
                           const bool *seen)
{
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        int i;
        for (i = 0; i < FTC__NOPTS; i++) {
            const char *f = opts[i].name + 2; /* "--micro-batch" vs "micro_batch" */
            size_t k = 0;
            while (f[k] && key[k] && (f[k] == key[k] || (f[k] == '-' && key[k] == '_')))
                k++;
            if (!f[k] && !key[k])
                break;
        }
        if (i == FTC__NOPTS || !strcmp(key, "train_config") || !strcmp(key, "tokenize"))
            return ftc_cli_usage_error(cmd, "--train-config: unknown key '%s'", key);
        if (seen[i])
            continue;
        if (opts[i].kind == FTC_OPT_SIZE && json_is_string(val)) { /* "64KiB", as a flag */
            int64_t v;
            if (ftc_parse_size(json_string_value(val), &v) != 0 || v < 0)
                return ftc_cli_usage_error(cmd, "--train-config: '%s' wants a size such as 4096, "
                                           "64MiB or 1G, not '%s'",
                                           key, json_string_value(val));
            *(uint64_t *)opts[i].dest = (uint64_t)v;
            continue;
        }
        switch (opts[i].kind) {
        case FTC_OPT_FLAG:
            if (!json_is_boolean(val))
                return ftc_cli_usage_error(cmd, "--train-config: '%s' must be true or false", key);
            *(bool *)opts[i].dest = json_is_true(val);
            break;
        case FTC_OPT_STR:
            if (json_is_string(val)) {
                *(const char **)opts[i].dest = json_string_value(val);
            } else if (json_is_number(val)) {
                /* numbers given as numbers: keep their text form in the object */
                char buf[64];
                snprintf(buf, sizeof buf, "%.17g", json_number_value(val));
                json_object_set_new(root, key, json_string(buf));
                *(const char **)opts[i].dest = json_string_value(json_object_get(root, key));
            } else {
                return ftc_cli_usage_error(cmd, "--train-config: '%s' must be a string", key);
            }
            break;
        default:
            if (!json_is_integer(val) || json_integer_value(val) < 0)
                return ftc_cli_usage_error(cmd, "--train-config: '%s' must be an integer >= 0",
                                           key);
            *(uint64_t *)opts[i].dest = (uint64_t)json_integer_value(val);
            break;
        }
    }
    return FTC_CLI_CONTINUE;
}

/* The values of the flags given as text (the real numbers, --guard,
 * --skip-steps), converted once by ftc__check_args before a launch and used
 * from there on: a second parse could only repeat the first one's errors
 * (from each of N ranks) or, worse, disagree with it. */
typedef struct ftc__train_vals {
    float lr, min_lr_ratio, weight_decay, grad_clip, guard_spike_sigma;
    int guard;                               /* FTC_GUARD_* */
    uint64_t skip_steps[FTC_GUARD_MAX_SKIPS]; /* --skip-steps */
    int n_skip_steps;
} ftc__train_vals_t;

/* A real number for flag `name`, strictly: an optional sign, decimal digits
 * with an optional point, an optional exponent, nothing before or after
 * (strtod alone also took " 1e-3", "0x1p-10", "infinity" and "nan"), that
 * fits a float, in lo..hi (lo_open / hi_open: that end excluded). One usage
 * error naming the flag, the value and the range. */
static int ftc__parse_real(const ftc_cli_cmd_t *cmd, const char *name, const char *s, double lo,
                           bool lo_open, double hi, bool hi_open, float *out)
{
    const char *p = s ? s : "";
    size_t digits = 0;
    if (*p == '+' || *p == '-')
        p++;
    for (; *p >= '0' && *p <= '9'; p++)
        digits++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            digits++;
    if (digits && (*p == 'e' || *p == 'E')) {
        const char *e = p + 1;
        if (*e == '+' || *e == '-')
            e++;
        if (*e >= '0' && *e <= '9') {
            while (*e >= '0' && *e <= '9')
                e++;
            p = e;
        }
    }
    double v = digits && !*p ? strtod(s, NULL) : NAN;
    char range[96];
    if (hi == INFINITY)
        snprintf(range, sizeof range, "%s %g", lo_open ? ">" : ">=", lo);
    else
        snprintf(range, sizeof range, "in %c%g, %g%c", lo_open ? '(' : '[', lo, hi,
                 hi_open ? ')' : ']');
    if (!digits || *p)
        return ftc_cli_usage_error(cmd, "%s '%s': not a decimal number (such as 0.5 or 3e-4); "
                                   "it must be %s", name, s ? s : "", range);
    float f = (float)v; /* the range as the trainer checks it: of the float it gets */
    if (!isfinite(f))
        return ftc_cli_usage_error(cmd, "%s %s: too large for a float; it must be %s", name, s,
                                   range);
    if (f < lo || f > hi || (lo_open && f == lo) || (hi_open && f == hi))
        return ftc_cli_usage_error(cmd, "%s %s: must be %s", name, s, range);
    *out = f;
    return FTC_CLI_CONTINUE;
}

/* The flags' values that need no process layout, checked once, before the
 * --nproc launcher starts its ranks: a bad one is one usage error, not the
 * same error from each of N ranks. Each names its flag, its value and its
 * range. Sets --global-batch's default (one micro-batch); the flags given
 * as text are converted here, once, into *v. */
static int ftc__check_args(const ftc_cli_cmd_t *cmd, ftc__train_args_t *g, ftc__train_vals_t *v)
{
    if (g->corpus && strcmp(g->corpus, "generated"))
        return ftc_cli_usage_error(cmd, "--corpus: only 'generated' is known, not '%s'",
                                   g->corpus);
    if (g->corpus && g->data)
        return ftc_cli_usage_error(cmd, "--data and --corpus generated exclude each other");
    const struct {
        const char *name;
        uint64_t v, lo, hi; /* hi UINT64_MAX: no upper bound */
    } rng[] = {{"--micro-batch", g->micro_batch, 1, 4096},
               {"--seq-len", g->seq_len, 1, 65536},
               {"--steps", g->steps, 1, INT32_MAX - 1}, /* AdamW's bias correction: an int */
               {"--dp", g->dp, 1, 64},
               {"--ckpt-every", g->ckpt_every, 1, UINT64_MAX},
               {"--log-every", g->log_every, 1, UINT64_MAX},
               {"--eval-batches", g->eval_batches, 1, 100000}, /* 0 evaluated 1, silently */
               {"--guard-window", g->guard_window, 2, FTC_GUARD_WINDOW_MAX},
               {"--threads", g->threads, 0, 256}, /* more were cut to 256, silently */
               {"--inject-rank", g->inject_rank, 0, 63}};
    for (size_t k = 0; k < sizeof rng / sizeof rng[0]; k++) {
        if (rng[k].v >= rng[k].lo && rng[k].v <= rng[k].hi)
            continue;
        if (rng[k].hi == UINT64_MAX)
            return ftc_cli_usage_error(cmd, "%s %llu: must be at least %llu", rng[k].name,
                                       (unsigned long long)rng[k].v,
                                       (unsigned long long)rng[k].lo);
        return ftc_cli_usage_error(cmd, "%s %llu: must be %llu..%llu", rng[k].name,
                                   (unsigned long long)rng[k].v, (unsigned long long)rng[k].lo,
                                   (unsigned long long)rng[k].hi);
    }
    if (g->global_batch == 0)
        g->global_batch = g->micro_batch;
    if (g->global_batch % g->micro_batch)
        return ftc_cli_usage_error(cmd, "--global-batch %llu must be a multiple of "
                                   "--micro-batch %llu", (unsigned long long)g->global_batch,
                                   (unsigned long long)g->micro_batch);
    if (g->global_batch / g->micro_batch > 65536)
        return ftc_cli_usage_error(cmd, "--global-batch %llu is more than 65536 micro-batches "
                                   "of --micro-batch %llu", (unsigned long long)g->global_batch,
                                   (unsigned long long)g->micro_batch);
    /* the ranges of ftc_optim_config_check and the guard's own check, here
     * before a launch (there, after it, from each rank and without the flag) */
    int ec;
    if ((ec = ftc__parse_real(cmd, "--lr", g->lr, 0, true, 10, true, &v->lr)) !=
            FTC_CLI_CONTINUE ||
        (ec = ftc__parse_real(cmd, "--min-lr-ratio", g->min_lr_ratio, 0, false, 1, false,
                              &v->min_lr_ratio)) != FTC_CLI_CONTINUE ||
        (ec = ftc__parse_real(cmd, "--weight-decay", g->weight_decay, 0, false, INFINITY, false,
                              &v->weight_decay)) != FTC_CLI_CONTINUE ||
        (ec = ftc__parse_real(cmd, "--grad-clip", g->grad_clip, 0, false, INFINITY, false,
                              &v->grad_clip)) != FTC_CLI_CONTINUE ||
        (ec = ftc__parse_real(cmd, "--guard-spike-sigma", g->guard_spike_sigma, 0, false,
                              INFINITY, false, &v->guard_spike_sigma)) != FTC_CLI_CONTINUE)
        return ec;
    if ((v->guard = ftc_guard_parse_mode(g->guard)) < 0)
        return ftc_cli_usage_error(cmd, "--guard '%s': must be skip, rollback or off",
                                   g->guard ? g->guard : "");
    ftc_err_t err = {0};
    v->n_skip_steps = 0;
    if (g->skip_steps && ftc_guard_parse_steps(g->skip_steps, v->skip_steps, FTC_GUARD_MAX_SKIPS,
                                               &v->n_skip_steps, &err) < 0)
        return ftc_cli_usage_error(cmd, "--skip-steps: %s", ftc_err_str(&err));
    return FTC_CLI_CONTINUE;
}

/* Removes the launcher's rendezvous directory (two levels of small files). */
static void ftc__rmtree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p) < 0 && depth < 2)
                ftc__rmtree(p, depth + 1);
        }
        closedir(d);
    }
    rmdir(dir);
}

static bool ftc__is_nproc_flag(const char *a, bool *takes_value)
{
    static const char *const names[] = {"--nproc", "--nproc-per-node"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(a, names[i], n) && (a[n] == 0 || a[n] == '=')) {
            *takes_value = a[n] == 0;
            return true;
        }
    }
    return false;
}

/* What the launcher says when a failure starts the others' grace period. */
static void ftc__grace_note(int left, uint64_t grace_ms)
{
    if (left > 0)
        fprintf(stderr, "ftc train: the other ranks get %llu ms to end (the larger of "
                        "--coll-timeout-ms and --agent-call-timeout-ms, + 20 s), then are "
                        "killed\n", (unsigned long long)grace_ms);
}

/* `ftc train --nproc N`: N rank processes of this same command (torchrun's
 * variables set, addresses exchanged in a fresh directory), waited for; when
 * one fails the others get grace_ms (the larger of the collective deadline and
 * the agent call deadline, + 20 s) to notice, then SIGKILL. */
static int ftc__launch(const ftc_cli_cmd_t *cmd, int argc, char **argv, int n, uint64_t grace_ms)
{
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ftc-train-rdzv.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return ftc_cli_fail(cmd, "--nproc: cannot create a rendezvous directory %s: %s", dir,
                            strerror(errno));
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return ftc_cli_fail(cmd, "out of memory");
    int k = 0;
    av[k++] = "ftc";
    av[k++] = argv[0]; /* "train" */
    for (int i = 1; i < argc; i++) {
        bool val = false;
        if (ftc__is_nproc_flag(argv[i], &val)) {
            i += val;
            continue;
        }
        av[k++] = argv[i];
    }
    av[k] = NULL;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (!pids) {
        free(av);
        return ftc_cli_fail(cmd, "out of memory");
    }
    fflush(stdout);
    fflush(stderr);
    char ws[16];
    snprintf(ws, sizeof ws, "%d", n);
    int ec = FTC_EXIT_OK, started = 0;
    for (int r = 0; r < n; r++) {
        pid_t p = fork();
        if (p < 0) {
            ec = ftc_cli_fail(cmd, "--nproc: fork of rank %d: %s", r, strerror(errno));
            break;
        }
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the launcher */
            ftc_fs_close_from(3);
            char rs[16];
            snprintf(rs, sizeof rs, "%d", r);
            setenv("RANK", rs, 1);
            setenv("LOCAL_RANK", rs, 1);
            setenv("WORLD_SIZE", ws, 1);
            setenv("LOCAL_WORLD_SIZE", ws, 1);
            setenv("FTC_TRAIN_RDZV_DIR", dir, 1);
            execv("/proc/self/exe", av);
            fprintf(stderr, "ftc train: rank %d: exec /proc/self/exe: %s\n", r, strerror(errno));
            _exit(127);
        }
        pids[r] = p;
        started++;
    }
    int left = started;
    ftc_deadline_t kill_at = {0};
    bool failing = ec != FTC_EXIT_OK;
    if (failing) { /* a fork failed: the ranks started wait for a peer that never comes */
        kill_at = ftc_deadline_in_ms(grace_ms);
        ftc__grace_note(left, grace_ms);
    }
    while (left > 0) {
        int st;
        pid_t w = ftc_fabric_reap(-1, &st, WNOHANG); /* (and its shm regions) */
        if (w <= 0) {
            if (failing && ftc_deadline_expired(kill_at)) {
                for (int r = 0; r < started; r++)
                    if (pids[r] > 0) {
                        fprintf(stderr, "ftc train: rank %d still running after a peer failed: "
                                        "killing it\n", r);
                        kill(pids[r], SIGKILL);
                    }
                kill_at = ftc_deadline_in_ms(3600000);
            }
            ftc_sleep_ms(20);
            continue;
        }
        int r = 0;
        while (r < started && pids[r] != w)
            r++;
        if (r == started)
            continue;
        pids[r] = 0;
        left--;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        if (WIFEXITED(st))
            fprintf(stderr, "ftc train: rank %d exited with status %d\n", r, WEXITSTATUS(st));
        else
            fprintf(stderr, "ftc train: rank %d was killed by signal %d\n", r,
                    WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (!failing) {
            failing = true;
            kill_at = ftc_deadline_in_ms(grace_ms);
            ftc__grace_note(left, grace_ms);
        }
        /* a rank's configuration error (exit 2: the checkpoint directory does
         * not fit this command line) is the job's: its peers then fail too */
        if (WIFEXITED(st) && WEXITSTATUS(st) == FTC_EXIT_USAGE)
            ec = FTC_EXIT_USAGE;
        else if (ec != FTC_EXIT_USAGE)
            ec = FTC_EXIT_FAIL;
    }
    free(pids);
    free(av);
    ftc__rmtree(dir, 0);
    return ec;
}

/* An integer from the environment, strictly (ftc_parse_int): unset or empty
 * gives dflt; anything but a whole decimal number in lo..hi ("12abc", "-1",
 * "70000" for a port) is FTC_ECONFIG naming the variable, not atoi's silent
 * 0 or leading digits. */
static int ftc__env_num(const char *name, int64_t lo, int64_t hi, int64_t dflt, int64_t *out,
                        ftc_err_t *err)
{
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    int rc = ftc_parse_int(v, lo, hi, out);
    if (rc < 0)
        return ftc_err_set(err, FTC_ECONFIG, "%s='%s' is %s: it must be a whole number in "
                           "%" PRId64 "..%" PRId64, name, v,
                           rc == FTC_ERANGE ? "out of range" : "not a whole decimal number",
                           lo, hi);
    return 0;
}

/* FTC_TRAIN_DIE_IN_CKPT=RANK:STEP (fault injection for tests and drills),
 * strictly: RANK 0..63 and STEP 1..2^63-1, whole decimal numbers; *rank -1
 * when unset or empty. sscanf("%ld:%llu") took "1:5x" and a typo made no
 * fault silently; now FTC_ECONFIG naming it. */
static int ftc__die_env(long *rank, uint64_t *step, ftc_err_t *err)
{
    const char *v = getenv("FTC_TRAIN_DIE_IN_CKPT");
    *rank = -1;
    *step = 0;
    if (!v || !*v)
        return 0;
    char buf[64];
    const char *colon = strchr(v, ':');
    int64_t r = 0, s = 0;
    size_t n = colon ? (size_t)(colon - v) : 0;
    if (colon && n < sizeof buf) {
        memcpy(buf, v, n);
        buf[n] = 0;
    }
    if (!colon || n >= sizeof buf || ftc_parse_int(buf, 0, 63, &r) < 0 ||
        ftc_parse_int(colon + 1, 1, INT64_MAX, &s) < 0)
        return ftc_err_set(err, FTC_ECONFIG, "FTC_TRAIN_DIE_IN_CKPT='%s' is not RANK:STEP, RANK "
                           "a whole decimal number in 0..63 and STEP one in 1..%" PRId64, v,
                           INT64_MAX);
    *rank = (long)r;
    *step = (uint64_t)s;
    return 0;
}

/* MASTER_PORT, or the one after it when torchrun's agent holds MASTER_PORT
 * (TORCHELASTIC_USE_AGENT_STORE=True); FTC_RDZV_PORT overrides. *port 0 when
 * none is set; FTC_ECONFIG naming the variable for one that is no port. */
static int ftc__rdzv_port(int *port, ftc_err_t *err)
{
    int64_t p = 0;
    const char *o = getenv("FTC_RDZV_PORT");
    int rc = o && *o ? ftc__env_num("FTC_RDZV_PORT", 1, 65535, 0, &p, err) : 0;
    if (rc == 0 && !(o && *o)) {
        const char *a = getenv("TORCHELASTIC_USE_AGENT_STORE");
        int plus = a && !strcasecmp(a, "true");
        rc = ftc__env_num("MASTER_PORT", 1, 65535 - plus, 0, &p, err);
        p += p ? plus : 0;
    }
    *port = (int)p;
    return rc;
}

/* The job id the TCP rendezvous checks every rank against: FTC_JOB_ID (ftc
 * run), else TORCHELASTIC_RUN_ID (torchrun), else none. */
static const char *ftc__rdzv_job(void)
{
    const char *j = getenv("FTC_JOB_ID");
    if (!j || !*j)
        j = getenv("TORCHELASTIC_RUN_ID");
    return j && *j ? j : NULL;
}

/* In-process recovery (`ftc run --in-process`, plugins/inproc.h): the
 * supervisor's SIGUSR1 aborts the collectives of the current group. The
 * handler may run on any thread: the main thread clears the pointers and
 * waits out a handler in flight before destroying the group. */
static _Atomic(ftc_coll_t *) ftc__ip_dp, ftc__ip_tp;
static _Atomic(ftc_trainer_t *) ftc__ip_trainer; /* its waits for the agent end too */
static atomic_int ftc__ip_busy, ftc__ip_join_abort;

static void ftc__ip_abort(void *arg)
{
    (void)arg;
    atomic_store(&ftc__ip_join_abort, 1); /* the TCP rendezvous of the group */
    atomic_fetch_add(&ftc__ip_busy, 1);
    ftc_coll_t *c = atomic_load(&ftc__ip_dp);
    if (c)
        ftc_coll_abort(c);
    c = atomic_load(&ftc__ip_tp);
    if (c)
        ftc_coll_abort(c);
    ftc_trainer_t *t = atomic_load(&ftc__ip_trainer);
    if (t) /* a checkpoint waiting for a free slot (replication to a dead node pending) */
        ftc_trainer_interrupt(t);
    atomic_fetch_sub(&ftc__ip_busy, 1);
}

static void ftc__ip_trainer_set(ftc_trainer_t *t)
{
    atomic_store(&ftc__ip_trainer, t);
    while (atomic_load(&ftc__ip_busy))
        ;
}

static void ftc__ip_groups(ftc_dist_t *d)
{
    atomic_store(&ftc__ip_dp, d ? d->dp : NULL);
    atomic_store(&ftc__ip_tp, d ? d->tp : NULL);
    while (atomic_load(&ftc__ip_busy))
        ;
}

static int ftc__train_run(
const ftc_cli_cmd_t *cmd, int argc, char **argv)
{
    ftc__train_args_t g = {
        .model = "tiny", .backend = "auto", .lr = "1e-3", .min_lr_ratio = "0.1",
        .weight_decay = "0.1", .grad_clip = "1.0", .steps = 200, .micro_batch = 8, .seq_len = 64,
        .warmup = 10, .seed = 1337, .corpus_bytes = 1u << 20, .dp = 1, .ckpt_every = 10,
        .eval_batches = 16, .log_every = 10, .coll_timeout_ms = 60000, .tp = 1,
        .agent_call_timeout_ms = 60000,
        .guard = "skip", .guard_spike_sigma = "0", .guard_window = 50,
        .inject_nan = UINT64_MAX, .inject_spike = UINT64_MAX, .coll = "auto",
    };
    bool seen[FTC__NOPTS] = {0};
    const ftc_cli_opt_t opts[FTC__NOPTS] = {
        {"--model", FTC_OPT_STR, &g.model, &seen[0]},
        {"--data", FTC_OPT_STR, &g.data, &seen[1]},
        {"--corpus", FTC_OPT_STR, &g.corpus, &seen[2]},
        {"--ckpt-dir", FTC_OPT_STR, &g.ckpt_dir, &seen[3]},
        {"--backend", FTC_OPT_STR, &g.backend, &seen[4]},
        {"--tokenize", FTC_OPT_STR, &g.tokenize, &seen[5]},
        {"--train-config", FTC_OPT_STR, &g.config, &seen[6]},
        {"--lr", FTC_OPT_STR, &g.lr, &seen[7]},
        {"--min-lr-ratio", FTC_OPT_STR, &g.min_lr_ratio, &seen[8]},
        {"--weight-decay", FTC_OPT_STR, &g.weight_decay, &seen[9]},
        {"--grad-clip", FTC_OPT_STR, &g.grad_clip, &seen[10]},
        {"--steps", FTC_OPT_U64, &g.steps, &seen[11]},
        {"--micro-batch", FTC_OPT_U64, &g.micro_batch, &seen[12]},
        {"--global-batch", FTC_OPT_U64, &g.global_batch, &seen[13]},
        {"--seq-len", FTC_OPT_U64, &g.seq_len, &seen[14]},
        {"--warmup", FTC_OPT_U64, &g.warmup, &seen[15]},
        {"--seed", FTC_OPT_U64, &g.seed, &seen[16]},
        {"--corpus-bytes", FTC_OPT_SIZE, &g.corpus_bytes, &seen[17]},
        {"--dp", FTC_OPT_U64, &g.dp, &seen[18]},
        {"--ckpt-every", FTC_OPT_U64, &g.ckpt_every, &seen[19]},
        {"--eval-batches", FTC_OPT_U64, &g.eval_batches, &seen[20]},
        {"--log-every", FTC_OPT_U64, &g.log_every, &seen[21]},
        {"--deterministic", FTC_OPT_FLAG, &g.deterministic, &seen[22]},
        {"--threads", FTC_OPT_U64, &g.threads, &seen[23]},
        {"--agent", FTC_OPT_STR, &g.agent, &seen[24]},
        {"--nproc", FTC_OPT_U64, &g.nproc, &seen[25]},
        {"--nproc-per-node", FTC_OPT_U64, &g.nproc_per_node, &seen[26]},
        {"--coll-timeout-ms", FTC_OPT_U64, &g.coll_timeout_ms, &seen[27]},
        {"--stop-at", FTC_OPT_U64, &g.stop_at, &seen[28]},
        {"--tp", FTC_OPT_U64, &g.tp, &seen[29]},
        {"--guard", FTC_OPT_STR, &g.guard, &seen[30]},
        {"--guard-spike-sigma", FTC_OPT_STR, &g.guard_spike_sigma, &seen[31]},
        {"--guard-window", FTC_OPT_U64, &g.guard_window, &seen[32]},
        {"--skip-steps", FTC_OPT_STR, &g.skip_steps, &seen[33]},
        {"--inject-nan", FTC_OPT_U64, &g.inject_nan, &seen[34]},
        {"--inject-spike", FTC_OPT_U64, &g.inject_spike, &seen[35]},
        {"--inject-rank", FTC_OPT_U64, &g.inject_rank, &seen[36]},
        {"--coll", FTC_OPT_STR, &g.coll, &seen[37]},
        {"--agent-call-timeout-ms", FTC_OPT_U64, &g.agent_call_timeout_ms, &seen[38]},
    };
    ftc_cli_args_t a;
    int ec = ftc_cli_parse(cmd, argc, argv, opts, FTC__NOPTS, 0, 0, &a);
    if (ec != FTC_CLI_CONTINUE)
        return ec;
    /* the one config key ftc train reads (the agent's settings are the agent's);
     * said once (by --nproc's launcher, else by rank 0), not by every rank */
    const char *rank_env = getenv("RANK");
    if (!getenv("FTC_TRAIN_RDZV_DIR") && (!rank_env || !strcmp(rank_env, "0")))
        FTC_CLI_WARN_IGNORED(cmd, &a, FTC_CFG_JOB_ID);
    json_t *root = NULL;
    ftc_trainer_t *t = NULL;
    ftc_dist_t *dist = NULL;
    ftc_err_t err = {0};
    if (g.config) {
        json_error_t je;
        root = json_load_file(g.config, 0, &je);
        if (!root || !json_is_object(root)) {
            ec = ftc_cli_usage_error(cmd, "--train-config %s: %s (line %d, column %d)", g.config,
                                     root ? "not a JSON object" : je.text, je.line, je.column);
            goto out;
        }
        if ((ec = ftc__apply_json(cmd, root, opts, seen)) != FTC_CLI_CONTINUE)
            goto out;
    }
    if (g.tokenize) {
        if (!g.data) {
            ec = ftc_cli_usage_error(cmd, "--tokenize TEXT needs --data OUT (the token file)");
            goto out;
        }
        uint64_t n = 0;
        if (ftc_tokenize_file(g.tokenize, g.data, &n, &err) < 0) {
            ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        printf("tokenized %s: %llu tokens (bytes, vocab 256) -> %s\n", g.tokenize,
               (unsigned long long)n, g.data);
        ec = FTC_EXIT_OK;
        goto out;
    }
    /* process layout: launcher, one rank under a launcher, or one process */
    uint64_t nproc = g.nproc ? g.nproc : g.nproc_per_node;
    const char *wenv = getenv("WORLD_SIZE"), *renv = getenv("RANK");
    bool rank_mode = wenv && *wenv && renv && *renv;
    if (g.coll_timeout_ms < 1 || g.coll_timeout_ms > 86400000) {
        ec = ftc_cli_usage_error(cmd, "--coll-timeout-ms must be 1..86400000");
        goto out;
    }
    if (g.agent_call_timeout_ms < 1 || g.agent_call_timeout_ms > 86400000) {
        ec = ftc_cli_usage_error(cmd, "--agent-call-timeout-ms must be 1..86400000");
        goto out;
    }
    /* fault injection for tests and drills: FTC_TRAIN_DIE_IN_CKPT=RANK:STEP
     * SIGKILLs rank RANK right after the checkpoint of STEP started (its
     * snapshot and replication in flight), unless this process resumed; read
     * before a launcher starts its ranks */
    long die_rank = -1;
    uint64_t die_step = 0;
    if (ftc__die_env(&die_rank, &die_step, &err) < 0) {
        ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    if (nproc > 64 || (nproc > 1 && g.dp > 1)) {
        ec = ftc_cli_usage_error(cmd, "--nproc %llu: must be 1..64, and excludes --dp (virtual "
                                      "ranks)", (unsigned long long)nproc);
        goto out;
    }
    if (g.tp != 1) {
        /* checked before launching: the layout and the model's heads */
        int64_t w = (int64_t)nproc;
        if (rank_mode && ftc__env_num("WORLD_SIZE", 1, 64, 1, &w, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        ftc_model_config_t mc;
        if (w < 2) {
            ec = ftc_cli_usage_error(cmd, "--tp %llu needs a multiple of %llu ranks: --nproc N "
                                          "(or N ranks under a launcher, WORLD_SIZE)",
                                     (unsigned long long)g.tp, (unsigned long long)g.tp);
            goto out;
        }
        if (g.tp < 1 || g.tp > 64 || (uint64_t)w % g.tp) {
            ec = ftc_cli_usage_error(cmd, "--tp %llu: must be 1..64 and divide the %llu ranks "
                                          "(--nproc N or WORLD_SIZE); each group of T "
                                          "neighbouring ranks is one tensor-parallel group",
                                     (unsigned long long)g.tp, (unsigned long long)w);
            goto out;
        }
        if (ftc_model_preset(g.model, &mc, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "--model: %s", ftc_err_str(&err));
            goto out;
        }
        if (mc.heads % (int)g.tp) {
            ec = ftc_cli_usage_error(cmd, "--tp %llu must divide the %d attention heads of model "
                                          "%s", (unsigned long long)g.tp, mc.heads, g.model);
            goto out;
        }
        if (g.dp > 1) {
            ec = ftc_cli_usage_error(cmd, "--tp excludes --dp (virtual ranks)");
            goto out;
        }
    }
    int coll = ftc_dist_coll_parse(g.coll);
    if (coll < 0) {
        ec = ftc_cli_usage_error(cmd, "--coll '%s': cpu, nccl or auto", g.coll);
        goto out;
    }
    ftc__train_vals_t vals;
    if ((ec = ftc__check_args(cmd, &g, &vals)) != FTC_CLI_CONTINUE)
        goto out;
    if (nproc > 1 && !rank_mode) {
        /* a rank waiting on its agent (up to --agent-call-timeout-ms) is not killed */
        uint64_t wait_ms = g.coll_timeout_ms > g.agent_call_timeout_ms ? g.coll_timeout_ms
                                                                        : g.agent_call_timeout_ms;
        ec = ftc__launch(cmd, argc, argv, (int)nproc, wait_ms + 20000);
        goto out;
    }
    /* in-process recovery: this process survives a failed generation, takes
     * the next one's environment from FTC_ASSIGN_FILE and comes back here */
    const char *assign = getenv("FTC_ASSIGN_FILE");
    bool inproc = rank_mode && assign && *assign;
    char assign_path[4200] = "", state_path[4300] = "", why[300] = "";
    uint64_t gen = 0;
    int64_t assign_ms = 600000; /* in-process: a left rank waits this long for its next turn */
    /* the recovery timeline of this generation, logged after its first step
     * when it resumed (bench/bench_recover --trainer reads it) */
    uint64_t t_gen = ftc_now_ns(), t_groups = 0, t_restored = 0;
    bool timed = false, continued = false; /* continued: in-process, after a leave */
    if (inproc) {
        snprintf(assign_path, sizeof assign_path, "%s", assign);
        ftc_inproc_state_path(assign_path, state_path, sizeof state_path);
        signal(SIGPIPE, SIG_IGN); /* a restarted agent's socket */
    }
    /* a rank of a launcher (either mode) catches SIGUSR1: only the
     * supervisor's queued request (in-process) is acted on; a plain one
     * (Slurm's --signal=USR1@N warning reaches every process of the step)
     * is logged and ignored: it killed the rank (restart mode), or made
     * every rank leave its generation (in-process) */
    if (rank_mode && ftc_inproc_install(inproc ? ftc__ip_abort : NULL, NULL, &err) < 0) {
        ec = ftc_cli_fail(cmd, "%s: %s", inproc ? "in-process" : "SIGUSR1", ftc_err_str(&err));
        goto out;
    }
generation:
    t_gen = ftc_now_ns();
    t_groups = t_restored = 0;
    timed = false;
    {
        int64_t g64 = 0; /* ftc run's incarnation (the assignment's, in-process) */
        if (ftc__env_num("FTC_GENERATION", 0, INT64_MAX, 0, &g64, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        gen = (uint64_t)g64;
        /* the wait for the next assignment, read now: garbage is an error at
         * the start, not a silent default when a generation has failed */
        if (inproc &&
            ftc__env_num("FTC_ASSIGN_TIMEOUT_MS", 1, INT64_MAX, 600000, &assign_ms, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
    }
    if (inproc) {
        ftc_inproc_set_generation(gen);
        atomic_store(&ftc__ip_join_abort, 0);
        ftc_inproc_state_t ist = {.pid = getpid(), .gen = gen, .phase = FTC_INPROC_RUNNING};
        if (ftc_inproc_state_write(state_path, &ist, &err) < 0) {
            ec = ftc_cli_fail(cmd, "in-process: %s", ftc_err_str(&err));
            goto out;
        }
        wenv = getenv("WORLD_SIZE"), renv = getenv("RANK"); /* the assignment's */
        rank_mode = wenv && *wenv && renv && *renv;
        /* the supervisor may have asked this generation to go before we took it up */
        if (ftc_inproc_leave_requested()) {
            snprintf(why, sizeof why, "the supervisor asked (SIGUSR1) before it started");
            goto leave;
        }
    }
    int world = 1, rank = 0;
    if (rank_mode) {
        int64_t wl = 1, rl = 0;
        if (ftc__env_num("WORLD_SIZE", 1, 64, 1, &wl, &err) < 0 ||
            ftc__env_num("RANK", 0, wl - 1, 0, &rl, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        world = (int)wl, rank = (int)rl;
    }
    bool quiet = rank != 0; /* only rank 0 prints the progress */
    /* the TP group of DP rank 0 (ranks 0..tp-1) evaluates and hashes together */
    bool final = (uint64_t)rank < g.tp;
    int coll_kind = FTC_DIST_COLL_CPU, cuda_dev = -1; /* trainer/dist.h decides, and says why */
    char coll_why[256];
    int64_t lrank = rank, lworld = world;
    if (ftc__env_num("LOCAL_WORLD_SIZE", 1, 65536, world, &lworld, &err) < 0 ||
        ftc__env_num("LOCAL_RANK", 0, lworld - 1, rank, &lrank, &err) < 0) {
        ec = ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err));
        goto out;
    }
    if (ftc_dist_coll_resolve(coll, g.backend, (int)lrank, (int)lworld, &coll_kind, &cuda_dev,
                              coll_why, sizeof coll_why, &err) < 0) {
        ec = err.code == FTC_EINVAL ? ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err))
                                    : ftc_cli_fail(cmd, "rank %d: %s", rank, ftc_err_str(&err));
        goto out;
    }
    if (!quiet)
        FTC_INFO("train", "collectives: %s%s", coll_why,
                 world > 1 ? "" : " (one rank: no group to build)");
    if (world > 1) {
        if (g.dp > 1) {
            ec = ftc_cli_usage_error(cmd, "--dp (virtual ranks) cannot be combined with %d real "
                                          "ranks", world);
            goto out;
        }
        g.deterministic = true; /* real DP sums gradients exactly */
        const char *rdir = getenv("FTC_TRAIN_RDZV_DIR");
        int port = 0;
        if ((!rdir || !*rdir) && ftc__rdzv_port(&port, &err) < 0) {
            ec = ftc_cli_usage_error(cmd, "rank %d of %d: %s", rank, world, ftc_err_str(&err));
            goto out;
        }
        ftc_dist_opts_t dopt = {.world = world, .tp = (int)g.tp, .rank = rank, .provider = NULL,
                                .dir = rdir, .host = getenv("MASTER_ADDR"), .port = port,
                                /* slow starts on a loaded machine: at least a minute */
                                .timeout_ms = g.coll_timeout_ms > 60000 ? (int)g.coll_timeout_ms
                                                                        : 60000,
                                .abort = inproc ? &ftc__ip_join_abort : NULL,
                                .coll = coll_kind, .cuda_device = cuda_dev,
                                .job = ftc__rdzv_job(),
                                .generation = gen};
        if ((!dopt.dir || !*dopt.dir) && (!dopt.host || !*dopt.host || dopt.port < 1)) {
            ec = ftc_cli_usage_error(cmd, "rank %d of %d: set MASTER_ADDR and MASTER_PORT (the "
                                          "rendezvous on rank 0), or run ftc train --nproc N",
                                     rank, world);
            goto out;
        }
        if (ftc_dist_join(&dopt, &dist, &err) < 0) {
            snprintf(why, sizeof why, "joining the group: %s", ftc_err_str(&err));
            if (inproc)
                goto leave;
            ec = ftc_cli_fail(cmd, "rank %d of %d: %s", rank, world, why);
            goto out;
        }
        t_groups = ftc_now_ns();
        if (inproc)
            ftc__ip_groups(dist);
        if (inproc && ftc_inproc_leave_requested()) { /* asked while the group formed */
            snprintf(why, sizeof why, "the supervisor asked (SIGUSR1) while joining the group");
            goto leave;
        }
    }
    const char *agent = g.agent ? g.agent : getenv("FTC_AGENT_SOCKET");
    if (agent && !*agent)
        agent = NULL;
    if (agent && !seen[19])
        g.ckpt_every = 1;
    ftc_train_options_t o = FTC_TRAIN_OPTIONS_INIT;
    if (ftc_model_preset(g.model, &o.model, &err) < 0) {
        ec = ftc_cli_usage_error(cmd, "--model: %s", ftc_err_str(&err));
        goto out;
    }
    /* (every flag's value was checked and converted by ftc__check_args, before any launch) */
    o.optim.lr = vals.lr;
    o.optim.min_lr_ratio = vals.min_lr_ratio;
    o.optim.weight_decay = vals.weight_decay;
    o.optim.grad_clip = vals.grad_clip;
    o.backend = g.backend;
    o.micro_batch = (int)g.micro_batch;
    o.seq_len = (int)g.seq_len;
    o.micro_steps = (int)(g.global_batch / g.micro_batch);
    o.steps = g.steps;
    o.optim.warmup = g.warmup;
    o.seed = g.seed;
    o.deterministic = g.deterministic;
    o.dp = (int)g.dp;
    o.data_path = g.data;
    o.corpus_bytes = g.corpus_bytes;
    o.ckpt_dir = g.ckpt_dir;
    o.ckpt_every = g.ckpt_every;
    o.job_id = ftc_config_str(a.cfg, FTC_CFG_JOB_ID);
    o.dp_coll = dist ? dist->dp : NULL;
    o.tp_coll = dist ? dist->tp : NULL;
    o.tp = (int)g.tp;
    o.coll_timeout_ms = (int)g.coll_timeout_ms;
    o.world_rank = rank;
    o.world_size = world;
    o.agent = agent;
    o.agent_call_timeout_ms = (int)g.agent_call_timeout_ms;
    /* the numerical guard */
    o.guard = vals.guard;
    o.guard_spike_sigma = vals.guard_spike_sigma;
    o.guard_window = (int)g.guard_window; /* 2..FTC_GUARD_WINDOW_MAX, checked above */
    o.n_skip_steps = vals.n_skip_steps;
    o.skip_steps = vals.skip_steps;
    o.inject_nan_step = g.inject_nan == UINT64_MAX ? -1 : (int64_t)(g.inject_nan & INT64_MAX);
    o.inject_spike_step = g.inject_spike == UINT64_MAX ? -1 : (int64_t)(g.inject_spike & INT64_MAX);
    o.inject_rank = (int)g.inject_rank; /* 0..63 and threads 0..256: ftc__check_args */
    if (g.threads > 0)
        ftc_kernels_cpu_set_threads((int)g.threads);

    if (!t_groups)
        t_groups = ftc_now_ns();
    t = ftc_trainer_create(&o, &err);
    t_restored = ftc_now_ns();
    if (t && inproc)
        ftc__ip_trainer_set(t);
    if (!t && inproc && err.code != FTC_EINVAL) {
        snprintf(why, sizeof why, "%s", ftc_err_str(&err));
        goto leave;
    }
    if (!t) {
        /* FTC_ECONFIG: the checkpoint directory was written by another
         * configuration (or holds the other kind of checkpoint): the command
         * line does not fit it, exit 2 like a usage error (docs/trainer.md),
         * without the usage text (the message says what to change) */
        if (err.code == FTC_ECONFIG) {
            ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
            ec = FTC_EXIT_USAGE;
        } else {
            ec = err.code == FTC_EINVAL ? ftc_cli_usage_error(cmd, "%s", ftc_err_str(&err))
                                        : ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
        }
        goto out;
    }
    ftc_model_t *m = ftc_trainer_model(t);
    if (!quiet)
        FTC_INFO("train", "model %s: %zu parameters, L %d, C %d, heads %d; "
             "global batch %d x %d sequences of %d tokens; %s%s", /* the backend: kernels' line */
             g.model, ftc_model_param_count(&o.model),
             o.model.layers, o.model.channels, o.model.heads, o.micro_steps, o.micro_batch,
             o.seq_len, o.deterministic ? "deterministic" : "fp32 accumulation",
             world > (int)g.tp ? " over real DP ranks (ZeRO-1)"
                               : o.dp > 1 ? " over virtual ranks" : "");
    if (!quiet && g.tp > 1)
        FTC_INFO("train", "tensor parallelism: %d DP x %llu TP ranks, %zu parameters per TP rank",
                 world / (int)g.tp, (unsigned long long)g.tp, ftc_model_num_params(m));
    bool tty = !quiet && isatty(STDOUT_FILENO);
    uint64_t stop = g.stop_at && g.stop_at < o.steps ? g.stop_at : o.steps;
    ftc_train_stats_t st;
    double tok_s = 0.0, secs = 0.0;
    uint64_t toks = 0;
    /* FTC_TRAIN_TIMING=1: machine-readable lines for bench/bench_recover
     * (the format of tests/ckpt/rank_main --timing): "TIMING rank R gen G
     * groups ms X at T", "... restored S ms X at T", "... verified ms 0 at
     * T", "... step S at T" (T: wall-clock ms) */
    const char *tenv = getenv("FTC_TRAIN_TIMING");
    bool timing = tenv && *tenv && strcmp(tenv, "0");
    unsigned long long tgen = gen;
    if (timing) {
        uint64_t w = ftc_wall_ms(), now = ftc_now_ns();
        printf("TIMING rank %d gen %llu groups ms %.0f at %llu\n", rank, tgen,
               (double)(t_groups - t_gen) / 1e6,
               (unsigned long long)(w - (now - t_groups) / 1000000));
        if (ftc_trainer_resumed_from(t) != UINT64_MAX) {
            /* the state after N steps holds step N-1, in the step lines' numbering */
            printf("TIMING rank %d gen %llu restored %lld ms %.0f at %llu\n", rank, tgen,
                   (long long)ftc_trainer_resumed_from(t) - 1,
                   (double)(t_restored - t_groups) / 1e6,
                   (unsigned long long)(w - (now - t_restored) / 1000000));
            printf("TIMING rank %d gen %llu verified ms 0 at %llu\n", rank, tgen,
                   (unsigned long long)(w - (now - t_restored) / 1000000));
        }
        fflush(stdout);
    }
    while (ftc_trainer_steps_done(t) < stop) {
        int usr1 = ftc_inproc_ignored_signal();
        if (usr1) {
            char from[32] = "an unknown sender";
            if (usr1 > 0)
                snprintf(from, sizeof from, "pid %d", usr1);
            FTC_WARN("train", "rank %d: SIGUSR1 from %s ignored (a plain signal, not the "
                     "supervisor's queued request)", rank, from);
        }
        if (inproc && ftc_inproc_leave_requested()) {
            snprintf(why, sizeof why, "the supervisor asked (SIGUSR1) after step %llu",
                     (unsigned long long)ftc_trainer_steps_done(t));
            goto leave;
        }
        if (ftc_trainer_step(t, &st, &err) < 0) {
            if (tty)
                printf("\n");
            if (inproc) {
                snprintf(why, sizeof why, "%s%s", ftc_inproc_leave_requested() ? "SIGUSR1: " : "",
                         ftc_err_str(&err));
                goto leave;
            }
            ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
            goto out;
        }
        if (die_rank == rank && st.checkpointed && ftc_trainer_steps_done(t) == die_step &&
            ftc_trainer_resumed_from(t) == UINT64_MAX) {
            printf("FTC_TRAIN_DIE_IN_CKPT: rank %d killed with the checkpoint of step %llu in "
                   "flight\n", rank, (unsigned long long)die_step);
            fflush(stdout);
            raise(SIGKILL);
        }
        if (st.skipped && !quiet) { /* the trainer logged the why; the progress says what */
            if (tty)
                printf("\n");
            if (st.rolled_back_to != UINT64_MAX)
                printf("step %llu/%llu %s: rolled back to step %llu, batch skipped\n",
                       (unsigned long long)st.step + 1, (unsigned long long)o.steps, st.guard,
                       (unsigned long long)st.rolled_back_to);
            else
                printf("step %llu/%llu %s: batch skipped%s\n", (unsigned long long)st.step + 1,
                       (unsigned long long)o.steps, st.guard, st.checkpointed ? " ckpt" : "");
            fflush(stdout);
        }
        if (timing && !st.skipped) {
            printf("TIMING rank %d gen %llu step %llu at %llu\n", rank, tgen,
                   (unsigned long long)st.step, (unsigned long long)ftc_wall_ms());
            fflush(stdout);
        }
        if (!timed && ftc_trainer_resumed_from(t) != UINT64_MAX) {
            /* groups = the communicators (re)built; restore = the trainer's
             * init, its restore through the agent (fetch, re-partition) */
            uint64_t now = ftc_now_ns();
            FTC_INFO("train", "recovery timing: rank %d generation %" PRIu64 ": groups %.1f ms, "
                     "restore %.1f ms, first step %.1f ms (from %s)", rank,
                     gen,
                     (double)(t_groups - t_gen) / 1e6, (double)(t_restored - t_groups) / 1e6,
                     (double)(now - t_restored) / 1e6,
                     continued ? "the assignment, in-process" : "the process start");
        }
        timed = true;
        if (st.skipped && ftc_trainer_steps_done(t) != stop)
            continue;
        secs += st.seconds;
        toks += st.tokens;
        tok_s = st.seconds > 0 ? (double)st.tokens / st.seconds : 0.0;
        bool last = ftc_trainer_steps_done(t) == stop;
        if (last && stop < o.steps && !st.checkpointed &&
            (o.agent || (o.ckpt_dir && *o.ckpt_dir))) {
            /* not taken (the agent's policy skipped it, or its snapshot
             * failed: logged): no "ckpt" mark, a resume starts earlier */
            bool taken = false;
            if (ftc_trainer_checkpoint(t, &taken, &err) < 0) {
                ec = ftc_cli_fail(cmd, "%s", ftc_err_str(&err));
                goto out;
            }
            st.checkpointed = taken;
            if (!taken)
                FTC_WARN("train", "--stop-at %llu: the checkpoint of step %llu was not taken "
                         "(the agent skipped it, or its snapshot failed): a resume starts from "
                         "the newest committed checkpoint before it",
                         (unsigned long long)stop, (unsigned long long)stop);
        }
        if (quiet)
            continue;
        if (tty) {
            printf("\rstep %llu/%llu | loss %.4f | %.0f tok/s | lr %.2e | norm %.3f%s\033[K",
                   (unsigned long long)st.step + 1, (unsigned long long)o.steps, st.loss, tok_s,
                   st.lr, st.grad_norm, st.checkpointed ? " | ckpt" : "");
            if (last)
                printf("\n");
            fflush(stdout);
        } else if ((st.step + 1) % g.log_every == 0 || last || st.step == 0) {
            printf("step %llu/%llu loss %.4f tok/s %.0f lr %.3e norm %.4f%s\n",
                   (unsigned long long)st.step + 1, (unsigned long long)o.steps, st.loss, tok_s,
                   st.lr, st.grad_norm, st.checkpointed ? " ckpt" : "");
            fflush(stdout);
        }
    }
    if (!final) {
        ec = FTC_EXIT_OK;
        goto out;
    }
    /* with TP the forward and the hash are collectives of the TP group */
    float ev = ftc_trainer_eval(t, (int)(g.eval_batches ? g.eval_batches : 1));
    if (g.tp > 1 && ftc_model_status(m, &err) < 0) {
        ec = ftc_cli_fail(cmd, "evaluation: %s", ftc_err_str(&err));
        goto out;
    }
    /* the weights' fingerprint: the FULL parameters (with TP the slices
     * gathered into the full tensors), the same for every DP degree in
     * deterministic mode (at a fixed TP degree) */
    uint64_t ph = 0;
    if (ftc_trainer_full_params(t, &ph, NULL, &err) < 0) {
        ec = ftc_cli_fail(cmd, "hashing the parameters: %s", ftc_err_str(&err));
        goto out;
    }
    if (quiet) {
        ec = FTC_EXIT_OK;
        goto out;
    }
    printf("eval loss %.4f (%llu held-out sequences); %.0f tokens/s over the run\n", ev,
           (unsigned long long)((g.eval_batches ? g.eval_batches : 1) * g.micro_batch),
           secs > 0 ? (double)toks / secs : 0.0);
    printf("params xxh3 %016llx after %llu steps\n", (unsigned long long)ph,
           (unsigned long long)ftc_trainer_steps_done(t));
    ec = isfinite(ev) ? FTC_EXIT_OK : FTC_EXIT_FAIL;
    goto out;
leave:
    /* in-process: leave this generation (the trainer, its ftc context and
     * the groups go; the supervisor restarts the agent), wait for the next
     * one's assignment, and run the same init path again in this process */
    ftc__ip_trainer_set(NULL);
    ftc_trainer_destroy(t);
    t = NULL;
    ftc__ip_groups(NULL);
    ftc_dist_destroy(dist);
    dist = NULL;
    {
        FTC_WARN("train", "rank %s: left generation %" PRIu64 " (%s): waiting for the next "
                 "(in-process, pid %d)", renv ? renv : "?", gen, why, (int)getpid());
        ftc_inproc_state_t ist = {.pid = getpid(), .gen = gen, .phase = FTC_INPROC_WAITING};
        snprintf(ist.why, sizeof ist.why, "%s", why);
        ftc_inproc_assign_t *asg = malloc(sizeof *asg);
        ftc_deadline_t dl = ftc_deadline_in_ms((uint64_t)assign_ms);
        if (!asg) {
            ec = ftc_cli_fail(cmd, "in-process: out of memory");
            goto out;
        }
        if (ftc_inproc_state_write(state_path, &ist, &err) < 0 ||
            ftc_inproc_assign_wait(assign_path, gen, dl, NULL, asg, &err) < 0 ||
            ftc_inproc_apply(asg, &err) < 0) {
            free(asg);
            ec = ftc_cli_fail(cmd, "in-process recovery after generation %" PRIu64 ": %s", gen,
                              ftc_err_str(&err));
            goto out;
        }
        free(asg);
        FTC_INFO("train", "continuing in-process into generation %s as rank %s of %s (pid %d)",
                 getenv("FTC_GENERATION"), getenv("RANK"), getenv("WORLD_SIZE"), (int)getpid());
        continued = true;
        goto generation;
    }
out:
    ftc__ip_trainer_set(NULL);
    ftc_trainer_destroy(t);
    ftc_dist_destroy(dist);
    json_decref(root);
    ftc_cli_args_free(&a);
    return ec;
}

const ftc_cli_cmd_t ftc_cli_cmd_train = {"train",
                                         "train the reference GPT (CPU; N processes with --nproc)",
                                         ftc__train_help, ftc__train_run};
