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
 *     the mean, move one of its `active` partitions to the least loaded: the
 *     lowest-numbered one of the topic whose count on the source exceeds its
 *     count on the least loaded node the most (so that each topic ends spread
 *     over the nodes, not only the total); at most max_moves partitions in `moving`/`handoff` at once (counting
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
 * most urgent first, and the next call plans the rest). It allocates scratch
 * memory linear in the input and frees it before returning; when it cannot
 * get it, it plans nothing (returns 0) and the next call tries again.
 *
 * How the rules above read where they leave room:
 *  - One call plans at most one action per partition and per log, and none
 *    for a partition or log that needs none. Applying a call's actions and
 *    calling again at the same time plans nothing more, unless `cap` cut the
 *    first call short.
 *  - The output depends on the content of the input, not on the order of its
 *    arrays: logs are visited by id, partitions by (topic, index), nodes by
 *    id; the indices in the actions point into the arrays as given.
 *  - Ids are unique: node ids in `nodes`, log ids in `logs`, (topic, index)
 *    in `parts`. Node ids are >= 0. Log ids grow (cluster/next_log), so a
 *    log newer than its node's current `log` is not dead: its node has not
 *    republished its nodes/ key yet.
 *  - Custody prefers, in turn: a node that is not draining (a draining one
 *    would hand custody on soon; it is chosen only when every live node
 *    drains), the log's zone, the fewest logs in custody, the lowest id. A
 *    log whose zone is "" prefers no zone. A live custodian is kept, even a
 *    draining one, until it leaves.
 *  - Lost and unplaced partitions count on no node until a plan gives them
 *    one. A partition's own place is left out of its topic's zone counts.
 *    Nodes without a zone ("") count as one zone. "The previous pick for
 *    this topic" is this call's previous pick.
 *  - A `new` partition whose node is not live or is draining is lost too:
 *    step 3 places it again (PL_ACT_PLACE, epoch + 1). An unplaced partition
 *    has epoch 0, so a first placement has epoch 1, and every action's epoch
 *    is the partition's epoch + 1. A partition at INT32_MAX is left alone.
 *  - Draining moves all of a draining node's active partitions at once: not
 *    bounded by max_moves (the node cannot exit before), but they count as in
 *    flight for the rebalance, as do retargets of `active` partitions.
 *  - Rebalance weighs only live nodes that are not draining; max_moves <= 0
 *    disables it. Its source is the most loaded node (ties: lowest id); it
 *    gives the lowest-numbered `active` partition of the topic whose count
 *    on it minus its count on the least loaded node is largest (ties: the
 *    topic with the most partitions on the source, then the lowest topic
 *    id), to the target chosen as above. A source whose partitions are all
 *    still landing stops it.
 *
 * Actions: CUSTODY has part = SIZE_MAX, epoch 0, src_log -1; partition
 * actions have log = SIZE_MAX, and PLACE has src_log -1. RETARGET of an
 * `active` partition makes it `moving` (src_log = its log); of a `moving` or
 * `handoff` one keeps its state and src_log.
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

/* load[k]: the partitions counted on in->nodes[k] when choosing a target, as
 * the input stands (for metrics). `load` has in->nnodes entries. Allocates
 * nothing. */
void pl_loads(const pl_input *in, int32_t *load);

/* "custody", "place", "move", "retarget": for logs. */
const char *pl_act_name(pl_act_type t);

#endif
