/*
 * clock.h — monotonic time and deadlines.
 *
 * Every wait in ftc takes a deadline (I6). A deadline is an absolute point on
 * CLOCK_MONOTONIC, so it survives being passed down through several calls;
 * FTC_DEADLINE_NONE never expires and is for callers that have their own.
 */
#ifndef FTC_CORE_CLOCK_H
#define FTC_CORE_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftc_deadline {
    uint64_t at_ns; /* CLOCK_MONOTONIC nanoseconds; UINT64_MAX = never */
} ftc_deadline_t;

#define FTC_DEADLINE_NONE ((ftc_deadline_t){UINT64_MAX})

uint64_t ftc_now_ns(void);        /* CLOCK_MONOTONIC */
uint64_t ftc_wall_ms(void);       /* CLOCK_REALTIME, for records and events */
/* Test knob: ftc_wall_ms of this process reads ms more (less when negative),
 * as after a step of the wall clock (NTP, an operator). Durations must not
 * change with it: they count on ftc_now_ns. 0 puts the clock back. */
void ftc_wall_skew_for_test(int64_t ms);
ftc_deadline_t ftc_deadline_in_ms(uint64_t ms);
bool ftc_deadline_expired(ftc_deadline_t d);
/* Milliseconds left, 0 once expired, INT64_MAX-ish for FTC_DEADLINE_NONE;
 * clamped to INT32_MAX so it can feed poll(2). */
int ftc_deadline_remaining_ms(ftc_deadline_t d);
/* The earlier of two deadlines. */
ftc_deadline_t ftc_deadline_min(ftc_deadline_t a, ftc_deadline_t b);
/* Sleeps ms milliseconds (restarting on EINTR). */
void ftc_sleep_ms(uint64_t ms);
/* Sleeps us microseconds (restarting on EINTR). */
void ftc_sleep_us(uint64_t us);

/* Condition variables whose timed waits count on CLOCK_MONOTONIC, like the
 * deadlines: a step of the wall clock (NTP, an operator) neither stretches
 * nor cuts them. ftc_cond_init: 0 or the errno of pthread_cond_init.
 * ftc_cond_abstime: the absolute time for pthread_cond_timedwait on such a
 * condition variable when deadline d ends (FTC_DEADLINE_NONE: a year on). */
int ftc_cond_init(pthread_cond_t *cv);
struct timespec ftc_cond_abstime(ftc_deadline_t d);

#ifdef __cplusplus
}
#endif
#endif
