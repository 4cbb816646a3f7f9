/*
 * data.c — token files (validated header, checksums), the byte-level
 * tokenizer, the generated corpus and the index-addressed loader of data.h.
 */
#include "trainer/data.h"

#include "core/fsio.h"
#include "core/hash.h"
#include "trainer/rng.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian; this loader assumes a little-endian host"
#endif

/* Header field offsets (docs/trainer.md). */
enum {
    FTC__TOK_MAGIC = 0,        /* 8 bytes "FTCTOKEN" */
    FTC__TOK_VERSION = 8,      /* u32 */
    FTC__TOK_HDR_SIZE = 12,    /* u32, 64 */
    FTC__TOK_VOCAB = 16,       /* u32, 1..65536 */
    FTC__TOK_WIDTH = 20,       /* u32, bytes per token: 2 */
    FTC__TOK_COUNT = 24,       /* u64 */
    FTC__TOK_XXH3 = 32,        /* u64, xxh3 of the token bytes */
    FTC__TOK_RESERVED = 40,    /* 16 bytes, zero */
    FTC__TOK_HDR_XXH3 = 56,    /* u64, xxh3 of bytes 0..55 */
};

static uint32_t ftc__rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t ftc__rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int ftc_tokens_parse(const void *buf, size_t len, const char *what, ftc_tokens_t *out,
                     ftc_err_t *err)
{
    const uint8_t *b = buf;
    memset(out, 0, sizeof *out);
    if (len < FTC_TOKENS_HEADER_SIZE)
        return ftc_err_set(err, FTC_ETRUNC,
                           "%s: %zu bytes, shorter than the %d-byte token file header", what, len,
                           FTC_TOKENS_HEADER_SIZE);
    if (memcmp(b + FTC__TOK_MAGIC, FTC_TOKENS_MAGIC, 8) != 0)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: bad magic at offset 0 (not a token file; make one with `ftc train "
                           "--tokenize TEXT --data FILE`)",
                           what);
    uint64_t hx = ftc__rd64(b + FTC__TOK_HDR_XXH3);
    if (ftc_xxh3(b, FTC__TOK_HDR_XXH3) != hx)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: header checksum mismatch at offset %d", what,
                           FTC__TOK_HDR_XXH3);
    uint32_t version = ftc__rd32(b + FTC__TOK_VERSION);
    if (version != FTC_TOKENS_VERSION)
        return ftc_err_set(err, FTC_EVERSION, "%s: token file version %u (this build reads %d)",
                           what, version, FTC_TOKENS_VERSION);
    if (ftc__rd32(b + FTC__TOK_HDR_SIZE) != FTC_TOKENS_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: header size %u at offset %d, expected %d",
                           what, ftc__rd32(b + FTC__TOK_HDR_SIZE), FTC__TOK_HDR_SIZE,
                           FTC_TOKENS_HEADER_SIZE);
    uint32_t vocab = ftc__rd32(b + FTC__TOK_VOCAB);
    if (vocab < 1 || vocab > 65536)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: vocab size %u at offset %d, expected 1..65536",
                           what, vocab, FTC__TOK_VOCAB);
    if (ftc__rd32(b + FTC__TOK_WIDTH) != 2)
        return ftc_err_set(err, FTC_ECORRUPT, "%s: token width %u at offset %d, expected 2", what,
                           ftc__rd32(b + FTC__TOK_WIDTH), FTC__TOK_WIDTH);
    for (int i = FTC__TOK_RESERVED; i < FTC__TOK_HDR_XXH3; i++)
        if (b[i])
            return ftc_err_set(err, FTC_ECORRUPT, "%s: reserved byte at offset %d is not zero",
                               what, i);
    uint64_t n = ftc__rd64(b + FTC__TOK_COUNT);
    uint64_t body = len - FTC_TOKENS_HEADER_SIZE;
    if (n > body / 2)
        return ftc_err_set(err, FTC_ETRUNC,
                           "%s: truncated: the header promises %llu tokens (%llu bytes) but %llu "
                           "bytes follow it",
                           what, (unsigned long long)n, (unsigned long long)n * 2,
                           (unsigned long long)body);
    if (body != n * 2)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: %llu bytes after the header, expected %llu (%llu tokens)", what,
                           (unsigned long long)body, (unsigned long long)n * 2,
                           (unsigned long long)n);
    const uint8_t *t = b + FTC_TOKENS_HEADER_SIZE;
    if (ftc_xxh3(t, (size_t)body) != ftc__rd64(b + FTC__TOK_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%s: token checksum mismatch (the tokens are corrupt)", what);
    uint16_t *tok = malloc(n ? (size_t)n * 2 : 1);
    if (!tok)
        return ftc_err_set(err, FTC_ENOMEM, "%s: out of memory for %llu tokens", what,
                           (unsigned long long)n);
    memcpy(tok, t, (size_t)n * 2);
    for (uint64_t i = 0; i < n; i++) {
        if (tok[i] >= vocab) {
            unsigned bad = tok[i];
            free(tok);
            return ftc_err_set(err, FTC_ECORRUPT, "%s: token %u at index %llu is >= vocab size %u",
                               what, bad, (unsigned long long)i, vocab);
        }
    }
    out->vocab = vocab;
    out->n = n;
    out->tok = tok;
    return 0;
}

int ftc_tokens_load(const char *path, ftc_tokens_t *out, ftc_err_t *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    int rc = ftc_fs_read_file(path, (size_t)1 << 40, &buf, &len, err);
    if (rc < 0)
        return rc;
    rc = ftc_tokens_parse(buf, len, path, out, err);
    free(buf);
    return rc;
}

int ftc_tokens_encode(const uint16_t *tok, uint64_t n, uint32_t vocab, uint8_t **buf,
                      size_t *len, ftc_err_t *err)
{
    if (vocab < 1 || vocab > 65536)
        return ftc_err_set(err, FTC_EINVAL, "token file vocab %u: must be 1..65536", vocab);
    for (uint64_t i = 0; i < n; i++)
        if (tok[i] >= vocab)
            return ftc_err_set(err, FTC_EINVAL, "token %u at index %llu is >= vocab size %u",
                               tok[i], (unsigned long long)i, vocab);
    size_t total = FTC_TOKENS_HEADER_SIZE + (size_t)n * 2;
    uint8_t *b = calloc(1, total);
    if (!b)
        return ftc_err_set(err, FTC_ENOMEM, "out of memory for a %zu-byte token file", total);
    uint32_t v32;
    uint64_t v64;
    memcpy(b + FTC__TOK_MAGIC, FTC_TOKENS_MAGIC, 8);
    v32 = FTC_TOKENS_VERSION, memcpy(b + FTC__TOK_VERSION, &v32, 4);
    v32 = FTC_TOKENS_HEADER_SIZE, memcpy(b + FTC__TOK_HDR_SIZE, &v32, 4);
    memcpy(b + FTC__TOK_VOCAB, &vocab, 4);
    v32 = 2, memcpy(b + FTC__TOK_WIDTH, &v32, 4);
    memcpy(b + FTC__TOK_COUNT, &n, 8);
    memcpy(b + FTC_TOKENS_HEADER_SIZE, tok, (size_t)n * 2);
    v64 = ftc_xxh3(b + FTC_TOKENS_HEADER_SIZE, (size_t)n * 2), memcpy(b + FTC__TOK_XXH3, &v64, 8);
    v64 = ftc_xxh3(b, FTC__TOK_HDR_XXH3), memcpy(b + FTC__TOK_HDR_XXH3, &v64, 8);
    *buf = b;
    *len = total;
    return 0;
}

int ftc_tokens_save(const char *path, const uint16_t *tok, uint64_t n, uint32_t vocab,
                    ftc_err_t *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (!*name)
        return ftc_err_set(err, FTC_EINVAL, "token file path '%s' names a directory", path);
    if (slash) {
        size_t dl = (size_t)(slash - path);
        if (dl >= sizeof dir)
            return ftc_err_set(err, FTC_EINVAL, "token file path too long");
        memcpy(dir, path, dl);
        dir[dl] = 0;
        if (dl == 0)
            strcpy(dir, "/");
    } else {
        strcpy(dir, ".");
    }
    uint8_t *buf;
    size_t len;
    int rc = ftc_tokens_encode(tok, n, vocab, &buf, &len, err);
    if (rc < 0)
        return rc;
    rc = ftc_fs_write_file_atomic(dir, name, buf, len, NULL, err);
    free(buf);
    return rc;
}

void ftc_tokens_free(ftc_tokens_t *t)
{
    if (!t)
        return;
    free(t->tok);
    t->tok = NULL;
    t->n = 0;
}

int ftc_tokenize_file(const char *text_path, const char *out_path, uint64_t *n, ftc_err_t *err)
{
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = ftc_fs_read_file(text_path, (size_t)1 << 36, &text, &len, err);
    if (rc < 0)
        return rc;
    uint16_t *tok = malloc(len ? len * 2 : 1);
    if (!tok) {
        free(text);
        return ftc_err_set(err, FTC_ENOMEM, "%s: out of memory for %zu tokens", text_path, len);
    }
    for (size_t i = 0; i < len; i++)
        tok[i] = text[i];
    free(text);
    rc = ftc_tokens_save(out_path, tok, len, 256, err);
    free(tok);
    if (rc == 0 && n)
        *n = len;
    return rc;
}

/* ---- the generated corpus ------------------------------------------------------- */

static const char *const ftc__subj[] = {
    "the cat", "a dog", "my friend", "the old man", "a young girl", "the teacher", "our neighbor",
    "the bird", "a farmer", "the doctor", "her brother", "the king",
};
static const char *const ftc__verb[] = {
    "sees", "likes", "finds", "carries", "paints", "feeds", "follows", "remembers", "builds",
    "visits",
};
static const char *const ftc__obj[] = {
    "the red ball", "a small house", "the river", "an apple", "the green door", "a long letter",
    "the quiet garden", "a wooden boat", "the market", "a bright star",
};
static const char *const ftc__adv[] = {
    "every morning", "with care", "in the rain", "after dinner", "once again", "without a word",
};
static const char *const ftc__tail[] = {
    "and then goes home", "because it is late", "and everyone smiles", "while the sun sets",
};

#define FTC__N(a) (sizeof(a) / sizeof((a)[0]))

char *ftc_corpus_text(uint64_t seed, size_t bytes, size_t *len)
{
    size_t cap = bytes + 256;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    ftc_rng_t r;
    ftc_rng_seed(&r, seed);
    size_t n = 0;
    while (n < bytes) {
        char sent[256];
        const char *subj = ftc__subj[ftc_rng_below(&r, FTC__N(ftc__subj))];
        const char *verb = ftc__verb[ftc_rng_below(&r, FTC__N(ftc__verb))];
        const char *obj = ftc__obj[ftc_rng_below(&r, FTC__N(ftc__obj))];
        uint64_t form = ftc_rng_below(&r, 4);
        int k;
        if (form == 0)
            k = snprintf(sent, sizeof sent, "%s %s %s.", subj, verb, obj);
        else if (form == 1)
            k = snprintf(sent, sizeof sent, "%s %s %s %s.", subj, verb, obj,
                         ftc__adv[ftc_rng_below(&r, FTC__N(ftc__adv))]);
        else if (form == 2)
            k = snprintf(sent, sizeof sent, "%s %s %s %s.", subj, verb, obj,
                         ftc__tail[ftc_rng_below(&r, FTC__N(ftc__tail))]);
        else
            k = snprintf(sent, sizeof sent, "does %s see %s? yes, %s %s it.", subj, obj, subj,
                         verb);
        sent[0] = (char)(sent[0] - 'a' + 'A'); /* every form starts lower-case */
        size_t sl = (size_t)k;
        if (n + sl + 1 > cap - 1)
            break;
        memcpy(s + n, sent, sl);
        n += sl;
        s[n++] = ftc_rng_below(&r, 5) == 0 ? '\n' : ' ';
    }
    if (n > bytes)
        n = bytes; /* exactly the size asked for */
    s[n] = 0;
    if (len)
        *len = n;
    return s;
}

int ftc_corpus_generate(uint64_t seed, size_t bytes, ftc_tokens_t *out, ftc_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t n;
    char *text = ftc_corpus_text(seed, bytes, &n);
    if (!text)
        return ftc_err_set(err, FTC_ENOMEM, "corpus: out of memory for %zu bytes", bytes);
    out->tok = malloc(n ? n * 2 : 1);
    if (!out->tok) {
        free(text);
        return ftc_err_set(err, FTC_ENOMEM, "corpus: out of memory for %zu tokens", n);
    }
    for (size_t i = 0; i < n; i++)
        out->tok[i] = (uint8_t)text[i];
    free(text);
    out->n = n;
    out->vocab = 256;
    return 0;
}

/* ---- the loader -------------------------------------------------------------------- */

int ftc_loader_init(ftc_loader_t *ld, const ftc_tokens_t *tokens, int T, double eval_fraction,
                    uint64_t seed, int model_vocab, ftc_err_t *err)
{
    memset(ld, 0, sizeof *ld);
    if (T < 1)
        return ftc_err_set(err, FTC_EINVAL, "loader: sequence length %d < 1", T);
    if (!(eval_fraction > 0.0 && eval_fraction < 1.0))
        return ftc_err_set(err, FTC_EINVAL, "loader: held-out fraction %g: must be in (0, 1)",
                           eval_fraction);
    if (tokens->vocab > (uint32_t)model_vocab)
        return ftc_err_set(err, FTC_EINVAL,
                           "token file vocab %u is larger than the model's vocab %d (wrong "
                           "tokenizer or model size)",
                           tokens->vocab, model_vocab);
    uint64_t n = tokens->n;
    uint64_t n_eval_tok = (uint64_t)((double)n * eval_fraction);
    uint64_t train_end = n - n_eval_tok;
    if (train_end < (uint64_t)T + 2 || n_eval_tok < (uint64_t)T + 1)
        return ftc_err_set(err, FTC_EINVAL,
                           "loader: %llu tokens are too few for sequences of %d with %.0f%% held "
                           "out (need about %llu)",
                           (unsigned long long)n, T, eval_fraction * 100,
                           (unsigned long long)((uint64_t)(T + 2) * 2 / eval_fraction));
    ld->tok = tokens->tok;
    ld->n = n;
    ld->T = T;
    ld->seed = seed;
    ld->train_end = train_end;
    ld->eval_begin = train_end;
    ld->n_eval = (n_eval_tok - 1) / (uint64_t)T;
    return 0;
}

uint64_t ftc_loader_position(const ftc_loader_t *ld, uint64_t g)
{
    uint64_t span = ld->train_end - (uint64_t)ld->T; /* starts 0 .. train_end-T-1 */
    uint64_t h = ftc_mix64(ftc_mix64(ld->seed ^ 0x5851f42d4c957f2dull) ^ g);
    return (uint64_t)(((unsigned __int128)h * span) >> 64);
}

static void ftc__window(const ftc_loader_t *ld, uint64_t start, int32_t *in, int32_t *tg)
{
    for (int t = 0; t < ld->T; t++) {
        in[t] = ld->tok[start + (uint64_t)t];
        tg[t] = ld->tok[start + (uint64_t)t + 1];
    }
}

void ftc_loader_batch(const ftc_loader_t *ld, uint64_t first, int B, int32_t *inputs,
                      int32_t *targets)
{
    for (int b = 0; b < B; b++)
        ftc__window(ld, ftc_loader_position(ld, first + (uint64_t)b), inputs + (size_t)b * ld->T,
                    targets + (size_t)b * ld->T);
}

void ftc_loader_eval_batch(const ftc_loader_t *ld, uint64_t first, int B, int32_t *inputs,
                           int32_t *targets)
{
    for (int b = 0; b < B; b++) {
        uint64_t i = (first + (uint64_t)b) % ld->n_eval;
        ftc__window(ld, ld->eval_begin + i * (uint64_t)ld->T, inputs + (size_t)b * ld->T,
                    targets + (size_t)b * ld->T);
    }
}
