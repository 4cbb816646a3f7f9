/*
 * zshard.c — the compressed shard file (.ftcz) of the persist tier: encoding
 * (zshard.h) and validated decoding (ftc_zshard_info, ftc_zshard_decode in
 * persist.h). docs/persist-format.md is the byte-level spec.
 *
 * A shard is cut into chunks that never straddle a tensor boundary, so each
 * chunk has one element width. Per chunk, in one pass: XOR against the base
 * shard (delta) and a filter by the width (byte shuffle, or bit-plane shuffle
 * whose all-zero planes are dropped and noisy planes stored raw); then one
 * zstd frame, or the bytes as they are when zstd would not save 2%. Chunks
 * are compressed and decompressed on a small pool of threads, one zstd
 * context and one set of scratch buffers per thread (nothing is allocated per
 * chunk), work handed out through an atomic counter.
 *
 * As in shard.c, fields are read through fixed offsets with memcpy; a file is
 * hostile until every field and bound has been checked, and errors name the
 * field and its byte offset.
 */
#include "ckpt/zshard.h"
#include "core/le.h"

#include "ckpt/persist.h"
#include "ckpt/shard.h"
#include "core/hash.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ftc's formats are little-endian; a big-endian port needs byte swaps in zshard.c"
#endif

static const char ftc__z_magic[8] = {'F', 'T', 'C', 'Z', 'S', 'H', 'R', 'D'};
static const char ftc__z_endmagic[8] = {'F', 'T', 'C', 'Z', 'S', 'E', 'N', 'D'};

/* Header field offsets (128 bytes). */
enum {
    ZH_MAGIC = 0,
    ZH_VERSION = 8,
    ZH_HEADER_SIZE = 12,
    ZH_RAW_SIZE = 16,
    ZH_RAW_XXH3 = 24,
    ZH_STEP = 32,
    ZH_BASE_STEP = 40,
    ZH_BASE_XXH3 = 48,
    ZH_CHUNK_BYTES = 56,
    ZH_N_CHUNKS = 64,
    ZH_LEVEL = 68,
    ZH_FLAGS = 72,
    ZH_ENTRY_SIZE = 76,
    ZH_TABLE_OFFSET = 80,
    ZH_DATA_OFFSET = 88,
    ZH_FILE_SIZE = 96,
    ZH_TABLE_XXH3 = 104,
    ZH_RESERVED = 112, /* 8 zero bytes */
    ZH_SELF_XXH3 = 120,
};
/* Chunk table entry field offsets (48 bytes). */
enum {
    ZE_FILE_OFFSET = 0,
    ZE_COMP_SIZE = 8,
    ZE_RAW_OFFSET = 16,
    ZE_RAW_SIZE = 24,
    ZE_WIDTH = 32,
    ZE_CFLAGS = 36, /* version 1: reserved, zero */
    ZE_XXH3 = 40,
};
/* Footer field offsets (32 bytes). */
enum {
    ZF_MAGIC = 0,
    ZF_FILE_SIZE = 8,
    ZF_HEADER_XXH3 = 16,
    ZF_SELF_XXH3 = 24,
};


/* One chunk, as planned by the encoder or read from a validated table. */
typedef struct ftc__zchunk {
    uint64_t raw_offset, raw_size;
    uint32_t width;       /* element width: 1, 2, 4 or 8 */
    uint32_t cflags;      /* FTC_ZSHARD_CHUNK_* */
    bool planes;          /* a bitshuffled chunk (bit filter, width > 1) */
    uint64_t file_offset; /* where its payload lies in the file */
    uint64_t slot_cap;    /* encoder: room reserved for its payload */
    uint64_t comp_size;
    uint64_t xxh3; /* of the payload bytes */
    /* bitshuffled chunks, filled by the decoder's checks */
    uint64_t zero_mask, raw_mask; /* planes that are all zero / stored raw */
    uint64_t zlen;                /* bytes of the zstd frame of the other planes (0: none) */
} ftc__zchunk_t;

/* A validated header (and, after ftc__z_parse, chunk table). */
typedef struct ftc__zhdr {
    uint64_t raw_size, raw_xxh3, step, base_step, base_xxh3, chunk_bytes, file_size;
    uint64_t data_offset;
    uint32_t n_chunks, flags, version;
    int filter; /* ftc_zshard_filter_t */
    int level;
    uint64_t max_chunk; /* largest raw chunk */
} ftc__zhdr_t;

/* ---- filters ---------------------------------------------------------------- */

/*
 * Both filters take a chunk of n elements of w bytes, XOR'd against the base
 * on the way in when there is one (delta and filter in one pass over memory).
 *
 * Byte shuffle: out[b*n + i] = x[i*w + b]: all byte 0s, then all byte 1s...
 *
 * Bit shuffle: the first n8 = n - n % 8 elements become 8w bit planes of
 * pb = n8 / 8 bytes each; plane 8b + k holds bit k of byte b of every element,
 * element e at bit e % 8 of byte e / 8. The n % 8 tail elements stay bytes.
 * Planes are addressed through an array of 8w pointers, so the decoder can
 * point them into the file (raw planes), a scratch buffer (zstd planes) or a
 * zero page (zero planes) without copying.
 *
 * On x86-64, 16 elements at a time go through SSE2 registers (part of the
 * x86-64 baseline, so no dispatch is needed): the w loaded vectors are split
 * into w byte-plane vectors by log2(w) rounds of even/odd byte packs, and
 * each byte-plane vector gives its 8 bit planes by movemask (bit 7) and
 * doubling. Decoding rebuilds a byte-plane vector from 8 x 16 bits with an
 * 8x8 bit transpose on both 64-bit lanes, then interleaves. Other
 * architectures and the last 8 elements use the same transpose on a uint64.
 */

/* 8x8 bit-matrix transpose: bit 8i + k moves to bit 8k + i. */
static inline uint64_t ftc__t8(uint64_t x)
{
    uint64_t t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    x ^= t ^ (t << 28);
    return x;
}

/* Bit planes of the 8 elements from e0 (a multiple of 8). */
static void ftc__bit_enc8(uint8_t *const *pl, const uint8_t *src, const uint8_t *base, uint64_t e0,
                          uint32_t w)
{
    for (uint32_t b = 0; b < w; b++) {
        uint64_t x = 0;
        for (uint32_t i = 0; i < 8; i++) {
            uint64_t o = (e0 + i) * w + b;
            x |= (uint64_t)(uint8_t)(src[o] ^ (base ? base[o] : 0)) << (8 * i);
        }
        x = ftc__t8(x);
        for (uint32_t k = 0; k < 8; k++)
            pl[8 * b + k][e0 / 8] = (uint8_t)(x >> (8 * k));
    }
}

static void ftc__bit_dec8(uint8_t *dst, const uint8_t *const *pl, const uint8_t *base, uint64_t e0,
                          uint32_t w)
{
    for (uint32_t b = 0; b < w; b++) {
        uint64_t x = 0;
        for (uint32_t k = 0; k < 8; k++)
            x |= (uint64_t)pl[8 * b + k][e0 / 8] << (8 * k);
        x = ftc__t8(x);
        for (uint32_t i = 0; i < 8; i++) {
            uint64_t o = (e0 + i) * w + b;
            dst[o] = (uint8_t)(x >> (8 * i)) ^ (base ? base[o] : 0);
        }
    }
}

#if defined(__SSE2__)
#include <emmintrin.h>
#define FTC__Z_SSE2 1
#define FTC__INLINE static inline __attribute__((always_inline))

/* (x, y) -> (even bytes of x then of y, odd bytes of x then of y) */
FTC__INLINE void ftc__split(__m128i x, __m128i y, __m128i *e, __m128i *o)
{
    const __m128i lo = _mm_set1_epi16(0x00FF);
    *e = _mm_packus_epi16(_mm_and_si128(x, lo), _mm_and_si128(y, lo));
    *o = _mm_packus_epi16(_mm_srli_epi16(x, 8), _mm_srli_epi16(y, 8));
}

/* the inverse of ftc__split */
FTC__INLINE void ftc__merge(__m128i e, __m128i o, __m128i *x, __m128i *y)
{
    *x = _mm_unpacklo_epi8(e, o);
    *y = _mm_unpackhi_epi8(e, o);
}

/* 16 elements of w bytes at in (XOR base when given) -> B[b] = byte b of each. */
FTC__INLINE void ftc__load16(__m128i *B, const uint8_t *in, const uint8_t *base, uint32_t w)
{
    __m128i r[8], e[8], o[8];
    for (uint32_t j = 0; j < w; j++) {
        r[j] = _mm_loadu_si128((const __m128i *)(const void *)(in + 16 * j));
        if (base)
            r[j] = _mm_xor_si128(r[j],
                                 _mm_loadu_si128((const __m128i *)(const void *)(base + 16 * j)));
    }
    switch (w) {
    case 1:
        B[0] = r[0];
        break;
    case 2:
        ftc__split(r[0], r[1], &B[0], &B[1]);
        break;
    case 4:
        ftc__split(r[0], r[1], &e[0], &o[0]); /* bytes 0,2 | 1,3 of elements 0-7 */
        ftc__split(r[2], r[3], &e[1], &o[1]); /* of elements 8-15 */
        ftc__split(e[0], e[1], &B[0], &B[2]);
        ftc__split(o[0], o[1], &B[1], &B[3]);
        break;
    case 8:
        for (int j = 0; j < 4; j++) /* bytes 0,2,4,6 | 1,3,5,7 of elements 4j..4j+3 */
            ftc__split(r[2 * j], r[2 * j + 1], &e[j], &o[j]);
        ftc__split(e[0], e[1], &r[0], &r[1]); /* bytes 0,4 | 2,6 of elements 0-7 */
        ftc__split(e[2], e[3], &r[2], &r[3]); /* of elements 8-15 */
        ftc__split(o[0], o[1], &r[4], &r[5]); /* bytes 1,5 | 3,7 of elements 0-7 */
        ftc__split(o[2], o[3], &r[6], &r[7]);
        ftc__split(r[0], r[2], &B[0], &B[4]);
        ftc__split(r[1], r[3], &B[2], &B[6]);
        ftc__split(r[4], r[6], &B[1], &B[5]);
        ftc__split(r[5], r[7], &B[3], &B[7]);
        break;
    }
}

/* The inverse: B[b] -> 16 elements of w bytes at out (XOR base when given). */
FTC__INLINE void ftc__store16(uint8_t *out, const __m128i *B, const uint8_t *base, uint32_t w)
{
    __m128i r[8], e[8], o[8];
    switch (w) {
    case 1:
        r[0] = B[0];
        break;
    case 2:
        ftc__merge(B[0], B[1], &r[0], &r[1]);
        break;
    case 4:
        ftc__merge(B[0], B[2], &e[0], &e[1]);
        ftc__merge(B[1], B[3], &o[0], &o[1]);
        ftc__merge(e[0], o[0], &r[0], &r[1]);
        ftc__merge(e[1], o[1], &r[2], &r[3]);
        break;
    case 8:
        ftc__merge(B[0], B[4], &r[0], &r[2]);
        ftc__merge(B[2], B[6], &r[1], &r[3]);
        ftc__merge(B[1], B[5], &r[4], &r[6]);
        ftc__merge(B[3], B[7], &r[5], &r[7]);
        ftc__merge(r[0], r[1], &e[0], &e[1]);
        ftc__merge(r[2], r[3], &e[2], &e[3]);
        ftc__merge(r[4], r[5], &o[0], &o[1]);
        ftc__merge(r[6], r[7], &o[2], &o[3]);
        for (int j = 0; j < 4; j++)
            ftc__merge(e[j], o[j], &r[2 * j], &r[2 * j + 1]);
        break;
    }
    for (uint32_t j = 0; j < w; j++) {
        __m128i v = r[j];
        if (base)
            v = _mm_xor_si128(v, _mm_loadu_si128((const __m128i *)(const void *)(base + 16 * j)));
        _mm_storeu_si128((__m128i *)(void *)(out + 16 * j), v);
    }
}

/* 8x8 bit transpose of both 64-bit lanes */
FTC__INLINE __m128i ftc__t8x2(__m128i x)
{
    __m128i t;
    t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 7)),
                      _mm_set1_epi64x(0x00AA00AA00AA00AAll));
    x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 7)));
    t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 14)),
                      _mm_set1_epi64x(0x0000CCCC0000CCCCll));
    x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 14)));
    t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 28)),
                      _mm_set1_epi64x(0x00000000F0F0F0F0ll));
    return _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 28)));
}
#else
#define FTC__INLINE static inline
#endif

FTC__INLINE void ftc__byte_enc_w(uint8_t *out, const uint8_t *src, const uint8_t *base, uint64_t n,
                                 uint32_t w)
{
    uint64_t e = 0;
#ifdef FTC__Z_SSE2
    for (; e + 16 <= n; e += 16) {
        __m128i B[8];
        ftc__load16(B, src + e * w, base ? base + e * w : NULL, w);
        for (uint32_t b = 0; b < w; b++)
            _mm_storeu_si128((__m128i *)(void *)(out + b * n + e), B[b]);
    }
#endif
    for (; e < n; e++)
        for (uint32_t b = 0; b < w; b++)
            out[b * n + e] = src[e * w + b] ^ (base ? base[e * w + b] : 0);
}

FTC__INLINE void ftc__byte_dec_w(uint8_t *dst, const uint8_t *const *pl, const uint8_t *base,
                                 uint64_t n, uint32_t w)
{
    uint64_t e = 0;
#ifdef FTC__Z_SSE2
    for (; e + 16 <= n; e += 16) {
        __m128i B[8];
        for (uint32_t b = 0; b < w; b++)
            B[b] = _mm_loadu_si128((const __m128i *)(const void *)(pl[b] + e));
        ftc__store16(dst + e * w, B, base ? base + e * w : NULL, w);
    }
#endif
    for (; e < n; e++)
        for (uint32_t b = 0; b < w; b++)
            dst[e * w + b] = pl[b][e] ^ (base ? base[e * w + b] : 0);
}

/* The SIMD bit kernels work through a block of FTC__BITBLK elements at a
 * time in a small buffer (plane rows FTC__BITBLK / 8 bytes apart) and copy
 * whole rows to or from the planes: the planes of a 4 MiB chunk lie 128 KiB
 * apart, and 32 streams of 2-byte accesses at such a stride all fall in the
 * same L1 set and evict each other (measured: 0.44 GB/s unblocked). */
#define FTC__BITBLK 1024

FTC__INLINE void ftc__bit_enc_w(uint8_t *const *pl, const uint8_t *src, const uint8_t *base,
                                uint64_t n8, uint32_t w)
{
    uint64_t e = 0;
#ifdef FTC__Z_SSE2
    uint8_t tmp[64 * (FTC__BITBLK / 8)];
    while (n8 - e >= 16) {
        uint64_t m = n8 - e < FTC__BITBLK ? (n8 - e) & ~(uint64_t)15 : FTC__BITBLK;
        for (uint64_t j = 0; j < m; j += 16) {
            __m128i B[8];
            ftc__load16(B, src + (e + j) * w, base ? base + (e + j) * w : NULL, w);
            for (uint32_t b = 0; b < w; b++) {
                __m128i v = B[b];
                uint8_t *row = tmp + (size_t)8 * b * (FTC__BITBLK / 8) + j / 8;
                for (int k = 7; k >= 0; k--) {
                    uint16_t mk = (uint16_t)_mm_movemask_epi8(v);
                    memcpy(row + (size_t)k * (FTC__BITBLK / 8), &mk, 2);
                    v = _mm_add_epi8(v, v);
                }
            }
        }
        for (uint32_t p = 0; p < 8 * w; p++)
            memcpy(pl[p] + e / 8, tmp + (size_t)p * (FTC__BITBLK / 8), m / 8);
        e += m;
    }
#endif
    for (; e < n8; e += 8)
        ftc__bit_enc8(pl, src, base, e, w);
}

FTC__INLINE void ftc__bit_dec_w(uint8_t *dst, const uint8_t *const *pl, const uint8_t *base,
                                uint64_t n8, uint32_t w)
{
    uint64_t e = 0;
#ifdef FTC__Z_SSE2
    uint8_t tmp[64 * (FTC__BITBLK / 8)];
    while (n8 - e >= 16) {
        uint64_t m = n8 - e < FTC__BITBLK ? (n8 - e) & ~(uint64_t)15 : FTC__BITBLK;
        for (uint32_t p = 0; p < 8 * w; p++)
            memcpy(tmp + (size_t)p * (FTC__BITBLK / 8), pl[p] + e / 8, m / 8);
        for (uint64_t j = 0; j < m; j += 16) {
            __m128i B[8];
            for (uint32_t b = 0; b < w; b++) {
                /* 16 bits of each of the 8 planes: [lo0 hi0 lo1 hi1 ...] */
                const uint8_t *row = tmp + (size_t)8 * b * (FTC__BITBLK / 8) + j / 8;
                uint16_t mk[8];
                __m128i ev, od;
                for (uint32_t k = 0; k < 8; k++)
                    memcpy(&mk[k], row + (size_t)k * (FTC__BITBLK / 8), 2);
                __m128i v = _mm_set_epi16((short)mk[7], (short)mk[6], (short)mk[5], (short)mk[4],
                                          (short)mk[3], (short)mk[2], (short)mk[1], (short)mk[0]);
                ftc__split(v, v, &ev, &od);
                /* lane 0: the planes' bits of elements 0-7, lane 1: of elements 8-15 */
                B[b] = ftc__t8x2(_mm_unpacklo_epi64(ev, od));
            }
            ftc__store16(dst + (e + j) * w, B, base ? base + (e + j) * w : NULL, w);
        }
        e += m;
    }
#endif
    for (; e < n8; e += 8)
        ftc__bit_dec8(dst, pl, base, e, w);
}

/* Dispatch on the width, so that each kernel is compiled with w a constant. */
#define FTC__BY_WIDTH(w, call)                                                                     \
    switch (w) {                                                                                   \
    case 1: call(1); break;                                                                        \
    case 2: call(2); break;                                                                        \
    case 4: call(4); break;                                                                        \
    default: call(8); break;                                                                       \
    }

static void ftc__byte_enc(uint8_t *out, const uint8_t *src, const uint8_t *base, uint64_t size,
                          uint32_t w)
{
#define C_(W) ftc__byte_enc_w(out, src, base, size / (W), W)
    FTC__BY_WIDTH(w, C_)
#undef C_
}

static void ftc__byte_dec(uint8_t *dst, const uint8_t *const *pl, const uint8_t *base,
                          uint64_t size, uint32_t w)
{
#define C_(W) ftc__byte_dec_w(dst, pl, base, size / (W), W)
    FTC__BY_WIDTH(w, C_)
#undef C_
}

static void ftc__bit_enc(uint8_t *const *pl, const uint8_t *src, const uint8_t *base, uint64_t n8,
                         uint32_t w)
{
#define C_(W) ftc__bit_enc_w(pl, src, base, n8, W)
    FTC__BY_WIDTH(w, C_)
#undef C_
}

static void ftc__bit_dec(uint8_t *dst, const uint8_t *const *pl, const uint8_t *base, uint64_t n8,
                         uint32_t w)
{
#define C_(W) ftc__bit_dec_w(dst, pl, base, n8, W)
    FTC__BY_WIDTH(w, C_)
#undef C_
}

/* dst = a ^ b (b may be NULL: a copy); dst may be a. */
static void ftc__xor(uint8_t *dst, const uint8_t *a, const uint8_t *b, uint64_t n)
{
    if (!b) {
        if (dst != a)
            memcpy(dst, a, n);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        dst[i] = a[i] ^ b[i];
}

/* What a plane is worth compressing. A plane whose (sampled) bytes look
 * uniformly random leaves zstd nothing to gain but costs it its slowest path
 * (Huffman over near-random literals), so it is stored raw; an all-zero plane
 * is not stored at all. Bit planes are judged by their share of one bits,
 * byte planes by the entropy of their byte histogram. */
enum { FTC__PLANE_ZERO = 0, FTC__PLANE_ZSTD = 1, FTC__PLANE_RAW = 2 };
#define FTC__PLANE_NOISY_BIT 0.30  /* min(P(1), P(0)) at or above this: raw */
#define FTC__PLANE_NOISY_BYTE 7.80 /* bits of entropy per byte at or above this: raw */
#define FTC__PLANE_SAMPLE 64       /* pieces of 64 bytes sampled per plane */

static int ftc__plane_kind(const uint8_t *p, uint64_t pb, bool bits)
{
    uint64_t acc = 0, i = 0;
    for (; i + 8 <= pb; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        acc |= x;
    }
    for (; i < pb; i++)
        acc |= p[i];
    if (!acc)
        return FTC__PLANE_ZERO;
    /* a histogram of up to FTC__PLANE_SAMPLE evenly spaced 64-byte pieces */
    uint32_t hist[256] = {0};
    uint64_t pieces = pb / 64, stride = pieces > FTC__PLANE_SAMPLE ? pieces / FTC__PLANE_SAMPLE : 1;
    uint64_t seen = 0;
    if (pieces < 2) {
        for (i = 0; i < pb; i++)
            hist[p[i]]++;
        seen = pb;
    } else {
        for (uint64_t s = 0; s < pieces && s / stride < FTC__PLANE_SAMPLE; s += stride) {
            for (int j = 0; j < 64; j++)
                hist[p[s * 64 + (uint64_t)j]]++;
            seen += 64;
        }
    }
    if (bits) {
        uint64_t ones = 0;
        for (int v = 0; v < 256; v++)
            ones += (uint64_t)hist[v] * (uint64_t)__builtin_popcount((unsigned)v);
        double f = (double)ones / (8.0 * (double)seen);
        if (f > 0.5)
            f = 1.0 - f;
        return f >= FTC__PLANE_NOISY_BIT ? FTC__PLANE_RAW : FTC__PLANE_ZSTD;
    }
    if (seen < 1024) /* too few bytes to tell noise from a skewed histogram */
        return FTC__PLANE_ZSTD;
    double h = 0;
    for (int v = 0; v < 256; v++) {
        if (hist[v]) {
            double q = (double)hist[v] / (double)seen;
            h -= q * log2(q);
        }
    }
    return h >= FTC__PLANE_NOISY_BYTE ? FTC__PLANE_RAW : FTC__PLANE_ZSTD;
}

/* A filtered chunk's planes: np planes of pb bytes, then tail plain bytes. */
static void ftc__plane_geom(const ftc__zchunk_t *c, int filter, uint32_t *np, uint64_t *pb,
                            uint64_t *tail)
{
    uint64_t n = c->raw_size / c->width;
    if (filter == FTC_ZSHARD_FILTER_BIT) {
        *np = 8 * c->width;
        *pb = (n - n % 8) / 8;
        *tail = n % 8 * c->width;
    } else {
        *np = c->width;
        *pb = n;
        *tail = 0;
    }
}

/* Asks for transparent huge pages over the 2 MiB-aligned inside of a large
 * buffer about to be written once: a GiB-sized output otherwise takes a
 * quarter million page faults, a fifth of the codec's time on a 1 GB/s
 * budget. Only a hint: ignored where THP is off or unsupported. */
static void ftc__z_hugepages(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + len) & ~(huge - 1);
    if (p && e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p, (void)len;
#endif
}

/* ---- thread pool -------------------------------------------------------------- */

typedef struct ftc__zworker {
    struct ftc__zjob *job;
    pthread_t tid;
    int started;
    int rc;            /* 0 or the first error this worker hit */
    ftc_err_t err;     /* its message */
    void *zctx;        /* ZSTD_CCtx or ZSTD_DCtx */
    uint8_t *scratch1; /* max_chunk bytes */
    uint8_t *scratch2; /* max_chunk bytes (encoder only) */
    uint8_t *zeros;    /* max_chunk / 2 zero bytes: the decoder's zero planes */
} ftc__zworker_t;

typedef struct ftc__zjob {
    atomic_uint next;   /* next chunk to take */
    atomic_int failed;  /* set when any worker failed: others stop */
    ftc__zchunk_t *chunks;
    uint32_t n_chunks;
    int level;
    int filter;          /* ftc_zshard_filter_t */
    const uint8_t *src;  /* encoder: raw shard; decoder: the file */
    const uint8_t *base; /* delta base or NULL */
    uint8_t *dst;        /* encoder: the output file; decoder: the raw shard */
    int (*one)(struct ftc__zjob *job, ftc__zworker_t *w, uint32_t i);
} ftc__zjob_t;

static void *ftc__zworker_main(void *arg)
{
    ftc__zworker_t *w = arg;
    ftc__zjob_t *job = w->job;
    while (!atomic_load(&job->failed)) {
        unsigned i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n_chunks)
            break;
        int rc = job->one(job, w, i);
        if (rc < 0) {
            w->rc = rc;
            atomic_store(&job->failed, 1);
            break;
        }
    }
    return NULL;
}

static int ftc__zthreads(int threads, uint32_t n_chunks)
{
    long t = threads;
    if (t <= 0) {
        t = sysconf(_SC_NPROCESSORS_ONLN);
        if (t < 1)
            t = 1;
    }
    if (t > 256)
        t = 256;
    if ((uint64_t)t > n_chunks)
        t = n_chunks ? (long)n_chunks : 1;
    return (int)t;
}

/* Runs job on nt workers (worker 0 on the calling thread; a thread that
 * cannot be started just leaves more work to the others). Returns the first
 * worker error, copied into err. */
static int ftc__zrun(ftc__zworker_t *w, int nt, ftc_err_t *err)
{
    for (int i = 1; i < nt; i++)
        w[i].started = pthread_create(&w[i].tid, NULL, ftc__zworker_main, &w[i]) == 0;
    ftc__zworker_main(&w[0]);
    for (int i = 1; i < nt; i++)
        if (w[i].started)
            pthread_join(w[i].tid, NULL);
    for (int i = 0; i < nt; i++) {
        if (w[i].rc < 0) {
            if (err)
                *err = w[i].err;
            return w[i].rc;
        }
    }
    return 0;
}

/* Frees nt workers of the encoder (ZSTD_CCtx) or the decoder (ZSTD_DCtx) and
 * their buffers; what a worker never got is NULL (the array is calloc'd). */
static void ftc__zworkers_free(ftc__zworker_t *w, int nt, bool encoder)
{
    for (int i = 0; i < nt; i++) {
        if (encoder)
            ZSTD_freeCCtx(w[i].zctx);
        else
            ZSTD_freeDCtx(w[i].zctx);
        free(w[i].scratch1);
        free(w[i].scratch2);
        free(w[i].zeros);
    }
    free(w);
}

/* ---- encoding ------------------------------------------------------------------ */

/* The most a bitshuffled chunk's payload may take: its plane masks, a zstd
 * frame of part of its planes (ZSTD_compressBound is not additive: up to 64
 * bytes more than the whole's bound) and the rest raw. */
static inline uint64_t ftc__z_plane_bound(uint64_t raw_size)
{
    return FTC_ZSHARD_PLANE_HEAD + ZSTD_compressBound(raw_size) + 64;
}

/* zstd leaves at least 2% of the bytes out, or the chunk is stored */
static inline bool ftc__z_worth(uint64_t comp, uint64_t raw) { return comp * 50 < raw * 49; }

static int ftc__zenc_fail(ftc__zworker_t *w, uint32_t i, const ftc__zchunk_t *c, size_t r)
{
    return ftc_err_set(&w->err, FTC_EIO, "zstd: chunk %u (raw bytes %llu..%llu): %s", i,
                       (unsigned long long)c->raw_offset,
                       (unsigned long long)(c->raw_offset + c->raw_size), ZSTD_getErrorName(r));
}

/* A filtered chunk (width > 1, format version 2) is coded by planes:
 * [zero_mask][raw_mask][one zstd frame of the other planes, in plane order]
 * [the raw planes, in plane order][tail bytes]. Byte shuffle: w planes of n
 * bytes; bitshuffle: 8w planes of n / 8 bytes and n % 8 tail elements. */
static int ftc__zenc_planes(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    ftc__zchunk_t *c = &job->chunks[i];
    const uint32_t wd = c->width;
    uint32_t np;
    uint64_t pb, tail;
    ftc__plane_geom(c, job->filter, &np, &pb, &tail);
    const bool bits = job->filter == FTC_ZSHARD_FILTER_BIT;
    const uint8_t *src = job->src + c->raw_offset;
    const uint8_t *base = job->base ? job->base + c->raw_offset : NULL;
    uint8_t *pl[64];
    for (uint32_t p = 0; p < np; p++)
        pl[p] = w->scratch1 + p * pb;
    if (bits)
        ftc__bit_enc(pl, src, base, pb * 8, wd);
    else
        ftc__byte_enc(w->scratch1, src, base, c->raw_size, wd);

    uint64_t zero = 0, rawm = 0, zbytes = 0;
    for (uint32_t p = 0; p < np; p++) {
        int k = ftc__plane_kind(pl[p], pb, bits);
        if (k == FTC__PLANE_ZERO) {
            zero |= 1ull << p;
        } else if (k == FTC__PLANE_RAW) {
            rawm |= 1ull << p;
        } else { /* gather the planes for zstd */
            memcpy(w->scratch2 + zbytes, pl[p], pb);
            zbytes += pb;
        }
    }
    uint8_t *slot = job->dst + c->file_offset, *q = slot + FTC_ZSHARD_PLANE_HEAD;
    if (zbytes) {
        size_t r = ZSTD_compressCCtx(w->zctx, q, c->slot_cap - FTC_ZSHARD_PLANE_HEAD, w->scratch2,
                                     zbytes, job->level);
        if (ZSTD_isError(r))
            return ftc__zenc_fail(w, i, c, r);
        if (ftc__z_worth(r, zbytes)) {
            q += r;
        } else { /* zstd did not pay: those planes go raw too */
            uint64_t all = np == 64 ? ~0ull : (1ull << np) - 1;
            rawm = all & ~zero;
        }
    }
    for (uint32_t p = 0; p < np; p++) {
        if (rawm >> p & 1) {
            memcpy(q, pl[p], pb);
            q += pb;
        }
    }
    uint64_t toff = c->raw_size - tail;
    ftc__xor(q, src + toff, base ? base + toff : NULL, tail);
    q += tail;
    ftc_le_wr64(slot, zero);
    ftc_le_wr64(slot + 8, rawm);
    c->comp_size = (uint64_t)(q - slot);
    c->xxh3 = ftc_xxh3(slot, c->comp_size);
    return 0;
}

static int ftc__zenc_one(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    ftc__zchunk_t *c = &job->chunks[i];
    if (c->planes)
        return ftc__zenc_planes(job, w, i);
    const uint8_t *in = job->src + c->raw_offset;
    const uint8_t *base = job->base ? job->base + c->raw_offset : NULL;
    if (base) {
        ftc__xor(w->scratch1, in, base, c->raw_size);
        in = w->scratch1;
    }
    uint8_t *slot = job->dst + c->file_offset;
    size_t r = ZSTD_compressCCtx(w->zctx, slot, c->slot_cap, in, c->raw_size, job->level);
    if (ZSTD_isError(r))
        return ftc__zenc_fail(w, i, c, r);
    if (ftc__z_worth(r, c->raw_size)) {
        c->comp_size = r;
    } else {
        memcpy(slot, in, c->raw_size);
        c->comp_size = c->raw_size;
        c->cflags |= FTC_ZSHARD_CHUNK_STORED;
    }
    c->xxh3 = ftc_xxh3(slot, c->comp_size);
    return 0;
}

typedef struct ftc__zplan {
    ftc__zchunk_t *chunks;
    uint32_t n, cap;
    uint64_t chunk_bytes;
    uint64_t max_chunk;
} ftc__zplan_t;

/* Cuts [start, end) into chunks of at most chunk_bytes (rounded down to a
 * multiple of width). */
static int ftc__zplan_region(ftc__zplan_t *pl, uint64_t start, uint64_t end, uint32_t width,
                             ftc_err_t *err)
{
    uint64_t step = pl->chunk_bytes - pl->chunk_bytes % width;
    while (start < end) {
        uint64_t n = end - start < step ? end - start : step;
        if (pl->n == pl->cap) {
            if (pl->cap >= UINT32_MAX / 2)
                return ftc_err_set(err, FTC_ERANGE, "encode: more than 2^31 chunks");
            uint32_t nc = pl->cap ? pl->cap * 2 : 64;
            ftc__zchunk_t *c = realloc(pl->chunks, (size_t)nc * sizeof *c);
            if (!c)
                return ftc_err_set(err, FTC_ENOMEM, "encode: chunk table: out of memory");
            pl->chunks = c;
            pl->cap = nc;
        }
        ftc__zchunk_t *c = &pl->chunks[pl->n++];
        memset(c, 0, sizeof *c);
        c->raw_offset = start;
        c->raw_size = n;
        c->width = width;
        if (n > pl->max_chunk)
            pl->max_chunk = n;
        start += n;
    }
    return 0;
}

/* Plans the chunks of a shard: head width 1, each tensor at its dtype width
 * (1 without a filter), gaps and the footer width 1. */
static int ftc__zplan_shard(ftc__zplan_t *pl, const ftc_shard_view_t *v, bool shuffle,
                            ftc_err_t *err)
{
    int rc;
    uint64_t cur = 0;
    for (uint32_t i = 0; i < v->n_tensors; i++) {
        ftc_shard_tensor_t t;
        ftc_shard_get(v, i, &t);
        if (t.length == 0)
            continue;
        if (t.offset > cur)
            FTC_CHECK_GOTO(ftc__zplan_region(pl, cur, t.offset, 1, err), rc, out);
        uint32_t w = shuffle ? (uint32_t)ftc_dtype_size(t.dtype) : 1;
        FTC_CHECK_GOTO(ftc__zplan_region(pl, t.offset, t.offset + t.length, w, err), rc, out);
        cur = t.offset + t.length;
    }
    FTC_CHECK_GOTO(ftc__zplan_region(pl, cur, v->size, 1, err), rc, out);
    return 0;
out:
    return rc;
}

int ftc_zshard_encode(const void *raw, uint64_t raw_size, const void *base, uint64_t base_size,
                      uint64_t base_step, int level, int filter, uint64_t chunk_bytes,
                      int threads, uint8_t **out, size_t *out_len, ftc_err_t *err)
{
    *out = NULL;
    *out_len = 0;
    if (!raw || raw_size == 0)
        return ftc_err_set(err, FTC_EINVAL, "encode: no shard given");
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
        return ftc_err_set(err, FTC_EINVAL, "encode: zstd level %d outside %d..%d", level,
                           ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (chunk_bytes < FTC_ZSHARD_MIN_CHUNK || chunk_bytes > FTC_ZSHARD_MAX_CHUNK)
        return ftc_err_set(err, FTC_EINVAL, "encode: chunk_bytes %llu outside %llu..%llu",
                           (unsigned long long)chunk_bytes, FTC_ZSHARD_MIN_CHUNK,
                           FTC_ZSHARD_MAX_CHUNK);
    if (threads < 0)
        return ftc_err_set(err, FTC_EINVAL, "encode: threads %d is negative", threads);
    if (filter < FTC_ZSHARD_FILTER_NONE || filter > FTC_ZSHARD_FILTER_BIT)
        return ftc_err_set(err, FTC_EINVAL,
                           "encode: filter %d is not none (0), byte (1) or bit (2)", filter);
    if (base && (base_size != raw_size || base_step == UINT64_MAX))
        return ftc_err_set(err, FTC_EINVAL,
                           "encode: delta base of %llu bytes (step %llu) cannot apply to a "
                           "shard of %llu bytes",
                           (unsigned long long)base_size, (unsigned long long)base_step,
                           (unsigned long long)raw_size);
    if (raw_size > SIZE_MAX / 2)
        return ftc_err_set(err, FTC_ERANGE, "encode: shard of %llu bytes is too large",
                           (unsigned long long)raw_size);
    ftc_shard_view_t v;
    int rc = ftc_shard_open(&v, raw, raw_size, 0, err);
    if (rc < 0)
        return ftc_err_wrap(err, "encode: input is not a shard");
    if (base && base_step >= v.info.step)
        return ftc_err_set(err, FTC_EINVAL, "encode: delta base step %llu is not before step %llu",
                           (unsigned long long)base_step, (unsigned long long)v.info.step);

    ftc__zplan_t pl = {.chunk_bytes = chunk_bytes};
    ftc__zworker_t *w = NULL;
    uint8_t *buf = NULL;
    int nt = 0;
    FTC_CHECK_GOTO(ftc__zplan_shard(&pl, &v, filter != FTC_ZSHARD_FILTER_NONE, err), rc,
                   undo_plan);

    /* Reserve the most a chunk can take, compress in place, then compact. */
    uint64_t data_off = FTC_ZSHARD_HEADER_SIZE + (uint64_t)pl.n * FTC_ZSHARD_ENTRY_SIZE;
    uint64_t cursor = data_off;
    for (uint32_t i = 0; i < pl.n; i++) {
        ftc__zchunk_t *c = &pl.chunks[i];
        c->planes = filter != FTC_ZSHARD_FILTER_NONE && c->width > 1;
        c->file_offset = cursor;
        c->slot_cap = c->planes ? ftc__z_plane_bound(c->raw_size) : ZSTD_compressBound(c->raw_size);
        cursor += c->slot_cap;
    }
    uint64_t cap = cursor + FTC_ZSHARD_FOOTER_SIZE;
    buf = malloc(cap);
    if (!buf) {
        rc = ftc_err_set(err, FTC_ENOMEM, "encode: cannot allocate %llu bytes",
                         (unsigned long long)cap);
        goto undo_plan;
    }
    ftc__z_hugepages(buf, cap);

    nt = ftc__zthreads(threads, pl.n);
    w = calloc((size_t)nt, sizeof *w);
    if (!w) {
        rc = ftc_err_set(err, FTC_ENOMEM, "encode: out of memory");
        goto undo_buf;
    }
    ftc__zjob_t job = {.chunks = pl.chunks,
                       .n_chunks = pl.n,
                       .level = level,
                       .filter = filter,
                       .src = raw,
                       .base = base,
                       .dst = buf,
                       .one = ftc__zenc_one};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    for (int i = 0; i < nt; i++) {
        w[i].job = &job;
        w[i].zctx = ZSTD_createCCtx();
        w[i].scratch1 = malloc(pl.max_chunk);
        w[i].scratch2 = malloc(pl.max_chunk);
        if (!w[i].zctx || !w[i].scratch1 || !w[i].scratch2) {
            rc = ftc_err_set(err, FTC_ENOMEM, "encode: out of memory for thread %d", i);
            goto undo_workers;
        }
    }
    FTC_CHECK_GOTO(ftc__zrun(w, nt, err), rc, undo_workers);

    /* compact the payloads and fill the table */
    uint8_t *tab = buf + FTC_ZSHARD_HEADER_SIZE;
    cursor = data_off;
    uint32_t version = filter != FTC_ZSHARD_FILTER_NONE ? 2 : 1;
    for (uint32_t i = 0; i < pl.n; i++) {
        ftc__zchunk_t *c = &pl.chunks[i];
        if (c->cflags)
            version = 2;
        if (c->file_offset != cursor)
            memmove(buf + cursor, buf + c->file_offset, c->comp_size);
        c->file_offset = cursor;
        cursor += c->comp_size;
        uint8_t *e = tab + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        memset(e, 0, FTC_ZSHARD_ENTRY_SIZE);
        ftc_le_wr64(e + ZE_FILE_OFFSET, c->file_offset);
        ftc_le_wr64(e + ZE_COMP_SIZE, c->comp_size);
        ftc_le_wr64(e + ZE_RAW_OFFSET, c->raw_offset);
        ftc_le_wr64(e + ZE_RAW_SIZE, c->raw_size);
        ftc_le_wr32(e + ZE_WIDTH, c->width);
        ftc_le_wr32(e + ZE_CFLAGS, c->cflags);
        ftc_le_wr64(e + ZE_XXH3, c->xxh3);
    }
    uint64_t file_size = cursor + FTC_ZSHARD_FOOTER_SIZE;

    uint8_t *h = buf;
    memset(h, 0, FTC_ZSHARD_HEADER_SIZE);
    memcpy(h + ZH_MAGIC, ftc__z_magic, 8);
    ftc_le_wr32(h + ZH_VERSION, version);
    ftc_le_wr32(h + ZH_HEADER_SIZE, FTC_ZSHARD_HEADER_SIZE);
    ftc_le_wr64(h + ZH_RAW_SIZE, raw_size);
    ftc_le_wr64(h + ZH_RAW_XXH3, ftc_xxh3(raw, raw_size));
    ftc_le_wr64(h + ZH_STEP, v.info.step);
    ftc_le_wr64(h + ZH_BASE_STEP, base ? base_step : UINT64_MAX);
    ftc_le_wr64(h + ZH_BASE_XXH3, base ? ftc_xxh3(base, base_size) : 0);
    ftc_le_wr64(h + ZH_CHUNK_BYTES, chunk_bytes);
    ftc_le_wr32(h + ZH_N_CHUNKS, pl.n);
    ftc_le_wr32(h + ZH_LEVEL, (uint32_t)level);
    ftc_le_wr32(h + ZH_FLAGS, (filter == FTC_ZSHARD_FILTER_BYTE ? FTC_ZSHARD_FLAG_SHUFFLE : 0) |
                           (filter == FTC_ZSHARD_FILTER_BIT ? FTC_ZSHARD_FLAG_BITSHUFFLE : 0) |
                           (base ? FTC_ZSHARD_FLAG_DELTA : 0));
    ftc_le_wr32(h + ZH_ENTRY_SIZE, FTC_ZSHARD_ENTRY_SIZE);
    ftc_le_wr64(h + ZH_TABLE_OFFSET, FTC_ZSHARD_HEADER_SIZE);
    ftc_le_wr64(h + ZH_DATA_OFFSET, data_off);
    ftc_le_wr64(h + ZH_FILE_SIZE, file_size);
    ftc_le_wr64(h + ZH_TABLE_XXH3, ftc_xxh3(tab, (uint64_t)pl.n * FTC_ZSHARD_ENTRY_SIZE));
    ftc_le_wr64(h + ZH_SELF_XXH3, ftc_xxh3(h, ZH_SELF_XXH3));

    uint8_t *f = buf + cursor;
    memset(f, 0, FTC_ZSHARD_FOOTER_SIZE);
    memcpy(f + ZF_MAGIC, ftc__z_endmagic, 8);
    ftc_le_wr64(f + ZF_FILE_SIZE, file_size);
    ftc_le_wr64(f + ZF_HEADER_XXH3, ftc_le_rd64(h + ZH_SELF_XXH3));
    ftc_le_wr64(f + ZF_SELF_XXH3, ftc_xxh3(f, ZF_SELF_XXH3));

    uint8_t *shrunk = realloc(buf, file_size);
    if (shrunk)
        buf = shrunk;
    *out = buf;
    *out_len = file_size;
    buf = NULL;
    rc = 0;
undo_workers:
    ftc__zworkers_free(w, nt, true);
undo_buf:
    free(buf);
undo_plan:
    free(pl.chunks);
    return rc;
}

/* ---- validation ------------------------------------------------------------------ */

/* Validates the header, footer and chunk table of an .ftcz buffer. When
 * chunks is not NULL, *chunks gets a malloc'd copy of the table. */
static int ftc__z_parse(const uint8_t *p, size_t len, ftc__zhdr_t *h, ftc__zchunk_t **chunks,
                        ftc_err_t *err)
{
    memset(h, 0, sizeof *h);
    if (chunks)
        *chunks = NULL;
    if (!p || len < FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ETRUNC, "file is %zu bytes, shorter than the %d-byte header",
                           p ? len : 0, FTC_ZSHARD_HEADER_SIZE);
    if (memcmp(p + ZH_MAGIC, ftc__z_magic, 8))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "magic at offset 0 is wrong (expected \"FTCZSHRD\"): not an .ftcz file");
    uint32_t version = ftc_le_rd32(p + ZH_VERSION);
    if (version < FTC_ZSHARD_VERSION_MIN || version > FTC_ZSHARD_VERSION)
        return ftc_err_set(err, FTC_EVERSION,
                           "format version at offset %d is %u; this build reads versions %d..%d",
                           ZH_VERSION, version, FTC_ZSHARD_VERSION_MIN, FTC_ZSHARD_VERSION);
    h->version = version;
    if (ftc_xxh3(p, ZH_SELF_XXH3) != ftc_le_rd64(p + ZH_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT, "header checksum at offset %d does not match",
                           ZH_SELF_XXH3);
    if (ftc_le_rd32(p + ZH_HEADER_SIZE) != FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "header_size at offset %d is %u, must be %d",
                           ZH_HEADER_SIZE, ftc_le_rd32(p + ZH_HEADER_SIZE), FTC_ZSHARD_HEADER_SIZE);
    if (ftc_le_rd32(p + ZH_ENTRY_SIZE) != FTC_ZSHARD_ENTRY_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "entry_size at offset %d is %u, must be %d",
                           ZH_ENTRY_SIZE, ftc_le_rd32(p + ZH_ENTRY_SIZE), FTC_ZSHARD_ENTRY_SIZE);
    if (ftc_le_rd64(p + ZH_RESERVED) != 0)
        return ftc_err_set(err, FTC_ECORRUPT, "reserved header bytes at offset %d are not zero",
                           ZH_RESERVED);
    h->flags = ftc_le_rd32(p + ZH_FLAGS);
    uint32_t known = FTC_ZSHARD_FLAG_SHUFFLE | FTC_ZSHARD_FLAG_DELTA |
                     (version >= 2 ? FTC_ZSHARD_FLAG_BITSHUFFLE : 0);
    if ((h->flags & ~known) ||
        ((h->flags & FTC_ZSHARD_FLAG_SHUFFLE) && (h->flags & FTC_ZSHARD_FLAG_BITSHUFFLE)))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "flags at offset %d are %#x; version %u defines %#x, with at most one "
                           "of shuffle (0x1) and bitshuffle (0x4)",
                           ZH_FLAGS, h->flags, version, known);
    h->filter = (h->flags & FTC_ZSHARD_FLAG_BITSHUFFLE) ? FTC_ZSHARD_FILTER_BIT
                : (h->flags & FTC_ZSHARD_FLAG_SHUFFLE) ? FTC_ZSHARD_FILTER_BYTE
                                                       : FTC_ZSHARD_FILTER_NONE;
    h->level = (int)ftc_le_rd32(p + ZH_LEVEL);
    if (h->level < ZSTD_minCLevel() || h->level > ZSTD_maxCLevel())
        return ftc_err_set(err, FTC_ECORRUPT, "zstd level at offset %d is %d (must be %d..%d)",
                           ZH_LEVEL, h->level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    h->chunk_bytes = ftc_le_rd64(p + ZH_CHUNK_BYTES);
    if (h->chunk_bytes < FTC_ZSHARD_MIN_CHUNK || h->chunk_bytes > FTC_ZSHARD_MAX_CHUNK)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk_bytes at offset %d is %llu (must be %llu..%llu)", ZH_CHUNK_BYTES,
                           (unsigned long long)h->chunk_bytes, FTC_ZSHARD_MIN_CHUNK,
                           FTC_ZSHARD_MAX_CHUNK);
    h->step = ftc_le_rd64(p + ZH_STEP);
    h->base_step = ftc_le_rd64(p + ZH_BASE_STEP);
    h->base_xxh3 = ftc_le_rd64(p + ZH_BASE_XXH3);
    bool delta = h->flags & FTC_ZSHARD_FLAG_DELTA;
    if (delta && h->base_step >= h->step)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "base_step at offset %d is %llu, not before the step %llu of the file",
                           ZH_BASE_STEP, (unsigned long long)h->base_step,
                           (unsigned long long)h->step);
    if (!delta && (h->base_step != UINT64_MAX || h->base_xxh3 != 0))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "base_step/base_xxh3 at offset %d are set but the delta flag is not",
                           ZH_BASE_STEP);
    h->raw_size = ftc_le_rd64(p + ZH_RAW_SIZE);
    h->raw_xxh3 = ftc_le_rd64(p + ZH_RAW_XXH3);
    h->n_chunks = ftc_le_rd32(p + ZH_N_CHUNKS);
    if (h->raw_size == 0 || h->n_chunks == 0)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "raw_size at offset %d (%llu) and n_chunks at offset %d (%u) must be "
                           "positive",
                           ZH_RAW_SIZE, (unsigned long long)h->raw_size, ZH_N_CHUNKS, h->n_chunks);
    if (h->raw_size > SIZE_MAX / 2)
        return ftc_err_set(err, FTC_ECORRUPT, "raw_size at offset %d (%llu) is absurd",
                           ZH_RAW_SIZE, (unsigned long long)h->raw_size);
    if (ftc_le_rd64(p + ZH_TABLE_OFFSET) != FTC_ZSHARD_HEADER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT, "table_offset at offset %d is %llu, must be %d",
                           ZH_TABLE_OFFSET, (unsigned long long)ftc_le_rd64(p + ZH_TABLE_OFFSET),
                           FTC_ZSHARD_HEADER_SIZE);
    h->data_offset = FTC_ZSHARD_HEADER_SIZE + (uint64_t)h->n_chunks * FTC_ZSHARD_ENTRY_SIZE;
    if (ftc_le_rd64(p + ZH_DATA_OFFSET) != h->data_offset)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "data_offset at offset %d is %llu, must be %llu for %u chunks",
                           ZH_DATA_OFFSET, (unsigned long long)ftc_le_rd64(p + ZH_DATA_OFFSET),
                           (unsigned long long)h->data_offset, h->n_chunks);
    h->file_size = ftc_le_rd64(p + ZH_FILE_SIZE);
    if (h->file_size < h->data_offset + h->n_chunks + FTC_ZSHARD_FOOTER_SIZE)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "file_size at offset %d is %llu, too small for %u chunks",
                           ZH_FILE_SIZE, (unsigned long long)h->file_size, h->n_chunks);
    if (h->file_size > len)
        return ftc_err_set(err, FTC_ETRUNC,
                           "file truncated: file_size at offset %d says %llu bytes, only %zu "
                           "present",
                           ZH_FILE_SIZE, (unsigned long long)h->file_size, len);
    if (h->file_size < len)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "%zu bytes present but file_size at offset %d says %llu: trailing data",
                           len, ZH_FILE_SIZE, (unsigned long long)h->file_size);
    /* footer */
    uint64_t foff = h->file_size - FTC_ZSHARD_FOOTER_SIZE;
    const uint8_t *f = p + foff;
    if (memcmp(f + ZF_MAGIC, ftc__z_endmagic, 8))
        return ftc_err_set(err, FTC_ECORRUPT, "footer magic at offset %llu is wrong",
                           (unsigned long long)foff);
    if (ftc_xxh3(f, ZF_SELF_XXH3) != ftc_le_rd64(f + ZF_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT, "footer checksum at offset %llu does not match",
                           (unsigned long long)(foff + ZF_SELF_XXH3));
    if (ftc_le_rd64(f + ZF_FILE_SIZE) != h->file_size)
        return ftc_err_set(err, FTC_ECORRUPT, "footer file_size at offset %llu differs from the "
                           "header's", (unsigned long long)(foff + ZF_FILE_SIZE));
    if (ftc_le_rd64(f + ZF_HEADER_XXH3) != ftc_le_rd64(p + ZH_SELF_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "footer header_xxh3 at offset %llu does not match the header",
                           (unsigned long long)(foff + ZF_HEADER_XXH3));
    /* chunk table */
    const uint8_t *tab = p + FTC_ZSHARD_HEADER_SIZE;
    if (ftc_xxh3(tab, (uint64_t)h->n_chunks * FTC_ZSHARD_ENTRY_SIZE) !=
        ftc_le_rd64(p + ZH_TABLE_XXH3))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk table checksum (table_xxh3 at offset %d) does not match",
                           ZH_TABLE_XXH3);
    ftc__zchunk_t *cs = NULL;
    if (chunks) {
        cs = calloc(h->n_chunks, sizeof *cs);
        if (!cs)
            return ftc_err_set(err, FTC_ENOMEM, "chunk table of %u entries: out of memory",
                               h->n_chunks);
    }
    bool filtered = h->filter != FTC_ZSHARD_FILTER_NONE;
    uint64_t file_cur = h->data_offset, raw_cur = 0;
    int rc = 0;
    for (uint32_t i = 0; i < h->n_chunks; i++) {
        const uint8_t *e = tab + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        uint64_t eoff = FTC_ZSHARD_HEADER_SIZE + (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE;
        ftc__zchunk_t c = {.file_offset = ftc_le_rd64(e + ZE_FILE_OFFSET),
                           .comp_size = ftc_le_rd64(e + ZE_COMP_SIZE),
                           .raw_offset = ftc_le_rd64(e + ZE_RAW_OFFSET),
                           .raw_size = ftc_le_rd64(e + ZE_RAW_SIZE),
                           .width = ftc_le_rd32(e + ZE_WIDTH),
                           .cflags = ftc_le_rd32(e + ZE_CFLAGS),
                           .xxh3 = ftc_le_rd64(e + ZE_XXH3)};
        if (c.file_offset != file_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: file_offset at offset %llu is %llu, must be %llu", i,
                             (unsigned long long)(eoff + ZE_FILE_OFFSET),
                             (unsigned long long)c.file_offset, (unsigned long long)file_cur);
            goto undo_chunks;
        }
        if (c.comp_size == 0 || c.comp_size > foff - file_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: comp_size at offset %llu is %llu; %llu bytes are left "
                             "before the footer",
                             i, (unsigned long long)(eoff + ZE_COMP_SIZE),
                             (unsigned long long)c.comp_size,
                             (unsigned long long)(foff - file_cur));
            goto undo_chunks;
        }
        if (c.raw_offset != raw_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: raw_offset at offset %llu is %llu, must be %llu", i,
                             (unsigned long long)(eoff + ZE_RAW_OFFSET),
                             (unsigned long long)c.raw_offset, (unsigned long long)raw_cur);
            goto undo_chunks;
        }
        if (c.raw_size == 0 || c.raw_size > h->chunk_bytes ||
            c.raw_size > h->raw_size - raw_cur) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: raw_size at offset %llu is %llu (must be 1..%llu and end "
                             "by raw_size %llu)",
                             i, (unsigned long long)(eoff + ZE_RAW_SIZE),
                             (unsigned long long)c.raw_size, (unsigned long long)h->chunk_bytes,
                             (unsigned long long)h->raw_size);
            goto undo_chunks;
        }
        if ((c.width != 1 && c.width != 2 && c.width != 4 && c.width != 8) ||
            (!filtered && c.width != 1) || c.raw_size % c.width) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: width at offset %llu is %u (must be 1, 2, 4 or 8, 1 "
                             "without a filter, and divide raw_size %llu)",
                             i, (unsigned long long)(eoff + ZE_WIDTH), c.width,
                             (unsigned long long)c.raw_size);
            goto undo_chunks;
        }
        c.planes = version >= 2 && filtered && c.width > 1;
        if ((version < 2 && c.cflags != 0) || (c.cflags & ~FTC_ZSHARD_CHUNK_STORED) ||
            (c.planes && c.cflags != 0)) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: flags at offset %llu are %#x (version 1: 0; version 2: "
                             "0 or stored 0x1, and 0 on a chunk coded by planes)",
                             i, (unsigned long long)(eoff + ZE_CFLAGS), c.cflags);
            goto undo_chunks;
        }
        uint64_t lo = 1, hi = ZSTD_compressBound(c.raw_size);
        if (c.cflags & FTC_ZSHARD_CHUNK_STORED)
            lo = hi = c.raw_size;
        else if (c.planes)
            lo = FTC_ZSHARD_PLANE_HEAD, hi = ftc__z_plane_bound(c.raw_size);
        if (c.comp_size < lo || c.comp_size > hi) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: comp_size at offset %llu is %llu, must be %llu..%llu for "
                             "%llu raw bytes (%s)",
                             i, (unsigned long long)(eoff + ZE_COMP_SIZE),
                             (unsigned long long)c.comp_size, (unsigned long long)lo,
                             (unsigned long long)hi, (unsigned long long)c.raw_size,
                             (c.cflags & FTC_ZSHARD_CHUNK_STORED) ? "stored"
                             : c.planes                           ? "planes"
                                                                  : "zstd");
            goto undo_chunks;
        }
        if (c.raw_size > h->max_chunk)
            h->max_chunk = c.raw_size;
        file_cur += c.comp_size;
        raw_cur += c.raw_size;
        if (cs)
            cs[i] = c;
    }
    if (file_cur != foff) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "chunks end at byte %llu but the footer starts at %llu: unaccounted bytes",
                         (unsigned long long)file_cur, (unsigned long long)foff);
        goto undo_chunks;
    }
    if (raw_cur != h->raw_size) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "chunks cover %llu raw bytes but raw_size at offset %d says %llu",
                         (unsigned long long)raw_cur, ZH_RAW_SIZE,
                         (unsigned long long)h->raw_size);
        goto undo_chunks;
    }
    if (chunks)
        *chunks = cs;
    return 0;
undo_chunks:
    free(cs);
    return rc;
}

int ftc_zshard_info(const void *file, size_t len, ftc_zshard_info_t *info, ftc_err_t *err)
{
    ftc__zhdr_t h;
    memset(info, 0, sizeof *info);
    int rc = ftc__z_parse(file, len, &h, NULL, err);
    if (rc < 0)
        return rc;
    info->step = h.step;
    info->raw_size = h.raw_size;
    info->raw_xxh3 = h.raw_xxh3;
    info->base_step = (h.flags & FTC_ZSHARD_FLAG_DELTA) ? h.base_step : UINT64_MAX;
    info->base_raw_xxh3 = h.base_xxh3;
    info->chunk_bytes = h.chunk_bytes;
    info->n_chunks = h.n_chunks;
    info->level = h.level;
    info->shuffle = h.filter != FTC_ZSHARD_FILTER_NONE;
    info->filter = h.filter;
    info->version = h.version;
    return 0;
}

/* ---- decoding ------------------------------------------------------------------ */

/* Checks a chunk coded by planes (its checksum already matched) and fills
 * its masks and zlen: masks inside the chunk's planes and disjoint, the sizes
 * adding up to comp_size exactly, and the zstd frame (when some planes are
 * neither zero nor raw) declaring exactly those planes' bytes. */
static int ftc__z_check_planes(const uint8_t *src, ftc__zchunk_t *c, int filter, uint32_t i,
                               ftc_err_t *err)
{
    uint32_t np;
    uint64_t pb, tail;
    ftc__plane_geom(c, filter, &np, &pb, &tail);
    const uint64_t all = np == 64 ? ~0ull : (1ull << np) - 1;
    c->zero_mask = ftc_le_rd64(src);
    c->raw_mask = ftc_le_rd64(src + 8);
    if ((c->zero_mask | c->raw_mask) & ~all || (c->zero_mask & c->raw_mask))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk %u at offset %llu: plane masks %#llx (zero) and %#llx (raw) "
                           "overlap or name planes beyond its %u",
                           i, (unsigned long long)c->file_offset,
                           (unsigned long long)c->zero_mask, (unsigned long long)c->raw_mask, np);
    unsigned nraw = 0, nz = np;
    for (uint32_t p = 0; p < np; p++) {
        nraw += (unsigned)(c->raw_mask >> p & 1);
        nz -= (unsigned)((c->raw_mask | c->zero_mask) >> p & 1);
    }
    uint64_t fixed = FTC_ZSHARD_PLANE_HEAD + nraw * pb + tail;
    if (fixed > c->comp_size || (nz == 0 && fixed != c->comp_size))
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk %u at offset %llu: %u raw planes of %llu bytes and %llu tail "
                           "bytes need %llu bytes; comp_size is %llu",
                           i, (unsigned long long)c->file_offset, nraw, (unsigned long long)pb,
                           (unsigned long long)tail, (unsigned long long)fixed,
                           (unsigned long long)c->comp_size);
    c->zlen = c->comp_size - fixed;
    if (nz == 0)
        return 0;
    const uint8_t *f = src + FTC_ZSHARD_PLANE_HEAD;
    unsigned long long fcs = ZSTD_getFrameContentSize(f, c->zlen);
    if (fcs != nz * pb)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk %u at offset %llu: zstd frame content size %s%llu differs from "
                           "the %u compressed planes' %llu bytes",
                           i, (unsigned long long)c->file_offset,
                           fcs >= ZSTD_CONTENTSIZE_ERROR ? "unknown/" : "",
                           fcs >= ZSTD_CONTENTSIZE_ERROR ? 0ull : fcs, nz,
                           (unsigned long long)(nz * pb));
    size_t fsz = ZSTD_findFrameCompressedSize(f, c->zlen);
    if (ZSTD_isError(fsz) || fsz != c->zlen)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "chunk %u at offset %llu: not exactly one zstd frame of %llu bytes "
                           "after the plane masks",
                           i, (unsigned long long)c->file_offset, (unsigned long long)c->zlen);
    return 0;
}

static int ftc__zdec_planes(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    const ftc__zchunk_t *c = &job->chunks[i];
    uint32_t np;
    uint64_t pb, tail;
    ftc__plane_geom(c, job->filter, &np, &pb, &tail);
    const uint8_t *src = job->src + c->file_offset + FTC_ZSHARD_PLANE_HEAD;
    const uint8_t *base = job->base ? job->base + c->raw_offset : NULL;
    uint8_t *dst = job->dst + c->raw_offset;
    if (c->zlen) {
        uint64_t want = 0;
        for (uint32_t p = 0; p < np; p++)
            want += ((c->zero_mask | c->raw_mask) >> p & 1) ? 0 : pb;
        size_t r = ZSTD_decompressDCtx(w->zctx, w->scratch1, want, src, c->zlen);
        if (ZSTD_isError(r) || r != want)
            return ftc_err_set(&w->err, FTC_ECORRUPT, "chunk %u at file offset %llu: zstd: %s", i,
                               (unsigned long long)c->file_offset,
                               ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame");
    }
    const uint8_t *pl[64];
    const uint8_t *rawp = src + c->zlen, *zp = w->scratch1;
    for (uint32_t p = 0; p < np; p++) {
        if (c->zero_mask >> p & 1) {
            pl[p] = w->zeros;
        } else if (c->raw_mask >> p & 1) {
            pl[p] = rawp;
            rawp += pb;
        } else {
            pl[p] = zp;
            zp += pb;
        }
    }
    if (job->filter == FTC_ZSHARD_FILTER_BIT)
        ftc__bit_dec(dst, pl, base, pb * 8, c->width);
    else
        ftc__byte_dec(dst, pl, base, c->raw_size, c->width);
    uint64_t toff = c->raw_size - tail;
    ftc__xor(dst + toff, rawp, base ? base + toff : NULL, tail);
    return 0;
}

static int ftc__zdec_one(ftc__zjob_t *job, ftc__zworker_t *w, uint32_t i)
{
    const ftc__zchunk_t *c = &job->chunks[i];
    if (c->planes)
        return ftc__zdec_planes(job, w, i);
    uint8_t *dst = job->dst + c->raw_offset;
    const uint8_t *base = job->base ? job->base + c->raw_offset : NULL;
    const uint8_t *src = job->src + c->file_offset;
    bool unshuffle = c->width > 1; /* a byte-shuffled chunk of a version 1 file */
    if (!(c->cflags & FTC_ZSHARD_CHUNK_STORED)) {
        uint8_t *into = unshuffle ? w->scratch1 : dst;
        size_t r = ZSTD_decompressDCtx(w->zctx, into, c->raw_size, src, c->comp_size);
        if (ZSTD_isError(r))
            return ftc_err_set(&w->err, FTC_ECORRUPT, "chunk %u at file offset %llu: zstd: %s", i,
                               (unsigned long long)c->file_offset, ZSTD_getErrorName(r));
        if (r != c->raw_size)
            return ftc_err_set(&w->err, FTC_ECORRUPT,
                               "chunk %u at file offset %llu: decompressed to %zu bytes, the "
                               "table says %llu",
                               i, (unsigned long long)c->file_offset, r,
                               (unsigned long long)c->raw_size);
        src = into;
    }
    if (unshuffle) {
        const uint8_t *pl[8];
        for (uint32_t b = 0; b < c->width; b++)
            pl[b] = src + b * (c->raw_size / c->width);
        ftc__byte_dec(dst, pl, base, c->raw_size, c->width);
    } else
        ftc__xor(dst, src, base, c->raw_size);
    return 0;
}

int ftc_zshard_decode(const void *file, size_t len, const void *base, uint64_t base_size,
                      uint8_t **raw, uint64_t *raw_size, ftc_err_t *err)
{
    *raw = NULL;
    *raw_size = 0;
    ftc__zhdr_t h;
    ftc__zchunk_t *cs = NULL;
    int rc = ftc__z_parse(file, len, &h, &cs, err);
    if (rc < 0)
        return rc;
    const uint8_t *p = file;
    bool delta = h.flags & FTC_ZSHARD_FLAG_DELTA;
    if (delta) {
        if (!base) {
            rc = ftc_err_set(err, FTC_EINVAL, "delta against step %llu: no base shard given",
                             (unsigned long long)h.base_step);
            goto undo_chunks;
        }
        if (base_size != h.raw_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "delta against step %llu: base shard is %llu bytes, raw_size is %llu",
                             (unsigned long long)h.base_step, (unsigned long long)base_size,
                             (unsigned long long)h.raw_size);
            goto undo_chunks;
        }
        if (ftc_xxh3(base, base_size) != h.base_xxh3) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "delta against step %llu: base shard checksum differs from "
                             "base_xxh3 at offset %d",
                             (unsigned long long)h.base_step, ZH_BASE_XXH3);
            goto undo_chunks;
        }
    }
    /* every chunk checksum and frame header before anything is allocated for
     * the output, so a hostile table cannot make us allocate for nothing */
    for (uint32_t i = 0; i < h.n_chunks; i++) {
        const uint8_t *src = p + cs[i].file_offset;
        if (ftc_xxh3(src, cs[i].comp_size) != cs[i].xxh3) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u: compressed bytes at offset %llu do not match their "
                             "checksum (table offset %llu)",
                             i, (unsigned long long)cs[i].file_offset,
                             (unsigned long long)(FTC_ZSHARD_HEADER_SIZE +
                                                  (uint64_t)i * FTC_ZSHARD_ENTRY_SIZE + ZE_XXH3));
            goto undo_chunks;
        }
        if (cs[i].cflags & FTC_ZSHARD_CHUNK_STORED)
            continue; /* its size is raw_size, checked with the table */
        if (cs[i].planes) {
            FTC_CHECK_GOTO(ftc__z_check_planes(src, &cs[i], h.filter, i, err), rc, undo_chunks);
            continue;
        }
        unsigned long long fcs = ZSTD_getFrameContentSize(src, cs[i].comp_size);
        if (fcs != cs[i].raw_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u at offset %llu: zstd frame content size %s%llu differs "
                             "from raw_size %llu",
                             i, (unsigned long long)cs[i].file_offset,
                             fcs >= ZSTD_CONTENTSIZE_ERROR ? "unknown/" : "",
                             fcs >= ZSTD_CONTENTSIZE_ERROR ? 0ull : fcs,
                             (unsigned long long)cs[i].raw_size);
            goto undo_chunks;
        }
        size_t fsz = ZSTD_findFrameCompressedSize(src, cs[i].comp_size);
        if (ZSTD_isError(fsz) || fsz != cs[i].comp_size) {
            rc = ftc_err_set(err, FTC_ECORRUPT,
                             "chunk %u at offset %llu: not exactly one zstd frame of %llu bytes",
                             i, (unsigned long long)cs[i].file_offset,
                             (unsigned long long)cs[i].comp_size);
            goto undo_chunks;
        }
    }
    uint8_t *out = malloc(h.raw_size);
    if (!out) {
        rc = ftc_err_set(err, FTC_ENOMEM, "cannot allocate %llu bytes for the shard",
                         (unsigned long long)h.raw_size);
        goto undo_chunks;
    }
    ftc__z_hugepages(out, h.raw_size);
    int nt = ftc__zthreads(0, h.n_chunks);
    ftc__zworker_t *w = calloc((size_t)nt, sizeof *w);
    if (!w) {
        rc = ftc_err_set(err, FTC_ENOMEM, "decode: out of memory");
        goto undo_out;
    }
    ftc__zjob_t job = {.chunks = cs,
                       .n_chunks = h.n_chunks,
                       .filter = h.filter,
                       .src = p,
                       .base = delta ? base : NULL,
                       .dst = out,
                       .one = ftc__zdec_one};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    for (int i = 0; i < nt; i++) {
        w[i].job = &job;
        w[i].zctx = ZSTD_createDCtx();
        bool filtered = h.filter != FTC_ZSHARD_FILTER_NONE;
        w[i].scratch1 = filtered ? malloc(h.max_chunk) : NULL;
        /* a zero plane: at most raw_size / 2 bytes (byte planes of width >= 2) */
        w[i].zeros = filtered ? calloc(1, h.max_chunk / 2 + 1) : NULL;
        if (!w[i].zctx || (filtered && (!w[i].scratch1 || !w[i].zeros))) {
            rc = ftc_err_set(err, FTC_ENOMEM, "decode: out of memory for thread %d", i);
            goto undo_workers;
        }
    }
    FTC_CHECK_GOTO(ftc__zrun(w, nt, err), rc, undo_workers);
    if (ftc_xxh3(out, h.raw_size) != h.raw_xxh3) {
        rc = ftc_err_set(err, FTC_ECORRUPT,
                         "decoded shard does not match raw_xxh3 at offset %d%s", ZH_RAW_XXH3,
                         delta ? " (wrong delta base?)" : "");
        goto undo_workers;
    }
    *raw = out;
    *raw_size = h.raw_size;
    out = NULL;
    rc = 0;
undo_workers:
    ftc__zworkers_free(w, nt, false);
undo_out:
    free(out);
undo_chunks:
    free(cs);
    return rc;
}
