/*
 * client_internal.h — test hooks of the checkpoint context (ckpt/client.c)
 * that include/ftc.h does not show: for tests and the reference trainer's
 * test options only, never for a trainer's production path.
 */
#ifndef FTC_CKPT_CLIENT_INTERNAL_H
#define FTC_CKPT_CLIENT_INTERNAL_H

#include "ckpt/snapshot.h"
#include "ftc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replaces the device copy ops of ctx's snapshot engine
 * (ftc_snap_set_device_ops): a stand-in device whose copies can be made to
 * fail (tests/ckpt/fake_device.h). Before the first device tensor is
 * registered. 0; FTC_EINVAL on a NULL or unconnected context or after a
 * device tensor (the message in ftc_last_error). The context's thread only. */
int ftc__set_device_ops(ftc_ctx_t *ctx, const ftc_snap_device_ops_t *ops);

#ifdef __cplusplus
}
#endif
#endif
