/*
 * detector_internal.h — internal entry points of the detector, for tests.
 * Not part of any public API.
 */
#ifndef FTC_DETECT_DETECTOR_INTERNAL_H
#define FTC_DETECT_DETECTOR_INTERNAL_H

#include "detect/detector.h"

#include <poll.h>

/* Called on the local watch thread each time its poll of the pidfds returns,
 * before it takes the detector's lock to read the result: pfd[0] is its wake
 * pipe, pfd[1..npfd-1] the ranks' pidfds as they were when the poll began.
 * The detector's lock is not held, so the hook may call
 * ftc_detector_watch_pid / ftc_detector_unwatch: a test runs there the calls
 * that race with the poll in production (a rank's pidfd closed and its fd
 * number reused by a new rank's). NULL removes the hook. Thread-safe. */
typedef void (*ftc__detector_poll_hook_t)(void *arg, const struct pollfd *pfd, int npfd);
void ftc__detector_set_poll_hook(ftc_detector_t *d, ftc__detector_poll_hook_t fn, void *arg);

/* How long an exit's event waits for its status or its BYE (1 s; <= 0
 * restores that): a test that orders exits, BYEs and statuses within the
 * wait sets a longer one, so that a slow machine does not end it first. */
void ftc__detector_set_exit_wait_ms(ftc_detector_t *d, int ms);

#endif
