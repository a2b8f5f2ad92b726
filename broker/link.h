/*
 * link: the main's side of proxy produce (docs/zones.md, "Proxy produce").
 *
 * A proxy in another zone wrote batches of this node's partitions to its
 * payload log and names them in a ConfirmRequest. For each batch, in the
 * order given:
 *  1. checks: the partition is served here at an epoch no older than the
 *     proxy's, the payload log is a live node's, the position is not below
 *     what this log told etcd it no longer needs (its payref floor);
 *  2. a batch already linked from that place (a retried confirm) is
 *     answered as the first time;
 *  3. this log's payref on the payload log exists in etcd (created, with a
 *     compare-and-swap on both logs being live, before the first link);
 *  4. the payload is read from the shared volume (a reader thread) and
 *     checked: record type, partition, length, CRC and header against the
 *     confirm;
 *  5. in arrival order per partition: idempotence, offsets and a LINK
 *     record in this node's log (append.h); a batch that follows on from one
 *     answered REQUEST_TIMED_OUT unlinked is answered so too (seqgap.h);
 *  6. the answer goes back once the link is durable.
 * The payref's floor rises as links are uploaded (their batches then live
 * in objects, and a view snapshot says so): the payload log may then be
 * trimmed below it.
 *
 * Thread: the event loop.
 */
#ifndef LINK_H
#define LINK_H

#include "types.h"

typedef struct sk_links sk_links;
struct sk_cluster;

sk_links *sk_links_new(sk_node *n, struct sk_cluster *c);
/* Stops: what waits only returns from now on (the node is closing). */
void sk_links_close(sk_links *l);
void sk_links_destroy(sk_links *l);

/* Serves a ConfirmRequest (r->body), answering r. */
void sk_links_confirm(sk_links *l, sk_req *r);

/* Publishes the payref floors that rose (after a trim of this node's WAL, or
 * on a timer), and forgets payload logs this log no longer needs. */
void sk_links_tick(sk_links *l);

typedef struct sk_links_stats {
    uint64_t confirms, batches, linked, duplicates, refused, read_errors;
    uint64_t payref_creates, payref_updates;
    int64_t read_us_last; /* the last payload read's time */
} sk_links_stats;
void sk_links_get_stats(const sk_links *l, sk_links_stats *st);

#endif
