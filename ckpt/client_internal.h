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

/* Holds (hold true) or lets go the seal of ctx's snapshots
 * (ftc__snap_hold_seal): a snapshot copied while held stays unsealed, as
 * one whose seal outlasts the deadlines would. 0; FTC_EINVAL on a NULL or
 * unconnected context. Any thread. */
int ftc__hold_seal(ftc_ctx_t *ctx, bool hold);
/* Holds (hold true) or lets go the notifier before it sends SEALED, as a
 * send to an agent that reads nothing would block: a held send ends when let
 * go or, failing, at the end of the notifier's budget for it. 0; FTC_EINVAL
 * on a NULL or unconnected context. Any thread. */
int ftc__hold_notify(ftc_ctx_t *ctx, bool hold);

#ifdef __cplusplus
}
#endif
#endif
