/* coll_nccl_none.c — trainer/coll_nccl.h for builds without NCCL: the
 * rendezvous (coll_nccl_boot.c) works, the backend says it is absent. */
#include "trainer/coll_nccl.h"

bool ftc_coll_nccl_built(void) { return false; }

int ftc_coll_nccl_create(int rank, int size, int cuda_device, const ftc_coll_nccl_boot_t *boot,
                         ftc_deadline_t dl, ftc_coll_t **out, ftc_err_t *err)
{
    (void)boot, (void)dl;
    if (out)
        *out = NULL;
    return ftc_err_set(err, FTC_EUNSUPPORTED,
                       "coll nccl create rank %d/%d on device %d: this build of ftc has no NCCL "
                       "(reconfigure with -DFTC_WITH_CUDA=ON -DFTC_WITH_NCCL=ON where CUDA and "
                       "NCCL are installed, or use the CPU backend ftc_coll_cpu_create)",
                       rank, size, cuda_device);
}

int ftc_coll_nccl_shrink(ftc_coll_t *c, const int *excluded, int nexcluded, ftc_deadline_t dl,
                         ftc_coll_t **out, ftc_err_t *err)
{
    (void)c, (void)excluded, (void)nexcluded, (void)dl;
    if (out)
        *out = NULL;
    return ftc_err_set(err, FTC_EUNSUPPORTED,
                       "coll nccl shrink: this build of ftc has no NCCL (no NCCL communicator "
                       "can exist to shrink)");
}

int ftc_coll_nccl_unique_id(uint8_t id[FTC_COLL_NCCL_ID_BYTES], ftc_err_t *err)
{
    (void)id;
    return ftc_err_set(err, FTC_EUNSUPPORTED, "coll nccl unique id: this build of ftc has no NCCL");
}
