/*
 * cleaner: compaction of keyed topics (cleanup.policy=compact), Kafka's log
 * cleaner on Skiff's objects.
 *
 * One pass cleans one partition's stream. Candidates are the compacted
 * partitions this node is main of, with their topic's configuration and
 * what earlier passes here left (sk_clean_cand). Only data in registered
 * objects is cleaned (the WAL's tail is Kafka's active segment); ranges
 * whose newest timestamp is within min.compaction.lag.ms are not cleanable,
 * nor anything after them. A stream is cleaned when its dirty ratio (bytes
 * above the last pass's end over all its bytes) exceeds
 * min.cleanable.dirty.ratio, when its oldest dirty data is older than
 * max.compaction.lag.ms, or when a tombstone's delete horizon has passed;
 * the dirtiest one goes first.
 *
 * The pass: the stream's oldest objects, within s3.compaction.max.bytes (the
 * sources), are read once to build the offset map (a hash of each key to its
 * latest offset, from the first dirty offset on) in at most
 * log.cleaner.dedupe.buffer.size bytes; when the keys do not fit, the map
 * ends at the first record that did not fit (in the middle of a batch if
 * need be) and the next pass goes on from there. The sources
 * are then rewritten as object compaction rewrites them (objcompact, one
 * StreamObject per stream; other streams' batches pass unchanged): a record
 * below the map's end is dropped when the map holds a later offset for its
 * key; a tombstone (null value) that is the latest of its key is kept, and
 * its batch gets a delete horizon (now + delete.retention.ms, KIP-534) the
 * first time; once the horizon has passed, the tombstone is dropped.
 * Offsets never change: a rewritten batch keeps its base offset and last
 * offset delta; a batch left without records is dropped, except the first
 * and last of the sources, kept empty so that the rewritten objects cover
 * exactly the offsets the sources covered. Transactions: batches of
 * aborted transactions are removed, as Kafka's cleaner removes them, and
 * those of committed ones compacted like the rest; transactional data at
 * or past the last stable offset is kept whole and out of the map; control
 * batches (the markers) are kept.
 *
 * The caller registers the new objects and retires the sources with one
 * registry record, as for object compaction: until then the sources are
 * what readers see; a crash before it leaves unregistered objects (orphans).
 *
 * Memory: the offset map, the rewritten batches (at most the sources'
 * size), one source object at a time.
 *
 * Threads: sk_cleaner_run blocks on the object store: the tier thread.
 *
 * Ownership: borrows env, objs and cands; fills retired and out (the
 * caller's).
 *
 * Errors: SK_ERR_NOMEM, the object store's, SK_ERR_CORRUPT, SK_ERR_PARSE
 * (a batch that does not parse), objupload's.
 */
#ifndef CLEANER_H
#define CLEANER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objcompact.h"
#include "objreg.h"
#include "txidx.h"

typedef struct sk_clean_cand {
    uint64_t stream;
    /* Transactions (txidx.h): transactional data at or past the last stable
     * offset is kept whole; below it, a batch in an aborted transaction is
     * removed, one in a committed transaction compacted like the rest. */
    int64_t lso;
    sk_txidx_ent *aborted; /* owned by whoever made the candidate */
    int naborted;
    int64_t clean_end;  /* offsets below were cleaned by an earlier pass here (0: none) */
    int64_t horizon_ms; /* earliest delete horizon an earlier pass set or saw (-1: none) */
    int64_t delete_retention_ms, min_lag_ms, max_lag_ms;
    double min_dirty_ratio;
} sk_clean_cand;

typedef struct sk_clean_params {
    uint64_t map_bytes; /* log.cleaner.dedupe.buffer.size */
    uint64_t max_bytes; /* most bytes of sources in one pass */
    int64_t now_ms;
} sk_clean_params;

typedef struct sk_clean_result {
    bool ran;
    uint64_t stream;
    int64_t clean_end;  /* the map's end: the next pass's first dirty offset */
    int64_t horizon_ms; /* earliest delete horizon left in the stream (-1: none) */
    uint64_t bytes_in, records_removed, batches_removed;
} sk_clean_result;

/* An entry of the offset map (the dedupe buffer): a 64-bit hash of the key
 * and the offset. */
#define SK_CLEAN_MAP_ENTRY 16

/* Picks the stream to clean from the listing objs[0..n) and cleans it.
 * env->live gives an object's live ranges; env->filter is set here. With
 * nothing to clean, returns 0 with res->ran false. */
int sk_cleaner_run(objcompact_env *env, const objreg_info *objs, size_t n,
                   const sk_clean_cand *cands, size_t ncands, const sk_clean_params *p,
                   objreg_keys *retired, objreg_objects *out, sk_clean_result *res)
    __attribute__((warn_unused_result));

/* The offset map, apart for the unit tests. */
typedef struct sk_omap sk_omap;
sk_omap *sk_omap_new(uint64_t bytes);
void sk_omap_destroy(sk_omap *m);
/* Whether n more keys fit (the map stays below 90% full). */
bool sk_omap_room(const sk_omap *m, uint64_t n);
void sk_omap_put(sk_omap *m, const uint8_t *key, size_t len, int64_t offset);
/* The offset recorded for key, or -1. */
int64_t sk_omap_get(const sk_omap *m, const uint8_t *key, size_t len);

#endif
