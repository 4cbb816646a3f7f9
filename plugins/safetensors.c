/* safetensors.c — placeholder replaced by the export implementation. */
#include "plugins/safetensors.h"

int ftc_safetensors_export(const ftc_shard_view_t *views, int n, const char *path,
                           ftc_fault_t *fault, ftc_err_t *err)
{
    (void)views, (void)n, (void)fault;
    return ftc_err_set(err, FTC_EUNSUPPORTED, "%s: safetensors export is not built yet", path);
}
