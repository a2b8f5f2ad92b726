#include "authz.h"

#include <stdio.h>
#include <string.h>

#include "acls.h"
#include "config.h"
#include "net.h"
#include "sk_err.h"

#define T SK_ACL_RES_TOPIC
#define G SK_ACL_RES_GROUP
#define C SK_ACL_RES_CLUSTER
#define TOPIC_E SK_KAFKA_TOPIC_AUTHORIZATION_FAILED
#define GROUP_E SK_KAFKA_GROUP_AUTHORIZATION_FAILED
#define CLUSTER_E SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED

/* As Kafka 4.3's KafkaApis asks. APIs that check per resource type
 * (DescribeConfigs, AlterConfigs) or in several steps (InitProducerId,
 * CreateTopics, Metadata) name their first check; the handler does the
 * rest. */
static const sk_authz_need needs[] = {
    {0, T, SK_ACL_OP_WRITE, TOPIC_E},            /* Produce */
    {1, T, SK_ACL_OP_READ, TOPIC_E},             /* Fetch */
    {2, T, SK_ACL_OP_DESCRIBE, TOPIC_E},         /* ListOffsets */
    {3, T, SK_ACL_OP_DESCRIBE, TOPIC_E},         /* Metadata (CREATE to auto-create) */
    {8, G, SK_ACL_OP_READ, GROUP_E},             /* OffsetCommit (+ READ on topics) */
    {9, G, SK_ACL_OP_DESCRIBE, GROUP_E},         /* OffsetFetch (+ DESCRIBE on topics) */
    {10, G, SK_ACL_OP_DESCRIBE, GROUP_E},        /* FindCoordinator */
    {11, G, SK_ACL_OP_READ, GROUP_E},            /* JoinGroup */
    {12, G, SK_ACL_OP_READ, GROUP_E},            /* Heartbeat */
    {13, G, SK_ACL_OP_READ, GROUP_E},            /* LeaveGroup */
    {14, G, SK_ACL_OP_READ, GROUP_E},            /* SyncGroup */
    {15, G, SK_ACL_OP_DESCRIBE, GROUP_E},        /* DescribeGroups */
    {16, G, SK_ACL_OP_DESCRIBE, GROUP_E},        /* ListGroups (CLUSTER DESCRIBE: all) */
    {19, C, SK_ACL_OP_CREATE, TOPIC_E},          /* CreateTopics (or CREATE on topic) */
    {20, T, SK_ACL_OP_DELETE, TOPIC_E},          /* DeleteTopics */
    {21, T, SK_ACL_OP_DELETE, TOPIC_E},          /* DeleteRecords */
    {22, C, SK_ACL_OP_IDEMPOTENT_WRITE, CLUSTER_E}, /* InitProducerId */
    {23, T, SK_ACL_OP_DESCRIBE, TOPIC_E},        /* OffsetForLeaderEpoch */
    {29, C, SK_ACL_OP_DESCRIBE, CLUSTER_E},       /* DescribeAcls */
    {30, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* CreateAcls */
    {31, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* DeleteAcls */
    {32, T, SK_ACL_OP_DESCRIBE_CONFIGS, TOPIC_E}, /* DescribeConfigs */
    {33, T, SK_ACL_OP_ALTER_CONFIGS, TOPIC_E},   /* AlterConfigs */
    {34, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* AlterReplicaLogDirs */
    {35, C, SK_ACL_OP_DESCRIBE, CLUSTER_E},       /* DescribeLogDirs */
    {37, T, SK_ACL_OP_ALTER, TOPIC_E},           /* CreatePartitions */
    {42, G, SK_ACL_OP_DELETE, GROUP_E},          /* DeleteGroups */
    {43, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* ElectLeaders */
    {44, T, SK_ACL_OP_ALTER_CONFIGS, TOPIC_E},   /* IncrementalAlterConfigs */
    {45, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* AlterPartitionReassignments */
    {46, C, SK_ACL_OP_DESCRIBE, CLUSTER_E},       /* ListPartitionReassignments */
    {47, G, SK_ACL_OP_DELETE, GROUP_E},          /* OffsetDelete (+ READ on topics) */
    {50, C, SK_ACL_OP_DESCRIBE, CLUSTER_E},       /* DescribeUserScramCredentials */
    {51, C, SK_ACL_OP_ALTER, CLUSTER_E},          /* AlterUserScramCredentials */
    {55, C, SK_ACL_OP_DESCRIBE, CLUSTER_E},       /* DescribeQuorum */
    {61, T, SK_ACL_OP_READ, TOPIC_E},            /* DescribeProducers */
    {68, G, SK_ACL_OP_READ, GROUP_E},            /* ConsumerGroupHeartbeat */
    {69, G, SK_ACL_OP_DESCRIBE, GROUP_E},        /* ConsumerGroupDescribe */
    {75, T, SK_ACL_OP_DESCRIBE, TOPIC_E},        /* DescribeTopicPartitions */
};
#define NNEEDS ((int)(sizeof needs / sizeof needs[0]))

const sk_authz_need *sk_authz_need_of(int16_t key)
{
    for (int i = 0; i < NNEEDS; i++)
        if (needs[i].key == key)
            return &needs[i];
    return NULL;
}

int8_t sk_authz_op(const sk_req *r)
{
    const sk_authz_need *nd = sk_authz_need_of(r->hdr.api_key);
    return nd ? nd->op : SK_ACL_OP_ALL;
}

bool sk_authz_on(const sk_node *n)
{
    return n->cfg->authorizer_class_name && *n->cfg->authorizer_class_name;
}

/* The client's address, without the port. */
static void host_of(const sk_conn *c, char *out, size_t len)
{
    snprintf(out, len, "%s", c->peer);
    char *colon = strrchr(out, ':');
    if (colon)
        *colon = 0;
}

static bool acl_check(const sk_req *r, int8_t rtype, const char *name, size_t nlen, int8_t op)
{
    sk_acl_set *s = sk_acls(r->node);
    char host[sizeof r->conn->peer];
    host_of(r->conn, host, sizeof host);
    return s && sk_acl_allowed(s, r->conn->principal, host, rtype, name ? name : "", nlen, op);
}

bool sk_authz_node(const sk_req *r)
{
    return !sk_authz_on(r->node) ||
           acl_check(r, SK_ACL_RES_CLUSTER, SK_ACL_CLUSTER_NAME, strlen(SK_ACL_CLUSTER_NAME),
                     SK_ACL_OP_CLUSTER_ACTION);
}

/* A node forwarding what a client asked it (a proxy) was checked there: it
 * passes, once its own principal has ClusterAction. A client id alone
 * proves nothing. */
static bool trusted_node(const sk_req *r)
{
    return r->conn->from_node >= 0 && sk_authz_node(r);
}

bool sk_authorize(const sk_req *r, int8_t rtype, const char *name, size_t nlen, int8_t op)
{
    if (!sk_authz_on(r->node) || trusted_node(r))
        return true;
    return acl_check(r, rtype, name, nlen, op);
}

int16_t sk_authz_internal(const sk_req *r)
{
    return sk_authz_node(r) ? 0 : SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
}

bool sk_authorize_cluster(const sk_req *r, int8_t op)
{
    return sk_authorize(r, SK_ACL_RES_CLUSTER, SK_ACL_CLUSTER_NAME,
                        strlen(SK_ACL_CLUSTER_NAME), op);
}

bool sk_authorize_any(const sk_req *r, int8_t rtype, int8_t op)
{
    if (!sk_authz_on(r->node) || trusted_node(r))
        return true;
    sk_acl_set *s = sk_acls(r->node);
    char host[sizeof r->conn->peer];
    host_of(r->conn, host, sizeof host);
    return s && sk_acl_allowed_any(s, r->conn->principal, host, rtype, op);
}

bool sk_authz_topic(const sk_req *r, const sk_topic *t, kc_str name, int8_t op)
{
    if (t)
        return sk_authorize(r, SK_ACL_RES_TOPIC, t->name, strlen(t->name), op);
    if (name.len <= 0)
        return true;
    return sk_authorize(r, SK_ACL_RES_TOPIC, name.p, (size_t)name.len, op);
}

bool sk_authz_group(const sk_req *r, kc_str group, int8_t op)
{
    return sk_authorize(r, SK_ACL_RES_GROUP, group.len > 0 ? group.p : "",
                        group.len > 0 ? (size_t)group.len : 0, op);
}

bool sk_authz_txn(const sk_req *r, kc_str id, int8_t op)
{
    return sk_authorize(r, SK_ACL_RES_TXN_ID, id.len > 0 ? id.p : "",
                        id.len > 0 ? (size_t)id.len : 0, op);
}

int16_t sk_authz_config(const sk_req *r, int8_t config_type, kc_str name, int8_t op)
{
    switch (config_type) {
    case 2:
        return sk_authz_topic(r, NULL, name, op) ? 0 : SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
    case 32:
        return sk_authz_group(r, name, op) ? 0 : SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
    case 4:
    case 8:
        return sk_authorize_cluster(r, op) ? 0 : SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
    default:
        return 0;
    }
}

int32_t sk_authz_ops(const sk_req *r, int8_t rtype, const char *name, size_t nlen, int32_t ops)
{
    if (!sk_authz_on(r->node) || trusted_node(r))
        return ops;
    sk_acl_set *s = sk_acls(r->node);
    char host[sizeof r->conn->peer];
    host_of(r->conn, host, sizeof host);
    return s ? sk_acl_authorized_ops(s, r->conn->principal, host, rtype, name ? name : "", nlen,
                                     ops)
             : 0;
}
