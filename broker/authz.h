/*
 * authz: what a client may do with a resource, as Kafka's "authorized
 * operations" bit fields (Metadata, DescribeCluster, DescribeGroups): bit n
 * is set when AclOperation code n is allowed (3 READ, 4 WRITE, 5 CREATE,
 * 6 DELETE, 7 ALTER, 8 DESCRIBE, 9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS,
 * 11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE).
 *
 * Skiff has no authorizer yet: every operation a resource type supports (as
 * Kafka lists them) is allowed. Constants only.
 */
#ifndef AUTHZ_H
#define AUTHZ_H

#define SK_OPS_TOPIC                                                                           \
    ((1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11))
#define SK_OPS_CLUSTER                                                                         \
    ((1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12))
#define SK_OPS_GROUP ((1 << 3) | (1 << 6) | (1 << 8))

#endif
