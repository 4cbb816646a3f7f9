/*
 * bench_replicate.c — replication throughput of the replication engine
 * (ckpt/replica.h): one agent pushes a sealed shard to one peer agent (a
 * second process) until that peer has verified it and answered ACK, over
 * tcp;ofi_rxm and over shm. Baselines measured in the same run: a plain
 * loopback TCP stream (blocking, and busy-polling with MSG_DONTWAIT, each
 * ending with a one-byte acknowledgement) and memcpy. Prints GB/s (best of
 * --reps) and ratios to the busy-poll TCP stream (target: replication >= 0.9).
 *
 *   bench_replicate [--bytes 256MiB,1GiB] [--reps 3] [--chunk 4MiB] [--window 8]
 *
 * A push is timed from ftc_repl_push() to the ACK: it includes the
 * receiver's full checksum verification (ftc_shard_open with
 * FTC_SHARD_VERIFY) and the slot swap, which the TCP baseline does not do.
 * Two untimed pushes first connect rxm and create both receiving slots.
 */
#include "ckpt/replica.h"
#include "ckpt/shard.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/fabric.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BENCH_NAME "bench_replicate"
#include "bench_io.h"

typedef struct bench {
    size_t bytes;
    size_t chunk;
    int window;
    int reps;
    char job[64];
} bench_t;

/* ---- replication ------------------------------------------------------------------ */

/* A sealed shard of exactly `bytes` bytes when possible: one uint8 tensor. */
static uint8_t *make_shard(size_t bytes, uint64_t *size)
{
    ftc_shard_info_t in;
    memset(&in, 0, sizeof in);
    snprintf(in.job_id, sizeof in.job_id, "bench");
    in.step = 1;
    in.generation = 1;
    in.dp = in.tp = in.pp = 1;
    ftc_err_t e = {0};
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    uint64_t n = 0;
    if (!l || ftc_shard_layout_add_tensor(l, "probe", FTC_DTYPE_U8, 1, &n, &e) < 0)
        die("shard layout");
    uint64_t overhead = ftc_shard_layout_size(l) + 64;
    ftc_shard_layout_destroy(l);
    l = ftc_shard_layout_create(&in);
    n = bytes > overhead ? bytes - overhead : 64;
    if (!l || ftc_shard_layout_add_tensor(l, "weights", FTC_DTYPE_U8, 1, &n, &e) < 0)
        die("shard layout");
    *size = ftc_shard_layout_size(l);
    uint8_t *s = malloc(*size);
    if (!s || ftc_shard_layout_write(l, s, *size, &e) < 0)
        die("shard write");
    uint8_t *p = ftc_shard_payload_ptr(l, s, 0);
    for (uint64_t i = 0; i < n; i += 4096)
        p[i] = (uint8_t)(i * 2654435761u >> 13);
    for (uint64_t i = 0; i < n; i++) /* not all zero: a realistic hash input */
        p[i] ^= (uint8_t)(i * 131);
    if (ftc_shard_seal(s, *size, 1, &e) < 0)
        die(e.msg);
    ftc_shard_layout_destroy(l);
    return s;
}

static ftc_repl_t *engine(const bench_t *B, ftc_fabric_t *f, uint32_t self)
{
    ftc_repl_options_t o = FTC_REPL_OPTIONS_INIT;
    ftc_err_t e = {0};
    if (ftc_wire_key_init(&o.key, "bench", "bench-secret-0123456789", 23, &e) < 0)
        die(e.msg);
    o.fab = f;
    o.job = B->job;
    o.self = self;
    o.generation = 1;
    o.chunk_bytes = B->chunk;
    o.window = B->window;
    ftc_repl_t *r = ftc_repl_create(&o, &e);
    if (!r)
        die(e.msg);
    return r;
}

static ftc_fabric_t *fab_open(const bench_t *B, const char *prov, ftc_err_t *e)
{
    ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
    o.provider = prov;
    o.max_msg = B->chunk;
    ftc_fabric_t *f;
    return ftc_fabric_open(&o, &f, e) < 0 ? NULL : f;
}

static void swap_addr(ftc_fabric_t *f, ftc_repl_t *r, uint32_t other_node, int ctl)
{
    uint8_t other[FTC_FABRIC_ADDR_MAX];
    uint32_t olen = swap_names(f, ctl, other);
    if (ftc_repl_peer_add(r, other_node, other, olen))
        die(ftc_repl_errstr(r));
}

static void unlink_slots(const bench_t *B)
{
    for (int k = 0; k < 2; k++) {
        char name[160];
        snprintf(name, sizeof name, "/dev/shm/ftc.%s.n1.p0.s%d", B->job, k);
        unlink(name);
    }
}

/* Best GB/s of push-until-ACK; -1 when the provider is absent. */
static double bench_repl(const bench_t *B, const char *prov, const uint8_t *shard, uint64_t size)
{
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl))
        die("socketpair");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* the receiving agent: serves until the sender hangs up */
        close(ctl[0]);
        ftc_err_t e = {0};
        ftc_fabric_t *f = fab_open(B, prov, &e);
        if (!f)
            _exit(2);
        ftc_repl_t *r = engine(B, f, 1);
        swap_addr(f, r, 0, ctl[1]);
        for (;;) {
            struct pollfd pf = {.fd = ctl[1], .events = POLLIN};
            if (poll(&pf, 1, 0) > 0)
                break;
            if (ftc_repl_progress(r, ftc_deadline_in_ms(50), false) < 0)
                die(ftc_repl_errstr(r));
        }
        ftc_repl_destroy(r);
        ftc_fabric_close(f);
        _exit(0);
    }
    close(ctl[1]);
    ftc_err_t e = {0};
    ftc_fabric_t *f = fab_open(B, prov, &e);
    if (!f) {
        fprintf(stderr, "bench_replicate: %s\n", e.msg);
        close(ctl[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    ftc_repl_t *r = engine(B, f, 0);
    swap_addr(f, r, 1, ctl[0]);
    uint32_t peer = 1;
    double best = 0;
    for (int rep = -2; rep < B->reps; rep++) {
        ftc_repl_xfer_t x;
        uint64_t t0 = ftc_now_ns();
        if (ftc_repl_push(r, 0, 1, shard, size, &peer, 1, ftc_deadline_in_ms(120000), &x))
            die(ftc_repl_errstr(r));
        ftc_repl_status_t st;
        for (;;) {
            (void)ftc_repl_progress(r, ftc_deadline_in_ms(1000), true);
            if (ftc_repl_status(r, x, &st) || st.done)
                break;
        }
        double g = gbs_since(size, t0);
        if (st.rc)
            die(st.detail);
        ftc_repl_release(r, x);
        if (rep >= 0)
            best = g > best ? g : best;
    }
    xwrite(ctl[0], "q", 1);
    int wst;
    waitpid(pid, &wst, 0);
    close(ctl[0]);
    ftc_repl_destroy(r);
    ftc_fabric_close(f);
    unlink_slots(B);
    return best;
}

/* ---- main --------------------------------------------------------------------------- */

static void run_size(bench_t *B)
{
    char *a = malloc(B->bytes), *b = malloc(B->bytes);
    if (!a || !b)
        die("out of memory");
    memset(a, 0x5a, B->bytes);
    memset(b, 0xa5, B->bytes);
    uint64_t ssize;
    uint8_t *shard = make_shard(B->bytes, &ssize);

    double mc = bench_memcpy(B->bytes, B->reps, a, b);
    double tb = bench_tcp(B->bytes, B->reps, 0, a, b);
    double tp = bench_tcp(B->bytes, B->reps, 1, a, b);
    double rr = bench_repl(B, "tcp;ofi_rxm", shard, ssize);
    double rs = bench_repl(B, "shm", shard, ssize);

    printf("\nbench_replicate: %zu MiB per push (shard %llu bytes), best of %d, chunk %zu KiB "
           "x window %d\n",
           B->bytes >> 20, (unsigned long long)ssize, B->reps, B->chunk >> 10, B->window);
    bench_row_t rows[] = {
        {"memcpy (one thread)", mc},
        {"TCP loopback, blocking", tb},
        {"TCP loopback, busy-poll", tp},
        {"replicate tcp;ofi_rxm (push to ACK)", rr},
        {"replicate shm (push to ACK)", rs},
    };
    print_rows(40, rows, sizeof rows / sizeof rows[0], tp, tb);
    fflush(stdout);
    free(shard);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    bench_t B = {.chunk = (size_t)4 << 20, .window = 8, .reps = 3};
    size_t sizes[8];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
            char list[256];
            snprintf(list, sizeof list, "%s", argv[++i]);
            for (char *t = strtok(list, ","); t && nsizes < 8; t = strtok(NULL, ","))
                sizes[nsizes++] = size_arg(t);
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            B.chunk = size_arg(argv[++i]);
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc) {
            B.window = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            B.reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_replicate [--bytes 256MiB,1GiB] [--reps 3] "
                            "[--chunk 4MiB] [--window 8]\n");
            return 2;
        }
    }
    if (B.reps < 1 || B.window < 1)
        die("--reps and --window must be >= 1");
    if (nsizes == 0) {
        sizes[nsizes++] = (size_t)256 << 20;
        sizes[nsizes++] = (size_t)1 << 30;
    }
    unsetenv("FI_PROVIDER");
    signal(SIGPIPE, SIG_IGN);
    snprintf(B.job, sizeof B.job, "bench%d", (int)getpid());
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
    printf("bench_replicate: load average before the run %.2f %.2f %.2f, %ld cores online\n",
           load[0], load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < nsizes; i++) {
        B.bytes = sizes[i];
        run_size(&B);
    }
    return 0;
}
