/*
 * coll.c — the backend-independent half of trainer/coll.h: argument checks,
 * the sticky broken/aborted state, dispatch through the ops table, the chunk
 * layout, and the address exchange through a directory of files.
 */
#include "trainer/coll.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t ftc_coll_dtype_size(ftc_coll_dtype_t dt)
{
    switch (dt) {
    case FTC_COLL_U8:
        return 1;
    case FTC_COLL_F32:
        return 4;
    case FTC_COLL_I128:
        return 16;
    }
    return 0;
}

void ftc_coll_chunk(size_t count, int size, int r, size_t *off, size_t *len)
{
    size_t n = (size_t)size, base = count / n, rem = count % n, ur = (size_t)r;
    *off = ur * base + (ur < rem ? ur : rem);
    *len = base + (ur < rem ? 1 : 0);
}

ftc_coll_t *ftc_coll_new(const ftc_coll_ops_t *ops, int rank, int size, void *impl)
{
    ftc_coll_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    atomic_init(&c->aborted, 0);
    return c;
}

int ftc_coll_rank(const ftc_coll_t *c) { return c->rank; }
int ftc_coll_size(const ftc_coll_t *c) { return c->size; }
const char *ftc_coll_backend(const ftc_coll_t *c) { return c->ops->name; }
const char *ftc_coll_errmsg(const ftc_coll_t *c) { return c->err.msg; }

int ftc_coll_health(const ftc_coll_t *c)
{
    if (atomic_load(&c->aborted))
        return FTC_ECANCELED;
    return c->broken;
}

/* Fails fast on a broken or aborted communicator; checks the arguments. */
static int enter(ftc_coll_t *c, const char *op, const void *buf, size_t count,
                 ftc_coll_dtype_t dt, int reduce)
{
    if (atomic_load(&c->aborted))
        return ftc_err_set(&c->err, FTC_ECANCELED, "coll %s rank %d/%d: communicator aborted",
                           op, c->rank, c->size);
    if (c->broken)
        return ftc_err_set(&c->err, c->broken,
                           "coll %s rank %d/%d: communicator broken by an earlier failure "
                           "(%s); destroy it and build a new group",
                           op, c->rank, c->size, ftc_strerror(c->broken));
    size_t es = ftc_coll_dtype_size(dt);
    if (!es || (reduce && dt == FTC_COLL_U8))
        return ftc_err_set(&c->err, FTC_EINVAL, "coll %s rank %d/%d: dtype %d not allowed", op,
                           c->rank, c->size, (int)dt);
    if (count && !buf)
        return ftc_err_set(&c->err, FTC_EINVAL, "coll %s: NULL buffer for %zu elements", op,
                           count);
    if (count > SIZE_MAX / es)
        return ftc_err_set(&c->err, FTC_EINVAL, "coll %s: %zu elements overflow", op, count);
    return 0;
}

/* A failure breaks the communicator, except a data range error. */
static int leave(ftc_coll_t *c, int rc)
{
    if (rc < 0 && rc != FTC_ERANGE && rc != FTC_EINVAL && !c->broken)
        c->broken = rc;
    return rc;
}

int ftc_coll_all_reduce(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl)
{
    int rc = enter(c, "all_reduce", buf, count, dt, 1);
    return rc < 0 ? rc : leave(c, c->ops->all_reduce(c, buf, count, dt, dl));
}

int ftc_coll_reduce_scatter(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                            ftc_deadline_t dl)
{
    int rc = enter(c, "reduce_scatter", buf, count, dt, 1);
    return rc < 0 ? rc : leave(c, c->ops->reduce_scatter(c, buf, count, dt, dl));
}

int ftc_coll_all_gather(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt,
                        ftc_deadline_t dl)
{
    int rc = enter(c, "all_gather", buf, count, dt, 0);
    return rc < 0 ? rc : leave(c, c->ops->all_gather(c, buf, count, dt, dl));
}

int ftc_coll_broadcast(ftc_coll_t *c, void *buf, size_t count, ftc_coll_dtype_t dt, int root,
                       ftc_deadline_t dl)
{
    int rc = enter(c, "broadcast", buf, count, dt, 0);
    if (rc < 0)
        return rc;
    if (root < 0 || root >= c->size)
        return ftc_err_set(&c->err, FTC_EINVAL, "coll broadcast: root %d outside 0..%d", root,
                           c->size - 1);
    return leave(c, c->ops->broadcast(c, buf, count, dt, root, dl));
}

int ftc_coll_barrier(ftc_coll_t *c, ftc_deadline_t dl)
{
    int rc = enter(c, "barrier", NULL, 0, FTC_COLL_U8, 0);
    return rc < 0 ? rc : leave(c, c->ops->barrier(c, dl));
}

void ftc_coll_abort(ftc_coll_t *c)
{
    atomic_store(&c->aborted, 1);
    c->ops->abort(c);
}

void ftc_coll_destroy(ftc_coll_t *c)
{
    if (!c)
        return;
    c->ops->destroy(c);
    free(c);
}

/* ---- address exchange through a directory ------------------------------ */

int ftc__coll_publish_file(const char *path, const char *tmp, const void *p, size_t n,
                           const char *who, ftc_err_t *err)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ftc_err_errno(err, errno, "%s: create %s", who, tmp);
    const uint8_t *b = p;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, b, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return ftc_err_errno(err, e, "%s: write %s", who, tmp);
        }
        b += w, left -= (size_t)w;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return ftc_err_errno(err, e, "%s: publish %s", who, path);
    }
    return 0;
}

/* 1 if read, 0 if absent, <0 on error. */
static int read_addr(const char *path, uint8_t *out, size_t *len, ftc_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : ftc_err_errno(err, errno, "coll exchange: open %s", path);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, out + got, FTC_FABRIC_ADDR_MAX - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return ftc_err_errno(err, e, "coll exchange: read %s", path);
        }
        if (r == 0 || (got += (size_t)r) == FTC_FABRIC_ADDR_MAX)
            break;
    }
    close(fd);
    if (got == 0)
        return ftc_err_set(err, FTC_ECORRUPT, "coll exchange: %s is empty", path);
    *len = got;
    return 1;
}

int ftc_coll_exchange_dir(const char *dir, int rank, int size, const void *addr, size_t len,
                          uint8_t *addrs, size_t *lens, ftc_deadline_t dl, ftc_err_t *err)
{
    if (size < 1 || rank < 0 || rank >= size || !len || len > FTC_FABRIC_ADDR_MAX)
        return ftc_err_set(err, FTC_EINVAL,
                           "coll exchange: bad rank %d / size %d / address length %zu", rank,
                           size, len);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%d.addr", dir, rank);
    snprintf(tmp, sizeof tmp, "%s/.%d.addr.%ld.tmp", dir, rank, (long)getpid());
    int rc = ftc__coll_publish_file(path, tmp, addr, len, "coll exchange", err);
    if (rc < 0)
        return rc;
    for (int r = 0; r < size; r++)
        lens[r] = 0;
    for (;;) {
        int missing = 0, first_missing = -1;
        for (int r = 0; r < size; r++) {
            if (lens[r])
                continue;
            snprintf(path, sizeof path, "%s/%d.addr", dir, r);
            rc = read_addr(path, addrs + (size_t)r * FTC_FABRIC_ADDR_MAX, &lens[r], err);
            if (rc < 0)
                return rc;
            if (!rc) {
                missing++;
                if (first_missing < 0)
                    first_missing = r;
            }
        }
        if (!missing)
            return 0;
        if (ftc_deadline_expired(dl))
            return ftc_err_set(err, FTC_ETIMEDOUT,
                               "coll exchange in %s: rank %d: %d of %d addresses missing at the "
                               "deadline (first: rank %d)",
                               dir, rank, missing, size, first_missing);
        ftc_sleep_ms(5);
    }
}
