/*
 * controller: the controller's duties on the node that holds them
 * (docs/cluster.md). It runs placement.h's decisions over what etcd says
 * and carries each out as a compare-and-swap on the key it changes: a dead
 * log's custody, a new partition's node, a partition's move. A transaction
 * that loses a race changes nothing; the next round decides again from the
 * newer state. Rounds run shortly after every change etcd reports (a few
 * milliseconds later, so that a burst of changes is planned once) and once a
 * second for decisions that wait on time (rebalancing).
 *
 * Progress (progress.h): as controller, each round counts the partitions
 * moving and those placement would still move (its plan without the limit
 * on moves in flight) as the `rebalance` work. On every node, the moves an
 * administrator asked of it (sk_controller_move) are the `reassignment`
 * work until each partition is active at its target (or gone).
 *
 * Thread: the event loop.
 */
#ifndef CONTROLLER_H
#define CONTROLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"

typedef struct sk_controller sk_controller;
typedef struct sk_cluster sk_cluster;

sk_controller *sk_controller_new(sk_cluster *c);
void sk_controller_destroy(sk_controller *ctl);
/* This node holds the controller duties (true) or no longer does. */
void sk_controller_set_active(sk_controller *ctl, bool on);
/* Something changed: plan a round soon (as controller), and see which
 * reassignments asked of this node are done (every node). */
void sk_controller_kick(sk_controller *ctl);

/* AlterPartitionReassignments, on any node: moves the partition to `node`
 * (a compare-and-swap of its key from active to moving; the move itself is
 * the usual handoff) and makes `node` its preferred node (cm_part.pref). fn
 * gets 0 or a Kafka error; it runs after the call. A partition already on
 * `node` is left alone (0). Returns 0 or a Kafka error found at once (fn
 * then does not run). */
int16_t sk_controller_move(sk_cluster *c, const kc_uuid *topic, int32_t part, int32_t node,
                           void (*fn)(void *arg, int16_t err), void *arg);

typedef struct sk_controller_stats {
    uint64_t rounds, actions, conflicts, failures;
    uint64_t custody, placed, moved, retargeted;
} sk_controller_stats;
void sk_controller_get_stats(const sk_controller *ctl, sk_controller_stats *st);

#endif
