/*
 * le.h — little-endian fields of on-disk and on-wire formats, read and written
 * through memcpy: a buffer from a file or the network may be unaligned or
 * hostile, and a struct cast would depend on the compiler's layout. ftc's
 * formats are little-endian; a big-endian port adds the swaps here.
 */
#ifndef FTC_CORE_LE_H
#define FTC_CORE_LE_H

#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ftc's formats are little-endian; a big-endian port needs byte swaps in core/le.h"
#endif

static inline uint16_t ftc_le_rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t ftc_le_rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t ftc_le_rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void ftc_le_wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void ftc_le_wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void ftc_le_wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

#endif
