/*
 * filestore_internal.h — the parsers of the records the file store of
 * another node (or of this node's previous process) wrote: in Redis a
 * version's record (ftc:{J}:files) with its holder list, its owner field, a
 * peer's address (ftc:{J}:filefab), and in a version the tombstones
 * (FS_META_GONE). Pure functions, exposed only for tests/fuzz/fuzz_filestore.c
 * and the unit tests: nothing outside plugins/filestore.c calls them.
 */
#ifndef FTC_PLUGINS_FILESTORE_INTERNAL_H
#define FTC_PLUGINS_FILESTORE_INTERNAL_H

#include "core/fabric.h"
#include "detect/control.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FTC__FS_MAX_NODES 1024 /* node indices 0..1023 */

typedef struct ftc__fs_stamp { /* a file seen, or a tombstone (a deleted copy) */
    char *name;
    uint64_t mtime_ns;
    uint64_t gone_ns;  /* a tombstone: when it was made (its node's wall clock, ns); the
                          cap drops the oldest deletions by it */
    uint64_t size;     /* a tombstone: the deleted copy's size (hashed or sized), xxh3 (hashed) */
    uint64_t xxh3;
    uint64_t ctime_ns; /* a file seen: its ctime; a tombstone: the ctime of the local file
                          of its name and mtime last found to be another copy (0: none) */
    bool hashed;
    bool sized; /* a tombstone: its size alone is known (never with hashed) */
    bool newer; /* (restore) the union holds a newer copy: the deletion is undone */
} ftc__fs_stamp_t;

typedef struct ftc__fs_stamps { /* sorted by name, each name once */
    ftc__fs_stamp_t *e;
    size_t n, cap;
} ftc__fs_stamps_t;

/* A version's record "VERSION SIZE GEN [HOLDERS]" (fs_record writes it):
 * three whole decimal numbers and the holder list, one word, nothing after.
 * 0; -1 when it is not one (or out of memory); -2 when its holder list is
 * longer than any this store writes. holders, when not NULL, gets a
 * malloc'd copy of the list ("" when none). */
int ftc__fs_rec_parse(const char *v, size_t vl, uint64_t *version, uint64_t *size, uint64_t *gen,
                      char **holders);

/* The next entry "INDEX:ID" of a holder list "INDEX:ID,INDEX:ID,..." at *p:
 * 1 with *index (< FTC__FS_MAX_NODES, all digits) and id (1 to
 * FTC_CTL_NODE_MAX bytes, id_cap > FTC_CTL_NODE_MAX); -1 for an entry that
 * is not one (*p is past it all the same: the caller skips it); 0 at the
 * end of the list. */
int ftc__fs_holder_next(const char **p, uint32_t *index, char *id, size_t id_cap);

/* A node index field (ftc:{J}:files, ftc:{J}:filefab): all digits, below
 * FTC__FS_MAX_NODES, no NUL in its fl bytes. */
bool ftc__fs_index_parse(const char *f, size_t fl, uint32_t *index);

/* A peer's address value "HEXADDR NODE_ID" in ftc:{J}:filefab
 * (fs_publish writes it): false unless it is exactly that, addr getting
 * *addr_len bytes and hex the digits as written. */
bool ftc__fs_filefab_parse(const char *v, char *hex, size_t hex_cap, uint8_t *addr,
                           size_t *addr_len, char *node_id, size_t id_cap);

/* The two forms of a version's tombstones, sorted by name, each name once,
 * little-endian:
 *   1, metadata "ftc.gone" (older ftc): per entry u32 name_len, name,
 *      u64 mtime_ns; read with gone_ns = mtime_ns (a deletion comes after
 *      the copy's last write), not hashed;
 *   2, metadata "ftc.gone.v2" (written now): per entry u32 name_len, name,
 *      u64 mtime_ns, u64 gone_ns, u64 size, u64 xxh3, u32 flags: 1, size and
 *      xxh3 name the deleted copy; 2, size alone does (xxh3 0); 0, neither
 *      (both 0: an ftc before size-only tombstones); no other value. */
#define FTC__FS_GONE_V1 1
#define FTC__FS_GONE_V2 2
/* The tombstones of record m of form version (FTC__FS_GONE_V1 or _V2):
 * appended to out; 0, FTC_ENOMEM, or FTC_ECORRUPT with why (nothing of it
 * kept). */
int ftc__fs_gone_parse(const uint8_t *m, uint32_t ml, int version, ftc__fs_stamps_t *out,
                       char *why, size_t cap);
/* The record (form 2) of the sorted set s (malloc'd, *len bytes); NULL when out of memory. */
uint8_t *ftc__fs_gone_record(const ftc__fs_stamps_t *s, size_t *len);
/* Keeps the newest deletions (by gone_ns, then mtime_ns) of the sorted set
 * s, at most max_n whose form-2 record fits max_bytes; s stays sorted by
 * name. Returns how many were dropped. */
size_t ftc__fs_gone_bound(ftc__fs_stamps_t *s, size_t max_n, size_t max_bytes);
void ftc__fs_stamps_free(ftc__fs_stamps_t *s);

/* A directory entry name that is a temporary of the store's own making,
 * left by a store process that may have died before removing it: exactly
 * ".ftc-tmp.PID.N" (a restore's file being written) or
 * ".ftc-tmp.gone.PID.N" (a deleted copy moved aside to be removed), PID
 * 1..INT_MAX and N 0..UINT32_MAX, whole decimal numbers without leading
 * zeros. true with *pid; false for any other name (".ftc-tmp.open", the
 * files moved aside after a crash ".ftc-tmp.crashed.*", a user's
 * ".ftc-tmp.notes"). */
bool ftc__fs_tmp_leftover(const char *name, int *pid);

#endif
