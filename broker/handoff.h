/*
 * handoff: partitions leaving a log (HANDOFF) and joining this node's log
 * (ADOPT), as docs/cluster.md describes ("Partition state: the log is the
 * truth").
 *
 * Reconciliation is level-triggered: whenever a partition's key changes
 * (and on the cluster's periodic tick), sk_handoff_reconcile compares what
 * etcd says with what this node does with the partition (p->own) and starts
 * the next step when none is under way:
 *  - NONE, and etcd makes this node the target of a NEW or HANDOFF
 *    partition: adopt it (read the HANDOFF record from the source log on the
 *    shared volume, append ADOPT here, then make it ACTIVE in etcd with a
 *    compare-and-swap; only then is it served);
 *  - ACTIVE, and etcd moves it away from this node's log: leave (stop
 *    serving, wait for the view to hold every append, append HANDOFF with the
 *    state the view holds, publish its position in etcd, and tell the
 *    target with the HandoffReady RPC);
 *  - ACTIVE, and etcd gives it to another log without a move: this node
 *    missed its own fencing; it forgets the partition at once.
 * A publish that failed (etcd unreachable, or the key changed meanwhile) is
 * retried by later reconciliations with the same HANDOFF record.
 *
 * sk_handoff_write is also how custody.c hands over a dead log's partitions.
 *
 * Thread: the event loop.
 */
#ifndef HANDOFF_H
#define HANDOFF_H

#include "cmodel.h"
#include "types.h"

typedef struct sk_handoffs sk_handoffs;
typedef struct sk_cluster sk_cluster;
typedef struct sk_vlog sk_vlog;

sk_handoffs *sk_handoffs_new(sk_cluster *c);
/* The node stops: callbacks still to come only return; destroy (after the
 * etcd client, the RPC client, the readers and the logs are gone) frees
 * everything. */
void sk_handoffs_close(sk_handoffs *h);
void sk_handoffs_destroy(sk_handoffs *h);

void sk_handoff_reconcile(sk_handoffs *h, sk_part *p, const cm_part *cp);
/* The partition's key or topic is gone: what is held here is dropped (a
 * DROP record when this log holds its state). */
void sk_handoff_drop(sk_handoffs *h, sk_part *p);
/* Partitions adopted, served or leaving here. */
size_t sk_handoff_owned(const sk_handoffs *h);

/* Log `log` (the vlog v) hands partition (id, part) over: its HANDOFF record
 * (an existing one, or one written now from what v's view holds) is
 * published in etcd once etcd shows the partition moving from that log.
 * done (may be NULL) runs once it is published, or with an error when it
 * cannot be written; publishing itself is retried until etcd takes it. */
typedef void (*sk_handoff_fn)(void *arg, int err);
void sk_handoff_write(sk_handoffs *h, sk_vlog *v, int64_t log, const kc_uuid *id, int32_t part,
                      sk_handoff_fn done, void *arg);
/* Retries the publishes of log `log` still pending (custody's tick). */
void sk_handoff_retry(sk_handoffs *h);
/* Lowers *floor to the lowest position of log `log` that HANDOFF records
 * written but not yet (or only just) published keep for their adopters. */
void sk_handoff_pending_floor(const sk_handoffs *h, int64_t log, wal_lsn *floor);
/* Deletes the walrefs of partitions served here whose batches in the
 * referenced log are all in objects now (the cluster's tick). */
void sk_handoff_audit_walrefs(sk_handoffs *h);
/* How many HANDOFF records of log `log` wait to be published. */
size_t sk_handoff_pending(const sk_handoffs *h, int64_t log);

/* The HandoffReady RPC: partition (topic, part) waits for this node at
 * `epoch`, its state in record `src_lsn` of log `src_log`. A hint: the
 * adoption still follows etcd. Returns a Kafka error code (0: taken). */
int16_t sk_handoff_ready(sk_node *n, const kc_uuid *topic, int32_t part, int32_t epoch,
                         int64_t src_log, int64_t src_lsn);

typedef struct sk_handoff_stats {
    uint64_t adopted, left, published, publish_retries, adopt_refused, rpc_sent, rpc_failed;
    int64_t last_adopt_ms;   /* from etcd showing it until served */
    int64_t last_leave_ms;   /* from etcd moving it until published */
} sk_handoff_stats;
void sk_handoff_get_stats(const sk_handoffs *h, sk_handoff_stats *st);

#endif
