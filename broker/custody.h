/*
 * custody: dead logs this node was put in charge of (docs/cluster.md,
 * "Unplanned: a node dies").
 *
 * When etcd names this node the custodian of a dead log, it opens that log
 * as its new owner (claiming the next owner epoch of its WAL directory at
 * once: the dead node's lease expiry proves it acknowledges nothing more),
 * restores the log's view from its newest snapshot in the object store,
 * replays the WAL, and hands over every partition etcd moves away from it
 * (handoff.c writes and publishes the HANDOFF records). Once no partition
 * and no walref needs the log any more, it deletes the log's WAL, its view
 * snapshots and its key. A custodian that dies leaves the job to the next
 * one, which finds the HANDOFF records already written in the log.
 *
 * Opening a log is blocking I/O (the shared volume, the object store) and
 * runs on a thread of its own; the log's appends then run on the loop.
 *
 * Thread: the event loop.
 */
#ifndef CUSTODY_H
#define CUSTODY_H

#include "cmodel.h"
#include "types.h"

typedef struct sk_custody sk_custody;
typedef struct sk_cluster sk_cluster;

sk_custody *sk_custody_new(sk_cluster *c);
/* The node stops: logs in custody are closed (their next custodian carries
 * on). Before the cluster's session ends. */
void sk_custody_close(sk_custody *cu);
void sk_custody_destroy(sk_custody *cu);

void sk_custody_log_changed(sk_custody *cu, const cm_log *now, const cm_log *was);
void sk_custody_part_changed(sk_custody *cu, const cm_part *p);
void sk_custody_walref_changed(sk_custody *cu);
void sk_custody_tick(sk_custody *cu);
/* The lease deadline moved: logs in custody acknowledge nothing past it. */
void sk_custody_set_deadline(sk_custody *cu, int64_t deadline_us);

/* Logs in custody now, and since start. */
size_t sk_custody_count(const sk_custody *cu);

typedef struct sk_custody_stats {
    uint64_t opened, finished, handoffs;
    int64_t last_open_ms;   /* fencing, restore and replay of the last log */
} sk_custody_stats;
void sk_custody_get_stats(const sk_custody *cu, sk_custody_stats *st);

#endif
