/*
 * sk_buf: a growable byte buffer with a hard cap, and a bounded reader.
 *
 * Used for Skiff's own binary formats (WAL metadata records, snapshots):
 * little-endian integers, strings and blobs as u32 length + bytes.
 *
 * Contract: single-threaded per object. A writer owns its memory (free it
 * with sk_buf_free). Once a write would pass the cap, or an allocation fails,
 * the buffer is marked failed and later writes are ignored: check
 * sk_buf_failed() once at the end instead of after every call. The reader
 * borrows its input; after a read past the end, every read fails and
 * sk_rd_failed() is true.
 */
#ifndef SK_BUF_H
#define SK_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sk_buf {
    uint8_t *data;
    size_t len, cap, max;
    bool failed;
} sk_buf;

void sk_buf_init(sk_buf *b, size_t max);
void sk_buf_free(sk_buf *b);
/* Detaches the data (the caller frees it); the buffer becomes empty. */
uint8_t *sk_buf_take(sk_buf *b, size_t *len);
bool sk_buf_reserve(sk_buf *b, size_t more);
void sk_buf_put(sk_buf *b, const void *p, size_t n);
void sk_buf_u8(sk_buf *b, uint8_t v);
void sk_buf_u16(sk_buf *b, uint16_t v);
void sk_buf_u32(sk_buf *b, uint32_t v);
void sk_buf_u64(sk_buf *b, uint64_t v);
void sk_buf_str(sk_buf *b, const char *s, size_t n); /* u32 length + bytes */
static inline bool sk_buf_failed(const sk_buf *b)
{
    return b->failed;
}

typedef struct sk_rd {
    const uint8_t *p, *end;
    bool failed;
} sk_rd;

static inline void sk_rd_init(sk_rd *r, const void *p, size_t n)
{
    r->p = (const uint8_t *)p;
    r->end = r->p + n;
    r->failed = false;
}
uint8_t sk_rd_u8(sk_rd *r);
uint16_t sk_rd_u16(sk_rd *r);
uint32_t sk_rd_u32(sk_rd *r);
uint64_t sk_rd_u64(sk_rd *r);
/* Returns a pointer into the input and its length (u32 prefix). */
const uint8_t *sk_rd_str(sk_rd *r, size_t *n);
const uint8_t *sk_rd_bytes(sk_rd *r, size_t n);
static inline bool sk_rd_failed(const sk_rd *r)
{
    return r->failed;
}
static inline size_t sk_rd_left(const sk_rd *r)
{
    return r->failed ? 0 : (size_t)(r->end - r->p);
}

#endif
