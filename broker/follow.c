#include "follow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmodel.h"
#include "config.h"
#include "kbatch.h"
#include "krpc.h"
#include "meta.h"
#include "node.h"
#include "peer.h"
#include "plog.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "store.h"
#include "tier.h"

#define POLL_WAIT_MS 1000
#define RPC_TIMEOUT_MS 5000
#define PREFETCH_BYTES (1 << 20)
#define TAIL_MAX (4 << 20)

/* One followed partition. */
typedef struct fpart {
    kc_uuid id;
    int32_t part;
    bool known;
    sk_follow_marks m;
    bool polling;
    uint8_t *tail; /* whole batches [tail_first, tail_end) */
    int64_t tail_len, tail_first, tail_end;
} fpart;

struct sk_follows {
    sk_node *n;
    sk_cluster *c;
    rpc_client *rpc;
    sk_map *parts; /* (topic id, part) -> fpart */
    bool closing;
    sk_follow_stats st;
};

/* A Follow in flight, then the batches it located being read. */
typedef struct fcall {
    sk_follows *f;
    kc_uuid id;
    int32_t part;
    int64_t offset, max_bytes;
    bool poll;
    sk_follow_cb cb;
    void *arg;
    /* the reading job */
    sk_batch_loc *locs;
    int nl;
    uint8_t *buf;
    int64_t len, first, end;
    int err;
} fcall;

static void pkey(uint8_t out[20], const kc_uuid *id, int32_t part)
{
    memcpy(out, id->b, 16);
    memcpy(out + 16, &part, 4);
}

static fpart *fpart_of(sk_follows *f, const kc_uuid *id, int32_t part, bool create)
{
    uint8_t k[20];
    pkey(k, id, part);
    fpart *fp = sk_map_get(f->parts, k, sizeof k);
    if (fp || !create)
        return fp;
    fp = calloc(1, sizeof *fp);
    if (!fp)
        return NULL;
    fp->id = *id;
    fp->part = part;
    if (sk_map_put(f->parts, k, sizeof k, fp) != 0) {
        free(fp);
        return NULL;
    }
    return fp;
}

static sk_part *part_of(sk_follows *f, const fcall *k)
{
    return sk_part_get(sk_topic_get_id(f->n, &k->id), k->part);
}

static void fcall_free(fcall *k)
{
    free(k->locs);
    free(k->buf);
    free(k);
}

/* ---- the tail ---- */

static void tail_drop(sk_follows *f, fpart *fp)
{
    f->st.tail_bytes -= (uint64_t)fp->tail_len;
    free(fp->tail);
    fp->tail = NULL;
    fp->tail_len = 0;
    fp->tail_first = fp->tail_end = 0;
}

/* Batches [first, end) read from the log: the tail grows by them when they
 * follow it, else they replace it. */
static void tail_put(sk_follows *f, fpart *fp, uint8_t *buf, int64_t len, int64_t first,
                     int64_t end)
{
    if (fp->tail && first <= fp->tail_end && first >= fp->tail_first && end > fp->tail_end &&
        fp->tail_len + len <= TAIL_MAX) {
        /* Skip what the tail already has. */
        int64_t pos = 0;
        kb_header h;
        while (pos < len && kb_parse_header(buf + pos, (size_t)(len - pos), &h) == 0 &&
               h.base_offset + h.last_offset_delta < fp->tail_end)
            pos += (int64_t)h.batch_length + KB_LOG_OVERHEAD;
        uint8_t *nt = realloc(fp->tail, (size_t)(fp->tail_len + len - pos));
        if (nt) {
            memcpy(nt + fp->tail_len, buf + pos, (size_t)(len - pos));
            fp->tail = nt;
            fp->tail_len += len - pos;
            fp->tail_end = end;
            f->st.tail_bytes += (uint64_t)(len - pos);
            free(buf);
            return;
        }
    }
    tail_drop(f, fp);
    fp->tail = buf;
    fp->tail_len = len;
    fp->tail_first = first;
    fp->tail_end = end;
    f->st.tail_bytes += (uint64_t)len;
}

bool sk_follow_tail(sk_follows *f, const sk_part *p, int64_t offset, int64_t max_bytes,
                    const uint8_t **buf, int64_t *len)
{
    fpart *fp = fpart_of(f, &p->topic->id, p->index, false);
    if (!fp || !fp->tail || offset < fp->tail_first || offset >= fp->tail_end)
        return false;
    int64_t pos = 0, start = -1, stop = 0;
    kb_header h;
    while (pos < fp->tail_len &&
           kb_parse_header(fp->tail + pos, (size_t)(fp->tail_len - pos), &h) == 0) {
        int64_t next = pos + (int64_t)h.batch_length + KB_LOG_OVERHEAD;
        if (start < 0 && h.base_offset + h.last_offset_delta >= offset)
            start = pos;
        if (start >= 0) {
            if (stop > start && next - start > max_bytes)
                break;
            stop = next;
        }
        pos = next;
    }
    if (start < 0 || stop <= start)
        return false;
    *buf = fp->tail + start;
    *len = stop - start;
    f->st.tail_hits++;
    return true;
}

/* ---- reading located batches (a reader thread) ---- */

static void read_work(void *arg)
{
    fcall *k = arg;
    sk_node *n = k->f->n;
    int64_t total = 0;
    for (int i = 0; i < k->nl; i++)
        total += k->locs[i].len;
    k->buf = malloc(total ? (size_t)total : 1);
    uint8_t *tmp = NULL;
    uint32_t cap = 0;
    k->err = k->buf ? 0 : SK_ERR_NOMEM;
    k->first = k->nl ? k->locs[0].base : k->offset;
    k->end = k->first;
    for (int i = 0; i < k->nl && k->err == 0; i++) {
        uint32_t need = k->locs[i].len + SK_DATA_HEADER;
        if (need > cap) {
            free(tmp);
            tmp = malloc(need);
            cap = tmp ? need : 0;
            if (!tmp) {
                k->err = SK_ERR_NOMEM;
                break;
            }
        }
        uint8_t type;
        uint32_t len;
        int rc = sk_node_read_batch(n, &k->locs[i], &type, tmp, cap, &len);
        if (rc != 0 || type != SK_WAL_DATA || len != need) {
            /* Trimmed meanwhile (uploaded): what came before is good. */
            if (i == 0)
                k->err = rc ? rc : SK_ERR_CORRUPT;
            break;
        }
        memcpy(k->buf + k->len, tmp + SK_DATA_HEADER, k->locs[i].len);
        k->len += k->locs[i].len;
        k->end = k->locs[i].last + 1;
    }
    free(tmp);
}

static void poll_again(sk_follows *f, fpart *fp);

static void read_done(void *arg)
{
    fcall *k = arg;
    sk_follows *f = k->f;
    if (f->closing) {
        fcall_free(k);
        return;
    }
    f->st.read_bytes += (uint64_t)k->len;
    if (!k->poll) {
        uint8_t *buf = k->err ? NULL : k->buf;
        if (!k->err)
            k->buf = NULL;
        k->cb(k->arg, k->err, buf, (size_t)k->len, k->first, k->end);
        fcall_free(k);
        return;
    }
    fpart *fp = fpart_of(f, &k->id, k->part, false);
    if (fp && k->err == 0 && k->len > 0) {
        tail_put(f, fp, k->buf, k->len, k->first, k->end);
        k->buf = NULL;
    }
    if (fp)
        poll_again(f, fp);
    sk_part *p = part_of(f, k);
    if (p)
        sk_part_wake(p);
    fcall_free(k);
}

static void start_read(sk_follows *f, fcall *k)
{
    if (sk_node_read_job(f->n, read_work, read_done, k) != 0) {
        k->err = SK_ERR_CLOSED;
        read_done(k);
    }
}

/* ---- the RPC ---- */

static int send(sk_follows *f, fcall *k, int32_t wait_ms);

/* The answer moves the watermarks; true when the high watermark grew. */
static bool take_marks(sk_follows *f, const fcall *k, const kr_FollowResponse_Partition *a)
{
    fpart *fp = fpart_of(f, &k->id, k->part, true);
    if (!fp)
        return false;
    bool grew = !fp->known || a->high_watermark > fp->m.hw;
    fp->known = true;
    fp->m = (sk_follow_marks){a->high_watermark, a->log_start_offset, a->leader_epoch};
    if (fp->tail && (fp->tail_end <= a->log_start_offset || fp->tail_first > a->high_watermark))
        tail_drop(f, fp);
    return grew;
}

static void answered(fcall *k, int err, const kr_FollowResponse_Partition *a)
{
    sk_follows *f = k->f;
    fpart *fp = fpart_of(f, &k->id, k->part, false);
    if (k->poll && fp)
        fp->polling = false;
    if (err) {
        f->st.errors++;
        if (!k->poll) {
            k->cb(k->arg, err, NULL, 0, -1, -1);
            fcall_free(k);
            return;
        }
        /* The parked fetches time out and poll again. */
        sk_part *p = part_of(f, k);
        if (p && err > 0)
            sk_part_wake(p);
        fcall_free(k);
        return;
    }
    bool grew = take_marks(f, k, a);
    sk_part *p = part_of(f, k);
    if (a->object_key.len > 0 && !k->poll && p) {
        sk_obj_loc loc;
        memset(&loc, 0, sizeof loc);
        snprintf(loc.key, sizeof loc.key, "%.*s", (int)a->object_key.len, a->object_key.p);
        loc.obj_size = (uint64_t)a->object_size;
        loc.start = a->range_start;
        loc.end = a->range_end;
        loc.max_ts = a->range_max_timestamp;
        loc.size = (uint64_t)a->range_size;
        f->st.object_reads++;
        sk_tier_read(f->n->tier, &loc, p->stream, k->offset, (size_t)k->max_bytes, k->cb, k->arg);
        fcall_free(k);
        return;
    }
    int nl = a->batches.n > 0 ? a->batches.n : 0;
    if (nl > 0) {
        k->locs = calloc((size_t)nl, sizeof *k->locs);
        if (k->locs) {
            for (int i = 0; i < nl; i++) {
                const kr_FollowResponse_Batch *b = &a->batches.v[i];
                k->locs[i] = (sk_batch_loc){b->base_offset, b->last_offset, -1, b->log,
                                            (wal_lsn)b->lsn, (uint32_t)b->length};
            }
            k->nl = nl;
            f->st.located_batches += (uint64_t)nl;
            start_read(f, k);
            return;
        }
    }
    if (!k->poll) {
        /* Nothing located (the watermark is below the offset now): no
         * batches, and the caller looks again with the new marks. */
        k->cb(k->arg, 0, NULL, 0, k->offset, k->offset);
        fcall_free(k);
        return;
    }
    if (grew && p)
        sk_part_wake(p);
    else if (fp)
        poll_again(f, fp);
    fcall_free(k);
}

static void rpc_done(void *arg, int err, const void *resp)
{
    fcall *k = arg;
    if (k->f->closing) {
        fcall_free(k);
        return;
    }
    const kr_FollowResponse *r = resp;
    if (err == 0 && r->error_code)
        err = r->error_code;
    else if (err == 0 && (r->partitions.n != 1 || r->partitions.v[0].partition != k->part))
        err = SK_ERR_PARSE;
    else if (err == 0 && r->partitions.v[0].error_code)
        err = r->partitions.v[0].error_code;
    answered(k, err, err ? NULL : &r->partitions.v[0]);
}

static int send(sk_follows *f, fcall *k, int32_t wait_ms)
{
    sk_part *p = part_of(f, k);
    const cm_model *m = sk_cluster_model(f->c);
    if (!p || p->main_node < 0 || !cm_node_get(m, p->main_node))
        return SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    kr_FollowRequest_Partition rp = {k->id, k->part, k->offset, (int32_t)k->max_bytes};
    kr_FollowRequest req = {f->n->cfg->node_id, wait_ms, {1, &rp}};
    int rc = rpc_call(f->rpc, p->main_node, KR_FOLLOW, 0, &req, RPC_TIMEOUT_MS + wait_ms,
                      rpc_done, k);
    return rc ? SK_ERR_IO : 0;
}

/* ---- polls and reads ---- */

static void start_poll(sk_follows *f, fpart *fp, int64_t from)
{
    fcall *k = calloc(1, sizeof *k);
    if (!k)
        return;
    *k = (fcall){.f = f, .id = fp->id, .part = fp->part, .offset = from,
                 .max_bytes = PREFETCH_BYTES, .poll = true};
    fp->polling = true;
    f->st.polls++;
    if (send(f, k, POLL_WAIT_MS) != 0) {
        fp->polling = false;
        fcall_free(k);
    }
}

/* A poll ended: poll on while consumers wait. */
static void poll_again(sk_follows *f, fpart *fp)
{
    sk_part *p = sk_part_get(sk_topic_get_id(f->n, &fp->id), fp->part);
    if (p && p->nwaiters > 0 && !fp->polling && fp->known && !f->closing)
        start_poll(f, fp, fp->m.hw);
}

void sk_follow_poll(sk_follows *f, sk_part *p, int64_t from)
{
    fpart *fp = fpart_of(f, &p->topic->id, p->index, true);
    if (!fp || fp->polling || f->closing)
        return;
    start_poll(f, fp, from);
}

bool sk_follow_marks_of(sk_follows *f, const sk_part *p, sk_follow_marks *out)
{
    fpart *fp = fpart_of(f, &p->topic->id, p->index, false);
    if (!fp || !fp->known)
        return false;
    *out = fp->m;
    return true;
}

static void fail_later(void *arg)
{
    fcall *k = arg;
    k->cb(k->arg, k->err, NULL, 0, -1, -1);
    fcall_free(k);
}

static void nothing(void *arg)
{
    (void)arg;
}

void sk_follow_read(sk_follows *f, sk_part *p, int64_t offset, int64_t max_bytes,
                    sk_follow_cb cb, void *arg)
{
    fcall *k = calloc(1, sizeof *k);
    if (!k) {
        cb(arg, SK_ERR_NOMEM, NULL, 0, -1, -1);
        return;
    }
    *k = (fcall){.f = f, .id = p->topic->id, .part = p->index, .offset = offset,
                 .max_bytes = max_bytes > 0 ? max_bytes : 1, .cb = cb, .arg = arg};
    int rc = f->closing ? SK_ERR_CLOSED : send(f, k, 0);
    if (rc == 0) {
        f->st.reads++;
        return;
    }
    /* Answer from the loop, never inside this call. */
    k->err = rc;
    if (sk_node_read_job(f->n, nothing, fail_later, k) != 0)
        fail_later(k);
}

/* ---- life ---- */

sk_follows *sk_follows_new(sk_node *n, sk_cluster *c, rpc_client *rpc)
{
    sk_follows *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    *f = (sk_follows){.n = n, .c = c, .rpc = rpc};
    f->parts = sk_map_new();
    if (!f->parts) {
        free(f);
        return NULL;
    }
    return f;
}

void sk_follows_close(sk_follows *f)
{
    if (f)
        f->closing = true;
}

void sk_follows_destroy(sk_follows *f)
{
    if (!f)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(f->parts, &it, NULL, NULL, &v)) {
        fpart *fp = v;
        free(fp->tail);
        free(fp);
    }
    sk_map_destroy(f->parts);
    free(f);
}

void sk_follow_get_stats(const sk_follows *f, sk_follow_stats *st)
{
    *st = f->st;
}
