/* snapshot_nocuda.c — a build without CUDA has no device copy ops. */
#include "ckpt/snapshot.h"

const ftc_snap_device_ops_t *ftc_snap_cuda_ops(void) { return NULL; }
