/*
 * kzip: compresses a RecordBatch's records section with one of Kafka's
 * codecs, in the framing Kafka's own writers use, so that every client
 * reads the result:
 *   gzip   a gzip member (RFC 1952), zlib level `level` (-1: zlib's default);
 *   snappy xerial framing (the magic header, then blocks of 32 KiB each
 *          prefixed by its compressed length), as Kafka's Java writer;
 *   lz4    one LZ4 frame, 64 KiB independent blocks, no checksums (Kafka's
 *          Java reader refuses linked blocks), level as Kafka's
 *          compression.lz4.level (1-17; from 3 on, high compression);
 *   zstd   one zstd frame at `level`.
 *
 * Contract: pure, any thread. The output is one malloc'd buffer (*out, to
 * free()) of *out_len bytes. Returns 0, SK_ERR_NOMEM, or SK_ERR_INVAL (codec
 * not one of gzip, snappy, lz4, zstd; a codec library's failure).
 */
#ifndef KZIP_H
#define KZIP_H

#include <stddef.h>
#include <stdint.h>

__attribute__((warn_unused_result)) int kz_compress(int codec, int level, const uint8_t *src,
                                                    size_t n, uint8_t **out, size_t *out_len);

#endif
