/*
 * hash.h — checksums. xxh3-64 (libxxhash) covers every byte ftc stores or
 * sends; it runs at memory speed (about 19 GB/s here), so it is always on.
 */
#ifndef FTC_CORE_HASH_H
#define FTC_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t ftc_xxh3(const void *data, size_t len);

/* Streaming form, for data that arrives in pieces. Not thread-safe per state. */
typedef struct ftc_hash ftc_hash_t;
ftc_hash_t *ftc_hash_create(void); /* NULL on out of memory */
void ftc_hash_destroy(ftc_hash_t *h); /* NULL is a no-op */
void ftc_hash_reset(ftc_hash_t *h);
void ftc_hash_update(ftc_hash_t *h, const void *data, size_t len);
uint64_t ftc_hash_digest(const ftc_hash_t *h);

/* "%016llx" text form used in manifests and CLI output; buf holds 17 bytes. */
void ftc_hash_hex(uint64_t h, char buf[17]);
/* Parses 16 hex digits; 0 on success, FTC_EINVAL otherwise. */
int ftc_hash_parse_hex(const char *s, uint64_t *out);

#endif
