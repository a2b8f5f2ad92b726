/*
 * kbatch: Kafka RecordBatch v2 (magic 2): validation, the in-place rewrites a
 * broker makes, recompression to a topic's codec, and record iteration
 * (decompressing gzip, snappy raw and xerial, lz4 frame, zstd).
 *
 * Layout (big-endian), header of KB_HEADER_SIZE bytes:
 *   0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 |
 *   16 magic i8 | 17 crc u32 (CRC-32C of bytes [21, end)) | 21 attributes i16 |
 *   23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 |
 *   43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 |
 *   57 recordsCount i32 | 61 records...
 *
 * Contract: pure functions over caller buffers, any thread, no global state.
 * Nothing allocates except decompression and kb_recompress: kb_validate with
 * validate_records on a compressed batch, and kb_foreach_record on one,
 * malloc one output buffer of at most max_decompressed bytes (plus the
 * codec's own small state) and free it before returning; kb_recompress
 * returns its new batch. Uncompressed batches are walked in place.
 * Results are Kafka codes from sk_err.h (>= 0), SK_ERR_PARSE or SK_ERR_NOMEM.
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
/* The codec a topic's compression.type names (uncompressed, gzip, snappy,
 * lz4, zstd: Kafka's names), or -1. */
int kb_codec_named(const char *name, size_t len);
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
/* Parses a copy of a batch's first KB_HEADER_SIZE bytes, kept apart from
 * its records (a link record's). SK_ERR_PARSE when len is short or the
 * batchLength is smaller than a header. */
int kb_parse_header_copy(const uint8_t *p, size_t len, kb_header *h);

/* Total size of the batch at p (batchLength + 12), or -1 if len < 12 or
 * batchLength is negative. */
int64_t kb_total_size(const uint8_t *p, size_t len);

/* Kafka's default max.message.bytes (1 MiB + 12). */
#define KB_DEFAULT_MAX_BATCH_BYTES 1048588
/* Decompressed size allowed when kb_limits.max_decompressed or the
 * max_decompressed argument of kb_foreach_record is 0. */
#define KB_DEFAULT_MAX_DECOMPRESSED ((size_t)64 << 20)

typedef struct kb_limits {
    int32_t max_batch_bytes;    /* topic max.message.bytes (<= 0: the default above) */
    int16_t produce_version;    /* zstd needs v7+ */
    int64_t now_ms;
    int64_t ts_before_max_ms;   /* message.timestamp.before.max.ms (INT64_MAX = off; < 0 = 0) */
    int64_t ts_after_max_ms;    /* message.timestamp.after.max.ms (INT64_MAX = off; < 0 = 0) */
    bool log_append_time;       /* the topic uses LogAppendTime: no timestamp range check */
    bool validate_records;      /* walk every record (decompressing if needed) */
    bool compacted;             /* cleanup.policy has compact: every record needs a key */
    size_t max_decompressed;    /* cap on a batch's decompressed records (0: default);
                                 * a batch that inflates past it is INVALID_RECORD */
} kb_limits;

/* Validates a produced records blob that must hold exactly one v2 batch, as
 * a Kafka 4.x broker does, in Kafka's order. Fills *h with what could be
 * parsed (h may be NULL). Returns:
 *  0 (NONE);
 *  SK_KAFKA_CORRUPT_MESSAGE: batchLength < 14, magic < 0 or > 2 (of the
 *    batch, or of what follows it), a batch shorter than its 61-byte
 *    header, CRC mismatch;
 *  SK_KAFKA_INVALID_RECORD: no complete batch, magic 0 or 1, a second
 *    complete batch, baseOffset != 0, lastOffsetDelta + 1 != recordsCount or
 *    recordsCount <= 0, control bit, producerId >= 0 with baseSequence < 0;
 *    and, when records are walked: malformed record framing, a record count
 *    that does not match, a null key on a compacted topic;
 *  SK_KAFKA_MESSAGE_TOO_LARGE: batchLength + 12 > max_batch_bytes;
 *  SK_KAFKA_UNSUPPORTED_COMPRESSION_TYPE: zstd before Produce v7;
 *  SK_KAFKA_INVALID_TIMESTAMP: a CreateTime record timestamp (other than
 *    -1) outside [now - before_max, now + after_max] on a CreateTime topic,
 *    the LogAppendTime bit set by the producer on a LogAppendTime topic;
 *    when several records are bad, INVALID_TIMESTAMP wins over a null key;
 *  SK_ERR_NOMEM: the decompression buffer could not be allocated.
 * All of the above are the codes Kafka 4.3.1 gives. Skiff is stricter, or
 * names the fault where Kafka answers UNKNOWN_SERVER_ERROR, here:
 *  - bytes after the batch that do not make a complete one: INVALID_RECORD
 *    (Kafka drops them silently; Skiff stores exactly what it validated);
 *  - offset deltas other than 0..n-1: INVALID_RECORD (Kafka checks them only
 *    in compressed batches, and with UNKNOWN_SERVER_ERROR);
 *  - a key, value or header value length below -1: INVALID_RECORD (Kafka
 *    reads it as null);
 *  - compressed records that do not decode, bytes after the compressed
 *    stream (Kafka ignores them after gzip and lz4), or records inflating
 *    past max_decompressed: INVALID_RECORD, *bad_record -1;
 *  - codec 5-7: UNSUPPORTED_COMPRESSION_TYPE;
 *  - the LogAppendTime bit on a CreateTime topic: INVALID_TIMESTAMP (Kafka
 *    accepts it when maxTimestamp is in range and then clears the bit).
 *    This one is checked from the header, even without the record walk,
 *    with *bad_record = 0.
 * Not checked here: a transactional batch in a Produce request without a
 * transactional id (Kafka: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the
 * whole request), acks, and the idempotence sequence against producer state.
 * *bad_record (may be NULL) is the index of the first offending record for
 * record-level errors, else -1. Cost: one CRC-32C pass over the batch; with
 * validate_records, one pass over the records, in place when uncompressed,
 * else after decompressing into one malloc'd buffer freed before return. */
int kb_validate(const uint8_t *p, size_t len, const kb_limits *lim, kb_header *h,
                int32_t *bad_record);

/* The batch at p (len bytes, validated by kb_validate) with its records
 * section in `codec` (a KB_CODEC_*; NONE stores the records uncompressed) at
 * `level` (kzip.h): a new batch in *out (malloc'd, *out_len bytes) with the
 * same header but for the codec bits, batchLength and CRC. What Kafka does
 * when a topic's compression.type differs from the producer's codec; the
 * records themselves (offsets, timestamps, keys, values, headers) are kept
 * byte for byte. Returns 0, SK_ERR_PARSE (records that do not decompress
 * within max_decompressed, 0: KB_DEFAULT_MAX_DECOMPRESSED), SK_ERR_NOMEM or
 * SK_ERR_INVAL (a codec library failed). */
__attribute__((warn_unused_result)) int kb_recompress(const uint8_t *p, size_t len, int codec,
                                                      int level, size_t max_decompressed,
                                                      uint8_t **out, size_t *out_len);

/* In-place rewrites. The leader epoch and base offset are outside the CRC. */
void kb_set_base_offset(uint8_t *p, int64_t base_offset);
void kb_set_leader_epoch(uint8_t *p, int32_t epoch);
/* Sets the LogAppendTime bit and maxTimestamp, then recomputes the CRC. */
void kb_set_log_append_time(uint8_t *p, int64_t now_ms);
/* Recomputes and stores the CRC of the whole batch at p. */
void kb_update_crc(uint8_t *p);
/* CRC-32C of all len (>= KB_HEADER_SIZE) bytes of the batch at p, from its
 * CRC field (which covers everything after the field) and the bytes before
 * it: for a batch whose field is known right (validated, or set by
 * kb_update_crc since), without reading the records again. */
uint32_t kb_whole_crc32c(const uint8_t *p, size_t len);

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
 * needed (at most max_decompressed bytes, 0 = KB_DEFAULT_MAX_DECOMPRESSED,
 * else SK_ERR_PARSE). The CRC is not checked (kb_validate does that); the
 * record framing is, strictly: exactly recordsCount well-formed records that
 * fill the records section. Records are delivered as they are parsed, so fn
 * may have seen some before a later record fails with SK_ERR_PARSE. The
 * kb_record and the bytes it points to live until fn returns. fn returns 0
 * to go on, 1 to stop early (not an error), < 0 to abort with that error.
 * Returns 0, SK_ERR_PARSE (malformed), SK_ERR_NOMEM, or fn's error. */
typedef int (*kb_record_fn)(void *arg, const kb_record *r);
int kb_foreach_record(const uint8_t *p, size_t len, size_t max_decompressed, kb_record_fn fn,
                      void *arg);

/* Whether compaction keeps a record (kb_filter): true to keep. */
typedef bool (*kb_keep_fn)(void *arg, const kb_record *r);

/* The batch at p (len bytes, validated) without the records keep() refuses,
 * as Kafka's log cleaner rewrites a batch: a new batch in *out (malloc'd,
 * *out_len bytes) with the same base offset, lastOffsetDelta, producer
 * fields and codec, the kept records byte for byte (their offset deltas
 * unchanged, so no offset moves and a consumer of the batch advances past
 * its last offset), recordsCount the number kept (0 makes an empty batch)
 * and a new CRC. horizon_ms >= 0 sets the delete horizon (KIP-534): the
 * KB_ATTR_DELETE_HORIZON bit, baseTimestamp = horizon_ms, and every kept
 * record's timestamp delta rebased so that its timestamp stays. *kept gets
 * the number kept. Returns 0, SK_ERR_PARSE (malformed records, or records
 * that do not decompress within KB_DEFAULT_MAX_DECOMPRESSED), SK_ERR_NOMEM,
 * or SK_ERR_INVAL (a codec failed). */
__attribute__((warn_unused_result)) int kb_filter(const uint8_t *p, size_t len, kb_keep_fn keep,
                                                  void *arg, int64_t horizon_ms, uint8_t **out,
                                                  size_t *out_len, int32_t *kept);

/* Builds an uncompressed batch of n >= 1 records (for tests, benchmarks and
 * control records): baseOffset 0, leader epoch -1, baseTimestamp = the first
 * record's timestamp, maxTimestamp = the largest, offset deltas 0..n-1, no
 * record headers, CRC set. attributes must not name a codec. Writes into out
 * (cap bytes), returns the size, or -1 (n < 1, a codec bit, too small). */
typedef struct kb_build_rec {
    kc_bytes key, value;
    int64_t timestamp;
} kb_build_rec;
int64_t kb_build(uint8_t *out, size_t cap, const kb_build_rec *recs, int n, int64_t producer_id,
                 int16_t producer_epoch, int32_t base_sequence, int16_t attributes);

#endif
