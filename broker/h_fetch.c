/*
 * Fetch: serve batches below the high watermark from the WAL cache, or from
 * storage through the SQLite view's batch index on a reader thread, and
 * long-poll (max_wait_ms / min_bytes) until produce moves a watermark.
 *
 * A fetch is evaluated from scratch each time (first call, wake-up, disk
 * read done, timeout): cached batches are only pointed at while evaluating.
 * The response does not copy them: each record piece names its counted
 * owner (the WAL cache entry, the block cache's block an object read found
 * it in, or the buffer a WAL read filled), the encoder leaves those pieces
 * out, and the connection sends them by reference, holding each owner until
 * its bytes are written (dispatch.c, net.c). So eviction cannot pull memory
 * from under a queued response. Every hold and drop is on the loop thread
 * (the counts are not atomic): results are let go on the loop, never on
 * the reader thread.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "config.h"
#include "cluster.h"
#include "dispatch.h"
#include "fetch_session.h"
#include "follow.h"
#include "handlers.h"
#include "kmsg.h"
#include "meta.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "proxied.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "store.h"
#include "tier.h"

#define MAX_SEGS 512 /* batches per partition in one response */

/* Batches read from storage for one partition. */
struct disk {
    bool wanted;    /* asked for in the current job */
    bool have;      /* result below is valid */
    bool from_objs; /* the job found the batch in an object: read it there */
    bool via_hint;  /* ... or the partition's last object range did */
    bool from_proxy; /* a proxied partition: read where its main says */
    bool proxy_tried;
    int64_t offset, max_bytes;
    kc_uuid id;
    int32_t part;
    uint64_t stream;
    sk_obj_loc loc;
    sk_obj_loc next; /* the range after loc, when has_next (read ahead into it) */
    bool has_next;
    uint8_t *buf; /* concatenated batches (a WAL or proxied read) */
    sk_ref *bref; /* buf's count, once a response points at it (loop thread) */
    sk_tier_result *objs; /* or: an object read's batches, in cached blocks */
    int64_t len;
    int64_t first_base, end; /* offsets the result covers: [first batch base, end) */
    int err;
};

typedef struct sk_fwait {
    sk_waiter base; /* first: plog parks and wakes it as an sk_waiter */
    sk_req *r;
    sk_node *n;
    struct event *timer; /* armed while parked, for what is left to deadline */
    int64_t deadline;    /* monotonic ms: max_wait_ms after the request came */
    sk_part **regs; /* partitions this fetch is parked on */
    int nregs;
    int nflat;            /* partitions in the request */
    struct disk *disk;    /* per flat partition */
    bool job_running; /* a storage read (WAL or objects) is under way */
    int tier_pending; /* object reads still running */
    bool parked;
    bool finished;
    bool disk_tried;
    bool shutdown;
    sk_arena *keep; /* the decoded request and the response skeleton */
    sk_fetch_session session;
} sk_fwait;

static void fetch_eval(sk_fwait *w);

/* A storage read's buffer with a count, for responses that send it by
 * reference. */
struct rbuf {
    sk_ref ref; /* first */
    uint8_t *buf;
};

static void rbuf_free(sk_ref *ref)
{
    struct rbuf *b = (struct rbuf *)ref;
    free(b->buf);
    free(b);
}

/* d->buf's count, made on first use; NULL without memory (then the
 * response copies the bytes). */
static sk_ref *disk_ref(struct disk *d)
{
    if (!d->bref) {
        struct rbuf *b = malloc(sizeof *b);
        if (!b)
            return NULL;
        sk_ref_init(&b->ref, rbuf_free);
        b->buf = d->buf;
        d->bref = &b->ref;
    }
    return d->bref;
}

/* Lets go of d's result (loop thread: it may hold cached blocks). */
static void disk_release(struct disk *d)
{
    if (d->bref)
        sk_ref_put(d->bref);
    else
        free(d->buf);
    sk_tier_result_free(d->objs);
    d->objs = NULL;
    d->bref = NULL;
    d->buf = NULL;
}

static void unpark(sk_fwait *w)
{
    for (int i = 0; i < w->nregs; i++)
        sk_part_del_waiter(w->regs[i], &w->base);
    w->nregs = 0;
    w->parked = false;
    if (w->timer)
        event_del(w->timer);
}

static void fetch_cleanup(sk_req *r)
{
    sk_fwait *w = r->hctx;
    if (!w)
        return;
    unpark(w);
    if (w->timer)
        event_free(w->timer);
    for (int i = 0; i < w->nflat; i++)
        disk_release(&w->disk[i]);
    free(w->disk);
    free(w->regs);
    sk_arena_destroy(w->keep);
    free(w);
    r->hctx = NULL;
}

static void fetch_wake(sk_waiter *base)
{
    sk_fwait *w = (sk_fwait *)base;
    if (w->finished || w->job_running)
        return;
    unpark(w);
    /* Something moved: a proxied partition may read again. */
    for (int i = 0; i < w->nflat; i++)
        w->disk[i].proxy_tried = false;
    fetch_eval(w);
}

static void fetch_stop(sk_waiter *base)
{
    sk_fwait *w = (sk_fwait *)base;
    w->shutdown = true;
    if (w->job_running)
        unpark(w); /* its disk read answers when done */
    else
        fetch_wake(base);
}

void sk_fetch_wake_all(sk_node *n)
{
    /* Parked fetches hang off partitions; collect them through every
     * partition of every topic. */
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++) {
            sk_part *p = t->parts[i];
            while (p->nwaiters > 0) {
                sk_waiter *w = p->waiters[0];
                w->stop(w);
            }
        }
    }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_fwait *w = arg;
    if (w->finished)
        return;
    w->shutdown = true; /* timed out: answer with what there is */
    if (w->job_running)
        return; /* the read under way evaluates when done, and answers */
    unpark(w);
    fetch_eval(w);
}

/* ---- reads from storage, on a reader thread ---- */

static void disk_work(void *arg)
{
    sk_fwait *w = arg;
    sk_node *n = w->n;
    for (int i = 0; i < w->nflat; i++) {
        struct disk *d = &w->disk[i];
        if (!d->wanted)
            continue;
        d->wanted = false; /* its last result was let go on the loop */
        d->len = 0;
        d->has_next = false;
        sk_batch_loc locs[64];
        int nl = sk_store_read_batches(n->store, &d->id, d->part, d->offset, d->max_bytes, locs,
                                       64);
        if (nl < 0) {
            d->err = nl;
            d->have = true;
            continue;
        }
        /* Not in the WAL any more (uploaded): in an object. */
        if ((nl == 0 || locs[0].base > d->offset) &&
            sk_store_find_object(n->store, d->stream, d->offset, &d->loc) == 1) {
            d->from_objs = true;
            d->has_next =
                sk_store_find_object(n->store, d->stream, d->loc.end + 1, &d->next) == 1;
            continue;
        }
        int64_t total = 0;
        for (int k = 0; k < nl; k++)
            total += locs[k].len;
        d->buf = malloc(total ? (size_t)total : 1);
        uint32_t cap = 0;
        uint8_t *tmp = NULL;
        d->err = d->buf ? 0 : SK_ERR_NOMEM;
        int64_t pos = 0;
        d->first_base = nl ? locs[0].base : d->offset;
        d->end = d->offset;
        for (int k = 0; k < nl && d->err == 0; k++) {
            uint32_t need = locs[k].len + SK_DATA_HEADER;
            if (need > cap) {
                free(tmp);
                tmp = malloc(need);
                cap = tmp ? need : 0;
                if (!tmp) {
                    d->err = SK_ERR_NOMEM;
                    break;
                }
            }
            uint8_t type;
            uint32_t len;
            int rc = sk_node_read_batch(n, &locs[k], &type, tmp, cap, &len);
            if (rc != 0 || type != SK_WAL_DATA || len != need) {
                /* A trimmed segment ends the read: what came before is
                 * still good. */
                if (k == 0)
                    d->err = rc ? rc : SK_ERR_CORRUPT;
                break;
            }
            memcpy(d->buf + pos, tmp + SK_DATA_HEADER, locs[k].len);
            pos += locs[k].len;
            d->end = locs[k].last + 1;
        }
        free(tmp);
        d->len = pos;
        d->have = true;
    }
}

struct tread {
    sk_fwait *w;
    int idx;
};

static void start_object_reads(sk_fwait *w);

static void set_loc(sk_obj_loc **slot, const sk_obj_loc *loc)
{
    if (!loc) {
        free(*slot);
        *slot = NULL;
        return;
    }
    if (!*slot)
        *slot = malloc(sizeof **slot);
    if (*slot)
        **slot = *loc;
}

/* The range a read used, and the one after it (looked up with it, not
 * when read through the hint). */
static sk_part *remember_range(sk_fwait *w, const struct disk *d, bool keep)
{
    sk_part *p = sk_part_get(sk_topic_get_id(w->n, &d->id), d->part);
    if (!p)
        return NULL;
    set_loc(&p->obj_hint, keep ? &d->loc : NULL);
    if (!keep || !d->via_hint)
        set_loc(&p->obj_next, keep && d->has_next ? &d->next : NULL);
    return p;
}

/* The read's read-ahead reached the end of its object range: the next
 * range's index and first blocks are fetched now, once, rather than when
 * the consumer gets there. */
static void read_ahead_next(sk_fwait *w, const struct disk *d, sk_part *p)
{
    if (!p || !p->obj_next || !d->objs || !d->objs->near_end)
        return;
    sk_tier_prefetch(w->n->tier, p->obj_next, d->stream);
    set_loc(&p->obj_next, NULL);
}

/* A read from objects or through the main ended (its result, if any, is in
 * d already): retry a stale hint, or keep the result. */
static void tier_ended(struct tread *tr, int err, int64_t first, int64_t end)
{
    sk_fwait *w = tr->w;
    struct disk *d = &w->disk[tr->idx];
    free(tr);
    d->from_objs = false;
    d->from_proxy = false;
    if (err != 0 && d->via_hint) {
        /* The remembered range is gone (compacted and deleted): forget it
         * and look the batch up again. */
        remember_range(w, d, false);
        d->have = false;
        w->disk_tried = false;
    } else {
        if (err == 0)
            read_ahead_next(w, d, remember_range(w, d, true));
        d->have = true;
        d->err = err;
        d->first_base = first;
        d->end = end;
    }
    d->via_hint = false;
    if (--w->tier_pending > 0)
        return;
    w->job_running = false;
    if (!w->finished)
        fetch_eval(w);
}

/* A proxied read (sk_follow_read): the batches in one buffer. */
static void tier_done(void *arg, int err, uint8_t *buf, size_t len, int64_t first, int64_t end)
{
    struct tread *tr = arg;
    struct disk *d = &tr->w->disk[tr->idx];
    disk_release(d);
    d->buf = err == 0 ? buf : NULL;
    d->len = err == 0 ? (int64_t)len : 0;
    if (err != 0)
        free(buf);
    tier_ended(tr, err, first, end);
}

/* A read from objects: the batches stay in the block cache's blocks. */
static void tier_ref_done(void *arg, int err, sk_tier_result *res)
{
    struct tread *tr = arg;
    struct disk *d = &tr->w->disk[tr->idx];
    disk_release(d);
    d->objs = res;
    d->len = res ? (int64_t)res->len : 0;
    tier_ended(tr, err, res ? res->first : -1, res ? res->end : -1);
}

/* Batches found in objects are read on the loop, through the caches. */
static void start_object_reads(sk_fwait *w)
{
    w->tier_pending++;
    for (int i = 0; i < w->nflat; i++) {
        struct disk *d = &w->disk[i];
        if (!(d->from_objs || d->from_proxy) || w->finished)
            continue;
        struct tread *tr = malloc(sizeof *tr);
        if (!tr) {
            d->from_objs = false;
            d->have = true;
            d->err = SK_ERR_NOMEM;
            continue;
        }
        tr->w = w;
        tr->idx = i;
        w->tier_pending++;
        sk_part *p = d->from_proxy ? sk_part_get(sk_topic_get_id(w->n, &d->id), d->part) : NULL;
        if (d->from_proxy && p)
            sk_follow_read(sk_cluster_follows(w->n->cluster), p, d->offset, d->max_bytes,
                           tier_done, tier_ref_done, tr);
        else if (d->from_proxy)
            tier_done(tr, SK_ERR_NOENT, NULL, 0, -1, -1);
        else
            sk_tier_read_ref(w->n->tier, &d->loc, d->stream, d->offset, (size_t)d->max_bytes,
                             tier_ref_done, tr);
    }
    /* The extra count keeps a read that completes at once from evaluating
     * before every read is started. */
    if (--w->tier_pending > 0)
        return;
    w->job_running = false;
    if (!w->finished)
        fetch_eval(w);
}

static void disk_done(void *arg)
{
    start_object_reads(arg);
}

/* ---- evaluation ---- */

/* The bytes of the whole batches of buf that begin below `end` (the last
 * stable offset falls on a batch's start). */
static int64_t below(const uint8_t *buf, int64_t len, int64_t end)
{
    int64_t pos = 0;
    while (pos + KB_HEADER_SIZE <= len) {
        kb_header h;
        if (kb_parse_header(buf + pos, (size_t)(len - pos), &h) != 0 || h.base_offset >= end)
            break;
        int64_t size = kb_total_size(buf + pos, (size_t)(len - pos));
        if (size <= 0 || pos + size > len)
            break;
        pos += size;
    }
    return pos;
}

/* read_committed: the aborted transactions of [from, end), as Kafka lists
 * them (producer id, first offset). */
static void aborted_list(sk_req *r, const sk_part *p, int64_t from, int64_t end,
                         kp_FetchResponse_PartitionData *pd)
{
    sk_txidx_ent tmp[1];
    int n = sk_txidx_aborted(&p->txidx, from, end, tmp, 0);
    pd->aborted_transactions.n = 0;
    if (n == 0)
        return;
    sk_txidx_ent *es = sk_arena_calloc(r->arena, (size_t)n, sizeof *es);
    kp_FetchResponse_AbortedTransaction *v =
        sk_req_array(r, &kp_FetchResponse_AbortedTransaction_desc, n);
    if (!es || !v)
        return;
    n = sk_txidx_aborted(&p->txidx, from, end, es, n);
    for (int i = 0; i < n; i++) {
        v[i].producer_id = es[i].pid;
        v[i].first_offset = es[i].first;
    }
    pd->aborted_transactions.n = n;
    pd->aborted_transactions.v = v;
}

static int16_t check_epoch(const sk_part *p, int32_t current)
{
    if (current < 0 || current == p->leader_epoch)
        return 0;
    return current > p->leader_epoch ? SK_KAFKA_UNKNOWN_LEADER_EPOCH
                                     : SK_KAFKA_FENCED_LEADER_EPOCH;
}

/* A one-entry owner list for a records field, or NULL (copied). */
static sk_ref *const *one_ref(sk_req *r, sk_ref *ref)
{
    sk_ref **v = ref ? sk_arena_alloc(r->arena, sizeof *v) : NULL;
    if (v)
        *v = ref;
    return v;
}

/* The whole batches of d's result that begin below `end`, as a records
 * field pointing at them (by reference where they have an owner); 0 bytes
 * when none. An object read's pieces are one batch each. */
static int64_t disk_records(sk_req *r, struct disk *d, int64_t end, kc_records *rec)
{
    const sk_tier_result *o = d->objs;
    if (o) {
        int n = 0;
        int64_t bytes = 0;
        while (n < o->n && below(o->seg[n].p, o->seg[n].len, end) == o->seg[n].len)
            bytes += o->seg[n++].len;
        if (n > 0)
            *rec = (kc_records){NULL, (int32_t)bytes, n, o->seg, o->ref};
        return bytes;
    }
    int64_t dlen = below(d->buf, d->len, end);
    kc_bytes *seg = dlen > 0 ? sk_arena_alloc(r->arena, sizeof *seg) : NULL;
    if (!seg)
        return 0;
    *seg = (kc_bytes){d->buf, (int32_t)dlen};
    *rec = (kc_records){NULL, (int32_t)dlen, 1, seg, one_ref(r, disk_ref(d))};
    return dlen;
}

/* What one partition's evaluation decided. */
enum { PE_NONE, PE_DATA, PE_ERROR, PE_READ };

/* A partition this node serves as the proxy of its main (docs/zones.md):
 * the watermarks are the main's, as last heard; the batches come from the
 * followed tail or from a read where the main says they are. */
static int eval_proxied(sk_fwait *w, sk_part *p, const kp_FetchRequest_FetchPartition *fp,
                        kp_FetchResponse_PartitionData *pd, struct disk *d, int64_t limit,
                        bool first_data, int64_t *bytes)
{
    sk_follows *f = sk_cluster_follows(w->n->cluster);
    sk_follow_marks m;
    int64_t off = fp->fetch_offset;
    if (d->have && d->err > 0 && d->offset == off) {
        pd->error_code = (int16_t)d->err; /* the main's answer */
        return PE_ERROR;
    }
    if (!sk_follow_marks_of(f, p, &m)) {
        /* Never heard: ask (a read answers with the marks too). */
        if (d->proxy_tried)
            return PE_NONE;
        goto read;
    }
    pd->high_watermark = pd->last_stable_offset = m.hw;
    pd->log_start_offset = m.log_start;
    int16_t ee = check_epoch(p, fp->current_leader_epoch);
    if (ee) {
        pd->error_code = ee;
        return PE_ERROR;
    }
    if (off < m.log_start) {
        pd->error_code = SK_KAFKA_OFFSET_OUT_OF_RANGE;
        return PE_ERROR;
    }
    if (off >= m.hw) {
        /* The main may be further: a read past the marks tells. */
        if (off > m.hw && !d->proxy_tried)
            goto read;
        sk_follow_poll(f, p, m.hw);
        return PE_NONE;
    }
    const uint8_t *buf;
    int64_t len;
    kc_records rec;
    if (d->have && d->err == 0 && d->len > 0 && off >= d->first_base && off < d->end) {
        len = disk_records(w->r, d, INT64_MAX, &rec);
        if (len == 0)
            return PE_NONE;
    } else if (sk_follow_tail(f, p, off, limit > 0 ? limit : 1, &buf, &len)) {
        kc_bytes *seg = sk_arena_alloc(w->r->arena, sizeof *seg);
        if (!seg)
            return PE_NONE;
        *seg = (kc_bytes){buf, (int32_t)len};
        rec = (kc_records){NULL, (int32_t)len, 1, seg, NULL}; /* the followed tail is copied */
    } else {
        if (d->proxy_tried)
            return PE_NONE;
        goto read;
    }
    if (!first_data && len > limit)
        return PE_NONE;
    pd->records = rec;
    *bytes = len;
    return PE_DATA;
read:
    d->from_proxy = true;
    d->proxy_tried = true;
    d->have = false;
    d->offset = off;
    d->max_bytes = limit > 0 ? limit : 1;
    d->id = p->topic->id;
    d->part = p->index;
    return PE_READ;
}

static void fetch_eval(sk_fwait *w)
{
    sk_req *r = w->r;
    sk_node *n = w->n;
    kp_FetchRequest *req = r->body;
    kp_FetchResponse *resp = r->resp;
    int64_t budget = req->max_bytes > 0 ? req->max_bytes : 0;
    int64_t total = 0;
    bool any_error = false, need_disk = false, need_objs = false, first_data = true;
    int flat = 0;
    /* r->arena holds only what one evaluation builds (h_fetch moved the
     * request and the skeleton to w->keep). */
    sk_arena_reset(r->arena);
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        kp_FetchResponse_FetchableTopicResponse *tr = &resp->responses.v[i];
        sk_topic *t = sk_req_topic(r, 13, ft->topic, &ft->topic_id);
        bool denied = !sk_authz_topic(r, t, ft->topic, sk_authz_op(r));
        for (int32_t j = 0; j < tr->partitions.n; j++, flat++) {
            kp_FetchRequest_FetchPartition *fp = &ft->partitions.v[j];
            kp_FetchResponse_PartitionData *pd = &tr->partitions.v[j];
            struct disk *d = &w->disk[flat];
            pd->partition_index = fp->partition;
            pd->records = (kc_records){NULL, 0, 0, NULL, NULL};
            pd->error_code = 0;
            if (denied) {
                pd->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
                pd->high_watermark = pd->last_stable_offset = pd->log_start_offset = -1;
                any_error = true;
                continue;
            }
            sk_part *p = sk_part_get(t, fp->partition);
            if (p && !sk_part_serving(p) && sk_proxy_serves(n, r->conn->zone, p)) {
                int64_t limit = fp->partition_max_bytes > 0 ? fp->partition_max_bytes : 0;
                if (budget - total < limit)
                    limit = budget - total;
                pd->high_watermark = pd->last_stable_offset = pd->log_start_offset = -1;
                int64_t got = 0;
                switch (eval_proxied(w, p, fp, pd, d, limit, first_data, &got)) {
                case PE_DATA:
                    total += got;
                    first_data = false;
                    break;
                case PE_ERROR:
                    any_error = true;
                    break;
                case PE_READ:
                    need_objs = true;
                    break;
                default:
                    break;
                }
                continue;
            }
            if (!sk_part_serving(p)) {
                /* Not here (any more): the client refreshes its metadata. */
                pd->error_code = p   ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER
                                 : t ? SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION
                                     : sk_req_topic_unknown(r, 13);
                pd->high_watermark = pd->last_stable_offset = pd->log_start_offset = -1;
                any_error = true;
                continue;
            }
            pd->high_watermark = p->hw;
            /* read_committed reads up to the last stable offset. */
            int64_t end = sk_txidx_lso(&p->txidx, p->hw);
            pd->last_stable_offset = end;
            if (req->isolation_level != 1)
                end = p->hw;
            else
                pd->aborted_transactions.n = 0;
            pd->log_start_offset = p->log_start;
            int16_t ee = check_epoch(p, fp->current_leader_epoch);
            if (ee) {
                pd->error_code = ee;
                any_error = true;
                continue;
            }
            int64_t off = fp->fetch_offset;
            if (off < p->log_start || off > p->next_offset) {
                pd->error_code = SK_KAFKA_OFFSET_OUT_OF_RANGE;
                any_error = true;
                continue;
            }
            if (off >= end)
                continue;
            if (req->isolation_level == 1)
                aborted_list(r, p, off, end, pd);
            int64_t limit = fp->partition_max_bytes > 0 ? fp->partition_max_bytes : 0;
            if (budget - total < limit)
                limit = budget - total;
            if (limit <= 0 && !first_data)
                continue;
            /* Storage results first: they hold exactly the old batches. */
            if (d->have && d->err == 0 && d->len > 0 && off >= d->first_base && off < d->end) {
                kc_records rec;
                int64_t dlen = disk_records(r, d, end, &rec);
                if (dlen == 0 || (!first_data && dlen > limit))
                    continue;
                pd->records = rec;
                total += dlen;
                first_data = false;
                continue;
            }
            kc_bytes found[MAX_SEGS];
            sk_ref *owners[MAX_SEGS];
            int64_t bytes;
            bool miss;
            int ns = sk_part_cached(p, off, end, limit > 0 ? limit : 1, found, owners, MAX_SEGS,
                                    &bytes, &miss);
            if (miss) {
                if (w->disk_tried && d->have && d->err != 0) {
                    /* Storage (the WAL's volume or the object store) failed:
                     * a retriable error, not an empty answer that would look
                     * like the end of the log. */
                    pd->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
                    any_error = true;
                    continue;
                }
                if (!sk_part_view_ready(n, p))
                    continue; /* parked: woken when the view holds it */
                const sk_obj_loc *hint = p->obj_hint;
                if (!w->disk_tried && !d->from_objs && hint && off >= hint->start &&
                    off <= hint->end) {
                    /* A consumer catching up reads the same object range
                     * fetch after fetch: no need to look it up again. */
                    d->from_objs = true;
                    d->via_hint = true;
                    d->have = false;
                    d->loc = *hint;
                    d->offset = off;
                    d->max_bytes = limit > 0 ? limit : 1;
                    d->id = p->topic->id;
                    d->part = p->index;
                    d->stream = p->stream;
                    need_objs = true;
                    continue;
                }
                if (!w->disk_tried) {
                    disk_release(d); /* here: the reader thread must not */
                    d->wanted = true;
                    d->have = false;
                    d->offset = off;
                    d->max_bytes = limit > 0 ? limit : 1;
                    d->id = p->topic->id;
                    d->part = p->index;
                    d->stream = p->stream;
                    need_disk = true;
                }
                continue;
            }
            if (ns == 0)
                continue;
            /* KIP-74: only the first partition with data may exceed the
             * limits, by its first batch. */
            if (!first_data && bytes > limit)
                continue;
            kc_bytes *segs = sk_arena_calloc(r->arena, (size_t)ns, sizeof *segs);
            sk_ref **refs = sk_arena_calloc(r->arena, (size_t)ns, sizeof *refs);
            if (!segs)
                continue;
            memcpy(segs, found, (size_t)ns * sizeof *segs);
            if (refs)
                memcpy(refs, owners, (size_t)ns * sizeof *refs);
            pd->records = (kc_records){NULL, (int32_t)bytes, ns, segs, refs};
            total += bytes;
            first_data = false;
        }
    }
    if (need_objs && !need_disk) {
        w->job_running = true;
        start_object_reads(w);
        return;
    }
    if (need_disk) {
        w->disk_tried = true;
        w->job_running = true;
        if (sk_node_read_job(n, disk_work, disk_done, w) == 0)
            return;
        w->job_running = false;
    }
    bool enough = total >= (int64_t)req->min_bytes;
    if (enough || any_error || req->max_wait_ms <= 0 || w->shutdown || n->stopping ||
        r->conn->closed) {
        w->finished = true;
        unpark(w);
        n->n_fetched_bytes += (uint64_t)total;
        sk_fetch_hints(r);
        /* Last before the answer: it drops partitions of a session's answer,
         * after which responses no longer mirror req->topics entry for entry. */
        sk_fetch_session_answer(r, &w->session);
        sk_req_respond(r);
        return;
    }
    /* Park until a watermark moves or max_wait passes. */
    flat = 0;
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        sk_topic *t = sk_req_topic(r, 13, ft->topic, &ft->topic_id);
        for (int32_t j = 0; j < ft->partitions.n; j++) {
            sk_part *p = sk_part_get(t, ft->partitions.v[j].partition);
            if (p && sk_part_add_waiter(p, &w->base) == 0)
                w->regs[w->nregs++] = p;
        }
    }
    w->parked = true;
    /* Armed again at every park: a wake that finds too little unparks, and
     * unparking takes the timer off. */
    if (!w->timer)
        w->timer = event_new(n->base, -1, 0, timer_cb, w);
    if (!w->timer) {
        w->shutdown = true; /* no timer to end the wait: answer now */
        unpark(w);
        fetch_eval(w);
        return;
    }
    int64_t ms = w->deadline - sk_mono_ms();
    if (ms < 0)
        ms = 0;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(w->timer, &tv);
}

void h_fetch(sk_req *r)
{
    kp_FetchRequest *req = r->body;
    kp_FetchResponse *resp = r->resp;
    sk_node *n = r->node;
    /* An incremental request now lists its session's partitions (in the
     * request's arena, kept below); a session error is answered at once. */
    sk_fetch_session fs;
    int serr = sk_fetch_session_open(r, r->arena, &fs);
    if (serr != 0) {
        resp->error_code = (int16_t)serr;
        sk_req_respond(r);
        return;
    }
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    /* The response skeleton and the request body must outlive the arena
     * resets of each evaluation: move the request into its own arena. */
    sk_arena *keep = r->arena;
    r->arena = sk_arena_new((size_t)r->frame_len * 8 + ((size_t)1 << 30));
    if (!r->arena) {
        r->arena = keep;
        sk_req_close(r, "out of memory");
        return;
    }
    sk_fwait *w = calloc(1, sizeof *w);
    int nflat = 0;
    for (int32_t i = 0; i < nt; i++)
        nflat += req->topics.v[i].partitions.n > 0 ? req->topics.v[i].partitions.n : 0;
    kp_FetchResponse_FetchableTopicResponse *trs =
        kc_new_array(keep, &kp_FetchResponse_FetchableTopicResponse_desc, nt);
    if (!w || (nt && !trs)) {
        free(w);
        sk_arena_destroy(r->arena);
        r->arena = keep;
        sk_req_close(r, "out of memory");
        return;
    }
    w->base = (sk_waiter){fetch_wake, fetch_stop};
    w->r = r;
    w->n = n;
    w->deadline = sk_mono_ms() + (req->max_wait_ms > 0 ? req->max_wait_ms : 0);
    w->nflat = nflat;
    w->disk = calloc((size_t)(nflat ? nflat : 1), sizeof *w->disk);
    w->regs = calloc((size_t)(nflat ? nflat : 1), sizeof *w->regs);
    r->hctx = w;
    r->cleanup = fetch_cleanup;
    /* The decoded request and the skeleton stay in `keep`, freed with the
     * request through cleanup. */
    w->keep = keep;
    w->session = fs;
    if (!w->disk || !w->regs) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        int32_t np = ft->partitions.n > 0 ? ft->partitions.n : 0;
        trs[i].topic = ft->topic;
        trs[i].topic_id = ft->topic_id;
        trs[i].partitions.n = np;
        trs[i].partitions.v = kc_new_array(keep, &kp_FetchResponse_PartitionData_desc, np);
        if (np && !trs[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
    }
    resp->responses.n = nt;
    resp->responses.v = trs;
    fetch_eval(w);
}
