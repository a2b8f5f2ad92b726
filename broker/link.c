#include "link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "append.h"
#include "cluster.h"
#include "dispatch.h"
#include "etcd.h"
#include "kbatch.h"
#include "krpc.h"
#include "meta.h"
#include "node.h"
#include "plog.h"
#include "pstate.h"
#include "seqgap.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "tier.h"

#define DEDUP_MAX 65536
/* Payload reads are short and mostly wait on the volume: several at once. */
#define LINK_THREADS 4
#define KEY_MAX 256

/* ---- state ---- */

/* A confirm being served. */
typedef struct lreq {
    sk_links *l;
    sk_req *r;
    kr_ConfirmResponse_Batch *out;
    int pending;
} lreq;

/* One batch of a confirm, from its checks until its answer. */
typedef struct lent {
    lreq *q;
    int idx;
    int64_t plog;
    kr_ConfirmRequest_Batch b;
    uint8_t *bytes; /* the payload's batch, once read */
    int read_err;
    bool read_done;
    int64_t read_start_us;
    struct lent *next; /* in its partition's queue, or its payref's wait list */
} lent;

/* Batches of one partition waiting for their reads, in arrival order. */
typedef struct pqueue {
    lent *head, **tail;
} pqueue;

/* A retained link: its LSN here, the payload's position there. */
typedef struct rlink {
    wal_lsn lsn;
    wal_lsn plsn;
} rlink;

typedef enum { PR_NONE, PR_CREATING, PR_EXISTS } pref_state;

/* This log's payref on one payload log. */
typedef struct pref {
    int64_t plog;
    pref_state state;
    int64_t floor;     /* as published */
    int64_t seen_end;  /* end of the furthest payload linked */
    lent *waiting;     /* entries waiting for the payref to exist */
    rlink *links;      /* links still in this log's WAL, in LSN order (a ring) */
    size_t head, n, cap;
    bool updating;
    int64_t created_rev; /* the etcd revision that created the payref */
} pref;

/* What a linked batch was answered, for retried confirms. */
typedef struct dedup {
    uint8_t key[16]; /* plog, plsn */
    int64_t base, append_ts;
    wal_lsn lsn_end;
} dedup;

struct sk_links {
    sk_node *n;
    sk_cluster *c;
    sk_workq *q; /* payload reads: on the acknowledgement path, apart from fetches' */
    sk_map *queues; /* (topic id, part) -> pqueue */
    sk_map *prefs;  /* plog -> pref */
    sk_map *dedup;  /* key -> dedup */
    dedup *ring;    /* DEDUP_MAX entries, the oldest at ring_head */
    size_t ring_head, ring_n;
    sk_seqgaps gaps; /* the producers' sequences left with a hole */
    bool closing;
    sk_links_stats st;
};

static void dkey(uint8_t out[16], int64_t plog, int64_t plsn)
{
    memcpy(out, &plog, 8);
    memcpy(out + 8, &plsn, 8);
}

static void remember(sk_links *l, int64_t plog, int64_t plsn, const sk_append_res *res)
{
    if (l->ring_n == DEDUP_MAX) {
        dedup *old = &l->ring[l->ring_head];
        sk_map_del(l->dedup, old->key, sizeof old->key);
        l->ring_head = (l->ring_head + 1) % DEDUP_MAX;
        l->ring_n--;
    }
    dedup *d = &l->ring[(l->ring_head + l->ring_n) % DEDUP_MAX];
    dkey(d->key, plog, plsn);
    d->base = res->base;
    d->append_ts = res->append_ts;
    d->lsn_end = res->lsn_end;
    if (sk_map_put(l->dedup, d->key, sizeof d->key, d) == 0)
        l->ring_n++;
}

/* Past its deadline a batch is never linked: the proxy, having asked again
 * after it, may trim its payload. */
static bool past_deadline(const kr_ConfirmRequest_Batch *b)
{
    return b->deadline_ms > 0 && sk_now_ms() > b->deadline_ms;
}

/* ---- sequence gaps (seqgap.h) ---- */

static sk_seqbatch seqbatch(const kr_ConfirmRequest_Batch *b)
{
    return (sk_seqbatch){b->topic_id,      b->partition,     b->producer_id,
                         b->producer_epoch, b->base_sequence, b->last_offset_delta};
}

/* ---- answers ---- */

static void finish_req(lreq *q)
{
    if (--q->pending > 0)
        return;
    sk_req_respond(q->r);
    free(q);
}

static void answer(lent *e, int16_t code, const char *msg)
{
    lreq *q = e->q;
    kr_ConfirmResponse_Batch *o = &q->out[e->idx];
    o->error_code = code;
    o->base_offset = -1;
    if (msg)
        o->error_message = sk_req_str(q->r, msg);
    if (code)
        q->l->st.refused++;
    if (code == SK_KAFKA_REQUEST_TIMED_OUT) {
        sk_seqbatch sb = seqbatch(&e->b);
        sk_seqgap_note(&q->l->gaps, &sb);
    }
    free(e->bytes);
    free(e);
    finish_req(q);
}

static void answer_ok(lent *e, int64_t base, int64_t append_ts, int64_t log_start)
{
    kr_ConfirmResponse_Batch *o = &e->q->out[e->idx];
    o->base_offset = base;
    o->log_append_time_ms = append_ts;
    o->log_start_offset = log_start;
    lreq *q = e->q;
    free(e->bytes);
    free(e);
    finish_req(q);
}

static pref *pref_of(sk_links *l, int64_t plog, bool create)
{
    pref *p = sk_map_get_i64(l->prefs, plog);
    if (p || !create)
        return p;
    p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->plog = plog;
    p->floor = -1;
    if (sk_map_put_i64(l->prefs, plog, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

static void fail(lent *e, int16_t code, const char *msg)
{
    answer(e, code, msg);
}

/* ---- the partition's queue: link in arrival order ---- */

static void pqkey(uint8_t out[20], const kc_uuid *id, int32_t part)
{
    memcpy(out, id->b, 16);
    memcpy(out + 16, &part, 4);
}

struct waitd {
    lent *e;
    int64_t plog, plsn;
};

static void linked_durable(void *arg, int err)
{
    lent *e = arg;
    sk_links *l = e->q->l;
    if (err) {
        answer(e, SK_KAFKA_KAFKA_STORAGE_ERROR, "the main's write-ahead log failed");
        return;
    }
    sk_part *p = sk_part_get(sk_topic_get_id(l->n, &e->b.topic_id), e->b.partition);
    kr_ConfirmResponse_Batch *o = &e->q->out[e->idx];
    l->st.linked++;
    answer_ok(e, o->base_offset, o->log_append_time_ms, p ? p->log_start : -1);
}

static void dup_durable(void *arg, int err)
{
    lent *e = arg;
    sk_links *l = e->q->l;
    if (err) {
        answer(e, SK_KAFKA_KAFKA_STORAGE_ERROR, "the main's write-ahead log failed");
        return;
    }
    sk_part *p = sk_part_get(sk_topic_get_id(l->n, &e->b.topic_id), e->b.partition);
    kr_ConfirmResponse_Batch *o = &e->q->out[e->idx];
    l->st.duplicates++;
    answer_ok(e, o->base_offset, o->log_append_time_ms, p ? p->log_start : -1);
}

static void retain(pref *p, wal_lsn lsn, wal_lsn plsn)
{
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 256;
        rlink *nl = malloc(ncap * sizeof *nl);
        if (!nl)
            return; /* the floor then stays where it is: safe */
        for (size_t i = 0; i < p->n; i++)
            nl[i] = p->links[(p->head + i) % p->cap];
        free(p->links);
        p->links = nl;
        p->head = 0;
        p->cap = ncap;
    }
    p->links[(p->head + p->n) % p->cap] = (rlink){lsn, plsn};
    p->n++;
}

/* Checks the payload read against the confirm; a Kafka code. */
static int16_t verify(const lent *e, kb_header *h)
{
    if (e->read_err == SK_ERR_NOENT)
        return SK_KAFKA_REQUEST_TIMED_OUT; /* trimmed: the confirm is stale */
    if (e->read_err)
        return SK_KAFKA_KAFKA_STORAGE_ERROR;
    kb_limits lim = {0};
    lim.max_batch_bytes = INT32_MAX;
    lim.produce_version = 9;
    int32_t bad;
    if (kb_validate(e->bytes, (size_t)e->b.length, &lim, h, &bad) != 0 ||
        h->crc != (uint32_t)e->b.crc || h->producer_id != e->b.producer_id ||
        h->producer_epoch != e->b.producer_epoch || h->base_sequence != e->b.base_sequence ||
        h->last_offset_delta != e->b.last_offset_delta)
        return SK_KAFKA_CORRUPT_MESSAGE;
    return 0;
}

static void link_one(sk_links *l, sk_part *p, lent *e)
{
    kb_header h;
    int16_t code = verify(e, &h);
    if (code) {
        if (e->read_err == 0 || e->read_err != SK_ERR_NOENT)
            l->st.read_errors++;
        fail(e, code, "the payload cannot be read as the confirm describes it");
        return;
    }
    if (!sk_part_serving(p)) {
        fail(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "the partition left this node");
        return;
    }
    if (past_deadline(&e->b)) {
        fail(e, SK_KAFKA_REQUEST_TIMED_OUT, "the confirm came after its deadline");
        return;
    }
    const sk_pbatch *dup;
    int rc = sk_append_check(p, &h, &dup);
    kr_ConfirmResponse_Batch *o = &e->q->out[e->idx];
    if (rc == SK_PSTATE_DUPLICATE) {
        o->base_offset = dup->base;
        o->log_append_time_ms = dup->timestamp;
        sk_node_wait_durable(l->n, dup->lsn_end, dup_durable, e);
        return;
    }
    sk_seqbatch sb = seqbatch(&e->b);
    if (rc == SK_KAFKA_OUT_OF_ORDER_SEQUENCE_NUMBER && sk_seqgap_follows(&l->gaps, &sb)) {
        fail(e, SK_KAFKA_REQUEST_TIMED_OUT,
             "a batch this one follows on from timed out: send both again");
        return;
    }
    if (rc != SK_PSTATE_APPEND) {
        fail(e, (int16_t)rc, rc == SK_KAFKA_INVALID_PRODUCER_EPOCH
                                 ? "the producer epoch is older than the current one"
                                 : "out of order sequence number");
        return;
    }
    sk_link lk = {.id = e->b.topic_id, .part = e->b.partition, .plog = e->plog,
                  .plsn = (wal_lsn)e->b.lsn, .len = (uint32_t)e->b.length};
    sk_append_res res;
    rc = sk_append(l->n, p, e->bytes, (uint32_t)e->b.length, &h, &lk, NULL, linked_durable, e, &res);
    if (rc) {
        fail(e, rc == SK_ERR_AGAIN ? SK_KAFKA_REQUEST_TIMED_OUT : SK_KAFKA_KAFKA_STORAGE_ERROR,
             "the main's write-ahead log cannot take the link");
        return;
    }
    o->base_offset = res.base;
    o->log_append_time_ms = res.append_ts;
    sk_seqgap_close(&l->gaps, &sb);
    remember(l, e->plog, e->b.lsn, &res);
    pref *pr = pref_of(l, e->plog, false);
    if (pr) {
        retain(pr, res.lsn, (wal_lsn)e->b.lsn);
        int64_t end = e->b.lsn + WAL_RECORD_HEADER + SK_DATA_HEADER + e->b.length;
        if (end > pr->seen_end)
            pr->seen_end = end;
    }
}

/* Links what is ready at the head of the partition's queue. */
static void pump(sk_links *l, const kc_uuid *id, int32_t part)
{
    uint8_t k[20];
    pqkey(k, id, part);
    pqueue *pq = sk_map_get(l->queues, k, sizeof k);
    if (!pq)
        return;
    sk_part *p = sk_part_get(sk_topic_get_id(l->n, id), part);
    while (pq->head && pq->head->read_done) {
        lent *e = pq->head;
        pq->head = e->next;
        if (!pq->head)
            pq->tail = &pq->head;
        if (!p)
            fail(e, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION, "the partition is gone");
        else
            link_one(l, p, e);
    }
    if (!pq->head) {
        sk_map_del(l->queues, k, sizeof k);
        free(pq);
    }
}

/* ---- reading payloads ---- */

static void read_work(void *arg)
{
    lent *e = arg;
    sk_node *n = e->q->l->n;
    uint32_t cap = (uint32_t)e->b.length + SK_DATA_HEADER, len = 0;
    uint8_t *rec = malloc(cap);
    uint8_t type = 0;
    if (!rec) {
        e->read_err = SK_ERR_NOMEM;
        return;
    }
    e->read_err = sk_node_read_log(n, e->plog, (wal_lsn)e->b.lsn, &type, rec, cap, &len);
    kc_uuid id;
    int32_t part;
    const uint8_t *batch;
    uint32_t blen;
    if (e->read_err == 0 &&
        (type != PAY_RECORD || len != cap || pay_parse(rec, len, &id, &part, &batch, &blen) ||
         memcmp(&id, &e->b.topic_id, sizeof id) != 0 || part != e->b.partition))
        e->read_err = SK_ERR_CORRUPT;
    if (e->read_err == 0)
        memmove(rec, batch, blen);
    e->bytes = rec;
}

static void read_done(void *arg)
{
    lent *e = arg;
    sk_links *l = e->q->l;
    e->read_done = true;
    l->st.read_us_last = sk_mono_us() - e->read_start_us;
    if (l->closing)
        return;
    pump(l, &e->b.topic_id, e->b.partition);
}

static void start_read(sk_links *l, lent *e)
{
    pref *pr = pref_of(l, e->plog, false);
    kr_ConfirmResponse *resp = e->q->r->resp;
    if (pr && pr->created_rev > resp->payref_revision)
        resp->payref_revision = pr->created_rev;
    uint8_t k[20];
    pqkey(k, &e->b.topic_id, e->b.partition);
    pqueue *pq = sk_map_get(l->queues, k, sizeof k);
    if (!pq) {
        pq = calloc(1, sizeof *pq);
        if (!pq || sk_map_put(l->queues, k, sizeof k, pq) != 0) {
            free(pq);
            fail(e, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
            return;
        }
        pq->tail = &pq->head;
    }
    e->next = NULL;
    *pq->tail = e;
    pq->tail = &e->next;
    e->read_start_us = sk_mono_us();
    if (sk_workq_submit(l->q, read_work, read_done, e) != 0) {
        e->read_err = SK_ERR_CLOSED;
        e->read_done = true;
        pump(l, &e->b.topic_id, e->b.partition);
    }
}

/* ---- payrefs ---- */

static void created(void *arg, int err, const etcd_txn_result *r)
{
    pref *p = arg;
    sk_links *l = NULL;
    lent *w = p->waiting;
    p->waiting = NULL;
    bool ok = !err && r->succeeded;
    p->state = ok ? PR_EXISTS : PR_NONE;
    if (ok)
        p->created_rev = r->revision;
    if (!w)
        return;
    l = w->q->l;
    if (l->closing)
        return;
    if (ok)
        l->st.payref_creates++;
    else
        SK_WARN("link", "payref on payload log %lld not created (%s): confirms refused",
                (long long)p->plog, err ? sk_err_name(err) : "a log is no longer live");
    while (w) {
        lent *e = w;
        w = w->next;
        if (ok)
            start_read(l, e);
        else
            fail(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "the proxy's or the main's log is not live");
    }
}

/* Creates this log's payref on p->plog: only while both logs are live. */
static int create_payref(sk_links *l, pref *p, int64_t first)
{
    cs_session *s = sk_cluster_session(l->c);
    cm_model *m = cs_model(s);
    const cm_log *pl = cm_log_get(m, p->plog), *ml = cm_log_get(m, cs_log_id(s));
    if (!pl || !ml || pl->state != CM_LOG_LIVE || ml->state != CM_LOG_LIVE)
        return SK_ERR_NOENT;
    char key[KEY_MAX], pk[KEY_MAX], mk[KEY_MAX];
    size_t kl = cm_key_payref(cs_prefix(s), p->plog, cs_log_id(s), key, sizeof key);
    size_t pkl = cm_key_log(cs_prefix(s), p->plog, pk, sizeof pk);
    size_t mkl = cm_key_log(cs_prefix(s), cs_log_id(s), mk, sizeof mk);
    char *val = cm_encode_payref(first);
    if (!val)
        return SK_ERR_NOMEM;
    etcd_cmp c[3] = {
        {.key = (const uint8_t *)pk, .klen = pkl, .target = ETCD_TARGET_MOD,
         .result = ETCD_CMP_EQUAL, .number = pl->mod_rev},
        {.key = (const uint8_t *)mk, .klen = mkl, .target = ETCD_TARGET_MOD,
         .result = ETCD_CMP_EQUAL, .number = ml->mod_rev},
        {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_CREATE,
         .result = ETCD_CMP_EQUAL, .number = 0},
    };
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val)};
    int rc = etcd_txn(cs_etcd(s), c, 3, &put, 1, NULL, 0, created, p);
    free(val);
    if (rc == 0) {
        p->state = PR_CREATING;
        p->floor = first;
    }
    return rc;
}

/* ---- serving a confirm ---- */

/* The checks of step 1; a Kafka code, and *msg. */
static int16_t check(sk_links *l, int64_t plog, const kr_ConfirmRequest_Batch *b, const char **msg)
{
    sk_part *p = sk_part_get(sk_topic_get_id(l->n, &b->topic_id), b->partition);
    *msg = NULL;
    if (!p) {
        *msg = "This server does not host this topic-partition.";
        return SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    }
    if (!sk_part_serving(p) || b->epoch > p->leader_epoch) {
        *msg = "This node is not the partition's main now.";
        return SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    }
    if (b->length < KB_HEADER_SIZE || b->length > p->topic->conf.max_message_bytes ||
        b->lsn < 0 || b->last_offset_delta < 0) {
        *msg = "the confirm describes no valid batch";
        return SK_KAFKA_CORRUPT_MESSAGE;
    }
    if (sk_node_wal_full(l->n)) {
        *msg = "the main's WAL is full: uploads to the object store are behind";
        return SK_KAFKA_NOT_ENOUGH_REPLICAS;
    }
    cm_model *m = sk_cluster_model(l->c);
    const cm_log *pl = cm_log_get(m, plog);
    if (!pl || pl->kind != CM_LOG_PAYLOAD || pl->state != CM_LOG_LIVE) {
        *msg = "the proxy's payload log is not live";
        return SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    }
    pref *pr = pref_of(l, plog, false);
    if (pr && pr->state == PR_EXISTS && b->lsn < pr->floor) {
        *msg = "the confirm is older than what the main still reads of the payload log";
        return SK_KAFKA_REQUEST_TIMED_OUT;
    }
    return 0;
}

static void take(sk_links *l, lreq *q, int64_t plog, int idx, const kr_ConfirmRequest_Batch *b)
{
    kr_ConfirmResponse_Batch *o = &q->out[idx];
    o->lsn = b->lsn;
    o->base_offset = -1;
    o->log_append_time_ms = -1;
    o->log_start_offset = -1;
    o->error_message = (kc_str){NULL, -1};
    q->pending++;
    lent *e = calloc(1, sizeof *e);
    if (!e) {
        o->error_code = SK_KAFKA_REQUEST_TIMED_OUT;
        finish_req(q);
        return;
    }
    *e = (lent){.q = q, .idx = idx, .plog = plog, .b = *b};
    const char *msg;
    int16_t code = check(l, plog, b, &msg);
    if (code) {
        answer(e, code, msg);
        return;
    }
    uint8_t k[16];
    dkey(k, plog, b->lsn);
    const dedup *d = sk_map_get(l->dedup, k, sizeof k);
    if (d) {
        o->base_offset = d->base;
        o->log_append_time_ms = d->append_ts;
        sk_node_wait_durable(l->n, d->lsn_end, dup_durable, e);
        return;
    }
    if (past_deadline(b)) {
        answer(e, SK_KAFKA_REQUEST_TIMED_OUT, "the confirm came after its deadline");
        return;
    }
    pref *pr = pref_of(l, plog, true);
    if (!pr) {
        answer(e, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    if (pr->state == PR_EXISTS) {
        start_read(l, e);
        return;
    }
    if (pr->state == PR_NONE) {
        /* From 0: whatever this log links from it before the floor is
         * first published is covered. */
        int rc = create_payref(l, pr, 0);
        if (rc) {
            fail(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "the proxy's or the main's log is not live");
            return;
        }
    }
    /* Waits for the payref, in arrival order. */
    lent **t = &pr->waiting;
    while (*t)
        t = &(*t)->next;
    e->next = NULL;
    *t = e;
}

void sk_links_confirm(sk_links *l, sk_req *r)
{
    const kr_ConfirmRequest *req = r->body;
    kr_ConfirmResponse *resp = r->resp;
    int32_t nb = req->batches.n > 0 ? req->batches.n : 0;
    lreq *q = calloc(1, sizeof *q);
    kr_ConfirmResponse_Batch *out =
        nb ? sk_req_array(r, &kr_ConfirmResponse_Batch_desc, nb) : NULL;
    if (!q || (nb && !out)) {
        free(q);
        sk_req_close(r, "out of memory");
        return;
    }
    *q = (lreq){l, r, out, 1};
    resp->batches.n = nb;
    resp->batches.v = out;
    l->st.confirms++;
    l->st.batches += (uint64_t)nb;
    for (int32_t i = 0; i < nb; i++)
        take(l, q, req->payload_log, i, &req->batches.v[i]);
    finish_req(q);
}

/* ---- floors ---- */

/* The lowest position of payload log `plog` that a batch between its
 * checks and its link still names (INT64_MAX: none). */
static int64_t pending_min(sk_links *l, const pref *p)
{
    int64_t m = INT64_MAX;
    for (const lent *e = p->waiting; e; e = e->next)
        if (e->b.lsn < m)
            m = e->b.lsn;
    size_t it = 0;
    void *v;
    while (sk_map_next(l->queues, &it, NULL, NULL, &v))
        for (const lent *e = ((const pqueue *)v)->head; e; e = e->next)
            if (e->plog == p->plog && e->b.lsn < m)
                m = e->b.lsn;
    return m;
}

static int64_t floor_of(sk_links *l, pref *p)
{
    /* Links below this are uploaded, and a view snapshot knows it: their
     * batches are read from objects from now on, by anyone. */
    wal_lsn done = l->n->tier ? sk_tier_trim_bound(l->n->tier) : 0;
    while (p->n > 0 && p->links[p->head].lsn < done) {
        p->head = (p->head + 1) % p->cap;
        p->n--;
    }
    int64_t f = p->seen_end > p->floor ? p->seen_end : p->floor;
    int64_t pend = pending_min(l, p);
    if (pend < f)
        f = pend;
    for (size_t i = 0; i < p->n; i++) {
        int64_t v = (int64_t)p->links[(p->head + i) % p->cap].plsn;
        if (v < f)
            f = v;
    }
    return f;
}

static void updated(void *arg, int err, const etcd_txn_result *r)
{
    pref *p = arg;
    (void)r;
    p->updating = false;
    if (err)
        p->floor = -1; /* not known to be published: again next time */
}

void sk_links_tick(sk_links *l)
{
    if (l->closing)
        return;
    cs_session *s = sk_cluster_session(l->c);
    size_t it = 0;
    void *v;
    while (sk_map_next(l->prefs, &it, NULL, NULL, &v)) {
        pref *p = v;
        if (p->state != PR_EXISTS || p->updating)
            continue;
        const cm_log *pl = cm_log_get(cs_model(s), p->plog);
        int64_t f = floor_of(l, p);
        /* A dead payload log's custodian waits for every floor to pass its
         * end: once nothing of it is retained here, nothing ever will be. */
        if ((!pl || pl->state != CM_LOG_LIVE) && p->n == 0 && pending_min(l, p) == INT64_MAX)
            f = INT64_MAX;
        if (f <= p->floor)
            continue;
        char key[KEY_MAX];
        size_t kl = cm_key_payref(cs_prefix(s), p->plog, cs_log_id(s), key, sizeof key);
        char *val = cm_encode_payref(f);
        if (!val)
            continue;
        if (etcd_put(cs_etcd(s), (const uint8_t *)key, kl, (const uint8_t *)val, strlen(val), 0,
                     updated, p) == 0) {
            p->floor = f;
            p->updating = true;
            l->st.payref_updates++;
        }
        free(val);
    }
}

/* ---- life ---- */

sk_links *sk_links_new(sk_node *n, sk_cluster *c)
{
    sk_links *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->n = n;
    l->c = c;
    l->queues = sk_map_new();
    l->prefs = sk_map_new();
    l->dedup = sk_map_new();
    l->ring = calloc(DEDUP_MAX, sizeof *l->ring);
    sk_seqgaps_init(&l->gaps);
    l->q = sk_workq_new(n->base, "skiff-link", LINK_THREADS);
    if (!l->queues || !l->prefs || !l->dedup || !l->ring || !l->q) {
        sk_links_destroy(l);
        return NULL;
    }
    return l;
}

void sk_links_close(sk_links *l)
{
    if (!l)
        return;
    l->closing = true;
    /* Reads in flight use the logs: they end before those close. */
    sk_workq_destroy(l->q);
    l->q = NULL;
}

void sk_links_destroy(sk_links *l)
{
    if (!l)
        return;
    size_t it = 0;
    void *v;
    /* Requests still waiting went with their connections; entries of
     * partition queues and wait lists are freed with the node's memory. */
    while (l->prefs && sk_map_next(l->prefs, &it, NULL, NULL, &v)) {
        pref *p = v;
        free(p->links);
        free(p);
    }
    it = 0;
    while (l->queues && sk_map_next(l->queues, &it, NULL, NULL, &v))
        free(v);
    sk_map_destroy(l->queues);
    sk_map_destroy(l->prefs);
    sk_map_destroy(l->dedup);
    free(l->ring);
    if (l->q)
        sk_workq_destroy(l->q);
    free(l);
}

void sk_links_get_stats(const sk_links *l, sk_links_stats *st)
{
    *st = l->st;
}
