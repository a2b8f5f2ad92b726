/* ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 consumer
 * group protocol, served from the state machine in cgroup.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "acl.h"
#include "authz.h"
#include "cgroup.h"
#include "config.h"
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
#include "sk_log.h"
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

static bool upgrade(sk_req *r, sk_gc_group *cl);

/* A classic group with members keeps its protocol, unless a member joining
 * (epoch 0) may upgrade it to a consumer group. */
static bool classic_in_use(sk_req *r, kc_str id, int32_t epoch)
{
    sk_gc_group *cl = sk_gc_find(sk_groups_gc(r->node->groups), id.p, (size_t)id.len);
    if (!cl || sk_gc_group_nmembers(cl) == 0)
        return false;
    return epoch != 0 || !upgrade(r, cl);
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
    if (req->group_id.len > 0 && classic_in_use(r, req->group_id, req->member_epoch)) {
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
    /* A consumer-protocol member leaving may turn the group classic. */
    if (g && res.error == 0 && req->member_epoch == SK_CG_LEAVE_EPOCH &&
        sk_groups_maybe_downgrade(gs, r->node, g, r))
        g = NULL;
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
    out->member_type = v.classic ? 0 : 1; /* KIP-1099: 0 classic, 1 consumer */
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

/* ---- mixed groups: classic members in consumer groups ---- */

static bool policy_allows(const sk_node *n, const char *dir)
{
    const char *p = n->cfg->group_consumer_migration_policy;
    if (!p || strcasecmp(p, "bidirectional") == 0)
        return true;
    return strcasecmp(p, dir) == 0;
}

/* The version a consumer-protocol blob starts with (clamped to what the
 * codec knows), or -1 when it has none. */
static int16_t blob_version(const uint8_t *p, int32_t len, int16_t max)
{
    if (!p || len < 2)
        return -1;
    int16_t v = (int16_t)(p[0] << 8 | p[1]);
    return v < 0 ? -1 : v > max ? max : v;
}

static int decode_subscription(sk_arena *a, const uint8_t *p, int32_t len,
                               kp_ConsumerProtocolSubscription *out)
{
    int16_t v = blob_version(p, len, KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MAX_VER);
    if (v < 0)
        return -1;
    kc_reader rd;
    kc_reader_init(&rd, p + 2, (size_t)len - 2);
    return kc_decode(&kp_ConsumerProtocolSubscription_desc, v, false, &rd, out, a) == 0 ? 0 : -1;
}

/* Partitions named by topic (a subscription's owned partitions or an
 * assignment) as topic ids; unknown topics are left out. */
static sk_cg_tp *named_to_ids(sk_node *n, sk_arena *a, int32_t nt, const kc_str *names,
                              const int32_t *const *parts, const int32_t *nparts, int32_t *count)
{
    int32_t total = 0;
    for (int32_t i = 0; i < nt; i++)
        total += nparts[i] > 0 ? nparts[i] : 0;
    sk_cg_tp *tps = sk_arena_calloc(a, (size_t)total + 1, sizeof *tps);
    int32_t k = 0;
    for (int32_t i = 0; tps && i < nt; i++) {
        const sk_topic *t = names[i].len > 0 ? sk_topic_get(n, names[i].p, (size_t)names[i].len)
                                             : NULL;
        for (int32_t j = 0; t && j < nparts[i]; j++)
            tps[k++] = (sk_cg_tp){t->id, parts[i][j], 0};
    }
    *count = k;
    return tps;
}

static sk_cg_tp *owned_from_subscription(sk_node *n, sk_arena *a,
                                         const kp_ConsumerProtocolSubscription *sub,
                                         int32_t *count)
{
    int32_t nt = sub->owned_partitions.n > 0 ? sub->owned_partitions.n : 0;
    kc_str *names = sk_arena_calloc(a, (size_t)nt + 1, sizeof *names);
    const int32_t **parts = sk_arena_calloc(a, (size_t)nt + 1, sizeof *parts);
    int32_t *np = sk_arena_calloc(a, (size_t)nt + 1, sizeof *np);
    if (!names || !parts || !np)
        return NULL;
    for (int32_t i = 0; i < nt; i++) {
        names[i] = sub->owned_partitions.v[i].topic;
        parts[i] = sub->owned_partitions.v[i].partitions.v;
        np[i] = sub->owned_partitions.v[i].partitions.n;
    }
    return named_to_ids(n, a, nt, names, parts, np, count);
}

static sk_cg_tp *decode_assignment(sk_node *n, sk_arena *a, const uint8_t *p, int32_t len,
                                   int32_t *count)
{
    *count = 0;
    int16_t v = blob_version(p, len, KP_CONSUMER_PROTOCOL_ASSIGNMENT_MAX_VER);
    if (v < 0) /* no assignment yet (a rebalance in progress) */
        return sk_arena_calloc(a, 1, sizeof(sk_cg_tp));
    kc_reader rd;
    kc_reader_init(&rd, p + 2, (size_t)len - 2);
    kp_ConsumerProtocolAssignment as;
    if (kc_decode(&kp_ConsumerProtocolAssignment_desc, v, false, &rd, &as, a) != 0)
        return NULL;
    int32_t nt = as.assigned_partitions.n > 0 ? as.assigned_partitions.n : 0;
    kc_str *names = sk_arena_calloc(a, (size_t)nt + 1, sizeof *names);
    const int32_t **parts = sk_arena_calloc(a, (size_t)nt + 1, sizeof *parts);
    int32_t *np = sk_arena_calloc(a, (size_t)nt + 1, sizeof *np);
    if (!names || !parts || !np)
        return NULL;
    for (int32_t i = 0; i < nt; i++) {
        names[i] = as.assigned_partitions.v[i].topic;
        parts[i] = as.assigned_partitions.v[i].partitions.v;
        np[i] = as.assigned_partitions.v[i].partitions.n;
    }
    return named_to_ids(n, a, nt, names, parts, np, count);
}

/* A sorted partition set as a ConsumerProtocolAssignment of the version the
 * member's first protocol speaks (Kafka's choice). */
static kc_bytes encode_assignment(sk_node *n, sk_arena *a, const sk_cg_tp *tps, int32_t ntp,
                                  const uint8_t *md, int32_t mdlen)
{
    int16_t v = blob_version(md, mdlen, KP_CONSUMER_PROTOCOL_ASSIGNMENT_MAX_VER);
    if (v < 0)
        v = 0;
    int32_t nt = count_topics(tps, ntp);
    kp_ConsumerProtocolAssignment as = {0};
    as.user_data = (kc_bytes){NULL, -1};
    as.assigned_partitions.v = sk_arena_calloc(a, (size_t)nt + 1, sizeof *as.assigned_partitions.v);
    int32_t *parts = sk_arena_calloc(a, (size_t)ntp + 1, sizeof *parts);
    if (!as.assigned_partitions.v || !parts)
        return (kc_bytes){NULL, -1};
    int32_t t = -1;
    for (int32_t i = 0; i < ntp; i++) {
        if (i == 0 || memcmp(tps[i].id.b, tps[i - 1].id.b, 16) != 0) {
            const sk_topic *topic = sk_topic_get_id(n, &tps[i].id);
            t++;
            const char *nm = topic ? topic->name : "";
            as.assigned_partitions.v[t].topic = (kc_str){nm, (int32_t)strlen(nm)};
            as.assigned_partitions.v[t].partitions.v = &parts[i];
        }
        parts[i] = tps[i].part;
        as.assigned_partitions.v[t].partitions.n++;
    }
    as.assigned_partitions.n = nt;
    size_t sz = kc_size(&kp_ConsumerProtocolAssignment_desc, v, false, &as);
    uint8_t *out = sk_arena_alloc(a, sz + 2);
    if (!out)
        return (kc_bytes){NULL, -1};
    out[0] = (uint8_t)(v >> 8);
    out[1] = (uint8_t)v;
    kc_encode(&kp_ConsumerProtocolAssignment_desc, v, false, &as, out + 2);
    return (kc_bytes){out, (int32_t)sz + 2};
}

/* Answers a request once the group's new state is in the log. */
static void persist_then(sk_req *r, sk_cg_group *g, void (*done)(sk_req *r))
{
    r->pending = 1;
    r->on_done = done;
    if (g && sk_cg_take_dirty(g) &&
        sk_groups_write_cgroup(r->node->groups, sk_cg_group_id(g), g, r) != 0)
        r->async_err = SK_ERR_IO;
    if (--r->pending == 0)
        done(r);
}

static void join_durable(sk_req *r)
{
    kp_JoinGroupResponse *resp = r->resp;
    if (r->async_err && resp->error_code == 0) {
        resp->error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
        resp->generation_id = -1;
    }
    sk_req_respond(r);
}

static void join_refuse(sk_req *r, int16_t err, kc_str member_id)
{
    kp_JoinGroupResponse *resp = r->resp;
    resp->error_code = err;
    resp->generation_id = -1;
    resp->member_id = member_id;
    resp->leader = sk_req_str(r, "");
    if (r->version < 7)
        resp->protocol_name = sk_req_str(r, "");
    sk_req_respond(r);
}

static int classic_join_args(sk_req *r, kc_str member_id, sk_cg_classic_args *a)
{
    kp_JoinGroupRequest *req = r->body;
    int32_t np = req->protocols.n > 0 ? req->protocols.n : 0;
    sk_cg_proto *ps = sk_arena_calloc(r->arena, (size_t)np + 1, sizeof *ps);
    if (!ps)
        return -1;
    for (int32_t i = 0; i < np; i++)
        ps[i] = (sk_cg_proto){req->protocols.v[i].name, req->protocols.v[i].metadata};
    kp_ConsumerProtocolSubscription sub;
    if (np == 0 || decode_subscription(r->arena, ps[0].metadata.p, ps[0].metadata.len, &sub) != 0)
        return 1;
    a->group_id = req->group_id;
    a->member_id = member_id;
    a->instance_id = r->version >= 5 ? req->group_instance_id : (kc_str){NULL, -1};
    a->client_id = r->hdr.client_id.len >= 0 ? r->hdr.client_id : (kc_str){"", 0};
    a->client_host = peer_host(r);
    a->rack_id = sub.rack_id.len > 0 ? sub.rack_id : (kc_str){NULL, -1};
    a->protocol_type = req->protocol_type;
    a->session_ms = req->session_timeout_ms;
    a->rebalance_ms = r->version >= 1 && req->rebalance_timeout_ms > 0 ? req->rebalance_timeout_ms
                                                                      : req->session_timeout_ms;
    a->nprotocols = np;
    a->protocols = ps;
    a->nsubs = sub.topics.n > 0 ? sub.topics.n : 0;
    a->subs = sub.topics.v;
    a->owned = owned_from_subscription(r->node, r->arena, &sub, &a->nowned);
    return a->owned ? 0 : -1;
}

void h_join_consumer_group(sk_req *r, sk_cg_group *g)
{
    kp_JoinGroupRequest *req = r->body;
    kp_JoinGroupResponse *resp = r->resp;
    kc_str mid = req->member_id;
    bool is_static = r->version >= 5 && req->group_instance_id.len >= 0;
    if (mid.len <= 0) {
        mid = new_member_id(r);
        if (r->version >= 4 && !is_static) {
            join_refuse(r, SK_KAFKA_MEMBER_ID_REQUIRED, mid);
            return;
        }
    }
    sk_cg_classic_args a = {0};
    int rc = classic_join_args(r, mid, &a);
    if (rc != 0) {
        if (rc < 0)
            sk_req_close(r, "out of memory");
        else
            join_refuse(r, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL, req->member_id);
        return;
    }
    sk_cg_topic *topics;
    int nt = node_topics(r, &topics);
    if (nt < 0) {
        sk_req_close(r, "out of memory");
        return;
    }
    sk_cg_classic_result res;
    sk_cg_classic_join(sk_groups_cg(r->node->groups), &a, topics, nt, sk_mono_ms(), &res);
    if (res.error) {
        join_refuse(r, res.error, req->member_id);
        return;
    }
    resp->member_id = sk_req_str(r, res.member_id);
    resp->generation_id = res.generation;
    resp->protocol_type = sk_req_str(r, "consumer");
    resp->protocol_name = sk_req_str(r, res.protocol_name);
    resp->leader = sk_req_str(r, "");
    persist_then(r, g, join_durable);
}

void h_sync_consumer_group(sk_req *r, sk_cg_group *g)
{
    kp_SyncGroupRequest *req = r->body;
    kp_SyncGroupResponse *resp = r->resp;
    sk_cg_classic_sync_args a = {
        req->member_id, r->version >= 3 ? req->group_instance_id : (kc_str){NULL, -1},
        req->generation_id, r->version >= 5 ? req->protocol_type : (kc_str){NULL, -1},
        r->version >= 5 ? req->protocol_name : (kc_str){NULL, -1}};
    sk_cg_classic_sync_result res;
    resp->error_code =
        sk_cg_classic_sync(sk_groups_cg(r->node->groups), g, &a, sk_mono_ms(), &res);
    resp->assignment = (kc_bytes){(const uint8_t *)"", 0};
    if (resp->error_code == 0) {
        resp->protocol_type = r->version >= 5 ? req->protocol_type : (kc_str){NULL, -1};
        resp->protocol_name = r->version >= 5 ? req->protocol_name : (kc_str){NULL, -1};
        resp->assignment = encode_assignment(r->node, r->arena, res.assigned, res.nassigned,
                                             res.metadata, res.metadata_len);
        if (resp->assignment.len < 0) {
            sk_req_close(r, "out of memory");
            return;
        }
    }
    sk_req_respond(r);
}

int16_t sk_groups_classic_heartbeat(sk_req *r, sk_cg_group *g)
{
    kp_HeartbeatRequest *req = r->body;
    return sk_cg_classic_heartbeat(g, req->member_id,
                                   r->version >= 3 ? req->group_instance_id : (kc_str){NULL, -1},
                                   req->generation_id, sk_mono_ms());
}

static void leave_durable(sk_req *r)
{
    kp_LeaveGroupResponse *resp = r->resp;
    if (r->async_err && resp->error_code == 0)
        resp->error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    sk_req_respond(r);
}

/* LeaveGroup for classic members of a consumer group (resp->members is
 * already sized and named for v3+). */
void h_leave_consumer_group(sk_req *r, sk_cg_group *g)
{
    kp_LeaveGroupRequest *req = r->body;
    kp_LeaveGroupResponse *resp = r->resp;
    if (r->version < 3) {
        resp->error_code = sk_cg_classic_leave(g, req->member_id, (kc_str){NULL, -1});
    } else {
        for (int32_t i = 0; i < resp->members.n; i++) {
            kp_LeaveGroupRequest_MemberIdentity *mi = &req->members.v[i];
            resp->members.v[i].error_code =
                sk_cg_classic_leave(g, mi->member_id, mi->group_instance_id);
        }
    }
    persist_then(r, g, leave_durable);
}

/* One classic group member as a classic member of a consumer group. */
static int adopted_from_classic(sk_req *r, const sk_gc_group *cl, int i, sk_cg_adopted *out)
{
    sk_gc_member_view v;
    sk_gc_group_member(cl, i, &v);
    sk_cg_classic_args *a = &out->member;
    sk_cg_proto *ps = sk_arena_calloc(r->arena, (size_t)v.nprotocols + 1, sizeof *ps);
    if (!ps || v.nprotocols <= 0)
        return -1;
    for (int k = 0; k < v.nprotocols; k++) {
        sk_gc_protocol p = sk_gc_group_member_protocol(cl, i, k);
        ps[k] = (sk_cg_proto){p.name, p.metadata};
    }
    const uint8_t *md = v.metadata ? v.metadata : ps[0].metadata.p;
    int32_t mdlen = v.metadata ? v.metadata_len : ps[0].metadata.len;
    kp_ConsumerProtocolSubscription sub;
    if (decode_subscription(r->arena, md, mdlen, &sub) != 0)
        return -1;
    a->group_id = sk_req_str(r, sk_gc_group_id(cl));
    a->member_id = sk_req_str(r, v.member_id);
    a->instance_id = v.instance_id ? sk_req_str(r, v.instance_id) : (kc_str){NULL, -1};
    a->client_id = sk_req_str(r, v.client_id);
    a->client_host = sk_req_str(r, v.client_host);
    a->rack_id = sub.rack_id.len > 0 ? sub.rack_id : (kc_str){NULL, -1};
    a->protocol_type = sk_req_str(r, "consumer");
    a->session_ms = v.session_ms;
    a->rebalance_ms = v.rebalance_ms;
    a->nprotocols = v.nprotocols;
    a->protocols = ps;
    a->nsubs = sub.topics.n > 0 ? sub.topics.n : 0;
    a->subs = sub.topics.v;
    a->nowned = -1;
    out->assigned = decode_assignment(r->node, r->arena, v.assignment, v.assignment_len,
                                      &out->nassigned);
    return out->assigned ? 0 : -1;
}

/* Online upgrade (Kafka's validateOnlineUpgrade and conversion): the
 * classic group's members become classic members of a consumer group;
 * joins and syncs waiting in the classic group get REBALANCE_IN_PROGRESS. */
static bool upgrade(sk_req *r, sk_gc_group *cl)
{
    sk_node *n = r->node;
    const char *pt = sk_gc_group_protocol_type(cl);
    int nm = sk_gc_group_nmembers(cl);
    if (!policy_allows(n, "upgrade") || !pt || strcmp(pt, "consumer") != 0 ||
        (n->cfg->group_consumer_max_size > 0 && nm > n->cfg->group_consumer_max_size))
        return false;
    sk_cg_adopted *ms = sk_arena_calloc(r->arena, (size_t)nm + 1, sizeof *ms);
    if (!ms)
        return false;
    for (int i = 0; i < nm; i++)
        if (adopted_from_classic(r, cl, i, &ms[i]) != 0)
            return false;
    kc_str id = sk_req_str(r, sk_gc_group_id(cl));
    if (sk_cg_adopt_classic(sk_groups_cg(n->groups), id, sk_gc_group_generation(cl), nm, ms,
                            sk_mono_ms()) != 0)
        return false;
    SK_INFO("groups", "group %.*s: upgraded from classic to consumer (%d members)", id.len, id.p,
            nm);
    sk_gc_evict(sk_groups_gc(n->groups), cl, SK_KAFKA_REBALANCE_IN_PROGRESS);
    return true;
}

/* Online downgrade: a consumer group left with classic members only
 * becomes a classic group (their assignments: the target assignment) and
 * rebalances. With r, r->pending holds until the change is durable. */
static kc_str cstr(const char *s)
{
    return s ? (kc_str){s, (int32_t)strlen(s)} : (kc_str){NULL, -1};
}

/* One classic member of a consumer group as a member of the classic group
 * a downgrade makes; its last assignment is its target. 0, or -1. */
static int adopted_from_consumer(sk_node *n, sk_arena *a, const sk_cg_member_view *v, kc_str id,
                                 sk_gc_adopted *out)
{
    sk_gc_join_args *j = &out->member;
    j->group_id = id;
    j->member_id = cstr(v->member_id);
    j->instance_id = cstr(v->instance_id);
    j->client_id = cstr(v->client_id ? v->client_id : "");
    j->client_host = cstr(v->client_host ? v->client_host : "");
    j->protocol_type = cstr("consumer");
    j->session_timeout_ms = v->session_ms;
    j->rebalance_timeout_ms = v->rebalance_ms;
    sk_gc_protocol *ps = sk_arena_calloc(a, (size_t)v->nprotocols + 1, sizeof *ps);
    if (!ps || v->nprotocols <= 0)
        return -1;
    for (int k = 0; k < v->nprotocols; k++)
        ps[k] = (sk_gc_protocol){v->protocols[k].name, v->protocols[k].metadata};
    j->nprotocols = v->nprotocols;
    j->protocols = ps;
    out->assignment = encode_assignment(n, a, v->target, v->ntarget, v->protocols[0].metadata.p,
                                        v->protocols[0].metadata.len);
    return out->assignment.len >= 0 ? 0 : -1;
}

/* Makes the classic group; false when it could not be made. */
static bool downgrade(sk_groups *gs, sk_node *n, sk_cg_group *g, kc_str id)
{
    int nm = sk_cg_group_nmembers(g);
    sk_arena *a = sk_arena_new(0);
    sk_gc_adopted *ms = a ? sk_arena_calloc(a, (size_t)nm + 1, sizeof *ms) : NULL;
    bool ok = ms != NULL;
    int32_t generation = 0;
    for (int i = 0; ok && i < nm; i++) {
        sk_cg_member_view v;
        sk_cg_group_member(g, i, &v);
        if (v.member_epoch > generation)
            generation = v.member_epoch;
        ok = adopted_from_consumer(n, a, &v, id, &ms[i]) == 0;
    }
    /* Kafka's classic group takes the epoch the members had before the
     * leaving member went: their generation, so that the commits they make
     * before rejoining are accepted. */
    ok = ok && sk_gc_adopt(sk_groups_gc(gs), id, generation, nm, ms, sk_mono_ms()) == 0;
    sk_arena_destroy(a);
    return ok;
}

bool sk_groups_maybe_downgrade(sk_groups *gs, sk_node *n, sk_cg_group *g, sk_req *r)
{
    if (!policy_allows(n, "downgrade") || !sk_cg_all_classic(g))
        return false;
    kc_str id = cstr(sk_cg_group_id(g));
    if (!downgrade(gs, n, g, id))
        return false;
    SK_INFO("groups", "group %s: downgraded from consumer to classic (%d members)", id.p,
            sk_cg_group_nmembers(g));
    if (sk_groups_write_cgroup(gs, id.p, NULL, r) != 0)
        SK_WARN("groups", "group %s: could not record its downgrade", id.p);
    sk_cg_remove(sk_groups_cg(gs), g);
    return true;
}
