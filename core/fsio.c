/*
 * fsio.c — see fsio.h.
 */
#include "core/fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int ftc_fault_parse(ftc_fault_t *f, const char *spec, ftc_err_t *err)
{
    memset(f, 0, sizeof *f);
    f->op = -1;
    f->errnum = EIO;
    if (!spec || !*spec)
        return 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    int have_op = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "crash")) {
            f->crash = 1;
        } else if (!strcmp(tok, "enospc")) {
            f->errnum = ENOSPC;
        } else {
            char *colon = strchr(tok, ':');
            if (!colon || have_op) /* one operation per spec: "write:1,fsync:2" is refused */
                goto bad;
            *colon = '\0';
            if (!strcmp(tok, "write"))
                f->op = FTC_FAULT_WRITE;
            else if (!strcmp(tok, "fsync"))
                f->op = FTC_FAULT_FSYNC;
            else if (!strcmp(tok, "rename"))
                f->op = FTC_FAULT_RENAME;
            else
                goto bad;
            char *end;
            errno = 0;
            long long n = strtoll(colon + 1, &end, 10);
            if (errno || *end || n < 1)
                goto bad;
            f->at = n;
            have_op = 1;
        }
    }
    if (!have_op)
        goto bad;
    return 0;
bad:
    f->op = -1;
    return ftc_err_set(err, FTC_EINVAL,
                       "fault spec '%s' not understood: use one of write:N, fsync:N or rename:N, "
                       "optionally followed by ,crash and/or ,enospc",
                       spec);
}

int ftc_fault_hit(ftc_fault_t *f, int op)
{
#ifdef FTC_FAULT_INJECTION
    if (!f || f->op != op || f->at <= 0)
        return 0;
    long long n = atomic_fetch_add(&f->count[op], 1) + 1;
    if (n != f->at)
        return 0;
    if (f->crash)
        _exit(FTC_FAULT_CRASH_STATUS);
    return f->errnum ? f->errnum : EIO;
#else
    (void)f;
    (void)op;
    return 0;
#endif
}

int ftc_fs_write_all(int fd, const void *buf, size_t len, ftc_fault_t *f, ftc_err_t *err,
                     const char *what)
{
    int e = ftc_fault_hit(f, FTC_FAULT_WRITE);
    if (e)
        return ftc_err_errno(err, e, "write %s (injected)", what);
    const uint8_t *p = buf;
    while (len > 0) {
        size_t n = len > (1u << 30) ? (1u << 30) : len;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ftc_err_errno(err, errno, "write %s", what);
        }
        if (w == 0)
            return ftc_err_errno(err, ENOSPC, "write %s", what);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int ftc_fs_fsync(int fd, ftc_fault_t *f, ftc_err_t *err, const char *what)
{
    int e = ftc_fault_hit(f, FTC_FAULT_FSYNC);
    if (e)
        return ftc_err_errno(err, e, "fsync %s (injected)", what);
    if (fsync(fd) != 0)
        return ftc_err_errno(err, errno, "fsync %s", what);
    return 0;
}

int ftc_fs_rename(const char *from, const char *to, ftc_fault_t *f, ftc_err_t *err)
{
    int e = ftc_fault_hit(f, FTC_FAULT_RENAME);
    if (e)
        return ftc_err_errno(err, e, "rename %s -> %s (injected)", from, to);
    if (rename(from, to) != 0)
        return ftc_err_errno(err, errno, "rename %s -> %s", from, to);
    return 0;
}

int ftc_fs_fsync_dir(const char *dir, ftc_fault_t *f, ftc_err_t *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ftc_err_errno(err, errno, "open directory %s", dir);
    int rc = ftc_fs_fsync(fd, f, err, dir);
    close(fd);
    return rc;
}

int ftc_fs_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len,
                             ftc_fault_t *f, ftc_err_t *err)
{
    /* The temp name is unique per call, not only per process: two threads
     * writing the same file at once must not share (and truncate, and rename
     * away) one temp file. ".NAME.SEQ.tmp.PID": the pid stays last, where
     * persist looks for it; a leftover under this name can only be a dead
     * process's (same pid), which O_TRUNC overwrites. */
    static atomic_ullong seq;
    unsigned long long n = atomic_fetch_add(&seq, 1);
    char tmp[PATH_MAX], dst[PATH_MAX];
    int n1 = snprintf(tmp, sizeof tmp, "%s/.%s.%llu.tmp.%d", dir, name, n, (int)getpid());
    int n2 = snprintf(dst, sizeof dst, "%s/%s", dir, name);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof tmp || (size_t)n2 >= sizeof dst)
        return ftc_err_set(err, FTC_EINVAL, "path too long: %s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return ftc_err_errno(err, errno, "create %s", tmp);
    int rc;
    FTC_CHECK_GOTO(ftc_fs_write_all(fd, buf, len, f, err, tmp), rc, undo_tmp);
    FTC_CHECK_GOTO(ftc_fs_fsync(fd, f, err, tmp), rc, undo_tmp);
    if (close(fd) != 0) {
        fd = -1;
        rc = ftc_err_errno(err, errno, "close %s", tmp);
        goto undo_tmp;
    }
    fd = -1;
    FTC_CHECK_GOTO(ftc_fs_rename(tmp, dst, f, err), rc, undo_tmp);
    return ftc_fs_fsync_dir(dir, f, err);
undo_tmp:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}

int ftc_fs_read_file(const char *path, size_t max_len, uint8_t **out, size_t *len, ftc_err_t *err)
{
    *out = NULL;
    *len = 0;
    /* O_NONBLOCK: the open of a FIFO (--config FIFO) waited for a writer,
     * for ever; it is refused below as not a regular file. No effect on one. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ftc_err_errno(err, errno, "open %s", path);
    struct stat st;
    int rc = 0;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0) {
        rc = ftc_err_errno(err, errno, "stat %s", path);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ftc_err_set(err, FTC_EINVAL, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)st.st_size > max_len) {
        rc = ftc_err_set(err, FTC_ERANGE, "%s: %lld bytes, more than the %zu allowed", path,
                         (long long)st.st_size, max_len);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        rc = ftc_err_set(err, FTC_ENOMEM, "%s: cannot allocate %zu bytes", path, size + 1);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = ftc_err_errno(err, errno, "read %s", path);
            goto out;
        }
        if (r == 0)
            break; /* shrank under us: report what we have */
        got += (size_t)r;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

int ftc_fs_split_path(const char *path, char *dir, size_t dlen, const char **base,
                      ftc_err_t *err)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dlen, ".");
        *base = path;
        return 0;
    }
    size_t n = (size_t)(slash - path);
    if (n + 1 >= dlen)
        return ftc_err_set(err, FTC_EINVAL, "path too long: %s", path);
    if (n == 0)
        n = 1; /* "/name" lives in "/" */
    memcpy(dir, path, n);
    dir[n] = '\0';
    *base = slash + 1;
    return 0;
}

int ftc_fs_mkdirs(const char *path, ftc_err_t *err)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return ftc_err_set(err, FTC_EINVAL, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return ftc_err_errno(err, errno, "mkdir %s", buf);
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        return ftc_err_errno(err, errno, "mkdir %s", buf);
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return ftc_err_set(err, FTC_EINVAL, "%s exists and is not a directory", buf);
    return 0;
}

int ftc_fs_remove_dir(const char *path, ftc_err_t *err)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : ftc_err_errno(err, errno, "opendir %s", path);
    struct dirent *de;
    char p[PATH_MAX];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        if (unlink(p) != 0 && errno != ENOENT) {
            int e = errno;
            closedir(d);
            return ftc_err_errno(err, e, "remove %s", p);
        }
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT)
        return ftc_err_errno(err, errno, "rmdir %s", path);
    return 0;
}

void ftc_fs_close_from(int lowfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = lowfd; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
        close((int)fd);
}
