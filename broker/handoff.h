/*
 * handoff: partitions leaving a log (HANDOFF) and joining this node's log
 * (ADOPT), as docs/cluster.md describes.
 *
 * Thread: the event loop.
 */
#ifndef HANDOFF_H
#define HANDOFF_H

#include "types.h"

/* The HandoffReady RPC: partition (topic, part) waits for this node at
 * `epoch`, its state in record `src_lsn` of log `src_log`. A hint: the
 * adoption still checks etcd. Returns a Kafka error code (0: taken). */
int16_t sk_handoff_ready(sk_node *n, const kc_uuid *topic, int32_t part, int32_t epoch,
                         int64_t src_log, int64_t src_lsn);

#endif
