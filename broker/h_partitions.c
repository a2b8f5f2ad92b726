/*
 * DescribeTopicPartitions, DescribeProducers and AlterReplicaLogDirs: what
 * the Java AdminClient's describeTopics, kafka-transactions.sh
 * describe-producers and kafka-reassign-partitions.sh (log dirs) ask.
 *
 * DescribeTopicPartitions answers each partition as Metadata does (leader,
 * epoch, replicas and ISR: the one node that serves it), sorted by topic
 * name and paged by a cursor and a partition limit, as Kafka's brokers do.
 * DescribeProducers lists the idempotent producers a partition's main keeps;
 * a proxy (docs/zones.md), which Metadata names as leader to the clients of
 * its zone, asks the main.
 * AlterReplicaLogDirs knows one log dir per node, the WAL's.
 *
 * Thread: the event loop; every answer is built from memory at once.
 */
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "peer.h"
#include "plog.h"
#include "proxied.h"
#include "pstate.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_map.h"

/* Kafka's max.request.partition.size.limit default: the most partitions
 * one DescribeTopicPartitions answer holds, whatever the client asks. */
#define DTP_PARTITION_LIMIT 2000

typedef kp_DescribeTopicPartitionsResponse_DescribeTopicPartitionsResponseTopic dtp_topic;
typedef kp_DescribeTopicPartitionsResponse_DescribeTopicPartitionsResponsePartition dtp_part;

static int name_cmp(const void *a, const void *b)
{
    const kc_str *x = a, *y = b;
    size_t n = (size_t)(x->len < y->len ? x->len : y->len);
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static bool name_eq(kc_str a, kc_str b)
{
    return a.len == b.len && (a.len <= 0 || memcmp(a.p, b.p, (size_t)a.len) == 0);
}

/* The names to describe, at or after the cursor's topic, sorted and without
 * duplicates; -1 when out of memory. */
static int32_t dtp_names(sk_req *r, bool all, kc_str from, kc_str **out)
{
    kp_DescribeTopicPartitionsRequest *req = r->body;
    size_t cap = all ? sk_map_count(r->node->topics_by_name) : (size_t)req->topics.n;
    kc_str *v = sk_arena_alloc(r->arena, (cap ? cap : 1) * sizeof *v);
    if (!v)
        return -1;
    size_t k = 0;
    if (all) {
        size_t it = 0;
        void *t;
        while (sk_map_next(r->node->topics_by_name, &it, NULL, NULL, &t) && k < cap)
            v[k++] = sk_req_str(r, ((sk_topic *)t)->name);
    } else {
        for (int32_t i = 0; i < req->topics.n; i++)
            if (req->topics.v[i].name.len >= 0)
                v[k++] = req->topics.v[i].name;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (v[i].p && name_cmp(&v[i], &from) >= 0)
            v[m++] = v[i];
    qsort(v, m, sizeof *v, name_cmp);
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (u == 0 || !name_eq(v[u - 1], v[i]))
            v[u++] = v[i];
    *out = v;
    return (int32_t)u;
}

/* Partitions [start, end) of t, those that exist; false when out of memory. */
static bool dtp_fill_parts(sk_req *r, const sk_topic *t, int32_t start, int32_t end, dtp_topic *o)
{
    int32_t cnt = end > start ? end - start : 0;
    dtp_part *ps = sk_req_array(
        r, &kp_DescribeTopicPartitionsResponse_DescribeTopicPartitionsResponsePartition_desc, cnt);
    int32_t *ids = sk_arena_alloc(r->arena, (size_t)(cnt ? cnt : 1) * sizeof *ids);
    if ((cnt && !ps) || !ids)
        return false;
    int32_t k = 0;
    for (int32_t i = start; i < end; i++) {
        const sk_part *p = sk_part_get(t, i);
        if (!p)
            continue;
        int32_t leader = sk_part_leader_for(r, p);
        ids[k] = leader;
        int32_t nrep = leader >= 0 ? 1 : 0; /* the shared volume is the replica */
        ps[k].partition_index = i;
        ps[k].leader_id = leader;
        ps[k].leader_epoch = p->leader_epoch;
        ps[k].replica_nodes.n = ps[k].isr_nodes.n = nrep;
        ps[k].replica_nodes.v = ps[k].isr_nodes.v = &ids[k];
        ps[k].eligible_leader_replicas.n = ps[k].last_known_elr.n = 0;
        ps[k].offline_replicas.n = 0;
        k++;
    }
    o->partitions.n = k;
    o->partitions.v = ps;
    return true;
}

/* Kafka's paging: whole topics while the limit lasts; a topic cut short, or
 * the first topic that no longer fits, becomes the next cursor. */
static bool dtp_fill(sk_req *r, kc_str *names, int32_t nn, bool all, int32_t limit)
{
    kp_DescribeTopicPartitionsRequest *req = r->body;
    kp_DescribeTopicPartitionsResponse *resp = r->resp;
    dtp_topic *ts = sk_req_array(
        r, &kp_DescribeTopicPartitionsResponse_DescribeTopicPartitionsResponseTopic_desc, nn);
    if (nn && !ts)
        return false;
    int32_t k = 0, remaining = limit;
    kp_DescribeTopicPartitionsResponse_Cursor *next = NULL;
    for (int32_t i = 0; i < nn && !next; i++) {
        if (remaining <= 0) {
            next = sk_arena_alloc(r->arena, sizeof *next);
            if (!next)
                return false;
            *next = (kp_DescribeTopicPartitionsResponse_Cursor){names[i], 0};
            break;
        }
        const sk_topic *t = sk_topic_get(r->node, names[i].p, (size_t)names[i].len);
        bool described = sk_authz_topic(r, t, names[i], sk_authz_op(r));
        if ((!t || !described) && all)
            continue;
        dtp_topic *o = &ts[k++];
        o->name = names[i];
        o->topic_authorized_operations = sk_authz_ops(r, SK_ACL_RES_TOPIC, names[i].p,
                                                      (size_t)names[i].len, SK_OPS_TOPIC);
        if (!described) {
            o->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            continue;
        }
        if (!t) {
            bool bad = sk_topic_name_invalid(names[i].p, (size_t)names[i].len) != NULL;
            o->error_code = bad ? SK_KAFKA_INVALID_TOPIC_EXCEPTION
                                : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            continue;
        }
        o->topic_id = t->id;
        o->is_internal = t->internal;
        int32_t start = req->cursor && name_eq(req->cursor->topic_name, names[i])
                            ? req->cursor->partition_index
                            : 0;
        int64_t upper = (int64_t)start + remaining;
        int32_t end = upper < t->nparts ? (int32_t)upper : t->nparts;
        if (!dtp_fill_parts(r, t, start, end, o))
            return false;
        if (end < t->nparts) {
            next = sk_arena_alloc(r->arena, sizeof *next);
            if (!next)
                return false;
            *next = (kp_DescribeTopicPartitionsResponse_Cursor){names[i], end};
        }
        remaining -= o->partitions.n;
    }
    resp->topics.n = k;
    resp->topics.v = ts;
    resp->next_cursor = next;
    return true;
}

/* A request Kafka refuses as a whole: every topic asked gets the error. */
static void dtp_refuse(sk_req *r, int16_t err)
{
    kp_DescribeTopicPartitionsRequest *req = r->body;
    kp_DescribeTopicPartitionsResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    dtp_topic *ts = sk_req_array(
        r, &kp_DescribeTopicPartitionsResponse_DescribeTopicPartitionsResponseTopic_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        ts[i].error_code = err;
        ts[i].name = req->topics.v[i].name;
        ts[i].partitions.n = 0;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    sk_req_respond(r);
}

void h_describe_topic_partitions(sk_req *r)
{
    kp_DescribeTopicPartitionsRequest *req = r->body;
    bool all = req->topics.n <= 0;
    kc_str from = req->cursor ? req->cursor->topic_name : (kc_str){"", 0};
    if (from.len < 0)
        from = (kc_str){"", 0};
    kc_str *names;
    int32_t nn = dtp_names(r, all, from, &names);
    if (nn < 0) {
        sk_req_close(r, "out of memory");
        return;
    }
    if (req->cursor) {
        bool found = false;
        for (int32_t i = 0; i < nn && !found; i++)
            found = name_eq(names[i], from);
        /* A cursor's partition must be valid, and its topic one of those
         * asked when a list is given. */
        if ((!all && !found) || req->cursor->partition_index < 0) {
            dtp_refuse(r, SK_KAFKA_INVALID_REQUEST);
            return;
        }
    }
    int32_t limit = req->response_partition_limit;
    limit = limit < 1 ? 1 : limit > DTP_PARTITION_LIMIT ? DTP_PARTITION_LIMIT : limit;
    if (!dtp_fill(r, names, nn, all, limit)) {
        sk_req_close(r, "out of memory");
        return;
    }
    sk_req_respond(r);
}

/* ---- DescribeProducers ---- */

typedef kp_DescribeProducersResponse_PartitionResponse dp_part;
typedef kp_DescribeProducersResponse_ProducerState dp_state;

static void dp_fill(sk_req *r, sk_part *p, dp_part *o)
{
    size_t cnt = p->producers ? sk_map_count(p->producers) : 0;
    dp_state *v = sk_req_array(r, &kp_DescribeProducersResponse_ProducerState_desc,
                               (int32_t)cnt);
    if (cnt && !v) {
        o->error_code = sk_err_to_kafka(SK_ERR_NOMEM);
        return;
    }
    size_t it = 0, k = 0;
    void *val;
    while (cnt && sk_map_next(p->producers, &it, NULL, NULL, &val) && k < cnt) {
        const sk_pstate *ps = val;
        const sk_pbatch *b = sk_pstate_newest(ps);
        v[k].producer_id = ps->pid;
        v[k].producer_epoch = ps->epoch;
        v[k].last_sequence = b ? b->last_seq : -1;
        v[k].last_timestamp = b && b->timestamp >= 0 ? b->timestamp : ps->last_ts;
        v[k].coordinator_epoch = -1; /* a single node's coordinator has no epochs */
        v[k].current_txn_start_offset = sk_txidx_open_first(&p->txidx, ps->pid);
        k++;
    }
    o->active_producers.n = (int32_t)k;
    o->active_producers.v = v;
}

/* ---- a proxy asks the main ---- */

#define DP_FWD_TIMEOUT_MS 10000

struct dp_fwd {
    sk_req *r;
    dp_part *out;
};

static void dp_release(sk_req *r)
{
    if (--r->pending == 0)
        sk_req_respond(r);
}

static void dp_forwarded(void *arg, int err, const void *resp)
{
    struct dp_fwd *f = arg;
    sk_req *r = f->r;
    const kp_DescribeProducersResponse *a = resp;
    const dp_part *got = !err && a->topics.n == 1 && a->topics.v[0].partitions.n == 1
                             ? &a->topics.v[0].partitions.v[0]
                             : NULL;
    int32_t n = got && got->active_producers.n > 0 ? got->active_producers.n : 0;
    dp_state *v = sk_req_array(r, &kp_DescribeProducersResponse_ProducerState_desc, n);
    if (!got || (n && !v)) {
        /* Retriable: the client asks again, maybe of the main itself. */
        f->out->error_code = err == SK_ERR_TIMEOUT ? SK_KAFKA_REQUEST_TIMED_OUT
                                                   : SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    } else {
        memcpy(v, got->active_producers.v, (size_t)n * sizeof *v);
        f->out->error_code = got->error_code;
        f->out->error_message = got->error_message.len >= 0
                                    ? (kc_str){sk_arena_strndup(r->arena, got->error_message.p,
                                                                (size_t)got->error_message.len),
                                               got->error_message.len}
                                    : (kc_str){NULL, -1};
        f->out->active_producers.n = n;
        f->out->active_producers.v = v;
    }
    dp_release(r);
}

/* Asks p's main for it; false when the request cannot be sent. */
static bool dp_forward(sk_req *r, kc_str topic, sk_part *p, dp_part *out)
{
    kp_DescribeProducersRequest *fr = sk_arena_alloc(r->arena, sizeof *fr);
    kp_DescribeProducersRequest_TopicRequest *t =
        sk_req_array(r, &kp_DescribeProducersRequest_TopicRequest_desc, 1);
    int32_t *idx = sk_arena_alloc(r->arena, sizeof *idx);
    struct dp_fwd *f = sk_arena_alloc(r->arena, sizeof *f);
    if (!fr || !t || !idx || !f)
        return false;
    *idx = p->index;
    t->name = topic;
    t->partition_indexes.n = 1;
    t->partition_indexes.v = idx;
    fr->topics.n = 1;
    fr->topics.v = t;
    *f = (struct dp_fwd){r, out};
    r->pending++;
    if (rpc_call(sk_cluster_rpc(r->node->cluster), p->main_node, KP_DESCRIBE_PRODUCERS,
                 r->version, fr, DP_FWD_TIMEOUT_MS, dp_forwarded, f) != 0) {
        r->pending--;
        return false;
    }
    return true;
}

void h_describe_producers(sk_req *r)
{
    kp_DescribeProducersRequest *req = r->body;
    kp_DescribeProducersResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_DescribeProducersResponse_TopicResponse *ts =
        sk_req_array(r, &kp_DescribeProducersResponse_TopicResponse_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    r->pending = 1;
    for (int32_t i = 0; i < nt; i++) {
        const kp_DescribeProducersRequest_TopicRequest *rt = &req->topics.v[i];
        int32_t np = rt->partition_indexes.n > 0 ? rt->partition_indexes.n : 0;
        dp_part *ps = sk_req_array(r, &kp_DescribeProducersResponse_PartitionResponse_desc, np);
        if (np && !ps) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *t = rt->name.len > 0 ? sk_topic_get(r->node, rt->name.p, (size_t)rt->name.len)
                                       : NULL;
        bool denied = !sk_authz_topic(r, t, rt->name, sk_authz_op(r));
        for (int32_t k = 0; k < np; k++) {
            sk_part *p = sk_part_get(t, rt->partition_indexes.v[k]);
            ps[k].partition_index = rt->partition_indexes.v[k];
            ps[k].active_producers.n = 0;
            if (denied)
                ps[k].error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            else if (!p)
                ps[k].error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            else if (sk_part_serving(p))
                dp_fill(r, p, &ps[k]);
            else if (!sk_proxy_serves(r->node, r->conn->zone, p) ||
                     !dp_forward(r, rt->name, p, &ps[k]))
                ps[k].error_code = SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
        }
        ts[i].name = rt->name;
        ts[i].partitions.n = np;
        ts[i].partitions.v = ps;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    dp_release(r);
}

/* ---- AlterReplicaLogDirs ---- */

typedef kp_AlterReplicaLogDirsResponse_AlterReplicaLogDirPartitionResult ard_part;

/* A node has one log dir, the one DescribeLogDirs names: moving a replica
 * "there" is already done, any other dir is unknown (Kafka's checks, in
 * Kafka's order: the dir first, then the partition). */
static int16_t ard_one(bool here, const sk_topic *t, int32_t part)
{
    const sk_part *p = sk_part_get(t, part);
    if (!here)
        return SK_KAFKA_LOG_DIR_NOT_FOUND;
    if (!p)
        return SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    return sk_part_serving(p) ? SK_KAFKA_NONE : SK_KAFKA_REPLICA_NOT_AVAILABLE;
}

static int32_t ard_count(const kp_AlterReplicaLogDirsRequest *req)
{
    int32_t n = 0;
    for (int32_t i = 0; i < req->dirs.n; i++)
        n += req->dirs.v[i].topics.n > 0 ? req->dirs.v[i].topics.n : 0;
    return n;
}

void h_alter_replica_log_dirs(sk_req *r)
{
    kp_AlterReplicaLogDirsRequest *req = r->body;
    kp_AlterReplicaLogDirsResponse *resp = r->resp;
    int32_t total = ard_count(req);
    kp_AlterReplicaLogDirsResponse_AlterReplicaLogDirTopicResult *ts = sk_req_array(
        r, &kp_AlterReplicaLogDirsResponse_AlterReplicaLogDirTopicResult_desc, total);
    if (total && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    const char *dir = r->node->cfg->wal_url;
    bool allowed = sk_authorize_cluster(r, sk_authz_op(r));
    int32_t k = 0;
    for (int32_t i = 0; i < req->dirs.n; i++) {
        const kp_AlterReplicaLogDirsRequest_AlterReplicaLogDir *d = &req->dirs.v[i];
        bool here = d->path.len >= 0 && (size_t)d->path.len == strlen(dir) &&
                    memcmp(d->path.p, dir, (size_t)d->path.len) == 0;
        for (int32_t j = 0; j < d->topics.n; j++) {
            const kp_AlterReplicaLogDirsRequest_AlterReplicaLogDirTopic *rt = &d->topics.v[j];
            int32_t np = rt->partitions.n > 0 ? rt->partitions.n : 0;
            ard_part *ps = sk_req_array(
                r, &kp_AlterReplicaLogDirsResponse_AlterReplicaLogDirPartitionResult_desc, np);
            if (np && !ps) {
                sk_req_close(r, "out of memory");
                return;
            }
            const sk_topic *t =
                rt->name.len > 0 ? sk_topic_get(r->node, rt->name.p, (size_t)rt->name.len) : NULL;
            for (int32_t x = 0; x < np; x++) {
                ps[x].partition_index = rt->partitions.v[x];
                ps[x].error_code = allowed ? ard_one(here, t, rt->partitions.v[x])
                                           : SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
            }
            ts[k].topic_name = rt->name;
            ts[k].partitions.n = np;
            ts[k].partitions.v = ps;
            k++;
        }
    }
    resp->results.n = k;
    resp->results.v = ts;
    sk_req_respond(r);
}
