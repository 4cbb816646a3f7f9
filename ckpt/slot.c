/*
 * slot.c — see slot.h.
 */
#include "ckpt/slot.h"

#include "core/config.h"
#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FTC_SHM_DIR "/dev/shm"

int ftc_slot_name(const char *job, uint32_t rank, int idx, char *buf, size_t cap, ftc_err_t *err)
{
    for (const char *p = job; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return ftc_err_set(err, FTC_EINVAL, "job id '%.64s' has characters a shm name cannot "
                                                "hold (use A-Z a-z 0-9 . _ -)", job);
    int n = snprintf(buf, cap, "ftc.%s.r%u.s%d", job, rank, idx);
    if (n < 0 || (size_t)n >= cap || !job[0])
        return ftc_err_set(err, FTC_EINVAL, "slot name for job '%.64s' is empty or too long", job);
    return 0;
}

int ftc_slot_name_prev(const char *job, uint32_t rank, int idx, char *buf, size_t cap,
                       ftc_err_t *err)
{
    int rc = ftc_slot_name(job, rank, idx, buf, cap, err);
    if (rc)
        return rc;
    char *dot = strrchr(buf, '.');
    if (!dot || dot[1] != 's')
        return ftc_err_set(err, FTC_EINVAL, "slot name %s", buf);
    dot[1] = 'p';
    return 0;
}

/* A slot file found by name is trusted only when it is what this process
 * would have made: a regular file of this user, with no access for group
 * or others (ftc creates them 0600). /dev/shm is writable by everyone, so
 * the name alone proves nothing: another user (or an earlier job of
 * another user with the same job id) may have made it first, readable or
 * writable by all. 0, or code naming the slot, its owner and mode. */
static int ftc__slot_trusted(const char *name, const struct stat *st, int code, ftc_err_t *err)
{
    if (S_ISREG(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 077) == 0)
        return 0;
    return ftc_err_set(err, code,
                       "slot %s in %s is not this user's own (owner uid %u, mode %04o; this "
                       "process runs as uid %u and makes its slots 0600): refused, it could be "
                       "read or rewritten by others; remove it (rm %s/%s) or use another job id",
                       name, FTC_SHM_DIR, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777),
                       (unsigned)geteuid(), FTC_SHM_DIR, name);
}

int ftc_slot_keep_other_size(const char *name, const char *prev, uint64_t size, ftc_err_t *err)
{
    char from[FTC_SLOT_NAME_MAX + 16], to[FTC_SLOT_NAME_MAX + 16];
    snprintf(from, sizeof from, FTC_SHM_DIR "/%s", name);
    snprintf(to, sizeof to, FTC_SHM_DIR "/%s", prev);
    struct stat st;
    /* lstat: a link by the name is not followed (nor kept) */
    if (lstat(from, &st) != 0 || (S_ISREG(st.st_mode) && (uint64_t)st.st_size == size))
        return 0;
    /* only this user's own slot is kept: another's file (root may rename
     * it in the sticky /dev/shm) is left where it is, for ftc_slot_create
     * to refuse by name */
    int rc = ftc__slot_trusted(name, &st, FTC_EEXIST, err);
    if (rc)
        return rc;
    if (rename(from, to) != 0)
        return ftc_err_errno(err, errno, "keeping slot %s as %s", name, prev);
    return 0;
}

int ftc_shm_free(uint64_t *free_bytes, ftc_err_t *err)
{
    struct statvfs st;
    if (statvfs(FTC_SHM_DIR, &st) != 0)
        return ftc_err_errno(err, errno, "statvfs %s", FTC_SHM_DIR);
    *free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
    return 0;
}

/* The bytes the file system behind shm must still give a slot of size
 * bytes whose file holds held bytes already (st_blocks * 512, 0 for a new
 * one): tmpfs allocates whole pages, and what the file holds counts (a
 * larger file's pages beyond size are freed when it is truncated). */
static uint64_t ftc__shm_need(uint64_t size, uint64_t held)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t page = pg > 0 ? (uint64_t)pg : 4096u;
    uint64_t want = (size + page - 1) / page * page;
    return want > held ? want - held : 0;
}

/* The free bytes of /dev/shm for a space check of `what` (need bytes), or
 * false when statvfs fails: the check cannot be made, which is a warning,
 * not the caller's error (err is left as it was). */
static bool ftc__shm_free_for(const char *what, uint64_t need, uint64_t *free_b)
{
    ftc_err_t e = {0};
    if (ftc_shm_free(free_b, &e) == 0)
        return true;
    FTC_WARN("slot", "%s: the free space of %s cannot be read (%s): %llu bytes are reserved "
             "without checking first", what, FTC_SHM_DIR, e.msg, (unsigned long long)need);
    return false;
}

#ifdef MADV_POPULATE_WRITE
typedef struct ftc__pop {
    uint8_t *p;
    uint64_t len;
    int rc;
} ftc__pop_t;

static void *ftc__pop_one(void *arg)
{
    ftc__pop_t *x = arg;
    x->rc = madvise(x->p, x->len, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
    return NULL;
}

/* MADV_POPULATE_WRITE over the page-aligned [p, p + len), in pieces of at
 * least 64 MiB on up to 8 threads (one per online core): allocating and
 * zeroing pages is per-core work, about 0.3 s per GiB on one core of these
 * machines, and a replacement node's slot is on the restore's critical path.
 * 0, or the errno of the first piece that failed. */
static int ftc__populate_par(uint8_t *p, uint64_t len)
{
    enum { MAXT = 8 };
    const uint64_t min_piece = 64ull << 20;
    long nc = sysconf(_SC_NPROCESSORS_ONLN), pg = sysconf(_SC_PAGESIZE);
    uint64_t page = pg > 0 ? (uint64_t)pg : 4096u;
    uint64_t k = len / min_piece;
    if (k > (uint64_t)(nc > 0 ? nc : 1))
        k = (uint64_t)(nc > 0 ? nc : 1);
    if (k > MAXT)
        k = MAXT;
    if (k < 2) {
        ftc__pop_t one = {p, len, 0};
        ftc__pop_one(&one);
        return one.rc;
    }
    uint64_t piece = (len / k + page - 1) / page * page;
    ftc__pop_t x[MAXT];
    pthread_t tid[MAXT];
    bool started[MAXT] = {false};
    int n = 0;
    for (uint64_t off = 0; off < len && n < MAXT; off += piece, n++) {
        x[n] = (ftc__pop_t){p + off, len - off < piece ? len - off : piece, 0};
        if (n > 0 && pthread_create(&tid[n], NULL, ftc__pop_one, &x[n]) == 0)
            started[n] = true;
    }
    for (int i = 0; i < n; i++) /* piece 0 here, and any that got no thread */
        if (!started[i])
            ftc__pop_one(&x[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        if (x[i].rc && !rc)
            rc = x[i].rc;
    }
    return rc;
}
#endif

void ftc_mem_prefault(void *p, uint64_t len)
{
#ifdef MADV_POPULATE_WRITE
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096u;
    uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + len) & ~(page - 1);
    if (len && e > b)
        (void)ftc__populate_par((uint8_t *)b, e - b); /* advice: a failure costs faults */
#else
    (void)p;
    (void)len;
#endif
}

static int ftc__map(ftc_slot_t *s, bool writable, ftc_err_t *err)
{
    void *p = mmap(NULL, s->size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, s->fd, 0);
    if (p == MAP_FAILED)
        return ftc_err_errno(err, errno, "mmap slot %s (%llu bytes)", s->name,
                             (unsigned long long)s->size);
    s->base = p;
    return 0;
}

/* Reserves [p, p + len) by prefaulting it writable: 0, EINVAL where the
 * kernel (or these headers) lack MADV_POPULATE_WRITE, else the errno (EFAULT:
 * a page could not be allocated, a SIGBUS on a plain write; ENOMEM). */
static int ftc__populate(void *p, uint64_t len)
{
#ifdef MADV_POPULATE_WRITE
    return ftc__populate_par(p, len);
#else
    (void)p;
    (void)len;
    return EINVAL;
#endif
}

int ftc_slot_create_ex(const char *name, uint64_t size, unsigned flags, ftc_slot_t *s,
                       ftc_err_t *err)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->name, sizeof s->name, "%s", name);
    if (size == 0)
        return ftc_err_set(err, FTC_EINVAL, "slot %s: size 0", name);
    char path[FTC_SLOT_NAME_MAX + 2];
    snprintf(path, sizeof path, "/%s", name);
    /* whether this call creates the file: only then is it unlinked when
     * refused (an existing one, even empty, is someone else's) */
    bool created = true;
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = shm_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return ftc_err_errno(err, errno, "shm_open %s", name);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        if (created)
            shm_unlink(path);
        return ftc_err_errno(err, e, "fstat slot %s", name);
    }
    /* an existing file is adopted (its size, its pages, its contents) only
     * when it is this user's own, private slot */
    int trc = created ? 0 : ftc__slot_trusted(name, &st, FTC_EEXIST, err);
    if (trc) {
        close(fd);
        return trc;
    }
    uint64_t have = (uint64_t)st.st_size, held = (uint64_t)st.st_blocks * 512;
    bool reserve = have != size;
    /* at its size but not every page behind it (deferred, or its creator died
     * before reserving): reserved again, its contents stay */
    bool sparse = !reserve && held < size;
    if (reserve || sparse) {
        /* new, another size or not reserved: check space first (whole pages,
         * less what the file holds already), then reserve */
        uint64_t need = ftc__shm_need(size, held), free_b = 0;
        if (need && ftc__shm_free_for(name, need, &free_b) && free_b < need) {
            close(fd);
            if (created)
                shm_unlink(path);
            return ftc_err_set(err, FTC_ENOSPC,
                               "slot %s of %llu bytes needs %llu bytes (whole pages, less the "
                               "%llu it holds) but %s has %llu free: enlarge it (mount -o "
                               "remount,size=... %s, or docker --shm-size) or checkpoint less per "
                               "node",
                               name, (unsigned long long)size, (unsigned long long)need,
                               (unsigned long long)held, FTC_SHM_DIR, (unsigned long long)free_b,
                               FTC_SHM_DIR);
        }
    }
    if (reserve && ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        if (created)
            shm_unlink(path);
        return ftc_err_errno(err, e, "ftruncate slot %s to %llu", name, (unsigned long long)size);
    }
    s->fd = fd;
    s->size = size;
    int rc = ftc__map(s, true, err);
    if (rc) {
        close(fd);
        s->fd = -1;
        if (created)
            shm_unlink(path);
        return rc;
    }
    if (!reserve && !sparse)
        return 0;
    if (flags & FTC_SLOT_DEFER) {
        s->unreserved = true;
        return 0;
    }
    if (sparse) {
        s->unreserved = true;
        rc = ftc_slot_reserve(s, err);
        if (rc)
            ftc_slot_close(s);
        return rc;
    }
    /* the reservation: prefaulting every page allocates (and zeroes) it as
     * posix_fallocate does, and maps it here in the same pass */
    int e = (flags & FTC_SLOT_POPULATE) ? ftc__populate(s->base, size) : EINVAL;
    if (e == 0)
        s->populated = true;
    else if (e == EINVAL)
        e = posix_fallocate(fd, 0, (off_t)size);
    if (e) {
        ftc_slot_close(s);
        if (created)
            shm_unlink(path);
        return ftc_err_set(err, e == ENOSPC || e == EFAULT || e == ENOMEM ? FTC_ENOSPC : FTC_EIO,
                           "reserving %llu bytes for slot %s in %s: %s (is %s full? enlarge it "
                           "or checkpoint less per node)",
                           (unsigned long long)size, name, FTC_SHM_DIR,
                           e == EFAULT ? "a page could not be allocated" : strerror(e),
                           FTC_SHM_DIR);
    }
    return 0;
}

/* A background reservation (ftc_slot_reserve_background): shared by the
 * slot and its thread, freed by the last of them to let go. */
struct ftc__slot_bg {
    int fd; /* the thread's own descriptor of the slot's file */
    uint64_t size;
    int delay_ms;     /* FTC_TEST_SLOT_RESERVE_DELAY_MS */
    atomic_bool stop; /* the slot is reserved by its owner, or closed */
    atomic_bool done; /* every page reserved by the thread */
    atomic_int refs;
};

static void ftc__bg_put(struct ftc__slot_bg *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        close(b->fd);
        free(b);
    }
}

static void *ftc__bg_run(void *arg)
{
    struct ftc__slot_bg *b = arg;
    /* the lowest priority: a core nothing else wants (this thread only) */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    for (int waited = 0; waited < b->delay_ms && !atomic_load(&b->stop); waited += 10)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    /* in pieces, so that a stop (the owner reserving the rest itself) is
     * seen soon and the file's lock is held briefly each time */
    const uint64_t piece = 4ull << 20;
    uint64_t off = 0;
    while (off < b->size && !atomic_load(&b->stop)) {
        uint64_t n = b->size - off < piece ? b->size - off : piece;
        if (posix_fallocate(b->fd, (off_t)off, (off_t)n) != 0)
            break; /* the owner's ftc_slot_reserve says why */
        off += n;
    }
    if (off >= b->size)
        atomic_store(&b->done, true);
    ftc__bg_put(b);
    return NULL;
}

/* Stops s's background reservation (it ends after its current piece) and
 * lets go of it; whether it had reserved every page. */
static bool ftc__bg_release(ftc_slot_t *s)
{
    struct ftc__slot_bg *b = s->bg;
    if (!b)
        return false;
    s->bg = NULL;
    atomic_store(&b->stop, true);
    bool done = atomic_load(&b->done);
    ftc__bg_put(b);
    return done;
}

void ftc_slot_reserve_background(ftc_slot_t *s)
{
    if (!s->unreserved || s->fd < 0 || s->bg)
        return;
    struct ftc__slot_bg *b = calloc(1, sizeof *b);
    if (!b)
        return;
    b->fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0); /* never inherited by a rank forked meanwhile */
    b->size = s->size;
    /* tests only, read at each start (a test sets it around one agent's
     * restore), strictly: atoi took "5s" for 5 */
    const char *d = getenv("FTC_TEST_SLOT_RESERVE_DELAY_MS");
    int64_t dv = 0;
    if (d && *d && ftc_parse_int(d, 0, 3600000, &dv) != 0) {
        FTC_WARN("slot", "FTC_TEST_SLOT_RESERVE_DELAY_MS is '%.40s', not 0..3600000 ms (a test "
                 "knob; unset it): ignored", d);
        dv = 0;
    }
    b->delay_ms = (int)dv;
    atomic_init(&b->stop, false);
    atomic_init(&b->done, false);
    atomic_init(&b->refs, 2);
    pthread_attr_t at;
    pthread_t t;
    bool started = b->fd >= 0 && pthread_attr_init(&at) == 0;
    if (started) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &at, ftc__bg_run, b) == 0;
        pthread_attr_destroy(&at);
    }
    if (!started) { /* ftc_slot_reserve does it all */
        if (b->fd >= 0)
            close(b->fd);
        free(b);
        return;
    }
    s->bg = b;
}

bool ftc_slot_reserved_background(const ftc_slot_t *s)
{
    return s->bg && atomic_load(&s->bg->done);
}

int ftc_slot_reserve(ftc_slot_t *s, ftc_err_t *err)
{
    if (!s->unreserved)
        return 0;
    if (s->fd < 0)
        return ftc_err_set(err, FTC_EINVAL, "slot %s is closed", s->name);
    if (ftc__bg_release(s)) { /* the background reservation got every page */
        s->unreserved = false;
        return 0;
    }
    int e = posix_fallocate(s->fd, 0, (off_t)s->size);
    if (e)
        return ftc_err_set(err, e == ENOSPC ? FTC_ENOSPC : FTC_EIO,
                           "reserving %llu bytes for slot %s in %s: %s (is %s full? enlarge it "
                           "or checkpoint less per node)",
                           (unsigned long long)s->size, s->name, FTC_SHM_DIR, strerror(e),
                           FTC_SHM_DIR);
    s->unreserved = false;
    return 0;
}

int ftc_slot_create(const char *name, uint64_t size, ftc_slot_t *s, ftc_err_t *err)
{
    return ftc_slot_create_ex(name, size, 0, s, err);
}

typedef struct ftc__mk {
    const char *name;
    uint64_t size;
    unsigned flags;
    ftc_slot_t *slot;
    ftc_err_t err;
    int rc;
} ftc__mk_t;

static void *ftc__mk_one(void *arg)
{
    ftc__mk_t *m = arg;
    m->rc = ftc_slot_create_ex(m->name, m->size, m->flags, m->slot, &m->err);
    return NULL;
}

int ftc_slot_create_all(const char *const *names, int n, uint64_t size, const unsigned *flags,
                        ftc_slot_t *slots, ftc_err_t *err)
{
    enum { MAXN = 16 };
    for (int i = 0; i < n && i < MAXN; i++) {
        memset(&slots[i], 0, sizeof slots[i]);
        slots[i].fd = -1;
    }
    if (n < 1 || n > MAXN)
        return ftc_err_set(err, FTC_EINVAL, "ftc_slot_create_all: %d slots (1..%d)", n, MAXN);
    if (size == 0)
        return ftc_err_set(err, FTC_EINVAL, "slot %s: size 0", names[0]);
    /* what they still need together, before any is reserved (the threads'
     * own checks would each see the space the others are about to take):
     * whole pages, less what each file holds already; deferred ones too */
    uint64_t need = 0;
    for (int i = 0; i < n; i++) {
        char path[FTC_SLOT_NAME_MAX + 16];
        struct stat st;
        snprintf(path, sizeof path, FTC_SHM_DIR "/%s", names[i]);
        need += ftc__shm_need(size, stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0);
    }
    uint64_t free_b = 0;
    char what[FTC_SLOT_NAME_MAX + 32];
    snprintf(what, sizeof what, "%d slots (%s ...)", n, names[0]);
    if (need && ftc__shm_free_for(what, need, &free_b) && free_b < need)
        return ftc_err_set(err, FTC_ENOSPC,
                           "%d slots of %llu bytes (%s ...) need %llu bytes (whole pages, less "
                           "what they hold) but %s has %llu free: enlarge it (mount -o "
                           "remount,size=... %s, or docker --shm-size) or checkpoint less per "
                           "node",
                           n, (unsigned long long)size, names[0], (unsigned long long)need,
                           FTC_SHM_DIR, (unsigned long long)free_b, FTC_SHM_DIR);
    ftc__mk_t mk[MAXN];
    pthread_t tid[MAXN];
    bool started[MAXN] = {false};
    for (int i = 0; i < n; i++) {
        mk[i] = (ftc__mk_t){.name = names[i], .size = size, .flags = flags ? flags[i] : 0,
                            .slot = &slots[i]};
        /* slot 0 on this thread; one that cannot get a thread is made here too */
        if (i > 0 && need && pthread_create(&tid[i], NULL, ftc__mk_one, &mk[i]) == 0)
            started[i] = true;
    }
    for (int i = 0; i < n; i++)
        if (!started[i])
            ftc__mk_one(&mk[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        if (mk[i].rc && !rc) {
            rc = mk[i].rc;
            *err = mk[i].err;
        }
    }
    return rc;
}

int ftc_slot_open(const char *name, bool writable, ftc_slot_t *s, ftc_err_t *err)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->name, sizeof s->name, "%s", name);
    char path[FTC_SLOT_NAME_MAX + 2];
    snprintf(path, sizeof path, "/%s", name);
    int fd = shm_open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
    if (fd < 0)
        return ftc_err_errno(err, errno, "shm_open %s", name);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        return ftc_err_set(err, FTC_ENOENT, "slot %s is empty", name);
    }
    int trc = ftc__slot_trusted(name, &st, FTC_EAUTH, err);
    if (trc) {
        close(fd);
        return trc;
    }
    s->fd = fd;
    s->size = (uint64_t)st.st_size;
    int rc = ftc__map(s, writable, err);
    if (rc) {
        close(fd);
        s->fd = -1;
    }
    return rc;
}

int ftc_slot_open_all(const char *const *names, int n, bool writable, uint64_t size,
                      ftc_slot_t *slots, ftc_err_t *err)
{
    for (int i = 0; i < n; i++) {
        slots[i].base = NULL;
        slots[i].fd = -1;
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = ftc_slot_open(names[i], writable, &slots[i], err);
        if (!rc && size && slots[i].size != size)
            rc = ftc_err_set(err, FTC_EPROTO, "slot %s has %llu bytes, expected %llu", names[i],
                             (unsigned long long)slots[i].size, (unsigned long long)size);
    }
    if (rc)
        for (int i = 0; i < n; i++)
            ftc_slot_close(&slots[i]);
    return rc;
}

void ftc_slot_close(ftc_slot_t *s)
{
    ftc__bg_release(s);
    if (s->base)
        munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    s->base = NULL;
    s->fd = -1;
}

int ftc_slot_unlink(const char *name, ftc_err_t *err)
{
    char path[FTC_SLOT_NAME_MAX + 2];
    snprintf(path, sizeof path, "/%s", name);
    if (shm_unlink(path) != 0 && errno != ENOENT)
        return ftc_err_errno(err, errno, "shm_unlink %s", name);
    return 0;
}
