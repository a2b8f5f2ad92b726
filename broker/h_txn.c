/* Transactions (docs/transactions.md): InitProducerId with a transactional
 * id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit,
 * answered by the node's transaction coordinator (txns.h) once the change
 * is durable. In a cluster each node coordinates the ids that hash to the
 * partitions of __consumer_offsets it serves; others get NOT_COORDINATOR. */
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "cluster.h"
#include "cmeta.h"
#include "dispatch.h"
#include "cgroup.h"
#include "gcoord.h"
#include "groups.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "peer.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "tcoord.h"
#include "txns.h"
#include "txpeer.h"

/* The one mapping of the coordinator's errors: tcoord answers Kafka codes,
 * the WAL and memory internal ones. */
static int16_t txn_error(int err)
{
    if (err >= 0)
        return (int16_t)err;
    const char *msg;
    return sk_change_error(err, &msg);
}

/* 0 when this node coordinates `id`: every node of a single-node Skiff, the
 * main of the id's partition of __consumer_offsets in a cluster. */
static int16_t not_here(sk_req *r, kc_str id)
{
    if (!r->node->txns)
        return SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    return sk_groups_coordinates(r, id) ? 0 : SK_KAFKA_NOT_COORDINATOR;
}

static const char *cstr(sk_req *r, kc_str s)
{
    return sk_arena_strndup(r->arena, s.p ? s.p : "", s.len > 0 ? (size_t)s.len : 0);
}

/* ---- InitProducerId ---- */

static void init_durable(void *arg, int err)
{
    sk_req *r = arg;
    kp_InitProducerIdResponse *resp = r->resp;
    if (err) {
        resp->error_code = txn_error(err);
        resp->producer_id = -1;
        resp->producer_epoch = -1;
    }
    sk_req_respond(r);
}

/* An open transaction being aborted for a new producer instance. */
struct init_abort {
    sk_txns *tx;
    char *id;
};

static void aborted_for_init(void *arg, int err)
{
    struct init_abort *a = arg;
    if (err == 0 && sk_txns_finish(a->tx, a->id, NULL, NULL) != 0)
        SK_WARN("txn", "could not abort the open transaction of %s", a->id);
    free(a->id);
    free(a);
}

/* An init while a transaction is open: that transaction is aborted (with a
 * fenced epoch) in the background, and the client retries. */
static void abort_for_init(sk_node *n, const char *id)
{
    struct init_abort *a = calloc(1, sizeof *a);
    if (a && (a->id = strdup(id))) {
        a->tx = n->txns;
        if (sk_txns_persist(n->txns, id, aborted_for_init, a) == 0)
            return; /* persist reverts the change itself when it fails */
    } else {
        sk_tc_revert(sk_txns_tc(n->txns), id);
    }
    if (a)
        free(a->id);
    free(a);
}

static void txn_pid_taken(void *arg, int err, int64_t pid)
{
    sk_req *r = arg;
    kp_InitProducerIdRequest *req = r->body;
    kp_InitProducerIdResponse *resp = r->resp;
    if (err) {
        resp->error_code = txn_error(err);
        sk_req_respond(r);
        return;
    }
    const char *id = cstr(r, req->transactional_id);
    sk_tc_init_args a = {id, req->transaction_timeout_ms,
                         r->version >= 3 ? req->producer_id : -1,
                         r->version >= 3 ? req->producer_epoch : -1, pid};
    sk_tc_init_result res;
    sk_tc_init_pid(sk_txns_tc(r->node->txns), &a, sk_now_ms(), &res);
    if (res.aborting)
        abort_for_init(r->node, id);
    if (res.error) {
        resp->error_code = res.error;
        sk_req_respond(r);
        return;
    }
    resp->producer_id = res.producer_id;
    resp->producer_epoch = res.producer_epoch;
    int rc = sk_txns_persist(r->node->txns, id, init_durable, r);
    if (rc)
        init_durable(r, rc);
}

void sk_init_txn_producer(sk_req *r)
{
    kp_InitProducerIdRequest *req = r->body;
    kp_InitProducerIdResponse *resp = r->resp;
    int16_t err = not_here(r, req->transactional_id);
    if (err) {
        resp->error_code = err;
        resp->producer_id = -1;
        resp->producer_epoch = -1;
        sk_req_respond(r);
        return;
    }
    int rc = sk_cmeta_alloc_pid(r->node, txn_pid_taken, r);
    if (rc)
        txn_pid_taken(r, rc, -1);
}

/* ---- AddPartitionsToTxn (v0-3) ---- */

typedef kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult add_topic_res;
typedef kp_AddPartitionsToTxnResponse_AddPartitionsToTxnPartitionResult add_part_res;

/* Every partition's code: `err`, or for unknown ones UNKNOWN_TOPIC_OR_PARTITION
 * (the others then OPERATION_NOT_ATTEMPTED, as Kafka). */
static void add_results(sk_req *r, int16_t err)
{
    kp_AddPartitionsToTxnRequest *req = r->body;
    kp_AddPartitionsToTxnResponse *resp = r->resp;
    int32_t nt = req->v3_and_below_topics.n > 0 ? req->v3_and_below_topics.n : 0;
    add_topic_res *ts = sk_req_array(r, &kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        const kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic *t = &req->v3_and_below_topics.v[i];
        int32_t np = t->partitions.n > 0 ? t->partitions.n : 0;
        add_part_res *ps =
            sk_req_array(r, &kp_AddPartitionsToTxnResponse_AddPartitionsToTxnPartitionResult_desc, np);
        if (np && !ps) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *tp = t->name.len > 0 ? sk_topic_get(r->node, t->name.p, (size_t)t->name.len) : NULL;
        for (int32_t k = 0; k < np; k++) {
            int32_t idx = t->partitions.v[k];
            bool known = tp && idx >= 0 && idx < tp->nparts;
            ps[k].partition_index = idx;
            ps[k].partition_error_code =
                err == SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION && known ? SK_KAFKA_OPERATION_NOT_ATTEMPTED
                                                                   : err;
        }
        ts[i].name = t->name;
        ts[i].results_by_partition.n = np;
        ts[i].results_by_partition.v = ps;
    }
    resp->results_by_topic_v3_and_below.n = nt;
    resp->results_by_topic_v3_and_below.v = ts;
    sk_req_respond(r);
}

static void add_durable(void *arg, int err)
{
    add_results(arg, txn_error(err));
}

/* The partitions asked for, or -1 when one is unknown. */
static int add_parts(sk_req *r, sk_tc_part **out)
{
    kp_AddPartitionsToTxnRequest *req = r->body;
    int n = 0;
    for (int32_t i = 0; i < req->v3_and_below_topics.n; i++)
        n += req->v3_and_below_topics.v[i].partitions.n > 0 ? req->v3_and_below_topics.v[i].partitions.n : 0;
    sk_tc_part *v = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *v);
    if (!v)
        return -1;
    int k = 0;
    for (int32_t i = 0; i < req->v3_and_below_topics.n; i++) {
        const kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic *t = &req->v3_and_below_topics.v[i];
        sk_topic *tp = t->name.len > 0 ? sk_topic_get(r->node, t->name.p, (size_t)t->name.len) : NULL;
        for (int32_t j = 0; j < t->partitions.n; j++) {
            if (!tp || t->partitions.v[j] < 0 || t->partitions.v[j] >= tp->nparts)
                return -1;
            v[k].topic = tp->name;
            v[k++].partition = t->partitions.v[j];
        }
    }
    *out = v;
    return k;
}

/* ---- AddPartitionsToTxn v4+: the batched form, from other brokers ---- */

typedef kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction add_txn;
typedef kp_AddPartitionsToTxnResponse_AddPartitionsToTxnResult add_txn_res;

/* One transaction's result: every partition gets `err`, or with `verify`
 * its own check against the open transaction. */
static int txn_result(sk_req *r, const add_txn *t, add_txn_res *out, int16_t err, bool verify)
{
    int32_t nt = t->topics.n > 0 ? t->topics.n : 0;
    add_topic_res *ts = sk_req_array(r, &kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult_desc, nt);
    if (nt && !ts)
        return SK_ERR_NOMEM;
    const char *id = cstr(r, t->transactional_id);
    for (int32_t i = 0; i < nt; i++) {
        const kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic *tp = &t->topics.v[i];
        int32_t np = tp->partitions.n > 0 ? tp->partitions.n : 0;
        add_part_res *ps = sk_req_array(r, &kp_AddPartitionsToTxnResponse_AddPartitionsToTxnPartitionResult_desc, np);
        if (np && !ps)
            return SK_ERR_NOMEM;
        const char *topic = cstr(r, tp->name);
        for (int32_t k = 0; k < np; k++) {
            ps[k].partition_index = tp->partitions.v[k];
            ps[k].partition_error_code =
                err || !verify ? err
                               : (int16_t)sk_tc_check_part(sk_txns_tc(r->node->txns), id,
                                                           t->producer_id, t->producer_epoch,
                                                           topic, tp->partitions.v[k]);
        }
        ts[i].name = tp->name;
        ts[i].results_by_partition.n = np;
        ts[i].results_by_partition.v = ps;
    }
    out->transactional_id = t->transactional_id;
    out->topic_results.n = nt;
    out->topic_results.v = ts;
    return 0;
}

typedef struct add_one {
    sk_req *r;
    const add_txn *t;
    add_txn_res *out;
} add_one;

/* One transaction is answered; the request once all are. (Out of memory
 * leaves its result empty, which the sender takes as a failure.) */
static void add_one_end(add_one *a, int16_t err, bool verify)
{
    (void)txn_result(a->r, a->t, a->out, err, verify);
    if (--a->r->pending == 0)
        sk_req_respond(a->r);
}

static void add_one_done(void *arg, int err)
{
    add_one_end(arg, txn_error(err), false);
}

/* Adds one transaction's partitions (the v3 path for each). */
static void add_v4_one(sk_req *r, const add_txn *t, add_txn_res *out)
{
    add_one *a = sk_arena_calloc(r->arena, 1, sizeof *a);
    if (!a)
        return; /* its result stays empty */
    r->pending++;
    *a = (add_one){r, t, out};
    int16_t err = not_here(r, t->transactional_id);
    if (!err && !sk_authz_txn(r, t->transactional_id, SK_ACL_OP_WRITE))
        err = SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    if (err || t->verify_only) {
        add_one_end(a, err, true);
        return;
    }
    int n = 0;
    for (int32_t i = 0; i < t->topics.n; i++)
        n += t->topics.v[i].partitions.n > 0 ? t->topics.v[i].partitions.n : 0;
    sk_tc_part *parts = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *parts);
    int k = 0, rc = parts ? 0 : SK_ERR_NOMEM;
    for (int32_t i = 0; rc == 0 && i < t->topics.n; i++) {
        const kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic *tp = &t->topics.v[i];
        sk_topic *top = tp->name.len > 0 ? sk_topic_get(r->node, tp->name.p, (size_t)tp->name.len) : NULL;
        for (int32_t j = 0; rc == 0 && j < tp->partitions.n; j++) {
            if (!top || tp->partitions.v[j] < 0 || tp->partitions.v[j] >= top->nparts)
                rc = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            else
                parts[k++] = (sk_tc_part){top->name, tp->partitions.v[j]};
        }
    }
    const char *id = cstr(r, t->transactional_id);
    sk_tc *tc = sk_txns_tc(r->node->txns);
    if (rc == 0 && k > 0)
        rc = sk_tc_add_partitions(tc, id, t->producer_id, t->producer_epoch, k, parts, sk_now_ms());
    if (rc == 0 && k > 0 && sk_tc_is_pending(tc, id))
        rc = sk_txns_persist(r->node->txns, id, add_one_done, a);
    else if (rc == 0)
        add_one_done(a, 0);
    if (rc)
        add_one_done(a, rc);
}

/* v4+ is Kafka's broker-to-broker form: only for principals with
 * CLUSTER_ACTION, as Kafka; VerifyOnly is how a partition's main asks
 * whether the partition is in the producer's open transaction (txpeer.h). */
static void add_v4(sk_req *r)
{
    kp_AddPartitionsToTxnRequest *req = r->body;
    kp_AddPartitionsToTxnResponse *resp = r->resp;
    if (!sk_authorize_cluster(r, SK_ACL_OP_CLUSTER_ACTION)) {
        resp->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    int32_t n = req->transactions.n > 0 ? req->transactions.n : 0;
    add_txn_res *v = sk_req_array(r, &kp_AddPartitionsToTxnResponse_AddPartitionsToTxnResult_desc, n);
    if (n && !v) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results_by_transaction.n = n;
    resp->results_by_transaction.v = v;
    r->pending = 1; /* until every transaction is started */
    for (int32_t i = 0; i < n; i++)
        add_v4_one(r, &req->transactions.v[i], &v[i]);
    if (--r->pending == 0)
        sk_req_respond(r);
}

void h_add_partitions_to_txn(sk_req *r)
{
    kp_AddPartitionsToTxnRequest *req = r->body;
    if (r->version >= 4) {
        add_v4(r);
        return;
    }
    int16_t here = not_here(r, req->v3_and_below_transactional_id);
    if (here) {
        add_results(r, here);
        return;
    }
    if (!sk_authz_txn(r, req->v3_and_below_transactional_id, SK_ACL_OP_WRITE)) {
        add_results(r, SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        return;
    }
    sk_tc_part *parts = NULL;
    int n = add_parts(r, &parts);
    if (n <= 0) {
        /* Nothing to add (an empty request) changes nothing. */
        add_results(r, n < 0 ? SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION : 0);
        return;
    }
    const char *id = cstr(r, req->v3_and_below_transactional_id);
    sk_tc *tc = sk_txns_tc(r->node->txns);
    int err = sk_tc_add_partitions(tc, id, req->v3_and_below_producer_id,
                                   req->v3_and_below_producer_epoch, n, parts, sk_now_ms());
    if (err || !sk_tc_is_pending(tc, id)) {
        add_results(r, txn_error(err));
        return;
    }
    err = sk_txns_persist(r->node->txns, id, add_durable, r);
    if (err)
        add_results(r, txn_error(err));
}

/* ---- AddOffsetsToTxn ---- */

static void simple_durable(void *arg, int err)
{
    sk_req *r = arg;
    /* AddOffsetsToTxn and EndTxn answers start with throttle, error. */
    if (r->entry->key == 25)
        ((kp_AddOffsetsToTxnResponse *)r->resp)->error_code = txn_error(err);
    else
        ((kp_EndTxnResponse *)r->resp)->error_code = txn_error(err);
    sk_req_respond(r);
}

void h_add_offsets_to_txn(sk_req *r)
{
    kp_AddOffsetsToTxnRequest *req = r->body;
    kp_AddOffsetsToTxnResponse *resp = r->resp;
    int16_t here = not_here(r, req->transactional_id);
    if (here) {
        resp->error_code = here;
        sk_req_respond(r);
        return;
    }
    int16_t denied = !sk_authz_txn(r, req->transactional_id, SK_ACL_OP_WRITE)
                         ? SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                     : !sk_authz_group(r, req->group_id, SK_ACL_OP_READ)
                         ? SK_KAFKA_GROUP_AUTHORIZATION_FAILED
                         : 0;
    if (denied) {
        resp->error_code = denied;
        sk_req_respond(r);
        return;
    }
    const char *id = cstr(r, req->transactional_id);
    sk_tc *tc = sk_txns_tc(r->node->txns);
    int err = req->group_id.len > 0 ? sk_tc_add_group(tc, id, req->producer_id, req->producer_epoch,
                                                      cstr(r, req->group_id), sk_now_ms())
                                    : SK_KAFKA_INVALID_GROUP_ID;
    if (err == 0 && sk_tc_is_pending(tc, id))
        err = sk_txns_persist(r->node->txns, id, simple_durable, r);
    else if (err == 0)
        simple_durable(r, 0);
    if (err)
        simple_durable(r, err);
}

/* ---- EndTxn ---- */

static void prepared(void *arg, int err)
{
    sk_req *r = arg;
    kp_EndTxnRequest *req = r->body;
    if (err == 0)
        err = sk_txns_finish(r->node->txns, cstr(r, req->transactional_id), simple_durable, r);
    if (err)
        simple_durable(r, err);
}

void h_end_txn(sk_req *r)
{
    kp_EndTxnRequest *req = r->body;
    kp_EndTxnResponse *resp = r->resp;
    resp->producer_id = -1;
    resp->producer_epoch = -1;
    int16_t here = not_here(r, req->transactional_id);
    if (here) {
        resp->error_code = here;
        sk_req_respond(r);
        return;
    }
    if (!sk_authz_txn(r, req->transactional_id, SK_ACL_OP_WRITE)) {
        resp->error_code = SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    const char *id = cstr(r, req->transactional_id);
    bool markers = false;
    int err = sk_tc_end(sk_txns_tc(r->node->txns), id, req->producer_id, req->producer_epoch,
                        req->committed, sk_now_ms(), &markers);
    if (err == 0 && markers)
        err = sk_txns_persist(r->node->txns, id, prepared, r);
    else if (err == 0)
        simple_durable(r, 0);
    if (err)
        simple_durable(r, err);
}

/* ---- TxnOffsetCommit ---- */

typedef kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic toc_topic;
typedef kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition toc_part;

/* Every partition's code; with `known`, unknown topics get theirs. */
static void toc_results(sk_req *r, int16_t err, bool known)
{
    kp_TxnOffsetCommitRequest *req = r->body;
    kp_TxnOffsetCommitResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    toc_topic *ts = sk_req_array(r, &kp_TxnOffsetCommitResponse_TxnOffsetCommitResponseTopic_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        const kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic *t = &req->topics.v[i];
        int32_t np = t->partitions.n > 0 ? t->partitions.n : 0;
        toc_part *ps = sk_req_array(r, &kp_TxnOffsetCommitResponse_TxnOffsetCommitResponsePartition_desc, np);
        if (np && !ps) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *tp = t->name.len > 0 ? sk_topic_get(r->node, t->name.p, (size_t)t->name.len) : NULL;
        for (int32_t k = 0; k < np; k++) {
            int32_t idx = t->partitions.v[k].partition_index;
            ps[k].partition_index = idx;
            ps[k].error_code = known && (!tp || idx < 0 || idx >= tp->nparts)
                                   ? SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION
                                   : err;
        }
        ts[i].name = t->name;
        ts[i].partitions.n = np;
        ts[i].partitions.v = ps;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    sk_req_respond(r);
}

static void toc_durable(void *arg, int err)
{
    toc_results(arg, txn_error(err), false);
}

/* The offsets of known partitions; -1 when one is unknown. */
static int toc_offsets(sk_req *r, const char *group, sk_txoff **out)
{
    kp_TxnOffsetCommitRequest *req = r->body;
    int n = 0;
    for (int32_t i = 0; i < req->topics.n; i++)
        n += req->topics.v[i].partitions.n > 0 ? req->topics.v[i].partitions.n : 0;
    sk_txoff *v = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *v);
    if (!v)
        return -1;
    int k = 0;
    for (int32_t i = 0; i < req->topics.n; i++) {
        const kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestTopic *t = &req->topics.v[i];
        sk_topic *tp = t->name.len > 0 ? sk_topic_get(r->node, t->name.p, (size_t)t->name.len) : NULL;
        for (int32_t j = 0; j < t->partitions.n; j++) {
            const kp_TxnOffsetCommitRequest_TxnOffsetCommitRequestPartition *p = &t->partitions.v[j];
            if (!tp || p->partition_index < 0 || p->partition_index >= tp->nparts)
                return -1;
            v[k].group = (char *)group;
            v[k].topic = tp->name;
            v[k].part = p->partition_index;
            v[k].offset = p->committed_offset;
            v[k].leader_epoch = r->version >= 2 ? p->committed_leader_epoch : -1;
            v[k++].meta = (char *)cstr(r, p->committed_metadata);
        }
    }
    *out = v;
    return k;
}

/* A group this node coordinates, in a transaction another node coordinates:
 * the offsets go to the transaction's coordinator, which keeps them with the
 * transaction and commits them here with its markers (txpeer.h). */
static void toc_forwarded(void *arg, int err, const void *resp)
{
    sk_req *r = arg;
    const kp_TxnOffsetCommitResponse *fr = resp;
    int16_t code = err ? SK_KAFKA_COORDINATOR_NOT_AVAILABLE : 0;
    for (int32_t i = 0; !err && !code && i < fr->topics.n; i++)
        for (int32_t j = 0; !code && j < fr->topics.v[i].partitions.n; j++)
            code = fr->topics.v[i].partitions.v[j].error_code;
    /* The coordinator's NOT_COORDINATOR is about the transactional id: the
     * client must not look for another group coordinator. */
    if (code == SK_KAFKA_NOT_COORDINATOR)
        code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    if (!err && !code)
        sk_txpeer_offsets_handed(r->node, r->body);
    toc_results(r, code, false);
}

static void toc_forward(sk_req *r)
{
    kp_TxnOffsetCommitRequest *req = r->body;
    sk_node *n = r->node;
    sk_part *cp = sk_cluster_group_part(n->cluster, req->transactional_id.p ? req->transactional_id.p : "",
                                        req->transactional_id.len > 0 ? (size_t)req->transactional_id.len : 0);
    int rc = cp && cp->main_node >= 0
                 ? rpc_call(sk_cluster_rpc(n->cluster), cp->main_node, KP_TXN_OFFSET_COMMIT,
                            r->version, req, 5000, toc_forwarded, r)
                 : SK_ERR_AGAIN;
    if (rc)
        toc_results(r, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, false);
}

static int16_t member_check(sk_req *r)
{
    kp_TxnOffsetCommitRequest *req = r->body;
    sk_groups *gs = r->node->groups;
    if (req->group_id.len > 0 &&
        sk_cg_find(sk_groups_cg(gs), req->group_id.p, (size_t)req->group_id.len))
        return 0; /* a consumer-protocol group: not checked */
    return sk_gc_check_txn_commit(sk_groups_gc(gs), req->group_id, req->member_id,
                                  req->group_instance_id, req->generation_id);
}

void h_txn_offset_commit(sk_req *r)
{
    kp_TxnOffsetCommitRequest *req = r->body;
    if (!r->node->txns) {
        toc_results(r, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, false);
        return;
    }
    if (!sk_authz_group(r, req->group_id, SK_ACL_OP_READ)) {
        toc_results(r, SK_KAFKA_GROUP_AUTHORIZATION_FAILED, false);
        return;
    }
    /* v3+: the member and generation, checked by the group's coordinator as
     * Kafka 4.3 does (classic groups). */
    bool group_here = !not_here(r, req->group_id);
    int16_t gerr = group_here && r->version >= 3 ? member_check(r) : 0;
    if (gerr) {
        toc_results(r, gerr, false);
        return;
    }
    /* The client sends it to the group's coordinator; the offsets stay with
     * the transaction's, which may be another node. */
    if (not_here(r, req->transactional_id)) {
        if (not_here(r, req->group_id))
            toc_results(r, SK_KAFKA_NOT_COORDINATOR, false);
        else
            toc_forward(r);
        return;
    }
    const char *id = cstr(r, req->transactional_id);
    const char *group = cstr(r, req->group_id);
    sk_txoff *offs = NULL;
    int n = toc_offsets(r, group, &offs);
    if (n < 0) {
        toc_results(r, 0, true);
        return;
    }
    int err = sk_tc_check_group(sk_txns_tc(r->node->txns), id, req->producer_id,
                                req->producer_epoch, group);
    if (err == 0)
        err = sk_txns_add_offsets(r->node->txns, id, n, offs, toc_durable, r);
    if (err == SK_ERR_AGAIN)
        err = SK_KAFKA_CONCURRENT_TRANSACTIONS;
    if (err)
        toc_results(r, txn_error(err), false);
}

/* ---- ListTransactions, DescribeTransactions (kafka-transactions.sh) ---- */

static bool state_wanted(const kp_ListTransactionsRequest *req, sk_tc_state st)
{
    if (req->state_filters.n <= 0)
        return true;
    const char *name = sk_tc_state_name(st);
    for (int32_t i = 0; i < req->state_filters.n; i++) {
        kc_str f = req->state_filters.v[i];
        if (f.len >= 0 && strlen(name) == (size_t)f.len && memcmp(name, f.p, (size_t)f.len) == 0)
            return true;
    }
    return false;
}

static bool pid_wanted(const kp_ListTransactionsRequest *req, int64_t pid)
{
    if (req->producer_id_filters.n <= 0)
        return true;
    for (int32_t i = 0; i < req->producer_id_filters.n; i++)
        if (req->producer_id_filters.v[i] == pid)
            return true;
    return false;
}

/* State filters naming no state Kafka knows are answered back. */
static void unknown_filters(sk_req *r, const kp_ListTransactionsRequest *req,
                            kp_ListTransactionsResponse *resp)
{
    static const char *kafka_states[] = {"Empty",          "Ongoing",       "PrepareCommit",
                                         "PrepareAbort",   "CompleteCommit", "CompleteAbort",
                                         "Dead",           "PrepareEpochFence"};
    int32_t n = req->state_filters.n > 0 ? req->state_filters.n : 0, k = 0;
    kc_str *v = sk_arena_calloc(r->arena, (size_t)n + 1, sizeof *v);
    for (int32_t i = 0; v && i < n; i++) {
        kc_str f = req->state_filters.v[i];
        bool known = false;
        for (size_t j = 0; j < sizeof kafka_states / sizeof kafka_states[0]; j++)
            known |= f.len >= 0 && strlen(kafka_states[j]) == (size_t)f.len &&
                     memcmp(kafka_states[j], f.p, (size_t)f.len) == 0;
        if (!known)
            v[k++] = f;
    }
    resp->unknown_state_filters.n = v ? k : 0;
    resp->unknown_state_filters.v = v;
}

void h_list_transactions(sk_req *r)
{
    kp_ListTransactionsRequest *req = r->body;
    kp_ListTransactionsResponse *resp = r->resp;
    unknown_filters(r, req, resp);
    sk_tc *tc = r->node->txns ? sk_txns_tc(r->node->txns) : NULL;
    int n = tc ? sk_tc_count(tc) : 0, k = 0;
    kp_ListTransactionsResponse_TransactionState *v =
        sk_req_array(r, &kp_ListTransactionsResponse_TransactionState_desc, n);
    if (n && !v) {
        sk_req_close(r, "out of memory");
        return;
    }
    int64_t now = sk_now_ms();
    for (int i = 0; i < n; i++) {
        const sk_tc_entry *e = sk_tc_at(tc, i);
        if (!e || !state_wanted(req, e->state) || !pid_wanted(req, e->producer_id) ||
            !sk_authz_txn(r, sk_req_str(r, e->txn_id), SK_ACL_OP_DESCRIBE))
            continue;
        if (r->version >= 1 && req->duration_filter >= 0 &&
            (e->start_ms < 0 || now - e->start_ms < req->duration_filter))
            continue;
        v[k].transactional_id = sk_req_str(r, e->txn_id);
        v[k].producer_id = e->producer_id;
        v[k++].transaction_state = sk_req_str(r, sk_tc_state_name(e->state));
    }
    resp->transaction_states.n = k;
    resp->transaction_states.v = v;
    sk_req_respond(r);
}

typedef kp_DescribeTransactionsResponse_TopicData dt_topic;

/* The transaction's partitions, one entry per topic. */
static int describe_topics(sk_req *r, const sk_tc_entry *e, dt_topic **out)
{
    dt_topic *ts = sk_req_array(r, &kp_DescribeTransactionsResponse_TopicData_desc, e->nparts);
    if (e->nparts && !ts)
        return -1;
    int nt = 0;
    for (int i = 0; i < e->nparts; i++) {
        int t = 0;
        while (t < nt && strcmp(ts[t].topic.p, e->parts[i].topic) != 0)
            t++;
        if (t == nt) {
            ts[nt].topic = sk_req_str(r, e->parts[i].topic);
            ts[nt].partitions.v = sk_arena_calloc(r->arena, (size_t)e->nparts, sizeof(int32_t));
            if (!ts[nt].partitions.v)
                return -1;
            nt++;
        }
        ts[t].partitions.v[ts[t].partitions.n++] = e->parts[i].partition;
    }
    *out = ts;
    return nt;
}

void h_describe_transactions(sk_req *r)
{
    kp_DescribeTransactionsRequest *req = r->body;
    kp_DescribeTransactionsResponse *resp = r->resp;
    int32_t n = req->transactional_ids.n > 0 ? req->transactional_ids.n : 0;
    kp_DescribeTransactionsResponse_TransactionState *v =
        sk_req_array(r, &kp_DescribeTransactionsResponse_TransactionState_desc, n);
    if (n && !v) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        kc_str id = req->transactional_ids.v[i];
        bool allowed = sk_authz_txn(r, id, SK_ACL_OP_DESCRIBE);
        const sk_tc_entry *e = r->node->txns && allowed
                                   ? sk_tc_get(sk_txns_tc(r->node->txns), cstr(r, id))
                                   : NULL;
        v[i].transactional_id = id;
        v[i].transaction_state = sk_req_str(r, e ? sk_tc_state_name(e->state) : "");
        v[i].producer_id = -1;
        v[i].producer_epoch = -1;
        v[i].transaction_start_time_ms = -1;
        if (!e) {
            int16_t here = allowed ? not_here(r, id) : 0;
            v[i].error_code = !allowed ? SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                              : here   ? here
                                       : SK_KAFKA_TRANSACTIONAL_ID_NOT_FOUND;
            continue;
        }
        v[i].transaction_timeout_ms = e->timeout_ms;
        v[i].transaction_start_time_ms = e->start_ms;
        v[i].producer_id = e->producer_id;
        v[i].producer_epoch = e->producer_epoch;
        dt_topic *ts = NULL;
        int nt = describe_topics(r, e, &ts);
        if (nt < 0) {
            sk_req_close(r, "out of memory");
            return;
        }
        v[i].topics.n = nt;
        v[i].topics.v = ts;
    }
    resp->transaction_states.n = n;
    resp->transaction_states.v = v;
    sk_req_respond(r);
}
