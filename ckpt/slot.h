/*
 * slot.h — shared-memory slots: the node-local home of shards.
 *
 * A slot is a POSIX shm object (/dev/shm/NAME, mode 0600) holding one shard
 * region. The agent owns the slots, so they outlive a crashed rank; ranks
 * and a restarted agent map them by name. Each rank has three
 * (FTC_AP_SLOTS_PER_RANK): one is written while another still holds the last
 * committed version (I3) and the third the previous step, still replicating.
 *
 * Memory is reserved at creation with posix_fallocate (or, with
 * FTC_SLOT_POPULATE, by prefaulting every page of the creator's mapping,
 * which reserves the same pages and maps them in one pass), so a /dev/shm
 * that is too small fails here, with a message naming the size needed and
 * the size free, instead of killing a writer with SIGBUS later.
 *
 * Names: "ftc.JOB.r<RANK>.s<IDX>" (JOB as in the config). Not thread-safe per
 * slot; different slots are independent.
 */
#ifndef FTC_CKPT_SLOT_H
#define FTC_CKPT_SLOT_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FTC_SLOT_NAME_MAX 128

typedef struct ftc_slot {
    char name[FTC_SLOT_NAME_MAX]; /* shm name without the leading '/' */
    int fd;                       /* open shm fd, -1 when closed */
    uint8_t *base;                /* mapping, NULL when closed */
    uint64_t size;                /* bytes mapped */
    bool populated;               /* every page reserved and mapped writable here at creation */
    bool unreserved;              /* FTC_SLOT_DEFER: ftc_slot_reserve before anything writes it */
    struct ftc__slot_bg *bg;      /* ftc_slot_reserve_background's thread, NULL when none */
} ftc_slot_t;

/* ftc_slot_create_ex flags */
#define FTC_SLOT_POPULATE 1u /* a new slot is reserved by prefaulting every page of this
                              * mapping (MADV_POPULATE_WRITE) instead of posix_fallocate: the
                              * same pages reserved, and this process takes no fault per page
                              * writing it next (a fetch landing there); posix_fallocate where
                              * the kernel lacks it. Sets populated. */
#define FTC_SLOT_DEFER 2u    /* a new slot is sized and mapped but not reserved yet (the space
                              * was checked): the caller calls ftc_slot_reserve before anything
                              * writes it (unreserved until then). A slot found at its size but
                              * not fully reserved (one whose creator deferred it, or died
                              * between sizing and reserving) is reserved by any create. */

/* Builds the slot name of (job, rank, idx) into buf. */
int ftc_slot_name(const char *job, uint32_t rank, int idx, char *buf, size_t cap, ftc_err_t *err);
/* The name a slot is kept under when its rank comes back with another layout
 * (a new shard size after an elastic change): "...r<rank>.p<idx>", so the
 * previous layout's committed shard stays readable for re-partitioning until
 * the next layout change. */
int ftc_slot_name_prev(const char *job, uint32_t rank, int idx, char *buf, size_t cap,
                       ftc_err_t *err);
/* Renames slot `name` to `prev` when it exists with a size other than size
 * (replacing an older prev). 0 (also when there is nothing to keep), or an
 * errno-based error; FTC_EEXIST, the file left alone, when it is not this
 * user's own private regular file (see ftc_slot_create). */
int ftc_slot_keep_other_size(const char *name, const char *prev, uint64_t size, ftc_err_t *err);
/* Bytes free in the file system behind shm (usually /dev/shm). */
int ftc_shm_free(uint64_t *free_bytes, ftc_err_t *err);
/* Creates (or, if it exists with this size, reuses) a slot of size bytes,
 * reserves its memory, and maps it. Refuses with FTC_ENOSPC, before it
 * sizes or reserves anything, when /dev/shm cannot hold it: size in whole
 * pages, less what the slot's file holds already (st_blocks). When the free
 * space cannot be read (statvfs fails) the check is skipped with a warning
 * and err stays clear. A refused slot's file is unlinked only when this call
 * created it. An existing file is reused only when it is this user's own
 * regular file with no group or other access (as ftc makes them, 0600):
 * FTC_EEXIST naming its owner and mode otherwise, the file left alone. */
int ftc_slot_create(const char *name, uint64_t size, ftc_slot_t *s, ftc_err_t *err);
/* ftc_slot_create with flags (FTC_SLOT_POPULATE, FTC_SLOT_DEFER). */
int ftc_slot_create_ex(const char *name, uint64_t size, unsigned flags, ftc_slot_t *s,
                       ftc_err_t *err);
/* Creates (or reuses) n slots of size bytes at once, slot i as
 * ftc_slot_create_ex(names[i], size, flags ? flags[i] : 0): first checks that
 * /dev/shm holds what all of them still need together (whole pages, less
 * what their files hold; deferred ones too: FTC_ENOSPC naming the total),
 * then reserves them on up to n threads (the reservation zeroes every
 * page: the slots of one rank are 3 x its state). On failure the slots that
 * were created stay mapped in slots[] (base != NULL), the others are closed,
 * and err says why the first one failed. Thread-safe for different slots. */
int ftc_slot_create_all(const char *const *names, int n, uint64_t size, const unsigned *flags,
                        ftc_slot_t *slots, ftc_err_t *err);
/* Reserves a slot created with FTC_SLOT_DEFER (posix_fallocate; a no-op when
 * reserved): 0, or FTC_ENOSPC / FTC_EIO naming the slot and /dev/shm, and the
 * slot stays unreserved (nothing may write it). Not thread-safe per slot. */
int ftc_slot_reserve(ftc_slot_t *s, ftc_err_t *err);
/* Starts reserving a slot created with FTC_SLOT_DEFER on a thread of its own
 * at the lowest CPU priority (nice 19): memory wanted later (a replacement
 * node's other slots, reserved while its rank copies its restored state)
 * that must not take the cores of what is waited for now, nor keep the
 * caller's thread. The slot stays unreserved (nothing may write it) until
 * ftc_slot_reserve, which does not wait for the thread to finish: once the
 * thread is done it only marks the slot reserved, else it stops the thread
 * and reserves the rest itself (posix_fallocate skips what is there
 * already; it may wait for the one 4 MiB piece the thread is reserving,
 * which holds the file's lock).
 * ftc_slot_close stops the thread (it holds its own descriptor, so the
 * slot may be closed or unlinked at any time). A no-op on a reserved or
 * closed slot, one already being reserved, or when no thread can be
 * started. Tests: FTC_TEST_SLOT_RESERVE_DELAY_MS makes the thread wait that
 * long (or until stopped) before it starts. Not thread-safe per slot. */
void ftc_slot_reserve_background(ftc_slot_t *s);
/* Whether s's background reservation (ftc_slot_reserve_background) has
 * reserved every page; s stays unreserved until ftc_slot_reserve. */
bool ftc_slot_reserved_background(const ftc_slot_t *s);
/* Maps an existing slot (its size is the object's size): FTC_EAUTH, naming
 * its owner and mode, when it is not this user's own regular file with no
 * group or other access (anyone may create files in /dev/shm). */
int ftc_slot_open(const char *name, bool writable, ftc_slot_t *s, ftc_err_t *err);
/* Maps n existing slots at once (ftc_slot_open each), each of exactly size
 * bytes (0: any size). All or nothing: on failure every slot of slots[] is
 * closed (base NULL, fd -1, also those mapped before the one that failed),
 * and err names the failed one (FTC_EPROTO for a wrong size). */
int ftc_slot_open_all(const char *const *names, int n, bool writable, uint64_t size,
                      ftc_slot_t *slots, ftc_err_t *err);
/* Unmaps and closes; the object stays. Safe on a closed slot. */
void ftc_slot_close(ftc_slot_t *s);
/* Removes the object (mappings stay valid until closed). Missing is fine. */
int ftc_slot_unlink(const char *name, ftc_err_t *err);
/* Prefaults [p, p + len) writable in one call (MADV_POPULATE_WRITE), before
 * a bulk write into memory that may be untouched (a fresh slot, a fetch
 * buffer, freshly allocated tensors): one fault per 4 KiB page otherwise.
 * Only whole pages inside the range; a no-op where the kernel lacks it.
 * A range of 128 MiB or more is split over up to 8 threads (one per online
 * core, pieces of 64 MiB or more), as is a FTC_SLOT_POPULATE reservation.
 * Thread-safe. */
void ftc_mem_prefault(void *p, uint64_t len);

#endif
