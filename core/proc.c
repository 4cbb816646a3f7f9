/*
 * proc.c — see proc.h.
 */
#include "core/proc.h"

#include "core/err.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The next space-separated field of [*p, end) as a whole decimal number in
 * lo..hi (a leading '-' only where lo < 0); false otherwise. */
static bool ftc__proc_num(const char **p, const char *end, long long lo, long long hi,
                          long long *out)
{
    const char *s = *p;
    if (s >= end || *s != ' ')
        return false;
    s++;
    bool neg = s < end && *s == '-';
    s += neg;
    if (s >= end || !isdigit((unsigned char)*s))
        return false;
    unsigned long long v = 0;
    for (; s < end && isdigit((unsigned char)*s); s++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (s < end && *s != ' ' && *s != '\n')
        return false;
    if (v > (unsigned long long)LLONG_MAX)
        return false;
    long long x = neg ? -(long long)v : (long long)v;
    if (x < lo || x > hi)
        return false;
    *out = x;
    *p = s;
    return true;
}

int ftc_proc_stat_parse(const char *text, size_t len, ftc_proc_stat_t *st)
{
    memset(st, 0, sizeof *st);
    const char *end = text + len, *open_p = memchr(text, '(', len), *close_p = NULL;
    for (const char *q = end; q > text; q--)
        if (q[-1] == ')') {
            close_p = q - 1;
            break;
        }
    if (!open_p || !close_p || close_p < open_p)
        return FTC_EPROTO;
    size_t cl = (size_t)(close_p - open_p - 1);
    if (cl >= sizeof st->comm)
        cl = sizeof st->comm - 1;
    memcpy(st->comm, open_p + 1, cl);
    st->comm[cl] = 0;
    const char *p = close_p + 1;
    /* " STATE PPID PGRP SESSION TTY_NR TPGID FLAGS MINFLT CMINFLT MAJFLT CMAJFLT UTIME
     * STIME" (and more, not read) */
    if (end - p < 2 || p[0] != ' ' || !isalpha((unsigned char)p[1]))
        return FTC_EPROTO;
    st->state = p[1];
    p += 2;
    long long v[12];
    static const long long lo[12] = {0, 0, 0, INT_MIN, INT_MIN, 0, 0, 0, 0, 0, 0, 0};
    static const long long hi[12] = {INT_MAX,   INT_MAX,   INT_MAX,   INT_MAX,
                                     INT_MAX,   UINT_MAX,  LLONG_MAX, LLONG_MAX,
                                     LLONG_MAX, LLONG_MAX, LLONG_MAX, LLONG_MAX};
    for (int k = 0; k < 12; k++)
        if (!ftc__proc_num(&p, end, lo[k], hi[k], &v[k]))
            return FTC_EPROTO;
    st->ppid = (pid_t)v[0];
    st->pgid = (pid_t)v[1];
    st->flags = (unsigned long)v[5];
    st->utime = (unsigned long long)v[10];
    st->stime = (unsigned long long)v[11];
    return 0;
}

int ftc_proc_fdinfo_flags_parse(const char *text, size_t len, unsigned *flags)
{
    static const char key[] = "flags:";
    const size_t kl = sizeof key - 1;
    const char *end = text + len;
    for (const char *l = text; l < end;) {
        const char *nl = memchr(l, '\n', (size_t)(end - l)), *le = nl ? nl : end;
        if ((size_t)(le - l) >= kl && !memcmp(l, key, kl)) {
            const char *p = l + kl, *d;
            while (p < le && (*p == ' ' || *p == '\t'))
                p++;
            unsigned long long v = 0;
            for (d = p; d < le && *d >= '0' && *d <= '7'; d++) {
                v = v * 8 + (unsigned)(*d - '0');
                if (v > UINT_MAX)
                    return FTC_EPROTO;
            }
            if (d == p || d != le || p == l + kl)
                return FTC_EPROTO; /* no digits, something after them, or no blank */
            *flags = (unsigned)v;
            return 0;
        }
        l = nl ? nl + 1 : end;
    }
    return FTC_EPROTO;
}

int ftc_proc_stat_read(pid_t pid, ftc_proc_stat_t *st)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return FTC_ENOENT;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) /* (a process that went between the open and the read) */
        return FTC_ENOENT;
    return ftc_proc_stat_parse(buf, (size_t)n, st);
}
