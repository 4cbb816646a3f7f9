/*
 * bench_snapshot.c — what a checkpoint costs the training loop, for host
 * tensors of --bytes per rank (default 256 MiB and 1 GiB):
 *
 *   1. Snapshot copy throughput of the snapshot engine (ckpt/snapshot.h):
 *      ftc_snap_begin .. ftc_snap_wait_copy of the rank's tensors into a
 *      formatted shm slot (ckpt/slot.h), copy threads = online cores, next to
 *      a single-threaded memcpy and a multi-threaded memcpy (same thread
 *      count) of the same bytes from the same tensors into the same slot,
 *      measured interleaved in the same run. Prints GB/s (best of --reps) and
 *      snapshot / memcpy ratios (target: snapshot >= 0.8 x memcpy), and the
 *      seal time (copy done .. sealed: per-tensor xxh3 and footer).
 *
 *   2. The stall ratio through the real library (include/ftc.h) against real
 *      `ftc agent` processes and an embedded Redis on loopback: a loop whose
 *      "forward/backward" is a fixed amount of busy work on ONE thread (an
 *      FMA kernel over a 16 KiB cache-resident buffer, calibrated at start
 *      to about --step-ms), then ftc_wait_snapshot, an "optimizer" that
 *      writes one float in every 64 KiB of the tensors, and ftc_checkpoint.
 *      Step time with a checkpoint every step divided by step time without
 *      (target <= 1.03), mean and p90 over --steps steps after warm-up. Two
 *      variants: "r0", one agent with --redundancy 0 (single node, no
 *      replication) and "r1", two agents with --redundancy 1 (each sealed
 *      shard really replicated to the peer agent over tcp;ofi_rxm), where a
 *      second rank process (a fork of this one) runs the same loop against
 *      the second agent in lockstep phases. Baseline steps are measured both
 *      before and after the checkpointed steps and pooled.
 *
 *   bench_snapshot [--bytes 256MiB,1GiB] [--reps 5] [--steps 20] [--warmup 3]
 *                  [--step-ms 200] [--ftc PATH/TO/ftc]
 *
 * Prints the load average at start and end: these figures come from a
 * shared 2-core machine unless said otherwise. Never exits nonzero for a
 * missed target; exits 1 only when something fails to run. Every child
 * process (agents, the second rank; Redis dies with this process) and every
 * /dev/shm object and temporary directory it created is removed on the way
 * out, also after an error or SIGINT/SIGTERM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ckpt/agent.h"
#include "ckpt/shard.h"
#include "ckpt/slot.h"
#include "ckpt/snapshot.h"
#include "core/clock.h"
#include "core/config.h"
#include "detect/redis_server.h"
#include "ftc.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NT 4 /* tensors per rank: w (1/2 of the bytes), optim.m (1/4), optim.v (1/8), bias */

typedef struct bench {
    size_t bytes;
    int reps, steps, warmup, step_ms;
    int copy_threads;   /* ftc_options_t.threads of the stall loops (0: one per core) */
    char ftc[PATH_MAX];
    char tmp[PATH_MAX]; /* mkdtemp: redis/, one job dir per variant */
    char tag[32];       /* "sb<pid>": prefix of every job id and shm name */
} bench_t;

/* ---- cleanup: everything this process created ------------------------------------- */

static struct {
    pid_t pids[8];
    int npids;
    ftc_redis_server_t *redis;
    char tmp[PATH_MAX];
    char shm_prefix[64];
    bool child; /* the forked second rank: owns nothing */
} G;
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void track_pid(pid_t p)
{
    if (G.npids < 8)
        G.pids[G.npids++] = p;
}

static void untrack_pid(pid_t p)
{
    for (int i = 0; i < G.npids; i++)
        if (G.pids[i] == p)
            G.pids[i] = G.pids[--G.npids];
}

/* SIGTERM, then SIGKILL if it has not exited within ms. */
static void stop_pid(pid_t p, int ms)
{
    int st;
    if (p <= 0)
        return;
    kill(p, SIGTERM);
    ftc_deadline_t d = ftc_deadline_in_ms((uint64_t)ms);
    while (waitpid(p, &st, WNOHANG) == 0) {
        if (ftc_deadline_expired(d)) {
            kill(p, SIGKILL);
            waitpid(p, &st, 0);
            break;
        }
        ftc_sleep_ms(10);
    }
    untrack_pid(p);
}

static void unlink_shm(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix))) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
            unlink(p);
        }
    closedir(d);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

static void cleanup(void)
{
    if (G.child)
        return;
    while (G.npids > 0)
        stop_pid(G.pids[G.npids - 1], 5000);
    ftc_redis_server_stop(G.redis);
    G.redis = NULL;
    if (G.shm_prefix[0])
        unlink_shm(G.shm_prefix);
    if (G.tmp[0])
        nftw(G.tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    G.tmp[0] = 0;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_snapshot%s: ", G.child ? " (rank 1)" : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (G.child)
        _exit(1);
    cleanup();
    exit(1);
}

static void print_load(const char *when)
{
    double l[3] = {-1, -1, -1};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
            l[0] = -1;
        fclose(f);
    }
    printf("bench_snapshot: load average %s %.2f %.2f %.2f, %ld cores online "
           "(a shared machine: other work competes for these cores)\n",
           when, l[0], l[1], l[2], sysconf(_SC_NPROCESSORS_ONLN));
    fflush(stdout);
}

/* ---- statistics ------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return n ? s / n : 0;
}

/* Nearest-rank p90. */
static double p90(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double *c = malloc(sizeof *c * (size_t)n);
    if (!c)
        die("out of memory");
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    int k = (int)((9 * n + 9) / 10) - 1; /* ceil(0.9 n) - 1 */
    double r = c[k < 0 ? 0 : k];
    free(c);
    return r;
}

/* ---- the rank's tensors ------------------------------------------------------------ */

typedef struct tensors {
    float *p[NT];
    uint64_t n[NT]; /* floats */
} tensors_t;

static const char *tname[NT] = {"w", "optim.m", "optim.v", "bias"};

static void tensors_alloc(tensors_t *t, size_t bytes)
{
    uint64_t floats = bytes / 4, q = floats / 8;
    t->n[0] = 4 * q, t->n[1] = 2 * q, t->n[2] = q, t->n[3] = floats - 7 * q;
    for (int i = 0; i < NT; i++) {
        t->p[i] = malloc(t->n[i] * 4 + 4);
        if (!t->p[i])
            die("out of memory for %zu bytes of tensors", bytes);
        for (uint64_t j = 0; j < t->n[i]; j++) /* touched, and not all zero */
            t->p[i][j] = (float)(j % 1021) * 0.001f - 0.5f;
    }
}

static void tensors_free(tensors_t *t)
{
    for (int i = 0; i < NT; i++)
        free(t->p[i]);
}

/* The "optimizer": writes one float in every 64 KiB of every tensor. */
static void optimizer(tensors_t *t)
{
    for (int i = 0; i < NT; i++)
        for (uint64_t j = 0; j < t->n[i]; j += 16384)
            t->p[i][j] += 1e-3f;
}

/* ---- 1. copy throughput -------------------------------------------------------------- */

typedef struct mt_job {
    uint8_t *dst;
    const tensors_t *t;
    uint64_t begin, end; /* byte range of the concatenated tensors */
} mt_job_t;

/* Copies bytes [begin, end) of the concatenated tensors to dst + begin. */
static void copy_range(uint8_t *dst, const tensors_t *t, uint64_t begin, uint64_t end)
{
    uint64_t base = 0;
    for (int i = 0; i < NT && begin < end; i++) {
        uint64_t len = t->n[i] * 4, lo = begin > base ? begin - base : 0;
        if (begin < base + len) {
            uint64_t hi = end - base < len ? end - base : len;
            memcpy(dst + base + lo, (const uint8_t *)t->p[i] + lo, hi - lo);
            begin = base + hi;
        }
        base += len;
    }
}

static void *mt_worker(void *arg)
{
    mt_job_t *j = arg;
    copy_range(j->dst, j->t, j->begin, j->end);
    return NULL;
}

/* Seconds to copy all tensors into dst with nthreads threads (1: this one). */
static double memcpy_time(uint8_t *dst, const tensors_t *t, size_t bytes, int nthreads)
{
    uint64_t t0 = ftc_now_ns();
    if (nthreads <= 1) {
        copy_range(dst, t, 0, bytes);
        return (double)(ftc_now_ns() - t0) * 1e-9;
    }
    pthread_t tid[16];
    mt_job_t jobs[16];
    uint64_t per = (bytes / (uint64_t)nthreads + 4095) & ~(uint64_t)4095;
    for (int i = 0; i < nthreads; i++) {
        uint64_t b = per * (uint64_t)i, e = b + per;
        jobs[i] = (mt_job_t){dst, t, b < bytes ? b : bytes, e < bytes ? e : bytes};
        if (i > 0 && pthread_create(&tid[i], NULL, mt_worker, &jobs[i]))
            die("pthread_create");
    }
    mt_worker(&jobs[0]);
    for (int i = 1; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    return (double)(ftc_now_ns() - t0) * 1e-9;
}

static void bench_copy(const bench_t *B, tensors_t *t)
{
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores < 1 ? 1 : cores > 16 ? 16 : cores;
    ftc_err_t err = {0};
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "%s-copy", B->tag);
    in.dp = in.tp = in.pp = 1;
    ftc_snap_t *s = ftc_snap_create(&in, threads, 4096, &err);
    if (!s)
        die("snapshot engine: %s", err.msg);
    for (int i = 0; i < NT; i++)
        if (ftc_snap_add(s, tname[i], FTC_DTYPE_F32, 1, &t->n[i], t->p[i], FTC_SNAP_HOST, &err))
            die("snapshot add: %s", err.msg);
    uint64_t size = ftc_snap_size(s);
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.%s-copy.s0", B->tag);
    ftc_slot_t slot = {.fd = -1};
    if (ftc_slot_create(name, size, &slot, &err))
        die("slot: %s", err.msg);
    double best_snap = 1e30, best_m1 = 1e30, best_mn = 1e30, sum_seal = 0, best_seal = 1e30;
    double best_total = 1e30, best_reseal = 1e30;
    /* rep -1 is a warm-up (maps the slot's pages); then the three methods
     * interleaved, so that a change of load hits each of them alike */
    for (int rep = -1; rep < B->reps && !g_stop; rep++) {
        double m1 = memcpy_time(slot.base, t, B->bytes, 1);
        double mn = memcpy_time(slot.base, t, B->bytes, threads);
        if (ftc_snap_format(s, slot.base, &err)) /* memcpy overwrote the head */
            die("format: %s", err.msg);
        uint64_t meta = (uint64_t)rep;
        uint64_t t0 = ftc_now_ns();
        if (ftc_snap_begin(s, slot.base, (uint64_t)(rep + 2), 1, &meta, sizeof meta, &err) ||
            ftc_snap_wait_copy(s, ftc_deadline_in_ms(120000), &err))
            die("snapshot: %s", err.msg);
        uint64_t t1 = ftc_now_ns();
        if (ftc_snap_wait_sealed(s, ftc_deadline_in_ms(120000), &err))
            die("seal: %s", err.msg);
        uint64_t t2 = ftc_now_ns();
        /* the seal alone, as the engine's coordinator runs it, on this thread */
        if (ftc_shard_seal(slot.base, size, threads, &err) < 0)
            die("reseal: %s", err.msg);
        double rs = (double)(ftc_now_ns() - t2) * 1e-9;
        if (rep < 0)
            continue;
        double tot = (double)(t2 - t0) * 1e-9;
        best_total = tot < best_total ? tot : best_total;
        best_reseal = rs < best_reseal ? rs : best_reseal;
        double sn = (double)(t1 - t0) * 1e-9, se = (double)(t2 - t1) * 1e-9;
        best_snap = sn < best_snap ? sn : best_snap;
        best_m1 = m1 < best_m1 ? m1 : best_m1;
        best_mn = mn < best_mn ? mn : best_mn;
        best_seal = se < best_seal ? se : best_seal;
        sum_seal += se;
    }
    if (g_stop)
        die("interrupted");
    ftc_snap_destroy(s);
    ftc_slot_close(&slot);
    ftc_slot_unlink(name, &err);
    double gb = (double)B->bytes * 1e-9;
    printf("\n[copy] %zu MiB of host tensors (%d fp32 tensors) into a formatted shm slot, "
           "best of %d, %d threads\n",
           B->bytes >> 20, NT, B->reps, threads);
    printf("%-44s %9s %10s %10s %10s\n", "method", "GB/s", "ms", "/ memcpy1", "/ memcpyN");
    printf("%-44s %9.2f %10.1f %10.2f %10.2f\n", "memcpy, 1 thread", gb / best_m1, best_m1 * 1e3,
           1.0, best_mn / best_m1);
    char lbl[64];
    snprintf(lbl, sizeof lbl, "memcpy, %d threads", threads);
    printf("%-44s %9.2f %10.1f %10.2f %10.2f\n", lbl, gb / best_mn, best_mn * 1e3,
           best_m1 / best_mn, 1.0);
    snprintf(lbl, sizeof lbl, "snapshot copy (begin..wait_copy), %d thr", threads);
    printf("%-44s %9.2f %10.1f %10.2f %10.2f\n", lbl, gb / best_snap, best_snap * 1e3,
           best_m1 / best_snap, best_mn / best_snap);
    printf("%-44s %9.2f %10.1f   (mean %.1f ms)\n", "seal: wait_copy returned..sealed",
           gb / best_seal, best_seal * 1e3, sum_seal / B->reps * 1e3);
    snprintf(lbl, sizeof lbl, "seal alone (ftc_shard_seal, %d threads)", threads);
    printf("%-44s %9.2f %10.1f\n", lbl, gb / best_reseal, best_reseal * 1e3);
    printf("%-44s %9.2f %10.1f\n", "snapshot begin..sealed", gb / best_total, best_total * 1e3);
    fflush(stdout);
}

/* ---- 2. stall ratio ---------------------------------------------------------------- */

#define KBUF 4096 /* floats: 16 KiB, stays in L1/L2 */
static float g_kbuf[KBUF];
static volatile float g_sink;

/* One unit of "forward/backward": 8 FMA passes over the cache-resident buffer. */
static void compute(uint64_t units)
{
    float a = 0.999f, b = 1e-4f;
    for (uint64_t u = 0; u < units; u++)
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < KBUF; i++)
                g_kbuf[i] = g_kbuf[i] * a + b;
    g_sink = g_kbuf[units % KBUF];
}

/* Units of compute that take step_ms on this thread (the fastest of 3
 * measurements, so that a loaded moment does not shrink the work). */
static uint64_t calibrate(int step_ms)
{
    double best = 0; /* units per second */
    for (int k = 0; k < 3; k++) {
        uint64_t units = 0, t0 = ftc_now_ns();
        while (ftc_now_ns() - t0 < 100000000ull) {
            compute(16);
            units += 16;
        }
        double r = (double)units / ((double)(ftc_now_ns() - t0) * 1e-9);
        best = r > best ? r : best;
    }
    uint64_t u = (uint64_t)(best * step_ms / 1000.0);
    return u ? u : 1;
}

/* Exchanges one byte with the other rank: both reach the same phase. */
static void barrier(int fd)
{
    if (fd < 0)
        return;
    char c = 'b';
    if (write(fd, &c, 1) != 1)
        die("barrier write failed (other rank gone?)");
    ftc_deadline_t d = ftc_deadline_in_ms(300000);
    for (;;) {
        if (g_stop)
            die("interrupted");
        if (ftc_deadline_expired(d))
            die("the other rank did not reach the barrier within 300 s");
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            if (read(fd, &c, 1) != 1)
                die("barrier read failed (other rank gone?)");
            return;
        }
    }
}

typedef struct loop_result {
    double base[256], ckpt[256]; /* seconds per measured step */
    int nbase, nckpt;
    double in_wait, in_ckpt; /* seconds inside ftc_wait_snapshot / ftc_checkpoint, measured steps */
    int skipped;             /* FTC_EAGAIN */
    int committed;
} loop_result_t;

/* One rank: baseline steps, checkpointed steps, baseline steps again. */
static void rank_loop(const bench_t *B, const char *job, const char *sock, int rank, int world,
                      uint64_t units, int fd, loop_result_t *R)
{
    memset(R, 0, sizeof *R);
    tensors_t t;
    tensors_alloc(&t, B->bytes);
    ftc_options_t o = FTC_OPTIONS_INIT;
    o.job = job;
    o.agent = sock;
    o.rank = rank;
    o.world = world;
    o.timeout_ms = 60000;
    o.threads = B->copy_threads; /* 0: one per online core */
    ftc_ctx_t *ctx = NULL;
    if (ftc_create(&o, &ctx))
        die("ftc_create: %s", ftc_last_error(ctx));
    for (int i = 0; i < NT; i++) {
        int64_t shape = (int64_t)t.n[i];
        if (ftc_register(ctx, tname[i], FTC_DTYPE_F32, 1, &shape, t.p[i], FTC_HOST))
            die("ftc_register: %s", ftc_last_error(ctx));
    }
    int64_t step = 0, last_ok = -1;
    for (int phase = 0; phase < 3; phase++) {
        bool ck = phase == 1;
        barrier(fd);
        int warm = phase == 2 ? 1 : B->warmup;
        for (int s = 0; s < warm + B->steps; s++) {
            if (g_stop)
                die("interrupted");
            uint64_t t0 = ftc_now_ns();
            compute(units);
            uint64_t t1 = ftc_now_ns();
            if (ck && ftc_wait_snapshot(ctx))
                die("ftc_wait_snapshot: %s", ftc_last_error(ctx));
            uint64_t t2 = ftc_now_ns();
            optimizer(&t);
            if (ck) {
                uint64_t cursor = (uint64_t)step;
                uint64_t t3 = ftc_now_ns();
                int rc = ftc_checkpoint(ctx, step, &cursor, sizeof cursor);
                if (s >= warm) {
                    R->in_wait += (double)(t2 - t1) * 1e-9;
                    R->in_ckpt += (double)(ftc_now_ns() - t3) * 1e-9;
                }
                if (rc == FTC_EAGAIN)
                    R->skipped += s >= warm;
                else if (rc)
                    die("ftc_checkpoint %lld: %s", (long long)step, ftc_last_error(ctx));
                else
                    last_ok = step;
                step++;
            }
            double dt = (double)(ftc_now_ns() - t0) * 1e-9;
            if (s >= warm && ck && R->nckpt < 256)
                R->ckpt[R->nckpt++] = dt;
            else if (s >= warm && !ck && R->nbase < 256)
                R->base[R->nbase++] = dt;
        }
        if (ck) { /* let replication finish before the second baseline */
            if (ftc_wait_snapshot(ctx))
                die("ftc_wait_snapshot: %s", ftc_last_error(ctx));
            R->committed = last_ok >= 0 && ftc_wait_committed(ctx, last_ok) == 0;
            if (!R->committed)
                fprintf(stderr, "bench_snapshot: rank %d: step %lld not committed: %s\n", rank,
                        (long long)last_ok, ftc_last_error(ctx));
        }
    }
    barrier(fd);
    ftc_destroy(ctx);
    tensors_free(&t);
}

static void print_agent_log(const char *dir, int i)
{
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/agent%d.log", dir, i);
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    char buf[4096];
    if (fseek(f, -(long)(sizeof buf - 1), SEEK_END))
        rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    fprintf(stderr, "--- end of %s ---\n%s\n", p, buf);
}

static pid_t start_agent(const bench_t *B, const char *job, const char *dir, const char *url,
                         int i, int nodes, int redundancy, char *sock, size_t cap)
{
    char out[PATH_MAX + 32];
    ftc_agent_socket_path(dir, (uint32_t)i, sock, cap);
    snprintf(out, sizeof out, "%s/agent%d.log", dir, i);
    unlink(sock);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the bench */
        if (getppid() != parent)
            _exit(1);
        if (!freopen(out, "a", stdout) || !freopen(out, "a", stderr))
            _exit(126);
        char n[16], idx[16], red[16];
        snprintf(n, sizeof n, "%d", nodes);
        snprintf(idx, sizeof idx, "%d", i);
        snprintf(red, sizeof red, "%d", redundancy);
        setenv("FTC_REDIS_URL", url, 1);
        setenv("FI_PROVIDER", "tcp;ofi_rxm", 1);
        execl(B->ftc, B->ftc, "agent", "--nodes", n, "--index", idx, "--job", job, "--job-dir",
              dir, "--redundancy", red, "--agent-timeout-ms", "30000", (char *)NULL);
        _exit(127);
    }
    track_pid(pid);
    ftc_deadline_t d = ftc_deadline_in_ms(30000);
    struct stat st;
    while (stat(sock, &st) != 0) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            untrack_pid(pid);
            print_agent_log(dir, i);
            die("agent %d exited at start (%s)", i, B->ftc);
        }
        if (g_stop)
            die("interrupted");
        if (ftc_deadline_expired(d)) {
            print_agent_log(dir, i);
            die("agent %d did not open %s within 30 s", i, sock);
        }
        ftc_sleep_ms(20);
    }
    return pid;
}

typedef struct stall_row {
    double base_mean, base_p90, ck_mean, ck_p90;
    double in_wait, in_ckpt; /* mean seconds per checkpointed step */
    int n, skipped, committed;
    bool have;
} stall_row_t;

static stall_row_t summarize(const loop_result_t *R)
{
    stall_row_t s = {mean(R->base, R->nbase), p90(R->base, R->nbase), mean(R->ckpt, R->nckpt),
                     p90(R->ckpt, R->nckpt), R->nckpt ? R->in_wait / R->nckpt : 0,
                     R->nckpt ? R->in_ckpt / R->nckpt : 0, R->nckpt, R->skipped, R->committed,
                     true};
    return s;
}

/* One variant: redundancy 0 (one agent, one rank) or 1 (two agents, two ranks). */
static void bench_stall(const bench_t *B, const char *url, int redundancy, uint64_t units,
                        stall_row_t *r0, stall_row_t *r1)
{
    int nodes = redundancy ? 2 : 1;
    char job[64], dir[PATH_MAX + 64], sock[2][PATH_MAX + 64];
    snprintf(job, sizeof job, "%s-r%d-%zum", B->tag, redundancy, B->bytes >> 20);
    snprintf(dir, sizeof dir, "%s/%s", B->tmp, job);
    if (mkdir(dir, 0700))
        die("mkdir %s: %s", dir, strerror(errno));
    pid_t ag[2] = {0, 0};
    for (int i = 0; i < nodes; i++)
        ag[i] = start_agent(B, job, dir, url, i, nodes, redundancy, sock[i], sizeof sock[i]);
    int sp[2] = {-1, -1};
    pid_t child = 0;
    if (nodes == 2) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
            die("socketpair: %s", strerror(errno));
        fflush(stdout);
        fflush(stderr);
        pid_t parent = getpid();
        child = fork();
        if (child < 0)
            die("fork: %s", strerror(errno));
        if (child == 0) { /* rank 1, against agent 1 */
            G.child = true;
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            close(sp[0]);
            loop_result_t *R = malloc(sizeof *R);
            if (!R)
                _exit(1);
            rank_loop(B, job, sock[1], 1, 2, units, sp[1], R);
            stall_row_t s = summarize(R);
            if (write(sp[1], &s, sizeof s) != (ssize_t)sizeof s)
                _exit(1);
            _exit(0);
        }
        track_pid(child);
        close(sp[1]);
    }
    loop_result_t *R = malloc(sizeof *R);
    if (!R)
        die("out of memory");
    rank_loop(B, job, sock[0], 0, nodes, units, sp[0], R);
    *r0 = summarize(R);
    free(R);
    memset(r1, 0, sizeof *r1);
    if (child) {
        size_t got = 0;
        ftc_deadline_t d = ftc_deadline_in_ms(60000);
        while (got < sizeof *r1 && !ftc_deadline_expired(d)) {
            struct pollfd p = {.fd = sp[0], .events = POLLIN};
            if (poll(&p, 1, 100) <= 0)
                continue;
            ssize_t n = read(sp[0], (char *)r1 + got, sizeof *r1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (got != sizeof *r1)
            die("rank 1 did not report its results");
        int ws;
        ftc_deadline_t dw = ftc_deadline_in_ms(30000);
        pid_t w;
        while ((w = waitpid(child, &ws, WNOHANG)) == 0 && !ftc_deadline_expired(dw))
            ftc_sleep_ms(10);
        if (w == child)
            untrack_pid(child);
        else
            stop_pid(child, 100);
        close(sp[0]);
    }
    for (int i = nodes - 1; i >= 0; i--)
        stop_pid(ag[i], 10000);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "ftc.%s.", job); /* this variant's slots and replicas */
    unlink_shm(prefix);
}

static void print_stall(const bench_t *B, const char *what, const stall_row_t *s)
{
    if (!s->have)
        return;
    printf("%-36s %8.1f %8.1f %8.1f %8.1f %6.3f %6.3f %7.1f %7.1f %4d%s\n", what,
           s->base_mean * 1e3, s->base_p90 * 1e3, s->ck_mean * 1e3, s->ck_p90 * 1e3,
           s->ck_mean / s->base_mean, s->ck_p90 / s->base_p90, s->in_wait * 1e3, s->in_ckpt * 1e3,
           s->skipped, s->committed ? "" : "  NOT COMMITTED");
    (void)B;
}

/* ---- main ------------------------------------------------------------------------------ */

static size_t size_arg(const char *s)
{
    int64_t v;
    if (ftc_parse_size(s, &v) || v < (1 << 20))
        die("bad size '%s' (e.g. 256MiB, at least 1MiB)", s);
    return (size_t)v;
}

static void find_ftc(bench_t *B)
{
    if (B->ftc[0])
        return;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        die("cannot find the ftc binary: pass --ftc");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(B->ftc, sizeof B->ftc, "%s/../cli/ftc", exe);
    if (access(B->ftc, X_OK))
        die("no executable %s: pass --ftc", B->ftc);
}

int main(int argc, char **argv)
{
    bench_t B = {.reps = 5, .steps = 20, .warmup = 3, .step_ms = 200};
    size_t sizes[8];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            char *save = NULL;
            for (char *t = strtok_r(list, ",", &save); t && nsizes < 8;
                 t = strtok_r(NULL, ",", &save))
                sizes[nsizes++] = size_arg(t);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            B.reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            B.steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) {
            B.warmup = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) {
            B.step_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--copy-threads") && i + 1 < argc) {
            B.copy_threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--ftc") && i + 1 < argc) {
            snprintf(B.ftc, sizeof B.ftc, "%s", argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_snapshot [--bytes 256MiB,1GiB] [--reps 5] [--steps 20] "
                            "[--warmup 3] [--step-ms 200] [--copy-threads N] [--ftc PATH]\n");
            return 2;
        }
    }
    if (B.reps < 1 || B.steps < 1 || B.steps > 120 || B.warmup < 0 || B.step_ms < 1 ||
        B.copy_threads < 0)
        die("--reps >= 1, --steps 1..120, --warmup >= 0, --step-ms >= 1, --copy-threads >= 0");
    if (nsizes == 0) {
        sizes[nsizes++] = (size_t)256 << 20;
        sizes[nsizes++] = (size_t)1 << 30;
    }
    find_ftc(&B);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    unsetenv("FTC_REDIS_URL");
    unsetenv("FI_PROVIDER");
    snprintf(B.tag, sizeof B.tag, "sb%d", (int)getpid());
    snprintf(G.shm_prefix, sizeof G.shm_prefix, "ftc.%s-", B.tag);
    const char *td = getenv("TMPDIR");
    snprintf(B.tmp, sizeof B.tmp, "%s/ftc-snapbench-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(B.tmp))
        die("mkdtemp: %s", strerror(errno));
    snprintf(G.tmp, sizeof G.tmp, "%s", B.tmp);

    print_load("at start");
    uint64_t t_start = ftc_now_ns();

    /* the embedded Redis of every variant (each uses its own job id) */
    char rdir[PATH_MAX + 16];
    snprintf(rdir, sizeof rdir, "%s/redis", B.tmp);
    ftc_redis_server_options_t ro = FTC_REDIS_SERVER_OPTIONS_INIT;
    ro.dir = rdir;
    ftc_err_t err = {0};
    G.redis = ftc_redis_server_start(&ro, &err);
    if (!G.redis)
        die("embedded redis: %s", err.msg);
    char url[1024];
    FILE *uf = fopen(ftc_redis_server_url_file(G.redis), "r");
    if (!uf || !fgets(url, sizeof url, uf))
        die("cannot read the redis URL file");
    fclose(uf);
    url[strcspn(url, "\n")] = 0;

    uint64_t units = calibrate(B.step_ms);
    printf("bench_snapshot: compute = %llu units of an FMA kernel over a 16 KiB buffer on one "
           "thread, calibrated to %d ms\n",
           (unsigned long long)units, B.step_ms);

    for (int i = 0; i < nsizes; i++) {
        B.bytes = sizes[i];
        tensors_t t;
        tensors_alloc(&t, B.bytes);
        bench_copy(&B, &t);
        tensors_free(&t);

        stall_row_t a, b, c, d;
        bench_stall(&B, url, 0, units, &a, &b);
        bench_stall(&B, url, 1, units, &c, &d);
        printf("\n[stall] %zu MiB per rank, compute %d ms/step on one thread, %d steps after "
               "%d warm-up (baseline: %d before + %d after, pooled)\n",
               B.bytes >> 20, B.step_ms, B.steps, B.warmup, B.steps, B.steps);
        printf("(wait ms / ckpt() ms: mean time per checkpointed step inside ftc_wait_snapshot "
               "/ ftc_checkpoint)\n");
        printf("%-36s %8s %8s %8s %8s %6s %6s %7s %7s %4s\n", "variant", "base ms", "base p90",
               "ckpt ms", "ckpt p90", "ratio", "p90 r.", "wait ms", "ckpt()", "skip");
        print_stall(&B, "r0: 1 agent, redundancy 0, rank 0", &a);
        print_stall(&B, "r1: 2 agents, redundancy 1, rank 0", &c);
        print_stall(&B, "r1: 2 agents, redundancy 1, rank 1", &d);
        fflush(stdout);
    }
    printf("\nbench_snapshot: total %.1f s\n", (double)(ftc_now_ns() - t_start) * 1e-9);
    print_load("at end");
    cleanup();
    return 0;
}
