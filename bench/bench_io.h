/*
 * bench_io.h — what the two-process benchmarks share: dying with a message,
 * exact reads and writes on the control pipe, and the loopback TCP stream
 * they compare against (blocking, or busy-polling with MSG_DONTWAIT).
 * Define BENCH_NAME before including it.
 */
#ifndef FTC_BENCH_IO_H
#define FTC_BENCH_IO_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
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

#endif
