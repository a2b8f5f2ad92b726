/*
 * progress: how far long administrative work has got, for metrics, `skiffd
 * status` and the log (docs/operations.md, "Work under way").
 *
 * Three kinds of work, each counted in partitions:
 *  - rebalance: partitions the cluster is moving between nodes (a node
 *    joined or is draining, a reassignment, a failover's retargets), as the
 *    controller sees them: those moving now and those its placement would
 *    still move. Only the node holding the controller duties counts it.
 *  - reassignment: partitions an administrator asked this node to move
 *    (AlterPartitionReassignments) that do not serve at their target yet.
 *  - retention: a retention sweep over this node's partitions.
 *
 * A piece of work begins with a total, advances, and ends; begin and end
 * log a line with the counts (and at the end the duration), so that the log
 * says when each one ran and how long it took.
 *
 * Thread: the event loop for everything but sk_progress_advance, which any
 * thread may call (a worker sweeping partitions). Owns nothing; embedded in
 * sk_node.
 */
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct evbuffer;

typedef enum {
    SK_WORK_REBALANCE,
    SK_WORK_REASSIGN,
    SK_WORK_RETENTION,
    SK_WORK_KINDS
} sk_work_kind;

typedef struct sk_work {
    atomic_uint_fast64_t done; /* partitions done in the current (else last) run */
    uint64_t total;            /* partitions in it */
    bool running;
    bool quiet;                /* routine: its log lines at DEBUG unless notable */
    int64_t started_ms;        /* monotonic */
    double last_seconds;       /* duration of the last finished run, -1 before one */
    uint64_t runs;             /* finished runs */
} sk_work;

typedef struct sk_progress {
    sk_work w[SK_WORK_KINDS];
} sk_progress;

void sk_progress_init(sk_progress *p);
/* "rebalance", "reassignment", "retention": the metrics' `work` label. */
const char *sk_progress_name(sk_work_kind k);
/* Starts a run of `total` partitions (nothing done yet). Logs it, at INFO
 * unless `quiet` (routine runs: a retention sweep after each snapshot). */
void sk_progress_begin(sk_progress *p, sk_work_kind k, uint64_t total, bool quiet);
/* Sets where a running piece of work stands (done <= total). */
void sk_progress_set(sk_progress *p, sk_work_kind k, uint64_t done, uint64_t total);
/* One more partition done: any thread. */
void sk_progress_advance(sk_progress *p, sk_work_kind k);
/* Ends the run; logs its counts and duration, at INFO unless the run was
 * quiet and is not `notable`. `detail` (may be NULL) is appended to the log
 * line. No-op when not running. */
void sk_progress_end(sk_progress *p, sk_work_kind k, const char *detail, bool notable);
bool sk_progress_running(const sk_progress *p, sk_work_kind k);
/* The skiff_work_* series. */
void sk_progress_metrics(const sk_progress *p, struct evbuffer *b);

#endif
