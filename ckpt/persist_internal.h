/*
 * persist_internal.h — internal entry points of the persist tier, for the
 * fuzz targets and tests. Not part of any public API.
 */
#ifndef FTC_CKPT_PERSIST_INTERNAL_H
#define FTC_CKPT_PERSIST_INTERNAL_H

#include "core/err.h"

#include <stddef.h>

/* Parses and validates a MANIFEST.json text of len bytes (not necessarily
 * NUL-terminated) exactly as ftc_persist_load does: types, required keys,
 * ranges, file names (only "shard-d<D>-t<T>-p<P>.ftcz" matching the shard's
 * coordinates), unique coordinates, delta bases before the step. Frees
 * everything it allocated. Returns 0 when valid, else FTC_ECORRUPT (or
 * FTC_ENOMEM) with the offending key in err. Thread-safe. */
int ftc__persist_manifest_check(const char *json, size_t len, ftc_err_t *err);
/* Test hook: called (when set) by ftc_persist_load(FTC_PERSIST_NEWEST)
 * between its scan of the directory and loading what it found, to
 * reproduce another writer's retention removing a version there. NULL in
 * production; set it before any load runs and reset it after. */
extern void (*ftc__persist_scan_hook)(void *arg);
extern void *ftc__persist_scan_hook_arg;

#endif
