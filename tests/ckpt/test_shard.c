/*
 * test_shard.c — the shard format: round trips for every dtype and shape
 * edge (0-d, empty, 8 dims, offsets past 4 GiB), every single-bit flip
 * detected, truncation at every length detected, hostile headers refused
 * with the field named, metadata, and layout errors.
 */
#include "ftc_test.h"

#include "ckpt/shard.h"
#include "core/hash.h"

#include <sys/mman.h>

static void test_round_trip_every_dtype(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(42, 3);
    in.tp = 2, in.tp_rank = 1, in.pp = 3, in.pp_rank = 2, in.generation = 9;
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    static const int dts[] = {FTC_DTYPE_F32, FTC_DTYPE_BF16, FTC_DTYPE_F16, FTC_DTYPE_I8,
                              FTC_DTYPE_U8,  FTC_DTYPE_I32,  FTC_DTYPE_I64};
    uint64_t shapes[][FTC_SHARD_MAX_DIMS] = {{3, 5}, {7}, {1, 1, 1}, {0}, {2, 0, 4}, {13}, {1}};
    uint32_t ndims[] = {2, 1, 3, 1, 3, 1, 1};
    char name[64];
    for (int i = 0; i < 7; i++) {
        snprintf(name, sizeof name, "t.%s", ftc_dtype_name(dts[i]));
        assert_int_equal(ftc_shard_layout_add_tensor(l, name, dts[i], ndims[i], shapes[i], &err),
                         i);
    }
    /* 0-d scalars and an 8-dim tensor */
    assert_int_equal(ftc_shard_layout_add_tensor(l, "scalar.i64", FTC_DTYPE_I64, 0, NULL, &err), 7);
    uint64_t eight[8] = {1, 2, 1, 2, 1, 2, 1, 3};
    assert_int_equal(ftc_shard_layout_add_tensor(l, "eight", FTC_DTYPE_BF16, 8, eight, &err), 8);
    uint8_t rng[24];
    ftc_test_fill(rng, sizeof rng, 5);
    assert_int_equal(ftc_shard_layout_add_meta(l, "rng.state", rng, sizeof rng, &err), 0);
    assert_int_equal(ftc_shard_layout_add_meta(l, "empty", NULL, 0, &err), 0);
    uint64_t size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, size);
    assert_int_equal(ftc_shard_layout_write(l, r, size, &err), 0);
    for (uint32_t i = 0; i < ftc_shard_layout_count(l); i++) {
        uint64_t off = ftc_shard_layout_offset(l, i);
        assert_int_equal(off % FTC_SHARD_ALIGN, 0);
        uint64_t next = i + 1 < ftc_shard_layout_count(l) ? ftc_shard_layout_offset(l, i + 1)
                                                          : size - FTC_SHARD_FOOTER_SIZE;
        (void)next;
    }
    ftc_shard_view_t v;
    /* fill through the (trusted) layout pointers */
    assert_int_equal(ftc_shard_seal(r, size, 1, &err), 0);
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), 0);
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        assert_ptr_equal(t.data, ftc_shard_payload_ptr(l, r, i));
        ftc_test_fill((uint8_t *)t.data, t.length, 100 + i);
    }
    ftc_shard_restamp(r, 43, 10);
    assert_int_equal(ftc_shard_seal(r, size, 3, &err), 0);
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    assert_string_equal(v.info.job_id, "test-job");
    assert_int_equal(v.info.step, 43);
    assert_int_equal(v.info.generation, 10);
    assert_int_equal(v.info.tp, 2);
    assert_int_equal(v.info.pp_rank, 2);
    assert_int_equal(v.info.dp_rank, 3);
    assert_int_equal(v.n_tensors, 9);
    for (int i = 0; i < 7; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, (uint32_t)i, &t);
        assert_int_equal(t.dtype, dts[i]);
        assert_int_equal(t.ndim, ndims[i]);
        uint64_t n = ftc_dtype_size(dts[i]);
        for (uint32_t k = 0; k < t.ndim; k++) {
            assert_int_equal(t.shape[k], shapes[i][k]);
            n *= shapes[i][k];
        }
        assert_int_equal(t.length, n);
        uint8_t *want = malloc(n + 1);
        ftc_test_fill(want, n, 100 + (uint64_t)i);
        assert_memory_equal(t.data, want, n);
        assert_true(t.xxh3 == ftc_xxh3(want, n));
        free(want);
    }
    ftc_shard_tensor_t s;
    ftc_shard_get(&v, 7, &s);
    assert_int_equal(s.ndim, 0);
    assert_int_equal(s.length, 8);
    assert_int_equal(ftc_shard_find(&v, "eight"), 8);
    assert_int_equal(ftc_shard_find(&v, "nope"), FTC_ENOENT);
    const uint8_t *val;
    uint32_t vl;
    assert_int_equal(ftc_shard_meta_get(&v, "rng.state", &val, &vl), 0);
    assert_int_equal(vl, sizeof rng);
    assert_memory_equal(val, rng, sizeof rng);
    assert_int_equal(ftc_shard_meta_get(&v, "empty", &val, &vl), 0);
    assert_int_equal(vl, 0);
    assert_int_equal(ftc_shard_meta_get(&v, "missing", &val, &vl), FTC_ENOENT);
    /* a slot may be longer than the shard it holds */
    uint8_t *big = calloc(1, size + 100);
    memcpy(big, r, size);
    assert_int_equal(ftc_shard_open(&v, big, size + 100, 0, &err), FTC_ECORRUPT);
    assert_int_equal(ftc_shard_open(&v, big, size + 100, FTC_SHARD_ALLOW_TRAILING, &err), 0);
    free(big);
    free(r);
    ftc_shard_layout_destroy(l);
}

/* The shard layout l describes, written into a new buffer and sealed
 * (generation 1); its size in *size. */
static uint8_t *write_sealed(ftc_shard_layout_t *l, uint64_t *size)
{
    ftc_err_t err = {0};
    *size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, *size);
    assert_non_null(r);
    assert_int_equal(ftc_shard_layout_write(l, r, *size, &err), 0);
    assert_int_equal(ftc_shard_seal(r, *size, 1, &err), 0);
    return r;
}

static void test_empty_shard(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *r = write_sealed(l, &size);
    assert_int_equal(size, FTC_SHARD_HEADER_SIZE + FTC_SHARD_FOOTER_SIZE);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    assert_int_equal(v.n_tensors, 0);
    free(r);
    ftc_shard_layout_destroy(l);
}

/* Every single-bit flip anywhere in the shard is detected by open+verify. */
static void test_every_bit_flip_detected(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = ftc_test_make_shard(7, 1, 3, 11, &size);
    ftc_err_t err = {0};
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    uint64_t undetected = 0;
    for (uint64_t byte = 0; byte < size; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            r[byte] ^= (uint8_t)(1u << bit);
            int rc = ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err);
            if (rc == 0)
                undetected++;
            else
                assert_true(rc == FTC_ECORRUPT || rc == FTC_ETRUNC || rc == FTC_EVERSION);
            r[byte] ^= (uint8_t)(1u << bit);
        }
    }
    assert_int_equal(undetected, 0);
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    free(r);
}

/* Cutting the shard at every length is detected, and the error says so. */
static void test_truncation_at_every_length(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = ftc_test_make_shard(7, 1, 2, 12, &size);
    ftc_err_t err = {0};
    ftc_shard_view_t v;
    for (uint64_t len = 0; len < size; len++) {
        /* copy into an exact-size buffer so ASan catches any read past it */
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, r, len);
        int rc = ftc_shard_open(&v, cut, len, FTC_SHARD_VERIFY, &err);
        assert_int_equal(rc, FTC_ETRUNC);
        assert_non_null(strstr(err.msg, "truncated"));
        free(cut);
    }
    free(r);
}

/* Planted values in header fields get an error naming the field's offset. */
static void test_hostile_fields_named(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = ftc_test_make_shard(7, 1, 2, 13, &size);
    ftc_err_t err = {0};
    ftc_shard_view_t v;
    struct {
        size_t off;
        uint64_t val;
        int width;
        const char *expect;
    } cases[] = {
        {0, 0x5858585858585858ull, 8, "bad magic at offset 0"},
        {8, 2, 4, "format version 2 at offset 8"},
        {12, 128, 4, "header_size at offset 12"},
        {16, 1ull << 40, 8, "total_size at offset 16"},
        {104, 0, 4, "dp degree at offset 104"},
        {116, 99, 4, "dp_rank at offset 116"},
        {128, 5000000, 4, "n_tensors at offset 128"},
        {132, 1, 4, "flags at offset 132"},
        {136, 0, 8, "table_offset at offset 136"},
        {144, 7, 8, "names_offset at offset 144"},
        {152, 1ull << 50, 8, "names_size at offset 152"},
        {168, 3, 8, "meta_size at offset 168"},
        {184, 12345, 8, "payload_size at offset 184"},
        {220, 1, 1, "reserved header bytes"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *x = calloc(1, size);
        memcpy(x, r, size);
        memcpy(x + cases[c].off, &cases[c].val, (size_t)cases[c].width);
        int rc = ftc_shard_open(&v, x, size, FTC_SHARD_VERIFY, &err);
        assert_true(rc < 0);
        if (!strstr(err.msg, cases[c].expect))
            fail_msg("case %zu: expected '%s' in '%s'", c, cases[c].expect, err.msg);
        free(x);
    }
    /* a tensor entry with a bad dtype (head checksum recomputed, so the entry
     * check itself must catch it) */
    uint8_t *x = calloc(1, size);
    memcpy(x, r, size);
    x[FTC_SHARD_HEADER_SIZE + 32] = 77; /* tensor 0 dtype */
    uint64_t pay;
    memcpy(&pay, x + 176, 8);
    uint64_t h = ftc_xxh3(x, pay);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 24, &h, 8);
    uint64_t fh = ftc_xxh3(x + size - FTC_SHARD_FOOTER_SIZE, 56);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 56, &fh, 8);
    assert_int_equal(ftc_shard_open(&v, x, size, 0, &err), FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "tensor 0: dtype at offset 288"));
    /* a tensor length that disagrees with its shape */
    memcpy(x, r, size);
    uint64_t len = 12345;
    memcpy(x + FTC_SHARD_HEADER_SIZE + 8, &len, 8);
    h = ftc_xxh3(x, pay);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 24, &h, 8);
    fh = ftc_xxh3(x + size - FTC_SHARD_FOOTER_SIZE, 56);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 56, &fh, 8);
    assert_int_equal(ftc_shard_open(&v, x, size, 0, &err), FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "tensor 0: length at offset 264"));
    free(x);
    free(r);
}

static void test_layout_errors(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    uint64_t shape[2] = {2, 2};
    assert_int_equal(ftc_shard_layout_add_tensor(l, "a", FTC_DTYPE_F32, 2, shape, &err), 0);
    assert_int_equal(ftc_shard_layout_add_tensor(l, "a", FTC_DTYPE_F32, 2, shape, &err),
                     FTC_EEXIST);
    assert_int_equal(ftc_shard_layout_add_tensor(l, "", FTC_DTYPE_F32, 2, shape, &err), FTC_EINVAL);
    assert_int_equal(ftc_shard_layout_add_tensor(l, "b", 42, 2, shape, &err), FTC_EINVAL);
    assert_int_equal(ftc_shard_layout_add_tensor(l, "c", FTC_DTYPE_F32, 9, shape, &err),
                     FTC_EINVAL);
    uint64_t huge[3] = {1ull << 40, 1ull << 30, 8};
    assert_int_equal(ftc_shard_layout_add_tensor(l, "d", FTC_DTYPE_F32, 3, huge, &err), FTC_ERANGE);
    assert_int_equal(ftc_shard_layout_add_meta(l, "k", "v", 1, &err), 0);
    assert_int_equal(ftc_shard_layout_add_meta(l, "k", "v", 1, &err), FTC_EEXIST);
    assert_int_equal(ftc_shard_layout_add_meta(l, "", "v", 1, &err), FTC_EINVAL);
    uint64_t size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, size);
    assert_int_equal(ftc_shard_layout_write(l, r, size - 1, &err), FTC_EINVAL);
    ftc_shard_layout_destroy(l);
    in.dp_rank = 4; /* not below dp=4 */
    l = ftc_shard_layout_create(&in);
    assert_int_equal(ftc_shard_layout_write(l, r, ftc_shard_layout_size(l), &err), FTC_EINVAL);
    ftc_shard_layout_destroy(l);
    ftc_shard_layout_destroy(NULL);
    free(r);
}

/* Tensors each within the 2^62-byte limit of one tensor whose sum wraps
 * the 64-bit shard size: four of 2^62 - 64 bytes. The layout took them all
 * and planned a shard of a few KiB (offsets past the wrap), so a region of
 * that size was written 2^64 bytes past its end. Now the tensor that takes
 * the shard past 2^62 bytes is refused (FTC_ERANGE naming it) and the
 * layout stays what it was. */
static void test_layout_total_overflow(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    uint64_t shape[1] = {(1ull << 62) - 64};
    int rc = 0;
    uint32_t added = 0;
    for (int i = 0; i < 4 && rc >= 0; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        rc = ftc_shard_layout_add_tensor(l, name, FTC_DTYPE_U8, 1, shape, &err);
        if (rc >= 0)
            added++;
    }
    uint64_t size = ftc_shard_layout_size(l);
    print_message("%u tensors taken, layout of %llu bytes: %s\n", added,
                  (unsigned long long)size, rc < 0 ? err.msg : "no error");
    assert_int_equal(rc, FTC_ERANGE);
    assert_non_null(strstr(err.msg, "t1"));
    assert_int_equal(ftc_shard_layout_count(l), 1);
    assert_true(size > shape[0]);
    ftc_shard_layout_destroy(l);
}

/* A tensor whose bytes start past 4 GiB: the region is a sparse file mapped
 * into memory, so the test needs no 4 GiB of RAM. */
static void test_offsets_past_4gib(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(5, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    uint64_t big[2] = {1ull << 20, 1100}; /* 1100 MiB of fp32 = 4.3 GiB */
    uint64_t small[1] = {1000};
    assert_int_equal(ftc_shard_layout_add_tensor(l, "big", FTC_DTYPE_F32, 2, big, &err), 0);
    assert_int_equal(ftc_shard_layout_add_tensor(l, "after", FTC_DTYPE_I32, 1, small, &err), 1);
    uint64_t size = ftc_shard_layout_size(l);
    assert_true(ftc_shard_layout_offset(l, 1) > (1ull << 32));
    char *dir = ftc_test_tmpdir("shard4g");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/big.ftc", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    uint8_t *r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(r != MAP_FAILED);
    assert_int_equal(ftc_shard_layout_write(l, r, size, &err), 0);
    int32_t *after = ftc_shard_payload_ptr(l, r, 1);
    for (int i = 0; i < 1000; i++)
        after[i] = i * 7 - 3;
    float *bigp = ftc_shard_payload_ptr(l, r, 0);
    bigp[0] = 1.5f;
    bigp[(1ull << 20) * 1100 - 1] = -2.5f;
    assert_int_equal(ftc_shard_seal(r, size, 2, &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), 0);
    ftc_shard_tensor_t t;
    ftc_shard_get(&v, 1, &t);
    assert_true(t.offset > (1ull << 32));
    assert_int_equal(((const int32_t *)t.data)[999], 999 * 7 - 3);
    assert_int_equal(ftc_shard_verify_tensor(&v, 1, &err), 0);
    ftc_shard_get(&v, 0, &t);
    assert_int_equal(t.length, 4ull * 1100 * (1ull << 20));
    assert_true(((const float *)t.data)[(1ull << 20) * 1100 - 1] == -2.5f);
    /* corrupt a byte past 4 GiB: detected by that tensor's checksum */
    ((uint8_t *)after)[10] ^= 1;
    assert_int_equal(ftc_shard_verify_tensor(&v, 1, &err), FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "'after'"));
    munmap(r, size);
    close(fd);
    ftc_shard_layout_destroy(l);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_peek_size(void **state)
{
    (void)state;
    uint64_t size, got;
    uint8_t *r = ftc_test_make_shard(1, 0, 1, 1, &size);
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_peek_size(r, size, &got, &err), 0);
    assert_int_equal(got, size);
    assert_int_equal(ftc_shard_peek_size(r, 100, &got, &err), FTC_ETRUNC);
    free(r);
}

/* The peeks a receiver uses on a shard still arriving: the table once it is
 * in, each entry as open() reads it, and a table or entry that cannot fit. */
static void test_peek_arriving(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *r = ftc_test_make_shard(3, 0, 1, 1, &size);
    ftc_err_t err = {0};
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    uint32_t n = 0;
    assert_int_equal(ftc_shard_peek_count(r, 100, size, &n), FTC_EAGAIN);
    assert_int_equal(ftc_shard_peek_count(r, FTC_SHARD_HEADER_SIZE, size, &n),
                     v.n_tensors ? FTC_EAGAIN : 0);
    assert_int_equal(ftc_shard_peek_count(r, v.payload_offset, size, &n), 0);
    assert_int_equal(n, v.n_tensors);
    for (uint32_t i = 0; i < n; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        uint64_t off, len, h;
        assert_int_equal(ftc_shard_peek_tensor(r, size, i, &off, &len, &h), 0);
        assert_int_equal(off, t.offset);
        assert_int_equal(len, t.length);
        assert_int_equal(h, t.xxh3);
        assert_int_equal(ftc_xxh3(r + off, len), h);
    }
    /* a total that is not the header's, an entry running past the payload */
    assert_int_equal(ftc_shard_peek_count(r, size, size + 64, &n), FTC_ECORRUPT);
    uint64_t huge = UINT64_MAX - 8, off, len, h;
    memcpy(r + FTC_SHARD_HEADER_SIZE + 8, &huge, 8); /* tensor 0's length */
    assert_int_equal(ftc_shard_peek_tensor(r, size, 0, &off, &len, &h), FTC_ECORRUPT);
    free(r);
}


/* Re-signs the head and footer after a deliberate edit, so that the check
 * under test (not the checksum) must catch it. */
static void resign(uint8_t *x, uint64_t size)
{
    uint64_t pay;
    memcpy(&pay, x + 176, 8);
    uint64_t h = ftc_xxh3(x, pay);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 24, &h, 8);
    uint64_t fh = ftc_xxh3(x + size - FTC_SHARD_FOOTER_SIZE, 56);
    memcpy(x + size - FTC_SHARD_FOOTER_SIZE + 56, &fh, 8);
}

static void test_metadata_duplicates_and_padding(void **state)
{
    (void)state;
    ftc_shard_info_t in = ftc_test_info(1, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    ftc_err_t err = {0};
    assert_int_equal(ftc_shard_layout_add_meta(l, "ka", "x", 1, &err), 0);
    assert_int_equal(ftc_shard_layout_add_meta(l, "kb", "y", 1, &err), 0);
    uint64_t size;
    uint8_t *r = write_sealed(l, &size);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, r, size, FTC_SHARD_VERIFY, &err), 0);
    uint64_t kb = ftc_shard_layout_meta_offset(l, "kb");
    assert_true(kb > 0);
    /* rename "kb" to "ka": two records with one key */
    r[kb - 1] = 'a';
    resign(r, size);
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "appears twice"));
    r[kb - 1] = 'b';
    /* a non-zero byte in a record's padding */
    r[kb + 1] = 0x55; /* value "y" is 1 byte; the next bytes are padding */
    resign(r, size);
    assert_int_equal(ftc_shard_open(&v, r, size, 0, &err), FTC_ECORRUPT);
    assert_non_null(strstr(err.msg, "padding"));
    free(r);
    ftc_shard_layout_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_dtype),
        cmocka_unit_test(test_empty_shard),
        cmocka_unit_test(test_every_bit_flip_detected),
        cmocka_unit_test(test_truncation_at_every_length),
        cmocka_unit_test(test_hostile_fields_named),
        cmocka_unit_test(test_layout_errors),
        cmocka_unit_test(test_layout_total_overflow),
        cmocka_unit_test(test_offsets_past_4gib),
        cmocka_unit_test(test_peek_size),
        cmocka_unit_test(test_peek_arriving),
        cmocka_unit_test(test_metadata_duplicates_and_padding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
