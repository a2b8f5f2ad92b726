/*
 * objfmt: the layout of Skiff's immutable objects, StreamObjects (SO, one
 * stream) and StreamSetObjects (SSO, many streams), and their key names.
 *
 *   [data block 0] ... [data block n-1] [index] [footer, 48 bytes]
 *
 * A data block holds whole batches of one stream, each behind a 24-byte
 * header (base offset, last offset, record count, size); a block is cut
 * when the next batch would pass the block size or belongs to another
 * stream, and a batch larger than the block size gets a block of its own.
 * The index has one 48-byte entry per block (stream, start and end offset,
 * position, size, record and batch counts, CRC-32C of the block), sorted by
 * (stream, start offset); batches are written in (stream, offset) order, so
 * one stream's blocks are adjacent in the object. The footer locates the
 * index and carries its CRC-32C, the kind, the format version and the magic
 * "SKIFFOBJ" in its last 8 bytes. docs/objects.md has every field.
 *
 * Streams are u64 ids the broker assigns; payloads are opaque to this module
 * (the broker puts Kafka RecordBatches there and gives each batch's offsets,
 * record count and size).
 *
 * Threads: all functions are pure or touch only their own object; any
 * thread may use them, one thread per writer or reader at a time (a
 * finished reader is read-only and may be shared).
 *
 * Ownership: the writer borrows every payload until objfmt_writer_destroy
 * (the iovecs of objfmt_writer_finish point into them: the payload bytes are
 * never copied); it owns everything else it returns. A reader copies what it
 * needs from the buffers it is given. Block functions borrow the block.
 *
 * Errors: SK_ERR_INVAL misuse (batches out of order, a second stream in an
 * SO, inconsistent batch fields, add after finish), SK_ERR_CORRUPT bytes that
 * fail a check (magic, version, CRC, bounds, order), SK_ERR_AGAIN from
 * objfmt_reader_from_tail when the tail does not hold the whole index,
 * SK_ERR_NOENT a stream or offset the object does not hold, SK_ERR_NOMEM.
 */
#ifndef OBJFMT_H
#define OBJFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define OBJFMT_MAGIC "SKIFFOBJ"
#define OBJFMT_VERSION 1
#define OBJFMT_FOOTER_SIZE 48
#define OBJFMT_ENTRY_SIZE 48
#define OBJFMT_BATCH_HEADER 24
/* Bytes a reader fetches first from the end of an object: footer and, for
 * all but huge objects, the whole index (1,364 blocks). */
#define OBJFMT_TAIL_READ (64 * 1024)
#define OBJFMT_DEFAULT_BLOCK_SIZE (1024 * 1024)
#define OBJFMT_MAX_BATCH_SIZE (1u << 30)
#define OBJFMT_MAX_INDEX_SIZE (64u << 20)

typedef enum objfmt_kind { OBJFMT_SO = 1, OBJFMT_SSO = 2 } objfmt_kind;

typedef struct objfmt_batch {
    uint64_t base_offset;
    uint64_t last_offset; /* inclusive */
    uint32_t record_count;
    uint32_t size;        /* payload bytes */
} objfmt_batch;

/* One data block, as the index describes it. */
typedef struct objfmt_entry {
    uint64_t stream_id;
    uint64_t start_offset; /* base offset of the first batch */
    uint64_t end_offset;   /* last offset of the last batch, inclusive */
    uint64_t position;     /* of the block in the object */
    uint32_t size;         /* of the block, batch headers included */
    uint32_t record_count;
    uint32_t batch_count;
    uint32_t crc;          /* CRC-32C of the block's bytes */
} objfmt_entry;

/* One stream's part of an object: what the object registry records. */
typedef struct objfmt_stream {
    uint64_t stream_id;
    uint64_t start_offset, end_offset;
    uint64_t position, size;   /* its blocks: one contiguous byte range */
    uint64_t record_count;
    uint32_t first_block, block_count;
} objfmt_stream;

typedef struct objfmt_footer {
    uint64_t index_position;
    uint32_t index_size;
    uint32_t index_count;
    uint32_t index_crc;
    objfmt_kind kind;
    int64_t created_ms;
    uint32_t version;
} objfmt_footer;

/* ---- writer ---- */

typedef struct objfmt_writer objfmt_writer;

/* block_size 0: OBJFMT_DEFAULT_BLOCK_SIZE. created_ms goes into the footer. */
objfmt_writer *objfmt_writer_new(objfmt_kind kind, uint32_t block_size, int64_t created_ms);
/* Appends a batch of `stream`. Batches come in (stream, offset) order: a
 * stream's batches in increasing offsets without overlap, streams in
 * increasing id. payload: b->size bytes, borrowed until destroy. */
int objfmt_writer_add(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                      const void *payload);
/* Same, with the payload's CRC-32C known to the caller (a checksum it
 * verified already): the block's CRC is combined from it instead of
 * reading the payload again. A wrong one makes a block that reads as
 * corrupt. */
int objfmt_writer_add_crc(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                          const void *payload, uint32_t payload_crc);
/* Object size if finished now. */
uint64_t objfmt_writer_size(const objfmt_writer *w);
/* Writes index and footer; *iov covers the whole object in order (owned by
 * the writer, valid until destroy). An object without batches is refused. */
int objfmt_writer_finish(objfmt_writer *w, const struct iovec **iov, int *iovcnt, uint64_t *size);
const objfmt_entry *objfmt_writer_blocks(const objfmt_writer *w, size_t *n);
const objfmt_stream *objfmt_writer_streams(const objfmt_writer *w, size_t *n);
void objfmt_writer_destroy(objfmt_writer *w);

/* ---- reader ---- */

typedef struct objfmt_reader objfmt_reader;

/* Checks the footer in the last OBJFMT_FOOTER_SIZE bytes of p[0..len). */
int objfmt_footer_parse(const void *p, size_t len, uint64_t obj_size, objfmt_footer *f);
/* Checks and loads the index (f->index_size bytes at `index`). */
int objfmt_reader_open(const objfmt_footer *f, const void *index, size_t len, objfmt_reader **out);
/* From the last tail_len bytes of an object of obj_size bytes (read
 * OBJFMT_TAIL_READ, or the whole object when smaller): a reader, or
 * SK_ERR_AGAIN with the range [*need_off, *need_off + *need_len) to read
 * (from the index to the end) and call again with. */
int objfmt_reader_from_tail(const void *tail, size_t tail_len, uint64_t obj_size,
                            objfmt_reader **out, uint64_t *need_off, size_t *need_len);
void objfmt_reader_destroy(objfmt_reader *r);

const objfmt_footer *objfmt_reader_footer(const objfmt_reader *r);
const objfmt_entry *objfmt_reader_blocks(const objfmt_reader *r, size_t *n);
const objfmt_stream *objfmt_reader_streams(const objfmt_reader *r, size_t *n);
/* The first block of `stream` that holds an offset >= from_offset. */
int objfmt_reader_find(const objfmt_reader *r, uint64_t stream, uint64_t from_offset,
                       size_t *block);

typedef struct objfmt_range {
    uint64_t position, size;
    uint32_t first_block, nblocks;
    uint64_t start_offset, end_offset;
} objfmt_range;

/* Byte ranges holding `stream` from from_offset on, adjacent blocks merged
 * into one range, stopping after the block that reaches max_bytes (0: no
 * limit; at least one block is always given). Returns how many ranges were
 * written (at most max_out), 0 when the object holds nothing from there. */
size_t objfmt_reader_ranges(const objfmt_reader *r, uint64_t stream, uint64_t from_offset,
                            uint64_t max_bytes, objfmt_range *out, size_t max_out);

/* ---- data blocks ---- */

/* Checks a block's CRC and structure against its index entry. */
int objfmt_block_verify(const objfmt_entry *e, const void *data, size_t len);
/* As objfmt_block_verify, for a block whose CRC-32C `crc` was computed as it
 * arrived (objstore_getv's crcs): compares it, then checks the structure. */
int objfmt_block_verify_crc(const objfmt_entry *e, const void *data, size_t len, uint32_t crc);

typedef struct objfmt_iter {
    const uint8_t *p, *end;
} objfmt_iter;

/* Verifies the block (objfmt_block_verify), then iterates its batches. */
int objfmt_iter_init(objfmt_iter *it, const objfmt_entry *e, const void *data, size_t len);
/* Same, without the check: for blocks verified once already (a cache). */
void objfmt_iter_init_verified(objfmt_iter *it, const void *data, size_t len);
/* 1 and the next batch (payload points into the block), or 0 at the end. */
int objfmt_iter_next(objfmt_iter *it, objfmt_batch *b, const uint8_t **payload);

/* ---- object keys ---- */

/* "[<prefix>/]data/<32 hex random>/<so|sso>-<node>-<created_ms>.obj": the
 * random component first spreads objects over S3's key-space partitions and
 * lets any node name objects without coordination. Keys are relative to the
 * store's root (objstore adds its URL prefix). */
#define OBJFMT_KEY_MAX 320
int objfmt_make_key(char *buf, size_t len, const char *prefix, objfmt_kind kind, uint32_t node,
                    int64_t created_ms);
/* Parses a key made by objfmt_make_key (any prefix); SK_ERR_PARSE otherwise. */
int objfmt_parse_key(const char *key, objfmt_kind *kind, uint32_t *node, int64_t *created_ms);

#endif
