/*
 * parity.c — see parity.h. Encoding matrix: the (g+m) x g matrix whose top g
 * rows are the identity; parity rows are all ones (xor) or Cauchy rows (rs,
 * from gf_gen_cauchy1_matrix: every g x g submatrix is invertible). Decoding
 * inverts the g x g matrix of g surviving rows and multiplies it into the
 * rows of the lost data blocks; lost parity is re-encoded afterwards.
 * ISA-L takes int lengths, so blocks are processed in 1 GiB segments.
 */
#include "ckpt/parity.h"

#include <ctype.h>
#include <isa-l/erasure_code.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FTC_PARITY_SEG (1u << 30)

struct ftc_parity {
    int g, m;
    bool xor_code;
    uint8_t mat[FTC_PARITY_MAX * FTC_PARITY_MAX]; /* (g+m) x g encoding matrix */
    uint8_t *enc_tbls;                             /* ec_init_tables of the parity rows */
};

int ftc_redundancy_parse(const char *s, ftc_redundancy_t *r, ftc_err_t *err)
{
    memset(r, 0, sizeof *r);
    char *end;
    if (!s || !*s)
        goto bad;
    if (isdigit((unsigned char)s[0])) {
        long k = strtol(s, &end, 10);
        if (*end || k < 0 || k > 16)
            goto bad;
        r->kind = FTC_RED_REPLICA;
        r->copies = (int)k;
        return 0;
    }
    /* every number digits only (strtol also takes blanks and a sign) */
    if (!strncmp(s, "xor:", 4)) {
        long g = strtol(s + 4, &end, 10);
        if (!isdigit((unsigned char)s[4]) || *end || g < 2 || g >= FTC_PARITY_MAX)
            goto bad;
        r->kind = FTC_RED_XOR;
        r->g = (int)g;
        r->m = 1;
        return 0;
    }
    if (!strncmp(s, "rs:", 3)) {
        long g = strtol(s + 3, &end, 10);
        if (!isdigit((unsigned char)s[3]) || *end != '+' || !isdigit((unsigned char)end[1]))
            goto bad;
        char *e2;
        long m = strtol(end + 1, &e2, 10);
        if (*e2 || g < 1 || m < 1 || g > FTC_PARITY_MAX || m > FTC_PARITY_MAX ||
            g + m > FTC_PARITY_MAX)
            goto bad;
        r->kind = FTC_RED_RS;
        r->g = (int)g;
        r->m = (int)m;
        return 0;
    }
bad:
    return ftc_err_set(err, FTC_ECONFIG,
                       "redundancy '%.40s' not understood: use K (replicas, 0..16), xor:G "
                       "(G >= 2) or rs:G+M (G + M <= %d)",
                       s ? s : "", FTC_PARITY_MAX);
}

const char *ftc_redundancy_str(const ftc_redundancy_t *r, char *buf, size_t cap)
{
    if (r->kind == FTC_RED_REPLICA)
        snprintf(buf, cap, "%d", r->copies);
    else if (r->kind == FTC_RED_XOR)
        snprintf(buf, cap, "xor:%d", r->g);
    else
        snprintf(buf, cap, "rs:%d+%d", r->g, r->m);
    return buf;
}

ftc_parity_t *ftc_parity_create(int g, int m, bool xor_code, ftc_err_t *err)
{
    if (g < 1 || m < 1 || g + m > FTC_PARITY_MAX || (xor_code && m != 1)) {
        ftc_err_set(err, FTC_EINVAL, "parity code g=%d m=%d%s: need g >= 1, m >= 1, g + m <= %d",
                    g, m, xor_code ? " (xor needs m = 1)" : "", FTC_PARITY_MAX);
        return NULL;
    }
    ftc_parity_t *p = calloc(1, sizeof *p);
    if (!p || !(p->enc_tbls = malloc((size_t)32 * g * m))) {
        free(p);
        ftc_err_set(err, FTC_ENOMEM, "parity code: out of memory");
        return NULL;
    }
    p->g = g;
    p->m = m;
    p->xor_code = xor_code;
    if (xor_code) {
        for (int i = 0; i < g; i++)
            p->mat[i * g + i] = 1;
        for (int j = 0; j < g; j++)
            p->mat[g * g + j] = 1;
    } else {
        gf_gen_cauchy1_matrix(p->mat, g + m, g);
    }
    ec_init_tables(g, m, p->mat + g * g, p->enc_tbls);
    return p;
}

void ftc_parity_destroy(ftc_parity_t *p)
{
    if (!p)
        return;
    free(p->enc_tbls);
    free(p);
}

uint64_t ftc_parity_block_len(uint64_t max_shard)
{
    return (max_shard + 63) / 64 * 64;
}

/* ec_encode_data over [0, len) in int-sized segments. */
static void ftc__encode(int len_k, int rows, uint8_t *tbls, uint8_t *const *src,
                        uint8_t *const *dst, uint64_t len)
{
    uint8_t *s[FTC_PARITY_MAX], *d[FTC_PARITY_MAX];
    for (uint64_t off = 0; off < len; off += FTC_PARITY_SEG) {
        uint64_t n = len - off < FTC_PARITY_SEG ? len - off : FTC_PARITY_SEG;
        for (int i = 0; i < len_k; i++)
            s[i] = src[i] + off;
        for (int i = 0; i < rows; i++)
            d[i] = dst[i] + off;
        ec_encode_data((int)n, len_k, rows, tbls, s, d);
    }
}

int ftc_parity_encode(const ftc_parity_t *p, const uint8_t *const *data, uint8_t *const *parity,
                      uint64_t len, ftc_err_t *err)
{
    if (!len)
        return 0;
    for (int i = 0; i < p->g; i++)
        if (!data[i])
            return ftc_err_set(err, FTC_EINVAL, "parity encode: data block %d missing", i);
    ftc__encode(p->g, p->m, p->enc_tbls, (uint8_t *const *)data, parity, len);
    return 0;
}

int ftc_parity_decode(const ftc_parity_t *p, uint8_t *const *blocks, const bool *lost, uint64_t len,
                      ftc_err_t *err)
{
    int g = p->g, m = p->m, nlost = 0, lost_data = 0;
    for (int i = 0; i < g + m; i++) {
        nlost += lost[i];
        lost_data += i < g && lost[i];
    }
    if (nlost > m)
        return ftc_err_set(err, FTC_ERANGE,
                           "%d of %d blocks lost; this code (%s %d+%d) rebuilds at most %d", nlost,
                           g + m, p->xor_code ? "xor" : "rs", g, m, m);
    if (!nlost || !len)
        return 0;
    if (lost_data) {
        /* g surviving rows -> their matrix -> invert */
        uint8_t sub[FTC_PARITY_MAX * FTC_PARITY_MAX], inv[FTC_PARITY_MAX * FTC_PARITY_MAX];
        uint8_t dec[FTC_PARITY_MAX * FTC_PARITY_MAX];
        uint8_t *src[FTC_PARITY_MAX], *dst[FTC_PARITY_MAX];
        int r = 0;
        for (int i = 0; i < g + m && r < g; i++) {
            if (lost[i])
                continue;
            memcpy(sub + r * g, p->mat + i * g, (size_t)g);
            src[r++] = blocks[i];
        }
        if (gf_invert_matrix(sub, inv, g) != 0)
            return ftc_err_set(err, FTC_ECORRUPT, "parity decode: singular matrix (cannot happen "
                                                  "for a Cauchy code; report a bug)");
        int nd = 0;
        for (int i = 0; i < g; i++)
            if (lost[i]) {
                memcpy(dec + nd * g, inv + i * g, (size_t)g);
                dst[nd++] = blocks[i];
            }
        uint8_t *tbls = malloc((size_t)32 * g * nd);
        if (!tbls)
            return ftc_err_set(err, FTC_ENOMEM, "parity decode: out of memory");
        ec_init_tables(g, nd, dec, tbls);
        ftc__encode(g, nd, tbls, src, dst, len);
        free(tbls);
    }
    if (nlost > lost_data) { /* lost parity: encode just those rows from the (now whole) data */
        uint8_t rows[FTC_PARITY_MAX * FTC_PARITY_MAX];
        uint8_t *dst[FTC_PARITY_MAX];
        int np = 0;
        for (int j = 0; j < m; j++)
            if (lost[g + j]) {
                memcpy(rows + np * g, p->mat + (g + j) * g, (size_t)g);
                dst[np++] = blocks[g + j];
            }
        uint8_t *tbls = malloc((size_t)32 * g * np);
        if (!tbls)
            return ftc_err_set(err, FTC_ENOMEM, "parity decode: out of memory");
        ec_init_tables(g, np, rows, tbls);
        ftc__encode(g, np, tbls, blocks, dst, len);
        free(tbls);
    }
    return 0;
}
