/*
 * handlers: one function per Kafka API, registered in dispatch.c.
 *
 * Each takes a decoded request (r->body) and a default-initialised response
 * (r->resp), and finishes the request with sk_req_respond, sk_req_silent or
 * sk_req_close, at once or later from a callback.
 *
 * Thread: the event loop.
 */
#ifndef HANDLERS_H
#define HANDLERS_H

#include "types.h"

void h_produce(sk_req *r);
void h_fetch(sk_req *r);
void h_list_offsets(sk_req *r);
void h_metadata(sk_req *r);
void h_find_coordinator(sk_req *r);
void h_create_topics(sk_req *r);
void h_delete_topics(sk_req *r);
void h_create_partitions(sk_req *r);
void h_init_producer_id(sk_req *r);
/* Transactions (h_txn.c); sk_init_txn_producer: InitProducerId with a
 * transactional id. */
void sk_init_txn_producer(sk_req *r);
void h_add_partitions_to_txn(sk_req *r);
void h_add_offsets_to_txn(sk_req *r);
void h_end_txn(sk_req *r);
void h_txn_offset_commit(sk_req *r);
void h_describe_transactions(sk_req *r);
void h_list_transactions(sk_req *r);
void h_offset_for_leader_epoch(sk_req *r);
void h_describe_configs(sk_req *r);
void h_alter_configs(sk_req *r);
void h_incremental_alter_configs(sk_req *r);
void h_delete_records(sk_req *r);
void h_describe_cluster(sk_req *r);
void h_describe_log_dirs(sk_req *r);
void h_alter_partition_reassignments(sk_req *r);
void h_list_partition_reassignments(sk_req *r);
void h_describe_topic_partitions(sk_req *r);
void h_describe_producers(sk_req *r);
void h_elect_leaders(sk_req *r);
void h_alter_replica_log_dirs(sk_req *r);
void h_describe_quorum(sk_req *r);

/* Group configs (h_gconf.c), for DescribeConfigs, AlterConfigs and
 * IncrementalAlterConfigs on resource type GROUP. Both may finish later:
 * they hold r->pending meanwhile and release it as the handlers' other
 * asynchronous steps do (r->on_done, else the response). */
struct kp_DescribeConfigsRequest_DescribeConfigsResource;
struct kp_DescribeConfigsResponse_DescribeConfigsResult;
void sk_describe_group_configs(sk_req *r,
                               const struct kp_DescribeConfigsRequest_DescribeConfigsResource *res,
                               struct kp_DescribeConfigsResponse_DescribeConfigsResult *out);
/* One change: op 0 set, 1 delete, 2 append, 3 subtract (Kafka's). */
typedef struct sk_gconf_op {
    kc_str name;
    int8_t op;
    kc_str value;
} sk_gconf_op;
/* replace: the ops' SETs become the whole set (AlterConfigs). */
void sk_alter_group_configs(sk_req *r, kc_str group, const sk_gconf_op *ops, int nops,
                            bool replace, bool validate_only, int16_t *err, kc_str *msg);

/* The brokers a client on r's connection is told about (Metadata,
 * DescribeCluster): this node alone, or a cluster's live nodes at their
 * address on the listener the client came in on. */
typedef struct sk_broker {
    int32_t id;
    const char *host;
    int32_t port;
    const char *rack; /* NULL: none */
} sk_broker;
/* An arena array; returns the count, -1 when out of memory. */
int sk_brokers_for(sk_req *r, sk_broker **out);
int32_t sk_controller_for(sk_req *r);
/* The address of `node` for r's client (false: not live). */
bool sk_broker_addr(sk_req *r, int32_t node, sk_broker *out);
/* The topic a request names: by id from version `id_from` on (Produce and
 * Fetch 13, OffsetCommit and OffsetFetch 10), by name before. NULL when
 * unknown; the all-zero id names no topic. */
sk_topic *sk_req_topic(sk_req *r, int16_t id_from, kc_str name, const kc_uuid *id);
/* The code for a topic sk_req_topic did not find: UNKNOWN_TOPIC_ID when it
 * was named by id, UNKNOWN_TOPIC_OR_PARTITION by name. */
int16_t sk_req_topic_unknown(sk_req *r, int16_t id_from);
/* KIP-951 leader hints: the node r's client should use for p, as Metadata
 * would name it to that client, with p's leader epoch. False on a single
 * node or when no node serves p now. */
bool sk_leader_hint(sk_req *r, const sk_part *p, int32_t *leader, int32_t *epoch);
/* Fill the KIP-951 hints of a Produce or Fetch response just before it is
 * sent (hints.c), in r's arena; nothing before Produce v10 / Fetch v16 or
 * on a single node. */
void sk_produce_hints(sk_req *r);
void sk_fetch_hints(sk_req *r);
/* A partition's leader as r's client is told (Metadata and
 * DescribeTopicPartitions): its main, or for a client of a routed zone a node
 * of that zone (proxy/route.h); -1 between two mains. */
int32_t sk_part_leader_for(sk_req *r, const sk_part *p);
/* The partition's main when that node is live (this node, on a single
 * node), else -1. */
int32_t sk_part_main_live(sk_req *r, const sk_part *p);
/* SASL and SCRAM credentials (h_sasl.c, h_scram.c; sasl.h). */
void h_sasl_handshake(sk_req *r);
void h_sasl_authenticate(sk_req *r);
void h_describe_user_scram_credentials(sk_req *r);
void h_describe_acls(sk_req *r);
void h_create_acls(sk_req *r);
void h_delete_acls(sk_req *r);
void h_alter_user_scram_credentials(sk_req *r);
/* Skiff's node-to-node RPCs (h_rpc.c). */
void h_handoff_ready(sk_req *r);
void h_node_status(sk_req *r);
void h_confirm(sk_req *r);
void h_follow(sk_req *r);
/* Frees the poll sessions a node keeps for proxies (sk_cluster_follow_sessions). */
void h_follow_sessions_free(struct sk_map *m);

/* Shutdown: answer every parked fetch and follow request now. */
void sk_fetch_wake_all(sk_node *n);

#endif
