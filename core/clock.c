/* clock.c — see clock.h. */
#include "core/clock.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <time.h>

uint64_t ftc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static _Atomic int64_t ftc__wall_skew_ms;

uint64_t ftc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull +
           (uint64_t)atomic_load_explicit(&ftc__wall_skew_ms, memory_order_relaxed);
}

void ftc_wall_skew_for_test(int64_t ms)
{
    atomic_store(&ftc__wall_skew_ms, ms);
}

ftc_deadline_t ftc_deadline_in_ms(uint64_t ms)
{
    if (ms >= UINT64_MAX / 2000000ull)
        return FTC_DEADLINE_NONE;
    return (ftc_deadline_t){ftc_now_ns() + ms * 1000000ull};
}

bool ftc_deadline_expired(ftc_deadline_t d)
{
    return d.at_ns != UINT64_MAX && ftc_now_ns() >= d.at_ns;
}

int ftc_deadline_remaining_ms(ftc_deadline_t d)
{
    if (d.at_ns == UINT64_MAX)
        return INT_MAX;
    uint64_t now = ftc_now_ns();
    if (now >= d.at_ns)
        return 0;
    uint64_t ms = (d.at_ns - now + 999999ull) / 1000000ull;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

ftc_deadline_t ftc_deadline_min(ftc_deadline_t a, ftc_deadline_t b)
{
    return a.at_ns < b.at_ns ? a : b;
}

void ftc_sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void ftc_sleep_ms(uint64_t ms)
{
    ftc_sleep_us(ms * 1000);
}

int ftc_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t at;
    int rc = pthread_condattr_init(&at);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cv, &at);
    pthread_condattr_destroy(&at);
    return rc;
}

struct timespec ftc_cond_abstime(ftc_deadline_t d)
{
    uint64_t at = d.at_ns;
    if (at == UINT64_MAX)
        at = ftc_now_ns() + 365ull * 86400ull * 1000000000ull;
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000000ull),
                          .tv_nsec = (long)(at % 1000000000ull)};
    return ts;
}
