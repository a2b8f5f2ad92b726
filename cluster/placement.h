/*
 * placement: the controller's decisions, as a pure function of the cluster's
 * state and the time (docs/cluster.md, "Partition state", "Unplanned").
 *
 * The controller feeds pl_plan() what etcd says (live nodes, partitions,
 * logs) and gets back the actions to carry out as compare-and-swap
 * transactions. Nothing here does I/O or reads a clock: `now_ms` is given, so
 * that tests drive time (as broker/gcoord.c does for groups).
 *
 * Decisions, in priority order:
 *  1. custody: a log is dead when it is marked so, or when its node is not
 *     live, or when its node now writes another log (it restarted). Every
 *     dead log with no custodian, or whose custodian is not a live node,
 *     gets one (PL_ACT_CUSTODY, which also marks it dead): a live node of the
 *     zone of the log's node when there is one, else any live node; the one
 *     with the fewest logs in custody, ties by node id. With no live node
 *     at all, nothing is planned.
 *  2. lost partitions: an `active` partition whose log is dead or whose node
 *     is not live (its log is then dead too, or about to be), a `moving`
 *     partition whose target is not live or draining, and a `handoff`
 *     partition whose target is not live or draining, are (re)targeted to a
 *     live, non-draining node: epoch + 1, the source log kept (for `active`:
 *     its own log becomes the source).
 *  3. placement: a `new` partition with no node gets one (epoch 1).
 *  4. draining: `active` partitions of a draining node move away (epoch + 1,
 *     source = their log).
 *  5. rebalance (when enabled): while the most loaded live node has more
 *     than the least loaded one + 1, and more than (100 + imbalance_pct)% of
 *     the mean, move one of its `active` partitions to the least loaded;
 *     at most max_moves partitions in `moving`/`handoff` at once (counting
 *     those already in flight), and not before `rebalance_delay_ms` after the
 *     last change of the set of live nodes (a node that just restarted gets
 *     its share once, not a partition per heartbeat).
 *
 * Choosing a target: the live, non-draining node with the fewest partitions
 * assigned (counting `new`, `active`, `moving` and `handoff` targets, and
 * the actions already chosen in this plan). Ties go first to a node whose
 * zone holds the fewest of this topic's partitions, then to the node whose
 * zone differs from the previous pick for this topic, then by node id. Thus
 * a topic's partitions spread over nodes first and zones second, and a dead
 * node's partitions spread over the survivors. Internal partitions
 * (__consumer_offsets) count like any other.
 *
 * Contract: pure, any thread. The caller owns every array; pl_plan writes at
 * most `cap` actions into `out` and returns how many it wrote (it plans the
 * most urgent first, and the next call plans the rest).
 */
#ifndef PLACEMENT_H
#define PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"

#define PL_ZONE_MAX 64

typedef struct pl_node {
    int32_t id;
    char zone[PL_ZONE_MAX]; /* "" when the node has no broker.rack */
    int64_t log;            /* the log its current incarnation writes */
    bool draining;          /* shutting down: takes nothing, gives everything */
} pl_node;

typedef enum { PL_NEW, PL_ACTIVE, PL_MOVING, PL_HANDOFF } pl_state;

typedef struct pl_part {
    kc_uuid topic;
    int32_t index;
    pl_state state;
    int32_t epoch;
    int32_t node;    /* main (ACTIVE), target (NEW, MOVING, HANDOFF), -1 unplaced */
    int64_t log;     /* ACTIVE: the main's log */
    int64_t src_log; /* MOVING, HANDOFF: the log the partition leaves */
} pl_part;

typedef enum { PL_LOG_LIVE, PL_LOG_DEAD } pl_log_state;

typedef struct pl_log {
    int64_t id;
    int32_t node;      /* the node whose incarnation wrote it */
    char zone[PL_ZONE_MAX]; /* that node's zone */
    pl_log_state state;
    int32_t custodian; /* DEAD: the node in charge, -1 none */
} pl_log;

typedef struct pl_config {
    bool rebalance;          /* auto.leader.rebalance.enable */
    int imbalance_pct;       /* leader.imbalance.per.broker.percentage */
    int max_moves;           /* planned moves in flight at once */
    int64_t rebalance_delay_ms;
} pl_config;

typedef struct pl_input {
    const pl_node *nodes; /* live nodes only */
    size_t nnodes;
    const pl_part *parts;
    size_t nparts;
    const pl_log *logs;
    size_t nlogs;
    int64_t nodes_changed_ms; /* when the set of live nodes last changed */
} pl_input;

typedef enum {
    PL_ACT_CUSTODY, /* log -> node */
    PL_ACT_PLACE,   /* NEW partition -> node, epoch 1 */
    PL_ACT_MOVE,    /* ACTIVE partition -> MOVING to node, epoch + 1, src_log = its log */
    PL_ACT_RETARGET /* MOVING/HANDOFF (or ACTIVE on a dead log) -> node, epoch + 1 */
} pl_act_type;

typedef struct pl_action {
    pl_act_type type;
    size_t part;   /* index into pl_input.parts (PLACE, MOVE, RETARGET) */
    size_t log;    /* index into pl_input.logs (CUSTODY) */
    int32_t node;  /* the chosen node */
    int32_t epoch; /* the partition's new epoch (PLACE: 1) */
    int64_t src_log; /* MOVE, RETARGET: the log the partition leaves */
} pl_action;

size_t pl_plan(const pl_input *in, const pl_config *cfg, int64_t now_ms, pl_action *out,
               size_t cap);

#endif
