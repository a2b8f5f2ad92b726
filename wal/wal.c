/*
 * wal: record format, group commit, recovery and trimming over wal_storage.
 * docs/wal.md is the reference for the format and the rules below.
 *
 * Group commit state: a FIFO of batches. Each batch is one future write of
 * contiguous bytes into one segment, with the done callbacks of the records
 * it holds. Only the head batch may be in flight (its segment being created,
 * or its bytes being written and synced); appends go into the tail batch
 * while that batch is not yet being written, otherwise into a new one. So
 * everything appended during a write+sync goes out in one next write, except
 * across a segment boundary, where the new segment's bytes form their own
 * batch. A batch's buffer is recycled for the next one (double buffering).
 */
#include "wal.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_crc32c.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

#define WAL_MAGIC "SKIFFWAL"
#define WAL_VERSION 1
#define DEFAULT_SEGMENT_BYTES (64ull << 20)
#define DEFAULT_MAX_PENDING (32ull << 20)
#define READ_CHUNK (1u << 20)

struct waiter {
    wal_done_fn done;
    void *arg;
    wal_lsn lsn;
};

struct batch {
    struct batch *next;
    wal_lsn seg;  /* segment start */
    wal_lsn lsn;  /* LSN of buf[0] */
    bool sealed;  /* its write was issued: nothing more may join it */
    uint8_t *buf;
    size_t len, cap;
    struct waiter *wt;
    size_t nwt, capwt;
};

struct seg {
    wal_lsn start;
    bool on_disk;  /* its file was created durably */
    bool trimmed;  /* logically gone; its file is removed or being removed */
};

struct wal {
    struct event_base *base;
    wal_storage *st;
    wal_opts o;
    struct event *flush_ev;

    struct batch *head, *tail, *spare;
    bool inflight;     /* the head batch is being created or written */
    bool dispatching;  /* running caller callbacks: wal_close is not allowed */
    int64_t commit_start_us;
    size_t pending;    /* bytes appended and not yet durable */
    wal_lsn end;       /* next LSN to assign */
    wal_lsn cur;       /* current segment's start */
    bool cur_fresh;    /* current segment holds no bytes yet (header to place) */
    bool roll;         /* start a new segment at the next append */
    bool failed, closing, destroying;
    int fail_err;

    bool removing;     /* one remove in flight (they go oldest first) */
    bool trim_stalled; /* a remove failed: retry at the next wal_trim */
    wal_lsn trim_upto;

    /* Shared with reader threads. */
    pthread_mutex_t mu; /* guards segs, nsegs, capsegs */
    struct seg *segs;
    size_t nsegs, capsegs;
    _Atomic uint64_t durable;

    wal_stats stats;
};

/* ---- little-endian helpers ---- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* crc32c(lsn LE || type || payload pieces) */
static uint32_t record_crc(wal_lsn lsn, uint8_t type, const struct iovec *iov, int iovcnt)
{
    uint8_t pre[9];
    put64(pre, lsn);
    pre[8] = type;
    uint32_t c = sk_crc32c_extend(0, pre, sizeof pre);
    for (int i = 0; i < iovcnt; i++)
        c = sk_crc32c_extend(c, iov[i].iov_base, iov[i].iov_len);
    return c;
}

/* Segment header: magic[8] version u32 node u32 epoch u64 start u64
 * reserved u32 crc32c(bytes 0..35) u32. */
static void header_encode(uint8_t *h, const wal_opts *o, wal_lsn start)
{
    memcpy(h, WAL_MAGIC, 8);
    put32(h + 8, WAL_VERSION);
    put32(h + 12, o->node_id);
    put64(h + 16, o->owner_epoch);
    put64(h + 24, start);
    put32(h + 32, 0);
    put32(h + 36, sk_crc32c(h, 36));
}

static const char *seg_name(wal_lsn seg, char *buf)
{
    return wal_segment_name(seg, buf, WAL_SEGMENT_NAME_MAX);
}

/* ---- segments table ---- */

static int segs_reserve(wal *w)
{
    if (w->nsegs < w->capsegs)
        return 0;
    size_t ncap = w->capsegs ? w->capsegs * 2 : 16;
    pthread_mutex_lock(&w->mu);
    struct seg *n = realloc(w->segs, ncap * sizeof *n);
    if (n) {
        w->segs = n;
        w->capsegs = ncap;
    }
    pthread_mutex_unlock(&w->mu);
    return n ? 0 : SK_ERR_NOMEM;
}

/* Caller reserved room. */
static void segs_push(wal *w, wal_lsn start, bool on_disk)
{
    pthread_mutex_lock(&w->mu);
    w->segs[w->nsegs++] = (struct seg){.start = start, .on_disk = on_disk};
    pthread_mutex_unlock(&w->mu);
}

static struct seg *segs_find(wal *w, wal_lsn start)
{
    for (size_t i = w->nsegs; i-- > 0;)
        if (w->segs[i].start == start)
            return &w->segs[i];
    return NULL;
}

/* ---- batches ---- */

static struct batch *batch_new(wal *w)
{
    struct batch *b = w->spare;
    if (b) {
        w->spare = NULL;
        return b;
    }
    return calloc(1, sizeof *b);
}

static void batch_free(struct batch *b)
{
    if (!b)
        return;
    free(b->buf);
    free(b->wt);
    free(b);
}

static void batch_recycle(wal *w, struct batch *b)
{
    b->next = NULL;
    b->len = 0;
    b->nwt = 0;
    b->sealed = false;
    if (!w->spare)
        w->spare = b;
    else
        batch_free(b);
}

static int batch_reserve(struct batch *b, size_t bytes, size_t waiters)
{
    if (b->len + bytes > b->cap) {
        size_t ncap = b->cap ? b->cap : 64 * 1024;
        while (ncap < b->len + bytes)
            ncap *= 2;
        uint8_t *n = realloc(b->buf, ncap);
        if (!n)
            return SK_ERR_NOMEM;
        b->buf = n;
        b->cap = ncap;
    }
    if (b->nwt + waiters > b->capwt) {
        size_t ncap = b->capwt ? b->capwt * 2 : 64;
        struct waiter *n = realloc(b->wt, ncap * sizeof *n);
        if (!n)
            return SK_ERR_NOMEM;
        b->wt = n;
        b->capwt = ncap;
    }
    return 0;
}

/* Places one record at the end of b, whose LSN is b->lsn + b->len. */
static void batch_put_record(struct batch *b, uint8_t type, const struct iovec *iov, int iovcnt,
                             uint32_t len)
{
    wal_lsn lsn = b->lsn + b->len;
    uint8_t *p = b->buf + b->len;
    put32(p, len);
    put32(p + 4, record_crc(lsn, type, iov, iovcnt));
    p[8] = type;
    p += WAL_RECORD_HEADER;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len)
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    b->len += WAL_RECORD_HEADER + (size_t)len;
}

/* ---- completion and failure ---- */

static void run_waiters(wal *w, struct batch *b, int err)
{
    w->dispatching = true;
    for (size_t i = 0; i < b->nwt; i++)
        if (b->wt[i].done)
            b->wt[i].done(b->wt[i].arg, err, b->wt[i].lsn);
    w->dispatching = false;
}

/* Nothing staged may ever be acknowledged once a write or sync failed: the
 * file's state is then unknown. Every waiter hears the error, in LSN order. */
static void wal_fail(wal *w, int err)
{
    if (!w->failed)
        SK_ERROR("wal", "WAL failed (%s): %zu bytes after LSN %llu will not be acknowledged",
                 sk_err_name(err), w->pending, (unsigned long long)atomic_load(&w->durable));
    w->failed = true;
    if (!w->fail_err)
        w->fail_err = err;
    struct batch *b = w->head;
    w->head = w->tail = NULL;
    w->pending = 0;
    while (b) {
        struct batch *n = b->next;
        run_waiters(w, b, err);
        batch_free(b);
        b = n;
    }
}

static void kick(wal *w);
static void trim_next(wal *w);

static void write_done(void *arg, int err)
{
    wal *w = arg;
    struct batch *b = w->head;
    w->inflight = false;
    if (err) {
        wal_fail(w, err);
        return;
    }
    w->head = b->next;
    if (!w->head)
        w->tail = NULL;
    atomic_store(&w->durable, b->lsn + b->len);
    w->pending -= b->len;
    w->stats.commits++;
    w->stats.bytes_written += b->len;
    w->stats.last_commit_us = sk_mono_us() - w->commit_start_us;
    /* The next commit goes out before the callbacks run: latency first. */
    kick(w);
    run_waiters(w, b, 0);
    batch_recycle(w, b);
    trim_next(w);
}

static void issue_write(wal *w)
{
    struct batch *b = w->head;
    b->sealed = true;
    w->commit_start_us = sk_mono_us();
    struct iovec iov = {.iov_base = b->buf, .iov_len = b->len};
    w->st->ops->write(w->st, b->seg, b->lsn - b->seg, &iov, 1, true, write_done, w);
}

static void create_done(void *arg, int err)
{
    wal *w = arg;
    if (err) {
        w->inflight = false;
        wal_fail(w, err);
        return;
    }
    pthread_mutex_lock(&w->mu);
    struct seg *s = segs_find(w, w->head->seg);
    if (s)
        s->on_disk = true;
    pthread_mutex_unlock(&w->mu);
    w->stats.segments++;
    issue_write(w);
    trim_next(w);
}

/* Starts the head batch when nothing is in flight. */
static void kick(wal *w)
{
    if (w->inflight || w->failed || w->destroying || !w->head)
        return;
    struct batch *b = w->head;
    w->inflight = true;
    struct seg *s = segs_find(w, b->seg);
    if (s && !s->on_disk) {
        /* The batch stays open while its file is created: appends made
         * meanwhile join this first write. */
        uint64_t hint = w->o.no_preallocate ? 0 : w->o.segment_bytes;
        w->st->ops->create(w->st, b->seg, hint, create_done, w);
        return;
    }
    issue_write(w);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    kick(arg);
}

/* ---- append ---- */

int wal_appendv(wal *w, uint8_t type, const struct iovec *iov, int iovcnt, wal_done_fn done,
                void *arg, wal_lsn *lsn)
{
    if (w->closing)
        return SK_ERR_CLOSED;
    if (w->failed)
        return SK_ERR_IO;
    if (type == 0 || iovcnt < 0)
        return SK_ERR_INVAL;
    uint64_t plen = 0;
    for (int i = 0; i < iovcnt; i++)
        plen += iov[i].iov_len;
    if (plen > WAL_MAX_RECORD)
        return SK_ERR_INVAL;
    size_t need = WAL_RECORD_HEADER + (size_t)plen;
    if (w->pending > 0 && w->pending + need > w->o.max_pending_bytes)
        return SK_ERR_AGAIN;

    bool new_seg = w->nsegs == 0 ||
                   (!w->cur_fresh && (w->roll || w->end - w->cur >= w->o.segment_bytes));
    bool fresh = new_seg || w->cur_fresh;
    wal_lsn seg = new_seg ? w->end : w->cur;

    /* Everything that can fail happens before any state changes. */
    uint8_t *pre = NULL;
    uint32_t prelen = 0;
    int rc;
    if (fresh) {
        if (w->o.preamble) {
            rc = w->o.preamble(w->o.preamble_arg, seg, &pre, &prelen);
            if (rc)
                return rc;
            if (prelen > WAL_MAX_RECORD) {
                SK_ERROR("wal", "preamble of %u bytes is over the record bound", prelen);
                free(pre);
                return SK_ERR_INVAL;
            }
        }
        need += WAL_SEGMENT_HEADER + WAL_RECORD_HEADER + prelen;
        if (w->pending > 0 && w->pending + need > w->o.max_pending_bytes) {
            free(pre);
            return SK_ERR_AGAIN;
        }
    }
    struct batch *b = w->tail;
    bool nb = !b || b->sealed || b->seg != seg;
    if (nb && !(b = batch_new(w)))
        rc = SK_ERR_NOMEM;
    else
        rc = batch_reserve(b, need, 1);
    if (!rc && new_seg)
        rc = segs_reserve(w);
    if (rc) {
        if (nb && b)
            batch_recycle(w, b);
        free(pre);
        return rc;
    }

    if (nb) {
        b->seg = seg;
        b->lsn = w->end;
        if (w->tail)
            w->tail->next = b;
        else
            w->head = b;
        w->tail = b;
    }
    if (new_seg) {
        segs_push(w, seg, false);
        w->cur = seg;
    }
    if (fresh) {
        w->roll = false; /* a segment that starts now already is the new one */
        header_encode(b->buf + b->len, &w->o, seg);
        b->len += WAL_SEGMENT_HEADER;
        struct iovec piov = {.iov_base = pre, .iov_len = prelen};
        batch_put_record(b, WAL_T_PREAMBLE, &piov, 1, prelen);
        free(pre);
        w->cur_fresh = false;
    }
    wal_lsn at = b->lsn + b->len;
    batch_put_record(b, type, iov, iovcnt, (uint32_t)plen);
    b->wt[b->nwt++] = (struct waiter){.done = done, .arg = arg, .lsn = at};
    w->end = b->lsn + b->len;
    w->pending += need;
    w->stats.appends++;
    if (lsn)
        *lsn = at;
    /* Deferred to the end of this loop iteration, so that the appends of the
     * current callbacks share the write. */
    if (!w->inflight)
        event_active(w->flush_ev, EV_TIMEOUT, 1);
    return 0;
}

int wal_append(wal *w, uint8_t type, const void *payload, uint32_t len, wal_done_fn done,
               void *arg, wal_lsn *lsn)
{
    struct iovec iov = {.iov_base = (void *)payload, .iov_len = len};
    return wal_appendv(w, type, &iov, 1, done, arg, lsn);
}

void wal_roll(wal *w)
{
    w->roll = true;
}

/* ---- trimming ---- */

static void remove_done(void *arg, int err)
{
    wal *w = arg;
    w->removing = false;
    if (err) {
        char name[WAL_SEGMENT_NAME_MAX];
        SK_WARN("wal", "cannot remove trimmed segment %s (%s); retrying at the next trim",
                seg_name(w->segs[0].start, name), sk_err_name(err));
        w->trim_stalled = true;
        return;
    }
    pthread_mutex_lock(&w->mu);
    memmove(&w->segs[0], &w->segs[1], (w->nsegs - 1) * sizeof *w->segs);
    w->nsegs--;
    pthread_mutex_unlock(&w->mu);
    w->stats.segments_removed++;
    w->stats.segments--;
    trim_next(w);
}

/* Removes segs[0] when it lies wholly below trim_upto and the next file
 * exists: the newest file on disk always carries the end of the LSN space,
 * so recovery never restarts the LSNs lower. One removal at a time, oldest
 * first, so that a crash leaves no hole in the sequence. */
static void trim_next(wal *w)
{
    if (w->removing || w->trim_stalled || w->destroying || w->nsegs < 2)
        return;
    if (!(w->segs[1].start <= w->trim_upto && w->segs[1].on_disk))
        return;
    if (!w->segs[0].trimmed) {
        pthread_mutex_lock(&w->mu);
        w->segs[0].trimmed = true;
        pthread_mutex_unlock(&w->mu);
    }
    w->removing = true;
    w->st->ops->remove(w->st, w->segs[0].start, remove_done, w);
}

void wal_trim(wal *w, wal_lsn upto)
{
    wal_lsn durable = atomic_load(&w->durable);
    if (upto > durable)
        upto = durable;
    if (upto > w->trim_upto)
        w->trim_upto = upto;
    w->trim_stalled = false;
    if (!w->closing)
        trim_next(w);
}

/* ---- getters ---- */

wal_lsn wal_end_lsn(const wal *w)
{
    return w->end;
}

wal_lsn wal_durable_lsn(const wal *w)
{
    return atomic_load(&((wal *)w)->durable);
}

wal_lsn wal_start_lsn(const wal *w)
{
    for (size_t i = 0; i < w->nsegs; i++)
        if (!w->segs[i].trimmed)
            return w->segs[i].start;
    return w->end;
}

size_t wal_pending_bytes(const wal *w)
{
    return w->pending;
}

bool wal_failed(const wal *w)
{
    return w->failed;
}

void wal_get_stats(const wal *w, wal_stats *st)
{
    *st = w->stats;
}

int wal_segments_snapshot(wal *w, wal_lsn **starts, size_t *n)
{
    pthread_mutex_lock(&w->mu);
    size_t cnt = 0;
    wal_lsn *v = malloc((w->nsegs ? w->nsegs : 1) * sizeof *v);
    if (v)
        for (size_t i = 0; i < w->nsegs; i++)
            if (!w->segs[i].trimmed)
                v[cnt++] = w->segs[i].start;
    pthread_mutex_unlock(&w->mu);
    if (!v)
        return SK_ERR_NOMEM;
    *starts = v;
    *n = cnt;
    return 0;
}

/* ---- reads (any thread) ---- */

int wal_read_record(wal *w, wal_lsn lsn, uint8_t *type, void *buf, uint32_t cap, uint32_t *len)
{
    wal_lsn durable = atomic_load(&w->durable);
    if (lsn + WAL_RECORD_HEADER > durable)
        return SK_ERR_INVAL;
    wal_lsn seg = 0;
    int rc = SK_ERR_NOENT;
    pthread_mutex_lock(&w->mu);
    for (size_t i = w->nsegs; i-- > 0;) {
        if (w->segs[i].start <= lsn) {
            if (!w->segs[i].trimmed) {
                seg = w->segs[i].start;
                rc = 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (rc)
        return rc;
    if (lsn < seg + WAL_SEGMENT_HEADER)
        return SK_ERR_CORRUPT;
    uint8_t h[WAL_RECORD_HEADER];
    size_t got;
    rc = w->st->ops->pread(w->st, seg, lsn - seg, h, sizeof h, &got);
    if (rc)
        return rc;
    if (got < sizeof h)
        return SK_ERR_CORRUPT;
    uint32_t plen = get32(h);
    if (h[8] == 0 || plen > WAL_MAX_RECORD || lsn + WAL_RECORD_HEADER + plen > durable)
        return SK_ERR_CORRUPT;
    *type = h[8];
    *len = plen;
    if (plen > cap)
        return SK_ERR_NOMEM;
    rc = w->st->ops->pread(w->st, seg, lsn - seg + WAL_RECORD_HEADER, buf, plen, &got);
    if (rc)
        return rc;
    struct iovec iov = {.iov_base = buf, .iov_len = plen};
    if (got < plen || record_crc(lsn, h[8], &iov, 1) != get32(h + 4))
        return SK_ERR_CORRUPT;
    return 0;
}

/* ---- recovery ---- */

/* A window over one segment file for sequential record parsing. */
struct reader {
    wal_storage *st;
    wal_lsn seg;
    uint8_t *buf;
    size_t cap;
    uint64_t boff; /* file offset of buf[0] */
    size_t blen;
};

/* Makes [off, off+n) available at *p. Returns 0, 1 when the file ends
 * first, or an error. */
static int reader_need(struct reader *r, uint64_t off, size_t n, const uint8_t **p)
{
    if (off >= r->boff && off + n <= r->boff + r->blen) {
        *p = r->buf + (off - r->boff);
        return 0;
    }
    size_t want = n > READ_CHUNK ? n : READ_CHUNK;
    if (want > r->cap) {
        uint8_t *nb = realloc(r->buf, want);
        if (!nb)
            return SK_ERR_NOMEM;
        r->buf = nb;
        r->cap = want;
    }
    size_t got;
    int rc = r->st->ops->pread(r->st, r->seg, off, r->buf, want, &got);
    if (rc)
        return rc;
    r->boff = off;
    r->blen = got;
    if (got < n)
        return 1;
    *p = r->buf;
    return 0;
}

enum { REC_OK, REC_END, REC_TORN, REC_BAD };

/* Parses the record at file offset off. On REC_OK fills type, payload, len;
 * otherwise *why says what is wrong. Negative on a storage error. */
static int parse_record(struct reader *r, uint64_t off, uint8_t *type, const uint8_t **payload,
                        uint32_t *len, const char **why)
{
    const uint8_t *h;
    int rc = reader_need(r, off, WAL_RECORD_HEADER, &h);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        bool zeros = true;
        for (size_t i = off - r->boff; i < r->blen; i++)
            zeros = zeros && r->buf[i] == 0;
        *why = zeros ? "end of data" : "truncated record header";
        return zeros ? REC_END : REC_TORN;
    }
    uint32_t plen = get32(h), crc = get32(h + 4);
    uint8_t t = h[8];
    if (plen == 0 && crc == 0 && t == 0) {
        *why = "zero fill";
        return REC_END;
    }
    if (t == 0) {
        *why = "record type 0";
        return REC_BAD;
    }
    if (plen > WAL_MAX_RECORD) {
        *why = "record length over the bound";
        return REC_BAD;
    }
    const uint8_t *p;
    rc = reader_need(r, off, WAL_RECORD_HEADER + (size_t)plen, &p);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        *why = "truncated record";
        return REC_TORN;
    }
    struct iovec iov = {.iov_base = (void *)(p + WAL_RECORD_HEADER), .iov_len = plen};
    if (record_crc(r->seg + off, t, &iov, 1) != crc) {
        *why = "CRC mismatch";
        return REC_BAD;
    }
    *type = t;
    *payload = p + WAL_RECORD_HEADER;
    *len = plen;
    return REC_OK;
}

enum { HDR_OK, HDR_TORN };

static int check_header(struct reader *r, uint64_t fsize, char *why, size_t whylen)
{
    char name[WAL_SEGMENT_NAME_MAX];
    if (fsize < WAL_SEGMENT_HEADER)
        return HDR_TORN;
    const uint8_t *h;
    int rc = reader_need(r, 0, WAL_SEGMENT_HEADER, &h);
    if (rc < 0)
        return rc;
    if (rc == 1 || sk_crc32c(h, 36) != get32(h + 36))
        return HDR_TORN;
    const char *bad = NULL;
    if (memcmp(h, WAL_MAGIC, 8) != 0)
        bad = "bad magic";
    else if (get32(h + 8) != WAL_VERSION)
        bad = "unknown format version";
    else if (get64(h + 24) != r->seg)
        bad = "start LSN differs from the file name";
    if (bad) {
        snprintf(why, whylen, "WAL segment %s: %s in its header", seg_name(r->seg, name), bad);
        return SK_ERR_CORRUPT;
    }
    return HDR_OK;
}

struct recovery {
    wal *w;
    wal_lsn replay_from;
    wal_replay_fn replay;
    void *arg;
    char *why;
    size_t whylen;
};

/* Scans segment seg. For an earlier segment the records must fill it
 * exactly up to `limit` (the next segment's offset); the last one
 * (limit == 0) ends at its first record that is not valid. *end receives
 * the file offset after the last valid record. */
static int scan_segment(struct recovery *rc_, struct reader *r, uint64_t limit, uint64_t *end,
                        const char **stop)
{
    char name[WAL_SEGMENT_NAME_MAX];
    bool last = limit == 0;
    uint64_t off = WAL_SEGMENT_HEADER;
    for (;;) {
        if (!last && off == limit)
            break;
        uint8_t type;
        const uint8_t *payload;
        uint32_t len;
        const char *reason = NULL;
        int res = parse_record(r, off, &type, &payload, &len, &reason);
        if (res < 0) {
            snprintf(rc_->why, rc_->whylen, "WAL segment %s: read failed at offset %llu: %s",
                     seg_name(r->seg, name), (unsigned long long)off, sk_err_name(res));
            return res;
        }
        if (res != REC_OK) {
            if (last) {
                *stop = res == REC_END ? NULL : reason;
                break;
            }
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s: %s at offset %llu (LSN %llu); the segment must run to "
                     "offset %llu where the next one starts",
                     seg_name(r->seg, name), reason, (unsigned long long)off,
                     (unsigned long long)(r->seg + off), (unsigned long long)limit);
            return SK_ERR_CORRUPT;
        }
        uint64_t next = off + WAL_RECORD_HEADER + len;
        if (!last && next > limit) {
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s: record at offset %llu runs past offset %llu where the "
                     "next segment starts",
                     seg_name(r->seg, name), (unsigned long long)off, (unsigned long long)limit);
            return SK_ERR_CORRUPT;
        }
        if (off == WAL_SEGMENT_HEADER && type != WAL_T_PREAMBLE) {
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s: first record (offset %llu) is of type %u, not a preamble",
                     seg_name(r->seg, name), (unsigned long long)off, type);
            return SK_ERR_CORRUPT;
        }
        wal_lsn lsn = r->seg + off;
        if (lsn >= rc_->replay_from && rc_->replay) {
            int e = rc_->replay(rc_->arg, lsn, type, payload, len);
            if (e) {
                snprintf(rc_->why, rc_->whylen, "WAL replay stopped at LSN %llu: %s",
                         (unsigned long long)lsn, sk_err_name(e));
                return e;
            }
        }
        off = next;
    }
    *end = off;
    return 0;
}

static int recover(struct recovery *rc_)
{
    wal *w = rc_->w;
    wal_storage *st = w->st;
    char name[WAL_SEGMENT_NAME_MAX];
    uint64_t *starts = NULL;
    size_t n = 0;
    int rc = st->ops->list(st, &starts, &n);
    if (rc) {
        snprintf(rc_->why, rc_->whylen, "cannot list WAL segments: %s", sk_err_name(rc));
        return rc;
    }
    struct reader r = {.st = st};
    for (size_t i = 0; i < n && !rc; i++) {
        bool last = i + 1 == n;
        r.seg = starts[i];
        r.blen = 0;
        r.boff = 0;
        if ((rc = segs_reserve(w)) != 0)
            break;
        segs_push(w, starts[i], true);
        uint64_t fsize;
        rc = st->ops->size(st, starts[i], &fsize);
        if (rc) {
            snprintf(rc_->why, rc_->whylen, "WAL segment %s: cannot stat: %s",
                     seg_name(starts[i], name), sk_err_name(rc));
            break;
        }
        if (!last && starts[i + 1] - starts[i] < WAL_SEGMENT_HEADER + WAL_RECORD_HEADER) {
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s: the next segment starts before its preamble ends",
                     seg_name(starts[i], name));
            rc = SK_ERR_CORRUPT;
            break;
        }
        int h = check_header(&r, fsize, rc_->why, rc_->whylen);
        if (h < 0) {
            rc = h;
            break;
        }
        uint64_t end = 0;
        const char *stop = NULL; /* why the last segment ends, unless zeros or EOF */
        if (h == HDR_OK) {
            rc = scan_segment(rc_, &r, last ? 0 : starts[i + 1] - starts[i], &end, &stop);
            if (rc)
                break;
        } else if (!last) {
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s: missing or damaged header (file of %llu bytes)",
                     seg_name(starts[i], name), (unsigned long long)fsize);
            rc = SK_ERR_CORRUPT;
            break;
        }
        if (!last)
            continue;
        w->cur = starts[i];
        if (end <= WAL_SEGMENT_HEADER) {
            /* No complete preamble: the segment's first write never finished
             * (which also means every earlier one did). Start it over. */
            if (fsize > 0)
                SK_WARN("wal", "segment %s has no complete header and preamble; reusing it",
                        seg_name(starts[i], name));
            rc = fsize > 0 ? st->ops->truncate(st, starts[i], 0) : 0;
            w->end = starts[i];
            w->cur_fresh = true;
        } else {
            if (fsize > end) {
                rc = st->ops->truncate(st, starts[i], end);
                sk_log(stop ? SK_LOG_WARN : SK_LOG_INFO, "wal",
                       "segment %s: log ends at offset %llu (%s); cut %llu bytes after it",
                       seg_name(starts[i], name), (unsigned long long)end,
                       stop ? stop : "zeros", (unsigned long long)(fsize - end));
            }
            w->end = starts[i] + end;
            w->roll = true;
        }
        if (rc)
            snprintf(rc_->why, rc_->whylen, "WAL segment %s: cannot truncate: %s",
                     seg_name(starts[i], name), sk_err_name(rc));
    }
    free(r.buf);
    free(starts);
    w->stats.segments = w->nsegs;
    atomic_store(&w->durable, w->end);
    return rc;
}

/* ---- open / close ---- */

static void wal_free(wal *w)
{
    w->destroying = true;
    if (w->st)
        w->st->ops->destroy(w->st);
    /* Storage callbacks ran inside destroy; whatever is still staged can
     * never be written now. */
    if (w->head)
        wal_fail(w, SK_ERR_CLOSED);
    if (w->flush_ev)
        event_free(w->flush_ev);
    batch_free(w->spare);
    free(w->segs);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

wal *wal_open(struct event_base *base, wal_storage *st, const wal_opts *o, wal_lsn replay_from,
              wal_replay_fn replay, void *arg, int *err, char *why, size_t whylen)
{
    wal *w = calloc(1, sizeof *w);
    if (!w) {
        st->ops->destroy(st);
        *err = SK_ERR_NOMEM;
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->base = base;
    w->st = st;
    w->o = *o;
    if (!w->o.segment_bytes)
        w->o.segment_bytes = DEFAULT_SEGMENT_BYTES;
    if (!w->o.max_pending_bytes)
        w->o.max_pending_bytes = DEFAULT_MAX_PENDING;
    w->flush_ev = event_new(base, -1, 0, flush_cb, w);
    if (!w->flush_ev) {
        *err = SK_ERR_NOMEM;
        snprintf(why, whylen, "cannot create the WAL flush event");
        wal_free(w);
        return NULL;
    }
    struct recovery rc_ = {.w = w, .replay_from = replay_from, .replay = replay, .arg = arg,
                           .why = why, .whylen = whylen};
    int rc = recover(&rc_);
    if (rc) {
        *err = rc;
        wal_free(w);
        return NULL;
    }
    SK_INFO("wal", "opened on %s: %zu segments, LSN %llu to %llu", st->ops->name, w->nsegs,
            (unsigned long long)wal_start_lsn(w), (unsigned long long)w->end);
    *err = 0;
    return w;
}

void wal_close(wal *w)
{
    if (!w)
        return;
    if (w->dispatching) {
        SK_ERROR("wal", "wal_close called from a WAL done callback");
        abort();
    }
    w->closing = true;
    kick(w);
    while (w->inflight || w->removing || (w->head && !w->failed)) {
        if (event_base_loop(w->base, EVLOOP_ONCE) != 0) {
            SK_ERROR("wal", "wal_close cannot run the event loop; unsynced data is dropped");
            break;
        }
    }
    wal_free(w);
}
