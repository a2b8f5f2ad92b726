/*
 * wal: record format, group commit, recovery and trimming over wal_storage.
 * docs/wal.md is the reference for the format and the rules below.
 *
 * Group commit state: a FIFO of batches. Each batch is one future write of
 * contiguous bytes into one segment, with the done callbacks of the records
 * it holds. Appends go into the tail batch while that batch is not yet being
 * written, otherwise into a new one. Up to the backend's pipeline depth
 * (ops->max_writes; 1 for a local disk) batches are written and synced at
 * once, in order; while they are, everything appended goes out in one next
 * write, except across a segment boundary, where the new segment's bytes
 * form their own batch. A batch is written only once every batch before it
 * is in its segment or durable, and a segment's file is created only once
 * every batch before it is durable, so a crash can tear only the last
 * segment (a hole there reads as the end of the log). Batches complete, and
 * acknowledge their records, in LSN order whatever order their writes land
 * in. A batch's buffer is recycled for the next one (double buffering).
 *
 * Ownership state: the claimed epoch, and the lease window: appends are
 * written, and their writes acknowledged, only while the boot clock is below
 * lease_until, which each successful renewal moves to (its start + lease).
 * A write that completes outside the window stays at the head, landed but
 * unacknowledged, until a renewal succeeds (then it is acknowledged) or
 * finds a newer owner (then everything fails with SK_ERR_FENCED).
 */
#include "wal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "sk_crc32c.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

#define WAL_MAGIC "SKIFFWAL"
#define WAL_VERSION 1
#define DEFAULT_SEGMENT_BYTES (64ull << 20)
#define DEFAULT_MAX_PENDING (32ull << 20)
#define DEFAULT_LEASE_MS 10000
#define DEFAULT_IO_TIMEOUT_MS 30000
#define READ_CHUNK (1u << 20)
#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 500

/* Owner file: magic[8] version u32 node u32 epoch u64 instance[16] boot[16]
 * renewed_ms i64 lease_ms i64 flags u32 pid u32 renewals u64 host[64]
 * reserved u32 crc32c(bytes 0..155) u32. */
#define OWNER_MAGIC "SKIFFOWN"
#define OWNER_VERSION 1
#define OWNER_REC 160
#define OWNER_RELEASED 1u
/* A new owner waits the old lease plus this fraction of it before it reads
 * the WAL: room for clock-rate differences and writes still on the wire. */
#define TAKEOVER_MARGIN_DIV 5

struct waiter {
    wal_done_fn done;
    void *arg;
    wal_lsn lsn;
};

struct batch {
    struct batch *next;
    wal_lsn seg;  /* segment start */
    wal_lsn lsn;  /* LSN of buf[0] */
    int state;    /* B_*: past B_OPEN nothing more may join it */
    int64_t issued_us; /* when its write was issued */
    /* buf lies in mem (WAL_WRITE_ROOM-aligned, cap bytes) at the offset its
     * first byte has in its block of the segment, so that the backend may
     * write it in place with direct I/O (wal_storage.h, write_placed). */
    uint8_t *mem, *buf;
    size_t len, cap;
    struct waiter *wt;
    size_t nwt, capwt;
};

enum {
    B_OPEN,   /* taking appends */
    B_FLYING, /* being written and synced */
    B_LANDED, /* durable, waiting for the batches before it or for the lease */
    B_AGAIN,  /* its write failed transiently: it goes out again after a backoff */
};

/* A write in flight: the callback's argument (it outlives the batch, which a
 * failure may free while the write is out). */
struct flight {
    struct wal *w;
    struct batch *b;
    uint64_t gen; /* the WAL's gen at issue: stale once it changed */
    bool used;
};

#define MAX_FLYING 8
/* Most batches kept for reuse: one per write in flight, the open one and the
 * one completing. */
#define SPARE_MAX (MAX_FLYING + 2)

struct seg {
    wal_lsn start;
    bool on_disk;  /* its file was created durably */
    bool trimmed;  /* logically gone; its file is removed or being removed */
};

struct owner_rec {
    uint32_t node;
    uint64_t epoch;
    uint8_t instance[16], boot[16];
    int64_t renewed_ms, lease_ms;
    uint32_t flags, pid;
    uint64_t renewals;
    char host[64];
};

struct wal {
    struct event_base *base;
    wal_storage *st;
    wal_opts o;
    struct event *flush_ev;

    struct batch *head, *tail;
    /* Batches done with, kept with their buffers for the next ones
     * (batch_recycle): a fresh buffer costs a page fault per 4 KiB and, as
     * it grows, a copy of what it holds. */
    struct batch *spare;
    int nspare;
    size_t spare_bytes;
    bool creating;     /* the head batch's segment file is being created */
    wal_lsn creating_seg;
    int nflying;       /* batches being written and synced */
    int max_flying;    /* the backend's pipeline depth */
    uint64_t gen;      /* bumped when a failure drops the batches */
    struct flight fl[MAX_FLYING];
    bool dispatching;  /* running caller callbacks: wal_close is not allowed */
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

    /* Transient failures of the head operation: retried after retry_ms. */
    struct event *retry_ev;
    bool retry_wait;
    int retry_ms;
    int64_t trouble_since_us; /* first transient failure of this outage (0: none) */
    int64_t op_start_us;      /* when the create in flight was issued */
    int64_t close_start_us;
    bool gave_up;             /* wal_close stopped retrying */

    /* Ownership and lease. */
    struct owner_rec me;
    uint8_t recbuf[OWNER_REC]; /* the renewal in flight */
    int lock_fd;
    struct event *lease_ev;
    int64_t lease_ms, renew_ms, io_timeout_ms;
    int64_t lease_until_us;    /* boot clock */
    bool renewing;
    int64_t renew_start_us;
    int64_t renew_fail_since_us;
    int64_t renew_warned_us;
    bool lapsed;               /* acknowledgements stopped for want of a lease */
    int64_t ack_deadline_us;   /* the owner's other lease (boot clock; 0: none) */
    bool ack_lapsed;           /* ... ran out: nothing more until it is extended */
    bool fenced;
    bool exclusive;            /* the backend's lock proves us alone: no renewals */
    bool unavailable_logged;

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

/* The lease runs on the boot clock: it keeps counting while the machine is
 * suspended, when a monotonic clock would stop and stretch the lease. */
static int64_t boot_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* crc32c(lsn LE || type || payload pieces) */
/* last_crc, when given, is the CRC of the last piece (wal_appendv_known). */
static uint32_t record_crc(wal_lsn lsn, uint8_t type, const struct iovec *iov, int iovcnt,
                           const uint32_t *last_crc)
{
    uint8_t pre[9];
    put64(pre, lsn);
    pre[8] = type;
    uint32_t c = sk_crc32c_extend(0, pre, sizeof pre);
    int n = last_crc && iovcnt > 0 ? iovcnt - 1 : iovcnt;
    for (int i = 0; i < n; i++)
        c = sk_crc32c_extend(c, iov[i].iov_base, iov[i].iov_len);
    if (n < iovcnt)
        c = sk_crc32c_combine(c, *last_crc, iov[n].iov_len);
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

/* The spare with the largest buffer, so that the open batch rarely grows. */
static struct batch *batch_new(wal *w)
{
    struct batch **best = NULL;
    for (struct batch **pp = &w->spare; *pp; pp = &(*pp)->next)
        if (!best || (*pp)->cap > (*best)->cap)
            best = pp;
    if (!best)
        return calloc(1, sizeof(struct batch));
    struct batch *b = *best;
    *best = b->next;
    b->next = NULL;
    w->nspare--;
    w->spare_bytes -= b->cap;
    return b;
}

static void batch_free(struct batch *b)
{
    if (!b)
        return;
    free(b->mem);
    free(b->wt);
    free(b);
}

/* Keeps b for reuse while the spares stay within SPARE_MAX batches and
 * wal.max.pending.bytes of buffers (what the batches in flight hold at
 * most, so memory stays bounded by configuration); frees it otherwise. */
static void batch_recycle(wal *w, struct batch *b)
{
    b->len = 0;
    b->nwt = 0;
    b->state = B_OPEN;
    if (w->nspare >= SPARE_MAX || w->spare_bytes + b->cap > w->o.max_pending_bytes) {
        batch_free(b);
        return;
    }
    b->next = w->spare;
    w->spare = b;
    w->nspare++;
    w->spare_bytes += b->cap;
}

static void spares_free(wal *w)
{
    while (w->spare) {
        struct batch *b = w->spare;
        w->spare = b->next;
        batch_free(b);
    }
    w->nspare = 0;
    w->spare_bytes = 0;
}

/* Room for `bytes` more in b's buffer (b->seg and b->lsn set), laid out as
 * struct batch says: the block offset before it, whole blocks to its end. */
static int batch_room(wal *w, struct batch *b, size_t bytes)
{
    size_t head = (size_t)((b->lsn - b->seg) % WAL_WRITE_ROOM);
    if (b->len == 0 && b->mem)
        b->buf = b->mem + head; /* a recycled batch, at a new position */
    size_t need = head + b->len + bytes;
    need = (need + WAL_WRITE_ROOM - 1) / WAL_WRITE_ROOM * WAL_WRITE_ROOM;
    if (need <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 64 * 1024;
    while (ncap < need)
        ncap *= 2;
    void *n = NULL;
    if (posix_memalign(&n, WAL_WRITE_ROOM, ncap) != 0)
        return SK_ERR_NOMEM;
    w->stats.buffers_allocated++;
    if (b->len)
        memcpy((uint8_t *)n + head, b->buf, b->len);
    free(b->mem);
    b->mem = n;
    b->buf = b->mem + head;
    b->cap = ncap;
    return 0;
}

static int batch_reserve(wal *w, struct batch *b, size_t bytes, size_t waiters)
{
    if (batch_room(w, b, bytes) != 0)
        return SK_ERR_NOMEM;
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
                             uint32_t len, const uint32_t *last_crc)
{
    wal_lsn lsn = b->lsn + b->len;
    uint8_t *p = b->buf + b->len;
    put32(p, len);
    put32(p + 4, record_crc(lsn, type, iov, iovcnt, last_crc));
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

/* Nothing staged may ever be acknowledged once a write or sync failed
 * permanently: the file's state is then unknown. Every waiter hears the
 * error, in LSN order. */
static void wal_fail(wal *w, int err)
{
    if (!w->failed)
        SK_ERROR("wal", "WAL failed (%s): %zu bytes after LSN %llu will not be acknowledged",
                 sk_err_name(err), w->pending, (unsigned long long)atomic_load(&w->durable));
    w->failed = true;
    if (!w->fail_err)
        w->fail_err = err;
    w->gen++; /* writes still in flight complete into nothing */
    w->retry_wait = false;
    if (w->retry_ev)
        event_del(w->retry_ev);
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
static void issue_renew(wal *w);

static bool ack_lease_ok(const wal *w)
{
    return !w->ack_deadline_us || boot_us() < w->ack_deadline_us;
}

static bool lease_ok(const wal *w)
{
    return !w->fenced && (w->exclusive || boot_us() < w->lease_until_us) && ack_lease_ok(w);
}

/* The lease ran out: log once per lapse, and get a renewal going. Only the
 * owner can extend its other lease (wal_set_ack_deadline). */
static void lease_wait(wal *w)
{
    if (!ack_lease_ok(w)) {
        if (!w->ack_lapsed) {
            w->ack_lapsed = true;
            w->stats.lease_lapses++;
            SK_WARN("wal", "the owner's membership lease ran out: nothing more is written or "
                    "acknowledged until it is renewed (%zu bytes wait)",
                    w->pending);
        }
        return;
    }
    if (!w->lapsed) {
        w->lapsed = true;
        w->stats.lease_lapses++;
        SK_WARN("wal", "lease of owner epoch %llu ran out without renewal: nothing more is "
                "written or acknowledged until it is renewed (%zu bytes wait)",
                (unsigned long long)w->me.epoch, w->pending);
    }
    issue_renew(w);
}

/* Since when the volume is in trouble (0: it is not): a head operation
 * failing transiently or running for long, or renewals failing. */
static int64_t outage_start(const wal *w)
{
    int64_t t = 0;
    if (w->trouble_since_us)
        t = w->trouble_since_us;
    if (w->creating && w->op_start_us && (!t || w->op_start_us < t))
        t = w->op_start_us;
    for (const struct batch *b = w->head; b; b = b->next)
        if (b->state == B_FLYING && (!t || b->issued_us < t))
            t = b->issued_us;
    if (w->renew_fail_since_us && (!t || w->renew_fail_since_us < t))
        t = w->renew_fail_since_us;
    return t;
}

static void check_available(wal *w)
{
    int64_t since = outage_start(w), now = sk_mono_us();
    bool bad = since && now - since >= w->io_timeout_ms * 1000;
    if (bad && !w->unavailable_logged) {
        SK_ERROR("wal", "WAL unavailable: the volume has completed no write or lease renewal for "
                 "%lld ms (wal.io.timeout.ms is %lld); %zu bytes wait, nothing is lost or "
                 "acknowledged meanwhile",
                 (long long)((now - since) / 1000), (long long)w->io_timeout_ms, w->pending);
    }
    w->unavailable_logged = bad;
}

static void trouble_over(wal *w)
{
    if (w->trouble_since_us) {
        int64_t ms = (sk_mono_us() - w->trouble_since_us) / 1000;
        sk_log(w->unavailable_logged ? SK_LOG_ERROR : SK_LOG_INFO, "wal",
               "WAL writes go through again after %lld ms of transient errors", (long long)ms);
    }
    w->trouble_since_us = 0;
    w->retry_ms = RETRY_MIN_MS;
    check_available(w);
}

/* A transient error of the head operation: the same operation goes out
 * again later. False when it must be treated as permanent instead. */
static bool retry_later(wal *w, int err, const char *what)
{
    if (!wal_storage_transient(err) || w->destroying || w->gave_up)
        return false;
    int64_t now = sk_mono_us();
    if (!w->trouble_since_us) {
        w->trouble_since_us = now;
        SK_WARN("wal", "%s of segment %llu failed (%s): retrying; the records stay queued",
                what, (unsigned long long)(w->head ? w->head->seg : 0), sk_err_name(err));
    }
    w->stats.retries++;
    w->retry_wait = true;
    struct timeval tv = {w->retry_ms / 1000, (w->retry_ms % 1000) * 1000};
    event_add(w->retry_ev, &tv);
    w->retry_ms = w->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : w->retry_ms * 2;
    check_available(w);
    return true;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wal *w = arg;
    w->retry_wait = false;
    kick(w);
}

/* Fine below 2 ms, where a local disk's syncs fall (0.2-0.6 ms here). */
static const int64_t commit_bucket_us[WAL_COMMIT_BUCKETS] = {
    100,   250,   500,    750,    1000,   1500,    2000,    5000,
    10000, 25000, 50000, 100000, 250000, 1000000, 5000000, 10000000,
};

int64_t wal_commit_bucket_us(int i)
{
    return commit_bucket_us[i];
}

static void count_in(uint64_t *hist, uint64_t *sum, int64_t us)
{
    int i = 0;
    while (i < WAL_COMMIT_BUCKETS && us > commit_bucket_us[i])
        i++;
    hist[i]++;
    *sum += (uint64_t)(us > 0 ? us : 0);
}

static void count_commit(wal_stats *st, int64_t us)
{
    count_in(st->commit_hist, &st->commit_us_sum, us);
}

/* Inside a write's callback: what the backend says of its time. */
static void count_io(wal *w)
{
    int64_t wait_us, io_us;
    if (!w->st->ops->write_timing || !w->st->ops->write_timing(w->st, &wait_us, &io_us))
        return;
    count_in(w->stats.io_wait_hist, &w->stats.io_wait_us_sum, wait_us);
    count_in(w->stats.io_hist, &w->stats.io_us_sum, io_us);
}

static bool busy(const wal *w)
{
    return w->creating || w->nflying > 0;
}

static void issue_more(wal *w);

/* Acknowledges the landed head batch if the lease allows it now; false when
 * it has to wait for a renewal. */
static bool complete_head(wal *w)
{
    if (!lease_ok(w)) {
        lease_wait(w);
        return false;
    }
    struct batch *b = w->head;
    w->head = b->next;
    if (!w->head)
        w->tail = NULL;
    atomic_store(&w->durable, b->lsn + b->len);
    w->pending -= b->len;
    w->stats.commits++;
    w->stats.bytes_written += b->len;
    w->stats.last_commit_us = sk_mono_us() - b->issued_us;
    count_commit(&w->stats, w->stats.last_commit_us);
    /* The next commit goes out before the callbacks run: latency first. */
    issue_more(w);
    run_waiters(w, b, 0);
    batch_recycle(w, b);
    trim_next(w);
    return true;
}

static bool any_again(const wal *w)
{
    for (const struct batch *b = w->head; b; b = b->next)
        if (b->state == B_AGAIN)
            return true;
    return false;
}

static void write_done(void *arg, int err)
{
    struct flight *f = arg;
    wal *w = f->w;
    struct batch *b = f->b;
    bool stale = f->gen != w->gen;
    f->used = false;
    w->nflying--;
    if (stale)
        return; /* its batch was failed and freed meanwhile */
    if (err) {
        b->state = B_AGAIN;
        if (!retry_later(w, err, "write"))
            wal_fail(w, err);
        return;
    }
    b->state = B_LANDED;
    count_io(w);
    if (w->trouble_since_us && !any_again(w))
        trouble_over(w);
    kick(w);
}

static void issue_write(wal *w, struct batch *b)
{
    struct flight *f = NULL;
    for (int i = 0; i < MAX_FLYING && !f; i++)
        if (!w->fl[i].used)
            f = &w->fl[i];
    *f = (struct flight){.w = w, .b = b, .gen = w->gen, .used = true};
    b->state = B_FLYING;
    b->issued_us = sk_mono_us();
    w->nflying++;
    if (w->st->ops->write_placed) {
        w->st->ops->write_placed(w->st, b->seg, b->lsn - b->seg, b->buf, b->len, write_done, f);
        return;
    }
    struct iovec iov = {.iov_base = b->buf, .iov_len = b->len};
    w->st->ops->write(w->st, b->seg, b->lsn - b->seg, &iov, 1, true, write_done, f);
}

static void create_done(void *arg, int err)
{
    wal *w = arg;
    w->creating = false;
    w->op_start_us = 0;
    if (w->failed)
        return;
    if (err) {
        if (!retry_later(w, err, "create"))
            wal_fail(w, err);
        return;
    }
    if (w->trouble_since_us)
        trouble_over(w);
    pthread_mutex_lock(&w->mu);
    struct seg *s = segs_find(w, w->creating_seg);
    if (s)
        s->on_disk = true;
    pthread_mutex_unlock(&w->mu);
    w->stats.segments++;
    /* The write goes out only within the lease, like any other. */
    kick(w);
    trim_next(w);
}

/* May b go out now? Every batch before it must be in its segment or
 * durable: a write past a hole in an earlier segment could survive a crash
 * that the hole's bytes did not. */
static bool may_issue(const wal *w, const struct batch *b)
{
    for (const struct batch *x = w->head; x != b; x = x->next)
        if (x->seg != b->seg && x->state != B_LANDED)
            return false;
    return true;
}

/* Issues the batches waiting to be written, in order, up to the pipeline
 * depth; the segment's file first when it does not exist yet. */
static void issue_more(wal *w)
{
    if (w->failed || w->destroying || w->retry_wait || w->creating)
        return;
    for (struct batch *b = w->head; b && w->nflying < w->max_flying; b = b->next) {
        if (b->state == B_FLYING || b->state == B_LANDED)
            continue;
        if (!may_issue(w, b))
            return;
        if (!lease_ok(w)) {
            lease_wait(w);
            return;
        }
        struct seg *s = segs_find(w, b->seg);
        if (s && !s->on_disk) {
            if (b != w->head || w->nflying)
                return; /* once everything before it is durable */
            /* The batch stays open while its file is created: appends made
             * meanwhile join this first write. */
            uint64_t hint = w->o.no_preallocate ? 0 : w->o.segment_bytes;
            w->creating = true;
            w->creating_seg = b->seg;
            w->op_start_us = sk_mono_us();
            w->st->ops->create(w->st, b->seg, hint, create_done, w);
            return;
        }
        issue_write(w, b);
    }
}

/* Acknowledges the landed batches at the head, then issues what waits. */
static void kick(wal *w)
{
    if (w->failed || w->destroying)
        return;
    while (w->head && w->head->state == B_LANDED && !w->dispatching)
        if (!complete_head(w) || w->failed || w->destroying)
            return;
    issue_more(w);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    kick(arg);
}

/* ---- lease ---- */

static void owner_encode(uint8_t *p, const struct owner_rec *r)
{
    memset(p, 0, OWNER_REC);
    memcpy(p, OWNER_MAGIC, 8);
    put32(p + 8, OWNER_VERSION);
    put32(p + 12, r->node);
    put64(p + 16, r->epoch);
    memcpy(p + 24, r->instance, 16);
    memcpy(p + 40, r->boot, 16);
    put64(p + 56, (uint64_t)r->renewed_ms);
    put64(p + 64, (uint64_t)r->lease_ms);
    put32(p + 72, r->flags);
    put32(p + 76, r->pid);
    put64(p + 80, r->renewals);
    memcpy(p + 88, r->host, 63);
    put32(p + 156, sk_crc32c(p, 156));
}

static bool owner_decode(const uint8_t *p, size_t len, struct owner_rec *r)
{
    if (len < OWNER_REC || memcmp(p, OWNER_MAGIC, 8) != 0 || get32(p + 8) != OWNER_VERSION ||
        sk_crc32c(p, 156) != get32(p + 156))
        return false;
    r->node = get32(p + 12);
    r->epoch = get64(p + 16);
    memcpy(r->instance, p + 24, 16);
    memcpy(r->boot, p + 40, 16);
    r->renewed_ms = (int64_t)get64(p + 56);
    r->lease_ms = (int64_t)get64(p + 64);
    r->flags = get32(p + 72);
    r->pid = get32(p + 76);
    r->renewals = get64(p + 80);
    memcpy(r->host, p + 88, 63);
    r->host[63] = 0;
    return true;
}

static void renew_done(void *arg, int err)
{
    wal *w = arg;
    w->renewing = false;
    if (w->destroying || w->failed)
        return;
    if (err == SK_ERR_FENCED) {
        SK_ERROR("wal", "owner epoch %llu is fenced: a newer owner took this WAL over; nothing "
                 "more is acknowledged",
                 (unsigned long long)w->me.epoch);
        w->fenced = true;
        wal_fail(w, SK_ERR_FENCED);
        return;
    }
    int64_t now = sk_mono_us();
    if (err) {
        if (!w->renew_fail_since_us)
            w->renew_fail_since_us = now;
        if (now - w->renew_warned_us >= 5000000) {
            w->renew_warned_us = now;
            SK_WARN("wal", "lease renewal of owner epoch %llu failed (%s); %lld ms of lease left",
                    (unsigned long long)w->me.epoch, sk_err_name(err),
                    (long long)((w->lease_until_us - boot_us()) / 1000));
        }
        check_available(w);
        return;
    }
    w->lease_until_us = w->renew_start_us + w->lease_ms * 1000;
    w->renew_fail_since_us = 0;
    if (w->lapsed) {
        w->lapsed = false;
        SK_WARN("wal", "lease of owner epoch %llu renewed: writes and acknowledgements resume",
                (unsigned long long)w->me.epoch);
    }
    check_available(w);
    kick(w);
    trim_next(w);
}

static void issue_renew(wal *w)
{
    if (w->renewing || w->failed || w->destroying)
        return;
    w->renewing = true;
    w->renew_start_us = boot_us();
    w->me.renewed_ms = sk_now_ms();
    w->me.renewals++;
    owner_encode(w->recbuf, &w->me);
    w->st->ops->renew(w->st, w->me.epoch, w->recbuf, OWNER_REC, renew_done, w);
}

int64_t wal_clock_us(void)
{
    return boot_us();
}

void wal_set_ack_deadline(wal *w, int64_t deadline_us)
{
    w->ack_deadline_us = deadline_us;
    if (w->ack_lapsed && ack_lease_ok(w)) {
        w->ack_lapsed = false;
        SK_WARN("wal", "membership lease renewed: writes and acknowledgements resume");
    }
    kick(w);
}

static void lease_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    wal *w = arg;
    check_available(w);
    /* Nobody can take over a WAL whose local lock we hold: renewals would
     * only cost syncs on the commit path. */
    if (!w->exclusive)
        issue_renew(w);
}

/* ---- append ---- */

static int appendv(wal *w, uint8_t type, const struct iovec *iov, int iovcnt,
                   const uint32_t *last_crc, wal_done_fn done, void *arg, wal_lsn *lsn);

int wal_appendv(wal *w, uint8_t type, const struct iovec *iov, int iovcnt, wal_done_fn done,
                void *arg, wal_lsn *lsn)
{
    return appendv(w, type, iov, iovcnt, NULL, done, arg, lsn);
}

int wal_appendv_known(wal *w, uint8_t type, const struct iovec *iov, int iovcnt,
                      uint32_t last_crc, wal_done_fn done, void *arg, wal_lsn *lsn)
{
    return appendv(w, type, iov, iovcnt, &last_crc, done, arg, lsn);
}

static int appendv(wal *w, uint8_t type, const struct iovec *iov, int iovcnt,
                   const uint32_t *last_crc, wal_done_fn done, void *arg, wal_lsn *lsn)
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
    bool nb = !b || b->state != B_OPEN || b->seg != seg;
    if (nb && (b = batch_new(w))) {
        b->seg = seg;
        b->lsn = w->end;
    }
    if (!b)
        rc = SK_ERR_NOMEM;
    else
        rc = batch_reserve(w, b, need, 1);
    if (!rc && new_seg)
        rc = segs_reserve(w);
    if (rc) {
        if (nb && b)
            batch_recycle(w, b);
        free(pre);
        return rc;
    }

    if (nb) {
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
        batch_put_record(b, WAL_T_PREAMBLE, &piov, 1, prelen, NULL);
        free(pre);
        w->cur_fresh = false;
    }
    wal_lsn at = b->lsn + b->len;
    batch_put_record(b, type, iov, iovcnt, (uint32_t)plen, last_crc);
    b->wt[b->nwt++] = (struct waiter){.done = done, .arg = arg, .lsn = at};
    w->end = b->lsn + b->len;
    w->pending += need;
    w->stats.appends++;
    if (lsn)
        *lsn = at;
    /* Deferred to the end of this loop iteration, so that the appends of the
     * current callbacks share the write. */
    if (!w->creating && w->nflying < w->max_flying)
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
    if (w->removing || w->trim_stalled || w->destroying || w->nsegs < 2 || !lease_ok(w))
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

int wal_fail_error(const wal *w)
{
    return w->failed ? w->fail_err : 0;
}

uint64_t wal_owner_epoch(const wal *w)
{
    return w->me.epoch;
}

void wal_get_stats(const wal *w, wal_stats *st)
{
    *st = w->stats;
    st->owner_epoch = w->me.epoch;
    int64_t since = outage_start(w);
    st->outage_ms = since ? (sk_mono_us() - since) / 1000 : 0;
    st->unavailable = since && st->outage_ms >= w->io_timeout_ms;
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

/* The payload length the record header h at lsn declares, or -1 when h cannot
 * be a record's header: type 0, a length over WAL_MAX_RECORD, or a record that
 * would end past `bound`. (Recovery checks the same fields one by one, to say
 * which is wrong.) */
static int64_t record_header_len(const uint8_t *h, wal_lsn lsn, wal_lsn bound)
{
    uint32_t plen = get32(h);
    if (h[8] == 0 || plen > WAL_MAX_RECORD || lsn + WAL_RECORD_HEADER + plen > bound)
        return -1;
    return plen;
}

/* Whether the payload of the record at lsn, whose header is h, matches the
 * header's CRC (which covers the LSN and the type as well). */
static bool record_intact(const uint8_t *h, wal_lsn lsn, const void *payload)
{
    struct iovec iov = {.iov_base = (void *)payload, .iov_len = get32(h)};
    return record_crc(lsn, h[8], &iov, 1, NULL) == get32(h + 4);
}

int wal_read_at(wal_storage *st, wal_lsn seg, wal_lsn lsn, wal_lsn bound, uint8_t *type,
                void *buf, uint32_t cap, uint32_t *len)
{
    if (lsn < seg + WAL_SEGMENT_HEADER)
        return SK_ERR_CORRUPT;
    uint8_t h[WAL_RECORD_HEADER];
    size_t got;
    int rc = st->ops->pread(st, seg, lsn - seg, h, sizeof h, &got);
    if (rc)
        return rc;
    if (got < sizeof h)
        return SK_ERR_CORRUPT;
    int64_t hl = record_header_len(h, lsn, bound);
    if (hl < 0)
        return SK_ERR_CORRUPT;
    uint32_t plen = (uint32_t)hl;
    *type = h[8];
    *len = plen;
    if (plen > cap)
        return SK_ERR_NOMEM;
    rc = st->ops->pread(st, seg, lsn - seg + WAL_RECORD_HEADER, buf, plen, &got);
    if (rc)
        return rc;
    if (got < plen || !record_intact(h, lsn, buf))
        return SK_ERR_CORRUPT;
    return 0;
}

/* The retained segment holding lsn, in *seg; SK_ERR_NOENT when trimmed. */
static int locate_segment(wal *w, wal_lsn lsn, wal_lsn *seg)
{
    int rc = SK_ERR_NOENT;
    pthread_mutex_lock(&w->mu);
    for (size_t i = w->nsegs; i-- > 0;) {
        if (w->segs[i].start <= lsn) {
            if (!w->segs[i].trimmed) {
                *seg = w->segs[i].start;
                rc = 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* The durable LSN now and the segment of a record at lsn below it. */
static int locate_durable(wal *w, wal_lsn lsn, wal_lsn *seg, wal_lsn *durable)
{
    *durable = atomic_load(&w->durable);
    if (lsn + WAL_RECORD_HEADER > *durable)
        return SK_ERR_INVAL;
    return locate_segment(w, lsn, seg);
}

int wal_read_record(wal *w, wal_lsn lsn, uint8_t *type, void *buf, uint32_t cap, uint32_t *len)
{
    wal_lsn seg = 0, durable;
    int rc = locate_durable(w, lsn, &seg, &durable);
    if (rc)
        return rc;
    return wal_read_at(w->st, seg, lsn, durable, type, buf, cap, len);
}

/* ---- sequential reads (wal_scan) ---- */

/* Whether the window holds [lsn, lsn + n) of segment seg. */
static bool scan_holds(const wal_scan *s, wal_lsn seg, wal_lsn lsn, size_t n)
{
    return s->len && s->seg == seg && lsn >= s->base && lsn + n <= s->base + s->len;
}

/* Reads the window from lsn: at least n bytes, up to WAL_SCAN_WINDOW, none
 * at or past `durable` kept. The read covers whole 4 KiB blocks into an
 * aligned buffer, which a backend may serve without the page cache
 * (wal_posix: a WAL written with O_DIRECT). */
#define SCAN_ALIGN 4096u
static int scan_fill(wal *w, wal_scan *s, wal_lsn seg, wal_lsn lsn, size_t n, wal_lsn durable)
{
    size_t want = n > WAL_SCAN_WINDOW ? n : WAL_SCAN_WINDOW;
    if (want > durable - lsn)
        want = (size_t)(durable - lsn);
    if (want < n)
        return SK_ERR_CORRUPT; /* the record would end past the durable LSN */
    uint64_t aoff = (lsn - seg) / SCAN_ALIGN * SCAN_ALIGN;
    size_t lead = (size_t)(lsn - seg - aoff);
    size_t total = (lead + want + SCAN_ALIGN - 1) / SCAN_ALIGN * SCAN_ALIGN;
    s->len = 0;
    if (total > s->cap) {
        void *nb;
        if (posix_memalign(&nb, SCAN_ALIGN, total) != 0)
            return SK_ERR_NOMEM;
        free(s->buf);
        s->buf = nb;
        s->cap = total;
    }
    size_t got;
    int rc = w->st->ops->pread(w->st, seg, aoff, s->buf, total, &got);
    if (rc)
        return rc < 0 ? rc : SK_ERR_IO;
    s->reads++;
    s->seg = seg;
    s->base = seg + aoff;
    s->len = got < durable - s->base ? got : (size_t)(durable - s->base);
    return s->len < lead + n ? SK_ERR_CORRUPT : 0;
}

int wal_scan_record(wal *w, wal_scan *s, wal_lsn lsn, uint8_t *type, const uint8_t **payload,
                    uint32_t *len)
{
    wal_lsn seg = 0, durable;
    int rc = locate_durable(w, lsn, &seg, &durable);
    if (rc)
        return rc;
    if (lsn < seg + WAL_SEGMENT_HEADER)
        return SK_ERR_CORRUPT;
    if (!scan_holds(s, seg, lsn, WAL_RECORD_HEADER) &&
        (rc = scan_fill(w, s, seg, lsn, WAL_RECORD_HEADER, durable)) != 0)
        return rc;
    const uint8_t *h = s->buf + (lsn - s->base);
    int64_t hl = record_header_len(h, lsn, durable);
    if (hl < 0)
        return SK_ERR_CORRUPT;
    uint32_t plen = (uint32_t)hl;
    size_t need = WAL_RECORD_HEADER + (size_t)plen;
    if (!scan_holds(s, seg, lsn, need) && (rc = scan_fill(w, s, seg, lsn, need, durable)) != 0)
        return rc;
    h = s->buf + (lsn - s->base);
    if (!record_intact(h, lsn, h + WAL_RECORD_HEADER))
        return SK_ERR_CORRUPT;
    *type = h[8];
    *payload = h + WAL_RECORD_HEADER;
    *len = plen;
    return 0;
}

void wal_scan_reset(wal_scan *s)
{
    s->len = 0;
}

void wal_scan_free(wal_scan *s)
{
    free(s->buf);
    *s = (wal_scan){0};
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
 * first, or a negative error; *p is NULL unless it returns 0. */
static int reader_need(struct reader *r, uint64_t off, size_t n, const uint8_t **p)
{
    *p = NULL;
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
    if (rc) /* backends return negative errors; 1 must stay "the file ends first" */
        return rc < 0 ? rc : SK_ERR_IO;
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
    if (!record_intact(p, r->seg + off, p + WAL_RECORD_HEADER)) {
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

static void put_record(wal *w);

/* A long recovery keeps the lease, as the loop would: otherwise another
 * node could take over a WAL that is merely being read. The check for a
 * newer epoch comes first, as in every renewal. */
static int renew_during_recovery(struct recovery *rc_)
{
    wal *w = rc_->w;
    int64_t now = boot_us();
    if (w->exclusive || now - w->renew_start_us < w->renew_ms * 1000)
        return 0;
    w->renew_start_us = now;
    uint8_t buf[OWNER_REC];
    size_t got;
    int rc = w->st->ops->owner_read(w->st, w->me.epoch + 1, buf, sizeof buf, &got);
    if (rc == 0) {
        snprintf(rc_->why, rc_->whylen,
                 "another owner (epoch %llu) took the WAL over during recovery",
                 (unsigned long long)w->me.epoch + 1);
        return SK_ERR_FENCED;
    }
    if (rc != SK_ERR_NOENT) {
        snprintf(rc_->why, rc_->whylen, "cannot renew the lease during recovery: %s",
                 sk_err_name(rc));
        return rc;
    }
    put_record(w);
    w->lease_until_us = now + w->lease_ms * 1000;
    return 0;
}

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
        int lr = renew_during_recovery(rc_);
        if (lr)
            return lr;
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

/* The owner epoch in segment seg's header; 1 when it has no valid header
 * (recovery then judges the segment), or a storage error. */
static int header_epoch(wal_storage *st, wal_lsn seg, uint64_t *epoch)
{
    uint8_t h[WAL_SEGMENT_HEADER];
    size_t got = 0;
    int rc = st->ops->pread(st, seg, 0, h, sizeof h, &got);
    if (rc)
        return rc;
    if (got < sizeof h || sk_crc32c(h, 36) != get32(h + 36) || memcmp(h, WAL_MAGIC, 8) != 0)
        return 1;
    *epoch = get64(h + 16);
    return 0;
}

/* Epochs only grow along the log: each owner starts a new segment where the
 * previous one's log ends. A segment whose header names an older epoch than
 * a segment before it was created by a fenced owner after a newer owner had
 * taken over (a create that reached the volume late); it holds nothing that
 * owner acknowledged, and is removed. A segment of an epoch newer than this
 * owner's means the owner files were tampered with. */
static int drop_fenced_segments(struct recovery *rc_, uint64_t *starts, size_t *n)
{
    wal *w = rc_->w;
    char name[WAL_SEGMENT_NAME_MAX];
    uint64_t maxep = 0;
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        uint64_t ep = 0;
        int hr = header_epoch(w->st, starts[i], &ep);
        if (hr < 0) {
            snprintf(rc_->why, rc_->whylen, "WAL segment %s: cannot read its header: %s",
                     seg_name(starts[i], name), sk_err_name(hr));
            return hr;
        }
        if (hr == 0 && ep > w->me.epoch) {
            snprintf(rc_->why, rc_->whylen,
                     "WAL segment %s was written by owner epoch %llu, newer than the epoch this "
                     "node claimed (%llu): the WAL's owner files were removed or replaced",
                     seg_name(starts[i], name), (unsigned long long)ep,
                     (unsigned long long)w->me.epoch);
            return SK_ERR_CORRUPT;
        }
        if (hr == 0 && ep < maxep) {
            SK_WARN("wal", "segment %s was written by owner epoch %llu after epoch %llu had taken "
                    "the WAL over: removing it",
                    seg_name(starts[i], name), (unsigned long long)ep, (unsigned long long)maxep);
            int rc = w->st->ops->discard(w->st, starts[i]);
            if (rc) {
                snprintf(rc_->why, rc_->whylen, "WAL segment %s: cannot remove it: %s",
                         seg_name(starts[i], name), sk_err_name(rc));
                return rc;
            }
            continue;
        }
        if (hr == 0)
            maxep = ep;
        starts[k++] = starts[i];
    }
    *n = k;
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
    rc = drop_fenced_segments(rc_, starts, &n);
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

/* ---- ownership: claiming the WAL ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The kernel's boot id: two owner records with the same one were written by
 * processes of the same running system. Zeros when unknown. */
static void read_boot_id(uint8_t out[16])
{
    memset(out, 0, 16);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f)
        return;
    char line[80];
    if (fgets(line, sizeof line, f)) {
        int k = 0;
        for (const char *c = line; *c && k < 32; c++) {
            int v = hexval(*c);
            if (v < 0)
                continue;
            out[k / 2] |= (uint8_t)(k % 2 ? v : v << 4);
            k++;
        }
    }
    fclose(f);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

struct claim {
    char *why;
    size_t whylen;
    uint8_t prev_local[16]; /* instance named by the local lock file before us */
    bool have_prev_local;
};

/* Takes the local lock file and reads which instance held it last. */
static int local_lock(wal *w, struct claim *c)
{
    const char *path = w->o.local_lock_path;
    if (!path)
        return 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(c->why, c->whylen, "cannot open the lock file %s: %s", path, strerror(errno));
        return SK_ERR_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK) {
            snprintf(c->why, c->whylen,
                     "another process holds the lock file %s: a skiffd already runs with this "
                     "data directory",
                     path);
            return SK_ERR_FENCED;
        }
        snprintf(c->why, c->whylen, "cannot lock %s: %s", path, strerror(e));
        return SK_ERR_IO;
    }
    uint8_t buf[16];
    if (pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf) {
        memcpy(c->prev_local, buf, sizeof buf);
        c->have_prev_local = true;
    }
    /* Named before the claim: a crash between the two leaves a file that
     * names an instance which may own nothing, which proves nothing. */
    if (pwrite(fd, w->me.instance, 16, 0) != 16 || ftruncate(fd, 16) != 0 || fdatasync(fd) != 0)
        SK_WARN("wal", "cannot write the lock file %s: %s", path, strerror(errno));
    w->lock_fd = fd;
    return 0;
}

/* Blocking lease renewal during a takeover wait. */
static void put_record(wal *w)
{
    uint8_t rec[OWNER_REC];
    w->me.renewed_ms = sk_now_ms();
    w->me.renewals++;
    owner_encode(rec, &w->me);
    int rc = w->st->ops->owner_put(w->st, w->me.epoch, rec, sizeof rec);
    if (rc)
        SK_WARN("wal", "cannot renew the lease of owner epoch %llu: %s",
                (unsigned long long)w->me.epoch, sk_err_name(rc));
}

/* Our epoch must be the newest, and our file must still exist. */
static int still_newest(wal *w, struct claim *c)
{
    uint64_t *eps = NULL;
    size_t n = 0;
    int rc = w->st->ops->owner_list(w->st, &eps, &n);
    if (rc) {
        snprintf(c->why, c->whylen, "cannot list the WAL's owner files: %s", sk_err_name(rc));
        return rc;
    }
    uint64_t last = n ? eps[n - 1] : 0;
    bool mine = false;
    for (size_t i = 0; i < n; i++)
        mine = mine || eps[i] == w->me.epoch;
    if (last != w->me.epoch || !mine) {
        snprintf(c->why, c->whylen,
                 "another owner (epoch %llu) claimed the WAL while this node (epoch %llu) took "
                 "it over",
                 (unsigned long long)last, (unsigned long long)w->me.epoch);
        free(eps);
        return SK_ERR_FENCED;
    }
    /* Older owner files have done their job: every older owner is fenced by
     * ours, or by the absence of its own. */
    for (size_t i = 0; i < n; i++) {
        if (eps[i] >= w->me.epoch)
            continue;
        int e = w->st->ops->owner_remove(w->st, eps[i]);
        if (e)
            SK_WARN("wal", "cannot remove the owner file of epoch %llu: %s",
                    (unsigned long long)eps[i], sk_err_name(e));
    }
    free(eps);
    return 0;
}

static int claim(wal *w, struct claim *c)
{
    wal_storage *st = w->st;
    struct owner_rec *me = &w->me;
    me->node = w->o.node_id;
    me->lease_ms = w->lease_ms;
    me->pid = (uint32_t)getpid();
    if (getrandom(me->instance, sizeof me->instance, 0) != (ssize_t)sizeof me->instance) {
        /* A weaker instance id still differs from any other process's. */
        uint64_t t = (uint64_t)sk_mono_us() ^ ((uint64_t)getpid() << 32);
        put64(me->instance, t);
        put64(me->instance + 8, (uint64_t)sk_now_ms());
    }
    read_boot_id(me->boot);
    if (gethostname(me->host, sizeof me->host) != 0)
        strcpy(me->host, "?");
    me->host[sizeof me->host - 1] = 0;

    int rc = local_lock(w, c);
    if (rc)
        return rc;
    bool exclusive = false;
    rc = st->ops->lock(st, &exclusive);
    if (rc == SK_ERR_FENCED && w->o.takeover_proof) {
        /* The holder may live on, stopped, but it acknowledges nothing. */
        rc = 0;
        exclusive = false;
    }
    if (rc) {
        snprintf(c->why, c->whylen,
                 rc == SK_ERR_FENCED
                     ? "another process holds the lock of this WAL's directory: a skiffd already "
                       "uses this WAL"
                     : "cannot lock the WAL's directory: %s",
                 sk_err_name(rc));
        return rc;
    }

    for (int attempt = 0;; attempt++) {
        uint64_t *eps = NULL;
        size_t n = 0;
        rc = st->ops->owner_list(st, &eps, &n);
        if (rc) {
            snprintf(c->why, c->whylen, "cannot list the WAL's owner files: %s",
                     sk_err_name(rc));
            return rc;
        }
        uint64_t last = n ? eps[n - 1] : 0;
        free(eps);
        struct owner_rec prev;
        memset(&prev, 0, sizeof prev);
        bool have = false;
        const char *proof = NULL;
        int64_t wait_ms = 0, age_ms = 0;
        if (last) {
            uint8_t buf[OWNER_REC];
            size_t got = 0;
            rc = st->ops->owner_read(st, last, buf, sizeof buf, &got);
            if (rc == SK_ERR_NOENT && attempt < 5)
                continue; /* removed by an owner that just took over: look again */
            if (rc) {
                snprintf(c->why, c->whylen, "cannot read the owner file of epoch %llu: %s",
                         (unsigned long long)last, sk_err_name(rc));
                return rc;
            }
            have = owner_decode(buf, got, &prev);
            age_ms = sk_now_ms() - prev.renewed_ms;
            if (w->o.takeover_proof)
                proof = w->o.takeover_proof;
            else if (exclusive)
                proof = "the lock of the WAL's directory proves it gone";
            else if (have && (prev.flags & OWNER_RELEASED))
                proof = "it released the WAL when it stopped";
            else if (have && c->have_prev_local &&
                     memcmp(prev.instance, c->prev_local, 16) == 0 && !all_zero(me->boot, 16) &&
                     memcmp(prev.boot, me->boot, 16) == 0)
                proof = "it ran on this system with the same lock file, which it no longer holds";
            else if (have && age_ms < prev.lease_ms) {
                snprintf(c->why, c->whylen,
                         "the WAL is owned by node %u (host %s, pid %u, owner epoch %llu), whose "
                         "lease was renewed %lld ms ago and lasts %lld ms: another skiffd uses "
                         "this WAL. Stop it first; if it is dead, start again once its lease "
                         "has expired",
                         prev.node, prev.host, prev.pid, (unsigned long long)prev.epoch,
                         (long long)age_ms, (long long)prev.lease_ms);
                return SK_ERR_FENCED;
            } else {
                int64_t lease = have ? prev.lease_ms : w->lease_ms;
                if (!have && lease < DEFAULT_LEASE_MS)
                    lease = DEFAULT_LEASE_MS;
                wait_ms = lease + lease / TAKEOVER_MARGIN_DIV;
            }
        }
        me->epoch = last + 1 > w->o.owner_epoch ? last + 1 : w->o.owner_epoch;
        me->renewed_ms = sk_now_ms();
        uint8_t rec[OWNER_REC];
        owner_encode(rec, me);
        rc = st->ops->owner_create(st, me->epoch, rec, sizeof rec);
        if (rc == SK_ERR_EXIST && attempt < 5)
            continue; /* another process claimed that epoch first: look again */
        if (rc) {
            snprintf(c->why, c->whylen, "cannot create the owner file of epoch %llu: %s",
                     (unsigned long long)me->epoch, sk_err_name(rc));
            return rc;
        }
        if (!last)
            SK_INFO("wal", "claimed owner epoch %llu of a WAL that had no owner",
                    (unsigned long long)me->epoch);
        else if (proof)
            SK_INFO("wal", "owner epoch %llu takes the WAL over from epoch %llu at once: %s",
                    (unsigned long long)me->epoch, (unsigned long long)last, proof);
        else
            SK_WARN("wal", "owner epoch %llu takes the WAL over from epoch %llu (node %u, host %s, "
                    "pid %u, last renewal %lld ms ago): waiting %lld ms, after which that owner "
                    "can acknowledge nothing more",
                    (unsigned long long)me->epoch, (unsigned long long)last, prev.node,
                    have ? prev.host : "?", prev.pid, (long long)age_ms, (long long)wait_ms);
        int64_t until = boot_us() + wait_ms * 1000;
        for (int64_t now = boot_us(); now < until; now = boot_us()) {
            int64_t step = until - now < w->renew_ms * 1000 ? until - now : w->renew_ms * 1000;
            struct timespec ts = {step / 1000000, (step % 1000000) * 1000};
            nanosleep(&ts, NULL);
            put_record(w);
        }
        int64_t check = boot_us();
        rc = still_newest(w, c);
        if (rc)
            return rc;
        w->lease_until_us = check + w->lease_ms * 1000;
        w->renew_start_us = check;
        w->exclusive = exclusive;
        if (exclusive && st->ops->sole_owner)
            st->ops->sole_owner(st, !w->o.no_direct_io);
        return 0;
    }
}

/* ---- open / close ---- */

static void release(wal *w);

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
    if (w->retry_ev)
        event_free(w->retry_ev);
    if (w->lease_ev)
        event_free(w->lease_ev);
    /* Last: from here on a restart on this host may take over at once. */
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    spares_free(w);
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
    w->lock_fd = -1;
    if (!w->o.segment_bytes)
        w->o.segment_bytes = DEFAULT_SEGMENT_BYTES;
    if (!w->o.max_pending_bytes)
        w->o.max_pending_bytes = DEFAULT_MAX_PENDING;
    w->lease_ms = o->lease_ms > 0 ? o->lease_ms : DEFAULT_LEASE_MS;
    w->renew_ms = w->lease_ms / 4 > 0 ? w->lease_ms / 4 : 1;
    w->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : DEFAULT_IO_TIMEOUT_MS;
    w->retry_ms = RETRY_MIN_MS;
    w->max_flying = st->ops->max_writes ? st->ops->max_writes(st) : 1;
    if (w->max_flying < 1)
        w->max_flying = 1;
    if (w->max_flying > MAX_FLYING)
        w->max_flying = MAX_FLYING;
    w->flush_ev = event_new(base, -1, 0, flush_cb, w);
    w->retry_ev = event_new(base, -1, 0, retry_cb, w);
    w->lease_ev = event_new(base, -1, EV_PERSIST, lease_cb, w);
    if (!w->flush_ev || !w->retry_ev || !w->lease_ev) {
        *err = SK_ERR_NOMEM;
        snprintf(why, whylen, "cannot create the WAL's events");
        wal_free(w);
        return NULL;
    }
    struct claim c = {.why = why, .whylen = whylen};
    int rc = claim(w, &c);
    if (rc) {
        *err = rc;
        wal_free(w);
        return NULL;
    }
    /* Segment headers name the epoch that wrote them. */
    w->o.owner_epoch = w->me.epoch;
    struct recovery rc_ = {.w = w, .replay_from = replay_from, .replay = replay, .arg = arg,
                           .why = why, .whylen = whylen};
    rc = recover(&rc_);
    if (rc) {
        *err = rc;
        release(w); /* nothing was written: the next start needs no waiting */
        wal_free(w);
        return NULL;
    }
    struct timeval tv = {w->renew_ms / 1000, (w->renew_ms % 1000) * 1000};
    event_add(w->lease_ev, &tv);
    SK_INFO("wal", "opened on %s as owner epoch %llu (lease %lld ms): %zu segments, LSN %llu to "
            "%llu",
            st->ops->name, (unsigned long long)w->me.epoch, (long long)w->lease_ms, w->nsegs,
            (unsigned long long)wal_start_lsn(w), (unsigned long long)w->end);
    *err = 0;
    return w;
}

/* A stopped owner says so on the volume: the next one needs no waiting. */
static void release(wal *w)
{
    /* Not while writes fail: a shutdown must not hang on a dead volume. */
    if (w->fenced || w->gave_up || busy(w) || w->renewing || !lease_ok(w) ||
        w->trouble_since_us)
        return;
    w->me.flags |= OWNER_RELEASED;
    put_record(w);
}

void wal_abandon(wal *w)
{
    if (!w || w->failed || busy(w) || w->dispatching)
        return;
    w->gave_up = true;
    wal_fail(w, SK_ERR_CLOSED);
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
    w->close_start_us = sk_mono_us();
    kick(w);
    while (busy(w) || w->removing || w->renewing || (w->head && !w->failed)) {
        if (w->head && !w->failed && !busy(w) && !ack_lease_ok(w)) {
            /* Past the owner's membership lease nothing can be acknowledged
             * any more: the next owner takes what reached the volume. */
            SK_WARN("wal", "closing with %zu bytes not written: the membership lease ran out",
                    w->pending);
            w->gave_up = true;
            break;
        }
        if (w->head && !w->failed &&
            sk_mono_us() - w->close_start_us >= w->io_timeout_ms * 1000) {
            SK_ERROR("wal", "closing with %zu bytes not durable: the volume has not taken them "
                     "for %lld ms",
                     w->pending, (long long)w->io_timeout_ms);
            w->gave_up = true;
            break;
        }
        if (event_base_loop(w->base, EVLOOP_ONCE) != 0) {
            SK_ERROR("wal", "wal_close cannot run the event loop; unsynced data is dropped");
            w->gave_up = true;
            break;
        }
    }
    release(w);
    wal_free(w);
}
