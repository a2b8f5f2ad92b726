/*
 * authz: what a client may do, asked of the ACL authorizer (acl.h) with the
 * connection's principal and address, and Kafka's "authorized operations"
 * bit fields (Metadata, DescribeCluster, DescribeGroups): bit n is set when
 * AclOperation code n is allowed (3 READ, 4 WRITE, 5 CREATE, 6 DELETE,
 * 7 ALTER, 8 DESCRIBE, 9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS,
 * 11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE).
 *
 * The authorizer is on when authorizer.class.name names it; off, every
 * operation is allowed and the bit fields hold every operation a resource
 * type supports (as Kafka lists them).
 *
 * Skiff's own node-to-node RPCs (keys from KRPC_KEY_MIN, whatever their
 * number) need ClusterAction on the cluster, as Kafka's inter-broker APIs
 * do: super users (the nodes' own principals) or a binding. dispatch.c asks
 * sk_authz_internal before any of them is decoded or handled. A connection
 * whose client id names a node (rpc/peer.h) is spared the checks of Kafka
 * APIs (a proxy forwards what its client was allowed) only with that
 * same ClusterAction.
 *
 * The one table of what each API needs (authz.c): sk_authz_need gives the
 * resource type and operation an API checks, and the Kafka error code a
 * refusal gets; handlers ask for each resource they act on.
 *
 * Thread: the event loop.
 */
#ifndef AUTHZ_H
#define AUTHZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

#define SK_OPS_TOPIC                                                                           \
    ((1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11))
#define SK_OPS_CLUSTER                                                                         \
    ((1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12))
#define SK_OPS_GROUP ((1 << 3) | (1 << 6) | (1 << 8))

typedef struct sk_authz_need {
    int16_t key;   /* API key */
    int8_t rtype;  /* acl.h resource type: what the API checks first */
    int8_t op;     /* acl.h operation */
    int16_t error; /* Kafka's answer to a refusal */
} sk_authz_need;

/* The table's entry of an API (NULL: nothing to check). */
const sk_authz_need *sk_authz_need_of(int16_t key);
/* The operation r's API checks first (the table's), SK_ACL_OP_ALL for an
 * API the table does not list (only super users pass). */
int8_t sk_authz_op(const sk_req *r);

bool sk_authz_on(const sk_node *n);
/* Whether r's connection has ClusterAction on the cluster (always with the
 * authorizer off). */
bool sk_authz_node(const sk_req *r);
/* 0 when r, an internal RPC, may be served, else Kafka's error for it
 * (CLUSTER_AUTHORIZATION_FAILED). */
int16_t sk_authz_internal(const sk_req *r);
/* Whether r's client may do op on the resource (rtype, name). */
bool sk_authorize(const sk_req *r, int8_t rtype, const char *name, size_t nlen, int8_t op);
/* The same for the cluster resource. */
bool sk_authorize_cluster(const sk_req *r, int8_t op);
/* Whether op is allowed on at least one resource of the type. */
bool sk_authorize_any(const sk_req *r, int8_t rtype, int8_t op);
/* A topic of a request: t when known, else the name the request gives
 * (an unknown topic named by id only is not refused here). */
bool sk_authz_topic(const sk_req *r, const struct sk_topic *t, kc_str name, int8_t op);
/* A group named by a request. */
bool sk_authz_group(const sk_req *r, kc_str group, int8_t op);
/* A transactional id named by a request (Kafka's TRANSACTIONAL_ID resource):
 * WRITE to use it (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
 * EndTxn, Produce), DESCRIBE to find its coordinator or describe it. */
bool sk_authz_txn(const sk_req *r, kc_str id, int8_t op);
/* A resource of DescribeConfigs / AlterConfigs / IncrementalAlterConfigs
 * (config resource type 2 topic, 4 broker, 8 broker logger, 32 group): 0
 * when op is allowed on it, else Kafka's error code for its type. */
int16_t sk_authz_config(const sk_req *r, int8_t config_type, kc_str name, int8_t op);
/* The authorized operations of a resource, among `ops`. */
int32_t sk_authz_ops(const sk_req *r, int8_t rtype, const char *name, size_t nlen, int32_t ops);

#endif
