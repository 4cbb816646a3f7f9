/*
 * shard.h — the shard format: one rank's state at one step, the same bytes in
 * a shm slot, on the wire and (compressed or not) in a file.
 *
 *   offset 0        header       256 bytes: magic "FTCSHARD", format version,
 *                                 sizes, job id, step, generation, layout
 *                                 (dp, tp, pp) and this rank's coordinates
 *   256             tensor table  128 bytes per tensor: payload offset, length,
 *                                 xxh3 of the bytes, name, dtype, ndim, shape
 *   ...             names         the tensor names, back to back (no NULs)
 *   align 8         metadata      user records (key, value bytes): the data
 *                                 cursor, RNG state, anything the trainer wants
 *   align 64        payload       each tensor's bytes, 64-byte aligned
 *   total_size-64   footer        magic "FTCSHEND", total size, step, xxh3 of
 *                                 everything before the payload, and an xxh3
 *                                 of the footer itself
 *
 * The layout is canonical: every offset is a function of the tensor list and
 * the metadata, so the reader checks each one against the value it must have.
 * All integers are little-endian. docs/shard-format.md is the byte-level spec.
 *
 * Writing: describe the tensors and metadata in an ftc_shard_layout_t, ask its
 * size, write the head into a region of that size, copy each tensor's bytes to
 * ftc_shard_payload_ptr(), then ftc_shard_seal() computes the checksums. A
 * slot that is written every step keeps its head; only step, generation,
 * payload and checksums change (ftc_shard_restamp + ftc_shard_seal).
 *
 * Reading: ftc_shard_open() validates every field and bound before anything is
 * used and names the field and byte offset of the first problem; it never
 * reads outside [buf, buf+len). Tensor checksums are verified by
 * ftc_shard_verify() (or at open with FTC_SHARD_VERIFY).
 *
 * Thread-safety: a layout is not thread-safe; an open view is read-only and
 * may be shared by threads.
 */
#ifndef FTC_CKPT_SHARD_H
#define FTC_CKPT_SHARD_H

#include "core/err.h"
#include "ftc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_SHARD_VERSION 1
#define FTC_SHARD_HEADER_SIZE 256
#define FTC_SHARD_ENTRY_SIZE 128
#define FTC_SHARD_FOOTER_SIZE 64
#define FTC_SHARD_ALIGN 64
#define FTC_SHARD_MAX_DIMS 8
#define FTC_SHARD_JOB_MAX 63       /* bytes of job id, without the NUL */
#define FTC_SHARD_NAME_MAX 1024    /* bytes of a tensor name */
#define FTC_SHARD_MAX_TENSORS (1u << 20)
#define FTC_SHARD_META_KEY_MAX 255
#define FTC_SHARD_META_MAX (64u << 20) /* all metadata records together */

/* Who wrote the shard and where it sits in the job. */
typedef struct ftc_shard_info {
    char job_id[FTC_SHARD_JOB_MAX + 1]; /* NUL-terminated */
    uint64_t step;                      /* training step this state is after */
    uint64_t generation;                /* membership generation (fencing) */
    uint64_t created_ms;                /* wall clock when sealed; informational */
    uint32_t dp, tp, pp;                /* parallel degrees, each >= 1 */
    uint32_t dp_rank, tp_rank, pp_rank; /* coordinates, each < its degree */
} ftc_shard_info_t;

/* One tensor as seen through an open view. Pointers point into the buffer. */
typedef struct ftc_shard_tensor {
    const char *name;  /* not NUL-terminated: use name_len */
    uint32_t name_len; /* 1..FTC_SHARD_NAME_MAX */
    int dtype;         /* ftc_dtype_t */
    uint32_t ndim;     /* 0 (a scalar) .. FTC_SHARD_MAX_DIMS */
    uint64_t shape[FTC_SHARD_MAX_DIMS];
    uint64_t offset;   /* from the start of the shard (not of the payload) */
    uint64_t length;   /* bytes = product(shape) * dtype size */
    uint64_t xxh3;     /* checksum of the bytes, set by seal */
    const uint8_t *data;
} ftc_shard_tensor_t;

/* ---- writing -------------------------------------------------------------- */

typedef struct ftc_shard_layout ftc_shard_layout_t;

/* A layout for the given identity (copied). NULL on out of memory. */
ftc_shard_layout_t *ftc_shard_layout_create(const ftc_shard_info_t *info);
void ftc_shard_layout_destroy(ftc_shard_layout_t *l); /* NULL is a no-op */
/* Adds a tensor; returns its index (>= 0) or an error (bad dtype, ndim,
 * duplicate name, overflowing size; FTC_ERANGE too when the tensors together
 * would pass 2^62 bytes, which their 64-bit offsets could wrap). shape may
 * be NULL when ndim is 0. */
int ftc_shard_layout_add_tensor(ftc_shard_layout_t *l, const char *name, int dtype, uint32_t ndim,
                                const uint64_t *shape, ftc_err_t *err);
/* Adds a metadata record; key is 1..255 bytes and unique. */
int ftc_shard_layout_add_meta(ftc_shard_layout_t *l, const char *key, const void *val, size_t len,
                              ftc_err_t *err);
/* Total bytes of the shard. */
uint64_t ftc_shard_layout_size(const ftc_shard_layout_t *l);
/* Offset of tensor i's bytes from the start of the shard. */
uint64_t ftc_shard_layout_offset(const ftc_shard_layout_t *l, uint32_t i);
uint32_t ftc_shard_layout_count(const ftc_shard_layout_t *l);
/* Offset of the value of metadata record key in a region written from l
 * (so a writer can update it in place each step); 0 when absent. */
uint64_t ftc_shard_layout_meta_offset(const ftc_shard_layout_t *l, const char *key);
/* Writes header, table, names, metadata and zero padding into region, which
 * must have ftc_shard_layout_size() bytes. The payload is left as it is. */
int ftc_shard_layout_write(const ftc_shard_layout_t *l, void *region, uint64_t size,
                           ftc_err_t *err);

/* Pointer to the bytes of tensor i inside a region written from l. */
static inline void *ftc_shard_payload_ptr(const ftc_shard_layout_t *l, void *region, uint32_t i)
{
    return (uint8_t *)region + ftc_shard_layout_offset(l, i);
}

/* Changes step and generation in a written region (before sealing again). */
void ftc_shard_restamp(void *region, uint64_t step, uint64_t generation);
/* Computes every tensor checksum and the footer of a region written by
 * ftc_shard_layout_write(). threads > 1 hashes tensors in parallel. */
int ftc_shard_seal(void *region, uint64_t size, int threads, ftc_err_t *err);
/* Sealing in pieces, for writers that hash each tensor as they copy it
 * (ckpt/snapshot.c): set every tensor's checksum (the xxh3 of its bytes,
 * which must equal ftc_xxh3 of the payload), then seal the head (footer with
 * the head checksum). The result is the same as ftc_shard_seal(). */
void ftc_shard_set_tensor_xxh3(void *region, uint32_t i, uint64_t xxh3);
int ftc_shard_seal_head(void *region, uint64_t size, ftc_err_t *err);

/* ---- reading -------------------------------------------------------------- */

enum {
    FTC_SHARD_VERIFY = 1u << 0,         /* also check every tensor's xxh3 */
    FTC_SHARD_ALLOW_TRAILING = 1u << 1, /* buf may be longer than the shard (a slot) */
};

typedef struct ftc_shard_view {
    const uint8_t *base;   /* start of the shard */
    uint64_t size;         /* total_size from the header (validated) */
    ftc_shard_info_t info; /* identity from the header */
    uint32_t n_tensors;
    uint64_t names_offset, names_size;
    uint64_t meta_offset, meta_size;
    uint64_t payload_offset, payload_size;
    uint64_t head_xxh3; /* checksum of [0, payload_offset) from the footer */
} ftc_shard_view_t;

/* Validates buf as a shard and fills v. Errors: FTC_ETRUNC (shorter than the
 * header says), FTC_ECORRUPT (a field or checksum is wrong), FTC_EVERSION; the
 * message names the field and byte offset. v points into buf afterwards. */
int ftc_shard_open(ftc_shard_view_t *v, const void *buf, size_t len, unsigned flags,
                   ftc_err_t *err);
/* Tensor i of an open view (i < n_tensors; already validated by open). */
void ftc_shard_get(const ftc_shard_view_t *v, uint32_t i, ftc_shard_tensor_t *t);
/* Index of the tensor with this name, or FTC_ENOENT. */
int ftc_shard_find(const ftc_shard_view_t *v, const char *name);
/* Checks tensor i's bytes against its checksum. */
int ftc_shard_verify_tensor(const ftc_shard_view_t *v, uint32_t i, ftc_err_t *err);
/* Checks every tensor; threads > 1 in parallel. */
int ftc_shard_verify(const ftc_shard_view_t *v, int threads, ftc_err_t *err);
/* Only the payload's alignment gaps (all zero), the part of ftc_shard_verify
 * that is not a tensor checksum: for bytes whose tensors were hashed as they
 * arrived (ckpt/replica.c). FTC_ECORRUPT naming the gap. */
int ftc_shard_verify_gaps(const ftc_shard_view_t *v, ftc_err_t *err);

/* Metadata: iterate with *pos = 0 until it returns 0 (end); 1 = a record. */
int ftc_shard_meta_next(const ftc_shard_view_t *v, uint64_t *pos, const char **key,
                        uint32_t *key_len, const uint8_t **val, uint32_t *val_len);
/* Looks a key up; FTC_ENOENT when absent. */
int ftc_shard_meta_get(const ftc_shard_view_t *v, const char *key, const uint8_t **val,
                       uint32_t *val_len);

/* For a shard still arriving in order (replication verifies each tensor as
 * soon as its bytes are in, ckpt/replica.c): the first have bytes of a shard
 * of total bytes are present. ftc_shard_peek_count sets *n to the number of
 * tensors once the whole table is present (FTC_EAGAIN before), FTC_ECORRUPT
 * when the table cannot fit. ftc_shard_peek_tensor reads entry i (i < *n)
 * and checks only that its bytes lie inside the payload area; the full
 * validation is still ftc_shard_open's, on the complete shard. */
int ftc_shard_peek_count(const void *buf, uint64_t have, uint64_t total, uint32_t *n);
int ftc_shard_peek_tensor(const void *buf, uint64_t total, uint32_t i, uint64_t *offset,
                          uint64_t *length, uint64_t *xxh3);

/* Sets *size to the total size a buffer starting with this header declares,
 * after checking magic and version (for readers that must size a read). */
int ftc_shard_peek_size(const void *buf, size_t len, uint64_t *size, ftc_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
