/*
 * err.h — error details carried by a handle.
 *
 * Every function returns 0 or a negative FTC_E* code (include/ftc.h). A handle
 * that can fail keeps an ftc_err_t with the code and a sentence saying what
 * failed, where, and what to do ("shard.ftc: tensor 3 'wte': offset 4096 +
 * length 64 runs past the payload (size 1024) at byte 312"). Functions set it
 * with ftc_err_set() and return its result, so the error travels in one line:
 *
 *     if (hdr->magic != FTC_SHARD_MAGIC)
 *         return ftc_err_set(err, FTC_ECORRUPT, "%s: bad magic at offset 0", path);
 */
#ifndef FTC_CORE_ERR_H
#define FTC_CORE_ERR_H

#include "ftc.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_ERR_MSG_MAX 512

typedef struct ftc_err {
    int code;                  /* 0 or the last FTC_E* code */
    char msg[FTC_ERR_MSG_MAX]; /* what failed; "" when code is 0 */
} ftc_err_t;

/* Records code and a printf-style message in err (which may be NULL) and
 * returns code, so callers can `return ftc_err_set(...)`. */
int ftc_err_set(ftc_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ftc_err_vset(ftc_err_t *err, int code, const char *fmt, va_list ap);
/* Prepends "prefix: " to the current message, keeping the code; returns it. */
int ftc_err_wrap(ftc_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records errno as an FTC code (ENOSPC -> FTC_ENOSPC, ENOENT -> FTC_ENOENT,
 * else FTC_EIO) with "what: strerror(errno)". Returns the code. */
int ftc_err_errno(ftc_err_t *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ftc_err_clear(ftc_err_t *err);
/* The message, or the code's generic text when no message was set. */
const char *ftc_err_str(const ftc_err_t *err);

/* One way to propagate: evaluate, and on failure jump to the cleanup label. */
#define FTC_CHECK_GOTO(expr, rc, label)                                                            \
    do {                                                                                           \
        (rc) = (expr);                                                                             \
        if ((rc) < 0)                                                                              \
            goto label;                                                                            \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
