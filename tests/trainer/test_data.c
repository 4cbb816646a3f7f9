/*
 * test_data.c — token files round-trip and every kind of bad file is refused
 * with a clear error (short, bad magic, header checksum, version, truncated,
 * trailing bytes, token checksum, token >= vocab, vocab larger than the
 * model's); the byte tokenizer; the generated corpus is deterministic; the
 * loader is a pure function of the sample index and keeps the held-out part
 * apart.
 */
#include "ftc_test.h"

#include "core/fsio.h"
#include "core/hash.h"
#include "trainer/data.h"

static uint8_t *encode(const uint16_t *tok, uint64_t n, uint32_t vocab, size_t *len)
{
    uint8_t *buf;
    ftc_err_t err = {0};
    assert_int_equal(ftc_tokens_encode(tok, n, vocab, &buf, len, &err), 0);
    return buf;
}

static void rehash_header(uint8_t *b)
{
    uint64_t h = ftc_xxh3(b, 56);
    memcpy(b + 56, &h, 8);
}

static void expect_bad(const uint8_t *b, size_t len, int code, const char *needle)
{
    ftc_tokens_t t;
    ftc_err_t err = {0};
    int rc = ftc_tokens_parse(b, len, "bad.tok", &t, &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("expected %s with '%s', got %s: %s", ftc_errname(code), needle, ftc_errname(rc),
                 err.msg);
    assert_null(t.tok);
}

static void test_token_files(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    uint16_t tok[100];
    for (int i = 0; i < 100; i++)
        tok[i] = (uint16_t)(i * 7 % 300);
    size_t len;
    uint8_t *b = encode(tok, 100, 300, &len);
    assert_int_equal(len, 64 + 200);
    ftc_tokens_t t;
    assert_int_equal(ftc_tokens_parse(b, len, "ok.tok", &t, &err), 0);
    assert_int_equal(t.n, 100);
    assert_int_equal(t.vocab, 300);
    assert_memory_equal(t.tok, tok, 200);
    ftc_tokens_free(&t);

    expect_bad(b, 10, FTC_ETRUNC, "shorter than the 64-byte token file header");
    uint8_t *c = malloc(len + 8);
    memcpy(c, b, len);
    c[0] = 'X';
    expect_bad(c, len, FTC_ECORRUPT, "bad magic");
    memcpy(c, b, len);
    c[17] ^= 1; /* vocab changed, header checksum not */
    expect_bad(c, len, FTC_ECORRUPT, "header checksum mismatch");
    memcpy(c, b, len);
    c[8] = 2, rehash_header(c);
    expect_bad(c, len, FTC_EVERSION, "version 2");
    expect_bad(b, len - 3, FTC_ETRUNC, "truncated");
    memcpy(c, b, len);
    c[len] = 0, c[len + 1] = 0;
    expect_bad(c, len + 2, FTC_ECORRUPT, "expected 200");
    memcpy(c, b, len);
    c[64 + 50] ^= 1;
    expect_bad(c, len, FTC_ECORRUPT, "token checksum mismatch");
    /* a token >= vocab with both checksums right: say vocab 50 */
    memcpy(c, b, len);
    uint32_t v50 = 50;
    memcpy(c + 16, &v50, 4);
    rehash_header(c);
    expect_bad(c, len, FTC_ECORRUPT, "is >= vocab size 50");
    free(c);
    /* encode refuses out-of-vocab tokens */
    uint8_t *dummy;
    size_t dl;
    assert_int_equal(ftc_tokens_encode(tok, 100, 10, &dummy, &dl, &err), FTC_EINVAL);
    free(b);
}

static void test_files_on_disk(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    char *dir = ftc_test_tmpdir("trdata");
    char txt[PATH_MAX], out[PATH_MAX];
    snprintf(txt, sizeof txt, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/in.tok", dir);
    const char *text = "Hello, tokens! \xff\x01";
    ftc_test_write_file(txt, text, strlen(text));
    uint64_t n = 0;
    assert_int_equal(ftc_tokenize_file(txt, out, &n, &err), 0);
    assert_int_equal(n, strlen(text));
    ftc_tokens_t t;
    assert_int_equal(ftc_tokens_load(out, &t, &err), 0);
    assert_int_equal(t.vocab, 256);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(t.tok[i], (uint8_t)text[i]);
    ftc_tokens_free(&t);
    /* a missing file names itself */
    assert_true(ftc_tokens_load("/nonexistent/x.tok", &t, &err) < 0);
    assert_non_null(strstr(err.msg, "/nonexistent/x.tok"));
    /* a truncated file on disk */
    uint8_t *raw;
    size_t rl;
    assert_int_equal(ftc_fs_read_file(out, 1 << 20, &raw, &rl, &err), 0);
    ftc_test_write_file(out, raw, rl - 1);
    assert_int_equal(ftc_tokens_load(out, &t, &err), FTC_ETRUNC);
    assert_non_null(strstr(err.msg, out));
    free(raw);
    ftc_test_rmrf(dir);
    free(dir);
}

static void test_corpus_and_loader(void **state)
{
    (void)state;
    ftc_err_t err = {0};
    ftc_tokens_t a, b, c;
    assert_int_equal(ftc_corpus_generate(7, 50000, &a, &err), 0);
    assert_int_equal(ftc_corpus_generate(7, 50000, &b, &err), 0);
    assert_int_equal(ftc_corpus_generate(8, 50000, &c, &err), 0);
    assert_true(a.n > 49000 && a.n <= 50000);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.tok, b.tok, a.n * 2);
    assert_true(c.n != a.n || memcmp(a.tok, c.tok, a.n * 2) != 0);
    for (uint64_t i = 0; i < a.n; i++)
        assert_true(a.tok[i] < 128); /* ASCII text */

    ftc_loader_t ld, ld2;
    assert_int_equal(ftc_loader_init(&ld, &a, 32, 0.1, 3, 256, &err), 0);
    assert_int_equal(ftc_loader_init(&ld2, &a, 32, 0.1, 3, 256, &err), 0);
    int32_t in[4 * 32], tg[4 * 32], in2[32], tg2[32];
    /* sample 1001 read inside a batch equals sample 1001 read alone */
    ftc_loader_batch(&ld, 1000, 4, in, tg);
    ftc_loader_batch(&ld2, 1001, 1, in2, tg2);
    assert_memory_equal(in + 32, in2, sizeof in2);
    assert_memory_equal(tg + 32, tg2, sizeof tg2);
    for (int t = 0; t < 31; t++)
        assert_int_equal(in[t + 1], tg[t]); /* targets are the inputs shifted */
    /* training windows stay out of the held-out part */
    for (uint64_t g = 0; g < 20000; g++)
        assert_true(ftc_loader_position(&ld, g) + 32 < ld.train_end);
    assert_true(ld.n_eval >= 1);
    ftc_loader_eval_batch(&ld, 0, 1, in2, tg2);
    assert_int_equal(in2[0], a.tok[ld.eval_begin]);
    /* a vocab larger than the model's, and a too-short stream */
    assert_int_equal(ftc_loader_init(&ld, &a, 32, 0.1, 3, 100, &err), FTC_EINVAL);
    assert_non_null(strstr(err.msg, "larger than the model's vocab 100"));
    assert_int_equal(ftc_loader_init(&ld, &a, 40000, 0.1, 3, 256, &err), FTC_EINVAL);
    ftc_tokens_free(&a);
    ftc_tokens_free(&b);
    ftc_tokens_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_files),
        cmocka_unit_test(test_files_on_disk),
        cmocka_unit_test(test_corpus_and_loader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
