/*
 * kbatch: Kafka RecordBatch v2 (magic 2): validation, the in-place rewrites a
 * broker makes, and record iteration (decompressing gzip, snappy raw and
 * xerial, lz4 frame, zstd).
 *
 * Layout (big-endian), header of KB_HEADER_SIZE bytes:
 *   0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 |
 *   16 magic i8 | 17 crc u32 (CRC-32C of bytes [21, end)) | 21 attributes i16 |
 *   23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 |
 *   43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 |
 *   57 recordsCount i32 | 61 records...
 *
 * Contract: pure functions over caller buffers, any thread, no allocation
 * except kb_foreach_record (bounded decompression scratch, freed before it
 * returns). Results are Kafka codes from sk_err.h (>= 0) or SK_ERR_PARSE.
 */
#ifndef KBATCH_H
#define KBATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"

#define KB_HEADER_SIZE 61
#define KB_LOG_OVERHEAD 12 /* baseOffset + batchLength */

enum {
    KB_CODEC_NONE = 0,
    KB_CODEC_GZIP = 1,
    KB_CODEC_SNAPPY = 2,
    KB_CODEC_LZ4 = 3,
    KB_CODEC_ZSTD = 4,
};
#define KB_ATTR_CODEC_MASK 0x07
#define KB_ATTR_LOG_APPEND_TIME 0x08
#define KB_ATTR_TRANSACTIONAL 0x10
#define KB_ATTR_CONTROL 0x20
#define KB_ATTR_DELETE_HORIZON 0x40

typedef struct kb_header {
    int64_t base_offset;
    int32_t batch_length;
    int32_t leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
} kb_header;

/* Parses the header of the batch at p (len bytes available). Returns 0, or
 * SK_ERR_PARSE when fewer than KB_HEADER_SIZE bytes or batchLength does not
 * fit in len. No CRC check. */
int kb_parse_header(const uint8_t *p, size_t len, kb_header *h);

/* Total size of the batch at p (batchLength + 12), or -1 if len < 12. */
int64_t kb_total_size(const uint8_t *p, size_t len);

typedef struct kb_limits {
    int32_t max_batch_bytes;    /* topic max.message.bytes */
    int16_t produce_version;    /* zstd needs v7+ */
    int64_t now_ms;
    int64_t ts_before_max_ms;   /* message.timestamp.before.max.ms (INT64_MAX = off) */
    int64_t ts_after_max_ms;    /* message.timestamp.after.max.ms */
    bool log_append_time;       /* the topic uses LogAppendTime */
    bool validate_records;      /* walk every record (decompressing if needed) */
} kb_limits;

/* Validates a produced records blob that must hold exactly one v2 batch, as
 * a Kafka 4.x broker does. Fills *h. Returns:
 *  0 (NONE), SK_KAFKA_INVALID_RECORD (not exactly one batch, magic != 2,
 *  baseOffset != 0, count mismatch, control bit, bad sequence, malformed
 *  record framing), SK_KAFKA_CORRUPT_MESSAGE (CRC, lengths that do not add
 *  up), SK_KAFKA_MESSAGE_TOO_LARGE, SK_KAFKA_UNSUPPORTED_COMPRESSION_TYPE,
 *  SK_KAFKA_INVALID_TIMESTAMP. When records are walked, *bad_record is the
 *  index of the offending record (else -1). */
int kb_validate(const uint8_t *p, size_t len, const kb_limits *lim, kb_header *h,
                int32_t *bad_record);

/* In-place rewrites. The leader epoch and base offset are outside the CRC. */
void kb_set_base_offset(uint8_t *p, int64_t base_offset);
void kb_set_leader_epoch(uint8_t *p, int32_t epoch);
/* Sets the LogAppendTime bit and maxTimestamp, then recomputes the CRC. */
void kb_set_log_append_time(uint8_t *p, int64_t now_ms);
/* Recomputes and stores the CRC of the whole batch at p. */
void kb_update_crc(uint8_t *p);

typedef struct kb_record {
    int64_t offset;    /* base offset + offset delta */
    int64_t timestamp; /* base timestamp + delta (or maxTimestamp if LogAppendTime) */
    kc_bytes key;      /* len -1 = null */
    kc_bytes value;
    int32_t header_count;
    const uint8_t *headers; /* raw header bytes, header_count entries */
    size_t headers_len;
} kb_record;

/* Calls fn for every record of the batch at p, decompressing it first when
 * needed (at most max_decompressed bytes, else SK_ERR_PARSE). fn returns 0
 * to go on, 1 to stop early (not an error), < 0 to abort with that error.
 * Returns 0, SK_ERR_PARSE (malformed), SK_ERR_NOMEM, or fn's error. */
typedef int (*kb_record_fn)(void *arg, const kb_record *r);
int kb_foreach_record(const uint8_t *p, size_t len, size_t max_decompressed, kb_record_fn fn,
                      void *arg);

/* Builds an uncompressed batch of n records (for tests, benchmarks and
 * control records): writes into out (cap bytes), returns the size or -1. */
typedef struct kb_build_rec {
    kc_bytes key, value;
    int64_t timestamp;
} kb_build_rec;
int64_t kb_build(uint8_t *out, size_t cap, const kb_build_rec *recs, int n, int64_t producer_id,
                 int16_t producer_epoch, int32_t base_sequence, int16_t attributes);

#endif
