/* test_zshard.c — the .ftcz compressed shard format: round trips over chunk
 * edges, shuffle, levels and deltas; every corrupted or truncated byte is
 * refused with an error. */
#include "ftc_test.h"

#include "ckpt/persist.h"
#include "ckpt/zshard.h"
#include "core/hash.h"
#include "trainer/synth.h"

/* A shard whose tensors sit on and around chunk edges: 4120 bytes (just over
 * a 4096 chunk), exactly 4096, 8 KiB + 8, a 1-byte tensor, an empty tensor, a
 * 0-d scalar, 3 halves. */
static uint8_t *make_edge_shard(uint64_t step, uint64_t seed, uint64_t *size)
{
    ftc_shard_info_t in = ftc_test_info(step, 0);
    ftc_shard_layout_t *l = ftc_shard_layout_create(&in);
    assert_non_null(l);
    ftc_err_t err = {0};
    uint64_t a[1] = {1030}, b[2] = {32, 64}, c[1] = {1025}, d[1] = {1}, e[2] = {0, 7}, f[1] = {3};
    assert_true(ftc_shard_layout_add_tensor(l, "a", FTC_DTYPE_F32, 1, a, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "b", FTC_DTYPE_BF16, 2, b, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "c", FTC_DTYPE_I64, 1, c, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "d", FTC_DTYPE_U8, 1, d, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "empty", FTC_DTYPE_F32, 2, e, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "scalar", FTC_DTYPE_F32, 0, NULL, &err) >= 0);
    assert_true(ftc_shard_layout_add_tensor(l, "f", FTC_DTYPE_F16, 1, f, &err) >= 0);
    uint64_t cursor = 42;
    assert_int_equal(ftc_shard_layout_add_meta(l, "data.cursor", &cursor, 8, &err), 0);
    *size = ftc_shard_layout_size(l);
    uint8_t *r = calloc(1, *size);
    assert_non_null(r);
    assert_int_equal(ftc_shard_layout_write(l, r, *size, &err), 0);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_seal(r, *size, 1, &err), 0);
    assert_int_equal(ftc_shard_open(&v, r, *size, 0, &err), 0);
    for (uint32_t i = 0; i < v.n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(&v, i, &t);
        ftc_test_fill((uint8_t *)t.data, t.length, seed + i);
    }
    assert_int_equal(ftc_shard_seal(r, *size, 1, &err), 0);
    ftc_shard_layout_destroy(l);
    return r;
}

static void roundtrip(const uint8_t *raw, uint64_t size, const uint8_t *base, uint64_t base_step,
                      int level, bool shuffle, uint64_t chunk, int threads)
{
    ftc_err_t err = {0};
    uint8_t *file;
    size_t flen;
    int rc = ftc_zshard_encode(raw, size, base, base ? size : 0, base_step, level, shuffle, chunk,
                               threads, &file, &flen, &err);
    if (rc)
        fail_msg("encode: %s", ftc_err_str(&err));
    ftc_zshard_info_t zi;
    assert_int_equal(ftc_zshard_info(file, flen, &zi, &err), 0);
    assert_int_equal(zi.raw_size, size);
    assert_int_equal(zi.raw_xxh3, ftc_xxh3(raw, size));
    assert_int_equal(zi.chunk_bytes, chunk);
    assert_int_equal(zi.level, level);
    assert_int_equal(zi.shuffle, shuffle);
    assert_true(zi.n_chunks >= (size + chunk - 1) / chunk);
    assert_int_equal(zi.base_step, base ? base_step : UINT64_MAX);
    ftc_shard_view_t v;
    assert_int_equal(ftc_shard_open(&v, raw, size, 0, &err), 0);
    assert_int_equal(zi.step, v.info.step);
    uint8_t *out;
    uint64_t osz;
    rc = ftc_zshard_decode(file, flen, base, base ? size : 0, &out, &osz, &err);
    if (rc)
        fail_msg("decode: %s", ftc_err_str(&err));
    assert_int_equal(osz, size);
    assert_memory_equal(out, raw, size);
    free(out);
    free(file);
}

static void test_roundtrip_edges(void **state)
{
    (void)state;
    uint64_t size;
    uint8_t *raw = make_edge_shard(7, 1, &size);
    const uint64_t chunks[] = {4096, 4097, 4100, 8192, 65536, 4u << 20};
    const int levels[] = {-1, 1, 3};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
        for (int sh = 0; sh < 2; sh++)
            for (size_t lv = 0; lv < sizeof levels / sizeof *levels; lv++)
                roundtrip(raw, size, NULL, 0, levels[lv], sh, chunks[c], (int)(c % 3));
    free(raw);
}

static void test_roundtrip_make_shard_and_delta(void **state)
{
    (void)state;
    uint64_t s1, s2;
    uint8_t *a = ftc_test_make_shard(10, 1, 300, 5, &s1);
    uint8_t *b = ftc_test_make_shard(11, 1, 300, 6, &s2);
    assert_int_equal(s1, s2);
    roundtrip(a, s1, NULL, 0, 1, true, 4096, 2);
    roundtrip(b, s2, a, 10, 1, true, 4096, 2);
    roundtrip(b, s2, a, 10, 3, false, 1u << 20, 0);
    free(a);
    free(b);
}

/* Synthetic training state: delta against the previous step round trips, and
 * the wrong or a missing base is refused. */
static void test_delta_synth(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_synth_options_t o = FTC_SYNTH_OPTIONS_INIT;
    o.bytes = 256u << 10;
    ftc_shard_info_t in = ftc_test_info(0, 0);
    ftc_synth_t *s = ftc_synth_create(&o, &in, &err);
    assert_non_null(s);
    assert_int_equal(ftc_synth_step(s, 1, &err), 0);
    uint64_t size = ftc_synth_size(s);
    uint8_t *v1 = malloc(size);
    memcpy(v1, ftc_synth_region(s), size);
    assert_int_equal(ftc_synth_step(s, 2, &err), 0);
    const uint8_t *v2 = ftc_synth_region(s);
    roundtrip(v2, size, v1, 1, 1, true, 64u << 10, 2);
    roundtrip(v2, size, NULL, 0, 1, true, 64u << 10, 2);

    uint8_t *file, *out;
    size_t flen;
    uint64_t osz;
    assert_int_equal(ftc_zshard_encode(v2, size, v1, size, 1, 1, true, 65536, 2, &file, &flen,
                                       &err),
                     0);
    assert_int_equal(ftc_zshard_decode(file, flen, NULL, 0, &out, &osz, &err), FTC_EINVAL);
    uint8_t *wrong = malloc(size);
    memcpy(wrong, v1, size);
    wrong[size / 2] ^= 1;
    assert_int_equal(ftc_zshard_decode(file, flen, wrong, size, &out, &osz, &err), FTC_ECORRUPT);
    assert_non_null(strstr(ftc_err_str(&err), "base"));
    assert_int_equal(ftc_zshard_decode(file, flen, v1, size - 1, &out, &osz, &err), FTC_ECORRUPT);
    assert_null(out);
    free(wrong);
    free(file);
    free(v1);
    ftc_synth_destroy(s);
}

static void test_encode_bad_args(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *raw = ftc_test_make_shard(3, 0, 8, 1, &size);
    uint8_t *file;
    size_t flen;
    assert_int_equal(ftc_zshard_encode(raw, size, NULL, 0, 0, 1, true, 4095, 1, &file, &flen,
                                       &err),
                     FTC_EINVAL);
    assert_int_equal(ftc_zshard_encode(raw, size, NULL, 0, 0, 99, true, 4096, 1, &file, &flen,
                                       &err),
                     FTC_EINVAL);
    assert_int_equal(ftc_zshard_encode(raw, size, raw, size - 1, 2, 1, true, 4096, 1, &file,
                                       &flen, &err),
                     FTC_EINVAL);
    /* base step not before the shard's step */
    assert_int_equal(ftc_zshard_encode(raw, size, raw, size, 3, 1, true, 4096, 1, &file, &flen,
                                       &err),
                     FTC_EINVAL);
    raw[100] ^= 1; /* no longer a valid shard */
    assert_true(ftc_zshard_encode(raw, size, NULL, 0, 0, 1, true, 4096, 1, &file, &flen, &err) <
                0);
    assert_null(file);
    free(raw);
}

/* Flips every bit position class: one bit in every byte of the header, the
 * table and the footer, and in a stride of the chunk data. Each is detected. */
static void test_corruption_detected(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint64_t size, bsize;
    uint8_t *raw = ftc_test_make_shard(9, 0, 200, 3, &size);
    uint8_t *base = ftc_test_make_shard(8, 0, 200, 4, &bsize);
    for (int delta = 0; delta < 2; delta++) {
        uint8_t *file;
        size_t flen;
        assert_int_equal(ftc_zshard_encode(raw, size, delta ? base : NULL, delta ? bsize : 0, 8,
                                           1, true, 4096, 2, &file, &flen, &err),
                         0);
        ftc_zshard_info_t zi;
        assert_int_equal(ftc_zshard_info(file, flen, &zi, &err), 0);
        assert_true(zi.n_chunks > 4);
        size_t table_end = FTC_ZSHARD_HEADER_SIZE + (size_t)zi.n_chunks * FTC_ZSHARD_ENTRY_SIZE;
        size_t footer = flen - FTC_ZSHARD_FOOTER_SIZE;
        int tested = 0;
        for (size_t i = 0; i < flen; i++) {
            bool meta = i < table_end || i >= footer;
            if (!meta && i % 5 != 0)
                continue;
            uint8_t bit = (uint8_t)(1u << (i % 8));
            file[i] ^= bit;
            if (meta)
                assert_true(ftc_zshard_info(file, flen, &zi, &err) < 0);
            uint8_t *out = (uint8_t *)1;
            uint64_t osz = 1;
            int rc = ftc_zshard_decode(file, flen, delta ? base : NULL, delta ? bsize : 0, &out,
                                       &osz, &err);
            if (rc >= 0)
                fail_msg("flip at byte %zu (of %zu) not detected", i, flen);
            assert_true(rc == FTC_ECORRUPT || rc == FTC_EVERSION || rc == FTC_ETRUNC);
            assert_null(out);
            assert_int_equal(osz, 0);
            assert_true(strlen(ftc_err_str(&err)) > 10);
            file[i] ^= bit;
            tested++;
        }
        assert_true(tested > 500);
        free(file);
    }
    free(raw);
    free(base);
}

static void test_truncation_everywhere(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *raw = ftc_test_make_shard(9, 0, 100, 3, &size);
    uint8_t *file;
    size_t flen;
    assert_int_equal(ftc_zshard_encode(raw, size, NULL, 0, 0, 1, true, 4096, 1, &file, &flen,
                                       &err),
                     0);
    for (size_t n = 0; n < flen; n++) {
        /* a fresh allocation of exactly n bytes, so ASan sees any overread */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, file, n);
        uint8_t *out;
        uint64_t osz;
        ftc_zshard_info_t zi;
        assert_int_equal(ftc_zshard_info(cut, n, &zi, &err), FTC_ETRUNC);
        assert_int_equal(ftc_zshard_decode(cut, n, NULL, 0, &out, &osz, &err), FTC_ETRUNC);
        free(cut);
    }
    /* one trailing byte is refused too */
    uint8_t *longer = malloc(flen + 1);
    memcpy(longer, file, flen);
    longer[flen] = 0;
    uint8_t *out;
    uint64_t osz;
    assert_int_equal(ftc_zshard_decode(longer, flen + 1, NULL, 0, &out, &osz, &err), FTC_ECORRUPT);
    free(longer);
    free(file);
    free(raw);
}

/* Re-signs the header and footer after a deliberate edit, so that the field
 * checks themselves (not just the checksums) are exercised. */
static void resign(uint8_t *f, size_t len, uint32_t n_chunks)
{
    uint64_t h;
    uint64_t th = ftc_xxh3(f + FTC_ZSHARD_HEADER_SIZE, (size_t)n_chunks * FTC_ZSHARD_ENTRY_SIZE);
    memcpy(f + 104, &th, 8);
    h = ftc_xxh3(f, 120);
    memcpy(f + 120, &h, 8);
    uint8_t *ft = f + len - FTC_ZSHARD_FOOTER_SIZE;
    memcpy(ft + 16, &h, 8);
    uint64_t fh = ftc_xxh3(ft, 24);
    memcpy(ft + 24, &fh, 8);
}

static void test_hostile_fields(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint64_t size;
    uint8_t *raw = ftc_test_make_shard(9, 0, 100, 3, &size);
    uint8_t *file;
    size_t flen;
    assert_int_equal(ftc_zshard_encode(raw, size, NULL, 0, 0, 1, true, 4096, 1, &file, &flen,
                                       &err),
                     0);
    ftc_zshard_info_t zi;
    assert_int_equal(ftc_zshard_info(file, flen, &zi, &err), 0);
    uint32_t n = zi.n_chunks;
    uint8_t *f = malloc(flen);
    struct {
        size_t off;
        uint64_t val;
        int width;
        const char *needle;
    } cases[] = {
        {64, 0xFFFFFFFFu, 4, "data_offset"},             /* n_chunks */
        {64, 0, 4, "n_chunks"},                          /* zero chunks */
        {16, 1ull << 62, 8, "raw_size"},                 /* absurd raw size */
        {56, 1ull << 40, 8, "chunk_bytes"},              /* chunk bytes */
        {68, 100, 4, "level"},                           /* zstd level */
        {72, 0x80, 4, "flags"},                          /* unknown flag */
        {40, 5, 8, "base_step"},                         /* base set on a full file */
        {96, 1ull << 60, 8, "file_size"},                /* file size */
        {128 + 16, 1, 8, "raw_offset"},                  /* chunk 0 raw offset */
        {128 + 24, 4097, 8, "raw_size"},                 /* chunk 0 raw size > chunk */
        {128 + 32, 3, 4, "width"},                       /* chunk 0 width */
        {128 + 8, 1ull << 40, 8, "comp_size"},           /* chunk 0 comp size */
        {128 + 48 + 0, 7, 8, "file_offset"},             /* chunk 1 file offset */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(f, file, flen);
        memcpy(f + cases[c].off, &cases[c].val, (size_t)cases[c].width);
        resign(f, flen, n);
        uint8_t *out;
        uint64_t osz;
        int rc = ftc_zshard_decode(f, flen, NULL, 0, &out, &osz, &err);
        if (rc >= 0)
            fail_msg("case %zu accepted", c);
        if (!strstr(ftc_err_str(&err), cases[c].needle))
            fail_msg("case %zu: message '%s' lacks '%s'", c, ftc_err_str(&err), cases[c].needle);
    }
    free(f);
    free(file);
    free(raw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_edges),
        cmocka_unit_test(test_roundtrip_make_shard_and_delta),
        cmocka_unit_test(test_delta_synth),
        cmocka_unit_test(test_encode_bad_args),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_hostile_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
