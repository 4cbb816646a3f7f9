/*
 * log.c — see log.h. One formatted buffer, one write(2), so lines from
 * several threads or processes never interleave mid-line.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    atomic_int level; /* minimum level printed; -1 until first use */
    char prefix[64];  /* shown as ftc[prefix]; "" shows ftc[pid] */
} ftc__log = {-1, ""};

int ftc_log_level_parse(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    if (!s)
        return -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i]))
            return i;
    if (!strcmp(s, "warning"))
        return FTC_LOG_WARN;
    return -1;
}

void ftc_log_set_level(int level)
{
    if (level >= FTC_LOG_DEBUG && level <= FTC_LOG_OFF)
        atomic_store(&ftc__log.level, level);
}

int ftc_log_level(void)
{
    int lv = atomic_load(&ftc__log.level);
    if (lv < 0) {
        lv = ftc_log_level_parse(getenv("FTC_LOG_LEVEL"));
        if (lv < 0)
            lv = FTC_LOG_INFO;
        atomic_store(&ftc__log.level, lv);
    }
    return lv;
}

void ftc_log_configure(int level, const char *prefix)
{
    if (level >= 0) {
        int env = ftc_log_level_parse(getenv("FTC_LOG_LEVEL"));
        atomic_store(&ftc__log.level, env >= 0 ? env : level);
    }
    if (prefix)
        snprintf(ftc__log.prefix, sizeof ftc__log.prefix, "%s", prefix);
}

void ftc_log(int level, const char *module, const char *fmt, ...)
{
    static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < ftc_log_level() || level >= FTC_LOG_OFF)
        return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n;
    if (ftc__log.prefix[0])
        n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ftc[%s] %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, ftc__log.prefix, tags[level],
                     module ? module : "-");
    else
        n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ftc[%d] %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), tags[level],
                     module ? module : "-");
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* a log line that cannot be written is dropped */
}
