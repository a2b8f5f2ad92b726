/*
 * b64: base64 (RFC 4648, standard alphabet, '=' padding), the encoding of
 * bytes fields in etcd's JSON gateway (protobuf's JSON mapping).
 *
 * Contract: pure functions, any thread; the caller owns every buffer.
 */
#ifndef B64_H
#define B64_H

#include <stddef.h>
#include <stdint.h>

/* Characters b64_encode writes for n bytes (without a terminating NUL). */
static inline size_t b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Most bytes b64_decode can write for n characters. */
static inline size_t b64_decoded_max(size_t n)
{
    return n / 4 * 3 + 3;
}

/* Writes b64_encoded_len(n) characters and a NUL to out. */
void b64_encode(const uint8_t *in, size_t n, char *out);

/* Decodes n characters (padding optional at the very end) into out, which
 * holds b64_decoded_max(n) bytes; returns the length written, or -1 when
 * the input is not base64. */
long b64_decode(const char *in, size_t n, uint8_t *out) __attribute__((warn_unused_result));

#endif
