/*
 * follow: the proxy's side of proxy fetch (docs/zones.md, "Proxy fetch").
 *
 * For a partition it serves to consumers of its zone, a proxy knows the
 * main's watermarks and reads the batches itself, from the shared volume or
 * from objects, never from the main across the zone. The Follow RPC
 * (broker/h_follow.c serves it) gives, per partition, the high watermark,
 * log start and epoch, and where the batches from an offset on are.
 *
 * Per partition this module keeps:
 *  - the last watermarks the main gave (unknown until the first answer);
 *  - a poll: while consumers wait at the end of the log, one long-polling
 *    Follow from the high watermark on. When the main's watermark moves, the
 *    new batches are located in the same answer, read into the partition's
 *    tail (a bounded buffer of whole batches), and the parked fetches woken;
 *  - reads for fetches below the watermark that the tail does not hold: a
 *    Follow without waiting, then the batches read from where it says.
 * Every answer moves the watermarks (and wakes parked fetches when the high
 * watermark grew).
 *
 * Thread: the event loop.
 */
#ifndef FOLLOW_H
#define FOLLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "tier.h"
#include "types.h"

typedef struct sk_follows sk_follows;
struct sk_cluster;
struct rpc_client;

sk_follows *sk_follows_new(sk_node *n, struct sk_cluster *c, struct rpc_client *rpc);
void sk_follows_close(sk_follows *f);
/* After the RPC client and the reader threads are gone. */
void sk_follows_destroy(sk_follows *f);

typedef struct sk_follow_marks {
    int64_t hw, log_start;
    int32_t epoch;
} sk_follow_marks;

/* The main's watermarks as last heard; false while unknown. */
bool sk_follow_marks_of(sk_follows *f, const sk_part *p, sk_follow_marks *out);

/* Makes sure a poll runs for p from `from` on (consumers wait there). */
void sk_follow_poll(sk_follows *f, sk_part *p, int64_t from);

/* Batches of p from `offset` on that the tail holds, up to max_bytes (the
 * first batch always): points into the tail (valid until the loop runs
 * again). False when the tail does not hold `offset`. */
bool sk_follow_tail(sk_follows *f, const sk_part *p, int64_t offset, int64_t max_bytes,
                    const uint8_t **buf, int64_t *len);

/* Reads batches of p from `offset` on, at most max_bytes (at least one
 * batch). cb owns buf; err is < 0 for a failure here, or a Kafka code
 * (> 0) the main gave. When the main says the batches are in an object,
 * they are read by reference and obj_cb gets them instead (tier.h,
 * sk_tier_read_ref). Neither runs inside this call. */
typedef void (*sk_follow_cb)(void *arg, int err, uint8_t *buf, size_t len, int64_t first,
                             int64_t end);
void sk_follow_read(sk_follows *f, sk_part *p, int64_t offset, int64_t max_bytes,
                    sk_follow_cb cb, sk_tier_ref_cb obj_cb, void *arg);

typedef struct sk_follow_stats {
    uint64_t polls, reads, located_batches, read_bytes, object_reads, tail_hits, errors;
    uint64_t tail_bytes; /* held now */
} sk_follow_stats;
void sk_follow_get_stats(const sk_follows *f, sk_follow_stats *st);

#endif
