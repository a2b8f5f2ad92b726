/*
 * ListOffsets (earliest, latest, by timestamp, max timestamp) and
 * OffsetForLeaderEpoch.
 *
 * Timestamp look-ups need the batches: the first batch whose max timestamp
 * reaches the target is found in the SQLite view (batches older than the
 * cache) or in the cache, then its records are scanned for the exact
 * offset. Storage reads run on a reader thread.
 */
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kbatch.h"
#include "kmsg.h"
#include "meta.h"
#include "net.h"
#include "node.h"
#include "peer.h"
#include "plog.h"
#include "proxied.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "store.h"
#include "tier.h"

#define LATEST -1
#define EARLIEST -2
#define MAX_TIMESTAMP -3
#define EARLIEST_LOCAL -4 /* v8+ */
#define LATEST_TIERED -5  /* v9+ */
#define FWD_TIMEOUT_MS 10000

struct scan {
    int64_t target;
    int64_t offset, ts;
};

static int scan_cb(void *arg, const kb_record *rec)
{
    struct scan *s = arg;
    if (rec->timestamp >= s->target) {
        s->offset = rec->offset;
        s->ts = rec->timestamp;
        return 1;
    }
    return 0;
}

/* The first record of the batch with timestamp >= target. */
static bool scan_batch(const uint8_t *p, size_t len, int64_t target, int64_t *off, int64_t *ts)
{
    struct scan s = {target, -1, -1};
    if (kb_foreach_record(p, len, 0, scan_cb, &s) != 0 || s.offset < 0)
        return false;
    *off = s.offset;
    *ts = s.ts;
    return true;
}

/* One partition's look-up that needs storage. */
struct lo_item {
    kp_ListOffsetsResponse_ListOffsetsPartitionResponse *out;
    kc_uuid id;
    int32_t part;
    int64_t target;     /* timestamp sought */
    int64_t below;      /* look in the view only below this base offset */
    int64_t batch_base; /* MAX_TIMESTAMP: the batch that holds it */
    bool by_offset;
    bool local_start; /* EARLIEST_LOCAL: the first batch still in the WAL */
    bool tiered;      /* LATEST_TIERED: the last offset in objects */
    uint64_t stream;
    /* result */
    bool found;
    bool failed; /* the view could not be read */
    int64_t offset, ts;
    bool check_cache; /* nothing in storage: look in the cache */
    bool in_object;   /* the batch is in an object: read it on the loop */
    sk_obj_loc loc;
};

struct lo_job {
    sk_req *r;
    struct lo_item *items;
    int n;
    int pending;  /* object reads */
    int forwards; /* requests to mains in other zones not answered yet */
    bool local_done;
};

/* ---- partitions of mains in other zones: asked of them ---- */

/* A partition this node serves as proxy (docs/zones.md): its main answers,
 * exactly as it would answer the client. */
static bool proxied(sk_req *r, const sk_part *p)
{
    return p && !sk_part_serving(p) && sk_proxy_serves(r->node, r->conn->zone, p);
}

/* One forwarded partition: where the answer goes. */
struct fwd_ent {
    int32_t main;
    int ti, pi; /* the request's topic and partition indexes */
};

/* The forwarded partitions to one main. */
struct fwd_call {
    sk_req *r;
    void *job;
    struct fwd_ent *ents; /* those of this main */
    int n;
    void (*copy)(struct fwd_call *c, int i, int err, const void *resp);
    void (*done)(void *job);
};

static int16_t fwd_error(int err)
{
    /* Not reached: the client refreshes its metadata; no answer in time:
     * it retries. Either way retriable. */
    return err == SK_ERR_TIMEOUT ? SK_KAFKA_REQUEST_TIMED_OUT : SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
}

static void fwd_done(void *arg, int err, const void *resp)
{
    struct fwd_call *c = arg;
    for (int i = 0; i < c->n; i++)
        c->copy(c, i, err, resp);
    c->done(c->job);
    free(c->ents);
    free(c);
}

/* Groups ents by main and sends each group, built by `build` (the request
 * for group entries [0, n) of c, in r's arena), as one request. Returns the
 * number of calls sent; copy runs once per entry, done once per call. */
static int forward(sk_req *r, struct fwd_ent *ents, int n, int16_t key, void *job,
                   void *(*build)(struct fwd_call *c),
                   void (*copy)(struct fwd_call *c, int i, int err, const void *resp),
                   void (*done)(void *job))
{
    int calls = 0;
    bool *taken = calloc((size_t)(n ? n : 1), sizeof *taken);
    if (!taken)
        return 0;
    for (int a = 0; a < n; a++) {
        if (taken[a])
            continue;
        struct fwd_call *c = calloc(1, sizeof *c);
        struct fwd_ent *g = malloc((size_t)n * sizeof *g);
        if (!c || !g) {
            free(c);
            free(g);
            break;
        }
        *c = (struct fwd_call){r, job, g, 0, copy, done};
        for (int b = a; b < n; b++)
            if (!taken[b] && ents[b].main == ents[a].main) {
                taken[b] = true;
                g[c->n++] = ents[b];
            }
        void *req = build(c);
        int rc = req ? rpc_call(sk_cluster_rpc(r->node->cluster), ents[a].main, key, r->version,
                                req, FWD_TIMEOUT_MS, fwd_done, c)
                     : SK_ERR_NOMEM;
        if (rc != 0) {
            for (int i = 0; i < c->n; i++)
                copy(c, i, SK_ERR_IO, NULL);
            free(c->ents);
            free(c);
            continue;
        }
        calls++;
    }
    free(taken);
    return calls;
}

static bool read_and_scan(sk_node *n, const sk_batch_loc *loc, int64_t target, int64_t *off,
                          int64_t *ts)
{
    uint32_t cap = loc->len + SK_DATA_HEADER;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return false;
    uint8_t type;
    uint32_t len;
    bool ok = sk_node_read_batch(n, loc, &type, buf, cap, &len) == 0 &&
              type == SK_WAL_DATA && len == cap &&
              scan_batch(buf + SK_DATA_HEADER, loc->len, target, off, ts);
    free(buf);
    return ok;
}

/* The tier look-ups of -4 and -5 (docs/compatibility.md): where the WAL's
 * part of the log starts, and where the objects' part ends. */
static void tier_lookup(sk_node *n, struct lo_item *it)
{
    int rc;
    if (it->tiered) {
        sk_obj_loc o;
        rc = sk_store_last_object(n->store, it->stream, &o);
        if (rc == 1)
            it->offset = o.end;
    } else {
        sk_batch_loc b;
        rc = sk_store_read_batches(n->store, &it->id, it->part, it->target, 1, &b, 1);
        if (rc == 1)
            it->offset = b.base > it->target ? b.base : it->target;
    }
    it->found = rc == 1;
    it->failed = rc < 0;
}

static void lo_work(void *arg)
{
    struct lo_job *j = arg;
    sk_node *n = j->r->node;
    for (int i = 0; i < j->n; i++) {
        struct lo_item *it = &j->items[i];
        sk_batch_loc loc;
        if (it->tiered || it->local_start) {
            tier_lookup(n, it);
            continue;
        }
        /* Objects hold the oldest data, the WAL the rest, the cache the
         * newest: look in that order. */
        int orc = it->by_offset
                      ? sk_store_find_object(n->store, it->stream, it->batch_base, &it->loc)
                      : sk_store_find_object_ts(n->store, it->stream, it->target, &it->loc);
        if (orc == 1 && (!it->by_offset || it->loc.start <= it->batch_base)) {
            it->in_object = true;
            continue;
        }
        int rc = it->by_offset
                     ? sk_store_find_offset(n->store, &it->id, it->part, it->batch_base, &loc)
                     : sk_store_find_ts(n->store, &it->id, it->part, it->target, it->below, &loc);
        if (rc == 1)
            it->found = read_and_scan(n, &loc, it->target, &it->offset, &it->ts);
        else
            it->check_cache = true;
    }
}

/* Looks for the first cached batch of p reaching target, from `from` on. */
static bool cache_lookup(const sk_part *p, int64_t from_base, int64_t target, int64_t *off,
                         int64_t *ts)
{
    int64_t start = sk_part_cache_start(p);
    if (start < 0)
        return false;
    if (from_base < start)
        from_base = start;
    for (int64_t o = from_base; o < p->hw;) {
        const sk_cbatch *b = sk_part_cached_at(p, o);
        if (!b)
            return false;
        if (b->max_ts >= target)
            return scan_batch(b->data, b->len, target, off, ts);
        o = b->last + 1;
    }
    return false;
}

static void lo_respond(struct lo_job *j)
{
    if (!j->local_done || j->forwards > 0)
        return;
    sk_req *r = j->r;
    free(j->items);
    free(j);
    sk_req_respond(r);
}

static void lo_forward_done(void *job)
{
    struct lo_job *j = job;
    j->forwards--;
    lo_respond(j);
}

/* -4 and -5 once the view answered. The WAL's part starts at its first
 * indexed batch, or lower when the cache holds batches the view has not
 * indexed yet; an empty WAL part starts at the high watermark. Nothing in
 * objects yet: -1, as Kafka answers without tiered storage. */
static void tier_finish(struct lo_item *it, const sk_part *p)
{
    kp_ListOffsetsResponse_ListOffsetsPartitionResponse *out = it->out;
    out->timestamp = -1;
    if (it->failed || !p) {
        out->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
        out->offset = -1;
        return;
    }
    if (it->tiered) {
        out->offset = it->found ? it->offset : -1;
        if (!it->found)
            out->leader_epoch = -1;
        return;
    }
    int64_t start = it->found ? it->offset : p->hw;
    int64_t cs = sk_part_cache_start(p);
    if (cs >= 0 && cs < start)
        start = cs;
    out->offset = start > p->log_start ? start : p->log_start;
}

static void lo_finish(struct lo_job *j)
{
    sk_req *r = j->r;
    for (int i = 0; i < j->n; i++) {
        struct lo_item *it = &j->items[i];
        sk_part *p = sk_part_get(sk_topic_get_id(r->node, &it->id), it->part);
        if (it->tiered || it->local_start) {
            tier_finish(it, p);
            continue;
        }
        if (!it->found && it->check_cache && p)
            it->found = cache_lookup(p, it->by_offset ? it->batch_base : -1, it->target,
                                     &it->offset, &it->ts);
        if (it->found && p && it->offset >= p->log_start) {
            it->out->offset = it->offset;
            it->out->timestamp = it->ts;
        } else {
            it->out->offset = -1;
            it->out->timestamp = -1;
        }
    }
    j->local_done = true;
    lo_respond(j);
}

struct lo_read {
    struct lo_job *j;
    struct lo_item *it;
};

/* The batches where they lie in the block cache (one piece each), not a
 * copy of up to 64 MiB of them. */
static void lo_read_done(void *arg, int err, sk_tier_result *res)
{
    struct lo_read *lr = arg;
    struct lo_job *j = lr->j;
    struct lo_item *it = lr->it;
    free(lr);
    /* Scan the batches read for the first record at or past the target. */
    for (int i = 0; err == 0 && !it->found && i < res->n; i++) {
        const kc_bytes *b = &res->seg[i];
        int64_t sz = b->len >= KB_LOG_OVERHEAD ? kb_total_size(b->p, (size_t)b->len) : -1;
        if (sz <= 0 || sz > b->len)
            break;
        it->found = scan_batch(b->p, (size_t)sz, it->target, &it->offset, &it->ts);
    }
    if (!it->found && !it->by_offset)
        it->check_cache = true; /* a later range, the WAL or the cache may hold it */
    sk_tier_result_free(res);
    if (--j->pending == 0)
        lo_finish(j);
}

static void lo_done(void *arg)
{
    struct lo_job *j = arg;
    sk_node *n = j->r->node;
    j->pending = 1;
    for (int i = 0; i < j->n; i++) {
        struct lo_item *it = &j->items[i];
        if (!it->in_object)
            continue;
        struct lo_read *lr = malloc(sizeof *lr);
        if (!lr)
            continue;
        lr->j = j;
        lr->it = it;
        j->pending++;
        /* The whole range for a time look-up, one batch for max timestamp. */
        int64_t from = it->by_offset ? it->batch_base : it->loc.start;
        size_t max = it->by_offset ? 1 : (size_t)(it->loc.size < (64u << 20) ? it->loc.size : (64u << 20));
        sk_tier_read_ref(n->tier, &it->loc, it->stream, from, max, lo_read_done, lr);
    }
    if (--j->pending == 0)
        lo_finish(j);
}

static void *lo_build(struct fwd_call *c)
{
    sk_req *r = c->r;
    const kp_ListOffsetsRequest *req = r->body;
    kp_ListOffsetsRequest *fr = sk_arena_alloc(r->arena, sizeof *fr);
    kp_ListOffsetsRequest_ListOffsetsTopic *ts =
        sk_req_array(r, &kp_ListOffsetsRequest_ListOffsetsTopic_desc, c->n);
    if (!fr || !ts)
        return NULL;
    *fr = *req;
    fr->replica_id = -1;
    for (int i = 0; i < c->n; i++) {
        const kp_ListOffsetsRequest_ListOffsetsTopic *lt = &req->topics.v[c->ents[i].ti];
        ts[i] = *lt;
        ts[i].partitions.n = 1;
        ts[i].partitions.v = &lt->partitions.v[c->ents[i].pi];
    }
    fr->topics.n = c->n;
    fr->topics.v = ts;
    return fr;
}

static void lo_copy(struct fwd_call *c, int i, int err, const void *resp)
{
    kp_ListOffsetsResponse *mine = c->r->resp;
    kp_ListOffsetsResponse_ListOffsetsPartitionResponse *out =
        &mine->topics.v[c->ents[i].ti].partitions.v[c->ents[i].pi];
    const kp_ListOffsetsResponse *a = resp;
    if (!err && (i >= a->topics.n || a->topics.v[i].partitions.n != 1))
        err = SK_ERR_PARSE;
    if (err) {
        out->error_code = fwd_error(err);
        return;
    }
    const kp_ListOffsetsResponse_ListOffsetsPartitionResponse *o = &a->topics.v[i].partitions.v[0];
    out->error_code = o->error_code;
    out->timestamp = o->timestamp;
    out->offset = o->offset;
    out->leader_epoch = o->leader_epoch;
}

void h_list_offsets(sk_req *r)
{
    sk_node *n = r->node;
    kp_ListOffsetsRequest *req = r->body;
    kp_ListOffsetsResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_ListOffsetsResponse_ListOffsetsTopicResponse *trs =
        sk_req_array(r, &kp_ListOffsetsResponse_ListOffsetsTopicResponse_desc, nt);
    int total = 0;
    for (int32_t i = 0; i < nt; i++)
        total += req->topics.v[i].partitions.n > 0 ? req->topics.v[i].partitions.n : 0;
    struct lo_job *j = calloc(1, sizeof *j);
    if (j)
        j->items = calloc((size_t)(total ? total : 1), sizeof *j->items);
    struct fwd_ent *fwd = sk_arena_alloc(r->arena, (size_t)(total ? total : 1) * sizeof *fwd);
    int nfwd = 0;
    if ((nt && !trs) || !j || !j->items || !fwd) {
        if (j)
            free(j->items);
        free(j);
        sk_req_close(r, "out of memory");
        return;
    }
    j->r = r;
    resp->topics.n = nt;
    resp->topics.v = trs;
    for (int32_t i = 0; i < nt; i++) {
        kp_ListOffsetsRequest_ListOffsetsTopic *lt = &req->topics.v[i];
        int32_t np = lt->partitions.n > 0 ? lt->partitions.n : 0;
        trs[i].name = lt->name;
        trs[i].partitions.n = np;
        trs[i].partitions.v =
            sk_req_array(r, &kp_ListOffsetsResponse_ListOffsetsPartitionResponse_desc, np);
        if (np && !trs[i].partitions.v) {
            free(j->items);
            free(j);
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *t = lt->name.len > 0 ? sk_topic_get(n, lt->name.p, (size_t)lt->name.len) : NULL;
        bool denied = !sk_authz_topic(r, t, lt->name, sk_authz_op(r));
        for (int32_t k = 0; k < np; k++) {
            kp_ListOffsetsRequest_ListOffsetsPartition *lp = &lt->partitions.v[k];
            kp_ListOffsetsResponse_ListOffsetsPartitionResponse *out = &trs[i].partitions.v[k];
            out->partition_index = lp->partition_index;
            out->offset = -1;
            out->timestamp = -1;
            if (denied) {
                out->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
                continue;
            }
            sk_part *p = sk_part_get(t, lp->partition_index);
            if (proxied(r, p) && nfwd < total) {
                fwd[nfwd++] = (struct fwd_ent){p->main_node, i, k};
                continue;
            }
            if (!sk_part_serving(p)) {
                out->error_code =
                    p ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            if (lp->current_leader_epoch >= 0 && lp->current_leader_epoch != p->leader_epoch) {
                out->error_code = lp->current_leader_epoch > p->leader_epoch
                                      ? SK_KAFKA_UNKNOWN_LEADER_EPOCH
                                      : SK_KAFKA_FENCED_LEADER_EPOCH;
                continue;
            }
            out->leader_epoch = p->leader_epoch;
            if (lp->timestamp == LATEST) {
                /* read_committed: the last stable offset (txidx.h). */
                out->offset = req->isolation_level == 1 ? sk_txidx_lso(&p->txidx, p->hw) : p->hw;
                continue;
            }
            if (lp->timestamp == EARLIEST) {
                out->offset = p->log_start;
                continue;
            }
            if (lp->timestamp < LATEST_TIERED ||
                (lp->timestamp == LATEST_TIERED && r->version < 9) ||
                (lp->timestamp == EARLIEST_LOCAL && r->version < 8) ||
                (lp->timestamp == MAX_TIMESTAMP && r->version < 7)) {
                out->error_code = SK_KAFKA_INVALID_REQUEST;
                continue;
            }
            if (!sk_part_view_ready(n, p)) {
                /* Just adopted: as a Kafka leader whose high watermark has
                 * not caught up yet, ask the client to retry. */
                out->error_code = SK_KAFKA_OFFSET_NOT_AVAILABLE;
                continue;
            }
            struct lo_item *it = &j->items[j->n++];
            it->out = out;
            it->id = p->topic->id;
            it->part = p->index;
            it->stream = p->stream;
            if (lp->timestamp == EARLIEST_LOCAL || lp->timestamp == LATEST_TIERED) {
                it->local_start = lp->timestamp == EARLIEST_LOCAL;
                it->tiered = lp->timestamp == LATEST_TIERED;
                it->target = p->log_start;
                continue;
            }
            if (lp->timestamp == MAX_TIMESTAMP) {
                if (p->max_ts_base < 0 || p->max_ts_base < p->log_start) {
                    j->n--;
                    continue;
                }
                it->target = p->max_ts;
                it->batch_base = p->max_ts_base;
                it->by_offset = true;
                int64_t cs = sk_part_cache_start(p);
                if (cs >= 0 && p->max_ts_base >= cs) {
                    it->check_cache = true;
                    continue;
                }
            } else {
                it->target = lp->timestamp;
                int64_t cs = sk_part_cache_start(p);
                it->below = cs >= 0 ? cs : INT64_MAX;
                if (cs >= 0 && cs <= p->log_start) {
                    it->check_cache = true; /* the cache holds the whole log */
                    continue;
                }
            }
        }
    }
    j->forwards = 1; /* until every call is sent */
    j->forwards += forward(r, fwd, nfwd, KP_LIST_OFFSETS, j, lo_build, lo_copy, lo_forward_done);
    j->forwards--;
    bool need_store = false;
    for (int i = 0; i < j->n; i++)
        need_store |= !j->items[i].check_cache;
    if (need_store && sk_node_read_job(n, lo_work, lo_done, j) == 0)
        return;
    lo_finish(j);
}

static void *oe_build(struct fwd_call *c)
{
    sk_req *r = c->r;
    const kp_OffsetForLeaderEpochRequest *req = r->body;
    kp_OffsetForLeaderEpochRequest *fr = sk_arena_alloc(r->arena, sizeof *fr);
    kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic *ts =
        sk_req_array(r, &kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic_desc, c->n);
    if (!fr || !ts)
        return NULL;
    *fr = *req;
    fr->replica_id = -1;
    for (int i = 0; i < c->n; i++) {
        const kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic *lt =
            &req->topics.v[c->ents[i].ti];
        ts[i] = *lt;
        ts[i].partitions.n = 1;
        ts[i].partitions.v = &lt->partitions.v[c->ents[i].pi];
    }
    fr->topics.n = c->n;
    fr->topics.v = ts;
    return fr;
}

static void oe_copy(struct fwd_call *c, int i, int err, const void *resp)
{
    kp_OffsetForLeaderEpochResponse *mine = c->r->resp;
    kp_OffsetForLeaderEpochResponse_EpochEndOffset *out =
        &mine->topics.v[c->ents[i].ti].partitions.v[c->ents[i].pi];
    const kp_OffsetForLeaderEpochResponse *a = resp;
    if (!err && (i >= a->topics.n || a->topics.v[i].partitions.n != 1))
        err = SK_ERR_PARSE;
    if (err) {
        out->error_code = fwd_error(err);
        return;
    }
    const kp_OffsetForLeaderEpochResponse_EpochEndOffset *o = &a->topics.v[i].partitions.v[0];
    out->error_code = o->error_code;
    out->leader_epoch = o->leader_epoch;
    out->end_offset = o->end_offset;
}

/* The request waits for its forwarded partitions. */
struct oe_job {
    sk_req *r;
    int forwards;
};

static void oe_forward_done(void *job)
{
    struct oe_job *j = job;
    if (--j->forwards > 0)
        return;
    sk_req *r = j->r;
    free(j);
    sk_req_respond(r);
}

void h_offset_for_leader_epoch(sk_req *r)
{
    sk_node *n = r->node;
    kp_OffsetForLeaderEpochRequest *req = r->body;
    kp_OffsetForLeaderEpochResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult *trs =
        sk_req_array(r, &kp_OffsetForLeaderEpochResponse_OffsetForLeaderTopicResult_desc, nt);
    if (nt && !trs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->topics.n = nt;
    resp->topics.v = trs;
    int total = 0, nfwd = 0;
    for (int32_t i = 0; i < nt; i++)
        total += req->topics.v[i].partitions.n > 0 ? req->topics.v[i].partitions.n : 0;
    struct fwd_ent *fwd = sk_arena_alloc(r->arena, (size_t)(total ? total : 1) * sizeof *fwd);
    if (!fwd) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        kp_OffsetForLeaderEpochRequest_OffsetForLeaderTopic *lt = &req->topics.v[i];
        int32_t np = lt->partitions.n > 0 ? lt->partitions.n : 0;
        trs[i].topic = lt->topic;
        trs[i].partitions.n = np;
        trs[i].partitions.v =
            sk_req_array(r, &kp_OffsetForLeaderEpochResponse_EpochEndOffset_desc, np);
        if (np && !trs[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *t = lt->topic.len > 0 ? sk_topic_get(n, lt->topic.p, (size_t)lt->topic.len)
                                        : NULL;
        for (int32_t k = 0; k < np; k++) {
            kp_OffsetForLeaderEpochRequest_OffsetForLeaderPartition *lp = &lt->partitions.v[k];
            kp_OffsetForLeaderEpochResponse_EpochEndOffset *out = &trs[i].partitions.v[k];
            out->partition = lp->partition;
            out->leader_epoch = -1;
            out->end_offset = -1;
            if (!sk_authz_topic(r, t, lt->topic, sk_authz_op(r))) {
                out->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
                continue;
            }
            sk_part *p = sk_part_get(t, lp->partition);
            if (proxied(r, p) && nfwd < total) {
                fwd[nfwd++] = (struct fwd_ent){p->main_node, i, k};
                continue;
            }
            if (!sk_part_serving(p)) {
                out->error_code =
                    p ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            if (lp->current_leader_epoch >= 0 && lp->current_leader_epoch != p->leader_epoch) {
                out->error_code = lp->current_leader_epoch > p->leader_epoch
                                      ? SK_KAFKA_UNKNOWN_LEADER_EPOCH
                                      : SK_KAFKA_FENCED_LEADER_EPOCH;
                continue;
            }
            /* Skiff never truncates a log: whatever epoch a client last saw,
             * every offset it fetched is still there. The end of an earlier
             * epoch is answered as the end of the log, which is never below
             * it, so that a client checking for truncation finds none. */
            if (lp->leader_epoch >= 0 && lp->leader_epoch <= p->leader_epoch) {
                out->leader_epoch = lp->leader_epoch;
                out->end_offset = p->hw;
            }
        }
    }
    struct oe_job *j = nfwd ? calloc(1, sizeof *j) : NULL;
    if (j) {
        *j = (struct oe_job){r, 1};
        j->forwards += forward(r, fwd, nfwd, KP_OFFSET_FOR_LEADER_EPOCH, j, oe_build, oe_copy,
                               oe_forward_done);
        oe_forward_done(j); /* responds once the forwarded partitions are answered */
        return;
    }
    for (int k = 0; k < nfwd; k++) /* out of memory: retriable */
        trs[fwd[k].ti].partitions.v[fwd[k].pi].error_code = SK_KAFKA_REQUEST_TIMED_OUT;
    sk_req_respond(r);
}
