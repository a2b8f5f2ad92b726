/*
 * Follow (the main's side of proxy fetch, docs/zones.md): a proxy serving
 * consumers of its zone asks, per partition, for the watermarks and where
 * the batches from an offset on are: their records in logs on the shared
 * volume (this node's log, or the log a partition came from), or the object
 * that holds them once uploaded. Never the bytes: the proxy reads those
 * itself. When no partition has anything past its offset, the request
 * waits, like a fetch, until a watermark moves or MaxWaitMs passes.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "dispatch.h"
#include "handlers.h"
#include "krpc.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "sk_err.h"
#include "store.h"
#include "tier.h"

#define MAX_LOCS 64

/* What a storage lookup found for one partition. */
struct floc {
    bool wanted, have;
    int err;
    int64_t offset, max_bytes;
    kc_uuid id;
    int32_t part;
    uint64_t stream;
    sk_batch_loc locs[MAX_LOCS];
    int nl;
    bool in_object;
    sk_obj_loc obj;
};

typedef struct follow {
    sk_waiter base; /* first: parked on partitions as an sk_waiter */
    sk_req *r;
    sk_node *n;
    struct event *timer;
    sk_part **regs;
    int nregs;
    struct floc *f; /* per partition of the request */
    bool job_running, finished, shutdown, disk_tried;
} follow;

static void eval(follow *w);

static void unpark(follow *w)
{
    for (int i = 0; i < w->nregs; i++)
        sk_part_del_waiter(w->regs[i], &w->base);
    w->nregs = 0;
    if (w->timer)
        event_del(w->timer);
}

static void cleanup(sk_req *r)
{
    follow *w = r->hctx;
    if (!w)
        return;
    unpark(w);
    if (w->timer)
        event_free(w->timer);
    free(w->f);
    free(w->regs);
    free(w);
    r->hctx = NULL;
}

static void wake(sk_waiter *base)
{
    follow *w = (follow *)base;
    if (w->finished || w->job_running)
        return;
    unpark(w);
    eval(w);
}

static void stop(sk_waiter *base)
{
    follow *w = (follow *)base;
    w->shutdown = true;
    if (w->job_running)
        unpark(w);
    else
        wake(base);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stop(arg);
}

/* ---- storage lookups, on a reader thread ---- */

static void lookup_work(void *arg)
{
    follow *w = arg;
    sk_node *n = w->n;
    const kr_FollowRequest *req = w->r->body;
    for (int32_t i = 0; i < req->partitions.n; i++) {
        struct floc *f = &w->f[i];
        if (!f->wanted)
            continue;
        f->wanted = false;
        f->have = true;
        f->in_object = false;
        f->nl = sk_store_read_batches(n->store, &f->id, f->part, f->offset, f->max_bytes, f->locs,
                                      MAX_LOCS);
        f->err = f->nl < 0 ? f->nl : 0;
        if (f->nl < 0)
            f->nl = 0;
        /* Not in a WAL any more (uploaded): in an object. */
        if (f->err == 0 && (f->nl == 0 || f->locs[0].base > f->offset) &&
            sk_store_find_object(n->store, f->stream, f->offset, &f->obj) == 1)
            f->in_object = true;
    }
}

static void lookup_done(void *arg)
{
    follow *w = arg;
    w->job_running = false;
    if (!w->finished)
        eval(w);
}

/* ---- evaluation ---- */

static void put_locs(sk_req *r, kr_FollowResponse_Partition *o, const sk_batch_loc *locs, int n,
                     int64_t own_log)
{
    kr_FollowResponse_Batch *b = n ? sk_req_array(r, &kr_FollowResponse_Batch_desc, n) : NULL;
    if (n && !b)
        return;
    for (int i = 0; i < n; i++)
        b[i] = (kr_FollowResponse_Batch){locs[i].base, locs[i].last,
                                         locs[i].log ? locs[i].log : own_log,
                                         (int64_t)locs[i].lsn, (int32_t)locs[i].len};
    o->batches.n = n;
    o->batches.v = b;
}

/* From the WAL cache, or from the storage lookup; false when a lookup is
 * needed first. */
static bool locate(follow *w, sk_part *p, struct floc *f, const kr_FollowRequest_Partition *rp,
                   kr_FollowResponse_Partition *o)
{
    sk_req *r = w->r;
    int64_t own = sk_cluster_log_id(w->n->cluster);
    int64_t off = rp->offset;
    if (f->have && f->offset == off) {
        if (f->err) {
            o->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
        } else if (f->in_object) {
            o->object_key = sk_req_str(r, f->obj.key);
            o->object_size = (int64_t)f->obj.obj_size;
            o->range_start = f->obj.start;
            o->range_end = f->obj.end;
            o->range_max_timestamp = f->obj.max_ts;
            o->range_size = (int64_t)f->obj.size;
        } else {
            put_locs(r, o, f->locs, f->nl, own);
        }
        return true;
    }
    const sk_cbatch *cb[MAX_LOCS];
    bool miss;
    int n = sk_part_cached_batches(p, off, p->hw, rp->max_bytes, cb, MAX_LOCS, &miss);
    /* The cache may outlive the WAL it came from: a batch uploaded (or whose
     * segment is gone) is read from its object, which the view names. */
    wal_lsn start = wal_start_lsn(w->n->wal);
    wal_lsn done = w->n->tier ? sk_tier_trim_bound(w->n->tier) : 0;
    if (n > 0 && (cb[0]->lsn < start || cb[0]->lsn < done))
        miss = true;
    if (miss) {
        if (w->disk_tried)
            return true; /* looked up already: nothing more to say */
        *f = (struct floc){.wanted = true, .offset = off, .max_bytes = rp->max_bytes,
                           .id = p->topic->id, .part = p->index, .stream = p->stream};
        return false;
    }
    sk_batch_loc locs[MAX_LOCS];
    for (int i = 0; i < n; i++)
        locs[i] = (sk_batch_loc){cb[i]->base, cb[i]->last, cb[i]->max_ts, own, cb[i]->lsn,
                                 cb[i]->len};
    put_locs(r, o, locs, n, own);
    return true;
}

/* One partition: fills o; returns whether it has something new for the
 * proxy (an error, or a watermark past its offset). Sets *lookup when the
 * storage must be asked first. */
static bool eval_part(follow *w, int idx, kr_FollowResponse_Partition *o, bool *lookup)
{
    const kr_FollowRequest *req = w->r->body;
    const kr_FollowRequest_Partition *rp = &req->partitions.v[idx];
    sk_part *p = sk_part_get(sk_topic_get_id(w->n, &rp->topic_id), rp->partition);
    *o = (kr_FollowResponse_Partition){.topic_id = rp->topic_id, .partition = rp->partition,
                                       .high_watermark = -1, .log_start_offset = -1,
                                       .leader_epoch = -1, .object_key = {NULL, -1}};
    if (!sk_part_serving(p)) {
        o->error_code = p ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
        return true;
    }
    o->high_watermark = p->hw;
    o->log_start_offset = p->log_start;
    o->leader_epoch = p->leader_epoch;
    if (rp->offset < p->log_start || rp->offset > p->next_offset) {
        o->error_code = SK_KAFKA_OFFSET_OUT_OF_RANGE;
        return true;
    }
    if (rp->offset >= p->hw)
        return false;
    if (rp->max_bytes > 0 && !locate(w, p, &w->f[idx], rp, o))
        *lookup = true;
    return true;
}

static void park(follow *w)
{
    const kr_FollowRequest *req = w->r->body;
    for (int32_t i = 0; i < req->partitions.n; i++) {
        const kr_FollowRequest_Partition *rp = &req->partitions.v[i];
        sk_part *p = sk_part_get(sk_topic_get_id(w->n, &rp->topic_id), rp->partition);
        if (p && sk_part_add_waiter(p, &w->base) == 0)
            w->regs[w->nregs++] = p;
    }
    if (!w->timer) {
        w->timer = evtimer_new(w->n->base, timer_cb, w);
        int64_t ms = req->max_wait_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (w->timer)
            event_add(w->timer, &tv);
    }
}

static void eval(follow *w)
{
    sk_req *r = w->r;
    const kr_FollowRequest *req = r->body;
    kr_FollowResponse *resp = r->resp;
    bool news = false, lookup = false;
    for (int32_t i = 0; i < req->partitions.n; i++)
        news |= eval_part(w, i, &resp->partitions.v[i], &lookup);
    if (lookup) {
        w->disk_tried = true;
        w->job_running = true;
        if (sk_node_read_job(w->n, lookup_work, lookup_done, w) == 0)
            return;
        w->job_running = false;
    }
    if (news || req->max_wait_ms <= 0 || w->shutdown || w->n->stopping || r->conn->closed) {
        w->finished = true;
        unpark(w);
        sk_req_respond(r);
        return;
    }
    park(w);
}

void h_follow(sk_req *r)
{
    const kr_FollowRequest *req = r->body;
    kr_FollowResponse *resp = r->resp;
    int32_t np = req->partitions.n > 0 ? req->partitions.n : 0;
    if (!r->node->cluster) {
        resp->error_code = SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
        sk_req_respond(r);
        return;
    }
    follow *w = calloc(1, sizeof *w);
    kr_FollowResponse_Partition *out =
        np ? sk_req_array(r, &kr_FollowResponse_Partition_desc, np) : NULL;
    if (!w || (np && !out)) {
        free(w);
        sk_req_close(r, "out of memory");
        return;
    }
    w->base = (sk_waiter){wake, stop};
    w->r = r;
    w->n = r->node;
    w->f = calloc((size_t)(np ? np : 1), sizeof *w->f);
    w->regs = calloc((size_t)(np ? np : 1), sizeof *w->regs);
    r->hctx = w;
    r->cleanup = cleanup;
    if (!w->f || !w->regs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->partitions.n = np;
    resp->partitions.v = out;
    eval(w);
}
