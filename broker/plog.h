/*
 * plog: topics and partitions in memory, and the WAL cache.
 *
 * Topics are found by name and by id. Each partition keeps its offsets, its
 * idempotent producers, its cached batches (a ring in offset order) and the
 * fetches parked on it. The cache is bounded by wal.cache.bytes, evicting in
 * WAL order, but never a batch the SQLite view does not cover yet: until it
 * does, the cache is the only index of that batch.
 *
 * Thread: the event loop.
 */
#ifndef PLOG_H
#define PLOG_H

#include "types.h"

/* Registers a new topic (taking conf) whose partitions this node serves
 * (`own` SK_OWN_ACTIVE: a single node) or not yet (SK_OWN_NONE: a cluster
 * member, until it adopts them). NULL when out of memory. */
sk_topic *sk_topic_new(sk_node *n, const kc_uuid *id, const char *name, size_t len,
                       int32_t nparts, int16_t rf, sk_tconf *conf, uint64_t first_stream,
                       sk_own own);
/* Unregisters and frees a topic: its cached batches are dropped and its
 * parked fetches woken (they then see the topic gone). */
void sk_topic_remove(sk_node *n, sk_topic *t);
/* Adds partitions up to nparts, numbering their streams from first_stream. */
int sk_topic_grow(sk_topic *t, int32_t nparts, uint64_t first_stream, sk_own own);
sk_topic *sk_topic_get(const sk_node *n, const char *name, size_t len);
sk_topic *sk_topic_get_id(const sk_node *n, const kc_uuid *id);
static inline sk_part *sk_part_get(const sk_topic *t, int32_t i)
{
    return t && i >= 0 && i < t->nparts ? t->parts[i] : NULL;
}

/* Kafka's rules for topic names; returns NULL or the reason. */
const char *sk_topic_name_invalid(const char *name, size_t len);

sk_pstate *sk_part_pstate(sk_part *p, int64_t pid, bool create);

/* True when this node serves the partition now. */
static inline bool sk_part_serving(const sk_part *p)
{
    return p && p->own == SK_OWN_ACTIVE;
}
/* True when the SQLite view holds what the partition had before this node
 * adopted it: the view indexes the older batches only once it has applied
 * the ADOPT record. Until then a read below the cache waits (Fetch, Follow)
 * or answers a retriable error (ListOffsets), never "no data". */
static inline bool sk_part_view_ready(const sk_node *n, const sk_part *p)
{
    return p->adopt_end <= n->store_applied;
}
/* The view now covers the own WAL below n->store_applied, up from `before`:
 * wakes what waits on partitions whose adoption it has just applied. */
void sk_parts_view_applied(sk_node *n, wal_lsn before);
/* Forgets the partition's state here (it left, or never came): its cached
 * batches, producers and offsets; parked fetches are woken to find it gone. */
void sk_part_release(sk_node *n, sk_part *p);

/* Adds an appended batch at the end of the partition's cache, which then
 * owns it; it counts b->len bytes. False when out of memory: b (and its
 * hold on b->backing) is freed then. */
bool sk_cache_add(sk_node *n, sk_part *p, sk_cbatch *b) __attribute__((warn_unused_result));
/* b, cached and not yet evicted, counts `extra` more bytes: the part of the
 * request frame it keeps in place that no other cached batch covers. */
void sk_cache_charge(sk_node *n, sk_cbatch *b, uint32_t extra);
/* Evicts the oldest batches while over the limit and covered by the view.
 * An evicted batch a response still holds (sk_ref) leaves the cache and its
 * byte count at once, and is freed when the last response lets go. */
void sk_cache_evict(sk_node *n);
/* Drops p's cached batches that end below `below` and that the view
 * covers (compaction rewrote them: reads go to the new objects). */
void sk_cache_drop_below(sk_node *n, sk_part *p, int64_t below);

/* Collects cached batches of p holding offsets in [from, hw), in order,
 * until max_bytes is reached (the first batch always counts). Returns the
 * number of batches put in segs, and in refs (when not NULL) each batch's
 * count: whoever keeps pointing at a batch past this loop turn holds it;
 * *miss is true when the batch holding `from` is older than the cache (it
 * must be read from storage). */
int sk_part_cached(const sk_part *p, int64_t from, int64_t hw, int64_t max_bytes, kc_bytes *segs,
                   sk_ref **refs, int maxsegs, int64_t *bytes, bool *miss);
/* The same as cached batches: up to max of them from the one holding
 * `from`, below hw, until max_bytes (the first always counts). */
int sk_part_cached_batches(const sk_part *p, int64_t from, int64_t hw, int64_t max_bytes,
                           const sk_cbatch **out, int max, bool *miss);
/* The cached batch holding offset, or NULL. */
const sk_cbatch *sk_part_cached_at(const sk_part *p, int64_t offset);
/* Oldest offset the cache holds for p, or -1. */
int64_t sk_part_cache_start(const sk_part *p);

/* Parked fetches and follow requests. */
int sk_part_add_waiter(sk_part *p, sk_waiter *w);
void sk_part_del_waiter(sk_part *p, sk_waiter *w);
/* Wakes every waiter parked on p (the high watermark moved or p went away). */
void sk_part_wake(sk_part *p);

#endif
