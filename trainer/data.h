/*
 * data.h — the trainer's data: token files, a byte-level tokenizer, a
 * generated corpus, and a loader whose samples are pure functions of their
 * global index.
 *
 * Token file (docs/trainer.md has the byte-level table): a 64-byte header
 * (magic "FTCTOKEN", version 1, header size, vocab size, token width 2, token
 * count, xxh3 of the tokens, xxh3 of the header) and then the tokens as
 * little-endian uint16. Every field is checked on load and every failure is
 * an error naming the file, the field and what was expected.
 *
 * Loader: the token stream is split into a training part (the first 90%)
 * and a held-out part (the rest). Training sample g (a global index: step *
 * samples-per-step + position in the global batch) is the window of T+1
 * tokens at a position that is a hash of (seed, g); held-out sample i is the
 * i-th non-overlapping window of the held-out part. Nothing depends on the
 * data-parallel layout or on what was read before: any rank can read any
 * sample of any step, which is what elastic recovery and bit-identical
 * resumption need. The cursor to checkpoint is therefore just the number of
 * samples consumed.
 *
 * Thread-safety: a loaded token buffer and a loader are read-only after
 * creation and may be shared by threads.
 */
#ifndef FTC_TRAINER_DATA_H
#define FTC_TRAINER_DATA_H

#include "core/err.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTC_TOKENS_MAGIC "FTCTOKEN"
#define FTC_TOKENS_VERSION 1
#define FTC_TOKENS_HEADER_SIZE 64

typedef struct ftc_tokens {
    uint32_t vocab; /* every token is < vocab */
    uint64_t n;     /* number of tokens */
    uint16_t *tok;  /* n tokens (owned) */
} ftc_tokens_t;

/* Validates a token file image (header, sizes, both checksums, every token
 * < vocab) and copies its tokens into out. what names it in errors.
 * FTC_ETRUNC, FTC_ECORRUPT, FTC_EVERSION, FTC_ENOMEM. */
int ftc_tokens_parse(const void *buf, size_t len, const char *what, ftc_tokens_t *out,
                     ftc_err_t *err);
/* Reads and validates a token file (as ftc_tokens_parse). */
int ftc_tokens_load(const char *path, ftc_tokens_t *out, ftc_err_t *err);
/* Encodes tokens as a file image (malloc'd; caller frees). Tokens >= vocab
 * are FTC_EINVAL. */
int ftc_tokens_encode(const uint16_t *tok, uint64_t n, uint32_t vocab, uint8_t **buf,
                      size_t *len, ftc_err_t *err);
/* Writes a token file crash-safely (temp, fsync, rename, fsync dir). */
int ftc_tokens_save(const char *path, const uint16_t *tok, uint64_t n, uint32_t vocab,
                    ftc_err_t *err);
void ftc_tokens_free(ftc_tokens_t *t); /* frees t->tok; t may be zeroed or NULL */

/* The byte-level tokenizer: each byte of the text file becomes one token
 * (vocab 256). Writes the token file at out_path; *n gets the count. */
int ftc_tokenize_file(const char *text_path, const char *out_path, uint64_t *n, ftc_err_t *err);

/* A generated corpus: `bytes` bytes of English-like sentences from a
 * small grammar (subjects, verbs, objects, adverbs, a few fixed phrases),
 * deterministic for a seed, byte-tokenized (vocab 256). Learnable structure:
 * a small model brings the loss from ln(256) = 5.5 to well under 2. */
int ftc_corpus_generate(uint64_t seed, size_t bytes, ftc_tokens_t *out, ftc_err_t *err);
/* The same corpus as text (malloc'd, NUL-terminated; caller frees). */
char *ftc_corpus_text(uint64_t seed, size_t bytes, size_t *len);

typedef struct ftc_loader {
    const uint16_t *tok;    /* the token stream (not owned) */
    uint64_t n;             /* tokens in it */
    int T;                  /* sequence length: each sample has T inputs, T targets */
    uint64_t seed;          /* mixes the training positions */
    uint64_t train_end;     /* training windows start in [0, train_end - T - 1] */
    uint64_t eval_begin;    /* held-out windows start at eval_begin + i*T */
    uint64_t n_eval;        /* non-overlapping held-out windows */
} ftc_loader_t;

/* Sets a loader over tokens for sequences of T, holding out eval_fraction
 * (0 < f < 1; typically 0.1) of the stream. FTC_EINVAL when the vocab is
 * larger than model_vocab, or either part is too short for one window. */
int ftc_loader_init(ftc_loader_t *ld, const ftc_tokens_t *tokens, int T, double eval_fraction,
                    uint64_t seed, int model_vocab, ftc_err_t *err);
/* Start position of training sample g (pure function of seed and g). */
uint64_t ftc_loader_position(const ftc_loader_t *ld, uint64_t g);
/* Fills B samples, global indices first .. first+B-1: inputs and targets
 * [B*T] each (targets are the inputs shifted by one). */
void ftc_loader_batch(const ftc_loader_t *ld, uint64_t first, int B, int32_t *inputs,
                      int32_t *targets);
/* Held-out samples first .. first+B-1 (modulo n_eval). */
void ftc_loader_eval_batch(const ftc_loader_t *ld, uint64_t first, int B, int32_t *inputs,
                           int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
