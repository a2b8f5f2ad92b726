/*
 * cluster: the node as a member of a cluster (docs/cluster.md). NULL
 * (n->cluster) for a single node.
 *
 * It joins through the session (cluster/session.h), names the node's own
 * log (a new one for every start: <wal.url>/logs/<log id>), and turns what
 * etcd says into the node's state: topics and partitions in memory, which
 * partitions this node adopts, serves and hands over (handoff.c), which dead
 * logs it keeps in custody (custody.c), and, on the controller, the
 * placement decisions (controller.c). It fences the node: nothing is
 * acknowledged past the lease deadline, and a node whose lease is gone
 * starts again as a new incarnation.
 *
 * Thread: the event loop, except sk_cluster_read_foreign (any thread).
 */
#ifndef CLUSTER_H
#define CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmodel.h"
#include "types.h"

typedef struct sk_cluster sk_cluster;
typedef struct cs_session cs_session;

/* Joins the cluster (blocking: waits for etcd). */
sk_cluster *sk_cluster_new(sk_node *n, char *why, size_t whylen);
/* The node's own log is open: take the cluster's topics into memory and
 * start reacting to etcd (the loop runs next). */
int sk_cluster_start(sk_cluster *c) __attribute__((warn_unused_result));
/* SIGTERM: asks for this node's partitions to move away; done runs once
 * they have (or controlled.shutdown.timeout.ms passed). */
void sk_cluster_drain(sk_cluster *c, void (*done)(void *arg), void *arg);
/* The loop stopped: callbacks still to come (from etcd, reader threads,
 * logs closing) only return. NULL is fine. */
void sk_cluster_close(sk_cluster *c);
/* Leaves the cluster (revokes the lease) and frees everything, after the
 * node's own log closed (nothing more will be acknowledged). NULL is fine. */
void sk_cluster_destroy(sk_cluster *c);

cs_session *sk_cluster_session(sk_cluster *c);
cm_model *sk_cluster_model(sk_cluster *c);
struct sk_controller *sk_cluster_ctl(sk_cluster *c);
int64_t sk_cluster_log_id(const sk_cluster *c);
int64_t sk_cluster_payload_log_id(const sk_cluster *c);
/* The URL of log `log`'s WAL directory under wal.url. */
int sk_cluster_log_url(const sk_config *cfg, int64_t log, char *buf, size_t len)
    __attribute__((warn_unused_result));
/* Where a log's view lives in data.dir (own and custody logs). */
void sk_cluster_view_path(const sk_config *cfg, const char *kind, int64_t log, char *buf,
                          size_t len);

/* The lowest position of this node's own WAL that adopters of partitions
 * which left it still read (walrefs), UINT64_MAX when none: the WAL is not
 * trimmed below it. A partition handed over moments ago whose walref is not
 * in etcd yet is covered by its HANDOFF record, which its batches precede
 * (the record itself is never below the view's position). */
wal_lsn sk_cluster_walref_floor(sk_cluster *c);

/* The address of `node` on the listener named `listener` (the one the
 * client came in on), else on its first listener; false when the node is
 * not live. */
bool sk_cluster_node_addr(sk_cluster *c, int32_t node, const char *listener, const char **host,
                          int32_t *port, const char **rack);
int32_t sk_cluster_controller(sk_cluster *c);

/* Reads a record of another log's WAL (a batch adopted with its partition)
 * from the shared volume. Any thread; blocking. Errors as wal_read_record. */
int sk_cluster_read_foreign(sk_cluster *c, int64_t log, wal_lsn lsn, uint8_t *type, void *buf,
                            uint32_t cap, uint32_t *len) __attribute__((warn_unused_result));

/* The partition of __consumer_offsets a group's coordination lives on
 * (NULL before the internal topic is known). */
sk_part *sk_cluster_group_part(sk_cluster *c, const char *group, size_t len);
/* Java's String.hashCode of a UTF-8 group id, as Kafka places groups. */
int32_t sk_group_hash(const char *group, size_t len);
/* The partition of __consumer_offsets (of nparts > 0) a group hashes to, as
 * Kafka computes it: abs(hash) % nparts. */
int32_t sk_group_partition(const char *group, size_t len, int32_t nparts);

/* What the metrics show of the node's part in the cluster. */
typedef struct sk_cluster_stats {
    int64_t log_id;
    bool controller;
    size_t live_nodes, partitions_served, custody_logs;
    double lease_left_s; /* until the lease deadline (negative: past it) */
    uint64_t keepalives, keepalive_failures, watch_resets, lease_lapses;
    uint64_t adopted, left, published, publish_retries, rpc_sent, rpc_failed;
    double last_adopt_s, last_leave_s;
    uint64_t custody_opened, custody_finished;
    double custody_last_open_s;
    uint64_t rounds, actions, conflicts, failures;
    uint64_t etcd_requests, etcd_errors, etcd_timeouts, etcd_switches, etcd_watch_resumes;
    double etcd_latency_sum_s;
    uint64_t etcd_latency_count;
} sk_cluster_stats;
void sk_cluster_get_stats(sk_cluster *c, sk_cluster_stats *st);

/* For handoff.c and custody.c: the key-value data of a partition, the
 * node, and the handoff machinery. */
typedef struct sk_handoffs sk_handoffs;
sk_handoffs *sk_cluster_handoffs(sk_cluster *c);
/* The node-to-node RPC client, the main's side of proxied batches, the
 * proxy (NULL without a payload log) and its following of mains. */
struct rpc_client *sk_cluster_rpc(sk_cluster *c);
struct sk_links *sk_cluster_links(sk_cluster *c);
struct sk_proxy *sk_cluster_proxy(sk_cluster *c);
struct sk_follows *sk_cluster_follows(sk_cluster *c);
/* Proxies' poll sessions kept for them (h_follow.c owns the values, one
 * malloc'd block each). */
sk_map *sk_cluster_follow_sessions(sk_cluster *c);
const cm_part *sk_cluster_part_state(sk_cluster *c, const sk_part *p);
sk_node *sk_cluster_node(sk_cluster *c);

#endif
