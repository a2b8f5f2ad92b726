#include "sk_buf.h"

#include <stdlib.h>
#include <string.h>

void sk_buf_init(sk_buf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max ? max : SIZE_MAX;
}

void sk_buf_free(sk_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

uint8_t *sk_buf_take(sk_buf *b, size_t *len)
{
    uint8_t *d = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}

bool sk_buf_reserve(sk_buf *b, size_t more)
{
    if (b->failed)
        return false;
    if (more > b->max - b->len) {
        b->failed = true;
        return false;
    }
    if (b->len + more <= b->cap)
        return true;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < b->len + more)
        ncap = ncap > SIZE_MAX / 2 ? SIZE_MAX : ncap * 2;
    if (ncap > b->max)
        ncap = b->max;
    uint8_t *n = realloc(b->data, ncap);
    if (!n) {
        b->failed = true;
        return false;
    }
    b->data = n;
    b->cap = ncap;
    return true;
}

void sk_buf_put(sk_buf *b, const void *p, size_t n)
{
    if (!sk_buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

void sk_buf_u8(sk_buf *b, uint8_t v)
{
    sk_buf_put(b, &v, 1);
}

void sk_buf_u16(sk_buf *b, uint16_t v)
{
    uint8_t t[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    sk_buf_put(b, t, 2);
}

void sk_buf_u32(sk_buf *b, uint32_t v)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    sk_buf_put(b, t, 4);
}

void sk_buf_u64(sk_buf *b, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    sk_buf_put(b, t, 8);
}

void sk_buf_str(sk_buf *b, const char *s, size_t n)
{
    sk_buf_u32(b, (uint32_t)n);
    sk_buf_put(b, s, n);
}

static const uint8_t *take(sk_rd *r, size_t n)
{
    if (r->failed || (size_t)(r->end - r->p) < n) {
        r->failed = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

uint8_t sk_rd_u8(sk_rd *r)
{
    const uint8_t *p = take(r, 1);
    return p ? p[0] : 0;
}

uint16_t sk_rd_u16(sk_rd *r)
{
    const uint8_t *p = take(r, 2);
    return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}

uint32_t sk_rd_u32(sk_rd *r)
{
    const uint8_t *p = take(r, 4);
    if (!p)
        return 0;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t sk_rd_u64(sk_rd *r)
{
    const uint8_t *p = take(r, 8);
    if (!p)
        return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

const uint8_t *sk_rd_str(sk_rd *r, size_t *n)
{
    uint32_t len = sk_rd_u32(r);
    const uint8_t *p = take(r, len);
    *n = p ? len : 0;
    return p;
}

const uint8_t *sk_rd_bytes(sk_rd *r, size_t n)
{
    return take(r, n);
}
