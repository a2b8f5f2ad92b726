/*
 * Topic administration: CreateTopics, DeleteTopics, CreatePartitions,
 * DescribeConfigs, and InitProducerId. Changes go through cmeta.h and are
 * answered once durable and visible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "cmeta.h"
#include "config.h"
#include "dispatch.h"
#include "dynconf.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "tconf.h"

/* Kafka's DescribeConfigs sources and types. */
enum {
    SRC_TOPIC = 1,
    SRC_DYNAMIC_BROKER = 2,
    SRC_DYNAMIC_DEFAULT_BROKER = 3,
    SRC_STATIC_BROKER = 4,
    SRC_DEFAULT = 5,
};
enum {
    TYPE_BOOLEAN = 1,
    TYPE_STRING = 2,
    TYPE_INT = 3,
    TYPE_SHORT = 4,
    TYPE_LONG = 5,
    TYPE_DOUBLE = 6,
    TYPE_LIST = 7,
    TYPE_PASSWORD = 9,
};

#define MAX_PARTITIONS 100000

static void finish(sk_req *r)
{
    if (--r->pending == 0)
        sk_req_respond(r);
}

/* Starts one change of the request; its result lands in (code, msg). */
static bool item_start(sk_req *r, int16_t *code, kc_str *msg, sk_item **out)
{
    *out = sk_item_new(r, code, msg);
    if (!*out) {
        *code = SK_KAFKA_REQUEST_TIMED_OUT;
        return false;
    }
    r->pending++;
    return true;
}

/* A change that could not start: undo item_start and say why. */
static void item_refused(sk_req *r, int rc, int16_t *code, kc_str *msg)
{
    r->pending--;
    const char *m = NULL;
    *code = sk_change_error(rc, &m);
    if (m && msg)
        *msg = sk_req_str(r, m);
}

/* ---- CreateTopics ---- */

static void fill_created_configs(sk_req *r, kp_CreateTopicsResponse_CreatableTopicResult *res,
                                 const sk_tconf *conf)
{
    int nd = sk_tconf_ndefs();
    kp_CreateTopicsResponse_CreatableTopicConfigs *cs =
        sk_req_array(r, &kp_CreateTopicsResponse_CreatableTopicConfigs_desc, nd);
    if (!cs)
        return;
    for (int i = 0; i < nd; i++) {
        char buf[SK_TCONF_VALUE_MAX + 1];
        int src;
        const char *v = sk_tconf_value(r->node->cfg, conf, i, buf, sizeof buf, &src);
        cs[i].name = sk_req_str(r, sk_tconf_def_at(i)->name);
        cs[i].value = sk_req_str(r, v);
        cs[i].read_only = false;
        cs[i].config_source = (int8_t)(src == 1 ? SRC_TOPIC : src == 2 ? SRC_STATIC_BROKER
                                                                         : SRC_DEFAULT);
        cs[i].is_sensitive = false;
    }
    res->configs.n = nd;
    res->configs.v = cs;
}

static void create_error(sk_req *r, kp_CreateTopicsResponse_CreatableTopicResult *res,
                         int16_t code, const char *msg)
{
    res->error_code = code;
    res->error_message = sk_req_str(r, msg);
    res->num_partitions = -1;
    res->replication_factor = -1;
    if (r->version >= 5)
        res->configs.n = -1;
}

void h_create_topics(sk_req *r)
{
    sk_node *n = r->node;
    kp_CreateTopicsRequest *req = r->body;
    kp_CreateTopicsResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_CreateTopicsResponse_CreatableTopicResult *rs =
        sk_req_array(r, &kp_CreateTopicsResponse_CreatableTopicResult_desc, nt);
    if (nt && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->topics.v = rs;
    r->pending = 1;
    int32_t nres = 0;
    /* CREATE on the cluster, else on each topic (Kafka's order). */
    bool may_create = sk_authorize_cluster(r, sk_authz_op(r));
    for (int32_t i = 0; i < nt; i++) {
        kp_CreateTopicsRequest_CreatableTopic *ct = &req->topics.v[i];
        /* A name given twice gets one answer, an error. */
        bool dup = false, seen = false;
        for (int32_t j = 0; j < nt; j++)
            if (j != i && req->topics.v[j].name.len == ct->name.len &&
                (ct->name.len <= 0 ||
                 memcmp(req->topics.v[j].name.p, ct->name.p, (size_t)ct->name.len) == 0)) {
                dup = true;
                seen |= j < i;
            }
        if (seen)
            continue;
        kp_CreateTopicsResponse_CreatableTopicResult *res = &rs[nres++];
        res->name = ct->name;
        char msg[512];
        if (ct->name.len < 0) {
            create_error(r, res, SK_KAFKA_INVALID_REQUEST, "Topic name must not be null");
            continue;
        }
        if (dup) {
            create_error(r, res, SK_KAFKA_INVALID_REQUEST,
                         "Create topics request from client contains a duplicate topic");
            continue;
        }
        if (!may_create && !sk_authz_topic(r, NULL, ct->name, SK_ACL_OP_CREATE)) {
            create_error(r, res, SK_KAFKA_TOPIC_AUTHORIZATION_FAILED, "Authorization failed.");
            continue;
        }
        const char *bad = sk_topic_name_invalid(ct->name.p, (size_t)ct->name.len);
        if (bad) {
            create_error(r, res, SK_KAFKA_INVALID_TOPIC_EXCEPTION, bad);
            continue;
        }
        if (sk_topic_get(n, ct->name.p, (size_t)ct->name.len)) {
            snprintf(msg, sizeof msg, "Topic '%.*s' already exists.", ct->name.len, ct->name.p);
            create_error(r, res, SK_KAFKA_TOPIC_ALREADY_EXISTS, msg);
            continue;
        }
        int32_t nparts = ct->num_partitions;
        int16_t rf = ct->replication_factor;
        if (ct->assignments.n > 0) {
            if (nparts != -1 || rf != -1) {
                create_error(r, res, SK_KAFKA_INVALID_REQUEST,
                             "Both numPartitions or replicationFactor and replicasAssignments "
                             "were set. Both cannot be used at the same time.");
                continue;
            }
            bool ok = true;
            nparts = ct->assignments.n;
            rf = -1;
            for (int32_t k = 0; k < ct->assignments.n && ok; k++) {
                kp_CreateTopicsRequest_CreatableReplicaAssignment *a = &ct->assignments.v[k];
                if (a->partition_index != k || a->broker_ids.n < 1 || a->broker_ids.n > 3)
                    ok = false;
                for (int32_t b = 0; ok && b < a->broker_ids.n; b++)
                    if (a->broker_ids.v[b] != n->cfg->node_id)
                        ok = false;
                if (ok && rf == -1)
                    rf = (int16_t)a->broker_ids.n;
            }
            if (!ok) {
                snprintf(msg, sizeof msg,
                         "Replica assignments must list partitions 0..n-1, each on node %d "
                         "only (1 to 3 times)",
                         n->cfg->node_id);
                create_error(r, res, SK_KAFKA_INVALID_REPLICA_ASSIGNMENT, msg);
                continue;
            }
        }
        if (nparts == -1)
            nparts = n->cfg->num_partitions;
        if (rf == -1)
            rf = n->cfg->default_replication_factor;
        if (nparts <= 0 || nparts > MAX_PARTITIONS) {
            snprintf(msg, sizeof msg, "Number of partitions must be between 1 and %d, got %d.",
                     MAX_PARTITIONS, nparts);
            create_error(r, res, SK_KAFKA_INVALID_PARTITIONS, msg);
            continue;
        }
        if (rf < 1 || rf > 3) {
            snprintf(msg, sizeof msg,
                     "Replication factor must be between 1 and 3 (durability comes from the "
                     "shared volume and object storage), got %d.",
                     rf);
            create_error(r, res, SK_KAFKA_INVALID_REPLICATION_FACTOR, msg);
            continue;
        }
        int32_t nc = ct->configs.n > 0 ? ct->configs.n : 0;
        const char **names = sk_arena_calloc(r->arena, (size_t)nc + 1, sizeof *names);
        const char **values = sk_arena_calloc(r->arena, (size_t)nc + 1, sizeof *values);
        size_t *nl = sk_arena_calloc(r->arena, (size_t)nc + 1, sizeof *nl);
        size_t *vl = sk_arena_calloc(r->arena, (size_t)nc + 1, sizeof *vl);
        if (!names || !values || !nl || !vl) {
            create_error(r, res, SK_KAFKA_INVALID_REQUEST, "out of memory");
            continue;
        }
        int32_t k = 0;
        bool null_value = false;
        for (int32_t c = 0; c < nc; c++) {
            kp_CreateTopicsRequest_CreatableTopicConfig *cfg = &ct->configs.v[c];
            if (cfg->value.len < 0) {
                null_value = true;
                break;
            }
            names[k] = cfg->name.p;
            nl[k] = cfg->name.len > 0 ? (size_t)cfg->name.len : 0;
            values[k] = cfg->value.p;
            vl[k] = (size_t)cfg->value.len;
            k++;
        }
        if (null_value) {
            create_error(r, res, SK_KAFKA_INVALID_CONFIG, "Null value not supported for topic "
                                                          "configs");
            continue;
        }
        sk_tconf conf;
        int rc = sk_tconf_build(n->cfg, k, names, nl, values, vl, &conf, msg, sizeof msg);
        if (rc != 0) {
            create_error(r, res, rc > 0 ? (int16_t)rc : SK_KAFKA_INVALID_CONFIG, msg);
            continue;
        }
        res->num_partitions = nparts;
        res->replication_factor = rf;
        if (r->version >= 5)
            fill_created_configs(r, res, &conf);
        if (req->validate_only) {
            sk_tconf_free(&conf);
            continue;
        }
        sk_item *it;
        if (!item_start(r, &res->error_code, &res->error_message, &it)) {
            sk_tconf_free(&conf);
            continue;
        }
        sk_topic_spec spec = {ct->name.p, (size_t)ct->name.len, nparts, rf, &conf, false};
        rc = sk_cmeta_create_topic(n, &spec, sk_item_done, it, &res->topic_id);
        if (rc != 0) {
            sk_tconf_free(&conf);
            item_refused(r, rc, &res->error_code, &res->error_message);
        }
    }
    resp->topics.n = nres;
    finish(r);
}

/* ---- DeleteTopics ---- */

void h_delete_topics(sk_req *r)
{
    sk_node *n = r->node;
    kp_DeleteTopicsRequest *req = r->body;
    kp_DeleteTopicsResponse *resp = r->resp;
    int32_t nt = r->version >= 6 ? req->topics.n : req->topic_names.n;
    if (nt < 0)
        nt = 0;
    kp_DeleteTopicsResponse_DeletableTopicResult *rs =
        sk_req_array(r, &kp_DeleteTopicsResponse_DeletableTopicResult_desc, nt);
    if (nt && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->responses.n = nt;
    resp->responses.v = rs;
    r->pending = 1;
    for (int32_t i = 0; i < nt; i++) {
        sk_topic *t;
        if (r->version >= 6) {
            kp_DeleteTopicsRequest_DeleteTopicState *ts = &req->topics.v[i];
            rs[i].name = ts->name;
            rs[i].topic_id = ts->topic_id;
            if (ts->name.len >= 0) {
                t = sk_topic_get(n, ts->name.p, (size_t)ts->name.len);
            } else {
                t = sk_topic_get_id(n, &ts->topic_id);
                if (!t) {
                    rs[i].error_code = SK_KAFKA_UNKNOWN_TOPIC_ID;
                    rs[i].error_message = sk_req_str(r, "This server does not host this topic ID.");
                    continue;
                }
                rs[i].name = sk_req_str(r, t->name);
            }
        } else {
            rs[i].name = req->topic_names.v[i];
            t = rs[i].name.len > 0 ? sk_topic_get(n, rs[i].name.p, (size_t)rs[i].name.len) : NULL;
        }
        if (!n->cfg->delete_topic_enable) {
            rs[i].error_code = SK_KAFKA_TOPIC_DELETION_DISABLED;
            rs[i].error_message = sk_req_str(r, "Topic deletion is disabled (delete.topic.enable)");
            continue;
        }
        if (!sk_authz_topic(r, t, rs[i].name, SK_ACL_OP_DESCRIBE)) {
            rs[i].error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            rs[i].error_message = sk_req_str(r, "Authorization failed.");
            continue;
        }
        if (!t) {
            rs[i].error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            rs[i].error_message = sk_req_str(r, "This server does not host this topic-partition.");
            continue;
        }
        if (!sk_authz_topic(r, t, rs[i].name, sk_authz_op(r))) {
            rs[i].error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            rs[i].error_message = sk_req_str(r, "Authorization failed.");
            continue;
        }
        rs[i].topic_id = t->id;
        sk_item *it;
        if (!item_start(r, &rs[i].error_code, &rs[i].error_message, &it))
            continue;
        int rc = sk_cmeta_delete_topic(n, t, sk_item_done, it);
        if (rc != 0)
            item_refused(r, rc, &rs[i].error_code, &rs[i].error_message);
    }
    finish(r);
}

/* ---- CreatePartitions ---- */

void h_create_partitions(sk_req *r)
{
    sk_node *n = r->node;
    kp_CreatePartitionsRequest *req = r->body;
    kp_CreatePartitionsResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_CreatePartitionsResponse_CreatePartitionsTopicResult *rs =
        sk_req_array(r, &kp_CreatePartitionsResponse_CreatePartitionsTopicResult_desc, nt);
    if (nt && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results.n = nt;
    resp->results.v = rs;
    r->pending = 1;
    for (int32_t i = 0; i < nt; i++) {
        kp_CreatePartitionsRequest_CreatePartitionsTopic *ct = &req->topics.v[i];
        rs[i].name = ct->name;
        char msg[256];
        sk_topic *t = ct->name.len > 0 ? sk_topic_get(n, ct->name.p, (size_t)ct->name.len) : NULL;
        if (!sk_authz_topic(r, t, ct->name, sk_authz_op(r))) {
            rs[i].error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            rs[i].error_message = sk_req_str(r, "Authorization failed.");
            continue;
        }
        if (!t) {
            rs[i].error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            rs[i].error_message = sk_req_str(r, "The topic does not exist.");
            continue;
        }
        if (ct->count <= t->nparts) {
            if (ct->count == t->nparts)
                snprintf(msg, sizeof msg, "Topic already has %d partitions.", t->nparts);
            else
                snprintf(msg, sizeof msg,
                         "Topic currently has %d partitions, which is higher than the requested "
                         "%d.",
                         t->nparts, ct->count);
            rs[i].error_code = SK_KAFKA_INVALID_PARTITIONS;
            rs[i].error_message = sk_req_str(r, msg);
            continue;
        }
        if (ct->count > MAX_PARTITIONS) {
            snprintf(msg, sizeof msg, "A topic may have at most %d partitions.", MAX_PARTITIONS);
            rs[i].error_code = SK_KAFKA_INVALID_PARTITIONS;
            rs[i].error_message = sk_req_str(r, msg);
            continue;
        }
        if (ct->assignments.n > 0) {
            bool ok = ct->assignments.n == ct->count - t->nparts;
            for (int32_t k = 0; ok && k < ct->assignments.n; k++)
                for (int32_t b = 0; b < ct->assignments.v[k].broker_ids.n; b++)
                    ok = ok && ct->assignments.v[k].broker_ids.v[b] == n->cfg->node_id;
            if (!ok) {
                snprintf(msg, sizeof msg, "New partitions can only be assigned to node %d.",
                         n->cfg->node_id);
                rs[i].error_code = SK_KAFKA_INVALID_REPLICA_ASSIGNMENT;
                rs[i].error_message = sk_req_str(r, msg);
                continue;
            }
        }
        if (req->validate_only)
            continue;
        sk_item *it;
        if (!item_start(r, &rs[i].error_code, &rs[i].error_message, &it))
            continue;
        int rc = sk_cmeta_add_partitions(n, t, ct->count, sk_item_done, it);
        if (rc != 0)
            item_refused(r, rc, &rs[i].error_code, &rs[i].error_message);
    }
    finish(r);
}

/* ---- DescribeConfigs ---- */

static bool key_wanted(const kp_DescribeConfigsRequest_DescribeConfigsResource *res,
                       const char *name)
{
    if (res->configuration_keys.n < 0)
        return true;
    size_t l = strlen(name);
    for (int32_t i = 0; i < res->configuration_keys.n; i++) {
        kc_str k = res->configuration_keys.v[i];
        if (k.len >= 0 && (size_t)k.len == l && memcmp(k.p, name, l) == 0)
            return true;
    }
    return false;
}

/* A topic configuration without a broker property: its type in
 * DescribeConfigs (cleanup.policy and the throttled replica lists are
 * Kafka LISTs). */
static int8_t def_type(sk_tc_type t)
{
    switch (t) {
    case SK_TC_LONG:
        return TYPE_LONG;
    case SK_TC_INT:
        return TYPE_INT;
    case SK_TC_BOOL:
        return TYPE_BOOLEAN;
    case SK_TC_DOUBLE:
        return TYPE_DOUBLE;
    case SK_TC_THROTTLED:
        return TYPE_LIST;
    case SK_TC_SPECIAL:
        break;
    }
    return TYPE_STRING;
}

static int8_t prop_type(sk_prop_type t)
{
    switch (t) {
    case SK_PROP_INT:
        return TYPE_INT;
    case SK_PROP_SHORT:
        return TYPE_SHORT;
    case SK_PROP_LONG:
        return TYPE_LONG;
    case SK_PROP_BOOL:
        return TYPE_BOOLEAN;
    case SK_PROP_STRING:
        return TYPE_STRING;
    case SK_PROP_PASSWORD:
        return TYPE_PASSWORD;
    }
    return TYPE_STRING;
}

static void describe_topic(sk_req *r, const kp_DescribeConfigsRequest *req,
                           const kp_DescribeConfigsRequest_DescribeConfigsResource *res,
                           kp_DescribeConfigsResponse_DescribeConfigsResult *out, sk_topic *t)
{
    sk_config *cfg = r->node->cfg;
    int nd = sk_tconf_ndefs();
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult *cs =
        sk_req_array(r, &kp_DescribeConfigsResponse_DescribeConfigsResourceResult_desc, nd);
    if (!cs)
        return;
    int k = 0;
    for (int i = 0; i < nd; i++) {
        const sk_tconf_def *d = sk_tconf_def_at(i);
        if (!key_wanted(res, d->name))
            continue;
        char buf[SK_TCONF_VALUE_MAX + 1];
        int src;
        const char *v = sk_tconf_value(cfg, &t->conf, i, buf, sizeof buf, &src);
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult *c = &cs[k++];
        c->name = sk_req_str(r, d->name);
        c->value = sk_req_str(r, v);
        c->read_only = false;
        c->config_source =
            (int8_t)(src == 1 ? SRC_TOPIC : src == 2 ? SRC_STATIC_BROKER : SRC_DEFAULT);
        c->is_sensitive = false;
        const sk_prop *bp = d->broker_prop ? sk_config_find(d->broker_prop) : NULL;
        /* Typed by the table when it checks the value (a ratio is a DOUBLE
         * whatever the broker property's representation). */
        c->config_type = bp && d->type == SK_TC_SPECIAL ? prop_type(bp->type) : def_type(d->type);
        if (req->include_documentation)
            c->documentation = sk_req_str(r, d->doc);
        if (req->include_synonyms) {
            kp_DescribeConfigsResponse_DescribeConfigsSynonym *syn =
                sk_req_array(r, &kp_DescribeConfigsResponse_DescribeConfigsSynonym_desc, 3);
            int ns = 0;
            if (syn) {
                if (src == 1) {
                    syn[ns].name = sk_req_str(r, d->name);
                    syn[ns].value = sk_req_str(r, v);
                    syn[ns++].source = SRC_TOPIC;
                }
                if (bp) {
                    char b2[64];
                    syn[ns].name = sk_req_str(r, bp->name);
                    syn[ns].value = sk_req_str(r, sk_config_get_text(cfg, bp, b2, sizeof b2));
                    syn[ns++].source =
                        sk_config_is_explicit(cfg, bp) ? SRC_STATIC_BROKER : SRC_DEFAULT;
                } else {
                    syn[ns].name = sk_req_str(r, d->name);
                    syn[ns].value = sk_req_str(r, d->fixed_default);
                    syn[ns++].source = SRC_DEFAULT;
                }
                c->synonyms.n = ns;
                c->synonyms.v = syn;
            }
        }
    }
    out->configs.n = k;
    out->configs.v = cs;
}

static void describe_broker(sk_req *r, const kp_DescribeConfigsRequest *req,
                            const kp_DescribeConfigsRequest_DescribeConfigsResource *res,
                            kp_DescribeConfigsResponse_DescribeConfigsResult *out)
{
    sk_config *cfg = r->node->cfg;
    kp_DescribeConfigsResponse_DescribeConfigsResourceResult *cs = sk_req_array(
        r, &kp_DescribeConfigsResponse_DescribeConfigsResourceResult_desc, (int32_t)sk_nprops);
    if (!cs)
        return;
    int k = 0;
    for (size_t i = 0; i < sk_nprops; i++) {
        const sk_prop *p = &sk_props[i];
        if (!key_wanted(res, p->name))
            continue;
        char buf[512];
        kp_DescribeConfigsResponse_DescribeConfigsResourceResult *c = &cs[k++];
        c->name = sk_req_str(r, p->name);
        c->value = sk_req_str(r, sk_config_get_text(cfg, p, buf, sizeof buf));
        c->read_only = !p->dynamic;
        /* One level of runtime changes serves both the cluster default
         * (resource name "") and this node: each is shown with the source
         * kafka-configs looks for on that resource. */
        c->config_source = sk_dynconf_find(r->node, p->name, strlen(p->name)) >= 0
                               ? (res->resource_name.len == 0 ? SRC_DYNAMIC_DEFAULT_BROKER
                                                              : SRC_DYNAMIC_BROKER)
                               : sk_config_is_explicit(cfg, p) ? SRC_STATIC_BROKER : SRC_DEFAULT;
        c->config_type = prop_type(p->type);
        if (p->type == SK_PROP_PASSWORD) {
            /* As Kafka: a secret is described as sensitive, without its value. */
            c->is_sensitive = true;
            c->value.p = NULL;
            c->value.len = -1;
        }
        if (req->include_documentation)
            c->documentation = sk_req_str(r, p->doc);
        if (req->include_synonyms) {
            kp_DescribeConfigsResponse_DescribeConfigsSynonym *syn =
                sk_req_array(r, &kp_DescribeConfigsResponse_DescribeConfigsSynonym_desc, 1);
            if (syn) {
                syn->name = c->name;
                syn->value = c->value;
                syn->source = c->config_source;
                c->synonyms.n = 1;
                c->synonyms.v = syn;
            }
        }
    }
    out->configs.n = k;
    out->configs.v = cs;
}

void h_describe_configs(sk_req *r)
{
    sk_node *n = r->node;
    kp_DescribeConfigsRequest *req = r->body;
    kp_DescribeConfigsResponse *resp = r->resp;
    int32_t nr = req->resources.n > 0 ? req->resources.n : 0;
    kp_DescribeConfigsResponse_DescribeConfigsResult *rs =
        sk_req_array(r, &kp_DescribeConfigsResponse_DescribeConfigsResult_desc, nr);
    if (nr && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results.n = nr;
    resp->results.v = rs;
    r->pending = 1; /* group configs may be read asynchronously */
    char idbuf[16];
    snprintf(idbuf, sizeof idbuf, "%d", n->cfg->node_id);
    for (int32_t i = 0; i < nr; i++) {
        kp_DescribeConfigsRequest_DescribeConfigsResource *res = &req->resources.v[i];
        kp_DescribeConfigsResponse_DescribeConfigsResult *out = &rs[i];
        out->resource_type = res->resource_type;
        out->resource_name = res->resource_name;
        kc_str nm = res->resource_name;
        int16_t denied =
            sk_authz_config(r, res->resource_type, nm, sk_authz_op(r));
        if (denied) {
            out->error_code = denied;
            continue;
        }
        if (res->resource_type == 2) { /* topic */
            sk_topic *t = nm.len > 0 ? sk_topic_get(n, nm.p, (size_t)nm.len) : NULL;
            if (!t) {
                out->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
                out->error_message = sk_req_str(r, "The topic does not exist.");
                continue;
            }
            describe_topic(r, req, res, out, t);
        } else if (res->resource_type == 4) { /* broker */
            bool mine = nm.len == 0 ||
                        ((size_t)nm.len == strlen(idbuf) && memcmp(nm.p, idbuf, (size_t)nm.len) == 0);
            if (!mine) {
                out->error_code = SK_KAFKA_INVALID_REQUEST;
                out->error_message = sk_req_str(r, "Unexpected broker id");
                continue;
            }
            describe_broker(r, req, res, out);
        } else if (res->resource_type == 32) { /* group */
            sk_describe_group_configs(r, res, out);
        } else {
            out->error_code = SK_KAFKA_INVALID_REQUEST;
            out->error_message =
                sk_req_str(r, "Only topic, broker and group configurations exist");
        }
    }
    if (--r->pending == 0)
        sk_req_respond(r);
}

/* ---- InitProducerId ---- */

static void pid_taken(void *arg, int err, int64_t pid)
{
    sk_req *r = arg;
    kp_InitProducerIdResponse *resp = r->resp;
    if (err) {
        const char *msg;
        resp->error_code = sk_change_error(err, &msg);
        resp->producer_id = -1;
        resp->producer_epoch = -1;
    } else {
        resp->producer_id = pid;
        resp->producer_epoch = 0;
    }
    sk_req_respond(r);
}

void h_init_producer_id(sk_req *r)
{
    kp_InitProducerIdRequest *req = r->body;
    kp_InitProducerIdResponse *resp = r->resp;
    resp->producer_id = -1;
    resp->producer_epoch = -1;
    if (req->transactional_id.len == 0) {
        resp->error_code = SK_KAFKA_INVALID_REQUEST;
        sk_req_respond(r);
        return;
    }
    if (req->transactional_id.len > 0) {
        if (!sk_authz_txn(r, req->transactional_id, SK_ACL_OP_WRITE)) {
            resp->error_code = SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
            sk_req_respond(r);
            return;
        }
        sk_init_txn_producer(r);
        return;
    }
    if (!sk_authorize_cluster(r, sk_authz_op(r)) &&
        !sk_authorize_any(r, SK_ACL_RES_TOPIC, SK_ACL_OP_WRITE)) {
        resp->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    /* Idempotent producers always get a fresh id (even when asking to bump
     * an epoch), so that no state of an old one can interfere. */
    int rc = sk_cmeta_alloc_pid(r->node, pid_taken, r);
    if (rc != 0) {
        const char *msg;
        resp->error_code = sk_change_error(rc, &msg);
        sk_req_respond(r);
    }
}
