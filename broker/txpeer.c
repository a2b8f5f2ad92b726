#include "txpeer.h"

#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "groups.h"
#include "kmsg.h"
#include "krpc.h"
#include "peer.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

#define RPC_TIMEOUT_MS 3000
#define MAX_VERIFIED 4096
#define ASK_AGAIN_MS 1000 /* an unanswered verification is asked again */

/* One partition's verification: state 0 verified, > 0 the coordinator's
 * refusal, -1 asked and not yet answered. */
typedef struct vent {
    int64_t pid;
    int16_t epoch;
    int16_t state;
    int32_t part;
    char *topic;
    int64_t asked_ms;
} vent;

/* A transaction's offset this node (a group's coordinator) handed to the
 * transaction's coordinator: OffsetFetch with RequireStable waits for it. */
typedef struct pend {
    int64_t pid;
    char *group, *topic;
    int32_t part;
    int64_t until_ms; /* forgotten then if no marker came (monotonic) */
} pend;

struct sk_txpeer {
    int n;
    vent v[MAX_VERIFIED];
    int npend, cappend;
    pend *pend;
};

sk_txpeer *sk_txpeer_new(void)
{
    return calloc(1, sizeof(sk_txpeer));
}

static void vent_drop(sk_txpeer *tp, int i)
{
    free(tp->v[i].topic);
    tp->v[i] = tp->v[--tp->n];
}

static void pend_drop(sk_txpeer *tp, int i)
{
    free(tp->pend[i].group);
    free(tp->pend[i].topic);
    tp->pend[i] = tp->pend[--tp->npend];
}

void sk_txpeer_free(sk_txpeer *tp)
{
    if (!tp)
        return;
    while (tp->n > 0)
        vent_drop(tp, 0);
    while (tp->npend > 0)
        pend_drop(tp, 0);
    free(tp->pend);
    free(tp);
}

static bool same(const char *s, const char *p, size_t n)
{
    return strlen(s) == n && memcmp(s, p, n) == 0;
}

bool sk_txpeer_offset_pending(sk_txpeer *tp, const char *group, size_t glen, const char *topic,
                              size_t tlen, int32_t part)
{
    int64_t now = sk_mono_ms();
    for (int i = 0; tp && i < tp->npend;) {
        const pend *e = &tp->pend[i];
        if (now > e->until_ms) {
            pend_drop(tp, i);
            continue;
        }
        if (e->part == part && same(e->group, group, glen) && same(e->topic, topic, tlen))
            return true;
        i++;
    }
    return false;
}

static void pend_add(sk_txpeer *tp, int64_t pid, kc_str group, kc_str topic, int32_t part,
                     int64_t until)
{
    if (tp->npend == tp->cappend) {
        int cap = tp->cappend ? tp->cappend * 2 : 16;
        pend *v = realloc(tp->pend, (size_t)cap * sizeof *v);
        if (!v)
            return;
        tp->pend = v;
        tp->cappend = cap;
    }
    pend *e = &tp->pend[tp->npend];
    e->group = strndup(group.p ? group.p : "", group.len > 0 ? (size_t)group.len : 0);
    e->topic = strndup(topic.p ? topic.p : "", topic.len > 0 ? (size_t)topic.len : 0);
    if (!e->group || !e->topic) {
        free(e->group);
        free(e->topic);
        return;
    }
    e->pid = pid;
    e->part = part;
    e->until_ms = until;
    tp->npend++;
}

void sk_txpeer_offsets_handed(sk_node *n, const kp_TxnOffsetCommitRequest *req)
{
    sk_txpeer *tp = sk_txns_peer(n->txns);
    int64_t until = sk_mono_ms() + (int64_t)n->cfg->transaction_max_timeout_ms + 60000;
    for (int32_t i = 0; i < req->topics.n; i++)
        for (int32_t j = 0; j < req->topics.v[i].partitions.n; j++)
            pend_add(tp, req->producer_id, req->group_id, req->topics.v[i].name,
                     req->topics.v[i].partitions.v[j].partition_index, until);
}

static kc_str kstr(const char *s)
{
    return (kc_str){s, (int32_t)strlen(s)};
}

/* ---- markers: the coordinator's side ---- */

typedef struct mcall {
    sk_durable_fn fn;
    void *arg;
    char *id;
} mcall;

static void markers_done(void *arg, int err, const void *resp)
{
    mcall *m = arg;
    const kr_TxnMarkersResponse *r = resp;
    int code = err ? SK_KAFKA_CONCURRENT_TRANSACTIONS : r->error_code;
    if (code) {
        SK_WARN("txns", "markers of %s not written by the partition's main (%s, code %d): "
                "sent again", m->id, err ? sk_err_name(err) : "answered", r ? r->error_code : -1);
        code = SK_KAFKA_CONCURRENT_TRANSACTIONS;
    }
    m->fn(m->arg, code);
    free(m->id);
    free(m);
}

/* The offsets of `group` among offs, as the request's entries. */
static int put_offsets(sk_arena *a, const char *group, int noffs, const sk_txoff *offs,
                       kr_TxnMarkersRequest *req)
{
    kr_TxnMarkersRequest_Offset *v = sk_arena_calloc(a, (size_t)noffs + 1, sizeof *v);
    if (!v)
        return SK_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < noffs; i++) {
        if (strcmp(offs[i].group, group) != 0)
            continue;
        kc_init(&kr_TxnMarkersRequest_Offset_desc, &v[k]);
        v[k].group = kstr(offs[i].group);
        v[k].topic = kstr(offs[i].topic);
        v[k].partition = offs[i].part;
        v[k].offset = offs[i].offset;
        v[k].leader_epoch = offs[i].leader_epoch;
        v[k++].metadata = kstr(offs[i].meta ? offs[i].meta : "");
    }
    req->offsets.n = k;
    req->offsets.v = v;
    return k ? 0 : SK_ERR_NOENT;
}

int sk_txpeer_markers(sk_node *n, const sk_tc_entry *e, bool commit, sk_part *p,
                      const char *group, int noffs, const sk_txoff *offs, sk_durable_fn fn,
                      void *arg)
{
    if (p->main_node < 0)
        return SK_ERR_AGAIN; /* between two mains: the tick tries again */
    sk_arena *a = sk_arena_new(4096);
    mcall *m = calloc(1, sizeof *m);
    if (!a || !m || !(m->id = strdup(e->txn_id))) {
        sk_arena_destroy(a);
        free(m);
        return SK_ERR_NOMEM;
    }
    kr_TxnMarkersRequest req;
    kc_init(&kr_TxnMarkersRequest_desc, &req);
    kr_TxnMarkersRequest_Partition pt;
    kc_init(&kr_TxnMarkersRequest_Partition_desc, &pt);
    req.transactional_id = kstr(e->txn_id);
    req.producer_id = e->producer_id;
    req.producer_epoch = e->producer_epoch;
    req.commit = commit;
    int rc = 0;
    if (group) {
        rc = put_offsets(a, group, noffs, offs, &req);
    } else {
        pt.topic_id = p->topic->id;
        pt.partition = p->index;
        req.partitions.n = 1;
        req.partitions.v = &pt;
    }
    m->fn = fn;
    m->arg = arg;
    if (rc == 0)
        rc = rpc_call(sk_cluster_rpc(n->cluster), p->main_node, KR_TXN_MARKERS, 0, &req,
                      RPC_TIMEOUT_MS, markers_done, m);
    sk_arena_destroy(a);
    if (rc) {
        free(m->id);
        free(m);
    }
    return rc;
}

/* ---- markers: the partition main's side ---- */

typedef struct mserve {
    sk_req *r;
    int pending;
    int16_t err;
} mserve;

static void serve_step(void *arg, int err)
{
    mserve *s = arg;
    if (err && !s->err)
        s->err = err > 0 ? (int16_t)err : SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    if (--s->pending > 0)
        return;
    ((kr_TxnMarkersResponse *)s->r->resp)->error_code = s->err;
    sk_req_respond(s->r);
}

/* A marker reached this producer's partitions: what was verified for its
 * transaction is no longer (the next transaction is verified anew). */
static void forget_pid(sk_node *n, int64_t pid)
{
    sk_txpeer *tp = n->txns ? sk_txns_peer(n->txns) : NULL;
    for (int i = 0; tp && i < tp->n;) {
        if (tp->v[i].pid == pid)
            vent_drop(tp, i);
        else
            i++;
    }
    for (int i = 0; tp && i < tp->npend;) {
        if (tp->pend[i].pid == pid)
            pend_drop(tp, i);
        else
            i++;
    }
}

static void serve_partition(mserve *s, const kr_TxnMarkersRequest *req,
                            const kr_TxnMarkersRequest_Partition *pt)
{
    sk_node *n = s->r->node;
    sk_part *p = sk_part_get(sk_topic_get_id(n, &pt->topic_id), pt->partition);
    if (!p)
        return; /* deleted since: nothing to mark */
    if (!sk_part_serving(p)) {
        serve_step(s, SK_KAFKA_NOT_LEADER_OR_FOLLOWER);
        s->pending++;
        return;
    }
    s->pending++;
    int rc = sk_txns_append_marker(n, p, req->producer_id, req->producer_epoch, req->commit,
                                   serve_step, s);
    if (rc)
        serve_step(s, rc);
}

/* The offsets of one group (the request's entries from i on that name it). */
static void serve_group(mserve *s, const kr_TxnMarkersRequest *req, int32_t i)
{
    sk_req *r = s->r;
    kc_str g = req->offsets.v[i].group;
    sk_txoff *v = sk_arena_calloc(r->arena, (size_t)req->offsets.n + 1, sizeof *v);
    const char *group = sk_arena_strndup(r->arena, g.p ? g.p : "", g.len > 0 ? (size_t)g.len : 0);
    s->pending++;
    if (!v || !group) {
        serve_step(s, SK_KAFKA_UNKNOWN_SERVER_ERROR);
        return;
    }
    if (!sk_groups_coordinates(r, g)) {
        serve_step(s, SK_KAFKA_NOT_COORDINATOR);
        return;
    }
    int k = 0;
    for (int32_t j = i; j < req->offsets.n; j++) {
        const kr_TxnMarkersRequest_Offset *o = &req->offsets.v[j];
        if (o->group.len != g.len || memcmp(o->group.p, g.p, (size_t)g.len) != 0)
            continue;
        v[k].group = (char *)group;
        v[k].topic = sk_arena_strndup(r->arena, o->topic.p ? o->topic.p : "",
                                      o->topic.len > 0 ? (size_t)o->topic.len : 0);
        v[k].meta = sk_arena_strndup(r->arena, o->metadata.p ? o->metadata.p : "",
                                     o->metadata.len > 0 ? (size_t)o->metadata.len : 0);
        v[k].part = o->partition;
        v[k].offset = o->offset;
        v[k++].leader_epoch = o->leader_epoch;
    }
    int rc = sk_txns_commit_offsets(r->node, group, k, v, serve_step, s);
    if (rc)
        serve_step(s, rc == SK_ERR_NOENT ? 0 : rc);
}

static bool group_seen(const kr_TxnMarkersRequest *req, int32_t i)
{
    kc_str g = req->offsets.v[i].group;
    for (int32_t j = 0; j < i; j++) {
        kc_str h = req->offsets.v[j].group;
        if (h.len == g.len && memcmp(h.p, g.p, (size_t)g.len) == 0)
            return true;
    }
    return false;
}

void h_txn_markers(sk_req *r)
{
    const kr_TxnMarkersRequest *req = r->body;
    mserve *s = sk_arena_calloc(r->arena, 1, sizeof *s);
    if (!s || !r->node->txns) {
        ((kr_TxnMarkersResponse *)r->resp)->error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
        sk_req_respond(r);
        return;
    }
    s->r = r;
    s->pending = 1; /* until every write is started */
    forget_pid(r->node, req->producer_id);
    for (int32_t i = 0; i < req->partitions.n; i++)
        serve_partition(s, req, &req->partitions.v[i]);
    for (int32_t i = 0; req->commit && i < req->offsets.n; i++)
        if (!group_seen(req, i))
            serve_group(s, req, i);
    serve_step(s, 0);
}

/* ---- verification: the partition main's side ---- */

static vent *vent_find(sk_txpeer *tp, int64_t pid, int16_t epoch, const char *topic, int32_t part)
{
    for (int i = 0; i < tp->n; i++) {
        vent *v = &tp->v[i];
        if (v->pid == pid && v->epoch == epoch && v->part == part && strcmp(v->topic, topic) == 0)
            return v;
    }
    return NULL;
}

typedef struct vcall {
    sk_txpeer *tp;
    int64_t pid;
    int16_t epoch;
    int32_t part;
    char *topic;
} vcall;

static int16_t verify_code(int err, const kp_AddPartitionsToTxnResponse *r)
{
    if (err)
        return -1;
    if (r->error_code)
        return r->error_code;
    if (r->results_by_transaction.n < 1 || r->results_by_transaction.v[0].topic_results.n < 1)
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    const kp_AddPartitionsToTxnResponse_AddPartitionsToTxnTopicResult *t =
        &r->results_by_transaction.v[0].topic_results.v[0];
    return t->results_by_partition.n < 1 ? SK_KAFKA_UNKNOWN_SERVER_ERROR
                                         : t->results_by_partition.v[0].partition_error_code;
}

static void verify_done(void *arg, int err, const void *resp)
{
    vcall *c = arg;
    int16_t code = err == SK_ERR_CLOSED ? -1 : verify_code(err, resp);
    vent *v = err == SK_ERR_CLOSED ? NULL : vent_find(c->tp, c->pid, c->epoch, c->topic, c->part);
    /* Retriable refusals (the coordinator moving, a change in flight) are
     * asked again with the producer's retry. */
    if (code == SK_KAFKA_NOT_COORDINATOR || code == SK_KAFKA_COORDINATOR_NOT_AVAILABLE ||
        code == SK_KAFKA_CONCURRENT_TRANSACTIONS || code == SK_KAFKA_COORDINATOR_LOAD_IN_PROGRESS)
        code = -1;
    if (v && v->state == -1) {
        v->state = code;
        if (code == -1)
            v->asked_ms = 0;
    }
    free(c->topic);
    free(c);
}

static int ask(sk_node *n, sk_txpeer *tp, vent *v, const char *txn_id)
{
    sk_part *cp = sk_cluster_group_part(n->cluster, txn_id, strlen(txn_id));
    if (!cp || cp->main_node < 0)
        return SK_ERR_AGAIN;
    vcall *c = calloc(1, sizeof *c);
    if (!c || !(c->topic = strdup(v->topic))) {
        free(c);
        return SK_ERR_NOMEM;
    }
    c->tp = tp;
    c->pid = v->pid;
    c->epoch = v->epoch;
    c->part = v->part;
    kp_AddPartitionsToTxnRequest req;
    kc_init(&kp_AddPartitionsToTxnRequest_desc, &req);
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction t;
    kc_init(&kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTransaction_desc, &t);
    kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic tt;
    kc_init(&kp_AddPartitionsToTxnRequest_AddPartitionsToTxnTopic_desc, &tt);
    int32_t part = v->part;
    tt.name = kstr(v->topic);
    tt.partitions.n = 1;
    tt.partitions.v = &part;
    t.transactional_id = kstr(txn_id);
    t.producer_id = v->pid;
    t.producer_epoch = v->epoch;
    t.verify_only = true;
    t.topics.n = 1;
    t.topics.v = &tt;
    req.transactions.n = 1;
    req.transactions.v = &t;
    int rc = rpc_call(sk_cluster_rpc(n->cluster), cp->main_node, KP_ADD_PARTITIONS_TO_TXN, 4,
                      &req, RPC_TIMEOUT_MS, verify_done, c);
    if (rc) {
        free(c->topic);
        free(c);
        return rc;
    }
    v->state = -1;
    v->asked_ms = sk_mono_ms();
    return 0;
}

static vent *vent_add(sk_txpeer *tp, int64_t pid, int16_t epoch, const char *topic, int32_t part)
{
    if (tp->n == MAX_VERIFIED)
        vent_drop(tp, 0); /* the oldest is asked again if still needed */
    vent *v = &tp->v[tp->n];
    memset(v, 0, sizeof *v);
    if (!(v->topic = strdup(topic)))
        return NULL;
    v->pid = pid;
    v->epoch = epoch;
    v->part = part;
    v->state = -1;
    tp->n++;
    return v;
}

int sk_txpeer_verify(sk_node *n, const char *txn_id, int64_t pid, int16_t epoch,
                     const char *topic, int32_t part)
{
    sk_txpeer *tp = sk_txns_peer(n->txns);
    vent *v = vent_find(tp, pid, epoch, topic, part);
    if (v && v->state == 0)
        return 0;
    if (v && v->state > 0) {
        int code = v->state;
        vent_drop(tp, (int)(v - tp->v));
        return code;
    }
    if (!v && !(v = vent_add(tp, pid, epoch, topic, part)))
        return SK_ERR_AGAIN;
    if (v->asked_ms == 0 || sk_mono_ms() - v->asked_ms > ASK_AGAIN_MS) {
        if (ask(n, tp, v, txn_id) != 0)
            v->asked_ms = 0;
    }
    return SK_ERR_AGAIN;
}
