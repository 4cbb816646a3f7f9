/*
 * test_snapshot.c — snapshots of host tensors into a shm slot: the copy
 * equals the tensors at begin() even when the trainer overwrites them right
 * after wait_copy(); the sealed region verifies; metadata round-trips;
 * restore fills the registered tensors; double begin is refused; a layout
 * mismatch on restore names the tensor; device tensors are refused in a
 * build without CUDA. The engine's device path (begin -> async copies ->
 * sync before "copied" -> hashes from the slot -> seal; restore; pinning of
 * each slot; a failed copy; a failed sync) runs against a stand-in device whose copies land
 * late, on a thread of their own (tests/ckpt/fake_device.h, shared with the
 * libftc and trainer tests; the CUDA ops themselves need a GPU:
 * test_trainer_kernels_cuda, label gpu).
 */
#include "ftc_test.h"

#include "ckpt/fake_device.h"
#include "ckpt/slot.h"
#include "ckpt/snapshot.h"

#include <pthread.h>
#include <unistd.h>

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
    assert_int_equal(
        ftc_snap_add(s, "small", FTC_DTYPE_I64, 2, sh_small, small, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(
        ftc_snap_add(s, "scalar", FTC_DTYPE_BF16, 0, NULL, &scalar, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(
        ftc_snap_add(s, "empty", FTC_DTYPE_F32, 1, sh_empty, NULL, FTC_SNAP_HOST, &err), 0);
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
        assert_int_equal(ftc_snap_begin(s, slot.base, (uint64_t)step, 3, meta, (uint32_t)ml, &err),
                         0);
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
        assert_int_equal(ftc_snap_restore(s, slot.base, size, &got_step, got_meta, &got_len, &err),
                         0);
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

/* Device tensors on two stand-in devices and one host tensor, snapshotted
 * into two slots taking turns: wait_copy returns only once the late device
 * copies have landed (the tensors are overwritten right after it and the
 * slot still holds the values of begin), the seal's checksums cover the
 * device bytes, each slot is pinned once and unpinned at destroy, and a
 * restore fills the device tensors before it returns. */
static void test_device_path(void **state)
{
    (void)state;
    fd_reset();
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 2, 64, &err);
    assert_non_null(s);
    assert_int_equal(ftc_snap_set_device_ops(s, fake_dev_ops(), &err), 0);
    enum { NW = 300000, NB = 1000, NH = 5000 };
    float *w = malloc(NW * 4), *h = malloc(NH * 4);
    int64_t *b = malloc(NB * 8);
    uint64_t sw[1] = {NW}, sb[1] = {NB}, sh[1] = {NH};
    assert_int_equal(ftc_snap_add(s, "dev0.w", FTC_DTYPE_F32, 1, sw, w, 0, &err), 0);
    assert_int_equal(ftc_snap_add(s, "host.h", FTC_DTYPE_F32, 1, sh, h, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(ftc_snap_add(s, "dev1.b", FTC_DTYPE_I64, 1, sb, b, 1, &err), 0);
    assert_int_equal(FD.opened, 1);
    /* too late for other ops once a device tensor is registered */
    assert_int_equal(ftc_snap_set_device_ops(s, NULL, &err), FTC_EINVAL);
    uint64_t size = ftc_snap_size(s);
    uint8_t *slot[2] = {calloc(1, size), calloc(1, size)};
    for (int k = 0; k < 2; k++)
        assert_int_equal(ftc_snap_format(s, slot[k], &err), 0);
    assert_int_equal(ftc_snap_format(s, slot[0], &err), 0); /* again: pinned once */
    assert_int_equal(FD.npinned, 2);
    for (int step = 1; step <= 4; step++) {
        uint8_t *r = slot[step % 2];
        ftc_test_fill(w, NW * 4, 100 + step);
        ftc_test_fill(h, NH * 4, 200 + step);
        ftc_test_fill(b, NB * 8, 300 + step);
        uint64_t cursor = (uint64_t)step * 7;
        assert_int_equal(ftc_snap_begin(s, r, (uint64_t)step, 1, &cursor, 8, &err), 0);
        assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(30000), &err), 0);
        assert_int_equal(fake_pending(), 0); /* copied means the device's copies landed */
        ftc_test_fill(w, NW * 4, 999); /* the trainer writes its tensors again */
        ftc_test_fill(b, NB * 8, 998);
        assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
        ftc_shard_view_t v;
        assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
        assert_int_equal(v.info.step, (uint64_t)step);
        float *want_w = malloc(NW * 4);
        int64_t *want_b = malloc(NB * 8);
        ftc_test_fill(want_w, NW * 4, 100 + step);
        ftc_test_fill(want_b, NB * 8, 300 + step);
        for (uint32_t i = 0; i < v.n_tensors; i++) {
            ftc_shard_tensor_t t;
            ftc_shard_get(&v, i, &t);
            if (t.name_len == 6 && !memcmp(t.name, "dev0.w", 6))
                assert_memory_equal(t.data, want_w, NW * 4);
            if (t.name_len == 6 && !memcmp(t.name, "dev1.b", 6))
                assert_memory_equal(t.data, want_b, NB * 8);
        }
        /* restore the step just sealed: the device tensors are filled when
         * the call returns (no copy still in flight) */
        memset(w, 0, NW * 4);
        memset(b, 0, NB * 8);
        memset(h, 0, NH * 4);
        uint64_t got = 0, c2 = 0;
        uint32_t ml = 8;
        assert_int_equal(ftc_snap_restore(s, r, size, &got, &c2, &ml, &err), 0);
        assert_int_equal(fake_pending(), 0);
        assert_int_equal(got, (uint64_t)step);
        assert_int_equal(c2, cursor);
        assert_memory_equal(w, want_w, NW * 4);
        assert_memory_equal(b, want_b, NB * 8);
        float *want_h = malloc(NH * 4);
        ftc_test_fill(want_h, NH * 4, 200 + step);
        assert_memory_equal(h, want_h, NH * 4);
        free(want_w);
        free(want_b);
        free(want_h);
    }
    assert_int_equal(FD.npinned, 2);
    /* a device copy that fails at begin: the error says so, the copies
     * already started have landed when begin returns (none still writes the
     * slot), and the slot of the last sealed step (4, slot 0) is untouched */
    FD.fail_at = FD.copies + 2;
    assert_int_equal(ftc_snap_begin(s, slot[1], 5, 1, NULL, 0, &err), FTC_EIO);
    assert_non_null(strstr(err.msg, "fake device: copy"));
    assert_int_equal(fake_pending(), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, slot[0], size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.info.step, 4);
    /* the failure is not sticky: once the device copies again, the next
     * checkpoint works */
    FD.fail_at = 0;
    ftc_test_fill(w, NW * 4, 106);
    /* what ftc_checkpoint does first: wait for the previous copy (none) */
    assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(30000), &err), 0);
    assert_int_equal(ftc_snap_begin(s, slot[1], 6, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    assert_int_equal(ftc_shard_open(&v, slot[1], size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.info.step, 6);
    ftc_snap_destroy(s);
    assert_int_equal(FD.unpinned, 2); /* every slot unpinned before the caller frees it */
    assert_int_equal(FD.closed, 1);
    free(slot[0]);
    free(slot[1]);
    free(w);
    free(h);
    free(b);
    fd_done();
}

/* A device sync that fails while the copy threads still hash the host
 * tensors: the failure is reported only once every copy thread is out of
 * the snapshot (until then they write the region's table, and a caller that
 * has the error may begin the next snapshot into it or unmap it). */
static void test_failed_sync_waits_for_copy_threads(void **state)
{
    (void)state;
    fd_reset();
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 1, 0, &err); /* one thread hashes them all */
    assert_non_null(s);
    assert_int_equal(ftc_snap_set_device_ops(s, fake_dev_ops(), &err), 0);
    enum { NH = 4, N = (16u << 20) / 4 };
    float *h[NH];
    uint64_t sh[1] = {N}, sd[1] = {16};
    float dev[16] = {0};
    for (int i = 0; i < NH; i++) {
        h[i] = malloc((size_t)N * 4);
        ftc_test_fill(h[i], (size_t)N * 4, 40 + (uint64_t)i);
        char name[16];
        snprintf(name, sizeof name, "h%d", i);
        assert_int_equal(ftc_snap_add(s, name, FTC_DTYPE_F32, 1, sh, h[i], FTC_SNAP_HOST, &err), 0);
    }
    assert_int_equal(ftc_snap_add(s, "dev", FTC_DTYPE_F32, 1, sd, dev, 0, &err), 0);
    uint64_t size = ftc_snap_size(s);
    uint8_t *region = calloc(1, size), *copy = malloc(size);
    assert_int_equal(ftc_snap_format(s, region, &err), 0);
    FD.fail_sync = true;
    assert_int_equal(ftc_snap_begin(s, region, 1, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_copy(s, ftc_deadline_in_ms(30000), &err), FTC_EIO);
    /* the table as the error found it: every host tensor's checksum is in
     * it already (no copy thread still works on the region) */
    uint8_t table[FTC_SHARD_HEADER_SIZE + NH * FTC_SHARD_ENTRY_SIZE];
    memcpy(table, region, sizeof table);
    assert_non_null(strstr(err.msg, "fake device: sync failed"));
    assert_false(ftc_snap_busy(s));
    memcpy(copy, region, size);
    assert_int_equal(ftc_shard_seal(copy, size, 1, &err), 0);
    for (int i = 0; i < NH; i++) {
        uint64_t at = FTC_SHARD_HEADER_SIZE + (uint64_t)i * FTC_SHARD_ENTRY_SIZE + 16;
        assert_memory_equal(table + at, copy + at, 8);
    }
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), FTC_EIO);
    /* the next snapshot works once the device does */
    FD.fail_sync = false;
    assert_int_equal(ftc_snap_begin(s, region, 2, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, region, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.info.step, 2);
    ftc_snap_destroy(s);
    for (int i = 0; i < NH; i++)
        free(h[i]);
    free(region);
    free(copy);
    fd_done();
}

/* A snapshot of the step (and generation) the region already holds, e.g. a
 * retried checkpoint into the same slot: while it copies, the region is not
 * a valid shard (the header and the old footer and head checksum would all
 * still match, over tensors half old and half new); once sealed it is. */
static void test_resnapshot_invalid_while_copying(void **state)
{
    (void)state;
    fd_reset();
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 2, 16, &err);
    assert_non_null(s);
    assert_int_equal(ftc_snap_set_device_ops(s, fake_dev_ops(), &err), 0);
    enum { NW = 100000 };
    float *w = malloc(NW * 4);
    uint64_t sw[1] = {NW};
    /* a device tensor alone: nothing rewrites the table before the seal */
    assert_int_equal(ftc_snap_add(s, "dev.w", FTC_DTYPE_F32, 1, sw, w, 0, &err), 0);
    uint64_t size = ftc_snap_size(s);
    uint8_t *region = calloc(1, size);
    assert_int_equal(ftc_snap_format(s, region, &err), 0);
    ftc_test_fill(w, NW * 4, 1);
    assert_int_equal(ftc_snap_begin(s, region, 7, 2, "m", 1, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, region, size, FTC_SHARD_VERIFY, &err), 0);
    /* the same step again, the device's sync held back: the copy lands,
     * but the snapshot is not sealed */
    ftc_test_fill(w, NW * 4, 3);
    fake_set_hold(true);
    assert_int_equal(ftc_snap_begin(s, region, 7, 2, "m", 1, &err), 0);
    assert_true(ftc_snap_busy(s));
    assert_int_not_equal(ftc_shard_open(&v, region, size, 0, &err), 0);
    fake_set_hold(false);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    assert_int_equal(ftc_shard_open(&v, region, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.info.step, 7);
    ftc_snap_destroy(s);
    free(region);
    free(w);
    fd_done();
}

/* A restore refuses a checkpoint whose tensors differ from the registered
 * ones by name, dtype or shape even when every length matches (tensors
 * registered in another order, a dtype changed to one of the same width, a
 * reshape), naming the first tensor that differs; nothing is written. */
static void test_restore_names_dtypes_shapes(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    float a[16], b[16];
    ftc_test_fill(a, sizeof a, 1);
    ftc_test_fill(b, sizeof b, 2);
    uint64_t s16[1] = {16}, s44[2] = {4, 4};
    ftc_snap_t *s1 = ftc_snap_create(&in, 1, 0, &err);
    assert_int_equal(ftc_snap_add(s1, "a", FTC_DTYPE_F32, 1, s16, a, FTC_SNAP_HOST, &err), 0);
    assert_int_equal(ftc_snap_add(s1, "b", FTC_DTYPE_F32, 1, s16, b, FTC_SNAP_HOST, &err), 0);
    uint64_t size = ftc_snap_size(s1);
    uint8_t *region = malloc(size);
    assert_int_equal(ftc_snap_format(s1, region, &err), 0);
    assert_int_equal(ftc_snap_begin(s1, region, 5, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s1, FTC_DEADLINE_NONE, &err), 0);
    struct {
        const char *n0, *n1;
        int dt0;
        uint32_t nd0;
        const uint64_t *sh0;
        const char *named;
    } cases[] = {
        {"b", "a", FTC_DTYPE_F32, 1, s16, "tensor 'b'"}, /* another order */
        {"a", "b", FTC_DTYPE_I32, 1, s16, "tensor 'a'"}, /* a dtype of the same width */
        {"a", "b", FTC_DTYPE_F32, 2, s44, "tensor 'a'"}, /* a reshape */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float x[16] = {0}, y[16] = {0};
        ftc_snap_t *s2 = ftc_snap_create(&in, 1, 0, &err);
        assert_int_equal(ftc_snap_add(s2, cases[k].n0, cases[k].dt0, cases[k].nd0, cases[k].sh0, x,
                                      FTC_SNAP_HOST, &err), 0);
        assert_int_equal(ftc_snap_add(s2, cases[k].n1, FTC_DTYPE_F32, 1, s16, y, FTC_SNAP_HOST,
                                      &err), 0);
        uint64_t st = 0;
        ftc_err_clear(&err);
        assert_int_equal(ftc_snap_restore(s2, region, size, &st, NULL, NULL, &err), FTC_EINVAL);
        assert_non_null(strstr(err.msg, cases[k].named));
        float zero[16] = {0};
        assert_memory_equal(x, zero, sizeof zero);
        assert_memory_equal(y, zero, sizeof zero);
        ftc_snap_destroy(s2);
    }
    ftc_snap_destroy(s1);
    free(region);
}

/* A device tensor refused because the device ops cannot open (no usable
 * device) leaves nothing behind: the trainer registers the same tensor as a
 * host tensor instead, and the checkpoint holds exactly the registered
 * tensors, so it restores. */
static void test_add_refused_leaves_no_tensor(void **state)
{
    (void)state;
    fd_reset();
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 1, 0, &err);
    assert_int_equal(ftc_snap_set_device_ops(s, fake_dev_ops(), &err), 0);
    FD.fail_open = true;
    float w[16];
    ftc_test_fill(w, sizeof w, 5);
    uint64_t s16[1] = {16};
    assert_int_equal(ftc_snap_add(s, "w", FTC_DTYPE_F32, 1, s16, w, 0, &err), FTC_EUNSUPPORTED);
    assert_int_equal(ftc_snap_add(s, "w", FTC_DTYPE_F32, 1, s16, w, FTC_SNAP_HOST, &err), 0);
    uint64_t size = ftc_snap_size(s);
    uint8_t *region = malloc(size);
    assert_int_equal(ftc_snap_format(s, region, &err), 0);
    assert_int_equal(ftc_snap_begin(s, region, 3, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, region, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.n_tensors, 1);
    memset(w, 0, sizeof w);
    uint64_t st = 0;
    assert_int_equal(ftc_snap_restore(s, region, size, &st, NULL, NULL, &err), 0);
    float want[16];
    ftc_test_fill(want, sizeof want, 5);
    assert_memory_equal(w, want, sizeof want);
    ftc_snap_destroy(s);
    free(region);
    fd_done();
}

/* A host tensor of 2^61 bytes (a shape gone wrong): within the shard's
 * limits, but its 2^39 pieces of 4 MiB wrapped the engine's 32-bit piece
 * count to 0, and ftc_snap_size wrote 2^39 pieces into a table of one (a
 * heap overflow, before any slot was asked for). Now ftc_snap_add refuses
 * it (FTC_ERANGE naming it) and leaves nothing behind. */
static void test_add_huge_host_tensor_refused(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 1, 0, &err);
    assert_non_null(s);
    float w[16];
    ftc_test_fill(w, sizeof w, 6);
    uint64_t huge[1] = {1ull << 61}, s16[1] = {16};
    int rc = ftc_snap_add(s, "huge", FTC_DTYPE_U8, 1, huge, w, FTC_SNAP_HOST, &err);
    print_message("add of 2^61 bytes: %s '%s'\n", ftc_errname(rc), err.msg);
    if (rc == 0)
        print_message("size %llu\n", (unsigned long long)ftc_snap_size(s)); /* crashed */
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(err.msg, "huge"));
    assert_int_equal(ftc_snap_add(s, "w", FTC_DTYPE_F32, 1, s16, w, FTC_SNAP_HOST, &err), 0);
    uint64_t size = ftc_snap_size(s);
    assert_true(size > 0 && size < (1u << 20));
    uint8_t *region = malloc(size);
    assert_int_equal(ftc_snap_format(s, region, &err), 0);
    assert_int_equal(ftc_snap_begin(s, region, 3, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, region, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.n_tensors, 1);
    ftc_snap_destroy(s);
    free(region);
}

/* A restore while a snapshot still copies the same tensors (a trainer whose
 * wait for its snapshot timed out, recovering next): the restore wrote the
 * tensors the copy reads, and the snapshot sealed a mix of both states with
 * checksums that verify. Now the restore waits for the copy (the engine's
 * timeout): a copy that does not end within it makes the restore
 * FTC_ETIMEDOUT with nothing written; once it ends, the restore runs. */
static void test_restore_waits_for_copy(void **state)
{
    (void)state;
    fd_reset();
    ftc_err_t err = {0};
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_snap_t *s = ftc_snap_create(&in, 2, 0, &err);
    assert_non_null(s);
    assert_int_equal(ftc_snap_set_device_ops(s, fake_dev_ops(), &err), 0);
    enum { NW = 4096 };
    float *w = malloc(NW * 4), *want = malloc(NW * 4);
    uint64_t sw[1] = {NW};
    assert_int_equal(ftc_snap_add(s, "dev.w", FTC_DTYPE_F32, 1, sw, w, 0, &err), 0);
    uint64_t size = ftc_snap_size(s);
    uint8_t *a = calloc(1, size), *b = calloc(1, size);
    assert_int_equal(ftc_snap_format(s, a, &err), 0);
    assert_int_equal(ftc_snap_format(s, b, &err), 0);
    ftc_test_fill(w, NW * 4, 1);
    assert_int_equal(ftc_snap_begin(s, a, 1, 1, NULL, 0, &err), 0);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    /* step 2 into b, its device sync held: still copying */
    ftc_test_fill(w, NW * 4, 2);
    memcpy(want, w, NW * 4);
    fake_set_hold(true);
    assert_int_equal(ftc_snap_begin(s, b, 2, 1, NULL, 0, &err), 0);
    ftc_snap_set_timeout(s, 100);
    uint64_t st = 0;
    uint64_t t0 = ftc_now_ns();
    int rc = ftc_snap_restore(s, a, size, &st, NULL, NULL, &err);
    print_message("restore during the copy: %s after %.0f ms '%s'\n", ftc_errname(rc),
                  (double)(ftc_now_ns() - t0) / 1e6, err.msg);
    bool untouched = memcmp(w, want, NW * 4) == 0;
    fake_set_hold(false);
    assert_int_equal(rc, FTC_ETIMEDOUT);
    assert_true(untouched);
    ftc_snap_set_timeout(s, 30000);
    assert_int_equal(ftc_snap_wait_sealed(s, ftc_deadline_in_ms(30000), &err), 0);
    assert_int_equal(ftc_snap_restore(s, a, size, &st, NULL, NULL, &err), 0);
    assert_int_equal(st, 1);
    ftc_test_fill(want, NW * 4, 1);
    assert_memory_equal(w, want, NW * 4);
    ftc_snap_destroy(s);
    free(a);
    free(b);
    free(w);
    free(want);
    fd_done();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_restore_layout_mismatch),
        cmocka_unit_test(test_restore_names_dtypes_shapes),
        cmocka_unit_test(test_add_refused_leaves_no_tensor),
        cmocka_unit_test(test_add_huge_host_tensor_refused),
        cmocka_unit_test(test_device_path),
        cmocka_unit_test(test_failed_sync_waits_for_copy_threads),
        cmocka_unit_test(test_resnapshot_invalid_while_copying),
        cmocka_unit_test(test_restore_waits_for_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
