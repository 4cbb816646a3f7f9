/*
 * zshard.h — internal: encoding a shard into the compressed .ftcz format.
 *
 * Decoding and header inspection are public (ckpt/persist.h:
 * ftc_zshard_info, ftc_zshard_decode). Encoding is internal to the persist
 * tier and bench/persist, which measures compression without touching disk.
 * The byte-level format is in docs/persist-format.md.
 */
#ifndef FTC_CKPT_ZSHARD_H
#define FTC_CKPT_ZSHARD_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The newest format version written. An encoder writes version 1 (readable
 * by every build) unless the file needs a version-2 feature: a filter (byte
 * shuffle or bitshuffle) or a chunk stored without zstd. Decoders read 1
 * and 2. */
#define FTC_ZSHARD_VERSION 2
#define FTC_ZSHARD_VERSION_MIN 1
#define FTC_ZSHARD_HEADER_SIZE 128
#define FTC_ZSHARD_ENTRY_SIZE 48
#define FTC_ZSHARD_FOOTER_SIZE 32
#define FTC_ZSHARD_MIN_CHUNK 4096ull
#define FTC_ZSHARD_MAX_CHUNK (1ull << 31)
#define FTC_ZSHARD_FLAG_SHUFFLE 1u
#define FTC_ZSHARD_FLAG_DELTA 2u
#define FTC_ZSHARD_FLAG_BITSHUFFLE 4u /* version 2 */
/* Chunk table entry flags (the entry's bytes 36..39; version 2). */
#define FTC_ZSHARD_CHUNK_STORED 1u /* no zstd frame: the filtered bytes as they are */
/* A bitshuffled chunk's payload opens with two 64-bit plane masks. */
#define FTC_ZSHARD_PLANE_HEAD 16

/* Encodes a sealed shard (raw, raw_size bytes; it must open as a shard) into
 * a malloc'd .ftcz buffer (*out, *out_len; the caller frees *out).
 *
 * base: NULL for a full file; otherwise the raw base shard (base_size must
 * equal raw_size) that this shard is XOR'd against, and base_step its step.
 * level: zstd level (ZSTD_minCLevel()..ZSTD_maxCLevel()). filter: what is done
 * to each tensor's elements before zstd (ftc_zshard_filter_t in persist.h:
 * FTC_ZSHARD_FILTER_NONE, _BYTE = byte shuffle by the dtype width, _BIT =
 * bit-plane shuffle, with incompressible planes stored raw). chunk_bytes: uncompressed bytes per
 * chunk, FTC_ZSHARD_MIN_CHUNK..FTC_ZSHARD_MAX_CHUNK. threads: compression
 * threads, 0 = one per online core.
 *
 * Chunks whose zstd frame would keep 98% or more of their bytes are stored
 * raw instead (decoding them costs a copy, not a zstd pass).
 *
 * Returns 0, FTC_EINVAL (bad argument or raw is not a shard), FTC_ENOMEM or
 * FTC_EIO (zstd failed), with a message in err. Thread-safe (no shared state).
 */
int ftc_zshard_encode(const void *raw, uint64_t raw_size, const void *base, uint64_t base_size,
                      uint64_t base_step, int level, int filter, uint64_t chunk_bytes,
                      int threads, uint8_t **out, size_t *out_len, ftc_err_t *err);

#endif
