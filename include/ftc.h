/*
 * ftc.h — the public API of ftc, the fault-tolerant checkpoint library.
 *
 * This is the one header a trainer includes. It compiles as C99 and as C++,
 * and includes no CUDA, NCCL, libfabric or hiredis header.
 *
 * What is here today:
 *   - error codes: every function returns 0 on success or a negative FTC_E*
 *     code; ftc_strerror() / ftc_errname() turn a code into text;
 *   - tensor dtypes, shared by the shard format, the persist tier and export.
 *
 * The checkpoint context (register tensors, ftc_checkpoint, ftc_restore)
 * arrives with the in-memory replication store.
 */
#ifndef FTC_H
#define FTC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_VERSION_MAJOR 0
#define FTC_VERSION_MINOR 1
#define FTC_VERSION_PATCH 0

/* ---- errors ---------------------------------------------------------------
 * One table yields the codes, their names and their messages. Codes are
 * negative so that functions returning a count can share the convention. */
#define FTC_ERRNO_MAP(X)                                                                           \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ECORRUPT, -4, "data is corrupt")                                                             \
    X(ETRUNC, -5, "data is truncated")                                                             \
    X(ENOENT, -6, "not found")                                                                     \
    X(EEXIST, -7, "already exists")                                                                \
    X(ETIMEDOUT, -8, "deadline passed")                                                            \
    X(EAGAIN, -9, "try again")                                                                     \
    X(EINPROGRESS, -10, "operation in progress")                                                   \
    X(ECANCELED, -11, "operation aborted")                                                         \
    X(ESTALE, -12, "stale generation")                                                             \
    X(EVERSION, -13, "unsupported format version")                                                 \
    X(ENOSPC, -14, "no space left")                                                                \
    X(EAUTH, -15, "authentication failed")                                                         \
    X(EPROTO, -16, "protocol error")                                                               \
    X(EUNSUPPORTED, -17, "not supported")                                                          \
    X(ECONFIG, -18, "bad configuration")                                                           \
    X(EREDIS, -19, "redis error")                                                                  \
    X(EFABRIC, -20, "fabric error")                                                                \
    X(ECUDA, -21, "CUDA error")                                                                    \
    X(ERANGE, -22, "value out of range")

typedef enum ftc_errno {
    FTC_OK = 0,
#define FTC__ERR_ENUM(name, code, msg) FTC_##name = (code),
    FTC_ERRNO_MAP(FTC__ERR_ENUM)
#undef FTC__ERR_ENUM
} ftc_errno_t;

/* "data is corrupt" for FTC_ECORRUPT; "unknown error" for a code not in the
 * table. Returns a static string; thread-safe. */
const char *ftc_strerror(int err);
/* "FTC_ECORRUPT" for FTC_ECORRUPT, "FTC_OK" for 0; static; thread-safe. */
const char *ftc_errname(int err);

/* ---- dtypes ---------------------------------------------------------------
 * The element types a tensor may have. Values are part of the shard format
 * (docs/shard-format.md): never renumber. */
#define FTC_DTYPE_MAP(X)                                                                           \
    X(F32, 1, 4, "fp32", "F32")                                                                    \
    X(BF16, 2, 2, "bf16", "BF16")                                                                  \
    X(F16, 3, 2, "fp16", "F16")                                                                    \
    X(I8, 4, 1, "int8", "I8")                                                                      \
    X(U8, 5, 1, "uint8", "U8")                                                                     \
    X(I32, 6, 4, "int32", "I32")                                                                   \
    X(I64, 7, 8, "int64", "I64")

typedef enum ftc_dtype {
    FTC_DTYPE_INVALID = 0,
#define FTC__DT_ENUM(name, code, size, str, st) FTC_DTYPE_##name = (code),
    FTC_DTYPE_MAP(FTC__DT_ENUM)
#undef FTC__DT_ENUM
} ftc_dtype_t;

/* Size of one element in bytes; 0 for an unknown dtype. Thread-safe. */
size_t ftc_dtype_size(int dtype);
/* "fp32", "bf16", ...; NULL for an unknown dtype. Thread-safe. */
const char *ftc_dtype_name(int dtype);
/* Parses "fp32"/"float32"/"F32"... into a dtype; FTC_DTYPE_INVALID if unknown. */
ftc_dtype_t ftc_dtype_parse(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* FTC_H */
