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
#include "sk_map.h"
#include "sk_time.h"
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

/* A proxy's poll session: its partition list, with where each is at. */
#define SESSION_IDLE_MS 60000

typedef struct fsess {
    int32_t proxy;
    int64_t id;
    int64_t used_ms;
    int refs;    /* requests using it */
    bool stale;  /* replaced or forgotten: freed with its last request */
    struct follow *active; /* its request waiting now, if any */
    int32_t n;
    kr_FollowRequest_Partition parts[]; /* offsets move with each answer */
} fsess;

typedef struct follow {
    sk_waiter base; /* first: parked on partitions as an sk_waiter */
    sk_req *r;
    const kr_FollowRequest_Partition *parts; /* the request's, or its session's */
    int32_t np;
    fsess *sess;
    sk_node *n;
    struct event *timer;
    sk_part **regs;
    int nregs;
    struct floc *f; /* per partition of the request */
    kr_FollowResponse_Partition *all; /* per partition; the answer takes those with news */
    bool *news;
    kr_FollowResponse_Object *objs; /* object ranges found, this evaluation */
    int nobjs;
    int64_t arrived_us;
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

static void sess_drop(fsess *fs)
{
    if (fs->refs > 0)
        fs->stale = true;
    else
        free(fs);
}

static void cleanup(sk_req *r)
{
    follow *w = r->hctx;
    if (!w)
        return;
    if (w->sess && w->sess->active == w)
        w->sess->active = NULL;
    if (w->sess && --w->sess->refs == 0 && w->sess->stale)
        free(w->sess);
    unpark(w);
    if (w->timer)
        event_free(w->timer);
    free(w->f);
    free(w->regs);
    free(w->news);
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
    for (int32_t i = 0; i < w->np; i++) {
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
        b[i] = (kr_FollowResponse_Batch){locs[i].base, (int32_t)(locs[i].last - locs[i].base),
                                         locs[i].log ? locs[i].log : own_log,
                                         (int64_t)locs[i].lsn, (int32_t)locs[i].len};
    o->batches.n = n;
    o->batches.v = b;
}

typedef enum {
    LOC_DONE,   /* o is filled */
    LOC_LOOKUP, /* the storage must be asked first */
    LOC_WAIT,   /* just adopted: nothing to say until the view holds it */
} loc_result;

/* From the WAL cache, or from the storage lookup. */
static loc_result locate(follow *w, sk_part *p, struct floc *f,
                         const kr_FollowRequest_Partition *rp, kr_FollowResponse_Partition *o)
{
    sk_req *r = w->r;
    int64_t own = sk_cluster_log_id(w->n->cluster);
    int64_t off = rp->offset;
    if (f->have && f->offset == off) {
        if (f->err) {
            o->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
        } else if (f->in_object) {
            w->objs[w->nobjs++] = (kr_FollowResponse_Object){
                o->index, sk_req_str(r, f->obj.key), (int64_t)f->obj.obj_size, f->obj.start,
                f->obj.end, f->obj.max_ts, (int64_t)f->obj.size};
        } else {
            put_locs(r, o, f->locs, f->nl, own);
        }
        return LOC_DONE;
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
        if (!sk_part_view_ready(w->n, p))
            return LOC_WAIT;
        if (w->disk_tried)
            return LOC_DONE; /* looked up already: nothing more to say */
        *f = (struct floc){.wanted = true, .offset = off, .max_bytes = rp->max_bytes,
                           .id = p->topic->id, .part = p->index, .stream = p->stream};
        return LOC_LOOKUP;
    }
    sk_batch_loc locs[MAX_LOCS];
    for (int i = 0; i < n; i++)
        locs[i] = (sk_batch_loc){cb[i]->base, cb[i]->last, cb[i]->max_ts, own, cb[i]->lsn,
                                 cb[i]->len};
    put_locs(r, o, locs, n, own);
    return LOC_DONE;
}

/* One partition: fills o; returns whether it has something new for the
 * proxy (an error, or a watermark past its offset). Sets *lookup when the
 * storage must be asked first. */
static bool eval_part(follow *w, int idx, kr_FollowResponse_Partition *o, bool *lookup)
{
    const kr_FollowRequest_Partition *rp = &w->parts[idx];
    sk_part *p = sk_part_get(sk_topic_get_id(w->n, &rp->topic_id), rp->partition);
    *o = (kr_FollowResponse_Partition){.index = idx, .high_watermark = -1,
                                       .log_start_offset = -1, .leader_epoch = -1};
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
    if (rp->max_bytes <= 0)
        return true;
    switch (locate(w, p, &w->f[idx], rp, o)) {
    case LOC_LOOKUP:
        *lookup = true;
        return true;
    case LOC_WAIT:
        return false; /* parked: woken when the view holds it */
    default:
        return true;
    }
}

/* The answer: every partition of a request that did not wait, else those
 * with news. */
static void respond(follow *w)
{
    sk_req *r = w->r;
    const kr_FollowRequest *req = r->body;
    kr_FollowResponse *resp = r->resp;
    int32_t n = 0;
    for (int32_t i = 0; i < w->np; i++) {
        if (req->max_wait_ms > 0 && !w->news[i])
            continue;
        /* The session's partition polls on from what this answer gives. */
        if (w->sess && w->all[i].error_code == 0 && w->all[i].high_watermark >= 0)
            w->sess->parts[i].offset = w->all[i].high_watermark;
        w->all[n++] = w->all[i];
    }
    resp->partitions.n = n;
    resp->partitions.v = w->all;
    resp->objects.n = w->nobjs;
    resp->objects.v = w->objs;
    w->finished = true;
    unpark(w);
    sk_req_respond(r);
}

/* Waits until a watermark moves, or the timer (MaxWaitMs, or what is left
 * of MinWaitMs) ends it. */
static void park(follow *w, int64_t ms)
{
    for (int32_t i = 0; i < w->np; i++) {
        const kr_FollowRequest_Partition *rp = &w->parts[i];
        sk_part *p = sk_part_get(sk_topic_get_id(w->n, &rp->topic_id), rp->partition);
        if (p && sk_part_add_waiter(p, &w->base) == 0)
            w->regs[w->nregs++] = p;
    }
    if (!w->timer)
        w->timer = evtimer_new(w->n->base, timer_cb, w);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (w->timer)
        event_add(w->timer, &tv);
}

static void eval(follow *w)
{
    sk_req *r = w->r;
    const kr_FollowRequest *req = r->body;
    bool news = false, lookup = false;
    w->nobjs = 0;
    for (int32_t i = 0; i < w->np; i++) {
        w->news[i] = eval_part(w, i, &w->all[i], &lookup);
        news |= w->news[i];
    }
    if (lookup) {
        w->disk_tried = true;
        w->job_running = true;
        if (sk_node_read_job(w->n, lookup_work, lookup_done, w) == 0)
            return;
        w->job_running = false;
    }
    int64_t waited_ms = (sk_mono_us() - w->arrived_us) / 1000;
    bool early = news && req->max_wait_ms > 0 && waited_ms < req->min_wait_ms;
    if ((news && !early) || req->max_wait_ms <= 0 || w->shutdown || w->n->stopping ||
        r->conn->closed) {
        respond(w);
        return;
    }
    /* With news before MinWaitMs: more may come for the same answer. */
    int64_t left = early ? req->min_wait_ms - waited_ms : req->max_wait_ms - waited_ms;
    park(w, left > 0 ? left : 0);
}

/* ---- poll sessions ---- */

static void skey(uint8_t out[12], int32_t proxy, int64_t id)
{
    memcpy(out, &proxy, 4);
    memcpy(out + 4, &id, 8);
}

static void forget_idle(sk_map *m, int64_t now)
{
    size_t it = 0;
    const void *k;
    size_t kl;
    void *v;
    while (sk_map_next(m, &it, &k, &kl, &v)) {
        fsess *fs = v;
        if (now - fs->used_ms > SESSION_IDLE_MS) {
            uint8_t key[12];
            skey(key, fs->proxy, fs->id);
            sk_map_del(m, key, sizeof key);
            sess_drop(fs);
            it = 0; /* the map changed: walk again */
        }
    }
}

void h_follow_sessions_free(sk_map *m)
{
    size_t it = 0;
    void *v;
    while (sk_map_next(m, &it, NULL, NULL, &v))
        sess_drop(v); /* a request still holding one frees it */
    sk_map_destroy(m);
}

/* The request's session: stored anew from its list, or the one kept.
 * NULL (with *err) when the request names one this node does not have. */
static fsess *session_of(sk_req *r, int *err)
{
    const kr_FollowRequest *req = r->body;
    sk_map *m = sk_cluster_follow_sessions(r->node->cluster);
    uint8_t key[12];
    skey(key, req->proxy_node, req->session_id);
    fsess *fs = sk_map_get(m, key, sizeof key);
    int64_t now = sk_mono_ms();
    *err = 0;
    /* A new poll of a session ends the one waiting (its list changed, or
     * the proxy gave up on it): that one answers now. */
    if (fs && fs->active && !fs->active->finished) {
        follow *old = fs->active;
        fs->active = NULL;
        stop(&old->base);
    }
    if (req->partitions.n <= 0) {
        if (!fs)
            *err = SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND;
        else
            fs->used_ms = now;
        return fs;
    }
    if (fs) {
        sk_map_del(m, key, sizeof key);
        sess_drop(fs);
    } else {
        forget_idle(m, now);
    }
    int32_t n = req->partitions.n;
    fs = malloc(sizeof *fs + (size_t)n * sizeof fs->parts[0]);
    if (!fs || sk_map_put(m, key, sizeof key, fs) != 0) {
        free(fs);
        *err = SK_ERR_NOMEM;
        return NULL;
    }
    *fs = (fsess){req->proxy_node, req->session_id, now, 0, false, NULL, n};
    memcpy(fs->parts, req->partitions.v, (size_t)n * sizeof fs->parts[0]);
    return fs;
}

void h_follow(sk_req *r)
{
    const kr_FollowRequest *req = r->body;
    kr_FollowResponse *resp = r->resp;
    if (!r->node->cluster) {
        resp->error_code = SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
        sk_req_respond(r);
        return;
    }
    fsess *sess = NULL;
    if (req->session_id != 0) {
        int err;
        sess = session_of(r, &err);
        if (!sess) {
            if (err == SK_ERR_NOMEM) {
                sk_req_close(r, "out of memory");
                return;
            }
            resp->error_code = (int16_t)err;
            sk_req_respond(r);
            return;
        }
    }
    int32_t np = sess ? sess->n : req->partitions.n > 0 ? req->partitions.n : 0;
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
    w->sess = sess;
    if (sess) {
        sess->refs++;
        sess->active = w;
    }
    w->parts = sess ? sess->parts : req->partitions.v;
    w->np = np;
    w->f = calloc((size_t)(np ? np : 1), sizeof *w->f);
    w->regs = calloc((size_t)(np ? np : 1), sizeof *w->regs);
    w->news = calloc((size_t)(np ? np : 1), sizeof *w->news);
    w->all = out;
    w->objs = np ? sk_req_array(r, &kr_FollowResponse_Object_desc, np) : NULL;
    w->arrived_us = sk_mono_us();
    r->hctx = w;
    r->cleanup = cleanup;
    if (!w->f || !w->regs || !w->news || (np && !w->objs)) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->partitions.n = 0;
    eval(w);
}
