/*
 * tier: the node's data in the object store.
 *
 * Upload: every s3.wal.upload.interval.ms, or once s3.wal.upload.threshold
 * bytes are durable and not uploaded, a job on the tier thread reads the
 * WAL from the last upload's end, sorts the batches by (stream, offset),
 * writes every stream with at least s3.stream.object.split.size bytes as a
 * StreamObject and the rest as one StreamSetObject, and PUTs them (an
 * upload that reads back from the WAL PUTs its first quarter's objects
 * while it reads the rest, registered with the others). The loop
 * then registers the objects with one WAL record (OBJECTS, carrying the
 * upload's end LSN); the SQLite view drops the WAL positions of those
 * batches. A crash before the registration leaves unregistered objects,
 * which the orphan GC deletes; the WAL still has the data.
 *
 * View snapshots: after each registration the SQLite view is copied into the
 * object store (snapshots/node-<id>/<lsn>.db). The WAL is trimmed only below
 * the newest snapshot's position and the upload's end, so a node whose
 * data.dir is wiped restores the snapshot and replays the WAL from there.
 *
 * Reads: batches below the WAL come from objects through the object index
 * cache and the block cache (adjacent blocks in one ranged GET, read-ahead
 * for sequential catch-up), byte-identical to what the WAL held.
 *
 * Background: retired objects (compacted away, or with no live range left)
 * are deleted after s3.object.delete.delay.ms; compaction merges small
 * StreamSetObjects, splits old ones into StreamObjects and merges small
 * StreamObjects of a stream; partitions of keyed topics are compacted
 * (cleaner.h) when object compaction has nothing to do; the orphan GC deletes
 * objects the registry does not know, in two passes.
 *
 * This module is the node's side of it: scheduling on the loop and the
 * tier thread, reading the WAL, the registry (OBJECTS and OBJECT_GONE
 * records, the SQLite view), view snapshots, reads for fetches. What is
 * done to objects is s3sink's: objupload (batches to objects: sort, split
 * rule, writing, PUT), objcompact (the compaction plan, a pure function of
 * a registry listing, and the rewrite), objgc (which objects to delete or
 * retire, and the two-pass orphan collector).
 *
 * Threads: the loop, except sk_tier_restore_view (start-up, before the
 * loop runs). Jobs run on the tier's own thread.
 */
#ifndef TIER_H
#define TIER_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "types.h"

typedef struct sk_tier sk_tier;

/* Opens the object store of objects.url. NULL with a reason on failure. */
sk_tier *sk_tier_new(sk_node *n, char *why, size_t whylen);
/* Starts the timers (the loop is about to run). */
void sk_tier_start(sk_tier *t);
/* Shutdown, in three steps: stop starts no new job; drain waits for the
 * running one (before the WAL closes: jobs read it); destroy frees the rest
 * (after the WAL closed: registrations still completing need the tier; and
 * after the connections closed: their responses hold blocks of the block
 * cache, see sk_node_destroy). */
void sk_tier_stop(sk_tier *t);
void sk_tier_drain(sk_tier *t);
void sk_tier_destroy(sk_tier *t);

/* Where the WAL may be trimmed: below both the last upload's end and the
 * newest view snapshot's position. */
wal_lsn sk_tier_trim_bound(const sk_tier *t);
/* More of the WAL became durable: upload early past the threshold. */
void sk_tier_kick(sk_tier *t);
/* WAL bytes per second that recent uploads took, from start to registration
 * (an average over the last few); 0 before the first or while uploads fail
 * (the last one did, and the next waits out its retry pause). */
double sk_tier_upload_rate(const sk_tier *t);

/* Start-up: when `dbpath` does not exist, fetches the newest snapshot of
 * this node's view from the object store into it. Returns 0 (restored or
 * nothing to restore) or an error with a reason. */
int sk_tier_restore_view(const sk_config *cfg, const char *dbpath, char *why, size_t whylen);

/* Reads batches of `stream` from `offset` on, out of the object range loc,
 * at most max_bytes (at least one batch), without a copy: the batches stay
 * in the block cache's blocks. first is the base offset of the first
 * batch, end the offset after the last. seg[0..n) are the batches in order
 * (one piece each); ref[i] is
 * the owner a response holds to send seg[i] by reference, or NULL for a
 * batch too small to be worth it (copied into the response). The result
 * holds every block it points into (held[0..nheld)) until
 * sk_tier_result_free, on the loop thread (the holds are not atomic); a
 * held block stays valid after its eviction (blockcache.h, "Holds"). */
typedef struct sk_tier_result {
    int n, nheld;
    kc_bytes *seg;
    sk_ref **ref;
    sk_ref **held;
    size_t len;         /* of all pieces */
    int64_t first, end; /* base offset of the first batch, offset after the last */
    bool near_end; /* the read-ahead reached the end of the stream's range in
                    * the object: time to read ahead into the next range */
} sk_tier_result;
/* Batches under this size are copied rather than sent by reference. */
#define SK_TIER_REF_MIN 2048
/* cb owns res (NULL on error). */
typedef void (*sk_tier_ref_cb)(void *arg, int err, sk_tier_result *res);
void sk_tier_read_ref(sk_tier *t, const sk_obj_loc *loc, uint64_t stream, int64_t offset,
                      size_t max_bytes, sk_tier_ref_cb cb, void *arg);
void sk_tier_result_free(sk_tier_result *res);
/* Reads ahead into range loc (its index and first blocks, with read-ahead)
 * so that a consumer reaching it finds them cached: a catch-up crossing
 * from one object to the next does not wait for two GETs in a row. Nothing
 * is returned; failures only count (prefetch_errors). */
void sk_tier_prefetch(sk_tier *t, const sk_obj_loc *loc, uint64_t stream);

/* A partition came with batches in another log's WAL: upload them soon,
 * before anything newer of theirs (cluster). */
void sk_tier_adopted(sk_tier *t);

/* Not-yet-uploaded WAL bytes at which an upload starts (and the most one
 * takes): a quarter of wal.cache.bytes, so that the batches are still in
 * the WAL cache and go into objects from memory rather than read back from
 * the WAL (upcache.h), and an upload in flight holds at most that much
 * beyond the cache; at least SK_UPLOAD_TRIGGER_MIN (fewer, larger PUTs for
 * a small cache), at most s3.wal.upload.threshold. */
#define SK_UPLOAD_TRIGGER_MIN (64ull << 20)
uint64_t sk_tier_upload_trigger(const sk_config *cfg);

/* Runs the upload, GC and compaction steps now (tests, shutdown). */
void sk_tier_upload_now(sk_tier *t);

typedef struct sk_tier_stats {
    uint64_t uploads, upload_bytes, objects_put, so_put, sso_put;
    uint64_t upload_pieced; /* uploads whose first piece was PUT while they read on */
    uint64_t compactions, compacted_in, compacted_out, objects_deleted, orphans_deleted;
    uint64_t snapshots, read_batches, read_bytes;
    uint64_t prefetches, prefetch_errors; /* sk_tier_prefetch */
    wal_lsn uploaded, snapshot_lsn;
    /* Live objects in this log's registry by kind (index: objfmt_kind, 0 unused),
     * as of the last compaction pass's listing; listed_ms 0 until the first. */
    uint64_t objects[3], object_bytes[3];
    int64_t listed_ms;
    uint64_t upload_failures; /* uploads, or their registration, that failed */
    int64_t last_upload_ms;   /* wall clock of the last upload done (0: none yet) */
    /* compaction of keyed topics (cleaner.h) */
    uint64_t cleaner_passes, cleaner_bytes_in, cleaner_records_removed;
} sk_tier_stats;
void sk_tier_stats_get(const sk_tier *t, sk_tier_stats *out);
/* The object store's own counters (requests, retries, errors). */
struct objstore_stats;
void sk_tier_objstore_stats(const sk_tier *t, struct objstore_stats *out);
/* The block cache's counters (hits, misses, bytes held). */
struct blockcache_stats;
void sk_tier_blockcache_stats(const sk_tier *t, struct blockcache_stats *out);

#endif
