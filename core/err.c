/*
 * err.c — the error table (names, messages) and the detail string helpers.
 */
#include "core/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *ftc_strerror(int err)
{
    switch (err) {
    case FTC_OK:
        return "success";
#define FTC__ERR_MSG(name, code, msg)                                                              \
    case code:                                                                                     \
        return msg;
        FTC_ERRNO_MAP(FTC__ERR_MSG)
#undef FTC__ERR_MSG
    }
    return "unknown error";
}

const char *ftc_errname(int err)
{
    switch (err) {
    case FTC_OK:
        return "FTC_OK";
#define FTC__ERR_NAME(name, code, msg)                                                             \
    case code:                                                                                     \
        return "FTC_" #name;
        FTC_ERRNO_MAP(FTC__ERR_NAME)
#undef FTC__ERR_NAME
    }
    return "FTC_E?";
}

size_t ftc_dtype_size(int dtype)
{
    switch (dtype) {
#define FTC__DT_SIZE(name, code, size, str, st)                                                    \
    case code:                                                                                     \
        return size;
        FTC_DTYPE_MAP(FTC__DT_SIZE)
#undef FTC__DT_SIZE
    }
    return 0;
}

const char *ftc_dtype_name(int dtype)
{
    switch (dtype) {
#define FTC__DT_NAME(name, code, size, str, st)                                                    \
    case code:                                                                                     \
        return str;
        FTC_DTYPE_MAP(FTC__DT_NAME)
#undef FTC__DT_NAME
    }
    return NULL;
}

ftc_dtype_t ftc_dtype_parse(const char *s)
{
    static const struct {
        const char *alias;
        ftc_dtype_t dt;
    } aliases[] = {
        {"float32", FTC_DTYPE_F32}, {"float", FTC_DTYPE_F32},   {"bfloat16", FTC_DTYPE_BF16},
        {"float16", FTC_DTYPE_F16}, {"half", FTC_DTYPE_F16},    {"int32", FTC_DTYPE_I32},
        {"int64", FTC_DTYPE_I64},   {"int8", FTC_DTYPE_I8},     {"uint8", FTC_DTYPE_U8},
    };
    if (!s)
        return FTC_DTYPE_INVALID;
#define FTC__DT_PARSE(name, code, size, str, st)                                                   \
    if (!strcmp(s, str) || !strcmp(s, st))                                                         \
        return (ftc_dtype_t)code;
    FTC_DTYPE_MAP(FTC__DT_PARSE)
#undef FTC__DT_PARSE
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(s, aliases[i].alias))
            return aliases[i].dt;
    return FTC_DTYPE_INVALID;
}

int ftc_err_vset(ftc_err_t *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

int ftc_err_set(ftc_err_t *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ftc_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int ftc_err_wrap(ftc_err_t *err, const char *fmt, ...)
{
    if (!err)
        return FTC_EINVAL;
    char prefix[FTC_ERR_MSG_MAX], old[FTC_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    if (!old[0])
        snprintf(old, sizeof old, "%s", ftc_strerror(err->code));
    char joined[2 * FTC_ERR_MSG_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, old);
    size_t n = strnlen(joined, sizeof err->msg - 1);
    memcpy(err->msg, joined, n);
    err->msg[n] = '\0';
    return err->code;
}

int ftc_err_errno(ftc_err_t *err, int errnum, const char *fmt, ...)
{
    int code = errnum == ENOSPC || errnum == EDQUOT ? FTC_ENOSPC
               : errnum == ENOENT                    ? FTC_ENOENT
               : errnum == EEXIST                    ? FTC_EEXIST
               : errnum == ENOMEM                    ? FTC_ENOMEM
               : errnum == EINVAL                    ? FTC_EINVAL
                                                     : FTC_EIO;
    if (!err)
        return code;
    char what[FTC_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ftc_err_set(err, code, "%.400s: %s", what, strerror(errnum));
}

void ftc_err_clear(ftc_err_t *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *ftc_err_str(const ftc_err_t *err)
{
    if (!err)
        return "no error context";
    return err->msg[0] ? err->msg : ftc_strerror(err->code);
}
