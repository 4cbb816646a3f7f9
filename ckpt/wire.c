/*
 * wire.c — see wire.h. Header layout (little-endian):
 *
 *   0  magic "FTCW"      4   version u16   6  type u16    8  flags u16
 *   10 reserved u16 (0)  12  sender u32    16 job u64     24 generation u64
 *   32 owner u32         36  req u32 (version 2)          40 seq u64
 *   48 step u64          56  offset u64    64 length u64  72 total u64
 *   80 payload_xxh3 u64  88  keep u64 (PUT; 0 otherwise)
 *   96 mac[16]: HMAC-SHA256(secret, bytes 0..95), first 16 bytes
 *   112 reserved (16 zero bytes)
 */
#include "ckpt/wire.h"
#include "core/le.h"

#include "core/hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

static const char ftc__wire_magic[4] = {'F', 'T', 'C', 'W'};


const char *ftc_wire_type_name(int type)
{
    static const char *names[] = {"?", "HELLO", "PUT", "PUT_END", "ACK", "GET", "NACK"};
    return type > 0 && type < FTC_MSG__MAX ? names[type] : "?";
}

int ftc_wire_key_init(ftc_wire_key_t *k, const char *job, const void *secret, size_t len,
                      ftc_err_t *err)
{
    memset(k, 0, sizeof *k);
    if (!job || !*job)
        return ftc_err_set(err, FTC_EINVAL, "wire key: empty job id");
    if (len < 16 || len > sizeof k->secret)
        return ftc_err_set(err, FTC_EINVAL,
                           "wire key: the job secret must be 16..32 bytes (got %zu)", len);
    memcpy(k->secret, secret, len);
    k->secret_len = len;
    k->job = ftc_xxh3(job, strlen(job));
    return 0;
}

static int ftc__mac(const ftc_wire_key_t *k, const uint8_t *hdr, uint8_t mac[FTC_WIRE_MAC],
                    ftc_err_t *err)
{
    uint8_t full[32];
    size_t n = 0;
    if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, k->secret, k->secret_len, hdr, 96, full,
                   sizeof full, &n) ||
        n < FTC_WIRE_MAC)
        return ftc_err_set(err, FTC_EAUTH, "HMAC-SHA256 unavailable from OpenSSL");
    memcpy(mac, full, FTC_WIRE_MAC);
    return 0;
}

int ftc_wire_encode(const ftc_wire_key_t *k, const ftc_wire_hdr_t *h, uint8_t out[FTC_WIRE_HDR],
                    ftc_err_t *err)
{
    if (h->type == 0 || h->type >= FTC_MSG__MAX)
        return ftc_err_set(err, FTC_EINVAL, "wire: unknown message type %u", h->type);
    if (h->length > FTC_WIRE_MAX_PAYLOAD)
        return ftc_err_set(err, FTC_EINVAL, "wire: payload of %llu bytes exceeds %u",
                           (unsigned long long)h->length, FTC_WIRE_MAX_PAYLOAD);
    memset(out, 0, FTC_WIRE_HDR);
    memcpy(out, ftc__wire_magic, 4);
    ftc_le_wr16(out + 4, FTC_WIRE_VERSION);
    ftc_le_wr16(out + 6, h->type);
    ftc_le_wr16(out + 8, h->flags);
    ftc_le_wr32(out + 12, h->sender);
    ftc_le_wr64(out + 16, k->job);
    ftc_le_wr64(out + 24, h->generation);
    ftc_le_wr32(out + 32, h->owner);
    ftc_le_wr32(out + 36, h->req);
    ftc_le_wr64(out + 40, h->seq);
    ftc_le_wr64(out + 48, h->step);
    ftc_le_wr64(out + 56, h->offset);
    ftc_le_wr64(out + 64, h->length);
    ftc_le_wr64(out + 72, h->total);
    ftc_le_wr64(out + 80, h->payload_xxh3);
    ftc_le_wr64(out + 88, h->type == FTC_MSG_PUT ? h->keep : 0);
    return ftc__mac(k, out, out + 96, err);
}

int ftc_wire_decode(const ftc_wire_key_t *k, const uint8_t *buf, size_t len, ftc_wire_hdr_t *h,
                    ftc_err_t *err)
{
    memset(h, 0, sizeof *h);
    if (len < FTC_WIRE_HDR)
        return ftc_err_set(err, FTC_EPROTO,
                           "wire: message of %zu bytes is shorter than the %d-byte "
                           "header",
                           len, FTC_WIRE_HDR);
    if (memcmp(buf, ftc__wire_magic, 4))
        return ftc_err_set(err, FTC_EPROTO, "wire: bad magic at offset 0 (not an ftc message)");
    if (ftc_le_rd16(buf + 4) != FTC_WIRE_VERSION)
        return ftc_err_set(err, FTC_EPROTO, "wire: protocol version %u at offset 4 (an agent of "
                           "another ftc release); this agent speaks version %d: run the same "
                           "ftc release on every node", ftc_le_rd16(buf + 4), FTC_WIRE_VERSION);
    uint8_t mac[FTC_WIRE_MAC];
    int rc = ftc__mac(k, buf, mac, err);
    if (rc)
        return rc;
    if (CRYPTO_memcmp(mac, buf + 96, FTC_WIRE_MAC))
        return ftc_err_set(err, FTC_EAUTH, "wire: HMAC mismatch (a peer without the job secret, "
                                           "or a corrupted header)");
    if (ftc_le_rd64(buf + 16) != k->job)
        return ftc_err_set(err, FTC_EAUTH, "wire: message of another job (job hash %016llx)",
                           (unsigned long long)ftc_le_rd64(buf + 16));
    h->type = ftc_le_rd16(buf + 6);
    if (h->type == 0 || h->type >= FTC_MSG__MAX)
        return ftc_err_set(err, FTC_EPROTO, "wire: unknown message type %u at offset 6", h->type);
    if (ftc_le_rd16(buf + 10) ||
        (h->type != FTC_MSG_PUT && ftc_le_rd64(buf + 88)))
        return ftc_err_set(err, FTC_EPROTO, "wire: reserved header bytes are not zero");
    for (int i = 112; i < FTC_WIRE_HDR; i++)
        if (buf[i])
            return ftc_err_set(err, FTC_EPROTO, "wire: reserved header bytes are not zero");
    h->flags = ftc_le_rd16(buf + 8);
    h->keep = h->type == FTC_MSG_PUT ? ftc_le_rd64(buf + 88) : 0;
    h->sender = ftc_le_rd32(buf + 12);
    h->job = ftc_le_rd64(buf + 16);
    h->generation = ftc_le_rd64(buf + 24);
    h->owner = ftc_le_rd32(buf + 32);
    h->req = ftc_le_rd32(buf + 36);
    h->seq = ftc_le_rd64(buf + 40);
    h->step = ftc_le_rd64(buf + 48);
    h->offset = ftc_le_rd64(buf + 56);
    h->length = ftc_le_rd64(buf + 64);
    h->total = ftc_le_rd64(buf + 72);
    h->payload_xxh3 = ftc_le_rd64(buf + 80);
    if (h->length > FTC_WIRE_MAX_PAYLOAD)
        return ftc_err_set(err, FTC_EPROTO, "wire: length %llu at offset 64 exceeds %u",
                           (unsigned long long)h->length, FTC_WIRE_MAX_PAYLOAD);
    if (h->type == FTC_MSG_PUT && (h->offset > h->total || h->length > h->total - h->offset))
        return ftc_err_set(err, FTC_EPROTO,
                           "wire: PUT of bytes %llu..+%llu runs past the shard size %llu",
                           (unsigned long long)h->offset, (unsigned long long)h->length,
                           (unsigned long long)h->total);
    if (len - FTC_WIRE_HDR != h->length && !(h->type == FTC_MSG_PUT && len == FTC_WIRE_HDR))
        return ftc_err_set(err, FTC_EPROTO,
                           "wire: %s carries %zu payload bytes, its header says %llu",
                           ftc_wire_type_name(h->type), len - FTC_WIRE_HDR,
                           (unsigned long long)h->length);
    return 0;
}

int ftc_wire_check_payload(const ftc_wire_hdr_t *h, const void *payload, size_t len, ftc_err_t *err)
{
    if (len != h->length)
        return ftc_err_set(err, FTC_EPROTO, "wire: %zu payload bytes, header says %llu", len,
                           (unsigned long long)h->length);
    if (ftc_xxh3(payload, len) != h->payload_xxh3)
        return ftc_err_set(err, FTC_ECORRUPT,
                           "wire: %s of owner %u step %llu: payload checksum mismatch at bytes "
                           "%llu..%llu",
                           ftc_wire_type_name(h->type), h->owner, (unsigned long long)h->step,
                           (unsigned long long)h->offset,
                           (unsigned long long)(h->offset + h->length));
    return 0;
}
