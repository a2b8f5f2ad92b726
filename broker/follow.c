#include "follow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmeta.h"
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
#include "sk_time.h"
#include "store.h"
#include "tier.h"

#define POLL_WAIT_MS 5000
#define RPC_TIMEOUT_MS 5000
#define PREFETCH_BYTES (1 << 20)
#define TAIL_MAX (4 << 20)
#define POLL_MAX_PARTS 1024

/* One followed partition. */
typedef struct fpart {
    kc_uuid id;
    int32_t part;
    bool known;
    sk_follow_marks m;
    int64_t want_ms; /* when consumers last waited at its end (0: never) */
    int64_t want_from;
    bool reading;  /* a poll's batches are being read into the tail */
    uint8_t *tail; /* whole batches [tail_first, tail_end) */
    int64_t tail_len, tail_first, tail_end;
} fpart;

/* Polls of one main: a session whose partition list the main keeps, so
 * that a poll that changes nothing names no partition. */
typedef struct fmain {
    int32_t main;
    int64_t session;
    fpart **list; /* the session's partitions, in the main's order */
    int n;
    uint64_t gen; /* lists sent so far */
    bool synced;  /* the main has list `gen` */
    int inflight; /* polls: one, or two while a new list replaces the old */
} fmain;

struct sk_follows {
    sk_node *n;
    sk_cluster *c;
    rpc_client *rpc;
    sk_map *parts; /* (topic id, part) -> fpart */
    sk_map *mains; /* main node -> fmain */
    bool closing;
    sk_follow_stats st;
};

/* A read (or one partition's share of a poll's answer): the Follow, then
 * the batches it located being read. */
typedef struct fcall {
    sk_follows *f;
    kc_uuid id;
    int32_t part;
    int64_t offset, max_bytes;
    bool poll;             /* a poll's share: marks to take once read */
    sk_follow_marks marks; /* ... these */
    sk_follow_cb cb;
    sk_tier_ref_cb obj_cb;
    void *arg;
    /* the reading job */
    sk_batch_loc *locs;
    int nl;
    uint8_t *buf;
    int64_t len, first, end;
    int err;
} fcall;

/* A poll in flight to one main: its session's list as it was sent. */
typedef struct fpoll {
    sk_follows *f;
    fmain *m;
    uint64_t gen; /* of the list it polls */
    int n;
    fpart **parts;
} fpoll;

/* Partitions stay in their main's poll this long after consumers last
 * waited at their end, so that the list rarely changes. */
#define KEEP_MS 5000

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

static void maybe_poll(sk_follows *f, int32_t main);

static bool take_marks(sk_follows *f, fpart *fp, const sk_follow_marks *m)
{
    bool grew = !fp->known || m->hw > fp->m.hw;
    fp->known = true;
    fp->m = *m;
    if (fp->tail && (fp->tail_end <= m->log_start || fp->tail_first > m->hw))
        tail_drop(f, fp);
    (void)f;
    return grew;
}

static int32_t main_of(sk_follows *f, const kc_uuid *id, int32_t part)
{
    sk_part *p = sk_part_get(sk_topic_get_id(f->n, id), part);
    const cm_model *m = sk_cluster_model(f->c);
    if (!p || p->main_node < 0 || !cm_node_get(m, p->main_node))
        return -1;
    return p->main_node;
}

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
    /* The marks move once the tail holds what they announce: the fetches
     * woken then find the batches there. */
    fpart *fp = fpart_of(f, &k->id, k->part, false);
    if (fp) {
        fp->reading = false;
        if (k->err == 0 && k->len > 0) {
            tail_put(f, fp, k->buf, k->len, k->first, k->end);
            k->buf = NULL;
        }
        take_marks(f, fp, &k->marks);
    }
    sk_part *p = sk_part_get(sk_topic_get_id(f->n, &k->id), k->part);
    if (p)
        sk_part_wake(p);
    int32_t main = main_of(f, &k->id, k->part);
    fcall_free(k);
    if (main >= 0)
        maybe_poll(f, main);
}

static void start_read(sk_follows *f, fcall *k)
{
    if (sk_node_read_job(f->n, read_work, read_done, k) != 0) {
        k->err = SK_ERR_CLOSED;
        read_done(k);
    }
}

/* Copies the batches an answer located; false when it located none. */
static bool take_locs(sk_follows *f, fcall *k, const kr_FollowResponse_Partition *a)
{
    int nl = a->batches.n > 0 ? a->batches.n : 0;
    if (nl == 0)
        return false;
    k->locs = calloc((size_t)nl, sizeof *k->locs);
    if (!k->locs)
        return false;
    for (int i = 0; i < nl; i++) {
        const kr_FollowResponse_Batch *b = &a->batches.v[i];
        k->locs[i] = (sk_batch_loc){b->base_offset, b->base_offset + b->last_offset_delta, -1,
                                    b->log, (wal_lsn)b->lsn, (uint32_t)b->length};
    }
    k->nl = nl;
    f->st.located_batches += (uint64_t)nl;
    return true;
}

/* ---- reads ---- */

static void read_answered(fcall *k, int err, const kr_FollowResponse_Partition *a,
                          const kr_FollowResponse_Object *o)
{
    sk_follows *f = k->f;
    if (err) {
        f->st.errors++;
        k->cb(k->arg, err, NULL, 0, -1, -1);
        fcall_free(k);
        return;
    }
    fpart *fp = fpart_of(f, &k->id, k->part, true);
    sk_follow_marks m = {a->high_watermark, a->log_start_offset, a->leader_epoch};
    if (fp && take_marks(f, fp, &m)) {
        sk_part *p = sk_part_get(sk_topic_get_id(f->n, &k->id), k->part);
        if (p)
            sk_part_wake(p);
    }
    sk_part *p = sk_part_get(sk_topic_get_id(f->n, &k->id), k->part);
    if (o && o->key.len > 0 && p) {
        sk_obj_loc loc;
        memset(&loc, 0, sizeof loc);
        snprintf(loc.key, sizeof loc.key, "%.*s", (int)o->key.len, o->key.p);
        loc.obj_size = (uint64_t)o->object_size;
        loc.start = o->range_start;
        loc.end = o->range_end;
        loc.max_ts = o->range_max_timestamp;
        loc.size = (uint64_t)o->range_size;
        f->st.object_reads++;
        sk_tier_read_ref(f->n->tier, &loc, p->stream, k->offset, (size_t)k->max_bytes, k->obj_cb,
                         k->arg);
        fcall_free(k);
        return;
    }
    if (take_locs(f, k, a)) {
        start_read(f, k);
        return;
    }
    /* Nothing located (the watermark is below the offset now): the caller
     * looks again with the new marks. */
    k->cb(k->arg, 0, NULL, 0, k->offset, k->offset);
    fcall_free(k);
}

static void read_rpc_done(void *arg, int err, const void *resp)
{
    fcall *k = arg;
    if (k->f->closing) {
        fcall_free(k);
        return;
    }
    const kr_FollowResponse *r = resp;
    if (err == 0 && r->error_code)
        err = r->error_code;
    else if (err == 0 && (r->partitions.n != 1 || r->partitions.v[0].index != 0))
        err = SK_ERR_PARSE;
    else if (err == 0 && r->partitions.v[0].error_code)
        err = r->partitions.v[0].error_code;
    const kr_FollowResponse_Object *o =
        err == 0 && r->objects.n == 1 && r->objects.v[0].index == 0 ? &r->objects.v[0] : NULL;
    read_answered(k, err, err ? NULL : &r->partitions.v[0], o);
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
                    sk_follow_cb cb, sk_tier_ref_cb obj_cb, void *arg)
{
    fcall *k = calloc(1, sizeof *k);
    if (!k) {
        cb(arg, SK_ERR_NOMEM, NULL, 0, -1, -1);
        return;
    }
    *k = (fcall){.f = f, .id = p->topic->id, .part = p->index, .offset = offset,
                 .max_bytes = max_bytes > 0 ? max_bytes : 1, .cb = cb, .obj_cb = obj_cb,
                 .arg = arg};
    int32_t main = main_of(f, &k->id, k->part);
    int rc = f->closing ? SK_ERR_CLOSED : main < 0 ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : 0;
    if (rc == 0) {
        kr_FollowRequest_Partition rp = {k->id, k->part, k->offset, (int32_t)k->max_bytes};
        kr_FollowRequest req = {f->n->cfg->node_id, 0, 0, 0, {1, &rp}};
        rc = rpc_call(f->rpc, main, KR_FOLLOW, 0, &req, RPC_TIMEOUT_MS, read_rpc_done, k)
                 ? SK_ERR_IO
                 : 0;
    }
    if (rc == 0) {
        f->st.reads++;
        return;
    }
    /* Answer from the loop, never inside this call. */
    k->err = rc;
    if (sk_node_read_job(f->n, nothing, fail_later, k) != 0)
        fail_later(k);
}

/* ---- polls: one in flight per main, for every partition waited on ---- */

static void poll_share(sk_follows *f, fpart *fp, const kr_FollowResponse_Partition *a)
{
    sk_part *p = sk_part_get(sk_topic_get_id(f->n, &fp->id), fp->part);
    if (a->error_code) {
        f->st.errors++;
        fp->want_ms = 0; /* out of the list; the fetches see the error when they look again */
        if (p)
            sk_part_wake(p);
        return;
    }
    sk_follow_marks m = {a->high_watermark, a->log_start_offset, a->leader_epoch};
    fcall *k = calloc(1, sizeof *k);
    if (k) {
        *k = (fcall){.f = f, .id = fp->id, .part = fp->part, .offset = fp->m.hw, .poll = true,
                     .marks = m};
        if (take_locs(f, k, a)) {
            fp->reading = true;
            start_read(f, k);
            return;
        }
        fcall_free(k);
    }
    if (take_marks(f, fp, &m) && p)
        sk_part_wake(p);
}

static void poll_rpc_done(void *arg, int err, const void *resp)
{
    fpoll *q = arg;
    sk_follows *f = q->f;
    if (f->closing) {
        free(q->parts);
        free(q);
        return;
    }
    fmain *fm = q->m;
    fm->inflight--;
    bool current = q->gen == fm->gen;
    const kr_FollowResponse *r = resp;
    if (err == 0 && r->error_code)
        err = r->error_code;
    if (err) {
        /* The main may not have the list (it restarted, or the poll that
         * carried it was lost): the next poll sends it. The waiting
         * fetches time out and ask again. */
        if (current)
            fm->synced = false;
        f->st.errors++;
    } else {
        if (current)
            fm->synced = true;
        for (int32_t i = 0; i < r->partitions.n; i++) {
            const kr_FollowResponse_Partition *a = &r->partitions.v[i];
            if (a->index >= 0 && a->index < q->n)
                poll_share(f, q->parts[a->index], a);
        }
    }
    int32_t main = fm->main;
    free(q->parts);
    free(q);
    if ((!err || err == SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND) && fm->inflight == 0)
        maybe_poll(f, main);
}

static fmain *fmain_of(sk_follows *f, int32_t main)
{
    fmain *fm = sk_map_get(f->mains, &main, sizeof main);
    if (fm)
        return fm;
    fm = calloc(1, sizeof *fm);
    if (!fm)
        return NULL;
    fm->main = main;
    kc_uuid u;
    sk_random_uuid(&u);
    memcpy(&fm->session, u.b, sizeof fm->session);
    fm->session |= 1; /* never 0: 0 means no session */
    if (sk_map_put(f->mains, &main, sizeof main, fm) != 0) {
        free(fm);
        return NULL;
    }
    return fm;
}

/* The partitions of `main` consumers waited on lately, into out (at most
 * POLL_MAX_PARTS); their count. */
static int wanted_of(sk_follows *f, int32_t main, fpart **out)
{
    int64_t now = sk_mono_ms();
    int n = 0;
    size_t it = 0;
    void *v;
    while (n < POLL_MAX_PARTS && sk_map_next(f->parts, &it, NULL, NULL, &v)) {
        fpart *fp = v;
        if (fp->want_ms && now - fp->want_ms < KEEP_MS && main_of(f, &fp->id, fp->part) == main)
            out[n++] = fp;
    }
    return n;
}

static bool same_list(const fmain *fm, fpart **l, int n)
{
    if (fm->n != n)
        return false;
    for (int i = 0; i < n; i++)
        if (fm->list[i] != l[i])
            return false;
    return true;
}

/* Starts a poll of `main` for its partitions waited on, unless one is in
 * flight for the same list. A new list goes at once: the main ends the
 * poll it replaces. */
static void maybe_poll(sk_follows *f, int32_t main)
{
    fmain *fm = f->closing ? NULL : fmain_of(f, main);
    if (!fm || fm->inflight >= 2)
        return;
    fpoll *q = calloc(1, sizeof *q);
    fpart **want = calloc(POLL_MAX_PARTS, sizeof *want);
    kr_FollowRequest_Partition *rp = calloc(POLL_MAX_PARTS, sizeof *rp);
    int n = q && want && rp ? wanted_of(f, main, want) : 0;
    if (n == 0)
        goto out;
    bool full = !fm->synced || !same_list(fm, want, n);
    if (fm->inflight > 0 && same_list(fm, want, n))
        goto out; /* the poll in flight covers them */
    if (full) {
        free(fm->list);
        fm->list = malloc((size_t)n * sizeof *fm->list);
        if (!fm->list) {
            fm->n = 0;
            goto out;
        }
        memcpy(fm->list, want, (size_t)n * sizeof *want);
        fm->n = n;
        fm->gen++;
        fm->synced = false;
        for (int i = 0; i < n; i++) {
            fpart *fp = want[i];
            rp[i] = (kr_FollowRequest_Partition){fp->id, fp->part,
                                                 fp->known ? fp->m.hw : fp->want_from,
                                                 PREFETCH_BYTES};
        }
    }
    *q = (fpoll){f, fm, fm->gen, n, want};
    want = NULL;
    kr_FollowRequest req = {f->n->cfg->node_id, POLL_WAIT_MS, f->n->cfg->proxy_fetch_min_wait_ms,
                            fm->session, {full ? n : 0, rp}};
    if (rpc_call(f->rpc, main, KR_FOLLOW, 0, &req, RPC_TIMEOUT_MS + POLL_WAIT_MS, poll_rpc_done,
                 q) != 0) {
        fm->synced = false;
        goto out;
    }
    fm->inflight++;
    f->st.polls++;
    free(rp);
    return;
out:
    free(rp);
    free(want);
    if (q)
        free(q->parts);
    free(q);
}

void sk_follow_poll(sk_follows *f, sk_part *p, int64_t from)
{
    fpart *fp = fpart_of(f, &p->topic->id, p->index, true);
    if (!fp || f->closing)
        return;
    if (!fp->want_ms || sk_mono_ms() - fp->want_ms >= KEEP_MS)
        fp->want_from = from;
    fp->want_ms = sk_mono_ms();
    int32_t main = main_of(f, &fp->id, fp->part);
    if (main >= 0)
        maybe_poll(f, main);
}

bool sk_follow_marks_of(sk_follows *f, const sk_part *p, sk_follow_marks *out)
{
    fpart *fp = fpart_of(f, &p->topic->id, p->index, false);
    if (!fp || !fp->known)
        return false;
    *out = fp->m;
    return true;
}

/* ---- life ---- */

sk_follows *sk_follows_new(sk_node *n, sk_cluster *c, rpc_client *rpc)
{
    sk_follows *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    *f = (sk_follows){.n = n, .c = c, .rpc = rpc};
    f->parts = sk_map_new();
    f->mains = sk_map_new();
    if (!f->parts || !f->mains) {
        sk_map_destroy(f->parts);
        sk_map_destroy(f->mains);
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
    it = 0;
    while (sk_map_next(f->mains, &it, NULL, NULL, &v)) {
        fmain *fm = v;
        free(fm->list);
        free(fm);
    }
    sk_map_destroy(f->mains); /* (the polls ended with the RPC client) */
    free(f);
}

void sk_follow_get_stats(const sk_follows *f, sk_follow_stats *st)
{
    *st = f->st;
}
