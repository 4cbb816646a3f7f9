/*
 * fsio.h — crash-safe file writes with I/O fault injection.
 *
 * Durable writes follow Redis's rdb.c: write a temp file in the target
 * directory, fsync it, close, rename over the final name, fsync the directory.
 * A crash at any point leaves either the old file or the new one, never a
 * torn mix.
 *
 * Every write, fsync and rename goes through these functions so that tests
 * can fail the N-th one (SQLite-style fault injection): an ftc_fault_t,
 * usually parsed from FTC_FAULT="write:3" / "fsync:1" / "rename:2", optionally
 * ",crash" (the process _exits at that point, as a power cut would stop it)
 * and ",enospc" (the failure reports a full disk instead of EIO). Pass NULL
 * where no fault is wanted. When built without FTC_FAULT_INJECTION the hooks
 * compile away.
 */
#ifndef FTC_CORE_FSIO_H
#define FTC_CORE_FSIO_H

#include "core/err.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum ftc_fault_op { FTC_FAULT_WRITE = 0, FTC_FAULT_FSYNC = 1, FTC_FAULT_RENAME = 2 };

typedef struct ftc_fault {
    int op;               /* which operation kind fails (ftc_fault_op); -1 = none */
    int64_t at;           /* fail the at-th operation of that kind, 1-based; 0 = never */
    int crash;            /* nonzero: _exit(FTC_FAULT_CRASH_STATUS) instead of failing */
    int errnum;           /* errno reported by the failure (EIO, or ENOSPC) */
    atomic_llong count[3]; /* operations seen so far, per kind */
} ftc_fault_t;

#define FTC_FAULT_CRASH_STATUS 86

/* Parses "write:3", "fsync:1,crash", "rename:2,enospc". An empty or NULL spec
 * disables injection. Returns 0, or FTC_EINVAL with a message in err. */
int ftc_fault_parse(ftc_fault_t *f, const char *spec, ftc_err_t *err);
/* Called before each operation of kind op: returns 0 to proceed, or an errno
 * value to report (and may _exit in crash mode). NULL f never fails. */
int ftc_fault_hit(ftc_fault_t *f, int op);

/* write(2) until done, retrying EINTR and short writes. what names the file
 * in errors. Returns 0, FTC_ENOSPC on a full disk, else FTC_EIO. */
int ftc_fs_write_all(int fd, const void *buf, size_t len, ftc_fault_t *f, ftc_err_t *err,
                     const char *what);
int ftc_fs_fsync(int fd, ftc_fault_t *f, ftc_err_t *err, const char *what);
int ftc_fs_rename(const char *from, const char *to, ftc_fault_t *f, ftc_err_t *err);
/* fsync of a directory, so that a rename in it is durable. */
int ftc_fs_fsync_dir(const char *dir, ftc_fault_t *f, ftc_err_t *err);

/* Writes buf to dir/name atomically and durably (temp, fsync, rename, fsync
 * dir). On failure the temp file is removed and dir/name is untouched (a failed
 * directory fsync comes after the rename: the new data may be in place). Each
 * call has its own temp file (".NAME.SEQ.tmp.PID"), so threads may write the
 * same file at once: the last rename wins, whole. Thread-safe. */
int ftc_fs_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len,
                             ftc_fault_t *f, ftc_err_t *err);

/* Reads a whole regular file into a malloc'd buffer (caller frees). Refuses
 * files larger than max_len with FTC_ERANGE, and anything that is not a
 * regular file (a directory, a FIFO, a device) with FTC_EINVAL, without
 * waiting (a FIFO with no writer is not waited for). *out gets a NUL after
 * the data so text can be parsed in place. */
int ftc_fs_read_file(const char *path, size_t max_len, uint8_t **out, size_t *len,
                     ftc_err_t *err);

/* Splits path into its directory (dlen bytes: "." when path has no slash,
 * "/" for "/name") and its final name, *base, a pointer into path ("" when
 * path ends in '/': the caller says what it wanted). FTC_EINVAL when the
 * directory does not fit. */
int ftc_fs_split_path(const char *path, char *dir, size_t dlen, const char **base,
                      ftc_err_t *err);

/* mkdir -p with mode 0700 for missing parts; existing directories are fine. */
int ftc_fs_mkdirs(const char *path, ftc_err_t *err);
/* Removes a directory and the plain files in it (one level; no recursion
 * into subdirectories). Missing is fine. */
int ftc_fs_remove_dir(const char *path, ftc_err_t *err);

/* Closes every descriptor >= lowfd. For a child between fork and exec
 * (async-signal-safe: close_range(2), else close(2) in a loop): a training
 * binary or redis-server must not inherit its parent's libfabric sockets,
 * Redis connections or agent socket. A rank holding the agent's listening
 * socket keeps a stopped agent's port open, and a peer's connect to it then
 * blocks instead of being refused. */
void ftc_fs_close_from(int lowfd);

#endif
