/*
 * test_snapshot.c — snapshots of host tensors into a shm slot: the copy
 * equals the tensors at begin() even when the trainer overwrites them right
 * after wait_copy(); the sealed region verifies; metadata round-trips;
 * restore fills the registered tensors; double begin is refused; a layout
 * mismatch on restore names the tensor; device tensors are refused in a
 * build without CUDA.
 */
#include "ftc_test.h"

#include "ckpt/slot.h"
#include "ckpt/snapshot.h"

static void test_snapshot_round_trip(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 1);
    ftc_snap_t *s = ftc_snap_create(&in, 3, 256, &err);
    assert_non_null(s);
    /* one big tensor (several 4 MiB pieces), a few small ones, an empty one */
    uint64_t nbig = (20u << 20) / 4 + 3, nsmall = 1000;
    float *big = malloc(nbig * 4);
    int64_t *small = malloc(nsmall * 8);
    uint16_t scalar = 7;
    ftc_test_fill(big, nbig * 4, 1);
    ftc_test_fill(small, nsmall * 8, 2);
    uint64_t sh_big[1] = {nbig}, sh_small[2] = {10, 100}, sh_empty[1] = {0};
    assert_int_equal(ftc_snap_add(s, "big", FTC_DTYPE_F32, 1, sh_big, big, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(ftc_snap_add(s, "small", FTC_DTYPE_I64, 2, sh_small, small, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(ftc_snap_add(s, "scalar", FTC_DTYPE_BF16, 0, NULL, &scalar, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(ftc_snap_add(s, "empty", FTC_DTYPE_F32, 1, sh_empty, NULL, FTC_SNAP_HOST, &err), 0);
    if (ftc_snap_cuda_ops() == NULL)
        assert_int_equal(ftc_snap_add(s, "dev", FTC_DTYPE_F32, 1, sh_small, big, 0, &err),
                         FTC_EUNSUPPORTED);
    uint64_t size = ftc_snap_size(s);
    assert_true(size > nbig * 4);
    assert_int_equal(ftc_snap_add(s, "late", FTC_DTYPE_F32, 1, sh_small, big, FTC_SNAP_HOST, &err),
                     FTC_EINVAL);
    char name[FTC_SLOT_NAME_MAX];
    snprintf(name, sizeof name, "ftc.snaptest-%d.r1.s0", (int)getpid());
    ftc_slot_t slot;
    assert_int_equal(ftc_slot_create(name, size, &slot, &err), 0);
    assert_int_equal(ftc_snap_format(s, slot.base, &err), 0);
    float *want = malloc(nbig * 4);
    for (int step = 1; step <= 3; step++) {
        ftc_test_fill(big, nbig * 4, 10 + (uint64_t)step);
        memcpy(want, big, nbig * 4);
        char meta[64];
        int ml = snprintf(meta, sizeof meta, "cursor=%d", step * 100);
        assert_int_equal(ftc_snap_begin(s, slot.base, (uint64_t)step, 3, meta, (uint32_t)ml, &err), 0);
        /* a second begin while the first runs is refused; on a loaded machine the
         * first may already be sealed, and then the second is a legitimate new
         * snapshot of the same state */
        int again = ftc_snap_begin(s, slot.base, (uint64_t)step, 3, meta, (uint32_t)ml, &err);
        assert_true(again == FTC_EAGAIN || again == 0);
        assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(30000), &err), 0);
        /* the optimizer writes the tensors again: the snapshot must not see it */
        memset(big, 0xEE, nbig * 4);
        assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
        assert_false(ftc_snap_busy(s));
        ftc_shard_view_t v;
        assert_int_equal(ftc_shard_open(&v, slot.base, size, FTC_SHARD_VERIFY, &err), 0);
        /* sealed by the copy threads: byte for byte what ftc_shard_seal makes */
        uint8_t *again_sealed = malloc(size);
        memcpy(again_sealed, slot.base, size);
        assert_int_equal(ftc_shard_seal(again_sealed, size, 2, &err), 0);
        assert_memory_equal(again_sealed, slot.base, size);
        free(again_sealed);
        assert_int_equal(v.info.step, step);
        assert_int_equal(v.info.generation, 3);
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, 0, &t);
        assert_memory_equal(t.data, want, nbig * 4);
        /* restore into the registered tensors */
        memset(small, 0, nsmall * 8);
        scalar = 0;
        uint64_t got_step;
        char got_meta[64];
        uint32_t got_len = sizeof got_meta;
        assert_int_equal(ftc_snap_restore(s, slot.base, size, &got_step, got_meta, &got_len, &err), 0);
        assert_int_equal(got_step, step);
        assert_int_equal(got_len, ml);
        assert_memory_equal(got_meta, meta, (size_t)ml);
        assert_memory_equal(big, want, nbig * 4);
        assert_int_equal(scalar, 7);
    }
    /* a corrupt region is refused by restore */
    slot.base[size / 2] ^= 1;
    uint64_t st;
    assert_int_equal(ftc_snap_restore(s, slot.base, size, &st, NULL, NULL, &err), FTC_ECORRUPT);
    ftc_slot_close(&slot);
    ftc_slot_unlink(name, &err);
    ftc_snap_destroy(s);
    ftc_snap_destroy(NULL);
    free(big);
    free(small);
    free(want);
}

static void test_restore_layout_mismatch(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    float a[16] = {0}, b[32] = {0}; /* (valgrind: no uninitialised bytes hashed) */
    uint64_t s16[1] = {16}, s32[1] = {32};
    ftc_snap_t *s1 = ftc_snap_create(&in, 1, 0, &err);
    assert_int_equal(ftc_snap_add(s1, "w", FTC_DTYPE_F32, 1, s16, a, FTC_SNAP_HOST, &err), 0);
    uint64_t size = ftc_snap_size(s1);
    uint8_t *region = malloc(size);
    assert_int_equal(ftc_snap_format(s1, region, &err), 0);
    assert_int_equal(ftc_snap_begin(s1, region, 5, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s1, FTC_DEADLINE_NONE, &err), 0);
    ftc_snap_t *s2 = ftc_snap_create(&in, 1, 0, &err);
    assert_int_equal(ftc_snap_add(s2, "w", FTC_DTYPE_F32, 1, s32, b, FTC_SNAP_HOST, &err), 0);
    uint64_t st;
    assert_int_equal(ftc_snap_restore(s2, region, size, &st, NULL, NULL, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "tensor 'w'"));
    ftc_snap_destroy(s1);
    ftc_snap_destroy(s2);
    free(region);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_restore_layout_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
