/* hash.c — xxh3 through libxxhash (Debian's libxxhash-dev). */
#include "core/hash.h"

#include "ftc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct ftc_hash {
    XXH3_state_t *st;
};

uint64_t ftc_xxh3(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

ftc_hash_t *ftc_hash_create(void)
{
    ftc_hash_t *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->st = XXH3_createState();
    if (!h->st) {
        free(h);
        return NULL;
    }
    XXH3_64bits_reset(h->st);
    return h;
}

void ftc_hash_destroy(ftc_hash_t *h)
{
    if (!h)
        return;
    XXH3_freeState(h->st);
    free(h);
}

void ftc_hash_reset(ftc_hash_t *h)
{
    XXH3_64bits_reset(h->st);
}

void ftc_hash_update(ftc_hash_t *h, const void *data, size_t len)
{
    XXH3_64bits_update(h->st, data, len);
}

uint64_t ftc_hash_digest(const ftc_hash_t *h)
{
    return XXH3_64bits_digest(h->st);
}

void ftc_hash_hex(uint64_t h, char buf[17])
{
    snprintf(buf, 17, "%016llx", (unsigned long long)h);
}

int ftc_hash_parse_hex(const char *s, uint64_t *out)
{
    if (!s || strlen(s) != 16)
        return FTC_EINVAL;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return FTC_EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}
