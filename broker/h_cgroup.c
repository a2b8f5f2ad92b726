/* ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 consumer
 * group protocol, served from the state machine in cgroup.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "acl.h"
#include "authz.h"
#include "cgroup.h"
#include "dispatch.h"
#include "gconf.h"
#include "gcoord.h"
#include "groups.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_map.h"
#include "sk_time.h"

/* Every topic the node knows, for subscriptions (internal ones left out). */
static int node_topics(sk_req *r, sk_cg_topic **out)
{
    sk_node *n = r->node;
    size_t cap = sk_map_count(n->topics_by_name);
    sk_cg_topic *ts = sk_arena_calloc(r->arena, cap + 1, sizeof *ts);
    int k = 0;
    size_t it = 0;
    void *v;
    while (ts && sk_map_next(n->topics_by_name, &it, NULL, NULL, &v) && (size_t)k < cap) {
        const sk_topic *t = v;
        if (t->internal)
            continue;
        ts[k++] = (sk_cg_topic){t->name, t->id, t->nparts};
    }
    *out = ts;
    return ts ? k : -1;
}

/* A group config override as a number, else 0 (the node's default). */
static int32_t gconf_int(sk_req *r, kc_str group, const char *name)
{
    const sk_gconf *c = sk_gconf_get(r->node, group.p, (size_t)group.len);
    for (int i = 0; c && i < c->n; i++)
        if (strcmp(c->names[i], name) == 0)
            return (int32_t)atol(c->values[i]);
    return 0;
}

static sk_cg_tp *owned_partitions(sk_req *r, const kp_ConsumerGroupHeartbeatRequest *req,
                                  int32_t *n)
{
    *n = -1;
    if (req->topic_partitions.n < 0)
        return NULL;
    int32_t total = 0;
    for (int32_t i = 0; i < req->topic_partitions.n; i++)
        total += req->topic_partitions.v[i].partitions.n > 0 ? req->topic_partitions.v[i].partitions.n : 0;
    sk_cg_tp *tps = sk_arena_calloc(r->arena, (size_t)total + 1, sizeof *tps);
    if (!tps)
        return NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < req->topic_partitions.n; i++)
        for (int32_t j = 0; j < req->topic_partitions.v[i].partitions.n; j++)
            tps[k++] = (sk_cg_tp){req->topic_partitions.v[i].topic_id,
                                  req->topic_partitions.v[i].partitions.v[j], 0};
    *n = k;
    return tps;
}

/* The client's host as Kafka shows it: its address with a leading slash. */
static kc_str peer_host(sk_req *r)
{
    const char *peer = r->conn->peer;
    const char *colon = strrchr(peer, ':');
    char host[96];
    snprintf(host, sizeof host, "/%.*s", colon ? (int)(colon - peer) : (int)strlen(peer), peer);
    return sk_req_str(r, host);
}

/* A random id like the ones Java clients make (a UUID in URL-safe base64). */
static kc_str new_member_id(sk_req *r)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (uint8_t)rand();
    char id[23];
    uint32_t acc = 0;
    int bits = 0, k = 0;
    for (size_t i = 0; i < sizeof b; i++) {
        acc = acc << 8 | b[i];
        bits += 8;
        while (bits >= 6 && k < 22) {
            bits -= 6;
            id[k++] = b64[(acc >> bits) & 63];
        }
    }
    if (k < 22)
        id[k++] = b64[(acc << (6 - bits)) & 63];
    id[k] = 0;
    return sk_req_str(r, id);
}

/* Counts the distinct topics of a sorted partition list. */
static int32_t count_topics(const sk_cg_tp *tps, int32_t n)
{
    int32_t t = 0;
    for (int32_t i = 0; i < n; i++)
        t += i == 0 || memcmp(tps[i].id.b, tps[i - 1].id.b, 16) != 0;
    return t;
}

static kp_ConsumerGroupHeartbeatResponse_Assignment *hb_assignment(sk_req *r, const sk_cg_tp *tps,
                                                                   int32_t n)
{
    kp_ConsumerGroupHeartbeatResponse_Assignment *as = sk_req_array(
        r, &kp_ConsumerGroupHeartbeatResponse_Assignment_desc, 1);
    int32_t nt = count_topics(tps, n);
    kp_ConsumerGroupHeartbeatResponse_TopicPartitions *ts =
        sk_req_array(r, &kp_ConsumerGroupHeartbeatResponse_TopicPartitions_desc, nt);
    int32_t *parts = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *parts);
    if (!as || (nt && !ts) || !parts)
        return NULL;
    int32_t t = -1;
    for (int32_t i = 0; i < n; i++) {
        if (i == 0 || memcmp(tps[i].id.b, tps[i - 1].id.b, 16) != 0) {
            t++;
            ts[t].topic_id = tps[i].id;
            ts[t].partitions.v = &parts[i];
            ts[t].partitions.n = 0;
        }
        parts[i] = tps[i].part;
        ts[t].partitions.n++;
    }
    as->topic_partitions.n = nt;
    as->topic_partitions.v = ts;
    return as;
}

/* A classic group with members keeps its protocol: Kafka answers so when
 * it does not convert groups between protocols. */
static bool classic_in_use(sk_groups *gs, kc_str id)
{
    sk_gc_group *cl = sk_gc_find(sk_groups_gc(gs), id.p, (size_t)id.len);
    return cl && sk_gc_group_nmembers(cl) > 0;
}

static void heartbeat_durable(sk_req *r)
{
    if (r->async_err) {
        kp_ConsumerGroupHeartbeatResponse *resp = r->resp;
        resp->error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
        resp->error_message = (kc_str){NULL, -1};
        resp->assignment = NULL;
    }
    sk_req_respond(r);
}

void h_consumer_group_heartbeat(sk_req *r)
{
    kp_ConsumerGroupHeartbeatRequest *req = r->body;
    kp_ConsumerGroupHeartbeatResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r))) {
        resp->error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    if (req->group_id.len > 0 && !sk_groups_coordinates(r, req->group_id)) {
        resp->error_code = SK_KAFKA_NOT_COORDINATOR;
        sk_req_respond(r);
        return;
    }
    if (req->group_id.len > 0 && classic_in_use(gs, req->group_id)) {
        char msg[300];
        snprintf(msg, sizeof msg, "Group %.*s is not a consumer group.",
                 req->group_id.len > 255 ? 255 : req->group_id.len, req->group_id.p);
        resp->error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
        resp->error_message = sk_req_str(r, msg);
        sk_req_respond(r);
        return;
    }
    sk_cg_topic *topics;
    int nt = node_topics(r, &topics);
    sk_cg_hb_args a = {0};
    a.owned = owned_partitions(r, req, &a.nowned);
    if (nt < 0 || (req->topic_partitions.n >= 0 && !a.owned)) {
        sk_req_close(r, "out of memory");
        return;
    }
    a.group_id = req->group_id;
    a.member_id = req->member_id;
    if (r->version == 0 && req->member_epoch == 0 && req->member_id.len == 0)
        a.member_id = new_member_id(r); /* v0: the coordinator names new members */
    a.instance_id = req->instance_id;
    a.rack_id = req->rack_id;
    a.client_id = r->hdr.client_id.len >= 0 ? r->hdr.client_id : (kc_str){"", 0};
    a.client_host = peer_host(r);
    a.member_epoch = req->member_epoch;
    a.rebalance_timeout_ms = req->rebalance_timeout_ms;
    a.nsubs = req->subscribed_topic_names.n;
    a.subs = req->subscribed_topic_names.v;
    a.regex = r->version >= 1 ? req->subscribed_topic_regex : (kc_str){NULL, -1};
    a.assignor = req->server_assignor;
    a.session_ms = gconf_int(r, req->group_id, "consumer.session.timeout.ms");
    a.heartbeat_ms = gconf_int(r, req->group_id, "consumer.heartbeat.interval.ms");
    a.version = r->version;
    sk_cg_hb_result res;
    sk_cg_heartbeat(sk_groups_cg(gs), &a, topics, nt, sk_mono_ms(), &res);
    resp->error_code = res.error;
    if (res.message) {
        resp->error_message = sk_req_str(r, res.message);
    } else if (res.error == SK_KAFKA_GROUP_ID_NOT_FOUND) {
        char msg[300];
        snprintf(msg, sizeof msg, "Consumer group %.*s not found.",
                 req->group_id.len > 255 ? 255 : req->group_id.len, req->group_id.p);
        resp->error_message = sk_req_str(r, msg);
    }
    if (res.member_id)
        resp->member_id = sk_req_str(r, res.member_id);
    else if (res.error == 0)
        resp->member_id = a.member_id;
    resp->member_epoch = res.member_epoch;
    resp->heartbeat_interval_ms = res.heartbeat_ms;
    if (res.has_assignment && !(resp->assignment = hb_assignment(r, res.assigned, res.nassigned))) {
        sk_req_close(r, "out of memory");
        return;
    }
    if (res.error == 0)
        sk_groups_classic_gone(gs, req->group_id);
    /* A change of the group's state is answered once it is in the log. */
    sk_cg_group *g = req->group_id.len > 0 ? sk_cg_find(sk_groups_cg(gs), req->group_id.p,
                                                        (size_t)req->group_id.len)
                                            : NULL;
    r->pending = 1;
    r->on_done = heartbeat_durable;
    if (g && sk_cg_take_dirty(g) && sk_groups_write_cgroup(gs, sk_cg_group_id(g), g, r) != 0)
        r->async_err = SK_ERR_IO;
    if (--r->pending == 0)
        heartbeat_durable(r);
}

/* ---- ConsumerGroupDescribe ---- */

static int describe_assignment(sk_req *r, const sk_cg_tp *tps, int32_t n,
                               kp_ConsumerGroupDescribeResponse_Assignment *out)
{
    int32_t nt = count_topics(tps, n);
    kp_ConsumerGroupDescribeResponse_TopicPartitions *ts =
        sk_req_array(r, &kp_ConsumerGroupDescribeResponse_TopicPartitions_desc, nt);
    int32_t *parts = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *parts);
    if ((nt && !ts) || !parts)
        return -1;
    int32_t t = -1;
    for (int32_t i = 0; i < n; i++) {
        if (i == 0 || memcmp(tps[i].id.b, tps[i - 1].id.b, 16) != 0) {
            t++;
            const sk_topic *topic = sk_topic_get_id(r->node, &tps[i].id);
            ts[t].topic_id = tps[i].id;
            ts[t].topic_name = sk_req_str(r, topic ? topic->name : "");
            ts[t].partitions.v = &parts[i];
            ts[t].partitions.n = 0;
        }
        parts[i] = tps[i].part;
        ts[t].partitions.n++;
    }
    out->topic_partitions.n = nt;
    out->topic_partitions.v = ts;
    return 0;
}

static int describe_member(sk_req *r, const sk_cg_group *g, int i,
                           kp_ConsumerGroupDescribeResponse_Member *out)
{
    sk_cg_member_view v;
    sk_cg_group_member(g, i, &v);
    out->member_id = sk_req_str(r, v.member_id);
    out->instance_id = v.instance_id ? sk_req_str(r, v.instance_id) : (kc_str){NULL, -1};
    out->rack_id = v.rack_id ? sk_req_str(r, v.rack_id) : (kc_str){NULL, -1};
    out->member_epoch = v.member_epoch;
    out->client_id = sk_req_str(r, v.client_id ? v.client_id : "");
    out->client_host = sk_req_str(r, v.client_host ? v.client_host : "");
    out->subscribed_topic_names.v = sk_arena_calloc(r->arena, (size_t)v.nsubs + 1, sizeof(kc_str));
    if (!out->subscribed_topic_names.v)
        return -1;
    out->subscribed_topic_names.n = v.nsubs;
    for (int k = 0; k < v.nsubs; k++)
        out->subscribed_topic_names.v[k] = sk_req_str(r, v.subs[k]);
    out->subscribed_topic_regex = v.regex ? sk_req_str(r, v.regex) : (kc_str){NULL, -1};
    out->member_type = 1; /* a consumer-protocol member */
    if (describe_assignment(r, v.assigned, v.nassigned, &out->assignment) != 0)
        return -1;
    return describe_assignment(r, v.target, v.ntarget, &out->target_assignment);
}

static void describe_one(sk_req *r, kc_str id, kp_ConsumerGroupDescribeResponse_DescribedGroup *d)
{
    sk_groups *gs = r->node->groups;
    d->group_id = id;
    d->group_state = sk_req_str(r, "");
    d->assignor_name = sk_req_str(r, "");
    char msg[300];
    int il = id.len > 255 ? 255 : id.len > 0 ? id.len : 0;
    if (id.len <= 0) {
        d->error_code = SK_KAFKA_INVALID_GROUP_ID;
        return;
    }
    if (!sk_authz_group(r, id, sk_authz_op(r))) {
        d->error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
        return;
    }
    if (!sk_groups_coordinates(r, id)) {
        d->error_code = SK_KAFKA_NOT_COORDINATOR;
        return;
    }
    sk_cg_group *g = sk_cg_find(sk_groups_cg(gs), id.p, (size_t)id.len);
    if (!g) {
        bool other = sk_gc_find(sk_groups_gc(gs), id.p, (size_t)id.len) ||
                     sk_groups_has_offsets(gs, id);
        snprintf(msg, sizeof msg, other ? "Group %.*s is not a consumer group." : "Group %.*s not found.",
                 il, id.p);
        d->error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
        d->error_message = sk_req_str(r, msg);
        return;
    }
    d->group_state = sk_req_str(r, sk_cg_state_name(sk_cg_group_state(g)));
    d->group_epoch = sk_cg_group_epoch(g);
    d->assignment_epoch = sk_cg_assignment_epoch(g);
    d->assignor_name = sk_req_str(r, sk_cg_group_assignor(g));
    int nm = sk_cg_group_nmembers(g);
    kp_ConsumerGroupDescribeResponse_Member *ms =
        sk_req_array(r, &kp_ConsumerGroupDescribeResponse_Member_desc, nm);
    if (nm && !ms)
        return;
    for (int k = 0; k < nm; k++)
        if (describe_member(r, g, k, &ms[k]) != 0)
            return;
    d->members.n = nm;
    d->members.v = ms;
}

void h_consumer_group_describe(sk_req *r)
{
    kp_ConsumerGroupDescribeRequest *req = r->body;
    kp_ConsumerGroupDescribeResponse *resp = r->resp;
    int32_t ng = req->group_ids.n > 0 ? req->group_ids.n : 0;
    kp_ConsumerGroupDescribeResponse_DescribedGroup *ds =
        sk_req_array(r, &kp_ConsumerGroupDescribeResponse_DescribedGroup_desc, ng);
    if (ng && !ds) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < ng; i++) {
        describe_one(r, req->group_ids.v[i], &ds[i]);
        if (req->include_authorized_operations)
            ds[i].authorized_operations = sk_authz_ops(
                r, SK_ACL_RES_GROUP, req->group_ids.v[i].p ? req->group_ids.v[i].p : "",
                req->group_ids.v[i].len > 0 ? (size_t)req->group_ids.v[i].len : 0,
                SK_OPS_GROUP);
    }
    resp->groups.n = ng;
    resp->groups.v = ds;
    sk_req_respond(r);
}
