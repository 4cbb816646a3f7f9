/*
 * bench_io.h — what the two-process benchmarks share: dying with a message,
 * exact reads and writes on the control pipe, the baselines they compare
 * against (a loopback TCP stream, blocking or busy-polling with MSG_DONTWAIT,
 * and memcpy), the swap of fabric addresses over the control pipe, size
 * arguments and the table of results. Define BENCH_NAME before including it.
 */
#ifndef FTC_BENCH_IO_H
#define FTC_BENCH_IO_H

#include "core/clock.h"
#include "core/config.h"
#include "core/fabric.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", BENCH_NAME, what);
    exit(1);
}

static void xwrite(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("control write failed");
        b += w, n -= (size_t)w;
    }
}

static void xread(int fd, void *p, size_t n)
{
    char *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("control read failed (peer died?)");
        b += r, n -= (size_t)r;
    }
}

static void tcp_send_all(int fd, const char *b, size_t n, int busy)
{
    while (n) {
        ssize_t w = send(fd, b, n, busy ? MSG_DONTWAIT : 0);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            die("tcp send failed");
        b += w, n -= (size_t)w;
    }
}

static void tcp_recv_all(int fd, char *b, size_t n, int busy)
{
    while (n) {
        ssize_t r = recv(fd, b, n, busy ? MSG_DONTWAIT : 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            die("tcp recv failed");
        b += r, n -= (size_t)r;
    }
}

static double gbs_since(size_t bytes, uint64_t t0)
{
    return (double)bytes / (double)(ftc_now_ns() - t0);
}

/* Best GB/s over reps transfers of bytes from buf to a child process, which
 * receives into rbuf and acknowledges each with one byte; busy: MSG_DONTWAIT
 * spinning. */
static double bench_tcp(size_t bytes, int reps, int busy, char *buf, char *rbuf)
{
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl))
        die("socketpair");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* receiver */
        close(ctl[0]);
        int ls = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t al = sizeof a;
        if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
            getsockname(ls, (struct sockaddr *)&a, &al))
            die("tcp listen");
        xwrite(ctl[1], &a.sin_port, sizeof a.sin_port);
        int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            die("accept");
        for (int r = 0; r < reps; r++) {
            tcp_recv_all(fd, rbuf, bytes, busy);
            tcp_send_all(fd, "k", 1, 0);
        }
        close(fd);
        close(ls);
        _exit(0);
    }
    close(ctl[1]);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    xread(ctl[0], &a.sin_port, sizeof a.sin_port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        die("tcp connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = ftc_now_ns();
        tcp_send_all(fd, buf, bytes, busy);
        char k;
        tcp_recv_all(fd, &k, 1, 0);
        double g = gbs_since(bytes, t0);
        best = g > best ? g : best;
    }
    close(fd);
    close(ctl[0]);
    waitpid(pid, NULL, 0);
    return best;
}

/* Best GB/s over reps copies of bytes from a to b on one thread. */
static double bench_memcpy(size_t bytes, int reps, char *a, char *b)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = ftc_now_ns();
        memcpy(b, a, bytes);
        double g = gbs_since(bytes, t0);
        best = g > best ? g : best;
    }
    return best;
}

/* Sends f's address over the control pipe ctl and reads the peer's into
 * other (FTC_FABRIC_ADDR_MAX bytes); returns its length. */
static uint32_t swap_names(ftc_fabric_t *f, int ctl, uint8_t *other)
{
    uint8_t me[FTC_FABRIC_ADDR_MAX];
    size_t len = sizeof me;
    uint32_t l32, olen;
    if (ftc_fabric_getname(f, me, &len))
        die(ftc_fabric_errmsg(f));
    l32 = (uint32_t)len;
    xwrite(ctl, &l32, 4);
    xwrite(ctl, me, len);
    xread(ctl, &olen, 4);
    if (olen > FTC_FABRIC_ADDR_MAX)
        die("address too long");
    xread(ctl, other, olen);
    return olen;
}

static size_t size_arg(const char *s)
{
    int64_t v;
    if (ftc_parse_size(s, &v) || v <= 0)
        die("bad size (e.g. 256MiB)");
    return (size_t)v;
}

/* One line of the results: GB/s, or < 0 when the method is absent. */
typedef struct bench_row {
    const char *name;
    double v;
} bench_row_t;

/* The results with their ratios to busy-poll TCP (tp) and blocking TCP (tb),
 * the method names in a column width wide. */
static void print_rows(int width, const bench_row_t *rows, size_t n, double tp, double tb)
{
    printf("%-*s %8s %12s %12s\n", width, "method", "GB/s", "/ busy TCP", "/ block TCP");
    for (size_t i = 0; i < n; i++) {
        if (rows[i].v < 0)
            printf("%-*s %8s %12s %12s\n", width, rows[i].name, "absent", "-", "-");
        else
            printf("%-*s %8.2f %12.2f %12.2f\n", width, rows[i].name, rows[i].v, rows[i].v / tp,
                   rows[i].v / tb);
    }
}

#endif
