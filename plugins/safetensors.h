/*
 * safetensors.h — export of shards to the safetensors format
 * (https://github.com/huggingface/safetensors: an 8-byte little-endian header
 * length, a JSON header mapping each tensor name to dtype, shape and
 * [begin, end) data offsets plus a "__metadata__" map of strings, then the
 * data), so that Python's safetensors / PyTorch load an ftc checkpoint.
 *
 * Tensors keep their names; when several shards are exported into one file,
 * each name is prefixed with the shard's coordinates ("d0.t1.p0/"). The
 * metadata carries job, step, generation and layout, and each user metadata
 * record as "meta.<key>" (hex of the value bytes).
 *
 * Thread-safe: no shared state.
 */
#ifndef FTC_PLUGINS_SAFETENSORS_H
#define FTC_PLUGINS_SAFETENSORS_H

#include "ckpt/shard.h"
#include "core/err.h"
#include "core/fsio.h"

/* Writes the tensors of n open shard views into path (atomically: temp,
 * fsync, rename). Returns 0 or an error naming what failed. */
int ftc_safetensors_export(const ftc_shard_view_t *views, int n, const char *path,
                           ftc_fault_t *fault, ftc_err_t *err);

#endif
