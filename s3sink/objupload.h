/*
 * objupload: from batches of many streams to objects in the object store.
 *
 * The caller collects batches into a set (objup_set: the batches' fields and
 * their bytes, copied or referenced), then objup_put sorts them by (stream,
 * offset),
 * cuts them into runs of one stream, and writes (objfmt) and PUTs:
 *  - a StreamObject for each stream with at least p->split_bytes bytes
 *    (every stream when split_bytes is 0), in stream order,
 *  - then one StreamSetObject for all the other streams, if any.
 * Every object is written before the first PUT, and all are PUT together
 * (objstore_put_many_start: the store keeps opts.max_inflight requests
 * going); `out` gets them in the order above. objup_put_start/_finish split
 * that in two, so that an upload can PUT what it has while it reads more.
 * The split rule alone is objup_split, a pure function. For each object put
 * it gives the key, kind, size, creation time and one objreg_range per
 * stream (offsets, bytes, records, largest timestamp): what the caller
 * registers.
 *
 * Memory: a set made with a limit refuses batches once it holds `limit`
 * bytes (copied and referenced alike); the caller stops adding when
 * objup_set_full says so. Copied bytes go into an arena of fixed-size chunks
 * (a batch larger than a chunk gets one of its own): no buffer is ever
 * reallocated and moved. objup_set_reset empties a set for the next upload
 * and keeps up to OBJUP_ARENA_KEEP bytes of chunks, so that a thread that
 * uploads again and again reuses the same pages instead of faulting in new
 * ones; the rest is freed. Writing an object copies no payload (objfmt's
 * iovecs point at the batches' bytes).
 *
 * Threads: a set belongs to one thread at a time. objup_put and
 * objup_put_finish block on the object store: never on the loop thread.
 *
 * Ownership: objup_set_add copies the bytes it is given; objup_set_add_ref
 * keeps the caller's pointer, which must stay valid (and unchanged) until the
 * set is reset or destroyed; objup_put borrows the
 * objstore; the objects it appends to `out` are the caller's
 * (objreg_objects_free).
 *
 * Errors: SK_ERR_NOMEM (allocation, or a full set), SK_ERR_INVAL (batches
 * that objfmt refuses, such as overlapping offsets in one stream), and the
 * objstore's errors of a failed PUT (the first in the order above). Objects
 * put despite a failure stay in `out` (they are in the store, but nobody
 * registers them: the orphan GC collects them).
 */
#ifndef OBJUPLOAD_H
#define OBJUPLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objreg.h"
#include "objstore.h"

typedef struct objup_batch {
    uint64_t stream;
    int64_t base, last;    /* offsets; last inclusive */
    int64_t max_ts;        /* largest timestamp in the batch; -1 when unknown */
    uint32_t records;
    uint32_t size;         /* payload bytes */
    const uint8_t *data;   /* the bytes: the set's copy, or the caller's (objup_set_add*) */
    bool has_crc;          /* crc is data's CRC-32C, which the caller knows (objfmt_batch) */
    uint32_t crc;
} objup_batch;

typedef struct objup_params {
    uint64_t split_bytes; /* a stream with at least this many bytes gets its own SO; 0: all */
    uint32_t block_bytes; /* objfmt block size; 0: OBJFMT_DEFAULT_BLOCK_SIZE */
    uint32_t node_id;     /* writer's node, in the objects' keys */
} objup_params;

/* ---- batch sets ---- */

typedef struct objup_set objup_set;

/* Chunks of the arena, and what a reset keeps of them. */
#define OBJUP_CHUNK_BYTES (8u << 20)
#define OBJUP_ARENA_KEEP (64u << 20)

/* limit: bytes after which the set is full; 0: no limit. */
objup_set *objup_set_new(uint64_t limit);
/* Copies a batch of b->size bytes into the arena (b->data is ignored). */
int objup_set_add(objup_set *s, const objup_batch *b, const void *bytes)
    __attribute__((warn_unused_result));
/* Adds a batch by reference: b->data is kept, not copied. */
int objup_set_add_ref(objup_set *s, const objup_batch *b) __attribute__((warn_unused_result));
/* Empties the set for another use with a new limit: batches and references
 * are forgotten, the arena's chunks kept up to OBJUP_ARENA_KEEP bytes. */
void objup_set_reset(objup_set *s, uint64_t limit);
/* Bytes the arena holds now (chunks allocated, used or not). */
uint64_t objup_set_arena_bytes(const objup_set *s);
/* The limit is reached: the next add would be refused. */
bool objup_set_full(const objup_set *s);
uint64_t objup_set_bytes(const objup_set *s);
/* The set's batches, in the order added (sorted once objup_put ran). */
const objup_batch *objup_set_batches(const objup_set *s, size_t *n);
size_t objup_set_count(const objup_set *s);
void objup_set_destroy(objup_set *s);

/* ---- the split rule ---- */

/* One stream's batches in a sorted array: b[first .. first + n). */
typedef struct objup_run {
    size_t first, n;
    uint64_t bytes; /* payload bytes of the run */
    bool own;       /* gets a StreamObject of its own; the others share one SSO */
} objup_run;

/* Sorts by (stream, base offset). */
void objup_sort(objup_batch *b, size_t n);
/* For batches sorted by objup_sort: their runs, in order, and which get
 * their own StreamObject (bytes >= split_bytes). out has room for n runs;
 * returns how many were written. */
size_t objup_split(const objup_batch *b, size_t n, uint64_t split_bytes, objup_run *out);

/* For batches sorted by objup_sort: the first place where a stream's offsets
 * skip (a batch starts past the previous one's last + 1). Returns false when
 * every stream is contiguous; else true with the stream, the last offset
 * before the hole and the first after it. An upload from the WAL must have
 * none: the registry gives each object one range per stream, and a range
 * over a hole would hide the batches that fill it in other objects. */
bool objup_first_hole(const objup_batch *b, size_t n, uint64_t *stream, int64_t *before,
                      int64_t *after);
/* For two sorted arrays, a's batches before b's: the first stream of b
 * whose first batch does not follow on from its last in a (base != last +
 * 1: a hole, or offsets repeated). Returns false when every stream of b
 * that a has follows on; else true with the stream, a's last offset and
 * b's first. */
bool objup_seam_hole(const objup_batch *a, size_t na, const objup_batch *b, size_t nb,
                     uint64_t *stream, int64_t *before, int64_t *after);
/* objup_sort and objup_first_hole on a set's batches from the first-th on,
 * and objup_seam_hole between them and the batches before, which an
 * earlier call (or objup_put_start) sorted. */
bool objup_set_hole_from(objup_set *s, size_t first, uint64_t *stream, int64_t *before,
                         int64_t *after);
/* objup_set_hole_from(s, 0, ...). */
bool objup_set_hole(objup_set *s, uint64_t *stream, int64_t *before, int64_t *after);

/* ---- writing ---- */

/* Sorts the set's batches, writes and PUTs its objects by the split rule,
 * and appends them to out. An empty set puts nothing. */
int objup_put(objup_set *s, objstore *os, const objup_params *p, objreg_objects *out)
    __attribute__((warn_unused_result));

/* objup_put in two steps, for the batches added from the first-th on, so
 * that the caller can add more to the set while their PUTs go (an upload
 * in pieces). start sorts b[first..], writes the objects and starts their
 * PUTs: on an error nothing was started and *f is NULL; with no batches *f
 * is NULL too. finish waits for the PUTs and appends the objects put, in
 * the order of objup_put, to out (objup_put_finish(NULL, out) is 0).
 * Between the two the set may grow (objup_set_add*) but must not be reset
 * or destroyed: the PUTs read its bytes. Every flight started gets its
 * finish. */
typedef struct objup_flight objup_flight;
int objup_put_start(objup_set *s, size_t first, objstore *os, const objup_params *p,
                    objup_flight **f) __attribute__((warn_unused_result));
int objup_put_finish(objup_flight *f, objreg_objects *out) __attribute__((warn_unused_result));

#endif
