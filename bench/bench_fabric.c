/*
 * bench_fabric.c — throughput of the libfabric transport (core/fabric.h)
 * between two processes on this machine, next to baselines measured in the
 * same run: a plain loopback TCP stream (blocking, and busy-polling with
 * MSG_DONTWAIT) and memcpy. Prints GB/s (best of --reps) and the ratio of
 * each to busy-poll TCP, the baseline the replication bench must approach.
 *
 *   bench_fabric [--bytes 256MiB] [--reps 3] [--chunk 4MiB] [--window 8]
 *
 * A transfer is timed on the sender from the first byte to the receiver's
 * acknowledgement that it has every byte (so it includes one small message
 * back). The fabric connection is made before timing starts.
 */
#include "core/clock.h"
#include "core/config.h"
#include "core/fabric.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BENCH_NAME "bench_fabric"
#include "bench_io.h"

static size_t g_bytes = (size_t)256 << 20;
static size_t g_chunk = (size_t)4 << 20;
static int g_window = 8;
static int g_reps = 3;

/* ---- fabric ---------------------------------------------------------------- */

static ftc_fabric_t *fab_open(const char *prov)
{
    ftc_fabric_opts_t o = FTC_FABRIC_OPTS_INIT;
    o.provider = prov;
    o.max_msg = g_chunk;
    o.window = g_window;
    ftc_fabric_t *f;
    ftc_err_t err = {0};
    if (ftc_fabric_open(&o, &f, &err) < 0) {
        fprintf(stderr, "bench_fabric: %s\n", err.msg);
        return NULL;
    }
    return f;
}

static ftc_fabric_peer_t fab_swap(ftc_fabric_t *f, int ctl)
{
    uint8_t other[FTC_FABRIC_ADDR_MAX];
    uint32_t olen = swap_names(f, ctl, other);
    ftc_fabric_peer_t p;
    if (ftc_fabric_peer_add(f, other, olen, &p))
        die(ftc_fabric_errmsg(f));
    return p;
}

/* Best GB/s of send_large over g_reps; -1 when the provider is absent. */
static double bench_fabric(const char *prov, char *buf)
{
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl))
        die("socketpair");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* receiver */
        close(ctl[0]);
        ftc_fabric_t *f = fab_open(prov);
        if (!f)
            _exit(2);
        ftc_fabric_peer_t p = fab_swap(f, ctl[1]);
        char hello[8];
        if (ftc_fabric_recv(f, p, 1, 0, hello, sizeof hello, NULL, NULL,
                            ftc_deadline_in_ms(30000)) ||
            ftc_fabric_send(f, p, 2, "ok", 3, ftc_deadline_in_ms(30000)))
            die(ftc_fabric_errmsg(f));
        for (int r = 0; r < g_reps; r++) {
            if (ftc_fabric_recv_large(f, p, 10, buf, g_bytes, ftc_deadline_in_ms(60000)) ||
                ftc_fabric_send(f, p, 11, "k", 2, ftc_deadline_in_ms(30000)))
                die(ftc_fabric_errmsg(f));
        }
        char c;
        (void)!read(ctl[1], &c, 1); /* stay until the sender is done */
        ftc_fabric_close(f);
        _exit(0);
    }
    close(ctl[1]);
    ftc_fabric_t *f = fab_open(prov);
    if (!f) {
        close(ctl[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    ftc_fabric_peer_t p = fab_swap(f, ctl[0]);
    char ok[8];
    /* connect (rxm connects on the first send) before timing */
    if (ftc_fabric_send(f, p, 1, "hi", 3, ftc_deadline_in_ms(30000)) ||
        ftc_fabric_recv(f, p, 2, 0, ok, sizeof ok, NULL, NULL, ftc_deadline_in_ms(30000)))
        die(ftc_fabric_errmsg(f));
    double best = 0;
    for (int r = 0; r < g_reps; r++) {
        uint64_t t0 = ftc_now_ns();
        if (ftc_fabric_send_large(f, p, 10, buf, g_bytes, ftc_deadline_in_ms(60000)) ||
            ftc_fabric_recv(f, p, 11, 0, ok, sizeof ok, NULL, NULL, ftc_deadline_in_ms(30000)))
            die(ftc_fabric_errmsg(f));
        double g = gbs_since(g_bytes, t0);
        best = g > best ? g : best;
    }
    close(ctl[0]);
    int st;
    waitpid(pid, &st, 0);
    ftc_fabric_close(f);
    return best;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            g_bytes = size_arg(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            g_chunk = size_arg(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            g_window = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_fabric [--bytes 256MiB] [--reps 3] [--chunk 4MiB] "
                    "[--window 8]\n");
            return 2;
        }
    }
    if (g_reps < 1 || g_window < 1)
        die("--reps and --window must be >= 1");
    char *a = malloc(g_bytes), *b = malloc(g_bytes);
    if (!a || !b)
        die("out of memory");
    memset(a, 0x5a, g_bytes);
    memset(b, 0xa5, g_bytes);

    double mc = bench_memcpy(g_bytes, g_reps, a, b);
    double tb = bench_tcp(g_bytes, g_reps, 0, a, a);
    double tp = bench_tcp(g_bytes, g_reps, 1, a, a);
    double fr = bench_fabric("tcp;ofi_rxm", a);
    double fs = bench_fabric("shm", a);

    printf("bench_fabric: %zu MiB per transfer, best of %d, fabric chunk %zu KiB x window %d\n",
           g_bytes >> 20, g_reps, g_chunk >> 10, g_window);
    bench_row_t rows[] = {
        {"memcpy (one thread)", mc},
        {"TCP loopback, blocking", tb},
        {"TCP loopback, busy-poll", tp},
        {"fabric tcp;ofi_rxm send_large", fr},
        {"fabric shm send_large", fs},
    };
    print_rows(34, rows, sizeof rows / sizeof rows[0], tp, tb);
    free(a);
    free(b);
    return 0;
}
