/*
 * Metadata (with automatic topic creation) and FindCoordinator.
 */
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "cmeta.h"
#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "route.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "tconf.h"

/* ---- brokers ---- */

static const char *listener_name(sk_req *r)
{
    return sk_conn_advertised(r->conn)->name;
}

/* The client's zone when zone routing applies to it: a cluster with zone
 * routing on, a client of known zone, and a live node of that zone. */
static const char *routed_zone(sk_req *r)
{
    sk_node *n = r->node;
    if (!n->cluster || !n->cfg->zone_routing_enable || !r->conn->zone[0])
        return NULL;
    return zr_zone_served(sk_cluster_model(n->cluster), r->conn->zone) ? r->conn->zone : NULL;
}

int sk_brokers_for(sk_req *r, sk_broker **out)
{
    sk_node *n = r->node;
    if (!n->cluster) {
        const sk_listener *adv = sk_conn_advertised(r->conn);
        sk_broker *b = sk_arena_alloc(r->arena, sizeof *b);
        if (!b)
            return -1;
        *b = (sk_broker){n->cfg->node_id, adv->host, adv->port,
                         n->cfg->broker_rack[0] ? n->cfg->broker_rack : NULL};
        *out = b;
        return 1;
    }
    size_t nn;
    const cm_node *nodes = cm_nodes(sk_cluster_model(n->cluster), &nn);
    sk_broker *bs = sk_arena_alloc(r->arena, (nn ? nn : 1) * sizeof *bs);
    if (!bs)
        return -1;
    /* A client of a routed zone hears only of its zone's nodes: they serve
     * all it needs (coordinators aside, which FindCoordinator names). */
    const char *zone = routed_zone(r);
    int k = 0;
    for (size_t i = 0; i < nn; i++)
        if ((!zone || strncmp(nodes[i].rack, zone, sizeof nodes[i].rack) == 0) &&
            sk_broker_addr(r, nodes[i].id, &bs[k]))
            k++;
    *out = bs;
    return k;
}

bool sk_broker_addr(sk_req *r, int32_t node, sk_broker *out)
{
    sk_node *n = r->node;
    if (!n->cluster) {
        if (node != n->cfg->node_id)
            return false;
        const sk_listener *adv = sk_conn_advertised(r->conn);
        *out = (sk_broker){node, adv->host, adv->port,
                           n->cfg->broker_rack[0] ? n->cfg->broker_rack : NULL};
        return true;
    }
    const char *host, *rack;
    int32_t port;
    if (!sk_cluster_node_addr(n->cluster, node, listener_name(r), &host, &port, &rack))
        return false;
    *out = (sk_broker){node, host, port, rack && rack[0] ? rack : NULL};
    return true;
}

int32_t sk_controller_for(sk_req *r)
{
    sk_node *n = r->node;
    if (!n->cluster)
        return n->cfg->node_id;
    int32_t ctl = sk_cluster_controller(n->cluster);
    const char *zone = routed_zone(r);
    if (!zone)
        return ctl;
    /* Any node takes admin requests: name one the client knows of. */
    const cm_model *m = sk_cluster_model(n->cluster);
    const char *cz = zr_node_zone(m, ctl);
    if (cz && strncmp(cz, zone, CM_ZONE_MAX) == 0)
        return ctl;
    size_t nn;
    const cm_node *nodes = cm_nodes(m, &nn);
    for (size_t i = 0; i < nn; i++)
        if (strncmp(nodes[i].rack, zone, sizeof nodes[i].rack) == 0)
            return nodes[i].id;
    return ctl;
}

/* ---- topics ---- */

int32_t sk_part_main_live(sk_req *r, const sk_part *p)
{
    sk_node *n = r->node;
    if (!n->cluster)
        return n->cfg->node_id;
    if (p->main_node < 0 || !cm_node_get(sk_cluster_model(n->cluster), p->main_node))
        return -1;
    return p->main_node;
}

int32_t sk_part_leader_for(sk_req *r, const sk_part *p)
{
    int32_t main = sk_part_main_live(r, p);
    const char *zone = routed_zone(r);
    if (main < 0 || !zone)
        return main;
    return zr_leader(sk_cluster_model(r->node->cluster), main, zone, &p->topic->id, p->index);
}

sk_topic *sk_req_topic(sk_req *r, int16_t id_from, kc_str name, const kc_uuid *id)
{
    if (r->version >= id_from)
        return sk_topic_get_id(r->node, id); /* the zero id is no topic's */
    return name.len > 0 ? sk_topic_get(r->node, name.p, (size_t)name.len) : NULL;
}

int16_t sk_req_topic_unknown(sk_req *r, int16_t id_from)
{
    return r->version >= id_from ? SK_KAFKA_UNKNOWN_TOPIC_ID : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
}

bool sk_leader_hint(sk_req *r, const sk_part *p, int32_t *leader, int32_t *epoch)
{
    if (!r->node->cluster || !p)
        return false;
    int32_t l = sk_part_leader_for(r, p);
    if (l < 0)
        return false;
    *leader = l;
    *epoch = p->leader_epoch;
    return true;
}

static void fill_topic(sk_req *r, kp_MetadataRequest *req,
                       kp_MetadataResponse_MetadataResponseTopic *mt, const sk_topic *t)
{
    mt->error_code = 0;
    mt->name = sk_req_str(r, t->name);
    mt->topic_id = t->id;
    mt->is_internal = t->internal;
    if (req->include_topic_authorized_operations)
        mt->topic_authorized_operations =
            sk_authz_ops(r, SK_ACL_RES_TOPIC, t->name, strlen(t->name), SK_OPS_TOPIC);
    kp_MetadataResponse_MetadataResponsePartition *ps =
        sk_req_array(r, &kp_MetadataResponse_MetadataResponsePartition_desc, t->nparts);
    int32_t *ids = sk_arena_alloc(r->arena, (size_t)(t->nparts ? t->nparts : 1) * sizeof *ids);
    if (!ps || !ids) {
        mt->error_code = -1; /* UNKNOWN_SERVER_ERROR: never a silently empty topic */
        return;
    }
    for (int32_t i = 0; i < t->nparts; i++) {
        int32_t leader = sk_part_leader_for(r, t->parts[i]);
        ids[i] = leader;
        ps[i].partition_index = i;
        ps[i].leader_id = leader;
        ps[i].leader_epoch = t->parts[i]->leader_epoch;
        /* The shared volume is the replica: the leader is the one node. */
        int32_t nrep = leader >= 0 ? 1 : 0;
        ps[i].replica_nodes.n = nrep;
        ps[i].replica_nodes.v = &ids[i];
        ps[i].isr_nodes.n = nrep;
        ps[i].isr_nodes.v = &ids[i];
        ps[i].offline_replicas.n = 0;
        if (leader < 0)
            ps[i].error_code = SK_KAFKA_LEADER_NOT_AVAILABLE;
    }
    mt->partitions.n = t->nparts;
    mt->partitions.v = ps;
}

static void metadata_finish(sk_req *r)
{
    kp_MetadataRequest *req = r->body;
    kp_MetadataResponse *resp = r->resp;
    /* Topics created on the way are looked up again: they are durable now. */
    for (int32_t i = 0; i < resp->topics.n; i++) {
        kp_MetadataResponse_MetadataResponseTopic *mt = &resp->topics.v[i];
        if (mt->error_code != SK_KAFKA_LEADER_NOT_AVAILABLE)
            continue;
        sk_topic *t = mt->name.len > 0 ? sk_topic_get(r->node, mt->name.p, (size_t)mt->name.len)
                                       : NULL;
        if (t)
            fill_topic(r, req, mt, t);
        else
            mt->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    }
    sk_req_respond(r);
}

static void created(void *arg, int err)
{
    sk_req *r = arg;
    (void)err; /* a failed WAL leaves the topic LEADER_NOT_AVAILABLE */
    if (--r->pending == 0)
        metadata_finish(r);
}

void h_metadata(sk_req *r)
{
    sk_node *n = r->node;
    kp_MetadataRequest *req = r->body;
    kp_MetadataResponse *resp = r->resp;

    sk_broker *bs;
    int nb = sk_brokers_for(r, &bs);
    kp_MetadataResponse_MetadataResponseBroker *b =
        nb >= 0 ? sk_req_array(r, &kp_MetadataResponse_MetadataResponseBroker_desc, nb) : NULL;
    if (nb < 0 || (nb && !b)) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int i = 0; i < nb; i++) {
        b[i].node_id = bs[i].id;
        b[i].host = sk_req_str(r, bs[i].host);
        b[i].port = bs[i].port;
        b[i].rack = bs[i].rack ? sk_req_str(r, bs[i].rack) : (kc_str){NULL, -1};
    }
    resp->brokers.n = nb;
    resp->brokers.v = b;
    resp->cluster_id = sk_req_str(r, n->cluster_id);
    resp->controller_id = sk_controller_for(r);
    if (req->include_cluster_authorized_operations)
        resp->cluster_authorized_operations =
            sk_authz_ops(r, SK_ACL_RES_CLUSTER, SK_ACL_CLUSTER_NAME,
                         strlen(SK_ACL_CLUSTER_NAME), SK_OPS_CLUSTER);

    /* v0: an empty list means every topic; v1+: null does. */
    bool all = req->topics.n < 0 || (r->version == 0 && req->topics.n == 0);
    if (all) {
        size_t count = sk_map_count(n->topics_by_name);
        kp_MetadataResponse_MetadataResponseTopic *ts =
            sk_req_array(r, &kp_MetadataResponse_MetadataResponseTopic_desc, (int32_t)count);
        if (count && !ts) {
            sk_req_close(r, "out of memory");
            return;
        }
        size_t it = 0, k = 0;
        void *v;
        /* Topics the client may not describe are not listed. */
        while (sk_map_next(n->topics_by_name, &it, NULL, NULL, &v) && k < count)
            if (sk_authz_topic(r, v, (kc_str){NULL, -1}, sk_authz_op(r)))
                fill_topic(r, req, &ts[k++], v);
        resp->topics.n = (int32_t)k;
        resp->topics.v = ts;
        sk_req_respond(r);
        return;
    }

    int32_t nt = req->topics.n;
    kp_MetadataResponse_MetadataResponseTopic *ts =
        sk_req_array(r, &kp_MetadataResponse_MetadataResponseTopic_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    bool may_create =
        n->cfg->auto_create_topics_enable && (r->version < 4 || req->allow_auto_topic_creation);
    r->pending = 1;
    for (int32_t i = 0; i < nt; i++) {
        kp_MetadataRequest_MetadataRequestTopic *rt = &req->topics.v[i];
        kp_MetadataResponse_MetadataResponseTopic *mt = &ts[i];
        /* Kafka answers the bit field for every topic asked, known or not. */
        if (req->include_topic_authorized_operations)
            mt->topic_authorized_operations = SK_OPS_TOPIC;
        if (rt->name.len < 0) {
            /* Lookup by topic id (v10+). */
            sk_topic *t = sk_topic_get_id(n, &rt->topic_id);
            mt->topic_id = rt->topic_id;
            if (t && !sk_authz_topic(r, t, rt->name, sk_authz_op(r)))
                mt->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            else if (t)
                fill_topic(r, req, mt, t);
            else
                mt->error_code = SK_KAFKA_UNKNOWN_TOPIC_ID;
            continue;
        }
        mt->name = rt->name;
        sk_topic *t = sk_topic_get(n, rt->name.p, (size_t)rt->name.len);
        if (!sk_authz_topic(r, t, rt->name, sk_authz_op(r))) {
            mt->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            continue;
        }
        if (t) {
            fill_topic(r, req, mt, t);
            continue;
        }
        if (sk_topic_name_invalid(rt->name.p, (size_t)rt->name.len)) {
            mt->error_code = SK_KAFKA_INVALID_TOPIC_EXCEPTION;
            continue;
        }
        if (!may_create || n->stopping) {
            mt->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            continue;
        }
        /* Auto-creation needs CREATE on the cluster or on the topic. */
        if (!sk_authorize_cluster(r, SK_ACL_OP_CREATE) &&
            !sk_authz_topic(r, NULL, rt->name, SK_ACL_OP_CREATE)) {
            mt->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            continue;
        }
        sk_tconf conf;
        char why[256];
        if (sk_tconf_build(n->cfg, 0, NULL, NULL, NULL, NULL, &conf, why, sizeof why) != 0) {
            mt->error_code = -1; /* UNKNOWN_SERVER_ERROR */
            continue;
        }
        /* Answer once the topic is durable; until then it counts as
         * LEADER_NOT_AVAILABLE, which is also the answer if the WAL fails. */
        mt->error_code = SK_KAFKA_LEADER_NOT_AVAILABLE;
        r->pending++;
        sk_topic_spec spec = {rt->name.p, (size_t)rt->name.len, n->cfg->num_partitions,
                              n->cfg->default_replication_factor, &conf, false};
        kc_uuid id;
        if (sk_cmeta_create_topic(n, &spec, created, r, &id) != 0) {
            r->pending--;
            sk_tconf_free(&conf);
        }
    }
    if (--r->pending == 0)
        metadata_finish(r);
}

/* The coordinator of group `key`: this node (a single node), or the main of
 * the group's partition of __consumer_offsets. */
static int16_t coordinator_of(sk_req *r, kc_str key, sk_broker *out)
{
    sk_node *n = r->node;
    int32_t node = n->cfg->node_id;
    if (n->cluster) {
        sk_part *p = key.len >= 0
                         ? sk_cluster_group_part(n->cluster, key.p ? key.p : "", (size_t)key.len)
                         : NULL;
        node = p ? sk_part_main_live(r, p) : -1;
    }
    if (node < 0 || !sk_broker_addr(r, node, out))
        return SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    return 0;
}

/* DESCRIBE on the group, or on the transactional id, the key names. */
static int16_t key_authorized(const sk_req *r, int8_t key_type, kc_str key)
{
    if (key_type == 1)
        return sk_authz_txn(r, key, SK_ACL_OP_DESCRIBE)
                   ? 0
                   : SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    return sk_authz_group(r, key, sk_authz_op(r)) ? 0 : SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
}

void h_find_coordinator(sk_req *r)
{
    kp_FindCoordinatorRequest *req = r->body;
    kp_FindCoordinatorResponse *resp = r->resp;
    /* Key type 0 is a group, 1 a transactional id: both are coordinated by
     * the main of their partition of __consumer_offsets (a single node
     * coordinates all). */
    int16_t err = 0;
    const char *msg = NULL;
    /* Kafka without share groups enabled answers INVALID_REQUEST for key
     * type 2, as for an unknown one. */
    if (req->key_type != 0 && req->key_type != 1) {
        err = SK_KAFKA_INVALID_REQUEST;
        msg = req->key_type == 2 ? "share groups are not supported" : "unknown coordinator key type";
    }
    if (r->version < 4) {
        sk_broker c = {0};
        if (!err)
            err = key_authorized(r, req->key_type, req->key);
        if (!err)
            err = coordinator_of(r, req->key, &c);
        resp->error_code = err;
        resp->error_message = msg ? sk_req_str(r, msg) : (kc_str){NULL, -1};
        resp->node_id = err ? -1 : c.id;
        resp->host = sk_req_str(r, err ? "" : c.host);
        resp->port = err ? -1 : c.port;
        sk_req_respond(r);
        return;
    }
    int32_t nk = req->coordinator_keys.n > 0 ? req->coordinator_keys.n : 0;
    kp_FindCoordinatorResponse_Coordinator *cs =
        sk_req_array(r, &kp_FindCoordinatorResponse_Coordinator_desc, nk);
    if (nk && !cs) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nk; i++) {
        sk_broker c = {0};
        int16_t e = err ? err : key_authorized(r, req->key_type, req->coordinator_keys.v[i]);
        if (!e)
            e = coordinator_of(r, req->coordinator_keys.v[i], &c);
        cs[i].key = req->coordinator_keys.v[i];
        cs[i].error_code = e;
        cs[i].error_message = msg ? sk_req_str(r, msg) : (kc_str){NULL, -1};
        cs[i].node_id = e ? -1 : c.id;
        cs[i].host = sk_req_str(r, e ? "" : c.host);
        cs[i].port = e ? -1 : c.port;
    }
    resp->coordinators.n = nk;
    resp->coordinators.v = cs;
    sk_req_respond(r);
}
