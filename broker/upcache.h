/*
 * upcache: the WAL cache's batches an upload builds its objects from, in
 * place of reading their records back from the WAL.
 *
 * What: when an upload job starts, sk_upcache_collect takes the cached
 * batches whose own-WAL record (a DATA record, not a LINK) starts in
 * [from, to), up to max_bytes of them (the most one upload takes; the
 * batch that crosses it counts), holds each (sk_ref) and copies what the
 * uploader needs:
 * LSN, topic id, partition, length and the pointer to the bytes (the
 * batch's `part` dangles once evicted). A cached batch's bytes are the
 * bytes of its DATA record's batch (sk_append writes the WAL record from
 * that very buffer, final offsets and CRC included), so where they come
 * from changes nothing in what is uploaded. The uploader walks the WAL's
 * records as before and asks sk_upcache_at for each LSN: a hit gives the
 * bytes and the record's length, a miss (other records, LINK records,
 * batches evicted before the job started) means reading the WAL.
 *
 * Lifetimes: eviction, compaction's drop and topic deletion only put the
 * cache's own hold: a collected batch stays valid until
 * sk_upcache_release, which puts the job's holds, each exactly once.
 *
 * Threads: collect and release on the loop thread (sk_ref is not atomic);
 * sk_upcache_at on the thread running the job, between the two.
 *
 * Errors: collect returns SK_ERR_NOMEM (nothing is held then).
 */
#ifndef UPCACHE_H
#define UPCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

typedef struct sk_upbatch {
    wal_lsn lsn; /* of the DATA record */
    kc_uuid id;
    int32_t part;
    uint32_t len;
    const uint8_t *data;
    sk_ref *ref;
    bool crc_checked; /* the batch's CRC field is right (sk_cbatch) */
} sk_upbatch;

typedef struct sk_upcache {
    sk_upbatch *v; /* in LSN order */
    size_t n;
    size_t at; /* sk_upcache_at's cursor */
    uint64_t bytes;
} sk_upcache;

int sk_upcache_collect(sk_node *n, wal_lsn from, wal_lsn to, uint64_t max_bytes,
                       sk_upcache *out)
    __attribute__((warn_unused_result));
/* The collected batch whose record starts at lsn, or NULL. Calls must come
 * in increasing LSN order (the cursor only moves forward). */
const sk_upbatch *sk_upcache_at(sk_upcache *c, wal_lsn lsn);
/* The WAL record's length (payload, without WAL_RECORD_HEADER) of a hit. */
uint32_t sk_upcache_record_len(const sk_upbatch *b);
/* Puts every hold and empties c; safe to call again. */
void sk_upcache_release(sk_upcache *c);

#endif
